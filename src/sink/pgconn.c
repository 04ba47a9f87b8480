/*
 * pgconn.c — see pgconn.h.
 *
 * NOTES
 * - The dead-peer settings are handed to PQconnectStartParams before the user's "dbname" (the whole connection
 *   string, expanded): libpq lets later keywords override earlier ones, so anything the user wrote wins.
 * - PQconnectPoll ignores connect_timeout (libpq only applies it in its blocking calls), so the deadline is ours.
 * - PQERRORS_VERBOSE during the login makes libpq put the server's SQLSTATE into the message ("FATAL:  28P01: ..."),
 *   the only way a client can tell why a login failed; it is reset to the default once connected.
 */
#include "sink/pgconn.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sink/pgerror.h"
#include "util/clock.h"
#include "util/log.h"

#define PIECE (256 * 1024) /* bytes of COPY data handed to libpq at once */

void pgconn_error_clear(pgconn_error *err)
{
    if (err == NULL)
        return;
    err->status = APPLY_OK;
    err->sqlstate[0] = '\0';
    err->message[0] = '\0';
}

static void set_msg(pgconn *c, pgconn_error *err, apply_status st, const char *context, const char *msg)
{
    if (err == NULL)
        return;
    char clean[700];
    pgerror_message(msg, c ? c->conninfo : NULL, clean, sizeof clean);
    err->status = st;
    snprintf(err->message, sizeof err->message, "%.120s%s%s", context ? context : "", context ? ": " : "", clean);
}

void pgconn_set_error(pgconn *c, const PGresult *res, bool data_statement, pgconn_error *err, const char *context)
{
    if (err == NULL)
        return;
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    apply_status st = pgerror_classify_result(c ? c->pg : NULL, res, data_statement);
    snprintf(err->sqlstate, sizeof err->sqlstate, "%s", state ? state : "");
    const char *msg = res ? PQresultErrorMessage(res) : "";
    if (msg == NULL || msg[0] == '\0')
        msg = c && c->pg ? PQerrorMessage(c->pg) : "connection lost";
    if (msg == NULL || msg[0] == '\0')
        msg = "connection lost";
    set_msg(c, err, st, context, msg);
}

bool pgconn_wait(pgconn *c, bool for_write, const char *what, double since)
{
    struct pollfd pfd = {.fd = PQsocket(c->pg), .events = POLLIN | (for_write ? POLLOUT : 0)};
    if (pfd.fd < 0)
        return false;
    int slice = c->p.wait_slice_ms > 0 ? c->p.wait_slice_ms : 1000;
    for (;;) {
        int n = poll(&pfd, 1, slice);
        double waited = clock_s() - since;
        if (waited * 1000.0 >= slice && c->p.wait_hook != NULL && !c->p.wait_hook(c->p.wait_arg, what, waited)) {
            c->abandoned = true;
            return false;
        }
        if (n > 0)
            return true;
        if (n == 0)
            return true; /* a slice ended: the caller looks again */
        if (errno != EINTR)
            return false;
    }
}

/* Notices go to the debug log, except oplog2pg's own (schema.sql: a table left alone because oplog2pg did not make
 * it), which an operator must see; a FATAL outside any query (a terminated session, a server shutting down) comes
 * this way too, before the socket closes: it is kept in goodbye, so an idle connection's end is seen at once. */
static void notice_receiver(void *arg, const PGresult *res)
{
    pgconn *c = arg;
    const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
    char msg[300];
    pgerror_message(PQresultErrorMessage(res), NULL, msg, sizeof msg);
    if (sev != NULL && (strcmp(sev, "FATAL") == 0 || strcmp(sev, "PANIC") == 0))
        snprintf(c->goodbye, sizeof c->goodbye, "%s", msg);
    const char *text = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    if (text != NULL && strncmp(text, "oplog2pg: ", 10) == 0)
        log_warning("postgres: %s", msg);
    else
        log_debug("postgres: %s", msg);
}

pgconn *pgconn_connect(const pgconn_params *params, pgconn_error *err)
{
    pgconn_error_clear(err);
    pgconn *c = calloc(1, sizeof *c);
    if (c == NULL) {
        set_msg(NULL, err, APPLY_NOMEM, "connecting to PostgreSQL", "out of memory");
        return NULL;
    }
    c->p = *params;
    c->conninfo = strdup(params->conninfo ? params->conninfo : "");
    if (c->conninfo == NULL) {
        free(c);
        set_msg(NULL, err, APPLY_NOMEM, "connecting to PostgreSQL", "out of memory");
        return NULL;
    }
    c->p.conninfo = c->conninfo;
    int timeout = params->peer_timeout_s > 0 ? params->peer_timeout_s : 30;
    char idle[16], interval[16], count[16], user_timeout[24], ctimeout[16];
    int iv = timeout / 6 > 0 ? timeout / 6 : 1;
    snprintf(idle, sizeof idle, "%d", timeout / 2 > 0 ? timeout / 2 : 1);
    snprintf(interval, sizeof interval, "%d", iv);
    snprintf(count, sizeof count, "%d", 3);
    snprintf(user_timeout, sizeof user_timeout, "%d", timeout * 1000);
    snprintf(ctimeout, sizeof ctimeout, "%d", timeout);
    const char *keys[] = {"keepalives",
                          "keepalives_idle",
                          "keepalives_interval",
                          "keepalives_count",
                          "tcp_user_timeout",
                          "connect_timeout",
                          "fallback_application_name",
                          "dbname",
                          NULL};
    const char *values[] = {
        "1",         idle, interval, count, user_timeout, ctimeout, params->app_name ? params->app_name : "oplog2pg",
        c->conninfo, NULL};
    c->pg = PQconnectStartParams(keys, values, 1);
    if (c->pg == NULL) {
        set_msg(c, err, APPLY_NOMEM, "connecting to PostgreSQL", "out of memory");
        pgconn_close(c);
        return NULL;
    }
    PQsetErrorVerbosity(c->pg, PQERRORS_VERBOSE);
    double started = clock_s();
    PostgresPollingStatusType ps = PQstatus(c->pg) == CONNECTION_BAD ? PGRES_POLLING_FAILED : PGRES_POLLING_WRITING;
    while (ps != PGRES_POLLING_OK && ps != PGRES_POLLING_FAILED) {
        if (clock_s() - started > timeout) {
            char m[128];
            snprintf(m, sizeof m, "no answer within %d s (timeout)", timeout);
            set_msg(c, err, APPLY_RETRY, "connecting to PostgreSQL", m);
            pgconn_close(c);
            return NULL;
        }
        if (!pgconn_wait(c, ps == PGRES_POLLING_WRITING, "the connection", started)) {
            set_msg(c, err, APPLY_RETRY, "connecting to PostgreSQL",
                    c->abandoned ? "the attempt was given up (stopping)" : "waiting on the socket failed");
            pgconn_close(c);
            return NULL;
        }
        ps = PQconnectPoll(c->pg);
    }
    if (PQstatus(c->pg) != CONNECTION_OK) {
        char state[6] = "";
        apply_status st = pgerror_classify_connect(c->pg, state);
        set_msg(c, err, st, "cannot connect to PostgreSQL", PQerrorMessage(c->pg));
        if (err)
            snprintf(err->sqlstate, sizeof err->sqlstate, "%s", state);
        pgconn_close(c);
        return NULL;
    }
    PQsetErrorVerbosity(c->pg, PQERRORS_DEFAULT);
    PQsetNoticeReceiver(c->pg, notice_receiver, c);
    if (PQsetnonblocking(c->pg, 1) != 0) {
        set_msg(c, err, APPLY_RETRY, "connecting to PostgreSQL", PQerrorMessage(c->pg));
        pgconn_close(c);
        return NULL;
    }
    return c;
}

bool pgconn_cancel(pgconn *c, char *err, size_t errlen)
{
    PGcancel *cn = c != NULL && c->pg != NULL ? PQgetCancel(c->pg) : NULL;
    if (cn == NULL) {
        snprintf(err, errlen, "no connection to cancel on");
        return false;
    }
    bool ok = PQcancel(cn, err, (int)errlen) == 1;
    PQfreeCancel(cn);
    return ok;
}

void pgconn_close(pgconn *c)
{
    if (c == NULL)
        return;
    if (c->pg != NULL)
        PQfinish(c->pg);
    free(c->conninfo);
    free(c);
}

bool pgconn_flush(pgconn *c, const char *what, pgconn_error *err)
{
    double since = clock_s();
    for (;;) {
        int r = PQflush(c->pg);
        if (r == 0)
            return true;
        if (r < 0 || !pgconn_wait(c, true, what, since)) {
            pgconn_set_error(c, NULL, false, err, "sending to PostgreSQL");
            return false;
        }
        /* Read what arrived meanwhile, or the server may stall writing to us while we stall writing to it. */
        if (PQconsumeInput(c->pg) != 1) {
            pgconn_set_error(c, NULL, false, err, "sending to PostgreSQL");
            return false;
        }
    }
}

PGresult *pgconn_next_result(pgconn *c, const char *what)
{
    double since = clock_s();
    for (;;) {
        if (PQconsumeInput(c->pg) != 1)
            return NULL;
        if (!PQisBusy(c->pg))
            return PQgetResult(c->pg);
        if (PQflush(c->pg) < 0 || !pgconn_wait(c, false, what, since))
            return NULL;
    }
}

/* Reads every result of the statement just sent; keeps the first failure, or else the last result. */
static bool collect(pgconn *c, const char *what, PGresult **out, bool data_statement, pgconn_error *err)
{
    PGresult *keep = NULL, *res;
    bool ok = true;
    while ((res = pgconn_next_result(c, what)) != NULL) {
        ExecStatusType st = PQresultStatus(res);
        if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH) {
            /* Not expected here: end it so the connection stays usable. */
            if (st == PGRES_COPY_IN)
                PQputCopyEnd(c->pg, "unexpected COPY");
            PQclear(res);
            continue;
        }
        bool good = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_EMPTY_QUERY;
        if (!good && ok) {
            ok = false;
            pgconn_set_error(c, res, data_statement, err, NULL);
            PQclear(keep);
            keep = NULL;
        }
        if (ok) {
            PQclear(keep);
            keep = res;
        } else {
            PQclear(res);
        }
    }
    if (ok && PQstatus(c->pg) == CONNECTION_BAD) {
        ok = false;
        pgconn_set_error(c, NULL, data_statement, err, NULL);
    }
    if (ok && keep == NULL) {
        ok = false;
        pgconn_set_error(c, NULL, data_statement, err, NULL);
    }
    if (ok && out != NULL)
        *out = keep;
    else
        PQclear(keep);
    return ok;
}

bool pgconn_exec(pgconn *c, const char *sql, PGresult **out, bool data_statement, pgconn_error *err)
{
    return pgconn_exec_params(c, sql, 0, NULL, NULL, NULL, 0, out, data_statement, err);
}

bool pgconn_exec_params(pgconn *c, const char *sql, int n, const char *const *values, const int *lengths,
                        const int *formats, int result_format, PGresult **out, bool data_statement, pgconn_error *err)
{
    pgconn_error scratch;
    if (err == NULL)
        err = &scratch;
    pgconn_error_clear(err);
    if (out)
        *out = NULL;
    int sent = n == 0 && result_format == 0
                   ? PQsendQuery(c->pg, sql)
                   : PQsendQueryParams(c->pg, sql, n, NULL, values, lengths, formats, result_format);
    if (sent != 1) {
        pgconn_set_error(c, NULL, data_statement, err, "sending a statement");
        return false;
    }
    if (!pgconn_flush(c, "a statement to be sent", err))
        return false;
    bool ok = collect(c, "a statement's result", out, data_statement, err);
    if (!ok && err != NULL && err != &c->last)
        c->last = *err;
    return ok;
}

bool pgconn_copy_start(pgconn *c, const char *sql, pgconn_error *err)
{
    pgconn_error_clear(err);
    if (PQsendQuery(c->pg, sql) != 1) {
        pgconn_set_error(c, NULL, true, err, "starting a COPY");
        return false;
    }
    if (!pgconn_flush(c, "a COPY to start", err))
        return false;
    PGresult *res = pgconn_next_result(c, "a COPY to start");
    if (res != NULL && PQresultStatus(res) == PGRES_COPY_IN) {
        PQclear(res);
        return true;
    }
    pgconn_set_error(c, res, true, err, "starting a COPY");
    PQclear(res);
    /* Drain whatever else the statement returned. */
    while ((res = pgconn_next_result(c, "a COPY to start")) != NULL)
        PQclear(res);
    return false;
}

bool pgconn_copy_put(pgconn *c, const char *data, size_t len, pgconn_error *err)
{
    double since = clock_s();
    while (len > 0) {
        size_t n = len > PIECE ? PIECE : len;
        int r = PQputCopyData(c->pg, data, (int)n);
        if (r < 0) {
            pgconn_set_error(c, NULL, false, err, "sending COPY data");
            return false;
        }
        if (r == 0) {
            /* libpq's buffer is full: let it drain before handing more. */
            if (PQflush(c->pg) < 0 || !pgconn_wait(c, true, "COPY data to be sent", since) ||
                PQconsumeInput(c->pg) != 1) {
                pgconn_set_error(c, NULL, false, err, "sending COPY data");
                return false;
            }
            continue;
        }
        data += n;
        len -= n;
        /* Keep libpq's output buffer small: once a piece is queued, send it. On a non-blocking connection PQflush
         * answers 1 while the socket is full, and PQputCopyData would go on growing the buffer (it returns 0 only
         * when the buffer cannot grow), up to the whole run: wait for the socket instead. */
        int f;
        while ((f = PQflush(c->pg)) == 1) {
            if (!pgconn_wait(c, true, "COPY data to be sent", since) || PQconsumeInput(c->pg) != 1) {
                pgconn_set_error(c, NULL, false, err, "sending COPY data");
                return false;
            }
        }
        if (f < 0) {
            pgconn_set_error(c, NULL, false, err, "sending COPY data");
            return false;
        }
    }
    return true;
}

bool pgconn_copy_end(pgconn *c, pgconn_error *err)
{
    double since = clock_s();
    int r;
    while ((r = PQputCopyEnd(c->pg, NULL)) == 0) {
        if (!pgconn_wait(c, true, "the end of a COPY to be sent", since)) {
            r = -1;
            break;
        }
    }
    if (r < 0) {
        pgconn_set_error(c, NULL, false, err, "ending a COPY");
        return false;
    }
    if (!pgconn_flush(c, "the end of a COPY to be sent", err))
        return false;
    return collect(c, "the COPY's result", NULL, true, err);
}

void sink_row_pos(const PGresult *res, int row, int col, op_pos *out)
{
    out->secs = (uint32_t)strtoul(PQgetvalue(res, row, col), NULL, 10);
    out->inc = (uint32_t)strtoul(PQgetvalue(res, row, col + 1), NULL, 10);
    out->term = PQgetisnull(res, row, col + 2) ? -1 : strtoll(PQgetvalue(res, row, col + 2), NULL, 10);
}

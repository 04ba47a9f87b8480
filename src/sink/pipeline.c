/*
 * pipeline.c — the sink's libpq pipeline (see pg_internal.h): every statement sent is a pending item (kind, table,
 * oplog position) so that a result, above all an error, is matched to the op that caused it; sends never wait for
 * answers, and a group waits on the network once, at its commit.
 */
#include "pg_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sink/pgerror.h"
#include "util/clock.h"
#include "util/utf8.h"

const char *const sink_pending_what[] = {
    "BEGIN",
    "preparing a statement",
    "insert",
    "update",
    "delete",
    "DDL",
    "savepoint",
    "savepoint release",
    "checkpoint update",
    "COMMIT",
    "sync",
    "recording a dead letter",
    "catalog call",
    "insert",
    "read",
};

/* ---------------------------------------------------------------------------------------------------------------- */
/* the pipeline */

/* A send while a COPY holds the connection: the layer above ends its COPY before anything else goes out (it alone
 * knows what a COPY that met a key must do next), so this is a fault in oplog2pg. Nothing is sent, and the session
 * stops rather than write out of order. */
static bool refuse_in_copy(sink *s, const char *what)
{
    if (!s->in_copy)
        return false;
    sink_set_err(s, APPLY_UNRECORDABLE, NULL, "%s while a COPY held the connection (a bug); nothing more is sent",
                 what);
    return true;
}

bool pipe_push_pending(sink *s, pending_kind kind, const table *t, const op_pos *pos)
{
    if (refuse_in_copy(s, sink_pending_what[kind]))
        return false;
    if (s->pend_tail == s->pend_cap) {
        if (s->pend_head > 0) {
            memmove(s->pend, s->pend + s->pend_head, (s->pend_tail - s->pend_head) * sizeof *s->pend);
            s->pend_tail -= s->pend_head;
            s->pend_head = 0;
        } else {
            size_t cap = s->pend_cap * 2;
            pending *p = realloc(s->pend, cap * sizeof *p);
            if (p == NULL) {
                sink_set_err(s, APPLY_NOMEM, NULL, "out of memory queueing a statement");
                return false;
            }
            s->pend = p;
            s->pend_cap = cap;
        }
    }
    pending *p = &s->pend[s->pend_tail++];
    p->kind = kind;
    p->t = t;
    p->answered = false;
    if (pos)
        p->pos = *pos;
    else
        memset(&p->pos, 0, sizeof p->pos);
    return true;
}

/* A plain insert (pg.c, insert_rows_pipelined) met a _id already there: not a refusal, a replayed row. The group is
 * lost; the keep point moves to the newest entry sent so far, so that the group applied again from the checkpoint
 * sends upserts up to there, and the caller rewinds (APPLY_REWIND). */
static void rewind_for_existing(sink *s, const pending *p, const char *state, const char *where)
{
    op_pos far = p->pos;
    for (size_t i = s->pend_head; i < s->pend_tail; i++) {
        if (op_pos_cmp(&s->pend[i].pos, &far) > 0)
            far = s->pend[i].pos;
    }
    sink_keep_rows_until(s, &far);
    s->stats.rewinds++;
    sink_set_err(s, APPLY_REWIND, state, "an insert into %s.%s (oplog entry %s) met an existing _id", p->t->db,
                 p->t->coll, where);
}

/* One result for the item at the head of the queue. */
static void take_result(sink *s, PGresult *res)
{
    pending *p = &s->pend[s->pend_head];
    ExecStatusType st = PQresultStatus(res);

    p->answered = true;
    if (st == PGRES_PIPELINE_ABORTED)
        return; /* skipped after an earlier error, which was recorded */
    if (st == PGRES_FATAL_ERROR) {
        char where[32];
        sink_fmt_pos(&p->pos, where, sizeof where);
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        if (p->kind == P_INSERT_NEW && p->t != NULL && state != NULL && strcmp(state, "23505") == 0 &&
            PQstatus(s->conn) != CONNECTION_BAD) {
            rewind_for_existing(s, p, state, where);
            return;
        }
        apply_status cls = pgerror_classify_result(s->conn, res, sink_is_data_kind(p->kind));
        const char *advice = cls == APPLY_CONFIG ? pgerror_advice(state) : "";
        char msg[700];
        pgerror_message(PQresultErrorMessage(res), NULL, msg, sizeof msg);
        if (p->t != NULL)
            sink_set_err_at(s, &p->pos, cls, state, "%s on %s.%s (oplog entry %s) failed: [%s] %s%s%s",
                            sink_pending_what[p->kind], p->t->db, p->t->coll, where, state ? state : "?", msg,
                            advice[0] ? "; " : "", advice);
        else
            sink_set_err_at(s, &p->pos, cls, state, "%s (oplog entry %s) failed: [%s] %s%s%s",
                            sink_pending_what[p->kind], where, state ? state : "?", msg, advice[0] ? "; " : "", advice);
    }
}

/* Read every result that has arrived, without blocking. Returns false if the connection broke. */
bool pipe_read_ready(sink *s)
{
    if (PQconsumeInput(s->conn) != 1) {
        sink_set_err(s, APPLY_RETRY, NULL, "lost the PostgreSQL connection: %s", PQerrorMessage(s->conn));
        return false;
    }
    while (s->pend_head < s->pend_tail && !PQisBusy(s->conn)) {
        PGresult *res = PQgetResult(s->conn);
        pending *p = &s->pend[s->pend_head];
        if (p->kind == P_SYNC) {
            if (res == NULL)
                continue; /* tolerate a stray end-of-results marker before the sync */
            if (PQresultStatus(res) == PGRES_PIPELINE_SYNC)
                s->pend_head++;
            else
                take_result(s, res);
            PQclear(res);
            continue;
        }
        if (res == NULL) {
            s->pend_head++; /* this statement's results are complete */
            continue;
        }
        if (p->kind == P_READ && PQresultStatus(res) == PGRES_TUPLES_OK) {
            p->answered = true;
            PQclear(s->read_res);
            s->read_res = res; /* for pipe_read */
            continue;
        }
        take_result(s, res);
        PQclear(res);
    }
    if (PQstatus(s->conn) == CONNECTION_BAD) {
        sink_set_err(s, APPLY_RETRY, NULL, "lost the PostgreSQL connection: %s", PQerrorMessage(s->conn));
        return false;
    }
    return true;
}

/* Asks PostgreSQL, on a side connection, what our backend waits for and who blocks it (pg_stat_activity,
 * pg_blocking_pids), into s->wait_note. Best effort: quietly nothing when it cannot. */
static void probe_wait(sink *s)
{
    s->probed_at = clock_s();
    if (s->probe == NULL) {
        pgconn_params pp = {.conninfo = s->conninfo, .app_name = "oplog2pg-probe", .peer_timeout_s = 5};
        pgconn_error e;
        s->probe = pgconn_connect(&pp, &e);
        if (s->probe == NULL)
            return;
        pgconn_exec(s->probe, "SET statement_timeout = 2000", NULL, false, &e);
    }
    char pid[16];
    snprintf(pid, sizeof pid, "%d", PQbackendPID(s->conn));
    const char *values[1] = {pid};
    PGresult *res = NULL;
    pgconn_error e;
    if (!pgconn_exec_params(s->probe,
                            "SELECT coalesce(a.wait_event_type || ':' || a.wait_event, a.state, '?'), "
                            "(SELECT string_agg(b.pid || ' (' || coalesce(nullif(b.application_name, ''), "
                            "b.usename::text, '?') || ', ' || coalesce(b.state, '?') || ')', ', ') "
                            "FROM pg_stat_activity b WHERE b.pid = ANY (pg_blocking_pids(a.pid))) "
                            "FROM pg_stat_activity a WHERE a.pid = $1",
                            1, values, NULL, NULL, 0, &res, false, &e) ||
        PQntuples(res) != 1) {
        PQclear(res);
        pgconn_close(s->probe);
        s->probe = NULL;
        return;
    }
    char raw[300];
    if (PQgetisnull(res, 0, 1))
        snprintf(raw, sizeof raw, "PostgreSQL reports %s", PQgetvalue(res, 0, 0));
    else
        snprintf(raw, sizeof raw, "PostgreSQL reports %s, blocked by pid %s", PQgetvalue(res, 0, 0),
                 PQgetvalue(res, 0, 1));
    utf8_sanitize(raw, strlen(raw), s->wait_note, sizeof s->wait_note);
    PQclear(res);
}

/* What the sink waits for, for the wait hook: the statements not answered yet (PostgreSQL answers a pipeline only
 * when it reaches the Sync, so which one blocks cannot be told from here), and, once the wait is long, what the
 * server says about it. */
static void waiting_for(sink *s, char *buf, size_t len, double waited)
{
    size_t i = s->pend_head, open = 0;
    while (i < s->pend_tail && s->pend[i].answered)
        i++;
    for (size_t k = i; k < s->pend_tail; k++)
        open += s->pend[k].kind != P_SYNC && !s->pend[k].answered;
    if (waited >= 3.0 && clock_s() - s->probed_at >= 5.0)
        probe_wait(s);
    const char *note = waited >= 3.0 && s->wait_note[0] ? s->wait_note : NULL;
    if (i >= s->pend_tail || open == 0) {
        snprintf(buf, len, "statements to be sent%s%s", note ? "; " : "", note ? note : "");
        return;
    }
    const pending *p = &s->pend[i];
    char first[200];
    if (p->t != NULL)
        snprintf(first, sizeof first, "the %s on %s.%s", sink_pending_what[p->kind], p->t->db, p->t->coll);
    else
        snprintf(first, sizeof first, "the %s", sink_pending_what[p->kind]);
    if (open == 1)
        snprintf(buf, len, "%s%s%s", first, note ? "; " : "", note ? note : "");
    else
        snprintf(buf, len, "%zu statements from %s on%s%s", open, first, note ? "; " : "", note ? note : "");
}

/* Push output and collect results. With `until` set, keep going until at most that many items remain pending, and
 * until at most `unsent` bytes wait in libpq's buffer. */
bool pipe_pump(sink *s, size_t until, size_t unsent)
{
    double since = clock_s();
    char what[600];
    for (;;) {
        int fr = PQflush(s->conn);
        if (fr < 0) {
            sink_set_err(s, APPLY_RETRY, NULL, "sending to PostgreSQL: %s", PQerrorMessage(s->conn));
            return false;
        }
        if (fr == 0)
            s->unflushed = 0;
        if (!pipe_read_ready(s))
            return false;
        if ((fr == 0 || s->unflushed <= unsent) && s->pend_tail - s->pend_head <= until)
            return true;
        waiting_for(s, what, sizeof what, clock_s() - since);
        if (!pgconn_wait(s->c, fr == 1, what, since)) {
            sink_set_err(s, APPLY_RETRY, NULL, "waiting for PostgreSQL: %s", strerror(errno));
            return false;
        }
    }
}

/* Send a Sync and wait for every outstanding result. */
sink_status pipe_drain(sink *s)
{
    if (refuse_in_copy(s, "a wait for the pipeline"))
        return s->failed;
    if (s->failed != APPLY_OK)
        return s->failed;
    if (s->pend_head == s->pend_tail)
        return APPLY_OK; /* nothing outstanding: no round trip */
    if (PQpipelineSync(s->conn) != 1) {
        sink_set_err(s, APPLY_RETRY, NULL, "sending a sync: %s", PQerrorMessage(s->conn));
        return s->failed;
    }
    if (!pipe_push_pending(s, P_SYNC, NULL, NULL))
        return s->failed;
    pipe_pump(s, 0, 0);
    return s->failed;
}

/* After a send of `bytes`: opportunistic progress, and bounds on what waits unanswered and unsent. */
sink_status pipe_after_send(sink *s, bool ok, size_t bytes)
{
    if (!ok) {
        sink_set_err(s, APPLY_RETRY, NULL, "queueing a statement: %s", PQerrorMessage(s->conn));
        return s->failed;
    }
    s->unflushed += bytes;
    if (!pipe_pump(s, MAX_PENDING, SINK_PIPE_BYTES))
        return s->failed;
    if (s->cfg.per_op)
        return pipe_drain(s); /* the baseline: wait for every statement */
    return s->failed;
}

sink_status pipe_send_simple(sink *s, pending_kind kind, const table *t, const char *sql, const op_pos *pos)
{
    if (!pipe_push_pending(s, kind, t, pos))
        return s->failed;
    return pipe_after_send(s, PQsendQueryParams(s->conn, sql, 0, NULL, NULL, NULL, NULL, 0) == 1, strlen(sql));
}

bool pipe_read(sink *s, const table *t, const char *sql, int n, const char *const *values, const int *lengths,
               const int *formats, const op_pos *pos, PGresult **out)
{
    *out = NULL;
    if (s->failed != APPLY_OK || !pipe_push_pending(s, P_READ, t, pos))
        return false;
    PQclear(s->read_res);
    s->read_res = NULL;
    bool sent = PQsendQueryParams(s->conn, sql, n, NULL, values, lengths, formats, 0) == 1;
    if (pipe_after_send(s, sent, strlen(sql) + 64) != APPLY_OK)
        return false;
    /* Without a Sync the server keeps its answers until its buffer fills: ask it to send them now. */
    if (PQsendFlushRequest(s->conn) != 1) {
        sink_set_err(s, APPLY_RETRY, NULL, "sending a flush request: %s", PQerrorMessage(s->conn));
        return false;
    }
    if (!pipe_pump(s, 0, 0) || s->failed != APPLY_OK)
        return false;
    if (s->read_res == NULL) {
        sink_set_err(s, APPLY_RETRY, NULL, "a read in the pipeline came back without rows");
        return false;
    }
    *out = s->read_res;
    s->read_res = NULL;
    return true;
}

bool pipe_exec(sink *s, const char *sql, int n, const char *const *values, PGresult **out, const char *what)
{
    pgconn_error e;
    if (pgconn_exec_params(s->c, sql, n, values, NULL, NULL, 0, out, false, &e))
        return true;
    sink_set_err(s, e.status, e.sqlstate, "%s: %s", what, e.message);
    return false;
}

bool pipe_init(sink *s)
{
    s->pend_cap = 1024;
    s->pend = malloc(s->pend_cap * sizeof *s->pend);
    return s->pend != NULL;
}

void pipe_free(sink *s)
{
    pipe_attach(s, NULL);
    free(s->pend);
    s->pend = NULL;
}

void pipe_attach(sink *s, pgconn *c)
{
    pgconn_close(s->probe);
    s->probe = NULL;
    s->wait_note[0] = '\0';
    if (s->c != c)
        pgconn_close(s->c);
    s->c = c;
    s->conn = c != NULL ? c->pg : NULL;
    s->in_txn = false;
    s->in_copy = false; /* a COPY left open ends with its connection */
    s->pend_head = s->pend_tail = 0;
    s->unflushed = 0;
    PQclear(s->read_res);
    s->read_res = NULL;
}

sink_status pipe_commit(sink *s, const op_pos *pos)
{
    if (pipe_send_simple(s, P_COMMIT, NULL, "COMMIT", pos) != APPLY_OK)
        return s->failed;
    s->in_txn = false;
    return APPLY_OK;
}

sink_status pipe_copy_begin(sink *s)
{
    if (pipe_drain(s) != APPLY_OK)
        return s->failed;
    if (PQexitPipelineMode(s->conn) != 1) {
        sink_set_err(s, APPLY_RETRY, NULL, "leaving pipeline mode: %s", PQerrorMessage(s->conn));
        return s->failed;
    }
    s->in_copy = true;
    return APPLY_OK;
}

sink_status pipe_copy_done(sink *s)
{
    if (PQenterPipelineMode(s->conn) != 1) {
        sink_set_err(s, APPLY_RETRY, NULL, "entering pipeline mode: %s", PQerrorMessage(s->conn));
        return s->failed;
    }
    s->in_copy = false;
    return APPLY_OK;
}

sink_status pipe_begin_if_needed(sink *s)
{
    if (s->failed != APPLY_OK)
        return s->failed;
    if (s->conn == NULL) {
        sink_set_err(s, APPLY_RETRY, NULL, "not connected to PostgreSQL");
        return s->failed;
    }
    if (s->in_txn)
        return APPLY_OK;
    s->in_txn = true;
    return pipe_send_simple(s, P_BEGIN, NULL, "BEGIN", NULL);
}

int sink_socket(const sink *s)
{
    return s->conn != NULL ? PQsocket(s->conn) : -1;
}

int sink_backend_pid(const sink *s)
{
    return s->conn != NULL ? PQbackendPID(s->conn) : 0;
}

bool sink_cancel(sink *s, char *err, size_t errlen)
{
    return pgconn_cancel(s->c, err, errlen);
}

sink_status sink_check_idle(sink *s)
{
    if (s->conn == NULL)
        return APPLY_RETRY;
    if (s->in_copy) {
        /* A COPY is open: the server says nothing during one unless it fails, and what it says is read at its end;
         * only a lost connection matters now. */
        if (PQconsumeInput(s->conn) != 1 || PQstatus(s->conn) == CONNECTION_BAD || s->c->goodbye[0] != '\0')
            sink_set_err(s, APPLY_RETRY, NULL, "the PostgreSQL connection ended during a COPY: %s",
                         s->c->goodbye[0] ? s->c->goodbye : PQerrorMessage(s->conn));
        return s->failed;
    }
    if (s->pend_head < s->pend_tail) {
        pipe_read_ready(s); /* results on their way: take what came */
        return s->failed;
    }
    /* PQisBusy parses what arrived: a FATAL outside any query reaches pgconn's notice receiver (goodbye). */
    bool ok = PQconsumeInput(s->conn) == 1;
    PGresult *res = ok && !PQisBusy(s->conn) ? PQgetResult(s->conn) : NULL;
    if (!ok || PQstatus(s->conn) == CONNECTION_BAD || s->c->goodbye[0] != '\0' || res != NULL) {
        char msg[600];
        pgerror_message(s->c->goodbye[0]                              ? s->c->goodbye
                        : res != NULL && PQresultErrorMessage(res)[0] ? PQresultErrorMessage(res)
                                                                      : PQerrorMessage(s->conn),
                        NULL, msg, sizeof msg);
        sink_set_err(s, APPLY_RETRY, NULL, "the idle PostgreSQL connection ended: %s",
                     msg[0] ? msg : "unexpected data");
    }
    PQclear(res);
    return s->failed;
}

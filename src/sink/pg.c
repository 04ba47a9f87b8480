/*
 * pg.c — the PostgreSQL sink (see pg.h for what it guarantees).
 *
 * NOTES
 * The connection stays in libpq pipeline mode, non-blocking, between commits. Every statement sent is recorded in a
 * queue of pending items (kind, table, oplog position) so that a result, and above all an error, can be matched to the
 * op that caused it. pump() pushes output and reads whatever results have arrived without waiting; drain() sends a
 * Sync and waits until every pending item is answered. A group therefore waits on the network once, at its commit.
 *
 * Long insert runs leave the pipeline: drain (which also sets a savepoint), stream the run with
 * COPY ... (FORMAT binary), and come back. A unique violation in the COPY rolls back to the savepoint and the run is
 * re-sent as pipelined upserts: a replay of inserts that are already there (after an initial copy, or a crash
 * between COPY and commit that PostgreSQL rolled back anyway) never stops the stream.
 *
 * After any error the group is lost (the transaction is aborted); the caller disconnects and resumes from the
 * committed checkpoint, so the table cache and prepared statements are simply rebuilt on the next connection.
 */
#include "sink/pg.h"

#include <errno.h>
#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map/ejson.h"
#include "map/names.h"
#include "sink/pgerror.h"
#include "sql_embed.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/strbuf.h"
#include "util/utf8.h"

#define PG_MAX_IDENT    63    /* NAMEDATALEN - 1: longer names would be truncated by PostgreSQL */
#define MAX_PENDING     20000 /* results outstanding before a send waits for some to arrive */
#define SAVEPOINT_NAME  "oplog2pg_copy"
#define GUARD_NAME      "oplog2pg_op"
#define SINK_COPY_BYTES (1024 * 1024) /* runs this large go by COPY, however few their rows */

typedef enum {
    P_BEGIN,
    P_PREPARE,
    P_INSERT,
    P_UPDATE,
    P_DELETE,
    P_DDL,
    P_SAVEPOINT,
    P_RELEASE,
    P_CKPT,
    P_COMMIT,
    P_SYNC,
    P_DEAD_LETTER,
    P_CATALOG,
} pending_kind;

static const char *const pending_what[] = {
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
};

/* Whether a statement of this kind writes an op's own data (see pgerror_classify). */
static bool is_data_kind(pending_kind k)
{
    return k == P_INSERT || k == P_UPDATE || k == P_DELETE || k == P_DDL;
}

typedef struct table {
    char *db, *coll; /* the MongoDB namespace */
    pg_name name;    /* its schema and table (map/names.h) */
    char *qname;     /* "schema"."table", quoted */
    unsigned id;     /* statement names: i<id>, u<id>, d<id> */
    bool ready;      /* schema, table and statements sent on this connection */
} table;

typedef struct {
    pending_kind kind;
    const table *t;
    op_pos pos;
    bool answered; /* a result came (its end-of-results marker may still be due) */
} pending;

struct sink {
    sink_config cfg;
    char *conninfo, *service;
    pgconn *c;
    PGconn *conn;   /* c->pg */
    char owner[64]; /* fence token written into the checkpoint row */
    bool in_txn;    /* BEGIN sent for the open group */
    bool ckpt_prepared;
    bool guarded; /* a per-op guard savepoint is open (sink_guard_begin) */
    int have_ckpt;
    op_pos ckpt;

    pending *pend;
    size_t pend_head, pend_tail, pend_cap;
    size_t unflushed; /* bytes handed to libpq since its buffer was last seen empty */

    table **tables;
    size_t ntables, tables_cap;
    unsigned next_table_id;

    sink_status failed;  /* first failure in the current pipeline, reported at drain */
    pgconn *probe;       /* a side connection that asks pg_stat_activity what a long wait is about */
    double probed_at;    /* clock_s() of the last probe */
    char wait_note[300]; /* what the server said about the wait */
    char err[1024];
    char err_state[6]; /* SQLSTATE of the first failure, "" when it was not PostgreSQL's */
    sink_stats stats;
};

/* ---------------------------------------------------------------------------------------------------------------- */
/* errors */

static void set_err(sink *s, sink_status st, const char *state, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void set_err(sink *s, sink_status st, const char *state, const char *fmt, ...)
{
    if (s->failed != APPLY_OK)
        return; /* keep the first, which is the cause */
    va_list ap;
    va_start(ap, fmt);
    char raw[sizeof s->err];
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    size_t n = strlen(raw);
    while (n > 0 && (raw[n - 1] == '\n' || raw[n - 1] == ' '))
        raw[--n] = '\0';
    utf8_sanitize(raw, n, s->err, sizeof s->err);
    snprintf(s->err_state, sizeof s->err_state, "%s", state ? state : "");
    s->failed = st;
}

static void fmt_pos(const op_pos *pos, char *buf, size_t len)
{
    if (pos == NULL || (pos->secs == 0 && pos->inc == 0))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%u:%u", pos->secs, pos->inc);
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* construction */

sink *sink_new(const sink_config *cfg)
{
    sink *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->cfg = *cfg;
    s->conninfo = strdup(cfg->conninfo ? cfg->conninfo : "");
    s->service = strdup(cfg->service ? cfg->service : "default");
    s->pend_cap = 1024;
    s->pend = malloc(s->pend_cap * sizeof *s->pend);
    if (s->conninfo == NULL || s->service == NULL || s->pend == NULL) {
        sink_free(s);
        return NULL;
    }
    if (s->cfg.copy_min_rows == 0)
        s->cfg.copy_min_rows = 32;
    s->cfg.conninfo = s->conninfo;
    s->cfg.service = s->service;
    return s;
}

static void tables_clear(sink *s)
{
    for (size_t i = 0; i < s->ntables; i++) {
        free(s->tables[i]->db);
        free(s->tables[i]->coll);
        free(s->tables[i]->qname);
        free(s->tables[i]);
    }
    s->ntables = 0;
}

void sink_free(sink *s)
{
    if (s == NULL)
        return;
    sink_disconnect(s);
    tables_clear(s);
    free(s->tables);
    free(s->pend);
    free(s->conninfo);
    free(s->service);
    free(s);
}

const char *sink_error(const sink *s)
{
    return s->err;
}

const char *sink_error_state(const sink *s)
{
    return s->err_state;
}

const sink_stats *sink_get_stats(const sink *s)
{
    return &s->stats;
}

bool sink_connected(const sink *s)
{
    return s->conn != NULL && PQstatus(s->conn) == CONNECTION_OK;
}

void sink_disconnect(sink *s)
{
    pgconn_close(s->probe);
    s->probe = NULL;
    s->wait_note[0] = '\0';
    pgconn_close(s->c);
    s->c = NULL;
    s->conn = NULL;
    s->in_txn = false;
    s->ckpt_prepared = false;
    s->guarded = false;
    s->have_ckpt = -1;
    s->pend_head = s->pend_tail = 0;
    s->unflushed = 0;
    tables_clear(s); /* prepared statements and "created" marks belong to the connection */
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* connecting (outside pipeline mode) */

static bool exec_sync(sink *s, const char *sql, int n, const char *const *values, PGresult **out, const char *what)
{
    pgconn_error e;
    if (pgconn_exec_params(s->c, sql, n, values, NULL, NULL, 0, out, false, &e))
        return true;
    set_err(s, e.status, e.sqlstate, "%s: %s", what, e.message);
    return false;
}

bool sink_install_schema(pgconn *c, pgconn_error *err)
{
    /* One installer at a time: CREATE OR REPLACE FUNCTION and CREATE ... IF NOT EXISTS are not safe against a
     * concurrent run of themselves (two daemons starting together, a copy beside its daemon). */
    if (!pgconn_exec(c, "BEGIN; SELECT pg_advisory_xact_lock(hashtextextended('oplog2pg.schema', 0))", NULL, false,
                     err))
        return false;
    if (pgconn_exec(c, oplog2pg_sql_schema, NULL, false, err) &&
        pgconn_exec(c, oplog2pg_sql_update_functions, NULL, false, err) && pgconn_exec(c, "COMMIT", NULL, false, err))
        return true;
    pgconn_error ignored;
    pgconn_exec(c, "ROLLBACK", NULL, false, &ignored);
    return false;
}

static bool install_schema(sink *s)
{
    pgconn_error e;
    if (sink_install_schema(s->c, &e))
        return true;
    set_err(s, e.status, e.sqlstate, "installing the oplog2pg schema: %s", e.message);
    return false;
}

sink_status sink_connect(sink *s)
{
    sink_disconnect(s);
    s->failed = APPLY_OK;
    s->err[0] = '\0';
    s->err_state[0] = '\0';

    pgconn_params pp = {.conninfo = s->conninfo,
                        .app_name = "oplog2pg",
                        .peer_timeout_s = s->cfg.peer_timeout_s,
                        .wait_hook = s->cfg.wait_hook,
                        .wait_arg = s->cfg.wait_arg,
                        .wait_slice_ms = s->cfg.wait_slice_ms};
    pgconn_error e;
    s->c = pgconn_connect(&pp, &e);
    if (s->c == NULL) {
        const char *advice = pgerror_advice(e.sqlstate);
        set_err(s, e.status, e.sqlstate, "%s%s%s", e.message, advice[0] ? "; " : "", advice);
        return s->failed;
    }
    s->conn = s->c->pg;
    PGresult *res = NULL;
    if (PQserverVersion(s->conn) < 130000) {
        set_err(s, APPLY_CONFIG, NULL, "PostgreSQL %d is too old: oplog2pg needs 13 or later",
                PQserverVersion(s->conn));
        goto fail;
    }
    if (!exec_sync(s, "SET synchronous_commit = on; SET client_min_messages = warning", 0, NULL, NULL,
                   "setting session options") ||
        !install_schema(s))
        goto fail;

    /* Fence: one daemon per service. The advisory lock lives as long as this session. */
    const char *params[1] = {s->service};
    if (!exec_sync(s, "SELECT pg_try_advisory_lock(hashtextextended('oplog2pg.service:' || $1, 0))", 1, params, &res,
                   "taking the service lock"))
        goto fail;
    bool locked = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    res = NULL;
    if (!locked) {
        set_err(s, APPLY_FENCED, NULL,
                "another oplog2pg is running for service '%s' on this database (it holds the service lock); "
                "stop it, or give this one a different [replication] service",
                s->service);
        goto fail;
    }
    if (!exec_sync(s,
                   "INSERT INTO oplog2pg.checkpoint (service, owner) VALUES ($1, gen_random_uuid()) "
                   "ON CONFLICT (service) DO UPDATE SET owner = excluded.owner "
                   "RETURNING owner, ts_sec, ts_inc, term",
                   1, params, &res, "claiming the checkpoint row"))
        goto fail;
    snprintf(s->owner, sizeof s->owner, "%s", PQgetvalue(res, 0, 0));
    if (PQgetisnull(res, 0, 1)) {
        s->have_ckpt = 0;
    } else {
        s->ckpt.secs = (uint32_t)strtoul(PQgetvalue(res, 0, 1), NULL, 10);
        s->ckpt.inc = (uint32_t)strtoul(PQgetvalue(res, 0, 2), NULL, 10);
        s->ckpt.term = PQgetisnull(res, 0, 3) ? -1 : strtoll(PQgetvalue(res, 0, 3), NULL, 10);
        s->have_ckpt = 1;
    }
    PQclear(res);
    res = NULL;

    if (PQenterPipelineMode(s->conn) != 1) {
        set_err(s, APPLY_RETRY, NULL, "entering pipeline mode: %s", PQerrorMessage(s->conn));
        goto fail;
    }
    return APPLY_OK;

fail : {
    sink_status st = s->failed;
    PQclear(res);
    pgconn_close(s->c);
    s->c = NULL;
    s->conn = NULL;
    return st;
}
}

int sink_read_checkpoint(sink *s, op_pos *out)
{
    if (s->conn == NULL)
        return -1;
    if (s->have_ckpt == 1)
        *out = s->ckpt;
    return s->have_ckpt;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* the pipeline */

static bool push_pending(sink *s, pending_kind kind, const table *t, const op_pos *pos)
{
    if (s->pend_tail == s->pend_cap) {
        if (s->pend_head > 0) {
            memmove(s->pend, s->pend + s->pend_head, (s->pend_tail - s->pend_head) * sizeof *s->pend);
            s->pend_tail -= s->pend_head;
            s->pend_head = 0;
        } else {
            size_t cap = s->pend_cap * 2;
            pending *p = realloc(s->pend, cap * sizeof *p);
            if (p == NULL) {
                set_err(s, APPLY_NOMEM, NULL, "out of memory queueing a statement");
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
        fmt_pos(&p->pos, where, sizeof where);
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        apply_status cls = pgerror_classify_result(s->conn, res, is_data_kind(p->kind));
        const char *advice = cls == APPLY_CONFIG ? pgerror_advice(state) : "";
        char msg[700];
        pgerror_message(PQresultErrorMessage(res), NULL, msg, sizeof msg);
        if (p->t != NULL)
            set_err(s, cls, state, "%s on %s.%s (oplog entry %s) failed: [%s] %s%s%s", pending_what[p->kind], p->t->db,
                    p->t->coll, where, state ? state : "?", msg, advice[0] ? "; " : "", advice);
        else
            set_err(s, cls, state, "%s (oplog entry %s) failed: [%s] %s%s%s", pending_what[p->kind], where,
                    state ? state : "?", msg, advice[0] ? "; " : "", advice);
    }
}

/* Read every result that has arrived, without blocking. Returns false if the connection broke. */
static bool read_ready(sink *s)
{
    if (PQconsumeInput(s->conn) != 1) {
        set_err(s, APPLY_RETRY, NULL, "lost the PostgreSQL connection: %s", PQerrorMessage(s->conn));
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
        take_result(s, res);
        PQclear(res);
    }
    if (PQstatus(s->conn) == CONNECTION_BAD) {
        set_err(s, APPLY_RETRY, NULL, "lost the PostgreSQL connection: %s", PQerrorMessage(s->conn));
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
        snprintf(first, sizeof first, "the %s on %s.%s", pending_what[p->kind], p->t->db, p->t->coll);
    else
        snprintf(first, sizeof first, "the %s", pending_what[p->kind]);
    if (open == 1)
        snprintf(buf, len, "%s%s%s", first, note ? "; " : "", note ? note : "");
    else
        snprintf(buf, len, "%zu statements from %s on%s%s", open, first, note ? "; " : "", note ? note : "");
}

/* Push output and collect results. With `until` set, keep going until at most that many items remain pending, and
 * until at most `unsent` bytes wait in libpq's buffer. */
static bool pump(sink *s, size_t until, size_t unsent)
{
    double since = clock_s();
    char what[600];
    for (;;) {
        int fr = PQflush(s->conn);
        if (fr < 0) {
            set_err(s, APPLY_RETRY, NULL, "sending to PostgreSQL: %s", PQerrorMessage(s->conn));
            return false;
        }
        if (fr == 0)
            s->unflushed = 0;
        if (!read_ready(s))
            return false;
        if ((fr == 0 || s->unflushed <= unsent) && s->pend_tail - s->pend_head <= until)
            return true;
        waiting_for(s, what, sizeof what, clock_s() - since);
        if (!pgconn_wait(s->c, fr == 1, what, since)) {
            set_err(s, APPLY_RETRY, NULL, "waiting for PostgreSQL: %s", strerror(errno));
            return false;
        }
    }
}

/* Send a Sync and wait for every outstanding result. */
static sink_status drain(sink *s)
{
    if (s->failed != APPLY_OK)
        return s->failed;
    if (s->pend_head == s->pend_tail)
        return APPLY_OK; /* nothing outstanding: no round trip */
    if (PQpipelineSync(s->conn) != 1) {
        set_err(s, APPLY_RETRY, NULL, "sending a sync: %s", PQerrorMessage(s->conn));
        return s->failed;
    }
    if (!push_pending(s, P_SYNC, NULL, NULL))
        return s->failed;
    pump(s, 0, 0);
    return s->failed;
}

/* After a send of `bytes`: opportunistic progress, and bounds on what waits unanswered and unsent. */
static sink_status after_send(sink *s, bool ok, size_t bytes)
{
    if (!ok) {
        set_err(s, APPLY_RETRY, NULL, "queueing a statement: %s", PQerrorMessage(s->conn));
        return s->failed;
    }
    s->unflushed += bytes;
    if (!pump(s, MAX_PENDING, SINK_PIPE_BYTES))
        return s->failed;
    if (s->cfg.per_op)
        return drain(s); /* the baseline: wait for every statement */
    return s->failed;
}

static sink_status send_simple(sink *s, pending_kind kind, const table *t, const char *sql, const op_pos *pos)
{
    if (!push_pending(s, kind, t, pos))
        return s->failed;
    return after_send(s, PQsendQueryParams(s->conn, sql, 0, NULL, NULL, NULL, NULL, 0) == 1, strlen(sql));
}

static sink_status begin_if_needed(sink *s)
{
    if (s->failed != APPLY_OK)
        return s->failed;
    if (s->conn == NULL) {
        set_err(s, APPLY_RETRY, NULL, "not connected to PostgreSQL");
        return s->failed;
    }
    if (s->in_txn)
        return APPLY_OK;
    s->in_txn = true;
    return send_simple(s, P_BEGIN, NULL, "BEGIN", NULL);
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
    if (s->pend_head < s->pend_tail) {
        read_ready(s); /* results on their way: take what came */
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
        set_err(s, APPLY_RETRY, NULL, "the idle PostgreSQL connection ended: %s", msg[0] ? msg : "unexpected data");
    }
    PQclear(res);
    return s->failed;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* tables */

static char *quote_ident(sink *s, const char *name)
{
    char *q = PQescapeIdentifier(s->conn, name, strlen(name));
    if (q == NULL)
        return NULL;
    char *copy = strdup(q);
    PQfreemem(q);
    return copy;
}

static table *find_table(sink *s, const char *db, const char *coll)
{
    for (size_t i = 0; i < s->ntables; i++) {
        table *t = s->tables[i];
        if (strcmp(t->coll, coll) == 0 && strcmp(t->db, db) == 0)
            return t;
    }
    return NULL;
}

static void forget_table(sink *s, const char *db, const char *coll)
{
    for (size_t i = 0; i < s->ntables; i++) {
        table *t = s->tables[i];
        if ((coll == NULL || strcmp(t->coll, coll) == 0) && strcmp(t->db, db) == 0) {
            /* Statement names are never reused, so the old ones can stay until the connection ends. Pending items may
             * still point at the table, so it is kept, only marked not ready under a name no lookup matches. */
            t->ready = false;
            t->coll[0] = '\0';
            t->db[0] = '\0';
        }
    }
}

static sink_status prepare_stmt(sink *s, table *t, char kind, const char *sql)
{
    char name[32];
    snprintf(name, sizeof name, "%c%u", kind, t->id);
    if (!push_pending(s, P_PREPARE, t, NULL))
        return s->failed;
    return after_send(s, PQsendPrepare(s->conn, name, sql, 0, NULL) == 1, strlen(sql));
}

/* Maps db.coll to its names; false (s->failed = APPLY_DATA, naming the op's entry) when it cannot be a table. */
static bool map_names(sink *s, const char *db, const char *coll, pg_name *out, const op_pos *pos)
{
    char why[120], where[32];
    if (names_map(db, coll, out, why, sizeof why))
        return true;
    fmt_pos(pos, where, sizeof where);
    set_err(s, APPLY_DATA, NULL, "namespace %s.%s (oplog entry %s) cannot be a PostgreSQL table: %s", db,
            coll ? coll : "", where, why);
    return false;
}

/* Sends a call of one of the catalog functions (oplog2pg.ensure_table, drop_table, ...), pipelined. */
static sink_status catalog_call(sink *s, const table *t, const char *sql, int n, const char *const *values,
                                const op_pos *pos)
{
    if (!push_pending(s, P_CATALOG, t, pos))
        return s->failed;
    return after_send(s, PQsendQueryParams(s->conn, sql, n, NULL, values, NULL, NULL, 0) == 1, 256);
}

/* The table for db.coll: made (schema, table, catalog row) or checked to be this service's, and its statements
 * prepared on this connection if needed. A table of that name that oplog2pg did not make stops everything (O2FOR,
 * a person must act). */
static table *get_table(sink *s, const char *db, const char *coll, const op_pos *pos)
{
    table *t = find_table(s, db, coll);
    if (t != NULL && t->ready)
        return t;
    pg_name nm;
    if (!map_names(s, db, coll, &nm, pos))
        return NULL;
    if (t == NULL) {
        if (s->ntables == s->tables_cap) {
            size_t cap = s->tables_cap ? s->tables_cap * 2 : 16;
            table **nt = realloc(s->tables, cap * sizeof *nt);
            if (nt == NULL)
                goto oom;
            s->tables = nt;
            s->tables_cap = cap;
        }
        t = calloc(1, sizeof *t);
        if (t == NULL)
            goto oom;
        t->db = strdup(db);
        t->coll = strdup(coll);
        char *qs = quote_ident(s, nm.schema), *qt = quote_ident(s, nm.table);
        if (t->db && t->coll && qs && qt && asprintf(&t->qname, "%s.%s", qs, qt) < 0)
            t->qname = NULL;
        free(qs);
        free(qt);
        if (t->db == NULL || t->coll == NULL || t->qname == NULL) {
            free(t->db);
            free(t->coll);
            free(t->qname);
            free(t);
            goto oom;
        }
        t->name = nm;
        s->tables[s->ntables++] = t;
    }
    t->id = ++s->next_table_id;

    const char *values[5] = {s->service, db, coll, t->name.schema, t->name.table};
    bool ok = catalog_call(s, t, "SELECT oplog2pg.ensure_table($1, $2, $3, $4, $5)", 5, values, pos) == APPLY_OK;

    /* Insert doubles as replacement: an insert that meets its own _id (a replay) becomes the document it carries. */
    char buf[512];
    snprintf(buf, sizeof buf,
             "INSERT INTO %s (_id, doc) VALUES ($1, $2) ON CONFLICT (_id) DO UPDATE SET doc = EXCLUDED.doc", t->qname);
    ok = ok && prepare_stmt(s, t, 'i', buf) == APPLY_OK;
    snprintf(buf, sizeof buf, "UPDATE %s SET doc = oplog2pg.apply_update(doc, $2::jsonb) WHERE _id = $1", t->qname);
    ok = ok && prepare_stmt(s, t, 'u', buf) == APPLY_OK;
    snprintf(buf, sizeof buf, "DELETE FROM %s WHERE _id = $1", t->qname);
    ok = ok && prepare_stmt(s, t, 'd', buf) == APPLY_OK;
    if (!ok) {
        if (s->failed == APPLY_OK)
            set_err(s, APPLY_NOMEM, NULL, "out of memory preparing table %s.%s", db, coll);
        return NULL;
    }
    t->ready = true;
    return t;

oom:
    set_err(s, APPLY_NOMEM, NULL, "out of memory preparing table %s.%s", db, coll);
    return NULL;
}

/* The group's transaction open and db.coll ready in it: what every write starts with. NULL on failure (s->failed). */
static table *open_table(sink *s, const char *db, const char *coll, const op_pos *pos)
{
    if (begin_if_needed(s) != APPLY_OK)
        return NULL;
    return get_table(s, db, coll, pos);
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* writes */

/* Each row of the batch as parameters of the upsert statement (binary, no conversion), pipelined. */
static sink_status insert_rows_pipelined(sink *s, table *t, const sink_batch *b, const op_pos *pos)
{
    char name[32];
    snprintf(name, sizeof name, "i%u", t->id);
    const int formats[2] = {1, 0};
    for (size_t i = 0; i < sink_batch_rows(b); i++) {
        const char *key, *json;
        size_t klen, jlen;
        sink_batch_row(b, i, &key, &klen, &json, &jlen);
        const char *values[2] = {key, json};
        const int lengths[2] = {(int)klen, (int)jlen};
        if (!push_pending(s, P_INSERT, t, pos))
            return s->failed;
        if (after_send(s, PQsendQueryPrepared(s->conn, name, 2, values, lengths, formats, 0) == 1, klen + jlen + 64) !=
            APPLY_OK)
            return s->failed;
    }
    s->stats.rows_inserted += sink_batch_rows(b);
    s->stats.bytes += sink_batch_bytes(b);
    return APPLY_OK;
}

/* COPY the batch (outside the pipeline). *dup when it met an existing _id. */
static sink_status copy_rows(sink *s, table *t, const sink_batch *b, const op_pos *pos, bool *dup)
{
    char where[32], sql[300];
    fmt_pos(pos, where, sizeof where);
    snprintf(sql, sizeof sql, "COPY %s (" SINK_COLUMNS ") FROM STDIN (FORMAT binary)", t->qname);
    *dup = false;
    pgconn_error e;
    if (pgconn_copy_start(s->c, sql, &e) && sink_batch_copy(s->c, b, &e))
        return APPLY_OK;
    if (strcmp(e.sqlstate, "23505") == 0) {
        *dup = true;
        return APPLY_DATA;
    }
    const char *advice = e.status == APPLY_CONFIG ? pgerror_advice(e.sqlstate) : "";
    set_err(s, e.status, e.sqlstate, "COPY into %s.%s (oplog entries up to %s) failed: [%s] %s%s%s", t->db, t->coll,
            where, e.sqlstate[0] ? e.sqlstate : "?", e.message, advice[0] ? "; " : "", advice);
    return s->failed;
}

sink_status sink_insert_batch(sink *s, const char *db, const char *coll, sink_batch *b, const op_pos *pos)
{
    if (sink_batch_rows(b) == 0)
        return APPLY_OK;
    table *t = open_table(s, db, coll, pos);
    if (t == NULL)
        return s->failed;
    /* Short runs go pipelined; a long run, or a large one (libpq would hold it whole), by COPY in pieces. */
    if (s->cfg.per_op || (sink_batch_rows(b) < s->cfg.copy_min_rows && sink_batch_bytes(b) < SINK_COPY_BYTES))
        return insert_rows_pipelined(s, t, b, pos);

    /* Long run: COPY, outside the pipeline, behind a savepoint. */
    if (send_simple(s, P_SAVEPOINT, NULL, "SAVEPOINT " SAVEPOINT_NAME, pos) != APPLY_OK || drain(s) != APPLY_OK)
        return s->failed;
    if (PQexitPipelineMode(s->conn) != 1) {
        set_err(s, APPLY_RETRY, NULL, "leaving pipeline mode: %s", PQerrorMessage(s->conn));
        return s->failed;
    }
    bool dup = false;
    sink_status st = copy_rows(s, t, b, pos, &dup);
    if (st != APPLY_OK && !dup)
        return st;
    if (dup) {
        pgconn_error e;
        if (!pgconn_exec(s->c, "ROLLBACK TO SAVEPOINT " SAVEPOINT_NAME, NULL, false, &e)) {
            set_err(s, e.status, e.sqlstate, "rolling back a COPY: %s", e.message);
            return s->failed;
        }
        char where[32];
        fmt_pos(pos, where, sizeof where);
        log_info("COPY of %zu rows into %s.%s (entries up to %s) met an existing _id; re-sending them as upserts",
                 sink_batch_rows(b), db, coll, where);
        s->stats.dup_fallbacks++;
    }
    if (PQenterPipelineMode(s->conn) != 1) {
        set_err(s, APPLY_RETRY, NULL, "entering pipeline mode: %s", PQerrorMessage(s->conn));
        return s->failed;
    }
    if (dup) {
        if (insert_rows_pipelined(s, t, b, pos) != APPLY_OK)
            return s->failed;
    } else {
        s->stats.rows_copied += sink_batch_rows(b);
        s->stats.bytes += sink_batch_bytes(b);
    }
    return send_simple(s, P_RELEASE, NULL, "RELEASE SAVEPOINT " SAVEPOINT_NAME, pos);
}

sink_status sink_update(sink *s, const char *db, const char *coll, const char *key, op_update_form form,
                        const char *json, const op_pos *pos)
{
    table *t = open_table(s, db, coll, pos);
    if (t == NULL)
        return s->failed;
    char name[32];
    snprintf(name, sizeof name, "%c%u", form == OP_FORM_REPLACE ? 'i' : 'u', t->id);
    const char *values[2] = {key, json};
    if (!push_pending(s, form == OP_FORM_REPLACE ? P_INSERT : P_UPDATE, t, pos))
        return s->failed;
    /* A replacement is the whole new document: upsert it. */
    size_t bytes = strlen(json);
    bool ok = PQsendQueryPrepared(s->conn, name, 2, values, NULL, NULL, 0) == 1;
    s->stats.bytes += bytes;
    s->stats.updates++;
    return after_send(s, ok, bytes + strlen(key) + 64);
}

sink_status sink_delete(sink *s, const char *db, const char *coll, const char *key, const op_pos *pos)
{
    table *t = open_table(s, db, coll, pos);
    if (t == NULL)
        return s->failed;
    char name[32];
    snprintf(name, sizeof name, "d%u", t->id);
    const char *values[1] = {key};
    if (!push_pending(s, P_DELETE, t, pos))
        return s->failed;
    bool ok = PQsendQueryPrepared(s->conn, name, 1, values, NULL, NULL, 0) == 1;
    s->stats.deletes++;
    return after_send(s, ok, strlen(key) + 64);
}

sink_status sink_create(sink *s, const char *db, const char *coll, const op_pos *pos)
{
    if (begin_if_needed(s) != APPLY_OK)
        return s->failed;
    s->stats.ddl++;
    return get_table(s, db, coll, pos) != NULL ? APPLY_OK : s->failed;
}

sink_status sink_drop(sink *s, const char *db, const char *coll, const op_pos *pos)
{
    pg_name nm;
    if (begin_if_needed(s) != APPLY_OK || !map_names(s, db, coll, &nm, pos))
        return s->failed;
    forget_table(s, db, coll);
    s->stats.ddl++;
    const char *values[3] = {s->service, nm.schema, nm.table};
    return catalog_call(s, NULL, "SELECT oplog2pg.drop_table($1, $2, $3)", 3, values, pos);
}

sink_status sink_rename(sink *s, const char *db, const char *coll, const char *to_db, const char *to_coll,
                        bool drop_target, const op_pos *pos)
{
    pg_name from, to;
    if (begin_if_needed(s) != APPLY_OK || !map_names(s, db, coll, &from, pos) ||
        !map_names(s, to_db, to_coll, &to, pos))
        return s->failed;
    forget_table(s, db, coll);
    forget_table(s, to_db, to_coll);
    /* A target the rename dropped (dropTarget), or one left over from an earlier run: dropped if it is this
     * service's; MongoDB would have refused the rename otherwise, so dropping is right either way. */
    (void)drop_target;
    s->stats.ddl++;
    const char *values[7] = {s->service, from.schema, from.table, to_db, to_coll, to.schema, to.table};
    return catalog_call(s, NULL, "SELECT oplog2pg.rename_table($1, $2, $3, $4, $5, $6, $7)", 7, values, pos);
}

sink_status sink_drop_database(sink *s, const char *db, const op_pos *pos)
{
    pg_name nm;
    if (begin_if_needed(s) != APPLY_OK || !map_names(s, db, NULL, &nm, pos))
        return s->failed;
    forget_table(s, db, NULL);
    s->stats.ddl++;
    const char *values[2] = {s->service, db};
    return catalog_call(s, NULL, "SELECT oplog2pg.drop_database($1, $2)", 2, values, pos);
}

sink_status sink_truncate(sink *s, const char *db, const char *coll, const op_pos *pos)
{
    table *t = open_table(s, db, coll, pos);
    if (t == NULL)
        return s->failed;
    char sql[256];
    snprintf(sql, sizeof sql, "DELETE FROM %s", t->qname); /* not TRUNCATE: it would take a stronger lock */
    s->stats.ddl++;
    return send_simple(s, P_DDL, t, sql, pos);
}

static sink_status send_checkpoint(sink *s, const char *stmt, const char *sql, const op_pos *pos)
{
    char secs[16], inc[16], term[24];
    const char *values[5] = {s->service, NULL, NULL, NULL, s->owner};
    if (pos != NULL) {
        snprintf(secs, sizeof secs, "%u", pos->secs);
        snprintf(inc, sizeof inc, "%u", pos->inc);
        snprintf(term, sizeof term, "%lld", (long long)pos->term);
        values[1] = secs;
        values[2] = inc;
        values[3] = pos->term < 0 ? NULL : term;
    }
    if (!push_pending(s, P_CKPT, NULL, pos))
        return s->failed;
    bool ok = stmt != NULL ? PQsendQueryPrepared(s->conn, stmt, 5, values, NULL, NULL, 0) == 1
                           : PQsendQueryParams(s->conn, sql, 5, NULL, values, NULL, NULL, 0) == 1;
    return after_send(s, ok, 128);
}

static sink_status commit_and_wait(sink *s, const op_pos *pos, const op_pos *new_ckpt)
{
    if (send_simple(s, P_COMMIT, NULL, "COMMIT", pos) != APPLY_OK)
        return s->failed;
    s->in_txn = false;
    /* A foreign owner token makes the checkpoint functions raise O2FEN: the transaction, data included, rolls back. */
    if (drain(s) != APPLY_OK)
        return s->failed;
    s->stats.commits++;
    if (new_ckpt != NULL) {
        s->ckpt = *new_ckpt;
        s->have_ckpt = 1;
    } else {
        s->have_ckpt = 0;
    }
    return APPLY_OK;
}

sink_status sink_commit(sink *s, const op_pos *pos)
{
    if (begin_if_needed(s) != APPLY_OK)
        return s->failed;
    if (!s->ckpt_prepared) {
        static const char sql[] = "SELECT oplog2pg.advance_checkpoint($1, $5::uuid, $2, $3, $4)";
        if (!push_pending(s, P_PREPARE, NULL, NULL))
            return s->failed;
        if (after_send(s, PQsendPrepare(s->conn, "ckpt", sql, 0, NULL) == 1, sizeof sql) != APPLY_OK)
            return s->failed;
        s->ckpt_prepared = true;
    }
    if (send_checkpoint(s, "ckpt", NULL, pos) != APPLY_OK)
        return s->failed;
    return commit_and_wait(s, pos, pos);
}

sink_status sink_set_checkpoint(sink *s, const op_pos *pos)
{
    if (s->in_txn) {
        set_err(s, APPLY_CONFIG, NULL, "internal error: the checkpoint is set only outside a flush group");
        return s->failed;
    }
    if (begin_if_needed(s) != APPLY_OK ||
        send_checkpoint(s, NULL, "SELECT oplog2pg.set_checkpoint($1, $5::uuid, $2, $3, $4)", pos) != APPLY_OK)
        return s->failed;
    return commit_and_wait(s, pos, pos);
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* guarded ops and dead letters */

void sink_set_per_op(sink *s, bool on)
{
    s->cfg.per_op = on;
}

sink_status sink_guard_begin(sink *s)
{
    if (begin_if_needed(s) != APPLY_OK)
        return s->failed;
    if (send_simple(s, P_SAVEPOINT, NULL, "SAVEPOINT " GUARD_NAME, NULL) != APPLY_OK || drain(s) != APPLY_OK)
        return s->failed;
    s->guarded = true;
    return APPLY_OK;
}

sink_status sink_guard_end(sink *s)
{
    if (!s->guarded)
        return s->failed;
    s->guarded = false;
    return send_simple(s, P_RELEASE, NULL, "RELEASE SAVEPOINT " GUARD_NAME, NULL);
}

/* The op's _id as key text (malloc'd), or NULL for DDL and when it cannot be made. */
static char *op_key_text(const op *o)
{
    if (o->id_key != NULL)
        return strdup(o->id_key);
    return o->id.value_type != BSON_TYPE_EOD ? ejson_key(&o->id) : NULL;
}

sink_status sink_refused(sink *s, const op *o, const char *why)
{
    char at[OP_POS_STRLEN], ns[400];
    char *key = op_key_text(o);
    if (why != NULL)
        set_err(s, APPLY_DATA, NULL, "%s", why);
    snprintf(ns, sizeof ns, "%s.%s", o->db ? o->db : "", o->coll ? o->coll : "");
    char safe_ns[400];
    utf8_sanitize(ns, strlen(ns), safe_ns, sizeof safe_ns);
    log_error("the op PostgreSQL refused: %s%s%s (oplog entry %s, op %u of the entry)", safe_ns, key ? " _id " : "",
              key ? key : "", op_pos_format(&o->pos, at, sizeof at), o->index);
    free(key);
    return s->failed != APPLY_OK ? s->failed : APPLY_DATA;
}

sink_status sink_refuse(sink *s, const op *o, const char *why)
{
    char at[OP_POS_STRLEN];
    set_err(s, APPLY_DATA, NULL, "%s on %s.%s (oplog entry %s): %s", op_kind_name(o->kind), o->db ? o->db : "",
            o->coll ? o->coll : "", op_pos_format(&o->pos, at, sizeof at), why);
    return s->failed != APPLY_OK ? s->failed : APPLY_DATA;
}

/* Text a dead letter keeps: valid UTF-8 without NUL, whatever the op held (malloc'd; NULL for NULL). */
static char *safe_text(const char *s)
{
    return s != NULL ? utf8_sanitize_dup(s, strlen(s)) : NULL;
}

/* The parameters of oplog2pg.record_dead_letter for an op: every text made safe to store (valid UTF-8, no NUL). */
typedef struct {
    char secs[16], inc[16], term[24], idx[16];
    char *key, *op_text, *db, *coll, *msg;
    const char *values[13];
    int lengths[13], formats[13];
} dl_params;

static const char dl_sql[] =
    "SELECT oplog2pg.record_dead_letter($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)";

static void dl_free(dl_params *p)
{
    free(p->key);
    free(p->op_text);
    free(p->db);
    free(p->coll);
    free(p->msg);
}

static const char *op_letter(const op *o)
{
    return o->kind == OP_INSERT ? "i" : o->kind == OP_UPDATE ? "u" : o->kind == OP_DELETE ? "d" : "c";
}

/* False when memory runs out (p is freed then). */
static bool dl_build(dl_params *p, const char *service, const op *o, const char *why, const char *sqlstate)
{
    memset(p, 0, sizeof *p);
    char *key = op_key_text(o);
    p->key = key ? utf8_sanitize_dup(key, strlen(key)) : NULL;
    free(key);
    p->db = safe_text(o->db ? o->db : "");
    p->coll = safe_text(o->coll ? o->coll : "");
    p->msg = safe_text(why ? why : "refused");
    if (o->json != NULL) {
        p->op_text = strdup(o->json);
    } else if (o->doc != NULL) {
        strbuf b = STRBUF_INIT;
        if (ejson_write_document(&b, o->doc, o->doc_len, NULL) == EJSON_OK)
            p->op_text = strbuf_detach(&b, NULL);
        else
            strbuf_free(&b);
    }
    if (p->db == NULL || p->coll == NULL || p->msg == NULL) {
        dl_free(p);
        return false;
    }
    snprintf(p->secs, sizeof p->secs, "%u", o->pos.secs);
    snprintf(p->inc, sizeof p->inc, "%u", o->pos.inc);
    snprintf(p->term, sizeof p->term, "%lld", (long long)o->pos.term);
    snprintf(p->idx, sizeof p->idx, "%u", o->index);
    const char *v[13] = {service,
                         p->secs,
                         p->inc,
                         o->pos.term < 0 ? NULL : p->term,
                         p->idx,
                         p->db,
                         p->coll,
                         op_letter(o),
                         p->key,
                         (const char *)o->doc,
                         p->op_text,
                         p->msg,
                         sqlstate && sqlstate[0] ? sqlstate : NULL};
    memcpy(p->values, v, sizeof v);
    p->lengths[9] = (int)o->doc_len;
    p->formats[9] = 1;
    if (o->doc == NULL)
        p->values[9] = NULL;
    return true;
}

bool sink_record_dead_letter(pgconn *c, const char *service, const op *o, const char *why, const char *sqlstate,
                             pgconn_error *err)
{
    dl_params p;
    if (!dl_build(&p, service, o, why, sqlstate)) {
        if (err) {
            err->status = APPLY_NOMEM;
            snprintf(err->message, sizeof err->message, "out of memory recording a dead letter");
        }
        return false;
    }
    bool ok = pgconn_exec_params(c, dl_sql, 13, p.values, p.lengths, p.formats, 0, NULL, false, err);
    if (!ok && err != NULL && strncmp(err->sqlstate, "22", 2) == 0 && p.values[10] != NULL) {
        /* The JSON rendering itself was refused: keep the raw op without it rather than lose it. */
        p.values[10] = NULL;
        ok = pgconn_exec_params(c, dl_sql, 13, p.values, p.lengths, p.formats, 0, NULL, false, err);
    }
    dl_free(&p);
    return ok;
}

sink_status sink_dead_letter(sink *s, const op *o, const char *why)
{
    char msg[sizeof s->err], state[sizeof s->err_state], at[OP_POS_STRLEN];
    if (s->failed != APPLY_OK && s->failed != APPLY_DATA)
        return s->failed; /* only a refusal of the op's data may set it aside */
    snprintf(msg, sizeof msg, "%s", why != NULL ? why : s->err[0] ? s->err : "refused");
    snprintf(state, sizeof state, "%s", why != NULL ? "" : s->err_state);
    if (!s->guarded) {
        s->failed = APPLY_OK;
        set_err(s, APPLY_UNRECORDABLE, NULL, "%s (and it cannot be set aside: no guard was open)", msg);
        return s->failed;
    }
    s->guarded = false;

    /* Settle the pipeline: after an error the server skips everything up to the next sync, whose results (aborted)
     * carry no news. Then undo the op back to its guard and record it instead. */
    s->failed = APPLY_OK;
    s->err[0] = '\0';
    if (PQpipelineSync(s->conn) != 1) {
        set_err(s, APPLY_RETRY, NULL, "sending a sync: %s", PQerrorMessage(s->conn));
        return s->failed;
    }
    if (!push_pending(s, P_SYNC, NULL, NULL) || !pump(s, 0, 0))
        return s->failed;
    if (send_simple(s, P_SAVEPOINT, NULL, "ROLLBACK TO SAVEPOINT " GUARD_NAME, &o->pos) != APPLY_OK)
        return s->failed;

    dl_params p;
    if (!dl_build(&p, s->service, o, msg, state)) {
        set_err(s, APPLY_NOMEM, NULL, "out of memory recording a dead letter");
        goto out;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!push_pending(s, P_DEAD_LETTER, NULL, &o->pos))
            break;
        bool ok = PQsendQueryParams(s->conn, dl_sql, 13, NULL, p.values, p.lengths, p.formats, 0) == 1;
        if (after_send(s, ok, (size_t)o->doc_len + (p.op_text ? strlen(p.op_text) : 0) + 256) == APPLY_OK)
            drain(s);
        if (s->failed != APPLY_CONFIG || strncmp(s->err_state, "22", 2) != 0 || p.values[10] == NULL)
            break;
        /* The record was refused for its JSON rendering: keep the raw op without it rather than lose it. */
        log_warning("recording the dead letter with its JSON failed (%s); recording it without", s->err);
        s->failed = APPLY_OK;
        s->err[0] = '\0';
        if (PQpipelineSync(s->conn) != 1 || !push_pending(s, P_SYNC, NULL, NULL) || !pump(s, 0, 0) ||
            send_simple(s, P_SAVEPOINT, NULL, "ROLLBACK TO SAVEPOINT " GUARD_NAME, &o->pos) != APPLY_OK)
            break;
        p.values[10] = NULL;
    }
    if (s->failed == APPLY_OK) {
        s->stats.dead_letters++;
        log_error("%s %s.%s%s%s (oplog entry %s): %s; set aside in oplog2pg.dead_letter, going on",
                  o->kind >= OP_CREATE ? "DDL on" : "op on", p.db, p.coll, p.key ? " _id " : "", p.key ? p.key : "",
                  op_pos_format(&o->pos, at, sizeof at), p.msg);
    } else if (s->failed == APPLY_CONFIG || s->failed == APPLY_DATA) {
        char first[sizeof s->err];
        snprintf(first, sizeof first, "%s", s->err);
        s->failed = APPLY_OK;
        set_err(s, APPLY_UNRECORDABLE, NULL,
                "the op on %s.%s%s%s (oplog entry %s, op %u) was refused (%s), and recording it as a dead letter "
                "failed too: %s",
                p.db, p.coll, p.key ? " _id " : "", p.key ? p.key : "", op_pos_format(&o->pos, at, sizeof at), o->index,
                p.msg, first);
    }
    dl_free(&p);
out:
    /* The op may have created its table inside the guard: forget it, so the next op on it makes sure again. */
    if (o->db != NULL)
        forget_table(s, o->db, o->coll ? o->coll : NULL);
    return s->failed;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* probe */

bool sink_probe(const char *conninfo, const char *service, sink_probe_result *out, pgconn_error *err)
{
    memset(out, 0, sizeof *out);
    pgconn_params pp = {.conninfo = conninfo, .app_name = "oplog2pg-probe"};
    pgconn *c = pgconn_connect(&pp, err);
    PGresult *res = NULL;
    bool ok = false;
    if (c == NULL)
        return false;
    int v = PQserverVersion(c->pg);
    snprintf(out->server_version, sizeof out->server_version, "%d.%d", v / 10000, v % 10000);
    /* The advisory lock the daemon holds: a bigint key shows in pg_locks as classid (high half), objid (low half). */
    const char *params[1] = {service};
    if (!pgconn_exec_params(c,
                            "WITH k AS (SELECT hashtextextended('oplog2pg.service:' || $1, 0) AS key) "
                            "SELECT to_regclass('oplog2pg.checkpoint') IS NOT NULL, EXISTS (SELECT 1 FROM pg_locks, k "
                            "WHERE locktype = 'advisory' AND objsubid = 1 AND granted "
                            "AND classid::bigint = ((key >> 32) & 4294967295) AND objid::bigint = (key & 4294967295))",
                            1, params, NULL, NULL, 0, &res, false, err))
        goto done;
    out->have_table = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    out->running = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
    PQclear(res);
    res = NULL;
    if (out->have_table) {
        if (!pgconn_exec_params(c,
                                "SELECT ts_sec, ts_inc, term, applied_at FROM oplog2pg.checkpoint "
                                "WHERE service = $1 AND ts_sec IS NOT NULL",
                                1, params, NULL, NULL, 0, &res, false, err))
            goto done;
        if (PQntuples(res) == 1) {
            out->have_checkpoint = true;
            out->pos.secs = (uint32_t)strtoul(PQgetvalue(res, 0, 0), NULL, 10);
            out->pos.inc = (uint32_t)strtoul(PQgetvalue(res, 0, 1), NULL, 10);
            out->pos.term = PQgetisnull(res, 0, 2) ? -1 : strtoll(PQgetvalue(res, 0, 2), NULL, 10);
            snprintf(out->applied_at, sizeof out->applied_at, "%s", PQgetvalue(res, 0, 3));
        }
        PQclear(res);
        res = NULL;
        /* The table comes with the schema of a later version: an older database may not have it yet. */
        if (!pgconn_exec(c, "SELECT to_regclass('oplog2pg.dead_letter') IS NOT NULL", &res, false, err))
            goto done;
        bool have_dl = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
        PQclear(res);
        res = NULL;
        if (have_dl) {
            if (!pgconn_exec_params(c, "SELECT count(*) FROM oplog2pg.dead_letter WHERE service = $1", 1, params, NULL,
                                    NULL, 0, &res, false, err))
                goto done;
            out->dead_letters = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        }
    }
    ok = true;
done:
    PQclear(res);
    pgconn_close(c);
    return ok;
}

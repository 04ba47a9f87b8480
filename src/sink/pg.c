/*
 * pg.c — the PostgreSQL sink (see pg.h for what it guarantees).
 *
 * NOTES
 * The connection stays in libpq pipeline mode, non-blocking, between commits. Every statement sent is recorded in a
 * queue of pending items (kind, table, oplog position) so that a result, and above all an error, can be matched to the
 * op that caused it. pump() pushes output and reads whatever results have arrived without waiting; drain() sends a
 * Sync and waits until every pending item is answered. A group therefore waits on the network once, at its commit.
 *
 * Long insert runs leave the pipeline: drain (which also sets a savepoint), switch to blocking mode, stream the run
 * with COPY ... (FORMAT binary), and come back. A unique violation in the COPY rolls back to the savepoint and the run
 * is re-sent as pipelined upserts: a replay of inserts that are already there (after an initial copy, or a crash
 * between COPY and commit that PostgreSQL rolled back anyway) never stops the stream.
 *
 * After any error the group is lost (the transaction is aborted); the caller disconnects and resumes from the
 * committed checkpoint, so the table cache and prepared statements are simply rebuilt on the next connection.
 */
#include "sink/pg.h"

#include <errno.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map/ejson.h"
#include "map/shape.h"
#include "sql_embed.h"
#include "util/log.h"

#define PG_MAX_IDENT   63    /* NAMEDATALEN - 1: longer names would be truncated by PostgreSQL */
#define MAX_PENDING    20000 /* results outstanding before a send waits for some to arrive */
#define SAVEPOINT_NAME "oplog2pg_copy"

static const char copy_header[] = "PGCOPY\n\377\r\n\0\0\0\0\0\0\0\0\0"; /* signature, flags 0, extension 0 */
#define COPY_HEADER_LEN 19

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
};

typedef struct table {
    char *db, *coll;
    char *qname; /* "db"."coll", quoted */
    unsigned id; /* statement names: i<id>, u<id>, d<id> */
    bool ready;  /* schema, table and statements sent on this connection */
} table;

typedef struct {
    pending_kind kind;
    const table *t;
    op_pos pos;
} pending;

struct sink_batch {
    char *buf;
    size_t len, cap;
    size_t rows;
};

struct sink {
    sink_config cfg;
    char *conninfo, *service;
    PGconn *conn;
    char owner[64]; /* fence token written into the checkpoint row */
    bool in_txn;    /* BEGIN sent for the open group */
    bool ckpt_prepared;
    bool guarded; /* a per-op guard savepoint is open (sink_guard_begin) */

    pending *pend;
    size_t pend_head, pend_tail, pend_cap;

    table **tables;
    size_t ntables, tables_cap;
    unsigned next_table_id;

    sink_status failed; /* first failure in the current pipeline, reported at drain */
    bool dup_in_copy;
    char err[1024];
    char err_state[6]; /* SQLSTATE of the first failure, "" when it was not PostgreSQL's */
    sink_stats stats;
};

/* ---------------------------------------------------------------------------------------------------------------- */
/* errors */

static void set_err(sink *s, sink_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void set_err(sink *s, sink_status st, const char *fmt, ...)
{
    if (s->failed != SINK_OK)
        return; /* keep the first, which is the cause */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    s->err_state[0] = '\0';
    size_t n = strlen(s->err);
    while (n > 0 && s->err[n - 1] == '\n')
        s->err[--n] = '\0';
    s->failed = st;
}

/* Connection trouble (08xxx, shutdown, a broken socket) is retried; anything else PostgreSQL refused is data. */
static sink_status classify(PGconn *conn, const PGresult *res)
{
    if (PQstatus(conn) == CONNECTION_BAD)
        return SINK_ERR_CONNECTION;
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    if (state == NULL)
        return SINK_ERR_CONNECTION;
    if (strcmp(state, "O2FEN") == 0)
        return SINK_ERR_FENCED;
    if (strncmp(state, "08", 2) == 0 || strncmp(state, "57P", 3) == 0 || strcmp(state, "53300") == 0)
        return SINK_ERR_CONNECTION;
    return SINK_ERR_DATA;
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
    if (s->conn != NULL)
        PQfinish(s->conn);
    s->conn = NULL;
    s->in_txn = false;
    s->ckpt_prepared = false;
    s->guarded = false;
    s->pend_head = s->pend_tail = 0;
    tables_clear(s); /* prepared statements and "created" marks belong to the connection */
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* synchronous helpers, used outside pipeline mode (connect, COPY) */

static bool exec_ok(sink *s, const char *sql, ExecStatusType want, const char *what)
{
    PGresult *res = PQexec(s->conn, sql);
    bool ok = PQresultStatus(res) == want;
    if (!ok)
        set_err(s, classify(s->conn, res), "%s: %s", what, PQerrorMessage(s->conn));
    PQclear(res);
    return ok;
}

static void notice_to_log(void *arg, const char *message)
{
    (void)arg;
    size_t n = strlen(message);
    log_debug("postgres: %.*s", (int)(n > 0 && message[n - 1] == '\n' ? n - 1 : n), message);
}

sink_status sink_connect(sink *s)
{
    sink_disconnect(s);
    s->failed = SINK_OK;
    s->err[0] = '\0';

    /* The conninfo may be key=value or a URI (expand_dbname); name the session unless the user did. */
    const char *keys[] = {"dbname", "fallback_application_name", NULL};
    const char *values[] = {s->conninfo, "oplog2pg", NULL};
    s->conn = PQconnectdbParams(keys, values, 1);
    if (PQstatus(s->conn) != CONNECTION_OK) {
        set_err(s, SINK_ERR_CONNECTION, "cannot connect to PostgreSQL: %s", PQerrorMessage(s->conn));
        goto fail;
    }
    PQsetNoticeProcessor(s->conn, notice_to_log, NULL);
    if (PQserverVersion(s->conn) < 130000) {
        set_err(s, SINK_ERR_DATA, "PostgreSQL %d is too old: oplog2pg needs 13 or later", PQserverVersion(s->conn));
        goto fail;
    }
    if (!exec_ok(s, "SET synchronous_commit = on; SET client_min_messages = warning", PGRES_COMMAND_OK,
                 "setting session options"))
        goto fail;
    if (!exec_ok(s, oplog2pg_sql_schema, PGRES_COMMAND_OK, "installing the oplog2pg schema") ||
        !exec_ok(s, oplog2pg_sql_update_functions, PGRES_COMMAND_OK, "installing the update functions"))
        goto fail;

    /* Fence: one daemon per service. The advisory lock lives as long as this session. */
    const char *params[1] = {s->service};
    PGresult *res = PQexecParams(s->conn, "SELECT pg_try_advisory_lock(hashtextextended('oplog2pg.service:' || $1, 0))",
                                 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        set_err(s, classify(s->conn, res), "taking the service lock: %s", PQerrorMessage(s->conn));
        PQclear(res);
        goto fail;
    }
    bool locked = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    if (!locked) {
        set_err(s, SINK_ERR_FENCED,
                "another oplog2pg is running for service '%s' on this database (it holds the service lock); "
                "stop it, or give this one a different [replication] service",
                s->service);
        goto fail;
    }
    res = PQexecParams(s->conn,
                       "INSERT INTO oplog2pg.checkpoint (service, owner) VALUES ($1, gen_random_uuid()) "
                       "ON CONFLICT (service) DO UPDATE SET owner = excluded.owner RETURNING owner",
                       1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        set_err(s, classify(s->conn, res), "claiming the checkpoint row: %s", PQerrorMessage(s->conn));
        PQclear(res);
        goto fail;
    }
    snprintf(s->owner, sizeof s->owner, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);

    if (PQsetnonblocking(s->conn, 1) != 0 || PQenterPipelineMode(s->conn) != 1) {
        set_err(s, SINK_ERR_CONNECTION, "entering pipeline mode: %s", PQerrorMessage(s->conn));
        goto fail;
    }
    return SINK_OK;

fail : {
    sink_status st = s->failed;
    if (s->conn != NULL)
        PQfinish(s->conn);
    s->conn = NULL;
    return st;
}
}

int sink_read_checkpoint(sink *s, op_pos *out)
{
    /* Read outside the pipeline: only called right after connect, before any group. */
    if (PQexitPipelineMode(s->conn) != 1 || PQsetnonblocking(s->conn, 0) != 0) {
        set_err(s, SINK_ERR_CONNECTION, "leaving pipeline mode: %s", PQerrorMessage(s->conn));
        return -1;
    }
    const char *params[1] = {s->service};
    PGresult *res = PQexecParams(s->conn, "SELECT ts_sec, ts_inc, term FROM oplog2pg.checkpoint WHERE service = $1", 1,
                                 NULL, params, NULL, NULL, 0);
    int rc = -1;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        set_err(s, classify(s->conn, res), "reading the checkpoint: %s", PQerrorMessage(s->conn));
    } else if (PQntuples(res) == 0 || PQgetisnull(res, 0, 0)) {
        rc = 0;
    } else {
        out->secs = (uint32_t)strtoul(PQgetvalue(res, 0, 0), NULL, 10);
        out->inc = (uint32_t)strtoul(PQgetvalue(res, 0, 1), NULL, 10);
        out->term = PQgetisnull(res, 0, 2) ? -1 : strtoll(PQgetvalue(res, 0, 2), NULL, 10);
        rc = 1;
    }
    PQclear(res);
    if (PQsetnonblocking(s->conn, 1) != 0 || PQenterPipelineMode(s->conn) != 1) {
        set_err(s, SINK_ERR_CONNECTION, "entering pipeline mode: %s", PQerrorMessage(s->conn));
        return -1;
    }
    return rc;
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
                set_err(s, SINK_ERR_DATA, "out of memory queueing a statement");
                return false;
            }
            s->pend = p;
            s->pend_cap = cap;
        }
    }
    pending *p = &s->pend[s->pend_tail++];
    p->kind = kind;
    p->t = t;
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

    if (st == PGRES_PIPELINE_ABORTED)
        return; /* skipped after an earlier error, which was recorded */
    if (st == PGRES_FATAL_ERROR) {
        char where[32];
        fmt_pos(&p->pos, where, sizeof where);
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        bool first = s->failed == SINK_OK;
        if (p->t != NULL)
            set_err(s, classify(s->conn, res), "%s on %s.%s (oplog entry %s) failed: [%s] %s", pending_what[p->kind],
                    p->t->db, p->t->coll, where, state ? state : "?", PQresultErrorMessage(res));
        else
            set_err(s, classify(s->conn, res), "%s (oplog entry %s) failed: [%s] %s", pending_what[p->kind], where,
                    state ? state : "?", PQresultErrorMessage(res));
        if (first && state != NULL)
            snprintf(s->err_state, sizeof s->err_state, "%s", state);
        return;
    }
}

/* Read every result that has arrived, without blocking. Returns false if the connection broke. */
static bool read_ready(sink *s)
{
    if (PQconsumeInput(s->conn) != 1) {
        set_err(s, SINK_ERR_CONNECTION, "lost the PostgreSQL connection: %s", PQerrorMessage(s->conn));
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
        set_err(s, SINK_ERR_CONNECTION, "lost the PostgreSQL connection: %s", PQerrorMessage(s->conn));
        return false;
    }
    return true;
}

static bool wait_socket(sink *s, bool for_write)
{
    struct pollfd pfd = {.fd = PQsocket(s->conn), .events = POLLIN | (for_write ? POLLOUT : 0)};
    for (;;) {
        int n = poll(&pfd, 1, -1);
        if (n >= 0)
            return true;
        if (errno != EINTR) {
            set_err(s, SINK_ERR_CONNECTION, "waiting for PostgreSQL: %s", strerror(errno));
            return false;
        }
    }
}

/* Push output and collect results. With `until` set, keep going until that many items remain pending. */
static bool pump(sink *s, size_t until)
{
    for (;;) {
        int fr = PQflush(s->conn);
        if (fr < 0) {
            set_err(s, SINK_ERR_CONNECTION, "sending to PostgreSQL: %s", PQerrorMessage(s->conn));
            return false;
        }
        if (!read_ready(s))
            return false;
        if (fr == 0 && s->pend_tail - s->pend_head <= until)
            return true;
        if (!wait_socket(s, fr == 1))
            return false;
    }
}

/* Send a Sync and wait for every outstanding result. */
static sink_status drain(sink *s)
{
    if (s->failed != SINK_OK)
        return s->failed;
    if (s->pend_head == s->pend_tail)
        return SINK_OK; /* nothing outstanding: no round trip */
    if (PQpipelineSync(s->conn) != 1) {
        set_err(s, SINK_ERR_CONNECTION, "sending a sync: %s", PQerrorMessage(s->conn));
        return s->failed;
    }
    if (!push_pending(s, P_SYNC, NULL, NULL))
        return s->failed;
    pump(s, 0);
    return s->failed;
}

/* After a send: opportunistic progress, and a bound on what waits unanswered. */
static sink_status after_send(sink *s, bool ok)
{
    if (!ok) {
        set_err(s, classify(s->conn, NULL), "queueing a statement: %s", PQerrorMessage(s->conn));
        return s->failed;
    }
    if (!pump(s, MAX_PENDING))
        return s->failed;
    if (s->cfg.per_op)
        return drain(s); /* the baseline: wait for every statement */
    return s->failed;
}

static sink_status send_simple(sink *s, pending_kind kind, const table *t, const char *sql, const op_pos *pos)
{
    if (!push_pending(s, kind, t, pos))
        return s->failed;
    return after_send(s, PQsendQueryParams(s->conn, sql, 0, NULL, NULL, NULL, NULL, 0) == 1);
}

static sink_status begin_if_needed(sink *s)
{
    if (s->failed != SINK_OK)
        return s->failed;
    if (s->conn == NULL) {
        set_err(s, SINK_ERR_CONNECTION, "not connected to PostgreSQL");
        return s->failed;
    }
    if (s->in_txn)
        return SINK_OK;
    s->in_txn = true;
    return send_simple(s, P_BEGIN, NULL, "BEGIN", NULL);
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
    return after_send(s, PQsendPrepare(s->conn, name, sql, 0, NULL) == 1);
}

/* The table for db.coll, created (schema, table) and its statements prepared on this connection if needed. */
static table *get_table(sink *s, const char *db, const char *coll, const op_pos *pos)
{
    table *t = find_table(s, db, coll);
    if (t != NULL && t->ready)
        return t;

    char where[32];
    fmt_pos(pos, where, sizeof where);
    if (strlen(db) > PG_MAX_IDENT || strlen(coll) > PG_MAX_IDENT || db[0] == '\0' || coll[0] == '\0') {
        set_err(s, SINK_ERR_DATA,
                "namespace %s.%s (oplog entry %s) cannot be a PostgreSQL table: database and collection names must "
                "be 1 to %d bytes",
                db, coll, where, PG_MAX_IDENT);
        return NULL;
    }
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
        char *qdb = quote_ident(s, db), *qcoll = quote_ident(s, coll);
        if (t->db && t->coll && qdb && qcoll && asprintf(&t->qname, "%s.%s", qdb, qcoll) < 0)
            t->qname = NULL;
        free(qdb);
        free(qcoll);
        if (t->db == NULL || t->coll == NULL || t->qname == NULL) {
            free(t->db);
            free(t->coll);
            free(t->qname);
            free(t);
            goto oom;
        }
        s->tables[s->ntables++] = t;
    }
    t->id = ++s->next_table_id;

    char *qdb = quote_ident(s, db), *sql = NULL;
    if (qdb == NULL)
        goto oom;
    bool ok = true;
    sql = shape_schema_sql(qdb); /* the table's shape is defined once, in map/shape.c */
    ok = sql != NULL && send_simple(s, P_DDL, t, sql, pos) == SINK_OK;
    free(sql);
    sql = ok ? shape_table_sql(t->qname) : NULL;
    ok = ok && sql != NULL && send_simple(s, P_DDL, t, sql, pos) == SINK_OK;
    free(sql);
    free(qdb);

    /* Insert doubles as replacement: an insert that meets its own _id (a replay) becomes the document it carries. */
    char buf[512];
    snprintf(buf, sizeof buf,
             "INSERT INTO %s (doc) VALUES ($1::jsonb) ON CONFLICT (_id) DO UPDATE SET doc = EXCLUDED.doc", t->qname);
    ok = ok && prepare_stmt(s, t, 'i', buf) == SINK_OK;
    snprintf(buf, sizeof buf, "UPDATE %s SET doc = oplog2pg.apply_update(doc, $2::jsonb) WHERE _id = $1::jsonb",
             t->qname);
    ok = ok && prepare_stmt(s, t, 'u', buf) == SINK_OK;
    snprintf(buf, sizeof buf, "DELETE FROM %s WHERE _id = $1::jsonb", t->qname);
    ok = ok && prepare_stmt(s, t, 'd', buf) == SINK_OK;
    if (!ok)
        return NULL;
    t->ready = true;
    return t;

oom:
    set_err(s, SINK_ERR_DATA, "out of memory preparing table %s.%s", db, coll);
    return NULL;
}

/* The group's transaction open and db.coll ready in it: what every write starts with. NULL on failure (s->failed). */
static table *open_table(sink *s, const char *db, const char *coll, const op_pos *pos)
{
    if (begin_if_needed(s) != SINK_OK)
        return NULL;
    return get_table(s, db, coll, pos);
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* batches: binary COPY tuples with one jsonb field: int16 1, int32 len, byte 1 (jsonb version), JSON text */

sink_batch *sink_batch_new(void)
{
    return calloc(1, sizeof(sink_batch));
}

void sink_batch_free(sink_batch *b)
{
    if (b == NULL)
        return;
    free(b->buf);
    free(b);
}

void sink_batch_reset(sink_batch *b)
{
    b->len = 0;
    b->rows = 0;
}

size_t sink_batch_rows(const sink_batch *b)
{
    return b->rows;
}

size_t sink_batch_bytes(const sink_batch *b)
{
    return b->len;
}

static void put_be16(char *p, uint16_t v)
{
    p[0] = (char)(v >> 8);
    p[1] = (char)v;
}

static void put_be32(char *p, uint32_t v)
{
    p[0] = (char)(v >> 24);
    p[1] = (char)(v >> 16);
    p[2] = (char)(v >> 8);
    p[3] = (char)v;
}

static uint32_t get_be32(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;
    return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}

bool sink_batch_add_json(sink_batch *b, const char *json, size_t jlen)
{
    if (jlen > INT32_MAX - 1)
        return false;
    size_t need = b->len + 2 + 4 + 1 + jlen;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 65536;
        while (cap < need)
            cap *= 2;
        char *nb = realloc(b->buf, cap);
        if (nb == NULL)
            return false;
        b->buf = nb;
        b->cap = cap;
    }
    char *p = b->buf + b->len;
    put_be16(p, 1);
    put_be32(p + 2, (uint32_t)(jlen + 1));
    p[6] = 1;
    memcpy(p + 7, json, jlen);
    b->len = need;
    b->rows++;
    return true;
}

bool sink_batch_add(sink_batch *b, const bson_t *doc)
{
    size_t jlen = 0;
    char *json = ejson_document(doc, &jlen);
    bool ok = json != NULL && sink_batch_add_json(b, json, jlen);
    bson_free(json);
    return ok;
}

bool sink_batch_put_copy(PGconn *conn, const sink_batch *b)
{
    static const char trailer[2] = {(char)0xff, (char)0xff};
    enum { PIECE = 256 * 1024 }; /* rows may span pieces: COPY data is a byte stream */
    bool sent = PQputCopyData(conn, copy_header, COPY_HEADER_LEN) == 1;
    for (size_t off = 0; sent && off < b->len;) {
        size_t n = b->len - off > PIECE ? PIECE : b->len - off;
        sent = PQputCopyData(conn, b->buf + off, (int)n) == 1;
        off += n;
    }
    return sent && PQputCopyData(conn, trailer, 2) == 1 && PQputCopyEnd(conn, NULL) == 1;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* writes */

/* Each row of the batch as a binary jsonb parameter of the upsert statement, pipelined. */
static sink_status insert_rows_pipelined(sink *s, table *t, const sink_batch *b, const op_pos *pos)
{
    char name[32];
    snprintf(name, sizeof name, "i%u", t->id);
    const int formats[1] = {1};
    for (size_t off = 0; off < b->len;) {
        uint32_t flen = get_be32(b->buf + off + 2);
        const char *values[1] = {b->buf + off + 6};
        const int lengths[1] = {(int)flen};
        if (!push_pending(s, P_INSERT, t, pos))
            return s->failed;
        if (after_send(s, PQsendQueryPrepared(s->conn, name, 1, values, lengths, formats, 0) == 1) != SINK_OK)
            return s->failed;
        off += 6 + flen;
    }
    s->stats.rows_inserted += b->rows;
    s->stats.bytes += b->len;
    return SINK_OK;
}

static bool leave_pipeline(sink *s)
{
    if (PQexitPipelineMode(s->conn) != 1 || PQsetnonblocking(s->conn, 0) != 0) {
        set_err(s, SINK_ERR_CONNECTION, "leaving pipeline mode: %s", PQerrorMessage(s->conn));
        return false;
    }
    return true;
}

static bool enter_pipeline(sink *s)
{
    if (PQsetnonblocking(s->conn, 1) != 0 || PQenterPipelineMode(s->conn) != 1) {
        set_err(s, SINK_ERR_CONNECTION, "entering pipeline mode: %s", PQerrorMessage(s->conn));
        return false;
    }
    return true;
}

/* COPY the batch. Returns SINK_OK, or an error; *dup is set when the COPY met an existing _id. */
static sink_status copy_rows(sink *s, table *t, const sink_batch *b, const op_pos *pos, bool *dup)
{
    char where[32], sql[256];
    fmt_pos(pos, where, sizeof where);
    snprintf(sql, sizeof sql, "COPY %s (doc) FROM STDIN (FORMAT binary)", t->qname);
    *dup = false;

    PGresult *res = PQexec(s->conn, sql);
    if (PQresultStatus(res) != PGRES_COPY_IN) {
        set_err(s, classify(s->conn, res), "COPY into %s.%s (oplog entries up to %s) failed to start: %s", t->db,
                t->coll, where, PQerrorMessage(s->conn));
        PQclear(res);
        return s->failed;
    }
    PQclear(res);
    if (!sink_batch_put_copy(s->conn, b)) {
        set_err(s, SINK_ERR_CONNECTION, "sending COPY data: %s", PQerrorMessage(s->conn));
        return s->failed;
    }
    sink_status st = SINK_OK;
    while ((res = PQgetResult(s->conn)) != NULL) {
        if (PQresultStatus(res) != PGRES_COMMAND_OK && st == SINK_OK) {
            const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
            if (state != NULL && strcmp(state, "23505") == 0) {
                *dup = true;
                st = SINK_ERR_DATA;
            } else {
                set_err(s, classify(s->conn, res), "COPY into %s.%s (oplog entries up to %s) failed: %s", t->db,
                        t->coll, where, PQresultErrorMessage(res));
                st = s->failed;
            }
        }
        PQclear(res);
    }
    return st;
}

sink_status sink_insert_batch(sink *s, const char *db, const char *coll, sink_batch *b, const op_pos *pos)
{
    if (b->rows == 0)
        return SINK_OK;
    table *t = open_table(s, db, coll, pos);
    if (t == NULL)
        return s->failed;
    if (s->cfg.per_op || b->rows < s->cfg.copy_min_rows)
        return insert_rows_pipelined(s, t, b, pos);

    /* Long run: COPY, outside the pipeline, behind a savepoint. */
    if (send_simple(s, P_SAVEPOINT, NULL, "SAVEPOINT " SAVEPOINT_NAME, pos) != SINK_OK || drain(s) != SINK_OK)
        return s->failed;
    if (!leave_pipeline(s))
        return s->failed;
    bool dup = false;
    sink_status st = copy_rows(s, t, b, pos, &dup);
    if (st != SINK_OK && dup) {
        if (!exec_ok(s, "ROLLBACK TO SAVEPOINT " SAVEPOINT_NAME, PGRES_COMMAND_OK, "rolling back a COPY"))
            return s->failed;
        char where[32];
        fmt_pos(pos, where, sizeof where);
        log_info("COPY of %zu rows into %s.%s (entries up to %s) met an existing _id; re-sending them as upserts",
                 b->rows, db, coll, where);
        s->stats.dup_fallbacks++;
        if (!enter_pipeline(s))
            return s->failed;
        if (insert_rows_pipelined(s, t, b, pos) != SINK_OK)
            return s->failed;
        return send_simple(s, P_RELEASE, NULL, "RELEASE SAVEPOINT " SAVEPOINT_NAME, pos);
    }
    if (st != SINK_OK)
        return st;
    if (!enter_pipeline(s))
        return s->failed;
    s->stats.rows_copied += b->rows;
    s->stats.bytes += b->len;
    return send_simple(s, P_RELEASE, NULL, "RELEASE SAVEPOINT " SAVEPOINT_NAME, pos);
}

sink_status sink_update_json(sink *s, const char *db, const char *coll, const char *id_json, op_update_form form,
                             const char *o_json, const op_pos *pos)
{
    table *t = open_table(s, db, coll, pos);
    if (t == NULL)
        return s->failed;
    char name[32];
    bool ok;
    if (!push_pending(s, form == OP_FORM_REPLACE ? P_INSERT : P_UPDATE, t, pos))
        return s->failed;
    if (form == OP_FORM_REPLACE) {
        /* A replacement is the whole new document: upsert it. */
        snprintf(name, sizeof name, "i%u", t->id);
        const char *values[1] = {o_json};
        ok = PQsendQueryPrepared(s->conn, name, 1, values, NULL, NULL, 0) == 1;
    } else {
        snprintf(name, sizeof name, "u%u", t->id);
        const char *values[2] = {id_json, o_json};
        ok = PQsendQueryPrepared(s->conn, name, 2, values, NULL, NULL, 0) == 1;
    }
    s->stats.bytes += strlen(o_json);
    s->stats.updates++;
    return after_send(s, ok);
}

/* An op whose text could not be made: the error names it. */
static sink_status unconvertible(sink *s, const char *what, const char *db, const char *coll, const op_pos *pos)
{
    char where[32];
    fmt_pos(pos, where, sizeof where);
    set_err(s, SINK_ERR_DATA, "%s on %s.%s (oplog entry %s): cannot convert it to JSON (invalid UTF-8?)", what, db,
            coll, where);
    return s->failed;
}

sink_status sink_update(sink *s, const char *db, const char *coll, const bson_value_t *id, op_update_form form,
                        const bson_t *o, const op_pos *pos)
{
    char *ojson = ejson_document(o, NULL);
    char *idjson = form == OP_FORM_REPLACE ? NULL : ejson_value(id);
    sink_status st = ojson == NULL || (form != OP_FORM_REPLACE && idjson == NULL)
                         ? unconvertible(s, "update", db, coll, pos)
                         : sink_update_json(s, db, coll, idjson, form, ojson, pos);
    bson_free(ojson);
    bson_free(idjson);
    return st;
}

sink_status sink_delete_json(sink *s, const char *db, const char *coll, const char *id_json, const op_pos *pos)
{
    table *t = open_table(s, db, coll, pos);
    if (t == NULL)
        return s->failed;
    char name[32];
    snprintf(name, sizeof name, "d%u", t->id);
    const char *values[1] = {id_json};
    if (!push_pending(s, P_DELETE, t, pos))
        return s->failed;
    bool ok = PQsendQueryPrepared(s->conn, name, 1, values, NULL, NULL, 0) == 1;
    s->stats.deletes++;
    return after_send(s, ok);
}

sink_status sink_delete(sink *s, const char *db, const char *coll, const bson_value_t *id, const op_pos *pos)
{
    char *idjson = ejson_value(id);
    sink_status st =
        idjson == NULL ? unconvertible(s, "delete", db, coll, pos) : sink_delete_json(s, db, coll, idjson, pos);
    bson_free(idjson);
    return st;
}

sink_status sink_create(sink *s, const char *db, const char *coll, const op_pos *pos)
{
    if (begin_if_needed(s) != SINK_OK)
        return s->failed;
    s->stats.ddl++;
    return get_table(s, db, coll, pos) != NULL ? SINK_OK : s->failed;
}

/* DDL on tables that may not be in the cache: quote names here. */
static sink_status ddl(sink *s, const op_pos *pos, const char *fmt, const char *a, const char *b, const char *c,
                       const char *d)
{
    char *qa = a ? quote_ident(s, a) : NULL, *qb = b ? quote_ident(s, b) : NULL;
    char *qc = c ? quote_ident(s, c) : NULL, *qd = d ? quote_ident(s, d) : NULL;
    char *sql = NULL;
    if ((a && !qa) || (b && !qb) || (c && !qc) || (d && !qd) || asprintf(&sql, fmt, qa, qb, qc, qd) < 0) {
        set_err(s, SINK_ERR_DATA, "out of memory building DDL");
        sql = NULL;
    }
    sink_status st = sql ? send_simple(s, P_DDL, NULL, sql, pos) : s->failed;
    free(qa);
    free(qb);
    free(qc);
    free(qd);
    free(sql);
    s->stats.ddl++;
    return st;
}

sink_status sink_drop(sink *s, const char *db, const char *coll, const op_pos *pos)
{
    if (begin_if_needed(s) != SINK_OK)
        return s->failed;
    forget_table(s, db, coll);
    return ddl(s, pos, "DROP TABLE IF EXISTS %s.%s", db, coll, NULL, NULL);
}

sink_status sink_rename(sink *s, const char *db, const char *coll, const char *to_db, const char *to_coll,
                        bool drop_target, const op_pos *pos)
{
    if (begin_if_needed(s) != SINK_OK)
        return s->failed;
    forget_table(s, db, coll);
    forget_table(s, to_db, to_coll);
    /* The target may have been dropped by the rename (dropTarget); without it, a target table left over from an
     * earlier run would make the rename fail, and MongoDB would have refused it, so dropping is right either way. */
    (void)drop_target;
    if (ddl(s, pos, "DROP TABLE IF EXISTS %s.%s", to_db, to_coll, NULL, NULL) != SINK_OK)
        return s->failed;
    /* Make sure the source exists (a collection can be renamed before anything was replicated from it). */
    table *t = get_table(s, db, coll, pos);
    if (t == NULL)
        return s->failed;
    forget_table(s, db, coll);
    if (strcmp(db, to_db) != 0) {
        if (ddl(s, pos, "CREATE SCHEMA IF NOT EXISTS %s", to_db, NULL, NULL, NULL) != SINK_OK ||
            ddl(s, pos, "ALTER TABLE %s.%s SET SCHEMA %s", db, coll, to_db, NULL) != SINK_OK)
            return s->failed;
        db = to_db;
    }
    if (strcmp(coll, to_coll) != 0)
        return ddl(s, pos, "ALTER TABLE %s.%s RENAME TO %s", db, coll, to_coll, NULL);
    return SINK_OK;
}

sink_status sink_drop_database(sink *s, const char *db, const op_pos *pos)
{
    if (begin_if_needed(s) != SINK_OK)
        return s->failed;
    forget_table(s, db, NULL);
    return ddl(s, pos, "DROP SCHEMA IF EXISTS %s CASCADE", db, NULL, NULL, NULL);
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

sink_status sink_commit(sink *s, const op_pos *pos)
{
    if (begin_if_needed(s) != SINK_OK)
        return s->failed;
    if (!s->ckpt_prepared) {
        if (!push_pending(s, P_PREPARE, NULL, NULL))
            return s->failed;
        if (after_send(s, PQsendPrepare(s->conn, "ckpt", "SELECT oplog2pg.advance_checkpoint($1, $5::uuid, $2, $3, $4)",
                                        0, NULL) == 1) != SINK_OK)
            return s->failed;
        s->ckpt_prepared = true;
    }
    char secs[16], inc[16], term[24];
    snprintf(secs, sizeof secs, "%u", pos->secs);
    snprintf(inc, sizeof inc, "%u", pos->inc);
    snprintf(term, sizeof term, "%lld", (long long)pos->term);
    const char *values[5] = {s->service, secs, inc, pos->term < 0 ? NULL : term, s->owner};
    if (!push_pending(s, P_CKPT, NULL, pos))
        return s->failed;
    if (PQsendQueryPrepared(s->conn, "ckpt", 5, values, NULL, NULL, 0) != 1) {
        set_err(s, SINK_ERR_CONNECTION, "queueing the checkpoint: %s", PQerrorMessage(s->conn));
        return s->failed;
    }
    if (send_simple(s, P_COMMIT, NULL, "COMMIT", pos) != SINK_OK && s->failed != SINK_OK)
        return s->failed;
    s->in_txn = false;
    /* A foreign owner token makes advance_checkpoint raise O2FEN: the transaction, data included, rolls back. */
    if (drain(s) != SINK_OK)
        return s->failed;
    s->stats.commits++;
    return SINK_OK;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* guarded ops and dead letters */

#define GUARD_NAME "oplog2pg_op"

void sink_set_per_op(sink *s, bool on)
{
    s->cfg.per_op = on;
}

sink_status sink_guard_begin(sink *s)
{
    if (begin_if_needed(s) != SINK_OK)
        return s->failed;
    if (send_simple(s, P_SAVEPOINT, NULL, "SAVEPOINT " GUARD_NAME, NULL) != SINK_OK || drain(s) != SINK_OK)
        return s->failed;
    s->guarded = true;
    return SINK_OK;
}

sink_status sink_guard_end(sink *s)
{
    if (!s->guarded)
        return s->failed;
    s->guarded = false;
    return send_simple(s, P_RELEASE, NULL, "RELEASE SAVEPOINT " GUARD_NAME, NULL);
}

/* The op's _id as relaxed Extended JSON (bson_free it), or NULL for DDL and when it cannot be rendered. */
static char *op_id_text(const op *o)
{
    if (o->id_json != NULL)
        return bson_strdup(o->id_json);
    return o->id.value_type != BSON_TYPE_EOD ? ejson_value(&o->id) : NULL;
}

sink_status sink_refused(sink *s, const op *o, const char *why)
{
    char at[OP_POS_STRLEN];
    char *id_text = op_id_text(o);
    if (why != NULL)
        set_err(s, SINK_ERR_DATA, "%s", why);
    log_error("the op PostgreSQL refused: %s.%s%s%s (oplog entry %s, op %u of the entry)", o->db,
              o->coll ? o->coll : "", id_text ? " _id " : "", id_text ? id_text : "",
              op_pos_format(&o->pos, at, sizeof at), o->index);
    bson_free(id_text);
    return s->failed != SINK_OK ? s->failed : SINK_ERR_DATA;
}

sink_status sink_dead_letter(sink *s, const op *o, const char *why)
{
    char msg[sizeof s->err], state[sizeof s->err_state], at[OP_POS_STRLEN];
    if (s->failed == SINK_ERR_CONNECTION || s->failed == SINK_ERR_FENCED)
        return s->failed;
    snprintf(msg, sizeof msg, "%s", why != NULL ? why : s->err[0] ? s->err : "refused");
    snprintf(state, sizeof state, "%s", why != NULL ? "" : s->err_state);
    if (!s->guarded) {
        set_err(s, SINK_ERR_DATA, "%s (and it cannot be set aside: no guard was open)", msg);
        return s->failed;
    }
    s->guarded = false;

    /* Settle the pipeline: after an error the server skips everything up to the next sync, whose results (aborted)
     * carry no news. Then undo the op back to its guard and record it instead. */
    s->failed = SINK_OK;
    s->err[0] = '\0';
    if (PQpipelineSync(s->conn) != 1) {
        set_err(s, SINK_ERR_CONNECTION, "sending a sync: %s", PQerrorMessage(s->conn));
        return s->failed;
    }
    if (!push_pending(s, P_SYNC, NULL, NULL) || !pump(s, 0))
        return s->failed;
    if (send_simple(s, P_SAVEPOINT, NULL, "ROLLBACK TO SAVEPOINT " GUARD_NAME, &o->pos) != SINK_OK)
        return s->failed;

    char secs[16], inc[16], term[24], idx[16], *id_text = op_id_text(o), *op_text = NULL;
    snprintf(secs, sizeof secs, "%u", o->pos.secs);
    snprintf(inc, sizeof inc, "%u", o->pos.inc);
    snprintf(term, sizeof term, "%lld", (long long)o->pos.term);
    snprintf(idx, sizeof idx, "%u", o->index);
    const char *kind = o->kind == OP_INSERT ? "i" : o->kind == OP_UPDATE ? "u" : o->kind == OP_DELETE ? "d" : "c";
    if (o->json != NULL) {
        op_text = bson_strdup(o->json);
    } else if (o->doc != NULL) {
        bson_t doc;
        if (bson_init_static(&doc, o->doc, o->doc_len))
            op_text = ejson_document(&doc, NULL); /* the same rendering as the rows */
    }
    const char *values[13] = {s->service,
                              secs,
                              inc,
                              o->pos.term < 0 ? NULL : term,
                              idx,
                              o->db,
                              o->coll ? o->coll : "",
                              kind,
                              id_text,
                              (const char *)o->doc,
                              op_text,
                              msg,
                              state[0] ? state : NULL};
    int lengths[13] = {0};
    int formats[13] = {0};
    lengths[9] = (int)o->doc_len;
    formats[9] = 1;
    if (o->doc == NULL)
        values[9] = NULL;
    if (!push_pending(s, P_DEAD_LETTER, NULL, &o->pos)) {
        bson_free(id_text);
        bson_free(op_text);
        return s->failed;
    }
    bool ok = PQsendQueryParams(s->conn,
                                "SELECT oplog2pg.record_dead_letter($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, "
                                "$13)",
                                13, NULL, values, lengths, formats, 0) == 1;
    if (after_send(s, ok) == SINK_OK)
        drain(s);
    if (s->failed == SINK_OK) {
        s->stats.dead_letters++;
        log_error("%s %s.%s%s%s (oplog entry %s): %s; set aside in oplog2pg.dead_letter, going on",
                  kind[0] == 'c' ? "DDL on" : "op on", o->db, o->coll ? o->coll : "", id_text ? " _id " : "",
                  id_text ? id_text : "", op_pos_format(&o->pos, at, sizeof at), msg);
    }
    bson_free(id_text);
    bson_free(op_text);
    /* The op may have created its table inside the guard: forget it, so the next op on it makes sure again. */
    forget_table(s, o->db, o->coll ? o->coll : NULL);
    return s->failed;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* probe */

bool sink_probe(const char *conninfo, const char *service, sink_probe_result *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const char *keys[] = {"dbname", "fallback_application_name", NULL};
    const char *values[] = {conninfo, "oplog2pg-probe", NULL};
    PGconn *conn = PQconnectdbParams(keys, values, 1);
    PGresult *res = NULL;
    bool ok = false;
    if (PQstatus(conn) != CONNECTION_OK) {
        snprintf(err, errlen, "cannot connect to PostgreSQL: %s", PQerrorMessage(conn));
        goto done;
    }
    snprintf(out->server_version, sizeof out->server_version, "%d.%d", PQserverVersion(conn) / 10000,
             PQserverVersion(conn) % 10000);
    /* The advisory lock the daemon holds: a bigint key shows in pg_locks as classid (high half), objid (low half). */
    const char *params[1] = {service};
    res = PQexecParams(conn,
                       "WITH k AS (SELECT hashtextextended('oplog2pg.service:' || $1, 0) AS key) "
                       "SELECT to_regclass('oplog2pg.checkpoint') IS NOT NULL, EXISTS (SELECT 1 FROM pg_locks, k "
                       "WHERE locktype = 'advisory' AND objsubid = 1 AND granted "
                       "AND classid::bigint = ((key >> 32) & 4294967295) AND objid::bigint = (key & 4294967295))",
                       1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        snprintf(err, errlen, "probing PostgreSQL: %s", PQerrorMessage(conn));
        goto done;
    }
    out->have_table = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    out->running = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
    PQclear(res);
    res = NULL;
    if (out->have_table) {
        res = PQexecParams(conn,
                           "SELECT ts_sec, ts_inc, term, applied_at FROM oplog2pg.checkpoint "
                           "WHERE service = $1 AND ts_sec IS NOT NULL",
                           1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            snprintf(err, errlen, "reading oplog2pg.checkpoint: %s", PQerrorMessage(conn));
            goto done;
        }
        if (PQntuples(res) == 1) {
            out->have_checkpoint = true;
            out->pos.secs = (uint32_t)strtoul(PQgetvalue(res, 0, 0), NULL, 10);
            out->pos.inc = (uint32_t)strtoul(PQgetvalue(res, 0, 1), NULL, 10);
            out->pos.term = PQgetisnull(res, 0, 2) ? -1 : strtoll(PQgetvalue(res, 0, 2), NULL, 10);
            snprintf(out->applied_at, sizeof out->applied_at, "%s", PQgetvalue(res, 0, 3));
        }
        PQclear(res);
        /* The table comes with the schema of a later version: an older database may not have it yet. */
        res = PQexec(conn, "SELECT to_regclass('oplog2pg.dead_letter') IS NOT NULL");
        bool have_dl = PQresultStatus(res) == PGRES_TUPLES_OK && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
        PQclear(res);
        res = have_dl ? PQexecParams(conn, "SELECT count(*) FROM oplog2pg.dead_letter WHERE service = $1", 1, NULL,
                                     params, NULL, NULL, 0)
                      : PQexec(conn, "SELECT 0");
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            snprintf(err, errlen, "counting oplog2pg.dead_letter: %s", PQerrorMessage(conn));
            goto done;
        }
        out->dead_letters = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    }
    ok = true;
done:
    PQclear(res);
    PQfinish(conn);
    return ok;
}

sink_status sink_clear_checkpoint(sink *s)
{
    if (begin_if_needed(s) != SINK_OK)
        return s->failed;
    const char *values[2] = {s->service, s->owner};
    if (!push_pending(s, P_CKPT, NULL, NULL))
        return s->failed;
    bool ok = PQsendQueryParams(s->conn,
                                "UPDATE oplog2pg.checkpoint SET ts_sec = NULL, ts_inc = NULL, term = NULL, "
                                "applied_at = now() WHERE service = $1 AND owner = $2::uuid",
                                2, NULL, values, NULL, NULL, 0) == 1;
    if (after_send(s, ok) != SINK_OK)
        return s->failed;
    if (send_simple(s, P_COMMIT, NULL, "COMMIT", NULL) != SINK_OK)
        return s->failed;
    s->in_txn = false;
    return drain(s);
}

/*
 * copy.c — the initial copy of every included collection into PostgreSQL (see copy.h for the contract).
 *
 * NOTES
 * - The coordinator (the caller's thread) plans or resumes the copy, starts the workers, and then only watches:
 *   progress lines, the oplog window (oldest entry versus the copy's start), the cancel flag. Workers share nothing
 *   but the job list (under `mu`) and their atomic counters.
 * - A worker copies one collection at a time: find sorted by _id, from the committed last _id with the find options
 *   min/hint (inclusive, full BSON order, so an _id of another type than the last one is never skipped, as a
 *   {$gt: X} filter would do), the first document skipped when it is the last one committed. Each batch is one
 *   PostgreSQL transaction: the binary COPY of the rows, then the progress row (last _id, count), then COMMIT.
 * - A COPY meeting an existing _id (a table left by an attempt whose progress was not committed, or rows the oplog
 *   replay of an earlier run put there) is rolled back and the batch goes through a temporary staging table and
 *   INSERT ... ON CONFLICT (_id) DO UPDATE, the same upsert the sink uses.
 * - Any error while copying a collection drops the uncommitted rows and restarts from the committed last _id: a
 *   connection error (MongoDB or PostgreSQL) a few times with backoff, anything else at once as COPY_FAILED.
 */
#include "source/copy.h"

#include <errno.h>
#include <libpq-fe.h>
#include <math.h>
#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "map/ejson.h"
#include "map/shape.h"
#include "sink/pg.h"
#include "source/oplog_edge.h"
#include "sql_embed.h"
#include "util/log.h"

#define DEFAULT_BATCH_DOCS 10000
#define WINDOW_CHECK_MS    1000 /* how often the coordinator reads the oldest oplog entry */
#define WINDOW_WARN_EVERY  60.0 /* seconds between two window warnings */
#define MAX_RETRIES        4    /* attempts after a connection error, per collection, without progress */
#define STAGE_TABLE        "oplog2pg_copy_stage"
#define ERRLEN             1024

typedef enum { JOB_PENDING, JOB_RUNNING, JOB_FINISHED } job_state;

typedef struct {
    char db[128], coll[256];
    uint8_t *last_id; /* committed {_id: v} BSON (malloc), NULL before the first batch */
    uint32_t last_id_len;
    int64_t copied; /* committed documents (the worker's, while it runs the job) */
    int64_t estimate;
    bool done;
    job_state state;             /* under mu */
    _Atomic int64_t live_copied; /* committed documents, for the progress lines */
    int64_t run_base;            /* copied when this run took the job */
    double run_started;          /* when this run took the job (monotonic seconds) */
} job;

typedef struct {
    const copy_config *cfg;
    op_pos start;
    uint32_t batch_docs;
    pthread_mutex_t mu;
    job *jobs;
    size_t njobs, next;
    atomic_bool stop;           /* a worker failed or the window is lost: everyone stops after the current batch */
    atomic_int workers_running; /* workers not yet returned */
    copy_result result;         /* the first failure (COPY_DONE while none), under mu */
    char err[ERRLEN];
    pthread_mutex_t ddl_mu; /* CREATE SCHEMA IF NOT EXISTS races between connections: one at a time */
} run_ctx;

/* ---------------------------------------------------------------------------------------------------------------- */
/* pure helpers */

const char *copy_format_duration(double secs, char *buf, size_t len)
{
    if (!isfinite(secs) || secs < 0) {
        snprintf(buf, len, "?");
        return buf;
    }
    uint64_t s = (uint64_t)(secs + 0.5);
    if (s < 60)
        snprintf(buf, len, "%us", (unsigned)s);
    else if (s < 3600)
        snprintf(buf, len, "%um%02us", (unsigned)(s / 60), (unsigned)(s % 60));
    else if (s < 86400)
        snprintf(buf, len, "%uh%02um", (unsigned)(s / 3600), (unsigned)(s % 3600 / 60));
    else
        snprintf(buf, len, "%llud%02uh", (unsigned long long)(s / 86400), (unsigned)(s % 86400 / 3600));
    return buf;
}

double copy_eta_seconds(int64_t done, int64_t total, double rate)
{
    if (done >= total)
        return 0;
    if (!(rate > 0))
        return -1;
    return (double)(total - done) / rate;
}

const char *copy_result_name(copy_result r)
{
    switch (r) {
    case COPY_DONE:
        return "copied";
    case COPY_CANCELLED:
        return "cancelled";
    case COPY_WINDOW_LOST:
        return "oplog window lost";
    case COPY_FAILED:
        return "failed";
    }
    return "?";
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* small utilities */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void trim_nl(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' '))
        s[--n] = '\0';
}

static bool skip_namespace(const nsfilter *f, const char *db, const char *coll)
{
    if (strcmp(db, "admin") == 0 || strcmp(db, "local") == 0 || strcmp(db, "config") == 0)
        return true;
    if (strncmp(coll, "system.", 7) == 0)
        return true;
    return f != NULL && !nsfilter_match(f, db, coll);
}

/* The _id of a {_id: v} BSON as relaxed Extended JSON, for messages ("(none)" before the first batch). */
static void id_text(const uint8_t *bson, uint32_t len, char *buf, size_t buflen)
{
    bson_t b;
    bson_iter_t it;
    if (bson == NULL || !bson_init_static(&b, bson, len) || !bson_iter_init_find(&it, &b, "_id")) {
        snprintf(buf, buflen, "(none)");
        return;
    }
    char *j = ejson_value(bson_iter_value(&it));
    snprintf(buf, buflen, "%s", j ? j : "(unprintable)");
    bson_free(j);
}

/* A PostgreSQL error worth retrying: the connection, the server shutting down, too many connections, conflicts. */
static bool pg_retryable(PGconn *pg, const PGresult *res)
{
    if (pg == NULL || PQstatus(pg) == CONNECTION_BAD)
        return true;
    const char *st = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    if (st == NULL)
        return true;
    return strncmp(st, "08", 2) == 0 || strncmp(st, "57P", 3) == 0 || strcmp(st, "53300") == 0 ||
           strcmp(st, "40001") == 0 || strcmp(st, "40P01") == 0;
}

/* MongoDB errors that a later attempt may not meet: the network, server selection, elections, killed cursors. */
static bool mongo_retryable(const bson_error_t *e)
{
    if (e->domain != MONGOC_ERROR_SERVER && e->domain != MONGOC_ERROR_QUERY && e->domain != MONGOC_ERROR_WRITE_CONCERN)
        return e->domain == MONGOC_ERROR_STREAM || e->domain == MONGOC_ERROR_SERVER_SELECTION ||
               e->domain == MONGOC_ERROR_CLIENT || e->domain == MONGOC_ERROR_CURSOR;
    switch (e->code) {
    case 6:
    case 7:
    case 89:
    case 91:
    case 189:
    case 262:
    case 9001:
    case 10107:
    case 11600:
    case 11602:
    case 13435:
    case 13436:
    case 43:
    case 237:
    case 175:
        return true;
    default:
        return false;
    }
}

static bool pg_exec(PGconn *pg, const char *sql, char *err, size_t errlen, bool *retryable)
{
    PGresult *r = PQexec(pg, sql);
    ExecStatusType st = PQresultStatus(r);
    bool ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
    if (!ok) {
        if (retryable)
            *retryable = pg_retryable(pg, r);
        snprintf(err, errlen, "%s", PQerrorMessage(pg));
        trim_nl(err);
    }
    PQclear(r);
    return ok;
}

static PGconn *pg_connect(const char *conninfo, char *err, size_t errlen)
{
    PGconn *pg = PQconnectdb(conninfo);
    if (pg == NULL || PQstatus(pg) != CONNECTION_OK) {
        snprintf(err, errlen, "connecting to PostgreSQL: %s", pg ? PQerrorMessage(pg) : "out of memory");
        trim_nl(err);
        PQfinish(pg);
        return NULL;
    }
    PGresult *r = PQexec(pg, "SET client_min_messages = warning");
    PQclear(r);
    return pg;
}

static mongoc_client_t *mongo_connect(const char *uri, char *err, size_t errlen)
{
    bson_error_t e;
    mongoc_uri_t *u = mongoc_uri_new_with_error(uri, &e);
    if (u == NULL) {
        snprintf(err, errlen, "bad MongoDB URI: %s", e.message);
        return NULL;
    }
    mongoc_client_t *c = mongoc_client_new_from_uri(u);
    mongoc_uri_destroy(u);
    if (c == NULL) {
        snprintf(err, errlen, "cannot create a MongoDB client for %s", uri);
        return NULL;
    }
    mongoc_client_set_error_api(c, MONGOC_ERROR_API_VERSION_2);
    mongoc_client_set_appname(c, "oplog2pg-copy");
    return c;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* the copy state in PostgreSQL */

/* 1 with *start and *finished when the service has a copy state row, 0 when not, -1 on error. */
static int state_load(PGconn *pg, const char *service, op_pos *start, bool *finished, char *err, size_t errlen)
{
    const char *p[1] = {service};
    PGresult *r = PQexecParams(pg,
                               "SELECT start_sec, start_inc, start_term, finished_at IS NOT NULL "
                               "FROM oplog2pg.copy_state WHERE service = $1",
                               1, NULL, p, NULL, NULL, 0);
    int rc = -1;
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        snprintf(err, errlen, "reading oplog2pg.copy_state: %s", PQerrorMessage(pg));
        trim_nl(err);
    } else if (PQntuples(r) == 0) {
        rc = 0;
    } else {
        start->secs = (uint32_t)strtoul(PQgetvalue(r, 0, 0), NULL, 10);
        start->inc = (uint32_t)strtoul(PQgetvalue(r, 0, 1), NULL, 10);
        start->term = strtoll(PQgetvalue(r, 0, 2), NULL, 10);
        *finished = PQgetvalue(r, 0, 3)[0] == 't';
        rc = 1;
    }
    PQclear(r);
    return rc;
}

static void jobs_free(job *jobs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(jobs[i].last_id);
    free(jobs);
}

static bool jobs_load(PGconn *pg, const char *service, job **out, size_t *nout, char *err, size_t errlen)
{
    const char *p[1] = {service};
    /* last_id in binary (result format 1) so the BSON comes back byte for byte. */
    PGresult *r = PQexecParams(pg,
                               "SELECT db, coll, last_id, copied, total_estimate, done FROM oplog2pg.copy_progress "
                               "WHERE service = $1 ORDER BY db, coll",
                               1, NULL, p, NULL, NULL, 1);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        snprintf(err, errlen, "reading oplog2pg.copy_progress: %s", PQerrorMessage(pg));
        trim_nl(err);
        PQclear(r);
        return false;
    }
    size_t n = (size_t)PQntuples(r);
    job *jobs = calloc(n ? n : 1, sizeof *jobs);
    if (jobs == NULL)
        goto oom;
    for (size_t i = 0; i < n; i++) {
        job *j = &jobs[i];
        int row = (int)i;
        snprintf(j->db, sizeof j->db, "%s", PQgetvalue(r, row, 0));
        snprintf(j->coll, sizeof j->coll, "%s", PQgetvalue(r, row, 1));
        if (!PQgetisnull(r, row, 2) && PQgetlength(r, row, 2) > 0) {
            j->last_id_len = (uint32_t)PQgetlength(r, row, 2);
            j->last_id = malloc(j->last_id_len);
            if (j->last_id == NULL) {
                jobs_free(jobs, n);
                goto oom;
            }
            memcpy(j->last_id, PQgetvalue(r, row, 2), j->last_id_len);
        }
        /* binary int8: big-endian */
        const unsigned char *c = (const unsigned char *)PQgetvalue(r, row, 3);
        const unsigned char *t = (const unsigned char *)PQgetvalue(r, row, 4);
        uint64_t cv = 0, tv = 0;
        for (int k = 0; k < 8; k++) {
            cv = cv << 8 | c[k];
            tv = tv << 8 | t[k];
        }
        j->copied = (int64_t)cv;
        j->estimate = (int64_t)tv;
        j->done = PQgetvalue(r, row, 5)[0] != 0;
        j->state = j->done ? JOB_FINISHED : JOB_PENDING;
        atomic_store(&j->live_copied, j->copied);
    }
    PQclear(r);
    *out = jobs;
    *nout = n;
    return true;
oom:
    PQclear(r);
    snprintf(err, errlen, "out of memory reading the copy progress");
    return false;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* planning a new copy */

typedef struct {
    char db[128], coll[256];
    int64_t estimate;
} plan_item;

typedef struct {
    plan_item *items;
    size_t n, cap;
} plan;

static bool plan_add(plan *p, const char *db, const char *coll, int64_t estimate)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        plan_item *ni = realloc(p->items, cap * sizeof *ni);
        if (ni == NULL)
            return false;
        p->items = ni;
        p->cap = cap;
    }
    plan_item *it = &p->items[p->n++];
    snprintf(it->db, sizeof it->db, "%s", db);
    snprintf(it->coll, sizeof it->coll, "%s", coll);
    it->estimate = estimate;
    return true;
}

/* Every included collection (views and system collections left out), with its estimated count. */
static bool plan_collections(mongoc_client_t *client, const nsfilter *filter, plan *p, char *err, size_t errlen)
{
    bson_error_t e;
    char **dbs = mongoc_client_get_database_names_with_opts(client, NULL, &e);
    if (dbs == NULL) {
        snprintf(err, errlen, "listing databases: %s", e.message);
        return false;
    }
    bool ok = true;
    for (size_t d = 0; ok && dbs[d] != NULL; d++) {
        const char *dbname = dbs[d];
        if (strcmp(dbname, "admin") == 0 || strcmp(dbname, "local") == 0 || strcmp(dbname, "config") == 0)
            continue;
        if (strlen(dbname) >= sizeof p->items[0].db) {
            log_warning("copy: skipping database %s: name too long", dbname);
            continue;
        }
        mongoc_database_t *db = mongoc_client_get_database(client, dbname);
        bson_t *opts = BCON_NEW("filter", "{", "type", "collection", "}");
        mongoc_cursor_t *cur = mongoc_database_find_collections_with_opts(db, opts);
        const bson_t *doc;
        while (ok && mongoc_cursor_next(cur, &doc)) {
            bson_iter_t it;
            const char *name = NULL, *type = "collection";
            if (bson_iter_init_find(&it, doc, "name") && BSON_ITER_HOLDS_UTF8(&it))
                name = bson_iter_utf8(&it, NULL);
            if (bson_iter_init_find(&it, doc, "type") && BSON_ITER_HOLDS_UTF8(&it))
                type = bson_iter_utf8(&it, NULL);
            if (name == NULL || strcmp(type, "collection") != 0 || skip_namespace(filter, dbname, name))
                continue;
            if (strlen(name) >= sizeof p->items[0].coll) {
                log_warning("copy: skipping %s.%s: name too long", dbname, name);
                continue;
            }
            mongoc_collection_t *coll = mongoc_database_get_collection(db, name);
            bson_error_t ce;
            int64_t n = mongoc_collection_estimated_document_count(coll, NULL, NULL, NULL, &ce);
            if (n < 0) {
                log_warning("copy: counting %s.%s: %s (the progress will have no estimate)", dbname, name, ce.message);
                n = 0;
            }
            mongoc_collection_destroy(coll);
            if (!plan_add(p, dbname, name, n)) {
                snprintf(err, errlen, "out of memory listing collections");
                ok = false;
            }
        }
        if (ok && mongoc_cursor_error(cur, &e)) {
            snprintf(err, errlen, "listing the collections of %s: %s", dbname, e.message);
            ok = false;
        }
        mongoc_cursor_destroy(cur);
        bson_destroy(opts);
        mongoc_database_destroy(db);
    }
    bson_strfreev(dbs);
    return ok;
}

/* The copy_state row and one copy_progress row per collection, in one transaction. */
static bool plan_store(PGconn *pg, const char *service, const op_pos *start, const plan *p, char *err, size_t errlen)
{
    char m[ERRLEN];
    if (!pg_exec(pg, "BEGIN", m, sizeof m, NULL))
        goto fail;
    char sec[24], inc[24], term[24];
    snprintf(sec, sizeof sec, "%u", start->secs);
    snprintf(inc, sizeof inc, "%u", start->inc);
    snprintf(term, sizeof term, "%lld", (long long)start->term);
    const char *sp[4] = {service, sec, inc, term};
    PGresult *r = PQexecParams(pg,
                               "INSERT INTO oplog2pg.copy_state (service, start_sec, start_inc, start_term) "
                               "VALUES ($1, $2, $3, $4)",
                               4, NULL, sp, NULL, NULL, 0);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    for (size_t i = 0; ok && i < p->n; i++) {
        char est[24];
        snprintf(est, sizeof est, "%lld", (long long)p->items[i].estimate);
        const char *pp[4] = {service, p->items[i].db, p->items[i].coll, est};
        r = PQexecParams(pg,
                         "INSERT INTO oplog2pg.copy_progress (service, db, coll, total_estimate) "
                         "VALUES ($1, $2, $3, $4)",
                         4, NULL, pp, NULL, NULL, 0);
        ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
    }
    if (!ok) {
        snprintf(m, sizeof m, "%s", PQerrorMessage(pg));
        trim_nl(m);
        PGresult *rb = PQexec(pg, "ROLLBACK");
        PQclear(rb);
        goto fail;
    }
    if (!pg_exec(pg, "COMMIT", m, sizeof m, NULL))
        goto fail;
    return true;
fail:
    snprintf(err, errlen, "recording the copy plan of service %s: %s", service, m);
    return false;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* workers */

typedef struct {
    run_ctx *rc;
    mongoc_client_t *mongo;
    PGconn *pg;
    sink_batch *batch;
    char *qtable; /* "db"."coll" of the current job */
    bool stage_ready;
    char err[ERRLEN];
} worker;

static bool stopping(run_ctx *rc)
{
    return atomic_load(&rc->stop) || (rc->cfg->cancel != NULL && atomic_load(rc->cfg->cancel));
}

static void run_fail(run_ctx *rc, copy_result r, const char *msg)
{
    pthread_mutex_lock(&rc->mu);
    if (rc->result == COPY_DONE) {
        rc->result = r;
        snprintf(rc->err, sizeof rc->err, "%.*s", (int)sizeof rc->err - 1, msg);
    }
    pthread_mutex_unlock(&rc->mu);
    atomic_store(&rc->stop, true);
}

static job *take_job(run_ctx *rc)
{
    job *j = NULL;
    pthread_mutex_lock(&rc->mu);
    while (rc->next < rc->njobs && j == NULL) {
        job *c = &rc->jobs[rc->next++];
        if (c->state == JOB_PENDING) {
            c->state = JOB_RUNNING;
            c->run_base = c->copied;
            c->run_started = now_s();
            j = c;
        }
    }
    pthread_mutex_unlock(&rc->mu);
    return j;
}

static void job_set_state(run_ctx *rc, job *j, job_state st)
{
    pthread_mutex_lock(&rc->mu);
    j->state = st;
    pthread_mutex_unlock(&rc->mu);
}

/* Sends the batch as a binary COPY into `target` (a quoted table). *dup when it met an existing _id. */
static bool copy_send(worker *w, const char *target, bool *dup, bool *retryable)
{
    char sql[700];
    snprintf(sql, sizeof sql, "COPY %s (doc) FROM STDIN (FORMAT binary)", target);
    *dup = false;
    PGresult *r = PQexec(w->pg, sql);
    if (PQresultStatus(r) != PGRES_COPY_IN) {
        *retryable = pg_retryable(w->pg, r);
        snprintf(w->err, sizeof w->err, "COPY failed to start: %s", PQerrorMessage(w->pg));
        PQclear(r);
        return false;
    }
    PQclear(r);
    bool sent = sink_batch_put_copy(w->pg, w->batch);
    if (!sent) {
        *retryable = true;
        snprintf(w->err, sizeof w->err, "sending COPY data: %s", PQerrorMessage(w->pg));
        return false;
    }
    bool ok = true;
    while ((r = PQgetResult(w->pg)) != NULL) {
        if (PQresultStatus(r) != PGRES_COMMAND_OK && ok) {
            const char *st = PQresultErrorField(r, PG_DIAG_SQLSTATE);
            if (st != NULL && strcmp(st, "23505") == 0)
                *dup = true;
            *retryable = pg_retryable(w->pg, r);
            snprintf(w->err, sizeof w->err, "COPY failed: %s", PQresultErrorMessage(r));
            ok = false;
        }
        PQclear(r);
    }
    return ok;
}

/* The batch through the staging table as upserts (after a COPY met an existing _id), in the open transaction. */
static bool upsert_batch(worker *w, bool *retryable)
{
    if (!w->stage_ready) {
        if (!pg_exec(w->pg, "CREATE TEMP TABLE IF NOT EXISTS " STAGE_TABLE " (doc jsonb) ON COMMIT DELETE ROWS", w->err,
                     sizeof w->err, retryable))
            return false;
        w->stage_ready = true;
    }
    bool dup = false;
    if (!copy_send(w, STAGE_TABLE, &dup, retryable))
        return false;
    char sql[800];
    snprintf(sql, sizeof sql,
             "INSERT INTO %s (doc) SELECT doc FROM " STAGE_TABLE " ON CONFLICT (_id) DO UPDATE SET doc = EXCLUDED.doc",
             w->qtable);
    return pg_exec(w->pg, sql, w->err, sizeof w->err, retryable);
}

/* One transaction: the batch's rows, then the progress row (last_id, copied + rows, done). */
static bool commit_batch(worker *w, job *j, const bson_t *last, bool done, bool *retryable)
{
    size_t rows = sink_batch_rows(w->batch);
    char m[ERRLEN];
    for (int pass = 0; pass < 2; pass++) {
        if (!pg_exec(w->pg, "BEGIN", w->err, sizeof w->err, retryable))
            return false;
        bool dup = false, ok = true;
        if (rows > 0) {
            if (pass == 0)
                ok = copy_send(w, w->qtable, &dup, retryable);
            else
                ok = upsert_batch(w, retryable);
        }
        if (!ok) {
            snprintf(m, sizeof m, "%s", w->err);
            PGresult *r = PQexec(w->pg, "ROLLBACK");
            PQclear(r);
            snprintf(w->err, sizeof w->err, "%s", m);
            if (dup && pass == 0) {
                log_info("copy of %s.%s: a batch of %zu documents met an existing _id; writing it as upserts", j->db,
                         j->coll, rows);
                continue;
            }
            return false;
        }
        char copied[24];
        snprintf(copied, sizeof copied, "%lld", (long long)(j->copied + (int64_t)rows));
        const char *vals[6] = {last ? (const char *)bson_get_data(last) : NULL,
                               copied,
                               done ? "t" : "f",
                               w->rc->cfg->service,
                               j->db,
                               j->coll};
        int lens[6] = {last ? (int)last->len : 0, 0, 0, 0, 0, 0};
        int fmts[6] = {1, 0, 0, 0, 0, 0};
        PGresult *r = PQexecParams(w->pg,
                                   "UPDATE oplog2pg.copy_progress SET last_id = COALESCE($1::bytea, last_id), "
                                   "copied = $2, done = $3, updated_at = now() "
                                   "WHERE service = $4 AND db = $5 AND coll = $6",
                                   6, NULL, vals, lens, fmts, 0);
        bool upd = PQresultStatus(r) == PGRES_COMMAND_OK;
        bool found = upd && strcmp(PQcmdTuples(r), "1") == 0;
        if (!upd) {
            *retryable = pg_retryable(w->pg, r);
            snprintf(w->err, sizeof w->err, "updating the copy progress: %s", PQerrorMessage(w->pg));
        } else if (!found) {
            *retryable = false;
            snprintf(w->err, sizeof w->err, "the copy progress row is gone (was the copy reset meanwhile?)");
        }
        PQclear(r);
        if (!upd || !found) {
            PGresult *rb = PQexec(w->pg, "ROLLBACK");
            PQclear(rb);
            return false;
        }
        if (!pg_exec(w->pg, "COMMIT", w->err, sizeof w->err, retryable))
            return false;
        break;
    }
    /* Committed: the job's in-memory state follows. */
    if (last != NULL) {
        uint8_t *copy = malloc(last->len);
        if (copy != NULL) {
            memcpy(copy, bson_get_data(last), last->len);
            free(j->last_id);
            j->last_id = copy;
            j->last_id_len = last->len;
        }
    }
    j->copied += (int64_t)rows;
    j->done = done;
    atomic_store(&j->live_copied, j->copied);
    sink_batch_reset(w->batch);
    return true;
}

/* Does db.coll still exist (after a cursor error: a collection dropped mid-copy is done, not failed)? -1 unknown. */
static int coll_exists(mongoc_client_t *client, const char *dbname, const char *coll)
{
    mongoc_database_t *db = mongoc_client_get_database(client, dbname);
    bson_t *opts = BCON_NEW("filter", "{", "name", BCON_UTF8(coll), "}");
    mongoc_cursor_t *cur = mongoc_database_find_collections_with_opts(db, opts);
    const bson_t *doc;
    int found = mongoc_cursor_next(cur, &doc) ? 1 : 0;
    bson_error_t e;
    if (mongoc_cursor_error(cur, &e))
        found = -1;
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    mongoc_database_destroy(db);
    return found;
}

static bool ensure_table(worker *w, job *j, bool *retryable)
{
    free(w->qtable);
    w->qtable = NULL;
    char *qdb = PQescapeIdentifier(w->pg, j->db, strlen(j->db));
    char *qcoll = PQescapeIdentifier(w->pg, j->coll, strlen(j->coll));
    char *schema_sql = NULL, *table_sql = NULL;
    bool ok = false;
    if (qdb == NULL || qcoll == NULL || asprintf(&w->qtable, "%s.%s", qdb, qcoll) < 0) {
        w->qtable = NULL;
        *retryable = pg_retryable(w->pg, NULL);
        snprintf(w->err, sizeof w->err, "quoting the table name: %s", PQerrorMessage(w->pg));
        goto done;
    }
    schema_sql = shape_schema_sql(qdb);
    table_sql = shape_table_sql(w->qtable);
    if (schema_sql == NULL || table_sql == NULL) {
        *retryable = false;
        snprintf(w->err, sizeof w->err, "out of memory");
        goto done;
    }
    pthread_mutex_lock(&w->rc->ddl_mu);
    ok = pg_exec(w->pg, schema_sql, w->err, sizeof w->err, retryable) &&
         pg_exec(w->pg, table_sql, w->err, sizeof w->err, retryable);
    pthread_mutex_unlock(&w->rc->ddl_mu);
done:
    PQfreemem(qdb);
    PQfreemem(qcoll);
    free(schema_sql);
    free(table_sql);
    return ok;
}

typedef enum { PASS_DONE, PASS_STOPPED, PASS_ERROR } pass_result;

/* One pass over a collection from its committed last _id to its end (or a stop, or an error). */
static pass_result copy_pass(worker *w, job *j, bool *retryable)
{
    *retryable = false;
    sink_batch_reset(w->batch);
    if (w->pg != NULL && PQstatus(w->pg) != CONNECTION_OK) {
        PQfinish(w->pg);
        w->pg = NULL;
    }
    if (w->pg == NULL) {
        w->pg = pg_connect(w->rc->cfg->pg_conninfo, w->err, sizeof w->err);
        w->stage_ready = false;
        if (w->pg == NULL) {
            *retryable = true;
            return PASS_ERROR;
        }
    }
    if (!ensure_table(w, j, retryable))
        return PASS_ERROR;

    mongoc_collection_t *coll = mongoc_client_get_collection(w->mongo, j->db, j->coll);
    bson_t filter = BSON_INITIALIZER;
    bson_t opts = BSON_INITIALIZER;
    bson_t sub;
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sub);
    BSON_APPEND_INT32(&sub, "_id", 1);
    bson_append_document_end(&opts, &sub);
    BSON_APPEND_INT64(&opts, "batchSize", (int64_t)w->rc->batch_docs);
    bson_t last_view;
    bool have_last = j->last_id != NULL && bson_init_static(&last_view, j->last_id, j->last_id_len);
    if (have_last) {
        /* Inclusive lower bound in full BSON order (min needs the hint), the first document skipped if it is the
         * last one committed. */
        BSON_APPEND_DOCUMENT(&opts, "min", &last_view);
        BSON_APPEND_DOCUMENT_BEGIN(&opts, "hint", &sub);
        BSON_APPEND_INT32(&sub, "_id", 1);
        bson_append_document_end(&opts, &sub);
    }
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, &filter, &opts, NULL);
    const bson_t *doc;
    bson_t last = BSON_INITIALIZER;
    bool have_pending_last = false, first = true;
    pass_result res = PASS_DONE;
    while (mongoc_cursor_next(cur, &doc)) {
        bson_iter_t it;
        if (!bson_iter_init_find(&it, doc, "_id")) {
            char at[256];
            id_text(have_pending_last ? bson_get_data(&last) : j->last_id,
                    have_pending_last ? last.len : j->last_id_len, at, sizeof at);
            snprintf(w->err, sizeof w->err, "a document without _id (after _id %s)", at);
            res = PASS_ERROR;
            goto out;
        }
        bson_reinit(&last);
        if (!bson_append_iter(&last, "_id", 3, &it)) {
            snprintf(w->err, sizeof w->err, "an _id too large to keep");
            res = PASS_ERROR;
            goto out;
        }
        if (first) {
            first = false;
            if (have_last && last.len == j->last_id_len && memcmp(bson_get_data(&last), j->last_id, last.len) == 0)
                continue;
        }
        size_t jlen = 0;
        char *json = ejson_document(doc, &jlen);
        bool added = json != NULL && sink_batch_add_json(w->batch, json, jlen);
        bson_free(json);
        if (!added) {
            char at[256];
            id_text(bson_get_data(&last), last.len, at, sizeof at);
            snprintf(w->err, sizeof w->err, "the document with _id %s cannot be converted to JSON (invalid UTF-8?)",
                     at);
            res = PASS_ERROR;
            goto out;
        }
        have_pending_last = true;
        if (sink_batch_rows(w->batch) >= w->rc->batch_docs) {
            if (!commit_batch(w, j, &last, false, retryable)) {
                res = PASS_ERROR;
                goto out;
            }
            have_pending_last = false;
            if (stopping(w->rc)) {
                res = PASS_STOPPED;
                goto out;
            }
        }
    }
    bson_error_t e;
    if (mongoc_cursor_error(cur, &e)) {
        int exists = coll_exists(w->mongo, j->db, j->coll);
        if (exists == 0) {
            log_notice("copy of %s.%s: the collection was dropped during the copy; marking it done (the oplog replay "
                       "drops its table)",
                       j->db, j->coll);
            sink_batch_reset(w->batch);
            if (!commit_batch(w, j, NULL, true, retryable))
                res = PASS_ERROR;
            goto out;
        }
        *retryable = mongo_retryable(&e);
        snprintf(w->err, sizeof w->err, "reading from MongoDB: %s", e.message);
        res = PASS_ERROR;
        goto out;
    }
    if (!commit_batch(w, j, have_pending_last ? &last : NULL, true, retryable))
        res = PASS_ERROR;
out:
    mongoc_cursor_destroy(cur);
    bson_destroy(&last);
    bson_destroy(&opts);
    bson_destroy(&filter);
    mongoc_collection_destroy(coll);
    return res;
}

/* A collection to its end, retrying connection errors with backoff. */
static copy_result copy_job(worker *w, job *j)
{
    int attempt = 0;
    for (;;) {
        if (stopping(w->rc))
            return COPY_CANCELLED;
        int64_t before = j->copied;
        bool retryable = false;
        pass_result pr = copy_pass(w, j, &retryable);
        if (pr == PASS_DONE)
            return COPY_DONE;
        if (pr == PASS_STOPPED)
            return COPY_CANCELLED;
        char at[256];
        id_text(j->last_id, j->last_id_len, at, sizeof at);
        if (j->copied > before)
            attempt = 0;
        if (!retryable || ++attempt > MAX_RETRIES) {
            char msg[ERRLEN + 600];
            snprintf(msg, sizeof msg, "copying %s.%s (last _id committed: %s, %lld documents): %s%s", j->db, j->coll,
                     at, (long long)j->copied, w->err, retryable ? " (gave up after retries)" : "");
            run_fail(w->rc, COPY_FAILED, msg);
            return COPY_FAILED;
        }
        int wait = 250 << (attempt - 1);
        log_warning("copy of %s.%s (last _id committed: %s): %s; retrying in %d ms (attempt %d of %d)", j->db, j->coll,
                    at, w->err, wait, attempt, MAX_RETRIES);
        for (int waited = 0; waited < wait && !stopping(w->rc); waited += 50)
            sleep_ms(50);
        if (w->pg != NULL && PQstatus(w->pg) != CONNECTION_OK) {
            PQfinish(w->pg);
            w->pg = NULL;
        }
    }
}

static void *worker_main(void *arg)
{
    run_ctx *rc = arg;
    worker w = {.rc = rc};
    w.batch = sink_batch_new();
    w.mongo = mongo_connect(rc->cfg->mongo_uri, w.err, sizeof w.err);
    if (w.batch == NULL || w.mongo == NULL) {
        run_fail(rc, COPY_FAILED, w.mongo == NULL ? w.err : "out of memory");
        goto out;
    }
    job *j;
    while (!stopping(rc) && (j = take_job(rc)) != NULL) {
        log_info("copy: %s.%s %s (about %lld documents)", j->db, j->coll, j->copied > 0 ? "resumed" : "started",
                 (long long)j->estimate);
        copy_result r = copy_job(&w, j);
        job_set_state(rc, j, j->done ? JOB_FINISHED : JOB_PENDING);
        if (r != COPY_DONE)
            break;
        double secs = now_s() - j->run_started;
        char d[32];
        log_info("copy: %s.%s done: %lld documents (%lld in this run, %s, %.0f docs/s)", j->db, j->coll,
                 (long long)j->copied, (long long)(j->copied - j->run_base), copy_format_duration(secs, d, sizeof d),
                 secs > 0 ? (double)(j->copied - j->run_base) / secs : 0.0);
    }
out:
    if (w.mongo != NULL)
        mongoc_client_destroy(w.mongo);
    PQfinish(w.pg);
    sink_batch_free(w.batch);
    free(w.qtable);
    atomic_fetch_sub(&rc->workers_running, 1);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* the coordinator */

/* Documents committed, the estimated total, and (left may be NULL) collections not finished: for the progress
 * lines and copy_config.tick. */
static void copy_totals(run_ctx *rc, int64_t *copied, int64_t *total, size_t *left)
{
    size_t unfinished = 0;
    *copied = *total = 0;
    pthread_mutex_lock(&rc->mu);
    for (size_t i = 0; i < rc->njobs; i++) {
        job *j = &rc->jobs[i];
        int64_t c = atomic_load(&j->live_copied);
        *copied += c;
        *total += j->state == JOB_FINISHED ? c : (j->estimate > c ? j->estimate : c);
        unfinished += j->state != JOB_FINISHED;
    }
    pthread_mutex_unlock(&rc->mu);
    if (left != NULL)
        *left = unfinished;
}

static void log_progress(run_ctx *rc, double started, int64_t base_total)
{
    double now = now_s();
    int64_t total, copied;
    char eta[32], r2[32];
    copy_totals(rc, &copied, &total, NULL);
    pthread_mutex_lock(&rc->mu);
    for (size_t i = 0; i < rc->njobs; i++) {
        job *j = &rc->jobs[i];
        int64_t c = atomic_load(&j->live_copied);
        int64_t est = j->estimate > c ? j->estimate : c;
        if (j->state != JOB_RUNNING)
            continue;
        double secs = now - j->run_started;
        double rate = secs > 0 ? (double)(c - j->run_base) / secs : 0;
        log_info("copy: %s.%s %lld/%lld documents (%.0f%%), %.0f docs/s, ETA %s", j->db, j->coll, (long long)c,
                 (long long)est, est > 0 ? 100.0 * (double)c / (double)est : 100.0, rate,
                 copy_format_duration(copy_eta_seconds(c, est, rate), eta, sizeof eta));
    }
    pthread_mutex_unlock(&rc->mu);
    double secs = now - started;
    double rate = secs > 0 ? (double)(copied - base_total) / secs : 0;
    log_info("copy: total %lld/%lld documents (%.0f%%), %.0f docs/s, elapsed %s, ETA %s", (long long)copied,
             (long long)total, total > 0 ? 100.0 * (double)copied / (double)total : 100.0, rate,
             copy_format_duration(secs, r2, sizeof r2),
             copy_format_duration(copy_eta_seconds(copied, total, rate), eta, sizeof eta));
}

/* 1 fine, 0 window lost (err set), -1 could not check (err set; the caller logs and tries again later). */
static int window_check(run_ctx *rc, mongoc_client_t *client, double *last_warn, double eta, char *err, size_t errlen)
{
    op_pos oldest;
    bool found;
    if (!oplog_edge(client, 1, &oldest, &found, err, errlen))
        return -1;
    char s[OP_POS_STRLEN], o[OP_POS_STRLEN];
    op_pos_format(&rc->start, s, sizeof s);
    if (!found || op_pos_cmp(&oldest, &rc->start) > 0) {
        if (found)
            op_pos_format(&oldest, o, sizeof o);
        else
            snprintf(o, sizeof o, "none");
        snprintf(err, errlen,
                 "the oplog no longer holds the copy's start; raise the oplog size or copy fewer collections at once "
                 "(copy start %s, oldest oplog entry %s). The committed progress is kept, but resuming this copy "
                 "cannot make it consistent either: raise the oplog size, then start over with --reimport",
                 s, o);
        return 0;
    }
    int64_t margin_ms = ((int64_t)rc->start.secs - (int64_t)oldest.secs) * 1000;
    double now = now_s();
    if (margin_ms < rc->cfg->window_warn_ms && (*last_warn == 0 || now - *last_warn >= WINDOW_WARN_EVERY)) {
        char m[32], e[32], l[32];
        op_pos_format(&oldest, o, sizeof o);
        log_warning("copy: the oplog window margin is %s (oldest entry %s, copy start %s), under the configured %s; "
                    "the copy needs %s%s more. If the oplog rolls past the copy's start the copy fails: raise "
                    "the oplog size",
                    copy_format_duration((double)margin_ms / 1000.0, m, sizeof m), o, s,
                    copy_format_duration((double)rc->cfg->window_warn_ms / 1000.0, l, sizeof l),
                    eta < 0 ? "" : "about ", eta < 0 ? "an unknown time" : copy_format_duration(eta, e, sizeof e));
        *last_warn = now;
    }
    return 1;
}

static double overall_eta(run_ctx *rc, double started, int64_t base_total)
{
    int64_t total = 0, copied = 0;
    pthread_mutex_lock(&rc->mu);
    for (size_t i = 0; i < rc->njobs; i++) {
        int64_t c = atomic_load(&rc->jobs[i].live_copied);
        copied += c;
        total += rc->jobs[i].estimate > c ? rc->jobs[i].estimate : c;
    }
    pthread_mutex_unlock(&rc->mu);
    double secs = now_s() - started;
    return copy_eta_seconds(copied, total, secs > 0 ? (double)(copied - base_total) / secs : 0);
}

copy_result copy_run(const copy_config *cfg, op_pos *start, char *err, size_t errlen)
{
    run_ctx rc = {.cfg = cfg, .result = COPY_DONE};
    pthread_mutex_init(&rc.mu, NULL);
    pthread_mutex_init(&rc.ddl_mu, NULL);
    atomic_init(&rc.stop, false);
    atomic_init(&rc.workers_running, 0);
    rc.batch_docs = cfg->batch_docs ? cfg->batch_docs : DEFAULT_BATCH_DOCS;
    copy_result result = COPY_FAILED;
    PGconn *pg = NULL;
    mongoc_client_t *mongo = NULL;
    pthread_t *threads = NULL;
    int nthreads = 0;
    plan p = {0};
    char m[ERRLEN + 700];
    m[0] = '\0';

    mongoc_init(); /* idempotent */
    if (cfg->service == NULL || cfg->service[0] == '\0' || cfg->mongo_uri == NULL || cfg->pg_conninfo == NULL) {
        snprintf(m, sizeof m, "copy: service, MongoDB URI and PostgreSQL conninfo are required");
        goto fail;
    }
    pg = pg_connect(cfg->pg_conninfo, m, sizeof m);
    if (pg == NULL)
        goto fail;
    char e2[ERRLEN];
    if (!pg_exec(pg, oplog2pg_sql_schema, e2, sizeof e2, NULL)) {
        snprintf(m, sizeof m, "installing the oplog2pg schema: %s", e2);
        goto fail;
    }
    mongo = mongo_connect(cfg->mongo_uri, m, sizeof m);
    if (mongo == NULL)
        goto fail;

    bool finished = false;
    int have = state_load(pg, cfg->service, &rc.start, &finished, m, sizeof m);
    if (have < 0)
        goto fail;
    char pos[OP_POS_STRLEN];
    if (have == 0) {
        bool found;
        if (!oplog_edge(mongo, -1, &rc.start, &found, m, sizeof m))
            goto fail;
        if (!found) {
            snprintf(m, sizeof m, "the oplog is empty: there is no position to tail from after the copy");
            goto fail;
        }
        if (!plan_collections(mongo, cfg->filter, &p, m, sizeof m) ||
            !plan_store(pg, cfg->service, &rc.start, &p, m, sizeof m))
            goto fail;
        int64_t est = 0;
        for (size_t i = 0; i < p.n; i++)
            est += p.items[i].estimate;
        log_info("copy: service %s starts a copy of %zu collections (about %lld documents) from oplog position %s",
                 cfg->service, p.n, (long long)est, op_pos_format(&rc.start, pos, sizeof pos));
    } else if (finished) {
        *start = rc.start;
        log_info("copy: service %s: the copy already finished (start %s)", cfg->service,
                 op_pos_format(&rc.start, pos, sizeof pos));
        result = COPY_DONE;
        goto out;
    } else {
        log_info("copy: service %s resumes its copy (start %s)", cfg->service,
                 op_pos_format(&rc.start, pos, sizeof pos));
    }
    if (!jobs_load(pg, cfg->service, &rc.jobs, &rc.njobs, m, sizeof m))
        goto fail;

    double started = now_s(), last_warn = 0;
    int64_t base_total = 0;
    size_t pending = 0;
    for (size_t i = 0; i < rc.njobs; i++) {
        base_total += rc.jobs[i].copied;
        pending += !rc.jobs[i].done;
    }
    int wr = window_check(&rc, mongo, &last_warn, -1, m, sizeof m);
    if (wr == 0) {
        result = COPY_WINDOW_LOST;
        goto report;
    }
    if (wr < 0)
        goto fail;

    int nw = cfg->workers > 0 ? cfg->workers : 1;
    if ((size_t)nw > pending)
        nw = (int)pending;
    threads = calloc(nw > 0 ? (size_t)nw : 1, sizeof *threads);
    if (threads == NULL) {
        snprintf(m, sizeof m, "out of memory");
        goto fail;
    }
    for (int i = 0; i < nw; i++) {
        atomic_fetch_add(&rc.workers_running, 1);
        if (pthread_create(&threads[i], NULL, worker_main, &rc) != 0) {
            atomic_fetch_sub(&rc.workers_running, 1);
            run_fail(&rc, COPY_FAILED, "cannot start a copy worker thread");
            break;
        }
        nthreads++;
    }
    double next_progress = cfg->progress_interval_ms > 0 ? started + (double)cfg->progress_interval_ms / 1000.0 : 0;
    double next_window = started + WINDOW_CHECK_MS / 1000.0;
    while (atomic_load(&rc.workers_running) > 0) {
        sleep_ms(50);
        if (cfg->tick != NULL) {
            int64_t copied, total;
            size_t left;
            copy_totals(&rc, &copied, &total, &left);
            cfg->tick(cfg->tick_arg, copied, total, left);
        }
        double now = now_s();
        if (next_progress > 0 && now >= next_progress) {
            log_progress(&rc, started, base_total);
            next_progress = now + (double)cfg->progress_interval_ms / 1000.0;
        }
        if (now >= next_window && !atomic_load(&rc.stop)) {
            char we[ERRLEN + 400];
            int w = window_check(&rc, mongo, &last_warn, overall_eta(&rc, started, base_total), we, sizeof we);
            if (w == 0)
                run_fail(&rc, COPY_WINDOW_LOST, we);
            else if (w < 0)
                log_warning("copy: cannot check the oplog window: %s", we);
            next_window = now_s() + WINDOW_CHECK_MS / 1000.0;
        }
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(threads[i], NULL);

    if (rc.result != COPY_DONE) {
        result = rc.result;
        snprintf(m, sizeof m, "%s", rc.err);
        goto report;
    }
    size_t left = 0;
    for (size_t i = 0; i < rc.njobs; i++)
        left += !rc.jobs[i].done;
    if (left > 0) {
        result = COPY_CANCELLED;
        snprintf(m, sizeof m, "the copy was cancelled with %zu collections left; it resumes at the next start", left);
        log_progress(&rc, started, base_total);
        goto report;
    }
    /* Finished: one last window check, so a copy is never declared done from a start the oplog no longer holds. */
    wr = window_check(&rc, mongo, &last_warn, 0, m, sizeof m);
    if (wr == 0) {
        result = COPY_WINDOW_LOST;
        goto report;
    }
    if (wr < 0)
        goto fail;
    const char *fp[1] = {cfg->service};
    PGresult *r = PQexecParams(pg, "UPDATE oplog2pg.copy_state SET finished_at = now() WHERE service = $1", 1, NULL, fp,
                               NULL, NULL, 0);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok) {
        snprintf(m, sizeof m, "recording the end of the copy: %s", PQerrorMessage(pg));
        trim_nl(m);
        goto fail;
    }
    {
        double secs = now_s() - started;
        int64_t total = 0;
        for (size_t i = 0; i < rc.njobs; i++)
            total += rc.jobs[i].copied;
        char d[32];
        log_info("copy: service %s copied %zu collections, %lld documents (%lld in this run) in %s, %.0f docs/s; "
                 "tailing from %s",
                 cfg->service, rc.njobs, (long long)total, (long long)(total - base_total),
                 copy_format_duration(secs, d, sizeof d), secs > 0 ? (double)(total - base_total) / secs : 0.0,
                 op_pos_format(&rc.start, pos, sizeof pos));
    }
    *start = rc.start;
    result = COPY_DONE;
    goto out;

fail:
    result = COPY_FAILED;
report:
    snprintf(err, errlen, "%s", m);
    if (result == COPY_CANCELLED)
        log_notice("copy: %s", m);
    else
        log_error("copy: %s", m);
out:
    free(threads);
    jobs_free(rc.jobs, rc.njobs);
    free(p.items);
    if (mongo != NULL)
        mongoc_client_destroy(mongo);
    PQfinish(pg);
    pthread_mutex_destroy(&rc.mu);
    pthread_mutex_destroy(&rc.ddl_mu);
    return result;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* reset and state */

bool copy_reset(const char *pg_conninfo, const char *service, const nsfilter *filter, bool drop, char *err,
                size_t errlen)
{
    char m[ERRLEN];
    PGresult *r = NULL;
    PGconn *pg = pg_connect(pg_conninfo, m, sizeof m);
    size_t n = 0;
    if (pg == NULL)
        goto fail;
    if (!pg_exec(pg, oplog2pg_sql_schema, m, sizeof m, NULL) || !pg_exec(pg, "BEGIN", m, sizeof m, NULL))
        goto fail;
    const char *sp[1] = {service};
    r = PQexecParams(pg, "DELETE FROM oplog2pg.copy_state WHERE service = $1", 1, NULL, sp, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        snprintf(m, sizeof m, "forgetting the copy state: %s", PQerrorMessage(pg));
        goto fail_rb;
    }
    PQclear(r);
    /* Only tables with oplog2pg's shape (jsonb _id and doc): a table of someone else is never touched. */
    r = PQexec(pg, "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                   "WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('oplog2pg', 'information_schema') "
                   "AND n.nspname NOT LIKE 'pg\\_%' "
                   "AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = '_id' "
                   "            AND a.atttypid = 'jsonb'::regtype AND NOT a.attisdropped) "
                   "AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'doc' "
                   "            AND a.atttypid = 'jsonb'::regtype AND NOT a.attisdropped) "
                   "ORDER BY 1, 2");
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        snprintf(m, sizeof m, "listing tables: %s", PQerrorMessage(pg));
        goto fail_rb;
    }
    for (int i = 0; i < PQntuples(r); i++) {
        const char *db = PQgetvalue(r, i, 0), *coll = PQgetvalue(r, i, 1);
        if (skip_namespace(filter, db, coll))
            continue;
        char *qdb = PQescapeIdentifier(pg, db, strlen(db));
        char *qcoll = PQescapeIdentifier(pg, coll, strlen(coll));
        char *sql = NULL;
        if (qdb == NULL || qcoll == NULL ||
            asprintf(&sql, drop ? "DROP TABLE %s.%s" : "TRUNCATE %s.%s", qdb, qcoll) < 0)
            sql = NULL;
        PQfreemem(qdb);
        PQfreemem(qcoll);
        char e2[ERRLEN];
        bool ok = sql != NULL && pg_exec(pg, sql, e2, sizeof e2, NULL);
        free(sql);
        if (!ok) {
            snprintf(m, sizeof m, "%s %.127s.%.127s: %.700s", drop ? "dropping" : "truncating", db, coll,
                     sql == NULL ? "out of memory" : e2);
            goto fail_rb;
        }
        n++;
    }
    PQclear(r);
    r = NULL;
    if (!pg_exec(pg, "COMMIT", m, sizeof m, NULL))
        goto fail;
    log_notice("copy: service %s reset: copy state forgotten, %zu tables %s", service, n,
               drop ? "dropped" : "truncated");
    PQfinish(pg);
    return true;

fail_rb:
    trim_nl(m);
    PQclear(r);
    r = PQexec(pg, "ROLLBACK");
fail:
    PQclear(r);
    snprintf(err, errlen, "resetting the copy of service %s: %s", service, m);
    PQfinish(pg);
    return false;
}

bool copy_state_read(const char *pg_conninfo, const char *service, copy_state *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    char m[ERRLEN];
    PGresult *r = NULL;
    PGconn *pg = pg_connect(pg_conninfo, m, sizeof m);
    if (pg == NULL)
        goto fail;
    r = PQexec(pg, "SELECT to_regclass('oplog2pg.copy_state') IS NOT NULL AND "
                   "to_regclass('oplog2pg.copy_progress') IS NOT NULL");
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        goto pgfail;
    bool have_tables = PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    r = NULL;
    if (!have_tables) {
        PQfinish(pg);
        return true;
    }
    const char *sp[1] = {service};
    r = PQexecParams(pg,
                     "SELECT start_sec, start_inc, start_term, started_at::text, COALESCE(finished_at::text, '') "
                     "FROM oplog2pg.copy_state WHERE service = $1",
                     1, NULL, sp, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        goto pgfail;
    if (PQntuples(r) == 0) {
        PQclear(r);
        PQfinish(pg);
        return true;
    }
    out->exists = true;
    out->start.secs = (uint32_t)strtoul(PQgetvalue(r, 0, 0), NULL, 10);
    out->start.inc = (uint32_t)strtoul(PQgetvalue(r, 0, 1), NULL, 10);
    out->start.term = strtoll(PQgetvalue(r, 0, 2), NULL, 10);
    snprintf(out->started_at, sizeof out->started_at, "%s", PQgetvalue(r, 0, 3));
    snprintf(out->finished_at, sizeof out->finished_at, "%s", PQgetvalue(r, 0, 4));
    out->finished = out->finished_at[0] != '\0';
    PQclear(r);
    r = PQexecParams(pg,
                     "SELECT db, coll, copied, total_estimate, done FROM oplog2pg.copy_progress WHERE service = $1 "
                     "ORDER BY db, coll",
                     1, NULL, sp, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        goto pgfail;
    size_t n = (size_t)PQntuples(r);
    if (n > 0) {
        out->rows = calloc(n, sizeof *out->rows);
        if (out->rows == NULL) {
            snprintf(m, sizeof m, "out of memory");
            goto fail;
        }
    }
    for (size_t i = 0; i < n; i++) {
        copy_progress_row *row = &out->rows[i];
        snprintf(row->db, sizeof row->db, "%s", PQgetvalue(r, (int)i, 0));
        snprintf(row->coll, sizeof row->coll, "%s", PQgetvalue(r, (int)i, 1));
        row->copied = strtoll(PQgetvalue(r, (int)i, 2), NULL, 10);
        row->total_estimate = strtoll(PQgetvalue(r, (int)i, 3), NULL, 10);
        row->done = PQgetvalue(r, (int)i, 4)[0] == 't';
    }
    out->n = n;
    PQclear(r);
    PQfinish(pg);
    return true;

pgfail:
    snprintf(m, sizeof m, "%s", PQerrorMessage(pg));
    trim_nl(m);
fail:
    PQclear(r);
    PQfinish(pg);
    copy_state_free(out);
    snprintf(err, errlen, "reading the copy state of service %s: %s", service, m);
    return false;
}

void copy_state_free(copy_state *s)
{
    if (s == NULL)
        return;
    free(s->rows);
    s->rows = NULL;
    s->n = 0;
}

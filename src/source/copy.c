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
#include "map/names.h"
#include "sink/pg.h"
#include "source/oplog_edge.h"
#include "util/log.h"

#define DEFAULT_BATCH_DOCS 10000
#define WINDOW_CHECK_MS    1000 /* how often the coordinator reads the oldest oplog entry */
#define WINDOW_WARN_EVERY  60.0 /* seconds between two window warnings */
#define MAX_RETRIES        4    /* attempts after a connection error, per collection, without progress */
#define STAGE_TABLE        "oplog2pg_copy_stage"
#define COPY_BATCH_BYTES   (16u * 1024 * 1024) /* a batch commits at this many bytes of rows, whatever batch_docs */
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
    int64_t careful_left;        /* documents still to write row by row (after a batch was refused as data) */
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
    case COPY_REFUSED:
        return "refused by PostgreSQL";
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
    return ns_is_internal(db, strlen(db), coll, strlen(coll)) || (f != NULL && !nsfilter_match(f, db, coll));
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
    free(j);
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

/* The shared libpq layer (sink/pgconn.h) under the names of the calls it replaces: a result, or NULL with the
 * error (its class from the one policy, sink/pgerror.h) in pg->last. */
static PGresult *xparams(pgconn *pg, const char *sql, int n, const Oid *types, const char *const *values,
                         const int *lengths, const int *formats, int result_format)
{
    (void)types;
    PGresult *r = NULL;
    pgconn_exec_params(pg, sql, n, values, lengths, formats, result_format, &r, false, &pg->last);
    return r;
}

static PGresult *xexec(pgconn *pg, const char *sql)
{
    return xparams(pg, sql, 0, NULL, NULL, NULL, NULL, 0);
}

static const char *xerr(const pgconn *pg)
{
    return pg->last.message;
}

/* Whether the last failure on pg may pass by itself (the one policy: only APPLY_RETRY and APPLY_NOMEM do). */
static bool xretryable(const pgconn *pg)
{
    return pg->last.status == APPLY_RETRY || pg->last.status == APPLY_NOMEM;
}

static bool pg_exec(pgconn *pg, const char *sql, char *err, size_t errlen, bool *retryable)
{
    PGresult *r = xexec(pg, sql);
    if (r != NULL) {
        PQclear(r);
        return true;
    }
    if (retryable)
        *retryable = xretryable(pg);
    snprintf(err, errlen, "%s", xerr(pg));
    return false;
}

/* Connects; on failure err says why and *fault (may be NULL) holds the class (APPLY_CONFIG: a refused login). */
static pgconn *pg_connect(const char *conninfo, int peer_timeout_s, char *err, size_t errlen, apply_status *fault)
{
    pgconn_params pp = {.conninfo = conninfo, .app_name = "oplog2pg-copy", .peer_timeout_s = peer_timeout_s};
    pgconn_error e;
    pgconn *pg = pgconn_connect(&pp, &e);
    if (pg == NULL) {
        snprintf(err, errlen, "%s", e.message);
        if (fault != NULL)
            *fault = e.status;
        return NULL;
    }
    pg_exec(pg, "SET client_min_messages = warning", err, errlen, NULL);
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
static int state_load(pgconn *pg, const char *service, op_pos *start, bool *finished, char *err, size_t errlen)
{
    const char *p[1] = {service};
    PGresult *r = xparams(pg,
                          "SELECT start_sec, start_inc, start_term, finished_at IS NOT NULL "
                          "FROM oplog2pg.copy_state WHERE service = $1",
                          1, NULL, p, NULL, NULL, 0);
    int rc = -1;
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        snprintf(err, errlen, "reading oplog2pg.copy_state: %s", xerr(pg));
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

static bool jobs_load(pgconn *pg, const char *service, job **out, size_t *nout, char *err, size_t errlen)
{
    const char *p[1] = {service};
    /* last_id in binary (result format 1) so the BSON comes back byte for byte. */
    PGresult *r = xparams(pg,
                          "SELECT db, coll, last_id, copied, total_estimate, done FROM oplog2pg.copy_progress "
                          "WHERE service = $1 ORDER BY db, coll",
                          1, NULL, p, NULL, NULL, 1);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        snprintf(err, errlen, "reading oplog2pg.copy_progress: %s", xerr(pg));
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
        if (ns_is_internal(dbname, strlen(dbname), NULL, 0))
            continue;
        char why[120];
        pg_name nm;
        if (strlen(dbname) >= sizeof p->items[0].db || !names_schema(dbname, nm.schema, why, sizeof why)) {
            log_error("copy: leaving database %s out: %s", dbname,
                      strlen(dbname) >= sizeof p->items[0].db ? "the name is longer than MongoDB allows" : why);
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
            if (strlen(name) >= sizeof p->items[0].coll || !names_map(dbname, name, &nm, why, sizeof why)) {
                log_error("copy: leaving %s.%s out: %s", dbname, name,
                          strlen(name) >= sizeof p->items[0].coll ? "the name is longer than MongoDB allows" : why);
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
static bool plan_store(pgconn *pg, const char *service, const op_pos *start, const plan *p, char *err, size_t errlen)
{
    char m[ERRLEN];
    if (!pg_exec(pg, "BEGIN", m, sizeof m, NULL))
        goto fail;
    char sec[24], inc[24], term[24];
    snprintf(sec, sizeof sec, "%u", start->secs);
    snprintf(inc, sizeof inc, "%u", start->inc);
    snprintf(term, sizeof term, "%lld", (long long)start->term);
    const char *sp[4] = {service, sec, inc, term};
    PGresult *r = xparams(pg,
                          "INSERT INTO oplog2pg.copy_state (service, start_sec, start_inc, start_term) "
                          "VALUES ($1, $2, $3, $4)",
                          4, NULL, sp, NULL, NULL, 0);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    for (size_t i = 0; ok && i < p->n; i++) {
        char est[24];
        snprintf(est, sizeof est, "%lld", (long long)p->items[i].estimate);
        const char *pp[4] = {service, p->items[i].db, p->items[i].coll, est};
        r = xparams(pg,
                    "INSERT INTO oplog2pg.copy_progress (service, db, coll, total_estimate) "
                    "VALUES ($1, $2, $3, $4)",
                    4, NULL, pp, NULL, NULL, 0);
        ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
    }
    if (!ok) {
        snprintf(m, sizeof m, "%s", xerr(pg));
        trim_nl(m);
        PGresult *rb = xexec(pg, "ROLLBACK");
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

/* A document of the current batch kept as BSON: one whose text cannot be made (a dead letter already), or, in a
 * careful batch, every one (so that the one PostgreSQL refuses can be recorded). */
typedef struct {
    uint8_t *bson;
    uint32_t len;
    char *why; /* why it is set aside; NULL for a row of a careful batch */
} kept_doc;

typedef struct {
    run_ctx *rc;
    mongoc_client_t *mongo;
    pgconn *pg;
    sink_batch *batch;
    char *qtable; /* "db"."coll" of the current job */
    bool stage_ready;
    bool data_refused; /* the last batch failed because PostgreSQL refused a row's data */
    kept_doc *kept;    /* see kept_doc */
    size_t nkept, kept_cap;
    size_t kept_bytes;
    strbuf key_buf, json_buf;   /* one document's texts, reused */
    apply_status connect_fault; /* the class of the last failed connect (APPLY_OK when it connected) */
    char err[ERRLEN];
} worker;

static void kept_clear(worker *w)
{
    for (size_t i = 0; i < w->nkept; i++) {
        free(w->kept[i].bson);
        free(w->kept[i].why);
    }
    w->nkept = 0;
    w->kept_bytes = 0;
}

static bool kept_add(worker *w, const bson_t *doc, const char *why)
{
    if (w->nkept == w->kept_cap) {
        size_t cap = w->kept_cap ? w->kept_cap * 2 : 64;
        kept_doc *k = realloc(w->kept, cap * sizeof *k);
        if (k == NULL)
            return false;
        w->kept = k;
        w->kept_cap = cap;
    }
    kept_doc *k = &w->kept[w->nkept];
    k->bson = malloc(doc->len);
    k->why = why ? strdup(why) : NULL;
    if (k->bson == NULL || (why != NULL && k->why == NULL)) {
        free(k->bson);
        free(k->why);
        return false;
    }
    memcpy(k->bson, bson_get_data(doc), doc->len);
    k->len = doc->len;
    w->nkept++;
    w->kept_bytes += doc->len;
    return true;
}

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
    pgconn_error e;
    snprintf(sql, sizeof sql, "COPY %s (" SINK_COLUMNS ") FROM STDIN (FORMAT binary)", target);
    *dup = false;
    if (pgconn_copy_start(w->pg, sql, &e) && sink_batch_copy(w->pg, w->batch, &e))
        return true;
    *dup = strcmp(e.sqlstate, "23505") == 0;
    *retryable = e.status == APPLY_RETRY || e.status == APPLY_NOMEM;
    w->data_refused = e.status == APPLY_DATA && !*dup;
    snprintf(w->err, sizeof w->err, "COPY failed: %s", e.message);
    return false;
}

/* The batch through the staging table as upserts (after a COPY met an existing _id), in the open transaction. */
static bool upsert_batch(worker *w, bool *retryable)
{
    if (!w->stage_ready) {
        if (!pg_exec(w->pg,
                     "CREATE TEMP TABLE IF NOT EXISTS " STAGE_TABLE " (_id text COLLATE \"C\", doc jsonb) "
                     "ON COMMIT DELETE ROWS",
                     w->err, sizeof w->err, retryable))
            return false;
        w->stage_ready = true;
    }
    bool dup = false;
    if (!copy_send(w, STAGE_TABLE, &dup, retryable))
        return false;
    char sql[800];
    snprintf(sql, sizeof sql,
             "INSERT INTO %s (" SINK_COLUMNS ") SELECT " SINK_COLUMNS " FROM " STAGE_TABLE
             " ON CONFLICT (_id) DO UPDATE SET doc = EXCLUDED.doc",
             w->qtable);
    pgconn_error e;
    if (pgconn_exec(w->pg, sql, NULL, true, &e))
        return true;
    *retryable = e.status == APPLY_RETRY || e.status == APPLY_NOMEM;
    w->data_refused = e.status == APPLY_DATA;
    snprintf(w->err, sizeof w->err, "%s", e.message);
    return false;
}

/* A dead letter for a document of the copy: position = the copy's start, op 'i'. */
static bool copy_dead_letter(worker *w, job *j, const uint8_t *bson, uint32_t len, const char *why,
                             const char *sqlstate, bool *retryable)
{
    op o;
    memset(&o, 0, sizeof o);
    o.kind = OP_INSERT;
    o.pos = w->rc->start;
    o.db = j->db;
    o.coll = j->coll;
    o.doc = bson;
    o.doc_len = len;
    o.id.value_type = BSON_TYPE_EOD;
    bson_iter_t it;
    if (bson_iter_init_from_data(&it, bson, len) && bson_iter_find(&it, "_id"))
        o.id = *bson_iter_value(&it);
    pgconn_error e;
    if (sink_record_dead_letter(w->pg, w->rc->cfg->service, &o, why, sqlstate, &e)) {
        char id[256];
        bson_t b;
        id_text(bson_init_static(&b, bson, len) && bson_iter_init_find(&it, &b, "_id") ? bson : NULL, len, id,
                sizeof id);
        log_error("copy of %s.%s: the document with _id %s cannot be stored: %s; set aside in oplog2pg.dead_letter",
                  j->db, j->coll, id, why);
        return true;
    }
    *retryable = e.status == APPLY_RETRY || e.status == APPLY_NOMEM;
    snprintf(w->err, sizeof w->err, "recording a dead letter: %s", e.message);
    return false;
}

/* A careful batch: each row on its own behind a savepoint; a row PostgreSQL refuses as data becomes a dead letter
 * (w->kept holds every row's BSON, in order). In the open transaction. */
static bool careful_rows(worker *w, job *j, bool *retryable)
{
    char sql[800];
    snprintf(sql, sizeof sql,
             "INSERT INTO %s (" SINK_COLUMNS ") VALUES ($1, $2) ON CONFLICT (_id) DO UPDATE SET doc = EXCLUDED.doc",
             w->qtable);
    size_t row = 0;
    for (size_t k = 0; k < w->nkept; k++) {
        if (w->kept[k].why != NULL)
            continue; /* set aside already; not in the batch */
        if (row >= sink_batch_rows(w->batch))
            break;
        const char *key, *json;
        size_t klen, jlen;
        sink_batch_row(w->batch, row++, &key, &klen, &json, &jlen);
        const char *values[2] = {key, json};
        const int lengths[2] = {(int)klen, (int)jlen}, formats[2] = {1, 0};
        if (!pg_exec(w->pg, "SAVEPOINT oplog2pg_row", w->err, sizeof w->err, retryable))
            return false;
        pgconn_error e;
        if (pgconn_exec_params(w->pg, sql, 2, values, lengths, formats, 0, NULL, true, &e)) {
            if (!pg_exec(w->pg, "RELEASE SAVEPOINT oplog2pg_row", w->err, sizeof w->err, retryable))
                return false;
            continue;
        }
        if (e.status != APPLY_DATA) {
            *retryable = e.status == APPLY_RETRY || e.status == APPLY_NOMEM;
            snprintf(w->err, sizeof w->err, "%s", e.message);
            return false;
        }
        if (!pg_exec(w->pg, "ROLLBACK TO SAVEPOINT oplog2pg_row", w->err, sizeof w->err, retryable) ||
            !copy_dead_letter(w, j, w->kept[k].bson, w->kept[k].len, e.message, e.sqlstate, retryable))
            return false;
    }
    return true;
}

/* One transaction: the batch's rows (COPY; upserts after a duplicate; row by row when careful), the dead letters
 * of documents whose text could not be made, then the progress row (last_id, copied + rows, done). */
static bool commit_batch(worker *w, job *j, const bson_t *last, bool done, bool careful, bool *retryable)
{
    size_t rows = sink_batch_rows(w->batch);
    char m[ERRLEN];
    w->data_refused = false;
    for (int pass = 0; pass < 2; pass++) {
        if (!pg_exec(w->pg, "BEGIN", w->err, sizeof w->err, retryable))
            return false;
        bool dup = false, ok = true;
        if (rows > 0) {
            if (careful)
                ok = careful_rows(w, j, retryable);
            else if (pass == 0)
                ok = copy_send(w, w->qtable, &dup, retryable);
            else
                ok = upsert_batch(w, retryable);
        }
        for (size_t k = 0; ok && k < w->nkept; k++)
            if (w->kept[k].why != NULL)
                ok = copy_dead_letter(w, j, w->kept[k].bson, w->kept[k].len, w->kept[k].why, NULL, retryable);
        if (!ok) {
            snprintf(m, sizeof m, "%s", w->err);
            PGresult *r = xexec(w->pg, "ROLLBACK");
            PQclear(r);
            snprintf(w->err, sizeof w->err, "%s", m);
            if (dup && pass == 0 && !careful) {
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
        PGresult *r = xparams(w->pg,
                              "UPDATE oplog2pg.copy_progress SET last_id = COALESCE($1::bytea, last_id), "
                              "copied = $2, done = $3, updated_at = now() "
                              "WHERE service = $4 AND db = $5 AND coll = $6",
                              6, NULL, vals, lens, fmts, 0);
        bool upd = r != NULL;
        bool found = upd && strcmp(PQcmdTuples(r), "1") == 0;
        if (!upd) {
            *retryable = xretryable(w->pg);
            snprintf(w->err, sizeof w->err, "updating the copy progress: %s", xerr(w->pg));
        } else if (!found) {
            *retryable = false;
            snprintf(w->err, sizeof w->err, "the copy progress row is gone (was the copy reset meanwhile?)");
        }
        PQclear(r);
        if (!upd || !found) {
            PGresult *rb = xexec(w->pg, "ROLLBACK");
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
    kept_clear(w);
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

/* The collection's table (map/names.h), made and recorded in the catalog, or checked to be this service's
 * (oplog2pg.ensure_table): a table oplog2pg did not make is never written to. */
static bool ensure_table(worker *w, job *j, bool *retryable)
{
    free(w->qtable);
    w->qtable = NULL;
    pg_name nm;
    char why[120];
    *retryable = false;
    if (!names_map(j->db, j->coll, &nm, why, sizeof why)) {
        snprintf(w->err, sizeof w->err, "%s", why);
        return false;
    }
    char *qs = PQescapeIdentifier(w->pg->pg, nm.schema, strlen(nm.schema));
    char *qt = PQescapeIdentifier(w->pg->pg, nm.table, strlen(nm.table));
    bool ok = qs != NULL && qt != NULL && asprintf(&w->qtable, "%s.%s", qs, qt) >= 0;
    PQfreemem(qs);
    PQfreemem(qt);
    if (!ok) {
        w->qtable = NULL;
        snprintf(w->err, sizeof w->err, "out of memory");
        return false;
    }
    const char *values[5] = {w->rc->cfg->service, j->db, j->coll, nm.schema, nm.table};
    pthread_mutex_lock(&w->rc->ddl_mu);
    PGresult *r = xparams(w->pg, "SELECT oplog2pg.ensure_table($1, $2, $3, $4, $5)", 5, NULL, values, NULL, NULL, 0);
    pthread_mutex_unlock(&w->rc->ddl_mu);
    if (r == NULL) {
        *retryable = xretryable(w->pg);
        snprintf(w->err, sizeof w->err, "%s", xerr(w->pg));
        return false;
    }
    PQclear(r);
    return true;
}

typedef enum { PASS_DONE, PASS_STOPPED, PASS_ERROR } pass_result;

/* One pass over a collection from its committed last _id to its end (or a stop, or an error). */
/* Adds one document to the batch, or keeps it to be set aside when its text cannot be made. False only when memory
 * runs out (w->err says so). */
static bool add_doc(worker *w, const bson_t *doc, const bson_value_t *id, bool careful)
{
    strbuf_reset(&w->key_buf, 64 * 1024);
    strbuf_reset(&w->json_buf, 1024 * 1024);
    ejson_error err;
    ejson_status st = ejson_write_key(&w->key_buf, id, &err);
    if (st == EJSON_OK)
        st = ejson_write_document(&w->json_buf, bson_get_data(doc), doc->len, &err);
    bool ok;
    if (st == EJSON_NOMEM) {
        ok = false;
    } else if (st != EJSON_OK) {
        char why[300];
        ok = kept_add(w, doc, ejson_error_text(&err, why, sizeof why));
    } else {
        size_t jlen;
        char *json = strbuf_detach(&w->json_buf, &jlen);
        ok = json != NULL && sink_batch_take(w->batch, w->key_buf.data, w->key_buf.len, &json, jlen) &&
             (!careful || kept_add(w, doc, NULL));
        free(json); /* NULL once taken */
    }
    if (!ok)
        snprintf(w->err, sizeof w->err, "out of memory");
    return ok;
}

static pass_result copy_pass(worker *w, job *j, bool *retryable)
{
    *retryable = false;
    sink_batch_reset(w->batch);
    kept_clear(w);
    if (w->pg != NULL && PQstatus(w->pg->pg) != CONNECTION_OK) {
        pgconn_close(w->pg);
        w->pg = NULL;
    }
    w->connect_fault = APPLY_OK;
    if (w->pg == NULL) {
        w->pg =
            pg_connect(w->rc->cfg->pg_conninfo, w->rc->cfg->peer_timeout_s, w->err, sizeof w->err, &w->connect_fault);
        w->stage_ready = false;
        if (w->pg == NULL) {
            *retryable = w->connect_fault == APPLY_RETRY || w->connect_fault == APPLY_NOMEM;
            return PASS_ERROR;
        }
    }
    pgconn_error_clear(&w->pg->last); /* what fails in this pass says what kind of failure it was */
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
        bool careful = j->careful_left > 0;
        if (!add_doc(w, doc, bson_iter_value(&it), careful)) {
            *retryable = true;
            res = PASS_ERROR;
            goto out;
        }
        have_pending_last = true;
        size_t in_batch = sink_batch_rows(w->batch) + (careful ? 0 : w->nkept);
        if (careful)
            in_batch = w->nkept;
        if (in_batch >= w->rc->batch_docs || sink_batch_bytes(w->batch) + w->kept_bytes >= COPY_BATCH_BYTES ||
            (careful && (int64_t)in_batch >= j->careful_left)) {
            if (!commit_batch(w, j, &last, false, careful, retryable)) {
                res = PASS_ERROR;
                goto out;
            }
            if (careful)
                j->careful_left -= (int64_t)in_batch;
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
            kept_clear(w);
            if (!commit_batch(w, j, NULL, true, false, retryable))
                res = PASS_ERROR;
            goto out;
        }
        *retryable = mongo_retryable(&e);
        snprintf(w->err, sizeof w->err, "reading from MongoDB: %s", e.message);
        res = PASS_ERROR;
        goto out;
    }
    if (!commit_batch(w, j, have_pending_last ? &last : NULL, true, j->careful_left > 0, retryable))
        res = PASS_ERROR;
    else if (j->careful_left > 0)
        j->careful_left = 0;
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
        size_t batch_docs = 0;
        pass_result pr = copy_pass(w, j, &retryable);
        if (pr == PASS_DONE)
            return COPY_DONE;
        if (pr == PASS_STOPPED)
            return COPY_CANCELLED;
        if (w->data_refused && j->careful_left == 0) {
            /* PostgreSQL refused a row of the batch: write that stretch again row by row, setting aside the rows
             * it refuses, then go back to batches. */
            batch_docs = sink_batch_rows(w->batch) + w->nkept;
            j->careful_left = batch_docs > 0 ? (int64_t)batch_docs : 1;
            log_warning("copy of %s.%s: %s; writing the next %lld documents one at a time to find the refused one",
                        j->db, j->coll, w->err, (long long)j->careful_left);
            continue;
        }
        char at[256];
        id_text(j->last_id, j->last_id_len, at, sizeof at);
        if (j->copied > before)
            attempt = 0;
        if (!retryable || ++attempt > MAX_RETRIES) {
            char msg[ERRLEN + 600];
            snprintf(msg, sizeof msg, "copying %s.%s (last _id committed: %s, %lld documents): %.700s%s", j->db,
                     j->coll, at, (long long)j->copied, w->err, retryable ? " (gave up after retries)" : "");
            /* A refused login, a table oplog2pg did not make, a missing privilege: the operator's to fix. */
            bool refused = w->connect_fault == APPLY_CONFIG || (w->pg != NULL && w->pg->last.status == APPLY_CONFIG);
            run_fail(w->rc, refused ? COPY_REFUSED : COPY_FAILED, msg);
            return refused ? COPY_REFUSED : COPY_FAILED;
        }
        int wait = 250 << (attempt - 1);
        log_warning("copy of %s.%s (last _id committed: %s): %s; retrying in %d ms (attempt %d of %d)", j->db, j->coll,
                    at, w->err, wait, attempt, MAX_RETRIES);
        for (int waited = 0; waited < wait && !stopping(w->rc); waited += 50)
            sleep_ms(50);
        if (w->pg != NULL && PQstatus(w->pg->pg) != CONNECTION_OK) {
            pgconn_close(w->pg);
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
    pgconn_close(w.pg);
    sink_batch_free(w.batch);
    free(w.qtable);
    kept_clear(&w);
    free(w.kept);
    strbuf_free(&w.key_buf);
    strbuf_free(&w.json_buf);
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
    apply_status fault = APPLY_OK; /* of the coordinator's connect */
    pgconn *pg = NULL;
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
    pg = pg_connect(cfg->pg_conninfo, cfg->peer_timeout_s, m, sizeof m, &fault);
    if (pg == NULL)
        goto fail;
    pgconn_error ie;
    if (!sink_install_schema(pg, &ie)) {
        snprintf(m, sizeof m, "installing the oplog2pg schema: %s", ie.message);
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
    PGresult *r = xparams(pg, "UPDATE oplog2pg.copy_state SET finished_at = now() WHERE service = $1", 1, NULL, fp,
                          NULL, NULL, 0);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok) {
        snprintf(m, sizeof m, "recording the end of the copy: %s", xerr(pg));
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
    result = fault == APPLY_CONFIG || (pg != NULL && pg->last.status == APPLY_CONFIG) ? COPY_REFUSED : COPY_FAILED;
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
    pgconn_close(pg);
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
    pgconn *pg = pg_connect(pg_conninfo, 0, m, sizeof m, NULL);
    size_t n = 0;
    if (pg == NULL)
        goto fail;
    pgconn_error ie;
    if (!sink_install_schema(pg, &ie)) {
        snprintf(m, sizeof m, "installing the oplog2pg schema: %s", ie.message);
        goto fail;
    }
    if (!pg_exec(pg, "BEGIN", m, sizeof m, NULL))
        goto fail;
    const char *sp[1] = {service};
    r = xparams(pg, "DELETE FROM oplog2pg.copy_state WHERE service = $1", 1, NULL, sp, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        snprintf(m, sizeof m, "forgetting the copy state: %s", xerr(pg));
        goto fail_rb;
    }
    PQclear(r);
    /* Only the tables the catalog says this service made, for the namespaces the filter includes: a table of
     * someone else, or of another service, is never touched. */
    r = xparams(pg, "SELECT schema_name, table_name, db, coll FROM oplog2pg.tables WHERE service = $1 ORDER BY 1, 2", 1,
                NULL, sp, NULL, NULL, 0);
    if (r == NULL) {
        snprintf(m, sizeof m, "listing the catalog: %s", xerr(pg));
        goto fail_rb;
    }
    for (int i = 0; i < PQntuples(r); i++) {
        const char *schema = PQgetvalue(r, i, 0), *table = PQgetvalue(r, i, 1);
        const char *db = PQgetvalue(r, i, 2), *coll = PQgetvalue(r, i, 3);
        if (skip_namespace(filter, db, coll))
            continue;
        char *qs = PQescapeIdentifier(pg->pg, schema, strlen(schema));
        char *qt = PQescapeIdentifier(pg->pg, table, strlen(table));
        char *sql = NULL;
        if (qs == NULL || qt == NULL || asprintf(&sql, "TRUNCATE %s.%s", qs, qt) < 0)
            sql = NULL;
        PQfreemem(qs);
        PQfreemem(qt);
        const char *dv[3] = {service, schema, table};
        PGresult *dr = NULL;
        bool ok = drop
                      ? (dr = xparams(pg, "SELECT oplog2pg.drop_table($1, $2, $3)", 3, NULL, dv, NULL, NULL, 0)) != NULL
                      : sql != NULL && pg_exec(pg, sql, m, sizeof m, NULL);
        PQclear(dr);
        free(sql);
        if (!ok) {
            char e2[ERRLEN];
            snprintf(e2, sizeof e2, "%s", drop ? xerr(pg) : m);
            snprintf(m, sizeof m, "%s %.127s.%.127s: %.700s", drop ? "dropping" : "truncating", schema, table, e2);
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
    pgconn_close(pg);
    return true;

fail_rb:
    trim_nl(m);
    PQclear(r);
    r = xexec(pg, "ROLLBACK");
fail:
    PQclear(r);
    snprintf(err, errlen, "resetting the copy of service %s: %s", service, m);
    pgconn_close(pg);
    return false;
}

bool copy_state_read(const char *pg_conninfo, const char *service, copy_state *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    char m[ERRLEN];
    PGresult *r = NULL;
    pgconn *pg = pg_connect(pg_conninfo, 0, m, sizeof m, NULL);
    if (pg == NULL)
        goto fail;
    r = xexec(pg, "SELECT to_regclass('oplog2pg.copy_state') IS NOT NULL AND "
                  "to_regclass('oplog2pg.copy_progress') IS NOT NULL");
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        goto pgfail;
    bool have_tables = PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    r = NULL;
    if (!have_tables) {
        pgconn_close(pg);
        return true;
    }
    const char *sp[1] = {service};
    r = xparams(pg,
                "SELECT start_sec, start_inc, start_term, started_at::text, COALESCE(finished_at::text, '') "
                "FROM oplog2pg.copy_state WHERE service = $1",
                1, NULL, sp, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        goto pgfail;
    if (PQntuples(r) == 0) {
        PQclear(r);
        pgconn_close(pg);
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
    r = xparams(pg,
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
    pgconn_close(pg);
    return true;

pgfail:
    snprintf(m, sizeof m, "%s", xerr(pg));
    trim_nl(m);
fail:
    PQclear(r);
    pgconn_close(pg);
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

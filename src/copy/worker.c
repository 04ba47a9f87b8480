/*
 * worker.c — one worker thread of the initial copy: it takes the next unfinished collection and copies it batch by
 * batch (find sorted by _id from the committed last _id; a binary COPY, the progress row and COMMIT per batch), going
 * row by row through a batch PostgreSQL refused to find and set aside the refused document.
 */
#include "copy_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map/ejson.h"
#include "map/names.h"
#include "map/project.h"
#include "sink/batch.h"
#include "sink/mapped.h"
#include "sink/pg.h"
#include "source/mongo_client.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/strbuf.h"

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
    char *qtable;              /* "db"."coll" of the current job */
    const map_collection *map; /* the current job's typed map, NULL for the jsonb shape */
    sink_mapped_table *mtabs;  /* its tables' SQL, by table number */
    size_t nmtabs;
    map_rows rows; /* one document's rows, reused */
    bool stage_ready;
    bool data_refused; /* the last batch failed because PostgreSQL refused a row's data */
    kept_doc *kept;    /* see kept_doc */
    size_t nkept, kept_cap;
    size_t kept_bytes;
    strbuf key_buf, json_buf;   /* one document's texts, reused */
    apply_status connect_fault; /* the class of the last failed connect (APPLY_OK when it connected) */
    double stop_seen;           /* when a wait on PostgreSQL first saw the copy stopping (0: not yet) */
    bool cancel_sent;           /* the statement kept waiting past STOP_GRACE_S was cancelled */
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

static job *take_job(run_ctx *rc)
{
    job *j = NULL;
    pthread_mutex_lock(&rc->mu);
    while (rc->next < rc->njobs && j == NULL) {
        job *c = &rc->jobs[rc->next++];
        if (c->state == JOB_PENDING) {
            c->state = JOB_RUNNING;
            c->run_base = c->copied;
            c->run_started = clock_s();
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
    if (w->map != NULL) {
        /* a mapped collection: one COPY per table that has rows */
        *dup = false;
        const map_rows *rows = sink_batch_mapped(w->batch);
        for (size_t k = 0; k < w->nmtabs; k++) {
            map_row_iter it;
            map_rows_iter(rows, &it);
            uint16_t t;
            const uint8_t *tuple;
            uint32_t len;
            bool any = false;
            while (!any && map_rows_next(&it, &t, &tuple, &len))
                any = t == k;
            if (!any)
                continue;
            if (!pgconn_copy_start(w->pg, w->mtabs[k].copy_sql, &e) ||
                !sink_batch_copy_mapped(w->pg, w->batch, (uint16_t)k, &e)) {
                *dup = strcmp(e.sqlstate, "23505") == 0;
                *retryable = e.status == APPLY_RETRY || e.status == APPLY_NOMEM;
                w->data_refused = e.status == APPLY_DATA && !*dup;
                snprintf(w->err, sizeof w->err, "COPY into %s failed: %s", w->mtabs[k].qname, e.message);
                return false;
            }
        }
        return true;
    }
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

/* Upserts the rows of whole documents (records): each parent row with its child rows replaced. In the open
 * transaction; one statement at a time (only after a COPY met an existing key, or for a careful batch). */
static bool upsert_mapped(worker *w, const map_rows *rows, bool *retryable)
{
    map_row_iter it;
    map_rows_iter(rows, &it);
    uint16_t k;
    const uint8_t *tuple;
    uint32_t len;
    while (map_rows_next(&it, &k, &tuple, &len)) {
        if (k >= w->nmtabs)
            continue;
        uint16_t nf = (uint16_t)(tuple[0] << 8 | tuple[1]);
        const char **values = calloc(nf ? nf : 1, sizeof *values);
        int *lengths = calloc(nf ? nf : 1, sizeof *lengths), *formats = calloc(nf ? nf : 1, sizeof *formats);
        if (values == NULL || lengths == NULL || formats == NULL) {
            free(values);
            free(lengths);
            free(formats);
            *retryable = true;
            snprintf(w->err, sizeof w->err, "out of memory");
            return false;
        }
        const uint8_t *f = tuple + 2, *key = NULL;
        for (uint16_t i = 0; i < nf; i++) {
            int32_t l = (int32_t)((uint32_t)f[0] << 24 | (uint32_t)f[1] << 16 | (uint32_t)f[2] << 8 | f[3]);
            if (k == 0 && i == w->mtabs[0].mt->key)
                key = f;
            values[i] = l < 0 ? NULL : (const char *)f + 4;
            lengths[i] = l < 0 ? 0 : l;
            formats[i] = 1;
            f += 4 + (l < 0 ? 0 : l);
        }
        pgconn_error e;
        bool ok = pgconn_exec_params(w->pg, w->mtabs[k].upsert_sql, nf, values, lengths, formats, 0, NULL, true, &e);
        free(values);
        free(lengths);
        free(formats);
        for (size_t c = 1; ok && k == 0 && key != NULL && c < w->nmtabs; c++) {
            int32_t l = (int32_t)((uint32_t)key[0] << 24 | (uint32_t)key[1] << 16 | (uint32_t)key[2] << 8 | key[3]);
            static const char zero[4] = {0, 0, 0, 0};
            const char *dv[2] = {(const char *)key + 4, zero};
            const int dl[2] = {l, 4}, df[2] = {1, 1};
            ok = pgconn_exec_params(w->pg, w->mtabs[c].children_sql, 2, dv, dl, df, 0, NULL, true, &e);
        }
        if (!ok) {
            *retryable = e.status == APPLY_RETRY || e.status == APPLY_NOMEM;
            w->data_refused = e.status == APPLY_DATA;
            snprintf(w->err, sizeof w->err, "%s", e.message);
            return false;
        }
    }
    return true;
}

/* The batch through the staging table as upserts (after a COPY met an existing _id), in the open transaction. */
static bool upsert_batch(worker *w, bool *retryable)
{
    if (w->map != NULL)
        return upsert_mapped(w, sink_batch_mapped(w->batch), retryable);
    if (!w->stage_ready) {
        if (!copy_pg_exec(w->pg,
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
        copy_id_text(bson_init_static(&b, bson, len) && bson_iter_init_find(&it, &b, "_id") ? bson : NULL, len, id,
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
static bool careful_rows_mapped(worker *w, job *j, bool *retryable)
{
    for (size_t k = 0; k < w->nkept; k++) {
        if (w->kept[k].why != NULL)
            continue; /* set aside already; not in the batch */
        bson_iter_t it;
        bson_value_t id = {.value_type = BSON_TYPE_EOD};
        if (bson_iter_init_from_data(&it, w->kept[k].bson, w->kept[k].len) && bson_iter_find(&it, "_id"))
            id = *bson_iter_value(&it);
        strbuf_reset(&w->rows.buf, 1024 * 1024);
        w->rows.count = 0;
        char why[512];
        project_status ps =
            map_project_document(w->map, w->kept[k].bson, w->kept[k].len, &id, &w->rows, NULL, why, sizeof why);
        if (ps != PROJECT_OK) {
            *retryable = true;
            snprintf(w->err, sizeof w->err, "projecting a document again: %s",
                     ps == PROJECT_NOMEM ? "out of memory" : why);
            return false;
        }
        if (!copy_pg_exec(w->pg, "SAVEPOINT oplog2pg_row", w->err, sizeof w->err, retryable))
            return false;
        w->data_refused = false;
        if (upsert_mapped(w, &w->rows, retryable)) {
            if (!copy_pg_exec(w->pg, "RELEASE SAVEPOINT oplog2pg_row", w->err, sizeof w->err, retryable))
                return false;
            continue;
        }
        if (!w->data_refused)
            return false;
        char msg[ERRLEN], state[6];
        snprintf(msg, sizeof msg, "%s", w->err);
        snprintf(state, sizeof state, "%s", w->pg->last.sqlstate);
        if (!copy_pg_exec(w->pg, "ROLLBACK TO SAVEPOINT oplog2pg_row", w->err, sizeof w->err, retryable) ||
            !copy_dead_letter(w, j, w->kept[k].bson, w->kept[k].len, msg, state, retryable))
            return false;
    }
    return true;
}

static bool careful_rows(worker *w, job *j, bool *retryable)
{
    if (w->map != NULL)
        return careful_rows_mapped(w, j, retryable);
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
        if (!copy_pg_exec(w->pg, "SAVEPOINT oplog2pg_row", w->err, sizeof w->err, retryable))
            return false;
        pgconn_error e;
        if (pgconn_exec_params(w->pg, sql, 2, values, lengths, formats, 0, NULL, true, &e)) {
            if (!copy_pg_exec(w->pg, "RELEASE SAVEPOINT oplog2pg_row", w->err, sizeof w->err, retryable))
                return false;
            continue;
        }
        if (e.status != APPLY_DATA) {
            *retryable = e.status == APPLY_RETRY || e.status == APPLY_NOMEM;
            snprintf(w->err, sizeof w->err, "%s", e.message);
            return false;
        }
        if (!copy_pg_exec(w->pg, "ROLLBACK TO SAVEPOINT oplog2pg_row", w->err, sizeof w->err, retryable) ||
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
        if (!copy_pg_exec(w->pg, "BEGIN", w->err, sizeof w->err, retryable))
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
            PGresult *r = copy_query(w->pg, "ROLLBACK");
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
        PGresult *r = copy_query_params(w->pg,
                                        "UPDATE oplog2pg.copy_progress SET last_id = COALESCE($1::bytea, last_id), "
                                        "copied = $2, done = $3, updated_at = now() "
                                        "WHERE service = $4 AND db = $5 AND coll = $6",
                                        6, NULL, vals, lens, fmts, 0);
        bool upd = r != NULL;
        bool found = upd && strcmp(PQcmdTuples(r), "1") == 0;
        if (!upd) {
            *retryable = copy_pg_retryable(w->pg);
            snprintf(w->err, sizeof w->err, "updating the copy progress: %s", copy_pg_error(w->pg));
        } else if (!found) {
            *retryable = false;
            snprintf(w->err, sizeof w->err, "the copy progress row is gone (was the copy reset meanwhile?)");
        }
        PQclear(r);
        if (!upd || !found) {
            PGresult *rb = copy_query(w->pg, "ROLLBACK");
            PQclear(rb);
            return false;
        }
        if (!copy_pg_exec(w->pg, "COMMIT", w->err, sizeof w->err, retryable))
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
static void free_mapped(worker *w)
{
    for (size_t k = 0; k < w->nmtabs; k++)
        sink_mapped_table_free(&w->mtabs[k]);
    free(w->mtabs);
    w->mtabs = NULL;
    w->nmtabs = 0;
    w->map = NULL;
}

/* The tables of a mapped collection: made or checked through the catalog (oplog2pg.ensure_mapped_table). */
static bool ensure_mapped(worker *w, job *j, const map_collection *m, bool *retryable)
{
    size_t n = map_table_count(m);
    w->mtabs = calloc(n, sizeof *w->mtabs);
    if (w->mtabs == NULL) {
        *retryable = true;
        snprintf(w->err, sizeof w->err, "out of memory");
        return false;
    }
    w->map = m;
    for (size_t k = 0; k < n; k++) {
        if (!sink_mapped_table_build(w->pg->pg, m, k, &w->mtabs[k])) {
            *retryable = true;
            snprintf(w->err, sizeof w->err, "out of memory");
            return false;
        }
        w->nmtabs = k + 1;
        const sink_mapped_table *t = &w->mtabs[k];
        const char *values[8] = {w->rc->cfg->service, j->db,           j->coll,     t->mt->name.schema,
                                 t->mt->name.table,   t->columns_json, t->key_json, t->mt->adopt ? "true" : "false"};
        pthread_mutex_lock(&w->rc->ddl_mu);
        PGresult *r = copy_query_params(w->pg, SINK_MAPPED_ENSURE_SQL, 8, NULL, values, NULL, NULL, 0);
        pthread_mutex_unlock(&w->rc->ddl_mu);
        if (r == NULL) {
            *retryable = copy_pg_retryable(w->pg);
            snprintf(w->err, sizeof w->err, "%s", copy_pg_error(w->pg));
            return false;
        }
        PQclear(r);
    }
    w->qtable = strdup(w->mtabs[0].qname);
    if (w->qtable == NULL) {
        *retryable = true;
        snprintf(w->err, sizeof w->err, "out of memory");
        return false;
    }
    return true;
}

static bool ensure_table(worker *w, job *j, bool *retryable)
{
    free(w->qtable);
    w->qtable = NULL;
    free_mapped(w);
    const map_collection *m = map_find(w->rc->cfg->maps, j->db, j->coll);
    if (m != NULL) {
        *retryable = false;
        return ensure_mapped(w, j, m, retryable);
    }
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
    PGresult *r =
        copy_query_params(w->pg, "SELECT oplog2pg.ensure_table($1, $2, $3, $4, $5)", 5, NULL, values, NULL, NULL, 0);
    pthread_mutex_unlock(&w->rc->ddl_mu);
    if (r == NULL) {
        *retryable = copy_pg_retryable(w->pg);
        snprintf(w->err, sizeof w->err, "%s", copy_pg_error(w->pg));
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
    if (w->map != NULL) {
        strbuf_reset(&w->rows.buf, 1024 * 1024);
        w->rows.count = 0;
        char why[512];
        project_status ps =
            map_project_document(w->map, bson_get_data(doc), doc->len, id, &w->rows, NULL, why, sizeof why);
        bool ok;
        if (ps == PROJECT_NOMEM || strbuf_failed(&w->rows.buf))
            ok = false;
        else if (ps == PROJECT_TYPE_ERROR)
            ok = kept_add(w, doc, why); /* a value its column cannot take: a dead letter */
        else
            ok = sink_batch_add_mapped(w->batch, &w->rows) && (!careful || kept_add(w, doc, NULL));
        if (!ok)
            snprintf(w->err, sizeof w->err, "out of memory");
        return ok;
    }
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

/* The wait hook of a worker's connection: while the copy goes on, waiting is healthy (a lock, a slow disk). Once it
 * stops, a connection attempt is given up at once, and a statement gets STOP_GRACE_S to be answered before it is
 * cancelled (its batch is then simply not committed: the next start copies it again), so a stop never hangs on a
 * lock another session holds. */
static bool worker_wait(void *arg, const char *what, double waited)
{
    worker *w = arg;
    (void)waited;
    if (!copy_stopping(w->rc))
        return true;
    if (w->pg == NULL)
        return false;
    double now = clock_s();
    if (w->stop_seen == 0)
        w->stop_seen = now;
    if (!w->cancel_sent && now - w->stop_seen >= STOP_GRACE_S) {
        char err[256];
        w->cancel_sent = true;
        log_notice("copy: stopping: cancelling %s, which PostgreSQL has kept waiting; that batch is copied again at "
                   "the next start",
                   what);
        if (!pgconn_cancel(w->pg, err, sizeof err))
            log_warning("copy: cancelling %s: %s", what, err);
    }
    return true;
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
        w->pg = copy_pg_connect(w->rc->cfg->pg_conninfo, w->rc->cfg->peer_timeout_s, worker_wait, w, w->err,
                                sizeof w->err, &w->connect_fault);
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
    if (w->rc->cfg->majority) {
        /* Only majority-committed data: a document a rollback would remove must not reach PostgreSQL either. */
        bson_t rcd;
        BSON_APPEND_DOCUMENT_BEGIN(&opts, "readConcern", &rcd);
        BSON_APPEND_UTF8(&rcd, "level", "majority");
        bson_append_document_end(&opts, &rcd);
    }
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
            copy_id_text(have_pending_last ? bson_get_data(&last) : j->last_id,
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
            if (copy_stopping(w->rc)) {
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
        *retryable = mongo_error_retryable(&e);
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

/* A collection to its end. What the one error policy calls passing (the connection, timeouts, a full disk, ...) is
 * retried from the committed last _id with backoff, for as long as it takes, as the daemon's sessions do; anything
 * else ends the copy. */
static copy_result copy_job(worker *w, job *j)
{
    backoff bo;
    backoff_init(&bo, RETRY_MIN_MS, RETRY_MAX_MS);
    unsigned attempt = 0;
    for (;;) {
        if (copy_stopping(w->rc))
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
        copy_id_text(j->last_id, j->last_id_len, at, sizeof at);
        if (j->copied > before) {
            attempt = 0;
            backoff_reset(&bo);
        }
        if (!retryable) {
            char msg[ERRLEN + 600];
            snprintf(msg, sizeof msg, "copying %s.%s (last _id committed: %s, %lld documents): %.700s", j->db, j->coll,
                     at, (long long)j->copied, w->err);
            /* A refused login, a table oplog2pg did not make, a missing privilege: the operator's to fix. */
            bool refused = w->connect_fault == APPLY_CONFIG || (w->pg != NULL && w->pg->last.status == APPLY_CONFIG);
            copy_run_fail(w->rc, refused ? COPY_REFUSED : COPY_FAILED, msg);
            return refused ? COPY_REFUSED : COPY_FAILED;
        }
        uint64_t wait = backoff_next(&bo);
        log_warning("copy of %s.%s (last _id committed: %s): %s; retrying in %llu ms (attempt %u)", j->db, j->coll, at,
                    w->err, (unsigned long long)wait, ++attempt);
        for (uint64_t waited = 0; waited < wait && !copy_stopping(w->rc); waited += 50)
            clock_sleep_ms(50);
        if (w->pg != NULL && PQstatus(w->pg->pg) != CONNECTION_OK) {
            pgconn_close(w->pg);
            w->pg = NULL;
        }
    }
}

void *copy_worker_main(void *arg)
{
    run_ctx *rc = arg;
    worker w = {.rc = rc};
    pthread_setname_np(pthread_self(), "o2p-copy");
    w.batch = sink_batch_new();
    w.mongo = copy_mongo_connect(rc->cfg->mongo_uri, w.err, sizeof w.err);
    if (w.batch == NULL || w.mongo == NULL) {
        copy_run_fail(rc, COPY_FAILED, w.mongo == NULL ? w.err : "out of memory");
        goto out;
    }
    job *j;
    while (!copy_stopping(rc) && (j = take_job(rc)) != NULL) {
        log_info("copy: %s.%s %s (about %lld documents)", j->db, j->coll, j->copied > 0 ? "resumed" : "started",
                 (long long)j->estimate);
        copy_result r = copy_job(&w, j);
        job_set_state(rc, j, j->done ? JOB_FINISHED : JOB_PENDING);
        if (r != COPY_DONE)
            break;
        double secs = clock_s() - j->run_started;
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
    free_mapped(&w);
    strbuf_free(&w.rows.buf);
    kept_clear(&w);
    free(w.kept);
    strbuf_free(&w.key_buf);
    strbuf_free(&w.json_buf);
    atomic_fetch_sub(&rc->workers_running, 1);
    return NULL;
}

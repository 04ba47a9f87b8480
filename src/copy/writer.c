/*
 * writer.c — a copy worker's writing thread: it commits the batches its reading thread (worker.c) hands over, each
 * in one PostgreSQL transaction with the collection's progress row, while the reading thread reads and renders the
 * next one.
 *
 * NOTES
 * - The two threads share COPY_SLOTS (two) batches and nothing else but the job they are on. The reading thread
 *   fills a free one while the writing thread commits the other, so MongoDB and PostgreSQL work at the same time,
 *   and a worker never holds more than two batches of rows (each at most batch_docs documents or
 *   COPY_BATCH_BYTES). Batches are committed in the order they were handed over.
 * - A batch PostgreSQL does not commit ends the pass: the batches handed over after it are dropped (they start
 *   after a position that is not committed), the reading thread is told at its next hand-over and reads again from
 *   the committed last _id. What the failure was (passing, a refusal of a row's data, the operator's to fix) goes back
 *   as a copy_outcome, and the reading thread decides as the copy always did (copy_job in worker.c).
 * - Once the copy stops (a cancel, another worker's failure, the window lost) the batch being written is still
 *   committed; the ones waiting are dropped.
 * - Only this thread uses the worker's PostgreSQL connection; only the reading thread uses its MongoDB client.
 */
#include "copy_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map/names.h"
#include "map/project.h"
#include "sink/mapped.h"
#include "sink/pg.h"
#include "sink/rows.h"
#include "sink/tseries.h"
#include "util/clock.h"
#include "util/log.h"

struct copy_writer {
    run_ctx *rc;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a slot changed state, the outcome was set, or quit */
    copy_batch slots[COPY_SLOTS];
    uint64_t next_seq;
    bool quit;
    copy_outcome out; /* of the current pass */

    /* The writing thread's own. */
    pgconn *pg;
    char *qtable;              /* "db"."coll" of the current job */
    pg_name ts_name;           /* a time-series collection's table (the current job's, when j->ts) */
    const map_collection *map; /* the current job's typed map, NULL for the jsonb shape */
    sink_mapped_table *mtabs;  /* its tables' SQL, by table number */
    size_t nmtabs;
    sink_tseries_typed *ts_typed; /* a time-series collection's typed map's table (when j->ts and it has a map) */
    map_rows rows;                /* one document's rows, reused (a careful batch projects its documents again) */
    bool stage_ready;
    bool data_refused;          /* the last batch failed because PostgreSQL refused a row's data */
    bool send_retryable;        /* the row writer's statement that failed may succeed on a retry */
    bool malformed;             /* the last batch broke the copy's own invariants (see batch_malformed) */
    apply_status connect_fault; /* the class of the last failed connect (APPLY_OK when it connected) */
    double stop_seen;           /* when a wait on PostgreSQL first saw the copy stopping (0: not yet) */
    bool cancel_sent;           /* the statement kept waiting past STOP_GRACE_S was cancelled */
    char err[ERRLEN];
};

/* ---------------------------------------------------------------------------------------------------------------- */
/* batches */

static void kept_clear(copy_batch *b)
{
    for (size_t i = 0; i < b->nkept; i++) {
        free(b->kept[i].bson);
        free(b->kept[i].why);
    }
    b->nkept = 0;
    b->kept_bytes = 0;
}

bool copy_batch_keep(copy_batch *b, const bson_t *doc, const char *why)
{
    if (b->nkept == b->kept_cap) {
        size_t cap = b->kept_cap ? b->kept_cap * 2 : 64;
        kept_doc *k = realloc(b->kept, cap * sizeof *k);
        if (k == NULL)
            return false;
        b->kept = k;
        b->kept_cap = cap;
    }
    kept_doc *k = &b->kept[b->nkept];
    k->bson = malloc(doc->len);
    k->why = why ? strdup(why) : NULL;
    if (k->bson == NULL || (why != NULL && k->why == NULL)) {
        free(k->bson);
        free(k->why);
        return false;
    }
    memcpy(k->bson, bson_get_data(doc), doc->len);
    k->len = doc->len;
    b->nkept++;
    b->kept_bytes += doc->len;
    return true;
}

/* Empties a batch for its next use (on the reading thread, which made its rows). */
static void batch_empty(copy_batch *b)
{
    sink_batch_reset(b->rows);
    kept_clear(b);
    bson_reinit(&b->last);
    b->docs = 0;
    b->j = NULL;
    b->first = b->careful = b->done = false;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* writing one batch */

/* A batch that cannot be what the reading thread made (a row for a table the map does not have, rows and kept
 * documents out of step): a fault in oplog2pg. Skipping the row would let the progress row pass data never written,
 * so the batch fails and the copy stops (COPY_UNSUPPORTED), nothing of it committed. */
static bool batch_malformed(copy_writer *w, const char *what)
{
    w->malformed = true;
    snprintf(w->err, sizeof w->err, "a malformed copy batch (%.400s): nothing of it is committed; please report this",
             what);
    return false;
}

bool copy_batch_check(const copy_batch *b, size_t ntables, char *why, size_t whylen)
{
    if (ntables > 0) {
        map_row_iter it;
        map_rows_iter(sink_batch_mapped(b->rows), &it);
        uint16_t t;
        const uint8_t *tuple;
        uint32_t len;
        while (map_rows_next(&it, &t, &tuple, &len))
            if (t >= ntables) {
                snprintf(why, whylen, "a row for table %u of a map with %zu tables", (unsigned)t, ntables);
                return false;
            }
        return true;
    }
    if (!b->careful)
        return true;
    size_t in_rows = 0;
    for (size_t k = 0; k < b->nkept; k++)
        in_rows += b->kept[k].why == NULL;
    if (in_rows != sink_batch_rows(b->rows)) {
        snprintf(why, whylen, "a careful batch of %zu rows keeping %zu documents for them", sink_batch_rows(b->rows),
                 in_rows);
        return false;
    }
    return true;
}

/* Sends the batch as a binary COPY into `target` (a quoted table; a typed map's tables go by their own names). *dup
 * when it met an existing _id. */
static bool copy_send(copy_writer *w, const copy_batch *b, const char *target, bool *dup, bool *retryable)
{
    char sql[700];
    snprintf(sql, sizeof sql, "COPY %s (" SINK_COLUMNS ") FROM STDIN (FORMAT binary)", target);
    sink_rows_dest d = {.copy_sql = sql, .mtabs = w->mtabs, .nmtabs = w->nmtabs};
    pgconn_error e;
    size_t failed;
    *dup = false;
    if (sink_rows_copy(w->pg, &d, b->rows, &failed, &e)) /* every row's table checked (copy_batch_check) */
        return true;
    *dup = strcmp(e.sqlstate, "23505") == 0;
    *retryable = e.status == APPLY_RETRY || e.status == APPLY_NOMEM;
    w->data_refused = e.status == APPLY_DATA && !*dup;
    if (w->map != NULL)
        snprintf(w->err, sizeof w->err, "COPY into %s failed: %s", w->mtabs[failed].qname, e.message);
    else
        snprintf(w->err, sizeof w->err, "COPY failed: %s", e.message);
    return false;
}

/* The copy's way of sending the row writer's statements: one at a time, waiting for each. */
static bool send_row_stmt(void *arg, sink_rows_stmt stmt, size_t k, int n, const char *const *values,
                          const int *lengths, const int *formats)
{
    copy_writer *w = arg;
    const char *sql = stmt == SINK_ROWS_UPSERT ? w->mtabs[k].upsert_sql : w->mtabs[k].children_sql;
    pgconn_error e;
    if (pgconn_exec_params(w->pg, sql, n, values, lengths, formats, 0, NULL, true, &e))
        return true;
    w->send_retryable = e.status == APPLY_RETRY || e.status == APPLY_NOMEM;
    w->data_refused = e.status == APPLY_DATA;
    snprintf(w->err, sizeof w->err, "%s", e.message);
    return false;
}

/* Upserts the rows of whole documents (records): each parent row with its child rows replaced (sink/rows.h). In the
 * open transaction; one statement at a time (only after a COPY met an existing key, or for a careful batch). */
static bool upsert_mapped(copy_writer *w, const map_rows *rows, bool *retryable)
{
    sink_rows_dest d = {.mtabs = w->mtabs, .nmtabs = w->nmtabs};
    char why[200];
    w->send_retryable = false;
    switch (sink_rows_upsert(&d, rows, send_row_stmt, w, why, sizeof why)) {
    case SINK_ROWS_OK:
        return true;
    case SINK_ROWS_SEND_FAILED:
        *retryable = w->send_retryable;
        return false;
    case SINK_ROWS_NOMEM:
        *retryable = true;
        snprintf(w->err, sizeof w->err, "out of memory");
        return false;
    case SINK_ROWS_MALFORMED:
    default:
        return batch_malformed(w, why);
    }
}

/* The batch through the staging table as upserts (after a COPY met an existing _id), in the open transaction. */
static bool upsert_batch(copy_writer *w, const copy_batch *b, bool *retryable)
{
    if (w->map != NULL)
        return upsert_mapped(w, sink_batch_mapped(b->rows), retryable);
    if (!w->stage_ready) {
        if (!copy_pg_exec(w->pg,
                          "CREATE TEMP TABLE IF NOT EXISTS " STAGE_TABLE " (_id text COLLATE \"C\", doc jsonb) "
                          "ON COMMIT DELETE ROWS",
                          w->err, sizeof w->err, retryable))
            return false;
        w->stage_ready = true;
    }
    bool dup = false;
    if (!copy_send(w, b, STAGE_TABLE, &dup, retryable))
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
static bool copy_dead_letter(copy_writer *w, const job *j, const uint8_t *bson, uint32_t len, const char *why,
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

/* The buckets of a time-series collection's batch, each behind a savepoint: a bucket that cannot become rows, or
 * whose rows PostgreSQL refuses as data, is set aside as a dead letter, and the others are written. */
static bool write_buckets(copy_writer *w, const copy_batch *b, bool *retryable)
{
    const job *j = b->j;
    sink_tseries_copy_target to = {.qtable = w->qtable,
                                   .schema = w->ts_name.schema,
                                   .table = w->ts_name.table,
                                   .time_field = j->ts_time,
                                   .meta_field = j->ts_meta[0] != '\0' ? j->ts_meta : NULL,
                                   .typed = w->ts_typed};
    for (size_t k = 0; k < b->nkept; k++) {
        const kept_doc *d = &b->kept[k];
        if (d->why != NULL)
            continue; /* set aside by commit_batch */
        if (!copy_pg_exec(w->pg, "SAVEPOINT oplog2pg_bucket", w->err, sizeof w->err, retryable))
            return false;
        char why[1024];
        sink_tseries_copy_status st = sink_tseries_copy_bucket(w->pg, &to, d->bson, d->len, why, sizeof why);
        if (st == SINK_TS_COPY_PG && w->pg->last.status == APPLY_DATA) {
            snprintf(why, sizeof why, "%s", w->pg->last.message);
            st = SINK_TS_COPY_REFUSED;
        }
        switch (st) {
        case SINK_TS_COPY_OK:
            if (!copy_pg_exec(w->pg, "RELEASE SAVEPOINT oplog2pg_bucket", w->err, sizeof w->err, retryable))
                return false;
            break;
        case SINK_TS_COPY_REFUSED:
            if (!copy_pg_exec(w->pg, "ROLLBACK TO SAVEPOINT oplog2pg_bucket", w->err, sizeof w->err, retryable) ||
                !copy_dead_letter(w, j, d->bson, d->len, why, NULL, retryable))
                return false;
            break;
        case SINK_TS_COPY_PG:
            *retryable = copy_pg_retryable(w->pg);
            snprintf(w->err, sizeof w->err, "writing a bucket of %s.%s: %s", j->db, j->coll, copy_pg_error(w->pg));
            return false;
        case SINK_TS_COPY_BUG:
            *retryable = false;
            snprintf(w->err, sizeof w->err, "writing a bucket of %s.%s: %.400s", j->db, j->coll, why);
            return false;
        case SINK_TS_COPY_NOMEM:
            *retryable = true;
            snprintf(w->err, sizeof w->err, "out of memory");
            return false;
        }
    }
    return true;
}

/* Document k of a careful batch (its rows projected again from the BSON kept). */
static bool careful_mapped(copy_writer *w, const kept_doc *doc, bool *retryable)
{
    bson_iter_t it;
    bson_value_t id = {.value_type = BSON_TYPE_EOD};
    if (bson_iter_init_from_data(&it, doc->bson, doc->len) && bson_iter_find(&it, "_id"))
        id = *bson_iter_value(&it);
    strbuf_reset(&w->rows.buf, 1024 * 1024);
    w->rows.count = 0;
    char why[512];
    project_status ps = map_project_document(w->map, doc->bson, doc->len, &id, &w->rows, NULL, why, sizeof why);
    if (ps != PROJECT_OK) {
        *retryable = true;
        snprintf(w->err, sizeof w->err, "projecting a document again: %s", ps == PROJECT_NOMEM ? "out of memory" : why);
        return false;
    }
    return upsert_mapped(w, &w->rows, retryable);
}

/* Row `row` of a careful batch of the jsonb shape, by `upsert`. */
static bool careful_jsonb(copy_writer *w, const copy_batch *b, size_t row, const char *upsert, bool *retryable)
{
    const char *key, *json;
    size_t klen, jlen;
    sink_batch_row(b->rows, row, &key, &klen, &json, &jlen);
    const char *values[2] = {key, json};
    const int lengths[2] = {(int)klen, (int)jlen}, formats[2] = {1, 0};
    pgconn_error e;
    if (pgconn_exec_params(w->pg, upsert, 2, values, lengths, formats, 0, NULL, true, &e))
        return true;
    *retryable = e.status == APPLY_RETRY || e.status == APPLY_NOMEM;
    w->data_refused = e.status == APPLY_DATA;
    snprintf(w->err, sizeof w->err, "%s", e.message);
    return false;
}

/* A careful batch: each document on its own behind a savepoint; one PostgreSQL refuses as data becomes a dead letter
 * (b->kept holds every document's BSON, in order; for the jsonb shape, row i of the batch is the i-th kept without
 * a reason). In the open transaction. */
static bool careful_rows(copy_writer *w, const copy_batch *b, bool *retryable)
{
    char upsert[800];
    snprintf(upsert, sizeof upsert,
             "INSERT INTO %s (" SINK_COLUMNS ") VALUES ($1, $2) ON CONFLICT (_id) DO UPDATE SET doc = EXCLUDED.doc",
             w->qtable);
    size_t row = 0, rows = sink_batch_rows(b->rows);
    for (size_t k = 0; k < b->nkept; k++) {
        if (b->kept[k].why != NULL)
            continue; /* set aside already; not in the batch */
        if (w->map == NULL && row >= rows)
            return batch_malformed(w, "more documents kept than rows in a careful batch");
        if (!copy_pg_exec(w->pg, "SAVEPOINT oplog2pg_row", w->err, sizeof w->err, retryable))
            return false;
        w->data_refused = false;
        bool ok =
            w->map != NULL ? careful_mapped(w, &b->kept[k], retryable) : careful_jsonb(w, b, row++, upsert, retryable);
        if (ok) {
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
            !copy_dead_letter(w, b->j, b->kept[k].bson, b->kept[k].len, msg, state, retryable))
            return false;
    }
    if (w->map == NULL && row != rows)
        return batch_malformed(w, "more rows than documents kept in a careful batch");
    return true;
}

/* The progress row did not hold what this worker last committed. The row is the truth, and the job takes its
 * position; the pass is retried from there:
 * - behind: PostgreSQL lost the last batches, committed without waiting for its disk, in a crash or a failover;
 * - ahead: a COMMIT went through but its answer was lost with the connection (before, the batch was copied again).
 * A row that is gone (the copy reset meanwhile) ends the copy. Outside a transaction. */
static bool progress_moved(copy_writer *w, job *j, bool *retryable)
{
    const char *vals[3] = {w->rc->cfg->service, j->db, j->coll};
    PGresult *r = copy_query_params(w->pg,
                                    "SELECT copied, last_id FROM oplog2pg.copy_progress "
                                    "WHERE service = $1 AND db = $2 AND coll = $3",
                                    3, vals, NULL, NULL, 1);
    if (r == NULL) {
        *retryable = copy_pg_retryable(w->pg);
        snprintf(w->err, sizeof w->err, "reading the copy progress: %s", copy_pg_error(w->pg));
        return false;
    }
    if (PQntuples(r) != 1 || PQgetlength(r, 0, 0) != 8) {
        PQclear(r);
        *retryable = false;
        snprintf(w->err, sizeof w->err, "the copy progress row is gone (was the copy reset meanwhile?)");
        return false;
    }
    const unsigned char *v = (const unsigned char *)PQgetvalue(r, 0, 0);
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
        u = u << 8 | v[i];
    int64_t copied = (int64_t)u;
    uint8_t *last = NULL;
    uint32_t last_len = 0;
    if (!PQgetisnull(r, 0, 1) && (last_len = (uint32_t)PQgetlength(r, 0, 1)) > 0) {
        if ((last = malloc(last_len)) == NULL) {
            PQclear(r);
            *retryable = true;
            snprintf(w->err, sizeof w->err, "out of memory");
            return false;
        }
        memcpy(last, PQgetvalue(r, 0, 1), last_len);
    }
    PQclear(r);
    char had[256], has[256];
    copy_id_text(j->last_id, j->last_id_len, had, sizeof had);
    copy_id_text(last, last_len, has, sizeof has);
    if (copied < j->copied)
        snprintf(w->err, sizeof w->err,
                 "PostgreSQL no longer has the last %lld documents committed (up to _id %s): it lost them before "
                 "they reached its disk (a crash or a failover); copying again from _id %s",
                 (long long)(j->copied - copied), had, has);
    else
        snprintf(w->err, sizeof w->err,
                 "the copy progress is %lld documents ahead of what this worker saw committed (_id %s; a commit "
                 "whose answer was lost with the connection); going on from _id %s",
                 (long long)(copied - j->copied), had, has);
    free(j->last_id);
    j->last_id = last;
    j->last_id_len = last_len;
    j->copied = copied;
    atomic_store(&j->live_copied, copied);
    *retryable = true;
    return false;
}

/* One transaction: the batch's rows (COPY; upserts after a duplicate; row by row when careful), the dead letters
 * of documents whose text could not be made, then the progress row (last_id, copied + rows, done).
 * A collection's batches before its last commit without waiting for the WAL to reach the disk (synchronous_commit
 * off): that wait, at every batch, kept PostgreSQL idle for part of each (docs/benchmarks.md, "Keys in jsonb's
 * order"). It is safe because each batch's progress update also checks that the row still holds what the batch
 * before committed (copied and last_id): batches PostgreSQL lost in a crash are noticed by the next one, whatever
 * connection it runs on, and copied again (progress_moved). The last batch, which marks the collection done, commits
 * as the server is configured, and with it every batch before. */
static bool commit_batch(copy_writer *w, const copy_batch *b, bool *retryable)
{
    job *j = b->j;
    const bson_t *last = b->docs > 0 ? &b->last : NULL;
    size_t rows = j->ts ? b->docs : sink_batch_rows(b->rows); /* a time-series collection's counts its buckets */
    char m[ERRLEN];
    w->data_refused = false;
    w->malformed = false;
    if (!j->ts && !copy_batch_check(b, w->map != NULL ? w->nmtabs : 0, m, sizeof m))
        return batch_malformed(w, m);
    for (int pass = 0; pass < 2; pass++) {
        if (!copy_pg_exec(w->pg, "BEGIN", w->err, sizeof w->err, retryable) ||
            (!b->done && !copy_pg_exec(w->pg, "SET LOCAL synchronous_commit = off", w->err, sizeof w->err, retryable)))
            return false;
        bool dup = false, ok = true;
        if (j->ts)
            ok = write_buckets(w, b, retryable);
        else if (rows > 0) {
            if (b->careful)
                ok = careful_rows(w, b, retryable);
            else if (pass == 0)
                ok = copy_send(w, b, w->qtable, &dup, retryable);
            else
                ok = upsert_batch(w, b, retryable);
        }
        for (size_t k = 0; ok && k < b->nkept; k++)
            if (b->kept[k].why != NULL)
                ok = copy_dead_letter(w, j, b->kept[k].bson, b->kept[k].len, b->kept[k].why, NULL, retryable);
        if (!ok) {
            snprintf(m, sizeof m, "%s", w->err);
            PGresult *r = copy_query(w->pg, "ROLLBACK");
            PQclear(r);
            snprintf(w->err, sizeof w->err, "%s", m);
            if (dup && pass == 0 && !b->careful && !w->malformed) {
                log_info("copy of %s.%s: a batch of %zu documents met an existing _id; writing it as upserts", j->db,
                         j->coll, rows);
                continue;
            }
            return false;
        }
        char copied[24], was[24];
        snprintf(copied, sizeof copied, "%lld", (long long)(j->copied + (int64_t)rows));
        snprintf(was, sizeof was, "%lld", (long long)j->copied);
        const char *vals[8] = {last ? (const char *)bson_get_data(last) : NULL,
                               copied,
                               b->done ? "t" : "f",
                               w->rc->cfg->service,
                               j->db,
                               j->coll,
                               was,
                               (const char *)j->last_id};
        int lens[8] = {last ? (int)last->len : 0, 0, 0, 0, 0, 0, 0, (int)j->last_id_len};
        int fmts[8] = {1, 0, 0, 0, 0, 0, 0, 1};
        PGresult *r = copy_query_params(w->pg,
                                        "UPDATE oplog2pg.copy_progress SET last_id = COALESCE($1::bytea, last_id), "
                                        "copied = $2, done = $3, updated_at = now() "
                                        "WHERE service = $4 AND db = $5 AND coll = $6 "
                                        "AND copied = $7 AND last_id IS NOT DISTINCT FROM $8::bytea",
                                        8, vals, lens, fmts, 0);
        bool upd = r != NULL;
        bool found = upd && strcmp(PQcmdTuples(r), "1") == 0;
        if (!upd) {
            *retryable = copy_pg_retryable(w->pg);
            snprintf(w->err, sizeof w->err, "updating the copy progress: %s", copy_pg_error(w->pg));
        }
        PQclear(r);
        if (!upd || !found) {
            PGresult *rb = copy_query(w->pg, "ROLLBACK");
            PQclear(rb);
            return upd ? progress_moved(w, j, retryable) : false;
        }
        if (!copy_pg_exec(w->pg, "COMMIT", w->err, sizeof w->err, retryable))
            return false;
        break;
    }
    /* Committed: the job's in-memory state follows (the reading thread looks at it only between passes). */
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
    j->done = b->done;
    if (b->careful)
        j->careful_left = j->careful_left > (int64_t)b->docs ? j->careful_left - (int64_t)b->docs : 0;
    if (b->done)
        j->careful_left = 0;
    atomic_store(&j->live_copied, j->copied);
    return true;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* the collection's tables */

static void free_mapped(copy_writer *w)
{
    sink_tseries_typed_free(w->ts_typed);
    w->ts_typed = NULL;
    sink_mapped_tables_free(w->mtabs, w->nmtabs);
    w->mtabs = NULL;
    w->nmtabs = 0;
    w->map = NULL;
}

/* The tables of a mapped collection: made or checked through the catalog (oplog2pg.ensure_mapped_table). */
static bool ensure_mapped(copy_writer *w, const job *j, const map_collection *m, bool *retryable)
{
    w->mtabs = sink_mapped_tables_build(w->pg->pg, m, &w->nmtabs);
    if (w->mtabs == NULL) {
        *retryable = true;
        snprintf(w->err, sizeof w->err, "out of memory");
        return false;
    }
    w->map = m;
    for (size_t k = 0; k < w->nmtabs; k++) {
        const sink_mapped_table *t = &w->mtabs[k];
        const char *values[8] = {w->rc->cfg->service, j->db,           j->coll,     t->mt->name.schema,
                                 t->mt->name.table,   t->columns_json, t->key_json, t->mt->adopt ? "true" : "false"};
        pthread_mutex_lock(&w->rc->ddl_mu);
        PGresult *r = copy_query_params(w->pg, SINK_MAPPED_ENSURE_SQL, 8, values, NULL, NULL, 0);
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

/* The collection's table (map/names.h), made and recorded in the catalog, or checked to be this service's
 * (oplog2pg.ensure_table): a table oplog2pg did not make is never written to. */
static bool ensure_table(copy_writer *w, const job *j, bool *retryable)
{
    free(w->qtable);
    w->qtable = NULL;
    free_mapped(w);
    /* a time-series collection's buckets land in the collection's table */
    const char *coll = j->ts ? j->coll + COPY_BUCKETS_PREFIX_LEN : j->coll;
    const map_collection *m = map_find(w->rc->cfg->maps, j->db, coll);
    if (m != NULL && j->ts) {
        /* a typed map of a time-series collection: its table has the fixed columns first (sink/tseries.h) */
        char why[600];
        *retryable = false;
        w->data_refused = false;
        switch (sink_tseries_typed_new(w->pg->pg, m, &w->ts_typed, why, sizeof why)) {
        case SINK_TS_TYPED_OK:
            break;
        case SINK_TS_TYPED_REFUSED:
            snprintf(w->err, sizeof w->err, "%s", why);
            return false;
        case SINK_TS_TYPED_NOMEM:
            *retryable = true;
            snprintf(w->err, sizeof w->err, "out of memory");
            return false;
        }
    } else if (m != NULL) {
        *retryable = false;
        return ensure_mapped(w, j, m, retryable);
    }
    pg_name nm;
    char why[120];
    *retryable = false;
    if (m != NULL) {
        nm = m->table.name;
    } else if (!names_map(j->db, coll, &nm, why, sizeof why)) {
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
    w->ts_name = nm;
    const char *values[9] = {w->rc->cfg->service, j->db, coll, nm.schema, nm.table,
                             /* options not read (a copy planned by an earlier version, its collection since
                              * dropped): those recorded with its table, else PostgreSQL says they are not known */
                             j->ts_known ? j->ts_time : NULL, j->ts_known && j->ts_meta[0] != '\0' ? j->ts_meta : NULL,
                             w->ts_typed != NULL ? sink_tseries_typed_columns(w->ts_typed) : NULL,
                             m != NULL && m->table.adopt ? "true" : "false"};
    pthread_mutex_lock(&w->rc->ddl_mu);
    PGresult *r =
        j->ts ? copy_query_params(w->pg, SINK_TSERIES_ENSURE_SQL, 9, values, NULL, NULL, 0)
              : copy_query_params(w->pg, "SELECT oplog2pg.ensure_table($1, $2, $3, $4, $5)", 5, values, NULL, NULL, 0);
    pthread_mutex_unlock(&w->rc->ddl_mu);
    if (r == NULL) {
        *retryable = copy_pg_retryable(w->pg);
        snprintf(w->err, sizeof w->err, "%s", copy_pg_error(w->pg));
        return false;
    }
    PQclear(r);
    return true;
}

/* The wait hook of the connection: while the copy goes on, waiting is healthy (a lock, a slow disk). Once it stops,
 * a connection attempt is given up at once, and a statement gets STOP_GRACE_S to be answered before it is cancelled
 * (its batch is then simply not committed: the next start copies it again), so a stop never hangs on a lock another
 * session holds. */
static bool writer_wait(void *arg, const char *what, double waited)
{
    copy_writer *w = arg;
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

/* Before a pass's first batch: a connection (a broken one replaced), and the job's tables made or checked. */
static bool prepare_pass(copy_writer *w, const job *j, bool *retryable)
{
    if (w->pg != NULL && PQstatus(w->pg->pg) != CONNECTION_OK) {
        pgconn_close(w->pg);
        w->pg = NULL;
    }
    w->connect_fault = APPLY_OK;
    if (w->pg == NULL) {
        w->pg = copy_pg_connect(w->rc->cfg->pg_conninfo, w->rc->cfg->peer_timeout_s, writer_wait, w, w->err,
                                sizeof w->err, &w->connect_fault);
        w->stage_ready = false;
        if (w->pg == NULL) {
            *retryable = w->connect_fault == APPLY_RETRY || w->connect_fault == APPLY_NOMEM;
            return false;
        }
    }
    pgconn_error_clear(&w->pg->last); /* what fails in this pass says what kind of failure it was */
    return ensure_table(w, j, retryable);
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* the thread and the hand-over */

/* The oldest batch handed over and not yet taken, or NULL. Under mu. */
static copy_batch *oldest_full(copy_writer *w)
{
    copy_batch *b = NULL;
    for (size_t i = 0; i < COPY_SLOTS; i++)
        if (w->slots[i].state == SLOT_FULL && (b == NULL || w->slots[i].seq < b->seq))
            b = &w->slots[i];
    return b;
}

static void *writer_main(void *arg)
{
    copy_writer *w = arg;
    pthread_setname_np(pthread_self(), "o2p-copy-write");
    pthread_mutex_lock(&w->mu);
    for (;;) {
        copy_batch *b = oldest_full(w);
        if (b == NULL) {
            if (w->quit)
                break;
            pthread_cond_wait(&w->cv, &w->mu);
            continue;
        }
        b->state = SLOT_WRITING;
        /* After a failure the pass's later batches are dropped; once the copy stops, those not yet begun. */
        bool write = !w->out.failed && !copy_stopping(w->rc);
        pthread_mutex_unlock(&w->mu);
        bool retryable = false;
        bool ok = !write || ((!b->first || prepare_pass(w, b->j, &retryable)) && commit_batch(w, b, &retryable));
        pthread_mutex_lock(&w->mu);
        if (!ok) {
            copy_outcome *o = &w->out;
            o->failed = true;
            o->retryable = retryable;
            o->data_refused = w->data_refused;
            o->refused = w->connect_fault == APPLY_CONFIG || (w->pg != NULL && w->pg->last.status == APPLY_CONFIG);
            o->failed_docs = b->docs;
            o->malformed = w->malformed;
            snprintf(o->err, sizeof o->err, "%s", w->err);
        }
        b->state = SLOT_FREE;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void writer_free(copy_writer *w)
{
    for (size_t i = 0; i < COPY_SLOTS; i++) {
        copy_batch *b = &w->slots[i];
        sink_batch_free(b->rows);
        kept_clear(b);
        free(b->kept);
        bson_destroy(&b->last);
    }
    pgconn_close(w->pg);
    free(w->qtable);
    free_mapped(w);
    strbuf_free(&w->rows.buf);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

copy_writer *copy_writer_start(run_ctx *rc, char *err, size_t errlen)
{
    copy_writer *w = calloc(1, sizeof *w);
    if (w == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    w->rc = rc;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    strbuf_init(&w->rows.buf);
    bool ok = true;
    for (size_t i = 0; i < COPY_SLOTS; i++) {
        bson_init(&w->slots[i].last);
        ok = ok && (w->slots[i].rows = sink_batch_new()) != NULL;
    }
    if (!ok) {
        snprintf(err, errlen, "out of memory");
        writer_free(w);
        return NULL;
    }
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
        snprintf(err, errlen, "cannot start a copy writer thread");
        writer_free(w);
        return NULL;
    }
    w->started = true;
    return w;
}

void copy_writer_stop(copy_writer *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    w->quit = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (w->started)
        pthread_join(w->thread, NULL);
    writer_free(w);
}

copy_batch *copy_writer_acquire(copy_writer *w)
{
    copy_batch *b = NULL;
    pthread_mutex_lock(&w->mu);
    while (!w->out.failed) {
        for (size_t i = 0; i < COPY_SLOTS && b == NULL; i++)
            if (w->slots[i].state == SLOT_FREE)
                b = &w->slots[i];
        if (b != NULL) {
            b->state = SLOT_FILLING;
            break;
        }
        pthread_cond_wait(&w->cv, &w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    if (b != NULL)
        batch_empty(b); /* the rows of its last use go here, on the thread that made them */
    return b;
}

bool copy_writer_submit(copy_writer *w, copy_batch *b)
{
    pthread_mutex_lock(&w->mu);
    bool ok = !w->out.failed;
    b->seq = w->next_seq++;
    b->state = ok ? SLOT_FULL : SLOT_FREE;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return ok;
}

void copy_writer_release(copy_writer *w, copy_batch *b)
{
    pthread_mutex_lock(&w->mu);
    b->state = SLOT_FREE;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void copy_writer_drain(copy_writer *w, copy_outcome *out)
{
    pthread_mutex_lock(&w->mu);
    for (;;) {
        bool busy = false;
        for (size_t i = 0; i < COPY_SLOTS; i++)
            busy = busy || w->slots[i].state == SLOT_FULL || w->slots[i].state == SLOT_WRITING;
        if (!busy)
            break;
        pthread_cond_wait(&w->cv, &w->mu);
    }
    *out = w->out;
    memset(&w->out, 0, sizeof w->out);
    pthread_mutex_unlock(&w->mu);
}

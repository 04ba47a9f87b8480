/*
 * worker.c — one worker of the initial copy, its reading side: it takes the next unfinished collection and reads it
 * (find sorted by _id from the committed last _id), rendering or projecting the documents into batches that its
 * writing thread (writer.c) commits, one transaction each, while this thread reads the next. It decides what a
 * failed pass means: retried from the committed last _id, written again row by row to find the document PostgreSQL
 * refused, or the end of the copy.
 */
#include "copy_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map/ejson.h"
#include "map/project.h"
#include "sink/batch.h"
#include "source/mongo_client.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/strbuf.h"

typedef struct {
    run_ctx *rc;
    mongoc_client_t *mongo;
    copy_writer *writer;
    const map_collection *map; /* the current job's typed map, NULL for the jsonb shape */
    map_rows rows;             /* one document's rows, reused */
    strbuf key_buf, json_buf;  /* one document's texts, reused */
    copy_outcome out;          /* how the last pass's batches ended on the writing side */
    char err[ERRLEN];
} worker;

typedef enum { PASS_DONE, PASS_STOPPED, PASS_ERROR } pass_result;

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

/* Adds one document to the batch, or keeps it to be set aside when its text cannot be made. False only when memory
 * runs out (w->err says so). */
static bool add_doc(worker *w, copy_batch *b, const bson_t *doc, const bson_value_t *id)
{
    bool ok;
    if (w->map != NULL) {
        strbuf_reset(&w->rows.buf, 1024 * 1024);
        w->rows.count = 0;
        char why[512];
        project_status ps =
            map_project_document(w->map, bson_get_data(doc), doc->len, id, &w->rows, NULL, why, sizeof why);
        if (ps == PROJECT_NOMEM || strbuf_failed(&w->rows.buf))
            ok = false;
        else if (ps == PROJECT_TYPE_ERROR)
            ok = copy_batch_keep(b, doc, why); /* a value its column cannot take: a dead letter */
        else
            ok = sink_batch_add_mapped(b->rows, &w->rows) && (!b->careful || copy_batch_keep(b, doc, NULL));
    } else {
        strbuf_reset(&w->key_buf, 64 * 1024);
        strbuf_reset(&w->json_buf, 1024 * 1024);
        /* The text moves into the batch, so each document's buffer is new: sized at once (about the BSON's size,
         * numbers and dates a little longer) rather than grown from nothing by copies. */
        strbuf_reserve(&w->json_buf, (size_t)doc->len + doc->len / 4 + 64);
        ejson_error err;
        ejson_status st = ejson_write_key(&w->key_buf, id, &err);
        if (st == EJSON_OK)
            st = ejson_write_document_jsonb(&w->json_buf, bson_get_data(doc), doc->len, &err);
        if (st == EJSON_NOMEM) {
            ok = false;
        } else if (st != EJSON_OK) {
            char why[300];
            ok = copy_batch_keep(b, doc, ejson_error_text(&err, why, sizeof why));
        } else {
            size_t jlen;
            char *json = strbuf_detach(&w->json_buf, &jlen);
            ok = json != NULL && sink_batch_take(b->rows, w->key_buf.data, w->key_buf.len, &json, jlen) &&
                 (!b->careful || copy_batch_keep(b, doc, NULL));
            free(json); /* NULL once taken */
        }
    }
    if (ok)
        b->docs++;
    else
        snprintf(w->err, sizeof w->err, "out of memory");
    return ok;
}

/* One pass over a collection from its committed last _id to its end (or a stop, or an error). Batches are handed to
 * the writing thread as they fill; the pass ends once they are all committed (or one failed: w->out says why). */
static pass_result copy_pass(worker *w, job *j, bool *retryable)
{
    *retryable = false;
    w->map = map_find(w->rc->cfg->maps, j->db, j->coll);
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
    bson_t last = BSON_INITIALIZER; /* {_id: v} of the last document read */
    bool have_pending_last = false, first = true, handed = false;
    int64_t careful_left = j->careful_left; /* documents still to go row by row, counted as they are read */
    copy_batch *b = NULL;
    size_t limit_docs = 0, limit_bytes = 0;
    pass_result res = PASS_DONE;
    while (mongoc_cursor_next(cur, &doc)) {
        if (copy_stopping(w->rc)) {
            res = PASS_STOPPED;
            goto drain;
        }
        bson_iter_t it;
        if (!bson_iter_init_find(&it, doc, "_id")) {
            char at[256];
            /* The last _id read in this pass (j->last_id is the writing thread's once a batch is handed over). */
            copy_id_text(first ? j->last_id : bson_get_data(&last), first ? j->last_id_len : last.len, at, sizeof at);
            snprintf(w->err, sizeof w->err, "a document without _id (after _id %s)", at);
            res = PASS_ERROR;
            goto drain;
        }
        bson_reinit(&last);
        if (!bson_append_iter(&last, "_id", 3, &it)) {
            snprintf(w->err, sizeof w->err, "an _id too large to keep");
            res = PASS_ERROR;
            goto drain;
        }
        if (first) {
            first = false;
            if (have_last && last.len == j->last_id_len && memcmp(bson_get_data(&last), j->last_id, last.len) == 0)
                continue;
        }
        if (b == NULL) {
            if ((b = copy_writer_acquire(w->writer)) == NULL)
                goto drain; /* a batch of this pass failed */
            b->j = j;
            b->first = !handed;
            b->careful = careful_left > 0;
            /* The pass's first batch is smaller, so that the writing thread starts on the collection sooner. */
            limit_docs = w->rc->batch_docs, limit_bytes = COPY_BATCH_BYTES;
            if (b->first) {
                limit_docs = limit_docs / FIRST_BATCH_SHARE > 0 ? limit_docs / FIRST_BATCH_SHARE : 1;
                limit_bytes /= FIRST_BATCH_SHARE;
            }
            if (b->careful && (uint64_t)careful_left < limit_docs)
                limit_docs = (size_t)careful_left;
        }
        if (!add_doc(w, b, doc, bson_iter_value(&it))) {
            *retryable = true;
            res = PASS_ERROR;
            goto drain;
        }
        have_pending_last = true;
        if (b->docs >= limit_docs || sink_batch_bytes(b->rows) + b->kept_bytes >= limit_bytes) {
            bson_reinit(&b->last);
            bson_concat(&b->last, &last);
            if (b->careful)
                careful_left -= (int64_t)b->docs;
            copy_batch *full = b;
            b = NULL;
            handed = true;
            have_pending_last = false;
            if (!copy_writer_submit(w->writer, full))
                goto drain;
        }
    }
    bson_error_t e;
    if (mongoc_cursor_error(cur, &e)) {
        int exists = coll_exists(w->mongo, j->db, j->coll);
        if (exists != 0) {
            *retryable = mongo_error_retryable(&e);
            snprintf(w->err, sizeof w->err, "reading from MongoDB: %s", e.message);
            res = PASS_ERROR;
            goto drain;
        }
        log_notice("copy of %s.%s: the collection was dropped during the copy; marking it done (the oplog replay "
                   "drops its table)",
                   j->db, j->coll);
        /* What was read of it is not written: an empty last batch marks it done. */
        if (b != NULL)
            copy_writer_release(w->writer, b);
        if ((b = copy_writer_acquire(w->writer)) == NULL)
            goto drain;
        b->j = j;
        b->first = !handed;
        have_pending_last = false;
    } else if (b == NULL) {
        if ((b = copy_writer_acquire(w->writer)) == NULL)
            goto drain;
        b->j = j;
        b->first = !handed;
        b->careful = careful_left > 0;
    }
    /* The collection's last batch (possibly empty): its progress row says done. */
    if (have_pending_last) {
        bson_reinit(&b->last);
        bson_concat(&b->last, &last);
    }
    b->done = true;
    copy_batch *final = b;
    b = NULL;
    (void)copy_writer_submit(w->writer, final); /* a failure shows in the drain */

drain:
    if (b != NULL)
        copy_writer_release(w->writer, b);
    copy_writer_drain(w->writer, &w->out);
    mongoc_cursor_destroy(cur);
    bson_destroy(&last);
    bson_destroy(&opts);
    bson_destroy(&filter);
    mongoc_collection_destroy(coll);
    if (w->out.failed) {
        /* The writing side's failure comes first: the batches before it are committed, the rest is read again. */
        *retryable = w->out.retryable;
        snprintf(w->err, sizeof w->err, "%s", w->out.err);
        return PASS_ERROR;
    }
    if (res == PASS_ERROR)
        return res;
    return j->done ? PASS_DONE : PASS_STOPPED; /* not done: the copy stops and batches were left unwritten */
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
        memset(&w->out, 0, sizeof w->out);
        pass_result pr = copy_pass(w, j, &retryable);
        if (pr == PASS_DONE)
            return COPY_DONE;
        if (pr == PASS_STOPPED)
            return COPY_CANCELLED;
        if (w->out.data_refused && j->careful_left == 0) {
            /* PostgreSQL refused a row of the batch: write that stretch again row by row, setting aside the rows
             * it refuses, then go back to batches. */
            j->careful_left = w->out.failed_docs > 0 ? (int64_t)w->out.failed_docs : 1;
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
            bool refused = w->out.failed && w->out.refused;
            copy_run_fail(w->rc, refused ? COPY_REFUSED : COPY_FAILED, msg);
            return refused ? COPY_REFUSED : COPY_FAILED;
        }
        uint64_t wait = backoff_next(&bo);
        log_warning("copy of %s.%s (last _id committed: %s): %s; retrying in %llu ms (attempt %u)", j->db, j->coll, at,
                    w->err, (unsigned long long)wait, ++attempt);
        for (uint64_t waited = 0; waited < wait && !copy_stopping(w->rc); waited += 50)
            clock_sleep_ms(50);
    }
}

void *copy_worker_main(void *arg)
{
    run_ctx *rc = arg;
    worker w = {.rc = rc};
    pthread_setname_np(pthread_self(), "o2p-copy-read");
    w.mongo = copy_mongo_connect(rc->cfg->mongo_uri, w.err, sizeof w.err);
    if (w.mongo == NULL) {
        copy_run_fail(rc, COPY_FAILED, w.err);
        goto out;
    }
    w.writer = copy_writer_start(rc, w.err, sizeof w.err);
    if (w.writer == NULL) {
        copy_run_fail(rc, COPY_FAILED, w.err);
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
    copy_writer_stop(w.writer);
    if (w.mongo != NULL)
        mongoc_client_destroy(w.mongo);
    strbuf_free(&w.rows.buf);
    strbuf_free(&w.key_buf);
    strbuf_free(&w.json_buf);
    atomic_fetch_sub(&rc->workers_running, 1);
    return NULL;
}

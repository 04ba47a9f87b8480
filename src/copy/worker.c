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
    strbuf key_buf, json_buf;  /* one document's texts, reused (key_buf: its _id's key text, made first) */
    strbuf prev_key;           /* the key text of the document before it in this pass (or the last one committed) */
    copy_outcome out;          /* how the last pass's batches ended on the writing side */
    char err[ERRLEN];
} worker;

/* PASS_MOVED: the collection was renamed or dropped while the pass read it: nothing read after that is written, and
 * the next pass starts from the committed last _id where the collection is now. PASS_UNSUPPORTED: what w->err says
 * cannot be copied exactly (the copy stops with it). */
typedef enum { PASS_DONE, PASS_STOPPED, PASS_ERROR, PASS_MOVED, PASS_UNSUPPORTED } pass_result;

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

/* Where the job's collection is now. A collection renamed within its database keeps its UUID (a rename across
 * databases is a copy under a new UUID and a drop of the source, as far as the oplog shows it), so the UUID the plan
 * noted finds it under its new name; a UUID listed nowhere means the collection was dropped. */
typedef enum {
    LOC_HERE,    /* still at j->src_db.j->src_coll */
    LOC_MOVED,   /* renamed: j->src_db/j->src_coll now say where */
    LOC_GONE,    /* dropped */
    LOC_UNKNOWN, /* not at its name, and no UUID to follow it by (a copy state of an earlier version) */
    LOC_ERROR,   /* MongoDB could not be asked (w->err says why) */
} locate_result;

/* Calls back for each collection of dbname that listCollections shows (filter may be NULL); false on a cursor error
 * (w->err set). fn returns true to stop. */
static bool each_listed(worker *w, const char *dbname, const bson_t *filter,
                        bool (*fn)(void *arg, const char *db, const bson_t *entry), void *arg, bool *stopped)
{
    mongoc_database_t *db = mongoc_client_get_database(w->mongo, dbname);
    bson_t opts = BSON_INITIALIZER;
    if (filter != NULL)
        BSON_APPEND_DOCUMENT(&opts, "filter", filter);
    mongoc_cursor_t *cur = mongoc_database_find_collections_with_opts(db, &opts);
    const bson_t *doc;
    *stopped = false;
    while (!*stopped && mongoc_cursor_next(cur, &doc))
        *stopped = fn(arg, dbname, doc);
    bson_error_t e;
    bool ok = !mongoc_cursor_error(cur, &e);
    if (!ok)
        snprintf(w->err, sizeof w->err, "listing the collections of %s: %s", dbname, e.message);
    mongoc_cursor_destroy(cur);
    bson_destroy(&opts);
    mongoc_database_destroy(db);
    return ok;
}

typedef struct {
    const job *j;
    bool found, uuid_match;
    char db[128], coll[256];
    bool ts; /* the entry's options.timeseries, for a time-series collection's buckets */
    char ts_time[256], ts_meta[256];
    bool here_viewless; /* the entry at the job's name is a viewless time-series collection */
    bool viewless;      /* so is the entry whose UUID matched */
} locate_ctx;

static bool locate_entry(void *arg, const char *db, const bson_t *entry)
{
    locate_ctx *lc = arg;
    bson_iter_t it;
    const char *name = NULL, *type = "collection";
    if (bson_iter_init_find(&it, entry, "name") && BSON_ITER_HOLDS_UTF8(&it))
        name = bson_iter_utf8(&it, NULL);
    if (bson_iter_init_find(&it, entry, "type") && BSON_ITER_HOLDS_UTF8(&it))
        type = bson_iter_utf8(&it, NULL);
    /* A viewless time-series collection NAME stands for the buckets collection system.buckets.NAME the job names
     * (copy_listed_viewless): the same buckets, under the collection's own name. */
    bool viewless = name != NULL && copy_listed_viewless(entry);
    if (name == NULL || (strcmp(type, "collection") != 0 && !viewless))
        return false;
    char vname[COPY_BUCKETS_PREFIX_LEN + 256];
    if (viewless) {
        snprintf(vname, sizeof vname, "%s%s", COPY_BUCKETS_PREFIX, name);
        name = vname;
    }
    if (lc->j->ts && strcmp(name, lc->j->src_coll) == 0 && strcmp(db, lc->j->src_db) == 0) {
        lc->ts = copy_listed_timeseries(entry, lc->ts_time, sizeof lc->ts_time, lc->ts_meta, sizeof lc->ts_meta);
        lc->here_viewless = viewless;
    }
    uint8_t uuid[16];
    if (!lc->j->has_uuid || !copy_listed_uuid(entry, uuid) || memcmp(uuid, lc->j->uuid, 16) != 0) {
        lc->found = true; /* a collection of that name, not necessarily this one */
        return false;
    }
    size_t nlen = strlen(name);
    if (nlen >= sizeof lc->coll)
        return false; /* longer than a namespace can be: not this job's collection */
    lc->found = lc->uuid_match = true;
    lc->viewless = viewless;
    snprintf(lc->db, sizeof lc->db, "%s", db);
    memcpy(lc->coll, name, nlen + 1);
    return true;
}

static locate_result locate(worker *w, job *j)
{
    locate_ctx lc = {.j = j};
    bool stopped;
    bson_t *filter = BCON_NEW("name", BCON_UTF8(j->src_coll));
    bool ok = each_listed(w, j->src_db, filter, locate_entry, &lc, &stopped);
    bson_destroy(filter);
    if (ok && j->ts && !lc.found && strlen(j->src_coll) > COPY_BUCKETS_PREFIX_LEN) {
        /* no system.buckets.NAME: a viewless time-series collection NAME holds the buckets */
        filter = BCON_NEW("name", BCON_UTF8(j->src_coll + COPY_BUCKETS_PREFIX_LEN));
        ok = each_listed(w, j->src_db, filter, locate_entry, &lc, &stopped);
        bson_destroy(filter);
    }
    if (!ok)
        return LOC_ERROR;
    if ((lc.uuid_match || (!j->has_uuid && lc.found)) && j->ts) {
        if (!lc.ts) {
            snprintf(w->err, sizeof w->err, "%s.%s lists no timeseries.timeField in its options", j->db, j->coll);
            return LOC_ERROR;
        }
        snprintf(j->ts_time, sizeof j->ts_time, "%s", lc.ts_time);
        snprintf(j->ts_meta, sizeof j->ts_meta, "%s", lc.ts_meta);
        j->ts_known = true;
        j->viewless = lc.here_viewless;
    }
    if (lc.uuid_match)
        return LOC_HERE;
    if (!j->has_uuid)
        return lc.found ? LOC_HERE : LOC_UNKNOWN;
    /* Not under its name: look for its UUID in every database. */
    bson_error_t e;
    char **dbs = mongoc_client_get_database_names_with_opts(w->mongo, NULL, &e);
    if (dbs == NULL) {
        snprintf(w->err, sizeof w->err, "listing databases: %s", e.message);
        return LOC_ERROR;
    }
    memset(&lc, 0, sizeof lc);
    lc.j = j;
    stopped = false;
    for (size_t d = 0; ok && !stopped && dbs[d] != NULL; d++)
        ok = each_listed(w, dbs[d], NULL, locate_entry, &lc, &stopped);
    bson_strfreev(dbs);
    if (!ok)
        return LOC_ERROR;
    if (!lc.uuid_match)
        return LOC_GONE;
    char at[256];
    copy_id_text(j->last_id, j->last_id_len, at, sizeof at);
    /* What the replay does at the rename (sink_rename, nsfilter_filter_entry), so the line promises only that. */
    const char *then = "the oplog replay then renames that table and applies every change since the copy's start";
    if (w->map != NULL || map_find(w->rc->cfg->maps, lc.db, lc.coll) != NULL)
        then = "the oplog replay will stop at the rename, which this version cannot apply to a table of a typed map: "
               "move the map to the new name and copy that collection again (--reimport)";
    else if (copy_skip_namespace(w->rc->cfg->filter, lc.db, lc.coll))
        then = "the oplog replay then drops that table: [replication] leaves the new name out";
    log_notice("copy of %s.%s: the collection is now %s.%s (renamed during the copy); reading on from there after _id "
               "%s into the same table (%s)",
               j->db, j->coll, lc.db, lc.coll, at, then);
    snprintf(j->src_db, sizeof j->src_db, "%s", lc.db);
    snprintf(j->src_coll, sizeof j->src_coll, "%s", lc.coll);
    j->viewless = lc.viewless;
    return LOC_MOVED;
}

/* Adds one document to the batch, or keeps it to be set aside when its text cannot be made. False only when memory
 * runs out (w->err says so). */
static bool add_doc(worker *w, copy_batch *b, const bson_t *doc, const bson_value_t *id, ejson_status key_st,
                    const ejson_error *key_err)
{
    bool ok;
    if (b->j->ts) {
        ok = copy_batch_keep(b, doc, NULL); /* a bucket: the writer makes its rows (sink/tseries.h) */
    } else if (w->map != NULL) {
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
        strbuf_reset(&w->json_buf, 1024 * 1024);
        /* The text moves into the batch, so each document's buffer is new: sized at once (about the BSON's size,
         * numbers and dates a little longer) rather than grown from nothing by copies. */
        strbuf_reserve(&w->json_buf, (size_t)doc->len + doc->len / 4 + 64);
        ejson_error err = *key_err;
        ejson_status st = key_st; /* the key text is in w->key_buf (key_text) */
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

/* After a pass: what the writing side says comes first (the batches before a failure are committed, the rest is
 * read again), then what the reading side found; a pass whose batches all committed is done once the last one was. */
static pass_result pass_end(worker *w, const job *j, pass_result res, bool *retryable)
{
    copy_writer_drain(w->writer, &w->out);
    if (w->out.failed) {
        *retryable = w->out.retryable;
        snprintf(w->err, sizeof w->err, "%s", w->out.err);
        return w->out.malformed ? PASS_UNSUPPORTED : PASS_ERROR;
    }
    if (res != PASS_DONE)
        return res;
    return j->done ? PASS_DONE : PASS_STOPPED; /* not done: the copy stops and batches were left unwritten */
}

/* The collection was dropped (its UUID is listed nowhere): its progress row says done with what was committed. That
 * is exact: the collection was listed after the copy's start, so its drop (or, for a rename to another database, the
 * drop of its source) is in the oplog after the start, and the replay drops the table there. */
static pass_result mark_dropped(worker *w, job *j, bool *retryable)
{
    char at[256];
    copy_id_text(j->last_id, j->last_id_len, at, sizeof at);
    log_notice("copy of %s.%s: the collection was dropped during the copy; marking it done with the %lld documents "
               "committed (last _id %s): the oplog replay drops its table at the drop",
               j->db, j->coll, (long long)j->copied, at);
    copy_batch *b = copy_writer_acquire(w->writer);
    if (b != NULL) {
        b->j = j;
        b->first = true; /* the writer makes sure of the table: the replay's drop finds it */
        b->done = true;
        (void)copy_writer_submit(w->writer, b); /* a failure shows in the drain */
    }
    return pass_end(w, j, PASS_DONE, retryable);
}

/* A collection no longer listed under its name, and no UUID to follow it by (a copy state begun by an earlier
 * version, or a server that lists none): a rename cannot be told from a drop, and after a rename the replay would
 * rename a partial table. The copy stops; nothing of this collection past the committed _id is written. */
static pass_result vanished_unknown(worker *w, const job *j)
{
    snprintf(w->err, sizeof w->err,
             "%s.%s is no longer listed, and the copy state holds no UUID for it (a copy begun by an earlier version): "
             "a rename cannot be told from a drop, so this copy cannot be finished exactly; run with --reimport",
             j->src_db, j->src_coll);
    return PASS_UNSUPPORTED;
}

/* The key text of an _id (map/ejson.h: equal exactly when MongoDB's _id index finds two _ids equal, and what a row's
 * _id holds) into buf. */
static ejson_status key_text(strbuf *buf, const bson_value_t *id, ejson_error *err)
{
    strbuf_reset(buf, 64 * 1024);
    return ejson_write_key(buf, id, err);
}

static bool same_key(const strbuf *a, const strbuf *b)
{
    return a->len == b->len && memcmp(a->data, b->data, a->len) == 0;
}

/* One pass over a collection from its committed last _id to its end (or a stop, or an error). Batches are handed to
 * the writing thread as they fill; the pass ends once they are all committed (or one failed: w->out says why). */
static pass_result copy_pass(worker *w, job *j, bool *retryable)
{
    *retryable = false;
    w->map = map_find(w->rc->cfg->maps, j->db, j->coll);
    /* Where the collection is now: a rename or a drop since the last pass (or, resumed, since the last run). */
    locate_result at_start = locate(w, j);
    if (at_start == LOC_ERROR) {
        *retryable = true;
        return PASS_ERROR;
    }
    if (at_start == LOC_UNKNOWN)
        return vanished_unknown(w, j);
    if (at_start == LOC_GONE)
        return mark_dropped(w, j, retryable);
    /* A viewless time-series collection's buckets: the collection itself, read with rawData: true (the server's way
     * to read raw buckets, FCV 8.2 and later: mongo jstests/libs/raw_operation_utils.js) */
    mongoc_collection_t *coll = mongoc_client_get_collection(
        w->mongo, j->src_db, j->viewless ? j->src_coll + COPY_BUCKETS_PREFIX_LEN : j->src_coll);
    bson_t filter = BSON_INITIALIZER;
    bson_t opts = BSON_INITIALIZER;
    bson_t sub;
    if (j->viewless)
        BSON_APPEND_BOOL(&opts, "rawData", true);
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
    /* Two documents with one _id (equal key texts): a sharded collection whose shard key is not _id, where each
     * shard's _id index is its own. The router's merge sorted by _id puts them side by side: the first becomes the
     * row, the others are set aside (a table has one row per _id). A batch never ends between them: one that is full
     * goes to the writer only once a document with another _id comes. So all the documents of one _id commit
     * together, and a pass resumed after the last committed _id skips every one of them (min is inclusive). */
    bool have_prev = false, skipping = false, full = false;
    if (have_last) {
        bson_iter_t li;
        ejson_error le;
        if (bson_iter_init_find(&li, &last_view, "_id") &&
            key_text(&w->prev_key, bson_iter_value(&li), &le) == EJSON_OK)
            have_prev = skipping = true;
        else
            have_prev = skipping = false; /* an _id without key text was set aside: only its bytes can skip it */
    }
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, &filter, &opts, NULL);
    const bson_t *doc;
    bson_t last = BSON_INITIALIZER; /* {_id: v} of the last document read */
    bool first = true, handed = false;
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
        ejson_error kerr;
        ejson_status kst = key_text(&w->key_buf, bson_iter_value(&it), &kerr);
        if (kst == EJSON_NOMEM || strbuf_failed(&w->key_buf)) {
            snprintf(w->err, sizeof w->err, "out of memory");
            *retryable = true;
            res = PASS_ERROR;
            goto drain;
        }
        bool dup = kst == EJSON_OK && have_prev && same_key(&w->key_buf, &w->prev_key);
        if (first) {
            first = false;
            if (have_last && last.len == j->last_id_len && memcmp(bson_get_data(&last), j->last_id, last.len) == 0)
                continue;
        }
        if (skipping && dup)
            continue; /* the documents of the last committed _id: committed with it, row or dead letter */
        skipping = false;
        if (kst == EJSON_OK) {
            if (!dup) {
                strbuf_reset(&w->prev_key, 64 * 1024);
                strbuf_append(&w->prev_key, w->key_buf.data, w->key_buf.len);
                have_prev = !strbuf_failed(&w->prev_key);
            }
        } else {
            have_prev = false;
        }
        if (full && !dup) {
            /* The full batch goes now that another _id comes. */
            if (b->careful)
                careful_left -= (int64_t)b->docs;
            copy_batch *done_batch = b;
            b = NULL;
            full = false;
            handed = true;
            if (!copy_writer_submit(w->writer, done_batch))
                goto drain;
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
        if (dup) {
            char id[256], why[512];
            copy_id_text(bson_get_data(&last), last.len, id, sizeof id);
            snprintf(why, sizeof why,
                     "two documents with _id %s in this collection (a sharded collection whose shard key is not _id: "
                     "two shards hold the same _id); the first one read is the row",
                     id);
            if (!copy_batch_keep(b, doc, why)) {
                snprintf(w->err, sizeof w->err, "out of memory");
                *retryable = true;
                res = PASS_ERROR;
                goto drain;
            }
            b->docs++;
            continue; /* the batch's last _id stays the row's */
        }
        if (!add_doc(w, b, doc, bson_iter_value(&it), kst, &kerr)) {
            *retryable = true;
            res = PASS_ERROR;
            goto drain;
        }
        bson_reinit(&b->last);
        bson_concat(&b->last, &last);
        if (b->docs >= limit_docs || sink_batch_bytes(b->rows) + b->kept_bytes >= limit_bytes)
            full = true; /* handed over at the next _id, or as the collection's last */
    }
    bson_error_t e;
    bool cursor_failed = mongoc_cursor_error(cur, &e);
    /* The cursor ended, or failed: is the collection still where it was read from? A rename or a drop kills its
     * cursors, and a find on a name that no longer exists reads nothing and ends as if the collection were empty:
     * either way what the pass has not handed over yet is not written, and the next pass decides from where the
     * collection is now. */
    locate_result loc = locate(w, j);
    if (loc == LOC_ERROR) {
        *retryable = true;
        res = PASS_ERROR;
        goto drain;
    }
    if (loc == LOC_UNKNOWN) {
        res = vanished_unknown(w, j);
        goto drain;
    }
    if (loc != LOC_HERE) {
        res = PASS_MOVED;
        goto drain;
    }
    if (cursor_failed && j->viewless && !mongo_error_retryable(&e)) {
        /* A server that does not take rawData (before 8.2) cannot give a viewless collection's buckets: said as
         * such, never read another way. */
        snprintf(w->err, sizeof w->err,
                 "reading the buckets of viewless time-series collection %s.%s with rawData: true, which MongoDB "
                 "refused (%s); a server that keeps time-series collections viewless and does not take rawData "
                 "cannot be copied (docs/timeseries.md)",
                 j->src_db, j->src_coll + COPY_BUCKETS_PREFIX_LEN, e.message);
        res = PASS_UNSUPPORTED;
        goto drain;
    }
    if (cursor_failed) {
        *retryable = mongo_error_retryable(&e);
        snprintf(w->err, sizeof w->err, "reading from MongoDB: %s", e.message);
        res = PASS_ERROR;
        goto drain;
    }
    if (b == NULL) {
        if ((b = copy_writer_acquire(w->writer)) == NULL)
            goto drain;
        b->j = j;
        b->first = !handed;
        b->careful = careful_left > 0;
    }
    /* The collection's last batch (possibly empty): its progress row says done. */
    b->done = true;
    copy_batch *final = b;
    b = NULL;
    (void)copy_writer_submit(w->writer, final); /* a failure shows in the drain */

drain:
    if (b != NULL)
        copy_writer_release(w->writer, b);
    mongoc_cursor_destroy(cur);
    bson_destroy(&last);
    bson_destroy(&opts);
    bson_destroy(&filter);
    mongoc_collection_destroy(coll);
    return pass_end(w, j, res, retryable);
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
        if (pr == PASS_MOVED)
            continue; /* the next pass finds where the collection went */
        if (pr == PASS_UNSUPPORTED) {
            char msg[ERRLEN + 300];
            snprintf(msg, sizeof msg, "copying %s.%s (%lld documents committed): %.900s", j->db, j->coll,
                     (long long)j->copied, w->err);
            copy_run_fail(w->rc, COPY_UNSUPPORTED, msg);
            return COPY_UNSUPPORTED;
        }
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
    strbuf_free(&w.prev_key);
    strbuf_free(&w.json_buf);
    atomic_fetch_sub(&rc->workers_running, 1);
    return NULL;
}

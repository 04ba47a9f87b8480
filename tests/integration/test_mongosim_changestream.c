/*
 * test_mongosim_changestream.c — change streams over the wire with the real libmongoc: mongoc_collection_watch and
 * mongoc_client_watch (the driver's own aggregate, getMore with maxAwaitTimeMS, resume token caching), and a
 * hand-built aggregate/getMore for what libmongoc 1.23 cannot pass (showExpandedEvents, showRawUpdateDescription),
 * the post-batch resume token on empty batches, the await woken by a write, killCursors, and 286 with its label.
 * Against a real 7.0 replica set (MONGO_URI) the same cases run but the one needing mongosim's test commands.
 */
#include <check.h>
#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../lib/oplogutil.h"
#include "../lib/skip.h"

#define CS_DB "mongosim_cs"

Suite *mongosim_changestream_it_suite(void);

static const bson_t empty_pipeline = BSON_INITIALIZER;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static mongoc_client_t *client_new(void)
{
    const char *uri_str = getenv("MONGO_URI");
    ck_assert_msg(uri_str && *uri_str, "MONGO_URI is not set (the integration harness sets it)");
    mongoc_init();
    bson_error_t err;
    mongoc_uri_t *uri = mongoc_uri_new_with_error(uri_str, &err);
    ck_assert_msg(uri, "bad MONGO_URI '%s': %s", uri_str, err.message);
    mongoc_uri_set_option_as_int32(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS, 15000);
    mongoc_client_t *c = mongoc_client_new_from_uri(uri);
    mongoc_uri_destroy(uri);
    ck_assert_ptr_nonnull(c);
    return c;
}

static void command_ok(mongoc_client_t *c, const char *db, bson_t *cmd, bson_t *reply)
{
    bson_error_t err;
    bson_t tmp;
    bool ok = mongoc_client_command_simple(c, db, cmd, NULL, reply ? reply : &tmp, &err);
    bson_destroy(cmd);
    ck_assert_msg(ok, "command failed: %s (code %u)", err.message, err.code);
    if (!reply)
        bson_destroy(&tmp);
}

static void fresh_collection(mongoc_client_t *c, const char *name)
{
    mongoc_collection_t *coll = mongoc_client_get_collection(c, CS_DB, name);
    bson_error_t err;
    mongoc_collection_drop(coll, &err); /* may not exist */
    mongoc_collection_destroy(coll);
}

static void insert(mongoc_client_t *c, const char *coll_name, int id)
{
    mongoc_collection_t *coll = mongoc_client_get_collection(c, CS_DB, coll_name);
    bson_t *doc = BCON_NEW("_id", BCON_INT32(id), "v", BCON_INT32(id * 10));
    bson_error_t err;
    ck_assert_msg(mongoc_collection_insert_one(coll, doc, NULL, NULL, &err), "insert: %s", err.message);
    bson_destroy(doc);
    mongoc_collection_destroy(coll);
}

/* The next event, waiting up to `secs` (each mongoc_change_stream_next waits maxAwaitTimeMS at most). */
static bool next_event(mongoc_change_stream_t *cs, double secs, const bson_t **ev)
{
    double until = now_s() + secs;
    bson_error_t err;
    const bson_t *edoc;
    while (now_s() < until) {
        if (mongoc_change_stream_next(cs, ev))
            return true;
        ck_assert_msg(!mongoc_change_stream_error_document(cs, &err, &edoc), "change stream error: %s", err.message);
    }
    return false;
}

static const char *str_at(const bson_t *doc, const char *path)
{
    bson_iter_t it, f;
    ck_assert_msg(bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, path, &f) && BSON_ITER_HOLDS_UTF8(&f),
                  "no string %s", path);
    return bson_iter_utf8(&f, NULL);
}

static int64_t int_at(const bson_t *doc, const char *path)
{
    bson_iter_t it, f;
    ck_assert_msg(bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, path, &f), "no %s", path);
    return bson_iter_as_int64(&f);
}

static bool has(const bson_t *doc, const char *path)
{
    bson_iter_t it, f;
    return bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, path, &f);
}

START_TEST(test_collection_watch_and_resume)
{
    mongoc_client_t *c = client_new();
    fresh_collection(c, "w");
    mongoc_collection_t *coll = mongoc_client_get_collection(c, CS_DB, "w");
    bson_t *opts = BCON_NEW("maxAwaitTimeMS", BCON_INT32(500));
    mongoc_change_stream_t *cs = mongoc_collection_watch(coll, &empty_pipeline, opts);
    const bson_t *ev;
    bson_error_t err;
    const bson_t *edoc;
    ck_assert_msg(!mongoc_change_stream_error_document(cs, &err, &edoc), "watch: %s", err.message);
    /* nothing yet: an empty getMore still caches a (high-water-mark) resume token */
    ck_assert(!mongoc_change_stream_next(cs, &ev));
    ck_assert_ptr_nonnull(mongoc_change_stream_get_resume_token(cs));
    insert(c, "w", 1);
    insert(c, "w", 2);
    insert(c, "other", 3);
    ck_assert(next_event(cs, 30, &ev));
    ck_assert_str_eq(str_at(ev, "operationType"), "insert");
    ck_assert_int_eq(int_at(ev, "fullDocument.v"), 10);
    ck_assert_str_eq(str_at(ev, "ns.coll"), "w");
    bson_t *tok1 = bson_copy(mongoc_change_stream_get_resume_token(cs));
    ck_assert(next_event(cs, 30, &ev));
    ck_assert_int_eq(int_at(ev, "documentKey._id"), 2);
    mongoc_change_stream_destroy(cs);
    bson_destroy(opts);
    /* resumeAfter the first event: the second comes again */
    opts = BCON_NEW("maxAwaitTimeMS", BCON_INT32(500), "resumeAfter", BCON_DOCUMENT(tok1));
    cs = mongoc_collection_watch(coll, &empty_pipeline, opts);
    ck_assert(next_event(cs, 30, &ev));
    ck_assert_int_eq(int_at(ev, "documentKey._id"), 2);
    mongoc_change_stream_destroy(cs);
    bson_destroy(opts);
    bson_destroy(tok1);
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(c);
}
END_TEST

START_TEST(test_client_watch_transaction)
{
    mongoc_client_t *c = client_new();
    fresh_collection(c, "t");
    insert(c, "t", 100); /* the collection exists before the transaction */
    bson_t *opts = BCON_NEW("maxAwaitTimeMS", BCON_INT32(500));
    mongoc_change_stream_t *cs = mongoc_client_watch(c, &empty_pipeline, opts);
    const bson_t *ev;
    ck_assert(!mongoc_change_stream_next(cs, &ev));
    bson_error_t err;
    mongoc_client_session_t *ses = mongoc_client_start_session(c, NULL, &err);
    ck_assert_msg(ses, "%s", err.message);
    ck_assert_msg(mongoc_client_session_start_transaction(ses, NULL, &err), "%s", err.message);
    mongoc_collection_t *coll = mongoc_client_get_collection(c, CS_DB, "t");
    bson_t sopts = BSON_INITIALIZER;
    ck_assert(mongoc_client_session_append(ses, &sopts, &err));
    for (int i = 1; i <= 3; i++) {
        bson_t *doc = BCON_NEW("_id", BCON_INT32(i));
        ck_assert_msg(mongoc_collection_insert_one(coll, doc, &sopts, NULL, &err), "%s", err.message);
        bson_destroy(doc);
    }
    bson_t reply;
    ck_assert_msg(mongoc_client_session_commit_transaction(ses, &reply, &err), "%s", err.message);
    bson_destroy(&reply);
    uint32_t t0 = 0, i0 = 0;
    for (int i = 1; i <= 3; i++) {
        ck_assert(next_event(cs, 30, &ev));
        ck_assert_int_eq(int_at(ev, "documentKey._id"), i);
        ck_assert(has(ev, "lsid.id") && has(ev, "txnNumber"));
        bson_iter_t it;
        uint32_t t, inc;
        ck_assert(bson_iter_init_find(&it, ev, "clusterTime"));
        bson_iter_timestamp(&it, &t, &inc);
        if (i == 1) {
            t0 = t;
            i0 = inc;
        }
        ck_assert(t == t0 && inc == i0); /* one clusterTime: the commit's */
    }
    bson_destroy(&sopts);
    mongoc_collection_destroy(coll);
    mongoc_client_session_destroy(ses);
    mongoc_change_stream_destroy(cs);
    bson_destroy(opts);
    mongoc_client_destroy(c);
}
END_TEST

/* A raw aggregate: the reply's cursor (id, batch, PBRT _data). */
typedef struct {
    int64_t id;
    bson_t batch;
    char pbrt[8192];
    char ns[256];
} raw_cursor;

static void read_cursor(const bson_t *reply, raw_cursor *rc, const char *key)
{
    bson_iter_t it, f;
    ck_assert(bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, "cursor.id", &f));
    rc->id = bson_iter_as_int64(&f);
    char path[64];
    snprintf(path, sizeof path, "cursor.%s", key);
    ck_assert(bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, path, &f) && BSON_ITER_HOLDS_ARRAY(&f));
    uint32_t len;
    const uint8_t *data;
    bson_iter_array(&f, &len, &data);
    bson_t tmp;
    bson_init_static(&tmp, data, len);
    bson_copy_to(&tmp, &rc->batch);
    snprintf(rc->pbrt, sizeof rc->pbrt, "%s", str_at(reply, "cursor.postBatchResumeToken._data"));
    snprintf(rc->ns, sizeof rc->ns, "%s", str_at(reply, "cursor.ns"));
}

static int count_docs(const bson_t *arr)
{
    bson_iter_t it;
    int n = 0;
    bson_iter_init(&it, arr);
    while (bson_iter_next(&it))
        n++;
    return n;
}

static bool batch_doc(const bson_t *arr, int i, bson_t *out)
{
    bson_iter_t it;
    char k[16];
    snprintf(k, sizeof k, "%d", i);
    if (!bson_iter_init_find(&it, arr, k))
        return false;
    uint32_t len;
    const uint8_t *data;
    bson_iter_document(&it, &len, &data);
    return bson_init_static(out, data, len);
}

static void get_more(mongoc_client_t *c, const char *coll, int64_t id, int64_t max_ms, raw_cursor *rc)
{
    bson_t *cmd = BCON_NEW("getMore", BCON_INT64(id), "collection", coll, "maxTimeMS", BCON_INT64(max_ms));
    bson_t reply;
    bson_error_t err;
    bool ok = mongoc_client_read_command_with_opts(c, CS_DB, cmd, NULL, NULL, &reply, &err);
    ck_assert_msg(ok, "getMore: %s", err.message);
    bson_destroy(cmd);
    read_cursor(&reply, rc, "nextBatch");
    bson_destroy(&reply);
}

typedef struct {
    const char *uri;
    int delay_ms;
} writer_arg;

static void *late_writer(void *p)
{
    writer_arg *a = p;
    usleep((useconds_t)a->delay_ms * 1000);
    mongoc_client_t *c = client_new();
    mongoc_collection_t *coll = mongoc_client_get_collection(c, CS_DB, "raw");
    bson_t *q = BCON_NEW("_id", BCON_INT32(1));
    bson_t *u = BCON_NEW("$set", "{", "a.b", BCON_INT32(5), "}", "$unset", "{", "gone", BCON_INT32(1), "}");
    bson_error_t err;
    bool ok = mongoc_collection_update_one(coll, q, u, NULL, NULL, &err);
    bson_destroy(q);
    bson_destroy(u);
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(c);
    return ok ? p : NULL;
}

START_TEST(test_raw_aggregate_expanded_and_raw_update)
{
    mongoc_client_t *c = client_new();
    fresh_collection(c, "raw");
    /* {aggregate: 1} on the database, showExpandedEvents and showRawUpdateDescription inside $changeStream */
    bson_t *cmd = BCON_NEW("aggregate", BCON_INT32(1), "pipeline", "[", "{", "$changeStream", "{", "showExpandedEvents",
                           BCON_BOOL(true), "showRawUpdateDescription", BCON_BOOL(true), "}", "}", "]", "cursor", "{",
                           "batchSize", BCON_INT32(0), "}");
    bson_t reply;
    bson_error_t err;
    ck_assert_msg(mongoc_client_read_command_with_opts(c, CS_DB, cmd, NULL, NULL, &reply, &err), "aggregate: %s",
                  err.message);
    bson_destroy(cmd);
    raw_cursor rc;
    read_cursor(&reply, &rc, "firstBatch");
    bson_destroy(&reply);
    ck_assert_int_eq(count_docs(&rc.batch), 0);
    ck_assert_str_eq(rc.ns, CS_DB ".$cmd.aggregate");
    ck_assert(rc.id != 0);
    ck_assert(strlen(rc.pbrt) > 16); /* an empty first batch has a post-batch resume token */
    bson_destroy(&rc.batch);
    /* create (implicit, by the insert) and the insert, then an update written while the getMore waits */
    bson_t *doc = BCON_NEW("_id", BCON_INT32(1), "gone", BCON_INT32(1));
    mongoc_collection_t *coll = mongoc_client_get_collection(c, CS_DB, "raw");
    ck_assert(mongoc_collection_insert_one(coll, doc, NULL, NULL, &err));
    bson_destroy(doc);
    int64_t id = rc.id;
    raw_cursor more;
    int seen = 0;
    bool create = false, ins = false;
    double until = now_s() + 30;
    while (seen < 2 && now_s() < until) {
        get_more(c, "$cmd.aggregate", id, 1000, &more);
        for (int i = 0; i < count_docs(&more.batch); i++) {
            bson_t ev;
            ck_assert(batch_doc(&more.batch, i, &ev));
            const char *t = str_at(&ev, "operationType");
            if (!strcmp(t, "create")) {
                create = true;
                ck_assert(has(&ev, "collectionUUID"));
                ck_assert_str_eq(str_at(&ev, "nsType"), "collection");
            } else if (!strcmp(t, "insert")) {
                ins = true;
            }
            seen++;
        }
        bson_destroy(&more.batch);
    }
    ck_assert(create && ins);
    /* the await: a getMore with a long maxTimeMS answers as soon as the update lands */
    writer_arg wa = {getenv("MONGO_URI"), 300};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, late_writer, &wa), 0);
    double t0 = now_s();
    bool got = false;
    while (!got && now_s() < t0 + 60) {
        get_more(c, "$cmd.aggregate", id, 20000, &more);
        if (count_docs(&more.batch) > 0) {
            bson_t ev;
            ck_assert(batch_doc(&more.batch, 0, &ev));
            ck_assert_str_eq(str_at(&ev, "operationType"), "update");
            ck_assert(has(&ev, "rawUpdateDescription.diff"));
            ck_assert(!has(&ev, "updateDescription"));
            got = true;
        }
        bson_destroy(&more.batch);
    }
    void *wr;
    pthread_join(th, &wr);
    ck_assert_ptr_nonnull(wr);
    ck_assert(got);
    ck_assert_msg(now_s() - t0 < 15, "the await was not woken by the write");
    /* killCursors */
    cmd = BCON_NEW("killCursors", "$cmd.aggregate", "cursors", "[", BCON_INT64(id), "]");
    command_ok(c, CS_DB, cmd, &reply);
    ck_assert_int_eq(int_at(&reply, "cursorsKilled.0"), id);
    bson_destroy(&reply);
    cmd = BCON_NEW("getMore", BCON_INT64(id), "collection", "$cmd.aggregate");
    ck_assert(!mongoc_client_read_command_with_opts(c, CS_DB, cmd, NULL, NULL, &reply, &err));
    ck_assert_int_eq(err.code, 43);
    bson_destroy(cmd);
    bson_destroy(&reply);
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(c);
}
END_TEST

START_TEST(test_history_lost_is_286)
{
    mongoc_client_t *c = client_new();
    if (!oplogutil_is_mongosim(c)) {
        mongoc_client_destroy(c);
        SKIP_TEST("needs mongosim's test commands (mongosimTruncateOplog)");
    }
    fresh_collection(c, "lost");
    bson_t *cmd =
        BCON_NEW("aggregate", "lost", "pipeline", "[", "{", "$changeStream", "{", "}", "}", "]", "cursor", "{", "}");
    bson_t reply;
    bson_error_t err;
    ck_assert(mongoc_client_read_command_with_opts(c, CS_DB, cmd, NULL, NULL, &reply, &err));
    bson_destroy(cmd);
    raw_cursor rc;
    read_cursor(&reply, &rc, "firstBatch");
    bson_destroy(&reply);
    bson_destroy(&rc.batch);
    insert(c, "lost", 1);
    insert(c, "lost", 2);
    /* cut the oplog after everything so far: the stream's token is gone */
    bson_t hello;
    command_ok(c, "admin", BCON_NEW("hello", BCON_INT32(1)), &hello);
    bson_iter_t it, ts;
    ck_assert(bson_iter_init(&it, &hello) && bson_iter_find_descendant(&it, "lastWrite.opTime.ts", &ts));
    uint32_t s, i;
    bson_iter_timestamp(&ts, &s, &i);
    bson_destroy(&hello);
    command_ok(c, "admin", BCON_NEW("mongosimTruncateOplog", BCON_INT32(1), "before", BCON_TIMESTAMP(s, i)), NULL);
    cmd = BCON_NEW("aggregate", "lost", "pipeline", "[", "{", "$changeStream", "{", "resumeAfter", "{", "_data",
                   rc.pbrt, "}", "}", "}", "]", "cursor", "{", "}");
    ck_assert(!mongoc_client_read_command_with_opts(c, CS_DB, cmd, NULL, NULL, &reply, &err));
    bson_destroy(cmd);
    ck_assert_int_eq(err.code, 286);
    ck_assert_str_eq(str_at(&reply, "errorLabels.0"), "NonResumableChangeStreamError");
    bson_destroy(&reply);
    mongoc_client_destroy(c);
}
END_TEST

START_TEST(test_driver_resumes_after_network_error)
{
    mongoc_client_t *c = client_new();
    if (!oplogutil_is_mongosim(c)) {
        mongoc_client_destroy(c);
        SKIP_TEST("needs mongosim's test commands (mongosimDropConnections)");
    }
    fresh_collection(c, "nr");
    mongoc_collection_t *coll = mongoc_client_get_collection(c, CS_DB, "nr");
    bson_t *opts = BCON_NEW("maxAwaitTimeMS", BCON_INT32(300));
    mongoc_change_stream_t *cs = mongoc_collection_watch(coll, &empty_pipeline, opts);
    const bson_t *ev;
    ck_assert(!mongoc_change_stream_next(cs, &ev));
    insert(c, "nr", 1);
    ck_assert(next_event(cs, 30, &ev));
    ck_assert_int_eq(int_at(ev, "documentKey._id"), 1);
    /* every connection closed: libmongoc resumes from its cached token (the driver spec's resume), and the stream
     * goes on with the next event, not the one already seen */
    mongoc_client_t *other = client_new();
    command_ok(other, "admin", BCON_NEW("mongosimDropConnections", BCON_INT32(1)), NULL);
    mongoc_client_destroy(other);
    insert(c, "nr", 2);
    insert(c, "nr", 3);
    ck_assert(next_event(cs, 30, &ev));
    ck_assert_int_eq(int_at(ev, "documentKey._id"), 2);
    ck_assert(next_event(cs, 30, &ev));
    ck_assert_int_eq(int_at(ev, "documentKey._id"), 3);
    mongoc_change_stream_destroy(cs);
    bson_destroy(opts);
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(c);
}
END_TEST

START_TEST(test_rename_invalidates_collection_stream)
{
    mongoc_client_t *c = client_new();
    fresh_collection(c, "rn");
    fresh_collection(c, "rn2");
    insert(c, "rn", 1);
    bson_t *cmd = BCON_NEW("aggregate", "rn", "pipeline", "[", "{", "$changeStream", "{", "showExpandedEvents",
                           BCON_BOOL(true), "}", "}", "]", "cursor", "{", "}");
    bson_t reply;
    bson_error_t err;
    ck_assert_msg(mongoc_client_read_command_with_opts(c, CS_DB, cmd, NULL, NULL, &reply, &err), "%s", err.message);
    bson_destroy(cmd);
    raw_cursor rc;
    read_cursor(&reply, &rc, "firstBatch");
    bson_destroy(&reply);
    bson_destroy(&rc.batch);
    ck_assert_str_eq(rc.ns, CS_DB ".rn");
    command_ok(c, "admin", BCON_NEW("renameCollection", CS_DB ".rn", "to", CS_DB ".rn2", "dropTarget", BCON_BOOL(true)),
               NULL);
    raw_cursor more;
    bool renamed = false, invalidated = false;
    double until = now_s() + 30;
    int64_t id = rc.id;
    while (!invalidated && now_s() < until) {
        get_more(c, "rn", id, 1000, &more);
        for (int i = 0; i < count_docs(&more.batch); i++) {
            bson_t ev;
            ck_assert(batch_doc(&more.batch, i, &ev));
            const char *t = str_at(&ev, "operationType");
            if (!strcmp(t, "rename")) {
                renamed = true;
                ck_assert_str_eq(str_at(&ev, "to.coll"), "rn2");
                ck_assert_str_eq(str_at(&ev, "operationDescription.to.coll"), "rn2");
            } else if (!strcmp(t, "invalidate")) {
                invalidated = true;
                ck_assert_int_eq(more.id, 0); /* the cursor closes with the invalidate */
            }
        }
        bson_destroy(&more.batch);
        id = more.id;
        if (id == 0)
            break;
    }
    ck_assert(renamed && invalidated);
    mongoc_client_destroy(c);
}
END_TEST

/* An event over 16 MB: an update of a 9 MB field, looked up (fullDocument 9 MB + updatedFields 9 MB). Without
 * $changeStreamSplitLargeEvent the getMore fails with BSONObjectTooLarge; with it, the fragments come one per batch
 * and together hold every field of the event. */
static void big_update(mongoc_client_t *c, const char *coll_name, char fill)
{
    size_t n = 9 * 1024 * 1024;
    char *big = malloc(n + 1);
    ck_assert_ptr_nonnull(big);
    memset(big, fill, n);
    big[n] = 0;
    mongoc_collection_t *coll = mongoc_client_get_collection(c, CS_DB, coll_name);
    bson_t *q = BCON_NEW("_id", BCON_INT32(1));
    bson_t *u = bson_new(), set;
    BSON_APPEND_DOCUMENT_BEGIN(u, "$set", &set);
    BSON_APPEND_UTF8(&set, "big", big);
    bson_append_document_end(u, &set);
    bson_t *opts = BCON_NEW("upsert", BCON_BOOL(true));
    bson_error_t err;
    ck_assert_msg(mongoc_collection_update_one(coll, q, u, opts, NULL, &err), "%s", err.message);
    bson_destroy(opts);
    bson_destroy(q);
    bson_destroy(u);
    free(big);
    mongoc_collection_destroy(coll);
}

static int64_t open_raw(mongoc_client_t *c, const char *coll, bool split)
{
    bson_t *cmd = BCON_NEW("aggregate", coll, "pipeline", "[", "{", "$changeStream", "{", "fullDocument",
                           "updateLookup", "}", "}", "]", "cursor", "{", "}");
    if (split) {
        bson_destroy(cmd);
        cmd = BCON_NEW("aggregate", coll, "pipeline", "[", "{", "$changeStream", "{", "fullDocument", "updateLookup",
                       "}", "}", "{", "$changeStreamSplitLargeEvent", "{", "}", "}", "]", "cursor", "{", "}");
    }
    bson_t reply;
    bson_error_t err;
    ck_assert_msg(mongoc_client_read_command_with_opts(c, CS_DB, cmd, NULL, NULL, &reply, &err), "%s", err.message);
    bson_destroy(cmd);
    raw_cursor rc;
    read_cursor(&reply, &rc, "firstBatch");
    bson_destroy(&reply);
    bson_destroy(&rc.batch);
    return rc.id;
}

START_TEST(test_large_event_over_the_wire)
{
    mongoc_client_t *c = client_new();
    fresh_collection(c, "big");
    big_update(c, "big", 'a'); /* the document exists before the streams open */
    int64_t plain = open_raw(c, "big", false), split = open_raw(c, "big", true);
    big_update(c, "big", 'b');
    /* without the split stage */
    bson_t *cmd = BCON_NEW("getMore", BCON_INT64(plain), "collection", "big", "maxTimeMS", BCON_INT64(5000));
    bson_t reply;
    bson_error_t err;
    ck_assert(!mongoc_client_read_command_with_opts(c, CS_DB, cmd, NULL, NULL, &reply, &err));
    ck_assert_int_eq(err.code, 10334);
    bson_destroy(cmd);
    bson_destroy(&reply);
    /* with it */
    int got = 0, of = 0;
    bool has_full = false, has_ud = false;
    double until = now_s() + 60;
    int64_t id = split;
    while ((of == 0 || got < of) && now_s() < until) {
        raw_cursor more;
        get_more(c, "big", id, 2000, &more);
        for (int i = 0; i < count_docs(&more.batch); i++) {
            bson_t ev;
            ck_assert(batch_doc(&more.batch, i, &ev));
            ck_assert_uint_le(ev.len, 16 * 1024 * 1024 + 8 * 1024);
            ck_assert_int_eq(int_at(&ev, "splitEvent.fragment"), got + 1);
            of = (int)int_at(&ev, "splitEvent.of");
            has_full |= has(&ev, "fullDocument.big");
            has_ud |= has(&ev, "updateDescription.updatedFields.big");
            got++;
        }
        bson_destroy(&more.batch);
    }
    ck_assert_int_eq(of, 2);
    ck_assert_int_eq(got, 2);
    ck_assert(has_full && has_ud);
    mongoc_client_destroy(c);
}
END_TEST

Suite *mongosim_changestream_it_suite(void)
{
    Suite *s = suite_create("mongosim_changestream_it");
    TCase *tc = tcase_create("wire");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_collection_watch_and_resume);
    tcase_add_test(tc, test_client_watch_transaction);
    tcase_add_test(tc, test_raw_aggregate_expanded_and_raw_update);
    tcase_add_test(tc, test_history_lost_is_286);
    tcase_add_test(tc, test_driver_resumes_after_network_error);
    tcase_add_test(tc, test_rename_invalidates_collection_stream);
    tcase_add_test(tc, test_large_event_over_the_wire);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_stream_source.c — the change-stream reader thread (source/stream/stream.h) against the server in MONGO_URI: a
 * real replica set, or a mongosim that serves change streams. A server that refuses a cluster-wide $changeStream
 * makes every case skip, with that reason (tests/lib/skip.h).
 *
 * Each case starts a reader on its own queue and pops what it pushes: inserts, updates and deletes after the start
 * position as ops equal to the oplog's, each entry carrying the resume token of its event; a transaction's events as
 * one atomic entry at its commit time; a restart from an entry's token reading what follows it and nothing before;
 * QUEUE_IDLE once the stream is drained. The cases look only at their own database (database strm_*).
 */
#include <check.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/nsfilter.h"
#include "core/queue.h"
#include "source/decode.h"
#include "source/oplog/reader.h"
#include "source/stream/event.h"
#include "source/stream/stream.h"

#include "../lib/oplogutil.h"
#include "../lib/skip.h"

Suite *stream_source_suite(void);

#define AWAIT_MS 300

static const char *mongo_uri(void)
{
    const char *uri = getenv("MONGO_URI");
    ck_assert_msg(uri && *uri, "MONGO_URI is not set: the integration harness (tests/integration/run.sh) sets it");
    return uri;
}

static mongoc_client_t *client_new(void)
{
    bson_error_t err;
    mongoc_init();
    mongoc_uri_t *uri = mongoc_uri_new_with_error(mongo_uri(), &err);
    ck_assert_msg(uri, "bad MONGO_URI: %s", err.message);
    mongoc_uri_set_option_as_int32(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS, 15000);
    mongoc_client_t *c = mongoc_client_new_from_uri(uri);
    mongoc_uri_destroy(uri);
    ck_assert_ptr_nonnull(c);
    return c;
}

/* Whether the server opens a cluster-wide change stream; *at gets the cluster time to start after (the operationTime
 * of the newest write), why the server's refusal. */
static bool have_streams(mongoc_client_t *c, op_pos *at, char *why, size_t whylen)
{
    bson_t reply;
    bson_error_t err;
    bson_t *cmd =
        BCON_NEW("aggregate", BCON_INT32(1), "pipeline", "[", "{", "$changeStream", "{", "allChangesForCluster",
                 BCON_BOOL(true), "}", "}", "]", "cursor", "{", "batchSize", BCON_INT32(0), "}");
    bool ok = mongoc_client_command_simple(c, "admin", cmd, NULL, &reply, &err);
    bson_destroy(cmd);
    bson_destroy(&reply);
    op_pos p = {0, 0, -1};
    if (ok) { /* where the oplog ends now: hello's lastWrite.opTime.ts */
        bson_iter_t it, t;
        bson_t *hello = BCON_NEW("hello", BCON_INT32(1));
        ck_assert(mongoc_client_command_simple(c, "admin", hello, NULL, &reply, &err));
        bson_destroy(hello);
        if (bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "lastWrite.opTime.ts", &t) &&
            BSON_ITER_HOLDS_TIMESTAMP(&t))
            bson_iter_timestamp(&t, &p.secs, &p.inc);
        bson_destroy(&reply);
    }
    if (!ok) {
        snprintf(why, whylen, "%s", err.message);
        return false;
    }
    ck_assert_msg(p.secs > 0, "hello has no lastWrite.opTime.ts");
    *at = p;
    return true;
}

/* In a case: skips it unless the server has change streams, else sets `at`. */
#define NEED_STREAMS(c, at)                                                                                            \
    do {                                                                                                               \
        char why_[512];                                                                                                \
        if (!have_streams(c, &at, why_, sizeof why_)) {                                                                \
            mongoc_client_destroy(c);                                                                                  \
            SKIP_TEST("the server has no cluster-wide change stream (%s)", why_);                                      \
        }                                                                                                              \
    } while (0)

static void drop_db(mongoc_client_t *c, const char *db)
{
    mongoc_database_t *d = mongoc_client_get_database(c, db);
    mongoc_database_drop(d, NULL);
    mongoc_database_destroy(d);
}

static void run(mongoc_client_t *c, const char *db, const char *json)
{
    bson_error_t err;
    bson_t reply;
    bson_t *cmd = bson_new_from_json((const uint8_t *)json, -1, &err);
    ck_assert_msg(cmd, "%s: %s", json, err.message);
    bool ok = mongoc_client_command_simple(c, db, cmd, NULL, &reply, &err);
    bson_destroy(cmd);
    bson_destroy(&reply);
    ck_assert_msg(ok, "%s: %s", json, err.message);
}

static stream_reader *start_mode(queue *q, const op_pos *at, const uint8_t *token, uint32_t token_len,
                                 stream_updates mode)
{
    char err[256];
    stream_config cfg;
    stream_config_init(&cfg);
    cfg.uri = mongo_uri();
    cfg.start = *at;
    cfg.token = token;
    cfg.token_len = token_len;
    cfg.await_ms = AWAIT_MS;
    cfg.updates = mode;
    stream_reader *r = stream_start(&cfg, q, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    return r;
}

static stream_reader *start(queue *q, const op_pos *at, const uint8_t *token, uint32_t token_len)
{
    return start_mode(q, at, token, token_len, STREAM_UPDATES_AUTO);
}

/* The next entry with a data op of database db (others' entries, the creates of collections that a first insert
 * makes, and IDLE items are passed over), within a generous time. */
static op_entry *next_entry(queue *q, const char *db)
{
    time_t until = time(NULL) + 60;
    while (time(NULL) < until) {
        queue_item it;
        if (!queue_pop(q, &it)) {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        ck_assert_msg(it.type != QUEUE_END, "the reader stopped: %s", it.message);
        if (it.type == QUEUE_ENTRY) {
            op_entry *e = it.entry;
            for (size_t i = 0; i < e->n; i++)
                if (e->ops[i].db && strcmp(e->ops[i].db, db) == 0 && e->ops[i].kind != OP_CREATE)
                    return e;
        }
        queue_item_clear(&it);
        queue_release(q); /* as the apply loop does once it has written what it popped */
    }
    ck_abort_msg("no entry of %s within 60 s", db);
    return NULL;
}

static void expect_token(const op_entry *e)
{
    stream_token t;
    ck_assert_ptr_nonnull(e->token);
    ck_assert(stream_token_decode(e->token, e->token_len, &t));
    if (t.keystring) {
        ck_assert_uint_eq(t.secs, e->pos.secs);
        ck_assert_uint_eq(t.inc, e->pos.inc);
    }
}

/* Inserts, updates (a $v:2 diff, a replacement) and deletes, with updates read as `mode` says. */
static void crud_entries(stream_updates mode)
{
    mongoc_client_t *c = client_new();
    op_pos at;
    NEED_STREAMS(c, at);
    drop_db(c, "strm_crud");
    queue *q = queue_new(1000, 0);
    stream_reader *r = start_mode(q, &at, NULL, 0, mode);
    run(c, "strm_crud", "{\"insert\": \"c\", \"documents\": [{\"_id\": 1, \"a\": {\"k\": 1}}]}");
    run(c, "strm_crud", "{\"update\": \"c\", \"updates\": [{\"q\": {\"_id\": 1}, \"u\": {\"$set\": {\"a.b\": 2}}}]}");
    run(c, "strm_crud", "{\"update\": \"c\", \"updates\": [{\"q\": {\"_id\": 1}, \"u\": {\"x\": 5}}]}");
    run(c, "strm_crud", "{\"delete\": \"c\", \"deletes\": [{\"q\": {\"_id\": 1}, \"limit\": 1}]}");
    /* The last event's group closes when something later shows up: one more write elsewhere. */
    run(c, "strm_other", "{\"insert\": \"c\", \"documents\": [{\"_id\": 1}]}");
    op_kind kinds[] = {OP_INSERT, OP_UPDATE, OP_UPDATE, OP_DELETE};
    op_update_form forms[] = {OP_FORM_NONE, OP_FORM_NONE, OP_FORM_REPLACE, OP_FORM_NONE};
    op_pos last = at;
    for (int i = 0; i < 4; i++) {
        op_entry *e = next_entry(q, "strm_crud");
        ck_assert_uint_eq(e->n, 1);
        ck_assert_msg(e->ops[0].kind == kinds[i], "entry %d: %s", i, op_kind_name(e->ops[0].kind));
        if (forms[i] != OP_FORM_NONE)
            ck_assert_int_eq(e->ops[0].form, forms[i]);
        if (i == 1) /* the $v:2 diff, raw or rebuilt from the description */
            ck_assert_int_eq(e->ops[0].form, OP_FORM_DIFF);
        ck_assert_int_gt(op_pos_cmp(&e->pos, &last), 0);
        expect_token(e);
        last = e->pos;
        op_entry_free(e);
    }
    reader_stats st;
    stream_get_stats(r, &st);
    ck_assert_uint_ge(st.entries, 4);
    stream_free(r);
    queue_free(q);
    drop_db(c, "strm_crud");
    drop_db(c, "strm_other");
    mongoc_client_destroy(c);
}

START_TEST(test_crud_entries)
{
    crud_entries(STREAM_UPDATES_AUTO);
}
END_TEST

/* The same with updates rebuilt from their updateDescription. */
START_TEST(test_crud_entries_description)
{
    crud_entries(STREAM_UPDATES_DESCRIPTION);
}
END_TEST

START_TEST(test_transaction_one_entry)
{
    mongoc_client_t *c = client_new();
    op_pos at;
    NEED_STREAMS(c, at);
    drop_db(c, "strm_txn");
    run(c, "strm_txn", "{\"create\": \"c\"}");
    queue *q = queue_new(1000, 0);
    stream_reader *r = start(q, &at, NULL, 0);
    bson_error_t err;
    mongoc_client_session_t *s = mongoc_client_start_session(c, NULL, &err);
    ck_assert_msg(s, "%s", err.message);
    mongoc_collection_t *col = mongoc_client_get_collection(c, "strm_txn", "c");
    ck_assert_msg(mongoc_client_session_start_transaction(s, NULL, &err), "%s", err.message);
    bson_t opts = BSON_INITIALIZER;
    ck_assert(mongoc_client_session_append(s, &opts, &err));
    for (int i = 0; i < 3; i++) {
        bson_t *doc = BCON_NEW("_id", BCON_INT32(i));
        ck_assert_msg(mongoc_collection_insert_one(col, doc, &opts, NULL, &err), "%s", err.message);
        bson_destroy(doc);
    }
    bson_t reply;
    ck_assert_msg(mongoc_client_session_commit_transaction(s, &reply, &err), "%s", err.message);
    bson_destroy(&reply);
    bson_destroy(&opts);
    mongoc_collection_destroy(col);
    mongoc_client_session_destroy(s);
    run(c, "strm_other", "{\"insert\": \"c\", \"documents\": [{\"_id\": 2}]}");
    op_entry *e = next_entry(q, "strm_txn");
    ck_assert_uint_eq(e->n, 3);
    ck_assert(e->atomic && !e->more);
    for (size_t i = 0; i < 3; i++)
        ck_assert_int_eq(e->ops[i].kind, OP_INSERT);
    expect_token(e);
    op_entry_free(e);
    stream_free(r);
    queue_free(q);
    drop_db(c, "strm_txn");
    drop_db(c, "strm_other");
    mongoc_client_destroy(c);
}
END_TEST

START_TEST(test_resume_from_token)
{
    mongoc_client_t *c = client_new();
    op_pos at;
    NEED_STREAMS(c, at);
    drop_db(c, "strm_res");
    queue *q = queue_new(1000, 0);
    stream_reader *r = start(q, &at, NULL, 0);
    for (int i = 1; i <= 3; i++) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "{\"insert\": \"c\", \"documents\": [{\"_id\": %d}]}", i);
        run(c, "strm_res", cmd);
    }
    run(c, "strm_other", "{\"insert\": \"c\", \"documents\": [{\"_id\": 3}]}");
    op_entry *first = next_entry(q, "strm_res");
    ck_assert_int_eq(first->ops[0].id.value.v_int32, 1);
    stream_free(r);
    queue_free(q);
    /* From the first entry's token: the second and third, nothing before. */
    q = queue_new(1000, 0);
    r = start(q, &first->pos, first->token, first->token_len);
    for (int want = 2; want <= 3; want++) {
        op_entry *e = next_entry(q, "strm_res");
        ck_assert_int_eq(e->ops[0].kind, OP_INSERT);
        ck_assert_int_eq(e->ops[0].id.value.v_int32, want);
        op_entry_free(e);
    }
    op_entry_free(first);
    stream_free(r);
    queue_free(q);
    drop_db(c, "strm_res");
    drop_db(c, "strm_other");
    mongoc_client_destroy(c);
}
END_TEST

START_TEST(test_idle)
{
    mongoc_client_t *c = client_new();
    op_pos at;
    NEED_STREAMS(c, at);
    queue *q = queue_new(1000, 0);
    stream_reader *r = start(q, &at, NULL, 0);
    time_t until = time(NULL) + 60;
    bool idle = false;
    while (!idle && time(NULL) < until) {
        queue_item it;
        if (queue_pop(q, &it)) {
            ck_assert_msg(it.type != QUEUE_END, "the reader stopped: %s", it.message);
            idle = it.type == QUEUE_IDLE;
            queue_item_clear(&it);
            queue_release(q); /* as the apply loop does once it has written what it popped */
        } else {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    ck_assert_msg(idle, "no QUEUE_IDLE within 60 s");
    ck_assert(!stream_finished(r));
    stream_free(r);
    queue_free(q);
    mongoc_client_destroy(c);
}
END_TEST

/* Pops until the reader's QUEUE_END; returns its reason and keeps its message. */
static queue_end_reason wait_end(queue *q, char *msg, size_t len)
{
    time_t until = time(NULL) + 60;
    while (time(NULL) < until) {
        queue_item it;
        if (!queue_pop(q, &it)) {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        if (it.type == QUEUE_END) {
            queue_end_reason why = it.reason;
            snprintf(msg, len, "%s", it.message ? it.message : "");
            queue_item_clear(&it);
            queue_release(q); /* as the apply loop does once it has written what it popped */
            return why;
        }
        queue_item_clear(&it);
        queue_release(q); /* as the apply loop does once it has written what it popped */
    }
    ck_abort_msg("no QUEUE_END within 60 s");
    return QUEUE_END_DONE;
}

/* A start before the oldest entry the server holds (the history is gone): resume lost, naming --reimport. */
START_TEST(test_history_lost)
{
    mongoc_client_t *c = client_new();
    op_pos at;
    NEED_STREAMS(c, at);
    op_pos old = {1, 0, -1};
    char msg[1024];
    queue *q = queue_new(1000, 0);
    stream_reader *r = start(q, &old, NULL, 0);
    ck_assert_int_eq(wait_end(q, msg, sizeof msg), QUEUE_END_RESUME_LOST);
    ck_assert_msg(strstr(msg, "--reimport") != NULL, "%s", msg);
    stream_free(r);
    queue_free(q);
    mongoc_client_destroy(c);
}
END_TEST

/* A token whose event the stream cannot find (error 280): the reader starts again at the token's time, so the event
 * at that time comes again, then what followed. */
START_TEST(test_token_not_found_restarts_at_its_time)
{
    mongoc_client_t *c = client_new();
    op_pos at;
    NEED_STREAMS(c, at);
    drop_db(c, "strm_280");
    queue *q = queue_new(1000, 0);
    stream_reader *r = start(q, &at, NULL, 0);
    run(c, "strm_280", "{\"insert\": \"c\", \"documents\": [{\"_id\": 1}]}");
    run(c, "strm_280", "{\"insert\": \"c\", \"documents\": [{\"_id\": 2}]}");
    run(c, "strm_other", "{\"insert\": \"c\", \"documents\": [{\"_id\": 4}]}");
    op_entry *first = next_entry(q, "strm_280");
    ck_assert_int_eq(first->ops[0].id.value.v_int32, 1);
    stream_free(r);
    queue_free(q);
    /* The same token with another transaction index (3): no event has it. */
    bson_t tok;
    bson_iter_t it;
    ck_assert(bson_init_static(&tok, first->token, first->token_len));
    ck_assert(bson_iter_init_find(&it, &tok, "_data") && BSON_ITER_HOLDS_UTF8(&it));
    const char *hex = bson_iter_utf8(&it, NULL);
    const char *idx = strstr(hex, "2C0100");
    ck_assert_ptr_nonnull(idx);
    ck_assert(strncmp(idx + 6, "29", 2) == 0);
    char forged[1024];
    snprintf(forged, sizeof forged, "%.*s2B06%s", (int)(idx + 6 - hex), hex, idx + 8);
    bson_t *ft = BCON_NEW("_data", BCON_UTF8(forged));
    q = queue_new(1000, 0);
    r = start(q, &first->pos, bson_get_data(ft), ft->len);
    for (int want = 1; want <= 2; want++) {
        op_entry *e = next_entry(q, "strm_280");
        ck_assert_int_eq(e->ops[0].id.value.v_int32, want);
        op_entry_free(e);
    }
    bson_destroy(ft);
    op_entry_free(first);
    stream_free(r);
    queue_free(q);
    drop_db(c, "strm_280");
    drop_db(c, "strm_other");
    mongoc_client_destroy(c);
}
END_TEST

/* A quiet stream whose post-batch resume token moves (noops written to the oplog, as the periodic noop writer does)
 * hands on a noop entry with that token, so its committed position moves too. The entry sits one tick before the
 * token's time (a high-water mark at T resumes at the events of T): two notes, so that it is past the start. */
START_TEST(test_quiet_stream_position_moves)
{
    mongoc_client_t *c = client_new();
    op_pos at;
    NEED_STREAMS(c, at);
    queue *q = queue_new(1000, 0);
    stream_reader *r = start(q, &at, NULL, 0);
    run(c, "admin", "{\"appendOplogNote\": 1, \"data\": {\"msg\": \"oplog2pg test\"}}");
    run(c, "admin", "{\"appendOplogNote\": 1, \"data\": {\"msg\": \"oplog2pg test\"}}");
    time_t until = time(NULL) + 60;
    op_entry *mark = NULL;
    while (!mark && time(NULL) < until) {
        queue_item it;
        if (!queue_pop(q, &it)) {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        ck_assert_msg(it.type != QUEUE_END, "the reader stopped: %s", it.message);
        if (it.type == QUEUE_ENTRY && it.entry->n == 1 && it.entry->ops[0].kind == OP_NOOP && it.entry->ops[0].reason &&
            strcmp(it.entry->ops[0].reason, "change stream position") == 0) {
            mark = it.entry;
            it.entry = NULL;
        }
        queue_item_clear(&it);
        queue_release(q); /* as the apply loop does once it has written what it popped */
    }
    ck_assert_msg(mark != NULL, "no position noop within 60 s");
    ck_assert_ptr_nonnull(mark->token);
    ck_assert_int_gt(op_pos_cmp(&mark->pos, &at), 0);
    stream_token t;
    ck_assert(stream_token_decode(mark->token, mark->token_len, &t));
    ck_assert(t.keystring && t.type == STREAM_TOKEN_HWM);
    stream_free(r);
    queue_free(q);
    /* A restart from that token (what a quiet daemon commits) reads what comes next. */
    drop_db(c, "strm_quiet");
    q = queue_new(1000, 0);
    r = start(q, &mark->pos, mark->token, mark->token_len);
    run(c, "strm_quiet", "{\"insert\": \"c\", \"documents\": [{\"_id\": 8}]}");
    run(c, "strm_other", "{\"insert\": \"c\", \"documents\": [{\"_id\": 8}]}");
    op_entry *e = next_entry(q, "strm_quiet");
    ck_assert_int_eq(e->ops[0].kind, OP_INSERT);
    ck_assert_int_gt(op_pos_cmp(&e->pos, &mark->pos), 0);
    op_entry_free(e);
    op_entry_free(mark);
    stream_free(r);
    queue_free(q);
    drop_db(c, "strm_quiet");
    drop_db(c, "strm_other");
    mongoc_client_destroy(c);
}
END_TEST

/* A transaction of more than STREAM_PART_OPS events: parts with `more` at one position, the last one alone carrying
 * the token, the ops numbered across them. */
START_TEST(test_large_transaction_in_parts)
{
    mongoc_client_t *c = client_new();
    op_pos at;
    NEED_STREAMS(c, at);
    drop_db(c, "strm_big");
    run(c, "strm_big", "{\"create\": \"c\"}");
    queue *q = queue_new(100000, 0);
    stream_reader *r = start(q, &at, NULL, 0);
    bson_error_t err;
    mongoc_client_session_t *s = mongoc_client_start_session(c, NULL, &err);
    ck_assert_msg(s, "%s", err.message);
    mongoc_collection_t *col = mongoc_client_get_collection(c, "strm_big", "c");
    ck_assert_msg(mongoc_client_session_start_transaction(s, NULL, &err), "%s", err.message);
    bson_t opts = BSON_INITIALIZER;
    ck_assert(mongoc_client_session_append(s, &opts, &err));
    int total = STREAM_PART_OPS + 7;
    for (int i = 0; i < total; i++) {
        bson_t *doc = BCON_NEW("_id", BCON_INT32(i));
        ck_assert_msg(mongoc_collection_insert_one(col, doc, &opts, NULL, &err), "%s", err.message);
        bson_destroy(doc);
    }
    bson_t reply;
    ck_assert_msg(mongoc_client_session_commit_transaction(s, &reply, &err), "%s", err.message);
    bson_destroy(&reply);
    bson_destroy(&opts);
    mongoc_collection_destroy(col);
    mongoc_client_session_destroy(s);
    run(c, "strm_other", "{\"insert\": \"c\", \"documents\": [{\"_id\": 5}]}");
    int seen = 0, parts = 0;
    op_pos pos = {0, 0, -1};
    while (seen < total) {
        op_entry *e = next_entry(q, "strm_big");
        if (parts == 0)
            pos = e->pos;
        ck_assert_int_eq(op_pos_cmp(&e->pos, &pos), 0);
        ck_assert(e->atomic);
        for (size_t i = 0; i < e->n; i++) {
            ck_assert_int_eq(e->ops[i].kind, OP_INSERT);
            ck_assert_uint_eq(e->ops[i].index, (uint32_t)(seen + (int)i));
        }
        seen += (int)e->n;
        parts++;
        ck_assert(e->more == (seen < total));
        ck_assert(e->more ? e->token == NULL : e->token != NULL);
        op_entry_free(e);
    }
    ck_assert_int_eq(seen, total);
    ck_assert_int_eq(parts, 2);
    stream_free(r);
    queue_free(q);
    drop_db(c, "strm_big");
    drop_db(c, "strm_other");
    mongoc_client_destroy(c);
}
END_TEST

/* An insert whose event is larger than 16 MB reaches the reader in fragments ($changeStreamSplitLargeEvent) and is
 * handed on whole. (A server without the split stage sends this one whole: it is under the 16 MB + 16 KB a reply's
 * document may hold; a larger one would stop the reader, saying so, the case this test then skips.) */
START_TEST(test_large_event_split)
{
    mongoc_client_t *c = client_new();
    op_pos at;
    NEED_STREAMS(c, at);
    drop_db(c, "strm_huge");
    queue *q = queue_new(1000, 0);
    stream_reader *r = start(q, &at, NULL, 0);
    /* A document just under 16 MB whose event is over it (its key comes twice more: documentKey and the token), while
     * no one field of the event is too large to go into a fragment of its own (error 7182803 otherwise). */
    char id[1001];
    memset(id, 'k', 1000);
    id[1000] = '\0';
    size_t n = 16 * 1024 * 1024 - 2200;
    char *big = malloc(n + 1);
    ck_assert_ptr_nonnull(big);
    memset(big, 'x', n);
    big[n] = '\0';
    bson_t *doc = BCON_NEW("_id", BCON_UTF8(id), "big", BCON_UTF8(big));
    free(big);
    mongoc_collection_t *col = mongoc_client_get_collection(c, "strm_huge", "c");
    bson_error_t err;
    ck_assert_msg(mongoc_collection_insert_one(col, doc, NULL, NULL, &err), "%s", err.message);
    uint32_t doc_len = doc->len;
    bson_destroy(doc);
    mongoc_collection_destroy(col);
    run(c, "strm_other", "{\"insert\": \"c\", \"documents\": [{\"_id\": 6}]}");
    time_t until = time(NULL) + 60;
    bool got = false;
    while (!got && time(NULL) < until) {
        queue_item it;
        if (!queue_pop(q, &it)) {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        if (it.type == QUEUE_END) {
            ck_assert_msg(it.reason == QUEUE_END_UNSUPPORTED && strstr(it.message, "16 MB") &&
                              strstr(it.message, "refused"),
                          "%s", it.message);
            queue_item_clear(&it);
            queue_release(q); /* as the apply loop does once it has written what it popped */
            stream_free(r);
            queue_free(q);
            drop_db(c, "strm_huge");
            drop_db(c, "strm_other");
            mongoc_client_destroy(c);
            SKIP_TEST("the server does not split large events: the reader stopped, as it should");
        }
        if (it.type == QUEUE_ENTRY && it.entry->ops[0].db && strcmp(it.entry->ops[0].db, "strm_huge") == 0 &&
            it.entry->ops[0].kind == OP_INSERT) {
            ck_assert_uint_eq(it.entry->n, 1);
            /* rendered: the document's text is there, of about its size */
            ck_assert_ptr_nonnull(it.entry->ops[0].json);
            ck_assert_uint_ge(it.entry->ops[0].json_len, doc_len - 100);
            ck_assert_ptr_nonnull(it.entry->token);
            got = true;
        }
        queue_item_clear(&it);
        queue_release(q); /* as the apply loop does once it has written what it popped */
    }
    ck_assert_msg(got, "the large insert was not handed on within 60 s");
    stream_free(r);
    queue_free(q);
    drop_db(c, "strm_huge");
    drop_db(c, "strm_other");
    mongoc_client_destroy(c);
}
END_TEST

/* ---- the same changes through both sources ---- */

#define EQ_MAX 64

typedef struct eq_list {
    op_entry *e[EQ_MAX];
    size_t n;
} eq_list;

/* Collects the entries holding a data or DDL op of db (noops dropped from each: the oplog has noops a stream does
 * not show) until one holds an op of kind `last`. */
static void collect(queue *q, const char *db, op_kind last, eq_list *out)
{
    time_t until = time(NULL) + 60;
    out->n = 0;
    while (time(NULL) < until) {
        queue_item it;
        if (!queue_pop(q, &it)) {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        ck_assert_msg(it.type != QUEUE_END, "the reader stopped: %s", it.message);
        bool mine = false, done = false;
        if (it.type == QUEUE_ENTRY)
            for (size_t i = 0; i < it.entry->n; i++) {
                const op *o = &it.entry->ops[i];
                if (o->kind != OP_NOOP && o->db && strcmp(o->db, db) == 0) {
                    mine = true;
                    done |= o->kind == last;
                }
            }
        if (mine) {
            ck_assert(out->n < EQ_MAX);
            out->e[out->n++] = it.entry;
            it.entry = NULL;
        }
        queue_item_clear(&it);
        queue_release(q); /* as the apply loop does once it has written what it popped */
        if (done)
            return;
    }
    ck_abort_msg("the workload's last op did not come within 60 s");
}

static bool bytes_eq(const uint8_t *a, uint32_t al, const uint8_t *b, uint32_t bl)
{
    return al == bl && (al == 0 || memcmp(a, b, al) == 0);
}

/* The oplog reader and the change-stream reader from the same point over the same workload (CRUD of every update
 * shape, a transaction, a rename, drops): the same entries, grouped the same, with equal ops (documents byte for
 * byte; with updates read from their description, a diff rebuilt has the same form but may order or name its
 * sections otherwise: `u` for `i`). */
static void same_ops_as_oplog(stream_updates mode, unsigned flags)
{
    mongoc_client_t *c = client_new();
    op_pos at;
    NEED_STREAMS(c, at);
    drop_db(c, "strm_eq");
    NEED_STREAMS(c, at); /* after the drop: both readers start past it */
    queue *qo = queue_new(10000, 0), *qs = queue_new(10000, 0);
    char err[256];
    reader_config rc;
    reader_config_init(&rc);
    rc.uri = mongo_uri();
    rc.start = at;
    rc.await_ms = AWAIT_MS;
    rc.decode_flags = flags;
    reader *ro = reader_start(&rc, qo, err, sizeof err);
    ck_assert_msg(ro != NULL, "%s", err);
    stream_config sc;
    stream_config_init(&sc);
    sc.uri = mongo_uri();
    sc.start = at;
    sc.await_ms = AWAIT_MS;
    sc.updates = mode;
    sc.decode_flags = flags;
    stream_reader *rs = stream_start(&sc, qs, err, sizeof err);
    ck_assert_msg(rs != NULL, "%s", err);

    run(c, "strm_eq",
        "{\"insert\": \"c\", \"documents\": [{\"_id\": 1, \"a\": {\"b\": 1}, \"arr\": [1, 2, 3]}, "
        "{\"_id\": 2, \"s\": \"x\"}]}");
    run(c, "strm_eq",
        "{\"update\": \"c\", \"updates\": [{\"q\": {\"_id\": 1}, \"u\": {\"$set\": {\"a.b\": 2, "
        "\"arr.1\": 9}, \"$unset\": {\"zz\": 1}}}]}");
    run(c, "strm_eq", "{\"update\": \"c\", \"updates\": [{\"q\": {\"_id\": 1}, \"u\": {\"$pop\": {\"arr\": 1}}}]}");
    run(c, "strm_eq", "{\"update\": \"c\", \"updates\": [{\"q\": {\"_id\": 2}, \"u\": {\"t\": true}}]}");
    run(c, "strm_eq", "{\"delete\": \"c\", \"deletes\": [{\"q\": {\"_id\": 2}, \"limit\": 1}]}");
    bson_error_t berr;
    mongoc_client_session_t *ss = mongoc_client_start_session(c, NULL, &berr);
    ck_assert_msg(ss, "%s", berr.message);
    mongoc_collection_t *col = mongoc_client_get_collection(c, "strm_eq", "c");
    ck_assert_msg(mongoc_client_session_start_transaction(ss, NULL, &berr), "%s", berr.message);
    bson_t opts = BSON_INITIALIZER;
    ck_assert(mongoc_client_session_append(ss, &opts, &berr));
    bson_t *d3 = BCON_NEW("_id", BCON_INT32(3)), *sel = BCON_NEW("_id", BCON_INT32(1)),
           *upd = BCON_NEW("$inc", "{", "n", BCON_INT32(1), "}");
    ck_assert_msg(mongoc_collection_insert_one(col, d3, &opts, NULL, &berr), "%s", berr.message);
    ck_assert_msg(mongoc_collection_update_one(col, sel, upd, &opts, NULL, &berr), "%s", berr.message);
    bson_t reply;
    ck_assert_msg(mongoc_client_session_commit_transaction(ss, &reply, &berr), "%s", berr.message);
    bson_destroy(&reply);
    bson_destroy(d3);
    bson_destroy(sel);
    bson_destroy(upd);
    bson_destroy(&opts);
    mongoc_collection_destroy(col);
    mongoc_client_session_destroy(ss);
    run(c, "admin", "{\"renameCollection\": \"strm_eq.c\", \"to\": \"strm_eq.d\"}");
    run(c, "strm_eq", "{\"drop\": \"d\"}");
    run(c, "strm_eq", "{\"insert\": \"e\", \"documents\": [{\"_id\": 1}]}");
    run(c, "strm_eq", "{\"dropDatabase\": 1}");
    run(c, "strm_other", "{\"insert\": \"c\", \"documents\": [{\"_id\": 7}]}");

    eq_list lo, ls;
    collect(qo, "strm_eq", OP_DROP_DATABASE, &lo);
    collect(qs, "strm_eq", OP_DROP_DATABASE, &ls);
    ck_assert_msg(lo.n == ls.n, "%zu entries from the oplog, %zu from the stream", lo.n, ls.n);
    for (size_t k = 0; k < lo.n; k++) {
        const op_entry *a = lo.e[k], *b = ls.e[k];
        ck_assert_msg(op_pos_cmp(&a->pos, &b->pos) == 0, "entry %zu: position", k);
        ck_assert_msg(b->token != NULL, "entry %zu: no token", k);
        size_t i = 0, j = 0;
        for (;;) {
            while (i < a->n && a->ops[i].kind == OP_NOOP)
                i++;
            while (j < b->n && b->ops[j].kind == OP_NOOP)
                j++;
            if (i == a->n || j == b->n)
                break;
            const op *x = &a->ops[i], *y = &b->ops[j];
            ck_assert_msg(x->kind == y->kind && x->form == y->form,
                          "entry %zu: %s/%s from the oplog, %s/%s from the "
                          "stream",
                          k, op_kind_name(x->kind), op_form_name(x->form), op_kind_name(y->kind),
                          op_form_name(y->form));
            ck_assert_msg(strcmp(x->db, y->db) == 0 && ((!x->coll && !y->coll) || strcmp(x->coll, y->coll) == 0),
                          "entry %zu: namespace", k);
            if (x->kind == OP_RENAME)
                ck_assert(strcmp(x->to_db, y->to_db) == 0 && strcmp(x->to_coll, y->to_coll) == 0);
            bool rebuilt = mode == STREAM_UPDATES_DESCRIPTION && x->kind == OP_UPDATE && x->form == OP_FORM_DIFF;
            if ((x->kind == OP_INSERT || x->kind == OP_UPDATE || x->kind == OP_DELETE) && !rebuilt) {
                ck_assert_msg(bytes_eq(x->doc, x->doc_len, y->doc, y->doc_len), "entry %zu: %s document", k,
                              op_kind_name(x->kind));
                ck_assert_msg((x->kind == OP_DELETE || (x->json && y->json)) &&
                                  ((!x->json && !y->json) || strcmp(x->json, y->json) == 0),
                              "entry %zu: rendered text %s / %s", k, x->json ? x->json : "-", y->json ? y->json : "-");
                ck_assert_msg(x->id_key && y->id_key && strcmp(x->id_key, y->id_key) == 0, "entry %zu: key", k);
            }
            if (rebuilt)
                ck_assert_msg(x->id_key && y->id_key && strcmp(x->id_key, y->id_key) == 0, "entry %zu: key", k);
            if (x->kind == OP_UPDATE || x->kind == OP_DELETE)
                ck_assert_msg(bytes_eq(x->key, x->key_len, y->key, y->key_len), "entry %zu: document key", k);
            i++;
            j++;
        }
        ck_assert_msg(i == a->n && j == b->n, "entry %zu: more ops on one side", k);
        ck_assert_msg(a->atomic == b->atomic, "entry %zu: atomic", k);
    }
    for (size_t k = 0; k < lo.n; k++)
        op_entry_free(lo.e[k]);
    for (size_t k = 0; k < ls.n; k++)
        op_entry_free(ls.e[k]);
    reader_free(ro);
    stream_free(rs);
    queue_free(qo);
    queue_free(qs);
    drop_db(c, "strm_other");
    mongoc_client_destroy(c);
}

START_TEST(test_same_ops_as_oplog)
{
    same_ops_as_oplog(STREAM_UPDATES_AUTO, 0);
}
END_TEST

/* With payloads borrowed from the raw entry until rendered (DECODE_BORROW_PAYLOAD): the same text. */
START_TEST(test_same_ops_as_oplog_borrowed)
{
    same_ops_as_oplog(STREAM_UPDATES_AUTO, DECODE_BORROW_PAYLOAD);
}
END_TEST

START_TEST(test_same_ops_as_oplog_description)
{
    same_ops_as_oplog(STREAM_UPDATES_DESCRIPTION, 0);
}
END_TEST

/* A filter that names its databases exactly: the server sends only their events ($match), so no op of another
 * database comes even as an excluded noop; the filter's own ops come as before, a rename from another database into
 * them included (4.2+ writes it as a copy into a temporary collection of the target database, then a rename there). */
START_TEST(test_filter_match)
{
    mongoc_client_t *c = client_new();
    op_pos at;
    NEED_STREAMS(c, at);
    drop_db(c, "strm_flt");
    drop_db(c, "strm_nope");
    NEED_STREAMS(c, at);
    char err[256];
    const char *inc[] = {"strm_flt.*", NULL};
    nsfilter *f = nsfilter_new(inc, NULL, err, sizeof err);
    ck_assert_msg(f, "%s", err);
    queue *q = queue_new(1000, 0);
    stream_config cfg;
    stream_config_init(&cfg);
    cfg.uri = mongo_uri();
    cfg.start = at;
    cfg.await_ms = AWAIT_MS;
    cfg.filter = f;
    stream_reader *r = stream_start(&cfg, q, err, sizeof err);
    ck_assert_msg(r, "%s", err);
    run(c, "strm_nope", "{\"insert\": \"x\", \"documents\": [{\"_id\": 1}]}");
    run(c, "strm_flt", "{\"insert\": \"c\", \"documents\": [{\"_id\": 1}]}");
    run(c, "admin", "{\"renameCollection\": \"strm_nope.x\", \"to\": \"strm_flt.y\"}");
    run(c, "strm_flt", "{\"insert\": \"c\", \"documents\": [{\"_id\": 2}]}"); /* closes the rename's group */
    time_t until = time(NULL) + 60;
    bool insert = false, renamed = false;
    while (!renamed && time(NULL) < until) {
        queue_item it;
        if (!queue_pop(q, &it)) {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        ck_assert_msg(it.type != QUEUE_END, "the reader stopped: %s", it.message);
        if (it.type == QUEUE_ENTRY)
            for (size_t i = 0; i < it.entry->n; i++) {
                const op *o = &it.entry->ops[i];
                ck_assert_msg(o->kind != OP_NOOP || !o->reason || strcmp(o->reason, "excluded by include/exclude"),
                              "an op of a database the filter leaves out came");
                insert |= o->kind == OP_INSERT && o->db && strcmp(o->db, "strm_flt") == 0;
                renamed |= o->kind == OP_RENAME && strcmp(o->to_db, "strm_flt") == 0 && strcmp(o->to_coll, "y") == 0;
            }
        queue_item_clear(&it);
        queue_release(q);
    }
    ck_assert_msg(insert, "the insert into strm_flt did not come");
    ck_assert_msg(renamed, "the rename into strm_flt.y did not come");
    stream_free(r);
    queue_free(q);
    nsfilter_free(f);
    drop_db(c, "strm_flt");
    drop_db(c, "strm_nope");
    mongoc_client_destroy(c);
}
END_TEST

/* mongosim drops every connection: the reader re-opens the stream after the last token it pushed, nothing lost and
 * nothing repeated. */
START_TEST(test_reconnect_after_drop)
{
    mongoc_client_t *c = client_new();
    op_pos at;
    NEED_STREAMS(c, at);
    if (!oplogutil_is_mongosim(c)) {
        mongoc_client_destroy(c);
        SKIP_TEST("needs mongosim's mongosimDropConnections");
    }
    drop_db(c, "strm_drop");
    NEED_STREAMS(c, at);
    queue *q = queue_new(1000, 0);
    stream_reader *r = start(q, &at, NULL, 0);
    char cmd[128];
    for (int i = 1; i <= 6; i++) {
        if (i == 4) {
            run(c, "strm_other", "{\"insert\": \"c\", \"documents\": [{\"_id\": 1}]}");
            for (int k = 1; k <= 3; k++) {
                op_entry *e = next_entry(q, "strm_drop");
                ck_assert_int_eq(e->ops[0].id.value.v_int32, k);
                op_entry_free(e);
            }
            bson_t reply;
            bson_error_t err;
            bson_t *drop = BCON_NEW("mongosimDropConnections", BCON_INT32(1));
            ck_assert_msg(mongoc_client_command_simple(c, "admin", drop, NULL, &reply, &err), "%s", err.message);
            bson_destroy(drop);
            bson_destroy(&reply);
        }
        snprintf(cmd, sizeof cmd, "{\"insert\": \"c\", \"documents\": [{\"_id\": %d}]}", i);
        run(c, "strm_drop", cmd);
    }
    run(c, "strm_other", "{\"insert\": \"c\", \"documents\": [{\"_id\": 2}]}");
    for (int k = 4; k <= 6; k++) {
        op_entry *e = next_entry(q, "strm_drop");
        ck_assert_int_eq(e->ops[0].id.value.v_int32, k);
        op_entry_free(e);
    }
    reader_stats st;
    stream_get_stats(r, &st);
    ck_assert_uint_ge(st.reconnects, 1);
    stream_free(r);
    queue_free(q);
    drop_db(c, "strm_drop");
    drop_db(c, "strm_other");
    mongoc_client_destroy(c);
}
END_TEST

Suite *stream_source_suite(void)
{
    Suite *s = suite_create("stream_source");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_crud_entries);
    tcase_add_test(tc, test_crud_entries_description);
    tcase_add_test(tc, test_transaction_one_entry);
    tcase_add_test(tc, test_resume_from_token);
    tcase_add_test(tc, test_idle);
    tcase_add_test(tc, test_history_lost);
    tcase_add_test(tc, test_token_not_found_restarts_at_its_time);
    tcase_add_test(tc, test_quiet_stream_position_moves);
    tcase_add_test(tc, test_large_transaction_in_parts);
    tcase_add_test(tc, test_large_event_split);
    tcase_add_test(tc, test_same_ops_as_oplog);
    tcase_add_test(tc, test_same_ops_as_oplog_description);
    tcase_add_test(tc, test_same_ops_as_oplog_borrowed);
    tcase_add_test(tc, test_filter_match);
    tcase_add_test(tc, test_reconnect_after_drop);
    suite_add_tcase(s, tc);
    return s;
}

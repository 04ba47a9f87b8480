/*
 * test_mongosim_libmongoc.c — the real libmongoc 1.23 against the server in MONGO_URI (mongosim, or a real replica
 * set): topology, CRUD, oplog tailing with tailable+awaitData cursors, killCursors/CursorNotFound, transactions and
 * mongosim's fault commands. Cases that need mongosim's test commands skip on a real server (skip.h).
 * The harness sets MONGO_URI, e.g. mongodb://127.0.0.1:PORT/?replicaSet=rs0.
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

#define TEST_DB "mongosim_it"

Suite *mongosim_libmongoc_suite(void);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A client for MONGO_URI; retry_writes false makes write errors reach the test instead of being retried. */
static mongoc_client_t *client_new(bool retry_writes)
{
    const char *uri_str = getenv("MONGO_URI");
    ck_assert_msg(uri_str && *uri_str, "MONGO_URI is not set: run with MONGO_URI=mongodb://127.0.0.1:PORT/"
                                       "?replicaSet=rs0 (the integration harness sets it)");
    mongoc_init();
    bson_error_t err;
    mongoc_uri_t *uri = mongoc_uri_new_with_error(uri_str, &err);
    ck_assert_msg(uri, "bad MONGO_URI '%s': %s", uri_str, err.message);
    if (!retry_writes)
        mongoc_uri_set_option_as_bool(uri, MONGOC_URI_RETRYWRITES, false);
    mongoc_uri_set_option_as_int32(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS, 15000);
    mongoc_client_t *c = mongoc_client_new_from_uri(uri);
    mongoc_uri_destroy(uri);
    ck_assert_ptr_nonnull(c);
    return c;
}

static bool command(mongoc_client_t *c, const char *db, bson_t *cmd, bson_t *reply, bson_error_t *err)
{
    bool ok = mongoc_client_command_simple(c, db, cmd, NULL, reply, err);
    bson_destroy(cmd);
    return ok;
}

static void command_ok(mongoc_client_t *c, const char *db, bson_t *cmd, bson_t *reply)
{
    bson_error_t err;
    bson_t tmp;
    bool ok = command(c, db, cmd, reply ? reply : &tmp, &err);
    ck_assert_msg(ok, "command failed: %s (code %u)", err.message, err.code);
    if (!reply)
        bson_destroy(&tmp);
}

#define NEED_MONGOSIM(c, what)                                                                                         \
    do {                                                                                                               \
        if (!oplogutil_is_mongosim(c)) {                                                                               \
            mongoc_client_destroy(c);                                                                                  \
            SKIP_TEST("needs mongosim's test commands (%s)", what);                                                    \
        }                                                                                                              \
    } while (0)

/* lastWrite.opTime from hello: where the oplog ends now. */
static void last_optime(mongoc_client_t *c, uint32_t *secs, uint32_t *inc, int64_t *term)
{
    bson_t reply;
    bson_iter_t it;
    command_ok(c, "admin", BCON_NEW("hello", BCON_INT32(1)), &reply);
    ck_assert_msg(bson_iter_init_find_w_len(&it, &reply, "lastWrite", -1), "hello has no lastWrite");
    bson_iter_t ts, t;
    ck_assert(bson_iter_init_find(&it, &reply, "lastWrite"));
    bson_iter_t lw;
    ck_assert(bson_iter_recurse(&it, &lw) && bson_iter_find_descendant(&lw, "opTime.ts", &ts));
    bson_iter_timestamp(&ts, secs, inc);
    bson_iter_recurse(&it, &lw);
    ck_assert(bson_iter_find_descendant(&lw, "opTime.t", &t));
    if (term)
        *term = bson_iter_as_int64(&t);
    bson_destroy(&reply);
}

static mongoc_cursor_t *tail_after(mongoc_client_t *c, uint32_t secs, uint32_t inc, int64_t await_ms)
{
    mongoc_collection_t *coll = mongoc_client_get_collection(c, "local", "oplog.rs");
    bson_t *filter = BCON_NEW("ts", "{", "$gt", BCON_TIMESTAMP(secs, inc), "}");
    bson_t *opts =
        BCON_NEW("tailable", BCON_BOOL(true), "awaitData", BCON_BOOL(true), "maxAwaitTimeMS", BCON_INT64(await_ms));
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, filter, opts, NULL);
    bson_destroy(filter);
    bson_destroy(opts);
    mongoc_collection_destroy(coll);
    return cur;
}

static const char *str_field(const bson_t *doc, const char *key)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
}

/* Reads the cursor until `want` entries on ns (or any ns when NULL) were collected or `secs` passed. */
static int collect(mongoc_cursor_t *cur, const char *ns, bson_t **out, int want, double secs)
{
    int n = 0;
    double deadline = now_s() + secs;
    const bson_t *doc;
    bson_error_t err;
    while (n < want && now_s() < deadline && mongoc_cursor_more(cur)) {
        if (mongoc_cursor_next(cur, &doc)) {
            if (!ns || strcmp(str_field(doc, "ns"), ns) == 0)
                out[n++] = bson_copy(doc);
        } else if (mongoc_cursor_error(cur, &err)) {
            ck_abort_msg("tailing the oplog failed: %s (code %u)", err.message, err.code);
        }
    }
    return n;
}

/* Calls next until the cursor fails (entries already buffered or periodic noops may come first); returns the
 * error code, 0 if it never failed. An entry on `forbidden_ns` is a test failure. */
static uint32_t next_until_error(mongoc_cursor_t *cur, const char *forbidden_ns)
{
    const bson_t *doc;
    bson_error_t err;
    for (int i = 0; i < 100; i++) {
        if (mongoc_cursor_next(cur, &doc)) {
            ck_assert_msg(!forbidden_ns || strcmp(str_field(doc, "ns"), forbidden_ns) != 0,
                          "the cursor returned an entry it should not have reached");
            continue;
        }
        if (mongoc_cursor_error(cur, &err))
            return err.code;
        if (!mongoc_cursor_more(cur))
            return 0;
    }
    return 0;
}

static void unique_coll(char *buf, size_t n, const char *base)
{
    snprintf(buf, n, "%s_%ld_%d", base, (long)time(NULL), rand() % 100000);
}

static void check_entry_types(const bson_t *e)
{
    bson_iter_t it;
    ck_assert_msg(bson_iter_init_find(&it, e, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it), "ts is not a Timestamp");
    ck_assert_msg(bson_iter_init_find(&it, e, "t") && BSON_ITER_HOLDS_INT64(&it), "t is not an int64");
    ck_assert_msg(bson_iter_init_find(&it, e, "v") && BSON_ITER_HOLDS_NUMBER(&it) && bson_iter_as_int64(&it) == 2,
                  "v is not 2");
    ck_assert_msg(bson_iter_init_find(&it, e, "wall") && BSON_ITER_HOLDS_DATE_TIME(&it), "wall is not a date");
    bson_subtype_t st;
    uint32_t len;
    const uint8_t *data;
    ck_assert_msg(bson_iter_init_find(&it, e, "ui") && BSON_ITER_HOLDS_BINARY(&it), "no ui");
    bson_iter_binary(&it, &st, &len, &data);
    ck_assert_msg(st == BSON_SUBTYPE_UUID && len == 16, "ui is not a UUID");
}

START_TEST(test_topology_primary)
{
    mongoc_client_t *c = client_new(true);
    bson_error_t err;
    mongoc_server_description_t *sd = mongoc_client_select_server(c, true, NULL, &err);
    ck_assert_msg(sd, "no writable server: %s", err.message);
    ck_assert_str_eq(mongoc_server_description_type(sd), "RSPrimary");
    mongoc_server_description_destroy(sd);
    bson_t reply;
    command_ok(c, "admin", BCON_NEW("ping", BCON_INT32(1)), NULL);
    bson_error_t e2;
    ck_assert(!command(c, "admin", BCON_NEW("noSuchCommandForSure", BCON_INT32(1)), &reply, &e2));
    ck_assert_uint_eq(e2.code, 59);
    bson_destroy(&reply);
    mongoc_client_destroy(c);
}
END_TEST

START_TEST(test_crud_and_oplog_shapes)
{
    mongoc_client_t *c = client_new(true);
    char name[64], ns[128];
    unique_coll(name, sizeof name, "crud");
    snprintf(ns, sizeof ns, TEST_DB ".%s", name);
    mongoc_collection_t *coll = mongoc_client_get_collection(c, TEST_DB, name);
    uint32_t secs, inc;
    last_optime(c, &secs, &inc, NULL);
    bson_error_t err;
    bson_t *doc = BCON_NEW("_id", BCON_INT32(7), "a", BCON_UTF8("x"));
    ck_assert_msg(mongoc_collection_insert_one(coll, doc, NULL, NULL, &err), "insert: %s", err.message);
    bson_t reply;
    ck_assert(!mongoc_collection_insert_one(coll, doc, NULL, &reply, &err));
    ck_assert_uint_eq(err.code, 11000);
    bson_destroy(&reply);
    bson_destroy(doc);
    bson_t *q = BCON_NEW("_id", BCON_INT32(7));
    bson_t *u = BCON_NEW("$set", "{", "b", BCON_INT32(2), "}");
    ck_assert(mongoc_collection_update_one(coll, q, u, NULL, &reply, &err));
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, &reply, "modifiedCount") && bson_iter_as_int64(&it) == 1);
    bson_destroy(&reply);
    mongoc_cursor_t *fc = mongoc_collection_find_with_opts(coll, q, NULL, NULL);
    const bson_t *found;
    ck_assert_msg(mongoc_cursor_next(fc, &found), "find returned nothing");
    ck_assert(bson_iter_init_find(&it, found, "b") && bson_iter_as_int64(&it) == 2);
    ck_assert(!mongoc_cursor_next(fc, &found));
    mongoc_cursor_destroy(fc);
    ck_assert(mongoc_collection_delete_one(coll, q, NULL, &reply, &err));
    ck_assert(bson_iter_init_find(&it, &reply, "deletedCount") && bson_iter_as_int64(&it) == 1);
    bson_destroy(&reply);
    ck_assert_int_eq(mongoc_collection_count_documents(coll, &(bson_t)BSON_INITIALIZER, NULL, NULL, NULL, &err), 0);

    mongoc_cursor_t *cur = tail_after(c, secs, inc, 200);
    bson_t *e[3];
    int n = collect(cur, ns, e, 3, 10);
    ck_assert_msg(n == 3, "expected i, u, d entries on %s, got %d", ns, n);
    ck_assert_str_eq(str_field(e[0], "op"), "i");
    ck_assert_str_eq(str_field(e[1], "op"), "u");
    ck_assert_str_eq(str_field(e[2], "op"), "d");
    for (int i = 0; i < 3; i++)
        check_entry_types(e[i]);
    ck_assert(bson_iter_init(&it, e[0]) && bson_iter_find_descendant(&it, "o._id", &it) &&
              bson_iter_as_int64(&it) == 7);
    ck_assert(bson_iter_init(&it, e[0]) && bson_iter_find_descendant(&it, "o.a", &it) && BSON_ITER_HOLDS_UTF8(&it));
    ck_assert(bson_iter_init(&it, e[1]) && bson_iter_find_descendant(&it, "o2._id", &it) &&
              bson_iter_as_int64(&it) == 7);
    ck_assert(bson_iter_init(&it, e[2]) && bson_iter_find_descendant(&it, "o._id", &it) &&
              bson_iter_as_int64(&it) == 7);
    for (int i = 0; i < n; i++)
        bson_destroy(e[i]);
    mongoc_cursor_destroy(cur);
    bson_destroy(q);
    bson_destroy(u);
    mongoc_collection_drop(coll, NULL);
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(c);
}
END_TEST

typedef struct {
    char name[64];
    int delay_ms;
} writer_arg;

static void *delayed_insert(void *p)
{
    writer_arg *a = p;
    usleep((useconds_t)a->delay_ms * 1000);
    mongoc_client_t *c = client_new(true);
    mongoc_collection_t *coll = mongoc_client_get_collection(c, TEST_DB, a->name);
    bson_t *doc = BCON_NEW("w", BCON_INT32(1));
    mongoc_collection_insert_one(coll, doc, NULL, NULL, NULL);
    bson_destroy(doc);
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(c);
    return NULL;
}

START_TEST(test_await_data_timeout_and_wake)
{
    mongoc_client_t *c = client_new(true);
    uint32_t secs, inc;
    last_optime(c, &secs, &inc, NULL);
    /* Nothing new: the getMore waits about maxAwaitTimeMS and returns an empty batch, cursor still alive. Load makes
     * a wait longer, never shorter: the lower bound only allows for a timer started a little before the request was
     * read; the upper one is generous (a server that ignored maxAwaitTimeMS would park the getMore for minutes). */
    mongoc_cursor_t *cur = tail_after(c, secs, inc, 2000);
    const bson_t *doc;
    bson_error_t err;
    double t0 = now_s();
    bool got = mongoc_cursor_next(cur, &doc); /* find: empty first batch */
    if (!got && !mongoc_cursor_error(cur, &err))
        got = mongoc_cursor_next(cur, &doc); /* first getMore */
    double waited = now_s() - t0;
    if (!got) {
        ck_assert_msg(!mongoc_cursor_error(cur, &err), "cursor error: %s", err.message);
        ck_assert_msg(waited >= 1.5 && waited < 30.0, "empty awaitData getMore took %.3f s, expected ~2", waited);
        ck_assert(mongoc_cursor_more(cur));
    }
    mongoc_cursor_destroy(cur);

    /* A write wakes a parked getMore well before maxAwaitTimeMS: 60 s, against a bound of 30 s for the 0.3 s the
     * write comes after (an unwoken getMore answers only after the 60 s). */
    writer_arg a = {.delay_ms = 300};
    unique_coll(a.name, sizeof a.name, "wake");
    char ns[128];
    snprintf(ns, sizeof ns, TEST_DB ".%s", a.name);
    last_optime(c, &secs, &inc, NULL);
    cur = tail_after(c, secs, inc, 60000);
    pthread_t th;
    t0 = now_s();
    pthread_create(&th, NULL, delayed_insert, &a);
    bson_t *e[1];
    int n = collect(cur, ns, e, 1, 30);
    double took = now_s() - t0;
    pthread_join(th, NULL);
    ck_assert_msg(n == 1, "the insert was not seen by the tailing cursor");
    ck_assert_msg(took < 30.0, "parked getMore answered after %.3f s, not woken by the insert", took);
    bson_destroy(e[0]);
    mongoc_cursor_destroy(cur);
    mongoc_collection_t *coll = mongoc_client_get_collection(c, TEST_DB, a.name);
    mongoc_collection_drop(coll, NULL);
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(c);
}
END_TEST

START_TEST(test_kill_cursors_and_not_found)
{
    mongoc_client_t *c = client_new(true);
    /* A live tailable cursor: the oplog is not empty (earlier writes), batchSize 1 leaves it open. */
    char name[64];
    unique_coll(name, sizeof name, "kc");
    mongoc_collection_t *coll = mongoc_client_get_collection(c, TEST_DB, name);
    bson_t *doc = BCON_NEW("k", BCON_INT32(1));
    ck_assert(mongoc_collection_insert_one(coll, doc, NULL, NULL, NULL));
    bson_destroy(doc);
    bson_t reply;
    command_ok(c, "local",
               BCON_NEW("find", BCON_UTF8("oplog.rs"), "filter", "{", "}", "tailable", BCON_BOOL(true), "awaitData",
                        BCON_BOOL(true), "batchSize", BCON_INT32(1)),
               &reply);
    bson_iter_t it;
    ck_assert(bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.id", &it));
    int64_t id = bson_iter_as_int64(&it);
    ck_assert_msg(id != 0, "tailable cursor on a non-empty oplog must stay open");
    ck_assert(bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.ns", &it));
    ck_assert_str_eq(bson_iter_utf8(&it, NULL), "local.oplog.rs");
    bson_destroy(&reply);
    command_ok(c, "local", BCON_NEW("killCursors", BCON_UTF8("oplog.rs"), "cursors", "[", BCON_INT64(id), "]"), &reply);
    ck_assert(bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursorsKilled.0", &it));
    ck_assert(bson_iter_as_int64(&it) == id);
    bson_destroy(&reply);
    bson_error_t err;
    ck_assert(
        !command(c, "local", BCON_NEW("getMore", BCON_INT64(id), "collection", BCON_UTF8("oplog.rs")), &reply, &err));
    ck_assert_uint_eq(err.code, 43);
    bson_destroy(&reply);
    ck_assert(!command(c, "local", BCON_NEW("getMore", BCON_INT64(123456789), "collection", BCON_UTF8("oplog.rs")),
                       &reply, &err));
    ck_assert_uint_eq(err.code, 43);
    bson_destroy(&reply);
    mongoc_collection_drop(coll, NULL);
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(c);
}
END_TEST

START_TEST(test_fault_truncate)
{
    mongoc_client_t *c = client_new(true);
    NEED_MONGOSIM(c, "truncate");
    char name[64], ns[128];
    unique_coll(name, sizeof name, "trunc");
    snprintf(ns, sizeof ns, TEST_DB ".%s", name);
    mongoc_collection_t *coll = mongoc_client_get_collection(c, TEST_DB, name);
    uint32_t secs, inc;
    last_optime(c, &secs, &inc, NULL);
    mongoc_cursor_t *cur = tail_after(c, secs, inc, 200);
    const bson_t *doc;
    mongoc_cursor_next(cur, &doc); /* positioned at the end (a periodic noop at most) */
    for (int i = 0; i < 3; i++) {
        bson_t *d = BCON_NEW("i", BCON_INT32(i));
        ck_assert(mongoc_collection_insert_one(coll, d, NULL, NULL, NULL));
        bson_destroy(d);
    }
    last_optime(c, &secs, &inc, NULL);
    command_ok(c, "admin", BCON_NEW("mongosimTruncateOplog", BCON_INT32(1), "before", BCON_TIMESTAMP(secs, inc)), NULL);
    ck_assert_uint_eq(next_until_error(cur, ns), 136);
    mongoc_cursor_destroy(cur);
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(c);
}
END_TEST

START_TEST(test_fault_step_down)
{
    mongoc_client_t *c = client_new(false);
    NEED_MONGOSIM(c, "step down");
    char name[64], ns[128];
    unique_coll(name, sizeof name, "sd");
    snprintf(ns, sizeof ns, TEST_DB ".%s", name);
    mongoc_collection_t *coll = mongoc_client_get_collection(c, TEST_DB, name);
    uint32_t secs, inc;
    int64_t term;
    last_optime(c, &secs, &inc, &term);
    mongoc_cursor_t *cur = tail_after(c, secs, inc, 300);
    const bson_t *doc;
    mongoc_cursor_next(cur, &doc);
    command_ok(c, "admin", BCON_NEW("mongosimStepDown", BCON_INT32(1500)), NULL);
    bson_error_t err;
    bson_t *d = BCON_NEW("x", BCON_INT32(1));
    ck_assert_msg(!mongoc_collection_insert_one(coll, d, NULL, NULL, &err), "insert succeeded while stepped down");
    ck_assert_uint_eq(err.code, 10107);
    ck_assert_uint_eq(next_until_error(cur, ns), 11602);
    mongoc_cursor_destroy(cur);
    /* Writable again once mongosim is primary again (1.5 s; the deadline is generous). */
    bool ok = false;
    double until = now_s() + 30;
    while (!(ok = mongoc_collection_insert_one(coll, d, NULL, NULL, &err)) && now_s() < until)
        usleep(100 * 1000);
    ck_assert_msg(ok, "still not writable 30 s after a 1.5 s step-down: %s", err.message);
    bson_destroy(d);
    int64_t term2;
    uint32_t s2, i2;
    last_optime(c, &s2, &i2, &term2);
    ck_assert_int_eq(term2, term + 1);
    cur = tail_after(c, secs, inc, 200);
    bson_t *e[1];
    bson_iter_t it;
    bool new_primary = false;
    for (int i = 0; i < 50 && !new_primary && collect(cur, "", e, 1, 5) == 1; i++) { /* skip periodic noops */
        new_primary = bson_iter_init(&it, e[0]) && bson_iter_find_descendant(&it, "o.msg", &it) &&
                      strcmp(bson_iter_utf8(&it, NULL), "new primary") == 0;
        if (new_primary)
            ck_assert(bson_iter_init_find(&it, e[0], "t") && bson_iter_as_int64(&it) == term + 1);
        bson_destroy(e[0]);
    }
    ck_assert_msg(new_primary, "no \"new primary\" noop after the step-down");
    int n = collect(cur, ns, e, 1, 5);
    ck_assert_int_eq(n, 1);
    ck_assert(bson_iter_init_find(&it, e[0], "t") && bson_iter_as_int64(&it) == term + 1);
    bson_destroy(e[0]);
    mongoc_cursor_destroy(cur);
    mongoc_collection_drop(coll, NULL);
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(c);
}
END_TEST

static int32_t connection_id(mongoc_client_t *c, bson_error_t *err)
{
    bson_t reply;
    bson_iter_t it;
    if (!command(c, "admin", BCON_NEW("hello", BCON_INT32(1)), &reply, err))
        return -1;
    int32_t id = bson_iter_init_find(&it, &reply, "connectionId") ? (int32_t)bson_iter_as_int64(&it) : -1;
    bson_destroy(&reply);
    return id;
}

START_TEST(test_fault_drop_connections)
{
    mongoc_client_t *c = client_new(true);
    NEED_MONGOSIM(c, "drop connections");
    bson_error_t err;
    int32_t before = connection_id(c, &err);
    ck_assert_int_gt(before, 0);
    mongoc_client_t *other = client_new(true);
    command_ok(other, "admin", BCON_NEW("mongosimDropConnections", BCON_INT32(1)), NULL);
    mongoc_client_destroy(other);
    int32_t after = -1;
    for (int i = 0; i < 3 && after < 0; i++)
        after = connection_id(c, &err); /* the first try may see the closed socket */
    ck_assert_msg(after > 0, "libmongoc did not reconnect: %s", err.message);
    ck_assert_msg(after != before, "still on connection %d after the drop", before);
    mongoc_client_destroy(c);
}
END_TEST

START_TEST(test_fault_delay)
{
    mongoc_client_t *c = client_new(true);
    NEED_MONGOSIM(c, "delay");
    /* A delay long enough that "delayed" and "not delayed" are told apart by a margin load cannot close: a reply
     * is never early, and an undelayed ping on a loaded machine takes far less than half the delay. */
    command_ok(c, "admin", BCON_NEW("mongosimDelay", BCON_INT32(4000)), NULL);
    double t0 = now_s();
    command_ok(c, "admin", BCON_NEW("ping", BCON_INT32(1)), NULL);
    double took = now_s() - t0;
    command_ok(c, "admin", BCON_NEW("mongosimDelay", BCON_INT32(0)), NULL);
    ck_assert_msg(took >= 3.5, "ping took %.3f s with a 4 s reply delay", took);
    t0 = now_s();
    command_ok(c, "admin", BCON_NEW("ping", BCON_INT32(1)), NULL);
    ck_assert_msg(now_s() - t0 < 2.0, "the delay did not turn off: a ping took %.3f s", now_s() - t0);
    mongoc_client_destroy(c);
}
END_TEST

START_TEST(test_transaction_chain)
{
    mongoc_client_t *c = client_new(true);
    NEED_MONGOSIM(c, "transaction");
    char name[64], ns[128];
    unique_coll(name, sizeof name, "txn");
    snprintf(ns, sizeof ns, TEST_DB ".%s", name);
    mongoc_collection_t *coll = mongoc_client_get_collection(c, TEST_DB, name);
    bson_error_t err;
    ck_assert(mongoc_collection_drop(coll, &err) || err.code == 26);
    bson_t *d = BCON_NEW("_id", BCON_INT32(0));
    ck_assert(mongoc_collection_insert_one(coll, d, NULL, NULL, &err)); /* the collection exists before the txn */
    bson_destroy(d);
    uint32_t secs, inc;
    last_optime(c, &secs, &inc, NULL);
    command_ok(c, "admin",
               BCON_NEW("mongosimTransaction", BCON_INT32(1), "chain", BCON_INT32(2), "ops", "[", "{", "insert",
                        BCON_UTF8(ns), "document", "{", "_id", BCON_INT32(1), "}", "}", "{", "insert", BCON_UTF8(ns),
                        "document", "{", "_id", BCON_INT32(2), "}", "}", "{", "update", BCON_UTF8(ns), "q", "{", "_id",
                        BCON_INT32(1), "}", "u", "{", "$set", "{", "y", BCON_INT32(1), "}", "}", "}", "]"),
               NULL);
    ck_assert_int_eq(mongoc_collection_count_documents(coll, &(bson_t)BSON_INITIALIZER, NULL, NULL, NULL, &err), 3);
    mongoc_cursor_t *cur = tail_after(c, secs, inc, 200);
    bson_t *e[2];
    int n = collect(cur, "admin.$cmd", e, 2, 5);
    ck_assert_int_eq(n, 2);
    bson_iter_t it, a, b;
    ck_assert(bson_iter_init(&it, e[0]) && bson_iter_find_descendant(&it, "o.partialTxn", &it) &&
              bson_iter_as_bool(&it));
    ck_assert(bson_iter_init(&it, e[1]) && bson_iter_find_descendant(&it, "o.count", &it) &&
              BSON_ITER_HOLDS_INT64(&it) && bson_iter_as_int64(&it) == 3);
    ck_assert(bson_iter_init(&it, e[1]) && bson_iter_find_descendant(&it, "o.applyOps.0.op", &it));
    ck_assert(bson_iter_init(&a, e[0]) && bson_iter_find_descendant(&a, "prevOpTime.t", &a) &&
              bson_iter_as_int64(&a) == -1);
    ck_assert(bson_iter_init(&a, e[0]) && bson_iter_find(&a, "ts"));
    ck_assert(bson_iter_init(&b, e[1]) && bson_iter_find_descendant(&b, "prevOpTime.ts", &b));
    uint32_t s1, i1, s2, i2;
    bson_iter_timestamp(&a, &s1, &i1);
    bson_iter_timestamp(&b, &s2, &i2);
    ck_assert(s1 == s2 && i1 == i2);
    ck_assert(bson_iter_init_find(&it, e[0], "lsid") && BSON_ITER_HOLDS_DOCUMENT(&it));
    ck_assert(bson_iter_init_find(&it, e[0], "txnNumber") && BSON_ITER_HOLDS_INT64(&it));
    bson_destroy(e[0]);
    bson_destroy(e[1]);
    mongoc_cursor_destroy(cur);
    mongoc_collection_drop(coll, NULL);
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(c);
}
END_TEST

Suite *mongosim_libmongoc_suite(void)
{
    Suite *s = suite_create("mongosim_libmongoc");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_topology_primary);
    tcase_add_test(tc, test_crud_and_oplog_shapes);
    tcase_add_test(tc, test_await_data_timeout_and_wake);
    tcase_add_test(tc, test_kill_cursors_and_not_found);
    tcase_add_test(tc, test_transaction_chain);
    suite_add_tcase(s, tc);
    TCase *faults = tcase_create("faults");
    tcase_set_timeout(faults, 60);
    tcase_add_test(faults, test_fault_truncate);
    tcase_add_test(faults, test_fault_step_down);
    tcase_add_test(faults, test_fault_drop_connections);
    tcase_add_test(faults, test_fault_delay);
    suite_add_tcase(s, faults);
    return s;
}

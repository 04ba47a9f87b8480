/*
 * test_shard_source.c — source/shards/ against a server: discovery (source/shards/discover.h) on the suite's replica
 * set, on an address where nothing listens and on a sharded mongosim (`mongosim --shards 2`: a router, two shards,
 * mongosimAddShard), and the oplog-note writer (source/shards/note.h): notes written and coalesced, a refusal
 * reported once and never retried, another failure retried at the next request.
 *
 * Which cases run depends on the mongosim at hand, and each says so when it skips (skip.h): the sharded cases need
 * `mongosim --shards`; the written-note case needs a server that knows appendOplogNote and the refusal case one that
 * does not (CommandNotFound, which the writer treats as a refusal of the privilege). Waits are on the writer's
 * counters, with generous bounds.
 */
#include <check.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../lib/daemonenv.h"
#include "../lib/oplogutil.h"
#include "../lib/proc.h"
#include "../lib/simcluster.h"
#include "../lib/skip.h"
#include "core/op.h"
#include "core/queue.h"
#include "source/oplog/reader.h"
#include "source/shards/discover.h"
#include "source/shards/note.h"

Suite *shard_source_suite(void);

#define WAIT_S 30.0

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static const char *mongo_uri(void)
{
    const char *uri = getenv("MONGO_URI");
    ck_assert_msg(uri && *uri, "MONGO_URI is not set: the integration harness (tests/integration/run.sh) sets it");
    return uri;
}

/* Whether the server at c knows appendOplogNote: a note with a maxClusterTime of 0 is never written (its newest entry
 * is past it, oplog_note.cpp), so the probe leaves the oplog as it was. */
static bool knows_append_oplog_note(mongoc_client_t *c)
{
    bson_t reply;
    bson_error_t err;
    bson_t *cmd = BCON_NEW("appendOplogNote", BCON_INT32(1), "data", "{", "msg", BCON_UTF8("probe"), "}",
                           "maxClusterTime", BCON_TIMESTAMP(0, 0));
    bool ok = mongoc_client_command_simple(c, "admin", cmd, NULL, &reply, &err);
    bson_destroy(cmd);
    bson_destroy(&reply);
    ck_assert_msg(ok || err.code == 59, "appendOplogNote probe: %s (code %u)", err.message, err.code);
    return ok;
}

static noter_stats stats_of(noter *n)
{
    noter_stats st;
    noter_get_stats(n, &st);
    return st;
}

/* Waits until the writer has made `attempts` attempts and none is in flight (requests served); false on timeout. */
static bool wait_attempts(noter *n, uint64_t attempts)
{
    double until = denv_now() + WAIT_S;
    while (denv_now() < until) {
        noter_stats st = stats_of(n);
        if (st.attempts >= attempts && st.written + st.failures >= attempts)
            return true;
        sleep_ms(10);
    }
    return false;
}

/* The newest entry of the oplog at c, copied (NULL when empty). */
static bson_t *newest_entry(mongoc_client_t *c)
{
    mongoc_collection_t *coll = mongoc_client_get_collection(c, "local", "oplog.rs");
    bson_t filter = BSON_INITIALIZER;
    bson_t *opts = BCON_NEW("sort", "{", "$natural", BCON_INT32(-1), "}", "limit", BCON_INT64(1));
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, &filter, opts, NULL);
    const bson_t *doc;
    bson_t *out = mongoc_cursor_next(cur, &doc) ? bson_copy(doc) : NULL;
    bson_error_t err;
    ck_assert_msg(!mongoc_cursor_error(cur, &err), "reading the oplog: %s", err.message);
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    mongoc_collection_destroy(coll);
    return out;
}

static op_pos pos_of(const bson_t *e)
{
    bson_iter_t it;
    op_pos p = {0, 0, -1};
    ck_assert(bson_iter_init_find(&it, e, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it));
    bson_iter_timestamp(&it, &p.secs, &p.inc);
    return p;
}

/* A note the writer made: {op: "n", o: {msg: "oplog2pg: ...", shard, service}}. */
static void expect_note(const bson_t *e, const char *shard, const char *service)
{
    bson_iter_t it, o;
    ck_assert(bson_iter_init_find(&it, e, "op") && strcmp(bson_iter_utf8(&it, NULL), "n") == 0);
    ck_assert(bson_iter_init_find(&it, e, "o") && bson_iter_recurse(&it, &o));
    ck_assert(bson_iter_find(&o, "msg") && strncmp(bson_iter_utf8(&o, NULL), "oplog2pg: ", 10) == 0);
    ck_assert(bson_iter_init_find(&it, e, "o") && bson_iter_recurse(&it, &o));
    ck_assert(bson_iter_find(&o, "shard"));
    ck_assert_str_eq(bson_iter_utf8(&o, NULL), shard);
    ck_assert(bson_iter_init_find(&it, e, "o") && bson_iter_recurse(&it, &o));
    ck_assert(bson_iter_find(&o, "service"));
    ck_assert_str_eq(bson_iter_utf8(&o, NULL), service);
}

/* ---- discovery on the suite's replica set ---- */

/* A replica set is not a router and has no shards; an address where nothing listens is unreachable. */
START_TEST(test_discover_replica_set)
{
    char err[512] = "";
    shard_discovery *d = shard_discovery_open(mongo_uri(), err, sizeof err);
    ck_assert_msg(d != NULL, "%s", err);
    bool router = true;
    ck_assert_int_eq(shard_discovery_hello(d, &router, err, sizeof err), DISCOVER_OK);
    ck_assert(!router);
    shard_list l = {0};
    ck_assert_msg(shard_discovery_list(d, &l, err, sizeof err) == DISCOVER_OK, "%s", err);
    ck_assert_uint_eq(l.n, 0);
    shard_discovery_close(d);

    /* port 1 on the loopback: nothing listens there (a privileged port no test binds) */
    d = shard_discovery_open("mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=1000&connectTimeoutMS=1000", err,
                             sizeof err);
    ck_assert_msg(d != NULL, "%s", err);
    ck_assert_int_eq(shard_discovery_hello(d, &router, err, sizeof err), DISCOVER_UNREACHABLE);
    ck_assert_msg(strstr(err, "hello") != NULL, "%s", err);
    ck_assert_int_eq(shard_discovery_list(d, &l, err, sizeof err), DISCOVER_UNREACHABLE);
    ck_assert_msg(strstr(err, "config.shards") != NULL, "%s", err);
    ck_assert_uint_eq(l.n, 0);
    shard_discovery_close(d);

    ck_assert_ptr_null(shard_discovery_open("mongodb://", err, sizeof err));
    ck_assert_msg(strstr(err, "URI") != NULL, "%s", err);
}
END_TEST

/* ---- discovery and notes on a sharded mongosim ---- */

typedef struct {
    simcluster sc;
    char uri[128];
} cluster;

/* `mongosim --shards 2` (tests/lib/simcluster.h), or false (the case skips) when this mongosim has no such option. */
static bool cluster_start(cluster *cl)
{
    char err[512];
    memset(cl, 0, sizeof *cl);
    if (!simcluster_start(2, NULL, NULL, &cl->sc, err, sizeof err))
        return false;
    snprintf(cl->uri, sizeof cl->uri, "mongodb://127.0.0.1:%d/?serverSelectionTimeoutMS=10000", cl->sc.router_port);
    return true;
}

/* The router is told apart; config.shards gives one URI per shard, each reaching that shard's replica set; a shard
 * added while running shows at the next listing. */
START_TEST(test_discover_cluster)
{
    cluster cl;
    if (!cluster_start(&cl))
        SKIP_TEST("needs mongosim --shards");
    char err[512] = "";
    shard_discovery *d = shard_discovery_open(cl.uri, err, sizeof err);
    ck_assert_msg(d != NULL, "%s", err);
    bool router = false;
    ck_assert_msg(shard_discovery_hello(d, &router, err, sizeof err) == DISCOVER_OK, "%s", err);
    ck_assert(router);
    shard_list l = {0};
    ck_assert_msg(shard_discovery_list(d, &l, err, sizeof err) == DISCOVER_OK, "%s", err);
    ck_assert_uint_eq(l.n, 2);
    for (size_t i = 0; i < l.n; i++) {
        char id[32];
        snprintf(id, sizeof id, "shard%zu", i);
        ck_assert_str_eq(l.v[i].id, id);
        ck_assert_str_eq(l.v[i].rs, id);
        ck_assert(!l.v[i].draining);
        /* the URI reaches that shard's replica set: its hello names the set */
        mongoc_client_t *c = mongoc_client_new(l.v[i].uri);
        ck_assert_ptr_nonnull(c);
        bson_t reply;
        bson_iter_t it;
        simcluster_cmd_ok(c, "admin", BCON_NEW("hello", BCON_INT32(1)), &reply);
        ck_assert(bson_iter_init_find(&it, &reply, "setName") && BSON_ITER_HOLDS_UTF8(&it));
        ck_assert_str_eq(bson_iter_utf8(&it, NULL), id);
        ck_assert(!bson_iter_init_find(&it, &reply, "msg"));
        bson_destroy(&reply);
        mongoc_client_destroy(c);
    }

    mongoc_client_t *router_client = mongoc_client_new(cl.uri);
    simcluster_cmd_ok(router_client, "admin", BCON_NEW("mongosimAddShard", BCON_INT32(1)), NULL);
    mongoc_client_destroy(router_client);
    ck_assert_msg(shard_discovery_list(d, &l, err, sizeof err) == DISCOVER_OK, "%s", err);
    ck_assert_uint_eq(l.n, 3);
    ck_assert_ptr_nonnull(shard_list_find(&l, "shard2"));
    shard_list_free(&l);
    shard_discovery_close(d);
    simcluster_stop(&cl.sc);
}
END_TEST

/* A note requested on an idle shard lands in that shard's oplog after the time asked for, and nowhere else. */
START_TEST(test_note_on_a_shard)
{
    cluster cl;
    if (!cluster_start(&cl))
        SKIP_TEST("needs mongosim --shards");
    char err[512] = "", uri0[128], uri1[128];
    ck_assert_uint_eq(cl.sc.n, 2);
    simcluster_shard_uri(&cl.sc, 0, uri0, sizeof uri0);
    simcluster_shard_uri(&cl.sc, 1, uri1, sizeof uri1);
    mongoc_client_t *s0 = mongoc_client_new(uri0), *s1 = mongoc_client_new(uri1);
    bson_t *before1 = newest_entry(s1);
    bson_t *before0 = newest_entry(s0);
    ck_assert_ptr_nonnull(before0);
    op_pos past = pos_of(before0);
    past.inc++; /* a time after the shard's newest entry: the merge waits on another shard's entry there */

    noter_config nc = {.uri = uri0, .shard = cl.sc.id[0], .service = "svc"};
    noter *n = noter_start(&nc, err, sizeof err);
    ck_assert_msg(n != NULL, "%s", err);
    noter_request(n, &past);
    ck_assert_msg(wait_attempts(n, 1), "no note written within %.0f s", WAIT_S);
    noter_stats st = stats_of(n);
    ck_assert_msg(st.written == 1 && !st.refused, "written %llu, refused %d: %s", (unsigned long long)st.written,
                  st.refused, st.last_error);
    bson_t *after0 = newest_entry(s0);
    expect_note(after0, "shard0", "svc");
    op_pos note_pos = pos_of(after0);
    ck_assert_int_ge(op_pos_cmp(&note_pos, &past), 0); /* one cluster clock: the note's ts is after the newest */
    bson_t *after1 = newest_entry(s1);
    ck_assert_msg(bson_equal(before1, after1), "the other shard's oplog changed");
    noter_free(n);
    bson_destroy(before0);
    bson_destroy(before1);
    bson_destroy(after0);
    bson_destroy(after1);
    mongoc_client_destroy(s0);
    mongoc_client_destroy(s1);
    simcluster_stop(&cl.sc);
}
END_TEST

/* ---- notes on the suite's replica set ---- */

/* Requests coalesce: while one note is on its way (the server's replies held back), more requests make one more
 * note, not one each; a request for a time the oplog is past already writes nothing. */
START_TEST(test_note_written_and_coalesced)
{
    mongoc_client_t *c = mongoc_client_new(mongo_uri());
    ck_assert_ptr_nonnull(c);
    if (!oplogutil_is_mongosim(c) || !knows_append_oplog_note(c)) {
        mongoc_client_destroy(c);
        SKIP_TEST("needs mongosim with appendOplogNote (mongosimDelay holds the replies)");
    }
    char err[512] = "";
    noter_config nc = {.uri = mongo_uri(), .shard = "rs0", .service = "coalesce"};
    noter *n = noter_start(&nc, err, sizeof err);
    ck_assert_msg(n != NULL, "%s", err);
    bson_t *first = newest_entry(c);
    op_pos past = pos_of(first);
    past.inc++;
    noter_request(n, &past);
    ck_assert(wait_attempts(n, 1));
    bson_t *note = newest_entry(c);
    expect_note(note, "rs0", "coalesce");
    op_pos note_pos = pos_of(note);
    ck_assert_int_ge(op_pos_cmp(&note_pos, &past), 0);
    noter_stats st;

    /* replies held back 1 s: the first request's note is in flight while ten more come */
    simcluster_cmd_ok(c, "admin", BCON_NEW("mongosimDelay", BCON_INT32(1000)), NULL);
    op_pos next = note_pos, later = note_pos;
    next.inc++;
    later.inc += 2;
    noter_request(n, &next);
    double until = denv_now() + WAIT_S;
    while (stats_of(n).attempts < 2 && denv_now() < until)
        sleep_ms(5);
    ck_assert_uint_eq(stats_of(n).attempts, 2);
    for (int i = 0; i < 10; i++)
        noter_request(n, &later);
    ck_assert(wait_attempts(n, 3));
    simcluster_cmd_ok(c, "admin", BCON_NEW("mongosimDelay", BCON_INT32(0)), NULL);
    sleep_ms(1500); /* what a writer that sent one note per request would be doing now */
    st = stats_of(n);
    ck_assert_uint_eq(st.requests, 12);
    ck_assert_uint_eq(st.attempts, 3);
    ck_assert_uint_eq(st.written, 3);
    ck_assert_uint_eq(st.failures, 0);

    /* a time the oplog is past: accepted, nothing written */
    bson_t *newest = newest_entry(c);
    op_pos old = {.secs = 1, .inc = 1, .term = -1};
    noter_request(n, &old);
    ck_assert(wait_attempts(n, 4));
    bson_t *still = newest_entry(c);
    ck_assert_msg(bson_equal(newest, still), "a note written for a time the oplog is past");
    noter_free(n);
    bson_destroy(first);
    bson_destroy(note);
    bson_destroy(newest);
    bson_destroy(still);
    mongoc_client_destroy(c);
}
END_TEST

/* A server without the command (CommandNotFound, as a refusal of the privilege): reported once, remembered, and
 * later requests are dropped without another attempt. */
START_TEST(test_note_refused_once)
{
    mongoc_client_t *c = mongoc_client_new(mongo_uri());
    ck_assert_ptr_nonnull(c);
    if (knows_append_oplog_note(c)) {
        mongoc_client_destroy(c);
        SKIP_TEST("needs a server that refuses appendOplogNote (this one writes it)");
    }
    char err[512] = "";
    noter_config nc = {.uri = mongo_uri(), .shard = "rs0", .service = NULL};
    noter *n = noter_start(&nc, err, sizeof err);
    ck_assert_msg(n != NULL, "%s", err);
    ck_assert(!noter_refused(n));
    op_pos past = {.secs = 1, .inc = 1, .term = -1};
    noter_request(n, &past);
    ck_assert(wait_attempts(n, 1));
    ck_assert(noter_refused(n));
    for (int i = 0; i < 5; i++)
        noter_request(n, &past);
    sleep_ms(1000); /* what a writer that retried would be doing now */
    noter_stats st = stats_of(n);
    ck_assert_uint_eq(st.requests, 6);
    ck_assert_uint_eq(st.attempts, 1);
    ck_assert_uint_eq(st.failures, 1);
    ck_assert_uint_eq(st.written, 0);
    ck_assert(st.refused);
    ck_assert_msg(strstr(st.last_error, "code 59") != NULL, "%s", st.last_error);
    noter_free(n);
    mongoc_client_destroy(c);
}
END_TEST

/* Any other failure (no primary: the server stepped down) is counted, not remembered: the next request tries again,
 * and once the primary is back the note is written. */
START_TEST(test_note_retried_after_failure)
{
    mongoc_client_t *c = mongoc_client_new(mongo_uri());
    ck_assert_ptr_nonnull(c);
    if (!oplogutil_is_mongosim(c)) {
        mongoc_client_destroy(c);
        SKIP_TEST("needs mongosim's mongosimStepDown");
    }
    bool knows = knows_append_oplog_note(c);
    char err[512] = "";
    noter_config nc = {.uri = mongo_uri(), .shard = "rs0", .service = "retry"};
    noter *n = noter_start(&nc, err, sizeof err);
    ck_assert_msg(n != NULL, "%s", err);
    /* 25 s without a primary: each attempt waits 5 s for one (the writer's server selection), so two fail */
    simcluster_cmd_ok(c, "admin", BCON_NEW("mongosimStepDown", BCON_INT32(25000)), NULL);
    noter_request(n, NULL);
    ck_assert(wait_attempts(n, 1));
    noter_stats st = stats_of(n);
    ck_assert_uint_eq(st.failures, 1);
    ck_assert(!st.refused);
    ck_assert(st.last_error[0] != '\0');
    noter_request(n, NULL);
    ck_assert(wait_attempts(n, 2));
    ck_assert_uint_eq(stats_of(n).failures, 2);
    ck_assert(!noter_refused(n));
    /* then requests until the primary is back: each one tries again */
    double until = denv_now() + 90;
    for (st = stats_of(n); st.written == 0 && !st.refused && denv_now() < until; st = stats_of(n)) {
        noter_request(n, NULL);
        ck_assert(wait_attempts(n, st.attempts + 1));
    }
    if (knows) /* written now */
        ck_assert_msg(st.written == 1, "no note once the primary was back: %s", st.last_error);
    else /* the primary answers: the refusal */
        ck_assert(st.refused);
    ck_assert_uint_eq(st.attempts, st.failures + st.written);
    noter_free(n);
    mongoc_client_destroy(c);
}
END_TEST

Suite *shard_source_suite(void)
{
    Suite *s = suite_create("shard_source");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_discover_replica_set);
    tcase_add_test(tc, test_discover_cluster);
    tcase_add_test(tc, test_note_on_a_shard);
    tcase_add_test(tc, test_note_written_and_coalesced);
    tcase_add_test(tc, test_note_refused_once);
    tcase_add_test(tc, test_note_retried_after_failure);
    suite_add_tcase(s, tc);
    return s;
}

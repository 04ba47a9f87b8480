/*
 * test_stream_sharded.c — change streams through a sharded cluster's router (mongosim --shards N), and the daemon
 * reading one (`source = change_stream` with a URI naming the routers).
 *
 * - the router merges its shards' streams in resume-token order: events from both shards come in clusterTime order,
 *   each once;
 * - an idle shard holds the merged stream: a write on one shard is not returned while the other shard writes
 *   nothing (no periodic noop), and is once it does; with a periodic noop the delay is measured and printed;
 * - a stream resumed from a merged event's token goes on with the next event, whichever shard holds it; a token no
 *   shard returns fails 280;
 * - the daemon on the router's stream: an initial copy, writes to both shards, a cross-shard transaction, chunk
 *   migrations (their fromMigrate copies and deletions are not applied), kill -9 and restart: PostgreSQL ends equal
 *   to the cluster.
 * They need the simulator: with MONGO_URI set they skip.
 */
#include <check.h>
#include <inttypes.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/daemonenv.h"
#include "../lib/shenv.h"
#include "../lib/simcluster.h"
#include "../lib/skip.h"

#define MAXEV 512

/* The events a test read from the router, copies. */
typedef struct {
    bson_t *ev[MAXEV];
    size_t n;
    int64_t id;  /* the cursor */
    bson_t pbrt; /* the last postBatchResumeToken */
    char pbrt_hex[512];
} evlist;

static void evlist_free(evlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        bson_destroy(l->ev[i]);
    l->n = 0;
    bson_destroy(&l->pbrt);
}

/* Reads a cursor reply into l; returns the number of events it held. */
static size_t take_reply(evlist *l, const bson_t *reply, const char *batch_key)
{
    bson_iter_t it, c;
    char path[64];
    snprintf(path, sizeof path, "cursor.%s", batch_key);
    ck_assert_msg(bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, "cursor.id", &c), "no cursor.id");
    l->id = bson_iter_as_int64(&c);
    size_t got = 0;
    bson_iter_t b, e;
    if (bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, path, &b) && bson_iter_recurse(&b, &e)) {
        while (bson_iter_next(&e)) {
            uint32_t len;
            const uint8_t *data;
            bson_iter_document(&e, &len, &data);
            ck_assert_uint_lt(l->n, MAXEV);
            l->ev[l->n++] = bson_new_from_data(data, len);
            got++;
        }
    }
    bson_iter_t p, d;
    ck_assert_msg(bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, "cursor.postBatchResumeToken", &p),
                  "no postBatchResumeToken");
    uint32_t len;
    const uint8_t *data;
    bson_iter_document(&p, &len, &data);
    bson_destroy(&l->pbrt);
    bson_t tmp;
    bson_init_static(&tmp, data, len);
    bson_copy_to(&tmp, &l->pbrt);
    ck_assert(bson_iter_init_find(&d, &l->pbrt, "_data") && BSON_ITER_HOLDS_UTF8(&d));
    snprintf(l->pbrt_hex, sizeof l->pbrt_hex, "%s", bson_iter_utf8(&d, NULL));
    return got;
}

/* aggregate 1 on db with [{$changeStream: spec}] (spec destroyed) through the router; false with the error's code
 * in *code when it fails. */
static bool open_stream(mongoc_client_t *c, const char *db, bson_t *spec, evlist *l, int *code)
{
    bson_t *cmd = BCON_NEW("aggregate", BCON_INT32(1), "pipeline", "[", "{", "$changeStream", BCON_DOCUMENT(spec), "}",
                           "]", "cursor", "{", "}");
    bson_destroy(spec);
    bson_t reply;
    bson_error_t err;
    memset(l, 0, sizeof *l);
    bson_init(&l->pbrt);
    bool ok = mongoc_client_command_simple(c, db, cmd, NULL, &reply, &err);
    bson_destroy(cmd);
    if (!ok) {
        *code = (int)err.code;
        bson_destroy(&reply);
        return false;
    }
    take_reply(l, &reply, "firstBatch");
    bson_destroy(&reply);
    return true;
}

/* One getMore waiting up to max_ms; returns the events it brought. */
static size_t more(mongoc_client_t *c, const char *db, evlist *l, int max_ms, int *code)
{
    bson_t *cmd = BCON_NEW("getMore", BCON_INT64(l->id), "collection", BCON_UTF8("$cmd.aggregate"), "maxTimeMS",
                           BCON_INT32(max_ms));
    bson_t reply;
    bson_error_t err;
    bool ok = mongoc_client_command_simple(c, db, cmd, NULL, &reply, &err);
    bson_destroy(cmd);
    if (!ok) {
        *code = (int)err.code;
        bson_destroy(&reply);
        return 0;
    }
    *code = 0;
    size_t n = take_reply(l, &reply, "nextBatch");
    bson_destroy(&reply);
    return n;
}

/* Reads until l holds want events (at most timeout_s). */
static void more_until(mongoc_client_t *c, const char *db, evlist *l, size_t want, double timeout_s)
{
    double until = denv_now() + timeout_s;
    while (l->n < want) {
        int code = 0;
        more(c, db, l, 1000, &code);
        ck_assert_msg(code == 0, "getMore failed: %d", code);
        ck_assert_msg(denv_now() < until, "the router's stream returned %zu events of %zu", l->n, want);
    }
}

static const char *ev_data(const bson_t *ev)
{
    bson_iter_t it, d;
    ck_assert(bson_iter_init(&it, ev) && bson_iter_find_descendant(&it, "_id._data", &d));
    return bson_iter_utf8(&d, NULL);
}

static uint64_t ev_time(const bson_t *ev)
{
    bson_iter_t it;
    uint32_t t, i;
    ck_assert(bson_iter_init_find(&it, ev, "clusterTime") && BSON_ITER_HOLDS_TIMESTAMP(&it));
    bson_iter_timestamp(&it, &t, &i);
    return (uint64_t)t << 32 | i;
}

static int ev_id(const bson_t *ev)
{
    bson_iter_t it, d;
    ck_assert(bson_iter_init(&it, ev) && bson_iter_find_descendant(&it, "documentKey._id", &d));
    return (int)bson_iter_as_int64(&d);
}

/* A cluster of two shards, DB.c sharded on _id split at 100 (the upper chunk on shard1). */
static void begin(shenv *e, const char *name, const char *const *sim_args, const char *extra_ini)
{
    shenv_opts o = {.prefix = "shs", .shards = 2, .sim_args = sim_args, .extra_ini = extra_ini};
    shenv_start(e, name, &o);
    shenv_enable_sharding(e, "shard0");
    int at = 100;
    shenv_shard_coll(e, "c", "_id", &at, 1);
}

START_TEST(test_router_merges_in_token_order)
{
    SHENV_SKIP_UNLESS_SIM();
    shenv e;
    const char *sim[] = {"--noop-interval", "1", NULL};
    begin(&e, "order", sim, NULL);
    evlist l;
    int code = 0;
    ck_assert_msg(open_stream(e.client, e.db, bson_new(), &l, &code), "aggregate failed: %d", code);
    /* alternate between the shards: 0..19 on shard0, 100..119 on shard1 */
    for (int i = 0; i < 20; i++) {
        shenv_insert(&e, "c", i, i);
        shenv_insert(&e, "c", 100 + i, i);
    }
    more_until(e.client, e.db, &l, 40, 60);
    for (size_t i = 0; i < l.n; i++) {
        int want = (int)(i % 2 == 0 ? i / 2 : 100 + i / 2);
        ck_assert_int_eq(ev_id(l.ev[i]), want);
        if (i > 0) {
            ck_assert_msg(strcmp(ev_data(l.ev[i - 1]), ev_data(l.ev[i])) < 0, "event %zu's token sorts before", i);
            ck_assert(ev_time(l.ev[i - 1]) < ev_time(l.ev[i]));
        }
    }
    /* nothing more, and the router's token is never behind the last event */
    ck_assert_int_eq((int)more(e.client, e.db, &l, 1500, &code), 0);
    ck_assert_int_eq(code, 0);
    ck_assert(strcmp(l.pbrt_hex, ev_data(l.ev[39])) >= 0);
    evlist_free(&l);
    shenv_stop(&e);
}
END_TEST

START_TEST(test_idle_shard_holds_the_merge)
{
    SHENV_SKIP_UNLESS_SIM();
    shenv e;
    begin(&e, "idle", NULL, NULL); /* no periodic noop: shard1 moves only when written */
    evlist l;
    int code = 0;
    ck_assert_msg(open_stream(e.client, e.db, bson_new(), &l, &code), "aggregate failed: %d", code);
    char before[512];
    snprintf(before, sizeof before, "%s", l.pbrt_hex);
    shenv_insert(&e, "c", 1, 1);
    /* shard1 has promised nothing past its start: the router may not return shard0's event, nor move its token */
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq((int)more(e.client, e.db, &l, 1000, &code), 0);
        ck_assert_int_eq(code, 0);
        ck_assert_str_eq(l.pbrt_hex, before);
    }
    /* a write on shard1 (later) promises shard1 has nothing older: shard0's event comes, shard1's is held by shard0 */
    shenv_insert(&e, "c", 101, 1);
    more_until(e.client, e.db, &l, 1, 30);
    ck_assert_int_eq(ev_id(l.ev[0]), 1);
    ck_assert_int_eq((int)more(e.client, e.db, &l, 1000, &code), 0);
    shenv_insert(&e, "c", 2, 2);
    more_until(e.client, e.db, &l, 2, 30);
    ck_assert_int_eq(ev_id(l.ev[1]), 101);
    evlist_free(&l);
    shenv_stop(&e);
}
END_TEST

/* With a periodic noop every 2 s, a write on one shard waits for the idle shard's noop: printed, bounded
 * generously. */
START_TEST(test_idle_shard_latency_is_the_noop_interval)
{
    SHENV_SKIP_UNLESS_SIM();
    shenv e;
    const char *sim[] = {"--noop-interval", "2", NULL};
    begin(&e, "lat", sim, NULL);
    evlist l;
    int code = 0;
    ck_assert_msg(open_stream(e.client, e.db, bson_new(), &l, &code), "aggregate failed: %d", code);
    double worst = 0, sum = 0;
    for (int k = 0; k < 3; k++) {
        double t0 = denv_now();
        shenv_insert(&e, "c", k, k);
        more_until(e.client, e.db, &l, (size_t)k + 1, 30);
        double dt = denv_now() - t0;
        sum += dt;
        worst = dt > worst ? dt : worst;
    }
    printf("router change stream, one shard idle, --noop-interval 2 s: an event waited %.2f s on average, %.2f s at "
           "most\n",
           sum / 3, worst);
    ck_assert_msg(worst < 10.0, "an event waited %.1f s for a 2 s noop", worst);
    evlist_free(&l);
    shenv_stop(&e);
}
END_TEST

START_TEST(test_resume_from_a_merged_token)
{
    SHENV_SKIP_UNLESS_SIM();
    shenv e;
    const char *sim[] = {"--noop-interval", "1", NULL};
    begin(&e, "resume", sim, NULL);
    evlist l;
    int code = 0;
    ck_assert_msg(open_stream(e.client, e.db, bson_new(), &l, &code), "aggregate failed: %d", code);
    for (int i = 0; i < 5; i++) {
        shenv_insert(&e, "c", i, i);
        shenv_insert(&e, "c", 100 + i, i);
    }
    more_until(e.client, e.db, &l, 10, 60);
    /* from each event's token the next event comes, whichever shard holds it */
    for (size_t k = 0; k + 1 < l.n; k++) {
        bson_iter_t it;
        uint32_t len;
        const uint8_t *data;
        ck_assert(bson_iter_init_find(&it, l.ev[k], "_id"));
        bson_iter_document(&it, &len, &data);
        bson_t tok;
        bson_init_static(&tok, data, len);
        bson_t *spec = bson_new();
        BSON_APPEND_DOCUMENT(spec, "resumeAfter", &tok);
        evlist r;
        ck_assert_msg(open_stream(e.client, e.db, spec, &r, &code), "resume failed: %d", code);
        more_until(e.client, e.db, &r, 1, 30);
        ck_assert_str_eq(ev_data(r.ev[0]), ev_data(l.ev[k + 1]));
        evlist_free(&r);
    }
    /* a token of another database's stream: the shards resume at its clusterTime, and the first event of this
     * database at or after it is another (ensure_resume_token_present: 280, not resumable) */
    char other[80];
    snprintf(other, sizeof other, "%s_x", e.db);
    evlist o;
    ck_assert_msg(open_stream(e.client, other, bson_new(), &o, &code), "aggregate failed: %d", code);
    mongoc_collection_t *oc = mongoc_client_get_collection(e.client, other, "c");
    bson_t *doc = BCON_NEW("_id", BCON_INT32(1));
    bson_error_t err;
    ck_assert_msg(mongoc_collection_insert_one(oc, doc, NULL, NULL, &err), "%s", err.message);
    bson_destroy(doc);
    mongoc_collection_destroy(oc);
    more_until(e.client, other, &o, 1, 30);
    shenv_insert(&e, "c", 50, 50);
    bson_iter_t it;
    uint32_t len;
    const uint8_t *data;
    ck_assert(bson_iter_init_find(&it, o.ev[0], "_id"));
    bson_iter_document(&it, &len, &data);
    bson_t tok;
    bson_init_static(&tok, data, len);
    bson_t *spec = bson_new();
    BSON_APPEND_DOCUMENT(spec, "resumeAfter", &tok);
    evlist r;
    ck_assert_msg(open_stream(e.client, e.db, spec, &r, &code), "resume failed: %d", code);
    double until = denv_now() + 30;
    while (code == 0 && r.n == 0 && denv_now() < until)
        more(e.client, e.db, &r, 1000, &code);
    ck_assert_msg(code == 280, "resuming from a token of another database: %d, %zu events", code, r.n);
    evlist_free(&r);
    evlist_free(&o);
    evlist_free(&l);
    shenv_stop(&e);
}
END_TEST

/* A transaction across both shards through the router: -1 on a, +1 on b. */
static void transfer(shenv *e, int a, int b)
{
    bson_error_t err;
    mongoc_client_session_t *s = mongoc_client_start_session(e->client, NULL, &err);
    ck_assert_msg(s, "%s", err.message);
    ck_assert_msg(mongoc_client_session_start_transaction(s, NULL, &err), "%s", err.message);
    mongoc_collection_t *coll = mongoc_client_get_collection(e->client, e->db, "c");
    bson_t opts = BSON_INITIALIZER;
    ck_assert(mongoc_client_session_append(s, &opts, &err));
    int ids[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        bson_t *q = BCON_NEW("_id", BCON_INT32(ids[k]));
        bson_t *u = BCON_NEW("$inc", "{", "v", BCON_INT32(k == 0 ? -1 : 1), "}");
        ck_assert_msg(mongoc_collection_update_one(coll, q, u, &opts, NULL, &err), "%s", err.message);
        bson_destroy(q);
        bson_destroy(u);
    }
    bson_t reply;
    ck_assert_msg(mongoc_client_session_commit_transaction(s, &reply, &err), "commit: %s", err.message);
    bson_destroy(&reply);
    bson_destroy(&opts);
    mongoc_collection_destroy(coll);
    mongoc_client_session_destroy(s);
}

START_TEST(test_daemon_through_the_router)
{
    SHENV_SKIP_UNLESS_SIM();
    shenv e;
    const char *sim[] = {"--noop-interval", "1", "--orphan-cleanup-delay", "0", NULL};
    begin(&e, "daemon", sim, "source = change_stream");
    /* an initial copy of what both shards hold */
    for (int i = 0; i < 30; i++) {
        shenv_insert(&e, "c", i, i);
        shenv_insert(&e, "c", 100 + i, i);
    }
    shenv_daemon_ready(&e, NULL);
    ck_assert(shenv_wait_equal(&e, 60, true));
    /* one change stream through the router, not a reader per shard */
    ck_assert(denv_file_contains(e.log, "reading one change stream through it"));
    ck_assert(denv_file_contains(e.log, "the change stream starts after clusterTime"));
    ck_assert(!denv_file_contains(e.log, "every shard's oplog"));
    for (int i = 30; i < 60; i++) {
        shenv_insert(&e, "c", i, i);
        shenv_insert(&e, "c", 100 + i, i);
        if (i % 5 == 0)
            shenv_update(&e, "c", 100 + i - 20, BCON_NEW("$set", "{", "u", BCON_INT32(i), "}"), false);
    }
    for (int k = 0; k < 5; k++)
        transfer(&e, k, 100 + k);
    ck_assert(shenv_wait_equal(&e, 60, true));
    /* the chunk of 100.. moves to shard0: its copy there and the deletion on shard1 are fromMigrate */
    shenv_move(&e, "c", "_id", 150, "shard0");
    for (int i = 100; i < 110; i++)
        shenv_update(&e, "c", i, BCON_NEW("$inc", "{", "v", BCON_INT32(10), "}"), false);
    shenv_delete(&e, "c", 111, false);
    ck_assert(shenv_wait_equal(&e, 60, true));
    /* kill -9 mid-stream and a restart from the committed resume token */
    for (int i = 200; i < 230; i++)
        shenv_insert(&e, "c", i, i);
    shenv_kill(&e);
    for (int k = 5; k < 10; k++)
        transfer(&e, k, 100 + k);
    shenv_move(&e, "c", "_id", 150, "shard1");
    for (int i = 230; i < 260; i++)
        shenv_insert(&e, "c", i, i);
    shenv_daemon_ready(&e, NULL);
    ck_assert(shenv_wait_equal(&e, 60, true));
    char out[512];
    ck_assert_int_eq(shenv_run(&e, "status", out, sizeof out), 0);
    ck_assert_msg(denv_file_contains(out, "change_stream") || denv_file_contains(out, "change stream"),
                  "status does not name the change-stream source (%s)", out);
    ck_assert_int_eq(shenv_run(&e, "check", out, sizeof out), 0);
    /* one position, a resume token; no shard's checkpoint */
    char sql[300];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM oplog2pg.checkpoint WHERE service = '%s' AND resume_token IS NOT NULL", e.service);
    ck_assert_int_eq(denv_pg_int(sql), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM oplog2pg.shard_checkpoint WHERE service = '%s'", e.service);
    ck_assert_int_eq(denv_pg_int(sql), 0);
    shenv_stop(&e);
}
END_TEST

/* --skip-import through the router, then a shard added to the cluster and a chunk moved onto it: the router reads it
 * from its addition on, and the daemon gets its writes with nothing else to do. */
START_TEST(test_daemon_skip_import_and_a_new_shard)
{
    SHENV_SKIP_UNLESS_SIM();
    shenv e;
    const char *sim[] = {"--noop-interval", "1", "--orphan-cleanup-delay", "0", NULL};
    begin(&e, "newshard", sim, "source = change_stream");
    const char *skip[] = {"--skip-import", NULL};
    shenv_daemon_ready(&e, skip);
    for (int i = 0; i < 20; i++) {
        shenv_insert(&e, "c", i, i);
        shenv_insert(&e, "c", 100 + i, i);
    }
    ck_assert(shenv_wait_equal(&e, 60, true));
    shenv_admin(&e, BCON_NEW("mongosimAddShard", BCON_INT32(1)), NULL);
    char err[256];
    ck_assert_msg(simcluster_refresh(&e.c, err, sizeof err), "%s", err);
    ck_assert_uint_eq(e.c.n, 3);
    shenv_move(&e, "c", "_id", 150, e.c.id[2]);
    for (int i = 100; i < 120; i++)
        shenv_update(&e, "c", i, BCON_NEW("$set", "{", "on", BCON_UTF8("new shard"), "}"), false);
    for (int i = 120; i < 140; i++)
        shenv_insert(&e, "c", i, i);
    ck_assert(shenv_wait_equal(&e, 60, true));
    /* the config never named a shard: nothing per shard was made */
    ck_assert(!denv_file_contains(e.log, "new shard"));
    shenv_stop(&e);
}
END_TEST

/* --tail-from a position through the router: the stream starts there on every shard, the event at it included. */
START_TEST(test_daemon_tail_from)
{
    SHENV_SKIP_UNLESS_SIM();
    shenv e;
    const char *sim[] = {"--noop-interval", "1", NULL};
    begin(&e, "tail", sim, "source = change_stream");
    evlist l;
    int code = 0;
    ck_assert_msg(open_stream(e.client, e.db, bson_new(), &l, &code), "aggregate failed: %d", code);
    for (int i = 0; i < 10; i++) {
        shenv_insert(&e, "c", 100 + i, i);
        shenv_insert(&e, "c", i, i);
    }
    more_until(e.client, e.db, &l, 20, 60);
    uint64_t t = ev_time(l.ev[0]);
    ck_assert_int_eq(ev_id(l.ev[0]), 100);
    char from[64];
    snprintf(from, sizeof from, "%u:%u", (unsigned)(t >> 32), (unsigned)t);
    const char *args[] = {"--tail-from", from, NULL};
    shenv_daemon_ready(&e, args);
    ck_assert(shenv_wait_equal(&e, 60, true));
    evlist_free(&l);
    shenv_stop(&e);
}
END_TEST

Suite *stream_sharded_suite(void); /* called by the generated runner list */

Suite *stream_sharded_suite(void)
{
    Suite *s = suite_create("stream_sharded");
    TCase *tc = tcase_create("router");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_router_merges_in_token_order);
    tcase_add_test(tc, test_idle_shard_holds_the_merge);
    tcase_add_test(tc, test_idle_shard_latency_is_the_noop_interval);
    tcase_add_test(tc, test_resume_from_a_merged_token);
    tcase_add_test(tc, test_daemon_through_the_router);
    tcase_add_test(tc, test_daemon_skip_import_and_a_new_shard);
    tcase_add_test(tc, test_daemon_tail_from);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_mongosim_shards.c — mongosim --shards N driven through libmongoc: the router's handshake and metadata, the
 * entries each shard's oplog gets for routed writes (the shard key in update o2 and delete o), a chunk migration
 * (the recipient's fromMigrate copies, the donor's fromMigrate range deletion, now or after --orphan-cleanup-delay,
 * the migrateChunkToNewShard / migrateLastChunkFromShard noops), appendOplogNote, the one cluster clock, two-phase
 * commit across shards, mongosimAddShard and removeShard, --oplog-read-delay. Each test starts its own cluster
 * (tests/lib/proc.h).
 */
#include <check.h>
#include <inttypes.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../lib/simcluster.h"
#include "../mongosim/hashkey.h"

Suite *mongosim_shards_suite(void);

typedef struct {
    simcluster sc;
    mongoc_client_t *router;
    mongoc_client_t *shard[8];
    int shard_port[8];
    size_t nshards;
} cluster;

static mongoc_client_t *client_for(int port, bool direct)
{
    char uri[200];
    snprintf(uri, sizeof uri, "mongodb://127.0.0.1:%d/?serverSelectionTimeoutMS=10000%s", port,
             direct ? "&directConnection=true" : "");
    mongoc_client_t *c = mongoc_client_new(uri);
    ck_assert_ptr_nonnull(c);
    return c;
}

static int port_of_host(const char *host)
{
    const char *colon = strrchr(host, ':');
    ck_assert_ptr_nonnull(colon);
    return atoi(colon + 1);
}

/* listShards: fills the shard clients by the ports their hosts name ("shardK/127.0.0.1:PORT"). */
static void connect_shards(cluster *cl)
{
    bson_t reply;
    simcluster_cmd_ok(cl->router, "admin", BCON_NEW("listShards", BCON_INT32(1)), &reply);
    bson_iter_t it, arr;
    ck_assert(bson_iter_init_find(&it, &reply, "shards") && bson_iter_recurse(&it, &arr));
    size_t n = 0;
    while (bson_iter_next(&arr)) {
        bson_iter_t d;
        ck_assert(bson_iter_recurse(&arr, &d));
        const char *id = NULL, *host = NULL;
        while (bson_iter_next(&d)) {
            if (!strcmp(bson_iter_key(&d), "_id"))
                id = bson_iter_utf8(&d, NULL);
            else if (!strcmp(bson_iter_key(&d), "host"))
                host = bson_iter_utf8(&d, NULL);
        }
        ck_assert_ptr_nonnull(id);
        ck_assert_ptr_nonnull(host);
        char want[64];
        snprintf(want, sizeof want, "shard%zu/127.0.0.1:", n);
        ck_assert_msg(strncmp(host, want, strlen(want)) == 0, "shard %zu host '%s'", n, host);
        if (n < 8 && !cl->shard[n]) {
            cl->shard_port[n] = port_of_host(host);
            cl->shard[n] = client_for(cl->shard_port[n], true);
        }
        n++;
    }
    cl->nshards = n;
    bson_destroy(&reply);
}

static void cluster_start(cluster *cl, const char *const *extra)
{
    memset(cl, 0, sizeof *cl);
    char err[512];
    ck_assert_msg(simcluster_start(2, extra, NULL, &cl->sc, err, sizeof err), "%s", err);
    ck_assert_uint_eq(cl->sc.n, 2);
    mongoc_init();
    cl->router = client_for(cl->sc.router_port, false);
    connect_shards(cl);
    ck_assert_uint_eq(cl->nshards, 2);
    ck_assert_int_eq(cl->shard_port[1], cl->sc.port[1]);
}

static void cluster_stop(cluster *cl)
{
    for (size_t i = 0; i < 8; i++)
        if (cl->shard[i])
            mongoc_client_destroy(cl->shard[i]);
    mongoc_client_destroy(cl->router);
    simcluster_stop(&cl->sc);
}

/* A shard's oplog, entries in order. */
typedef struct {
    bson_t *e[512];
    size_t n;
} entries;

static void read_oplog(mongoc_client_t *c, entries *out)
{
    out->n = 0;
    mongoc_collection_t *coll = mongoc_client_get_collection(c, "local", "oplog.rs");
    bson_t filter = BSON_INITIALIZER;
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, &filter, NULL, NULL);
    const bson_t *doc;
    while (mongoc_cursor_next(cur, &doc))
        if (out->n < 512)
            out->e[out->n++] = bson_copy(doc);
    bson_error_t err;
    ck_assert_msg(!mongoc_cursor_error(cur, &err), "oplog read: %s", err.message);
    mongoc_cursor_destroy(cur);
    bson_destroy(&filter);
    mongoc_collection_destroy(coll);
}

static void entries_free(entries *x)
{
    for (size_t i = 0; i < x->n; i++)
        bson_destroy(x->e[i]);
    x->n = 0;
}

static const char *str_at(const bson_t *d, const char *path)
{
    bson_iter_t it, f;
    if (bson_iter_init(&it, d) && bson_iter_find_descendant(&it, path, &f) && BSON_ITER_HOLDS_UTF8(&f))
        return bson_iter_utf8(&f, NULL);
    return NULL;
}

static bool has(const bson_t *d, const char *path)
{
    bson_iter_t it, f;
    return bson_iter_init(&it, d) && bson_iter_find_descendant(&it, path, &f);
}

static uint64_t ts_at(const bson_t *d, const char *path)
{
    bson_iter_t it, f;
    uint32_t s = 0, i = 0;
    if (bson_iter_init(&it, d) && bson_iter_find_descendant(&it, path, &f) && BSON_ITER_HOLDS_TIMESTAMP(&f))
        bson_iter_timestamp(&f, &s, &i);
    return ((uint64_t)s << 32) | i;
}

static int64_t int_at(const bson_t *d, const char *path)
{
    bson_iter_t it, f;
    if (bson_iter_init(&it, d) && bson_iter_find_descendant(&it, path, &f) && BSON_ITER_HOLDS_NUMBER(&f))
        return bson_iter_as_int64(&f);
    return -1;
}

/* The JSON of a document, for exact comparisons of small sub-documents. */
static char *json_at(const bson_t *d, const char *key)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, d, key) || !BSON_ITER_HOLDS_DOCUMENT(&it))
        return bson_strdup("");
    uint32_t len;
    const uint8_t *p;
    bson_iter_document(&it, &len, &p);
    bson_t sub;
    bson_init_static(&sub, p, len);
    return bson_as_canonical_extended_json(&sub, NULL);
}

static void assert_json(const bson_t *d, const char *key, const char *want)
{
    char *got = json_at(d, key);
    ck_assert_msg(strcmp(got, want) == 0, "%s: got %s, want %s", key, got, want);
    bson_free(got);
}

/* The index of the first entry from `from` with op and ns (and o._id == id when id >= 0), or -1. */
static long find_entry(const entries *x, size_t from, const char *op, const char *ns, int64_t id)
{
    for (size_t i = from; i < x->n; i++) {
        const char *o = str_at(x->e[i], "op"), *n = str_at(x->e[i], "ns");
        if (!o || !n || strcmp(o, op) || strcmp(n, ns))
            continue;
        if (id >= 0 && int_at(x->e[i], strcmp(op, "u") == 0 ? "o2._id" : "o._id") != id)
            continue;
        return (long)i;
    }
    return -1;
}

static void insert_k(mongoc_client_t *c, int64_t id, int64_t k)
{
    mongoc_collection_t *coll = mongoc_client_get_collection(c, "db", "c");
    bson_t *doc = BCON_NEW("_id", BCON_INT64(id), "k", BCON_INT64(k));
    bson_error_t err;
    ck_assert_msg(mongoc_collection_insert_one(coll, doc, NULL, NULL, &err), "insert: %s", err.message);
    bson_destroy(doc);
    mongoc_collection_destroy(coll);
}

static int64_t count_all(mongoc_client_t *c)
{
    mongoc_collection_t *coll = mongoc_client_get_collection(c, "db", "c");
    bson_t filter = BSON_INITIALIZER;
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, &filter, NULL, NULL);
    const bson_t *doc;
    int64_t n = 0, last = -1;
    while (mongoc_cursor_next(cur, &doc)) {
        int64_t id = int_at(doc, "_id");
        ck_assert_msg(id > last, "router find: _id %" PRId64 " after %" PRId64 " (duplicate or unordered)", id, last);
        last = id;
        n++;
    }
    bson_error_t err;
    ck_assert_msg(!mongoc_cursor_error(cur, &err), "find: %s", err.message);
    mongoc_cursor_destroy(cur);
    bson_destroy(&filter);
    mongoc_collection_destroy(coll);
    return n;
}

/* db.c sharded on {k: 1}, split at k 5, documents _id = k = 0..9 on shard0. */
static void shard_and_fill(cluster *cl)
{
    simcluster_cmd_ok(cl->router, "admin",
                      BCON_NEW("shardCollection", BCON_UTF8("db.c"), "key", "{", "k", BCON_INT32(1), "}"), NULL);
    simcluster_cmd_ok(cl->router, "admin", BCON_NEW("split", BCON_UTF8("db.c"), "middle", "{", "k", BCON_INT64(5), "}"),
                      NULL);
    for (int64_t i = 0; i < 10; i++)
        insert_k(cl->router, i, i);
}

static void move_chunk(cluster *cl, int64_t k, const char *to)
{
    simcluster_cmd_ok(
        cl->router, "admin",
        BCON_NEW("moveChunk", BCON_UTF8("db.c"), "find", "{", "k", BCON_INT64(k), "}", "to", BCON_UTF8(to)), NULL);
}

START_TEST(test_router_handshake_and_metadata)
{
    cluster cl;
    cluster_start(&cl, NULL);
    bson_t reply;
    simcluster_cmd_ok(cl.router, "admin", BCON_NEW("hello", BCON_INT32(1)), &reply);
    ck_assert_str_eq(str_at(&reply, "msg"), "isdbgrid");
    ck_assert(!has(&reply, "setName"));
    bson_destroy(&reply);
    for (size_t i = 0; i < 2; i++) {
        char want[16];
        snprintf(want, sizeof want, "shard%zu", i);
        simcluster_cmd_ok(cl.shard[i], "admin", BCON_NEW("hello", BCON_INT32(1)), &reply);
        ck_assert_str_eq(str_at(&reply, "setName"), want);
        bson_destroy(&reply);
    }
    shard_and_fill(&cl);
    /* config.collections and config.chunks in the 5.0+ shapes, read through the router. */
    mongoc_collection_t *colls = mongoc_client_get_collection(cl.router, "config", "collections");
    bson_t f = BSON_INITIALIZER;
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(colls, &f, NULL, NULL);
    const bson_t *doc;
    ck_assert(mongoc_cursor_next(cur, &doc));
    ck_assert_str_eq(str_at(doc, "_id"), "db.c");
    ck_assert(has(doc, "uuid") && has(doc, "lastmodEpoch") && has(doc, "timestamp") && has(doc, "unique"));
    assert_json(doc, "key", "{ \"k\" : { \"$numberInt\" : \"1\" } }");
    mongoc_cursor_destroy(cur);
    mongoc_collection_destroy(colls);
    mongoc_collection_t *chunks = mongoc_client_get_collection(cl.router, "config", "chunks");
    cur = mongoc_collection_find_with_opts(chunks, &f, NULL, NULL);
    int n = 0;
    while (mongoc_cursor_next(cur, &doc)) {
        ck_assert(has(doc, "uuid") && has(doc, "min") && has(doc, "max") && has(doc, "lastmod") &&
                  has(doc, "onCurrentShardSince") && has(doc, "history.0.validAfter"));
        ck_assert(!has(doc, "ns"));
        ck_assert_str_eq(str_at(doc, "shard"), "shard0");
        n++;
    }
    ck_assert_int_eq(n, 2);
    mongoc_cursor_destroy(cur);
    mongoc_collection_destroy(chunks);
    bson_destroy(&f);
    ck_assert_int_eq(count_all(cl.router), 10);
    /* the local database is refused through the router, as mongos refuses it (code 20, IllegalOperation) */
    bson_error_t err;
    bson_t *q = BCON_NEW("find", "oplog.rs", "limit", BCON_INT32(1));
    ck_assert(!mongoc_client_command_simple(cl.router, "local", q, NULL, &reply, &err));
    ck_assert_uint_eq(err.code, 20);
    ck_assert_msg(strstr(err.message, "Can't use 'local' database through mongos") != NULL, "%s", err.message);
    bson_destroy(&reply);
    bson_destroy(q);
    cluster_stop(&cl);
}
END_TEST

START_TEST(test_routed_writes_and_migration)
{
    cluster cl;
    cluster_start(&cl, NULL);
    shard_and_fill(&cl);
    move_chunk(&cl, 7, "shard1");
    ck_assert_int_eq(count_all(cl.router), 10);
    /* Routed writes after the move: _id 7 lives on shard1, _id 2 on shard0. */
    mongoc_collection_t *coll = mongoc_client_get_collection(cl.router, "db", "c");
    bson_error_t err;
    bson_t *q = BCON_NEW("_id", BCON_INT64(7)), *u = BCON_NEW("$set", "{", "x", BCON_INT32(1), "}");
    ck_assert_msg(mongoc_collection_update_one(coll, q, u, NULL, NULL, &err), "%s", err.message);
    bson_destroy(q);
    bson_destroy(u);
    q = BCON_NEW("_id", BCON_INT64(2));
    ck_assert_msg(mongoc_collection_delete_one(coll, q, NULL, NULL, &err), "%s", err.message);
    bson_destroy(q);
    mongoc_collection_destroy(coll);
    insert_k(cl.router, 12, 12);

    entries s0, s1;
    read_oplog(cl.shard[0], &s0);
    read_oplog(cl.shard[1], &s1);
    /* Donor: the first-chunk noop, then the range deletion of 5..9 with fromMigrate and the shard key in o. */
    long noop = find_entry(&s0, 0, "n", "db.c", -1);
    /* The first noop on db.c is shardCollection's; the migration's comes after it. */
    ck_assert_msg(noop >= 0 && has(s0.e[noop], "o2.shardCollection"), "no shardCollection noop");
    noop = find_entry(&s0, (size_t)noop + 1, "n", "db.c", -1);
    ck_assert_msg(noop >= 0, "no migrateChunkToNewShard noop on the donor");
    ck_assert_str_eq(str_at(s0.e[noop], "o2.migrateChunkToNewShard"), "db.c");
    ck_assert_str_eq(str_at(s0.e[noop], "o2.fromShardId"), "shard0");
    ck_assert_str_eq(str_at(s0.e[noop], "o2.toShardId"), "shard1");
    ck_assert(has(s0.e[noop], "ui") && has(s0.e[noop], "o.msg"));
    for (int64_t id = 5; id < 10; id++) {
        long d = find_entry(&s0, 0, "d", "db.c", id);
        ck_assert_msg(d > noop, "donor delete of %" PRId64 " missing or before the noop", id);
        ck_assert(has(s0.e[d], "fromMigrate"));
        char want[200];
        snprintf(want, sizeof want,
                 "{ \"k\" : { \"$numberLong\" : \"%" PRId64 "\" }, \"_id\" : { \"$numberLong\" : \"%" PRId64 "\" } }",
                 id, id);
        assert_json(s0.e[d], "o", want);
        /* Recipient: the copy, fromMigrate, before the donor's delete in cluster time. */
        long i = find_entry(&s1, 0, "i", "db.c", id);
        ck_assert_msg(i >= 0, "recipient insert of %" PRId64 " missing", id);
        ck_assert(has(s1.e[i], "fromMigrate"));
        ck_assert(ts_at(s1.e[i], "ts") < ts_at(s0.e[d], "ts"));
        ck_assert(ts_at(s1.e[i], "ts") > ts_at(s0.e[noop], "ts"));
    }
    long create = find_entry(&s1, 0, "c", "db.$cmd", -1);
    ck_assert_msg(create >= 0 && has(s1.e[create], "fromMigrate"), "recipient's create with fromMigrate");
    /* The same collection UUID on both shards. */
    {
        bson_iter_t a, b;
        ck_assert(bson_iter_init_find(&a, s0.e[noop], "ui") && bson_iter_init_find(&b, s1.e[create], "ui"));
        const uint8_t *pa, *pb;
        uint32_t la, lb;
        bson_subtype_t st;
        bson_iter_binary(&a, &st, &la, &pa);
        bson_iter_binary(&b, &st, &lb, &pb);
        ck_assert(la == 16 && lb == 16 && memcmp(pa, pb, 16) == 0);
    }
    /* The user's update on shard1 carries the shard key in o2; the delete on shard0 in o. */
    long upd = find_entry(&s1, 0, "u", "db.c", 7);
    ck_assert_msg(upd >= 0, "update of 7 not on shard1");
    ck_assert(!has(s1.e[upd], "fromMigrate"));
    assert_json(s1.e[upd], "o2", "{ \"k\" : { \"$numberLong\" : \"7\" }, \"_id\" : { \"$numberLong\" : \"7\" } }");
    long del = find_entry(&s0, 0, "d", "db.c", 2);
    ck_assert_msg(del >= 0 && !has(s0.e[del], "fromMigrate"), "user delete of 2 on shard0");
    assert_json(s0.e[del], "o", "{ \"k\" : { \"$numberLong\" : \"2\" }, \"_id\" : { \"$numberLong\" : \"2\" } }");
    ck_assert_int_ge(find_entry(&s1, 0, "i", "db.c", 12), 0);
    ck_assert_int_lt(find_entry(&s0, 0, "i", "db.c", 12), 0);
    entries_free(&s0);
    entries_free(&s1);

    /* An upsert that names the shard key goes to its chunk's shard; the new document has the key. */
    coll = mongoc_client_get_collection(cl.router, "db", "c");
    q = BCON_NEW("_id", BCON_INT64(30), "k", BCON_INT64(60));
    u = BCON_NEW("$set", "{", "y", BCON_INT32(1), "}");
    bson_t *uo = BCON_NEW("upsert", BCON_BOOL(true));
    ck_assert_msg(mongoc_collection_update_one(coll, q, u, uo, NULL, &err), "%s", err.message);
    bson_destroy(q);
    bson_destroy(u);
    bson_destroy(uo);
    mongoc_collection_destroy(coll);
    read_oplog(cl.shard[1], &s1);
    long ups = find_entry(&s1, 0, "i", "db.c", 30);
    ck_assert_msg(ups >= 0, "upsert not on shard1");
    ck_assert_int_eq(int_at(s1.e[ups], "o.k"), 60);
    entries_free(&s1);

    /* Moving the last chunk off shard0: migrateLastChunkFromShard on the donor. */
    move_chunk(&cl, 0, "shard1");
    read_oplog(cl.shard[0], &s0);
    bool last = false;
    for (size_t i = 0; i < s0.n; i++)
        if (has(s0.e[i], "o2.migrateLastChunkFromShard")) {
            ck_assert_str_eq(str_at(s0.e[i], "o2.migrateLastChunkFromShard"), "db.c");
            ck_assert_str_eq(str_at(s0.e[i], "o2.shardId"), "shard0");
            ck_assert_str_eq(str_at(s0.e[i], "op"), "n");
            last = true;
        }
    ck_assert_msg(last, "no migrateLastChunkFromShard noop");
    entries_free(&s0);
    ck_assert_int_eq(count_all(cl.router), 11); /* 10 - _id 2 + _id 12 + _id 30 */
    cluster_stop(&cl);
}
END_TEST

START_TEST(test_orphan_cleanup_delay)
{
    cluster cl;
    const char *extra[] = {"--orphan-cleanup-delay", "1", NULL};
    cluster_start(&cl, extra);
    shard_and_fill(&cl);
    move_chunk(&cl, 7, "shard1");
    entries s0;
    read_oplog(cl.shard[0], &s0);
    ck_assert_msg(find_entry(&s0, 0, "d", "db.c", 5) < 0, "range deleted before the delay");
    entries_free(&s0);
    /* The orphans stay on shard0 meanwhile; the router returns each document once, also from a resumed copy's
     * find (min on the _id index). */
    ck_assert_int_eq(count_all(cl.router), 10);
    {
        mongoc_collection_t *coll = mongoc_client_get_collection(cl.router, "db", "c");
        bson_t filter = BSON_INITIALIZER;
        bson_t *opts = BCON_NEW("sort", "{", "_id", BCON_INT32(1), "}", "min", "{", "_id", BCON_INT64(4), "}", "hint",
                                "{", "_id", BCON_INT32(1), "}", "batchSize", BCON_INT64(2));
        mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, &filter, opts, NULL);
        const bson_t *doc;
        int64_t want = 4;
        while (mongoc_cursor_next(cur, &doc))
            ck_assert_int_eq(int_at(doc, "_id"), want++);
        bson_error_t err;
        ck_assert_msg(!mongoc_cursor_error(cur, &err), "%s", err.message);
        ck_assert_int_eq(want, 10);
        mongoc_cursor_destroy(cur);
        bson_destroy(opts);
        bson_destroy(&filter);
        mongoc_collection_destroy(coll);
    }
    long d = -1;
    for (int tries = 0; tries < 100 && d < 0; tries++) {
        usleep(100 * 1000);
        read_oplog(cl.shard[0], &s0);
        d = find_entry(&s0, 0, "d", "db.c", 9);
        if (d >= 0)
            ck_assert(has(s0.e[d], "fromMigrate"));
        entries_free(&s0);
    }
    ck_assert_msg(d >= 0, "the delayed range deletion never came");
    cluster_stop(&cl);
}
END_TEST

START_TEST(test_cluster_clock_orders_shards)
{
    cluster cl;
    cluster_start(&cl, NULL);
    shard_and_fill(&cl);
    move_chunk(&cl, 7, "shard1");
    /* Alternate writes between the shards: _id 100 + i on shard (i % 2). */
    for (int64_t i = 0; i < 20; i++)
        insert_k(cl.router, 100 + i, i % 2 ? 50 + i : -50 - i);
    entries s0, s1;
    read_oplog(cl.shard[0], &s0);
    read_oplog(cl.shard[1], &s1);
    uint64_t prev = 0;
    for (int64_t i = 0; i < 20; i++) {
        entries *x = i % 2 ? &s1 : &s0;
        long at = find_entry(x, 0, "i", "db.c", 100 + i);
        ck_assert_msg(at >= 0, "insert %" PRId64 " not on shard%d", 100 + i, (int)(i % 2));
        uint64_t ts = ts_at(x->e[at], "ts");
        ck_assert_msg(ts > prev, "write %" PRId64 " has a ts not after the previous write's on the other shard", i);
        prev = ts;
    }
    entries_free(&s0);
    entries_free(&s1);
    cluster_stop(&cl);
}
END_TEST

START_TEST(test_append_oplog_note)
{
    cluster cl;
    cluster_start(&cl, NULL);
    simcluster_cmd_ok(
        cl.shard[1], "admin",
        BCON_NEW("appendOplogNote", BCON_INT32(1), "data", "{", "oplog2pg", "{", "n", BCON_INT32(1), "}", "}"), NULL);
    entries s1;
    read_oplog(cl.shard[1], &s1);
    const bson_t *e = s1.e[s1.n - 1];
    ck_assert_str_eq(str_at(e, "op"), "n");
    ck_assert_str_eq(str_at(e, "ns"), "");
    assert_json(e, "o", "{ \"oplog2pg\" : { \"n\" : { \"$numberInt\" : \"1\" } } }");
    size_t before = s1.n;
    entries_free(&s1);
    /* The shard as a replica set of its own name (the URI the daemon's reader uses): the same oplog. */
    char uri[200];
    simcluster_shard_uri(&cl.sc, 1, uri, sizeof uri);
    ck_assert(strstr(uri, "replicaSet=shard1") != NULL);
    mongoc_client_t *rs = mongoc_client_new(uri);
    ck_assert_ptr_nonnull(rs);
    read_oplog(rs, &s1);
    ck_assert_uint_eq(s1.n, before);
    entries_free(&s1);
    mongoc_client_destroy(rs);
    /* maxClusterTime at or before the last applied optime: nothing is written. */
    simcluster_cmd_ok(cl.shard[1], "admin",
                      BCON_NEW("appendOplogNote", BCON_INT32(1), "data", "{", "x", BCON_INT32(1), "}", "maxClusterTime",
                               BCON_TIMESTAMP(1, 1)),
                      NULL);
    read_oplog(cl.shard[1], &s1);
    ck_assert_uint_eq(s1.n, before);
    entries_free(&s1);
    /* Only on admin. */
    bson_error_t err;
    bson_t reply;
    bson_t *cmd = BCON_NEW("appendOplogNote", BCON_INT32(1), "data", "{", "x", BCON_INT32(1), "}");
    ck_assert(!mongoc_client_command_simple(cl.shard[1], "db", cmd, NULL, &reply, &err));
    ck_assert_uint_eq(err.code, 13);
    bson_destroy(cmd);
    bson_destroy(&reply);
    cluster_stop(&cl);
}
END_TEST

START_TEST(test_two_phase_commit)
{
    cluster cl;
    cluster_start(&cl, NULL);
    shard_and_fill(&cl);
    move_chunk(&cl, 7, "shard1");
    simcluster_txn_inc_two(cl.router, 1, 6, true); /* shard0 first: the coordinator */
    entries s0, s1;
    read_oplog(cl.shard[0], &s0);
    read_oplog(cl.shard[1], &s1);
    long ci = find_entry(&s0, 0, "i", "config.transaction_coordinators", -1);
    ck_assert_msg(ci >= 0, "no coordinator document");
    ck_assert_int_lt(find_entry(&s0, (size_t)ci + 1, "i", "config.transaction_coordinators", -1), 0);
    ck_assert_str_eq(str_at(s0.e[ci], "o.participants.0"), "shard0");
    ck_assert_str_eq(str_at(s0.e[ci], "o.participants.1"), "shard1");
    ck_assert(has(s0.e[ci], "o._id.lsid.id") && has(s0.e[ci], "o._id.txnNumber"));
    long p0 = find_entry(&s0, (size_t)ci, "c", "admin.$cmd", -1), p1 = find_entry(&s1, 0, "c", "admin.$cmd", -1);
    ck_assert(p0 >= 0 && p1 >= 0);
    ck_assert(has(s0.e[p0], "o.prepare") && has(s1.e[p1], "o.prepare"));
    ck_assert(has(s0.e[p0], "lsid") && has(s0.e[p0], "txnNumber"));
    ck_assert(ts_at(s0.e[p0], "ts") > ts_at(s0.e[ci], "ts"));
    long cd = find_entry(&s0, (size_t)ci + 1, "u", "config.transaction_coordinators", -1);
    ck_assert_msg(cd >= 0, "no decision");
    ck_assert_str_eq(str_at(s0.e[cd], "o.diff.i.decision.decision"), "commit");
    uint64_t commit_ts = ts_at(s0.e[cd], "o.diff.i.decision.commitTimestamp");
    uint64_t pmax = ts_at(s0.e[p0], "ts") > ts_at(s1.e[p1], "ts") ? ts_at(s0.e[p0], "ts") : ts_at(s1.e[p1], "ts");
    ck_assert(commit_ts == pmax);
    long c0 = find_entry(&s0, (size_t)p0 + 1, "c", "admin.$cmd", -1),
         c1 = find_entry(&s1, (size_t)p1 + 1, "c", "admin.$cmd", -1);
    ck_assert(c0 >= 0 && c1 >= 0);
    ck_assert(has(s0.e[c0], "o.commitTransaction") && has(s1.e[c1], "o.commitTransaction"));
    ck_assert(ts_at(s0.e[c0], "o.commitTimestamp") == commit_ts);
    ck_assert(ts_at(s1.e[c1], "o.commitTimestamp") == commit_ts);
    ck_assert(ts_at(s0.e[c0], "ts") > ts_at(s0.e[cd], "ts") && ts_at(s1.e[c1], "ts") > ts_at(s0.e[cd], "ts"));
    long dd = find_entry(&s0, (size_t)cd + 1, "d", "config.transaction_coordinators", -1);
    ck_assert_msg(dd > c0, "coordinator document not deleted after the commit");
    /* The prepared operations carry the shard key in o2. */
    ck_assert_int_eq(int_at(s1.e[p1], "o.applyOps.0.o2.k"), 6);
    size_t n0 = s0.n, n1 = s1.n;
    entries_free(&s0);
    entries_free(&s1);
    /* A single-shard transaction commits without 2PC: one applyOps, no prepare, nothing on the other shard. */
    simcluster_txn_inc_two(cl.router, 6, 8, true);
    read_oplog(cl.shard[0], &s0);
    read_oplog(cl.shard[1], &s1);
    ck_assert_uint_eq(s0.n, n0);
    ck_assert_uint_eq(s1.n, n1 + 1);
    ck_assert(has(s1.e[s1.n - 1], "o.applyOps") && !has(s1.e[s1.n - 1], "o.prepare"));
    entries_free(&s0);
    entries_free(&s1);
    cluster_stop(&cl);
}
END_TEST

/* A participant that cannot prepare (mongosim's WriteConflict: a document the transaction wrote was changed by
 * another client) makes the coordinator decide abort: the prepared participant logs abortTransaction, the client gets
 * 251 NoSuchTransaction labelled TransientTransactionError. */
START_TEST(test_two_phase_commit_abort)
{
    cluster cl;
    cluster_start(&cl, NULL);
    shard_and_fill(&cl);
    move_chunk(&cl, 7, "shard1");
    bson_error_t err;
    mongoc_client_session_t *s = mongoc_client_start_session(cl.router, NULL, &err);
    ck_assert_msg(s, "%s", err.message);
    ck_assert(mongoc_client_session_start_transaction(s, NULL, &err));
    mongoc_collection_t *coll = mongoc_client_get_collection(cl.router, "db", "c");
    bson_t opts = BSON_INITIALIZER;
    ck_assert(mongoc_client_session_append(s, &opts, &err));
    int64_t ids[2] = {1, 6};
    for (int i = 0; i < 2; i++) {
        bson_t *q = BCON_NEW("_id", BCON_INT64(ids[i])), *u = BCON_NEW("$inc", "{", "v", BCON_INT32(1), "}");
        ck_assert_msg(mongoc_collection_update_one(coll, q, u, &opts, NULL, &err), "%s", err.message);
        bson_destroy(q);
        bson_destroy(u);
    }
    /* Outside the transaction: _id 6 changes on shard1. */
    bson_t *q = BCON_NEW("_id", BCON_INT64(6)), *u = BCON_NEW("$set", "{", "w", BCON_INT32(1), "}");
    ck_assert_msg(mongoc_collection_update_one(coll, q, u, NULL, NULL, &err), "%s", err.message);
    bson_destroy(q);
    bson_destroy(u);
    bson_t reply;
    ck_assert(!mongoc_client_session_commit_transaction(s, &reply, &err));
    ck_assert_uint_eq(err.code, 251);
    ck_assert(mongoc_error_has_label(&reply, "TransientTransactionError"));
    bson_destroy(&reply);
    bson_destroy(&opts);
    mongoc_collection_destroy(coll);
    mongoc_client_session_destroy(s);
    entries s0, s1;
    read_oplog(cl.shard[0], &s0);
    read_oplog(cl.shard[1], &s1);
    long p0 = find_entry(&s0, 0, "c", "admin.$cmd", -1);
    ck_assert_msg(p0 >= 0 && has(s0.e[p0], "o.prepare"), "shard0 did not prepare");
    long cd = find_entry(&s0, 0, "u", "config.transaction_coordinators", -1);
    ck_assert(cd > p0);
    ck_assert_str_eq(str_at(s0.e[cd], "o.diff.i.decision.decision"), "abort");
    ck_assert(!has(s0.e[cd], "o.diff.i.decision.commitTimestamp"));
    ck_assert_int_eq(int_at(s0.e[cd], "o.diff.i.decision.abortStatus.code"), 112);
    long a0 = find_entry(&s0, (size_t)p0 + 1, "c", "admin.$cmd", -1);
    ck_assert_msg(a0 > cd && has(s0.e[a0], "o.abortTransaction"), "shard0 did not log abortTransaction");
    ck_assert_int_lt(find_entry(&s1, 0, "c", "admin.$cmd", -1), 0);
    ck_assert_int_ge(find_entry(&s0, (size_t)a0, "d", "config.transaction_coordinators", -1), 0);
    entries_free(&s0);
    entries_free(&s1);
    cluster_stop(&cl);
}
END_TEST

/* A prepare held open across shards, driven on the shards directly (tests/mongosim/README.md): the prepared write is
 * invisible through the router until the commits with one commitTimestamp. */
START_TEST(test_prepare_held_open_on_shards)
{
    cluster cl;
    cluster_start(&cl, NULL);
    shard_and_fill(&cl);
    move_chunk(&cl, 7, "shard1");
    uint8_t id[16];
    for (int i = 0; i < 16; i++)
        id[i] = (uint8_t)(0x40 + i);
    int64_t docs[2] = {1, 7};
    uint64_t pts[2];
    for (int k = 0; k < 2; k++) {
        bson_t *cmd = BCON_NEW("update", BCON_UTF8("c"), "updates", "[", "{", "q", "{", "_id", BCON_INT64(docs[k]), "}",
                               "u", "{", "$set", "{", "held", BCON_BOOL(true), "}", "}", "}", "]", "lsid", "{", "id",
                               BCON_BIN(BSON_SUBTYPE_UUID, id, 16), "}", "txnNumber", BCON_INT64(1), "autocommit",
                               BCON_BOOL(false), "startTransaction", BCON_BOOL(true));
        simcluster_cmd_ok(cl.shard[k], "db", cmd, NULL);
        bson_t reply;
        cmd = BCON_NEW("prepareTransaction", BCON_INT32(1), "lsid", "{", "id", BCON_BIN(BSON_SUBTYPE_UUID, id, 16), "}",
                       "txnNumber", BCON_INT64(1), "autocommit", BCON_BOOL(false));
        simcluster_cmd_ok(cl.shard[k], "admin", cmd, &reply);
        pts[k] = ts_at(&reply, "prepareTimestamp");
        ck_assert(pts[k] != 0);
        bson_destroy(&reply);
    }
    /* Undecided: the router reads the committed documents. */
    mongoc_collection_t *coll = mongoc_client_get_collection(cl.router, "db", "c");
    ck_assert_int_eq(count_all(cl.router), 10);
    for (int k = 0; k < 2; k++) {
        bson_t *byid = BCON_NEW("_id", BCON_INT64(docs[k]));
        mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, byid, NULL, NULL);
        const bson_t *doc;
        ck_assert(mongoc_cursor_next(cur, &doc));
        ck_assert_msg(!has(doc, "held"), "a prepared write is visible before the commit");
        mongoc_cursor_destroy(cur);
        bson_destroy(byid);
    }
    uint64_t ct = pts[0] > pts[1] ? pts[0] : pts[1];
    for (int k = 0; k < 2; k++) {
        bson_t *cmd = BCON_NEW("commitTransaction", BCON_INT32(1), "commitTimestamp",
                               BCON_TIMESTAMP((uint32_t)(ct >> 32), (uint32_t)ct), "lsid", "{", "id",
                               BCON_BIN(BSON_SUBTYPE_UUID, id, 16), "}", "txnNumber", BCON_INT64(1), "autocommit",
                               BCON_BOOL(false));
        simcluster_cmd_ok(cl.shard[k], "admin", cmd, NULL);
    }
    for (int k = 0; k < 2; k++) {
        bson_t *byid = BCON_NEW("_id", BCON_INT64(docs[k]));
        mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, byid, NULL, NULL);
        const bson_t *doc;
        ck_assert(mongoc_cursor_next(cur, &doc));
        ck_assert(has(doc, "held"));
        mongoc_cursor_destroy(cur);
        bson_destroy(byid);
        entries x;
        read_oplog(cl.shard[k], &x);
        const bson_t *last = x.e[x.n - 1];
        ck_assert(has(last, "o.commitTransaction"));
        ck_assert(ts_at(last, "o.commitTimestamp") == ct);
        entries_free(&x);
    }
    mongoc_collection_destroy(coll);
    cluster_stop(&cl);
}
END_TEST

/* A hashed shard key on an empty collection: four chunks split at -2^62+2, 0, 2^62-2 (two per shard), documents placed
 * by the hash of their key (seed 0), the shardCollection noop on the primary and the participant's create. */
START_TEST(test_hashed_shard_key)
{
    cluster cl;
    cluster_start(&cl, NULL);
    simcluster_cmd_ok(cl.router, "admin",
                      BCON_NEW("shardCollection", BCON_UTF8("db.h"), "key", "{", "k", BCON_UTF8("hashed"), "}"), NULL);
    mongoc_collection_t *chunks = mongoc_client_get_collection(cl.router, "config", "chunks");
    bson_t f = BSON_INITIALIZER;
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(chunks, &f, NULL, NULL);
    const bson_t *doc;
    const int64_t want_max[3] = {-4611686018427387902LL, 0, 4611686018427387902LL};
    const char *want_shard[4] = {"shard0", "shard0", "shard1", "shard1"};
    int n = 0;
    while (mongoc_cursor_next(cur, &doc)) {
        ck_assert_int_lt(n, 4);
        if (n < 3)
            ck_assert_int_eq(int_at(doc, "max.k"), want_max[n]);
        ck_assert_str_eq(str_at(doc, "shard"), want_shard[n]);
        n++;
    }
    ck_assert_int_eq(n, 4);
    mongoc_cursor_destroy(cur);
    bson_destroy(&f);
    mongoc_collection_destroy(chunks);
    mongoc_collection_t *coll = mongoc_client_get_collection(cl.router, "db", "h");
    for (int64_t i = 0; i < 40; i++) {
        bson_t *d = BCON_NEW("_id", BCON_INT64(i), "k", BCON_INT64(i));
        bson_error_t err;
        ck_assert_msg(mongoc_collection_insert_one(coll, d, NULL, NULL, &err), "%s", err.message);
        bson_destroy(d);
    }
    mongoc_collection_destroy(coll);
    entries s0, s1;
    read_oplog(cl.shard[0], &s0);
    read_oplog(cl.shard[1], &s1);
    int on[2] = {0, 0};
    for (int64_t i = 0; i < 40; i++) {
        bson_t *k = BCON_NEW("k", BCON_INT64(i));
        bson_iter_t it;
        ck_assert(bson_iter_init_find(&it, k, "k"));
        int want = hashkey_hash64(&it, 0) < 0 ? 0 : 1;
        bson_destroy(k);
        ck_assert_msg(find_entry(want ? &s1 : &s0, 0, "i", "db.h", i) >= 0, "doc %" PRId64 " not on shard%d", i, want);
        ck_assert_int_lt(find_entry(want ? &s0 : &s1, 0, "i", "db.h", i), 0);
        on[want]++;
    }
    ck_assert(on[0] > 0 && on[1] > 0);
    long noop = find_entry(&s0, 0, "n", "db.h", -1);
    ck_assert_msg(noop >= 0, "no shardCollection noop on the primary");
    ck_assert_str_eq(str_at(s0.e[noop], "o2.shardCollection"), "db.h");
    ck_assert_str_eq(str_at(s0.e[noop], "o2.shardKey.k"), "hashed");
    long create = find_entry(&s1, 0, "c", "db.$cmd", -1);
    ck_assert_msg(create >= 0 && has(s1.e[create], "fromMigrate"), "participant create");
    entries_free(&s0);
    entries_free(&s1);
    cluster_stop(&cl);
}
END_TEST

START_TEST(test_add_and_remove_shard)
{
    cluster cl;
    cluster_start(&cl, NULL);
    shard_and_fill(&cl);
    bson_t reply;
    simcluster_cmd_ok(cl.router, "admin", BCON_NEW("mongosimAddShard", BCON_INT32(1)), &reply);
    ck_assert_str_eq(str_at(&reply, "shardAdded"), "shard2");
    bson_destroy(&reply);
    connect_shards(&cl);
    ck_assert_uint_eq(cl.nshards, 3);
    move_chunk(&cl, 7, "shard2");
    entries s2;
    read_oplog(cl.shard[2], &s2);
    ck_assert_int_ge(find_entry(&s2, 0, "i", "db.c", 7), 0);
    entries_free(&s2);
    simcluster_cmd_ok(cl.router, "admin", BCON_NEW("removeShard", BCON_UTF8("shard2")), &reply);
    ck_assert_str_eq(str_at(&reply, "state"), "started");
    bson_destroy(&reply);
    /* Drained: its chunk moved off, its documents deleted (fromMigrate), migrateLastChunkFromShard written. */
    read_oplog(cl.shard[2], &s2);
    long d = find_entry(&s2, 0, "d", "db.c", 7);
    ck_assert(d >= 0 && has(s2.e[d], "fromMigrate"));
    bool last = false;
    for (size_t i = 0; i < s2.n; i++)
        last = last || has(s2.e[i], "o2.migrateLastChunkFromShard");
    ck_assert(last);
    entries_free(&s2);
    simcluster_cmd_ok(cl.router, "admin", BCON_NEW("removeShard", BCON_UTF8("shard2")), &reply);
    ck_assert_str_eq(str_at(&reply, "state"), "completed");
    bson_destroy(&reply);
    for (size_t i = 0; i < 8; i++)
        if (cl.shard[i]) {
            mongoc_client_destroy(cl.shard[i]);
            cl.shard[i] = NULL;
        }
    connect_shards(&cl);
    ck_assert_uint_eq(cl.nshards, 2);
    ck_assert_int_eq(count_all(cl.router), 10);
    cluster_stop(&cl);
}
END_TEST

START_TEST(test_periodic_noop_per_shard)
{
    cluster cl;
    const char *extra[] = {"--noop-interval", "0.5", NULL};
    cluster_start(&cl, extra);
    bool seen[2] = {false, false};
    for (int tries = 0; tries < 100 && !(seen[0] && seen[1]); tries++) {
        usleep(100 * 1000);
        for (int s = 0; s < 2; s++) {
            entries x;
            read_oplog(cl.shard[s], &x);
            for (size_t i = 0; i < x.n; i++) {
                const char *m = str_at(x.e[i], "o.msg");
                seen[s] = seen[s] || (m && strcmp(m, "periodic noop") == 0);
            }
            entries_free(&x);
        }
    }
    ck_assert_msg(seen[0] && seen[1], "periodic noops: shard0 %d shard1 %d", seen[0], seen[1]);
    cluster_stop(&cl);
}
END_TEST

/* The delays a member drew for its oplog reads so far (mongosimStatus): how many replies, and their sum in ms. */
static void read_delays(mongoc_client_t *c, int64_t *n, int64_t *total_ms)
{
    bson_t reply;
    simcluster_cmd_ok(c, "admin", BCON_NEW("mongosimStatus", BCON_INT32(1)), &reply);
    *n = int_at(&reply, "oplogReadsDelayed");
    *total_ms = int_at(&reply, "oplogReadDelayTotalMS");
    bson_destroy(&reply);
}

/* --oplog-read-delay: each shard holds back its oplog replies by random delays of its own (the two shards' sums
 * differ), writes and collection reads are never held, and the same --seed draws the same delays again. */
START_TEST(test_oplog_read_delay)
{
    int64_t sums[2][2];
    for (int run = 0; run < 2; run++) {
        cluster cl;
        const char *extra[] = {"--oplog-read-delay", "40", "--seed", "12345", NULL};
        cluster_start(&cl, extra);
        shard_and_fill(&cl);
        ck_assert_int_eq(count_all(cl.router), 10);
        for (int s = 0; s < 2; s++) { /* writes and collection reads are never held */
            int64_t n, total;
            read_delays(cl.shard[s], &n, &total);
            ck_assert_int_eq(n, 0);
            ck_assert_int_eq(total, 0);
        }
        for (int s = 0; s < 2; s++) {
            for (int k = 0; k < 6; k++) {
                entries x;
                read_oplog(cl.shard[s], &x);
                ck_assert_uint_gt(x.n, 0);
                entries_free(&x);
            }
            int64_t n, total;
            read_delays(cl.shard[s], &n, &total);
            ck_assert_int_ge(n, 6); /* each read: at least its find */
            ck_assert_int_le(total, n * 40);
            ck_assert_int_gt(total, 0);
            sums[run][s] = total;
        }
        cluster_stop(&cl);
    }
    ck_assert_int_ne(sums[0][0], sums[0][1]);
    ck_assert_int_eq(sums[0][0], sums[1][0]);
    ck_assert_int_eq(sums[0][1], sums[1][1]);
    /* Without the option nothing is held. */
    cluster cl;
    cluster_start(&cl, NULL);
    entries x;
    read_oplog(cl.shard[0], &x);
    entries_free(&x);
    int64_t n, total;
    read_delays(cl.shard[0], &n, &total);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(total, 0);
    cluster_stop(&cl);
}
END_TEST

Suite *mongosim_shards_suite(void)
{
    Suite *s = suite_create("mongosim_shards");
    TCase *tc = tcase_create("cluster");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_router_handshake_and_metadata);
    tcase_add_test(tc, test_routed_writes_and_migration);
    tcase_add_test(tc, test_orphan_cleanup_delay);
    tcase_add_test(tc, test_cluster_clock_orders_shards);
    tcase_add_test(tc, test_append_oplog_note);
    tcase_add_test(tc, test_two_phase_commit);
    tcase_add_test(tc, test_two_phase_commit_abort);
    tcase_add_test(tc, test_prepare_held_open_on_shards);
    tcase_add_test(tc, test_hashed_shard_key);
    tcase_add_test(tc, test_add_and_remove_shard);
    tcase_add_test(tc, test_periodic_noop_per_shard);
    tcase_add_test(tc, test_oplog_read_delay);
    suite_add_tcase(s, tc);
    return s;
}

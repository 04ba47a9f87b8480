/*
 * test_sharded.c — the daemon on a sharded cluster (mongosim --shards N, tests/mongosim/README.md "Sharded
 * cluster"): one reader per shard, merged in cluster-time order, one checkpoint per shard.
 *
 * - a workload that moves chunks between the shards while it updates the same documents (the same fields on both
 *   sides of each move) ends equal to MongoDB, through several kill -9 of the daemon, with each shard's oplog reads
 *   answered after a random delay (a seeded run: OPLOG2PG_TEST_SEED replays it); the migrations' copies and
 *   deletions (fromMigrate) are never applied;
 * - transfers between documents on different shards, each a transaction committed by two-phase commit, keep a sum
 *   constant in PostgreSQL at every moment the test samples it;
 * - a write on one shard while the other is idle (no periodic noop) is applied once the daemon writes an oplog note
 *   into the idle shard;
 * - every shard has its row in oplog2pg.shard_checkpoint, and `status` shows one section per shard;
 * - an op PostgreSQL refuses, with another shard's note after it in cluster time, is set aside once, and every entry
 *   after it arrives.
 * They need the simulator (a real cluster would need MONGO_URI to name its routers): with MONGO_URI set they skip.
 */
#include <check.h>
#include <inttypes.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../lib/daemonenv.h"
#include "../lib/shenv.h"
#include "../lib/simcluster.h"
#include "../lib/skip.h"

/* A cluster of `shards` shards for the case `name` (service and database shd_NAME). */
static void sh_start(shenv *e, const char *name, size_t shards, const char *const *sim_args, const char *extra_ini)
{
    shenv_opts o = {.prefix = "shd", .shards = shards, .sim_args = sim_args, .extra_ini = extra_ini};
    shenv_start(e, name, &o);
}

/* db.coll sharded on _id, split at `at`, the upper chunk on shard1. */
static void sh_shard_coll(shenv *e, const char *coll, int at)
{
    shenv_enable_sharding(e, "shard0");
    shenv_shard_coll(e, coll, "_id", &at, 1);
}

/* The start of most cases: skip on a real replica set (true: skipped, return), else a cluster of two shards, `coll`
 * sharded on _id split at 100 (the upper chunk on shard1) when coll is not NULL, the daemon started with
 * --skip-import and ready. */
static bool sh_skip_or_begin(shenv *e, const char *name, const char *coll, const char *extra_ini)
{
    if (!denv_using_sim()) {
        skip_record("a sharded cluster: mongosim --shards (MONGO_URI names a replica set)");
        return true;
    }
    sh_start(e, name, 2, NULL, extra_ini);
    if (coll != NULL)
        sh_shard_coll(e, coll, 100);
    const char *skip[] = {"--skip-import", NULL};
    shenv_daemon_ready(e, skip);
    return false;
}

/* The seed of a randomised case: OPLOG2PG_TEST_SEED=N replays run N, =random draws one; unset, the same every run
 * (a failure in make check is never a roll of the dice). */
static uint64_t sh_seed(void)
{
    const char *s = getenv("OPLOG2PG_TEST_SEED");
    if (s == NULL || *s == '\0')
        return 3232;
    if (strcmp(s, "random") != 0)
        return strtoull(s, NULL, 10);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000003u + (uint64_t)ts.tv_nsec;
}

/* Each shard answers its oplog reads after a random 0..SH_READ_DELAY_MS ms (mongosim --oplog-read-delay), so the
 * daemon's readers fall behind each other by amounts that change at every read.
 * OPLOG2PG_TEST_SHARD_READ_DELAY_MS overrides it (0: no delay). */
#define SH_READ_DELAY_MS 200

START_TEST(test_migrations_with_updates_and_kills)
{
    SHENV_SKIP_UNLESS_SIM();
    uint64_t seed64 = sh_seed();
    const char *d_env = getenv("OPLOG2PG_TEST_SHARD_READ_DELAY_MS");
    long delay_ms = d_env != NULL && *d_env != '\0' ? strtol(d_env, NULL, 10) : SH_READ_DELAY_MS;
    char seed_arg[32], delay_arg[32];
    snprintf(seed_arg, sizeof seed_arg, "%" PRIu64, seed64);
    snprintf(delay_arg, sizeof delay_arg, "%ld", delay_ms);
    printf("sharded migrations: seed %" PRIu64 ", oplog reads delayed 0..%ld ms (OPLOG2PG_TEST_SEED=%" PRIu64
           " replays it)\n",
           seed64, delay_ms, seed64);
    fflush(stdout);
    shenv e;
    const char *sim[] = {"--orphan-cleanup-delay", "0", "--oplog-read-delay", delay_arg, "--seed", seed_arg, NULL};
    sh_start(&e, "mig", 2, sim, "shard_note_after = 50ms");
    sh_shard_coll(&e, "c", 100);
    const char *skip[] = {"--skip-import", NULL};
    shenv_daemon_ready(&e, skip);
    for (int i = 0; i < 200; i++)
        shenv_insert(&e, "c", i, i);
    unsigned seed = (unsigned)(seed64 ^ (seed64 >> 32));
    int kills = 0;
    for (int round = 0; round < 12; round++) {
        /* The chunk of 100..199 moves to the other shard while its documents are updated before and after. */
        for (int k = 0; k < 30; k++) {
            int id = 100 + (int)(rand_r(&seed) % 100);
            shenv_update(&e, "c", id,
                         BCON_NEW("$inc", "{", "v", BCON_INT32(1), "}", "$set", "{", "r", BCON_INT32(round), "}"),
                         false);
        }
        /* The same documents updated on the donor just before the move and on the recipient just after it, the
         * same fields each time: applied in any other order than the cluster's, one ends with the donor's value. */
        int hot[8];
        for (int k = 0; k < 8; k++) {
            hot[k] = 100 + (int)(rand_r(&seed) % 100);
            shenv_update(
                &e, "c", hot[k],
                BCON_NEW("$inc", "{", "v", BCON_INT32(1), "}", "$set", "{", "last", BCON_INT32(2 * round), "}"), false);
        }
        shenv_move(&e, "c", "_id", 150, round % 2 == 0 ? "shard0" : "shard1");
        for (int k = 0; k < 8; k++)
            shenv_update(
                &e, "c", hot[k],
                BCON_NEW("$inc", "{", "v", BCON_INT32(1), "}", "$set", "{", "last", BCON_INT32(2 * round + 1), "}"),
                false);
        for (int k = 0; k < 30; k++) {
            int id = (int)(rand_r(&seed) % 200);
            shenv_update(&e, "c", id, BCON_NEW("$set", "{", "w", BCON_INT32(round * 100 + k), "}"), false);
        }
        shenv_insert(&e, "c", 1000 + round, round);
        if (round % 3 == 1)
            shenv_delete(&e, "c", (int)(rand_r(&seed) % 200), false);
        if (round % 4 == 3) {
            /* kill -9 in the middle of it, then a restart resumes each shard after its own checkpoint */
            shenv_kill(&e);
            kills++;
            shenv_daemon_ready(&e, NULL);
        }
    }
    ck_assert_int_ge(kills, 3);
    ck_assert_msg(shenv_wait_equal(&e, 120, true), "PostgreSQL differs from the cluster (seed %" PRIu64 ")", seed64);
    /* One row per shard, each past the start. */
    char sql[300];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM oplog2pg.shard_checkpoint WHERE service = '%s' AND ts_sec > 0 AND shard IN "
             "('shard0', 'shard1')",
             e.service);
    ck_assert_int_eq(denv_pg_int(sql), 2);
    shenv_stop(&e);
}
END_TEST

/* A shard added while the daemon runs, a chunk moved onto it and back while its documents are updated: the donor's
 * announcement of the migration makes the daemon read the new shard from its addition on, before anything after the
 * announcement is applied, so the updates land in MongoDB's order. */
START_TEST(test_shard_added_while_running)
{
    shenv e;
    if (sh_skip_or_begin(&e, "add", "c", "shard_note_after = 50ms"))
        return;
    for (int i = 0; i < 200; i++)
        shenv_insert(&e, "c", i, i);
    shenv_admin(&e, BCON_NEW("mongosimAddShard", BCON_INT32(1)), NULL);
    shenv_move(&e, "c", "_id", 150, "shard2");
    /* rounds 0 and 2 on shard2 (they alone set on2), 1 and 3 on shard1: applied out of order, a document would end
     * with r = 2 */
    for (int round = 0; round < 4; round++) {
        for (int id = 100; id < 200; id += 7)
            shenv_update(&e, "c", id,
                         round % 2 == 0
                             ? BCON_NEW("$inc", "{", "v", BCON_INT32(1), "}", "$set", "{", "r", BCON_INT32(round),
                                        "on2", BCON_INT32(round), "}")
                             : BCON_NEW("$inc", "{", "v", BCON_INT32(1), "}", "$set", "{", "r", BCON_INT32(round), "}"),
                         false);
        if (round < 3)
            shenv_move(&e, "c", "_id", 150, round % 2 == 0 ? "shard1" : "shard2");
    }
    ck_assert_msg(shenv_wait_equal(&e, 120, true), "PostgreSQL differs from the cluster");
    char sql[300];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM oplog2pg.shard_checkpoint WHERE service = '%s' AND shard = 'shard2' AND ts_sec > 0",
             e.service);
    ck_assert_int_eq(denv_pg_int(sql), 1);
    ck_assert(denv_file_contains(e.log, "announces a chunk migration to shard 'shard2'"));
    shenv_stop(&e);
}
END_TEST

/* A collection sharded on another field than _id: its update and delete entries carry the shard key beside _id (o2,
 * and delete o: {k, _id}); the rows stay keyed by _id alone. */
START_TEST(test_shard_key_beside_id)
{
    SHENV_SKIP_UNLESS_SIM();
    shenv e;
    sh_start(&e, "key", 2, NULL, "shard_note_after = 50ms");
    shenv_enable_sharding(&e, "shard0");
    const int at[1] = {100};
    shenv_shard_coll(&e, "k", "k", at, 1);
    const char *skip[] = {"--skip-import", NULL};
    shenv_daemon_ready(&e, skip);
    mongoc_collection_t *c = mongoc_client_get_collection(e.client, e.db, "k");
    for (int i = 0; i < 20; i++) {
        bson_t *d = BCON_NEW("_id", BCON_INT32(i), "k", BCON_INT32(i * 10), "v", BCON_INT32(0));
        bson_error_t err;
        ck_assert_msg(mongoc_collection_insert_one(c, d, NULL, NULL, &err), "%s", err.message);
        bson_destroy(d);
    }
    for (int i = 0; i < 20; i++) {
        bson_t *q = BCON_NEW("_id", BCON_INT32(i), "k", BCON_INT32(i * 10));
        bson_t *u = BCON_NEW("$set", "{", "v", BCON_INT32(i + 1), "}");
        bson_error_t err;
        ck_assert_msg(mongoc_collection_update_one(c, q, u, NULL, NULL, &err), "%s", err.message);
        bson_destroy(q);
        bson_destroy(u);
    }
    for (int i = 0; i < 20; i += 3) {
        bson_t *q = BCON_NEW("_id", BCON_INT32(i), "k", BCON_INT32(i * 10));
        bson_error_t err;
        ck_assert_msg(mongoc_collection_delete_one(c, q, NULL, NULL, &err), "%s", err.message);
        bson_destroy(q);
    }
    mongoc_collection_destroy(c);
    ck_assert_msg(shenv_wait_equal(&e, 60, true), "PostgreSQL differs from the cluster");
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\".k WHERE _id ~ '^[0-9]+$'", e.db);
    ck_assert_int_eq(denv_pg_int(sql), 13);
    shenv_stop(&e);
}
END_TEST

/* A transaction transfers an amount between two documents on different shards: committed by two-phase commit. */
static void sh_transfer(shenv *e, mongoc_client_session_t *cs, int from, int to, int amount)
{
    bson_error_t err;
    ck_assert_msg(mongoc_client_session_start_transaction(cs, NULL, &err), "start: %s", err.message);
    bson_t opts = BSON_INITIALIZER;
    ck_assert(mongoc_client_session_append(cs, &opts, &err));
    mongoc_collection_t *c = mongoc_client_get_collection(e->client, e->db, "acct");
    bson_t *q1 = BCON_NEW("_id", BCON_INT32(from)), *u1 = BCON_NEW("$inc", "{", "bal", BCON_INT32(-amount), "}");
    bson_t *q2 = BCON_NEW("_id", BCON_INT32(to)), *u2 = BCON_NEW("$inc", "{", "bal", BCON_INT32(amount), "}");
    ck_assert_msg(mongoc_collection_update_one(c, q1, u1, &opts, NULL, &err), "debit: %s", err.message);
    ck_assert_msg(mongoc_collection_update_one(c, q2, u2, &opts, NULL, &err), "credit: %s", err.message);
    bson_t reply;
    ck_assert_msg(mongoc_client_session_commit_transaction(cs, &reply, &err), "commit: %s", err.message);
    bson_destroy(&reply);
    bson_destroy(q1);
    bson_destroy(u1);
    bson_destroy(q2);
    bson_destroy(u2);
    bson_destroy(&opts);
    mongoc_collection_destroy(c);
}

START_TEST(test_cross_shard_transactions_atomic)
{
    shenv e;
    if (sh_skip_or_begin(&e, "txn", "acct", "shard_note_after = 50ms"))
        return;
    /* 10 accounts on each shard, 1000 each */
    for (int i = 0; i < 10; i++) {
        mongoc_collection_t *c = mongoc_client_get_collection(e.client, e.db, "acct");
        for (int side = 0; side < 2; side++) {
            bson_t *d = BCON_NEW("_id", BCON_INT32(side * 100 + i), "bal", BCON_INT32(1000));
            bson_error_t err;
            ck_assert_msg(mongoc_collection_insert_one(c, d, NULL, NULL, &err), "%s", err.message);
            bson_destroy(d);
        }
        mongoc_collection_destroy(c);
    }
    ck_assert_msg(shenv_wait_equal(&e, 60, true), "the accounts did not arrive");
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT coalesce(sum((doc->>'bal')::int), -1) FROM \"%s\".acct", e.db);
    ck_assert_int_eq(denv_pg_int(sql), 20000);
    bson_error_t err;
    mongoc_client_session_t *cs = mongoc_client_start_session(e.client, NULL, &err);
    ck_assert_msg(cs != NULL, "%s", err.message);
    unsigned seed = 11;
    int samples = 0;
    for (int t = 0; t < 150; t++) {
        int a = (int)(rand_r(&seed) % 10), b = 100 + (int)(rand_r(&seed) % 10); /* shard0, shard1 */
        if (t % 2)
            sh_transfer(&e, cs, a, b, 1 + (int)(rand_r(&seed) % 50));
        else
            sh_transfer(&e, cs, b, a, 1 + (int)(rand_r(&seed) % 50));
        /* sampled while the daemon applies: the sum never differs */
        ck_assert_int_eq(denv_pg_int(sql), 20000);
        samples++;
    }
    mongoc_client_session_destroy(cs);
    ck_assert_msg(shenv_wait_equal(&e, 60, true), "PostgreSQL differs from the cluster");
    ck_assert_int_eq(denv_pg_int(sql), 20000);
    ck_assert_int_eq(samples, 150);
    shenv_stop(&e);
}
END_TEST

/* A command on shard k directly (its own port), which must succeed; *reply kept when reply is not NULL. */
static void sh_shard_cmd(shenv *e, size_t k, const char *db, bson_t *cmd, bson_t *reply)
{
    char uri[200];
    simcluster_shard_uri(&e->c, k, uri, sizeof uri);
    mongoc_client_t *c = mongoc_client_new(uri);
    ck_assert_ptr_nonnull(c);
    bson_error_t err;
    bson_t r;
    bool ok = mongoc_client_command_simple(c, db, cmd, NULL, &r, &err);
    char *txt = bson_as_relaxed_extended_json(cmd, NULL);
    ck_assert_msg(ok, "shard %zu: %s: %s", k, txt, err.message);
    bson_free(txt);
    if (reply != NULL)
        bson_copy_to(&r, reply);
    bson_destroy(&r);
    bson_destroy(cmd);
    mongoc_client_destroy(c);
}

/* A transaction prepared on both shards and committed on one only (driven on the shards, as a coordinator would:
 * tests/mongosim/README.md): PostgreSQL shows none of it, nor anything read after that commit, until the other
 * shard commits too; then all of it at once. */
START_TEST(test_prepared_across_shards_visible_at_once)
{
    shenv e;
    if (sh_skip_or_begin(&e, "prep", "acct", "shard_note_after = 50ms"))
        return;
    mongoc_collection_t *c = mongoc_client_get_collection(e.client, e.db, "acct");
    for (int id = 0; id <= 150; id += 150) {
        bson_t *d = BCON_NEW("_id", BCON_INT32(id), "bal", BCON_INT32(1000));
        bson_error_t err;
        ck_assert_msg(mongoc_collection_insert_one(c, d, NULL, NULL, &err), "%s", err.message);
        bson_destroy(d);
    }
    mongoc_collection_destroy(c);
    ck_assert_msg(shenv_wait_equal(&e, 60, true), "the accounts did not arrive");
    char sum_sql[300], marks_sql[300];
    snprintf(sum_sql, sizeof sum_sql, "SELECT coalesce(sum((doc->>'bal')::int), -1) FROM \"%s\".acct", e.db);
    snprintf(marks_sql, sizeof marks_sql, "SELECT count(*) FROM \"%s\".acct WHERE doc ? 'mark'", e.db);
    uint8_t id[16];
    for (int i = 0; i < 16; i++)
        id[i] = (uint8_t)(0x60 + i);
    const int acct[2] = {0, 150}, delta[2] = {-100, 100};
    uint64_t pts[2];
    for (size_t k = 0; k < 2; k++) {
        sh_shard_cmd(&e, k, e.db,
                     BCON_NEW("update", BCON_UTF8("acct"), "updates", "[", "{", "q", "{", "_id", BCON_INT32(acct[k]),
                              "}", "u", "{", "$inc", "{", "bal", BCON_INT32(delta[k]), "}", "}", "}", "]", "lsid", "{",
                              "id", BCON_BIN(BSON_SUBTYPE_UUID, id, 16), "}", "txnNumber", BCON_INT64(1), "autocommit",
                              BCON_BOOL(false), "startTransaction", BCON_BOOL(true)),
                     NULL);
        bson_t reply;
        sh_shard_cmd(&e, k, "admin",
                     BCON_NEW("prepareTransaction", BCON_INT32(1), "lsid", "{", "id",
                              BCON_BIN(BSON_SUBTYPE_UUID, id, 16), "}", "txnNumber", BCON_INT64(1), "autocommit",
                              BCON_BOOL(false)),
                     &reply);
        bson_iter_t it;
        ck_assert(bson_iter_init_find(&it, &reply, "prepareTimestamp") && BSON_ITER_HOLDS_TIMESTAMP(&it));
        uint32_t t, i;
        bson_iter_timestamp(&it, &t, &i);
        pts[k] = (uint64_t)t << 32 | i;
        bson_destroy(&reply);
    }
    /* Entries after the prepares on both shards, committed: the checkpoints pass the prepares, which stay open in
     * each shard's hold (what a restart must read again). */
    shenv_insert(&e, "acct", 2, 0);
    shenv_insert(&e, "acct", 152, 0);
    char rows_sql[300];
    snprintf(rows_sql, sizeof rows_sql, "SELECT count(*) FROM \"%s\".acct", e.db);
    for (double until = denv_now() + 60; denv_pg_int(rows_sql) != 4;) {
        ck_assert_msg(denv_now() < until, "the entries after the prepares were not applied");
        usleep(100 * 1000);
    }
    uint64_t ct = pts[0] > pts[1] ? pts[0] : pts[1];
    bson_t *commit_cmd[2];
    for (size_t k = 0; k < 2; k++)
        commit_cmd[k] = BCON_NEW("commitTransaction", BCON_INT32(1), "commitTimestamp",
                                 BCON_TIMESTAMP((uint32_t)(ct >> 32), (uint32_t)ct), "lsid", "{", "id",
                                 BCON_BIN(BSON_SUBTYPE_UUID, id, 16), "}", "txnNumber", BCON_INT64(1), "autocommit",
                                 BCON_BOOL(false));
    sh_shard_cmd(&e, 0, "admin", commit_cmd[0], NULL);
    /* Writes on both shards after shard0's commit: they let the merge hand that commit on (shard1 shows something
     * later), and they are what a commit between the two parts would make visible. */
    shenv_insert(&e, "acct", 1, 0);
    shenv_insert(&e, "acct", 151, 0);
    shenv_update(&e, "acct", 1, BCON_NEW("$set", "{", "mark", BCON_BOOL(true), "}"), false);
    shenv_update(&e, "acct", 151, BCON_NEW("$set", "{", "mark", BCON_BOOL(true), "}"), false);
    /* Three seconds: time enough for the daemon to apply all of that many times over (its groups commit every
     * 200 ms, and at once when the oplogs run dry); none of it may show while shard1's part is undecided. */
    for (int i = 0; i < 30; i++) {
        int64_t sum = denv_pg_int(sum_sql), marks = denv_pg_int(marks_sql);
        if (sum != 2000 || marks != 0)
            shenv_show_log(&e);
        ck_assert_int_eq(sum, 2000);
        ck_assert_int_eq(marks, 0);
        usleep(100 * 1000);
    }
    /* kill -9 while shard1's part is undecided: the restart reads each shard from its checkpoint, and the prepare
     * still open there is told to the merge again (its shard's hold), so nothing of it shows after the restart
     * either */
    shenv_kill(&e);
    shenv_daemon_ready(&e, NULL);
    for (int i = 0; i < 20; i++) {
        int64_t sum = denv_pg_int(sum_sql), marks = denv_pg_int(marks_sql);
        if (sum != 2000 || marks != 0)
            shenv_show_log(&e);
        ck_assert_int_eq(sum, 2000);
        ck_assert_int_eq(marks, 0);
        usleep(100 * 1000);
    }
    sh_shard_cmd(&e, 1, "admin", commit_cmd[1], NULL);
    ck_assert_msg(shenv_wait_equal(&e, 60, true), "PostgreSQL differs from the cluster");
    ck_assert_int_eq(denv_pg_int(sum_sql), 2000);
    ck_assert_int_eq(denv_pg_int(marks_sql), 2);
    ck_assert_int_eq(denv_pg_int(rows_sql), 6);
    char one[300];
    snprintf(one, sizeof one, "SELECT (doc->>'bal')::int FROM \"%s\".acct WHERE _id = '0'", e.db);
    ck_assert_int_eq(denv_pg_int(one), 900);
    shenv_stop(&e);
}
END_TEST

START_TEST(test_idle_shard_noted)
{
    shenv e;
    /* no periodic noop at all: only the daemon's oplog notes can show that the idle shard has nothing older */
    if (sh_skip_or_begin(&e, "idle", "c", "shard_note_after = 100ms"))
        return;
    shenv_insert(&e, "c", 1, 1);   /* shard0 */
    shenv_insert(&e, "c", 150, 1); /* shard1 */
    ck_assert_msg(shenv_wait_equal(&e, 60, true), "the first documents did not arrive");
    /* Writes on shard0 alone: each is applied only once shard1 shows it has nothing older: the note. */
    for (int i = 2; i < 12; i++)
        shenv_insert(&e, "c", i, i);
    ck_assert_msg(shenv_wait_equal(&e, 30, true), "writes on a busy shard waited on the idle one");
    char out[300];
    ck_assert_int_eq(shenv_run(&e, "status", out, sizeof out), 0);
    ck_assert(denv_file_contains(out, "shard shard0"));
    ck_assert(denv_file_contains(out, "shard shard1"));
    /* `check` reads each shard's oplog on its own connection */
    ck_assert_int_eq(shenv_run(&e, "check", out, sizeof out), 0);
    ck_assert(denv_file_contains(out, "a sharded cluster's router; 2 shards"));
    ck_assert(denv_file_contains(out, "shard 'shard0': newest oplog entry"));
    ck_assert(denv_file_contains(out, "shard 'shard1': newest oplog entry"));
    shenv_stop(&e);
}
END_TEST

/* An op PostgreSQL refuses on shard0, and after it in cluster time an oplog note on shard1 (an entry that changes
 * nothing, as a migration's copy or a noop). The merge hands such an entry on ahead of the other shards' older ones,
 * so the service's merged checkpoint passes the refused entry before it is set aside: the careful sessions that look
 * for it must follow each shard's own position (daemon/bound.c), or they end at once and the daemon retries the
 * failing group forever. The soak found it (tests/soak). The refused op is set aside once and everything after it,
 * on both shards, arrives. */
START_TEST(test_refused_op_behind_a_note)
{
    shenv e;
    if (sh_skip_or_begin(&e, "refuse", "c", NULL))
        return;
    shenv_insert(&e, "c", 1, 1);   /* shard0 */
    shenv_insert(&e, "c", 150, 1); /* shard1 */
    ck_assert_msg(shenv_wait_equal(&e, 60, true), "the first documents did not arrive");
    shenv_kill(&e);
    shenv_insert(&e, "c", 2, 2);
    /* jsonb cannot hold U+0000: PostgreSQL refuses the row (22P05) */
    mongoc_collection_t *c = mongoc_client_get_collection(e.client, e.db, "c");
    bson_t *bad = BCON_NEW("_id", BCON_INT32(3));
    bson_append_utf8(bad, "s", 1, "a\0b", 3);
    bson_error_t err;
    ck_assert_msg(mongoc_collection_insert_one(c, bad, NULL, NULL, &err), "%s", err.message);
    bson_destroy(bad);
    shenv_insert(&e, "c", 4, 4);
    sh_shard_cmd(&e, 1, "admin", BCON_NEW("appendOplogNote", BCON_INT32(1), "data", "{", "x", BCON_INT32(1), "}"),
                 NULL);
    const char *skip[] = {"--skip-import", NULL};
    shenv_daemon_ready(&e, skip);
    /* Nothing more is written until the op is set aside: a later entry in the failing group would carry the careful
     * stretch past the note, and hide the fault. */
    char sql[300];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM oplog2pg.dead_letter WHERE service = '%s' AND doc_id = '3' AND sqlstate = '22P05'",
             e.service);
    for (double until = denv_now() + 60; denv_pg_int(sql) == 0;) {
        if (denv_now() > until) {
            shenv_show_log(&e);
            ck_abort_msg("the refused op was not set aside within 60 s");
        }
        usleep(100 * 1000);
    }
    /* the refused document leaves MongoDB too: then the tables must equal the collections */
    shenv_delete(&e, "c", 3, false);
    shenv_insert(&e, "c", 5, 5);     /* shard0 */
    shenv_insert(&e, "c", 151, 151); /* shard1 */
    ck_assert_msg(shenv_wait_equal(&e, 60, true), "the entries after the refused op did not all arrive");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM oplog2pg.dead_letter WHERE service = '%s'", e.service);
    ck_assert_int_eq(denv_pg_int(sql), 1);
    mongoc_collection_destroy(c);
    shenv_stop(&e);
}
END_TEST

/* Each shard's oplog window and margin in the metrics (label shard): its own oplog's newest minus oldest entry, and
 * its checkpoint row minus that oldest entry; the margin grows as writes on that shard move its checkpoint on. */
static void expect_shard_window(shenv *e, int port, size_t k, double *margin)
{
    char url[96], uri[256], series[128], sql[256], *body = malloc(65536);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", port);
    simcluster_shard_uri(&e->c, k, uri, sizeof uri);
    snprintf(sql, sizeof sql,
             "SELECT ts_sec FROM oplog2pg.shard_checkpoint WHERE service = '%s' AND shard = 'shard%zu'", e->service, k);
    uint32_t oldest = 0, newest = 0;
    double ck = 0, window = -2, shown = -2, until = denv_now() + 30;
    for (;;) {
        ck_assert_int_eq(denv_http_get(url, false, body, 65536), 0);
        denv_oplog_edges(uri, &oldest, &newest);
        ck = (double)denv_pg_int(sql);
        snprintf(series, sizeof series, "oplog2pg_oplog_window_seconds{shard=\"shard%zu\"}", k);
        window = denv_metric(body, series);
        snprintf(series, sizeof series, "oplog2pg_oplog_margin_seconds{shard=\"shard%zu\"}", k);
        shown = denv_metric(body, series);
        if ((window == (double)newest - (double)oldest && shown == ck - (double)oldest) || denv_now() > until)
            break;
        usleep(200 * 1000);
    }
    ck_assert_msg(window == (double)newest - (double)oldest, "shard%zu: window shown %g, its oplog's edges %u..%u", k,
                  window, oldest, newest);
    ck_assert_msg(shown == ck - (double)oldest, "shard%zu: margin shown %g, checkpoint %.0f, oldest entry %u", k, shown,
                  ck, oldest);
    ck_assert_msg(strstr(body, "\noplog2pg_oplog_margin_seconds ") == NULL, "an unlabelled margin beside the shards");
    *margin = shown;
    free(body);
}

START_TEST(test_shard_oplog_window_metrics)
{
    shenv e;
    int port = denv_free_port();
    char ini[160];
    snprintf(ini, sizeof ini,
             "shard_note_after = 100ms\n[metrics]\nlisten = 127.0.0.1:%d\noplog_window_interval = 1s\n", port);
    if (sh_skip_or_begin(&e, "opwin", "c", ini))
        return;
    shenv_insert(&e, "c", 1, 1);   /* shard0 */
    shenv_insert(&e, "c", 150, 1); /* shard1 */
    ck_assert_msg(shenv_wait_equal(&e, 60, true), "the first documents did not arrive");
    double m0, m1, later0;
    expect_shard_window(&e, port, 0, &m0);
    expect_shard_window(&e, port, 1, &m1);
    sleep(3);
    shenv_insert(&e, "c", 2, 2); /* shard0 only: its checkpoint moves three seconds on */
    ck_assert_msg(shenv_wait_equal(&e, 30, true), "the last document did not arrive");
    expect_shard_window(&e, port, 0, &later0);
    ck_assert_msg(later0 >= m0 + 3, "shard0's margin went from %g to %g as its checkpoint moved 3 s on", m0, later0);
    shenv_stop(&e);
}
END_TEST

Suite *sharded_suite(void); /* called by the generated runner list */

Suite *sharded_suite(void)
{
    Suite *s = suite_create("sharded");
    TCase *tc = tcase_create("cluster");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_migrations_with_updates_and_kills);
    tcase_add_test(tc, test_cross_shard_transactions_atomic);
    tcase_add_test(tc, test_idle_shard_noted);
    tcase_add_test(tc, test_shard_added_while_running);
    tcase_add_test(tc, test_shard_key_beside_id);
    tcase_add_test(tc, test_refused_op_behind_a_note);
    suite_add_tcase(s, tc);
    TCase *tm = tcase_create("metrics");
    tcase_set_timeout(tm, 120);
    tcase_add_test(tm, test_shard_oplog_window_metrics);
    suite_add_tcase(s, tm);
    TCase *tp = tcase_create("prepared");
    tcase_set_timeout(tp, 300);
    tcase_add_test(tp, test_prepared_across_shards_visible_at_once);
    suite_add_tcase(s, tp);
    return s;
}

/*
 * test_shard_copy.c — the initial copy of a sharded cluster (mongosim --shards N, tests/mongosim/README.md "Sharded
 * cluster"), the daemon run as the real binary in its default start mode:
 *
 * - three shards, collections sharded on _id (chunks on every shard), on another field, and unsharded; writes on
 *   every shard and chunk migrations go on while the copy runs: the daemon copies through the router, tails every
 *   shard from the start it noted in that shard's oplog, and ends equal to MongoDB;
 * - kill -9 twice during the copy and once during the catch-up: the copy resumes with the same per-shard starts
 *   (oplog2pg.copy_shard_state), and the end is still equal;
 * - two shards holding the same _id in one collection (sharded on another field than _id): one row and one dead
 *   letter with the reason per such _id, nothing else lost, nothing set aside twice, through kills of the copy.
 * They need the simulator: with MONGO_URI set (a real replica set) they skip.
 */
#include <check.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/daemonenv.h"
#include "../lib/shenv.h"
#include "../lib/simcluster.h"
#include "../lib/skip.h"

/* A cluster of `shards` shards for the case `name` (service and database shc_NAME), orphans cleaned up at once, the
 * copy in batches of 100 documents by two workers. */
static void sc_start(shenv *e, const char *name, size_t shards)
{
    const char *sim[] = {"--orphan-cleanup-delay", "0", NULL};
    shenv_opts o = {.prefix = "shc",
                    .shards = shards,
                    .sim_args = sim,
                    .extra_ini = "shard_note_after = 50ms\n[copy]\nbatch_docs = 100\nworkers = 2",
                    .log_grep = "-E 'notice|warning|error|copy:'",
                    .log_tail = true};
    shenv_start(e, name, &o);
}

/* Documents from..to-1 into db.coll (k = _id % 100 + the shard key offset kofs, for a collection sharded on k). */
static void sc_insert_many(shenv *e, const char *coll, int from, int to, int kofs)
{
    mongoc_collection_t *c = mongoc_client_get_collection(e->client, e->db, coll);
    for (int base = from; base < to; base += 500) {
        bson_t **docs = calloc(500, sizeof *docs);
        size_t n = 0;
        for (int i = base; i < to && i < base + 500; i++)
            docs[n++] = BCON_NEW("_id", BCON_INT32(i), "k", BCON_INT32(kofs + i % 100), "v", BCON_INT32(i), "s",
                                 BCON_UTF8("some text to make the rows a little larger"));
        bson_error_t err;
        ck_assert_msg(mongoc_collection_insert_many(c, (const bson_t **)docs, n, NULL, NULL, &err), "insert: %s",
                      err.message);
        for (size_t i = 0; i < n; i++)
            bson_destroy(docs[i]);
        free(docs);
    }
    mongoc_collection_destroy(c);
}

static int64_t sc_int(const char *fmt, const char *a)
{
    /* the daemon installs the schema once it connects */
    if (denv_pg_int("SELECT (to_regclass('oplog2pg.copy_shard_state') IS NOT NULL AND "
                    "to_regclass('oplog2pg.shard_checkpoint') IS NOT NULL)::int") == 0)
        return 0;
    char sql[600];
    snprintf(sql, sizeof sql, fmt, a);
    return denv_pg_int(sql);
}

/* The copy's state row exists (its starts are noted) / it finished. */
static bool sc_copy_started(const shenv *e)
{
    return sc_int("SELECT count(*) FROM oplog2pg.copy_state WHERE service = '%s'", e->service) == 1;
}

static bool sc_copy_finished(const shenv *e)
{
    return sc_int("SELECT count(*) FROM oplog2pg.copy_state WHERE service = '%s' AND finished_at IS NOT NULL",
                  e->service) == 1;
}

static int64_t sc_copied(const shenv *e)
{
    return sc_int("SELECT coalesce(sum(copied), 0) FROM oplog2pg.copy_progress WHERE service = '%s'", e->service);
}

static void sc_wait(shenv *e, bool (*cond)(const shenv *), const char *what)
{
    double until = denv_now() + 120;
    while (!cond(e)) {
        if (denv_now() > until || proc_wait(&e->daemon, 0)) {
            shenv_show_log(e);
            ck_abort_msg("waiting for %s", what);
        }
        usleep(20 * 1000);
    }
}

/* Holds the copy back: the rows of its progress locked (its batches wait on them) until sc_release. */
static PGconn *sc_hold(const shenv *e)
{
    PGconn *pg = PQconnectdb(denv_pg_conninfo());
    ck_assert_int_eq(PQstatus(pg), CONNECTION_OK);
    char sql[300];
    snprintf(sql, sizeof sql, "BEGIN; SELECT 1 FROM oplog2pg.copy_progress WHERE service = '%s' FOR UPDATE",
             e->service);
    PGresult *r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s", PQerrorMessage(pg));
    PQclear(r);
    return pg;
}

static void sc_release(PGconn *pg)
{
    PGresult *r = PQexec(pg, "COMMIT");
    PQclear(r);
    PQfinish(pg);
}

/* The per-shard starts of the copy as one text ("shard0 1:2 shard1 3:4 ..."). */
static void sc_starts(const shenv *e, char *out, size_t n)
{
    char sql[400];
    snprintf(sql, sizeof sql,
             "SELECT string_agg(shard || ' ' || start_sec || ':' || start_inc, ' ' ORDER BY shard) "
             "FROM oplog2pg.copy_shard_state WHERE service = '%s'",
             e->service);
    denv_pg_text(sql, out, n);
}

/* Three collections: "a" sharded on _id (a chunk on each shard), "k" sharded on k, "u" unsharded. */
static void sc_load(shenv *e, int per_coll)
{
    shenv_enable_sharding(e, "shard1");
    int a_at[2] = {per_coll / 3, 2 * per_coll / 3}, k_at[1] = {50};
    shenv_shard_coll(e, "a", "_id", a_at, 2);
    shenv_shard_coll(e, "k", "k", k_at, 1);
    sc_insert_many(e, "a", 0, per_coll, 0);
    sc_insert_many(e, "k", 0, per_coll, 0);
    sc_insert_many(e, "u", 0, per_coll, 0);
}

/* One round of writes on every shard: updates, an insert, a delete, in all three collections; a chunk migration of
 * "a" every fourth round. */
static void sc_round(shenv *e, int per_coll, int round, unsigned *seed)
{
    static const char *const colls[] = {"a", "k", "u"};
    for (int c = 0; c < 3; c++) {
        for (int i = 0; i < 6; i++) {
            int id = (int)(rand_r(seed) % (unsigned)per_coll);
            shenv_update(e, colls[c], id,
                         BCON_NEW("$inc", "{", "v", BCON_INT32(1), "}", "$set", "{", "r", BCON_INT32(round), "}"),
                         true);
        }
        sc_insert_many(e, colls[c], per_coll + round * 10, per_coll + round * 10 + 3, 0);
        shenv_delete(e, colls[c], (int)(rand_r(seed) % (unsigned)per_coll), true);
    }
    if (round % 4 == 3)
        shenv_move(e, "a", "_id", per_coll / 3, e->c.id[(size_t)(round / 4) % e->c.n]);
}

START_TEST(test_copy_with_writes_then_tail)
{
    SHENV_SKIP_UNLESS_SIM();
    shenv e;
    sc_start(&e, "live", 3);
    const int per = 6000;
    sc_load(&e, per);
    shenv_daemon(&e, NULL);
    sc_wait(&e, sc_copy_started, "the copy's start");
    unsigned seed = 3;
    int round = 0, during = 0;
    /* the copy held back for a few rounds of writes, so that they surely happen during it */
    PGconn *hold = sc_hold(&e);
    for (double until = denv_now() + 2; denv_now() < until || during < 3; during++)
        sc_round(&e, per, round++, &seed);
    ck_assert(!sc_copy_finished(&e));
    sc_release(hold);
    while (!sc_copy_finished(&e)) {
        ck_assert_msg(!proc_wait(&e.daemon, 0), "the daemon exited during the copy");
        sc_round(&e, per, round++, &seed);
        during++;
    }
    for (int i = 0; i < 5; i++)
        sc_round(&e, per, round++, &seed);
    ck_assert_msg(during >= 2, "the copy ended before writes ran during it (%d rounds)", during);
    ck_assert_msg(shenv_wait_equal(&e, 120, true), "PostgreSQL differs from the cluster");
    /* one start per shard, committed as each shard's checkpoint row; the copy's end recorded */
    ck_assert_int_eq(sc_int("SELECT count(*) FROM oplog2pg.copy_shard_state WHERE service = '%s' AND end_sec IS NOT "
                            "NULL",
                            e.service),
                     3);
    ck_assert_int_eq(sc_int("SELECT count(*) FROM oplog2pg.shard_checkpoint WHERE service = '%s'", e.service), 3);
    ck_assert(denv_file_contains(e.log, "initial copy complete"));
    fprintf(stderr, "shard_copy: %d rounds of writes during the copy\n", during);
    shenv_stop(&e);
}
END_TEST

START_TEST(test_copy_killed_and_resumed)
{
    SHENV_SKIP_UNLESS_SIM();
    shenv e;
    sc_start(&e, "kill", 2);
    const int per = 6000;
    sc_load(&e, per);
    shenv_daemon(&e, NULL);
    sc_wait(&e, sc_copy_started, "the copy's start");
    char starts[400], again[400];
    sc_starts(&e, starts, sizeof starts);
    ck_assert_msg(strlen(starts) > 0, "no start noted per shard");
    unsigned seed = 5;
    int round = 0;
    /* kill -9 twice during the copy, with writes on both shards between */
    for (int kill = 1; kill <= 2; kill++) {
        int64_t want = (int64_t)kill * 2000;
        for (double until = denv_now() + 120; sc_copied(&e) < want;) {
            ck_assert_msg(denv_now() < until && !proc_wait(&e.daemon, 0), "the copy did not reach %lld documents",
                          (long long)want);
            usleep(10 * 1000);
        }
        ck_assert_msg(!sc_copy_finished(&e), "the copy finished before kill %d", kill);
        shenv_kill(&e);
        sc_round(&e, per, round++, &seed);
        shenv_daemon(&e, NULL);
    }
    sc_wait(&e, sc_copy_finished, "the end of the copy");
    ck_assert(denv_file_contains(e.log, "resumes its copy"));
    sc_starts(&e, again, sizeof again);
    ck_assert_str_eq(again, starts);
    /* writes, then kill -9 during the catch-up, as soon as the copy's start is committed as the checkpoint */
    for (int i = 0; i < 4; i++)
        sc_round(&e, per, round++, &seed);
    for (double until = denv_now() + 60; !denv_file_contains(e.log, "initial copy complete");) {
        ck_assert_msg(denv_now() < until, "the copy's start was not committed");
        usleep(5 * 1000);
    }
    shenv_kill(&e);
    for (int i = 0; i < 4; i++)
        sc_round(&e, per, round++, &seed);
    shenv_daemon(&e, NULL);
    ck_assert_msg(shenv_wait_equal(&e, 120, true), "PostgreSQL differs from the cluster");
    ck_assert_int_eq(sc_int("SELECT count(*) FROM oplog2pg.shard_checkpoint WHERE service = '%s'", e.service), 2);
    ck_assert_int_eq(sc_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE service = '%s'", e.service), 0);
    shenv_stop(&e);
}
END_TEST

/* One shard's oplog rolls past its start while the copy runs (mongosimTruncateOplog on that shard's own port): the
 * copy stops with the window lost, naming the shard, and exit code 7. */
START_TEST(test_shard_window_lost)
{
    SHENV_SKIP_UNLESS_SIM();
    shenv e;
    sc_start(&e, "win", 2);
    sc_load(&e, 6000);
    shenv_daemon(&e, NULL);
    sc_wait(&e, sc_copy_started, "the copy's start");
    PGconn *hold = sc_hold(&e); /* the copy cannot finish before its window is checked */
    /* a write on shard1 (collection a from _id 2000 to 4000), then shard1's oplog cut just before it */
    shenv_update(&e, "a", 3000, BCON_NEW("$set", "{", "w", BCON_INT32(1), "}"), true);
    char uri[200];
    simcluster_shard_uri(&e.c, 1, uri, sizeof uri);
    uint64_t ts = denv_newest_ts(uri);
    mongoc_client_t *c = mongoc_client_new(uri);
    ck_assert_ptr_nonnull(c);
    bson_t *cmd =
        BCON_NEW("mongosimTruncateOplog", BCON_INT32(1), "before", BCON_TIMESTAMP((uint32_t)(ts >> 32), (uint32_t)ts));
    bson_error_t err;
    ck_assert_msg(mongoc_client_command_simple(c, "admin", cmd, NULL, NULL, &err), "%s", err.message);
    bson_destroy(cmd);
    mongoc_client_destroy(c);
    bool stopped = proc_wait(&e.daemon, 120);
    if (!stopped)
        shenv_show_log(&e);
    sc_release(hold);
    ck_assert_msg(stopped, "the daemon did not stop");
    if (proc_exit_code(&e.daemon) != 7)
        shenv_show_log(&e);
    ck_assert_int_eq(proc_exit_code(&e.daemon), 7);
    ck_assert(denv_file_contains(e.log, "the oplog of shard 'shard1' no longer holds its start"));
    ck_assert(!sc_copy_finished(&e));
    e.daemon.pid = 0;
    shenv_stop(&e);
}
END_TEST

static bool has_twin(int i)
{
    return i % 7 != 1 && i % 7 != 4 && i % 7 != 6;
}

START_TEST(test_same_id_on_two_shards)
{
    SHENV_SKIP_UNLESS_SIM();
    shenv e;
    sc_start(&e, "dup", 2);
    shenv_enable_sharding(&e, "shard0");
    int at[1] = {100};
    shenv_shard_coll(&e, "d", "k", at, 1); /* k < 100 on shard0, k >= 100 on shard1 */
    /* _id i on shard0 (k = i % 100); for i % 7 in {0, 2, 3, 5} a second document with _id i on shard1 (k = 100 +
     * i % 100): each shard's _id index is its own, so the router takes both. (A pattern whose period does not divide
     * the batches, so that batches end at every kind of _id.) */
    const int n = 6000;
    int dups = 0;
    sc_insert_many(&e, "d", 0, n, 0);
    mongoc_collection_t *c = mongoc_client_get_collection(e.client, e.db, "d");
    for (int i = 0; i < n; i++) {
        if (!has_twin(i))
            continue;
        bson_t *d = BCON_NEW("_id", BCON_INT32(i), "k", BCON_INT32(100 + i % 100), "v", BCON_INT32(-i), "twin",
                             BCON_BOOL(true));
        bson_error_t err;
        ck_assert_msg(mongoc_collection_insert_one(c, d, NULL, NULL, &err), "insert twin %d: %s", i, err.message);
        bson_destroy(d);
        dups++;
    }
    mongoc_collection_destroy(c);
    shenv_daemon(&e, NULL);
    /* kill -9 during the copy: a resumed pass must neither set a twin aside again nor lose one. The copy resumes
     * from the last _id committed (an int32: bytes 9..12 of the BSON {_id: v}); at least one kill must leave it at
     * an _id that has a twin, the case the resume must get right. */
    int kills = 0, at_twin = 0;
    char last_sql[400];
    snprintf(last_sql, sizeof last_sql,
             "SELECT coalesce(max(get_byte(last_id, 9) + 256 * get_byte(last_id, 10) + 65536 * get_byte(last_id, 11)), "
             "-1) FROM oplog2pg.copy_progress WHERE service = '%s'",
             e.service);
    for (int kill = 1; kill <= 6 && at_twin < 2; kill++) {
        for (double until = denv_now() + 120; sc_copied(&e) < kill * 700;) {
            ck_assert_msg(denv_now() < until && !proc_wait(&e.daemon, 0), "the copy did not progress");
            usleep(10 * 1000);
        }
        if (sc_copy_finished(&e))
            break;
        shenv_kill(&e);
        kills++;
        int64_t last = denv_pg_int(last_sql);
        at_twin += last >= 0 && has_twin((int)last);
        shenv_daemon(&e, NULL);
    }
    ck_assert_msg(kills >= 1 && at_twin >= 1, "the copy was not killed at an _id with a twin (%d kills)", kills);
    sc_wait(&e, sc_copy_finished, "the end of the copy");
    for (double until = denv_now() + 60; !denv_file_contains(e.log, "ready: ");) {
        ck_assert_msg(denv_now() < until, "the daemon did not start tailing");
        usleep(50 * 1000);
    }
    char sql[700];
    /* one row per _id */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\".d", e.db);
    ck_assert_int_eq(denv_pg_int(sql), n);
    /* one dead letter per twin, each with the reason, no _id twice */
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM oplog2pg.dead_letter WHERE service = '%s' AND error LIKE 'two documents with _id %% "
             "in this collection (a sharded collection whose shard key is not _id: two shards hold the same _id)%%'",
             e.service);
    ck_assert_int_eq(denv_pg_int(sql), dups);
    snprintf(sql, sizeof sql, "SELECT count(DISTINCT doc_id) FROM oplog2pg.dead_letter WHERE service = '%s'",
             e.service);
    ck_assert_int_eq(denv_pg_int(sql), dups);
    /* nothing lost: for every _id, the row and its dead letter (if any) are the documents MongoDB holds */
    snprintf(
        sql, sizeof sql,
        "SELECT count(*) FROM \"%s\".d t LEFT JOIN oplog2pg.dead_letter l ON l.service = '%s' AND l.doc_id = t._id "
        "WHERE (l.id IS NULL) <> ((t._id)::int %% 7 IN (1, 4, 6)) "
        "OR (l.id IS NOT NULL AND (t.doc ? 'twin') = (l.op_json::jsonb ? 'twin'))",
        e.db, e.service);
    ck_assert_int_eq(denv_pg_int(sql), 0);
    shenv_stop(&e);
}
END_TEST

Suite *shard_copy_suite(void); /* called by the generated runner list */

Suite *shard_copy_suite(void)
{
    Suite *s = suite_create("shard_copy");
    TCase *tc = tcase_create("copy");
    tcase_set_timeout(tc, 400);
    tcase_add_test(tc, test_copy_with_writes_then_tail);
    tcase_add_test(tc, test_copy_killed_and_resumed);
    tcase_add_test(tc, test_same_id_on_two_shards);
    tcase_add_test(tc, test_shard_window_lost);
    suite_add_tcase(s, tc);
    return s;
}

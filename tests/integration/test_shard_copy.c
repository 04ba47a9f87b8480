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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/compare.h"
#include "../lib/daemonenv.h"
#include "../lib/proc.h"
#include "../lib/simcluster.h"
#include "../lib/skip.h"

typedef struct {
    simcluster c;
    char dir[200];
    char ini[256];
    char log[300];
    char router[128];
    char service[64];
    char db[64];
    proc_handle daemon;
    int starts;
    mongoc_client_t *client;
} scenv;

#define COPY_INI "shard_note_after = 50ms\n[copy]\nbatch_docs = 100\nworkers = 2\n"

static void sc_start(scenv *e, const char *name, size_t shards)
{
    memset(e, 0, sizeof *e);
    char err[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(e->dir, sizeof e->dir, "%s/oplog2pg-shc-%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
    ck_assert_ptr_nonnull(mkdtemp(e->dir));
    snprintf(e->service, sizeof e->service, "shc_%s", name);
    snprintf(e->db, sizeof e->db, "shc_%s", name);
    char simlog[256];
    snprintf(simlog, sizeof simlog, "%s/mongosim.log", e->dir);
    mongoc_init();
    const char *sim[] = {"--orphan-cleanup-delay", "0", NULL};
    ck_assert_msg(simcluster_start(shards, sim, simlog, &e->c, err, sizeof err), "%s", err);
    simcluster_router_uri(&e->c, e->router, sizeof e->router);
    e->client = mongoc_client_new(e->router);
    ck_assert_ptr_nonnull(e->client);
    snprintf(e->ini, sizeof e->ini, "%s/oplog2pg.ini", e->dir);
    FILE *f = fopen(e->ini, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "[mongodb]\nuri = %s\n" COPY_INI "[postgres]\nconninfo = %s\n[replication]\nservice = %s\ninclude = %s.*\n"
            "[logging]\nprogress_interval = 1s\n",
            e->router, denv_pg_conninfo(), e->service, e->db);
    fclose(f);
}

static void sc_show_log(const scenv *e)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "grep -E 'notice|warning|error|copy:' '%s' | tail -n 60 >&2", e->log);
    if (system(cmd) != 0)
        fprintf(stderr, "(no daemon log)\n");
}

/* The daemon in its default start mode (no flag): a service without a checkpoint copies first. */
static void sc_daemon(scenv *e)
{
    char err[512], bin[256];
    snprintf(bin, sizeof bin, "%s/oplog2pg", proc_build_dir());
    const char *argv[] = {bin, "-c", e->ini, "run", NULL};
    snprintf(e->log, sizeof e->log, "%s/oplog2pg.log.%d", e->dir, e->starts++);
    ck_assert_msg(proc_start(argv, NULL, e->log, &e->daemon, err, sizeof err), "%s", err);
}

static void sc_kill(scenv *e)
{
    ck_assert(proc_signal(&e->daemon, SIGKILL));
    ck_assert(proc_wait(&e->daemon, 30));
}

static void sc_stop(scenv *e)
{
    if (e->daemon.pid > 0) {
        ck_assert(proc_signal(&e->daemon, SIGTERM));
        bool exited = proc_wait(&e->daemon, 60);
        if (!exited || proc_exit_code(&e->daemon) != 0)
            sc_show_log(e);
        ck_assert_msg(exited, "the daemon did not stop on SIGTERM");
        ck_assert_int_eq(proc_exit_code(&e->daemon), 0);
    }
    mongoc_client_destroy(e->client);
    simcluster_stop(&e->c);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", e->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", e->dir);
}

static void sc_admin(scenv *e, bson_t *cmd)
{
    bson_error_t err;
    bson_t reply;
    bool ok = mongoc_client_command_simple(e->client, "admin", cmd, NULL, &reply, &err);
    char *txt = bson_as_relaxed_extended_json(cmd, NULL);
    ck_assert_msg(ok, "%s: %s", txt, err.message);
    bson_free(txt);
    bson_destroy(&reply);
    bson_destroy(cmd);
}

static void sc_move(scenv *e, const char *coll, const char *field, int key, const char *to)
{
    char ns[160];
    snprintf(ns, sizeof ns, "%s.%s", e->db, coll);
    sc_admin(e, BCON_NEW("moveChunk", BCON_UTF8(ns), "find", "{", field, BCON_INT32(key), "}", "to", BCON_UTF8(to)));
}

/* db.coll sharded on `field`, split at each of at[0..n), chunk k (from at[k-1]) on shard k % shards. */
static void sc_shard_coll(scenv *e, const char *coll, const char *field, const int *at, size_t n)
{
    char ns[160];
    snprintf(ns, sizeof ns, "%s.%s", e->db, coll);
    sc_admin(e, BCON_NEW("shardCollection", BCON_UTF8(ns), "key", "{", field, BCON_INT32(1), "}"));
    for (size_t k = 0; k < n; k++)
        sc_admin(e, BCON_NEW("split", BCON_UTF8(ns), "middle", "{", field, BCON_INT32(at[k]), "}"));
    for (size_t k = 0; k < n; k++)
        sc_move(e, coll, field, at[k], e->c.id[(k + 1) % e->c.n]);
}

/* Documents from..to-1 into db.coll (k = _id % 100 + the shard key offset kofs, for a collection sharded on k). */
static void sc_insert_many(scenv *e, const char *coll, int from, int to, int kofs)
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

static void sc_update(scenv *e, const char *coll, int id, bson_t *update)
{
    mongoc_collection_t *c = mongoc_client_get_collection(e->client, e->db, coll);
    bson_t *q = BCON_NEW("_id", BCON_INT32(id));
    bson_error_t err;
    ck_assert_msg(mongoc_collection_update_many(c, q, update, NULL, NULL, &err), "update %d: %s", id, err.message);
    bson_destroy(q);
    bson_destroy(update);
    mongoc_collection_destroy(c);
}

static void sc_delete(scenv *e, const char *coll, int id)
{
    mongoc_collection_t *c = mongoc_client_get_collection(e->client, e->db, coll);
    bson_t *q = BCON_NEW("_id", BCON_INT32(id));
    bson_error_t err;
    ck_assert_msg(mongoc_collection_delete_many(c, q, NULL, NULL, &err), "delete %d: %s", id, err.message);
    bson_destroy(q);
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
static bool sc_copy_started(const scenv *e)
{
    return sc_int("SELECT count(*) FROM oplog2pg.copy_state WHERE service = '%s'", e->service) == 1;
}

static bool sc_copy_finished(const scenv *e)
{
    return sc_int("SELECT count(*) FROM oplog2pg.copy_state WHERE service = '%s' AND finished_at IS NOT NULL",
                  e->service) == 1;
}

static int64_t sc_copied(const scenv *e)
{
    return sc_int("SELECT coalesce(sum(copied), 0) FROM oplog2pg.copy_progress WHERE service = '%s'", e->service);
}

static void sc_wait(scenv *e, bool (*cond)(const scenv *), const char *what)
{
    double until = denv_now() + 120;
    while (!cond(e)) {
        if (denv_now() > until || proc_wait(&e->daemon, 0)) {
            sc_show_log(e);
            ck_abort_msg("waiting for %s", what);
        }
        usleep(20 * 1000);
    }
}

/* Holds the copy back: the rows of its progress locked (its batches wait on them) until sc_release. */
static PGconn *sc_hold(const scenv *e)
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
static void sc_starts(const scenv *e, char *out, size_t n)
{
    char sql[400];
    snprintf(sql, sizeof sql,
             "SELECT string_agg(shard || ' ' || start_sec || ':' || start_inc, ' ' ORDER BY shard) "
             "FROM oplog2pg.copy_shard_state WHERE service = '%s'",
             e->service);
    denv_pg_text(sql, out, n);
}

/* PostgreSQL equals the cluster (read through the router: orphans filtered) within timeout_s. */
static bool sc_wait_equal(scenv *e, double timeout_s)
{
    PGconn *pg = PQconnectdb(denv_pg_conninfo());
    ck_assert_int_eq(PQstatus(pg), CONNECTION_OK);
    compare_options o = {.db_prefix = e->db};
    double until = denv_now() + timeout_s;
    bool match = false;
    for (;;) {
        compare_report r;
        char err[512];
        bool ran = compare_all(e->router, pg, &o, &r, err, sizeof err);
        match = ran && r.match && r.source_rows > 0;
        if (match || denv_now() >= until) {
            if (!match) {
                if (ran)
                    compare_report_print(&r, stderr, false);
                else
                    fprintf(stderr, "compare: %s\n", err);
            }
            compare_report_free(&r);
            break;
        }
        compare_report_free(&r);
        ck_assert_msg(proc_exit_code(&e->daemon) < 0 || e->daemon.pid <= 0, "the daemon exited");
        usleep(200 * 1000);
    }
    PQfinish(pg);
    if (!match)
        sc_show_log(e);
    return match;
}

/* Three collections: "a" sharded on _id (a chunk on each shard), "k" sharded on k, "u" unsharded. */
static void sc_load(scenv *e, int per_coll)
{
    sc_admin(e, BCON_NEW("enableSharding", BCON_UTF8(e->db), "primaryShard", BCON_UTF8("shard1")));
    int a_at[2] = {per_coll / 3, 2 * per_coll / 3}, k_at[1] = {50};
    sc_shard_coll(e, "a", "_id", a_at, 2);
    sc_shard_coll(e, "k", "k", k_at, 1);
    sc_insert_many(e, "a", 0, per_coll, 0);
    sc_insert_many(e, "k", 0, per_coll, 0);
    sc_insert_many(e, "u", 0, per_coll, 0);
}

/* One round of writes on every shard: updates, an insert, a delete, in all three collections; a chunk migration of
 * "a" every fourth round. */
static void sc_round(scenv *e, int per_coll, int round, unsigned *seed)
{
    static const char *const colls[] = {"a", "k", "u"};
    for (int c = 0; c < 3; c++) {
        for (int i = 0; i < 6; i++) {
            int id = (int)(rand_r(seed) % (unsigned)per_coll);
            sc_update(e, colls[c], id,
                      BCON_NEW("$inc", "{", "v", BCON_INT32(1), "}", "$set", "{", "r", BCON_INT32(round), "}"));
        }
        sc_insert_many(e, colls[c], per_coll + round * 10, per_coll + round * 10 + 3, 0);
        sc_delete(e, colls[c], (int)(rand_r(seed) % (unsigned)per_coll));
    }
    if (round % 4 == 3)
        sc_move(e, "a", "_id", per_coll / 3, e->c.id[(size_t)(round / 4) % e->c.n]);
}

START_TEST(test_copy_with_writes_then_tail)
{
    if (!denv_using_sim()) {
        SKIP_TEST("a sharded cluster: mongosim --shards (MONGO_URI names a replica set)");
        return;
    }
    scenv e;
    sc_start(&e, "live", 3);
    const int per = 6000;
    sc_load(&e, per);
    sc_daemon(&e);
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
    ck_assert_msg(sc_wait_equal(&e, 120), "PostgreSQL differs from the cluster");
    /* one start per shard, committed as each shard's checkpoint row; the copy's end recorded */
    ck_assert_int_eq(sc_int("SELECT count(*) FROM oplog2pg.copy_shard_state WHERE service = '%s' AND end_sec IS NOT "
                            "NULL",
                            e.service),
                     3);
    ck_assert_int_eq(sc_int("SELECT count(*) FROM oplog2pg.shard_checkpoint WHERE service = '%s'", e.service), 3);
    ck_assert(denv_file_contains(e.log, "initial copy complete"));
    fprintf(stderr, "shard_copy: %d rounds of writes during the copy\n", during);
    sc_stop(&e);
}
END_TEST

START_TEST(test_copy_killed_and_resumed)
{
    if (!denv_using_sim()) {
        SKIP_TEST("a sharded cluster: mongosim --shards (MONGO_URI names a replica set)");
        return;
    }
    scenv e;
    sc_start(&e, "kill", 2);
    const int per = 6000;
    sc_load(&e, per);
    sc_daemon(&e);
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
        sc_kill(&e);
        sc_round(&e, per, round++, &seed);
        sc_daemon(&e);
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
    sc_kill(&e);
    for (int i = 0; i < 4; i++)
        sc_round(&e, per, round++, &seed);
    sc_daemon(&e);
    ck_assert_msg(sc_wait_equal(&e, 120), "PostgreSQL differs from the cluster");
    ck_assert_int_eq(sc_int("SELECT count(*) FROM oplog2pg.shard_checkpoint WHERE service = '%s'", e.service), 2);
    ck_assert_int_eq(sc_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE service = '%s'", e.service), 0);
    sc_stop(&e);
}
END_TEST

/* One shard's oplog rolls past its start while the copy runs (mongosimTruncateOplog on that shard's own port): the
 * copy stops with the window lost, naming the shard, and exit code 7. */
START_TEST(test_shard_window_lost)
{
    if (!denv_using_sim()) {
        SKIP_TEST("a sharded cluster: mongosim --shards (MONGO_URI names a replica set)");
        return;
    }
    scenv e;
    sc_start(&e, "win", 2);
    sc_load(&e, 6000);
    sc_daemon(&e);
    sc_wait(&e, sc_copy_started, "the copy's start");
    PGconn *hold = sc_hold(&e); /* the copy cannot finish before its window is checked */
    /* a write on shard1 (collection a from _id 2000 to 4000), then shard1's oplog cut just before it */
    sc_update(&e, "a", 3000, BCON_NEW("$set", "{", "w", BCON_INT32(1), "}"));
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
        sc_show_log(&e);
    sc_release(hold);
    ck_assert_msg(stopped, "the daemon did not stop");
    if (proc_exit_code(&e.daemon) != 7)
        sc_show_log(&e);
    ck_assert_int_eq(proc_exit_code(&e.daemon), 7);
    ck_assert(denv_file_contains(e.log, "the oplog of shard 'shard1' no longer holds its start"));
    ck_assert(!sc_copy_finished(&e));
    e.daemon.pid = 0;
    sc_stop(&e);
}
END_TEST

static bool has_twin(int i)
{
    return i % 7 != 1 && i % 7 != 4 && i % 7 != 6;
}

START_TEST(test_same_id_on_two_shards)
{
    if (!denv_using_sim()) {
        SKIP_TEST("a sharded cluster: mongosim --shards (MONGO_URI names a replica set)");
        return;
    }
    scenv e;
    sc_start(&e, "dup", 2);
    sc_admin(&e, BCON_NEW("enableSharding", BCON_UTF8(e.db), "primaryShard", BCON_UTF8("shard0")));
    int at[1] = {100};
    sc_shard_coll(&e, "d", "k", at, 1); /* k < 100 on shard0, k >= 100 on shard1 */
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
    sc_daemon(&e);
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
        sc_kill(&e);
        kills++;
        int64_t last = denv_pg_int(last_sql);
        at_twin += last >= 0 && has_twin((int)last);
        sc_daemon(&e);
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
    sc_stop(&e);
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

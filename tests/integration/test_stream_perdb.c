/*
 * test_stream_perdb.c — the whole daemon reading a change stream from a mongosim that refuses the cluster-wide stream
 * (--refuse-cluster-stream: 13 Unauthorized, as a user whose roles grant changeStream and find on some databases
 * only), so that it reads one stream per database named in [replication] include, merged in clusterTime order:
 *   - inserts, updates and deletes in two databases and driver transactions that write both databases end equal in
 *     PostgreSQL (tests/lib/compare.h through denv_expect_match), every cross-database transaction whole: each writes
 *     the same counter document in both databases, so the two counters are equal in every committed state;
 *   - kill -9 at random moments during that workload, then a restart each time, ends exact (each database's stream
 *     resumes after its own token of the composite committed with the rows);
 *   - a dropped database (its stream invalidated) written again afterwards is followed on;
 *   - a database added to include between runs starts at the committed clusterTime;
 *   - an include with a pattern in its database part stops the daemon with a message naming the remedy.
 *
 * mongosim only (its --refuse-cluster-stream option): against a real replica set every case skips. Waits are on
 * events (the checkpoint, a log line, the daemon's exit); the only sleeps pace the kills and the polling.
 */
#include <check.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/daemonenv.h"
#include "../lib/proc.h"
#include "../lib/skip.h"

Suite *stream_perdb_suite(void);

#define NEED_SIM()                                                                                                     \
    do {                                                                                                               \
        if (!denv_using_sim())                                                                                         \
            SKIP_TEST("needs mongosim (its --refuse-cluster-stream option)");                                          \
    } while (0)

#define INI_STREAM "\n[mongodb]\nsource = change_stream\n"

static const char *refuse[] = {"--refuse-cluster-stream", NULL};

/* Sets include to the databases <prefix>a and <prefix>b (and c when three). */
static void include_dbs(denv *e, bool three)
{
    char inc[512];
    snprintf(inc, sizeof inc, "%sa.*, %sb.*%s%s%s", e->prefix, e->prefix, three ? ", " : "", three ? e->prefix : "",
             three ? "c.*" : "");
    denv_set_include(e, inc);
}

/* The checkpoint at the newest entry, or (strict false, before any write) the tick before it (a high-water mark
 * there: its events may still come). After a write the checkpoint must reach the write itself. */
static bool wait_at_newest(denv *e, double timeout_s, bool strict)
{
    double until = denv_now() + timeout_s;
    while (denv_now() < until) {
        uint64_t want = denv_newest_ts(e->uri), have = denv_checkpoint_ts(e->service);
        if (want != 0 && (have == want || (!strict && have + 1 == want)))
            return true;
        if (e->daemon.pid != 0 && proc_wait(&e->daemon, 0.0)) {
            denv_show_log(e);
            ck_abort_msg("the daemon exited with %d while catching up", proc_exit_code(&e->daemon));
        }
        usleep(50 * 1000);
    }
    denv_show_log(e);
    return false;
}

/* ---- the workload: single writes in both databases and transactions over both ---- */

typedef struct {
    denv *e;
    unsigned seed;
    int rounds;
    atomic_bool done;
    bool ok;
    char err[512];
    int txns;
} work_thread;

static bool upd(mongoc_collection_t *coll, int id, int round, mongoc_client_session_t *cs, bson_error_t *err)
{
    bson_t *q = BCON_NEW("_id", BCON_INT32(id));
    bson_t *u = BCON_NEW("$inc", "{", "n", BCON_INT32(1), "}", "$set", "{", "last", BCON_INT32(round), "}");
    bson_t opts = BSON_INITIALIZER;
    BSON_APPEND_BOOL(&opts, "upsert", true);
    bool ok = (cs == NULL || mongoc_client_session_append(cs, &opts, err)) &&
              mongoc_collection_update_one(coll, q, u, &opts, NULL, err);
    bson_destroy(&opts);
    bson_destroy(q);
    bson_destroy(u);
    return ok;
}

/* <prefix>a.t and <prefix>b.t hold the same counters: a transaction increments document id in both; single writes go
 * to <prefix>a.s and <prefix>b.s (upserts, increments, deletes). */
static void *work_main(void *arg)
{
    work_thread *w = arg;
    mongoc_client_t *c = mongoc_client_new(w->e->uri);
    char da[64], db[64];
    snprintf(da, sizeof da, "%sa", w->e->prefix);
    snprintf(db, sizeof db, "%sb", w->e->prefix);
    mongoc_collection_t *ta = mongoc_client_get_collection(c, da, "t"), *tb = mongoc_client_get_collection(c, db, "t");
    mongoc_collection_t *s[2] = {mongoc_client_get_collection(c, da, "s"), mongoc_client_get_collection(c, db, "s")};
    bson_error_t err;
    memset(&err, 0, sizeof err);
    w->ok = true;
    for (int round = 0; round < w->rounds && w->ok; round++) {
        unsigned r = (unsigned)rand_r(&w->seed) % 100;
        int id = 1 + rand_r(&w->seed) % 30;
        if (r < 40) {
            mongoc_client_session_t *cs = mongoc_client_start_session(c, NULL, &err);
            if (cs == NULL || !mongoc_client_session_start_transaction(cs, NULL, &err)) {
                w->ok = false;
                break;
            }
            bool ok = upd(ta, id, round, cs, &err) && upd(tb, id, round, cs, &err) &&
                      upd(s[rand_r(&w->seed) % 2], 100 + id, round, cs, &err);
            bson_t reply;
            ok = ok && mongoc_client_session_commit_transaction(cs, &reply, &err);
            if (ok) {
                bson_destroy(&reply);
                w->txns++;
            } else {
                w->ok = false;
            }
            mongoc_client_session_destroy(cs);
        } else if (r < 85) {
            w->ok = upd(s[rand_r(&w->seed) % 2], id, round, NULL, &err);
        } else {
            bson_t *q = BCON_NEW("_id", BCON_INT32(id));
            w->ok = mongoc_collection_delete_one(s[rand_r(&w->seed) % 2], q, NULL, NULL, &err);
            bson_destroy(q);
        }
    }
    if (!w->ok)
        snprintf(w->err, sizeof w->err, "%s", err.message);
    mongoc_collection_destroy(ta);
    mongoc_collection_destroy(tb);
    mongoc_collection_destroy(s[0]);
    mongoc_collection_destroy(s[1]);
    mongoc_client_destroy(c);
    atomic_store(&w->done, true);
    return NULL;
}

/* Every counter of <prefix>a.t equals its twin in <prefix>b.t, and there are some. */
static void expect_twins(const denv *e)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM \"%sa\".\"t\" x JOIN \"%sb\".\"t\" y ON x._id = y._id "
             "WHERE x.doc->'n' = y.doc->'n'",
             e->prefix, e->prefix);
    int64_t same = denv_pg_int(sql);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%sa\".\"t\"", e->prefix);
    int64_t all = denv_pg_int(sql);
    ck_assert_int_gt(all, 0);
    ck_assert_int_eq(same, all);
}

START_TEST(test_two_databases_and_transactions)
{
    NEED_SIM();
    denv e;
    denv_start(&e, "pdb", refuse, INI_STREAM);
    include_dbs(&e, false);
    denv_daemon_start(&e);
    ck_assert_msg(wait_at_newest(&e, 60, false), "the daemon did not commit its starting point");
    ck_assert_msg(denv_wait_log(&e, "reading one stream per database", 30), "the daemon does not say it reads one "
                                                                            "stream per database");
    char da[64], db[64];
    snprintf(da, sizeof da, "%sa", e.prefix);
    snprintf(db, sizeof db, "%sb", e.prefix);
    denv_insert_range(&e, da, "c", 1, 300);
    denv_insert_range(&e, db, "c", 1, 200);
    work_thread w = {.e = &e, .seed = 7, .rounds = 600};
    work_main(&w);
    ck_assert_msg(w.ok, "workload: %s", w.err);
    ck_assert_int_gt(w.txns, 50);
    ck_assert_msg(wait_at_newest(&e, 120, true), "the daemon did not catch up");
    denv_expect_match(&e);
    expect_twins(&e);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM \"rep_pdb_a\".\"c\""), 300);
    /* status reads the per-database tokens' time */
    char out[300];
    snprintf(out, sizeof out, "%s/cmd.out", e.dir);
    const char *status_json[] = {"-c", e.ini, "status", "--json", NULL};
    ck_assert_int_eq(denv_run_command(&e, status_json, out), 0);
    ck_assert_msg(denv_file_contains(out, "\"resume_token\": {\"bytes\": "), "status shows no resume token");
    ck_assert_msg(!denv_file_contains(out, "\"time\": null}"), "status shows no time for the per-database tokens");
    denv_stop(&e);
}
END_TEST

START_TEST(test_kill9_resumes_exactly)
{
    NEED_SIM();
    denv e;
    denv_start(&e, "pdbk", refuse, INI_STREAM);
    include_dbs(&e, false);
    denv_daemon_start(&e);
    ck_assert_msg(wait_at_newest(&e, 60, false), "the daemon did not commit its starting point");
    /* a first write applied: what is committed from here on is the per-database tokens, which every restart reads */
    char da[64];
    snprintf(da, sizeof da, "%sa", e.prefix);
    denv_insert_range(&e, da, "first", 1, 1);
    ck_assert_msg(wait_at_newest(&e, 60, true), "the first write was not applied");
    uint64_t ckpt = denv_checkpoint_ts(e.service);
    unsigned seed = 11;
    work_thread w = {.e = &e, .seed = seed, .rounds = 20000};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, work_main, &w), 0);
    int kills = 0, resumed = 0;
    while (kills < 5) {
        /* These sleeps only pace the kills; no check below depends on where they land. */
        usleep((useconds_t)(200000 + rand_r(&seed) % 600000));
        ck_assert_msg(!proc_wait(&e.daemon, 0.0), "the daemon exited by itself with %d", proc_exit_code(&e.daemon));
        proc_signal(&e.daemon, SIGKILL);
        ck_assert(proc_wait(&e.daemon, 10));
        kills++;
        denv_wait_sessions_gone();
        uint64_t now = denv_checkpoint_ts(e.service);
        ck_assert_msg(now >= ckpt, "the checkpoint went back across a restart");
        resumed += now > ckpt;
        ckpt = now;
        denv_daemon_start(&e);
    }
    pthread_join(th, NULL);
    ck_assert_msg(w.ok, "workload: %s", w.err);
    ck_assert_msg(resumed >= 1, "no run committed anything before its kill");
    ck_assert_msg(wait_at_newest(&e, 300, true), "the daemon did not catch up after %d kills", kills);
    /* (the last run may have had nothing left to apply: its log line is waited for, not assumed written) */
    if (!denv_wait_log(&e, "resuming one stream per database", 60))
        denv_show_log(&e);
    ck_assert_msg(denv_file_contains(e.log, "resuming one stream per database"),
                  "a restart did not resume from the per-database tokens");
    denv_expect_match(&e);
    expect_twins(&e);
    denv_stop(&e);
}
END_TEST

START_TEST(test_dropped_database_followed)
{
    NEED_SIM();
    denv e;
    denv_start(&e, "pdbd", refuse, INI_STREAM);
    include_dbs(&e, false);
    denv_daemon_start(&e);
    ck_assert(wait_at_newest(&e, 60, false));
    char da[64], db[64];
    snprintf(da, sizeof da, "%sa", e.prefix);
    snprintf(db, sizeof db, "%sb", e.prefix);
    denv_insert_range(&e, db, "c", 1, 50);
    denv_insert_range(&e, da, "c", 1, 10);
    ck_assert(wait_at_newest(&e, 60, true));
    denv_drop_database(&e, db);
    denv_insert_range(&e, db, "c", 100, 120); /* after the drop: the stream reopened after its invalidate */
    denv_insert_range(&e, da, "c", 11, 20);
    ck_assert(wait_at_newest(&e, 60, true));
    ck_assert_msg(denv_file_contains(e.log, "was invalidated"), "the invalidate was not seen");
    denv_expect_match(&e);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM \"rep_pdbd_b\".\"c\""), 21);
    /* a database added to include between runs starts at the committed clusterTime */
    char dc[64];
    snprintf(dc, sizeof dc, "%sc", e.prefix);
    proc_signal(&e.daemon, SIGTERM);
    ck_assert(proc_wait(&e.daemon, 30));
    ck_assert_int_eq(proc_exit_code(&e.daemon), 0);
    /* written while the daemon is stopped, after its checkpoint: the new database's stream must start there */
    denv_insert_range(&e, dc, "c", 1, 5);
    denv_insert_range(&e, da, "c", 21, 25);
    include_dbs(&e, true);
    denv_daemon_start(&e);
    denv_insert_range(&e, dc, "c", 6, 8);
    ck_assert(wait_at_newest(&e, 60, true));
    denv_expect_match(&e);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM \"rep_pdbd_c\".\"c\""), 8);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM \"rep_pdbd_a\".\"c\""), 25);
    denv_stop(&e);
}
END_TEST

/* mongosim --refuse-cluster-stream answers as the server does: 13 Unauthorized for the cluster-wide stream, and a
 * database's stream still opens. */
START_TEST(test_sim_refuses_cluster_stream)
{
    NEED_SIM();
    denv e;
    denv_start(&e, "pdbs", refuse, INI_STREAM);
    mongoc_client_t *c = mongoc_client_new(e.uri);
    bson_t *cmd = BCON_NEW("aggregate", BCON_INT32(1), "pipeline", "[", "{", "$changeStream", "{",
                           "allChangesForCluster", BCON_BOOL(true), "}", "}", "]", "cursor", "{", "}");
    bson_t reply;
    bson_error_t err;
    ck_assert(!mongoc_client_command_simple(c, "admin", cmd, NULL, &reply, &err));
    ck_assert_uint_eq(err.code, 13);
    ck_assert_msg(strncmp(err.message, "not authorized on admin to execute command {", 44) == 0, "%s", err.message);
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, &reply, "codeName") && BSON_ITER_HOLDS_UTF8(&it));
    ck_assert_str_eq(bson_iter_utf8(&it, NULL), "Unauthorized");
    bson_destroy(&reply);
    bson_destroy(cmd);
    cmd = BCON_NEW("aggregate", BCON_INT32(1), "pipeline", "[", "{", "$changeStream", "{", "}", "}", "]", "cursor", "{",
                   "}");
    ck_assert_msg(mongoc_client_command_simple(c, "rep_pdbs_a", cmd, NULL, &reply, &err), "%s", err.message);
    bson_destroy(&reply);
    bson_destroy(cmd);
    mongoc_client_destroy(c);
    denv_stop(&e);
}
END_TEST

START_TEST(test_wildcard_refused)
{
    NEED_SIM();
    denv e;
    denv_start(&e, "pdbw", refuse, INI_STREAM); /* include = rep_pdbw_*.*: a pattern in the database part */
    const char *skip[] = {"--skip-import", NULL};
    denv_daemon_start_args(&e, skip, NULL);
    ck_assert_msg(proc_wait(&e.daemon, 60), "the daemon did not stop");
    ck_assert_int_ne(proc_exit_code(&e.daemon), 0);
    if (!denv_file_contains(e.log, "name the databases in include"))
        denv_show_log(&e);
    ck_assert_msg(denv_file_contains(e.log, "name the databases in include"), "the message does not name the remedy");
    ck_assert_msg(denv_file_contains(e.log, "readAnyDatabase"), "the message does not name the other remedy");
    e.daemon.pid = 0;
    denv_stop(&e);
}
END_TEST

Suite *stream_perdb_suite(void)
{
    Suite *s = suite_create("stream_perdb");
    TCase *tc = tcase_create("perdb");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_sim_refuses_cluster_stream);
    tcase_add_test(tc, test_two_databases_and_transactions);
    tcase_add_test(tc, test_kill9_resumes_exactly);
    tcase_add_test(tc, test_dropped_database_followed);
    tcase_add_test(tc, test_wildcard_refused);
    suite_add_tcase(s, tc);
    return s;
}

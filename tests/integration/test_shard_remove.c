/*
 * test_shard_remove.c — a shard removed from a sharded cluster (mongosim --shards N, tests/mongosim/README.md
 * "Sharded cluster") while oplog2pg replicates it: the daemon reads the removed shard to its end, then retires it
 * (its row of oplog2pg.shard_checkpoint deleted, `status` no longer lists it), and PostgreSQL ends equal to MongoDB.
 *
 * - removed while the daemon runs: writes on every shard, removeShard (its chunks move off) until "completed",
 *   writes go on, the removed shard is retired;
 * - removed while the daemon is down (killed with -9, with writes on the shard it has not applied yet): the restart
 *   finds the shard's row but not the shard in config.shards, reads its oplog at the hosts its row stores, holds
 *   (status and check say so) while the shard's last entries cannot be read yet, survives a kill -9 in the middle
 *   of that drain, applies what was left there, then retires it;
 * - a removed shard that cannot be reached holds the stream, named in the log and status, until it is back.
 * They need the simulator: with MONGO_URI set they skip.
 */
#include <check.h>
#include <mongoc/mongoc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/daemonenv.h"
#include "../lib/shenv.h"
#include "../lib/simcluster.h"
#include "../lib/skip.h"

/* A cluster of `shards` shards for the case `name` (service and database shrm_NAME); uri_options (may be NULL) are
 * appended to the daemon's URI (a case that needs short timeouts sets them). */
static void sh_start(shenv *e, const char *name, size_t shards, const char *uri_options, const char *extra_ini)
{
    shenv_opts o = {.prefix = "shrm", .shards = shards, .uri_options = uri_options, .extra_ini = extra_ini};
    shenv_start(e, name, &o);
}

/* db.c sharded on _id in three chunks: below 100 on shard0, 100..199 on shard1, 200 and up on shard2; the database's
 * primary shard0 (so removing shard2 needs no movePrimary). */
static void sh_three_chunks(shenv *e)
{
    shenv_enable_sharding(e, "shard0");
    const int at[2] = {100, 200};
    shenv_shard_coll(e, "c", "_id", at, 2);
}

/* The start of the removal cases: three shards (sh_three_chunks), the daemon started with --skip-import and ready,
 * documents 0..299 in db.c. */
static void sh_begin(shenv *e, const char *name, const char *uri_options)
{
    sh_start(e, name, 3, uri_options, "shard_note_after = 50ms");
    sh_three_chunks(e);
    const char *skip[] = {"--skip-import", NULL};
    shenv_daemon_ready(e, skip);
    for (int i = 0; i < 300; i++)
        shenv_insert(e, "c", i, i);
}

/* A client on shard2's own server (its test commands: sh_shard_command). */
static mongoc_client_t *sh_shard2_client(const shenv *e)
{
    char uri2[128];
    snprintf(uri2, sizeof uri2, "mongodb://127.0.0.1:%d/?directConnection=true", e->c.port[2]);
    mongoc_client_t *shard2 = mongoc_client_new(uri2);
    ck_assert_ptr_nonnull(shard2);
    return shard2;
}

/* removeShard shard2 until it answers "completed" (its first answer "started": its chunks move off at once in
 * mongosim, as the balancer moves them on a real cluster). */
static void sh_remove_shard2(shenv *e)
{
    const char *state = "";
    int calls = 0;
    do {
        bson_t reply;
        shenv_admin(e, BCON_NEW("removeShard", BCON_UTF8("shard2")), &reply);
        bson_iter_t it;
        ck_assert(bson_iter_init_find(&it, &reply, "state") && BSON_ITER_HOLDS_UTF8(&it));
        state = strcmp(bson_iter_utf8(&it, NULL), "completed") == 0 ? "completed" : "other";
        if (calls == 0)
            ck_assert_str_eq(bson_iter_utf8(&it, NULL), "started");
        bson_destroy(&reply);
        ck_assert_int_lt(++calls, 20);
    } while (strcmp(state, "completed") != 0);
    char err[256];
    ck_assert_msg(simcluster_refresh(&e->c, err, sizeof err), "%s", err);
    ck_assert_int_eq(e->c.n, 2);
}

/* Waits until the service has no row for shard2 (it is retired). */
static bool sh_wait_retired(shenv *e, double timeout_s)
{
    char sql[300];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM oplog2pg.shard_checkpoint WHERE service = '%s' AND shard = 'shard2'", e->service);
    double until = denv_now() + timeout_s;
    while (denv_now() < until) {
        if (denv_pg_int(sql) == 0)
            return true;
        usleep(200 * 1000);
    }
    shenv_show_log(e);
    return false;
}

/* A command on one shard's own server (a test command of mongosim's). */
static void sh_shard_command(mongoc_client_t *shard, bson_t *cmd)
{
    bson_error_t err;
    bson_t reply;
    bool ok = mongoc_client_command_simple(shard, "admin", cmd, NULL, &reply, &err);
    ck_assert_msg(ok, "%s", err.message);
    bson_destroy(&reply);
    bson_destroy(cmd);
}

/* The hosts stored in shard2's row: its replica set and port as config.shards lists them. */
static void sh_assert_hosts_stored(shenv *e, int port)
{
    char sql[400];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM oplog2pg.shard_checkpoint WHERE service = '%s' AND shard = 'shard2' AND hosts = "
             "'shard2/127.0.0.1:%d'",
             e->service, port);
    double until = denv_now() + 60;
    while (denv_pg_int(sql) != 1 && denv_now() < until)
        usleep(200 * 1000);
    ck_assert_int_eq(denv_pg_int(sql), 1);
}

START_TEST(test_shard_removed_while_running)
{
    SHENV_SKIP_UNLESS_SIM();
    shenv e;
    sh_begin(&e, "run", NULL);
    for (int i = 200; i < 300; i += 3)
        shenv_update(&e, "c", i, BCON_NEW("$inc", "{", "v", BCON_INT32(1000), "}"), false);
    ck_assert_msg(shenv_wait_equal(&e, 60, true), "PostgreSQL differs from the cluster before the removal");
    ck_assert_int_eq(e.c.n, 3);
    sh_assert_hosts_stored(&e, e.c.port[2]);
    /* Writes on shard2 up to its removal, then the removal, then writes on what moved off it. shard2's majority
     * commit point stops before them for a while, so that the drain can be seen. */
    mongoc_client_t *shard2 = sh_shard2_client(&e);
    sh_shard_command(shard2, BCON_NEW("mongosimMajority", "{", "freeze", BCON_BOOL(true), "}"));
    for (int i = 201; i < 300; i += 3)
        shenv_update(&e, "c", i, BCON_NEW("$set", "{", "last", BCON_UTF8("before the removal"), "}"), false);
    sh_remove_shard2(&e);
    for (int i = 202; i < 300; i += 3)
        shenv_update(&e, "c", i, BCON_NEW("$set", "{", "last", BCON_UTF8("after the removal"), "}"), false);
    for (int i = 300; i < 320; i++)
        shenv_insert(&e, "c", i, i);
    double until = denv_now() + 60;
    while (!denv_file_contains(e.log, "shard 'shard2' is removed from the cluster: applying its oplog up to")) {
        ck_assert_msg(denv_now() < until, "the daemon did not see shard2 leave config.shards");
        usleep(100 * 1000);
    }
    sleep(2); /* a tick: `status` says it drains */
    char out[300];
    ck_assert_int_eq(shenv_run(&e, "status", out, sizeof out), 0);
    ck_assert(denv_file_contains(out, "draining removed shard 'shard2'"));
    ck_assert(denv_file_contains(out, "shard shard2"));
    sh_shard_command(shard2, BCON_NEW("mongosimMajority", "{", "follow", BCON_BOOL(true), "}"));
    mongoc_client_destroy(shard2);
    ck_assert_msg(sh_wait_retired(&e, 90), "the removed shard was not retired");
    ck_assert(denv_file_contains(e.log, "shard 'shard2' is retired"));
    ck_assert_msg(shenv_wait_equal(&e, 60, true), "PostgreSQL differs from the cluster after the removal");
    /* The stream goes on without it. */
    for (int i = 320; i < 330; i++)
        shenv_insert(&e, "c", i, i);
    ck_assert_msg(shenv_wait_equal(&e, 60, true), "writes after the retirement were not applied");
    sleep(2); /* a tick: `status` no longer names it */
    ck_assert_int_eq(shenv_run(&e, "status", out, sizeof out), 0);
    ck_assert(denv_file_contains(out, "shard shard0"));
    ck_assert(denv_file_contains(out, "shard shard1"));
    ck_assert(!denv_file_contains(out, "shard shard2"));
    ck_assert(!denv_file_contains(out, "removed shard"));
    shenv_stop(&e);
}
END_TEST

START_TEST(test_shard_removed_while_stopped)
{
    SHENV_SKIP_UNLESS_SIM();
    shenv e;
    sh_begin(&e, "down", NULL);
    ck_assert_msg(shenv_wait_equal(&e, 60, true), "PostgreSQL differs from the cluster before the removal");
    sh_assert_hosts_stored(&e, e.c.port[2]);
    shenv_kill(&e);
    /* shard2's majority commit point stops here, so that its reader (read_concern = majority) cannot show what follows
     * until the test lets it: the daemon must wait for it, not retire shard2 before its last entries are applied. */
    mongoc_client_t *shard2 = sh_shard2_client(&e);
    sh_shard_command(shard2, BCON_NEW("mongosimMajority", "{", "freeze", BCON_BOOL(true), "}"));
    /* While the daemon is down: writes on shard2 it has not applied, then shard2 leaves the cluster (its documents
     * move off as migration copies, which are never applied: only shard2's own oplog has these updates). */
    for (int i = 200; i < 300; i += 2)
        shenv_update(&e, "c", i, BCON_NEW("$set", "{", "only_on_shard2", BCON_INT32(i), "}"), false);
    shenv_delete(&e, "c", 299, false);
    sh_remove_shard2(&e);
    for (int i = 201; i < 300; i += 4)
        shenv_update(&e, "c", i, BCON_NEW("$set", "{", "after", BCON_INT32(i), "}"), false);
    shenv_daemon_ready(&e, NULL);
    double until = denv_now() + 60;
    while (!denv_file_contains(e.log, "shard 'shard2' is removed from the cluster: applying its oplog up to")) {
        ck_assert_msg(denv_now() < until, "the daemon did not read shard2's end");
        usleep(100 * 1000);
    }
    /* Held: shard2 is not retired while its last entries are not applied, and `status` says it drains. */
    sleep(3);
    ck_assert_msg(!shenv_wait_equal(&e, 0, false), "shard2's entries past its majority commit point were applied");
    char sql[300];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM oplog2pg.shard_checkpoint WHERE service = '%s' AND shard = 'shard2'", e.service);
    if (denv_pg_int(sql) != 1)
        shenv_show_log(&e);
    ck_assert_int_eq(denv_pg_int(sql), 1);
    char out[300];
    ck_assert_int_eq(shenv_run(&e, "status", out, sizeof out), 0);
    ck_assert(denv_file_contains(out, "draining removed shard 'shard2'"));
    ck_assert(denv_file_contains(out, "shard shard2"));
    /* `check` reads it at the hosts its row stores */
    (void)shenv_run(&e, "check", out, sizeof out); /* its output is what this case checks */
    ck_assert(denv_file_contains(out, "shard 'shard2' (removed from the cluster, still drained): newest oplog entry"));
    /* kill -9 in the middle of the drain: the restart finds the row again and drains it again */
    shenv_kill(&e);
    shenv_daemon_ready(&e, NULL);
    until = denv_now() + 60;
    while (!denv_file_contains(e.log, "shard 'shard2' is removed from the cluster: applying its oplog up to")) {
        ck_assert_msg(denv_now() < until, "the daemon did not read shard2's end after the kill");
        usleep(100 * 1000);
    }
    ck_assert(denv_file_contains(e.log, "reading the rest of its oplog at shard2/127.0.0.1:"));
    ck_assert_int_eq(denv_pg_int(sql), 1);
    sh_shard_command(shard2, BCON_NEW("mongosimMajority", "{", "follow", BCON_BOOL(true), "}"));
    mongoc_client_destroy(shard2);
    ck_assert_msg(shenv_wait_equal(&e, 90, true), "what shard2 held when it left was not applied");
    ck_assert_msg(sh_wait_retired(&e, 90), "the removed shard was not retired after the restart");
    ck_assert(denv_file_contains(e.log, "config.shards no longer lists it (removed from the cluster)"));
    ck_assert(denv_file_contains(e.log, "shard 'shard2' is retired"));
    /* Once more, after the retirement: a restart reads two shards and nothing is missing. */
    shenv_kill(&e);
    for (int i = 330; i < 340; i++)
        shenv_insert(&e, "c", i, i);
    shenv_daemon_ready(&e, NULL);
    ck_assert_msg(shenv_wait_equal(&e, 60, true), "PostgreSQL differs from the cluster after a restart");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM oplog2pg.shard_checkpoint WHERE service = '%s'", e.service);
    ck_assert_int_eq(denv_pg_int(sql), 2);
    shenv_stop(&e);
}
END_TEST

/* A removed shard that cannot be reached (its server answers as a secondary with no primary, as a replica set with
 * no member left to elect) is never skipped: the stream holds, the log and `status` name it, and once it is back the
 * daemon drains and retires it. */
START_TEST(test_removed_shard_unreachable_holds)
{
    SHENV_SKIP_UNLESS_SIM();
    shenv e;
    sh_begin(&e, "gone", "?serverSelectionTimeoutMS=1500");
    ck_assert_msg(shenv_wait_equal(&e, 60, true), "PostgreSQL differs from the cluster before the removal");
    sh_assert_hosts_stored(&e, e.c.port[2]);
    shenv_kill(&e);
    mongoc_client_t *shard2 = sh_shard2_client(&e);
    for (int i = 200; i < 300; i += 2)
        shenv_update(&e, "c", i, BCON_NEW("$set", "{", "only_on_shard2", BCON_INT32(i), "}"), false);
    sh_remove_shard2(&e);
    /* shard2 has no primary for 20 s: its oplog can be neither read nor noted */
    sh_shard_command(shard2, BCON_NEW("mongosimStepDown", BCON_INT32(20000)));
    double back = denv_now() + 20;
    mongoc_client_destroy(shard2);
    shenv_daemon_ready(&e, NULL);
    double until = denv_now() + 60;
    while (
        !denv_file_contains(e.log, "shard 'shard2' is removed from the cluster, and its oplog's end cannot be read")) {
        ck_assert_msg(denv_now() < until, "the daemon did not say that shard2 cannot be reached");
        usleep(100 * 1000);
    }
    /* The tick after the warning names it in `status`. */
    sleep(2);
    ck_assert_msg(denv_now() < back, "the test's steps took longer than shard2's step-down");
    char out[300];
    ck_assert_int_eq(shenv_run(&e, "status", out, sizeof out), 0);
    ck_assert(denv_file_contains(out, "holding: unreachable removed shard 'shard2'"));
    ck_assert(denv_file_contains(out, "shard shard2"));
    ck_assert_msg(!shenv_wait_equal(&e, 0, false), "shard2's last entries were applied while it could not be read");
    char sql[300];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM oplog2pg.shard_checkpoint WHERE service = '%s' AND shard = 'shard2'", e.service);
    ck_assert_int_eq(denv_pg_int(sql), 1);
    /* Back: drained, retired. */
    ck_assert_msg(shenv_wait_equal(&e, 120, true), "what shard2 held when it left was not applied");
    ck_assert_msg(sh_wait_retired(&e, 90), "the removed shard was not retired once reachable");
    shenv_stop(&e);
}
END_TEST

/* A row of a shard that config.shards no longer lists, with no hosts stored (an older oplog2pg wrote it): its rest
 * cannot be read, so the session does not start and the log names the row and the remedy; deleted while the daemon
 * is stopped, the next start applies what waited. */
START_TEST(test_removed_shard_without_hosts_holds)
{
    SHENV_SKIP_UNLESS_SIM();
    shenv e;
    sh_start(&e, "nohosts", 2, NULL, NULL);
    const char *skip[] = {"--skip-import", NULL};
    shenv_daemon_ready(&e, skip);
    for (int i = 0; i < 50; i++)
        shenv_insert(&e, "c", i, i);
    ck_assert_msg(shenv_wait_equal(&e, 60, true), "PostgreSQL differs from the cluster");
    ck_assert(proc_signal(&e.daemon, SIGTERM));
    ck_assert(proc_wait(&e.daemon, 60));
    char sql[400];
    snprintf(sql, sizeof sql,
             "INSERT INTO oplog2pg.shard_checkpoint (service, shard, ts_sec, ts_inc, term) VALUES ('%s', 'ghost', 1, "
             "1, 1)",
             e.service);
    denv_pg_exec(sql);
    for (int i = 50; i < 80; i++)
        shenv_insert(&e, "c", i, i);
    shenv_daemon(&e, NULL);
    double until = denv_now() + 60;
    while (!denv_file_contains(e.log, "shard 'ghost' has a checkpoint")) {
        ck_assert_msg(denv_now() < until, "the daemon did not name the row it cannot read");
        ck_assert_msg(!proc_wait(&e.daemon, 0), "the daemon exited");
        usleep(100 * 1000);
    }
    ck_assert(denv_file_contains(e.log, "delete its row from oplog2pg.shard_checkpoint"));
    sleep(2);
    ck_assert_msg(!shenv_wait_equal(&e, 0, false), "the session started past a shard it cannot read");
    ck_assert(proc_signal(&e.daemon, SIGTERM));
    ck_assert(proc_wait(&e.daemon, 60));
    ck_assert_int_eq(proc_exit_code(&e.daemon), 0);
    snprintf(sql, sizeof sql, "DELETE FROM oplog2pg.shard_checkpoint WHERE service = '%s' AND shard = 'ghost'",
             e.service);
    denv_pg_exec(sql);
    shenv_daemon_ready(&e, NULL);
    ck_assert_msg(shenv_wait_equal(&e, 60, true), "what waited was not applied once the row was gone");
    shenv_stop(&e);
}
END_TEST

Suite *shard_remove_suite(void); /* called by the generated runner list */

Suite *shard_remove_suite(void)
{
    Suite *s = suite_create("shard_remove");
    TCase *tc = tcase_create("remove");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_shard_removed_while_running);
    tcase_add_test(tc, test_shard_removed_while_stopped);
    tcase_add_test(tc, test_removed_shard_unreachable_holds);
    tcase_add_test(tc, test_removed_shard_without_hosts_holds);
    suite_add_tcase(s, tc);
    return s;
}

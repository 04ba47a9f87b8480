/*
 * test_copy_ddl.c — collections renamed or dropped while the initial copy reads them, and the copy stopped hard.
 *
 * The daemon copies with one worker and small batches, each batch slowed by a trigger on oplog2pg.copy_progress,
 * so that a helper thread can act at chosen moments (it watches the progress rows, never a clock):
 *   - a collection renamed mid-copy, then written under its new name: the copy follows it by its UUID and reads on
 *     into the same table; the replay renames the table and applies the writes;
 *   - one renamed twice mid-copy; one renamed to another database (a copy and a drop, as the oplog shows it);
 *   - one dropped mid-copy: marked done, the replay drops its table;
 *   - one renamed before its copy began, and a new collection made under the old name;
 *   - one renamed mid-copy over another the copy has not begun (dropTarget);
 *   - renamed and dropped while the daemon was stopped mid-copy (the resumed copy follows the stored UUIDs);
 *   - renamed mid-copy to a name [replication] leaves out: the copy's log line says the replay drops the table, and
 *     it does.
 * Each ends equal to MongoDB. A copy state without UUIDs (an earlier version's) stops with exit 5 naming --reimport
 * when a collection vanished, and --reimport then copies it exactly. A kill -9 while the writer thread commits
 * leaves a copy the next start finishes exactly; a SIGTERM there commits that batch and stops. --reimport of one
 * service beside another one running on the same database leaves the other's tables, rows and state alone. A rename
 * between the copy's start and its listing of the collections makes the copy plan again from a later start.
 */
#include <check.h>
#include <mongoc/mongoc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/daemonenv.h"
#include "../lib/skip.h"
#include "copy/copy.h"
#include "daemon/exitcodes.h"

#define WAIT_S 120.0

/* Installs the oplog2pg schema (copy_reset opens it) and forgets what an earlier run left, then slows each progress
 * update of the service by `secs`. */
static void slow_copy(const denv *e, const char *secs)
{
    char err[512], pat[64], sql[900];
    snprintf(pat, sizeof pat, "%s*.*", e->prefix);
    const char *inc[] = {pat, NULL};
    nsfilter *f = nsfilter_new(inc, NULL, err, sizeof err);
    ck_assert_msg(f, "%s", err);
    ck_assert_msg(copy_reset(denv_pg_conninfo(), e->service, f, true, err, sizeof err), "%s", err);
    nsfilter_free(f);
    snprintf(sql, sizeof sql,
             "CREATE OR REPLACE FUNCTION public.%s_slow() RETURNS trigger LANGUAGE plpgsql AS "
             "$$BEGIN PERFORM pg_sleep(%s); RETURN NEW; END$$; "
             "CREATE OR REPLACE TRIGGER %s_slow AFTER UPDATE ON oplog2pg.copy_progress FOR EACH ROW "
             "WHEN (NEW.service = '%s') EXECUTE FUNCTION public.%s_slow()",
             e->service, secs, e->service, e->service, e->service);
    denv_pg_exec(sql);
}

static void unslow_copy(const denv *e)
{
    char sql[300];
    snprintf(sql, sizeof sql,
             "DROP TRIGGER IF EXISTS %s_slow ON oplog2pg.copy_progress; DROP FUNCTION IF EXISTS "
             "public.%s_slow()",
             e->service, e->service);
    denv_pg_exec(sql);
}

/* Documents committed for db.coll so far (0 before the plan), and whether it is done. */
static int64_t copied(const denv *e, const char *db, const char *coll, bool *done)
{
    char sql[400];
    snprintf(sql, sizeof sql,
             "SELECT coalesce(max(copied), 0) FROM oplog2pg.copy_progress WHERE service = '%s' AND db = '%s' AND "
             "coll = '%s'",
             e->service, db, coll);
    int64_t n = denv_pg_int(sql);
    if (done != NULL) {
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM oplog2pg.copy_progress WHERE service = '%s' AND db = '%s' AND coll = '%s' AND "
                 "done",
                 e->service, db, coll);
        *done = denv_pg_int(sql) > 0;
    }
    return n;
}

/* Waits until db.coll has more than `than` documents committed, or is done; false when it is done. */
static bool wait_copied(const denv *e, const char *db, const char *coll, int64_t than)
{
    double until = denv_now() + WAIT_S;
    bool done = false;
    while (denv_now() < until && copied(e, db, coll, &done) <= than && !done)
        usleep(20000);
    return !done;
}

/* Waits until db.coll has more than `than` documents committed and is not done yet (the moment is mid-copy). */
static void wait_mid_copy(const denv *e, const char *db, const char *coll, int64_t than)
{
    double until = denv_now() + WAIT_S;
    bool done = false;
    while (denv_now() < until) {
        if (copied(e, db, coll, &done) > than || done)
            break;
        usleep(20000);
    }
    ck_assert_msg(!done, "%s.%s was copied to its end before the moment came", db, coll);
    ck_assert_msg(copied(e, db, coll, NULL) > than, "the copy of %s.%s did not get past %lld documents", db, coll,
                  (long long)than);
}

static void mongo_run(const denv *e, const char *db, bson_t *cmd)
{
    mongoc_client_t *c = mongoc_client_new(e->uri);
    bson_error_t err;
    bson_t reply;
    bool ok = mongoc_client_command_simple(c, db, cmd, NULL, &reply, &err);
    bson_destroy(&reply);
    mongoc_client_destroy(c);
    bson_destroy(cmd);
    ck_assert_msg(ok, "command: %s", err.message);
}

/* Writes after a move: a document far past what was copied updated, one deleted, a few inserted. */
static void write_after(const denv *e, const char *db, const char *coll)
{
    mongo_run(e, db,
              BCON_NEW("update", BCON_UTF8(coll), "updates", "[", "{", "q", "{", "_id", BCON_INT32(1400), "}", "u", "{",
                       "$set", "{", "v", BCON_INT32(-1), "moved", BCON_BOOL(true), "}", "}", "}", "]"));
    mongo_run(e, db,
              BCON_NEW("delete", BCON_UTF8(coll), "deletes", "[", "{", "q", "{", "_id", BCON_INT32(1450), "}", "limit",
                       BCON_INT32(1), "}", "]"));
    denv_insert_range(e, db, coll, 1501, 1505);
}

typedef struct {
    denv *e;
    char a[64], b[64];
} mover;

static void *mover_main(void *arg)
{
    mover *m = arg;
    denv *e = m->e;
    /* c1: renamed mid-copy, then written under its new name. c3, not begun yet: renamed, and a new c3 made. */
    wait_mid_copy(e, m->a, "c1", 300);
    denv_rename(e, m->a, "c1", m->a, "c1r", false);
    write_after(e, m->a, "c1r");
    denv_rename(e, m->a, "c3", m->a, "c3r", false);
    denv_insert_range(e, m->a, "c3", 5001, 5010);
    write_after(e, m->a, "c3r");
    /* c2: dropped mid-copy. */
    wait_mid_copy(e, m->a, "c2", 300);
    denv_drop_collection(e, m->a, "c2");
    /* c4: renamed to another database mid-copy. */
    wait_mid_copy(e, m->a, "c4", 300);
    denv_rename(e, m->a, "c4", m->b, "c4x", false);
    write_after(e, m->b, "c4x");
    /* c5: renamed twice mid-copy, once more after the copy read on. */
    wait_mid_copy(e, m->a, "c5", 300);
    denv_rename(e, m->a, "c5", m->a, "c5r", false);
    denv_rename(e, m->a, "c5r", m->a, "c5rr", false);
    write_after(e, m->a, "c5rr");
    (void)wait_copied(e, m->a, "c5", 700); /* a copy that marked c5 done at its rename goes no further */
    denv_rename(e, m->a, "c5rr", m->a, "c5rrr", false);
    /* c6: renamed mid-copy over c7, which the copy has not begun (dropTarget): c7 as planned is gone. */
    wait_mid_copy(e, m->a, "c6", 300);
    denv_rename(e, m->a, "c6", m->a, "c7", true);
    write_after(e, m->a, "c7");
    return NULL;
}

/* Writes all through the copy: $inc on random documents under every name the collections have at some moment
 * (an update of a name that does not exist at that moment changes nothing and makes no collection). */
typedef struct {
    const denv *e;
    const char *a, *b;
    atomic_bool stop;
    long writes;
} writer;

static void *writer_main(void *arg)
{
    writer *wr = arg;
    static const char *const names[] = {"c1", "c1r", "c2", "c3", "c3r", "c4", "c5", "c5r", "c5rr", "c5rrr", "c6", "c7"};
    const size_t n = sizeof names / sizeof names[0];
    mongoc_client_t *c = mongoc_client_new(wr->e->uri);
    unsigned seed = 30;
    while (!atomic_load(&wr->stop)) {
        size_t k = (size_t)rand_r(&seed) % (n + 1);
        mongoc_collection_t *co =
            k < n ? mongoc_client_get_collection(c, wr->a, names[k]) : mongoc_client_get_collection(c, wr->b, "c4x");
        bson_t *q = BCON_NEW("_id", BCON_INT32(1 + rand_r(&seed) % 1500));
        bson_t *u = BCON_NEW("$inc", "{", "w", BCON_INT32(1), "}");
        bson_error_t err;
        bool ok = mongoc_collection_update_one(co, q, u, NULL, NULL, &err);
        bson_destroy(q);
        bson_destroy(u);
        mongoc_collection_destroy(co);
        ck_assert_msg(ok, "update: %s", err.message);
        wr->writes++;
        usleep(2000);
    }
    mongoc_client_destroy(c);
    return NULL;
}

START_TEST(test_copy_follows_renames_and_drops)
{
    denv e;
    denv_start(&e, "cpddl", NULL, "[copy]\nworkers = 1\nbatch_docs = 100\n");
    mover m = {.e = &e};
    snprintf(m.a, sizeof m.a, "%sa", e.prefix);
    snprintf(m.b, sizeof m.b, "%sb", e.prefix);
    for (int i = 1; i <= 7; i++) {
        char coll[8];
        snprintf(coll, sizeof coll, "c%d", i);
        denv_insert_range(&e, m.a, coll, 1, 1500);
    }
    denv_insert_range(&e, m.b, "other", 1, 10);
    slow_copy(&e, "0.1");
    writer wr = {.e = &e, .a = m.a, .b = m.b};
    pthread_t th, wth;
    ck_assert_int_eq(pthread_create(&wth, NULL, writer_main, &wr), 0);
    ck_assert_int_eq(pthread_create(&th, NULL, mover_main, &m), 0);
    denv_daemon_start(&e);
    pthread_join(th, NULL);
    atomic_store(&wr.stop, true);
    pthread_join(wth, NULL);
    ck_assert_int_gt(wr.writes, 100);
    ck_assert(denv_wait_caught_up(&e, WAIT_S));
    unslow_copy(&e);
    /* The new c3 came through the oplog, the old one under its new name. */
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_cpddl_a.c3"), 10);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_cpddl_a.c1r"), 1504);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_cpddl_a.c5rrr"), 1504);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_cpddl_b.c4x"), 1504);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_cpddl_a.c7"), 1504);
    /* The tables of the collections dropped (c2; c4, moved to another database) were dropped by the replay. */
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM pg_tables WHERE schemaname = 'rep_cpddl_a' AND tablename IN "
                                 "('c1', 'c2', 'c4', 'c5', 'c5r', 'c5rr', 'c6')"),
                     0);
    denv_expect_match(&e);
    ck_assert(denv_file_contains(e.log, "is now rep_cpddl_a.c1r (renamed during the copy)"));
    ck_assert(denv_file_contains(e.log, "is now rep_cpddl_a.c5rrr (renamed during the copy)"));
    ck_assert(denv_file_contains(e.log, "copy of rep_cpddl_a.c2: the collection was dropped during the copy"));
    denv_stop(&e);
}
END_TEST

/* Renamed mid-copy to a name the filter leaves out: the copy reads on into the same table, and its log line says what
 * the replay does at the rename (it drops that table), not that it renames it. */
START_TEST(test_copy_rename_out_of_filter)
{
    denv e;
    denv_start(&e, "cpout", NULL, "exclude = rep_cpout_a.gone*\n[copy]\nworkers = 1\nbatch_docs = 100\n");
    char a[64];
    snprintf(a, sizeof a, "%sa", e.prefix);
    ck_assert_str_eq(a, "rep_cpout_a"); /* the exclude pattern above names it */
    denv_insert_range(&e, a, "c1", 1, 1500);
    denv_insert_range(&e, a, "kept", 1, 10);
    slow_copy(&e, "0.1");
    denv_daemon_start(&e);
    wait_mid_copy(&e, a, "c1", 300);
    denv_rename(&e, a, "c1", a, "gone1", false);
    ck_assert(denv_wait_caught_up(&e, WAIT_S));
    unslow_copy(&e);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_cpout_a.kept"), 10);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM pg_tables WHERE schemaname = 'rep_cpout_a' AND tablename IN "
                                 "('c1', 'gone1')"),
                     0);
    ck_assert(denv_file_contains(e.log, "is now rep_cpout_a.gone1 (renamed during the copy)"));
    ck_assert(denv_file_contains(e.log, "(the oplog replay then drops that table: [replication] leaves the new name "
                                        "out)"));
    ck_assert(!denv_file_contains(e.log, "the oplog replay then renames that table"));
    denv_stop(&e);
}
END_TEST

/* Renamed and dropped while the daemon was stopped mid-copy: the resumed copy follows the UUIDs it stored. */
START_TEST(test_copy_resumed_after_rename)
{
    denv e;
    denv_start(&e, "cpresume", NULL, "[copy]\nworkers = 1\nbatch_docs = 100\n");
    char a[64];
    snprintf(a, sizeof a, "%sa", e.prefix);
    denv_insert_range(&e, a, "c1", 1, 1500);
    denv_insert_range(&e, a, "c2", 1, 1500);
    denv_insert_range(&e, a, "c3", 1, 1500);
    slow_copy(&e, "0.1");
    denv_daemon_start(&e);
    wait_mid_copy(&e, a, "c1", 200);
    ck_assert(proc_signal(&e.daemon, SIGTERM));
    ck_assert(proc_wait(&e.daemon, WAIT_S));
    ck_assert_int_eq(proc_exit_code(&e.daemon), EXIT_OK);
    e.daemon.pid = 0;
    bool done;
    ck_assert(copied(&e, a, "c1", &done) > 0 && !done);
    denv_rename(&e, a, "c1", a, "c1r", false);
    write_after(&e, a, "c1r");
    denv_drop_collection(&e, a, "c2");
    denv_rename(&e, a, "c3", a, "c3r", false);
    denv_insert_range(&e, a, "c3", 7001, 7003);
    unslow_copy(&e);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, WAIT_S));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_cpresume_a.c1r"), 1504);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_cpresume_a.c3r"), 1500);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_cpresume_a.c3"), 3);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM pg_tables WHERE schemaname = 'rep_cpresume_a' AND tablename IN "
                                 "('c1', 'c2')"),
                     0);
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* A copy state of an earlier version holds no UUIDs: a collection that vanished cannot be told renamed from dropped.
 * The copy stops with exit 5 naming --reimport, and --reimport copies it exactly. */
START_TEST(test_copy_vanished_without_uuid_stops)
{
    denv e;
    denv_start(&e, "cpnouuid", NULL, "[copy]\nworkers = 1\nbatch_docs = 100\n");
    char a[64];
    snprintf(a, sizeof a, "%sa", e.prefix);
    denv_insert_range(&e, a, "c1", 1, 1500);
    denv_insert_range(&e, a, "c2", 1, 1500);
    slow_copy(&e, "0.1");
    denv_daemon_start(&e);
    wait_mid_copy(&e, a, "c1", 200);
    ck_assert(proc_signal(&e.daemon, SIGTERM));
    ck_assert(proc_wait(&e.daemon, WAIT_S));
    ck_assert_int_eq(proc_exit_code(&e.daemon), EXIT_OK);
    bool done;
    ck_assert(copied(&e, a, "c1", &done) > 0 && !done);
    char sql[300];
    snprintf(sql, sizeof sql, "UPDATE oplog2pg.copy_progress SET uuid = NULL WHERE service = '%s'", e.service);
    denv_pg_exec(sql);
    denv_rename(&e, a, "c1", a, "c1r", false);

    denv_daemon_start(&e);
    ck_assert(proc_wait(&e.daemon, WAIT_S));
    ck_assert_int_eq(proc_exit_code(&e.daemon), EXIT_UNSUPPORTED);
    ck_assert(denv_file_contains(e.log, "rep_cpnouuid_a.c1 is no longer listed"));
    ck_assert(denv_file_contains(e.log, "run with --reimport"));
    /* Nothing was marked done with a partial table. */
    ck_assert(copied(&e, a, "c1", &done) < 1500 && !done);

    unslow_copy(&e);
    const char *reimport[] = {"--reimport", NULL};
    denv_daemon_start_args(&e, reimport, NULL);
    ck_assert(denv_wait_caught_up(&e, WAIT_S));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_cpnouuid_a.c1r"), 1500);
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* kill -9 while the copy's writer thread commits (its transaction open, waiting in the trigger): the next start
 * resumes from the committed progress and ends equal to MongoDB, with writes made meanwhile replayed. */
START_TEST(test_copy_kill9_in_writer)
{
    denv e;
    denv_start(&e, "cpkill", NULL, "[copy]\nworkers = 1\nbatch_docs = 100\n");
    char a[64];
    snprintf(a, sizeof a, "%sa", e.prefix);
    denv_insert_range(&e, a, "c1", 1, 1500);
    denv_insert_range(&e, a, "c2", 1, 300);
    slow_copy(&e, "0.5");
    denv_daemon_start(&e);
    wait_mid_copy(&e, a, "c1", 400);
    /* Let the writer be inside a batch's transaction: the trigger holds it there. */
    char sql[400];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'UPDATE "
             "oplog2pg.copy_progress%%'");
    double until = denv_now() + WAIT_S;
    bool inside = false;
    while (denv_now() < until && !(inside = denv_pg_int(sql) > 0))
        usleep(5000);
    ck_assert_msg(inside, "the writer was never seen inside a batch's progress update");
    ck_assert(proc_signal(&e.daemon, SIGKILL));
    ck_assert(proc_wait(&e.daemon, WAIT_S));
    bool done;
    int64_t before = copied(&e, a, "c1", &done);
    ck_assert_msg(!done && before < 1500, "c1 was done before the kill");
    write_after(&e, a, "c1");
    unslow_copy(&e);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, WAIT_S));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_cpkill_a.c1"), 1504);
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* mongosim as a server: a drop or a rename of a collection kills its cursors (QueryPlanKilled at the next getMore),
 * also when a new collection took the name meanwhile; a cursor on an untouched collection reads on. */
static int getmore_after(const denv *e, const char *db, const char *coll, int what)
{
    mongoc_client_t *c = mongoc_client_new(e->uri);
    mongoc_collection_t *co = mongoc_client_get_collection(c, db, coll);
    bson_t filter = BSON_INITIALIZER;
    bson_t *opts = BCON_NEW("batchSize", BCON_INT32(2), "sort", "{", "_id", BCON_INT32(1), "}");
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(co, &filter, opts, NULL);
    const bson_t *doc;
    int n = 0;
    while (n < 2 && mongoc_cursor_next(cur, &doc))
        n++;
    ck_assert_int_eq(n, 2);
    if (what == 1) {
        denv_drop_collection(e, db, coll);
    } else if (what == 2) {
        denv_rename(e, db, coll, db, "moved", false);
    } else if (what == 3) {
        denv_rename(e, db, coll, db, "moved2", false);
        denv_insert_range(e, db, coll, 1, 5);
    }
    while (mongoc_cursor_next(cur, &doc))
        n++;
    bson_error_t err;
    int code = mongoc_cursor_error(cur, &err) ? (int)err.code : 0;
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    bson_destroy(&filter);
    mongoc_collection_destroy(co);
    mongoc_client_destroy(c);
    return code != 0 ? code : -n;
}

START_TEST(test_sim_getmore_after_drop_or_rename)
{
    denv e;
    denv_start(&e, "cpgm", NULL, NULL);
    char db[64];
    snprintf(db, sizeof db, "%sa", e.prefix);
    denv_insert_range(&e, db, "c", 1, 5);
    ck_assert_int_eq(getmore_after(&e, db, "c", 0), -5);
    ck_assert_int_eq(getmore_after(&e, db, "c", 2), 175);
    denv_insert_range(&e, db, "d", 1, 5);
    ck_assert_int_eq(getmore_after(&e, db, "d", 1), 175);
    denv_insert_range(&e, db, "f", 1, 5);
    ck_assert_int_eq(getmore_after(&e, db, "f", 3), 175);
    denv_stop(&e);
}
END_TEST

/* A collection renamed between the copy's start and its listing of the collections: listed under its new name, its
 * documents copied into that table, and the replay from the start applies the rename onto the copied table. The copy
 * sees the rename in the oplog after its start and makes its plan again from a later start. mongosim runs the rename
 * just before the copy's first listCollections (mongosimBeforeNext): the moment, without a race. */
START_TEST(test_copy_rename_before_listing)
{
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim's mongosimBeforeNext");
    denv e;
    denv_start(&e, "cplist", NULL, NULL);
    char a[64], from[128], to[128];
    snprintf(a, sizeof a, "%sa", e.prefix);
    snprintf(from, sizeof from, "%s.c1", a);
    snprintf(to, sizeof to, "%s.c2", a);
    denv_insert_range(&e, a, "c1", 1, 500);
    denv_insert_range(&e, a, "other", 1, 3);
    mongo_run(&e, "admin",
              BCON_NEW("mongosimBeforeNext", BCON_UTF8("listCollections"), "run", "{", "renameCollection",
                       BCON_UTF8(from), "to", BCON_UTF8(to), "}"));
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, WAIT_S));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_cplist_a.c2"), 500);
    denv_expect_match(&e);
    ck_assert(denv_file_contains(e.log, "a collection was renamed while the copy listed the collections"));
    denv_stop(&e);
}
END_TEST

/* SIGTERM while the writer thread is inside a batch's transaction: that batch is committed, the copy stops with
 * exit 0, and the next start finishes it exactly. */
START_TEST(test_copy_sigterm_in_writer)
{
    denv e;
    denv_start(&e, "cpterm", NULL, "[copy]\nworkers = 1\nbatch_docs = 100\n");
    char a[64];
    snprintf(a, sizeof a, "%sa", e.prefix);
    denv_insert_range(&e, a, "c1", 1, 1500);
    slow_copy(&e, "0.5");
    denv_daemon_start(&e);
    wait_mid_copy(&e, a, "c1", 300);
    const char *sql = "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'UPDATE "
                      "oplog2pg.copy_progress%'";
    double until = denv_now() + WAIT_S;
    bool inside = false;
    int64_t at_signal = 0; /* read before the batch seen inside is committed: that batch is not counted in it */
    while (denv_now() < until) {
        at_signal = copied(&e, a, "c1", NULL);
        if ((inside = denv_pg_int(sql) > 0))
            break;
        usleep(5000);
    }
    ck_assert_msg(inside, "the writer was never seen inside a batch's progress update");
    ck_assert(proc_signal(&e.daemon, SIGTERM));
    ck_assert(proc_wait(&e.daemon, WAIT_S));
    ck_assert_int_eq(proc_exit_code(&e.daemon), EXIT_OK);
    e.daemon.pid = 0;
    bool done;
    int64_t after = copied(&e, a, "c1", &done);
    ck_assert_msg(after > at_signal, "the batch being written at the signal was not committed (%lld, then %lld)",
                  (long long)at_signal, (long long)after);
    ck_assert(!done);
    ck_assert_int_eq(denv_checkpoint_ts(e.service), 0);
    write_after(&e, a, "c1");
    unslow_copy(&e);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, WAIT_S));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_cpterm_a.c1"), 1504);
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* --reimport of one service while another runs and writes to the same PostgreSQL database, even into the same
 * schema (both replicate collections of one MongoDB database): the other's tables, rows, checkpoint, copy state and
 * catalog rows are untouched, and it goes on replicating. */
static void write_service_ini(const denv *e, const char *path, const char *service, const char *include)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "[mongodb]\nuri = %s\n[postgres]\nconninfo = %s\n[replication]\nservice = %s\ninclude = %s\n", e->uri,
            denv_pg_conninfo(), service, include);
    fclose(f);
}

static void other_state(char *out, size_t outlen)
{
    denv_pg_text("SELECT md5(coalesce((SELECT string_agg(x::text, ',' ORDER BY x::text) FROM ("
                 "SELECT s::text AS x FROM oplog2pg.copy_state s WHERE service = 'rep_cpri_other' UNION ALL "
                 "SELECT p::text FROM oplog2pg.copy_progress p WHERE service = 'rep_cpri_other' UNION ALL "
                 "SELECT (t.schema_name, t.table_name, t.db, t.coll, t.service)::text FROM oplog2pg.tables t "
                 "WHERE service = 'rep_cpri_other') q), ''))",
                 out, outlen);
}

static bool other_caught_up(const denv *e, double secs)
{
    double until = denv_now() + secs;
    while (denv_now() < until) {
        if (denv_checkpoint_ts("rep_cpri_other") >= denv_newest_ts(e->uri))
            return true;
        usleep(50000);
    }
    return false;
}

START_TEST(test_reimport_beside_running_service)
{
    denv e;
    denv_start(&e, "cpri", NULL, NULL);
    write_service_ini(&e, e.ini, e.service, "rep_cpri_x.a*");
    char ini2[300], log2[300], err[512], bin[256];
    snprintf(ini2, sizeof ini2, "%s/other.ini", e.dir);
    snprintf(log2, sizeof log2, "%s/other.log", e.dir);
    write_service_ini(&e, ini2, "rep_cpri_other", "rep_cpri_x.b*");
    denv_insert_range(&e, "rep_cpri_x", "a1", 1, 500);
    denv_insert_range(&e, "rep_cpri_x", "b1", 1, 500);

    snprintf(bin, sizeof bin, "%s/oplog2pg", proc_build_dir());
    const char *argv[] = {bin, "-c", ini2, "run", "--reimport", NULL};
    proc_handle other;
    ck_assert_msg(proc_start(argv, NULL, log2, &other, err, sizeof err), "%s", err);
    ck_assert(other_caught_up(&e, WAIT_S));
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, WAIT_S));
    ck_assert(proc_stop(&e.daemon, 30));
    ck_assert_int_eq(proc_exit_code(&e.daemon), 0);
    e.daemon.pid = 0;

    denv_insert_range(&e, "rep_cpri_x", "b1", 501, 600);
    ck_assert(other_caught_up(&e, WAIT_S));
    char before[80], now[80];
    other_state(before, sizeof before);
    uint64_t other_ckpt = denv_checkpoint_ts("rep_cpri_other");

    /* This service's --reimport, while the other one writes. */
    const char *reimport[] = {"--reimport", NULL};
    denv_daemon_start_args(&e, reimport, NULL);
    denv_insert_range(&e, "rep_cpri_x", "b1", 601, 700);
    denv_insert_range(&e, "rep_cpri_x", "a1", 501, 510);
    ck_assert(denv_wait_caught_up(&e, WAIT_S));
    denv_insert_range(&e, "rep_cpri_x", "b1", 701, 710);
    ck_assert(other_caught_up(&e, WAIT_S));
    ck_assert(denv_file_contains(e.log, "--reimport"));

    other_state(now, sizeof now);
    ck_assert_str_eq(now, before);
    ck_assert(denv_checkpoint_ts("rep_cpri_other") > other_ckpt);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_cpri_x.b1"), 710);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_cpri_x.a1"), 510);
    denv_expect_match_prefix(&e, "rep_cpri_x");
    ck_assert(proc_signal(&other, SIGTERM));
    ck_assert(proc_wait(&other, WAIT_S));
    ck_assert_int_eq(proc_exit_code(&other), 0);
    denv_stop(&e);
}
END_TEST

Suite *copy_ddl_suite(void); /* called by the generated runner list */

Suite *copy_ddl_suite(void)
{
    Suite *s = suite_create("copy_ddl");
    TCase *tc = tcase_create("copy_ddl");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_sim_getmore_after_drop_or_rename);
    tcase_add_test(tc, test_copy_follows_renames_and_drops);
    tcase_add_test(tc, test_copy_resumed_after_rename);
    tcase_add_test(tc, test_copy_rename_out_of_filter);
    tcase_add_test(tc, test_copy_rename_before_listing);
    tcase_add_test(tc, test_copy_vanished_without_uuid_stops);
    tcase_add_test(tc, test_copy_kill9_in_writer);
    tcase_add_test(tc, test_copy_sigterm_in_writer);
    tcase_add_test(tc, test_reimport_beside_running_service);
    suite_add_tcase(s, tc);
    return s;
}

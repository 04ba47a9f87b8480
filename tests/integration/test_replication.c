/*
 * test_replication.c — the daemon end to end: a seeded random workload written to MongoDB (mongosim, or the replica
 * set at MONGO_URI) while oplog2pg runs, then every PostgreSQL row compared with the source (7.0 and 4.4 oplog
 * formats); the crash test: kill -9 at many moments, restart each time, and the result must still equal the source,
 * with the checkpoint at the newest oplog entry; PostgreSQL terminating the daemon's session under load; `replay` of
 * an oplog dump; `check`, a bad configuration file and SIGHUP; and the initial copy through the daemon: with writers
 * changing the documents being copied, killed three times (its committed progress sampled throughout: it never goes
 * back and ends at the source's count), the oplog losing the copy's start, and --import-only, --reimport, `status`
 * and a refused --tail-from position; the first inserts of 3 000 collections replayed in one stream (batch_tables,
 * auto by default, keeps each group's locks within PostgreSQL's lock table; a bound too high for it is halved at the
 * first "out of shared memory"). (--skip-import and --tail-from starting without a copy are
 * tested in test_lossless.c: test_skip_import_with_a_refused_op, test_tail_from_with_a_refused_op.)
 *
 * Each test gets its own mongosim (so its oplog and its format are its own), its own service name and its own
 * database prefix. With MONGO_URI pointing at a real replica set (OPLOG2PG_TEST_SIM unset), the tests use it instead
 * and the cases that need mongosim (the 4.4-format one, the oplog truncation) skip (skip.h).
 *
 * Tests wait for events (a checkpoint, a PostgreSQL session, a log line, copy progress), never for a time, before
 * they assert; the only sleeps pace the crash test's kills and the polling.
 */
#include <check.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../lib/compare.h"
#include "../lib/daemonenv.h"
#include "../lib/oplogutil.h"
#include "../lib/proc.h"
#include "../lib/skip.h"
#include "../lib/workload.h"

static void run_workload(denv *e, uint64_t seed, uint64_t ops)
{
    workload_config wc;
    workload_config_init(&wc);
    wc.seed = seed;
    wc.ops = ops;
    wc.db_prefix = e->prefix;
    wc.n_databases = 2;
    wc.n_namespaces = 6;
    wc.w_ddl = 2;
    workload_stats st;
    char err[512];
    ck_assert_msg(workload_run(e->uri, &wc, &st, err, sizeof err), "workload: %s", err);
    ck_assert_uint_gt(st.inserts, 0);
    ck_assert_uint_gt(st.updates, 0);
    ck_assert_uint_gt(st.replaces, 0);
    ck_assert_uint_gt(st.deletes, 0);
    ck_assert_uint_gt(st.drops + st.renames + st.creates, 0);
}

/* 100 000 mixed ops over 6 namespaces in 2 databases, 7.0 oplog ($v:2 diffs and replacements), daemon running
 * while they are written. */
START_TEST(test_workload_v2)
{
    denv e;
    denv_start(&e, "v2", NULL, NULL);
    denv_daemon_start(&e);
    run_workload(&e, 42, (uint64_t)denv_scaled(100000));
    ck_assert_msg(denv_wait_caught_up(&e, 300), "the daemon did not catch up within 300 s");
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* The same against a 4.4-format oplog ($v:1 $set/$unset modifiers), with small batches and a short timer so the
 * size and timer triggers fire too. */
START_TEST(test_workload_v1)
{
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim --oplog-format 4.4 ($v:1 updates)");
    if (denv_stream_descriptions())
        SKIP_TEST("4.4's $v:1 updates through updateDescription: such a server gives no disambiguatedPaths");
    const char *args[] = {"--oplog-format", "4.4", NULL};
    denv e;
    denv_start(&e, "v1", args, "batch_rows = 500\nflush_interval = 20ms\n");
    denv_daemon_start(&e);
    run_workload(&e, 7, 30000);
    ck_assert_msg(denv_wait_caught_up(&e, 300), "the daemon did not catch up within 300 s");
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

typedef struct {
    denv *e;
    uint64_t seed, ops;
    bool no_ddl;       /* no drops or renames: DDL while the initial copy runs is a documented limit */
    uint32_t first_id; /* _ids of its own when the namespaces already hold another workload's documents */
    bool done, ok;
    char err[512];
} workload_thread;

static void *workload_main(void *arg)
{
    workload_thread *w = arg;
    workload_config wc;
    workload_config_init(&wc);
    wc.seed = w->seed;
    wc.ops = w->ops;
    wc.db_prefix = w->e->prefix;
    wc.n_databases = 2;
    wc.n_namespaces = 6;
    wc.w_ddl = w->no_ddl ? 0 : 2;
    wc.first_id = w->first_id;
    wc.batch_size = 50; /* many small bulks: the oplog grows steadily while the daemon is being killed */
    workload_stats st;
    w->ok = workload_run(w->e->uri, &wc, &st, w->err, sizeof w->err);
    __atomic_store_n(&w->done, true, __ATOMIC_RELEASE);
    return NULL;
}

/* Waits until PostgreSQL lists none of the daemon sessions (application_name oplog2pg) whose pid is in
 * only[0..nonly), or none at all with only NULL. A killed daemon's session can still commit what it had sent until
 * its backend has gone; after this, the checkpoint moves only through a new one. */
static void wait_sessions_gone(PGconn *pg, const int *only, int nonly)
{
    char sql[1024] = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'oplog2pg' "
                     "AND pid <> pg_backend_pid()";
    if (only != NULL) {
        snprintf(sql + strlen(sql), sizeof sql - strlen(sql), " AND pid IN (0");
        for (int i = 0; i < nonly; i++)
            snprintf(sql + strlen(sql), sizeof sql - strlen(sql), ", %d", only[i]);
        snprintf(sql + strlen(sql), sizeof sql - strlen(sql), ")");
    }
    double until = denv_now() + 60;
    for (;;) {
        PGresult *r = PQexec(pg, sql);
        ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s", PQerrorMessage(pg));
        bool gone = strcmp(PQgetvalue(r, 0, 0), "0") == 0;
        PQclear(r);
        if (gone)
            return;
        ck_assert_msg(denv_now() < until, "the daemon's old PostgreSQL sessions were still there after 60 s");
        usleep(5 * 1000);
    }
}

/* Waits until the daemon's checkpoint passes `since` (it resumed and committed), or, once the workload is done,
 * until there is nothing left to commit. Aborts if the daemon exits or after timeout_s. Returns the checkpoint. */
static uint64_t wait_committed_since(denv *e, const workload_thread *w, uint64_t since, double timeout_s)
{
    double until = denv_now() + timeout_s;
    for (;;) {
        bool done = __atomic_load_n(&w->done, __ATOMIC_ACQUIRE);
        uint64_t ck = denv_checkpoint_ts(e->service);
        if (ck > since || (done && ck == denv_newest_ts(e->uri)))
            return ck;
        if (proc_wait(&e->daemon, 0.0)) {
            denv_show_log(e);
            ck_abort_msg("the daemon exited with %d", proc_exit_code(&e->daemon));
        }
        ck_assert_msg(denv_now() < until, "the daemon committed nothing within %.0f s", timeout_s);
        usleep(10 * 1000);
    }
}

/* kill -9 at 25 moments while a 100 000-op workload is written; each time the daemon restarts and resumes from its
 * committed checkpoint, which never goes back. Every other kill comes at a random time after the restart (which may
 * be before the run committed anything); the others at a random time after the run's first commit (or, once the
 * workload is written and applied, as soon as there is nothing left to commit), so those land in a run that
 * provably resumed. In the end PostgreSQL equals the source, and the checkpoint is the newest entry. */
START_TEST(test_crash_restart)
{
    denv e;
    denv_start(&e, "crash", NULL, "batch_rows = 2000\n");
    denv_daemon_start(&e);
    /* The first run must commit its starting point before anything is killed; after that every restart resumes. */
    ck_assert_msg(denv_wait_caught_up(&e, 30), "the daemon did not commit its starting point");
    uint64_t ckpt = denv_checkpoint_ts(e.service);
    PGconn *pg = PQconnectdb(denv_pg_conninfo());
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));

    workload_thread w = {.e = &e, .seed = 2024, .ops = 100000};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, workload_main, &w), 0);

    unsigned seed = 99;
    int kills = 0;
    while (kills < 25) {
        /* These sleeps only pace the kills; no check below depends on where they land. */
        if (kills % 2 == 0) {
            wait_committed_since(&e, &w, ckpt, 120);
            usleep((useconds_t)(rand_r(&seed) % 200000)); /* 0..200 ms after this run's first commit */
        } else {
            usleep((useconds_t)(30000 + rand_r(&seed) % 400000)); /* 30..430 ms after the restart */
        }
        ck_assert_msg(e.daemon.pid != 0 && !proc_wait(&e.daemon, 0.0), "the daemon exited by itself with %d",
                      proc_exit_code(&e.daemon));
        proc_signal(&e.daemon, SIGKILL);
        ck_assert(proc_wait(&e.daemon, 10));
        kills++;
        wait_sessions_gone(pg, NULL, 0); /* what the killed run committed is now all there is of it */
        uint64_t now = denv_checkpoint_ts(e.service);
        ck_assert_msg(now >= ckpt, "the checkpoint went back across a restart: %llx after %llx",
                      (unsigned long long)now, (unsigned long long)ckpt);
        ckpt = now;
        denv_daemon_start(&e);
    }
    PQfinish(pg);
    pthread_join(th, NULL);
    ck_assert_msg(w.ok, "workload: %s", w.err);

    ck_assert_msg(denv_wait_caught_up(&e, 300), "the daemon did not catch up after %d kills", kills);
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), denv_newest_ts(e.uri));
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* Terminates the daemon's PostgreSQL sessions whose pid is not in gone[0..*ngone) (sessions terminated before may
 * still be listed for a moment), adding them to gone; returns how many. */
static int terminate_new_sessions(PGconn *pg, int *gone, int *ngone, int max)
{
    char sql[1024] = "SELECT pid FROM pg_stat_activity WHERE application_name = 'oplog2pg' AND pid <> pg_backend_pid()";
    for (int i = 0; i < *ngone; i++)
        snprintf(sql + strlen(sql), sizeof sql - strlen(sql), " AND pid <> %d", gone[i]);
    PGresult *r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s", PQerrorMessage(pg));
    int n = 0;
    for (int i = 0; i < PQntuples(r); i++) {
        int pid = atoi(PQgetvalue(r, i, 0));
        char kill[96];
        snprintf(kill, sizeof kill, "SELECT pg_terminate_backend(%d)", pid);
        PGresult *k = PQexec(pg, kill);
        ck_assert_int_eq(PQresultStatus(k), PGRES_TUPLES_OK);
        if (strcmp(PQgetvalue(k, 0, 0), "t") == 0) {
            ck_assert_int_lt(*ngone, max);
            gone[(*ngone)++] = pid;
            n++;
        }
        PQclear(k);
    }
    PQclear(r);
    return n;
}

/* PostgreSQL drops the daemon's session five times while the workload runs: the same process reconnects and
 * resumes from its committed checkpoint each time (each drop waits for that: a new session and a checkpoint past
 * the one before the last drop), and the result still equals the source. */
START_TEST(test_postgres_reconnect)
{
    denv e;
    denv_start(&e, "pgkill", NULL, "batch_rows = 1000\n");
    denv_daemon_start(&e);
    ck_assert_msg(denv_wait_caught_up(&e, 30), "the daemon did not commit its starting point");
    pid_t pid = e.daemon.pid;
    uint64_t ckpt = denv_checkpoint_ts(e.service);

    workload_thread w = {.e = &e, .seed = 31, .ops = 30000};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, workload_main, &w), 0);
    PGconn *pg = PQconnectdb(denv_pg_conninfo());
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    int gone[64], ngone = 0, drops = 0, during_workload = 0;
    while (drops < 5) {
        wait_committed_since(&e, &w, ckpt, 120);
        bool writing = !__atomic_load_n(&w.done, __ATOMIC_ACQUIRE);
        /* A commit since the last drop (or, the workload done, nothing left to commit) means the daemon is back in
         * PostgreSQL: drop its new session. Should none be listed yet, look again. */
        int before = ngone;
        if (terminate_new_sessions(pg, gone, &ngone, 64) == 0) {
            usleep(10 * 1000);
            continue;
        }
        drops++;
        during_workload += writing;
        /* Once those backends are gone, the checkpoint moves only through a session of the reconnected daemon. */
        wait_sessions_gone(pg, gone + before, ngone - before);
        ckpt = denv_checkpoint_ts(e.service);
    }
    PQfinish(pg);
    pthread_join(th, NULL);
    ck_assert_msg(w.ok, "workload: %s", w.err);
    /* The workload takes seconds, the first drop comes at the daemon's first commit of it: that one at least hit a
     * daemon under load (the others may find it caught up on a fast machine). */
    ck_assert_msg(during_workload >= 1, "no session was dropped while the workload was being written");
    ck_assert_msg(denv_wait_caught_up(&e, 300), "the daemon did not catch up after PostgreSQL dropped it");
    ck_assert_int_eq(e.daemon.pid, pid); /* the same process: it reconnected, it was not restarted */
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* Copies the source's oplog into a mongodump-style file (concatenated BSON). */
static void dump_oplog(const char *uri, const char *path)
{
    mongoc_client_t *c = mongoc_client_new(uri);
    mongoc_collection_t *oplog = mongoc_client_get_collection(c, "local", "oplog.rs");
    bson_t filter = BSON_INITIALIZER;
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, &filter, NULL, NULL);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    const bson_t *doc;
    while (mongoc_cursor_next(cur, &doc))
        ck_assert_uint_eq(fwrite(bson_get_data(doc), 1, doc->len, f), doc->len);
    bson_error_t err;
    ck_assert_msg(!mongoc_cursor_error(cur, &err), "%s", err.message);
    fclose(f);
    mongoc_cursor_destroy(cur);
    bson_destroy(&filter);
    mongoc_collection_destroy(oplog);
    mongoc_client_destroy(c);
}

/* `oplog2pg replay` applies a dump of the oplog through the same pipeline; a second replay skips everything. */
/* `oplog2pg replay` of the source's oplog, dumped into the test's folder; its output in out (a path of 300 bytes),
 * shown when it fails. Returns its exit code. */
static int replay_dump(denv *e, char *out)
{
    char dump[300];
    snprintf(dump, sizeof dump, "%s/oplog.bson", e->dir);
    snprintf(out, 300, "%s/replay.out", e->dir);
    dump_oplog(e->uri, dump);
    const char *args[] = {"-c", e->ini, "replay", dump, NULL};
    int rc = denv_run_command(e, args, out);
    if (rc != 0)
        snprintf(e->log, sizeof e->log, "%s", out), denv_show_log(e);
    return rc;
}

START_TEST(test_replay_dump)
{
    denv e;
    denv_start(&e, "replay", NULL, NULL);
    run_workload(&e, 5, 20000);
    char out[300];
    ck_assert_int_eq(replay_dump(&e, out), 0);
    denv_expect_match(&e);
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), denv_newest_ts(e.uri));
    ck_assert_int_eq(replay_dump(&e, out), 0); /* the same oplog again */
    ck_assert_msg(denv_file_contains(out, "replayed 0 entries"), "a second replay applied entries again");
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* A long insert run streams its COPY and, past batch_bytes, lets go of the rows it has sent. One row of it is already
 * in the table (as an initial copy that overlapped the oplog leaves it), so the COPY meets its _id when it ends, with
 * most of its rows no longer in memory: the daemon goes back to the last commit, applies the same entries again with
 * every run keeping its rows, re-sends that run as upserts, and ends equal to the source, checkpoint at the newest
 * entry. */
START_TEST(test_let_go_then_rewind)
{
    denv e;
    denv_start(&e, "letgo", NULL, "batch_bytes = 100kB\n");
    char db[64], sql[300];
    snprintf(db, sizeof db, "%s0", e.prefix);
    denv_insert_range(&e, db, "c", 1, 1);
    char out[300];
    ck_assert_int_eq(replay_dump(&e, out), 0); /* the table, made by oplog2pg */
    const char *old = "'{\"_id\": 4000, \"s\": \"old\"}'";
    snprintf(sql, sizeof sql, "INSERT INTO \"%s\".c (_id, doc) VALUES ('4000', %s)", db, old);
    denv_pg_exec(sql);
    denv_insert_range(&e, db, "c", 2, 6000);
    ck_assert_int_eq(replay_dump(&e, out), 0);
    ck_assert_msg(denv_file_contains(out, "let go of rows"), "the COPY did not meet the _id after letting go");
    ck_assert_msg(denv_file_contains(out, "going back to the last commit"), "no rewind logged");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\".c", db);
    ck_assert_int_eq(denv_pg_int(sql), 6000);
    denv_expect_match(&e);
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), denv_newest_ts(e.uri));
    denv_stop(&e);
}
END_TEST

/* Short runs go as plain INSERTs. Inserts alternate between two collections, in groups of 8 (runs of 4 rows, too
 * short for COPY), and two of their rows are already in the tables, as an overlapping initial copy whose end is not
 * known leaves them: the group that meets one is applied again from the last commit with upserts up to where it had
 * got, and the replay ends equal to the source, checkpoint at the newest entry. */
START_TEST(test_plain_inserts_meet_existing)
{
    denv e;
    denv_start(&e, "plainins", NULL, "batch_rows = 8\n");
    char db[64], sql[300], out[300];
    snprintf(db, sizeof db, "%s0", e.prefix);
    denv_insert_range(&e, db, "a", 1, 1);
    denv_insert_range(&e, db, "b", 2, 2);
    ck_assert_int_eq(replay_dump(&e, out), 0); /* the tables, made by oplog2pg */
    const int there[2] = {151, 352};
    for (int i = 0; i < 2; i++) {
        snprintf(sql, sizeof sql, "INSERT INTO \"%s\".%s (_id, doc) VALUES ('%d', '{\"_id\": %d, \"s\": \"old\"}')", db,
                 there[i] % 2 ? "a" : "b", there[i], there[i]);
        denv_pg_exec(sql);
    }
    for (int i = 3; i <= 400; i++)
        denv_insert_range(&e, db, i % 2 ? "a" : "b", i, i);
    ck_assert_int_eq(replay_dump(&e, out), 0);
    ck_assert_msg(denv_file_contains(out, "met an existing _id"), "no plain insert met the rows already there");
    ck_assert_msg(denv_file_contains(out, "going back to the last commit"), "no rewind logged");
    snprintf(sql, sizeof sql, "SELECT (SELECT count(*) FROM \"%s\".a) + (SELECT count(*) FROM \"%s\".b)", db, db);
    ck_assert_int_eq(denv_pg_int(sql), 400);
    denv_expect_match(&e);
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), denv_newest_ts(e.uri));
    denv_stop(&e);
}
END_TEST

/* catchup_interval only stretches a group while a backlog waits: with it at an hour, a backlog written while the
 * daemon was stopped is still applied (batch_rows ends its groups), and inserts written while it runs are committed
 * as soon as the oplog runs dry, however their batches fall, not an hour later. */
START_TEST(test_catchup_interval_never_holds_back)
{
    denv e;
    denv_start(&e, "catchup", NULL, "catchup_interval = 1h\nbatch_rows = 2000\n");
    char db[64];
    snprintf(db, sizeof db, "%s0", e.prefix);
    denv_insert_range(&e, db, "c", 1, 9000);
    denv_daemon_start(&e);
    ck_assert_msg(denv_wait_caught_up(&e, 60), "the backlog was not applied");
    for (int round = 0; round < 3; round++) {
        int from = 10000 * (round + 1);
        denv_insert_range(&e, db, "c", from, from + 999 + 2000 * round);
        double t0 = denv_now();
        /* Held back would mean an hour: the bound is generous. */
        ck_assert_msg(denv_wait_caught_up(&e, 120), "round %d: not committed within 120 s", round);
        ck_assert_msg(denv_now() - t0 < 60, "round %d took %.1f s", round, denv_now() - t0);
    }
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* `check` reaches both sides; a bad configuration file is refused with its line and exit code 3; SIGHUP reloads. */
START_TEST(test_check_config_and_reload)
{
    denv e;
    denv_start(&e, "check", NULL, NULL);
    char out[300];
    snprintf(out, sizeof out, "%s/check.out", e.dir);
    const char *check[] = {"-c", e.ini, "check", NULL};
    ck_assert_int_eq(denv_run_command(&e, check, out), 0);
    ck_assert(denv_file_contains(out, "check passed"));

    char bad[300];
    snprintf(bad, sizeof bad, "%s/bad.ini", e.dir);
    FILE *f = fopen(bad, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "[replication]\nservice = x\nbatch_rows = lots\n");
    fclose(f);
    const char *badcheck[] = {"-c", bad, "check", NULL};
    ck_assert_int_eq(denv_run_command(&e, badcheck, out), 3);
    ck_assert_msg(denv_file_contains(out, "bad.ini:3: [replication] batch_rows"), "the error does not name file:line");

    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 30));
    f = fopen(e.ini, "a");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "[logging]\nlevel = debug\n");
    fclose(f);
    proc_signal(&e.daemon, SIGHUP);
    ck_assert_msg(denv_wait_log(&e, "configuration reloaded", 30), "no reload logged after SIGHUP");
    /* Each changed option is logged before the line that ends the reload. */
    ck_assert(denv_file_contains(e.log, "[logging] level changed"));

    /* check is read-only on PostgreSQL: it sees the running daemon and leaves it undisturbed. */
    ck_assert_int_eq(denv_run_command(&e, check, out), 0);
    ck_assert_msg(denv_file_contains(out, "being applied by a running oplog2pg"),
                  "check did not see the running daemon");
    ck_assert_msg(denv_file_contains(out, "resumes after "), "check did not report the checkpoint");
    ck_assert(denv_wait_caught_up(&e, 30));
    denv_stop(&e);
}
END_TEST

/* ---- the initial copy, through the daemon ---- */

/* Inserts n documents into the test's databases before anything runs (insert-only workload, mixed _id types);
 * returns how many documents the source then holds. */
static uint64_t fill(denv *e, uint64_t seed, uint64_t n)
{
    workload_config wc;
    workload_config_init(&wc);
    wc.seed = seed;
    wc.ops = n;
    wc.db_prefix = e->prefix;
    wc.n_databases = 2;
    wc.n_namespaces = 4;
    wc.mode = WORKLOAD_INSERT_ONLY;
    wc.batch_size = 1000;
    workload_stats st;
    char err[512];
    ck_assert_msg(workload_run(e->uri, &wc, &st, err, sizeof err), "fill: %s", err);
    return st.live_docs;
}

/* Documents the copy has committed so far, summed over collections from oplog2pg.copy_progress (-1 before the copy
 * has started); *finished (may be NULL) tells whether copy_state records the copy's end. */
static int64_t copied_so_far(PGconn *pg, const char *service, bool *finished)
{
    if (finished)
        *finished = false;
    /* The tables are made by the daemon's first connection: until then (a statement naming them would fail) -1. */
    PGresult *r = PQexec(pg, "SELECT to_regclass('oplog2pg.copy_progress') IS NOT NULL AND "
                             "to_regclass('oplog2pg.copy_state') IS NOT NULL");
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s", PQerrorMessage(pg));
    bool exist = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    PQclear(r);
    if (!exist)
        return -1;
    const char *params[1] = {service};
    r = PQexecParams(pg,
                     "SELECT (SELECT coalesce(sum(copied), -1) FROM oplog2pg.copy_progress WHERE service = $1), "
                     "coalesce((SELECT finished_at IS NOT NULL FROM oplog2pg.copy_state WHERE service = $1), false)",
                     1, NULL, params, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "reading the copy progress: %s", PQerrorMessage(pg));
    int64_t n = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    if (finished)
        *finished = strcmp(PQgetvalue(r, 0, 1), "t") == 0;
    PQclear(r);
    return n;
}

static PGconn *pg_connect(void)
{
    PGconn *pg = PQconnectdb(denv_pg_conninfo());
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    return pg;
}

/* The copy's committed progress, sampled again and again across the daemon's runs. */
#define PROGRESS_MAX  65536
#define PROGRESS_RUNS 8
typedef struct {
    int64_t v[PROGRESS_MAX]; /* sum(copied) at each sample, in the order taken */
    size_t n;
    size_t run_start[PROGRESS_RUNS]; /* index of each run's first sample */
    size_t runs;
} progress_log;

static int64_t progress_sample(progress_log *p, PGconn *pg, const char *service, bool *finished)
{
    int64_t v = copied_so_far(pg, service, finished);
    ck_assert_msg(p->n < PROGRESS_MAX, "too many progress samples");
    p->v[p->n++] = v;
    return v;
}

/* Whether the samples show a copy that moves on and never back: each never below the one before, each run (from the
 * sample before its first on) higher at least once, and the last equal to `total`, the source's documents (a
 * restarted copy that copied anything twice would count past it). On false, msg says what is wrong. */
static bool progress_ok(const progress_log *p, int64_t total, char *msg, size_t msglen)
{
    if (p->n < 2 || p->runs == 0) {
        snprintf(msg, msglen, "%zu samples over %zu runs", p->n, p->runs);
        return false;
    }
    for (size_t i = 1; i < p->n; i++) {
        if (p->v[i] < p->v[i - 1]) {
            snprintf(msg, msglen, "progress went back from %lld to %lld (sample %zu of %zu)", (long long)p->v[i - 1],
                     (long long)p->v[i], i, p->n);
            return false;
        }
    }
    for (size_t k = 0; k < p->runs; k++) {
        size_t from = p->run_start[k] > 0 ? p->run_start[k] - 1 : 0;
        size_t to = k + 1 < p->runs ? p->run_start[k + 1] : p->n;
        bool rose = false;
        for (size_t i = from + 1; i < to && !rose; i++)
            rose = p->v[i] > p->v[i - 1];
        if (!rose) {
            snprintf(msg, msglen, "run %zu of %zu made no progress (samples %zu..%zu stay at %lld)", k + 1, p->runs,
                     from, to - 1, (long long)p->v[from]);
            return false;
        }
    }
    if (p->v[p->n - 1] != total) {
        snprintf(msg, msglen, "the copy ended at %lld documents, the source holds %lld", (long long)p->v[p->n - 1],
                 (long long)total);
        return false;
    }
    return true;
}

/* Changes documents that already exist while the copy runs: the smallest _ids (copied first) and ObjectId _ids
 * (the largest type, copied last), with $set, $inc, replacements and deletes. */
typedef struct {
    denv *e;
    uint64_t changed;
    bool ok;
    char err[700];
} changer;

static void *change_existing_main(void *arg)
{
    changer *ch = arg;
    mongoc_client_t *c = mongoc_client_new(ch->e->uri);
    ch->ok = true;
    for (int slot = 0; slot < 4 && ch->ok; slot++) {
        char db[64], coll[16];
        snprintf(db, sizeof db, "%s%d", ch->e->prefix, slot % 2);
        snprintf(coll, sizeof coll, "c%d", slot);
        mongoc_collection_t *col = mongoc_client_get_collection(c, db, coll);
        bson_oid_t zero;
        bson_oid_init_from_string(&zero, "000000000000000000000000");
        bson_t *filters[2] = {bson_new(), BCON_NEW("_id", "{", "$gt", BCON_OID(&zero), "}")};
        for (int f = 0; f < 2 && ch->ok; f++) {
            bson_t *opts = BCON_NEW("limit", BCON_INT64(1500), "sort", "{", "_id", BCON_INT32(1), "}");
            mongoc_cursor_t *cur = mongoc_collection_find_with_opts(col, filters[f], opts, NULL);
            bson_value_t ids[1500];
            int n = 0;
            const bson_t *doc;
            bson_iter_t it;
            while (n < 1500 && mongoc_cursor_next(cur, &doc))
                if (bson_iter_init_find(&it, doc, "_id"))
                    bson_value_copy(bson_iter_value(&it), &ids[n++]);
            mongoc_cursor_destroy(cur);
            bson_destroy(opts);
            for (int i = 0; i < n && ch->ok; i++) {
                bson_t sel = BSON_INITIALIZER;
                bson_append_value(&sel, "_id", 3, &ids[i]);
                bson_error_t err;
                bool ok;
                bson_t *u = NULL;
                switch (i % 4) {
                case 0:
                    u = BCON_NEW("$set", "{", "touched", BCON_INT32(i), "w.nested", BCON_UTF8("x"), "}");
                    ok = mongoc_collection_update_one(col, &sel, u, NULL, NULL, &err);
                    break;
                case 1:
                    u = BCON_NEW("$inc", "{", "w_count", BCON_INT32(1), "}");
                    ok = mongoc_collection_update_one(col, &sel, u, NULL, NULL, &err);
                    break;
                case 2:
                    u = BCON_NEW("replaced", BCON_BOOL(true), "i", BCON_INT32(i));
                    ok = mongoc_collection_replace_one(col, &sel, u, NULL, NULL, &err);
                    break;
                default:
                    ok = mongoc_collection_delete_one(col, &sel, NULL, NULL, &err);
                    break;
                }
                if (u)
                    bson_destroy(u);
                bson_destroy(&sel);
                bson_value_destroy(&ids[i]);
                if (!ok) {
                    snprintf(ch->err, sizeof ch->err, "%s.%s: %s", db, coll, err.message);
                    ch->ok = false;
                } else {
                    ch->changed++;
                }
            }
        }
        bson_destroy(filters[0]);
        bson_destroy(filters[1]);
        mongoc_collection_destroy(col);
    }
    mongoc_client_destroy(c);
    return NULL;
}

/* A service without a checkpoint copies 1 000 000 existing documents while writers keep changing them and adding
 * more, then tails: the result equals the source. */
START_TEST(test_import_with_writer)
{
    denv e;
    denv_start(&e, "imp", NULL, "[copy]\nworkers = 3\n");
    long docs = denv_scaled(1000000);
    fill(&e, 11, (uint64_t)docs);
    denv_daemon_start(&e);
    /* The writers must overlap the copy, or this test proves nothing about it: they start once the copy has
     * committed its first documents and has not recorded its end (an event, whatever the machine's speed). */
    PGconn *pg = pg_connect();
    bool finished = false;
    double until = denv_now() + 120;
    int64_t copied;
    while ((copied = copied_so_far(pg, e.service, &finished)) <= 0 && !finished) {
        ck_assert_msg(denv_now() < until, "the copy committed nothing within 120 s");
        ck_assert_msg(!proc_wait(&e.daemon, 0.0), "the daemon exited with %d", proc_exit_code(&e.daemon));
        usleep(5 * 1000);
    }
    PQfinish(pg);
    ck_assert_msg(!finished, "the copy of %ld documents ended before the writers could start", docs);
    workload_thread w = {
        .e = &e, .seed = 12, .ops = (uint64_t)denv_scaled(50000), .no_ddl = true, .first_id = 10000000};
    changer ch = {.e = &e};
    pthread_t th, th2;
    ck_assert_int_eq(pthread_create(&th, NULL, workload_main, &w), 0);
    ck_assert_int_eq(pthread_create(&th2, NULL, change_existing_main, &ch), 0);
    pthread_join(th, NULL);
    pthread_join(th2, NULL);
    ck_assert_msg(w.ok, "writer: %s", w.err);
    ck_assert_msg(ch.ok, "changer: %s", ch.err);
    ck_assert_uint_gt(ch.changed, 4000);
    ck_assert_msg(denv_wait_caught_up(&e, 300), "the daemon did not finish the copy and catch up");
    ck_assert_msg(denv_file_contains(e.log, "initial copy complete"), "no copy was logged");
    /* Tailing replays the writers' inserts over rows the copy wrote: from memory, without a rewind. */
    ck_assert_msg(denv_file_contains(e.log, "the oplog's end after the copy"), "no keep point after the copy");
    ck_assert_msg(!denv_file_contains(e.log, "going back to the last commit"), "a rewind after the copy");
    /* ... and the copy's end is recorded, after its start, for a restart during the catch-up */
    char sql[300];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM oplog2pg.copy_state WHERE service = '%s' AND finished_at IS NOT NULL AND "
             "(end_sec, end_inc) > (start_sec, start_inc)",
             e.service);
    ck_assert_int_eq(denv_pg_int(sql), 1);
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* kill -9 three times during the copy: each restart continues the copy, and the result equals the source. The
 * committed progress (oplog2pg.copy_progress) is sampled every 10 ms from the first start to the copy's end: it
 * never goes back (a restart that started over would show a drop), every run moves it on, and it ends at the
 * source's count (a restart that copied documents again would count past it). */
START_TEST(test_import_kill9_resumes)
{
    denv e;
    denv_start(&e, "impkill", NULL, "[copy]\nworkers = 2\nbatch_docs = 1000\n");
    int64_t total = (int64_t)fill(&e, 21, 200000);
    PGconn *pg = pg_connect();
    static progress_log p;
    memset(&p, 0, sizeof p);
    denv_daemon_start(&e);
    p.run_start[p.runs++] = p.n;
    int64_t left = -1;
    bool finished = false;
    for (int kill = 0; kill < 3; kill++) {
        /* Sample until this run has committed 5000 documents more than the last one left. */
        double until = denv_now() + 120;
        while (progress_sample(&p, pg, e.service, &finished) <= left + 5000) {
            ck_assert_msg(!finished, "the copy finished before kill %d", kill + 1);
            ck_assert_msg(denv_now() < until, "the copy made no progress in 120 s");
            ck_assert_msg(!proc_wait(&e.daemon, 0.0), "the daemon exited with %d", proc_exit_code(&e.daemon));
            usleep(10 * 1000);
        }
        proc_signal(&e.daemon, SIGKILL);
        ck_assert(proc_wait(&e.daemon, 10));
        wait_sessions_gone(pg, NULL, 0); /* the killed run's batches in flight are committed or gone by now */
        left = progress_sample(&p, pg, e.service, &finished);
        ck_assert_msg(!finished, "the copy finished before kill %d", kill + 1);
        denv_daemon_start(&e);
        p.run_start[p.runs++] = p.n;
    }
    /* The last run: sample until the copy records its end. */
    double until = denv_now() + 300;
    for (progress_sample(&p, pg, e.service, &finished); !finished; progress_sample(&p, pg, e.service, &finished)) {
        ck_assert_msg(denv_now() < until, "the daemon did not finish the copy within 300 s of the last kill");
        ck_assert_msg(!proc_wait(&e.daemon, 0.0), "the daemon exited with %d", proc_exit_code(&e.daemon));
        usleep(10 * 1000);
    }
    PQfinish(pg);
    char why[256];
    ck_assert_msg(progress_ok(&p, total, why, sizeof why), "copy progress: %s", why);
    ck_assert_msg(denv_wait_caught_up(&e, 300), "the daemon did not catch up after the copy");
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* The oplog loses the copy's start while the copy runs: the daemon stops with exit code 7 and says why. */
START_TEST(test_import_window_lost)
{
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim's mongosimTruncateOplog");
    denv e;
    denv_start(&e, "impwin", NULL, "[copy]\nworkers = 1\nbatch_docs = 500\n");
    fill(&e, 31, 100000);
    denv_daemon_start(&e);
    PGconn *pg = pg_connect();
    double until = denv_now() + 60;
    while (copied_so_far(pg, e.service, NULL) <= 0) {
        ck_assert_msg(denv_now() < until, "the copy did not start within 60 s");
        usleep(10 * 1000);
    }
    PQfinish(pg);
    /* One more write, then drop everything older than it: the copy's start is gone. */
    mongoc_client_t *c = mongoc_client_new(e.uri);
    mongoc_collection_t *coll = mongoc_client_get_collection(c, "rep_seed", "late");
    bson_t *doc = BCON_NEW("late", BCON_BOOL(true));
    ck_assert(mongoc_collection_insert_one(coll, doc, NULL, NULL, NULL));
    bson_destroy(doc);
    uint64_t ts = denv_newest_ts(e.uri);
    bson_t *cmd =
        BCON_NEW("mongosimTruncateOplog", BCON_INT32(1), "before", BCON_TIMESTAMP((uint32_t)(ts >> 32), (uint32_t)ts));
    bson_error_t err;
    ck_assert_msg(mongoc_client_command_simple(c, "admin", cmd, NULL, NULL, &err), "%s", err.message);
    bson_destroy(cmd);
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(c);
    ck_assert_msg(proc_wait(&e.daemon, 60), "the daemon did not stop");
    ck_assert_int_eq(proc_exit_code(&e.daemon), 7);
    /* the oplog's words, or a change stream's (OPLOG2PG_TEST_SOURCE=change_stream) */
    ck_assert_msg(denv_file_contains(e.log, "the oplog no longer holds the copy's start") ||
                      denv_file_contains(e.log, "no longer holds the change stream's history from the copy's start"),
                  "the message is missing");
    e.daemon.pid = 0;
    denv_stop(&e);
}
END_TEST

/* --import-only copies and exits; status shows the finished copy; --reimport restores a damaged table; a --tail-from
 * position the oplog no longer holds is refused with exit code 4, and one that is not a position with 2.
 * (--skip-import and --tail-from starting without a copy: test_lossless.c.) */
START_TEST(test_import_flags_and_status)
{
    denv e;
    denv_start(&e, "flags", NULL, NULL);
    fill(&e, 41, 5000);
    char out[300];
    snprintf(out, sizeof out, "%s/cmd.out", e.dir);
    const char *import_only[] = {"-c", e.ini, "run", "--import-only", NULL};
    ck_assert_int_eq(denv_run_command(&e, import_only, out), 0);
    ck_assert_uint_gt(denv_checkpoint_ts(e.service), 0);
    denv_expect_match(&e);

    const char *status[] = {"-c", e.ini, "status", NULL};
    ck_assert_int_eq(denv_run_command(&e, status, out), 0);
    ck_assert_msg(denv_file_contains(out, "initial copy:  finished"), "status does not show the finished copy");
    ck_assert_msg(denv_file_contains(out, "not running"), "status does not say the daemon is stopped");
    const char *status_json[] = {"-c", e.ini, "status", "--json", NULL};
    ck_assert_int_eq(denv_run_command(&e, status_json, out), 0);
    ck_assert_msg(denv_file_contains(out, "\"copy\": {\"finished\": true"), "status --json lacks the copy");

    /* Damage the copy, then --reimport (with --import-only, to stop after it). */
    PGconn *pg = PQconnectdb(denv_pg_conninfo());
    char sql[256];
    snprintf(sql, sizeof sql, "DELETE FROM %s0.c0 WHERE ctid IN (SELECT ctid FROM %s0.c0 LIMIT 10)", e.prefix,
             e.prefix);
    PGresult *r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s", PQerrorMessage(pg));
    PQclear(r);
    PQfinish(pg);
    const char *reimport[] = {"-c", e.ini, "run", "--reimport", "--import-only", NULL};
    ck_assert_int_eq(denv_run_command(&e, reimport, out), 0);
    denv_expect_match(&e);

    /* A position older than the oplog's oldest entry is refused with exit code 4. */
    const char *tail_old[] = {"-c", e.ini, "run", "--tail-from", "1:1", NULL};
    ck_assert_int_eq(denv_run_command(&e, tail_old, out), 4);
    ck_assert(denv_file_contains(out, "is no longer in the oplog") ||
              denv_file_contains(out, "is no longer in the server's change stream history"));
    const char *bad_ts[] = {"-c", e.ini, "run", "--tail-from", "yesterday", NULL};
    ck_assert_int_eq(denv_run_command(&e, bad_ts, out), 2);
    denv_stop(&e);
}
END_TEST

/* Many collections in one backlog: the first inserts of 3 000 collections (each creating its collection), replayed
 * from a dump with the timer and the row bound out of the way, so that only batch_tables can end a group. In one
 * transaction the new tables, their indexes and TOAST tables would need some 15 000 locks, more than the test
 * cluster's lock table holds (max_locks_per_transaction 64 x its 82 process slots): PostgreSQL answers "out of shared
 * memory". ini_tables is the test's batch_tables line. Every table must hold its document and be in the catalog;
 * the replay's output is left in out. */
static void many_collections(denv *e, const char *name, const char *ini_tables, char *out)
{
    enum { COLLS = 3000 };
    char ini[128];
    /* no commit by time or row count: only batch_tables (and the end of the dump) ends a group */
    snprintf(ini, sizeof ini, "flush_interval = 1h\nbatch_rows = 10000000\n%s\n", ini_tables);
    denv_start(e, name, NULL, ini);
    mongoc_client_t *c = mongoc_client_new(e->uri);
    char db[64];
    snprintf(db, sizeof db, "%s0", e->prefix);
    for (int i = 0; i < COLLS; i++) {
        char coll[32];
        snprintf(coll, sizeof coll, "t%d", i);
        bson_t *cmd = BCON_NEW("insert", BCON_UTF8(coll), "documents", "[", "{", "_id", BCON_INT32(i), "n",
                               BCON_INT32(i), "}", "]");
        bson_error_t err;
        bool ok = mongoc_client_command_simple(c, db, cmd, NULL, NULL, &err);
        bson_destroy(cmd);
        ck_assert_msg(ok, "insert into %s.%s: %s", db, coll, err.message);
    }
    mongoc_client_destroy(c);
    ck_assert_int_eq(replay_dump(e, out), 0);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM oplog2pg.tables WHERE service = '%s'", e->service);
    ck_assert_int_eq(denv_pg_int(sql), COLLS);
    denv_expect_match(e);
    ck_assert_uint_eq(denv_checkpoint_ts(e->service), denv_newest_ts(e->uri));
}

/* batch_tables = auto (the default) sizes groups from the lock table PostgreSQL reports, and they never fill it. */
START_TEST(test_many_collections)
{
    denv e;
    char out[300];
    many_collections(&e, "many", "", out);
    ck_assert_msg(denv_file_contains(out, "(batch_tables = auto: a fifth of PostgreSQL's lock table"),
                  "the replay did not say how many tables its groups take");
    ck_assert_msg(denv_file_contains(out, "a flush group committed on reaching") &&
                      denv_file_contains(out, "raising max_locks_per_transaction in PostgreSQL raises the bound"),
                  "the replay did not say its groups were cut at the bound");
    ck_assert_msg(!denv_file_contains(out, "shared memory"), "PostgreSQL ran out of lock table on the way");
    denv_stop(&e);
}
END_TEST

/* A bound far above what the lock table holds: the first group fails with "out of shared memory" (53200), a passing
 * fault. Retried as it was, it would fail for ever; the daemon halves the groups until they fit, and the replay ends
 * with everything applied. */
START_TEST(test_lock_table_full_halves_groups)
{
    denv e;
    char out[300];
    many_collections(&e, "lockfull", "batch_tables = 1000000", out);
    ck_assert_msg(denv_file_contains(out, "out of shared memory"), "the lock table never filled: nothing was tested");
    ck_assert_msg(denv_file_contains(out, "groups now commit at"), "the daemon did not make its groups smaller");
    ck_assert_msg(denv_file_contains(out, "tables (the bound set after PostgreSQL ran out of shared memory)"),
                  "the groups cut at the smaller bound were not reported");
    denv_stop(&e);
}
END_TEST

Suite *replication_suite(void); /* called by the generated runner list */

Suite *replication_suite(void)
{
    Suite *s = suite_create("replication");
    TCase *tc = tcase_create("end_to_end");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, test_workload_v2);
    tcase_add_test(tc, test_workload_v1);
    tcase_add_test(tc, test_crash_restart);
    tcase_add_test(tc, test_postgres_reconnect);
    tcase_add_test(tc, test_replay_dump);
    tcase_add_test(tc, test_let_go_then_rewind);
    tcase_add_test(tc, test_plain_inserts_meet_existing);
    tcase_add_test(tc, test_catchup_interval_never_holds_back);
    tcase_add_test(tc, test_check_config_and_reload);
    suite_add_tcase(s, tc);
    TCase *many = tcase_create("many"); /* CK_RUN_CASE=many runs it alone */
    tcase_set_timeout(many, 600);
    tcase_add_test(many, test_many_collections);
    tcase_add_test(many, test_lock_table_full_halves_groups);
    suite_add_tcase(s, many);
    TCase *imp = tcase_create("import");
    tcase_set_timeout(imp, 900);
    tcase_add_test(imp, test_import_with_writer);
    tcase_add_test(imp, test_import_kill9_resumes);
    tcase_add_test(imp, test_import_window_lost);
    tcase_add_test(imp, test_import_flags_and_status);
    suite_add_tcase(s, imp);
    return s;
}

/*
 * test_stream_daemon.c — the whole daemon (`oplog2pg run`) reading a change stream ([mongodb] source =
 * change_stream) from mongosim, each case ending with PostgreSQL compared with the source (tests/lib/compare.h
 * through denv_expect_match):
 *   - kill -9 ten times at random moments while a mixed workload (inserts, updates, replacements, deletes, DDL) and
 *     driver transactions are written, with change_stream_updates = raw and = description: every write of the
 *     transaction writer increments a counter with $inc (a replacement carries it on), so a transaction applied in
 *     part, or an update lost or applied out of order, leaves another value;
 *   - a stream idle while another database (left on the server by the filter's $match) rolls the capped oplog past
 *     its last event keeps its position (the post-batch resume tokens committed while idle) and resumes after a
 *     restart, for a service that applied events and for one that never saw any; a stream stopped for longer than
 *     the window exits 4 naming --reimport and commits nothing;
 *   - `status` and `check` of a running change-stream service (the source, the token's clusterTime), the initial
 *     copy of existing documents, --skip-import and --tail-from;
 *   - a namespace filter changed between runs so that the committed token's event is filtered out: the server
 *     refuses to resume (280), the daemon logs its restart at the token's clusterTime and ends exact;
 *   - events over 16 MB (an insert and a replacement of a document near 16 MB) replicated exactly; a 20 MB update
 *     event (a 15 MB post-image beside a 5 MB updateDescription) cut by $changeStreamSplitLargeEvent and joined;
 *     with the split stage refused (mongosim --refuse-stage, as servers before 6.0.9 and 7.0 answer) an event over 16
 * MB + 16 KB stops the daemon (exit 5) naming the position and the stage, and nothing after it is committed.
 *
 * mongosim only (its capped oplog and test options): against a real replica set every case skips. Waits are on
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
#include "../lib/workload.h"

Suite *stream_daemon_suite(void);

#define NEED_SIM()                                                                                                     \
    do {                                                                                                               \
        if (!denv_using_sim())                                                                                         \
            SKIP_TEST("needs mongosim (its capped oplog and test commands)");                                          \
    } while (0)

#define INI_RAW         "\n[mongodb]\nsource = change_stream\nchange_stream_updates = raw\n"
#define INI_DESCRIPTION "\n[mongodb]\nsource = change_stream\nchange_stream_updates = description\n"

/* ---- small helpers ---- */

static mongoc_client_t *client(const denv *e)
{
    mongoc_client_t *c = mongoc_client_new(e->uri);
    ck_assert_ptr_nonnull(c);
    return c;
}

/* Waits until the checkpoint of a daemon that sees no event is at the newest entry, as a quiet change stream puts
 * it: one tick before (the post-batch resume token at the newest entry T is a high-water mark, which resumes at the
 * events of T, so the position committed for it is T's predecessor). */
static bool quiet_caught_up(denv *e, double timeout_s)
{
    double until = denv_now() + timeout_s;
    while (denv_now() < until) {
        uint64_t want = denv_newest_ts(e->uri), have = denv_checkpoint_ts(e->service);
        if (have + 1 == want || have == want)
            return true;
        ck_assert_msg(!proc_wait(&e->daemon, 0.0), "the daemon exited with %d", proc_exit_code(&e->daemon));
        usleep(20 * 1000);
    }
    return false;
}

/* n small inserts into db.coll outside the replicated databases, in bulks of 50: they fill and roll the oplog.
 * With a daemon running, each bulk waits until its position has followed (the oplog is capped at 500 entries: a
 * writer faster than the stream's reader would roll it past the reader's cursor, which then loses its history
 * however idle the service is). */
static void fill_elsewhere(denv *e, const char *db, int n)
{
    mongoc_client_t *c = client(e);
    mongoc_collection_t *coll = mongoc_client_get_collection(c, db, "fill");
    for (int k = 0; k < n; k += 50) {
        mongoc_bulk_operation_t *b = mongoc_collection_create_bulk_operation_with_opts(coll, NULL);
        for (int i = k; i < n && i < k + 50; i++) {
            bson_t *d = BCON_NEW("k", BCON_INT32(i));
            mongoc_bulk_operation_insert(b, d);
            bson_destroy(d);
        }
        bson_error_t err;
        ck_assert_msg(mongoc_bulk_operation_execute(b, NULL, &err), "fill: %s", err.message);
        mongoc_bulk_operation_destroy(b);
        if (e->daemon.pid != 0 && !quiet_caught_up(e, 60)) {
            denv_show_log(e);
            uint64_t have = denv_checkpoint_ts(e->service), want = denv_newest_ts(e->uri);
            ck_abort_msg("the idle daemon's position did not follow the oplog: %u:%u, the newest entry %u:%u",
                         (unsigned)(have >> 32), (unsigned)have, (unsigned)(want >> 32), (unsigned)want);
        }
    }
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(c);
}

/* The oldest entry mongosim's oplog still holds (secs << 32 | inc). */
static uint64_t oldest_ts(const denv *e)
{
    mongoc_client_t *c = client(e);
    bson_t *cmd = BCON_NEW("mongosimStatus", BCON_INT32(1));
    bson_t reply;
    bson_error_t err;
    ck_assert_msg(mongoc_client_command_simple(c, "admin", cmd, NULL, &reply, &err), "%s", err.message);
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, &reply, "firstTs") && BSON_ITER_HOLDS_TIMESTAMP(&it));
    uint32_t t, i;
    bson_iter_timestamp(&it, &t, &i);
    bson_destroy(&reply);
    bson_destroy(cmd);
    mongoc_client_destroy(c);
    return (uint64_t)t << 32 | i;
}

static void fmt_ts(uint64_t ts, char *buf, size_t len)
{
    snprintf(buf, len, "%u:%u", (unsigned)(ts >> 32), (unsigned)(ts & 0xffffffffu));
}

/* Waits for the daemon to exit by itself; returns its exit code. */
static int wait_exit(denv *e, double timeout_s)
{
    if (!proc_wait(&e->daemon, timeout_s)) {
        denv_show_log(e);
        ck_abort_msg("the daemon did not exit within %.0f s", timeout_s);
    }
    int code = proc_exit_code(&e->daemon);
    e->daemon.pid = 0;
    return code;
}

/* SIGTERM and a clean exit, leaving the environment for the next start. */
static void stop_daemon(denv *e)
{
    ck_assert(proc_signal(&e->daemon, SIGTERM));
    int code = wait_exit(e, 60);
    if (code != 0)
        denv_show_log(e);
    ck_assert_int_eq(code, 0);
}

/* Waits for a line of the daemon's log holding needle; shows the log's end when none comes. */
static bool log_has(denv *e, const char *needle, double timeout_s)
{
    if (denv_wait_log(e, needle, timeout_s))
        return true;
    denv_show_log(e);
    return false;
}

/* denv_wait_caught_up, showing the log's end when it times out. */
static bool caught_up(denv *e, double timeout_s)
{
    if (denv_wait_caught_up(e, timeout_s))
        return true;
    denv_show_log(e);
    return false;
}

/* Waits until PostgreSQL lists no session of a daemon (application_name oplog2pg): a killed daemon's backend can
 * still commit what it had sent until it has gone. */
/* ---- 1. kill -9 during a mixed workload with transactions ---- */

typedef struct {
    denv *e;
    uint64_t seed, ops;
    atomic_bool done;
    bool ok;
    char err[512];
} mixed_thread;

static void *mixed_main(void *arg)
{
    mixed_thread *w = arg;
    workload_config wc;
    workload_config_init(&wc);
    wc.seed = w->seed;
    wc.ops = w->ops;
    wc.db_prefix = w->e->prefix;
    wc.n_databases = 2;
    wc.n_namespaces = 6;
    wc.w_ddl = 2;
    wc.batch_size = 50; /* many small bulks: the stream moves steadily while the daemon is being killed */
    workload_stats st;
    w->ok = workload_run(w->e->uri, &wc, &st, w->err, sizeof w->err);
    atomic_store(&w->done, true);
    return NULL;
}

/* Driver transactions and single writes on documents {_id, n, ...} of <prefix>tx.a and .b: every write increments n
 * with $inc (a replacement writes n + 1 from the value read), so the final counters are the number of writes each
 * document took since its last delete; an update lost or applied twice out of order leaves another value. */
typedef struct {
    denv *e;
    unsigned seed;
    int rounds;
    atomic_bool done;
    bool ok;
    char err[512];
    int txns; /* transactions committed */
} txn_thread;

static bool inc_one(mongoc_collection_t *coll, int id, int round, mongoc_client_session_t *cs, bson_error_t *err)
{
    bson_t *q = BCON_NEW("_id", BCON_INT32(id));
    bson_t *u = BCON_NEW("$inc", "{", "n", BCON_INT32(1), "}", "$set", "{", "last", BCON_INT32(round), "}", "$push",
                         "{", "hist", BCON_INT32(round), "}");
    bson_t opts = BSON_INITIALIZER;
    BSON_APPEND_BOOL(&opts, "upsert", true);
    bool ok = (cs == NULL || mongoc_client_session_append(cs, &opts, err)) &&
              mongoc_collection_update_one(coll, q, u, &opts, NULL, err);
    bson_destroy(&opts);
    bson_destroy(q);
    bson_destroy(u);
    return ok;
}

static void *txn_main(void *arg)
{
    txn_thread *w = arg;
    mongoc_client_t *c = mongoc_client_new(w->e->uri);
    char db[64];
    snprintf(db, sizeof db, "%stx", w->e->prefix);
    mongoc_collection_t *colls[2] = {mongoc_client_get_collection(c, db, "a"),
                                     mongoc_client_get_collection(c, db, "b")};
    bson_error_t err;
    w->ok = true;
    for (int round = 0; round < w->rounds && w->ok; round++) {
        unsigned r = (unsigned)rand_r(&w->seed) % 100;
        mongoc_collection_t *coll = colls[rand_r(&w->seed) % 2];
        int id = 1 + rand_r(&w->seed) % 40;
        if (r < 45) {
            /* a transaction of 2..5 writes over both collections */
            mongoc_client_session_t *cs = mongoc_client_start_session(c, NULL, &err);
            if (cs == NULL || !mongoc_client_session_start_transaction(cs, NULL, &err)) {
                w->ok = false;
                break;
            }
            int n = 2 + rand_r(&w->seed) % 4;
            bool ok = true;
            for (int k = 0; k < n && ok; k++)
                ok = inc_one(colls[rand_r(&w->seed) % 2], 1 + rand_r(&w->seed) % 40, round, cs, &err);
            bson_t reply;
            ok = ok && mongoc_client_session_commit_transaction(cs, &reply, &err);
            if (ok)
                bson_destroy(&reply), w->txns++;
            else
                w->ok = false;
            mongoc_client_session_destroy(cs);
        } else if (r < 80) {
            w->ok = inc_one(coll, id, round, NULL, &err);
        } else if (r < 90) {
            /* a replacement carrying the counter on */
            bson_t *q = BCON_NEW("_id", BCON_INT32(id));
            mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, q, NULL, NULL);
            const bson_t *doc;
            int32_t n = -1;
            bson_iter_t it;
            if (mongoc_cursor_next(cur, &doc) && bson_iter_init_find(&it, doc, "n"))
                n = bson_iter_as_int64(&it) > INT32_MAX ? INT32_MAX : (int32_t)bson_iter_as_int64(&it);
            if (mongoc_cursor_error(cur, &err))
                w->ok = false;
            mongoc_cursor_destroy(cur);
            if (w->ok && n >= 0) {
                bson_t *rep = BCON_NEW("n", BCON_INT32(n + 1), "replaced", BCON_INT32(round));
                w->ok = mongoc_collection_replace_one(coll, q, rep, NULL, NULL, &err);
                bson_destroy(rep);
            }
            bson_destroy(q);
        } else {
            bson_t *q = BCON_NEW("_id", BCON_INT32(id));
            w->ok = mongoc_collection_delete_one(coll, q, NULL, NULL, &err);
            bson_destroy(q);
        }
    }
    if (!w->ok)
        snprintf(w->err, sizeof w->err, "%s", err.message);
    mongoc_collection_destroy(colls[0]);
    mongoc_collection_destroy(colls[1]);
    mongoc_client_destroy(c);
    atomic_store(&w->done, true);
    return NULL;
}

static void crash_run(const char *name, const char *ini, unsigned seed)
{
    denv e;
    denv_start(&e, name, NULL, ini);
    denv_daemon_start(&e);
    ck_assert_msg(caught_up(&e, 60), "the daemon did not commit its starting point");
    ck_assert_msg(denv_file_contains(e.log, "change stream"), "the daemon does not say it reads a change stream");
    uint64_t ckpt = denv_checkpoint_ts(e.service);

    mixed_thread mw = {.e = &e, .seed = seed, .ops = 20000};
    txn_thread tw = {.e = &e, .seed = seed, .rounds = 3000};
    pthread_t mth, tth;
    ck_assert_int_eq(pthread_create(&mth, NULL, mixed_main, &mw), 0);
    ck_assert_int_eq(pthread_create(&tth, NULL, txn_main, &tw), 0);

    int kills = 0, resumed = 0;
    while (kills < 10) {
        /* Every other run is killed at a random instant from its start (in its probe, its first batch, anywhere);
         * the others once they have committed something, then at a random instant, so that kills land in the middle
         * of applying however slowly this machine (or a sanitizer build) starts the daemon. These sleeps only pace
         * the kills; no check below depends on where they land. */
        if (kills % 2 == 1) {
            double until = denv_now() + 60;
            /* (once the writers are done and all of it is applied, there is nothing more to commit) */
            while (denv_checkpoint_ts(e.service) <= ckpt &&
                   !(atomic_load(&mw.done) && atomic_load(&tw.done) && ckpt >= denv_newest_ts(e.uri))) {
                ck_assert_msg(denv_now() < until, "run %d committed nothing within 60 s", kills + 1);
                ck_assert_msg(!proc_wait(&e.daemon, 0.0), "the daemon exited by itself with %d",
                              proc_exit_code(&e.daemon));
                usleep(20 * 1000);
            }
        }
        usleep((useconds_t)(100000 + rand_r(&seed) % 700000));
        ck_assert_msg(e.daemon.pid != 0 && !proc_wait(&e.daemon, 0.0), "the daemon exited by itself with %d",
                      proc_exit_code(&e.daemon));
        proc_signal(&e.daemon, SIGKILL);
        ck_assert(proc_wait(&e.daemon, 10));
        kills++;
        denv_wait_sessions_gone(); /* what the killed run committed is now all there is of it */
        uint64_t now = denv_checkpoint_ts(e.service);
        ck_assert_msg(now >= ckpt, "the checkpoint went back across a restart: %llx after %llx",
                      (unsigned long long)now, (unsigned long long)ckpt);
        resumed += now > ckpt;
        ckpt = now;
        denv_daemon_start(&e);
    }
    pthread_join(mth, NULL);
    pthread_join(tth, NULL);
    ck_assert_msg(mw.ok, "workload: %s", mw.err);
    ck_assert_msg(tw.ok, "transactions: %s", tw.err);
    ck_assert_int_gt(tw.txns, 100);
    ck_assert_msg(resumed >= 3, "only %d of %d runs committed anything before their kill", resumed, kills);

    ck_assert_msg(caught_up(&e, 300), "the daemon did not catch up after %d kills", kills);
    denv_expect_match(&e);
    /* the counters are there and moved (a comparison of empty tables would prove nothing) */
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%stx\".\"a\" WHERE (doc->>'n')::int > 1", e.prefix);
    ck_assert_int_gt(denv_pg_int(sql), 0);
    denv_stop(&e);
}

START_TEST(test_kill9_raw)
{
    NEED_SIM();
    crash_run("skill_raw", INI_RAW, 71);
}
END_TEST

START_TEST(test_kill9_description)
{
    NEED_SIM();
    crash_run("skill_desc", INI_DESCRIPTION, 72);
}
END_TEST

/* ---- 2. idle streams and the oplog window ---- */

static const char *capped[] = {"--max-oplog-entries", "500", NULL};

/* The daemon applied events, then stays idle while another database rolls the capped oplog several times past its
 * last event: its committed position follows (post-batch resume tokens), and a restart resumes, then applies what
 * comes next. */
START_TEST(test_idle_keeps_position)
{
    NEED_SIM();
    denv e;
    denv_start(&e, "sidle", capped, INI_RAW);
    /* One database named exactly: the stream's $match leaves the other database's writes on the server, so only the
     * post-batch resume tokens tell the daemon that time passes. */
    denv_set_include(&e, "rep_sidle_a.*");
    denv_daemon_start(&e);
    ck_assert(caught_up(&e, 60));
    char db[64];
    snprintf(db, sizeof db, "%sa", e.prefix);
    denv_insert_range(&e, db, "c", 1, 50);
    ck_assert(caught_up(&e, 60));
    uint64_t last_event = denv_checkpoint_ts(e.service);
    fill_elsewhere(&e, "sidle_other", 2000);
    ck_assert_msg(oldest_ts(&e) > last_event, "the oplog did not roll past the last event");
    ck_assert_msg(denv_checkpoint_ts(e.service) >= oldest_ts(&e), "the committed position is out of the window");
    stop_daemon(&e);
    fill_elsewhere(&e, "sidle_other", 100); /* within the window: the committed position is still held */
    denv_daemon_start(&e);
    denv_insert_range(&e, db, "c", 51, 60);
    ck_assert_msg(caught_up(&e, 60), "the restarted daemon did not resume");
    denv_expect_match(&e);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM \"rep_sidle_a\".\"c\""), 60);
    denv_stop(&e);
}
END_TEST

/* The same for a service whose filter excludes everything written since its start. */
START_TEST(test_idle_filter_excludes_all)
{
    NEED_SIM();
    denv e;
    denv_start(&e, "sidle0", capped, INI_DESCRIPTION);
    denv_set_include(&e, "rep_sidle0_a.*");
    denv_daemon_start(&e);
    ck_assert(caught_up(&e, 60));
    uint64_t start = denv_checkpoint_ts(e.service);
    fill_elsewhere(&e, "sidle0_other", 2000);
    ck_assert_msg(oldest_ts(&e) > start, "the oplog did not roll past the start");
    ck_assert_msg(denv_checkpoint_ts(e.service) >= oldest_ts(&e), "the committed position is out of the window");
    stop_daemon(&e);
    denv_daemon_start(&e);
    char db[64];
    snprintf(db, sizeof db, "%sa", e.prefix);
    denv_insert_range(&e, db, "c", 1, 10);
    ck_assert_msg(caught_up(&e, 60), "the restarted daemon did not resume");
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* Stopped while the oplog rolls past its position: the next start exits 4, naming --reimport, and commits nothing. */
START_TEST(test_stopped_past_window_exits_4)
{
    NEED_SIM();
    denv e;
    denv_start(&e, "slost", capped, INI_RAW);
    denv_daemon_start(&e);
    char db[64];
    snprintf(db, sizeof db, "%sa", e.prefix);
    denv_insert_range(&e, db, "c", 1, 20);
    ck_assert(caught_up(&e, 60));
    stop_daemon(&e);
    uint64_t ckpt = denv_checkpoint_ts(e.service);
    fill_elsewhere(&e, "slost_other", 1000);
    ck_assert(oldest_ts(&e) > ckpt);
    denv_daemon_start(&e);
    int code = wait_exit(&e, 60);
    if (code != 4)
        denv_show_log(&e);
    ck_assert_int_eq(code, 4);
    ck_assert_msg(denv_file_contains(e.log, "--reimport"), "the exit does not name --reimport");
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), ckpt);
    denv_stop(&e);
}
END_TEST

/* ---- 4. status, check, the initial copy, --skip-import, --tail-from ---- */

START_TEST(test_copy_status_check)
{
    NEED_SIM();
    denv e;
    int port = denv_free_port();
    char ini[256];
    snprintf(ini, sizeof ini, "%s[metrics]\nlisten = 127.0.0.1:%d\noplog_window_interval = 1s\n", INI_RAW, port);
    denv_start(&e, "sstat", NULL, ini);
    char db[64];
    snprintf(db, sizeof db, "%sa", e.prefix);
    denv_insert_range(&e, db, "c", 1, 2000); /* there before the first start: copied */
    denv_daemon_start(&e);
    ck_assert(caught_up(&e, 120));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM \"rep_sstat_a\".\"c\""), 2000);
    denv_insert_range(&e, db, "c", 2001, 2100);
    ck_assert(caught_up(&e, 60));
    denv_expect_match(&e);

    char out[300], at[32];
    snprintf(out, sizeof out, "%s/cmd.out", e.dir);
    fmt_ts(denv_checkpoint_ts(e.service), at, sizeof at);
    char want[128];
    const char *status[] = {"-c", e.ini, "status", NULL};
    ck_assert_int_eq(denv_run_command(&e, status, out), 0);
    snprintf(want, sizeof want, "a change stream (its resume token, ");
    ck_assert_msg(denv_file_contains(out, want), "status does not show the change stream");
    snprintf(want, sizeof want, "at clusterTime %s, is committed", at);
    ck_assert_msg(denv_file_contains(out, want), "status does not show the token's clusterTime %s", at);
    ck_assert_msg(denv_file_contains(out, "running"), "status does not see the running daemon");
    const char *status_json[] = {"-c", e.ini, "status", "--json", NULL};
    ck_assert_int_eq(denv_run_command(&e, status_json, out), 0);
    ck_assert_msg(denv_file_contains(out, "\"source\": \"change_stream\""), "status --json lacks the source");
    const char *check[] = {"-c", e.ini, "check", NULL};
    ck_assert_int_eq(denv_run_command(&e, check, out), 0);
    ck_assert_msg(denv_file_contains(out, "reads a change stream"), "check does not name the source");
    snprintf(want, sizeof want, "resumes after a change stream's resume token at clusterTime %s", at);
    ck_assert_msg(denv_file_contains(out, want), "check does not show the token's clusterTime %s", at);

    /* A change stream has no oplog to read: no oplog window or margin in the metrics, however long it runs (here
     * well past the probe's 1 s interval: the status and check above took longer). */
    char url[96], *body = malloc(65536);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", port);
    ck_assert_int_eq(denv_http_get(url, false, body, 65536), 0);
    if (denv_metric(body, "oplog2pg_ready") != 1)
        denv_show_log(&e);
    ck_assert_double_eq(denv_metric(body, "oplog2pg_ready"), 1);
    ck_assert_msg(strstr(body, "oplog2pg_oplog_window_seconds") == NULL, "a change stream shows an oplog window");
    ck_assert_msg(strstr(body, "oplog2pg_oplog_margin_seconds") == NULL, "a change stream shows an oplog margin");
    free(body);
    denv_stop(&e);
}
END_TEST

START_TEST(test_skip_import_and_tail_from)
{
    NEED_SIM();
    denv e;
    denv_start(&e, "sflags", NULL, INI_DESCRIPTION);
    char db[64];
    snprintf(db, sizeof db, "%sa", e.prefix);
    denv_insert_range(&e, db, "old", 1, 100); /* there before: --skip-import leaves it */
    const char *skip[] = {"--skip-import", NULL};
    denv_daemon_start_args(&e, skip, NULL);
    ck_assert(caught_up(&e, 60));
    denv_insert_range(&e, db, "new", 1, 10);
    ck_assert(caught_up(&e, 60));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM \"rep_sflags_a\".\"new\""), 10);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM pg_tables WHERE schemaname = 'rep_sflags_a' "
                                 "AND tablename = 'old'"),
                     0);
    uint64_t mark = denv_checkpoint_ts(e.service);
    denv_insert_range(&e, db, "new", 11, 20);
    ck_assert(caught_up(&e, 60));
    stop_daemon(&e);
    /* --tail-from the position before the second range, with that range lost from PostgreSQL: read again. */
    denv_pg_exec("DELETE FROM \"rep_sflags_a\".\"new\" WHERE (doc->>'v')::int > 100");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM \"rep_sflags_a\".\"new\""), 10);
    char at[32];
    fmt_ts(mark, at, sizeof at);
    const char *tail[] = {"--tail-from", at, NULL};
    denv_daemon_start_args(&e, tail, NULL);
    ck_assert(denv_wait_log(&e, "ready:", 60));
    ck_assert(caught_up(&e, 60));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM \"rep_sflags_a\".\"new\""), 20);
    /* the comparison covers `new` only: `old` was skipped on purpose */
    denv_drop_collection(&e, db, "old");
    ck_assert(caught_up(&e, 60));
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* ---- 5. the filter changed so that the token's event is filtered out (280) ---- */

START_TEST(test_filter_change_280)
{
    NEED_SIM();
    denv e;
    denv_start(&e, "sflt", NULL, INI_RAW);
    denv_daemon_start(&e);
    ck_assert(caught_up(&e, 60));
    denv_insert_range(&e, "rep_sflt_a", "c", 1, 10);
    denv_insert_range(&e, "rep_sflt_b", "c", 1, 10); /* the last event: its token is committed */
    ck_assert(caught_up(&e, 60));
    stop_daemon(&e);
    char at[32];
    fmt_ts(denv_checkpoint_ts(e.service), at, sizeof at);
    /* An include naming one database exactly: the stream's $match now filters out the token's event. */
    denv_set_include(&e, "rep_sflt_a.*");
    denv_daemon_start(&e);
    ck_assert(denv_wait_log(&e, "ready:", 60));
    /* The server finds the token missing at the first event past it. */
    denv_insert_range(&e, "rep_sflt_a", "c", 11, 20);
    denv_insert_range(&e, "rep_sflt_b", "c", 11, 20); /* filtered out now */
    denv_insert_range(&e, "rep_sflt_a", "c", 21, 30);
    ck_assert_msg(log_has(&e, "code 280", 60), "no restart logged for the refused token");
    ck_assert_msg(denv_file_contains(e.log, at), "the restart does not name the token's clusterTime %s", at);
    ck_assert(caught_up(&e, 60));
    denv_expect_match_prefix(&e, "rep_sflt_a");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM \"rep_sflt_a\".\"c\""), 30);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM \"rep_sflt_b\".\"c\""), 10);
    denv_stop(&e);
}
END_TEST

/* ---- 3. events over 16 MB ---- */

/* Without pre- and post-images on the collection an event carries one copy of the document, and passes 16 MB by its
 * key, which comes three times (fullDocument, documentKey, and as hex in the
 * token). big_doc(fill, id_len, short_by) is {_id: id_len characters, big: ..., n: fill} of 16 MB - short_by bytes. */
static bson_t *big_doc(char fill, size_t id_len, size_t short_by, char **id_out)
{
    char *id = malloc(id_len + 1);
    ck_assert_ptr_nonnull(id);
    for (size_t i = 0; i < id_len; i++)
        id[i] = (char)('a' + i % 26);
    id[id_len] = '\0';
    size_t n = 16 * 1024 * 1024 - short_by - id_len - 64;
    char *big = malloc(n + 1);
    ck_assert_ptr_nonnull(big);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)(fill + (char)(i % 7 == 0));
    big[n] = '\0';
    bson_t *doc = BCON_NEW("_id", BCON_UTF8(id), "big", BCON_UTF8(big), "n", BCON_INT32(fill));
    free(big);
    *id_out = id;
    return doc;
}

/* An insert and a replacement whose events are over 16 MB (a 1 000-byte _id and a document 2 200 bytes short of
 * 16 MB: about 16 MB + 1 KB, under the 16 MB + 8 KB past which the split stage would cut them), replicated exactly.
 * (An event the split stage cuts needs a second large field beside the document: test_large_event_split.) */
START_TEST(test_large_event_whole)
{
    NEED_SIM();
    denv e;
    denv_start(&e, "sbig", NULL, INI_RAW);
    denv_daemon_start(&e);
    ck_assert(caught_up(&e, 60));
    mongoc_client_t *c = client(&e);
    mongoc_collection_t *coll = mongoc_client_get_collection(c, "rep_sbig_a", "c");
    char *id;
    bson_error_t err;
    bson_t *doc = big_doc('x', 1000, 2200, &id);
    ck_assert_uint_gt(doc->len, 16 * 1024 * 1024 - 2300);
    ck_assert_msg(mongoc_collection_insert_one(coll, doc, NULL, NULL, &err), "%s", err.message);
    bson_destroy(doc);
    ck_assert_msg(caught_up(&e, 120), "the large insert was not applied");
    char *id2;
    doc = big_doc('y', 1000, 2200, &id2);
    bson_t *q = BCON_NEW("_id", BCON_UTF8(id));
    ck_assert_msg(mongoc_collection_replace_one(coll, q, doc, NULL, NULL, &err), "%s", err.message);
    bson_destroy(doc);
    bson_destroy(q);
    denv_insert_range(&e, "rep_sbig_a", "c", 1, 3);
    ck_assert_msg(caught_up(&e, 120), "the large replacement was not applied");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM \"rep_sbig_a\".\"c\" WHERE doc->>'n' = '121'"), 1);
    denv_expect_match(&e);
    free(id);
    free(id2);
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(c);
    denv_stop(&e);
}
END_TEST

/* A 20 MB event: a document of 15 MB in a collection with changeStreamPreAndPostImages, updated with a 5 MB field:
 * the update's event holds the 5 MB updateDescription and the 15 MB post-image (fullDocument "whenAvailable", asked
 * for with change_stream_updates = description), so the split stage cuts it into fragments, which the daemon joins:
 * the row equals the source. */
START_TEST(test_large_event_split)
{
    NEED_SIM();
    denv e;
    denv_start(&e, "ssplit", NULL, INI_DESCRIPTION);
    mongoc_client_t *c = client(&e);
    bson_error_t err;
    bson_t *cmd =
        BCON_NEW("create", BCON_UTF8("c"), "changeStreamPreAndPostImages", "{", "enabled", BCON_BOOL(true), "}");
    mongoc_database_t *mdb = mongoc_client_get_database(c, "rep_ssplit_a");
    ck_assert_msg(mongoc_database_command_simple(mdb, cmd, NULL, NULL, &err), "create: %s", err.message);
    bson_destroy(cmd);
    mongoc_database_destroy(mdb);
    denv_daemon_start(&e);
    ck_assert(caught_up(&e, 60));
    /* logged as the stream opens, which a checkpoint already at the newest entry need not wait for */
    ck_assert_msg(denv_wait_log(&e, "large events split", 30), "the stream does not ask for the split stage");
    mongoc_collection_t *coll = mongoc_client_get_collection(c, "rep_ssplit_a", "c");
    size_t n1 = 10 * 1024 * 1024, n2 = 5 * 1024 * 1024;
    char *s1 = malloc(n1 + 1), *s2 = malloc(n2 + 1);
    ck_assert(s1 && s2);
    for (size_t i = 0; i < n1; i++)
        s1[i] = (char)('a' + i % 13);
    s1[n1] = '\0';
    for (size_t i = 0; i < n2; i++)
        s2[i] = (char)('n' + i % 11);
    s2[n2] = '\0';
    bson_t *doc = BCON_NEW("_id", BCON_INT32(1), "big", BCON_UTF8(s1), "n", BCON_INT32(1));
    ck_assert_msg(mongoc_collection_insert_one(coll, doc, NULL, NULL, &err), "%s", err.message);
    bson_destroy(doc);
    bson_t *q = BCON_NEW("_id", BCON_INT32(1));
    bson_t *u = BCON_NEW("$set", "{", "big2", BCON_UTF8(s2), "n", BCON_INT32(2), "}");
    ck_assert_msg(mongoc_collection_update_one(coll, q, u, NULL, NULL, &err), "%s", err.message);
    bson_destroy(q);
    bson_destroy(u);
    free(s1);
    free(s2);
    denv_insert_range(&e, "rep_ssplit_a", "c", 2, 4);
    ck_assert_msg(caught_up(&e, 120), "the split update was not applied");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM \"rep_ssplit_a\".\"c\" WHERE doc->>'n' = '2' AND "
                                 "length(doc->>'big2') = 5242880"),
                     1);
    denv_expect_match(&e);
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(c);
    denv_stop(&e);
}
END_TEST

/* The split stage refused (a server before 6.0.9 and 7.0): the daemon reads without it, and the event over 16 MB
 * stops it (exit 5) with a message naming the position and the stage; what came before is committed, nothing after. */
START_TEST(test_large_event_refused)
{
    NEED_SIM();
    const char *args[] = {"--refuse-stage", "$changeStreamSplitLargeEvent", NULL};
    denv e;
    denv_start(&e, "sbign", args, INI_RAW);
    denv_daemon_start(&e);
    ck_assert(caught_up(&e, 60));
    /* logged when the reader opens its stream, which may come after the start's checkpoint is committed */
    ck_assert_msg(denv_wait_log(&e, "refuses $changeStreamSplitLargeEvent", 60), "the refusal is not logged");
    denv_insert_range(&e, "rep_sbign_a", "c", 1, 1);
    ck_assert(caught_up(&e, 60));
    uint64_t before = denv_checkpoint_ts(e.service);
    char at[32];
    fmt_ts(before, at, sizeof at);
    mongoc_client_t *c = client(&e);
    mongoc_collection_t *coll = mongoc_client_get_collection(c, "rep_sbign_a", "c");
    /* A 12 000-byte _id and a document 18 000 bytes short of 16 MB: an event of about 16 MB + 18 KB, over the
     * 16 MB + 16 KB a server can send whole (BSONObjectTooLarge). */
    char *id;
    bson_error_t err;
    bson_t *doc = big_doc('x', 12000, 18000, &id);
    ck_assert_msg(mongoc_collection_insert_one(coll, doc, NULL, NULL, &err), "%s", err.message);
    bson_destroy(doc);
    denv_insert_range(&e, "rep_sbign_a", "c", 2, 3);
    int code = wait_exit(&e, 120);
    if (code != 5)
        denv_show_log(&e);
    ck_assert_int_eq(code, 5);
    ck_assert_msg(denv_file_contains(e.log, "larger than 16 MB"), "the stop does not say why");
    ck_assert_msg(denv_file_contains(e.log, "refused the $changeStreamSplitLargeEvent stage"),
                  "the stop does not name the missing stage");
    char want[96];
    snprintf(want, sizeof want, "nothing after %s was applied", at);
    ck_assert_msg(denv_file_contains(e.log, want), "the stop does not name the position %s", at);
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), before);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM \"rep_sbign_a\".\"c\""), 1);
    /* a restart stops at the same place, and still commits nothing */
    denv_daemon_start(&e);
    ck_assert_int_eq(wait_exit(&e, 120), 5);
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), before);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM \"rep_sbign_a\".\"c\""), 1);
    free(id);
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(c);
    denv_stop(&e);
}
END_TEST

Suite *stream_daemon_suite(void)
{
    Suite *s = suite_create("stream_daemon");
    TCase *crash = tcase_create("crash");
    tcase_set_timeout(crash, 900);
    tcase_add_test(crash, test_kill9_raw);
    tcase_add_test(crash, test_kill9_description);
    suite_add_tcase(s, crash);
    TCase *idle = tcase_create("idle");
    tcase_set_timeout(idle, 300);
    tcase_add_test(idle, test_idle_keeps_position);
    tcase_add_test(idle, test_idle_filter_excludes_all);
    tcase_add_test(idle, test_stopped_past_window_exits_4);
    suite_add_tcase(s, idle);
    TCase *f280 = tcase_create("f280");
    tcase_add_test(f280, test_filter_change_280);
    suite_add_tcase(s, f280);
    TCase *ops = tcase_create("ops");
    tcase_set_timeout(ops, 300);
    tcase_add_test(ops, test_copy_status_check);
    tcase_add_test(ops, test_skip_import_and_tail_from);
    suite_add_tcase(s, ops);
    TCase *large = tcase_create("large");
    tcase_set_timeout(large, 300);
    tcase_add_test(large, test_large_event_whole);
    tcase_add_test(large, test_large_event_split);
    tcase_add_test(large, test_large_event_refused);
    suite_add_tcase(s, large);
    return s;
}

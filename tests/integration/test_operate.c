/*
 * test_operate.c — the daemon as an operator meets it: the systemd notify protocol (read from a fake NOTIFY_SOCKET),
 * including the watchdog while PostgreSQL keeps a commit waiting on a lock; an idle PostgreSQL session terminated
 * under the daemon; the metrics endpoint scraped with a real HTTP client (curl); and ops PostgreSQL refuses (dead
 * letters, or a stop that commits everything before the op).
 *
 * Each case waits for events (a notify message, a log line, a checkpoint, a scrape) rather than for a time; the
 * watchdog's pace is checked from the kernel's receive timestamps of the WATCHDOG=1 messages.
 */
#include <check.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../lib/daemonenv.h"
#include "../lib/notifysock.h"

/* The mean interval between the first `count` WATCHDOG=1 messages after message number `from`, in seconds, from the
 * kernel's receive timestamps (so a test process scheduled late does not bunch them up). */
static double watchdog_mean_interval(const notifysock *ns, int from, int count)
{
    double first = 0, last = 0;
    int k = 0;
    for (int i = from; i < ns->n && k < count; i++) {
        if (strstr(ns->seen[i], "WATCHDOG=1") == NULL)
            continue;
        if (k++ == 0)
            first = ns->at[i];
        last = ns->at[i];
    }
    ck_assert_int_eq(k, count);
    return (last - first) / (count - 1);
}

/* The watchdog period the notify tests give the daemon: 2 s, so that the bound they check (pings on average more
 * often than the period; the daemon pings every quarter) is seconds wide, a margin load cannot close. */
#define WATCHDOG_USEC "2000000"
#define WATCHDOG_S    2.0

/* READY=1 after PostgreSQL and the oplog cursor are up (the starting checkpoint is committed by then); STATUS lines;
 * WATCHDOG=1 paced at a quarter of WATCHDOG_USEC, so always well within it; RELOADING=1 then READY=1 on SIGHUP;
 * STOPPING=1 on SIGTERM, then a clean exit. */
START_TEST(test_systemd_notify)
{
    denv e;
    denv_start(&e, "notify", NULL, NULL);
    static notifysock ns;
    notifysock_open(&ns, e.dir);
    char sock_env[400];
    snprintf(sock_env, sizeof sock_env, "NOTIFY_SOCKET=%s", ns.path);
    const char *env_extra[] = {sock_env, "WATCHDOG_USEC=" WATCHDOG_USEC, NULL};
    denv_daemon_start_env(&e, env_extra);

    ck_assert_msg(notifysock_wait(&ns, "READY=1", 30), "no READY=1 within 30 s");
    ck_assert_msg(notifysock_count(&ns, "STATUS=") >= 1, "no STATUS= before READY=1");
    /* READY means the checkpoint is read and the start committed: it is in PostgreSQL already, no wait. */
    ck_assert_msg(denv_checkpoint_ts(e.service) != 0, "READY=1 before the starting checkpoint was committed");
    ck_assert(denv_wait_caught_up(&e, 30));
    /* The log line is written just after READY=1 is sent. */
    ck_assert_msg(denv_wait_log(&e, "ready: PostgreSQL connected", 30), "the log does not say it is ready");

    /* Five pings, then their pace: on average more often than WATCHDOG_USEC (after which systemd would kill the
     * service), a generous bound on the quarter period they are meant to come at. */
    int from = ns.n;
    ck_assert_msg(notifysock_wait_n(&ns, from, "WATCHDOG=1", 5, 30), "fewer than 5 WATCHDOG=1 in 30 s");
    double mean = watchdog_mean_interval(&ns, from, 5);
    ck_assert_msg(mean < WATCHDOG_S, "WATCHDOG=1 every %.3f s on average, with WATCHDOG_USEC=" WATCHDOG_USEC, mean);

    notifysock_mark(&ns); /* the STATUS below must come after these inserts */
    denv_insert_range(&e, "rep_notify_a", "c", 1, 500);
    ck_assert(denv_wait_caught_up(&e, 30));
    ck_assert_msg(notifysock_wait(&ns, "STATUS=tailing: caught up", 10), "no 'tailing: caught up' STATUS");

    proc_signal(&e.daemon, SIGHUP);
    ck_assert_msg(notifysock_wait(&ns, "RELOADING=1", 10), "no RELOADING=1 after SIGHUP");
    ck_assert_msg(notifysock_wait(&ns, "READY=1", 10), "no READY=1 after the reload");

    proc_signal(&e.daemon, SIGTERM);
    ck_assert_msg(notifysock_wait(&ns, "STOPPING=1", 10), "no STOPPING=1 after SIGTERM");
    ck_assert(proc_wait(&e.daemon, 30));
    ck_assert_int_eq(proc_exit_code(&e.daemon), 0);
    e.daemon.pid = 0;
    notifysock_close(&ns);
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* How many lines of the file hold needle. */
static int file_count(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/* Without PostgreSQL there is no READY=1: the STATUS line says what it waits for, and SIGTERM still stops it. */
START_TEST(test_not_ready_without_postgres)
{
    denv e;
    denv_start(&e, "notready", NULL, NULL);
    char ini[320];
    snprintf(ini, sizeof ini, "%s/nopg.ini", e.dir);
    FILE *f = fopen(ini, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "[mongodb]\nuri = %s\n[postgres]\nconninfo = host=127.0.0.1 port=%d connect_timeout=2\n", e.uri,
            denv_free_port());
    fclose(f);
    static notifysock ns;
    notifysock_open(&ns, e.dir);
    char sock_env[400], bin[256], err[256];
    snprintf(sock_env, sizeof sock_env, "NOTIFY_SOCKET=%s", ns.path);
    snprintf(bin, sizeof bin, "%s/oplog2pg", proc_build_dir());
    const char *argv[] = {bin, "-c", ini, "run", NULL};
    const char *env_extra[] = {sock_env, NULL};
    snprintf(e.log, sizeof e.log, "%s/nopg.log", e.dir);
    ck_assert_msg(proc_start(argv, env_extra, e.log, &e.daemon, err, sizeof err), "%s", err);
    ck_assert_msg(notifysock_wait(&ns, "STATUS=reconnecting to PostgreSQL", 30), "no 'reconnecting' STATUS");
    /* That READY=1 never comes can only be watched over a window. It is bounded by the daemon's own attempts rather
     * than by a clock: from its start through its fourth failed connection (100, 200, 400 ms of backoff apart), no
     * READY=1 may arrive. */
    double until = denv_now() + 60;
    while (file_count(e.log, "retrying in") < 4) {
        ck_assert_msg(!notifysock_wait(&ns, "READY=1", 0.02), "READY=1 without PostgreSQL");
        ck_assert_msg(denv_now() < until, "fewer than 4 connection attempts logged in 60 s");
        ck_assert_msg(!proc_wait(&e.daemon, 0.0), "the daemon exited with %d", proc_exit_code(&e.daemon));
    }
    ck_assert_msg(notifysock_count(&ns, "READY=1") == 0, "READY=1 without PostgreSQL");
    ck_assert(proc_stop(&e.daemon, 30));
    ck_assert_int_eq(proc_exit_code(&e.daemon), 0);
    e.daemon.pid = 0;
    notifysock_close(&ns);
    denv_stop(&e);
}
END_TEST

/* A lock held elsewhere keeps a commit waiting several times WatchdogSec: the watchdog is still fed (from the wait
 * itself, paced at a quarter of the period), STATUS says what the daemon waits for, and once the lock goes
 * everything arrives. Before, the watchdog was fed only from the loop's timer, and such a wait became SIGABRT. */
START_TEST(test_watchdog_fed_while_waiting_on_a_lock)
{
    denv e;
    denv_start(&e, "wdlock", NULL, NULL);
    static notifysock ns;
    notifysock_open(&ns, e.dir);
    char sock_env[400];
    snprintf(sock_env, sizeof sock_env, "NOTIFY_SOCKET=%s", ns.path);
    const char *env_extra[] = {sock_env, "WATCHDOG_USEC=" WATCHDOG_USEC, NULL};
    denv_daemon_start_env(&e, env_extra);
    ck_assert_msg(notifysock_wait(&ns, "READY=1", 30), "no READY=1 within 30 s");
    denv_insert_range(&e, "rep_wdlock_a", "c", 1, 10);
    ck_assert(denv_wait_caught_up(&e, 30));
    uint64_t ckpt = denv_checkpoint_ts(e.service);

    PGconn *lk = PQconnectdb(denv_pg_conninfo());
    ck_assert_int_eq(PQstatus(lk), CONNECTION_OK);
    PQclear(PQexec(lk, "BEGIN"));
    PGresult *r = PQexec(lk, "LOCK TABLE rep_wdlock_a.c IN ACCESS EXCLUSIVE MODE");
    ck_assert_int_eq(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    denv_insert_range(&e, "rep_wdlock_a", "c", 11, 20);
    ck_assert_msg(notifysock_wait(&ns, "blocked by pid", 15),
                  "STATUS never said what the daemon waits for (PostgreSQL: a lock, and who holds it)");
    /* Thirteen pings while the lock is held: the daemon paces them at least a quarter period apart, so they span at
     * least three WatchdogSec of waiting; on average they must come more often than WatchdogSec (a generous bound on
     * the quarter period). */
    int from = ns.n;
    ck_assert_msg(notifysock_wait_n(&ns, from, "WATCHDOG=1", 13, 60),
                  "fewer than 13 WATCHDOG=1 in 60 s of waiting on a lock, with WATCHDOG_USEC=" WATCHDOG_USEC);
    double mean = watchdog_mean_interval(&ns, from, 13);
    ck_assert_msg(mean < WATCHDOG_S,
                  "WATCHDOG=1 every %.3f s on average while waiting on a lock, with WATCHDOG_USEC=" WATCHDOG_USEC,
                  mean);
    ck_assert_msg(!proc_wait(&e.daemon, 0.0), "the daemon exited while waiting");
    /* And the pings did come from the wait: nothing of the blocked commit is in (the lock holder sees the table). */
    r = PQexec(lk, "SELECT count(*) FROM rep_wdlock_a.c");
    ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
    ck_assert_str_eq(PQgetvalue(r, 0, 0), "10");
    PQclear(r);
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), ckpt);
    PQclear(PQexec(lk, "ROLLBACK"));
    PQfinish(lk);
    ck_assert(denv_wait_caught_up(&e, 30));
    notifysock_close(&ns);
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* An idle daemon whose PostgreSQL session is terminated notices it at once (the server says so before it closes
 * the socket, and the loop watches the socket), reconnects, and goes on. Before, it noticed at its next write. */
START_TEST(test_idle_connection_loss_noticed)
{
    denv e;
    denv_start(&e, "idlepg", NULL, NULL);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 30));
    denv_insert_range(&e, "rep_idlepg_a", "c", 1, 10);
    ck_assert(denv_wait_caught_up(&e, 30));
    int64_t killed = denv_pg_int("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                 "WHERE application_name = 'oplog2pg' AND pid <> pg_backend_pid()");
    ck_assert_int_eq(killed, 1);
    double t0 = denv_now();
    /* Nothing is written meanwhile, so noticing at all proves it was not left to the next write; the bound is
     * generous (it takes milliseconds). */
    ck_assert_msg(denv_wait_log(&e, "the idle PostgreSQL connection", 30), "the daemon did not notice within 30 s");
    printf("terminated idle connection noticed in %.2f s\n", denv_now() - t0);
    denv_insert_range(&e, "rep_idlepg_a", "c", 11, 20);
    ck_assert(denv_wait_caught_up(&e, 30));
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* ---- metrics ---- */

/* Starts service `name` with the metrics endpoint on a free port (and more_ini after it), and waits until it is caught
 * up; returns the port. */
static int start_with_metrics(denv *e, const char *name, const char *more_ini)
{
    int port = denv_free_port();
    char extra[256];
    snprintf(extra, sizeof extra, "[metrics]\nlisten = 127.0.0.1:%d\n%s", port, more_ini);
    denv_start(e, name, NULL, extra);
    denv_daemon_start(e);
    ck_assert(denv_wait_caught_up(e, 30));
    return port;
}

/* The counters a scrape shows match what was applied: 300 inserts, 40 updates, 25 deletes. */
START_TEST(test_metrics_scrape)
{
    denv e;
    int port = start_with_metrics(&e, "metrics", "");

    denv_insert_range(&e, "rep_metrics_a", "c", 1, 300);
    mongoc_client_t *c = mongoc_client_new(e.uri);
    mongoc_collection_t *col = mongoc_client_get_collection(c, "rep_metrics_a", "c");
    bson_error_t berr;
    for (int i = 1; i <= 40; i++) {
        bson_t *q = BCON_NEW("_id", BCON_INT32(i)), *u = BCON_NEW("$set", "{", "w", BCON_INT32(i), "}");
        ck_assert_msg(mongoc_collection_update_one(col, q, u, NULL, NULL, &berr), "%s", berr.message);
        bson_destroy(q);
        bson_destroy(u);
    }
    for (int i = 101; i <= 125; i++) {
        bson_t *q = BCON_NEW("_id", BCON_INT32(i));
        ck_assert_msg(mongoc_collection_delete_one(col, q, NULL, NULL, &berr), "%s", berr.message);
        bson_destroy(q);
    }
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
    ck_assert(denv_wait_caught_up(&e, 30));

    char url[128], *body = malloc(65536);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", port);
    /* The snapshot is published every second: wait for one that has seen the idle marker after the last commit
     * (the checks below say what is missing if none came). */
    double until = denv_now() + 60;
    for (;;) {
        ck_assert_int_eq(denv_http_get(url, true, body, 65536), 0);
        if ((denv_metric(body, "oplog2pg_ops_applied_total{kind=\"delete\"}") == 25 &&
             denv_metric(body, "oplog2pg_lag_seconds") == 0) ||
            denv_now() > until)
            break;
        usleep(100 * 1000);
    }
    ck_assert_msg(strstr(body, "HTTP/1.1 200") != NULL, "status: %.200s", body);
    ck_assert_msg(strstr(body, "text/plain; version=0.0.4") != NULL, "content type: %.300s", body);
    ck_assert_double_eq(denv_metric(body, "oplog2pg_ops_applied_total{kind=\"insert\"}"), 300);
    ck_assert_double_eq(denv_metric(body, "oplog2pg_ops_applied_total{kind=\"update\"}"), 40);
    ck_assert_double_eq(denv_metric(body, "oplog2pg_ops_applied_total{kind=\"delete\"}"), 25);
    ck_assert_double_eq(denv_metric(body, "oplog2pg_rows_written_total{method=\"copy\"}") +
                            denv_metric(body, "oplog2pg_rows_written_total{method=\"insert\"}"),
                        300);
    ck_assert_double_eq(denv_metric(body, "oplog2pg_rows_written_total{method=\"update\"}"), 40);
    ck_assert_double_eq(denv_metric(body, "oplog2pg_rows_written_total{method=\"delete\"}"), 25);
    ck_assert_double_eq(denv_metric(body, "oplog2pg_dead_letters_total"), 0);
    ck_assert_double_eq(denv_metric(body, "oplog2pg_ready"), 1);
    ck_assert_double_eq(denv_metric(body, "oplog2pg_lag_seconds"), 0);
    ck_assert_msg(denv_metric(body, "oplog2pg_commits_total") >= 1, "no commits counted");
    ck_assert_msg(denv_metric(body, "oplog2pg_flushes_total{trigger=\"idle\"}") >= 1, "no idle flush counted");
    ck_assert_msg(denv_metric(body, "oplog2pg_bytes_written_total") > 0, "no bytes counted");
    ck_assert_double_eq(denv_metric(body, "oplog2pg_checkpoint_timestamp_seconds"),
                        (double)(denv_checkpoint_ts(e.service) >> 32));
    ck_assert_msg(strstr(body, "oplog2pg_info{service=\"rep_metrics\"") != NULL, "no info line");

    denv_stop(&e);
    ck_assert_msg(denv_http_get(url, false, body, 65536) != 0, "the endpoint still answers after the daemon stopped");
    free(body);
}
END_TEST

/* Scrapes until the window and margin shown are those of the oplog's edges read here and the committed checkpoint
 * (the probe reads every second); fails with the last figures otherwise. *margin gets the margin shown. */
static void expect_window(const denv *e, const char *url, char *body, size_t bodylen, double *margin)
{
    uint32_t oldest = 0, newest = 0;
    double ck = 0, window = -2, shown = -2, until = denv_now() + 30;
    for (;;) {
        ck_assert_int_eq(denv_http_get(url, false, body, bodylen), 0);
        denv_oplog_edges(e->uri, &oldest, &newest);
        ck = (double)(denv_checkpoint_ts(e->service) >> 32);
        window = denv_metric(body, "oplog2pg_oplog_window_seconds");
        shown = denv_metric(body, "oplog2pg_oplog_margin_seconds");
        if ((window == (double)newest - (double)oldest && shown == ck - (double)oldest) || denv_now() > until)
            break;
        usleep(200 * 1000);
    }
    ck_assert_msg(window == (double)newest - (double)oldest, "window shown %g, the oplog's edges %u..%u", window,
                  oldest, newest);
    ck_assert_msg(shown == ck - (double)oldest, "margin shown %g, checkpoint %.0f, oldest entry %u", shown, ck, oldest);
    *margin = shown;
}

/* oplog2pg_oplog_window_seconds and oplog2pg_oplog_margin_seconds: the oplog's newest minus oldest entry, and the
 * checkpoint minus the oldest, as the oplog holds them; the margin grows as the checkpoint moves on, and shrinks when
 * the oplog loses its oldest entries. */
START_TEST(test_metrics_oplog_window)
{
    denv e;
    int port = start_with_metrics(&e, "opwin", "oplog_window_interval = 1s\n");
    char url[128], *body = malloc(65536);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", port);
    denv_insert_range(&e, "rep_opwin_a", "c", 1, 10);
    ck_assert(denv_wait_caught_up(&e, 30));
    double m1, m2, m3;
    expect_window(&e, url, body, 65536, &m1);

    sleep(3); /* entries three seconds later: the checkpoint moves three seconds on */
    denv_insert_range(&e, "rep_opwin_a", "c", 11, 20);
    ck_assert(denv_wait_caught_up(&e, 30));
    expect_window(&e, url, body, 65536, &m2);
    ck_assert_msg(m2 >= m1 + 3, "the margin went from %g to %g as the checkpoint moved 3 s on", m1, m2);

    /* the oplog's entries before the checkpoint go: the window shrinks, the margin falls to 0 */
    uint64_t ck = denv_checkpoint_ts(e.service);
    mongoc_client_t *c = mongoc_client_new(e.uri);
    bson_t *cmd =
        BCON_NEW("mongosimTruncateOplog", BCON_INT32(1), "before", BCON_TIMESTAMP((uint32_t)(ck >> 32), (uint32_t)ck));
    bson_error_t berr;
    ck_assert_msg(mongoc_client_command_simple(c, "admin", cmd, NULL, NULL, &berr), "%s", berr.message);
    bson_destroy(cmd);
    mongoc_client_destroy(c);
    expect_window(&e, url, body, 65536, &m3);
    ck_assert_msg(m3 < m2 && m3 >= 0, "the margin went from %g to %g as the oplog lost its oldest entries", m2, m3);
    denv_stop(&e);
    free(body);
}
END_TEST

/* [postgres] max_prepared_statements reaches the connection: with room for two statements, inserts going round four
 * collections leave two of them planned afresh each time, and the metrics count those (the default room, 1 000,
 * would send none unnamed here). */
START_TEST(test_max_prepared_statements)
{
    denv e;
    int port = start_with_metrics(&e, "maxprep", "[postgres]\nmax_prepared_statements = 2\n");
    for (int round = 1; round <= 3; round++) {
        for (int c = 0; c < 4; c++) {
            char coll[8];
            snprintf(coll, sizeof coll, "c%d", c);
            denv_insert_range(&e, "rep_maxprep_a", coll, round, round);
        }
        ck_assert(denv_wait_caught_up(&e, 30));
    }
    char url[128], *body = malloc(65536);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", port);
    double until = denv_now() + 30;
    for (;;) { /* the snapshot is published every second */
        ck_assert_int_eq(denv_http_get(url, true, body, 65536), 0);
        if (denv_metric(body, "oplog2pg_ops_applied_total{kind=\"insert\"}") == 12 || denv_now() > until)
            break;
        usleep(100 * 1000);
    }
    ck_assert_double_eq(denv_metric(body, "oplog2pg_ops_applied_total{kind=\"insert\"}"), 12);
    ck_assert_msg(denv_metric(body, "oplog2pg_statements_unnamed_total") >= 2,
                  "no statement went unnamed with room for two: the bound did not reach the connection");
    free(body);
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* ---- ops PostgreSQL refuses ---- */

/* Inserts one document whose string holds U+0000 (valid BSON, refused by jsonb). */
static void insert_nul(const char *uri, const char *db, const char *coll, int id)
{
    mongoc_client_t *c = mongoc_client_new(uri);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db, coll);
    bson_t doc = BSON_INITIALIZER;
    BSON_APPEND_INT32(&doc, "_id", id);
    bson_append_utf8(&doc, "s", 1, "a\0b", 3);
    bson_error_t err;
    ck_assert_msg(mongoc_collection_insert_one(col, &doc, NULL, NULL, &err), "%s", err.message);
    bson_destroy(&doc);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
}

/* Default on_error = dead-letter: a document with U+0000 (in a COPY run), an update setting such a string, and the
 * create of and insert into a collection whose name is too long for PostgreSQL are set aside; everything else
 * arrives. */
START_TEST(test_dead_letters)
{
    denv e;
    denv_start(&e, "dl", NULL, NULL);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 30));

    denv_insert_range(&e, "rep_dl_a", "c", 1, 1);
    insert_nul(e.uri, "rep_dl_a", "c", 2);
    denv_insert_range(&e, "rep_dl_a", "c", 3, 102);
    mongoc_client_t *c = mongoc_client_new(e.uri);
    mongoc_collection_t *col = mongoc_client_get_collection(c, "rep_dl_a", "c");
    bson_error_t berr;
    bson_t *q = BCON_NEW("_id", BCON_INT32(1));
    bson_t u = BSON_INITIALIZER, set;
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
    bson_append_utf8(&set, "t", 1, "x\0y", 3);
    bson_append_document_end(&u, &set);
    ck_assert_msg(mongoc_collection_update_one(col, q, &u, NULL, NULL, &berr), "%s", berr.message);
    bson_destroy(q);
    bson_destroy(&u);
    q = BCON_NEW("_id", BCON_INT32(3));
    bson_t *u2 = BCON_NEW("$set", "{", "w", BCON_INT32(7), "}");
    ck_assert_msg(mongoc_collection_update_one(col, q, u2, NULL, NULL, &berr), "%s", berr.message);
    bson_destroy(q);
    bson_destroy(u2);
    q = BCON_NEW("_id", BCON_INT32(4));
    ck_assert_msg(mongoc_collection_delete_one(col, q, NULL, NULL, &berr), "%s", berr.message);
    bson_destroy(q);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
    char longname[80];
    memset(longname, 'n', 70);
    longname[70] = '\0';
    denv_insert_range(&e, "rep_dl_a", longname, 1, 1);
    denv_insert_range(&e, "rep_dl_a", "after", 1, 5);

    ck_assert_msg(denv_wait_caught_up(&e, 60), "the daemon did not get past the refused ops");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_dl_a.c"), 100); /* 102 inserted, _id 2 refused, 4 deleted */
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_dl_a.c WHERE _id = '2'"), 0);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_dl_a.c WHERE _id = '1' AND NOT doc ? 't'"), 1);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_dl_a.c WHERE _id = '3' AND doc->'w' = '7'"), 1);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_dl_a.after"), 5);
    /* The 70-byte collection name is shortened (map/names.h: 52 bytes, '$', 10 hex digits), not refused: its table
     * holds its document. */
    char shortname[64], sql[200];
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.tables WHERE service = 'rep_dl' AND length(coll) = 70 "
                                 "AND table_name ~ '^n{52}[$][0-9a-f]{10}$'"),
                     1);
    denv_pg_text("SELECT table_name FROM oplog2pg.tables WHERE service = 'rep_dl' AND length(coll) = 70", shortname,
                 sizeof shortname);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM rep_dl_a.\"%s\"", shortname);
    ck_assert_int_eq(denv_pg_int(sql), 1);
    /* Two: the NUL document and the NUL update. */
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE service = 'rep_dl'"), 2);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE service = 'rep_dl' AND op = 'i' "
                                 "AND coll = 'c' AND doc_id = '2' AND sqlstate IS NOT NULL AND op_bson IS NOT NULL "
                                 "AND op_json LIKE '%\\u0000%'"),
                     1);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE service = 'rep_dl' AND op = 'u' "
                                 "AND doc_id = '1' AND error <> ''"),
                     1);
    ck_assert_msg(denv_file_contains(e.log, "set aside in oplog2pg.dead_letter"), "no dead letter logged");

    char out[320];
    snprintf(out, sizeof out, "%s/status.json", e.dir);
    const char *args[] = {"-c", e.ini, "status", "--json", NULL};
    ck_assert_int_eq(denv_run_command(&e, args, out), 0);
    ck_assert_msg(denv_file_contains(out, "\"dead_letters\": 2"), "status --json does not count 2 dead letters");
    denv_stop(&e);
}
END_TEST

/* on_error = stop: everything before the refused entry is committed, the daemon exits 1, and a restart with
 * dead-letter goes on from there. */
START_TEST(test_stop_on_refused_op)
{
    denv e;
    denv_start(&e, "dlstop", NULL, "on_error = stop\n");
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 30));
    /* Stop the daemon while the workload is written, so the bad document lands in the middle of one group. */
    ck_assert(proc_stop(&e.daemon, 30));
    denv_insert_range(&e, "rep_dlstop_a", "c", 1, 10);
    uint64_t before_bad = denv_newest_ts(e.uri);
    insert_nul(e.uri, "rep_dlstop_a", "c", 11);
    denv_insert_range(&e, "rep_dlstop_a", "c", 12, 21);
    denv_daemon_start(&e);
    ck_assert_msg(proc_wait(&e.daemon, 60), "the daemon did not stop at the refused op");
    ck_assert_int_eq(proc_exit_code(&e.daemon), 1);
    e.daemon.pid = 0;
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_dlstop_a.c"), 10);
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), before_bad);
    ck_assert_msg(denv_file_contains(e.log, "everything before this entry is committed"), "no stop message");
    ck_assert_msg(denv_file_contains(e.log, "the op PostgreSQL refused: rep_dlstop_a.c _id 11 (oplog entry"),
                  "the log does not name the refused op");

    char cmd[700];
    snprintf(cmd, sizeof cmd, "sed -i 's/^on_error = stop$/on_error = dead-letter/' '%s'", e.ini);
    ck_assert_int_eq(system(cmd), 0);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_dlstop_a.c"), 20);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE service = 'rep_dlstop'"), 1);
    denv_stop(&e);
}
END_TEST

Suite *operate_suite(void); /* called by the generated runner list */

Suite *operate_suite(void)
{
    Suite *s = suite_create("operate");
    TCase *tc = tcase_create("operate");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_systemd_notify);
    tcase_add_test(tc, test_not_ready_without_postgres);
    tcase_add_test(tc, test_watchdog_fed_while_waiting_on_a_lock);
    tcase_add_test(tc, test_idle_connection_loss_noticed);
    tcase_add_test(tc, test_metrics_scrape);
    tcase_add_test(tc, test_metrics_oplog_window);
    tcase_add_test(tc, test_max_prepared_statements);
    tcase_add_test(tc, test_dead_letters);
    tcase_add_test(tc, test_stop_on_refused_op);
    suite_add_tcase(s, tc);
    return s;
}

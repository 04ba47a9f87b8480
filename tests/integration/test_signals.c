/*
 * test_signals.c — SIGTERM, SIGINT and SIGHUP in every state of the process, as docs/operations.md ("Stopping,
 * reloading") and daemon/signals.h promise them: SIGHUP re-reads the configuration and the daemon goes on; the first
 * SIGTERM or SIGINT ends it with exit 0 (committing what was read, or stopping the copy after its batches, or just
 * leaving a backoff); a second one exits at once. Each state is reached by waiting on an event (a log line, a STATUS
 * line on a fake NOTIFY_SOCKET, the checkpoint or the copy's progress in PostgreSQL), never by sleeping:
 *   - start-up: PostgreSQL unreachable (its connect backoff), PostgreSQL accepting the connection but never
 *     answering it, and another holder of the service (the fence wait, which would end with exit 6);
 *   - the initial copy, also while a copy batch waits on a lock;
 *   - the reconnect backoff in the middle of a run (the daemon's database refusing connections);
 *   - a normal session, idle and while it applies a backlog;
 *   - careful mode (stepping over an op PostgreSQL refused), held there by a lock on a table a later op of the group
 *     touches;
 *   - a wait on a lock held by another session: the stop waits STOP_GRACE_S, then cancels the statement; a second
 *     SIGTERM exits at once.
 * A SIGHUP before the daemon is ready (backoff, copy) must not announce READY=1 to systemd
 * (test_reload_before_ready_announces_no_ready, and the end of test_initial_copy).
 * After every stop the daemon is started again and must catch up: the test ends with a comparison of MongoDB and
 * PostgreSQL (nothing lost, nothing doubled) and the checkpoint at the newest oplog entry.
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
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "../lib/compare.h"
#include "../lib/daemonenv.h"
#include "../lib/notifysock.h"
#include "../lib/oplogutil.h"
#include "../lib/proc.h"
#include "../lib/skip.h"
#include "../lib/workload.h"

#define WAIT_S 30.0 /* upper bound on any single expected event */

/* ---------------------------------------------------------------------------------------------------------------- */
/* the daemon */

/* Starts `oplog2pg -c INI run [args]` (ini NULL: the environment's own), with NOTIFY_SOCKET when ns is given. Each
 * start gets its own log (e->log). */
static void sig_daemon_start(denv *e, const char *ini, notifysock *ns, const char *const *args)
{
    char bin[256], err[512], sock_env[400];
    snprintf(bin, sizeof bin, "%s/oplog2pg", proc_build_dir());
    const char *argv[12] = {bin, "-c", ini ? ini : e->ini, "run"};
    size_t n = 4;
    for (size_t i = 0; args != NULL && args[i] != NULL && n < 11; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    const char *env_extra[2] = {NULL, NULL};
    if (ns != NULL) {
        snprintf(sock_env, sizeof sock_env, "NOTIFY_SOCKET=%s", ns->path);
        env_extra[0] = sock_env;
        notifysock_mark(ns); /* what an earlier daemon said does not count */
    }
    snprintf(e->log, sizeof e->log, "%s.%d", e->base_log, e->starts++);
    ck_assert_msg(proc_start(argv, env_extra, e->log, &e->daemon, err, sizeof err), "%s", err);
}

/* The daemon must still run. */
static void sig_expect_running(denv *e, const char *when)
{
    if (proc_wait(&e->daemon, 0.0)) {
        int code = proc_exit_code(&e->daemon);
        e->daemon.pid = 0;
        denv_show_log(e);
        ck_abort_msg("the daemon exited with %d %s (a signal that should have kept it running ended it?)", code, when);
    }
}

/* Waits until the current log holds needle; false on timeout. */
static bool sig_wait_log(denv *e, const char *needle, double timeout_s)
{
    double until = denv_now() + timeout_s;
    while (denv_now() < until) {
        if (denv_file_contains(e->log, needle))
            return true;
        notifysock_pump();
        usleep(20 * 1000);
    }
    return false;
}

/* Waits for a log line, failing with the log shown (and noting an early exit). */
static void sig_expect_log(denv *e, const char *needle, double timeout_s)
{
    if (sig_wait_log(e, needle, timeout_s))
        return;
    bool exited = e->daemon.pid != 0 && proc_wait(&e->daemon, 0.0);
    int code = exited ? proc_exit_code(&e->daemon) : -1;
    if (exited)
        e->daemon.pid = 0;
    denv_show_log(e);
    if (exited)
        ck_abort_msg("no \"%s\" in the log: the daemon exited with %d", needle, code);
    ck_abort_msg("no \"%s\" in the log within %.0f s", needle, timeout_s);
}

/* Waits for a STATUS (or other) notify message, failing with what was received. */
static void sig_expect_notify(denv *e, notifysock *ns, const char *want, double timeout_s)
{
    if (notifysock_wait(ns, want, timeout_s))
        return;
    notifysock_print(ns);
    denv_show_log(e);
    ck_abort_msg("no notify message with \"%s\" within %.0f s", want, timeout_s);
}

/* How many lines of the current log hold needle. */
static int sig_log_count(const denv *e, const char *needle)
{
    FILE *f = fopen(e->log, "r");
    if (f == NULL)
        return 0;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/* Waits until the current log holds needle on more than `than` lines. */
static void sig_expect_log_more(denv *e, const char *needle, int than, double timeout_s)
{
    double until = denv_now() + timeout_s;
    while (denv_now() < until) {
        if (sig_log_count(e, needle) > than)
            return;
        sig_expect_running(e, "while waiting for a log line");
        notifysock_pump();
        usleep(20 * 1000);
    }
    denv_show_log(e);
    ck_abort_msg("\"%s\" did not appear again within %.0f s", needle, timeout_s);
}

/* Waits up to timeout_s for the daemon to exit (reading the notify socket meanwhile); returns its exit code (the
 * log is shown when it is not 0). */
static int sig_wait_exit(denv *e, double timeout_s, const char *after)
{
    double until = denv_now() + timeout_s;
    while (!proc_wait(&e->daemon, 0.02)) {
        notifysock_pump();
        if (denv_now() >= until) {
            denv_show_log(e);
            ck_abort_msg("the daemon did not exit within %.0f s of %s", timeout_s, after);
        }
    }
    int code = proc_exit_code(&e->daemon);
    e->daemon.pid = 0;
    if (code != 0)
        denv_show_log(e);
    return code;
}

/* Sends sig and waits for the daemon to exit; returns its exit code. */
static int sig_send_and_wait(denv *e, int sig, double timeout_s)
{
    ck_assert_msg(proc_signal(&e->daemon, sig), "the daemon is not running");
    double t0 = denv_now();
    int code = sig_wait_exit(e, timeout_s, strsignal(sig));
    fprintf(stderr, "  %s: exit %d after %.2f s\n", strsignal(sig), code, denv_now() - t0);
    return code;
}

/* Replaces the first occurrence of `from` in the file by `to` (a configuration change for SIGHUP to pick up). */
static void sig_file_replace(const char *path, const char *from, const char *to)
{
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char text[16384];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char *at = strstr(text, from);
    ck_assert_msg(at != NULL, "%s holds no \"%s\"", path, from);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fwrite(text, 1, (size_t)(at - text), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
    ck_assert_int_eq(fclose(f), 0);
}

static void sig_file_append(const char *path, const char *line)
{
    FILE *f = fopen(path, "a");
    ck_assert_ptr_nonnull(f);
    fputs(line, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* SIGHUP after changing one reloadable option from `from` to `to` in the file: the daemon must log the change and
 * "configuration reloaded ... (1 option changed)", and keep running. */
static void sig_reload(denv *e, const char *ini, const char *from, const char *to, const char *changed)
{
    int before = sig_log_count(e, "configuration reloaded from");
    sig_file_replace(ini, from, to);
    ck_assert(proc_signal(&e->daemon, SIGHUP));
    sig_expect_log_more(e, "configuration reloaded from", before, WAIT_S);
    ck_assert_msg(denv_file_contains(e->log, "(1 option changed)"), "the reload did not see the changed option");
    ck_assert_msg(denv_file_contains(e->log, changed), "the reload did not log \"%s\"", changed);
    sig_expect_running(e, "after SIGHUP");
}

/* The position "S:I" in the last "committed through oplog entry S:I" of the log, packed as the checkpoint is. */
static uint64_t sig_logged_stop_position(const denv *e)
{
    FILE *f = fopen(e->log, "r");
    ck_assert_ptr_nonnull(f);
    char line[4096];
    uint64_t pos = 0;
    const char *key = "stopped cleanly; committed through oplog entry ";
    while (fgets(line, sizeof line, f)) {
        char *at = strstr(line, key);
        unsigned secs, inc;
        if (at != NULL && sscanf(at + strlen(key), "%u:%u", &secs, &inc) == 2)
            pos = (uint64_t)secs << 32 | inc;
    }
    fclose(f);
    return pos;
}

/* A TCP port nobody listens on right now. */
static int sig_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

/* A configuration for the environment's service whose PostgreSQL is `conninfo` (written next to the real one). */
static void sig_write_ini(const denv *e, const char *path, const char *conninfo, const char *extra)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "[mongodb]\nuri = %s\n[postgres]\nconninfo = %s\n[replication]\nservice = %s\ninclude = %s*.*\n%s",
            e->uri, conninfo, e->service, e->prefix, extra ? extra : "");
    ck_assert_int_eq(fclose(f), 0);
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* MongoDB and PostgreSQL */

/* update {_id: from..to} with {$inc: {n: 1}} (replayed twice, it would show). */
static void sig_increment(const denv *e, const char *db, const char *coll, int from, int to)
{
    mongoc_client_t *c = mongoc_client_new(e->uri);
    ck_assert_ptr_nonnull(c);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db, coll);
    bson_error_t err;
    for (int i = from; i <= to; i++) {
        bson_t *q = BCON_NEW("_id", BCON_INT32(i)), *u = BCON_NEW("$inc", "{", "n", BCON_INT32(1), "}");
        bool ok = mongoc_collection_update_one(col, q, u, NULL, NULL, &err);
        bson_destroy(q);
        bson_destroy(u);
        ck_assert_msg(ok, "update of %s.%s: %s", db, coll, err.message);
    }
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
}

static void sig_unset(const denv *e, const char *db, const char *coll, int id, const char *field)
{
    mongoc_client_t *c = mongoc_client_new(e->uri);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db, coll);
    bson_t *q = BCON_NEW("_id", BCON_INT32(id)), *u = BCON_NEW("$unset", "{", field, BCON_INT32(1), "}");
    bson_error_t err;
    bool ok = mongoc_collection_update_one(col, q, u, NULL, NULL, &err);
    bson_destroy(q);
    bson_destroy(u);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
    ck_assert_msg(ok, "%s", err.message);
}

/* One oplog entry holding two updates, written as a driver's transaction (small: the server logs it as one applyOps
 * entry): on a.c, {_id: id_a} gets a string with U+0000 (valid BSON, refused by jsonb); on b.c, {_id: id_b} gets
 * {$inc: {n: 1}}. The batcher never splits an entry, so both ops are in the same group. */
static void sig_transaction_nul_then_update(const denv *e, const char *db_a, const char *db_b, int id_a, int id_b)
{
    mongoc_client_t *c = mongoc_client_new(e->uri);
    ck_assert_ptr_nonnull(c);
    bson_error_t err;
    mongoc_client_session_t *s = mongoc_client_start_session(c, NULL, &err);
    ck_assert_msg(s != NULL, "start session: %s", err.message);
    ck_assert_msg(mongoc_client_session_start_transaction(s, NULL, &err), "start transaction: %s", err.message);
    for (int k = 0; k < 2; k++) {
        mongoc_collection_t *col = mongoc_client_get_collection(c, k == 0 ? db_a : db_b, "c");
        bson_t opts = BSON_INITIALIZER, set = BSON_INITIALIZER, sub;
        ck_assert_msg(mongoc_client_session_append(s, &opts, &err), "%s", err.message);
        bson_t *q = BCON_NEW("_id", BCON_INT32(k == 0 ? id_a : id_b));
        BSON_APPEND_DOCUMENT_BEGIN(&set, k == 0 ? "$set" : "$inc", &sub);
        if (k == 0)
            bson_append_utf8(&sub, "bad", 3, "a\0b", 3);
        else
            BSON_APPEND_INT32(&sub, "n", 1);
        bson_append_document_end(&set, &sub);
        bson_t reply;
        bool ok = mongoc_collection_update_one(col, q, &set, &opts, &reply, &err);
        bson_destroy(&reply);
        ck_assert_msg(ok, "update in %s: %s", k == 0 ? db_a : db_b, err.message);
        bson_destroy(q);
        bson_destroy(&set);
        bson_destroy(&opts);
        mongoc_collection_destroy(col);
    }
    bson_t reply;
    ck_assert_msg(mongoc_client_session_commit_transaction(s, &reply, &err), "commit: %s", err.message);
    bson_destroy(&reply);
    mongoc_client_session_destroy(s);
    mongoc_client_destroy(c);
}

static PGconn *sig_pg(const char *extra)
{
    char conninfo[1024];
    snprintf(conninfo, sizeof conninfo, "%s %s", denv_pg_conninfo(), extra ? extra : "");
    PGconn *pg = PQconnectdb(conninfo);
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    return pg;
}

static int64_t sig_pg_int(PGconn *pg, const char *sql)
{
    PGresult *r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1, "%s: %s", sql, PQerrorMessage(pg));
    int64_t v = PQgetisnull(r, 0, 0) ? -1 : strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

static void sig_pg_do(PGconn *pg, const char *sql)
{
    PGresult *r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql,
                  PQerrorMessage(pg));
    PQclear(r);
}

/* Another session holding ACCESS EXCLUSIVE on a table, in an open transaction (ROLLBACK and PQfinish to release). */
static PGconn *sig_lock_table(const char *qualified)
{
    PGconn *lk = sig_pg("application_name=sig_locker");
    char sql[256];
    sig_pg_do(lk, "BEGIN");
    snprintf(sql, sizeof sql, "LOCK TABLE %s IN ACCESS EXCLUSIVE MODE", qualified);
    sig_pg_do(lk, sql);
    return lk;
}

static void sig_unlock(PGconn *lk)
{
    sig_pg_do(lk, "ROLLBACK");
    PQfinish(lk);
}

/* What PostgreSQL's sessions are doing (printed when a wait fails). */
static void sig_show_activity(void)
{
    PGconn *pg = sig_pg(NULL);
    PGresult *r = PQexec(pg, "SELECT pid, datname, application_name, state, wait_event_type, wait_event, "
                             "pg_blocking_pids(pid)::text, left(query, 120) FROM pg_stat_activity "
                             "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()");
    fprintf(stderr, "---- pg_stat_activity\n");
    for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r); i++) {
        for (int k = 0; k < PQnfields(r); k++)
            fprintf(stderr, "%s%s", k ? " | " : "  ", PQgetvalue(r, i, k));
        fprintf(stderr, "\n");
    }
    PQclear(r);
    PQfinish(pg);
}

/* Waits until the checkpoint reaches the newest entry; on timeout shows the log and PostgreSQL's sessions. */
static void sig_expect_caught_up(denv *e, double timeout_s, const char *what)
{
    double until = denv_now() + timeout_s;
    while (denv_now() < until) {
        uint64_t want = denv_newest_ts(e->uri), have = denv_checkpoint_ts(e->service);
        if (want != 0 && have == want)
            return;
        sig_expect_running(e, "while catching up");
        notifysock_pump();
        usleep(50 * 1000);
    }
    denv_show_log(e);
    sig_show_activity();
    ck_abort_msg("%s within %.0f s", what, timeout_s);
}

static int64_t sig_dead_letters(const denv *e)
{
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM oplog2pg.dead_letter WHERE service = '%s'", e->service);
    return denv_pg_int(sql);
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* 1. start-up, PostgreSQL unreachable */

/* Nothing listens at PostgreSQL's port: the daemon is in its connect backoff. SIGHUP re-reads the file (the change
 * is logged) and the backoff goes on; SIGTERM, and in a second start SIGINT, end it with exit 0. Started against the
 * real PostgreSQL, it copies and tails everything. */
START_TEST(test_startup_backoff)
{
    denv e;
    denv_start(&e, "sgboot", NULL, NULL);
    denv_insert_range(&e, "rep_sgboot_a", "c", 1, 300);
    char ini[320], conninfo[128];
    snprintf(ini, sizeof ini, "%s/nopg.ini", e.dir);
    snprintf(conninfo, sizeof conninfo, "host=127.0.0.1 port=%d connect_timeout=2", sig_free_port());
    sig_write_ini(&e, ini, conninfo, "batch_rows = 1000\n");
    static notifysock ns;
    notifysock_open(&ns, e.dir);

    const int sigs[2] = {SIGTERM, SIGINT};
    const char *said[2] = {"Terminated received: stopping", "Interrupt received: stopping"};
    for (int round = 0; round < 2; round++) {
        sig_daemon_start(&e, ini, &ns, NULL);
        sig_expect_notify(&e, &ns, "STATUS=reconnecting to PostgreSQL", WAIT_S);
        sig_expect_log(&e, "retrying in", WAIT_S);
        if (round == 0) {
            sig_reload(&e, ini, "batch_rows = 1000", "batch_rows = 2000", "batch_rows changed");
            /* Still in the backoff, still retrying. */
            sig_expect_log_more(&e, "retrying in", sig_log_count(&e, "retrying in"), WAIT_S);
        }
        ck_assert_int_eq(sig_send_and_wait(&e, sigs[round], WAIT_S), 0);
        ck_assert_msg(denv_file_contains(e.log, said[round]), "the log does not say \"%s\"", said[round]);
        ck_assert_msg(!denv_file_contains(e.log, "ready: PostgreSQL connected"), "ready without PostgreSQL?");
    }
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), 0);

    sig_daemon_start(&e, NULL, NULL, NULL);
    sig_expect_caught_up(&e, 60, "the daemon did not catch up");
    denv_expect_match(&e);
    notifysock_close(&ns);
    denv_stop(&e);
}
END_TEST

/* The same state, told through systemd's protocol: READY=1 means both sides are up and the checkpoint is read
 * (docs/operations.md, "Running under systemd"). A SIGHUP before that reloads (the log says so) but sends neither
 * RELOADING=1 nor READY=1: the service is still starting, and READY=1 would make systemd take the start as finished
 * while PostgreSQL is still unreachable. */
START_TEST(test_reload_before_ready_announces_no_ready)
{
    denv e;
    denv_start(&e, "sgnrdy", NULL, NULL);
    char ini[320], conninfo[128];
    snprintf(ini, sizeof ini, "%s/nopg.ini", e.dir);
    snprintf(conninfo, sizeof conninfo, "host=127.0.0.1 port=%d connect_timeout=2", sig_free_port());
    sig_write_ini(&e, ini, conninfo, "batch_rows = 1000\n");
    static notifysock ns;
    notifysock_open(&ns, e.dir);
    sig_daemon_start(&e, ini, &ns, NULL);
    sig_expect_notify(&e, &ns, "STATUS=reconnecting to PostgreSQL", WAIT_S);
    sig_reload(&e, ini, "batch_rows = 1000", "batch_rows = 2000", "batch_rows changed");
    ck_assert_int_eq(sig_send_and_wait(&e, SIGTERM, WAIT_S), 0);
    /* Datagrams from one sender arrive in order: everything sent before STOPPING=1 is in by then. */
    sig_expect_notify(&e, &ns, "STOPPING=1", 5);
    notifysock_drain(&ns);
    ck_assert_msg(notifysock_count(&ns, "RELOADING=1") == 0, "RELOADING=1 while the service was still starting");
    if (notifysock_count(&ns, "READY=1") != 0)
        notifysock_print(&ns);
    ck_assert_msg(notifysock_count(&ns, "READY=1") == 0,
                  "READY=1 was sent %d time(s) while PostgreSQL was unreachable (after the SIGHUP's RELOADING=1): "
                  "systemd would report the service started",
                  notifysock_count(&ns, "READY=1"));
    notifysock_close(&ns);
    denv_stop(&e);
}
END_TEST

/* PostgreSQL's port accepts the connection and then never answers (a hung server): the daemon waits in the connect
 * itself, for up to [postgres] peer_timeout (30 s). A SIGTERM gives that attempt up at once (there is nothing to
 * commit) and exits 0, long before the timeout. */
START_TEST(test_startup_unanswered_connect)
{
    denv e;
    denv_start(&e, "sghang", NULL, NULL);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(lfd, 16), 0); /* never accepted: the kernel completes the handshake, nobody answers */
    ck_assert_int_eq(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
    char ini[320], conninfo[128];
    snprintf(ini, sizeof ini, "%s/hang.ini", e.dir);
    snprintf(conninfo, sizeof conninfo, "host=127.0.0.1 port=%d sslmode=disable", ntohs(sa.sin_port));
    sig_write_ini(&e, ini, conninfo, NULL); /* peer_timeout 30 s: the connect would wait that long */
    static notifysock ns;
    notifysock_open(&ns, e.dir);

    sig_daemon_start(&e, ini, &ns, NULL);
    sig_expect_notify(&e, &ns, "for PostgreSQL: the connection", WAIT_S);
    double t0 = denv_now();
    ck_assert(proc_signal(&e.daemon, SIGTERM));
    ck_assert_int_eq(sig_wait_exit(&e, WAIT_S, "SIGTERM during a connect nobody answers"), 0);
    ck_assert_msg(denv_now() - t0 < 20, "the stop waited %.0f s for the connect (its timeout is 30 s)",
                  denv_now() - t0);
    ck_assert_msg(denv_file_contains(e.log, "Terminated received: stopping"), "the stop was not logged");
    ck_assert_msg(denv_file_contains(e.log, "the attempt was given up"), "the connect was not given up");
    close(lfd);

    sig_daemon_start(&e, NULL, NULL, NULL);
    sig_expect_caught_up(&e, 60, "the daemon did not catch up");
    denv_insert_range(&e, "rep_sghang_a", "c", 1, 50);
    sig_expect_caught_up(&e, 60, "the daemon did not catch up");
    denv_expect_match(&e);
    notifysock_close(&ns);
    denv_stop(&e);
}
END_TEST

/* Another session holds the service (the advisory lock a running daemon holds): a start waits up to 15 s for it
 * to go away, then gives up with exit 6. SIGHUP during that wait is logged and the wait goes on; SIGTERM ends it with
 * exit 0, not 6. Once the lock is gone, a start replicates everything. */
START_TEST(test_startup_fenced)
{
    denv e;
    denv_start(&e, "sgfence", NULL, "batch_rows = 1000\n");
    denv_insert_range(&e, "rep_sgfence_a", "c", 1, 100);
    PGconn *holder = sig_pg("application_name=sig_holder");
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT pg_try_advisory_lock(hashtextextended('oplog2pg.service:' || '%s', 0))::int",
             e.service);
    ck_assert_int_eq(sig_pg_int(holder, sql), 1);
    sig_daemon_start(&e, NULL, NULL, NULL);
    sig_expect_log(&e, "waiting up to 15 s for it to go away", WAIT_S);
    sig_reload(&e, e.ini, "batch_rows = 1000", "batch_rows = 2000", "batch_rows changed");
    ck_assert_int_eq(sig_send_and_wait(&e, SIGTERM, WAIT_S), 0);
    ck_assert_msg(denv_file_contains(e.log, "Terminated received: stopping"), "the stop was not logged");
    PQfinish(holder);
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), 0);

    sig_daemon_start(&e, NULL, NULL, NULL);
    sig_expect_caught_up(&e, 60, "the daemon did not catch up");
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* 2. the initial copy */

/* DIR/<db>/<coll>.bson (mongodump layout) with n documents {_id: i, n, s}. */
static void sig_write_dump(const char *dir, const char *db, const char *coll, long n)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, db);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s.bson", dir, db, coll);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (long i = 0; i < n; i++) {
        bson_t d = BSON_INITIALIZER;
        BSON_APPEND_INT32(&d, "_id", (int32_t)i);
        BSON_APPEND_INT64(&d, "n", i);
        BSON_APPEND_UTF8(&d, "s", "some text to give the row a little weight");
        ck_assert_uint_eq(fwrite(bson_get_data(&d), 1, d.len, f), d.len);
        bson_destroy(&d);
    }
    ck_assert_int_eq(fclose(f), 0);
}

static int64_t sig_copied(const denv *e)
{
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT coalesce(sum(copied), 0) FROM oplog2pg.copy_progress WHERE service = '%s'",
             e->service);
    return denv_pg_int(sql);
}

/* Waits until the copy has committed more than `than` documents. */
static int64_t sig_wait_copied_more(denv *e, int64_t than, double timeout_s)
{
    double until = denv_now() + timeout_s;
    while (denv_now() < until) {
        int64_t n = sig_copied(e);
        if (n > than)
            return n;
        sig_expect_running(e, "during the initial copy");
        notifysock_pump();
        usleep(20 * 1000);
    }
    denv_show_log(e);
    ck_abort_msg("the copy did not get past %lld documents within %.0f s", (long long)than, timeout_s);
    return 0;
}

/* A collection large enough that the copy is still running when the signals come (one worker, small batches; the
 * test checks afterwards that the copy was indeed unfinished). SIGHUP: the change is logged and the copy goes on;
 * SIGTERM: the copy stops after its current batch, exit 0, no checkpoint yet; the next start resumes the copy (it
 * does not start over) and ends equal to the source, with what was written meanwhile. */
START_TEST(test_initial_copy)
{
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim --data (300 000 documents loaded at start, not inserted one by one)");
    char data[300];
    const char *tmp = getenv("TMPDIR");
    snprintf(data, sizeof data, "%s/sgcopy-data.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(data));
    const long big = 300000;
    sig_write_dump(data, "rep_sgcopy_a", "big", big);
    sig_write_dump(data, "rep_sgcopy_b", "small", 5000);
    const char *sim_args[] = {"--data", data, NULL};
    denv e;
    denv_start(&e, "sgcopy", sim_args, "[copy]\nworkers = 1\nbatch_docs = 1000\n[logging]\nprogress_interval = 10s\n");
    static notifysock ns;
    notifysock_open(&ns, e.dir);
    sig_daemon_start(&e, NULL, &ns, NULL);
    sig_expect_log(&e, "copying the included collections first", WAIT_S);
    int64_t copied = sig_wait_copied_more(&e, 0, WAIT_S);
    sig_expect_notify(&e, &ns, "STATUS=copying: ", WAIT_S);

    sig_reload(&e, e.ini, "progress_interval = 10s", "progress_interval = 20s", "progress_interval changed");
    /* The copy goes on after the reload. */
    copied = sig_wait_copied_more(&e, sig_copied(&e), WAIT_S);
    /* Written while the copy runs: replayed on top once it is done. */
    denv_insert_range(&e, "rep_sgcopy_b", "small", 100000, 100099);

    ck_assert_int_eq(sig_send_and_wait(&e, SIGTERM, 60), 0);
    ck_assert_msg(denv_file_contains(e.log, "stopping the initial copy once its current batches are committed"),
                  "the copy was not told to stop");
    ck_assert_msg(denv_file_contains(e.log, "initial copy stopped; its progress is committed"),
                  "the copy did not say it stopped");
    sig_expect_notify(&e, &ns, "STOPPING=1", 5);
    notifysock_drain(&ns);
    int ready_during_copy = notifysock_count(&ns, "READY=1");
    /* It was stopped in the middle of the copy: no checkpoint, and not everything copied. */
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), 0);
    int64_t stopped_at = sig_copied(&e);
    ck_assert_int_ge(stopped_at, copied);
    ck_assert_msg(stopped_at < big, "the copy had finished before SIGTERM (%lld documents): make it larger",
                  (long long)stopped_at);
    fprintf(stderr, "  copy stopped after %lld of %ld documents\n", (long long)stopped_at, big + 5000);

    double t0 = denv_now();
    sig_daemon_start(&e, NULL, NULL, NULL);
    sig_expect_log(&e, "resumes its copy", WAIT_S);
    sig_expect_caught_up(&e, 150, "the daemon did not finish the copy and catch up");
    fprintf(stderr, "  the rest of the copy took %.1f s\n", denv_now() - t0);
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM oplog2pg.copy_progress WHERE service = '%s' AND done", e.service);
    ck_assert_int_eq(denv_pg_int(sql), 2);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_sgcopy_a.big"), big);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_sgcopy_b.small"), 5100);
    denv_expect_match(&e);
    denv_stop(&e);
    notifysock_close(&ns);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", data);
    ck_assert_int_eq(system(cmd), 0);
    /* systemd's view (see test_reload_before_ready_announces_no_ready): no READY=1 before the copy is done. */
    ck_assert_msg(ready_during_copy == 0,
                  "READY=1 was sent %d time(s) during the initial copy (after the SIGHUP's RELOADING=1): systemd "
                  "would report the service started before the copy finished",
                  ready_during_copy);
}
END_TEST

/* Waits until a copy worker's PostgreSQL session waits for a lock the session `locker` holds. */
static void sig_expect_copy_blocked(denv *e, PGconn *locker, double timeout_s)
{
    char sql[300];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'oplog2pg-copy' AND wait_event_type = "
             "'Lock' AND %d = ANY (pg_blocking_pids(pid))",
             PQbackendPID(locker));
    double until = denv_now() + timeout_s;
    while (denv_now() < until) {
        if (denv_pg_int(sql) >= 1)
            return;
        sig_expect_running(e, "before the copy met the lock");
        notifysock_pump();
        usleep(20 * 1000);
    }
    denv_show_log(e);
    sig_show_activity();
    ck_abort_msg("no copy worker waited on the lock within %.0f s", timeout_s);
}

/* The copy's worker waits on a lock another session holds on its table. SIGTERM: the copy is told to stop after its
 * current batch, which PostgreSQL holds up; after the grace the worker cancels it (uncommitted) and the daemon exits
 * 0 while the lock is still held. Again, with two SIGTERMs: the second exits at once (exit 1). A third start
 * finishes the copy: equal to the source. */
START_TEST(test_initial_copy_lock_wait)
{
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim --data (200 000 documents loaded at start, not inserted one by one)");
    char data[300];
    const char *tmp = getenv("TMPDIR");
    snprintf(data, sizeof data, "%s/sgcpl-data.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(data));
    const long big = 200000;
    sig_write_dump(data, "rep_sgcpl_a", "big", big);
    const char *sim_args[] = {"--data", data, NULL};
    denv e;
    denv_start(&e, "sgcpl", sim_args, "[copy]\nworkers = 1\nbatch_docs = 1000\n");

    /* One signal: the batch PostgreSQL holds up gets STOP_GRACE_S, then it is cancelled (uncommitted) and the
     * daemon exits 0 while the lock is still held: a stop never hangs on someone else's lock. */
    sig_daemon_start(&e, NULL, NULL, NULL);
    sig_wait_copied_more(&e, 0, WAIT_S);
    PGconn *lk = sig_lock_table("rep_sgcpl_a.big");
    sig_expect_copy_blocked(&e, lk, WAIT_S);
    int64_t held = sig_copied(&e);
    ck_assert(proc_signal(&e.daemon, SIGTERM));
    sig_expect_log(&e, "stopping the initial copy once its current batches are committed", WAIT_S);
    sig_expect_log(&e, "copy: stopping: cancelling", WAIT_S);
    ck_assert_int_eq(sig_wait_exit(&e, WAIT_S, "SIGTERM with the lock still held"), 0);
    ck_assert_msg(denv_file_contains(e.log, "initial copy stopped; its progress is committed"),
                  "the copy did not say it stopped");
    int64_t first = sig_copied(&e);
    ck_assert_int_eq(first, held); /* the batch that waited was not committed */
    ck_assert_int_lt(first, big);
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), 0);
    sig_unlock(lk);

    /* Two signals: the second exits at once, while the batch still waits. */
    sig_daemon_start(&e, NULL, NULL, NULL);
    sig_expect_log(&e, "resumes its copy", WAIT_S);
    sig_wait_copied_more(&e, first, WAIT_S);
    lk = sig_lock_table("rep_sgcpl_a.big");
    sig_expect_copy_blocked(&e, lk, WAIT_S);
    ck_assert(proc_signal(&e.daemon, SIGTERM));
    sig_expect_log(&e, "stopping the initial copy once its current batches are committed", WAIT_S);
    ck_assert_int_eq(sig_send_and_wait(&e, SIGTERM, WAIT_S), 1);
    ck_assert_msg(denv_file_contains(e.log, "second signal, exiting at once"), "no message for the second signal");
    int64_t second = sig_copied(&e);
    ck_assert_int_lt(second, big);
    sig_unlock(lk);

    sig_daemon_start(&e, NULL, NULL, NULL);
    sig_expect_log(&e, "resumes its copy", WAIT_S);
    sig_expect_caught_up(&e, 150, "the daemon did not finish the copy and catch up");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_sgcpl_a.big"), big);
    denv_expect_match(&e);
    denv_stop(&e);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", data);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* 3. the reconnect backoff in the middle of a run */

/* The checkpoint of the service in the database `db`. */
static uint64_t sig_checkpoint_in(const denv *e, const char *dbextra)
{
    PGconn *pg = sig_pg(dbextra);
    uint64_t ts = oplogutil_checkpoint_ts(pg, e->service);
    PQfinish(pg);
    return ts;
}

static bool sig_wait_caught_up_in(denv *e, const char *dbextra, double timeout_s)
{
    double until = denv_now() + timeout_s;
    while (denv_now() < until) {
        uint64_t want = denv_newest_ts(e->uri), have = sig_checkpoint_in(e, dbextra);
        if (want != 0 && have == want)
            return true;
        sig_expect_running(e, "while catching up");
        notifysock_pump();
        usleep(50 * 1000);
    }
    return false;
}

static void sig_expect_match_in(denv *e, const char *dbextra, int64_t want_rows)
{
    PGconn *pg = sig_pg(dbextra);
    compare_options opts = {.db_prefix = e->prefix};
    compare_report rep;
    char err[512];
    bool ran = compare_all(e->uri, pg, &opts, &rep, err, sizeof err);
    if (ran && !rep.match) {
        compare_report_print(&rep, stderr, false);
        denv_show_log(e);
    }
    bool match = ran && rep.match;
    int64_t rows = rep.source_rows;
    compare_report_free(&rep);
    PQfinish(pg);
    ck_assert_msg(ran, "compare failed to run: %s", err);
    ck_assert_msg(match, "PostgreSQL (%s) differs from the source (see above)", dbextra);
    ck_assert_int_eq(rows, want_rows);
}

/* The daemon writes to a database of its own. That database stops taking connections and the daemon's session is
 * terminated: the session ends and the daemon backs off, retrying. SIGHUP there is logged and the retries go on;
 * SIGINT ends it with exit 0, with nothing committed past the last commit. Once the database takes connections
 * again, a new start applies what was written meanwhile. */
START_TEST(test_reconnect_backoff)
{
    const char *db = "sig_backoff_db", *dbextra = "dbname=sig_backoff_db";
    denv_pg_exec("DROP DATABASE IF EXISTS sig_backoff_db WITH (FORCE)");
    denv_pg_exec("CREATE DATABASE sig_backoff_db");
    denv e;
    denv_start(&e, "sgback", NULL, NULL);
    denv_set_conninfo(&e, dbextra);
    static notifysock ns;
    notifysock_open(&ns, e.dir);
    sig_daemon_start(&e, NULL, &ns, NULL);
    sig_expect_notify(&e, &ns, "READY=1", WAIT_S);
    denv_insert_range(&e, "rep_sgback_a", "c", 1, 200);
    ck_assert_msg(sig_wait_caught_up_in(&e, dbextra, WAIT_S), "the daemon did not catch up");
    uint64_t before = sig_checkpoint_in(&e, dbextra);

    char sql[400];
    snprintf(sql, sizeof sql, "ALTER DATABASE %s ALLOW_CONNECTIONS false", db);
    denv_pg_exec(sql);
    snprintf(sql, sizeof sql,
             "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '%s' AND "
             "application_name = 'oplog2pg'",
             db);
    ck_assert_int_eq(denv_pg_int(sql), 1);
    sig_expect_notify(&e, &ns, "STATUS=reconnecting to PostgreSQL", WAIT_S);
    sig_expect_log(&e, "not currently accepting connections", WAIT_S);
    denv_insert_range(&e, "rep_sgback_a", "c", 201, 400); /* written while PostgreSQL is away */

    sig_file_append(e.ini, "batch_rows = 5000\n");
    int reloads = sig_log_count(&e, "configuration reloaded from");
    ck_assert(proc_signal(&e.daemon, SIGHUP));
    sig_expect_log_more(&e, "configuration reloaded from", reloads, WAIT_S);
    ck_assert_msg(denv_file_contains(e.log, "batch_rows changed"), "the reload did not see the change");
    /* Still in the backoff, still retrying. */
    sig_expect_log_more(&e, "retrying in", sig_log_count(&e, "retrying in"), WAIT_S);

    ck_assert_int_eq(sig_send_and_wait(&e, SIGINT, WAIT_S), 0);
    ck_assert_msg(denv_file_contains(e.log, "Interrupt received: stopping"), "the stop was not logged");

    snprintf(sql, sizeof sql, "ALTER DATABASE %s ALLOW_CONNECTIONS true", db);
    denv_pg_exec(sql);
    ck_assert_uint_eq(sig_checkpoint_in(&e, dbextra), before);
    PGconn *pg = sig_pg(dbextra);
    ck_assert_int_eq(sig_pg_int(pg, "SELECT count(*) FROM rep_sgback_a.c"), 200);
    PQfinish(pg);

    sig_daemon_start(&e, NULL, NULL, NULL);
    ck_assert_msg(sig_wait_caught_up_in(&e, dbextra, 60), "the daemon did not catch up after the database came back");
    denv_insert_range(&e, "rep_sgback_a", "c", 401, 450);
    sig_increment(&e, "rep_sgback_a", "c", 1, 50);
    ck_assert_msg(sig_wait_caught_up_in(&e, dbextra, 60), "the daemon did not catch up");
    sig_expect_match_in(&e, dbextra, 450);
    pg = sig_pg(dbextra);
    ck_assert_int_eq(sig_pg_int(pg, "SELECT count(*) FROM rep_sgback_a.c WHERE (doc->>'n')::int = 1"), 50);
    PQfinish(pg);
    notifysock_close(&ns);
    denv_stop(&e);
    denv_pg_exec("DROP DATABASE IF EXISTS sig_backoff_db WITH (FORCE)");
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* 4. a normal session */

/* Idle and caught up: SIGHUP is logged and replication goes on; SIGTERM commits and exits 0, and the position it
 * logs is the committed checkpoint, the newest entry. */
START_TEST(test_session_idle)
{
    denv e;
    denv_start(&e, "sgidle", NULL, "batch_rows = 1000\n");
    sig_daemon_start(&e, NULL, NULL, NULL);
    sig_expect_caught_up(&e, WAIT_S, "the daemon did not catch up");
    denv_insert_range(&e, "rep_sgidle_a", "c", 1, 100);
    sig_expect_caught_up(&e, WAIT_S, "the daemon did not catch up");

    sig_reload(&e, e.ini, "batch_rows = 1000", "batch_rows = 10", "batch_rows changed");
    denv_insert_range(&e, "rep_sgidle_a", "c", 101, 200);
    sig_increment(&e, "rep_sgidle_a", "c", 1, 20);
    sig_expect_caught_up(&e, WAIT_S, "no replication after the reload");
    denv_expect_match(&e);

    uint64_t newest = denv_newest_ts(e.uri);
    ck_assert_int_eq(sig_send_and_wait(&e, SIGTERM, WAIT_S), 0);
    ck_assert_msg(denv_file_contains(e.log, "stopping the reader, then committing what was read"), "no stop message");
    ck_assert_uint_eq(sig_logged_stop_position(&e), newest);
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), newest);

    denv_insert_range(&e, "rep_sgidle_a", "c", 201, 250);
    sig_daemon_start(&e, NULL, NULL, NULL);
    sig_expect_caught_up(&e, WAIT_S, "the daemon did not catch up");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_sgidle_a.c WHERE (doc->>'n')::int = 1"), 20);
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* While it applies a backlog: SIGHUP is logged and the checkpoint keeps moving; SIGTERM stops the reader, commits
 * what was read and exits 0 before the end of the backlog; the position it logs is the committed checkpoint. A new
 * start applies the rest: equal to the source. */
START_TEST(test_session_applying)
{
    denv e;
    denv_start(&e, "sgbusy", NULL, "batch_rows = 20\n");
    sig_daemon_start(&e, NULL, NULL, NULL);
    sig_expect_caught_up(&e, WAIT_S, "the daemon did not catch up");
    ck_assert_int_eq(sig_send_and_wait(&e, SIGTERM, WAIT_S), 0);
    uint64_t start = denv_checkpoint_ts(e.service);

    /* The backlog: mixed writes over a few collections. */
    workload_config wc;
    workload_config_init(&wc);
    wc.seed = 7;
    wc.ops = 40000;
    wc.db_prefix = "rep_sgbusy_w";
    wc.n_databases = 2;
    wc.n_namespaces = 4;
    wc.w_ddl = 0;
    workload_stats st;
    char err[512];
    ck_assert_msg(workload_run(e.uri, &wc, &st, err, sizeof err), "workload: %s", err);
    uint64_t newest = denv_newest_ts(e.uri);

    sig_daemon_start(&e, NULL, NULL, NULL);
    /* Applying: the checkpoint has moved and the backlog is not done. */
    double until = denv_now() + WAIT_S;
    uint64_t at = 0;
    while ((at = denv_checkpoint_ts(e.service)) == start && denv_now() < until) {
        sig_expect_running(&e, "while applying");
        usleep(10 * 1000);
    }
    ck_assert_msg(at > start, "the daemon committed nothing of the backlog within %.0f s", WAIT_S);
    ck_assert_msg(at < newest, "the backlog was applied before the test could look: make it larger");

    sig_reload(&e, e.ini, "batch_rows = 20", "batch_rows = 30", "batch_rows changed");
    uint64_t after_reload = denv_checkpoint_ts(e.service);
    until = denv_now() + WAIT_S;
    while (denv_checkpoint_ts(e.service) == after_reload && denv_now() < until) {
        sig_expect_running(&e, "after SIGHUP while applying");
        usleep(10 * 1000);
    }
    uint64_t moving = denv_checkpoint_ts(e.service);
    ck_assert_msg(moving > after_reload, "the checkpoint stopped moving after SIGHUP");

    ck_assert_int_eq(sig_send_and_wait(&e, SIGTERM, WAIT_S), 0);
    ck_assert_msg(denv_file_contains(e.log, "stopping the reader, then committing what was read"), "no stop message");
    uint64_t committed = denv_checkpoint_ts(e.service);
    ck_assert_uint_eq(sig_logged_stop_position(&e), committed);
    ck_assert_uint_ge(committed, moving);
    ck_assert_msg(committed < newest, "the backlog was done before SIGTERM: the stop was not tested while applying");
    fprintf(stderr, "  stopped at %u:%u; the backlog ends at %u:%u\n", (unsigned)(committed >> 32), (unsigned)committed,
            (unsigned)(newest >> 32), (unsigned)newest);

    sig_file_replace(e.ini, "batch_rows = 30", "batch_rows = 10000"); /* the rest at full speed */
    sig_daemon_start(&e, NULL, NULL, NULL);
    sig_expect_caught_up(&e, 120, "the daemon did not apply the rest of the backlog");
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* 5. careful mode, held by a lock */

/* One entry holds an update PostgreSQL refuses (U+0000) on a.c and an update of b.c. The batched pass fails on the
 * first (the second is skipped by PostgreSQL), and the daemon goes back to the last commit to apply the entry one op
 * at a time, where the update of b.c waits on a lock another session holds. There: SIGHUP keeps it running (the
 * reload is done once the wait ends); SIGTERM waits STOP_GRACE_S, cancels, and exits 0 with nothing committed. With
 * the lock gone, a new start sets the refused op aside and applies the rest exactly once. */
START_TEST(test_careful_mode)
{
    denv e;
    denv_start(&e, "sgcare", NULL, "batch_rows = 1000\n");
    static notifysock ns;
    notifysock_open(&ns, e.dir);
    sig_daemon_start(&e, NULL, &ns, NULL);
    sig_expect_notify(&e, &ns, "READY=1", WAIT_S);
    denv_insert_range(&e, "rep_sgcare_a", "c", 1, 20);
    denv_insert_range(&e, "rep_sgcare_b", "c", 1, 20);
    sig_expect_caught_up(&e, WAIT_S, "the daemon did not catch up");
    uint64_t before = denv_checkpoint_ts(e.service);

    PGconn *lk = sig_lock_table("rep_sgcare_b.c");
    sig_transaction_nul_then_update(&e, "rep_sgcare_a", "rep_sgcare_b", 5, 7);
    denv_insert_range(&e, "rep_sgcare_a", "c", 21, 30); /* after the entry */
    sig_expect_log(&e, "finding the op PostgreSQL refused", WAIT_S);
    sig_expect_log(&e, "one at a time, setting aside what PostgreSQL refuses", WAIT_S);
    sig_expect_notify(&e, &ns, "blocked by pid", WAIT_S);

    int reloads = sig_log_count(&e, "configuration reloaded from");
    sig_file_replace(e.ini, "batch_rows = 1000", "batch_rows = 500");
    ck_assert(proc_signal(&e.daemon, SIGHUP));
    /* Still waiting, still alive: two more STATUS lines from the wait. */
    notifysock_mark(&ns);
    int waits = notifysock_count(&ns, "STATUS=waiting");
    for (int i = 0; i < 2; i++)
        sig_expect_notify(&e, &ns, "STATUS=waiting", WAIT_S);
    ck_assert_int_ge(notifysock_count(&ns, "STATUS=waiting"), waits + 2);
    sig_expect_running(&e, "after SIGHUP in careful mode");

    ck_assert(proc_signal(&e.daemon, SIGTERM));
    sig_expect_notify(&e, &ns, "(stopping once it answers", WAIT_S);
    sig_expect_log(&e, "stopping: cancelling", WAIT_S);
    ck_assert_int_eq(sig_wait_exit(&e, WAIT_S, "SIGTERM"), 0);
    ck_assert_int_gt(sig_log_count(&e, "configuration reloaded from"), reloads);
    ck_assert_msg(denv_file_contains(e.log, "batch_rows changed"), "the reload did not see the change");
    /* Nothing of the entry was committed: not the dead letter, not the checkpoint. */
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), before);
    ck_assert_int_eq(sig_dead_letters(&e), 0);
    sig_unlock(lk);

    sig_daemon_start(&e, NULL, &ns, NULL);
    sig_expect_caught_up(&e, 60, "the daemon did not get past the refused op");
    ck_assert_int_eq(sig_dead_letters(&e), 1);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_sgcare_b.c WHERE _id = '7' AND doc->>'n' = '1'"), 1);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_sgcare_b.c WHERE doc ? 'n'"), 1);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_sgcare_a.c"), 30);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_sgcare_a.c WHERE doc ? 'bad'"), 0);
    /* PostgreSQL lacks only the refused field: take it out of the source too, and compare. */
    sig_unset(&e, "rep_sgcare_a", "c", 5, "bad");
    sig_expect_caught_up(&e, WAIT_S, "the daemon did not catch up");
    denv_expect_match(&e);
    notifysock_close(&ns);
    denv_stop(&e);
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* a wait on a lock held by another session */

/* Waits until the daemon's PostgreSQL session waits for a lock the session `locker` holds. */
static void sig_expect_blocked(denv *e, PGconn *locker, double timeout_s)
{
    char sql[300];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'oplog2pg' AND wait_event_type = "
             "'Lock' AND %d = ANY (pg_blocking_pids(pid))",
             PQbackendPID(locker));
    double until = denv_now() + timeout_s;
    while (denv_now() < until) {
        if (denv_pg_int(sql) == 1)
            return;
        sig_expect_running(e, "before it met the lock");
        notifysock_pump();
        usleep(20 * 1000);
    }
    denv_show_log(e);
    sig_show_activity();
    ck_abort_msg("the daemon's session never waited on the lock within %.0f s", timeout_s);
}

/* Sets up a daemon blocked on a lock: caught up, then another session locks db.c and writes come for it (`rows`
 * inserts: 32 or more go by COPY, fewer are pipelined statements; then 30 updates). Returns the lock's connection;
 * *before is the checkpoint before the blocked writes. */
static PGconn *sig_blocked_daemon(denv *e, notifysock *ns, const char *db, int rows, uint64_t *before)
{
    sig_daemon_start(e, NULL, ns, NULL);
    sig_expect_notify(e, ns, "READY=1", WAIT_S);
    denv_insert_range(e, db, "c", 1, 100);
    sig_expect_caught_up(e, WAIT_S, "the daemon did not catch up");
    *before = denv_checkpoint_ts(e->service);
    char q[128];
    snprintf(q, sizeof q, "%s.c", db);
    PGconn *lk = sig_lock_table(q);
    denv_insert_range(e, db, "c", 101, 100 + rows);
    sig_increment(e, db, "c", 1, 30);
    sig_expect_blocked(e, lk, WAIT_S);
    /* What the daemon says meanwhile (the pipelined statements also quote PostgreSQL on who blocks them). */
    sig_expect_notify(e, ns, rows < 32 ? "blocked by pid" : "STATUS=waiting 2 s for PostgreSQL", WAIT_S);
    return lk;
}

/* SIGTERM while PostgreSQL keeps a statement waiting on another session's lock: the daemon waits STOP_GRACE_S,
 * cancels the statement, and exits 0 with nothing of the group committed. Once the lock is released, a new start
 * applies everything exactly once. A SIGHUP during the wait is taken too. */
START_TEST(test_lock_wait_stop_cancels)
{
    denv e;
    denv_start(&e, "sglock", NULL, "batch_rows = 1000\n");
    static notifysock ns;
    notifysock_open(&ns, e.dir);
    uint64_t before;
    PGconn *lk = sig_blocked_daemon(&e, &ns, "rep_sglock_a", 100, &before);

    sig_file_replace(e.ini, "batch_rows = 1000", "batch_rows = 999");
    notifysock_mark(&ns);
    ck_assert(proc_signal(&e.daemon, SIGHUP));
    sig_expect_notify(&e, &ns, "STATUS=waiting", WAIT_S);
    sig_expect_running(&e, "after SIGHUP during a wait on a lock");

    ck_assert(proc_signal(&e.daemon, SIGTERM));
    sig_expect_notify(&e, &ns, "(stopping once it answers, or cancelling it)", WAIT_S);
    sig_expect_log(&e, "stopping: cancelling", WAIT_S);
    sig_expect_notify(&e, &ns, "(stopping: cancelled)", WAIT_S);
    ck_assert_int_eq(sig_wait_exit(&e, WAIT_S, "SIGTERM and the cancel"), 0);
    ck_assert_msg(denv_file_contains(e.log, "configuration reloaded from"), "the SIGHUP was lost");
    ck_assert_msg(denv_file_contains(e.log, "batch_rows changed"), "the reload did not see the change");
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), before);
    ck_assert_int_eq(sig_pg_int(lk, "SELECT count(*) FROM rep_sglock_a.c"), 100);
    sig_unlock(lk);

    sig_daemon_start(&e, NULL, NULL, NULL);
    sig_expect_caught_up(&e, 60, "the daemon did not catch up after the lock was released");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_sglock_a.c"), 200);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_sglock_a.c WHERE (doc->>'n')::int = 1"), 30);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_sglock_a.c WHERE doc ? 'n'"), 30);
    denv_expect_match(&e);
    notifysock_close(&ns);
    denv_stop(&e);
}
END_TEST

/* A second SIGTERM during such a wait exits at once (exit 1, before the grace period would cancel); the last commit
 * stands and a new start, once the lock is released, applies everything exactly once. */
START_TEST(test_lock_wait_second_signal_exits_at_once)
{
    denv e;
    denv_start(&e, "sgtwice", NULL, NULL);
    static notifysock ns;
    notifysock_open(&ns, e.dir);
    uint64_t before;
    PGconn *lk = sig_blocked_daemon(&e, &ns, "rep_sgtwice_a", 10, &before);

    ck_assert(proc_signal(&e.daemon, SIGTERM));
    sig_expect_notify(&e, &ns, "(stopping once it answers, or cancelling it)", WAIT_S);
    ck_assert_int_eq(sig_send_and_wait(&e, SIGTERM, WAIT_S), 1);
    ck_assert_msg(denv_file_contains(e.log, "second signal, exiting at once"), "no message for the second signal");
    ck_assert_msg(!denv_file_contains(e.log, "stopping: cancelling"), "it waited for the grace period instead");
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), before);
    sig_unlock(lk);

    sig_daemon_start(&e, NULL, NULL, NULL);
    sig_expect_caught_up(&e, 60, "the daemon did not catch up after the lock was released");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_sgtwice_a.c"), 110);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_sgtwice_a.c WHERE (doc->>'n')::int = 1"), 30);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_sgtwice_a.c WHERE doc ? 'n'"), 30);
    denv_expect_match(&e);
    notifysock_close(&ns);
    denv_stop(&e);
}
END_TEST

Suite *signals_suite(void); /* called by the generated runner list */

Suite *signals_suite(void)
{
    /* One case per state (CK_RUN_CASE=careful runs one alone). */
    const struct {
        const char *name;
        const TTest *tests[5];
    } cases[] = {
        {"startup",
         {test_startup_backoff, test_reload_before_ready_announces_no_ready, test_startup_unanswered_connect,
          test_startup_fenced}},
        {"copy", {test_initial_copy, test_initial_copy_lock_wait}},
        {"backoff", {test_reconnect_backoff}},
        {"session", {test_session_idle, test_session_applying}},
        {"careful", {test_careful_mode}},
        {"lockwait", {test_lock_wait_stop_cancels, test_lock_wait_second_signal_exits_at_once}},
    };
    Suite *s = suite_create("signals");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, 180);
        for (size_t k = 0; k < 5 && cases[i].tests[k] != NULL; k++)
            tcase_add_test(tc, cases[i].tests[k]);
        suite_add_tcase(s, tc);
    }
    return s;
}

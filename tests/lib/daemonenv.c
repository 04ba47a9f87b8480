/*
 * daemonenv.c — see daemonenv.h.
 */
#include "daemonenv.h"

#include <check.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "compare.h"
#include "oplogutil.h"

const char *denv_pg_conninfo(void)
{
    const char *c = getenv("OPLOG2PG_TEST_PG");
    ck_assert_msg(c != NULL, "OPLOG2PG_TEST_PG is not set: run through scripts/with-pg.sh");
    return c;
}

bool denv_using_sim(void)
{
    return getenv("OPLOG2PG_TEST_SIM") != NULL || getenv("MONGO_URI") == NULL;
}

long denv_scaled(long full)
{
    return getenv("OPLOG2PG_TEST_SANITIZE") != NULL ? full / 4 : full;
}

void denv_set_include(denv *e, const char *include)
{
    FILE *f = fopen(e->ini, "r");
    ck_assert_ptr_nonnull(f);
    char buf[8192] = "", line[1024];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "include = ", 10) == 0)
            snprintf(line, sizeof line, "include = %s\n", include);
        ck_assert(strlen(buf) + strlen(line) < sizeof buf);
        strcat(buf, line);
    }
    fclose(f);
    f = fopen(e->ini, "w");
    ck_assert_ptr_nonnull(f);
    fputs(buf, f);
    fclose(f);
}

void denv_wait_sessions_gone(void)
{
    double until = denv_now() + 60;
    while (denv_pg_int("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'oplog2pg' "
                       "AND pid <> pg_backend_pid()") != 0) {
        ck_assert_msg(denv_now() < until, "the daemon's old PostgreSQL sessions were still there after 60 s");
        usleep(5 * 1000);
    }
}

double denv_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The newest oplog entry's ts (0 when the oplog is empty). */
uint64_t denv_newest_ts(const char *uri)
{
    bson_error_t err;
    uint64_t ts;
    mongoc_client_t *c = mongoc_client_new(uri);
    ck_assert_ptr_nonnull(c);
    bool ok = oplogutil_newest_ts(c, &ts, &err);
    mongoc_client_destroy(c);
    ck_assert_msg(ok, "reading the oplog: %s", err.message);
    return ts;
}

/* The service's committed checkpoint as ts (0 when none). */
uint64_t denv_checkpoint_ts(const char *service)
{
    PGconn *pg = PQconnectdb(denv_pg_conninfo());
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    uint64_t ts = oplogutil_checkpoint_ts(pg, service);
    PQfinish(pg);
    return ts;
}

uint64_t denv_hello_newest_ts(const char *uri)
{
    mongoc_client_t *c = mongoc_client_new(uri);
    ck_assert_ptr_nonnull(c);
    bson_t *cmd = BCON_NEW("hello", BCON_INT32(1)), reply;
    bson_error_t err;
    ck_assert_msg(mongoc_client_command_simple(c, "admin", cmd, NULL, &reply, &err), "%s", err.message);
    bson_iter_t it, ts;
    uint32_t secs = 0, inc = 0;
    ck_assert(bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "lastWrite.opTime.ts", &ts));
    bson_iter_timestamp(&ts, &secs, &inc);
    bson_destroy(&reply);
    bson_destroy(cmd);
    mongoc_client_destroy(c);
    return (uint64_t)secs << 32 | inc;
}

void denv_wait_hello_caught_up(denv *e, double timeout_s)
{
    uint64_t want = denv_hello_newest_ts(e->uri);
    double until = denv_now() + timeout_s;
    while (denv_now() < until) {
        if (denv_checkpoint_ts(e->service) >= want)
            return;
        if (e->daemon.pid != 0 && proc_wait(&e->daemon, 0.0)) {
            denv_show_log(e);
            ck_abort_msg("the daemon exited with %d while catching up", proc_exit_code(&e->daemon));
        }
        usleep(50 * 1000);
    }
    denv_show_log(e);
    ck_abort_msg("the daemon did not catch up within %.0f s", timeout_s);
}

void denv_show_log(const denv *e)
{
    FILE *f = fopen(e->log, "r");
    if (f == NULL)
        return;
    char line[1024];
    fprintf(stderr, "---- %s (last lines)\n", e->log);
    long lines = 0;
    while (fgets(line, sizeof line, f))
        lines++;
    rewind(f);
    for (long i = 0; fgets(line, sizeof line, f); i++)
        if (i >= lines - 30)
            fputs(line, stderr);
    fclose(f);
}

void denv_start(denv *e, const char *name, const char *const *sim_args, const char *extra_ini)
{
    memset(e, 0, sizeof *e);
    char err[512];
    const char *tmp = getenv("TMPDIR"); /* the harness points it at a folder it removes, even after a failure */
    snprintf(e->dir, sizeof e->dir, "%s/oplog2pg-rep-%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
    ck_assert_ptr_nonnull(mkdtemp(e->dir));
    snprintf(e->service, sizeof e->service, "rep_%s", name);
    snprintf(e->prefix, sizeof e->prefix, "rep_%s_", name);
    snprintf(e->base_log, sizeof e->base_log, "%s/oplog2pg.log", e->dir);
    /* A new environment is a new service: what an earlier run of the same test left in PostgreSQL (its checkpoint, copy
     * state, catalog rows and schemas; tests/integration/run.sh runs chosen suites twice on one cluster) goes. */
    char sql[2048];
    snprintf(sql, sizeof sql,
             "DO $$ DECLARE s text; BEGIN "
             "IF to_regclass('oplog2pg.checkpoint') IS NOT NULL THEN "
             "FOR s IN SELECT nspname FROM pg_namespace WHERE nspname LIKE 'rep\\_%s\\_%%' LOOP "
             "EXECUTE format('DROP SCHEMA %%I CASCADE', s); END LOOP; "
             "DELETE FROM oplog2pg.tables WHERE service = '%s'; DELETE FROM oplog2pg.schemas WHERE service = '%s'; "
             "DELETE FROM oplog2pg.dead_letter WHERE service = '%s'; DELETE FROM oplog2pg.copy_state WHERE service = "
             "'%s'; DELETE FROM oplog2pg.checkpoint WHERE service = '%s'; END IF; "
             "IF to_regclass('oplog2pg.timeseries') IS NOT NULL THEN "
             "DELETE FROM oplog2pg.timeseries WHERE schema_name LIKE 'rep\\_%s\\_%%'; "
             "DELETE FROM oplog2pg.timeseries_bucket WHERE schema_name LIKE 'rep\\_%s\\_%%'; END IF; END $$",
             name, e->service, e->service, e->service, e->service, e->service, name, name);
    denv_pg_exec(sql);
    mongoc_init();
    if (denv_using_sim()) {
        char simlog[256];
        snprintf(simlog, sizeof simlog, "%s/mongosim.log", e->dir);
        ck_assert_msg(proc_start_mongosim(sim_args, simlog, &e->sim, err, sizeof err), "%s", err);
        e->own_sim = true;
        snprintf(e->uri, sizeof e->uri, "mongodb://127.0.0.1:%d/?replicaSet=rs0", e->sim.port);
    } else {
        /* A real replica set takes no mongosim arguments: a test that needs them must skip first (skip.h). */
        ck_assert_msg(sim_args == NULL, "%s passes mongosim arguments (%s...) but MONGO_URI names a real replica set",
                      name, sim_args ? sim_args[0] : "");
        snprintf(e->uri, sizeof e->uri, "%s", getenv("MONGO_URI"));
    }
    /* One entry outside the replicated databases, so the daemon has a newest entry to start from. */
    mongoc_client_t *c = mongoc_client_new(e->uri);
    mongoc_collection_t *coll = mongoc_client_get_collection(c, "rep_seed", name);
    bson_t *doc = BCON_NEW("started", BCON_BOOL(true));
    bson_error_t berr;
    ck_assert_msg(mongoc_collection_insert_one(coll, doc, NULL, NULL, &berr), "seed insert: %s", berr.message);
    bson_destroy(doc);
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(c);

    snprintf(e->ini, sizeof e->ini, "%s/oplog2pg.ini", e->dir);
    FILE *f = fopen(e->ini, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "[mongodb]\nuri = %s\n[postgres]\nconninfo = %s\n[replication]\nservice = %s\ninclude = %s*.*\n%s",
            e->uri, denv_pg_conninfo(), e->service, e->prefix, extra_ini ? extra_ini : "");
    denv_write_source(f);
    fclose(f);
}

void denv_write_source(FILE *f)
{
    const char *source = getenv("OPLOG2PG_TEST_SOURCE");
    const char *updates = getenv("OPLOG2PG_TEST_STREAM_UPDATES");
    if ((source == NULL || source[0] == '\0') && (updates == NULL || updates[0] == '\0'))
        return;
    fprintf(f, "\n[mongodb]\n");
    if (source != NULL && source[0] != '\0')
        fprintf(f, "source = %s\n", source);
    if (updates != NULL && updates[0] != '\0')
        fprintf(f, "change_stream_updates = %s\n", updates);
}

bool denv_stream_descriptions(void)
{
    const char *src = getenv("OPLOG2PG_TEST_SOURCE"), *upd = getenv("OPLOG2PG_TEST_STREAM_UPDATES");
    return src != NULL && strcmp(src, "change_stream") == 0 && upd != NULL && strcmp(upd, "description") == 0;
}

void denv_daemon_start_env(denv *e, const char *const *env_extra)
{
    denv_daemon_start_args(e, NULL, env_extra);
}

void denv_daemon_start_args(denv *e, const char *const *args, const char *const *env_extra)
{
    char err[512];
    char bin[256];
    snprintf(bin, sizeof bin, "%s/oplog2pg", proc_build_dir());
    const char *argv[16] = {bin, "-c", e->ini, "run"};
    size_t n = 4;
    for (size_t i = 0; args != NULL && args[i] != NULL && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    /* One log per start (denv_show_log prints the current one). */
    snprintf(e->log, sizeof e->log, "%s.%d", e->base_log, e->starts++);
    ck_assert_msg(proc_start(argv, env_extra, e->log, &e->daemon, err, sizeof err), "%s", err);
}

void denv_daemon_start(denv *e)
{
    denv_daemon_start_env(e, NULL);
}

void denv_set_conninfo(denv *e, const char *extra)
{
    char text[8192] = "", line[1024];
    FILE *f = fopen(e->ini, "r");
    ck_assert_ptr_nonnull(f);
    size_t off = 0;
    while (fgets(line, sizeof line, f)) {
        int n = strncmp(line, "conninfo = ", 11) == 0
                    ? snprintf(text + off, sizeof text - off, "conninfo = %s %s\n", denv_pg_conninfo(), extra)
                    : snprintf(text + off, sizeof text - off, "%s", line);
        ck_assert(n > 0 && (size_t)n < sizeof text - off);
        off += (size_t)n;
    }
    fclose(f);
    f = fopen(e->ini, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

bool denv_wait_log(denv *e, const char *needle, double timeout_s)
{
    double until = denv_now() + timeout_s;
    while (denv_now() < until) {
        if (denv_file_contains(e->log, needle))
            return true;
        usleep(20 * 1000);
    }
    return false;
}

int64_t denv_pg_int(const char *sql)
{
    PGconn *pg = PQconnectdb(denv_pg_conninfo());
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    PGresult *r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1, "%s: %s", sql, PQerrorMessage(pg));
    int64_t v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    PQfinish(pg);
    return v;
}

void denv_pg_text(const char *sql, char *out, size_t outlen)
{
    PGconn *pg = PQconnectdb(denv_pg_conninfo());
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    PGresult *r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1, "%s: %s", sql, PQerrorMessage(pg));
    snprintf(out, outlen, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    PQfinish(pg);
}

static void quiet_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

void denv_pg_exec(const char *sql)
{
    PGconn *pg = PQconnectdb(denv_pg_conninfo());
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    PQsetNoticeProcessor(pg, quiet_notice, NULL); /* DROP ... IF EXISTS, CASCADE chatter */
    PGresult *r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql,
                  PQerrorMessage(pg));
    PQclear(r);
    PQfinish(pg);
}

/* Wait until the checkpoint reaches the newest oplog entry; false on timeout. */
bool denv_wait_caught_up(denv *e, double timeout_s)
{
    double until = denv_now() + timeout_s;
    while (denv_now() < until) {
        uint64_t want = denv_newest_ts(e->uri), have = denv_checkpoint_ts(e->service);
        if (want != 0 && have == want)
            return true;
        if (e->daemon.pid != 0 && proc_wait(&e->daemon, 0.0)) {
            denv_show_log(e);
            ck_abort_msg("the daemon exited with %d while catching up", proc_exit_code(&e->daemon));
        }
        usleep(50 * 1000);
    }
    return false;
}

void denv_expect_match_prefix(denv *e, const char *prefix)
{
    PGconn *pg = PQconnectdb(denv_pg_conninfo());
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    compare_options opts = {.db_prefix = prefix};
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
    ck_assert_msg(match, "PostgreSQL differs from the source for databases %s* (see above)", prefix);
    ck_assert_msg(rows > 0, "the workload left no rows to compare in databases %s*", prefix);
}

void denv_expect_match(denv *e)
{
    denv_expect_match_prefix(e, e->prefix);
}

void denv_stop(denv *e)
{
    if (e->daemon.pid != 0) {
        ck_assert_msg(proc_stop(&e->daemon, 30), "the daemon did not stop on SIGTERM");
        if (proc_exit_code(&e->daemon) != 0)
            denv_show_log(e);
        ck_assert_int_eq(proc_exit_code(&e->daemon), 0);
    }
    if (e->own_sim)
        proc_stop(&e->sim, 10);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", e->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", e->dir);
}

int denv_run_command(denv *e, const char *const *args, const char *out_path)
{
    char err[512], bin[256];
    snprintf(bin, sizeof bin, "%s/oplog2pg", proc_build_dir());
    const char *argv[8] = {bin};
    size_t n = 1;
    for (; args[n - 1] != NULL && n < 7; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    proc_handle p;
    ck_assert_msg(proc_start(argv, NULL, out_path, &p, err, sizeof err), "%s", err);
    ck_assert_msg(proc_wait(&p, 300), "%s did not finish", args[0]);
    (void)e;
    return proc_exit_code(&p);
}

bool denv_file_contains(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    char line[2048];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

/* ---- writes to the source ---- */

void denv_insert_range(const denv *e, const char *db, const char *coll, int from, int to)
{
    mongoc_client_t *c = mongoc_client_new(e->uri);
    ck_assert_ptr_nonnull(c);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db, coll);
    bson_error_t err;
    for (int i = from; i <= to; i += 500) {
        bson_t *docs[500];
        size_t n = 0;
        for (int k = i; k <= to && n < 500; k++)
            docs[n++] = BCON_NEW("_id", BCON_INT32(k), "v", BCON_INT32(k * 10), "s", BCON_UTF8("text"));
        bool ok = mongoc_collection_insert_many(col, (const bson_t **)docs, n, NULL, NULL, &err);
        for (size_t k = 0; k < n; k++)
            bson_destroy(docs[k]);
        ck_assert_msg(ok, "inserting into %s.%s: %s", db, coll, err.message);
    }
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
}

static void run_command(const denv *e, const char *db, const bson_t *cmd, const char *what)
{
    mongoc_client_t *c = mongoc_client_new(e->uri);
    ck_assert_ptr_nonnull(c);
    bson_error_t err;
    bool ok = mongoc_client_command_simple(c, db, cmd, NULL, NULL, &err);
    mongoc_client_destroy(c);
    ck_assert_msg(ok, "%s: %s", what, err.message);
}

void denv_drop_collection(const denv *e, const char *db, const char *coll)
{
    bson_t *cmd = BCON_NEW("drop", BCON_UTF8(coll));
    run_command(e, db, cmd, "drop");
    bson_destroy(cmd);
}

void denv_drop_database(const denv *e, const char *db)
{
    bson_t *cmd = BCON_NEW("dropDatabase", BCON_INT32(1));
    run_command(e, db, cmd, "dropDatabase");
    bson_destroy(cmd);
}

void denv_rename(const denv *e, const char *db, const char *coll, const char *to_db, const char *to_coll,
                 bool drop_target)
{
    char from[400], to[400];
    snprintf(from, sizeof from, "%s.%s", db, coll);
    snprintf(to, sizeof to, "%s.%s", to_db, to_coll);
    bson_t *cmd =
        BCON_NEW("renameCollection", BCON_UTF8(from), "to", BCON_UTF8(to), "dropTarget", BCON_BOOL(drop_target));
    run_command(e, "admin", cmd, "renameCollection");
    bson_destroy(cmd);
}

int denv_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

int denv_http_get(const char *url, bool headers, char *out, size_t outlen)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "curl -s -S --max-time 10 %s '%s' 2>&1", headers ? "-i" : "", url);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(out, 1, outlen - 1, p);
    out[n] = '\0';
    int rc = pclose(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

void denv_oplog_edges(const char *uri, uint32_t *oldest, uint32_t *newest)
{
    mongoc_client_t *c = mongoc_client_new(uri);
    mongoc_collection_t *oplog = mongoc_client_get_collection(c, "local", "oplog.rs");
    for (int natural = 1; natural >= -1; natural -= 2) {
        bson_t *opts = BCON_NEW("sort", "{", "$natural", BCON_INT32(natural), "}", "limit", BCON_INT64(1));
        bson_t *filter = bson_new();
        mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, filter, opts, NULL);
        const bson_t *doc;
        bson_iter_t it;
        uint32_t secs = 0, inc = 0;
        ck_assert_msg(mongoc_cursor_next(cur, &doc), "the oplog is empty");
        ck_assert(bson_iter_init_find(&it, doc, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it));
        bson_iter_timestamp(&it, &secs, &inc);
        *(natural == 1 ? oldest : newest) = secs;
        mongoc_cursor_destroy(cur);
        bson_destroy(filter);
        bson_destroy(opts);
    }
    mongoc_collection_destroy(oplog);
    mongoc_client_destroy(c);
}

double denv_metric(const char *text, const char *series)
{
    size_t len = strlen(series);
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, series, len) == 0 && line[len] == ' ')
            return strtod(line + len + 1, NULL);
    }
    return -1;
}

void denv_command(const denv *e, const char *db, bson_t *cmd)
{
    mongoc_client_t *c = mongoc_client_new(e->uri);
    ck_assert_ptr_nonnull(c);
    bson_error_t err;
    bson_t reply;
    bool ok = mongoc_client_command_simple(c, db, cmd, NULL, &reply, &err);
    char *json = bson_as_relaxed_extended_json(cmd, NULL);
    ck_assert_msg(ok, "%s: %s", json, err.message);
    bson_free(json);
    bson_destroy(&reply);
    bson_destroy(cmd);
    mongoc_client_destroy(c);
}

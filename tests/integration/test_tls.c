/*
 * test_tls.c — both connections over TLS, with certificates verified both ways: PostgreSQL with ssl = on and
 * clientcert=verify-full, mongosim with --tls-cert/--tls-ca and MONGODB-X509 authentication. The daemon replicates
 * with sslmode=verify-full and tls=true (each with a client certificate), and `check` refuses a wrong CA and a wrong
 * host name on either side with exit 3 and a line that names the side and says why.
 *
 * The throwaway CA, the certificates and the TLS-only PostgreSQL cluster come from tests/integration/tls-env.sh,
 * started once for the test case (an unchecked fixture: it runs in the runner's process, so the cluster is stopped
 * even when a test fails). The tests reach that cluster themselves through its Unix socket (trusted, no TLS):
 * $OPLOG2PG_TEST_PG points there while the case runs, so the daemonenv helpers (caught up, compare) read it. The
 * daemon reaches it over TCP only, where pg_hba.conf takes TLS connections with a client certificate and nothing else.
 * A wrong host name is "elsewhere.invalid" for PostgreSQL (libpq's hostaddr=127.0.0.1 connects, host= is what the
 * certificate is checked against) and, for MongoDB, a mongosim serving a certificate issued for elsewhere.invalid
 * while the URI says localhost.
 */
#include <check.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/daemonenv.h"
#include "../lib/skip.h"

static char g_dir[256]; /* tls-env.sh's folder: certs/ and pg/ */
static int g_pg_port;   /* the TLS cluster's TCP port, 0 when it did not start */
static char g_setup_err[512];
static char *g_saved_pg; /* $OPLOG2PG_TEST_PG before the case */

static void tls_setup(void)
{
    g_pg_port = 0;
    g_setup_err[0] = '\0';
    if (!denv_using_sim())
        return; /* each test skips */
    /* Not under $TMPDIR: the harness makes that folder private, and the cluster may run as `nobody` (as root). */
    snprintf(g_dir, sizeof g_dir, "/tmp/oplog2pg-tls.XXXXXX");
    if (mkdtemp(g_dir) == NULL || chmod(g_dir, 0755) != 0) {
        snprintf(g_setup_err, sizeof g_setup_err, "cannot make a folder under /tmp");
        return;
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "tests/integration/tls-env.sh start '%s' 2>'%s/tls-env.log'", g_dir, g_dir);
    FILE *p = popen(cmd, "r");
    if (p == NULL || fscanf(p, "%d", &g_pg_port) != 1)
        g_pg_port = 0;
    int rc = p ? pclose(p) : -1;
    if (rc != 0 || g_pg_port <= 0) {
        g_pg_port = 0;
        snprintf(cmd, sizeof cmd, "cat '%s/tls-env.log' >&2", g_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "tls: no log of tls-env.sh\n");
        snprintf(g_setup_err, sizeof g_setup_err, "tests/integration/tls-env.sh failed (see %s/tls-env.log)", g_dir);
        return;
    }
    const char *old = getenv("OPLOG2PG_TEST_PG");
    g_saved_pg = old ? strdup(old) : NULL;
    char conninfo[512];
    snprintf(conninfo, sizeof conninfo, "host=%s/pg port=%d user=postgres dbname=postgres", g_dir, g_pg_port);
    setenv("OPLOG2PG_TEST_PG", conninfo, 1);
}

static void tls_teardown(void)
{
    if (g_dir[0] == '\0')
        return;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "tests/integration/tls-env.sh stop '%s'; rm -rf '%s'", g_dir, g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "tls: could not stop or remove %s\n", g_dir);
    if (g_saved_pg != NULL) {
        setenv("OPLOG2PG_TEST_PG", g_saved_pg, 1);
        free(g_saved_pg);
        g_saved_pg = NULL;
    }
    g_dir[0] = '\0';
}

/* False (the test skips) against a real replica set: these tests need mongosim's TLS. */
static bool env_ready(void)
{
    if (!denv_using_sim())
        return false;
    ck_assert_msg(g_pg_port > 0, "the TLS environment did not start: %s", g_setup_err);
    return true;
}

static void cert(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/certs/%s", g_dir, name);
}

/* A MongoDB URI of mongosim on port: TLS verified with ca (a file in certs/), the client certificate, and
 * MONGODB-X509 when x509. */
static void mongo_uri(char *out, size_t len, int port, const char *ca, bool x509)
{
    char ca_path[400], key_path[400];
    cert(ca_path, sizeof ca_path, ca);
    cert(key_path, sizeof key_path, "client-bundle.pem");
    snprintf(out, len,
             "mongodb://localhost:%d/?replicaSet=rs0&tls=true&tlsCAFile=%s&tlsCertificateKeyFile=%s"
             "&serverSelectionTimeoutMS=5000%s",
             port, ca_path, key_path, x509 ? "&authMechanism=MONGODB-X509" : "");
}

/* The daemon's conninfo: TLS verified with ca, host as given (with hostaddr=127.0.0.1 when it is not localhost). */
static void pg_conninfo(char *out, size_t len, const char *host, const char *ca)
{
    char ca_path[400], crt[400], key[400];
    cert(ca_path, sizeof ca_path, ca);
    cert(crt, sizeof crt, "client.pem");
    cert(key, sizeof key, "client.key");
    snprintf(out, len,
             "host=%s%s port=%d user=postgres dbname=postgres connect_timeout=10 sslmode=verify-full "
             "sslrootcert=%s sslcert=%s sslkey=%s",
             host, strcmp(host, "localhost") == 0 ? "" : " hostaddr=127.0.0.1", g_pg_port, ca_path, crt, key);
}

/* Writes text as a value over continuation lines, a new line before each `sep` (the URI's '&', the conninfo's
 * spaces): certificate paths make lines longer than the 199 characters a configuration line may hold. */
static void put_value(FILE *f, const char *key, const char *text, char sep)
{
    fprintf(f, "%s = ", key);
    for (const char *p = text; *p; p++) {
        if (*p == sep && p != text)
            fprintf(f, "\n    ");
        if (*p != ' ' || sep != ' ')
            fputc(*p, f);
    }
    fputc('\n', f);
}

static void write_ini(const denv *e, const char *uri, const char *conninfo)
{
    FILE *f = fopen(e->ini, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "[mongodb]\n");
    put_value(f, "uri", uri, '&');
    fprintf(f, "[postgres]\n");
    put_value(f, "conninfo", conninfo, ' ');
    fprintf(f, "[replication]\nservice = %s\ninclude = %s*.*\n", e->service, e->prefix);
    denv_write_source(f);
    fclose(f);
}

/* The environment `name`: a mongosim serving server_bundle (and requiring client certificates of the CA), e->uri
 * trusting the right CA with X.509 authentication, and a configuration naming uri and conninfo. */
static void env_start(denv *e, const char *name, const char *server_bundle, const char *daemon_uri,
                      const char *conninfo)
{
    memset(e, 0, sizeof *e);
    char err[512], tls_cert[400], tls_ca[400], simlog[300];
    const char *tmp = getenv("TMPDIR");
    snprintf(e->dir, sizeof e->dir, "%s/oplog2pg-rep-%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
    ck_assert_ptr_nonnull(mkdtemp(e->dir));
    snprintf(e->service, sizeof e->service, "rep_%s", name);
    snprintf(e->prefix, sizeof e->prefix, "rep_%s_", name);
    snprintf(e->base_log, sizeof e->base_log, "%s/oplog2pg.log", e->dir);
    cert(tls_cert, sizeof tls_cert, server_bundle);
    cert(tls_ca, sizeof tls_ca, "ca.pem");
    snprintf(simlog, sizeof simlog, "%s/mongosim.log", e->dir);
    const char *args[] = {"--tls-cert",       tls_cert,    "--tls-ca",  tls_ca,
                          "--advertise-host", "localhost", "--verbose", NULL};
    mongoc_init();
    ck_assert_msg(proc_start_mongosim(args, simlog, &e->sim, err, sizeof err), "%s", err);
    e->own_sim = true;
    mongo_uri(e->uri, sizeof e->uri, e->sim.port, "ca.pem", true);

    snprintf(e->ini, sizeof e->ini, "%s/oplog2pg.ini", e->dir);
    write_ini(e, daemon_uri ? daemon_uri : e->uri, conninfo);
}

/* Runs `oplog2pg -c INI check`; its output into out (NUL-terminated). Returns the exit code. */
static int run_check(denv *e, char *out, size_t len)
{
    char path[300];
    snprintf(path, sizeof path, "%s/check.out", e->dir);
    const char *args[] = {"-c", e->ini, "check", NULL};
    int rc = denv_run_command(e, args, path);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    fclose(f);
    return rc;
}

/* The line of text that starts with prefix and contains needle, or NULL. */
static const char *line_with(const char *text, const char *prefix, const char *needle)
{
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        const char *end = strchr(l, '\n');
        size_t n = end ? (size_t)(end - l) : strlen(l);
        if (strncmp(l, prefix, strlen(prefix)) != 0)
            continue;
        char line[2048];
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), l);
        if (strstr(line, needle) != NULL)
            return l;
    }
    return NULL;
}

/* A line of the file holds both a and b. */
static bool file_line_with(const char *path, const char *a, const char *b)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, a) != NULL && strstr(line, b) != NULL;
    fclose(f);
    return found;
}

/* check exits 3: a line of `side` says `why`, and the other side passed (its ok line). Then `run` exits 3 too, its
 * log naming the side (run_side: "PostgreSQL", "MongoDB") on the line that says why. */
static void expect_refused(denv *e, const char *side, const char *why, const char *other_ok, const char *run_side)
{
    char out[16384];
    int rc = run_check(e, out, sizeof out);
    if (rc != 3 || line_with(out, side, why) == NULL || line_with(out, other_ok, "") == NULL)
        fprintf(stderr, "---- oplog2pg check (exit %d):\n%s----\n", rc, out);
    ck_assert_msg(rc == 3, "check exited %d, not 3", rc);
    ck_assert_msg(line_with(out, side, why) != NULL, "no line starting \"%s\" says \"%s\"", side, why);
    ck_assert_msg(line_with(out, other_ok, "") != NULL, "the other side was not reached (\"%s\")", other_ok);
    ck_assert_msg(strstr(out, "check failed") != NULL, "check did not say it failed");

    denv_daemon_start(e);
    bool ended = proc_wait(&e->daemon, 40);
    if (!ended || proc_exit_code(&e->daemon) != 3 || !file_line_with(e->log, run_side, why))
        denv_show_log(e);
    ck_assert_msg(ended, "run did not stop on a refused TLS connection");
    ck_assert_msg(proc_exit_code(&e->daemon) == 3, "run exited %d, not 3", proc_exit_code(&e->daemon));
    ck_assert_msg(file_line_with(e->log, run_side, why), "run's log has no line naming %s that says \"%s\"", run_side,
                  why);
    e->daemon.pid = 0; /* reaped */
}

/* ---- the good path ---- */

START_TEST(test_tls_replicates)
{
    if (!env_ready())
        SKIP_TEST("needs mongosim (MONGO_URI names a real replica set)");
    char conninfo[1600];
    pg_conninfo(conninfo, sizeof conninfo, "localhost", "ca.pem");
    denv e;
    env_start(&e, "tls_ok", "server-bundle.pem", NULL, conninfo);
    char out[16384];
    int rc = run_check(&e, out, sizeof out);
    if (rc != 0)
        fprintf(stderr, "---- oplog2pg check (exit %d):\n%s----\n", rc, out);
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_nonnull(line_with(out, "postgres: ok", ""));

    denv_daemon_start(&e);
    long n = denv_scaled(400);
    denv_insert_range(&e, "rep_tls_ok_a", "c1", 1, (int)n);
    denv_insert_range(&e, "rep_tls_ok_b", "c2", 1, (int)n / 4);
    ck_assert_msg(denv_wait_caught_up(&e, 45), "the daemon did not catch up over TLS");
    denv_expect_match(&e);
    /* The daemon's sessions came over TLS with the client certificate (pg_hba.conf admits nothing else on TCP). */
    ck_assert_int_gt(denv_pg_int("SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) "
                                 "WHERE s.ssl AND s.client_dn = '/O=oplog2pg test/CN=postgres' "
                                 "AND a.datname = 'postgres' AND a.client_addr IS NOT NULL"),
                     0);
    /* ... and its MongoDB connections authenticated with the certificate's subject. */
    char simlog[300];
    snprintf(simlog, sizeof simlog, "%s/mongosim.log", e.dir);
    ck_assert_msg(!denv_file_contains(simlog, "requires authentication"), "a connection skipped authentication");
    denv_stop(&e);
}
END_TEST

/* mongosim's side: no client certificate, no authentication, another user: each refused. */
START_TEST(test_mongosim_x509)
{
    if (!env_ready())
        SKIP_TEST("needs mongosim (MONGO_URI names a real replica set)");
    char conninfo[1600];
    pg_conninfo(conninfo, sizeof conninfo, "localhost", "ca.pem");
    denv e;
    env_start(&e, "tls_sim", "server-bundle.pem", NULL, conninfo);
    bson_error_t err;
    bson_t *doc = BCON_NEW("_id", BCON_INT32(1));
    bson_t *ping = BCON_NEW("ping", BCON_INT32(1));

    /* Authenticated: writes. */
    mongoc_client_t *c = mongoc_client_new(e.uri);
    ck_assert_ptr_nonnull(c);
    mongoc_collection_t *col = mongoc_client_get_collection(c, "rep_tls_sim_a", "c");
    ck_assert_msg(mongoc_collection_insert_one(col, doc, NULL, NULL, &err), "insert: %s", err.message);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);

    /* The certificate, but no authentication: the server's 13 Unauthorized. */
    char uri[1024];
    mongo_uri(uri, sizeof uri, e.sim.port, "ca.pem", false);
    c = mongoc_client_new(uri);
    col = mongoc_client_get_collection(c, "rep_tls_sim_a", "c");
    ck_assert(!mongoc_collection_insert_one(col, doc, NULL, NULL, &err));
    ck_assert_msg(err.code == 13 && strstr(err.message, "command insert requires authentication") != NULL,
                  "unauthenticated insert: %u %s", err.code, err.message);
    /* The `authenticate` command itself (a driver runs it when speculative authentication in hello did not succeed):
     * on another database refused, on $external the certificate's subject; then the same connection writes. */
    bson_t reply;
    bson_t *auth = BCON_NEW("authenticate", BCON_INT32(1), "mechanism", "MONGODB-X509");
    ck_assert(!mongoc_client_command_simple(c, "admin", auth, NULL, &reply, &err));
    ck_assert_msg(strstr(err.message, "$external") != NULL, "authenticate on admin: %s", err.message);
    bson_destroy(&reply);
    ck_assert_msg(mongoc_client_command_simple(c, "$external", auth, NULL, &reply, &err), "authenticate: %s",
                  err.message);
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, &reply, "user") && BSON_ITER_HOLDS_UTF8(&it));
    ck_assert_str_eq(bson_iter_utf8(&it, NULL), "CN=postgres,O=oplog2pg test");
    ck_assert(bson_iter_init_find(&it, &reply, "dbname") && BSON_ITER_HOLDS_UTF8(&it));
    ck_assert_str_eq(bson_iter_utf8(&it, NULL), "$external");
    bson_destroy(&reply);
    bson_destroy(auth);
    bson_t *doc2 = BCON_NEW("_id", BCON_INT32(2));
    ck_assert_msg(mongoc_collection_insert_one(col, doc2, NULL, NULL, &err), "insert after authenticate: %s",
                  err.message);
    bson_destroy(doc2);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);

    /* Another user than the certificate's subject: authentication fails. */
    char certs[400];
    cert(certs, sizeof certs, "");
    snprintf(uri, sizeof uri,
             "mongodb://CN%%3Dsomeone@localhost:%d/?replicaSet=rs0&tls=true&tlsCAFile=%sca.pem"
             "&tlsCertificateKeyFile=%sclient-bundle.pem&authMechanism=MONGODB-X509&serverSelectionTimeoutMS=5000",
             e.sim.port, certs, certs);
    c = mongoc_client_new(uri);
    ck_assert_ptr_nonnull(c);
    mongoc_client_set_error_api(c, MONGOC_ERROR_API_VERSION_2);
    ck_assert(!mongoc_client_command_simple(c, "admin", ping, NULL, NULL, &err));
    ck_assert_msg(strstr(err.message, "auth failed") != NULL, "another user: %s", err.message);
    mongoc_client_destroy(c);

    /* No client certificate: the handshake fails. */
    snprintf(uri, sizeof uri,
             "mongodb://localhost:%d/?replicaSet=rs0&tls=true&tlsCAFile=%sca.pem&serverSelectionTimeoutMS=3000",
             e.sim.port, certs);
    c = mongoc_client_new(uri);
    ck_assert(!mongoc_client_command_simple(c, "admin", ping, NULL, NULL, &err));
    mongoc_client_destroy(c);

    /* A plain connection to the TLS port: never answered. */
    snprintf(uri, sizeof uri, "mongodb://localhost:%d/?replicaSet=rs0&serverSelectionTimeoutMS=3000", e.sim.port);
    c = mongoc_client_new(uri);
    ck_assert(!mongoc_client_command_simple(c, "admin", ping, NULL, NULL, &err));
    mongoc_client_destroy(c);

    bson_destroy(doc);
    bson_destroy(ping);
    denv_stop(&e);
}
END_TEST

/* ---- refusals: exit 3, the side named, the reason given ---- */

/* One refusal: mongosim serving sim_cert, the daemon connecting to PostgreSQL at pg_host trusting pg_ca and to
 * mongosim trusting mongo_ca; `check` and `run` must exit 3, naming `side` (its line of `check` starting with
 * side_prefix and holding needle) while the other side's line says other_ok. */
static void refused_case(const char *name, const char *sim_cert, const char *pg_host, const char *pg_ca,
                         const char *mongo_ca, const char *side_prefix, const char *needle, const char *other_ok,
                         const char *side)
{
    char conninfo[1600], uri[1024];
    pg_conninfo(conninfo, sizeof conninfo, pg_host, pg_ca);
    denv e;
    env_start(&e, name, sim_cert, NULL, conninfo);
    if (strcmp(mongo_ca, "ca.pem") != 0) {
        /* the same mongosim, trusted with another CA: the configuration's uri rewritten */
        mongo_uri(uri, sizeof uri, e.sim.port, mongo_ca, true);
        write_ini(&e, uri, conninfo);
    }
    expect_refused(&e, side_prefix, needle, other_ok, side);
    denv_stop(&e);
}

START_TEST(test_pg_wrong_ca)
{
    if (!env_ready())
        SKIP_TEST("needs mongosim (MONGO_URI names a real replica set)");
    refused_case("tls_pgca", "server-bundle.pem", "localhost", "other-ca.pem", "ca.pem",
                 "postgres: ", "certificate verify failed", "mongodb: reads", "PostgreSQL");
}
END_TEST

START_TEST(test_pg_wrong_host)
{
    if (!env_ready())
        SKIP_TEST("needs mongosim (MONGO_URI names a real replica set)");
    refused_case("tls_pghost", "server-bundle.pem", "elsewhere.invalid", "ca.pem", "ca.pem",
                 "postgres: ", "does not match host name \"elsewhere.invalid\"", "mongodb: reads", "PostgreSQL");
}
END_TEST

START_TEST(test_mongo_wrong_ca)
{
    if (!env_ready())
        SKIP_TEST("needs mongosim (MONGO_URI names a real replica set)");
    refused_case("tls_mongoca", "server-bundle.pem", "localhost", "ca.pem", "other-ca.pem",
                 "mongodb: ", "certificate verify failed", "postgres: ok", "MongoDB");
}
END_TEST

START_TEST(test_mongo_wrong_host)
{
    if (!env_ready())
        SKIP_TEST("needs mongosim (MONGO_URI names a real replica set)");
    /* mongosim serves a certificate for elsewhere.invalid; the URI says localhost */
    refused_case("tls_mongohost", "elsewhere-bundle.pem", "localhost", "ca.pem", "ca.pem",
                 "mongodb: ", "hostname mismatch", "postgres: ok", "MongoDB");
}
END_TEST

Suite *tls_suite(void); /* called by the generated runner list */

Suite *tls_suite(void)
{
    Suite *s = suite_create("tls");
    TCase *tc = tcase_create("tls");
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, tls_setup, tls_teardown);
    tcase_add_test(tc, test_tls_replicates);
    tcase_add_test(tc, test_mongosim_x509);
    tcase_add_test(tc, test_pg_wrong_ca);
    tcase_add_test(tc, test_pg_wrong_host);
    tcase_add_test(tc, test_mongo_wrong_ca);
    tcase_add_test(tc, test_mongo_wrong_host);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_secrets.c — passwords in the configuration: the warning for a world-readable file that holds one
 * (config_secret_exposed), [mongodb] password_file (read at load into mongodb_uri_effective, with its error cases),
 * masking in config_print, and TLS options passing through to the drivers untouched.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mongoc/mongoc.h>

#include "daemon/config.h"

/* ---- helpers ------------------------------------------------------------------------------------------------------
 */

/* Writes text to a fresh temporary file with the given mode; its name goes to path (at least 64 bytes). */
static void write_tmp(char *path, const char *text, mode_t mode)
{
    strcpy(path, "/tmp/oplog2pg-test-secrets-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_msg(fd >= 0, "mkstemp failed");
    size_t n = strlen(text);
    ck_assert(write(fd, text, n) == (ssize_t)n);
    ck_assert(fchmod(fd, mode) == 0);
    close(fd);
}

/* A configuration file whose [mongodb] section is uri (and password_file when not NULL), and [postgres] conninfo. */
static void write_conf(char *path, const char *uri, const char *password_file, const char *conninfo, mode_t mode)
{
    char text[2048];
    snprintf(text, sizeof text, "[mongodb]\nuri = %s\n%s%s%s[postgres]\nconninfo = %s\n", uri,
             password_file ? "password_file = " : "", password_file ? password_file : "", password_file ? "\n" : "",
             conninfo);
    write_tmp(path, text, mode);
}

/* Whether the file written with these values gets the warning; the message is checked when it does. */
static bool exposed(const char *uri, const char *conninfo, mode_t mode)
{
    char path[64], err[1024] = "", msg[1024] = "x";
    config c;
    write_conf(path, uri, NULL, conninfo, mode);
    ck_assert_msg(config_load(path, &c, err, sizeof err), "load failed: %s", err);
    bool warn = config_secret_exposed(path, &c, msg, sizeof msg);
    if (warn) {
        char want[256];
        snprintf(want, sizeof want, "%s is readable by every user and holds a password: chmod 0640 it", path);
        ck_assert_msg(strncmp(msg, want, strlen(want)) == 0, "message: %s", msg);
        ck_assert(strstr(msg, "see docs/configuration.md") != NULL);
    } else {
        ck_assert_str_eq(msg, "");
    }
    config_free(&c);
    unlink(path);
    return warn;
}

/* Loads a configuration with password_file = pwpath; returns whether it loaded, err holding the error. */
static bool load_with_password_file(const char *uri, const char *pwpath, config *c, char *err, size_t errlen,
                                    char *conf_path)
{
    write_conf(conf_path, uri, pwpath, "", 0600);
    bool ok = config_load(conf_path, c, err, errlen);
    unlink(conf_path);
    return ok;
}

static char *print_to_string(const config *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    config_print(mem, c);
    fclose(mem);
    return buf;
}

/* ---- the world-readable warning ----------------------------------------------------------------------------- */

START_TEST(test_world_readable_with_password_warns)
{
    ck_assert(exposed("mongodb://u:s3cret@db1/?replicaSet=rs0", "", 0644));
    ck_assert(exposed("mongodb://db1/?replicaSet=rs0", "host=db dbname=app user=o password=s3cret", 0644));
    ck_assert(exposed("mongodb://db1/?replicaSet=rs0", "postgresql://o:s3cret@db/app", 0604));
}
END_TEST

START_TEST(test_group_readable_with_password_is_quiet)
{
    ck_assert(!exposed("mongodb://u:s3cret@db1/?replicaSet=rs0", "password=s3cret", 0640));
    ck_assert(!exposed("mongodb://u:s3cret@db1/?replicaSet=rs0", "password=s3cret", 0600));
}
END_TEST

START_TEST(test_world_readable_without_password_is_quiet)
{
    ck_assert(!exposed("mongodb://u@db1/?replicaSet=rs0", "host=db dbname=app user=o", 0644));
    ck_assert(!exposed("mongodb://db1/?replicaSet=rs0", "", 0644));
    ck_assert(!exposed("mongodb://db1/?replicaSet=rs0", "postgresql://o@db/app?sslmode=require", 0644));
    /* A password_file keeps the password out of the file: no warning for a world-readable configuration. */
    char pw[64], conf[64], err[1024] = "", msg[256];
    config c;
    write_tmp(pw, "s3cret\n", 0600);
    write_conf(conf, "mongodb://u@db1/?replicaSet=rs0", pw, "", 0644);
    ck_assert_msg(config_load(conf, &c, err, sizeof err), "load failed: %s", err);
    ck_assert(!config_secret_exposed(conf, &c, msg, sizeof msg));
    config_free(&c);
    unlink(conf);
    unlink(pw);
}
END_TEST

/* ---- password_file ------------------------------------------------------------------------------------------ */

START_TEST(test_password_file_good)
{
    char pw[64], conf[64], err[1024] = "";
    config c;
    const char *password = "s3cr@t:/%?#&é";
    char text[128];
    snprintf(text, sizeof text, "%s  \r\nsecond line is ignored\n", password);
    write_tmp(pw, text, 0600);

    const char *uri = "mongodb://repl@db1:27017,db2:27018/?replicaSet=rs0&authSource=admin";
    ck_assert_msg(load_with_password_file(uri, pw, &c, err, sizeof err, conf), "load failed: %s", err);
    ck_assert_str_eq(c.mongodb_uri, uri); /* as written */
    ck_assert_str_eq(c.mongodb_password_file, pw);
    ck_assert_ptr_nonnull(c.mongodb_uri_effective);

    bson_error_t error;
    mongoc_uri_t *parsed = mongoc_uri_new_with_error(c.mongodb_uri_effective, &error);
    ck_assert_msg(parsed != NULL, "effective URI does not parse: %s", error.message);
    ck_assert_str_eq(mongoc_uri_get_password(parsed), password);
    ck_assert_str_eq(mongoc_uri_get_username(parsed), "repl");
    ck_assert_str_eq(mongoc_uri_get_replica_set(parsed), "rs0");
    ck_assert_str_eq(mongoc_uri_get_auth_source(parsed), "admin");
    const mongoc_host_list_t *hosts = mongoc_uri_get_hosts(parsed);
    ck_assert(hosts != NULL && hosts->next != NULL && hosts->next->next == NULL);
    ck_assert_str_eq(hosts->host, "db1");
    ck_assert_int_eq(hosts->next->port, 27018);
    mongoc_uri_destroy(parsed);

    /* Printing shows neither the password nor the effective URI, and reads back as the file was written. */
    char *out = print_to_string(&c);
    ck_assert_msg(strstr(out, "s3cr") == NULL, "password printed:\n%s", out);
    ck_assert(strstr(out, c.mongodb_uri_effective) == NULL);
    ck_assert(strstr(out, "uri = mongodb://repl@db1:27017,db2:27018/?replicaSet=rs0&authSource=admin\n") != NULL);
    char line[128];
    snprintf(line, sizeof line, "password_file = %s\n", pw);
    ck_assert(strstr(out, line) != NULL);
    free(out);
    config_free(&c);
    unlink(pw);
}
END_TEST

START_TEST(test_effective_uri_without_password_file)
{
    config c;
    ck_assert(config_init_defaults(&c));
    ck_assert_str_eq(c.mongodb_uri_effective, c.mongodb_uri);

    char err[1024] = "", pw[64];
    ck_assert_msg(config_override(&c, "mongodb", "uri", "mongodb://u@h1/?replicaSet=x", err, sizeof err), "%s", err);
    ck_assert_str_eq(c.mongodb_uri_effective, "mongodb://u@h1/?replicaSet=x");
    write_tmp(pw, "pw-from-file", 0600); /* no newline at all */
    ck_assert_msg(config_override(&c, "mongodb", "password_file", pw, err, sizeof err), "%s", err);
    ck_assert_str_eq(c.mongodb_uri_effective, "mongodb://u:pw-from-file@h1/?replicaSet=x");
    ck_assert_msg(
        config_override(&c, "mongodb", "uri", "mongodb+srv://u@cluster0.example.com/?tls=true", err, sizeof err), "%s",
        err);
    ck_assert_str_eq(c.mongodb_uri_effective, "mongodb+srv://u:pw-from-file@cluster0.example.com/?tls=true");
    config_free(&c);
    unlink(pw);

    /* A password in the URI itself stays where it is (masked when printed). */
    char conf[64];
    write_conf(conf, "mongodb://u:inline@h1/?replicaSet=x", NULL, "", 0600);
    ck_assert_msg(config_load(conf, &c, err, sizeof err), "%s", err);
    ck_assert_str_eq(c.mongodb_uri_effective, "mongodb://u:inline@h1/?replicaSet=x");
    char *out = print_to_string(&c);
    ck_assert(strstr(out, "inline") == NULL);
    ck_assert(strstr(out, "uri = mongodb://u:********@h1/?replicaSet=x\n") != NULL);
    free(out);
    config_free(&c);
    unlink(conf);
}
END_TEST

/* The load fails, err starts with "CONF:4: [mongodb] password_file: " and holds needle. */
static void expect_password_file_error(const char *uri, const char *pwpath, const char *needle)
{
    char conf[64], err[1024] = "", want[128];
    config c = {0};
    ck_assert_msg(!load_with_password_file(uri, pwpath, &c, err, sizeof err, conf), "accepted %s with %s", uri, pwpath);
    snprintf(want, sizeof want, "%s:3: [mongodb] password_file: ", conf);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "error \"%s\" does not start with \"%s\"", err, want);
    ck_assert_msg(strstr(err, needle) != NULL, "error \"%s\" lacks \"%s\"", err, needle);
    ck_assert_msg(c.mongodb_uri == NULL && c.mongodb_uri_effective == NULL, "a failed load wrote into the output");
}

START_TEST(test_password_file_errors)
{
    char pw[64], empty[64], blank[64];
    write_tmp(pw, "s3cret\n", 0600);
    write_tmp(empty, "", 0600);
    write_tmp(blank, "  \t\r\nsecond\n", 0600);

    expect_password_file_error("mongodb://u@db1/", empty, "is empty");
    expect_password_file_error("mongodb://u@db1/", blank, "is empty");
    expect_password_file_error("mongodb://u@db1/", "/nonexistent/oplog2pg-password", strerror(ENOENT));
    expect_password_file_error("mongodb://u@db1/", "/nonexistent/oplog2pg-password", "cannot read");
    expect_password_file_error("mongodb://db1/?replicaSet=rs0", pw, "must name the user");
    expect_password_file_error("mongodb://u:inline@db1/", pw, "already holds a password");
    expect_password_file_error("mongodb://u:@db1/", pw, "already holds a password");
    char latin1[64];
    write_tmp(latin1, "caf\xe9\n", 0600);
    expect_password_file_error("mongodb://u@db1/", latin1, "not valid UTF-8");
    unlink(latin1);
    if (geteuid() != 0) { /* root reads a 0000 file anyway */
        ck_assert(chmod(pw, 0) == 0);
        expect_password_file_error("mongodb://u@db1/", pw, strerror(EACCES));
    }
    unlink(pw);
    unlink(empty);
    unlink(blank);
}
END_TEST

/* ---- TLS options pass through --------------------------------------------------------------------------------- */

START_TEST(test_tls_options_pass_through)
{
    char conf[64], err[1024] = "";
    config c;

    const char *conninfo = "host=db.example.com dbname=app sslmode=require sslrootcert=/nonexistent";
    const char *uri = "mongodb://db1/?replicaSet=rs0&tls=true&tlsCAFile=/etc/ssl/certs/ca-certificates.crt";
    write_conf(conf, uri, NULL, conninfo, 0600);
    ck_assert_msg(config_load(conf, &c, err, sizeof err), "load failed: %s", err);
    ck_assert_str_eq(c.postgres_conninfo, conninfo);
    ck_assert_str_eq(c.mongodb_uri_effective, uri);
    bson_error_t error;
    mongoc_uri_t *parsed = mongoc_uri_new_with_error(c.mongodb_uri_effective, &error);
    ck_assert(parsed != NULL);
    ck_assert(mongoc_uri_get_tls(parsed));
    ck_assert_str_eq(mongoc_uri_get_option_as_utf8(parsed, MONGOC_URI_TLSCAFILE, ""),
                     "/etc/ssl/certs/ca-certificates.crt");
    mongoc_uri_destroy(parsed);
    config_free(&c);
    unlink(conf);

    write_conf(conf, "mongodb://db1/?replicaSet=rs0&tls=maybe", NULL, "", 0600);
    ck_assert_msg(!config_load(conf, &c, err, sizeof err), "tls=maybe accepted");
    char want[128];
    snprintf(want, sizeof want, "%s:2: [mongodb] uri: not a valid MongoDB URI: ", conf);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "error \"%s\" does not start with \"%s\"", err, want);
    ck_assert_msg(strstr(err, "tls") != NULL, "error \"%s\" does not name the option", err);
    unlink(conf);
}
END_TEST

Suite *secrets_suite(void); /* called by the generated runner list */

Suite *secrets_suite(void)
{
    Suite *s = suite_create("secrets");
    TCase *tc = tcase_create("secrets");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_world_readable_with_password_warns);
    tcase_add_test(tc, test_group_readable_with_password_is_quiet);
    tcase_add_test(tc, test_world_readable_without_password_is_quiet);
    tcase_add_test(tc, test_password_file_good);
    tcase_add_test(tc, test_effective_uri_without_password_file);
    tcase_add_test(tc, test_password_file_errors);
    tcase_add_test(tc, test_tls_options_pass_through);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_secrets.c — passwords in the configuration: the warning for a world-readable file that holds one
 * (config_secret_exposed), [mongodb] password_file (read at load into mongodb_uri_effective, with its error cases),
 * masking (config_mask_secrets, and in config_print), and TLS options passing through to the drivers untouched.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libpq-fe.h>
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
    /* An empty password is no secret. */
    ck_assert(!exposed("mongodb://u:@db1/?replicaSet=rs0", "host=db password=", 0644));
    ck_assert(!exposed("mongodb://db1/?replicaSet=rs0", "postgresql://o:@db/app", 0644));
    ck_assert(!exposed("mongodb://db1/?replicaSet=rs0", "host=db password=''", 0644));
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

/* ---- masking ---------------------------------------------------------------------------------------------------- */

/* Where a password hides in a libpq string or a URI, and what only looks like one. */
START_TEST(test_mask_edge_cases)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        /* key/value: the keyword in any case, spaces around '=', quotes and escapes, an empty value */
        {"PASSWORD=x", "PASSWORD=********"},
        {"host = h   password='x y'  port=1", "host = h   password=********  port=1"},
        {"host='a\\'b' password=c\\ d port=2", "host='a\\'b' password=******** port=2"},
        {"password=", "password=********"},
        {"password=a password=b", "password=******** password=********"},
        /* other keywords stay as they are, even when they start with "password" */
        {"passwordx=1 passfile=/etc/pgpass", "passwordx=1 passfile=/etc/pgpass"},
        /* not key=value: the rest is copied (the conninfo check refuses such a string anyway) */
        {"password", "password"},
        /* URIs: userinfo and every password= query parameter, in any case; '#', '@' and '/' inside the password */
        {"postgresql://u:pw@h/db?Password=a&sslmode=require&password=b",
         "postgresql://u:********@h/db?Password=********&sslmode=require&password=********"},
        {"postgresql://u:p#w@h/db", "postgresql://u:********@h/db"},
        {"postgresql://u:a@b@h/db", "postgresql://u:********@h/db"},
        {"mongodb://u:p/w@h/x", "mongodb://u:********@h/x"},
        {"postgresql://h/db?password", "postgresql://h/db?password"},
        {"mongodb://u@h/?authSource=admin", "mongodb://u@h/?authSource=admin"},
    };
    char buf[256];

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_str_eq(config_mask_secrets(cases[i].in, buf, sizeof buf), cases[i].out);
    ck_assert_str_eq(config_mask_secrets(NULL, buf, sizeof buf), "");
    /* cut short, never past the buffer, and the password is not what is cut */
    ck_assert_str_eq(config_mask_secrets("postgresql://u:pw@h/db", buf, 20), "postgresql://u:****");
}
END_TEST

/* A URI's userinfo password ends at the '@' before the host, not at a '?' (nor at '#', ':', '&', '['): libpq and
 * the MongoDB driver both read "u:p?w@h" as user u, password p?w. A password= query parameter is masked wherever
 * libpq would read it, also with its key percent-encoded. */
START_TEST(test_mask_uri_password_any_characters)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"postgresql://u:p?w@h/x", "postgresql://u:********@h/x"},
        {"postgres://u:p?w@h", "postgres://u:********@h"},
        {"postgresql://u:p?w@h/x?sslmode=require&password=z",
         "postgresql://u:********@h/x?sslmode=require&password=********"},
        {"postgresql://u:p:q&r[s@h1:1,h2:2/db", "postgresql://u:********@h1:1,h2:2/db"},
        {"postgresql://:pw@h/db", "postgresql://:********@h/db"},
        {"postgresql://u:p?a@b@h/db", "postgresql://u:********@h/db"},
        {"mongodb://u:p?w@h/?replicaSet=rs0", "mongodb://u:********@h/?replicaSet=rs0"},
        {"mongodb://u:p?w@h", "mongodb://u:********@h"},
        {"mongodb+srv://u:p?w#x@c.example.com/?tls=true", "mongodb+srv://u:********@c.example.com/?tls=true"},
        /* a password= query parameter: alone, after a host:port, holding '@' or an encoded '&', its key encoded */
        {"postgresql://h/db?password=secret", "postgresql://h/db?password=********"},
        {"postgresql://h:5432/db?password=s@cret", "postgresql://h:5432/db?password=********"},
        {"postgresql://h/db?password=a%26b&sslmode=disable", "postgresql://h/db?password=********&sslmode=disable"},
        {"postgresql://h/db?pass%77ord=secret", "postgresql://h/db?pass%77ord=********"},
        {"postgresql://h/db?%70ASSWORD=z&x=1", "postgresql://h/db?%70ASSWORD=********&x=1"},
        {"postgresql://h/db#f?password=x", "postgresql://h/db#f?password=********"},
        /* an '@' after the host part is not the end of the userinfo: nothing more is masked than the password */
        {"postgresql://u:pw@h/db?application_name=a@b", "postgresql://u:********@h/db?application_name=a@b"},
        {"mongodb://u:pw@h/?appname=a@b&replicaSet=rs0", "mongodb://u:********@h/?appname=a@b&replicaSet=rs0"},
        {"postgresql://h/db?application_name=a@b", "postgresql://h/db?application_name=a@b"},
        {"postgresql://h:5432/d?application_name=a:b@c", "postgresql://h:5432/d?application_name=a:b@c"},
        /* libpq reads "h:5432?x=a" as user h, password 5432?x=a */
        {"postgresql://h:5432?x=a@b/db", "postgresql://h:********@b/db"},
        /* when in doubt, mask: a password= parameter that libpq would read as part of a user name */
        {"postgresql://h?password=x@y", "postgresql://h?password=********"},
    };
    char buf[256];

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_str_eq(config_mask_secrets(cases[i].in, buf, sizeof buf), cases[i].out);
}
END_TEST

/* libpq's key=value form: the value of password, quoted or not, with escapes, as libpq reads it. */
START_TEST(test_mask_keyvalue_forms)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"host=h password='a b\\' c' dbname=x", "host=h password=******** dbname=x"},
        {"password = 'x y'   port=1", "password = ********   port=1"},
        {"host=h password=a\\ b port=1", "host=h password=******** port=1"},
        {"password=a'b host=h", "password=******** host=h"},
        {"password='a\\\\' host=h", "password=******** host=h"},
        {"password=\t'q' host=h", "password=\t******** host=h"},
        /* libpq skips the blanks after '=': this password is "host=h" */
        {"password= host=h", "password= ********"},
        {"password='unterminated and more", "password=********"},
        /* a word without '=' does not stop the masking of what follows (libpq refuses the string anyway) */
        {"host=h junk password=secret", "host=h junk password=********"},
    };
    char buf[256];

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_str_eq(config_mask_secrets(cases[i].in, buf, sizeof buf), cases[i].out);
}
END_TEST

/* The password each library actually takes from these strings never shows in the masked text. */
START_TEST(test_mask_hides_what_the_drivers_read)
{
    static const char *const pg[] = {
        "postgresql://u:Pw?x1@h/x",
        "postgresql://u:Pw?x2@h",
        "postgresql://u:Pw#x3@h/db",
        "postgresql://u:Pw:x4@h/db",
        "postgresql://u:Pw&x5@h/db?sslmode=disable",
        "postgresql://u:Pw?x6@h/db?application_name=a@b",
        "postgresql://h/db?password=Pw@x7",
        "postgresql://h:5432/db?sslmode=disable&password=Pw?x8",
        "postgresql://h/db?pass%77ord=Pw%26x9",
        "postgresql://h/db#f?password=Pwx10",
        "postgresql://h:5432?x=Pw11@b/db",
        "postgresql://u@h/db?password=Pw12a&password=Pw12b",
        "host=h password='Pw x\\' 13' dbname=x",
        "host=h password=Pw\\ 14 port=1",
        "password= Pw15=h",
        "password=Pw'16",
    };
    static const char *const mongo[] = {
        "mongodb://u:Pw?x1@h/x",
        "mongodb://u:Pw?x2@h",
        "mongodb://u:Pw?x3@h/?replicaSet=rs0",
        "mongodb://u:Pw#x4@h1:1,h2:2/?replicaSet=rs0",
        "mongodb://u:Pw&x5@h/?appname=a@b",
        "mongodb://u:Pw?a@b@h/",
        "mongodb+srv://u:Pw?x7@c.example.com/",
    };
    char buf[256];

    for (size_t i = 0; i < sizeof pg / sizeof pg[0]; i++) {
        char *msg = NULL;
        PQconninfoOption *opts = PQconninfoParse(pg[i], &msg);
        ck_assert_msg(opts != NULL, "libpq refuses %s: %s", pg[i], msg);
        config_mask_secrets(pg[i], buf, sizeof buf);
        int passwords = 0;
        for (PQconninfoOption *o = opts; o->keyword != NULL; o++) {
            if (strcmp(o->keyword, "password") != 0 || o->val == NULL)
                continue;
            passwords++;
            ck_assert_msg(strstr(buf, o->val) == NULL, "%s -> %s shows libpq's password %s", pg[i], buf, o->val);
            ck_assert_msg(strstr(buf, "Pw") == NULL, "%s -> %s shows part of a password", pg[i], buf);
        }
        ck_assert_msg(passwords == 1, "%s: libpq reads no password", pg[i]);
        PQconninfoFree(opts);
    }
    for (size_t i = 0; i < sizeof mongo / sizeof mongo[0]; i++) {
        bson_error_t error;
        mongoc_uri_t *uri = mongoc_uri_new_with_error(mongo[i], &error);
        ck_assert_msg(uri != NULL, "the driver refuses %s: %s", mongo[i], error.message);
        const char *password = mongoc_uri_get_password(uri);
        ck_assert_msg(password != NULL && password[0] != '\0', "%s: the driver reads no password", mongo[i]);
        config_mask_secrets(mongo[i], buf, sizeof buf);
        ck_assert_msg(strstr(buf, password) == NULL, "%s -> %s shows the driver's password %s", mongo[i], buf,
                      password);
        ck_assert_msg(strstr(buf, "Pw") == NULL, "%s -> %s shows part of a password", mongo[i], buf);
        mongoc_uri_destroy(uri);
    }
}
END_TEST

struct logbuf {
    char text[4096];
    int lines;
};

static void collect(void *arg, const char *msg)
{
    struct logbuf *lb = arg;
    size_t used = strlen(lb->text);
    snprintf(lb->text + used, sizeof lb->text - used, "%s\n", msg);
    lb->lines++;
}

/* The leak as it was seen: a URI password holding '?' printed by "oplog2pg config" and in a reload's messages. */
START_TEST(test_uri_password_masked_in_print_and_reload)
{
    char conf[64], err[1024] = "";
    config c;
    struct logbuf lb = {"", 0};

    write_conf(conf, "mongodb://u:mq?1secret@db1/?replicaSet=rs0", NULL, "postgresql://o:pq?1secret@db/app", 0600);
    ck_assert_msg(config_load(conf, &c, err, sizeof err), "%s", err);
    char *out = print_to_string(&c);
    ck_assert_msg(strstr(out, "secret") == NULL, "password printed:\n%s", out);
    ck_assert_msg(strstr(out, "conninfo = postgresql://o:********@db/app\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "uri = mongodb://u:********@db1/?replicaSet=rs0\n") != NULL, "%s", out);
    free(out);
    unlink(conf);

    write_conf(conf, "mongodb://u:mq?2secret@db1/?replicaSet=rs0", NULL, "postgresql://o:pq?2secret@db/app", 0600);
    ck_assert_msg(config_reload(conf, &c, err, sizeof err, collect, &lb, NULL), "%s", err);
    unlink(conf);
    ck_assert_int_eq(lb.lines, 2);
    ck_assert_msg(strstr(lb.text, "secret") == NULL, "password logged:\n%s", lb.text);
    ck_assert_msg(strstr(lb.text, "postgresql://o:********@db/app") != NULL, "%s", lb.text);
    config_free(&c);
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

/* The load fails, err starts with "CONF:3: [mongodb] password_file: " (write_conf puts the key on line 3) and holds
 * needle. */
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
    /* A file that opens but cannot be read (a directory): the read fails, not the open; this runs as root too. */
    expect_password_file_error("mongodb://u@db1/", "/", "cannot read /: ");
    expect_password_file_error("mongodb://u@db1/", "/", strerror(EISDIR));
    if (geteuid() != 0) { /* root reads a 0000 file anyway */
        ck_assert(chmod(pw, 0) == 0);
        expect_password_file_error("mongodb://u@db1/", pw, strerror(EACCES));
    }
    unlink(pw);
    unlink(empty);
    unlink(blank);
}
END_TEST

/* A refused config_override leaves the configuration as it was: the option, the effective URI (with the password
 * from the file), and the overrides a reload applies again. */
START_TEST(test_failed_override_keeps_secrets_config)
{
    static const struct {
        const char *name, *value, *needle;
    } bad[] = {
        {"password_file", "/nonexistent/oplog2pg-password", "cannot read /nonexistent/oplog2pg-password"},
        {"password_file", "/", "cannot read /"},
        {"uri", "mongodb://u:inline@db2/?replicaSet=rs0", "already holds a password"},
        {"uri", "mongodb://db2/?replicaSet=rs0", "must name the user"},
        {"uri", "http://db2/", "mongodb://"},
    };
    char pw[64], conf[64], err[1024] = "";
    config c;

    write_tmp(pw, "from-file\n", 0600);
    ck_assert_msg(load_with_password_file("mongodb://u@db1/?replicaSet=rs0", pw, &c, err, sizeof err, conf), "%s", err);
    ck_assert_str_eq(c.mongodb_uri_effective, "mongodb://u:from-file@db1/?replicaSet=rs0");
    char *before = print_to_string(&c);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(!config_override(&c, "mongodb", bad[i].name, bad[i].value, err, sizeof err), "accepted %s = %s",
                      bad[i].name, bad[i].value);
        ck_assert_msg(strncmp(err, "[mongodb] ", 10) == 0 && strstr(err, bad[i].needle) != NULL, "%s = %s: %s",
                      bad[i].name, bad[i].value, err);
        char *after = print_to_string(&c);
        ck_assert_msg(strcmp(after, before) == 0, "%s = %s changed the configuration:\n%s", bad[i].name, bad[i].value,
                      after);
        free(after);
        ck_assert_str_eq(c.mongodb_uri, "mongodb://u@db1/?replicaSet=rs0");
        ck_assert_str_eq(c.mongodb_password_file, pw);
        ck_assert_str_eq(c.mongodb_uri_effective, "mongodb://u:from-file@db1/?replicaSet=rs0");
        ck_assert_msg(c.overrides == NULL, "%s = %s is remembered for the next reload", bad[i].name, bad[i].value);
    }
    free(before);

    /* A good override, then a bad one of the same option: the good one stays, and is what a reload applies. */
    ck_assert_msg(config_override(&c, "mongodb", "uri", "mongodb://v@db3/?replicaSet=rs0", err, sizeof err), "%s", err);
    ck_assert_str_eq(c.mongodb_uri_effective, "mongodb://v:from-file@db3/?replicaSet=rs0");
    ck_assert(!config_override(&c, "mongodb", "uri", "mongodb://v:inline@db4/?replicaSet=rs0", err, sizeof err));
    ck_assert_str_eq(c.mongodb_uri, "mongodb://v@db3/?replicaSet=rs0");
    ck_assert_str_eq(c.mongodb_uri_effective, "mongodb://v:from-file@db3/?replicaSet=rs0");
    int idx = config_option_find("mongodb", "uri");
    ck_assert(c.overrides != NULL && c.overrides[idx] != NULL);
    ck_assert_str_eq(c.overrides[idx], "mongodb://v@db3/?replicaSet=rs0");
    config_free(&c);
    unlink(pw);
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
    tcase_add_test(tc, test_mask_edge_cases);
    tcase_add_test(tc, test_mask_uri_password_any_characters);
    tcase_add_test(tc, test_mask_keyvalue_forms);
    tcase_add_test(tc, test_mask_hides_what_the_drivers_read);
    tcase_add_test(tc, test_uri_password_masked_in_print_and_reload);
    tcase_add_test(tc, test_failed_override_keeps_secrets_config);
    suite_add_tcase(s, tc);
    return s;
}

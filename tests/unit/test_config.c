/*
 * test_config.c — the configuration module: defaults, every type and unit, errors that name file/line/key,
 * duplicates, continuation lines, reload (reloadable options only), print round trip, masked secrets, and the check
 * that docs/configuration.md and conf/oplog2pg.ini list every option of the table (run from the repository root).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/textfile.h"
#include "daemon/config.h"

/* ---- helpers ----------------------------------------------------------------------------------------------------- */

/* Writes text to a fresh temporary file; its name goes to path (at least 64 bytes). */
static void write_tmp(char *path, const char *text)
{
    strcpy(path, "/tmp/oplog2pg-test-config-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_msg(fd >= 0, "mkstemp failed");
    size_t n = strlen(text);
    ck_assert(write(fd, text, n) == (ssize_t)n);
    close(fd);
}

static char *read_all(const char *path)
{
    char *buf = textfile_read(path);
    ck_assert_msg(buf != NULL, "cannot read %s (tests run from the repository root)", path);
    return buf;
}

/* Loads text through a real file (so file names and line numbers are the file's). */
static bool load_text(const char *text, config *c, char *err, size_t errlen, char *path_out)
{
    char path[64];
    write_tmp(path, text);
    if (path_out != NULL)
        strcpy(path_out, path);
    bool ok = config_load(path, c, err, errlen);
    unlink(path);
    return ok;
}

static void load_ok(const char *text, config *c)
{
    char err[1024] = "";
    ck_assert_msg(load_text(text, c, err, sizeof err, NULL), "load failed: %s", err);
}

/* Loading text must fail with "FILE:LINE: prefix..." and the message must contain needle. */
static void expect_error(const char *text, int line, const char *prefix, const char *needle)
{
    char err[1024] = "", path[64], want[256];
    config c = {0};

    ck_assert_msg(!load_text(text, &c, err, sizeof err, path), "accepted:\n%s", text);
    snprintf(want, sizeof want, "%s:%d: %s", path, line, prefix);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "error \"%s\" does not start with \"%s\"", err, want);
    ck_assert_msg(strstr(err, needle) != NULL, "error \"%s\" lacks \"%s\"", err, needle);
    ck_assert_msg(c.service == NULL && c.mongodb_uri == NULL, "a failed load wrote into the output");
}

static void assert_same(const config *a, const config *b)
{
    char x[2048], y[2048];
    for (size_t i = 0; i < config_option_count(); i++) {
        config_value_text(a, i, x, sizeof x);
        config_value_text(b, i, y, sizeof y);
        ck_assert_msg(strcmp(x, y) == 0, "[%s] %s: \"%s\" != \"%s\"", config_option_at(i)->section,
                      config_option_at(i)->name, x, y);
    }
    /* And the fields themselves, not only their text. */
    ck_assert_int_eq(a->batch_rows, b->batch_rows);
    ck_assert_int_eq(a->batch_bytes, b->batch_bytes);
    ck_assert_int_eq(a->flush_interval_ms, b->flush_interval_ms);
    ck_assert_int_eq(a->queue_size, b->queue_size);
    ck_assert_int_eq(a->apply_mode, b->apply_mode);
    ck_assert_int_eq(a->log_level, b->log_level);
    ck_assert_int_eq(a->progress_interval_ms, b->progress_interval_ms);
    ck_assert_int_eq(a->log_timestamps, b->log_timestamps);
    ck_assert_str_eq(a->mongodb_uri, b->mongodb_uri);
    ck_assert_str_eq(a->postgres_conninfo, b->postgres_conninfo);
    ck_assert_str_eq(a->service, b->service);
    ck_assert_uint_eq(a->include.count, b->include.count);
    ck_assert_uint_eq(a->exclude.count, b->exclude.count);
}

/* ---- defaults and the table ----------------------------------------------------------------------------------------
 */

START_TEST(test_defaults)
{
    config c;
    ck_assert(config_init_defaults(&c));
    ck_assert_str_eq(c.mongodb_uri, "mongodb://127.0.0.1:27017/?replicaSet=rs0");
    ck_assert_str_eq(c.postgres_conninfo, "");
    ck_assert_str_eq(c.service, "default");
    ck_assert_uint_eq(c.include.count, 1);
    ck_assert_str_eq(c.include.items[0], "*.*");
    ck_assert_ptr_null(c.include.items[1]);
    ck_assert_uint_eq(c.exclude.count, 0);
    ck_assert_ptr_nonnull(c.exclude.items);
    ck_assert_ptr_null(c.exclude.items[0]);
    ck_assert_int_eq(c.batch_rows, 10000);
    ck_assert_int_eq(c.batch_bytes, 8 * 1024 * 1024);
    ck_assert_int_eq(c.flush_interval_ms, 200);
    ck_assert_int_eq(c.queue_size, 10000);
    ck_assert_int_eq(c.apply_mode, CONFIG_APPLY_BATCHED);
    ck_assert_int_eq(c.log_level, CONFIG_LOG_INFO);
    ck_assert_int_eq(c.progress_interval_ms, 10000);
    ck_assert_int_eq(c.log_timestamps, CONFIG_TIMESTAMPS_AUTO);
    ck_assert_int_eq(c.on_error, CONFIG_ON_ERROR_DEAD_LETTER);
    ck_assert_int_eq(c.log_destination, CONFIG_LOG_STDERR);
    ck_assert_int_eq(c.syslog_facility, CONFIG_FACILITY_DAEMON);
    ck_assert_str_eq(c.syslog_ident, "oplog2pg");
    ck_assert_str_eq(c.metrics_listen, "");
    ck_assert_str_eq(c.mongodb_password_file, "");
    config_free(&c);
    config_free(&c); /* twice is harmless */

    /* An empty file is the defaults too. */
    config d, e;
    load_ok("", &d);
    ck_assert(config_init_defaults(&e));
    assert_same(&d, &e);
    config_free(&d);
    config_free(&e);
}
END_TEST

START_TEST(test_table)
{
    config c;
    char buf[1024];

    ck_assert(config_init_defaults(&c));
    ck_assert_uint_ge(config_option_count(), 13);
    ck_assert_ptr_null(config_option_at(config_option_count()));
    for (size_t i = 0; i < config_option_count(); i++) {
        const config_option_info *o = config_option_at(i);
        ck_assert(o->section && o->name && o->help && o->type_name && o->default_text);
        ck_assert_int_eq(config_option_find(o->section, o->name), (int)i);
        /* The default's text is how the value prints: the sample INI and docs show the same spelling. */
        ck_assert_msg(strcmp(config_value_text(&c, i, buf, sizeof buf), o->default_text) == 0,
                      "[%s] %s default \"%s\" prints as \"%s\"", o->section, o->name, o->default_text, buf);
        for (size_t j = 0; j < i; j++)
            ck_assert_msg(config_option_find(o->section, o->name) != (int)j, "duplicate option");
    }
    ck_assert_int_eq(config_option_find("REPLICATION", "Batch_Rows"), config_option_find("replication", "batch_rows"));
    ck_assert_int_eq(config_option_find("replication", "nope"), -1);
    ck_assert(config_option_at(config_option_find("logging", "level"))->reloadable);
    ck_assert(!config_option_at(config_option_find("replication", "queue_size"))->reloadable);
    ck_assert(!config_option_at(config_option_find("mongodb", "uri"))->reloadable);
    ck_assert_str_eq(config_log_level_name(CONFIG_LOG_WARNING), "warning");
    ck_assert_str_eq(config_apply_mode_name(CONFIG_APPLY_PER_OP), "per-op");
    config_free(&c);
}
END_TEST

/* ---- types and units ------------------------------------------------------------------------------------------------
 */

START_TEST(test_types_and_units)
{
    config c;
    load_ok("; a comment\n"
            "# another\n"
            "[mongodb]\n"
            "uri = mongodb://u@db1:27017,db2:27018/?replicaSet=main\n"
            "[postgres]\n"
            "conninfo = host=/run/postgresql dbname=app\n"
            "[replication]\n"
            "service = orders-to-pg\n"
            "include =  shop.* ,crm.customers,  *.orders  \n"
            "exclude = shop.tmp_*\n"
            "batch_rows = 500\n"
            "batch_bytes = 2MB\n"
            "flush_interval = 5\n"
            "queue_size = 16\n"
            "apply_mode = PER-OP\n"
            "[Logging]\n"
            "level = warning\n"
            "progress_interval = 3\n"
            "timestamps = off\n"
            "destination = syslog\n"
            "syslog_facility = local3\n"
            "syslog_ident = o2p-main\n"
            "[metrics]\n"
            "listen = [::1]:9187\n",
            &c);
    ck_assert_str_eq(c.mongodb_uri, "mongodb://u@db1:27017,db2:27018/?replicaSet=main");
    ck_assert_str_eq(c.postgres_conninfo, "host=/run/postgresql dbname=app");
    ck_assert_str_eq(c.service, "orders-to-pg");
    ck_assert_uint_eq(c.include.count, 3);
    ck_assert_str_eq(c.include.items[0], "shop.*");
    ck_assert_str_eq(c.include.items[1], "crm.customers");
    ck_assert_str_eq(c.include.items[2], "*.orders");
    ck_assert_ptr_null(c.include.items[3]);
    ck_assert_uint_eq(c.exclude.count, 1);
    ck_assert_int_eq(c.batch_rows, 500);
    ck_assert_int_eq(c.batch_bytes, 2 * 1024 * 1024);
    ck_assert_int_eq(c.flush_interval_ms, 5); /* bare number: milliseconds for this option */
    ck_assert_int_eq(c.queue_size, 16);
    ck_assert_int_eq(c.apply_mode, CONFIG_APPLY_PER_OP);
    ck_assert_int_eq(c.log_level, CONFIG_LOG_WARNING);
    ck_assert_int_eq(c.progress_interval_ms, 3000); /* bare number: seconds for this one */
    ck_assert_int_eq(c.log_timestamps, CONFIG_TIMESTAMPS_OFF);
    ck_assert_int_eq(c.log_destination, CONFIG_LOG_SYSLOG);
    ck_assert_int_eq(c.syslog_facility, CONFIG_FACILITY_LOCAL0 + 3);
    ck_assert_str_eq(c.syslog_ident, "o2p-main");
    ck_assert_str_eq(c.metrics_listen, "[::1]:9187");
    config_free(&c);

    static const struct {
        const char *text;
        int64_t ms;
    } durations[] = {{"1ms", 1}, {"7s", 7000}, {"2min", 120000}, {"1h", 3600000}, {"250 ms", 250}, {"1000", 1000}};
    for (size_t i = 0; i < sizeof durations / sizeof durations[0]; i++) {
        char text[128];
        snprintf(text, sizeof text, "[replication]\nflush_interval = %s\n", durations[i].text);
        load_ok(text, &c);
        ck_assert_msg(c.flush_interval_ms == durations[i].ms, "%s -> %lld", durations[i].text,
                      (long long)c.flush_interval_ms);
        config_free(&c);
    }
    load_ok("[logging]\nprogress_interval = 0\n", &c);
    ck_assert_int_eq(c.progress_interval_ms, 0);
    config_free(&c);
    load_ok("[logging]\nprogress_interval = 1500ms\n", &c);
    ck_assert_int_eq(c.progress_interval_ms, 1500);
    config_free(&c);

    static const struct {
        const char *text;
        int64_t bytes;
    } sizes[] = {{"1024", 1024},   {"4096B", 4096},     {"1kB", 1024},   {"3KB", 3072},
                 {"5MB", 5242880}, {"1GB", 1073741824}, {"64 kB", 65536}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char text[128];
        snprintf(text, sizeof text, "[replication]\nbatch_bytes = %s\n", sizes[i].text);
        load_ok(text, &c);
        ck_assert_msg(c.batch_bytes == sizes[i].bytes, "%s -> %lld", sizes[i].text, (long long)c.batch_bytes);
        config_free(&c);
    }

    static const char *const stamps[] = {"auto", "ON", "off"};
    for (size_t i = 0; i < 3; i++) {
        char text[128];
        snprintf(text, sizeof text, "[logging]\ntimestamps = %s\n", stamps[i]);
        load_ok(text, &c);
        ck_assert_int_eq(c.log_timestamps, (int)i);
        config_free(&c);
    }

    /* Bounds are inclusive. */
    load_ok("[replication]\nbatch_rows = 10000000\nbatch_bytes = 1kB\nflush_interval = 1h\n", &c);
    ck_assert_int_eq(c.batch_rows, 10000000);
    ck_assert_int_eq(c.batch_bytes, 1024);
    config_free(&c);

    /* A UTF-8 byte order mark is skipped; CRLF line ends are fine. */
    load_ok("\xEF\xBB\xBF[replication]\r\nbatch_rows = 77\r\n", &c);
    ck_assert_int_eq(c.batch_rows, 77);
    config_free(&c);

    /* An empty list value is an empty list; exclude may be empty. */
    load_ok("[replication]\nexclude =\n", &c);
    ck_assert_uint_eq(c.exclude.count, 0);
    config_free(&c);
}
END_TEST

START_TEST(test_continuation_lines)
{
    config c;
    load_ok("[mongodb]\n"
            "uri = mongodb://db1:27017,db2:27017,\n"
            "      db3:27017/?replicaSet=rs0\n"
            "[postgres]\n"
            "conninfo = host=pg1\n"
            "   ; a comment between\n"
            "   dbname=app\n"
            "[replication]\n"
            "include = a.*,\n"
            "   b.*, c.x\n",
            &c);
    ck_assert_str_eq(c.mongodb_uri, "mongodb://db1:27017,db2:27017,db3:27017/?replicaSet=rs0");
    ck_assert_str_eq(c.postgres_conninfo, "host=pg1 dbname=app");
    ck_assert_uint_eq(c.include.count, 3);
    ck_assert_str_eq(c.include.items[2], "c.x");
    config_free(&c);
}
END_TEST

/* ---- errors
 * ---------------------------------------------------------------------------------------------------------- */

START_TEST(test_errors_name_file_line_key)
{
    expect_error("[replication]\n\nbatch_rows = 10x\n", 3,
                 "[replication] batch_rows: ", "\"10x\" is not a whole number");
    expect_error("[replication]\nbatch_rows = \n", 2, "[replication] batch_rows: ", "is not a whole number");
    expect_error("[replication]\nbatch_rows = 0\n", 2, "[replication] batch_rows: ", "out of range (1 .. 10000000)");
    expect_error("[replication]\nqueue_size = 20000000\n", 2, "[replication] queue_size: ", "out of range");
    expect_error("[replication]\nbatch_bytes = 2GB\n", 2, "[replication] batch_bytes: ", "out of range (1kB .. 1GB)");
    expect_error("[replication]\nbatch_bytes = 512\n", 2, "[replication] batch_bytes: ", "out of range");
    expect_error("[replication]\nbatch_bytes = 5mb\n", 2, "[replication] batch_bytes: ", "unknown unit \"mb\"");
    expect_error("[replication]\nbatch_bytes = 99999999999999999999GB\n", 2,
                 "[replication] batch_bytes: ", "not a whole number");
    expect_error("[replication]\nbatch_bytes = 9000000000000GB\n", 2, "[replication] batch_bytes: ", "out of range");
    expect_error("[replication]\nflush_interval = 10x\n", 2, "[replication] flush_interval: ", "unknown unit \"x\"");
    expect_error("[replication]\nflush_interval = 0\n", 2,
                 "[replication] flush_interval: ", "out of range (1ms .. 1h)");
    expect_error("[replication]\nflush_interval = 2h\n", 2, "[replication] flush_interval: ", "out of range");
    expect_error("[replication]\nflush_interval = 1.5s\n", 2, "[replication] flush_interval: ", "unknown unit");
    expect_error("[replication]\nflush_interval = -5ms\n", 2, "[replication] flush_interval: ", "out of range");
    expect_error("[replication]\napply_mode = fast\n", 2,
                 "[replication] apply_mode: ", "\"fast\" is not one of: batched, per-op");
    expect_error("[logging]\nlevel = loud\n", 2, "[logging] level: ", "is not one of: debug, info");
    expect_error("[logging]\ntimestamps = maybe\n", 2, "[logging] timestamps: ", "is not one of: auto, on, off");
    expect_error("[metrics]\nlisten = 9187\n", 2, "[metrics] listen: ", "is not HOST:PORT");
    expect_error("[metrics]\nlisten = localhost:http\n", 2, "[metrics] listen: ", "port must be a number");
    expect_error("[metrics]\nlisten = [::1:9187\n", 2, "[metrics] listen: ", "[ADDRESS]:PORT");
    expect_error("[replication]\non_error = ignore\n", 2, "[replication] on_error: ", "dead-letter, stop");
    expect_error("[replication]\ninclude = shop\n", 2, "[replication] include: ", "no dot");
    expect_error("[replication]\nexclude = a.*,,b.*\n", 2, "[replication] exclude: ", "empty item");
    expect_error("[replication]\nexclude = ,b.*\n", 2, "[replication] exclude: ", "empty item");
    expect_error("[mongodb]\nuri = mongodb://a,\n   \n[replication]\n", 2, "[mongodb] uri: ", "not a valid");
    expect_error("[replication]\ninclude =\n", 2, "[replication] include: ", "nothing would be replicated");
    expect_error("[replication]\nservice =\n", 2, "[replication] service: ", "1 to 200 characters");
    expect_error("[mongodb]\nuri = http://x\n", 2, "[mongodb] uri: ", "mongodb://");
    expect_error("[mongodb]\nuri = mongodb://\n", 2, "[mongodb] uri: ", "not a valid MongoDB URI");
    expect_error("[postgres]\nconninfo = host=x nosuchoption=1\n", 2,
                 "[postgres] conninfo: ", "not a valid libpq connection string");
    /* unknown keys, sections, keys outside a section */
    expect_error("[replication]\nbatchrows = 5\n", 2, "[replication] batchrows: ", "unknown key");
    expect_error("[logging]\n\n[nosuch]\nx = 1\n", 3, "unknown section [nosuch]", "[logging]");
    expect_error("[nosuch]\n", 1, "unknown section [nosuch]", "sections:");
    expect_error("level = info\n", 1, "level: ", "before any [section]");
    /* duplicates, also across two blocks of the same section and in another case */
    expect_error("[replication]\nbatch_rows = 5\nbatch_rows = 6\n", 3,
                 "[replication] batch_rows: ", "set twice (first on line 2)");
    expect_error("[replication]\nbatch_rows = 5\n[logging]\nlevel=info\n[replication]\nBATCH_ROWS = 6\n", 6,
                 "[replication] batch_rows: ", "set twice (first on line 2)");
    /* syntax */
    expect_error("[replication]\nbatch_rows 5\n", 2, "syntax error", "key = value");
    expect_error("[replication\nbatch_rows = 5\n", 1, "syntax error", "[section]");
    /* an indented line continues the previous value: wrong for an int */
    expect_error("[replication]\nbatch_rows = 5\n  queue_size = 100\n", 3,
                 "[replication] batch_rows: ", "remove the indentation");
    /* the first error wins */
    expect_error("[replication]\nbatch_rows = x\nqueue_size = y\n", 2, "[replication] batch_rows: ", "not a whole");
    expect_error("[replication]\nbatch_rows 5\nqueue_size = y\n", 2, "syntax error", "key = value");
    expect_error("[replication]\nqueue_size = y\nbatch_rows 5\n", 2, "[replication] queue_size: ", "not a whole");

    /* A line longer than libinih's buffer is refused, not split in two. */
    char longtext[600];
    snprintf(longtext, sizeof longtext, "[mongodb]\nuri = mongodb://h/?appname=%0400d\n[replication]\n", 0);
    expect_error(longtext, 2, "line is longer than", "characters");
}
END_TEST

START_TEST(test_missing_file_and_untouched_output)
{
    char err[512] = "";
    config c;
    ck_assert(config_init_defaults(&c));
    c.batch_rows = 42;
    ck_assert(!config_load("/nonexistent/oplog2pg.ini", &c, err, sizeof err));
    ck_assert_msg(strstr(err, "/nonexistent/oplog2pg.ini: cannot open") == err, "%s", err);
    ck_assert_int_eq(c.batch_rows, 42);                   /* failed load leaves the struct alone */
    ck_assert(!config_load("conf", &c, err, sizeof err)); /* a directory opens but cannot be read */
    ck_assert_msg(strstr(err, "conf: read error") == err, "%s", err);
    ck_assert_int_eq(c.batch_rows, 42);
    ck_assert(!load_text("[replication]\nbatch_rows = 7\nqueue_size = 1\n", &c, err, sizeof err, NULL));
    ck_assert_int_eq(c.batch_rows, 42);
    config_free(&c);

    ck_assert(config_load_string("inline", "[replication]\nbatch_rows = 7\n", &c, err, sizeof err));
    ck_assert_int_eq(c.batch_rows, 7);
    config_free(&c);
    ck_assert(!config_load_string("inline", "[replication]\nbatch_rows = 7x\n", &c, err, sizeof err));
    ck_assert_msg(strncmp(err, "inline:2: [replication] batch_rows:", 35) == 0, "%s", err);
}
END_TEST

/* ---- reload
 * ------------------------------------------------------------------------------------------------------------ */

struct logbuf {
    char text[8192];
    int lines;
};

static void collect(void *arg, const char *msg)
{
    struct logbuf *lb = arg;
    size_t used = strlen(lb->text);
    snprintf(lb->text + used, sizeof lb->text - used, "%s\n", msg);
    lb->lines++;
}

START_TEST(test_reload)
{
    char path[64], err[512] = "";
    config c;
    struct logbuf lb = {"", 0};
    int changed = -1;

    write_tmp(path, "[replication]\nbatch_rows = 100\nqueue_size = 1000\n[logging]\nlevel = info\n");
    ck_assert(config_load(path, &c, err, sizeof err));
    ck_assert(config_override(&c, "replication", "service", "from-cli", err, sizeof err));
    ck_assert_str_eq(c.service, "from-cli");

    /* Unchanged file: nothing to say. */
    ck_assert(config_reload(path, &c, err, sizeof err, collect, &lb, &changed));
    ck_assert_int_eq(changed, 0);
    ck_assert_int_eq(lb.lines, 0);
    ck_assert_str_eq(c.service, "from-cli"); /* the override survives a reload */

    FILE *f = fopen(path, "w");
    fputs("[mongodb]\nuri = mongodb://other:27017/\n[replication]\nbatch_rows = 200\nqueue_size = 2000\n"
          "flush_interval = 1s\ninclude = shop.*\n[logging]\nlevel = debug\n",
          f);
    fclose(f);
    ck_assert_msg(config_reload(path, &c, err, sizeof err, collect, &lb, &changed), "%s", err);
    ck_assert_int_eq(changed, 3);
    ck_assert_int_eq(c.batch_rows, 200);             /* reloadable */
    ck_assert_int_eq(c.flush_interval_ms, 1000);     /* reloadable */
    ck_assert_int_eq(c.log_level, CONFIG_LOG_DEBUG); /* reloadable */
    ck_assert_int_eq(c.queue_size, 1000);            /* not reloadable: kept */
    ck_assert_str_eq(c.mongodb_uri, "mongodb://127.0.0.1:27017/?replicaSet=rs0");
    ck_assert_uint_eq(c.include.count, 1);
    ck_assert_str_eq(c.include.items[0], "*.*");
    ck_assert_str_eq(c.service, "from-cli");
    ck_assert_int_eq(lb.lines, 6);
    ck_assert_msg(strstr(lb.text, "[replication] batch_rows changed: 100 -> 200") != NULL, "%s", lb.text);
    ck_assert_msg(strstr(lb.text, "[logging] level changed: info -> debug") != NULL, "%s", lb.text);
    ck_assert_msg(strstr(lb.text, "[replication] queue_size changed in the file to 2000; restart required to apply "
                                  "it (keeping 1000)") != NULL,
                  "%s", lb.text);
    ck_assert_msg(strstr(lb.text, "[mongodb] uri changed in the file") != NULL, "%s", lb.text);
    ck_assert_msg(strstr(lb.text, "[replication] include changed in the file to shop.*") != NULL, "%s", lb.text);
    ck_assert_msg(strstr(lb.text, "service") == NULL, "%s", lb.text);

    /* An invalid file: error, nothing changes. */
    f = fopen(path, "w");
    fputs("[replication]\nbatch_rows = 300\nqueue_size = lots\n", f);
    fclose(f);
    lb.lines = 0;
    ck_assert(!config_reload(path, &c, err, sizeof err, collect, &lb, &changed));
    ck_assert_msg(strstr(err, ":3: [replication] queue_size:") != NULL, "%s", err);
    ck_assert_int_eq(c.batch_rows, 200);
    ck_assert_int_eq(changed, 0);
    ck_assert_int_eq(lb.lines, 0);

    /* A bad override is refused with the option named. */
    ck_assert(!config_override(&c, "replication", "service", "", err, sizeof err));
    ck_assert_msg(strstr(err, "[replication] service:") == err, "%s", err);
    ck_assert(!config_override(&c, "replication", "nope", "1", err, sizeof err));

    unlink(path);
    config_free(&c);
}
END_TEST

/* ---- printing
 * ---------------------------------------------------------------------------------------------------------- */

static char *print_to_string(const config *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    config_print(mem, c);
    fclose(mem);
    return buf;
}

START_TEST(test_print_round_trip)
{
    static const char *const texts[] = {
        "",
        "[mongodb]\nuri = mongodb://a:1,b:2/?replicaSet=x&readPreference=primary\n"
        "[postgres]\nconninfo = host=h port=5433 dbname='my db'\n"
        "[replication]\nservice = s 1\ninclude = a.*, b.c?\nexclude = a.tmp*\nbatch_rows = 7\nbatch_bytes = 1536kB\n"
        "flush_interval = 90s\nqueue_size = 123\napply_mode = per-op\n"
        "[logging]\nlevel = error\nprogress_interval = 0\ntimestamps = off\n",
        "[replication]\nflush_interval = 61000\nbatch_bytes = 1025\n[logging]\nprogress_interval = 2h\n",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        config a, b;
        char err[512] = "";
        load_ok(texts[i], &a);
        char *printed = print_to_string(&a);
        ck_assert_msg(config_load_string("printed", printed, &b, err, sizeof err), "%s\n%s", err, printed);
        assert_same(&a, &b);
        free(printed);
        config_free(&a);
        config_free(&b);
    }

    config c;
    load_ok("[replication]\nflush_interval = 61000\nbatch_bytes = 3072\n", &c);
    char *printed = print_to_string(&c);
    ck_assert_msg(strstr(printed, "flush_interval = 61s\n") != NULL, "%s", printed);
    ck_assert_msg(strstr(printed, "batch_bytes = 3kB\n") != NULL, "%s", printed);
    ck_assert_msg(strstr(printed, "\n[replication]\n") != NULL, "%s", printed);
    free(printed);
    config_free(&c);
}
END_TEST

START_TEST(test_secrets_masked)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"host=h password=s3cret user=u", "host=h password=******** user=u"},
        {"password = 'a b\\' c' dbname=x", "password = ******** dbname=x"},
        {"host=h", "host=h"},
        {"", ""},
        {"postgresql://u:pw@h:5432/db?sslmode=require&password=x",
         "postgresql://u:********@h:5432/db?sslmode=require&password=********"},
        {"postgres://u@h/db", "postgres://u@h/db"},
        {"mongodb://admin:p%40ss@db1,db2/?replicaSet=rs0", "mongodb://admin:********@db1,db2/?replicaSet=rs0"},
        {"mongodb+srv://u:x@cluster.example.com/", "mongodb+srv://u:********@cluster.example.com/"},
    };
    char buf[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_str_eq(config_mask_secrets(cases[i].in, buf, sizeof buf), cases[i].out);
    ck_assert_str_eq(config_mask_secrets("host=h password=secret", buf, 12), "host=h pass"); /* bounded */

    config c;
    load_ok("[mongodb]\nuri = mongodb://admin:topsecret1@db1:27017/?replicaSet=rs0\n"
            "[postgres]\nconninfo = host=pg password=topsecret2 dbname=app\n",
            &c);
    char *printed = print_to_string(&c);
    ck_assert_msg(strstr(printed, "topsecret") == NULL, "secret printed:\n%s", printed);
    ck_assert_msg(strstr(printed, "uri = mongodb://admin:********@db1:27017/?replicaSet=rs0\n") != NULL, "%s", printed);
    ck_assert_msg(strstr(printed, "conninfo = host=pg password=******** dbname=app\n") != NULL, "%s", printed);
    ck_assert_str_eq(c.postgres_conninfo, "host=pg password=topsecret2 dbname=app"); /* the value itself is intact */
    free(printed);

    /* reload messages mask too */
    char path[64], err[512];
    struct logbuf lb = {"", 0};
    write_tmp(path, "[postgres]\nconninfo = host=pg password=topsecret3 dbname=app\n");
    ck_assert(config_reload(path, &c, err, sizeof err, collect, &lb, NULL));
    unlink(path);
    ck_assert_int_eq(lb.lines, 2);
    ck_assert_msg(strstr(lb.text, "topsecret") == NULL, "%s", lb.text);
    config_free(&c);
}
END_TEST

/* ---- docs and sample files
 * ---------------------------------------------------------------------------------------------- */

/* In docs/configuration.md each option is a heading "### `name`" under a heading "## [section]"; its entry, up to
 * the next heading, states the default and whether it is reloadable. */
START_TEST(test_docs_list_every_option)
{
    char *doc = read_all("docs/configuration.md");

    for (size_t i = 0; i < config_option_count(); i++) {
        const config_option_info *o = config_option_at(i);
        char sect[64], head[96], want[256];
        snprintf(sect, sizeof sect, "\n## [%s]", o->section);
        snprintf(head, sizeof head, "\n### `%s`", o->name);
        const char *s = strstr(doc, sect);
        ck_assert_msg(s != NULL, "docs/configuration.md has no \"## [%s]\" heading", o->section);
        const char *next_section = strstr(s + 1, "\n## ");
        const char *h = strstr(s, head);
        ck_assert_msg(h != NULL && (next_section == NULL || h < next_section),
                      "docs/configuration.md: no \"### `%s`\" under [%s]", o->name, o->section);
        const char *end = strstr(h + 1, "\n#");
        size_t n = end ? (size_t)(end - h) : strlen(h);
        char *entry = strndup(h, n);
        if (o->default_text[0] != '\0')
            snprintf(want, sizeof want, "**Default:** `%s`", o->default_text);
        else
            snprintf(want, sizeof want, "**Default:** empty");
        ck_assert_msg(strstr(entry, want) != NULL, "docs entry for [%s] %s lacks \"%s\"", o->section, o->name, want);
        snprintf(want, sizeof want, "**Reloadable:** %s", o->reloadable ? "yes" : "no");
        ck_assert_msg(strstr(entry, want) != NULL, "docs entry for [%s] %s lacks \"%s\"", o->section, o->name, want);
        snprintf(want, sizeof want, "**Type:** %s", o->type_name);
        ck_assert_msg(strstr(entry, want) != NULL, "docs entry for [%s] %s lacks \"%s\"", o->section, o->name, want);
        free(entry);
    }
    free(doc);
}
END_TEST

/* Finds "name =" (or ";name =" / "# name =") at the start of a line inside [section] of an INI text; returns the
 * value text after '=' (up to the end of the line) in val, or false. */
static bool ini_mentions(const char *text, const char *section, const char *name, char *val, size_t vallen)
{
    char head[64];
    snprintf(head, sizeof head, "[%s]", section);
    bool in = false;
    const char *line = text;
    while (line && *line) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (len >= strlen(head) && strncmp(line, head, strlen(head)) == 0)
            in = true;
        else if (line[0] == '[')
            in = false;
        else if (in) {
            const char *p = line;
            while (p < line + len && (*p == ';' || *p == '#' || *p == ' '))
                p++;
            size_t nlen = strlen(name);
            if ((size_t)(line + len - p) > nlen && strncmp(p, name, nlen) == 0) {
                const char *q = p + nlen;
                while (*q == ' ')
                    q++;
                if (*q == '=') {
                    q++;
                    while (*q == ' ')
                        q++;
                    snprintf(val, vallen, "%.*s", (int)(line + len - q), q);
                    return true;
                }
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return false;
}

START_TEST(test_sample_ini_lists_every_option_at_its_default)
{
    char *text = read_all("conf/oplog2pg.ini");
    char val[1024], err[1024] = "";

    for (size_t i = 0; i < config_option_count(); i++) {
        const config_option_info *o = config_option_at(i);
        ck_assert_msg(ini_mentions(text, o->section, o->name, val, sizeof val),
                      "conf/oplog2pg.ini does not list [%s] %s", o->section, o->name);
        ck_assert_msg(strcmp(val, o->default_text) == 0, "conf/oplog2pg.ini: [%s] %s = \"%s\", default is \"%s\"",
                      o->section, o->name, val, o->default_text);
    }

    /* The file as shipped parses to exactly the defaults ... */
    config parsed, defaults, uncommented;
    ck_assert_msg(config_load("conf/oplog2pg.ini", &parsed, err, sizeof err), "%s", err);
    ck_assert(config_init_defaults(&defaults));
    assert_same(&parsed, &defaults);

    /* ... and so does it with every ";name = value" line switched on. */
    char *on = strdup(text);
    for (char *line = on; line && *line;) {
        if (line[0] == ';' && line[1] >= 'a' && line[1] <= 'z')
            line[0] = ' ', memmove(line, line + 1, strlen(line)); /* drop the ';' */
        char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : NULL;
    }
    ck_assert_msg(config_load_string("conf/oplog2pg.ini (switched on)", on, &uncommented, err, sizeof err), "%s", err);
    assert_same(&uncommented, &defaults);

    free(on);
    free(text);
    config_free(&parsed);
    config_free(&defaults);
    config_free(&uncommented);
}
END_TEST

START_TEST(test_minimal_ini_parses)
{
    char err[1024] = "";
    config c;
    ck_assert_msg(config_load("conf/oplog2pg-minimal.ini", &c, err, sizeof err), "%s", err);
    ck_assert_str_ne(c.postgres_conninfo, ""); /* the minimal file is about what a user must set */
    config_free(&c);
}
END_TEST

Suite *config_suite(void); /* called by the generated runner list */

Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_table);
    tcase_add_test(tc, test_types_and_units);
    tcase_add_test(tc, test_continuation_lines);
    tcase_add_test(tc, test_errors_name_file_line_key);
    tcase_add_test(tc, test_missing_file_and_untouched_output);
    tcase_add_test(tc, test_reload);
    tcase_add_test(tc, test_print_round_trip);
    tcase_add_test(tc, test_secrets_masked);
    suite_add_tcase(s, tc);

    TCase *files = tcase_create("files");
    tcase_set_timeout(files, 20);
    tcase_add_test(files, test_docs_list_every_option);
    tcase_add_test(files, test_sample_ini_lists_every_option_at_its_default);
    tcase_add_test(files, test_minimal_ini_parses);
    suite_add_tcase(s, files);
    return s;
}

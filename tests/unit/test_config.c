/*
 * test_config.c — the configuration module: defaults, every type and unit, errors that name file/line/key,
 * duplicates, continuation lines, reload (reloadable options only), print round trip, masked secrets, and the check
 * that docs/configuration.md and conf/oplog2pg.ini list every option of the table (run from the repository root).
 * Two test cases take the module's parts alone: "values" the value parsers (config_values.h), "ini" the INI reader
 * with a handler of its own (config_ini.h).
 */
#include <check.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../lib/textfile.h"
#include "daemon/config.h"
#include "daemon/config_ini.h"
#include "daemon/config_values.h"
#include "sink/pg.h"

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
    ck_assert_int_eq(a->batch_tables, b->batch_tables);
    ck_assert_int_eq(a->postgres_max_prepared, b->postgres_max_prepared);
    ck_assert_int_eq(a->flush_interval_ms, b->flush_interval_ms);
    ck_assert_int_eq(a->catchup_interval_ms, b->catchup_interval_ms);
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
    ck_assert_int_eq(c.batch_rows, 100000);
    ck_assert_int_eq(c.batch_bytes, 8 * 1024 * 1024);
    ck_assert_int_eq(c.batch_tables, 0);                          /* auto */
    ck_assert_int_eq(c.postgres_max_prepared, SINK_MAX_PREPARED); /* the sink's own bound, named */
    ck_assert_int_eq(c.flush_interval_ms, 200);
    ck_assert_int_eq(c.catchup_interval_ms, 1000);
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
        /* type_name is what messages and docs call the type: it must be the name of type. */
        static const char *const type_names[] = {
            [CONFIG_TYPE_STRING] = "string", [CONFIG_TYPE_INT] = "int",           [CONFIG_TYPE_BOOL] = "bool",
            [CONFIG_TYPE_ENUM] = "enum",     [CONFIG_TYPE_DURATION] = "duration", [CONFIG_TYPE_SIZE] = "size",
            [CONFIG_TYPE_LIST] = "list",
        };
        ck_assert_msg((size_t)o->type < sizeof type_names / sizeof type_names[0] &&
                          strcmp(o->type_name, type_names[o->type]) == 0,
                      "[%s] %s: type_name \"%s\" does not match its type", o->section, o->name, o->type_name);
    }
    ck_assert_int_ge(config_option_find("replication", "batch_rows"), 0);
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

/* Two rows for one [section] key (names are case-insensitive, as in the file) would leave the second unreachable:
 * the file, config_override and config_option_find all reach the first. Compared row by row, not through
 * config_option_find, whose answer is the first row by construction. */
START_TEST(test_table_has_no_duplicate_options)
{
    size_t n = config_option_count();

    for (size_t i = 0; i < n; i++) {
        const config_option_info *a = config_option_at(i);
        for (size_t j = i + 1; j < n; j++) {
            const config_option_info *b = config_option_at(j);
            ck_assert_msg(strcasecmp(a->section, b->section) != 0 || strcasecmp(a->name, b->name) != 0,
                          "options %zu and %zu are both [%s] %s", i, j, a->section, a->name);
        }
    }
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

    /* batch_tables: a number, or auto (in any case) for 0, which oplog2pg fills in; 0 itself is out of range. */
    load_ok("[replication]\nbatch_tables = 2500\n", &c);
    ck_assert_int_eq(c.batch_tables, 2500);
    config_free(&c);
    load_ok("[replication]\nbatch_tables = AUTO\n", &c);
    ck_assert_int_eq(c.batch_tables, 0);
    config_free(&c);
    load_ok("[postgres]\nmax_prepared_statements = 4000\n", &c);
    ck_assert_int_eq(c.postgres_max_prepared, 4000);
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
    expect_error("[replication]\nbatch_tables = 0\n", 2, "[replication] batch_tables: ", "out of range (1 .. 1000000)");
    expect_error("[postgres]\nmax_prepared_statements = 0\n", 2,
                 "[postgres] max_prepared_statements: ", "out of range (1 .. 1000000)");
    expect_error("[replication]\nbatch_tables = some\n", 2,
                 "[replication] batch_tables: ", "\"some\" is not a whole number or auto");
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

/* The unknown-section message lists every section of the table, in the table's order. */
START_TEST(test_unknown_section_lists_every_section)
{
    char want[512] = "unknown section [nosuch] (sections: ";
    const char *last = NULL;
    for (size_t i = 0; i < config_option_count(); i++) {
        const char *sect = config_option_at(i)->section;
        if (last != NULL && strcmp(last, sect) == 0)
            continue;
        if (last != NULL)
            strcat(want, ", ");
        strcat(want, "[");
        strcat(want, sect);
        strcat(want, "]");
        last = sect;
    }
    strcat(want, ")");
    ck_assert_msg(strstr(want, "[copy]") != NULL && strstr(want, "[metrics]") != NULL, "%s", want);

    char err[1024], path[64], full[700];
    config c = {0};
    ck_assert(!load_text("[replication]\nbatch_rows = 5\n[nosuch]\nx = 1\n", &c, err, sizeof err, path));
    snprintf(full, sizeof full, "%s:3: %s", path, want);
    ck_assert_str_eq(err, full);
    /* As docs/configuration.md shows it. */
    char *doc = read_all("docs/configuration.md");
    snprintf(full, sizeof full, "/etc/oplog2pg/oplog2pg.ini:20: unknown section [loging] %s", strchr(want, '('));
    ck_assert_msg(strstr(doc, full) != NULL, "docs/configuration.md lacks\n%s", full);
    free(doc);
}
END_TEST

/* An indented section header is a section header, as it is unindented: also below a key (where an indented line
 * would otherwise continue the key's value). */
START_TEST(test_indented_section_headers)
{
    expect_error("  [nosuch]\nx = 1\n", 1, "unknown section [nosuch]", "sections: [mongodb]");
    expect_error("\t[nosuch]\n", 1, "unknown section [nosuch]", "sections: [mongodb]");
    expect_error("[logging]\nlevel = info\n\n  [nosuch]\nx = 1\n", 4, "unknown section [nosuch]", "[metrics]");
    expect_error("[replication]\ninclude = a.*,\n  b.*\n \t[nosuch]\n", 4, "unknown section [nosuch]", "[copy]");

    config c;
    load_ok("  [replication]\n  batch_rows = 5\n\t[logging]\nlevel = debug\n", &c);
    ck_assert_int_eq(c.batch_rows, 5);
    ck_assert_int_eq(c.log_level, CONFIG_LOG_DEBUG);
    config_free(&c);
    load_ok("[replication]\ninclude = a.*,\n  b.*\n  [logging]\nlevel = debug\n [postgres]\nconninfo = host=h\n", &c);
    ck_assert_uint_eq(c.include.count, 2);
    ck_assert_int_eq(c.log_level, CONFIG_LOG_DEBUG);
    ck_assert_str_eq(c.postgres_conninfo, "host=h");
    config_free(&c);
    /* A key given again below an indented header of its section is still a duplicate. */
    expect_error("[replication]\nbatch_rows = 5\n  [replication]\nbatch_rows = 6\n", 4,
                 "[replication] batch_rows: ", "set twice (first on line 2)");
}
END_TEST

/* docs/configuration.md: "a key given twice (even in two blocks of the same section) are errors", also with the same
 * value and in another case, for every option of the table; the error is at the second line and names the first. */
START_TEST(test_duplicate_keys_refused)
{
    for (size_t i = 0; i < config_option_count(); i++) {
        const config_option_info *o = config_option_at(i);
        char text[512], upper[64], prefix[128];
        size_t k;
        for (k = 0; k < sizeof upper - 1 && o->name[k] != '\0'; k++)
            upper[k] = (char)toupper((unsigned char)o->name[k]);
        upper[k] = '\0';
        snprintf(prefix, sizeof prefix, "[%s] %s: ", o->section, o->name);

        snprintf(text, sizeof text, "[%s]\n%s = %s\n%s = %s\n", o->section, o->name, o->default_text, o->name,
                 o->default_text);
        expect_error(text, 3, prefix, "set twice (first on line 2)");
        snprintf(text, sizeof text, "[%s]\n%s = %s\n; between\n\n%s = %s\n", o->section, o->name, o->default_text,
                 upper, o->default_text);
        expect_error(text, 5, prefix, "set twice (first on line 2)");
        snprintf(text, sizeof text, "[%s]\n%s = %s\n[postgres]\n[%s]\n%s = %s\n", o->section, o->name, o->default_text,
                 o->section, upper, o->default_text);
        expect_error(text, 5, prefix, "set twice (first on line 2)");
    }

    /* After a value continued over two lines, the first line is the one named. */
    expect_error("[replication]\ninclude = a.*,\n  b.*\nexclude = c.*\ninclude = d.*\n", 5,
                 "[replication] include: ", "set twice (first on line 2)");
    /* The first duplicate is the error, not a later one. */
    expect_error("[logging]\nlevel = info\nlevel = info\n[replication]\nbatch_rows = 1\nbatch_rows = 2\n", 3,
                 "[logging] level: ", "set twice (first on line 2)");

    /* Not a duplicate: an indented line continues the key above it. */
    config c;
    load_ok("[replication]\ninclude = a.*,\n  b.*,\n  c.*\n", &c);
    ck_assert_uint_eq(c.include.count, 3);
    config_free(&c);
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

static char *print_to_string(const config *c);

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

/* A refused config_override changes nothing: not the option, not the other options, not the overrides a reload
 * applies again; and it runs the checks of the whole configuration that a load runs. */
/* [mongodb] source and change_stream_updates: auto by default, each choice parsed, others refused with the list; both
 * take effect at a restart only (a reload keeps the running value and says so). */
START_TEST(test_source_options)
{
    config c;
    ck_assert(config_init_defaults(&c));
    ck_assert_int_eq(c.source, CONFIG_SOURCE_AUTO);
    ck_assert_int_eq(c.change_stream_updates, CONFIG_STREAM_UPDATES_AUTO);
    config_free(&c);
    load_ok("[mongodb]\nsource = change_stream\nchange_stream_updates = description\n", &c);
    ck_assert_int_eq(c.source, CONFIG_SOURCE_CHANGE_STREAM);
    ck_assert_int_eq(c.change_stream_updates, CONFIG_STREAM_UPDATES_DESCRIPTION);
    config_free(&c);
    load_ok("[mongodb]\nsource = oplog\nchange_stream_updates = raw\n", &c);
    ck_assert_int_eq(c.source, CONFIG_SOURCE_OPLOG);
    ck_assert_int_eq(c.change_stream_updates, CONFIG_STREAM_UPDATES_RAW);
    config_free(&c);
    expect_error("[mongodb]\nsource = changestream\n", 2, "[mongodb] source",
                 "is not one of: auto, oplog, change_stream");
    expect_error("[mongodb]\nchange_stream_updates = diff\n", 2, "[mongodb] change_stream_updates",
                 "is not one of: auto, raw, description");

    char path[64], err[512] = "";
    struct logbuf lb = {"", 0};
    int changed = -1;
    write_tmp(path, "[mongodb]\nsource = oplog\n");
    ck_assert(config_load(path, &c, err, sizeof err));
    FILE *f = fopen(path, "w");
    fputs("[mongodb]\nsource = change_stream\nchange_stream_updates = raw\n", f);
    fclose(f);
    ck_assert_msg(config_reload(path, &c, err, sizeof err, collect, &lb, &changed), "%s", err);
    ck_assert_int_eq(changed, 0);
    ck_assert_int_eq(c.source, CONFIG_SOURCE_OPLOG);
    ck_assert_int_eq(c.change_stream_updates, CONFIG_STREAM_UPDATES_AUTO);
    ck_assert_msg(strstr(lb.text, "[mongodb] source changed in the file to change_stream; restart required to apply "
                                  "it (keeping oplog)") != NULL,
                  "%s", lb.text);
    ck_assert_msg(strstr(lb.text, "[mongodb] change_stream_updates changed in the file to raw; restart required") !=
                      NULL,
                  "%s", lb.text);
    config_free(&c);
    unlink(path);
}
END_TEST

START_TEST(test_failed_override_changes_nothing)
{
    static const struct {
        const char *section, *name, *value, *needle;
    } bad[] = {
        {"replication", "service", "", "[replication] service: a service name has 1 to 200 characters"},
        {"replication", "service", "a\tb", "[replication] service: "},
        {"replication", "include", "", "[replication] include: is empty, so nothing would be replicated"},
        {"replication", "include", " ", "[replication] include: is empty"},
        {"replication", "include", "shop", "[replication] include: "},
        {"replication", "exclude", "a.*,,b.*", "[replication] exclude: "},
        {"replication", "batch_rows", "0", "[replication] batch_rows: "},
        {"replication", "apply_mode", "fast", "[replication] apply_mode: "},
        {"postgres", "conninfo", "host=x nosuchoption=1", "[postgres] conninfo: "},
        {"metrics", "listen", "9187", "[metrics] listen: "},
        {"logging", "syslog_ident", "", "[logging] syslog_ident: "},
        {"replication", "nope", "1", "[replication] nope: unknown option"},
    };
    char path[64], err[1024] = "";
    config c;

    write_tmp(path, "[replication]\nservice = s1\ninclude = a.*, b.*\nexclude = a.tmp\nbatch_rows = 7\n");
    ck_assert(config_load(path, &c, err, sizeof err));
    char *before = print_to_string(&c);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(!config_override(&c, bad[i].section, bad[i].name, bad[i].value, err, sizeof err),
                      "accepted [%s] %s = \"%s\"", bad[i].section, bad[i].name, bad[i].value);
        ck_assert_msg(strstr(err, bad[i].needle) == err, "[%s] %s = \"%s\": error \"%s\" lacks \"%s\"", bad[i].section,
                      bad[i].name, bad[i].value, err, bad[i].needle);
        char *after = print_to_string(&c);
        ck_assert_msg(strcmp(after, before) == 0, "[%s] %s = \"%s\" changed the configuration:\n%s", bad[i].section,
                      bad[i].name, bad[i].value, after);
        free(after);
        ck_assert_msg(c.overrides == NULL, "[%s] %s = \"%s\" is remembered", bad[i].section, bad[i].name, bad[i].value);
    }
    free(before);
    ck_assert_str_eq(c.service, "s1");
    ck_assert_uint_eq(c.include.count, 2);
    ck_assert_int_eq(c.batch_rows, 7);

    /* A good override, then a bad one of the same option: the good one stays, and a reload applies it again. */
    ck_assert_msg(config_override(&c, "replication", "service", "from-cli", err, sizeof err), "%s", err);
    ck_assert(!config_override(&c, "replication", "service", "", err, sizeof err));
    ck_assert(!config_override(&c, "replication", "include", "", err, sizeof err));
    ck_assert_str_eq(c.service, "from-cli");
    ck_assert_uint_eq(c.include.count, 2);
    int svc = config_option_find("replication", "service"), inc = config_option_find("replication", "include");
    ck_assert_str_eq(c.overrides[svc], "from-cli");
    ck_assert_ptr_null(c.overrides[inc]);
    ck_assert_msg(config_reload(path, &c, err, sizeof err, NULL, NULL, NULL), "%s", err);
    ck_assert_str_eq(c.service, "from-cli");
    ck_assert_uint_eq(c.include.count, 2);
    config_free(&c);
    unlink(path);
}
END_TEST

/* config_reload applies the overrides to the new file and checks the result as a whole: an override that the new
 * file makes invalid is an error, and the running configuration stays as it was. */
START_TEST(test_reload_checks_overrides_with_the_file)
{
    char path[64], pw[64], err[1024] = "", text[256];
    config c;

    write_tmp(pw, "from-file\n");
    write_tmp(path, "[replication]\nbatch_rows = 7\n");
    ck_assert(config_load(path, &c, err, sizeof err));
    ck_assert_msg(config_override(&c, "mongodb", "uri", "mongodb://u:inline@db1/?replicaSet=rs0", err, sizeof err),
                  "%s", err);
    /* The new file alone is valid; with the override its uri holds a password and password_file is set too. */
    snprintf(text, sizeof text,
             "[mongodb]\nuri = mongodb://u@db1/?replicaSet=rs0\npassword_file = %s\n[replication]\nbatch_rows = 8\n",
             pw);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    config fresh;
    ck_assert_msg(config_load(path, &fresh, err, sizeof err), "%s", err);
    config_free(&fresh);
    ck_assert(!config_reload(path, &c, err, sizeof err, NULL, NULL, NULL));
    ck_assert_msg(strstr(err, ":3: [mongodb] password_file: ") != NULL && strstr(err, "already holds a password"), "%s",
                  err);
    ck_assert_int_eq(c.batch_rows, 7);
    ck_assert_str_eq(c.mongodb_uri, "mongodb://u:inline@db1/?replicaSet=rs0");
    config_free(&c);
    unlink(path);
    unlink(pw);
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
        "[replication]\nbatch_tables = 2500\n",
        "[postgres]\nmax_prepared_statements = 2500\n",
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
    ck_assert_msg(strstr(printed, "batch_tables = auto\n") != NULL, "%s", printed);
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

/* ---- value syntax (daemon/config_values.h), one parser at a time --------------------------------------------------
 */

/* Option descriptions made for these tests, so that bounds are wide and each unit rule is seen alone. */
static const config_option_info int_opt = {
    .section = "t", .name = "n", .type = CONFIG_TYPE_INT, .type_name = "int", .min = -100, .max = 100};
static const config_option_info int_wide_opt = {
    .section = "t", .name = "n", .type = CONFIG_TYPE_INT, .type_name = "int", .min = INT64_MIN, .max = INT64_MAX};
static const config_option_info dur_s_opt = {.section = "t",
                                             .name = "d",
                                             .type = CONFIG_TYPE_DURATION,
                                             .type_name = "duration",
                                             .min = 0,
                                             .max = INT64_MAX,
                                             .base_unit = "s"};
static const config_option_info dur_ms_opt = {.section = "t",
                                              .name = "d",
                                              .type = CONFIG_TYPE_DURATION,
                                              .type_name = "duration",
                                              .min = 0,
                                              .max = INT64_MAX,
                                              .base_unit = "ms"};
static const config_option_info size_opt = {
    .section = "t", .name = "s", .type = CONFIG_TYPE_SIZE, .type_name = "size", .min = INT64_MIN, .max = INT64_MAX};

static int64_t number_ok(const config_option_info *o, const char *text)
{
    int64_t v = -12345;
    char err[256] = "";
    ck_assert_msg(config_parse_number(o, text, &v, err, sizeof err), "%s \"%s\": %s", o->type_name, text, err);
    return v;
}

/* Parsing fails, err holds needle, and the output is left alone. */
static void number_bad(const config_option_info *o, const char *text, const char *needle)
{
    int64_t v = -12345;
    char err[256] = "";
    ck_assert_msg(!config_parse_number(o, text, &v, err, sizeof err), "%s \"%s\" accepted", o->type_name, text);
    ck_assert_msg(strstr(err, needle) != NULL, "%s \"%s\": error \"%s\" lacks \"%s\"", o->type_name, text, err, needle);
    ck_assert_int_eq(v, -12345);
}

START_TEST(test_value_numbers)
{
    ck_assert_int_eq(number_ok(&int_opt, "5"), 5);
    ck_assert_int_eq(number_ok(&int_opt, "  42  "), 42);
    ck_assert_int_eq(number_ok(&int_opt, "+7"), 7);
    ck_assert_int_eq(number_ok(&int_opt, "-100"), -100); /* bounds are inclusive */
    ck_assert_int_eq(number_ok(&int_opt, "100"), 100);
    number_bad(&int_opt, "101", "101 is out of range (-100 .. 100)");
    number_bad(&int_opt, "-101", "out of range");
    number_bad(&int_opt, "5ms", "\"5ms\" is not a whole number");
    number_bad(&int_opt, "", "\"\" is not a whole number");
    number_bad(&int_opt, "+", "is not a whole number");
    number_bad(&int_opt, "- 5", "is not a whole number");
    number_bad(&int_opt, "0x10", "is not a whole number");
    number_bad(&int_opt, "1e3", "is not a whole number");
    number_bad(&int_opt, "1 000", "is not a whole number");
    number_bad(&int_opt, "99999999999999999999", "is not a whole number");
    char err[256];
    int64_t v;
    ck_assert(!config_parse_number(&int_opt, "x", &v, err, sizeof err));
    ck_assert_msg(strstr(err, "unit") == NULL, "an int has no unit: %s", err);

    /* Durations: a bare number is in the base unit. */
    ck_assert_int_eq(number_ok(&dur_s_opt, "7"), 7000);
    ck_assert_int_eq(number_ok(&dur_ms_opt, "7"), 7);
    ck_assert_int_eq(number_ok(&dur_s_opt, "7ms"), 7);
    ck_assert_int_eq(number_ok(&dur_s_opt, "7 min"), 420000);
    ck_assert_int_eq(number_ok(&dur_s_opt, "2h"), 7200000);
    ck_assert_int_eq(number_ok(&dur_s_opt, "0"), 0);
    number_bad(&dur_s_opt, "1.5s", "\"1.5s\" has an unknown unit \".5s\" (valid units: ms, s, min, h)");
    number_bad(&dur_s_opt, "5S", "unknown unit \"S\""); /* units are case-sensitive */
    number_bad(&dur_s_opt, "5 sec", "unknown unit \"sec\"");
    number_bad(&dur_s_opt, "h", "\"h\" is not a whole number with an optional unit");
    number_bad(&dur_s_opt, "-1s", "out of range");
    /* A product past int64 is out of range, not wrapped around. */
    number_bad(&dur_s_opt, "9223372036854775807h", "out of range");
    number_bad(&dur_ms_opt, "9223372036854775807s", "out of range");
    ck_assert_int_eq(number_ok(&dur_ms_opt, "9223372036854775807"), INT64_MAX);

    /* Sizes: a bare number is bytes; kB and KB are 1024; other spellings are errors. */
    ck_assert_int_eq(number_ok(&size_opt, "1024"), 1024);
    ck_assert_int_eq(number_ok(&size_opt, "1B"), 1);
    ck_assert_int_eq(number_ok(&size_opt, "1kB"), 1024);
    ck_assert_int_eq(number_ok(&size_opt, "1KB"), 1024);
    ck_assert_int_eq(number_ok(&size_opt, "3 MB"), 3 * 1024 * 1024);
    ck_assert_int_eq(number_ok(&size_opt, "2GB"), INT64_C(2) * 1024 * 1024 * 1024);
    ck_assert_int_eq(number_ok(&size_opt, "-1kB"), -1024); /* the bounds decide about a sign */
    number_bad(&size_opt, "1mb", "\"1mb\" has an unknown unit \"mb\" (valid units: B, kB, MB, GB)");
    number_bad(&size_opt, "1K", "unknown unit \"K\"");
    number_bad(&size_opt, "-9223372036854775807GB", "out of range");
    number_bad(&size_opt, "9000000000000GB", "out of range");
}
END_TEST

START_TEST(test_value_number_format)
{
    static const struct {
        const config_option_info *o;
        int64_t v;
        const char *text;
    } cases[] = {
        {&dur_s_opt, 0, "0"},
        {&dur_s_opt, 1, "1ms"},
        {&dur_s_opt, 1500, "1500ms"},
        {&dur_s_opt, 61000, "61s"},
        {&dur_s_opt, 120000, "2min"},
        {&dur_s_opt, 90000, "90s"},
        {&dur_s_opt, 3600000, "1h"},
        {&size_opt, -2048, "-2kB"},
        {&dur_ms_opt, 3000, "3s"},
        {&size_opt, 0, "0"},
        {&size_opt, 1, "1B"},
        {&size_opt, 1025, "1025B"},
        {&size_opt, 1024, "1kB"},
        {&size_opt, 1536 * 1024, "1536kB"},
        {&size_opt, 8 * 1024 * 1024, "8MB"},
        {&size_opt, INT64_C(1) << 30, "1GB"},
        {&int_wide_opt, 3000, "3000"},
        {&int_wide_opt, 1024, "1024"},
        {&int_opt, -5, "-5"},
        {&int_opt, 0, "0"},
    };
    char buf[64];

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        config_format_number(cases[i].o, cases[i].v, buf, sizeof buf);
        ck_assert_msg(strcmp(buf, cases[i].text) == 0, "%s %lld printed \"%s\", not \"%s\"", cases[i].o->type_name,
                      (long long)cases[i].v, buf, cases[i].text);
        /* and it reads back to the same value */
        ck_assert_int_eq(number_ok(cases[i].o, buf), cases[i].v);
    }
    config_format_number(&size_opt, 1024, buf, 3); /* bounded */
    ck_assert_str_eq(buf, "1k");
}
END_TEST

START_TEST(test_value_bool)
{
    static const char *const yes[] = {"on", "ON", "True", "yEs", "1"};
    static const char *const no[] = {"off", "Off", "FALSE", "no", "0"};
    static const char *const bad[] = {"", "2", "onn", "y", "n", "enabled", " on"};
    char err[256];
    bool v;

    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        v = false;
        ck_assert_msg(config_parse_bool(yes[i], &v, err, sizeof err) && v, "\"%s\" is not true", yes[i]);
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        v = true;
        ck_assert_msg(config_parse_bool(no[i], &v, err, sizeof err) && !v, "\"%s\" is not false", no[i]);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = true;
        err[0] = '\0';
        ck_assert_msg(!config_parse_bool(bad[i], &v, err, sizeof err), "\"%s\" accepted", bad[i]);
        ck_assert_msg(v, "a refused value wrote the output");
        ck_assert_msg(strstr(err, "is not a boolean (on/off, true/false, yes/no, 1/0)") != NULL, "%s", err);
    }
}
END_TEST

START_TEST(test_value_enum)
{
    static const char *const names[] = {"alpha", "beta", "gamma", NULL};
    const config_option_info o = {
        .section = "t", .name = "e", .type = CONFIG_TYPE_ENUM, .type_name = "enum", .choices = names};
    char err[256];
    int v = -1;

    ck_assert(config_parse_enum(&o, "alpha", &v, err, sizeof err));
    ck_assert_int_eq(v, 0);
    ck_assert(config_parse_enum(&o, "GAMMA", &v, err, sizeof err));
    ck_assert_int_eq(v, 2);
    v = 7;
    ck_assert(!config_parse_enum(&o, "delta", &v, err, sizeof err));
    ck_assert_str_eq(err, "\"delta\" is not one of: alpha, beta, gamma");
    ck_assert_int_eq(v, 7);
    ck_assert(!config_parse_enum(&o, "", &v, err, sizeof err));
    ck_assert(!config_parse_enum(&o, "alph", &v, err, sizeof err));
}
END_TEST

/* A list item check for the tests: refuses items that start with 'x', and counts its calls. */
static int list_checks;

static bool refuse_x(const char *item, char *err, size_t errlen)
{
    list_checks++;
    if (item[0] == 'x') {
        snprintf(err, errlen, "no x please: \"%s\"", item);
        return false;
    }
    return true;
}

/* Appends text to a fresh list; on success the items are joined with "|" in out. */
static bool list_parse(const char *text, char *out, size_t outlen, char *err, size_t errlen)
{
    config_list l = {0};
    bool ok = config_list_append(&l, text, refuse_x, err, errlen);

    out[0] = '\0';
    if (ok) {
        ck_assert_ptr_nonnull(l.items);
        ck_assert_ptr_null(l.items[l.count]);
        for (size_t i = 0; i < l.count; i++)
            snprintf(out + strlen(out), outlen - strlen(out), "%s%s", i ? "|" : "", l.items[i]);
    }
    config_list_clear(&l);
    ck_assert(l.items == NULL && l.count == 0);
    return ok;
}

START_TEST(test_value_list)
{
    static const struct {
        const char *text, *items;
    } good[] = {
        {"a", "a"},  {"a, b ,c", "a|b|c"}, {"  a.* ,\tb  ", "a.*|b"}, {"", ""}, {"   ", ""},
        {"a,", "a"}, {"a, ", "a"},         {"a b, c", "a b|c"},
    };
    static const char *const bad[] = {",", "a,,b", ",a", "a, ,b", " , "};
    char out[256], err[256];

    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        ck_assert_msg(list_parse(good[i].text, out, sizeof out, err, sizeof err), "\"%s\": %s", good[i].text, err);
        ck_assert_msg(strcmp(out, good[i].items) == 0, "\"%s\" -> \"%s\", not \"%s\"", good[i].text, out,
                      good[i].items);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(!list_parse(bad[i], out, sizeof out, err, sizeof err), "\"%s\" accepted", bad[i]);
        ck_assert_msg(strstr(err, "has an empty item (items are separated by commas)") != NULL, "%s", err);
    }

    /* The check sees each item trimmed; a refused item stops the list, keeping the items before it. */
    config_list l = {0};
    list_checks = 0;
    ck_assert(!config_list_append(&l, "a, xb , c", refuse_x, err, sizeof err));
    ck_assert_str_eq(err, "no x please: \"xb\"");
    ck_assert_int_eq(list_checks, 2);
    ck_assert_uint_eq(l.count, 1);
    ck_assert_str_eq(l.items[0], "a");
    config_list_clear(&l);

    /* Appending continues a list: a trailing comma, then the next items. */
    ck_assert(config_list_append(&l, "a.*,", NULL, err, sizeof err));
    ck_assert(config_list_append(&l, "b.*, c.*", NULL, err, sizeof err));
    ck_assert_uint_eq(l.count, 3);
    ck_assert_str_eq(l.items[2], "c.*");
    ck_assert_ptr_null(l.items[3]);
    config_list_clear(&l);
    config_list_clear(&l); /* twice is harmless */
}
END_TEST

/* ---- the INI reader (daemon/config_ini.h), with a handler that records what it is given ------------------------ */

struct ini_record {
    char log[4096];
};

static void ini_log(struct ini_record *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void ini_log(struct ini_record *r, const char *fmt, ...)
{
    va_list ap;
    size_t used = strlen(r->log);

    va_start(ap, fmt);
    vsnprintf(r->log + used, sizeof r->log - used, fmt, ap);
    va_end(ap);
}

/* Section "bad" is refused; every section is logged as "S name". */
static bool rec_section(void *arg, const char *name, char *err, size_t errlen)
{
    ini_log(arg, "S %s\n", name);
    if (strcmp(name, "bad") == 0) {
        snprintf(err, errlen, "no section [%s]", name);
        return false;
    }
    return true;
}

/* Key "bad" is refused with a message, key "quiet" without one; every key is logged as "K LINE section name=value",
 * with " +" for a continuation. */
static bool rec_key(void *arg, const char *section, const char *name, const char *value, bool continuation, int line,
                    char *err, size_t errlen)
{
    ini_log(arg, "K %d %s %s=%s%s\n", line, section, name, value, continuation ? " +" : "");
    if (strcmp(name, "bad") == 0) {
        snprintf(err, errlen, "no key %s", name);
        return false;
    }
    return strcmp(name, "quiet") != 0;
}

/* Reads text through config_ini_parse, from a string (via_file false) or from a file; the source is named "T". */
static bool ini_run(const char *text, bool via_file, struct ini_record *rec, char *err, size_t errlen)
{
    const config_ini_handler h = {.section = rec_section, .key = rec_key, .arg = rec};
    bool ok;

    rec->log[0] = '\0';
    err[0] = '\0';
    if (!via_file)
        return config_ini_parse("T", NULL, text, &h, err, errlen);
    char path[64];
    write_tmp(path, text);
    FILE *fp = fopen(path, "r");
    ck_assert_ptr_nonnull(fp);
    ok = config_ini_parse("T", fp, NULL, &h, err, errlen);
    fclose(fp);
    unlink(path);
    return ok;
}

/* Reads text both ways: both must give want_log, and want_err ("" = success). */
static void ini_expect(const char *text, const char *want_log, const char *want_err)
{
    for (int via_file = 0; via_file <= 1; via_file++) {
        struct ini_record rec;
        char err[1024];
        bool ok = ini_run(text, via_file, &rec, err, sizeof err);
        const char *how = via_file ? "file" : "string";
        if (want_log != NULL)
            ck_assert_msg(strcmp(rec.log, want_log) == 0, "%s:\n%s\nhanded over:\n%s\nexpected:\n%s", how, text,
                          rec.log, want_log);
        if (want_err[0] == '\0')
            ck_assert_msg(ok, "%s: refused:\n%s\n%s", how, text, err);
        else {
            ck_assert_msg(!ok, "%s: accepted:\n%s", how, text);
            ck_assert_msg(strcmp(err, want_err) == 0, "%s: error \"%s\", expected \"%s\"", how, err, want_err);
        }
    }
}

START_TEST(test_ini_lines_sections_continuations)
{
    ini_expect("; comment\n"
               "# comment\n"
               "[one]\n"
               "a = 1\n"
               "b = x;y ; a comment after a value\n"
               "  more\n"
               "; between\n"
               "\n"
               "\tagain\n"
               "[two]\n"
               "  c = 3\n"
               "[empty]\n"
               "[Three]\n"
               "d=4",
               "S one\n"
               "K 4 one a=1\n"
               "K 5 one b=x;y\n"
               "K 6 one b=more +\n"
               "K 9 one b=again +\n"
               "S two\n"
               "K 11 two c=3\n"
               "S empty\n"
               "S Three\n"
               "K 14 Three d=4\n",
               "");
    /* An indented "key = value" line below another key continues that key: the handler decides what that means. */
    ini_expect("[s]\na = 1\n  b = 2\n", "S s\nK 2 s a=1\nK 3 s a=b = 2 +\n", "");
    /* A key given again is handed over again, not as a continuation (the handler refuses duplicates). */
    ini_expect("[s]\na = 1\na = 2\n", "S s\nK 2 s a=1\nK 3 s a=2\n", "");
    /* A section header ends the key above it: no continuation across it. */
    ini_expect("[s]\na = 1\n[s]\n  a = 2\n", "S s\nK 2 s a=1\nS s\nK 4 s a=2\n", "");
    /* A UTF-8 byte order mark and CRLF line ends. */
    ini_expect("\xEF\xBB\xBF[s]\r\na = 1\r\n  b\r\n", "S s\nK 2 s a=1\nK 3 s a=b +\n", "");
    ini_expect("", "", "");
}
END_TEST

START_TEST(test_ini_errors)
{
    /* A key before any section is refused by the reader; the handler never sees it. */
    ini_expect("a = 1\n[s]\n", "S s\n", "T:1: a: a key before any [section]");
    ini_expect("[s]\nok = 1\nbad = 2\n", NULL, "T:3: no key bad");
    ini_expect("[bad]\n", "S bad\n", "T:1: no section [bad]");
    /* A key refused without a message, after its section was refused: the section's error stands. */
    ini_expect("[bad]\nquiet = 1\n", "S bad\nK 2 bad quiet=1\n", "T:1: no section [bad]");
    /* ... and with no error before it, the line counts as a syntax error. */
    ini_expect("[s]\nquiet = 1\n", NULL, "T:2: syntax error (expected \"[section]\", \"key = value\" or a comment)");
    ini_expect("[s\n", NULL, "T:1: syntax error (expected \"[section]\", \"key = value\" or a comment)");
    ini_expect("[s]\nnovalue\n", NULL, "T:2: syntax error (expected \"[section]\", \"key = value\" or a comment)");
    /* The error of the earliest line wins, whichever was found first. */
    ini_expect("[s]\nbad = 1\nx 2\n", NULL, "T:2: no key bad");
    ini_expect("[s]\nx 2\nbad = 1\n", NULL, "T:2: syntax error (expected \"[section]\", \"key = value\" or a comment)");
    ini_expect("[s]\nbad = 1\n[bad]\n", NULL, "T:2: no key bad");
    ini_expect("[bad]\n[s]\nbad = 1\n", NULL, "T:1: no section [bad]");
    /* The reader goes on after an error: later lines are still handed over. */
    ini_expect("[s]\nbad = 1\nc = 3\n", "S s\nK 2 s bad=1\nK 3 s c=3\n", "T:2: no key bad");

    /* A file that cannot be read: the error has no line. */
    struct ini_record rec = {""};
    const config_ini_handler h = {.section = rec_section, .key = rec_key, .arg = &rec};
    char err[256];
    FILE *dir = fopen(".", "r");
    ck_assert_ptr_nonnull(dir);
    ck_assert(!config_ini_parse("T", dir, NULL, &h, err, sizeof err));
    fclose(dir);
    ck_assert_msg(strncmp(err, "T: read error: ", 15) == 0, "%s", err);

    /* The form of every error. */
    config_ini_error(err, sizeof err, "F", 7, "[%s] %s: %d", "s", "k", 1);
    ck_assert_str_eq(err, "F:7: [s] k: 1");
    config_ini_error(err, sizeof err, "F", 0, "cannot %s", "read");
    ck_assert_str_eq(err, "F: cannot read");
    config_ini_error(err, 6, "F", 7, "long");
    ck_assert_str_eq(err, "F:7: ");
}
END_TEST

/* An indented "[section]" line is a section header wherever it stands, as libinih reads it. */
START_TEST(test_ini_indented_section_headers)
{
    ini_expect("  [s]\na = 1\n", "S s\nK 2 s a=1\n", "");
    ini_expect("\t[bad]\na = 1\n", NULL, "T:1: no section [bad]");
    ini_expect("[s]\na = 1\n  [t]\nb = 2\n", "S s\nK 2 s a=1\nS t\nK 4 t b=2\n", "");
    ini_expect("[s]\na = 1\n  more\n; c\n \t[t]\n  b = 2\n", "S s\nK 2 s a=1\nK 3 s a=more +\nS t\nK 6 t b=2\n", "");
    ini_expect("[s]\na = 1\n  [bad]\nb = 2\n", "S s\nK 2 s a=1\nS bad\nK 4 bad b=2\n", "T:3: no section [bad]");
    ini_expect("\xEF\xBB\xBF  [s]\r\na = 1\r\n", "S s\nK 2 s a=1\n", "");
    /* Not a header: '[' further into a continuation line. */
    ini_expect("[s]\na = 1\n  x [t]\n", "S s\nK 2 s a=1\nK 3 s a=x [t] +\n", "");
}
END_TEST

/* "[s]\n" then a line of exactly len characters ("k = vvv..."), then end (with a newline when nl). */
static void long_line(char *text, size_t size, size_t len, const char *end)
{
    snprintf(text, size, "[s]\nk = ");
    size_t head = strlen(text);
    ck_assert(head + len - 4 + strlen(end) < size);
    memset(text + head, 'v', len - 4);
    strcpy(text + head + len - 4, end);
}

START_TEST(test_ini_line_length)
{
    char text[512];
    const char *too_long = "T:2: line is longer than 199 characters, the most this parser reads";
    ck_assert_int_eq(CONFIG_INI_MAX_LINE, 199); /* as docs/configuration.md says */

    static const char *const ends[] = {"\n", "", "\nz = 1\n"};
    for (size_t e = 0; e < sizeof ends / sizeof ends[0]; e++) {
        long_line(text, sizeof text, CONFIG_INI_MAX_LINE, ends[e]);
        ini_expect(text, NULL, "");
        long_line(text, sizeof text, CONFIG_INI_MAX_LINE + 1, ends[e]);
        ini_expect(text, NULL, too_long);
        long_line(text, sizeof text, CONFIG_INI_MAX_LINE + 50, ends[e]);
        ini_expect(text, NULL, too_long);
    }
    /* The "\r" of a CRLF line end counts. */
    long_line(text, sizeof text, CONFIG_INI_MAX_LINE - 1, "\r\n");
    ini_expect(text, NULL, "");
    long_line(text, sizeof text, CONFIG_INI_MAX_LINE, "\r\n");
    ini_expect(text, NULL, too_long);

    /* The value of a line that fits is whole; after a line too long the reader resumes at the next line. */
    struct ini_record rec;
    char err[256], want[300];
    long_line(text, sizeof text, CONFIG_INI_MAX_LINE, "\n");
    ck_assert(ini_run(text, false, &rec, err, sizeof err));
    snprintf(want, sizeof want, "S s\nK 2 s k=%.*s\n", CONFIG_INI_MAX_LINE - 4, text + strlen("[s]\nk = "));
    ck_assert_str_eq(rec.log, want);
    long_line(text, sizeof text, CONFIG_INI_MAX_LINE + 50, "\nz = 1\n");
    for (int via_file = 0; via_file <= 1; via_file++) {
        ck_assert(!ini_run(text, via_file, &rec, err, sizeof err));
        ck_assert_str_eq(err, too_long);
        ck_assert_msg(strstr(rec.log, "K 3 s z=1\n") != NULL, "%s", rec.log);
    }
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
    tcase_add_test(tc, test_table_has_no_duplicate_options);
    tcase_add_test(tc, test_types_and_units);
    tcase_add_test(tc, test_continuation_lines);
    tcase_add_test(tc, test_errors_name_file_line_key);
    tcase_add_test(tc, test_unknown_section_lists_every_section);
    tcase_add_test(tc, test_indented_section_headers);
    tcase_add_test(tc, test_duplicate_keys_refused);
    tcase_add_test(tc, test_missing_file_and_untouched_output);
    tcase_add_test(tc, test_reload);
    tcase_add_test(tc, test_source_options);
    tcase_add_test(tc, test_failed_override_changes_nothing);
    tcase_add_test(tc, test_reload_checks_overrides_with_the_file);
    tcase_add_test(tc, test_print_round_trip);
    tcase_add_test(tc, test_secrets_masked);
    suite_add_tcase(s, tc);

    TCase *values = tcase_create("values");
    tcase_set_timeout(values, 20);
    tcase_add_test(values, test_value_numbers);
    tcase_add_test(values, test_value_number_format);
    tcase_add_test(values, test_value_bool);
    tcase_add_test(values, test_value_enum);
    tcase_add_test(values, test_value_list);
    suite_add_tcase(s, values);

    TCase *ini = tcase_create("ini");
    tcase_set_timeout(ini, 20);
    tcase_add_test(ini, test_ini_lines_sections_continuations);
    tcase_add_test(ini, test_ini_errors);
    tcase_add_test(ini, test_ini_indented_section_headers);
    tcase_add_test(ini, test_ini_line_length);
    suite_add_tcase(s, ini);

    TCase *files = tcase_create("files");
    tcase_set_timeout(files, 20);
    tcase_add_test(files, test_docs_list_every_option);
    tcase_add_test(files, test_sample_ini_lists_every_option_at_its_default);
    tcase_add_test(files, test_minimal_ini_parses);
    suite_add_tcase(s, files);
    return s;
}

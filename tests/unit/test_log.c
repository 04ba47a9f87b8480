/*
 * test_log.c — the logger (util/log) and its configuration glue (daemon/logsetup): level filtering, the stderr line
 * format with and without timestamps, the "<N>" priority prefix when JOURNAL_STREAM names fd 2 (and the plain format
 * when it names something else), long lines cut but newline-terminated, syslog taking lines away from stderr, and
 * libmongoc's messages routed in at the matching level.
 *
 * stderr is captured by pointing fd 2 at a temporary file with dup2; every test restores fd 2 and the logger.
 */
#include <check.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <mongoc/mongoc.h>

#include "../lib/textfile.h"
#include "daemon/config.h"
#include "daemon/logsetup.h"
#include "util/log.h"

/* ---- capturing fd 2 ------------------------------------------------------------------------------------------- */

static int saved_fd = -1;
static char capture_path[64];

static void capture_begin(void)
{
    strcpy(capture_path, "/tmp/oplog2pg-test-log-XXXXXX");
    int fd = mkstemp(capture_path);
    ck_assert_msg(fd >= 0, "mkstemp failed");
    saved_fd = dup(STDERR_FILENO);
    ck_assert(saved_fd >= 0);
    ck_assert(dup2(fd, STDERR_FILENO) == STDERR_FILENO);
    close(fd);
}

/* Restores fd 2 and returns what was written to it (malloc'd). */
static char *capture_end(void)
{
    ck_assert(saved_fd >= 0);
    ck_assert(dup2(saved_fd, STDERR_FILENO) == STDERR_FILENO);
    close(saved_fd);
    saved_fd = -1;

    char *buf = textfile_read(capture_path);
    ck_assert_msg(buf != NULL, "cannot read the captured stderr %s", capture_path);
    unlink(capture_path);
    return buf;
}

/* Sets JOURNAL_STREAM to fd 2's device and inode, plus delta on the inode (0 = matching). */
static void set_journal_stream(long long delta)
{
    struct stat st;
    char val[64];
    ck_assert(fstat(STDERR_FILENO, &st) == 0);
    snprintf(val, sizeof val, "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)((long long)st.st_ino + delta));
    ck_assert(setenv("JOURNAL_STREAM", val, 1) == 0);
}

static void reset_logger(void)
{
    log_use_stderr();
    log_set_level(LOGL_INFO);
    log_set_timestamps(true);
    log_set_journal_prefix(false);
    unsetenv("JOURNAL_STREAM");
}

static void setup(void)
{
    reset_logger();
}

static void teardown(void)
{
    if (saved_fd >= 0) {
        dup2(saved_fd, STDERR_FILENO);
        close(saved_fd);
        saved_fd = -1;
        unlink(capture_path);
    }
    reset_logger();
}

static bool matches(const char *text, const char *pattern)
{
    regex_t re;
    ck_assert_msg(regcomp(&re, pattern, REG_EXTENDED | REG_NEWLINE) == 0, "bad regex %s", pattern);
    bool ok = regexec(&re, text, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

/* ---- levels ---------------------------------------------------------------------------------------------------- */

START_TEST(test_levels_filter)
{
    log_set_timestamps(false);
    log_set_level(LOGL_WARNING);
    ck_assert_int_eq(log_get_level(), LOGL_WARNING);
    capture_begin();
    log_debug("d1");
    log_info("i1");
    log_notice("n1");
    log_warning("w1");
    log_error("e1");
    log_set_level(LOGL_DEBUG);
    log_debug("d2");
    log_notice("n2");
    log_set_level(LOGL_ERROR);
    log_warning("w3");
    log_error("e3");
    char *out = capture_end();
    ck_assert_str_eq(out, "warning: w1\nerror: e1\ndebug: d2\nnotice: n2\nerror: e3\n");
    free(out);

    log_level l;
    ck_assert(log_level_parse("notice", &l) && l == LOGL_NOTICE);
    ck_assert(log_level_parse("debug", &l) && l == LOGL_DEBUG);
    ck_assert(!log_level_parse("verbose", &l));
    ck_assert_str_eq(log_level_name(LOGL_WARNING), "warning");
    ck_assert_int_eq(log_level_priority(LOGL_DEBUG), LOG_DEBUG);
    ck_assert_int_eq(log_level_priority(LOGL_INFO), LOG_INFO);
    ck_assert_int_eq(log_level_priority(LOGL_NOTICE), LOG_NOTICE);
    ck_assert_int_eq(log_level_priority(LOGL_WARNING), LOG_WARNING);
    ck_assert_int_eq(log_level_priority(LOGL_ERROR), LOG_ERR);
}
END_TEST

START_TEST(test_config_level_applied)
{
    config cfg;
    ck_assert(config_init_defaults(&cfg));
    cfg.log_level = CONFIG_LOG_ERROR;
    cfg.log_timestamps = CONFIG_TIMESTAMPS_OFF;
    logsetup_apply(&cfg);
    ck_assert_int_eq(log_get_level(), LOGL_ERROR);
    cfg.log_level = CONFIG_LOG_DEBUG;
    logsetup_apply(&cfg); /* as on SIGHUP */
    ck_assert_int_eq(log_get_level(), LOGL_DEBUG);
    capture_begin();
    log_debug("now visible");
    char *out = capture_end();
    ck_assert_str_eq(out, "debug: now visible\n");
    free(out);
    config_free(&cfg);
}
END_TEST

/* ---- the stderr line ------------------------------------------------------------------------------------------- */

START_TEST(test_format_without_timestamps)
{
    log_set_timestamps(false);
    capture_begin();
    log_info("hello %d %s", 42, "world");
    log_error("naming %s", "db.coll");
    char *out = capture_end();
    ck_assert_str_eq(out, "info: hello 42 world\nerror: naming db.coll\n");
    free(out);
}
END_TEST

START_TEST(test_format_with_timestamps)
{
    log_set_timestamps(true);
    capture_begin();
    log_warning("stamped");
    char *out = capture_end();
    ck_assert_msg(matches(out, "^20[0-9]{2}-[01][0-9]-[0-3][0-9] [0-2][0-9]:[0-5][0-9]:[0-6][0-9]\\.[0-9]{3}Z "
                               "warning: stamped\n$"),
                  "unexpected line: \"%s\"", out);
    free(out);
}
END_TEST

START_TEST(test_long_line_truncated_with_newline)
{
    size_t n = 3 * LOG_LINE_MAX;
    char *big = malloc(n + 1);
    ck_assert(big != NULL);
    memset(big, 'x', n);
    big[n] = '\0';

    log_set_timestamps(false);
    capture_begin();
    log_info("%s", big);
    log_info("after");
    char *out = capture_end();
    char *nl = strchr(out, '\n');
    ck_assert(nl != NULL);
    size_t first = (size_t)(nl - out) + 1;
    ck_assert_uint_eq(first, LOG_LINE_MAX - 1);
    ck_assert(strncmp(out, "info: xxxx", 10) == 0);
    ck_assert_str_eq(nl + 1, "info: after\n");
    free(out);
    free(big);
}
END_TEST

/* ---- the journal ------------------------------------------------------------------------------------------------ */

START_TEST(test_journal_prefix_when_stream_matches)
{
    config cfg;
    ck_assert(config_init_defaults(&cfg));
    ck_assert_int_eq(cfg.log_timestamps, CONFIG_TIMESTAMPS_AUTO);
    cfg.log_level = CONFIG_LOG_DEBUG;

    capture_begin();
    set_journal_stream(0);
    ck_assert(log_stderr_is_journal());
    logsetup_apply(&cfg);
    log_error("e");
    log_warning("w");
    log_notice("n");
    log_info("i");
    log_debug("d");
    /* timestamps = on: the stamp follows the priority, which must come first for journald to read it. */
    cfg.log_timestamps = CONFIG_TIMESTAMPS_ON;
    logsetup_apply(&cfg);
    log_error("stamped");
    char *out = capture_end();

    const char *want = "<3>error: e\n<4>warning: w\n<5>notice: n\n<6>info: i\n<7>debug: d\n";
    ck_assert_msg(strncmp(out, want, strlen(want)) == 0, "unexpected output: \"%s\"", out);
    ck_assert_msg(matches(out + strlen(want), "^<3>20[0-9]{2}-[0-9]{2}-[0-9]{2} [0-9:]{8}\\.[0-9]{3}Z "
                                              "error: stamped\n$"),
                  "unexpected stamped line: \"%s\"", out + strlen(want));
    free(out);
    config_free(&cfg);
}
END_TEST

START_TEST(test_plain_format_when_stream_differs)
{
    config cfg;
    ck_assert(config_init_defaults(&cfg));

    capture_begin();
    set_journal_stream(1); /* same device, another inode: stderr was redirected away from the journal */
    ck_assert(!log_stderr_is_journal());
    logsetup_apply(&cfg); /* auto: timestamps on */
    log_error("away");
    ck_assert(setenv("JOURNAL_STREAM", "not-a-pair", 1) == 0);
    ck_assert(!log_stderr_is_journal());
    unsetenv("JOURNAL_STREAM");
    ck_assert(!log_stderr_is_journal());
    cfg.log_timestamps = CONFIG_TIMESTAMPS_OFF;
    logsetup_apply(&cfg);
    log_error("plain");
    char *out = capture_end();
    ck_assert_msg(matches(out, "^20[0-9]{2}-[0-9]{2}-[0-9]{2} [0-9:]{8}\\.[0-9]{3}Z error: away\nerror: plain\n$"),
                  "unexpected output: \"%s\"", out);
    free(out);
    config_free(&cfg);
}
END_TEST

START_TEST(test_journal_timestamps_off_then_auto)
{
    config cfg;
    ck_assert(config_init_defaults(&cfg));

    capture_begin();
    set_journal_stream(0);
    cfg.log_timestamps = CONFIG_TIMESTAMPS_OFF;
    logsetup_apply(&cfg);
    log_info("a");
    cfg.log_timestamps = CONFIG_TIMESTAMPS_AUTO;
    logsetup_apply(&cfg);
    log_info("b");
    char *out = capture_end();
    ck_assert_str_eq(out, "<6>info: a\n<6>info: b\n");
    free(out);
    config_free(&cfg);
}
END_TEST

/* ---- syslog ------------------------------------------------------------------------------------------------------ */

START_TEST(test_syslog_takes_lines_off_stderr)
{
    config cfg;
    ck_assert(config_init_defaults(&cfg));
    cfg.log_destination = CONFIG_LOG_SYSLOG;
    cfg.syslog_facility = CONFIG_FACILITY_LOCAL0 + 3;

    ck_assert_int_eq(logsetup_facility(CONFIG_FACILITY_DAEMON), LOG_DAEMON);
    ck_assert_int_eq(logsetup_facility(CONFIG_FACILITY_USER), LOG_USER);
    ck_assert_int_eq(logsetup_facility(CONFIG_FACILITY_LOCAL0), LOG_LOCAL0);
    ck_assert_int_eq(logsetup_facility(CONFIG_FACILITY_LOCAL0 + 7), LOG_LOCAL7);

    capture_begin();
    logsetup_apply(&cfg);
    ck_assert(log_is_syslog());
    logsetup_apply(&cfg); /* a reload with the same ident and facility keeps it open */
    ck_assert(log_is_syslog());
    log_error("oplog2pg unit test: to syslog, not stderr");
    log_warning("oplog2pg unit test: to syslog as well");
    cfg.log_destination = CONFIG_LOG_STDERR;
    cfg.log_timestamps = CONFIG_TIMESTAMPS_OFF;
    logsetup_apply(&cfg);
    ck_assert(!log_is_syslog());
    log_error("back on stderr");
    char *out = capture_end();
    ck_assert_str_eq(out, "error: back on stderr\n");
    free(out);
    config_free(&cfg);
}
END_TEST

/* ---- libmongoc's messages ------------------------------------------------------------------------------------- */

START_TEST(test_mongoc_messages_routed)
{
    mongoc_init();
    log_set_timestamps(false);
    logsetup_route_mongoc();
    capture_begin();
    mongoc_log(MONGOC_LOG_LEVEL_WARNING, "cluster", "server %s is %d", "db1", 7);
    mongoc_log(MONGOC_LOG_LEVEL_ERROR, "stream", "e");
    mongoc_log(MONGOC_LOG_LEVEL_CRITICAL, "client", "c");
    mongoc_log(MONGOC_LOG_LEVEL_MESSAGE, "topology", "m");
    mongoc_log(MONGOC_LOG_LEVEL_INFO, "topology", "i");
    mongoc_log(MONGOC_LOG_LEVEL_DEBUG, "topology", "hidden at info");
    log_set_level(LOGL_DEBUG);
    logsetup_mongoc_handler(MONGOC_LOG_LEVEL_DEBUG, "sdam", "dbg", NULL);
    logsetup_mongoc_handler(MONGOC_LOG_LEVEL_TRACE, "sdam", "trc", NULL);
    mongoc_log(MONGOC_LOG_LEVEL_WARNING, "mongoc", "Unsupported URI option \"x\"");
    char *out = capture_end();
    mongoc_log_set_handler(mongoc_log_default_handler, NULL);
    mongoc_cleanup();
    ck_assert_str_eq(out, "warning: mongoc: cluster: server db1 is 7\n"
                          "error: mongoc: stream: e\n"
                          "error: mongoc: client: c\n"
                          "info: mongoc: topology: m\n"
                          "info: mongoc: topology: i\n"
                          "debug: mongoc: sdam: dbg\n"
                          "debug: mongoc: sdam: trc\n"
                          "warning: mongoc: Unsupported URI option \"x\"\n");
    free(out);
}
END_TEST

Suite *log_suite(void); /* called by the generated runner list */

Suite *log_suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("log");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_levels_filter);
    tcase_add_test(tc, test_config_level_applied);
    tcase_add_test(tc, test_format_without_timestamps);
    tcase_add_test(tc, test_format_with_timestamps);
    tcase_add_test(tc, test_long_line_truncated_with_newline);
    tcase_add_test(tc, test_journal_prefix_when_stream_matches);
    tcase_add_test(tc, test_plain_format_when_stream_differs);
    tcase_add_test(tc, test_journal_timestamps_off_then_auto);
    tcase_add_test(tc, test_syslog_takes_lines_off_stderr);
    tcase_add_test(tc, test_mongoc_messages_routed);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_skip.c — the test library's skip record (tests/lib/skip.h): SKIP_TEST writes one line naming the test and its
 * reason to $OPLOG2PG_TEST_SKIPS and returns at once; the runner's report counts and lists only the lines written
 * after the count it took at the start.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/skip.h"
#include "../lib/textfile.h"

Suite *skip_suite(void); /* called by the generated runner list */

static char saved[512], path[512];

/* Points $OPLOG2PG_TEST_SKIPS at a fresh file of this test (the runner's own is put back by restore()). */
static void use_own_file(void)
{
    const char *was = getenv(SKIP_ENV);
    snprintf(saved, sizeof saved, "%s", was ? was : "");
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/skiptest.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(setenv(SKIP_ENV, path, 1), 0);
}

static void restore(void)
{
    unlink(path);
    if (saved[0])
        setenv(SKIP_ENV, saved, 1);
    else
        unsetenv(SKIP_ENV);
}

/* A helper that skips: the record names the running test, whatever function SKIP_TEST is written in. */
static void example(int *went_on, int n)
{
    if (n > 0)
        SKIP_TEST("needs %d things,\nnot %d", n, 0);
    *went_on = 1;
}

START_TEST(test_skip_records_and_returns)
{
    use_own_file();
    int went_on = 0;
    example(&went_on, 3);
    ck_assert_int_eq(went_on, 0);
    char *text = textfile_read(path);
    ck_assert_ptr_nonnull(text);
    /* The running test's name, the reason on one line. */
    ck_assert_str_eq(text, "test_skip_records_and_returns: needs 3 things, not 0\n");
    free(text);
    example(&went_on, 0);
    ck_assert_int_eq(went_on, 1);
    restore();
}
END_TEST

START_TEST(test_report_counts_only_new_lines)
{
    use_own_file();
    int went_on = 0;
    example(&went_on, 1);
    long before;
    bool owned;
    ck_assert(skip_file_open(&before, &owned));
    ck_assert(!owned); /* the variable was set: the file is the caller's */
    ck_assert_int_eq(before, 1);
    example(&went_on, 2);
    example(&went_on, 3);
    ck_assert_int_eq(skip_file_report(before, NULL), 2);
    char out[512] = "";
    FILE *f = fmemopen(out, sizeof out, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(skip_file_report(before, f), 2);
    fclose(f);
    ck_assert_str_eq(out, "  SKIP test_report_counts_only_new_lines: needs 2 things, not 0\n"
                          "  SKIP test_report_counts_only_new_lines: needs 3 things, not 0\n");
    skip_file_close(owned);
    ck_assert_int_eq(access(path, F_OK), 0); /* not removed: not the runner's own */
    restore();
}
END_TEST

Suite *skip_suite(void)
{
    Suite *s = suite_create("skip");
    TCase *tc = tcase_create("skip");
    tcase_add_test(tc, test_skip_records_and_returns);
    tcase_add_test(tc, test_report_counts_only_new_lines);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_copy_format.c — the initial copy's pure helpers: durations for progress lines, ETA arithmetic, result names.
 */
#include <check.h>
#include <math.h>
#include <string.h>

#include "copy/copy.h"

START_TEST(test_duration)
{
    char b[32];
    ck_assert_str_eq(copy_format_duration(0, b, sizeof b), "0s");
    ck_assert_str_eq(copy_format_duration(44.6, b, sizeof b), "45s");
    ck_assert_str_eq(copy_format_duration(59.4, b, sizeof b), "59s");
    ck_assert_str_eq(copy_format_duration(59.6, b, sizeof b), "1m00s");
    ck_assert_str_eq(copy_format_duration(725, b, sizeof b), "12m05s");
    ck_assert_str_eq(copy_format_duration(3599, b, sizeof b), "59m59s");
    ck_assert_str_eq(copy_format_duration(3600, b, sizeof b), "1h00m");
    ck_assert_str_eq(copy_format_duration(3 * 3600 + 7 * 60 + 30, b, sizeof b), "3h07m");
    ck_assert_str_eq(copy_format_duration(2 * 86400 + 4 * 3600 + 59, b, sizeof b), "2d04h");
    ck_assert_str_eq(copy_format_duration(-1, b, sizeof b), "?");
    ck_assert_str_eq(copy_format_duration(NAN, b, sizeof b), "?");
    ck_assert_str_eq(copy_format_duration(INFINITY, b, sizeof b), "?");
    char tiny[4];
    copy_format_duration(12345, tiny, sizeof tiny); /* truncated, still terminated */
    ck_assert_uint_eq(strlen(tiny), 3);
}
END_TEST

START_TEST(test_eta)
{
    ck_assert_double_eq(copy_eta_seconds(0, 1000, 100), 10.0);
    ck_assert_double_eq(copy_eta_seconds(250, 1000, 50), 15.0);
    ck_assert_double_eq(copy_eta_seconds(1000, 1000, 0), 0.0);
    ck_assert_double_eq(copy_eta_seconds(1200, 1000, 10), 0.0); /* more than estimated: done */
    ck_assert_double_eq(copy_eta_seconds(10, 1000, 0), -1.0);
    ck_assert_double_eq(copy_eta_seconds(10, 1000, -5), -1.0);
    ck_assert_double_eq(copy_eta_seconds(10, 1000, NAN), -1.0);
}
END_TEST

START_TEST(test_result_names)
{
    ck_assert_str_eq(copy_result_name(COPY_DONE), "copied");
    ck_assert_str_eq(copy_result_name(COPY_CANCELLED), "cancelled");
    ck_assert_str_eq(copy_result_name(COPY_WINDOW_LOST), "oplog window lost");
    ck_assert_str_eq(copy_result_name(COPY_FAILED), "failed");
    ck_assert_str_eq(copy_result_name((copy_result)42), "?");
}
END_TEST

Suite *copy_format_suite(void); /* called by the generated runner list */

Suite *copy_format_suite(void)
{
    Suite *s = suite_create("copy_format");
    TCase *tc = tcase_create("copy_format");
    tcase_add_test(tc, test_duration);
    tcase_add_test(tc, test_eta);
    tcase_add_test(tc, test_result_names);
    suite_add_tcase(s, tc);
    return s;
}

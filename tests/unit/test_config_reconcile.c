/*
 * test_config_reconcile.c — [mongodb] delete_reconcile: off by default, a duration (a bare number is seconds), "off"
 * or 0 for never, printed back as it reads; out of range refused at its line.
 */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "daemon/config.h"

Suite *config_reconcile_suite(void);

static int64_t load(const char *value, bool *ok, char *err, size_t errlen)
{
    char text[256];
    snprintf(text, sizeof text, "[mongodb]\ndelete_reconcile = %s\n", value);
    config c;
    *ok = config_load_string("inline", text, &c, err, errlen);
    int64_t v = *ok ? c.delete_reconcile_ms : -1;
    if (*ok)
        config_free(&c);
    return v;
}

START_TEST(test_delete_reconcile_values)
{
    char err[512];
    bool ok;
    config c;
    ck_assert(config_load_string("inline", "[mongodb]\n", &c, err, sizeof err));
    ck_assert_int_eq(c.delete_reconcile_ms, 0);
    int i = config_option_find("mongodb", "delete_reconcile");
    ck_assert_int_ge(i, 0);
    char buf[64];
    ck_assert_str_eq(config_value_text(&c, (size_t)i, buf, sizeof buf), "off");
    config_free(&c);

    ck_assert_int_eq(load("off", &ok, err, sizeof err), 0);
    ck_assert(ok);
    ck_assert_int_eq(load("0", &ok, err, sizeof err), 0);
    ck_assert_int_eq(load("30", &ok, err, sizeof err), 30000);
    ck_assert_int_eq(load("5min", &ok, err, sizeof err), 300000);
    ck_assert_int_eq(load("1500ms", &ok, err, sizeof err), 1500);

    ck_assert(config_load_string("inline", "[mongodb]\ndelete_reconcile = 10min\n", &c, err, sizeof err));
    ck_assert_str_eq(config_value_text(&c, (size_t)i, buf, sizeof buf), "10min");
    config_free(&c);

    load("169h", &ok, err, sizeof err);
    ck_assert(!ok);
    ck_assert_msg(strstr(err, "delete_reconcile"), "%s", err);
    load("soon", &ok, err, sizeof err);
    ck_assert(!ok);
    ck_assert_msg(strstr(err, "delete_reconcile") && strstr(err, "off"), "%s", err);
}
END_TEST

/* Typed tables are not reconciled: with a [map] section the option is refused (a deleted document would keep its
 * typed row), naming both; the map alone, or the option alone, loads. */
START_TEST(test_delete_reconcile_refused_with_maps)
{
    static const char map[] = "[map shop.orders]\ncolumn.total = numeric from amount.total\n";
    char text[512], err[512];
    config c;
    snprintf(text, sizeof text, "[mongodb]\ndelete_reconcile = 1min\n%s", map);
    ck_assert(!config_load_string("inline", text, &c, err, sizeof err));
    ck_assert_msg(strstr(err, "delete_reconcile") && strstr(err, "typed map") && strstr(err, "inline:2"), "%s", err);
    ck_assert_msg(config_load_string("inline", map, &c, err, sizeof err), "%s", err);
    config_free(&c);
    snprintf(text, sizeof text, "[mongodb]\ndelete_reconcile = off\n%s", map);
    ck_assert_msg(config_load_string("inline", text, &c, err, sizeof err), "%s", err);
    config_free(&c);
}
END_TEST

Suite *config_reconcile_suite(void)
{
    Suite *s = suite_create("config_reconcile");
    TCase *tc = tcase_create("values");
    tcase_add_test(tc, test_delete_reconcile_values);
    tcase_add_test(tc, test_delete_reconcile_refused_with_maps);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_dtoa.c — the shortest text of a double (util/dtoa.h).
 *
 * dtoa_g must write what printf's %g writes at the first precision, from min_prec up, whose text reads back as the
 * double: checked against printf itself for doubles of every kind, at min_prec 1 (text columns, numeric) and 15
 * (documents, metrics). Where printf at min_prec 15 is not the shortest (below the normal range, at a power of two)
 * the text must still read back and be no longer.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/docgen.h"
#include "util/dtoa.h"

static uint64_t rnd_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    return docgen_rng_next(&rnd_state);
}

static void expect_like_printf(double d, int min_prec)
{
    char want[64], got[DTOA_G_SIZE];
    for (int prec = min_prec; prec <= 17; prec++) {
        snprintf(want, sizeof want, "%.*g", prec, d);
        if (strtod(want, NULL) == d)
            break;
    }
    size_t n = dtoa_g(d, min_prec, got);
    ck_assert_uint_eq(n, strlen(got));
    int e2;
    if (d != 0 && (fabs(d) < DBL_MIN || frexp(fabs(d), &e2) == 0.5))
        ck_assert_msg(strtod(got, NULL) == d && strlen(got) <= strlen(want), "%a at %d: printf %s, got %s", d, min_prec,
                      want, got);
    else
        ck_assert_msg(strcmp(got, want) == 0, "%a at %d: printf %s, got %s", d, min_prec, want, got);
}

START_TEST(test_layout)
{
    static const struct {
        double d;
        int min_prec;
        const char *want;
    } cases[] = {
        {0.0, 15, "0"},
        {-0.0, 15, "-0"},
        {0.1, 15, "0.1"},
        {-2.5, 1, "-2.5"},
        {1e6, 1, "1e+06"}, /* %.1g */
        {1e6, 15, "1000000"},
        {123456.0, 1, "123456"},
        {1e15, 15, "1e+15"},
        {999999999999999.0, 15, "999999999999999"},
        {1234567890123456.0, 15, "1234567890123456"},
        {12345678901234568.0, 15, "12345678901234568"},
        {1.2345678901234568e17, 15, "1.2345678901234568e+17"},
        {1e-4, 15, "0.0001"},
        {1.5e-5, 15, "1.5e-05"},
        {0.30000000000000004, 1, "0.30000000000000004"},
        {1e300, 15, "1e+300"},
        {1.7976931348623157e308, 15, "1.7976931348623157e+308"},
        {5e-324, 15, "5e-324"},
        {-5e-324, 1, "-5e-324"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char got[DTOA_G_SIZE];
        dtoa_g(cases[i].d, cases[i].min_prec, got);
        ck_assert_msg(strcmp(got, cases[i].want) == 0, "%a at %d: want %s, got %s", cases[i].d, cases[i].min_prec,
                      cases[i].want, got);
    }
    char digits[DTOA_DIGITS_MAX + 1];
    int point;
    ck_assert_int_eq(dtoa_shortest(-1234.5, digits, &point), 5);
    ck_assert_str_eq(digits, "12345");
    ck_assert_int_eq(point, 4);
    ck_assert_int_eq(dtoa_shortest(0.001, digits, &point), 1);
    ck_assert_str_eq(digits, "1");
    ck_assert_int_eq(point, -2);
}
END_TEST

START_TEST(test_matches_printf)
{
    static const double pow10[] = {1e0, 1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,
                                   1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17};
    for (int i = 0; i < 10000; i++) {
        double d[5];
        uint64_t bits = rnd();
        memcpy(&d[0], &bits, sizeof d[0]); /* any bits: every exponent, subnormals included */
        d[1] = (double)(rnd() >> 11) / 9007199254740992.0 * 1000.0 - 500.0; /* 16 or 17 digits */
        uint64_t nd = 1 + rnd() % 17, k = rnd() % 18;
        d[2] = (double)(rnd() % (uint64_t)pow10[nd]) / pow10[k]; /* decimals of 1 to 17 digits */
        d[3] = ldexp(1.0, (int)(rnd() % 2098) - 1074);           /* powers of two, and their neighbours */
        d[4] = nextafter(d[3], (rnd() & 1) ? 0.0 : INFINITY);
        for (int j = 0; j < 5; j++) {
            if (!isfinite(d[j]))
                continue;
            expect_like_printf(d[j], 1);
            expect_like_printf(d[j], 15);
        }
    }
}
END_TEST

Suite *dtoa_suite(void); /* called by the generated runner list */

Suite *dtoa_suite(void)
{
    Suite *s = suite_create("dtoa");
    TCase *tc = tcase_create("dtoa");
    tcase_add_test(tc, test_layout);
    tcase_add_test(tc, test_matches_printf);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_mongosim_hashkey.c — mongosim's hashed-key function (tests/mongosim/hashkey.c) against the server's hard-coded
 * vectors (mongodb/mongo jstests/core/hashtest.js: _hashBSONElement with seed 1), which "should never change over time
 * or across architectures": a string, numbers across types, the double edge cases, NaN, and documents.
 */
#include <check.h>
#include <math.h>

#include "../mongosim/hashkey.h"

Suite *mongosim_hashkey_suite(void);

static int64_t hash_of(const bson_t *doc, const char *key, int32_t seed)
{
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, doc, key));
    return hashkey_hash64(&it, seed);
}

START_TEST(test_server_vectors)
{
    const int64_t zero = 5574369198691456941LL, lowest = 5744114172487291558LL, max = 1136124329541638701LL;
    bson_t *d =
        BCON_NEW("s", BCON_UTF8("hashthis"), "p63", BCON_DOUBLE(9223372036854775808.0), "p63b",
                 BCON_DOUBLE(9223372036854775808.0 + 2048.0), "p500", BCON_DOUBLE(pow(2, 500)), "inf",
                 BCON_DOUBLE(INFINITY), "below", BCON_DOUBLE(9223372036854775808.0 - 1024.0), "m63",
                 BCON_DOUBLE(-9223372036854775808.0), "mbelow", BCON_DOUBLE(-(9223372036854775808.0 - 1024.0)), "m63b",
                 BCON_DOUBLE(-(9223372036854775808.0 + 2048.0)), "minf", BCON_DOUBLE(-INFINITY), "z", BCON_DOUBLE(0),
                 "zl", BCON_INT64(0), "zi", BCON_INT32(0), "nan", BCON_DOUBLE(NAN), "o", "{", "a", BCON_DOUBLE(1), "b",
                 BCON_DOUBLE(2), "}", "o2", "{", "a", BCON_DOUBLE(9223372036854775808.0), "b", BCON_DOUBLE(NAN), "}");
    ck_assert_int_eq(hash_of(d, "s", 1), 6271151123721111923LL);
    ck_assert_int_eq(hash_of(d, "p63", 1), lowest);
    ck_assert_int_eq(hash_of(d, "p63b", 1), max);
    ck_assert_int_eq(hash_of(d, "p500", 1), max);
    ck_assert_int_eq(hash_of(d, "inf", 1), max);
    ck_assert_int_eq(hash_of(d, "below", 1), -3954856262017896439LL);
    ck_assert_int_eq(hash_of(d, "m63", 1), lowest);
    ck_assert_int_eq(hash_of(d, "mbelow", 1), -1762411739488908479LL);
    ck_assert_int_eq(hash_of(d, "m63b", 1), lowest);
    ck_assert_int_eq(hash_of(d, "minf", 1), lowest);
    ck_assert_int_eq(hash_of(d, "z", 1), zero);
    ck_assert_int_eq(hash_of(d, "zl", 1), zero);
    ck_assert_int_eq(hash_of(d, "zi", 1), zero);
    ck_assert_int_eq(hash_of(d, "nan", 1), zero);
    ck_assert_int_eq(hash_of(d, "o", 1), -7076810813311352857LL);
    ck_assert_int_eq(hash_of(d, "o2", 1), 1223292051903137684LL);
    /* The seed matters (hashed indexes use 0). */
    ck_assert_int_ne(hash_of(d, "s", 0), hash_of(d, "s", 1));
    bson_destroy(d);
}
END_TEST

Suite *mongosim_hashkey_suite(void)
{
    Suite *s = suite_create("mongosim_hashkey");
    TCase *tc = tcase_create("vectors");
    tcase_add_test(tc, test_server_vectors);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_ejson.c — the PostgreSQL text of documents and _ids (map/ejson.h): libbson's relaxed Extended JSON with
 * doubles in their shortest round-trip form, and everything else exactly as libbson writes it.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "map/ejson.h"

static void expect_doc(const char *canonical, const char *want)
{
    bson_error_t err;
    bson_t *doc = bson_new_from_json((const uint8_t *)canonical, -1, &err);
    ck_assert_msg(doc != NULL, "%s: %s", canonical, err.message);
    size_t len = 0;
    char *got = ejson_document(doc, &len);
    ck_assert_ptr_nonnull(got);
    ck_assert_msg(strcmp(got, want) == 0, "\n  input: %s\n  want:  %s\n  got:   %s", canonical, want, got);
    ck_assert_uint_eq(len, strlen(got));
    bson_free(got);
    bson_destroy(doc);
}

START_TEST(test_doubles_shortest)
{
    expect_doc("{\"a\": {\"$numberDouble\": \"14.42\"}}", "{ \"a\" : 14.42 }");
    expect_doc("{\"a\": {\"$numberDouble\": \"0.1\"}, \"b\": {\"$numberDouble\": \"-2.5\"}}",
               "{ \"a\" : 0.1, \"b\" : -2.5 }");
    expect_doc("{\"a\": {\"$numberDouble\": \"3\"}}", "{ \"a\" : 3.0 }");
    expect_doc("{\"a\": {\"$numberDouble\": \"1e300\"}}", "{ \"a\" : 1e+300 }");
    /* A value that needs all 17 digits keeps them. */
    expect_doc("{\"a\": {\"$numberDouble\": \"0.30000000000000004\"}}", "{ \"a\" : 0.30000000000000004 }");
}
END_TEST

START_TEST(test_other_values_untouched)
{
    /* Integers stay exact (an int64 beyond 2^53 must not pass through a double), strings are not numbers. */
    expect_doc("{\"i\": {\"$numberLong\": \"9007199254740993\"}, \"s\": \"1.100000000000000000000\"}",
               "{ \"i\" : 9007199254740993, \"s\" : \"1.100000000000000000000\" }");
    expect_doc("{\"s\": \"a \\\"quoted\\\" 2.50000000000000000001 \\\\\", \"n\": {\"$numberInt\": \"-7\"}}",
               "{ \"s\" : \"a \\\"quoted\\\" 2.50000000000000000001 \\\\\", \"n\" : -7 }");
    expect_doc("{\"nan\": {\"$numberDouble\": \"NaN\"}, \"inf\": {\"$numberDouble\": \"-Infinity\"}}",
               "{ \"nan\" : { \"$numberDouble\" : \"NaN\" }, \"inf\" : { \"$numberDouble\" : \"-Infinity\" } }");
    expect_doc("{\"d\": {\"$numberDecimal\": \"1.10\"}}", "{ \"d\" : { \"$numberDecimal\" : \"1.10\" } }");
}
END_TEST

START_TEST(test_nested_and_arrays)
{
    expect_doc("{\"a\": [{\"$numberDouble\": \"1.1\"}, {\"x\": {\"$numberDouble\": \"2.2\"}}]}",
               "{ \"a\" : [ 1.1, { \"x\" : 2.2 } ] }");
}
END_TEST

START_TEST(test_value)
{
    bson_value_t v = {.value_type = BSON_TYPE_DOUBLE};
    v.value.v_double = 14.42;
    char *s = ejson_value(&v);
    ck_assert_str_eq(s, "14.42");
    bson_free(s);
    v.value_type = BSON_TYPE_UTF8;
    v.value.v_utf8.str = (char *)"abc";
    v.value.v_utf8.len = 3;
    s = ejson_value(&v);
    ck_assert_str_eq(s, "\"abc\"");
    bson_free(s);
    bson_oid_t oid;
    bson_oid_init_from_string(&oid, "5f0000000000000000000001");
    v.value_type = BSON_TYPE_OID;
    bson_oid_copy(&oid, &v.value.v_oid);
    s = ejson_value(&v);
    ck_assert_str_eq(s, "{ \"$oid\" : \"5f0000000000000000000001\" }");
    bson_free(s);
}
END_TEST

/* Every shortened double reads back to exactly the same double. */
START_TEST(test_round_trip_random)
{
    unsigned seed = 12345;
    for (int i = 0; i < 20000; i++) {
        uint64_t bits = (uint64_t)rand_r(&seed) << 42 ^ (uint64_t)rand_r(&seed) << 21 ^ (uint64_t)rand_r(&seed);
        double d;
        memcpy(&d, &bits, sizeof d);
        if (!isfinite(d))
            continue;
        bson_t *doc = BCON_NEW("d", BCON_DOUBLE(d));
        char *json = ejson_document(doc, NULL);
        const char *num = strchr(json, ':') + 2;
        ck_assert_msg(strtod(num, NULL) == d, "%.17g became %s", d, json);
        bson_free(json);
        bson_destroy(doc);
    }
}
END_TEST

Suite *ejson_suite(void); /* called by the generated runner list */

Suite *ejson_suite(void)
{
    Suite *s = suite_create("ejson");
    TCase *tc = tcase_create("render");
    tcase_add_test(tc, test_doubles_shortest);
    tcase_add_test(tc, test_other_values_untouched);
    tcase_add_test(tc, test_nested_and_arrays);
    tcase_add_test(tc, test_value);
    tcase_add_test(tc, test_round_trip_random);
    suite_add_tcase(s, tc);
    return s;
}

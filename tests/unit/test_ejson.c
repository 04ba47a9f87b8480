/*
 * test_ejson.c — the PostgreSQL text of documents and _ids (map/ejson.h).
 *
 * Documents: compact relaxed Extended JSON, checked value by value and, for random documents of every type, against
 * libbson's own relaxed writer (both texts read back with libbson's parser must give the same BSON). Keys: equal
 * exactly when MongoDB's _id index finds two _ids equal (numbers by value across types, field order counting), and
 * as readable as the JSON of the _id.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "map/ejson.h"

static bson_t *from_json(const char *canonical)
{
    bson_error_t err;
    bson_t *doc = bson_new_from_json((const uint8_t *)canonical, -1, &err);
    ck_assert_msg(doc != NULL, "%s: %s", canonical, err.message);
    return doc;
}

static void expect_doc(const char *canonical, const char *want)
{
    bson_t *doc = from_json(canonical);
    size_t len = 0;
    char *got = ejson_document(doc, &len);
    ck_assert_ptr_nonnull(got);
    ck_assert_msg(strcmp(got, want) == 0, "\n  input: %s\n  want:  %s\n  got:   %s", canonical, want, got);
    ck_assert_uint_eq(len, strlen(got));
    /* the bound a large document's buffer is made with is never short */
    ck_assert_uint_ge(ejson_document_bound(bson_get_data(doc), doc->len), len);
    free(got);
    bson_destroy(doc);
}

/* The key text of the value of field "v" in a canonical Extended JSON document. */
static char *key_of(const char *canonical)
{
    bson_t *doc = from_json(canonical);
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, doc, "v"));
    char *k = ejson_key(bson_iter_value(&it));
    ck_assert_msg(k != NULL, "no key for %s", canonical);
    bson_destroy(doc);
    return k;
}

static void expect_key(const char *canonical, const char *want)
{
    char *k = key_of(canonical);
    ck_assert_msg(strcmp(k, want) == 0, "\n  value: %s\n  want:  %s\n  got:   %s", canonical, want, k);
    free(k);
}

static void expect_same_key(const char *a, const char *b, bool same)
{
    char *ka = key_of(a), *kb = key_of(b);
    ck_assert_msg((strcmp(ka, kb) == 0) == same, "%s and %s: keys %s / %s should %s", a, b, ka, kb,
                  same ? "be equal" : "differ");
    free(ka);
    free(kb);
}

START_TEST(test_doubles)
{
    expect_doc("{\"a\": {\"$numberDouble\": \"14.42\"}}", "{\"a\":14.42}");
    expect_doc("{\"a\": {\"$numberDouble\": \"0.1\"}, \"b\": {\"$numberDouble\": \"-2.5\"}}", "{\"a\":0.1,\"b\":-2.5}");
    expect_doc("{\"a\": {\"$numberDouble\": \"3\"}}", "{\"a\":3.0}"); /* a double stays recognisable as one */
    expect_doc("{\"a\": {\"$numberDouble\": \"1e300\"}}", "{\"a\":1e+300}");
    expect_doc("{\"a\": {\"$numberDouble\": \"0.30000000000000004\"}}", "{\"a\":0.30000000000000004}");
    /* The fewest digits, also where %.15g would print more: below the normal range, and at a power of two. */
    expect_doc("{\"a\": {\"$numberDouble\": \"5e-324\"}}", "{\"a\":5e-324}");
    expect_doc("{\"a\": {\"$numberDouble\": \"7.4e-323\"}}", "{\"a\":7.4e-323}");
    expect_doc("{\"a\": {\"$numberDouble\": \"5.444517870735016e+39\"}}", "{\"a\":5.444517870735016e+39}");
    /* jsonb has no negative zero and no NaN: the specification's wrappers keep them. */
    expect_doc("{\"a\": {\"$numberDouble\": \"-0.0\"}}", "{\"a\":{\"$numberDouble\":\"-0.0\"}}");
    expect_doc("{\"a\": {\"$numberDouble\": \"0.0\"}}", "{\"a\":0.0}");
    expect_doc("{\"n\": {\"$numberDouble\": \"NaN\"}, \"i\": {\"$numberDouble\": \"-Infinity\"}}",
               "{\"n\":{\"$numberDouble\":\"NaN\"},\"i\":{\"$numberDouble\":\"-Infinity\"}}");
}
END_TEST

START_TEST(test_dates)
{
    expect_doc("{\"d\": {\"$date\": {\"$numberLong\": \"0\"}}}", "{\"d\":{\"$date\":\"1970-01-01T00:00:00Z\"}}");
    expect_doc("{\"d\": {\"$date\": {\"$numberLong\": \"1700000000123\"}}}",
               "{\"d\":{\"$date\":\"2023-11-14T22:13:20.123Z\"}}");
    expect_doc("{\"d\": {\"$date\": {\"$numberLong\": \"253402300799999\"}}}",
               "{\"d\":{\"$date\":\"9999-12-31T23:59:59.999Z\"}}");
    /* Outside 1970..9999 the specification asks for the milliseconds. */
    expect_doc("{\"d\": {\"$date\": {\"$numberLong\": \"-1\"}}}", "{\"d\":{\"$date\":{\"$numberLong\":\"-1\"}}}");
    expect_doc("{\"d\": {\"$date\": {\"$numberLong\": \"253402300800000\"}}}",
               "{\"d\":{\"$date\":{\"$numberLong\":\"253402300800000\"}}}");
    expect_doc("{\"d\": {\"$date\": {\"$numberLong\": \"-62135596800000\"}}}",
               "{\"d\":{\"$date\":{\"$numberLong\":\"-62135596800000\"}}}");
}
END_TEST

START_TEST(test_every_type)
{
    expect_doc("{\"i\": {\"$numberLong\": \"9007199254740993\"}, \"n\": {\"$numberInt\": \"-7\"}, \"b\": true, "
               "\"z\": null}",
               "{\"i\":9007199254740993,\"n\":-7,\"b\":true,\"z\":null}");
    expect_doc("{\"d\": {\"$numberDecimal\": \"1.10\"}}", "{\"d\":{\"$numberDecimal\":\"1.10\"}}");
    expect_doc("{\"o\": {\"$oid\": \"5f0000000000000000000001\"}}", "{\"o\":{\"$oid\":\"5f0000000000000000000001\"}}");
    expect_doc("{\"b\": {\"$binary\": {\"base64\": \"AQID\", \"subType\": \"00\"}}}",
               "{\"b\":{\"$binary\":{\"base64\":\"AQID\",\"subType\":\"00\"}}}");
    expect_doc("{\"b\": {\"$binary\": {\"base64\": \"AQ==\", \"subType\": \"80\"}}}",
               "{\"b\":{\"$binary\":{\"base64\":\"AQ==\",\"subType\":\"80\"}}}");
    expect_doc("{\"r\": {\"$regularExpression\": {\"pattern\": \"^a\\\"b\", \"options\": \"im\"}}}",
               "{\"r\":{\"$regularExpression\":{\"pattern\":\"^a\\\"b\",\"options\":\"im\"}}}");
    expect_doc("{\"t\": {\"$timestamp\": {\"t\": 1700000000, \"i\": 7}}}",
               "{\"t\":{\"$timestamp\":{\"t\":1700000000,\"i\":7}}}");
    expect_doc("{\"c\": {\"$code\": \"f()\"}, \"s\": {\"$symbol\": \"sym\"}}",
               "{\"c\":{\"$code\":\"f()\"},\"s\":{\"$symbol\":\"sym\"}}");
    expect_doc("{\"c\": {\"$code\": \"f(x)\", \"$scope\": {\"x\": 1}}}",
               "{\"c\":{\"$code\":\"f(x)\",\"$scope\":{\"x\":1}}}");
    expect_doc("{\"p\": {\"$dbPointer\": {\"$ref\": \"db.c\", \"$id\": {\"$oid\": \"5f0000000000000000000001\"}}}}",
               "{\"p\":{\"$dbPointer\":{\"$ref\":\"db.c\",\"$id\":{\"$oid\":\"5f0000000000000000000001\"}}}}");
    expect_doc("{\"a\": {\"$minKey\": 1}, \"b\": {\"$maxKey\": 1}, \"u\": {\"$undefined\": true}}",
               "{\"a\":{\"$minKey\":1},\"b\":{\"$maxKey\":1},\"u\":{\"$undefined\":true}}");
    expect_doc("{\"a\": [{\"$numberDouble\": \"1.1\"}, {\"x\": {\"$numberDouble\": \"2.2\"}}, []], \"e\": {}}",
               "{\"a\":[1.1,{\"x\":2.2},[]],\"e\":{}}");
}
END_TEST

START_TEST(test_strings)
{
    expect_doc("{\"s\": \"a \\\"q\\\" \\\\ \\/ \\b\\f\\n\\r\\t \\u0001 \\u007f é € 𝄞\"}",
               "{\"s\":\"a \\\"q\\\" \\\\ / \\b\\f\\n\\r\\t \\u0001 \x7f é € 𝄞\"}");
    /* U+0000 is written as an escape; jsonb then refuses it, which makes it a dead letter with PostgreSQL's reason. */
    bson_t doc = BSON_INITIALIZER;
    bson_append_utf8(&doc, "s", 1, "x\0y", 3);
    char *got = ejson_document(&doc, NULL);
    ck_assert_str_eq(got, "{\"s\":\"x\\u0000y\"}");
    free(got);
    bson_destroy(&doc);
}
END_TEST

/* Strings are scanned eight bytes at a time: a character that needs escaping, or a non-ASCII one, is found at every
 * position within a word and across words, and so are the bytes either side of the ones that need escaping (0x1F /
 * 0x20, '!' and '#' beside '"', '[' and ']' beside '\\'). Invalid UTF-8 at any position is refused. */
START_TEST(test_strings_every_position)
{
    static const struct {
        const char *in, *out;
    } chars[] = {
        {"\"", "\\\""}, {"\\", "\\\\"}, {"\n", "\\n"}, {"\x01", "\\u0001"}, {"\x1f", "\\u001f"}, {" ", " "}, {"!", "!"},
        {"#", "#"},     {"[", "["},     {"]", "]"},    {"\x7f", "\x7f"},    {"é", "é"},          {"€", "€"},
    };
    char in[64], want[96];
    for (size_t c = 0; c < sizeof chars / sizeof chars[0]; c++) {
        for (size_t pre = 0; pre <= 17; pre++) {
            for (size_t post = 0; post <= 17; post += 4) {
                snprintf(in, sizeof in, "%.*s%s%.*s%s", (int)pre, "abcdefghijklmnopqrstuvwxyz", chars[c].in, (int)post,
                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ", chars[c].in);
                snprintf(want, sizeof want, "{\"s\":\"%.*s%s%.*s%s\"}", (int)pre, "abcdefghijklmnopqrstuvwxyz",
                         chars[c].out, (int)post, "ABCDEFGHIJKLMNOPQRSTUVWXYZ", chars[c].out);
                bson_t doc = BSON_INITIALIZER;
                bson_append_utf8(&doc, "s", 1, in, (int)strlen(in));
                char *got = ejson_document(&doc, NULL);
                ck_assert_msg(got != NULL && strcmp(got, want) == 0, "\n  want: %s\n  got:  %s", want,
                              got ? got : "(refused)");
                free(got);
                bson_destroy(&doc);
            }
        }
    }
    for (size_t pre = 0; pre <= 17; pre++) {
        snprintf(in, sizeof in, "%.*s\xff%s", (int)pre, "abcdefghijklmnopqrstuvwxyz", "tail of the string");
        bson_t doc = BSON_INITIALIZER;
        bson_append_utf8(&doc, "s", 1, in, (int)strlen(in));
        ck_assert_msg(ejson_document(&doc, NULL) == NULL, "0xFF after %zu bytes was not refused", pre);
        bson_destroy(&doc);
    }
}
END_TEST

/* Text that is not UTF-8 is refused, naming where it is; nothing half-written leaks out. */
START_TEST(test_invalid_utf8_refused)
{
    bson_t doc = BSON_INITIALIZER, sub;
    BSON_APPEND_DOCUMENT_BEGIN(&doc, "a", &sub);
    bson_append_utf8(&sub, "b", 1, "ok\xff", 3);
    bson_append_document_end(&doc, &sub);
    strbuf out = STRBUF_INIT;
    ejson_error err;
    ck_assert_int_eq(ejson_write_document(&out, bson_get_data(&doc), doc.len, &err), EJSON_BAD_UTF8);
    ck_assert_str_eq(err.where, "a.b");
    char text[300];
    ck_assert_ptr_nonnull(strstr(ejson_error_text(&err, text, sizeof text), "at a.b is not valid UTF-8"));
    ck_assert_ptr_null(ejson_document(&doc, NULL));
    strbuf_free(&out);
    bson_destroy(&doc);

    /* In a field name, shown made safe. */
    bson_init(&doc);
    bson_append_int32(&doc, "k\xc3", 2, 1);
    strbuf_init(&out);
    ck_assert_int_eq(ejson_write_document(&out, bson_get_data(&doc), doc.len, &err), EJSON_BAD_UTF8);
    ck_assert_str_eq(err.where, "k\\xc3");
    strbuf_free(&out);
    bson_destroy(&doc);

    /* Overlong and surrogate encodings are not UTF-8 either. */
    const char *bad[] = {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bson_init(&doc);
        bson_append_utf8(&doc, "s", 1, bad[i], (int)strlen(bad[i]));
        ck_assert_ptr_null(ejson_document(&doc, NULL));
        bson_destroy(&doc);
    }
}
END_TEST

/* Nesting: EJSON_MAX_DEPTH levels are written, one more is refused with a reason (not PostgreSQL's stack error). */
static bson_t *nested(int levels)
{
    bson_t *inner = bson_new();
    BSON_APPEND_INT32(inner, "x", 1);
    for (int i = 1; i < levels; i++) {
        bson_t *outer = bson_new();
        BSON_APPEND_DOCUMENT(outer, "a", inner);
        bson_destroy(inner);
        inner = outer;
    }
    return inner;
}

START_TEST(test_depth)
{
    bson_t *ok = nested(EJSON_MAX_DEPTH);
    char *json = ejson_document(ok, NULL);
    ck_assert_ptr_nonnull(json);
    free(json);
    bson_destroy(ok);
    bson_t *deep = nested(EJSON_MAX_DEPTH + 1);
    strbuf out = STRBUF_INIT;
    ejson_error err;
    ck_assert_int_eq(ejson_write_document(&out, bson_get_data(deep), deep->len, &err), EJSON_TOO_DEEP);
    char text[300];
    ck_assert_ptr_nonnull(strstr(ejson_error_text(&err, text, sizeof text), "nested deeper than 1000 levels"));
    strbuf_free(&out);
    bson_destroy(deep);
}
END_TEST

/* Random documents of every type: what libbson's parser reads back from our text equals what it reads back from
 * libbson's own relaxed writer (the formats differ only in spacing and the shortest doubles). */
static uint64_t rnd_state = 88172645463325252ull;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

static void random_value(bson_t *b, const char *key, int depth)
{
    char s[16];
    switch (rnd() % (depth > 3 ? 10 : 12)) {
    case 0:
        BSON_APPEND_INT32(b, key, (int32_t)rnd());
        break;
    case 1:
        BSON_APPEND_INT64(b, key, (int64_t)rnd());
        break;
    case 2: {
        double d = (double)(int64_t)rnd() / (double)(rnd() % 100000 + 1);
        BSON_APPEND_DOUBLE(b, key, rnd() % 5 == 0 ? d * 1e-200 : d);
        break;
    }
    case 3:
        snprintf(s, sizeof s, "s%llx\t\"é", (unsigned long long)(rnd() % 100000));
        BSON_APPEND_UTF8(b, key, s);
        break;
    case 4: {
        bson_oid_t oid;
        bson_oid_init(&oid, NULL);
        BSON_APPEND_OID(b, key, &oid);
        break;
    }
    case 5:
        BSON_APPEND_DATE_TIME(b, key, (int64_t)(rnd() % 4000000000000ull));
        break;
    case 6:
        BSON_APPEND_BOOL(b, key, rnd() & 1);
        break;
    case 7:
        BSON_APPEND_NULL(b, key);
        break;
    case 8: {
        uint8_t bin[7] = {1, 2, 3, 4, 5, 6, 7};
        BSON_APPEND_BINARY(b, key, (bson_subtype_t)(rnd() % 2 ? 0 : 0x80), bin, (uint32_t)(rnd() % 8));
        break;
    }
    case 9:
        BSON_APPEND_TIMESTAMP(b, key, (uint32_t)rnd(), (uint32_t)rnd());
        break;
    case 10: {
        bson_t sub;
        BSON_APPEND_DOCUMENT_BEGIN(b, key, &sub);
        for (int i = 0, n = (int)(rnd() % 4); i < n; i++) {
            char k[8];
            snprintf(k, sizeof k, "f%d", i);
            random_value(&sub, k, depth + 1);
        }
        bson_append_document_end(b, &sub);
        break;
    }
    default: {
        bson_t arr;
        BSON_APPEND_ARRAY_BEGIN(b, key, &arr);
        for (int i = 0, n = (int)(rnd() % 4); i < n; i++) {
            char k[8];
            snprintf(k, sizeof k, "%d", i);
            random_value(&arr, k, depth + 1);
        }
        bson_append_array_end(b, &arr);
        break;
    }
    }
}

START_TEST(test_random_documents_match_libbson)
{
    for (int n = 0; n < 3000; n++) {
        bson_t doc = BSON_INITIALIZER;
        for (int i = 0, fields = (int)(rnd() % 6) + 1; i < fields; i++) {
            char k[8];
            snprintf(k, sizeof k, "k%d", i);
            random_value(&doc, k, 0);
        }
        size_t ours_len = 0;
        char *ours = ejson_document(&doc, &ours_len);
        char *theirs = bson_as_relaxed_extended_json(&doc, NULL);
        ck_assert_ptr_nonnull(ours);
        ck_assert_uint_ge(ejson_document_bound(bson_get_data(&doc), doc.len), ours_len);
        bson_error_t e1, e2;
        bson_t *a = bson_new_from_json((const uint8_t *)ours, -1, &e1);
        bson_t *b = bson_new_from_json((const uint8_t *)theirs, -1, &e2);
        ck_assert_msg(a != NULL, "%s: %s", ours, e1.message);
        ck_assert_msg(b != NULL, "%s: %s", theirs, e2.message);
        ck_assert_msg(bson_equal(a, b), "\n  ours:   %s\n  libbson: %s", ours, theirs);
        bson_destroy(a);
        bson_destroy(b);
        free(ours);
        bson_free(theirs);
        bson_destroy(&doc);
    }
}
END_TEST

/* The text of a double as the format defines it (ejson.h): the fewest digits that read back as the double, laid out
 * as printf's %.15g (or %.16g, %.17g) would, with ".0" after an integral value printed without a point or an
 * exponent. For a double that is neither subnormal nor a power of two, the shortest of %.15g, %.16g and %.17g is
 * that text, so printf is the reference. Below the normal range %.15g keeps digits the double does not have, and at
 * a power of two the digits one shorter than printf's closest may still read back (the gap below is half the one
 * above): there the text must read back and be no longer than printf's. */
static void expect_double_text(double d)
{
    char want[64], got_field[80];
    int n = 0;
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(want, sizeof want, "%.*g", prec, d);
        if (strtod(want, NULL) == d)
            break;
    }
    if (strpbrk(want, ".eEn") == NULL)
        memcpy(want + n, ".0", 3);
    bson_t doc = BSON_INITIALIZER;
    BSON_APPEND_DOUBLE(&doc, "x", d);
    char *got = ejson_document(&doc, NULL);
    ck_assert_ptr_nonnull(got);
    int e2;
    if (fabs(d) < DBL_MIN || frexp(fabs(d), &e2) == 0.5) {
        const char *num = got + strlen("{\"x\":");
        ck_assert_msg(strtod(num, NULL) == d && strlen(num) - 1 <= strlen(want), "%.17g: printf %s, got %s", d, want,
                      got);
    } else {
        snprintf(got_field, sizeof got_field, "{\"x\":%s}", want);
        ck_assert_msg(strcmp(got, got_field) == 0, "%.17g: want %s, got %s", d, got_field, got);
    }
    free(got);
    bson_destroy(&doc);
}

START_TEST(test_doubles_match_printf)
{
    static const double pow10[] = {1e0, 1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,
                                   1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17};
    static const double edges[] = {1e-4,
                                   9.9999e-5,
                                   1e-5,
                                   0.0001234,
                                   1e15,
                                   999999999999999.0,
                                   999999999999999.9,
                                   1e14 + 0.5,
                                   123456789012345.0,
                                   1234567890123456.0,
                                   0.1,
                                   0.2,
                                   0.3,
                                   2.5,
                                   1.0 / 3,
                                   5e-324,
                                   1.7976931348623157e308,
                                   4503599627370496.5,
                                   0.30000000000000004};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        expect_double_text(edges[i]);
        expect_double_text(-edges[i]);
    }
    for (int n = 0; n < 50000; n++) {
        /* decimals of 1 to 17 digits with 0 to 17 of them after the point: the fast path's cases and its edges */
        uint64_t digits = 1 + rnd() % 17, k = rnd() % 18;
        uint64_t r = rnd() % (uint64_t)pow10[digits];
        double d = (double)r / pow10[k];
        if (d != 0) /* zero and -0.0 have texts of their own (test_doubles) */
            expect_double_text(rnd() & 1 ? -d : d);
        /* and any bits at all */
        uint64_t bits = rnd();
        memcpy(&d, &bits, sizeof d);
        if (isfinite(d) && d != 0)
            expect_double_text(d);
    }
}
END_TEST

START_TEST(test_round_trip_random)
{
    unsigned seed = 12345;
    for (int i = 0; i < 20000; i++) {
        uint64_t bits = (uint64_t)rand_r(&seed) << 42 ^ (uint64_t)rand_r(&seed) << 21 ^ (uint64_t)rand_r(&seed);
        double d;
        memcpy(&d, &bits, sizeof d);
        if (!isfinite(d) || d == 0)
            continue;
        bson_t *doc = BCON_NEW("d", BCON_DOUBLE(d));
        char *json = ejson_document(doc, NULL);
        const char *num = strchr(json, ':') + 1;
        ck_assert_msg(strtod(num, NULL) == d, "%.17g became %s", d, json);
        free(json);
        bson_destroy(doc);
    }
}
END_TEST

/* ---- keys ---- */

START_TEST(test_key_reads_like_the_id)
{
    /* For the common types the key is exactly what jsonb prints for doc->'_id'. */
    expect_key("{\"v\": {\"$oid\": \"65a1f0c2e4b0a1b2c3d4e5f6\"}}", "{\"$oid\": \"65a1f0c2e4b0a1b2c3d4e5f6\"}");
    expect_key("{\"v\": \"abc\"}", "\"abc\"");
    expect_key("{\"v\": \"a\\\"b\\\\c\\n\\u0001é\"}", "\"a\\\"b\\\\c\\n\\u0001é\"");
    expect_key("{\"v\": {\"$numberInt\": \"42\"}}", "42");
    expect_key("{\"v\": {\"$numberLong\": \"-9223372036854775808\"}}", "-9223372036854775808");
    expect_key("{\"v\": {\"$date\": {\"$numberLong\": \"1700000000123\"}}}",
               "{\"$date\": \"2023-11-14T22:13:20.123Z\"}");
    expect_key("{\"v\": {\"$binary\": {\"base64\": \"AQID\", \"subType\": \"04\"}}}",
               "{\"$binary\": {\"base64\": \"AQID\", \"subType\": \"04\"}}");
    expect_key("{\"v\": {\"$timestamp\": {\"t\": 5, \"i\": 6}}}", "{\"$timestamp\": {\"i\": 6, \"t\": 5}}");
    expect_key("{\"v\": true}", "true");
    expect_key("{\"v\": null}", "null");
    expect_key("{\"v\": {\"$minKey\": 1}}", "{\"$minKey\": 1}");
    /* A sub-document keeps its field order: [name, value] pairs. */
    expect_key("{\"v\": {\"a\": 1, \"b\": \"x\"}}", "[[\"a\", 1], [\"b\", \"x\"]]");
    expect_key("{\"v\": {\"a\": [1, {\"c\": 2}]}}", "[[\"a\", {\"$array\": [1, [[\"c\", 2]]]}]]");
    expect_key("{\"v\": {}}", "[]");
}
END_TEST

START_TEST(test_key_numbers_by_value)
{
    const char *one[] = {"{\"v\": {\"$numberInt\": \"1\"}}", "{\"v\": {\"$numberLong\": \"1\"}}",
                         "{\"v\": {\"$numberDouble\": \"1.0\"}}", "{\"v\": {\"$numberDecimal\": \"1.00\"}}",
                         "{\"v\": {\"$numberDecimal\": \"0.1E+1\"}}"};
    for (int i = 1; i < 5; i++)
        expect_same_key(one[0], one[i], true);
    expect_key(one[3], "1");
    /* -0.0 equals 0 (MongoDB compares by value). */
    expect_same_key("{\"v\": {\"$numberDouble\": \"-0.0\"}}", "{\"v\": {\"$numberInt\": \"0\"}}", true);
    expect_same_key("{\"v\": {\"$numberDecimal\": \"-0.000\"}}", "{\"v\": {\"$numberInt\": \"0\"}}", true);
    /* The double 0.1 is not the decimal 0.1: its exact value is kept. */
    expect_same_key("{\"v\": {\"$numberDouble\": \"0.1\"}}", "{\"v\": {\"$numberDecimal\": \"0.1\"}}", false);
    expect_key("{\"v\": {\"$numberDouble\": \"0.1\"}}", "0.1000000000000000055511151231257827021181583404541015625");
    expect_same_key("{\"v\": {\"$numberDouble\": \"0.5\"}}", "{\"v\": {\"$numberDecimal\": \"0.50\"}}", true);
    expect_same_key("{\"v\": {\"$numberDouble\": \"2.5\"}}", "{\"v\": {\"$numberDecimal\": \"2.5\"}}", true);
    /* Past 2^53 an int64 and a double differ when their values do. */
    expect_same_key("{\"v\": {\"$numberLong\": \"9007199254740993\"}}",
                    "{\"v\": {\"$numberDouble\": \"9007199254740992\"}}", false);
    expect_same_key("{\"v\": {\"$numberLong\": \"9007199254740992\"}}",
                    "{\"v\": {\"$numberDouble\": \"9007199254740992\"}}", true);
    /* NaN equals NaN across types, and infinities are signed. */
    expect_same_key("{\"v\": {\"$numberDouble\": \"NaN\"}}", "{\"v\": {\"$numberDecimal\": \"NaN\"}}", true);
    expect_same_key("{\"v\": {\"$numberDouble\": \"Infinity\"}}", "{\"v\": {\"$numberDecimal\": \"Infinity\"}}", true);
    expect_same_key("{\"v\": {\"$numberDouble\": \"Infinity\"}}", "{\"v\": {\"$numberDouble\": \"-Infinity\"}}", false);
    /* Extremes stay exact and short enough for an index. */
    expect_key("{\"v\": {\"$numberDecimal\": \"1E+6144\"}}", "1E+6144");
    expect_key("{\"v\": {\"$numberDecimal\": \"-1.5E-6170\"}}", "-1.5E-6170");
    char *tiny = key_of("{\"v\": {\"$numberDouble\": \"4.9406564584124654E-324\"}}");
    /* 2^-1074, the smallest double: all 751 significant digits of its exact value. */
    ck_assert_str_eq(
        tiny,
        "4."
        "94065645841246544176568792868221372365059802614324764425585682500675507270208751865299836361635992379796564695"
        "44571773092665671035593979639877479601078187812630071319031140452784581716784898210368871863605699873072305000"
        "63874091535649843873124733972731696151400317153853980741262385655911710266585566867681870395603106249319452715"
        "91492455329305456544401127480129709999541931989409080416563324524757147869014726780159355238611550134803526493"
        "47201937902681071074917033322268447533357208324319360923828934583680601060115061698097530783422773183292479049"
        "82524730776375927247874656084778203734469699533647017972677717585125660551199131504891101451037862738167250955"
        "837389733598993664809941164205702637090279242767544565229087538682506419718265533447265625E-324");
    free(tiny);
    expect_same_key("{\"v\": {\"$numberDouble\": \"1e308\"}}", "{\"v\": {\"$numberDecimal\": \"1E+308\"}}", false);
}
END_TEST

START_TEST(test_key_types_and_order)
{
    /* Field order counts: {a, b} and {b, a} are two documents. */
    expect_same_key("{\"v\": {\"a\": 1, \"b\": 2}}", "{\"v\": {\"b\": 2, \"a\": 1}}", false);
    /* A sub-document that looks like a type wrapper is not that type. */
    expect_same_key("{\"v\": {\"$oid\": \"65a1f0c2e4b0a1b2c3d4e5f6\"}}",
                    "{\"v\": {\"x\": {\"$oid\": \"65a1f0c2e4b0a1b2c3d4e5f6\"}}}", false);
    bson_t a = BSON_INITIALIZER, b = BSON_INITIALIZER, sub;
    bson_oid_t oid;
    bson_oid_init_from_string(&oid, "65a1f0c2e4b0a1b2c3d4e5f6");
    BSON_APPEND_OID(&a, "v", &oid);
    BSON_APPEND_DOCUMENT_BEGIN(&b, "v", &sub);
    BSON_APPEND_UTF8(&sub, "$oid", "65a1f0c2e4b0a1b2c3d4e5f6");
    bson_append_document_end(&b, &sub);
    bson_iter_t ia, ib;
    bson_iter_init_find(&ia, &a, "v");
    bson_iter_init_find(&ib, &b, "v");
    char *ka = ejson_key(bson_iter_value(&ia)), *kb = ejson_key(bson_iter_value(&ib));
    ck_assert_str_ne(ka, kb);
    ck_assert_str_eq(kb, "[[\"$oid\", \"65a1f0c2e4b0a1b2c3d4e5f6\"]]");
    free(ka);
    free(kb);
    bson_destroy(&a);
    bson_destroy(&b);
    /* A string and a symbol with the same text are equal in MongoDB; a string and a number are not. */
    expect_same_key("{\"v\": \"x\"}", "{\"v\": {\"$symbol\": \"x\"}}", true);
    expect_same_key("{\"v\": \"1\"}", "{\"v\": {\"$numberInt\": \"1\"}}", false);
    /* An array inside a sub-document is not a sub-document. */
    expect_same_key("{\"v\": {\"a\": [1, 2]}}", "{\"v\": {\"a\": {\"0\": 1, \"1\": 2}}}", false);
    /* Binary subtypes differ. */
    expect_same_key("{\"v\": {\"$binary\": {\"base64\": \"AQ==\", \"subType\": \"00\"}}}",
                    "{\"v\": {\"$binary\": {\"base64\": \"AQ==\", \"subType\": \"80\"}}}", false);
}
END_TEST

/* A document in jsonb's key order, as text. */
static char *jsonb_text(const bson_t *doc)
{
    strbuf out = STRBUF_INIT;
    ck_assert_int_eq(ejson_write_document_jsonb(&out, bson_get_data(doc), doc->len, NULL), EJSON_OK);
    char *text = strbuf_detach(&out, NULL);
    ck_assert_ptr_nonnull(text);
    return text;
}

/* Whether every object of a document has its members in jsonb's order: shorter names first, equal lengths bytewise
 * (equal names allowed). */
static bool in_jsonb_order(const bson_t *doc)
{
    bson_iter_t it;
    ck_assert(bson_iter_init(&it, doc));
    const char *prev = NULL;
    uint32_t prev_len = 0;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        uint32_t klen = bson_iter_key_len(&it);
        if (prev != NULL && (prev_len > klen || (prev_len == klen && memcmp(prev, k, klen) > 0)))
            return false;
        prev = k;
        prev_len = klen;
        if (BSON_ITER_HOLDS_DOCUMENT(&it) || BSON_ITER_HOLDS_ARRAY(&it)) {
            uint32_t len;
            const uint8_t *data;
            bson_iter_document(&it, &len, &data);
            if (BSON_ITER_HOLDS_ARRAY(&it))
                bson_iter_array(&it, &len, &data);
            bson_t sub;
            ck_assert(bson_init_static(&sub, data, len));
            if (!in_jsonb_order(&sub))
                return false;
        }
    }
    return true;
}

/* ejson_write_document_jsonb: every object's members sorted as jsonb keeps them (the server's sort then finds them in
 * order), arrays untouched, equal names in their order (jsonb keeps the last), many members (past the insertion
 * sort), and for random documents the same members and values as the plain text. */
START_TEST(test_jsonb_order)
{
    bson_t *doc =
        from_json("{\"_id\": 1, \"name\": \"x\", \"a\": {\"zz\": 1, \"b\": 2, \"aa\": [{\"y\": 1, \"x\": 2}, 3]}, "
                  "\"bb\": 3, \"B\": 4, \"\u00e9\": 5}");
    char *text = jsonb_text(doc);
    ck_assert_str_eq(text, "{\"B\":4,\"a\":{\"b\":2,\"aa\":[{\"x\":2,\"y\":1},3],\"zz\":1},\"bb\":3,"
                           "\"\u00e9\":5,\"_id\":1,\"name\":\"x\"}");
    free(text);
    text = ejson_document(doc, NULL); /* the plain writer keeps MongoDB's order */
    ck_assert_str_eq(text, "{\"_id\":1,\"name\":\"x\",\"a\":{\"zz\":1,\"b\":2,\"aa\":[{\"y\":1,\"x\":2},3]},"
                           "\"bb\":3,\"B\":4,\"\u00e9\":5}");
    free(text);
    bson_destroy(doc);

    bson_t dup = BSON_INITIALIZER;
    BSON_APPEND_INT32(&dup, "k", 1);
    BSON_APPEND_INT32(&dup, "a", 0);
    BSON_APPEND_INT32(&dup, "k", 2);
    text = jsonb_text(&dup);
    ck_assert_str_eq(text, "{\"a\":0,\"k\":1,\"k\":2}");
    free(text);
    bson_destroy(&dup);

    bson_t many = BSON_INITIALIZER;
    for (int i = 39; i >= 0; i--) {
        char k[8];
        snprintf(k, sizeof k, "f%d", i);
        bson_append_int32(&many, k, -1, i);
    }
    text = jsonb_text(&many);
    ck_assert_msg(strncmp(text, "{\"f0\":0,\"f1\":1,", strlen("{\"f0\":0,\"f1\":1,")) == 0 &&
                      strstr(text, "\"f9\":9,\"f10\":10,") != NULL && strstr(text, "\"f39\":39}") != NULL,
                  "%s", text);
    free(text);
    bson_destroy(&many);

    for (int n = 0; n < 2000; n++) {
        bson_t r = BSON_INITIALIZER;
        for (int i = 0, fields = (int)(rnd() % 8) + 1; i < fields; i++) {
            char k[8];
            snprintf(k, sizeof k, "%c%d", "kzAb"[rnd() % 4], (int)(rnd() % 20));
            random_value(&r, k, 0);
        }
        char *sorted = jsonb_text(&r), *plain = ejson_document(&r, NULL);
        bson_error_t e1, e2;
        bson_t *a = bson_new_from_json((const uint8_t *)sorted, -1, &e1);
        bson_t *b = bson_new_from_json((const uint8_t *)plain, -1, &e2);
        ck_assert_msg(a != NULL && b != NULL, "%s / %s", sorted, plain);
        ck_assert_msg(in_jsonb_order(a), "not in jsonb order: %s", sorted);
        /* The plain text, read back and sorted, is the sorted text: the same members with the same values. */
        char *again = jsonb_text(b);
        ck_assert_msg(strcmp(again, sorted) == 0, "\n  sorted: %s\n  plain, then sorted: %s", sorted, again);
        free(again);
        bson_destroy(a);
        bson_destroy(b);
        free(sorted);
        free(plain);
        bson_destroy(&r);
    }
}
END_TEST

/* ejson_prepare_entry: the texts an op needs, or its refusal with the reason. */
START_TEST(test_prepare_entry)
{
    op_entry e;
    op_pos pos = {1, 1, 1};
    op_entry_init(&e);
    ck_assert(op_entry_alloc(&e, &pos, 2));
    bson_t *good = BCON_NEW("_id", BCON_INT32(7), "x", BCON_DOUBLE(-0.0));
    bson_t bad = BSON_INITIALIZER;
    BSON_APPEND_INT32(&bad, "_id", 8);
    bson_append_utf8(&bad, "s", 1, "\xfe", 1);
    bson_t *docs[2] = {good, &bad};
    for (int i = 0; i < 2; i++) {
        op *o = &e.ops[i];
        o->kind = OP_INSERT;
        o->doc = bson_get_data(docs[i]);
        o->doc_len = docs[i]->len;
        bson_iter_t it;
        bson_iter_init_find(&it, docs[i], "_id");
        o->id = *bson_iter_value(&it);
    }
    ck_assert(ejson_prepare_entry(&e));
    /* An inserted document's members in jsonb's key order (ejson_write_document_jsonb). */
    ck_assert_str_eq(e.ops[0].json, "{\"x\":{\"$numberDouble\":\"-0.0\"},\"_id\":7}");
    ck_assert_str_eq(e.ops[0].id_key, "7");
    ck_assert_ptr_null(e.ops[0].refusal);
    ck_assert_ptr_null(e.ops[1].json);
    ck_assert_ptr_nonnull(e.ops[1].refusal);
    ck_assert_ptr_nonnull(strstr(e.ops[1].refusal, "the document: a string or field name at s is not valid UTF-8"));
    for (int i = 0; i < 2; i++)
        e.ops[i].doc = NULL; /* not the op's buffer */
    op_entry_clear(&e);
    bson_destroy(good);
    bson_destroy(&bad);
}
END_TEST

Suite *ejson_suite(void); /* called by the generated runner list */

Suite *ejson_suite(void)
{
    Suite *s = suite_create("ejson");
    TCase *tc = tcase_create("render");
    tcase_add_test(tc, test_doubles);
    tcase_add_test(tc, test_doubles_match_printf);
    tcase_add_test(tc, test_dates);
    tcase_add_test(tc, test_every_type);
    tcase_add_test(tc, test_strings);
    tcase_add_test(tc, test_strings_every_position);
    tcase_add_test(tc, test_invalid_utf8_refused);
    tcase_add_test(tc, test_depth);
    tcase_add_test(tc, test_random_documents_match_libbson);
    tcase_add_test(tc, test_round_trip_random);
    tcase_add_test(tc, test_jsonb_order);
    suite_add_tcase(s, tc);
    TCase *keys = tcase_create("keys");
    tcase_add_test(keys, test_key_reads_like_the_id);
    tcase_add_test(keys, test_key_numbers_by_value);
    tcase_add_test(keys, test_key_types_and_order);
    tcase_add_test(keys, test_prepare_entry);
    suite_add_tcase(s, keys);
    return s;
}

/*
 * test_v2diff.c — unit tests for the $v:2 diff check (source/v2diff.h).
 *
 * The vectors under tests/vectors/ come from the server's own tests: every diff of diff_v2_pre_post.jsonl must pass,
 * and every diff of diff_v2_must_reject.jsonl must fail with the server's error code. Hand-written diffs then cover
 * each check's code, the message (code and path), the limits (depth, 32-bit indexes, `b` entries) and the valid
 * shapes the server writes. Paths are relative to the repository root, where the tests run.
 * How the decoder reports a bad diff inside an update entry is test_decode.c's business.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/v2diff.h"

#define VEC "tests/vectors/"

static bson_t *from_json(const char *json)
{
    bson_error_t e;
    bson_t *b = bson_new_from_json((const uint8_t *)json, -1, &e);
    ck_assert_msg(b != NULL, "bad test JSON %s: %s", json, e.message);
    return b;
}

/* Raw BSON from hex (the vectors carry exact bytes as hex: JSON cannot hold a duplicate key). */
static bson_t *hex_to_bson(const char *hex)
{
    size_t n = strlen(hex) / 2;
    uint8_t *buf = malloc(n);
    ck_assert_ptr_nonnull(buf);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        ck_assert(sscanf(hex + 2 * i, "%2x", &v) == 1);
        buf[i] = (uint8_t)v;
    }
    bson_t *b = bson_new_from_data(buf, n);
    free(buf);
    ck_assert_ptr_nonnull(b);
    return b;
}

/* The JSON-lines records of a vector file, one at a time (NULL at the end). */
typedef struct lines {
    FILE *f;
    char *line;
    size_t cap;
} lines;

static void lines_open(lines *l, const char *path)
{
    l->f = fopen(path, "r");
    l->line = NULL;
    l->cap = 0;
    ck_assert_msg(l->f != NULL, "cannot open %s (run from the repository root)", path);
}

static bson_t *lines_next(lines *l)
{
    ssize_t len;
    while ((len = getline(&l->line, &l->cap, l->f)) > 0) {
        if (len <= 1)
            continue;
        bson_error_t e;
        bson_t *rec = bson_new_from_json((const uint8_t *)l->line, len, &e);
        ck_assert_msg(rec != NULL, "%s", e.message);
        return rec;
    }
    return NULL;
}

static void lines_close(lines *l)
{
    free(l->line);
    fclose(l->f);
}

/* The diff must fail with `code`; the message must carry the code (when there is one). */
static void expect_reject(const bson_t *diff, int32_t want, const char *what)
{
    int32_t code = -1;
    char err[512], tag[32];
    ck_assert_msg(!v2diff_validate(diff, &code, err, sizeof err), "%s accepted", what);
    ck_assert_msg(code == want, "%s: code %d, want %d (%s)", what, code, want, err);
    ck_assert_msg(strncmp(err, "invalid $v:2 diff ", 18) == 0, "%s: message '%s'", what, err);
    if (want != 0) {
        snprintf(tag, sizeof tag, "[%d]", want);
        ck_assert_msg(strstr(err, tag) != NULL, "%s: message '%s' lacks %s", what, err, tag);
    } else {
        ck_assert_msg(strchr(err, '[') == NULL, "%s: message '%s' names a code", what, err);
    }
    /* code and err are optional */
    ck_assert(!v2diff_validate(diff, NULL, NULL, 0));
}

static void expect_reject_json(const char *json, int32_t want)
{
    bson_t *d = from_json(json);
    expect_reject(d, want, json);
    bson_destroy(d);
}

static void expect_accept_json(const char *json)
{
    bson_t *d = from_json(json);
    int32_t code = -1;
    char err[512];
    ck_assert_msg(v2diff_validate(d, &code, err, sizeof err), "%s: %s", json, err);
    ck_assert_int_eq(code, 0);
    ck_assert(v2diff_validate(d, NULL, NULL, 0));
    bson_destroy(d);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* the server's vectors */

/* Every diff the server produced in its tests passes, read both from canonical JSON and from the exact bytes. */
START_TEST(test_pre_post_vectors_pass)
{
    lines l;
    bson_t *rec;
    size_t checked = 0;
    lines_open(&l, VEC "diff_v2_pre_post.jsonl");
    while ((rec = lines_next(&l)) != NULL) {
        bson_iter_t it, o;
        if (!bson_iter_init_find(&it, rec, "o")) {
            bson_destroy(rec); /* the _comment line */
            continue;
        }
        ck_assert(bson_iter_recurse(&it, &o) && bson_iter_find(&o, "diff"));
        const uint8_t *data;
        uint32_t len;
        bson_t view;
        char err[512];
        int32_t code = -1;
        bson_iter_document(&o, &len, &data);
        ck_assert(bson_init_static(&view, data, len));
        ck_assert_msg(v2diff_validate(&view, &code, err, sizeof err), "record %zu: %s", checked + 1, err);
        ck_assert_int_eq(code, 0);

        ck_assert(bson_iter_init_find(&it, rec, "o_bson_hex"));
        bson_t *raw = hex_to_bson(bson_iter_utf8(&it, NULL));
        ck_assert(bson_iter_init_find(&it, raw, "diff") && BSON_ITER_HOLDS_DOCUMENT(&it));
        bson_iter_document(&it, &len, &data);
        ck_assert(bson_init_static(&view, data, len));
        ck_assert_msg(v2diff_validate(&view, &code, err, sizeof err), "record %zu (raw): %s", checked + 1, err);
        bson_destroy(raw);
        bson_destroy(rec);
        checked++;
    }
    lines_close(&l);
    ck_assert_uint_eq(checked, 37);
}
END_TEST

/* Every malformed diff of the server's tests fails with the server's code. */
START_TEST(test_must_reject_vectors)
{
    lines l;
    bson_t *rec;
    size_t checked = 0;
    lines_open(&l, VEC "diff_v2_must_reject.jsonl");
    while ((rec = lines_next(&l)) != NULL) {
        bson_iter_t it;
        if (!bson_iter_init_find(&it, rec, "diff_bson_hex")) {
            bson_destroy(rec);
            continue;
        }
        bson_t *diff = hex_to_bson(bson_iter_utf8(&it, NULL));
        ck_assert(bson_iter_init_find(&it, rec, "server_error_code"));
        int32_t want = (int32_t)bson_iter_as_int64(&it);
        ck_assert(bson_iter_init_find(&it, rec, "id"));
        expect_reject(diff, want, bson_iter_utf8(&it, NULL));
        bson_destroy(diff);
        bson_destroy(rec);
        checked++;
    }
    lines_close(&l);
    ck_assert_uint_eq(checked, 12);
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------- */
/* each check */

START_TEST(test_object_diff_checks)
{
    expect_reject_json("{}", 4770500);
    expect_reject_json("{\"sa\": {}}", 4770500);
    expect_reject_json("{\"\": {\"x\": 1}}", 4770505);
    expect_reject_json("{\"x\": {\"y\": 1}}", 4770503);
    expect_reject_json("{\"a\": true, \"u0\": 1}", 4770503); /* an array diff at the top */
    expect_reject_json("{\"i\": {\"x\": 1}, \"d\": {\"y\": false}}", 4770503);
    expect_reject_json("{\"d\": {\"x\": false}, \"d\": {\"y\": false}}", 4770503);
    expect_reject_json("{\"u\": 5}", 4770507);
    expect_reject_json("{\"sa\": 5}", 4770507); /* the first sub-diff */
    expect_reject_json("{\"sa\": {\"u\": {\"x\": 1}}, \"u\": {\"y\": 1}}", 4770514);
    expect_reject_json("{\"sa\": {\"u\": {\"x\": 1}}, \"sb\": 5}", 470510); /* a later one */
    expect_reject_json("{\"sa\": {\"u\": 1}}", 4770507);
    /* one name per level, across the sections and the sub-diffs */
    expect_reject_json("{\"d\": {\"x\": false}, \"u\": {\"x\": 1}}", 4728000);
    expect_reject_json("{\"u\": {\"a\": 1}, \"sa\": {\"u\": {\"b\": 1}}}", 4728000);
    expect_reject_json("{\"sa\": {\"u\": {\"b\": 1}, \"i\": {\"b\": 2}}}", 4728000);
    expect_accept_json("{\"u\": {\"x\": 1}, \"sa\": {\"u\": {\"x\": 1}}}"); /* the same name on two levels */
}
END_TEST

START_TEST(test_array_diff_checks)
{
    expect_reject_json("{\"sa\": {\"a\": 1}}", 4770519);
    expect_reject_json("{\"sa\": {\"a\": false}}", 4770520);
    expect_reject_json("{\"sa\": {\"a\": true, \"l\": {\"$numberLong\": \"3\"}}}", 4770507);
    expect_reject_json("{\"sa\": {\"a\": true, \"u\": 1}}", 4770521);
    expect_reject_json("{\"sa\": {\"a\": true, \"u0\": 1, \"l\": 3}}", 4770521); /* l only right after a */
    expect_reject_json("{\"sa\": {\"a\": true, \"ux\": 1}}", 4770512);
    expect_reject_json("{\"sa\": {\"a\": true, \"u-1\": 1}}", 4770512);
    expect_reject_json("{\"sa\": {\"a\": true, \"d0\": 1}}", 4770502);
    expect_reject_json("{\"sa\": {\"a\": true, \"s0\": 1}}", 4770501);
    expect_reject_json("{\"sa\": {\"a\": true, \"s0\": {\"sb\": {\"a\": true, \"s1\": {}}}}}", 4770500);
    /* a sub-diff whose first field is not `a` is an object diff, whatever it holds: `u0` is read as section u */
    expect_reject_json("{\"sa\": {\"u0\": 1, \"a\": true}}", 4770507);
}
END_TEST

/* The shapes servers write pass: every section, nested array and object sub-diffs, resizes, numeric-looking
 * field names in an object diff, binary sections. */
START_TEST(test_valid_shapes)
{
    expect_accept_json("{\"d\": {\"z\": false}, \"u\": {\"y\": 1}, \"i\": {\"x\": 2}, \"sa\": {\"a\": true, "
                       "\"l\": 3, \"u0\": 1, \"s2\": {\"i\": {\"129\": 1}}}, \"sb\": {\"s0\": {\"u\": {\"q\": 1}}}}");
    expect_accept_json("{\"sa\": {\"a\": true, \"l\": 0}}");
    expect_accept_json("{\"sa\": {\"a\": true, \"s0\": {\"a\": true, \"u1\": null}}}");
    expect_accept_json(
        "{\"b\": {\"x\": {\"o\": 1, \"d\": {\"$binary\": {\"base64\": \"AAE=\", \"subType\": \"00\"}}}}, "
        "\"sy\": {\"u\": {\"k\": 1}}}");
    expect_accept_json("{\"b\": {\"x\": {\"o\": {\"$numberLong\": \"7\"}, \"d\": {\"$binary\": {\"base64\": \"AA==\", "
                       "\"subType\": \"00\"}}}}}");
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------- */
/* limits and messages */

START_TEST(test_binary_section_has_no_code)
{
    expect_reject_json("{\"b\": {\"x\": 1}}", 0);
    expect_reject_json("{\"b\": {\"x\": {\"o\": 1}}}", 0);
    expect_reject_json("{\"b\": {\"x\": {\"o\": 1.5, \"d\": {\"$binary\": {\"base64\": \"AA==\", \"subType\": "
                       "\"00\"}}}}}",
                       0);
}
END_TEST

/* Indexes must fit in 32 bits. */
START_TEST(test_index_limit)
{
    expect_accept_json("{\"sa\": {\"a\": true, \"u4294967295\": 1}}");
    expect_reject_json("{\"sa\": {\"a\": true, \"u4294967296\": 1}}", 4770512);
}
END_TEST

/* k sub-diffs nested in one another, alternating object and array diffs; the top is an object diff. */
static bson_t *nested(int k)
{
    bson_t *d = from_json("{\"u\": {\"x\": 1}}");
    for (int i = 1; i <= k; i++) {
        bson_t *outer = bson_new();
        if ((k - i) % 2 == 0) {
            BSON_APPEND_DOCUMENT(outer, "sa", d);
        } else {
            BSON_APPEND_BOOL(outer, "a", true);
            BSON_APPEND_DOCUMENT(outer, "s0", d);
        }
        bson_destroy(d);
        d = outer;
    }
    return d;
}

START_TEST(test_depth_limit)
{
    bson_t *ok = nested(V2DIFF_MAX_DEPTH);
    char err[512];
    ck_assert_msg(v2diff_validate(ok, NULL, err, sizeof err), "%s", err);
    bson_destroy(ok);

    bson_t *deep = nested(V2DIFF_MAX_DEPTH + 1);
    expect_reject(deep, 0, "one level too deep");
    int32_t code = -1;
    ck_assert(!v2diff_validate(deep, &code, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "nested deeper than 200 levels"));
    bson_destroy(deep);
}
END_TEST

/* The message names the code and the path to the fault; a sub-diff that passed leaves the path as it was. */
START_TEST(test_messages)
{
    static const struct {
        const char *json, *want;
    } cases[] = {
        {"{\"sa\": {\"a\": true, \"s0\": {\"sb\": {\"a\": true, \"s1\": {}}}}}",
         "invalid $v:2 diff [4770500] at diff.sa.s0.sb.s1: empty diff"},
        {"{\"sa\": {\"u\": {\"x\": 1}}, \"sb\": {\"q\": {}}}",
         "invalid $v:2 diff [4770503] at diff.sb: unexpected section 'q'"},
        {"{\"u\": {\"y\": 1}, \"u\": {\"z\": 1}}",
         "invalid $v:2 diff [4770503] at diff: unexpected section 'u' (repeated or out of order)"},
        {"{\"d\": {\"x\": false}, \"u\": {\"x\": 1}}",
         "invalid $v:2 diff [4728000] at diff: duplicate field name in diff: 'x'"},
        {"{\"b\": {\"x\": 1}}", "invalid $v:2 diff at diff: binary section entry 'x' is not {o: int, d: BinData}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bson_t *d = from_json(cases[i].json);
        char err[512];
        ck_assert(!v2diff_validate(d, NULL, err, sizeof err));
        ck_assert_str_eq(err, cases[i].want);
        bson_destroy(d);
    }
    /* a short buffer gets the start of the message, NUL-terminated */
    bson_t *d = from_json("{\"x\": {}}");
    char small[12];
    memset(small, 'Z', sizeof small);
    ck_assert(!v2diff_validate(d, NULL, small, sizeof small));
    ck_assert_str_eq(small, "invalid $v:");
    bson_destroy(d);
}
END_TEST

/* Many names on one level: their list leaves the stack (more than 32), and duplicates are still found. */
START_TEST(test_wide_level)
{
    bson_t *u = bson_new(), *diff = bson_new();
    char name[16];
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "f%d", i);
        BSON_APPEND_INT32(u, name, i);
    }
    BSON_APPEND_DOCUMENT(diff, "u", u);
    int32_t code = -1;
    ck_assert(v2diff_validate(diff, &code, NULL, 0));
    ck_assert_int_eq(code, 0);

    bson_t *i = from_json("{\"f57\": 1}"), *dup = bson_copy(diff);
    BSON_APPEND_DOCUMENT(dup, "i", i);
    expect_reject(dup, 4728000, "a duplicate among 101 names");
    bson_destroy(i);
    bson_destroy(dup);
    bson_destroy(diff);
    bson_destroy(u);
}
END_TEST

Suite *v2diff_suite(void); /* called by the generated runner list */

Suite *v2diff_suite(void)
{
    Suite *s = suite_create("v2diff");
    TCase *tc = tcase_create("v2diff");
    tcase_add_test(tc, test_pre_post_vectors_pass);
    tcase_add_test(tc, test_must_reject_vectors);
    tcase_add_test(tc, test_object_diff_checks);
    tcase_add_test(tc, test_array_diff_checks);
    tcase_add_test(tc, test_valid_shapes);
    tcase_add_test(tc, test_binary_section_has_no_code);
    tcase_add_test(tc, test_index_limit);
    tcase_add_test(tc, test_depth_limit);
    tcase_add_test(tc, test_messages);
    tcase_add_test(tc, test_wide_level);
    suite_add_tcase(s, tc);
    return s;
}

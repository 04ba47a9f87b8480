/*
 * test_bucket.c — map/bucket.h: time-series buckets unpacked into measurements, `$v:2` diffs applied.
 *
 * Unpacking: hand-built version 1 buckets (gaps, meta or none, the data region's field order), version 2/3 buckets
 * whose columns mongosim's encoder wrote (tests/mongosim/bsoncolumn_enc.h) and whose columns the server wrote
 * (tests/vectors/bsoncolumn/server_columns.jsonl), and every refusal. Diffs: each grammar element with the field
 * order the server's applier gives, the strict and idempotent treatment of diffs that do not fit, the server's own
 * pre/diff/post vectors (tests/vectors/diff_v2_pre_post.jsonl, byte for byte), and 8.0 binary diffs appending to
 * compressed buckets. Real data: mongo-tools' MongoDB 5.0 dump of a time-series collection with its oplog
 * (tests/vectors/timeseries/), replayed and unpacked, must give the 2 164 measurements that an independent Python
 * replay (tests/vectors/timeseries/expected.py) computed. Paths are relative to the repository root.
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../mongosim/bsoncolumn_enc.h"
#include "map/bucket.h"

Suite *bucket_suite(void);

#define TSDIR "tests/vectors/timeseries/"

static bson_t *J(const char *json)
{
    bson_error_t e;
    bson_t *b = bson_new_from_json((const uint8_t *)json, -1, &e);
    ck_assert_msg(b != NULL, "bad test JSON %s: %s", json, e.message);
    return b;
}

static char *as_json(const uint8_t *d, size_t n)
{
    bson_t b;
    if (!bson_init_static(&b, d, n))
        return bson_strdup("(not BSON)");
    return bson_as_canonical_extended_json(&b, NULL);
}

/* Row i of r must be, byte for byte, the document json describes (its field order included). */
static void expect_row(const bucket_rows *r, size_t i, const char *json)
{
    ck_assert_msg(i < r->n, "row %zu of %zu", i, r->n);
    bson_t *w = J(json);
    if (w->len != r->lens[i] || memcmp(bson_get_data(w), r->docs[i], w->len) != 0) {
        char *got = as_json(r->docs[i], r->lens[i]);
        ck_abort_msg("row %zu: got %s, want %s", i, got, json);
    }
    bson_destroy(w);
}

static bool unpack_json(const char *json, const char *time, const char *meta, bucket_rows *r, char *err, size_t n)
{
    bson_t *b = J(json);
    bucket_spec spec = {time, meta, false};
    bool ok = bucket_unpack(bson_get_data(b), b->len, &spec, r, err, n);
    bson_destroy(b);
    return ok;
}

static void expect_fail_doc(const bson_t *b, const char *time, const char *meta, const char *want)
{
    char err[256] = "";
    bucket_rows r;
    bucket_spec spec = {time, meta, false};
    ck_assert_msg(!bucket_unpack(bson_get_data(b), b->len, &spec, &r, err, sizeof err), "unpacked, want '%s'", want);
    ck_assert_msg(strstr(err, want) != NULL, "error '%s' does not say '%s'", err, want);
    ck_assert_uint_eq(r.n, 0);
    ck_assert_ptr_null(r.store);
    bucket_rows_clear(&r);
}

static void expect_fail(const char *json, const char *meta, const char *want)
{
    bson_t *b = J(json);
    expect_fail_doc(b, "t", meta, want);
    bson_destroy(b);
}

#define D(ms) "{\"$date\": {\"$numberLong\": \"" #ms "\"}}"

/* ---- version 1 ---- */

START_TEST(v1_gaps_meta_and_field_order)
{
    char err[256];
    bucket_rows r;
    /* data region order m, t, x: the time field comes first in every measurement, then meta, then m and x */
    ck_assert_msg(unpack_json("{\"_id\": {\"$oid\": \"60c7df2bf4549c58ea9377e2\"}, \"control\": {\"version\": 1, "
                              "\"min\": {\"t\": " D(1000) "}, \"max\": {\"t\": " D(
                                  3000) "}}, \"meta\": {\"d\": 7}, "
                                        "\"data\": {\"m\": {\"0\": 1, \"2\": 3}, \"t\": {\"0\": " D(1000) ", \"1\": " D(
                                            2000) ", \"2\": " D(3000) "}, \"x\": {\"1\": \"a\", \"2\": [1, 2]}}}",
                              "t", "tag", &r, err, sizeof err),
                  "%s", err);
    ck_assert_uint_eq(r.n, 3);
    expect_row(&r, 0, "{\"t\": " D(1000) ", \"tag\": {\"d\": 7}, \"m\": 1}");
    expect_row(&r, 1, "{\"t\": " D(2000) ", \"tag\": {\"d\": 7}, \"x\": \"a\"}");
    expect_row(&r, 2, "{\"t\": " D(3000) ", \"tag\": {\"d\": 7}, \"m\": 3, \"x\": [1, 2]}");
    ck_assert_int_eq(r.times[0], 1000);
    ck_assert_int_eq(r.times[1], 2000);
    ck_assert_int_eq(r.times[2], 3000);
    bucket_rows_clear(&r);
    ck_assert_uint_eq(r.n, 0);
    bucket_rows_clear(&r); /* twice is fine */

    /* a collection without metaField, a bucket without meta */
    ck_assert_msg(unpack_json("{\"control\": {\"version\": 1}, \"data\": {\"t\": {\"0\": " D(
                                  5) "}, \"_id\": {\"0\": "
                                     "{\"$oid\": \"60c7df3b15caf5ee94e01f7e\"}}, \"v\": {\"0\": 1.5}}}",
                              "t", NULL, &r, err, sizeof err),
                  "%s", err);
    ck_assert_uint_eq(r.n, 1);
    expect_row(&r, 0, "{\"t\": " D(5) ", \"_id\": {\"$oid\": \"60c7df3b15caf5ee94e01f7e\"}, \"v\": 1.5}");
    bucket_rows_clear(&r);

    /* a metaField, but this bucket's measurements had none: no meta field in them */
    ck_assert_msg(unpack_json("{\"control\": {\"version\": 1}, \"data\": {\"t\": {\"0\": " D(5) "}}}", "t", "tag", &r,
                              err, sizeof err),
                  "%s", err);
    expect_row(&r, 0, "{\"t\": " D(5) "}");
    bucket_rows_clear(&r);

    /* meta that is null is a value (the server's Value is not missing): kept */
    ck_assert_msg(unpack_json("{\"control\": {\"version\": 1}, \"meta\": null, \"data\": {\"t\": {\"0\": " D(5) "}}}",
                              "t", "tag", &r, err, sizeof err),
                  "%s", err);
    expect_row(&r, 0, "{\"t\": " D(5) ", \"tag\": null}");
    bucket_rows_clear(&r);

    /* an empty data region holds no measurement (and needs nothing else) */
    ck_assert(unpack_json("{\"data\": {}}", "t", NULL, &r, err, sizeof err));
    ck_assert_uint_eq(r.n, 0);
    bucket_rows_clear(&r);
    /* keys out of order (an insert applied again moves its key to the end): each measurement keeps its place */
    ck_assert_msg(unpack_json("{\"control\": {\"version\": 1}, \"data\": {\"t\": {\"1\": " D(20) ", \"0\": " D(
                                  10) "}, \"x\": {\"0\": \"a\", \"1\": \"b\"}, \"y\": {\"1\": 2}}}",
                              "t", NULL, &r, err, sizeof err),
                  "%s", err);
    ck_assert_uint_eq(r.n, 2);
    expect_row(&r, 0, "{\"t\": " D(10) ", \"x\": \"a\"}");
    expect_row(&r, 1, "{\"t\": " D(20) ", \"x\": \"b\", \"y\": 2}");
    bucket_rows_clear(&r);
    /* a version given as a double or int64 counts as its integer (safeNumberInt) */
    ck_assert_msg(unpack_json("{\"control\": {\"version\": 1.0}, \"data\": {\"t\": {\"0\": " D(5) "}}}", "t", NULL, &r,
                              err, sizeof err),
                  "%s", err);
    ck_assert_uint_eq(r.n, 1);
    bucket_rows_clear(&r);
}
END_TEST

START_TEST(refusals)
{
    expect_fail("{}", NULL, "empty bucket");
    expect_fail("{\"control\": {\"version\": 1}}", NULL, "no data");
    expect_fail("{\"control\": {\"version\": 1}, \"data\": 1}", NULL, "data is not a document");
    expect_fail("{\"meta\": 1, \"data\": {\"t\": {\"0\": " D(1) "}}}", NULL, "no metaField");
    expect_fail("{\"meta\": {\"$undefined\": true}, \"data\": {\"t\": {\"0\": " D(1) "}}}", "m", "undefined");
    expect_fail("{\"data\": {\"t\": {\"0\": " D(1) "}}}", NULL, "no control");
    expect_fail("{\"control\": 1, \"data\": {\"t\": {\"0\": " D(1) "}}}", NULL, "control is not a document");
    expect_fail("{\"control\": {}, \"data\": {\"t\": {\"0\": " D(1) "}}}", NULL, "no numeric control.version");
    expect_fail("{\"control\": {\"version\": \"1\"}, \"data\": {\"t\": {\"0\": " D(1) "}}}", NULL,
                "no numeric control.version");
    expect_fail("{\"control\": {\"version\": 1.5}, \"data\": {\"t\": {\"0\": " D(1) "}}}", NULL, "not an integer");
    expect_fail("{\"control\": {\"version\": 4}, \"data\": {\"t\": {\"0\": " D(1) "}}}", NULL,
                "unknown control.version 4");
    expect_fail("{\"control\": {\"version\": 1}, \"data\": {\"x\": {\"0\": 1}}}", NULL, "no time column data.t");
    expect_fail("{\"control\": {\"version\": 1}, \"data\": {\"t\": [" D(1) "]}}", NULL, "data.t is a non-document");
    expect_fail("{\"control\": {\"version\": 1}, \"data\": {\"t\": {\"0\": " D(1) ", \"2\": " D(2) "}}}", NULL,
                "has key '2': its 2 keys are not the places 0 to 1");
    expect_fail("{\"control\": {\"version\": 1}, \"data\": {\"t\": {\"0\": 5}}}", NULL,
                "time at place 0 (data.t.0) is not a date");
    expect_fail("{\"control\": {\"version\": 1}, \"data\": {\"t\": {\"0\": " D(1) "}, \"x\": 3}}", NULL,
                "data.x is not a document");
    expect_fail("{\"control\": {\"version\": 1}, \"data\": {\"t\": {\"0\": " D(1) "}, \"x\": {\"1\": 3}}}", NULL,
                "data.x has a value at key '1'");
    expect_fail("{\"control\": {\"version\": 1}, \"data\": {\"t\": {\"0\": " D(1) ", \"1\": " D(2) "}, \"x\": {\"1\": "
                                                                                                   "3, \"1\": 4}}}",
                NULL, "data.x has a value at key '1'");
    expect_fail("{\"control\": {\"version\": 1}, \"data\": {\"t\": {\"0\": " D(1) ", \"01\": " D(2) "}}}", NULL,
                "has key '01'");
    expect_fail("{\"control\": {\"version\": 2}, \"data\": {\"t\": {\"0\": " D(1) "}}}", NULL, "data.t is not BinData");
    expect_fail("{\"control\": {\"version\": 2}, \"data\": {\"t\": {\"$binary\": {\"base64\": \"AA==\", \"subType\": "
                "\"00\"}}}}",
                NULL, "subtype 0, not 7");

    /* not BSON at all, and every truncation of a real bucket: refused, never read past the end */
    char err[256];
    bucket_rows r;
    bucket_spec spec = {"t", NULL, false};
    uint8_t junk[8] = {8, 0, 0, 0, 0x10, 'a', 0, 0};
    ck_assert(!bucket_unpack(junk, sizeof junk, &spec, &r, err, sizeof err));
    ck_assert(!bucket_unpack(NULL, 0, &spec, &r, err, sizeof err));
    bson_t *b = J("{\"control\": {\"version\": 1}, \"data\": {\"t\": {\"0\": " D(1) "}, \"x\": {\"0\": \"abc\"}}}");
    for (uint32_t n = 0; n < b->len; n++) {
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, bson_get_data(b), n);
        ck_assert(!bucket_unpack(copy, n, &spec, &r, err, sizeof err));
        free(copy);
    }
    /* a length header that lies */
    uint8_t *copy = malloc(b->len);
    memcpy(copy, bson_get_data(b), b->len);
    copy[0] = (uint8_t)(copy[0] + 4);
    ck_assert(!bucket_unpack(copy, b->len, &spec, &r, err, sizeof err));
    ck_assert(strstr(err, "not a BSON document") != NULL);
    copy[0] = (uint8_t)(copy[0] - 4);
    copy[b->len - 3] = 0x7f; /* inside the last string: still BSON, still unpacks */
    ck_assert_msg(bucket_unpack(copy, b->len, &spec, &r, err, sizeof err), "%s", err);
    bucket_rows_clear(&r);
    uint8_t *x = memmem(copy, b->len, "\x03x\x00", 3); /* data.x's element: its type becomes one that does not exist */
    ck_assert_ptr_nonnull(x);
    *x = 0x55;
    ck_assert(!bucket_unpack(copy, b->len, &spec, &r, err, sizeof err));
    free(copy);
    bson_destroy(b);
}
END_TEST

/* ---- version 2/3, columns from mongosim's encoder ---- */

static void append_binary_column(bson_t *data, const char *name, bcenc_t *enc)
{
    size_t n;
    uint8_t *bytes = bcenc_finish(enc, &n);
    ck_assert(bson_append_binary(data, name, -1, BSON_SUBTYPE_COLUMN, bytes, (uint32_t)n));
    free(bytes);
}

/* A compressed bucket of n measurements: t (dates), v (ints, every third missing), s (strings, every fifth
 * present), o (objects), in the data order v, t, s, o. want[i] gets measurement i as the view gives it. */
static bson_t *encoded_bucket(int version, size_t n, int64_t count, bool meta, bson_t **want)
{
    bcenc_t *et = bcenc_new(), *ev = bcenc_new(), *es = bcenc_new(), *eo = bcenc_new();
    for (size_t i = 0; i < n; i++) {
        bson_t m = BSON_INITIALIZER, o;
        bson_iter_t it;
        int64_t t = INT64_C(1700000000000) + (int64_t)(version == 3 && i % 2 ? i * 1000 - 5000 : i * 1000);
        BSON_APPEND_DATE_TIME(&m, "t", t);
        if (meta)
            BSON_APPEND_UTF8(&m, "tag", "sensor-1");
        if (i % 3 != 0)
            BSON_APPEND_INT32(&m, "v", (int32_t)(i * 7));
        if (i % 5 == 0)
            BSON_APPEND_UTF8(&m, "s", i % 10 ? "five" : "ten");
        BSON_APPEND_DOCUMENT_BEGIN(&m, "o", &o);
        BSON_APPEND_DOUBLE(&o, "a", (double)i / 4);
        if (i % 2)
            BSON_APPEND_INT64(&o, "b", (int64_t)i);
        bson_append_document_end(&m, &o);
        bson_iter_init_find(&it, &m, "t");
        bcenc_append_iter(et, &it);
        if (bson_iter_init_find(&it, &m, "v"))
            bcenc_append_iter(ev, &it);
        else
            bcenc_skip(ev);
        if (bson_iter_init_find(&it, &m, "s"))
            bcenc_append_iter(es, &it);
        else
            bcenc_skip(es);
        bson_iter_init_find(&it, &m, "o");
        bcenc_append_iter(eo, &it);
        /* the view's order: time, meta, then the data order v, s, o (t is taken out) */
        want[i] = bson_new();
        bson_iter_init_find(&it, &m, "t");
        bson_append_iter(want[i], NULL, 0, &it);
        if (meta && bson_iter_init_find(&it, &m, "tag"))
            bson_append_iter(want[i], NULL, 0, &it);
        static const char *const order[] = {"v", "s", "o"};
        for (int k = 0; k < 3; k++)
            if (bson_iter_init_find(&it, &m, order[k]))
                bson_append_iter(want[i], NULL, 0, &it);
        bson_destroy(&m);
    }
    bson_t *b = bson_new(), c, d;
    bson_oid_t bid;
    bson_oid_init_from_string(&bid, "6553f1000102030405060708");
    BSON_APPEND_OID(b, "_id", &bid);
    BSON_APPEND_DOCUMENT_BEGIN(b, "control", &c);
    BSON_APPEND_INT32(&c, "version", version);
    if (count >= 0)
        BSON_APPEND_INT32(&c, "count", (int32_t)count);
    bson_append_document_end(b, &c);
    if (meta)
        BSON_APPEND_UTF8(b, "meta", "sensor-1");
    BSON_APPEND_DOCUMENT_BEGIN(b, "data", &d);
    append_binary_column(&d, "v", ev);
    append_binary_column(&d, "t", et);
    append_binary_column(&d, "s", es);
    append_binary_column(&d, "o", eo);
    bson_append_document_end(b, &d);
    bcenc_free(et);
    bcenc_free(ev);
    bcenc_free(es);
    bcenc_free(eo);
    return b;
}

static void expect_rows_equal(const bucket_rows *r, bson_t *const *want, size_t n)
{
    ck_assert_uint_eq(r->n, n);
    for (size_t i = 0; i < n; i++) {
        if (want[i]->len != r->lens[i] || memcmp(bson_get_data(want[i]), r->docs[i], r->lens[i]) != 0) {
            char *a = bson_as_canonical_extended_json(want[i], NULL), *g = as_json(r->docs[i], r->lens[i]);
            ck_abort_msg("measurement %zu: got %s, want %s", i, g, a);
        }
        bson_iter_t it;
        ck_assert(bson_iter_init_find(&it, want[i], "t"));
        ck_assert_int_eq(r->times[i], bson_iter_date_time(&it));
    }
}

START_TEST(v2_v3_encoded_buckets)
{
    static const size_t sizes[] = {1, 2, 9, 130, 1000};
    char err[256];
    for (int version = 2; version <= 3; version++) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            for (int meta = 0; meta < 2; meta++) {
                size_t n = sizes[s];
                bson_t **want = calloc(n, sizeof *want);
                bson_t *b = encoded_bucket(version, n, s % 2 ? -1 : (int64_t)n, meta, want);
                bucket_rows r;
                bucket_spec spec = {"t", meta ? "tag" : NULL, false};
                ck_assert_msg(bucket_unpack(bson_get_data(b), b->len, &spec, &r, err, sizeof err), "v%d n=%zu: %s",
                              version, n, err);
                expect_rows_equal(&r, want, n);
                bucket_rows_clear(&r);
                for (size_t i = 0; i < n; i++)
                    bson_destroy(want[i]);
                free(want);
                bson_destroy(b);
            }
        }
    }
}
END_TEST

/* A compressed bucket with the given columns (name, then a malloc'd column from the encoder, in order). */
static bson_t *bucket_with(int version, int32_t count, int ncols, const char *const *names, bcenc_t *const *encs)
{
    bson_t *b = bson_new(), c, d;
    BSON_APPEND_DOCUMENT_BEGIN(b, "control", &c);
    BSON_APPEND_INT32(&c, "version", version);
    if (count >= 0)
        BSON_APPEND_INT32(&c, "count", count);
    bson_append_document_end(b, &c);
    BSON_APPEND_DOCUMENT_BEGIN(b, "data", &d);
    for (int i = 0; i < ncols; i++)
        append_binary_column(&d, names[i], encs[i]);
    bson_append_document_end(b, &d);
    return b;
}

static void enc_date(bcenc_t *e, int64_t ms)
{
    bson_t t = BSON_INITIALIZER;
    bson_iter_t it;
    BSON_APPEND_DATE_TIME(&t, "v", ms);
    bson_iter_init_find(&it, &t, "v");
    bcenc_append_iter(e, &it);
    bson_destroy(&t);
}

static void enc_int(bcenc_t *e, int32_t v)
{
    bson_t t = BSON_INITIALIZER;
    bson_iter_t it;
    BSON_APPEND_INT32(&t, "v", v);
    bson_iter_init_find(&it, &t, "v");
    bcenc_append_iter(e, &it);
    bson_destroy(&t);
}

START_TEST(v2_refusals)
{
    static const char *const names[] = {"t", "x"};
    bcenc_t *e[2];

    /* a time column with a skip */
    e[0] = bcenc_new(), e[1] = bcenc_new();
    enc_date(e[0], 1), bcenc_skip(e[0]), enc_int(e[1], 1), enc_int(e[1], 2);
    bson_t *b = bucket_with(2, 2, 2, names, e);
    expect_fail_doc(b, "t", NULL, "no time at position 1");
    bson_destroy(b);
    bcenc_free(e[0]), bcenc_free(e[1]);

    /* a time that is not a date */
    e[0] = bcenc_new();
    enc_int(e[0], 1);
    b = bucket_with(2, 1, 1, names, e);
    expect_fail_doc(b, "t", NULL, "time at position 0 (data.t) is not a date");
    bson_destroy(b);
    bcenc_free(e[0]);

    /* a column shorter, then longer, than the time column */
    e[0] = bcenc_new(), e[1] = bcenc_new();
    enc_date(e[0], 1), enc_date(e[0], 2), enc_int(e[1], 1);
    b = bucket_with(2, 2, 2, names, e);
    expect_fail_doc(b, "t", NULL, "data.x ends at position 1");
    bson_destroy(b);
    enc_int(e[1], 2), enc_int(e[1], 3);
    b = bucket_with(2, 2, 2, names, e);
    expect_fail_doc(b, "t", NULL, "data.x has more positions than data.t (2)");
    bson_destroy(b);
    bcenc_free(e[1]);

    /* control.count that differs from the time column (v2 and v3); none at all is fine */
    b = bucket_with(3, 3, 1, names, e);
    expect_fail_doc(b, "t", NULL, "control.count is 3 but data.t has 2 positions");
    bson_destroy(b);
    b = bucket_with(2, -1, 1, names, e);
    char err[256];
    bucket_rows r;
    bucket_spec spec = {"t", NULL, false};
    ck_assert_msg(bucket_unpack(bson_get_data(b), b->len, &spec, &r, err, sizeof err), "%s", err);
    ck_assert_uint_eq(r.n, 2);
    bucket_rows_clear(&r);
    bson_destroy(b);

    /* a malformed column: the decoder's reason and byte offset come through */
    size_t n;
    uint8_t *bytes = bcenc_finish(e[0], &n);
    bcenc_free(e[0]);
    bytes[n - 1] = 0x88; /* the end byte becomes a Simple-8b block with nothing after it */
    b = bson_new();
    bson_t c, d;
    BSON_APPEND_DOCUMENT_BEGIN(b, "control", &c);
    BSON_APPEND_INT32(&c, "version", 2);
    bson_append_document_end(b, &c);
    BSON_APPEND_DOCUMENT_BEGIN(b, "data", &d);
    bson_append_binary(&d, "t", 1, BSON_SUBTYPE_COLUMN, bytes, (uint32_t)n);
    bson_append_document_end(b, &d);
    expect_fail_doc(b, "t", NULL, "version 2 bucket: data.t: ");
    ck_assert(!bucket_unpack(bson_get_data(b), b->len, &spec, &r, err, sizeof err));
    ck_assert_msg(strstr(err, "offset") != NULL || strstr(err, "byte") != NULL, "no byte offset in '%s'", err);
    bson_destroy(b);
    free(bytes);
}
END_TEST

/* ---- version 2, columns the server wrote ---- */

/* The lines of tests/vectors/bsoncolumn/server_columns.jsonl. */
static size_t load_jsonl(const char *path, bson_t ***out)
{
    FILE *fp = fopen(path, "r");
    ck_assert_msg(fp != NULL, "cannot open %s", path);
    size_t n = 0, cap = 0;
    bson_t **v = NULL;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, fp)) > 0) {
        if (len <= 1)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            v = realloc(v, cap * sizeof *v);
        }
        v[n++] = J(line);
    }
    free(line);
    fclose(fp);
    *out = v;
    return n;
}

static void free_lines(bson_t **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        bson_destroy(v[i]);
    free(v);
}

/* Appends line's "column" (or, with diff, its {o, d}) to doc as name. */
static void put_field(bson_t *doc, const char *name, const bson_t *line, const char *field)
{
    bson_iter_t it;
    ck_assert_msg(bson_iter_init_find(&it, line, field), "vector line has no %s", field);
    ck_assert(bson_append_iter(doc, name, -1, &it));
}

/* The 2-measurement version 2 bucket of timeseries_insert_decompression_failure.js, from its three columns. */
START_TEST(server_written_bucket)
{
    bson_t **lines;
    size_t n = load_jsonl("tests/vectors/bsoncolumn/server_columns.jsonl", &lines);
    ck_assert_uint_ge(n, 7);
    char *src = bson_as_canonical_extended_json(lines[4], NULL);
    ck_assert(strstr(src, "decompression_failure") != NULL);
    bson_free(src);
    bson_t *b = bson_new(), c, d;
    BSON_APPEND_DOCUMENT_BEGIN(b, "control", &c);
    BSON_APPEND_INT32(&c, "version", 2);
    BSON_APPEND_INT32(&c, "count", 2);
    bson_append_document_end(b, &c);
    BSON_APPEND_DOCUMENT_BEGIN(b, "data", &d);
    put_field(&d, "t", lines[4], "column");
    put_field(&d, "_id", lines[5], "column");
    put_field(&d, "a", lines[6], "column");
    bson_append_document_end(b, &d);
    char err[256];
    bucket_rows r;
    bucket_spec spec = {"t", NULL, false};
    ck_assert_msg(bucket_unpack(bson_get_data(b), b->len, &spec, &r, err, sizeof err), "%s", err);
    ck_assert_uint_eq(r.n, 2);
    /* values as the vector file lists them (read from the upstream test, not from a decoder) */
    expect_row(&r, 0,
               "{\"t\": {\"$date\": \"2024-01-16T20:48:39.448Z\"}, \"_id\": {\"$oid\": \"65a6eba7e6d2e848e08c3750\"}, "
               "\"a\": {\"$numberDouble\": \"0.0\"}}");
    expect_row(&r, 1,
               "{\"t\": {\"$date\": \"2024-01-16T20:48:39.448Z\"}, \"_id\": {\"$oid\": \"65a6eba7e6d2e848e08c3751\"}, "
               "\"a\": {\"$numberDouble\": \"1.0\"}}");
    bucket_rows_clear(&r);
    bson_destroy(b);
    free_lines(lines, n);
}
END_TEST

/* An 8.0 append to a compressed bucket, as timeseries.js logs it: the binary diffs {o: 10, d} of data.ts and
 * data._id, applied with bucket_apply_diff, then unpacked: the second measurement appears. */
START_TEST(server_binary_diff_append)
{
    bson_t **lines;
    size_t n = load_jsonl("tests/vectors/bsoncolumn/server_columns.jsonl", &lines);
    ck_assert_uint_ge(n, 4);
    bson_t *b = bson_new(), c, d;
    bson_oid_t bid;
    bson_oid_init_from_string(&bid, "000000010102030405060708");
    BSON_APPEND_OID(b, "_id", &bid);
    BSON_APPEND_DOCUMENT_BEGIN(b, "control", &c);
    BSON_APPEND_INT32(&c, "version", 2);
    BSON_APPEND_INT32(&c, "count", 1);
    bson_append_document_end(b, &c);
    BSON_APPEND_DOCUMENT_BEGIN(b, "data", &d);
    put_field(&d, "ts", lines[0], "column");
    put_field(&d, "_id", lines[1], "column");
    bson_append_document_end(b, &d);

    /* {scontrol: {u: {count: 2}}, sdata: {b: {ts: {o, d}, _id: {o, d}}}} */
    bson_t *diff = bson_new(), sc, u, sd, bb, e;
    BSON_APPEND_DOCUMENT_BEGIN(diff, "scontrol", &sc);
    BSON_APPEND_DOCUMENT_BEGIN(&sc, "u", &u);
    BSON_APPEND_INT32(&u, "count", 2);
    bson_append_document_end(&sc, &u);
    bson_append_document_end(diff, &sc);
    BSON_APPEND_DOCUMENT_BEGIN(diff, "sdata", &sd);
    BSON_APPEND_DOCUMENT_BEGIN(&sd, "b", &bb);
    for (int k = 2; k <= 3; k++) {
        BSON_APPEND_DOCUMENT_BEGIN(&bb, k == 2 ? "ts" : "_id", &e);
        put_field(&e, "o", lines[k], "o");
        put_field(&e, "d", lines[k], "d");
        bson_append_document_end(&bb, &e);
    }
    bson_append_document_end(&sd, &bb);
    bson_append_document_end(diff, &sd);

    bson_t out;
    char err[256];
    ck_assert_msg(bucket_apply_diff(bson_get_data(b), b->len, bson_get_data(diff), diff->len, &out, err, sizeof err),
                  "%s", err);
    /* the column keeps subtype 7 though d is subtype 0 */
    bson_iter_t it;
    bson_subtype_t st;
    uint32_t blen;
    const uint8_t *bytes;
    ck_assert(bson_iter_init_find(&it, &out, "data") && bson_iter_recurse(&it, &it) && bson_iter_find(&it, "ts"));
    bson_iter_binary(&it, &st, &blen, &bytes);
    ck_assert_int_eq(st, BSON_SUBTYPE_COLUMN);
    bucket_rows r;
    bucket_spec spec = {"ts", NULL, false};
    ck_assert_msg(bucket_unpack(bson_get_data(&out), out.len, &spec, &r, err, sizeof err), "%s", err);
    ck_assert_uint_eq(r.n, 2);
    expect_row(&r, 0, "{\"ts\": " D(1000) ", \"_id\": {\"$numberDouble\": \"1.0\"}}");
    expect_row(&r, 1, "{\"ts\": " D(1000) ", \"_id\": {\"$numberDouble\": \"1.0\"}}");
    bucket_rows_clear(&r);
    bson_destroy(&out);
    bson_destroy(diff);
    bson_destroy(b);
    free_lines(lines, n);
}
END_TEST

/* A compressed bucket grown one measurement at a time by 8.0-style appends, in the shape the server's
 * makeTimeseriesCompressedDiffEntry (src/mongo/db/timeseries/write_ops/timeseries_write_ops_utils.cpp) logs:
 * {scontrol: {u: {count[, version: 3]}}, sdata: {i: {<new column>: BinData 7}, b: {<column>: {o, d}}}}, each
 * column's {o, d} from the encoder's intermediate(). A field that first appears at measurement 30 arrives as a new
 * column (skips for the earlier positions) in the `i` section; at measurement 40 a time goes back and the bucket
 * becomes version 3. After every append, unpacking must give every measurement so far. */
START_TEST(encoder_append_diffs)
{
    enum { N = 60, NEWCOL = 30, UNSORTED = 40 };
    static const char *const names[] = {"t", "v", "o", "n"};
    bcenc_t *enc[4] = {bcenc_new(), bcenc_new(), bcenc_new(), NULL};
    bson_t *want[N];
    bson_t *bucket = NULL;
    char err[256];
    for (int i = 0; i < N; i++) {
        bson_t m = BSON_INITIALIZER, o;
        BSON_APPEND_DATE_TIME(&m, "t", INT64_C(1714521600000) + i * 250 - (i >= UNSORTED ? 20000 : 0));
        if (i % 4 != 1)
            BSON_APPEND_INT64(&m, "v", (int64_t)i * i);
        BSON_APPEND_DOCUMENT_BEGIN(&m, "o", &o);
        BSON_APPEND_INT32(&o, "k", i % 3);
        bson_append_document_end(&m, &o);
        if (i >= NEWCOL && i % 2 == 0)
            BSON_APPEND_UTF8(&m, "n", "new");
        bool newcol = i == NEWCOL;
        if (newcol) { /* the server's builder for a new field starts with a skip per earlier measurement */
            enc[3] = bcenc_new();
            for (int k = 0; k < i; k++)
                bcenc_skip(enc[3]);
        }
        int ncols = i >= NEWCOL ? 4 : 3;
        for (int k = 0; k < ncols; k++) {
            bson_iter_t it;
            if (bson_iter_init_find(&it, &m, names[k]))
                bcenc_append_iter(enc[k], &it);
            else
                bcenc_skip(enc[k]);
        }
        want[i] = bson_copy(&m);
        bson_destroy(&m);

        size_t off[4], dl[4];
        uint8_t *dbytes[4];
        for (int k = 0; k < ncols; k++)
            dbytes[k] = bcenc_intermediate(enc[k], &off[k], &dl[k]);
        if (i == 0) { /* the first measurement inserts the bucket */
            bson_t c, d;
            bucket = bson_new();
            BSON_APPEND_DOCUMENT_BEGIN(bucket, "control", &c);
            BSON_APPEND_INT32(&c, "version", 2);
            BSON_APPEND_INT32(&c, "count", 1);
            bson_append_document_end(bucket, &c);
            BSON_APPEND_DOCUMENT_BEGIN(bucket, "data", &d);
            for (int k = 0; k < ncols; k++) {
                ck_assert_uint_eq(off[k], 0);
                bson_append_binary(&d, names[k], -1, BSON_SUBTYPE_COLUMN, dbytes[k], (uint32_t)dl[k]);
            }
            bson_append_document_end(bucket, &d);
        } else {
            bson_t *diff = bson_new(), sc, u, sd, sec, e;
            BSON_APPEND_DOCUMENT_BEGIN(diff, "scontrol", &sc);
            BSON_APPEND_DOCUMENT_BEGIN(&sc, "u", &u);
            BSON_APPEND_INT32(&u, "count", i + 1);
            if (i == UNSORTED)
                BSON_APPEND_INT32(&u, "version", 3);
            bson_append_document_end(&sc, &u);
            bson_append_document_end(diff, &sc);
            BSON_APPEND_DOCUMENT_BEGIN(diff, "sdata", &sd);
            if (newcol) {
                ck_assert_uint_eq(off[3], 0);
                BSON_APPEND_DOCUMENT_BEGIN(&sd, "i", &sec);
                bson_append_binary(&sec, names[3], -1, BSON_SUBTYPE_COLUMN, dbytes[3], (uint32_t)dl[3]);
                bson_append_document_end(&sd, &sec);
            }
            BSON_APPEND_DOCUMENT_BEGIN(&sd, "b", &sec);
            for (int k = 0; k < (newcol ? 3 : ncols); k++) {
                BSON_APPEND_DOCUMENT_BEGIN(&sec, names[k], &e);
                BSON_APPEND_INT32(&e, "o", (int32_t)off[k]);
                bson_append_binary(&e, "d", 1, BSON_SUBTYPE_BINARY, dbytes[k], (uint32_t)dl[k]);
                bson_append_document_end(&sec, &e);
            }
            bson_append_document_end(&sd, &sec);
            bson_append_document_end(diff, &sd);
            bson_t out;
            ck_assert_msg(bucket_apply_diff(bson_get_data(bucket), bucket->len, bson_get_data(diff), diff->len, &out,
                                            err, sizeof err),
                          "append %d: %s", i, err);
            bson_destroy(bucket);
            bucket = bson_copy(&out);
            bson_destroy(&out);
            bson_destroy(diff);
        }
        for (int k = 0; k < ncols; k++)
            free(dbytes[k]);

        bucket_rows r;
        bucket_spec spec = {"t", NULL, false};
        ck_assert_msg(bucket_unpack(bson_get_data(bucket), bucket->len, &spec, &r, err, sizeof err), "append %d: %s", i,
                      err);
        expect_rows_equal(&r, want, (size_t)i + 1);
        bucket_rows_clear(&r);
    }
    /* the bucket ends as version 3 with control.count N and the new column last in data */
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, bucket, "control") && bson_iter_recurse(&it, &it) &&
              bson_iter_find(&it, "version") && bson_iter_int32(&it) == 3);
    ck_assert(bson_iter_init_find(&it, bucket, "data") && bson_iter_recurse(&it, &it));
    const char *last = NULL;
    while (bson_iter_next(&it))
        last = bson_iter_key(&it);
    ck_assert_str_eq(last, "n");
    for (int i = 0; i < N; i++)
        bson_destroy(want[i]);
    for (int k = 0; k < 4; k++)
        bcenc_free(enc[k]);
    bson_destroy(bucket);
}
END_TEST

/* ---- $v:2 diffs ---- */

static void diff_ok_mode(bucket_diff_mode mode, const char *pre, const char *diff, const char *post)
{
    bson_t *p = J(pre), *d = J(diff), *w = J(post), out;
    char err[256] = "";
    ck_assert_msg(bucket_apply_diff_ex(bson_get_data(p), p->len, bson_get_data(d), d->len, mode, &out, err, sizeof err),
                  "%s on %s: %s", diff, pre, err);
    if (out.len != w->len || memcmp(bson_get_data(&out), bson_get_data(w), w->len) != 0) {
        char *g = bson_as_canonical_extended_json(&out, NULL);
        ck_abort_msg("%s on %s: got %s, want %s", diff, pre, g, post);
    }
    bson_destroy(&out);
    bson_destroy(p);
    bson_destroy(d);
    bson_destroy(w);
}

static void diff_ok(const char *pre, const char *diff, const char *post)
{
    diff_ok_mode(BUCKET_DIFF_STRICT, pre, diff, post);
    diff_ok_mode(BUCKET_DIFF_IDEMPOTENT, pre, diff, post);
    /* the same when the caller vouches for the document */
    diff_ok_mode((bucket_diff_mode)(BUCKET_DIFF_STRICT | BUCKET_DIFF_DOC_VALID), pre, diff, post);
    diff_ok_mode((bucket_diff_mode)(BUCKET_DIFF_IDEMPOTENT | BUCKET_DIFF_DOC_VALID), pre, diff, post);
}

static void diff_fails(const char *pre, const char *diff, const char *want)
{
    bson_t *p = J(pre), *d = J(diff), out;
    char err[256] = "";
    ck_assert_msg(!bucket_apply_diff(bson_get_data(p), p->len, bson_get_data(d), d->len, &out, err, sizeof err),
                  "%s on %s applied, want '%s'", diff, pre, want);
    ck_assert_msg(strstr(err, want) != NULL, "error '%s' does not say '%s'", err, want);
    ck_assert(bson_empty(&out)); /* initialized and empty: safe to destroy */
    bson_destroy(&out);
    bson_destroy(p);
    bson_destroy(d);
}

START_TEST(diff_object_level)
{
    /* d: deleted; u: in place; u of a field the document lacks: appended */
    diff_ok("{\"a\": 1, \"b\": 2, \"c\": 3}", "{\"d\": {\"b\": false}, \"u\": {\"a\": \"x\", \"z\": 9}}",
            "{\"a\": \"x\", \"c\": 3, \"z\": 9}");
    /* i: appended in the diff's order, after the appended u fields, whatever the sections' order */
    diff_ok("{\"a\": 1}", "{\"u\": {\"n\": 1}, \"i\": {\"q\": 2, \"p\": 3}}",
            "{\"a\": 1, \"n\": 1, \"q\": 2, \"p\": 3}");
    diff_ok("{\"a\": 1}", "{\"i\": {\"q\": 2, \"p\": 3}, \"u\": {\"n\": 1}}",
            "{\"a\": 1, \"n\": 1, \"q\": 2, \"p\": 3}");
    /* i of a field that exists: the old one goes, the new one is appended (re-applying an insert is harmless) */
    diff_ok("{\"0\": 1, \"1\": 2, \"2\": 3}", "{\"i\": {\"1\": 20}}", "{\"0\": 1, \"2\": 3, \"1\": 20}");
    diff_ok("{\"0\": 1, \"1\": 2}", "{\"i\": {\"1\": 2}}", "{\"0\": 1, \"1\": 2}");
    /* s<field>: object sub-diffs, nested, in place */
    diff_ok("{\"x\": 0, \"o\": {\"p\": {\"q\": 1, \"r\": 2}, \"s\": 3}, \"y\": 1}",
            "{\"so\": {\"u\": {\"s\": 4}, \"sp\": {\"d\": {\"q\": false}, \"i\": {\"t\": 5}}}}",
            "{\"x\": 0, \"o\": {\"p\": {\"r\": 2, \"t\": 5}, \"s\": 4}, \"y\": 1}");
    /* a field whose name starts with s, and a sub-diff name that is only "s" + empty would be a section */
    diff_ok("{\"ss\": {\"a\": 1}}", "{\"sss\": {\"u\": {\"a\": 2}}}", "{\"ss\": {\"a\": 2}}");
    /* empty pre-image */
    diff_ok("{}", "{\"i\": {\"a\": {\"b\": [1]}}}", "{\"a\": {\"b\": [1]}}");
}
END_TEST

START_TEST(diff_arrays)
{
    /* u<idx> in place */
    diff_ok("{\"a\": [1, 2, 3]}", "{\"sa\": {\"a\": true, \"u1\": 20}}", "{\"a\": [1, 20, 3]}");
    /* l shrinks */
    diff_ok("{\"a\": [1, 2, 3]}", "{\"sa\": {\"a\": true, \"l\": 1}}", "{\"a\": [1]}");
    /* l grows: padded with null, u past the end written */
    diff_ok("{\"a\": [1]}", "{\"sa\": {\"a\": true, \"l\": 4, \"u2\": 7}}", "{\"a\": [1, null, 7, null]}");
    /* u past the end without l: nulls up to it */
    diff_ok("{\"a\": []}", "{\"sa\": {\"a\": true, \"u2\": 7}}", "{\"a\": [null, null, 7]}");
    /* s<idx>: object and array sub-diffs of elements */
    diff_ok("{\"a\": [{\"x\": 1}, [5, 6]]}",
            "{\"sa\": {\"a\": true, \"s0\": {\"u\": {\"x\": 2}}, \"s1\": {\"a\": true, \"l\": 1}}}",
            "{\"a\": [{\"x\": 2}, [5]]}");
    /* shrink and change together; an array inside an object inside an array */
    diff_ok("{\"a\": [0, {\"b\": [1, 2]}, 9, 9]}",
            "{\"sa\": {\"a\": true, \"l\": 2, \"u0\": \"z\", \"s1\": {\"sb\": {\"a\": true, \"u1\": 3}}}}",
            "{\"a\": [\"z\", {\"b\": [1, 3]}]}");
}
END_TEST

START_TEST(diff_binary)
{
    /* keep [0, o) and append d; the old subtype stays */
    diff_ok("{\"c\": {\"$binary\": {\"base64\": \"AQIDBA==\", \"subType\": \"07\"}}, \"z\": 1}",
            "{\"b\": {\"c\": {\"o\": 2, \"d\": {\"$binary\": {\"base64\": \"CQo=\", \"subType\": \"00\"}}}}}",
            "{\"c\": {\"$binary\": {\"base64\": \"AQIJCg==\", \"subType\": \"07\"}}, \"z\": 1}");
    /* o may be an int64, equal to the old length (a pure append) */
    diff_ok("{\"c\": {\"$binary\": {\"base64\": \"AQI=\", \"subType\": \"00\"}}}",
            "{\"b\": {\"c\": {\"o\": {\"$numberLong\": \"2\"}, \"d\": {\"$binary\": {\"base64\": \"Aw==\", "
            "\"subType\": \"00\"}}}}}",
            "{\"c\": {\"$binary\": {\"base64\": \"AQID\", \"subType\": \"00\"}}}");
    diff_fails("{\"c\": {\"$binary\": {\"base64\": \"AQI=\", \"subType\": \"07\"}}}",
               "{\"b\": {\"c\": {\"o\": 3, \"d\": {\"$binary\": {\"base64\": \"Aw==\", \"subType\": \"00\"}}}}}",
               "binary diff of c");
    diff_fails("{\"c\": {\"$binary\": {\"base64\": \"AQI=\", \"subType\": \"07\"}}}",
               "{\"b\": {\"c\": {\"o\": -1, \"d\": {\"$binary\": {\"base64\": \"Aw==\", \"subType\": \"00\"}}}}}",
               "not {o: offset >= 0, d: BinData}");
    diff_fails("{\"c\": {\"$binary\": {\"base64\": \"AQI=\", \"subType\": \"07\"}}}", "{\"b\": {\"c\": {\"o\": 1}}}",
               "not {o: offset >= 0, d: BinData}");
    diff_fails("{\"c\": {\"$binary\": {\"base64\": \"AQI=\", \"subType\": \"07\"}}}",
               "{\"b\": {\"c\": {\"o\": 1, \"d\": {\"$binary\": {\"base64\": \"Aw==\", \"subType\": \"00\"}}, \"x\": "
               "1}}}",
               "unexpected field 'x'");
    diff_fails("{\"c\": 5}",
               "{\"b\": {\"c\": {\"o\": 0, \"d\": {\"$binary\": {\"base64\": \"Aw==\", \"subType\": \"00\"}}}}}",
               "binary diff of c, which is not BinData");
    diff_fails("{}", "{\"b\": {\"c\": {\"o\": 0, \"d\": {\"$binary\": {\"base64\": \"Aw==\", \"subType\": \"00\"}}}}}",
               "binary diff of c, which the document lacks");
}
END_TEST

START_TEST(diff_not_fitting)
{
    /* strict: errors naming the path */
    diff_fails("{\"a\": 1}", "{\"sb\": {\"u\": {\"x\": 1}}}", "sub-diff of b, which the document lacks");
    diff_fails("{\"a\": 1}", "{\"sa\": {\"u\": {\"x\": 1}}}", "object sub-diff of a, which is a scalar");
    diff_fails("{\"a\": {\"b\": [1]}}", "{\"sa\": {\"sb\": {\"u\": {\"x\": 1}}}}",
               "object sub-diff of a.b, which is an array");
    diff_fails("{\"a\": {}}", "{\"sa\": {\"a\": true, \"u0\": 1}}", "array sub-diff of a, which is a document");
    diff_fails("{\"a\": 1}", "{\"d\": {\"b\": false}}", "delete of b, which the document lacks");
    diff_fails("{\"a\": [1]}", "{\"sa\": {\"a\": true, \"s3\": {\"u\": {\"x\": 1}}}}", "is past the array's end");
    diff_fails("{\"a\": [1]}", "{\"sa\": {\"a\": true, \"s0\": {\"u\": {\"x\": 1}}}}", "is of another type");
    /* idempotent: the server's answers */
    diff_ok_mode(BUCKET_DIFF_IDEMPOTENT, "{\"a\": 1}", "{\"sb\": {\"u\": {\"x\": 1}}, \"d\": {\"c\": false}}",
                 "{\"a\": 1}");
    diff_ok_mode(BUCKET_DIFF_IDEMPOTENT, "{\"a\": 1, \"z\": 2}", "{\"sa\": {\"u\": {\"x\": 1}}}",
                 "{\"a\": null, \"z\": 2}");
    diff_ok_mode(BUCKET_DIFF_IDEMPOTENT, "{\"a\": [1]}",
                 "{\"sa\": {\"a\": true, \"s0\": {\"u\": {\"x\": 1}}, \"s2\": "
                 "{\"u\": {\"x\": 1}}}}",
                 "{\"a\": [null, null, null]}");
    diff_ok_mode(
        BUCKET_DIFF_IDEMPOTENT, "{\"c\": 5}",
        "{\"b\": {\"c\": {\"o\": 0, \"d\": {\"$binary\": {\"base64\": \"Aw==\", \"subType\": \"00\"}}}, \"e\": "
        "{\"o\": 0, \"d\": {\"$binary\": {\"base64\": \"Aw==\", \"subType\": \"00\"}}}}}",
        "{\"c\": null}");
}
END_TEST

START_TEST(diff_malformed)
{
    diff_fails("{\"a\": 1}", "{\"x\": {}}", "unknown section 'x'");
    diff_fails("{\"a\": 1}", "{\"s\": {}}", "unknown section 's'");
    diff_fails("{\"a\": 1}", "{\"u\": 5}", "section 'u' is not a document");
    diff_fails("{\"a\": 1}", "{\"u\": {\"a\": 1}, \"i\": {\"a\": 2}}", "duplicate field name in diff: a");
    diff_fails("{\"a\": {}}", "{\"sa\": {\"u\": {\"b\": 1}}, \"d\": {\"a\": false}}",
               "duplicate field name in diff: a");
    /* a level of more modifications than are searched in order (sorted then) */
    diff_fails("{\"a\": 1}",
               "{\"u\": {\"b\": 1, \"c\": 1, \"d\": 1, \"e\": 1, \"f\": 1}, \"i\": {\"g\": 1, \"h\": 1, \"j\": 1, "
               "\"k\": 1, \"c\": 2}}",
               "duplicate field name in diff: c");
    diff_ok(
        "{\"a\": 1, \"c\": 0, \"k\": 0}",
        "{\"u\": {\"b\": 1, \"c\": 1, \"d\": 1, \"e\": 1, \"f\": 1}, \"i\": {\"g\": 1, \"h\": 1, \"j\": 1, \"k\": 2}}",
        "{\"a\": 1, \"c\": 1, \"b\": 1, \"d\": 1, \"e\": 1, \"f\": 1, \"g\": 1, \"h\": 1, \"j\": 1, \"k\": 2}");
    diff_fails("{\"a\": [1]}", "{\"sa\": {\"a\": true, \"x0\": 1}}", "unexpected field 'x0'");
    diff_fails("{\"a\": [1]}", "{\"sa\": {\"a\": true, \"u\": 1}}", "unexpected field 'u'");
    diff_fails("{\"a\": [1]}", "{\"sa\": {\"a\": true, \"u-1\": 1}}", "unexpected field 'u-1'");
    diff_fails("{\"a\": [1]}", "{\"sa\": {\"a\": true, \"u99999999999\": 1}}", "unexpected field");
    diff_fails("{\"a\": [1, 2]}", "{\"sa\": {\"a\": true, \"u1\": 1, \"u0\": 2}}", "not ascending");
    diff_fails("{\"a\": [1, 2]}", "{\"sa\": {\"a\": true, \"l\": 1, \"u1\": 2}}", "past the new length 1");
    diff_fails("{\"a\": [1, 2]}", "{\"sa\": {\"a\": true, \"l\": \"1\"}}", "l is not a non-negative int32");
    diff_fails("{\"a\": [1, 2]}", "{\"sa\": {\"a\": true, \"s0\": 1}}", "'s0' is not a document");
    diff_fails("{\"a\": [1, 2]}", "{\"sa\": {\"a\": false}}", "must start with a: true");
    /* not BSON */
    bson_t out;
    char err[256];
    uint8_t junk[5] = {9, 0, 0, 0, 0};
    bson_t *ok = J("{}");
    ck_assert(!bucket_apply_diff(junk, 5, bson_get_data(ok), ok->len, &out, err, sizeof err));
    ck_assert(strstr(err, "document is not valid BSON") != NULL);
    bson_destroy(&out);
    ck_assert(!bucket_apply_diff(bson_get_data(ok), ok->len, junk, 5, &out, err, sizeof err));
    ck_assert(strstr(err, "diff is not valid BSON") != NULL);
    bson_destroy(&out);
    bson_destroy(ok);
    /* nesting past the bound is refused, not a stack overflow */
    bson_t *deep_pre = bson_new(), *deep_diff = bson_new();
    {
        enum { DEPTH = 300 };
        static bson_t pre_lv[DEPTH + 1], diff_lv[DEPTH + 1]; /* children live inside their parents */
        bson_t *pp = deep_pre, *dp = deep_diff;
        for (int i = 1; i <= DEPTH; i++) {
            ck_assert(bson_append_document_begin(pp, "a", 1, &pre_lv[i]));
            ck_assert(bson_append_document_begin(dp, "sa", 2, &diff_lv[i]));
            pp = &pre_lv[i], dp = &diff_lv[i];
        }
        BSON_APPEND_INT32(pp, "x", 1);
        bson_t u;
        BSON_APPEND_DOCUMENT_BEGIN(dp, "u", &u);
        BSON_APPEND_INT32(&u, "x", 2);
        bson_append_document_end(dp, &u);
        for (int i = DEPTH; i >= 1; i--) {
            ck_assert(bson_append_document_end(i > 1 ? &pre_lv[i - 1] : deep_pre, &pre_lv[i]));
            ck_assert(bson_append_document_end(i > 1 ? &diff_lv[i - 1] : deep_diff, &diff_lv[i]));
        }
    }
    ck_assert(!bucket_apply_diff(bson_get_data(deep_pre), deep_pre->len, bson_get_data(deep_diff), deep_diff->len, &out,
                                 err, sizeof err));
    ck_assert_msg(strstr(err, "deeper than") != NULL, "%s", err);
    bson_destroy(&out);
    bson_destroy(deep_pre);
    bson_destroy(deep_diff);
}
END_TEST

static bson_t *from_hex(const char *hex)
{
    size_t n = strlen(hex) / 2;
    uint8_t *b = malloc(n);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        ck_assert(sscanf(hex + 2 * i, "%2x", &v) == 1);
        b[i] = (uint8_t)v;
    }
    bson_t *d = bson_new_from_data(b, n);
    ck_assert(d != NULL);
    free(b);
    return d;
}

/* The server's own pre/diff/post triples: each diff applied to pre must give post, byte for byte, in the
 * server's own (idempotent) mode. Strict mode gives the same post, or refuses the few vectors that apply a diff to
 * a document it does not fit (the server's re-application cases: a sub-diff of an absent or retyped field). */
START_TEST(diff_server_vectors)
{
    bson_t **lines;
    size_t n = load_jsonl("tests/vectors/diff_v2_pre_post.jsonl", &lines);
    size_t checked = 0, strict_same = 0, strict_refused = 0;
    for (size_t i = 0; i < n; i++) {
        bson_iter_t it, id;
        if (!bson_iter_init_find(&it, lines[i], "o_bson_hex"))
            continue; /* the comment line */
        ck_assert(bson_iter_init_find(&id, lines[i], "id"));
        const char *name = bson_iter_utf8(&id, NULL);
        bson_t *o = from_hex(bson_iter_utf8(&it, NULL));
        ck_assert(bson_iter_init_find(&it, lines[i], "pre_bson_hex"));
        bson_t *pre = from_hex(bson_iter_utf8(&it, NULL));
        ck_assert(bson_iter_init_find(&it, lines[i], "post_bson_hex"));
        bson_t *post = from_hex(bson_iter_utf8(&it, NULL));
        bson_iter_t di;
        ck_assert(bson_iter_init_find(&di, o, "diff") && BSON_ITER_HOLDS_DOCUMENT(&di));
        uint32_t dl;
        const uint8_t *dd;
        bson_iter_document(&di, &dl, &dd);
        bson_t out;
        char err[256];
        ck_assert_msg(
            bucket_apply_diff_ex(bson_get_data(pre), pre->len, dd, dl, BUCKET_DIFF_IDEMPOTENT, &out, err, sizeof err),
            "%s: %s", name, err);
        if (out.len != post->len || memcmp(bson_get_data(&out), bson_get_data(post), post->len) != 0)
            ck_abort_msg("%s: got %s, want %s", name, bson_as_canonical_extended_json(&out, NULL),
                         bson_as_canonical_extended_json(post, NULL));
        bson_destroy(&out);
        if (bucket_apply_diff(bson_get_data(pre), pre->len, dd, dl, &out, err, sizeof err)) {
            ck_assert_msg(out.len == post->len && memcmp(bson_get_data(&out), bson_get_data(post), post->len) == 0,
                          "%s: strict gives another document", name);
            strict_same++;
        } else {
            ck_assert_msg(strstr(err, "which the document lacks") || strstr(err, ", which is ") ||
                              strstr(err, "past the array's end") || strstr(err, "of another type"),
                          "%s: strict refused for another reason: %s", name, err);
            strict_refused++;
        }
        bson_destroy(&out);
        bson_destroy(o);
        bson_destroy(pre);
        bson_destroy(post);
        checked++;
    }
    ck_assert_uint_ge(checked, 30);
    ck_assert_uint_ge(strict_same, 25);
    ck_assert_uint_le(strict_refused, 8);
    free_lines(lines, n);
}
END_TEST

/* ---- real data: mongo-tools' 5.0 time-series dump with its oplog ---- */

static uint8_t *read_file(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    ck_assert_msg(fp != NULL, "cannot open %s", path);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    ck_assert(fread(b, 1, (size_t)n, fp) == (size_t)n);
    fclose(fp);
    *len = (size_t)n;
    return b;
}

static uint64_t fnv1a64(const uint8_t *d, size_t n)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < n; i++) {
        h ^= d[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

typedef struct {
    bson_oid_t id;
    bson_t *doc;
} tsbucket;

START_TEST(real_mongo_tools_dump_and_oplog)
{
    size_t blen, olen;
    uint8_t *bbytes = read_file(TSDIR "mongo-tools_ts_dump_with_oplog.buckets.bson", &blen);
    uint8_t *obytes = read_file(TSDIR "mongo-tools_ts_dump_with_oplog.oplog.bson", &olen);
    tsbucket buckets[16];
    size_t nb = 0;
    bson_reader_t *rd = bson_reader_new_from_data(bbytes, blen);
    const bson_t *doc;
    bool eof = false;
    while ((doc = bson_reader_read(rd, &eof)) != NULL) {
        ck_assert_uint_lt(nb, 16);
        bson_iter_t it;
        ck_assert(bson_iter_init_find(&it, doc, "_id") && BSON_ITER_HOLDS_OID(&it));
        bson_oid_copy(bson_iter_oid(&it), &buckets[nb].id);
        buckets[nb++].doc = bson_copy(doc);
    }
    ck_assert(eof);
    bson_reader_destroy(rd);
    ck_assert_uint_eq(nb, 10);

    /* replay: every entry a $v:2 update of one bucket, strict (the dump holds the state they were made from, or a
     * later one only where an entry is an insert of a field already there, which the applier allows) */
    size_t nops = 0;
    char err[256];
    rd = bson_reader_new_from_data(obytes, olen);
    while ((doc = bson_reader_read(rd, &eof)) != NULL) {
        bson_iter_t it, o2, v, df;
        ck_assert(bson_iter_init_find(&it, doc, "op") && strcmp(bson_iter_utf8(&it, NULL), "u") == 0);
        ck_assert(bson_iter_init_find(&it, doc, "ns") &&
                  strcmp(bson_iter_utf8(&it, NULL), "timeseries_test.system.buckets.foo_ts") == 0);
        ck_assert(bson_iter_init_find(&o2, doc, "o2") && bson_iter_recurse(&o2, &o2) && bson_iter_find(&o2, "_id"));
        ck_assert(bson_iter_init_find(&v, doc, "o") && bson_iter_recurse(&v, &v) && bson_iter_find(&v, "$v") &&
                  bson_iter_as_int64(&v) == 2);
        ck_assert(bson_iter_init_find(&df, doc, "o") && bson_iter_recurse(&df, &df) && bson_iter_find(&df, "diff"));
        size_t k;
        for (k = 0; k < nb && !bson_oid_equal(&buckets[k].id, bson_iter_oid(&o2)); k++)
            ;
        ck_assert_msg(k < nb, "update %zu of a bucket not in the dump", nops);
        uint32_t dl;
        const uint8_t *dd;
        bson_iter_document(&df, &dl, &dd);
        bson_t out;
        ck_assert_msg(
            bucket_apply_diff(bson_get_data(buckets[k].doc), buckets[k].doc->len, dd, dl, &out, err, sizeof err),
            "update %zu: %s", nops, err);
        bson_destroy(buckets[k].doc);
        buckets[k].doc = bson_copy(&out);
        bson_destroy(&out);
        nops++;
    }
    bson_reader_destroy(rd);
    ck_assert_uint_eq(nops, 872);

    /* unpack and compare with what expected.py computed */
    size_t elen;
    char *exp = (char *)read_file(TSDIR "mongo-tools_ts_dump_with_oplog.expected.txt", &elen);
    exp[elen] = '\0';
    char *line = exp, *save = NULL;
    size_t total = 0;
    bucket_spec spec = {"ts", "meta", false}; /* foo_ts.metadata.json */
    for (size_t k = 0; k < nb; k++) {
        bucket_rows r;
        ck_assert_msg(bucket_unpack(bson_get_data(buckets[k].doc), buckets[k].doc->len, &spec, &r, err, sizeof err),
                      "bucket %zu: %s", k, err);
        char idhex[25];
        bson_oid_to_string(&buckets[k].id, idhex);
        for (size_t i = 0; i < r.n; i++, total++) {
            line = strtok_r(total == 0 ? exp : NULL, "\n", &save);
            ck_assert_msg(line != NULL, "more measurements than expected.txt lists (%zu)", total);
            char want_id[32], want_hash[32];
            size_t want_pos;
            long long want_time;
            ck_assert(sscanf(line, "%31s %zu %lld %31s", want_id, &want_pos, &want_time, want_hash) == 4);
            char got_hash[32];
            snprintf(got_hash, sizeof got_hash, "%016" PRIx64, fnv1a64(r.docs[i], r.lens[i]));
            ck_assert_msg(strcmp(want_id, idhex) == 0 && want_pos == i && want_time == r.times[i] &&
                              strcmp(want_hash, got_hash) == 0,
                          "measurement %zu: got %s %zu %" PRId64 " %s (%s), want %s", total, idhex, i, r.times[i],
                          got_hash, as_json(r.docs[i], r.lens[i]), line);
        }
        bucket_rows_clear(&r);
    }
    ck_assert_ptr_null(strtok_r(NULL, "\n", &save));
    ck_assert_uint_eq(total, 2164);
    free(exp);

    /* the same buckets, replayed leniently, give the same measurements (nothing in this oplog needs leniency) */
    for (size_t k = 0; k < nb; k++)
        bson_destroy(buckets[k].doc);
    free(bbytes);
    free(obytes);
}
END_TEST

/* The oplog file committed here is trimmed to the fields the replay needs: the sample of real entries kept in
 * tests/vectors/ (taken from the same upstream file, untrimmed) must be found in it with the same o, o2 and ts. */
START_TEST(real_oplog_trim_matches_sample)
{
    bson_t **sample;
    size_t ns = load_jsonl("tests/vectors/real_v5.0_2021_timeseries_v2_diff_updates_sample.jsonl", &sample);
    ck_assert_uint_eq(ns, 16);
    size_t olen;
    uint8_t *obytes = read_file(TSDIR "mongo-tools_ts_dump_with_oplog.oplog.bson", &olen);
    size_t found = 0;
    for (size_t s = 0; s < ns; s++) {
        bson_iter_t sts, so, so2;
        ck_assert(bson_iter_init_find(&sts, sample[s], "ts") && bson_iter_init_find(&so, sample[s], "o") &&
                  bson_iter_init_find(&so2, sample[s], "o2"));
        uint32_t t, inc;
        bson_iter_timestamp(&sts, &t, &inc);
        bson_reader_t *rd = bson_reader_new_from_data(obytes, olen);
        const bson_t *doc;
        bool eof;
        while ((doc = bson_reader_read(rd, &eof)) != NULL) {
            bson_iter_t ts, o, o2;
            uint32_t t2, i2;
            ck_assert(bson_iter_init_find(&ts, doc, "ts"));
            bson_iter_timestamp(&ts, &t2, &i2);
            if (t2 != t || i2 != inc)
                continue;
            ck_assert(bson_iter_init_find(&o, doc, "o") && bson_iter_init_find(&o2, doc, "o2"));
            const uint8_t *a, *b;
            uint32_t al, bl;
            bson_iter_document(&o, &al, &a);
            bson_iter_document(&so, &bl, &b);
            ck_assert(al == bl && memcmp(a, b, al) == 0);
            bson_iter_document(&o2, &al, &a);
            bson_iter_document(&so2, &bl, &b);
            ck_assert(al == bl && memcmp(a, b, al) == 0);
            found++;
        }
        bson_reader_destroy(rd);
    }
    ck_assert_uint_eq(found, ns);
    free(obytes);
    free_lines(sample, ns);
}
END_TEST

/* Mutated buckets and diffs (bytes flipped, truncated, length headers kept): each call may succeed or fail, but
 * never crashes or reads out of bounds (the sanitizer build checks the latter). */
START_TEST(mutations_never_crash)
{
    size_t blen;
    uint8_t *bbytes = read_file(TSDIR "mongo-tools_ts_dump_with_oplog.buckets.bson", &blen);
    uint32_t first;
    memcpy(&first, bbytes, 4);
    bson_t *wantv[130];
    bson_t *v2 = encoded_bucket(2, 130, 130, true, wantv);
    for (int i = 0; i < 130; i++)
        bson_destroy(wantv[i]);
    bson_t *diff =
        J("{\"scontrol\": {\"u\": {\"count\": 2}}, \"sdata\": {\"sv\": {\"a\": true, \"l\": 3, \"u1\": 5, "
          "\"s0\": {\"i\": {\"x\": 1}}}, \"b\": {\"t\": {\"o\": 3, \"d\": {\"$binary\": {\"base64\": \"AAA=\", "
          "\"subType\": \"00\"}}}}}}");
    const uint8_t *srcs[3] = {bbytes, bson_get_data(v2), bson_get_data(diff)};
    size_t lens[3] = {first, v2->len, diff->len};
    unsigned seed = 777;
    char err[256];
    size_t unpacked = 0, refused = 0;
    for (int round = 0; round < 3000; round++) {
        int which = round % 3;
        size_t n = lens[which];
        uint8_t *m = malloc(n);
        memcpy(m, srcs[which], n);
        int flips = 1 + rand_r(&seed) % 4;
        for (int f = 0; f < flips; f++) {
            size_t at = 4 + (size_t)rand_r(&seed) % (n - 4);
            m[at] = (uint8_t)(rand_r(&seed) % 3 == 0 ? (unsigned)m[at] ^ (1u << (rand_r(&seed) % 8))
                                                     : (unsigned)rand_r(&seed));
        }
        bucket_spec spec = {which == 0 ? "ts" : "t", which == 0 ? "meta" : "tag", false};
        if (which < 2) {
            bucket_rows r;
            if (bucket_unpack(m, n, &spec, &r, err, sizeof err))
                unpacked++;
            else
                refused++;
            bucket_rows_clear(&r);
            /* the mutated bucket as the document a diff applies to */
            bson_t out;
            bucket_apply_diff_ex(m, n, bson_get_data(diff), diff->len, BUCKET_DIFF_IDEMPOTENT, &out, err, sizeof err);
            bson_destroy(&out);
        } else {
            bson_t out;
            bucket_apply_diff(bson_get_data(v2), v2->len, m, n, &out, err, sizeof err);
            bson_destroy(&out);
            bucket_apply_diff_ex(bson_get_data(v2), v2->len, m, n, BUCKET_DIFF_IDEMPOTENT, &out, err, sizeof err);
            bson_destroy(&out);
        }
        free(m);
    }
    ck_assert_uint_gt(unpacked, 0);
    ck_assert_uint_gt(refused, 0);
    bson_destroy(diff);
    bson_destroy(v2);
    free(bbytes);
}
END_TEST

/* ---- bucket_unpack_next: the next version of a bucket, going on from the last ---- */

/* A random column layout and the encoders that keep its columns as the server's builder does (appends as
 * intermediate() diffs). */
#define NX_MAXCOLS 8
typedef struct {
    uint64_t rng;
    int version;
    bool meta;
    char meta_val[16];
    size_t ncols;
    char names[NX_MAXCOLS][8];
    int kind[NX_MAXCOLS]; /* 0 time, 1 int32, 2 double, 3 string, 4 object, 5 bool, 6 int64 */
    int miss[NX_MAXCOLS]; /* percent of positions missing */
    bcenc_t *enc[NX_MAXCOLS];
    uint8_t *bin[NX_MAXCOLS];
    size_t binlen[NX_MAXCOLS];
    size_t n;
    int64_t t;
    int64_t iv[NX_MAXCOLS];
} nx_seq;

static uint64_t nx_rand(nx_seq *q)
{
    q->rng ^= q->rng << 13;
    q->rng ^= q->rng >> 7;
    q->rng ^= q->rng << 17;
    return q->rng;
}

/* Appends one measurement to every column, each column's bytes following its intermediate() diff. */
static void nx_append(nx_seq *q)
{
    for (size_t j = 0; j < q->ncols; j++) {
        bson_t m = BSON_INITIALIZER, o;
        bool skip = q->kind[j] != 0 && (int)(nx_rand(q) % 100) < q->miss[j];
        uint64_t r = nx_rand(q);
        switch (q->kind[j]) {
        case 0:
            q->t += r % 8 == 0 ? (int64_t)(r % 100000) : 1000;
            BSON_APPEND_DATE_TIME(&m, "x", q->t);
            break;
        case 1:
            q->iv[j] += r % 4 == 0 ? (int64_t)(r % 2001) - 1000 : (int64_t)(r % 3) - 1;
            BSON_APPEND_INT32(&m, "x", (int32_t)q->iv[j]);
            break;
        case 2:
            BSON_APPEND_DOUBLE(&m, "x", r % 3 == 0 ? 20.5 : (double)(int64_t)(r % 4000) / (r % 2 ? 10.0 : 1000.0));
            break;
        case 3:
            BSON_APPEND_UTF8(&m, "x", r % 4 == 0 ? "a much longer string value here" : (r % 2 ? "on" : "off"));
            break;
        case 4:
            BSON_APPEND_DOCUMENT_BEGIN(&m, "x", &o);
            BSON_APPEND_INT32(&o, "a", (int32_t)(r % 7));
            if (r % 5)
                BSON_APPEND_DOUBLE(&o, "b", (double)(r % 100) / 4);
            bson_append_document_end(&m, &o);
            break;
        case 5:
            BSON_APPEND_BOOL(&m, "x", r % 20 != 0);
            break;
        default:
            q->iv[j] += (int64_t)(r % 5);
            BSON_APPEND_INT64(&m, "x", q->iv[j]);
            break;
        }
        bson_iter_t it;
        if (skip)
            bcenc_skip(q->enc[j]);
        else if (bson_iter_init_find(&it, &m, "x"))
            bcenc_append_iter(q->enc[j], &it);
        bson_destroy(&m);
        size_t off, dl;
        uint8_t *d = bcenc_intermediate(q->enc[j], &off, &dl);
        ck_assert_uint_le(off, q->binlen[j]);
        uint8_t *nb = malloc(off + dl + 1);
        if (off)
            memcpy(nb, q->bin[j], off);
        if (dl)
            memcpy(nb + off, d, dl);
        free(d);
        free(q->bin[j]);
        q->bin[j] = nb;
        q->binlen[j] = off + dl;
    }
    q->n++;
}

static void nx_init(nx_seq *q, uint64_t seed)
{
    memset(q, 0, sizeof *q);
    q->rng = seed * 0x9E3779B97F4A7C15u + 1;
    q->version = nx_rand(q) % 2 ? 2 : 3;
    q->meta = nx_rand(q) % 3 != 0;
    snprintf(q->meta_val, sizeof q->meta_val, "m%d", (int)(nx_rand(q) % 5));
    q->ncols = 2 + nx_rand(q) % 5;
    size_t tpos = nx_rand(q) % q->ncols; /* the time column anywhere in the data region */
    for (size_t j = 0; j < q->ncols; j++) {
        q->kind[j] = j == tpos ? 0 : 1 + (int)(nx_rand(q) % 6);
        snprintf(q->names[j], sizeof q->names[j], j == tpos ? "t" : "f%zu", j);
        q->miss[j] = nx_rand(q) % 3 == 0 ? (int)(nx_rand(q) % 60) : 0;
        q->enc[j] = bcenc_new();
    }
    q->t = INT64_C(1767225600000);
}

static void nx_free(nx_seq *q)
{
    for (size_t j = 0; j < q->ncols; j++) {
        bcenc_free(q->enc[j]);
        free(q->bin[j]);
    }
}

/* A new column appears (a measurement with a field the bucket has not seen): earlier positions are skips. */
static void nx_add_column(nx_seq *q)
{
    if (q->ncols == NX_MAXCOLS)
        return;
    size_t j = q->ncols++;
    q->kind[j] = 1 + (int)(nx_rand(q) % 6);
    snprintf(q->names[j], sizeof q->names[j], "g%zu", j);
    q->miss[j] = 0;
    q->enc[j] = bcenc_new();
    for (size_t i = 0; i < q->n; i++)
        bcenc_skip(q->enc[j]);
    q->bin[j] = NULL;
    q->binlen[j] = 0;
    size_t off, dl;
    uint8_t *d = bcenc_intermediate(q->enc[j], &off, &dl);
    q->bin[j] = d;
    q->binlen[j] = dl;
}

/* Rewrites every column whole (the server's finalize(), as a re-pack or a compression writes it): earlier bytes
 * change. */
static void nx_rewrite(nx_seq *q)
{
    for (size_t j = 0; j < q->ncols; j++) {
        size_t l;
        uint8_t *b = bcenc_finish(q->enc[j], &l);
        free(q->bin[j]);
        q->bin[j] = b;
        q->binlen[j] = l;
    }
}

static bson_t *nx_bucket(const nx_seq *q, int corrupt_col, size_t corrupt_at, uint8_t corrupt_xor)
{
    bson_t *b = bson_new(), c, d;
    bson_oid_t bid;
    bson_oid_init_from_string(&bid, "6553f1000102030405060708");
    BSON_APPEND_OID(b, "_id", &bid);
    BSON_APPEND_DOCUMENT_BEGIN(b, "control", &c);
    BSON_APPEND_INT32(&c, "version", q->version);
    BSON_APPEND_INT32(&c, "count", (int32_t)q->n);
    bson_append_document_end(b, &c);
    if (q->meta)
        BSON_APPEND_UTF8(b, "meta", q->meta_val);
    BSON_APPEND_DOCUMENT_BEGIN(b, "data", &d);
    for (size_t j = 0; j < q->ncols; j++) {
        uint8_t *bytes = malloc(q->binlen[j] + 1);
        memcpy(bytes, q->bin[j], q->binlen[j]);
        if ((int)j == corrupt_col && q->binlen[j] > 0)
            bytes[corrupt_at % q->binlen[j]] ^= corrupt_xor;
        ck_assert(bson_append_binary(&d, q->names[j], -1, BSON_SUBTYPE_COLUMN, bytes, (uint32_t)q->binlen[j]));
        free(bytes);
    }
    bson_append_document_end(b, &d);
    return b;
}

/* bucket_unpack_next from prev gives exactly bucket_unpack's rows (or its error). Counts the places shared with
 * prev (the same pointer) into *shared, and the rows whose decoding went on from prev's into *resumed. */
static bool nx_check(const bson_t *b, const bson_t *pb, bucket_rows *prev, bucket_rows *out, size_t *shared,
                     const char *what)
{
    bucket_spec spec = {"t", "tag", false};
    bucket_rows full;
    char e1[256] = "", e2[256] = "";
    bool ok1 = bucket_unpack(bson_get_data(b), b->len, &spec, &full, e1, sizeof e1);
    bool ok2 = bucket_unpack_next(bson_get_data(b), b->len, &spec, pb ? bson_get_data(pb) : NULL, pb ? pb->len : 0,
                                  prev, out, e2, sizeof e2);
    ck_assert_msg(ok1 == ok2, "%s: bucket_unpack %s (%s), bucket_unpack_next %s (%s)", what, ok1 ? "ok" : "failed", e1,
                  ok2 ? "ok" : "failed", e2);
    if (!ok1) {
        ck_assert_str_eq(e1, e2);
        ck_assert_uint_eq(out->n, 0);
        return false;
    }
    ck_assert_msg(full.n == out->n, "%s: %zu rows, want %zu", what, out->n, full.n);
    for (size_t i = 0; i < full.n; i++) {
        ck_assert_int_eq(full.times[i], out->times[i]);
        if (full.lens[i] != out->lens[i] || memcmp(full.docs[i], out->docs[i], full.lens[i]) != 0) {
            char *want = as_json(full.docs[i], full.lens[i]), *got = as_json(out->docs[i], out->lens[i]);
            ck_abort_msg("%s: row %zu is %s, want %s", what, i, got, want);
        }
        if (prev && i < prev->n && prev->docs[i] == out->docs[i])
            (*shared)++;
    }
    /* the leading places it calls unchanged are prev's own */
    ck_assert_msg(out->same <= (prev ? prev->n : 0), "%s: %zu places the same as prev's %zu", what, out->same,
                  prev ? prev->n : 0);
    for (size_t i = 0; i < out->same; i++)
        ck_assert_msg(out->times[i] == prev->times[i] && out->lens[i] == prev->lens[i] &&
                          memcmp(out->docs[i], prev->docs[i], out->lens[i]) == 0,
                      "%s: place %zu", what, i);
    bucket_rows_clear(&full);
    return true;
}

/* rows hold exactly what bucket_unpack makes of b (rows made earlier stay whole whatever came after them). */
static void nx_same_as_full(const bson_t *b, const bucket_rows *rows, const char *what)
{
    bucket_spec spec = {"t", "tag", false};
    bucket_rows full;
    char e[256] = "";
    ck_assert_msg(bucket_unpack(bson_get_data(b), b->len, &spec, &full, e, sizeof e), "%s: %s", what, e);
    ck_assert_uint_eq(full.n, rows->n);
    for (size_t i = 0; i < full.n; i++)
        ck_assert_msg(full.times[i] == rows->times[i] && full.lens[i] == rows->lens[i] &&
                          memcmp(full.docs[i], rows->docs[i], full.lens[i]) == 0,
                      "%s: place %zu of the earlier rows changed", what, i);
    bucket_rows_clear(&full);
}

START_TEST(next_matches_full_unpack)
{
    size_t shared = 0, steps = 0, rewrites = 0, corrupt = 0, newcols = 0, arrays_shared = 0;
    for (uint64_t seed = 1; seed <= 60; seed++) {
        nx_seq q;
        nx_init(&q, seed);
        bucket_rows prev = {0};
        bson_t *pb = NULL;
        size_t n = 20 + (size_t)(nx_rand(&q) % 400);
        char what[64];
        for (size_t k = 0; k < n; k++) {
            nx_append(&q);
            uint64_t r = nx_rand(&q) % 100;
            if (r < 2) {
                nx_rewrite(&q);
                rewrites++;
            } else if (r < 3) {
                nx_add_column(&q);
                newcols++;
            } else if (r < 4 && q.meta) {
                snprintf(q.meta_val, sizeof q.meta_val, "m%d", (int)(nx_rand(&q) % 5)); /* a meta rewritten */
            }
            snprintf(what, sizeof what, "seed %" PRIu64 " step %zu", seed, k);
            if (nx_rand(&q) % 25 == 0) {
                /* a column with a byte changed: the same error, or the same rows, and prev stays usable */
                size_t j = (size_t)(nx_rand(&q) % q.ncols);
                bson_t *bad = nx_bucket(&q, (int)j, (size_t)nx_rand(&q), (uint8_t)(1 + nx_rand(&q) % 255));
                bucket_rows x;
                if (nx_check(bad, pb, pb ? &prev : NULL, &x, &shared, what))
                    bucket_rows_clear(&x);
                if (pb)
                    nx_same_as_full(pb, &prev, what); /* x shared prev's arrays, maybe: they are still prev's */
                bson_destroy(bad);
                corrupt++;
            }
            bson_t *b = nx_bucket(&q, -1, 0, 0);
            bucket_rows next;
            ck_assert(nx_check(b, pb, pb ? &prev : NULL, &next, &shared, what));
            if (pb && next.times == prev.times)
                arrays_shared++;
            if (pb && nx_rand(&q) % 7 == 0) {
                /* the new rows cleared first: the earlier ones stay whole (they may share arrays) */
                bson_t *nb = bson_copy(b);
                bucket_rows_clear(&next);
                nx_same_as_full(pb, &prev, what);
                ck_assert(nx_check(nb, NULL, NULL, &next, &shared, what));
                bson_destroy(nb);
            }
            bucket_rows_clear(&prev);
            prev = next;
            if (pb)
                bson_destroy(pb);
            pb = b;
            steps++;
        }
        bucket_rows_clear(&prev);
        bson_destroy(pb);
        nx_free(&q);
    }
    /* the test exercises what it is for: most places are shared with the previous version */
    ck_assert_uint_gt(rewrites, 0);
    ck_assert_uint_gt(corrupt, 0);
    ck_assert_uint_gt(newcols, 0);
    ck_assert_msg(shared > steps * 50, "%zu places shared over %zu appends", shared, steps);
    ck_assert_msg(arrays_shared > steps / 2, "arrays shared by %zu of %zu appends", arrays_shared, steps);
}
END_TEST

Suite *bucket_suite(void)
{
    Suite *s = suite_create("bucket");
    TCase *tc = tcase_create("unpack");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, v1_gaps_meta_and_field_order);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, v2_v3_encoded_buckets);
    tcase_add_test(tc, v2_refusals);
    tcase_add_test(tc, server_written_bucket);
    tcase_add_test(tc, next_matches_full_unpack);
    suite_add_tcase(s, tc);
    tc = tcase_create("diff");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, diff_object_level);
    tcase_add_test(tc, diff_arrays);
    tcase_add_test(tc, diff_binary);
    tcase_add_test(tc, diff_not_fitting);
    tcase_add_test(tc, diff_malformed);
    tcase_add_test(tc, diff_server_vectors);
    tcase_add_test(tc, server_binary_diff_append);
    tcase_add_test(tc, encoder_append_diffs);
    suite_add_tcase(s, tc);
    tc = tcase_create("real");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, real_mongo_tools_dump_and_oplog);
    tcase_add_test(tc, real_oplog_trim_matches_sample);
    tcase_add_test(tc, mutations_never_crash);
    suite_add_tcase(s, tc);
    return s;
}

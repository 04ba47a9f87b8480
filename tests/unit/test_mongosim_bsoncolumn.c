/*
 * test_mongosim_bsoncolumn.c — mongosim's BSONColumn encoder (tests/mongosim/bsoncolumn_enc.c), checked against
 * what the server writes, never against the daemon's decoder:
 *
 *  - tests/vectors/bsoncolumn/simple8b_words.jsonl: the Simple-8b words of the server's simple8b_test.cpp;
 *  - tests/vectors/bsoncolumn/server_columns.jsonl: columns and an 8.0 append diff printed in the server's jstests;
 *  - columns built here the way the server's bsoncolumn_test.cpp builds its expected binaries (a literal, control
 *    bytes 0x80 / 0x90.. with their word counts, the Simple-8b words of the deltas the test computes by hand, 0xF1 /
 *    0xF2 and the reference object for interleaved objects, 0x00 at the end);
 *  - an append diff applied to the previous binary equals the whole column encoded again;
 *  - a small decoder written here re-reads integer columns with skips and runs.
 */
#include <bson/bson.h>
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../mongosim/bsoncolumn_enc.h"

Suite *mongosim_bsoncolumn_suite(void);

#define VEC "tests/vectors/bsoncolumn/"

/* ---- expected binaries, built as bsoncolumn_test.cpp builds them */

typedef struct {
    uint8_t p[1 << 16];
    size_t n;
} xbuf;

static void xb_put(xbuf *x, const void *p, size_t n)
{
    ck_assert_uint_le(x->n + n, sizeof x->p);
    memcpy(x->p + x->n, p, n);
    x->n += n;
}

static void xb_byte(xbuf *x, uint8_t b)
{
    xb_put(x, &b, 1);
}

static const uint8_t *value_of(const bson_iter_t *it, size_t *n)
{
    size_t klen = strlen(bson_iter_key(it));
    uint32_t voff = it->key + (uint32_t)klen + 1;
    *n = it->next_off - voff;
    return it->raw + voff;
}

/* appendLiteral: type byte, an empty field name, the value */
static void xb_literal(xbuf *x, const bson_iter_t *it)
{
    size_t n;
    const uint8_t *v = value_of(it, &n);
    xb_byte(x, (uint8_t)bson_iter_type(it));
    xb_byte(x, 0);
    xb_put(x, v, n);
}

/* One stream of Simple-8b values under control bytes of 'control' (0x80 integers, 0x90 + scale for doubles), 16
 * words per control byte at most. kind 1 is a skip. */
typedef struct {
    size_t n;
    uint8_t kind[4096];
    uint64_t hi[4096], lo[4096];
} vals;

static void v_add(vals *v, uint64_t x)
{
    v->kind[v->n] = 0;
    v->hi[v->n] = 0;
    v->lo[v->n++] = x;
}
static void v_add128(vals *v, uint64_t hi, uint64_t lo)
{
    v->kind[v->n] = 0;
    v->hi[v->n] = hi;
    v->lo[v->n++] = lo;
}
static void v_skip(vals *v)
{
    v->kind[v->n] = 1;
    v->hi[v->n] = v->lo[v->n] = 0;
    v->n++;
}

static void xb_blocks(xbuf *x, uint8_t control, bool wide, const vals *v)
{
    size_t len;
    uint8_t *w = bcenc_simple8b_words(wide, v->n, v->kind, v->hi, v->lo, &len);
    size_t words = len / 8;
    for (size_t i = 0; i < words; i += 16) {
        size_t k = words - i < 16 ? words - i : 16;
        xb_byte(x, (uint8_t)(control | (k - 1)));
        xb_put(x, w + i * 8, k * 8);
    }
    free(w);
}

static uint64_t zz(int64_t d)
{
    return ((uint64_t)d << 1) ^ (uint64_t)(d >> 63);
}

/* encodes every element of 'arr' (a document or array of values) in order */
static uint8_t *encode_all(const bson_t *arr, size_t *len)
{
    bcenc_t *e = bcenc_new();
    bson_iter_t it;
    ck_assert(bson_iter_init(&it, arr));
    while (bson_iter_next(&it))
        bcenc_append_iter(e, &it);
    uint8_t *out = bcenc_finish(e, len);
    bcenc_free(e);
    return out;
}

static void hexdump(const char *what, const uint8_t *p, size_t n)
{
    fprintf(stderr, "%s (%zu):", what, n);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %02x", p[i]);
    fprintf(stderr, "\n");
}

static void assert_bytes(const uint8_t *got, size_t gn, const uint8_t *want, size_t wn)
{
    if (gn != wn || memcmp(got, want, gn) != 0) {
        hexdump("got ", got, gn);
        hexdump("want", want, wn);
        ck_abort_msg("binaries differ");
    }
}

static void assert_column(const bson_t *arr, const xbuf *want)
{
    size_t n;
    uint8_t *got = encode_all(arr, &n);
    assert_bytes(got, n, want->p, want->n);
    free(got);
}

static bson_iter_t elem(const bson_t *doc, const char *key)
{
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, doc, key));
    return it;
}

/* ---- the server's Simple-8b words */

static void parse_u128(const char *s, uint64_t *hi, uint64_t *lo)
{
    unsigned __int128 v = 0;
    for (; *s; s++)
        v = v * 10 + (unsigned)(*s - '0');
    *hi = (uint64_t)(v >> 64);
    *lo = (uint64_t)v;
}

static char *read_line(FILE *fp)
{
    size_t cap = 0;
    char *line = NULL;
    if (getline(&line, &cap, fp) <= 0) {
        free(line);
        return NULL;
    }
    return line;
}

START_TEST(test_simple8b_server_words)
{
    FILE *fp = fopen(VEC "simple8b_words.jsonl", "r");
    ck_assert_ptr_nonnull(fp);
    int cases = 0;
    char *line;
    static vals v;
    while ((line = read_line(fp))) {
        bson_error_t err;
        bson_t *doc = bson_new_from_json((const uint8_t *)line, -1, &err);
        ck_assert_msg(doc != NULL, "%s", err.message);
        bson_iter_t it = elem(doc, "values"), a;
        ck_assert(bson_iter_recurse(&it, &a));
        v.n = 0;
        while (bson_iter_next(&a)) {
            ck_assert_uint_lt(v.n, 4096);
            if (BSON_ITER_HOLDS_NULL(&a)) {
                v_skip(&v);
            } else if (strcmp(bson_iter_utf8(&a, NULL), "flush") == 0) {
                v.kind[v.n] = 2;
                v.hi[v.n] = v.lo[v.n] = 0;
                v.n++;
            } else {
                uint64_t hi, lo;
                parse_u128(bson_iter_utf8(&a, NULL), &hi, &lo);
                v_add128(&v, hi, lo);
            }
        }
        bson_iter_t w = elem(doc, "wide"), b = elem(doc, "bytes"), t = elem(doc, "test");
        const char *hex = bson_iter_utf8(&b, NULL);
        size_t wn = strlen(hex) / 2;
        uint8_t want[64];
        ck_assert_uint_le(wn, sizeof want);
        for (size_t i = 0; i < wn; i++) {
            unsigned x;
            ck_assert_int_eq(sscanf(hex + 2 * i, "%2x", &x), 1);
            want[i] = (uint8_t)x;
        }
        size_t n;
        uint8_t *got = bcenc_simple8b_words(bson_iter_bool(&w), v.n, v.kind, v.hi, v.lo, &n);
        if (n != wn || memcmp(got, want, n) != 0) {
            hexdump("got ", got, n);
            hexdump("want", want, wn);
            ck_abort_msg("Simple-8b words differ in %s", bson_iter_utf8(&t, NULL));
        }
        free(got);
        bson_destroy(doc);
        free(line);
        cases++;
    }
    fclose(fp);
    ck_assert_int_ge(cases, 50);
}
END_TEST

/* ---- columns and an append the server printed */

static uint8_t *apply_diff(uint8_t *buf, size_t *len, size_t off, const uint8_t *d, size_t dn)
{
    ck_assert_uint_le(off, *len);
    buf = realloc(buf, off + dn);
    ck_assert_ptr_nonnull(buf);
    memcpy(buf + off, d, dn);
    *len = off + dn;
    return buf;
}

START_TEST(test_server_columns)
{
    FILE *fp = fopen(VEC "server_columns.jsonl", "r");
    ck_assert_ptr_nonnull(fp);
    int columns = 0, appends = 0;
    char *line;
    while ((line = read_line(fp))) {
        bson_error_t err;
        bson_t *doc = bson_new_from_json((const uint8_t *)line, -1, &err);
        ck_assert_msg(doc != NULL, "%s", err.message);
        bson_iter_t src = elem(doc, "source"), vs = elem(doc, "values"), a;
        bcenc_t *e = bcenc_new();
        ck_assert(bson_iter_recurse(&vs, &a));
        while (bson_iter_next(&a))
            bcenc_append_iter(e, &a);
        bson_iter_t col, app;
        if (bson_iter_init_find(&col, doc, "column")) {
            uint32_t wn;
            const uint8_t *want;
            bson_subtype_t st;
            bson_iter_binary(&col, &st, &wn, &want);
            ck_assert_int_eq(st, 7);
            size_t n;
            uint8_t *got = bcenc_finish(e, &n);
            if (n != wn || memcmp(got, want, n) != 0) {
                hexdump("got ", got, n);
                hexdump("want", want, wn);
                ck_abort_msg("column differs: %s", bson_iter_utf8(&src, NULL));
            }
            free(got);
            columns++;
        }
        if (bson_iter_init_find(&app, doc, "append")) {
            size_t off, dn;
            free(bcenc_intermediate(e, &off, &dn)); /* the bucket as inserted */
            ck_assert(bson_iter_recurse(&app, &a));
            while (bson_iter_next(&a))
                bcenc_append_iter(e, &a);
            uint8_t *d = bcenc_intermediate(e, &off, &dn);
            bson_iter_t o = elem(doc, "o"), dd = elem(doc, "d");
            uint32_t wn;
            const uint8_t *want;
            bson_subtype_t st;
            bson_iter_binary(&dd, &st, &wn, &want);
            ck_assert_int_eq((int)off, bson_iter_int32(&o));
            assert_bytes(d, dn, want, wn);
            free(d);
            appends++;
        }
        bcenc_free(e);
        bson_destroy(doc);
        free(line);
    }
    fclose(fp);
    ck_assert_int_ge(columns, 7);
    ck_assert_int_ge(appends, 2);
}
END_TEST

/* ---- each type class, as bsoncolumn_test.cpp lays out its expected binaries */

START_TEST(test_int32_int64_deltas)
{
    bson_t *a = BCON_NEW("0", BCON_INT32(1), "1", BCON_INT32(2), "2", BCON_INT32(3), "3", BCON_INT32(-5));
    xbuf x = {.n = 0};
    bson_iter_t it = elem(a, "0");
    xb_literal(&x, &it);
    vals v = {.n = 0};
    v_add(&v, zz(1));
    v_add(&v, zz(1));
    v_add(&v, zz(-8));
    xb_blocks(&x, 0x80, false, &v);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);

    /* a delta Simple-8b cannot hold ends the block: the value is a new literal */
    a = BCON_NEW("0", BCON_INT64(0), "1", BCON_INT64(1), "2", BCON_INT64(INT64_C(1) << 62), "3",
                 BCON_INT64((INT64_C(1) << 62) + 7));
    x.n = 0;
    it = elem(a, "0");
    xb_literal(&x, &it);
    v.n = 0;
    v_add(&v, zz(1));
    xb_blocks(&x, 0x80, false, &v);
    it = elem(a, "2");
    xb_literal(&x, &it);
    v.n = 0;
    v_add(&v, zz(7));
    xb_blocks(&x, 0x80, false, &v);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);
}
END_TEST

START_TEST(test_delta_of_delta_types)
{
    /* Date: delta of delta (bsoncolumn_util.h usesDeltaOfDelta) */
    bson_t *a = BCON_NEW("0", BCON_DATE_TIME(1000), "1", BCON_DATE_TIME(2000), "2", BCON_DATE_TIME(3000), "3",
                         BCON_DATE_TIME(4500));
    xbuf x = {.n = 0};
    bson_iter_t it = elem(a, "0");
    xb_literal(&x, &it);
    vals v = {.n = 0};
    v_add(&v, zz(1000));
    v_add(&v, zz(0));
    v_add(&v, zz(500));
    xb_blocks(&x, 0x80, false, &v);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);

    /* Timestamp: the 64-bit (time << 32 | increment) */
    a = BCON_NEW("0", BCON_TIMESTAMP(100, 1), "1", BCON_TIMESTAMP(100, 2), "2", BCON_TIMESTAMP(100, 3), "3",
                 BCON_TIMESTAMP(101, 0));
    x.n = 0;
    it = elem(a, "0");
    xb_literal(&x, &it);
    v.n = 0;
    v_add(&v, zz(1));
    v_add(&v, zz(0));
    v_add(&v, zz((INT64_C(1) << 32) - 3 - 1));
    xb_blocks(&x, 0x80, false, &v);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);

    /* ObjectId: counter and time bytes reordered (C2 T3 C1 T2 C0 T1 T0), the instance part must match */
    bson_oid_t o1, o2, o3, o4;
    bson_oid_init_from_string(&o1, "65a6eba7e6d2e848e08c3750");
    bson_oid_init_from_string(&o2, "65a6eba7e6d2e848e08c3752");
    bson_oid_init_from_string(&o3, "65a6eba8e6d2e848e08c3753");
    bson_oid_init_from_string(&o4, "65a6eba8ffd2e848e08c3754"); /* another process: a literal */
    a = BCON_NEW("0", BCON_OID(&o1), "1", BCON_OID(&o2), "2", BCON_OID(&o3), "3", BCON_OID(&o4));
    x.n = 0;
    it = elem(a, "0");
    xb_literal(&x, &it);
    v.n = 0;
    v_add(&v, zz(2));
    /* +1 in the counter's low byte (encoded byte 0), +1 in the time's low byte (encoded byte 1) */
    v_add(&v, zz((1 + 256) - 2));
    xb_blocks(&x, 0x80, false, &v);
    it = elem(a, "3");
    xb_literal(&x, &it);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);
}
END_TEST

START_TEST(test_bool_null_and_repeats)
{
    bson_t *a = BCON_NEW("0", BCON_BOOL(true), "1", BCON_BOOL(false), "2", BCON_BOOL(false), "3", BCON_BOOL(true));
    xbuf x = {.n = 0};
    bson_iter_t it = elem(a, "0");
    xb_literal(&x, &it);
    vals v = {.n = 0};
    v_add(&v, zz(-1));
    v_add(&v, zz(0));
    v_add(&v, zz(1));
    xb_blocks(&x, 0x80, false, &v);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);

    /* null, min key, a regex: only repeats (zero deltas) */
    a = BCON_NEW("0", BCON_NULL, "1", BCON_NULL, "2", BCON_NULL, "3", BCON_REGEX("^a", "i"), "4", BCON_REGEX("^a", "i"),
                 "5", BCON_REGEX("^b", "i"));
    x.n = 0;
    it = elem(a, "0");
    xb_literal(&x, &it);
    v.n = 0;
    v_add(&v, 0);
    v_add(&v, 0);
    xb_blocks(&x, 0x80, false, &v);
    it = elem(a, "3");
    xb_literal(&x, &it);
    v.n = 0;
    v_add(&v, 0);
    xb_blocks(&x, 0x80, false, &v);
    it = elem(a, "5");
    xb_literal(&x, &it);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);

    /* a type change always writes a literal */
    a = BCON_NEW("0", BCON_INT32(1), "1", BCON_INT64(1), "2", BCON_UTF8("x"), "3", BCON_INT32(1));
    x.n = 0;
    for (int i = 0; i < 4; i++) {
        char k[2] = {(char)('0' + i), 0};
        it = elem(a, k);
        xb_literal(&x, &it);
    }
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);
}
END_TEST

/* 128-bit: strings reversed into the low bytes, binaries and Decimal128 as little-endian integers */
static void str128(const char *s, uint64_t *hi, uint64_t *lo)
{
    uint8_t arr[16] = {0};
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i++)
        arr[i] = (uint8_t)s[n - 1 - i];
    *lo = *hi = 0;
    for (int i = 7; i >= 0; i--) {
        *lo = (*lo << 8) | arr[i];
        *hi = (*hi << 8) | arr[i + 8];
    }
}

static void zz128(uint64_t ahi, uint64_t alo, uint64_t bhi, uint64_t blo, uint64_t *hi, uint64_t *lo)
{
    unsigned __int128 a = ((unsigned __int128)ahi << 64) | alo, b = ((unsigned __int128)bhi << 64) | blo;
    __int128 d = (__int128)(a - b);
    unsigned __int128 z = ((unsigned __int128)d << 1) ^ (unsigned __int128)(d >> 127);
    *hi = (uint64_t)(z >> 64);
    *lo = (uint64_t)z;
}

START_TEST(test_strings_binaries_decimals)
{
    bson_t *a =
        BCON_NEW("0", BCON_UTF8("sensor-a1"), "1", BCON_UTF8("sensor-a2"), "2", BCON_UTF8("sensor-b2"), "3",
                 BCON_UTF8("a string longer than sixteen bytes"), "4", BCON_UTF8("a string longer than sixteen bytes"));
    xbuf x = {.n = 0};
    bson_iter_t it = elem(a, "0");
    xb_literal(&x, &it);
    vals v = {.n = 0};
    const char *s[] = {"sensor-a1", "sensor-a2", "sensor-b2"};
    for (int i = 1; i < 3; i++) {
        uint64_t ah, al, bh, bl, h, l;
        str128(s[i], &ah, &al);
        str128(s[i - 1], &bh, &bl);
        zz128(ah, al, bh, bl, &h, &l);
        v_add128(&v, h, l);
    }
    xb_blocks(&x, 0x80, true, &v);
    it = elem(a, "3");
    xb_literal(&x, &it);
    v.n = 0;
    v_add(&v, 0);
    xb_blocks(&x, 0x80, true, &v);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);

    /* binaries of one length and subtype: deltas; another length: a literal */
    const uint8_t b1[4] = {1, 2, 3, 4}, b2[4] = {1, 2, 3, 9}, b3[5] = {1, 2, 3, 9, 0};
    a = BCON_NEW("0", BCON_BIN(BSON_SUBTYPE_BINARY, b1, 4), "1", BCON_BIN(BSON_SUBTYPE_BINARY, b2, 4), "2",
                 BCON_BIN(BSON_SUBTYPE_BINARY, b3, 5));
    x.n = 0;
    it = elem(a, "0");
    xb_literal(&x, &it);
    v.n = 0;
    v_add128(&v, 0, zz((int64_t)5 << 24));
    xb_blocks(&x, 0x80, true, &v);
    it = elem(a, "2");
    xb_literal(&x, &it);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);

    bson_decimal128_t d1, d2;
    bson_decimal128_from_string("1.5", &d1);
    bson_decimal128_from_string("1.7", &d2);
    a = BCON_NEW("0", BCON_DECIMAL128(&d1), "1", BCON_DECIMAL128(&d2));
    x.n = 0;
    it = elem(a, "0");
    xb_literal(&x, &it);
    v.n = 0;
    uint64_t h, l;
    zz128(d2.high, d2.low, d1.high, d1.low, &h, &l);
    v_add128(&v, h, l);
    xb_blocks(&x, 0x80, true, &v);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);
}
END_TEST

START_TEST(test_double_scales)
{
    struct {
        double in[3];
        int n;
        uint8_t control;
        int64_t deltas[2]; /* in the chosen scale */
    } cases[] = {
        {{1.0, 2.0, 3.0}, 3, 0x90, {1, 1}},     /* scale 1 */
        {{1.5, 2.5, 0}, 2, 0xA0, {10, 0}},      /* scale 10 */
        {{1.0, 1.5, 0}, 2, 0xA0, {5, 0}},       /* the literal rescaled: 1.0 is 10 at scale 10 */
        {{0.25, 0.5, 0}, 2, 0xB0, {25, 0}},     /* scale 100 */
        {{0.0001, 0.0002, 0}, 2, 0xC0, {1, 0}}, /* scale 10^4 */
        {{1e-8, 3e-8, 0}, 2, 0xD0, {2, 0}},     /* scale 10^8 */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        bson_t *a = bson_new();
        for (int i = 0; i < cases[c].n; i++) {
            char k[2] = {(char)('0' + i), 0};
            BSON_APPEND_DOUBLE(a, k, cases[c].in[i]);
        }
        xbuf x = {.n = 0};
        bson_iter_t it = elem(a, "0");
        xb_literal(&x, &it);
        vals v = {.n = 0};
        for (int i = 0; i < cases[c].n - 1; i++)
            v_add(&v, zz(cases[c].deltas[i]));
        xb_blocks(&x, cases[c].control, false, &v);
        xb_byte(&x, 0);
        assert_column(a, &x);
        bson_destroy(a);
    }

    /* a value no scale expresses: its bits as an integer (control 0x80) */
    bson_t *a = BCON_NEW("0", BCON_DOUBLE(1.0), "1", BCON_DOUBLE(M_PI));
    xbuf x = {.n = 0};
    bson_iter_t it = elem(a, "0");
    xb_literal(&x, &it);
    int64_t b1, b2;
    double one = 1.0, pi = M_PI;
    memcpy(&b1, &one, 8);
    memcpy(&b2, &pi, 8);
    vals v = {.n = 0};
    v_add(&v, zz(b2 - b1));
    xb_blocks(&x, 0x80, false, &v);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);
}
END_TEST

/* bsoncolumn_test.cpp's double tests (BasicDouble .. DoubleMultiplePendingAfterWritingBlock): where the scale rises,
 * is rescaled, falls after a written word, and comes back up. Each segment is one control byte over the deltas of
 * inputs [from, to) against input 'base' at the multiplier 'mul' (0: the bits as an integer). */
#define SKIP_D NAN
typedef struct {
    int from, to, base;
    double mul;
    uint8_t control;
    size_t words;
} dseg;

static int64_t scaled(double v, double mul)
{
    if (mul == 0) {
        int64_t b;
        memcpy(&b, &v, 8);
        return b;
    }
    long long r = llround(v * mul);
    ck_assert((double)r / mul == v); /* the test's own check that the scale expresses v */
    return r;
}

static void run_double_case(const char *name, const double *in, int n, const dseg *segs, int nsegs)
{
    bcenc_t *e = bcenc_new();
    bson_t *a = bson_new();
    xbuf x = {.n = 0};
    bool literal_written = false;
    for (int i = 0; i < n; i++) {
        if (isnan(in[i])) {
            bcenc_skip(e);
            continue;
        }
        char k[8];
        snprintf(k, sizeof k, "%d", i);
        BSON_APPEND_DOUBLE(a, k, in[i]);
        bson_iter_t it = elem(a, k);
        bcenc_append_iter(e, &it);
    }
    for (int sgi = 0; sgi < nsegs; sgi++) {
        const dseg *sg = &segs[sgi];
        if (sg->control == 0) { /* the literal */
            char k[8];
            snprintf(k, sizeof k, "%d", sg->from);
            bson_iter_t it = elem(a, k);
            xb_literal(&x, &it);
            literal_written = true;
            continue;
        }
        vals v = {.n = 0};
        double prev = in[sg->base];
        for (int i = sg->from; i < sg->to; i++) {
            if (isnan(in[i])) {
                v_skip(&v);
                continue;
            }
            v_add(&v, zz(scaled(in[i], sg->mul) - scaled(prev, sg->mul)));
            prev = in[i];
        }
        size_t before = x.n;
        xb_blocks(&x, sg->control, false, &v);
        ck_assert_msg((x.n - before) == 1 + 8 * sg->words || sg->words > 16, "%s: words", name);
    }
    ck_assert(literal_written || n == 0 || isnan(in[0]));
    xb_byte(&x, 0);
    size_t len;
    uint8_t *got = bcenc_finish(e, &len);
    if (len != x.n || memcmp(got, x.p, len) != 0) {
        hexdump("got ", got, len);
        hexdump("want", x.p, x.n);
        ck_abort_msg("%s differs", name);
    }
    free(got);
    bson_destroy(a);
    bcenc_free(e);
}

#define LIT(i)                                                                                                         \
    {                                                                                                                  \
        i, i + 1, i, 0, 0, 0                                                                                           \
    }

START_TEST(test_double_server_cases)
{
    {
        double in[] = {1.0, 2.0};
        dseg s[] = {LIT(0), {1, 2, 0, 1, 0x90, 1}};
        run_double_case("BasicDouble", in, 2, s, 2);
    }
    {
        double in[] = {1.0, 1.1};
        dseg s[] = {LIT(0), {1, 2, 0, 10, 0xA0, 1}};
        run_double_case("DoubleIncreaseScaleFromLiteral", in, 2, s, 2);
    }
    {
        double in[] = {SKIP_D, 1.0, 1.1};
        dseg s[] = {{0, 1, 0, 1, 0x80, 1}, LIT(1), {2, 3, 1, 10, 0xA0, 1}};
        run_double_case("DoubleLiteralAndScaleAfterSkip", in, 3, s, 3);
    }
    {
        double in[] = {1.0, SKIP_D, SKIP_D, 1.1};
        dseg s[] = {LIT(0), {1, 4, 0, 10, 0xA0, 1}};
        run_double_case("DoubleIncreaseScaleFromLiteralAfterSkip", in, 4, s, 2);
    }
    {
        double in[] = {1.0, 2.0, 2.1, 2.2};
        dseg s[] = {LIT(0), {1, 4, 0, 10, 0xA0, 1}};
        run_double_case("DoubleIncreaseScaleFromDeltaWithRescale", in, 4, s, 2);
    }
    {
        double in[] = {1.1, 2.1, 2.2, 2.3, 3.12345678};
        dseg s[] = {LIT(0), {1, 4, 0, 10, 0xA0, 1}, {4, 5, 3, 100000000, 0xD0, 1}};
        run_double_case("DoubleIncreaseScaleFromDeltaNoRescale", in, 5, s, 3);
    }
    {
        double in[] = {1.12345671, 1.12345672, 2, 3};
        dseg s[] = {LIT(0), {1, 3, 0, 100000000, 0xD0, 1}, {3, 4, 2, 1, 0x90, 1}};
        run_double_case("DoubleDecreaseScaleAfterBlock", in, 4, s, 3);
    }
    {
        double in[] = {94.8, 107.9, 111.9, 113.4, 89.0, 126.7, 119.0, 105.0, 120.0};
        dseg s[] = {LIT(0), {1, 7, 0, 10, 0xA0, 1}, {7, 9, 6, 1, 0x90, 1}};
        run_double_case("DoubleDecreaseScaleAfterBlockContinueAppend", in, 9, s, 3);
    }
    {
        double in[] = {1.12345671, 2, SKIP_D, SKIP_D, 3};
        dseg s[] = {LIT(0), {1, 3, 0, 100000000, 0xD0, 1}, {3, 5, 1, 1, 0x90, 1}};
        run_double_case("DoubleDecreaseScaleAfterBlockUsingSkip", in, 5, s, 3);
    }
    {
        double in[] = {1.12345671, 1.12345672, 2, 3, 1.12345672};
        dseg s[] = {LIT(0), {1, 5, 0, 100000000, 0xD0, 2}};
        run_double_case("DoubleDecreaseScaleAfterBlockThenScaleBackUp", in, 5, s, 2);
    }
    {
        double in[] = {1.12345671, 2, SKIP_D, SKIP_D, 1.12345671};
        dseg s[] = {LIT(0), {1, 5, 0, 100000000, 0xD0, 2}};
        run_double_case("DoubleDecreaseScaleAfterBlockUsingSkipThenScaleBackUp", in, 5, s, 2);
    }
    {
        double in[] = {1.0, 1.0 + 2.220446049250313e-16, 1.0 + 2 * 2.220446049250313e-16};
        dseg s[] = {LIT(0), {1, 3, 0, 0, 0x80, 1}};
        run_double_case("DoubleUnscalable", in, 3, s, 2);
    }
    {
        double in[] = {116.0, 95.0, 80.0, 87.0, 113.0, 90.0, 113.0, 93.0, 99.0, 123.0, 89.0, 92.0};
        dseg s[] = {LIT(0), {1, 12, 0, 1, 0x90, 2}};
        run_double_case("DoubleMultiplePendingAfterWritingBlock", in, 12, s, 2);
    }
}
END_TEST

START_TEST(test_skips_runs_and_control_bytes)
{
    /* a skip alone (bsoncolumn_test.cpp OnlySkip): a control byte and one word of skip */
    {
        bcenc_t *e = bcenc_new();
        bcenc_skip(e);
        size_t n;
        uint8_t *got = bcenc_finish(e, &n);
        const uint8_t want[] = {0x80, 0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x00};
        assert_bytes(got, n, want, sizeof want);
        free(got);
        bcenc_free(e);
    }
    /* skips between values keep the previous value for the next delta */
    {
        bcenc_t *e = bcenc_new();
        bson_t *a = BCON_NEW("0", BCON_INT32(1), "1", BCON_INT32(3));
        bson_iter_t i0 = elem(a, "0"), i1 = elem(a, "1");
        bcenc_append_iter(e, &i0);
        bcenc_skip(e);
        bcenc_skip(e);
        bcenc_append_iter(e, &i1);
        xbuf x = {.n = 0};
        xb_literal(&x, &i0);
        vals v = {.n = 0};
        v_skip(&v);
        v_skip(&v);
        v_add(&v, zz(2));
        xb_blocks(&x, 0x80, false, &v);
        xb_byte(&x, 0);
        size_t n;
        uint8_t *got = bcenc_finish(e, &n);
        assert_bytes(got, n, x.p, x.n);
        free(got);
        bcenc_free(e);
        bson_destroy(a);
    }
    /* a long run of one value: RLE words of 120 repeats */
    {
        bson_t *a = bson_new();
        char k[16];
        for (int i = 0; i < 301; i++) {
            snprintf(k, sizeof k, "%d", i);
            BSON_APPEND_INT32(a, k, 5);
        }
        xbuf x = {.n = 0};
        bson_iter_t it = elem(a, "0");
        xb_literal(&x, &it);
        vals v = {.n = 0};
        for (int i = 0; i < 300; i++)
            v_add(&v, 0);
        xb_blocks(&x, 0x80, false, &v);
        xb_byte(&x, 0);
        ck_assert_uint_eq(x.n, 2 + 4 + 1 + 2 * 8 + 1); /* literal, control, RLE word, one word of 60 zeros */
        assert_column(a, &x);
        bson_destroy(a);
    }
    /* more than 16 words: a second control byte */
    {
        bson_t *a = bson_new();
        char k[16];
        int64_t val = 0;
        vals v = {.n = 0};
        for (int i = 0; i < 20; i++) {
            snprintf(k, sizeof k, "%d", i);
            BSON_APPEND_INT64(a, k, val);
            /* deltas of 40 bits that alternate in sign: one per word, never a run */
            val += (i % 2) ? -(INT64_C(1) << 40) : (INT64_C(1) << 40) + i;
        }
        v.n = 0;
        bson_iter_t it;
        bson_iter_init(&it, a);
        int64_t prev = 0;
        bool first = true;
        while (bson_iter_next(&it)) {
            if (!first)
                v_add(&v, zz(bson_iter_int64(&it) - prev));
            prev = bson_iter_int64(&it);
            first = false;
        }
        xbuf x = {.n = 0};
        it = elem(a, "0");
        xb_literal(&x, &it);
        xb_blocks(&x, 0x80, false, &v);
        xb_byte(&x, 0);
        ck_assert_uint_eq(x.p[10], 0x8F); /* 16 words under the first control byte */
        assert_column(a, &x);
        bson_destroy(a);
    }
}
END_TEST

/* ---- objects: interleaved mode */

START_TEST(test_interleaved_after_non_interleaved)
{
    /* bsoncolumn_test.cpp InterleavedAfterNonInterleaved */
    bson_t *a = BCON_NEW("0", BCON_INT32(1), "1", "{", "x", BCON_INT32(1), "y", BCON_INT32(2), "}", "2", "{", "x",
                         BCON_INT32(1), "y", BCON_INT32(3), "}", "3", "{", "x", BCON_INT32(2), "y", BCON_INT32(4), "}");
    xbuf x = {.n = 0};
    bson_iter_t it = elem(a, "0");
    xb_literal(&x, &it);
    xb_byte(&x, 0xF1);
    it = elem(a, "1");
    size_t rn;
    const uint8_t *ref = value_of(&it, &rn);
    xb_put(&x, ref, rn);
    vals v = {.n = 0};
    v_add(&v, 0);
    v_add(&v, 0);
    v_add(&v, zz(1));
    xb_blocks(&x, 0x80, false, &v);
    v.n = 0;
    v_add(&v, 0);
    v_add(&v, zz(1));
    v_add(&v, zz(1));
    xb_blocks(&x, 0x80, false, &v);
    xb_byte(&x, 0);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);
}
END_TEST

START_TEST(test_interleaved_missing_and_merged_fields)
{
    /* a field missing from a later object is a skip in its stream */
    bson_t *a = BCON_NEW("0", "{", "a", BCON_INT32(1), "b", BCON_INT32(1), "}", "1", "{", "a", BCON_INT32(2), "}", "2",
                         "{", "a", BCON_INT32(3), "b", BCON_INT32(3), "}");
    xbuf x = {.n = 0};
    xb_byte(&x, 0xF1);
    bson_iter_t it = elem(a, "0");
    size_t rn;
    const uint8_t *ref = value_of(&it, &rn);
    xb_put(&x, ref, rn);
    vals v = {.n = 0};
    v_add(&v, 0);
    v_add(&v, zz(1));
    v_add(&v, zz(1));
    xb_blocks(&x, 0x80, false, &v);
    v.n = 0;
    v_add(&v, 0);
    v_skip(&v);
    v_add(&v, zz(2));
    xb_blocks(&x, 0x80, false, &v);
    xb_byte(&x, 0);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);

    /* a new field is merged into the reference (mergeObj) while objects are buffered */
    a = BCON_NEW("0", "{", "a", BCON_INT32(1), "}", "1", "{", "a", BCON_INT32(2), "b", BCON_INT32(5), "}", "2", "{",
                 "a", BCON_INT32(3), "b", BCON_INT32(6), "}");
    bson_t *merged = BCON_NEW("a", BCON_INT32(1), "b", BCON_INT32(5));
    x.n = 0;
    xb_byte(&x, 0xF1);
    xb_put(&x, bson_get_data(merged), merged->len);
    v.n = 0;
    v_add(&v, 0);
    v_add(&v, zz(1));
    v_add(&v, zz(1));
    xb_blocks(&x, 0x80, false, &v);
    v.n = 0;
    v_skip(&v);
    v_add(&v, 0);
    v_add(&v, zz(1));
    xb_blocks(&x, 0x80, false, &v);
    xb_byte(&x, 0);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(merged);
    bson_destroy(a);

    /* a scalar after objects ends interleaved mode; the scalar is a literal */
    a = BCON_NEW("0", "{", "x", BCON_INT32(1), "}", "1", "{", "x", BCON_INT32(2), "}", "2", BCON_INT32(7));
    x.n = 0;
    xb_byte(&x, 0xF1);
    it = elem(a, "0");
    ref = value_of(&it, &rn);
    xb_put(&x, ref, rn);
    v.n = 0;
    v_add(&v, 0);
    v_add(&v, zz(1));
    xb_blocks(&x, 0x80, false, &v);
    xb_byte(&x, 0);
    it = elem(a, "2");
    xb_literal(&x, &it);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);

    /* arrays at the root: 0xF2 */
    a = BCON_NEW("0", "[", BCON_INT32(1), BCON_INT32(2), "]", "1", "[", BCON_INT32(1), BCON_INT32(3), "]");
    x.n = 0;
    xb_byte(&x, 0xF2);
    it = elem(a, "0");
    ref = value_of(&it, &rn);
    xb_put(&x, ref, rn);
    v.n = 0;
    v_add(&v, 0);
    v_add(&v, 0);
    xb_blocks(&x, 0x80, false, &v);
    v.n = 0;
    v_add(&v, 0);
    v_add(&v, zz(1));
    xb_blocks(&x, 0x80, false, &v);
    xb_byte(&x, 0);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);

    /* empty objects are plain literals (no scalars to interleave) */
    a = BCON_NEW("0", "{", "}", "1", "{", "}");
    x.n = 0;
    it = elem(a, "0");
    xb_literal(&x, &it);
    v.n = 0;
    v_add(&v, 0);
    xb_blocks(&x, 0x80, false, &v);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);
}
END_TEST

/* bsoncolumn_test.cpp Interleaved, InterleavedArray, InterleavedLevels, InterleavedArrayRootTypeChange and
 * InterleavedDoubleDifferentScale: the streams of the reference's leaves, in its order. */
static void xb_ref(xbuf *x, uint8_t start, const bson_t *doc, const char *key)
{
    bson_iter_t it = elem(doc, key);
    size_t rn;
    const uint8_t *ref = value_of(&it, &rn);
    xb_byte(x, start);
    xb_put(x, ref, rn);
}

static double dz(double v, double p, double mul)
{
    return (double)zz(llround(v * mul) - llround(p * mul));
}

START_TEST(test_interleaved_server_cases)
{
    /* Interleaved: a skipped object and a missing field */
    bcenc_t *e = bcenc_new();
    bson_t *a = BCON_NEW("0", "{", "x", BCON_INT32(1), "y", BCON_INT32(2), "}", "1", "{", "x", BCON_INT32(1), "y",
                         BCON_INT32(3), "}", "2", "{", "x", BCON_INT32(1), "y", BCON_INT32(3), "}", "4", "{", "y",
                         BCON_INT32(4), "}", "5", "{", "x", BCON_INT32(1), "y", BCON_INT32(3), "}");
    const char *order[] = {"0", "1", "2", NULL, "4", "5"};
    for (int i = 0; i < 6; i++) {
        if (!order[i]) {
            bcenc_skip(e);
            continue;
        }
        bson_iter_t it = elem(a, order[i]);
        bcenc_append_iter(e, &it);
    }
    xbuf x = {.n = 0};
    xb_ref(&x, 0xF1, a, "0");
    vals v = {.n = 0};
    v_add(&v, 0);
    v_add(&v, 0);
    v_add(&v, 0);
    v_skip(&v);
    v_skip(&v);
    v_add(&v, 0);
    xb_blocks(&x, 0x80, false, &v);
    v.n = 0;
    v_add(&v, 0);
    v_add(&v, zz(1));
    v_add(&v, 0);
    v_skip(&v);
    v_add(&v, zz(1));
    v_add(&v, zz(-1));
    xb_blocks(&x, 0x80, false, &v);
    xb_byte(&x, 0);
    xb_byte(&x, 0);
    size_t n;
    uint8_t *got = bcenc_finish(e, &n);
    assert_bytes(got, n, x.p, x.n);
    free(got);
    bcenc_free(e);
    bson_destroy(a);

    /* InterleavedArray: an array inside the objects, one stream per element */
    a = BCON_NEW("0", "{", "x", "[", BCON_INT32(1), BCON_INT32(2), "]", "}", "1", "{", "x", "[", BCON_INT32(2),
                 BCON_INT32(3), "]", "}");
    x.n = 0;
    xb_ref(&x, 0xF1, a, "0");
    v.n = 0;
    v_add(&v, 0);
    v_add(&v, zz(1));
    xb_blocks(&x, 0x80, false, &v);
    xb_blocks(&x, 0x80, false, &v);
    xb_byte(&x, 0);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);

    /* InterleavedLevels: a sub-object's leaves come where the reference holds them */
    a = BCON_NEW("0", "{", "root", "{", "x", BCON_INT32(1), "}", "y", BCON_INT32(2), "}", "1", "{", "root", "{", "x",
                 BCON_INT32(2), "}", "y", BCON_INT32(5), "}", "2", "{", "root", "{", "x", BCON_INT32(2), "}", "y",
                 BCON_INT32(5), "}");
    x.n = 0;
    xb_ref(&x, 0xF1, a, "0");
    v.n = 0;
    v_add(&v, 0);
    v_add(&v, zz(1));
    v_add(&v, 0);
    xb_blocks(&x, 0x80, false, &v);
    v.n = 0;
    v_add(&v, 0);
    v_add(&v, zz(3));
    v_add(&v, 0);
    xb_blocks(&x, 0x80, false, &v);
    xb_byte(&x, 0);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);

    /* InterleavedArrayRootTypeChange: an array root then an object root with the same fields: two sections */
    a = BCON_NEW("0", "[", BCON_INT32(1), BCON_INT32(2), "]", "1", "{", "0", BCON_INT32(2), "1", BCON_INT32(3), "}");
    x.n = 0;
    xb_ref(&x, 0xF2, a, "0");
    v.n = 0;
    v_add(&v, 0);
    xb_blocks(&x, 0x80, false, &v);
    xb_blocks(&x, 0x80, false, &v);
    xb_byte(&x, 0);
    xb_ref(&x, 0xF1, a, "1");
    xb_blocks(&x, 0x80, false, &v);
    xb_blocks(&x, 0x80, false, &v);
    xb_byte(&x, 0);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);

    /* InterleavedDoubleDifferentScale: each stream picks its own scale */
    a = BCON_NEW("0", "{", "x", BCON_DOUBLE(1.0), "y", BCON_DOUBLE(2.0), "}", "1", "{", "x", BCON_DOUBLE(1.1), "y",
                 BCON_DOUBLE(3.0), "}", "2", "{", "x", BCON_DOUBLE(1.2), "y", BCON_DOUBLE(2.0), "}", "3", "{", "x",
                 BCON_DOUBLE(1.0), "}", "4", "{", "x", BCON_DOUBLE(1.5), "y", BCON_DOUBLE(2.0), "}");
    x.n = 0;
    xb_ref(&x, 0xF1, a, "0");
    v.n = 0;
    v_add(&v, 0);
    v_add(&v, (uint64_t)dz(1.1, 1.0, 10));
    v_add(&v, (uint64_t)dz(1.2, 1.1, 10));
    v_add(&v, (uint64_t)dz(1.0, 1.2, 10));
    v_add(&v, (uint64_t)dz(1.5, 1.0, 10));
    xb_blocks(&x, 0xA0, false, &v);
    v.n = 0;
    v_add(&v, 0);
    v_add(&v, (uint64_t)dz(3.0, 2.0, 1));
    v_add(&v, (uint64_t)dz(2.0, 3.0, 1));
    v_skip(&v);
    v_add(&v, (uint64_t)dz(2.0, 2.0, 1));
    xb_blocks(&x, 0x90, false, &v);
    xb_byte(&x, 0);
    xb_byte(&x, 0);
    assert_column(a, &x);
    bson_destroy(a);
}
END_TEST

/* ---- appends: the 8.0 binary diff */

static void add_mixed(bcenc_t *e, int i, bson_t *keep)
{
    char k[16];
    snprintf(k, sizeof k, "%d", i);
    switch ((i / 37) % 6) {
    case 0:
        BSON_APPEND_INT32(keep, k, i % 5 == 0 ? 1000000 + i : i);
        break;
    case 1:
        BSON_APPEND_DOUBLE(keep, k, (i % 3) ? i * 0.5 : i * 0.001);
        break;
    case 2:
        if (i % 4 == 0) {
            bcenc_skip(e);
            return;
        }
        BSON_APPEND_DATE_TIME(keep, k, 1700000000000 + i * 1000);
        break;
    case 3: {
        char s[32];
        snprintf(s, sizeof s, "s%03d", i % 7);
        BSON_APPEND_UTF8(keep, k, s);
        break;
    }
    case 4: {
        bson_t child;
        BSON_APPEND_DOCUMENT_BEGIN(keep, k, &child);
        BSON_APPEND_INT32(&child, "a", i);
        if (i % 3)
            BSON_APPEND_DOUBLE(&child, "b", i * 0.25);
        bson_append_document_end(keep, &child);
        break;
    }
    default:
        BSON_APPEND_INT32(keep, k, 7);
        break;
    }
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, keep, k));
    bcenc_append_iter(e, &it);
}

START_TEST(test_append_diff_equals_reencode)
{
    bcenc_t *e = bcenc_new();
    bson_t keep = BSON_INITIALIZER;
    uint8_t *bin = NULL;
    size_t len = 0;
    size_t off, dn;
    uint8_t *d = bcenc_intermediate(e, &off, &dn); /* the empty column */
    ck_assert_uint_eq(off, 0);
    bin = apply_diff(bin, &len, off, d, dn);
    free(d);
    for (int i = 0; i < 400; i++) {
        add_mixed(e, i, &keep);
        if (i % 3 == 1)
            continue; /* sometimes several values between two diffs */
        d = bcenc_intermediate(e, &off, &dn);
        bin = apply_diff(bin, &len, off, d, dn);
        free(d);
        size_t n;
        uint8_t *whole = bcenc_finish(e, &n);
        assert_bytes(bin, len, whole, n);
        free(whole);
    }
    ck_assert_uint_eq(bcenc_count(e), 400);
    /* two diffs in a row with nothing appended: the second may repeat the tail (the server starts it at its open
     * control byte), but the binary stays the same */
    d = bcenc_intermediate(e, &off, &dn);
    bin = apply_diff(bin, &len, off, d, dn);
    free(d);
    size_t before = len;
    d = bcenc_intermediate(e, &off, &dn);
    ck_assert_uint_le(off, len);
    bin = apply_diff(bin, &len, off, d, dn);
    free(d);
    ck_assert_uint_eq(len, before);
    size_t wn;
    uint8_t *whole = bcenc_finish(e, &wn);
    assert_bytes(bin, len, whole, wn);
    free(whole);
    free(bin);
    bson_destroy(&keep);
    bcenc_free(e);
}
END_TEST

/* Random columns of every type, objects of shifting shapes (merges, missing fields, reordered fields that end a
 * section, nested and empty sub-objects) and skips: the encoder keeps its own invariants (it aborts when the streams
 * of a section do not match its reference; the sanitizer build checks memory), every binary ends with 0x00, and the
 * diffs applied one after the other rebuild it. */
static uint64_t rnd(uint64_t *st)
{
    *st = *st * 6364136223846793005ULL + 1442695040888963407ULL;
    return *st >> 33;
}

static void add_random(bcenc_t *e, bson_t *keep, int i, uint64_t *st)
{
    char k[16];
    snprintf(k, sizeof k, "%d", i);
    unsigned r = (unsigned)rnd(st);
    switch (r % 12) {
    case 0:
        bcenc_skip(e);
        return;
    case 1:
        BSON_APPEND_INT32(keep, k, (int32_t)(rnd(st) % 7));
        break;
    case 2:
        BSON_APPEND_DOUBLE(keep, k, (double)(rnd(st) % 1000) / (double)(1 + rnd(st) % 3 * 50));
        break;
    case 3:
        BSON_APPEND_BOOL(keep, k, rnd(st) % 2);
        break;
    case 4:
        BSON_APPEND_NULL(keep, k);
        break;
    case 5: {
        bson_oid_t o;
        uint8_t b[12] = {0x65,
                         0xa6,
                         0xeb,
                         (uint8_t)(rnd(st) % 3),
                         1,
                         2,
                         3,
                         4,
                         (uint8_t)(rnd(st) % 2),
                         0,
                         0,
                         (uint8_t)(rnd(st) % 256)};
        bson_oid_init_from_data(&o, b);
        BSON_APPEND_OID(keep, k, &o);
        break;
    }
    case 6: {
        char str[40];
        snprintf(str, sizeof str, rnd(st) % 4 ? "v%u" : "a much longer value than sixteen %u", (unsigned)(rnd(st) % 9));
        BSON_APPEND_UTF8(keep, k, str);
        break;
    }
    case 7: {
        bson_decimal128_t d;
        char str[16];
        snprintf(str, sizeof str, "%u.5", (unsigned)(rnd(st) % 50));
        bson_decimal128_from_string(str, &d);
        BSON_APPEND_DECIMAL128(keep, k, &d);
        break;
    }
    case 8:
        BSON_APPEND_TIMESTAMP(keep, k, 1000 + (uint32_t)(rnd(st) % 3), (uint32_t)(rnd(st) % 5));
        break;
    default: { /* an object: a few fields in one of two orders, some missing, sometimes nested or empty */
        bson_t child, sub;
        bool swap = rnd(st) % 8 == 0;
        BSON_APPEND_DOCUMENT_BEGIN(keep, k, &child);
        const char *names[] = {"a", "b", "c"};
        for (int f = 0; f < 3; f++) {
            const char *name = names[swap ? 2 - f : f];
            unsigned q = (unsigned)(rnd(st) % 6);
            if (q == 0)
                continue;
            if (q == 1) {
                BSON_APPEND_DOCUMENT_BEGIN(&child, name, &sub);
                if (rnd(st) % 3)
                    BSON_APPEND_INT64(&sub, "x", (int64_t)(rnd(st) % 100));
                bson_append_document_end(&child, &sub);
            } else if (q == 2) {
                BSON_APPEND_DOUBLE(&child, name, (double)(rnd(st) % 100) / 10.0);
            } else {
                BSON_APPEND_INT32(&child, name, (int32_t)(rnd(st) % 100));
            }
        }
        bson_append_document_end(keep, &child);
        break;
    }
    }
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, keep, k));
    bcenc_append_iter(e, &it);
}

START_TEST(test_random_columns_diffs)
{
    uint64_t st = 777;
    for (int round = 0; round < 25; round++) {
        bcenc_t *e = bcenc_new();
        bson_t keep = BSON_INITIALIZER;
        uint8_t *bin = NULL;
        size_t len = 0, off, dn;
        int n = 50 + (int)(rnd(&st) % 250);
        for (int i = 0; i < n; i++) {
            add_random(e, &keep, i, &st);
            if (rnd(&st) % 3 == 0 && i != n - 1)
                continue;
            uint8_t *d = bcenc_intermediate(e, &off, &dn);
            bin = apply_diff(bin, &len, off, d, dn);
            free(d);
        }
        size_t wn;
        uint8_t *whole = bcenc_finish(e, &wn);
        assert_bytes(bin, len, whole, wn);
        ck_assert_uint_eq(whole[wn - 1], 0);
        free(whole);
        free(bin);
        bson_destroy(&keep);
        bcenc_free(e);
    }
}
END_TEST

/* ---- a decoder written here for integer columns (literal Int64, 0x80 blocks) */

static const uint8_t kBits[4][16] = {{0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 20, 30, 60, 0},
                                     {0, 2, 3, 4, 5, 7, 10, 14, 24, 52, 0, 0, 0, 0, 0, 0},
                                     {0, 4, 5, 7, 10, 14, 24, 52, 0, 0, 0, 0, 0, 0, 0, 0},
                                     {0, 0, 0, 0, 0, 0, 0, 0, 4, 6, 9, 13, 23, 51, 0, 0}};
static const uint8_t kCount[4][16] = {{0, 60, 30, 20, 15, 12, 10, 8, 7, 6, 5, 4, 3, 2, 1, 0},
                                      {0, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0},
                                      {0, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0},
                                      {0, 0, 0, 0, 0, 0, 0, 0, 6, 5, 4, 3, 2, 1, 0, 0}};

typedef struct {
    bool has[8192];
    int64_t v[8192];
    size_t n;
} decoded;

static void emit(decoded *out, bool has, int64_t v)
{
    ck_assert_uint_lt(out->n, 8192);
    out->has[out->n] = has;
    out->v[out->n++] = v;
}

static void check_decode_int64(const uint8_t *p, size_t len, decoded *out)
{
    size_t i = 0;
    int64_t cur = 0;
    out->n = 0;
    while (i < len && p[i] != 0) {
        uint8_t c = p[i];
        if (c == BSON_TYPE_INT64) {
            memcpy(&cur, p + i + 2, 8);
            emit(out, true, cur);
            i += 10;
            continue;
        }
        ck_assert_int_eq(c & 0xF0, 0x80);
        int words = (c & 0x0F) + 1;
        bool last_has = true;
        uint64_t last = 0; /* an RLE at the start of a block repeats 0 */
        for (int w = 0; w < words; w++) {
            uint64_t word = 0;
            for (int b = 7; b >= 0; b--)
                word = (word << 8) | p[i + 1 + 8 * w + b];
            unsigned sel = word & 15, ext = (word >> 4) & 15;
            if (sel == 15) {
                for (unsigned r = 0; r < (ext + 1) * 120; r++) {
                    if (last_has)
                        cur += (int64_t)((last >> 1) ^ (~(last & 1) + 1));
                    emit(out, last_has, cur);
                }
                continue;
            }
            int t = 0, s = (int)sel, shift = 4;
            if (sel == 7 && ext) {
                t = 1;
                s = (int)ext;
                shift = 8;
            } else if (sel == 8 && ext) {
                t = ext >= 8 ? 3 : 2;
                s = (int)ext;
                shift = 8;
            } else if (sel == 7 || sel == 8) {
                shift = 8;
            }
            int tzb = t == 0 ? 0 : (t == 3 ? 5 : 4);
            int slot = kBits[t][s] + tzb;
            uint64_t mask = slot >= 64 ? ~0ULL : ((1ULL << slot) - 1);
            for (int k = 0; k < kCount[t][s]; k++) {
                uint64_t x = (word >> (shift + slot * k)) & mask;
                if (x == mask) {
                    last_has = false;
                    emit(out, false, 0);
                    continue;
                }
                uint64_t val = x;
                if (t) {
                    uint64_t tz = x & ((1ULL << tzb) - 1);
                    val = (x >> tzb) << (t == 1 ? tz : tz * 4);
                }
                last_has = true;
                last = val;
                cur += (int64_t)((val >> 1) ^ (~(val & 1) + 1));
                emit(out, true, cur);
            }
        }
        i += 1 + 8 * (size_t)words;
    }
    ck_assert_uint_eq(i + 1, len);
}

START_TEST(test_independent_reader)
{
    uint64_t seed = 12345;
    for (int round = 0; round < 40; round++) {
        bcenc_t *e = bcenc_new();
        static bool has[4000];
        static int64_t want[4000];
        size_t n = 200 + (size_t)round * 90;
        int64_t v = 0;
        bson_t *doc = bson_new();
        for (size_t i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            unsigned r = (unsigned)(seed >> 33);
            switch (r % 8) {
            case 0:
                has[i] = false;
                bcenc_skip(e);
                continue;
            case 1:
            case 2:
                break; /* a repeat */
            case 3:
                v += (int64_t)(r % 7) - 3;
                break;
            case 4:
                v += (int64_t)((r >> 3) % 1000) << (r % 30); /* trailing zeros: selectors 7 and 8 */
                break;
            case 5:
                v = (int64_t)(r % 3) * (INT64_C(1) << 61); /* too far: a literal */
                break;
            default:
                v += (int64_t)(r % 100000);
                break;
            }
            if (round % 5 == 0 && i > 10 && i < 600)
                v = 42; /* long runs */
            has[i] = true;
            want[i] = v;
            char k[16];
            snprintf(k, sizeof k, "%zu", i);
            BSON_APPEND_INT64(doc, k, v);
            bson_iter_t it;
            ck_assert(bson_iter_init_find(&it, doc, k));
            bcenc_append_iter(e, &it);
        }
        size_t len;
        uint8_t *bin = bcenc_finish(e, &len);
        static decoded out;
        check_decode_int64(bin, len, &out);
        ck_assert_uint_eq(out.n, n);
        for (size_t i = 0; i < n; i++) {
            ck_assert_int_eq(out.has[i], has[i]);
            if (has[i])
                ck_assert_int_eq(out.v[i], want[i]);
        }
        free(bin);
        bson_destroy(doc);
        bcenc_free(e);
    }
}
END_TEST

Suite *mongosim_bsoncolumn_suite(void)
{
    Suite *s = suite_create("mongosim_bsoncolumn");
    TCase *tc = tcase_create("server");
    tcase_add_test(tc, test_simple8b_server_words);
    tcase_add_test(tc, test_server_columns);
    suite_add_tcase(s, tc);
    tc = tcase_create("types");
    tcase_add_test(tc, test_int32_int64_deltas);
    tcase_add_test(tc, test_delta_of_delta_types);
    tcase_add_test(tc, test_bool_null_and_repeats);
    tcase_add_test(tc, test_strings_binaries_decimals);
    tcase_add_test(tc, test_double_scales);
    tcase_add_test(tc, test_double_server_cases);
    tcase_add_test(tc, test_skips_runs_and_control_bytes);
    suite_add_tcase(s, tc);
    tc = tcase_create("objects");
    tcase_add_test(tc, test_interleaved_after_non_interleaved);
    tcase_add_test(tc, test_interleaved_missing_and_merged_fields);
    tcase_add_test(tc, test_interleaved_server_cases);
    suite_add_tcase(s, tc);
    tc = tcase_create("append");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_append_diff_equals_reencode);
    tcase_add_test(tc, test_random_columns_diffs);
    tcase_add_test(tc, test_independent_reader);
    suite_add_tcase(s, tc);
    return s;
}

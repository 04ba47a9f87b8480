/*
 * test_bsoncolumn.c — unit tests for the BSONColumn decoder (map/bsoncolumn.h).
 *
 * Three kinds of checks:
 *   - real columns: tests/vectors/bsoncolumn/server_columns.txt holds columns copied from the server's own tests
 *     (sources in the file); each decodes to the values written next to it, and the buckets whose control min, max
 *     and count the server validates decode to exactly those;
 *   - layouts from the server's unit tests (bsoncolumn_test.cpp: the bytes it expects its encoder to write), rebuilt
 *     here, decoding to the elements those tests appended;
 *   - hand-built columns, one per feature of the format (every Simple-8b selector and extension, run-length blocks,
 *     skips, each type's delta encoding, double scales, interleaved objects and arrays), with the values worked out
 *     here from the format's rules (see the NOTES of src/map/bsoncolumn.c);
 *   - malformed columns: every truncation of valid columns, bad control bytes, bad selectors, counts past the end,
 *     and mutated bytes, each an error naming a byte offset (and never a crash: run under make SANITIZE=1 too).
 * Paths are relative to the repository root, where the tests run.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../mongosim/bsoncolumn_enc.h"
#include "map/bsoncolumn.h"

#define VEC "tests/vectors/bsoncolumn/"

/* ---- formatting a decoded position ---- */

static void fmt_double(char *out, size_t n, double d)
{
    if (d == (double)(long long)d && d > -1e15 && d < 1e15 && !(d == 0 && signbit(d))) {
        snprintf(out, n, "%lld", (long long)d);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, n, "%.*g", prec, d);
        if (strtod(out, NULL) == d)
            return;
    }
}

static void fmt_value(char *out, size_t n, const bcol_elem *e)
{
    if (e->missing) {
        snprintf(out, n, "-");
        return;
    }
    const bson_value_t *v = &e->value;
    char tmp[64];
    switch (v->value_type) {
    case BSON_TYPE_DOUBLE:
        fmt_double(tmp, sizeof tmp, v->value.v_double);
        snprintf(out, n, "dbl:%s", tmp);
        break;
    case BSON_TYPE_INT32:
        snprintf(out, n, "i32:%d", v->value.v_int32);
        break;
    case BSON_TYPE_INT64:
        snprintf(out, n, "i64:%lld", (long long)v->value.v_int64);
        break;
    case BSON_TYPE_UTF8:
        snprintf(out, n, "str:%.*s", (int)v->value.v_utf8.len, v->value.v_utf8.str);
        break;
    case BSON_TYPE_CODE:
        snprintf(out, n, "code:%.*s", (int)v->value.v_code.code_len, v->value.v_code.code);
        break;
    case BSON_TYPE_BOOL:
        snprintf(out, n, "bool:%s", v->value.v_bool ? "true" : "false");
        break;
    case BSON_TYPE_NULL:
        snprintf(out, n, "null");
        break;
    case BSON_TYPE_OID: {
        char hex[25];
        bson_oid_to_string(&v->value.v_oid, hex);
        snprintf(out, n, "oid:%s", hex);
        break;
    }
    case BSON_TYPE_DATE_TIME: {
        int64_t ms = v->value.v_datetime;
        int64_t s = ms >= 0 ? ms / 1000 : -((-ms + 999) / 1000);
        time_t t = (time_t)s;
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(tmp, sizeof tmp, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(out, n, "date:%s.%03dZ", tmp, (int)(ms - s * 1000));
        break;
    }
    case BSON_TYPE_TIMESTAMP:
        snprintf(out, n, "ts:%u,%u", v->value.v_timestamp.timestamp, v->value.v_timestamp.increment);
        break;
    case BSON_TYPE_DECIMAL128: {
        char dec[BSON_DECIMAL128_STRING];
        bson_decimal128_to_string(&v->value.v_decimal128, dec);
        snprintf(out, n, "dec:%s", dec);
        break;
    }
    case BSON_TYPE_BINARY: {
        int k = snprintf(out, n, "bin%d:", (int)v->value.v_binary.subtype);
        for (uint32_t i = 0; i < v->value.v_binary.data_len && (size_t)k + 3 < n; i++)
            k += snprintf(out + k, n - (size_t)k, "%02x", v->value.v_binary.data[i]);
        break;
    }
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY: {
        bson_t b;
        ck_assert(bson_init_static(&b, v->value.v_doc.data, v->value.v_doc.data_len));
        size_t eoff;
        ck_assert_msg(bson_validate(&b, BSON_VALIDATE_NONE, &eoff), "decoded object is not valid BSON");
        /* an array shows its keys ("0", "1", ...): libbson 1.23 has no array form of relaxed JSON */
        char *j = bson_as_relaxed_extended_json(&b, NULL);
        snprintf(out, n, "%s%s", v->value_type == BSON_TYPE_ARRAY ? "arr:" : "obj:", j);
        bson_free(j);
        break;
    }
    case BSON_TYPE_MINKEY:
        snprintf(out, n, "minkey");
        break;
    case BSON_TYPE_MAXKEY:
        snprintf(out, n, "maxkey");
        break;
    case BSON_TYPE_UNDEFINED:
        snprintf(out, n, "undefined");
        break;
    default:
        snprintf(out, n, "type0x%02x", (unsigned)v->value_type);
        break;
    }
}

/* Decodes a whole column into "v1 | v2 | ..." or "ERROR: message". */
static char *decode_all(const uint8_t *data, size_t len)
{
    size_t cap = 4096, used = 0;
    char *s = malloc(cap);
    ck_assert_ptr_nonnull(s);
    s[0] = 0;
    bcol_decoder *d = bcol_decoder_new(data, len);
    ck_assert_ptr_nonnull(d);
    bcol_elem e;
    char err[BCOL_ERR_MAX];
    bcol_status st;
    char one[1024];
    while ((st = bcol_decoder_next(d, &e, err, sizeof err)) == BCOL_VALUE) {
        fmt_value(one, sizeof one, &e);
        size_t l = strlen(one);
        if (used + l + 4 >= cap) {
            cap = cap * 2 + l;
            s = realloc(s, cap);
            ck_assert_ptr_nonnull(s);
        }
        if (used) {
            memcpy(s + used, " | ", 3);
            used += 3;
        }
        memcpy(s + used, one, l + 1);
        used += l;
    }
    if (st == BCOL_ERROR) {
        size_t l = strlen(err) + 8;
        char *r = malloc(l);
        ck_assert_ptr_nonnull(r);
        snprintf(r, l, "ERROR: %s", err);
        free(s);
        s = r;
    }
    /* the status sticks */
    ck_assert_int_eq(bcol_decoder_next(d, &e, NULL, 0), st);
    bcol_decoder_destroy(d);
    return s;
}

/* ---- building columns ---- */

typedef struct {
    uint8_t b[8192];
    size_t n;
} col;

static void put(col *c, const void *p, size_t n)
{
    ck_assert(c->n + n <= sizeof c->b);
    memcpy(c->b + c->n, p, n);
    c->n += n;
}

static void byte(col *c, uint8_t v)
{
    put(c, &v, 1);
}

static void le64(col *c, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        byte(c, (uint8_t)(v >> (8 * i)));
}

static void le32(col *c, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        byte(c, (uint8_t)(v >> (8 * i)));
}

/* A literal: type, empty field name, value. */
static void lit_i32(col *c, int32_t v)
{
    byte(c, 0x10);
    byte(c, 0);
    le32(c, (uint32_t)v);
}

static void lit_i64(col *c, int64_t v)
{
    byte(c, 0x12);
    byte(c, 0);
    le64(c, (uint64_t)v);
}

static void lit_dbl(col *c, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, 8);
    byte(c, 0x01);
    byte(c, 0);
    le64(c, bits);
}

static void lit_date(col *c, int64_t ms)
{
    byte(c, 0x09);
    byte(c, 0);
    le64(c, (uint64_t)ms);
}

static void lit_str(col *c, const char *s)
{
    byte(c, 0x02);
    byte(c, 0);
    le32(c, (uint32_t)strlen(s) + 1);
    put(c, s, strlen(s) + 1);
}

/* A BSON document as an element value (JSON in, bytes out). */
static void put_doc_json(col *c, const char *json)
{
    bson_error_t e;
    bson_t *b = bson_new_from_json((const uint8_t *)json, -1, &e);
    ck_assert_msg(b != NULL, "bad test JSON %s: %s", json, e.message);
    put(c, bson_get_data(b), b->len);
    bson_destroy(b);
}

/* Zigzag (the sign in the lowest bit). */
static uint64_t zz(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

/* A Simple-8b block of base selector sel (1..14; 7 and 8 with extension 0) holding the slots given, already
 * zigzagged (UINT64_MAX: missing, the slot's bits all set). Slots not given stay 0 (zero deltas). */
static uint64_t block(unsigned sel, const uint64_t *slots, unsigned nslots)
{
    static const unsigned bits[15] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 20, 30, 60};
    unsigned w = bits[sel];
    unsigned start = (sel == 7 || sel == 8) ? 8 : 4;
    uint64_t mask = w == 64 ? UINT64_MAX : (UINT64_C(1) << w) - 1;
    uint64_t b = sel;
    for (unsigned i = 0; i < nslots; i++) {
        uint64_t s = slots[i] == UINT64_MAX ? mask : slots[i];
        ck_assert_msg(s <= mask, "slot %u does not fit %u bits", i, w);
        b |= s << (start + i * w);
    }
    return b;
}

/* An extended selector 7 or 8 block: each slot value (already zigzagged) and its trailing-zero count. */
static uint64_t block_ext(unsigned sel, unsigned ext, const uint64_t *vals, const unsigned *counts, unsigned nslots)
{
    static const unsigned b7[10] = {0, 2, 3, 4, 5, 7, 10, 14, 24, 52};
    static const unsigned b8[14] = {0, 4, 5, 7, 10, 14, 24, 52, 4, 6, 9, 13, 23, 51};
    unsigned vb = sel == 7 ? b7[ext] : b8[ext];
    unsigned cb = (sel == 8 && ext >= 8) ? 5 : 4;
    uint64_t b = sel | (uint64_t)ext << 4;
    for (unsigned i = 0; i < nslots; i++) {
        uint64_t slot;
        if (vals[i] == UINT64_MAX)
            slot = (UINT64_C(1) << (vb + cb)) - 1;
        else {
            ck_assert(vals[i] < (UINT64_C(1) << vb));
            ck_assert(counts[i] < (1u << cb));
            slot = vals[i] << cb | counts[i];
        }
        b |= slot << (8 + i * (vb + cb));
    }
    return b;
}

static void check_col(const col *c, const char *want)
{
    char *got = decode_all(c->b, c->n);
    /* (messages cut: Check refuses very long ones) */
    ck_assert_msg(strcmp(got, want) == 0, "decoded\n  %.1500s\nwanted\n  %.1500s", got, want);
    free(got);
}

static void check_error(const col *c, const char *fragment)
{
    char *got = decode_all(c->b, c->n);
    ck_assert_msg(strncmp(got, "ERROR: BSONColumn byte ", 23) == 0, "decoded %s, wanted an error", got);
    ck_assert_msg(strstr(got, fragment) != NULL, "error %s does not say %s", got, fragment);
    free(got);
}

/* ---- real columns ---- */

static size_t unbase64(const char *in, uint8_t *out, size_t cap)
{
    static const char *t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = 0;
    unsigned acc = 0;
    int bits = 0;
    for (; *in && *in != '='; in++) {
        const char *p = strchr(t, *in);
        ck_assert_msg(p != NULL && *in, "bad base64 %s", in);
        acc = (acc << 6 | (unsigned)(p - t)) & 0xFFFFFF;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            ck_assert(n < cap);
            out[n++] = (uint8_t)(acc >> bits);
        }
    }
    return n;
}

/* "a | b *3 | c" → "a | b | b | b | c" */
static char *expand(const char *want)
{
    size_t cap = strlen(want) + 1, used = 0;
    char *out = malloc(cap);
    ck_assert_ptr_nonnull(out);
    out[0] = 0;
    char *copy = strdup(want), *save = NULL;
    for (char *item = strtok_r(copy, "|", &save); item; item = strtok_r(NULL, "|", &save)) {
        while (*item == ' ')
            item++;
        size_t l = strlen(item);
        while (l && item[l - 1] == ' ')
            item[--l] = 0;
        long times = 1;
        char *star = strstr(item, " *");
        if (star) {
            times = strtol(star + 2, NULL, 10);
            *star = 0;
            l = strlen(item);
        }
        for (long k = 0; k < times; k++) {
            if (used + l + 4 > cap) {
                cap = (cap + l + 4) * 2;
                out = realloc(out, cap);
                ck_assert_ptr_nonnull(out);
            }
            if (used) {
                memcpy(out + used, " | ", 3);
                used += 3;
            }
            memcpy(out + used, item, l + 1);
            used += l;
        }
    }
    free(copy);
    return out;
}

START_TEST(server_columns)
{
    FILE *f = fopen(VEC "server_columns.txt", "r");
    ck_assert_msg(f != NULL, "cannot open " VEC "server_columns.txt");
    char line[8192];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        line[strcspn(line, "\n")] = 0;
        char *name = strtok(line, "\t"), *b64 = strtok(NULL, "\t"), *want = strtok(NULL, "\t");
        ck_assert_msg(name && b64 && want, "bad vector line");
        uint8_t buf[4096];
        size_t len = unbase64(b64, buf, sizeof buf);
        char *got = decode_all(buf, len);
        if (strcmp(want, "ERROR") == 0) {
            ck_assert_msg(strncmp(got, "ERROR: BSONColumn byte ", 23) == 0, "%s: decoded %s, wanted an error", name,
                          got);
        } else {
            char *w = expand(want);
            ck_assert_msg(strcmp(got, w) == 0, "%s: decoded\n  %.1500s\nwanted\n  %.1500s", name, got, w);
            free(w);
            size_t count = 0;
            char err[BCOL_ERR_MAX];
            ck_assert_msg(bcol_count(buf, len, &count, err, sizeof err), "%s: %s", name, err);
            size_t items = 1;
            for (const char *p = got; (p = strstr(p, " | ")) != NULL; p += 3)
                items++;
            ck_assert_uint_eq(count, items);
        }
        free(got);
        n++;
    }
    fclose(f);
    ck_assert_int_ge(n, 20);
}
END_TEST

/* Decodes one column of the server's validated sample bucket and checks its count, min and max against the
 * bucket's control (the numbers in the vector file's notes: the server's validate checks data against control). */
static void minmax_double(const char *b64, double min, double max, size_t count)
{
    uint8_t buf[256];
    size_t len = unbase64(b64, buf, sizeof buf);
    bcol_decoder *d = bcol_decoder_new(buf, len);
    ck_assert_ptr_nonnull(d);
    bcol_elem e;
    double lo = INFINITY, hi = -INFINITY;
    size_t n = 0;
    while (bcol_decoder_next(d, &e, NULL, 0) == BCOL_VALUE) {
        ck_assert(!e.missing);
        ck_assert_int_eq(e.value.value_type, BSON_TYPE_DOUBLE);
        lo = fmin(lo, e.value.value.v_double);
        hi = fmax(hi, e.value.value.v_double);
        n++;
    }
    bcol_decoder_destroy(d);
    ck_assert_uint_eq(n, count);
    ck_assert(lo == min);
    ck_assert(hi == max);
}

START_TEST(server_bucket_control)
{
    /* getSampleDoc: control.count 5, close in [252.47, 254.03], volume in [27890, 55046] */
    minmax_double("AQApXI/C9cBvQLD7BBgAHAK2AAA=", 252.47, 254.03, 5);
    minmax_double("AQAAAAAAwKnjQJB7C0YAo3jwqwA=", 27890, 55046, 5);
}
END_TEST

/* ---- hand-built columns: one per feature ---- */

static int64_t unzz(uint64_t v)
{
    return (int64_t)((v >> 1) ^ (0 - (v & 1)));
}

/* Appends "i64:v" (or "-") for each slot to want, from base *v: the expected values of a delta run. */
static void want_deltas(char *want, size_t cap, int64_t *v, const uint64_t *zslots, const bool *missing, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        size_t l = strlen(want);
        if (missing[i]) {
            snprintf(want + l, cap - l, " | -");
        } else {
            *v = (int64_t)((uint64_t)*v + (uint64_t)unzz(zslots[i]));
            snprintf(want + l, cap - l, " | i64:%lld", (long long)*v);
        }
    }
}

START_TEST(empty_column)
{
    col c = {.n = 0};
    byte(&c, 0x00);
    check_col(&c, "");
    size_t n = 99;
    ck_assert(bcol_count(c.b, c.n, &n, NULL, 0));
    ck_assert_uint_eq(n, 0);

    col z = {.n = 0};
    check_error(&z, "empty column");
}
END_TEST

/* Every base selector 1..14 (7 and 8 with extension 0), full of the largest and smallest deltas its slots hold, and
 * a missing slot: selector s packs 60/bits (56/bits for 7 and 8) slots (simple8b_helpers.h). */
START_TEST(base_selectors)
{
    static const unsigned bits[15] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 20, 30, 60};
    for (unsigned sel = 1; sel <= 14; sel++) {
        unsigned w = bits[sel];
        unsigned n = (sel == 7 || sel == 8) ? 56 / w : 60 / w;
        uint64_t mask = (w == 64) ? UINT64_MAX : (UINT64_C(1) << w) - 1;
        uint64_t slots[60];
        bool missing[60];
        for (unsigned i = 0; i < n; i++) {
            missing[i] = i % 5 == 3;
            if (missing[i])
                slots[i] = UINT64_MAX;
            else if (w == 1)
                slots[i] = 0;
            else
                slots[i] = (i % 2) ? mask - 2 : mask - 1 - (i % 3); /* largest negative, positive, ... */
        }
        col c = {.n = 0};
        lit_i64(&c, 1000);
        byte(&c, 0x80);
        le64(&c, block(sel, slots, n));
        byte(&c, 0x00);
        char want[8192] = "i64:1000";
        int64_t v = 1000;
        want_deltas(want, sizeof want, &v, slots, missing, n);
        check_col(&c, want);
    }
}
END_TEST

/* Selector 7 with extensions 1..9 (a 4-bit count of trailing zeros) and 8 with 1..13 (a 4- or 5-bit count of
 * nibbles): each slot is value << zeros before the zigzag is undone (simple8b_helpers.h, simple8b.inl). */
START_TEST(extended_selectors)
{
    static const unsigned b7[10] = {0, 2, 3, 4, 5, 7, 10, 14, 24, 52};
    static const unsigned b8[14] = {0, 4, 5, 7, 10, 14, 24, 52, 4, 6, 9, 13, 23, 51};
    for (unsigned sel = 7; sel <= 8; sel++) {
        for (unsigned ext = 1; ext <= (sel == 7 ? 9u : 13u); ext++) {
            unsigned vb = sel == 7 ? b7[ext] : b8[ext];
            unsigned cb = (sel == 8 && ext >= 8) ? 5 : 4;
            unsigned scale = sel == 7 ? 1 : 4;
            unsigned n = 56 / (vb + cb);
            uint64_t vals[28], zslots[28];
            unsigned counts[28];
            bool missing[28];
            for (unsigned i = 0; i < n; i++) {
                missing[i] = i == 1;
                uint64_t vmax = (UINT64_C(1) << vb) - 1;
                vals[i] = missing[i] ? UINT64_MAX : (i % 2 ? vmax : 1 + i % 3);
                /* a zero count for odd values (negative deltas), else a shift that stays under 64 bits */
                unsigned maxc = (63 - vb) / scale;
                if (maxc > (1u << cb) - 1)
                    maxc = (1u << cb) - 1;
                counts[i] = (vals[i] & 1) ? 0 : (i * 7) % (maxc + 1);
                if (vals[i] == vmax && counts[i] == (1u << cb) - 1)
                    counts[i]--; /* all ones would read as missing */
                zslots[i] = missing[i] ? 0 : vals[i] << (counts[i] * scale);
            }
            col c = {.n = 0};
            lit_i64(&c, -5);
            byte(&c, 0x80);
            le64(&c, block_ext(sel, ext, vals, counts, n));
            byte(&c, 0x00);
            char want[4096] = "i64:-5";
            int64_t v = -5;
            want_deltas(want, sizeof want, &v, zslots, missing, n);
            check_col(&c, want);
        }
    }
}
END_TEST

static void want_repeat(char *want, size_t cap, const char *item, unsigned times)
{
    for (unsigned i = 0; i < times; i++) {
        size_t l = strlen(want);
        snprintf(want + l, cap - l, "%s%s", l ? " | " : "", item);
    }
}

/* Selector 15 repeats the previous block's last slot (extension + 1) * 120 times; right after a literal it repeats
 * 0; it carries over from the stream's previous run of blocks; a missing slot repeats as missing. */
START_TEST(run_length)
{
    char want[65536];
    /* literal 5, +2, then 120 more +2 */
    col c = {.n = 0};
    lit_i32(&c, 5);
    byte(&c, 0x81);
    uint64_t two = zz(2);
    le64(&c, block(14, &two, 1));
    le64(&c, 0x0F);
    byte(&c, 0x00);
    want[0] = 0;
    for (int v = 5; v <= 5 + 2 * 121; v += 2) {
        char one[32];
        snprintf(one, sizeof one, "i32:%d", v);
        want_repeat(want, sizeof want, one, 1);
    }
    check_col(&c, want);

    /* the first block of a run after a literal: zero deltas, 16 * 120 of them */
    col r = {.n = 0};
    lit_i32(&r, 7);
    byte(&r, 0x80);
    le64(&r, 0xFF);
    byte(&r, 0x00);
    want[0] = 0;
    want_repeat(want, sizeof want, "i32:7", 1 + 1920);
    check_col(&r, want);

    /* a missing slot repeated, then the run goes on in a second control byte with the last slot carried over */
    col m = {.n = 0};
    lit_i32(&m, 1);
    byte(&m, 0x81);
    uint64_t miss = UINT64_MAX;
    le64(&m, block(14, &miss, 1));
    le64(&m, 0x0F);
    byte(&m, 0x80);
    uint64_t one = zz(1);
    le64(&m, block(14, &one, 1));
    byte(&m, 0x80);
    le64(&m, 0x1F); /* 240 repeats of +1 */
    byte(&m, 0x00);
    want[0] = 0;
    want_repeat(want, sizeof want, "i32:1", 1);
    want_repeat(want, sizeof want, "-", 121);
    for (int v = 2; v <= 2 + 240; v++) {
        char s[32];
        snprintf(s, sizeof s, "i32:%d", v);
        want_repeat(want, sizeof want, s, 1);
    }
    check_col(&m, want);
    size_t n;
    ck_assert(bcol_count(m.b, m.n, &n, NULL, 0));
    ck_assert_uint_eq(n, 1 + 121 + 241);
}
END_TEST

/* Missing positions before the first literal (deltas with nothing to apply to are missing too) and at the end. */
START_TEST(skips_first_and_last)
{
    col c = {.n = 0};
    byte(&c, 0x80);
    uint64_t s[3] = {UINT64_MAX, zz(4), UINT64_MAX};
    le64(&c, block(12, s, 3));
    lit_i32(&c, 9);
    byte(&c, 0x80);
    uint64_t t[2] = {zz(-1), UINT64_MAX};
    le64(&c, block(13, t, 2));
    byte(&c, 0x00);
    check_col(&c, "- | - | - | i32:9 | i32:8 | -");
}
END_TEST

static void le_dbl_lit_run(col *c, double lit, uint8_t control, int64_t delta)
{
    lit_dbl(c, lit);
    byte(c, control);
    uint64_t d = zz(delta);
    le64(c, block(14, &d, 1));
}

/* Double deltas at each scale: 0x9.. x1, 0xA.. x10, 0xB.. x100, 0xC.. x10^4, 0xD.. x10^8, 0x8.. the bits as an
 * integer; a new control byte re-scales the previous value, which must fit (simple8b_type_util.cpp). */
START_TEST(double_scales)
{
    col c = {.n = 0};
    le_dbl_lit_run(&c, 3, 0x90, -5);
    byte(&c, 0x00);
    check_col(&c, "dbl:3 | dbl:-2");

    c.n = 0;
    le_dbl_lit_run(&c, 1.5, 0xA0, 5);
    byte(&c, 0x90); /* 2.0 fits scale 1 */
    uint64_t d = zz(3);
    le64(&c, block(14, &d, 1));
    byte(&c, 0x00);
    check_col(&c, "dbl:1.5 | dbl:2 | dbl:5");

    c.n = 0;
    le_dbl_lit_run(&c, 252.47, 0xB0, -47);
    byte(&c, 0x00);
    check_col(&c, "dbl:252.47 | dbl:252");

    c.n = 0;
    le_dbl_lit_run(&c, 0.0001, 0xC0, 1);
    byte(&c, 0x00);
    check_col(&c, "dbl:0.0001 | dbl:0.0002");

    c.n = 0;
    le_dbl_lit_run(&c, 0.5, 0xD0, 1);
    byte(&c, 0x00);
    check_col(&c, "dbl:0.5 | dbl:0.50000001");

    c.n = 0;
    le_dbl_lit_run(&c, 1.0, 0x80, 1); /* the next double up */
    byte(&c, 0x00);
    check_col(&c, "dbl:1 | dbl:1.0000000000000002");

    /* 1.6 does not fit scale 1 */
    c.n = 0;
    le_dbl_lit_run(&c, 1.5, 0xA0, 1);
    byte(&c, 0x90);
    le64(&c, block(14, &d, 1));
    byte(&c, 0x00);
    check_error(&c, "does not fit its scale");
    char *got = decode_all(c.b, c.n);
    ck_assert_msg(strstr(got, "byte 19:") != NULL, "%s", got); /* 10 literal + 1 control + 8 block */
    free(got);

    /* a scale for an integer */
    c.n = 0;
    lit_i32(&c, 1);
    byte(&c, 0x90);
    le64(&c, block(14, &d, 1));
    byte(&c, 0x00);
    check_error(&c, "double scale for type 0x10");
}
END_TEST

/* Dates, timestamps and ObjectIds take deltas of deltas; an ObjectId's counter and time bytes interleave from the
 * least significant byte (C2 T3 C1 T2 C0 T1 T0), its 5 middle bytes are the literal's (simple8b_type_util.cpp). */
START_TEST(delta_of_delta)
{
    col c = {.n = 0};
    lit_date(&c, 1000);
    byte(&c, 0x80);
    uint64_t s[3] = {zz(10), zz(0), zz(-5)};
    le64(&c, block(12, s, 3));
    byte(&c, 0x00);
    check_col(&c, "date:1970-01-01T00:00:01.000Z | date:1970-01-01T00:00:01.010Z | date:1970-01-01T00:00:01.020Z | "
                  "date:1970-01-01T00:00:01.025Z");

    c.n = 0;
    byte(&c, 0x11);
    byte(&c, 0);
    le64(&c, (UINT64_C(100) << 32) | 1);
    byte(&c, 0x80);
    uint64_t t[2] = {zz(1), zz(0)};
    le64(&c, block(13, t, 2));
    byte(&c, 0x00);
    check_col(&c, "ts:100,1 | ts:100,2 | ts:100,3");

    c.n = 0;
    static const uint8_t oid[12] = {0x65, 0xa6, 0xeb, 0xa7, 0xe6, 0xd2, 0xe8, 0x48, 0xe0, 0x8c, 0x37, 0x50};
    byte(&c, 0x07);
    byte(&c, 0);
    put(&c, oid, 12);
    byte(&c, 0x80);
    uint64_t o[3] = {zz(1), zz(256 - 1), zz(-256)};
    le64(&c, block(12, o, 3));
    byte(&c, 0x00);
    /* +1: counter +1; then +256: the time's low byte +1; then +0 */
    check_col(&c, "oid:65a6eba7e6d2e848e08c3750 | oid:65a6eba7e6d2e848e08c3751 | oid:65a6eba8e6d2e848e08c3751 | "
                  "oid:65a6eba8e6d2e848e08c3751");
}
END_TEST

/* Integers wrap as the server's do; booleans are 0 or 1. */
START_TEST(integers_and_booleans)
{
    col c = {.n = 0};
    lit_i32(&c, INT32_MAX);
    byte(&c, 0x80);
    uint64_t s[2] = {zz(1), zz(-1)};
    le64(&c, block(13, s, 2));
    byte(&c, 0x00);
    check_col(&c, "i32:2147483647 | i32:-2147483648 | i32:2147483647");

    c.n = 0;
    lit_i64(&c, INT64_MAX);
    byte(&c, 0x80);
    le64(&c, block(13, s, 2));
    byte(&c, 0x00);
    check_col(&c, "i64:9223372036854775807 | i64:-9223372036854775808 | i64:9223372036854775807");

    c.n = 0;
    byte(&c, 0x08);
    byte(&c, 0);
    byte(&c, 0);
    byte(&c, 0x80);
    uint64_t b[3] = {zz(1), zz(0), zz(-1)};
    le64(&c, block(12, b, 3));
    byte(&c, 0x00);
    check_col(&c, "bool:false | bool:true | bool:true | bool:false");
}
END_TEST

/* Strings (reversed into a little-endian 128-bit integer), binary data (as is) and decimal128 take 128-bit deltas,
 * selector 8's 5-bit counts reaching past 64 bits (simple8b_type_util.cpp). */
START_TEST(deltas_128)
{
    col c = {.n = 0};
    lit_str(&c, "a");
    byte(&c, 0x80);
    uint64_t s[3] = {zz(1), zz(0x6100), zz(-0x6162 + 0x63)};
    le64(&c, block(12, s, 3));
    byte(&c, 0x00);
    /* "a" = 0x61; +1 = "b"; + 0x6100 = bytes 62 61 = "ab" reversed; then 0x63 = "c" */
    check_col(&c, "str:a | str:b | str:ab | str:c");

    c.n = 0;
    byte(&c, 0x05);
    byte(&c, 0);
    le32(&c, 3);
    byte(&c, 0x80); /* subtype 128 */
    byte(&c, 1);
    byte(&c, 2);
    byte(&c, 3);
    byte(&c, 0x80);
    uint64_t bd[2] = {zz(1), zz(0x10000)};
    le64(&c, block(13, bd, 2));
    byte(&c, 0x00);
    check_col(&c, "bin128:010203 | bin128:020203 | bin128:020204");

    /* decimal128 1 (coefficient 1, exponent 0: high word 0x3040...), then + 2^49 in the zigzag (a count of 12
     * nibbles on the value 4): the exponent goes up by one */
    c.n = 0;
    byte(&c, 0x13);
    byte(&c, 0);
    le64(&c, 1);
    le64(&c, UINT64_C(0x3040000000000000));
    byte(&c, 0x80);
    uint64_t vals[6] = {4, 0, 0, 0, 0, UINT64_MAX};
    unsigned counts[6] = {28, 0, 0, 0, 0, 0};
    le64(&c, block_ext(8, 8, vals, counts, 6));
    byte(&c, 0x00);
    check_col(&c, "dec:1 | dec:1E+1 | dec:1E+1 | dec:1E+1 | dec:1E+1 | dec:1E+1 | -");
}
END_TEST

/* Types without a numeric encoding repeat on zero deltas and refuse any other; MinKey and MaxKey are literals. */
START_TEST(zero_delta_types)
{
    col c = {.n = 0};
    byte(&c, 0x0A);
    byte(&c, 0);
    byte(&c, 0x80);
    uint64_t z[2] = {0, UINT64_MAX};
    le64(&c, block(13, z, 2));
    byte(&c, 0x03);
    byte(&c, 0);
    put_doc_json(&c, "{\"a\": 1}");
    byte(&c, 0x80);
    le64(&c, block(14, z, 1));
    byte(&c, 0xFF);
    byte(&c, 0);
    byte(&c, 0x7F);
    byte(&c, 0);
    byte(&c, 0x06);
    byte(&c, 0);
    byte(&c, 0x00);
    check_col(&c, "null | null | - | obj:{ \"a\" : 1 } | obj:{ \"a\" : 1 } | minkey | maxkey | undefined");

    c.n = 0;
    byte(&c, 0x0A);
    byte(&c, 0);
    byte(&c, 0x80);
    uint64_t one = zz(1);
    le64(&c, block(14, &one, 1));
    byte(&c, 0x00);
    check_error(&c, "byte 3: non-zero delta for a value of type 0x0a"); /* the block's offset */
}
END_TEST

/* A reference object then its streams' control bytes, in the order the objects need them. */
static void ref(col *c, uint8_t control, const char *json)
{
    byte(c, control);
    put_doc_json(c, json);
}

/* Interleaved objects: one stream per leaf, a missing leaf left out, an emptied sub-object left out, an object with
 * nothing in it a missing position, a 0x00 where the first leaf needs a control byte back to regular mode. */
START_TEST(interleaved_objects)
{
    col c = {.n = 0};
    ref(&c, 0xF0, "{\"x\": {\"$numberInt\": \"1\"}, \"y\": {\"z\": {\"$numberInt\": \"10\"}}}");
    byte(&c, 0x80); /* x: +0, +1, missing, missing */
    uint64_t x[4] = {zz(0), zz(1), UINT64_MAX, UINT64_MAX};
    le64(&c, block(11, x, 4));
    byte(&c, 0x80); /* z: +5, missing, +1, missing */
    uint64_t z[4] = {zz(5), UINT64_MAX, zz(1), UINT64_MAX};
    le64(&c, block(11, z, 4));
    byte(&c, 0x00); /* end of interleaved mode */
    byte(&c, 0x80); /* regular mode: the last position (missing) repeats */
    uint64_t zero = 0;
    le64(&c, block(14, &zero, 1));
    lit_i32(&c, 3);
    byte(&c, 0x00);
    check_col(&c,
              "obj:{ \"x\" : 1, \"y\" : { \"z\" : 15 } } | obj:{ \"x\" : 2 } | obj:{ \"y\" : { \"z\" : 16 } } | - | "
              "- | i32:3");

    /* a field the first objects lack and later ones have (the reference object holds every field) */
    c.n = 0;
    ref(&c, 0xF1, "{\"a\": {\"$numberInt\": \"1\"}, \"b\": {\"c\": {\"$numberInt\": \"2\"}, \"d\": true}}");
    byte(&c, 0x80); /* a */
    uint64_t sa[3] = {0, 0, UINT64_MAX};
    le64(&c, block(12, sa, 3));
    byte(&c, 0x80); /* b.c */
    uint64_t sc[3] = {UINT64_MAX, zz(1), zz(1)};
    le64(&c, block(12, sc, 3));
    byte(&c, 0x80); /* b.d */
    uint64_t sd[3] = {UINT64_MAX, UINT64_MAX, zz(-1)};
    le64(&c, block(12, sd, 3));
    byte(&c, 0x00);
    byte(&c, 0x00);
    check_col(&c, "obj:{ \"a\" : 1 } | obj:{ \"a\" : 1, \"b\" : { \"c\" : 3 } } | "
                  "obj:{ \"b\" : { \"c\" : 4, \"d\" : false } }");

    /* the last object is the base of regular mode after it */
    c.n = 0;
    ref(&c, 0xF1, "{\"a\": \"s\", \"e\": {}}");
    byte(&c, 0x80);
    uint64_t a[2] = {0, 0};
    le64(&c, block(13, a, 2));
    byte(&c, 0x00);
    byte(&c, 0x80);
    le64(&c, block(14, &zero, 1));
    byte(&c, 0x00);
    check_col(&c, "obj:{ \"a\" : \"s\", \"e\" : {  } } | obj:{ \"a\" : \"s\", \"e\" : {  } } | "
                  "obj:{ \"a\" : \"s\", \"e\" : {  } }");

    /* a literal inside interleaved mode replaces that stream's base */
    c.n = 0;
    ref(&c, 0xF0, "{\"a\": {\"$numberInt\": \"1\"}, \"b\": {\"$numberInt\": \"2\"}}");
    lit_str(&c, "lit");
    byte(&c, 0x80);
    uint64_t b2[2] = {zz(1), zz(1)};
    le64(&c, block(13, b2, 2));
    byte(&c, 0x80);
    uint64_t a2[1] = {0};
    le64(&c, block(14, a2, 1));
    byte(&c, 0x00);
    byte(&c, 0x00);
    check_col(&c, "obj:{ \"a\" : \"lit\", \"b\" : 3 } | obj:{ \"a\" : \"lit\", \"b\" : 4 }");
}
END_TEST

/* 0xF0 keeps arrays whole (a leaf of its own); 0xF1 descends into them; 0xF2's root is an array. */
START_TEST(interleaved_arrays)
{
    col c = {.n = 0};
    ref(&c, 0xF0, "{\"a\": [1, 2]}");
    byte(&c, 0x80);
    uint64_t z[2] = {0, 0};
    le64(&c, block(13, z, 2));
    byte(&c, 0x00);
    byte(&c, 0x00);
    check_col(&c, "obj:{ \"a\" : [ 1, 2 ] } | obj:{ \"a\" : [ 1, 2 ] }");

    c.n = 0;
    ref(&c, 0xF1, "{\"a\": [{\"$numberInt\": \"1\"}, {\"$numberInt\": \"2\"}]}");
    byte(&c, 0x80); /* a.0: +1, missing */
    uint64_t a0[2] = {zz(1), UINT64_MAX};
    le64(&c, block(13, a0, 2));
    byte(&c, 0x80); /* a.1: missing, -2 */
    uint64_t a1[2] = {UINT64_MAX, zz(-2)};
    le64(&c, block(13, a1, 2));
    byte(&c, 0x00);
    byte(&c, 0x00);
    /* libbson prints a nested array without its keys: the second object's array holds its element under "1" */
    check_col(&c, "obj:{ \"a\" : [ 2 ] } | obj:{ \"a\" : [ 0 ] }");
    bcol_decoder *d = bcol_decoder_new(c.b, c.n);
    ck_assert_ptr_nonnull(d);
    bcol_elem e;
    ck_assert_int_eq(bcol_decoder_next(d, &e, NULL, 0), BCOL_VALUE);
    ck_assert_int_eq(bcol_decoder_next(d, &e, NULL, 0), BCOL_VALUE);
    bson_t obj;
    bson_iter_t it;
    ck_assert(bson_init_static(&obj, e.value.value.v_doc.data, e.value.value.v_doc.data_len));
    ck_assert(bson_iter_init(&it, &obj) && bson_iter_find_descendant(&it, "a.1", &it));
    ck_assert_int_eq(bson_iter_int32(&it), 0);
    ck_assert(bson_iter_init(&it, &obj) && !bson_iter_find_descendant(&it, "a.0", &it));
    bcol_decoder_destroy(d);

    c.n = 0;
    byte(&c, 0xF2);
    put_doc_json(&c, "{\"0\": {\"$numberInt\": \"7\"}, \"1\": \"s\"}");
    byte(&c, 0x80);
    uint64_t r0[1] = {zz(1)};
    le64(&c, block(14, r0, 1));
    byte(&c, 0x80);
    uint64_t r1[1] = {0};
    le64(&c, block(14, r1, 1));
    byte(&c, 0x00);
    byte(&c, 0x00);
    check_col(&c, "arr:{ \"0\" : 8, \"1\" : \"s\" }");
}
END_TEST

START_TEST(interleaved_errors)
{
    uint64_t two[2] = {0, 0}, one = 0;
    /* the first stream ends while the second has values left */
    col c = {.n = 0};
    ref(&c, 0xF0, "{\"a\": 1, \"b\": 2}");
    byte(&c, 0x80);
    le64(&c, block(14, &one, 1));
    byte(&c, 0x80);
    le64(&c, block(13, two, 2));
    byte(&c, 0x00);
    byte(&c, 0x00);
    check_error(&c, "values left in a stream");

    /* the end byte where the second leaf needs its control byte */
    c.n = 0;
    ref(&c, 0xF0, "{\"a\": 1, \"b\": 2}");
    byte(&c, 0x80);
    le64(&c, block(13, two, 2));
    byte(&c, 0x00);
    byte(&c, 0x00);
    check_error(&c, "in the middle of an object");

    c.n = 0;
    ref(&c, 0xF0, "{\"e\": {}}");
    byte(&c, 0x00);
    check_error(&c, "no leaf");

    c.n = 0;
    ref(&c, 0xF1, "{\"a\": 1}");
    byte(&c, 0x00);
    byte(&c, 0x00);
    check_error(&c, "holds no object");

    /* a reference object that is not BSON */
    c.n = 0;
    byte(&c, 0xF0);
    le32(&c, 12);
    byte(&c, 0x10);
    byte(&c, 'a');
    byte(&c, 0);
    le32(&c, 1);
    byte(&c, 0x01); /* should be 0x00 */
    byte(&c, 0x00);
    check_error(&c, "reference object");

    /* an interleaved start inside interleaved mode */
    c.n = 0;
    ref(&c, 0xF0, "{\"a\": 1}");
    ref(&c, 0xF0, "{\"a\": 1}");
    byte(&c, 0x00);
    check_error(&c, "invalid control byte 0xf0");
}
END_TEST

/* ---- layouts from the server's own unit tests ----
 *
 * src/mongo/bson/column/bsoncolumn_test.cpp (mongodb/mongo) builds the bytes it expects the server's encoder to write
 * (an interleaved start and reference object, then per leaf a control byte and its Simple-8b blocks of deltas, then
 * the end bytes) and checks that they decode to the elements it appended. Each test below rebuilds one of those
 * layouts with this file's helpers and checks the decoded positions against those elements, byte for byte. A block
 * holding n values uses the selector with n slots, as the server's Simple-8b builder does for a flush of n values.
 */

/* Checks each position against want[i]: JSON of the expected object (integers are int32, decimals double), or NULL
 * for a missing position. */
static void check_objs(const col *c, const char *const *want, size_t n)
{
    bcol_decoder *d = bcol_decoder_new(c->b, c->n);
    ck_assert_ptr_nonnull(d);
    bcol_elem e;
    char err[BCOL_ERR_MAX];
    for (size_t i = 0; i < n; i++) {
        bcol_status st = bcol_decoder_next(d, &e, err, sizeof err);
        ck_assert_msg(st == BCOL_VALUE, "position %zu: status %d %s", i, (int)st, st == BCOL_ERROR ? err : "");
        if (!want[i]) {
            ck_assert_msg(e.missing, "position %zu is not missing", i);
            continue;
        }
        ck_assert_msg(!e.missing, "position %zu is missing", i);
        ck_assert_int_eq(e.value.value_type, BSON_TYPE_DOCUMENT);
        bson_error_t je;
        bson_t *w = bson_new_from_json((const uint8_t *)want[i], -1, &je);
        ck_assert_msg(w != NULL, "bad test JSON %s: %s", want[i], je.message);
        bson_t got;
        ck_assert(bson_init_static(&got, e.value.value.v_doc.data, e.value.value.v_doc.data_len));
        char *gj = bson_as_canonical_extended_json(&got, NULL), *wj = bson_as_canonical_extended_json(w, NULL);
        ck_assert_msg(got.len == w->len && memcmp(bson_get_data(&got), bson_get_data(w), w->len) == 0,
                      "position %zu: decoded %s, wanted %s", i, gj, wj);
        bson_free(gj);
        bson_free(wj);
        bson_destroy(w);
    }
    ck_assert_int_eq(bcol_decoder_next(d, &e, err, sizeof err), BCOL_END);
    bcol_decoder_destroy(d);
}

/* One control byte and one block of the given zigzagged slots (UINT64_MAX: missing). */
static void run1(col *c, uint8_t control, const uint64_t *slots, unsigned n)
{
    static const int sel_for_count[61] = {[1] = 14, [2] = 13, [3] = 12, [4] = 11, [5] = 10, [6] = 9,  [7] = 8,
                                          [8] = 7,  [10] = 6, [12] = 5, [15] = 4, [20] = 3, [30] = 2, [60] = 1};
    ck_assert(n <= 60 && sel_for_count[n] != 0);
    byte(c, control);
    le64(c, block((unsigned)sel_for_count[n], slots, n));
}

#define M UINT64_MAX

/* BSONColumnTest.Interleaved, with both start bytes (legacy 0xF0 and 0xF1). */
START_TEST(server_layout_interleaved)
{
    static const char *const want[] = {"{\"x\": 1, \"y\": 2}", "{\"x\": 1, \"y\": 3}", "{\"x\": 1, \"y\": 3}", NULL,
                                       "{\"y\": 4}",           "{\"x\": 1, \"y\": 3}"};
    for (int legacy = 0; legacy < 2; legacy++) {
        col c = {.n = 0};
        ref(&c, legacy ? 0xF0 : 0xF1, want[0]);
        run1(&c, 0x80, (const uint64_t[]){0, zz(0), zz(0), M, M, zz(0)}, 6);
        run1(&c, 0x80, (const uint64_t[]){0, zz(1), zz(0), M, zz(1), zz(-1)}, 6);
        byte(&c, 0x00);
        byte(&c, 0x00);
        check_objs(&c, want, 6);
    }
}
END_TEST

/* BSONColumnTest.InterleavedArray (0xF1: the array's elements are leaves). */
START_TEST(server_layout_interleaved_array)
{
    static const char *const want[] = {"{\"x\": [1, 2]}", "{\"x\": [2, 3]}"};
    col c = {.n = 0};
    ref(&c, 0xF1, want[0]);
    run1(&c, 0x80, (const uint64_t[]){0, zz(1)}, 2);
    run1(&c, 0x80, (const uint64_t[]){0, zz(1)}, 2);
    byte(&c, 0x00);
    byte(&c, 0x00);
    check_objs(&c, want, 2);
}
END_TEST

/* BSONColumnTest.InterleavedAfterNonInterleaved and InterleavedLevels. */
START_TEST(server_layout_interleaved_after_literal_and_levels)
{
    for (int legacy = 0; legacy < 2; legacy++) {
        col c = {.n = 0};
        lit_i32(&c, 1);
        ref(&c, legacy ? 0xF0 : 0xF1, "{\"x\": 1, \"y\": 2}");
        run1(&c, 0x80, (const uint64_t[]){0, zz(0), zz(1)}, 3);
        run1(&c, 0x80, (const uint64_t[]){0, zz(1), zz(1)}, 3);
        byte(&c, 0x00);
        byte(&c, 0x00);
        check_col(&c,
                  "i32:1 | obj:{ \"x\" : 1, \"y\" : 2 } | obj:{ \"x\" : 1, \"y\" : 3 } | obj:{ \"x\" : 2, \"y\" : 4 }");

        static const char *const levels[] = {"{\"root\": {\"x\": 1}, \"y\": 2}", "{\"root\": {\"x\": 2}, \"y\": 5}",
                                             "{\"root\": {\"x\": 2}, \"y\": 5}"};
        c.n = 0;
        ref(&c, legacy ? 0xF0 : 0xF1, levels[0]);
        run1(&c, 0x80, (const uint64_t[]){0, zz(1), zz(0)}, 3);
        run1(&c, 0x80, (const uint64_t[]){0, zz(3), zz(0)}, 3);
        byte(&c, 0x00);
        byte(&c, 0x00);
        check_objs(&c, levels, 3);
    }
}
END_TEST

/* BSONColumnTest.InterleavedDoubleDifferentScale and InterleavedDoubleIncreaseScaleFromDeltaNoRescale: each leaf's
 * doubles at their own scale, and a later control byte re-scaling the last value. */
START_TEST(server_layout_interleaved_doubles)
{
    static const char *const want[] = {"{\"x\": 1.0, \"y\": 2.0}", "{\"x\": 1.1, \"y\": 3.0}",
                                       "{\"x\": 1.2, \"y\": 2.0}", "{\"x\": 1.0}", "{\"x\": 1.5, \"y\": 2.0}"};
    static const char *const rescale[] = {"{\"x\": 1.1}", "{\"x\": 2.1}", "{\"x\": 2.2}", "{\"x\": 2.3}",
                                          "{\"x\": 3.12345678}"};
    for (int legacy = 0; legacy < 2; legacy++) {
        col c = {.n = 0};
        ref(&c, legacy ? 0xF0 : 0xF1, want[0]);
        run1(&c, 0xA0, (const uint64_t[]){0, zz(1), zz(1), zz(-2), zz(5)}, 5); /* x10 */
        run1(&c, 0x90, (const uint64_t[]){0, zz(1), zz(-1), M, zz(0)}, 5);     /* x1 */
        byte(&c, 0x00);
        byte(&c, 0x00);
        check_objs(&c, want, 5);

        c.n = 0;
        ref(&c, legacy ? 0xF0 : 0xF1, rescale[0]);
        run1(&c, 0xA0, (const uint64_t[]){0, zz(10), zz(1), zz(1)}, 4);
        run1(&c, 0xD0, (const uint64_t[]){zz(312345678 - 230000000)}, 1); /* 2.3 re-scaled by 10^8 */
        byte(&c, 0x00);
        byte(&c, 0x00);
        check_objs(&c, rescale, 5);
    }
}
END_TEST

/* BSONColumnTest.InterleavedScalarToObject and DecodeInterleavedObjectAsScalar: a leaf becoming an object starts
 * a new interleaved run; or a leaf's stream takes object literals. */
START_TEST(server_layout_scalar_to_object)
{
    static const char *const want[] = {"{\"x\": 1}", "{\"x\": 2}", "{\"x\": {\"y\": 1, \"z\": 1}}",
                                       "{\"x\": {\"y\": 2, \"z\": 3}}", "{\"x\": {\"y\": 2, \"z\": 3}}"};
    for (int legacy = 0; legacy < 2; legacy++) {
        col c = {.n = 0};
        ref(&c, legacy ? 0xF0 : 0xF1, want[0]);
        run1(&c, 0x80, (const uint64_t[]){0, zz(1)}, 2);
        byte(&c, 0x00);
        ref(&c, legacy ? 0xF0 : 0xF1, want[2]);
        run1(&c, 0x80, (const uint64_t[]){0, zz(1)}, 2);
        run1(&c, 0x80, (const uint64_t[]){0, zz(2)}, 2);
        byte(&c, 0x00);
        byte(&c, 0x00);
        check_objs(&c, want, 4);

        c.n = 0;
        ref(&c, legacy ? 0xF0 : 0xF1, want[0]);
        run1(&c, 0x80, (const uint64_t[]){0, zz(1)}, 2);
        byte(&c, 0x03); /* literal {y: 1, z: 1} in x's stream */
        byte(&c, 0);
        put_doc_json(&c, "{\"y\": 1, \"z\": 1}");
        byte(&c, 0x03);
        byte(&c, 0);
        put_doc_json(&c, "{\"y\": 2, \"z\": 3}");
        run1(&c, 0x80, (const uint64_t[]){0}, 1);
        byte(&c, 0x00);
        byte(&c, 0x00);
        check_objs(&c, want, 5);
    }
}
END_TEST

/* BSONColumnTest.InterleavedMix64And128Bit and InterleavedWithEmptySubObj. */
START_TEST(server_layout_mixed_and_empty)
{
    static const char *const want[] = {"{\"x\": 1, \"y\": \"count0\"}", "{\"x\": 2, \"y\": \"count1\"}",
                                       "{\"x\": 3, \"y\": \"count2\"}", "{\"x\": 4}", "{\"x\": 5, \"y\": \"count3\"}"};
    static const char *const empty[] = {"{\"x\": 1, \"y\": {}}", "{\"x\": 2, \"y\": {}}", "{\"x\": 3, \"y\": {}}"};
    for (int legacy = 0; legacy < 2; legacy++) {
        col c = {.n = 0};
        ref(&c, legacy ? 0xF0 : 0xF1, want[0]);
        run1(&c, 0x80, (const uint64_t[]){0, zz(1), zz(1), zz(1), zz(1)}, 5);
        /* "countN" reversed puts its last character in the lowest byte: each step is +1 */
        run1(&c, 0x80, (const uint64_t[]){0, zz(1), zz(1), M, zz(1)}, 5);
        byte(&c, 0x00);
        byte(&c, 0x00);
        check_objs(&c, want, 5);

        c.n = 0;
        ref(&c, legacy ? 0xF0 : 0xF1, empty[0]);
        run1(&c, 0x80, (const uint64_t[]){0, zz(1), zz(1)}, 3);
        byte(&c, 0x00);
        byte(&c, 0x00);
        check_objs(&c, empty, 3);
    }
}
END_TEST

#undef M

/* ---- malformed columns ---- */

START_TEST(bad_bytes)
{
    col c = {.n = 0};
    lit_i32(&c, 5);
    byte(&c, 0xE0);
    le64(&c, 0x0E);
    byte(&c, 0x00);
    check_error(&c, "byte 6: invalid control byte 0xe0");

    c.n = 0;
    byte(&c, 0xF3);
    byte(&c, 0x00);
    check_error(&c, "byte 0: invalid control byte 0xf3");

    c.n = 0;
    byte(&c, 0x14); /* no such BSON type */
    byte(&c, 0);
    byte(&c, 0x00);
    check_error(&c, "unknown BSON type");

    c.n = 0;
    byte(&c, 0x0F); /* CodeWScope */
    byte(&c, 0);
    le32(&c, 14);
    le32(&c, 1);
    byte(&c, 0);
    le32(&c, 5);
    byte(&c, 0);
    byte(&c, 0x00);
    check_error(&c, "CodeWScope");

    c.n = 0;
    byte(&c, 0x10);
    byte(&c, 'a'); /* a field name */
    byte(&c, 0);
    le32(&c, 1);
    byte(&c, 0x00);
    check_error(&c, "field name");

    c.n = 0;
    byte(&c, 0x08);
    byte(&c, 0);
    byte(&c, 2);
    byte(&c, 0x00);
    check_error(&c, "boolean");

    c.n = 0;
    byte(&c, 0x02);
    byte(&c, 0);
    le32(&c, 0xFFFFFFFF);
    byte(&c, 0x00);
    check_error(&c, "past the end");

    c.n = 0;
    byte(&c, 0x02);
    byte(&c, 0);
    le32(&c, 2);
    byte(&c, 'a');
    byte(&c, 'b'); /* not NUL-terminated */
    byte(&c, 0x00);
    check_error(&c, "NUL");

    c.n = 0;
    byte(&c, 0x03);
    byte(&c, 0);
    le32(&c, 6);
    byte(&c, 0x0A);
    byte(&c, 0); /* a null element without its name's NUL: not BSON */
    byte(&c, 0x00);
    check_error(&c, "not valid BSON");

    /* selector 0, selector 7 extension 10, selector 8 extension 14 */
    static const uint64_t bad_blocks[3] = {0x00, 0xA7, 0xE8};
    static const char *why[3] = {"selector 0", "selector 7 and extension 10", "selector 8 and extension 14"};
    for (int i = 0; i < 3; i++) {
        c.n = 0;
        lit_i32(&c, 5);
        byte(&c, 0x80);
        le64(&c, bad_blocks[i]);
        byte(&c, 0x00);
        check_error(&c, why[i]);
        char *got = decode_all(c.b, c.n);
        ck_assert_msg(strstr(got, "byte 7:") != NULL, "%s", got);
        free(got);
    }

    /* 16 blocks announced, 2 present */
    c.n = 0;
    lit_i32(&c, 5);
    byte(&c, 0x8F);
    le64(&c, 0x0E);
    le64(&c, 0x0E);
    byte(&c, 0x00);
    check_error(&c, "byte 6: control byte 0x8f: 16 Simple-8b blocks run past the end");

    /* blocks that end the buffer: no room for the end byte */
    c.n = 0;
    lit_i32(&c, 5);
    byte(&c, 0x80);
    le64(&c, 0x0E);
    check_error(&c, "run past the end");

    /* bytes after the end byte; no end byte */
    c.n = 0;
    lit_i32(&c, 5);
    byte(&c, 0x00);
    byte(&c, 0x00);
    check_error(&c, "byte 6: 1 bytes after the end byte");
    c.n = 0;
    lit_i32(&c, 5);
    check_error(&c, "byte 6: column ends without its end byte");

    /* a delta for binary data longer than 16 bytes */
    c.n = 0;
    byte(&c, 0x05);
    byte(&c, 0);
    le32(&c, 17);
    byte(&c, 0);
    for (int i = 0; i < 17; i++)
        byte(&c, (uint8_t)i);
    byte(&c, 0x80);
    uint64_t d = zz(1);
    le64(&c, block(14, &d, 1));
    byte(&c, 0x00);
    check_error(&c, "longer than 16 bytes");
}
END_TEST

/* A literal document {"a": {"a": ... {} ...}} depth levels deep: each level is 4 (length) + 1 (type) + 2 ("a\0")
 * + its child + 1 (end). */
static void nested_literal(col *c, int depth)
{
    c->n = 0;
    byte(c, 0x03);
    byte(c, 0);
    for (int i = 0; i < depth; i++) {
        le32(c, (uint32_t)(5 + (depth - i) * 8));
        byte(c, 0x03);
        byte(c, 'a');
        byte(c, 0);
    }
    le32(c, 5);
    byte(c, 0);
    for (int i = 0; i < depth; i++)
        byte(c, 0);
    byte(c, 0x00);
}

/* A document nested deeper than the decoder follows is an error, not a deep recursion. */
START_TEST(deep_nesting)
{
    static col c;
    nested_literal(&c, 150);
    char *got = decode_all(c.b, c.n);
    const char *prefix = "obj:{ \"a\" : { \"a\" : ";
    ck_assert_msg(strncmp(got, prefix, strlen(prefix)) == 0, "%.80s", got);
    free(got);

    nested_literal(&c, 1000);
    check_error(&c, "nests too deep");

    /* the same as a reference object */
    c.b[0] = 0xF0;
    memmove(c.b + 1, c.b + 2, c.n - 2);
    c.n--;
    check_error(&c, "nests too deep");
}
END_TEST

/* A few valid columns of every shape, for the truncation and mutation tests. */
static size_t sample_columns(col *out, size_t max)
{
    size_t n = 0;
    uint64_t s[3] = {zz(1), UINT64_MAX, zz(-3)};
    ck_assert(max >= 4);
    col *c = &out[n++];
    c->n = 0;
    lit_date(c, 1700000000000);
    byte(c, 0x81);
    le64(c, block(12, s, 3));
    le64(c, 0x2F);
    byte(c, 0x00);

    c = &out[n++];
    c->n = 0;
    ref(c, 0xF1, "{\"t\": {\"$date\": 5}, \"m\": {\"a\": [1.5, \"x\"]}}");
    for (int i = 0; i < 3; i++) { /* one run of 3 slots per leaf: 3 objects */
        byte(c, 0x80);
        le64(c, block(12, s, 3));
    }
    byte(c, 0x00);
    lit_str(c, "tail");
    byte(c, 0x00);

    c = &out[n++];
    c->n = 0;
    lit_dbl(c, 2.5);
    byte(c, 0xA1);
    le64(c, block(12, s, 3));
    le64(c, 0x0F);
    lit_str(c, "abc");
    byte(c, 0x80);
    le64(c, block(12, s, 3));
    byte(c, 0x00);

    c = &out[n++];
    c->n = 0;
    byte(c, 0x13);
    byte(c, 0);
    le64(c, 1);
    le64(c, UINT64_C(0x3040000000000000));
    byte(c, 0x80);
    uint64_t vals[6] = {4, 1, 3, 0, 0, UINT64_MAX};
    unsigned counts[6] = {28, 31, 0, 0, 0, 0};
    le64(c, block_ext(8, 8, vals, counts, 6));
    byte(c, 0x00);
    return n;
}

START_TEST(truncated_everywhere)
{
    col cols[8];
    size_t n = sample_columns(cols, 8);
    for (size_t i = 0; i < n; i++) {
        char *full = decode_all(cols[i].b, cols[i].n);
        ck_assert_msg(strncmp(full, "ERROR", 5) != 0, "sample %zu: %s", i, full);
        free(full);
        for (size_t len = 0; len < cols[i].n; len++) {
            /* a copy of exactly len bytes, so that ASan sees any read past them */
            uint8_t *p = malloc(len ? len : 1);
            ck_assert_ptr_nonnull(p);
            memcpy(p, cols[i].b, len);
            char *got = decode_all(p, len);
            ck_assert_msg(strncmp(got, "ERROR: BSONColumn byte ", 23) == 0, "sample %zu cut at %zu: %s", i, len, got);
            free(got);
            free(p);
        }
    }
}
END_TEST

/* Mutated bytes: any outcome but a crash, an over-read (ASan) or a runaway; errors name a byte. */
START_TEST(mutations)
{
    col cols[8];
    size_t n = sample_columns(cols, 8);
    uint64_t rng = 0x9E3779B97F4A7C15u;
    for (int round = 0; round < 4000; round++) {
        col *src = &cols[(size_t)round % n];
        uint8_t *p = malloc(src->n);
        ck_assert_ptr_nonnull(p);
        memcpy(p, src->b, src->n);
        int flips = 1 + round % 3;
        for (int k = 0; k < flips; k++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            p[rng % src->n] = (uint8_t)(rng >> 32);
        }
        bcol_decoder *d = bcol_decoder_new(p, src->n);
        ck_assert_ptr_nonnull(d);
        bcol_elem e;
        char err[BCOL_ERR_MAX];
        bcol_status st;
        size_t positions = 0;
        while ((st = bcol_decoder_next(d, &e, err, sizeof err)) == BCOL_VALUE) {
            ck_assert_uint_le(++positions, 16 * 1920 * 8);
            if (!e.missing && (e.value.value_type == BSON_TYPE_DOCUMENT || e.value.value_type == BSON_TYPE_ARRAY)) {
                bson_t b;
                size_t off;
                ck_assert(bson_init_static(&b, e.value.value.v_doc.data, e.value.value.v_doc.data_len));
                ck_assert(bson_validate(&b, BSON_VALIDATE_NONE, &off));
            }
        }
        if (st == BCOL_ERROR)
            ck_assert_msg(strncmp(err, "BSONColumn byte ", 16) == 0, "%s", err);
        bcol_decoder_destroy(d);
        free(p);
    }
}
END_TEST

/* ---- the rest of the API ---- */

START_TEST(positions_and_count)
{
    col cols[8];
    sample_columns(cols, 8);
    bcol_decoder *d = bcol_decoder_new(cols[0].b, cols[0].n);
    ck_assert_ptr_nonnull(d);
    bcol_elem e;
    ck_assert_uint_eq(bcol_decoder_position(d), 0);
    ck_assert_int_eq(bcol_decoder_next(d, &e, NULL, 0), BCOL_VALUE);
    ck_assert(!e.missing);
    ck_assert_int_eq(e.value.value_type, BSON_TYPE_DATE_TIME);
    ck_assert_int_eq(e.value.value.v_datetime, 1700000000000);
    ck_assert_uint_eq(bcol_decoder_position(d), 1);
    bcol_decoder_destroy(d);
    /* 1 literal + 3 slots + 3 * 120 repeats of the last (-3) */
    size_t n;
    ck_assert(bcol_count(cols[0].b, cols[0].n, &n, NULL, 0));
    ck_assert_uint_eq(n, 1 + 3 + 360);
    char err[BCOL_ERR_MAX];
    ck_assert(!bcol_count(cols[0].b, cols[0].n - 1, &n, err, sizeof err));
    ck_assert_msg(strstr(err, "BSONColumn byte") != NULL, "%s", err);
}
END_TEST

/* An 8.0 append logged as {o: offset, d: BinData}: the column up to offset, then d (the server's jstest on
 * $_internalApplyOplogUpdate replaces a whole column this way with {o: 0, d: <bytes>}). */
START_TEST(binary_diff)
{
    col old = {.n = 0};
    lit_date(&old, 1000);
    byte(&old, 0x00);
    col tail = {.n = 0};
    byte(&tail, 0x80);
    uint64_t s[2] = {zz(10), zz(0)};
    le64(&tail, block(13, s, 2));
    byte(&tail, 0x00);
    uint8_t *nw;
    size_t nl;
    char err[BCOL_ERR_MAX];
    ck_assert(bcol_apply_binary_diff(old.b, old.n, old.n - 1, tail.b, tail.n, &nw, &nl, err, sizeof err));
    ck_assert_uint_eq(nl, old.n - 1 + tail.n);
    char *got = decode_all(nw, nl);
    ck_assert_str_eq(got, "date:1970-01-01T00:00:01.000Z | date:1970-01-01T00:00:01.010Z | "
                          "date:1970-01-01T00:00:01.020Z");
    free(got);
    free(nw);

    /* a whole replacement */
    ck_assert(bcol_apply_binary_diff(old.b, old.n, 0, old.b, old.n, &nw, &nl, err, sizeof err));
    ck_assert_uint_eq(nl, old.n);
    ck_assert(memcmp(nw, old.b, nl) == 0);
    free(nw);

    ck_assert(!bcol_apply_binary_diff(old.b, old.n, old.n + 1, tail.b, tail.n, &nw, &nl, err, sizeof err));
    ck_assert_msg(strstr(err, "past the column") != NULL, "%s", err);
}
END_TEST

/* ---- marks: a decoder resumed where an earlier version of the column stood ---- */

static bool elem_eq(const bcol_elem *a, const bcol_elem *b)
{
    if (a->missing || b->missing)
        return a->missing == b->missing;
    bson_t x = BSON_INITIALIZER, y = BSON_INITIALIZER;
    bool ok = bson_append_value(&x, "", 0, &a->value) && bson_append_value(&y, "", 0, &b->value) && x.len == y.len &&
              memcmp(bson_get_data(&x), bson_get_data(&y), x.len) == 0;
    bson_destroy(&x);
    bson_destroy(&y);
    return ok;
}

/* The decoder resumed at m over data gives, position for position, what a fresh decoder gives after m->pos. */
static void expect_resumed_same(bcol_decoder *r, const uint8_t *data, size_t len, const bcol_mark *m)
{
    bcol_decoder *f = bcol_decoder_new(data, len);
    bcol_elem a, b;
    for (size_t i = 0; i < m->pos; i++)
        ck_assert_int_eq(bcol_decoder_next(f, &a, NULL, 0), BCOL_VALUE);
    for (;;) {
        char e1[BCOL_ERR_MAX] = "", e2[BCOL_ERR_MAX] = "";
        bcol_status s1 = bcol_decoder_next(f, &a, e1, sizeof e1), s2 = bcol_decoder_next(r, &b, e2, sizeof e2);
        ck_assert_int_eq(s1, s2);
        ck_assert_uint_eq(bcol_decoder_position(f), bcol_decoder_position(r));
        if (s1 != BCOL_VALUE) {
            ck_assert_str_eq(e1, e2);
            break;
        }
        ck_assert_msg(elem_eq(&a, &b), "position %zu differs after a resume at %zu", bcol_decoder_position(f) - 1,
                      m->pos);
    }
    bcol_decoder_destroy(f);
}

START_TEST(marks_resume)
{
    size_t appends = 0, resumed_appends = 0, resumes = 0, refused = 0;
    uint64_t rng = 88172645463325252u;
    for (int kind = 0; kind < 7; kind++) {
        for (int rep = 0; rep < 4; rep++) {
            bcenc_t *enc = bcenc_new();
            uint8_t *cur = NULL;
            size_t curlen = 0;
            bcol_mark marks[512];
            size_t nm = 0;
            for (int i = 0; i < 120; i++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                bson_t m = BSON_INITIALIZER, o;
                switch (kind) {
                case 0:
                    BSON_APPEND_DATE_TIME(&m, "x", 1767225600000LL + i * 1000 + (rep && rng % 9 == 0 ? 7 : 0));
                    break;
                case 1:
                    BSON_APPEND_DOUBLE(&m, "x", 20.0 + (double)(rng % 97) / (rep % 2 ? 10.0 : 1000.0));
                    break;
                case 2:
                    BSON_APPEND_INT32(&m, "x", 40 + (int32_t)(rng % (rep ? 30 : 2)));
                    break;
                case 3:
                    BSON_APPEND_BOOL(&m, "x", rng % 50 != 0);
                    break;
                case 4:
                    BSON_APPEND_UTF8(&m, "x", rng % 3 ? "on" : "a string longer than sixteen bytes");
                    break;
                case 5:
                    BSON_APPEND_DOCUMENT_BEGIN(&m, "x", &o);
                    BSON_APPEND_INT32(&o, "a", (int32_t)(rng % 5));
                    bson_append_document_end(&m, &o);
                    break;
                default:
                    BSON_APPEND_INT64(&m, "x", (int64_t)i * 3);
                    break;
                }
                bson_iter_t it;
                if (rep == 3 && rng % 4 == 0)
                    bcenc_skip(enc);
                else if (bson_iter_init_find(&it, &m, "x"))
                    bcenc_append_iter(enc, &it);
                bson_destroy(&m);
                size_t off, dl;
                uint8_t *d = bcenc_intermediate(enc, &off, &dl);
                uint8_t *next = malloc(off + dl + 1);
                if (off)
                    memcpy(next, cur, off);
                if (dl)
                    memcpy(next + off, d, dl);
                free(d);
                size_t nextlen = off + dl;
                if (i % 40 == 39) {
                    /* a column written whole (finalize), and one with a byte changed: earlier bytes differ */
                    free(next);
                    next = bcenc_finish(enc, &nextlen);
                    if (rng % 2)
                        next[(rng >> 8) % nextlen] ^= (uint8_t)(1 + rng % 255);
                }
                /* the last marks of the old column and some earlier ones: resumed over the new one, or refused */
                bool any = false;
                for (size_t k = 0; k < nm; k++) {
                    if (k + 4 < nm && k % 16 != 0)
                        continue;
                    bool nomem;
                    bcol_decoder *r = bcol_decoder_resume(next, nextlen, cur, curlen, &marks[k], &nomem);
                    ck_assert(!nomem);
                    if (!r) {
                        refused++;
                        continue;
                    }
                    any = true;
                    resumes++;
                    expect_resumed_same(r, next, nextlen, &marks[k]);
                    bcol_decoder_destroy(r);
                }
                appends++;
                resumed_appends += any;
                free(cur);
                cur = next;
                curlen = nextlen;
                nm = 0;
                bcol_decoder *dd = bcol_decoder_new(cur, curlen);
                bcol_elem e;
                while (bcol_decoder_next(dd, &e, NULL, 0) == BCOL_VALUE)
                    if (nm < 512 && bcol_decoder_mark(dd, &marks[nm]))
                        nm++;
                bcol_decoder_destroy(dd);
            }
            free(cur);
            bcenc_free(enc);
        }
    }
    ck_assert_uint_gt(refused, 0);
    /* an append keeps the bytes before its open control byte: a mark there resumes (objects, interleaved, have no
     * marks past their reference object) */
    ck_assert_msg(resumed_appends * 10 > appends * 8, "%zu of %zu appends resumed", resumed_appends, appends);
    ck_assert_uint_gt(resumes, appends);
}
END_TEST

Suite *bsoncolumn_suite(void); /* called by the generated runner list */

Suite *bsoncolumn_suite(void)
{
    Suite *s = suite_create("bsoncolumn");
    TCase *tc = tcase_create("bsoncolumn");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, server_columns);
    tcase_add_test(tc, server_bucket_control);
    tcase_add_test(tc, empty_column);
    tcase_add_test(tc, base_selectors);
    tcase_add_test(tc, extended_selectors);
    tcase_add_test(tc, run_length);
    tcase_add_test(tc, skips_first_and_last);
    tcase_add_test(tc, double_scales);
    tcase_add_test(tc, delta_of_delta);
    tcase_add_test(tc, integers_and_booleans);
    tcase_add_test(tc, deltas_128);
    tcase_add_test(tc, zero_delta_types);
    tcase_add_test(tc, interleaved_objects);
    tcase_add_test(tc, interleaved_arrays);
    tcase_add_test(tc, interleaved_errors);
    tcase_add_test(tc, server_layout_interleaved);
    tcase_add_test(tc, server_layout_interleaved_array);
    tcase_add_test(tc, server_layout_interleaved_after_literal_and_levels);
    tcase_add_test(tc, server_layout_interleaved_doubles);
    tcase_add_test(tc, server_layout_scalar_to_object);
    tcase_add_test(tc, server_layout_mixed_and_empty);
    tcase_add_test(tc, bad_bytes);
    tcase_add_test(tc, deep_nesting);
    tcase_add_test(tc, truncated_everywhere);
    tcase_add_test(tc, mutations);
    tcase_add_test(tc, marks_resume);
    tcase_add_test(tc, positions_and_count);
    tcase_add_test(tc, binary_diff);
    suite_add_tcase(s, tc);
    return s;
}

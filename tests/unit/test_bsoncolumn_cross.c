/*
 * test_bsoncolumn_cross.c — the daemon's BSONColumn decoder (map/bsoncolumn.h) reading what mongosim's encoder
 * (tests/mongosim/bsoncolumn_enc.h) writes. The two were written apart, each checked against the server's own bytes
 * (test_bsoncolumn.c, test_mongosim_bsoncolumn.c); this suite adds volume: random columns of every type class the
 * time-series buckets hold, with skips and changing object shapes, must decode to exactly the values appended, and a
 * column grown by 8.0-style append diffs ({o, d}, applied with bcol_apply_binary_diff) must decode to the same as the
 * whole column. The seed is printed on failure; OPLOG2PG_TEST_SEED replays one.
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../mongosim/bsoncolumn_enc.h"
#include "map/bsoncolumn.h"

Suite *bsoncolumn_cross_suite(void);

enum { KINDS = 9 };

/* One random value of column kind k (a column mostly keeps its kind, as a field does). Written into doc as "v". */
static void random_value(unsigned *seed, int k, int i, bson_t *doc)
{
    int r = rand_r(seed);
    switch (k) {
    case 0: /* a counter that mostly grows by small steps */
        BSON_APPEND_INT32(doc, "v", i * 3 + r % 5);
        break;
    case 1: /* large 64-bit values, small deltas, some jumps */
        BSON_APPEND_INT64(doc, "v", INT64_C(1) << 40 | (int64_t)(i * 1000 + (r % 7 == 0 ? r : r % 100)));
        break;
    case 2: /* sensor readings with one to three decimals */
        BSON_APPEND_DOUBLE(doc, "v", (double)(r % 100000) / (r % 3 == 0 ? 10.0 : r % 3 == 1 ? 100.0 : 1000.0));
        break;
    case 3: /* measurement times: a second apart, with jitter */
        BSON_APPEND_DATE_TIME(doc, "v", INT64_C(1700000000000) + i * 1000 + r % 13);
        break;
    case 4:
        BSON_APPEND_TIMESTAMP(doc, "v", (uint32_t)(1700000000 + i), (uint32_t)(r % 4));
        break;
    case 5: { /* ObjectIds of one process: same random bytes, time and counter moving */
        uint8_t b[12] = {0x65, 0x00, 0x00, 0x00, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0, 0, 0};
        uint32_t t = 0x65000000u + (uint32_t)(i / 3), c = (uint32_t)(i * 2 + r % 2);
        b[0] = (uint8_t)(t >> 24), b[1] = (uint8_t)(t >> 16), b[2] = (uint8_t)(t >> 8), b[3] = (uint8_t)t;
        b[9] = (uint8_t)(c >> 16), b[10] = (uint8_t)(c >> 8), b[11] = (uint8_t)c;
        bson_oid_t oid;
        memcpy(oid.bytes, b, 12);
        BSON_APPEND_OID(doc, "v", &oid);
        break;
    }
    case 6: { /* short strings (128-bit deltas) and a long one now and then (literals) */
        static const char *const words[] = {"on", "off", "idle", "running", "a much longer status text than 16"};
        BSON_APPEND_UTF8(doc, "v", words[r % 5]);
        break;
    }
    case 7:
        BSON_APPEND_BOOL(doc, "v", r % 4 == 0);
        break;
    default: { /* objects whose fields come and go (in one order), as a meta or a nested measurement does */
        bson_t o;
        BSON_APPEND_DOCUMENT_BEGIN(doc, "v", &o);
        if (r % 5 != 0)
            BSON_APPEND_INT32(&o, "a", i + r % 3);
        if (r % 3 != 0)
            BSON_APPEND_DOUBLE(&o, "b", (double)(r % 1000) / 10.0);
        if (r % 7 == 0)
            BSON_APPEND_UTF8(&o, "c", "x");
        bson_append_document_end(doc, &o);
        break;
    }
    }
}

/* A column of n positions: values of kind k (another kind now and then), skips at ~1 in skip_every. Each position's
 * value (or an empty document for a skip) goes to want[i]. */
static bcenc_t *random_column(unsigned *seed, int k, size_t n, int skip_every, bson_t **want)
{
    bcenc_t *enc = bcenc_new();
    for (size_t i = 0; i < n; i++) {
        want[i] = bson_new();
        if (skip_every > 0 && rand_r(seed) % skip_every == 0) {
            bcenc_skip(enc);
            continue;
        }
        int kind = rand_r(seed) % 50 == 0 ? rand_r(seed) % KINDS : k;
        random_value(seed, kind, (int)i, want[i]);
        bson_iter_t it;
        ck_assert(bson_iter_init_find(&it, want[i], "v"));
        bcenc_append_iter(enc, &it);
    }
    return enc;
}

/* Decodes data and checks every position against want (a skip: an empty document). */
static void expect_column(const uint8_t *data, size_t len, bson_t *const *want, size_t n, unsigned seed, int k)
{
    char err[BCOL_ERR_MAX];
    bcol_decoder *d = bcol_decoder_new(data, len);
    ck_assert_ptr_nonnull(d);
    for (size_t i = 0; i < n; i++) {
        bcol_elem e;
        bcol_status st = bcol_decoder_next(d, &e, err, sizeof err);
        ck_assert_msg(st == BCOL_VALUE, "seed %u kind %d: position %zu of %zu: %s", seed, k, i, n,
                      st == BCOL_ERROR ? err : "the column ended");
        bson_t got = BSON_INITIALIZER;
        if (!e.missing)
            ck_assert(BSON_APPEND_VALUE(&got, "v", &e.value));
        if (!bson_equal(&got, want[i])) {
            char *a = bson_as_canonical_extended_json(want[i], NULL), *b = bson_as_canonical_extended_json(&got, NULL);
            ck_abort_msg("seed %u kind %d: position %zu: appended %s, decoded %s", seed, k, i, a, b);
        }
        bson_destroy(&got);
    }
    bcol_elem e;
    ck_assert_msg(bcol_decoder_next(d, &e, err, sizeof err) == BCOL_END, "seed %u kind %d: more than %zu positions",
                  seed, k, n);
    bcol_decoder_destroy(d);
    size_t count;
    ck_assert_msg(bcol_count(data, len, &count, err, sizeof err), "%s", err);
    ck_assert_uint_eq(count, n);
}

static unsigned first_seed(void)
{
    const char *s = getenv("OPLOG2PG_TEST_SEED");
    return s != NULL ? (unsigned)strtoul(s, NULL, 10) : 4242u;
}

/* Whole columns: every kind, with and without skips, short and long (RLE and many control bytes). */
START_TEST(test_whole_columns_decode_to_what_was_appended)
{
    static const size_t sizes[] = {1, 2, 17, 130, 1000};
    unsigned seed = first_seed();
    for (int k = 0; k < KINDS; k++) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            for (int skips = 0; skips < 2; skips++) {
                unsigned run_seed = seed++;
                unsigned rs = run_seed;
                size_t n = sizes[s];
                bson_t **want = calloc(n, sizeof *want);
                ck_assert_ptr_nonnull(want);
                bcenc_t *enc = random_column(&rs, k, n, skips ? 6 : 0, want);
                size_t len;
                uint8_t *col = bcenc_finish(enc, &len);
                expect_column(col, len, want, n, run_seed, k);
                free(col);
                bcenc_free(enc);
                for (size_t i = 0; i < n; i++)
                    bson_destroy(want[i]);
                free(want);
            }
        }
    }
}
END_TEST

/* A column grown one measurement (or a few) at a time, each change taken as an 8.0 append diff and applied to the
 * bytes held so far: after every step the held column decodes to everything appended. */
START_TEST(test_append_diffs_rebuild_the_column)
{
    unsigned seed = first_seed() + 1000;
    for (int k = 0; k < KINDS; k++) {
        unsigned run_seed = seed++;
        unsigned rs = run_seed;
        enum { N = 300 };
        bson_t *want[N];
        bcenc_t *enc = bcenc_new();
        uint8_t *held = NULL;
        size_t held_len = 0, n = 0;
        char err[BCOL_ERR_MAX];
        while (n < N) {
            size_t step = 1 + (size_t)(rand_r(&rs) % 4);
            for (size_t j = 0; j < step && n < N; j++, n++) {
                want[n] = bson_new();
                if (rand_r(&rs) % 8 == 0) {
                    bcenc_skip(enc);
                    continue;
                }
                random_value(&rs, k, (int)n, want[n]);
                bson_iter_t it;
                ck_assert(bson_iter_init_find(&it, want[n], "v"));
                bcenc_append_iter(enc, &it);
            }
            size_t off, dlen;
            uint8_t *d = bcenc_intermediate(enc, &off, &dlen);
            uint8_t *next;
            size_t next_len;
            ck_assert_msg(bcol_apply_binary_diff(held, held_len, off, d, dlen, &next, &next_len, err, sizeof err),
                          "seed %u kind %d: %s", run_seed, k, err);
            free(d);
            free(held);
            held = next;
            held_len = next_len;
            expect_column(held, held_len, want, n, run_seed, k);
        }
        free(held);
        bcenc_free(enc);
        for (size_t i = 0; i < N; i++)
            bson_destroy(want[i]);
    }
}
END_TEST

Suite *bsoncolumn_cross_suite(void)
{
    Suite *s = suite_create("bsoncolumn_cross");
    TCase *tc = tcase_create("cross");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_whole_columns_decode_to_what_was_appended);
    tcase_add_test(tc, test_append_diffs_rebuild_the_column);
    suite_add_tcase(s, tc);
    return s;
}

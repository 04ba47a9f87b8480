/*
 * test_stream_perdb.c — the merge of per-database change streams (source/stream/perdb.h): the order events leave in,
 * when the merge waits for a stream, when a clusterTime's group is whole, and the composite resume token.
 *
 * Events are fake (a document {n: "<name>"} with a token {_data: "<name>"}): the merge reads only what the caller
 * tells it (time, txnOpIndex), so each test states exactly which stream showed what.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/stream/perdb.h"

Suite *stream_perdb_merge_suite(void);

static perdb_merge m;

static void setup(void)
{
    perdb_init(&m);
    ck_assert(perdb_add_lane(&m, "a", 1));
    ck_assert(perdb_add_lane(&m, "b", 1));
}

static void teardown(void)
{
    perdb_free(&m);
}

static void add(size_t lane, const char *name, uint32_t secs, uint32_t inc, uint64_t idx)
{
    bson_t *doc = BCON_NEW("n", BCON_UTF8(name));
    bson_t *tok = BCON_NEW("_data", BCON_UTF8(name));
    ck_assert(
        perdb_lane_add(&m, lane, bson_get_data(doc), doc->len, secs, inc, idx, bson_get_data(tok), tok->len, false));
    bson_destroy(doc);
    bson_destroy(tok);
}

/* A batch's end with a post-batch token named name at secs:inc. */
static void end(size_t lane, const char *name, uint32_t secs, uint32_t inc, bool incl)
{
    bson_t *tok = BCON_NEW("_data", BCON_UTF8(name));
    ck_assert(perdb_lane_batch_end(&m, lane, bson_get_data(tok), tok->len, true, secs, inc, incl));
    bson_destroy(tok);
}

/* Pops every event the merge lets go, as "name name ..."; *wait gets the lane to read next. */
static void drain(char *out, size_t len, size_t *wait)
{
    size_t l, used = 0;
    out[0] = '\0';
    while (perdb_next(&m, &l) == PERDB_READY) {
        const perdb_event *e = perdb_head(&m, l);
        bson_t doc;
        bson_iter_t it;
        ck_assert(bson_init_static(&doc, e->doc, e->len) && bson_iter_init_find(&it, &doc, "n"));
        used += (size_t)snprintf(out + used, len - used, "%s%s", used ? " " : "", bson_iter_utf8(&it, NULL));
        perdb_pop(&m, l);
    }
    *wait = l;
}

/* The composite token as relaxed JSON. */
static void token_json(char *out, size_t len)
{
    bson_t t = BSON_INITIALIZER;
    ck_assert(perdb_token(&m, &t));
    char *j = bson_as_relaxed_extended_json(&t, NULL);
    snprintf(out, len, "%s", j);
    bson_free(j);
    bson_destroy(&t);
}

START_TEST(test_waits_for_every_stream)
{
    char got[256];
    size_t wait;
    add(0, "a1", 10, 1, 0);
    add(0, "a2", 12, 1, 0);
    end(0, "pa", 12, 1, false);
    drain(got, sizeof got, &wait);
    ck_assert_str_eq(got, ""); /* b has shown nothing: a1 may not go */
    ck_assert_uint_eq(wait, 1);
    end(1, "pb", 11, 0, true); /* b: nothing up to 11:0 */
    drain(got, sizeof got, &wait);
    ck_assert_str_eq(got, "a1"); /* a2 at 12 waits: b may still hold 11:1 .. 12:1 */
    ck_assert_uint_eq(wait, 1);
    add(1, "b1", 11, 5, 0);
    end(1, "pb2", 11, 5, false);
    drain(got, sizeof got, &wait);
    ck_assert_str_eq(got, "b1");
    ck_assert_uint_eq(wait, 1);
    end(1, "pb3", 13, 0, true);
    drain(got, sizeof got, &wait);
    ck_assert_str_eq(got, "a2");
}
END_TEST

START_TEST(test_transaction_across_databases_in_order)
{
    char got[256];
    size_t wait;
    /* one transaction at 20:1 writing a, b, a, b (txnOpIndex 0..3), then a single write of b at 21:1 */
    add(0, "t0", 20, 1, 0);
    add(0, "t2", 20, 1, 2);
    add(1, "t1", 20, 1, 1);
    add(1, "t3", 20, 1, 3);
    add(1, "b9", 21, 1, 0);
    end(0, "pa", 20, 1, false);
    end(1, "pb", 21, 1, false);
    drain(got, sizeof got, &wait);
    ck_assert_str_eq(got, "t0 t1 t2 t3");
    /* the group at 20:1 is whole only once a shows nothing more there */
    ck_assert(!perdb_passed(&m, 20, 1));
    ck_assert_uint_eq(wait, 0);
    end(0, "pa2", 20, 1, true); /* an empty getMore: a holds nothing more at 20:1 */
    ck_assert(perdb_passed(&m, 20, 1));
    drain(got, sizeof got, &wait);
    ck_assert_str_eq(got, ""); /* b9 at 21:1 waits for a to show 21:1 */
    end(0, "pa3", 22, 0, true);
    drain(got, sizeof got, &wait);
    ck_assert_str_eq(got, "b9");
}
END_TEST

START_TEST(test_composite_token_and_commit)
{
    char got[256], tok[512];
    size_t wait;
    add(0, "a1", 10, 1, 0);
    add(0, "a2", 10, 2, 0);
    end(0, "pa", 10, 2, false);
    end(1, "pb", 30, 0, true);
    token_json(tok, sizeof tok);
    ck_assert_str_eq(tok, "{ \"perdb\" : { \"b\" : { \"_data\" : \"pb\" } } }"); /* a: nothing handed on yet */
    size_t l;
    ck_assert_int_eq(perdb_next(&m, &l), PERDB_READY);
    perdb_pop(&m, l);
    /* a still holds a2: its point is a1's token, not its post-batch token; b's queue is empty: its post-batch token */
    token_json(tok, sizeof tok);
    ck_assert_str_eq(tok, "{ \"perdb\" : { \"a\" : { \"_data\" : \"a1\" }, \"b\" : { \"_data\" : \"pb\" } } }");
    ck_assert(perdb_commit(&m));
    drain(got, sizeof got, &wait);
    ck_assert_str_eq(got, "a2");
    token_json(tok, sizeof tok);
    ck_assert_str_eq(tok, "{ \"perdb\" : { \"a\" : { \"_data\" : \"pa\" }, \"b\" : { \"_data\" : \"pb\" } } }");
    /* a reopening goes back to what was committed (a2 not pushed) */
    ck_assert(perdb_lane_reset(&m, 0));
    const uint8_t *p;
    uint32_t plen;
    perdb_lane_point(&m, 0, &p, &plen);
    bson_t d;
    bson_iter_t it;
    ck_assert(p && bson_init_static(&d, p, plen) && bson_iter_init_find(&it, &d, "_data"));
    ck_assert_str_eq(bson_iter_utf8(&it, NULL), "a1");
    ck_assert_int_eq(perdb_next(&m, &l), PERDB_READ); /* a, reset, must be read again */
    ck_assert_uint_eq(l, 0);
}
END_TEST

START_TEST(test_parse_restores_and_skips_unknown)
{
    perdb_merge n;
    perdb_init(&n);
    ck_assert(perdb_add_lane(&n, "a", 1));
    ck_assert(perdb_add_lane(&n, "c", 1)); /* added to the filter since: no token */
    bson_t *doc =
        BCON_NEW("perdb", "{", "a", "{", "_data", BCON_UTF8("ta"), "}", "b", "{", "_data", BCON_UTF8("tb"), "}", "}");
    bool nomem;
    ck_assert(perdb_parse(&n, bson_get_data(doc), doc->len, &nomem));
    const uint8_t *p;
    uint32_t plen;
    perdb_lane_point(&n, 0, &p, &plen);
    ck_assert_ptr_nonnull(p);
    perdb_lane_point(&n, 1, &p, &plen);
    ck_assert_ptr_null(p);
    bson_destroy(doc);
    doc = BCON_NEW("_data", BCON_UTF8("826B"));
    ck_assert(!perdb_parse(&n, bson_get_data(doc), doc->len, &nomem)); /* a cluster-wide token */
    ck_assert(!nomem);
    bson_destroy(doc);
    perdb_free(&n);
}
END_TEST

START_TEST(test_complete_to_is_the_least_horizon)
{
    uint32_t s, i;
    ck_assert(!perdb_complete_to(&m, &s, &i)); /* nothing shown */
    end(0, "pa", 50, 3, true);
    end(1, "pb", 40, 7, false);
    ck_assert(perdb_complete_to(&m, &s, &i));
    ck_assert_uint_eq(s, 40);
    ck_assert_uint_eq(i, 6); /* b may still hold 40:7 */
    add(1, "b1", 45, 0, 0);
    ck_assert(!perdb_complete_to(&m, &s, &i)); /* an event held */
}
END_TEST

Suite *stream_perdb_merge_suite(void)
{
    Suite *s = suite_create("stream_perdb_merge");
    TCase *tc = tcase_create("perdb_merge");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_waits_for_every_stream);
    tcase_add_test(tc, test_transaction_across_databases_in_order);
    tcase_add_test(tc, test_composite_token_and_commit);
    tcase_add_test(tc, test_parse_restores_and_skips_unknown);
    tcase_add_test(tc, test_complete_to_is_the_least_horizon);
    suite_add_tcase(s, tc);
    return s;
}

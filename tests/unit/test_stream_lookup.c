/*
 * test_stream_lookup.c — change events read with fullDocument "updateLookup" ([mongodb] delete_reconcile): an event
 * without operationType, as Azure Cosmos DB for MongoDB (RU) sends every one, is an upsert of the looked-up document
 * (a delete when the lookup found none); a looked-up document is never taken as an update's post-image.
 */
#include <bson/bson.h>
#include <check.h>
#include <string.h>

#include "source/stream/event.h"

Suite *stream_lookup_suite(void);

static bson_t *from_json(const char *json)
{
    bson_error_t e;
    bson_t *b = bson_new_from_json((const uint8_t *)json, -1, &e);
    ck_assert_msg(b != NULL, "bad test JSON %s: %s", json, e.message);
    return b;
}

static stream_ev_status convert(const char *event, bool lookup, char *err, size_t errlen, bson_t *out)
{
    bson_t *ev = from_json(event);
    bson_init(out);
    stream_ev_status st = stream_event_to_op_ex(ev, out, lookup, err, errlen);
    bson_destroy(ev);
    return st;
}

static void expect_json(const bson_t *got, const char *want_json)
{
    bson_t *want = from_json(want_json);
    char *g = bson_as_canonical_extended_json(got, NULL), *w = bson_as_canonical_extended_json(want, NULL);
    ck_assert_msg(bson_equal(got, want), "got %s, want %s", g, w);
    bson_free(g);
    bson_free(w);
    bson_destroy(want);
}

#define COSMOS_EVENT(full)                                                                                             \
    "{\"_id\": {\"_data\": \"eyJWIjoxfQ==\"}, \"fullDocument\": " full                                                 \
    ", \"ns\": {\"db\": \"shop\", \"coll\": \"c\"}, \"documentKey\": {\"_id\": 1}}"

START_TEST(test_lookup_upsert)
{
    char err[512];
    bson_t out;
    ck_assert_int_eq(convert(COSMOS_EVENT("{\"_id\": 1, \"x\": 2}"), true, err, sizeof err, &out), STREAM_EV_OK);
    expect_json(&out, "{\"op\": \"u\", \"ns\": \"shop.c\", \"o\": {\"_id\": 1, \"x\": 2}, \"o2\": {\"_id\": 1}}");
    bson_destroy(&out);
    /* without lookup the same event is refused, naming the option */
    ck_assert_int_eq(convert(COSMOS_EVENT("{\"_id\": 1, \"x\": 2}"), false, err, sizeof err, &out),
                     STREAM_EV_MALFORMED);
    ck_assert_msg(strstr(err, "no operationType") && strstr(err, "delete_reconcile"), "%s", err);
    bson_destroy(&out);
}
END_TEST

START_TEST(test_lookup_gone)
{
    char err[512];
    bson_t out;
    /* the document was gone when the server looked it up: its row goes */
    ck_assert_int_eq(convert(COSMOS_EVENT("null"), true, err, sizeof err, &out), STREAM_EV_OK);
    expect_json(&out, "{\"op\": \"d\", \"ns\": \"shop.c\", \"o\": {\"_id\": 1}}");
    bson_destroy(&out);
    ck_assert_int_eq(convert("{\"_id\": {\"_data\": \"eyJWIjoxfQ==\"}, \"ns\": {\"db\": \"shop\", \"coll\": \"c\"}, "
                             "\"documentKey\": {\"_id\": 1}}",
                             true, err, sizeof err, &out),
                     STREAM_EV_OK);
    expect_json(&out, "{\"op\": \"d\", \"ns\": \"shop.c\", \"o\": {\"_id\": 1}}");
    bson_destroy(&out);
}
END_TEST

START_TEST(test_lookup_malformed)
{
    char err[512];
    bson_t out;
    ck_assert_int_eq(convert("{\"_id\": {\"_data\": \"eyJWIjoxfQ==\"}, \"fullDocument\": {\"_id\": 1}, \"ns\": "
                             "{\"db\": \"shop\", \"coll\": \"c\"}}",
                             true, err, sizeof err, &out),
                     STREAM_EV_MALFORMED);
    ck_assert_msg(strstr(err, "documentKey"), "%s", err);
    bson_destroy(&out);
    ck_assert_int_eq(convert("{\"_id\": {\"_data\": \"eyJWIjoxfQ==\"}, \"fullDocument\": {\"_id\": 1}, "
                             "\"documentKey\": {\"_id\": 1}}",
                             true, err, sizeof err, &out),
                     STREAM_EV_MALFORMED);
    bson_destroy(&out);
}
END_TEST

/* With lookup, fullDocument is the document as it is now, not as the update left it: an ambiguous update is refused
 * as without a post-image. */
START_TEST(test_lookup_not_a_post_image)
{
    char err[1024];
    bson_t out;
    const char *ev = "{\"_id\": {\"_data\": \"82\"}, \"operationType\": \"update\", \"clusterTime\": {\"$timestamp\": "
                     "{\"t\": 5, \"i\": 1}}, \"ns\": {\"db\": \"shop\", \"coll\": \"c\"}, \"documentKey\": {\"_id\": "
                     "7}, \"updateDescription\": {\"updatedFields\": {\"a.b\": 1}, \"removedFields\": []}, "
                     "\"fullDocument\": {\"_id\": 7, \"a\": {\"b\": 2}}}";
    ck_assert_int_eq(convert(ev, true, err, sizeof err, &out), STREAM_EV_AMBIGUOUS);
    bson_destroy(&out);
    ck_assert_int_eq(convert(ev, false, err, sizeof err, &out), STREAM_EV_OK); /* a post-image: taken */
    bson_destroy(&out);
}
END_TEST

Suite *stream_lookup_suite(void)
{
    Suite *s = suite_create("stream_lookup");
    TCase *tc = tcase_create("lookup");
    tcase_add_test(tc, test_lookup_upsert);
    tcase_add_test(tc, test_lookup_gone);
    tcase_add_test(tc, test_lookup_malformed);
    tcase_add_test(tc, test_lookup_not_a_post_image);
    suite_add_tcase(s, tc);
    return s;
}

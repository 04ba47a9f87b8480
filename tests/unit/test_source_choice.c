/*
 * test_source_choice.c — [mongodb] source decided from what a server offers (daemon/source_choice.h), and the
 * clusterTime read from a resume token's head (source/stream/caps.h).
 */
#include <check.h>
#include <string.h>

#include "copy/copy.h"
#include "daemon/source_choice.h"
#include "source/stream/caps.h"

static void cap(stream_cap *c, bool yes, const char *why)
{
    c->probed = true;
    c->yes = yes;
    snprintf(c->why, sizeof c->why, "%s", why);
}

/* A server as a probe would find it: the oplog readable or refused, change streams opening or not. */
static stream_caps server(bool oplog, bool streams, bool raw)
{
    stream_caps c;
    memset(&c, 0, sizeof c);
    cap(&c.oplog, oplog, oplog ? "" : "not authorized on local to execute command { find: \"oplog.rs\" }");
    cap(&c.streams, streams, streams ? "" : "$changeStream is not supported");
    cap(&c.raw_updates, raw, raw ? "" : "BSON field '$changeStream.showRawUpdateDescription' is an unknown field.");
    return c;
}

START_TEST(test_auto_prefers_the_oplog)
{
    stream_caps c = server(true, true, true);
    source_kind k = SOURCE_CHANGE_STREAM;
    char note[600];
    ck_assert(source_choose(CONFIG_SOURCE_AUTO, CONFIG_STREAM_UPDATES_AUTO, &c, &k, note, sizeof note));
    ck_assert_int_eq(k, SOURCE_OPLOG);
    ck_assert_str_eq(source_kind_name(k), "oplog");
    /* a server without change streams: still the oplog */
    c = server(true, false, false);
    ck_assert(source_choose(CONFIG_SOURCE_AUTO, CONFIG_STREAM_UPDATES_RAW, &c, &k, note, sizeof note));
    ck_assert_int_eq(k, SOURCE_OPLOG);
}
END_TEST

/* The oplog refused (Atlas shared tiers, DocumentDB, no access to local): auto reads a change stream, and says why. */
START_TEST(test_auto_falls_back_to_a_stream)
{
    stream_caps c = server(false, true, false);
    source_kind k = SOURCE_OPLOG;
    char note[600];
    ck_assert(source_choose(CONFIG_SOURCE_AUTO, CONFIG_STREAM_UPDATES_AUTO, &c, &k, note, sizeof note));
    ck_assert_int_eq(k, SOURCE_CHANGE_STREAM);
    ck_assert_str_eq(source_kind_name(k), "change_stream");
    ck_assert_msg(strstr(note, "not authorized on local") != NULL, "%s", note);
    /* description is always possible */
    ck_assert(source_choose(CONFIG_SOURCE_AUTO, CONFIG_STREAM_UPDATES_DESCRIPTION, &c, &k, note, sizeof note));
    /* raw needs showRawUpdateDescription */
    ck_assert(!source_choose(CONFIG_SOURCE_AUTO, CONFIG_STREAM_UPDATES_RAW, &c, &k, note, sizeof note));
    ck_assert_msg(strstr(note, "showRawUpdateDescription") != NULL && strstr(note, "unknown field") != NULL, "%s",
                  note);
}
END_TEST

START_TEST(test_neither_names_both_refusals)
{
    stream_caps c = server(false, false, false);
    source_kind k;
    char note[600];
    ck_assert(!source_choose(CONFIG_SOURCE_AUTO, CONFIG_STREAM_UPDATES_AUTO, &c, &k, note, sizeof note));
    ck_assert_msg(strstr(note, "not authorized on local") != NULL, "%s", note);
    ck_assert_msg(strstr(note, "$changeStream is not supported") != NULL, "%s", note);
}
END_TEST

/* A source asked for by name is taken only where it works; the message says what to change. */
START_TEST(test_named_source)
{
    source_kind k;
    char note[600];
    stream_caps c = server(false, true, true);
    ck_assert(!source_choose(CONFIG_SOURCE_OPLOG, CONFIG_STREAM_UPDATES_AUTO, &c, &k, note, sizeof note));
    ck_assert_msg(strstr(note, "source = change_stream") != NULL, "%s", note);
    ck_assert(source_choose(CONFIG_SOURCE_CHANGE_STREAM, CONFIG_STREAM_UPDATES_RAW, &c, &k, note, sizeof note));
    ck_assert_int_eq(k, SOURCE_CHANGE_STREAM);
    c = server(true, false, false);
    ck_assert(source_choose(CONFIG_SOURCE_OPLOG, CONFIG_STREAM_UPDATES_AUTO, &c, &k, note, sizeof note));
    ck_assert_int_eq(k, SOURCE_OPLOG);
    ck_assert(!source_choose(CONFIG_SOURCE_CHANGE_STREAM, CONFIG_STREAM_UPDATES_AUTO, &c, &k, note, sizeof note));
    ck_assert_msg(strstr(note, "$changeStream is not supported") != NULL, "%s", note);
    /* a probe that did not get as far as the oplog leaves source = oplog to the reader */
    memset(&c, 0, sizeof c);
    ck_assert(source_choose(CONFIG_SOURCE_OPLOG, CONFIG_STREAM_UPDATES_AUTO, &c, &k, note, sizeof note));
    ck_assert_int_eq(k, SOURCE_OPLOG);
}
END_TEST

/* On a sharded cluster's routers, local.oplog.rs is refused by the router itself: auto keeps the shards' oplogs. */
START_TEST(test_router_keeps_the_shards_oplogs)
{
    stream_caps c = server(false, true, true);
    c.router = true;
    source_kind k = SOURCE_CHANGE_STREAM;
    char note[600];
    ck_assert(source_choose(CONFIG_SOURCE_AUTO, CONFIG_STREAM_UPDATES_AUTO, &c, &k, note, sizeof note));
    ck_assert_int_eq(k, SOURCE_OPLOG);
    ck_assert(source_choose(CONFIG_SOURCE_OPLOG, CONFIG_STREAM_UPDATES_AUTO, &c, &k, note, sizeof note));
    ck_assert(source_choose(CONFIG_SOURCE_CHANGE_STREAM, CONFIG_STREAM_UPDATES_AUTO, &c, &k, note, sizeof note));
    ck_assert_int_eq(k, SOURCE_CHANGE_STREAM);
}
END_TEST

/* The token's head: 0x82 then seconds and increment big-endian (bytes 1..8); an opaque token has no time. */
START_TEST(test_token_time)
{
    bson_t *t = BCON_NEW("_data", BCON_UTF8("8263A1B2C3000000052B042C0100296E5A1004"));
    op_pos p;
    ck_assert(stream_token_time(bson_get_data(t), t->len, &p));
    ck_assert_uint_eq(p.secs, 0x63A1B2C3u);
    ck_assert_uint_eq(p.inc, 5);
    ck_assert_int_eq(p.term, -1);
    bson_destroy(t);
    t = BCON_NEW("_data", BCON_UTF8("82ffffffff0000000a"), "_typeBits",
                 BCON_BIN(BSON_SUBTYPE_BINARY, (uint8_t *)"\x01", 1));
    ck_assert(stream_token_time(bson_get_data(t), t->len, &p));
    ck_assert_uint_eq(p.secs, 0xffffffffu);
    ck_assert_uint_eq(p.inc, 10);
    bson_destroy(t);
    const char *opaque[] = {"82F54892F8B8", "AeARBpQ/AAAA", "0163A1B2C3000000052B04", "8263A1B2C30000000G2B04"};
    for (size_t i = 0; i < sizeof opaque / sizeof *opaque; i++) {
        t = BCON_NEW("_data", BCON_UTF8(opaque[i]));
        ck_assert_msg(!stream_token_time(bson_get_data(t), t->len, &p), "%s", opaque[i]);
        bson_destroy(t);
    }
    t = BCON_NEW("other", BCON_UTF8("8263A1B2C3000000052B04"));
    ck_assert(!stream_token_time(bson_get_data(t), t->len, &p));
    bson_destroy(t);
    ck_assert(!stream_token_time(NULL, 0, &p));
}
END_TEST

/* The checkpoint just before a stream position: a stream started after it (its increment + 1) starts there. */
START_TEST(test_pos_before)
{
    op_pos p = {100, 5, 7}, b = copy_pos_before(&p);
    ck_assert_uint_eq(b.secs, 100);
    ck_assert_uint_eq(b.inc, 4);
    ck_assert_int_eq(b.term, -1);
    p = (op_pos){100, 0, -1};
    b = copy_pos_before(&p);
    ck_assert_uint_eq(b.secs, 99);
    ck_assert_uint_eq(b.inc, UINT32_MAX);
    ck_assert_int_lt(op_pos_cmp(&b, &p), 0);
    p = (op_pos){0, 0, -1};
    b = copy_pos_before(&p);
    ck_assert_uint_eq(b.secs, 0);
    ck_assert_uint_eq(b.inc, 0);
}
END_TEST

Suite *source_choice_suite(void); /* called by the generated runner list */

Suite *source_choice_suite(void)
{
    Suite *s = suite_create("source_choice");
    TCase *tc = tcase_create("choice");
    tcase_add_test(tc, test_auto_prefers_the_oplog);
    tcase_add_test(tc, test_auto_falls_back_to_a_stream);
    tcase_add_test(tc, test_neither_names_both_refusals);
    tcase_add_test(tc, test_named_source);
    tcase_add_test(tc, test_router_keeps_the_shards_oplogs);
    tcase_add_test(tc, test_token_time);
    tcase_add_test(tc, test_pos_before);
    suite_add_tcase(s, tc);
    return s;
}

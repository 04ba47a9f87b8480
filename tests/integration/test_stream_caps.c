/*
 * test_stream_caps.c — the capability probe of source/stream/caps.h against the server in MONGO_URI (mongosim, or a
 * real replica set), and the source `auto` resolves to there.
 *
 * Both kinds of server are held to what they document: a replica set member answers a find on local.oplog.rs; a
 * server that serves change streams (MongoDB 4.0.7+; docs/change_streams.md) sends a postBatchResumeToken on an
 * empty first batch (jstests/change_streams/report_post_batch_resume_token.js) whose clusterTime is the present,
 * and refuses a start before its oldest history with ChangeStreamHistoryLost (286); a server that does not (mongosim
 * before it serves them) is reported as such with its own message, every option then "not tried".
 */
#include <check.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "copy/copy.h"
#include "daemon/config.h"
#include "daemon/exitcodes.h"
#include "daemon/source_choice.h"
#include "source/mongo_client.h"
#include "source/oplog_edge.h"
#include "source/stream/caps.h"

static mongoc_client_t *client(void)
{
    const char *uri = getenv("MONGO_URI");
    ck_assert_msg(uri != NULL, "MONGO_URI is not set: run through tests/integration/run.sh");
    char err[512];
    mongo_client_opts mo = {.appname = "oplog2pg-test"};
    mongoc_client_t *c = mongo_client_open(uri, &mo, err, sizeof err);
    ck_assert_msg(c != NULL, "%s", err);
    return c;
}

static void expect_not_tried(const stream_cap *c, const char *what)
{
    ck_assert_msg(!c->yes && !c->probed, "%s: tried without a stream", what);
    ck_assert_msg(strcmp(c->why, "no change stream opens") == 0, "%s: %s", what, c->why);
}

START_TEST(test_probe)
{
    mongoc_client_t *c = client();
    stream_caps caps;
    char err[512];
    ck_assert_int_eq(stream_caps_probe(c, &caps, err, sizeof err), STREAM_CAPS_OK);
    ck_assert_msg(caps.version[0] != '\0', "no server version");
    ck_assert(!caps.router);
    ck_assert_msg(caps.oplog.probed && caps.oplog.yes, "the oplog of a replica set member: %s", caps.oplog.why);
    ck_assert(caps.streams.probed);
    if (caps.streams.yes) {
        ck_assert_msg(caps.pbrt.yes, "%s", caps.pbrt.why);
        ck_assert_ptr_nonnull(caps.token);
        ck_assert(caps.have_time);
        /* the stream's present is no earlier than the newest entry of the oplog read just before */
        op_pos newest;
        bool found;
        ck_assert(oplog_edge(c, -1, &newest, &found, err, sizeof err));
        if (found)
            ck_assert_msg(caps.time.secs >= newest.secs, "the stream's time %u is before the oplog's newest %u",
                          caps.time.secs, newest.secs);
        ck_assert(caps.start_after.probed);
        ck_assert(caps.expanded_events.probed);
        ck_assert(caps.raw_updates.probed);
        ck_assert(caps.split_events.probed);
    } else {
        ck_assert_msg(caps.streams.why[0] != '\0', "a refused stream without the server's message");
        ck_assert_ptr_null(caps.token);
        expect_not_tried(&caps.pbrt, "pbrt");
        expect_not_tried(&caps.start_after, "startAfter");
        expect_not_tried(&caps.expanded_events, "showExpandedEvents");
        expect_not_tried(&caps.raw_updates, "showRawUpdateDescription");
        expect_not_tried(&caps.split_events, "split");
    }
    ck_assert(caps.images.probed);

    /* auto reads the oplog here, whatever the streams */
    source_kind k = SOURCE_CHANGE_STREAM;
    char note[1024];
    ck_assert_msg(source_choose(CONFIG_SOURCE_AUTO, CONFIG_STREAM_UPDATES_AUTO, &caps, &k, note, sizeof note), "%s",
                  note);
    ck_assert_int_eq(k, SOURCE_OPLOG);
    /* change_stream is taken exactly where a stream opens */
    bool ok = source_choose(CONFIG_SOURCE_CHANGE_STREAM, CONFIG_STREAM_UPDATES_AUTO, &caps, &k, note, sizeof note);
    ck_assert_msg(ok == caps.streams.yes, "%s", note);
    stream_caps_free(&caps);
    mongoc_client_destroy(c);
}
END_TEST

/* A collection created with changeStreamPreAndPostImages is found (where the server accepts the option). */
START_TEST(test_images)
{
    mongoc_client_t *c = client();
    mongoc_database_t *db = mongoc_client_get_database(c, "capsdb");
    bson_error_t e;
    (void)mongoc_database_drop(db, &e);
    bson_t *opts = BCON_NEW("changeStreamPreAndPostImages", "{", "enabled", BCON_BOOL(true), "}");
    mongoc_collection_t *coll = mongoc_database_create_collection(db, "imaged", opts, &e);
    bson_destroy(opts);
    stream_caps caps;
    char err[512];
    ck_assert_int_eq(stream_caps_probe(c, &caps, err, sizeof err), STREAM_CAPS_OK);
    ck_assert(caps.images.probed);
    if (coll != NULL) {
        ck_assert_msg(caps.images.yes, "%s", caps.images.why);
        ck_assert_str_eq(caps.images.why, "capsdb.imaged");
        mongoc_collection_destroy(coll);
    } else {
        /* refused (mongosim has no images): then nothing has them */
        ck_assert_msg(!caps.images.yes, "%s", caps.images.why);
    }
    stream_caps_free(&caps);
    (void)mongoc_database_drop(db, &e);
    mongoc_database_destroy(db);
    mongoc_client_destroy(c);
}
END_TEST

/* A stream opened at a time the server still holds starts; one before its history is lost (286); a server without
 * streams refuses both, with its message. */
START_TEST(test_start_at)
{
    mongoc_client_t *c = client();
    stream_caps caps;
    char err[512], why[256];
    ck_assert_int_eq(stream_caps_probe(c, &caps, err, sizeof err), STREAM_CAPS_OK);
    op_pos ancient = {1, 1, -1};
    op_pos now;
    bool pbrt;
    uint8_t *tok;
    size_t tok_len;
    if (caps.streams.yes) {
        ck_assert_msg(stream_caps_start_at(c, &caps.time, why, sizeof why) == STREAM_START_OK, "%s", why);
        ck_assert_msg(stream_caps_start_at(c, &ancient, why, sizeof why) == STREAM_START_LOST, "%s", why);
        ck_assert_msg(stream_caps_now(c, &now, &pbrt, &tok, &tok_len, why, sizeof why) == STREAM_START_OK, "%s", why);
        ck_assert(op_pos_cmp(&now, &caps.time) >= 0);
        ck_assert(pbrt == (tok != NULL));
        if (tok != NULL) {
            op_pos t;
            ck_assert(stream_token_time(tok, tok_len, &t));
            ck_assert(op_pos_cmp(&t, &now) == 0);
        }
        free(tok);
    } else {
        ck_assert_int_eq(stream_caps_start_at(c, &ancient, why, sizeof why), STREAM_START_REFUSED);
        ck_assert_msg(why[0] != '\0', "no message");
        ck_assert_int_eq(stream_caps_now(c, &now, &pbrt, &tok, &tok_len, why, sizeof why), STREAM_START_REFUSED);
        ck_assert_ptr_null(tok);
    }
    stream_caps_free(&caps);
    mongoc_client_destroy(c);
}
END_TEST

/* The initial copy's start without an oplog: the position before the stream's post-batch resume token, with that
 * token; a server without change streams is a setup to fix (no retry), and a copy asked to run there is refused
 * before it copies anything. */
START_TEST(test_copy_start)
{
    mongoc_client_t *c = client();
    stream_caps caps;
    char err[512];
    ck_assert_int_eq(stream_caps_probe(c, &caps, err, sizeof err), STREAM_CAPS_OK);
    op_pos start;
    uint8_t *tok = NULL;
    size_t tok_len = 0;
    bool retry = true;
    bool ok = copy_stream_start(c, &start, &tok, &tok_len, &retry, err, sizeof err);
    ck_assert_msg(ok == caps.streams.yes, "%s", err);
    if (ok) {
        ck_assert_int_eq(start.term, -1);
        if (tok != NULL) {
            op_pos t;
            ck_assert(stream_token_time(tok, tok_len, &t));
            op_pos before = copy_pos_before(&t);
            ck_assert(op_pos_cmp(&start, &before) == 0);
        }
        ck_assert_msg(stream_caps_start_at(c, &start, err, sizeof err) == STREAM_START_OK, "%s", err);
    } else {
        ck_assert(!retry);
        ck_assert_ptr_null(tok);
        ck_assert_msg(strstr(err, "no change stream opens") != NULL, "%s", err);
        /* the copy itself stops at once, refused: nothing to retry */
        const char *pg = getenv("OPLOG2PG_TEST_PG");
        if (pg != NULL) {
            op_pos s0;
            copy_config cc = {.mongo_uri = getenv("MONGO_URI"),
                              .pg_conninfo = pg,
                              .service = "t_stream_copy",
                              .workers = 1,
                              .change_stream = true,
                              .start_token = &tok,
                              .start_token_len = &tok_len};
            ck_assert_int_eq(copy_run(&cc, &s0, err, sizeof err), COPY_REFUSED);
            ck_assert_msg(strstr(err, "no change stream opens") != NULL, "%s", err);
            ck_assert_ptr_null(tok);
        }
    }
    free(tok);
    stream_caps_free(&caps);
    mongoc_client_destroy(c);
}
END_TEST

/* A rename between two stream positions is seen (the copy lists its collections again from a later start), and none
 * where none happened; a server without streams cannot tell, and says so. */
START_TEST(test_renames)
{
    mongoc_client_t *c = client();
    stream_caps caps;
    char err[512];
    ck_assert_int_eq(stream_caps_probe(c, &caps, err, sizeof err), STREAM_CAPS_OK);
    bson_error_t e;
    mongoc_collection_t *coll = mongoc_client_get_collection(c, "capsren", "r1");
    (void)mongoc_collection_drop(coll, &e);
    bson_t *doc = BCON_NEW("_id", BCON_INT32(1));
    ck_assert_msg(mongoc_collection_insert_one(coll, doc, NULL, NULL, &e), "%s", e.message);
    bson_destroy(doc);
    op_pos a = {1, 0, -1}, b = a, d = a;
    bool retry, renamed = true;
    if (caps.streams.yes) {
        ck_assert_msg(copy_stream_start(c, &a, NULL, NULL, &retry, err, sizeof err), "%s", err);
        ck_assert_msg(mongoc_collection_rename(coll, "capsren", "r2", true, &e), "%s", e.message);
        ck_assert_msg(copy_stream_start(c, &b, NULL, NULL, &retry, err, sizeof err), "%s", err);
        ck_assert_msg(stream_renames_between(c, &a, &b, &renamed, err, sizeof err), "%s", err);
        ck_assert(renamed);
        doc = BCON_NEW("_id", BCON_INT32(2));
        ck_assert_msg(mongoc_collection_insert_one(coll, doc, NULL, NULL, &e), "%s", e.message);
        bson_destroy(doc);
        ck_assert_msg(copy_stream_start(c, &d, NULL, NULL, &retry, err, sizeof err), "%s", err);
        ck_assert_msg(stream_renames_between(c, &b, &d, &renamed, err, sizeof err), "%s", err);
        ck_assert(!renamed);
    } else {
        ck_assert(!stream_renames_between(c, &a, &b, &renamed, err, sizeof err));
        ck_assert(!renamed);
        ck_assert_msg(err[0] != '\0', "no reason given");
    }
    mongoc_database_t *db = mongoc_client_get_database(c, "capsren");
    (void)mongoc_database_drop(db, &e);
    mongoc_database_destroy(db);
    mongoc_collection_destroy(coll);
    stream_caps_free(&caps);
    mongoc_client_destroy(c);
}
END_TEST

static void config_with(config *cfg, const char *uri, const char *source)
{
    char err[512];
    ck_assert(config_init_defaults(cfg));
    ck_assert_msg(config_override(cfg, "mongodb", "uri", uri, err, sizeof err), "%s", err);
    ck_assert_msg(config_override(cfg, "mongodb", "source", source, err, sizeof err), "%s", err);
}

/* At start: auto resolves to what the server offers, a named source that cannot work stops with the configuration's
 * exit code, and an unreachable server leaves the source the checkpoint was committed from. */
START_TEST(test_resolve)
{
    const char *uri = getenv("MONGO_URI");
    ck_assert_ptr_nonnull(uri);
    mongoc_client_t *c = client();
    stream_caps caps;
    char err[512];
    ck_assert_int_eq(stream_caps_probe(c, &caps, err, sizeof err), STREAM_CAPS_OK);
    mongoc_client_destroy(c);
    config cfg;
    source_kind k = SOURCE_CHANGE_STREAM;
    config_with(&cfg, uri, "auto");
    ck_assert_int_eq(source_resolve(&cfg, "", &k), -1);
    ck_assert_int_eq(k, SOURCE_OPLOG);
    config_free(&cfg);
    config_with(&cfg, uri, "change_stream");
    ck_assert_int_eq(source_resolve(&cfg, "oplog", &k), caps.streams.yes ? -1 : EXIT_CONFIG);
    if (caps.streams.yes)
        ck_assert_int_eq(k, SOURCE_CHANGE_STREAM);
    config_free(&cfg);

    const char *nowhere = "mongodb://127.0.0.1:1/?replicaSet=rs0&serverSelectionTimeoutMS=300";
    config_with(&cfg, nowhere, "oplog");
    ck_assert_int_eq(source_resolve(&cfg, "", &k), -1); /* nothing to ask */
    ck_assert_int_eq(k, SOURCE_OPLOG);
    config_free(&cfg);
    config_with(&cfg, nowhere, "auto");
    ck_assert_int_eq(source_resolve(&cfg, "", &k), EXIT_FAILURE_GENERIC);
    k = SOURCE_OPLOG;
    ck_assert_int_eq(source_resolve(&cfg, "change_stream", &k), -1);
    ck_assert_int_eq(k, SOURCE_CHANGE_STREAM);
    config_free(&cfg);
    stream_caps_free(&caps);
}
END_TEST

/* A server that cannot be reached fails the probe for a retry; it is not taken for one without an oplog. */
START_TEST(test_unreachable_is_a_retry)
{
    char err[512];
    mongo_client_opts mo = {.appname = "oplog2pg-test", .server_selection_timeout_ms = 500};
    mongoc_client_t *c = mongo_client_open("mongodb://127.0.0.1:1/?replicaSet=rs0", &mo, err, sizeof err);
    ck_assert_msg(c != NULL, "%s", err);
    stream_caps caps;
    ck_assert_int_eq(stream_caps_probe(c, &caps, err, sizeof err), STREAM_CAPS_RETRY);
    ck_assert(!caps.oplog.probed);
    ck_assert_msg(strstr(err, "selecting a server") != NULL, "%s", err);
    stream_caps_free(&caps);
    mongoc_client_destroy(c);
}
END_TEST

Suite *stream_caps_suite(void); /* called by the generated runner list */

Suite *stream_caps_suite(void)
{
    Suite *s = suite_create("stream_caps");
    TCase *tc = tcase_create("caps");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_probe);
    tcase_add_test(tc, test_images);
    tcase_add_test(tc, test_start_at);
    tcase_add_test(tc, test_copy_start);
    tcase_add_test(tc, test_resolve);
    tcase_add_test(tc, test_renames);
    tcase_add_test(tc, test_unreachable_is_a_retry);
    suite_add_tcase(s, tc);
    return s;
}

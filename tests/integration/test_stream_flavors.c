/*
 * test_stream_flavors.c — the daemon against servers that differ from MongoDB, played by mongosim --flavor
 * (tests/mongosim/README.md "Flavors"): an Atlas shared tier (the oplog closed but for an equality on ns), Amazon
 * DocumentDB (change streams enabled by modifyChangeStreams, no post-batch resume token, opaque tokens, startAfter
 * refused) and Azure Cosmos DB for MongoDB RU (no operationType, no delete events).
 */
#include <check.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/daemonenv.h"
#include "../lib/proc.h"
#include "../lib/skip.h"
#include "copy/copy.h"
#include "daemon/exitcodes.h"
#include "source/stream/caps.h"

Suite *stream_flavors_suite(void);

#define WAIT_S 60

/* Inserts, updates (fields set and removed, an array set and grown), replaces and deletes in two collections, and a
 * transaction over both. */
static void mixed_workload(const denv *e, const char *db, int round)
{
    int base = round * 1000;
    denv_insert_range(e, db, "a", base + 1, base + 40);
    denv_insert_range(e, db, "b", base + 1, base + 10);
    mongoc_client_t *c = mongoc_client_new(e->uri);
    ck_assert_ptr_nonnull(c);
    mongoc_collection_t *a = mongoc_client_get_collection(c, db, "a");
    bson_error_t err;
    for (int i = base + 1; i <= base + 40; i++) {
        bson_t *q = BCON_NEW("_id", BCON_INT32(i)), *u;
        switch (i % 5) {
        case 0:
            u = BCON_NEW("$set", "{", "n.x", BCON_INT32(i), "arr", "[", BCON_INT32(1), BCON_INT32(2), "]", "}");
            break;
        case 1:
            u = BCON_NEW("$unset", "{", "s", BCON_UTF8(""), "}");
            break;
        case 2:
            u = BCON_NEW("$push", "{", "arr", BCON_INT32(7), "}");
            break;
        default:
            u = NULL;
        }
        bool ok = true;
        if (u != NULL) {
            ok = mongoc_collection_update_one(a, q, u, NULL, NULL, &err);
            bson_destroy(u);
        } else if (i % 5 == 3) {
            bson_t *r = BCON_NEW("_id", BCON_INT32(i), "replaced", BCON_BOOL(true));
            ok = mongoc_collection_replace_one(a, q, r, NULL, NULL, &err);
            bson_destroy(r);
        } else {
            ok = mongoc_collection_delete_one(a, q, NULL, NULL, &err);
        }
        bson_destroy(q);
        ck_assert_msg(ok, "%s", err.message);
    }
    /* a transaction across both collections: an insert, an update and a delete, committed together */
    mongoc_collection_t *b = mongoc_client_get_collection(c, db, "b");
    mongoc_client_session_t *ses = mongoc_client_start_session(c, NULL, &err);
    ck_assert_msg(ses != NULL, "%s", err.message);
    ck_assert_msg(mongoc_client_session_start_transaction(ses, NULL, &err), "%s", err.message);
    bson_t opts = BSON_INITIALIZER;
    ck_assert_msg(mongoc_client_session_append(ses, &opts, &err), "%s", err.message);
    bson_t *doc = BCON_NEW("_id", BCON_INT32(base + 500), "in", BCON_UTF8("txn"));
    ck_assert_msg(mongoc_collection_insert_one(a, doc, &opts, NULL, &err), "%s", err.message);
    bson_destroy(doc);
    bson_t *q = BCON_NEW("_id", BCON_INT32(base + 2)), *u = BCON_NEW("$set", "{", "txn", BCON_BOOL(true), "}");
    ck_assert_msg(mongoc_collection_update_one(b, q, u, &opts, NULL, &err), "%s", err.message);
    bson_destroy(q);
    bson_destroy(u);
    q = BCON_NEW("_id", BCON_INT32(base + 3));
    ck_assert_msg(mongoc_collection_delete_one(b, q, &opts, NULL, &err), "%s", err.message);
    bson_destroy(q);
    bson_destroy(&opts);
    bson_t reply;
    ck_assert_msg(mongoc_client_session_commit_transaction(ses, &reply, &err), "%s", err.message);
    bson_destroy(&reply);
    mongoc_client_session_destroy(ses);
    mongoc_collection_destroy(b);
    mongoc_collection_destroy(a);
    mongoc_client_destroy(c);
}

/* An Atlas shared tier: `auto` finds the oplog refused (a find on local.oplog.rs without an equality on ns) and
 * reads a change stream, exactly. */
START_TEST(test_atlas_shared)
{
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim --flavor atlas-shared");
    const char *sim_args[] = {"--flavor", "atlas-shared", NULL};
    denv e;
    denv_start(&e, "flatlas", sim_args, NULL);
    char db[64];
    snprintf(db, sizeof db, "%s_a", e.prefix);
    mixed_workload(&e, db, 0);
    denv_daemon_start(&e);
    ck_assert_msg(denv_wait_log(&e, "source = auto: the oplog cannot be read", WAIT_S), "no change stream chosen");
    ck_assert(denv_file_contains(e.log, "AtlasError") || denv_file_contains(e.log, "not allowed"));
    denv_wait_hello_caught_up(&e, WAIT_S);
    ck_assert_msg(denv_wait_log(&e, "ready:", WAIT_S), "the daemon did not get ready");
    mixed_workload(&e, db, 1);
    denv_wait_hello_caught_up(&e, WAIT_S);
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* DocumentDB: refused with a message naming modifyChangeStreams until the user enables change streams; then a
 * mixed workload replicates exactly, with the events' own clusterTime as the position (the tokens are opaque). The
 * server sends no post-batch resume token, so a quiet stream's position stays at its last event while the server's
 * newest operation moves on (docs/sources.md says so). This one starts with --skip-import; test_documentdb_copy
 * runs the initial copy there. */
START_TEST(test_documentdb)
{
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim --flavor documentdb");
    const char *sim_args[] = {"--flavor", "documentdb", NULL};
    denv e;
    denv_start(&e, "fldocdb", sim_args, NULL);
    char db[64];
    snprintf(db, sizeof db, "%s_a", e.prefix);
    denv_insert_range(&e, db, "before", 1, 5);
    denv_daemon_start(&e);
    ck_assert_msg(proc_wait(&e.daemon, WAIT_S), "the daemon did not stop");
    int code = proc_exit_code(&e.daemon);
    e.daemon.pid = 0;
    if (code == 0 || !denv_file_contains(e.log, "modifyChangeStreams: 1"))
        denv_show_log(&e);
    ck_assert_int_ne(code, 0);
    ck_assert_msg(denv_file_contains(e.log, "modifyChangeStreams: 1"), "no message naming modifyChangeStreams");
    /* `check` says the same, and exits with the configuration code */
    char out[400];
    snprintf(out, sizeof out, "%s/check.out", e.dir);
    const char *check[] = {"-c", e.ini, "check", NULL};
    ck_assert_int_eq(denv_run_command(&e, check, out), EXIT_CONFIG);
    ck_assert_msg(denv_file_contains(out, "modifyChangeStreams: 1"), "check does not name modifyChangeStreams");
    ck_assert_msg(denv_file_contains(out, "Amazon DocumentDB: change streams are enabled with modifyChangeStreams"),
                  "check does not say DocumentDB");
    denv_command(&e, "admin",
                 BCON_NEW("modifyChangeStreams", BCON_INT32(1), "database", BCON_UTF8(""), "collection", BCON_UTF8(""),
                          "enable", BCON_BOOL(true)));
    denv_drop_collection(&e, db, "before");
    const char *skip[] = {"--skip-import", NULL};
    denv_daemon_start_args(&e, skip, NULL);
    ck_assert_msg(denv_wait_log(&e, "ready:", WAIT_S), "the daemon did not get ready");
    ck_assert(denv_file_contains(e.log, "post-batch resume tokens no"));
    mixed_workload(&e, db, 0);
    mixed_workload(&e, db, 1);
    denv_wait_hello_caught_up(&e, WAIT_S);
    denv_expect_match_prefix(&e, db);
    /* Quiet: an oplog note moves the server's newest operation but is no event; without a post-batch resume token
     * nothing tells the daemon, so its position stays. */
    uint64_t at = denv_checkpoint_ts(e.service);
    denv_command(&e, "admin", BCON_NEW("appendOplogNote", BCON_INT32(1), "data", "{", "msg", BCON_UTF8("quiet"), "}"));
    ck_assert_uint_gt(denv_hello_newest_ts(e.uri), at);
    sleep(3);
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), at);
    /* the next event moves it again */
    denv_insert_range(&e, db, "a", 5001, 5001);
    denv_wait_hello_caught_up(&e, WAIT_S);
    denv_expect_match_prefix(&e, db);
    denv_stop(&e);
}
END_TEST

/* DocumentDB, where no post-batch resume token says how far a stream has read: a rename between two positions
 * (operationTime) is found, and none where none happened, whether the search ends on an event past the end (a write
 * came after it) or on an awaited empty batch (nothing did). */
START_TEST(test_documentdb_renames)
{
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim --flavor documentdb");
    const char *sim_args[] = {"--flavor", "documentdb", NULL};
    denv e;
    denv_start(&e, "fldocren", sim_args, NULL);
    denv_command(&e, "admin",
                 BCON_NEW("modifyChangeStreams", BCON_INT32(1), "database", BCON_UTF8(""), "collection", BCON_UTF8(""),
                          "enable", BCON_BOOL(true)));
    char db[64], err[512];
    snprintf(db, sizeof db, "%s_a", e.prefix);
    denv_insert_range(&e, db, "r1", 1, 3);
    mongoc_client_t *c = mongoc_client_new(e.uri);
    ck_assert_ptr_nonnull(c);
    op_pos a, b, d, f;
    uint8_t *tok = (uint8_t *)"not set";
    size_t tok_len;
    bool retry, renamed = false;
    ck_assert_msg(copy_stream_start(c, &a, &tok, &tok_len, &retry, err, sizeof err), "%s", err);
    ck_assert_ptr_null(tok); /* no post-batch resume token: the start is the reply's operationTime */
    denv_rename(&e, db, "r1", db, "r2", false);
    denv_insert_range(&e, db, "o", 1, 2);
    ck_assert_msg(copy_stream_start(c, &b, NULL, NULL, &retry, err, sizeof err), "%s", err);
    ck_assert(op_pos_cmp(&b, &a) > 0);
    ck_assert_msg(stream_renames_between(c, &a, &b, &renamed, err, sizeof err), "%s", err);
    ck_assert_msg(renamed, "the rename was not found");
    /* no rename in (b, d]; a write after d ends the search */
    denv_insert_range(&e, db, "o", 3, 4);
    ck_assert_msg(copy_stream_start(c, &d, NULL, NULL, &retry, err, sizeof err), "%s", err);
    denv_insert_range(&e, db, "o", 5, 5);
    ck_assert_msg(stream_renames_between(c, &b, &d, &renamed, err, sizeof err), "%s", err);
    ck_assert(!renamed);
    /* nothing after f: an awaited empty batch ends it */
    ck_assert_msg(copy_stream_start(c, &f, NULL, NULL, &retry, err, sizeof err), "%s", err);
    renamed = true;
    ck_assert_msg(stream_renames_between(c, &d, &f, &renamed, err, sizeof err), "%s", err);
    ck_assert(!renamed);
    /* a rename after the end counts too: the copy only lists again */
    denv_rename(&e, db, "r2", db, "r3", false);
    ck_assert_msg(stream_renames_between(c, &d, &f, &renamed, err, sizeof err), "%s", err);
    ck_assert(renamed);
    mongoc_client_destroy(c);
    denv_stop(&e);
}
END_TEST

/* DocumentDB: the initial copy of collections holding data while writes go on (inserts, updates of documents being
 * copied, deletes, a transaction), then tailing; PostgreSQL ends equal to MongoDB. */
START_TEST(test_documentdb_copy)
{
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim --flavor documentdb");
    const char *sim_args[] = {"--flavor", "documentdb", NULL};
    denv e;
    denv_start(&e, "fldoccp", sim_args, "[copy]\nworkers = 1\nbatch_docs = 100\n");
    denv_command(&e, "admin",
                 BCON_NEW("modifyChangeStreams", BCON_INT32(1), "database", BCON_UTF8(""), "collection", BCON_UTF8(""),
                          "enable", BCON_BOOL(true)));
    char db[64];
    snprintf(db, sizeof db, "%s_a", e.prefix);
    denv_insert_range(&e, db, "a", 1, 3000);
    denv_insert_range(&e, db, "b", 1, 500);
    denv_insert_range(&e, db, "c", 1, 2000);
    /* Every reply held 10 ms while the writes below are made: the copy (about 30 batches of mongosim's 200
     * documents) then lasts well beyond the first of them. */
    denv_command(&e, "admin", BCON_NEW("mongosimDelay", BCON_INT32(10)));
    denv_daemon_start(&e);
    ck_assert_msg(denv_wait_log(&e, "starts a copy of 3 collections", WAIT_S), "the copy did not start");
    /* while it copies: new documents, and updates and deletes of documents copied or still to copy */
    mongoc_client_t *c = mongoc_client_new(e.uri);
    ck_assert_ptr_nonnull(c);
    mongoc_collection_t *a = mongoc_client_get_collection(c, db, "a");
    bson_error_t err;
    for (int i = 1; i <= 3000; i += 37) {
        bson_t *q = BCON_NEW("_id", BCON_INT32(i)), *u = BCON_NEW("$set", "{", "during", BCON_INT32(i), "}");
        ck_assert_msg(i % 3 == 0 ? mongoc_collection_delete_one(a, q, NULL, NULL, &err)
                                 : mongoc_collection_update_one(a, q, u, NULL, NULL, &err),
                      "%s", err.message);
        bson_destroy(q);
        bson_destroy(u);
    }
    mongoc_collection_destroy(a);
    mongoc_client_destroy(c);
    mixed_workload(&e, db, 10);
    denv_command(&e, "admin", BCON_NEW("mongosimDelay", BCON_INT32(0)));
    ck_assert_msg(denv_wait_log(&e, "ready:", WAIT_S), "the daemon did not get ready");
    ck_assert_msg(denv_file_contains(e.log, "copy: service rep_fldoccp copied 3 collections"), "the copy did not run");
    mixed_workload(&e, db, 11);
    denv_wait_hello_caught_up(&e, WAIT_S);
    denv_expect_match_prefix(&e, db);
    denv_stop(&e);
}
END_TEST

/* Cosmos DB RU: no delete event would ever arrive, so the daemon refuses it at start, saying why. */
START_TEST(test_cosmos_refused)
{
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim --flavor cosmos");
    const char *sim_args[] = {"--flavor", "cosmos", NULL};
    denv e;
    denv_start(&e, "flcosmos", sim_args, NULL);
    char db[64];
    snprintf(db, sizeof db, "%s_a", e.prefix);
    denv_insert_range(&e, db, "a", 1, 10);
    denv_daemon_start(&e);
    ck_assert_msg(proc_wait(&e.daemon, WAIT_S), "the daemon did not stop");
    denv_show_log(&e);
    ck_assert_int_ne(proc_exit_code(&e.daemon), 0);
    ck_assert_msg(denv_file_contains(e.log, "Azure Cosmos DB for MongoDB (RU) sends no delete events: a replica would "
                                            "keep every deleted document, so oplog2pg refuses it"),
                  "no message naming Cosmos DB and its missing deletes");
    e.daemon.pid = 0;
    denv_stop(&e);
}
END_TEST

Suite *stream_flavors_suite(void)
{
    Suite *s = suite_create("stream_flavors");
    TCase *tc = tcase_create("flavors");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_atlas_shared);
    tcase_add_test(tc, test_documentdb);
    tcase_add_test(tc, test_documentdb_renames);
    tcase_add_test(tc, test_documentdb_copy);
    tcase_add_test(tc, test_cosmos_refused);
    suite_add_tcase(s, tc);
    return s;
}

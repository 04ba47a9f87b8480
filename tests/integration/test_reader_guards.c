/*
 * test_reader_guards.c — what the daemon does when MongoDB's oplog batch is malformed (source/oplog/reader.c next_doc):
 * it stops with exit code 5, and its checkpoint never passes an entry it did not write.
 *
 * mongosimMalformBatch puts a bad element (an int32, or a document whose length runs past the batch) after the first
 * entry of the next oplog batch of two entries or more; five inserts written by one command make that batch. The
 * daemon may commit the entry before the bad element, never one after it; restarted without the fault it applies
 * the rest and ends equal to the source. mongosim only: on a real replica set the cases skip (skip.h).
 */
#include <check.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <string.h>

#include "../lib/daemonenv.h"
#include "../lib/skip.h"

Suite *reader_guards_suite(void);

/* The ts (secs << 32 | inc) of the insert of _id into ns in the source's oplog; 0 when there is none. */
static uint64_t insert_ts(const denv *e, const char *ns, int id)
{
    mongoc_client_t *c = mongoc_client_new(e->uri);
    ck_assert_ptr_nonnull(c);
    mongoc_collection_t *oplog = mongoc_client_get_collection(c, "local", "oplog.rs");
    bson_t filter = BSON_INITIALIZER;
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, &filter, NULL, NULL);
    const bson_t *doc;
    uint64_t ts = 0;
    while (ts == 0 && mongoc_cursor_next(cur, &doc)) {
        bson_iter_t it, o;
        uint32_t secs, inc;
        if (!bson_iter_init_find(&it, doc, "ns") || !BSON_ITER_HOLDS_UTF8(&it) ||
            strcmp(bson_iter_utf8(&it, NULL), ns) != 0 || !bson_iter_init_find(&it, doc, "op") ||
            !BSON_ITER_HOLDS_UTF8(&it) || strcmp(bson_iter_utf8(&it, NULL), "i") != 0 ||
            !bson_iter_init_find(&o, doc, "o") || !BSON_ITER_HOLDS_DOCUMENT(&o) || !bson_iter_recurse(&o, &it) ||
            !bson_iter_find(&it, "_id") || !BSON_ITER_HOLDS_INT32(&it) || bson_iter_int32(&it) != id ||
            !bson_iter_init_find(&it, doc, "ts") || !BSON_ITER_HOLDS_TIMESTAMP(&it))
            continue;
        bson_iter_timestamp(&it, &secs, &inc);
        ts = (uint64_t)secs << 32 | inc;
    }
    mongoc_cursor_destroy(cur);
    bson_destroy(&filter);
    mongoc_collection_destroy(oplog);
    mongoc_client_destroy(c);
    return ts;
}

static void malformed_batch_stops(const char *name, const char *how)
{
    ck_assert_msg(denv_using_sim(), "%s needs mongosim: its test must skip first", name);
    denv e;
    denv_start(&e, name, NULL, NULL);
    char db[64], ns[128], sql[256];
    snprintf(db, sizeof db, "%s0", e.prefix);
    snprintf(ns, sizeof ns, "%s.c", db);
    denv_insert_range(&e, db, "c", 1, 1);
    denv_daemon_start(&e);
    ck_assert_msg(denv_wait_caught_up(&e, 120), "the daemon did not start");

    mongoc_client_t *c = mongoc_client_new(e.uri);
    bson_t *cmd = BCON_NEW("mongosimMalformBatch", BCON_UTF8(how));
    bson_error_t err;
    ck_assert_msg(mongoc_client_command_simple(c, "admin", cmd, NULL, NULL, &err), "%s", err.message);
    bson_destroy(cmd);
    mongoc_client_destroy(c);
    denv_insert_range(&e, db, "c", 2, 6); /* one insert command: five entries in one batch */

    ck_assert_msg(proc_wait(&e.daemon, 60), "%s: the daemon did not stop at the malformed batch", how);
    int rc = proc_exit_code(&e.daemon);
    if (rc != 5)
        denv_show_log(&e);
    ck_assert_int_eq(rc, 5);
    ck_assert_msg(denv_file_contains(e.log, "malformed reply from MongoDB"), "the log does not say why");
    uint64_t first = insert_ts(&e, ns, 2);
    ck_assert_uint_ne(first, 0);
    /* At most the entry before the bad element (the batch's first) is committed, none after it. */
    ck_assert_uint_le(denv_checkpoint_ts(e.service), first);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\".c WHERE _id::int > 2", db);
    ck_assert_int_eq(denv_pg_int(sql), 0);

    /* Without the fault the daemon resumes where it stopped and applies everything. */
    denv_daemon_start(&e);
    ck_assert_msg(denv_wait_caught_up(&e, 120), "the daemon did not catch up after the restart");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\".c", db);
    ck_assert_int_eq(denv_pg_int(sql), 6);
    denv_expect_match(&e);
    denv_stop(&e);
}

START_TEST(test_batch_element_not_a_document)
{
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim's mongosimMalformBatch");
    malformed_batch_stops("guard_notdoc", "notDocument");
}
END_TEST

START_TEST(test_batch_element_corrupt)
{
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim's mongosimMalformBatch");
    malformed_batch_stops("guard_corrupt", "corrupt");
}
END_TEST

Suite *reader_guards_suite(void)
{
    Suite *s = suite_create("reader_guards");
    TCase *tc = tcase_create("reader_guards");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_batch_element_not_a_document);
    tcase_add_test(tc, test_batch_element_corrupt);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_lossless.c — "nothing lost, ever", tried the way a hostile user would: each case is a reproduction that lost
 * data or stopped the service for good before the one error policy, and each ends with a comparison of MongoDB and
 * PostgreSQL (nothing lost, nothing doubled):
 *   - lock and statement timeouts on the daemon's own role are retried, never set aside;
 *   - --tail-from and --skip-import with an op PostgreSQL refuses in the first group lose nothing;
 *   - _ids that MongoDB keeps apart stay apart (field order, number types and values, wrappers, -0.0);
 *   - `replay` is strict about its dump (cut short, garbage, out of order), takes the dead-letter path, and sets
 *     aside a poison namespace and a document nested too deep with their raw BSON;
 *   - a login PostgreSQL refuses stops replay, check, status and run at once with exit 3, and a malformed conninfo
 *     never shows the password;
 *   - memory stays within its byte bounds with documents of 10 MB.
 */
#include <check.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/daemonenv.h"
#include "../lib/proc.h"
#include "../lib/skip.h"
#include "daemon/exitcodes.h"

/* ---- small helpers ---- */

static mongoc_client_t *client(const denv *e)
{
    mongoc_client_t *c = mongoc_client_new(e->uri);
    ck_assert_ptr_nonnull(c);
    return c;
}

static void insert_range(const denv *e, const char *db, const char *coll, int from, int to)
{
    mongoc_client_t *c = client(e);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db, coll);
    bson_error_t err;
    for (int i = from; i <= to; i++) {
        bson_t *doc = BCON_NEW("_id", BCON_INT32(i), "v", BCON_INT32(i * 10), "s", BCON_UTF8("text"));
        ck_assert_msg(mongoc_collection_insert_one(col, doc, NULL, NULL, &err), "insert: %s", err.message);
        bson_destroy(doc);
    }
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
}

/* A document whose string holds U+0000: valid in MongoDB, refused by jsonb (22P05). */
static void insert_nul(const denv *e, const char *db, const char *coll, int id)
{
    mongoc_client_t *c = client(e);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db, coll);
    bson_t doc = BSON_INITIALIZER;
    BSON_APPEND_INT32(&doc, "_id", id);
    bson_append_utf8(&doc, "s", 1, "a\0b", 3);
    bson_error_t err;
    ck_assert_msg(mongoc_collection_insert_one(col, &doc, NULL, NULL, &err), "%s", err.message);
    bson_destroy(&doc);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
}

static void update_set(const denv *e, const char *db, const char *coll, int id, int v)
{
    mongoc_client_t *c = client(e);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db, coll);
    bson_t *q = BCON_NEW("_id", BCON_INT32(id));
    bson_t *u = BCON_NEW("$set", "{", "v", BCON_INT32(v), "}");
    bson_error_t err;
    ck_assert_msg(mongoc_collection_update_one(col, q, u, NULL, NULL, &err), "%s", err.message);
    bson_destroy(q);
    bson_destroy(u);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
}

static void delete_id(const denv *e, const char *db, const char *coll, int id)
{
    mongoc_client_t *c = client(e);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db, coll);
    bson_t *q = BCON_NEW("_id", BCON_INT32(id));
    bson_error_t err;
    ck_assert_msg(mongoc_collection_delete_one(col, q, NULL, NULL, &err), "%s", err.message);
    bson_destroy(q);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
}

static int64_t dead_letters(const denv *e)
{
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM oplog2pg.dead_letter WHERE service = '%s'", e->service);
    return denv_pg_int(sql);
}

/* Waits for the daemon to exit by itself; returns its exit code. */
static int wait_exit(denv *e, double secs)
{
    ck_assert_msg(proc_wait(&e->daemon, secs), "the daemon did not exit within %.0f s", secs);
    int code = proc_exit_code(&e->daemon);
    e->daemon.pid = 0;
    return code;
}

/* ---- timeouts are retries ---- */

/* The daemon's role has lock_timeout (then statement_timeout) set and another session holds a lock on the table
 * while updates and deletes arrive: every attempt fails with 55P03 (57014), is retried from the checkpoint, and once
 * the lock is released everything arrives. Before the one policy these went to the dead letters and were lost. */
START_TEST(test_timeouts_never_dead_letter)
{
    const char *opts[2] = {"options='-c lock_timeout=100'", "options='-c statement_timeout=300'"};
    const char *states[2] = {"[55P03]", "[57014]"};
    denv e;
    denv_start(&e, "tmo", NULL, NULL);
    insert_range(&e, "rep_tmo_a", "c", 1, 50);
    for (int round = 0; round < 2; round++) {
        denv_set_conninfo(&e, opts[round]);
        denv_daemon_start(&e);
        ck_assert(denv_wait_caught_up(&e, 60));
        PGconn *lk = PQconnectdb(denv_pg_conninfo());
        ck_assert_int_eq(PQstatus(lk), CONNECTION_OK);
        PQclear(PQexec(lk, "BEGIN"));
        PGresult *r = PQexec(lk, "LOCK TABLE rep_tmo_a.c IN ACCESS EXCLUSIVE MODE");
        ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s", PQerrorMessage(lk));
        PQclear(r);
        for (int i = 1; i <= 20; i++)
            update_set(&e, "rep_tmo_a", "c", i, 1000 * (round + 1) + i);
        for (int i = 41; i <= 45 + round; i++)
            delete_id(&e, "rep_tmo_a", "c", i);
        /* Wait for the event itself: the daemon met the timeout and said it retries. */
        ck_assert_msg(denv_wait_log(&e, states[round], 30), "no %s in the log", states[round]);
        ck_assert_msg(denv_wait_log(&e, "resumes from the committed checkpoint", 30), "no retry in the log");
        ck_assert_int_eq(dead_letters(&e), 0);
        PQclear(PQexec(lk, "ROLLBACK"));
        PQfinish(lk);
        ck_assert_msg(denv_wait_caught_up(&e, 60), "the daemon did not catch up after the lock was released");
        ck_assert_int_eq(dead_letters(&e), 0);
        ck_assert(!denv_file_contains(e.log, "set aside"));
        denv_expect_match(&e);
        ck_assert(proc_stop(&e.daemon, 30));
        ck_assert_int_eq(proc_exit_code(&e.daemon), 0);
        e.daemon.pid = 0;
    }
    denv_stop(&e);
}
END_TEST

/* ---- one notion of where a session starts ---- */

/* --tail-from a position, and PostgreSQL refuses an op in the first group after it: careful mode starts again from
 * the committed checkpoint (the entry before the position), so the good ops of the group arrive and the bad one is
 * a dead letter. Before, careful mode found no checkpoint and jumped to the newest entry: all of them were lost. */
START_TEST(test_tail_from_with_a_refused_op)
{
    denv e;
    denv_start(&e, "tf", NULL, NULL);
    insert_range(&e, "tf_other", "before", 1, 5); /* not replicated, and before the position anyway */
    insert_range(&e, "rep_tf_a", "c", 1, 1);
    uint64_t first = denv_newest_ts(e.uri);
    insert_range(&e, "rep_tf_a", "c", 2, 6);
    insert_nul(&e, "rep_tf_a", "c", 7);
    insert_range(&e, "rep_tf_a", "c", 8, 12);
    update_set(&e, "rep_tf_a", "c", 3, 33);
    delete_id(&e, "rep_tf_a", "c", 4);
    char pos[40];
    snprintf(pos, sizeof pos, "%u:%u", (unsigned)(first >> 32), (unsigned)first);
    /* The insert of _id 1 created the collection just before `first`: the create is skipped, the table is made on
     * first sight. */
    const char *args[] = {"--tail-from", pos, NULL};
    denv_daemon_start_args(&e, args, NULL);
    ck_assert_msg(denv_wait_caught_up(&e, 60), "the daemon did not get past the refused op");
    ck_assert_int_eq(dead_letters(&e), 1);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_tf_a.c"), 10); /* 12 - 1 refused - 1 deleted */
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_tf_a.c WHERE _id = '3' AND doc->>'v' = '33'"), 1);
    /* PostgreSQL is short of the refused document only: take it out of the source too, and compare. */
    delete_id(&e, "rep_tf_a", "c", 7);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* --skip-import commits the newest entry as the checkpoint before reading anything; a refused op in the first group
 * then costs nothing else. */
START_TEST(test_skip_import_with_a_refused_op)
{
    denv e;
    denv_start(&e, "skip", NULL, NULL);
    insert_range(&e, "rep_skip_old", "c", 1, 5); /* before the start: not copied */
    const char *args[] = {"--skip-import", NULL};
    denv_daemon_start_args(&e, args, NULL);
    uint64_t start = 0;
    double until = denv_now() + 60;
    while ((start = denv_checkpoint_ts(e.service)) == 0 && denv_now() < until)
        usleep(50 * 1000);
    ck_assert_msg(start != 0, "no checkpoint committed within 60 s of the start");
    ck_assert_uint_eq(start, denv_newest_ts(e.uri));
    proc_signal(&e.daemon, SIGSTOP); /* the next writes all land in one group */
    insert_range(&e, "rep_skip_new", "c", 1, 5);
    insert_nul(&e, "rep_skip_new", "c", 6);
    insert_range(&e, "rep_skip_new", "c", 7, 11);
    proc_signal(&e.daemon, SIGCONT);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_int_eq(dead_letters(&e), 1);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_skip_new.c"), 10);
    /* What was before the start is not in PostgreSQL: take it out of the source for the comparison. */
    mongoc_client_t *c = client(&e);
    bson_error_t err;
    bson_t *cmd = BCON_NEW("dropDatabase", BCON_INT32(1));
    ck_assert(mongoc_client_command_simple(c, "rep_skip_old", cmd, NULL, NULL, &err));
    bson_destroy(cmd);
    mongoc_client_destroy(c);
    delete_id(&e, "rep_skip_new", "c", 6);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* ---- exact keys ---- */

static void insert_raw(mongoc_collection_t *col, bson_t *doc)
{
    bson_error_t err;
    ck_assert_msg(mongoc_collection_insert_one(col, doc, NULL, NULL, &err), "insert: %s", err.message);
    bson_destroy(doc);
}

/* _ids that MongoDB keeps apart are distinct rows; _ids it finds equal are one row; updates and deletes find their
 * row by the same key. Before, jsonb merged {a, b} with {b, a} and 0.1 with NumberDecimal("0.1"). */
START_TEST(test_keys_exact)
{
    denv e;
    denv_start(&e, "keys", NULL, NULL);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    mongoc_client_t *c = client(&e);
    mongoc_collection_t *col = mongoc_client_get_collection(c, "rep_keys_a", "c");
    bson_decimal128_t dec;
    bson_decimal128_from_string("0.1", &dec);
    insert_raw(col, BCON_NEW("_id", "{", "a", BCON_INT32(1), "b", BCON_INT32(2), "}", "n", BCON_INT32(1)));
    insert_raw(col, BCON_NEW("_id", "{", "b", BCON_INT32(2), "a", BCON_INT32(1), "}", "n", BCON_INT32(2)));
    insert_raw(col, BCON_NEW("_id", BCON_DOUBLE(0.1), "n", BCON_INT32(3)));
    insert_raw(col, BCON_NEW("_id", BCON_DECIMAL128(&dec), "n", BCON_INT32(4)));
    insert_raw(col, BCON_NEW("_id", BCON_INT64(5), "n", BCON_INT32(5)));
    insert_raw(col, BCON_NEW("_id", BCON_UTF8("5"), "n", BCON_INT32(6)));
    insert_raw(col, BCON_NEW("_id", BCON_DOUBLE(-0.0), "neg", BCON_DOUBLE(-0.0), "n", BCON_INT32(7)));
    insert_raw(col, BCON_NEW("_id", BCON_DATE_TIME(-86400000), "old", BCON_DATE_TIME(-62135596800000), "far",
                             BCON_DATE_TIME(253402300800000), "n", BCON_INT32(8)));
    uint8_t bytes[4] = {1, 2, 3, 4};
    insert_raw(col, BCON_NEW("_id", BCON_BIN(BSON_SUBTYPE_BINARY, bytes, 4), "n", BCON_INT32(9)));
    insert_raw(col, BCON_NEW("_id", BCON_BIN(BSON_SUBTYPE_USER, bytes, 4), "n", BCON_INT32(10)));
    insert_raw(col, BCON_NEW("_id", "{", "x", "[", BCON_INT32(1), BCON_INT32(2), "]", "}", "n", BCON_INT32(11)));
    insert_raw(col,
               BCON_NEW("_id", "{", "x", "{", "0", BCON_INT32(1), "1", BCON_INT32(2), "}", "}", "n", BCON_INT32(12)));
    /* 5.0 equals NumberLong(5) in MongoDB's _id index: refused as a duplicate, as a real server does. */
    bson_t *dup = BCON_NEW("_id", BCON_DOUBLE(5.0), "n", BCON_INT32(99));
    bson_error_t err;
    ck_assert_msg(!mongoc_collection_insert_one(col, dup, NULL, NULL, &err), "5.0 was accepted beside NumberLong(5)");
    bson_destroy(dup);
    /* Updates and deletes address rows by the same keys. */
    bson_t *q = BCON_NEW("_id", "{", "b", BCON_INT32(2), "a", BCON_INT32(1), "}");
    bson_t *u = BCON_NEW("$set", "{", "n", BCON_INT32(22), "}");
    ck_assert_msg(mongoc_collection_update_one(col, q, u, NULL, NULL, &err), "%s", err.message);
    bson_destroy(q);
    bson_destroy(u);
    q = BCON_NEW("_id", BCON_DECIMAL128(&dec));
    ck_assert_msg(mongoc_collection_delete_one(col, q, NULL, NULL, &err), "%s", err.message);
    bson_destroy(q);
    q = BCON_NEW("_id", BCON_INT32(0)); /* the -0.0 document, found by value */
    u = BCON_NEW("$set", "{", "n", BCON_INT32(77), "}");
    ck_assert_msg(mongoc_collection_update_one(col, q, u, NULL, NULL, &err), "%s", err.message);
    bson_destroy(q);
    bson_destroy(u);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_keys_a.c"), 11);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_keys_a.c WHERE _id = '[[\"b\", 2], [\"a\", 1]]' "
                                 "AND doc->>'n' = '22'"),
                     1);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_keys_a.c WHERE _id = '[[\"a\", 1], [\"b\", 2]]' "
                                 "AND doc->>'n' = '1'"),
                     1);
    /* -0.0 keeps its sign in the document, and its key is 0. */
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_keys_a.c WHERE _id = '0' AND doc->'neg' = "
                                 "'{\"$numberDouble\": \"-0.0\"}' AND doc->>'n' = '77'"),
                     1);
    /* Dates outside 1970..9999 as the specification writes them. */
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_keys_a.c WHERE doc->'old' = "
                                 "'{\"$date\": {\"$numberLong\": \"-62135596800000\"}}' AND doc->'far' = "
                                 "'{\"$date\": {\"$numberLong\": \"253402300800000\"}}'"),
                     1);
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* ---- replay ---- */

/* Copies the source's oplog into a dump file (concatenated BSON); returns the number of entries. */
static size_t dump_oplog(const char *uri, const char *path)
{
    mongoc_client_t *c = mongoc_client_new(uri);
    mongoc_collection_t *oplog = mongoc_client_get_collection(c, "local", "oplog.rs");
    bson_t filter = BSON_INITIALIZER;
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, &filter, NULL, NULL);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    const bson_t *doc;
    size_t n = 0;
    while (mongoc_cursor_next(cur, &doc)) {
        ck_assert_uint_eq(fwrite(bson_get_data(doc), 1, doc->len, f), doc->len);
        n++;
    }
    bson_error_t err;
    ck_assert_msg(!mongoc_cursor_error(cur, &err), "%s", err.message);
    fclose(f);
    mongoc_cursor_destroy(cur);
    bson_destroy(&filter);
    mongoc_collection_destroy(oplog);
    mongoc_client_destroy(c);
    return n;
}

/* An oplog entry of our own making (what a real server writes for an insert), appended to a dump. */
static void append_insert(const char *path, uint32_t secs, uint32_t inc, const char *ns, const bson_t *o)
{
    bson_t *entry = BCON_NEW("ts", BCON_TIMESTAMP(secs, inc), "t", BCON_INT64(1), "v", BCON_INT32(2), "op",
                             BCON_UTF8("i"), "ns", BCON_UTF8(ns), "wall", BCON_DATE_TIME((int64_t)secs * 1000));
    BSON_APPEND_DOCUMENT(entry, "o", o);
    FILE *f = fopen(path, "ab");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bson_get_data(entry), 1, entry->len, f), entry->len);
    fclose(f);
    bson_destroy(entry);
}

static int replay(denv *e, const char *dump, const char *out)
{
    const char *args[] = {"-c", e->ini, "replay", dump, NULL};
    return denv_run_command(e, args, out);
}

static void file_cut(const char *from, const char *to, long drop_tail, const char *append, size_t append_len)
{
    FILE *in = fopen(from, "rb"), *o = fopen(to, "wb");
    ck_assert(in && o);
    fseek(in, 0, SEEK_END);
    long size = ftell(in);
    rewind(in);
    char *buf = malloc((size_t)size);
    ck_assert_uint_eq(fread(buf, 1, (size_t)size, in), (size_t)size);
    ck_assert_uint_eq(fwrite(buf, 1, (size_t)(size - drop_tail), o), (size_t)(size - drop_tail));
    if (append_len)
        ck_assert_uint_eq(fwrite(append, 1, append_len, o), append_len);
    free(buf);
    fclose(in);
    fclose(o);
}

/* A dump cut inside its last entry, or followed by garbage, stops with exit 5 after applying everything before;
 * the full dump then completes the job. A refused op, a namespace that is not UTF-8 and a document nested too deep
 * take the dead-letter path with their raw BSON. */
START_TEST(test_replay_is_strict)
{
    denv e;
    denv_start(&e, "rps", NULL, NULL);
    insert_range(&e, "rep_rps_a", "c", 1, 300);
    for (int i = 1; i <= 50; i++)
        update_set(&e, "rep_rps_a", "c", i, -i);
    char dump[300], cut[300], out[300];
    snprintf(dump, sizeof dump, "%s/oplog.bson", e.dir);
    snprintf(cut, sizeof cut, "%s/cut.bson", e.dir);
    snprintf(out, sizeof out, "%s/replay.out", e.dir);
    dump_oplog(e.uri, dump);

    /* 1. Cut inside the last entry: exit 5, naming it; the entries before are committed. */
    file_cut(dump, cut, 7, NULL, 0);
    ck_assert_int_eq(replay(&e, cut, out), EXIT_UNSUPPORTED);
    ck_assert_msg(denv_file_contains(out, "the dump ends inside entry"), "no message about the cut");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_rps_a.c WHERE doc->>'v' = '-49'"), 1);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_rps_a.c WHERE doc->>'v' = '-50'"), 0);
    uint64_t ck = denv_checkpoint_ts(e.service);
    /* 2. Garbage after the last entry: everything applied, then exit 5. */
    file_cut(dump, cut, 0, "\x01\x02\x03\x04garbage", 11);
    ck_assert_int_eq(replay(&e, cut, out), EXIT_UNSUPPORTED);
    ck_assert_msg(denv_file_contains(out, "not a BSON document"), "no message about the garbage");
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), denv_newest_ts(e.uri));
    ck_assert_uint_gt(denv_checkpoint_ts(e.service), ck);
    denv_expect_match(&e);

    /* 3. Out of order: an entry older than the one before it stops the replay; the checkpoint never goes back. */
    insert_range(&e, "rep_rps_a", "c", 301, 310);
    dump_oplog(e.uri, dump);
    uint64_t end = denv_newest_ts(e.uri);
    bson_t *o = BCON_NEW("_id", BCON_INT32(9999));
    append_insert(dump, (uint32_t)(end >> 32) - 100, 1, "rep_rps_a.c", o);
    bson_destroy(o);
    ck_assert_int_eq(replay(&e, dump, out), EXIT_UNSUPPORTED);
    ck_assert_msg(denv_file_contains(out, "is not in oplog order"), "no message about the order");
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), end);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_rps_a.c WHERE _id = '9999'"), 0);
    denv_expect_match(&e);

    /* 4. Refused ops take the dead-letter path: U+0000 (PostgreSQL refuses it), a namespace that is not UTF-8 and
     * a document nested deeper than oplog2pg writes (their text cannot be made). */
    dump_oplog(e.uri, dump);
    uint32_t s = (uint32_t)(end >> 32) + 10;
    bson_t nul = BSON_INITIALIZER;
    BSON_APPEND_INT32(&nul, "_id", 7001);
    bson_append_utf8(&nul, "s", 1, "x\0y", 3);
    append_insert(dump, s, 1, "rep_rps_a.c", &nul);
    bson_destroy(&nul);
    o = BCON_NEW("_id", BCON_INT32(7002));
    append_insert(dump, s, 2, "rep_rps_a.bad\xff\xfe", o);
    bson_destroy(o);
    bson_t *deep = bson_new();
    BSON_APPEND_INT32(deep, "x", 1);
    for (int i = 0; i < 1100; i++) {
        bson_t *outer = bson_new();
        BSON_APPEND_DOCUMENT(outer, "d", deep);
        bson_destroy(deep);
        deep = outer;
    }
    bson_t *deepdoc = BCON_NEW("_id", BCON_INT32(7003));
    BSON_APPEND_DOCUMENT(deepdoc, "nest", deep);
    append_insert(dump, s, 3, "rep_rps_a.c", deepdoc);
    bson_destroy(deep);
    bson_destroy(deepdoc);
    ck_assert_int_eq(replay(&e, dump, out), EXIT_OK);
    ck_assert_int_eq(dead_letters(&e), 3);
    char q[400];
    snprintf(q, sizeof q,
             "SELECT count(*) FROM oplog2pg.dead_letter WHERE service = '%s' AND op_bson IS NOT NULL AND "
             "((doc_id = '7001' AND sqlstate = '22P05') OR (doc_id = '7002' AND coll = 'bad\\xff\\xfe' AND "
             "error LIKE '%%not valid UTF-8%%') OR (doc_id = '7003' AND error LIKE '%%nested deeper than 1000%%'))",
             e.service);
    ck_assert_int_eq(denv_pg_int(q), 3);
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), (uint64_t)s << 32 | 3);
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* ---- refused logins ---- */

/* A role that does not exist: replay, check, status and run stop at once with exit 3 and a sentence saying what to
 * fix (before, replay retried for ever). A malformed conninfo holding a password never shows it. */
START_TEST(test_refused_login_stops_at_once)
{
    denv e;
    denv_start(&e, "login", NULL, NULL);
    denv_set_conninfo(&e, "user=oplog2pg_nobody");
    char dump[300], out[300];
    snprintf(dump, sizeof dump, "%s/oplog.bson", e.dir);
    snprintf(out, sizeof out, "%s/out", e.dir);
    dump_oplog(e.uri, dump);
    double t0 = denv_now();
    ck_assert_int_eq(replay(&e, dump, out), EXIT_CONFIG);
    ck_assert_msg(denv_now() - t0 < 20, "replay took %.0f s to give up", denv_now() - t0);
    ck_assert_msg(denv_file_contains(out, "role \"oplog2pg_nobody\" does not exist") &&
                      denv_file_contains(out, "check the user name"),
                  "replay did not say what to fix");
    ck_assert(!denv_file_contains(out, "retrying"));
    const char *check[] = {"-c", e.ini, "check", NULL};
    ck_assert_int_eq(denv_run_command(&e, check, out), EXIT_CONFIG);
    const char *status[] = {"-c", e.ini, "status", NULL};
    ck_assert_int_eq(denv_run_command(&e, status, out), EXIT_CONFIG);
    denv_daemon_start(&e);
    ck_assert_int_eq(wait_exit(&e, 30), EXIT_CONFIG);
    ck_assert(denv_file_contains(e.log, "check the user name"));

    /* A password in a malformed conninfo is never echoed. */
    denv_set_conninfo(&e, "password=sw0rd fish");
    ck_assert_int_eq(denv_run_command(&e, check, out), EXIT_CONFIG);
    ck_assert_msg(denv_file_contains(out, "not a valid libpq connection string"), "no conninfo error");
    ck_assert_msg(!denv_file_contains(out, "fish") && !denv_file_contains(out, "sw0rd"), "the password was shown");
    denv_set_conninfo(&e, "");
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    insert_range(&e, "rep_login_a", "c", 1, 3);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* ---- memory ---- */

/* 60 documents of 10 MB written while the daemon is stopped, then replicated: the queue, the batches and libpq's
 * buffers are bounded in bytes, so the daemon's peak stays within 64 MB plus one maximal document (16 MB). Before,
 * 200 such documents took 334 MB. (Not under AddressSanitizer, whose own memory is what it measures.) */
START_TEST(test_memory_bounded_with_large_documents)
{
    if (getenv("OPLOG2PG_TEST_SANITIZE") != NULL)
        SKIP_TEST("sanitizer builds measure their own memory");
    denv e;
    denv_start(&e, "mem", NULL, NULL);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert(proc_stop(&e.daemon, 30));
    e.daemon.pid = 0;
    size_t big = 10u * 1024 * 1024;
    char *pad = malloc(big + 1);
    memset(pad, 'p', big);
    pad[big] = '\0';
    mongoc_client_t *c = client(&e);
    mongoc_collection_t *col = mongoc_client_get_collection(c, "rep_mem_a", "big");
    for (int i = 0; i < 60; i++) {
        pad[i] = (char)('A' + i % 26);
        bson_t *doc = BCON_NEW("_id", BCON_INT32(i), "pad", BCON_UTF8(pad));
        bson_error_t err;
        ck_assert_msg(mongoc_collection_insert_one(col, doc, NULL, NULL, &err), "%s", err.message);
        bson_destroy(doc);
    }
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
    free(pad);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 300));
    long kb = proc_peak_kb(e.daemon.pid);
    printf("peak resident memory with 60 documents of 10 MB: %ld kB\n", kb);
    ck_assert_msg(kb > 0 && kb <= 80 * 1024, "the daemon's peak was %ld kB, over 64 MB + 16 MB", kb);
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

Suite *lossless_suite(void); /* called by the generated runner list */

Suite *lossless_suite(void)
{
    Suite *s = suite_create("lossless");
    TCase *tc = tcase_create("lossless");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_timeouts_never_dead_letter);
    tcase_add_test(tc, test_tail_from_with_a_refused_op);
    tcase_add_test(tc, test_skip_import_with_a_refused_op);
    tcase_add_test(tc, test_keys_exact);
    tcase_add_test(tc, test_replay_is_strict);
    tcase_add_test(tc, test_refused_login_stops_at_once);
    suite_add_tcase(s, tc);
    TCase *mem = tcase_create("memory");
    tcase_set_timeout(mem, 600);
    tcase_add_test(mem, test_memory_bounded_with_large_documents);
    suite_add_tcase(s, mem);
    return s;
}

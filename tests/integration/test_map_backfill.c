/*
 * test_map_backfill.c — columns added to a typed map hold, in the rows already there, what a fresh copy of the
 * documents gives them (docs/mapping.md, "Changing a map"), for the values whose BSON type relaxed Extended JSON does
 * not keep:
 *   - a double 1e300 in a numeric column (1 and 300 zeros, as the double's shortest decimal);
 *   - a double 2^62 in a bigint column (4611686018427387904, the double's value, not its shortest decimal);
 *   - a nested document {"$numberLong": "5"} (a legal field name) in a jsonb column (that document, not the number)
 *     and in a bigint column (a type error: NULL with on_type_error = null, not 5);
 * next to ordinary values (a string, a date, an int64 past 2^53, an array) and with every rest mode. The documents
 * change, one is deleted and one inserted while the daemon is stopped, so the values are read while PostgreSQL is
 * behind MongoDB. The oracle is a twin collection with the grown map into which the final documents of the first are
 * inserted: both tables must hold the same rows. `oplog2pg replay`, which reads no MongoDB, leaves the new columns
 * NULL in the old rows and says that a new copy fills them. A stop during the read leaves the table as it was.
 */
#include <check.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/daemonenv.h"
#include "../lib/proc.h"
#include "../lib/skip.h"

#define NDOCS 20

/* Replaces everything from the first "[map " of the configuration on with maps. */
static void set_maps(denv *e, const char *maps)
{
    FILE *f = fopen(e->ini, "r");
    ck_assert_msg(f != NULL, "%s", e->ini);
    static char text[65536];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char *cut = strstr(text, "\n[map ");
    if (cut != NULL)
        *cut = '\0';
    f = fopen(e->ini, "w");
    ck_assert(f != NULL);
    fprintf(f, "%s\n%s", text, maps);
    fclose(f);
}

/* The maps of db.c and db.ref: before (grown = false) and after the columns are added. */
static void maps_text(char *out, size_t len, const char *db, const char *rest, bool grown)
{
    size_t off = 0;
    const char *colls[2] = {"c", "ref"};
    for (int i = 0; i < 2; i++) {
        off += (size_t)snprintf(out + off, len - off, "\n[map %s.%s]\nrest = %s\ncolumn.a = integer\n", db, colls[i],
                                rest);
        if (grown)
            off += (size_t)snprintf(out + off, len - off,
                                    "column.big = numeric\ncolumn.n = bigint\ncolumn.sub = jsonb\n"
                                    "column.subn = bigint from sub on_type_error=null\ncolumn.s = text\n"
                                    "column.when = timestamptz\ncolumn.l = bigint\ncolumn.tags = text[]\n");
    }
}

static void insert_one(mongoc_collection_t *col, const bson_t *d)
{
    bson_t *opts = BCON_NEW("validate", BCON_BOOL(false)); /* the field name $numberLong */
    bson_error_t err;
    ck_assert_msg(mongoc_collection_insert_one(col, d, opts, NULL, &err), "insert: %s", err.message);
    bson_destroy(opts);
}

static void doc_of(int i, bson_t *d)
{
    bson_init(d);
    BSON_APPEND_INT32(d, "_id", i);
    BSON_APPEND_INT32(d, "a", i);
    BSON_APPEND_DOUBLE(d, "big", i % 2 == 0 ? 1e300 : 0.1 * i);
    BSON_APPEND_DOUBLE(d, "n", 4611686018427387904.0); /* 2^62, a double */
    bson_t sub;
    BSON_APPEND_DOCUMENT_BEGIN(d, "sub", &sub);
    BSON_APPEND_UTF8(&sub, "$numberLong", "5");
    bson_append_document_end(d, &sub);
    BSON_APPEND_UTF8(d, "s", i % 3 == 0 ? "three" : "x");
    BSON_APPEND_DATE_TIME(d, "when", 1700000000123LL + i);
    BSON_APPEND_INT64(d, "l", 9007199254740993LL + i); /* past 2^53: exact as an int64 */
    bson_t arr;
    BSON_APPEND_ARRAY_BEGIN(d, "tags", &arr);
    BSON_APPEND_UTF8(&arr, "0", "t");
    BSON_APPEND_UTF8(&arr, "1", "u");
    bson_append_array_end(d, &arr);
}

static void stop_daemon(denv *e)
{
    proc_signal(&e->daemon, SIGTERM);
    ck_assert(proc_wait(&e->daemon, 60));
    ck_assert_int_eq(proc_exit_code(&e->daemon), 0);
    e->daemon.pid = 0;
}

/* Tables a and b hold the same _ids, and for each column the same value (as text too) at each _id; the message
 * names every column that differs. */
static void expect_same(const char *a, const char *b)
{
    static const char *const cols[] = {"a", "big", "n", "sub", "subn", "s", "\"when\"", "l", "tags"};
    char sql[1024], differ[512] = "";
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM %s x FULL JOIN %s y ON x._id = y._id WHERE x._id IS NULL OR y._id IS NULL", a, b);
    ck_assert_msg(denv_pg_int(sql) == 0, "%s and %s hold other _ids", a, b);
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) {
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM %s x JOIN %s y ON x._id = y._id WHERE x.%s IS DISTINCT FROM y.%s OR "
                 "x.%s::text IS DISTINCT FROM y.%s::text",
                 a, b, cols[i], cols[i], cols[i], cols[i]);
        if (denv_pg_int(sql) != 0)
            snprintf(differ + strlen(differ), sizeof differ - strlen(differ), " %s", cols[i]);
    }
    ck_assert_msg(differ[0] == '\0', "%s and %s differ in columns:%s", a, b, differ);
}

static void run_case(const char *name, const char *rest)
{
    denv e;
    char db[64], maps[4096], sql[1024];
    snprintf(db, sizeof db, "rep_%s_m", name);
    maps_text(maps, sizeof maps, db, rest, false);
    denv_start(&e, name, NULL, maps);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));

    mongoc_client_t *client = mongoc_client_new(e.uri);
    mongoc_collection_t *c = mongoc_client_get_collection(client, db, "c");
    mongoc_collection_t *ref = mongoc_client_get_collection(client, db, "ref");
    for (int i = 1; i <= NDOCS; i++) {
        bson_t d;
        doc_of(i, &d);
        insert_one(c, &d);
        bson_destroy(&d);
    }
    ck_assert(denv_wait_caught_up(&e, 60));
    stop_daemon(&e);

    /* While the daemon is stopped the documents change: PostgreSQL is behind MongoDB when the new columns are filled,
     * and the oplog from its checkpoint is applied on top. */
    bson_error_t err;
    bson_t *sel = BCON_NEW("_id", BCON_INT32(2));
    bson_t *upd = BCON_NEW("$set", "{", "s", BCON_UTF8("changed"), "big", BCON_DOUBLE(2.5), "}", "$unset", "{", "when",
                           BCON_UTF8(""), "}");
    ck_assert_msg(mongoc_collection_update_one(c, sel, upd, NULL, NULL, &err), "update: %s", err.message);
    bson_destroy(sel);
    bson_destroy(upd);
    sel = BCON_NEW("_id", BCON_INT32(3));
    ck_assert_msg(mongoc_collection_delete_one(c, sel, NULL, NULL, &err), "delete: %s", err.message);
    bson_destroy(sel);
    bson_t d;
    doc_of(NDOCS + 1, &d);
    insert_one(c, &d);
    bson_destroy(&d);

    maps_text(maps, sizeof maps, db, rest, true);
    set_maps(&e, maps);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert(denv_wait_log(&e, "filled the new columns", 10));

    /* The oracle: the final documents of c, inserted into ref, whose tables have the grown map from the start. */
    bson_t filter = BSON_INITIALIZER;
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(c, &filter, NULL, NULL);
    const bson_t *doc;
    int n = 0;
    while (mongoc_cursor_next(cur, &doc)) {
        insert_one(ref, doc);
        n++;
    }
    ck_assert_msg(!mongoc_cursor_error(cur, &err), "find: %s", err.message);
    mongoc_cursor_destroy(cur);
    ck_assert_int_eq(n, NDOCS);
    mongoc_collection_destroy(c);
    mongoc_collection_destroy(ref);
    mongoc_client_destroy(client);
    ck_assert(denv_wait_caught_up(&e, 60));

    char a[128], b[128];
    snprintf(a, sizeof a, "%s.c", db);
    snprintf(b, sizeof b, "%s.ref", db);
    expect_same(a, b);
    /* The three values, spelled out. */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.c WHERE big = 1e300 AND big::text = '1%0300d'", db, 0);
    ck_assert_int_eq(denv_pg_int(sql), NDOCS / 2 - 1); /* the even _ids but 2, which is 2.5 now */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.c WHERE n = 4611686018427387904", db);
    ck_assert_int_eq(denv_pg_int(sql), NDOCS);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM %s.c WHERE sub = '{\"$numberLong\": \"5\"}'::jsonb AND subn IS NULL", db);
    ck_assert_int_eq(denv_pg_int(sql), NDOCS);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM %s.c WHERE s IS NOT NULL AND l IS NOT NULL AND tags = '{t,u}' AND (\"when\" IS NOT "
             "NULL OR _id = '2')",
             db);
    ck_assert_int_eq(denv_pg_int(sql), NDOCS);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.c WHERE _id = '2' AND s = 'changed' AND big = 2.5", db);
    ck_assert_int_eq(denv_pg_int(sql), 1);
    denv_stop(&e);
    snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", db);
    denv_pg_exec(sql);
}

/* Copies the source's oplog into a mongodump-style file (concatenated BSON). */
static void dump_oplog(const char *uri, const char *path)
{
    mongoc_client_t *c = mongoc_client_new(uri);
    mongoc_collection_t *oplog = mongoc_client_get_collection(c, "local", "oplog.rs");
    bson_t filter = BSON_INITIALIZER;
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, &filter, NULL, NULL);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    const bson_t *doc;
    while (mongoc_cursor_next(cur, &doc))
        ck_assert_uint_eq(fwrite(bson_get_data(doc), 1, doc->len, f), doc->len);
    bson_error_t err;
    ck_assert_msg(!mongoc_cursor_error(cur, &err), "%s", err.message);
    fclose(f);
    mongoc_cursor_destroy(cur);
    bson_destroy(&filter);
    mongoc_collection_destroy(oplog);
    mongoc_client_destroy(c);
}

/* `oplog2pg replay` of the source's oplog; its output in out (300 bytes). Returns its exit code. */
static int replay_dump(denv *e, char *out)
{
    char dump[300];
    snprintf(dump, sizeof dump, "%s/oplog.bson", e->dir);
    snprintf(out, 300, "%s/replay.out", e->dir);
    dump_oplog(e->uri, dump);
    const char *args[] = {"-c", e->ini, "replay", dump, NULL};
    return denv_run_command(e, args, out);
}

/* replay reads no MongoDB: columns the map gained are added but stay NULL in the rows already there (never a value
 * read back from doc), and the output says that a new copy fills them. The rows are written by the daemon first; the
 * replay then starts from its checkpoint. */
START_TEST(test_backfill_replay_leaves_null)
{
    denv e;
    char maps[4096], sql[512], out[300];
    const char *db = "rep_bfreplay_m";
    maps_text(maps, sizeof maps, db, "doc", false);
    denv_start(&e, "bfreplay", NULL, maps);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    mongoc_client_t *client = mongoc_client_new(e.uri);
    mongoc_collection_t *c = mongoc_client_get_collection(client, db, "c");
    for (int i = 1; i <= 5; i++) {
        bson_t d;
        doc_of(i, &d);
        insert_one(c, &d);
        bson_destroy(&d);
    }
    mongoc_collection_destroy(c);
    mongoc_client_destroy(client);
    ck_assert(denv_wait_caught_up(&e, 60));
    stop_daemon(&e);

    maps_text(maps, sizeof maps, db, "doc", true);
    set_maps(&e, maps);
    ck_assert_int_eq(replay_dump(&e, out), 0);
    ck_assert_msg(denv_file_contains(out, "only a new copy of the collection fills them"), "see %s", out);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM %s.c WHERE big IS NULL AND n IS NULL AND sub IS NULL AND subn IS NULL AND s IS "
             "NULL AND \"when\" IS NULL AND l IS NULL AND tags IS NULL",
             db);
    ck_assert_int_eq(denv_pg_int(sql), 5);
    denv_stop(&e);
    snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", db);
    denv_pg_exec(sql);
}
END_TEST

static void mongo_cmd(const char *uri, bson_t *cmd)
{
    mongoc_client_t *c = mongoc_client_new(uri);
    bson_error_t err;
    bson_t reply;
    bool ok = mongoc_client_command_simple(c, "admin", cmd, NULL, &reply, &err);
    bson_destroy(&reply);
    mongoc_client_destroy(c);
    bson_destroy(cmd);
    ck_assert_msg(ok, "command: %s", err.message);
}

/* A stop while the documents are read from MongoDB (each reply held up 2 s by mongosimDelay, the read six replies
 * long, a stop looked for after each thousand documents) leaves the table as it was, without the new column; the next
 * start adds and fills it. */
START_TEST(test_backfill_stopped_midway)
{
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim's mongosimDelay");
    denv e;
    char maps[512], sql[512];
    const char *db = "rep_bfstop_m";
    snprintf(maps, sizeof maps, "\n[map %s.c]\nrest = drop\ncolumn.v = integer\n", db);
    denv_start(&e, "bfstop", NULL, maps);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_insert_range(&e, db, "c", 1, 5000); /* {_id: k, v: 10k, s: "text"} */
    ck_assert(denv_wait_caught_up(&e, 60));
    stop_daemon(&e);

    snprintf(maps, sizeof maps, "\n[map %s.c]\nrest = drop\ncolumn.v = integer\ncolumn.s = text\n", db);
    set_maps(&e, maps);
    mongo_cmd(e.uri, BCON_NEW("mongosimDelay", BCON_INT32(2000)));
    denv_daemon_start(&e);
    char needle[128];
    snprintf(needle, sizeof needle, "reading %s.c from MongoDB", db);
    ck_assert(denv_wait_log(&e, needle, 120));
    proc_signal(&e.daemon, SIGTERM);
    ck_assert(proc_wait(&e.daemon, 60));
    ck_assert_int_eq(proc_exit_code(&e.daemon), 0);
    e.daemon.pid = 0;
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM pg_attribute WHERE attrelid = '%s.c'::regclass AND attname = 's' AND NOT "
             "attisdropped",
             db);
    ck_assert_int_eq(denv_pg_int(sql), 0); /* rolled back with the rest */

    mongo_cmd(e.uri, BCON_NEW("mongosimDelay", BCON_INT32(0)));
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert(denv_wait_log(&e, "filled the new columns", 10));
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.c WHERE s = 'text'", db);
    ck_assert_int_eq(denv_pg_int(sql), 5000);
    denv_stop(&e);
    snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", db);
    denv_pg_exec(sql);
}
END_TEST

START_TEST(test_backfill_rest_doc)
{
    run_case("bfdoc", "doc");
}
END_TEST

START_TEST(test_backfill_rest_extra)
{
    run_case("bfextra", "extra");
}
END_TEST

START_TEST(test_backfill_rest_drop)
{
    run_case("bfdrop", "drop");
}
END_TEST

Suite *map_backfill_suite(void); /* called by the generated runner list */

Suite *map_backfill_suite(void)
{
    Suite *s = suite_create("map_backfill");
    TCase *tc = tcase_create("map_backfill");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_backfill_rest_doc);
    tcase_add_test(tc, test_backfill_rest_extra);
    tcase_add_test(tc, test_backfill_rest_drop);
    tcase_add_test(tc, test_backfill_replay_leaves_null);
    tcase_add_test(tc, test_backfill_stopped_midway);
    suite_add_tcase(s, tc);
    return s;
}

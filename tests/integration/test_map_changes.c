/*
 * test_map_changes.c — a typed map changed between two runs (docs/mapping.md, "Changing a map"):
 *   - columns added to a map are added to its tables at the next start and filled in the rows already there from
 *     the documents in MongoDB, in the collection's table and in a child table, exactly as a new insert would fill
 *     them (the same documents inserted again into a second collection with the same map give the same rows),
 *     compound _ids with their fields out of jsonb's order included; a child table the map gained is made and filled
 *     the same way (test_map_backfill.c has the values relaxed Extended JSON would change);
 *   - with rest = extra the new column is added and filled the same way;
 *   - a column whose type changed stops the daemon with exit 3 and names the re-copy, touching nothing;
 *   - a table made by hand and adopted (adopt = true) is checked at every start, written to as it is, emptied but kept
 *     by a MongoDB drop; without adopt it stops the start untouched.
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
#include "daemon/exitcodes.h"

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

static void maps_text(char *out, size_t len, const char *db, const char *rest, bool grown, const char *b_type)
{
    size_t off = 0;
    const char *colls[2] = {"c", "ref"};
    for (int i = 0; i < 2; i++) {
        off += (size_t)snprintf(out + off, len - off,
                                "\n[map %s.%s]\nrest = %s\ncolumn.a = integer\n%s%s%s%s"
                                "child.items = %s_items\n%s%s%s\n[child %s.%s_items]\nrest = doc\ncolumn.sku = text\n%s",
                                db, colls[i], rest, grown ? "column.b = " : "", grown ? b_type : "",
                                grown ? " from info.b\n" : "", grown ? "column.when = timestamptz\n" : "", colls[i],
                                grown ? "child.parts = " : "", grown ? colls[i] : "", grown ? "_parts\n" : "", db,
                                colls[i], grown ? "column.qty = bigint on_type_error=null\n" : "");
        if (grown) /* a child table the map gained */
            off += (size_t)snprintf(out + off, len - off, "\n[child %s.%s_parts]\ncolumn.p = integer\n", db, colls[i]);
    }
}

static bson_t *doc_of(int i)
{
    bson_t *d;
    if (i % 3 == 0) /* a compound _id whose fields jsonb would sort the other way */
        d = BCON_NEW("_id", "{", "zz", BCON_INT32(i), "a", BCON_UTF8("k"), "}");
    else
        d = BCON_NEW("_id", BCON_INT32(i));
    BCON_APPEND(d, "a", BCON_INT32(i), "info", "{", "b", BCON_UTF8(i % 5 == 0 ? "five" : "b"), "x", BCON_INT32(1),
                "}", "when", BCON_DATE_TIME(1700000000123LL + i), "items", "[", "{", "sku", BCON_UTF8("s"), "qty",
                BCON_INT64(i), "}", "{", "sku", BCON_UTF8("t"), "qty", BCON_UTF8("not a number"), "}", "]", "parts",
                "[", "{", "p", BCON_INT32(i), "}", "]");
    return d;
}

static void insert_docs(const denv *e, const char *db, const char *coll, int from, int to)
{
    mongoc_client_t *c = mongoc_client_new(e->uri);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db, coll);
    bson_error_t err;
    for (int i = from; i <= to; i++) {
        bson_t *d = doc_of(i);
        ck_assert_msg(mongoc_collection_insert_one(col, d, NULL, NULL, &err), "insert: %s", err.message);
        bson_destroy(d);
    }
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
}

static void expect_same(const char *a, const char *b, const char *cols)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT (SELECT count(*) FROM (SELECT %s FROM %s EXCEPT ALL SELECT %s FROM %s) x) + "
             "(SELECT count(*) FROM (SELECT %s FROM %s EXCEPT ALL SELECT %s FROM %s) y)",
             cols, a, cols, b, cols, b, cols, a);
    ck_assert_msg(denv_pg_int(sql) == 0, "%s and %s differ over (%s)", a, b, cols);
}

static void stop_daemon(denv *e)
{
    proc_signal(&e->daemon, SIGTERM);
    ck_assert(proc_wait(&e->daemon, 60));
    ck_assert_int_eq(proc_exit_code(&e->daemon), 0);
    e->daemon.pid = 0;
}

START_TEST(test_columns_added_are_filled)
{
    denv e;
    const char *db = "rep_mapgrow_m";
    char maps[4096], sql[512];
    maps_text(maps, sizeof maps, db, "doc", false, NULL);
    denv_start(&e, "mapgrow", NULL, maps);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    insert_docs(&e, db, "c", 1, 30);
    ck_assert(denv_wait_caught_up(&e, 60));
    stop_daemon(&e);

    /* The map gains two columns of the collection and one of the child table. */
    maps_text(maps, sizeof maps, db, "doc", true, "text");
    set_maps(&e, maps);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert(denv_wait_log(&e, "filled the new columns", 10));
    /* The reference: the same documents, inserted now into a collection whose tables have the grown map from the
     * start. */
    insert_docs(&e, db, "ref", 1, 30);
    ck_assert(denv_wait_caught_up(&e, 60));

    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.c WHERE b IS NOT NULL AND \"when\" IS NOT NULL", db);
    ck_assert_int_eq(denv_pg_int(sql), 30);
    char a[128], b[128];
    snprintf(a, sizeof a, "%s.c", db);
    snprintf(b, sizeof b, "%s.ref", db);
    expect_same(a, b, "_id, a, b, \"when\", doc");
    snprintf(a, sizeof a, "%s.c_items", db);
    snprintf(b, sizeof b, "%s.ref_items", db);
    expect_same(a, b, "parent_key, position, sku, qty, doc");
    snprintf(a, sizeof a, "%s.c_parts", db);
    snprintf(b, sizeof b, "%s.ref_parts", db);
    expect_same(a, b, "parent_key, position, p");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.c_parts", db);
    ck_assert_int_eq(denv_pg_int(sql), 30);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.c_items WHERE qty IS NOT NULL", db);
    ck_assert_int_eq(denv_pg_int(sql), 30); /* the second element's qty is no number: NULL (on_type_error=null) */
    stop_daemon(&e);

    /* A type change stops the start, naming the re-copy, and changes nothing. */
    maps_text(maps, sizeof maps, db, "doc", true, "integer");
    set_maps(&e, maps);
    char out[300];
    snprintf(out, sizeof out, "%s/typechange.out", e.dir);
    const char *args[] = {"-c", e.ini, "run", NULL};
    ck_assert_int_eq(denv_run_command(&e, args, out), EXIT_CONFIG);
    if (!denv_file_contains(out, "--reimport")) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "tail -n 5 %s >&2", out);
        (void)!system(cmd);
        ck_abort_msg("the message names the re-copy (--reimport)");
    }
    snprintf(sql, sizeof sql,
             "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = '%s.c'::regclass AND "
             "attname = 'b'",
             db);
    char type[64];
    denv_pg_text(sql, type, sizeof type);
    ck_assert_str_eq(type, "text");
    denv_stop(&e);
    snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", db);
    denv_pg_exec(sql);
}
END_TEST

START_TEST(test_columns_added_without_doc_are_filled)
{
    denv e;
    const char *db = "rep_mapgrowx_m";
    char maps[4096], sql[512];
    maps_text(maps, sizeof maps, db, "extra", false, NULL);
    denv_start(&e, "mapgrowx", NULL, maps);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    insert_docs(&e, db, "c", 1, 10);
    ck_assert(denv_wait_caught_up(&e, 60));
    stop_daemon(&e);

    maps_text(maps, sizeof maps, db, "extra", true, "text");
    set_maps(&e, maps);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert(denv_wait_log(&e, "filled the new columns", 10));
    insert_docs(&e, db, "c", 11, 12);
    ck_assert(denv_wait_caught_up(&e, 60));
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.c WHERE b IS NULL OR \"when\" IS NULL", db);
    ck_assert_int_eq(denv_pg_int(sql), 0); /* the old rows have them, as the new ones */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.c_parts", db);
    ck_assert_int_eq(denv_pg_int(sql), 12); /* the child table the map gained */
    denv_stop(&e);
    snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", db);
    denv_pg_exec(sql);
}
END_TEST

/* A table made by hand, adopted by a map (adopt = true): written to as it is (its own extra column keeps its default),
 * checked at every start (a type that no longer matches stops the start with exit 3), emptied but kept by a MongoDB
 * drop; a table of a map without adopt stops the start (exit 3) and is not touched. */
START_TEST(test_adopted_table)
{
    denv e;
    const char *db = "rep_adopt_m";
    char maps[1024], sql[512], out[300];
    snprintf(maps, sizeof maps, "\n[map %s.c]\nadopt = true\nrest = drop\ncolumn.a = integer\n", db);
    denv_start(&e, "adopt", NULL, maps);
    snprintf(sql, sizeof sql,
             "CREATE SCHEMA %s; CREATE TABLE %s.c (_id text PRIMARY KEY, a integer, note text DEFAULT 'mine'); "
             "GRANT SELECT ON %s.c TO PUBLIC",
             db, db, db);
    denv_pg_exec(sql);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_insert_range(&e, db, "c", 1, 5);
    ck_assert(denv_wait_caught_up(&e, 60));
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.c WHERE note = 'mine' AND a IS NULL", db);
    ck_assert_int_eq(denv_pg_int(sql), 5); /* {_id, v, s}: no field a */
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM oplog2pg.tables WHERE schema_name = '%s' AND table_name = 'c' AND adopted", db);
    ck_assert_int_eq(denv_pg_int(sql), 1);
    stop_daemon(&e);

    /* The table no longer matches: the start stops, naming the column and both types. */
    snprintf(sql, sizeof sql, "ALTER TABLE %s.c ALTER COLUMN a TYPE bigint", db);
    denv_pg_exec(sql);
    snprintf(out, sizeof out, "%s/mismatch.out", e.dir);
    const char *args[] = {"-c", e.ini, "run", NULL};
    ck_assert_int_eq(denv_run_command(&e, args, out), EXIT_CONFIG);
    ck_assert_msg(denv_file_contains(out, "bigint") && denv_file_contains(out, "integer"), "the message names both");
    snprintf(sql, sizeof sql, "ALTER TABLE %s.c ALTER COLUMN a TYPE integer", db);
    denv_pg_exec(sql);

    /* A MongoDB drop empties the adopted table and keeps it, with its own column and grant. */
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_drop_collection(&e, db, "c");
    ck_assert(denv_wait_caught_up(&e, 60));
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.c", db);
    ck_assert_int_eq(denv_pg_int(sql), 0);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM information_schema.role_table_grants WHERE table_schema = '%s' AND "
             "table_name = 'c' AND grantee = 'PUBLIC'",
             db);
    ck_assert_int_eq(denv_pg_int(sql), 1);
    stop_daemon(&e);

    /* Without adopt, a table that is there already is not oplog2pg's: the start stops and the table is untouched. */
    snprintf(maps, sizeof maps, "\n[map %s.c]\nrest = drop\ncolumn.a = integer\n", db);
    set_maps(&e, maps);
    snprintf(sql, sizeof sql, "INSERT INTO %s.c (_id, a) VALUES ('keep', 1)", db);
    denv_pg_exec(sql);
    snprintf(out, sizeof out, "%s/foreign.out", e.dir);
    ck_assert_int_eq(denv_run_command(&e, args, out), EXIT_CONFIG);
    ck_assert_msg(denv_file_contains(out, "adopt = true"), "the message says how to adopt it");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.c WHERE _id = 'keep' AND note = 'mine'", db);
    ck_assert_int_eq(denv_pg_int(sql), 1);
    denv_stop(&e);
    snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", db);
    denv_pg_exec(sql);
}
END_TEST

Suite *map_changes_suite(void); /* called by the generated runner list */

Suite *map_changes_suite(void)
{
    Suite *s = suite_create("map_changes");
    TCase *tc = tcase_create("map_changes");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_columns_added_are_filled);
    tcase_add_test(tc, test_columns_added_without_doc_are_filled);
    tcase_add_test(tc, test_adopted_table);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_ddl.c — collection DDL as a replica set writes it, end to end through the daemon:
 *   - renameCollection across databases, which the server writes as a create of a temporary collection
 *     "tmpXXXXX.renameCollection" in the target database, one insert per document, a rename of the temporary
 *     collection over the target (dropTarget when one existed) and a drop of the source: with a filter that names
 *     only the target, the result is the target's table with the right rows and nothing else left behind; when the
 *     target is left out, the temporary table goes too;
 *   - renames out of the filter (the table is dropped, with a log line) and into it (the daemon stops before the
 *     entry with exit 5, naming both and --reimport; nothing is committed past it);
 *   - views and time-series collections get no table and one log line each; capped, clustered and validated
 *     collections get their table at the create.
 * Each ends with an exact comparison of what is replicated.
 */
#include <check.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/daemonenv.h"
#include "../lib/proc.h"
#include "daemon/exitcodes.h"

/* Rewrites the configuration with include and exclude patterns of the test's choosing (same service). */
static void write_ini(const denv *e, const char *include, const char *exclude)
{
    FILE *f = fopen(e->ini, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "[mongodb]\nuri = %s\n[postgres]\nconninfo = %s\n[replication]\nservice = %s\ninclude = %s\n%s%s%s",
            e->uri, denv_pg_conninfo(), e->service, include, exclude ? "exclude = " : "", exclude ? exclude : "",
            exclude ? "\n" : "");
    fclose(f);
}

static bool table_exists(const char *schema, const char *table)
{
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM pg_tables WHERE schemaname = '%s' AND tablename = '%s'", schema,
             table);
    return denv_pg_int(sql) == 1;
}

static int64_t rows(const char *schema, const char *table)
{
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\".\"%s\"", schema, table);
    return denv_pg_int(sql);
}

/* Tables (in PostgreSQL or in the catalog) left by a rename's temporary collection in schema. */
static int64_t temp_leftovers(const char *schema)
{
    char sql[500];
    snprintf(
        sql, sizeof sql,
        "SELECT (SELECT count(*) FROM pg_tables WHERE schemaname = '%s' AND tablename LIKE 'tmp%%.renameCollection')"
        " + (SELECT count(*) FROM oplog2pg.tables WHERE schema_name = '%s' AND table_name LIKE "
        "'tmp%%.renameCollection')",
        schema, schema);
    return denv_pg_int(sql);
}

static int wait_exit(denv *e, double secs)
{
    ck_assert_msg(proc_wait(&e->daemon, secs), "the daemon did not exit within %.0f s", secs);
    int code = proc_exit_code(&e->daemon);
    e->daemon.pid = 0;
    return code;
}

static void insert_one(const denv *e, const char *db, const char *coll, bson_t *doc)
{
    mongoc_client_t *c = mongoc_client_new(e->uri);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db, coll);
    bson_error_t err;
    ck_assert_msg(mongoc_collection_insert_one(col, doc, NULL, NULL, &err), "insert into %s.%s: %s", db, coll,
                  err.message);
    bson_destroy(doc);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
}

/* A filter naming only the target: the temporary collection is replicated all the same, renamed over the target,
 * and the source's table dropped; dropTarget replaces the target's rows; a target the filter leaves out takes the
 * temporary table with it. */
START_TEST(test_rename_across_databases)
{
    denv e;
    denv_start(&e, "ddlx", NULL, NULL);
    write_ini(&e, "rep_ddlx_src.*, rep_ddlx_dst.target, rep_ddlx_dst.keep", NULL);
    denv_insert_range(&e, "rep_ddlx_src", "a", 1, 50);
    denv_insert_range(&e, "rep_ddlx_dst", "keep", 1, 3);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));

    denv_rename(&e, "rep_ddlx_src", "a", "rep_ddlx_dst", "target", false);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_msg(table_exists("rep_ddlx_dst", "target"), "the renamed table is missing");
    ck_assert_int_eq(rows("rep_ddlx_dst", "target"), 50);
    ck_assert_msg(!table_exists("rep_ddlx_src", "a"), "the source's table was left behind");
    ck_assert_int_eq(temp_leftovers("rep_ddlx_dst"), 0);
    denv_expect_match(&e);

    /* dropTarget over an existing target */
    denv_insert_range(&e, "rep_ddlx_src", "b", 100, 120);
    denv_rename(&e, "rep_ddlx_src", "b", "rep_ddlx_dst", "target", true);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_int_eq(rows("rep_ddlx_dst", "target"), 21);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_ddlx_dst.target WHERE _id = '1'"), 0);
    ck_assert_msg(!table_exists("rep_ddlx_src", "b"), "the source's table was left behind");
    ck_assert_int_eq(temp_leftovers("rep_ddlx_dst"), 0);

    /* a target the filter leaves out: the temporary table is made, filled, then dropped at the rename */
    denv_insert_range(&e, "rep_ddlx_src", "c", 1, 5);
    denv_rename(&e, "rep_ddlx_src", "c", "rep_ddlx_dst", "unlisted", false);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_msg(!table_exists("rep_ddlx_dst", "unlisted") && !table_exists("rep_ddlx_src", "c"),
                  "a table of a collection the filter leaves out");
    ck_assert_int_eq(temp_leftovers("rep_ddlx_dst"), 0);
    ck_assert_msg(denv_file_contains(e.log, "-> rep_ddlx_dst.unlisted"), "no log line for the dropped table");
    ck_assert_int_eq(rows("rep_ddlx_dst", "keep"), 3);

    denv_drop_collection(&e, "rep_ddlx_dst", "unlisted"); /* left out: no table to compare with */
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_expect_match(&e);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.tables WHERE service = 'rep_ddlx'"), 2);
    denv_stop(&e);
}
END_TEST

/* Out of the filter the table goes; into it, the daemon stops before the entry, naming the remedy. */
START_TEST(test_rename_out_of_and_into_the_filter)
{
    denv e;
    denv_start(&e, "ddlio", NULL, NULL);
    write_ini(&e, "rep_ddlio_a.*", "rep_ddlio_a.hidden");
    denv_insert_range(&e, "rep_ddlio_a", "x", 1, 10);
    denv_insert_range(&e, "rep_ddlio_a", "y", 1, 3);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_int_eq(rows("rep_ddlio_a", "x"), 10);

    denv_rename(&e, "rep_ddlio_a", "x", "rep_ddlio_a", "hidden", false);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_msg(!table_exists("rep_ddlio_a", "x"), "the table renamed out of the filter is still there");
    ck_assert_msg(!table_exists("rep_ddlio_a", "hidden"), "a table for an excluded collection");
    ck_assert_msg(denv_file_contains(e.log, "renameCollection rep_ddlio_a.x -> rep_ddlio_a.hidden"),
                  "no log line for the table dropped by the rename");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.tables WHERE service = 'rep_ddlio'"), 1);

    denv_insert_range(&e, "rep_ddlio_a", "y", 4, 6);
    ck_assert(denv_wait_caught_up(&e, 60));
    uint64_t before = denv_checkpoint_ts(e.service);
    denv_rename(&e, "rep_ddlio_a", "hidden", "rep_ddlio_a", "back", false);
    denv_insert_range(&e, "rep_ddlio_a", "y", 7, 9);
    ck_assert_int_eq(wait_exit(&e, 60), EXIT_UNSUPPORTED);
    ck_assert_msg(denv_file_contains(e.log, "rep_ddlio_a.hidden -> rep_ddlio_a.back") &&
                      denv_file_contains(e.log, "--reimport"),
                  "the log does not say which rename or what to do");
    ck_assert_msg(denv_checkpoint_ts(e.service) == before, "the checkpoint moved past the rename it could not apply");
    ck_assert_msg(!table_exists("rep_ddlio_a", "back"), "an empty table for a collection with documents");
    ck_assert_int_eq(rows("rep_ddlio_a", "y"), 6);

    /* The remedy the message names: a new copy takes the collection as it is now. */
    const char *args[] = {"--reimport", NULL};
    denv_daemon_start_args(&e, args, NULL);
    ck_assert(denv_wait_caught_up(&e, 120));
    ck_assert_int_eq(rows("rep_ddlio_a", "back"), 10);
    ck_assert_int_eq(rows("rep_ddlio_a", "y"), 9);
    denv_stop(&e);
}
END_TEST

/* A view: no table, one log line; a time-series collection: a table of its measurements (tests/integration/
 * test_timeseries.c has the rest); collections with options: a table at the create. */
START_TEST(test_views_timeseries_and_options)
{
    denv e;
    denv_start(&e, "ddlv", NULL, NULL);
    denv_insert_range(&e, "rep_ddlv_a", "base", 1, 4);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));

    denv_command(&e, "rep_ddlv_a",
                 BCON_NEW("create", "v", "viewOn", "base", "pipeline", "[", "{", "$match", "{", "v", "{", "$gt",
                          BCON_INT32(10), "}", "}", "}", "]"));
    denv_command(&e, "rep_ddlv_a",
                 BCON_NEW("create", "weather", "timeseries", "{", "timeField", "t", "metaField", "m", "}"));
    insert_one(&e, "rep_ddlv_a", "weather",
               BCON_NEW("t", BCON_DATE_TIME(1700000000000), "m", "{", "station", BCON_INT32(7), "}", "temp",
                        BCON_DOUBLE(21.5)));
    denv_command(&e, "rep_ddlv_a", BCON_NEW("create", "capped", "capped", BCON_BOOL(true), "size", BCON_INT32(65536)));
    denv_command(&e, "rep_ddlv_a",
                 BCON_NEW("create", "clustered", "clusteredIndex", "{", "key", "{", "_id", BCON_INT32(1), "}", "unique",
                          BCON_BOOL(true), "}"));
    denv_command(&e, "rep_ddlv_a", BCON_NEW("create", "checked", "validator", "{", "v", "{", "$type", "int", "}", "}"));
    denv_insert_range(&e, "rep_ddlv_a", "capped", 1, 2);
    ck_assert(denv_wait_caught_up(&e, 60));

    ck_assert_msg(!table_exists("rep_ddlv_a", "v"), "a table for a view");
    const char *source = getenv("OPLOG2PG_TEST_SOURCE");
    bool stream = source != NULL && strcmp(source, "change_stream") == 0;
    if (stream) {
        /* a change stream never shows a time-series collection's buckets (docs/sources.md): no table, a notice */
        ck_assert_msg(!table_exists("rep_ddlv_a", "weather"), "a table for a time-series collection");
        ck_assert_msg(denv_file_contains(e.log, "rep_ddlv_a.weather (created at oplog entry") &&
                          denv_file_contains(e.log, "time-series"),
                      "no log line for the time-series collection");
    } else {
        ck_assert_int_eq(rows("rep_ddlv_a", "weather"), 1);
        ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_ddlv_a.weather WHERE (doc->>'temp')::float8 = 21.5 "
                                     "AND meta = '{\"station\": 7}' AND \"time\" = to_timestamp(1700000000)"),
                         1);
        ck_assert_msg(!denv_file_contains(e.log, "rep_ddlv_a.weather (created at oplog entry"),
                      "a notice that the time-series collection is not replicated");
    }
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM pg_tables WHERE schemaname = 'rep_ddlv_a' AND tablename LIKE "
                                 "'system.%'"),
                     0);
    ck_assert_msg(denv_file_contains(e.log, "rep_ddlv_a.v (created at oplog entry") &&
                      denv_file_contains(e.log, "is a view"),
                  "no log line for the view");
    ck_assert_msg(table_exists("rep_ddlv_a", "clustered") && table_exists("rep_ddlv_a", "checked"),
                  "an empty collection with options has no table");
    ck_assert_int_eq(rows("rep_ddlv_a", "capped"), 2);
    ck_assert_int_eq(rows("rep_ddlv_a", "clustered"), 0);
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

Suite *ddl_suite(void); /* called by the generated runner list */

Suite *ddl_suite(void)
{
    Suite *s = suite_create("ddl");
    TCase *tc = tcase_create("ddl");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_rename_across_databases);
    tcase_add_test(tc, test_rename_out_of_and_into_the_filter);
    tcase_add_test(tc, test_views_timeseries_and_options);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_ownership.c — oplog2pg touches only what it made. Each case is a reproduction that destroyed or wrote into
 * someone else's table before the catalog (oplog2pg.tables) and the one name mapping (map/names.h), and each ends
 * with a comparison (nothing lost, nothing doubled) and a look at the foreign tables (nothing touched):
 *   - dropDatabase of a database the filter leaves out, whose schema holds a table of someone else: no DDL at all;
 *     dropDatabase of an included database drops only the tables oplog2pg made there, and the schema only when
 *     oplog2pg made it and it is empty;
 *   - MongoDB databases named `public` and `oplog2pg`: `public` is an ordinary schema that is never dropped, and
 *     database `oplog2pg` lives in schema `$oplog2pg`, so its collection `checkpoint` is not the real checkpoint;
 *   - a table oplog2pg did not make, named like a collection (initial copy, tailing, rename target, another
 *     service's table): the daemon stops with exit 3 naming it, and resumes once the operator moved it;
 *   - two collections whose names share their first 63 bytes (PostgreSQL's limit): two tables, one dropped, one
 *     renamed, each the right one;
 *   - --reimport with two services: only the service's own tables are emptied.
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

/* ---- helpers ---- */

/* Rewrites the configuration with service and include patterns of the test's choosing. */
static void write_ini(const denv *e, const char *path, const char *service, const char *include)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "[mongodb]\nuri = %s\n[postgres]\nconninfo = %s\n[replication]\nservice = %s\ninclude = %s\n", e->uri,
            denv_pg_conninfo(), service, include);
    fclose(f);
}

/* Waits for the daemon to exit by itself; returns its exit code. */
static int wait_exit(denv *e, double secs)
{
    ck_assert_msg(proc_wait(&e->daemon, secs), "the daemon did not exit within %.0f s", secs);
    int code = proc_exit_code(&e->daemon);
    e->daemon.pid = 0;
    return code;
}

/* A fingerprint of a table's contents (every row as text, in order), to prove it was not touched. */
static void fingerprint(const char *qualified, char *out, size_t outlen)
{
    char sql[400];
    snprintf(sql, sizeof sql,
             "SELECT count(*) || ':' || coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') "
             "FROM %s t",
             qualified);
    denv_pg_text(sql, out, outlen);
}

static bool table_exists(const char *qualified)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM pg_class WHERE oid = to_regclass('%s')", qualified);
    return denv_pg_int(sql) == 1;
}

static bool schema_exists(const char *schema)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM pg_namespace WHERE nspname = '%s'", schema);
    return denv_pg_int(sql) == 1;
}

/* ---- dropDatabase ---- */

/* A dropDatabase in MongoDB used to run DROP SCHEMA ... CASCADE, also for databases the filter leaves out: the
 * operator's analytics table went with it. Now an excluded database gets no DDL, and an included one loses only
 * the tables oplog2pg made (its schema only when oplog2pg made it and nothing else is left in it). */
START_TEST(test_drop_database_touches_only_ours)
{
    denv e;
    denv_start(&e, "owndb", NULL, NULL);
    denv_pg_exec("DROP SCHEMA IF EXISTS analytics_owndb CASCADE; DROP SCHEMA IF EXISTS rep_owndb_b CASCADE;"
                 "CREATE SCHEMA analytics_owndb;"
                 "CREATE TABLE analytics_owndb.keepme (id int PRIMARY KEY, v text);"
                 "CREATE TABLE analytics_owndb.c (_id text PRIMARY KEY, doc jsonb NOT NULL);"
                 "INSERT INTO analytics_owndb.keepme VALUES (1, 'one'), (2, 'two');"
                 "INSERT INTO analytics_owndb.c VALUES ('1', '{\"mine\": true}');"
                 "CREATE SCHEMA rep_owndb_b;"
                 "CREATE TABLE rep_owndb_b.keepme (id int PRIMARY KEY, v text);"
                 "INSERT INTO rep_owndb_b.keepme VALUES (7, 'seven');");
    char fp_a[80], fp_ac[80], fp_b[80], now[80];
    fingerprint("analytics_owndb.keepme", fp_a, sizeof fp_a);
    fingerprint("analytics_owndb.c", fp_ac, sizeof fp_ac);
    fingerprint("rep_owndb_b.keepme", fp_b, sizeof fp_b);

    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_insert_range(&e, "analytics_owndb", "c", 1, 5); /* excluded */
    denv_insert_range(&e, "rep_owndb_a", "c", 1, 5);
    denv_insert_range(&e, "rep_owndb_b", "c", 1, 5); /* its schema is the operator's */
    denv_insert_range(&e, "rep_owndb_c", "c", 1, 5); /* its schema is oplog2pg's */
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert(table_exists("rep_owndb_b.c") && table_exists("rep_owndb_c.c"));

    denv_drop_database(&e, "analytics_owndb");
    denv_drop_database(&e, "rep_owndb_b");
    denv_drop_database(&e, "rep_owndb_c");
    denv_insert_range(&e, "rep_owndb_a", "c", 6, 8);
    ck_assert(denv_wait_caught_up(&e, 60));

    fingerprint("analytics_owndb.keepme", now, sizeof now);
    ck_assert_str_eq(now, fp_a);
    fingerprint("analytics_owndb.c", now, sizeof now);
    ck_assert_str_eq(now, fp_ac);
    fingerprint("rep_owndb_b.keepme", now, sizeof now);
    ck_assert_str_eq(now, fp_b);
    ck_assert_msg(!table_exists("rep_owndb_b.c"), "oplog2pg's table of the dropped database is still there");
    ck_assert_msg(schema_exists("rep_owndb_b"), "the operator's schema was dropped");
    ck_assert_msg(!schema_exists("rep_owndb_c"), "oplog2pg's empty schema of the dropped database is still there");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.tables WHERE db IN ('rep_owndb_b', 'rep_owndb_c', "
                                 "'analytics_owndb')"),
                     0);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.tables WHERE service = 'rep_owndb'"), 1);
    denv_expect_match(&e);
    denv_stop(&e);
    denv_pg_exec("DROP SCHEMA analytics_owndb CASCADE; DROP SCHEMA rep_owndb_b CASCADE");
}
END_TEST

/* ---- reserved database names ---- */

/* MongoDB database `oplog2pg` used to map onto the daemon's own schema: dropping its collection `checkpoint`
 * dropped the real checkpoint table. Database `public` is PostgreSQL's default schema, whose other tables must
 * survive a dropDatabase. */
START_TEST(test_databases_public_and_oplog2pg)
{
    denv e;
    denv_start(&e, "ownres", NULL, NULL);
    write_ini(&e, e.ini, e.service, "rep_ownres_*.*, public.*, oplog2pg.*");
    denv_pg_exec("DROP TABLE IF EXISTS public.important_ownres; DROP TABLE IF EXISTS public.c_ownres;"
                 "CREATE TABLE public.important_ownres (id int PRIMARY KEY, v text);"
                 "INSERT INTO public.important_ownres VALUES (1, 'keep me');");
    char fp[80], now[80];
    fingerprint("public.important_ownres", fp, sizeof fp);

    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_insert_range(&e, "public", "c_ownres", 1, 5);
    denv_insert_range(&e, "oplog2pg", "checkpoint", 1, 5);
    denv_insert_range(&e, "oplog2pg", "tables", 1, 3);
    denv_insert_range(&e, "rep_ownres_a", "c", 1, 3);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM \"$oplog2pg\".checkpoint"), 5);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM \"$oplog2pg\".tables"), 3);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM public.c_ownres"), 5);

    denv_drop_collection(&e, "oplog2pg", "checkpoint");
    denv_drop_database(&e, "public");
    denv_insert_range(&e, "rep_ownres_a", "c", 4, 6);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_msg(!table_exists("\"$oplog2pg\".checkpoint"), "the replicated collection's table was not dropped");
    ck_assert_msg(table_exists("oplog2pg.checkpoint"), "the real checkpoint table is gone");
    ck_assert_msg(!table_exists("public.c_ownres"), "oplog2pg's table in public was not dropped");
    ck_assert_msg(schema_exists("public"), "schema public was dropped");
    fingerprint("public.important_ownres", now, sizeof now);
    ck_assert_str_eq(now, fp);

    /* The service survives a restart, and database public is replicated again from scratch. */
    ck_assert(proc_stop(&e.daemon, 30));
    ck_assert_int_eq(proc_exit_code(&e.daemon), 0);
    e.daemon.pid = 0;
    denv_insert_range(&e, "public", "c_ownres", 10, 12);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_expect_match(&e);
    denv_expect_match_prefix(&e, "public");
    denv_expect_match_prefix(&e, "oplog2pg");
    denv_stop(&e);
    denv_pg_exec("DROP TABLE public.important_ownres");
}
END_TEST

/* ---- foreign tables ---- */

/* A table oplog2pg did not make, named like a collection, is never written to or dropped: the initial copy, a
 * tailed insert, a rename onto it and another service's table each stop the daemon with exit 3 and a message naming
 * the table; once the operator moves it, a restart resumes where the last commit ended. */
START_TEST(test_foreign_table_stops_with_exit_3)
{
    denv e;
    denv_start(&e, "ownfor", NULL, NULL);
    denv_pg_exec("DROP SCHEMA IF EXISTS rep_ownfor_a CASCADE; DROP SCHEMA IF EXISTS rep_ownfor_b CASCADE;"
                 "CREATE SCHEMA rep_ownfor_a;"
                 "CREATE TABLE rep_ownfor_a.c (_id text COLLATE \"C\" PRIMARY KEY, doc jsonb NOT NULL);"
                 "INSERT INTO rep_ownfor_a.c VALUES ('1', '{\"mine\": true}');");
    char fp[80], now[80];
    fingerprint("rep_ownfor_a.c", fp, sizeof fp);
    denv_insert_range(&e, "rep_ownfor_a", "c", 1, 5);
    denv_insert_range(&e, "rep_ownfor_a", "d", 1, 5);

    /* 1. The initial copy meets it. */
    denv_daemon_start(&e);
    ck_assert_int_eq(wait_exit(&e, 60), EXIT_CONFIG);
    ck_assert_msg(denv_file_contains(e.log, "rep_ownfor_a.c exists and was not made by oplog2pg"),
                  "the log does not name the table");
    fingerprint("rep_ownfor_a.c", now, sizeof now);
    ck_assert_str_eq(now, fp);

    /* The operator moves it; the copy goes on. */
    denv_pg_exec("ALTER TABLE rep_ownfor_a.c RENAME TO c_mine");
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_expect_match(&e);

    /* 2. A tailed insert meets one. */
    denv_pg_exec("CREATE SCHEMA rep_ownfor_b;"
                 "CREATE TABLE rep_ownfor_b.e (_id text COLLATE \"C\" PRIMARY KEY, doc jsonb NOT NULL);"
                 "INSERT INTO rep_ownfor_b.e VALUES ('1', '{\"mine\": 2}');");
    char fp_b[80];
    fingerprint("rep_ownfor_b.e", fp_b, sizeof fp_b);
    denv_insert_range(&e, "rep_ownfor_a", "c", 6, 8);
    denv_insert_range(&e, "rep_ownfor_b", "e", 1, 3);
    ck_assert_int_eq(wait_exit(&e, 60), EXIT_CONFIG);
    ck_assert_msg(denv_file_contains(e.log, "rep_ownfor_b.e exists and was not made by oplog2pg"),
                  "the log does not name the table");
    fingerprint("rep_ownfor_b.e", now, sizeof now);
    ck_assert_str_eq(now, fp_b);
    denv_pg_exec("ALTER TABLE rep_ownfor_b.e RENAME TO e_mine");
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_expect_match(&e);

    /* 3. A rename onto one. */
    denv_pg_exec("CREATE TABLE rep_ownfor_a.target (id int);"
                 "INSERT INTO rep_ownfor_a.target VALUES (42);");
    char fp_t[80];
    fingerprint("rep_ownfor_a.target", fp_t, sizeof fp_t);
    denv_rename(&e, "rep_ownfor_a", "d", "rep_ownfor_a", "target", false);
    ck_assert_int_eq(wait_exit(&e, 60), EXIT_CONFIG);
    ck_assert_msg(denv_file_contains(e.log, "rep_ownfor_a.target"), "the log does not name the rename's target");
    fingerprint("rep_ownfor_a.target", now, sizeof now);
    ck_assert_str_eq(now, fp_t);
    denv_pg_exec("ALTER TABLE rep_ownfor_a.target RENAME TO target_mine");
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_expect_match(&e);
    ck_assert_msg(!table_exists("rep_ownfor_a.d") && table_exists("rep_ownfor_a.target"), "the rename was not applied");

    /* 4. Another service whose patterns overlap this one's: its copy meets this service's tables. */
    char ini2[300];
    snprintf(ini2, sizeof ini2, "%s/other.ini", e.dir);
    write_ini(&e, ini2, "rep_ownfor_other", "rep_ownfor_a.*");
    char out[300];
    snprintf(out, sizeof out, "%s/other.out", e.dir);
    char fp_c[80];
    fingerprint("rep_ownfor_a.c", fp_c, sizeof fp_c);
    const char *args[] = {"-c", ini2, "run", NULL};
    ck_assert_int_eq(denv_run_command(&e, args, out), EXIT_CONFIG);
    ck_assert_msg(denv_file_contains(out, "belongs to oplog2pg service \"rep_ownfor\""),
                  "the other service did not name the owner");
    fingerprint("rep_ownfor_a.c", now, sizeof now);
    ck_assert_str_eq(now, fp_c);

    /* Nothing foreign was touched along the way. */
    fingerprint("rep_ownfor_a.c_mine", now, sizeof now);
    ck_assert_str_eq(now, fp);
    fingerprint("rep_ownfor_b.e_mine", now, sizeof now);
    ck_assert_str_eq(now, fp_b);
    fingerprint("rep_ownfor_a.target_mine", now, sizeof now);
    ck_assert_str_eq(now, fp_t);
    denv_insert_range(&e, "rep_ownfor_a", "c", 9, 9);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_expect_match(&e);
    denv_stop(&e);
    denv_pg_exec("DROP SCHEMA rep_ownfor_a CASCADE; DROP SCHEMA rep_ownfor_b CASCADE;"
                 "DELETE FROM oplog2pg.copy_state WHERE service = 'rep_ownfor_other'");
}
END_TEST

/* ---- long names ---- */

/* PostgreSQL keeps 63 bytes of a name. Two collections whose names share those 63 bytes used to meet in one table:
 * dropping one dropped the other's data. Now each gets its own shortened name (map/names.h), in the copy and in
 * tailing alike; a drop and a rename act on the right one. */
START_TEST(test_long_names_sharing_63_bytes)
{
    denv e;
    denv_start(&e, "ownlong", NULL, NULL);
    char base[64], l1[80], l2[80], l3[80], l4[80];
    memset(base, 'l', 63);
    base[63] = '\0';
    snprintf(l1, sizeof l1, "%s1", base);
    snprintf(l2, sizeof l2, "%s2", base);
    snprintf(l3, sizeof l3, "%s3", base);
    snprintf(l4, sizeof l4, "%s4", base);
    denv_insert_range(&e, "rep_ownlong_a", l1, 1, 3); /* before the start: the initial copy */
    denv_insert_range(&e, "rep_ownlong_a", l2, 1, 4);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_insert_range(&e, "rep_ownlong_a", l1, 4, 6); /* tailing */
    denv_insert_range(&e, "rep_ownlong_a", l3, 1, 2);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.tables WHERE db = 'rep_ownlong_a'"), 3);
    denv_expect_match(&e);

    denv_drop_collection(&e, "rep_ownlong_a", l1);
    denv_rename(&e, "rep_ownlong_a", l2, "rep_ownlong_b", l4, false);
    denv_insert_range(&e, "rep_ownlong_b", l4, 5, 6);
    ck_assert(denv_wait_caught_up(&e, 60));
    /* l3's table is still there with its rows, l1's and l2's are gone, l4's holds l2's rows and the new ones. */
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.tables WHERE db LIKE 'rep_ownlong_%'"), 2);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM pg_tables WHERE schemaname LIKE 'rep_ownlong_%'"), 2);
    ck_assert_int_eq(
        denv_pg_int("SELECT count(*) FROM pg_tables WHERE schemaname = 'rep_ownlong_b' AND length(tablename) = 63"), 1);
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* ---- --reimport ---- */

/* --reimport used to empty every table of oplog2pg's shape that matched the filter, another service's included. */
START_TEST(test_reimport_with_two_services)
{
    denv e;
    denv_start(&e, "ownri", NULL, NULL);
    /* The other service: its own namespaces, its own tables. */
    char ini2[300];
    snprintf(ini2, sizeof ini2, "%s/other.ini", e.dir);
    write_ini(&e, ini2, "rep_ownri_other", "other_ownri.*");
    denv_insert_range(&e, "other_ownri", "c", 1, 20);
    denv_insert_range(&e, "rep_ownri_a", "c", 1, 10);
    denv_pg_exec("DROP SCHEMA IF EXISTS rep_ownri_a CASCADE; CREATE SCHEMA rep_ownri_a;"
                 "CREATE TABLE rep_ownri_a.mine (_id text PRIMARY KEY, doc jsonb NOT NULL);"
                 "INSERT INTO rep_ownri_a.mine VALUES ('1', '{\"mine\": true}')");
    char fp_mine[80], fp_other[80], now[80];
    fingerprint("rep_ownri_a.mine", fp_mine, sizeof fp_mine);

    char out[300];
    snprintf(out, sizeof out, "%s/other.out", e.dir);
    const char *other_import[] = {"-c", ini2, "run", "--import-only", NULL};
    ck_assert_int_eq(denv_run_command(&e, other_import, out), 0);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM other_ownri.c"), 20);
    fingerprint("other_ownri.c", fp_other, sizeof fp_other);

    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_insert_range(&e, "rep_ownri_a", "c", 11, 12);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert(proc_stop(&e.daemon, 30));
    ck_assert_int_eq(proc_exit_code(&e.daemon), 0);
    e.daemon.pid = 0;

    /* --reimport of this service, with a filter that also takes in the other service's database: only this
     * service's tables are emptied and copied again. */
    write_ini(&e, e.ini, e.service, "rep_ownri_*.*, other_ownri.*");
    const char *reimport[] = {"--reimport", "--import-only", NULL};
    denv_daemon_start_args(&e, reimport, NULL);
    int code = wait_exit(&e, 60);
    ck_assert_msg(code == EXIT_CONFIG, "the reimport with an overlapping filter exited %d", code);
    ck_assert_msg(denv_file_contains(e.log, "belongs to oplog2pg service \"rep_ownri_other\""),
                  "the reimport did not name the other service's table");
    fingerprint("other_ownri.c", now, sizeof now);
    ck_assert_str_eq(now, fp_other);

    /* With its own filter again, the reimport goes through. */
    write_ini(&e, e.ini, e.service, "rep_ownri_*.*");
    denv_daemon_start_args(&e, reimport, NULL);
    ck_assert_int_eq(wait_exit(&e, 60), 0);
    ck_assert(denv_file_contains(e.log, "--reimport"));
    fingerprint("other_ownri.c", now, sizeof now);
    ck_assert_str_eq(now, fp_other);
    fingerprint("rep_ownri_a.mine", now, sizeof now);
    ck_assert_str_eq(now, fp_mine);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_expect_match(&e);
    denv_expect_match_prefix(&e, "other_ownri");
    denv_stop(&e);
    denv_pg_exec("DROP SCHEMA rep_ownri_a CASCADE");
}
END_TEST

Suite *ownership_suite(void); /* called by the generated runner list */

Suite *ownership_suite(void)
{
    Suite *s = suite_create("ownership");
    TCase *tc = tcase_create("ownership");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_drop_database_touches_only_ours);
    tcase_add_test(tc, test_databases_public_and_oplog2pg);
    tcase_add_test(tc, test_foreign_table_stops_with_exit_3);
    tcase_add_test(tc, test_long_names_sharing_63_bytes);
    tcase_add_test(tc, test_reimport_with_two_services);
    suite_add_tcase(s, tc);
    return s;
}

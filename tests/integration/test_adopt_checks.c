/*
 * test_adopt_checks.c — what `adopt = true` refuses and what it lets through (docs/mapping.md, "Existing tables").
 *
 *   - a table whose column has another type than the map says stops the start (exit 3), naming both types: text for
 *     integer, varchar(10) for text, integer for bigint; nothing is cast and nothing is written;
 *   - a column the map does not write that is NOT NULL without a default stops the start (every row would be
 *     refused), and so does a key column with a nondeterministic collation (two _ids would be one row);
 *   - a row trigger that runs before each write is named in a warning at every start; one that recurses into its own
 *     table ends in PostgreSQL's stack limit, and the op is a dead letter: replication goes on, nothing loops.
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

#define DB  "rep_adoptck_m"
#define DBT "rep_adopttg_m"

static void stop_daemon(denv *e)
{
    proc_signal(&e->daemon, SIGTERM);
    ck_assert(proc_wait(&e->daemon, 60));
    ck_assert_int_eq(proc_exit_code(&e->daemon), 0);
    e->daemon.pid = 0;
}

/* `run` stops at start with exit 3 and a message holding each of the needles (NULL-terminated); the table c is left
 * with no rows. */
static void expect_refused(denv *e, const char *name, const char *const *needles)
{
    char out[300];
    snprintf(out, sizeof out, "%s/%s.out", e->dir, name);
    const char *args[] = {"-c", e->ini, "run", NULL};
    ck_assert_int_eq(denv_run_command(e, args, out), EXIT_CONFIG);
    for (size_t i = 0; needles[i] != NULL; i++)
        ck_assert_msg(denv_file_contains(out, needles[i]), "%s: the message lacks \"%s\"", name, needles[i]);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM " DB ".c"), 0);
}

START_TEST(test_adopt_refuses_what_cannot_be_written)
{
    denv e;
    denv_start(&e, "adoptck", NULL,
               "\n[map " DB ".c]\nadopt = true\nrest = drop\ncolumn.k = text from _id\ncolumn.a = integer\n"
               "column.s = text\ncolumn.n = bigint\n");
    denv_pg_exec("CREATE SCHEMA " DB);
    /* documents for the copy (none may arrive while the table is refused); two keys apart only by case */
    mongoc_client_t *c = mongoc_client_new(e.uri);
    mongoc_collection_t *col = mongoc_client_get_collection(c, DB, "c");
    const char *ids[] = {"A-17", "a-17", "B-1"};
    for (int i = 0; i < 3; i++) {
        bson_error_t err;
        bson_t *d = BCON_NEW("_id", BCON_UTF8(ids[i]), "a", BCON_INT32(i), "s", BCON_UTF8("x"), "n", BCON_INT64(i));
        ck_assert_msg(mongoc_collection_insert_one(col, d, NULL, NULL, &err), "%s", err.message);
        bson_destroy(d);
    }
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);

    /* wrong types, one at a time: never cast */
    static const struct {
        const char *col, *has, *wants;
    } wrong[] = {{"a", "text", "integer"}, {"s", "character varying(10)", "text"}, {"n", "integer", "bigint"}};
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        char sql[512];
        snprintf(sql, sizeof sql,
                 "DROP TABLE IF EXISTS " DB ".c; CREATE TABLE " DB ".c (k text PRIMARY KEY, a integer, s text, "
                 "n bigint); ALTER TABLE " DB ".c ALTER COLUMN %s TYPE %s USING NULL",
                 wrong[i].col, wrong[i].has);
        denv_pg_exec(sql);
        char is[128];
        snprintf(is, sizeof is, "is %s, the map of " DB ".c says %s", wrong[i].has, wrong[i].wants);
        const char *needles[] = {is, NULL};
        expect_refused(&e, wrong[i].col, needles);
    }

    /* a NOT NULL column the map does not write, without a default */
    denv_pg_exec("DROP TABLE " DB ".c; CREATE TABLE " DB ".c (k text PRIMARY KEY, a integer, s text, n bigint, "
                 "owner text NOT NULL)");
    const char *notnull[] = {"column owner of " DB ".c is NOT NULL without a default", "give the column a default",
                             NULL};
    expect_refused(&e, "notnull", notnull);

    /* a key whose collation finds "A-17" and "a-17" equal */
    denv_pg_exec("CREATE COLLATION " DB ".nocase (provider = icu, locale = 'und-u-ks-level2', deterministic = false)");
    denv_pg_exec("DROP TABLE " DB ".c; CREATE TABLE " DB ".c (k text COLLATE " DB ".nocase PRIMARY KEY, a integer, "
                 "s text, n bigint)");
    const char *nocase[] = {"key column k of " DB ".c has the nondeterministic collation nocase", NULL};
    expect_refused(&e, "nocase", nocase);
    /* the same in the unique index alone (the column's collation is the default) */
    denv_pg_exec("DROP TABLE " DB ".c; CREATE TABLE " DB ".c (k text NOT NULL, a integer, s text, n bigint); "
                 "CREATE UNIQUE INDEX c_k_nocase ON " DB ".c (k COLLATE " DB ".nocase)");
    const char *nocase_index[] = {"unique index c_k_nocase on the key of " DB ".c has the nondeterministic collation",
                                  NULL};
    expect_refused(&e, "nocase_index", nocase_index);

    /* what the map may adopt: a default, an identity, a generated column and a nullable one; it is written to */
    denv_pg_exec("DROP TABLE " DB ".c; CREATE TABLE " DB ".c (k text PRIMARY KEY, a integer, s text, n bigint, "
                 "owner text NOT NULL DEFAULT 'mine', seq bigint GENERATED ALWAYS AS IDENTITY, "
                 "twice bigint GENERATED ALWAYS AS (n * 2) STORED, note text)");
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    int64_t n = denv_pg_int("SELECT count(*) FROM " DB ".c WHERE owner = 'mine' AND seq IS NOT NULL");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM " DB ".c WHERE twice = 2 * n AND k IN ('A-17', 'a-17')"), 2);
    if (n != 3)
        denv_show_log(&e);
    ck_assert_int_eq(n, 3);
    stop_daemon(&e);
    denv_stop(&e);
    denv_pg_exec("DROP SCHEMA " DB " CASCADE");
}
END_TEST

START_TEST(test_adopt_triggers)
{
    denv e;
    denv_start(&e, "adopttg", NULL,
               "\n[map " DBT ".c]\nadopt = true\nrest = drop\ncolumn.k = integer from _id\ncolumn.v = integer\n");
    /* a trigger before each row that skips v = 13, and one after each row that inserts another row into the same
     * table for v = 99 (which inserts another, until PostgreSQL's stack limit stops it) */
    denv_pg_exec("CREATE SCHEMA " DBT "; CREATE TABLE " DBT ".c (k integer PRIMARY KEY, v integer);"
                 "CREATE FUNCTION " DBT ".skip() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                 "  IF NEW.v = 13 THEN RETURN NULL; END IF; RETURN NEW; END $$;"
                 "CREATE TRIGGER skip13 BEFORE INSERT OR UPDATE ON " DBT ".c FOR EACH ROW EXECUTE FUNCTION " DBT
                 ".skip();"
                 "CREATE FUNCTION " DBT ".again() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                 "  IF NEW.v = 99 THEN INSERT INTO " DBT ".c VALUES (NEW.k + 100, 99); END IF; RETURN NULL; END $$;"
                 "CREATE TRIGGER again AFTER INSERT ON " DBT ".c FOR EACH ROW EXECUTE FUNCTION " DBT ".again();");
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_msg(denv_wait_log(&e, "has the trigger skip13 before each row written", 30), "no warning names it");
    ck_assert(!denv_file_contains(e.log, "has the trigger again "));

    mongoc_client_t *c = mongoc_client_new(e.uri);
    mongoc_collection_t *col = mongoc_client_get_collection(c, DBT, "c");
    bson_error_t err;
    const int32_t vs[] = {1, 13, 99, 2};
    for (int i = 0; i < 4; i++) {
        bson_t *d = BCON_NEW("_id", BCON_INT32(i + 1), "v", BCON_INT32(vs[i]));
        ck_assert_msg(mongoc_collection_insert_one(col, d, NULL, NULL, &err), "%s", err.message);
        bson_destroy(d);
    }
    ck_assert(denv_wait_caught_up(&e, 120));
    /* 1 and 2 are rows, 13 was skipped by the trigger (as the warning said it may be), 99 is a dead letter */
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM " DBT ".c"), 2);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM " DBT ".c WHERE k IN (1, 4)"), 2);
    char msg[1024];
    denv_pg_text(
        "SELECT coalesce(string_agg(sqlstate || ' ' || doc_id, ','), '') FROM oplog2pg.dead_letter WHERE db = '" DBT
        "'",
        msg, sizeof msg);
    ck_assert_msg(strcmp(msg, "54001 3") == 0, "dead letters: %s", msg);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
    stop_daemon(&e);
    denv_stop(&e);
    denv_pg_exec("DROP SCHEMA " DBT " CASCADE");
}
END_TEST

Suite *adopt_checks_suite(void); /* called by the generated runner list */

Suite *adopt_checks_suite(void)
{
    Suite *s = suite_create("adopt_checks");
    TCase *tc = tcase_create("adopt_checks");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_adopt_refuses_what_cannot_be_written);
    tcase_add_test(tc, test_adopt_triggers);
    suite_add_tcase(s, tc);
    return s;
}

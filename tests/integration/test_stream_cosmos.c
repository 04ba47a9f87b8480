/*
 * test_stream_cosmos.c — [mongodb] delete_reconcile against mongosim --flavor cosmos (Azure Cosmos DB for MongoDB RU:
 * events without operationType, no delete events, fullDocument "updateLookup" required): after a reconciliation
 * PostgreSQL equals MongoDB (deleted documents gone, the rest intact), and documents written while reconciliations
 * run are never deleted.
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
#include "daemon/exitcodes.h"

Suite *stream_cosmos_suite(void);

#define WAIT_S 60

/* The newest write's ts as hello reports it (lastWrite.opTime.ts): the server does not let the test read the oplog. */
static uint64_t newest_ts(const denv *e)
{
    mongoc_client_t *c = mongoc_client_new(e->uri);
    ck_assert_ptr_nonnull(c);
    bson_t *cmd = BCON_NEW("hello", BCON_INT32(1)), reply;
    bson_error_t err;
    ck_assert_msg(mongoc_client_command_simple(c, "admin", cmd, NULL, &reply, &err), "%s", err.message);
    bson_iter_t it, ts;
    uint32_t secs = 0, inc = 0;
    ck_assert(bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "lastWrite.opTime.ts", &ts));
    bson_iter_timestamp(&ts, &secs, &inc);
    bson_destroy(&reply);
    bson_destroy(cmd);
    mongoc_client_destroy(c);
    return (uint64_t)secs << 32 | inc;
}

static void wait_caught_up(denv *e)
{
    uint64_t want = newest_ts(e);
    double until = denv_now() + WAIT_S;
    while (denv_now() < until) {
        if (denv_checkpoint_ts(e->service) >= want)
            return;
        if (e->daemon.pid != 0 && proc_wait(&e->daemon, 0.0)) {
            denv_show_log(e);
            ck_abort_msg("the daemon exited with %d while catching up", proc_exit_code(&e->daemon));
        }
        usleep(50 * 1000);
    }
    denv_show_log(e);
    ck_abort_msg("the daemon did not catch up within %d s", WAIT_S);
}

static const char pass_line[] = "delete reconciliation: ";

/* The reconciliation passes the daemon logged, and the rows they deleted in all. */
static int passes(const denv *e, long long *deleted)
{
    FILE *f = fopen(e->log, "r");
    int n = 0;
    long long sum = 0;
    char line[2048];
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        const char *p = strstr(line, pass_line);
        unsigned long long tables, ids, rows;
        if (p != NULL && sscanf(p + strlen(pass_line), "%llu tables, %llu _ids read from MongoDB, %llu rows deleted",
                                &tables, &ids, &rows) == 3) {
            n++;
            sum += (long long)rows;
        }
    }
    if (f != NULL)
        fclose(f);
    if (deleted)
        *deleted = sum;
    return n;
}

/* Waits for `more` passes after those logged now: the last of them began after this call. */
static void wait_passes(denv *e, int more)
{
    int want = passes(e, NULL) + more;
    double until = denv_now() + WAIT_S;
    while (denv_now() < until) {
        if (passes(e, NULL) >= want)
            return;
        if (e->daemon.pid != 0 && proc_wait(&e->daemon, 0.0)) {
            denv_show_log(e);
            ck_abort_msg("the daemon exited with %d", proc_exit_code(&e->daemon));
        }
        usleep(100 * 1000);
    }
    denv_show_log(e);
    ck_abort_msg("no delete reconciliation within %d s", WAIT_S);
}

static mongoc_collection_t *coll_of(mongoc_client_t *c, const char *db, const char *name)
{
    return mongoc_client_get_collection(c, db, name);
}

static void one(mongoc_collection_t *c, bool ok, const bson_error_t *err)
{
    (void)c;
    ck_assert_msg(ok, "%s", err->message);
}

START_TEST(test_cosmos_reconcile)
{
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim --flavor cosmos");
    const char *sim_args[] = {"--flavor", "cosmos", NULL};
    denv e;
    denv_start(&e, "cosmosrc", sim_args, "\n[mongodb]\nsource = change_stream\ndelete_reconcile = 1s\n");
    char db[64];
    snprintf(db, sizeof db, "%s_a", e.prefix);
    /* Documents there before the start come by the initial copy (its start the operationTime of a stream reply:
     * the tokens are opaque), the rest as events; some of the copied ones are deleted below. */
    denv_insert_range(&e, db, "c", 1, 300);
    denv_daemon_start(&e);
    if (!denv_wait_log(&e, "ready:", WAIT_S))
        denv_show_log(&e);
    ck_assert_msg(denv_file_contains(e.log, "ready:"), "the daemon did not get ready");
    ck_assert(denv_file_contains(e.log, "delete_reconcile deletes the rows of documents no longer in MongoDB"));
    {
        char out[400];
        snprintf(out, sizeof out, "%s/check.out", e.dir);
        const char *check[] = {"-c", e.ini, "check", NULL};
        int code = denv_run_command(&e, check, out);
        ck_assert_msg(denv_file_contains(out, "delete_reconcile deletes the rows of documents gone from MongoDB") &&
                          denv_file_contains(out, "reads a change stream"),
                      "check does not say the server is read with delete_reconcile (exit %d)", code);
    }

    mongoc_client_t *c = mongoc_client_new(e.uri);
    ck_assert_ptr_nonnull(c);
    mongoc_collection_t *a = coll_of(c, db, "a"), *b = coll_of(c, db, "b");
    bson_error_t err;
    /* inserts, updates, replaces and deletes; a document deleted and inserted again */
    denv_insert_range(&e, db, "a", 1, 100);
    denv_insert_range(&e, db, "b", 1, 10);
    for (int i = 21; i <= 40; i++) {
        bson_t *q = BCON_NEW("_id", BCON_INT32(i)), *u = BCON_NEW("$set", "{", "touched", BCON_INT32(i * 7), "}");
        one(a, mongoc_collection_update_one(a, q, u, NULL, NULL, &err), &err);
        bson_destroy(q);
        bson_destroy(u);
    }
    {
        bson_t *q = BCON_NEW("_id", BCON_INT32(45)), *r = BCON_NEW("replaced", BCON_BOOL(true));
        one(a, mongoc_collection_replace_one(a, q, r, NULL, NULL, &err), &err);
        bson_destroy(q);
        bson_destroy(r);
    }
    /* _ids whose key text COPY's text format must escape (a backslash, a tab, a newline), and other types: a row
     * whose _id went into the anti-join in another form would be deleted, and the comparison would miss it. */
    {
        bson_oid_t oid;
        bson_oid_init_from_string(&oid, "65a1f0c2e4b0a1b2c3d4e5f6");
        bson_t *docs[] = {
            BCON_NEW("_id", BCON_UTF8("back\\slash"), "k", BCON_INT32(1)),
            BCON_NEW("_id", BCON_UTF8("tab\there"), "k", BCON_INT32(2)),
            BCON_NEW("_id", BCON_UTF8("new\nline\r"), "k", BCON_INT32(3)),
            BCON_NEW("_id", BCON_UTF8("quote\"d \u00e9"), "k", BCON_INT32(4)),
            BCON_NEW("_id", BCON_OID(&oid), "k", BCON_INT32(5)),
            BCON_NEW("_id", BCON_DOUBLE(2.5), "k", BCON_INT32(6)),
            BCON_NEW("_id", "{", "x", BCON_INT32(1), "y", BCON_UTF8("a\\b"), "}", "k", BCON_INT32(7)),
        };
        for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
            one(b, mongoc_collection_insert_one(b, docs[i], NULL, NULL, &err), &err);
            bson_destroy(docs[i]);
        }
    }
    long long deletes = 0;
    for (int i = 1; i <= 20; i++) {
        bson_t *q = BCON_NEW("_id", BCON_INT32(i));
        one(a, mongoc_collection_delete_one(a, q, NULL, NULL, &err), &err);
        bson_destroy(q);
        deletes++;
    }
    for (int i = 60; i <= 70; i++) {
        bson_t *q = BCON_NEW("_id", BCON_INT32(i));
        one(a, mongoc_collection_delete_one(a, q, NULL, NULL, &err), &err);
        bson_destroy(q);
        deletes++;
    }
    {
        bson_t *q = BCON_NEW("_id", BCON_INT32(5));
        one(b, mongoc_collection_delete_one(b, q, NULL, NULL, &err), &err);
        bson_destroy(q);
        deletes++;
    }
    {
        mongoc_collection_t *cc = coll_of(c, db, "c");
        for (int i = 100; i < 110; i++) {
            bson_t *q = BCON_NEW("_id", BCON_INT32(i));
            one(cc, mongoc_collection_delete_one(cc, q, NULL, NULL, &err), &err);
            bson_destroy(q);
            deletes++;
        }
        mongoc_collection_destroy(cc);
    }
    {
        bson_t *d = BCON_NEW("_id", BCON_INT32(10), "again", BCON_BOOL(true)); /* deleted above, inserted again */
        one(a, mongoc_collection_insert_one(a, d, NULL, NULL, &err), &err);
        bson_destroy(d);
    }
    wait_caught_up(&e);
    wait_passes(&e, 2);
    denv_expect_match_prefix(&e, db);
    long long deleted = 0;
    passes(&e, &deleted);
    /* every deleted document's row went, and nothing else (10 came back: deleted then, and written again) */
    ck_assert_int_eq(deleted, deletes - 1);
    /* `status` says so */
    {
        char out[400];
        snprintf(out, sizeof out, "%s/status.out", e.dir);
        const char *status[] = {"-c", e.ini, "status", NULL};
        denv_run_command(&e, status, out);
        char want[64];
        snprintf(want, sizeof want, "deletes reconciled: %lld", deleted);
        ck_assert_msg(denv_file_contains(out, want), "status does not say \"%s\"", want);
    }

    /* Inserts and updates while reconciliations run, one a few milliseconds, for several intervals: a row of a
     * document that exists is never deleted (each document here is written once, so a row deleted by mistake
     * would never come back, and the comparison would see it missing). */
    double until = denv_now() + 5.0;
    int id = 1000;
    while (denv_now() < until) {
        bson_t *d = BCON_NEW("_id", BCON_INT32(id), "n", BCON_INT32(id));
        one(a, mongoc_collection_insert_one(a, d, NULL, NULL, &err), &err);
        bson_destroy(d);
        bson_t *q = BCON_NEW("_id", BCON_INT32(80 + id % 20)), *u = BCON_NEW("$inc", "{", "hits", BCON_INT32(1), "}");
        one(a, mongoc_collection_update_one(a, q, u, NULL, NULL, &err), &err);
        bson_destroy(q);
        bson_destroy(u);
        id++;
        usleep(5 * 1000);
    }
    wait_caught_up(&e);
    wait_passes(&e, 2);
    denv_expect_match_prefix(&e, db);
    passes(&e, &deleted);
    ck_assert_int_eq(deleted, deletes - 1);
    ck_assert_int_ge(passes(&e, NULL), 5);

    /* A reconciliation PostgreSQL fails with an error a retry may cure (a trigger raising 40001 on a delete from the
     * table): the session ends uncommitted and the next one goes on; no row is deleted meanwhile and nothing is set
     * aside; once the cause is gone a later pass deletes the rows. */
    char sql[1024], tab[256];
    snprintf(sql, sizeof sql,
             "SELECT format('%%I.%%I', schema_name, table_name) FROM oplog2pg.tables WHERE service = '%s' AND db = "
             "'%s' AND coll = 'a'",
             e.service, db);
    denv_pg_text(sql, tab, sizeof tab);
    ck_assert_msg(tab[0] != '\0', "no table for %s.a", db);
    snprintf(sql, sizeof sql,
             "CREATE OR REPLACE FUNCTION public.cosmos_test_hold() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
             "RAISE EXCEPTION 'held by the test' USING ERRCODE = '40001'; END $$; CREATE TRIGGER cosmos_test_hold "
             "BEFORE DELETE ON %s FOR EACH ROW EXECUTE FUNCTION public.cosmos_test_hold()",
             tab);
    denv_pg_exec(sql);
    int before = passes(&e, NULL);
    for (int i = 81; i <= 85; i++) {
        bson_t *q = BCON_NEW("_id", BCON_INT32(i));
        one(a, mongoc_collection_delete_one(a, q, NULL, NULL, &err), &err);
        bson_destroy(q);
        deletes++;
    }
    denv_insert_range(&e, db, "a", 3001, 3010);
    ck_assert_msg(denv_wait_log(&e, "held by the test", WAIT_S), "the reconciliation did not meet the trigger");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s WHERE _id IN ('81', '82', '83', '84', '85')", tab);
    ck_assert_int_eq(denv_pg_int(sql), 5);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM oplog2pg.dead_letter WHERE service = '%s'", e.service);
    ck_assert_int_eq(denv_pg_int(sql), 0);
    ck_assert_int_eq(passes(&e, NULL), before); /* no pass completed */
    snprintf(sql, sizeof sql, "DROP TRIGGER cosmos_test_hold ON %s; DROP FUNCTION public.cosmos_test_hold()", tab);
    denv_pg_exec(sql);
    wait_caught_up(&e);
    wait_passes(&e, 2);
    denv_expect_match_prefix(&e, db);
    passes(&e, &deleted);
    ck_assert_int_eq(deleted, deletes - 1);

    mongoc_collection_destroy(a);
    mongoc_collection_destroy(b);
    mongoc_client_destroy(c);
    denv_stop(&e);
}
END_TEST

/* Without the option the server is refused at start, and the message names the option. */
START_TEST(test_cosmos_refused_names_option)
{
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim --flavor cosmos");
    const char *sim_args[] = {"--flavor", "cosmos", NULL};
    denv e;
    denv_start(&e, "cosmosno", sim_args, NULL);
    char db[64];
    snprintf(db, sizeof db, "%s_a", e.prefix);
    denv_insert_range(&e, db, "a", 1, 5);
    denv_daemon_start(&e);
    ck_assert_msg(proc_wait(&e.daemon, WAIT_S), "the daemon did not stop");
    ck_assert_int_ne(proc_exit_code(&e.daemon), 0);
    if (!denv_file_contains(e.log, "unless [mongodb] delete_reconcile is set (docs/sources.md)"))
        denv_show_log(&e);
    ck_assert_msg(denv_file_contains(e.log, "unless [mongodb] delete_reconcile is set (docs/sources.md)"),
                  "the refusal does not name delete_reconcile");
    e.daemon.pid = 0;
    /* `check` says the same, and exits with the configuration code */
    char out[400];
    snprintf(out, sizeof out, "%s/check.out", e.dir);
    const char *check[] = {"-c", e.ini, "check", NULL};
    ck_assert_int_eq(denv_run_command(&e, check, out), EXIT_CONFIG);
    ck_assert_msg(denv_file_contains(out, "read only with [mongodb] delete_reconcile set"),
                  "check does not name delete_reconcile");
    denv_stop(&e);
}
END_TEST

Suite *stream_cosmos_suite(void)
{
    Suite *s = suite_create("stream_cosmos");
    TCase *tc = tcase_create("cosmos");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_cosmos_reconcile);
    tcase_add_test(tc, test_cosmos_refused_names_option);
    suite_add_tcase(s, tc);
    return s;
}

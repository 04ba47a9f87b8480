/*
 * test_sink.c — the PostgreSQL sink against a real PostgreSQL (OPLOG2PG_TEST_PG): COPY and pipelined insert runs,
 * updates in all three forms, deletes, DDL, the checkpoint committed with the rows, the duplicate fallback, and the
 * fence that keeps a second daemon off a service.
 */
#include <check.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sink/pg.h"

static const char *conninfo(void)
{
    const char *c = getenv("OPLOG2PG_TEST_PG");
    ck_assert_msg(c != NULL, "OPLOG2PG_TEST_PG is not set: run through scripts/with-pg.sh");
    return c;
}

/* One value from a query, as text ("" for no row, "NULL" for null). Caller frees. */
static char *query1(const char *sql)
{
    PGconn *c = PQconnectdb(conninfo());
    ck_assert_msg(PQstatus(c) == CONNECTION_OK, "%s", PQerrorMessage(c));
    PGresult *r = PQexec(c, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(c));
    char *v = strdup(PQntuples(r) == 0 ? "" : PQgetisnull(r, 0, 0) ? "NULL" : PQgetvalue(r, 0, 0));
    PQclear(r);
    PQfinish(c);
    return v;
}

static void expect(const char *sql, const char *want)
{
    char *got = query1(sql);
    ck_assert_msg(strcmp(got, want) == 0, "%s\n  want: %s\n  got:  %s", sql, want, got);
    free(got);
}

static sink *open_sink(const char *service, uint32_t copy_min_rows)
{
    sink_config cfg = {.conninfo = conninfo(), .service = service, .copy_min_rows = copy_min_rows};
    sink *s = sink_new(&cfg);
    ck_assert_ptr_nonnull(s);
    ck_assert_msg(sink_connect(s) == SINK_OK, "connect: %s", sink_error(s));
    return s;
}

static void add_json(sink_batch *b, const char *json)
{
    bson_error_t err;
    bson_t *doc = bson_new_from_json((const uint8_t *)json, -1, &err);
    ck_assert_msg(doc != NULL, "%s: %s", json, err.message);
    ck_assert(sink_batch_add(b, doc));
    bson_destroy(doc);
}

static bson_value_t int_id(int32_t v)
{
    bson_value_t id = {.value_type = BSON_TYPE_INT32};
    id.value.v_int32 = v;
    return id;
}

/* Insert runs both ways, an update of each form, a delete, then commit: rows and checkpoint land together. */
START_TEST(test_writes_and_checkpoint)
{
    for (int copy = 0; copy < 2; copy++) {
        char service[32], db[32];
        snprintf(service, sizeof service, "t_writes_%d", copy);
        snprintf(db, sizeof db, "sinkdb%d", copy);
        sink *s = open_sink(service, copy ? 1 : 1000000);
        op_pos none;
        ck_assert_int_eq(sink_read_checkpoint(s, &none), 0);

        sink_batch *b = sink_batch_new();
        for (int i = 1; i <= 5; i++) {
            char json[128];
            snprintf(json, sizeof json, "{\"_id\": %d, \"n\": %d, \"tags\": [\"a\", \"b\"], \"sub\": {\"x\": 1}}", i,
                     i);
            add_json(b, json);
        }
        op_pos pos = {.secs = 100, .inc = 1, .term = 1};
        ck_assert_msg(sink_insert_batch(s, db, "c", b, &pos) == SINK_OK, "%s", sink_error(s));

        bson_value_t id2 = int_id(2), id3 = int_id(3), id4 = int_id(4);
        bson_t *diff = BCON_NEW("$v", BCON_INT32(2), "diff", "{", "u", "{", "n", BCON_INT32(20), "}", "ssub", "{", "i",
                                "{", "y", BCON_INT32(2), "}", "}", "}");
        bson_t *mod = BCON_NEW("$v", BCON_INT32(1), "$set", "{", "n", BCON_INT32(30), "}", "$unset", "{", "tags",
                               BCON_BOOL(true), "}");
        bson_t *repl = BCON_NEW("_id", BCON_INT32(4), "replaced", BCON_BOOL(true));
        pos.inc = 2;
        ck_assert(sink_update(s, db, "c", &id2, OP_FORM_DIFF, diff, &pos) == SINK_OK);
        ck_assert(sink_update(s, db, "c", &id3, OP_FORM_MODIFIER, mod, &pos) == SINK_OK);
        ck_assert(sink_update(s, db, "c", &id4, OP_FORM_REPLACE, repl, &pos) == SINK_OK);
        bson_value_t id5 = int_id(5);
        ck_assert(sink_delete(s, db, "c", &id5, &pos) == SINK_OK);
        pos.inc = 3;
        ck_assert_msg(sink_commit(s, &pos) == SINK_OK, "%s", sink_error(s));

        char sql[256];
        snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.c", db);
        expect(sql, "4");
        snprintf(sql, sizeof sql, "SELECT doc->>'n' || (doc->'sub')::text FROM %s.c WHERE _id = '2'", db);
        expect(sql, "20{\"x\": 1, \"y\": 2}");
        snprintf(sql, sizeof sql, "SELECT (doc->>'n') || coalesce(doc->>'tags', '-') FROM %s.c WHERE _id = '3'", db);
        expect(sql, "30-");
        snprintf(sql, sizeof sql, "SELECT doc::text FROM %s.c WHERE _id = '4'", db);
        expect(sql, "{\"_id\": 4, \"replaced\": true}");
        snprintf(sql, sizeof sql,
                 "SELECT ts_sec || ':' || ts_inc || '/' || term FROM oplog2pg.checkpoint "
                 "WHERE service = '%s'",
                 service);
        expect(sql, "100:3/1");
        const sink_stats *st = sink_get_stats(s);
        ck_assert_uint_eq(copy ? st->rows_copied : st->rows_inserted, 5);
        ck_assert_uint_eq(st->commits, 1);

        op_pos back;
        ck_assert_int_eq(sink_read_checkpoint(s, &back), 1);
        ck_assert_uint_eq(back.secs, 100);
        ck_assert_uint_eq(back.inc, 3);
        ck_assert_int_eq(back.term, 1);

        bson_destroy(diff);
        bson_destroy(mod);
        bson_destroy(repl);
        sink_batch_free(b);
        sink_free(s);
    }
}
END_TEST

/* Nothing is visible before the commit, and a lost connection loses the rows and the checkpoint together. */
START_TEST(test_uncommitted_is_invisible)
{
    sink *s = open_sink("t_uncommitted", 1);
    sink_batch *b = sink_batch_new();
    add_json(b, "{\"_id\": \"a\"}");
    add_json(b, "{\"_id\": \"b\"}");
    op_pos pos = {.secs = 7, .inc = 1, .term = 2};
    ck_assert(sink_insert_batch(s, "sinkvis", "c", b, &pos) == SINK_OK);
    expect("SELECT count(*) FROM pg_tables WHERE schemaname = 'sinkvis'", "0");
    sink_disconnect(s);
    expect("SELECT coalesce(ts_sec::text, 'none') FROM oplog2pg.checkpoint WHERE service = 't_uncommitted'", "none");
    sink_batch_free(b);
    sink_free(s);
}
END_TEST

/* A COPY that meets existing _ids (a replay) is re-sent as upserts, and the documents it carries win. */
START_TEST(test_duplicate_fallback)
{
    sink *s = open_sink("t_dup", 1);
    sink_batch *b = sink_batch_new();
    add_json(b, "{\"_id\": 1, \"v\": \"old\"}");
    op_pos pos = {.secs = 1, .inc = 1, .term = 1};
    ck_assert(sink_insert_batch(s, "sinkdup", "c", b, &pos) == SINK_OK);
    ck_assert(sink_commit(s, &pos) == SINK_OK);

    sink_batch_reset(b);
    add_json(b, "{\"_id\": 1, \"v\": \"new\"}");
    add_json(b, "{\"_id\": 2, \"v\": \"two\"}");
    pos.inc = 2;
    ck_assert_msg(sink_insert_batch(s, "sinkdup", "c", b, &pos) == SINK_OK, "%s", sink_error(s));
    ck_assert_msg(sink_commit(s, &pos) == SINK_OK, "%s", sink_error(s));
    ck_assert_uint_eq(sink_get_stats(s)->dup_fallbacks, 1);
    expect("SELECT string_agg(doc->>'v', ',' ORDER BY _id) FROM sinkdup.c", "new,two");
    sink_batch_free(b);
    sink_free(s);
}
END_TEST

/* A second sink on the same service is refused while the first holds it. */
START_TEST(test_fence)
{
    sink *a = open_sink("t_fence", 1);
    sink_config cfg = {.conninfo = conninfo(), .service = "t_fence"};
    sink *b = sink_new(&cfg);
    ck_assert_int_eq(sink_connect(b), SINK_ERR_FENCED);
    ck_assert_msg(strstr(sink_error(b), "another oplog2pg") != NULL, "%s", sink_error(b));
    sink_free(a);
    /* Once the first is gone, the service is free again. */
    ck_assert_msg(sink_connect(b) == SINK_OK, "%s", sink_error(b));
    sink_free(b);
}
END_TEST

/* DDL: rename within and across databases, drop, drop database. */
START_TEST(test_ddl)
{
    sink *s = open_sink("t_ddl", 1);
    sink_batch *b = sink_batch_new();
    add_json(b, "{\"_id\": 1}");
    op_pos pos = {.secs = 1, .inc = 1, .term = 1};
    ck_assert(sink_insert_batch(s, "sinkddl", "a", b, &pos) == SINK_OK);
    ck_assert(sink_rename(s, "sinkddl", "a", "sinkddl", "b", false, &pos) == SINK_OK);
    ck_assert(sink_rename(s, "sinkddl", "b", "sinkddl2", "c", false, &pos) == SINK_OK);
    ck_assert(sink_create(s, "sinkddl", "gone", &pos) == SINK_OK);
    ck_assert(sink_drop(s, "sinkddl", "gone", &pos) == SINK_OK);
    /* Writes after a rename go to a table of the old name again, created afresh. */
    sink_batch_reset(b);
    add_json(b, "{\"_id\": 2}");
    ck_assert(sink_insert_batch(s, "sinkddl", "a", b, &pos) == SINK_OK);
    ck_assert_msg(sink_commit(s, &pos) == SINK_OK, "%s", sink_error(s));
    expect("SELECT string_agg(schemaname || '.' || tablename, ',' ORDER BY schemaname, tablename) FROM pg_tables "
           "WHERE schemaname LIKE 'sinkddl%'",
           "sinkddl.a,sinkddl2.c");
    expect("SELECT doc::text FROM sinkddl2.c", "{\"_id\": 1}");
    ck_assert(sink_drop_database(s, "sinkddl2", &pos) == SINK_OK);
    ck_assert(sink_commit(s, &pos) == SINK_OK);
    expect("SELECT count(*) FROM pg_namespace WHERE nspname = 'sinkddl2'", "0");
    sink_batch_free(b);
    sink_free(s);
}
END_TEST

/* Bad input stops the group with a message naming the table and the oplog entry. */
START_TEST(test_data_error_names_context)
{
    sink *s = open_sink("t_err", 1);
    char longname[80];
    memset(longname, 'x', 70);
    longname[70] = '\0';
    bson_value_t id = int_id(1);
    op_pos pos = {.secs = 42, .inc = 7, .term = 1};
    ck_assert_int_eq(sink_delete(s, "sinkerr", longname, &id, &pos), SINK_ERR_DATA);
    ck_assert_msg(strstr(sink_error(s), "42:7") != NULL, "%s", sink_error(s));
    sink_disconnect(s);

    ck_assert(sink_connect(s) == SINK_OK);
    sink_batch *b = sink_batch_new();
    add_json(b, "{\"_id\": 1}");
    ck_assert(sink_insert_batch(s, "sinkerr", "c", b, &pos) == SINK_OK);
    sink_batch_free(b);
    bson_t *bad = BCON_NEW("$v", BCON_INT32(2), "diff", "{", "}");
    ck_assert(sink_update(s, "sinkerr", "c", &id, OP_FORM_DIFF, bad, &pos) == SINK_OK); /* queued, not yet answered */
    sink_status st = sink_commit(s, &pos);
    ck_assert_int_eq(st, SINK_ERR_DATA);
    ck_assert_msg(strstr(sink_error(s), "sinkerr.c") != NULL && strstr(sink_error(s), "42:7") != NULL, "%s",
                  sink_error(s));
    bson_destroy(bad);
    sink_free(s);
}
END_TEST

Suite *sink_suite(void); /* called by the generated runner list */

Suite *sink_suite(void)
{
    Suite *s = suite_create("sink");
    TCase *tc = tcase_create("pg");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_writes_and_checkpoint);
    tcase_add_test(tc, test_uncommitted_is_invisible);
    tcase_add_test(tc, test_duplicate_fallback);
    tcase_add_test(tc, test_fence);
    tcase_add_test(tc, test_ddl);
    tcase_add_test(tc, test_data_error_names_context);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_sink.c — the PostgreSQL sink against a real PostgreSQL (OPLOG2PG_TEST_PG): COPY and pipelined insert runs,
 * updates in all three forms, deletes, DDL, the checkpoint committed with the rows, the duplicate fallback, the
 * fence that keeps a second daemon off a service; and the error policy where it meets PostgreSQL: timeouts are
 * retries, the checkpoint only moves forward, a terminated idle connection is noticed, long waits call the wait
 * hook, a poison namespace becomes a safe dead letter, a refused login is for a person, dead-peer settings.
 */
#include <check.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "map/ejson.h"
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
    ck_assert_msg(sink_connect(s) == APPLY_OK, "connect: %s", sink_error(s));
    return s;
}

/* A row from canonical Extended JSON: its key and document rendered as the reader thread would. */
static void add_json(sink_batch *b, const char *json)
{
    bson_error_t err;
    bson_t *doc = bson_new_from_json((const uint8_t *)json, -1, &err);
    ck_assert_msg(doc != NULL, "%s: %s", json, err.message);
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, doc, "_id"));
    char *key = ejson_key(bson_iter_value(&it));
    size_t len;
    char *text = ejson_document(doc, &len);
    ck_assert(key && text);
    ck_assert(sink_batch_add(b, key, strlen(key), text, len));
    free(key);
    free(text);
    bson_destroy(doc);
}

/* The relaxed Extended JSON of an update's `o`. */
static char *json_of(bson_t *doc)
{
    char *j = ejson_document(doc, NULL);
    ck_assert_ptr_nonnull(j);
    bson_destroy(doc);
    return j;
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
        ck_assert_msg(sink_insert_batch(s, db, "c", b, &pos) == APPLY_OK, "%s", sink_error(s));

        char *diff = json_of(BCON_NEW("$v", BCON_INT32(2), "diff", "{", "u", "{", "n", BCON_INT32(20), "}", "ssub", "{",
                                      "i", "{", "y", BCON_INT32(2), "}", "}", "}"));
        char *mod = json_of(BCON_NEW("$v", BCON_INT32(1), "$set", "{", "n", BCON_INT32(30), "}", "$unset", "{", "tags",
                                     BCON_BOOL(true), "}"));
        char *repl = json_of(BCON_NEW("_id", BCON_INT32(4), "replaced", BCON_BOOL(true)));
        pos.inc = 2;
        ck_assert(sink_update(s, db, "c", "2", OP_FORM_DIFF, diff, &pos) == APPLY_OK);
        ck_assert(sink_update(s, db, "c", "3", OP_FORM_MODIFIER, mod, &pos) == APPLY_OK);
        ck_assert(sink_update(s, db, "c", "4", OP_FORM_REPLACE, repl, &pos) == APPLY_OK);
        ck_assert(sink_delete(s, db, "c", "5", &pos) == APPLY_OK);
        pos.inc = 3;
        ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));

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

        free(diff);
        free(mod);
        free(repl);
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
    ck_assert(sink_insert_batch(s, "sinkvis", "c", b, &pos) == APPLY_OK);
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
    ck_assert(sink_insert_batch(s, "sinkdup", "c", b, &pos) == APPLY_OK);
    ck_assert(sink_commit(s, &pos) == APPLY_OK);

    sink_batch_reset(b);
    add_json(b, "{\"_id\": 1, \"v\": \"new\"}");
    add_json(b, "{\"_id\": 2, \"v\": \"two\"}");
    pos.inc = 2;
    ck_assert_msg(sink_insert_batch(s, "sinkdup", "c", b, &pos) == APPLY_OK, "%s", sink_error(s));
    ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));
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
    ck_assert_int_eq(sink_connect(b), APPLY_FENCED);
    ck_assert_msg(strstr(sink_error(b), "another oplog2pg") != NULL, "%s", sink_error(b));
    sink_free(a);
    /* Once the first is gone, the service is free again. */
    ck_assert_msg(sink_connect(b) == APPLY_OK, "%s", sink_error(b));
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
    ck_assert(sink_insert_batch(s, "sinkddl", "a", b, &pos) == APPLY_OK);
    ck_assert(sink_rename(s, "sinkddl", "a", "sinkddl", "b", &pos) == APPLY_OK);
    ck_assert(sink_rename(s, "sinkddl", "b", "sinkddl2", "c", &pos) == APPLY_OK);
    ck_assert(sink_create(s, "sinkddl", "gone", &pos) == APPLY_OK);
    ck_assert(sink_drop(s, "sinkddl", "gone", &pos) == APPLY_OK);
    /* Writes after a rename go to a table of the old name again, created afresh. */
    sink_batch_reset(b);
    add_json(b, "{\"_id\": 2}");
    ck_assert(sink_insert_batch(s, "sinkddl", "a", b, &pos) == APPLY_OK);
    ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));
    expect("SELECT string_agg(schemaname || '.' || tablename, ',' ORDER BY schemaname, tablename) FROM pg_tables "
           "WHERE schemaname LIKE 'sinkddl%'",
           "sinkddl.a,sinkddl2.c");
    expect("SELECT _id || ' ' || doc::text FROM sinkddl2.c", "1 {\"_id\": 1}");
    ck_assert(sink_drop_database(s, "sinkddl2", &pos) == APPLY_OK);
    ck_assert(sink_commit(s, &pos) == APPLY_OK);
    expect("SELECT count(*) FROM pg_namespace WHERE nspname = 'sinkddl2'", "0");
    sink_batch_free(b);
    sink_free(s);
}
END_TEST

/* Tables the sink did not make: a drop or a dropDatabase leaves them (and their schema) alone; a write or a rename
 * onto one is refused as the operator's to fix (APPLY_CONFIG, naming the table), in the transaction's rollback. */
START_TEST(test_foreign_tables_left_alone)
{
    PGconn *c = PQconnectdb(conninfo());
    ck_assert_msg(PQstatus(c) == CONNECTION_OK, "%s", PQerrorMessage(c));
    PGresult *r = PQexec(c, "DROP SCHEMA IF EXISTS sinkown CASCADE; CREATE SCHEMA sinkown;"
                            "CREATE TABLE sinkown.f (_id text PRIMARY KEY, doc jsonb NOT NULL);"
                            "INSERT INTO sinkown.f VALUES ('1', '{}')");
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);

    sink *s = open_sink("t_own", 1);
    op_pos pos = {.secs = 1, .inc = 1, .term = 1};
    sink_batch *b = sink_batch_new();
    add_json(b, "{\"_id\": 1}");
    ck_assert(sink_insert_batch(s, "sinkown", "mine", b, &pos) == APPLY_OK);
    ck_assert(sink_drop(s, "sinkown", "f", &pos) == APPLY_OK);
    ck_assert(sink_drop_database(s, "sinkown", &pos) == APPLY_OK);
    ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));
    expect("SELECT count(*) FROM sinkown.f", "1");
    expect("SELECT count(*) FROM pg_tables WHERE schemaname = 'sinkown'", "1"); /* "mine" dropped, "f" kept */

    pos.inc = 2;
    sink_batch_reset(b);
    add_json(b, "{\"_id\": 2}");
    apply_status st = sink_insert_batch(s, "sinkown", "f", b, &pos); /* answered now or at the commit */
    if (st == APPLY_OK)
        st = sink_commit(s, &pos);
    ck_assert_int_eq(st, APPLY_CONFIG);
    ck_assert_msg(strstr(sink_error(s), "sinkown.f exists and was not made by oplog2pg") != NULL, "%s", sink_error(s));
    sink_disconnect(s);
    ck_assert(sink_connect(s) == APPLY_OK);
    pos.inc = 3;
    st = sink_create(s, "sinkown", "x", &pos);
    if (st == APPLY_OK)
        st = sink_rename(s, "sinkown", "x", "sinkown", "f", &pos);
    if (st == APPLY_OK)
        st = sink_commit(s, &pos);
    ck_assert_int_eq(st, APPLY_CONFIG);
    ck_assert_msg(strstr(sink_error(s), "sinkown.f") != NULL, "%s", sink_error(s));
    expect("SELECT count(*) FROM sinkown.f", "1");
    expect("SELECT count(*) FROM pg_tables WHERE schemaname = 'sinkown'", "1"); /* x's create rolled back */
    sink_batch_free(b);
    sink_free(s);
}
END_TEST

/* Bad input stops the group with a message naming the table and the oplog entry. */
START_TEST(test_data_error_names_context)
{
    sink *s = open_sink("t_err", 1);
    op_pos pos = {.secs = 42, .inc = 7, .term = 1};
    /* A collection name that is not UTF-8 cannot be a PostgreSQL identifier (map/names.h). */
    ck_assert_int_eq(sink_delete(s, "sinkerr", "bad\xff", "1", &pos), APPLY_DATA);
    ck_assert_msg(strstr(sink_error(s), "42:7") != NULL, "%s", sink_error(s));
    sink_disconnect(s);

    ck_assert(sink_connect(s) == APPLY_OK);
    sink_batch *b = sink_batch_new();
    add_json(b, "{\"_id\": 1}");
    ck_assert(sink_insert_batch(s, "sinkerr", "c", b, &pos) == APPLY_OK);
    sink_batch_free(b);
    char *bad = json_of(BCON_NEW("$v", BCON_INT32(2), "diff", "{", "}"));
    /* Pipelined: the refusal may already have been read when the update is sent (a slow client, as under
     * AddressSanitizer), or only at the commit. Either way it is a data error naming the table and the entry. */
    apply_status st = sink_update(s, "sinkerr", "c", "1", OP_FORM_DIFF, bad, &pos);
    if (st == APPLY_OK)
        st = sink_commit(s, &pos);
    ck_assert_int_eq(st, APPLY_DATA);
    ck_assert_msg(strstr(sink_error(s), "sinkerr.c") != NULL && strstr(sink_error(s), "42:7") != NULL, "%s",
                  sink_error(s));
    free(bad);
    sink_free(s);
}
END_TEST

/* ---- the one error policy, at the sink ---- */

static PGconn *pg_open(void)
{
    PGconn *c = PQconnectdb(conninfo());
    ck_assert_msg(PQstatus(c) == CONNECTION_OK, "%s", PQerrorMessage(c));
    return c;
}

static void pg_run(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql,
                  PQerrorMessage(c));
    PQclear(r);
}

/* A table with one row, made through the sink. */
static void one_row(const char *service, const char *db)
{
    sink *s = open_sink(service, 1000);
    sink_batch *b = sink_batch_new();
    add_json(b, "{\"_id\": 1, \"n\": 1}");
    op_pos pos = {.secs = 1, .inc = 1, .term = 1};
    ck_assert(sink_insert_batch(s, db, "c", b, &pos) == APPLY_OK);
    ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));
    sink_batch_free(b);
    sink_free(s);
}

static sink *open_sink_with(const char *service, const char *extra)
{
    char ci[1024];
    snprintf(ci, sizeof ci, "%s %s", conninfo(), extra);
    sink_config cfg = {.conninfo = ci, .service = service, .copy_min_rows = 1000};
    sink *s = sink_new(&cfg);
    ck_assert_ptr_nonnull(s);
    ck_assert_msg(sink_connect(s) == APPLY_OK, "connect: %s", sink_error(s));
    return s;
}

/* A lock timeout or a statement timeout (55P03, 57014) on an update is a passing fault: APPLY_RETRY, never data.
 * Once the lock is gone the same op goes through. */
START_TEST(test_timeouts_are_retries)
{
    const char *opts[2] = {"options='-c lock_timeout=200'", "options='-c statement_timeout=300'"};
    const char *states[2] = {"55P03", "57014"};
    one_row("t_timeouts", "sinklock");
    for (int i = 0; i < 2; i++) {
        PGconn *lk = pg_open();
        pg_run(lk, "BEGIN");
        pg_run(lk, "LOCK TABLE sinklock.c IN ACCESS EXCLUSIVE MODE");
        sink *s = open_sink_with("t_timeouts", opts[i]);
        op_pos pos = {.secs = 2, .inc = (uint32_t)i + 1, .term = 1};
        ck_assert(sink_update(s, "sinklock", "c", "1", OP_FORM_MODIFIER, "{\"$set\": {\"n\": 2}}", &pos) == APPLY_OK);
        apply_status st = sink_commit(s, &pos);
        ck_assert_msg(st == APPLY_RETRY, "%s gave status %s: %s", states[i], apply_status_name(st), sink_error(s));
        ck_assert_str_eq(sink_error_state(s), states[i]);
        pg_run(lk, "ROLLBACK");
        PQfinish(lk);
        /* The retry: the same op, now that the lock is gone. */
        ck_assert(sink_connect(s) == APPLY_OK);
        ck_assert(sink_update(s, "sinklock", "c", "1", OP_FORM_MODIFIER, "{\"$set\": {\"n\": 2}}", &pos) == APPLY_OK);
        ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));
        sink_free(s);
    }
    expect("SELECT doc->>'n' FROM sinklock.c WHERE _id = '1'", "2");
}
END_TEST

/* A start installs the schema, and must wait for no other service's open transaction nor block their writes: with a
 * transaction holding the checkpoint, dead-letter and catalog tables as a running daemon's does, a second service
 * connects within a short lock_timeout. (ALTER TABLE ... ADD COLUMN IF NOT EXISTS and CREATE INDEX IF NOT EXISTS
 * take their table's lock before they find there is nothing to do: schema.sql checks first.) */
START_TEST(test_install_waits_for_no_writer)
{
    sink_free(open_sink("t_install_a", 1000)); /* the schema is there */
    PGconn *w = pg_open();
    pg_run(w, "BEGIN");
    pg_run(w, "UPDATE oplog2pg.checkpoint SET applied_at = applied_at WHERE false");
    pg_run(w, "UPDATE oplog2pg.dead_letter SET op_json = op_json WHERE false");
    pg_run(w, "UPDATE oplog2pg.tables SET adopted = adopted WHERE false");
    pg_run(w, "UPDATE oplog2pg.shard_checkpoint SET hosts = hosts WHERE false");
    sink_free(open_sink_with("t_install_b", "options='-c lock_timeout=2000'"));
    pg_run(w, "ROLLBACK");
    PQfinish(w);
}
END_TEST

/* The checkpoint never moves backwards by a commit (O2BAK, a person must look); the explicit set can. */
START_TEST(test_checkpoint_is_monotone)
{
    sink *s = open_sink("t_monotone", 1);
    op_pos p10 = {.secs = 10, .inc = 1, .term = 1}, p9 = {.secs = 9, .inc = 5, .term = 1};
    ck_assert(sink_commit(s, &p10) == APPLY_OK);
    ck_assert(sink_commit(s, &p10) == APPLY_OK); /* the same position again is fine (noops) */
    apply_status st = sink_commit(s, &p9);
    ck_assert_msg(st == APPLY_CONFIG, "status %s: %s", apply_status_name(st), sink_error(s));
    ck_assert_str_eq(sink_error_state(s), "O2BAK");
    ck_assert_ptr_nonnull(strstr(sink_error(s), "backwards"));
    expect("SELECT ts_sec || ':' || ts_inc FROM oplog2pg.checkpoint WHERE service = 't_monotone'", "10:1");
    ck_assert(sink_connect(s) == APPLY_OK);
    ck_assert_msg(sink_set_checkpoint(s, &p9) == APPLY_OK, "%s", sink_error(s));
    expect("SELECT ts_sec || ':' || ts_inc FROM oplog2pg.checkpoint WHERE service = 't_monotone'", "9:5");
    op_pos back;
    ck_assert_int_eq(sink_read_checkpoint(s, &back), 1);
    ck_assert_uint_eq(back.secs, 9);
    ck_assert(sink_set_checkpoint(s, NULL) == APPLY_OK);
    ck_assert_int_eq(sink_read_checkpoint(s, &back), 0);
    sink_free(s);
}
END_TEST

/* An idle connection whose backend is terminated is noticed as soon as the server says so, not at the next write. */
START_TEST(test_idle_termination_noticed)
{
    sink *s = open_sink("t_idle", 1);
    int pid = sink_backend_pid(s);
    ck_assert_int_gt(pid, 0);
    PGconn *c = pg_open();
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%d)", pid);
    pg_run(c, sql);
    PQfinish(c);
    struct pollfd pfd = {.fd = sink_socket(s), .events = POLLIN};
    ck_assert_msg(poll(&pfd, 1, 10000) == 1, "the terminated connection's socket never became readable");
    apply_status st = sink_check_idle(s);
    ck_assert_msg(st == APPLY_RETRY, "status %s", apply_status_name(st));
    sink_free(s);
}
END_TEST

typedef struct {
    int calls;
    char what[200];
} hook_log;

static bool count_waits(void *arg, const char *what, double waited)
{
    hook_log *h = arg;
    h->calls++;
    snprintf(h->what, sizeof h->what, "%s", what);
    (void)waited;
    return true;
}

static void *unlock_later(void *arg)
{
    PGconn *lk = arg;
    struct timespec ts = {4, 500000000};
    nanosleep(&ts, NULL);
    pg_run(lk, "ROLLBACK");
    return NULL;
}

/* A long wait on PostgreSQL (a lock held elsewhere) calls the wait hook every second, naming what it waits for —
 * the statements sent, and after a few seconds what PostgreSQL itself reports (the lock, and who holds it) — and
 * then completes: healthy waiting is not a failure. */
START_TEST(test_wait_hook_during_a_lock)
{
    one_row("t_waithook", "sinkwait");
    PGconn *lk = pg_open();
    pg_run(lk, "BEGIN");
    pg_run(lk, "LOCK TABLE sinkwait.c IN ACCESS EXCLUSIVE MODE");
    hook_log h = {0};
    sink_config cfg = {.conninfo = conninfo(), .service = "t_waithook", .wait_hook = count_waits, .wait_arg = &h};
    sink *s = sink_new(&cfg);
    ck_assert(sink_connect(s) == APPLY_OK);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, unlock_later, lk), 0);
    op_pos pos = {.secs = 3, .inc = 1, .term = 1};
    ck_assert(sink_update(s, "sinkwait", "c", "1", OP_FORM_MODIFIER, "{\"$set\": {\"n\": 5}}", &pos) == APPLY_OK);
    ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));
    pthread_join(t, NULL);
    PQfinish(lk);
    ck_assert_int_ge(h.calls, 1);
    ck_assert_msg(strstr(h.what, "statements from the BEGIN on") != NULL &&
                      strstr(h.what, "PostgreSQL reports Lock:relation") != NULL &&
                      strstr(h.what, "blocked by pid") != NULL && strstr(h.what, "idle in transaction") != NULL,
                  "the hook said it waited for: %s", h.what);
    expect("SELECT doc->>'n' FROM sinkwait.c WHERE _id = '1'", "5");
    sink_free(s);
}
END_TEST

/* An op on a namespace that is not UTF-8 is refused as data and set aside with its raw BSON, its text made safe. */
START_TEST(test_dead_letter_of_a_poison_namespace)
{
    sink *s = open_sink("t_poison", 1);
    bson_t *doc = BCON_NEW("_id", BCON_INT32(9), "v", BCON_UTF8("x"));
    op o;
    memset(&o, 0, sizeof o);
    o.kind = OP_INSERT;
    o.pos = (op_pos){.secs = 5, .inc = 2, .term = 1};
    o.db = "sinkpoison";
    o.coll = "bad\xff\xfename";
    o.doc = bson_get_data(doc);
    o.doc_len = doc->len;
    bson_iter_t it;
    bson_iter_init_find(&it, doc, "_id");
    o.id = *bson_iter_value(&it);
    ck_assert(sink_guard_begin(s) == APPLY_OK);
    ck_assert_int_eq(sink_delete(s, o.db, o.coll, "9", &o.pos), APPLY_DATA);
    ck_assert_msg(sink_dead_letter(s, &o, NULL) == APPLY_OK, "%s", sink_error(s));
    ck_assert_msg(sink_commit(s, &o.pos) == APPLY_OK, "%s", sink_error(s));
    expect("SELECT coll || ' ' || doc_id || ' ' || (op_bson IS NOT NULL) || ' ' || (error LIKE '%not valid UTF-8%') "
           "FROM oplog2pg.dead_letter WHERE service = 't_poison'",
           "bad\\xff\\xfename 9 true true");
    bson_destroy(doc);
    sink_free(s);
}
END_TEST

/* A login PostgreSQL refuses is for a person: APPLY_CONFIG, saying what to check. */
START_TEST(test_refused_login)
{
    char ci[1024];
    snprintf(ci, sizeof ci, "%s user=oplog2pg_no_such_role", conninfo());
    sink_config cfg = {.conninfo = ci, .service = "t_login"};
    sink *s = sink_new(&cfg);
    apply_status st = sink_connect(s);
    ck_assert_msg(st == APPLY_CONFIG, "status %s: %s", apply_status_name(st), sink_error(s));
    ck_assert_msg(strstr(sink_error(s), "oplog2pg_no_such_role") != NULL &&
                      strstr(sink_error(s), "check the user name") != NULL,
                  "%s", sink_error(s));
    ck_assert_msg(strstr(sink_error(s), "LOCATION") == NULL, "%s", sink_error(s));
    sink_free(s);
    /* A database that does not exist, likewise. */
    snprintf(ci, sizeof ci, "%s dbname=oplog2pg_no_such_db", conninfo());
    cfg.conninfo = ci;
    s = sink_new(&cfg);
    ck_assert_int_eq(sink_connect(s), APPLY_CONFIG);
    ck_assert_msg(strstr(sink_error(s), "check dbname") != NULL, "%s", sink_error(s));
    sink_free(s);
}
END_TEST

/* Dead peers: keepalives and tcp_user_timeout from [postgres] peer_timeout, unless the connection string sets them
 * (the kernel then ends a connection to a peer that vanished without a reset, idle or busy). */
static const char *option_of(PGconn *c, const char *key)
{
    static char value[64];
    value[0] = '\0';
    PQconninfoOption *opts = PQconninfo(c);
    for (PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, key) == 0 && o->val)
            snprintf(value, sizeof value, "%s", o->val);
    PQconninfoFree(opts);
    return value;
}

START_TEST(test_dead_peer_settings)
{
    pgconn_params pp = {.conninfo = conninfo(), .peer_timeout_s = 30};
    pgconn_error e;
    pgconn *c = pgconn_connect(&pp, &e);
    ck_assert_msg(c != NULL, "%s", e.message);
    ck_assert_str_eq(option_of(c->pg, "keepalives"), "1");
    ck_assert_str_eq(option_of(c->pg, "keepalives_idle"), "15");
    ck_assert_str_eq(option_of(c->pg, "keepalives_interval"), "5");
    ck_assert_str_eq(option_of(c->pg, "keepalives_count"), "3");
    ck_assert_str_eq(option_of(c->pg, "tcp_user_timeout"), "30000");
    ck_assert_str_eq(option_of(c->pg, "connect_timeout"), "30");
    pgconn_close(c);
    char ci[1024];
    snprintf(ci, sizeof ci, "%s keepalives_idle=7 tcp_user_timeout=9000", conninfo());
    pp.conninfo = ci;
    c = pgconn_connect(&pp, &e);
    ck_assert_msg(c != NULL, "%s", e.message);
    ck_assert_str_eq(option_of(c->pg, "keepalives_idle"), "7");
    ck_assert_str_eq(option_of(c->pg, "tcp_user_timeout"), "9000");
    pgconn_close(c);
}
END_TEST

/* ---- streaming: a long run's COPY open while the run fills ---- */

/* What the sink's backend is running, from pg_stat_activity ("" when idle). */
static char *backend_query(const sink *s)
{
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT CASE WHEN state = 'active' THEN query ELSE '' END FROM pg_stat_activity WHERE pid = %d",
             sink_backend_pid(s));
    return query1(sql);
}

/* Whether the sink's backend is running a COPY now (the run streams) or not. */
static void expect_copy_open(const sink *s, bool open, const char *what)
{
    char *q = backend_query(s);
    ck_assert_msg((strncmp(q, "COPY", 4) == 0) == open, "%s: the backend runs \"%s\"", what, q);
    free(q);
}

/* Writes the run b into db.c and commits it at *pos (rows a later run will meet again); b is emptied. */
static void commit_run(sink *s, const char *db, sink_batch *b, const op_pos *pos)
{
    ck_assert_msg(sink_insert_batch(s, db, "c", b, pos) == APPLY_OK, "%s", sink_error(s));
    ck_assert_msg(sink_commit(s, pos) == APPLY_OK, "%s", sink_error(s));
    sink_batch_reset(b);
}

/* Adds rows from..to ({"_id": i, "v": "new"}) as the batcher does: each row, then the sink's streaming step. */
static void stream_rows(sink *s, sink_batch *b, const char *db, int from, int to, op_pos *pos)
{
    for (int i = from; i <= to; i++) {
        char json[64];
        snprintf(json, sizeof json, "{\"_id\": %d, \"v\": \"new\"}", i);
        add_json(b, json);
        pos->inc++;
        ck_assert_msg(sink_stream_add(s, b, db, "c", pos) == APPLY_OK, "row %d: %s", i, sink_error(s));
    }
}

/* A run that reaches 1 000 rows opens its COPY and sends each row as it comes; an update of another row ends the
 * COPY (its rows written, the run emptied); the run streams again once long enough; a COPY that meets a key already
 * there (a replay) falls back to upserts at its end; rows and checkpoint commit together. */
START_TEST(test_streaming_copy)
{
    const char *db = "sinkstream";
    sink *s = open_sink("t_stream", 1);
    sink_batch *b = sink_batch_new();
    op_pos pos = {.secs = 50, .inc = 1, .term = 1};
    add_json(b, "{\"_id\": 5000, \"v\": \"old\"}");
    add_json(b, "{\"_id\": 2550, \"v\": \"old\"}");
    commit_run(s, db, b, &pos);
    uint64_t copied_before = sink_get_stats(s)->rows_copied;

    stream_rows(s, b, db, 1, 999, &pos);
    expect_copy_open(s, false, "a run of 999 rows");
    stream_rows(s, b, db, 1000, 1500, &pos);
    expect_copy_open(s, true, "a run of 1 500 rows");
    ck_assert_uint_eq(sink_batch_rows(b), 1500); /* the run keeps its rows until the COPY ends */

    /* An update of another row ends the COPY: its rows are written and the run starts from nothing. */
    char *mod = json_of(BCON_NEW("$v", BCON_INT32(1), "$set", "{", "v", BCON_UTF8("updated"), "}"));
    pos.inc++;
    ck_assert_msg(sink_update(s, db, "c", "5000", OP_FORM_MODIFIER, mod, &pos) == APPLY_OK, "%s", sink_error(s));
    ck_assert_uint_eq(sink_batch_rows(b), 0);
    ck_assert_uint_eq(sink_get_stats(s)->rows_copied, copied_before + 1500);

    /* Streams again, over the row 2550 committed before: the COPY fails at its end and is re-sent as upserts. */
    stream_rows(s, b, db, 1501, 2600, &pos);
    expect_copy_open(s, true, "the second run");
    ck_assert_msg(sink_insert_batch(s, db, "c", b, &pos) == APPLY_OK, "%s", sink_error(s));
    ck_assert_uint_eq(sink_batch_rows(b), 0);
    ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));
    const sink_stats *st = sink_get_stats(s);
    ck_assert_uint_eq(st->dup_fallbacks, 1);
    ck_assert_uint_eq(st->rows_copied, copied_before + 1500);
    expect("SELECT count(*) || ' ' || count(*) FILTER (WHERE doc->>'v' = 'new') FROM sinkstream.c", "2601 2600");
    expect("SELECT doc->>'v' FROM sinkstream.c WHERE _id = '5000'", "updated");
    expect("SELECT doc->>'v' FROM sinkstream.c WHERE _id = '2550'", "new");
    char want[32];
    snprintf(want, sizeof want, "50:%u", pos.inc);
    expect("SELECT ts_sec || ':' || ts_inc FROM oplog2pg.checkpoint WHERE service = 't_stream'", want);
    free(mod);
    sink_batch_free(b);
    sink_free(s);
}
END_TEST

/* A streaming run lets go of the rows it has sent, so it holds nothing however long it grows. When its COPY then
 * meets a key already there, the rows cannot be re-sent from memory: the sink fails with APPLY_REWIND and a keep
 * point at the run's last entry, nothing of the group is committed, and the same entries applied again from the
 * checkpoint keep their rows until that point, so the duplicate falls back to upserts as usual. */
START_TEST(test_let_go_then_rewind)
{
    const char *db = "sinkletgo";
    sink *s = open_sink("t_letgo", 1);
    sink_batch *b = sink_batch_new();
    op_pos pos = {.secs = 60, .inc = 1, .term = 1};
    add_json(b, "{\"_id\": 2550, \"v\": \"old\"}");
    commit_run(s, db, b, &pos);
    const op_pos committed = pos;

    /* A run too short to stream cannot let go. */
    stream_rows(s, b, db, 1, 500, &pos);
    op_pos next = {.secs = pos.secs, .inc = pos.inc + 1, .term = 1};
    ck_assert(!sink_stream_let_go(s, b, &next));
    stream_rows(s, b, db, 501, 1500, &pos);
    expect_copy_open(s, true, "a run of 1 500 rows");
    next.inc = pos.inc + 1;
    ck_assert(sink_stream_let_go(s, b, &next));
    ck_assert_uint_eq(sink_batch_rows(b), 1500);
    ck_assert_uint_eq(sink_batch_held_rows(b), 0);
    ck_assert(!sink_batch_whole(b));
    stream_rows(s, b, db, 1501, 2600, &pos); /* 2550 is there */
    ck_assert_uint_eq(sink_batch_held_rows(b), 1100);
    apply_status st = sink_insert_batch(s, db, "c", b, &pos);
    ck_assert_msg(st == APPLY_REWIND, "status %s: %s", apply_status_name(st), sink_error(s));
    ck_assert_msg(strstr(sink_error(s), "let go of rows") != NULL, "%s", sink_error(s));
    op_pos keep = sink_keep_until(s);
    ck_assert(op_pos_cmp(&keep, &pos) == 0);
    ck_assert_uint_eq(sink_get_stats(s)->rewinds, 1);
    sink_batch_reset(b);
    sink_disconnect(s);
    expect("SELECT count(*) FROM sinkletgo.c", "1");

    /* The same entries again, from the checkpoint: the run keeps its rows up to the keep point. */
    ck_assert_msg(sink_connect(s) == APPLY_OK, "%s", sink_error(s));
    op_pos at;
    ck_assert_int_eq(sink_read_checkpoint(s, &at), 1);
    ck_assert(op_pos_cmp(&at, &committed) == 0);
    pos = committed;
    stream_rows(s, b, db, 1, 1500, &pos);
    next.inc = pos.inc + 1;
    ck_assert(!sink_stream_let_go(s, b, &next)); /* before the keep point */
    stream_rows(s, b, db, 1501, 2600, &pos);
    ck_assert_uint_eq(sink_batch_held_rows(b), 2600);
    ck_assert_msg(sink_insert_batch(s, db, "c", b, &pos) == APPLY_OK, "%s", sink_error(s));
    ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));
    ck_assert_uint_eq(sink_get_stats(s)->dup_fallbacks, 1);
    expect("SELECT count(*) || ' ' || count(*) FILTER (WHERE doc->>'v' = 'new') FROM sinkletgo.c", "2600 2600");

    /* Past the keep point a streaming run may let go again. */
    sink_batch_reset(b);
    stream_rows(s, b, db, 3001, 4500, &pos);
    next.inc = pos.inc + 1;
    ck_assert(sink_stream_let_go(s, b, &next));
    ck_assert_msg(sink_insert_batch(s, db, "c", b, &pos) == APPLY_OK, "%s", sink_error(s));
    ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));
    expect("SELECT count(*) FROM sinkletgo.c", "4100");

    /* A keep point set ahead (the oplog's end after an initial copy) holds until then, and never moves back. */
    op_pos ahead = {.secs = 61, .inc = 1, .term = 1}, behind = {.secs = 59, .inc = 1, .term = 1};
    sink_keep_rows_until(s, &ahead);
    sink_keep_rows_until(s, &behind);
    keep = sink_keep_until(s);
    ck_assert(op_pos_cmp(&keep, &ahead) == 0);
    sink_batch_reset(b);
    stream_rows(s, b, db, 5001, 6500, &pos);
    next.inc = pos.inc + 1;
    ck_assert(!sink_stream_let_go(s, b, &next));
    op_pos past = {.secs = 61, .inc = 2, .term = 1};
    ck_assert(sink_stream_let_go(s, b, &past));
    ck_assert_msg(sink_insert_batch(s, db, "c", b, &pos) == APPLY_OK, "%s", sink_error(s));
    ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));
    expect("SELECT count(*) FROM sinkletgo.c", "5600");
    sink_batch_free(b);
    sink_free(s);
}
END_TEST

/* The rows {"_id": i, "v": v} for i in from..to, as the run b (emptied first), written into db.coll at the next
 * entry; what the sink answered. A statement sent earlier in the group that failed may be reported here already, by
 * a later send that read its result, and not only by the commit. */
static apply_status short_run(sink *s, sink_batch *b, const char *db, const char *coll, int from, int to, const char *v,
                              op_pos *pos)
{
    sink_batch_reset(b);
    for (int i = from; i <= to; i++) {
        char json[80];
        snprintf(json, sizeof json, "{\"_id\": %d, \"v\": \"%s\"}", i, v);
        add_json(b, json);
    }
    pos->inc++;
    return sink_insert_batch(s, db, coll, b, pos);
}

/* The group's commit after sends that answered st: the first failure, wherever the sink reported it. */
static apply_status commit_after(sink *s, apply_status st, const op_pos *pos)
{
    return st != APPLY_OK ? st : sink_commit(s, pos);
}

#define SHORT_RUN_OK(...) ck_assert_msg(short_run(__VA_ARGS__) == APPLY_OK, "%s", sink_error(s))

/* Short runs past the keep point go as plain INSERTs. One that meets a _id already there (a replay) fails its group
 * with APPLY_REWIND, nothing of it committed, and the keep point moves to the newest entry the group had sent; the
 * same entries again go as upserts and end exact. Past the keep point inserts are plain again, and a per-op session
 * always upserts. */
START_TEST(test_plain_insert_meets_existing)
{
    const char *db = "sinkplain";
    sink *s = open_sink("t_plain", 1000);
    sink_batch *b = sink_batch_new();
    op_pos pos = {.secs = 70, .inc = 1, .term = 1};
    SHORT_RUN_OK(s, b, db, "c", 5, 5, "old", &pos);
    ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));
    const op_pos committed = pos, dup_run = {.secs = 70, .inc = committed.inc + 2, .term = 1};

    /* A group of three runs; the second meets _id 5. */
    for (int round = 0; round < 2; round++) {
        apply_status st = short_run(s, b, db, "c", 1, 3, "new", &pos);
        if (st == APPLY_OK)
            st = short_run(s, b, db, "c", 4, 6, "new", &pos);
        if (st == APPLY_OK)
            st = short_run(s, b, db, "d", 1, 2, "new", &pos);
        st = commit_after(s, st, &pos);
        if (round == 1) {
            ck_assert_msg(st == APPLY_OK, "%s", sink_error(s));
            break;
        }
        ck_assert_msg(st == APPLY_REWIND, "status %s: %s", apply_status_name(st), sink_error(s));
        ck_assert_msg(strstr(sink_error(s), "sinkplain.c") && strstr(sink_error(s), "met an existing _id"), "%s",
                      sink_error(s));
        op_pos keep = sink_keep_until(s);
        ck_assert_msg(op_pos_cmp(&keep, &dup_run) >= 0, "keep point %u:%u", keep.secs, keep.inc);
        ck_assert_uint_eq(sink_get_stats(s)->rewinds, 1);
        sink_disconnect(s);
        expect("SELECT string_agg(_id || '=' || (doc->>'v'), ',' ORDER BY _id) FROM sinkplain.c", "5=old");
        /* from the checkpoint again: upserts up to the keep point */
        ck_assert_msg(sink_connect(s) == APPLY_OK, "%s", sink_error(s));
        op_pos at;
        ck_assert_int_eq(sink_read_checkpoint(s, &at), 1);
        ck_assert(op_pos_cmp(&at, &committed) == 0);
        pos = committed;
    }
    expect("SELECT count(*) || ' ' || count(*) FILTER (WHERE doc->>'v' = 'new') FROM sinkplain.c", "6 6");
    expect("SELECT count(*) FROM sinkplain.d", "2");
    ck_assert_uint_eq(sink_get_stats(s)->dup_fallbacks, 0);

    /* Past the keep point a replayed row costs a rewind again: the inserts there are plain. */
    ck_assert(commit_after(s, short_run(s, b, db, "c", 6, 7, "again", &pos), &pos) == APPLY_REWIND);
    ck_assert_uint_eq(sink_get_stats(s)->rewinds, 2);
    sink_disconnect(s);
    ck_assert_msg(sink_connect(s) == APPLY_OK, "%s", sink_error(s));
    expect("SELECT count(*) FROM sinkplain.c", "6");

    /* A per-op session (and a careful one) upserts whatever the keep point. */
    sink_set_per_op(s, true);
    SHORT_RUN_OK(s, b, db, "c", 8, 9, "again", &pos);
    SHORT_RUN_OK(s, b, db, "c", 1, 1, "again", &pos);
    ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));
    expect("SELECT string_agg(_id, ',' ORDER BY _id) FROM sinkplain.c WHERE doc->>'v' = 'again'", "1,8,9");
    ck_assert_uint_eq(sink_get_stats(s)->rewinds, 2);
    sink_batch_free(b);
    sink_free(s);
}
END_TEST

/* The oplog's end as the initial copy finished, recorded in oplog2pg.copy_state, becomes the keep point whenever the
 * sink connects, so a daemon restarted during the catch-up after a copy still upserts the rows the copy wrote. */
START_TEST(test_copy_end_kept_across_restart)
{
    const char *db = "sinkcopyend";
    sink *s = open_sink("t_copyend", 1000);
    sink_batch *b = sink_batch_new();
    op_pos pos = {.secs = 80, .inc = 1, .term = 1};
    SHORT_RUN_OK(s, b, db, "c", 1, 2, "copied", &pos);
    ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));
    sink_disconnect(s);
    PGconn *c = pg_open();
    pg_run(c, "INSERT INTO oplog2pg.copy_state (service, start_sec, start_inc, start_term, finished_at, end_sec, "
              "end_inc, end_term) VALUES ('t_copyend', 79, 1, 1, now(), 80, 10, 1)");
    ck_assert_msg(sink_connect(s) == APPLY_OK, "%s", sink_error(s));
    op_pos keep = sink_keep_until(s), end = {.secs = 80, .inc = 10, .term = 1};
    ck_assert_msg(op_pos_cmp(&keep, &end) == 0, "keep point %u:%u", keep.secs, keep.inc);
    SHORT_RUN_OK(s, b, db, "c", 1, 3, "tailed", &pos); /* 1 and 2 are there: upserts */
    ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));
    ck_assert_uint_eq(sink_get_stats(s)->rewinds, 0);
    expect("SELECT count(*) || ' ' || count(*) FILTER (WHERE doc->>'v' = 'tailed') FROM sinkcopyend.c", "3 3");
    pos.inc = 10;
    /* past the copy's end: a plain insert */
    ck_assert(commit_after(s, short_run(s, b, db, "c", 3, 3, "again", &pos), &pos) == APPLY_REWIND);
    pg_run(c, "DELETE FROM oplog2pg.copy_state WHERE service = 't_copyend'");
    PQfinish(c);
    sink_batch_free(b);
    sink_free(s);
}
END_TEST

/* The connection lost while a COPY streams: noticed while idle, nothing of the group (rows, the table made in it,
 * the checkpoint) is committed, and the next session starts from the checkpoint before it. */
START_TEST(test_streaming_connection_lost)
{
    sink *s = open_sink("t_stream_lost", 1);
    sink_batch *b = sink_batch_new();
    op_pos pos = {.secs = 60, .inc = 1, .term = 1};
    ck_assert(sink_set_checkpoint(s, &pos) == APPLY_OK);
    stream_rows(s, b, "sinkstreamlost", 1, 1200, &pos);
    expect_copy_open(s, true, "a run of 1 200 rows");
    PGconn *c = pg_open();
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%d)", sink_backend_pid(s));
    pg_run(c, sql);
    PQfinish(c);
    /* As the daemon's loop does: each time the socket is readable (the server's goodbye, then the end of the
     * stream), a look at the idle connection. */
    apply_status st = APPLY_OK;
    for (int polls = 0; st == APPLY_OK && polls < 20; polls++) {
        struct pollfd pfd = {.fd = sink_socket(s), .events = POLLIN};
        ck_assert_msg(poll(&pfd, 1, 10000) == 1, "the terminated connection's socket never became readable");
        st = sink_check_idle(s);
    }
    ck_assert_msg(st == APPLY_RETRY, "status %s: %s", apply_status_name(st), sink_error(s));
    sink_stream_forget(s, b);
    sink_batch_free(b);
    sink_disconnect(s);
    expect("SELECT count(*) FROM pg_tables WHERE schemaname = 'sinkstreamlost'", "0");
    expect("SELECT ts_sec || ':' || ts_inc FROM oplog2pg.checkpoint WHERE service = 't_stream_lost'", "60:1");
    ck_assert_msg(sink_connect(s) == APPLY_OK, "%s", sink_error(s));
    op_pos back;
    ck_assert_int_eq(sink_read_checkpoint(s, &back), 1);
    ck_assert_uint_eq(back.inc, 1);
    sink_free(s);
}
END_TEST

/* ---- the bounded set of prepared statements (src/sink/stmt.c) ---- */

/* One row {"_id": id} into db.c<t> as a one-row run (a pipelined upsert: the sink's copy_min_rows is high). */
static void one_upsert(sink *s, sink_batch *b, const char *db, int t, int id, op_pos *pos)
{
    char coll[16], json[64];
    snprintf(coll, sizeof coll, "c%d", t);
    snprintf(json, sizeof json, "{\"_id\": %d}", id);
    sink_batch_reset(b);
    add_json(b, json);
    pos->inc++;
    ck_assert_msg(sink_insert_batch(s, db, coll, b, pos) == APPLY_OK, "%s.%s: %s", db, coll, sink_error(s));
}

/* With room for 3 statements: a statement is prepared at its second use (the first goes unnamed); tables past the
 * bound go unnamed, and so does a second kind for a table; a statement no commit used for SINK_STMT_STALE_COMMITS
 * groups makes room (deallocated, and prepared again under a new name when its table comes back); a drop deallocates
 * its table's statements. Every write lands: a name used after its deallocation, or a deallocation of a name
 * PostgreSQL does not have, would fail the group. */
START_TEST(test_statement_bound)
{
    const char *db = "sinkstmt";
    sink_config cfg = {.conninfo = conninfo(), .service = "t_stmt", .copy_min_rows = 1000000, .max_prepared = 3};
    sink *s = sink_new(&cfg);
    ck_assert_ptr_nonnull(s);
    ck_assert_msg(sink_connect(s) == APPLY_OK, "connect: %s", sink_error(s));
    sink_batch *b = sink_batch_new();
    op_pos pos = {.secs = 70, .inc = 0, .term = 1};
    int id = 0;
    ck_assert_int_eq(SINK_STMT_PREPARE_AT, 2);

    for (int t = 0; t < 5; t++) {            /* c0..c2 prepared at their second row, c3 and c4 unnamed */
        one_upsert(s, b, db, t, ++id, &pos); /* a first use is never counted */
        ck_assert_uint_eq(sink_get_stats(s)->unnamed, t == 4 ? 1 : 0);
        one_upsert(s, b, db, t, ++id, &pos);
    }
    ck_assert_uint_eq(sink_get_stats(s)->unnamed, 2);
    char *mod = json_of(BCON_NEW("$v", BCON_INT32(1), "$set", "{", "seen", BCON_BOOL(true), "}"));
    ck_assert(sink_update(s, db, "c0", "1", OP_FORM_MODIFIER, mod, &pos) == APPLY_OK); /* a first use */
    ck_assert_uint_eq(sink_get_stats(s)->unnamed, 2);
    ck_assert(sink_update(s, db, "c0", "2", OP_FORM_MODIFIER, mod, &pos) == APPLY_OK); /* full, nothing stale */
    ck_assert_uint_eq(sink_get_stats(s)->unnamed, 3);
    ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));

    for (int g = 0; g < SINK_STMT_STALE_COMMITS; g++) { /* only c0: c1's and c2's go stale */
        one_upsert(s, b, db, 0, ++id, &pos);
        ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));
    }
    ck_assert_uint_eq(sink_get_stats(s)->unnamed, 3);
    one_upsert(s, b, db, 3, ++id, &pos); /* c1's statement makes room for c3's */
    one_upsert(s, b, db, 1, ++id, &pos); /* c2's for c1's, under a new name */
    ck_assert_uint_eq(sink_get_stats(s)->unnamed, 3);
    one_upsert(s, b, db, 4, ++id, &pos); /* the oldest now is c0's, used one commit ago: unnamed */
    ck_assert_uint_eq(sink_get_stats(s)->unnamed, 4);
    one_upsert(s, b, db, 2, ++id, &pos); /* likewise */
    ck_assert_uint_eq(sink_get_stats(s)->unnamed, 5);
    ck_assert(sink_drop(s, db, "c1", &pos) == APPLY_OK); /* deallocates c1's: room for c4's */
    one_upsert(s, b, db, 4, ++id, &pos);
    ck_assert_uint_eq(sink_get_stats(s)->unnamed, 5);
    one_upsert(s, b, db, 1, ++id, &pos); /* a new c1, its first row */
    one_upsert(s, b, db, 1, ++id, &pos); /* full again, nothing stale: unnamed */
    ck_assert_uint_eq(sink_get_stats(s)->unnamed, 6);
    ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));

    expect("SELECT string_agg(n::text, ',' ORDER BY t) FROM (SELECT 0 AS t, count(*) AS n FROM sinkstmt.c0 UNION ALL "
           "SELECT 1, count(*) FROM sinkstmt.c1 UNION ALL SELECT 2, count(*) FROM sinkstmt.c2 UNION ALL "
           "SELECT 3, count(*) FROM sinkstmt.c3 UNION ALL SELECT 4, count(*) FROM sinkstmt.c4) x",
           "102,2,3,3,4");
    expect("SELECT string_agg(_id, ',' ORDER BY _id) FROM sinkstmt.c0 WHERE doc->>'seen' = 'true'", "1,2");
    free(mod);
    sink_batch_free(b);
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
    tcase_add_test(tc, test_foreign_tables_left_alone);
    tcase_add_test(tc, test_data_error_names_context);
    tcase_add_test(tc, test_timeouts_are_retries);
    tcase_add_test(tc, test_install_waits_for_no_writer);
    tcase_add_test(tc, test_checkpoint_is_monotone);
    tcase_add_test(tc, test_idle_termination_noticed);
    tcase_add_test(tc, test_wait_hook_during_a_lock);
    tcase_add_test(tc, test_dead_letter_of_a_poison_namespace);
    tcase_add_test(tc, test_refused_login);
    tcase_add_test(tc, test_dead_peer_settings);
    tcase_add_test(tc, test_streaming_copy);
    tcase_add_test(tc, test_let_go_then_rewind);
    tcase_add_test(tc, test_plain_insert_meets_existing);
    tcase_add_test(tc, test_copy_end_kept_across_restart);
    tcase_add_test(tc, test_streaming_connection_lost);
    tcase_add_test(tc, test_statement_bound);
    suite_add_tcase(s, tc);
    return s;
}

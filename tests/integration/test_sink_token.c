/*
 * test_sink_token.c — a change stream's resume token in oplog2pg.checkpoint, against a real PostgreSQL
 * (OPLOG2PG_TEST_PG): committed in the same transaction as the rows it covers (so a kill between the two cannot part
 * them), kept as it was when a group fails, read back at connect, cleared by sink_set_checkpoint, and absent for the
 * oplog; the `source` column says which of the two wrote the row.
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

static sink *open_sink(const char *service)
{
    sink_config cfg = {.conninfo = conninfo(), .service = service, .copy_min_rows = 1000000};
    sink *s = sink_new(&cfg);
    ck_assert_ptr_nonnull(s);
    ck_assert_msg(sink_connect(s) == APPLY_OK, "connect: %s", sink_error(s));
    return s;
}

/* A resume token as the server sends it: {_data: hex}, raw BSON (it holds zero bytes, which the column must keep). */
typedef struct {
    bson_t *doc;
} token;

static token make_token(const char *hex)
{
    token t = {BCON_NEW("_data", BCON_UTF8(hex))};
    ck_assert_ptr_nonnull(t.doc);
    return t;
}

/* The token's bytes as PostgreSQL's hex text of a bytea ("\x..."). */
static void token_hex(const token *t, char *out, size_t len)
{
    const uint8_t *p = bson_get_data(t->doc);
    size_t n = (size_t)snprintf(out, len, "\\x");
    for (uint32_t i = 0; i < t->doc->len && n + 2 < len; i++)
        n += (size_t)snprintf(out + n, len - n, "%02x", p[i]);
}

/* One row {_id: id} into db.c at pos, the token set, and the commit's status. */
static apply_status write_one(sink *s, const char *db, int id, const token *t, const op_pos *pos)
{
    sink_batch *b = sink_batch_new();
    ck_assert_ptr_nonnull(b);
    char json[64], key[16];
    snprintf(json, sizeof json, "{\"_id\": %d}", id);
    snprintf(key, sizeof key, "%d", id);
    ck_assert(sink_batch_add(b, key, strlen(key), json, strlen(json)));
    apply_status st = sink_insert_batch(s, db, "c", b, pos);
    if (st == APPLY_OK) {
        sink_set_token(s, t != NULL ? bson_get_data(t->doc) : NULL, t != NULL ? t->doc->len : 0);
        st = sink_commit(s, pos);
    }
    sink_batch_free(b);
    return st;
}

static void expect_read_token(sink *s, const token *t)
{
    const uint8_t *tok;
    size_t len;
    if (t == NULL) {
        ck_assert(!sink_read_token(s, &tok, &len));
        ck_assert_ptr_null(tok);
        ck_assert_uint_eq(len, 0);
        return;
    }
    ck_assert(sink_read_token(s, &tok, &len));
    ck_assert_uint_eq(len, t->doc->len);
    ck_assert(memcmp(tok, bson_get_data(t->doc), len) == 0);
}

static void expect_row(const char *service, const token *t, const char *source)
{
    char sql[256], want[512];
    snprintf(sql, sizeof sql,
             "SELECT coalesce(resume_token::text, 'none') || ' ' || coalesce(source, 'none') "
             "FROM oplog2pg.checkpoint WHERE service = '%s'",
             service);
    char hex[400] = "none";
    if (t != NULL)
        token_hex(t, hex, sizeof hex);
    snprintf(want, sizeof want, "%s %s", hex, source);
    expect(sql, want);
}

/* The token is committed with the rows it covers and read back, by this sink and by the next one to connect; a
 * longer token after it is stored whole. */
START_TEST(test_token_committed_with_its_data)
{
    const char *service = "t_token_commit";
    sink *s = open_sink(service);
    expect_read_token(s, NULL);
    token t1 = make_token("8263A1B2C3000000012B042C0100296E5A1004"), t2 = make_token("8263A1B2C4000000022B042C0100");
    op_pos p1 = {.secs = 1671541443, .inc = 1, .term = -1}, p2 = {.secs = 1671541444, .inc = 2, .term = -1};
    ck_assert_msg(write_one(s, "tokdb1", 1, &t1, &p1) == APPLY_OK, "%s", sink_error(s));
    expect("SELECT count(*) FROM tokdb1.c", "1");
    expect_row(service, &t1, "change_stream");
    expect("SELECT ts_sec || ':' || ts_inc || '/' || coalesce(term::text, 'none') FROM oplog2pg.checkpoint "
           "WHERE service = 't_token_commit'",
           "1671541443:1/none");
    expect_read_token(s, &t1);
    ck_assert_msg(write_one(s, "tokdb1", 2, &t2, &p2) == APPLY_OK, "%s", sink_error(s));
    expect_row(service, &t2, "change_stream");
    expect_read_token(s, &t2);
    sink_free(s);

    s = open_sink(service);
    expect_read_token(s, &t2);
    op_pos back;
    ck_assert_int_eq(sink_read_checkpoint(s, &back), 1);
    ck_assert_uint_eq(back.secs, p2.secs);
    sink_free(s);
    bson_destroy(t1.doc);
    bson_destroy(t2.doc);
}
END_TEST

/* A group that fails (here its checkpoint would move backwards: O2BAK) leaves neither its rows nor its token; the
 * committed token stays, in the table and in the sink. */
START_TEST(test_failed_group_keeps_the_committed_token)
{
    const char *service = "t_token_fail";
    sink *s = open_sink(service);
    token t1 = make_token("8263A1B2C3000000012B042C0100"), t2 = make_token("8263A1B2C2000000092B042C0100");
    op_pos p1 = {.secs = 200, .inc = 5, .term = -1}, p0 = {.secs = 200, .inc = 4, .term = -1};
    ck_assert_msg(write_one(s, "tokdb2", 1, &t1, &p1) == APPLY_OK, "%s", sink_error(s));
    apply_status st = write_one(s, "tokdb2", 2, &t2, &p0);
    ck_assert_msg(st == APPLY_CONFIG, "status %s: %s", apply_status_name(st), sink_error(s));
    ck_assert_str_eq(sink_error_state(s), "O2BAK");
    expect("SELECT count(*) FROM tokdb2.c", "1");
    expect_row(service, &t1, "change_stream");
    expect_read_token(s, &t1);
    ck_assert(sink_connect(s) == APPLY_OK);
    expect_read_token(s, &t1);
    sink_free(s);
    bson_destroy(t1.doc);
    bson_destroy(t2.doc);
}
END_TEST

/* sink_set_checkpoint (--tail-from, --reimport) clears the token: the stream then starts at the position's time. */
START_TEST(test_set_checkpoint_clears_the_token)
{
    const char *service = "t_token_set";
    sink *s = open_sink(service);
    token t1 = make_token("8263A1B2C3000000012B042C0100");
    op_pos p1 = {.secs = 300, .inc = 1, .term = -1}, p2 = {.secs = 250, .inc = 0, .term = -1};
    ck_assert_msg(write_one(s, "tokdb3", 1, &t1, &p1) == APPLY_OK, "%s", sink_error(s));
    ck_assert_msg(sink_set_checkpoint(s, &p2) == APPLY_OK, "%s", sink_error(s));
    expect_row(service, NULL, "change_stream"); /* the source is as the last commit wrote it */
    expect_read_token(s, NULL);
    sink_free(s);
    s = open_sink(service);
    expect_read_token(s, NULL);
    ck_assert_msg(sink_set_checkpoint(s, NULL) == APPLY_OK, "%s", sink_error(s));
    expect_read_token(s, NULL);
    sink_free(s);
    bson_destroy(t1.doc);
}
END_TEST

/* A change stream's start (daemon/start.c): the position set, then its token committed over it at the same position
 * by a commit with no writes; the next group's commit moves both on. */
START_TEST(test_start_token_over_set_checkpoint)
{
    const char *service = "t_token_start";
    sink *s = open_sink(service);
    token t0 = make_token("8263A1B2C3000000072B042C0100"), t1 = make_token("8263A1B2C4000000012B042C0100");
    op_pos p0 = {500, 6, -1}, p1 = {500, 9, -1};
    ck_assert_msg(sink_set_checkpoint(s, &p0) == APPLY_OK, "%s", sink_error(s));
    sink_set_token(s, bson_get_data(t0.doc), t0.doc->len);
    ck_assert_msg(sink_commit(s, &p0) == APPLY_OK, "%s", sink_error(s));
    expect_row(service, &t0, "change_stream");
    expect("SELECT ts_sec || ':' || ts_inc FROM oplog2pg.checkpoint WHERE service = 't_token_start'", "500:6");
    expect_read_token(s, &t0);
    ck_assert_msg(write_one(s, "tokdb5", 1, &t1, &p1) == APPLY_OK, "%s", sink_error(s));
    expect_row(service, &t1, "change_stream");
    sink_free(s);
    bson_destroy(t0.doc);
    bson_destroy(t1.doc);
}
END_TEST

/* The oplog's commits write no token (a token left by an earlier change-stream run goes) and source 'oplog'. */
START_TEST(test_oplog_commit_has_no_token)
{
    const char *service = "t_token_oplog";
    sink *s = open_sink(service);
    token t1 = make_token("8263A1B2C3000000012B042C0100");
    op_pos p1 = {.secs = 400, .inc = 1, .term = -1}, p2 = {.secs = 400, .inc = 2, .term = 3};
    ck_assert_msg(write_one(s, "tokdb4", 1, &t1, &p1) == APPLY_OK, "%s", sink_error(s));
    ck_assert_msg(write_one(s, "tokdb4", 2, NULL, &p2) == APPLY_OK, "%s", sink_error(s));
    expect_row(service, NULL, "oplog");
    expect_read_token(s, NULL);
    sink_free(s);
    bson_destroy(t1.doc);
}
END_TEST

Suite *sink_token_suite(void); /* called by the generated runner list */

Suite *sink_token_suite(void)
{
    Suite *s = suite_create("sink_token");
    TCase *tc = tcase_create("token");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_token_committed_with_its_data);
    tcase_add_test(tc, test_failed_group_keeps_the_committed_token);
    tcase_add_test(tc, test_set_checkpoint_clears_the_token);
    tcase_add_test(tc, test_oplog_commit_has_no_token);
    tcase_add_test(tc, test_start_token_over_set_checkpoint);
    suite_add_tcase(s, tc);
    return s;
}

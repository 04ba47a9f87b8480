/*
 * test_shard_checkpoint.c — a sharded cluster's checkpoints against a real PostgreSQL (OPLOG2PG_TEST_PG): one row of
 * oplog2pg.shard_checkpoint per shard that moved, written by the commit of the rows it covers (through the batcher's
 * adapter, as the apply loop commits); a group that fails moves neither its rows nor its shards; the owner token
 * fences every statement; a shard never moves backwards by a commit while the cluster time on the service's row only
 * moves forward, silently; the explicit set and delete; rows and holds read back at connect and by the read-only
 * probe; and a replica set's sink that writes no shard row at all.
 */
#include <check.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/daemonenv.h"
#include "map/ejson.h"
#include "sink/batcher_pg.h"
#include "sink/pg.h"

/* One value from a query, as text ("" for no row, "NULL" for null). Caller frees. */
static char *query1(const char *sql)
{
    PGconn *c = PQconnectdb(denv_pg_conninfo());
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

static void run(const char *sql)
{
    PGconn *c = PQconnectdb(denv_pg_conninfo());
    ck_assert_msg(PQstatus(c) == CONNECTION_OK, "%s", PQerrorMessage(c));
    PGresult *r = PQexec(c, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql,
                  PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
}

/* sql fails with SQLSTATE state. */
static void expect_error(const char *sql, const char *state)
{
    PGconn *c = PQconnectdb(denv_pg_conninfo());
    ck_assert_msg(PQstatus(c) == CONNECTION_OK, "%s", PQerrorMessage(c));
    PGresult *r = PQexec(c, sql);
    const char *got = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    ck_assert_msg(PQresultStatus(r) == PGRES_FATAL_ERROR && got != NULL && strcmp(got, state) == 0,
                  "%s\n  want SQLSTATE %s, got %s: %s", sql, state, got ? got : "none", PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
}

/* The shard rows of a service as one line: "shard=sec:inc/term hold;..." (hold "-" when none), by shard id. */
static void expect_rows(const char *service, const char *want)
{
    char sql[700];
    snprintf(sql, sizeof sql,
             "SELECT coalesce(string_agg(shard || '=' || ts_sec || ':' || ts_inc || '/' || coalesce(term::text, 'N') "
             "|| ' ' || coalesce(txn_oldest_sec || ':' || txn_oldest_inc, '-'), ';' ORDER BY shard COLLATE \"C\"), "
             "'') FROM oplog2pg.shard_checkpoint WHERE service = '%s'",
             service);
    expect(sql, want);
}

/* The service's own row: "sec:inc/term hold". */
static void expect_main(const char *service, const char *want)
{
    char sql[400];
    snprintf(sql, sizeof sql,
             "SELECT coalesce(ts_sec || ':' || ts_inc, 'none') || '/' || coalesce(term::text, 'N') || ' ' || "
             "coalesce(txn_oldest_sec || ':' || txn_oldest_inc, '-') FROM oplog2pg.checkpoint WHERE service = '%s'",
             service);
    expect(sql, want);
}

static sink *open_sink(const char *service)
{
    sink_config cfg = {.conninfo = denv_pg_conninfo(), .service = service, .copy_min_rows = 1000};
    sink *s = sink_new(&cfg);
    ck_assert_ptr_nonnull(s);
    ck_assert_msg(sink_connect(s) == APPLY_OK, "connect: %s", sink_error(s));
    return s;
}

static const char *const three[] = {"shA", "shB", "shC"};

/* A sink for a cluster of three shards, with nothing committed for the service yet (rows of an earlier run of the
 * case are forgotten). */
static sink *open_sharded(const char *service)
{
    sink *s = open_sink(service);
    ck_assert(sink_set_checkpoint(s, NULL) == APPLY_OK);
    ck_assert(sink_set_shards(s, three, 3) == APPLY_OK);
    return s;
}

static batcher_source_pos at(uint32_t secs, uint32_t inc, int64_t term, bool moved)
{
    batcher_source_pos p = {.pos = {secs, inc, term}, .moved = moved};
    return p;
}

static batcher_source_pos held(uint32_t secs, uint32_t inc, int64_t term, uint32_t hsecs, uint32_t hinc)
{
    batcher_source_pos p = {.pos = {secs, inc, term}, .has_hold = true, .hold = {hsecs, hinc, -1}, .moved = true};
    return p;
}

/* One row into db.c, in the open group. */
static void insert_one(sink *s, const char *db, int id, const op_pos *pos)
{
    sink_batch *b = sink_batch_new();
    char key[16], json[64];
    snprintf(key, sizeof key, "%d", id);
    snprintf(json, sizeof json, "{\"_id\": %d}", id);
    ck_assert(sink_batch_add(b, key, strlen(key), json, strlen(json)));
    ck_assert_msg(sink_insert_batch(s, db, "c", b, pos) == APPLY_OK, "%s", sink_error(s));
    sink_batch_free(b);
}

/* What sink_read_shard_checkpoints hands over, as one line like expect_rows'. */
typedef struct {
    char text[512];
} collected;

static void collect(void *arg, const char *shard, const op_pos *pos, bool has_hold, const op_pos *hold)
{
    collected *c = arg;
    size_t len = strlen(c->text);
    char term[24];
    if (pos->term < 0)
        snprintf(term, sizeof term, "N");
    else
        snprintf(term, sizeof term, "%lld", (long long)pos->term);
    char h[32] = "-";
    if (has_hold)
        snprintf(h, sizeof h, "%u:%u", hold->secs, hold->inc);
    snprintf(c->text + len, sizeof c->text - len, "%s%s=%u:%u/%s %s", len ? ";" : "", shard, pos->secs, pos->inc, term,
             h);
}

static void expect_read(sink *s, int n, const char *want)
{
    collected c = {.text = ""};
    ck_assert_int_eq(sink_read_shard_checkpoints(s, collect, &c), n);
    ck_assert_msg(strcmp(c.text, want) == 0, "read back\n  want: %s\n  got:  %s", want, c.text);
}

/* The commit writes a row for each shard that moved and none for one that did not, through the batcher's adapter,
 * with the rows of the group; the service's row takes the cluster time, term -1 and no hold. */
START_TEST(test_commit_writes_moved_shards)
{
    const char *svc = "t_shard_moved";
    sink *s = open_sharded(svc);
    run("DROP SCHEMA IF EXISTS shmoved CASCADE");
    batcher_sink out = batcher_sink_pg(s);
    ck_assert_ptr_nonnull(out.set_sources);

    op_pos p = {.secs = 100, .inc = 2, .term = 7};
    insert_one(s, "shmoved", 1, &p);
    batcher_source_pos src[3] = {at(100, 1, 7, true), at(0, 0, -1, false), held(100, 2, 3, 90, 4)};
    out.set_sources(out.ctx, src, 3);
    ck_assert_msg(out.commit(out.ctx, &p) == APPLY_OK, "%s", sink_error(s));
    expect("SELECT count(*) FROM shmoved.c", "1");
    expect_rows(svc, "shA=100:1/7 -;shC=100:2/3 90:4");
    expect_main(svc, "100:2/-1 -");
    op_pos back;
    ck_assert_int_eq(sink_read_checkpoint(s, &back), 1);
    ck_assert_uint_eq(back.secs, 100);
    ck_assert_uint_eq(back.inc, 2);
    ck_assert_int_eq(back.term, -1);

    /* The next group: only shB moved. The others keep their rows as they were, applied_at included. */
    char *before = query1("SELECT string_agg(applied_at::text, ',' ORDER BY shard) FROM oplog2pg.shard_checkpoint "
                          "WHERE service = 't_shard_moved' AND shard <> 'shB'");
    p = (op_pos){.secs = 101, .inc = 1, .term = 2};
    insert_one(s, "shmoved", 2, &p);
    src[0].moved = src[2].moved = false;
    src[1] = at(101, 1, 2, true);
    out.set_sources(out.ctx, src, 3);
    ck_assert_msg(out.commit(out.ctx, &p) == APPLY_OK, "%s", sink_error(s));
    expect_rows(svc, "shA=100:1/7 -;shB=101:1/2 -;shC=100:2/3 90:4");
    expect_main(svc, "101:1/-1 -");
    char *after = query1("SELECT string_agg(applied_at::text, ',' ORDER BY shard) FROM oplog2pg.shard_checkpoint "
                         "WHERE service = 't_shard_moved' AND shard <> 'shB'");
    ck_assert_str_eq(before, after);
    free(before);
    free(after);

    /* A commit after which nothing moved again (its positions were consumed) writes only the cluster row. */
    run("UPDATE oplog2pg.shard_checkpoint SET ts_inc = 5 WHERE service = 't_shard_moved' AND shard = 'shB'");
    p.inc = 3;
    ck_assert_msg(sink_commit(s, &p) == APPLY_OK, "%s", sink_error(s));
    expect_rows(svc, "shA=100:1/7 -;shB=101:5/2 -;shC=100:2/3 90:4");
    expect_main(svc, "101:3/-1 -");
    ck_assert_uint_eq(sink_get_stats(s)->commits, 4); /* the set_checkpoint of open_sharded, then three */
    sink_free(s);
}
END_TEST

/* A group that fails leaves both its rows and its shards' checkpoints where they were: a data error, and a shard
 * position that would go backwards (O2BAK), each in a group with rows. */
START_TEST(test_failed_group_moves_nothing)
{
    const char *svc = "t_shard_fail";
    sink *s = open_sharded(svc);
    run("DROP SCHEMA IF EXISTS shfail CASCADE");
    op_pos p = {.secs = 50, .inc = 1, .term = 1};
    insert_one(s, "shfail", 1, &p);
    batcher_source_pos src[2] = {at(50, 1, 1, true), at(49, 9, 1, true)};
    sink_set_source_positions(s, src, 2);
    ck_assert_msg(sink_commit(s, &p) == APPLY_OK, "%s", sink_error(s));
    expect_rows(svc, "shA=50:1/1 -;shB=49:9/1 -");

    /* A data error in the group: nothing of it is committed. */
    p = (op_pos){.secs = 60, .inc = 1, .term = 1};
    insert_one(s, "shfail", 2, &p);
    src[0] = at(60, 1, 1, true);
    src[1] = at(59, 1, 1, true);
    sink_set_source_positions(s, src, 2);
    apply_status st = sink_update(s, "shfail", "c", "1", OP_FORM_DIFF, "{\"$v\": 2, \"diff\": {}}", &p);
    if (st == APPLY_OK)
        st = sink_commit(s, &p);
    ck_assert_msg(st == APPLY_DATA, "status %s: %s", apply_status_name(st), sink_error(s));
    expect("SELECT string_agg(_id, ',' ORDER BY _id) FROM shfail.c", "1");
    expect_rows(svc, "shA=50:1/1 -;shB=49:9/1 -");
    expect_main(svc, "50:1/-1 -");

    /* A shard going backwards: O2BAK, and the group's rows roll back with it. */
    ck_assert(sink_connect(s) == APPLY_OK);
    expect_read(s, 2, "shA=50:1/1 -;shB=49:9/1 -");
    p = (op_pos){.secs = 61, .inc = 1, .term = 1};
    insert_one(s, "shfail", 3, &p);
    src[0] = at(61, 1, 1, true);
    src[1] = at(49, 8, 1, true);
    sink_set_source_positions(s, src, 2);
    st = sink_commit(s, &p);
    ck_assert_msg(st == APPLY_CONFIG, "status %s: %s", apply_status_name(st), sink_error(s));
    ck_assert_str_eq(sink_error_state(s), "O2BAK");
    ck_assert_msg(strstr(sink_error(s), "shB") != NULL && strstr(sink_error(s), "backwards") != NULL, "%s",
                  sink_error(s));
    expect("SELECT string_agg(_id, ',' ORDER BY _id) FROM shfail.c", "1");
    expect_rows(svc, "shA=50:1/1 -;shB=49:9/1 -");
    expect_main(svc, "50:1/-1 -");

    /* A source that moved but has no shard name: nothing is committed. */
    ck_assert(sink_connect(s) == APPLY_OK);
    insert_one(s, "shfail", 4, &p);
    batcher_source_pos four[4] = {at(61, 1, 1, false), at(0, 0, -1, false), at(0, 0, -1, false), at(61, 1, 1, true)};
    sink_set_source_positions(s, four, 4);
    st = sink_commit(s, &p);
    ck_assert_msg(st == APPLY_CONFIG, "status %s: %s", apply_status_name(st), sink_error(s));
    ck_assert_msg(strstr(sink_error(s), "source 3") != NULL, "%s", sink_error(s));
    sink_disconnect(s);
    expect("SELECT string_agg(_id, ',' ORDER BY _id) FROM shfail.c", "1");
    expect_main(svc, "50:1/-1 -");
    sink_free(s);
}
END_TEST

/* Every statement is fenced by the owner token of the service's row: a shard's advance, the cluster row alone, the
 * explicit set. */
START_TEST(test_fenced)
{
    const char *svc = "t_shard_fence";
    sink *s = open_sharded(svc);
    run("DROP SCHEMA IF EXISTS shfence CASCADE");
    op_pos p = {.secs = 10, .inc = 1, .term = 1};
    batcher_source_pos src[1] = {at(10, 1, 1, true)};
    sink_set_source_positions(s, src, 1);
    ck_assert_msg(sink_commit(s, &p) == APPLY_OK, "%s", sink_error(s));

    for (int round = 0; round < 3; round++) {
        ck_assert(sink_connect(s) == APPLY_OK);
        /* Another daemon took the service over (as its connect does). */
        run("UPDATE oplog2pg.checkpoint SET owner = gen_random_uuid() WHERE service = 't_shard_fence'");
        apply_status st;
        p = (op_pos){.secs = 20, .inc = (uint32_t)round + 1, .term = 1};
        if (round < 2) {
            insert_one(s, "shfence", round + 1, &p);
            src[0] = at(20, 1, 1, round == 0); /* round 1: no shard moved, only the cluster row is written */
            sink_set_source_positions(s, src, 1);
            st = sink_commit(s, &p);
        } else {
            st = sink_set_shard_checkpoint(s, "shA", &p, NULL);
        }
        ck_assert_msg(st == APPLY_FENCED, "round %d: status %s: %s", round, apply_status_name(st), sink_error(s));
        ck_assert_str_eq(sink_error_state(s), "O2FEN");
    }
    expect("SELECT count(*) FROM pg_tables WHERE schemaname = 'shfence'", "0");
    /* Each function on its own, called with a token that is not the owner's. */
    expect_error("SELECT oplog2pg.advance_shard_checkpoint('t_shard_fence', gen_random_uuid(), 'shA', 30, 1, 1, "
                 "NULL, NULL)",
                 "O2FEN");
    expect_error("SELECT oplog2pg.set_shard_checkpoint('t_shard_fence', gen_random_uuid(), 'shA', NULL, NULL, NULL)",
                 "O2FEN");
    expect_error("SELECT oplog2pg.advance_cluster_checkpoint('t_shard_fence', gen_random_uuid(), 30, 1)", "O2FEN");
    expect_rows(svc, "shA=10:1/1 -");
    expect_main(svc, "10:1/-1 -");
    sink_free(s);
}
END_TEST

/* The cluster time on the service's row moves forward only, and an older one is no error: the shard that commits it
 * still moves. */
START_TEST(test_cluster_row_forward_only)
{
    const char *svc = "t_shard_cluster";
    sink *s = open_sharded(svc);
    op_pos p = {.secs = 30, .inc = 4, .term = 2};
    batcher_source_pos src[2] = {at(30, 4, 2, true), at(0, 0, -1, false)};
    sink_set_source_positions(s, src, 2);
    ck_assert_msg(sink_commit(s, &p) == APPLY_OK, "%s", sink_error(s));
    expect_main(svc, "30:4/-1 -");

    p = (op_pos){.secs = 30, .inc = 2, .term = 5};
    src[0].moved = false;
    src[1] = at(30, 2, 5, true);
    sink_set_source_positions(s, src, 2);
    ck_assert_msg(sink_commit(s, &p) == APPLY_OK, "%s", sink_error(s));
    expect_main(svc, "30:4/-1 -");
    expect_rows(svc, "shA=30:4/2 -;shB=30:2/5 -");
    op_pos back;
    ck_assert_int_eq(sink_read_checkpoint(s, &back), 1);
    ck_assert_uint_eq(back.secs, 30);
    ck_assert_uint_eq(back.inc, 4);

    p = (op_pos){.secs = 31, .inc = 1, .term = 5};
    src[1] = at(31, 1, 5, true);
    sink_set_source_positions(s, src, 2);
    ck_assert_msg(sink_commit(s, &p) == APPLY_OK, "%s", sink_error(s));
    expect_main(svc, "31:1/-1 -");
    ck_assert_int_eq(sink_read_checkpoint(s, &back), 1);
    ck_assert_uint_eq(back.secs, 31);
    sink_free(s);
}
END_TEST

/* The explicit move: set (forward or back, the hold cleared), delete, refused inside a group; and --reimport's
 * set_checkpoint(NULL) deletes every shard row of the service, and only of it. */
START_TEST(test_set_and_delete)
{
    const char *svc = "t_shard_set";
    sink *other = open_sharded("t_shard_set_other");
    batcher_source_pos one[1] = {at(5, 5, 1, true)};
    op_pos p5 = {5, 5, 1};
    sink_set_source_positions(other, one, 1);
    ck_assert_msg(sink_commit(other, &p5) == APPLY_OK, "%s", sink_error(other));

    sink *s = open_sharded(svc);
    op_pos p = {.secs = 40, .inc = 1, .term = 3};
    batcher_source_pos src[1] = {held(40, 1, 3, 39, 2)};
    sink_set_source_positions(s, src, 1);
    ck_assert_msg(sink_commit(s, &p) == APPLY_OK, "%s", sink_error(s));
    expect_rows(svc, "shA=40:1/3 39:2");

    op_pos back = {.secs = 35, .inc = 7, .term = 2}, newer = {.secs = 45, .inc = 1, .term = -1};
    ck_assert_msg(sink_set_shard_checkpoint(s, "shA", &back, NULL) == APPLY_OK, "%s", sink_error(s));
    ck_assert_msg(sink_set_shard_checkpoint(s, "shZ", &newer, "rsZ/h1:27018,h2:27018") == APPLY_OK, "%s",
                  sink_error(s));
    expect_rows(svc, "shA=35:7/2 -;shZ=45:1/N -");
    /* the hosts given are stored with the row, and known at once */
    char hq[200];
    snprintf(hq, sizeof hq,
             "SELECT count(*) FROM oplog2pg.shard_checkpoint WHERE service = '%s' AND shard = 'shZ' "
             "AND hosts = 'rsZ/h1:27018,h2:27018'",
             svc);
    ck_assert_int_eq(denv_pg_int(hq), 1);
    ck_assert_str_eq(sink_shard_hosts(s, "shZ"), "rsZ/h1:27018,h2:27018");
    ck_assert_ptr_null(sink_shard_hosts(s, "shA"));
    expect_read(s, 2, "shA=35:7/2 -;shZ=45:1/N -");
    ck_assert_msg(sink_set_shard_checkpoint(s, "shA", NULL, NULL) == APPLY_OK, "%s", sink_error(s));
    expect_rows(svc, "shZ=45:1/N -");
    expect_read(s, 1, "shZ=45:1/N -");

    /* Not inside a group. */
    insert_one(s, "shset", 1, &p);
    ck_assert_int_eq(sink_set_shard_checkpoint(s, "shA", &p, NULL), APPLY_CONFIG);
    ck_assert(sink_connect(s) == APPLY_OK);

    ck_assert(sink_set_checkpoint(s, NULL) == APPLY_OK);
    expect_rows(svc, "");
    expect_read(s, 0, "");
    expect_rows("t_shard_set_other", "shA=5:5/1 -");
    /* A position set explicitly leaves the shards' rows alone (the caller sets those it means to). */
    ck_assert_msg(sink_set_shard_checkpoint(s, "shB", &newer, NULL) == APPLY_OK, "%s", sink_error(s));
    ck_assert(sink_set_checkpoint(s, &p) == APPLY_OK);
    expect_rows(svc, "shB=45:1/N -");
    sink_free(s);
    sink_free(other);
}
END_TEST

/* The rows and their holds are read back at connect by a new sink, and by the read-only probe (check, status). */
START_TEST(test_read_back_with_holds)
{
    const char *svc = "t_shard_read";
    sink *s = open_sharded(svc);
    op_pos p = {.secs = 70, .inc = 3, .term = 4};
    batcher_source_pos src[3] = {held(70, 1, 4, 65, 1), at(70, 3, 4, true), held(69, 9, -1, 60, 2)};
    sink_set_source_positions(s, src, 3);
    ck_assert_msg(sink_commit(s, &p) == APPLY_OK, "%s", sink_error(s));
    expect_read(s, 3, "shA=70:1/4 65:1;shB=70:3/4 -;shC=69:9/N 60:2");
    /* A hold that ends: the shard's next row has none. */
    src[0] = at(71, 1, 4, true);
    src[1].moved = src[2].moved = false;
    p = (op_pos){.secs = 71, .inc = 1, .term = 4};
    sink_set_source_positions(s, src, 3);
    ck_assert_msg(sink_commit(s, &p) == APPLY_OK, "%s", sink_error(s));
    sink_free(s);

    s = open_sink(svc);
    expect_read(s, 3, "shA=71:1/4 -;shB=70:3/4 -;shC=69:9/N 60:2");
    sink_disconnect(s);
    ck_assert_int_eq(sink_read_shard_checkpoints(s, collect, &(collected){.text = ""}), -1);
    sink_free(s);

    sink_probe_result pr;
    pgconn_error pe;
    ck_assert_msg(sink_probe(denv_pg_conninfo(), svc, &pr, &pe), "%s", pe.message);
    ck_assert(pr.have_checkpoint);
    ck_assert_uint_eq(pr.pos.secs, 71);
    ck_assert_int_eq(pr.pos.term, -1);
    ck_assert_uint_eq(pr.nshards, 3);
    ck_assert_str_eq(pr.shards[0].shard, "shA");
    ck_assert(!pr.shards[0].has_hold);
    ck_assert_uint_eq(pr.shards[0].pos.secs, 71);
    ck_assert_str_eq(pr.shards[2].shard, "shC");
    ck_assert_uint_eq(pr.shards[2].pos.inc, 9);
    ck_assert_int_eq(pr.shards[2].pos.term, -1);
    ck_assert(pr.shards[2].has_hold);
    ck_assert_uint_eq(pr.shards[2].hold.secs, 60);
    ck_assert_uint_eq(pr.shards[2].hold.inc, 2);
    ck_assert_msg(pr.shards[1].applied_at[0] != '\0', "no applied_at");
    sink_probe_free(&pr);
    ck_assert_uint_eq(pr.nshards, 0);
}
END_TEST

/* A replica set's sink (no shards named) writes no shard row, whatever the batcher says of its one source, and its
 * checkpoint row is what it always was: the entry's own term and hold. */
START_TEST(test_replica_set_unchanged)
{
    const char *svc = "t_shard_rs";
    sink *s = open_sink(svc);
    ck_assert(sink_set_checkpoint(s, NULL) == APPLY_OK);
    batcher_sink out = batcher_sink_pg(s);
    op_pos p = {.secs = 80, .inc = 2, .term = 6}, hold = {79, 1, -1};
    batcher_source_pos src[1] = {held(80, 2, 6, 79, 1)};
    out.set_sources(out.ctx, src, 1);
    out.set_hold(out.ctx, &hold);
    ck_assert_msg(out.commit(out.ctx, &p) == APPLY_OK, "%s", sink_error(s));
    expect_rows(svc, "");
    expect_main(svc, "80:2/6 79:1");
    expect_read(s, 0, "");
    /* A shard list emptied again is a replica set's too. */
    ck_assert(sink_set_shards(s, three, 3) == APPLY_OK);
    ck_assert(sink_set_shards(s, NULL, 0) == APPLY_OK);
    p.inc = 3;
    out.set_sources(out.ctx, src, 1);
    ck_assert_msg(out.commit(out.ctx, &p) == APPLY_OK, "%s", sink_error(s));
    expect_rows(svc, "");
    expect_main(svc, "80:3/6 79:1");
    /* And it still refuses to go backwards with its own function (the cluster row's leniency is not its). */
    p.inc = 1;
    ck_assert_int_eq(sink_commit(s, &p), APPLY_CONFIG);
    ck_assert_str_eq(sink_error_state(s), "O2BAK");
    sink_free(s);

    sink_probe_result pr;
    pgconn_error pe;
    ck_assert_msg(sink_probe(denv_pg_conninfo(), svc, &pr, &pe), "%s", pe.message);
    ck_assert_uint_eq(pr.nshards, 0);
    ck_assert_ptr_null(pr.shards);
    ck_assert_int_eq(pr.pos.term, 6);
    sink_probe_free(&pr);
}
END_TEST

/* The schema installs again over itself (every start), with the shard rows kept. */
START_TEST(test_schema_idempotent)
{
    const char *svc = "t_shard_schema";
    sink *s = open_sharded(svc);
    op_pos p = {.secs = 90, .inc = 1, .term = 1};
    batcher_source_pos src[1] = {at(90, 1, 1, true)};
    sink_set_source_positions(s, src, 1);
    ck_assert_msg(sink_commit(s, &p) == APPLY_OK, "%s", sink_error(s));
    for (int i = 0; i < 2; i++)
        ck_assert_msg(sink_connect(s) == APPLY_OK, "%s", sink_error(s));
    expect_rows(svc, "shA=90:1/1 -");
    expect_read(s, 1, "shA=90:1/1 -");
    expect("SELECT obj_description('oplog2pg.shard_checkpoint'::regclass, 'pg_class') IS NOT NULL", "t");
    sink_free(s);
}
END_TEST

/* The shards' hosts go into their rows with the first commit that moves each (once: a commit after does not write them
 * again), are read back at connect, and change when config.shards lists others; an install of an earlier version,
 * without the column, gets it at the next start, its rows kept. */
START_TEST(test_hosts_stored)
{
    const char *svc = "t_shard_hosts";
    sink *s = open_sharded(svc);
    const char *hosts[3] = {"rsA/h1:1,h2:2", NULL, "rsC/h3:3"};
    ck_assert(sink_set_shard_hosts(s, hosts, 3) == APPLY_OK);
    op_pos p = {.secs = 50, .inc = 1, .term = 1};
    batcher_source_pos src[3] = {at(50, 1, 1, true), at(50, 1, 1, true), at(0, 0, -1, false)};
    sink_set_source_positions(s, src, 3);
    ck_assert_msg(sink_commit(s, &p) == APPLY_OK, "%s", sink_error(s));
    const char *q = "SELECT string_agg(shard || '=' || coalesce(hosts, 'N'), ';' ORDER BY shard) FROM "
                    "oplog2pg.shard_checkpoint WHERE service = 't_shard_hosts'";
    expect(q, "shA=rsA/h1:1,h2:2;shB=N");
    ck_assert_str_eq(sink_shard_hosts(s, "shA"), "rsA/h1:1,h2:2");
    ck_assert_ptr_null(sink_shard_hosts(s, "shC")); /* no row yet */
    /* Written once: a hand-made change stays until the hosts the daemon knows differ from what the row had. */
    run("UPDATE oplog2pg.shard_checkpoint SET hosts = 'by hand' WHERE service = 't_shard_hosts' AND shard = 'shA'");
    p.inc = 2;
    src[0] = at(50, 2, 1, true);
    src[1].moved = false;
    sink_set_source_positions(s, src, 3);
    ck_assert_msg(sink_commit(s, &p) == APPLY_OK, "%s", sink_error(s));
    expect(q, "shA=by hand;shB=N");
    /* Read back at connect: the row holds others than the daemon's, so the next commit that moves it writes them. */
    ck_assert(sink_connect(s) == APPLY_OK);
    ck_assert_str_eq(sink_shard_hosts(s, "shA"), "by hand");
    ck_assert(sink_set_shards(s, three, 3) == APPLY_OK);
    ck_assert(sink_set_shard_hosts(s, hosts, 3) == APPLY_OK);
    p.inc = 3;
    src[0] = at(50, 3, 1, true);
    src[2] = at(50, 3, 1, true);
    sink_set_source_positions(s, src, 3);
    ck_assert_msg(sink_commit(s, &p) == APPLY_OK, "%s", sink_error(s));
    expect(q, "shA=rsA/h1:1,h2:2;shB=N;shC=rsC/h3:3");
    /* An earlier version's install: no column; the next start adds it. */
    run("ALTER TABLE oplog2pg.shard_checkpoint DROP COLUMN hosts");
    sink_free(s);
    s = open_sink(svc);
    expect_rows(svc, "shA=50:3/1 -;shB=50:1/1 -;shC=50:3/1 -");
    expect(q, "shA=N;shB=N;shC=N");
    sink_free(s);
}
END_TEST

Suite *shard_checkpoint_suite(void); /* called by the generated runner list */

Suite *shard_checkpoint_suite(void)
{
    Suite *s = suite_create("shard_checkpoint");
    TCase *tc = tcase_create("pg");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_commit_writes_moved_shards);
    tcase_add_test(tc, test_failed_group_moves_nothing);
    tcase_add_test(tc, test_fenced);
    tcase_add_test(tc, test_cluster_row_forward_only);
    tcase_add_test(tc, test_set_and_delete);
    tcase_add_test(tc, test_read_back_with_holds);
    tcase_add_test(tc, test_replica_set_unchanged);
    tcase_add_test(tc, test_schema_idempotent);
    tcase_add_test(tc, test_hosts_stored);
    suite_add_tcase(s, tc);
    return s;
}

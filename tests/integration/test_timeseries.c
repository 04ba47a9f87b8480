/*
 * test_timeseries.c — time-series collections as tables of measurements (docs/timeseries.md): what a driver inserts
 * into the collection lands as one row per measurement (bucket, pos, time, meta, doc), each bucket change writes
 * only the rows it changes, the table goes with the collection; a typed map gives the table its columns (and what
 * it cannot say stops the daemon with a clear error).
 *
 * The measurements are checked one by one against what the test inserted (the generic comparison of
 * tests/lib/compare.c reads collections, not measurements).
 */
#include <check.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/daemonenv.h"
#include "../lib/proc.h"
#include "../lib/skip.h"
#include "daemon/exitcodes.h"
#include "map/ejson.h"
#include "sink/batch.h"
#include "sink/pg.h"
#include "source/decode.h"

#define T0_MS 1700000000000LL /* 2023-11-14 22:13:20 UTC */

/* Inserts measurements from..to (inclusive) of station `station` into db.coll, in one insertMany: measurement i has
 * time T0 + i seconds, meta {station, kind: "temp"} and value i / 4. */
static void insert_measurements(const denv *e, const char *db, const char *coll, int station, int from, int to)
{
    mongoc_client_t *c = mongoc_client_new(e->uri);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db, coll);
    size_t n = (size_t)(to - from + 1);
    bson_t **docs = calloc(n, sizeof *docs);
    for (size_t k = 0; k < n; k++) {
        int i = from + (int)k;
        docs[k] = BCON_NEW("t", BCON_DATE_TIME(T0_MS + (int64_t)i * 1000), "m", "{", "station", BCON_INT32(station),
                           "kind", "temp", "}", "i", BCON_INT32(i), "v", BCON_DOUBLE(i / 4.0));
    }
    bson_error_t err;
    ck_assert_msg(mongoc_collection_insert_many(col, (const bson_t **)docs, n, NULL, NULL, &err),
                  "insert into %s.%s: %s", db, coll, err.message);
    for (size_t k = 0; k < n; k++)
        bson_destroy(docs[k]);
    free(docs);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
}

static void create_ts(const denv *e, const char *db, const char *coll)
{
    denv_command(e, db, BCON_NEW("create", coll, "timeseries", "{", "timeField", "t", "metaField", "m", "}"));
}

static bool table_exists(const char *schema, const char *table)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM pg_tables WHERE schemaname = '%s' AND tablename = '%s'", schema,
             table);
    return denv_pg_int(sql) == 1;
}

/* Every measurement of station `station` with i in from..to is a row exactly once, with its time, meta and value,
 * and nothing else of that station is there; each bucket's places run 0..n-1. */
static void expect_measurements(const char *qtable, int station, int from, int to)
{
    char sql[1200];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s WHERE (meta->>'station')::int = %d", qtable, station);
    ck_assert_int_eq(denv_pg_int(sql), to - from + 1);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM %s r, generate_series(%d, %d) AS g(i) WHERE (r.meta->>'station')::int = %d AND "
             "(r.doc->>'i')::int = g.i AND r.\"time\" = to_timestamp(%lld + g.i) AND (r.doc->>'v')::float8 = g.i / 4.0 "
             "AND r.meta = '{\"kind\": \"temp\", \"station\": %d}'::jsonb AND r.doc->'m' = r.meta AND "
             "r.doc ? '_id' AND r.doc->'t' IS NOT NULL",
             qtable, from, to, station, T0_MS / 1000, station);
    ck_assert_int_eq(denv_pg_int(sql), to - from + 1);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM (SELECT bucket, max(pos) AS top, count(*) AS n FROM %s GROUP BY bucket) b "
             "WHERE b.top <> b.n - 1",
             qtable);
    ck_assert_int_eq(denv_pg_int(sql), 0);
}

/* Rows for what is inserted while the daemon tails; the create records the options; the drop takes the table, its
 * options and its buckets' documents. */
START_TEST(test_ts_tail_and_drop)
{
    denv e;
    denv_start(&e, "tsa", NULL, NULL);
    denv_insert_range(&e, "rep_tsa_a", "plain", 1, 3);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));

    create_ts(&e, "rep_tsa_a", "weather");
    insert_measurements(&e, "rep_tsa_a", "weather", 1, 0, 9);
    insert_measurements(&e, "rep_tsa_a", "weather", 2, 0, 4);
    insert_measurements(&e, "rep_tsa_a", "weather", 1, 10, 19);
    ck_assert(denv_wait_caught_up(&e, 60));

    ck_assert_msg(table_exists("rep_tsa_a", "weather"), "no table for the time-series collection");
    expect_measurements("rep_tsa_a.weather", 1, 0, 19);
    expect_measurements("rep_tsa_a.weather", 2, 0, 4);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.timeseries WHERE schema_name = 'rep_tsa_a' AND "
                                 "table_name = 'weather' AND time_field = 't' AND meta_field = 'm'"),
                     1);
    /* one stored document per bucket, and every bucket of the table has one */
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.timeseries_bucket WHERE schema_name = 'rep_tsa_a'"),
                     denv_pg_int("SELECT count(DISTINCT bucket) FROM rep_tsa_a.weather"));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_tsa_a.weather w WHERE NOT EXISTS (SELECT 1 FROM "
                                 "oplog2pg.timeseries_bucket b WHERE b.schema_name = 'rep_tsa_a' AND b.table_name = "
                                 "'weather' AND b.bucket = w.bucket)"),
                     0);
    ck_assert_msg(!table_exists("rep_tsa_a", "system.buckets.weather"), "a table for the buckets collection");
    denv_expect_match(&e); /* the plain collection, and no orphan */

    denv_drop_collection(&e, "rep_tsa_a", "weather");
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_msg(!table_exists("rep_tsa_a", "weather"), "the dropped time-series collection's table is still there");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.timeseries WHERE schema_name = 'rep_tsa_a'"), 0);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.timeseries_bucket WHERE schema_name = 'rep_tsa_a'"), 0);
    denv_stop(&e);
}
END_TEST

/* kill -9 while measurements stream in, then a restart: every measurement once, the buckets' documents read back
 * from PostgreSQL for the appends after it. */
START_TEST(test_ts_kill9)
{
    denv e;
    denv_start(&e, "tsk", NULL, NULL);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    create_ts(&e, "rep_tsk_a", "m");
    insert_measurements(&e, "rep_tsk_a", "m", 1, 0, 4);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.timeseries WHERE schema_name = 'rep_tsk_a'"), 1);
    for (int round = 0; round < 3; round++) {
        int base = 5 + round * 40;
        insert_measurements(&e, "rep_tsk_a", "m", 1, base, base + 19);
        ck_assert(proc_signal(&e.daemon, SIGKILL));
        ck_assert(proc_wait(&e.daemon, 30));
        e.daemon.pid = 0;
        insert_measurements(&e, "rep_tsk_a", "m", 1, base + 20, base + 39);
        denv_daemon_start(&e);
        ck_assert(denv_wait_caught_up(&e, 60));
        expect_measurements("rep_tsk_a.m", 1, 0, base + 39);
    }
    denv_stop(&e);
}
END_TEST

/* The initial copy reads the buckets into the same rows (and stores their documents, so the appends tailing meets
 * next apply to them); what is inserted while the copy runs and after it lands once. */
START_TEST(test_ts_copy)
{
    denv e;
    denv_start(&e, "tsc", NULL, NULL);
    create_ts(&e, "rep_tsc_a", "w");
    insert_measurements(&e, "rep_tsc_a", "w", 1, 0, 29);
    insert_measurements(&e, "rep_tsc_a", "w", 2, 0, 9);
    denv_insert_range(&e, "rep_tsc_a", "plain", 1, 5);
    denv_daemon_start(&e);
    insert_measurements(&e, "rep_tsc_a", "w", 2, 10, 19); /* perhaps while the copy runs */
    ck_assert(denv_wait_caught_up(&e, 60));
    insert_measurements(&e, "rep_tsc_a", "w", 1, 30, 39);
    ck_assert(denv_wait_caught_up(&e, 60));
    expect_measurements("rep_tsc_a.w", 1, 0, 39);
    expect_measurements("rep_tsc_a.w", 2, 0, 19);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.copy_progress WHERE service = 'rep_tsc' AND coll = "
                                 "'system.buckets.w' AND done"),
                     1);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.timeseries_bucket WHERE schema_name = 'rep_tsc_a'"),
                     denv_pg_int("SELECT count(DISTINCT bucket) FROM rep_tsc_a.w"));
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* A time-series collection dropped while the daemon is down in the middle of its initial copy: the resumed copy marks
 * it done with the options the plan recorded (the collection is listed nowhere now), and the replay drops its table;
 * the service goes on. */
START_TEST(test_ts_copy_dropped_while_down)
{
    denv e;
    denv_start(&e, "tsq", NULL, NULL);
    create_ts(&e, "rep_tsq_a", "w");
    for (int station = 1; station <= 20; station++)
        insert_measurements(&e, "rep_tsq_a", "w", station, 0, 49);
    denv_insert_range(&e, "rep_tsq_a", "plain", 1, 1000);
    denv_command(&e, "admin", BCON_NEW("mongosimDelay", BCON_INT32(1500))); /* a slow copy, killed half-way */
    denv_daemon_start(&e);
    ck_assert_msg(denv_wait_log(&e, "copy: rep_tsq_a.system.buckets.w started", 60), "the bucket copy did not start");
    ck_assert(proc_signal(&e.daemon, SIGKILL));
    ck_assert(proc_wait(&e.daemon, 30));
    e.daemon.pid = 0;
    denv_command(&e, "admin", BCON_NEW("mongosimDelay", BCON_INT32(0)));
    denv_command(&e, "rep_tsq_a", BCON_NEW("drop", "w"));
    denv_daemon_start(&e);
    ck_assert_msg(denv_wait_caught_up(&e, 90), "the resumed copy did not reach tailing");
    ck_assert_msg(!proc_wait(&e.daemon, 0.2), "the daemon stopped");
    ck_assert_msg(!table_exists("rep_tsq_a", "w"), "the dropped collection's table is still there");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.copy_progress WHERE service = 'rep_tsq' AND done"), 2);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_tsq_a.plain"), 1000);
    denv_stop(&e);
}
END_TEST

/* `status` names the time-series tables and the bucket documents kept; the metrics count the bucket changes and the
 * measurement rows they wrote. */
START_TEST(test_ts_status_and_metrics)
{
    denv e;
    int port = denv_free_port();
    char extra[128];
    snprintf(extra, sizeof extra, "[metrics]\nlisten = 127.0.0.1:%d\n", port);
    denv_start(&e, "tss", NULL, extra);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    create_ts(&e, "rep_tss_a", "w");
    insert_measurements(&e, "rep_tss_a", "w", 1, 0, 9);
    insert_measurements(&e, "rep_tss_a", "w", 1, 10, 14);
    ck_assert(denv_wait_caught_up(&e, 60));
    expect_measurements("rep_tss_a.w", 1, 0, 14);

    char out[400];
    snprintf(out, sizeof out, "%s/status.txt", e.dir);
    const char *args[] = {"-c", e.ini, "status", NULL};
    ck_assert_int_eq(denv_run_command(&e, args, out), 0);
    ck_assert_msg(denv_file_contains(out, "time-series:   1 tables of measurements"), "status does not list them");
    snprintf(out, sizeof out, "%s/status.json", e.dir);
    const char *jargs[] = {"-c", e.ini, "status", "--json", NULL};
    ck_assert_int_eq(denv_run_command(&e, jargs, out), 0);
    ck_assert_msg(denv_file_contains(out, "\"timeseries\": {\"tables\": 1, \"buckets\": "), "status --json");

    char url[128], *body = malloc(65536);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", port);
    double until = denv_now() + 60;
    do {
        ck_assert_int_eq(denv_http_get(url, false, body, 65536), 0);
    } while (denv_metric(body, "oplog2pg_timeseries_measurements_written_total") < 15 && denv_now() < until &&
             usleep(100 * 1000) == 0);
    /* every measurement written once: the append wrote its new places only */
    ck_assert_double_eq(denv_metric(body, "oplog2pg_timeseries_measurements_written_total"), 15);
    ck_assert(denv_metric(body, "oplog2pg_timeseries_bucket_changes_total") >= 2);
    ck_assert_double_eq(denv_metric(body, "oplog2pg_timeseries_bucket_reads_total"), 0);
    free(body);
    denv_stop(&e);
}
END_TEST

/* ---- every server version's bucket writes ---- */

#define NSTATIONS 3
#define NPER      40

/* What the collection holds, as the test wrote it: for each station and i, whether the measurement is there and its
 * value. */
typedef struct {
    bool present[NSTATIONS + 1][NPER];
    double v[NSTATIONS + 1][NPER];
    bool zone[NSTATIONS + 1]; /* the station's meta has zone: "north" (a 5.0 meta update) */
} ts_model;

static void insert_one_measurement(const denv *e, const char *db, const char *coll, int station, int i, int64_t ms)
{
    mongoc_client_t *c = mongoc_client_new(e->uri);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db, coll);
    bson_t *d = BCON_NEW("t", BCON_DATE_TIME(ms), "m", "{", "station", BCON_INT32(station), "kind", "temp", "}", "i",
                         BCON_INT32(i), "v", BCON_DOUBLE(i / 4.0));
    bson_error_t err;
    ck_assert_msg(mongoc_collection_insert_one(col, d, NULL, NULL, &err), "insert: %s", err.message);
    bson_destroy(d);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
}

static void write_many(const denv *e, const char *db, const char *coll, bool del, bson_t *filter, bson_t *update)
{
    mongoc_client_t *c = mongoc_client_new(e->uri);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db, coll);
    bson_error_t err;
    bool ok = del ? mongoc_collection_delete_many(col, filter, NULL, NULL, &err)
                  : mongoc_collection_update_many(col, filter, update, NULL, NULL, &err);
    ck_assert_msg(ok, "%s: %s", del ? "deleteMany" : "updateMany", err.message);
    bson_destroy(filter);
    if (update != NULL)
        bson_destroy(update);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
}

/* The typed map the typed cases give a collection w of database db (docs/timeseries.md, "Typed columns"): the
 * station out of the meta field, the measurement's own fields, its _id, and the rest (the rest of the meta, its
 * time) in extra. */
static void typed_map(char *out, size_t outlen, const char *db)
{
    snprintf(out, outlen,
             "\n[map %s.w]\nrest = extra\ncolumn.mid = text from _id\ncolumn.station = integer from m.station\n"
             "column.i = integer\ncolumn.v = double precision\n",
             db);
}

/* The table of the typed map holds exactly the model. */
static void expect_model_typed(const char *qtable, const ts_model *m)
{
    int want = 0;
    for (int st = 1; st <= NSTATIONS; st++)
        for (int i = 0; i < NPER; i++)
            want += m->present[st][i];
    char sql[1500];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", qtable);
    ck_assert_int_eq(denv_pg_int(sql), want);
    for (int st = 1; st <= NSTATIONS; st++)
        for (int i = 0; i < NPER; i++) {
            snprintf(sql, sizeof sql,
                     "SELECT count(*) FROM %s WHERE station = %d AND i = %d AND v = %.17g AND \"time\" IS NOT NULL "
                     "AND length(mid) = 24 AND extra->'m' = '{\"kind\": \"temp\"%s}'::jsonb AND extra ? 't' AND "
                     "NOT extra ? 'v' AND NOT extra ? '_id'",
                     qtable, st, i, m->v[st][i], m->zone[st] ? ", \"zone\": \"north\"" : "");
            ck_assert_msg(denv_pg_int(sql) == (m->present[st][i] ? 1 : 0), "station %d, i %d: %s", st, i,
                          m->present[st][i] ? "missing or wrong" : "still there");
        }
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM (SELECT bucket, max(pos) AS top, count(*) AS n FROM %s GROUP BY bucket) b WHERE "
             "b.top <> b.n - 1",
             qtable);
    ck_assert_int_eq(denv_pg_int(sql), 0);
}

/* The table holds exactly the model: one row per present measurement, with its value and meta; places dense. */
static void expect_model(const char *qtable, const ts_model *m)
{
    int want = 0;
    for (int st = 1; st <= NSTATIONS; st++)
        for (int i = 0; i < NPER; i++)
            want += m->present[st][i];
    char sql[1500];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", qtable);
    ck_assert_int_eq(denv_pg_int(sql), want);
    for (int st = 1; st <= NSTATIONS; st++)
        for (int i = 0; i < NPER; i++) {
            snprintf(sql, sizeof sql,
                     "SELECT count(*) FROM %s WHERE (meta->>'station')::int = %d AND (doc->>'i')::int = %d AND "
                     "(doc->>'v')::float8 = %.17g AND r_ok",
                     qtable, st, i, m->v[st][i]);
            /* r_ok: the meta as written, and in the document too */
            char cond[300];
            snprintf(cond, sizeof cond,
                     "meta = '{\"kind\": \"temp\", \"station\": %d%s}'::jsonb AND doc->'m' = meta AND \"time\" IS "
                     "NOT NULL",
                     st, m->zone[st] ? ", \"zone\": \"north\"" : "");
            char *at = strstr(sql, "r_ok");
            snprintf(at, sizeof sql - (size_t)(at - sql), "%s", cond);
            ck_assert_msg(denv_pg_int(sql) == (m->present[st][i] ? 1 : 0), "station %d, i %d: %s", st, i,
                          m->present[st][i] ? "missing or wrong" : "still there");
        }
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM (SELECT bucket, max(pos) AS top, count(*) AS n FROM %s GROUP BY bucket) b WHERE "
             "b.top <> b.n - 1",
             qtable);
    ck_assert_int_eq(denv_pg_int(sql), 0);
}

/* One server version's bucket writes, from what a driver sends to the collection: single inserts and insertMany,
 * buckets of 8 rolling over (compressed on close in 7.0, compressed from the start with binary-diff appends in 8.0),
 * a measurement out of time order (8.0's version 3), then deletes and updates (5.0: whole buckets and the meta
 * field only; 7.0 and 8.0: any measurement, buckets re-packed in one applyOps), with a restart in the middle. */
static void formats_case(const char *format, const char *name, bool typed)
{
    const char *sim_args[] = {"--oplog-format", format, "--timeseries-bucket-max-count", "8", NULL};
    denv e;
    ts_model m;
    memset(&m, 0, sizeof m);
    bool v5 = strcmp(format, "5.0") == 0;
    char db[64], qtable[96], map[400];
    snprintf(db, sizeof db, "rep_%s_a", name);
    snprintf(qtable, sizeof qtable, "%s.w", db);
    typed_map(map, sizeof map, db);
    denv_start(&e, name, denv_using_sim() ? sim_args : NULL, typed ? map : NULL);
    void (*expect)(const char *, const ts_model *) = typed ? expect_model_typed : expect_model;
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    create_ts(&e, db, "w");
    for (int st = 1; st <= NSTATIONS; st++) {
        insert_measurements(&e, db, "w", st, 0, 9); /* one insertMany: a full bucket and the start of another */
        for (int i = 0; i < 10; i++)
            m.present[st][i] = true, m.v[st][i] = i / 4.0;
    }
    for (int i = 10; i < 20; i++) /* single inserts: appends one by one */
        for (int st = 1; st <= NSTATIONS; st++) {
            insert_one_measurement(&e, db, "w", st, i, T0_MS + (int64_t)i * 1000);
            m.present[st][i] = true, m.v[st][i] = i / 4.0;
        }
    /* a measurement earlier than the bucket's others: 8.0 makes the bucket unsorted (version 3) */
    insert_one_measurement(&e, db, "w", 1, 20, T0_MS + 15500);
    m.present[1][20] = true, m.v[1][20] = 5.0;
    ck_assert(denv_wait_caught_up(&e, 60));
    expect(qtable, &m);

    /* a restart: the buckets' documents come back from PostgreSQL for the changes after it */
    ck_assert_msg(proc_stop(&e.daemon, 30), "the daemon did not stop on SIGTERM");
    e.daemon.pid = 0;
    insert_measurements(&e, db, "w", 2, 21, 29);
    for (int i = 21; i < 30; i++)
        m.present[2][i] = true, m.v[2][i] = i / 4.0;
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    expect(qtable, &m);

    if (v5) {
        /* 5.0: deletes and updates may only name the meta field: whole buckets go, the meta changes in place */
        write_many(&e, db, "w", true, BCON_NEW("m.station", BCON_INT32(3)), NULL);
        for (int i = 0; i < NPER; i++)
            m.present[3][i] = false;
        write_many(&e, db, "w", false, BCON_NEW("m.station", BCON_INT32(1)),
                   BCON_NEW("$set", "{", "m.zone", "north", "}"));
        m.zone[1] = true;
    } else {
        /* 7.0 and 8.0: any measurement; its bucket is re-packed, an updated one moves to a new bucket */
        write_many(&e, db, "w", true, BCON_NEW("i", BCON_INT32(3)), NULL);
        write_many(&e, db, "w", true, BCON_NEW("i", BCON_INT32(12)), NULL);
        for (int st = 1; st <= NSTATIONS; st++)
            m.present[st][3] = m.present[st][12] = false;
        write_many(&e, db, "w", false, BCON_NEW("i", BCON_INT32(5)),
                   BCON_NEW("$set", "{", "v", BCON_DOUBLE(99.5), "}"));
        for (int st = 1; st <= NSTATIONS; st++)
            m.v[st][5] = 99.5;
    }
    ck_assert(denv_wait_caught_up(&e, 60));
    expect(qtable, &m);
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM oplog2pg.dead_letter WHERE service = '%s'", e.service);
    ck_assert_int_eq(denv_pg_int(sql), 0);
    denv_stop(&e);
}

/* One server version's case, default or typed columns. A real server writes its own version's shapes: against one,
 * only the 7.0 cases run. */
static void version_case(const char *format, const char *name, bool typed)
{
    if (!denv_using_sim() && strcmp(format, "7.0") != 0)
        SKIP_TEST("a real server writes its own version's shapes (the 7.0 case runs against it)");
    formats_case(format, name, typed);
}

START_TEST(test_ts_format_50)
{
    version_case("5.0", "tsf5", false);
}
END_TEST

START_TEST(test_ts_format_70)
{
    version_case("7.0", "tsf7", false);
}
END_TEST

START_TEST(test_ts_format_80)
{
    version_case("8.0", "tsf8", false);
}
END_TEST

/* The same writes into the table of a typed map: the columns it names, the rest in extra. */
START_TEST(test_ts_typed_50)
{
    version_case("5.0", "tst5", true);
}
END_TEST

START_TEST(test_ts_typed_70)
{
    version_case("7.0", "tst7", true);
}
END_TEST

START_TEST(test_ts_typed_80)
{
    version_case("8.0", "tst8", true);
}
END_TEST

/* ---- the real mongo-tools dump, through the sink ---- */

#define TSDIR "tests/vectors/timeseries/"

/* Decodes one oplog entry as the oplog reader does (buckets kept) and applies its ops to the sink. */
static void apply_entry(sink *s, const bson_t *entry)
{
    op_entry e;
    char err[512];
    ck_assert_msg(decode_entry_ex(entry, DECODE_KEEP_SYSTEM, &e, err, sizeof err) == DECODE_OK, "%s", err);
    for (size_t i = 0; i < e.n; i++) {
        ck_assert(e.ops[i].bucket);
        ck_assert_msg(sink_apply_bucket(s, &e.ops[i]) == APPLY_OK, "%s", sink_error(s));
    }
    op_entry_clear(&e);
}

/* mongo-tools' dump of a 5.0 time-series collection taken while measurements were written (tests/vectors/timeseries/
 * SOURCES.md): its 10 buckets written as the oplog inserts them, then its 872 `$v:2` updates (two of them already in
 * the dump) applied by the sink as tailing applies them, committed in groups: the table holds exactly the 2 164
 * measurements expected.py computes on its own, each in its place, with its time, _id and value. */
START_TEST(test_ts_real_dump)
{
    const char *service = "rep_tsdump";
    char sql[600];
    denv_pg_exec("DROP SCHEMA IF EXISTS timeseries_test CASCADE");
    snprintf(sql, sizeof sql,
             "DO $$ BEGIN IF to_regclass('oplog2pg.checkpoint') IS NOT NULL THEN DELETE FROM oplog2pg.checkpoint "
             "WHERE service = '%s'; DELETE FROM oplog2pg.tables WHERE service = '%s'; DELETE FROM "
             "oplog2pg.timeseries WHERE schema_name = 'timeseries_test'; DELETE FROM oplog2pg.timeseries_bucket WHERE "
             "schema_name = 'timeseries_test'; END IF; END $$",
             service, service);
    denv_pg_exec(sql);
    sink_config cfg = {.conninfo = denv_pg_conninfo(), .service = service};
    sink *s = sink_new(&cfg);
    ck_assert_ptr_nonnull(s);
    ck_assert_msg(sink_connect(s) == APPLY_OK, "connect: %s", sink_error(s));

    /* the collection's create (foo_ts.metadata.json: timeField ts, metaField meta), then its buckets' inserts */
    uint32_t inc = 1;
    op_pos pos = {.secs = 1623711500, .inc = inc, .term = 1};
    bson_t *create = BCON_NEW("ts", BCON_TIMESTAMP(pos.secs, inc), "t", BCON_INT64(1), "op", "c", "ns",
                              "timeseries_test.$cmd", "o", "{", "create", "system.buckets.foo_ts", "timeseries", "{",
                              "timeField", "ts", "metaField", "meta", "granularity", "seconds", "}", "}");
    apply_entry(s, create);
    bson_destroy(create);
    bson_error_t berr;
    bson_reader_t *rd = bson_reader_new_from_file(TSDIR "mongo-tools_ts_dump_with_oplog.buckets.bson", &berr);
    ck_assert_msg(rd != NULL, "%s", berr.message);
    const bson_t *b;
    bool eof = false;
    int nb = 0;
    while ((b = bson_reader_read(rd, &eof)) != NULL) {
        bson_t *ins = BCON_NEW("ts", BCON_TIMESTAMP(pos.secs, ++inc), "t", BCON_INT64(1), "op", "i", "ns",
                               "timeseries_test.system.buckets.foo_ts", "o", BCON_DOCUMENT(b));
        apply_entry(s, ins);
        bson_destroy(ins);
        nb++;
    }
    ck_assert(eof);
    bson_reader_destroy(rd);
    ck_assert_int_eq(nb, 10);
    pos.inc = inc;
    ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));

    /* the oplog of the dump, as it is (ts, op, ns, o2, o), committed every 100 entries */
    rd = bson_reader_new_from_file(TSDIR "mongo-tools_ts_dump_with_oplog.oplog.bson", &berr);
    ck_assert_msg(rd != NULL, "%s", berr.message);
    int n = 0;
    while ((b = bson_reader_read(rd, &eof)) != NULL) {
        apply_entry(s, b);
        bson_iter_t it;
        ck_assert(bson_iter_init_find(&it, b, "ts"));
        bson_iter_timestamp(&it, &pos.secs, &pos.inc);
        if (++n % 100 == 0)
            ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));
    }
    ck_assert(eof);
    bson_reader_destroy(rd);
    ck_assert_int_eq(n, 872);
    ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));
    sink_free(s);

    /* the expected measurements, loaded beside the table and compared as sets */
    denv_pg_exec("DROP TABLE IF EXISTS public.tsdump_expected; CREATE TABLE public.tsdump_expected (bucket text, pos "
                 "int, ms bigint, hash text, id text, v bigint)");
    FILE *f = fopen(TSDIR "mongo-tools_ts_dump_with_oplog.expected.txt", "r");
    ck_assert_ptr_nonnull(f);
    char line[256];
    int lines = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        char bucket[32], hash[32], id[32];
        int p;
        long long ms, v;
        ck_assert(sscanf(line, "%31s %d %lld %31s %31s %lld", bucket, &p, &ms, hash, id, &v) == 6);
        snprintf(sql, sizeof sql, "INSERT INTO public.tsdump_expected VALUES ('%s', %d, %lld, '%s', '%s', %lld)",
                 bucket, p, ms, hash, id, v);
        denv_pg_exec(sql);
        lines++;
    }
    fclose(f);
    ck_assert_int_eq(lines, 2164);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM timeseries_test.foo_ts"), 2164);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM (SELECT bucket, pos, (extract(epoch FROM \"time\") * 1000)"
                                 "::bigint, doc->'_id'->>'$oid', (doc->>'measurement')::bigint FROM "
                                 "timeseries_test.foo_ts EXCEPT SELECT bucket, pos, ms, id, v FROM "
                                 "public.tsdump_expected) x"),
                     0);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM timeseries_test.foo_ts WHERE doc->'ts' IS NULL OR doc->'meta' "
                                 "IS DISTINCT FROM meta"),
                     0);
    denv_pg_exec("DROP TABLE public.tsdump_expected");
}
END_TEST

/* A viewless time-series collection: a write to its name that is not marked isTimeseries (a server that does not
 * mark them) is refused, never written as a document into the table of measurements. The entries are written here by
 * hand: mongosim marks every write of a viewless collection (its marked writes, the copy and the replay are
 * test_ts_viewless_sim's). */
START_TEST(test_ts_viewless)
{
    const char *service = "rep_tsvl";
    denv_pg_exec("DROP SCHEMA IF EXISTS rep_tsvl_a CASCADE");
    denv_pg_exec("DO $$ BEGIN IF to_regclass('oplog2pg.checkpoint') IS NOT NULL THEN DELETE FROM oplog2pg.checkpoint "
                 "WHERE service = 'rep_tsvl'; DELETE FROM oplog2pg.tables WHERE service = 'rep_tsvl'; DELETE FROM "
                 "oplog2pg.timeseries WHERE schema_name = 'rep_tsvl_a'; END IF; END $$");
    sink_config cfg = {.conninfo = denv_pg_conninfo(), .service = service};
    sink *s = sink_new(&cfg);
    ck_assert_msg(sink_connect(s) == APPLY_OK, "connect: %s", sink_error(s));
    bson_t *create =
        BCON_NEW("ts", BCON_TIMESTAMP(100, 1), "t", BCON_INT64(1), "op", "c", "ns", "rep_tsvl_a.$cmd", "isTimeseries",
                 BCON_BOOL(true), "o", "{", "create", "w", "timeseries", "{", "timeField", "t", "}", "}");
    apply_entry(s, create);
    bson_destroy(create);
    bson_oid_t oid;
    bson_oid_init_from_string(&oid, "65a1b2c3d4e5f60718293a4b");
    bson_t *bucket = BCON_NEW("ts", BCON_TIMESTAMP(100, 2), "t", BCON_INT64(1), "op", "i", "ns", "rep_tsvl_a.w",
                              "isTimeseries", BCON_BOOL(true), "o", "{", "_id", BCON_OID(&oid), "control", "{",
                              "version", BCON_INT32(1), "}", "data", "{", "t", "{", "0", BCON_DATE_TIME(1700000000000),
                              "}", "v", "{", "0", BCON_INT32(7), "}", "}", "}");
    apply_entry(s, bucket);
    bson_destroy(bucket);
    op_pos pos = {.secs = 100, .inc = 2, .term = 1};
    ck_assert_msg(sink_commit(s, &pos) == APPLY_OK, "%s", sink_error(s));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_tsvl_a.w WHERE (doc->>'v')::int = 7 AND \"time\" = "
                                 "to_timestamp(1700000000)"),
                     1);

    /* the same name written without the mark: a document, which that table cannot take (in a later session, as after
     * a restart: within one, the sink knows the table's kind already and stops before asking) */
    sink_free(s);
    s = sink_new(&cfg);
    ck_assert_msg(sink_connect(s) == APPLY_OK, "connect: %s", sink_error(s));
    bson_t *doc = BCON_NEW("ts", BCON_TIMESTAMP(100, 3), "t", BCON_INT64(1), "op", "i", "ns", "rep_tsvl_a.w", "o", "{",
                           "_id", BCON_INT32(1), "}");
    op_entry e;
    char err[256];
    ck_assert(decode_entry_ex(doc, DECODE_KEEP_SYSTEM, &e, err, sizeof err) == DECODE_OK);
    ck_assert(ejson_prepare_entry(&e));
    ck_assert(!e.ops[0].bucket);
    sink_batch *run = sink_batch_new();
    ck_assert(sink_batch_take(run, e.ops[0].id_key, e.ops[0].id_key_len, &e.ops[0].json, e.ops[0].json_len));
    pos.inc = 3;
    sink_status st = sink_insert_batch(s, "rep_tsvl_a", "w", run, &pos);
    if (st == APPLY_OK)
        st = sink_commit(s, &pos);
    ck_assert_int_eq(st, APPLY_CONFIG);
    ck_assert_msg(strstr(sink_error(s), "holds the measurements of time-series collection") != NULL, "%s",
                  sink_error(s));
    sink_batch_free(run);
    op_entry_clear(&e);
    bson_destroy(doc);
    sink_free(s);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_tsvl_a.w"), 1);
}
END_TEST

/* A viewless time-series collection (mongosim --timeseries-viewless: its buckets under its own name, the writes
 * marked isTimeseries, the 8.0 bucket shapes): the initial copy lists it (listCollections type "timeseries" with a
 * UUID, no system.buckets.w) and reads its buckets with rawData, the measurements written before and during the
 * copy all arrive once; what is written while tailing (appends, new buckets, a delete of a measurement that
 * re-packs its bucket, an update of one: an applyOps of marked ops) is applied; the drop takes the table. */
START_TEST(test_ts_viewless_sim)
{
    const char *sim_args[] = {
        "--oplog-format", "8.0", "--timeseries-viewless", "--timeseries-bucket-max-count", "8", NULL};
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim's --timeseries-viewless");
    denv e;
    denv_start(&e, "tsw", sim_args, NULL);
    create_ts(&e, "rep_tsw_a", "w");
    insert_measurements(&e, "rep_tsw_a", "w", 1, 0, 29);
    insert_measurements(&e, "rep_tsw_a", "w", 2, 0, 9);
    denv_insert_range(&e, "rep_tsw_a", "plain", 1, 3);
    denv_daemon_start(&e);
    insert_measurements(&e, "rep_tsw_a", "w", 2, 10, 19); /* perhaps while the copy runs */
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.copy_progress WHERE service = 'rep_tsw' AND coll = "
                                 "'system.buckets.w' AND done"),
                     1);
    expect_measurements("rep_tsw_a.w", 1, 0, 29);
    expect_measurements("rep_tsw_a.w", 2, 0, 19);

    insert_measurements(&e, "rep_tsw_a", "w", 1, 30, 39);
    denv_command(&e, "rep_tsw_a",
                 BCON_NEW("delete", "w", "deletes", "[", "{", "q", "{", "i", BCON_INT32(33), "}", "limit",
                          BCON_INT32(0), "}", "]"));
    /* an update of a measurement: its bucket re-packed and a new bucket for it, in one applyOps of marked ops */
    denv_command(&e, "rep_tsw_a",
                 BCON_NEW("update", "w", "updates", "[", "{", "q", "{", "i", BCON_INT32(34), "}", "u", "{", "$set", "{",
                          "v", BCON_DOUBLE(100.0), "}", "}", "}", "]"));
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_tsw_a.w WHERE (meta->>'station')::int = 1"), 39);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_tsw_a.w WHERE (doc->>'i')::int = 34 AND "
                                 "(doc->>'v')::float8 = 100 AND \"time\" = to_timestamp(1700000034)"),
                     1);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_tsw_a.w WHERE (doc->>'i')::int = 33"), 0);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_tsw_a.w r, generate_series(0, 39) AS g(i) WHERE "
                                 "(r.meta->>'station')::int = 1 AND (r.doc->>'i')::int = g.i AND r.\"time\" = "
                                 "to_timestamp(1700000000 + g.i) AND (r.doc->>'v')::float8 = g.i / 4.0"),
                     38);
    expect_measurements("rep_tsw_a.w", 2, 0, 19);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM (SELECT bucket, max(pos) AS top, count(*) AS n FROM "
                                 "rep_tsw_a.w GROUP BY bucket) b WHERE b.top <> b.n - 1"),
                     0);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.timeseries WHERE schema_name = 'rep_tsw_a' AND "
                                 "table_name = 'w' AND time_field = 't' AND meta_field = 'm'"),
                     1);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.timeseries_bucket WHERE schema_name = 'rep_tsw_a'"),
                     denv_pg_int("SELECT count(DISTINCT bucket) FROM rep_tsw_a.w"));
    ck_assert_msg(!table_exists("rep_tsw_a", "system.buckets.w"), "a table for the buckets");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE service = 'rep_tsw'"), 0);
    denv_expect_match(&e); /* the plain collection */

    denv_drop_collection(&e, "rep_tsw_a", "w");
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_msg(!table_exists("rep_tsw_a", "w"), "the dropped collection's table is still there");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.timeseries_bucket WHERE schema_name = 'rep_tsw_a'"), 0);
    denv_stop(&e);
}
END_TEST

/* A server that keeps a time-series collection viewless but does not take rawData (mongosim without
 * --timeseries-viewless answers it 40415, as servers before 8.2 do; the collection is loaded with --data, its
 * options those of a viewless one): the copy stops (exit 5) saying that it could not read the buckets and why,
 * nothing of the collection written and no checkpoint. */
START_TEST(test_ts_viewless_no_rawdata)
{
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim --data");
    char data[300], path[400];
    const char *tmp = getenv("TMPDIR");
    snprintf(data, sizeof data, "%s/tsr-data.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(data));
    snprintf(path, sizeof path, "%s/rep_tsr_a", data);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/rep_tsr_a/w.metadata.json", data);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"options\": {\"clusteredIndex\": true, \"timeseries\": {\"timeField\": \"t\", \"granularity\": "
          "\"seconds\", \"bucketMaxSpanSeconds\": 3600}}}",
          f);
    ck_assert_int_eq(fclose(f), 0);
    bson_oid_t oid;
    bson_oid_init_from_string(&oid, "65a1b2c3d4e5f60718293a4b");
    bson_t *bucket = BCON_NEW("_id", BCON_OID(&oid), "control", "{", "version", BCON_INT32(1), "min", "{", "t",
                              BCON_DATE_TIME(T0_MS), "}", "max", "{", "t", BCON_DATE_TIME(T0_MS), "}", "}", "data", "{",
                              "t", "{", "0", BCON_DATE_TIME(T0_MS), "}", "v", "{", "0", BCON_INT32(7), "}", "}");
    snprintf(path, sizeof path, "%s/rep_tsr_a/w.bson", data);
    f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bson_get_data(bucket), 1, bucket->len, f), bucket->len);
    ck_assert_int_eq(fclose(f), 0);
    bson_destroy(bucket);

    const char *sim_args[] = {"--oplog-format", "8.0", "--data", data, NULL};
    denv e;
    denv_start(&e, "tsr", sim_args, NULL);
    denv_daemon_start(&e);
    ck_assert_msg(proc_wait(&e.daemon, 60), "the daemon did not stop");
    ck_assert_int_eq(proc_exit_code(&e.daemon), EXIT_UNSUPPORTED);
    e.daemon.pid = 0;
    ck_assert_msg(denv_file_contains(e.log, "reading the buckets of viewless time-series collection rep_tsr_a.w with "
                                            "rawData: true, which MongoDB refused"),
                  "the log does not say why");
    ck_assert_msg(denv_file_contains(e.log, "rawData' is an unknown field"), "the log does not give the refusal");
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), 0);
    if (table_exists("rep_tsr_a", "w")) /* made before the read, perhaps: then empty */
        ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_tsr_a.w"), 0);
    denv_stop(&e);
}
END_TEST

/* A measurement PostgreSQL refuses (a trigger raising, SQLSTATE P0001): its bucket change is set aside as a dead
 * letter, the bucket's document is forgotten, so its next appends are set aside too (never applied to a document
 * that lacks what was set aside); the next bucket, and the other stations, arrive whole; nothing stops. */
START_TEST(test_ts_dead_letters)
{
    const char *sim_args[] = {"--timeseries-bucket-max-count", "8", NULL};
    denv e;
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim's --timeseries-bucket-max-count");
    denv_start(&e, "tsd", sim_args, NULL);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    create_ts(&e, "rep_tsd_a", "w");
    insert_one_measurement(&e, "rep_tsd_a", "w", 2, 0, T0_MS);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_pg_exec("CREATE FUNCTION rep_tsd_a.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION "
                 "'no 13 here'; END $$; CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON rep_tsd_a.w FOR EACH ROW "
                 "WHEN ((NEW.doc->>'i')::int = 13 AND (NEW.meta->>'station')::int = 1) EXECUTE FUNCTION "
                 "rep_tsd_a.refuse()");
    for (int i = 0; i < 24; i++) {
        insert_one_measurement(&e, "rep_tsd_a", "w", 1, i, T0_MS + (int64_t)i * 1000);
        if (i > 0)
            insert_one_measurement(&e, "rep_tsd_a", "w", 2, i, T0_MS + (int64_t)i * 1000);
    }
    ck_assert(denv_wait_caught_up(&e, 120));
    /* station 1's buckets hold places 0-7, 8-15, 16-23: the second one's change for 13 is refused, its appends after
     * it are set aside (its document is unknown), and so is its compression when it closes (7.0: the bucket
     * rewritten whole, 13 with it, refused again); the third bucket arrives whole */
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_tsd_a.w WHERE (meta->>'station')::int = 1"), 21);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_tsd_a.w WHERE (meta->>'station')::int = 1 AND "
                                 "(doc->>'i')::int IN (13, 14, 15)"),
                     0);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_tsd_a.w WHERE (meta->>'station')::int = 2"), 24);
    char dl[4000];
    denv_pg_text(
        "SELECT string_agg(ts_sec || ':' || ts_inc || ' ' || op || ' ' || left(error, 200), E'\\n' ORDER BY id) "
        "FROM oplog2pg.dead_letter WHERE service = 'rep_tsd'",
        dl, sizeof dl);
    ck_assert_msg(denv_pg_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE service = 'rep_tsd'") == 4, "%s", dl);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE service = 'rep_tsd' AND error "
                                 "LIKE '%no 13 here%'"),
                     2);
    ck_assert_msg(denv_pg_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE service = 'rep_tsd' AND error LIKE "
                              "'%an earlier change of it was set aside%'") == 2,
                  "%s", dl);
    denv_stop(&e);
}
END_TEST

/* With a change stream for source, a time-series collection is left out of the initial copy, with a notice: the
 * stream never shows its buckets, so its table could not be kept current. */
START_TEST(test_ts_stream_copy_leaves_out)
{
    denv e;
    denv_start(&e, "tsx", NULL, "\n[mongodb]\nsource = change_stream\n");
    create_ts(&e, "rep_tsx_a", "w");
    insert_measurements(&e, "rep_tsx_a", "w", 1, 0, 4);
    denv_insert_range(&e, "rep_tsx_a", "plain", 1, 3);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_msg(!table_exists("rep_tsx_a", "w"), "a table for a time-series collection a stream cannot follow");
    ck_assert_msg(denv_file_contains(e.log, "time-series collection rep_tsx_a.w is not copied"), "no notice");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_tsx_a.plain"), 3);
    denv_stop(&e);
}
END_TEST

/* A typed map with the initial copy: the buckets there before the start become typed rows (and a bucket read again
 * after a stop is upserted, not refused), what arrives while tailing too; a measurement whose value the column
 * cannot take (on_type_error = dead_letter) sets its bucket change aside, nothing else; one with on_type_error =
 * null keeps its row with NULL there. */
START_TEST(test_ts_typed_copy)
{
    denv e;
    char map[600];
    snprintf(map, sizeof map,
             "\n[map rep_tsy_a.w]\ntable = typed.weather\nrest = doc\ncolumn.station = integer from m.station\n"
             "column.i = integer\ncolumn.v = double precision\ncolumn.note = integer on_type_error=null\n");
    denv_start(&e, "tsy", NULL, map);
    create_ts(&e, "rep_tsy_a", "w");
    insert_measurements(&e, "rep_tsy_a", "w", 1, 0, 29);
    insert_measurements(&e, "rep_tsy_a", "w", 2, 0, 9);
    denv_daemon_start(&e);
    insert_measurements(&e, "rep_tsy_a", "w", 2, 10, 19); /* perhaps while the copy runs */
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.copy_progress WHERE service = 'rep_tsy' AND coll = "
                                 "'system.buckets.w' AND done"),
                     1);
    /* a station whose value is a string: a dead letter for its bucket's insert; a note that is text: NULL */
    mongoc_client_t *c = mongoc_client_new(e.uri);
    mongoc_collection_t *col = mongoc_client_get_collection(c, "rep_tsy_a", "w");
    bson_error_t err;
    bson_t *bad = BCON_NEW("t", BCON_DATE_TIME(T0_MS), "m", "{", "station", BCON_INT32(3), "kind", "temp", "}", "i",
                           BCON_INT32(0), "v", "hot");
    bson_t *odd = BCON_NEW("t", BCON_DATE_TIME(T0_MS), "m", "{", "station", BCON_INT32(4), "kind", "temp", "}", "i",
                           BCON_INT32(0), "v", BCON_DOUBLE(1.5), "note", "not a number");
    ck_assert_msg(mongoc_collection_insert_one(col, bad, NULL, NULL, &err), "%s", err.message);
    ck_assert_msg(mongoc_collection_insert_one(col, odd, NULL, NULL, &err), "%s", err.message);
    bson_destroy(bad);
    bson_destroy(odd);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
    insert_measurements(&e, "rep_tsy_a", "w", 1, 30, 39);
    ck_assert(denv_wait_caught_up(&e, 60));

    for (int st = 1; st <= 2; st++) {
        char sql[600];
        int top = st == 1 ? 39 : 19;
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM typed.weather r, generate_series(0, %d) AS g(i) WHERE r.station = %d AND "
                 "r.i = g.i AND r.v = g.i / 4.0 AND r.\"time\" = to_timestamp(%lld + g.i) AND r.doc->>'i' = g.i::text "
                 "AND r.\"_id\" LIKE '{\"$oid\": %%' AND r.note IS NULL",
                 top, st, T0_MS / 1000);
        ck_assert_int_eq(denv_pg_int(sql), top + 1);
        snprintf(sql, sizeof sql, "SELECT count(*) FROM typed.weather WHERE station = %d", st);
        ck_assert_int_eq(denv_pg_int(sql), top + 1);
    }
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM typed.weather WHERE station = 3"), 0);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM typed.weather WHERE station = 4 AND v = 1.5 AND note IS NULL "
                                 "AND doc->>'note' = 'not a number'"),
                     1);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE service = 'rep_tsy' AND error LIKE "
                                 "'%column \"v\"%'"),
                     1);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE service = 'rep_tsy'"), 1);
    ck_assert_msg(!table_exists("rep_tsy_a", "w"), "the default table was made beside the map's");

    /* the copy again (--reimport): the buckets read again make the same rows */
    ck_assert_msg(proc_stop(&e.daemon, 30), "the daemon did not stop on SIGTERM");
    e.daemon.pid = 0;
    const char *reimport[] = {"--reimport", NULL};
    denv_daemon_start_args(&e, reimport, NULL);
    ck_assert_msg(denv_wait_log(&e, "initial copy complete", 60), "the new copy did not complete");
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM typed.weather WHERE station IN (1, 2)"), 60);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM typed.weather WHERE station = 4"), 1);
    denv_stop(&e);
}
END_TEST

/* What a typed map of a time-series collection cannot say stops the daemon with exit 3 and the reason, nothing
 * written: a child table, a column named as one of the table's own (bucket, pos, time); and a table made for the
 * default columns does not take a map's without a new copy. */
static void refused_case(const char *name, const char *map_lines, const char *needle)
{
    denv e;
    char ini[600], db[64];
    snprintf(db, sizeof db, "rep_%s_a", name);
    snprintf(ini, sizeof ini, "\n[map %s.w]\n%s", db, map_lines);
    denv_start(&e, name, NULL, ini);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    uint64_t before = denv_checkpoint_ts(e.service);
    create_ts(&e, db, "w");
    insert_measurements(&e, db, "w", 1, 0, 2);
    ck_assert_msg(proc_wait(&e.daemon, 60), "the daemon did not stop");
    ck_assert_int_eq(proc_exit_code(&e.daemon), EXIT_CONFIG);
    e.daemon.pid = 0;
    ck_assert_msg(denv_file_contains(e.log, needle), "the log does not say why (%s)", needle);
    ck_assert_msg(denv_checkpoint_ts(e.service) == before, "the checkpoint moved past the refused create");
    ck_assert_msg(!table_exists(db, "w"), "a table for the refused collection");
    denv_stop(&e);
}

START_TEST(test_ts_typed_refused)
{
    refused_case("tsm",
                 "column.v = double precision\nchild.items = w_items\n[child rep_tsm_a.w_items]\n"
                 "column.x = integer\n",
                 "declares a child table (child.items)");
    refused_case("tsn", "column.time = timestamptz from t\n", "its map names a column time");
}
END_TEST

/* Measurements 0..2 of station 1 in DB.w, tailed, then the daemon stopped by SIGTERM. */
static void three_then_stop(denv *e, const char *name, const char *db)
{
    denv_start(e, name, NULL, NULL);
    denv_daemon_start(e);
    ck_assert(denv_wait_caught_up(e, 60));
    create_ts(e, db, "w");
    insert_measurements(e, db, "w", 1, 0, 2);
    ck_assert(denv_wait_caught_up(e, 60));
    ck_assert_msg(proc_stop(&e->daemon, 30), "the daemon did not stop on SIGTERM");
    e->daemon.pid = 0;
}

/* The daemon started again, measurements 3..4 inserted: it stops with exit 3 saying `needle`, and nothing moved. */
static void next_two_stop(denv *e, const char *db, const char *needle)
{
    denv_daemon_start(e);
    uint64_t before = denv_checkpoint_ts(e->service);
    insert_measurements(e, db, "w", 1, 3, 4);
    ck_assert_msg(proc_wait(&e->daemon, 60), "the daemon did not stop");
    ck_assert_int_eq(proc_exit_code(&e->daemon), EXIT_CONFIG);
    e->daemon.pid = 0;
    ck_assert_msg(denv_file_contains(e->log, needle), "the log does not say why (%s)", needle);
    ck_assert_msg(denv_checkpoint_ts(e->service) == before, "the checkpoint moved");
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.w", db);
    ck_assert_int_eq(denv_pg_int(sql), 3);
}

START_TEST(test_ts_typed_shape_changed)
{
    denv e;
    three_then_stop(&e, "tso", "rep_tso_a");
    /* the same collection with a map now: its table has the default columns (doc NOT NULL) */
    FILE *f = fopen(e.ini, "a");
    ck_assert_ptr_nonnull(f);
    fputs("\n[map rep_tso_a.w]\nrest = drop\ncolumn.v = double precision\n", f);
    fclose(f);
    next_two_stop(&e, "rep_tso_a", "was made for other columns than its map gives it now");
    /* a new copy makes the table again, with the map's columns */
    const char *reimport[] = {"--reimport", NULL};
    denv_daemon_start_args(&e, reimport, NULL);
    ck_assert_msg(denv_wait_log(&e, "initial copy complete", 60), "the new copy did not complete");
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_tso_a.w WHERE v IS NOT NULL"), 5);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM information_schema.columns WHERE table_schema = 'rep_tso_a' "
                                 "AND table_name = 'w' AND column_name IN ('doc', 'meta')"),
                     0);
    denv_stop(&e);
}
END_TEST

/* A kept bucket document is read back once and checked then (later changes trust it): one that is not BSON (only a
 * person could have written it) stops the daemon, with the table named, and nothing moves. */
START_TEST(test_ts_kept_document_checked)
{
    denv e;
    three_then_stop(&e, "tsv", "rep_tsv_a");
    ck_assert_int_eq(
        denv_pg_int("WITH u AS (UPDATE oplog2pg.timeseries_bucket SET doc = '\\x0900000002610000ff'::bytea "
                    "WHERE schema_name = 'rep_tsv_a' RETURNING 1) SELECT count(*) FROM u"),
        1);
    /* appends: changes of the bucket kept */
    next_two_stop(&e, "rep_tsv_a", "in oplog2pg.timeseries_bucket is not valid BSON");
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM oplog2pg.dead_letter WHERE service = '%s'", e.service);
    ck_assert_int_eq(denv_pg_int(sql), 0);
    denv_stop(&e);
}
END_TEST

Suite *timeseries_suite(void); /* called by the generated runner list */

Suite *timeseries_suite(void)
{
    Suite *s = suite_create("timeseries");
    TCase *tc = tcase_create("timeseries");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_ts_tail_and_drop);
    tcase_add_test(tc, test_ts_kill9);
    tcase_add_test(tc, test_ts_copy);
    tcase_add_test(tc, test_ts_status_and_metrics);
    tcase_add_test(tc, test_ts_format_50);
    tcase_add_test(tc, test_ts_format_70);
    tcase_add_test(tc, test_ts_format_80);
    tcase_add_test(tc, test_ts_real_dump);
    tcase_add_test(tc, test_ts_viewless);
    tcase_add_test(tc, test_ts_dead_letters);
    tcase_add_test(tc, test_ts_stream_copy_leaves_out);
    tcase_add_test(tc, test_ts_typed_50);
    tcase_add_test(tc, test_ts_typed_70);
    tcase_add_test(tc, test_ts_typed_80);
    tcase_add_test(tc, test_ts_typed_copy);
    tcase_add_test(tc, test_ts_typed_refused);
    tcase_add_test(tc, test_ts_typed_shape_changed);
    tcase_add_test(tc, test_ts_kept_document_checked);
    tcase_add_test(tc, test_ts_copy_dropped_while_down);
    suite_add_tcase(s, tc);
    /* viewless time-series collections (mongosim --timeseries-viewless) */
    TCase *vl = tcase_create("viewless");
    tcase_set_timeout(vl, 240);
    tcase_add_test(vl, test_ts_viewless_sim);
    tcase_add_test(vl, test_ts_viewless_no_rawdata);
    suite_add_tcase(s, vl);
    return s;
}

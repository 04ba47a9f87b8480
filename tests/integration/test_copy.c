/*
 * test_copy.c — the initial copy engine (source/copy.h) against its own mongosim and the throwaway PostgreSQL:
 * a large copy (1 000 000 documents over 4 collections, one with mixed _id types) compared with the source; cancel
 * and resume without recopying; the oplog window guard before a resume and during a copy; copy_reset; the progress
 * that copy_state_read reports; documents PostgreSQL refuses (set aside, the rest copied); a worker reading the
 * next batch while the one before is written; and mongosim's find min/hint, which the resume relies on.
 *
 * Each test starts its own mongosim (so its oplog is its own) and uses its own service name and database prefix.
 * Env COPY_TEST_DOCS overrides the large test's document count and COPY_TEST_WORKERS its worker count (for
 * measuring); the rates are printed.
 */
#include <check.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../lib/compare.h"
#include "../lib/daemonenv.h"
#include "../lib/proc.h"
#include "../lib/workload.h"
#include "copy/copy.h"
#include "core/nsfilter.h"
#include "source/oplog_edge.h"

typedef struct {
    proc_handle sim;
    char uri[256];
    char dir[256];
    char service[64];
    char prefix[32];
} env;

static const char *pg_conninfo(void)
{
    const char *c = getenv("OPLOG2PG_TEST_PG");
    ck_assert_msg(c != NULL, "OPLOG2PG_TEST_PG is not set: run through scripts/with-pg.sh");
    return c;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void env_dir(env *e, const char *name)
{
    memset(e, 0, sizeof *e);
    const char *tmp = getenv("TMPDIR");
    snprintf(e->dir, sizeof e->dir, "%s/oplog2pg-copy-%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
    ck_assert_ptr_nonnull(mkdtemp(e->dir));
    snprintf(e->service, sizeof e->service, "copy_%s", name);
    snprintf(e->prefix, sizeof e->prefix, "cp_%s_", name);
    mongoc_init();
}

static void env_sim(env *e, const char *const *args)
{
    char err[512], simlog[300];
    snprintf(simlog, sizeof simlog, "%s/mongosim.log", e->dir);
    ck_assert_msg(proc_start_mongosim(args, simlog, &e->sim, err, sizeof err), "%s", err);
    snprintf(e->uri, sizeof e->uri, "mongodb://127.0.0.1:%d/?replicaSet=rs0", e->sim.port);
}

static void env_stop(env *e)
{
    proc_stop(&e->sim, 5);
}

static PGconn *pg_open(void)
{
    PGconn *pg = PQconnectdb(pg_conninfo());
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    return pg;
}

static long long pg_ll(PGconn *pg, const char *sql)
{
    PGresult *r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1, "%s: %s", sql, PQerrorMessage(pg));
    long long v = PQgetisnull(r, 0, 0) ? -1 : atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

static void pg_do(PGconn *pg, const char *sql)
{
    PGresult *r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql,
                  PQerrorMessage(pg));
    PQclear(r);
}

/* Removes what an earlier run of the same test left in PostgreSQL (state and tables under the prefix). */
static void pg_clean(const env *e)
{
    char err[512], pat[64];
    snprintf(pat, sizeof pat, "%s*.*", e->prefix);
    const char *inc[] = {pat, NULL};
    nsfilter *f = nsfilter_new(inc, NULL, err, sizeof err);
    ck_assert_msg(f, "%s", err);
    ck_assert_msg(copy_reset(pg_conninfo(), e->service, f, true, err, sizeof err), "%s", err);
    nsfilter_free(f);
}

static void expect_match(const env *e)
{
    PGconn *pg = pg_open();
    compare_options o = {.db_prefix = e->prefix};
    compare_report rep;
    char err[512];
    bool ran = compare_all(e->uri, pg, &o, &rep, err, sizeof err);
    if (ran && !rep.match)
        compare_report_print(&rep, stderr, false);
    bool match = ran && rep.match;
    int64_t rows = rep.source_rows;
    compare_report_free(&rep);
    PQfinish(pg);
    ck_assert_msg(ran, "compare: %s", err);
    ck_assert_msg(match, "PostgreSQL differs from the source (see above)");
    ck_assert_int_gt(rows, 0);
}

static void mongo_cmd(const char *uri, bson_t *cmd)
{
    mongoc_client_t *c = mongoc_client_new(uri);
    bson_error_t err;
    bson_t reply;
    bool ok = mongoc_client_command_simple(c, "admin", cmd, NULL, &reply, &err);
    bson_destroy(&reply);
    mongoc_client_destroy(c);
    bson_destroy(cmd);
    ck_assert_msg(ok, "command: %s", err.message);
}

static void insert_marker(const char *uri, const char *db, const char *coll)
{
    mongoc_client_t *c = mongoc_client_new(uri);
    mongoc_collection_t *co = mongoc_client_get_collection(c, db, coll);
    bson_t *doc = BCON_NEW("marker", BCON_BOOL(true));
    bson_error_t err;
    bool ok = mongoc_collection_insert_one(co, doc, NULL, NULL, &err);
    bson_destroy(doc);
    mongoc_collection_destroy(co);
    mongoc_client_destroy(c);
    ck_assert_msg(ok, "insert: %s", err.message);
}

/* The newest oplog ts as (secs, inc). */
static void newest_ts(const char *uri, uint32_t *secs, uint32_t *inc)
{
    mongoc_client_t *c = mongoc_client_new(uri);
    op_pos p = {0, 0, -1};
    bool found = false;
    char err[512];
    bool ok = oplog_edge(c, -1, &p, &found, err, sizeof err);
    mongoc_client_destroy(c);
    ck_assert_msg(ok && found, "reading the newest oplog entry: %s", ok ? "the oplog is empty" : err);
    *secs = p.secs;
    *inc = p.inc;
}

static void fill_workload(const env *e, uint64_t ops, uint64_t seed)
{
    workload_config wc;
    workload_config_init(&wc);
    wc.seed = seed;
    wc.ops = ops;
    wc.db_prefix = e->prefix;
    wc.n_databases = 2;
    wc.n_namespaces = 4;
    wc.mode = WORKLOAD_INSERT_ONLY;
    workload_stats st;
    char err[512];
    ck_assert_msg(workload_run(e->uri, &wc, &st, err, sizeof err), "workload: %s", err);
    ck_assert_uint_eq(st.inserts, ops);
}

static copy_config base_config(const env *e)
{
    copy_config c = {
        .mongo_uri = e->uri,
        .pg_conninfo = pg_conninfo(),
        .service = e->service,
        .workers = 2,
        .batch_docs = 1000,
        .window_warn_ms = 0,
        .progress_interval_ms = 0,
    };
    return c;
}

/* Documents inserted, over the test's tables, as the server's statistics count them (flushed at backend exit). */
static long long pg_inserted(const env *e)
{
    PGconn *pg = pg_open();
    char sql[300];
    snprintf(sql, sizeof sql,
             "SELECT COALESCE(sum(n_tup_ins), 0) FROM pg_stat_user_tables WHERE schemaname LIKE '%s%%'", e->prefix);
    long long n = pg_ll(pg, sql);
    PQfinish(pg);
    return n;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* the large copy */

/* Writes DIR/<db>/<coll>.bson (mongodump layout) with n documents; mixed: _ids of four types. */
static void write_coll(const char *dir, const char *db, const char *coll, long n, bool mixed)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, db);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s.bson", dir, db, coll);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    char buf[64];
    for (long i = 0; i < n; i++) {
        bson_t d = BSON_INITIALIZER;
        int kind = mixed ? (int)(i % 4) : 0;
        if (kind == 0) {
            BSON_APPEND_INT32(&d, "_id", (int32_t)i);
        } else if (kind == 1) {
            snprintf(buf, sizeof buf, "s%09ld", i);
            BSON_APPEND_UTF8(&d, "_id", buf);
        } else if (kind == 2) {
            uint8_t raw[12] = {0x65, 0x00, 0x00, 0x01};
            for (int k = 0; k < 8; k++)
                raw[4 + k] = (uint8_t)(i >> (8 * (7 - k)));
            bson_oid_t oid;
            bson_oid_init_from_data(&oid, raw);
            BSON_APPEND_OID(&d, "_id", &oid);
        } else {
            BSON_APPEND_DOUBLE(&d, "_id", (double)i + 0.5);
        }
        BSON_APPEND_INT64(&d, "n", i);
        snprintf(buf, sizeof buf, "item %ld of %s", i, coll);
        BSON_APPEND_UTF8(&d, "name", buf);
        BSON_APPEND_DOUBLE(&d, "price", (double)(i % 1000) / 100.0);
        bson_t sub;
        BSON_APPEND_DOCUMENT_BEGIN(&d, "nested", &sub);
        BSON_APPEND_BOOL(&sub, "even", i % 2 == 0);
        BSON_APPEND_DATE_TIME(&sub, "at", 1700000000000LL + i);
        bson_append_document_end(&d, &sub);
        BSON_APPEND_ARRAY_BEGIN(&d, "tags", &sub);
        BSON_APPEND_UTF8(&sub, "0", "a");
        BSON_APPEND_INT32(&sub, "1", (int32_t)(i % 7));
        bson_append_array_end(&d, &sub);
        ck_assert_uint_eq(fwrite(bson_get_data(&d), 1, d.len, f), d.len);
        bson_destroy(&d);
    }
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(test_copy_large)
{
    env e;
    env_dir(&e, "big");
    long total = getenv("COPY_TEST_DOCS") ? atol(getenv("COPY_TEST_DOCS")) : denv_scaled(1000000);
    int workers = getenv("COPY_TEST_WORKERS") ? atoi(getenv("COPY_TEST_WORKERS")) : 3;
    char data[300];
    snprintf(data, sizeof data, "%s/data", e.dir);
    ck_assert_int_eq(mkdir(data, 0755), 0);
    char db0[64], db1[64];
    snprintf(db0, sizeof db0, "%s0", e.prefix);
    snprintf(db1, sizeof db1, "%s1", e.prefix);
    /* Uneven sizes, so the workers finish at different times and pick up the next collection. */
    write_coll(data, db0, "orders", total * 4 / 10, false);
    write_coll(data, db0, "mixed", total * 3 / 10, true);
    write_coll(data, db1, "users", total * 2 / 10, false);
    write_coll(data, db1, "events", total - total * 9 / 10, false);
    const char *args[] = {"--data", data, NULL};
    env_sim(&e, args);
    insert_marker(e.uri, "cp_seed", "start"); /* --data writes no oplog entry: give the copy a start position */
    pg_clean(&e);

    char pat[64], err[2048];
    snprintf(pat, sizeof pat, "%s*.*", e.prefix);
    const char *inc[] = {pat, NULL};
    nsfilter *f = nsfilter_new(inc, NULL, err, sizeof err);
    ck_assert_msg(f, "%s", err);
    copy_config cfg = base_config(&e);
    cfg.filter = f;
    cfg.workers = workers;
    cfg.batch_docs = 10000;
    cfg.progress_interval_ms = 2000;
    op_pos start;
    double t0 = now_s();
    copy_result r = copy_run(&cfg, &start, err, sizeof err);
    double secs = now_s() - t0;
    ck_assert_msg(r == COPY_DONE, "copy: %s: %s", copy_result_name(r), err);
    fprintf(stderr, "copy_large: %ld documents, %d workers: %.2f s, %.0f docs/s\n", total, workers, secs,
            (double)total / secs);
    uint32_t s, i;
    newest_ts(e.uri, &s, &i);
    ck_assert_uint_eq(start.secs, s);
    ck_assert_uint_eq(start.inc, i);

    copy_state st;
    ck_assert_msg(copy_state_read(pg_conninfo(), e.service, &st, err, sizeof err), "%s", err);
    ck_assert(st.exists && st.finished);
    ck_assert_uint_eq(st.n, 4);
    int64_t sum = 0;
    for (size_t k = 0; k < st.n; k++) {
        ck_assert(st.rows[k].done);
        ck_assert_int_eq(st.rows[k].copied, st.rows[k].total_estimate);
        sum += st.rows[k].copied;
    }
    copy_state_free(&st);
    ck_assert_int_eq(sum, total);

    /* A finished copy is not run again. */
    op_pos again;
    r = copy_run(&cfg, &again, err, sizeof err);
    ck_assert_int_eq(r, COPY_DONE);
    ck_assert_int_eq(op_pos_cmp(&again, &start), 0);

    double c0 = now_s();
    expect_match(&e);
    fprintf(stderr, "copy_large: compare took %.2f s\n", now_s() - c0);
    nsfilter_free(f);
    env_stop(&e);
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* cancel and resume */

typedef struct {
    const env *e;
    atomic_bool *cancel;
    long long after; /* set the flag once this many documents are committed */
} canceller;

static void *cancel_main(void *arg)
{
    canceller *c = arg;
    PGconn *pg = PQconnectdb(pg_conninfo());
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT COALESCE(sum(copied), 0) FROM oplog2pg.copy_progress WHERE service = '%s'",
             c->e->service);
    for (int i = 0; i < 3000 && PQstatus(pg) == CONNECTION_OK; i++) {
        PGresult *r = PQexec(pg, sql);
        long long n = PQresultStatus(r) == PGRES_TUPLES_OK ? atoll(PQgetvalue(r, 0, 0)) : 0;
        PQclear(r);
        if (n >= c->after)
            break;
        usleep(2000);
    }
    atomic_store(c->cancel, true);
    PQfinish(pg);
    return NULL;
}

START_TEST(test_copy_resume)
{
    env e;
    env_dir(&e, "res");
    env_sim(&e, NULL);
    const uint64_t docs = 60000;
    fill_workload(&e, docs, 7);
    pg_clean(&e);
    /* Slow the source a little so the cancel lands in the middle of the copy. */
    mongo_cmd(e.uri, BCON_NEW("mongosimDelay", BCON_INT32(2)));

    atomic_bool cancel;
    atomic_init(&cancel, false);
    copy_config cfg = base_config(&e);
    cfg.cancel = &cancel;
    cfg.batch_docs = 500;
    canceller cc = {.e = &e, .cancel = &cancel, .after = 5000};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, cancel_main, &cc), 0);
    op_pos start;
    char err[2048];
    copy_result r = copy_run(&cfg, &start, err, sizeof err);
    pthread_join(th, NULL);
    ck_assert_msg(r == COPY_CANCELLED, "first run: %s: %s", copy_result_name(r), err);

    copy_state st;
    ck_assert_msg(copy_state_read(pg_conninfo(), e.service, &st, err, sizeof err), "%s", err);
    ck_assert(st.exists);
    ck_assert(!st.finished);
    ck_assert_str_eq(st.finished_at, "");
    ck_assert_uint_eq(st.n, 4);
    int64_t first = 0, estimate = 0;
    size_t unfinished = 0;
    for (size_t k = 0; k < st.n; k++) {
        ck_assert_int_le(st.rows[k].copied, st.rows[k].total_estimate);
        first += st.rows[k].copied;
        estimate += st.rows[k].total_estimate;
        unfinished += !st.rows[k].done;
    }
    copy_state_free(&st);
    ck_assert_int_eq(estimate, (int64_t)docs);
    ck_assert_int_ge(first, 5000);
    ck_assert_int_lt(first, (int64_t)docs);
    ck_assert_uint_gt(unfinished, 0);
    /* The committed progress covers exactly the rows in PostgreSQL. */
    PGconn *pg = pg_open();
    char sql[400];
    long long rows = 0;
    for (int d = 0; d < 2; d++)
        for (int c = 0; c < 4; c++) {
            snprintf(sql, sizeof sql, "SELECT to_regclass('\"%s%d\".\"c%d\"') IS NOT NULL", e.prefix, d, c);
            PGresult *res = PQexec(pg, sql);
            bool have = PQresultStatus(res) == PGRES_TUPLES_OK && PQgetvalue(res, 0, 0)[0] == 't';
            PQclear(res);
            if (!have)
                continue;
            snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s%d\".\"c%d\"", e.prefix, d, c);
            rows += pg_ll(pg, sql);
        }
    PQfinish(pg);
    ck_assert_int_eq(rows, first);

    usleep(200000);
    long long ins1 = pg_inserted(&e);
    mongo_cmd(e.uri, BCON_NEW("mongosimDelay", BCON_INT32(0)));
    atomic_store(&cancel, false);
    r = copy_run(&cfg, &start, err, sizeof err);
    ck_assert_msg(r == COPY_DONE, "second run: %s: %s", copy_result_name(r), err);
    usleep(700000);
    long long ins2 = pg_inserted(&e);
    /* The second run wrote only what the first had not committed. */
    ck_assert_int_eq(ins2 - ins1, (long long)docs - first);

    ck_assert_msg(copy_state_read(pg_conninfo(), e.service, &st, err, sizeof err), "%s", err);
    ck_assert(st.exists && st.finished);
    ck_assert_str_ne(st.finished_at, "");
    int64_t sum = 0;
    for (size_t k = 0; k < st.n; k++) {
        ck_assert(st.rows[k].done);
        sum += st.rows[k].copied;
    }
    copy_state_free(&st);
    ck_assert_int_eq(sum, (int64_t)docs);
    expect_match(&e);
    env_stop(&e);
}
END_TEST

/* A table left by an attempt whose progress was lost: the copy meets existing _ids and upserts. */
START_TEST(test_copy_existing_rows)
{
    env e;
    env_dir(&e, "dup");
    env_sim(&e, NULL);
    fill_workload(&e, 8000, 11);
    pg_clean(&e);
    copy_config cfg = base_config(&e);
    op_pos start;
    char err[2048];
    ck_assert_msg(copy_run(&cfg, &start, err, sizeof err) == COPY_DONE, "%s", err);
    /* Forget the state only, and spoil some rows: the next copy must overwrite them. */
    PGconn *pg = pg_open();
    char sql[300];
    snprintf(sql, sizeof sql, "DELETE FROM oplog2pg.copy_state WHERE service = '%s'", e.service);
    pg_do(pg, sql);
    snprintf(sql, sizeof sql, "UPDATE \"%s0\".\"c0\" SET doc = jsonb_set(doc, '{spoiled}', 'true')", e.prefix);
    pg_do(pg, sql);
    PQfinish(pg);
    ck_assert_msg(copy_run(&cfg, &start, err, sizeof err) == COPY_DONE, "%s", err);
    expect_match(&e);
    env_stop(&e);
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* documents PostgreSQL refuses, and reading while writing */

/* Inserts {_id: id, n: id} for id in [from, to], into db.coll, skipping the validation of the driver (so that a test
 * can store what PostgreSQL refuses); `bad` (may be NULL) is a string field added to the documents whose _id is in
 * `bad_ids` (0-terminated). */
static void insert_docs(const char *uri, const char *db, const char *coll, int from, int to, const int *bad_ids,
                        const char *bad, size_t bad_len)
{
    mongoc_client_t *c = mongoc_client_new(uri);
    mongoc_collection_t *co = mongoc_client_get_collection(c, db, coll);
    bson_t *opts = BCON_NEW("validate", BCON_BOOL(false));
    bson_error_t err;
    for (int lo = from; lo <= to; lo += 500) {
        mongoc_bulk_operation_t *bulk = mongoc_collection_create_bulk_operation_with_opts(co, NULL);
        for (int id = lo; id <= to && id < lo + 500; id++) {
            bson_t d = BSON_INITIALIZER;
            BSON_APPEND_INT32(&d, "_id", id);
            BSON_APPEND_INT32(&d, "n", id);
            for (const int *b = bad_ids; b != NULL && *b != 0; b++)
                if (*b == id)
                    bson_append_utf8(&d, "bad", 3, bad, (int)bad_len);
            ck_assert(mongoc_bulk_operation_insert_with_opts(bulk, &d, opts, &err));
            bson_destroy(&d);
        }
        bson_t reply;
        bool ok = mongoc_bulk_operation_execute(bulk, &reply, &err) != 0;
        bson_destroy(&reply);
        mongoc_bulk_operation_destroy(bulk);
        ck_assert_msg(ok, "insert: %s", err.message);
    }
    bson_destroy(opts);
    mongoc_collection_destroy(co);
    mongoc_client_destroy(c);
}

static copy_config one_db_config(const env *e, nsfilter **f)
{
    char pat[64], err[512];
    snprintf(pat, sizeof pat, "%s*.*", e->prefix);
    const char *inc[] = {pat, NULL};
    *f = nsfilter_new(inc, NULL, err, sizeof err);
    ck_assert_msg(*f, "%s", err);
    copy_config cfg = base_config(e);
    cfg.filter = *f;
    return cfg;
}

/* Documents PostgreSQL refuses (a string holding U+0000, which jsonb cannot store) in the first batch, in the
 * middle and in the last one, and one whose text cannot be made (a string that is not UTF-8): each is set aside in
 * oplog2pg.dead_letter and everything else is copied, while the next batch is already being read when a batch fails
 * (the batches read after a failed one are read again). */
START_TEST(test_copy_refused_rows)
{
    env e;
    env_dir(&e, "ref");
    env_sim(&e, NULL);
    char db[64];
    snprintf(db, sizeof db, "%s0", e.prefix);
    static const int nul_ids[] = {3, 1234, 2999, 0}, utf8_ids[] = {2000, 0};
    insert_docs(e.uri, db, "c", 1, 3000, nul_ids, "a\0b", 3);
    insert_docs(e.uri, db, "d", 1, 2500, utf8_ids, "\xff\xfe", 2);
    insert_marker(e.uri, "cp_seed", "start");
    pg_clean(&e);
    PGconn *pg = pg_open();
    char sql[400];
    snprintf(sql, sizeof sql, "DELETE FROM oplog2pg.dead_letter WHERE service = '%s'", e.service);
    pg_do(pg, sql);

    nsfilter *f;
    copy_config cfg = one_db_config(&e, &f);
    cfg.workers = 2;
    cfg.batch_docs = 200;
    op_pos start;
    char err[2048];
    copy_result r = copy_run(&cfg, &start, err, sizeof err);
    ck_assert_msg(r == COPY_DONE, "copy: %s: %s", copy_result_name(r), err);

    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\".c", db);
    ck_assert_int_eq(pg_ll(pg, sql), 3000 - 3);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\".d", db);
    ck_assert_int_eq(pg_ll(pg, sql), 2500 - 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\".c WHERE _id IN ('3', '1234', '2999')", db);
    ck_assert_int_eq(pg_ll(pg, sql), 0);
    /* Set aside once each, with PostgreSQL's reason (22P05) or the text's. */
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM oplog2pg.dead_letter WHERE service = '%s' AND db = '%s' AND coll = 'c' AND op = 'i' "
             "AND doc_id IN ('3', '1234', '2999') AND sqlstate = '22P05'",
             e.service, db);
    ck_assert_int_eq(pg_ll(pg, sql), 3);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM oplog2pg.dead_letter WHERE service = '%s' AND db = '%s' AND coll = 'd' AND "
             "doc_id = '2000' AND sqlstate IS NULL",
             e.service, db);
    ck_assert_int_eq(pg_ll(pg, sql), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM oplog2pg.dead_letter WHERE service = '%s'", e.service);
    ck_assert_int_eq(pg_ll(pg, sql), 4);
    /* Every other document is there exactly as the source has it. */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\".c WHERE (doc->>'n')::int = _id::int AND NOT doc ? 'bad'",
             db);
    ck_assert_int_eq(pg_ll(pg, sql), 3000 - 3);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\".d WHERE (doc->>'n')::int = _id::int AND NOT doc ? 'bad'",
             db);
    ck_assert_int_eq(pg_ll(pg, sql), 2500 - 1);
    copy_state st;
    ck_assert_msg(copy_state_read(pg_conninfo(), e.service, &st, err, sizeof err), "%s", err);
    ck_assert(st.exists && st.finished);
    for (size_t k = 0; k < st.n; k++)
        ck_assert(st.rows[k].done);
    copy_state_free(&st);
    PQfinish(pg);
    nsfilter_free(f);
    env_stop(&e);
}
END_TEST

/* A worker reads the next batch from MongoDB while PostgreSQL writes the one before: with every reply of the source
 * held up 100 ms (mongosimDelay) and every batch's commit held up 100 ms (a trigger on the copy's progress row, which
 * also notes when each batch was written), one worker commits a batch about every 100 ms, not every 200 ms as a
 * worker that alternates would. */
START_TEST(test_copy_reads_while_writing)
{
    env e;
    env_dir(&e, "ovl");
    env_sim(&e, NULL);
    char db[64];
    snprintf(db, sizeof db, "%s0", e.prefix);
    const int docs = 3000, delay_ms = 100;
    insert_docs(e.uri, db, "c", 1, docs, NULL, NULL, 0);
    pg_clean(&e);
    PGconn *pg = pg_open();
    char sql[600];
    pg_do(pg, "DROP TABLE IF EXISTS public.copy_test_times");
    pg_do(pg, "CREATE TABLE public.copy_test_times (t timestamptz)");
    pg_do(pg, "CREATE OR REPLACE FUNCTION public.copy_test_slow() RETURNS trigger LANGUAGE plpgsql AS "
              "$$BEGIN PERFORM pg_sleep(0.1); INSERT INTO public.copy_test_times VALUES (clock_timestamp()); "
              "RETURN NEW; END$$");
    snprintf(sql, sizeof sql,
             "CREATE OR REPLACE TRIGGER copy_test_slow BEFORE UPDATE ON oplog2pg.copy_progress FOR EACH ROW "
             "WHEN (NEW.service = '%s') EXECUTE FUNCTION public.copy_test_slow()",
             e.service);
    pg_do(pg, sql);
    mongo_cmd(e.uri, BCON_NEW("mongosimDelay", BCON_INT32(delay_ms)));

    nsfilter *f;
    copy_config cfg = one_db_config(&e, &f);
    cfg.workers = 1;
    cfg.batch_docs = 200; /* mongosim answers 200 documents at a time */
    op_pos start;
    char err[2048];
    copy_result r = copy_run(&cfg, &start, err, sizeof err);
    pg_do(pg, "DROP TRIGGER copy_test_slow ON oplog2pg.copy_progress");
    pg_do(pg, "DROP FUNCTION public.copy_test_slow()");
    ck_assert_msg(r == COPY_DONE, "copy: %s: %s", copy_result_name(r), err);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\".c", db);
    ck_assert_int_eq(pg_ll(pg, sql), docs);
    snprintf(sql, sizeof sql, "SELECT copied FROM oplog2pg.copy_progress WHERE service = '%s'", e.service);
    ck_assert_int_eq(pg_ll(pg, sql), docs);
    long long batches = pg_ll(pg, "SELECT count(*) FROM public.copy_test_times");
    long long span_ms =
        pg_ll(pg, "SELECT (extract(epoch FROM max(t) - min(t)) * 1000)::bigint FROM public.copy_test_times");
    pg_do(pg, "DROP TABLE public.copy_test_times");
    PQfinish(pg);
    ck_assert_int_ge(batches, docs / 200);
    double every_ms = (double)span_ms / (double)(batches - 1);
    fprintf(stderr,
            "copy_reads_while_writing: %lld batches, one every %.0f ms (reading one takes %d ms, writing one %d ms)\n",
            batches, every_ms, delay_ms, delay_ms);
    ck_assert_msg(every_ms < 1.5 * delay_ms,
                  "a batch every %.0f ms: the worker did not read the next batch while writing one (%d ms each)",
                  every_ms, delay_ms);
    nsfilter_free(f);
    env_stop(&e);
}
END_TEST

/* Batches before a collection's last commit without waiting for the disk; PostgreSQL losing the last of them (a crash
 * or a failover: the rows and the progress row of a suffix of the WAL gone together) is noticed by the next batch,
 * whose progress update finds the row behind what the worker committed, and the copy goes on from what PostgreSQL
 * still has. The loss is made by a helper, between batches: the rows past the first batch deleted and the progress
 * row set back to it, in one transaction. */
typedef struct {
    const env *e;
    const char *db;
    bool done;
} loser;

static void *lose_main(void *arg)
{
    loser *l = arg;
    PGconn *pg = pg_open();
    for (int i = 0; i < 2000 && pg_ll(pg, "SELECT count(*) FROM public.copy_test_hist") < 3; i++)
        usleep(5000);
    char sql[1200];
    snprintf(sql, sizeof sql,
             "BEGIN; "
             "CREATE TEMP TABLE first_batch AS SELECT copied, last_id FROM public.copy_test_hist ORDER BY at LIMIT 1; "
             "DELETE FROM \"%s\".c WHERE (doc->>'n')::int > (SELECT copied FROM first_batch); "
             "UPDATE oplog2pg.copy_progress SET copied = f.copied, last_id = f.last_id FROM first_batch f "
             "WHERE service = '%s'; "
             "INSERT INTO public.copy_test_hist SELECT -1, NULL, clock_timestamp(); "
             "COMMIT",
             l->db, l->e->service);
    pg_do(pg, sql);
    PQfinish(pg);
    l->done = true;
    return NULL;
}

START_TEST(test_copy_lost_batches)
{
    env e;
    env_dir(&e, "lost");
    env_sim(&e, NULL);
    char db[64];
    snprintf(db, sizeof db, "%s0", e.prefix);
    const int docs = 3000;
    insert_docs(e.uri, db, "c", 1, docs, NULL, NULL, 0);
    pg_clean(&e);
    PGconn *pg = pg_open();
    char sql[600];
    pg_do(pg, "DROP TABLE IF EXISTS public.copy_test_hist");
    pg_do(pg, "CREATE TABLE public.copy_test_hist (copied bigint, last_id bytea, at timestamptz)");
    pg_do(pg, "CREATE OR REPLACE FUNCTION public.copy_test_hist() RETURNS trigger LANGUAGE plpgsql AS "
              "$$BEGIN PERFORM pg_sleep(0.05); INSERT INTO public.copy_test_hist "
              "VALUES (NEW.copied, NEW.last_id, clock_timestamp()); RETURN NEW; END$$");
    snprintf(sql, sizeof sql,
             "CREATE OR REPLACE TRIGGER copy_test_hist AFTER UPDATE ON oplog2pg.copy_progress FOR EACH ROW "
             "WHEN (NEW.service = '%s') EXECUTE FUNCTION public.copy_test_hist()",
             e.service);
    pg_do(pg, sql);

    nsfilter *f;
    copy_config cfg = one_db_config(&e, &f);
    cfg.workers = 1;
    cfg.batch_docs = 200;
    loser l = {.e = &e, .db = db};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, lose_main, &l), 0);
    op_pos start;
    char err[2048];
    copy_result r = copy_run(&cfg, &start, err, sizeof err);
    pthread_join(th, NULL);
    pg_do(pg, "DROP TRIGGER copy_test_hist ON oplog2pg.copy_progress");
    pg_do(pg, "DROP FUNCTION public.copy_test_hist()");
    ck_assert_msg(r == COPY_DONE, "copy: %s: %s", copy_result_name(r), err);
    ck_assert(l.done);
    /* The loss came before the collection's last batch, and the worker went back: a batch after it committed a count
     * below the highest one committed before it. */
    long long before = pg_ll(pg, "SELECT max(copied) FROM public.copy_test_hist "
                                 "WHERE at < (SELECT at FROM public.copy_test_hist WHERE copied = -1)");
    long long after_min = pg_ll(pg, "SELECT min(copied) FROM public.copy_test_hist "
                                    "WHERE at > (SELECT at FROM public.copy_test_hist WHERE copied = -1)");
    ck_assert_int_gt(after_min, 0);
    ck_assert_msg(after_min < before, "no batch went back: %lld committed before the loss, %lld after", before,
                  after_min);
    snprintf(sql, sizeof sql, "SELECT count(*) || ' ' || count(DISTINCT (doc->>'n')::int) FROM \"%s\".c", db);
    PGresult *res = PQexec(pg, sql);
    ck_assert_str_eq(PQgetvalue(res, 0, 0), "3000 3000");
    PQclear(res);
    snprintf(sql, sizeof sql, "SELECT copied FROM oplog2pg.copy_progress WHERE service = '%s' AND done", e.service);
    ck_assert_int_eq(pg_ll(pg, sql), docs);
    pg_do(pg, "DROP TABLE public.copy_test_hist");
    PQfinish(pg);
    nsfilter_free(f);
    env_stop(&e);
}
END_TEST

/* The other way: the progress row ahead of the worker, as after a COMMIT that went through while its answer was lost
 * with the connection. A helper, between batches, writes the next 1 000 documents' rows itself and moves the
 * progress row past them, in one transaction; the worker's next batch finds the row ahead, takes its position and
 * goes on from there (it used to copy such a batch again). */
static void *advance_main(void *arg)
{
    loser *l = arg;
    PGconn *pg = pg_open();
    for (int i = 0; i < 2000 && pg_ll(pg, "SELECT count(*) FROM public.copy_test_hist") < 3; i++)
        usleep(5000);
    char sql[600];
    pg_do(pg, "BEGIN");
    /* The table first: this waits for the worker's batch in flight to commit and holds its next COPY back. Taking
     * the progress row first could deadlock: the worker's uncommitted rows block this INSERT while the worker's
     * progress UPDATE waits for this row lock. */
    snprintf(sql, sizeof sql, "LOCK TABLE \"%s\".c IN SHARE ROW EXCLUSIVE MODE", l->db);
    pg_do(pg, sql);
    snprintf(sql, sizeof sql, "SELECT copied FROM oplog2pg.copy_progress WHERE service = '%s' FOR UPDATE",
             l->e->service);
    long long at = pg_ll(pg, sql) + 1000;
    snprintf(sql, sizeof sql,
             "INSERT INTO \"%s\".c SELECT i::text, jsonb_build_object('_id', i, 'n', i) "
             "FROM generate_series(1, %lld) i ON CONFLICT DO NOTHING",
             l->db, at);
    pg_do(pg, sql);
    bson_t *last = BCON_NEW("_id", BCON_INT32((int32_t)at));
    char copied[24];
    snprintf(copied, sizeof copied, "%lld", at);
    const char *vals[3] = {(const char *)bson_get_data(last), copied, l->e->service};
    const int lens[3] = {(int)last->len, 0, 0}, fmts[3] = {1, 0, 0};
    PGresult *r = PQexecParams(pg, "UPDATE oplog2pg.copy_progress SET last_id = $1, copied = $2 WHERE service = $3", 3,
                               NULL, vals, lens, fmts, 0);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s", PQerrorMessage(pg));
    PQclear(r);
    bson_destroy(last);
    pg_do(pg, "INSERT INTO public.copy_test_hist SELECT -1, NULL, clock_timestamp()");
    pg_do(pg, "COMMIT");
    PQfinish(pg);
    l->done = true;
    return NULL;
}

START_TEST(test_copy_progress_ahead)
{
    env e;
    env_dir(&e, "ahead");
    env_sim(&e, NULL);
    char db[64];
    snprintf(db, sizeof db, "%s0", e.prefix);
    const int docs = 3000;
    insert_docs(e.uri, db, "c", 1, docs, NULL, NULL, 0);
    pg_clean(&e);
    PGconn *pg = pg_open();
    char sql[600];
    pg_do(pg, "DROP TABLE IF EXISTS public.copy_test_hist");
    pg_do(pg, "CREATE TABLE public.copy_test_hist (copied bigint, last_id bytea, at timestamptz)");
    pg_do(pg, "CREATE OR REPLACE FUNCTION public.copy_test_hist() RETURNS trigger LANGUAGE plpgsql AS "
              "$$BEGIN PERFORM pg_sleep(0.05); INSERT INTO public.copy_test_hist "
              "VALUES (NEW.copied, NEW.last_id, clock_timestamp()); RETURN NEW; END$$");
    snprintf(sql, sizeof sql,
             "CREATE OR REPLACE TRIGGER copy_test_hist AFTER UPDATE ON oplog2pg.copy_progress FOR EACH ROW "
             "WHEN (NEW.service = '%s' AND NEW.copied > 0) EXECUTE FUNCTION public.copy_test_hist()",
             e.service);
    pg_do(pg, sql);

    nsfilter *f;
    copy_config cfg = one_db_config(&e, &f);
    cfg.workers = 1;
    cfg.batch_docs = 200;
    loser l = {.e = &e, .db = db};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, advance_main, &l), 0);
    op_pos start;
    char err[2048];
    copy_result r = copy_run(&cfg, &start, err, sizeof err);
    pthread_join(th, NULL);
    pg_do(pg, "DROP TRIGGER copy_test_hist ON oplog2pg.copy_progress");
    pg_do(pg, "DROP FUNCTION public.copy_test_hist()");
    ck_assert_msg(r == COPY_DONE, "copy: %s: %s", copy_result_name(r), err);
    ck_assert(l.done);
    /* The worker went on from the helper's position: no batch after it committed below it. */
    long long jump = pg_ll(pg, "SELECT max(copied) FROM public.copy_test_hist "
                               "WHERE at < (SELECT at FROM public.copy_test_hist WHERE copied = -1)") +
                     1000;
    long long after_min = pg_ll(pg, "SELECT min(copied) FROM public.copy_test_hist "
                                    "WHERE at > (SELECT at FROM public.copy_test_hist WHERE copied = -1)");
    ck_assert_msg(after_min > jump - 1000, "a batch after the jump committed %lld", after_min);
    snprintf(sql, sizeof sql, "SELECT count(*) || ' ' || count(DISTINCT (doc->>'n')::int) FROM \"%s\".c", db);
    PGresult *res = PQexec(pg, sql);
    ck_assert_str_eq(PQgetvalue(res, 0, 0), "3000 3000");
    PQclear(res);
    snprintf(sql, sizeof sql, "SELECT copied FROM oplog2pg.copy_progress WHERE service = '%s' AND done", e.service);
    ck_assert_int_eq(pg_ll(pg, sql), docs);
    pg_do(pg, "DROP TABLE public.copy_test_hist");
    PQfinish(pg);
    nsfilter_free(f);
    env_stop(&e);
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* the oplog window */

START_TEST(test_copy_window_before_resume)
{
    env e;
    env_dir(&e, "win1");
    env_sim(&e, NULL);
    fill_workload(&e, 20000, 3);
    pg_clean(&e);
    atomic_bool cancel;
    atomic_init(&cancel, true); /* cancelled at once: the plan is recorded, little or nothing copied */
    copy_config cfg = base_config(&e);
    cfg.cancel = &cancel;
    op_pos start;
    char err[2048];
    copy_result r = copy_run(&cfg, &start, err, sizeof err);
    ck_assert_msg(r == COPY_CANCELLED, "%s: %s", copy_result_name(r), err);

    /* A later write, then the oplog truncated up to it: the copy's start is gone. */
    insert_marker(e.uri, "cp_seed", "later");
    uint32_t s, i;
    newest_ts(e.uri, &s, &i);
    mongo_cmd(e.uri, BCON_NEW("mongosimTruncateOplog", BCON_INT32(1), "before", BCON_TIMESTAMP(s, i)));
    atomic_store(&cancel, false);
    r = copy_run(&cfg, &start, err, sizeof err);
    ck_assert_msg(r == COPY_WINDOW_LOST, "%s: %s", copy_result_name(r), err);
    ck_assert_msg(strstr(err, "the oplog no longer holds the copy's start; raise the oplog size or copy fewer "
                              "collections at once") != NULL,
                  "message: %s", err);
    ck_assert_msg(strstr(err, "--reimport") != NULL, "message: %s", err);
    env_stop(&e);
}
END_TEST

typedef struct {
    const env *e;
    atomic_bool *started;
} truncater;

static void *truncate_main(void *arg)
{
    truncater *t = arg;
    PGconn *pg = PQconnectdb(pg_conninfo());
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT COALESCE(sum(copied), 0) FROM oplog2pg.copy_progress WHERE service = '%s'",
             t->e->service);
    /* Wait until the copy has committed something, then roll the oplog past its start. */
    for (int k = 0; k < 3000 && PQstatus(pg) == CONNECTION_OK; k++) {
        PGresult *r = PQexec(pg, sql);
        long long n = PQresultStatus(r) == PGRES_TUPLES_OK ? atoll(PQgetvalue(r, 0, 0)) : 0;
        PQclear(r);
        if (n > 0)
            break;
        usleep(2000);
    }
    PQfinish(pg);
    atomic_store(t->started, true);
    mongoc_client_t *c = mongoc_client_new(t->e->uri);
    mongoc_collection_t *co = mongoc_client_get_collection(c, "cp_seed", "during");
    bson_t *doc = BCON_NEW("x", BCON_INT32(1));
    bson_error_t err;
    mongoc_collection_insert_one(co, doc, NULL, NULL, &err);
    bson_destroy(doc);
    mongoc_collection_destroy(co);
    mongoc_client_destroy(c);
    uint32_t s, i;
    newest_ts(t->e->uri, &s, &i);
    mongo_cmd(t->e->uri, BCON_NEW("mongosimTruncateOplog", BCON_INT32(1), "before", BCON_TIMESTAMP(s, i)));
    return NULL;
}

START_TEST(test_copy_window_during)
{
    env e;
    env_dir(&e, "win2");
    env_sim(&e, NULL);
    fill_workload(&e, 40000, 5);
    pg_clean(&e);
    /* Slow enough that the copy lasts several window checks. */
    mongo_cmd(e.uri, BCON_NEW("mongosimDelay", BCON_INT32(20)));
    copy_config cfg = base_config(&e);
    cfg.batch_docs = 200;
    cfg.window_warn_ms = 3600 * 1000; /* the margin is seconds: the warning path runs too */
    atomic_bool started;
    atomic_init(&started, false);
    truncater t = {.e = &e, .started = &started};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, truncate_main, &t), 0);
    op_pos start;
    char err[2048];
    double t0 = now_s();
    copy_result r = copy_run(&cfg, &start, err, sizeof err);
    pthread_join(th, NULL);
    ck_assert_msg(r == COPY_WINDOW_LOST, "%s: %s", copy_result_name(r), err);
    ck_assert(atomic_load(&started));
    ck_assert_msg(strstr(err, "the oplog no longer holds the copy's start") != NULL, "message: %s", err);
    ck_assert_double_lt(now_s() - t0, 30.0);
    /* The copy stopped unfinished: its state says so. */
    copy_state st;
    ck_assert_msg(copy_state_read(pg_conninfo(), e.service, &st, err, sizeof err), "%s", err);
    ck_assert(st.exists && !st.finished);
    size_t unfinished = 0;
    for (size_t k = 0; k < st.n; k++)
        unfinished += !st.rows[k].done;
    copy_state_free(&st);
    ck_assert_uint_gt(unfinished, 0);
    env_stop(&e);
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* reset */

static long long table_count(PGconn *pg, const char *prefix)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM pg_tables WHERE schemaname LIKE '%s%%'", prefix);
    return pg_ll(pg, sql);
}

START_TEST(test_copy_reset)
{
    env e;
    env_dir(&e, "rst");
    env_sim(&e, NULL);
    fill_workload(&e, 4000, 9);
    pg_clean(&e);
    copy_config cfg = base_config(&e);
    op_pos start;
    char err[2048];
    ck_assert_msg(copy_run(&cfg, &start, err, sizeof err) == COPY_DONE, "%s", err);
    PGconn *pg = pg_open();
    /* A table of someone else's in a matching schema is never touched. */
    char sql[300];
    snprintf(sql, sizeof sql, "CREATE TABLE \"%s0\".\"not_ours\" (x int)", e.prefix);
    pg_do(pg, sql);
    ck_assert_int_eq(table_count(pg, e.prefix), 5);

    char pat[64];
    snprintf(pat, sizeof pat, "%s*.*", e.prefix);
    const char *inc[] = {pat, NULL};
    const char *exc_one[2];
    char one[64];
    snprintf(one, sizeof one, "%s1.c1", e.prefix);
    exc_one[0] = one;
    exc_one[1] = NULL;
    nsfilter *f = nsfilter_new(inc, exc_one, err, sizeof err);
    ck_assert_msg(f, "%s", err);

    /* Truncate: tables stay, empty (except the excluded one); the state is gone. */
    ck_assert_msg(copy_reset(pg_conninfo(), e.service, f, false, err, sizeof err), "%s", err);
    ck_assert_int_eq(table_count(pg, e.prefix), 5);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s0\".\"c0\"", e.prefix);
    ck_assert_int_eq(pg_ll(pg, sql), 0);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s1\".\"c1\"", e.prefix);
    ck_assert_int_gt(pg_ll(pg, sql), 0);
    copy_state st;
    ck_assert_msg(copy_state_read(pg_conninfo(), e.service, &st, err, sizeof err), "%s", err);
    ck_assert(!st.exists);
    ck_assert_uint_eq(st.n, 0);
    copy_state_free(&st);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM oplog2pg.copy_progress WHERE service = '%s'", e.service);
    ck_assert_int_eq(pg_ll(pg, sql), 0);

    /* Copy again (a fresh start), then drop. */
    ck_assert_msg(copy_run(&cfg, &start, err, sizeof err) == COPY_DONE, "%s", err);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s0\".\"c0\"", e.prefix);
    ck_assert_int_gt(pg_ll(pg, sql), 0);
    ck_assert_msg(copy_reset(pg_conninfo(), e.service, f, true, err, sizeof err), "%s", err);
    ck_assert_int_eq(table_count(pg, e.prefix), 2); /* the excluded collection and not_ours */
    ck_assert_msg(copy_state_read(pg_conninfo(), e.service, &st, err, sizeof err), "%s", err);
    ck_assert(!st.exists);
    copy_state_free(&st);
    PQfinish(pg);
    nsfilter_free(f);
    env_stop(&e);
}
END_TEST

/* A service never copied, on a database that may not even have the tables: no state, no error. */
START_TEST(test_copy_state_none)
{
    copy_state st;
    char err[512];
    ck_assert_msg(copy_state_read(pg_conninfo(), "copy_never_seen", &st, err, sizeof err), "%s", err);
    ck_assert(!st.exists && !st.finished);
    ck_assert_uint_eq(st.n, 0);
    copy_state_free(&st);
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* mongosim: find with min/hint */

START_TEST(test_sim_find_min)
{
    env e;
    env_dir(&e, "min");
    env_sim(&e, NULL);
    mongoc_client_t *c = mongoc_client_new(e.uri);
    mongoc_collection_t *co = mongoc_client_get_collection(c, "cp_min", "m");
    /* BSON order: numbers < strings < ObjectId. */
    bson_t *docs[] = {BCON_NEW("_id", BCON_INT32(1)), BCON_NEW("_id", BCON_DOUBLE(2.5)),
                      BCON_NEW("_id", BCON_UTF8("a")), BCON_NEW("_id", BCON_UTF8("b"))};
    bson_error_t err;
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(mongoc_collection_insert_one(co, docs[i], NULL, NULL, &err), "%s", err.message);
        bson_destroy(docs[i]);
    }
    bson_t filter = BSON_INITIALIZER;
    /* min {_id: 2.5} inclusive: 2.5, "a", "b" — across types, in batches of 1. */
    bson_t *opts = BCON_NEW("sort", "{", "_id", BCON_INT32(1), "}", "min", "{", "_id", BCON_DOUBLE(2.5), "}", "hint",
                            "{", "_id", BCON_INT32(1), "}", "batchSize", BCON_INT32(1));
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(co, &filter, opts, NULL);
    const bson_t *d;
    char got[128] = "";
    while (mongoc_cursor_next(cur, &d)) {
        bson_iter_t it;
        ck_assert(bson_iter_init_find(&it, d, "_id"));
        char *j = bson_as_relaxed_extended_json(d, NULL);
        strncat(got, j, sizeof got - strlen(got) - 1);
        bson_free(j);
    }
    ck_assert_msg(!mongoc_cursor_error(cur, &err), "%s", err.message);
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    ck_assert_str_eq(got, "{ \"_id\" : 2.5 }{ \"_id\" : \"a\" }{ \"_id\" : \"b\" }");
    /* A min that is not a stored _id: starts at the next one. */
    opts = BCON_NEW("sort", "{", "_id", BCON_INT32(1), "}", "min", "{", "_id", BCON_UTF8("aa"), "}", "hint", "{", "_id",
                    BCON_INT32(1), "}");
    cur = mongoc_collection_find_with_opts(co, &filter, opts, NULL);
    ck_assert(mongoc_cursor_next(cur, &d));
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, d, "_id"));
    ck_assert_str_eq(bson_iter_utf8(&it, NULL), "b");
    ck_assert(!mongoc_cursor_next(cur, &d));
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    /* min without hint: BadValue, as a real server answers. */
    opts = BCON_NEW("min", "{", "_id", BCON_INT32(1), "}");
    cur = mongoc_collection_find_with_opts(co, &filter, opts, NULL);
    ck_assert(!mongoc_cursor_next(cur, &d));
    ck_assert(mongoc_cursor_error(cur, &err));
    ck_assert_uint_eq(err.code, 2);
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    mongoc_collection_destroy(co);
    mongoc_client_destroy(c);
    env_stop(&e);
}
END_TEST

Suite *copy_suite(void); /* called by the generated runner list */

Suite *copy_suite(void)
{
    Suite *s = suite_create("copy");
    TCase *tc = tcase_create("copy");
    tcase_add_test(tc, test_sim_find_min);
    tcase_add_test(tc, test_copy_state_none);
    tcase_add_test(tc, test_copy_reset);
    tcase_add_test(tc, test_copy_existing_rows);
    tcase_add_test(tc, test_copy_resume);
    tcase_add_test(tc, test_copy_window_before_resume);
    tcase_add_test(tc, test_copy_window_during);
    tcase_add_test(tc, test_copy_refused_rows);
    tcase_add_test(tc, test_copy_reads_while_writing);
    tcase_add_test(tc, test_copy_lost_batches);
    tcase_add_test(tc, test_copy_progress_ahead);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    TCase *large = tcase_create("large"); /* CK_RUN_CASE=large runs it alone, for measuring */
    tcase_add_test(large, test_copy_large);
    tcase_set_timeout(large, 240);
    suite_add_tcase(s, large);
    return s;
}

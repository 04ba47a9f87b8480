/*
 * test_tools.c — proves the end-to-end test tools themselves work (tests/lib: workload, compare, proc), so that a
 * failing replication test means a replication bug and not a tool bug.
 *
 * Uses the mongosim (or replica set) at MONGO_URI and the PostgreSQL at OPLOG2PG_TEST_PG, both set by
 * tests/integration/run.sh. Each test uses its own database prefix (wl1_, wl2_, ...) so suites can share servers.
 * The loader here is deliberately independent of compare.c/pgutil.c (CSV COPY, its own quoting) so a conversion or
 * escaping bug in the tools cannot cancel itself out.
 */
#include <check.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../lib/compare.h"
#include "../lib/proc.h"
#include "../lib/workload.h"
#include "map/ejson.h"
#include "sql_embed.h"

static const char *mongo_uri(void)
{
    const char *u = getenv("MONGO_URI");
    ck_assert_msg(u && *u, "MONGO_URI is not set: run through tests/integration/run.sh");
    return u;
}

static void quiet_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

static PGconn *pg_connect(void)
{
    const char *ci = getenv("OPLOG2PG_TEST_PG");
    ck_assert_msg(ci && *ci, "OPLOG2PG_TEST_PG is not set: run through scripts/with-pg.sh");
    PGconn *pg = PQconnectdb(ci);
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "cannot connect to PostgreSQL: %s", PQerrorMessage(pg));
    PQsetNoticeProcessor(pg, quiet_notice, NULL); /* CREATE SCHEMA IF NOT EXISTS, DROP ... CASCADE chatter */
    return pg;
}

static void sql(PGconn *pg, const char *q)
{
    PGresult *r = PQexec(pg, q);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", q,
                  PQresultErrorMessage(r));
    PQclear(r);
}

/* The first value of a one-row query, copied into buf. */
static void sql_value(PGconn *pg, const char *q, char *buf, size_t cap)
{
    PGresult *r = PQexec(pg, q);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1, "%s: %s (rows %d)", q,
                  PQresultErrorMessage(r), PQntuples(r));
    snprintf(buf, cap, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
}

static mongoc_client_t *mongo_client(void)
{
    bson_error_t e;
    mongoc_init();
    mongoc_uri_t *uri = mongoc_uri_new_with_error(mongo_uri(), &e);
    ck_assert_msg(uri != NULL, "bad MONGO_URI: %s", e.message);
    mongoc_client_t *c = mongoc_client_new_from_uri(uri);
    mongoc_uri_destroy(uri);
    ck_assert(c != NULL);
    mongoc_client_set_error_api(c, MONGOC_ERROR_API_VERSION_2);
    return c;
}

static bool has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Removes leftovers of an earlier run: source databases and PostgreSQL schemas named prefix*. */
static void clean_prefix(mongoc_client_t *mc, PGconn *pg, const char *prefix)
{
    bson_error_t e;
    char **dbs = mongoc_client_get_database_names_with_opts(mc, NULL, &e);
    ck_assert_msg(dbs != NULL, "listDatabases: %s", e.message);
    for (size_t i = 0; dbs[i]; i++) {
        if (!has_prefix(dbs[i], prefix))
            continue;
        mongoc_database_t *db = mongoc_client_get_database(mc, dbs[i]);
        ck_assert_msg(mongoc_database_drop(db, &e), "dropDatabase %s: %s", dbs[i], e.message);
        mongoc_database_destroy(db);
    }
    bson_strfreev(dbs);

    const char *params[1] = {prefix};
    PGresult *r = PQexecParams(pg, "SELECT quote_ident(nspname) FROM pg_namespace WHERE starts_with(nspname, $1)", 1,
                               NULL, params, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    for (int i = 0; i < PQntuples(r); i++) {
        char q[300];
        snprintf(q, sizeof q, "DROP SCHEMA %s CASCADE", PQgetvalue(r, i, 0));
        sql(pg, q);
    }
    PQclear(r);
    r = PQexecParams(pg, "DELETE FROM oplog2pg.tables WHERE starts_with(db, $1)", 1, NULL, params, NULL, NULL, 0);
    PQclear(r); /* the catalog may not exist yet */
}

/* Makes "db"."coll" the way oplog2pg does and records it in oplog2pg's catalog (compare reads only what oplog2pg
 * made). Short plain names map to themselves (map/names.h), so no mapping is needed here. */
static void make_table(PGconn *pg, const char *db, const char *coll)
{
    sql(pg, oplog2pg_sql_schema);
    char *schema = PQescapeIdentifier(pg, db, strlen(db));
    char *table = PQescapeIdentifier(pg, coll, strlen(coll));
    char q[1024];
    snprintf(q, sizeof q, "CREATE SCHEMA IF NOT EXISTS %s", schema);
    sql(pg, q);
    snprintf(q, sizeof q, "CREATE TABLE %s.%s (_id text COLLATE \"C\" PRIMARY KEY, doc jsonb NOT NULL)", schema, table);
    sql(pg, q);
    const char *params[4] = {db, coll, db, coll};
    PGresult *r = PQexecParams(pg,
                               "INSERT INTO oplog2pg.tables (schema_name, table_name, service, db, coll) "
                               "VALUES ($1, $2, 'tools', $3, $4)",
                               4, NULL, params, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "catalog: %s", PQresultErrorMessage(r));
    PQclear(r);
    PQfreemem(schema);
    PQfreemem(table);
}

/* CSV field quoting: the whole field in double quotes, inner double quotes doubled; then `end` (, or newline). */
static void csv_append(bson_string_t *out, const char *text, const char *end)
{
    bson_string_append_c(out, '"');
    for (const char *p = text; *p; p++) {
        if (*p == '"')
            bson_string_append_c(out, '"');
        bson_string_append_c(out, *p);
    }
    bson_string_append_c(out, '"');
    bson_string_append(out, end);
}

/* The trivial replicator: every prefix* collection into "db"."coll" (_id key text, doc jsonb).
 * Returns the number of documents loaded. */
static int64_t load_all(mongoc_client_t *mc, PGconn *pg, const char *prefix)
{
    bson_error_t e;
    int64_t total = 0;
    char **dbs = mongoc_client_get_database_names_with_opts(mc, NULL, &e);
    ck_assert_msg(dbs != NULL, "listDatabases: %s", e.message);
    for (size_t i = 0; dbs[i]; i++) {
        if (!has_prefix(dbs[i], prefix))
            continue;
        mongoc_database_t *db = mongoc_client_get_database(mc, dbs[i]);
        char **colls = mongoc_database_get_collection_names_with_opts(db, NULL, &e);
        ck_assert_msg(colls != NULL, "listCollections %s: %s", dbs[i], e.message);
        for (size_t j = 0; colls[j]; j++) {
            char *schema = PQescapeIdentifier(pg, dbs[i], strlen(dbs[i]));
            char *table = PQescapeIdentifier(pg, colls[j], strlen(colls[j]));
            char q[1024];
            make_table(pg, dbs[i], colls[j]);
            snprintf(q, sizeof q, "COPY %s.%s (_id, doc) FROM STDIN (FORMAT csv)", schema, table);
            PGresult *r = PQexec(pg, q);
            ck_assert_msg(PQresultStatus(r) == PGRES_COPY_IN, "%s: %s", q, PQresultErrorMessage(r));
            PQclear(r);

            mongoc_collection_t *coll = mongoc_database_get_collection(db, colls[j]);
            bson_t filter = BSON_INITIALIZER;
            mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, &filter, NULL, NULL);
            const bson_t *doc;
            bson_string_t *buf = bson_string_new(NULL);
            while (mongoc_cursor_next(cur, &doc)) {
                bson_iter_t it;
                ck_assert(bson_iter_init_find(&it, doc, "_id"));
                char *key = ejson_key(bson_iter_value(&it)); /* the daemon's formats */
                char *js = ejson_document(doc, NULL);
                csv_append(buf, key, ",");
                csv_append(buf, js, "\n");
                free(key);
                free(js);
                total++;
            }
            ck_assert_msg(!mongoc_cursor_error(cur, &e), "find %s.%s: %s", dbs[i], colls[j], e.message);
            ck_assert_int_eq(PQputCopyData(pg, buf->str, (int)buf->len), 1);
            ck_assert_int_eq(PQputCopyEnd(pg, NULL), 1);
            while ((r = PQgetResult(pg)) != NULL) {
                ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "COPY into %s.%s: %s", dbs[i], colls[j],
                              PQresultErrorMessage(r));
                PQclear(r);
            }
            bson_string_free(buf, true);
            mongoc_cursor_destroy(cur);
            bson_destroy(&filter);
            mongoc_collection_destroy(coll);
            PQfreemem(schema);
            PQfreemem(table);
        }
        bson_strfreev(colls);
        mongoc_database_destroy(db);
    }
    bson_strfreev(dbs);
    return total;
}

static void run_compare(PGconn *pg, const char *prefix, compare_report *rep)
{
    char err[1024] = "";
    compare_options o = {.db_prefix = prefix};
    bool ok = compare_all(mongo_uri(), pg, &o, rep, err, sizeof err);
    ck_assert_msg(ok, "compare_all failed: %s", err);
    compare_report_print(rep, stderr, false);
}

static const compare_ns *find_ns(const compare_report *rep, const char *db, const char *coll)
{
    for (size_t i = 0; i < rep->n_ns; i++)
        if (!strcmp(rep->ns[i].db, db) && !strcmp(rep->ns[i].coll, coll))
            return &rep->ns[i];
    return NULL;
}

START_TEST(test_workload_compare_roundtrip)
{
    const char *prefix = "wl1_";
    char err[1024] = "";
    mongoc_client_t *mc = mongo_client();
    PGconn *pg = pg_connect();
    clean_prefix(mc, pg, prefix);

    workload_config cfg;
    workload_config_init(&cfg);
    cfg.seed = 1;
    cfg.ops = 2000;
    cfg.db_prefix = prefix;
    cfg.w_ddl = 6; /* about a dozen drops, renames and creates in 2 000 ops */
    workload_stats st;
    ck_assert_msg(workload_run(mongo_uri(), &cfg, &st, err, sizeof err), "workload: %s", err);
    fprintf(stderr,
            "workload: %llu ops (%llu i, %llu u, %llu r, %llu d, %llu create, %llu drop, %llu rename) "
            "in %llu bulks, %.2f s, %llu live docs\n",
            (unsigned long long)st.ops, (unsigned long long)st.inserts, (unsigned long long)st.updates,
            (unsigned long long)st.replaces, (unsigned long long)st.deletes, (unsigned long long)st.creates,
            (unsigned long long)st.drops, (unsigned long long)st.renames, (unsigned long long)st.bulks, st.seconds,
            (unsigned long long)st.live_docs);
    ck_assert_uint_eq(st.ops, 2000);
    /* a drop + re-create is one operation counted as both */
    ck_assert_uint_ge(st.inserts + st.updates + st.replaces + st.deletes + st.creates + st.drops + st.renames, 2000);
    ck_assert(st.inserts > 0 && st.updates > 0 && st.replaces > 0 && st.deletes > 0);
    ck_assert(st.drops > 0 && st.renames > 0 && st.creates > 0);
    ck_assert(st.live_docs > 100);

    /* An empty collection with no table counts as equal. */
    bson_error_t e;
    mongoc_database_t *db0 = mongoc_client_get_database(mc, "wl1_0");
    mongoc_collection_t *empty = mongoc_database_create_collection(db0, "empty", NULL, &e);
    ck_assert_msg(empty != NULL, "create wl1_0.empty: %s", e.message);
    mongoc_collection_destroy(empty);
    mongoc_database_destroy(db0);

    /* 1. Nothing replicated: every source document is missing, nothing else is reported. */
    compare_report rep;
    run_compare(pg, prefix, &rep);
    ck_assert(!rep.match);
    ck_assert_int_eq(rep.source_rows, (int64_t)st.live_docs); /* the tools agree with each other */
    ck_assert_int_eq(rep.missing, (int64_t)st.live_docs);
    ck_assert_int_eq(rep.extra, 0);
    ck_assert_int_eq(rep.different, 0);
    ck_assert_uint_eq(rep.n_orphans, 0);
    ck_assert_uint_ge(rep.n_ns, 5);
    int dbs_seen = 0;
    for (size_t i = 0; i < rep.n_ns; i++) {
        ck_assert(rep.ns[i].table_missing);
        ck_assert_int_eq(rep.ns[i].missing, rep.ns[i].source_rows);
        if (rep.ns[i].source_rows > 0)
            ck_assert_int_gt(rep.ns[i].n_ex_missing, 0);
        if (i == 0 || strcmp(rep.ns[i].db, rep.ns[i - 1].db) != 0)
            dbs_seen++;
    }
    ck_assert_int_ge(dbs_seen, 2);
    const compare_ns *en = find_ns(&rep, "wl1_0", "empty");
    ck_assert(en != NULL && en->source_rows == 0 && en->missing == 0);
    compare_report_free(&rep);

    /* 2. A faithful copy matches (also with the empty collection's table absent). */
    int64_t loaded = load_all(mc, pg, prefix);
    ck_assert_int_eq(loaded, (int64_t)st.live_docs);
    sql(pg, "DROP TABLE \"wl1_0\".\"empty\"; DELETE FROM oplog2pg.tables WHERE db = 'wl1_0' AND coll = 'empty'");
    run_compare(pg, prefix, &rep);
    ck_assert_msg(rep.match, "a faithful copy does not match");
    ck_assert_int_eq(rep.source_rows, loaded);
    compare_report_free(&rep);

    /* 3. Change one row, delete one, add one, leave a table behind: exactly those are reported. */
    char tbl[256] = "", changed[COMPARE_ID_LEN], deleted[COMPARE_ID_LEN], q[1024];
    /* the fullest table of wl1_1 */
    char db[128] = "", coll[128] = "";
    long best = -1;
    PGresult *r = PQexec(pg, "SELECT format('%I.%I', table_schema, table_name), table_schema, table_name"
                             " FROM information_schema.tables WHERE table_schema = 'wl1_1'");
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0, "no table in wl1_1");
    for (int i = 0; i < PQntuples(r); i++) {
        char cnt[32];
        snprintf(q, sizeof q, "SELECT count(*) FROM %s", PQgetvalue(r, i, 0));
        sql_value(pg, q, cnt, sizeof cnt);
        if (atol(cnt) > best) {
            best = atol(cnt);
            snprintf(tbl, sizeof tbl, "%s", PQgetvalue(r, i, 0));
            snprintf(db, sizeof db, "%s", PQgetvalue(r, i, 1));
            snprintf(coll, sizeof coll, "%s", PQgetvalue(r, i, 2));
        }
    }
    PQclear(r);
    ck_assert_msg(best >= 2, "the fullest table of wl1_1, %s, has %ld rows", tbl, best);
    snprintf(q, sizeof q, "SELECT _id::text FROM %s ORDER BY _id LIMIT 1", tbl);
    sql_value(pg, q, changed, sizeof changed);
    snprintf(q, sizeof q, "SELECT _id::text FROM %s ORDER BY _id DESC LIMIT 1", tbl);
    sql_value(pg, q, deleted, sizeof deleted);
    snprintf(q, sizeof q, "UPDATE %s SET doc = doc || '{\"h7_changed\": true}' WHERE _id = '%s'", tbl, changed);
    sql(pg, q);
    snprintf(q, sizeof q, "DELETE FROM %s WHERE _id = '%s'", tbl, deleted);
    sql(pg, q);
    snprintf(q, sizeof q, "INSERT INTO %s (_id, doc) VALUES ('\"h7-extra\"', '{\"_id\": \"h7-extra\", \"v\": 1}')",
             tbl);
    sql(pg, q);
    make_table(pg, "wl1_1", "left_behind");
    make_table(pg, "wl1_gone", "c0");
    /* A table oplog2pg did not make is not its output: neither compared nor an orphan. */
    sql(pg, "CREATE TABLE \"wl1_1\".\"not_ours\" (_id text, doc jsonb)");

    run_compare(pg, prefix, &rep);
    ck_assert(!rep.match);
    ck_assert_int_eq(rep.missing, 1);
    ck_assert_int_eq(rep.extra, 1);
    ck_assert_int_eq(rep.different, 1);
    const compare_ns *ns = find_ns(&rep, db, coll);
    ck_assert(ns != NULL);
    ck_assert_int_eq(ns->missing, 1);
    ck_assert_int_eq(ns->extra, 1);
    ck_assert_int_eq(ns->different, 1);
    ck_assert_int_eq(ns->n_ex_missing, 1);
    ck_assert_str_eq(ns->ex_missing[0], deleted);
    ck_assert_int_eq(ns->n_ex_different, 1);
    ck_assert_str_eq(ns->ex_different[0], changed);
    ck_assert_int_eq(ns->n_ex_extra, 1);
    ck_assert_str_eq(ns->ex_extra[0], "\"h7-extra\"");
    ck_assert_int_eq(ns->pg_rows, ns->source_rows); /* one deleted, one added */
    ck_assert_uint_eq(rep.n_orphans, 2);
    ck_assert_str_eq(rep.orphans[0], "wl1_1.left_behind");
    ck_assert_str_eq(rep.orphans[1], "wl1_gone.c0");
    compare_report_free(&rep);

    /* 4. A duplicate document (a table without the primary key) shows as extra, thanks to EXCEPT ALL. */
    /* the constraint name is PostgreSQL's default, <table>_pkey: look it up instead of guessing */
    char conname[200];
    snprintf(q, sizeof q,
             "SELECT quote_ident(conname) FROM pg_constraint WHERE conrelid = '%s'::regclass AND contype = 'p'", tbl);
    sql_value(pg, q, conname, sizeof conname);
    snprintf(q, sizeof q,
             "DROP TABLE \"wl1_1\".\"left_behind\", \"wl1_1\".\"not_ours\"; DROP SCHEMA \"wl1_gone\" CASCADE;"
             " DELETE FROM oplog2pg.tables WHERE (db, coll) IN (('wl1_1', 'left_behind'), ('wl1_gone', 'c0'));"
             " DELETE FROM %s WHERE _id = '\"h7-extra\"';"
             " UPDATE %s SET doc = doc - 'h7_changed' WHERE _id = '%s';"
             " ALTER TABLE %s DROP CONSTRAINT %s;"
             " INSERT INTO %s (_id, doc) SELECT _id, doc FROM %s WHERE _id = '%s';",
             tbl, tbl, changed, tbl, conname, tbl, tbl, changed);
    sql(pg, q);
    run_compare(pg, prefix, &rep);
    ck_assert(!rep.match);
    ck_assert_int_eq(rep.missing, 1); /* still deleted */
    ck_assert_int_eq(rep.extra, 1);   /* the second copy of `changed` */
    ck_assert_int_eq(rep.different, 0);
    ck_assert_uint_eq(rep.n_orphans, 0);
    ns = find_ns(&rep, db, coll);
    ck_assert(ns != NULL && ns->n_ex_extra == 1);
    ck_assert_str_eq(ns->ex_extra[0], changed);
    ck_assert_int_eq(ns->pg_rows, ns->source_rows);
    compare_report_free(&rep);

    clean_prefix(mc, pg, prefix);
    PQfinish(pg);
    mongoc_client_destroy(mc);
}
END_TEST

static workload_stats dry(uint64_t seed, workload_mode mode, unsigned r, uint64_t ops)
{
    workload_config cfg;
    workload_stats st;
    char err[512] = "";
    workload_config_init(&cfg);
    cfg.seed = seed;
    cfg.ops = ops;
    cfg.mode = mode;
    cfg.inserts_per_update = r;
    cfg.dry_run = true;
    ck_assert_msg(workload_run(NULL, &cfg, &st, err, sizeof err), "dry run: %s", err);
    return st;
}

START_TEST(test_workload_deterministic)
{
    workload_stats a = dry(1, WORKLOAD_MIXED, 0, 5000);
    workload_stats b = dry(1, WORKLOAD_MIXED, 0, 5000);
    workload_stats c = dry(2, WORKLOAD_MIXED, 0, 5000);
    workload_stats d = dry(1, WORKLOAD_MIXED, 0, 4999);
    ck_assert(a.op_hash == b.op_hash);
    ck_assert_uint_eq(a.live_docs, b.live_docs);
    ck_assert(a.op_hash != c.op_hash);
    ck_assert(a.op_hash != d.op_hash);

    /* A real run generates the same sequence as the dry run (prefix excluded from the hash). */
    char err[1024] = "";
    mongoc_client_t *mc = mongo_client();
    PGconn *pg = pg_connect();
    clean_prefix(mc, pg, "wl2_");
    workload_config cfg;
    workload_config_init(&cfg);
    cfg.seed = 1;
    cfg.ops = 5000;
    cfg.db_prefix = "wl2_";
    workload_stats real;
    ck_assert_msg(workload_run(mongo_uri(), &cfg, &real, err, sizeof err), "workload: %s", err);
    ck_assert(real.op_hash == a.op_hash);
    ck_assert_uint_eq(real.live_docs, a.live_docs);
    ck_assert_uint_eq(real.inserts, a.inserts);
    ck_assert_uint_gt(real.bulks, 0);
    clean_prefix(mc, pg, "wl2_");
    PQfinish(pg);
    mongoc_client_destroy(mc);
}
END_TEST

START_TEST(test_workload_modes)
{
    workload_stats s = dry(3, WORKLOAD_INSERT_ONLY, 0, 1000);
    ck_assert_uint_eq(s.inserts, 1000);
    ck_assert_uint_eq(s.updates + s.replaces + s.deletes + s.creates + s.drops + s.renames, 0);
    ck_assert_uint_eq(s.live_docs, 1000);

    static const unsigned rs[] = {1, 10, 20, 50, 1000};
    for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++) {
        uint64_t ops = 3 * ((uint64_t)rs[i] + 1);
        s = dry(4, WORKLOAD_INSERTS_PER_UPDATE, rs[i], ops);
        ck_assert_uint_eq(s.inserts, 3 * rs[i]);
        ck_assert_uint_eq(s.updates, 3);
        ck_assert_uint_eq(s.deletes + s.replaces + s.drops + s.renames + s.creates, 0);
    }

    /* Inserts-per-update against the server: every insert arrives (checked with compare's source count). */
    char err[1024] = "";
    mongoc_client_t *mc = mongo_client();
    PGconn *pg = pg_connect();
    clean_prefix(mc, pg, "wl3_");
    workload_config cfg;
    workload_config_init(&cfg);
    cfg.seed = 5;
    cfg.ops = 3000;
    cfg.db_prefix = "wl3_";
    cfg.mode = WORKLOAD_INSERTS_PER_UPDATE;
    cfg.inserts_per_update = 20;
    cfg.pad_bytes = 200;
    workload_stats st;
    ck_assert_msg(workload_run(mongo_uri(), &cfg, &st, err, sizeof err), "workload: %s", err);
    compare_report rep;
    run_compare(pg, "wl3_", &rep);
    ck_assert_msg(rep.source_rows == (int64_t)st.inserts,
                  "compare read %lld documents but the workload inserted %llu (a find/getMore that stops early? "
                  "collections here mix int, string and ObjectId _ids)",
                  (long long)rep.source_rows, (unsigned long long)st.inserts);
    ck_assert_int_eq(rep.missing, (int64_t)st.inserts);
    compare_report_free(&rep);
    clean_prefix(mc, pg, "wl3_");
    PQfinish(pg);
    mongoc_client_destroy(mc);
}
END_TEST

START_TEST(test_spawn_mongosim_44)
{
    char err[1024] = "", log[256];
    proc_handle p;
    snprintf(log, sizeof log, "/tmp/h7-mongosim-%d.log", (int)getpid());
    const char *args[] = {"--oplog-format", "4.4", NULL};
    ck_assert_msg(proc_start_mongosim(args, log, &p, err, sizeof err), "%s", err);
    ck_assert_int_gt(p.port, 0);

    char uri_s[128];
    snprintf(uri_s, sizeof uri_s, "mongodb://127.0.0.1:%d/?replicaSet=rs0&serverSelectionTimeoutMS=5000", p.port);
    mongoc_init();
    mongoc_client_t *c = mongoc_client_new(uri_s);
    ck_assert(c != NULL);
    bson_t cmd = BSON_INITIALIZER, reply;
    bson_error_t e;
    BSON_APPEND_INT32(&cmd, "buildInfo", 1);
    ck_assert_msg(mongoc_client_command_simple(c, "admin", &cmd, NULL, &reply, &e), "buildInfo: %s", e.message);
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, &reply, "version") && BSON_ITER_HOLDS_UTF8(&it));
    ck_assert_msg(has_prefix(bson_iter_utf8(&it, NULL), "4.4."), "version %s", bson_iter_utf8(&it, NULL));
    bson_destroy(&reply);
    bson_destroy(&cmd);
    mongoc_client_destroy(c);

    ck_assert_msg(proc_stop(&p, 10.0), "mongosim did not stop on SIGTERM");
    ck_assert(p.exited);
    ck_assert_int_eq(proc_exit_code(&p), 0);
    unlink(log);
}
END_TEST

START_TEST(test_proc_start_wait_signal)
{
    char err[512] = "", log[256], buf[256] = "";
    proc_handle p;
    snprintf(log, sizeof log, "/tmp/h7-proc-%d.log", (int)getpid());

    const char *argv[] = {"sh", "-c", "echo \"oops $H7_PROBE\" >&2; exit 3", NULL};
    const char *env[] = {"H7_PROBE=xyz", NULL};
    ck_assert_msg(proc_start(argv, env, log, &p, err, sizeof err), "%s", err);
    ck_assert(proc_wait(&p, 10.0));
    ck_assert_int_eq(proc_exit_code(&p), 3);
    FILE *f = fopen(log, "r");
    ck_assert(f != NULL);
    ck_assert(fgets(buf, sizeof buf, f) != NULL);
    fclose(f);
    ck_assert_str_eq(buf, "oops xyz\n");

    const char *sleeper[] = {"sleep", "30", NULL};
    ck_assert_msg(proc_start(sleeper, NULL, NULL, &p, err, sizeof err), "%s", err);
    ck_assert(!proc_wait(&p, 0.2)); /* still running */
    ck_assert(proc_signal(&p, SIGTERM));
    ck_assert(proc_wait(&p, 10.0));
    ck_assert_int_eq(proc_exit_code(&p), 128 + SIGTERM);
    ck_assert(!proc_signal(&p, SIGTERM)); /* reaped */

    const char *missing[] = {"/nonexistent/h7-binary", NULL};
    ck_assert(!proc_start(missing, NULL, NULL, &p, err, sizeof err));
    ck_assert_msg(strstr(err, "/nonexistent/h7-binary") != NULL, "%s", err);

    /* Children left running are killed when the process that started them exits (the atexit path). */
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        proc_handle q;
        char e2[256];
        if (!proc_start(sleeper, NULL, NULL, &q, e2, sizeof e2))
            _exit(2);
        (void)!write(fds[1], &q.pid, sizeof q.pid);
        exit(0); /* runs atexit handlers, as a failed Check test does */
    }
    close(fds[1]);
    pid_t orphan = 0;
    ck_assert_int_eq(read(fds[0], &orphan, sizeof orphan), (ssize_t)sizeof orphan);
    close(fds[0]);
    int st;
    ck_assert_int_eq(waitpid(kid, &st, 0), kid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* The sleeper was the child's child: once killed and reaped by it, the pid is gone. */
    ck_assert_msg(kill(orphan, 0) != 0, "the sleeper %d outlived the process that started it", (int)orphan);
    unlink(log);
}
END_TEST

Suite *tools_suite(void); /* called by the generated runner list */

Suite *tools_suite(void)
{
    Suite *s = suite_create("tools");
    TCase *tc = tcase_create("tools");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_workload_compare_roundtrip);
    tcase_add_test(tc, test_workload_deterministic);
    tcase_add_test(tc, test_workload_modes);
    tcase_add_test(tc, test_spawn_mongosim_44);
    tcase_add_test(tc, test_proc_start_wait_signal);
    suite_add_tcase(s, tc);
    return s;
}

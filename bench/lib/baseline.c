/*
 * baseline.c — see baseline.h.
 */
#include "baseline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map/ejson.h"

double baseline_copy(PGconn *pg, const char *name, const char *create, const char *cols, const char *path,
                     const char *opts, double *pg_cpu_s)
{
    char sql[1024];
    snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS %s", name);
    bench_exec_sql(pg, sql);
    snprintf(sql, sizeof sql, "CREATE TABLE %s %s", name, create);
    bench_exec_sql(pg, sql);
    bench_exec_sql(pg, "CHECKPOINT");
    snprintf(sql, sizeof sql, "psql -X -q -v ON_ERROR_STOP=1 -c \"\\copy %s %s from '%s'%s\"", name, cols, path, opts);
    double t0 = bench_now_s(), pg0 = bench_cluster_cpu_seconds(pg);
    if (system(sql) != 0)
        bench_die("psql \\copy into %s failed", name);
    double secs = bench_now_s() - t0;
    if (pg_cpu_s != NULL)
        *pg_cpu_s = bench_cluster_cpu_seconds(pg) - pg0;
    snprintf(sql, sizeof sql, "DROP TABLE %s", name);
    bench_exec_sql(pg, sql);
    return secs;
}

void baseline_dump(const char *what, const char *path, const char *opts)
{
    char sql[1024];
    snprintf(sql, sizeof sql, "psql -X -q -v ON_ERROR_STOP=1 -c \"\\copy %s to '%s'%s\"", what, path, opts);
    if (system(sql) != 0)
        bench_die("psql \\copy from %s failed", what);
}

void baseline_dump_rows(const char *qtable, const char *path)
{
    char what[512];
    snprintf(what, sizeof what, "(SELECT _id, doc FROM %s WHERE doc->>'n' <> '0')", qtable);
    baseline_dump(what, path, "");
}

long long baseline_file_bytes(const char *path)
{
    long long bytes = 0;
    FILE *f = fopen(path, "r");
    if (f != NULL && fseek(f, 0, SEEK_END) == 0)
        bytes = ftell(f);
    if (f != NULL)
        fclose(f);
    return bytes;
}

uint64_t baseline_count_rows(PGconn *pg, const char *qtable)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", qtable);
    PGresult *r = PQexec(pg, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        bench_die("%s: %s", sql, PQerrorMessage(pg));
    uint64_t n = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return n;
}

void baseline_expect_rows(trial *t, const char *qtable, uint64_t want)
{
    uint64_t have = baseline_count_rows(t->pg, qtable);
    if (have != want)
        bench_die("%s holds %llu rows, not %llu; see %s", qtable, (unsigned long long)have, (unsigned long long)want,
                  t->log);
}

void baseline_dump_oplog(mongoc_client_t *c, const char *path, const char *cmd_db)
{
    mongoc_collection_t *oplog = mongoc_client_get_collection(c, "local", "oplog.rs");
    bson_t filter = BSON_INITIALIZER; /* all of it: mongosim filters the oplog by ts only, as the daemon asks */
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, &filter, NULL, NULL);
    FILE *f = fopen(path, "wb");
    if (!f)
        bench_die("cannot write %s", path);
    char ns[128];
    snprintf(ns, sizeof ns, "%s.$cmd", cmd_db != NULL ? cmd_db : "");
    const bson_t *doc;
    while (mongoc_cursor_next(cur, &doc)) {
        bson_iter_t it;
        if (cmd_db != NULL && !(bson_iter_init_find(&it, doc, "op") && BSON_ITER_HOLDS_UTF8(&it) &&
                                strcmp(bson_iter_utf8(&it, NULL), "c") == 0 && bson_iter_init_find(&it, doc, "ns") &&
                                BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_utf8(&it, NULL), ns) == 0))
            continue;
        if (fwrite(bson_get_data(doc), 1, doc->len, f) != doc->len)
            bench_die("writing %s", path);
    }
    bson_error_t err;
    if (mongoc_cursor_error(cur, &err))
        bench_die("reading the oplog: %s", err.message);
    fclose(f);
    mongoc_cursor_destroy(cur);
    bson_destroy(&filter);
    mongoc_collection_destroy(oplog);
}

static void put_copy_text(FILE *f, const char *text, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        char ch = text[i];
        if (ch == '\\' || ch == '\t' || ch == '\n' || ch == '\r')
            fputc('\\', f);
        fputc(ch == '\t' ? 't' : ch == '\n' ? 'n' : ch == '\r' ? 'r' : ch, f);
    }
}

uint64_t baseline_dump_collection(mongoc_client_t *c, const char *db, const char *coll, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        bench_die("cannot write %s", path);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db, coll);
    bson_t filter = BSON_INITIALIZER;
    bson_t *opts = BCON_NEW("batchSize", BCON_INT32(10000));
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(col, &filter, opts, NULL);
    const bson_t *doc;
    uint64_t n = 0;
    while (mongoc_cursor_next(cur, &doc)) {
        size_t len;
        bson_iter_t it;
        char *key = bson_iter_init_find(&it, doc, "_id") ? ejson_key(bson_iter_value(&it)) : NULL;
        char *json = ejson_document(doc, &len);
        if (key == NULL || json == NULL)
            bench_die("cannot render a document of %s.%s", db, coll);
        put_copy_text(f, key, strlen(key));
        fputc('\t', f);
        put_copy_text(f, json, len);
        fputc('\n', f);
        free(key);
        free(json);
        n++;
    }
    bson_error_t err;
    if (mongoc_cursor_error(cur, &err))
        bench_die("reading %s.%s: %s", db, coll, err.message);
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    bson_destroy(&filter);
    mongoc_collection_destroy(col);
    fclose(f);
    return n;
}

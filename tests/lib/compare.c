/*
 * compare.c — source-vs-PostgreSQL comparison for replication tests (see compare.h).
 *
 * The classification is done by PostgreSQL so that jsonb semantics decide equality of documents (key order and
 * number spelling do not matter, types do) and the key text must match exactly: a = source EXCEPT ALL target,
 * b = target EXCEPT ALL source, both over (_id, doc), then a FULL JOIN of their _ids (a hash join, so a fully
 * different table of 100 000 rows is still fast) labels each unmatched row.
 */
#include "compare.h"

#include <mongoc/mongoc.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "map/names.h"
#include "pgutil.h"

#define TMP_TABLE "pg_temp.oplog2pg_compare_src"

typedef struct {
    char schema[128];
    char table[128];
    bool seen;
} pg_table;

static bool skip_db(const char *db, const compare_options *o)
{
    if (!strcmp(db, "admin") || !strcmp(db, "local") || !strcmp(db, "config"))
        return true;
    return o && o->db_prefix && *o->db_prefix && strncmp(db, o->db_prefix, strlen(o->db_prefix)) != 0;
}

static int cmp_ns(const void *a, const void *b)
{
    const compare_ns *x = a, *y = b;
    int c = strcmp(x->db, y->db);
    return c ? c : strcmp(x->coll, y->coll);
}

/* Lists the source collections into out->ns. */
static bool list_source(mongoc_client_t *client, const compare_options *opts, compare_report *out, char *err,
                        size_t errlen)
{
    bson_error_t e;
    char **dbs = mongoc_client_get_database_names_with_opts(client, NULL, &e);
    size_t cap = 0;
    bool ok = false;
    if (!dbs) {
        snprintf(err, errlen, "compare: listDatabases failed: %s", e.message);
        return false;
    }
    for (size_t i = 0; dbs[i]; i++) {
        if (skip_db(dbs[i], opts))
            continue;
        mongoc_database_t *db = mongoc_client_get_database(client, dbs[i]);
        mongoc_cursor_t *cur = mongoc_database_find_collections_with_opts(db, NULL);
        const bson_t *doc;
        while (mongoc_cursor_next(cur, &doc)) {
            bson_iter_t it;
            const char *name = NULL, *type = NULL;
            if (bson_iter_init_find(&it, doc, "name") && BSON_ITER_HOLDS_UTF8(&it))
                name = bson_iter_utf8(&it, NULL);
            if (bson_iter_init_find(&it, doc, "type") && BSON_ITER_HOLDS_UTF8(&it))
                type = bson_iter_utf8(&it, NULL);
            if (!name || !strncmp(name, "system.", 7) || (type && strcmp(type, "collection") != 0))
                continue;
            if (strlen(dbs[i]) >= sizeof out->ns[0].db || strlen(name) >= sizeof out->ns[0].coll) {
                snprintf(err, errlen, "compare: namespace %s.%s is too long for this tool", dbs[i], name);
                mongoc_cursor_destroy(cur);
                mongoc_database_destroy(db);
                goto done;
            }
            if (out->n_ns == cap) {
                cap = cap ? cap * 2 : 16;
                out->ns = bson_realloc(out->ns, cap * sizeof *out->ns);
            }
            compare_ns *n = &out->ns[out->n_ns++];
            memset(n, 0, sizeof *n);
            snprintf(n->db, sizeof n->db, "%s", dbs[i]);
            snprintf(n->coll, sizeof n->coll, "%s", name);
        }
        bool cur_ok = !mongoc_cursor_error(cur, &e);
        mongoc_cursor_destroy(cur);
        mongoc_database_destroy(db);
        if (!cur_ok) {
            snprintf(err, errlen, "compare: listCollections on %s failed: %s", dbs[i], e.message);
            goto done;
        }
    }
    if (out->n_ns)
        qsort(out->ns, out->n_ns, sizeof *out->ns, cmp_ns);
    ok = true;
done:
    bson_strfreev(dbs);
    return ok;
}

/* The tables oplog2pg made (its catalog, oplog2pg.tables): tables it did not make are not its output, so they are
 * neither compared nor orphans. Filtered by the MongoDB database the table holds. */
static bool list_pg(PGconn *pg, const compare_options *opts, pg_table **tables, size_t *n, char *err, size_t errlen)
{
    /* A time-series collection's table holds its measurements, not documents of a collection: the tests of
     * time-series collections check those row by row (tests/integration/test_timeseries.c). */
    PGresult *r = PQexec(pg, "SELECT schema_name, table_name, db FROM oplog2pg.tables t WHERE NOT EXISTS (SELECT 1 "
                             "FROM oplog2pg.timeseries x WHERE x.schema_name = t.schema_name AND x.table_name = "
                             "t.table_name) ORDER BY 1, 2");
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        /* No catalog yet: nothing was replicated. */
        PQclear(r);
        r = PQexec(pg, "SELECT to_regclass('oplog2pg.tables') IS NULL");
        bool none = PQresultStatus(r) == PGRES_TUPLES_OK && PQgetvalue(r, 0, 0)[0] == 't';
        if (!none)
            snprintf(err, errlen, "compare: reading the catalog oplog2pg.tables failed: %s", PQresultErrorMessage(r));
        PQclear(r);
        *tables = bson_malloc0(sizeof **tables);
        *n = 0;
        return none;
    }
    int rows = PQntuples(r);
    *tables = bson_malloc0(((size_t)rows + 1) * sizeof **tables);
    *n = 0;
    for (int i = 0; i < rows; i++) {
        const char *s = PQgetvalue(r, i, 0), *t = PQgetvalue(r, i, 1), *db = PQgetvalue(r, i, 2);
        if (opts && opts->db_prefix && *opts->db_prefix && strncmp(db, opts->db_prefix, strlen(opts->db_prefix)) != 0)
            continue;
        pg_table *pt = &(*tables)[(*n)++];
        snprintf(pt->schema, sizeof pt->schema, "%s", s);
        snprintf(pt->table, sizeof pt->table, "%s", t);
    }
    PQclear(r);
    return true;
}

/* Streams one collection, sorted by _id, into the temporary table. */
static bool load_source(mongoc_client_t *client, PGconn *pg, compare_ns *ns, char *err, size_t errlen)
{
    pgutil_copy cp;
    bson_error_t e;
    if (!pgutil_exec(pg, "TRUNCATE " TMP_TABLE, err, errlen))
        return false;
    if (!pgutil_copy_begin(&cp, pg, "COPY " TMP_TABLE " (_id, doc) FROM STDIN", err, errlen))
        return false;
    mongoc_collection_t *coll = mongoc_client_get_collection(client, ns->db, ns->coll);
    bson_t filter = BSON_INITIALIZER;
    bson_t *fopts = BCON_NEW("sort", "{", "_id", BCON_INT32(1), "}");
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, &filter, fopts, NULL);
    const bson_t *doc;
    bool ok = true;
    while (ok && mongoc_cursor_next(cur, &doc))
        ok = pgutil_copy_doc(&cp, doc, err, errlen);
    if (ok && mongoc_cursor_error(cur, &e)) {
        snprintf(err, errlen, "compare: reading %s.%s failed: %s", ns->db, ns->coll, e.message);
        ok = false;
    }
    ns->source_rows = cp.rows;
    mongoc_cursor_destroy(cur);
    bson_destroy(fopts);
    bson_destroy(&filter);
    mongoc_collection_destroy(coll);
    char cerr[512] = "";
    if (!pgutil_copy_end(&cp, ok, cerr, sizeof cerr) && ok) {
        snprintf(err, errlen, "compare: loading %s.%s into PostgreSQL: %s", ns->db, ns->coll, cerr);
        ok = false;
    }
    return ok;
}

static void add_example(compare_ns *ns, const char *kind, const char *id)
{
    char(*arr)[COMPARE_ID_LEN];
    int *n;
    if (!strcmp(kind, "missing")) {
        arr = ns->ex_missing;
        n = &ns->n_ex_missing;
    } else if (!strcmp(kind, "extra")) {
        arr = ns->ex_extra;
        n = &ns->n_ex_extra;
    } else {
        arr = ns->ex_different;
        n = &ns->n_ex_different;
    }
    if (*n < COMPARE_MAX_EXAMPLES)
        snprintf(arr[(*n)++], COMPARE_ID_LEN, "%s", id);
}

static bool query_count(PGconn *pg, const char *sql, int64_t *out, char *err, size_t errlen)
{
    PGresult *r = PQexec(pg, sql);
    bool ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
    if (ok)
        *out = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    else
        snprintf(err, errlen, "compare: %s: %.200s", PQresultErrorMessage(r), sql);
    PQclear(r);
    return ok;
}

/* Compares the loaded temporary table with the target table (NULL when it does not exist). */
static bool compare_one(PGconn *pg, compare_ns *ns, const char *target, char *err, size_t errlen)
{
    char *sql;
    PGresult *r;
    if (!target) {
        ns->table_missing = true;
        ns->missing = ns->source_rows;
        char q[160];
        snprintf(q, sizeof q, "SELECT _id FROM " TMP_TABLE " ORDER BY _id LIMIT %d", COMPARE_MAX_EXAMPLES);
        r = PQexec(pg, q);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            snprintf(err, errlen, "compare: %s.%s: %s", ns->db, ns->coll, PQresultErrorMessage(r));
            PQclear(r);
            return false;
        }
        for (int i = 0; i < PQntuples(r); i++)
            add_example(ns, "missing", PQgetvalue(r, i, 0));
        PQclear(r);
        return true;
    }
    sql = bson_strdup_printf("SELECT count(*) FROM %s", target);
    bool ok = query_count(pg, sql, &ns->pg_rows, err, errlen);
    bson_free(sql);
    if (!ok)
        return false;
    sql = bson_strdup_printf(
        "WITH a AS (SELECT _id, doc FROM " TMP_TABLE " EXCEPT ALL SELECT _id, doc FROM %s),"
        " b AS (SELECT _id, doc FROM %s EXCEPT ALL SELECT _id, doc FROM " TMP_TABLE "),"
        " j AS (SELECT CASE WHEN a.id IS NULL THEN 'extra' WHEN b.id IS NULL THEN 'missing' ELSE 'different' END"
        "        AS kind, coalesce(a.id, b.id) AS id"
        "       FROM (SELECT _id AS id FROM a) a FULL JOIN (SELECT _id AS id FROM b) b ON a.id = b.id),"
        " k AS (SELECT kind, id, count(*) OVER (PARTITION BY kind) AS n,"
        "       row_number() OVER (PARTITION BY kind ORDER BY id) AS rn FROM j)"
        " SELECT kind, n, id::text FROM k WHERE rn <= %d ORDER BY kind, rn",
        target, target, COMPARE_MAX_EXAMPLES);
    r = PQexec(pg, sql);
    bson_free(sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        snprintf(err, errlen, "compare: %s.%s against %s: %s", ns->db, ns->coll, target, PQresultErrorMessage(r));
        PQclear(r);
        return false;
    }
    for (int i = 0; i < PQntuples(r); i++) {
        const char *kind = PQgetvalue(r, i, 0);
        int64_t n = strtoll(PQgetvalue(r, i, 1), NULL, 10);
        if (!strcmp(kind, "missing"))
            ns->missing = n;
        else if (!strcmp(kind, "extra"))
            ns->extra = n;
        else
            ns->different = n;
        add_example(ns, kind, PQgetvalue(r, i, 2));
    }
    PQclear(r);
    return true;
}

static bool drop_tmp_if_exists(PGconn *pg, char *err, size_t errlen)
{
    PGresult *r = PQexec(pg, "SELECT to_regclass('" TMP_TABLE "') IS NOT NULL");
    bool ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
    bool exists = ok && PQgetvalue(r, 0, 0)[0] == 't';
    if (!ok)
        snprintf(err, errlen, "compare: looking for " TMP_TABLE ": %s", PQresultErrorMessage(r));
    PQclear(r);
    return ok && (!exists || pgutil_exec(pg, "DROP TABLE " TMP_TABLE, err, errlen));
}

bool compare_all(const char *mongo_uri, PGconn *pg, const compare_options *opts, compare_report *out, char *err,
                 size_t errlen)
{
    mongoc_uri_t *uri = NULL;
    mongoc_client_t *client = NULL;
    pg_table *tables = NULL;
    size_t n_tables = 0;
    bson_error_t e;
    bool ok = false, tmp_made = false;

    memset(out, 0, sizeof *out);
    if (!pg || PQstatus(pg) != CONNECTION_OK) {
        snprintf(err, errlen, "compare: no PostgreSQL connection");
        return false;
    }
    mongoc_init();
    uri = mongoc_uri_new_with_error(mongo_uri, &e);
    if (!uri) {
        snprintf(err, errlen, "compare: bad MongoDB URI %s: %s", mongo_uri ? mongo_uri : "(null)", e.message);
        goto done;
    }
    client = mongoc_client_new_from_uri(uri);
    if (!client) {
        snprintf(err, errlen, "compare: cannot create a client for %s", mongo_uri);
        goto done;
    }
    mongoc_client_set_error_api(client, MONGOC_ERROR_API_VERSION_2);
    mongoc_client_set_appname(client, "oplog2pg-compare");

    if (!list_source(client, opts, out, err, errlen) || !list_pg(pg, opts, &tables, &n_tables, err, errlen))
        goto done;
    /* A leftover from an interrupted run on this connection is dropped first (checked, so no NOTICE is printed). */
    if (!drop_tmp_if_exists(pg, err, errlen) ||
        !pgutil_exec(pg, "CREATE TEMP TABLE oplog2pg_compare_src (_id text COLLATE \"C\", doc jsonb)", err, errlen))
        goto done;
    tmp_made = true;

    for (size_t i = 0; i < out->n_ns; i++) {
        compare_ns *ns = &out->ns[i];
        const char *target = NULL;
        char *qualified = NULL;
        pg_name nm;
        char why[120];
        if (!names_map(ns->db, ns->coll, &nm, why, sizeof why)) {
            snprintf(err, errlen, "compare: %s.%s: %s", ns->db, ns->coll, why);
            goto done;
        }
        for (size_t t = 0; t < n_tables; t++) {
            if (!strcmp(tables[t].schema, nm.schema) && !strcmp(tables[t].table, nm.table)) {
                tables[t].seen = true;
                qualified = pgutil_qualified_name(pg, nm.schema, nm.table, err, errlen);
                if (!qualified)
                    goto done;
                target = qualified;
                break;
            }
        }
        bool one_ok = load_source(client, pg, ns, err, errlen) && compare_one(pg, ns, target, err, errlen);
        bson_free(qualified);
        if (!one_ok)
            goto done;
        out->source_rows += ns->source_rows;
        out->missing += ns->missing;
        out->extra += ns->extra;
        out->different += ns->different;
    }
    for (size_t t = 0; t < n_tables; t++) {
        if (tables[t].seen)
            continue;
        out->orphans = bson_realloc(out->orphans, (out->n_orphans + 1) * sizeof *out->orphans);
        snprintf(out->orphans[out->n_orphans++], sizeof out->orphans[0], "%s.%s", tables[t].schema, tables[t].table);
    }
    out->match = out->missing == 0 && out->extra == 0 && out->different == 0 && out->n_orphans == 0;
    ok = true;

done:
    if (tmp_made) {
        char e2[256];
        if (PQtransactionStatus(pg) == PQTRANS_INERROR)
            pgutil_exec(pg, "ROLLBACK", e2, sizeof e2);
        drop_tmp_if_exists(pg, e2, sizeof e2);
    }
    bson_free(tables);
    if (client)
        mongoc_client_destroy(client);
    if (uri)
        mongoc_uri_destroy(uri);
    if (!ok)
        out->match = false;
    return ok;
}

void compare_report_free(compare_report *r)
{
    bson_free(r->ns);
    bson_free(r->orphans);
    memset(r, 0, sizeof *r);
}

static void print_examples(FILE *f, const char *label, char (*ex)[COMPARE_ID_LEN], int n)
{
    if (!n)
        return;
    fprintf(f, "    %s e.g.", label);
    for (int i = 0; i < n; i++)
        fprintf(f, " %s", ex[i]);
    fputc('\n', f);
}

void compare_report_print(const compare_report *r, FILE *f, bool verbose)
{
    fprintf(f,
            "compare: %s — %zu collections, %lld source rows, %lld missing, %lld extra, %lld different, "
            "%zu orphan tables\n",
            r->match ? "MATCH" : "DIFFERENT", r->n_ns, (long long)r->source_rows, (long long)r->missing,
            (long long)r->extra, (long long)r->different, r->n_orphans);
    for (size_t i = 0; i < r->n_ns; i++) {
        compare_ns *n = &r->ns[i];
        bool bad = n->missing || n->extra || n->different;
        if (!bad && !verbose)
            continue;
        fprintf(f, "  %s.%s: source %lld, pg %lld%s, missing %lld, extra %lld, different %lld\n", n->db, n->coll,
                (long long)n->source_rows, (long long)n->pg_rows, n->table_missing ? " (no table)" : "",
                (long long)n->missing, (long long)n->extra, (long long)n->different);
        print_examples(f, "missing", n->ex_missing, n->n_ex_missing);
        print_examples(f, "extra", n->ex_extra, n->n_ex_extra);
        print_examples(f, "different", n->ex_different, n->n_ex_different);
    }
    for (size_t i = 0; i < r->n_orphans; i++)
        fprintf(f, "  orphan table %s (no source collection)\n", r->orphans[i]);
}

/*
 * plan.c — which collections a new copy takes: every collection MongoDB lists (views and system collections left
 * out, but for the buckets of time-series collections) that the filter includes and that maps to a PostgreSQL name
 * (map/names.h), with its estimated count; stored as the copy's first state in one transaction.
 */
#include "copy_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map/names.h"
#include "util/log.h"

/* ---------------------------------------------------------------------------------------------------------------- */
/* planning a new copy */

bool copy_listed_uuid(const bson_t *entry, uint8_t uuid[16])
{
    bson_iter_t it, sub;
    bson_subtype_t st;
    uint32_t len;
    const uint8_t *data;
    if (!bson_iter_init_find(&it, entry, "info") || !BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &sub) ||
        !bson_iter_find(&sub, "uuid") || !BSON_ITER_HOLDS_BINARY(&sub))
        return false;
    bson_iter_binary(&sub, &st, &len, &data);
    if (st != BSON_SUBTYPE_UUID || len != 16)
        return false;
    memcpy(uuid, data, 16);
    return true;
}

bool copy_listed_timeseries(const bson_t *entry, char *time, size_t tlen, char *meta, size_t mlen)
{
    bson_iter_t it, opts, ts;
    time[0] = meta[0] = '\0';
    if (!bson_iter_init_find(&it, entry, "options") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &opts) || !bson_iter_find(&opts, "timeseries") || !BSON_ITER_HOLDS_DOCUMENT(&opts) ||
        !bson_iter_recurse(&opts, &ts))
        return false;
    while (bson_iter_next(&ts)) {
        if (strcmp(bson_iter_key(&ts), "timeField") == 0 && BSON_ITER_HOLDS_UTF8(&ts))
            snprintf(time, tlen, "%s", bson_iter_utf8(&ts, NULL));
        else if (strcmp(bson_iter_key(&ts), "metaField") == 0 && BSON_ITER_HOLDS_UTF8(&ts))
            snprintf(meta, mlen, "%s", bson_iter_utf8(&ts, NULL));
    }
    return time[0] != '\0';
}

bool copy_listed_viewless(const bson_t *entry)
{
    bson_iter_t it;
    uint8_t uuid[16];
    return bson_iter_init_find(&it, entry, "type") && BSON_ITER_HOLDS_UTF8(&it) &&
           strcmp(bson_iter_utf8(&it, NULL), "timeseries") == 0 && copy_listed_uuid(entry, uuid);
}

static bool plan_add(plan *p, const char *db, const char *coll, int64_t estimate, const bson_t *entry)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        plan_item *ni = realloc(p->items, cap * sizeof *ni);
        if (ni == NULL)
            return false;
        p->items = ni;
        p->cap = cap;
    }
    plan_item *it = &p->items[p->n++];
    snprintf(it->db, sizeof it->db, "%s", db);
    snprintf(it->coll, sizeof it->coll, "%s", coll);
    it->estimate = estimate;
    it->has_uuid = entry != NULL && copy_listed_uuid(entry, it->uuid);
    it->ts = strncmp(coll, COPY_BUCKETS_PREFIX, COPY_BUCKETS_PREFIX_LEN) == 0 && entry != NULL &&
             copy_listed_timeseries(entry, it->ts_time, sizeof it->ts_time, it->ts_meta, sizeof it->ts_meta);
    it->viewless = entry != NULL && copy_listed_viewless(entry);
    return true;
}

/* Every included collection (views and system collections left out), with its estimated count. */
bool copy_plan_collections(mongoc_client_t *client, const nsfilter *filter, copy_buckets buckets, plan *p, char *err,
                           size_t errlen)
{
    bson_error_t e;
    char **dbs = mongoc_client_get_database_names_with_opts(client, NULL, &e);
    if (dbs == NULL) {
        snprintf(err, errlen, "listing databases: %s", e.message);
        return false;
    }
    bool ok = true;
    for (size_t d = 0; ok && dbs[d] != NULL; d++) {
        const char *dbname = dbs[d];
        if (ns_is_internal(dbname, strlen(dbname), NULL, 0))
            continue;
        char why[120];
        pg_name nm;
        if (strlen(dbname) >= sizeof p->items[0].db || !names_schema(dbname, nm.schema, why, sizeof why)) {
            log_error("copy: leaving database %s out: %s", dbname,
                      strlen(dbname) >= sizeof p->items[0].db ? "the name is longer than MongoDB allows" : why);
            continue;
        }
        mongoc_database_t *db = mongoc_client_get_database(client, dbname);
        /* Every namespace (no type filter): the collections, and the time-series collections, of which a viewless
         * one is listed as type "timeseries" only. Views are left out below. */
        bson_t *opts = bson_new();
        mongoc_cursor_t *cur = mongoc_database_find_collections_with_opts(db, opts);
        const bson_t *doc;
        while (ok && mongoc_cursor_next(cur, &doc)) {
            bson_iter_t it;
            const char *name = NULL, *type = "collection";
            if (bson_iter_init_find(&it, doc, "name") && BSON_ITER_HOLDS_UTF8(&it))
                name = bson_iter_utf8(&it, NULL);
            if (bson_iter_init_find(&it, doc, "type") && BSON_ITER_HOLDS_UTF8(&it))
                type = bson_iter_utf8(&it, NULL);
            bool viewless = name != NULL && copy_listed_viewless(doc);
            if (name == NULL || (strcmp(type, "collection") != 0 && !viewless))
                continue;
            /* A time-series collection's buckets are copied into the collection's table, when the filter takes it
             * (its view is not a collection; docs/timeseries.md). A viewless one's buckets are the collection
             * itself, read with rawData: true; its copy goes by the name system.buckets.NAME all the same. */
            char vname[COPY_BUCKETS_PREFIX_LEN + 256];
            if (viewless) {
                snprintf(vname, sizeof vname, "%s%s", COPY_BUCKETS_PREFIX, name);
                name = vname;
            }
            bool is_buckets = strncmp(name, COPY_BUCKETS_PREFIX, COPY_BUCKETS_PREFIX_LEN) == 0 &&
                              name[COPY_BUCKETS_PREFIX_LEN] != '\0';
            const char *target = is_buckets ? name + COPY_BUCKETS_PREFIX_LEN : name;
            if (copy_skip_namespace(filter, dbname, target))
                continue;
            if (is_buckets && buckets != COPY_BUCKETS_TAKE) {
                if (buckets == COPY_BUCKETS_LEAVE_NOTICE)
                    log_notice("copy: time-series collection %s.%s is not copied: a change stream never shows its "
                               "buckets, so it could not be kept current (docs/sources.md)",
                               dbname, target);
                continue;
            }
            if (strlen(name) >= sizeof p->items[0].coll || !names_map(dbname, target, &nm, why, sizeof why)) {
                log_error("copy: leaving %s.%s out: %s", dbname, name,
                          strlen(name) >= sizeof p->items[0].coll ? "the name is longer than MongoDB allows" : why);
                continue;
            }
            mongoc_collection_t *coll = mongoc_database_get_collection(db, viewless ? target : name);
            bson_error_t ce;
            bson_t *copts = viewless ? BCON_NEW("rawData", BCON_BOOL(true)) : NULL; /* its buckets, counted */
            int64_t n = mongoc_collection_estimated_document_count(coll, copts, NULL, NULL, &ce);
            if (copts != NULL)
                bson_destroy(copts);
            if (n < 0) {
                log_warning("copy: counting %s.%s: %s (the progress will have no estimate)", dbname, name, ce.message);
                n = 0;
            }
            mongoc_collection_destroy(coll);
            if (!plan_add(p, dbname, name, n, doc)) {
                snprintf(err, errlen, "out of memory listing collections");
                ok = false;
            }
        }
        if (ok && mongoc_cursor_error(cur, &e)) {
            snprintf(err, errlen, "listing the collections of %s: %s", dbname, e.message);
            ok = false;
        }
        mongoc_cursor_destroy(cur);
        bson_destroy(opts);
        mongoc_database_destroy(db);
    }
    bson_strfreev(dbs);
    return ok;
}

bool copy_list_collections(mongoc_client_t *client, const nsfilter *filter, copy_collection **out, size_t *n, char *err,
                           size_t errlen)
{
    plan p = {NULL, 0, 0};
    *out = NULL;
    *n = 0;
    if (!copy_plan_collections(client, filter, COPY_BUCKETS_TAKE, &p, err, errlen)) {
        free(p.items);
        return false;
    }
    copy_collection *c = p.n > 0 ? calloc(p.n, sizeof *c) : NULL;
    if (p.n > 0 && c == NULL) {
        free(p.items);
        snprintf(err, errlen, "out of memory listing collections");
        return false;
    }
    for (size_t i = 0; i < p.n; i++) {
        const plan_item *it = &p.items[i];
        bool buckets = strncmp(it->coll, COPY_BUCKETS_PREFIX, COPY_BUCKETS_PREFIX_LEN) == 0;
        snprintf(c[i].db, sizeof c[i].db, "%s", it->db);
        snprintf(c[i].coll, sizeof c[i].coll, "%s", buckets ? it->coll + COPY_BUCKETS_PREFIX_LEN : it->coll);
        if (buckets) {
            /* a time-series collection: listed by its own name, read through its buckets (a viewless one's are the
             * collection itself, read with rawData: true) */
            c[i].ts = true;
            c[i].viewless = it->viewless;
            snprintf(c[i].buckets, sizeof c[i].buckets, "%s", it->coll);
            snprintf(c[i].ts_time, sizeof c[i].ts_time, "%s", it->ts ? it->ts_time : "");
            snprintf(c[i].ts_meta, sizeof c[i].ts_meta, "%s", it->ts ? it->ts_meta : "");
        }
    }
    free(p.items);
    *out = c;
    *n = p.n;
    return true;
}

/* The copy_state row and one copy_progress row per collection, in one transaction. */
bool copy_plan_store(pgconn *pg, const char *service, const run_ctx *rc, const plan *p, char *err, size_t errlen)
{
    const op_pos *start = &rc->start;
    char m[ERRLEN];
    if (!copy_pg_exec(pg, "BEGIN", m, sizeof m, NULL))
        goto fail;
    char sec[24], inc[24], term[24];
    snprintf(sec, sizeof sec, "%u", start->secs);
    snprintf(inc, sizeof inc, "%u", start->inc);
    snprintf(term, sizeof term, "%lld", (long long)start->term);
    const char *sp[4] = {service, sec, inc, term};
    PGresult *r = copy_query_params(pg,
                                    "INSERT INTO oplog2pg.copy_state (service, start_sec, start_inc, start_term) "
                                    "VALUES ($1, $2, $3, $4)",
                                    4, sp, NULL, NULL, 0);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    for (size_t i = 0; ok && i < p->n; i++) {
        char est[24];
        snprintf(est, sizeof est, "%lld", (long long)p->items[i].estimate);
        /* a time-series collection's options with it: a resumed copy needs them even once it is dropped */
        const plan_item *it = &p->items[i];
        const char *pp[7] = {service,
                             it->db,
                             it->coll,
                             est,
                             it->has_uuid ? (const char *)it->uuid : NULL,
                             it->ts ? it->ts_time : NULL,
                             it->ts && it->ts_meta[0] != '\0' ? it->ts_meta : NULL};
        const int lens[7] = {0, 0, 0, 0, 16, 0, 0}, fmts[7] = {0, 0, 0, 0, 1, 0, 0};
        r = copy_query_params(pg,
                              "INSERT INTO oplog2pg.copy_progress (service, db, coll, total_estimate, uuid, ts_time, "
                              "ts_meta) VALUES ($1, $2, $3, $4, $5::bytea, $6, $7)",
                              7, pp, lens, fmts, 0);
        ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
    }
    if (ok && rc->nshards > 0 && !copy_shards_store(pg, service, rc, m, sizeof m)) {
        PGresult *rb = copy_query(pg, "ROLLBACK");
        PQclear(rb);
        goto fail;
    }
    if (!ok) {
        snprintf(m, sizeof m, "%s", copy_pg_error(pg));
        copy_trim_nl(m);
        PGresult *rb = copy_query(pg, "ROLLBACK");
        PQclear(rb);
        goto fail;
    }
    if (!copy_pg_exec(pg, "COMMIT", m, sizeof m, NULL))
        goto fail;
    return true;
fail:
    snprintf(err, errlen, "recording the copy plan of service %s: %s", service, m);
    return false;
}

/*
 * docload.c — see docload.h.
 */
#include "docload.h"

#include <mongoc/mongoc.h>

void docload_range(trial *t, const char *db, uint64_t first, uint64_t last, docload_maker make, void *ctx)
{
    enum { BATCH = 200 };
    static bson_t docs[BATCH];
    const bson_t *ptrs[BATCH];
    mongoc_collection_t *coll = mongoc_client_get_collection(t->client, db, "c0");
    for (uint64_t id = first; id <= last;) {
        size_t nb = 0;
        for (; nb < BATCH && id <= last; nb++, id++) {
            make(&docs[nb], id, ctx);
            ptrs[nb] = &docs[nb];
        }
        bson_error_t err;
        bool ok = mongoc_collection_insert_many(coll, ptrs, nb, NULL, NULL, &err);
        for (size_t i = 0; i < nb; i++)
            bson_destroy(&docs[i]);
        if (!ok)
            bench_die("inserting into %s.c0: %s", db, err.message);
    }
    mongoc_collection_destroy(coll);
}

static void make_sized(bson_t *d, uint64_t id, void *ctx)
{
    docgen_sized_doc(d, ((const docload_sized *)ctx)->size, id);
}

void docload_sized_range(trial *t, const docload_sized *l, uint64_t first, uint64_t last)
{
    docload_range(t, l->db, first, last, make_sized, (void *)l);
}

void docload_write_sized(trial *t, const void *ctx)
{
    const docload_sized *l = ctx;
    docload_sized_range(t, l, 1, l->n);
    bench_exec_sql(t->pg, "CHECKPOINT");
}

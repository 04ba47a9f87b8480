/*
 * idscan.c — every _id of a collection in _id order (see source/idscan.h).
 */
#include "source/idscan.h"

#include <stdio.h>

#include "source/mongo_client.h"

apply_status idscan_collection(mongoc_client_t *client, const char *db, const char *coll, const idscan_opts *o,
                               idscan_fn each, void *arg, uint64_t *n, bool *stopped, char *why, size_t whylen)
{
    *n = 0;
    *stopped = false;
    if (why && whylen)
        why[0] = '\0';
    mongoc_collection_t *c = mongoc_client_get_collection(client, db, coll);
    bson_t filter = BSON_INITIALIZER;
    bson_t *opts = BCON_NEW("projection", "{", "_id", BCON_INT32(1), "}", "sort", "{", "_id", BCON_INT32(1), "}",
                            "batchSize", BCON_INT32(IDSCAN_BATCH));
    if (o != NULL && o->majority)
        BCON_APPEND(opts, "readConcern", "{", "level", BCON_UTF8("majority"), "}");
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(c, &filter, opts, NULL);
    const bson_t *doc;
    apply_status st = APPLY_OK;
    while (mongoc_cursor_next(cur, &doc)) {
        bson_iter_t it;
        if (!bson_iter_init_find(&it, doc, "_id")) {
            /* every document has one: a reply without it is not understood, and nothing is deleted on it */
            snprintf(why, whylen, "a document of %s.%s came without its _id", db, coll);
            st = APPLY_RETRY;
            break;
        }
        if (++*n % IDSCAN_BATCH == 0 && o != NULL && o->tick != NULL && !o->tick(o->tick_arg)) {
            snprintf(why, whylen, "stopping before the scan of %s.%s ended", db, coll);
            st = APPLY_RETRY;
            break;
        }
        if (!each(arg, bson_iter_value(&it))) {
            *stopped = true;
            break;
        }
    }
    bson_error_t e;
    if (st == APPLY_OK && !*stopped && mongoc_cursor_error(cur, &e)) {
        snprintf(why, whylen, "reading the _ids of %s.%s: %s", db, coll, e.message);
        st = mongo_error_refused(&e) ? APPLY_CONFIG : APPLY_RETRY;
    }
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    bson_destroy(&filter);
    mongoc_collection_destroy(c);
    return st;
}

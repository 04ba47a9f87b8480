/*
 * oplog_edge.c — see oplog_edge.h.
 */
#include "source/oplog_edge.h"

#include <stdio.h>

bool oplog_edge(mongoc_client_t *client, int natural, op_pos *out, bool *found, char *err, size_t errlen)
{
    mongoc_collection_t *oplog = mongoc_client_get_collection(client, "local", "oplog.rs");
    bson_t filter = BSON_INITIALIZER;
    bson_t *opts = BCON_NEW("sort", "{", "$natural", BCON_INT32(natural), "}", "limit", BCON_INT64(1));
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, &filter, opts, NULL);
    const bson_t *doc;
    bson_iter_t it;
    bson_error_t e;
    *found = false;
    if (mongoc_cursor_next(cur, &doc) && bson_iter_init_find(&it, doc, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        bson_iter_timestamp(&it, &out->secs, &out->inc);
        out->term = -1;
        if (bson_iter_init_find(&it, doc, "t") && BSON_ITER_HOLDS_NUMBER(&it))
            out->term = bson_iter_as_int64(&it);
        *found = true;
    }
    bool ok = !mongoc_cursor_error(cur, &e);
    if (!ok)
        snprintf(err, errlen, "reading the %s oplog entry: %s", natural < 0 ? "newest" : "oldest", e.message);
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    bson_destroy(&filter);
    mongoc_collection_destroy(oplog);
    return ok;
}

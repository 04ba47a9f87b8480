/*
 * oplogutil.c — see oplogutil.h.
 */
#include "oplogutil.h"

#include <stdlib.h>

bool oplogutil_newest_ts(mongoc_client_t *client, uint64_t *ts, bson_error_t *err)
{
    mongoc_collection_t *oplog = mongoc_client_get_collection(client, "local", "oplog.rs");
    bson_t filter = BSON_INITIALIZER;
    bson_t *opts = BCON_NEW("sort", "{", "$natural", BCON_INT32(-1), "}", "limit", BCON_INT64(1));
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, &filter, opts, NULL);
    const bson_t *doc;
    bson_iter_t it;
    *ts = 0;
    if (mongoc_cursor_next(cur, &doc) && bson_iter_init_find(&it, doc, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        uint32_t t, i;
        bson_iter_timestamp(&it, &t, &i);
        *ts = (uint64_t)t << 32 | i;
    }
    bool ok = !mongoc_cursor_error(cur, err);
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    bson_destroy(&filter);
    mongoc_collection_destroy(oplog);
    return ok;
}

uint64_t oplogutil_checkpoint_ts(PGconn *pg, const char *service)
{
    const char *params[1] = {service};
    PGresult *r = PQexecParams(pg, "SELECT ts_sec, ts_inc FROM oplog2pg.checkpoint WHERE service = $1", 1, NULL, params,
                               NULL, NULL, 0);
    uint64_t ts = 0;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
        ts = (uint64_t)strtoull(PQgetvalue(r, 0, 0), NULL, 10) << 32 | strtoull(PQgetvalue(r, 0, 1), NULL, 10);
    PQclear(r);
    return ts;
}

bool oplogutil_is_mongosim(mongoc_client_t *client)
{
    bson_t *cmd = BCON_NEW("buildInfo", BCON_INT32(1));
    bson_t reply;
    bson_error_t err;
    bson_iter_t it;
    bool yes = mongoc_client_command_simple(client, "admin", cmd, NULL, &reply, &err) &&
               bson_iter_init_find(&it, &reply, "mongosim") && bson_iter_as_bool(&it);
    bson_destroy(&reply);
    bson_destroy(cmd);
    return yes;
}

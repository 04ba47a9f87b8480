/*
 * oplogutil.c — see oplogutil.h.
 */
#include "oplogutil.h"

#include "source/oplog_edge.h"

#include <stdlib.h>

bool oplogutil_newest_ts(mongoc_client_t *client, uint64_t *ts, bson_error_t *err)
{
    op_pos p;
    bool found;
    char msg[512];
    *ts = 0;
    if (!oplog_edge(client, -1, &p, &found, msg, sizeof msg)) {
        bson_set_error(err, 0, 0, "%s", msg);
        return false;
    }
    if (found)
        *ts = (uint64_t)p.secs << 32 | p.inc;
    return true;
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

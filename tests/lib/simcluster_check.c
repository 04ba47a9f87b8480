/*
 * simcluster_check.c — the helpers of simcluster.h that fail a Check test (ck_assert): apart from simcluster.c so
 * that the benchmarks, which start a cluster but link no Check, do not pull them in.
 */
#include "simcluster.h"

#include <check.h>

void simcluster_cmd_ok(mongoc_client_t *c, const char *db, bson_t *cmd, bson_t *reply)
{
    bson_error_t err;
    bson_t tmp;
    bool ok = mongoc_client_command_simple(c, db, cmd, NULL, reply ? reply : &tmp, &err);
    char *js = bson_as_relaxed_extended_json(cmd, NULL);
    ck_assert_msg(ok, "%s failed: %s (code %u)", js, err.message, err.code);
    bson_free(js);
    bson_destroy(cmd);
    if (!reply)
        bson_destroy(&tmp);
}

void simcluster_txn_inc_two(mongoc_client_t *router, int64_t a, int64_t b, bool commit_twice)
{
    bson_error_t err;
    mongoc_client_session_t *s = mongoc_client_start_session(router, NULL, &err);
    ck_assert_msg(s, "%s", err.message);
    ck_assert_msg(mongoc_client_session_start_transaction(s, NULL, &err), "%s", err.message);
    mongoc_collection_t *coll = mongoc_client_get_collection(router, "db", "c");
    bson_t opts = BSON_INITIALIZER;
    ck_assert(mongoc_client_session_append(s, &opts, &err));
    int64_t ids[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        bson_t *q = BCON_NEW("_id", BCON_INT64(ids[i])), *u = BCON_NEW("$inc", "{", "v", BCON_INT32(1), "}");
        ck_assert_msg(mongoc_collection_update_one(coll, q, u, &opts, NULL, &err), "%s", err.message);
        bson_destroy(q);
        bson_destroy(u);
    }
    bson_t reply;
    ck_assert_msg(mongoc_client_session_commit_transaction(s, &reply, &err), "commit: %s", err.message);
    bson_destroy(&reply);
    if (commit_twice) {
        ck_assert_msg(mongoc_client_session_commit_transaction(s, &reply, &err), "commit again: %s", err.message);
        bson_destroy(&reply);
    }
    bson_destroy(&opts);
    mongoc_collection_destroy(coll);
    mongoc_client_session_destroy(s);
}

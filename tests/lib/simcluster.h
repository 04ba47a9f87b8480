/*
 * simcluster.h — a sharded mongosim (`mongosim --shards N`, tests/mongosim/README.md "Sharded cluster") for
 * integration tests and benchmarks: start it, find its shards (listShards through the router), build the URIs a
 * test or the daemon connects with, stop it.
 */
#ifndef OPLOG2PG_TESTS_SIMCLUSTER_H
#define OPLOG2PG_TESTS_SIMCLUSTER_H

#include <stdbool.h>
#include <stddef.h>

#include "proc.h"

#define SIMCLUSTER_MAX 16

typedef struct {
    proc_handle proc;
    int router_port;
    size_t n;                    /* shards in config.shards now (removed ones leave it) */
    char id[SIMCLUSTER_MAX][32]; /* "shard0", ... */
    int port[SIMCLUSTER_MAX];    /* each shard's own port */
} simcluster;

/* Starts <build>/mongosim --shards nshards --port 0 [extra_args...] (NULL-terminated, may be NULL; e.g.
 * "--orphan-cleanup-delay", "1", "--noop-interval", "10") and reads its shards. stderr goes to log_path when
 * non-NULL. */
bool simcluster_start(size_t nshards, const char *const *extra_args, const char *log_path, simcluster *out, char *err,
                      size_t errlen);
/* Reads listShards again (after mongosimAddShard or removeShard). */
bool simcluster_refresh(simcluster *c, char *err, size_t errlen);
/* mongodb://127.0.0.1:ROUTER/ */
void simcluster_router_uri(const simcluster *c, char *out, size_t n);
/* mongodb://127.0.0.1:PORT/?replicaSet=shardK for the k-th shard of config.shards. */
void simcluster_shard_uri(const simcluster *c, size_t k, char *out, size_t n);
void simcluster_stop(simcluster *c);

/* ---- helpers of the Check tests that drive a sharded mongosim through libmongoc (simcluster_check.c) ---- */

#include <mongoc/mongoc.h>

/* Runs cmd (destroyed) on db; a failure fails the test with the command's JSON. reply, when not NULL, gets the
 * reply (the caller destroys it). */
void simcluster_cmd_ok(mongoc_client_t *c, const char *db, bson_t *cmd, bson_t *reply);
/* One driver transaction through the router: {$inc: {v: 1}} on _id a and on _id b of db.c (int64 _ids), committed;
 * with commit_twice the commit is sent again, as drivers retry it, and must succeed too. */
void simcluster_txn_inc_two(mongoc_client_t *router, int64_t a, int64_t b, bool commit_twice);

#endif

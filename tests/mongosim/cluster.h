/*
 * cluster.h — mongosim as a sharded cluster (mongosim --shards N): one process and one libev loop serving a router
 * (mongos) with the config server's metadata inside it, and N shards shard0..shardN-1, each today's one-member replica
 * set (a sim_server) of its own set name on its own port, with its own oplog. One cluster clock stamps every shard's
 * entries. See README.md ("Sharded cluster") for what the router answers.
 */
#ifndef MONGOSIM_CLUSTER_H
#define MONGOSIM_CLUSTER_H

#include <bson/bson.h>
#include <stddef.h>

#include "server.h"

struct ev_loop;

typedef struct sim_cluster sim_cluster;

/* opts: the router's port and bind address, and what every shard shares (format, noop interval, oplog cap,
 * verbose); shards listen on free ports. orphan_delay: seconds before a donor deletes a migrated range. */
sim_cluster *sim_cluster_new(const sim_options *opts, size_t nshards, double orphan_delay, struct ev_loop *loop,
                             bson_error_t *err);
int sim_cluster_port(const sim_cluster *cl);
void sim_cluster_handle_signals(sim_cluster *cl);
void sim_cluster_run(sim_cluster *cl);
void sim_cluster_free(sim_cluster *cl);

#endif

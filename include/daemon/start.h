/*
 * start.h — where a run starts: the one place that decides the position the first session tails from.
 *
 * Every session of `run` starts at the committed checkpoint, and nowhere else; so before the first session this
 * module makes sure the checkpoint is the position the user asked for, committing it through the fenced sink:
 *   - a service with a checkpoint and no flag: nothing to do;
 *   - --reimport: forget the checkpoint and the copy, empty or drop the tables, then as for a new service;
 *   - a new service: the initial copy (source/copy.h) runs or resumes, and its start (the newest entry noted before
 *     the copy read anything) becomes the checkpoint;
 *   - --skip-import without a checkpoint: the newest oplog entry becomes the checkpoint (waiting for one if the
 *     oplog is empty);
 *   - --tail-from POS: the last entry before POS becomes the checkpoint (POS must still be in the oplog).
 * A sharded cluster keeps one checkpoint per shard (oplog2pg.shard_checkpoint) beside the service's cluster time:
 * --skip-import puts each shard's at its newest entry and the cluster time at the newest of them; --tail-from puts
 * each shard's at its last entry before POS (each shard's oplog must still hold POS) and the cluster time just
 * before POS. The initial copy of a sharded cluster reads through the routers and notes each shard's newest entry
 * as its start (copy/copy.h); when it is done each shard's start becomes its checkpoint row, then the oldest of them
 * the cluster time.
 * With a change stream as the source, the positions are clusterTimes and the oplog is never read (change_stream
 * below).
 * Careful mode, reconnects and restarts after kill -9 then all resume from that one committed position.
 */
#ifndef OPLOG2PG_DAEMON_START_H
#define OPLOG2PG_DAEMON_START_H

#include <stdatomic.h>

#include "core/nsfilter.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "sink/pg.h"

typedef struct {
    const config *cfg;
    const daemon_options *opts;
    sink *snk; /* connected */
    const nsfilter *filter;
    const atomic_bool *copy_cancel;
    /* The initial copy's progress, about every 50 ms (see copy_config.tick). */
    void (*tick)(void *arg, int64_t copied, int64_t estimate, size_t collections_left);
    void *tick_arg;
    /* The URI names a sharded cluster's routers: the start positions are each shard's (daemon/cluster.c). */
    bool sharded;
    /* The source is a change stream (daemon/source_choice.h): no oplog is read. --skip-import starts where the stream
     * stands now, --tail-from POS just before POS (the server must still hold the stream's history from POS:
     * ChangeStreamHistoryLost stops with the resume-lost code), the initial copy takes its start and window from a
     * stream (copy_config.change_stream); where the server gave a post-batch resume token for that start, it is
     * committed with the checkpoint as the resume point. */
    bool change_stream;
} start_params;

/* Returns -1 when the first session may start (the checkpoint is in place), or the exit code to stop with. */
int start_prepare(const start_params *p);

#endif

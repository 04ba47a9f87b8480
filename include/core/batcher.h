/*
 * batcher.h — turns the stream of decoded oplog entries into flush groups: COPY-able insert runs, in-order statements
 * and one commit per group.
 *
 * Per namespace it keeps the run of consecutive inserts not yet written. The rules:
 * - any other op on a namespace (update, delete) first writes that namespace's run (trigger "conflict");
 * - any DDL first writes every run;
 * - the group commits, with the checkpoint of the last entry it covers, when it reaches batch_rows or batch_bytes
 *   ("size"), when flush_interval has passed since it opened ("timer", via batcher_tick), when the reader finds the
 *   oplog drained ("idle") and on exit ("exit");
 * - commits happen only between entries: a MongoDB transaction (an atomic applyOps) is never split;
 * - in per-op mode every entry is written and committed on its own (the baseline the benchmarks compare against);
 * - careful mode is per-op mode in which each op is guarded, and one the sink refuses as data is handed to the
 *   sink's dead_letter (the daemon uses it to step over ops PostgreSQL cannot store).
 * Writes go through a batcher_sink (the PostgreSQL sink in the daemon, a recorder in the unit tests); time comes
 * from the caller, so the rules are testable with a fake clock.
 */
#ifndef OPLOG2PG_CORE_BATCHER_H
#define OPLOG2PG_CORE_BATCHER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/op.h"
#include "sink/pg.h"

typedef enum {
    FLUSH_CONFLICT = 0, /* an update/delete/DDL met a pending insert run (writes the run; no commit) */
    FLUSH_SIZE,
    FLUSH_TIMER,
    FLUSH_IDLE,
    FLUSH_EXIT,
    FLUSH_PER_OP,
    FLUSH_TRIGGERS
} flush_trigger;

const char *flush_trigger_name(flush_trigger t);

/* Where writes go. Each returns SINK_OK or the failure (the batcher stops at the first and reports it). */
typedef struct batcher_sink {
    void *ctx;
    sink_status (*insert_batch)(void *ctx, const char *db, const char *coll, sink_batch *b, const op_pos *pos);
    sink_status (*apply)(void *ctx, const op *o); /* update, delete, DDL */
    sink_status (*commit)(void *ctx, const op_pos *pos);
    /* Careful mode only (see batcher_config.careful); may be NULL otherwise. */
    sink_status (*guard_begin)(void *ctx);
    sink_status (*guard_end)(void *ctx);
    sink_status (*dead_letter)(void *ctx, const op *o, const char *why); /* why NULL: the sink's own error */
} batcher_sink;

/* The PostgreSQL sink as a batcher_sink: careful mode sets refused ops aside (sink_dead_letter)... */
batcher_sink batcher_sink_pg(sink *s);
/* ... or, for [replication] on_error = stop, names the refused op and fails there (sink_refused). */
batcher_sink batcher_sink_pg_stop(sink *s);

typedef struct {
    uint64_t batch_rows;  /* commit when the group holds this many ops */
    uint64_t batch_bytes; /* ... or this many document bytes */
    uint64_t flush_interval_ms;
    bool per_op;
    /* Careful mode, to find and set aside ops PostgreSQL refuses: per-op, and every op but a noop is applied at
     * once inside a guard; one that fails with SINK_ERR_DATA goes to the sink's dead_letter instead. */
    bool careful;
} batcher_config;

typedef struct {
    uint64_t entries, ops[OP_TRUNCATE + 1];                     /* taken (a failed group's are counted too) */
    uint64_t committed_entries, committed_ops[OP_TRUNCATE + 1]; /* of those, committed */
    uint64_t flushes[FLUSH_TRIGGERS];
    uint64_t commits;
    uint64_t dead_letters;
    op_pos committed; /* last committed position */
} batcher_stats;

typedef struct batcher batcher;

batcher *batcher_new(const batcher_config *cfg, const batcher_sink *out);
void batcher_free(batcher *b);
void batcher_set_config(batcher *b, const batcher_config *cfg); /* reload: thresholds and timer */

/* Takes one entry (the caller keeps ownership). now_ms is the caller's monotonic clock. */
sink_status batcher_add(batcher *b, const op_entry *e, uint64_t now_ms);
/* Write every pending run and commit, if anything is uncommitted. */
sink_status batcher_flush(batcher *b, flush_trigger why);
/* When the timer should fire (monotonic ms), or UINT64_MAX when nothing waits. */
uint64_t batcher_deadline(const batcher *b);
/* Commit if the deadline has passed. */
sink_status batcher_tick(batcher *b, uint64_t now_ms);
/* Forget everything not committed (after a failure: the caller resumes from the committed checkpoint). */
void batcher_reset(batcher *b);
/* Anything not yet committed (including a position moved by noops)? */
bool batcher_dirty(const batcher *b);
/* Position of the last entry taken (committed or not); valid after the first entry. */
const op_pos *batcher_last(const batcher *b);
const batcher_stats *batcher_get_stats(const batcher *b);

#endif

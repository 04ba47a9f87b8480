/*
 * apply_internal.h — the state of the apply loop (daemon/apply.c), shared with what reports on it (daemon/report.c:
 * the metrics snapshot, the STATUS line systemd shows, the progress line in the log, READY=1). Not a public header:
 * only those two files include it.
 */
#ifndef OPLOG2PG_DAEMON_APPLY_INTERNAL_H
#define OPLOG2PG_DAEMON_APPLY_INTERNAL_H

#include <ev.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/batcher.h"
#include "core/nsfilter.h"
#include "core/queue.h"
#include "daemon/config.h"
#include "daemon/metrics.h"
#include "daemon/source_choice.h"
#include "daemon/window_probe.h"
#include "sink/pg.h"
#include "source/dump/dump.h"
#include "source/oplog/reader.h"
#include "source/stream/stream.h"

typedef enum {
    END_NONE = 0,
    END_STOP,     /* SIGTERM/SIGINT: flush, commit, exit 0 */
    END_FINISHED, /* the source has nothing more (replay): flush, commit, exit 0 */
    END_FATAL,    /* exit with exit_code */
    END_RETRY,    /* a passing fault: new session from the committed checkpoint after a backoff */
    END_CAREFUL,  /* PostgreSQL refused an op: new session from the checkpoint, stepping over refused ops */
    END_REWIND,   /* an insert met a duplicate where none was expected: new session from the checkpoint, at once */
    END_RESHARD,  /* a sharded cluster gained a shard: new session from the checkpoints, at once, reading it too */
} session_end;

typedef struct cluster cluster;

/* How far a careful or isolating stretch reaches (bound.c): through the last entry taken when its group failed. On a
 * sharded cluster a merged position bounds nothing: an entry that changes nothing (a migration's copy, a note) is
 * handed on ahead of older entries of the other shards (core/merge.h), and the merged position may pass an entry of
 * another shard not applied yet. There the stretch reaches, shard by shard, each one's own last entry taken. */
typedef struct bound_shard {
    char *id;
    op_pos pos;
} bound_shard;
typedef struct stream_bound {
    op_pos until;       /* the merged stream's last entry taken */
    bound_shard *shard; /* a sharded cluster's shards (n of them), NULL otherwise */
    size_t n;
} stream_bound;

typedef struct {
    config *cfg;
    const char *config_path;
    const char *dump_path; /* replay: the dump; NULL for run */
    struct ev_loop *loop;
    ev_async wake;
    ev_timer flush_timer, progress_timer, tick_timer;
    ev_io sig_io, pg_io;

    nsfilter *filter;
    sink *snk;
    batcher *bt;
    queue *q;
    reader *rd;
    stream_reader *srd; /* the change-stream reader, when the source is a change stream */
    /* The reader (or stream reader) of the session before and its queue, when that session ended for one that starts
     * again at once (END_CAREFUL, END_REWIND): asked to stop, not waited for (a getMore under way ends by itself, up to
     * its await), and joined and freed at the next session's end. NULL when none. */
    reader *old_rd;
    stream_reader *old_srd;
    queue *old_q;
    dump_reader *dump;
    /* A sharded cluster (cluster.c): known once the configured URI was asked (`hello`); then each session reads its
     * shards through `cl` (one reader and queue per shard, merged) instead of `rd` and `q`. */
    bool topology_known, sharded;
    /* The source [mongodb] source resolved to (daemon/source_choice.h), decided once, before the first session: a
     * change stream is read by `srd` (through the routers, on a sharded cluster) instead of `rd` or `cl`. */
    bool source_known;
    source_kind source;
    cluster *cl;
    ev_timer merge_timer;     /* the merge's next nudge (cluster_deadline) */
    bool notes_refused_shown; /* a shard refused oplog notes, and the activity `status` shows says so */
    bool drain_shown;         /* the activity `status` shows names a removed shard being drained */
    char reshard_for[64];     /* the shard a session was started again for (a migration to it): "" when none */

    session_end end;
    int exit_code;
    uint64_t applied_at_last_progress;
    ev_tstamp last_progress;
    bool in_session; /* the loop of a session is running (the wait hook must not act, only note) */

    /* Careful mode ([replication] on_error = dead-letter): after PostgreSQL refused an op, the next sessions apply
     * the entries through careful_until one at a time and set refused ones aside (see batcher.h). */
    bool careful;
    stream_bound careful_until;
    /* ...and when the failure named its op's entry (careful_from), the entries before it are known good: a careful
     * session applies them batched, commits, and steps one at a time only from there (careful_ahead true until it
     * gets there). A failure before it sends the next session one at a time from the checkpoint. */
    bool careful_ahead;
    op_pos careful_from;
    uint32_t ahead_tries;       /* sessions in a row that met the refusal before careful_from */
    op_pos last_taken;          /* the last entry handed to the batcher */
    uint16_t last_taken_source; /* ...and its source (op_entry.source) */
    bool last_taken_changes;    /* ...and whether it changes data (an op other than a noop, or a transaction's part);
                                   careful sessions only */
    /* A bound on the tables of a flush group below batch_tables, set when PostgreSQL ran out of shared memory (its
     * lock table full) in a group: half the tables that group had written to, until a reload (0: none).
     * tables_logged: the bound last logged; tables_hinted: a group committed at that bound was logged. */
    uint64_t tables_cap, tables_logged;
    bool tables_hinted;
    /* After PostgreSQL ran out of shared memory in a group of several entries: the entries up to isolate_until go
     * one to a group (per-op commits), so that one too large for the lock table shows itself alone. */
    bool isolating;
    stream_bound isolate_until;
    /* The same failure again and again (see same_failure_again): its SQLSTATE, the op's position (or, when the sink
     * named none, the message), and how many sessions in a row it ended. */
    char repeat_state[6];
    bool repeat_has_pos;
    op_pos repeat_pos;
    char repeat_msg[256];
    op_pos repeat_committed; /* the checkpoint when it last failed: unmoved, it is the same stuck group */
    uint64_t repeat_count;
    char retry_reason[SINK_ACTIVITY_MAX + 1]; /* why the last session ended for a retry, for the activity */
    /* 1 + the session's commits when the last idle marker was taken; 0: none yet (see behind()) */
    uint64_t idle_after;

    /* What systemd, `status` and the metrics see. */
    bool ready_sent;   /* READY=1 went out */
    bool session_live; /* the source has answered in this session */
    bool caught_up;    /* the last queue item was an idle marker and everything is committed */
    op_pos committed;  /* the committed checkpoint (from PostgreSQL at session start, then from the batcher) */
    uint64_t entries_at_tick, reader_seen_at_tick;
    ev_tstamp last_tick, reader_quiet_since;
    double rate;        /* entries applied per second over the last tick */
    bool memory_used;   /* entries were applied since free memory was last handed back (memory_release) */
    double wait_logged; /* the wait on PostgreSQL already logged, by its start time */
    double stop_seen;   /* when a wait on PostgreSQL first saw the stop request (0: not yet) */
    bool cancel_sent;   /* the statement kept waiting past STOP_GRACE_S was cancelled */
    metrics_server *metrics;
    window_probe *wprobe;    /* the oplog window the metrics show (daemon/window_probe.h); NULL without metrics */
    metrics_snapshot totals; /* counters of the sessions that ended (the running one is added at publish time) */
    uint64_t pg_reconnects;
    /* [mongodb] delete_reconcile (reconcile.c): its timer, and the passes and rows deleted so far */
    ev_timer reconcile_timer;
    uint64_t reconcile_passes, reconcile_deleted;
    int64_t copy_copied, copy_estimate;
    atomic_bool copy_cancel;
} daemon_ctx;

/* ---- apply.c ---- */

/* The queues' notify: wakes the loop (ev_async_send). */
void apply_notify_wake(void *arg);

/* ---- bound.c ---- */

#define BOUND_STRLEN 512 /* bound_format's buffer: longer ones are cut */

/* Sets *b to reach through what the session has taken so far (d->last_taken, and on a cluster every shard's last
 * entry taken), cut at failed_at (the entry of the op that failed, when known: NULL otherwise) when that is past the
 * committed checkpoint. False when memory runs out (*b is then empty, as bound_clear leaves it). */
bool bound_set(daemon_ctx *d, stream_bound *b, const op_pos *failed_at);
/* Everything through *b is committed: the merged position (one source), or every shard's own one (a cluster). With
 * session_start, before anything is taken: the checkpoints the session resumed after. */
bool bound_reached(const daemon_ctx *d, const stream_bound *b, const op_pos *session_start);
/* The bound for a log line: the merged position, then each shard's ("… (shard 'a' through …, shard 'b' through …)"). */
const char *bound_format(const stream_bound *b, char *buf, size_t len);
void bound_clear(stream_bound *b);

/* ---- reconcile.c ---- */

/* One delete reconciliation, between flush groups (everything committed, nothing applied until it returns). A
 * failure of PostgreSQL is returned as the sink's (the session ends); one of MongoDB is logged and the pass is tried
 * again at the next interval (APPLY_OK). */
apply_status reconcile_pass(daemon_ctx *d);

/* ---- cluster.c ---- */

/* Asks the configured URI's server whether it is a sharded cluster's router: 1 answered (*is_router), 0 a passing
 * failure (unreachable: try again), -1 one a person must fix (err says which). */
int cluster_detect(const config *cfg, bool *is_router, char *err, size_t errlen);
/* The session's shards, read from config.shards, each with its reader (from its checkpoint row, or after
 * cluster_pos), queue and note writer, and their merge. NULL with err, and *fatal set when retrying cannot help. */
cluster *cluster_start(daemon_ctx *d, const op_pos *cluster_pos, int *fatal, char *err, size_t errlen);
/* A shard listed in config.shards now that this session does not read (its id into id): the session must start
 * again to read it. */
bool cluster_shard_added(cluster *c, char *id, size_t idlen);
/* Stops the readers (items already queued stay). */
void cluster_stop(cluster *c);
void cluster_free(cluster *c);
/* Up to max items of the merged stream (core/merge.h merge_take). */
size_t cluster_take(cluster *c, queue_item *out, size_t max);
/* Removed shards (config.shards no longer lists them; cluster.c NOTES): retires each one the merge has handed on to
 * its end (merge_retire_source, its reader and note writer stopped; nothing of it is handed on any more), and asks a
 * note of one that has not shown its end yet. From the apply loop, now and then. True when it retired one. */
bool cluster_drain_step(cluster *c);
/* A retired shard whose checkpoint row is still to be deleted (source index and id), once everything taken is
 * committed; cluster_row_deleted when done. */
bool cluster_retired_row(const cluster *c, size_t *i, const char **id);
void cluster_row_deleted(cluster *c, size_t i);
typedef struct cluster_drain_info {
    bool gone;    /* config.shards no longer lists it */
    bool has_end; /* end: the newest entry of its oplog when seen gone, up to which it is applied */
    op_pos end;
    bool retired;    /* read to its end */
    char error[256]; /* why its end cannot be read ("" when none) */
} cluster_drain_info;
/* Shard i is removed from the cluster (*out says how far its drain is); false when it is not. */
bool cluster_draining(cluster *c, size_t i, cluster_drain_info *out);
/* Nothing is queued in any shard's queue (what the merge holds after a take waits on another shard's progress: it is
 * not a backlog). */
bool cluster_drained(const cluster *c);
/* queue_release on every shard's queue. */
void cluster_release(cluster *c);
/* When cluster_take must run again for a nudge (monotonic ms), UINT64_MAX when none. */
uint64_t cluster_deadline(const cluster *c);
size_t cluster_queued_ops(const cluster *c);
/* The shards' readers' counters, summed (txn_oldest: the oldest of them). */
void cluster_reader_totals(const cluster *c, reader_stats *sum);

typedef struct cluster_shard_info {
    const char *id;
    const char *uri; /* its replica set's (where the window probe reads its oplog) */
    bool has_read;
    op_pos read_last;   /* the last entry its reader pushed */
    uint64_t waited_ms; /* how long the merge has waited on it in all */
    bool holding;       /* the merge waits on it now */
    uint64_t nudges;    /* notes asked of it */
    uint64_t notes;     /* notes it wrote */
    bool notes_refused; /* it refused appendOplogNote (the privilege) */
    uint64_t entries;   /* its entries handed on */
} cluster_shard_info;
size_t cluster_shard_count(const cluster *c);
/* The session reads the shard of that id. */
bool cluster_has_shard(const cluster *c, const char *id);
bool cluster_shard_report(const cluster *c, size_t i, cluster_shard_info *out);
/* Shard `id` as this session reads it: its index, the position its reading began after (everything of it through
 * there is committed), and whether it is retired (read to its end). False when the session does not read it. */
bool cluster_shard_place(const cluster *c, const char *id, size_t *i, op_pos *start, bool *retired);

/* ---- report.c ---- */

/* Brings d->committed up to the batcher's last commit (it starts as the checkpoint read at session start). */
void report_refresh_committed(daemon_ctx *d);
/* Folds the ending session's counters into the totals (the batcher and source go away with it). */
void report_close_session(daemon_ctx *d);
/* Publishes the counters of the whole run so far to the metrics endpoint, when there is one. */
void report_publish(daemon_ctx *d);
/* The source answered (an entry or an idle marker): READY=1 the first time. */
void report_live(daemon_ctx *d);
/* The tick: report_snapshot takes the counters (and publishes them), report_status then sets the rate and the STATUS
 * line from them. */
void report_snapshot(daemon_ctx *d, metrics_snapshot *m);
void report_status(daemon_ctx *d, ev_tstamp now, const metrics_snapshot *m);
/* The progress line in the log. */
void report_progress(daemon_ctx *d, ev_tstamp now);

#endif

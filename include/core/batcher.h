/*
 * batcher.h — turns the stream of decoded oplog entries into flush groups: COPY-able insert runs, in-order statements
 * and one commit per group.
 *
 * Per namespace it keeps the run of inserts not yet written. The rules:
 * - an update or delete on a key the namespace's run holds first writes that run (trigger "conflict"); one on
 *   another key is written at once, ahead of the run, which grows on ("commuted": different rows of one table, in
 *   one transaction); a run holding a row without key text (op.id_key NULL: typed maps) conflicts with every op;
 * - any DDL first writes every run;
 * - a run never holds more than batch_bytes (plus one row): before it would, it is written, or, when the sink can
 *   let go of rows it has already sent (run_let_go: a streaming COPY), they are let go and the run grows on;
 * - the group commits, with the checkpoint of the last entry it covers, when it reaches batch_rows or batch_tables,
 *   or its runs hold batch_bytes ("size"), when flush_interval has passed since it opened ("timer", via
 *   batcher_tick; catchup_interval while the caller is behind: entries already wait), when the reader finds the
 *   oplog drained ("idle") and on exit ("exit");
 * - commits happen only between entries: a MongoDB transaction (an atomic applyOps) is never split; nor between the
 *   parts of one logical entry (op_entry.more, core/op.h): while a part with `more` was the last taken, no trigger
 *   commits (runs may still be written, uncommitted, to keep memory bounded) and there is no deadline; the last part
 *   ends that, and the usual rules apply again;
 * - nor right after an entry with no_commit (op_entry.no_commit: the merge of several sources hands on part of a
 *   transaction across them): as after a part with `more`, no trigger commits and there is no deadline while such an
 *   entry was the last taken (batcher_in_parts and batcher_entry_tables are not affected: they speak of `more`);
 * - the commit carries the hold of the last entry taken (op_entry.hold) to the sink's set_hold, when it has one;
 * - the commit carries the resume token of the last entry taken that had one (op_entry.token: a change stream's) to
 *   the sink's set_token; the batcher keeps its own copy (entries are freed after batcher_add), and batcher_reset
 *   brings it back to the one the last commit covered;
 * - per source (op_entry.source) the batcher keeps the position and hold of the last entry taken from it, and hands
 *   them to the sink's set_sources just before each commit (batcher_source_pos); after a failure, batcher_reset
 *   brings them back to what the last commit covered;
 * - in per-op mode every entry is written and committed on its own (the baseline the benchmarks compare against);
 * - careful mode is per-op mode in which each op is guarded, and one the sink refuses as data is handed to the
 *   sink's dead_letter (the daemon uses it to step over ops PostgreSQL cannot store).
 * Writes go through a batcher_sink (sink/batcher_pg.h in the daemon, a recorder in the unit tests): the batcher
 * knows nothing of PostgreSQL, and an insert run is an opaque handle that the sink encodes rows into. Time comes
 * from the caller, so the rules are testable with a fake clock.
 *
 * An op whose text could not be made (op.refusal, set on the reader thread) is reported as APPLY_DATA with that
 * reason, before anything is sent for it.
 */
#ifndef OPLOG2PG_CORE_BATCHER_H
#define OPLOG2PG_CORE_BATCHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/op.h"
#include "core/status.h"

typedef enum {
    FLUSH_CONFLICT = 0, /* an update/delete/DDL met a pending insert run (writes the run; no commit) */
    FLUSH_SIZE,         /* batch_rows or batch_bytes */
    FLUSH_TIMER,
    FLUSH_IDLE,
    FLUSH_EXIT,
    FLUSH_PER_OP,
    FLUSH_TABLES, /* batch_tables: the group wrote to as many namespaces as its locks may cover */
    FLUSH_TRIGGERS
} flush_trigger;

/* The trigger's name, as the label of oplog2pg_flushes_total{trigger=...} (daemon/metrics.c). */
const char *flush_trigger_name(flush_trigger t);

/* One source's position, as a commit covers it: index = op_entry.source. */
typedef struct batcher_source_pos {
    op_pos pos;    /* the last entry taken from that source */
    bool has_hold; /* that entry's hold (op_entry.hold) */
    op_pos hold;
    bool moved; /* an entry of that source was taken since the last commit (its position has changed) */
} batcher_source_pos;

/* Where writes go. Each call that can fail returns APPLY_OK or the failure (the batcher stops at the first and
 * reports it). */
typedef struct batcher_sink {
    void *ctx;
    /* Insert runs: rows encoded by the sink as they are added. run_add may take the op's rendered text (o->json,
     * which it then sets to NULL) rather than copy it. */
    void *(*run_new)(void *ctx);
    void (*run_free)(void *ctx, void *run);
    apply_status (*run_add)(void *ctx, void *run, op *o);
    size_t (*run_rows)(void *ctx, const void *run);
    /* The run holds batch_bytes and the next row, of entry pos, would take it past: may the sink drop the rows it
     * holds (already sent) and keep the run open? True: it did, and the run holds nothing now but still counts its
     * rows. False: the batcher writes the run. May be NULL (never). */
    bool (*run_let_go)(void *ctx, void *run, const op_pos *pos);
    /* Empties a run; keep_storage false gives its memory back. */
    void (*run_reset)(void *ctx, void *run, bool keep_storage);
    apply_status (*insert_run)(void *ctx, const char *db, const char *coll, void *run, const op_pos *pos);
    apply_status (*apply)(void *ctx, const op *o); /* update, delete, DDL */
    apply_status (*commit)(void *ctx, const op_pos *pos);
    /* Called just before each commit with the hold of the last entry taken (NULL when it has none); may be NULL. */
    void (*set_hold)(void *ctx, const op_pos *hold);
    /* Called just before each commit (beside set_hold) with the resume token of the last entry taken that carried one
     * (op_entry.token), or NULL (len 0) when no entry of the session has: the oplog. The bytes are the batcher's and
     * live until the next call into it. May be NULL. */
    void (*set_token)(void *ctx, const uint8_t *tok, size_t len);
    /* Called just before each commit (beside set_hold) with every source seen: s[i] for source i, n = the highest
     * source index seen + 1 (a source never seen has pos 0:0, no hold, moved false). May be NULL. */
    void (*set_sources)(void *ctx, const batcher_source_pos *s, size_t n);
    /* Careful mode only (see batcher_config.careful); may be NULL otherwise. */
    apply_status (*guard_begin)(void *ctx);
    apply_status (*guard_end)(void *ctx);
    apply_status (*dead_letter)(void *ctx, const op *o, const char *why); /* why NULL: the sink's own error */
} batcher_sink;

/* What a DDL op counts toward batch_tables. Making or dropping a table holds four entries of PostgreSQL's lock table
 * to the commit (the table, its key, its TOAST table and that one's index), writing to one two (the table and its
 * key). It also keeps a group of many creates from slowing as it grows: after each call that took more than a few
 * locks, PostgreSQL's portal cleanup walks every lock the transaction holds (lock.c, LockReassignCurrentOwner), and
 * 2 099 creates to a transaction cost it about a fifth of the backend's time. */
#define BATCHER_DDL_TABLES 2

typedef struct {
    uint64_t batch_rows;   /* commit when the group holds this many ops */
    uint64_t batch_bytes;  /* ... or when its runs hold this many bytes of rows (their rendered text, the raw BSON
                            * when none); an insert run is also written (or let go of) before one more row would take
                            * it past this, and a run's key set stays within a sixteenth of it */
    uint64_t batch_tables; /* ... or once it has written to this many namespaces (a DDL op counts as
                            * BATCHER_DDL_TABLES), so that its transaction's locks fit PostgreSQL's lock table; 0: no
                            * bound */
    uint64_t flush_interval_ms;
    uint64_t catchup_interval_ms; /* the group's age bound while the caller is behind (batcher_tick), if longer */
    bool per_op;
    /* Careful mode, to find and set aside ops PostgreSQL refuses: per-op, and every op but a noop is applied at
     * once inside a guard; one that fails with APPLY_DATA goes to the sink's dead_letter instead. */
    bool careful;
} batcher_config;

typedef struct {
    uint64_t entries, ops[OP_TRUNCATE + 1];                     /* taken (a failed group's are counted too) */
    uint64_t committed_entries, committed_ops[OP_TRUNCATE + 1]; /* of those, committed */
    uint64_t flushes[FLUSH_TRIGGERS];
    uint64_t commits;
    uint64_t dead_letters;
    uint64_t commuted; /* updates/deletes written ahead of a pending run of their namespace (no conflict) */
    uint64_t let_go;   /* times a streaming run let go of the rows it held instead of being written */
    op_pos committed;  /* last committed position */
} batcher_stats;

typedef struct batcher batcher;

batcher *batcher_new(const batcher_config *cfg, const batcher_sink *out);
void batcher_free(batcher *b);
void batcher_set_config(batcher *b, const batcher_config *cfg); /* reload: thresholds and timer */

/* Takes one entry (the caller keeps ownership, but an insert's rendered text may move into the sink's run: op.json
 * is NULL afterwards). now_ms is the caller's monotonic clock. */
apply_status batcher_add(batcher *b, op_entry *e, uint64_t now_ms);
/* Write every pending run and commit, if anything is uncommitted. */
apply_status batcher_flush(batcher *b, flush_trigger why);
/* When the timer should fire (monotonic ms), or UINT64_MAX when nothing waits. behind: the caller has entries waiting
 * to be taken (a backlog), so the group may live to catchup_interval rather than flush_interval: the commits a
 * backlog costs, and the COPYs they cut, are fewer, while nothing read is kept from view any longer than the
 * backlog itself keeps it. */
uint64_t batcher_deadline(const batcher *b, bool behind);
/* Commit if the deadline has passed. */
apply_status batcher_tick(batcher *b, uint64_t now_ms, bool behind);
/* Forget everything not committed (after a failure: the caller resumes from the committed checkpoint). */
void batcher_reset(batcher *b);
/* Anything not yet committed (including a position moved by noops)? */
bool batcher_dirty(const batcher *b);
/* True while the last entry taken was a part with more parts to come (op_entry.more). */
bool batcher_in_parts(const batcher *b);
/* True while the last entry taken forbids a commit after it (op_entry.more or op_entry.no_commit). */
bool batcher_commit_held(const batcher *b);
/* The per-source positions as of the last entry taken (committed or not), *n of them (see set_sources). */
const batcher_source_pos *batcher_sources(const batcher *b, size_t *n);
/* The resume token of the last entry taken that carried one (committed or not), NULL (*len 0) when none has. */
const uint8_t *batcher_token(const batcher *b, size_t *len);
/* Position of the last entry taken (committed or not); valid after the first entry. */
const op_pos *batcher_last(const batcher *b);
const batcher_stats *batcher_get_stats(const batcher *b);
/* The namespaces the open group has written to so far, and its DDL ops (what batch_tables bounds): after a failure,
 * those of the group that failed. */
uint64_t batcher_group_tables(const batcher *b);
/* Of those, the ones the last logical entry taken (all its parts so far) added, counted for the whole of each part
 * before any of it is sent: equal to batcher_group_tables when that entry is alone in the group (or beside entries
 * that write nothing), a group a smaller batch_tables cannot split. */
uint64_t batcher_entry_tables(const batcher *b);

#endif

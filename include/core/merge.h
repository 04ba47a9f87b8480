/*
 * merge.h — several sources' streams (one queue per source, core/queue.h) merged into one stream, in the order of
 * their positions: the apply loop takes it as it takes one source's queue.
 *
 * Each source (a shard of a sharded cluster, read by its own reader) hands over its items in its own order. The
 * merge hands on entries ordered by (pos, source index), and an entry at T only once no source can still show
 * anything before it:
 * - every other source has a head (an item taken and not yet handed on) at or after it, or its watermark (the
 *   position of the last entry it showed: entries and noops alike) is at or after T. A source that has shown nothing
 *   yet (its watermark is unknown) holds everything: the merge waits for its first entry, or for merge_set_watermark;
 * - an entry that changes nothing (every op OP_NOOP, not a part, no txn_role: a periodic noop, an oplog note, a
 *   migration's copy) is handed on as soon as it is a source's head, without waiting for the others: its only effect
 *   is its source's position, and held in order, a note written so that another source's entry may pass would wait
 *   in turn for that source to show something later, calling for a note there, and so on. So positions handed on
 *   are in order except for such entries;
 * - the parts of one logical entry of one source (op_entry.more) are handed on with no other source's entry between
 *   them;
 * - a source that holds the stream back (it keeps the next entry, at T, from being handed on) for wait_ms gets
 *   nudge(source, T): the caller asks it to show progress past T (a shard's oplog note); again each wait_ms while it
 *   still holds. A source in the middle of its parts, or ended, is not nudged (a note cannot help);
 * - transactions across sources: an OP_TXN_PREPARE entry counts an open participant of its txn_key; the last part
 *   of an OP_TXN_COMMIT (no `more`) or an OP_TXN_ABORT closes one. While some txn_key has had a COMMIT part handed
 *   on and still has open participants, every entry handed on gets no_commit (the batcher then does not commit
 *   after it), so the whole transaction becomes visible in one commit;
 * - a note_only entry (a prepare still open at a source's checkpoint, pushed on a restart) is counted as a PREPARE
 *   when taken, and freed: it is never handed on and says nothing of the source's watermark;
 * - QUEUE_IDLE: taken from a source and remembered; one IDLE is handed on when nothing more is ready and some
 *   source reported IDLE since the last one handed on;
 * - QUEUE_END from any source: handed on at once when taken, before any entry still held (it is taken once the
 *   source's items before it in its queue are handed on, as every item is). The ended source is not taken from
 *   again and keeps holding the stream at its watermark (nothing it did not show may be passed over); the caller
 *   is expected to end the session on it, as with one source;
 * - a guard: an entry before its own source's watermark (a source going backwards) or memory running out for the
 *   transaction table ends the stream with an END item of the merge's own (QUEUE_END_UNSUPPORTED, QUEUE_END_NOMEM):
 *   nothing is handed on after it.
 * The merge knows nothing of MongoDB: positions are op_pos, transactions are txn_key numbers.
 *
 * Feeding it. The merge holds at most one head per source, and takes an item from a source only when it has no head
 * for it: everything else stays in the source's queue, within that queue's bounds. Three ways:
 * - pull (the usual one): merge_config.pop pops one item of a source's queue without blocking (false: empty).
 *   merge_take calls it for every source without a head when it starts, and for the source whose head it has just
 *   handed on, so one busy source's entries flow through one merge_take without the caller looping;
 * - pull in batches: merge_config.pop_many (used instead of pop when set) pops up to MERGE_POP_MAX items of a
 *   source's queue at once into the merge's buffer for that source, whose items then become the head one by one,
 *   exactly when pop would have given them: the order and every rule above are the same, the queue's lock is taken
 *   once per batch instead of once per item. The buffers hold what the queues' bounds no longer count: at most
 *   MERGE_POP_MAX items per source, and no more bytes than the caller's pop_many hands over at once (the cluster's
 *   is queue_pop_all, about QUEUE_POP_BYTES), as the apply loop holds what it pops from one source's queue;
 * - push: the caller pops an item itself when merge_wants(m, source) and gives it with merge_put (it may be mixed
 *   with pop, not with pop_many).
 * merge_take must be called again when a source's queue gets items (its notify), when merge_deadline passes (the
 * nudges are sent from merge_take), and at once when it filled out[] (more may be ready).
 *
 * Cost: no allocation per entry (the transaction table grows now and then: it holds the transactions open at once;
 * a source's buffer is allocated with its first batch); per entry handed on, two passes over the sources (the
 * smallest head, then the others' watermarks), and one pop, or a share of one batch with pop_many.
 *
 * Time comes from the caller (monotonic ms), so nudges are testable with a fake clock. One thread: the apply loop.
 * A merge serves one session: after a failure, make a new one (the readers start again from the checkpoints).
 */
#ifndef OPLOG2PG_CORE_MERGE_H
#define OPLOG2PG_CORE_MERGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/op.h"
#include "core/queue.h"

typedef struct merge merge;

/* The most items merge_config.pop_many is asked for at once. */
#define MERGE_POP_MAX 64

typedef struct merge_config {
    size_t n_sources; /* sources 0 .. n_sources-1 (more with merge_add_source) */
    uint64_t wait_ms; /* how long a source may hold the stream back before it is nudged, and between nudges (0:
                       * nudged at once, then at most once a millisecond) */
    /* Asks source to show progress past `past` (NULL: never nudge). Called from merge_take; it must not call back
     * into the merge (it only passes the request on, e.g. to the source's note writer). */
    void (*nudge)(void *arg, size_t source, const op_pos *past);
    void *nudge_arg;
    /* Pops one item of source's queue into *out without blocking; false when there is none. NULL: the caller feeds
     * the merge with merge_put. */
    bool (*pop)(void *arg, size_t source, queue_item *out);
    /* Pops up to max (MERGE_POP_MAX) items of source's queue into out[], oldest first, without blocking; returns how
     * many (0: empty). When set, pop is not used. */
    size_t (*pop_many)(void *arg, size_t source, queue_item *out, size_t max);
    void *pop_arg; /* pop's and pop_many's */
} merge_config;

/* One source, as merge_get_source_stats reports it. */
typedef struct merge_source_stats {
    bool known;         /* it has shown an entry (or was given a watermark): watermark is valid */
    op_pos watermark;   /* the position of the last entry it showed */
    bool has_head;      /* the merge holds an item of it, not yet handed on */
    bool holding;       /* it holds the stream back now (as of the last merge_take) */
    bool ended;         /* its END was handed on */
    bool retired;       /* merge_retire_source */
    uint64_t waited_ms; /* total time the stream was held back by it (the current wait included) */
    uint64_t nudges;    /* nudges sent to it */
    uint64_t entries;   /* entries of it handed on */
    uint64_t notes;     /* note_only entries of it counted */
} merge_source_stats;

typedef struct merge_stats {
    uint64_t entries;   /* entries handed on */
    uint64_t no_commit; /* of those, marked no_commit */
    uint64_t idles;     /* IDLE items handed on */
    uint64_t nudges;
    size_t open_txns; /* transactions across sources with open participants now */
} merge_stats;

/* NULL on OOM (or n_sources 0). */
merge *merge_new(const merge_config *cfg);
/* Frees the heads it holds (queue_item_clear) and the merge. NULL is fine. */
void merge_free(merge *m);

/* A source added while running: returns its index (the previous number of sources), SIZE_MAX on OOM. Its watermark
 * starts unknown, so the merge hands nothing on until the new source shows its first entry (or is given a watermark
 * with merge_set_watermark): add it once its reader is started, and nudge it if it is idle. */
size_t merge_add_source(merge *m);
/* Nothing at or before pos will come from source (e.g. its checkpoint, when its reader starts after it): its
 * watermark moves forward to pos (never back). */
void merge_set_watermark(merge *m, size_t source, const op_pos *pos);
/* A source that will show nothing that matters any more (a shard drained of its data, its last entry handed on): it
 * no longer holds the stream back, and it is not taken from again. A head it holds is still handed on in order. */
void merge_retire_source(merge *m, size_t source);
/* After merge_retire_source: the next item the merge took from source's queue but never accepted (pop_many's
 * buffer, the front of that queue), handed back to the caller, who owns it; false when none is left. */
bool merge_take_back(merge *m, size_t source, queue_item *out);
size_t merge_source_count(const merge *m);

/* Push feeding: true when the merge has no item of source and will take one (not ended, not retired; with pop_many,
 * nothing buffered either). */
bool merge_wants(const merge *m, size_t source);
/* Gives the merge an item popped from source's queue: it owns it on true. False (the item stays the caller's) when
 * merge_wants(m, source) is false. */
bool merge_put(merge *m, size_t source, queue_item *it);

/* Hands on up to max items ready, in merged order, into out[] (the caller owns them: queue_item_clear), sending
 * the nudges that are due. now_ms: the caller's monotonic clock. */
size_t merge_take(merge *m, queue_item *out, size_t max, uint64_t now_ms);
/* When merge_take should run again for a nudge (monotonic ms); UINT64_MAX when none is due. */
uint64_t merge_deadline(const merge *m);
/* Items the merge holds (its heads): entries read and not handed on yet. */
size_t merge_held(const merge *m);
/* Items taken from the queues by pop_many and not a head yet (0 without pop_many): with the queues' own items, what
 * is still to come. */
size_t merge_buffered(const merge *m);

/* False when source is out of range. */
bool merge_get_source_stats(const merge *m, size_t source, merge_source_stats *out);
void merge_get_stats(const merge *m, merge_stats *out);

#endif

/*
 * queue.h — the bounded hand-off from the reader thread (which owns libmongoc) to the libev apply loop.
 *
 * The reader pushes decoded oplog entries, an IDLE marker when the oplog runs dry (the applier may commit at once)
 * and at most one END item when it stops for good. The consumer pops without ever blocking, woken by a notify
 * callback (typically a wrapper around ev_async_send).
 *
 * NOTES
 * - Two bounds: ops (an applyOps of 5000 ops weighs 5000) and bytes (what the entries hold in memory: their raw
 *   BSON and rendered text, op_entry_bytes, plus what queue_reserve holds). A push waits while the queue already
 *   holds ops (or a reservation) and the new entry would exceed either bound; an entry is always accepted when
 *   nothing is queued or reserved, so an entry bigger than a whole bound cannot deadlock, and memory stays within the
 *   byte bound plus one entry. IDLE and END items weigh nothing and never wait.
 * - notify is called only on the empty → non-empty transition, outside the lock. The consumer must therefore keep
 *   popping until the queue is empty, or come back on its own (e.g. after a commit) if it stops early: no further
 *   notify comes while items are left.
 * - queue_stop makes every current and future push return false (the entry stays the caller's); the consumer can
 *   still pop what is left. queue_wake_pushers wakes a blocked pusher so it can re-check its own cancel flag
 *   (how reader_stop interrupts the reader without stopping the queue).
 * - Everything is guarded by one mutex; a full queue waits on a condition variable, never spins.
 */
#ifndef OPLOG2PG_CORE_QUEUE_H
#define OPLOG2PG_CORE_QUEUE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/op.h"

typedef enum queue_item_type {
    QUEUE_ENTRY = 1, /* entry: a decoded oplog entry; the consumer owns it once popped (op_entry_free) */
    QUEUE_IDLE,      /* the source found the oplog drained: flush / commit now */
    QUEUE_END,       /* the source stopped for good: reason and message (owned) */
} queue_item_type;

/* Why a source stopped (QUEUE_END). The consumer decides what each means for the process. */
typedef enum queue_end_reason {
    QUEUE_END_DONE = 0,    /* nothing more to read (a dump read to its end) */
    QUEUE_END_RESUME_LOST, /* the resume point is no longer in the oplog, or was rolled back */
    QUEUE_END_UNSUPPORTED, /* an entry that cannot be decoded (malformed or unsupported); nothing after it came */
    QUEUE_END_REFUSED,     /* MongoDB refused the reader (authentication, authorisation) */
    QUEUE_END_NOMEM,       /* memory ran out on the source's thread: a retry may pass */
    QUEUE_END_BAD_INPUT,   /* the input is not what it should be (a dump cut short or followed by garbage) */
    QUEUE_END_RETRY,       /* a passing fault after part of a logical entry was pushed (op_entry.more): the session
                            * must end uncommitted and resume from the committed checkpoint */
} queue_end_reason;

typedef struct queue_item {
    queue_item_type type;
    queue_end_reason reason; /* QUEUE_END */
    op_entry *entry;         /* QUEUE_ENTRY, heap-allocated */
    char *message;           /* QUEUE_END, heap-allocated */
    size_t bytes;            /* QUEUE_ENTRY: op_entry_bytes, weighed once when pushed (outside the lock) */
} queue_item;

typedef struct queue queue;

/* Called (from the pushing thread, outside the lock) when a push makes the queue non-empty. */
typedef void (*queue_notify_fn)(void *arg);

/* A queue bounded at capacity ops (>= 1) and capacity_bytes bytes (0 = no byte bound). NULL on OOM or a pthread
 * failure (logged). */
queue *queue_new(size_t capacity, size_t capacity_bytes);
/* Frees left-over items (queue_clear) and the queue. No thread may be using it. NULL is fine. */
void queue_free(queue *q);

/* Meant to be set before the pushing thread starts; it takes the queue's lock, so a change made later applies from
 * the next push on. fn NULL disables notification. */
void queue_set_notify(queue *q, queue_notify_fn fn, void *arg);

/* Pushes an entry, blocking while the queue is full. On true the queue owns e; on false (the queue was stopped,
 * *cancel became true while waiting, or OOM) e is still the caller's. cancel may be NULL. */
bool queue_push_entry(queue *q, op_entry *e, const atomic_bool *cancel);
/* The reader's side of the byte bound: reserve room for an entry of about `bytes` before decoding and rendering it
 * (blocking while the queue is full, as a push would), then push it with queue_push_entry_reserved, which trades
 * the reservation for the entry's real weight — so the entry a blocked reader holds counts against the bound too.
 * False when the queue was stopped or *cancel became true (nothing is then reserved). queue_unreserve gives back a
 * reservation that will not be pushed. */
bool queue_reserve(queue *q, size_t bytes, const atomic_bool *cancel);
void queue_unreserve(queue *q, size_t bytes);
bool queue_push_entry_reserved(queue *q, op_entry *e, size_t reserved, const atomic_bool *cancel);
/* Pushes n entries at once, under one lock and with at most one notify (see queue_pusher); `reserved` is the room
 * reserved for all of them. On true the queue owns them all; on false none (as queue_push_entry). */
bool queue_push_entries(queue *q, op_entry *const *es, size_t n, size_t reserved, const atomic_bool *cancel);
/* Pushes an IDLE marker (never blocks). False when stopped or OOM. */
bool queue_push_idle(queue *q);
/* Pushes an END item with a copy of message (never blocks). False when stopped or OOM. */
bool queue_push_end(queue *q, queue_end_reason reason, const char *message);

/* A producer's side of the queue, handing entries over in groups: one lock and at most one wake of the consumer per
 * group instead of per entry, and reservations taken a chunk at a time. What a thread pays for each hand-over (a
 * contended lock, an eventfd write) costs more than decoding a small entry.
 * - queue_pusher_reserve is queue_reserve for one entry about to be rendered: served from room reserved before
 *   (QUEUE_PUSH_CHUNK at a time, at most a sixteenth of the byte bound), or reserving more, which may block while
 *   the queue is full; the pending group is pushed first, so a producer never waits on room its own unpushed
 *   entries hold;
 * - queue_pusher_add takes a rendered entry (with what was reserved for it) and pushes the group when it holds
 *   QUEUE_PUSH_GROUP entries;
 * - queue_pusher_flush pushes the group and gives back what is reserved and unused: call it before anything that may
 *   wait (a network round trip, an IDLE or END item), so entries never sit unseen while the producer is idle.
 * False from any of them means the queue was stopped or the producer cancelled (or memory ran out): the pending
 * entries are freed, as a failed push leaves nothing to the queue. */
#define QUEUE_PUSH_GROUP 64
#define QUEUE_PUSH_CHUNK (256 * 1024)
typedef struct queue_pusher {
    queue *q;
    const atomic_bool *cancel;
    op_entry *pending[QUEUE_PUSH_GROUP];
    size_t n;
    size_t pending_reserved; /* reserved for the pending entries */
    size_t held;             /* reserved and not given to an entry yet */
} queue_pusher;

void queue_pusher_init(queue_pusher *p, queue *q, const atomic_bool *cancel);
bool queue_pusher_reserve(queue_pusher *p, size_t bytes);
/* Gives back room reserved for an entry that will not be pushed (kept for the next one). */
void queue_pusher_unreserve(queue_pusher *p, size_t bytes);
bool queue_pusher_add(queue_pusher *p, op_entry *e, size_t reserved);
bool queue_pusher_flush(queue_pusher *p);
/* Frees the pending entries and gives back every reservation (a producer that stops). */
void queue_pusher_drop(queue_pusher *p);

/* Pops the oldest item into *out; false when the queue is empty. Never blocks. */
bool queue_pop(queue *q, queue_item *out);
/* Pops up to max items (all there are when fewer) into out[], oldest first, but no more than about QUEUE_POP_BYTES
 * of entries (at least one item): popped entries no longer count against the byte bound. Returns how many. Never
 * blocks. */
#define QUEUE_POP_BYTES (1024 * 1024)
size_t queue_pop_all(queue *q, queue_item *out, size_t max);

/* The weight of popped entries stays counted as held (their text lives on in the consumer's runs) until the consumer
 * says it is all written and freed (queue_release: the apply loop, once nothing is uncommitted). queue_wait_drained
 * blocks a producer until the queue is empty and nothing is held (false when stopped or cancelled): the reader waits
 * so before fetching more entries of several MB each, so that a 16 MB document is never held three times at once
 * (its text being written, the next one arriving, libmongoc's copy of it). Held bytes do not count against the
 * bounds: they only make queue_wait_drained wait. */
void queue_release(queue *q);
bool queue_wait_drained(queue *q, const atomic_bool *cancel);

/* Frees what a popped item owns (entry or message) and zeroes it. */
void queue_item_clear(queue_item *it);

/* Refuses every later push and wakes blocked pushers (their push returns false). Items already queued stay. */
void queue_stop(queue *q);
bool queue_stopped(queue *q);
/* Wakes blocked pushers so they re-check their cancel flag; the queue itself is unchanged. */
void queue_wake_pushers(queue *q);
/* Frees every queued item. The stop state is unchanged. */
void queue_clear(queue *q);

/* Snapshot counts (for stats and tests). */
size_t queue_len(queue *q);
size_t queue_ops(queue *q);
size_t queue_bytes(queue *q);
size_t queue_capacity(const queue *q);

#endif

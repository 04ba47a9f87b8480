/*
 * queue.h — the bounded hand-off from the reader thread (which owns libmongoc) to the libev apply loop.
 *
 * The reader pushes decoded oplog entries, an IDLE marker when the oplog runs dry (the applier may commit at once)
 * and at most one FATAL item when it stops for good. The consumer pops without ever blocking, woken by a notify
 * callback (typically a wrapper around ev_async_send).
 *
 * NOTES
 * - The bound counts ops, not entries: an applyOps of 5000 ops weighs 5000. A push waits while the queue already
 *   holds ops and the new entry would exceed `capacity`; an entry is always accepted when no ops are queued, so an
 *   applyOps bigger than the whole capacity cannot deadlock. IDLE and FATAL items weigh nothing and never wait.
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
    QUEUE_IDLE,      /* the reader found the oplog drained: flush / commit now */
    QUEUE_FATAL,     /* the reader stopped for good: message (owned) and exit_code (daemon/exitcodes.h) */
} queue_item_type;

typedef struct queue_item {
    queue_item_type type;
    int exit_code;   /* QUEUE_FATAL */
    op_entry *entry; /* QUEUE_ENTRY, heap-allocated */
    char *message;   /* QUEUE_FATAL, heap-allocated */
} queue_item;

typedef struct queue queue;

/* Called (from the pushing thread, outside the lock) when a push makes the queue non-empty. */
typedef void (*queue_notify_fn)(void *arg);

/* A queue bounded at capacity ops (capacity >= 1). NULL on OOM or a pthread failure (logged). */
queue *queue_new(size_t capacity);
/* Frees left-over items (queue_clear) and the queue. No thread may be using it. NULL is fine. */
void queue_free(queue *q);

/* Set before the pushing thread starts (not synchronised with pushes). fn NULL disables notification. */
void queue_set_notify(queue *q, queue_notify_fn fn, void *arg);

/* Pushes an entry, blocking while the queue is full. On true the queue owns e; on false (the queue was stopped,
 * *cancel became true while waiting, or OOM) e is still the caller's. cancel may be NULL. */
bool queue_push_entry(queue *q, op_entry *e, const atomic_bool *cancel);
/* Pushes an IDLE marker (never blocks). False when stopped or OOM. */
bool queue_push_idle(queue *q);
/* Pushes a FATAL item with a copy of message (never blocks). False when stopped or OOM. */
bool queue_push_fatal(queue *q, int exit_code, const char *message);

/* Pops the oldest item into *out; false when the queue is empty. Never blocks. */
bool queue_pop(queue *q, queue_item *out);
/* Pops up to max items (all there are when fewer) into out[], oldest first; returns how many. Never blocks. */
size_t queue_pop_all(queue *q, queue_item *out, size_t max);

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
size_t queue_capacity(const queue *q);

#endif

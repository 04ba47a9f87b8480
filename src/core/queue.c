/*
 * queue.c — the queue between the reader thread and the apply loop, bounded in ops and in bytes (see core/queue.h).
 *
 * Items live in a growable ring buffer guarded by one mutex. A pusher that finds the queue full waits on `not_full`,
 * which a pop broadcasts whenever it removes ops while someone waits; a reservation given back, stop and wake
 * broadcast it too. Consumers never wait.
 */
#include "core/queue.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

struct queue {
    pthread_mutex_t mu;
    pthread_cond_t not_full;
    queue_item *items; /* ring of cap slots */
    size_t cap, head, len;
    size_t ops;            /* ops held by queued entries */
    size_t bytes;          /* bytes held by queued entries (op_entry_bytes) */
    size_t capacity;       /* the bound, in ops */
    size_t capacity_bytes; /* the bound, in bytes; 0 = none */
    size_t reserved;       /* bytes reserved by queue_reserve, not pushed yet */
    size_t held;           /* bytes of entries popped and not released yet (queue_release) */
    size_t waiting;        /* pushers blocked on not_full */
    bool stopped;
    queue_notify_fn notify;
    void *notify_arg;
};

#define QUEUE_INITIAL_SLOTS 64

queue *queue_new(size_t capacity, size_t capacity_bytes)
{
    queue *q = calloc(1, sizeof *q);
    bool mu_ok = false;
    if (!q) {
        log_error("queue: out of memory");
        return NULL;
    }
    q->capacity = capacity ? capacity : 1;
    q->capacity_bytes = capacity_bytes;
    q->cap = QUEUE_INITIAL_SLOTS;
    q->items = calloc(q->cap, sizeof *q->items);
    if (!q->items) {
        log_error("queue: out of memory");
        goto fail;
    }
    if (pthread_mutex_init(&q->mu, NULL) != 0) {
        log_error("queue: pthread_mutex_init failed");
        goto fail;
    }
    mu_ok = true;
    if (pthread_cond_init(&q->not_full, NULL) != 0) {
        log_error("queue: pthread_cond_init failed");
        goto fail;
    }
    return q;
fail:
    if (mu_ok)
        pthread_mutex_destroy(&q->mu);
    free(q->items);
    free(q);
    return NULL;
}

void queue_free(queue *q)
{
    if (!q)
        return;
    queue_clear(q);
    pthread_cond_destroy(&q->not_full);
    pthread_mutex_destroy(&q->mu);
    free(q->items);
    free(q);
}

void queue_set_notify(queue *q, queue_notify_fn fn, void *arg)
{
    pthread_mutex_lock(&q->mu);
    q->notify = fn;
    q->notify_arg = arg;
    pthread_mutex_unlock(&q->mu);
}

/* Makes room for `more` slots; called with the lock held. False on OOM. */
static bool grow_for(queue *q, size_t more)
{
    if (q->cap - q->len >= more)
        return true;
    size_t ncap = q->cap * 2;
    while (ncap - q->len < more)
        ncap *= 2;
    queue_item *n = calloc(ncap, sizeof *n);
    if (!n)
        return false;
    for (size_t i = 0; i < q->len; i++)
        n[i] = q->items[(q->head + i) % q->cap];
    free(q->items);
    q->items = n;
    q->cap = ncap;
    q->head = 0;
    return true;
}

static size_t item_ops(const queue_item *it)
{
    if (it->type != QUEUE_ENTRY || !it->entry)
        return 0;
    return it->entry->n ? it->entry->n : 1; /* an empty entry still takes a place */
}

static size_t item_bytes(const queue_item *it)
{
    return it->type == QUEUE_ENTRY ? it->bytes : 0;
}

/* Appends item (lock held, room checked by the caller's wait); returns whether notify is due. */
static bool append_locked(queue *q, const queue_item *it, size_t bytes)
{
    bool was_empty = q->len == 0;
    q->items[(q->head + q->len) % q->cap] = *it;
    q->len++;
    q->ops += item_ops(it);
    q->bytes += bytes;
    return was_empty && q->notify != NULL;
}

/* Room for `weight` ops and `bytes` bytes (lock held): always when nothing is queued or reserved, so an entry larger
 * than a whole bound still passes alone. */
static bool room(const queue *q, size_t weight, size_t bytes)
{
    if (q->ops == 0 && q->reserved == 0)
        return true;
    return q->ops + weight <= q->capacity &&
           (q->capacity_bytes == 0 || q->bytes + q->reserved + bytes <= q->capacity_bytes);
}

/* Waits (lock held) until room() or a stop; false when stopped or cancelled. */
static bool wait_room(queue *q, size_t weight, size_t bytes, const atomic_bool *cancel)
{
    for (;;) {
        if (q->stopped || (cancel && atomic_load(cancel)))
            return false;
        if (room(q, weight, bytes))
            return true;
        q->waiting++;
        pthread_cond_wait(&q->not_full, &q->mu);
        q->waiting--;
    }
}

/* The common push: waits for room when `weight` > 0 (the entry's bytes counted unless reserved already), appends,
 * notifies outside the lock. */
static bool push(queue *q, queue_item *it, size_t weight, size_t reserved, const atomic_bool *cancel)
{
    if (it->type == QUEUE_ENTRY)
        it->bytes = it->entry ? op_entry_bytes(it->entry) : 0;
    size_t bytes = item_bytes(it);
    queue_notify_fn fn = NULL;
    void *arg = NULL;

    pthread_mutex_lock(&q->mu);
    q->reserved -= reserved < q->reserved ? reserved : q->reserved;
    if (weight > 0 && !wait_room(q, weight, reserved > 0 ? 0 : bytes, cancel)) {
        pthread_cond_broadcast(&q->not_full); /* the reservation given back may let another pusher on */
        pthread_mutex_unlock(&q->mu);
        return false;
    }
    if (weight == 0 && (q->stopped || (cancel && atomic_load(cancel)))) {
        pthread_mutex_unlock(&q->mu);
        return false;
    }
    if (!grow_for(q, 1)) {
        pthread_mutex_unlock(&q->mu);
        log_error("queue: out of memory growing to %zu slots", q->cap * 2);
        return false;
    }
    if (append_locked(q, it, bytes)) {
        fn = q->notify;
        arg = q->notify_arg;
    }
    pthread_mutex_unlock(&q->mu);
    if (fn)
        fn(arg);
    return true;
}

bool queue_reserve(queue *q, size_t bytes, const atomic_bool *cancel)
{
    pthread_mutex_lock(&q->mu);
    bool ok = wait_room(q, 0, bytes, cancel);
    if (ok)
        q->reserved += bytes;
    pthread_mutex_unlock(&q->mu);
    return ok;
}

void queue_unreserve(queue *q, size_t bytes)
{
    pthread_mutex_lock(&q->mu);
    q->reserved -= bytes < q->reserved ? bytes : q->reserved;
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
}

bool queue_push_entry_reserved(queue *q, op_entry *e, size_t reserved, const atomic_bool *cancel)
{
    queue_item it = {.type = QUEUE_ENTRY, .entry = e};
    return push(q, &it, item_ops(&it), reserved, cancel);
}

bool queue_push_entry(queue *q, op_entry *e, const atomic_bool *cancel)
{
    queue_item it = {.type = QUEUE_ENTRY, .entry = e};
    return push(q, &it, item_ops(&it), 0, cancel);
}

bool queue_push_entries(queue *q, op_entry *const *es, size_t n, size_t reserved, const atomic_bool *cancel)
{
    if (n == 0) {
        if (reserved > 0)
            queue_unreserve(q, reserved);
        return true;
    }
    if (n == 1)
        return queue_push_entry_reserved(q, es[0], reserved, cancel);
    size_t weight = 0, bytes = 0, sizes[QUEUE_PUSH_GROUP], *size = n <= QUEUE_PUSH_GROUP ? sizes : NULL;
    if (size == NULL && (size = malloc(n * sizeof *size)) == NULL)
        return false;
    for (size_t i = 0; i < n; i++) {
        size[i] = op_entry_bytes(es[i]);
        bytes += size[i];
        weight += es[i]->n ? es[i]->n : 1;
    }
    queue_notify_fn fn = NULL;
    void *arg = NULL;
    bool ok = true;
    pthread_mutex_lock(&q->mu);
    q->reserved -= reserved < q->reserved ? reserved : q->reserved;
    /* A group waits for room for its ops, and for its bytes beyond what was reserved (a queue whose bound is smaller
     * than the group takes it when empty, as room() takes one entry larger than a bound). */
    if (!wait_room(q, weight, bytes > reserved ? bytes - reserved : 0, cancel)) {
        pthread_cond_broadcast(&q->not_full);
        ok = false;
    }
    if (ok && !grow_for(q, n)) {
        log_error("queue: out of memory growing past %zu slots", q->cap);
        ok = false;
    }
    if (ok) {
        bool was_empty = q->len == 0;
        for (size_t i = 0; i < n; i++) {
            queue_item it = {.type = QUEUE_ENTRY, .entry = es[i], .bytes = size[i]};
            q->items[(q->head + q->len) % q->cap] = it;
            q->len++;
            q->ops += es[i]->n ? es[i]->n : 1;
            q->bytes += size[i];
        }
        if (was_empty && q->notify != NULL) {
            fn = q->notify;
            arg = q->notify_arg;
        }
    }
    pthread_mutex_unlock(&q->mu);
    if (size != sizes)
        free(size);
    if (fn)
        fn(arg);
    return ok;
}

/* ---- the producer's side, in groups ---- */

void queue_pusher_init(queue_pusher *p, queue *q, const atomic_bool *cancel)
{
    memset(p, 0, sizeof *p);
    p->q = q;
    p->cancel = cancel;
}

/* Pushes the pending group, with its reservation and the chunk held: a group larger than what was reserved for it
 * waits for room, and must not wait on room this producer holds itself (an empty queue takes any group, but a held
 * chunk kept it from looking empty: a transaction of two 8 MB documents waited forever, found by the soak). */
static bool pusher_push(queue_pusher *p)
{
    if (p->n == 0)
        return true;
    size_t give = p->pending_reserved + p->held;
    p->held = 0;
    bool ok = queue_push_entries(p->q, p->pending, p->n, give, p->cancel);
    if (!ok)
        for (size_t i = 0; i < p->n; i++)
            op_entry_free(p->pending[i]);
    p->n = 0;
    p->pending_reserved = 0;
    return ok;
}

bool queue_pusher_reserve(queue_pusher *p, size_t bytes)
{
    if (p->held >= bytes) {
        p->held -= bytes;
        return true;
    }
    /* More room is needed, which may mean waiting: hand over the group first, and give back the rest held in the
     * same locked step as the new reservation, so the wait never counts room this producer holds itself. */
    if (!pusher_push(p))
        return false;
    queue *q = p->q;
    /* A chunk is at most a sixteenth of the byte bound: a small bound (a sharded cluster's queues share one) still
     * gets groups, not one reservation and one push per entry. */
    size_t chunk = q->capacity_bytes / 16 < QUEUE_PUSH_CHUNK ? q->capacity_bytes / 16 : QUEUE_PUSH_CHUNK;
    pthread_mutex_lock(&q->mu);
    q->reserved -= p->held < q->reserved ? p->held : q->reserved;
    bool gave_back = p->held > 0;
    p->held = 0;
    bool ok = wait_room(q, 0, bytes + chunk, p->cancel);
    if (ok) {
        q->reserved += bytes + chunk;
        p->held = chunk;
    } else if (gave_back) {
        pthread_cond_broadcast(&q->not_full);
    }
    pthread_mutex_unlock(&q->mu);
    return ok;
}

void queue_pusher_unreserve(queue_pusher *p, size_t bytes)
{
    p->held += bytes;
}

bool queue_pusher_add(queue_pusher *p, op_entry *e, size_t reserved)
{
    p->pending[p->n++] = e;
    p->pending_reserved += reserved;
    return p->n < QUEUE_PUSH_GROUP || pusher_push(p);
}

bool queue_pusher_flush(queue_pusher *p)
{
    bool ok = pusher_push(p);
    if (p->held > 0) {
        queue_unreserve(p->q, p->held);
        p->held = 0;
    }
    return ok;
}

void queue_pusher_drop(queue_pusher *p)
{
    for (size_t i = 0; i < p->n; i++)
        op_entry_free(p->pending[i]);
    if (p->held + p->pending_reserved > 0)
        queue_unreserve(p->q, p->held + p->pending_reserved);
    p->n = 0;
    p->held = p->pending_reserved = 0;
}

bool queue_push_idle(queue *q)
{
    queue_item it = {.type = QUEUE_IDLE};
    return push(q, &it, 0, 0, NULL);
}

bool queue_push_end(queue *q, queue_end_reason reason, const char *message)
{
    queue_item it = {.type = QUEUE_END, .reason = reason};
    it.message = strdup(message ? message : "");
    if (!it.message) {
        log_error("queue: out of memory for an end message");
        return false;
    }
    if (!push(q, &it, 0, 0, NULL)) {
        free(it.message);
        return false;
    }
    return true;
}

/* Removes the head item into *out (lock held, len > 0). */
static void take_locked(queue *q, queue_item *out)
{
    *out = q->items[q->head];
    memset(&q->items[q->head], 0, sizeof q->items[q->head]);
    q->head = (q->head + 1) % q->cap;
    q->len--;
    q->ops -= item_ops(out);
    q->bytes -= item_bytes(out);
    q->held += item_bytes(out);
}

bool queue_pop(queue *q, queue_item *out)
{
    return queue_pop_all(q, out, 1) == 1;
}

size_t queue_pop_all(queue *q, queue_item *out, size_t max)
{
    size_t n = 0, bytes = 0;
    size_t ops_before;

    pthread_mutex_lock(&q->mu);
    ops_before = q->ops;
    /* Popped items leave the byte bound: take only about QUEUE_POP_BYTES at a time (always one). */
    while (n < max && q->len > 0 && (n == 0 || bytes < QUEUE_POP_BYTES)) {
        take_locked(q, &out[n]);
        bytes += item_bytes(&out[n]);
        n++;
    }
    if ((q->ops < ops_before || q->len == 0) && q->waiting > 0)
        pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
    return n;
}

void queue_release(queue *q)
{
    pthread_mutex_lock(&q->mu);
    bool was = q->held > 0;
    q->held = 0;
    if (was && q->waiting > 0)
        pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
}

bool queue_wait_drained(queue *q, const atomic_bool *cancel)
{
    pthread_mutex_lock(&q->mu);
    bool ok = true;
    for (;;) {
        if (q->stopped || (cancel && atomic_load(cancel))) {
            ok = false;
            break;
        }
        if (q->len == 0 && q->held == 0)
            break;
        q->waiting++;
        pthread_cond_wait(&q->not_full, &q->mu);
        q->waiting--;
    }
    pthread_mutex_unlock(&q->mu);
    return ok;
}

void queue_item_clear(queue_item *it)
{
    if (!it)
        return;
    op_entry_free(it->entry);
    free(it->message);
    memset(it, 0, sizeof *it);
}

void queue_stop(queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->stopped = true;
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
}

bool queue_stopped(queue *q)
{
    pthread_mutex_lock(&q->mu);
    bool s = q->stopped;
    pthread_mutex_unlock(&q->mu);
    return s;
}

void queue_wake_pushers(queue *q)
{
    /* Taking the lock orders this after a pusher's check of its cancel flag, so the wake-up cannot be lost. */
    pthread_mutex_lock(&q->mu);
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
}

void queue_clear(queue *q)
{
    queue_item it;
    while (queue_pop(q, &it))
        queue_item_clear(&it);
    queue_release(q);
}

size_t queue_len(queue *q)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->len;
    pthread_mutex_unlock(&q->mu);
    return n;
}

size_t queue_ops(queue *q)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->ops;
    pthread_mutex_unlock(&q->mu);
    return n;
}

size_t queue_bytes(queue *q)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->bytes;
    pthread_mutex_unlock(&q->mu);
    return n;
}

size_t queue_capacity(const queue *q)
{
    return q->capacity;
}

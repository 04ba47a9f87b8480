/*
 * test_queue.c — the reader → apply-loop queue: FIFO order, the op-count and byte bounds (a pusher blocks until the
 * consumer pops), stop and cancel wake a blocked pusher, an oversize entry goes through an empty queue, notify fires
 * only on the empty → non-empty transition, left-over items are freed, and the grouped producer side (queue_pusher)
 * keeps order, notifies once per group and never waits on its own reservations.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/queue.h"

Suite *queue_suite(void); /* called by the generated runner list */

/* A heap entry of n NOOP ops at Timestamp(secs, 1). */
static op_entry *make_entry(uint32_t secs, size_t n)
{
    op_entry *e = malloc(sizeof *e);
    ck_assert_ptr_nonnull(e);
    op_entry_init(e);
    op_pos pos = {.secs = secs, .inc = 1, .term = 1};
    ck_assert(op_entry_alloc(e, &pos, n));
    for (size_t i = 0; i < n; i++) {
        e->ops[i].kind = OP_NOOP;
        e->ops[i].reason = "test";
    }
    return e;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

START_TEST(test_fifo_and_types)
{
    queue *q = queue_new(100, 0);
    ck_assert_ptr_nonnull(q);
    for (uint32_t i = 1; i <= 5; i++)
        ck_assert(queue_push_entry(q, make_entry(i, 1), NULL));
    ck_assert(queue_push_idle(q));
    ck_assert(queue_push_end(q, QUEUE_END_RESUME_LOST, "resume point lost"));
    ck_assert_uint_eq(queue_len(q), 7);
    ck_assert_uint_eq(queue_ops(q), 5);

    queue_item it;
    ck_assert(queue_pop(q, &it));
    ck_assert_int_eq(it.type, QUEUE_ENTRY);
    ck_assert_uint_eq(it.entry->pos.secs, 1);
    queue_item_clear(&it);
    ck_assert_ptr_null(it.entry);

    queue_item rest[10];
    size_t n = queue_pop_all(q, rest, 2);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(rest[0].entry->pos.secs, 2);
    ck_assert_uint_eq(rest[1].entry->pos.secs, 3);
    n += queue_pop_all(q, rest + 2, 10);
    ck_assert_uint_eq(n, 6);
    ck_assert_uint_eq(rest[2].entry->pos.secs, 4);
    ck_assert_uint_eq(rest[3].entry->pos.secs, 5);
    ck_assert_int_eq(rest[4].type, QUEUE_IDLE);
    ck_assert_int_eq(rest[5].type, QUEUE_END);
    ck_assert_int_eq(rest[5].reason, QUEUE_END_RESUME_LOST);
    ck_assert_str_eq(rest[5].message, "resume point lost");
    for (size_t i = 0; i < n; i++)
        queue_item_clear(&rest[i]);
    ck_assert(!queue_pop(q, &it));
    ck_assert_uint_eq(queue_ops(q), 0);
    queue_free(q);
}
END_TEST

/* The ring grows past its initial slots and wraps correctly. */
START_TEST(test_many_items_wrap)
{
    queue *q = queue_new(100000, 0);
    queue_item it;
    uint32_t next_pop = 1, next_push = 1;
    for (int round = 0; round < 50; round++) {
        for (int i = 0; i < 37; i++)
            ck_assert(queue_push_entry(q, make_entry(next_push++, 1), NULL));
        for (int i = 0; i < 23; i++) {
            ck_assert(queue_pop(q, &it));
            ck_assert_uint_eq(it.entry->pos.secs, next_pop++);
            queue_item_clear(&it);
        }
    }
    while (queue_pop(q, &it)) {
        ck_assert_uint_eq(it.entry->pos.secs, next_pop++);
        queue_item_clear(&it);
    }
    ck_assert_uint_eq(next_pop, next_push);
    queue_free(q);
}
END_TEST

typedef struct {
    queue *q;
    op_entry *e;
    const atomic_bool *cancel;
    atomic_bool done;
    bool result;
} pusher_arg;

static void *pusher_main(void *p)
{
    pusher_arg *a = p;
    a->result = queue_push_entry(a->q, a->e, a->cancel);
    atomic_store(&a->done, true);
    return NULL;
}

static void start_pusher(pthread_t *t, pusher_arg *a)
{
    atomic_init(&a->done, false);
    ck_assert_int_eq(pthread_create(t, NULL, pusher_main, a), 0);
}

START_TEST(test_bounded_blocks_until_pop)
{
    queue *q = queue_new(4, 0);
    ck_assert(queue_push_entry(q, make_entry(1, 2), NULL));
    ck_assert(queue_push_entry(q, make_entry(2, 2), NULL)); /* 4 of 4 ops */

    pusher_arg a = {.q = q, .e = make_entry(3, 1)};
    pthread_t t;
    start_pusher(&t, &a);
    sleep_ms(150);
    ck_assert_msg(!atomic_load(&a.done), "push into a full queue did not block");
    ck_assert_uint_eq(queue_len(q), 2);

    /* Control items never block, even when full. */
    ck_assert(queue_push_idle(q));

    queue_item it;
    ck_assert(queue_pop(q, &it)); /* frees 2 ops: the pusher may go on */
    queue_item_clear(&it);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert(a.result);
    ck_assert_uint_eq(queue_ops(q), 3);

    ck_assert(queue_pop(q, &it));
    ck_assert_uint_eq(it.entry->pos.secs, 2);
    queue_item_clear(&it);
    ck_assert(queue_pop(q, &it));
    ck_assert_int_eq(it.type, QUEUE_IDLE);
    ck_assert(queue_pop(q, &it));
    ck_assert_uint_eq(it.entry->pos.secs, 3);
    queue_item_clear(&it);
    queue_free(q);
}
END_TEST

START_TEST(test_stop_wakes_blocked_pusher)
{
    queue *q = queue_new(1, 0);
    ck_assert(queue_push_entry(q, make_entry(1, 1), NULL));
    pusher_arg a = {.q = q, .e = make_entry(2, 1)};
    pthread_t t;
    start_pusher(&t, &a);
    sleep_ms(100);
    ck_assert(!atomic_load(&a.done));
    queue_stop(q);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert(!a.result);
    op_entry_free(a.e); /* refused: still ours */
    ck_assert(queue_stopped(q));

    /* Every later push is refused; what was queued can still be popped. */
    op_entry *e = make_entry(3, 1);
    ck_assert(!queue_push_entry(q, e, NULL));
    op_entry_free(e);
    ck_assert(!queue_push_idle(q));
    ck_assert(!queue_push_end(q, QUEUE_END_NOMEM, "x"));
    queue_item it;
    ck_assert(queue_pop(q, &it));
    ck_assert_uint_eq(it.entry->pos.secs, 1);
    queue_item_clear(&it);
    queue_free(q);
}
END_TEST

START_TEST(test_cancel_wakes_blocked_pusher)
{
    queue *q = queue_new(1, 0);
    atomic_bool cancel;
    atomic_init(&cancel, false);
    ck_assert(queue_push_entry(q, make_entry(1, 1), NULL));
    pusher_arg a = {.q = q, .e = make_entry(2, 1), .cancel = &cancel};
    pthread_t t;
    start_pusher(&t, &a);
    sleep_ms(100);
    ck_assert(!atomic_load(&a.done));
    atomic_store(&cancel, true);
    queue_wake_pushers(q);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert(!a.result);
    op_entry_free(a.e);
    /* The queue itself is not stopped. */
    ck_assert(!queue_stopped(q));
    ck_assert(queue_push_idle(q));
    ck_assert_uint_eq(queue_len(q), 2);
    queue_free(q); /* frees the left-over entry (ASan would report a leak otherwise) */
}
END_TEST

START_TEST(test_oversize_entry_when_empty)
{
    queue *q = queue_new(3, 0);
    ck_assert(queue_push_idle(q)); /* an IDLE marker holds no ops: the queue counts as empty */
    ck_assert(queue_push_entry(q, make_entry(1, 10), NULL));
    ck_assert_uint_eq(queue_ops(q), 10);

    /* But a second entry now waits until the big one is popped. */
    pusher_arg a = {.q = q, .e = make_entry(2, 1)};
    pthread_t t;
    start_pusher(&t, &a);
    sleep_ms(100);
    ck_assert(!atomic_load(&a.done));
    queue_item items[4];
    size_t n = queue_pop_all(q, items, 4);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(items[0].type, QUEUE_IDLE);
    ck_assert_uint_eq(items[1].entry->n, 10);
    queue_item_clear(&items[1]);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert(a.result);
    queue_free(q);
}
END_TEST

static void count_notify(void *arg)
{
    atomic_fetch_add((atomic_int *)arg, 1);
}

START_TEST(test_notify_on_empty_to_nonempty_only)
{
    queue *q = queue_new(100, 0);
    atomic_int calls;
    atomic_init(&calls, 0);
    queue_set_notify(q, count_notify, &calls);

    ck_assert(queue_push_entry(q, make_entry(1, 1), NULL));
    ck_assert_int_eq(atomic_load(&calls), 1);
    ck_assert(queue_push_entry(q, make_entry(2, 1), NULL));
    ck_assert(queue_push_idle(q));
    ck_assert_int_eq(atomic_load(&calls), 1);

    queue_item it;
    ck_assert(queue_pop(q, &it));
    queue_item_clear(&it);
    ck_assert(queue_push_entry(q, make_entry(3, 1), NULL)); /* still not empty before this push */
    ck_assert_int_eq(atomic_load(&calls), 1);

    queue_clear(q);
    ck_assert_uint_eq(queue_len(q), 0);
    ck_assert(queue_push_end(q, QUEUE_END_UNSUPPORTED, "bad entry"));
    ck_assert_int_eq(atomic_load(&calls), 2);
    queue_free(q);
}
END_TEST

/* A producer thread and this consumer race through many items: order and count survive, with a small bound. */
typedef struct {
    queue *q;
    uint32_t count;
} producer_arg;

static void *producer_main(void *p)
{
    producer_arg *a = p;
    for (uint32_t i = 1; i <= a->count; i++) {
        op_entry *e = make_entry(i, 1 + i % 3);
        if (!queue_push_entry(a->q, e, NULL)) {
            op_entry_free(e);
            return NULL;
        }
    }
    return NULL;
}

START_TEST(test_producer_consumer)
{
    queue *q = queue_new(5, 0);
    producer_arg a = {.q = q, .count = 20000};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, producer_main, &a), 0);
    uint32_t expect = 1;
    queue_item items[16];
    while (expect <= a.count) {
        size_t n = queue_pop_all(q, items, 16);
        ck_assert_uint_le(queue_ops(q), 5);
        for (size_t i = 0; i < n; i++) {
            ck_assert_uint_eq(items[i].entry->pos.secs, expect);
            expect++;
            queue_item_clear(&items[i]);
        }
        if (n == 0)
            sched_yield();
    }
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_uint_eq(queue_len(q), 0);
    queue_free(q);
}
END_TEST

/* The byte bound: entries weigh what they hold (raw BSON and rendered text); a push that would pass the bound waits
 * for the consumer, whatever the op count, and a single entry bigger than the bound still goes into an empty queue. */
START_TEST(test_byte_bound)
{
    queue *q = queue_new(1000, 4096);
    op_entry *a = make_entry(1, 1), *b = make_entry(2, 1), *big = make_entry(3, 1);
    a->ops[0].json = calloc(1, 3000);
    a->ops[0].json_len = 3000;
    b->ops[0].json = calloc(1, 3000);
    b->ops[0].json_len = 3000;
    big->ops[0].json = calloc(1, 100000);
    big->ops[0].json_len = 100000;
    ck_assert_uint_ge(op_entry_bytes(a), 3000);
    ck_assert(queue_push_entry(q, a, NULL));
    ck_assert_uint_ge(queue_bytes(q), 3000);

    pusher_arg pa = {.q = q, .e = b};
    pthread_t t;
    start_pusher(&t, &pa);
    sleep_ms(150);
    ck_assert_msg(!atomic_load(&pa.done), "a push past the byte bound did not wait (1 op of 1000 queued)");
    queue_item it;
    ck_assert(queue_pop(q, &it));
    queue_item_clear(&it);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert(pa.result);
    ck_assert(queue_pop(q, &it));
    queue_item_clear(&it);
    ck_assert_uint_eq(queue_bytes(q), 0);

    /* Empty: an entry of 100 000 bytes passes a bound of 4 096 alone. */
    ck_assert(queue_push_entry(q, big, NULL));
    ck_assert_uint_ge(queue_bytes(q), 100000);
    queue_free(q); /* frees it */
}
END_TEST

/* The grouped producer side: entries wait in the group (not visible, no notify) until QUEUE_PUSH_GROUP of them or a
 * flush; one group is one notify; order is kept; reservations come a chunk at a time and go back at a flush. */
START_TEST(test_pusher_groups)
{
    queue *q = queue_new(100000, 64 * 1024 * 1024);
    atomic_int calls;
    atomic_init(&calls, 0);
    queue_set_notify(q, count_notify, &calls);
    queue_pusher p;
    queue_pusher_init(&p, q, NULL);
    for (uint32_t i = 1; i < QUEUE_PUSH_GROUP; i++) {
        ck_assert(queue_pusher_reserve(&p, 100));
        ck_assert(queue_pusher_add(&p, make_entry(i, 1), 100));
    }
    ck_assert_uint_eq(queue_len(q), 0); /* still in the group */
    ck_assert_int_eq(atomic_load(&calls), 0);
    ck_assert(queue_pusher_reserve(&p, 100));
    ck_assert(queue_pusher_add(&p, make_entry(QUEUE_PUSH_GROUP, 1), 100)); /* the group is full: pushed */
    ck_assert_uint_eq(queue_len(q), QUEUE_PUSH_GROUP);
    ck_assert_int_eq(atomic_load(&calls), 1);
    ck_assert(queue_pusher_reserve(&p, 100));
    ck_assert(queue_pusher_add(&p, make_entry(QUEUE_PUSH_GROUP + 1, 2), 100));
    ck_assert_uint_eq(queue_len(q), QUEUE_PUSH_GROUP);
    ck_assert(queue_pusher_flush(&p));
    ck_assert_uint_eq(queue_len(q), QUEUE_PUSH_GROUP + 1);
    ck_assert_uint_eq(queue_ops(q), QUEUE_PUSH_GROUP + 2);
    ck_assert_int_eq(atomic_load(&calls), 1); /* the queue was not empty: no second notify */
    ck_assert_uint_eq(p.held, 0);
    queue_item items[QUEUE_PUSH_GROUP + 1];
    size_t n = queue_pop_all(q, items, QUEUE_PUSH_GROUP + 1);
    ck_assert_uint_eq(n, QUEUE_PUSH_GROUP + 1);
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_eq(items[i].entry->pos.secs, i + 1);
        queue_item_clear(&items[i]);
    }
    /* Nothing is left reserved: a push into the empty queue of the full bound passes without waiting. */
    op_entry *big = make_entry(999, 1);
    big->ops[0].json = calloc(1, 1000);
    big->ops[0].json_len = 1000;
    ck_assert(queue_reserve(q, 64 * 1024 * 1024 - 2000, NULL));
    ck_assert(queue_push_entry_reserved(q, big, 64 * 1024 * 1024 - 2000, NULL));
    queue_free(q);
}
END_TEST

/* A byte bound below 16 chunks (a sharded cluster's queues share queue_bytes: 2 MB each of 8 MB over four shards)
 * still gets groups: reservations a sixteenth of the bound at a time, not one reservation (and one push) per entry. */
START_TEST(test_pusher_groups_under_a_small_bound)
{
    queue *q = queue_new(100000, 2 * 1024 * 1024);
    queue_pusher p;
    queue_pusher_init(&p, q, NULL);
    for (uint32_t i = 1; i < QUEUE_PUSH_GROUP; i++) {
        ck_assert(queue_pusher_reserve(&p, 1000));
        ck_assert(queue_pusher_add(&p, make_entry(i, 1), 1000));
    }
    ck_assert_uint_eq(queue_len(q), 0); /* all still in the group */
    ck_assert_uint_gt(p.held, 0);
    ck_assert(queue_pusher_flush(&p));
    ck_assert_uint_eq(queue_len(q), QUEUE_PUSH_GROUP - 1);
    ck_assert_uint_eq(p.held, 0);
    queue_free(q);
}
END_TEST

/* A producer never waits on room its own group holds: with a small byte bound, reserving more pushes the group first;
 * and a stop frees what is pending and makes the pusher fail. */
START_TEST(test_pusher_small_bound_and_stop)
{
    queue *q = queue_new(100000, 4096);
    queue_pusher p;
    queue_pusher_init(&p, q, NULL);
    ck_assert(queue_pusher_reserve(&p, 3000));
    ck_assert(queue_pusher_add(&p, make_entry(1, 1), 3000));
    ck_assert(queue_pusher_reserve(&p, 3000)); /* the first went to the queue, alone it passes: no deadlock */
    ck_assert_uint_eq(queue_len(q), 1);
    ck_assert(queue_pusher_add(&p, make_entry(2, 1), 3000));
    queue_item it;
    ck_assert(queue_pop(q, &it));
    queue_item_clear(&it);
    queue_stop(q);
    ck_assert(!queue_pusher_flush(&p)); /* the pending entry is freed (no leak under the sanitizers) */
    ck_assert_uint_eq(p.n, 0);
    ck_assert(!queue_pusher_reserve(&p, 10));
    queue_pusher_drop(&p);
    queue_free(q);
}
END_TEST

/* A group larger than the byte bound, and than what was reserved for it, goes into an empty queue: the chunk the
 * producer holds does not count against it (it did, and the push waited forever). */
START_TEST(test_pusher_group_over_the_bound_with_a_chunk_held)
{
    queue *q = queue_new(100000, 4096);
    queue_pusher p;
    queue_pusher_init(&p, q, NULL);
    ck_assert(queue_pusher_reserve(&p, 100));
    ck_assert_uint_gt(p.held, 0);
    op_entry *a = make_entry(1, 1), *b = make_entry(2, 1);
    a->ops[0].mapped_bytes = 3000; /* counted by op_entry_bytes, as a typed map's rows are */
    b->ops[0].mapped_bytes = 3000;
    ck_assert(queue_pusher_add(&p, a, 100));
    ck_assert(queue_pusher_add(&p, b, 0));
    ck_assert(queue_pusher_flush(&p));
    ck_assert_uint_eq(queue_len(q), 2);
    ck_assert_uint_eq(p.held, 0);
    queue_free(q);
}
END_TEST

/* queue_push_entries: one lock for many, the byte weights counted once, popped in order. */
START_TEST(test_push_entries)
{
    queue *q = queue_new(1000, 0);
    op_entry *es[3] = {make_entry(1, 1), make_entry(2, 3), make_entry(3, 1)};
    es[1]->ops[0].json = calloc(1, 500);
    es[1]->ops[0].json_len = 500;
    size_t b = op_entry_bytes(es[0]) + op_entry_bytes(es[1]) + op_entry_bytes(es[2]);
    ck_assert(queue_push_entries(q, es, 3, 0, NULL));
    ck_assert_uint_eq(queue_ops(q), 5);
    ck_assert_uint_eq(queue_bytes(q), b);
    queue_item items[4];
    ck_assert_uint_eq(queue_pop_all(q, items, 4), 3);
    ck_assert_uint_eq(queue_bytes(q), 0);
    for (size_t i = 0; i < 3; i++) {
        ck_assert_uint_eq(items[i].entry->pos.secs, i + 1);
        queue_item_clear(&items[i]);
    }
    /* Groups past the ring's first slots make it grow, several slots at a time, and wrap in order. */
    op_entry *group[50];
    for (uint32_t g = 0; g < 4; g++) {
        for (uint32_t i = 0; i < 50; i++)
            group[i] = make_entry(g * 50 + i + 1, 1);
        ck_assert(queue_push_entries(q, group, 50, 0, NULL));
    }
    ck_assert_uint_eq(queue_len(q), 200);
    for (uint32_t want = 1; want <= 200; want++) {
        queue_item it;
        ck_assert(queue_pop(q, &it));
        ck_assert_uint_eq(it.entry->pos.secs, want);
        queue_item_clear(&it);
    }
    queue_free(q);
}
END_TEST

/* queue_wait_drained waits until the queue is empty and the consumer released what it popped. */
typedef struct {
    queue *q;
    atomic_bool done;
    bool result;
} drain_arg;

static void *drain_main(void *p)
{
    drain_arg *a = p;
    a->result = queue_wait_drained(a->q, NULL);
    atomic_store(&a->done, true);
    return NULL;
}

START_TEST(test_wait_drained)
{
    queue *q = queue_new(100, 0);
    ck_assert(queue_wait_drained(q, NULL)); /* empty, nothing held */
    ck_assert(queue_push_entry(q, make_entry(1, 1), NULL));
    drain_arg a = {.q = q};
    atomic_init(&a.done, false);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, drain_main, &a), 0);
    sleep_ms(100);
    ck_assert_msg(!atomic_load(&a.done), "returned with an entry queued");
    queue_item it;
    ck_assert(queue_pop(q, &it));
    sleep_ms(100);
    ck_assert_msg(!atomic_load(&a.done), "returned while the popped entry was still held");
    queue_item_clear(&it);
    queue_release(q);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert(a.result);
    /* a stop ends the wait with false */
    ck_assert(queue_push_entry(q, make_entry(2, 1), NULL));
    atomic_store(&a.done, false);
    ck_assert_int_eq(pthread_create(&t, NULL, drain_main, &a), 0);
    sleep_ms(50);
    queue_stop(q);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert(!a.result);
    queue_free(q);
}
END_TEST

Suite *queue_suite(void)
{
    Suite *s = suite_create("queue");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_fifo_and_types);
    tcase_add_test(tc, test_many_items_wrap);
    tcase_add_test(tc, test_bounded_blocks_until_pop);
    tcase_add_test(tc, test_stop_wakes_blocked_pusher);
    tcase_add_test(tc, test_cancel_wakes_blocked_pusher);
    tcase_add_test(tc, test_oversize_entry_when_empty);
    tcase_add_test(tc, test_notify_on_empty_to_nonempty_only);
    tcase_add_test(tc, test_producer_consumer);
    tcase_add_test(tc, test_byte_bound);
    tcase_add_test(tc, test_pusher_groups);
    tcase_add_test(tc, test_pusher_groups_under_a_small_bound);
    tcase_add_test(tc, test_pusher_small_bound_and_stop);
    tcase_add_test(tc, test_pusher_group_over_the_bound_with_a_chunk_held);
    tcase_add_test(tc, test_push_entries);
    tcase_add_test(tc, test_wait_drained);
    suite_add_tcase(s, tc);
    return s;
}

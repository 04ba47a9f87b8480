/*
 * test_merge.c — the merge of several sources into one stream (core/merge.h), fed from fake per-source queues with
 * a fake clock.
 *
 * Items handed on are written as a line: "A10" is an entry of source A (index 0) at Timestamp(10, 0), "B7.2" one of
 * source B at (7, 2); a "+" follows a part with more to come, a "*" an entry marked no_commit; "idle" and
 * "end:<reason>" are the markers. So each test states the exact stream the apply loop would see.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/batcher.h"
#include "core/merge.h"

Suite *merge_suite(void); /* called by the generated runner list */

#define MAXS 8
#define QCAP (1u << 12)

/* A source's queue: a plain array, popped from the front. */
typedef struct {
    queue_item *it;
    size_t head, tail;
    size_t pops;  /* items popped */
    size_t calls; /* pops that took something, one item or a batch (what the queue's lock would be taken for) */
} fake_queue;

typedef struct {
    size_t source;
    op_pos past;
    uint64_t at;
} nudge_rec;

static fake_queue Q[MAXS];
static merge *M;
static uint64_t NOW;
static nudge_rec NUDGES[256];
static size_t NNUDGE;
static char LINE[8192];

static bool fq_pop(void *arg, size_t s, queue_item *out)
{
    (void)arg;
    ck_assert_uint_lt(s, MAXS);
    fake_queue *q = &Q[s];
    if (q->head == q->tail)
        return false;
    *out = q->it[q->head++];
    q->pops++;
    q->calls++;
    return true;
}

/* The "batched" cases feed the merge through pop_many, at most BATCH items a call (fewer than MERGE_POP_MAX, so that
 * a buffer runs out and is filled again within a test's short streams). */
static bool BATCHED;
static size_t BATCH = 3;

static size_t fq_pop_many(void *arg, size_t s, queue_item *out, size_t max)
{
    (void)arg;
    ck_assert_uint_lt(s, MAXS);
    ck_assert_uint_le(max, MERGE_POP_MAX);
    fake_queue *q = &Q[s];
    size_t n = 0;
    while (n < max && n < BATCH && q->head < q->tail)
        out[n++] = q->it[q->head++];
    q->pops += n;
    q->calls += n > 0;
    return n;
}

static void on_nudge(void *arg, size_t s, const op_pos *past)
{
    (void)arg;
    ck_assert_uint_lt(NNUDGE, sizeof NUDGES / sizeof *NUDGES);
    NUDGES[NNUDGE++] = (nudge_rec){.source = s, .past = *past, .at = NOW};
}

static void drop_all(void)
{
    merge_free(M);
    M = NULL;
    for (size_t s = 0; s < MAXS; s++) {
        for (size_t i = Q[s].head; i < Q[s].tail; i++)
            queue_item_clear(&Q[s].it[i]);
        free(Q[s].it);
        memset(&Q[s], 0, sizeof Q[s]);
    }
}

/* A new merge of n sources fed through fq_pop (pull), or through merge_put when pull is false. */
static void start_with(size_t n, uint64_t wait_ms, bool pull)
{
    drop_all();
    for (size_t s = 0; s < MAXS; s++) {
        Q[s].it = calloc(QCAP, sizeof *Q[s].it);
        ck_assert_ptr_nonnull(Q[s].it);
    }
    merge_config cfg = {.n_sources = n,
                        .wait_ms = wait_ms,
                        .nudge = on_nudge,
                        .pop = pull && !BATCHED ? fq_pop : NULL,
                        .pop_many = pull && BATCHED ? fq_pop_many : NULL};
    M = merge_new(&cfg);
    ck_assert_ptr_nonnull(M);
    NOW = 1000;
    NNUDGE = 0;
}

static void start(size_t n, uint64_t wait_ms)
{
    start_with(n, wait_ms, true);
}

static void setup(void)
{
    memset(Q, 0, sizeof Q);
    M = NULL;
    BATCHED = false;
}

static void setup_batched(void)
{
    setup();
    BATCHED = true;
    BATCH = 3;
}

static void teardown(void)
{
    drop_all();
}

static void push_item(size_t s, queue_item it)
{
    ck_assert_uint_lt(Q[s].tail, QCAP);
    Q[s].it[Q[s].tail++] = it;
}

/* Queues an entry of source s at (secs, inc): one op of `kind` (without payload). Returned so the test can set its
 * flags. */
static op_entry *push_kind_at(size_t s, uint32_t secs, uint32_t inc, op_kind kind)
{
    op_entry *e = malloc(sizeof *e);
    ck_assert_ptr_nonnull(e);
    op_pos pos = {.secs = secs, .inc = inc, .term = 1};
    ck_assert(op_entry_alloc(e, &pos, 1));
    e->ops[0].kind = kind;
    e->ops[0].reason = kind == OP_NOOP ? "test" : NULL;
    if (kind != OP_NOOP) { /* static names: op_clear frees only what the op's buffer holds */
        e->ops[0].db = "db";
        e->ops[0].coll = "coll";
    }
    e->source = (uint16_t)s;
    push_item(s, (queue_item){.type = QUEUE_ENTRY, .entry = e});
    return e;
}

/* An entry that changes something (a delete): handed on in order. */
static op_entry *push_at(size_t s, uint32_t secs, uint32_t inc)
{
    return push_kind_at(s, secs, inc, OP_DELETE);
}

/* An entry that changes nothing (a noop): handed on as soon as it is its source's head. */
static op_entry *push_noop(size_t s, uint32_t secs)
{
    return push_kind_at(s, secs, 0, OP_NOOP);
}

static op_entry *push(size_t s, uint32_t secs)
{
    return push_at(s, secs, 0);
}

static op_entry *push_txn(size_t s, uint32_t secs, op_txn_role role, uint64_t key, bool more)
{
    op_entry *e = push(s, secs);
    e->txn_role = (uint8_t)role;
    e->txn_key = key;
    e->more = more;
    return e;
}

static void push_idle(size_t s)
{
    push_item(s, (queue_item){.type = QUEUE_IDLE});
}

static void push_end(size_t s, queue_end_reason reason)
{
    push_item(s, (queue_item){.type = QUEUE_END, .reason = reason, .message = strdup("stopped")});
}

static void describe(char *buf, size_t len, const queue_item *it)
{
    if (it->type == QUEUE_IDLE) {
        snprintf(buf, len, "idle");
    } else if (it->type == QUEUE_END) {
        snprintf(buf, len, "end:%d", (int)it->reason);
    } else {
        const op_entry *e = it->entry;
        char inc[16] = "";
        if (e->pos.inc != 0)
            snprintf(inc, sizeof inc, ".%u", e->pos.inc);
        snprintf(buf, len, "%c%u%s%s%s", 'A' + e->source, e->pos.secs, inc, e->more ? "+" : "",
                 e->no_commit ? "*" : "");
    }
}

/* One merge_take of at most max items at NOW, written as a line (the items are freed). */
static const char *take_max(size_t max)
{
    queue_item out[64];
    ck_assert_uint_le(max, 64);
    size_t n = merge_take(M, out, max, NOW);
    ck_assert_uint_le(n, max);
    LINE[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        char one[64];
        describe(one, sizeof one, &out[i]);
        size_t len = strlen(LINE);
        snprintf(LINE + len, sizeof LINE - len, "%s%s", i ? " " : "", one);
        queue_item_clear(&out[i]);
    }
    return LINE;
}

static const char *take(void)
{
    return take_max(64);
}

#define expect_take(want)                                                                                              \
    do {                                                                                                               \
        const char *got_ = take();                                                                                     \
        ck_assert_msg(strcmp(got_, want) == 0, "\n  want: %s\n  got:  %s", want, got_);                                \
    } while (0)

static merge_source_stats stats_of(size_t s)
{
    merge_source_stats st;
    ck_assert(merge_get_source_stats(M, s, &st));
    return st;
}

/* ---- order ---- */

START_TEST(test_order_waits_for_every_watermark)
{
    start(2, 100);
    push(0, 1);
    push(0, 3);
    push(0, 5);
    push(1, 2);
    push(1, 4);
    expect_take("A1 B2 A3 B4"); /* A5 waits: B showed nothing past 4 */
    ck_assert_uint_eq(merge_held(M), 1);
    expect_take("");
    push(1, 6); /* a noop moves B's watermark like any entry */
    expect_take("A5");
    push(0, 6);
    expect_take("A6 B6"); /* a tie: the lower source index first */
    merge_stats ms;
    merge_get_stats(M, &ms);
    ck_assert_uint_eq(ms.entries, 7);
    ck_assert_uint_eq(ms.no_commit, 0);
}
END_TEST

/* A source that shows nothing holds everything: before its first entry, and after its watermark. */
START_TEST(test_silent_source_holds_the_stream)
{
    start(3, 100);
    for (uint32_t t = 1; t <= 10; t++)
        push(0, t);
    push(1, 20);
    expect_take(""); /* C has shown nothing at all */
    ck_assert(!stats_of(2).known);
    push(2, 4);
    expect_take("A1 A2 A3 A4 C4");
    ck_assert(stats_of(2).known);
    ck_assert_uint_eq(stats_of(2).watermark.secs, 4);
    ck_assert(stats_of(2).holding);
    ck_assert(!stats_of(1).holding);
    ck_assert(stats_of(1).has_head);
    /* the merge never takes more than one item of a source whose head waits: the rest stays in its queue */
    ck_assert_uint_eq(Q[0].pops, 5);
    ck_assert_uint_eq(Q[0].tail - Q[0].head, 5);
    ck_assert_uint_eq(merge_held(M), 2);
}
END_TEST

/* Two to four sources, random positions (ties across sources included), parts and noops, fed in random bursts with
 * takes of random sizes between them: after every take that ended for want of ready entries, what was handed on is
 * exactly everything fed up to the lowest watermark, sorted by (position, source). */
typedef struct {
    size_t source;
    op_pos pos;
    bool more;
    size_t seq;
} fed;

static int fed_cmp(const void *a, const void *b)
{
    const fed *x = a, *y = b;
    int c = op_pos_cmp(&x->pos, &y->pos);
    if (c != 0)
        return c;
    if (x->source != y->source)
        return x->source < y->source ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static uint64_t rng_state;

static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 6364136223846793005u + 1442695040888963407u;
    return (uint32_t)(rng_state >> 33) % n;
}

/* An entry that changes nothing passes at once; one that changes something waits for the others' watermarks. Held
 * in order, B's note at 30 (written so that A's 20 may pass) would wait for A to show something after 30. */
START_TEST(test_noops_pass_at_once)
{
    start(2, 100);
    push(0, 10);
    push_noop(1, 5);
    expect_take("B5"); /* B's noop at once, though A's entry was queued first; A's 10 waits: B shows 5 only */
    ck_assert(stats_of(1).holding);
    push_noop(1, 30); /* a note */
    expect_take("B30 A10");
    push(1, 40);
    push_noop(0, 50);
    expect_take("A50 B40"); /* A's noop passes at once; then B's 40 is behind A's 50 */
    push(1, 60);
    expect_take(""); /* B's entry at 60 waits for A to show something at or after it */
    ck_assert(stats_of(0).holding);
}
END_TEST

START_TEST(test_random_interleavings_keep_the_order)
{
    enum { PER = 400, MAXFED = 4 * PER * 3 };
    static fed all[MAXFED], got[MAXFED], want[MAXFED];
    for (int round = 0; round < 40; round++) {
        rng_state = 0x5eed0000u + (uint64_t)round;
        size_t n = 2 + rnd(3);
        start(n, 50);
        op_pos last[MAXS];
        size_t left[MAXS];
        size_t nall = 0, ngot = 0, seq = 0, steps = 0;
        for (size_t s = 0; s < n; s++) {
            last[s] = (op_pos){.secs = 1 + rnd(3), .inc = rnd(3), .term = 1};
            left[s] = PER;
        }
        bool shown[MAXS] = {false};
        for (;;) {
            /* a burst from one source: its next logical entries, each one to three parts at one position */
            size_t s = rnd((uint32_t)n);
            size_t burst = rnd(4);
            for (size_t b = 0; b < burst && left[s] > 0; b++, left[s]--) {
                op_pos p = last[s];
                if (rnd(2))
                    p.secs += 1 + rnd(2);
                p.inc = rnd(2) ? p.inc + 1 : (p.secs != last[s].secs ? rnd(3) : p.inc + 1);
                last[s] = p;
                size_t parts = rnd(5) == 0 ? 2 + rnd(2) : 1;
                for (size_t k = 0; k < parts; k++) {
                    op_entry *e = push_at(s, p.secs, p.inc);
                    e->more = k + 1 < parts;
                    all[nall++] = (fed){.source = s, .pos = p, .more = e->more, .seq = seq++};
                }
                shown[s] = true;
                if (rnd(8) == 0)
                    push_idle(s);
            }
            /* takes of random sizes, until one ends for want of ready entries */
            for (;;) {
                size_t max = 1 + rnd(12);
                queue_item out[16];
                size_t k = merge_take(M, out, max, NOW);
                bool idle = false;
                for (size_t i = 0; i < k; i++) {
                    ck_assert(!idle); /* IDLE only ends a take */
                    if (out[i].type == QUEUE_IDLE) {
                        idle = true;
                        continue;
                    }
                    ck_assert_int_eq(out[i].type, QUEUE_ENTRY);
                    const op_entry *e = out[i].entry;
                    ck_assert(!e->no_commit);
                    got[ngot++] = (fed){.source = e->source, .pos = e->pos, .more = e->more};
                    queue_item_clear(&out[i]);
                }
                if (k < max)
                    break;
            }
            /* the lowest watermark; nothing at all is ready before every source showed something */
            bool all_shown = true;
            op_pos low = {.secs = UINT32_MAX, .inc = UINT32_MAX};
            for (size_t i = 0; i < n; i++) {
                all_shown = all_shown && shown[i];
                if (op_pos_cmp(&last[i], &low) < 0)
                    low = last[i];
            }
            bool done = true;
            for (size_t i = 0; i < n; i++)
                done = done && left[i] == 0;
            size_t nwant = 0;
            if (all_shown)
                for (size_t i = 0; i < nall; i++)
                    if (op_pos_cmp(&all[i].pos, &low) <= 0)
                        want[nwant++] = all[i];
            ck_assert_uint_eq(ngot, nwant);
            if (++steps % 32 != 0 && !done)
                continue; /* the whole comparison now and then: the count every time */
            qsort(want, nwant, sizeof *want, fed_cmp);
            for (size_t i = 0; i < ngot; i++) {
                ck_assert_msg(got[i].source == want[i].source && op_pos_cmp(&got[i].pos, &want[i].pos) == 0 &&
                                  got[i].more == want[i].more,
                              "round %d item %zu: got %zu@%u.%u want %zu@%u.%u", round, i, got[i].source,
                              got[i].pos.secs, got[i].pos.inc, want[i].source, want[i].pos.secs, want[i].pos.inc);
            }
            if (done)
                break;
        }
        ck_assert_uint_gt(ngot, 0);
    }
}
END_TEST

/* The parts of one source's logical entry come out together: an entry of another source at the same position (or
 * after it) waits for the last part, even while the next part is still on its way. */
START_TEST(test_parts_are_never_interleaved)
{
    start(2, 100);
    push(0, 5)->more = true;
    push(1, 5);
    push(1, 6);
    expect_take("A5+"); /* B5 comes after (5, A) and must wait for the rest of A's entry */
    ck_assert(stats_of(0).holding);
    NOW += 1000;
    expect_take("");
    ck_assert_uint_eq(NNUDGE, 0); /* a source in the middle of its parts is not nudged */
    ck_assert_uint_eq(merge_deadline(M), UINT64_MAX);
    push(0, 5)->more = true;
    expect_take("A5+");
    push(0, 5);
    push(0, 7);
    expect_take("A5 B5 B6"); /* A7 waits for B past 6 */
    ck_assert(!stats_of(0).holding);
    ck_assert(stats_of(1).holding);
    ck_assert_uint_eq(stats_of(0).waited_ms, 1000);

    /* the same with the parts on the higher source index: the lower one's entry at the same position goes first */
    start(2, 100);
    push(1, 5)->more = true;
    push(1, 5);
    push(0, 5);
    push(0, 6);
    push(1, 6)->more = true;
    push(1, 6)->more = true;
    push(0, 7);
    push(1, 6);
    expect_take("A5 B5+ B5 A6 B6+ B6+ B6");
}
END_TEST

/* ---- nudges ---- */

START_TEST(test_nudge_after_wait_and_each_wait_after)
{
    start(3, 100);
    push(0, 10);
    push(1, 5);
    push(2, 30);
    expect_take("B5"); /* A10 waits for B, which showed 5 */
    ck_assert(stats_of(1).holding);
    ck_assert(!stats_of(2).holding); /* C's head is after A10 */
    ck_assert_uint_eq(merge_deadline(M), 1100);
    NOW = 1099;
    expect_take("");
    ck_assert_uint_eq(NNUDGE, 0);
    NOW = 1100;
    expect_take("");
    ck_assert_uint_eq(NNUDGE, 1);
    ck_assert_uint_eq(NUDGES[0].source, 1);
    ck_assert_uint_eq(NUDGES[0].past.secs, 10);
    ck_assert_uint_eq(merge_deadline(M), 1200);
    NOW = 1150;
    expect_take("");
    ck_assert_uint_eq(NNUDGE, 1);
    NOW = 1230; /* a late call: the next one is a wait from this one */
    expect_take("");
    ck_assert_uint_eq(NNUDGE, 2);
    ck_assert_uint_eq(merge_deadline(M), 1330);
    ck_assert_uint_eq(stats_of(1).nudges, 2);
    ck_assert_uint_eq(stats_of(1).waited_ms, 230);
    /* B shows a note past 10: A10 goes; now A holds B11 back, from now on */
    push(1, 11);
    NOW = 1250;
    expect_take("A10");
    ck_assert(!stats_of(1).holding);
    ck_assert_uint_eq(stats_of(1).waited_ms, 250);
    ck_assert(stats_of(0).holding);
    ck_assert_uint_eq(merge_deadline(M), 1350);
    NOW = 1350;
    expect_take("");
    ck_assert_uint_eq(NNUDGE, 3);
    ck_assert_uint_eq(NUDGES[2].source, 0);
    ck_assert_uint_eq(NUDGES[2].past.secs, 11);
    /* the stream drains: nobody holds it, nothing is due */
    push(0, 40);
    push(1, 40);
    NOW = 1360;
    expect_take("B11 C30");
    ck_assert(!stats_of(0).holding);
    ck_assert(stats_of(2).holding); /* A40 waits for C past 30: a new wait, from now */
    ck_assert_uint_eq(merge_deadline(M), 1460);
    push(2, 41);
    NOW = 1400;
    expect_take("A40 B40");
    ck_assert(stats_of(0).holding); /* C41 waits for A and B */
    ck_assert(stats_of(1).holding);
    ck_assert(!stats_of(2).holding);
    push(0, 50);
    push(1, 50);
    NOW = 1410;
    expect_take("C41");
    ck_assert_uint_eq(merge_deadline(M), 1510);
    ck_assert(stats_of(2).holding);
    push(2, 50);
    expect_take("A50 B50 C50");
    ck_assert_uint_eq(merge_deadline(M), UINT64_MAX); /* drained: nobody holds anything back */
    merge_stats ms;
    merge_get_stats(M, &ms);
    ck_assert_uint_eq(ms.nudges, 3);
}
END_TEST

/* A source that has shown nothing is nudged too (past the entry it holds back); one that ended is not. */
START_TEST(test_nudge_unknown_not_ended)
{
    start(3, 50);
    push(0, 10);
    push(1, 12);
    expect_take("");
    NOW += 50;
    expect_take("");
    ck_assert_uint_eq(NNUDGE, 1);
    ck_assert_uint_eq(NUDGES[0].source, 2);
    ck_assert_uint_eq(NUDGES[0].past.secs, 10);
    push_end(2, QUEUE_END_RETRY);
    expect_take("end:6");
    ck_assert(stats_of(2).ended);
    NOW += 500;
    expect_take("");
    ck_assert_uint_eq(NNUDGE, 1);
    ck_assert_uint_eq(merge_deadline(M), UINT64_MAX);
}
END_TEST

/* ---- transactions across sources ---- */

START_TEST(test_cross_source_commit_is_not_split)
{
    start(3, 100);
    push_txn(0, 10, OP_TXN_PREPARE, 77, false);
    push_txn(1, 11, OP_TXN_PREPARE, 77, false);
    push(2, 12);
    push_txn(0, 20, OP_TXN_COMMIT, 77, true); /* A's commit in two parts */
    push_txn(0, 20, OP_TXN_COMMIT, 77, false);
    push(2, 21);
    push(2, 22);
    push_txn(1, 25, OP_TXN_COMMIT, 77, false);
    push(0, 30);
    push(1, 30);
    push(2, 30);
    expect_take("A10 B11 C12 A20+* A20* C21* C22* B25 A30 B30 C30");
    merge_stats ms;
    merge_get_stats(M, &ms);
    ck_assert_uint_eq(ms.no_commit, 4);
    ck_assert_uint_eq(ms.open_txns, 0);
}
END_TEST

/* Prepared and not decided: nothing is held from commits; an abort closes the participants the same way. */
START_TEST(test_cross_source_abort)
{
    start(3, 100);
    push_txn(0, 10, OP_TXN_PREPARE, 5, false);
    push_txn(1, 11, OP_TXN_PREPARE, 5, false);
    push_txn(2, 11, OP_TXN_PREPARE, 6, false); /* another transaction, left open */
    push_txn(0, 20, OP_TXN_ABORT, 5, false);
    push(2, 21);
    expect_take("A10 B11 C11"); /* A20 waits for B past 11 */
    merge_stats ms;
    merge_get_stats(M, &ms);
    ck_assert_uint_eq(ms.open_txns, 2);
    push_txn(1, 25, OP_TXN_ABORT, 5, false);
    push(0, 30);
    push(1, 30);
    push(2, 30);
    expect_take("A20 C21 B25 A30 B30 C30");
    merge_get_stats(M, &ms);
    ck_assert_uint_eq(ms.no_commit, 0);
    ck_assert_uint_eq(ms.open_txns, 1); /* key 6 */
}
END_TEST

/* After a restart: a participant whose prepare is at or before its checkpoint tells the merge with a note_only entry,
 * counted and never handed on, and saying nothing of the source's watermark. */
START_TEST(test_note_only_prepares_from_a_restart)
{
    start(2, 100);
    op_entry *note = push_txn(0, 3, OP_TXN_PREPARE, 9, false);
    note->note_only = true;
    note = push_txn(1, 4, OP_TXN_PREPARE, 9, false);
    note->note_only = true;
    expect_take(""); /* notes are no watermark: both sources are still unknown */
    ck_assert(!stats_of(0).known);
    ck_assert_uint_eq(stats_of(0).notes, 1);
    ck_assert_uint_eq(stats_of(1).notes, 1);
    merge_stats ms;
    merge_get_stats(M, &ms);
    ck_assert_uint_eq(ms.open_txns, 1);
    push_txn(0, 20, OP_TXN_COMMIT, 9, false);
    push(1, 21);
    push(0, 22);
    push_txn(1, 25, OP_TXN_COMMIT, 9, false);
    push(0, 30);
    push(1, 30);
    expect_take("A20* B21* A22* B25 A30 B30");
    merge_get_stats(M, &ms);
    ck_assert_uint_eq(ms.open_txns, 0);
    ck_assert_uint_eq(ms.entries, 6);
}
END_TEST

/* Many transactions open at once (the table grows, and entries leave it in any order). */
START_TEST(test_many_open_transactions)
{
    start(2, 100);
    uint32_t t = 1;
    for (uint64_t k = 1; k <= 300; k++) {
        push_txn(0, t++, OP_TXN_PREPARE, k * 0x10001, false);
        push_txn(1, t++, OP_TXN_PREPARE, k * 0x10001, false);
    }
    for (uint64_t k = 1; k <= 300; k += 2) /* odd keys abort on both sides */
        push_txn(0, t++, OP_TXN_ABORT, k * 0x10001, false);
    for (uint64_t k = 1; k <= 300; k += 2)
        push_txn(1, t++, OP_TXN_ABORT, k * 0x10001, false);
    push(0, t++);
    for (uint64_t k = 300; k >= 2; k -= 2) /* even keys commit, last opened first */
        push_txn(1, t++, OP_TXN_COMMIT, k * 0x10001, false);
    push(0, t);
    size_t total = 0;
    uint64_t marked = 0;
    for (;;) {
        queue_item out[64];
        size_t n = merge_take(M, out, 64, NOW);
        for (size_t i = 0; i < n; i++) {
            marked += out[i].entry->no_commit;
            queue_item_clear(&out[i]);
        }
        total += n;
        if (n < 64)
            break;
    }
    /* B's commits leave each of their transactions open on A (A never commits them), so every one of them is marked;
     * A's last entry waits for B past it */
    merge_stats ms;
    merge_get_stats(M, &ms);
    ck_assert_uint_eq(ms.open_txns, 150);
    ck_assert_uint_eq(marked, 150);
    ck_assert_uint_eq(total, 600 + 300 + 1 + 150);
}
END_TEST

/* ---- IDLE, END, sources added, retired, fed by hand ---- */

START_TEST(test_idle_once_when_nothing_is_ready)
{
    start(2, 100);
    push_idle(0);
    push_idle(1);
    expect_take("idle");
    expect_take("");
    push(0, 3);
    push_idle(0);
    push(1, 5);
    expect_take("A3 idle"); /* B5 waits for A; the IDLE after A3 is handed on as nothing more is ready */
    /* an IDLE behind a waiting head stays in its queue; one taken when out[] is full waits for the next take */
    push(0, 6);
    push(0, 7);
    push_idle(0);
    push(1, 8);
    ck_assert_str_eq(take_max(3), "B5 A6 A7");
    expect_take("idle");
    merge_stats ms;
    merge_get_stats(M, &ms);
    ck_assert_uint_eq(ms.idles, 3);
}
END_TEST

START_TEST(test_end_is_handed_on_at_once)
{
    start(2, 100);
    push(0, 10);
    push_end(1, QUEUE_END_RESUME_LOST);
    expect_take("end:1"); /* and A10 waits: B never showed anything */
    ck_assert(!merge_wants(M, 1));
    expect_take("");

    start(2, 100);
    push(0, 1);
    push(0, 2);
    push(0, 3);
    op_pos far = {.secs = 100, .inc = 0, .term = 1};
    merge_set_watermark(M, 1, &far);
    push_end(1, QUEUE_END_DONE);
    expect_take("end:0 A1 A2 A3");

    start(2, 100);
    push(0, 10);
    push(1, 3);
    push_end(1, QUEUE_END_UNSUPPORTED);
    expect_take("B3 end:2"); /* the ended source keeps holding at its watermark */
    ck_assert(stats_of(1).holding);
}
END_TEST

START_TEST(test_source_going_back_ends_the_stream)
{
    start(2, 100);
    push(0, 10);
    push(0, 9);
    push(0, 11);
    push(1, 20);
    queue_item out[8];
    size_t n = merge_take(M, out, 8, NOW);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(out[0].type, QUEUE_ENTRY);
    ck_assert_int_eq(out[1].type, QUEUE_END);
    ck_assert_int_eq(out[1].reason, QUEUE_END_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(out[1].message, "went back"));
    for (size_t i = 0; i < n; i++)
        queue_item_clear(&out[i]);
    push(1, 21);
    expect_take(""); /* nothing after it */
}
END_TEST

START_TEST(test_source_added_while_running)
{
    start(2, 100);
    push(0, 1);
    push(1, 2);
    push(0, 3);
    push(1, 4);
    expect_take("A1 B2 A3");
    ck_assert_uint_eq(merge_add_source(M), 2);
    ck_assert_uint_eq(merge_source_count(M), 3);
    push(0, 5);
    expect_take(""); /* the new source's watermark is unknown: it holds everything */
    ck_assert(stats_of(2).holding);
    push(2, 4);
    expect_take("B4 C4");
    push(2, 9);
    expect_take("");
    push(1, 9);
    expect_take("A5");
    /* or the caller knows where it starts */
    ck_assert_uint_eq(merge_add_source(M), 3);
    op_pos from = {.secs = 8, .inc = 0, .term = 1};
    merge_set_watermark(M, 3, &from);
    push(0, 8);
    expect_take("A8");
    ck_assert_uint_eq(stats_of(3).entries, 0);
    ck_assert(stats_of(3).holding); /* B9 waits for A and D past 8 */
    /* and more sources than the first allocation held */
    for (size_t k = 4; k < MAXS; k++) {
        ck_assert_uint_eq(merge_add_source(M), k);
        merge_set_watermark(M, k, &from);
    }
    push(0, 9);
    expect_take("");
    ck_assert(stats_of(3).holding);
    merge_set_watermark(M, 3, &(op_pos){.secs = 50});
    for (size_t k = 4; k < MAXS; k++)
        push(k, 50);
    expect_take("A9 B9 C9");
}
END_TEST

START_TEST(test_retired_source_holds_nothing)
{
    start(2, 100);
    push(0, 1);
    push(1, 3);
    push(1, 4);
    expect_take("A1");
    merge_retire_source(M, 1);
    ck_assert(!merge_wants(M, 1));
    push(0, 6);
    expect_take("B3 A6"); /* B's head is still handed on in order; then B holds nothing back */
    push(0, 7);
    expect_take("A7");
    ck_assert_uint_eq(Q[1].pops, 1); /* never taken from again */
    ck_assert(stats_of(1).retired);
}
END_TEST

START_TEST(test_fed_by_hand)
{
    start_with(2, 100, false);
    queue_item it;
    for (uint32_t t = 1; t <= 3; t++)
        push(0, t);
    push(1, 2);
    ck_assert(merge_wants(M, 0));
    ck_assert(fq_pop(NULL, 0, &it));
    ck_assert(merge_put(M, 0, &it));
    ck_assert(!merge_wants(M, 0));
    ck_assert(fq_pop(NULL, 0, &it));
    ck_assert(!merge_put(M, 0, &it)); /* still the caller's */
    Q[0].head--;                      /* put it back */
    expect_take("");
    ck_assert(fq_pop(NULL, 1, &it));
    ck_assert(merge_put(M, 1, &it));
    expect_take("A1"); /* without pop, the merge cannot take A2 itself */
    ck_assert(merge_wants(M, 0));
    ck_assert(fq_pop(NULL, 0, &it));
    ck_assert(merge_put(M, 0, &it));
    expect_take("A2 B2");
}
END_TEST

/* One busy source beside idle ones showing noops now and then: a long run, in order, with nothing left behind. */
START_TEST(test_busy_source_beside_idle_ones)
{
    start(4, 100);
    uint64_t handed = 0, fed_n = 0;
    uint32_t t = 1;
    for (int round = 0; round < 200; round++) {
        for (int k = 0; k < 250; k++, fed_n++)
            push(0, t++);
        for (size_t s = 1; s < 4; s++, fed_n++)
            push(s, t);
        t++;
        op_pos prev = {0};
        for (;;) {
            queue_item out[64];
            size_t n = merge_take(M, out, 64, NOW);
            for (size_t i = 0; i < n; i++) {
                ck_assert_int_eq(out[i].type, QUEUE_ENTRY);
                ck_assert_int_ge(op_pos_cmp(&out[i].entry->pos, &prev), 0);
                prev = out[i].entry->pos;
                queue_item_clear(&out[i]);
            }
            handed += n;
            if (n < 64)
                break;
        }
        for (size_t s = 0; s < MAXS; s++) { /* recycle the fake queues */
            ck_assert_uint_eq(Q[s].head, Q[s].tail);
            Q[s].head = Q[s].tail = 0;
        }
    }
    ck_assert_uint_eq(handed, fed_n - 3); /* the last noops wait for the busy source past them */
    ck_assert_uint_eq(merge_held(M), 3);
}
END_TEST

/* ---- the merge's stream through the batcher ---- */

static char COMMITS[1024];

static void *nop_run_new(void *ctx)
{
    (void)ctx;
    return calloc(1, 1);
}

static void nop_run_free(void *ctx, void *run)
{
    (void)ctx;
    free(run);
}

static apply_status nop_run_add(void *ctx, void *run, op *o)
{
    (void)ctx;
    (void)run;
    (void)o;
    return APPLY_OK;
}

static size_t nop_run_rows(void *ctx, const void *run)
{
    (void)ctx;
    (void)run;
    return 0;
}

static void nop_run_reset(void *ctx, void *run, bool keep)
{
    (void)ctx;
    (void)run;
    (void)keep;
}

static apply_status nop_insert_run(void *ctx, const char *db, const char *coll, void *run, const op_pos *pos)
{
    (void)ctx;
    (void)db;
    (void)coll;
    (void)run;
    (void)pos;
    return APPLY_OK;
}

static apply_status nop_apply(void *ctx, const op *o)
{
    (void)ctx;
    (void)o;
    return APPLY_OK;
}

static void rec_sources(void *ctx, const batcher_source_pos *sp, size_t n)
{
    (void)ctx;
    size_t len = strlen(COMMITS);
    snprintf(COMMITS + len, sizeof COMMITS - len, "[");
    for (size_t i = 0; i < n; i++) {
        len = strlen(COMMITS);
        snprintf(COMMITS + len, sizeof COMMITS - len, "%s%c%u%s", i ? " " : "", (char)('A' + i), sp[i].pos.secs,
                 sp[i].moved ? "" : "=");
    }
    len = strlen(COMMITS);
    snprintf(COMMITS + len, sizeof COMMITS - len, "]");
}

static apply_status rec_commit(void *ctx, const op_pos *pos)
{
    (void)ctx;
    size_t len = strlen(COMMITS);
    snprintf(COMMITS + len, sizeof COMMITS - len, " commit %u; ", pos->secs);
    return APPLY_OK;
}

/* The merge and the batcher together: committing after every entry (per-op), with IDLE markers flushing between,
 * a transaction committed on A and then on B still reaches PostgreSQL in one commit, which moves both sources. */
START_TEST(test_batcher_commits_a_cross_source_transaction_whole)
{
    start(2, 100);
    COMMITS[0] = '\0';
    batcher_sink out = {.run_new = nop_run_new,
                        .run_free = nop_run_free,
                        .run_add = nop_run_add,
                        .run_rows = nop_run_rows,
                        .run_reset = nop_run_reset,
                        .insert_run = nop_insert_run,
                        .apply = nop_apply,
                        .commit = rec_commit,
                        .set_sources = rec_sources};
    batcher_config cfg = {.batch_rows = 1000, .batch_bytes = 1 << 20, .flush_interval_ms = 10, .per_op = true};
    batcher *b = batcher_new(&cfg, &out);
    ck_assert_ptr_nonnull(b);
    push_txn(0, 10, OP_TXN_PREPARE, 1, false);
    push_txn(1, 11, OP_TXN_PREPARE, 1, false);
    push_txn(0, 20, OP_TXN_COMMIT, 1, false);
    push_idle(0);
    push(1, 21);
    push_idle(1);
    push_txn(1, 25, OP_TXN_COMMIT, 1, false);
    push(0, 30);
    push(1, 31);
    for (int round = 0; round < 4; round++) {
        queue_item items[2];
        size_t n;
        /* two at a time, so that the IDLE markers come between the transaction's entries */
        while ((n = merge_take(M, items, 2, NOW)) > 0) {
            for (size_t i = 0; i < n; i++) {
                if (items[i].type == QUEUE_ENTRY)
                    ck_assert_int_eq(batcher_add(b, items[i].entry, NOW), APPLY_OK);
                else if (items[i].type == QUEUE_IDLE)
                    ck_assert_int_eq(batcher_flush(b, FLUSH_IDLE), APPLY_OK);
                queue_item_clear(&items[i]);
            }
            ck_assert_int_eq(batcher_tick(b, NOW += 1000, false), APPLY_OK);
        }
    }
    ck_assert_str_eq(COMMITS, "[A10] commit 10; [A10= B11] commit 11; [A20 B25] commit 25; [A30 B25=] commit 30; ");
    ck_assert_uint_eq(batcher_get_stats(b)->flushes[FLUSH_IDLE], 0);
    batcher_free(b);
}
END_TEST

/* ---- fed in batches (pop_many) ---- */

/* A busy source's items are taken a batch at a time: one pop_many call (one lock of its queue) for up to
 * MERGE_POP_MAX items, handed on exactly as one at a time; what is buffered counts as still to come, and the merge
 * takes nothing else by hand meanwhile. */
START_TEST(test_batches_take_one_pop_per_batch)
{
    BATCH = MERGE_POP_MAX;
    start(2, 100);
    for (uint32_t t = 1; t <= 100; t++)
        push(0, t);
    push(1, 200);
    char want[2048] = "";
    for (uint32_t t = 1; t <= 64; t++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%sA%u", t > 1 ? " " : "", t);
    expect_take(want);
    /* A: the first batch of 64 (A1 to A64) went on; the second (A65 to A100) was taken after A64: its head and 35
     * buffered. B: one call (B200, its head). */
    ck_assert_uint_eq(Q[0].calls, 2);
    ck_assert_uint_eq(Q[0].pops, 100);
    ck_assert_uint_eq(Q[1].calls, 1);
    ck_assert_uint_eq(merge_held(M), 2);
    ck_assert_uint_eq(merge_buffered(M), 35);
    ck_assert(!merge_wants(M, 0)); /* its buffer comes first */
    queue_item it = {.type = QUEUE_IDLE};
    ck_assert(!merge_put(M, 0, &it));
    want[0] = '\0';
    for (uint32_t t = 65; t <= 100; t++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%sA%u", t > 65 ? " " : "", t);
    expect_take(want); /* B200 waits: A showed nothing past 100 */
    ck_assert_uint_eq(merge_buffered(M), 0);
    ck_assert_uint_eq(Q[0].calls, 2); /* an empty queue: nothing taken */
    ck_assert(merge_wants(M, 0));
    /* An IDLE and an END in a batch are taken when they come to the front, as one at a time. */
    push(0, 150);
    push_idle(0);
    push(0, 250);
    push_end(0, QUEUE_END_DONE);
    expect_take("A150 B200 idle"); /* the END waits in the buffer behind A250, which waits for B past 250 */
    ck_assert_uint_eq(Q[0].calls, 3);
    ck_assert_uint_eq(merge_buffered(M), 1);
    push(1, 300);
    expect_take("A250 end:0");
    ck_assert_uint_eq(merge_buffered(M), 0);
    /* what is buffered when the merge is freed is freed with it (the sanitizers' leak check) */
    start(2, 100);
    for (uint32_t t = 1; t <= 10; t++)
        push(0, t);
    expect_take(""); /* B shows nothing: A1 is the head, nine buffered */
    ck_assert_uint_eq(merge_buffered(M), 9);
}
END_TEST

/* A retired source's buffered items are handed back, in order, for the caller to look at (a retired shard's entries
 * after its end must not vanish unseen); its head is still handed on; a source not retired hands nothing back. */
START_TEST(test_retired_source_hands_back_its_buffer)
{
    start(2, 100);
    push(0, 1);
    for (uint32_t t = 3; t <= 5; t++)
        push(1, t);
    expect_take("A1"); /* B: 3, 4, 5 taken in one batch; B3 the head, B4 and B5 buffered */
    ck_assert_uint_eq(merge_buffered(M), 2);
    queue_item it;
    ck_assert(!merge_take_back(M, 1, &it));
    merge_retire_source(M, 1);
    ck_assert(merge_take_back(M, 1, &it));
    ck_assert_int_eq(it.type, QUEUE_ENTRY);
    ck_assert_uint_eq(it.entry->pos.secs, 4);
    queue_item_clear(&it);
    ck_assert(merge_take_back(M, 1, &it));
    ck_assert_uint_eq(it.entry->pos.secs, 5);
    queue_item_clear(&it);
    ck_assert(!merge_take_back(M, 1, &it));
    ck_assert_uint_eq(merge_buffered(M), 0);
    push(0, 6);
    expect_take("B3 A6");
}
END_TEST

Suite *merge_suite(void)
{
    Suite *s = suite_create("merge");
    TCase *tc = tcase_create("merge");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_order_waits_for_every_watermark);
    tcase_add_test(tc, test_silent_source_holds_the_stream);
    tcase_add_test(tc, test_noops_pass_at_once);
    tcase_add_test(tc, test_random_interleavings_keep_the_order);
    tcase_add_test(tc, test_parts_are_never_interleaved);
    tcase_add_test(tc, test_nudge_after_wait_and_each_wait_after);
    tcase_add_test(tc, test_nudge_unknown_not_ended);
    tcase_add_test(tc, test_cross_source_commit_is_not_split);
    tcase_add_test(tc, test_cross_source_abort);
    tcase_add_test(tc, test_note_only_prepares_from_a_restart);
    tcase_add_test(tc, test_many_open_transactions);
    tcase_add_test(tc, test_idle_once_when_nothing_is_ready);
    tcase_add_test(tc, test_end_is_handed_on_at_once);
    tcase_add_test(tc, test_source_going_back_ends_the_stream);
    tcase_add_test(tc, test_source_added_while_running);
    tcase_add_test(tc, test_retired_source_holds_nothing);
    tcase_add_test(tc, test_fed_by_hand);
    tcase_add_test(tc, test_busy_source_beside_idle_ones);
    tcase_add_test(tc, test_batcher_commits_a_cross_source_transaction_whole);
    suite_add_tcase(s, tc);
    /* The same rules fed through pop_many, three items a batch (the tests that count single pops or feed by hand
     * stay above), and the batches themselves. */
    TCase *tb = tcase_create("batched");
    tcase_add_checked_fixture(tb, setup_batched, teardown);
    tcase_set_timeout(tb, 60);
    tcase_add_test(tb, test_order_waits_for_every_watermark);
    tcase_add_test(tb, test_noops_pass_at_once);
    tcase_add_test(tb, test_random_interleavings_keep_the_order);
    tcase_add_test(tb, test_parts_are_never_interleaved);
    tcase_add_test(tb, test_nudge_after_wait_and_each_wait_after);
    tcase_add_test(tb, test_nudge_unknown_not_ended);
    tcase_add_test(tb, test_cross_source_commit_is_not_split);
    tcase_add_test(tb, test_cross_source_abort);
    tcase_add_test(tb, test_note_only_prepares_from_a_restart);
    tcase_add_test(tb, test_many_open_transactions);
    tcase_add_test(tb, test_idle_once_when_nothing_is_ready);
    tcase_add_test(tb, test_end_is_handed_on_at_once);
    tcase_add_test(tb, test_source_going_back_ends_the_stream);
    tcase_add_test(tb, test_source_added_while_running);
    tcase_add_test(tb, test_busy_source_beside_idle_ones);
    tcase_add_test(tb, test_batcher_commits_a_cross_source_transaction_whole);
    tcase_add_test(tb, test_batches_take_one_pop_per_batch);
    tcase_add_test(tb, test_retired_source_hands_back_its_buffer);
    suite_add_tcase(s, tb);
    return s;
}

/*
 * test_batcher.c — the batcher's flush rules, with a recording sink and a fake clock.
 *
 * The recorder writes one line per call ("copy shop.a 3 @1:2", "apply update shop.a", "commit 1:5"), so each test
 * states the exact sequence PostgreSQL would see.
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/batcher.h"

typedef struct {
    char log[4096];
    apply_status fail_commit;
    apply_status fail_add;   /* what run_add answers (APPLY_OK normally) */
    const char *refuse_coll; /* writes and DDL on this collection fail with APPLY_DATA */
    bool let_go;             /* run_let_go agrees (a sink whose run streams) */
} recorder;

static void rec(recorder *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rec(recorder *r, const char *fmt, ...)
{
    size_t len = strlen(r->log);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->log + len, sizeof r->log - len, fmt, ap);
    va_end(ap);
    len = strlen(r->log);
    snprintf(r->log + len, sizeof r->log - len, "; ");
}

static bool refused(const recorder *r, const char *coll)
{
    return r->refuse_coll != NULL && coll != NULL && strcmp(coll, r->refuse_coll) == 0;
}

/* A run is a row counter: the batcher never looks inside. */
typedef struct {
    size_t rows;
} rec_run;

static void *rec_run_new(void *ctx)
{
    (void)ctx;
    return calloc(1, sizeof(rec_run));
}

static void rec_run_free(void *ctx, void *run)
{
    (void)ctx;
    free(run);
}

static apply_status rec_run_add(void *ctx, void *run, op *o)
{
    recorder *r = ctx;
    (void)o;
    if (r->fail_add != APPLY_OK)
        return r->fail_add;
    ((rec_run *)run)->rows++;
    return APPLY_OK;
}

static size_t rec_run_rows(void *ctx, const void *run)
{
    (void)ctx;
    return ((const rec_run *)run)->rows;
}

static bool rec_run_let_go(void *ctx, void *run, const op_pos *pos)
{
    recorder *r = ctx;
    if (r->let_go)
        rec(r, "let go %zu @%u:%u", ((rec_run *)run)->rows, pos->secs, pos->inc);
    return r->let_go;
}

static void rec_run_reset(void *ctx, void *run, bool keep)
{
    (void)ctx;
    (void)keep;
    ((rec_run *)run)->rows = 0;
}

static apply_status rec_insert(void *ctx, const char *db, const char *coll, void *run, const op_pos *pos)
{
    rec(ctx, "copy %s.%s %zu @%u:%u", db, coll, ((rec_run *)run)->rows, pos->secs, pos->inc);
    return refused(ctx, coll) ? APPLY_DATA : APPLY_OK;
}

static apply_status rec_apply(void *ctx, const op *o)
{
    rec(ctx, "%s %s.%s", op_kind_name(o->kind), o->db ? o->db : "-", o->coll ? o->coll : "-");
    return refused(ctx, o->coll) ? APPLY_DATA : APPLY_OK;
}

static apply_status rec_guard_begin(void *ctx)
{
    rec(ctx, "savepoint");
    return APPLY_OK;
}

static apply_status rec_guard_end(void *ctx)
{
    rec(ctx, "release");
    return APPLY_OK;
}

static apply_status rec_dead_letter(void *ctx, const op *o, const char *why)
{
    rec(ctx, "dead letter %s %s.%s @%u:%u%s", op_kind_name(o->kind), o->db, o->coll, o->pos.secs, o->pos.inc,
        why ? " (batcher's reason)" : "");
    return APPLY_OK;
}

static apply_status rec_commit(void *ctx, const op_pos *pos)
{
    recorder *r = ctx;
    if (r->fail_commit != APPLY_OK)
        return r->fail_commit;
    rec(r, "commit %u:%u", pos->secs, pos->inc);
    return APPLY_OK;
}

static recorder R;
static batcher *B;
static uint32_t next_inc;
static bson_t *DOC;

static batcher_sink rec_sink(void)
{
    batcher_sink out = {.ctx = &R,
                        .run_new = rec_run_new,
                        .run_free = rec_run_free,
                        .run_add = rec_run_add,
                        .run_rows = rec_run_rows,
                        .run_let_go = rec_run_let_go,
                        .run_reset = rec_run_reset,
                        .insert_run = rec_insert,
                        .apply = rec_apply,
                        .commit = rec_commit};
    return out;
}

static void setup_with(uint64_t rows, uint64_t interval, bool per_op)
{
    memset(&R, 0, sizeof R);
    batcher_sink out = rec_sink();
    batcher_config cfg = {.batch_rows = rows, .batch_bytes = 1 << 30, .flush_interval_ms = interval, .per_op = per_op};
    B = batcher_new(&cfg, &out);
    ck_assert_ptr_nonnull(B);
    next_inc = 0;
    DOC = BCON_NEW("_id", BCON_INT32(1), "x", BCON_UTF8("y"));
}

static void setup(void)
{
    setup_with(1000, 200, false);
}

/* Starts the test's batcher again with a configuration of its own, and an empty log. */
static void restart_with(const batcher_config *cfg)
{
    batcher_free(B);
    memset(&R, 0, sizeof R);
    batcher_sink out = rec_sink();
    B = batcher_new(cfg, &out);
    ck_assert_ptr_nonnull(B);
}

static void teardown(void)
{
    batcher_free(B);
    bson_destroy(DOC);
}

/* Fill one op in place; names point at string literals (the op owns no buffer). */
static void fill(op *o, op_kind kind, const char *db, const char *coll)
{
    o->kind = kind;
    o->db = db;
    o->coll = coll;
    if (kind == OP_INSERT || kind == OP_UPDATE) {
        o->doc = bson_get_data(DOC);
        o->doc_len = DOC->len;
        o->form = kind == OP_UPDATE ? OP_FORM_DIFF : OP_FORM_NONE;
    }
    if (kind == OP_NOOP)
        o->reason = "test";
    if (kind == OP_RENAME) {
        o->to_db = db;
        o->to_coll = "renamed";
    }
}

/* Feed one entry of one op at the next position; returns the sink status. */
static apply_status feed(op_kind kind, const char *db, const char *coll, uint64_t now)
{
    op_entry e;
    op_pos pos = {.secs = 1, .inc = ++next_inc, .term = 1};
    op_entry_init(&e);
    ck_assert(op_entry_alloc(&e, &pos, 1));
    fill(&e.ops[0], kind, db, coll);
    apply_status st = batcher_add(B, &e, now);
    op_entry_clear(&e);
    return st;
}

static void expect_log(const char *want)
{
    ck_assert_msg(strcmp(R.log, want) == 0, "\n  want: %s\n  got:  %s", want, R.log);
}

START_TEST(test_conflict_writes_only_its_namespace)
{
    feed(OP_INSERT, "shop", "a", 0);
    feed(OP_INSERT, "shop", "b", 0);
    feed(OP_INSERT, "shop", "a", 0);
    feed(OP_UPDATE, "shop", "b", 0); /* writes b's run only */
    expect_log("copy shop.b 1 @1:2; update shop.b; ");
    feed(OP_DELETE, "shop", "a", 0);
    expect_log("copy shop.b 1 @1:2; update shop.b; copy shop.a 2 @1:3; delete shop.a; ");
    ck_assert_uint_eq(batcher_get_stats(B)->flushes[FLUSH_CONFLICT], 2);
    ck_assert_uint_eq(batcher_get_stats(B)->commits, 0);
}
END_TEST

/* Feed one op carrying a key text (as the reader renders it, op.id_key). */
static void feed_key(op_kind kind, const char *coll, const char *key)
{
    op_entry e;
    op_pos pos = {.secs = 1, .inc = ++next_inc, .term = 1};
    op_entry_init(&e);
    ck_assert(op_entry_alloc(&e, &pos, 1));
    fill(&e.ops[0], kind, "shop", coll);
    if (key != NULL) {
        e.ops[0].id_key = strdup(key);
        e.ops[0].id_key_len = (uint32_t)strlen(key);
    }
    ck_assert_int_eq(batcher_add(B, &e, 0), APPLY_OK);
    op_entry_clear(&e);
}

/* An update or delete of a key the run does not hold goes ahead of the run; one of a key it holds writes it first. */
START_TEST(test_other_keys_commute_with_the_run)
{
    feed_key(OP_INSERT, "a", "1");
    feed_key(OP_INSERT, "a", "2");
    feed_key(OP_UPDATE, "a", "900"); /* an older document: the run stays */
    feed_key(OP_DELETE, "a", "901");
    feed_key(OP_INSERT, "a", "3");
    expect_log("update shop.a; delete shop.a; ");
    feed_key(OP_UPDATE, "a", "2"); /* a row of the run: the run first */
    expect_log("update shop.a; delete shop.a; copy shop.a 3 @1:5; update shop.a; ");
    ck_assert_uint_eq(batcher_get_stats(B)->flushes[FLUSH_CONFLICT], 1);
    ck_assert_uint_eq(batcher_get_stats(B)->commuted, 2);
    /* the written run's keys are forgotten: 1 is no longer pending */
    feed_key(OP_INSERT, "a", "4");
    feed_key(OP_DELETE, "a", "1");
    expect_log("update shop.a; delete shop.a; copy shop.a 3 @1:5; update shop.a; delete shop.a; ");
    feed_key(OP_DELETE, "a", "4");
    expect_log("update shop.a; delete shop.a; copy shop.a 3 @1:5; update shop.a; delete shop.a; copy shop.a 1 @1:7; "
               "delete shop.a; ");
    /* key texts that differ only in type stay apart ("1" the string vs 1 the number) */
    feed_key(OP_INSERT, "a", "\"1\"");
    feed_key(OP_UPDATE, "a", "1");
    ck_assert_uint_eq(batcher_get_stats(B)->flushes[FLUSH_CONFLICT], 2);
    /* a row without key text makes the run conflict with everything after it */
    feed_key(OP_INSERT, "b", NULL);
    feed_key(OP_UPDATE, "b", "77");
    ck_assert_uint_eq(batcher_get_stats(B)->flushes[FLUSH_CONFLICT], 3);
    /* and an op without key text conflicts with any run */
    feed_key(OP_INSERT, "c", "5");
    feed_key(OP_UPDATE, "c", NULL);
    ck_assert_uint_eq(batcher_get_stats(B)->flushes[FLUSH_CONFLICT], 4);
    /* many keys: the set grows and still finds each one */
    for (int i = 0; i < 900; i++) { /* the group commits at 1000 ops */
        char k[16];
        snprintf(k, sizeof k, "%d", 10000 + i);
        feed_key(OP_INSERT, "d", k);
    }
    feed_key(OP_UPDATE, "d", "9999");
    ck_assert_uint_eq(batcher_get_stats(B)->flushes[FLUSH_CONFLICT], 4);
    feed_key(OP_UPDATE, "d", "10321");
    ck_assert_uint_eq(batcher_get_stats(B)->flushes[FLUSH_CONFLICT], 5);
}
END_TEST

/* Thousands of namespaces: each run is found again (the index), and each conflicts only with its own. */
START_TEST(test_many_namespaces)
{
    teardown();
    setup_with(100000, 200, false);
    char name[32];
    for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof name, "t%d", i);
        ck_assert_int_eq(feed(OP_INSERT, "shop", name, 0), APPLY_OK);
        ck_assert_int_eq(feed(OP_INSERT, "shop", name, 0), APPLY_OK);
    }
    ck_assert_uint_eq(batcher_get_stats(B)->flushes[FLUSH_CONFLICT], 0);
    for (int i = 2999; i >= 0; i -= 7) {
        snprintf(name, sizeof name, "t%d", i);
        ck_assert_int_eq(feed(OP_DELETE, "shop", name, 0), APPLY_OK);
    }
    ck_assert_uint_eq(batcher_get_stats(B)->flushes[FLUSH_CONFLICT], 429);
    ck_assert_ptr_nonnull(strstr(R.log, "copy shop.t2999 2 @1:6000; delete shop.t2999; copy shop.t2992 2 @1:5986; "));
    ck_assert_int_eq(batcher_flush(B, FLUSH_IDLE), APPLY_OK);
    ck_assert_uint_eq(batcher_get_stats(B)->committed_ops[OP_INSERT], 6000);
}
END_TEST

/* batch_tables: a group commits once it has written to that many namespaces (inserts, updates and deletes alike,
 * each namespace once, a DDL op as BATCHER_DDL_TABLES each time), between entries only; a namespace written to again
 * does not count again. */
START_TEST(test_table_bound)
{
    teardown();
    memset(&R, 0, sizeof R);
    batcher_sink out = rec_sink();
    batcher_config cfg = {.batch_rows = 100000, .batch_bytes = 1 << 30, .batch_tables = 3, .flush_interval_ms = 200};
    B = batcher_new(&cfg, &out);
    ck_assert_ptr_nonnull(B);
    next_inc = 0;
    DOC = BCON_NEW("_id", BCON_INT32(1), "x", BCON_UTF8("y"));
    feed(OP_INSERT, "shop", "a", 0);
    feed(OP_INSERT, "shop", "a", 0);
    feed(OP_DELETE, "shop", "b", 0);
    feed(OP_INSERT, "shop", "b", 0);
    expect_log("delete shop.b; ");
    feed(OP_UPDATE, "shop", "c", 0); /* the third namespace: the group commits */
    expect_log("delete shop.b; update shop.c; copy shop.a 2 @1:2; copy shop.b 1 @1:4; commit 1:5; ");
    ck_assert_uint_eq(batcher_get_stats(B)->flushes[FLUSH_TABLES], 1);
    /* the next group counts afresh: a and b again, then a DDL op */
    memset(R.log, 0, sizeof R.log);
    feed(OP_INSERT, "shop", "a", 0);
    feed(OP_INSERT, "shop", "b", 0);
    expect_log("");
    feed(OP_DROP, "shop", "z", 0);
    expect_log("copy shop.a 1 @1:6; copy shop.b 1 @1:7; drop shop.z; commit 1:8; ");
    ck_assert_uint_eq(batcher_get_stats(B)->flushes[FLUSH_TABLES], 2);
    /* a DDL op counts as two: with one namespace written to, it takes the group to three */
    memset(R.log, 0, sizeof R.log);
    ck_assert_uint_eq(BATCHER_DDL_TABLES, 2);
    feed(OP_DROP, "shop", "y", 0);
    expect_log("drop shop.y; ");
    feed(OP_INSERT, "shop", "a", 0);
    expect_log("drop shop.y; copy shop.a 1 @1:10; commit 1:10; ");
    ck_assert_uint_eq(batcher_get_stats(B)->flushes[FLUSH_TABLES], 3);
    /* one entry over more namespaces than the bound is not split */
    memset(R.log, 0, sizeof R.log);
    op_entry e;
    op_pos pos = {.secs = 1, .inc = ++next_inc, .term = 1};
    op_entry_init(&e);
    ck_assert(op_entry_alloc(&e, &pos, 5));
    const char *names[5] = {"p", "q", "r", "s", "t"};
    for (int i = 0; i < 5; i++)
        fill(&e.ops[i], OP_INSERT, "shop", names[i]);
    e.atomic = true;
    ck_assert_int_eq(batcher_add(B, &e, 0), APPLY_OK);
    op_entry_clear(&e);
    expect_log("copy shop.p 1 @1:11; copy shop.q 1 @1:11; copy shop.r 1 @1:11; copy shop.s 1 @1:11; "
               "copy shop.t 1 @1:11; commit 1:11; ");
}
END_TEST

/* What a failed group tells about its last entry: the tables it writes to, counted whole before any op is sent (a
 * failure in its first op still counts all of them), and whether it is alone in the group (then no batch_tables can
 * split the group further). */
static op_entry *entry_over(const char *const *colls, size_t n)
{
    static op_entry e;
    op_pos pos = {.secs = 1, .inc = ++next_inc, .term = 1};
    op_entry_init(&e);
    ck_assert(op_entry_alloc(&e, &pos, n));
    for (size_t i = 0; i < n; i++)
        fill(&e.ops[i], OP_INSERT, "shop", colls[i]);
    e.atomic = true;
    return &e;
}

START_TEST(test_entry_tables)
{
    teardown();
    memset(&R, 0, sizeof R);
    batcher_sink out = rec_sink();
    batcher_config cfg = {.batch_rows = 100000, .batch_bytes = 1 << 30, .batch_tables = 3, .flush_interval_ms = 200};
    B = batcher_new(&cfg, &out);
    ck_assert_ptr_nonnull(B);
    next_inc = 0;
    DOC = BCON_NEW("_id", BCON_INT32(1), "x", BCON_UTF8("y"));
    /* one table, then an entry over five (one of them the first table again): four new ones, not alone */
    feed(OP_INSERT, "shop", "a", 0);
    ck_assert_uint_eq(batcher_group_tables(B), 1);
    ck_assert_uint_eq(batcher_entry_tables(B), 1);
    const char *five[5] = {"a", "p", "q", "r", "s"};
    R.fail_commit = APPLY_RETRY;
    op_entry *e = entry_over(five, 5);
    ck_assert_int_eq(batcher_add(B, e, 0), APPLY_RETRY);
    op_entry_clear(e);
    ck_assert_uint_eq(batcher_group_tables(B), 5);
    ck_assert_uint_eq(batcher_entry_tables(B), 4);
    /* after the failure: the same entry alone (the caller resumed from the checkpoint), failing at its first op */
    batcher_reset(B);
    ck_assert_uint_eq(batcher_group_tables(B), 0);
    ck_assert_uint_eq(batcher_entry_tables(B), 0);
    R.fail_commit = APPLY_OK;
    R.fail_add = APPLY_RETRY;
    e = entry_over(five, 5);
    ck_assert_int_eq(batcher_add(B, e, 0), APPLY_RETRY);
    op_entry_clear(e);
    ck_assert_uint_eq(batcher_group_tables(B), 5);
    ck_assert_uint_eq(batcher_entry_tables(B), 5);
    R.fail_add = APPLY_OK;
    /* a DDL op counts BATCHER_DDL_TABLES once, as before, and a committed group starts from nothing */
    batcher_reset(B);
    memset(R.log, 0, sizeof R.log);
    feed(OP_DROP, "shop", "y", 0);
    ck_assert_uint_eq(batcher_group_tables(B), BATCHER_DDL_TABLES);
    ck_assert_uint_eq(batcher_entry_tables(B), BATCHER_DDL_TABLES);
    feed(OP_INSERT, "shop", "b", 0);
    expect_log("drop shop.y; copy shop.b 1 @1:5; commit 1:5; ");
    ck_assert_uint_eq(batcher_group_tables(B), 0);
    ck_assert_uint_eq(batcher_entry_tables(B), 0);
}
END_TEST

START_TEST(test_ddl_writes_every_run_first)
{
    feed(OP_INSERT, "shop", "a", 0);
    feed(OP_INSERT, "shop", "b", 0);
    feed(OP_DROP, "shop", "c", 0);
    expect_log("copy shop.a 1 @1:1; copy shop.b 1 @1:2; drop shop.c; ");
}
END_TEST

START_TEST(test_idle_commits_everything_once)
{
    feed(OP_INSERT, "shop", "a", 0);
    feed(OP_INSERT, "shop", "a", 0);
    ck_assert(batcher_dirty(B));
    ck_assert_int_eq(batcher_flush(B, FLUSH_IDLE), APPLY_OK);
    expect_log("copy shop.a 2 @1:2; commit 1:2; ");
    ck_assert(!batcher_dirty(B));
    ck_assert_int_eq(batcher_flush(B, FLUSH_IDLE), APPLY_OK); /* nothing new: no empty commit */
    expect_log("copy shop.a 2 @1:2; commit 1:2; ");
    ck_assert_uint_eq(batcher_get_stats(B)->flushes[FLUSH_IDLE], 1);
    ck_assert_uint_eq(batcher_get_stats(B)->committed.inc, 2);
}
END_TEST

START_TEST(test_noops_advance_the_checkpoint)
{
    feed(OP_NOOP, NULL, NULL, 0);
    feed(OP_NOOP, NULL, NULL, 0);
    ck_assert(batcher_dirty(B));
    batcher_flush(B, FLUSH_EXIT);
    expect_log("commit 1:2; ");
}
END_TEST

START_TEST(test_size_threshold)
{
    batcher_free(B);
    bson_destroy(DOC);
    setup_with(3, 200, false);
    feed(OP_INSERT, "shop", "a", 0);
    feed(OP_INSERT, "shop", "a", 0);
    expect_log("");
    feed(OP_INSERT, "shop", "a", 0);
    expect_log("copy shop.a 3 @1:3; commit 1:3; ");
    ck_assert_uint_eq(batcher_get_stats(B)->flushes[FLUSH_SIZE], 1);
}
END_TEST

START_TEST(test_timer_with_fake_clock)
{
    ck_assert_uint_eq(batcher_deadline(B, false), UINT64_MAX);
    feed(OP_INSERT, "shop", "a", 1000); /* the group opens at t=1000 */
    feed(OP_INSERT, "shop", "a", 1150);
    ck_assert_uint_eq(batcher_deadline(B, false), 1200);
    ck_assert_uint_eq(batcher_deadline(B, true), 1200); /* no catchup_interval: the same bound when behind */
    batcher_tick(B, 1199, false);
    expect_log("");
    batcher_tick(B, 1200, false);
    expect_log("copy shop.a 2 @1:2; commit 1:2; ");
    ck_assert_uint_eq(batcher_deadline(B, false), UINT64_MAX);
    feed(OP_INSERT, "shop", "a", 5000); /* a new group: the clock starts again */
    ck_assert_uint_eq(batcher_deadline(B, false), 5200);
    ck_assert_uint_eq(batcher_get_stats(B)->flushes[FLUSH_TIMER], 1);
}
END_TEST

/* A transaction (one atomic entry) is never split, even past the size threshold. */
START_TEST(test_atomic_entry_not_split)
{
    batcher_free(B);
    bson_destroy(DOC);
    setup_with(2, 200, false);
    op_entry e;
    op_pos pos = {.secs = 9, .inc = 1, .term = 1};
    op_entry_init(&e);
    ck_assert(op_entry_alloc(&e, &pos, 5));
    e.atomic = true;
    fill(&e.ops[0], OP_INSERT, "shop", "a");
    fill(&e.ops[1], OP_INSERT, "shop", "a");
    fill(&e.ops[2], OP_UPDATE, "shop", "a");
    fill(&e.ops[3], OP_INSERT, "shop", "b");
    fill(&e.ops[4], OP_DELETE, "shop", "b");
    ck_assert_int_eq(batcher_add(B, &e, 0), APPLY_OK);
    op_entry_clear(&e);
    expect_log("copy shop.a 2 @9:1; update shop.a; copy shop.b 1 @9:1; delete shop.b; commit 9:1; ");
    ck_assert_uint_eq(batcher_get_stats(B)->commits, 1);
}
END_TEST

START_TEST(test_parts_never_commit_between)
{
    batcher_free(B);
    bson_destroy(DOC);
    setup_with(2, 200, false);
    op_pos pos = {.secs = 9, .inc = 5, .term = 1};
    for (int k = 0; k < 3; k++) {
        op_entry e;
        op_entry_init(&e);
        ck_assert(op_entry_alloc(&e, &pos, 2));
        e.atomic = true;
        e.more = k < 2;
        fill(&e.ops[0], OP_INSERT, "shop", "a");
        fill(&e.ops[1], OP_UPDATE, "shop", "a");
        ck_assert_int_eq(batcher_add(B, &e, 0), APPLY_OK);
        op_entry_clear(&e);
        if (k < 2) {
            /* over batch_rows, past the timer, an idle marker: still no commit in the middle */
            ck_assert_int_eq(batcher_tick(B, 100000, true), APPLY_OK);
            ck_assert_int_eq(batcher_flush(B, FLUSH_IDLE), APPLY_OK);
            ck_assert_uint_eq(batcher_get_stats(B)->commits, 0);
            ck_assert(batcher_in_parts(B));
            ck_assert_uint_eq(batcher_deadline(B, true), UINT64_MAX);
        }
    }
    expect_log("copy shop.a 1 @9:5; update shop.a; copy shop.a 1 @9:5; update shop.a; copy shop.a 1 @9:5; "
               "update shop.a; commit 9:5; ");
    ck_assert_uint_eq(batcher_get_stats(B)->commits, 1);
    ck_assert_uint_eq(batcher_get_stats(B)->entries, 1); /* one logical entry */
    ck_assert(!batcher_in_parts(B));
}
END_TEST

START_TEST(test_per_op_commits_every_entry)
{
    batcher_free(B);
    bson_destroy(DOC);
    setup_with(1000, 200, true);
    feed(OP_INSERT, "shop", "a", 0);
    feed(OP_UPDATE, "shop", "a", 0);
    expect_log("copy shop.a 1 @1:1; commit 1:1; update shop.a; commit 1:2; ");
    ck_assert_uint_eq(batcher_get_stats(B)->flushes[FLUSH_PER_OP], 2);
}
END_TEST

/* Careful mode: per-op, each op between a savepoint and its release; a refused op (here: anything on shop.bad)
 * goes to dead_letter in the same group, and the entry still commits, so the checkpoint moves past it. */
START_TEST(test_careful_sets_refused_ops_aside)
{
    batcher_free(B);
    memset(&R, 0, sizeof R);
    R.refuse_coll = "bad";
    batcher_sink out = rec_sink();
    out.guard_begin = rec_guard_begin;
    out.guard_end = rec_guard_end;
    out.dead_letter = rec_dead_letter;
    batcher_config cfg = {.batch_rows = 1000, .batch_bytes = 1 << 30, .flush_interval_ms = 200, .careful = true};
    B = batcher_new(&cfg, &out);
    ck_assert_int_eq(feed(OP_INSERT, "shop", "a", 0), APPLY_OK);
    ck_assert_int_eq(feed(OP_INSERT, "shop", "bad", 0), APPLY_OK);
    ck_assert_int_eq(feed(OP_UPDATE, "shop", "bad", 0), APPLY_OK);
    ck_assert_int_eq(feed(OP_NOOP, NULL, NULL, 0), APPLY_OK);
    expect_log("savepoint; copy shop.a 1 @1:1; release; commit 1:1; "
               "savepoint; copy shop.bad 1 @1:2; dead letter insert shop.bad @1:2; commit 1:2; "
               "savepoint; update shop.bad; dead letter update shop.bad @1:3; commit 1:3; "
               "commit 1:4; ");
    ck_assert_uint_eq(batcher_get_stats(B)->dead_letters, 2);
    ck_assert_uint_eq(batcher_get_stats(B)->committed.inc, 4);

    /* Without a dead_letter (on_error = stop) the refused op fails the entry: nothing of it is committed. */
    batcher_free(B);
    memset(&R, 0, sizeof R);
    R.refuse_coll = "bad";
    out.dead_letter = NULL;
    B = batcher_new(&cfg, &out);
    ck_assert_int_eq(feed(OP_INSERT, "shop", "a", 0), APPLY_OK);
    ck_assert_int_eq(feed(OP_DELETE, "shop", "bad", 0), APPLY_DATA);
    expect_log("copy shop.a 1 @1:5; commit 1:5; delete shop.bad; ");
    ck_assert_uint_eq(batcher_get_stats(B)->committed.inc, 5);
}
END_TEST

START_TEST(test_failure_keeps_committed_position)
{
    feed(OP_INSERT, "shop", "a", 0);
    batcher_flush(B, FLUSH_IDLE);
    feed(OP_INSERT, "shop", "a", 0);
    R.fail_commit = APPLY_RETRY;
    ck_assert_int_eq(batcher_flush(B, FLUSH_IDLE), APPLY_RETRY);
    batcher_reset(B);
    ck_assert(!batcher_dirty(B));
    ck_assert_uint_eq(batcher_last(B)->inc, 1); /* back at the committed position */
    R.fail_commit = APPLY_OK;
    R.log[0] = '\0';
    feed(OP_INSERT, "shop", "a", 0); /* the run was dropped: only the new row is written */
    batcher_flush(B, FLUSH_IDLE);
    expect_log("copy shop.a 1 @1:3; commit 1:3; ");
    /* Three entries taken, two committed: the rolled-back one is not counted as applied. */
    ck_assert_uint_eq(batcher_get_stats(B)->entries, 3);
    ck_assert_uint_eq(batcher_get_stats(B)->committed_entries, 2);
    ck_assert_uint_eq(batcher_get_stats(B)->committed_ops[OP_INSERT], 2);
}
END_TEST

/* An op whose text could not be made (op.refusal, set on the reader thread) never reaches the sink: it is refused
 * as data with its own reason, and in careful mode set aside with that reason; the entries around it commit. */
START_TEST(test_refusal_never_reaches_the_sink)
{
    op_entry e;
    op_pos pos = {.secs = 1, .inc = ++next_inc, .term = 1};
    op_entry_init(&e);
    ck_assert(op_entry_alloc(&e, &pos, 1));
    fill(&e.ops[0], OP_INSERT, "shop", "a");
    e.ops[0].refusal = strdup("the document: a string at s is not valid UTF-8");
    ck_assert_int_eq(batcher_add(B, &e, 0), APPLY_DATA);
    expect_log(""); /* nothing was written */

    batcher_free(B);
    memset(&R, 0, sizeof R);
    batcher_sink out = rec_sink();
    out.guard_begin = rec_guard_begin;
    out.guard_end = rec_guard_end;
    out.dead_letter = rec_dead_letter;
    batcher_config cfg = {.batch_rows = 1000, .batch_bytes = 1 << 30, .flush_interval_ms = 200, .careful = true};
    B = batcher_new(&cfg, &out);
    ck_assert_int_eq(batcher_add(B, &e, 0), APPLY_OK);
    expect_log("savepoint; dead letter insert shop.a @1:1 (batcher's reason); commit 1:1; ");
    ck_assert_uint_eq(batcher_get_stats(B)->dead_letters, 1);
    op_entry_clear(&e);
}
END_TEST

/* Memory running out is its own status: in careful mode it is never taken for a refusal of the op's data, so a good
 * op is never set aside because an allocation failed. */
START_TEST(test_out_of_memory_is_not_data)
{
    batcher_free(B);
    memset(&R, 0, sizeof R);
    batcher_sink out = rec_sink();
    out.guard_begin = rec_guard_begin;
    out.guard_end = rec_guard_end;
    out.dead_letter = rec_dead_letter;
    batcher_config cfg = {.batch_rows = 1000, .batch_bytes = 1 << 30, .flush_interval_ms = 200, .careful = true};
    B = batcher_new(&cfg, &out);
    R.fail_add = APPLY_NOMEM;
    ck_assert_int_eq(feed(OP_INSERT, "shop", "a", 0), APPLY_NOMEM);
    ck_assert_ptr_null(strstr(R.log, "dead letter"));
    ck_assert_uint_eq(batcher_get_stats(B)->dead_letters, 0);
    ck_assert_uint_eq(batcher_get_stats(B)->commits, 0);
}
END_TEST

/* The group's size counts the bytes its runs hold (the rendered text), so a few large documents commit early; and a
 * run is written (without a commit) before a row would take it past batch_bytes, so a run holds at most batch_bytes
 * plus one row in memory. A written run holds nothing any more: the group commits once its runs, together, hold
 * batch_bytes. */
START_TEST(test_size_counts_rendered_bytes)
{
    batcher_config cfg = {.batch_rows = 1000, .batch_bytes = 1000, .flush_interval_ms = 200};
    restart_with(&cfg);
    static char big[600];
    memset(big, 'x', sizeof big - 1);
    for (int i = 0; i < 3; i++) {
        op_entry e;
        op_pos pos = {.secs = 1, .inc = ++next_inc, .term = 1};
        op_entry_init(&e);
        ck_assert(op_entry_alloc(&e, &pos, 1));
        fill(&e.ops[0], OP_INSERT, "shop", i < 2 ? "a" : "b");
        e.ops[0].json = strdup(big);
        e.ops[0].json_len = (uint32_t)strlen(big);
        ck_assert_int_eq(batcher_add(B, &e, 0), APPLY_OK);
        op_entry_clear(&e);
    }
    expect_log("copy shop.a 1 @1:1; copy shop.a 1 @1:2; copy shop.b 1 @1:3; commit 1:3; ");
}
END_TEST

/* A run whose sink can let go of the rows it has sent (a streaming COPY) is not written at batch_bytes: the sink lets
 * go, the run holds nothing and grows on, and the group does not commit for the bytes it no longer holds. A sink
 * that refuses (the rows are not all sent, or it must keep them) has the run written as before. */
START_TEST(test_streaming_run_lets_go)
{
    uint64_t row = DOC->len; /* what one of feed()'s inserts weighs */
    batcher_config cfg = {.batch_rows = 1000, .batch_bytes = 2 * row + 1, .flush_interval_ms = 200}; /* 2 rows */
    restart_with(&cfg);
    R.let_go = true;
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(feed(OP_INSERT, "shop", "a", 0), APPLY_OK);
    expect_log("let go 2 @1:3; let go 4 @1:5; ");
    ck_assert_uint_eq(batcher_get_stats(B)->let_go, 2);
    ck_assert_uint_eq(batcher_get_stats(B)->commits, 0);
    R.let_go = false;
    feed(OP_INSERT, "shop", "a", 0); /* 7: the run holds 5 and 6; refused, so it is written, without a commit */
    expect_log("let go 2 @1:3; let go 4 @1:5; copy shop.a 6 @1:6; ");
    ck_assert_int_eq(batcher_flush(B, FLUSH_IDLE), APPLY_OK);
    expect_log("let go 2 @1:3; let go 4 @1:5; copy shop.a 6 @1:6; copy shop.a 1 @1:7; commit 1:7; ");
}
END_TEST

/* While the caller is behind (entries wait), a group may stay open to catchup_interval; once nothing waits, the
 * shorter flush_interval holds again. */
START_TEST(test_catchup_interval)
{
    batcher_config cfg = {
        .batch_rows = 1000, .batch_bytes = 1 << 30, .flush_interval_ms = 200, .catchup_interval_ms = 1000};
    restart_with(&cfg);
    feed(OP_INSERT, "shop", "a", 1000);
    ck_assert_uint_eq(batcher_deadline(B, false), 1200);
    ck_assert_uint_eq(batcher_deadline(B, true), 2000);
    ck_assert_int_eq(batcher_tick(B, 1500, true), APPLY_OK);
    expect_log("");
    ck_assert_int_eq(batcher_tick(B, 1500, false), APPLY_OK);
    expect_log("copy shop.a 1 @1:1; commit 1:1; ");
    feed(OP_INSERT, "shop", "a", 3000);
    ck_assert_int_eq(batcher_tick(B, 3999, true), APPLY_OK);
    expect_log("copy shop.a 1 @1:1; commit 1:1; ");
    ck_assert_int_eq(batcher_tick(B, 4000, true), APPLY_OK);
    expect_log("copy shop.a 1 @1:1; commit 1:1; copy shop.a 1 @1:2; commit 1:2; ");
    /* a catchup_interval shorter than flush_interval changes nothing */
    cfg.catchup_interval_ms = 50;
    batcher_set_config(B, &cfg);
    feed(OP_INSERT, "shop", "a", 5000);
    ck_assert_uint_eq(batcher_deadline(B, true), 5200);
    ck_assert_uint_eq(batcher_get_stats(B)->flushes[FLUSH_TIMER], 2);
}
END_TEST

/* A run's key set stays within a sixteenth of batch_bytes: past it the run counts as keyless, so an update of any
 * document of the namespace writes the run first (correct, only slower). */
START_TEST(test_key_set_bounded)
{
    /* 1 kB of key set: 128 slots, so 64 keys at half load; the 65th would double it */
    batcher_config cfg = {.batch_rows = 100000, .batch_bytes = 16384, .flush_interval_ms = 200};
    restart_with(&cfg);
    for (int i = 0; i < 64; i++) {
        char k[16];
        snprintf(k, sizeof k, "%d", i);
        feed_key(OP_INSERT, "a", k);
    }
    feed_key(OP_UPDATE, "a", "9999"); /* another document: commutes */
    ck_assert_uint_eq(batcher_get_stats(B)->flushes[FLUSH_CONFLICT], 0);
    feed_key(OP_INSERT, "a", "64"); /* the set is full */
    feed_key(OP_UPDATE, "a", "9998");
    ck_assert_uint_eq(batcher_get_stats(B)->flushes[FLUSH_CONFLICT], 1);
}
END_TEST

/* ---- several sources: no_commit and per-source positions ---- */

static void rec_sources(void *ctx, const batcher_source_pos *sp, size_t n)
{
    recorder *r = ctx;
    char line[512];
    size_t len = (size_t)snprintf(line, sizeof line, "sources %zu:", n);
    for (size_t i = 0; i < n && len < sizeof line; i++) {
        len += (size_t)snprintf(line + len, sizeof line - len, " %zu=%u:%u", i, sp[i].pos.secs, sp[i].pos.inc);
        if (sp[i].has_hold && len < sizeof line)
            len += (size_t)snprintf(line + len, sizeof line - len, " hold %u:%u", sp[i].hold.secs, sp[i].hold.inc);
        if (sp[i].moved && len < sizeof line)
            len += (size_t)snprintf(line + len, sizeof line - len, " moved");
    }
    rec(r, "%s", line);
}

/* Feeds one insert at the next position, read by source `source`, with no_commit and (hold_inc > 0) a hold. */
static apply_status feed_src(uint16_t source, bool no_commit, uint32_t hold_inc, uint64_t now)
{
    op_entry e;
    op_pos pos = {.secs = 1, .inc = ++next_inc, .term = 1};
    op_entry_init(&e);
    ck_assert(op_entry_alloc(&e, &pos, 1));
    fill(&e.ops[0], OP_INSERT, "shop", "a");
    e.source = source;
    e.no_commit = no_commit;
    if (hold_inc > 0) {
        e.has_hold = true;
        e.hold = (op_pos){.secs = 1, .inc = hold_inc, .term = 1};
    }
    apply_status st = batcher_add(B, &e, now);
    op_entry_clear(&e);
    return st;
}

/* An entry with no_commit keeps every trigger from committing after it, as a part with `more` does, but it is not a
 * part: batcher_in_parts stays false and batcher_entry_tables counts each entry apart. */
START_TEST(test_no_commit_holds_every_trigger)
{
    batcher_free(B);
    bson_destroy(DOC);
    setup_with(2, 200, false);
    ck_assert_int_eq(feed_src(0, true, 0, 0), APPLY_OK);
    ck_assert_int_eq(feed_src(1, true, 0, 0), APPLY_OK); /* batch_rows reached */
    ck_assert_uint_eq(batcher_deadline(B, false), UINT64_MAX);
    ck_assert_int_eq(batcher_tick(B, 100000, true), APPLY_OK);
    ck_assert_int_eq(batcher_flush(B, FLUSH_IDLE), APPLY_OK);
    ck_assert_int_eq(batcher_flush(B, FLUSH_EXIT), APPLY_OK);
    ck_assert_uint_eq(batcher_get_stats(B)->commits, 0);
    ck_assert(!batcher_in_parts(B));
    ck_assert(batcher_commit_held(B));
    ck_assert_uint_eq(batcher_group_tables(B), 1);
    ck_assert_uint_eq(batcher_entry_tables(B), 0); /* the last entry alone (its table was counted): not a part */
    ck_assert_uint_eq(batcher_get_stats(B)->entries, 2);
    /* the entry that ends it commits as usual (batch_rows passed) */
    ck_assert_int_eq(feed_src(0, false, 0, 0), APPLY_OK);
    ck_assert(!batcher_commit_held(B));
    expect_log("copy shop.a 3 @1:3; commit 1:3; ");
    ck_assert_uint_eq(batcher_get_stats(B)->flushes[FLUSH_SIZE], 1);
    /* per-op mode too */
    batcher_config cfg = {.batch_rows = 1000, .batch_bytes = 1 << 30, .flush_interval_ms = 200, .per_op = true};
    restart_with(&cfg);
    ck_assert_int_eq(feed_src(0, true, 0, 0), APPLY_OK);
    ck_assert_int_eq(feed_src(1, false, 0, 0), APPLY_OK);
    expect_log("copy shop.a 2 @1:5; commit 1:5; ");
    /* a reset forgets it */
    ck_assert_int_eq(feed_src(1, true, 0, 0), APPLY_OK);
    batcher_reset(B);
    ck_assert(!batcher_commit_held(B));
    ck_assert_int_eq(feed_src(1, false, 0, 50), APPLY_OK);
    ck_assert_uint_eq(batcher_get_stats(B)->commits, 2);
}
END_TEST

/* Just before each commit the sink hears every source's last position and hold, and which moved in the group. */
START_TEST(test_source_positions_reach_the_sink)
{
    batcher_config cfg = {.batch_rows = 1000, .batch_bytes = 1 << 30, .flush_interval_ms = 200};
    restart_with(&cfg);
    batcher_free(B);
    batcher_sink out = rec_sink();
    out.set_sources = rec_sources;
    B = batcher_new(&cfg, &out);
    ck_assert_ptr_nonnull(B);
    ck_assert_int_eq(feed_src(2, false, 0, 0), APPLY_OK);
    ck_assert_int_eq(feed_src(0, false, 1, 0), APPLY_OK);
    ck_assert_int_eq(feed_src(2, false, 2, 0), APPLY_OK); /* the source's last entry gives its hold */
    ck_assert_int_eq(batcher_flush(B, FLUSH_IDLE), APPLY_OK);
    expect_log("copy shop.a 3 @1:3; sources 3: 0=1:2 hold 1:1 moved 1=0:0 2=1:3 hold 1:2 moved; commit 1:3; ");
    R.log[0] = '\0';
    ck_assert_int_eq(feed_src(0, false, 0, 0), APPLY_OK);
    ck_assert_int_eq(batcher_flush(B, FLUSH_IDLE), APPLY_OK);
    expect_log("copy shop.a 1 @1:4; sources 3: 0=1:4 moved 1=0:0 2=1:3 hold 1:2; commit 1:4; ");
    size_t n;
    const batcher_source_pos *sp = batcher_sources(B, &n);
    ck_assert_uint_eq(n, 3);
    ck_assert_uint_eq(sp[0].pos.inc, 4);
    ck_assert(!sp[0].moved);
}
END_TEST

/* A failed group's moves are forgotten: after batcher_reset the sources are as the last commit left them, the
 * sources first seen in the failed group included. */
START_TEST(test_reset_restores_source_positions)
{
    batcher_config cfg = {.batch_rows = 1000, .batch_bytes = 1 << 30, .flush_interval_ms = 200};
    restart_with(&cfg);
    batcher_free(B);
    batcher_sink out = rec_sink();
    out.set_sources = rec_sources;
    B = batcher_new(&cfg, &out);
    ck_assert_ptr_nonnull(B);
    ck_assert_int_eq(feed_src(1, false, 0, 0), APPLY_OK);
    ck_assert_int_eq(batcher_flush(B, FLUSH_IDLE), APPLY_OK);
    ck_assert_int_eq(feed_src(0, false, 0, 0), APPLY_OK);
    ck_assert_int_eq(feed_src(1, false, 1, 0), APPLY_OK);
    ck_assert_int_eq(feed_src(3, false, 0, 0), APPLY_OK);
    R.fail_commit = APPLY_RETRY;
    ck_assert_int_eq(batcher_flush(B, FLUSH_IDLE), APPLY_RETRY);
    batcher_reset(B);
    size_t n;
    const batcher_source_pos *sp = batcher_sources(B, &n);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(sp[1].pos.inc, 1);
    ck_assert(!sp[1].has_hold);
    ck_assert(!sp[1].moved);
    ck_assert_uint_eq(sp[0].pos.inc, 0);
    ck_assert(!sp[0].moved);
    R.fail_commit = APPLY_OK;
    R.log[0] = '\0';
    ck_assert_int_eq(feed_src(1, false, 0, 0), APPLY_OK);
    ck_assert_int_eq(batcher_flush(B, FLUSH_IDLE), APPLY_OK);
    expect_log("copy shop.a 1 @1:5; sources 2: 0=0:0 1=1:5 moved; commit 1:5; ");
}
END_TEST

/* ---- a change stream's resume token ---- */

static void rec_token(void *ctx, const uint8_t *tok, size_t len)
{
    recorder *r = ctx;
    if (tok == NULL)
        rec(r, "token none");
    else
        rec(r, "token %.*s", (int)len, (const char *)tok);
}

/* Feeds one insert at the next position carrying the resume token `tok` (a string, NULL: none), owned by the entry
 * and freed with it before the batcher commits. */
static apply_status feed_tok(const char *tok)
{
    op_entry e;
    op_pos pos = {.secs = 1, .inc = ++next_inc, .term = -1};
    op_entry_init(&e);
    ck_assert(op_entry_alloc(&e, &pos, 1));
    fill(&e.ops[0], OP_INSERT, "shop", "a");
    if (tok != NULL) {
        e.token_len = (uint32_t)strlen(tok);
        e.token = malloc(e.token_len);
        ck_assert_ptr_nonnull(e.token);
        memcpy(e.token, tok, e.token_len);
    }
    apply_status st = batcher_add(B, &e, 0);
    op_entry_clear(&e);
    return st;
}

static void restart_with_token_sink(void)
{
    batcher_config cfg = {.batch_rows = 1000, .batch_bytes = 1 << 30, .flush_interval_ms = 200};
    restart_with(&cfg);
    batcher_free(B);
    batcher_sink out = rec_sink();
    out.set_token = rec_token;
    B = batcher_new(&cfg, &out);
    ck_assert_ptr_nonnull(B);
}

/* Each commit hands the sink the token of the last entry taken that had one, copied (the entries are freed by then);
 * an entry without one leaves it; a longer token after a shorter one is copied whole. */
START_TEST(test_token_reaches_the_sink)
{
    restart_with_token_sink();
    size_t len;
    ck_assert_ptr_null(batcher_token(B, &len));
    ck_assert_int_eq(feed_tok("t1"), APPLY_OK);
    ck_assert_int_eq(feed_tok("t2"), APPLY_OK);
    ck_assert_int_eq(batcher_flush(B, FLUSH_IDLE), APPLY_OK);
    expect_log("copy shop.a 2 @1:2; token t2; commit 1:2; ");
    R.log[0] = '\0';
    ck_assert_int_eq(feed_tok("a-longer-token-3"), APPLY_OK);
    ck_assert_int_eq(feed_tok(NULL), APPLY_OK);
    ck_assert_int_eq(batcher_flush(B, FLUSH_IDLE), APPLY_OK);
    expect_log("copy shop.a 2 @1:4; token a-longer-token-3; commit 1:4; ");
    const uint8_t *t = batcher_token(B, &len);
    ck_assert_uint_eq(len, 16);
    ck_assert(memcmp(t, "a-longer-token-3", len) == 0);
}
END_TEST

/* A session whose entries carry no token (the oplog) hands the sink none. */
START_TEST(test_no_token_is_null)
{
    restart_with_token_sink();
    ck_assert_int_eq(feed_tok(NULL), APPLY_OK);
    ck_assert_int_eq(batcher_flush(B, FLUSH_IDLE), APPLY_OK);
    expect_log("copy shop.a 1 @1:1; token none; commit 1:1; ");
}
END_TEST

/* After a failed group, batcher_reset brings the token back to the one the last commit covered (none when no commit
 * carried one), and the group applied again carries its own. */
START_TEST(test_reset_restores_the_token)
{
    restart_with_token_sink();
    ck_assert_int_eq(feed_tok("t1"), APPLY_OK);
    R.fail_commit = APPLY_RETRY;
    ck_assert_int_eq(batcher_flush(B, FLUSH_IDLE), APPLY_RETRY);
    batcher_reset(B);
    size_t len;
    ck_assert_ptr_null(batcher_token(B, &len)); /* nothing was committed with a token */
    ck_assert_uint_eq(len, 0);
    R.fail_commit = APPLY_OK;
    R.log[0] = '\0';
    ck_assert_int_eq(feed_tok("t2"), APPLY_OK);
    ck_assert_int_eq(batcher_flush(B, FLUSH_IDLE), APPLY_OK);
    expect_log("copy shop.a 1 @1:2; token t2; commit 1:2; ");
    /* a longer token in the failed group, a shorter one committed: the committed one comes back whole */
    ck_assert_int_eq(feed_tok("a-much-longer-token"), APPLY_OK);
    R.fail_commit = APPLY_RETRY;
    ck_assert_int_eq(batcher_flush(B, FLUSH_IDLE), APPLY_RETRY);
    batcher_reset(B);
    const uint8_t *t = batcher_token(B, &len);
    ck_assert_uint_eq(len, 2);
    ck_assert(memcmp(t, "t2", 2) == 0);
    R.fail_commit = APPLY_OK;
    R.log[0] = '\0';
    ck_assert_int_eq(feed_tok(NULL), APPLY_OK); /* an entry without a token after the reset: the committed one stays */
    ck_assert_int_eq(batcher_flush(B, FLUSH_IDLE), APPLY_OK);
    expect_log("copy shop.a 1 @1:4; token t2; commit 1:4; ");
}
END_TEST

Suite *batcher_suite(void); /* called by the generated runner list */

Suite *batcher_suite(void)
{
    Suite *s = suite_create("batcher");
    TCase *tc = tcase_create("rules");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_conflict_writes_only_its_namespace);
    tcase_add_test(tc, test_table_bound);
    tcase_add_test(tc, test_entry_tables);
    tcase_add_test(tc, test_ddl_writes_every_run_first);
    tcase_add_test(tc, test_idle_commits_everything_once);
    tcase_add_test(tc, test_noops_advance_the_checkpoint);
    tcase_add_test(tc, test_size_threshold);
    tcase_add_test(tc, test_timer_with_fake_clock);
    tcase_add_test(tc, test_atomic_entry_not_split);
    tcase_add_test(tc, test_per_op_commits_every_entry);
    tcase_add_test(tc, test_failure_keeps_committed_position);
    tcase_add_test(tc, test_careful_sets_refused_ops_aside);
    tcase_add_test(tc, test_refusal_never_reaches_the_sink);
    tcase_add_test(tc, test_size_counts_rendered_bytes);
    tcase_add_test(tc, test_streaming_run_lets_go);
    tcase_add_test(tc, test_catchup_interval);
    tcase_add_test(tc, test_key_set_bounded);
    tcase_add_test(tc, test_out_of_memory_is_not_data);
    tcase_add_test(tc, test_parts_never_commit_between);
    tcase_add_test(tc, test_other_keys_commute_with_the_run);
    tcase_add_test(tc, test_many_namespaces);
    tcase_add_test(tc, test_no_commit_holds_every_trigger);
    tcase_add_test(tc, test_source_positions_reach_the_sink);
    tcase_add_test(tc, test_reset_restores_source_positions);
    tcase_add_test(tc, test_token_reaches_the_sink);
    tcase_add_test(tc, test_no_token_is_null);
    tcase_add_test(tc, test_reset_restores_the_token);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_mongosim_txn.c — the pure part of mongosim's transactions (tests/mongosim/txn.c): the split of operations
 * into applyOps entries (TransactionOperations::getApplyOpsInfo, packOperationsIntoApplyOps in mongodb/mongo
 * src/mongo/db/transaction/transaction_operations.cpp) and the chain's fields (logOplogEntries there; logApplyOps and
 * onBatchedWriteCommit in src/mongo/db/op_observer/op_observer_impl.cpp): partialTxn, prepare, count, the null
 * OpTime and the prevOpTime links, lsid/txnNumber, and the batched-write variant.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../mongosim/txn.h"

START_TEST(test_split_count_limit)
{
    uint32_t sizes[5] = {100, 100, 100, 100, 100};
    size_t counts[5];
    ck_assert_uint_eq(txn_split(sizes, 5, 2, TXN_ENTRY_SIZE_LIMIT, counts), 3);
    ck_assert_uint_eq(counts[0], 2);
    ck_assert_uint_eq(counts[1], 2);
    ck_assert_uint_eq(counts[2], 1);
    ck_assert_uint_eq(txn_split(sizes, 5, INT32_MAX, TXN_ENTRY_SIZE_LIMIT, counts), 1);
    ck_assert_uint_eq(counts[0], 5);
    ck_assert_uint_eq(txn_split(sizes, 0, 2, TXN_ENTRY_SIZE_LIMIT, counts), 0);
}
END_TEST

START_TEST(test_split_size_limit)
{
    /* The running total counts each packed op plus 8 bytes; the next op is added to it without its own 8. */
    uint32_t sizes[4] = {40, 40, 40, 200};
    size_t counts[4];
    /* 40 -> total 48; 48 + 40 = 88 <= 100 -> total 96; 96 + 40 = 136 > 100: new entry. */
    ck_assert_uint_eq(txn_split(sizes, 4, 100, 100, counts), 3);
    ck_assert_uint_eq(counts[0], 2);
    ck_assert_uint_eq(counts[1], 1); /* 40 -> 48; 48 + 200 > 100 */
    ck_assert_uint_eq(counts[2], 1); /* an op larger than the limit still gets an entry of its own */
    /* Exactly at the limit still fits. */
    uint32_t edge[2] = {42, 50};
    ck_assert_uint_eq(txn_split(edge, 2, 100, 100, counts), 1);
    ck_assert_uint_eq(txn_split(edge, 2, 100, 99, counts), 2);
}
END_TEST

typedef struct {
    uint64_t ts;
    bson_t *entries[16];
    uint64_t tss[16];
    size_t n;
    size_t fail_at;
} fake_log;

static uint64_t fake_next_ts(void *ctx)
{
    return ((fake_log *)ctx)->ts + 1;
}

static bool fake_append(void *ctx, const bson_t *entry, uint64_t ts)
{
    fake_log *l = ctx;
    if (l->n == l->fail_at || l->n == 16)
        return false;
    l->ts = ts;
    l->tss[l->n] = ts;
    l->entries[l->n++] = bson_copy(entry);
    return true;
}

static void fake_free(fake_log *l)
{
    for (size_t i = 0; i < l->n; i++)
        bson_destroy(l->entries[i]);
}

static const uint8_t LSID[16] = {1, 2, 3, 4, 5, 6, 0x47, 8, 0x89, 10, 11, 12, 13, 14, 15, 16};

static txn_chain_opts opts(txn_chain_kind kind, size_t limit, fake_log *l)
{
    txn_chain_opts o = {.kind = kind,
                        .lsid = LSID,
                        .txn_number = 7,
                        .term = 3,
                        .wall_ms = 1000,
                        .count_limit = limit,
                        .size_limit = TXN_ENTRY_SIZE_LIMIT,
                        .next_ts = fake_next_ts,
                        .append = fake_append,
                        .ctx = l};
    return o;
}

static bson_t **make_ops(size_t n)
{
    bson_t **ops = calloc(n, sizeof *ops);
    for (size_t i = 0; i < n; i++)
        ops[i] = BCON_NEW("op", "i", "ns", "db.c", "o", "{", "_id", BCON_INT32((int32_t)i), "}");
    return ops;
}

static void free_ops(bson_t **ops, size_t n)
{
    for (size_t i = 0; i < n; i++)
        bson_destroy(ops[i]);
    free(ops);
}

static bool has(const bson_t *e, const char *path)
{
    bson_iter_t it, d;
    return bson_iter_init(&it, e) && bson_iter_find_descendant(&it, path, &d);
}

static int64_t get_i64(const bson_t *e, const char *path)
{
    bson_iter_t it, d;
    ck_assert(bson_iter_init(&it, e) && bson_iter_find_descendant(&it, path, &d));
    return bson_iter_as_int64(&d);
}

static uint64_t get_ts(const bson_t *e, const char *path)
{
    bson_iter_t it, d;
    uint32_t s, i;
    ck_assert(bson_iter_init(&it, e) && bson_iter_find_descendant(&it, path, &d) && BSON_ITER_HOLDS_TIMESTAMP(&d));
    bson_iter_timestamp(&d, &s, &i);
    return OPLOG_TS(s, i);
}

static uint32_t applyops_len(const bson_t *e)
{
    bson_iter_t it, d, arr;
    ck_assert(bson_iter_init(&it, e) && bson_iter_find_descendant(&it, "o.applyOps", &d) && BSON_ITER_HOLDS_ARRAY(&d));
    bson_iter_recurse(&d, &arr);
    uint32_t n = 0;
    while (bson_iter_next(&arr))
        n++;
    return n;
}

START_TEST(test_single_entry_commit)
{
    fake_log l = {.ts = OPLOG_TS(100, 1), .fail_at = 99};
    bson_t **ops = make_ops(3);
    txn_chain_opts o = opts(TXN_CHAIN_COMMIT, INT32_MAX, &l);
    ck_assert_int_eq(txn_log_chain(ops, 3, &o, NULL), 1);
    bson_t *e = l.entries[0];
    bson_iter_t it;
    /* lsid, txnNumber, op, ns, o, ts, t, v, wall, prevOpTime */
    const char *order[] = {"lsid", "txnNumber", "op", "ns", "o", "ts", "t", "v", "wall", "prevOpTime"};
    bson_iter_init(&it, e);
    for (size_t i = 0; i < 10; i++) {
        ck_assert(bson_iter_next(&it));
        ck_assert_str_eq(bson_iter_key(&it), order[i]);
    }
    ck_assert(!bson_iter_next(&it));
    ck_assert_uint_eq(applyops_len(e), 3);
    ck_assert(!has(e, "o.partialTxn") && !has(e, "o.count") && !has(e, "o.prepare"));
    ck_assert_int_eq(get_i64(e, "txnNumber"), 7);
    ck_assert_uint_eq(get_ts(e, "prevOpTime.ts"), 0);
    ck_assert_int_eq(get_i64(e, "prevOpTime.t"), -1);
    ck_assert(has(e, "lsid.uid"));
    fake_free(&l);
    free_ops(ops, 3);
}
END_TEST

START_TEST(test_chain_links_and_count)
{
    fake_log l = {.ts = OPLOG_TS(100, 1), .fail_at = 99};
    bson_t **ops = make_ops(5);
    txn_chain_opts o = opts(TXN_CHAIN_COMMIT, 2, &l);
    uint64_t last = 0;
    ck_assert_int_eq(txn_log_chain(ops, 5, &o, &last), 3);
    ck_assert_uint_eq(last, l.tss[2]);
    ck_assert_uint_eq(applyops_len(l.entries[0]), 2);
    ck_assert_uint_eq(applyops_len(l.entries[1]), 2);
    ck_assert_uint_eq(applyops_len(l.entries[2]), 1);
    ck_assert_uint_eq(get_ts(l.entries[0], "prevOpTime.ts"), 0);
    ck_assert_int_eq(get_i64(l.entries[0], "prevOpTime.t"), -1);
    for (size_t i = 1; i < 3; i++) {
        ck_assert_uint_eq(get_ts(l.entries[i], "prevOpTime.ts"), l.tss[i - 1]);
        ck_assert_int_eq(get_i64(l.entries[i], "prevOpTime.t"), 3);
    }
    ck_assert(has(l.entries[0], "o.partialTxn") && has(l.entries[1], "o.partialTxn"));
    ck_assert(!has(l.entries[2], "o.partialTxn"));
    ck_assert(!has(l.entries[0], "o.count") && !has(l.entries[1], "o.count"));
    bson_iter_t it, d;
    ck_assert(bson_iter_init(&it, l.entries[2]) && bson_iter_find_descendant(&it, "o.count", &d));
    ck_assert(BSON_ITER_HOLDS_INT64(&d));
    ck_assert_int_eq(bson_iter_int64(&d), 5);
    fake_free(&l);
    free_ops(ops, 5);
}
END_TEST

START_TEST(test_prepare)
{
    fake_log l = {.ts = OPLOG_TS(100, 1), .fail_at = 99};
    bson_t **ops = make_ops(3);
    txn_chain_opts o = opts(TXN_CHAIN_PREPARE, 2, &l);
    ck_assert_int_eq(txn_log_chain(ops, 3, &o, NULL), 2);
    ck_assert(has(l.entries[0], "o.partialTxn") && !has(l.entries[0], "o.prepare"));
    ck_assert(has(l.entries[1], "o.prepare") && !has(l.entries[1], "o.partialTxn"));
    ck_assert_int_eq(get_i64(l.entries[1], "o.count"), 3);
    fake_free(&l);
    /* A prepared transaction with no operations logs {applyOps: [], prepare: true}. */
    fake_log l2 = {.ts = OPLOG_TS(100, 1), .fail_at = 99};
    o.ctx = &l2;
    ck_assert_int_eq(txn_log_chain(ops, 0, &o, NULL), 1);
    ck_assert_uint_eq(applyops_len(l2.entries[0]), 0);
    ck_assert(has(l2.entries[0], "o.prepare") && !has(l2.entries[0], "o.count"));
    ck_assert_int_eq(get_i64(l2.entries[0], "prevOpTime.t"), -1);
    fake_free(&l2);
    free_ops(ops, 3);
}
END_TEST

START_TEST(test_batched)
{
    fake_log l = {.ts = OPLOG_TS(100, 1), .fail_at = 99};
    bson_t **ops = make_ops(3);
    txn_chain_opts o = opts(TXN_CHAIN_BATCHED, INT32_MAX, &l);
    /* One entry: no lsid, no txnNumber, no prevOpTime (the legacy atomic applyOps). */
    ck_assert_int_eq(txn_log_chain(ops, 3, &o, NULL), 1);
    ck_assert(!has(l.entries[0], "lsid") && !has(l.entries[0], "txnNumber") && !has(l.entries[0], "prevOpTime"));
    fake_free(&l);
    /* A chain keeps prevOpTime (SERVER-70572), with partialTxn and count like a transaction. */
    fake_log l2 = {.ts = OPLOG_TS(100, 1), .fail_at = 99};
    o.ctx = &l2;
    o.count_limit = 2;
    ck_assert_int_eq(txn_log_chain(ops, 3, &o, NULL), 2);
    ck_assert(!has(l2.entries[0], "lsid") && !has(l2.entries[1], "lsid"));
    ck_assert_int_eq(get_i64(l2.entries[0], "prevOpTime.t"), -1);
    ck_assert_uint_eq(get_ts(l2.entries[1], "prevOpTime.ts"), l2.tss[0]);
    ck_assert(has(l2.entries[0], "o.partialTxn"));
    ck_assert_int_eq(get_i64(l2.entries[1], "o.count"), 3);
    fake_free(&l2);
    free_ops(ops, 3);
}
END_TEST

START_TEST(test_append_failure)
{
    fake_log l = {.ts = OPLOG_TS(100, 1), .fail_at = 1};
    bson_t **ops = make_ops(3);
    txn_chain_opts o = opts(TXN_CHAIN_COMMIT, 1, &l);
    ck_assert_int_eq(txn_log_chain(ops, 3, &o, NULL), -1);
    ck_assert_uint_eq(l.n, 1);
    fake_free(&l);
    free_ops(ops, 3);
}
END_TEST

Suite *mongosim_txn_suite(void); /* called by the generated runner list */

Suite *mongosim_txn_suite(void)
{
    Suite *s = suite_create("mongosim_txn");
    TCase *tc = tcase_create("chain");
    tcase_add_test(tc, test_split_count_limit);
    tcase_add_test(tc, test_split_size_limit);
    tcase_add_test(tc, test_single_entry_commit);
    tcase_add_test(tc, test_chain_links_and_count);
    tcase_add_test(tc, test_prepare);
    tcase_add_test(tc, test_batched);
    tcase_add_test(tc, test_append_failure);
    suite_add_tcase(s, tc);
    return s;
}

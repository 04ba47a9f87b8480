/*
 * test_txn.c — source/txn.h without a server: classification of the chain shapes, the walk back along prevOpTime
 * over a fake oplog (found, lost, malformed, a prevOpTime that is not a chain), and the book of open chains.
 */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "source/txn.h"

#define MAXE 16

/* A fake oplog: entries as Extended JSON, looked up by ts. */
typedef struct {
    bson_t *e[MAXE];
    size_t n;
    int lookups;
} fake;

static void fake_add(fake *f, const char *json)
{
    bson_error_t err;
    f->e[f->n] = bson_new_from_json((const uint8_t *)json, -1, &err);
    ck_assert_msg(f->e[f->n] != NULL, "%s: %s", json, err.message);
    f->n++;
}

static void fake_free(fake *f)
{
    for (size_t i = 0; i < f->n; i++)
        bson_destroy(f->e[i]);
}

static txn_lookup fake_lookup(void *ctx, const op_pos *ts, bson_t *out, char *err, size_t errlen)
{
    fake *f = ctx;
    f->lookups++;
    for (size_t i = 0; i < f->n; i++) {
        txn_info ti;
        ck_assert(txn_classify(f->e[i], &ti));
        if (op_pos_cmp(&ti.pos, ts) == 0) {
            bson_copy_to(f->e[i], out);
            return TXN_LOOKUP_FOUND;
        }
    }
    return TXN_LOOKUP_MISSING;
}

static char *entry(char *buf, size_t len, int inc, int prev, const char *flags)
{
    snprintf(buf, len,
             "{\"ts\": {\"$timestamp\": {\"t\": 5, \"i\": %d}}, \"t\": {\"$numberLong\": \"1\"}, \"op\": \"c\", "
             "\"ns\": \"admin.$cmd\", \"lsid\": {\"id\": 1}, \"txnNumber\": 3, "
             "\"prevOpTime\": {\"ts\": {\"$timestamp\": {\"t\": %d, \"i\": %d}}, \"t\": {\"$numberLong\": \"1\"}}, "
             "\"o\": {\"applyOps\": [{\"op\": \"i\", \"ns\": \"a.b\", \"o\": {\"_id\": %d}}]%s}}",
             inc, prev ? 5 : 0, prev, inc, flags);
    return buf;
}

static txn_info classify_json(const char *json)
{
    bson_error_t err;
    bson_t *b = bson_new_from_json((const uint8_t *)json, -1, &err);
    ck_assert_msg(b != NULL, "%s", err.message);
    txn_info ti;
    ck_assert(txn_classify(b, &ti));
    bson_destroy(b);
    return ti;
}

START_TEST(classify_shapes)
{
    char b[1024];
    ck_assert_int_eq(classify_json(entry(b, sizeof b, 1, 0, ", \"partialTxn\": true")).role, TXN_PART);
    ck_assert_int_eq(classify_json(entry(b, sizeof b, 2, 1, ", \"prepare\": true")).role, TXN_PREPARE);
    txn_info c = classify_json(entry(b, sizeof b, 3, 2, ", \"count\": {\"$numberLong\": \"3\"}"));
    ck_assert_int_eq(c.role, TXN_COMMIT);
    ck_assert(c.has_count && c.has_prev);
    ck_assert_uint_eq(c.prev.inc, 2);
    /* single-entry transaction (null prevOpTime, no count), user applyOps: not chains */
    ck_assert_int_eq(classify_json(entry(b, sizeof b, 4, 0, "")).role, TXN_NONE);
    ck_assert_int_eq(classify_json("{\"ts\": {\"$timestamp\": {\"t\": 5, \"i\": 9}}, \"op\": \"c\", \"ns\": "
                                   "\"admin.$cmd\", \"o\": {\"applyOps\": []}}")
                         .role,
                     TXN_NONE);
    /* vectored insert: multiOpType, even with a prevOpTime */
    ck_assert_int_eq(classify_json("{\"ts\": {\"$timestamp\": {\"t\": 5, \"i\": 9}}, \"op\": \"c\", \"ns\": "
                                   "\"admin.$cmd\", \"multiOpType\": 1, \"prevOpTime\": {\"ts\": {\"$timestamp\": "
                                   "{\"t\": 5, \"i\": 8}}, \"t\": 1}, \"o\": {\"applyOps\": []}}")
                         .role,
                     TXN_NONE);
    ck_assert_int_eq(classify_json("{\"ts\": {\"$timestamp\": {\"t\": 5, \"i\": 9}}, \"op\": \"c\", \"ns\": "
                                   "\"admin.$cmd\", \"prevOpTime\": {\"ts\": {\"$timestamp\": {\"t\": 5, \"i\": 2}}, "
                                   "\"t\": 1}, \"o\": {\"commitTransaction\": 1, \"commitTimestamp\": "
                                   "{\"$timestamp\": {\"t\": 5, \"i\": 2}}}}")
                         .role,
                     TXN_COMMIT_PREPARED);
    ck_assert_int_eq(classify_json("{\"ts\": {\"$timestamp\": {\"t\": 5, \"i\": 9}}, \"op\": \"c\", \"ns\": "
                                   "\"admin.$cmd\", \"o\": {\"abortTransaction\": 1}}")
                         .role,
                     TXN_ABORT);
    ck_assert_int_eq(classify_json("{\"ts\": {\"$timestamp\": {\"t\": 5, \"i\": 9}}, \"op\": \"i\", \"ns\": \"a.b\", "
                                   "\"o\": {\"_id\": 1}}")
                         .role,
                     TXN_NONE);
}
END_TEST

START_TEST(walk_back_chain)
{
    fake f = {0};
    char b[1024];
    fake_add(&f, entry(b, sizeof b, 1, 0, ", \"partialTxn\": true"));
    fake_add(&f, entry(b, sizeof b, 2, 1, ", \"partialTxn\": true"));
    fake_add(&f, entry(b, sizeof b, 4, 2, ", \"partialTxn\": true"));
    txn_info c = classify_json(entry(b, sizeof b, 7, 4, ", \"count\": 4"));
    txn_list l;
    txn_list_init(&l);
    op_pos missing;
    char err[256];
    ck_assert_int_eq(txn_walk_back(&c, fake_lookup, &f, &l, &missing, err, sizeof err), TXN_WALK_OK);
    ck_assert_uint_eq(l.n, 3);
    ck_assert_uint_eq(l.v[0].inc, 1);
    ck_assert_uint_eq(l.v[1].inc, 2);
    ck_assert_uint_eq(l.v[2].inc, 4);
    ck_assert_int_eq(f.lookups, 3); /* one per entry */

    /* the chain's first entry gone: lost, naming it */
    bson_destroy(f.e[0]);
    f.e[0] = f.e[--f.n];
    ck_assert_int_eq(txn_walk_back(&c, fake_lookup, &f, &l, &missing, err, sizeof err), TXN_WALK_LOST);
    ck_assert_uint_eq(missing.inc, 1);
    txn_list_free(&l);
    fake_free(&f);
}
END_TEST

START_TEST(walk_back_prepared_and_bad)
{
    fake f = {0};
    char b[1024];
    fake_add(&f, entry(b, sizeof b, 1, 0, ", \"partialTxn\": true"));
    fake_add(&f, entry(b, sizeof b, 2, 1, ", \"prepare\": true"));
    fake_add(&f, entry(b, sizeof b, 3, 0, ""));
    txn_info c =
        classify_json("{\"ts\": {\"$timestamp\": {\"t\": 5, \"i\": 9}}, \"op\": \"c\", \"ns\": \"admin.$cmd\", "
                      "\"prevOpTime\": {\"ts\": {\"$timestamp\": {\"t\": 5, \"i\": 2}}, \"t\": 1}, "
                      "\"o\": {\"commitTransaction\": 1}}");
    txn_list l;
    txn_list_init(&l);
    op_pos missing;
    char err[256];
    ck_assert_int_eq(txn_walk_back(&c, fake_lookup, &f, &l, &missing, err, sizeof err), TXN_WALK_OK);
    ck_assert_uint_eq(l.n, 2);
    ck_assert_uint_eq(l.v[0].inc, 1);
    ck_assert_uint_eq(l.v[1].inc, 2);
    /* a commitTransaction pointing at a partialTxn entry (not the prepare): malformed */
    c.prev.inc = 1;
    ck_assert_int_eq(txn_walk_back(&c, fake_lookup, &f, &l, &missing, err, sizeof err), TXN_WALK_BAD);
    ck_assert_ptr_nonnull(strstr(err, "prepare"));
    /* an applyOps with a prevOpTime but no count whose previous entry is no partialTxn: not a chain */
    txn_info s = classify_json(entry(b, sizeof b, 8, 3, ""));
    ck_assert_int_eq(s.role, TXN_COMMIT);
    ck_assert_int_eq(txn_walk_back(&s, fake_lookup, &f, &l, &missing, err, sizeof err), TXN_WALK_SINGLE);
    /* the same with count: malformed */
    s.has_count = true;
    ck_assert_int_eq(txn_walk_back(&s, fake_lookup, &f, &l, &missing, err, sizeof err), TXN_WALK_BAD);
    /* count with no prevOpTime at all (a server writes count only at the end of two or more entries): malformed,
     * and the reason says so */
    s.has_prev = false;
    ck_assert_int_eq(txn_walk_back(&s, fake_lookup, &f, &l, &missing, err, sizeof err), TXN_WALK_BAD);
    ck_assert_ptr_nonnull(strstr(err, "count but no prevOpTime"));
    /* a prevOpTime that does not go back */
    txn_info loop = classify_json(entry(b, sizeof b, 3, 5, ", \"count\": 2"));
    ck_assert_int_eq(txn_walk_back(&loop, fake_lookup, &f, &l, &missing, err, sizeof err), TXN_WALK_BAD);
    txn_list_free(&l);
    fake_free(&f);
}
END_TEST

START_TEST(book_open_chains)
{
    char b[1024];
    txn_book bk;
    txn_book_init(&bk);
    op_pos first;
    ck_assert(!txn_book_oldest(&bk, &first));
    txn_info p1 = classify_json(entry(b, sizeof b, 1, 0, ", \"partialTxn\": true"));
    txn_info q1 = classify_json(entry(b, sizeof b, 2, 0, ", \"partialTxn\": true"));
    txn_info p2 = classify_json(entry(b, sizeof b, 3, 1, ", \"prepare\": true"));
    txn_info half = classify_json(entry(b, sizeof b, 6, 5, ", \"partialTxn\": true")); /* met half-way */
    ck_assert(txn_book_note(&bk, &p1, 100)->first_known);
    txn_book_note(&bk, &q1, 10);
    txn_chain *c = txn_book_note(&bk, &p2, 50);
    ck_assert_uint_eq(c->entries, 2);
    ck_assert_uint_eq(c->first.inc, 1);
    ck_assert(!txn_book_note(&bk, &half, 1)->first_known);
    ck_assert_uint_eq(bk.n, 3);
    ck_assert_uint_eq(txn_book_bytes(&bk), 161);
    ck_assert(txn_book_oldest(&bk, &first));
    ck_assert_uint_eq(first.inc, 1);
    txn_book_close(&bk, &p2.pos); /* commitTransaction: prevOpTime = the prepare */
    ck_assert_uint_eq(bk.n, 2);
    ck_assert(txn_book_oldest(&bk, &first));
    ck_assert_uint_eq(first.inc, 2);
    txn_book_close(&bk, &p1.pos); /* nothing ends there any more */
    ck_assert_uint_eq(bk.n, 2);
    txn_book_free(&bk);
}
END_TEST

Suite *txn_unit_suite(void); /* called by the generated runner list */

Suite *txn_unit_suite(void)
{
    Suite *s = suite_create("txn_unit");
    TCase *tc = tcase_create("txn");
    tcase_add_test(tc, classify_shapes);
    tcase_add_test(tc, walk_back_chain);
    tcase_add_test(tc, walk_back_prepared_and_bad);
    tcase_add_test(tc, book_open_chains);
    suite_add_tcase(s, tc);
    return s;
}

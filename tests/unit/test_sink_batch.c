/*
 * test_sink_batch.c — a typed map's insert run (sink/batch.h): a record that cannot be added leaves the run as it was.
 */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "sink/batch.h"

/* One record of table 0: its tuple is `bytes` long. */
static void record(map_rows *r, const char *bytes)
{
    uint32_t len = (uint32_t)strlen(bytes);
    strbuf_put_be16(&r->buf, 0);
    strbuf_put_be32(&r->buf, len);
    strbuf_append(&r->buf, bytes, len);
    r->count++;
}

/* An append that fails (a record larger than any buffer can grow to) keeps the records added before it, and the
 * counts stay those of the records held: nothing the counts promise is gone from the buffer. */
START_TEST(test_add_mapped_failure_keeps_the_run)
{
    sink_batch *b = sink_batch_new();
    ck_assert_ptr_nonnull(b);
    map_rows one = {.buf = STRBUF_INIT};
    record(&one, "first document");
    ck_assert(sink_batch_add_mapped(b, &one));
    size_t rows = sink_batch_rows(b), bytes = sink_batch_bytes(b);
    ck_assert_uint_eq(rows, 1);

    /* the bytes are never read: the buffer refuses to grow by this much before it copies anything */
    map_rows huge = {.buf = {.data = one.buf.data, .len = SIZE_MAX / 2, .cap = 0, .failed = false}, .count = 1};
    ck_assert(!sink_batch_add_mapped(b, &huge));
    ck_assert_uint_eq(sink_batch_rows(b), rows);
    ck_assert_uint_eq(sink_batch_bytes(b), bytes);
    const map_rows *mr = sink_batch_mapped(b);
    ck_assert_uint_eq(mr->count, 1);
    ck_assert(!strbuf_failed(&mr->buf));
    ck_assert_uint_eq(mr->buf.len, one.buf.len);
    ck_assert_mem_eq(mr->buf.data, one.buf.data, one.buf.len);

    /* and the run goes on: the next record lands after the first */
    map_rows two = {.buf = STRBUF_INIT};
    record(&two, "second");
    ck_assert(sink_batch_add_mapped(b, &two));
    ck_assert_uint_eq(sink_batch_rows(b), 2);
    ck_assert_uint_eq(sink_batch_mapped(b)->count, 2);
    ck_assert_uint_eq(sink_batch_mapped(b)->buf.len, one.buf.len + two.buf.len);
    map_row_iter it;
    map_rows_iter(sink_batch_mapped(b), &it);
    uint16_t table;
    const uint8_t *tuple;
    uint32_t len;
    ck_assert(map_rows_next(&it, &table, &tuple, &len));
    ck_assert_mem_eq(tuple, "first document", len);
    ck_assert(map_rows_next(&it, &table, &tuple, &len));
    ck_assert_mem_eq(tuple, "second", len);
    ck_assert(!map_rows_next(&it, &table, &tuple, &len));
    strbuf_free(&one.buf);
    strbuf_free(&two.buf);
    sink_batch_free(b);
}
END_TEST

Suite *sink_batch_suite(void); /* called by the generated runner list */

Suite *sink_batch_suite(void)
{
    Suite *s = suite_create("sink_batch");
    TCase *tc = tcase_create("sink_batch");
    tcase_add_test(tc, test_add_mapped_failure_keeps_the_run);
    suite_add_tcase(s, tc);
    return s;
}

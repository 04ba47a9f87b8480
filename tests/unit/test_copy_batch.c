/*
 * test_copy_batch.c — copy_batch_check (src/copy/writer.c): the writing thread of the initial copy refuses a batch it
 * cannot place whole (a row for a table the map does not have; a careful batch whose kept documents and rows are out
 * of step) instead of skipping part of it while its progress row moves past it. No batch the reading thread makes
 * can fail the check; these batches are built by hand.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/copy/copy_internal.h"
#include "map/project.h"
#include "util/strbuf.h"

static void take_row(copy_batch *b, const char *key)
{
    char *json = strdup("{\"a\": 1}");
    ck_assert_ptr_nonnull(json);
    ck_assert(sink_batch_take(b->rows, key, strlen(key), &json, strlen("{\"a\": 1}")));
    free(json);
}

static void keep_doc(copy_batch *b, int id, const char *why)
{
    bson_t *doc = BCON_NEW("_id", BCON_INT32(id));
    ck_assert(copy_batch_keep(b, doc, why));
    bson_destroy(doc);
}

static void batch_free(copy_batch *b)
{
    for (size_t i = 0; i < b->nkept; i++) {
        free(b->kept[i].bson);
        free(b->kept[i].why);
    }
    free(b->kept);
    sink_batch_free(b->rows);
}

/* One record of map/project.h's row format: table number, tuple length, tuple (one field, NULL). */
static void add_record(map_rows *r, uint16_t table)
{
    const uint8_t rec[] = {(uint8_t)(table >> 8), (uint8_t)table, 0, 0, 0, 6, 0, 1, 0xff, 0xff, 0xff, 0xff};
    strbuf_append(&r->buf, (const char *)rec, sizeof rec);
    r->count++;
}

START_TEST(test_careful_rows_and_kept_in_step)
{
    char why[200];
    copy_batch b = {.careful = true};
    b.rows = sink_batch_new();
    ck_assert_ptr_nonnull(b.rows);
    take_row(&b, "1");
    take_row(&b, "2");
    keep_doc(&b, 1, NULL);
    keep_doc(&b, 9, "a value its column cannot take"); /* set aside: no row */
    keep_doc(&b, 2, NULL);
    ck_assert_msg(copy_batch_check(&b, 0, why, sizeof why), "%s", why);
    /* one document more than rows: the old loop stopped early and left it unwritten */
    keep_doc(&b, 3, NULL);
    ck_assert(!copy_batch_check(&b, 0, why, sizeof why));
    ck_assert_ptr_nonnull(strstr(why, "careful batch of 2 rows keeping 3"));
    /* one row more than documents: the old loop never reached it */
    take_row(&b, "3");
    take_row(&b, "4");
    ck_assert(!copy_batch_check(&b, 0, why, sizeof why));
    /* a batch that is not careful keeps only what it sets aside */
    b.careful = false;
    ck_assert(copy_batch_check(&b, 0, why, sizeof why));
    batch_free(&b);
}
END_TEST

START_TEST(test_mapped_rows_within_the_tables)
{
    char why[200];
    copy_batch b = {0};
    b.rows = sink_batch_new();
    ck_assert_ptr_nonnull(b.rows);
    map_rows r;
    strbuf_init(&r.buf);
    r.count = 0;
    add_record(&r, 0);
    add_record(&r, 1);
    ck_assert(sink_batch_add_mapped(b.rows, &r));
    ck_assert_msg(copy_batch_check(&b, 2, why, sizeof why), "%s", why);
    strbuf_reset(&r.buf, 0);
    r.count = 0;
    add_record(&r, 0);
    add_record(&r, 2); /* past a map of two tables: the old writer skipped it */
    ck_assert(sink_batch_add_mapped(b.rows, &r));
    ck_assert(!copy_batch_check(&b, 2, why, sizeof why));
    ck_assert_ptr_nonnull(strstr(why, "a row for table 2 of a map with 2 tables"));
    ck_assert(copy_batch_check(&b, 3, why, sizeof why));
    strbuf_free(&r.buf);
    batch_free(&b);
}
END_TEST

Suite *copy_batch_suite(void); /* called by the generated runner list */

Suite *copy_batch_suite(void)
{
    Suite *s = suite_create("copy_batch");
    TCase *tc = tcase_create("copy_batch");
    tcase_add_test(tc, test_careful_rows_and_kept_in_step);
    tcase_add_test(tc, test_mapped_rows_within_the_tables);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_tuple.c — reading a typed map's rows (map/tuple.h): records, the fields of a binary COPY tuple, NULLs, a field
 * by number, the framed key a plan holds. The bytes are written out by hand here, in the layout PostgreSQL documents
 * for binary COPY (int16 field count; per field an int32 length, -1 for NULL, then the bytes; big-endian), not by the
 * projector, so a reader and a writer that agree on a wrong layout would still fail.
 */
#include <check.h>
#include <string.h>

#include "map/tuple.h"

/* Two records: table 0 with (int4 7, NULL, text "ab"); table 2 with no fields. */
static const uint8_t ROWS[] = {
    0x00, 0x00,                                     /* table 0 */
    0x00, 0x00, 0x00, 0x14,                         /* tuple length 20 */
    0x00, 0x03,                                     /* 3 fields */
    0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x07, /* int4 7 */
    0xff, 0xff, 0xff, 0xff,                         /* NULL */
    0x00, 0x00, 0x00, 0x02, 'a',  'b',              /* "ab" */
    0x00, 0x02,                                     /* table 2 */
    0x00, 0x00, 0x00, 0x02,                         /* tuple length 2 */
    0x00, 0x00,                                     /* no fields */
};

static map_rows rows_of(const uint8_t *data, size_t len)
{
    map_rows r = {.buf = {.data = (char *)data, .len = len}, .count = 2};
    return r;
}

START_TEST(test_records_and_fields)
{
    map_rows r = rows_of(ROWS, sizeof ROWS);
    map_row_iter it;
    map_rows_iter(&r, &it);
    uint16_t table;
    const uint8_t *tuple;
    uint32_t len;
    ck_assert(map_rows_next(&it, &table, &tuple, &len));
    ck_assert_uint_eq(table, 0);
    ck_assert_uint_eq(len, 20);
    ck_assert_ptr_eq(tuple, ROWS + 6);
    ck_assert_uint_eq(map_tuple_fields(tuple), 3);

    map_tuple_iter ti;
    map_field f;
    map_tuple_iter_init(&ti, tuple);
    ck_assert(map_tuple_next(&ti, &f));
    ck_assert_int_eq(f.len, 4);
    ck_assert_ptr_eq(f.frame, ROWS + 8);
    ck_assert_ptr_eq(f.value, ROWS + 12);
    ck_assert_int_eq(f.value[3], 7);
    ck_assert(map_tuple_next(&ti, &f));
    ck_assert_ptr_null(f.value);
    ck_assert_int_eq(f.len, 0);
    ck_assert_ptr_eq(f.frame, ROWS + 16);
    ck_assert(map_tuple_next(&ti, &f));
    ck_assert_int_eq(f.len, 2);
    ck_assert_int_eq(memcmp(f.value, "ab", 2), 0);
    ck_assert(!map_tuple_next(&ti, &f));

    ck_assert(map_rows_next(&it, &table, &tuple, &len));
    ck_assert_uint_eq(table, 2);
    ck_assert_uint_eq(len, 2);
    ck_assert_uint_eq(map_tuple_fields(tuple), 0);
    map_tuple_iter_init(&ti, tuple);
    ck_assert(!map_tuple_next(&ti, &f));
    ck_assert(!map_rows_next(&it, &table, &tuple, &len));
}
END_TEST

START_TEST(test_field_by_number)
{
    const uint8_t *tuple = ROWS + 6;
    map_field f;
    ck_assert(map_tuple_field(tuple, 2, &f));
    ck_assert_int_eq(f.len, 2);
    ck_assert_int_eq(memcmp(f.value, "ab", 2), 0);
    ck_assert_ptr_eq(f.frame, ROWS + 20);
    ck_assert(map_tuple_field(tuple, 1, &f));
    ck_assert_ptr_null(f.value);
    ck_assert(!map_tuple_field(tuple, 3, &f));
    /* the frame of a field reads back as the same field (a plan's key is held framed) */
    map_field again;
    ck_assert(map_tuple_field(tuple, 0, &f));
    const uint8_t *next = map_field_read(f.frame, &again);
    ck_assert_ptr_eq(again.value, f.value);
    ck_assert_int_eq(again.len, 4);
    ck_assert_ptr_eq(next, ROWS + 16);
}
END_TEST

START_TEST(test_cut_record_ends_the_rows)
{
    /* fewer than a record's six header bytes left: no record (an empty set of rows alike) */
    map_rows r = rows_of(ROWS, 5);
    map_row_iter it;
    map_rows_iter(&r, &it);
    uint16_t table;
    const uint8_t *tuple;
    uint32_t len;
    ck_assert(!map_rows_next(&it, &table, &tuple, &len));
    map_rows none = {0};
    map_rows_iter(&none, &it);
    ck_assert(!map_rows_next(&it, &table, &tuple, &len));
}
END_TEST

Suite *tuple_suite(void); /* called by the generated runner list */

Suite *tuple_suite(void)
{
    Suite *s = suite_create("tuple");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_records_and_fields);
    tcase_add_test(tc, test_field_by_number);
    tcase_add_test(tc, test_cut_record_ends_the_rows);
    suite_add_tcase(s, tc);
    return s;
}

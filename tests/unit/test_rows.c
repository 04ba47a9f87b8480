/*
 * test_rows.c — the row writer's upserts of whole documents (sink/rows.h), with a recording sender in place of
 * PostgreSQL: each row by its table's upsert with its fields as binary parameters, a parent row followed by the
 * deletes of its child rows (parent key, position 0) in every child table, before the child rows that replace them;
 * a row for a table the map does not have, or a parent row without its key field, stops the rows there.
 */
#include <check.h>
#include <string.h>

#include "sink/rows.h"

typedef struct {
    int n;
    sink_rows_stmt stmt[16];
    size_t table[16];
    int nparams[16];
    char first[16][8];  /* the first parameter's bytes */
    int first_len[16];  /* its length */
    int second_len[16]; /* the second's (-1: none) */
    int fail_at;        /* the call that fails (-1: none) */
} recorder;

static bool record_send(void *arg, sink_rows_stmt stmt, size_t table, int n, const char *const *values,
                        const int *lengths, const int *formats)
{
    recorder *r = arg;
    ck_assert_int_lt(r->n, 16);
    int i = r->n++;
    r->stmt[i] = stmt;
    r->table[i] = table;
    r->nparams[i] = n;
    for (int k = 0; k < n; k++)
        ck_assert_int_eq(formats[k], 1); /* every parameter binary, as the tuple holds it */
    r->first_len[i] = n > 0 ? lengths[0] : -1;
    if (n > 0 && values[0] != NULL)
        memcpy(r->first[i], values[0], lengths[0] < 8 ? (size_t)lengths[0] : 8);
    r->second_len[i] = n > 1 ? lengths[1] : -1;
    return i != r->fail_at;
}

/* A record of table t with fields given as (length, bytes) pairs (length -1: NULL). */
static void put_record(strbuf *b, uint16_t t, int nf, const int *lens, const char *const *vals)
{
    size_t tuple = 2;
    for (int i = 0; i < nf; i++)
        tuple += 4 + (lens[i] < 0 ? 0 : (size_t)lens[i]);
    strbuf_put_be16(b, t);
    strbuf_put_be32(b, (uint32_t)tuple);
    strbuf_put_be16(b, (uint16_t)nf);
    for (int i = 0; i < nf; i++) {
        strbuf_put_be32(b, (uint32_t)lens[i]);
        if (lens[i] > 0)
            strbuf_append(b, vals[i], (size_t)lens[i]);
    }
}

START_TEST(test_parent_then_children_replaced)
{
    map_table parent = {.key = 1}, child = {.key = SIZE_MAX};
    sink_mapped_table tabs[3] = {
        {.mt = &parent, .qname = "p", .nfields = 3},
        {.mt = &child, .qname = "c1", .nfields = 3},
        {.mt = &child, .qname = "c2", .nfields = 2},
    };
    sink_rows_dest d = {.mtabs = tabs, .nmtabs = 3};
    map_rows rows = {.buf = STRBUF_INIT};
    /* parent (x, KEY, NULL), then a child row of table 2 (KEY, pos) */
    put_record(&rows.buf, 0, 3, (const int[]){1, 3, -1}, (const char *const[]){"x", "KEY", NULL});
    put_record(&rows.buf, 2, 2, (const int[]){3, 4}, (const char *const[]){"KEY", "\0\0\0\1"});
    recorder r = {.fail_at = -1};
    char why[200] = "";
    ck_assert_int_eq(sink_rows_upsert(&d, &rows, record_send, &r, why, sizeof why), SINK_ROWS_OK);
    ck_assert_int_eq(r.n, 4);
    ck_assert(r.stmt[0] == SINK_ROWS_UPSERT && r.table[0] == 0 && r.nparams[0] == 3);
    /* the parent's key field (field 1) is the children's first parameter, position 0 their second */
    for (int i = 1; i <= 2; i++) {
        ck_assert(r.stmt[i] == SINK_ROWS_CHILDREN);
        ck_assert_uint_eq(r.table[i], (size_t)i);
        ck_assert_int_eq(r.nparams[i], 2);
        ck_assert_int_eq(r.first_len[i], 3);
        ck_assert_int_eq(memcmp(r.first[i], "KEY", 3), 0);
        ck_assert_int_eq(r.second_len[i], 4);
    }
    ck_assert(r.stmt[3] == SINK_ROWS_UPSERT && r.table[3] == 2 && r.nparams[3] == 2);
    strbuf_free(&rows.buf);
}
END_TEST

START_TEST(test_malformed_rows_stop)
{
    map_table parent = {.key = 2};
    sink_mapped_table tabs[2] = {{.mt = &parent, .qname = "p", .nfields = 3},
                                 {.mt = &parent, .qname = "c", .nfields = 2}};
    sink_rows_dest d = {.mtabs = tabs, .nmtabs = 2};
    char why[200] = "";

    /* a row for table 5 of a map of two */
    map_rows rows = {.buf = STRBUF_INIT};
    put_record(&rows.buf, 5, 1, (const int[]){1}, (const char *const[]){"x"});
    recorder r = {.fail_at = -1};
    ck_assert_int_eq(sink_rows_upsert(&d, &rows, record_send, &r, why, sizeof why), SINK_ROWS_MALFORMED);
    ck_assert_int_eq(r.n, 0);
    ck_assert_msg(strstr(why, "table 5") != NULL, "%s", why);

    /* a parent row of two fields, its key being field 2: upserted, then no child delete without a key */
    strbuf_reset(&rows.buf, 0);
    put_record(&rows.buf, 0, 2, (const int[]){1, 1}, (const char *const[]){"a", "b"});
    r = (recorder){.fail_at = -1};
    ck_assert_int_eq(sink_rows_upsert(&d, &rows, record_send, &r, why, sizeof why), SINK_ROWS_MALFORMED);
    ck_assert_int_eq(r.n, 1);

    /* a send that fails stops the rows at once */
    strbuf_reset(&rows.buf, 0);
    put_record(&rows.buf, 1, 1, (const int[]){1}, (const char *const[]){"a"});
    put_record(&rows.buf, 1, 1, (const int[]){1}, (const char *const[]){"b"});
    r = (recorder){.fail_at = 0};
    ck_assert_int_eq(sink_rows_upsert(&d, &rows, record_send, &r, why, sizeof why), SINK_ROWS_SEND_FAILED);
    ck_assert_int_eq(r.n, 1);
    strbuf_free(&rows.buf);
}
END_TEST

Suite *rows_suite(void); /* called by the generated runner list */

Suite *rows_suite(void)
{
    Suite *s = suite_create("rows");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_parent_then_children_replaced);
    tcase_add_test(tc, test_malformed_rows_stop);
    suite_add_tcase(s, tc);
    return s;
}

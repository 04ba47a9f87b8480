/*
 * test_mapped_guards.c — rows and edits of a typed map that name a table past the map's (sink/mapped.c): a plan made
 * with another map than the sink's. It cannot happen in a running daemon, so the tests make such a plan by hand: the
 * sink must fail with APPLY_UNRECORDABLE (the daemon's exit 5, before the entry) and write nothing, never skip the
 * rows and go on to a commit that would move the checkpoint past them.
 */
#include <check.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/op.h"
#include "daemon/config.h"
#include "map/project.h"
#include "sink/batch.h"
#include "sink/pg.h"

static const char *conninfo(void)
{
    const char *c = getenv("OPLOG2PG_TEST_PG");
    ck_assert_msg(c != NULL, "OPLOG2PG_TEST_PG is not set: run through scripts/with-pg.sh");
    return c;
}

static const char ini[] = "[replication]\n"
                          "include = rep_guard_m.*\n"
                          "\n"
                          "[map rep_guard_m.c]\n"
                          "rest = drop\n"
                          "column.n = integer\n"
                          "child.items = c_items\n"
                          "\n"
                          "[child rep_guard_m.c_items]\n"
                          "column.qty = integer\n"
                          "\n"
                          "[map rep_guard_m.s]\n"
                          "rest = drop\n"
                          "column.n = integer\n";

static int64_t count_rows(const char *sql)
{
    PGconn *c = PQconnectdb(conninfo());
    ck_assert_msg(PQstatus(c) == CONNECTION_OK, "%s", PQerrorMessage(c));
    PGresult *r = PQexec(c, sql);
    int64_t n = PQresultStatus(r) == PGRES_TUPLES_OK ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : -1;
    PQclear(r);
    PQfinish(c);
    return n;
}

static const char *coll_of_next = "c";
static int32_t id_of_next = 1;

/* The op of one entry, kind with document doc (a BSON owned by the caller), prepared with the map. */
static void prepare(op *o, op_entry *e, const config *c, op_kind kind, op_update_form form, const bson_t *doc,
                    uint32_t inc)
{
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->form = form;
    o->pos = (op_pos){.secs = 1800000000u, .inc = inc, .term = -1};
    o->db = "rep_guard_m";
    o->coll = coll_of_next;
    o->id.value_type = BSON_TYPE_INT32;
    o->id.value.v_int32 = id_of_next;
    o->doc = bson_get_data(doc);
    o->doc_len = doc->len;
    op_entry_init(e);
    e->ops = o;
    e->n = 1;
    e->pos = o->pos;
    ck_assert(map_prepare_entry(e, &c->maps));
    ck_assert_ptr_nonnull(o->mapped);
    ck_assert_ptr_null(o->refusal);
}

START_TEST(test_rows_past_the_tables_stop)
{
    config c;
    char err[512];
    ck_assert_msg(config_load_string("guard", ini, &c, err, sizeof err), "%s", err);
    sink_config cfg = {.conninfo = conninfo(), .service = "rep_guard", .maps = &c.maps, .copy_min_rows = 1};
    sink *s = sink_new(&cfg);
    ck_assert_ptr_nonnull(s);
    ck_assert_msg(sink_connect(s) == APPLY_OK, "connect: %s", sink_error(s));

    /* an insert: the document's records, the first of them made to name table 9 of a map of 2 */
    bson_t *doc = BCON_NEW("_id", BCON_INT32(1), "n", BCON_INT32(5), "items", "[", "{", "qty", BCON_INT32(2), "}", "]");
    op o;
    op_entry e;
    prepare(&o, &e, &c, OP_INSERT, OP_FORM_REPLACE, doc, 1);
    map_plan *plan = o.mapped;
    ck_assert_uint_ge(plan->rows.buf.len, 2);
    plan->rows.buf.data[0] = 0;
    plan->rows.buf.data[1] = 9;
    ck_assert_int_eq(sink_apply_mapped(s, &o), APPLY_UNRECORDABLE);
    ck_assert_msg(strstr(sink_error(s), "table 9") != NULL, "%s", sink_error(s));
    o.mapped_free(o.mapped);
    bson_destroy(doc);
    sink_disconnect(s);

    /* an update: an edit of the child table, made to name table 7 */
    ck_assert_msg(sink_connect(s) == APPLY_OK, "connect: %s", sink_error(s));
    bson_t *u = BCON_NEW("$v", BCON_INT32(1), "$set", "{", "items.0.qty", BCON_INT32(3), "n", BCON_INT32(6), "}");
    prepare(&o, &e, &c, OP_UPDATE, OP_FORM_MODIFIER, u, 2);
    plan = o.mapped;
    size_t changed = 0;
    for (size_t i = 0; i < plan->n; i++)
        if (plan->edits[i].table == 1) {
            plan->edits[i].table = 7;
            changed++;
        }
    ck_assert_uint_ge(changed, 1);
    ck_assert_int_eq(sink_apply_mapped(s, &o), APPLY_UNRECORDABLE);
    ck_assert_msg(strstr(sink_error(s), "table 7") != NULL, "%s", sink_error(s));
    o.mapped_free(o.mapped);
    bson_destroy(u);
    sink_disconnect(s);

    /* an insert run sent by COPY, one of its records naming table 5 */
    ck_assert_msg(sink_connect(s) == APPLY_OK, "connect: %s", sink_error(s));
    bson_t *d2 = BCON_NEW("_id", BCON_INT32(2), "n", BCON_INT32(5), "items", "[", "{", "qty", BCON_INT32(2), "}", "]");
    prepare(&o, &e, &c, OP_INSERT, OP_FORM_REPLACE, d2, 3);
    plan = o.mapped;
    ck_assert_uint_ge(plan->rows.count, 2);
    sink_batch *b = sink_batch_new();
    ck_assert_ptr_nonnull(b);
    ck_assert(sink_batch_add_mapped(b, &plan->rows));
    plan->rows.buf.data[0] = 0;
    plan->rows.buf.data[1] = 5;
    ck_assert(sink_batch_add_mapped(b, &plan->rows));
    ck_assert_int_eq(sink_insert_batch(s, "rep_guard_m", "c", b, &o.pos), APPLY_UNRECORDABLE);
    ck_assert_msg(strstr(sink_error(s), "table 5") != NULL, "%s", sink_error(s));
    sink_batch_free(b);
    o.mapped_free(o.mapped);
    bson_destroy(d2);
    sink_disconnect(s);

    /* a long insert run of a map of one table, streamed into its COPY as it fills, its last record naming table 3 */
    ck_assert_msg(sink_connect(s) == APPLY_OK, "connect: %s", sink_error(s));
    coll_of_next = "s";
    b = sink_batch_new();
    ck_assert_ptr_nonnull(b);
    for (int32_t i = 1; i <= 1200; i++) {
        bson_t *d = BCON_NEW("_id", BCON_INT32(i), "n", BCON_INT32(i));
        id_of_next = i;
        prepare(&o, &e, &c, OP_INSERT, OP_FORM_REPLACE, d, 10 + (uint32_t)i);
        plan = o.mapped;
        if (i == 1200) {
            plan->rows.buf.data[0] = 0;
            plan->rows.buf.data[1] = 3;
        }
        ck_assert(sink_batch_add_mapped(b, &plan->rows));
        o.mapped_free(o.mapped);
        bson_destroy(d);
    }
    ck_assert_int_eq(sink_stream_add(s, b, "rep_guard_m", "s", &o.pos), APPLY_UNRECORDABLE);
    ck_assert_msg(strstr(sink_error(s), "table 3") != NULL, "%s", sink_error(s));
    sink_batch_free(b);
    sink_disconnect(s);
    ck_assert_int_le(count_rows("SELECT count(*) FROM rep_guard_m.s"), 0);

    /* nothing of any was committed */
    ck_assert_int_le(count_rows("SELECT count(*) FROM rep_guard_m.c"), 0);
    ck_assert_int_le(count_rows("SELECT count(*) FROM rep_guard_m.c_items"), 0);
    ck_assert_int_eq(count_rows("SELECT count(*) FROM oplog2pg.checkpoint WHERE service = 'rep_guard' AND ts_sec = "
                                "1800000000"),
                     0);
    sink_free(s);
    config_free(&c);
}
END_TEST

Suite *mapped_guards_suite(void); /* called by the generated runner list */

Suite *mapped_guards_suite(void)
{
    Suite *s = suite_create("mapped_guards");
    TCase *tc = tcase_create("mapped_guards");
    tcase_add_test(tc, test_rows_past_the_tables_stop);
    suite_add_tcase(s, tc);
    return s;
}

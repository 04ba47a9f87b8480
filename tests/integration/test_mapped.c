/*
 * test_mapped.c — collections with a typed map (docs/mapping.md) replicated by the daemon: inserts by binary COPY,
 * every update form applied from the oplog entry alone, deletes, child tables, type errors as dead letters.
 *
 * The comparison: at the end every document of the mapped collection is read back from MongoDB and inserted into a
 * second collection with the same map (its own tables). Inserts are projected straight from the document, so the
 * rows the updates produced must equal the rows the final documents produce — in the collection's table and in its
 * child table, field by field (EXCEPT both ways). Each case runs in every rest-of-document mode.
 */
#include <check.h>
#include <signal.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/daemonenv.h"
#include "../lib/proc.h"

/* The map of collection `coll` (and of `coll`_ref, the reference) in database db, with rest mode `rest`. */
static void map_text(char *out, size_t len, const char *db, const char *rest)
{
    size_t off = 0;
    const char *colls[2] = {"orders", "orders_ref"};
    for (int i = 0; i < 2; i++) {
        off += (size_t)snprintf(out + off, len - off,
                                "\n[map %s.%s]\n"
                                "rest = %s\n"
                                "column.total = numeric from amount.total\n"
                                "column.currency = text from amount.currency\n"
                                "column.cust = text from customer.name\n"
                                "column.n = bigint\n"
                                "column.score = double precision\n"
                                "column.placed = timestamptz\n"
                                "column.tags = text[]\n"
                                "column.meta = jsonb\n"
                                "column.flag = boolean on_type_error=null\n"
                                "child.items = %s_items\n"
                                "\n[child %s.%s_items]\n"
                                "parent_key = order_id\n"
                                "rest = %s\n"
                                "column.sku = text\n"
                                "column.qty = integer\n",
                                db, colls[i], rest, colls[i], db, colls[i], rest);
    }
}

static mongoc_collection_t *coll_of(mongoc_client_t *c, const char *db, const char *coll)
{
    return mongoc_client_get_collection(c, db, coll);
}

static void must_update(mongoc_collection_t *col, int id, bson_t *u)
{
    bson_error_t err;
    bson_t *q = BCON_NEW("_id", BCON_INT32(id));
    bson_iter_t it;
    bool modifier = bson_iter_init(&it, u) && bson_iter_next(&it) && bson_iter_key(&it)[0] == '$';
    bool ok = modifier ? mongoc_collection_update_one(col, q, u, NULL, NULL, &err)
                       : mongoc_collection_replace_one(col, q, u, NULL, NULL, &err);
    ck_assert_msg(ok, "update of %d: %s", id, err.message);
    bson_destroy(q);
    bson_destroy(u);
}

static bson_t *order(int i)
{
    return BCON_NEW("_id", BCON_INT32(i), "amount", "{", "total", BCON_DOUBLE(i * 1.25), "currency", BCON_UTF8("EUR"),
                    "}", "customer", "{", "name", BCON_UTF8("Ann"), "city", BCON_UTF8("Oslo"), "}", "n",
                    BCON_INT64((int64_t)i * 1000000000LL), "score", BCON_DOUBLE(0.1 * i), "placed",
                    BCON_DATE_TIME(1700000000000LL + i), "tags", "[", BCON_UTF8("a"), BCON_UTF8("b"), "]", "meta",
                    "{", "x", BCON_INT32(i), "deep", "{", "y", "[", BCON_INT32(1), BCON_INT32(2), "]", "}", "}",
                    "flag", BCON_BOOL(i % 2), "items", "[", "{", "sku", BCON_UTF8("s1"), "qty", BCON_INT32(1), "note",
                    BCON_UTF8("n1"), "}", "{", "sku", BCON_UTF8("s2"), "qty", BCON_INT32(2), "}", "]", "other",
                    BCON_UTF8("kept"));
}

static void insert_orders(mongoc_collection_t *col, int from, int to)
{
    bson_error_t err;
    for (int i = from; i <= to; i++) {
        bson_t *d = order(i);
        ck_assert_msg(mongoc_collection_insert_one(col, d, NULL, NULL, &err), "insert: %s", err.message);
        bson_destroy(d);
    }
}

/* The updates: every form a client writes, on documents 1..20; document 21 deleted. */
static void workload(mongoc_collection_t *col)
{
    bson_error_t err;
    must_update(col, 1, BCON_NEW("$set", "{", "amount.total", BCON_DOUBLE(99.5), "}"));
    must_update(col, 2, BCON_NEW("$set", "{", "amount", "{", "total", BCON_INT32(7), "note", BCON_UTF8("x"), "}", "}"));
    must_update(col, 3, BCON_NEW("$unset", "{", "customer", BCON_UTF8(""), "}"));
    must_update(col, 4, BCON_NEW("$inc", "{", "n", BCON_INT32(5), "}"));
    must_update(col, 5, BCON_NEW("$push", "{", "tags", BCON_UTF8("c"), "}"));
    must_update(col, 6, BCON_NEW("$set", "{", "tags.1", BCON_UTF8("B"), "}"));
    must_update(col, 7, BCON_NEW("$set", "{", "meta.deep.y.1", BCON_INT32(20), "meta.z", BCON_UTF8("new"), "}"));
    must_update(col, 8, BCON_NEW("$set", "{", "items.1.qty", BCON_INT32(42), "}"));
    must_update(col, 9, BCON_NEW("$push", "{", "items", "{", "sku", BCON_UTF8("s3"), "qty", BCON_INT32(3), "}", "}"));
    must_update(col, 10, BCON_NEW("$set", "{", "items", "[", "{", "sku", BCON_UTF8("only"), "}", "]", "}"));
    must_update(col, 11, BCON_NEW("$unset", "{", "items", BCON_UTF8(""), "}"));
    must_update(col, 12, BCON_NEW("$set", "{", "other", BCON_UTF8("changed"), "extra2", BCON_INT32(1), "}"));
    must_update(col, 13, BCON_NEW("$unset", "{", "other", BCON_UTF8(""), "}"));
    must_update(col, 14, BCON_NEW("_id", BCON_INT32(14), "amount", "{", "total", BCON_INT64(12), "}", "items", "[",
                                  "{", "sku", BCON_UTF8("r"), "qty", BCON_INT32(9), "}", "]"));
    must_update(col, 15, BCON_NEW("$set", "{", "items.0.note", BCON_UTF8("changed"), "}"));
    must_update(col, 16, BCON_NEW("$set", "{", "flag", BCON_UTF8("not a bool"), "}"));
    must_update(col, 17, BCON_NEW("$set", "{", "items.3", "{", "sku", BCON_UTF8("far"), "}", "}"));
    must_update(col, 18, BCON_NEW("$unset", "{", "items.0", BCON_UTF8(""), "}"));
    must_update(col, 19, BCON_NEW("$set", "{", "customer.name", BCON_UTF8("Bo"), "customer.city", BCON_UTF8("Rome"), "}"));
    must_update(col, 20, BCON_NEW("$pop", "{", "tags", BCON_INT32(1), "}"));
    must_update(col, 20, BCON_NEW("$set", "{", "meta", BCON_INT32(5), "}"));
    /* the other operators, on the typed columns (tags text[], n bigint, score double precision, total numeric,
     * cust text, placed timestamptz), on the jsonb column meta and on the child table's array items; mongosim logs
     * each as a 7.0 server does (whole arrays for $pull, $pullAll, $addToSet, $pop; $rename as u/i plus d) */
    must_update(col, 1, BCON_NEW("$pull", "{", "tags", BCON_UTF8("a"), "}"));
    must_update(col, 2, BCON_NEW("$pullAll", "{", "tags", "[", BCON_UTF8("a"), BCON_UTF8("b"), "]", "}"));
    must_update(col, 3, BCON_NEW("$addToSet", "{", "tags", "{", "$each", "[", BCON_UTF8("b"), BCON_UTF8("z"), "]", "}",
                                 "}"));
    must_update(col, 4, BCON_NEW("$pop", "{", "tags", BCON_INT32(-1), "}"));
    must_update(col, 5, BCON_NEW("$min", "{", "n", BCON_INT32(7), "}"));
    must_update(col, 6, BCON_NEW("$max", "{", "score", BCON_DOUBLE(100.5), "}"));
    must_update(col, 7, BCON_NEW("$mul", "{", "score", BCON_INT32(2), "amount.total", BCON_INT32(3), "}"));
    must_update(col, 9, BCON_NEW("$rename", "{", "customer.name", BCON_UTF8("customer.nick"), "}"));
    must_update(col, 10, BCON_NEW("$rename", "{", "other", BCON_UTF8("note2"), "}"));
    must_update(col, 11, BCON_NEW("$currentDate", "{", "placed", BCON_BOOL(true), "}"));
    must_update(col, 12, BCON_NEW("$pull", "{", "meta.deep.y", BCON_INT32(1), "}"));
    must_update(col, 13, BCON_NEW("$push", "{", "meta.deep.y", BCON_INT32(3), "}"));
    must_update(col, 15, BCON_NEW("$addToSet", "{", "meta.deep.y", BCON_INT32(3), "}"));
    must_update(col, 17, BCON_NEW("$pop", "{", "meta.deep.y", BCON_INT32(-1), "}"));
    must_update(col, 18, BCON_NEW("$min", "{", "meta.x", BCON_INT32(-1), "}"));
    must_update(col, 19, BCON_NEW("$max", "{", "meta.x", BCON_INT32(1000), "}"));
    must_update(col, 1, BCON_NEW("$mul", "{", "meta.x", BCON_INT32(10), "}"));
    must_update(col, 2, BCON_NEW("$rename", "{", "meta.x", BCON_UTF8("meta.x2"), "}"));
    must_update(col, 3, BCON_NEW("$currentDate", "{", "meta.when", "{", "$type", BCON_UTF8("date"), "}", "}"));
    must_update(col, 4, BCON_NEW("$pull", "{", "items", "{", "sku", BCON_UTF8("s1"), "}", "}"));
    must_update(col, 5, BCON_NEW("$pullAll", "{", "items", "[", "{", "sku", BCON_UTF8("s2"), "qty", BCON_INT32(2), "}",
                                 "]", "}"));
    must_update(col, 6, BCON_NEW("$addToSet", "{", "items", "{", "sku", BCON_UTF8("s9"), "}", "}"));
    must_update(col, 7, BCON_NEW("$pop", "{", "items", BCON_INT32(1), "}"));
    must_update(col, 12, BCON_NEW("$pop", "{", "items", BCON_INT32(-1), "}"));
    must_update(col, 13, BCON_NEW("$min", "{", "items.0.qty", BCON_INT32(0), "}"));
    must_update(col, 1, BCON_NEW("$max", "{", "items.1.qty", BCON_INT32(10), "}"));
    must_update(col, 2, BCON_NEW("$mul", "{", "items.0.qty", BCON_INT32(5), "}"));
    must_update(col, 3, BCON_NEW("$rename", "{", "items", BCON_UTF8("items_old"), "}"));
    must_update(col, 5, BCON_NEW("$currentDate", "{", "items.0.when", BCON_BOOL(true), "}"));
    bson_t *q = BCON_NEW("_id", BCON_INT32(21));
    ck_assert_msg(mongoc_collection_delete_one(col, q, NULL, NULL, &err), "delete: %s", err.message);
    bson_destroy(q);
}

/* Copies every document of db.orders into db.orders_ref (inserts). */
static void copy_to_reference(mongoc_client_t *c, const char *db)
{
    mongoc_collection_t *src = coll_of(c, db, "orders"), *dst = coll_of(c, db, "orders_ref");
    bson_t *all = bson_new();
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(src, all, NULL, NULL);
    const bson_t *doc;
    bson_error_t err;
    int n = 0;
    while (mongoc_cursor_next(cur, &doc)) {
        ck_assert_msg(mongoc_collection_insert_one(dst, doc, NULL, NULL, &err), "insert: %s", err.message);
        n++;
    }
    ck_assert_msg(!mongoc_cursor_error(cur, &err), "reading %s.orders: %s", db, err.message);
    ck_assert_int_eq(n, 20);
    mongoc_cursor_destroy(cur);
    bson_destroy(all);
    mongoc_collection_destroy(src);
    mongoc_collection_destroy(dst);
}

/* Rows of a that b lacks, and the other way round, over the given columns. */
static void expect_same_rows(const char *a, const char *b, const char *cols)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT (SELECT count(*) FROM (SELECT %s FROM %s EXCEPT ALL SELECT %s FROM %s) x) + "
             "(SELECT count(*) FROM (SELECT %s FROM %s EXCEPT ALL SELECT %s FROM %s) y)",
             cols, a, cols, b, cols, b, cols, a);
    int64_t diff = denv_pg_int(sql);
    if (diff != 0) {
        char show[1024];
        snprintf(show, sizeof show,
                 "SELECT string_agg(r::text, E'\\n') FROM (SELECT 'only in %s' AS side, %s FROM %s EXCEPT ALL "
                 "SELECT 'only in %s', %s FROM %s) r",
                 a, cols, a, a, cols, b);
        char out[8192];
        denv_pg_text(show, out, sizeof out);
        fprintf(stderr, "%s\n", out);
    }
    ck_assert_msg(diff == 0, "%s and %s differ in %lld rows", a, b, (long long)diff);
}

static void expect_projection(const char *db, const char *rest);

static void run_mode(const char *name, const char *rest)
{
    denv e;
    char db[64], extra[4096];
    snprintf(db, sizeof db, "rep_%s_m", name);
    map_text(extra, sizeof extra, db, rest);
    denv_start(&e, name, NULL, extra);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));

    mongoc_client_t *c = mongoc_client_new(e.uri);
    mongoc_collection_t *col = coll_of(c, db, "orders");
    insert_orders(col, 1, 21);
    workload(col);
    ck_assert(denv_wait_caught_up(&e, 60));
    copy_to_reference(c, db);
    ck_assert(denv_wait_caught_up(&e, 60));

    expect_projection(db, rest);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
    denv_stop(&e);
    char sql[256];
    snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", db);
    denv_pg_exec(sql);
}

/* The mapped tables of db equal the reference tables, the value of document 16's flag became NULL, and nothing was
 * set aside. */
static void expect_projection(const char *db, const char *rest)
{
    char qa[128], qb[128];
    snprintf(qa, sizeof qa, "%s.orders", db);
    snprintf(qb, sizeof qb, "%s.orders_ref", db);
    char cols[512];
    snprintf(cols, sizeof cols, "_id, total, currency, cust, n, score, placed, tags, meta, flag%s",
             strcmp(rest, "drop") == 0 ? "" : strcmp(rest, "extra") == 0 ? ", extra" : ", doc");
    expect_same_rows(qa, qb, cols);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", qa);
    ck_assert_int_eq(denv_pg_int(sql), 20);
    snprintf(qa, sizeof qa, "%s.orders_items", db);
    snprintf(qb, sizeof qb, "%s.orders_ref_items", db);
    snprintf(cols, sizeof cols, "order_id, position, sku, qty%s",
             strcmp(rest, "drop") == 0 ? "" : strcmp(rest, "extra") == 0 ? ", extra" : ", doc");
    expect_same_rows(qa, qb, cols);
    /* the one value its column could not take became NULL (on_type_error=null), and nothing was set aside */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.orders WHERE _id = '16' AND flag IS NULL", db);
    ck_assert_int_eq(denv_pg_int(sql), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM oplog2pg.dead_letter WHERE db = '%s'", db);
    ck_assert_int_eq(denv_pg_int(sql), 0);
}

START_TEST(test_mapped_rest_doc)
{
    run_mode("mapdoc", "doc");
}
END_TEST

START_TEST(test_mapped_rest_extra)
{
    run_mode("mapextra", "extra");
}
END_TEST

START_TEST(test_mapped_rest_drop)
{
    run_mode("mapdrop", "drop");
}
END_TEST

/* The initial copy projects the documents that exist at start; the updates after it are applied while the daemon is
 * killed (kill -9) twice and restarted; the result is exact. */
START_TEST(test_mapped_copy_and_kill)
{
    denv e;
    char db[64], extra[4096];
    snprintf(db, sizeof db, "rep_mapkill_m");
    map_text(extra, sizeof extra, db, "extra");
    denv_start(&e, "mapkill", NULL, extra);
    mongoc_client_t *c = mongoc_client_new(e.uri);
    mongoc_collection_t *col = coll_of(c, db, "orders");
    insert_orders(col, 1, 21);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.orders_items", db);
    ck_assert_int_eq(denv_pg_int(sql), 42); /* the copy wrote the child rows too */
    proc_signal(&e.daemon, SIGKILL);
    ck_assert(proc_wait(&e.daemon, 30));
    e.daemon.pid = 0;
    workload(col); /* written while the daemon is down */
    denv_daemon_start(&e);
    ck_assert(denv_wait_log(&e, "ready", 60));
    proc_signal(&e.daemon, SIGKILL); /* somewhere in the backlog */
    ck_assert(proc_wait(&e.daemon, 30));
    e.daemon.pid = 0;
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    copy_to_reference(c, db);
    ck_assert(denv_wait_caught_up(&e, 60));
    expect_projection(db, "extra");
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
    denv_stop(&e);
    snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", db);
    denv_pg_exec(sql);
}
END_TEST

/* A typed map of one table streams its COPY like the jsonb shape, and past batch_bytes lets go of the records it has
 * sent. One row of the backlog is already in the table, so that COPY meets its _id with most of its records gone: the
 * daemon goes back to the last commit, keeps the records this time, re-sends them as upserts, and ends exact. */
START_TEST(test_mapped_let_go_then_rewind)
{
    denv e;
    const char *db = "rep_mapletgo_m";
    char extra[512], sql[256];
    snprintf(extra, sizeof extra,
             "batch_bytes = 100kB\n\n[map %s.c]\nrest = drop\ncolumn.v = bigint\ncolumn.s = text\n", db);
    denv_start(&e, "mapletgo", NULL, extra);
    denv_insert_range(&e, db, "c", 1, 1);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60)); /* the table, made by oplog2pg */
    proc_signal(&e.daemon, SIGTERM);
    ck_assert(proc_wait(&e.daemon, 30));
    e.daemon.pid = 0;
    snprintf(sql, sizeof sql, "INSERT INTO %s.c (_id, v, s) VALUES ('4000', -1, 'old')", db);
    denv_pg_exec(sql);
    denv_insert_range(&e, db, "c", 2, 6000); /* written while the daemon is down: one backlog */
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_msg(denv_file_contains(e.log, "going back to the last commit"), "no rewind: the test proves nothing");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.c", db);
    ck_assert_int_eq(denv_pg_int(sql), 6000);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.c WHERE v = 10 * _id::bigint AND s = 'text'", db);
    ck_assert_int_eq(denv_pg_int(sql), 6000);
    denv_stop(&e);
    snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", db);
    denv_pg_exec(sql);
}
END_TEST

/* A value its column cannot take (on_type_error = dead_letter): the op is set aside with the column, the value and
 * the reason; the rest goes on. */
START_TEST(test_mapped_type_error_dead_letter)
{
    denv e;
    char extra[512];
    snprintf(extra, sizeof extra, "\n[map rep_maperr_m.c]\nrest = drop\ncolumn.n = integer\n");
    denv_start(&e, "maperr", NULL, extra);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    mongoc_client_t *c = mongoc_client_new(e.uri);
    mongoc_collection_t *col = coll_of(c, "rep_maperr_m", "c");
    bson_error_t err;
    bson_t *d1 = BCON_NEW("_id", BCON_INT32(1), "n", BCON_INT32(5));
    bson_t *d2 = BCON_NEW("_id", BCON_INT32(2), "n", BCON_DOUBLE(2.5));
    bson_t *d3 = BCON_NEW("_id", BCON_INT32(3), "n", BCON_INT64(7));
    ck_assert(mongoc_collection_insert_one(col, d1, NULL, NULL, &err));
    ck_assert(mongoc_collection_insert_one(col, d2, NULL, NULL, &err));
    ck_assert(mongoc_collection_insert_one(col, d3, NULL, NULL, &err));
    must_update(col, 1, BCON_NEW("$set", "{", "n", BCON_UTF8("five"), "}"));
    bson_destroy(d1);
    bson_destroy(d2);
    bson_destroy(d3);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_maperr_m.c"), 2);
    ck_assert_int_eq(denv_pg_int("SELECT n FROM rep_maperr_m.c WHERE _id = '1'"), 5);
    ck_assert_int_eq(denv_pg_int("SELECT n FROM rep_maperr_m.c WHERE _id = '3'"), 7);
    char msg[1024];
    denv_pg_text("SELECT string_agg(op || ' ' || error, ' | ' ORDER BY ts_inc) FROM oplog2pg.dead_letter "
                 "WHERE db = 'rep_maperr_m'",
                 msg, sizeof msg);
    ck_assert_msg(strstr(msg, "i column \"n\" (integer)") != NULL && strstr(msg, "2.5") != NULL, "%s", msg);
    ck_assert_msg(strstr(msg, "u column \"n\" (integer)") != NULL && strstr(msg, "five") != NULL, "%s", msg);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
    denv_stop(&e);
    denv_pg_exec("DROP SCHEMA rep_maperr_m CASCADE");
}
END_TEST

Suite *mapped_suite(void); /* called by the generated runner list */

Suite *mapped_suite(void)
{
    Suite *s = suite_create("mapped");
    TCase *tc = tcase_create("mapped");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_mapped_rest_doc);
    tcase_add_test(tc, test_mapped_rest_extra);
    tcase_add_test(tc, test_mapped_rest_drop);
    tcase_add_test(tc, test_mapped_copy_and_kill);
    tcase_add_test(tc, test_mapped_let_go_then_rewind);
    tcase_add_test(tc, test_mapped_type_error_dead_letter);
    suite_add_tcase(s, tc);
    return s;
}

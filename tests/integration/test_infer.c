/*
 * test_infer.c — `oplog2pg infer-map` against mongosim (or MONGO_URI) and PostgreSQL: varied documents are inserted,
 * the command's output is appended to the configuration as it is, and `run` replicates the collection into the
 * inferred tables, by the initial copy and then from the oplog (inserts, every update form, a delete).
 *
 * The comparison is the one of test_mapped.c: at the end every document is read back from MongoDB and inserted into
 * a reference collection of another database whose map is the inferred one with the database renamed. Inserts are
 * projected straight from the document, so the rows the copy and the updates produced must equal the rows the final
 * documents produce, in the collection's table and in its child table, every column (EXCEPT ALL both ways). The
 * command's errors and its choice of names (a child table that would meet another collection's table, a collection
 * the file maps already) are checked too.
 */
#include <check.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/daemonenv.h"
#include "../lib/proc.h"
#include "../lib/skip.h"
#include "../lib/textfile.h"

#define DB_A "rep_infer_a"
#define DB_B "rep_infer_b"

/* Runs `oplog2pg -c INI ARGS...` with stdout and stderr in files of the environment's folder; returns its exit code
 * and the two outputs (malloc'd). */
static int run_infer(const denv *e, const char *args, char **out, char **err)
{
    char cmd[2048], out_path[300], err_path[300], bin[256];
    snprintf(bin, sizeof bin, "%s/oplog2pg", proc_build_dir());
    snprintf(out_path, sizeof out_path, "%s/infer.out", e->dir);
    snprintf(err_path, sizeof err_path, "%s/infer.err", e->dir);
    snprintf(cmd, sizeof cmd, "exec '%s' -c '%s' %s >'%s' 2>'%s'", bin, e->ini, args, out_path, err_path);
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    proc_handle p;
    char perr[256];
    ck_assert_msg(proc_start(argv, NULL, NULL, &p, perr, sizeof perr), "%s", perr);
    ck_assert_msg(proc_wait(&p, 300), "infer-map did not finish");
    *out = textfile_read(out_path);
    *err = textfile_read(err_path);
    ck_assert_ptr_nonnull(*out);
    ck_assert_ptr_nonnull(*err);
    return proc_exit_code(&p);
}

static void append_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "a");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "\n%s", text);
    ck_assert_int_eq(fclose(f), 0);
}

/* text with every "from" replaced by "to" (malloc'd). */
static char *replace_all(const char *text, const char *from, const char *to)
{
    size_t fl = strlen(from), tl = strlen(to), n = 0;
    for (const char *p = strstr(text, from); p != NULL; p = strstr(p + fl, from))
        n++;
    char *out = malloc(strlen(text) + n * (tl > fl ? tl - fl : 0) + 1), *o = out;
    ck_assert_ptr_nonnull(out);
    for (const char *p = text;;) {
        const char *q = strstr(p, from);
        if (q == NULL) {
            strcpy(o, p);
            break;
        }
        memcpy(o, p, (size_t)(q - p));
        o += q - p;
        memcpy(o, to, tl);
        o += tl;
        p = q + fl;
    }
    return out;
}

static void insert_json(mongoc_collection_t *col, const char *json)
{
    bson_error_t err;
    bson_t *d = bson_new_from_json((const uint8_t *)json, -1, &err);
    ck_assert_msg(d != NULL, "bad test JSON %s: %s", json, err.message);
    ck_assert_msg(mongoc_collection_insert_one(col, d, NULL, NULL, &err), "insert: %s", err.message);
    bson_destroy(d);
}

/* Document i: every kind of path the inference has a rule for, with types that vary from document to document. */
static void insert_order(mongoc_collection_t *col, int i)
{
    char n[64], x[64], d[80], ref[96], mixed[64], opt[32], items[512], doc[2048];
    if (i % 3 == 0)
        snprintf(n, sizeof n, "{\"$numberLong\": \"%lld\"}", (long long)i * 10000000000LL);
    else
        snprintf(n, sizeof n, "%d", i);
    if (i % 2 == 0)
        snprintf(x, sizeof x, "%d.25", i);
    else
        snprintf(x, sizeof x, "%d", i);
    if (i % 4 == 0)
        snprintf(d, sizeof d, "{\"$numberDecimal\": \"%d.10\"}", i);
    else
        snprintf(d, sizeof d, "%d", i);
    if (i % 2 == 0)
        snprintf(ref, sizeof ref, "{\"$oid\": \"65a1f0aaaaaaaaaaaaaa%04d\"}", i);
    else
        snprintf(ref, sizeof ref, "\"ref-%d\"", i);
    if (i % 2 == 0)
        snprintf(mixed, sizeof mixed, "\"m%d\"", i);
    else
        snprintf(mixed, sizeof mixed, "%d", i);
    snprintf(opt, sizeof opt, "%s", i % 5 == 0 ? ", \"opt\": null" : i % 5 == 1 ? ", \"opt\": \"o\"" : "");
    if (i % 7 == 0)
        snprintf(items, sizeof items, "[]");
    else
        snprintf(items, sizeof items,
                 "[{\"sku\": \"s%d\", \"qty\": %d, \"dim\": {\"w\": 1.5}}, {\"sku\": \"t%d\", \"qty\": "
                 "{\"$numberLong\": \"%d\"}, \"note\": \"n\"}]",
                 i, i, i, i * 2);
    snprintf(doc, sizeof doc,
             "{\"_id\": %d, \"n\": %s, \"x\": %s, \"d\": %s, \"ref\": %s, \"mixed\": %s%s, "
             "\"amount\": {\"total\": %d.5, \"cur\": \"EUR\", \"deep\": {\"a\": %d}}, "
             "\"tags\": [\"a\", \"b%d\"], \"nums\": [1, {\"$numberLong\": \"%d\"}], \"items\": %s, "
             "\"when\": {\"$date\": \"2024-01-%02dT10:00:00.%03dZ\"}, \"flag\": %s, "
             "\"bin\": {\"$binary\": {\"base64\": \"AAECAwQFBgcICQoLDA0ODw==\", \"subType\": \"04\"}}}",
             i, n, x, d, ref, mixed, opt, i, i, i, i, items, 1 + i % 28, i, i % 2 ? "true" : "false");
    insert_json(col, doc);
}

static void must_update(mongoc_collection_t *col, int id, const char *json)
{
    bson_error_t err;
    bson_t *u = bson_new_from_json((const uint8_t *)json, -1, &err);
    ck_assert_msg(u != NULL, "bad test JSON %s: %s", json, err.message);
    bson_t *q = BCON_NEW("_id", BCON_INT32(id));
    bool op = strncmp(json, "{\"$", 3) == 0;
    bool ok = op ? mongoc_collection_update_one(col, q, u, NULL, NULL, &err)
                 : mongoc_collection_replace_one(col, q, u, NULL, NULL, &err);
    ck_assert_msg(ok, "update of %d: %s", id, err.message);
    bson_destroy(q);
    bson_destroy(u);
}

/* Changes after the copy, each with values of the types the map chose. */
static void workload(mongoc_collection_t *col)
{
    for (int i = 41; i <= 50; i++)
        insert_order(col, i);
    must_update(col, 1, "{\"$set\": {\"n\": {\"$numberLong\": \"99000000000\"}, \"x\": 0.5}}");
    must_update(col, 2, "{\"$set\": {\"amount.total\": 7, \"amount.cur\": \"USD\"}}");
    must_update(col, 3, "{\"$push\": {\"tags\": \"c\", \"nums\": 7}}");
    must_update(col, 4, "{\"$set\": {\"items.0.qty\": 42, \"items.1.note\": \"changed\"}}");
    must_update(col, 5, "{\"$push\": {\"items\": {\"sku\": \"new\", \"qty\": 3}}}");
    must_update(col, 6, "{\"$unset\": {\"ref\": \"\", \"amount\": \"\"}}");
    must_update(col, 8, "{\"$set\": {\"mixed\": {\"any\": [1, \"thing\"]}, \"d\": {\"$numberDecimal\": \"1E+3\"}}}");
    must_update(col, 9, "{\"$set\": {\"items\": [{\"sku\": \"only\"}]}}");
    must_update(col, 10, "{\"$unset\": {\"items\": \"\"}}");
    must_update(col, 11, "{\"$set\": {\"when\": {\"$date\": \"1969-12-31T23:59:59.999Z\"}, \"flag\": false}}");
    must_update(col, 12, "{\"$set\": {\"amount.deep.a\": 100, \"extra\": \"kept in doc\"}}");
    must_update(col, 13, "{\"_id\": 13, \"n\": 5, \"items\": [{\"sku\": \"r\", \"qty\": 9}], \"tags\": []}");
    must_update(col, 14, "{\"$set\": {\"ref\": {\"$oid\": \"65a1f0bbbbbbbbbbbbbbbbbb\"}, \"opt\": \"set\"}}");
    must_update(col, 15, "{\"$unset\": {\"items.0\": \"\"}}");
    bson_error_t err;
    bson_t *q = BCON_NEW("_id", BCON_INT32(16));
    ck_assert_msg(mongoc_collection_delete_one(col, q, NULL, NULL, &err), "delete: %s", err.message);
    bson_destroy(q);
}

/* Every document of DB_A.orders inserted into DB_B.orders; returns their number. */
static int copy_to_reference(mongoc_client_t *c)
{
    mongoc_collection_t *src = mongoc_client_get_collection(c, DB_A, "orders");
    mongoc_collection_t *dst = mongoc_client_get_collection(c, DB_B, "orders");
    bson_t *all = bson_new();
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(src, all, NULL, NULL);
    const bson_t *doc;
    bson_error_t err;
    int n = 0;
    while (mongoc_cursor_next(cur, &doc)) {
        ck_assert_msg(mongoc_collection_insert_one(dst, doc, NULL, NULL, &err), "insert: %s", err.message);
        n++;
    }
    ck_assert_msg(!mongoc_cursor_error(cur, &err), "reading %s.orders: %s", DB_A, err.message);
    mongoc_cursor_destroy(cur);
    bson_destroy(all);
    mongoc_collection_destroy(src);
    mongoc_collection_destroy(dst);
    return n;
}

/* Tables a and b hold the same rows, every column compared (EXCEPT ALL both ways). */
static void expect_same_rows(const char *a, const char *b)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT (SELECT count(*) FROM (SELECT * FROM %s EXCEPT ALL SELECT * FROM %s) x) + "
             "(SELECT count(*) FROM (SELECT * FROM %s EXCEPT ALL SELECT * FROM %s) y)",
             a, b, b, a);
    int64_t diff = denv_pg_int(sql);
    if (diff != 0) {
        char show[1024], out[8192];
        snprintf(show, sizeof show,
                 "SELECT string_agg(r::text, E'\\n') FROM ((SELECT 'only in %s' AS side, * FROM %s EXCEPT ALL "
                 "SELECT 'only in %s', * FROM %s) UNION ALL (SELECT 'only in %s', * FROM %s EXCEPT ALL "
                 "SELECT 'only in %s', * FROM %s)) r",
                 a, a, a, b, b, b, b, a);
        denv_pg_text(show, out, sizeof out);
        fprintf(stderr, "%s\n", out);
    }
    ck_assert_msg(diff == 0, "%s and %s differ in %lld rows", a, b, (long long)diff);
}

static void expect_in(const char *text, const char *needle)
{
    ck_assert_msg(strstr(text, needle) != NULL, "the output lacks \"%s\":\n%s", needle, text);
}

START_TEST(test_infer_map_then_run)
{
    denv e;
    denv_start(&e, "infer", NULL, NULL);
    mongoc_client_t *c = mongoc_client_new(e.uri);
    mongoc_collection_t *col = mongoc_client_get_collection(c, DB_A, "orders");
    for (int i = 1; i <= 40; i++)
        insert_order(col, i);
    /* a collection whose table has the name the child table of orders.items would have */
    mongoc_collection_t *other = mongoc_client_get_collection(c, DB_A, "orders_items");
    insert_json(other, "{\"_id\": {\"$oid\": \"65a1f0aaaaaaaaaaaaaaaaaa\"}, \"z\": true}");
    insert_json(other, "{\"_id\": {\"$oid\": \"65a1f0aaaaaaaaaaaaaaaaab\"}, \"z\": false, \"w\": \"x\"}");

    char *out, *err;
    int code = run_infer(&e, "infer-map --sample 1000 " DB_A ".orders " DB_A ".orders_items", &out, &err);
    ck_assert_msg(code == 0, "infer-map exited %d: %s", code, err);
    expect_in(out, "[map " DB_A ".orders]\n");
    expect_in(out, "\ncolumn._id = integer from _id\n");
    expect_in(out, "\ncolumn.n = bigint from n\n");
    expect_in(out, "\ncolumn.x = double precision from x\n");
    expect_in(out, "\ncolumn.d = numeric from d\n");
    expect_in(out, "\ncolumn.ref = text from ref\n");
    expect_in(out, "\ncolumn.mixed = jsonb from mixed\n");
    expect_in(out, "\ncolumn.opt = text from opt\n");
    expect_in(out, "\ncolumn.amount_total = double precision from amount.total\n");
    expect_in(out, "\ncolumn.tags = text[] from tags\n");
    expect_in(out, "\ncolumn.nums = bigint[] from nums\n");
    expect_in(out, "\ncolumn.when = timestamptz from when\n");
    expect_in(out, "\ncolumn.flag = boolean from flag\n");
    expect_in(out, "\ncolumn.bin = uuid from bin\n");
    expect_in(out, "; n: 100% present; int32 68%, int64 33%\n");
    expect_in(out, "; opt: 40% present; string 50%, null 50%\n");
    /* the child table avoids the table of the collection orders_items */
    expect_in(out, "\nchild.items = " DB_A ".orders_items_2\n");
    expect_in(out, "\n[child " DB_A ".orders_items_2]\n");
    expect_in(out, "\ncolumn.qty = bigint from qty\n");
    expect_in(out, "\ncolumn.dim_w = double precision from dim.w\n");
    expect_in(out, "[map " DB_A ".orders_items]\n");
    expect_in(out, "\ncolumn._id = text from _id\n");
    /* amount.deep.a has three parts: beyond the default depth, it stays in the doc column */
    ck_assert_msg(strstr(out, "column.amount_deep") == NULL, "%s", out);
    expect_in(out, "\nrest = doc\n");

    /* the output as it is, and the reference: the same map for the database DB_B */
    char *ref = replace_all(out, DB_A ".", DB_B ".");
    append_file(e.ini, out);
    append_file(e.ini, ref);
    free(ref);
    free(out);
    free(err);

    denv_daemon_start(&e); /* the initial copy of the 40 documents, into the inferred tables */
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM " DB_A ".orders"), 40);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM " DB_A ".orders_items_2"), 2 * (40 - 5));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM " DB_A ".orders_items WHERE z"), 1);
    ck_assert_int_eq(denv_pg_int("SELECT n FROM " DB_A ".orders WHERE _id = 3"), 30000000000LL);

    workload(col);
    ck_assert(denv_wait_caught_up(&e, 60));
    int n = copy_to_reference(c);
    ck_assert_int_eq(n, 49);
    ck_assert(denv_wait_caught_up(&e, 60));

    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM " DB_A ".orders"), 49);
    expect_same_rows(DB_A ".orders", DB_B ".orders");
    expect_same_rows(DB_A ".orders_items_2", DB_B ".orders_items_2");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM " DB_A ".orders_items_2 WHERE parent_key = 5"), 3);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM " DB_A ".orders WHERE _id = 6 AND ref IS NULL AND "
                                 "amount_total IS NULL AND NOT (doc ? 'amount')"),
                     1);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE db LIKE 'rep_infer_%'"), 0);

    mongoc_collection_destroy(other);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
    denv_stop(&e);
    denv_pg_exec("DROP SCHEMA IF EXISTS " DB_A " CASCADE; DROP SCHEMA IF EXISTS " DB_B " CASCADE");
}
END_TEST

/* Without NS: every included collection the file does not map; errors as one line with their exit codes. */
START_TEST(test_infer_map_all_and_errors)
{
    denv e;
    denv_start(&e, "inferall", NULL, "\n[map rep_inferall_x.mapped]\ncolumn.v = integer\n");
    mongoc_client_t *c = mongoc_client_new(e.uri);
    mongoc_collection_t *a = mongoc_client_get_collection(c, "rep_inferall_x", "a");
    mongoc_collection_t *m = mongoc_client_get_collection(c, "rep_inferall_x", "mapped");
    mongoc_collection_t *o = mongoc_client_get_collection(c, "other_inferall", "c");
    insert_json(a, "{\"_id\": 1, \"s\": \"x\"}");
    insert_json(m, "{\"_id\": 1, \"v\": 1}");
    insert_json(o, "{\"_id\": 1}");

    char *out, *err;
    int code = run_infer(&e, "infer-map", &out, &err);
    ck_assert_msg(code == 0, "infer-map exited %d: %s", code, err);
    expect_in(out, "[map rep_inferall_x.a]\n");
    expect_in(out, "\ncolumn.s = text from s\n");
    expect_in(out, "; rep_inferall_x.mapped: mapped in the file already\n");
    ck_assert_msg(strstr(out, "[map rep_inferall_x.mapped]") == NULL, "%s", out);
    ck_assert_msg(strstr(out, "other_inferall") == NULL, "an excluded database in the output:\n%s", out);
    free(out);
    free(err);

    /* the errors: each one line on stderr, nothing on stdout */
    struct {
        const char *args;
        int code;
        const char *needle;
    } cases[] = {
        {"infer-map other_inferall.c", 2, "leave it out"},
        {"infer-map rep_inferall_x.mapped", 2, "maps it already"},
        {"infer-map rep_inferall_x.nothing", 2, "no such collection"},
        {"infer-map admin.system.users", 2, "never replicates"},
        {"infer-map nodot", 2, "not a namespace"},
        {"infer-map --sample 0", 2, "--sample"},
        {"infer-map --depth 33", 2, "--depth"},
        {"map --sample 5", 2, "go with infer-map"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        code = run_infer(&e, cases[i].args, &out, &err);
        ck_assert_msg(code == cases[i].code, "%s: exit %d, want %d: %s", cases[i].args, code, cases[i].code, err);
        ck_assert_msg(strstr(err, cases[i].needle) != NULL, "%s: \"%s\" lacks \"%s\"", cases[i].args, err,
                      cases[i].needle);
        ck_assert_msg(out[0] == '\0', "%s: printed %s", cases[i].args, out);
        const char *nl = strchr(err, '\n');
        ck_assert_msg(nl != NULL && nl[1] == '\0', "%s: not one line: %s", cases[i].args, err);
        free(out);
        free(err);
    }

    /* MongoDB out of reach: exit 1 */
    char ini2[sizeof e.ini], saved[sizeof e.ini];
    snprintf(ini2, sizeof ini2, "%s/unreachable.ini", e.dir);
    FILE *f = fopen(ini2, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "[mongodb]\nuri = mongodb://127.0.0.1:1/?replicaSet=rs0&serverSelectionTimeoutMS=300\n"
               "[replication]\ninclude = rep_inferall_x.*\n");
    fclose(f);
    snprintf(saved, sizeof saved, "%s", e.ini);
    snprintf(e.ini, sizeof e.ini, "%s", ini2);
    code = run_infer(&e, "infer-map", &out, &err);
    snprintf(e.ini, sizeof e.ini, "%s", saved);
    ck_assert_msg(code == 1, "unreachable: exit %d: %s", code, err);
    ck_assert_msg(strstr(err, "cannot reach") != NULL, "%s", err);
    ck_assert_msg(out[0] == '\0', "%s", out);
    free(out);
    free(err);

    mongoc_collection_destroy(a);
    mongoc_collection_destroy(m);
    mongoc_collection_destroy(o);
    mongoc_client_destroy(c);
    denv_stop(&e);
}
END_TEST

/* A time-series collection: infer-map lists it by its own name, samples its measurements (the buckets of
 * system.buckets.weather unpacked, compressed ones included: --oplog-format 8.0 writes them so from the start), and
 * writes the map of its table of measurements: no column for the time field, no child table, the fixed columns'
 * names left to them. The output, appended to the file, loads (`oplog2pg map` prints it), and the daemon writes the
 * measurements into the typed columns it declares. */
START_TEST(test_infer_map_timeseries)
{
    const char *sim_args[] = {"--oplog-format", "8.0", "--timeseries-bucket-max-count", "4", NULL};
    denv e;
    denv_start(&e, "infers", denv_using_sim() ? sim_args : NULL, NULL);
    denv_command(&e, "rep_infers_a",
                 BCON_NEW("create", "weather", "timeseries", "{", "timeField", "ts", "metaField", "sensor", "}"));
    mongoc_client_t *c = mongoc_client_new(e.uri);
    mongoc_collection_t *col = mongoc_client_get_collection(c, "rep_infers_a", "weather");
    for (int st = 1; st <= 2; st++)
        for (int i = 0; i < 5; i++) {
            char doc[512];
            snprintf(doc, sizeof doc,
                     "{\"ts\": {\"$date\": \"2026-11-29T10:%02d:00Z\"}, \"sensor\": {\"site\": \"A\", \"id\": %d}, "
                     "\"temp\": %d.5, \"hum\": %d, \"time\": \"t%d\", \"readings\": [{\"a\": %d}]}",
                     i, st, 20 + i, 40 + i, i, i);
            insert_json(col, doc);
        }
    mongoc_collection_t *plain = mongoc_client_get_collection(c, "rep_infers_a", "plain");
    insert_json(plain, "{\"_id\": 1, \"s\": \"x\"}");
    /* a time-series collection with a bucket that cannot be unpacked (written straight into its buckets): it is left
     * out of the sample, with a comment */
    denv_command(&e, "rep_infers_a", BCON_NEW("create", "broken", "timeseries", "{", "timeField", "ts", "}"));
    mongoc_collection_t *broken = mongoc_client_get_collection(c, "rep_infers_a", "broken");
    insert_json(broken, "{\"ts\": {\"$date\": \"2026-11-29T10:00:00Z\"}, \"v\": 1}");
    mongoc_collection_t *raw = mongoc_client_get_collection(c, "rep_infers_a", "system.buckets.broken");
    insert_json(
        raw,
        "{\"_id\": {\"$oid\": \"65a1f0aaaaaaaaaaaaaaaaaa\"}, \"control\": {\"version\": 1}, \"data\": {\"ts\": 5}}");

    char *out, *err;
    int code = run_infer(&e, "infer-map --sample 6", &out, &err);
    ck_assert_msg(code == 0, "infer-map exited %d: %s", code, err);
    expect_in(out, "[map rep_infers_a.weather]\n; a time-series collection (timeField ts, metaField sensor): a row "
                   "per measurement;");
    expect_in(out, "; rep_infers_a.weather: a time-series collection: 6 measurements unpacked from the first ");
    expect_in(out, " buckets of rep_infers_a.system.buckets.weather\n");
    expect_in(out, "; 6 measurements: per path");
    expect_in(out, "; ts: 100% present; date 100%\n;   the time field (timeField): the table's fixed column time");
    expect_in(out, "\ncolumn._id = text from _id\n");
    expect_in(out, "\ncolumn.sensor_site = text from sensor.site\n");
    expect_in(out, "\ncolumn.sensor_id = integer from sensor.id\n");
    expect_in(out, "\ncolumn.temp = double precision from temp\n");
    expect_in(out, "\ncolumn.hum = integer from hum\n");
    expect_in(out, "\ncolumn.time_2 = text from time\n");
    expect_in(out, "\ncolumn.readings = jsonb from readings\n");
    expect_in(out, "[map rep_infers_a.plain]\n");
    expect_in(out,
              "; rep_infers_a.broken: a time-series collection: 1 measurement unpacked from the first 2 buckets of "
              "rep_infers_a.system.buckets.broken\n; rep_infers_a.broken: 1 bucket could not be unpacked and is not "
              "in the sample (");
    expect_in(out, "[map rep_infers_a.broken]\n");
    expect_in(out, "\ncolumn.v = integer from v\n");
    ck_assert_msg(strstr(out, "from ts\n") == NULL, "%s", out);
    ck_assert_msg(strstr(out, "child.") == NULL, "%s", out);
    ck_assert_msg(strstr(out, "[map rep_infers_a.system.buckets") == NULL, "%s", out);

    /* the output loads as it is */
    append_file(e.ini, out);
    const char *args[] = {"-c", e.ini, "map", NULL};
    char map_out[300];
    snprintf(map_out, sizeof map_out, "%s/map.out", e.dir);
    ck_assert_int_eq(denv_run_command(&e, args, map_out), 0);
    ck_assert(denv_file_contains(map_out, "rep_infers_a.weather"));
    ck_assert(denv_file_contains(map_out, "time_2"));

    /* the daemon takes the inferred maps: the measurements land in their typed columns */
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_infers_a.weather"), 10);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_infers_a.weather WHERE sensor_site = 'A' AND sensor_id "
                                 "IN (1, 2) AND temp >= 20.5 AND hum >= 40 AND time_2 LIKE 't_' AND _id IS NOT NULL "
                                 "AND jsonb_typeof(readings) = 'array' AND \"time\" IS NOT NULL"),
                     10);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM information_schema.columns WHERE table_schema = "
                                 "'rep_infers_a' AND table_name = 'weather' AND column_name IN ('bucket', 'pos', "
                                 "'time', '_id', 'sensor_id', 'sensor_site', 'temp', 'hum', 'time_2', 'readings', "
                                 "'doc')"),
                     11);
    free(out);
    free(err);

    /* named on the command line by its own name; its buckets collection is not a collection to infer */
    code = run_infer(&e, "infer-map rep_infers_a.system.buckets.weather", &out, &err);
    ck_assert_msg(code == 2 && strstr(err, "never replicates") != NULL, "exit %d: %s", code, err);
    free(out);
    free(err);

    mongoc_collection_destroy(plain);
    mongoc_collection_destroy(broken);
    mongoc_collection_destroy(raw);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
    denv_stop(&e);
}
END_TEST

/* A viewless time-series collection (mongosim --timeseries-viewless: listed as type "timeseries" with a UUID, no
 * system.buckets.NAME): infer-map lists it by its name, samples its measurements from its buckets read with rawData,
 * and the map it writes is taken by the daemon, whose copy reads the buckets the same way. */
START_TEST(test_infer_map_viewless)
{
    const char *sim_args[] = {
        "--oplog-format", "8.0", "--timeseries-viewless", "--timeseries-bucket-max-count", "4", NULL};
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim's --timeseries-viewless");
    denv e;
    denv_start(&e, "inferv", sim_args, NULL);
    denv_command(&e, "rep_inferv_a",
                 BCON_NEW("create", "weather", "timeseries", "{", "timeField", "ts", "metaField", "sensor", "}"));
    mongoc_client_t *c = mongoc_client_new(e.uri);
    mongoc_collection_t *col = mongoc_client_get_collection(c, "rep_inferv_a", "weather");
    for (int i = 0; i < 10; i++) {
        char doc[300];
        snprintf(doc, sizeof doc,
                 "{\"ts\": {\"$date\": \"2026-11-29T10:%02d:00Z\"}, \"sensor\": {\"site\": \"A\", \"id\": %d}, "
                 "\"temp\": %d.5}",
                 i, i % 2, 20 + i);
        insert_json(col, doc);
    }
    char *out, *err;
    int code = run_infer(&e, "infer-map --sample 6", &out, &err);
    ck_assert_msg(code == 0, "infer-map exited %d: %s", code, err);
    expect_in(out, "[map rep_inferv_a.weather]\n; a time-series collection (timeField ts, metaField sensor)");
    expect_in(out, "; rep_inferv_a.weather: a time-series collection: 6 measurements unpacked from the first ");
    expect_in(out, " buckets of rep_inferv_a.weather (viewless, read with rawData)\n");
    expect_in(out, "\ncolumn.sensor_site = text from sensor.site\n");
    expect_in(out, "\ncolumn.sensor_id = integer from sensor.id\n");
    expect_in(out, "\ncolumn.temp = double precision from temp\n");
    ck_assert_msg(strstr(out, "from ts\n") == NULL, "%s", out);
    append_file(e.ini, out);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_inferv_a.weather WHERE sensor_site = 'A' AND sensor_id IN "
                                 "(0, 1) AND temp >= 20.5 AND \"time\" IS NOT NULL"),
                     10);
    free(out);
    free(err);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
    denv_stop(&e);
}
END_TEST

Suite *infer_suite(void); /* called by the generated runner list */

Suite *infer_suite(void)
{
    Suite *s = suite_create("infer");
    TCase *tc = tcase_create("infer");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_infer_map_then_run);
    tcase_add_test(tc, test_infer_map_all_and_errors);
    tcase_add_test(tc, test_infer_map_timeseries);
    tcase_add_test(tc, test_infer_map_viewless);
    suite_add_tcase(s, tc);
    return s;
}

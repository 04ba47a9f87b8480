/*
 * test_mongosim_tswrite.c — the time-series bucket writes mongosim logs (tests/mongosim/tsbucket.c), driven through
 * libmongoc against an in-process mongosim started with the options under test (--oplog-format,
 * --timeseries-bucket-max-count), read back from local.oplog.rs: measurements grouped by meta value into open
 * buckets, a bucket closed at the count limit, at the span and on a time before it; one write per bucket for one
 * insert command; the $v:2 append diffs of 5.0 against a real 5.0 entry (tests/vectors via /work/shared: the
 * expected diff is written out here from the real entry).
 */
#include <check.h>
#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../mongosim/server.h"
#include "map/bsoncolumn.h"
#include "simtest.h"

Suite *mongosim_tswrite_suite(void);

static sim_server *srv;
static pthread_t thr;
static mongoc_client_t *client;
static bool start_viewless; /* the next start() runs with --timeseries-viewless */

static void *run(void *arg)
{
    sim_server_run(arg);
    return NULL;
}

static void start(sim_oplog_format fmt, int32_t max_count)
{
    sim_options opts;
    sim_options_init(&opts);
    opts.format = fmt;
    opts.ts_bucket_max_count = max_count;
    opts.ts_viewless = start_viewless;
    bson_error_t err;
    srv = sim_server_new(&opts, NULL, &err);
    ck_assert_msg(srv, "sim_server_new: %s", err.message);
    ck_assert_int_eq(pthread_create(&thr, NULL, run, srv), 0);
    /* once per process: libmongoc's handshake data freed by mongoc_cleanup is used again by a later mongoc_init
     * (a use after free AddressSanitizer reports), so a test that starts mongosim twice keeps libmongoc up */
    static bool inited;
    if (!inited)
        mongoc_init();
    inited = true;
    char uri[128];
    snprintf(uri, sizeof uri, "mongodb://127.0.0.1:%d/?directConnection=true&serverSelectionTimeoutMS=5000",
             sim_server_port(srv));
    client = mongoc_client_new(uri);
    ck_assert_ptr_nonnull(client);
}

static void stop(void)
{
    mongoc_client_destroy(client);
    client = NULL;
    sim_server_stop(srv);
    pthread_join(thr, NULL);
    sim_server_free(srv);
    srv = NULL;
}

static void cmd_ok(const char *db, const char *json)
{
    bson_t *cmd = simtest_json(json), reply;
    bson_error_t err;
    bool ok = mongoc_client_command_simple(client, db, cmd, NULL, &reply, &err);
    ck_assert_msg(ok, "%s failed: %d %s", json, (int)err.code, err.message);
    bson_destroy(&reply);
    bson_destroy(cmd);
}

/* One insert command into db.w with these measurements (a JSON array), as a retryable write (lsid and txnNumber in
 * the command, as a driver sends them; the measurements are sent as written, no _id added). */
static void insert(const char *docs_json)
{
    static int64_t txn = 0;
    char *cmd = bson_strdup_printf("{\"insert\": \"w\", \"documents\": %s, \"lsid\": {\"id\": {\"$binary\": "
                                   "{\"base64\": \"Ln1Oclf3SoCG9xPy/lJa+w==\", \"subType\": \"04\"}}}, \"txnNumber\": "
                                   "{\"$numberLong\": \"%lld\"}}",
                                   docs_json, (long long)++txn);
    cmd_ok("db", cmd);
    bson_free(cmd);
}

/* The entries on db.system.buckets.w, in oplog order. */
typedef struct {
    bson_t *e[64];
    int n;
} entries;

/* The oplog entries on ns, in oplog order (the whole oplog read, filtered here). */
static void read_ns(const char *ns, entries *out)
{
    mongoc_collection_t *oplog = mongoc_client_get_collection(client, "local", "oplog.rs");
    bson_t *filter = bson_new();
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, filter, NULL, NULL);
    const bson_t *doc;
    out->n = 0;
    while (mongoc_cursor_next(cur, &doc)) {
        const char *dns = simtest_str(doc, "ns");
        if (!dns || strcmp(dns, ns) != 0)
            continue;
        ck_assert_int_lt(out->n, 64);
        out->e[out->n++] = bson_copy(doc);
    }
    bson_error_t err;
    ck_assert_msg(!mongoc_cursor_error(cur, &err), "oplog read: %s", err.message);
    mongoc_cursor_destroy(cur);
    bson_destroy(filter);
    mongoc_collection_destroy(oplog);
}

static void read_entries(entries *out)
{
    read_ns("db.system.buckets.w", out);
}

static void entries_clear(entries *es)
{
    for (int i = 0; i < es->n; i++)
        bson_destroy(es->e[i]);
    es->n = 0;
}

static void sub_of(const bson_t *b, const char *path, bson_t *out)
{
    bson_iter_t it, f;
    if (!*path) {
        ck_assert(bson_init_static(out, bson_get_data(b), b->len));
        return;
    }
    ck_assert_msg(bson_iter_init(&it, b) && bson_iter_find_descendant(&it, path, &f) &&
                      (BSON_ITER_HOLDS_DOCUMENT(&f) || BSON_ITER_HOLDS_ARRAY(&f)),
                  "no document at %s", path);
    uint32_t len;
    const uint8_t *data;
    if (BSON_ITER_HOLDS_DOCUMENT(&f))
        bson_iter_document(&f, &len, &data);
    else
        bson_iter_array(&f, &len, &data);
    ck_assert(bson_init_static(out, data, len));
}

static const bson_oid_t *oid_at(const bson_t *b, const char *path)
{
    bson_iter_t it, f;
    ck_assert_msg(bson_iter_init(&it, b) && bson_iter_find_descendant(&it, path, &f) && BSON_ITER_HOLDS_OID(&f),
                  "no ObjectId at %s", path);
    return bson_iter_oid(&f);
}

/* The sub-document at path equals json exactly. */
static void expect_at(const bson_t *b, const char *path, const char *json)
{
    bson_t sub;
    sub_of(b, path, &sub);
    bson_t *want = simtest_json(json);
    simtest_assert_bson_eq(&sub, want, path);
    bson_destroy(want);
}

static const char *op_of(const bson_t *e)
{
    return simtest_str(e, "op");
}

/* Keys of a document, in order, joined by commas (to check the number and order of data items). */
static void keys_of(const bson_t *b, const char *path, char *out, size_t cap)
{
    bson_t sub;
    bson_iter_t it;
    sub_of(b, path, &sub);
    out[0] = 0;
    bson_iter_init(&it, &sub);
    while (bson_iter_next(&it)) {
        if (out[0])
            strncat(out, ",", cap - strlen(out) - 1);
        strncat(out, bson_iter_key(&it), cap - strlen(out) - 1);
    }
}

#define T0    "1623711480000" /* 2021-06-14T22:58:00Z, a whole minute */
#define D(ms) "{\"$date\": {\"$numberLong\": \"" ms "\"}}"

/* Measurements of one meta value share a bucket until timeseriesBucketMaxCount (3 here); another meta value has its
 * own; the first batch of a bucket is one 'i' with all its measurements, in the order the batches were opened. */
START_TEST(test_count_limit_and_meta_grouping)
{
    start(SIM_FORMAT_50, 3);
    cmd_ok("db", "{\"create\": \"w\", \"timeseries\": {\"timeField\": \"t\", \"metaField\": \"m\"}}");
    insert("[{\"t\": " D("1623711480001") ", \"m\": \"a\", \"v\": 1}, {\"t\": " D(
        "1623711480002") ", \"m\": \"b\", "
                         "\"v\": 2}, {\"t\": " D("1623711480003") ", \"m\": \"a\", \"v\": 3}, {\"t\": " D(
                             "1623711480004") ", \"m\": "
                                              "\"a\", \"v\": 4}, {\"t\": " D(
                                                  "1623711480005") ", \"m\": \"a\", \"v\": 5}, {\"t\": " D("16237114800"
                                                                                                           "06") ", "
                                                                                                                 "\"m\""
                                                                                                                 ": "
                                                                                                                 "\"a\""
                                                                                                                 ", "
                                                                                                                 "\"v\""
                                                                                                                 ": "
                                                                                                                 "6}]");
    entries es;
    read_entries(&es);
    ck_assert_int_eq(es.n, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_str_eq(op_of(es.e[i]), "i");
    /* a's first bucket: measurements 0, 2, 3 (then it holds 3: closed). control.min's time is the rounded time. */
    char want[2048];
    snprintf(
        want, sizeof want,
        "{\"_id\": {\"$oid\": \"%s\"}, \"control\": {\"version\": 1, \"min\": {\"t\": " D(
            T0) ", \"v\": 1}, "
                "\"max\": {\"t\": " D("1623711480004") ", \"v\": 4}}, \"meta\": \"a\", \"data\": {\"t\": {\"0\": " D(
                    "1623711480001") ", \"1\": " D("1623711480003") ", \"2\": " D("1623711480004") "}, \"v\": {\"0\": "
                                                                                                   "1, "
                                                                                                   "\"1\": 3, \"2\": "
                                                                                                   "4}}}",
        "000000000000000000000000");
    bson_t o;
    sub_of(es.e[0], "o", &o);
    char hex[25];
    bson_oid_to_string(oid_at(&o, "_id"), hex);
    memcpy(strstr(want, "000000000000000000000000"), hex, 24);
    expect_at(es.e[0], "o", want);
    ck_assert_int_eq((int64_t)bson_oid_get_time_t(oid_at(&o, "_id")), 1623711480); /* generateBucketOID */
    /* b's bucket, then a's second bucket with measurements 4 and 5. */
    sub_of(es.e[1], "o", &o);
    ck_assert_str_eq(simtest_str(&o, "meta"), "b");
    expect_at(es.e[1], "o.data", "{\"t\": {\"0\": " D("1623711480002") "}, \"v\": {\"0\": 2}}");
    sub_of(es.e[2], "o", &o);
    ck_assert_str_eq(simtest_str(&o, "meta"), "a");
    expect_at(es.e[2], "o.data",
              "{\"t\": {\"0\": " D("1623711480005") ", \"1\": " D("1623711480006") "}, \"v\": "
                                                                                   "{\"0\": 5, \"1\": 6}}");
    bson_oid_t second = *oid_at(&o, "_id");
    entries_clear(&es);

    /* The next command appends to a's open bucket: one 'u' on it. The first update of a bucket repeats what its
     * insert set in control (the MinMax updated flags are cleared by minUpdates/maxUpdates only), and a field new
     * to the bucket goes whole under sdata.i, before the sub-diffs of the existing columns. */
    insert("[{\"t\": " D("1623711480007") ", \"m\": \"a\", \"v\": 0, \"x\": \"new\"}]");
    read_entries(&es);
    ck_assert_int_eq(es.n, 4);
    ck_assert_str_eq(op_of(es.e[3]), "u");
    ck_assert(bson_oid_equal(oid_at(es.e[3], "o2._id"), &second));
    expect_at(
        es.e[3], "o",
        "{\"$v\": 2, \"diff\": {\"scontrol\": {\"smin\": {\"u\": {\"t\": " D(
            T0) ", \"v\": 0, \"x\": \"new\"}}, "
                "\"smax\": {\"u\": {\"t\": " D("1623711480007") ", \"v\": 6, \"x\": \"new\"}}}, \"sdata\": {\"i\": "
                                                                "{\"x\": {\"2\": \"new\"}}, \"st\": {\"i\": {\"2\": " D(
                                                                    "1623711480007") "}}, \"sv\": {\"i\": {\"2\": "
                                                                                     "0}}}}}");
    entries_clear(&es);
    stop();
}
END_TEST

/* A measurement bucketMaxSpanSeconds (3600 for granularity seconds) or more after the bucket's rounded time, or
 * before it, closes the bucket and opens a new one; a second update carries only what changed. */
START_TEST(test_span_and_time_backward)
{
    start(SIM_FORMAT_50, 0);
    cmd_ok("db", "{\"create\": \"w\", \"timeseries\": {\"timeField\": \"t\"}}");
    insert("[{\"t\": " D("1623711490000") ", \"v\": 5}]");
    insert("[{\"t\": " D("1623711491000") ", \"v\": 6}]");
    insert("[{\"t\": " D("1623711492000") ", \"v\": 7}]");
    insert("[{\"t\": " D("1623715080000") ", \"v\": 1}]"); /* T0 + 3600 s: kTimeForward */
    insert("[{\"t\": " D("1623715079000") ", \"v\": 1}]"); /* before the new bucket's time: kTimeBackward */
    entries es;
    read_entries(&es);
    ck_assert_int_eq(es.n, 5);
    const char *ops[] = {"i", "u", "u", "i", "i"};
    for (int i = 0; i < 5; i++)
        ck_assert_str_eq(op_of(es.e[i]), ops[i]);
    expect_at(es.e[2], "o",
              "{\"$v\": 2, \"diff\": {\"scontrol\": {\"smax\": {\"u\": {\"t\": " D(
                  "1623711492000") ", \"v\": 7}}}, "
                                   "\"sdata\": {\"st\": {\"i\": {\"2\": " D(
                                       "1623711492000") "}}, \"sv\": {\"i\": {\"2\": 7}}}}}");
    bson_t o;
    sub_of(es.e[3], "o", &o);
    ck_assert_int_eq((int64_t)bson_oid_get_time_t(oid_at(&o, "_id")), 1623715080);
    sub_of(es.e[4], "o", &o);
    ck_assert_int_eq((int64_t)bson_oid_get_time_t(oid_at(&o, "_id")), 1623715020);
    entries_clear(&es);
    stop();
}
END_TEST

/* Canonical Extended JSON of b with the fields of each object at the listed paths sorted by name (the levels a 5.0
 * server fills from hash maps, whose order varies run to run). */
static char *sorted_json(const bson_t *b, int depth);

static void sorted_append(bson_t *out, const bson_t *in)
{
    typedef struct {
        bson_iter_t it;
    } elem;
    const char *keys[64];
    elem *its = malloc(64 * sizeof *its);
    ck_assert_ptr_nonnull(its);
    int n = 0;
    bson_iter_t it;
    bson_iter_init(&it, in);
    while (bson_iter_next(&it)) {
        ck_assert_int_lt(n, 64);
        its[n].it = it;
        keys[n++] = bson_iter_key(&it);
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(keys[j - 1], keys[j]) > 0; j--) {
            const char *k = keys[j];
            keys[j] = keys[j - 1];
            keys[j - 1] = k;
            elem t = its[j];
            its[j] = its[j - 1];
            its[j - 1] = t;
        }
    for (int i = 0; i < n; i++) {
        if (BSON_ITER_HOLDS_DOCUMENT(&its[i].it)) {
            uint32_t len;
            const uint8_t *data;
            bson_t sub, child;
            bson_iter_document(&its[i].it, &len, &data);
            bson_init_static(&sub, data, len);
            bson_append_document_begin(out, keys[i], -1, &child);
            sorted_append(&child, &sub);
            bson_append_document_end(out, &child);
        } else {
            bson_append_iter(out, keys[i], -1, &its[i].it);
        }
    }
    free(its);
}

static char *sorted_json(const bson_t *b, int depth)
{
    (void)depth;
    bson_t s = BSON_INITIALIZER;
    sorted_append(&s, b);
    char *j = bson_as_canonical_extended_json(&s, NULL);
    bson_destroy(&s);
    return j;
}

/* The 5.0 append of one measurement against a real 5.0 entry (mongo-tools' ts_dump_with_oplog, the first line of
 * real_v5.0_2021_timeseries_v2_diff_updates_sample.jsonl): after 129 measurements, the 130th {_id, ts, measurement:
 * 292} (its _id and ts the largest so far, its measurement not) is logged as
 * {$v: 2, diff: {scontrol: {smax: {u: {_id, ts}}}, sdata: {sts: {i: {"129": ts}}, smeasurement: {i: {"129": 292}},
 * s_id: {i: {"129": _id}}}}}. The server orders sdata's fields by hash (they differ between the sample's lines), so
 * the comparison sorts field names; everything else is exact. */
START_TEST(test_v50_diff_matches_real_entry)
{
    start(SIM_FORMAT_50, 0);
    cmd_ok("timeseries_test", "{\"create\": \"foo_ts\", \"timeseries\": {\"timeField\": \"ts\", \"metaField\": "
                              "\"my_meta\"}}");
    /* 129 measurements, then the real 130th; each its own command so that the last one is an append alone. */
    char docs[128 * 1024];
    size_t off = 0;
    off += (size_t)snprintf(docs + off, sizeof docs - off, "[");
    for (int i = 0; i < 129; i++) {
        char id[25];
        snprintf(id, sizeof id, "60c7df2b15caf5ee94e0%04x", i);
        off += (size_t)snprintf(docs + off, sizeof docs - off,
                                "%s{\"_id\": {\"$oid\": \"%s\"}, \"ts\": {\"$date\": {\"$numberLong\": \"%lld\"}}, "
                                "\"my_meta\": 1, \"measurement\": %d}",
                                i ? ", " : "", id, 1623711531000LL + i, 300 + i);
    }
    snprintf(docs + off, sizeof docs - off, "]");
    char *cmd = bson_strdup_printf("{\"insert\": \"foo_ts\", \"documents\": %s}", docs);
    cmd_ok("timeseries_test", cmd);
    bson_free(cmd);
    /* One more so that the flags the insert set are spent; then the real measurement. */
    cmd_ok("timeseries_test", "{\"insert\": \"foo_ts\", \"documents\": [{\"_id\": {\"$oid\": "
                              "\"60c7df3b15caf5ee94e01f7d\"}, \"ts\": " D("1623711547900") ", \"my_meta\": 1, "
                                                                                           "\"measurement\": 10}]}");
    cmd_ok("timeseries_test", "{\"insert\": \"foo_ts\", \"documents\": [{\"_id\": {\"$oid\": "
                              "\"60c7df3b15caf5ee94e01f7e\"}, \"ts\": " D("1623711547966") ", \"my_meta\": 1, "
                                                                                           "\"measurement\": 292}]}");
    entries es;
    read_ns("timeseries_test.system.buckets.foo_ts", &es);
    int n = es.n;
    ck_assert_int_ge(n, 1);
    bson_t *last = bson_copy(es.e[n - 1]);
    entries_clear(&es);
    ck_assert_int_eq(n, 3);
    bson_t o;
    sub_of(last, "o", &o);
    /* The real entry's o, with our index (130: 129 measurements, one more, then this one) for the real 129. */
    bson_t *want = simtest_json(
        "{\"$v\": 2, \"diff\": {\"scontrol\": {\"smax\": {\"u\": {\"_id\": {\"$oid\": \"60c7df3b15caf5ee94e01f7e\"}, "
        "\"ts\": {\"$date\": {\"$numberLong\": \"1623711547966\"}}}}}, \"sdata\": {\"sts\": {\"i\": {\"130\": "
        "{\"$date\": "
        "{\"$numberLong\": \"1623711547966\"}}}}, \"smeasurement\": {\"i\": {\"130\": {\"$numberInt\": \"292\"}}}, "
        "\"s_id\": {\"i\": {\"130\": {\"$oid\": \"60c7df3b15caf5ee94e01f7e\"}}}}}}");
    char *g = sorted_json(&o, 0), *w = sorted_json(want, 0);
    ck_assert_msg(strcmp(g, w) == 0, "\n got  %s\n want %s", g, w);
    /* Exact where the server's order is fixed: $v then diff; scontrol before sdata. smax's u is in MinMax order,
     * the time field first (allocateBucket updates the MinMax with the rounded time before any measurement; the 5.0
     * sample's own order varies: a hash map then). */
    char keys[256];
    keys_of(&o, "diff", keys, sizeof keys);
    ck_assert_str_eq(keys, "scontrol,sdata");
    keys_of(&o, "diff.scontrol.smax.u", keys, sizeof keys);
    ck_assert_str_eq(keys, "ts,_id");
    bson_free(g);
    bson_free(w);
    bson_destroy(want);
    bson_destroy(last);
    stop();
}
END_TEST

/* ---- compressed buckets: decoded with the daemon's decoder (src/map/bsoncolumn.c) ---- */

/* The binary at path (BinData of the given subtype). */
static const uint8_t *bin_at(const bson_t *b, const char *path, bson_subtype_t want, uint32_t *len)
{
    bson_iter_t it, f;
    bson_subtype_t st;
    const uint8_t *data;
    ck_assert_msg(bson_iter_init(&it, b) && bson_iter_find_descendant(&it, path, &f) && BSON_ITER_HOLDS_BINARY(&f),
                  "no binary at %s", path);
    bson_iter_binary(&f, &st, len, &data);
    ck_assert_msg(st == want, "%s: subtype %d, want %d", path, (int)st, (int)want);
    return data;
}

/* A column's values as canonical extended JSON, "-" for a missing position, joined by spaces. */
static void column_text(const uint8_t *data, size_t len, char *out, size_t cap)
{
    bcol_decoder *d = bcol_decoder_new(data, len);
    bcol_elem e;
    char err[256];
    bcol_status st;
    out[0] = 0;
    while ((st = bcol_decoder_next(d, &e, err, sizeof err)) == BCOL_VALUE) {
        if (out[0])
            strncat(out, " ", cap - strlen(out) - 1);
        if (e.missing) {
            strncat(out, "-", cap - strlen(out) - 1);
            continue;
        }
        bson_t one = BSON_INITIALIZER;
        bson_append_value(&one, "v", 1, &e.value);
        char *j = bson_as_relaxed_extended_json(&one, NULL);
        strncat(out, j, cap - strlen(out) - 1);
        bson_free(j);
        bson_destroy(&one);
    }
    ck_assert_msg(st == BCOL_END, "column does not decode: %s", err);
    bcol_decoder_destroy(d);
}

static void expect_column(const bson_t *doc, const char *path, const char *want)
{
    uint32_t len;
    const uint8_t *data = bin_at(doc, path, BSON_SUBTYPE_COLUMN, &len);
    char got[4096];
    column_text(data, len, got, sizeof got);
    ck_assert_msg(strcmp(got, want) == 0, "%s:\n got  %s\n want %s", path, got, want);
}

static bool has_field(const bson_t *b, const char *key)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, b, key);
}

#define V(ms) "{ \"v\" : { \"$date\" : \"" ms "\" } }"

/* 7.0: a bucket closed with more than one measurement is rewritten compressed: a 'u' whose o is the whole bucket
 * (a replacement, no $v) with control.version 2 and count, its columns BinData 7 in time order, the time column
 * first; no stmtId (kUninitializedStmtId), while the insert carries its measurements' stmtIds. Closed by a later
 * command (no batch of that command in it): before that command's insert; closed by the command that filled it:
 * after that fill. A one-measurement bucket is left as it is. */
START_TEST(test_v70_compress_on_close)
{
    start(SIM_FORMAT_70, 3);
    cmd_ok("db", "{\"create\": \"w\", \"timeseries\": {\"timeField\": \"t\", \"metaField\": \"m\"}}");
    insert("[{\"t\": " D("1623711485000") ", \"m\": 1, \"v\": 5}, {\"t\": " D(
        "1623711483000") ", \"m\": 1, "
                         "\"v\": 3}, {\"t\": " D("1623711484000") ", \"m\": 1}]");
    insert("[{\"t\": " D("1623711486000") ", \"m\": 1, \"v\": 6}]");
    entries es;
    read_entries(&es);
    ck_assert_int_eq(es.n, 3);
    ck_assert_str_eq(op_of(es.e[0]), "i");
    ck_assert_str_eq(op_of(es.e[1]), "u");
    ck_assert_str_eq(op_of(es.e[2]), "i");
    bson_t first, o;
    sub_of(es.e[0], "o", &first);
    sub_of(es.e[1], "o", &o);
    ck_assert(bson_oid_equal(oid_at(&o, "_id"), oid_at(&first, "_id")));
    ck_assert(bson_oid_equal(oid_at(es.e[1], "o2._id"), oid_at(&first, "_id")));
    ck_assert(!has_field(&o, "$v"));
    ck_assert(!has_field(es.e[1], "stmtId") && !has_field(es.e[1], "lsid"));
    expect_at(es.e[0], "stmtId", "{\"0\": 0, \"1\": 1, \"2\": 2}");
    expect_at(es.e[1], "o.control",
              "{\"version\": 2, \"min\": {\"t\": " D(T0) ", \"v\": 3}, \"max\": {\"t\": " D(
                  "1623711485000") ", \"v\": "
                                   "5}, \"count\": 3}");
    ck_assert_int_eq(simtest_str(&o, "meta") == NULL, 1);
    char keys[128];
    keys_of(&o, "", keys, sizeof keys);
    ck_assert_str_eq(keys, "_id,control,meta,data");
    keys_of(&o, "data", keys, sizeof keys);
    ck_assert_str_eq(keys, "t,v");
    expect_column(&o, "data.t", V("2021-06-14T22:58:03Z") " " V("2021-06-14T22:58:04Z") " " V("2021-06-14T22:58:05Z"));
    expect_column(&o, "data.v", "{ \"v\" : 3 } - { \"v\" : 5 }");
    entries_clear(&es);

    /* Filled and closed by one command: its insert (2 more for the open bucket: count 3), the compression, then
     * the new bucket. */
    insert("[{\"t\": " D("1623711487000") ", \"m\": 1, \"v\": 7}, {\"t\": " D(
        "1623711488000") ", \"m\": 1, "
                         "\"v\": 8}, {\"t\": " D("1623711489000") ", \"m\": 1, \"v\": 9}]");
    read_entries(&es);
    ck_assert_int_eq(es.n, 6);
    ck_assert_str_eq(op_of(es.e[3]), "u");
    expect_at(es.e[3], "stmtId", "{\"0\": 0, \"1\": 1}");
    sub_of(es.e[3], "o", &o);
    ck_assert(has_field(&o, "$v"));
    ck_assert_str_eq(op_of(es.e[4]), "u");
    sub_of(es.e[4], "o", &o);
    ck_assert(!has_field(&o, "$v"));
    expect_column(&o, "data.v", "{ \"v\" : 6 } { \"v\" : 7 } { \"v\" : 8 }");
    ck_assert_str_eq(op_of(es.e[5]), "i");
    entries_clear(&es);

    /* The one-measurement bucket (v 9) closed by a time 3600 s later: no compression. */
    insert("[{\"t\": " D("1623715089000") ", \"m\": 1, \"v\": 10}]");
    read_entries(&es);
    ck_assert_int_eq(es.n, 7);
    ck_assert_str_eq(op_of(es.e[6]), "i");
    entries_clear(&es);
    stop();
}
END_TEST

/* 8.0: buckets compressed from the start (version 2, columns in time order, count); an append is a $v:2 diff with
 * scontrol.u {count}, smin/smax, sdata.i {<new field>: BinData 7} and sdata.b {<field>: {o, d: BinData 0}}: applied
 * to the bucket before (bcol_apply_binary_diff), the columns decode to the measurements; the stored bucket is that
 * result. A measurement before the bucket's last one makes it version 3. */
START_TEST(test_v80_compressed_appends)
{
    start(SIM_FORMAT_80, 0);
    cmd_ok("db", "{\"create\": \"w\", \"timeseries\": {\"timeField\": \"t\", \"metaField\": \"m\"}}");
    insert("[{\"t\": " D("1623711482000") ", \"m\": 1, \"v\": 1}, {\"t\": " D("1623711481000") ", \"m\": 1, "
                                                                                               "\"v\": 2}]");
    entries es;
    read_entries(&es);
    ck_assert_int_eq(es.n, 1);
    ck_assert_str_eq(op_of(es.e[0]), "i");
    bson_t ins;
    sub_of(es.e[0], "o", &ins);
    expect_at(es.e[0], "o.control",
              "{\"version\": 2, \"min\": {\"t\": " D(T0) ", \"v\": 1}, \"max\": {\"t\": " D(
                  "1623711482000") ", \"v\": "
                                   "2}, \"count\": 2}");
    expect_column(&ins, "data.t", V("2021-06-14T22:58:01Z") " " V("2021-06-14T22:58:02Z"));
    expect_column(&ins, "data.v", "{ \"v\" : 2 } { \"v\" : 1 }");
    bson_t *before = bson_copy(&ins);
    entries_clear(&es);

    insert("[{\"t\": " D("1623711483000") ", \"m\": 1, \"v\": 3, \"x\": \"new\"}]");
    read_entries(&es);
    ck_assert_int_eq(es.n, 2);
    ck_assert_str_eq(op_of(es.e[1]), "u");
    bson_t diff;
    sub_of(es.e[1], "o.diff", &diff);
    char keys[128];
    keys_of(&diff, "", keys, sizeof keys);
    ck_assert_str_eq(keys, "scontrol,sdata");
    expect_at(&diff, "scontrol",
              "{\"u\": {\"count\": 3}, \"smin\": {\"u\": {\"t\": " D(
                  T0) ", \"v\": 1, \"x\": \"new\"}}, \"smax\": "
                      "{\"u\": {\"t\": " D("1623711483000") ", \"v\": 3, \"x\": \"new\"}}}");
    keys_of(&diff, "sdata", keys, sizeof keys);
    ck_assert_str_eq(keys, "i,b");
    keys_of(&diff, "sdata.b", keys, sizeof keys);
    ck_assert_str_eq(keys, "t,v");
    keys_of(&diff, "sdata.b.t", keys, sizeof keys);
    ck_assert_str_eq(keys, "o,d");
    expect_column(&diff, "sdata.i.x", "- - { \"v\" : \"new\" }");
    /* Each b diff applied to the column before gives the column after. */
    const char *fields[] = {"t", "v"};
    const char *want[] = {V("2021-06-14T22:58:01Z") " " V("2021-06-14T22:58:02Z") " " V("2021-06-14T22:58:03Z"),
                          "{ \"v\" : 2 } { \"v\" : 1 } { \"v\" : 3 }"};
    for (int i = 0; i < 2; i++) {
        char path[64];
        uint32_t olen, dlen;
        snprintf(path, sizeof path, "data.%s", fields[i]);
        const uint8_t *old = bin_at(before, path, BSON_SUBTYPE_COLUMN, &olen);
        snprintf(path, sizeof path, "sdata.b.%s.d", fields[i]);
        const uint8_t *d = bin_at(&diff, path, BSON_SUBTYPE_BINARY, &dlen);
        snprintf(path, sizeof path, "sdata.b.%s.o", fields[i]);
        bson_iter_t it, f;
        ck_assert(bson_iter_init(&it, &diff) && bson_iter_find_descendant(&it, path, &f) && BSON_ITER_HOLDS_INT32(&f));
        uint8_t *out;
        size_t outlen;
        char err[256], got[1024];
        ck_assert_msg(
            bcol_apply_binary_diff(old, olen, (size_t)bson_iter_int32(&f), d, dlen, &out, &outlen, err, sizeof err),
            "%s", err);
        column_text(out, outlen, got, sizeof got);
        ck_assert_msg(strcmp(got, want[i]) == 0, "%s after the diff:\n got  %s\n want %s", fields[i], got, want[i]);
        free(out);
    }
    bson_destroy(before);
    entries_clear(&es);

    /* Before the bucket's last measurement: version 3 (once); then the next append says only count. */
    insert("[{\"t\": " D("1623711480500") ", \"m\": 1, \"v\": 0}]");
    insert("[{\"t\": " D("1623711484000") ", \"m\": 1, \"v\": 1}]");
    read_entries(&es);
    ck_assert_int_eq(es.n, 4);
    expect_at(es.e[2], "o.diff.scontrol", "{\"u\": {\"count\": 4, \"version\": 3}, \"smin\": {\"u\": {\"v\": 0}}}");
    expect_at(es.e[3], "o.diff.scontrol",
              "{\"u\": {\"count\": 5}, \"smax\": {\"u\": {\"t\": " D("1623711484000") "}}}");
    entries_clear(&es);

    /* The stored bucket: version 3, count 5, columns in arrival-sorted-per-batch order. */
    mongoc_collection_t *c = mongoc_client_get_collection(client, "db", "system.buckets.w");
    bson_t *filter = bson_new();
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(c, filter, NULL, NULL);
    const bson_t *doc;
    ck_assert(mongoc_cursor_next(cur, &doc));
    expect_at(doc, "control",
              "{\"version\": 3, \"min\": {\"t\": " D(T0) ", \"v\": 0, \"x\": \"new\"}, \"max\": {\"t\": " D(
                  "1623711484000") ", \"v\": 3, \"x\": \"new\"}, \"count\": 5}");
    expect_column(doc, "data.v", "{ \"v\" : 2 } { \"v\" : 1 } { \"v\" : 3 } { \"v\" : 0 } { \"v\" : 1 }");
    expect_column(doc, "data.x", "- - { \"v\" : \"new\" } - -");
    ck_assert(!mongoc_cursor_next(cur, &doc));
    mongoc_cursor_destroy(cur);
    bson_destroy(filter);
    mongoc_collection_destroy(c);
    stop();
}
END_TEST

/* buildInfo's version and hello's maxWireVersion follow --oplog-format. */
START_TEST(test_versions)
{
    struct {
        sim_oplog_format f;
        const char *version;
        int wire;
    } cases[] = {{SIM_FORMAT_50, "5.0.31", 13}, {SIM_FORMAT_80, "8.0.4", 25}, {SIM_FORMAT_70, "7.0.14", 17}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        start(cases[i].f, 0);
        bson_t *cmd = simtest_json("{\"buildInfo\": 1}"), reply;
        bson_error_t err;
        ck_assert_msg(mongoc_client_command_simple(client, "admin", cmd, NULL, &reply, &err), "%s", err.message);
        ck_assert_str_eq(simtest_str(&reply, "version"), cases[i].version);
        bson_destroy(&reply);
        bson_destroy(cmd);
        cmd = simtest_json("{\"hello\": 1}");
        ck_assert_msg(mongoc_client_command_simple(client, "admin", cmd, NULL, &reply, &err), "%s", err.message);
        bson_iter_t it;
        ck_assert(bson_iter_init_find(&it, &reply, "maxWireVersion"));
        ck_assert_int_eq(bson_iter_int32(&it), cases[i].wire);
        bson_destroy(&reply);
        bson_destroy(cmd);
        stop();
    }
}
END_TEST

/* The command's first write error code (0: none). */
static int write_error(const char *db, const char *json)
{
    bson_t *cmd = simtest_json(json), reply;
    bson_error_t err;
    bool ok = mongoc_client_command_simple(client, db, cmd, NULL, &reply, &err);
    bson_destroy(cmd);
    int code = ok ? 0 : (int)err.code;
    bson_iter_t it, f;
    if (ok && bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "writeErrors.0.code", &f))
        code = bson_iter_int32(&f);
    bson_destroy(&reply);
    return code;
}

/* All oplog entries after the first n of the whole oplog. */
static void read_all(entries *out)
{
    mongoc_collection_t *oplog = mongoc_client_get_collection(client, "local", "oplog.rs");
    bson_t *filter = bson_new();
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, filter, NULL, NULL);
    const bson_t *doc;
    out->n = 0;
    while (mongoc_cursor_next(cur, &doc)) {
        if (out->n == 64) {
            bson_destroy(out->e[0]);
            memmove(out->e, out->e + 1, 63 * sizeof *out->e);
            out->n--;
        }
        out->e[out->n++] = bson_copy(doc);
    }
    mongoc_cursor_destroy(cur);
    bson_destroy(filter);
    mongoc_collection_destroy(oplog);
}

/* 8.0: a delete of some measurements replaces the bucket by the rest (a replacement 'u': o is the rebuilt compressed
 * bucket); an update of a measurement replaces its bucket by the others and inserts a new bucket with the updated
 * one, both in one applyOps (no session); deleting the last measurement deletes the bucket. */
START_TEST(test_v80_delete_update)
{
    start(SIM_FORMAT_80, 0);
    cmd_ok("db", "{\"create\": \"w\", \"timeseries\": {\"timeField\": \"t\", \"metaField\": \"m\"}}");
    insert("[{\"t\": " D("1623711481000") ", \"m\": 1, \"v\": 1}, {\"t\": " D(
        "1623711482000") ", \"m\": 1, "
                         "\"v\": 2}, {\"t\": " D("1623711483000") ", \"m\": 1, \"v\": 3}]");
    cmd_ok("db", "{\"delete\": \"w\", \"deletes\": [{\"q\": {\"v\": 2}, \"limit\": 0}]}");
    entries es;
    read_entries(&es);
    ck_assert_int_eq(es.n, 2);
    ck_assert_str_eq(op_of(es.e[1]), "u");
    bson_t o;
    sub_of(es.e[1], "o", &o);
    ck_assert(!has_field(&o, "$v"));
    expect_at(&o, "control",
              "{\"version\": 2, \"min\": {\"t\": " D(T0) ", \"v\": 1}, \"max\": {\"t\": " D(
                  "1623711483000") ", \"v\": "
                                   "3}, \"count\": 2}");
    expect_column(&o, "data.t", V("2021-06-14T22:58:01Z") " " V("2021-06-14T22:58:03Z"));
    expect_column(&o, "data.v", "{ \"v\" : 1 } { \"v\" : 3 }");
    bson_oid_t first = *oid_at(&o, "_id");
    entries_clear(&es);

    cmd_ok("db", "{\"update\": \"w\", \"updates\": [{\"q\": {\"v\": 3}, \"u\": {\"$set\": {\"v\": 30}}}]}");
    read_all(&es);
    bson_t *last = es.e[es.n - 1];
    ck_assert_str_eq(op_of(last), "c");
    ck_assert(!has_field(last, "lsid"));
    bson_t ops;
    sub_of(last, "o.applyOps", &ops);
    char keys[64];
    keys_of(&ops, "", keys, sizeof keys);
    ck_assert_str_eq(keys, "0,1");
    bson_t op0, op1;
    sub_of(&ops, "0", &op0);
    sub_of(&ops, "1", &op1);
    ck_assert_str_eq(op_of(&op0), "u");
    ck_assert_str_eq(simtest_str(&op0, "ns"), "db.system.buckets.w");
    ck_assert(bson_oid_equal(oid_at(&op0, "o2._id"), &first));
    expect_column(&op0, "o.data.v", "{ \"v\" : 1 }");
    ck_assert_str_eq(op_of(&op1), "i");
    expect_column(&op1, "o.data.v", "{ \"v\" : 30 }");
    expect_column(&op1, "o.data.t", V("2021-06-14T22:58:03Z"));
    sub_of(&op1, "o", &o);
    bson_iter_t mi;
    ck_assert(bson_iter_init_find(&mi, &o, "meta") && bson_iter_as_int64(&mi) == 1);
    entries_clear(&es);

    cmd_ok("db", "{\"delete\": \"w\", \"deletes\": [{\"q\": {\"v\": 1}, \"limit\": 1}]}");
    read_entries(&es);
    ck_assert_str_eq(op_of(es.e[es.n - 1]), "d");
    ck_assert(bson_oid_equal(oid_at(es.e[es.n - 1], "o._id"), &first));
    entries_clear(&es);
    stop();
}
END_TEST

/* 7.0: the rebuilt bucket of a delete is version 1. */
START_TEST(test_v70_delete_rebuilds_v1)
{
    start(SIM_FORMAT_70, 0);
    cmd_ok("db", "{\"create\": \"w\", \"timeseries\": {\"timeField\": \"t\"}}");
    insert("[{\"t\": " D("1623711481000") ", \"v\": 1}, {\"t\": " D("1623711482000") ", \"v\": 2}]");
    cmd_ok("db", "{\"delete\": \"w\", \"deletes\": [{\"q\": {\"v\": 1}, \"limit\": 0}]}");
    entries es;
    read_entries(&es);
    ck_assert_int_eq(es.n, 2);
    ck_assert_str_eq(op_of(es.e[1]), "u");
    bson_t o;
    sub_of(es.e[1], "o", &o);
    char want[1024];
    char hex[25];
    bson_oid_to_string(oid_at(&o, "_id"), hex);
    snprintf(want, sizeof want,
             "{\"_id\": {\"$oid\": \"%s\"}, \"control\": {\"version\": 1, \"min\": {\"t\": " D(
                 T0) ", \"v\": 2}, "
                     "\"max\": {\"t\": " D("1623711482000") ", \"v\": 2}}, \"data\": {\"t\": {\"0\": " D(
                         "1623711482000") "}, "
                                          "\"v\": {\"0\": 2}}}",
             hex);
    expect_at(es.e[1], "o", want);
    entries_clear(&es);
    stop();
}
END_TEST

/* 5.0: deletes and updates only on the metaField, multi only; they write the buckets: 'd' of each, or a $v:2 update
 * of meta. */
START_TEST(test_v50_meta_only)
{
    start(SIM_FORMAT_50, 0);
    cmd_ok("db", "{\"create\": \"w\", \"timeseries\": {\"timeField\": \"t\", \"metaField\": \"m\"}}");
    insert("[{\"t\": " D("1623711481000") ", \"m\": {\"k\": 1}, \"v\": 1}, {\"t\": " D(
        "1623711482000") ", \"m\": "
                         "{\"k\": 2}, \"v\": 2}]");
    ck_assert_int_eq(write_error("db", "{\"delete\": \"w\", \"deletes\": [{\"q\": {\"v\": 1}, \"limit\": 0}]}"), 72);
    ck_assert_int_eq(write_error("db", "{\"delete\": \"w\", \"deletes\": [{\"q\": {\"m.k\": 1}, \"limit\": 1}]}"), 20);
    ck_assert_int_eq(write_error("db", "{\"update\": \"w\", \"updates\": [{\"q\": {\"m.k\": 1}, \"u\": {\"$set\": "
                                       "{\"m.k\": 3}}}]}"),
                     72);
    ck_assert_int_eq(write_error("db", "{\"update\": \"w\", \"updates\": [{\"q\": {\"m.k\": 1}, \"u\": {\"$set\": "
                                       "{\"v\": 3}}, \"multi\": true}]}"),
                     72);
    cmd_ok("db", "{\"update\": \"w\", \"updates\": [{\"q\": {\"m.k\": 1}, \"u\": {\"$set\": {\"m.k\": 3}}, "
                 "\"multi\": true}]}");
    cmd_ok("db", "{\"delete\": \"w\", \"deletes\": [{\"q\": {\"m\": {\"k\": 2}}, \"limit\": 0}]}");
    entries es;
    read_entries(&es);
    ck_assert_int_eq(es.n, 4);
    ck_assert_str_eq(op_of(es.e[2]), "u");
    expect_at(es.e[2], "o", "{\"$v\": 2, \"diff\": {\"smeta\": {\"u\": {\"k\": 3}}}}");
    ck_assert_str_eq(op_of(es.e[3]), "d");
    bson_t o;
    sub_of(es.e[1], "o", &o);
    ck_assert(bson_oid_equal(oid_at(es.e[3], "o._id"), oid_at(&o, "_id")));
    entries_clear(&es);
    stop();
}
END_TEST

/* Meta objects that differ only in field order are one series: one bucket, whose meta is the normalized object
 * (fields sorted). A measurement that would take the bucket past timeseriesBucketMaxSize (125 KiB) opens another. */
START_TEST(test_meta_normalized_and_size_limit)
{
    start(SIM_FORMAT_70, 0);
    cmd_ok("db", "{\"create\": \"w\", \"timeseries\": {\"timeField\": \"t\", \"metaField\": \"m\"}}");
    insert("[{\"t\": " D("1623711481000") ", \"m\": {\"b\": 1, \"a\": 2}, \"v\": 1}, {\"t\": " D(
        "1623711482000") ", "
                         "\"m\": {\"a\": 2, \"b\": 1}, \"v\": 2}]");
    entries es;
    read_entries(&es);
    ck_assert_int_eq(es.n, 1);
    expect_at(es.e[0], "o.meta", "{\"a\": 2, \"b\": 1}");
    expect_at(es.e[0], "o.data.v", "{\"0\": 1, \"1\": 2}");
    entries_clear(&es);

    size_t big = 70 * 1024;
    char *s70 = malloc(big + 1);
    ck_assert_ptr_nonnull(s70);
    memset(s70, 'x', big);
    s70[big] = 0;
    char *docs = bson_strdup_printf("[{\"t\": " D("1623711483000") ", \"m\": 9, \"s\": \"%s\"}, {\"t\": " D(
                                        "1623711484000") ", \"m\": 9, \"s\": \"%s\"}]",
                                    s70, s70);
    insert(docs);
    bson_free(docs);
    free(s70);
    read_entries(&es);
    ck_assert_int_eq(es.n, 3); /* two buckets of meta 9 */
    ck_assert_str_eq(op_of(es.e[1]), "i");
    ck_assert_str_eq(op_of(es.e[2]), "i");
    entries_clear(&es);
    stop();
}
END_TEST

/* 7.0 / 8.0: a measurement before the open bucket's time archives that bucket (no compression) and opens another; a
 * later time rollover first goes back to an archived bucket the measurement fits (useAlternateBucket). 5.0 closes
 * instead, so the same three measurements make three buckets there. Buckets of 60 s (bucketMaxSpanSeconds and
 * bucketRoundingSeconds 60). */
static void archive_case(sim_oplog_format f, const char *const ops[3])
{
    start(f, 0);
    cmd_ok("db", "{\"create\": \"w\", \"timeseries\": {\"timeField\": \"t\", \"bucketMaxSpanSeconds\": 60, "
                 "\"bucketRoundingSeconds\": 60}}");
    insert("[{\"t\": " D("1623711490000") ", \"v\": 1}]"); /* T0 + 10 s: bucket A at T0 */
    insert("[{\"t\": " D("1623711430000") ", \"v\": 2}]"); /* T0 - 50 s: before A: bucket B at T0 - 60 s */
    insert("[{\"t\": " D("1623711500000") ", \"v\": 3}]"); /* T0 + 20 s: 80 s after B's time; A holds it */
    entries es;
    read_entries(&es);
    ck_assert_int_eq(es.n, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_str_eq(op_of(es.e[i]), ops[i]);
    bson_t a;
    sub_of(es.e[0], "o", &a);
    if (strcmp(ops[2], "u") == 0) {
        ck_assert(bson_oid_equal(oid_at(es.e[2], "o2._id"), oid_at(&a, "_id")));
        if (f == SIM_FORMAT_70)
            expect_at(es.e[2], "o.diff.sdata",
                      "{\"st\": {\"i\": {\"1\": " D("1623711500000") "}}, \"sv\": {\"i\": "
                                                                     "{\"1\": 3}}}");
    }
    entries_clear(&es);
    stop();
}

START_TEST(test_archive_and_alternate)
{
    static const char *const reopen[3] = {"i", "i", "u"}, *const close50[3] = {"i", "i", "i"};
    archive_case(SIM_FORMAT_70, reopen);
    archive_case(SIM_FORMAT_80, reopen);
    archive_case(SIM_FORMAT_50, close50);
}
END_TEST

/* A bucket with more columns than the first allocation of its array of columns (8): the array is reallocated
 * while earlier columns hold values past a bson_t's inline buffer. Each column's values must survive the move (they
 * once did not: a moved bson_t kept pointing into the freed array, and mongosim crashed a few appends later). */
START_TEST(test_many_columns)
{
    start(SIM_FORMAT_50, 1000);
    cmd_ok("db", "{\"create\": \"w\", \"timeseries\": {\"timeField\": \"t\", \"metaField\": \"m\"}}");
    char buf[16384];
    size_t n = 0;
    n += (size_t)snprintf(buf + n, sizeof buf - n, "[");
    for (int i = 0; i < 20; i++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s{\"t\": {\"$date\": {\"$numberLong\": \"%lld\"}}, \"v\": %d}",
                              i ? ", " : "", 1623711480000LL + i, i);
    snprintf(buf + n, sizeof buf - n, "]");
    insert(buf);
    /* ten fields new to the bucket: the array of columns grows from 8 */
    insert("[{\"t\": " D("1623711480100") ", \"v\": 20, \"f0\": 0, \"f1\": 1, \"f2\": 2, \"f3\": 3, \"f4\": 4, "
                                          "\"f5\": 5, \"f6\": 6, \"f7\": 7, \"f8\": 8, \"f9\": 9}]");
    /* appends that make the moved columns reallocate their buffers */
    for (int k = 0; k < 4; k++) {
        n = 0;
        n += (size_t)snprintf(buf + n, sizeof buf - n, "[");
        for (int i = 0; i < 50; i++)
            n += (size_t)snprintf(buf + n, sizeof buf - n,
                                  "%s{\"t\": {\"$date\": {\"$numberLong\": \"%lld\"}}, \"v\": %d}", i ? ", " : "",
                                  1623711480200LL + k * 50 + i, 21 + k * 50 + i);
        snprintf(buf + n, sizeof buf - n, "]");
        insert(buf);
    }
    /* The stored bucket: 221 measurements; v holds 0..220 at its places, f0..f9 one value each at place 20. */
    mongoc_collection_t *c = mongoc_client_get_collection(client, "db", "system.buckets.w");
    bson_t q = BSON_INITIALIZER;
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(c, &q, NULL, NULL);
    const bson_t *doc;
    ck_assert(mongoc_cursor_next(cur, &doc));
    bson_iter_t it, col;
    ck_assert(bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, "data.v", &col));
    bson_iter_t v;
    ck_assert(bson_iter_recurse(&col, &v));
    int count = 0;
    while (bson_iter_next(&v)) {
        char key[16];
        snprintf(key, sizeof key, "%d", count);
        ck_assert_str_eq(bson_iter_key(&v), key);
        ck_assert_int_eq(bson_iter_as_int64(&v), count);
        count++;
    }
    ck_assert_int_eq(count, 221);
    for (int f = 0; f < 10; f++) {
        char path[32];
        snprintf(path, sizeof path, "data.f%d.20", f);
        ck_assert(bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, path, &col));
        ck_assert_int_eq(bson_iter_as_int64(&col), f);
    }
    ck_assert(!mongoc_cursor_next(cur, &doc));
    mongoc_cursor_destroy(cur);
    bson_destroy(&q);
    mongoc_collection_destroy(c);
    stop();
}
END_TEST

/* The reply of a command (ok or not): *code is its error code (0 when it worked). The caller destroys reply. */
static void command(const char *db, const char *json, bson_t *reply, int *code)
{
    bson_t *cmd = simtest_json(json);
    bson_error_t err;
    *code = mongoc_client_command_simple(client, db, cmd, NULL, reply, &err) ? 0 : (int)err.code;
    bson_destroy(cmd);
}

static bool marked(const bson_t *e)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, e, "isTimeseries") && BSON_ITER_HOLDS_BOOL(&it) && bson_iter_bool(&it);
}

/* --timeseries-viewless: a create with `timeseries` makes a collection under the name itself, logged as a create of
 * w (the buckets collection's options) and its meta index, both marked isTimeseries, with no system.buckets.w and no
 * view; the bucket writes of inserts and deletes are the 8.0 shapes on db.w, marked; listCollections shows w as type
 * "timeseries" with its uuid; find reads its buckets only with rawData (and without the option the server refuses
 * the collection's reads as for a view); the drop is marked too. Without the option rawData is unknown (40415). */
START_TEST(test_viewless)
{
    start_viewless = true;
    start(SIM_FORMAT_80, 0);
    start_viewless = false;
    cmd_ok("db", "{\"create\": \"w\", \"timeseries\": {\"timeField\": \"t\", \"metaField\": \"m\"}}");
    insert("[{\"t\": " D("1623711482000") ", \"m\": 1, \"v\": 1}, {\"t\": " D("1623711481000") ", \"m\": 1, "
                                                                                               "\"v\": 2}]");
    insert("[{\"t\": " D("1623711483000") ", \"m\": 1, \"v\": 3}]");
    entries es;
    read_all(&es);
    int creates = 0, indexes = 0;
    for (int i = 0; i < es.n; i++) {
        const char *ns = simtest_str(es.e[i], "ns");
        ck_assert_msg(strcmp(ns, "db.system.views") != 0 && strcmp(ns, "db.system.buckets.w") != 0, "an entry on %s",
                      ns);
        bson_t o;
        sub_of(es.e[i], "o", &o);
        if (strcmp(ns, "db.$cmd") == 0 && simtest_str(&o, "create") != NULL) {
            creates++;
            ck_assert_str_eq(simtest_str(&o, "create"), "w");
            ck_assert(marked(es.e[i]));
            expect_at(&o, "timeseries",
                      "{\"timeField\": \"t\", \"metaField\": \"m\", \"granularity\": \"seconds\", "
                      "\"bucketMaxSpanSeconds\": 3600}");
            ck_assert(has_field(&o, "clusteredIndex") && !has_field(&o, "idIndex"));
        } else if (strcmp(ns, "db.$cmd") == 0 && simtest_str(&o, "createIndexes") != NULL) {
            indexes++;
            ck_assert_str_eq(simtest_str(&o, "createIndexes"), "w");
            ck_assert_str_eq(simtest_str(&o, "name"), "m_1_t_1");
            ck_assert(marked(es.e[i]));
        }
    }
    ck_assert_int_eq(creates, 1);
    ck_assert_int_eq(indexes, 1);
    entries_clear(&es);

    read_ns("db.w", &es);
    ck_assert_int_eq(es.n, 2);
    ck_assert_str_eq(op_of(es.e[0]), "i");
    ck_assert_str_eq(op_of(es.e[1]), "u");
    ck_assert(marked(es.e[0]) && marked(es.e[1]));
    expect_at(es.e[0], "o.control",
              "{\"version\": 2, \"min\": {\"t\": " D(T0) ", \"v\": 1}, \"max\": {\"t\": " D(
                  "1623711482000") ", \"v\": 2}, \"count\": 2}");
    expect_column(es.e[0], "o.data.v", "{ \"v\" : 2 } { \"v\" : 1 }");
    expect_at(es.e[1], "o.diff.scontrol",
              "{\"u\": {\"count\": 3}, \"smin\": {\"u\": {\"t\": " D(T0) ", \"v\": 1}}, \"smax\": {\"u\": {\"t\": " D(
                  "1623711483000") ", \"v\": 3}}}");
    bson_oid_t bucket = *oid_at(es.e[0], "o._id");
    entries_clear(&es);

    /* listCollections: w alone, as a viewless time-series collection */
    bson_t reply;
    int code;
    command("db", "{\"listCollections\": 1}", &reply, &code);
    ck_assert_int_eq(code, 0);
    bson_t batch, first;
    sub_of(&reply, "cursor.firstBatch", &batch);
    char keys[128];
    keys_of(&batch, "", keys, sizeof keys);
    ck_assert_str_eq(keys, "0");
    sub_of(&batch, "0", &first);
    ck_assert_str_eq(simtest_str(&first, "name"), "w");
    ck_assert_str_eq(simtest_str(&first, "type"), "timeseries");
    expect_at(&first, "options",
              "{\"clusteredIndex\": true, \"timeseries\": {\"timeField\": \"t\", \"metaField\": \"m\", "
              "\"granularity\": \"seconds\", \"bucketMaxSpanSeconds\": 3600}}");
    bson_t info;
    sub_of(&first, "info", &info);
    ck_assert(has_field(&info, "uuid") && has_field(&info, "readOnly"));
    bson_destroy(&reply);

    /* reads: the measurements are not served; rawData gives the bucket (find, count, aggregate) */
    command("db", "{\"find\": \"w\"}", &reply, &code);
    ck_assert_int_eq(code, 2);
    bson_destroy(&reply);
    command("db", "{\"find\": \"w\", \"rawData\": true}", &reply, &code);
    ck_assert_int_eq(code, 0);
    sub_of(&reply, "cursor.firstBatch", &batch);
    keys_of(&batch, "", keys, sizeof keys);
    ck_assert_str_eq(keys, "0");
    sub_of(&batch, "0", &first);
    ck_assert(bson_oid_equal(oid_at(&first, "_id"), &bucket));
    expect_column(&first, "data.v", "{ \"v\" : 2 } { \"v\" : 1 } { \"v\" : 3 }");
    bson_destroy(&reply);
    command("db", "{\"count\": \"w\", \"rawData\": true}", &reply, &code);
    ck_assert_int_eq(code, 0);
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, &reply, "n") && bson_iter_as_int64(&it) == 1);
    bson_destroy(&reply);
    command("db", "{\"aggregate\": \"w\", \"pipeline\": [{\"$count\": \"n\"}], \"cursor\": {}, \"rawData\": true}",
            &reply, &code);
    ck_assert_int_eq(code, 0);
    bson_destroy(&reply);

    /* a delete of measurements rewrites the bucket on db.w, marked; the drop is marked */
    cmd_ok("db", "{\"delete\": \"w\", \"deletes\": [{\"q\": {\"v\": 2}, \"limit\": 0}]}");
    read_ns("db.w", &es);
    ck_assert_int_eq(es.n, 3);
    ck_assert_str_eq(op_of(es.e[2]), "u");
    ck_assert(marked(es.e[2]));
    expect_column(es.e[2], "o.data.v", "{ \"v\" : 1 } { \"v\" : 3 }");
    entries_clear(&es);
    cmd_ok("db", "{\"drop\": \"w\"}");
    read_all(&es);
    bson_t o;
    sub_of(es.e[es.n - 1], "o", &o);
    ck_assert_str_eq(simtest_str(&o, "drop"), "w");
    ck_assert(marked(es.e[es.n - 1]));
    entries_clear(&es);
    stop();

    /* a server without it (before 8.2) does not know rawData; its time-series collections keep their view */
    start(SIM_FORMAT_80, 0);
    cmd_ok("db", "{\"create\": \"w\", \"timeseries\": {\"timeField\": \"t\"}}");
    command("db", "{\"find\": \"w\", \"rawData\": true}", &reply, &code);
    ck_assert_int_eq(code, 40415);
    bson_destroy(&reply);
    insert("[{\"t\": " D("1623711482000") ", \"v\": 1}]");
    read_entries(&es);
    ck_assert_int_eq(es.n, 1);
    ck_assert(!marked(es.e[0]));
    entries_clear(&es);
    stop();
}
END_TEST

Suite *mongosim_tswrite_suite(void)
{
    Suite *s = suite_create("mongosim_tswrite");
    TCase *tc = tcase_create("buckets");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_count_limit_and_meta_grouping);
    tcase_add_test(tc, test_span_and_time_backward);
    tcase_add_test(tc, test_v50_diff_matches_real_entry);
    tcase_add_test(tc, test_v70_compress_on_close);
    tcase_add_test(tc, test_v80_compressed_appends);
    tcase_add_test(tc, test_versions);
    tcase_add_test(tc, test_v80_delete_update);
    tcase_add_test(tc, test_v70_delete_rebuilds_v1);
    tcase_add_test(tc, test_v50_meta_only);
    tcase_add_test(tc, test_meta_normalized_and_size_limit);
    tcase_add_test(tc, test_archive_and_alternate);
    tcase_add_test(tc, test_many_columns);
    tcase_add_test(tc, test_viewless);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_mongosim_ddl.c — mongosim's create options, views and time-series collections (tests/mongosim/ddl.c,
 * store.c): the exact oplog entry bodies a MongoDB 7.0 server writes for them (the sources are cited where mongosim
 * builds them): a time-series collection's create of DB.system.buckets.NAME, its default index and the view
 * definition inserted into DB.system.views; measurements as bucket inserts into DB.system.buckets.NAME; a plain
 * view; capped, clusteredIndex and validator options in the create entry; the server's errors for bad options;
 * listCollections' view of them; dropping a time-series collection.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../mongosim/ddl.h"
#include "../mongosim/store.h"
#include "simtest.h"



static void assert_json_eq(const bson_t *got, const char *json, const char *what)
{
    bson_t *want = simtest_json(json);
    simtest_assert_bson_eq(got, want, what);
    bson_destroy(want);
}





/* The 16-byte ui of a body, or NULL. */
static const uint8_t *ui_of(const bson_t *b)
{
    bson_iter_t it;
    bson_subtype_t st;
    uint32_t len;
    const uint8_t *data = NULL;
    if (!bson_iter_init_find(&it, b, "ui") || !BSON_ITER_HOLDS_BINARY(&it))
        return NULL;
    bson_iter_binary(&it, &st, &len, &data);
    return st == BSON_SUBTYPE_UUID && len == 16 ? data : NULL;
}

/* body = {op, ns, ui?, o}: checks op, ns, whether it has a ui, and the exact o. */
static void assert_body(const bson_t *body, const char *op, const char *ns, bool has_ui, const char *json_o)
{
    bson_t o;
    ck_assert_str_eq(simtest_str(body, "op"), op);
    ck_assert_str_eq(simtest_str(body, "ns"), ns);
    ck_assert_msg((ui_of(body) != NULL) == has_ui, "ui presence in %s %s", op, ns);
    ck_assert(simtest_sub(body, "o", &o));
    assert_json_eq(&o, json_o, ns);
}

/* create_collection.cpp, _createTimeseries: the buckets collection's $jsonSchema validator, for time field `t`. */
#define BUCKET_VALIDATOR_T                                                                                             \
    "\"validator\": {\"$jsonSchema\": {\"bsonType\": \"object\", \"required\": [\"_id\", \"control\", \"data\"], "     \
    "\"properties\": {\"_id\": {\"bsonType\": \"objectId\"}, \"control\": {\"bsonType\": \"object\", \"required\": "   \
    "[\"version\", \"min\", \"max\"], \"properties\": {\"version\": {\"bsonType\": \"number\"}, \"min\": "             \
    "{\"bsonType\": \"object\", \"required\": [\"t\"], \"properties\": {\"t\": {\"bsonType\": \"date\"}}}, \"max\": "  \
    "{\"bsonType\": \"object\", \"required\": [\"t\"], \"properties\": {\"t\": {\"bsonType\": \"date\"}}}, "           \
    "\"closed\": {\"bsonType\": \"bool\"}, \"count\": {\"bsonType\": \"number\", \"minimum\": 1}}, "                   \
    "\"additionalProperties\": false}, \"data\": {\"bsonType\": \"object\"}, \"meta\": {}}, "                          \
    "\"additionalProperties\": false}}"

#define ID_INDEX "\"idIndex\": {\"v\": 2, \"key\": {\"_id\": 1}, \"name\": \"_id_\"}"

static bool create_json(sim_store *s, const char *db, const char *json, simtest_sink *k, bson_error_t *err)
{
    bson_t *cmd = simtest_json(json);
    const char *coll = simtest_str(cmd, "create");
    ck_assert(coll != NULL);
    bool ok = store_create_cmd(s, db, coll, cmd, simtest_sink_emit, k, err);
    bson_destroy(cmd);
    return ok;
}

/* The entries of a time-series collection with a metaField, in the server's order: the buckets collection (no
 * idIndex: it is clustered), its {meta, control.min.t, control.max.t} index, system.views (first view of the
 * database), the view definition. A second one in the same database finds system.views there. */
START_TEST(test_timeseries_create_entries)
{
    sim_store *s = store_new(SIM_FORMAT_70);
    simtest_sink k = {{0}, 0};
    bson_error_t err;
    ck_assert_msg(create_json(s, "db",
                              "{\"create\": \"w\", \"timeseries\": {\"timeField\": \"t\", \"metaField\": \"m\"},"
                              " \"writeConcern\": {\"w\": 1}, \"lsid\": {\"id\": 1}, \"$db\": \"db\"}",
                              &k, &err),
                  "%s", err.message);
    ck_assert_int_eq(k.n, 4);
    assert_body(k.bodies[0], "c", "db.$cmd", true,
                "{\"create\": \"system.buckets.w\", " BUCKET_VALIDATOR_T ", \"clusteredIndex\": true, \"timeseries\": "
                "{\"timeField\": \"t\", \"metaField\": \"m\", \"granularity\": \"seconds\", \"bucketMaxSpanSeconds\": "
                "3600}}");
    assert_body(k.bodies[1], "c", "db.$cmd", true,
                "{\"createIndexes\": \"system.buckets.w\", \"v\": 2, \"key\": {\"meta\": 1, \"control.min.t\": 1, "
                "\"control.max.t\": 1}, \"name\": \"m_1_t_1\"}");
    ck_assert(memcmp(ui_of(k.bodies[0]), ui_of(k.bodies[1]), 16) == 0);
    assert_body(k.bodies[2], "c", "db.$cmd", true, "{\"create\": \"system.views\", " ID_INDEX "}");
    assert_body(k.bodies[3], "i", "db.system.views", true,
                "{\"_id\": \"db.w\", \"viewOn\": \"system.buckets.w\", \"pipeline\": [{\"$_internalUnpackBucket\": "
                "{\"timeField\": \"t\", \"metaField\": \"m\", \"bucketMaxSpanSeconds\": 3600}}]}");
    ck_assert(memcmp(ui_of(k.bodies[2]), ui_of(k.bodies[3]), 16) == 0);
    ck_assert_int_eq(store_ns_kind_of(s, "db", "w"), STORE_NS_TIMESERIES);
    simtest_sink_clear(&k);

    /* No metaField: no index. granularity "hours": bucketMaxSpanSeconds 2592000; expireAfterSeconds (int64) goes to
     * the buckets collection, after clusteredIndex. system.views exists already. */
    ck_assert_msg(create_json(s, "db",
                              "{\"create\": \"h\", \"timeseries\": {\"granularity\": \"hours\", \"timeField\": \"t\"}, "
                              "\"expireAfterSeconds\": 86400}",
                              &k, &err),
                  "%s", err.message);
    ck_assert_int_eq(k.n, 2);
    assert_body(k.bodies[0], "c", "db.$cmd", true,
                "{\"create\": \"system.buckets.h\", " BUCKET_VALIDATOR_T ", \"clusteredIndex\": true, "
                "\"expireAfterSeconds\": {\"$numberLong\": \"86400\"}, \"timeseries\": {\"timeField\": \"t\", "
                "\"granularity\": \"hours\", \"bucketMaxSpanSeconds\": 2592000}}");
    assert_body(k.bodies[1], "i", "db.system.views", true,
                "{\"_id\": \"db.h\", \"viewOn\": \"system.buckets.h\", \"pipeline\": [{\"$_internalUnpackBucket\": "
                "{\"timeField\": \"t\", \"bucketMaxSpanSeconds\": 2592000}}]}");
    simtest_sink_clear(&k);

    /* Custom bucketing: bucketRoundingSeconds == bucketMaxSpanSeconds, no granularity. */
    ck_assert(create_json(s, "db",
                          "{\"create\": \"r\", \"timeseries\": {\"timeField\": \"t\", \"bucketMaxSpanSeconds\": 600, "
                          "\"bucketRoundingSeconds\": 600}}",
                          &k, &err));
    bson_t o, ts;
    ck_assert(simtest_sub(k.bodies[0], "o", &o) && simtest_sub(&o, "timeseries", &ts));
    assert_json_eq(&ts, "{\"timeField\": \"t\", \"bucketRoundingSeconds\": 600, \"bucketMaxSpanSeconds\": 600}",
                   "custom bucketing");
    simtest_sink_clear(&k);

    /* The name is taken now, by the view; and so would be the buckets collection's. */
    ck_assert(!create_json(s, "db", "{\"create\": \"w\", \"timeseries\": {\"timeField\": \"t\"}}", &k, &err));
    ck_assert_int_eq(err.code, 48);
    ck_assert(!create_json(s, "db", "{\"create\": \"w\"}", &k, &err));
    ck_assert_int_eq(err.code, 48);
    ck_assert_int_eq(k.n, 0);
    store_free(s);
}
END_TEST

/* create_command.cpp / the TimeseriesOptions IDL: the errors of bad time-series options, and nothing written. */
START_TEST(test_timeseries_create_errors)
{
    static const struct {
        const char *json;
        int code;
    } cases[] = {
        {"{\"create\": \"x\", \"timeseries\": {\"metaField\": \"m\"}}", 40414},
        {"{\"create\": \"x\", \"timeseries\": {\"timeField\": \"t\", \"bogus\": 1}}", 40415},
        {"{\"create\": \"x\", \"timeseries\": {\"timeField\": \"t\", \"metaField\": \"_id\"}}", 72},
        {"{\"create\": \"x\", \"timeseries\": {\"timeField\": \"t\", \"metaField\": \"t\"}}", 72},
        {"{\"create\": \"x\", \"timeseries\": {\"timeField\": \"a.b\"}}", 72},
        {"{\"create\": \"x\", \"timeseries\": {\"timeField\": \"t\", \"granularity\": \"days\"}}", 2},
        {"{\"create\": \"x\", \"timeseries\": {\"timeField\": \"t\", \"granularity\": \"hours\", "
         "\"bucketMaxSpanSeconds\": 60}}",
         72},
        {"{\"create\": \"x\", \"timeseries\": {\"timeField\": \"t\", \"bucketMaxSpanSeconds\": 60}}", 72},
        {"{\"create\": \"x\", \"timeseries\": {\"timeField\": \"t\"}, \"capped\": true, \"size\": 100}", 72},
        {"{\"create\": \"x\", \"timeseries\": {\"timeField\": \"t\"}, \"validator\": {}}", 72},
        {"{\"create\": \"x\", \"timeseries\": 5}", 14},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sim_store *s = store_new(SIM_FORMAT_70);
        simtest_sink k = {{0}, 0};
        bson_error_t err;
        ck_assert_msg(!create_json(s, "db", cases[i].json, &k, &err), "accepted %s", cases[i].json);
        ck_assert_msg((int)err.code == cases[i].code, "%s: code %u (%s), want %d", cases[i].json, err.code, err.message,
                      cases[i].code);
        ck_assert_int_eq(k.n, 0);
        store_free(s);
    }
}
END_TEST

/* A measurement becomes an insert of a bucket of its own into db.system.buckets.w (never db.w): {_id: ObjectId with
 * the rounded time as its timestamp, control: {version: 1, min, max}, meta (object fields sorted), data: {f: {"0":
 * v}}} (timeseries_write_util.cpp, makeNewDocument; bucket_catalog_internal.cpp, generateBucketOID). */
START_TEST(test_timeseries_insert_bucket)
{
    sim_store *s = store_new(SIM_FORMAT_70);
    simtest_sink k = {{0}, 0};
    bson_error_t err;
    ck_assert(create_json(s, "db", "{\"create\": \"w\", \"timeseries\": {\"timeField\": \"t\", \"metaField\": \"m\"}}",
                          &k, &err));
    const uint8_t *bui = ui_of(k.bodies[0]);
    uint8_t buckets_ui[16];
    memcpy(buckets_ui, bui, 16);
    simtest_sink_clear(&k);

    /* 2021-06-14T22:58:51.065Z: rounded down to the minute (granularity "seconds" rounds to 60 s). */
    bson_t *m = simtest_json("{\"t\": {\"$date\": {\"$numberLong\": \"1623711531065\"}}, \"m\": {\"z\": 1, \"a\": {\"y\": 2, "
                  "\"b\": 3}}, \"v\": 5.5, \"_id\": {\"$oid\": \"60c7df2b15caf5ee94e01a72\"}}");
    ck_assert_msg(store_insert(s, "db", "w", m, simtest_sink_emit, &k, &err), "%s", err.message);
    bson_destroy(m);
    ck_assert_int_eq(k.n, 1);
    ck_assert_str_eq(simtest_str(k.bodies[0], "op"), "i");
    ck_assert_str_eq(simtest_str(k.bodies[0], "ns"), "db.system.buckets.w");
    ck_assert(memcmp(ui_of(k.bodies[0]), buckets_ui, 16) == 0);
    bson_t o;
    bson_iter_t it;
    ck_assert(simtest_sub(k.bodies[0], "o", &o));
    ck_assert(bson_iter_init_find(&it, &o, "_id") && BSON_ITER_HOLDS_OID(&it));
    const bson_oid_t *oid = bson_iter_oid(&it);
    ck_assert_int_eq((int64_t)bson_oid_get_time_t(oid), 1623711480); /* 22:58:00 */
    char hex[25], want[1024];
    bson_oid_to_string(oid, hex);
    snprintf(want, sizeof want,
             "{\"_id\": {\"$oid\": \"%s\"}, \"control\": {\"version\": 1, \"min\": {\"t\": {\"$date\": "
             "{\"$numberLong\": \"1623711480000\"}}, \"v\": 5.5, \"_id\": {\"$oid\": \"60c7df2b15caf5ee94e01a72\"}}, "
             "\"max\": {\"t\": {\"$date\": {\"$numberLong\": \"1623711531065\"}}, \"v\": 5.5, \"_id\": {\"$oid\": "
             "\"60c7df2b15caf5ee94e01a72\"}}}, \"meta\": {\"a\": {\"b\": 3, \"y\": 2}, \"z\": 1}, \"data\": {\"t\": "
             "{\"0\": {\"$date\": {\"$numberLong\": \"1623711531065\"}}}, \"v\": {\"0\": 5.5}, \"_id\": {\"0\": "
             "{\"$oid\": \"60c7df2b15caf5ee94e01a72\"}}}}",
             hex);
    assert_json_eq(&o, want, "bucket");
    simtest_sink_clear(&k);

    /* The measurement is in the buckets collection only; no _id was added to one without. */
    ck_assert_int_eq(store_count(s, "db", "system.buckets.w"), 1);
    ck_assert_int_eq(store_count(s, "db", "w"), 0);
    m = simtest_json("{\"t\": {\"$date\": {\"$numberLong\": \"1623711600000\"}}, \"x\": 1}");
    ck_assert(store_insert(s, "db", "w", m, simtest_sink_emit, &k, &err));
    bson_destroy(m);
    ck_assert(simtest_sub(k.bodies[0], "o", &o));
    bson_t data;
    ck_assert(simtest_sub(&o, "data", &data));
    assert_json_eq(&data, "{\"t\": {\"0\": {\"$date\": {\"$numberLong\": \"1623711600000\"}}}, \"x\": {\"0\": 1}}",
                   "data without meta or _id");
    ck_assert(!bson_iter_init_find(&it, &o, "meta"));
    simtest_sink_clear(&k);
    ck_assert_int_eq(store_count(s, "db", "system.buckets.w"), 2);

    /* No date in the time field: 2 BadValue, nothing written (extractTimeAndMeta). */
    m = simtest_json("{\"t\": 5, \"x\": 1}");
    ck_assert(!store_insert(s, "db", "w", m, simtest_sink_emit, &k, &err));
    ck_assert_int_eq(err.code, 2);
    ck_assert_str_eq(err.message, "'t' must be present and contain a valid BSON UTC datetime value");
    bson_destroy(m);
    ck_assert_int_eq(k.n, 0);

    /* Updates and deletes on it are not modelled: refused, not silently applied elsewhere. */
    bson_t *q = simtest_json("{\"_id\": 1}"), *u = simtest_json("{\"$set\": {\"x\": 2}}");
    ck_assert(!store_update(s, "db", "w", q, u, true, NULL, simtest_sink_emit, &k, &err));
    ck_assert_int_eq(err.code, 2);
    int64_t n;
    ck_assert(!store_delete(s, "db", "w", q, 1, &n, simtest_sink_emit, &k, &err));
    ck_assert_int_eq(k.n, 0);
    bson_destroy(q);
    bson_destroy(u);
    store_free(s);
}
END_TEST

/* A plain view: system.views is created, then {_id, viewOn, pipeline} inserted into it; no create entry of the view
 * itself (create_collection.cpp _createView; views/durable_view_catalog.cpp). Writes to the view fail with 166. */
START_TEST(test_view_create_entries)
{
    sim_store *s = store_new(SIM_FORMAT_70);
    simtest_sink k = {{0}, 0};
    bson_error_t err;
    ck_assert_msg(create_json(s, "db",
                              "{\"create\": \"v\", \"viewOn\": \"c\", \"pipeline\": [{\"$match\": {\"x\": 1}}]}", &k,
                              &err),
                  "%s", err.message);
    ck_assert_int_eq(k.n, 2);
    assert_body(k.bodies[0], "c", "db.$cmd", true, "{\"create\": \"system.views\", " ID_INDEX "}");
    assert_body(k.bodies[1], "i", "db.system.views", true,
                "{\"_id\": \"db.v\", \"viewOn\": \"c\", \"pipeline\": [{\"$match\": {\"x\": 1}}]}");
    simtest_sink_clear(&k);
    /* Without a pipeline: pipeline [] in the definition. */
    ck_assert(create_json(s, "db", "{\"create\": \"v2\", \"viewOn\": \"v\"}", &k, &err));
    ck_assert_int_eq(k.n, 1);
    assert_body(k.bodies[0], "i", "db.system.views", true, "{\"_id\": \"db.v2\", \"viewOn\": \"v\", \"pipeline\": []}");
    simtest_sink_clear(&k);
    ck_assert_int_eq(store_ns_kind_of(s, "db", "v"), STORE_NS_VIEW);

    bson_t *d = simtest_json("{\"_id\": 1}");
    ck_assert(!store_insert(s, "db", "v", d, simtest_sink_emit, &k, &err));
    ck_assert_int_eq(err.code, 166);
    ck_assert_int_eq(k.n, 0);
    bson_destroy(d);
    /* A view cannot be renamed (rename_collection.cpp): 166. */
    ck_assert(!store_rename(s, "db", "v", "db", "v3", false, simtest_sink_emit, &k, &err));
    ck_assert_int_eq(err.code, 166);

    /* Errors: pipeline without viewOn (72), a view on buckets (73), a view named system.* (73), options on a view. */
    ck_assert(!create_json(s, "db", "{\"create\": \"p\", \"pipeline\": []}", &k, &err));
    ck_assert_int_eq(err.code, 72);
    ck_assert(!create_json(s, "db", "{\"create\": \"p\", \"viewOn\": \"system.buckets.w\"}", &k, &err));
    ck_assert_int_eq(err.code, 73);
    ck_assert(!create_json(s, "db", "{\"create\": \"system.p\", \"viewOn\": \"c\"}", &k, &err));
    ck_assert_int_eq(err.code, 73);
    ck_assert(!create_json(s, "db", "{\"create\": \"p\", \"viewOn\": \"c\", \"pipeline\": [1]}", &k, &err));
    ck_assert_int_eq(err.code, 14);
    ck_assert_int_eq(k.n, 0);

    /* Drop of a view: its definition deleted ('d' on db.system.views, o {_id}). */
    bool existed = false;
    ck_assert(store_drop(s, "db", "v2", &existed, simtest_sink_emit, &k, &err));
    ck_assert(existed);
    ck_assert_int_eq(k.n, 1);
    assert_body(k.bodies[0], "d", "db.system.views", true, "{\"_id\": \"db.v2\"}");
    simtest_sink_clear(&k);
    ck_assert_int_eq(store_ns_kind_of(s, "db", "v2"), STORE_NS_NONE);
    store_free(s);
}
END_TEST

/* Collection options in the create entry, in CollectionOptions::appendBSON order, as a 7.0 server normalizes them:
 * size rounded up to 256 and appended with appendNumber, max <= 0 as 0x7fffffff (a double: appendNumber above 2^30),
 * a clusteredIndex spec completed to {v, key, name, unique} and no idIndex. */
START_TEST(test_create_options_entries)
{
    static const struct {
        const char *cmd, *o;
    } cases[] = {
        {"{\"create\": \"a\", \"capped\": true, \"size\": 1000, \"max\": 5}",
         "{\"create\": \"a\", \"capped\": true, \"size\": 1024, \"max\": 5, " ID_INDEX "}"},
        {"{\"create\": \"b\", \"max\": 0, \"size\": {\"$numberLong\": \"4096\"}, \"capped\": 1}",
         "{\"create\": \"b\", \"capped\": true, \"size\": 4096, \"max\": 2147483647.0, " ID_INDEX "}"},
        {"{\"create\": \"c\", \"capped\": true, \"size\": {\"$numberLong\": \"2199023255552\"}}",
         "{\"create\": \"c\", \"capped\": true, \"size\": {\"$numberLong\": \"2199023255552\"}, " ID_INDEX "}"},
        {"{\"create\": \"d\", \"capped\": true, \"size\": 2000000000}",
         "{\"create\": \"d\", \"capped\": true, \"size\": 2000000000.0, " ID_INDEX "}"},
        {"{\"create\": \"e\", \"clusteredIndex\": {\"key\": {\"_id\": 1}, \"unique\": true}}",
         "{\"create\": \"e\", \"clusteredIndex\": {\"v\": 2, \"key\": {\"_id\": 1}, \"name\": \"_id_\", \"unique\": "
         "true}}"},
        {"{\"create\": \"f\", \"expireAfterSeconds\": 60, \"clusteredIndex\": {\"unique\": true, \"name\": \"cl\", "
         "\"key\": {\"_id\": 1}, \"v\": 2}}",
         "{\"create\": \"f\", \"clusteredIndex\": {\"v\": 2, \"key\": {\"_id\": 1}, \"name\": \"cl\", \"unique\": "
         "true}, \"expireAfterSeconds\": {\"$numberLong\": \"60\"}}"},
        {"{\"create\": \"g\", \"validationAction\": \"warn\", \"validator\": {\"$jsonSchema\": {\"required\": "
         "[\"x\"]}}, \"validationLevel\": \"moderate\", \"writeConcern\": {\"w\": \"majority\"}}",
         "{\"create\": \"g\", \"validator\": {\"$jsonSchema\": {\"required\": [\"x\"]}}, \"validationLevel\": "
         "\"moderate\", \"validationAction\": \"warn\", " ID_INDEX "}"},
        {"{\"create\": \"h\", \"capped\": false}", "{\"create\": \"h\", " ID_INDEX "}"},
    };
    sim_store *s = store_new(SIM_FORMAT_70);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        simtest_sink k = {{0}, 0};
        bson_error_t err;
        ck_assert_msg(create_json(s, "db", cases[i].cmd, &k, &err), "%s: %s", cases[i].cmd, err.message);
        ck_assert_int_eq(k.n, 1);
        assert_body(k.bodies[0], "c", "db.$cmd", true, cases[i].o);
        simtest_sink_clear(&k);
    }
    /* The options stay with the collection: an insert into it, then a copy of the store, keep them (listCollections
     * below); the first insert into a new collection still logs a plain create. */
    simtest_sink k = {{0}, 0};
    bson_error_t err;
    bson_t *d = simtest_json("{\"_id\": 1}");
    ck_assert(store_insert(s, "db", "new", d, simtest_sink_emit, &k, &err));
    bson_destroy(d);
    assert_body(k.bodies[0], "c", "db.$cmd", true, "{\"create\": \"new\", " ID_INDEX "}");
    simtest_sink_clear(&k);
    store_free(s);
}
END_TEST

START_TEST(test_create_options_errors)
{
    static const struct {
        const char *json;
        int code;
    } cases[] = {
        {"{\"create\": \"x\", \"capped\": true}", 72},
        {"{\"create\": \"x\", \"size\": 100}", 72},
        {"{\"create\": \"x\", \"capped\": true, \"size\": 0}", 51024},
        {"{\"create\": \"x\", \"clusteredIndex\": true}", 5979703},
        {"{\"create\": \"x\", \"clusteredIndex\": {\"key\": {\"_id\": 1}, \"unique\": false}}", 5979700},
        {"{\"create\": \"x\", \"clusteredIndex\": {\"key\": {\"_id\": 1}}}", 40414},
        {"{\"create\": \"x\", \"clusteredIndex\": {\"key\": {\"a\": 1}, \"unique\": true}}", 197},
        {"{\"create\": \"x\", \"clusteredIndex\": {\"key\": {\"_id\": 1}, \"unique\": true, \"v\": 1}}", 5979704},
        {"{\"create\": \"x\", \"clusteredIndex\": 5}", 5979702},
        {"{\"create\": \"x\", \"expireAfterSeconds\": 5}", 72},
        {"{\"create\": \"x\", \"validator\": 5}", 14},
        {"{\"create\": \"x\", \"validationLevel\": \"loose\"}", 2},
        {"{\"create\": \"x\", \"bogus\": 1}", 40415},
        {"{\"create\": \"x\", \"collation\": {\"locale\": \"fr\"}}", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sim_store *s = store_new(SIM_FORMAT_70);
        simtest_sink k = {{0}, 0};
        bson_error_t err;
        ck_assert_msg(!create_json(s, "db", cases[i].json, &k, &err), "accepted %s", cases[i].json);
        ck_assert_msg((int)err.code == cases[i].code, "%s: code %u (%s), want %d", cases[i].json, err.code, err.message,
                      cases[i].code);
        ck_assert_int_eq(k.n, 0);
        ck_assert_int_eq(store_ns_kind_of(s, "db", "x"), STORE_NS_NONE);
        store_free(s);
    }
}
END_TEST

typedef struct {
    char names[8][64], types[8][16];
    bson_t *options[8];
    bool uuid[8], id_index[8], read_only[8];
    int n;
} ns_seen;

static void grab_ns(void *ctx, const store_ns_info *ns)
{
    ns_seen *v = ctx;
    ck_assert_int_lt(v->n, 8);
    snprintf(v->names[v->n], sizeof v->names[0], "%s", ns->name);
    snprintf(v->types[v->n], sizeof v->types[0], "%s", ns->type);
    v->options[v->n] = bson_copy(ns->options);
    v->uuid[v->n] = ns->uuid != NULL;
    v->id_index[v->n] = ns->id_index;
    v->read_only[v->n] = ns->read_only;
    v->n++;
}

/* listCollections (commands/list_collections.cpp): the view and the time-series collection beside the collections,
 * by name; then a time-series collection's drop: the view's definition deleted, then the buckets collection dropped
 * (drop_collection.cpp); and the options survive store_clone and a save/load in mongodump's layout. */
START_TEST(test_list_drop_and_persist)
{
    sim_store *s = store_new(SIM_FORMAT_70);
    simtest_sink k = {{0}, 0};
    bson_error_t err;
    ck_assert(create_json(s, "db", "{\"create\": \"w\", \"timeseries\": {\"timeField\": \"t\", \"metaField\": \"m\"}}",
                          &k, &err));
    ck_assert(create_json(s, "db", "{\"create\": \"v\", \"viewOn\": \"w\"}", &k, &err));
    ck_assert(create_json(s, "db", "{\"create\": \"cap\", \"capped\": true, \"size\": 10}", &k, &err));
    simtest_sink_clear(&k);

    sim_store *copy = store_clone(s);
    ns_seen v = {0};
    store_list_namespaces(copy, "db", grab_ns, &v);
    ck_assert_int_eq(v.n, 5);
    const char *names[] = {"cap", "system.buckets.w", "system.views", "v", "w"};
    const char *types[] = {"collection", "collection", "collection", "view", "timeseries"};
    for (int i = 0; i < 5; i++) {
        ck_assert_str_eq(v.names[i], names[i]);
        ck_assert_str_eq(v.types[i], types[i]);
    }
    assert_json_eq(v.options[0], "{\"capped\": true, \"size\": 256}", "capped options");
    ck_assert(v.uuid[0] && v.id_index[0] && !v.read_only[0]);
    ck_assert(v.uuid[1] && !v.id_index[1]); /* buckets: clustered */
    assert_json_eq(v.options[3], "{\"viewOn\": \"w\", \"pipeline\": []}", "view options");
    ck_assert(!v.uuid[3] && !v.id_index[3] && v.read_only[3]);
    assert_json_eq(v.options[4],
                   "{\"timeseries\": {\"timeField\": \"t\", \"metaField\": \"m\", \"granularity\": \"seconds\", "
                   "\"bucketMaxSpanSeconds\": 3600}}",
                   "timeseries options");
    ck_assert(!v.uuid[4] && !v.id_index[4] && !v.read_only[4]);
    for (int i = 0; i < v.n; i++)
        bson_destroy(v.options[i]);
    store_free(copy);

    /* Saved and loaded: the buckets collection keeps its options, so w is still a time-series collection. */
    char dir[] = "/tmp/mongosim_ddl_XXXXXX";
    ck_assert(mkdtemp(dir) != NULL);
    ck_assert_msg(store_save_dir(s, dir, &err), "%s", err.message);
    sim_store *loaded = store_new(SIM_FORMAT_70);
    ck_assert_msg(store_load_dir(loaded, dir, &err), "%s", err.message);
    ck_assert_int_eq(store_ns_kind_of(loaded, "db", "w"), STORE_NS_TIMESERIES);
    ck_assert_int_eq(store_ns_kind_of(loaded, "db", "v"), STORE_NS_VIEW);
    bson_t *m = simtest_json("{\"t\": {\"$date\": {\"$numberLong\": \"0\"}}}");
    ck_assert(store_insert(loaded, "db", "w", m, simtest_sink_emit, &k, &err));
    bson_destroy(m);
    ck_assert_str_eq(simtest_str(k.bodies[0], "ns"), "db.system.buckets.w");
    simtest_sink_clear(&k);
    store_free(loaded);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);

    bool existed = false;
    ck_assert(store_drop(s, "db", "w", &existed, simtest_sink_emit, &k, &err));
    ck_assert(existed);
    ck_assert_int_eq(k.n, 2);
    assert_body(k.bodies[0], "d", "db.system.views", true, "{\"_id\": \"db.w\"}");
    assert_body(k.bodies[1], "c", "db.$cmd", true, "{\"drop\": \"system.buckets.w\"}");
    simtest_sink_clear(&k);
    ck_assert_int_eq(store_ns_kind_of(s, "db", "w"), STORE_NS_NONE);
    ck_assert_int_eq(store_ns_kind_of(s, "db", "system.buckets.w"), STORE_NS_NONE);
    store_free(s);
}
END_TEST

Suite *mongosim_ddl_suite(void); /* called by the generated runner list */

Suite *mongosim_ddl_suite(void)
{
    Suite *s = suite_create("mongosim_ddl");
    TCase *tc = tcase_create("ddl");
    tcase_add_test(tc, test_timeseries_create_entries);
    tcase_add_test(tc, test_timeseries_create_errors);
    tcase_add_test(tc, test_timeseries_insert_bucket);
    tcase_add_test(tc, test_view_create_entries);
    tcase_add_test(tc, test_create_options_entries);
    tcase_add_test(tc, test_create_options_errors);
    tcase_add_test(tc, test_list_drop_and_persist);
    suite_add_tcase(s, tc);
    return s;
}

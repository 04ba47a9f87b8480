/*
 * test_mongosim_projection.c — find projections in mongosim (tests/mongosim/projection.c): first the engine on bare
 * documents (every $slice form, the paths it walks, inclusion, exclusion, nested paths, the projection's type, and
 * the server's errors with their messages), then over the wire with libmongoc against an in-process mongosim: a
 * projected find and its getMores on a collection (with _id projected away) and on local.oplog.rs (a window of an
 * applyOps array, as oplog2pg fetches a large transaction entry), skip, and the errors as a client sees them.
 *
 * The expected outcomes are the server's rules as projection.c records them with their sources (mongodb/mongo
 * projection_parser.cpp, find_projection_executor.cpp, the projection executors; FerretDB's compatibility tests
 * for the $slice edge cases and the 28667 messages).
 */
#include <bson/bson.h>
#include <check.h>
#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "../mongosim/projection.h"
#include "../mongosim/server.h"
#include "simtest.h"

/* ---- the engine on bare documents ---- */

/* The projection of doc by proj is want, byte for byte (types and field order included). */
static void expect(const char *doc, const char *proj, const char *want)
{
    bson_t *d = simtest_json(doc), *p = simtest_json(proj), *w = simtest_json(want);
    sim_projection *pr = NULL;
    sim_proj_error err;
    ck_assert_msg(projection_parse(p, &pr, &err), "%s: refused with %d: %s", proj, err.code, err.message);
    ck_assert_msg(pr != NULL, "%s: parsed as no projection", proj);
    bson_t out = BSON_INITIALIZER;
    projection_apply(pr, d, &out);
    char what[512];
    snprintf(what, sizeof what, "%s on %s", proj, doc);
    simtest_assert_bson_eq(&out, w, what);
    bson_destroy(&out);
    projection_free(pr);
    bson_destroy(d);
    bson_destroy(p);
    bson_destroy(w);
}

/* proj is refused with code (and, when msg is not NULL, exactly this message). */
static void expect_error(const char *proj, int code, const char *msg)
{
    bson_t *p = simtest_json(proj);
    sim_projection *pr = NULL;
    sim_proj_error err;
    bool ok = projection_parse(p, &pr, &err);
    ck_assert_msg(!ok, "%s: accepted, want error %d", proj, code);
    ck_assert_msg(pr == NULL, "%s: a projection came back with the error", proj);
    ck_assert_msg(err.code == code, "%s: error %d (%s), want %d", proj, err.code, err.message, code);
    if (msg)
        ck_assert_msg(strcmp(err.message, msg) == 0, "%s:\n got  %s\n want %s", proj, err.message, msg);
    bson_destroy(p);
}

#define ARR5 "{\"_id\": 1, \"a\": [1, 2, 3, 4, 5], \"z\": \"after\"}"

/* $slice n, -n, 0, [skip, limit], [-k, limit], out of range, and the number conversions. A projection of $slice
 * only keeps every other field, in place. */
START_TEST(test_slice_forms)
{
    expect(ARR5, "{\"a\": {\"$slice\": 2}}", "{\"_id\": 1, \"a\": [1, 2], \"z\": \"after\"}");
    expect(ARR5, "{\"a\": {\"$slice\": -2}}", "{\"_id\": 1, \"a\": [4, 5], \"z\": \"after\"}");
    expect(ARR5, "{\"a\": {\"$slice\": 0}}", "{\"_id\": 1, \"a\": [], \"z\": \"after\"}");
    expect(ARR5, "{\"a\": {\"$slice\": 9}}", "{\"_id\": 1, \"a\": [1, 2, 3, 4, 5], \"z\": \"after\"}");
    expect(ARR5, "{\"a\": {\"$slice\": -9}}", "{\"_id\": 1, \"a\": [1, 2, 3, 4, 5], \"z\": \"after\"}");
    expect(ARR5, "{\"a\": {\"$slice\": [1, 2]}}", "{\"_id\": 1, \"a\": [2, 3], \"z\": \"after\"}");
    expect(ARR5, "{\"a\": {\"$slice\": [3, 9]}}", "{\"_id\": 1, \"a\": [4, 5], \"z\": \"after\"}");
    expect(ARR5, "{\"a\": {\"$slice\": [5, 1]}}", "{\"_id\": 1, \"a\": [], \"z\": \"after\"}");
    expect(ARR5, "{\"a\": {\"$slice\": [-2, 1]}}", "{\"_id\": 1, \"a\": [4], \"z\": \"after\"}");
    expect(ARR5, "{\"a\": {\"$slice\": [-4, 2]}}", "{\"_id\": 1, \"a\": [2, 3], \"z\": \"after\"}");
    /* -skip before the start: from the start (the mongoose issue 12474 reports [-100, 5] as the first five). */
    expect(ARR5, "{\"a\": {\"$slice\": [-100, 2]}}", "{\"_id\": 1, \"a\": [1, 2], \"z\": \"after\"}");
    /* Doubles truncate, NaN is 0, Infinity and longs past int32 clamp. */
    expect(ARR5, "{\"a\": {\"$slice\": 1.9}}", "{\"_id\": 1, \"a\": [1], \"z\": \"after\"}");
    expect(ARR5, "{\"a\": {\"$slice\": [-2.5, 2]}}", "{\"_id\": 1, \"a\": [4, 5], \"z\": \"after\"}");
    expect(ARR5, "{\"a\": {\"$slice\": [1, 2.8]}}", "{\"_id\": 1, \"a\": [2, 3], \"z\": \"after\"}");
    expect(ARR5, "{\"a\": {\"$slice\": {\"$numberDouble\": \"NaN\"}}}", "{\"_id\": 1, \"a\": [], \"z\": \"after\"}");
    expect(ARR5, "{\"a\": {\"$slice\": {\"$numberDouble\": \"-Infinity\"}}}",
           "{\"_id\": 1, \"a\": [1, 2, 3, 4, 5], \"z\": \"after\"}");
    expect(ARR5, "{\"a\": {\"$slice\": {\"$numberLong\": \"2\"}}}", "{\"_id\": 1, \"a\": [1, 2], \"z\": \"after\"}");
    expect(ARR5, "{\"a\": {\"$slice\": [{\"$numberLong\": \"-4294967297\"}, 1]}}",
           "{\"_id\": 1, \"a\": [1], \"z\": \"after\"}");
    /* The elements are copied as they are, whatever their type. */
    expect("{\"a\": [{\"x\": 1}, [2], \"s\", null, {\"$numberLong\": \"7\"}]}", "{\"a\": {\"$slice\": [1, 4]}}",
           "{\"a\": [[2], \"s\", null, {\"$numberLong\": \"7\"}]}");
}
END_TEST

/* Dotted paths: through documents, through arrays of documents (other elements, nested arrays too, kept), a
 * non-array value kept, a missing or scalar intermediate leaving the document unchanged. */
START_TEST(test_slice_paths)
{
    const char *doc = "{\"_id\": 1, \"o\": {\"pre\": 0, \"applyOps\": [10, 11, 12, 13], \"post\": true}, \"ts\": 5}";
    expect(doc, "{\"o.applyOps\": {\"$slice\": [1, 2]}}",
           "{\"_id\": 1, \"o\": {\"pre\": 0, \"applyOps\": [11, 12], \"post\": true}, \"ts\": 5}");
    expect(doc, "{\"o.applyOps\": {\"$slice\": -1}}",
           "{\"_id\": 1, \"o\": {\"pre\": 0, \"applyOps\": [13], \"post\": true}, \"ts\": 5}");
    expect(doc, "{\"o\": {\"applyOps\": {\"$slice\": 1}}}",
           "{\"_id\": 1, \"o\": {\"pre\": 0, \"applyOps\": [10], \"post\": true}, \"ts\": 5}");
    /* Not an array: as it is. */
    expect(doc, "{\"o.pre\": {\"$slice\": 1}}", doc);
    expect(doc, "{\"o\": {\"$slice\": 1}}", doc);
    /* Missing, or a scalar on the way. */
    expect(doc, "{\"x.y\": {\"$slice\": 1}}", doc);
    expect(doc, "{\"ts.y\": {\"$slice\": 1}}", doc);
    expect(doc, "{\"o.applyOps.y\": {\"$slice\": 1}}", doc);
    /* An array of documents on the way: each document walked; scalars and nested arrays kept. */
    expect("{\"a\": [{\"v\": [1, 2, 3]}, 7, [{\"v\": [1, 2]}], {\"w\": 1}, {\"v\": \"s\"}]}",
           "{\"a.v\": {\"$slice\": 1}}", "{\"a\": [{\"v\": [1]}, 7, [{\"v\": [1, 2]}], {\"w\": 1}, {\"v\": \"s\"}]}");
    /* Two $slice at once. */
    expect("{\"a\": [1, 2, 3], \"b\": {\"c\": [4, 5, 6]}}", "{\"a\": {\"$slice\": -1}, \"b.c\": {\"$slice\": [1, 1]}}",
           "{\"a\": [3], \"b\": {\"c\": [5]}}");
}
END_TEST

/* A projection of $slice and _id is an inclusion when _id is included (only _id and the sliced path), an exclusion
 * otherwise; with other fields, their kind decides. */
START_TEST(test_slice_with_inclusion_exclusion)
{
    const char *doc = "{\"_id\": 1, \"a\": [1, 2, 3], \"b\": {\"c\": [4, 5, 6], \"d\": 7}, \"e\": \"x\"}";
    expect(doc, "{\"_id\": 1, \"a\": {\"$slice\": 1}}", "{\"_id\": 1, \"a\": [1]}");
    expect(doc, "{\"_id\": 0, \"a\": {\"$slice\": 1}}",
           "{\"a\": [1], \"b\": {\"c\": [4, 5, 6], \"d\": 7}, \"e\": \"x\"}");
    /* Inclusion: the sliced path is included, in the document's order; in a sub-document only it. */
    expect(doc, "{\"e\": 1, \"a\": {\"$slice\": -1}}", "{\"_id\": 1, \"a\": [3], \"e\": \"x\"}");
    expect(doc, "{\"e\": 1, \"b.c\": {\"$slice\": 1}, \"_id\": 0}", "{\"b\": {\"c\": [4]}, \"e\": \"x\"}");
    /* Exclusion: everything else stays, the sub-document's other fields too. */
    expect(doc, "{\"e\": 0, \"b.c\": {\"$slice\": 1}}",
           "{\"_id\": 1, \"a\": [1, 2, 3], \"b\": {\"c\": [4], \"d\": 7}}");
    expect(doc, "{\"b.c\": {\"$slice\": [1, 1]}, \"a\": 0}",
           "{\"_id\": 1, \"b\": {\"c\": [5], \"d\": 7}, \"e\": \"x\"}");
}
END_TEST

/* Inclusion: _id unless excluded; dotted and nested paths; arrays walked (nested arrays too), scalars where a
 * sub-path was asked dropped, documents without it left empty. */
START_TEST(test_inclusion)
{
    const char *doc =
        "{\"_id\": 1, \"a\": 1, \"b\": {\"c\": 2, \"d\": 3}, \"e\": [1, {\"c\": 4, \"f\": 5}, [{\"c\": 6}], "
        "{\"f\": 7}], \"g\": 8}";
    expect(doc, "{\"g\": 1, \"a\": true}", "{\"_id\": 1, \"a\": 1, \"g\": 8}");
    expect(doc, "{\"a\": 1, \"_id\": 0}", "{\"a\": 1}");
    expect(doc, "{\"_id\": 1}", "{\"_id\": 1}");
    expect(doc, "{\"_id\": true, \"a\": 1}", "{\"_id\": 1, \"a\": 1}");
    expect(doc, "{\"b.d\": 1}", "{\"_id\": 1, \"b\": {\"d\": 3}}");
    expect(doc, "{\"b\": {\"d\": 1, \"c\": 1}}", "{\"_id\": 1, \"b\": {\"c\": 2, \"d\": 3}}");
    expect(doc, "{\"e.c\": 1}", "{\"_id\": 1, \"e\": [{\"c\": 4}, [{\"c\": 6}], {}]}");
    expect(doc, "{\"b.x\": 1}", "{\"_id\": 1, \"b\": {}}");
    expect(doc, "{\"a.x\": 1, \"missing\": 1}", "{\"_id\": 1}");
    /* Any number but 0 includes. */
    expect(doc, "{\"a\": -1, \"g\": {\"$numberDouble\": \"0.5\"}, \"_id\": {\"$numberLong\": \"0\"}}",
           "{\"a\": 1, \"g\": 8}");
    expect(doc, "{\"a\": {\"$numberDecimal\": \"1\"}, \"_id\": {\"$numberDecimal\": \"0.0\"}}", "{\"a\": 1}");
}
END_TEST

/* Exclusion: everything else, in order; dotted paths through documents and arrays (scalars and other fields kept). */
START_TEST(test_exclusion)
{
    const char *doc =
        "{\"_id\": 1, \"a\": 1, \"b\": {\"c\": 2, \"d\": 3}, \"e\": [1, {\"c\": 4, \"f\": 5}, [{\"c\": 6}], "
        "{\"f\": 7}], \"g\": 8}";
    expect(doc, "{\"a\": 0, \"g\": false}",
           "{\"_id\": 1, \"b\": {\"c\": 2, \"d\": 3}, \"e\": [1, {\"c\": 4, \"f\": 5}, [{\"c\": 6}], {\"f\": 7}]}");
    expect(doc, "{\"_id\": 0}",
           "{\"a\": 1, \"b\": {\"c\": 2, \"d\": 3}, \"e\": [1, {\"c\": 4, \"f\": 5}, [{\"c\": 6}], {\"f\": 7}], "
           "\"g\": 8}");
    expect(doc, "{\"b.c\": 0, \"e.c\": 0, \"_id\": 0}",
           "{\"a\": 1, \"b\": {\"d\": 3}, \"e\": [1, {\"f\": 5}, [{}], {\"f\": 7}], \"g\": 8}");
    expect(doc, "{\"b\": {\"c\": 0, \"d\": 0}, \"e\": 0}", "{\"_id\": 1, \"a\": 1, \"b\": {}, \"g\": 8}");
    /* {_id: 1} in an exclusion is allowed and changes nothing. */
    expect(doc, "{\"g\": 0, \"_id\": 1, \"e\": 0, \"b\": 0}", "{\"_id\": 1, \"a\": 1}");
    /* A path through a scalar or a missing field excludes nothing. */
    expect("{\"a\": 5, \"b\": 6}", "{\"a.x\": 0, \"m.n\": 0}", "{\"a\": 5, \"b\": 6}");
}
END_TEST

/* The server's errors, in the order it checks the elements. */
START_TEST(test_errors)
{
    expect_error("{\"a\": 1, \"b\": 0}", 31254, "Cannot do exclusion on field b in inclusion projection");
    expect_error("{\"a\": 0, \"b.c\": 1}", 31253, "Cannot do inclusion on field b.c in exclusion projection");
    expect_error("{\"_id\": 0, \"a\": 1, \"b\": {\"c\": 0}}", 31254,
                 "Cannot do exclusion on field c in inclusion projection");
    expect_error("{\"a\": {\"$slice\": 1}, \"b\": 1, \"c\": 0}", 31254, NULL);
    expect_error("{\"a\": 1, \"a.b\": 1}", 31249, "Path collision at a.b remaining portion b");
    expect_error("{\"a.b\": 1, \"a\": 1}", 31250, "Path collision at a");
    expect_error("{\"a.b.c\": 0, \"a.b\": 0}", 31250, "Path collision at a.b");
    expect_error("{\"\": 1}", 40352, "FieldPath cannot be constructed with empty string");
    expect_error("{\"a..b\": 1}", 15998, "FieldPath field names may not be empty strings.");
    expect_error("{\"a.\": 1}", 40353, "FieldPath must not end with a '.'.");
    expect_error("{\"$a\": 1}", 16410,
                 "FieldPath field names may not start with '$'. Consider using $getField or $setField.");
    expect_error("{\"a\": {}}", 51270, "An empty sub-projection is not a valid value. Found empty object at path");
    /* $slice that is neither n nor [skip, limit]: the aggregation $slice then takes 2 or 3 operands. */
    expect_error("{\"a\": {\"$slice\": \"x\"}}", 28667,
                 "Invalid $slice syntax. The given syntax { $slice: \"x\" } did not match the find() syntax because :: "
                 "Location31273: $slice only supports numbers and [skip, limit] arrays :: The given syntax did not "
                 "match the expression $slice syntax. :: caused by :: Expression $slice takes at least 2 arguments, "
                 "and at most 3, but 1 were passed in.");
    expect_error("{\"a\": {\"$slice\": [1, 2, 3, 4]}}", 28667,
                 "Invalid $slice syntax. The given syntax { $slice: [ 1, 2, 3, 4 ] } did not match the find() syntax "
                 "because :: Location31272: $slice array argument should be of form [skip, limit] :: The given syntax "
                 "did not match the expression $slice syntax. :: caused by :: Expression $slice takes at least 2 "
                 "arguments, and at most 3, but 4 were passed in.");
    expect_error("{\"a\": {\"$slice\": []}}", 28667, NULL);
    expect_error("{\"a\": {\"$slice\": null}}", 28667, NULL);
    expect_error("{\"a\": {\"$slice\": {\"b\": 1.5}}}", 28667,
                 "Invalid $slice syntax. The given syntax { $slice: { b: 1.5 } } did not match the find() syntax "
                 "because :: Location31273: $slice only supports numbers and [skip, limit] arrays :: The given syntax "
                 "did not match the expression $slice syntax. :: caused by :: Expression $slice takes at least 2 "
                 "arguments, and at most 3, but 1 were passed in.");
    /* A find $slice on a path that collides is retried as the expression, which fails the same way. */
    expect_error("{\"a.b\": 1, \"a\": {\"$slice\": 2}}", 28667,
                 "Invalid $slice syntax. The given syntax { $slice: 2 } did not match the find() syntax because :: "
                 "Location31250: Path collision at a :: The given syntax did not match the expression $slice syntax. "
                 ":: caused by :: Expression $slice takes at least 2 arguments, and at most 3, but 1 were passed in.");
    expect_error("{\"a.b\": 1, \"a\": {\"$slice\": [1, 2]}}", 31250,
                 "Invalid $slice syntax. The given syntax { $slice: [ 1, 2 ] } did not match the find() syntax "
                 "because :: Location31250: Path collision at a :: The given syntax did not match the expression "
                 "$slice syntax. :: caused by :: Path collision at a");
    /* An expression in an exclusion. */
    expect_error("{\"b\": 0, \"a\": {\"$slice\": [1, 0]}}", 31252,
                 "Invalid $slice syntax. The given syntax { $slice: [ 1, 0 ] } did not match the find() syntax "
                 "because :: Location31259: $slice limit must be positive, got 0 :: The given syntax did not match the "
                 "expression $slice syntax. :: caused by :: Cannot use expression other than $meta in exclusion "
                 "projection");
    expect_error("{\"b\": 0, \"a\": {\"$slice\": [\"s\", 1]}}", 31252,
                 "Invalid $slice syntax. The given syntax { $slice: [ \"s\", 1 ] } did not match the find() syntax "
                 "because :: Location31257: $slice expects the skip argument to be a number, got string :: The given "
                 "syntax did not match the expression $slice syntax. :: caused by :: Cannot use expression other than "
                 "$meta in exclusion projection");
    expect_error("{\"b\": 0, \"a\": {\"$add\": [1, 2]}}", 31252,
                 "Cannot use expression other than $meta in exclusion projection");
    expect_error("{\"b\": false, \"a\": \"lit\"}", 31310,
                 "Cannot use an expression a: \"lit\" in an exclusion projection");
    expect_error("{\"a\": {\"$1\": 1}}", 31325, "Unknown expression $1");
    /* $elemMatch and positional rules. */
    expect_error("{\"a\": {\"$elemMatch\": [1]}}", 31274,
                 "elemMatch: Invalid argument, object required, but got array");
    expect_error("{\"a.b\": {\"$elemMatch\": {\"x\": 1}}}", 31275,
                 "Cannot use $elemMatch projection on a nested field.");
    expect_error("{\"a\": {\"b\": {\"$elemMatch\": {\"x\": 1}}}}", 31275, NULL);
    expect_error("{\"a.$.b\": 1}", 31394, NULL);
    expect_error("{\"a.$\": {\"$slice\": 1}}", 31271,
                 "positional projection cannot be used with an expression or sub object");
    expect_error("{\"a.$\": \"x\"}", 31308, "positional projection cannot be used with a literal");
    expect_error("{\"a.$\": 1, \"b.$\": 1}", 31276, "Cannot specify more than one positional projection per query.");
    expect_error("{\"a\": {\"$elemMatch\": {\"x\": 1}}, \"b.$\": 1}", 31256,
                 "Cannot specify positional operator and $elemMatch.");
    /* A later error comes before "unsupported". */
    expect_error("{\"a\": {\"$elemMatch\": {\"x\": 1}}, \"b\": 1, \"c\": 0}", 31254, NULL);

    ck_assert_str_eq(projection_code_name(31254), "Location31254");
    ck_assert_str_eq(projection_code_name(28667), "Location28667");
    ck_assert_ptr_null(projection_code_name(2));
}
END_TEST

/* Valid projections mongosim does not execute: 2 BadValue, never ignored. An empty projection is none. */
START_TEST(test_unsupported)
{
    expect_error("{\"a\": {\"$elemMatch\": {\"x\": 1}}}", 2, NULL);
    expect_error("{\"s\": {\"$meta\": \"textScore\"}}", 2, NULL);
    expect_error("{\"a.$\": 1}", 2, NULL);
    expect_error("{\"a\": {\"$add\": [1, 2]}}", 2, NULL);
    expect_error("{\"a\": \"literal\"}", 2, NULL);
    expect_error("{\"a\": [1]}", 2, NULL);
    expect_error("{\"a\": {\"$slice\": [1, 0]}}", 2, NULL);
    expect_error("{\"a\": {\"$slice\": [\"$b\", 1, 2]}}", 2, NULL);
    expect_error("{\"a\": {\"$slice\": {\"$numberDecimal\": \"1\"}}}", 2, NULL);
    bson_t *p = simtest_json("{\"a\": {\"$elemMatch\": {\"x\": 1}}}");
    sim_projection *pr = NULL;
    sim_proj_error err;
    ck_assert(!projection_parse(p, &pr, &err));
    ck_assert_msg(strstr(err.message, "$elemMatch") != NULL, "message does not name $elemMatch: %s", err.message);
    bson_destroy(p);
    bson_t empty = BSON_INITIALIZER;
    ck_assert(projection_parse(&empty, &pr, &err));
    ck_assert_ptr_null(pr);
}
END_TEST

/* ---- over the wire, with libmongoc ---- */

static sim_server *wsrv;
static pthread_t wthread;
static mongoc_client_t *client;

static void *wire_run(void *arg)
{
    sim_server_run(arg);
    return NULL;
}

static void wire_start(void)
{
    sim_options opts;
    sim_options_init(&opts);
    bson_error_t err;
    wsrv = sim_server_new(&opts, NULL, &err);
    ck_assert_msg(wsrv, "sim_server_new: %s", err.message);
    ck_assert_int_eq(pthread_create(&wthread, NULL, wire_run, wsrv), 0);
    mongoc_init();
    char uri[128];
    snprintf(uri, sizeof uri, "mongodb://127.0.0.1:%d/?directConnection=true&serverSelectionTimeoutMS=5000",
             sim_server_port(wsrv));
    client = mongoc_client_new(uri);
    ck_assert_ptr_nonnull(client);
}

static void wire_stop(void)
{
    mongoc_client_destroy(client);
    client = NULL;
    mongoc_cleanup();
    sim_server_stop(wsrv);
    pthread_join(wthread, NULL);
    sim_server_free(wsrv);
    wsrv = NULL;
}

/* Runs cmd (consumed) on db; the reply, which must be ok. */
static bson_t *cmd_ok(const char *db, bson_t *cmd)
{
    bson_t reply;
    bson_error_t err;
    bool ok = mongoc_client_command_simple(client, db, cmd, NULL, &reply, &err);
    char *c = bson_as_relaxed_extended_json(cmd, NULL);
    ck_assert_msg(ok, "%s failed: %d %s", c, (int)err.code, err.message);
    bson_free(c);
    bson_destroy(cmd);
    bson_t *out = bson_copy(&reply);
    bson_destroy(&reply);
    return out;
}

static bson_t *json_ok(const char *db, const char *json)
{
    return cmd_ok(db, simtest_json(json));
}

/* The command fails with code and codeName. */
static void json_err(const char *db, const char *json, int code, const char *code_name)
{
    bson_t *cmd = simtest_json(json), reply;
    bson_error_t err;
    ck_assert_msg(!mongoc_client_command_simple(client, db, cmd, NULL, &reply, &err), "%s succeeded", json);
    ck_assert_msg((int)err.code == code, "%s: error %d (%s), want %d", json, (int)err.code, err.message, code);
    ck_assert_str_eq(simtest_str(&reply, "codeName"), code_name);
    bson_destroy(&reply);
    bson_destroy(cmd);
}

/* The cursor's id, and its batch (firstBatch or nextBatch) copied into batch (uninitialized; the caller destroys
 * it) as a document {"0": ..., "1": ...}. */
static int64_t batch_of(const bson_t *reply, bson_t *batch)
{
    bson_iter_t it, c;
    ck_assert(bson_iter_init_find(&it, reply, "cursor") && bson_iter_recurse(&it, &c));
    int64_t id = -1;
    bool found = false;
    while (bson_iter_next(&c)) {
        const char *k = bson_iter_key(&c);
        if (strcmp(k, "id") == 0) {
            id = bson_iter_as_int64(&c);
        } else if (strcmp(k, "firstBatch") == 0 || strcmp(k, "nextBatch") == 0) {
            uint32_t len;
            const uint8_t *data;
            bson_iter_array(&c, &len, &data);
            bson_t view;
            ck_assert(bson_init_static(&view, data, len));
            bson_copy_to(&view, batch);
            found = true;
        }
    }
    ck_assert_msg(found, "no batch in the reply");
    return id;
}

static void assert_batch(const bson_t *batch, const char *want_json, const char *what)
{
    bson_t *want = simtest_json(want_json);
    simtest_assert_bson_eq(batch, want, what);
    bson_destroy(want);
}

static bson_t *get_more(const char *db, int64_t id, const char *coll, int32_t batch)
{
    bson_t *cmd = bson_new();
    BSON_APPEND_INT64(cmd, "getMore", id);
    BSON_APPEND_UTF8(cmd, "collection", coll);
    BSON_APPEND_INT32(cmd, "batchSize", batch);
    return cmd_ok(db, cmd);
}

static void insert_five(void)
{
    bson_destroy(json_ok("p",
                         "{\"insert\": \"c\", \"documents\": ["
                         "{\"_id\": 0, \"a\": [0, 1, 2], \"b\": \"x\"}, {\"_id\": 1, \"a\": [1, 2, 3], \"b\": \"x\"}, "
                         "{\"_id\": 2, \"a\": [2, 3, 4], \"b\": \"x\"}, {\"_id\": 3, \"a\": [3, 4, 5], \"b\": \"x\"}, "
                         "{\"_id\": 4, \"a\": [4, 5, 6], \"b\": \"x\"}]}"));
}

/* A projected find and its getMores on a collection: every batch projected, and with _id projected away the cursor
 * still continues after the right document. */
START_TEST(test_wire_collection_getmore)
{
    insert_five();
    bson_t batch;
    bson_t *r =
        json_ok("p", "{\"find\": \"c\", \"projection\": {\"_id\": 0, \"a\": {\"$slice\": -1}}, \"batchSize\": 2}");
    int64_t id = batch_of(r, &batch);
    ck_assert_int_ne(id, 0);
    assert_batch(&batch, "{\"0\": {\"a\": [2], \"b\": \"x\"}, \"1\": {\"a\": [3], \"b\": \"x\"}}", "firstBatch");
    bson_destroy(r);
    bson_destroy(&batch);
    r = get_more("p", id, "c", 2);
    ck_assert_int_eq(batch_of(r, &batch), id);
    assert_batch(&batch, "{\"0\": {\"a\": [4], \"b\": \"x\"}, \"1\": {\"a\": [5], \"b\": \"x\"}}", "nextBatch 1");
    bson_destroy(r);
    bson_destroy(&batch);
    r = get_more("p", id, "c", 2);
    ck_assert_int_eq(batch_of(r, &batch), 0);
    assert_batch(&batch, "{\"0\": {\"a\": [6], \"b\": \"x\"}}", "nextBatch 2");
    bson_destroy(r);
    bson_destroy(&batch);
    /* An inclusion on a single-batch find. */
    r = json_ok("p", "{\"find\": \"c\", \"filter\": {\"_id\": 3}, \"projection\": {\"b\": 1}}");
    ck_assert_int_eq(batch_of(r, &batch), 0);
    assert_batch(&batch, "{\"0\": {\"_id\": 3, \"b\": \"x\"}}", "inclusion");
    bson_destroy(r);
    bson_destroy(&batch);
}
END_TEST

/* The find oplog2pg sends for a window of a large transaction entry's applyOps: {ts: {$gte: T}}, limit 1,
 * {"o.applyOps": {$slice: [skip, n]}}; the rest of the entry is as logged. */
START_TEST(test_wire_oplog_applyops_window)
{
    bson_t *append = simtest_json("{\"appendOplog\": [{\"op\": \"c\", \"ns\": \"admin.$cmd\", \"o\": {\"applyOps\": ["
                                  "{\"op\": \"i\", \"ns\": \"d.c\", \"o\": {\"_id\": 0}}, "
                                  "{\"op\": \"i\", \"ns\": \"d.c\", \"o\": {\"_id\": 1}}, "
                                  "{\"op\": \"i\", \"ns\": \"d.c\", \"o\": {\"_id\": 2}}, "
                                  "{\"op\": \"i\", \"ns\": \"d.c\", \"o\": {\"_id\": 3}}, "
                                  "{\"op\": \"i\", \"ns\": \"d.c\", \"o\": {\"_id\": 4}}], \"count\": 5}, "
                                  "\"ts\": {\"$timestamp\": {\"t\": 4000000000, \"i\": 7}}, \"t\": {\"$numberLong\": "
                                  "\"1\"}}]}");
    bson_destroy(cmd_ok("admin", append));
    const char *find = "{\"find\": \"oplog.rs\", \"filter\": {\"ts\": {\"$gte\": {\"$timestamp\": {\"t\": 4000000000, "
                       "\"i\": 7}}}}, \"limit\": 1, \"projection\": {\"o.applyOps\": {\"$slice\": %s}}}";
    const struct {
        const char *slice, *ops;
    } cases[] = {
        {"[1, 2]", "{\"op\": \"i\", \"ns\": \"d.c\", \"o\": {\"_id\": 1}}, {\"op\": \"i\", \"ns\": \"d.c\", \"o\": "
                   "{\"_id\": 2}}"},
        {"[3, 250]", "{\"op\": \"i\", \"ns\": \"d.c\", \"o\": {\"_id\": 3}}, {\"op\": \"i\", \"ns\": \"d.c\", \"o\": "
                     "{\"_id\": 4}}"},
        {"[500, 250]", ""},
        {"-1", "{\"op\": \"i\", \"ns\": \"d.c\", \"o\": {\"_id\": 4}}"},
        {"0", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[512], want[1024];
        snprintf(cmd, sizeof cmd, find, cases[i].slice);
        snprintf(want, sizeof want,
                 "{\"0\": {\"op\": \"c\", \"ns\": \"admin.$cmd\", \"o\": {\"applyOps\": [%s], \"count\": 5}, \"ts\": "
                 "{\"$timestamp\": {\"t\": 4000000000, \"i\": 7}}, \"t\": {\"$numberLong\": \"1\"}}}",
                 cases[i].ops);
        bson_t batch;
        bson_t *r = json_ok("local", cmd);
        ck_assert_int_eq(batch_of(r, &batch), 0);
        assert_batch(&batch, want, cases[i].slice);
        bson_destroy(r);
        bson_destroy(&batch);
    }
}
END_TEST

/* An oplog cursor keeps its projection for its getMores. */
START_TEST(test_wire_oplog_getmore)
{
    bson_destroy(json_ok("admin", "{\"appendOplog\": ["
                                  "{\"op\": \"n\", \"ns\": \"\", \"o\": {\"msg\": \"m1\", \"x\": 1}, \"ts\": "
                                  "{\"$timestamp\": {\"t\": 4000000000, \"i\": 1}}}, "
                                  "{\"op\": \"n\", \"ns\": \"\", \"o\": {\"msg\": \"m2\", \"x\": 2}, \"ts\": "
                                  "{\"$timestamp\": {\"t\": 4000000000, \"i\": 2}}}, "
                                  "{\"op\": \"n\", \"ns\": \"\", \"o\": {\"msg\": \"m3\", \"x\": 3}, \"ts\": "
                                  "{\"$timestamp\": {\"t\": 4000000000, \"i\": 3}}}]}"));
    bson_t batch;
    bson_t *r = json_ok("local", "{\"find\": \"oplog.rs\", \"filter\": {\"ts\": {\"$gte\": {\"$timestamp\": {\"t\": "
                                 "4000000000, \"i\": 1}}}}, \"batchSize\": 1, \"projection\": {\"o.msg\": 1}}");
    int64_t id = batch_of(r, &batch);
    ck_assert_int_ne(id, 0);
    assert_batch(&batch, "{\"0\": {\"o\": {\"msg\": \"m1\"}}}", "firstBatch");
    bson_destroy(r);
    bson_destroy(&batch);
    r = get_more("local", id, "oplog.rs", 1);
    ck_assert_int_eq(batch_of(r, &batch), id);
    assert_batch(&batch, "{\"0\": {\"o\": {\"msg\": \"m2\"}}}", "nextBatch 1");
    bson_destroy(r);
    bson_destroy(&batch);
    r = get_more("local", id, "oplog.rs", 1);
    ck_assert_int_eq(batch_of(r, &batch), 0);
    assert_batch(&batch, "{\"0\": {\"o\": {\"msg\": \"m3\"}}}", "nextBatch 2");
    bson_destroy(r);
    bson_destroy(&batch);
}
END_TEST

/* skip: matching documents passed over before the first returned, limit counting after them. */
START_TEST(test_wire_skip)
{
    insert_five();
    bson_t batch;
    bson_t *r =
        json_ok("p", "{\"find\": \"c\", \"skip\": 1, \"limit\": 3, \"batchSize\": 2, \"projection\": {\"b\": 1, "
                     "\"_id\": 1}}");
    int64_t id = batch_of(r, &batch);
    ck_assert_int_ne(id, 0);
    assert_batch(&batch, "{\"0\": {\"_id\": 1, \"b\": \"x\"}, \"1\": {\"_id\": 2, \"b\": \"x\"}}", "skip firstBatch");
    bson_destroy(r);
    bson_destroy(&batch);
    r = get_more("p", id, "c", 2);
    ck_assert_int_eq(batch_of(r, &batch), 0);
    assert_batch(&batch, "{\"0\": {\"_id\": 3, \"b\": \"x\"}}", "skip nextBatch");
    bson_destroy(r);
    bson_destroy(&batch);
    r = json_ok("p", "{\"find\": \"c\", \"skip\": 9, \"projection\": {\"b\": 1}}");
    ck_assert_int_eq(batch_of(r, &batch), 0);
    assert_batch(&batch, "{}", "skip past the end");
    bson_destroy(r);
    bson_destroy(&batch);
    bson_destroy(json_ok("admin", "{\"appendOplog\": ["
                                  "{\"op\": \"n\", \"ns\": \"\", \"o\": {\"msg\": \"m1\"}, \"ts\": {\"$timestamp\": "
                                  "{\"t\": 4000000000, \"i\": 1}}}, "
                                  "{\"op\": \"n\", \"ns\": \"\", \"o\": {\"msg\": \"m2\"}, \"ts\": {\"$timestamp\": "
                                  "{\"t\": 4000000000, \"i\": 2}}}, "
                                  "{\"op\": \"n\", \"ns\": \"\", \"o\": {\"msg\": \"m3\"}, \"ts\": {\"$timestamp\": "
                                  "{\"t\": 4000000000, \"i\": 3}}}]}"));
    r = json_ok("local",
                "{\"find\": \"oplog.rs\", \"filter\": {\"ts\": {\"$gte\": {\"$timestamp\": {\"t\": 4000000000, "
                "\"i\": 1}}}}, \"skip\": 1, \"limit\": 1, \"projection\": {\"o\": 1}}");
    ck_assert_int_eq(batch_of(r, &batch), 0);
    assert_batch(&batch, "{\"0\": {\"o\": {\"msg\": \"m2\"}}}", "oplog skip");
    bson_destroy(r);
    bson_destroy(&batch);
}
END_TEST

/* Errors as a client sees them: the code and codeName. */
START_TEST(test_wire_errors)
{
    insert_five();
    json_err("p", "{\"find\": \"c\", \"projection\": {\"a\": 1, \"b\": 0}}", 31254, "Location31254");
    json_err("p", "{\"find\": \"c\", \"projection\": {\"a\": {\"$slice\": \"x\"}}}", 28667, "Location28667");
    json_err("p", "{\"find\": \"c\", \"projection\": {\"a\": {\"$elemMatch\": {\"x\": 1}}}}", 2, "BadValue");
    json_err("local", "{\"find\": \"oplog.rs\", \"projection\": {\"o\": {\"$meta\": \"textScore\"}}}", 2, "BadValue");
    json_err("p", "{\"find\": \"c\", \"projection\": 1}", 14, "TypeMismatch");
    json_err("p", "{\"find\": \"c\", \"skip\": -1}", 51024, "Location51024");
    /* An empty projection is none. */
    bson_t batch;
    bson_t *r = json_ok("p", "{\"find\": \"c\", \"filter\": {\"_id\": 0}, \"projection\": {}}");
    batch_of(r, &batch);
    assert_batch(&batch, "{\"0\": {\"_id\": 0, \"a\": [0, 1, 2], \"b\": \"x\"}}", "empty projection");
    bson_destroy(r);
    bson_destroy(&batch);
}
END_TEST

Suite *mongosim_projection_suite(void); /* called by the generated runner list */

Suite *mongosim_projection_suite(void)
{
    Suite *s = suite_create("mongosim_projection");
    TCase *tc = tcase_create("engine");
    tcase_add_test(tc, test_slice_forms);
    tcase_add_test(tc, test_slice_paths);
    tcase_add_test(tc, test_slice_with_inclusion_exclusion);
    tcase_add_test(tc, test_inclusion);
    tcase_add_test(tc, test_exclusion);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_unsupported);
    suite_add_tcase(s, tc);
    TCase *wire = tcase_create("wire");
    tcase_add_checked_fixture(wire, wire_start, wire_stop);
    tcase_set_timeout(wire, 20);
    tcase_add_test(wire, test_wire_collection_getmore);
    tcase_add_test(wire, test_wire_oplog_applyops_window);
    tcase_add_test(wire, test_wire_oplog_getmore);
    tcase_add_test(wire, test_wire_skip);
    tcase_add_test(wire, test_wire_errors);
    suite_add_tcase(s, wire);
    return s;
}

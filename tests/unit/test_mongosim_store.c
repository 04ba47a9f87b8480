/*
 * test_mongosim_store.c — mongosim's data engine (tests/mongosim/store.c, update.c): documents and the oplog bodies
 * writes emit, in the 7.0 ($v:2) and 4.4 ($v:1) shapes.
 *
 * Vector sources: tests/vectors/diff_v2_pre_post.jsonl and tests/vectors/update_v1_pre_post.jsonl (taken from the
 * server's own tests: tests/vectors/SOURCES.md, and each line names its upstream file). For every
 * triple whose `o` a plain $set/$unset/$inc/$push can produce, the test drives the engine with that operator on
 * `pre` and asserts the new document equals `post` and the emitted `o` equals the vector's `o`, byte for byte.
 * Other expectations state, case by case, the server behaviour they rest on.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../mongosim/store.h"
#include "../mongosim/update.h"
#include "simtest.h"

#define VEC_DIR "tests/vectors/"

/* ---- helpers ---------------------------------------------------------------------------------------------- */

static bool body_uuid(const bson_t *b, const char *key, const uint8_t **uuid)
{
    bson_iter_t it;
    bson_subtype_t st;
    uint32_t l;
    if (!bson_iter_init_find(&it, b, key) || !BSON_ITER_HOLDS_BINARY(&it))
        return false;
    bson_iter_binary(&it, &st, &l, uuid);
    return st == BSON_SUBTYPE_UUID && l == 16;
}

static void assert_body_o(const bson_t *body, const char *op, const char *json_o)
{
    bson_t o;
    ck_assert_str_eq(simtest_str(body, "op"), op);
    ck_assert(simtest_sub(body, "o", &o));
    bson_t *want = simtest_json(json_o);
    simtest_assert_bson_eq(&o, want, op);
    bson_destroy(want);
}

typedef struct {
    bson_t *doc;
} one_doc;

static bool grab_doc(void *ctx, const bson_t *doc)
{
    one_doc *d = ctx;
    d->doc = bson_copy(doc);
    return false;
}

static bson_t *find_one(sim_store *s, const char *db, const char *coll, const bson_t *id_query)
{
    one_doc d = {NULL};
    store_find(s, db, coll, id_query, grab_doc, &d);
    return d.doc;
}

/* Reads the vector line whose "id" equals id, returning pre, o and post (copies). */
static void load_vector(const char *file, const char *id, bson_t **pre, bson_t **o, bson_t **post)
{
    FILE *fp = fopen(file, "r");
    ck_assert_msg(fp != NULL, "cannot open %s (run from the repository root)", file);
    char *line = NULL;
    size_t cap = 0;
    bool found = false;
    while (!found && getline(&line, &cap, fp) > 0) {
        bson_error_t err;
        bson_t *b = bson_new_from_json((const uint8_t *)line, -1, &err);
        ck_assert_msg(b != NULL, "%s: %s", file, err.message);
        const char *vid = simtest_str(b, "id");
        if (vid && strcmp(vid, id) == 0) {
            bson_t a, c, d;
            ck_assert(simtest_sub(b, "pre", &a) && simtest_sub(b, "o", &c) && simtest_sub(b, "post", &d));
            *pre = bson_copy(&a);
            *o = bson_copy(&c);
            *post = bson_copy(&d);
            found = true;
        }
        bson_destroy(b);
    }
    free(line);
    fclose(fp);
    ck_assert_msg(found, "vector %s not found in %s", id, file);
}

/* Drives one vector: with an _id through the store (insert pre, update, find), otherwise through update_apply. */
static void run_vector(const char *file, const char *id, const char *update_json, sim_oplog_format fmt)
{
    bson_t *pre, *want_o, *post, *u = simtest_json(update_json);
    load_vector(file, id, &pre, &want_o, &post);
    bson_iter_t idit;
    if (bson_iter_init_find(&idit, pre, "_id")) {
        sim_store *s = store_new(fmt);
        simtest_sink k = {{0}, 0};
        bson_error_t err;
        ck_assert_msg(store_insert(s, "db", "c", pre, simtest_sink_emit, &k, &err), "%s: %s", id, err.message);
        simtest_sink_clear(&k);
        bson_t q = BSON_INITIALIZER;
        bson_append_iter(&q, "_id", 3, &idit);
        sim_update_result res;
        ck_assert_msg(store_update(s, "db", "c", &q, u, false, &res, simtest_sink_emit, &k, &err), "%s: %s", id,
                      err.message);
        ck_assert_int_eq(res.matched, 1);
        ck_assert_int_eq(res.modified, 1);
        ck_assert_int_eq(k.n, 1);
        bson_t o, o2;
        ck_assert_str_eq(simtest_str(k.bodies[0], "op"), "u");
        ck_assert(simtest_sub(k.bodies[0], "o", &o));
        simtest_assert_bson_eq(&o, want_o, id);
        ck_assert(simtest_sub(k.bodies[0], "o2", &o2));
        simtest_assert_bson_eq(&o2, &q, "o2 is {_id}");
        bson_t *got = find_one(s, "db", "c", &q);
        ck_assert(got != NULL);
        simtest_assert_bson_eq(got, post, id);
        bson_destroy(got);
        simtest_sink_clear(&k);
        store_update_result_clear(&res);
        bson_destroy(&q);
        store_free(s);
    } else {
        bson_t nd, o;
        bool changed;
        bson_error_t err;
        ck_assert_msg(update_apply(pre, u, fmt, false, &nd, &o, &changed, &err), "%s: %s", id, err.message);
        ck_assert(changed);
        simtest_assert_bson_eq(&nd, post, id);
        simtest_assert_bson_eq(&o, want_o, id);
        bson_destroy(&nd);
        bson_destroy(&o);
    }
    bson_destroy(pre);
    bson_destroy(want_o);
    bson_destroy(post);
    bson_destroy(u);
}

/* Applies u to doc and checks the new document and the o in both formats (NULL o: no change expected). */
static void check_update(const char *doc_json, const char *u_json, const char *want_doc, const char *want_o70,
                         const char *want_o44)
{
    bson_t *doc = simtest_json(doc_json), *u = simtest_json(u_json);
    for (int f = 0; f < 2; f++) {
        sim_oplog_format fmt = f ? SIM_FORMAT_44 : SIM_FORMAT_70;
        const char *want_o = f ? want_o44 : want_o70;
        bson_t nd, o;
        bool changed;
        bson_error_t err;
        ck_assert_msg(update_apply(doc, u, fmt, false, &nd, &o, &changed, &err), "%s: %s", u_json, err.message);
        if (!want_o) {
            ck_assert_msg(!changed, "%s should be a no-op", u_json);
            continue;
        }
        ck_assert_msg(changed, "%s should change the document", u_json);
        bson_t *wd = simtest_json(want_doc), *wo = simtest_json(want_o);
        simtest_assert_bson_eq(&nd, wd, u_json);
        simtest_assert_bson_eq(&o, wo, u_json);
        bson_destroy(wd);
        bson_destroy(wo);
        bson_destroy(&nd);
        bson_destroy(&o);
    }
    bson_destroy(doc);
    bson_destroy(u);
}

static void check_update_error(const char *doc_json, const char *u_json, int code)
{
    bson_t *doc = simtest_json(doc_json), *u = simtest_json(u_json);
    bson_t nd, o;
    bool changed;
    bson_error_t err;
    ck_assert_msg(!update_apply(doc, u, SIM_FORMAT_70, false, &nd, &o, &changed, &err), "%s should fail", u_json);
    ck_assert_msg((int)err.code == code, "%s: code %d (%s), want %d", u_json, (int)err.code, err.message, code);
    bson_destroy(doc);
    bson_destroy(u);
}

/* ---- vectors ---------------------------------------------------------------------------------------------- */

/* The $push updates of mongodb/mongo jstests/replsets/oplog_format.js (shell numbers are doubles). */
#define PUSH_EACH_SLICE "{\"$push\": {\"a.b\": {\"$each\": [1.0, 2.0], \"$slice\": -2.0}}}"
#define PUSH_SORT_SLICE_100                                                                                            \
    "{\"$push\": {\"a.b\": {\"$each\": [{\"c\": -1.0}], \"$sort\": {\"c\": 1.0}, \"$slice\": -100.0}}}"
#define PUSH_SLICE_SORT_FIRST_TWO                                                                                      \
    "{\"$push\": {\"a.b\": {\"$each\": [{\"c\": -1.0}], \"$slice\": -2.0, \"$sort\": {\"c\": 1.0}}}}"
#define PUSH_SLICE_SORT_REVERSED                                                                                       \
    "{\"$push\": {\"a.b\": {\"$each\": [{\"c\": -1.0}], \"$slice\": -2.0, \"$sort\": {\"c\": -1.0}}}}"

START_TEST(test_vectors_v2)
{
    const char *f = VEC_DIR "diff_v2_pre_post.jsonl";
    /* $inc is logged as the resulting value (u). */
    run_vector(f, "csraw-inc", "{\"$inc\": {\"b\": 2.0}}", SIM_FORMAT_70);
    run_vector(f, "csraw-set-multi-5", "{\"$set\": {\"b\": 2.0}}", SIM_FORMAT_70);
    /* $unset of a top-level field → d. */
    run_vector(f, "csraw-unset", "{\"$unset\": {\"b\": \"\"}}", SIM_FORMAT_70);
    run_vector(f, "csraw-pipeline-unset", "{\"$unset\": {\"a\": 1}}", SIM_FORMAT_70);
    /* Nested existing objects become s<field> sub-diffs. */
    run_vector(f, "ut-NestedSubObjUpdateScalar-match", "{\"$set\": {\"subObj.subObj.a\": 1}}", SIM_FORMAT_70);
    /* Array element changes: {a: true, u<idx>}; an index == length appends. */
    run_vector(f, "ut-SubArrayDiffSimpleWithAppend", "{\"$set\": {\"arr.1\": 1, \"arr.4\": 2}}", SIM_FORMAT_70);
    /* d, u and an array sub-diff with s<idx> and u<idx> together; sections ordered d, u, s. */
    run_vector(f, "ut-UpdateArrayOfObjectsSubDiff-match",
               "{\"$unset\": {\"dFieldA\": 1, \"dFieldB\": 1}, \"$set\": {\"uField\": 999, \"arr.1.a\": 1, "
               "\"arr.2.b\": 2, \"arr.3.c\": 3, \"arr.4\": {\"x\": 1}}}",
               SIM_FORMAT_70);
    /* Non-contiguous indexes; past the end pads with null. */
    const char *nc = "{\"$set\": {\"arr.1\": 997, \"arr.2\": {\"newVal\": 998}, \"arr.5\": 999}}";
    run_vector(f, "ut-UpdateArrayOfObjectsWithUpdateOperationNonContiguous-match", nc, SIM_FORMAT_70);
    run_vector(f, "ut-UpdateArrayOfObjectsWithUpdateOperationNonContiguous-pad", nc, SIM_FORMAT_70);
    run_vector(f, "ut-UpdateArrayOfObjectsWithUpdateOperationNonContiguous-long", nc, SIM_FORMAT_70);
    run_vector(f, "ut-UpdateArrayOfObjectsWithUpdateOperationNonContiguous-subarrays", nc, SIM_FORMAT_70);
    /* oplog_format.js: $inc + $set, existing (u) and new (i, lexicographic) fields. */
    run_vector(f, "oplog_format-v2-IncRewriteExistingField", "{\"$inc\": {\"a\": 1.0}, \"$set\": {\"b\": 2.0}}",
               SIM_FORMAT_70);
    run_vector(f, "oplog_format-v2-IncRewriteNonExistingField", "{\"$inc\": {\"a\": 1.0}, \"$set\": {\"b\": 2.0}}",
               SIM_FORMAT_70);
    run_vector(f, "oplog_format-v2-MultiSets", "{\"$set\": {\"a\": 2.0, \"b\": 2.0}}", SIM_FORMAT_70);
    run_vector(f, "oplog_format-v2-single $set", "{\"$set\": {\"a\": 2.0}}", SIM_FORMAT_70);
    run_vector(f, "oplog_format-v2-double $set", "{\"$set\": {\"a\": 2.0, \"b\": 2.0}}", SIM_FORMAT_70);
    run_vector(f, "oplog_format-v2-array $inc (positional path a.0)", "{\"$inc\": {\"a.0\": 1.0}}", SIM_FORMAT_70);
    /* $push with $slice/$sort rewrites the whole array (u inside the sub-diff); the updates are the ones
     * oplog_format.js runs. */
    run_vector(f, "oplog_format-v2-$push $each $slice", PUSH_EACH_SLICE, SIM_FORMAT_70);
    run_vector(f, "oplog_format-v2-$push $sort $slice -100", PUSH_SORT_SLICE_100, SIM_FORMAT_70);
    run_vector(f, "oplog_format-v2-$push $slice $sort first two", PUSH_SLICE_SORT_FIRST_TWO, SIM_FORMAT_70);
    run_vector(f, "oplog_format-v2-$push $slice $sort reversed", PUSH_SLICE_SORT_REVERSED, SIM_FORMAT_70);
}
END_TEST

START_TEST(test_vectors_v1)
{
    const char *f = VEC_DIR "update_v1_pre_post.jsonl";
    /* $inc/$push become $set of the result; new fields in lexicographic order (how 4.4 logs $v:1 updates, as these
     * vectors from mongodb/mongo jstests/replsets/oplog_format.js show). */
    run_vector(f, "oplog_format-v1-IncRewriteExistingField", "{\"$inc\": {\"a\": 1.0}, \"$set\": {\"b\": 2.0}}",
               SIM_FORMAT_44);
    run_vector(f, "oplog_format-v1-TwoNestedPulls", "{\"$pull\": {\"a.b\": 2.0, \"a.c\": 2.0}}", SIM_FORMAT_44);
    run_vector(f, "oplog_format-v1-MultiSets", "{\"$set\": {\"b\": 2.0, \"a\": 2.0}}", SIM_FORMAT_44);
    run_vector(f, "oplog_format-v1-single $inc", "{\"$inc\": {\"a\": 1.0}}", SIM_FORMAT_44);
    run_vector(f, "oplog_format-v1-double $set", "{\"$set\": {\"a\": 2.0, \"b\": 2.0}}", SIM_FORMAT_44);
    run_vector(f, "oplog_format-v1-array $push to new field", "{\"$push\": {\"c\": 18.0}}", SIM_FORMAT_44);
    run_vector(f, "oplog_format-v1-$push $each $slice", PUSH_EACH_SLICE, SIM_FORMAT_44);
    run_vector(f, "oplog_format-v1-$push $slice $sort top-level",
               "{\"$push\": {\"a\": {\"$each\": [{\"b\": -1.0}], \"$slice\": -2.0, \"$sort\": {\"b\": 1.0}}}}",
               SIM_FORMAT_44);
    run_vector(f, "oplog_format-v1-$push $slice $sort first two", PUSH_SLICE_SORT_FIRST_TWO, SIM_FORMAT_44);
    run_vector(f, "csraw-v1-$inc", "{\"$inc\": {\"b\": 2.0}}", SIM_FORMAT_44);
    run_vector(f, "csraw-v1-$set multi (doc 4)", "{\"$set\": {\"b\": 2.0}}", SIM_FORMAT_44);
    run_vector(f, "csraw-v1-$set nested", "{\"$set\": {\"b.d\": 2.0}}", SIM_FORMAT_44);
}
END_TEST

/* ---- operators on nested objects and arrays --------------------------------------------------------------- */

START_TEST(test_set_nested)
{
    /* Creating a missing path: the first missing component is inserted whole, in the diff's `i` section (as the
     * server's $v:2 log builder does, mongodb/mongo src/mongo/db/update/v2_log_builder.cpp). */
    check_update("{\"_id\": 1, \"x\": {\"y\": 1}}", "{\"$set\": {\"x.z.w\": 5}}",
                 "{\"_id\": 1, \"x\": {\"y\": 1, \"z\": {\"w\": 5}}}",
                 "{\"$v\": 2, \"diff\": {\"sx\": {\"i\": {\"z\": {\"w\": 5}}}}}",
                 "{\"$v\": 1, \"$set\": {\"x.z.w\": 5}}");
    /* Two new fields under one new parent: one insert holding both; lexicographic order. */
    check_update("{\"_id\": 1}", "{\"$set\": {\"n.b\": 2, \"n.a\": 1}}", "{\"_id\": 1, \"n\": {\"a\": 1, \"b\": 2}}",
                 "{\"$v\": 2, \"diff\": {\"i\": {\"n\": {\"a\": 1, \"b\": 2}}}}",
                 "{\"$v\": 1, \"$set\": {\"n.a\": 1, \"n.b\": 2}}");
    /* New top-level fields appended in lexicographic order regardless of the update's order. */
    check_update("{\"_id\": 1, \"m\": 0}", "{\"$set\": {\"z\": 1, \"a\": 1}}",
                 "{\"_id\": 1, \"m\": 0, \"a\": 1, \"z\": 1}", "{\"$v\": 2, \"diff\": {\"i\": {\"a\": 1, \"z\": 1}}}",
                 "{\"$v\": 1, \"$set\": {\"a\": 1, \"z\": 1}}");
    /* Type change of an existing field is u. */
    check_update("{\"_id\": 1, \"a\": 1}", "{\"$set\": {\"a\": \"s\"}}", "{\"_id\": 1, \"a\": \"s\"}",
                 "{\"$v\": 2, \"diff\": {\"u\": {\"a\": \"s\"}}}", "{\"$v\": 1, \"$set\": {\"a\": \"s\"}}");
    /* Numeric component on an object names a field. */
    check_update("{\"_id\": 1, \"o\": {}}", "{\"$set\": {\"o.0\": true}}", "{\"_id\": 1, \"o\": {\"0\": true}}",
                 "{\"$v\": 2, \"diff\": {\"so\": {\"i\": {\"0\": true}}}}", "{\"$v\": 1, \"$set\": {\"o.0\": true}}");
    /* Past the end of an array pads with null; logged as u<idx> (array diffs have no i). */
    check_update(
        "{\"_id\": 1, \"arr\": [1]}", "{\"$set\": {\"arr.3\": 9}}", "{\"_id\": 1, \"arr\": [1, null, null, 9]}",
        "{\"$v\": 2, \"diff\": {\"sarr\": {\"a\": true, \"u3\": 9}}}", "{\"$v\": 1, \"$set\": {\"arr.3\": 9}}");
    /* Inside an array element's object. */
    check_update("{\"_id\": 1, \"arr\": [{\"k\": 1}, {\"k\": 2}]}", "{\"$set\": {\"arr.1.k\": 3}}",
                 "{\"_id\": 1, \"arr\": [{\"k\": 1}, {\"k\": 3}]}",
                 "{\"$v\": 2, \"diff\": {\"sarr\": {\"a\": true, \"s1\": {\"u\": {\"k\": 3}}}}}",
                 "{\"$v\": 1, \"$set\": {\"arr.1.k\": 3}}");
    /* Array indexes in the diff are ascending numerically, not bytewise ("10" after "9"). */
    check_update("{\"_id\": 1, \"a\": [0,0,0,0,0,0,0,0,0,0,0]}", "{\"$set\": {\"a.10\": 1, \"a.9\": 1}}",
                 "{\"_id\": 1, \"a\": [0,0,0,0,0,0,0,0,0,1,1]}",
                 "{\"$v\": 2, \"diff\": {\"sa\": {\"a\": true, \"u9\": 1, \"u10\": 1}}}",
                 "{\"$v\": 1, \"$set\": {\"a.10\": 1, \"a.9\": 1}}");
    /* Same value and type: no-op. */
    check_update("{\"_id\": 1, \"a\": 1}", "{\"$set\": {\"a\": 1}}", NULL, NULL, NULL);
}
END_TEST

START_TEST(test_unset)
{
    /* Sections: 4.4 logs $unset first when the first change (lexicographic) is an unset. */
    check_update("{\"_id\": 1, \"a\": 1}", "{\"$set\": {\"b\": 1}, \"$unset\": {\"a\": 1}}", "{\"_id\": 1, \"b\": 1}",
                 "{\"$v\": 2, \"diff\": {\"d\": {\"a\": false}, \"i\": {\"b\": 1}}}",
                 "{\"$v\": 1, \"$unset\": {\"a\": true}, \"$set\": {\"b\": 1}}");
    /* Nested unset → sub-diff with d. */
    check_update("{\"_id\": 1, \"x\": {\"y\": 1, \"z\": 2}}", "{\"$unset\": {\"x.y\": \"\"}}",
                 "{\"_id\": 1, \"x\": {\"z\": 2}}", "{\"$v\": 2, \"diff\": {\"sx\": {\"d\": {\"y\": false}}}}",
                 "{\"$v\": 1, \"$unset\": {\"x.y\": true}}");
    /* Unset of an array element sets it to null rather than removing it (MongoDB's $unset on an array element); 7.0
     * logs it as u<idx>: null. */
    check_update("{\"_id\": 1, \"arr\": [1, 2]}", "{\"$unset\": {\"arr.0\": 1}}", "{\"_id\": 1, \"arr\": [null, 2]}",
                 "{\"$v\": 2, \"diff\": {\"sarr\": {\"a\": true, \"u0\": null}}}",
                 "{\"$v\": 1, \"$unset\": {\"arr.0\": true}}");
    /* Missing paths: no-op. */
    check_update("{\"_id\": 1, \"a\": 1}", "{\"$unset\": {\"b\": 1, \"a.c\": 1, \"q.r\": 1}}", NULL, NULL, NULL);
}
END_TEST

START_TEST(test_inc)
{
    check_update("{\"_id\": 1, \"n\": {\"c\": 1}}", "{\"$inc\": {\"n.c\": 2, \"n.d\": 5}}",
                 "{\"_id\": 1, \"n\": {\"c\": 3, \"d\": 5}}",
                 "{\"$v\": 2, \"diff\": {\"sn\": {\"u\": {\"c\": 3}, \"i\": {\"d\": 5}}}}",
                 "{\"$v\": 1, \"$set\": {\"n.c\": 3, \"n.d\": 5}}");
    /* int32 overflow widens to int64; int32 + double is double. */
    check_update("{\"_id\": 1, \"a\": 2147483647, \"b\": 1}", "{\"$inc\": {\"a\": 1, \"b\": 0.5}}",
                 "{\"_id\": 1, \"a\": {\"$numberLong\": \"2147483648\"}, \"b\": 1.5}",
                 "{\"$v\": 2, \"diff\": {\"u\": {\"a\": {\"$numberLong\": \"2147483648\"}, \"b\": 1.5}}}",
                 "{\"$v\": 1, \"$set\": {\"a\": {\"$numberLong\": \"2147483648\"}, \"b\": 1.5}}");
    /* $inc by int32 0 on an int32: unchanged. */
    check_update("{\"_id\": 1, \"a\": 5}", "{\"$inc\": {\"a\": 0}}", NULL, NULL, NULL);
    check_update("{\"_id\": 1, \"arr\": [1, 2]}", "{\"$inc\": {\"arr.1\": 10}}", "{\"_id\": 1, \"arr\": [1, 12]}",
                 "{\"$v\": 2, \"diff\": {\"sarr\": {\"a\": true, \"u1\": 12}}}",
                 "{\"$v\": 1, \"$set\": {\"arr.1\": 12}}");
}
END_TEST

START_TEST(test_push)
{
    /* Appending to an existing array: u<newIdx> per element (7.0), $set arr.N per element (4.4). */
    check_update("{\"_id\": 1, \"a\": [1]}", "{\"$push\": {\"a\": 2}}", "{\"_id\": 1, \"a\": [1, 2]}",
                 "{\"$v\": 2, \"diff\": {\"sa\": {\"a\": true, \"u1\": 2}}}", "{\"$v\": 1, \"$set\": {\"a.1\": 2}}");
    /* Into an empty array it is not an append but a normal update, so the whole array is logged
     * (insertElementsWithPosition in mongodb/mongo src/mongo/db/update/push_node.cpp: arraySize == 0 →
     * kNormalUpdate). */
    check_update("{\"_id\": 1, \"o\": {\"a\": []}}", "{\"$push\": {\"o.a\": {\"$each\": [1, {\"x\": 1}]}}}",
                 "{\"_id\": 1, \"o\": {\"a\": [1, {\"x\": 1}]}}",
                 "{\"$v\": 2, \"diff\": {\"so\": {\"u\": {\"a\": [1, {\"x\": 1}]}}}}",
                 "{\"$v\": 1, \"$set\": {\"o.a\": [1, {\"x\": 1}]}}");
    /* Onto a missing field: the array is created (i / $set of the whole array, vector v1 "$push to new field"). */
    check_update("{\"_id\": 1}", "{\"$push\": {\"a\": {\"$each\": [1, 2]}}}", "{\"_id\": 1, \"a\": [1, 2]}",
                 "{\"$v\": 2, \"diff\": {\"i\": {\"a\": [1, 2]}}}", "{\"$v\": 1, \"$set\": {\"a\": [1, 2]}}");
    /* Empty $each on an existing array: no-op. */
    check_update("{\"_id\": 1, \"a\": [1]}", "{\"$push\": {\"a\": {\"$each\": []}}}", NULL, NULL, NULL);
    /* A document value without $ keys is pushed as is. */
    check_update("{\"_id\": 1, \"a\": []}", "{\"$push\": {\"a\": {\"k\": 1}}}", "{\"_id\": 1, \"a\": [{\"k\": 1}]}",
                 "{\"$v\": 2, \"diff\": {\"u\": {\"a\": [{\"k\": 1}]}}}",
                 "{\"$v\": 1, \"$set\": {\"a\": [{\"k\": 1}]}}");
}
END_TEST

START_TEST(test_replacement_and_errors)
{
    /* Replacement keeps _id first and logs the whole document (the server logs a replacement as the full new
     * document with _id first: makeReplacementOplogEntry in mongodb/mongo
     * src/mongo/db/update/update_oplog_entry_serialization.cpp). */
    check_update("{\"_id\": 1, \"a\": 1}", "{\"b\": 2, \"_id\": 1}", "{\"_id\": 1, \"b\": 2}", "{\"_id\": 1, \"b\": 2}",
                 "{\"_id\": 1, \"b\": 2}");
    check_update("{\"_id\": 1, \"a\": 1}", "{\"a\": 1}", NULL, NULL, NULL);
    check_update("{\"_id\": 1, \"a\": 1}", "{}", "{\"_id\": 1}", "{\"_id\": 1}", "{\"_id\": 1}");
    check_update_error("{\"_id\": 1}", "{\"_id\": 2, \"a\": 1}", 66);
    check_update_error("{\"_id\": 1}", "{\"$set\": {\"_id\": 2}}", 66);
    check_update_error("{\"_id\": 1}", "{\"$unset\": {\"_id\": 1}}", 66);
    check_update_error("{\"_id\": 1, \"s\": \"x\"}", "{\"$inc\": {\"s\": 1}}", 14);
    check_update_error("{\"_id\": 1}", "{\"$inc\": {\"s\": \"x\"}}", 14);
    check_update_error("{\"_id\": 1}", "{\"$set\": {}}", 9);
    check_update_error("{\"_id\": 1}", "{\"$foo\": {\"a\": 1}}", 9);
    check_update_error("{\"_id\": 1}", "{\"$set\": 5}", 9);
    check_update_error("{\"_id\": 1}", "{\"$set\": {\"a\": 1}, \"$inc\": {\"a.b\": 1}}", 40);
    check_update_error("{\"_id\": 1}", "{\"$set\": {\"a.b\": 1}, \"$unset\": {\"a.b\": 1}}", 40);
    check_update_error("{\"_id\": 1, \"a\": 1}", "{\"$push\": {\"a\": 1}}", 2);
    check_update_error("{\"_id\": 1}", "{\"$push\": {\"a\": {\"$each\": 1}}}", 2);
    check_update_error("{\"_id\": 1, \"a\": 1}", "{\"$set\": {\"a.b\": 1}}", 28);
    check_update_error("{\"_id\": 1, \"a\": [1]}", "{\"$set\": {\"a.x\": 1}}", 28);
    check_update_error("{\"_id\": 1}", "{\"$set\": {\"a..b\": 1}}", 56);
    check_update_error("{\"_id\": 1, \"a\": {\"$numberLong\": \"9223372036854775807\"}}", "{\"$inc\": {\"a\": 1}}", 2);
}
END_TEST

/* ---- store: writes and their oplog bodies ----------------------------------------------------------------- */

START_TEST(test_insert_create_dup)
{
    sim_store *s = store_new(SIM_FORMAT_70);
    simtest_sink k = {{0}, 0};
    bson_error_t err;
    bson_t *d1 = simtest_json("{\"a\": 1, \"_id\": 7}");
    ck_assert(store_insert(s, "db", "c", d1, simtest_sink_emit, &k, &err));
    /* Implicit create first: a write into a missing collection logs its create before the insert (the create
     * entry of tests/vectors/transcribed_understanding_the_oplog_doc.jsonl, from 7.0). */
    ck_assert_int_eq(k.n, 2);
    ck_assert_str_eq(simtest_str(k.bodies[0], "ns"), "db.$cmd");
    assert_body_o(k.bodies[0], "c",
                  "{\"create\": \"c\", \"idIndex\": {\"v\": 2, \"key\": {\"_id\": 1}, \"name\": \"_id_\"}}");
    ck_assert_str_eq(simtest_str(k.bodies[1], "ns"), "db.c");
    /* _id moved first; 7.0 inserts carry no o2 (transcribed 7.0 "plain insert"). */
    assert_body_o(k.bodies[1], "i", "{\"_id\": 7, \"a\": 1}");
    bson_t o2;
    ck_assert(!simtest_sub(k.bodies[1], "o2", &o2));
    const uint8_t *u1, *u2;
    ck_assert(body_uuid(k.bodies[0], "ui", &u1) && body_uuid(k.bodies[1], "ui", &u2));
    ck_assert(memcmp(u1, u2, 16) == 0);
    ck_assert_int_eq(u1[6] >> 4, 4);
    /* Field order of the body: op, ns, ui, o. */
    char *js = bson_as_canonical_extended_json(k.bodies[1], NULL);
    ck_assert_ptr_nonnull(strstr(js, "{ \"op\" : \"i\", \"ns\" : \"db.c\", \"ui\""));
    bson_free(js);
    simtest_sink_clear(&k);

    /* Second insert: no create. Duplicate: 11000 with the server's message, nothing emitted. */
    bson_t *d2 = simtest_json("{\"_id\": 8}");
    ck_assert(store_insert(s, "db", "c", d2, simtest_sink_emit, &k, &err));
    ck_assert_int_eq(k.n, 1);
    simtest_sink_clear(&k);
    ck_assert(!store_insert(s, "db", "c", d1, simtest_sink_emit, &k, &err));
    ck_assert_int_eq(err.code, 11000);
    ck_assert_str_eq(err.message, "E11000 duplicate key error collection: db.c index: _id_ dup key: { _id: 7 }");
    ck_assert_str_eq(store_code_name(11000), "DuplicateKey");
    ck_assert_int_eq(k.n, 0);
    /* No _id: an ObjectId is added first. */
    bson_t *d3 = simtest_json("{\"x\": 1}");
    ck_assert(store_insert(s, "db", "c", d3, simtest_sink_emit, &k, &err));
    bson_t o;
    bson_iter_t it;
    ck_assert(simtest_sub(k.bodies[0], "o", &o));
    ck_assert(bson_iter_init(&it, &o) && bson_iter_next(&it));
    ck_assert_str_eq(bson_iter_key(&it), "_id");
    ck_assert(BSON_ITER_HOLDS_OID(&it));
    ck_assert_int_eq(store_count(s, "db", "c"), 3);
    bson_t *bad = simtest_json("{\"_id\": [1]}");
    ck_assert(!store_insert(s, "db", "c", bad, simtest_sink_emit, &k, &err));
    ck_assert_int_eq(err.code, 2);
    simtest_sink_clear(&k);
    bson_destroy(d1);
    bson_destroy(d2);
    bson_destroy(d3);
    bson_destroy(bad);
    store_free(s);
}
END_TEST

START_TEST(test_update_noop_upsert_delete)
{
    sim_store *s = store_new(SIM_FORMAT_70);
    simtest_sink k = {{0}, 0};
    bson_error_t err;
    bson_t *d = simtest_json("{\"_id\": 1, \"a\": 1}"), *q = simtest_json("{\"_id\": 1}"),
           *u = simtest_json("{\"$set\": {\"a\": 1}}");
    ck_assert(store_insert(s, "db", "c", d, NULL, NULL, &err));
    sim_update_result res;
    /* No-op update: matched, not modified, nothing logged. */
    ck_assert(store_update(s, "db", "c", q, u, false, &res, simtest_sink_emit, &k, &err));
    ck_assert_int_eq(res.matched, 1);
    ck_assert_int_eq(res.modified, 0);
    ck_assert_int_eq(k.n, 0);
    store_update_result_clear(&res);
    /* No match, no upsert: nothing. */
    bson_t *q2 = simtest_json("{\"_id\": 2}"), *u2 = simtest_json("{\"$set\": {\"b\": 5}}");
    ck_assert(store_update(s, "db", "c", q2, u2, false, &res, simtest_sink_emit, &k, &err));
    ck_assert_int_eq(res.matched, 0);
    ck_assert_int_eq(k.n, 0);
    /* Upsert that inserts: logged, as the server does, as an i entry with the document it built. */
    ck_assert(store_update(s, "db", "c", q2, u2, true, &res, simtest_sink_emit, &k, &err));
    ck_assert(res.upserted);
    ck_assert_int_eq(res.upserted_id.value_type, BSON_TYPE_INT32);
    ck_assert_int_eq(res.upserted_id.value.v_int32, 2);
    ck_assert_int_eq(k.n, 1);
    assert_body_o(k.bodies[0], "i", "{\"_id\": 2, \"b\": 5}");
    store_update_result_clear(&res);
    simtest_sink_clear(&k);
    /* Upsert into a new collection: create first, then i. */
    bson_t *rep = simtest_json("{\"z\": 1}");
    ck_assert(store_update(s, "db", "new", q2, rep, true, &res, simtest_sink_emit, &k, &err));
    ck_assert_int_eq(k.n, 2);
    ck_assert_str_eq(simtest_str(k.bodies[0], "op"), "c");
    assert_body_o(k.bodies[1], "i", "{\"_id\": 2, \"z\": 1}");
    store_update_result_clear(&res);
    simtest_sink_clear(&k);
    /* Unsupported query shape. */
    bson_t *qbad = simtest_json("{\"a\": 1}");
    ck_assert(!store_update(s, "db", "c", qbad, u, false, &res, simtest_sink_emit, &k, &err));
    ck_assert_int_eq(err.code, 2);
    /* Delete by _id: o {_id}. */
    int64_t n;
    ck_assert(store_delete(s, "db", "c", q, 0, &n, simtest_sink_emit, &k, &err));
    ck_assert_int_eq(n, 1);
    assert_body_o(k.bodies[0], "d", "{\"_id\": 1}");
    simtest_sink_clear(&k);
    ck_assert(store_delete(s, "db", "c", q, 0, &n, simtest_sink_emit, &k, &err));
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(k.n, 0);
    bson_t *empty = simtest_json("{}");
    ck_assert(store_delete(s, "db", "new", empty, 0, &n, simtest_sink_emit, &k, &err));
    ck_assert_int_eq(n, 1);
    simtest_sink_clear(&k);
    bson_destroy(d);
    bson_destroy(q);
    bson_destroy(u);
    bson_destroy(q2);
    bson_destroy(u2);
    bson_destroy(rep);
    bson_destroy(qbad);
    bson_destroy(empty);
    store_free(s);
}
END_TEST

static void fill(sim_store *s, const char *db, const char *coll, int n)
{
    bson_error_t err;
    for (int i = 0; i < n; i++) {
        bson_t d = BSON_INITIALIZER;
        BSON_APPEND_INT32(&d, "_id", i);
        ck_assert_msg(store_insert(s, db, coll, &d, NULL, NULL, &err), "%s", err.message);
        bson_destroy(&d);
    }
}

typedef struct {
    char names[8][64];
    uint8_t uuids[8][16];
    int n;
} names;

static void grab_name(void *ctx, const char *name, const uint8_t *uuid)
{
    names *nm = ctx;
    ck_assert_int_lt(nm->n, 8);
    snprintf(nm->names[nm->n], 64, "%s", name);
    if (uuid)
        memcpy(nm->uuids[nm->n], uuid, 16);
    nm->n++;
}

START_TEST(test_ddl_bodies)
{
    sim_store *s = store_new(SIM_FORMAT_70);
    simtest_sink k = {{0}, 0};
    bson_error_t err;
    fill(s, "db", "b", 3);
    fill(s, "db", "a", 2);
    ck_assert(!store_create(s, "db", "a", simtest_sink_emit, &k, &err));
    ck_assert_int_eq(err.code, 48);
    ck_assert(store_create(s, "db", "e", simtest_sink_emit, &k, &err));
    ck_assert_int_eq(k.n, 1);
    simtest_sink_clear(&k);

    names nm = {{{0}}, {{0}}, 0};
    store_list_collections(s, "db", grab_name, &nm);
    ck_assert_int_eq(nm.n, 3);
    ck_assert_str_eq(nm.names[0], "a");
    ck_assert_str_eq(nm.names[1], "b");
    ck_assert_str_eq(nm.names[2], "e");

    /* Drop: o {drop}, o2 {numRecords: int32} (4.4 ddl_stream dump). */
    bool existed;
    ck_assert(store_drop(s, "db", "e", &existed, simtest_sink_emit, &k, &err));
    ck_assert(existed);
    assert_body_o(k.bodies[0], "c", "{\"drop\": \"e\"}");
    bson_t o2;
    ck_assert(simtest_sub(k.bodies[0], "o2", &o2));
    bson_t *want = simtest_json("{\"numRecords\": 0}");
    simtest_assert_bson_eq(&o2, want, "drop o2");
    bson_destroy(want);
    simtest_sink_clear(&k);
    ck_assert(store_drop(s, "db", "e", &existed, simtest_sink_emit, &k, &err));
    ck_assert(!existed);
    ck_assert_int_eq(k.n, 0);

    /* Rename onto an existing target without dropTarget: 48; with it: dropTarget UUID + o2 numRecords. */
    ck_assert(!store_rename(s, "db", "a", "db", "b", false, simtest_sink_emit, &k, &err));
    ck_assert_int_eq(err.code, 48);
    ck_assert_int_eq(k.n, 0);
    ck_assert(store_rename(s, "db", "a", "db", "b", true, simtest_sink_emit, &k, &err));
    ck_assert_int_eq(k.n, 1);
    ck_assert_str_eq(simtest_str(k.bodies[0], "ns"), "db.$cmd");
    const uint8_t *ui, *dt;
    ck_assert(body_uuid(k.bodies[0], "ui", &ui));
    ck_assert(memcmp(ui, nm.uuids[0], 16) == 0); /* source UUID */
    bson_t o;
    ck_assert(simtest_sub(k.bodies[0], "o", &o));
    ck_assert(body_uuid(&o, "dropTarget", &dt));
    ck_assert(memcmp(dt, nm.uuids[1], 16) == 0);
    char *js = bson_as_relaxed_extended_json(&o, NULL);
    ck_assert_ptr_nonnull(strstr(js, "{ \"renameCollection\" : \"db.a\", \"to\" : \"db.b\", \"stayTemp\" : false, "
                                     "\"dropTarget\""));
    bson_free(js);
    ck_assert(simtest_sub(k.bodies[0], "o2", &o2));
    want = simtest_json("{\"numRecords\": 3}");
    simtest_assert_bson_eq(&o2, want, "rename o2");
    bson_destroy(want);
    ck_assert_int_eq(store_count(s, "db", "b"), 2);
    ck_assert_int_eq(store_count(s, "db", "a"), 0);
    simtest_sink_clear(&k);
    /* Plain rename: no dropTarget, no o2. */
    ck_assert(store_rename(s, "db", "b", "db", "c", false, simtest_sink_emit, &k, &err));
    assert_body_o(k.bodies[0], "c", "{\"renameCollection\": \"db.b\", \"to\": \"db.c\", \"stayTemp\": false}");
    ck_assert(!simtest_sub(k.bodies[0], "o2", &o2));
    simtest_sink_clear(&k);
    ck_assert(!store_rename(s, "db", "zz", "db", "y", false, simtest_sink_emit, &k, &err));
    ck_assert_int_eq(err.code, 26);

    /* Across databases: create tmp, inserts, rename tmp → target, drop source. */
    ck_assert(store_rename(s, "db", "c", "other", "t", false, simtest_sink_emit, &k, &err));
    ck_assert_int_eq(k.n, 5);
    ck_assert_str_eq(simtest_str(k.bodies[0], "op"), "c");
    ck_assert_str_eq(simtest_str(k.bodies[0], "ns"), "other.$cmd");
    ck_assert_str_eq(simtest_str(k.bodies[1], "op"), "i");
    ck_assert_str_eq(simtest_str(k.bodies[2], "op"), "i");
    ck_assert(simtest_sub(k.bodies[3], "o", &o));
    ck_assert_str_eq(simtest_str(&o, "to"), "other.t");
    ck_assert(simtest_sub(k.bodies[4], "o", &o));
    ck_assert_str_eq(simtest_str(&o, "drop"), "c");
    ck_assert_str_eq(simtest_str(k.bodies[4], "ns"), "db.$cmd");
    ck_assert_int_eq(store_count(s, "other", "t"), 2);
    simtest_sink_clear(&k);

    /* dropDatabase: one drop per collection, then {dropDatabase: 1} without ui. */
    fill(s, "other", "u", 1);
    ck_assert(store_drop_database(s, "other", simtest_sink_emit, &k, &err));
    ck_assert_int_eq(k.n, 3);
    assert_body_o(k.bodies[0], "c", "{\"drop\": \"t\"}");
    assert_body_o(k.bodies[1], "c", "{\"drop\": \"u\"}");
    assert_body_o(k.bodies[2], "c", "{\"dropDatabase\": 1}");
    ck_assert(!body_uuid(k.bodies[2], "ui", &ui));
    simtest_sink_clear(&k);
    names dbs = {{{0}}, {{0}}, 0};
    store_list_databases(s, grab_name, &dbs);
    ck_assert_int_eq(dbs.n, 0); /* "db" lost its last collection through the cross-db rename */
    store_free(s);
}
END_TEST

START_TEST(test_format44_update_body)
{
    sim_store *s = store_new(SIM_FORMAT_44);
    simtest_sink k = {{0}, 0};
    bson_error_t err;
    bson_t *d = simtest_json("{\"_id\": 1, \"a\": [1]}"), *q = simtest_json("{\"_id\": 1}"),
           *u = simtest_json("{\"$push\": {\"a\": 2}}");
    ck_assert(store_insert(s, "db", "c", d, NULL, NULL, &err));
    ck_assert(store_update(s, "db", "c", q, u, false, NULL, simtest_sink_emit, &k, &err));
    ck_assert_int_eq(k.n, 1);
    assert_body_o(k.bodies[0], "u", "{\"$v\": 1, \"$set\": {\"a.1\": 2}}");
    simtest_sink_clear(&k);
    bson_destroy(d);
    bson_destroy(q);
    bson_destroy(u);
    store_free(s);
}
END_TEST

/* ---- reads ------------------------------------------------------------------------------------------------ */

typedef struct {
    bson_t *ids;
    int n;
    int stop_after;
} collect;

static bool collect_id(void *ctx, const bson_t *doc)
{
    collect *c = ctx;
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, doc, "_id"));
    char key[16];
    snprintf(key, sizeof key, "%d", c->n);
    bson_append_iter(c->ids, key, -1, &it);
    c->n++;
    return c->stop_after == 0 || c->n < c->stop_after;
}

START_TEST(test_id_order_across_types)
{
    sim_store *s = store_new(SIM_FORMAT_70);
    bson_error_t err;
    /* Inserted shuffled; expected order: MinKey < null < numbers < string < object < binData < ObjectId < bool <
     * date < timestamp < MaxKey. */
    const char *ids[] = {
        "{\"$maxKey\": 1}",
        "{\"$timestamp\": {\"t\": 1, \"i\": 1}}",
        "\"b\"",
        "{\"$date\": {\"$numberLong\": \"5\"}}",
        "true",
        "{\"$oid\": \"000000000000000000000001\"}",
        "{\"$binary\": {\"base64\": \"AA==\", \"subType\": \"00\"}}",
        "{\"x\": 1}",
        "\"a\"",
        "2.5",
        "{\"$numberLong\": \"3\"}",
        "1",
        "null",
        "{\"$minKey\": 1}",
        "false",
        "{\"x\": 0, \"y\": 1}",
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        char buf[200];
        snprintf(buf, sizeof buf, "{\"_id\": %s}", ids[i]);
        bson_t *d = simtest_json(buf);
        ck_assert_msg(store_insert(s, "db", "c", d, NULL, NULL, &err), "%s: %s", buf, err.message);
        bson_destroy(d);
    }
    /* 3 (int64) and 3.0 (double) are the same key. */
    bson_t *dup = simtest_json("{\"_id\": 3.0}");
    ck_assert(!store_insert(s, "db", "c", dup, NULL, NULL, &err));
    ck_assert_int_eq(err.code, 11000);
    bson_destroy(dup);
    collect c = {bson_new(), 0, 0};
    store_find(s, "db", "c", NULL, collect_id, &c);
    bson_t *want =
        simtest_json("{\"0\": {\"$minKey\": 1}, \"1\": null, \"2\": 1, \"3\": 2.5, \"4\": {\"$numberLong\": \"3\"}, "
                     "\"5\": \"a\", \"6\": \"b\", \"7\": {\"x\": 0, \"y\": 1}, \"8\": {\"x\": 1}, "
                     "\"9\": {\"$binary\": {\"base64\": \"AA==\", \"subType\": \"00\"}}, "
                     "\"10\": {\"$oid\": \"000000000000000000000001\"}, \"11\": false, \"12\": true, "
                     "\"13\": {\"$date\": {\"$numberLong\": \"5\"}}, \"14\": {\"$timestamp\": {\"t\": 1, \"i\": 1}}, "
                     "\"15\": {\"$maxKey\": 1}}");
    simtest_assert_bson_eq(c.ids, want, "_id order");
    bson_destroy(want);
    bson_destroy(c.ids);
    store_free(s);
}
END_TEST

static int count_find(sim_store *s, const char *filter_json, int stop_after, int *first)
{
    bson_t *f = simtest_json(filter_json);
    collect c = {bson_new(), 0, stop_after};
    store_find(s, "db", "c", f, collect_id, &c);
    bson_iter_t it;
    if (first && bson_iter_init(&it, c.ids) && bson_iter_next(&it))
        *first = bson_iter_as_int64(&it) > INT32_MAX ? -1 : (int)bson_iter_as_int64(&it);
    int n = c.n;
    bson_destroy(c.ids);
    bson_destroy(f);
    return n;
}

START_TEST(test_find_ranges)
{
    sim_store *s = store_new(SIM_FORMAT_70);
    bson_error_t err;
    fill(s, "db", "c", 100);
    bson_t *str = simtest_json("{\"_id\": \"str\"}");
    ck_assert(store_insert(s, "db", "c", str, NULL, NULL, &err));
    bson_destroy(str);
    int first = -1;
    ck_assert_int_eq(count_find(s, "{}", 0, NULL), 101);
    ck_assert_int_eq(count_find(s, "{\"_id\": 42}", 0, &first), 1);
    ck_assert_int_eq(first, 42);
    ck_assert_int_eq(count_find(s, "{\"_id\": 1000}", 0, NULL), 0);
    ck_assert_int_eq(count_find(s, "{\"_id\": {\"$gte\": 10, \"$lt\": 20}}", 0, &first), 10);
    ck_assert_int_eq(first, 10);
    ck_assert_int_eq(count_find(s, "{\"_id\": {\"$gt\": 10, \"$lte\": 20}}", 0, &first), 10);
    ck_assert_int_eq(first, 11);
    /* Type bracketing: $gt a number does not return the string _id. */
    ck_assert_int_eq(count_find(s, "{\"_id\": {\"$gt\": 89.5}}", 0, &first), 10);
    ck_assert_int_eq(first, 90);
    ck_assert_int_eq(count_find(s, "{\"_id\": {\"$lt\": 5}}", 0, NULL), 5);
    ck_assert_int_eq(count_find(s, "{\"_id\": {\"$gt\": \"a\"}}", 0, NULL), 1);
    ck_assert_int_eq(count_find(s, "{\"_id\": {\"$gt\": {\"$minKey\": 1}}}", 0, NULL), 101);
    ck_assert_int_eq(count_find(s, "{\"_id\": {\"$gt\": 50, \"$gte\": 60}}", 0, &first), 40);
    ck_assert_int_eq(first, 60);
    ck_assert_int_eq(count_find(s, "{\"_id\": {\"$gt\": 50, \"$lt\": 40}}", 0, NULL), 0);
    /* Early stop. */
    ck_assert_int_eq(count_find(s, "{\"_id\": {\"$gte\": 0}}", 7, NULL), 7);
    bson_t *bad = simtest_json("{\"a\": 1}");
    ck_assert(!store_filter_supported(bad, &err));
    ck_assert_int_eq(err.code, 2);
    bson_destroy(bad);
    ck_assert_int_eq(count_find(s, "{\"_id\": {\"$in\": [1]}}", 0, NULL), 0);
    store_free(s);
}
END_TEST

static void rm_rf(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_load_save_roundtrip)
{
    char tmpl[] = "/tmp/mongosim_store_XXXXXX";
    char *dir = mkdtemp(tmpl);
    ck_assert_ptr_nonnull(dir);
    bson_error_t err;
    sim_store *s = store_new(SIM_FORMAT_70);
    fill(s, "d1", "x", 50);
    fill(s, "d2", "y", 3);
    bson_t *nested = simtest_json("{\"_id\": \"k\", \"a\": {\"b\": [1, 2, {\"c\": null}]}}");
    ck_assert(store_insert(s, "d2", "z", nested, NULL, NULL, &err));
    ck_assert_msg(store_save_dir(s, dir, &err), "%s", err.message);

    sim_store *t = store_new(SIM_FORMAT_70);
    ck_assert_msg(store_load_dir(t, dir, &err), "%s", err.message);
    ck_assert_int_eq(store_count(t, "d1", "x"), 50);
    ck_assert_int_eq(store_count(t, "d2", "y"), 3);
    bson_t *q = simtest_json("{\"_id\": \"k\"}");
    bson_t *got = find_one(t, "d2", "z", q);
    ck_assert_ptr_nonnull(got);
    simtest_assert_bson_eq(got, nested, "round trip");
    bson_destroy(got);
    names dbs = {{{0}}, {{0}}, 0};
    store_list_databases(t, grab_name, &dbs);
    ck_assert_int_eq(dbs.n, 2);
    ck_assert_str_eq(dbs.names[0], "d1");
    /* Each collection keeps its UUID, as across a server's restart (a new one would look like a drop and a create
     * to a reader that follows collections by UUID, such as oplog2pg's initial copy). */
    uint8_t before[16], after[16];
    ck_assert(store_collection_uuid(s, "d1", "x", before) && store_collection_uuid(t, "d1", "x", after));
    ck_assert_mem_eq(before, after, 16);
    ck_assert(store_collection_uuid(s, "d2", "z", before) && store_collection_uuid(t, "d2", "z", after));
    ck_assert_mem_eq(before, after, 16);
    store_free(t);

    /* A collection and a database dropped after a save are gone from the next save: a restart from the state does
     * not bring them back. */
    ck_assert(store_drop(s, "d1", "x", NULL, NULL, NULL, &err));
    ck_assert(store_drop_database(s, "d2", NULL, NULL, &err));
    fill(s, "d3", "w", 2);
    ck_assert_msg(store_save_dir(s, dir, &err), "%s", err.message);
    t = store_new(SIM_FORMAT_70);
    ck_assert_msg(store_load_dir(t, dir, &err), "%s", err.message);
    ck_assert_int_eq(store_count(t, "d1", "x"), 0);
    ck_assert_int_eq(store_count(t, "d2", "y"), 0);
    ck_assert_int_eq(store_count(t, "d3", "w"), 2);
    names left = {{{0}}, {{0}}, 0};
    store_list_databases(t, grab_name, &left);
    ck_assert_int_eq(left.n, 1);
    ck_assert_str_eq(left.names[0], "d3");
    store_free(t);
    fill(s, "d2", "y", 3); /* back as before, for the checks below */
    ck_assert_msg(store_save_dir(s, dir, &err), "%s", err.message);

    /* A corrupt document: the error names the file and the offset. */
    char path[600];
    snprintf(path, sizeof path, "%s/d2/y.bson", dir);
    FILE *fp = fopen(path, "ab");
    ck_assert_ptr_nonnull(fp);
    const uint8_t junk[] = {12, 0, 0, 0, 0x10, 'a', 0, 1, 0, 0, 0, 7}; /* bad terminator */
    fwrite(junk, 1, sizeof junk, fp);
    fclose(fp);
    t = store_new(SIM_FORMAT_70);
    ck_assert(!store_load_dir(t, dir, &err));
    ck_assert_msg(strstr(err.message, "y.bson") && strstr(err.message, "offset 42"), "%s", err.message);
    store_free(t);

    bson_destroy(q);
    bson_destroy(nested);
    store_free(s);
    rm_rf(dir);
}
END_TEST

static bool count_only(void *ctx, const bson_t *doc)
{
    (*(int *)ctx)++;
    return true;
}

START_TEST(test_large_collection)
{
    /* 200 000 inserts in descending order (worst case for naive structures), then range scans and lookups; an
     * O(n) insert or seek would blow the timeout. */
    const int N = 200000;
    sim_store *s = store_new(SIM_FORMAT_70);
    bson_error_t err;
    for (int i = N - 1; i >= 0; i--) {
        bson_t d = BSON_INITIALIZER;
        BSON_APPEND_INT64(&d, "_id", i);
        BSON_APPEND_UTF8(&d, "v", "payload");
        ck_assert(store_insert(s, "db", "big", &d, NULL, NULL, &err));
        bson_destroy(&d);
    }
    ck_assert_int_eq(store_count(s, "db", "big"), N);
    int n = 0;
    store_find(s, "db", "big", NULL, count_only, &n);
    ck_assert_int_eq(n, N);
    /* 2 000 seeks of "first 10 after X" (a cursor's getMore pattern). */
    for (int i = 0; i < 2000; i++) {
        bson_t f = BSON_INITIALIZER, r;
        BSON_APPEND_DOCUMENT_BEGIN(&f, "_id", &r);
        BSON_APPEND_INT32(&r, "$gt", i * 97);
        bson_append_document_end(&f, &r);
        collect c = {bson_new(), 0, 10};
        store_find(s, "db", "big", &f, collect_id, &c);
        ck_assert_int_eq(c.n, 10);
        bson_iter_t it;
        ck_assert(bson_iter_init(&it, c.ids) && bson_iter_next(&it));
        ck_assert_int_eq(bson_iter_int64(&it), i * 97 + 1);
        bson_destroy(c.ids);
        bson_destroy(&f);
    }
    /* Updates and deletes by _id stay logarithmic. */
    bson_t *u = simtest_json("{\"$inc\": {\"n\": 1}}");
    for (int i = 0; i < N; i += 10) {
        bson_t q = BSON_INITIALIZER;
        BSON_APPEND_INT64(&q, "_id", i);
        ck_assert(store_update(s, "db", "big", &q, u, false, NULL, NULL, NULL, &err));
        int64_t del;
        if (i % 20 == 0)
            ck_assert(store_delete(s, "db", "big", &q, 0, &del, NULL, NULL, &err) && del == 1);
        bson_destroy(&q);
    }
    bson_destroy(u);
    ck_assert_int_eq(store_count(s, "db", "big"), N - N / 20);
    store_free(s);
}
END_TEST

Suite *mongosim_store_suite(void); /* called by the generated runner list */

Suite *mongosim_store_suite(void)
{
    Suite *s = suite_create("mongosim_store");
    TCase *tc = tcase_create("update");
    tcase_add_test(tc, test_vectors_v2);
    tcase_add_test(tc, test_vectors_v1);
    tcase_add_test(tc, test_set_nested);
    tcase_add_test(tc, test_unset);
    tcase_add_test(tc, test_inc);
    tcase_add_test(tc, test_push);
    tcase_add_test(tc, test_replacement_and_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("store");
    tcase_add_test(tc, test_insert_create_dup);
    tcase_add_test(tc, test_update_noop_upsert_delete);
    tcase_add_test(tc, test_ddl_bodies);
    tcase_add_test(tc, test_format44_update_body);
    tcase_add_test(tc, test_id_order_across_types);
    tcase_add_test(tc, test_find_ranges);
    tcase_add_test(tc, test_load_save_roundtrip);
    suite_add_tcase(s, tc);
    tc = tcase_create("scale");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_large_collection);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_mongosim_update.c — mongosim's update operators beyond $set/$unset/$inc (tests/mongosim/update.c): $pull,
 * $pullAll, $addToSet, $pop, $min, $max, $mul, $rename, $currentDate and the $push modifiers ($each, $slice, $sort,
 * $position).
 *
 * For each operator: the resulting document, the exact `o` a 7.0 server logs ($v:2 diff) and a 4.4 server logs
 * ($v:1), the no-op case (nothing changes, nothing is logged) and the errors with the server's codes. Each
 * expectation names the server source it rests on (mongodb/mongo src/mongo/db/update/...). JSON in this file uses
 * single quotes, turned into double quotes before parsing.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../mongosim/store.h"
#include "../mongosim/update.h"

/* ---- helpers ---------------------------------------------------------------------------------------------- */

static bson_t *J(const char *json)
{
    char *s = bson_strdup(json);
    for (char *p = s; *p; p++)
        if (*p == '\'')
            *p = '"';
    bson_error_t err;
    bson_t *b = bson_new_from_json((const uint8_t *)s, -1, &err);
    ck_assert_msg(b != NULL, "bad JSON in test: %s: %s", s, err.message);
    bson_free(s);
    return b;
}

static void assert_bson_eq(const bson_t *got, const bson_t *want, const char *what, const char *fmt)
{
    bool eq = got->len == want->len && memcmp(bson_get_data(got), bson_get_data(want), got->len) == 0;
    if (!eq) {
        char *g = bson_as_canonical_extended_json(got, NULL);
        char *w = bson_as_canonical_extended_json(want, NULL);
        ck_abort_msg("%s (%s):\n got  %s\n want %s", what, fmt, g, w);
    }
}

/* Applies u to doc in both formats and checks the new document and the o of each (o70 NULL: a no-op). */
static void check_bson(const char *doc_json, const bson_t *u, const char *u_json, const char *want_doc, const char *o70,
                       const char *o44)
{
    bson_t *doc = J(doc_json);
    for (int f = 0; f < 2; f++) {
        sim_oplog_format fmt = f ? SIM_FORMAT_44 : SIM_FORMAT_70;
        const char *want_o = f ? o44 : o70, *name = f ? "4.4" : "7.0";
        bson_t nd, o;
        bool changed;
        bson_error_t err;
        ck_assert_msg(update_apply(doc, u, fmt, false, &nd, &o, &changed, &err), "%s (%s): %s", u_json, name,
                      err.message);
        if (!o70) {
            ck_assert_msg(!changed, "%s (%s) should be a no-op", u_json, name);
            continue;
        }
        ck_assert_msg(changed, "%s (%s) should change the document", u_json, name);
        bson_t *wd = J(want_doc), *wo = J(want_o);
        assert_bson_eq(&nd, wd, u_json, name);
        assert_bson_eq(&o, wo, u_json, name);
        bson_destroy(wd);
        bson_destroy(wo);
        bson_destroy(&nd);
        bson_destroy(&o);
    }
    bson_destroy(doc);
}

static void check(const char *doc_json, const char *u_json, const char *want_doc, const char *o70, const char *o44)
{
    bson_t *u = J(u_json);
    check_bson(doc_json, u, u_json, want_doc, o70, o44);
    bson_destroy(u);
}

static void noop(const char *doc_json, const char *u_json)
{
    check(doc_json, u_json, NULL, NULL, NULL);
}

/* The update fails with the server code `code`, in both formats. */
static void check_err_bson(const char *doc_json, const bson_t *u, const char *u_json, int code)
{
    bson_t *doc = J(doc_json);
    for (int f = 0; f < 2; f++) {
        bson_t nd, o;
        bool changed;
        bson_error_t err;
        ck_assert_msg(!update_apply(doc, u, f ? SIM_FORMAT_44 : SIM_FORMAT_70, false, &nd, &o, &changed, &err),
                      "%s should fail", u_json);
        ck_assert_msg((int)err.code == code, "%s: code %d (%s), want %d", u_json, (int)err.code, err.message, code);
    }
    bson_destroy(doc);
}

static void check_err(const char *doc_json, const char *u_json, int code)
{
    bson_t *u = J(u_json);
    check_err_bson(doc_json, u, u_json, code);
    bson_destroy(u);
}

/* ---- $pull -------------------------------------------------------------------------------------------------- */

START_TEST(test_pull)
{
    /* Equality (PullNode's EqualityMatcher compares values, so 2.0 equals 2); the whole new array is logged
     * (ArrayCullingNode returns kNormalUpdate → ModifierNode::logUpdate → logUpdatedField). */
    check("{'_id': 1, 'a': [1, 2.0, 3, 2]}", "{'$pull': {'a': 2}}", "{'_id': 1, 'a': [1, 3]}",
          "{'$v': 2, 'diff': {'u': {'a': [1, 3]}}}", "{'$v': 1, '$set': {'a': [1, 3]}}");
    /* jstests/replsets/oplog_format.js "TwoNestedPulls", 7.0 branch. */
    check("{'_id': 1, 'a': {'b': [1, 2], 'c': [1, 2]}}", "{'$pull': {'a.b': 2, 'a.c': 2}}",
          "{'_id': 1, 'a': {'b': [1], 'c': [1]}}", "{'$v': 2, 'diff': {'sa': {'u': {'b': [1], 'c': [1]}}}}",
          "{'$v': 1, '$set': {'a.b': [1], 'a.c': [1]}}");
    /* An array value is matched whole. */
    check("{'_id': 1, 'a': [[1, 2], [2, 1], 1]}", "{'$pull': {'a': [1, 2]}}", "{'_id': 1, 'a': [[2, 1], 1]}",
          "{'$v': 2, 'diff': {'u': {'a': [[2, 1], 1]}}}", "{'$v': 1, '$set': {'a': [[2, 1], 1]}}");
    /* A path through an array index logs u<idx> in the array's diff. */
    check("{'_id': 1, 'a': [[1, 2], [3]]}", "{'$pull': {'a.0': 1}}", "{'_id': 1, 'a': [[2], [3]]}",
          "{'$v': 2, 'diff': {'sa': {'a': true, 'u0': [2]}}}", "{'$v': 1, '$set': {'a.0': [2]}}");
    /* Pulling the last element leaves an empty array. */
    check("{'_id': 1, 'a': [5]}", "{'$pull': {'a': 5}}", "{'_id': 1, 'a': []}", "{'$v': 2, 'diff': {'u': {'a': []}}}",
          "{'$v': 1, '$set': {'a': []}}");

    /* Conditions (WrappedObjectMatcher: the element is matched as {'': element}): comparisons only match values of
     * the same canonical type, and a nested array matches if one of its elements does. */
    check("{'_id': 1, 'v': [3, 5, 7, 'x', [1, 9]]}", "{'$pull': {'v': {'$gte': 5}}}", "{'_id': 1, 'v': [3, 'x']}",
          "{'$v': 2, 'diff': {'u': {'v': [3, 'x']}}}", "{'$v': 1, '$set': {'v': [3, 'x']}}");
    check("{'_id': 1, 'v': [1, 2, 3]}", "{'$pull': {'v': {'$gt': 1, '$lt': 3}}}", "{'_id': 1, 'v': [1, 3]}",
          "{'$v': 2, 'diff': {'u': {'v': [1, 3]}}}", "{'$v': 1, '$set': {'v': [1, 3]}}");
    check("{'_id': 1, 'v': [1, 2, 3, null]}", "{'$pull': {'v': {'$in': [2, null]}}}", "{'_id': 1, 'v': [1, 3]}",
          "{'$v': 2, 'diff': {'u': {'v': [1, 3]}}}", "{'$v': 1, '$set': {'v': [1, 3]}}");
    check("{'_id': 1, 'v': [1, 2, 3]}", "{'$pull': {'v': {'$nin': [1, 2]}}}", "{'_id': 1, 'v': [1, 2]}",
          "{'$v': 2, 'diff': {'u': {'v': [1, 2]}}}", "{'$v': 1, '$set': {'v': [1, 2]}}");
    check("{'_id': 1, 'v': [1, 2, 1]}", "{'$pull': {'v': {'$ne': 1}}}", "{'_id': 1, 'v': [1, 1]}",
          "{'$v': 2, 'diff': {'u': {'v': [1, 1]}}}", "{'$v': 1, '$set': {'v': [1, 1]}}");
    check("{'_id': 1, 'v': [1, 2, 'b']}", "{'$pull': {'v': {'$lte': 1, '$eq': 1.0}}}", "{'_id': 1, 'v': [2, 'b']}",
          "{'$v': 2, 'diff': {'u': {'v': [2, 'b']}}}", "{'$v': 1, '$set': {'v': [2, 'b']}}");

    /* Document conditions (ObjectMatcher: a query on elements that are objects; other elements never match). */
    check("{'_id': 1, 'items': [{'k': 1, 'q': 5}, {'k': 2, 'q': 1}, {'k': 1, 'q': 0}, 3]}",
          "{'$pull': {'items': {'k': 1}}}", "{'_id': 1, 'items': [{'k': 2, 'q': 1}, 3]}",
          "{'$v': 2, 'diff': {'u': {'items': [{'k': 2, 'q': 1}, 3]}}}",
          "{'$v': 1, '$set': {'items': [{'k': 2, 'q': 1}, 3]}}");
    check("{'_id': 1, 'items': [{'k': 1, 'q': 5}, {'k': 2, 'q': 1}]}", "{'$pull': {'items': {'q': {'$gt': 2}}}}",
          "{'_id': 1, 'items': [{'k': 2, 'q': 1}]}", "{'$v': 2, 'diff': {'u': {'items': [{'k': 2, 'q': 1}]}}}",
          "{'$v': 1, '$set': {'items': [{'k': 2, 'q': 1}]}}");
    check("{'_id': 1, 'a': [{'m': {'id': 5}}, {'m': {'id': 6}}]}", "{'$pull': {'a': {'m.id': 5}}}",
          "{'_id': 1, 'a': [{'m': {'id': 6}}]}", "{'$v': 2, 'diff': {'u': {'a': [{'m': {'id': 6}}]}}}",
          "{'$v': 1, '$set': {'a': [{'m': {'id': 6}}]}}");
    /* {x: null} matches a missing x; an array field matches if one of its elements does; {} matches any object. */
    check("{'_id': 1, 'a': [{'x': 1}, {'y': 2}]}", "{'$pull': {'a': {'x': null}}}", "{'_id': 1, 'a': [{'x': 1}]}",
          "{'$v': 2, 'diff': {'u': {'a': [{'x': 1}]}}}", "{'$v': 1, '$set': {'a': [{'x': 1}]}}");
    check("{'_id': 1, 'a': [{'t': ['x', 'y']}, {'t': ['z']}]}", "{'$pull': {'a': {'t': 'x'}}}",
          "{'_id': 1, 'a': [{'t': ['z']}]}", "{'$v': 2, 'diff': {'u': {'a': [{'t': ['z']}]}}}",
          "{'$v': 1, '$set': {'a': [{'t': ['z']}]}}");
    check("{'_id': 1, 'a': [{'x': 1}, 2, {}]}", "{'$pull': {'a': {}}}", "{'_id': 1, 'a': [2]}",
          "{'$v': 2, 'diff': {'u': {'a': [2]}}}", "{'$v': 1, '$set': {'a': [2]}}");

    /* No-ops: nothing matches, or the path does not exist (ModifierNode::applyToNonexistentElement). */
    noop("{'_id': 1, 'a': [1, 2]}", "{'$pull': {'a': 5}}");
    noop("{'_id': 1, 'a': [1, 2]}", "{'$pull': {'a': {'$gt': 'x'}}}");
    noop("{'_id': 1, 'a': [1, 2]}", "{'$pull': {'b': 1, 'x.y': 1, 'a.5': 1}}");

    /* Errors. */
    check_err("{'_id': 1, 'a': 1}", "{'$pull': {'a': 1}}", 2);                      /* ArrayCullingNode: not an array */
    check_err("{'_id': 1, 'a': 1}", "{'$pull': {'a.b': 1}}", 28);                   /* checkViability: PathNotViable */
    check_err("{'_id': 1, 'a': [{'b': [1]}]}", "{'$pull': {'a.b': 1}}", 28);        /* a field name on an array */
    check_err("{'_id': 1, 'a': []}", "{'$pull': {'a': {'$foo': 1}}}", 2);           /* unknown top level operator */
    check_err("{'_id': 1, 'a': []}", "{'$pull': {'a': {'$gt': 1, '$foo': 1}}}", 2); /* unknown operator */
    check_err("{'_id': 1, 'a': []}", "{'$pull': {'a': {'$gt': 1, 'b': 1}}}", 2);
    check_err("{'_id': 1, 'a': []}", "{'$pull': {'a': {'$in': 1}}}", 2); /* $in needs an array */
    /* Refused by mongosim rather than guessed (BadValue): other query operators, regular expressions, logical
     * operators, and document paths that would traverse arrays. */
    check_err("{'_id': 1, 'a': []}", "{'$pull': {'a': {'$regex': 'x'}}}", 2);
    check_err("{'_id': 1, 'a': []}", "{'$pull': {'a': {'$elemMatch': {'b': 1}}}}", 2);
    check_err("{'_id': 1, 'a': []}", "{'$pull': {'a': {'$exists': true}}}", 2);
    check_err("{'_id': 1, 'a': []}", "{'$pull': {'a': {'$or': [{'b': 1}]}}}", 2);
    check_err("{'_id': 1, 'a': []}", "{'$pull': {'a': {'$regularExpression': {'pattern': 'x', 'options': ''}}}}", 2);
    check_err("{'_id': 1, 'a': []}", "{'$pull': {'a': {'b': {'$not': {'$gt': 1}}}}}", 2);
    check_err("{'_id': 1, 'a': [{'b': 1}, 2, {'b': [{'c': 1}]}]}", "{'$pull': {'a': {'b.c': 1}}}", 2);
}
END_TEST

/* ---- $pullAll ----------------------------------------------------------------------------------------------- */

START_TEST(test_pull_all)
{
    /* PullAllNode's SetMatcher: equal (by value) to any listed value. */
    check("{'_id': 1, 'a': [1, 2, 3, 1.0, 'x']}", "{'$pullAll': {'a': [1, 'x', 9]}}", "{'_id': 1, 'a': [2, 3]}",
          "{'$v': 2, 'diff': {'u': {'a': [2, 3]}}}", "{'$v': 1, '$set': {'a': [2, 3]}}");
    check("{'_id': 1, 'o': {'a': [[1], {'k': 1}, 2]}}", "{'$pullAll': {'o.a': [[1], {'k': 1}]}}",
          "{'_id': 1, 'o': {'a': [2]}}", "{'$v': 2, 'diff': {'so': {'u': {'a': [2]}}}}",
          "{'$v': 1, '$set': {'o.a': [2]}}");
    noop("{'_id': 1, 'a': [1, 2]}", "{'$pullAll': {'a': [9, {'k': 1}]}}");
    noop("{'_id': 1, 'a': [1, 2]}", "{'$pullAll': {'a': []}}");
    noop("{'_id': 1}", "{'$pullAll': {'a': [1]}}");
    check_err("{'_id': 1, 'a': [1]}", "{'$pullAll': {'a': 1}}", 2); /* PullAllNode::init: requires an array */
    check_err("{'_id': 1, 'a': 's'}", "{'$pullAll': {'a': [1]}}", 2);
    check_err("{'_id': 1, 'a': 's'}", "{'$pullAll': {'a.b': [1]}}", 28);
}
END_TEST

/* ---- $addToSet ---------------------------------------------------------------------------------------------- */

START_TEST(test_add_to_set)
{
    /* AddToSetNode returns kNormalUpdate, so the whole array is logged, not u<idx> per new element as $push's
     * append is. */
    check("{'_id': 1, 'a': [1, 2]}", "{'$addToSet': {'a': 3}}", "{'_id': 1, 'a': [1, 2, 3]}",
          "{'$v': 2, 'diff': {'u': {'a': [1, 2, 3]}}}", "{'$v': 1, '$set': {'a': [1, 2, 3]}}");
    /* $each: values already present (2) or repeated (4.0 equals 4: deduplicate keeps the first) are skipped. */
    check("{'_id': 1, 'a': [1, 2]}", "{'$addToSet': {'a': {'$each': [2, 4, 4.0, 5, 4]}}}",
          "{'_id': 1, 'a': [1, 2, 4, 5]}", "{'$v': 2, 'diff': {'u': {'a': [1, 2, 4, 5]}}}",
          "{'$v': 1, '$set': {'a': [1, 2, 4, 5]}}");
    check("{'_id': 1, 'a': [{'k': 1}]}", "{'$addToSet': {'a': {'k': 1, 'j': 2}}}",
          "{'_id': 1, 'a': [{'k': 1}, {'k': 1, 'j': 2}]}",
          "{'$v': 2, 'diff': {'u': {'a': [{'k': 1}, {'k': 1, 'j': 2}]}}}",
          "{'$v': 1, '$set': {'a': [{'k': 1}, {'k': 1, 'j': 2}]}}");
    check("{'_id': 1, 'a': []}", "{'$addToSet': {'a': 1}}", "{'_id': 1, 'a': [1]}",
          "{'$v': 2, 'diff': {'u': {'a': [1]}}}", "{'$v': 1, '$set': {'a': [1]}}");
    /* A missing field is created with the deduplicated values (setValueForNewElement). */
    check("{'_id': 1}", "{'$addToSet': {'s.t': {'$each': [1, 1, 2]}}}", "{'_id': 1, 's': {'t': [1, 2]}}",
          "{'$v': 2, 'diff': {'i': {'s': {'t': [1, 2]}}}}", "{'$v': 1, '$set': {'s.t': [1, 2]}}");
    noop("{'_id': 1, 'a': [1, 2]}", "{'$addToSet': {'a': 2.0}}");
    noop("{'_id': 1, 'a': [1, {'k': 1}]}", "{'$addToSet': {'a': {'$each': [{'k': 1}, 1]}}}");
    noop("{'_id': 1, 'a': [1]}", "{'$addToSet': {'a': {'$each': []}}}");
    check_err("{'_id': 1, 'a': 5}", "{'$addToSet': {'a': 1}}", 2);              /* not an array */
    check_err("{'_id': 1, 'a': []}", "{'$addToSet': {'a': {'$each': 1}}}", 14); /* TypeMismatch */
    check_err("{'_id': 1, 'a': []}", "{'$addToSet': {'a': {'$each': [1], 'x': 1}}}", 2);
}
END_TEST

/* ---- $pop --------------------------------------------------------------------------------------------------- */

START_TEST(test_pop)
{
    /* PopNode: kNormalUpdate, the whole array logged. */
    check("{'_id': 1, 'a': [1, 2, 3]}", "{'$pop': {'a': 1}}", "{'_id': 1, 'a': [1, 2]}",
          "{'$v': 2, 'diff': {'u': {'a': [1, 2]}}}", "{'$v': 1, '$set': {'a': [1, 2]}}");
    check("{'_id': 1, 'a': [1, 2, 3]}", "{'$pop': {'a': -1}}", "{'_id': 1, 'a': [2, 3]}",
          "{'$v': 2, 'diff': {'u': {'a': [2, 3]}}}", "{'$v': 1, '$set': {'a': [2, 3]}}");
    /* An integral double is accepted (parseIntegerElementToLong). */
    check("{'_id': 1, 'o': {'a': [7]}}", "{'$pop': {'o.a': 1.0}}", "{'_id': 1, 'o': {'a': []}}",
          "{'$v': 2, 'diff': {'so': {'u': {'a': []}}}}", "{'$v': 1, '$set': {'o.a': []}}");
    check("{'_id': 1, 'a': [[1, 2], 3]}", "{'$pop': {'a.0': -1}}", "{'_id': 1, 'a': [[2], 3]}",
          "{'$v': 2, 'diff': {'sa': {'a': true, 'u0': [2]}}}", "{'$v': 1, '$set': {'a.0': [2]}}");
    noop("{'_id': 1, 'a': []}", "{'$pop': {'a': 1}}");
    noop("{'_id': 1, 'a': [1]}", "{'$pop': {'b': 1, 'c.d': -1, 'a.3': 1}}");
    check_err("{'_id': 1, 'a': 5}", "{'$pop': {'a': 1}}", 14);  /* TypeMismatch: non-array */
    check_err("{'_id': 1, 'a': [1]}", "{'$pop': {'a': 2}}", 9); /* FailedToParse: 1 or -1 */
    check_err("{'_id': 1, 'a': [1]}", "{'$pop': {'a': 'x'}}", 9);
    check_err("{'_id': 1, 'a': [1]}", "{'$pop': {'a': 1.5}}", 9);
    check_err("{'_id': 1, 'a': 5}", "{'$pop': {'a.b': 1}}", 28); /* checkViability */
}
END_TEST

/* ---- $min / $max -------------------------------------------------------------------------------------------- */

START_TEST(test_min_max)
{
    /* CompareNode: replaces when the operand is lower ($min) or higher ($max) in BSON order. */
    check("{'_id': 1, 'a': 5, 'b': 5}", "{'$min': {'a': 3}, '$max': {'b': 9}}", "{'_id': 1, 'a': 3, 'b': 9}",
          "{'$v': 2, 'diff': {'u': {'a': 3, 'b': 9}}}", "{'$v': 1, '$set': {'a': 3, 'b': 9}}");
    /* Across types: strings sort after numbers, null before. */
    check("{'_id': 1, 'a': 5, 'b': 5}", "{'$max': {'a': 's'}, '$min': {'b': null}}", "{'_id': 1, 'a': 's', 'b': null}",
          "{'$v': 2, 'diff': {'u': {'a': 's', 'b': null}}}", "{'$v': 1, '$set': {'a': 's', 'b': null}}");
    /* A missing field is created with the operand. */
    check("{'_id': 1}", "{'$max': {'z.y': 1}}", "{'_id': 1, 'z': {'y': 1}}",
          "{'$v': 2, 'diff': {'i': {'z': {'y': 1}}}}", "{'$v': 1, '$set': {'z.y': 1}}");
    /* Equal values are a no-op even across numeric types (5.0 stays int 5), as is a value on the wrong side. */
    noop("{'_id': 1, 'a': 5}", "{'$max': {'a': 5.0}}");
    noop("{'_id': 1, 'a': 5}", "{'$min': {'a': 7}}");
    noop("{'_id': 1, 'a': 5}", "{'$max': {'a': 2}}");
    check_err("{'_id': 1, 'a': 1}", "{'$max': {'a.b': 1}}", 28);
    check_err("{'_id': 1}", "{'$min': {'a': 1}, '$max': {'a': 2}}", 40);
}
END_TEST

/* ---- $mul --------------------------------------------------------------------------------------------------- */

START_TEST(test_mul)
{
    /* ArithmeticNode with SafeNum: int*int stays int, int64 stays int64, double stays double. */
    check("{'_id': 1, 'i': 3, 'l': {'$numberLong': '4'}, 'd': 1.5}", "{'$mul': {'i': 2, 'l': 2, 'd': 2}}",
          "{'_id': 1, 'i': 6, 'l': {'$numberLong': '8'}, 'd': 3.0}",
          "{'$v': 2, 'diff': {'u': {'d': 3.0, 'i': 6, 'l': {'$numberLong': '8'}}}}",
          "{'$v': 1, '$set': {'d': 3.0, 'i': 6, 'l': {'$numberLong': '8'}}}");
    /* int32 overflow widens to int64; int * double is a double. */
    check("{'_id': 1, 'i': 2147483647, 'j': 3}", "{'$mul': {'i': 2, 'j': 0.5}}",
          "{'_id': 1, 'i': {'$numberLong': '4294967294'}, 'j': 1.5}",
          "{'$v': 2, 'diff': {'u': {'i': {'$numberLong': '4294967294'}, 'j': 1.5}}}",
          "{'$v': 1, '$set': {'i': {'$numberLong': '4294967294'}, 'j': 1.5}}");
    /* Same value, different type: not identical, so logged. */
    check("{'_id': 1, 'i': 3}", "{'$mul': {'i': {'$numberLong': '1'}}}", "{'_id': 1, 'i': {'$numberLong': '3'}}",
          "{'$v': 2, 'diff': {'u': {'i': {'$numberLong': '3'}}}}", "{'$v': 1, '$set': {'i': {'$numberLong': '3'}}}");
    /* A missing field gets 0 of the operand's type (operand * int32 0: -2.5 gives -0.0). */
    check("{'_id': 1}", "{'$mul': {'a': 5, 'b': {'$numberLong': '5'}, 'c': 2.5, 'd': -2.5}}",
          "{'_id': 1, 'a': 0, 'b': {'$numberLong': '0'}, 'c': 0.0, 'd': {'$numberDouble': '-0.0'}}",
          "{'$v': 2, 'diff': {'i': {'a': 0, 'b': {'$numberLong': '0'}, 'c': 0.0, 'd': {'$numberDouble': '-0.0'}}}}",
          "{'$v': 1, '$set': {'a': 0, 'b': {'$numberLong': '0'}, 'c': 0.0, 'd': {'$numberDouble': '-0.0'}}}");
    /* Identical results are no-ops (SafeNum::isIdentical: same type and ==, so -0.0 is 0.0). */
    noop("{'_id': 1, 'i': 3, 'l': {'$numberLong': '4'}}", "{'$mul': {'i': 1, 'l': 1}}");
    noop("{'_id': 1, 'd': 0.0}", "{'$mul': {'d': -1}}");
    check_err("{'_id': 1, 's': 'x'}", "{'$mul': {'s': 2}}", 14); /* non-numeric field */
    check_err("{'_id': 1}", "{'$mul': {'a': 'x'}}", 14);         /* non-numeric operand */
    check_err("{'_id': 1, 'l': {'$numberLong': '9223372036854775807'}}", "{'$mul': {'l': 2}}", 2); /* overflow */
}
END_TEST

/* ---- $rename ------------------------------------------------------------------------------------------------ */

START_TEST(test_rename)
{
    /* RenameNode: a $set of the destination, then an $unset of the source; 4.4 logs $set first. */
    check("{'_id': 1, 'a': 1, 'c': 3}", "{'$rename': {'a': 'b'}}", "{'_id': 1, 'c': 3, 'b': 1}",
          "{'$v': 2, 'diff': {'d': {'a': false}, 'i': {'b': 1}}}",
          "{'$v': 1, '$set': {'b': 1}, '$unset': {'a': true}}");
    check("{'_id': 1, 'a': [1, {'x': 2}], 'b': 2}", "{'$rename': {'a': 'b'}}", "{'_id': 1, 'b': [1, {'x': 2}]}",
          "{'$v': 2, 'diff': {'d': {'a': false}, 'u': {'b': [1, {'x': 2}]}}}",
          "{'$v': 1, '$set': {'b': [1, {'x': 2}]}, '$unset': {'a': true}}");
    /* SetElementNode does not look for an identical destination value: still logged. */
    check("{'_id': 1, 'a': 1, 'b': 1}", "{'$rename': {'a': 'b'}}", "{'_id': 1, 'b': 1}",
          "{'$v': 2, 'diff': {'d': {'a': false}, 'u': {'b': 1}}}",
          "{'$v': 1, '$set': {'b': 1}, '$unset': {'a': true}}");
    /* Nested, creating the destination's parent. */
    check("{'_id': 1, 'a': {'x': 1, 'y': 2}}", "{'$rename': {'a.x': 'b.z'}}",
          "{'_id': 1, 'a': {'y': 2}, 'b': {'z': 1}}",
          "{'$v': 2, 'diff': {'i': {'b': {'z': 1}}, 'sa': {'d': {'x': false}}}}",
          "{'$v': 1, '$set': {'b.z': 1}, '$unset': {'a.x': true}}");
    check("{'_id': 1, 'a': {'x': 1}}", "{'$rename': {'a.x': 'a.y'}}", "{'_id': 1, 'a': {'y': 1}}",
          "{'$v': 2, 'diff': {'sa': {'d': {'x': false}, 'i': {'y': 1}}}}",
          "{'$v': 1, '$set': {'a.y': 1}, '$unset': {'a.x': true}}");
    /* The rename runs at its destination's place in the update order (after m here). */
    check("{'_id': 1, 'a': 1, 'm': 2}", "{'$rename': {'a': 'z'}, '$unset': {'m': 1}}", "{'_id': 1, 'z': 1}",
          "{'$v': 2, 'diff': {'d': {'m': false, 'a': false}, 'i': {'z': 1}}}",
          "{'$v': 1, '$unset': {'m': true, 'a': true}, '$set': {'z': 1}}");
    noop("{'_id': 1, 'b': 1}", "{'$rename': {'a': 'b', 'x.y': 'z'}}");
    check_err("{'_id': 1, 'a': [{'x': 1}]}", "{'$rename': {'a.0.x': 'y'}}", 2);   /* source in an array */
    check_err("{'_id': 1, 'a': 1, 'b': [{}]}", "{'$rename': {'a': 'b.0.c'}}", 2); /* destination in an array */
    check_err("{'_id': 1, 'a': 1}", "{'$rename': {'a': 1}}", 2);                  /* 'to' must be a string */
    check_err("{'_id': 1, 'a': 1}", "{'$rename': {'a': 'a'}}", 2);                /* must differ */
    check_err("{'_id': 1, 'a': 1}", "{'$rename': {'a': 'a.b'}}", 2);              /* same path */
    check_err("{'_id': 1, 'a': 5}", "{'$rename': {'a.b': 'c'}}", 28);             /* findLongestPrefix */
    check_err("{'_id': 1, 'a': 1, 'c': 5}", "{'$rename': {'a': 'c.d'}}", 28);     /* cannot create c.d */
    check_err("{'_id': 1, 'a': 1}", "{'$rename': {'a': 'b'}, '$set': {'b': 1}}", 40);
    check_err("{'_id': 1, 'a': 1}", "{'$rename': {'a': 'b'}, '$set': {'a': 1}}", 40);
    check_err("{'_id': 1}", "{'$rename': {'_id': 'x'}}", 66);
}
END_TEST

/* ---- $currentDate ------------------------------------------------------------------------------------------- */

static int64_t fixed_date(void *ctx)
{
    return 1700000000123;
}

static uint64_t fixed_ts(void *ctx)
{
    return ((uint64_t)1700000000 << 32) | 7;
}

#define DATE "{'$date': {'$numberLong': '1700000000123'}}"
#define TS   "{'$timestamp': {'t': 1700000000, 'i': 7}}"

START_TEST(test_current_date)
{
    update_clock clk = {fixed_date, fixed_ts, NULL};
    update_set_clock(&clk);
    /* CurrentDateNode: true (any boolean) and {$type: 'date'} give a date, {$type: 'timestamp'} a timestamp. */
    /* (Built with BCON: libbson's JSON parser reads {"$type": ...} as the legacy $binary syntax.) */
    bson_t *u = BCON_NEW("$currentDate", "{", "d", BCON_BOOL(true), "t", "{", "$type", BCON_UTF8("timestamp"), "}", "e",
                         "{", "$type", BCON_UTF8("date"), "}", "}");
    check_bson("{'_id': 1, 'd': 1}", u, "$currentDate d, t, e", "{'_id': 1, 'd': " DATE ", 'e': " DATE ", 't': " TS "}",
               "{'$v': 2, 'diff': {'u': {'d': " DATE "}, 'i': {'e': " DATE ", 't': " TS "}}}",
               "{'$v': 1, '$set': {'d': " DATE ", 'e': " DATE ", 't': " TS "}}");
    bson_destroy(u);
    check("{'_id': 1}", "{'$currentDate': {'o.d': false}}", "{'_id': 1, 'o': {'d': " DATE "}}",
          "{'$v': 2, 'diff': {'i': {'o': {'d': " DATE "}}}}", "{'$v': 1, '$set': {'o.d': " DATE "}}");
    /* Never a no-op: updateExistingElement always returns kNormalUpdate, even for the same value. */
    check("{'_id': 1, 'd': " DATE "}", "{'$currentDate': {'d': true}}", "{'_id': 1, 'd': " DATE "}",
          "{'$v': 2, 'diff': {'u': {'d': " DATE "}}}", "{'$v': 1, '$set': {'d': " DATE "}}");
    check_err("{'_id': 1}", "{'$currentDate': {'d': 1}}", 2);
    check_err("{'_id': 1}", "{'$currentDate': {'d': 'x'}}", 2);
    check_err("{'_id': 1}", "{'$currentDate': {'d': {}}}", 2);
    u = BCON_NEW("$currentDate", "{", "d", "{", "$type", BCON_UTF8("x"), "}", "}");
    check_err_bson("{'_id': 1}", u, "$type x", 2);
    bson_destroy(u);
    u = BCON_NEW("$currentDate", "{", "d", "{", "$type", BCON_UTF8("date"), "z", BCON_INT32(1), "}", "}");
    check_err_bson("{'_id': 1}", u, "$type date, z", 2);
    bson_destroy(u);

    /* The default clock: the current time. */
    update_set_clock(NULL);
    bson_t *doc = J("{'_id': 1}");
    u = BCON_NEW("$currentDate", "{", "d", BCON_BOOL(true), "t", "{", "$type", BCON_UTF8("timestamp"), "}", "}");
    bson_t nd, o;
    bool changed;
    bson_error_t err;
    int64_t before = (int64_t)time(NULL);
    ck_assert(update_apply(doc, u, SIM_FORMAT_70, false, &nd, &o, &changed, &err) && changed);
    int64_t after = (int64_t)time(NULL);
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, &nd, "d") && BSON_ITER_HOLDS_DATE_TIME(&it));
    int64_t ms = bson_iter_date_time(&it);
    ck_assert(ms >= before * 1000 && ms <= (after + 1) * 1000);
    uint32_t secs, inc;
    ck_assert(bson_iter_init_find(&it, &nd, "t") && BSON_ITER_HOLDS_TIMESTAMP(&it));
    bson_iter_timestamp(&it, &secs, &inc);
    ck_assert(secs >= before && secs <= after && inc >= 1);
    bson_destroy(&nd);
    bson_destroy(&o);
    bson_destroy(doc);
    bson_destroy(u);
}
END_TEST

/* ---- $push modifiers ---------------------------------------------------------------------------------------- */

START_TEST(test_push_modifiers)
{
    const char *d = "{'_id': 1, 'a': [1, 2, 3]}";
    /* insertElementsWithPosition: inside the array (or at its front) is a normal update, logged whole. */
    check(d, "{'$push': {'a': {'$each': [9], '$position': 0}}}", "{'_id': 1, 'a': [9, 1, 2, 3]}",
          "{'$v': 2, 'diff': {'u': {'a': [9, 1, 2, 3]}}}", "{'$v': 1, '$set': {'a': [9, 1, 2, 3]}}");
    check(d, "{'$push': {'a': {'$each': [8, 9], '$position': 1}}}", "{'_id': 1, 'a': [1, 8, 9, 2, 3]}",
          "{'$v': 2, 'diff': {'u': {'a': [1, 8, 9, 2, 3]}}}", "{'$v': 1, '$set': {'a': [1, 8, 9, 2, 3]}}");
    check(d, "{'$push': {'a': {'$each': [9], '$position': -1}}}", "{'_id': 1, 'a': [1, 2, 9, 3]}",
          "{'$v': 2, 'diff': {'u': {'a': [1, 2, 9, 3]}}}", "{'$v': 1, '$set': {'a': [1, 2, 9, 3]}}");
    check(d, "{'$push': {'a': {'$each': [9], '$position': -5}}}", "{'_id': 1, 'a': [9, 1, 2, 3]}",
          "{'$v': 2, 'diff': {'u': {'a': [9, 1, 2, 3]}}}", "{'$v': 1, '$set': {'a': [9, 1, 2, 3]}}");
    /* $position equal to the length is 'inside' (position > 0), not an append... */
    check(d, "{'$push': {'a': {'$each': [9], '$position': 3}}}", "{'_id': 1, 'a': [1, 2, 3, 9]}",
          "{'$v': 2, 'diff': {'u': {'a': [1, 2, 3, 9]}}}", "{'$v': 1, '$set': {'a': [1, 2, 3, 9]}}");
    /* ...past it is an append, logged element by element (kArrayAppendUpdate). So is a $slice that keeps all. */
    check(d, "{'$push': {'a': {'$each': [9], '$position': 4}}}", "{'_id': 1, 'a': [1, 2, 3, 9]}",
          "{'$v': 2, 'diff': {'sa': {'a': true, 'u3': 9}}}", "{'$v': 1, '$set': {'a.3': 9}}");
    check(d, "{'$push': {'a': {'$each': [8, 9], '$slice': 10}}}", "{'_id': 1, 'a': [1, 2, 3, 8, 9]}",
          "{'$v': 2, 'diff': {'sa': {'a': true, 'u3': 8, 'u4': 9}}}", "{'$v': 1, '$set': {'a.3': 8, 'a.4': 9}}");
    /* $slice: from the front (>= 0) or the back (< 0). */
    check(d, "{'$push': {'a': {'$each': [4], '$slice': 2}}}", "{'_id': 1, 'a': [1, 2]}",
          "{'$v': 2, 'diff': {'u': {'a': [1, 2]}}}", "{'$v': 1, '$set': {'a': [1, 2]}}");
    check(d, "{'$push': {'a': {'$each': [4], '$slice': -2}}}", "{'_id': 1, 'a': [3, 4]}",
          "{'$v': 2, 'diff': {'u': {'a': [3, 4]}}}", "{'$v': 1, '$set': {'a': [3, 4]}}");
    check(d, "{'$push': {'a': {'$each': [], '$slice': 0}}}", "{'_id': 1, 'a': []}",
          "{'$v': 2, 'diff': {'u': {'a': []}}}", "{'$v': 1, '$set': {'a': []}}");
    /* $sort always makes a normal update, even when nothing moves. */
    check(d, "{'$push': {'a': {'$each': [], '$sort': -1}}}", "{'_id': 1, 'a': [3, 2, 1]}",
          "{'$v': 2, 'diff': {'u': {'a': [3, 2, 1]}}}", "{'$v': 1, '$set': {'a': [3, 2, 1]}}");
    check(d, "{'$push': {'a': {'$each': [], '$sort': 1}}}", d, "{'$v': 2, 'diff': {'u': {'a': [1, 2, 3]}}}",
          "{'$v': 1, '$set': {'a': [1, 2, 3]}}");
    /* Whole-element sort in BSON order: null < numbers < strings. */
    check("{'_id': 1, 'a': [3, 'a', 1, null]}", "{'$push': {'a': {'$each': [2], '$sort': 1}}}",
          "{'_id': 1, 'a': [null, 1, 2, 3, 'a']}", "{'$v': 2, 'diff': {'u': {'a': [null, 1, 2, 3, 'a']}}}",
          "{'$v': 1, '$set': {'a': [null, 1, 2, 3, 'a']}}");
    /* Sort by fields (PatternElementCmp): a missing field or a non-object element sorts as null. */
    check("{'_id': 1, 'a': [{'n': 2, 's': 'b'}, {'s': 'a'}, {'n': 1}]}",
          "{'$push': {'a': {'$each': [{'n': 0}], '$sort': {'n': 1}}}}",
          "{'_id': 1, 'a': [{'s': 'a'}, {'n': 0}, {'n': 1}, {'n': 2, 's': 'b'}]}",
          "{'$v': 2, 'diff': {'u': {'a': [{'s': 'a'}, {'n': 0}, {'n': 1}, {'n': 2, 's': 'b'}]}}}",
          "{'$v': 1, '$set': {'a': [{'s': 'a'}, {'n': 0}, {'n': 1}, {'n': 2, 's': 'b'}]}}");
    check("{'_id': 1, 'a': [{'m': {'k': 1}}, 5, {'m': {'k': 3}}]}",
          "{'$push': {'a': {'$each': [], '$sort': {'m.k': -1}}}}",
          "{'_id': 1, 'a': [{'m': {'k': 3}}, {'m': {'k': 1}}, 5]}",
          "{'$v': 2, 'diff': {'u': {'a': [{'m': {'k': 3}}, {'m': {'k': 1}}, 5]}}}",
          "{'$v': 1, '$set': {'a': [{'m': {'k': 3}}, {'m': {'k': 1}}, 5]}}");
    /* A missing field: an empty array, then the same push (setValueForNewElement). */
    check("{'_id': 1}", "{'$push': {'a': {'$each': [3, 1, 2], '$sort': 1, '$slice': 2}}}", "{'_id': 1, 'a': [1, 2]}",
          "{'$v': 2, 'diff': {'i': {'a': [1, 2]}}}", "{'$v': 1, '$set': {'a': [1, 2]}}");
    check("{'_id': 1}", "{'$push': {'a': {'$each': []}}}", "{'_id': 1, 'a': []}", "{'$v': 2, 'diff': {'i': {'a': []}}}",
          "{'$v': 1, '$set': {'a': []}}");
    noop(d, "{'$push': {'a': {'$each': [], '$slice': 5, '$position': 0}}}");
    /* PushNode::init errors are BadValue. */
    check_err(d, "{'$push': {'a': {'$each': [1], '$slice': 'x'}}}", 2);
    check_err(d, "{'$push': {'a': {'$each': [1], '$slice': 1.5}}}", 2);
    check_err(d, "{'$push': {'a': {'$each': [1], '$position': 1.5}}}", 2);
    check_err(d, "{'$push': {'a': {'$each': [1], '$sort': 2}}}", 2);
    check_err(d, "{'$push': {'a': {'$each': [1], '$sort': 'x'}}}", 2);
    check_err(d, "{'$push': {'a': {'$each': [1], '$sort': {}}}}", 2);
    check_err(d, "{'$push': {'a': {'$each': [1], '$sort': {'b': 0}}}}", 2);
    check_err(d, "{'$push': {'a': {'$each': [1], '$sort': {'b..c': 1}}}}", 2);
    check_err(d, "{'$push': {'a': {'$each': [1], '$foo': 1}}}", 2);
    check_err(d, "{'$push': {'a': {'$slice': 1, '$each': 1}}}", 2);
}
END_TEST

/* ---- through the store: no-ops are not modifications and log nothing ------------------------------------------ */

typedef struct {
    bson_t *bodies[8];
    int n;
} sink;

static void sink_emit(void *ctx, const bson_t *body)
{
    sink *s = ctx;
    ck_assert_int_lt(s->n, 8);
    s->bodies[s->n++] = bson_copy(body);
}

static void sink_clear(sink *s)
{
    for (int i = 0; i < s->n; i++)
        bson_destroy(s->bodies[i]);
    s->n = 0;
}

static void body_field(const bson_t *body, const char *key, const char *want_json)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;
    bson_t sub;
    ck_assert(bson_iter_init_find(&it, body, key) && BSON_ITER_HOLDS_DOCUMENT(&it));
    bson_iter_document(&it, &len, &data);
    ck_assert(bson_init_static(&sub, data, len));
    bson_t *want = J(want_json);
    assert_bson_eq(&sub, want, key, "store");
    bson_destroy(want);
}

START_TEST(test_store_noops_and_upsert)
{
    sim_store *s = store_new(SIM_FORMAT_70);
    sink k = {{0}, 0};
    bson_error_t err;
    bson_t *doc = J("{'_id': 1, 'a': [1, 2]}"), *q = J("{'_id': 1}");
    ck_assert(store_insert(s, "db", "c", doc, sink_emit, &k, &err));
    sink_clear(&k);
    static const char *const noops[] = {"{'$pull': {'a': 5}}", "{'$addToSet': {'a': 1}}", "{'$pop': {'b': 1}}",
                                        "{'$min': {'a': [1, 3]}}", "{'$rename': {'x': 'y'}}"};
    for (size_t i = 0; i < sizeof noops / sizeof noops[0]; i++) {
        bson_t *u = J(noops[i]);
        sim_update_result res;
        ck_assert_msg(store_update(s, "db", "c", q, u, false, &res, sink_emit, &k, &err), "%s", err.message);
        ck_assert_int_eq(res.matched, 1);
        ck_assert_msg(res.modified == 0, "%s modified the document", noops[i]);
        ck_assert_int_eq(k.n, 0);
        bson_destroy(u);
    }
    bson_t *u = J("{'$pull': {'a': 1}}");
    sim_update_result res;
    ck_assert(store_update(s, "db", "c", q, u, false, &res, sink_emit, &k, &err));
    ck_assert_int_eq(res.modified, 1);
    ck_assert_int_eq(k.n, 1);
    body_field(k.bodies[0], "o", "{'$v': 2, 'diff': {'u': {'a': [2]}}}");
    body_field(k.bodies[0], "o2", "{'_id': 1}");
    sink_clear(&k);
    bson_destroy(u);

    /* An upsert applies the operators to {_id} and logs an insert. */
    update_clock clk = {fixed_date, fixed_ts, NULL};
    update_set_clock(&clk);
    bson_t *q7 = J("{'_id': 7}");
    u = J("{'$addToSet': {'s': {'$each': [1, 1]}}, '$currentDate': {'d': true}, '$mul': {'m': 2}, '$pull': {'p': 1}}");
    ck_assert_msg(store_update(s, "db", "c", q7, u, true, &res, sink_emit, &k, &err), "%s", err.message);
    ck_assert(res.upserted);
    ck_assert_int_eq(k.n, 1);
    body_field(k.bodies[0], "o", "{'_id': 7, 'd': " DATE ", 'm': 0, 's': [1]}");
    store_update_result_clear(&res);
    update_set_clock(NULL);
    sink_clear(&k);
    bson_destroy(u);
    bson_destroy(q7);
    bson_destroy(q);
    bson_destroy(doc);
    store_free(s);
}
END_TEST

Suite *mongosim_update_suite(void); /* called by the generated runner list */

Suite *mongosim_update_suite(void)
{
    Suite *s = suite_create("mongosim_update");
    TCase *tc = tcase_create("operators");
    tcase_add_test(tc, test_pull);
    tcase_add_test(tc, test_pull_all);
    tcase_add_test(tc, test_add_to_set);
    tcase_add_test(tc, test_pop);
    tcase_add_test(tc, test_min_max);
    tcase_add_test(tc, test_mul);
    tcase_add_test(tc, test_rename);
    tcase_add_test(tc, test_current_date);
    tcase_add_test(tc, test_push_modifiers);
    tcase_add_test(tc, test_store_noops_and_upsert);
    suite_add_tcase(s, tc);
    return s;
}

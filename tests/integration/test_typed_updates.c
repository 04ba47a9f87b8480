/*
 * test_typed_updates.c — random update sequences on typed maps, against the rows an insert of the final document
 * gives (docs/mapping.md, "How changes are applied").
 *
 * The oracle: database D has collections `a` and `b`, each with the same map (typed columns of every kind the
 * operators change: scalars, nested paths, arrays of scalars, jsonb, a child table). Documents are inserted into
 * `a`, then a seeded random sequence of updates of every operator ($set and $unset of deep and array paths, past an
 * array's end and through documents whose fields look like indexes, $inc, $mul, $min, $max, $rename, $push with
 * $each/$position/$slice/$sort, $pop, $pull, $pullAll, $addToSet, $currentDate, upserts with $setOnInsert,
 * replacements) is sent to them; values include ones the columns cannot take (on_type_error = null). Once the daemon
 * has applied it all, every document of `a` is read back from mongosim and inserted into `b`: the typed rows and child
 * rows of `a`, made by the updates, must equal those of `b`, made by inserts, field by field. One database per `rest`
 * mode (doc, extra, drop, the child table taking the same mode) takes the same sequence; each case runs against a
 * mongosim of its own, one logging $v:2 diffs (7.0) and one $v:1 modifiers (4.4).
 *
 * One outcome is not an equality and is checked as such: with rest = extra or drop and a $v:1 entry, an element path
 * of the child array of a document with no child rows cannot be placed (an empty array, a document or a missing field
 * all leave none); the op is set aside with that reason, and the document is left out of the comparison. Any other
 * dead letter fails the test.
 *
 * The seed is printed. make check runs a fixed one; OPLOG2PG_TEST_SEED=N replays sequence N, OPLOG2PG_TEST_SEED=random
 * draws a new one (for a developer hunting divergences). OPLOG2PG_TEST_TU_OPS sets the number of updates (default
 * 1500 per database and format).
 */
#include <check.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../lib/daemonenv.h"
#include "../lib/skip.h"

#define TU_DOCS   80
#define TU_RANDOM 150 /* the random sequence's _ids are below; the named cases' from here */
#define TU_MAXIDS 200

static const char *const rests[3] = {"doc", "extra", "drop"};

/* ---- the random source ---- */

typedef struct {
    uint64_t s;
} rng;

static uint64_t rnext(rng *r)
{
    uint64_t x = r->s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return r->s = x;
}

static uint32_t rpick(rng *r, uint32_t n)
{
    return (uint32_t)(rnext(r) % n);
}

/* ---- values ---- */

static const char *const strs[] = {"a", "b", "x", "\xc3\xa9t\xc3\xa9", "", "2024-01-15T10:00:00Z"};

/* (libbson's BSON_APPEND_* macros evaluate the key twice, and BSON_APPEND_UTF8 its value too: no call to the random
 * source goes in either) */
static void put_str(bson_t *b, const char *key, const char *v)
{
    bson_append_utf8(b, key, -1, v, -1);
}

static void put_item(rng *r, bson_t *b, const char *key)
{
    bson_t d;
    bson_append_document_begin(b, key, -1, &d);
    if (rpick(r, 5) != 0)
        put_str(&d, "sku", strs[rpick(r, 4)]);
    if (rpick(r, 5) != 0) {
        if (rpick(r, 6) == 0)
            BSON_APPEND_UTF8(&d, "qty", "many"); /* a value qty (integer) cannot take */
        else
            BSON_APPEND_INT32(&d, "qty", (int32_t)rpick(r, 10));
    }
    if (rpick(r, 3) == 0) {
        bson_t n;
        bson_append_document_begin(&d, "note", -1, &n);
        BSON_APPEND_INT32(&n, "k", (int32_t)rpick(r, 5));
        bson_append_document_end(&d, &n);
    }
    if (rpick(r, 3) == 0)
        put_str(&d, "free", strs[rpick(r, 4)]);
    bson_append_document_end(b, &d);
}

static void put_ints(rng *r, bson_t *b, const char *key, bool bad)
{
    bson_t a;
    bson_append_array_begin(b, key, -1, &a);
    uint32_t n = rpick(r, 4);
    for (uint32_t i = 0; i < n; i++) {
        char k[16];
        snprintf(k, sizeof k, "%u", i);
        if (bad && i == n - 1)
            BSON_APPEND_UTF8(&a, k, "x");
        else if (rpick(r, 8) == 0)
            BSON_APPEND_NULL(&a, k);
        else
            BSON_APPEND_INT32(&a, k, (int32_t)rpick(r, 6));
    }
    bson_append_array_end(b, &a);
}

static void put_items(rng *r, bson_t *b, const char *key)
{
    bson_t a;
    bson_append_array_begin(b, key, -1, &a);
    uint32_t n = rpick(r, 4);
    for (uint32_t i = 0; i < n; i++) {
        char k[16];
        snprintf(k, sizeof k, "%u", i);
        if (rpick(r, 10) == 0)
            BSON_APPEND_NULL(&a, k);
        else
            put_item(r, &a, k);
    }
    bson_append_array_end(b, &a);
}

/* Any value, of the kinds the columns take and of others. */
static void put_value(rng *r, bson_t *b, const char *key)
{
    switch (rpick(r, 16)) {
    case 0:
    case 1:
        BSON_APPEND_INT32(b, key, (int32_t)rpick(r, 12) - 2);
        break;
    case 2:
        BSON_APPEND_INT64(b, key, (int64_t)rpick(r, 1000) * 10000000000LL);
        break;
    case 3:
        BSON_APPEND_DOUBLE(b, key, rpick(r, 2) ? 2.5 : 4.0);
        break;
    case 4:
    case 5:
        put_str(b, key, strs[rpick(r, 6)]);
        break;
    case 6:
        BSON_APPEND_BOOL(b, key, rpick(r, 2));
        break;
    case 7:
        BSON_APPEND_NULL(b, key);
        break;
    case 8:
        put_item(r, b, key);
        break;
    case 9:
        put_ints(r, b, key, false);
        break;
    case 10:
        put_ints(r, b, key, true);
        break;
    case 11:
        BSON_APPEND_DATE_TIME(b, key, 1700000000000LL + rpick(r, 1000000));
        break;
    case 12: {
        bson_t d; /* fields named like indexes */
        bson_append_document_begin(b, key, -1, &d);
        put_item(r, &d, "0");
        if (rpick(r, 2))
            put_item(r, &d, "2");
        bson_append_document_end(b, &d);
        break;
    }
    case 13:
        put_items(r, b, key);
        break;
    case 14: {
        bson_t d;
        bson_append_document_begin(b, key, -1, &d);
        BSON_APPEND_INT32(&d, "x", (int32_t)rpick(r, 9));
        put_str(&d, "y", strs[rpick(r, 4)]);
        bson_append_document_end(b, &d);
        break;
    }
    default: {
        bson_t a;
        bson_append_array_begin(b, key, -1, &a);
        put_str(&a, "0", strs[rpick(r, 4)]);
        if (rpick(r, 2))
            put_str(&a, "1", strs[rpick(r, 4)]);
        bson_append_array_end(b, &a);
        break;
    }
    }
}

/* A document of the shape the map expects, mostly. */
static void gen_fields(rng *r, bson_t *d)
{
    if (rpick(r, 6))
        BSON_APPEND_INT32(d, "n", (int32_t)rpick(r, 100));
    if (rpick(r, 6))
        put_str(d, "s", strs[rpick(r, 6)]);
    if (rpick(r, 6))
        BSON_APPEND_DOUBLE(d, "d", 0.5 * rpick(r, 20));
    if (rpick(r, 6))
        put_ints(r, d, "nums", rpick(r, 8) == 0);
    if (rpick(r, 6)) {
        bson_t a;
        bson_append_array_begin(d, "tags", -1, &a);
        uint32_t n = rpick(r, 3);
        for (uint32_t i = 0; i < n; i++) {
            char k[16];
            snprintf(k, sizeof k, "%u", i);
            put_str(&a, k, strs[rpick(r, 4)]);
        }
        bson_append_array_end(d, &a);
    }
    if (rpick(r, 6)) {
        bson_t s;
        bson_append_document_begin(d, "sub", -1, &s);
        BSON_APPEND_INT32(&s, "x", (int32_t)rpick(r, 9));
        put_str(&s, "y", strs[rpick(r, 4)]);
        bson_append_document_end(d, &s);
    }
    if (rpick(r, 6)) {
        bson_t m, a;
        bson_append_document_begin(d, "meta", -1, &m);
        BSON_APPEND_INT32(&m, "a", (int32_t)rpick(r, 9));
        bson_append_array_begin(&m, "arr", -1, &a);
        BSON_APPEND_INT32(&a, "0", 1);
        bson_append_array_end(&m, &a);
        bson_append_document_end(d, &m);
    }
    if (rpick(r, 3))
        BSON_APPEND_DATE_TIME(d, "when", 1700000000000LL + rpick(r, 1000000));
    if (rpick(r, 6))
        put_items(r, d, "items");
    if (rpick(r, 3))
        put_str(d, "other", strs[rpick(r, 4)]);
}

/* ---- updates ---- */

static const char *const paths[] = {
    "n",
    "s",
    "d",
    "nums",
    "nums.0",
    "nums.2",
    "nums.4",
    "nums.1.x",
    "tags",
    "tags.1",
    "sub",
    "sub.x",
    "sub.y",
    "sub.z",
    "meta",
    "meta.a",
    "meta.arr",
    "meta.arr.3",
    "when",
    "other",
    "items",
    "items.0",
    "items.1",
    "items.2",
    "items.5",
    "items.0.qty",
    "items.1.sku",
    "items.2.qty",
    "items.3.qty",
    "items.0.note",
    "items.1.note.k",
    "items.0.deep.k",
    "items.x",
    "items.0.free",
    "z",
};
#define NPATHS (sizeof paths / sizeof paths[0])

static const char *const numeric_paths[] = {"n",           "d",      "sub.x",       "nums.0",
                                            "nums.2",      "nums.5", "items.0.qty", "items.1.qty",
                                            "items.3.qty", "meta.a", "z",           "items.2.note.k"};
#define NNUM (sizeof numeric_paths / sizeof numeric_paths[0])

static const char *const renames[][2] = {
    {"sub.x", "n"},  {"other", "nums"}, {"meta", "items"}, {"tags", "nums"}, {"n", "sub.y"}, {"items", "other"},
    {"s", "meta.a"}, {"d", "items"},    {"nums", "tags"},  {"sub", "meta"},  {"z", "nums"},  {"other", "items"},
};
#define NRENAMES (sizeof renames / sizeof renames[0])

static const char *const arrays[] = {"nums", "tags", "items", "meta.arr"};

/* The next update: *upsert when it is an upsert (of a new _id), *replace when a replacement. */
static bson_t *gen_update(rng *r, bool *upsert, bool *replace)
{
    *upsert = *replace = false;
    bson_t *u = bson_new();
    bson_t op, sub, a;
    uint32_t kind = rpick(r, 20);
    switch (kind) {
    case 0:
    case 1:
    case 2:
    case 3: { /* $set of one or two paths */
        bson_append_document_begin(u, "$set", -1, &op);
        uint32_t first = rpick(r, NPATHS);
        put_value(r, &op, paths[first]);
        if (rpick(r, 3) == 0) {
            uint32_t second = rpick(r, NPATHS);
            if (second != first)
                put_value(r, &op, paths[second]);
        }
        bson_append_document_end(u, &op);
        break;
    }
    case 4:
        bson_append_document_begin(u, "$unset", -1, &op);
        put_str(&op, paths[rpick(r, NPATHS)], "");
        bson_append_document_end(u, &op);
        break;
    case 5:
    case 6: {
        static const char *const ops[] = {"$inc", "$mul", "$min", "$max"};
        bson_append_document_begin(u, ops[rpick(r, 4)], -1, &op);
        const char *p = numeric_paths[rpick(r, NNUM)];
        if (rpick(r, 4) == 0)
            BSON_APPEND_DOUBLE(&op, p, 1.5);
        else
            BSON_APPEND_INT32(&op, p, (int32_t)rpick(r, 7) - 2);
        bson_append_document_end(u, &op);
        break;
    }
    case 7: {
        const char *const *p = renames[rpick(r, NRENAMES)];
        bson_append_document_begin(u, "$rename", -1, &op);
        BSON_APPEND_UTF8(&op, p[0], p[1]);
        bson_append_document_end(u, &op);
        break;
    }
    case 8:
    case 9: { /* $push, plain or with modifiers */
        bson_append_document_begin(u, "$push", -1, &op);
        uint32_t which = rpick(r, 3);
        const char *path = which == 0 ? "nums" : which == 1 ? "items" : "tags";
        if (rpick(r, 2) == 0) {
            if (which == 1)
                put_item(r, &op, path);
            else if (rpick(r, 4) == 0)
                BSON_APPEND_UTF8(&op, path, "x");
            else if (which == 0)
                BSON_APPEND_INT32(&op, path, (int32_t)rpick(r, 6));
            else
                put_str(&op, path, strs[rpick(r, 4)]);
        } else {
            bson_append_document_begin(&op, path, -1, &sub);
            bson_append_array_begin(&sub, "$each", -1, &a);
            uint32_t n = 1 + rpick(r, 2);
            for (uint32_t i = 0; i < n; i++) {
                char k[16];
                snprintf(k, sizeof k, "%u", i);
                if (which == 1)
                    put_item(r, &a, k);
                else if (which == 0)
                    BSON_APPEND_INT32(&a, k, (int32_t)rpick(r, 6));
                else
                    put_str(&a, k, strs[rpick(r, 4)]);
            }
            bson_append_array_end(&sub, &a);
            if (rpick(r, 2))
                BSON_APPEND_INT32(&sub, "$position", (int32_t)rpick(r, 3) - (rpick(r, 3) == 0 ? 3 : 0));
            if (rpick(r, 3) == 0)
                BSON_APPEND_INT32(&sub, "$slice", (int32_t)rpick(r, 5) - 2);
            if (rpick(r, 3) == 0) {
                if (which == 1) {
                    bson_t s;
                    bson_append_document_begin(&sub, "$sort", -1, &s);
                    BSON_APPEND_INT32(&s, "qty", rpick(r, 2) ? 1 : -1);
                    bson_append_document_end(&sub, &s);
                } else {
                    BSON_APPEND_INT32(&sub, "$sort", rpick(r, 2) ? 1 : -1);
                }
            }
            bson_append_document_end(&op, &sub);
        }
        bson_append_document_end(u, &op);
        break;
    }
    case 10: {
        bson_append_document_begin(u, "$pop", -1, &op);
        const char *p = arrays[rpick(r, 4)];
        BSON_APPEND_INT32(&op, p, rpick(r, 2) ? 1 : -1);
        bson_append_document_end(u, &op);
        break;
    }
    case 11: {
        bson_append_document_begin(u, "$pull", -1, &op);
        uint32_t which = rpick(r, 3);
        if (which == 0) {
            bson_append_document_begin(&op, "nums", -1, &sub);
            BSON_APPEND_INT32(&sub, "$gte", (int32_t)rpick(r, 5));
            bson_append_document_end(&op, &sub);
        } else if (which == 1) {
            bson_t q;
            bson_append_document_begin(&op, "items", -1, &sub);
            bson_append_document_begin(&sub, "qty", -1, &q);
            BSON_APPEND_INT32(&q, "$lt", (int32_t)rpick(r, 8));
            bson_append_document_end(&sub, &q);
            bson_append_document_end(&op, &sub);
        } else {
            put_str(&op, "tags", strs[rpick(r, 4)]);
        }
        bson_append_document_end(u, &op);
        break;
    }
    case 12:
        bson_append_document_begin(u, "$pullAll", -1, &op);
        bson_append_array_begin(&op, "nums", -1, &a);
        BSON_APPEND_INT32(&a, "0", (int32_t)rpick(r, 6));
        BSON_APPEND_UTF8(&a, "1", "x");
        bson_append_array_end(&op, &a);
        bson_append_document_end(u, &op);
        break;
    case 13: {
        bson_append_document_begin(u, "$addToSet", -1, &op);
        uint32_t which = rpick(r, 3);
        if (which == 0) {
            if (rpick(r, 3) == 0)
                BSON_APPEND_UTF8(&op, "nums", "x");
            else
                BSON_APPEND_INT32(&op, "nums", (int32_t)rpick(r, 6));
        } else if (which == 1) {
            put_item(r, &op, "items");
        } else {
            bson_append_document_begin(&op, "tags", -1, &sub);
            bson_append_array_begin(&sub, "$each", -1, &a);
            put_str(&a, "0", strs[rpick(r, 4)]);
            put_str(&a, "1", strs[rpick(r, 4)]);
            bson_append_array_end(&sub, &a);
            bson_append_document_end(&op, &sub);
        }
        bson_append_document_end(u, &op);
        break;
    }
    case 14: {
        static const char *const dates[] = {"when", "meta.t", "items.0.free", "items.4.free", "n", "nums.1"};
        bson_append_document_begin(u, "$currentDate", -1, &op);
        const char *p = dates[rpick(r, 6)];
        if (rpick(r, 2)) {
            BSON_APPEND_BOOL(&op, p, true);
        } else {
            bson_append_document_begin(&op, p, -1, &sub);
            put_str(&sub, "$type", rpick(r, 2) ? "date" : "timestamp");
            bson_append_document_end(&op, &sub);
        }
        bson_append_document_end(u, &op);
        break;
    }
    case 15: /* an upsert of a new _id */
        *upsert = true;
        bson_append_document_begin(u, "$set", -1, &op);
        put_value(r, &op, "s");
        bson_append_document_end(u, &op);
        bson_append_document_begin(u, "$setOnInsert", -1, &op);
        put_items(r, &op, "items");
        put_ints(r, &op, "nums", rpick(r, 4) == 0);
        bson_append_document_end(u, &op);
        break;
    case 16: /* a replacement */
        *replace = true;
        gen_fields(r, u);
        break;
    default: { /* several operators at once, on paths apart */
        bson_append_document_begin(u, "$set", -1, &op);
        put_value(r, &op, rpick(r, 2) ? "items.1.qty" : "items.3.sku");
        bson_append_document_end(u, &op);
        bson_append_document_begin(u, "$inc", -1, &op);
        BSON_APPEND_INT32(&op, "n", 1);
        bson_append_document_end(u, &op);
        bson_append_document_begin(u, "$push", -1, &op);
        BSON_APPEND_INT32(&op, "nums", (int32_t)rpick(r, 6));
        bson_append_document_end(u, &op);
        break;
    }
    }
    return u;
}

/* ---- named cases ---- */

/* Sequences that once diverged, whatever the seed: a document (JSON) and the updates after it. */
static const char *const named[][5] = {
    /* a $v:1 path past the end of a child array: the server pads with nulls and creates the element */
    {"{\"items\": [{\"sku\": \"a\", \"qty\": 1}]}", "{\"$set\": {\"items.2.qty\": 6}}", NULL},
    {"{\"items\": [{\"qty\": 1}]}", "{\"$set\": {\"items.1\": {\"qty\": 2}}}", "{\"$set\": {\"items.4.sku\": \"z\"}}",
     "{\"$unset\": {\"items.4\": true}}", NULL},
    /* a child path that holds a document whose fields look like indexes: no rows */
    {"{\"items\": [{\"sku\": \"a\"}]}", "{\"$set\": {\"items\": {\"0\": {\"sku\": \"b\"}}}}",
     "{\"$set\": {\"items.2.qty\": 5}}", NULL},
    /* an array column and an element it cannot take (on_type_error = null): that element is NULL */
    {"{\"nums\": [1, 2]}", "{\"$push\": {\"nums\": \"x\"}}", NULL},
    {"{\"nums\": [1, 2, 3]}", "{\"$set\": {\"nums.1\": \"x\"}}", NULL},
    {"{\"nums\": [1, 2]}", "{\"$addToSet\": {\"nums\": \"x\"}}", NULL},
    {"{\"nums\": [1], \"other\": [1, \"x\"]}", "{\"$rename\": {\"other\": \"nums\"}}", NULL},
    {"{\"nums\": [1, 2]}", "{\"$push\": {\"nums\": \"x\"}}", "{\"$set\": {\"nums.2\": 3}}", NULL},
    /* $v:1 paths that create their parents: in extra, and in a jsonb column that was missing */
    {"{\"n\": 1}", "{\"$set\": {\"sub.y\": \"q\"}}", "{\"$set\": {\"meta.a.b\": 1}}", NULL},
    /* a $v:1 element path of a missing array column: the server makes a document */
    {"{\"n\": 1}", "{\"$set\": {\"nums.1\": 5}}", NULL},
};
#define NNAMED (sizeof named / sizeof named[0])

static bson_t *from_json(const char *json)
{
    bson_error_t err;
    bson_t *b = bson_new_from_json((const uint8_t *)json, -1, &err);
    ck_assert_msg(b != NULL, "%s: %s", json, err.message);
    return b;
}

/* ---- the run ---- */

static void map_text(char *out, size_t len, const char *db, const char *rest)
{
    size_t off = 0;
    for (int i = 0; i < 2; i++) {
        const char *coll = i == 0 ? "a" : "b";
        off += (size_t)snprintf(out + off, len - off,
                                "\n[map %s.%s]\n"
                                "rest = %s\n"
                                "on_type_error = null\n"
                                "column.n = integer\n"
                                "column.s = text\n"
                                "column.d = double precision\n"
                                "column.nums = integer[]\n"
                                "column.tags = text[]\n"
                                "column.sub_x = integer from sub.x\n"
                                "column.sub_y = text from sub.y\n"
                                "column.meta = jsonb\n"
                                "column.at = timestamptz from when\n"
                                "child.items = %s_items\n"
                                "\n[child %s.%s_items]\n"
                                "rest = %s\n"
                                "column.sku = text\n"
                                "column.qty = integer\n"
                                "column.note = jsonb\n",
                                db, coll, rest, coll, db, coll, rest);
    }
}

typedef struct {
    char *ops[TU_MAXIDS]; /* per _id: the updates sent, as JSON lines */
} history;

static void note_op(history *h, int id, const bson_t *u, const char *what)
{
    char *j = bson_as_relaxed_extended_json(u, NULL);
    char *old = h->ops[id];
    h->ops[id] = bson_strdup_printf("%s  %s %s\n", old ? old : "", what, j);
    bson_free(old);
    bson_free(j);
}

/* Rows of a that b lacks and the other way round, over cols, leaving out the keys in `skip` (a SQL list). */
static int64_t differ(const char *ta, const char *tb, const char *cols, const char *keycol, const char *skip, char *ids,
                      size_t idslen)
{
    char sql[4096];
    snprintf(sql, sizeof sql,
             "SELECT count(*), coalesce(string_agg(DISTINCT k, ','), '') FROM ("
             "(SELECT %s AS k, %s FROM %s WHERE %s NOT IN (%s) EXCEPT ALL SELECT %s, %s FROM %s WHERE %s NOT IN (%s)) "
             "UNION ALL "
             "(SELECT %s, %s FROM %s WHERE %s NOT IN (%s) EXCEPT ALL SELECT %s, %s FROM %s WHERE %s NOT IN (%s))) x",
             keycol, cols, ta, keycol, skip, keycol, cols, tb, keycol, skip, keycol, cols, tb, keycol, skip, keycol,
             cols, ta, keycol, skip);
    PGconn *c = PQconnectdb(denv_pg_conninfo());
    ck_assert_msg(PQstatus(c) == CONNECTION_OK, "%s", PQerrorMessage(c));
    PGresult *r = PQexec(c, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(c));
    int64_t n = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    snprintf(ids, idslen, "%s", PQgetvalue(r, 0, 1));
    if (n > 0) {
        snprintf(
            sql, sizeof sql,
            "SELECT string_agg(x::text, E'\\n') FROM ((SELECT 'only in %s' AS side, %s FROM %s WHERE %s NOT IN "
            "(%s) EXCEPT ALL SELECT 'only in %s', %s FROM %s WHERE %s NOT IN (%s)) UNION ALL (SELECT 'only in %s', "
            "%s FROM %s WHERE %s NOT IN (%s) EXCEPT ALL SELECT 'only in %s', %s FROM %s WHERE %s NOT IN (%s)) "
            "ORDER BY 2 LIMIT 40) x",
            ta, cols, ta, keycol, skip, ta, cols, tb, keycol, skip, tb, cols, tb, keycol, skip, tb, cols, ta, keycol,
            skip);
        PGresult *r2 = PQexec(c, sql);
        if (PQresultStatus(r2) == PGRES_TUPLES_OK)
            fprintf(stderr, "%s\n", PQgetvalue(r2, 0, 0));
        PQclear(r2);
    }
    PQclear(r);
    PQfinish(c);
    return n;
}

static void show_history(const history *h, const char *ids)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", ids);
    int shown = 0;
    for (char *save = NULL, *k = strtok_r(buf, ",", &save); k != NULL && shown < 4; k = strtok_r(NULL, ",", &save)) {
        int id = atoi(k);
        if (id >= 0 && id < TU_MAXIDS && h->ops[id] != NULL) {
            fprintf(stderr, "_id %d, the updates sent:\n%s", id, h->ops[id]);
            shown++;
        }
    }
}

static uint64_t seed_of(void)
{
    const char *s = getenv("OPLOG2PG_TEST_SEED");
    if (s == NULL || *s == '\0')
        return 3030; /* make check runs the same sequences every time; a failure there is never a roll of the dice */
    if (strcmp(s, "random") != 0)
        return strtoull(s, NULL, 10);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000003u + (uint64_t)ts.tv_nsec;
}

static void run_format(const char *name, bool v1)
{
    uint64_t seed = seed_of();
    const char *n_env = getenv("OPLOG2PG_TEST_TU_OPS");
    int nops = n_env && *n_env ? atoi(n_env) : 1500;
    printf("typed_updates %s: seed %" PRIu64 ", %d updates (OPLOG2PG_TEST_SEED=%" PRIu64 " replays it)\n", name, seed,
           nops, seed);
    fflush(stdout);
    char dbs[3][64];
    static char extra[16384];
    size_t off = 0;
    for (int m = 0; m < 3; m++) {
        snprintf(dbs[m], sizeof dbs[m], "rep_%s_%s", name, rests[m]);
        map_text(extra + off, sizeof extra - off, dbs[m], rests[m]);
        off = strlen(extra);
    }
    const char *args[] = {"--oplog-format", "4.4", NULL};
    denv e;
    denv_start(&e, name, v1 ? args : NULL, extra);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));

    mongoc_client_t *c = mongoc_client_new(e.uri);
    mongoc_collection_t *cols[3];
    for (int m = 0; m < 3; m++)
        cols[m] = mongoc_client_get_collection(c, dbs[m], "a");
    rng r = {.s = seed ? seed : 1};
    static history h;
    memset(&h, 0, sizeof h);
    bson_error_t err;
    for (int id = 0; id < TU_DOCS; id++) {
        bson_t *d = bson_new();
        BSON_APPEND_INT32(d, "_id", id);
        gen_fields(&r, d);
        note_op(&h, id, d, "insert");
        for (int m = 0; m < 3; m++)
            ck_assert_msg(mongoc_collection_insert_one(cols[m], d, NULL, NULL, &err), "insert: %s", err.message);
        bson_destroy(d);
    }
    int nids = TU_DOCS;
    for (int i = 0; i < nops; i++) {
        bool upsert, replace;
        bson_t *u = gen_update(&r, &upsert, &replace);
        int id = upsert && nids < TU_RANDOM ? nids++ : (int)rpick(&r, (uint32_t)nids);
        bson_t *q = BCON_NEW("_id", BCON_INT32(id));
        bson_t *opts = upsert ? BCON_NEW("upsert", BCON_BOOL(true)) : NULL;
        note_op(&h, id, u, replace ? "replace" : "update");
        for (int m = 0; m < 3; m++) {
            /* an update the server refuses (a path through a scalar, a conflict) logs nothing: fine */
            if (replace)
                (void)mongoc_collection_replace_one(cols[m], q, u, NULL, NULL, &err);
            else
                (void)mongoc_collection_update_one(cols[m], q, u, opts, NULL, &err);
        }
        bson_destroy(q);
        if (opts)
            bson_destroy(opts);
        bson_destroy(u);
    }
    for (size_t k = 0; k < NNAMED; k++) {
        int id = TU_RANDOM + (int)k;
        bson_t *d = from_json(named[k][0]);
        bson_t *doc = BCON_NEW("_id", BCON_INT32(id));
        bson_concat(doc, d);
        note_op(&h, id, doc, "insert");
        for (int m = 0; m < 3; m++)
            ck_assert_msg(mongoc_collection_insert_one(cols[m], doc, NULL, NULL, &err), "insert: %s", err.message);
        bson_destroy(doc);
        bson_destroy(d);
        bson_t *q = BCON_NEW("_id", BCON_INT32(id));
        for (size_t i = 1; i < 5 && named[k][i] != NULL; i++) {
            bson_t *u = from_json(named[k][i]);
            note_op(&h, id, u, "update");
            for (int m = 0; m < 3; m++)
                ck_assert_msg(mongoc_collection_update_one(cols[m], q, u, NULL, NULL, &err), "%s: %s", named[k][i],
                              err.message);
            bson_destroy(u);
        }
        bson_destroy(q);
    }
    if (!denv_wait_caught_up(&e, 120)) {
        denv_show_log(&e);
        ck_abort_msg("seed %" PRIu64 ": the daemon did not catch up", seed);
    }

    /* the oracle: the final documents, inserted into the twin */
    int64_t copied[3];
    for (int m = 0; m < 3; m++) {
        mongoc_collection_t *twin = mongoc_client_get_collection(c, dbs[m], "b");
        bson_t *all = bson_new();
        mongoc_cursor_t *cur = mongoc_collection_find_with_opts(cols[m], all, NULL, NULL);
        const bson_t *doc;
        copied[m] = 0;
        while (mongoc_cursor_next(cur, &doc)) {
            ck_assert_msg(mongoc_collection_insert_one(twin, doc, NULL, NULL, &err), "insert: %s", err.message);
            copied[m]++;
        }
        ck_assert_msg(!mongoc_cursor_error(cur, &err), "find: %s", err.message);
        mongoc_cursor_destroy(cur);
        bson_destroy(all);
        mongoc_collection_destroy(twin);
    }
    if (!denv_wait_caught_up(&e, 120)) {
        denv_show_log(&e);
        ck_abort_msg("seed %" PRIu64 ": the daemon did not catch up", seed);
    }

    int64_t total = 0;
    for (int m = 0; m < 3; m++) {
        const char *db = dbs[m];
        char sql[1024], skip[512], ta[128], tb[128], colsql[256], ids[1024];
        /* the one refusal that is expected (see above), only where it can occur */
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM oplog2pg.dead_letter WHERE db = '%s' AND NOT (coll = 'a' AND op = 'u' AND %s "
                 "AND error LIKE '%%cannot be told without the document%%')",
                 db, v1 && m > 0 ? "true" : "false");
        char others[4096];
        snprintf(others, sizeof others,
                 "SELECT coalesce(string_agg(coll || ' ' || op || ' ' || doc_id || ': ' || error, E'\\n'), '') FROM "
                 "oplog2pg.dead_letter WHERE db = '%s'",
                 db);
        char dl[4096];
        denv_pg_text(others, dl, sizeof dl);
        if (denv_pg_int(sql) != 0) {
            fprintf(stderr, "seed %" PRIu64 ", %s: dead letters:\n%s\n", seed, db, dl);
            ck_abort_msg("seed %" PRIu64 ", %s: unexpected dead letters (listed above)", seed, db);
        }
        snprintf(skip, sizeof skip,
                 "SELECT doc_id FROM oplog2pg.dead_letter WHERE db = '%s' AND coll = 'a' UNION ALL SELECT '-'", db);
        int64_t set_aside = denv_pg_int(
            (snprintf(sql, sizeof sql, "SELECT count(DISTINCT doc_id) FROM oplog2pg.dead_letter WHERE db = '%s'", db),
             sql));
        printf("typed_updates %s rest=%s: %lld documents set aside (the documented $v:1 case)\n", name, rests[m],
               (long long)set_aside);
        /* most documents are compared, and those of the named cases past a child array's end (which has rows) are
         * never set aside */
        ck_assert_msg(set_aside * 4 < copied[m] * 3, "seed %" PRIu64 ", %s: %lld of %lld documents set aside", seed, db,
                      (long long)set_aside, (long long)copied[m]);
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM oplog2pg.dead_letter WHERE db = '%s' AND doc_id IN ('%d', '%d')", db, TU_RANDOM,
                 TU_RANDOM + 1);
        ck_assert_msg(denv_pg_int(sql) == 0, "seed %" PRIu64 ", %s: a named case past the array's end was set aside",
                      seed, db);
        const char *rc = m == 0 ? ", doc" : m == 1 ? ", extra" : "";
        snprintf(ta, sizeof ta, "%s.a", db);
        snprintf(tb, sizeof tb, "%s.b", db);
        snprintf(colsql, sizeof colsql, "n, s, d, nums, tags, sub_x, sub_y, meta, at%s", rc);
        int64_t n = differ(ta, tb, colsql, "_id", skip, ids, sizeof ids);
        if (n > 0) {
            fprintf(stderr, "seed %" PRIu64 ", %s (rest = %s): %lld rows of %s differ (_ids %s)\n", seed, db, rests[m],
                    (long long)n, ta, ids);
            show_history(&h, ids);
        }
        total += n;
        snprintf(ta, sizeof ta, "%s.a_items", db);
        snprintf(tb, sizeof tb, "%s.b_items", db);
        snprintf(colsql, sizeof colsql, "position, sku, qty, note%s", rc);
        n = differ(ta, tb, colsql, "parent_key", skip, ids, sizeof ids);
        if (n > 0) {
            fprintf(stderr, "seed %" PRIu64 ", %s (rest = %s): %lld rows of %s differ (_ids %s)\n", seed, db, rests[m],
                    (long long)n, ta, ids);
            show_history(&h, ids);
        }
        total += n;
        /* the twin holds every document: the comparison was not of two empty tables */
        snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.b", db);
        ck_assert_int_eq(denv_pg_int(sql), copied[m]);
        ck_assert_int_eq(copied[m], nids + (int64_t)NNAMED);
    }
    ck_assert_msg(total == 0, "seed %" PRIu64 ": %lld rows differ between the updated tables and the inserted ones",
                  seed, (long long)total);
    for (int id = 0; id < TU_MAXIDS; id++)
        bson_free(h.ops[id]);
    for (int m = 0; m < 3; m++)
        mongoc_collection_destroy(cols[m]);
    mongoc_client_destroy(c);
    denv_stop(&e);
    for (int m = 0; m < 3; m++) {
        char sql[256];
        snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", dbs[m]);
        denv_pg_exec(sql);
    }
}

START_TEST(test_typed_updates_v2)
{
    run_format("tuv2", false);
}
END_TEST

START_TEST(test_typed_updates_v1)
{
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim --oplog-format 4.4 ($v:1 updates)");
    if (denv_stream_descriptions())
        SKIP_TEST("4.4's $v:1 updates through updateDescription: such a server gives no disambiguatedPaths");
    run_format("tuv1", true);
}
END_TEST

Suite *typed_updates_suite(void); /* called by the generated runner list */

Suite *typed_updates_suite(void)
{
    Suite *s = suite_create("typed_updates");
    TCase *tc = tcase_create("typed_updates");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_typed_updates_v2);
    tcase_add_test(tc, test_typed_updates_v1);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * update.c — mongosim's update engine (see update.h).
 *
 * The document is expanded into a small mutable tree (unode), the update's operations are applied one by one in the
 * order a MongoDB server applies them (its UpdateObjectNode tree visits fields sorted by name at each level, so we
 * sort the paths component-wise, bytewise), and every change is recorded in a log that mirrors the server's log
 * builders:
 *   - 7.0 (V2LogBuilder): a tree of object/array diffs. Changing an existing field logs `u`, creating a field logs
 *     `i` with the whole newly created subtree at the first missing path component (inside an array: `u<idx>`),
 *     deleting logs `d`, and the existing objects/arrays on the way become `s<field>` sub-diffs. A change below a
 *     value that this update already logged whole is not logged again: the log holds a pointer to the tree node, so
 *     the serialised value is the final one. `$push` appending to a non-empty array (no $position, $sort or $slice
 *     that changes anything) logs `u<idx>` per new element (PushNode::logUpdate, kArrayAppendUpdate); every other
 *     change of an array by $push, $addToSet, $pop, $pull or $pullAll logs the whole new array as `u` of its field
 *     (ModifierNode::logUpdate → logUpdatedField): never an array diff. `$unset` of an array element sets it to
 *     null and logs `u<idx>: null`. `$rename` logs its destination (u or i) and deletes its source (d). Sections are
 *     written d, u, i, s...; array entries in ascending index order.
 *   - 4.4 (V1LogBuilder): `$set` of each changed path with its final value (created paths are logged as the full
 *     dotted path with the leaf value; `$push` appending as `path.N` per new element, other array changes as the
 *     whole array), `$unset: {path: true}`; the two sections appear in the order they were first used, after `$v: 1`.
 * A no-op (nothing pulled, value already in the set, $min not smaller, ...) changes nothing and logs nothing.
 * Operators and the server source each one follows (mongodb/mongo src/mongo/db/update/): $set/$setOnInsert
 * set_node.cpp, $unset unset_node.cpp, $inc/$mul arithmetic_node.cpp (+ src/mongo/util/safe_num.cpp), $min/$max
 * compare_node.cpp, $push push_node.cpp + pattern_cmp.cpp, $addToSet addtoset_node.cpp, $pop pop_node.cpp, $pull
 * pull_node.cpp + array_culling_node.cpp, $pullAll pullall_node.cpp, $rename rename_node.cpp, $currentDate
 * current_date_node.cpp; common rules in modifier_node.cpp and update_object_node.cpp.
 * A replacement logs the whole new document in both formats.
 */
#include "update.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define UPD_MAX_DEPTH    200
#define UPD_MAX_BACKFILL 1500000
#define UPD_MAX_DOC_SIZE (16 * 1024 * 1024)

/* ---------------------------------------------------------------------------------------------------------------
 * BSON comparison order
 * ------------------------------------------------------------------------------------------------------------- */

int update_type_rank(bson_type_t t)
{
    switch (t) {
    case BSON_TYPE_MINKEY:
        return -1;
    case BSON_TYPE_UNDEFINED:
        return 0;
    case BSON_TYPE_NULL:
        return 5;
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DECIMAL128:
        return 10;
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL:
        return 15;
    case BSON_TYPE_DOCUMENT:
        return 20;
    case BSON_TYPE_ARRAY:
        return 25;
    case BSON_TYPE_BINARY:
        return 30;
    case BSON_TYPE_OID:
        return 35;
    case BSON_TYPE_BOOL:
        return 40;
    case BSON_TYPE_DATE_TIME:
        return 45;
    case BSON_TYPE_TIMESTAMP:
        return 47;
    case BSON_TYPE_REGEX:
        return 50;
    case BSON_TYPE_DBPOINTER:
        return 55;
    case BSON_TYPE_CODE:
        return 60;
    case BSON_TYPE_CODEWSCOPE:
        return 65;
    case BSON_TYPE_MAXKEY:
        return 127;
    default:
        return 0;
    }
}

static long double iter_number(const bson_iter_t *it)
{
    switch (bson_iter_type(it)) {
    case BSON_TYPE_DOUBLE:
        return bson_iter_double(it);
    case BSON_TYPE_INT32:
        return bson_iter_int32(it);
    case BSON_TYPE_INT64:
        return (long double)bson_iter_int64(it);
    case BSON_TYPE_DECIMAL128: {
        bson_decimal128_t d;
        char buf[BSON_DECIMAL128_STRING];
        bson_iter_decimal128(it, &d);
        bson_decimal128_to_string(&d, buf);
        return strtold(buf, NULL);
    }
    default:
        return 0;
    }
}

static int sign_of(long long v)
{
    return v < 0 ? -1 : v > 0 ? 1 : 0;
}

static int cmp_bytes(const void *a, size_t la, const void *b, size_t lb)
{
    int r = memcmp(a, b, la < lb ? la : lb);
    if (r)
        return sign_of(r);
    return la < lb ? -1 : la > lb ? 1 : 0;
}

static int cmp_docs(const uint8_t *da, uint32_t la, const uint8_t *db, uint32_t lb)
{
    bson_iter_t ia, ib;
    if (!bson_iter_init_from_data(&ia, da, la) || !bson_iter_init_from_data(&ib, db, lb))
        return 0;
    for (;;) {
        bool ha = bson_iter_next(&ia), hb = bson_iter_next(&ib);
        if (!ha || !hb)
            return (int)ha - (int)hb;
        int r = update_type_rank(bson_iter_type(&ia)) - update_type_rank(bson_iter_type(&ib));
        if (r)
            return sign_of(r);
        r = strcmp(bson_iter_key(&ia), bson_iter_key(&ib));
        if (r)
            return sign_of(r);
        r = update_compare_iters(&ia, &ib);
        if (r)
            return r;
    }
}

int update_compare_iters(const bson_iter_t *a, const bson_iter_t *b)
{
    bson_type_t ta = bson_iter_type(a), tb = bson_iter_type(b);
    int ra = update_type_rank(ta), rb = update_type_rank(tb);
    if (ra != rb)
        return ra < rb ? -1 : 1;
    switch (ra) {
    case 10: {
        long double x = iter_number(a), y = iter_number(b);
        bool nx = isnan(x), ny = isnan(y);
        if (nx || ny)
            return nx && ny ? 0 : nx ? -1 : 1;
        return x < y ? -1 : x > y ? 1 : 0;
    }
    case 15:
    case 60: {
        uint32_t la = 0, lb = 0;
        const char *sa = ta == BSON_TYPE_SYMBOL ? bson_iter_symbol(a, &la)
                         : ta == BSON_TYPE_CODE ? bson_iter_code(a, &la)
                                                : bson_iter_utf8(a, &la);
        const char *sb = tb == BSON_TYPE_SYMBOL ? bson_iter_symbol(b, &lb)
                         : tb == BSON_TYPE_CODE ? bson_iter_code(b, &lb)
                                                : bson_iter_utf8(b, &lb);
        return cmp_bytes(sa, la, sb, lb);
    }
    case 20:
    case 25: {
        const uint8_t *da, *db;
        uint32_t la, lb;
        if (ta == BSON_TYPE_DOCUMENT)
            bson_iter_document(a, &la, &da);
        else
            bson_iter_array(a, &la, &da);
        if (tb == BSON_TYPE_DOCUMENT)
            bson_iter_document(b, &lb, &db);
        else
            bson_iter_array(b, &lb, &db);
        return cmp_docs(da, la, db, lb);
    }
    case 30: {
        bson_subtype_t sa, sb;
        uint32_t la, lb;
        const uint8_t *pa, *pb;
        bson_iter_binary(a, &sa, &la, &pa);
        bson_iter_binary(b, &sb, &lb, &pb);
        if (la != lb)
            return la < lb ? -1 : 1;
        if (sa != sb)
            return sa < sb ? -1 : 1;
        return sign_of(memcmp(pa, pb, la));
    }
    case 35:
        return sign_of(bson_oid_compare(bson_iter_oid(a), bson_iter_oid(b)));
    case 40:
        return (int)bson_iter_bool(a) - (int)bson_iter_bool(b);
    case 45: {
        int64_t x = bson_iter_date_time(a), y = bson_iter_date_time(b);
        return x < y ? -1 : x > y ? 1 : 0;
    }
    case 47: {
        uint32_t t1, i1, t2, i2;
        bson_iter_timestamp(a, &t1, &i1);
        bson_iter_timestamp(b, &t2, &i2);
        if (t1 != t2)
            return t1 < t2 ? -1 : 1;
        return i1 < i2 ? -1 : i1 > i2 ? 1 : 0;
    }
    case 50: {
        const char *oa, *ob;
        const char *pa = bson_iter_regex(a, &oa), *pb = bson_iter_regex(b, &ob);
        int r = strcmp(pa, pb);
        return r ? sign_of(r) : sign_of(strcmp(oa, ob));
    }
    case 55: {
        uint32_t la, lb;
        const char *ca, *cb;
        const bson_oid_t *oa, *ob;
        bson_iter_dbpointer(a, &la, &ca, &oa);
        bson_iter_dbpointer(b, &lb, &cb, &ob);
        int r = cmp_bytes(ca, la, cb, lb);
        return r ? r : sign_of(bson_oid_compare(oa, ob));
    }
    case 65: {
        uint32_t la, lb, sla, slb;
        const uint8_t *sa, *sb;
        const char *ca = bson_iter_codewscope(a, &la, &sla, &sa);
        const char *cb = bson_iter_codewscope(b, &lb, &slb, &sb);
        int r = cmp_bytes(ca, la, cb, lb);
        return r ? r : cmp_docs(sa, sla, sb, slb);
    }
    default:
        return 0;
    }
}

int update_compare_values(const bson_value_t *a, const bson_value_t *b)
{
    bson_t da = BSON_INITIALIZER, db = BSON_INITIALIZER;
    bson_iter_t ia, ib;
    int r = 0;
    BSON_APPEND_VALUE(&da, "", a);
    BSON_APPEND_VALUE(&db, "", b);
    if (bson_iter_init(&ia, &da) && bson_iter_next(&ia) && bson_iter_init(&ib, &db) && bson_iter_next(&ib))
        r = update_compare_iters(&ia, &ib);
    bson_destroy(&da);
    bson_destroy(&db);
    return r;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Mutable document tree
 * ------------------------------------------------------------------------------------------------------------- */

typedef struct unode {
    char *key;        /* field name; unused for array elements (their index is their position) */
    bson_type_t type; /* DOCUMENT and ARRAY use kids; everything else val */
    bson_value_t val;
    struct unode **kids;
    size_t n, cap;
} unode;

static void node_free(unode *nd)
{
    if (!nd)
        return;
    for (size_t i = 0; i < nd->n; i++)
        node_free(nd->kids[i]);
    free(nd->kids);
    if (nd->type != BSON_TYPE_DOCUMENT && nd->type != BSON_TYPE_ARRAY)
        bson_value_destroy(&nd->val);
    free(nd->key);
    free(nd);
}

static unode *node_new(const char *key, bson_type_t type)
{
    unode *nd = bson_malloc0(sizeof *nd);
    nd->key = bson_strdup(key ? key : "");
    nd->type = type;
    if (type != BSON_TYPE_DOCUMENT && type != BSON_TYPE_ARRAY)
        nd->val.value_type = type;
    return nd;
}

static void node_append(unode *parent, unode *kid)
{
    if (parent->n == parent->cap) {
        parent->cap = parent->cap ? parent->cap * 2 : 4;
        parent->kids = bson_realloc(parent->kids, parent->cap * sizeof *parent->kids);
    }
    parent->kids[parent->n++] = kid;
}

static void node_fill(unode *parent, bson_iter_t *it);

static unode *node_from_iter(const char *key, const bson_iter_t *it)
{
    bson_type_t t = bson_iter_type(it);
    unode *nd = node_new(key, t);
    if (t == BSON_TYPE_DOCUMENT || t == BSON_TYPE_ARRAY) {
        bson_iter_t child;
        if (bson_iter_recurse(it, &child))
            node_fill(nd, &child);
    } else {
        bson_value_copy(bson_iter_value((bson_iter_t *)it), &nd->val);
    }
    return nd;
}

static void node_fill(unode *parent, bson_iter_t *it)
{
    while (bson_iter_next(it))
        node_append(parent, node_from_iter(bson_iter_key(it), it));
}

static void node_append_to(bson_t *out, const char *key, const unode *nd)
{
    if (nd->type == BSON_TYPE_DOCUMENT || nd->type == BSON_TYPE_ARRAY) {
        bson_t child;
        if (nd->type == BSON_TYPE_DOCUMENT)
            bson_append_document_begin(out, key, -1, &child);
        else
            bson_append_array_begin(out, key, -1, &child);
        for (size_t i = 0; i < nd->n; i++) {
            char buf[16];
            const char *k = nd->kids[i]->key;
            if (nd->type == BSON_TYPE_ARRAY)
                bson_uint32_to_string((uint32_t)i, &k, buf, sizeof buf);
            node_append_to(&child, k, nd->kids[i]);
        }
        if (nd->type == BSON_TYPE_DOCUMENT)
            bson_append_document_end(out, &child);
        else
            bson_append_array_end(out, &child);
    } else {
        bson_append_value(out, key, -1, &nd->val);
    }
}

/* True if the node and the iterator's value are the same type and bytes (the server's binaryEqualValues). */
static bool node_equals_iter(const unode *nd, const bson_iter_t *it)
{
    bson_t a = BSON_INITIALIZER, b = BSON_INITIALIZER;
    node_append_to(&a, "", nd);
    bson_append_iter(&b, "", 0, it);
    bool eq = a.len == b.len && memcmp(bson_get_data(&a), bson_get_data(&b), a.len) == 0;
    bson_destroy(&a);
    bson_destroy(&b);
    return eq;
}

static char *node_json(const char *key, const unode *nd)
{
    bson_t tmp = BSON_INITIALIZER;
    node_append_to(&tmp, key, nd);
    char *s = bson_as_relaxed_extended_json(&tmp, NULL);
    bson_destroy(&tmp);
    return s;
}

static unode *node_find(const unode *doc, const char *key, size_t *slot)
{
    for (size_t i = 0; i < doc->n; i++)
        if (strcmp(doc->kids[i]->key, key) == 0) {
            *slot = i;
            return doc->kids[i];
        }
    return NULL;
}

/* An array index component: digits only, no leading zero (except "0"). */
static bool parse_index(const char *s, size_t *idx)
{
    if (!*s || (s[0] == '0' && s[1]) || strlen(s) > 9)
        return false;
    size_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        v = v * 10 + (size_t)(*p - '0');
    }
    *idx = v;
    return true;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Logs
 * ------------------------------------------------------------------------------------------------------------- */

enum { DE_DEL, DE_UPD, DE_INS, DE_SUB };

struct dnode;
typedef struct {
    int kind;
    char *key;
    size_t idx; /* array diffs */
    unode *val; /* DE_UPD / DE_INS: the tree node, serialised at the end */
    struct dnode *sub;
} dentry;

typedef struct dnode {
    bool is_array;
    dentry *e;
    size_t n, cap;
} dnode;

typedef struct {
    bool unset;
    char *path;
    unode *val;
} v1entry;

typedef struct {
    sim_oplog_format fmt;
    bool inserting;
    const bson_t *orig;
    dnode diff;
    v1entry *v1;
    size_t v1n, v1cap;
    size_t changes;
} uctx;

static void dnode_clear(dnode *d)
{
    for (size_t i = 0; i < d->n; i++) {
        free(d->e[i].key);
        if (d->e[i].sub) {
            dnode_clear(d->e[i].sub);
            free(d->e[i].sub);
        }
    }
    free(d->e);
    d->e = NULL;
    d->n = d->cap = 0;
}

static dentry *dnode_add(dnode *d, int kind, const char *key)
{
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 4;
        d->e = bson_realloc(d->e, d->cap * sizeof *d->e);
    }
    dentry *e = &d->e[d->n++];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->key = bson_strdup(key);
    if (d->is_array)
        parse_index(key, &e->idx);
    return e;
}

/* Walks the diff along comps[0..upto-1], creating sub-diffs; NULL when a value already logged whole covers it. */
static dnode *diff_descend(uctx *c, char **comps, size_t upto, const bool *is_arr)
{
    dnode *d = &c->diff;
    d->is_array = false;
    for (size_t j = 0; j < upto; j++) {
        dentry *found = NULL;
        for (size_t k = 0; k < d->n; k++)
            if (strcmp(d->e[k].key, comps[j]) == 0) {
                found = &d->e[k];
                break;
            }
        if (found && found->kind != DE_SUB)
            return NULL;
        if (!found) {
            found = dnode_add(d, DE_SUB, comps[j]);
            found->sub = bson_malloc0(sizeof(dnode));
            found->sub->is_array = is_arr[j + 1];
        }
        d = found->sub;
    }
    return d;
}

static char *join_path(char **comps, size_t n, const char *extra)
{
    size_t len = 1 + (extra ? strlen(extra) + 1 : 0);
    for (size_t i = 0; i < n; i++)
        len += strlen(comps[i]) + 1;
    char *s = bson_malloc0(len), *p = s;
    for (size_t i = 0; i < n; i++)
        p += sprintf(p, "%s%s", i ? "." : "", comps[i]);
    if (extra)
        sprintf(p, "%s%s", n ? "." : "", extra);
    return s;
}

static void v1_add(uctx *c, bool unset, char *path, unode *val)
{
    if (c->v1n == c->v1cap) {
        c->v1cap = c->v1cap ? c->v1cap * 2 : 4;
        c->v1 = bson_realloc(c->v1, c->v1cap * sizeof *c->v1);
    }
    c->v1[c->v1n].unset = unset;
    c->v1[c->v1n].path = path;
    c->v1[c->v1n].val = val;
    c->v1n++;
}

/* An existing field at comps[0..n-1] got a new value nd. */
static void log_updated(uctx *c, char **comps, size_t n, const bool *is_arr, unode *nd)
{
    c->changes++;
    if (c->fmt == SIM_FORMAT_44) {
        v1_add(c, false, join_path(comps, n, NULL), nd);
        return;
    }
    dnode *d = diff_descend(c, comps, n - 1, is_arr);
    if (d)
        dnode_add(d, DE_UPD, comps[n - 1])->val = nd;
}

/* comps[first] did not exist and was created as `top`; `leaf` is the value at the full path comps[0..n-1]. */
static void log_created(uctx *c, char **comps, size_t first, size_t n, const bool *is_arr, unode *top, unode *leaf)
{
    c->changes++;
    if (c->fmt == SIM_FORMAT_44) {
        v1_add(c, false, join_path(comps, n, NULL), leaf);
        return;
    }
    dnode *d = diff_descend(c, comps, first, is_arr);
    if (d)
        dnode_add(d, d->is_array ? DE_UPD : DE_INS, comps[first])->val = top;
}

static void log_deleted(uctx *c, char **comps, size_t n, const bool *is_arr)
{
    c->changes++;
    if (c->fmt == SIM_FORMAT_44) {
        v1_add(c, true, join_path(comps, n, NULL), NULL);
        return;
    }
    dnode *d = diff_descend(c, comps, n - 1, is_arr);
    if (d)
        dnode_add(d, DE_DEL, comps[n - 1]);
}

/* Elements [first, arr->n) were appended to the existing array at comps[0..n-1]. */
static void log_pushed(uctx *c, char **comps, size_t n, bool *is_arr, unode *arr, size_t first)
{
    c->changes++;
    char buf[24];
    if (c->fmt == SIM_FORMAT_44) {
        for (size_t i = first; i < arr->n; i++) {
            snprintf(buf, sizeof buf, "%zu", i);
            v1_add(c, false, join_path(comps, n, buf), arr->kids[i]);
        }
        return;
    }
    is_arr[n] = true;
    dnode *d = diff_descend(c, comps, n, is_arr);
    if (!d)
        return;
    for (size_t i = first; i < arr->n; i++) {
        snprintf(buf, sizeof buf, "%zu", i);
        dnode_add(d, DE_UPD, buf)->val = arr->kids[i];
    }
}

static int cmp_dentry_idx(const void *a, const void *b)
{
    const dentry *x = a, *y = b;
    return x->idx < y->idx ? -1 : x->idx > y->idx ? 1 : 0;
}

static void diff_serialize(dnode *d, bson_t *out)
{
    char key[32];
    if (d->is_array) {
        BSON_APPEND_BOOL(out, "a", true);
        qsort(d->e, d->n, sizeof *d->e, cmp_dentry_idx);
        for (size_t i = 0; i < d->n; i++) {
            snprintf(key, sizeof key, "%c%zu", d->e[i].kind == DE_SUB ? 's' : 'u', d->e[i].idx);
            if (d->e[i].kind == DE_SUB) {
                bson_t sub;
                bson_append_document_begin(out, key, -1, &sub);
                diff_serialize(d->e[i].sub, &sub);
                bson_append_document_end(out, &sub);
            } else {
                node_append_to(out, key, d->e[i].val);
            }
        }
        return;
    }
    static const struct {
        int kind;
        const char *name;
    } sections[] = {{DE_DEL, "d"}, {DE_UPD, "u"}, {DE_INS, "i"}};
    for (size_t s = 0; s < 3; s++) {
        bson_t sec;
        bool open = false;
        for (size_t i = 0; i < d->n; i++) {
            if (d->e[i].kind != sections[s].kind)
                continue;
            if (!open) {
                bson_append_document_begin(out, sections[s].name, -1, &sec);
                open = true;
            }
            if (d->e[i].kind == DE_DEL)
                BSON_APPEND_BOOL(&sec, d->e[i].key, false);
            else
                node_append_to(&sec, d->e[i].key, d->e[i].val);
        }
        if (open)
            bson_append_document_end(out, &sec);
    }
    for (size_t i = 0; i < d->n; i++) {
        if (d->e[i].kind != DE_SUB)
            continue;
        char *k = bson_strdup_printf("s%s", d->e[i].key);
        bson_t sub;
        bson_append_document_begin(out, k, -1, &sub);
        diff_serialize(d->e[i].sub, &sub);
        bson_append_document_end(out, &sub);
        bson_free(k);
    }
}

static void v1_serialize(uctx *c, bson_t *out)
{
    BSON_APPEND_INT32(out, "$v", 1);
    bool first_unset = c->v1n && c->v1[0].unset;
    for (int pass = 0; pass < 2; pass++) {
        bool want_unset = (pass == 0) == first_unset;
        bson_t sec;
        bool open = false;
        for (size_t i = 0; i < c->v1n; i++) {
            if (c->v1[i].unset != want_unset)
                continue;
            if (!open) {
                bson_append_document_begin(out, want_unset ? "$unset" : "$set", -1, &sec);
                open = true;
            }
            if (want_unset)
                BSON_APPEND_BOOL(&sec, c->v1[i].path, true);
            else
                node_append_to(&sec, c->v1[i].path, c->v1[i].val);
        }
        if (open)
            bson_append_document_end(out, &sec);
    }
}

/* ---------------------------------------------------------------------------------------------------------------
 * Operations
 * ------------------------------------------------------------------------------------------------------------- */

typedef enum {
    OP_SET,
    OP_SET_ON_INSERT,
    OP_UNSET,
    OP_INC,
    OP_MUL,
    OP_MIN,
    OP_MAX,
    OP_PUSH,
    OP_ADD_TO_SET,
    OP_POP,
    OP_PULL,
    OP_PULL_ALL,
    OP_CURRENT_DATE,
    OP_RENAME,        /* sits at the destination path, as the server's RenameNode does */
    OP_RENAME_SOURCE, /* the ConflictPlaceholderNode at a $rename's source path: only checked for conflicts */
} opkind;

/* Which of PullNode's three matchers a $pull condition gets (mongodb/mongo src/mongo/db/update/pull_node.cpp,
 * PullNode::init): a value or array → EqualityMatcher; an object whose first field is a query operator →
 * WrappedObjectMatcher (the element is matched as {"": element}); any other object → ObjectMatcher (a query on the
 * element, which must be an object). */
typedef enum { PULL_EQUAL, PULL_OPERATORS, PULL_DOCUMENT } pullkind;

typedef struct {
    opkind kind;
    char *path; /* the path the op sits at in the update tree (a $rename's destination) */
    char *buf;  /* path copy split into comps */
    char **comps;
    size_t n;
    bson_iter_t val;
    /* $push / $addToSet: the values come from the $each array (each) or are val itself */
    bool has_each;
    bson_iter_t each;
    /* $push modifiers (push_node.cpp: _slice and _position default to the largest long long, i.e. no $slice and
     * append); sort: 0 none, 1 / -1 whole elements, 2 by the pattern document sort_pat */
    long long slice, position;
    int sort;
    const uint8_t *sort_pat;
    uint32_t sort_pat_len;
    bool pop_front; /* $pop: -1 */
    bool date;      /* $currentDate: a date (true) or a timestamp */
    pullkind pull;  /* $pull */
    char *src_path; /* $rename: the source, split like path */
    char *src_buf;
    char **src_comps;
    size_t src_n;
} upd_op;

static void ops_free(upd_op *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(ops[i].comps);
        free(ops[i].buf);
        free(ops[i].src_comps);
        free(ops[i].src_buf);
    }
    free(ops);
}

static int cmp_ops(const void *a, const void *b)
{
    const upd_op *x = a, *y = b;
    for (size_t i = 0; i < x->n && i < y->n; i++) {
        int r = strcmp(x->comps[i], y->comps[i]);
        if (r)
            return r;
    }
    return x->n < y->n ? -1 : x->n > y->n ? 1 : 0;
}

/* ---- the clock $currentDate reads ---- */

static int64_t default_date_ms(void *ctx)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A server takes the timestamp from its cluster clock (current_date_node.cpp: tickClusterTime(1)), so the value is
 * unique and just below the ts of the entry that logs it. mongosim's store does not see the oplog clock, so this
 * counts Timestamp(now, 1), (now, 2)... within each second instead: unique and increasing, but not interleaved
 * with the oplog's own timestamps. */
static uint64_t default_timestamp(void *ctx)
{
    static uint32_t last_secs, last_inc;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint32_t secs = (uint32_t)ts.tv_sec;
    if (secs > last_secs) {
        last_secs = secs;
        last_inc = 0;
    }
    return ((uint64_t)last_secs << 32) | ++last_inc;
}

static update_clock g_clock = {default_date_ms, default_timestamp, NULL};

void update_set_clock(const update_clock *clock)
{
    if (clock) {
        g_clock = *clock;
    } else {
        g_clock.date_ms = default_date_ms;
        g_clock.timestamp = default_timestamp;
        g_clock.ctx = NULL;
    }
}

static char *id_json(const bson_t *doc)
{
    bson_iter_t it;
    if (doc && bson_iter_init_find(&it, doc, "_id")) {
        unode *nd = node_from_iter("_id", &it);
        char *s = node_json("_id", nd);
        node_free(nd);
        return s;
    }
    return bson_strdup("{ }");
}

const char *sim_type_name(bson_type_t t)
{
    switch (t) {
    case BSON_TYPE_DOUBLE:
        return "double";
    case BSON_TYPE_UTF8:
        return "string";
    case BSON_TYPE_DOCUMENT:
        return "object";
    case BSON_TYPE_ARRAY:
        return "array";
    case BSON_TYPE_BINARY:
        return "binData";
    case BSON_TYPE_UNDEFINED:
        return "undefined";
    case BSON_TYPE_OID:
        return "objectId";
    case BSON_TYPE_BOOL:
        return "bool";
    case BSON_TYPE_DATE_TIME:
        return "date";
    case BSON_TYPE_NULL:
        return "null";
    case BSON_TYPE_REGEX:
        return "regex";
    case BSON_TYPE_INT32:
        return "int";
    case BSON_TYPE_TIMESTAMP:
        return "timestamp";
    case BSON_TYPE_INT64:
        return "long";
    case BSON_TYPE_DECIMAL128:
        return "decimal";
    case BSON_TYPE_MINKEY:
        return "minKey";
    case BSON_TYPE_MAXKEY:
        return "maxKey";
    default:
        return "unknown";
    }
}

static bool is_number(bson_type_t t)
{
    return t == BSON_TYPE_INT32 || t == BSON_TYPE_INT64 || t == BSON_TYPE_DOUBLE || t == BSON_TYPE_DECIMAL128;
}

/* cur + inc with MongoDB's type promotion: int32 < int64 < double; int32 overflow widens to int64. */
static bool inc_compute(uctx *c, const bson_value_t *cur, const bson_value_t *inc, bson_value_t *out, bson_error_t *err)
{
    memset(out, 0, sizeof *out);
    if (cur->value_type == BSON_TYPE_DECIMAL128 || inc->value_type == BSON_TYPE_DECIMAL128) {
        bson_set_error(err, 0, 2, "mongosim does not implement $inc on decimal values");
        return false;
    }
    if (cur->value_type == BSON_TYPE_DOUBLE || inc->value_type == BSON_TYPE_DOUBLE) {
        double a = cur->value_type == BSON_TYPE_DOUBLE  ? cur->value.v_double
                   : cur->value_type == BSON_TYPE_INT64 ? (double)cur->value.v_int64
                                                        : cur->value.v_int32;
        double b = inc->value_type == BSON_TYPE_DOUBLE  ? inc->value.v_double
                   : inc->value_type == BSON_TYPE_INT64 ? (double)inc->value.v_int64
                                                        : inc->value.v_int32;
        out->value_type = BSON_TYPE_DOUBLE;
        out->value.v_double = a + b;
        return true;
    }
    if (cur->value_type == BSON_TYPE_INT64 || inc->value_type == BSON_TYPE_INT64) {
        int64_t a = cur->value_type == BSON_TYPE_INT64 ? cur->value.v_int64 : cur->value.v_int32;
        int64_t b = inc->value_type == BSON_TYPE_INT64 ? inc->value.v_int64 : inc->value.v_int32;
        int64_t r;
        if (__builtin_add_overflow(a, b, &r)) {
            char *id = id_json(c->orig);
            bson_set_error(err, 0, 2,
                           "Failed to apply $inc operations to current value ((NumberLong)%lld) for document %s",
                           (long long)a, id);
            bson_free(id);
            return false;
        }
        out->value_type = BSON_TYPE_INT64;
        out->value.v_int64 = r;
        return true;
    }
    int32_t r;
    if (__builtin_add_overflow(cur->value.v_int32, inc->value.v_int32, &r)) {
        out->value_type = BSON_TYPE_INT64;
        out->value.v_int64 = (int64_t)cur->value.v_int32 + inc->value.v_int32;
    } else {
        out->value_type = BSON_TYPE_INT32;
        out->value.v_int32 = r;
    }
    return true;
}

/* ---- values as BSON, for comparing --------------------------------------------------------------------------- */

/* Serialises nd as the only field (key "") of *tmp, initialised here, and points *it at it. */
static void node_iter(const unode *nd, bson_t *tmp, bson_iter_t *it)
{
    bson_init(tmp);
    node_append_to(tmp, "", nd);
    if (bson_iter_init(it, tmp))
        bson_iter_next(it);
}

/* A deep copy of nd named key. */
static unode *node_clone(const unode *nd, const char *key)
{
    bson_t tmp;
    bson_iter_t it;
    node_iter(nd, &tmp, &it);
    unode *out = node_from_iter(key, &it);
    bson_destroy(&tmp);
    return out;
}

/* BSON comparison order of a node and a value (the server's compareWithBSONElement, no field names). */
static int node_cmp_iter(const unode *nd, const bson_iter_t *v)
{
    bson_t tmp;
    bson_iter_t it;
    node_iter(nd, &tmp, &it);
    int r = update_compare_iters(&it, v);
    bson_destroy(&tmp);
    return r;
}

static int node_cmp_node(const unode *a, const unode *b)
{
    bson_t tmp;
    bson_iter_t it;
    node_iter(b, &tmp, &it);
    int r = node_cmp_iter(a, &it);
    bson_destroy(&tmp);
    return r;
}

/* {key: value} as relaxed extended JSON, for messages (caller frees). */
static char *field_json(const char *key, const bson_iter_t *v)
{
    bson_t tmp = BSON_INITIALIZER;
    bson_append_iter(&tmp, key, -1, v);
    char *js = bson_as_relaxed_extended_json(&tmp, NULL);
    bson_destroy(&tmp);
    return js;
}

/* Inserts k nodes before position at of arr. */
static void node_insert_kids(unode *arr, size_t at, unode **kids, size_t k)
{
    if (arr->n + k > arr->cap) {
        arr->cap = (arr->n + k) * 2;
        arr->kids = bson_realloc(arr->kids, arr->cap * sizeof *arr->kids);
    }
    memmove(&arr->kids[at + k], &arr->kids[at], (arr->n - at) * sizeof *arr->kids);
    memcpy(&arr->kids[at], kids, k * sizeof *kids);
    arr->n += k;
}

static void node_remove_kid(unode *parent, size_t slot)
{
    node_free(parent->kids[slot]);
    memmove(&parent->kids[slot], &parent->kids[slot + 1], (parent->n - slot - 1) * sizeof *parent->kids);
    parent->n--;
}

/* ---- numbers ----------------------------------------------------------------------------------------------- */

/* SafeNum::isIdentical (mongodb/mongo src/mongo/util/safe_num.cpp): the same type and ==, so -0.0 is identical to
 * 0.0 and NaN is identical to nothing. ArithmeticNode treats an identical result as a no-op (arithmetic_node.cpp). */
static bool nums_identical(const bson_value_t *a, const bson_value_t *b)
{
    if (a->value_type != b->value_type)
        return false;
    switch (a->value_type) {
    case BSON_TYPE_INT32:
        return a->value.v_int32 == b->value.v_int32;
    case BSON_TYPE_INT64:
        return a->value.v_int64 == b->value.v_int64;
    case BSON_TYPE_DOUBLE:
        return a->value.v_double == b->value.v_double;
    default:
        return false;
    }
}

static double value_double(const bson_value_t *v)
{
    return v->value_type == BSON_TYPE_DOUBLE  ? v->value.v_double
           : v->value_type == BSON_TYPE_INT64 ? (double)v->value.v_int64
                                              : (double)v->value.v_int32;
}

/*
 * x * y as SafeNum::mulInternal does it (mongodb/mongo src/mongo/util/safe_num.cpp): int32*int32 is int32, or int64
 * when it does not fit; int32/int64 mixes are int64, and an int64 overflow has no result (false); anything with a
 * double is a double. Decimals are not handled here (callers refuse them).
 */
static bool mul_values(const bson_value_t *x, const bson_value_t *y, bson_value_t *out)
{
    bson_type_t tx = x->value_type, ty = y->value_type;
    memset(out, 0, sizeof *out);
    if (tx == BSON_TYPE_INT32 && ty == BSON_TYPE_INT32) {
        int64_t r = (int64_t)x->value.v_int32 * y->value.v_int32;
        if (r >= INT32_MIN && r <= INT32_MAX) {
            out->value_type = BSON_TYPE_INT32;
            out->value.v_int32 = (int32_t)r;
        } else {
            out->value_type = BSON_TYPE_INT64;
            out->value.v_int64 = r;
        }
        return true;
    }
    if (tx != BSON_TYPE_DOUBLE && ty != BSON_TYPE_DOUBLE) {
        int64_t a = tx == BSON_TYPE_INT64 ? x->value.v_int64 : x->value.v_int32;
        int64_t b = ty == BSON_TYPE_INT64 ? y->value.v_int64 : y->value.v_int32;
        int64_t r;
        if (__builtin_mul_overflow(a, b, &r))
            return false;
        out->value_type = BSON_TYPE_INT64;
        out->value.v_int64 = r;
        return true;
    }
    out->value_type = BSON_TYPE_DOUBLE;
    out->value.v_double = value_double(x) * value_double(y);
    return true;
}

/* SafeNum::debugString, as the server's arithmetic error messages print the current value. */
static void num_debug(const bson_value_t *v, char *buf, size_t len)
{
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        snprintf(buf, len, "(NumberInt)%d", v->value.v_int32);
        break;
    case BSON_TYPE_INT64:
        snprintf(buf, len, "(NumberLong)%lld", (long long)v->value.v_int64);
        break;
    default:
        snprintf(buf, len, "(NumberDouble)%g", value_double(v));
        break;
    }
}

/*
 * MatchExpressionParser::parseIntegerElementToLong (mongodb/mongo src/mongo/db/matcher/expression_parser.cpp), used
 * for $pop, $slice and $position: an int32, an int64, or a double or decimal with an integral value that fits in a
 * long long. False otherwise (not a number, NaN, fractional, out of range).
 */
static bool iter_to_ll(const bson_iter_t *it, long long *out)
{
    switch (bson_iter_type(it)) {
    case BSON_TYPE_INT32:
        *out = bson_iter_int32(it);
        return true;
    case BSON_TYPE_INT64:
        *out = bson_iter_int64(it);
        return true;
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128: {
        long double d = iter_number(it);
        if (isnan(d) || d >= 9223372036854775808.0L || d < -9223372036854775808.0L || d != truncl(d))
            return false;
        *out = (long long)d;
        return true;
    }
    default:
        return false;
    }
}

static bool iter_is_nan(const bson_iter_t *it)
{
    bson_type_t t = bson_iter_type(it);
    return (t == BSON_TYPE_DOUBLE || t == BSON_TYPE_DECIMAL128) && isnan(iter_number(it));
}

/* ---- $pull conditions ---------------------------------------------------------------------------------------- */

enum { Q_EQ, Q_NE, Q_GT, Q_GTE, Q_LT, Q_LTE, Q_IN, Q_NIN, Q_OTHER, Q_UNKNOWN };

/* A query operator that applies to a path: the names MatchExpressionParser knows (queryOperatorMap in mongodb/mongo
 * src/mongo/db/matcher/expression_parser.cpp). mongosim evaluates the comparisons; the others are Q_OTHER and
 * refused. */
static int query_op(const char *k)
{
    static const struct {
        const char *name;
        int op;
    } cmp[] = {{"$eq", Q_EQ}, {"$ne", Q_NE},   {"$gt", Q_GT}, {"$gte", Q_GTE},
               {"$lt", Q_LT}, {"$lte", Q_LTE}, {"$in", Q_IN}, {"$nin", Q_NIN}};
    static const char *const other[] = {"$all",       "$bitsAllClear", "$bitsAllSet",    "$bitsAnyClear", "$bitsAnySet",
                                        "$elemMatch", "$exists",       "$geoIntersects", "$geoNear",      "$geoWithin",
                                        "$mod",       "$near",         "$nearSphere",    "$not",          "$options",
                                        "$regex",     "$size",         "$type",          "$within"};
    for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++)
        if (strcmp(k, cmp[i].name) == 0)
            return cmp[i].op;
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        if (strcmp(k, other[i]) == 0)
            return Q_OTHER;
    return strncmp(k, "$_internal", 10) == 0 ? Q_OTHER : Q_UNKNOWN;
}

static bool refuse_regex(bson_error_t *err)
{
    bson_set_error(err, 0, 2, "mongosim does not implement regular expressions in $pull conditions");
    return false;
}

/* Validates an operator object {$op: value, ...} of a $pull condition: every key must be a comparison mongosim
 * evaluates; $in/$nin need an array (the server's "$in needs an array", BadValue). */
static bool check_operators(const bson_iter_t *ops, bson_error_t *err)
{
    bson_iter_t it;
    if (!bson_iter_recurse(ops, &it))
        return true;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        int q = k[0] == '$' ? query_op(k) : Q_UNKNOWN;
        if (q == Q_UNKNOWN) {
            bson_set_error(err, 0, 2, "unknown operator: %s", k);
            return false;
        }
        if (q == Q_OTHER) {
            bson_set_error(err, 0, 2, "mongosim does not implement the %s query operator in $pull conditions", k);
            return false;
        }
        if (BSON_ITER_HOLDS_REGEX(&it))
            return refuse_regex(err);
        if (q == Q_IN || q == Q_NIN) {
            bson_iter_t e, f;
            if (!BSON_ITER_HOLDS_ARRAY(&it)) {
                bson_set_error(err, 0, 2, "%s needs an array", k);
                return false;
            }
            if (bson_iter_recurse(&it, &e))
                while (bson_iter_next(&e)) {
                    if (BSON_ITER_HOLDS_REGEX(&e))
                        return refuse_regex(err);
                    if (BSON_ITER_HOLDS_DOCUMENT(&e) && bson_iter_recurse(&e, &f) && bson_iter_next(&f) &&
                        bson_iter_key(&f)[0] == '$') {
                        bson_set_error(err, 0, 2, "cannot nest $ under %s", k);
                        return false;
                    }
                }
        }
    }
    return true;
}

/* Picks the matcher for op's $pull condition (PullNode::init) and validates it. */
static bool check_pull_cond(upd_op *op, bson_error_t *err)
{
    bson_iter_t it;
    if (BSON_ITER_HOLDS_REGEX(&op->val))
        return refuse_regex(err);
    if (!BSON_ITER_HOLDS_DOCUMENT(&op->val)) {
        op->pull = PULL_EQUAL;
        return true;
    }
    if (bson_iter_recurse(&op->val, &it) && bson_iter_next(&it) && bson_iter_key(&it)[0] == '$' &&
        query_op(bson_iter_key(&it)) != Q_UNKNOWN) {
        op->pull = PULL_OPERATORS;
        return check_operators(&op->val, err);
    }
    op->pull = PULL_DOCUMENT;
    if (!bson_iter_recurse(&op->val, &it))
        return true;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        static const char *const top[] = {"$and",        "$or",          "$nor",       "$expr",
                                          "$where",      "$text",        "$comment",   "$jsonSchema",
                                          "$alwaysTrue", "$alwaysFalse", "$sampleRate"};
        if (k[0] == '$') {
            for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
                if (strcmp(k, top[i]) == 0) {
                    bson_set_error(err, 0, 2, "mongosim does not implement the %s query operator in $pull conditions",
                                   k);
                    return false;
                }
            bson_set_error(err, 0, 2, "unknown top level operator: %s", k);
            return false;
        }
        if (BSON_ITER_HOLDS_REGEX(&it))
            return refuse_regex(err);
        bson_iter_t f;
        if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &f) && bson_iter_next(&f) &&
            bson_iter_key(&f)[0] == '$' && !check_operators(&it, err))
            return false;
    }
    return true;
}

/*
 * One comparison of a value v (NULL: the field is missing) with rhs, as ComparisonMatchExpressionBase::compare does it
 * (mongodb/mongo src/mongo/db/matcher/expression_leaf.cpp): values of different canonical types never match, except
 * that null and undefined are equal, MinKey/MaxKey bound everything, and a missing field equals null; NaN equals
 * only NaN and is neither less nor greater than anything.
 */
static bool cmp_single(int q, const bson_iter_t *v, const bson_iter_t *rhs)
{
    bool eq_ok = q == Q_EQ || q == Q_GTE || q == Q_LTE;
    bson_type_t tr = bson_iter_type(rhs);
    if (!v)
        return eq_ok && tr == BSON_TYPE_NULL;
    int ra = update_type_rank(bson_iter_type(v)), rb = update_type_rank(tr);
    if (ra != rb) {
        if ((ra == 0 && rb == 5) || (ra == 5 && rb == 0))
            return eq_ok;
        if (tr == BSON_TYPE_MAXKEY)
            return q == Q_LT || q == Q_LTE;
        if (tr == BSON_TYPE_MINKEY)
            return q == Q_GT || q == Q_GTE;
        return false;
    }
    bool na = iter_is_nan(v), nb = iter_is_nan(rhs);
    if (na || nb)
        return eq_ok && na && nb;
    int r = update_compare_iters(v, rhs);
    switch (q) {
    case Q_EQ:
        return r == 0;
    case Q_GT:
        return r > 0;
    case Q_GTE:
        return r >= 0;
    case Q_LT:
        return r < 0;
    default:
        return r <= 0;
    }
}

/* A comparison on a leaf value: an array matches if one of its elements does or the array as a whole does. */
static bool leaf_match(int q, const bson_iter_t *v, const bson_iter_t *rhs)
{
    if (v && BSON_ITER_HOLDS_ARRAY(v)) {
        bson_iter_t e;
        if (bson_iter_recurse(v, &e))
            while (bson_iter_next(&e))
                if (cmp_single(q, &e, rhs))
                    return true;
    }
    return cmp_single(q, v, rhs);
}

static bool in_match(const bson_iter_t *v, const bson_iter_t *list)
{
    bson_iter_t it;
    if (bson_iter_recurse(list, &it))
        while (bson_iter_next(&it))
            if (leaf_match(Q_EQ, v, &it))
                return true;
    return false;
}

/* {$op: rhs, ...} on v: all must hold; $ne and $nin are the negations of $eq and $in. */
static bool operators_match(const bson_iter_t *ops, const bson_iter_t *v)
{
    bson_iter_t it;
    if (!bson_iter_recurse(ops, &it))
        return true;
    while (bson_iter_next(&it)) {
        int q = query_op(bson_iter_key(&it));
        bool ok = q == Q_NE    ? !leaf_match(Q_EQ, v, &it)
                  : q == Q_IN  ? in_match(v, &it)
                  : q == Q_NIN ? !in_match(v, &it)
                               : leaf_match(q, v, &it);
        if (!ok)
            return false;
    }
    return true;
}

/* ObjectMatcher: a query {path: value or {$op...}, ...} on an array element that is an object. Paths may be dotted
 * through objects; a path that would need the query's implicit traversal of arrays is refused (1 match, 0 none,
 * -1 error). */
static int document_match(const bson_iter_t *query, const bson_iter_t *elem, bson_error_t *err)
{
    bson_iter_t q;
    if (!BSON_ITER_HOLDS_DOCUMENT(elem))
        return 0;
    if (!bson_iter_recurse(query, &q))
        return 1;
    while (bson_iter_next(&q)) {
        const char *path = bson_iter_key(&q);
        char *copy = bson_strdup(path), *save = copy;
        bson_iter_t cur = *elem, child;
        bool missing = false;
        for (;;) {
            char *dot = strchr(save, '.');
            if (dot)
                *dot = '\0';
            if (BSON_ITER_HOLDS_ARRAY(&cur)) {
                bson_set_error(err, 0, 2,
                               "mongosim does not implement $pull conditions whose path '%s' goes through an array",
                               path);
                bson_free(copy);
                return -1;
            }
            if (!BSON_ITER_HOLDS_DOCUMENT(&cur) || !bson_iter_recurse(&cur, &child) || !bson_iter_find(&child, save)) {
                missing = true;
                break;
            }
            cur = child;
            if (!dot)
                break;
            save = dot + 1;
        }
        bson_free(copy);
        bson_iter_t f;
        bool ops = BSON_ITER_HOLDS_DOCUMENT(&q) && bson_iter_recurse(&q, &f) && bson_iter_next(&f) &&
                   bson_iter_key(&f)[0] == '$';
        bool ok = ops ? operators_match(&q, missing ? NULL : &cur) : leaf_match(Q_EQ, missing ? NULL : &cur, &q);
        if (!ok)
            return 0;
    }
    return 1;
}

/* Does the array element nd match op's $pull condition (PullNode's matchers) or $pullAll list (PullAllNode's
 * SetMatcher: equal to one of the values)? 1, 0, or -1 with err. */
static int pull_match(const upd_op *op, const unode *nd, bson_error_t *err)
{
    bson_t tmp;
    bson_iter_t v, it;
    int r = 0;
    node_iter(nd, &tmp, &v);
    if (op->kind == OP_PULL_ALL) {
        if (bson_iter_recurse(&op->val, &it))
            while (!r && bson_iter_next(&it))
                r = update_compare_iters(&v, &it) == 0;
    } else if (op->pull == PULL_EQUAL) {
        r = update_compare_iters(&v, &op->val) == 0;
    } else if (op->pull == PULL_OPERATORS) {
        r = operators_match(&op->val, &v);
    } else {
        r = document_match(&op->val, &v, err);
    }
    bson_destroy(&tmp);
    return r;
}

/* ---- $push and $addToSet ------------------------------------------------------------------------------------- */

/* The values a $push or $addToSet adds, as an array node (caller frees). For $addToSet a value equal to an earlier
 * one is dropped (addtoset_node.cpp: deduplicate keeps the first of equal values, in order). */
static unode *op_values(const upd_op *op)
{
    unode *arr = node_new("", BSON_TYPE_ARRAY);
    bson_iter_t e;
    if (op->has_each) {
        if (bson_iter_recurse(&op->each, &e))
            node_fill(arr, &e);
    } else {
        node_append(arr, node_from_iter("", &op->val));
    }
    if (op->kind == OP_ADD_TO_SET) {
        size_t kept = 0;
        for (size_t i = 0; i < arr->n; i++) {
            bool dup = false;
            for (size_t j = 0; j < kept && !dup; j++)
                dup = node_cmp_node(arr->kids[i], arr->kids[j]) == 0;
            if (dup)
                node_free(arr->kids[i]);
            else
                arr->kids[kept++] = arr->kids[i];
        }
        arr->n = kept;
    }
    return arr;
}

/* The child of an object (by name) or array (by index) as BSONObj::getField sees it. */
static const unode *child_named(const unode *obj, const char *key)
{
    size_t slot, idx;
    if (obj->type == BSON_TYPE_DOCUMENT)
        return node_find(obj, key, &slot);
    if (obj->type == BSON_TYPE_ARRAY && parse_index(key, &idx) && idx < obj->n)
        return obj->kids[idx];
    return NULL;
}

/* dotted_path_support::extractElementAtPath (mongodb/mongo src/mongo/db/bson/dotted_path_support.cpp): the whole
 * path as one field name first, else the first component and the rest below it (arrays are objects with numeric
 * field names; an empty one ends the search). */
static const unode *extract_path(const unode *obj, const char *path)
{
    const unode *e = child_named(obj, path);
    const char *dot = strchr(path, '.');
    if (e || !dot)
        return e;
    char *left = bson_strndup(path, (size_t)(dot - path));
    const unode *sub = child_named(obj, left);
    bson_free(left);
    if (!sub || (sub->type != BSON_TYPE_DOCUMENT && sub->type != BSON_TYPE_ARRAY) || sub->n == 0)
        return NULL;
    return extract_path(sub, dot + 1);
}

typedef struct {
    unode *nd;
    bson_t *key;
} sort_item;

/*
 * PatternElementCmp (mongodb/mongo src/mongo/db/update/pattern_cmp.cpp): with $sort: 1/-1 whole elements are
 * compared; with a pattern, each element that is an object gives the values at the pattern's paths (null when
 * missing; any other element gives nulls), compared in the pattern's order and directions.
 */
static void sort_key(const upd_op *op, const unode *nd, bson_t *key)
{
    bson_iter_t pat;
    if (op->sort != 2) {
        node_append_to(key, "", nd);
        return;
    }
    if (!bson_iter_init_from_data(&pat, op->sort_pat, op->sort_pat_len))
        return;
    while (bson_iter_next(&pat)) {
        const unode *v = nd->type == BSON_TYPE_DOCUMENT ? extract_path(nd, bson_iter_key(&pat)) : NULL;
        if (v)
            node_append_to(key, "", v);
        else
            BSON_APPEND_NULL(key, "");
    }
}

static int sort_cmp(const upd_op *op, const bson_t *ka, const bson_t *kb)
{
    bson_iter_t a, b, pat;
    bool has_pat = op->sort == 2 && bson_iter_init_from_data(&pat, op->sort_pat, op->sort_pat_len);
    if (!bson_iter_init(&a, ka) || !bson_iter_init(&b, kb))
        return 0;
    while (bson_iter_next(&a) && bson_iter_next(&b)) {
        int dir = op->sort;
        if (has_pat)
            dir = bson_iter_next(&pat) && iter_number(&pat) < 0 ? -1 : 1;
        int r = update_compare_iters(&a, &b);
        if (r)
            return dir < 0 ? -r : r;
    }
    return 0;
}

/* Stable merge sort. The server uses std::sort (mutable_bson sortChildren), which leaves equal elements in an
 * unspecified order; mongosim keeps them in their original order. */
static void merge_sort(const upd_op *op, sort_item *v, sort_item *tmp, size_t n)
{
    if (n < 2)
        return;
    size_t h = n / 2, i = 0, j = h, k = 0;
    merge_sort(op, v, tmp, h);
    merge_sort(op, v + h, tmp, n - h);
    while (i < h && j < n)
        tmp[k++] = sort_cmp(op, v[j].key, v[i].key) < 0 ? v[j++] : v[i++];
    while (i < h)
        tmp[k++] = v[i++];
    while (j < n)
        tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof *v);
}

static void push_sort(const upd_op *op, unode *arr)
{
    if (arr->n < 2)
        return;
    sort_item *items = bson_malloc(arr->n * sizeof *items), *tmp = bson_malloc(arr->n * sizeof *tmp);
    for (size_t i = 0; i < arr->n; i++) {
        items[i].nd = arr->kids[i];
        items[i].key = bson_new();
        sort_key(op, arr->kids[i], items[i].key);
    }
    merge_sort(op, items, tmp, arr->n);
    for (size_t i = 0; i < arr->n; i++) {
        arr->kids[i] = items[i].nd;
        bson_destroy(items[i].key);
    }
    bson_free(items);
    bson_free(tmp);
}

enum { PUSH_NOOP, PUSH_NORMAL, PUSH_APPEND };

/*
 * PushNode::performPush (mongodb/mongo src/mongo/db/update/push_node.cpp) on the array arr; returns its
 * ModifyResult. insertElementsWithPosition: no values is a no-op; into an empty array, or at a $position inside the
 * array, is a normal update (the whole array is logged); past the end (the default $position) is an append, which
 * PushNode::logUpdate logs element by element. Any $sort, and any $slice that removes elements, makes it a normal
 * update. *appended gets the number of values inserted.
 */
static int push_into(const upd_op *op, unode *arr, size_t *appended)
{
    unode *vals = op_values(op);
    long long size = (long long)arr->n, pos = op->position;
    int res = PUSH_NORMAL;
    size_t at = 0;
    if (vals->n == 0)
        res = PUSH_NOOP;
    else if (size == 0)
        at = 0;
    else if (pos > size) {
        at = arr->n;
        res = PUSH_APPEND;
    } else if (pos > 0)
        at = (size_t)pos;
    else if (pos < 0 && pos != LLONG_MIN && -pos < size)
        at = (size_t)(size + pos);
    else
        at = 0;
    *appended = vals->n;
    if (vals->n)
        node_insert_kids(arr, at, vals->kids, vals->n);
    vals->n = 0;
    node_free(vals);
    if (op->sort) {
        res = PUSH_NORMAL;
        push_sort(op, arr);
    }
    long long keep = op->slice == LLONG_MIN ? LLONG_MAX : llabs(op->slice);
    while ((long long)arr->n > keep) {
        res = PUSH_NORMAL;
        node_remove_kid(arr, op->slice >= 0 ? arr->n - 1 : 0);
    }
    return res;
}

/* ---- applying ---------------------------------------------------------------------------------------------- */

static bool refuse_decimal(const char *opname, bson_error_t *err)
{
    bson_set_error(err, 0, 2, "mongosim does not implement %s on decimal values", opname);
    return false;
}

/* CurrentDateNode's value (current_date_node.cpp): the server's time as a date, or a cluster-time timestamp. */
static unode *current_date_node(const upd_op *op, const char *key)
{
    unode *nd = node_new(key, op->date ? BSON_TYPE_DATE_TIME : BSON_TYPE_TIMESTAMP);
    if (op->date) {
        nd->val.value.v_datetime = g_clock.date_ms(g_clock.ctx);
    } else {
        uint64_t ts = g_clock.timestamp(g_clock.ctx);
        nd->val.value.v_timestamp.timestamp = (uint32_t)(ts >> 32);
        nd->val.value.v_timestamp.increment = (uint32_t)ts;
    }
    return nd;
}

/* The value an operation creates when its path does not exist yet (each node's setValueForNewElement); NULL with
 * err on failure. */
static unode *op_new_value(upd_op *op, const char *key, bson_error_t *err)
{
    switch (op->kind) {
    case OP_PUSH: {
        /* PushNode::setValueForNewElement: an empty array, then performPush (so $sort and $slice apply). */
        unode *arr = node_new(key, BSON_TYPE_ARRAY);
        size_t appended;
        push_into(op, arr, &appended);
        return arr;
    }
    case OP_ADD_TO_SET: {
        /* AddToSetNode::setValueForNewElement: an array of the (deduplicated) values. */
        unode *arr = op_values(op);
        bson_free(arr->key);
        arr->key = bson_strdup(key);
        return arr;
    }
    case OP_MUL: {
        /* ArithmeticNode::setValueForNewElement: operand * int32 0, i.e. a zero of the operand's type. */
        bson_value_t zero, res;
        zero.value_type = BSON_TYPE_INT32;
        zero.value.v_int32 = 0;
        if (bson_iter_type(&op->val) == BSON_TYPE_DECIMAL128) {
            refuse_decimal("$mul", err);
            return NULL;
        }
        mul_values(bson_iter_value(&op->val), &zero, &res);
        unode *nd = node_new(key, res.value_type);
        nd->val = res;
        return nd;
    }
    case OP_CURRENT_DATE:
        return current_date_node(op, key);
    default:
        /* $set, $setOnInsert, $inc (operand + 0), $min, $max: the operand. */
        return node_from_iter(key, &op->val);
    }
}

static void node_replace(unode *parent, size_t slot, unode *nd)
{
    unode *old = parent->kids[slot];
    if (parent->type == BSON_TYPE_DOCUMENT) {
        free(nd->key);
        nd->key = bson_strdup(old->key);
    }
    parent->kids[slot] = nd;
    node_free(old);
}

static bool not_viable(const upd_op *op, size_t i, const unode *node, const char *node_key, bson_error_t *err)
{
    char *js = node_json(node_key, node);
    bson_set_error(err, 0, 28, "Cannot create field '%s' in element %s", op->comps[i], js);
    bson_free(js);
    return false;
}

/* Modifiers that never create their path: $unset, and $pop, $pull, $pullAll (ModifierNode::allowCreation is false
 * for them). */
static bool op_creates(opkind k)
{
    return k != OP_UNSET && k != OP_POP && k != OP_PULL && k != OP_PULL_ALL;
}

/* The path is blocked at comps[i] by node (a scalar, or an array and a non-numeric component). $unset ignores it
 * (UnsetNode::allowNonViablePath); $pop/$pull/$pullAll fail as UpdateLeafNode::checkViability does
 * (mongodb/mongo src/mongo/db/update/update_leaf_node.cpp, PathNotViable); the others cannot create the field. */
static bool path_blocked(const upd_op *op, size_t i, const unode *node, const char *node_key, bson_error_t *err)
{
    if (op->kind == OP_UNSET)
        return true;
    if (op_creates(op->kind))
        return not_viable(op, i, node, node_key, err);
    char *full = join_path(op->comps, op->n, NULL);
    char *js = node_json(node_key, node);
    bson_set_error(err, 0, 28, "Cannot use the part (%s) of (%s) to traverse the element (%s)", op->comps[i], full, js);
    bson_free(js);
    bson_free(full);
    return false;
}

static bool not_array(uctx *c, const upd_op *op, const char *comp, const unode *child, bson_error_t *err)
{
    char *id = id_json(c->orig);
    char *full = join_path(op->comps, op->n, NULL);
    switch (op->kind) {
    case OP_PUSH: /* PushNode::performPush */
        bson_set_error(err, 0, 2, "The field '%s' must be an array but is of type %s in document %s", full,
                       sim_type_name(child->type), id);
        break;
    case OP_ADD_TO_SET: /* AddToSetNode::updateExistingElement */
        bson_set_error(err, 0, 2, "Cannot apply $addToSet to non-array field. Field named '%s' has non-array type %s",
                       comp, sim_type_name(child->type));
        break;
    case OP_POP: /* PopNode::updateExistingElement: TypeMismatch */
        bson_set_error(err, 0, 14, "Path '%s' contains an element of non-array type '%s'", full,
                       sim_type_name(child->type));
        break;
    default: /* ArrayCullingNode::updateExistingElement, for $pull and $pullAll */
        bson_set_error(err, 0, 2, "Cannot apply $pull to a non-array value");
        break;
    }
    bson_free(full);
    bson_free(id);
    return false;
}

/* Applies op to the existing value child (node->kids[slot]) at the end of its path, logging any change. */
static bool apply_existing(uctx *c, upd_op *op, unode *node, size_t slot, unode *child, bool *is_arr, bson_error_t *err)
{
    const char *comp = op->comps[op->n - 1];
    switch (op->kind) {
    case OP_SET:
    case OP_SET_ON_INSERT:
        if (node_equals_iter(child, &op->val))
            return true;
        child = node_from_iter(comp, &op->val);
        node_replace(node, slot, child);
        log_updated(c, op->comps, op->n, is_arr, child);
        return true;
    case OP_UNSET:
        if (node->type == BSON_TYPE_ARRAY) {
            if (child->type == BSON_TYPE_NULL)
                return true;
            child = node_new("", BSON_TYPE_NULL);
            node_replace(node, slot, child);
            if (c->fmt == SIM_FORMAT_44)
                log_deleted(c, op->comps, op->n, is_arr);
            else
                log_updated(c, op->comps, op->n, is_arr, child);
            return true;
        }
        node_remove_kid(node, slot);
        log_deleted(c, op->comps, op->n, is_arr);
        return true;
    case OP_INC:
    case OP_MUL: {
        /* ArithmeticNode::updateExistingElement (mongodb/mongo src/mongo/db/update/arithmetic_node.cpp). */
        const char *opname = op->kind == OP_INC ? "$inc" : "$mul";
        if (!is_number(child->type)) {
            char *id = id_json(c->orig);
            bson_set_error(err, 0, 14,
                           "Cannot apply %s to a value of non-numeric type. %s has the field '%s' of non-numeric type "
                           "%s",
                           opname, id, comp, sim_type_name(child->type));
            bson_free(id);
            return false;
        }
        bson_value_t res;
        if (op->kind == OP_INC) {
            if (!inc_compute(c, &child->val, bson_iter_value(&op->val), &res, err))
                return false;
        } else {
            if (child->type == BSON_TYPE_DECIMAL128 || bson_iter_type(&op->val) == BSON_TYPE_DECIMAL128)
                return refuse_decimal("$mul", err);
            if (!mul_values(bson_iter_value(&op->val), &child->val, &res)) {
                char cur[64];
                char *id = id_json(c->orig);
                num_debug(&child->val, cur, sizeof cur);
                bson_set_error(err, 0, 2, "Failed to apply $mul operations to current value (%s) for document %s", cur,
                               id);
                bson_free(id);
                return false;
            }
        }
        if (nums_identical(&res, &child->val))
            return true;
        unode *nd = node_new(comp, res.value_type);
        nd->val = res;
        node_replace(node, slot, nd);
        log_updated(c, op->comps, op->n, is_arr, nd);
        return true;
    }
    case OP_MIN:
    case OP_MAX: {
        /* CompareNode::updateExistingElement (compare_node.cpp): BSON order, no-op when equal or already on the
         * right side. */
        int r = node_cmp_iter(child, &op->val);
        if (r == 0 || (op->kind == OP_MAX ? r > 0 : r < 0))
            return true;
        child = node_from_iter(comp, &op->val);
        node_replace(node, slot, child);
        log_updated(c, op->comps, op->n, is_arr, child);
        return true;
    }
    case OP_CURRENT_DATE:
        /* CurrentDateNode::updateExistingElement: always a normal update. */
        child = current_date_node(op, comp);
        node_replace(node, slot, child);
        log_updated(c, op->comps, op->n, is_arr, child);
        return true;
    case OP_PUSH: {
        size_t appended;
        if (child->type != BSON_TYPE_ARRAY)
            return not_array(c, op, comp, child, err);
        int res = push_into(op, child, &appended);
        if (res == PUSH_APPEND)
            log_pushed(c, op->comps, op->n, is_arr, child, child->n - appended);
        else if (res == PUSH_NORMAL)
            log_updated(c, op->comps, op->n, is_arr, child);
        return true;
    }
    case OP_ADD_TO_SET: {
        /* AddToSetNode::updateExistingElement: appends the values not already present; a normal update, so the
         * whole array is logged (not element by element as $push's append is). */
        if (child->type != BSON_TYPE_ARRAY)
            return not_array(c, op, comp, child, err);
        unode *vals = op_values(op);
        size_t before = child->n;
        for (size_t i = 0; i < vals->n; i++) {
            bool present = false;
            for (size_t j = 0; j < before && !present; j++)
                present = node_cmp_node(child->kids[j], vals->kids[i]) == 0;
            if (present) {
                node_free(vals->kids[i]);
            } else {
                node_append(child, vals->kids[i]);
            }
        }
        vals->n = 0;
        node_free(vals);
        if (child->n > before)
            log_updated(c, op->comps, op->n, is_arr, child);
        return true;
    }
    case OP_POP:
        /* PopNode::updateExistingElement: an empty array is a no-op. */
        if (child->type != BSON_TYPE_ARRAY)
            return not_array(c, op, comp, child, err);
        if (child->n == 0)
            return true;
        node_remove_kid(child, op->pop_front ? 0 : child->n - 1);
        log_updated(c, op->comps, op->n, is_arr, child);
        return true;
    case OP_PULL:
    case OP_PULL_ALL: {
        /* ArrayCullingNode::updateExistingElement (array_culling_node.cpp): removes every matching element; none
         * removed is a no-op. */
        if (child->type != BSON_TYPE_ARRAY)
            return not_array(c, op, comp, child, err);
        size_t kept = 0, n = child->n;
        bool *rm = bson_malloc0(n + 1);
        for (size_t i = 0; i < n; i++) {
            int m = pull_match(op, child->kids[i], err);
            if (m < 0) {
                bson_free(rm);
                return false;
            }
            rm[i] = m;
        }
        for (size_t i = 0; i < n; i++) {
            if (rm[i])
                node_free(child->kids[i]);
            else
                child->kids[kept++] = child->kids[i];
        }
        bson_free(rm);
        child->n = kept;
        if (kept < n)
            log_updated(c, op->comps, op->n, is_arr, child);
        return true;
    }
    default:
        return true;
    }
}

/*
 * $rename, as RenameNode::apply does it (mongodb/mongo src/mongo/db/update/rename_node.cpp), at the destination's
 * place in the update order: find the source (missing: no-op; a path through a scalar, or an array and a field name:
 * PathNotViable); neither the source nor the destination may be inside an array (BadValue); then a $set of the
 * destination (SetElementNode: always logged, even with an identical value) followed by an $unset of the source, each
 * logged as such: 7.0 logs the destination in u/i and the source in d; 4.4 logs $set then $unset.
 */
static bool apply_rename(uctx *c, unode *root, upd_op *op, bson_error_t *err)
{
    bool no_arr[UPD_MAX_DEPTH + 2];
    memset(no_arr, 0, sizeof no_arr);

    /* The source: pathsupport::findLongestPrefix. */
    unode *cur = root, *src = NULL, *sparent = NULL;
    const char *cur_key = "", *array_field = NULL;
    for (size_t i = 0; i < op->src_n; i++) {
        const char *comp = op->src_comps[i];
        unode *next = NULL;
        size_t slot, idx;
        bool viable = true;
        if (cur->type == BSON_TYPE_DOCUMENT) {
            next = node_find(cur, comp, &slot);
        } else if (cur->type == BSON_TYPE_ARRAY) {
            array_field = cur_key;
            if (parse_index(comp, &idx))
                next = idx < cur->n ? cur->kids[idx] : NULL;
            else
                viable = false;
        } else {
            viable = false;
        }
        if (!viable) {
            char *js = node_json(cur_key, cur);
            bson_set_error(err, 0, 28, "cannot use the part (%s of %s) to traverse the element (%s)",
                           op->src_comps[i - 1], op->src_path, js);
            bson_free(js);
            return false;
        }
        if (!next)
            return true;
        sparent = cur;
        src = next;
        cur = next;
        cur_key = comp;
    }
    if (array_field) {
        char *id = id_json(c->orig);
        bson_set_error(err, 0, 2,
                       "The source field cannot be an array element, '%s' in doc with %s has an array field called "
                       "'%s'",
                       op->src_path, id, array_field);
        bson_free(id);
        return false;
    }

    /* The destination: every existing element on the way must be an object (it may itself be an array when it is
     * overwritten whole). */
    cur = root;
    cur_key = "";
    size_t i = 0;
    unode *dst = NULL;
    size_t dslot = 0;
    for (; i < op->n; i++) {
        if (cur->type == BSON_TYPE_ARRAY) {
            char *id = id_json(c->orig);
            bson_set_error(err, 0, 2,
                           "The destination field cannot be an array element, '%s' in doc with %s has an array "
                           "field called '%s'",
                           op->path, id, cur_key);
            bson_free(id);
            return false;
        }
        if (cur->type != BSON_TYPE_DOCUMENT)
            return not_viable(op, i, cur, cur_key, err);
        unode *next = node_find(cur, op->comps[i], &dslot);
        if (!next)
            break;
        if (i + 1 == op->n) {
            dst = next;
            break;
        }
        cur = next;
        cur_key = op->comps[i];
    }

    /* $set of the destination with a copy of the source. */
    if (dst) {
        unode *nd = node_clone(src, op->comps[op->n - 1]);
        node_replace(cur, dslot, nd);
        log_updated(c, op->comps, op->n, no_arr, nd);
    } else {
        unode *leaf = node_clone(src, op->comps[op->n - 1]), *top = leaf;
        for (size_t j = op->n - 1; j > i; j--) {
            unode *wrap = node_new(op->comps[j - 1], BSON_TYPE_DOCUMENT);
            node_append(wrap, top);
            top = wrap;
        }
        node_append(cur, top);
        log_created(c, op->comps, i, op->n, no_arr, top, leaf);
    }

    /* $unset of the source (its parent is an object: arrays were refused above). */
    size_t sslot;
    if (node_find(sparent, op->src_comps[op->src_n - 1], &sslot)) {
        node_remove_kid(sparent, sslot);
        log_deleted(c, op->src_comps, op->src_n, no_arr);
    }
    return true;
}

static bool apply_op(uctx *c, unode *root, upd_op *op, bson_error_t *err)
{
    bool is_arr[UPD_MAX_DEPTH + 2];
    unode *node = root;
    const char *node_key = "";
    if (op->kind == OP_RENAME_SOURCE || (op->kind == OP_SET_ON_INSERT && !c->inserting))
        return true;
    if (op->kind == OP_RENAME)
        return apply_rename(c, root, op, err);
    for (size_t i = 0; i < op->n; i++) {
        const char *comp = op->comps[i];
        bool last = i + 1 == op->n;
        unode *child = NULL;
        size_t slot = 0, idx = 0;
        if (node->type == BSON_TYPE_DOCUMENT) {
            is_arr[i] = false;
            child = node_find(node, comp, &slot);
        } else if (node->type == BSON_TYPE_ARRAY) {
            is_arr[i] = true;
            if (!parse_index(comp, &idx))
                return path_blocked(op, i, node, node_key, err);
            if (idx < node->n) {
                child = node->kids[idx];
                slot = idx;
            }
        } else {
            return path_blocked(op, i, node, node_key, err);
        }

        if (!child) {
            /* A viable path that does not exist: modifiers that do not create it do nothing
             * (ModifierNode::applyToNonexistentElement). */
            if (!op_creates(op->kind))
                return true;
            /* Create comps[i..n-1]: intermediate objects, then the value. */
            if (node->type == BSON_TYPE_ARRAY && idx > node->n + UPD_MAX_BACKFILL) {
                bson_set_error(err, 0, 2, "can't backfill array to larger than %d elements", UPD_MAX_BACKFILL);
                return false;
            }
            unode *leaf = op_new_value(op, op->comps[op->n - 1], err);
            if (!leaf)
                return false;
            unode *top = leaf;
            for (size_t j = op->n - 1; j > i; j--) {
                unode *wrap = node_new(op->comps[j - 1], BSON_TYPE_DOCUMENT);
                node_append(wrap, top);
                top = wrap;
            }
            if (node->type == BSON_TYPE_ARRAY) {
                while (node->n < idx)
                    node_append(node, node_new("", BSON_TYPE_NULL));
            }
            node_append(node, top);
            log_created(c, op->comps, i, op->n, is_arr, top, leaf);
            return true;
        }

        if (!last) {
            node = child;
            node_key = comp;
            continue;
        }
        return apply_existing(c, op, node, slot, child, is_arr, err);
    }
    return true;
}

/* ---- parsing ----------------------------------------------------------------------------------------------- */

/* Splits path into components (*buf holds them, *comps points in), with the server's checks (fieldchecker::
 * isUpdatable: no empty component). *buf and *comps are set even on failure, for the caller to free. */
static bool split_path(const char *path, char **buf, char ***comps, size_t *n, bson_error_t *err)
{
    size_t ncomp = 1;
    for (const char *p = path; *p; p++)
        ncomp += *p == '.';
    *buf = bson_strdup(path);
    *comps = bson_malloc0(ncomp * sizeof **comps);
    *n = 0;
    char *save = *buf;
    for (size_t k = 0; k < ncomp; k++) {
        char *dot = strchr(save, '.');
        if (dot)
            *dot = '\0';
        (*comps)[k] = save;
        *n = k + 1;
        save = dot ? dot + 1 : save + strlen(save);
        if (!(*comps)[k][0]) {
            bson_set_error(err, 0, 56, "The update path '%s' contains an empty field name, which is not allowed.",
                           path);
            return false;
        }
        if ((*comps)[k][0] == '$') {
            bson_set_error(err, 0, 2,
                           "mongosim does not implement positional or $-prefixed path component '%s' in '%s'",
                           (*comps)[k], path);
            return false;
        }
    }
    if (ncomp > UPD_MAX_DEPTH) {
        bson_set_error(err, 0, 2, "update path '%s' is too deep", path);
        return false;
    }
    return true;
}

/* PushNode::init (push_node.cpp): a document holding $each anywhere is a set of clauses ($each, $slice, $sort,
 * $position, each at most once); anything else is the one value to push. */
static bool parse_push(upd_op *op, bson_error_t *err)
{
    static const char *const clauses[] = {"$each", "$slice", "$sort", "$position"};
    bson_iter_t it;
    op->slice = LLONG_MAX;
    op->position = LLONG_MAX;
    if (!BSON_ITER_HOLDS_DOCUMENT(&op->val) || !bson_iter_recurse(&op->val, &it))
        return true;
    if (!bson_iter_find(&it, "$each")) {
        if (bson_iter_recurse(&op->val, &it) && bson_iter_next(&it) && bson_iter_key(&it)[0] == '$') {
            bson_set_error(err, 0, 2, "$push with modifiers requires $each");
            return false;
        }
        return true;
    }
    bool seen[4] = {false, false, false, false};
    struct {
        bson_iter_t it; /* wrapped: an array of bare bson_iter_t is refused (its alignment exceeds its size) */
    } clause[4];
    bson_iter_recurse(&op->val, &it);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        size_t c = 0;
        while (c < 4 && strcmp(k, clauses[c]) != 0)
            c++;
        if (c == 4) {
            bson_set_error(err, 0, 2, "Unrecognized clause in $push: %s", k);
            return false;
        }
        if (seen[c]) {
            bson_set_error(err, 0, 2, "Only one %s is supported.", k);
            return false;
        }
        seen[c] = true;
        clause[c].it = it;
    }
    if (!BSON_ITER_HOLDS_ARRAY(&clause[0].it)) {
        bson_set_error(err, 0, 2, "The argument to $each in $push must be an array but it was of type: %s",
                       sim_type_name(bson_iter_type(&clause[0].it)));
        return false;
    }
    op->has_each = true;
    op->each = clause[0].it;
    if (seen[1] && !iter_to_ll(&clause[1].it, &op->slice)) {
        bson_set_error(err, 0, 2, "The value for $slice must be an integer value but was given type: %s",
                       sim_type_name(bson_iter_type(&clause[1].it)));
        return false;
    }
    if (seen[2]) {
        bson_iter_t *s = &clause[2].it;
        if (BSON_ITER_HOLDS_DOCUMENT(s)) {
            /* checkSortClause */
            bson_iter_t p;
            bool any = false;
            uint32_t len;
            if (bson_iter_recurse(s, &p))
                while (bson_iter_next(&p)) {
                    const char *f = bson_iter_key(&p);
                    long double dir = is_number(bson_iter_type(&p)) ? iter_number(&p) : 0;
                    any = true;
                    if (dir != 1 && dir != -1) {
                        bson_set_error(err, 0, 2, "The $sort element value must be either 1 or -1");
                        return false;
                    }
                    if (!*f) {
                        bson_set_error(err, 0, 2, "The $sort field cannot be empty");
                        return false;
                    }
                    if (f[0] == '.' || f[strlen(f) - 1] == '.' || strstr(f, "..")) {
                        bson_set_error(err, 0, 2, "The $sort field is a dotted field but has an empty part: %s", f);
                        return false;
                    }
                }
            if (!any) {
                bson_set_error(err, 0, 2, "The $sort pattern is empty when it should be a set of fields.");
                return false;
            }
            bson_iter_document(s, &len, &op->sort_pat);
            op->sort_pat_len = len;
            op->sort = 2;
        } else if (is_number(bson_iter_type(s))) {
            long double dir = iter_number(s);
            if (dir != 1 && dir != -1) {
                bson_set_error(err, 0, 2, "The $sort element value must be either 1 or -1");
                return false;
            }
            op->sort = dir < 0 ? -1 : 1;
        } else {
            bson_set_error(err, 0, 2,
                           "The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to sort "
                           "embedded fields");
            return false;
        }
    }
    if (seen[3] && !iter_to_ll(&clause[3].it, &op->position)) {
        bson_set_error(err, 0, 2, "The value for $position must be an integer value, not of type: %s",
                       sim_type_name(bson_iter_type(&clause[3].it)));
        return false;
    }
    return true;
}

/* Each modifier's init(): the checks the server makes on the operand before looking at any document. */
static bool parse_arg(upd_op *op, bson_error_t *err)
{
    bson_iter_t *v = &op->val;
    switch (op->kind) {
    case OP_INC:
    case OP_MUL:
        /* ArithmeticNode::init: TypeMismatch */
        if (!is_number(bson_iter_type(v))) {
            char *js = field_json(op->path, v);
            bson_set_error(err, 0, 14, "Cannot %s with non-numeric argument: %s",
                           op->kind == OP_INC ? "increment" : "multiply", js);
            bson_free(js);
            return false;
        }
        return true;
    case OP_PUSH:
        return parse_push(op, err);
    case OP_ADD_TO_SET: {
        /* AddToSetNode::init: an object whose first field is $each holds the values. */
        bson_iter_t f;
        if (BSON_ITER_HOLDS_DOCUMENT(v) && bson_iter_recurse(v, &f) && bson_iter_next(&f) &&
            strcmp(bson_iter_key(&f), "$each") == 0) {
            if (!BSON_ITER_HOLDS_ARRAY(&f)) {
                bson_set_error(err, 0, 14, "The argument to $each in $addToSet must be an array but it was of type %s",
                               sim_type_name(bson_iter_type(&f)));
                return false;
            }
            bson_iter_t more = f;
            if (bson_iter_next(&more)) {
                char *js = field_json(op->path, v);
                bson_set_error(err, 0, 2, "Found unexpected fields after $each in $addToSet: %s", js);
                bson_free(js);
                return false;
            }
            op->has_each = true;
            op->each = f;
        }
        return true;
    }
    case OP_POP: {
        /* PopNode::init: parseIntegerElementToLong, then 1 or -1; FailedToParse. */
        long long x;
        if (!iter_to_ll(v, &x)) {
            char *js = field_json(op->path, v);
            bson_set_error(err, 0, 9, "Expected an integer: %s", js);
            bson_free(js);
            return false;
        }
        if (x != 1 && x != -1) {
            bson_set_error(err, 0, 9, "$pop expects 1 or -1, found: %lld", x);
            return false;
        }
        op->pop_front = x == -1;
        return true;
    }
    case OP_PULL:
        return check_pull_cond(op, err);
    case OP_PULL_ALL:
        /* PullAllNode::init */
        if (!BSON_ITER_HOLDS_ARRAY(v)) {
            bson_set_error(err, 0, 2, "$pullAll requires an array argument but was given a %s",
                           sim_type_name(bson_iter_type(v)));
            return false;
        }
        return true;
    case OP_CURRENT_DATE: {
        /* CurrentDateNode::init: a boolean (any value) means a date; {$type: "date" | "timestamp"}. */
        bson_iter_t f;
        bool found = false;
        if (BSON_ITER_HOLDS_BOOL(v)) {
            op->date = true;
            return true;
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(v)) {
            bson_set_error(err, 0, 2,
                           "%s is not valid type for $currentDate. Please use a boolean ('true') or a $type "
                           "expression ({$type: 'timestamp/date'}).",
                           sim_type_name(bson_iter_type(v)));
            return false;
        }
        if (bson_iter_recurse(v, &f))
            while (bson_iter_next(&f)) {
                if (strcmp(bson_iter_key(&f), "$type") != 0) {
                    bson_set_error(err, 0, 2, "Unrecognized $currentDate option: %s", bson_iter_key(&f));
                    return false;
                }
                const char *s = BSON_ITER_HOLDS_UTF8(&f) ? bson_iter_utf8(&f, NULL) : "";
                if (strcmp(s, "date") == 0 || strcmp(s, "timestamp") == 0) {
                    op->date = s[0] == 'd';
                    found = true;
                }
            }
        if (!found) {
            bson_set_error(err, 0, 2,
                           "The '$type' string field is required to be 'date' or 'timestamp': {$currentDate: "
                           "{field : {$type: 'date'}}}");
            return false;
        }
        return true;
    }
    default:
        return true;
    }
}

/* A new zeroed op at the end of *ops (grown as needed); NULL when out of memory. */
static upd_op *ops_add(upd_op **ops, size_t *n, size_t *cap)
{
    if (*n == *cap) {
        /* upd_op holds bson_iter_t, which must be 128-byte aligned: no plain realloc. */
        size_t ncap = *cap ? *cap * 2 : 8;
        upd_op *grown = aligned_alloc(BSON_ALIGNOF(upd_op), ncap * sizeof **ops);
        if (!grown)
            return NULL;
        if (*n)
            memcpy(grown, *ops, *n * sizeof **ops);
        free(*ops);
        *ops = grown;
        *cap = ncap;
    }
    upd_op *op = &(*ops)[(*n)++];
    memset(op, 0, sizeof *op);
    return op;
}

static bool path_is_prefix(char **a, size_t an, char **b, size_t bn)
{
    if (an > bn)
        return false;
    for (size_t k = 0; k < an; k++)
        if (strcmp(a[k], b[k]) != 0)
            return false;
    return true;
}

/* Parse the modifier document into ops (UpdateObjectNode::parseAndMerge); validates arguments and paths. */
static bool parse_ops(const bson_t *u, upd_op **out, size_t *out_n, bson_error_t *err)
{
    static const struct {
        const char *name;
        opkind kind;
    } modifiers[] = {{"$set", OP_SET},
                     {"$setOnInsert", OP_SET_ON_INSERT},
                     {"$unset", OP_UNSET},
                     {"$inc", OP_INC},
                     {"$mul", OP_MUL},
                     {"$min", OP_MIN},
                     {"$max", OP_MAX},
                     {"$push", OP_PUSH},
                     {"$addToSet", OP_ADD_TO_SET},
                     {"$pop", OP_POP},
                     {"$pull", OP_PULL},
                     {"$pullAll", OP_PULL_ALL},
                     {"$currentDate", OP_CURRENT_DATE},
                     {"$rename", OP_RENAME}};
    upd_op *ops = NULL;
    size_t n = 0, cap = 0;
    bson_iter_t top;
    if (!bson_iter_init(&top, u))
        goto bad_doc;
    while (bson_iter_next(&top)) {
        const char *name = bson_iter_key(&top);
        size_t m = 0;
        while (m < sizeof modifiers / sizeof modifiers[0] && strcmp(name, modifiers[m].name) != 0)
            m++;
        if (m == sizeof modifiers / sizeof modifiers[0]) {
            if (strcmp(name, "$bit") == 0)
                bson_set_error(err, 0, 2, "mongosim does not implement the %s update operator", name);
            else
                bson_set_error(err, 0, 9,
                               "Unknown modifier: %s. Expected a valid update modifier or pipeline-style update "
                               "specified as an array",
                               name);
            goto fail;
        }
        opkind kind = modifiers[m].kind;
        if (!BSON_ITER_HOLDS_DOCUMENT(&top)) {
            bson_set_error(err, 0, 9,
                           "Modifiers operate on fields but we found type %s instead. For example: {$mod: "
                           "{<field>: ...}} not {%s: ...}",
                           sim_type_name(bson_iter_type(&top)), name);
            goto fail;
        }
        bson_iter_t f;
        if (!bson_iter_recurse(&top, &f))
            goto bad_doc;
        bool any = false;
        while (bson_iter_next(&f)) {
            any = true;
            const char *path = bson_iter_key(&f);
            upd_op *op = ops_add(&ops, &n, &cap);
            if (!op) {
                bson_set_error(err, 0, 1, "out of memory");
                goto fail;
            }
            op->kind = kind;
            op->val = f;
            op->path = (char *)path;
            if (!split_path(path, &op->buf, &op->comps, &op->n, err))
                goto fail;
            if (kind == OP_RENAME) {
                /* parseAndMerge puts a ConflictPlaceholderNode at the source and the RenameNode at the
                 * destination, which must be a string. */
                op->kind = OP_RENAME_SOURCE;
                if (!BSON_ITER_HOLDS_UTF8(&f)) {
                    char *js = field_json(path, &f);
                    bson_set_error(err, 0, 2, "The 'to' field for $rename must be a string: %s", js);
                    bson_free(js);
                    goto fail;
                }
                uint32_t len;
                const char *to = bson_iter_utf8(&f, &len);
                if (strlen(to) != len) {
                    bson_set_error(err, 0, 2, "The 'to' field for $rename cannot contain an embedded null byte");
                    goto fail;
                }
                upd_op *rn = ops_add(&ops, &n, &cap);
                if (!rn) {
                    bson_set_error(err, 0, 1, "out of memory");
                    goto fail;
                }
                upd_op *src = &ops[n - 2];
                rn->kind = OP_RENAME;
                rn->val = f;
                rn->path = (char *)to;
                rn->src_path = src->path;
                if (!split_path(to, &rn->buf, &rn->comps, &rn->n, err) ||
                    !split_path(path, &rn->src_buf, &rn->src_comps, &rn->src_n, err))
                    goto fail;
                /* RenameNode::init */
                if (path_is_prefix(rn->comps, rn->n, rn->src_comps, rn->src_n) ||
                    path_is_prefix(rn->src_comps, rn->src_n, rn->comps, rn->n)) {
                    char *js = field_json(path, &f);
                    bson_set_error(err, 0, 2, "%s: %s",
                                   rn->n == rn->src_n ? "The source and target field for $rename must differ"
                                                      : "The source and target field for $rename must not be on "
                                                        "the same path",
                                   js);
                    bson_free(js);
                    goto fail;
                }
                continue;
            }
            if (!parse_arg(op, err))
                goto fail;
        }
        if (!any) {
            bson_set_error(err, 0, 9, "'%s' is empty. You must specify a field like so: {%s: {<field>: ...}}", name,
                           name);
            goto fail;
        }
    }
    qsort(ops, n, sizeof *ops, cmp_ops);
    for (size_t i = 1; i < n; i++) {
        const upd_op *a = &ops[i - 1], *b = &ops[i];
        if (path_is_prefix(a->comps, a->n, b->comps, b->n)) {
            bson_set_error(err, 0, 40, "Updating the path '%s' would create a conflict at '%s'", b->path, a->path);
            goto fail;
        }
    }
    *out = ops;
    *out_n = n;
    return true;
bad_doc:
    bson_set_error(err, 0, 9, "malformed update document");
fail:
    ops_free(ops, n);
    return false;
}

bool update_is_modifier(const bson_t *u)
{
    bson_iter_t it;
    return bson_iter_init(&it, u) && bson_iter_next(&it) && bson_iter_key(&it)[0] == '$';
}

static bool apply_replacement(const bson_t *doc, const bson_t *u, bson_t *new_doc, bson_t *o, bool *changed,
                              bson_error_t *err)
{
    bson_iter_t old_id, new_id, it;
    bool has_old = bson_iter_init_find(&old_id, doc, "_id");
    bool has_new = bson_iter_init_find(&new_id, u, "_id");
    if (has_old && has_new && update_compare_iters(&old_id, &new_id) != 0) {
        bson_t tmp = BSON_INITIALIZER;
        bson_append_iter(&tmp, "_id", 3, &new_id);
        char *js = bson_as_relaxed_extended_json(&tmp, NULL);
        bson_set_error(err, 0, 66,
                       "After applying the update, the (immutable) field '_id' was found to have been "
                       "altered to %s",
                       js);
        bson_free(js);
        bson_destroy(&tmp);
        return false;
    }
    bson_init(new_doc);
    if (has_old)
        bson_append_iter(new_doc, "_id", 3, &old_id);
    else if (has_new)
        bson_append_iter(new_doc, "_id", 3, &new_id);
    if (bson_iter_init(&it, u))
        while (bson_iter_next(&it))
            if (strcmp(bson_iter_key(&it), "_id") != 0)
                bson_append_iter(new_doc, NULL, 0, &it);
    if (new_doc->len > UPD_MAX_DOC_SIZE) {
        bson_set_error(err, 0, 17419, "Resulting document after update is larger than %d", UPD_MAX_DOC_SIZE);
        bson_destroy(new_doc);
        return false;
    }
    *changed = !(new_doc->len == doc->len && memcmp(bson_get_data(new_doc), bson_get_data(doc), doc->len) == 0);
    if (*changed)
        bson_copy_to(new_doc, o);
    else
        bson_destroy(new_doc);
    return true;
}

bool update_apply(const bson_t *doc, const bson_t *u, sim_oplog_format format, bool inserting, bson_t *new_doc,
                  bson_t *o, bool *changed, bson_error_t *err)
{
    *changed = false;
    if (!update_is_modifier(u))
        return apply_replacement(doc, u, new_doc, o, changed, err);

    upd_op *ops = NULL;
    size_t nops = 0;
    unode *root = NULL;
    uctx c;
    memset(&c, 0, sizeof c);
    c.fmt = format;
    c.inserting = inserting;
    c.orig = doc;
    if (!parse_ops(u, &ops, &nops, err))
        return false;

    bson_iter_t it;
    root = node_new("", BSON_TYPE_DOCUMENT);
    if (bson_iter_init(&it, doc))
        node_fill(root, &it);
    for (size_t i = 0; i < nops; i++)
        if (!apply_op(&c, root, &ops[i], err))
            goto fail;

    if (c.changes) {
        /* _id is immutable: it must still be there, with the same type and bytes. */
        bson_iter_t old_id;
        size_t slot;
        unode *id = node_find(root, "_id", &slot);
        if (bson_iter_init_find(&old_id, doc, "_id") && (!id || !node_equals_iter(id, &old_id))) {
            bson_set_error(err, 0, 66, "Performing an update on the path '_id' would modify the immutable field '_id'");
            goto fail;
        }
        bson_init(new_doc);
        for (size_t i = 0; i < root->n; i++)
            node_append_to(new_doc, root->kids[i]->key, root->kids[i]);
        if (new_doc->len > UPD_MAX_DOC_SIZE) {
            bson_destroy(new_doc);
            bson_set_error(err, 0, 17419, "Resulting document after update is larger than %d", UPD_MAX_DOC_SIZE);
            goto fail;
        }
        bson_init(o);
        if (format == SIM_FORMAT_44) {
            v1_serialize(&c, o);
        } else {
            bson_t diff;
            BSON_APPEND_INT32(o, "$v", 2);
            bson_append_document_begin(o, "diff", 4, &diff);
            diff_serialize(&c.diff, &diff);
            bson_append_document_end(o, &diff);
        }
        *changed = true;
    }
    dnode_clear(&c.diff);
    for (size_t i = 0; i < c.v1n; i++)
        bson_free(c.v1[i].path);
    free(c.v1);
    node_free(root);
    ops_free(ops, nops);
    return true;
fail:
    dnode_clear(&c.diff);
    for (size_t i = 0; i < c.v1n; i++)
        bson_free(c.v1[i].path);
    free(c.v1);
    node_free(root);
    ops_free(ops, nops);
    return false;
}

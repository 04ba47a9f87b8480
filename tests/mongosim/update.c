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
 *     the serialised value is the final one. `$push` appending to an existing array logs `u<idx>` per new element;
 *     `$unset` of an array element sets it to null and logs `u<idx>: null`. Sections are written d, u, i, s...;
 *     array entries in ascending index order.
 *   - 4.4 (V1LogBuilder): `$set` of each changed path with its final value (created paths are logged as the full
 *     dotted path with the leaf value; `$push` onto an existing array as `path.N` per new element), `$unset: {path:
 *     true}`; the two sections appear in the order they were first used, after `$v: 1`.
 * A replacement logs the whole new document in both formats.
 */
#include "update.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        return 100;
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

typedef enum { OP_SET, OP_SET_ON_INSERT, OP_UNSET, OP_INC, OP_PUSH } opkind;

typedef struct {
    opkind kind;
    char *path;
    char *buf; /* path copy split into comps */
    char **comps;
    size_t n;
    bson_iter_t val;
} upd_op;

static void ops_free(upd_op *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(ops[i].comps);
        free(ops[i].buf);
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

static const char *type_name(bson_type_t t)
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

/* The value an operation creates when its path does not exist yet (caller frees). */
static unode *op_new_value(const upd_op *op, const char *key)
{
    if (op->kind == OP_PUSH) {
        unode *arr = node_new(key, BSON_TYPE_ARRAY);
        bson_iter_t it;
        if (bson_iter_type(&op->val) == BSON_TYPE_DOCUMENT && bson_iter_recurse(&op->val, &it) &&
            bson_iter_find(&it, "$each")) {
            bson_iter_t each;
            if (bson_iter_recurse(&it, &each))
                node_fill(arr, &each);
        } else {
            node_append(arr, node_from_iter("", &op->val));
        }
        return arr;
    }
    return node_from_iter(key, &op->val);
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

static bool apply_op(uctx *c, unode *root, upd_op *op, bson_error_t *err)
{
    bool is_arr[UPD_MAX_DEPTH + 2];
    unode *node = root;
    const char *node_key = "";
    if (op->kind == OP_SET_ON_INSERT && !c->inserting)
        return true;
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
                return op->kind == OP_UNSET ? true : not_viable(op, i, node, node_key, err);
            if (idx < node->n) {
                child = node->kids[idx];
                slot = idx;
            }
        } else {
            return op->kind == OP_UNSET ? true : not_viable(op, i, node, node_key, err);
        }

        if (!child) {
            if (op->kind == OP_UNSET)
                return true;
            /* Create comps[i..n-1]: intermediate objects, then the value. */
            if (node->type == BSON_TYPE_ARRAY && idx > node->n + UPD_MAX_BACKFILL) {
                bson_set_error(err, 0, 2, "can't backfill array to larger than %d elements", UPD_MAX_BACKFILL);
                return false;
            }
            unode *leaf = op_new_value(op, op->comps[op->n - 1]);
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

        /* The path exists: change the value in place. */
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
            node_free(child);
            memmove(&node->kids[slot], &node->kids[slot + 1], (node->n - slot - 1) * sizeof *node->kids);
            node->n--;
            log_deleted(c, op->comps, op->n, is_arr);
            return true;
        case OP_INC: {
            if (!is_number(child->type)) {
                char *id = id_json(c->orig);
                bson_set_error(err, 0, 14,
                               "Cannot apply $inc to a value of non-numeric type. %s has the field '%s' of "
                               "non-numeric type %s",
                               id, comp, type_name(child->type));
                bson_free(id);
                return false;
            }
            bson_value_t res;
            if (!inc_compute(c, &child->val, bson_iter_value(&op->val), &res, err))
                return false;
            unode *nd = node_new(comp, res.value_type);
            nd->val = res;
            bson_t a = BSON_INITIALIZER;
            bson_iter_t ait;
            node_append_to(&a, "", nd);
            bool same = bson_iter_init(&ait, &a) && bson_iter_next(&ait) && node_equals_iter(child, &ait);
            bson_destroy(&a);
            if (same) {
                node_free(nd);
                return true;
            }
            node_replace(node, slot, nd);
            log_updated(c, op->comps, op->n, is_arr, nd);
            return true;
        }
        case OP_PUSH: {
            if (child->type != BSON_TYPE_ARRAY) {
                char *id = id_json(c->orig);
                bson_set_error(err, 0, 2, "The field '%s' must be an array but is of type %s in document %s", comp,
                               type_name(child->type), id);
                bson_free(id);
                return false;
            }
            unode *vals = op_new_value(op, comp);
            size_t first = child->n;
            for (size_t k = 0; k < vals->n; k++)
                node_append(child, vals->kids[k]);
            vals->n = 0;
            node_free(vals);
            if (child->n > first)
                log_pushed(c, op->comps, op->n, is_arr, child, first);
            return true;
        }
        }
    }
    return true;
}

/* Parse the modifier document into ops; validates arguments and paths. */
static bool parse_ops(const bson_t *u, upd_op **out, size_t *out_n, bson_error_t *err)
{
    upd_op *ops = NULL;
    size_t n = 0, cap = 0;
    bson_iter_t top;
    if (!bson_iter_init(&top, u))
        goto bad_doc;
    while (bson_iter_next(&top)) {
        const char *name = bson_iter_key(&top);
        opkind kind;
        if (strcmp(name, "$set") == 0)
            kind = OP_SET;
        else if (strcmp(name, "$setOnInsert") == 0)
            kind = OP_SET_ON_INSERT;
        else if (strcmp(name, "$unset") == 0)
            kind = OP_UNSET;
        else if (strcmp(name, "$inc") == 0)
            kind = OP_INC;
        else if (strcmp(name, "$push") == 0)
            kind = OP_PUSH;
        else if (name[0] == '$' &&
                 (strcmp(name, "$min") == 0 || strcmp(name, "$max") == 0 || strcmp(name, "$mul") == 0 ||
                  strcmp(name, "$rename") == 0 || strcmp(name, "$addToSet") == 0 || strcmp(name, "$pop") == 0 ||
                  strcmp(name, "$pull") == 0 || strcmp(name, "$pullAll") == 0 || strcmp(name, "$currentDate") == 0 ||
                  strcmp(name, "$bit") == 0)) {
            bson_set_error(err, 0, 2, "mongosim does not implement the %s update operator", name);
            goto fail;
        } else {
            bson_set_error(err, 0, 9,
                           "Unknown modifier: %s. Expected a valid update modifier or pipeline-style update "
                           "specified as an array",
                           name);
            goto fail;
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(&top)) {
            bson_set_error(err, 0, 9,
                           "Modifiers operate on fields but we found type %s instead. For example: {$mod: "
                           "{<field>: ...}} not {%s: ...}",
                           type_name(bson_iter_type(&top)), name);
            goto fail;
        }
        bson_iter_t f;
        if (!bson_iter_recurse(&top, &f))
            goto bad_doc;
        bool any = false;
        while (bson_iter_next(&f)) {
            any = true;
            const char *path = bson_iter_key(&f);
            if (kind == OP_INC && !is_number(bson_iter_type(&f))) {
                bson_t tmp = BSON_INITIALIZER;
                bson_append_iter(&tmp, path, -1, &f);
                char *js = bson_as_relaxed_extended_json(&tmp, NULL);
                bson_set_error(err, 0, 14, "Cannot increment with non-numeric argument: %s", js);
                bson_free(js);
                bson_destroy(&tmp);
                goto fail;
            }
            if (kind == OP_PUSH && BSON_ITER_HOLDS_DOCUMENT(&f)) {
                bson_iter_t m;
                if (bson_iter_recurse(&f, &m) && bson_iter_next(&m) && bson_iter_key(&m)[0] == '$') {
                    do {
                        const char *mk = bson_iter_key(&m);
                        if (strcmp(mk, "$each") == 0) {
                            if (!BSON_ITER_HOLDS_ARRAY(&m)) {
                                bson_set_error(err, 0, 2,
                                               "The argument to $each in $push must be an array but it was of "
                                               "type: %s",
                                               type_name(bson_iter_type(&m)));
                                goto fail;
                            }
                        } else if (strcmp(mk, "$slice") == 0 || strcmp(mk, "$sort") == 0 ||
                                   strcmp(mk, "$position") == 0) {
                            bson_set_error(err, 0, 2, "mongosim does not implement %s in $push", mk);
                            goto fail;
                        } else {
                            bson_set_error(err, 0, 2, "Unrecognized clause in $push: %s", mk);
                            goto fail;
                        }
                    } while (bson_iter_next(&m));
                    bson_iter_t chk;
                    if (!bson_iter_recurse(&f, &chk) || !bson_iter_find(&chk, "$each")) {
                        bson_set_error(err, 0, 2, "$push with modifiers requires $each");
                        goto fail;
                    }
                }
            }
            if (n == cap) {
                /* upd_op holds a bson_iter_t, which must be 128-byte aligned: no plain realloc. */
                size_t ncap = cap ? cap * 2 : 8;
                upd_op *grown = aligned_alloc(BSON_ALIGNOF(upd_op), ncap * sizeof *ops);
                if (!grown) {
                    bson_set_error(err, 0, 1, "out of memory");
                    goto fail;
                }
                if (n)
                    memcpy(grown, ops, n * sizeof *ops);
                free(ops);
                ops = grown;
                cap = ncap;
            }
            upd_op *op = &ops[n++];
            memset(op, 0, sizeof *op);
            op->kind = kind;
            op->val = f;
            op->path = (char *)path;
            op->buf = bson_strdup(path);
            size_t ncomp = 1;
            for (const char *p = path; *p; p++)
                ncomp += *p == '.';
            op->comps = bson_malloc0(ncomp * sizeof *op->comps);
            char *save = op->buf;
            for (size_t k = 0; k < ncomp; k++) {
                char *dot = strchr(save, '.');
                if (dot)
                    *dot = '\0';
                op->comps[k] = save;
                op->n = k + 1;
                save = dot ? dot + 1 : save + strlen(save);
                if (!op->comps[k][0]) {
                    bson_set_error(err, 0, 56,
                                   "The update path '%s' contains an empty field name, which is not allowed.", path);
                    goto fail;
                }
                if (op->comps[k][0] == '$') {
                    bson_set_error(err, 0, 2,
                                   "mongosim does not implement positional or $-prefixed path component '%s' in '%s'",
                                   op->comps[k], path);
                    goto fail;
                }
            }
            if (ncomp > UPD_MAX_DEPTH) {
                bson_set_error(err, 0, 2, "update path '%s' is too deep", path);
                goto fail;
            }
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
        bool prefix = a->n <= b->n;
        for (size_t k = 0; prefix && k < a->n; k++)
            prefix = strcmp(a->comps[k], b->comps[k]) == 0;
        if (prefix) {
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

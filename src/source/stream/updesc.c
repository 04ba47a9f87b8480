/*
 * updesc.c — a change event's updateDescription turned back into the $v:2 diff it was made from (see
 * source/stream/event.h, "Updates from updateDescription").
 *
 * NOTES
 * - The paths are read into a tree, one node per path segment: a node is an object diff when its children are field
 *   names, an array diff when they are array indexes; a leaf is a field given a value (updatedFields), removed
 *   (removedFields), and an array node may carry a new length (truncatedArrays). The tree is then written as the
 *   server's diff format (source/v2diff.h): per object level d, then u, then the sub-diffs s<name>; per array level
 *   a, l, then u<N>/s<N> in index order. Every value is appended from the event as it is, never re-encoded.
 * - Which segments are array indexes: disambiguatedPaths when it lists the path (its integers), else the rule of
 *   change_stream_document_diff_parser.cpp (mongodb/mongo, DeltaUpdateDescriptionBuilder::_appendFieldToPath): a path
 *   gets an entry there as soon as a segment holds a dot, or a segment after the first is a numeric field name
 *   (FieldRef::isNumericPathComponentStrict: digits only, no leading zero); so in a path without an entry the dots
 *   split fields and a numeric segment after the first is an array index. A server that disambiguates sends the
 *   field even when nothing is ambiguous (`disambiguatedPaths: {}` in the expected events of mongodb/mongo's
 *   jstests/change_streams/show_expanded_events.js and its updateDescription test), so its absence means a server
 *   that cannot: a path with a dot is then refused as ambiguous (STREAM_EV_AMBIGUOUS), never guessed.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/stream/event.h"

#define PLEN(n) ((int)((n) > 300 ? 300 : (n)))

typedef struct seg {
    const char *s; /* field name (not NUL-terminated) */
    size_t len;
    bool index;
    uint32_t idx;
} seg;

typedef struct node {
    const char *name;
    size_t len;
    bool index;
    uint32_t idx;
    int kind; /* 0 leaf or unknown, 1 object diff, 2 array diff */
    int parent, first, last, next;
    bool has_val, removed, truncated;
    int32_t new_size;
    bson_iter_t val;
} node;

typedef struct tree {
    node *n;
    size_t len, cap;
    char *err;
    size_t errlen;
} tree;

enum { KIND_LEAF = 0, KIND_OBJ = 1, KIND_ARR = 2 };

static stream_ev_status bad(tree *t, stream_ev_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Writes the message (paths are cut at 300 bytes by the callers' %.*s) and returns st. */
static stream_ev_status bad(tree *t, stream_ev_status st, const char *fmt, ...)
{
    if (t->err && t->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(t->err, t->errlen, fmt, ap);
        va_end(ap);
    }
    return st;
}

static int add_node(tree *t, int parent, const seg *s)
{
    if (t->len == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        node *n = realloc(t->n, cap * sizeof *n);
        if (!n)
            return -1;
        t->n = n;
        t->cap = cap;
    }
    int i = (int)t->len++;
    node *n = &t->n[i];
    memset(n, 0, sizeof *n);
    n->name = s ? s->s : NULL;
    n->len = s ? s->len : 0;
    n->index = s ? s->index : false;
    n->idx = s ? s->idx : 0;
    n->parent = parent;
    n->first = n->last = n->next = -1;
    if (parent >= 0) {
        node *p = &t->n[parent];
        if (p->last >= 0)
            t->n[p->last].next = i;
        else
            p->first = i;
        p->last = i;
    }
    return i;
}

static bool same_seg(const node *n, const seg *s)
{
    if (n->index != s->index)
        return false;
    return s->index ? n->idx == s->idx : n->len == s->len && memcmp(n->name, s->s, s->len) == 0;
}

/* The node of a path (created as needed); -1 with err set when the path does not fit the tree, -2 on OOM. */
static int walk(tree *t, const seg *segs, size_t nseg, const char *path, size_t plen)
{
    int cur = 0;
    for (size_t k = 0; k < nseg; k++) {
        node *p = &t->n[cur];
        int want = segs[k].index ? KIND_ARR : KIND_OBJ;
        if (p->has_val || p->removed || (p->kind != KIND_LEAF && p->kind != want) || (cur == 0 && segs[k].index)) {
            bad(t, STREAM_EV_MALFORMED, "updateDescription: the path '%.*s' crosses another change of the same update",
                PLEN(plen), path);
            return -1;
        }
        p->kind = want;
        int found = -1;
        for (int c = p->first; c >= 0; c = t->n[c].next)
            if (same_seg(&t->n[c], &segs[k])) {
                found = c;
                break;
            }
        if (found < 0) {
            found = add_node(t, cur, &segs[k]);
            if (found < 0)
                return -2;
        }
        cur = found;
    }
    return cur;
}

/* FieldRef::isNumericPathComponentStrict: digits only, no leading zero (but "0"), and small enough for an index. */
static bool numeric_strict(const char *s, size_t len, uint32_t *out)
{
    if (len == 0 || len > 9 || (len > 1 && s[0] == '0'))
        return false;
    uint32_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint32_t)(s[i] - '0');
    }
    *out = v;
    return true;
}

typedef struct segs {
    seg *v;
    size_t n, cap;
} segs;

static bool push_seg(segs *s, seg x)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        seg *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return false;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
    return true;
}

/* Splits a path into segments: from its disambiguatedPaths entry when it has one, else at its dots. */
static stream_ev_status split_path(tree *t, const char *path, size_t plen, const bson_t *dis, bool have_dis, segs *out)
{
    bson_iter_t it, arr;
    out->n = 0;
    if (have_dis && bson_iter_init(&it, dis)) {
        /* The keys of disambiguatedPaths are the dotted paths: find this one (a key may hold any byte but NUL). */
        while (bson_iter_next(&it)) {
            if (bson_iter_key_len(&it) != plen || memcmp(bson_iter_key(&it), path, plen) != 0)
                continue;
            if (!BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &arr))
                return bad(t, STREAM_EV_MALFORMED, "updateDescription: disambiguatedPaths['%.*s'] is not an array",
                           PLEN(plen), path);
            while (bson_iter_next(&arr)) {
                seg s = {0};
                if (BSON_ITER_HOLDS_UTF8(&arr)) {
                    uint32_t l = 0;
                    s.s = bson_iter_utf8(&arr, &l);
                    s.len = l;
                } else if ((BSON_ITER_HOLDS_INT32(&arr) || BSON_ITER_HOLDS_INT64(&arr)) &&
                           bson_iter_as_int64(&arr) >= 0 && bson_iter_as_int64(&arr) <= INT32_MAX) {
                    s.index = true;
                    s.idx = (uint32_t)bson_iter_as_int64(&arr);
                } else {
                    return bad(t, STREAM_EV_MALFORMED,
                               "updateDescription: disambiguatedPaths['%.*s'] holds a segment that is neither a field "
                               "name nor an array index",
                               PLEN(plen), path);
                }
                if (!push_seg(out, s))
                    return STREAM_EV_NOMEM;
            }
            if (out->n == 0)
                return bad(t, STREAM_EV_MALFORMED, "updateDescription: disambiguatedPaths['%.*s'] is empty", PLEN(plen),
                           path);
            return STREAM_EV_OK;
        }
    }
    if (!have_dis && memchr(path, '.', plen) != NULL)
        return bad(t, STREAM_EV_AMBIGUOUS,
                   "updateDescription: the path '%.*s' may name nested fields, array elements or a field whose name "
                   "holds a dot, and the server gave no disambiguatedPaths to tell",
                   PLEN(plen), path);
    size_t start = 0;
    for (size_t i = 0; i <= plen; i++) {
        if (i < plen && path[i] != '.')
            continue;
        seg s = {.s = path + start, .len = i - start};
        if (s.len == 0)
            return bad(t, STREAM_EV_MALFORMED, "updateDescription: the path '%.*s' has an empty segment", PLEN(plen),
                       path);
        if (out->n > 0 && numeric_strict(s.s, s.len, &s.idx))
            s.index = true;
        if (!push_seg(out, s))
            return STREAM_EV_NOMEM;
        start = i + 1;
    }
    return STREAM_EV_OK;
}

static bool append_key(bson_t *out, char prefix, const char *name, size_t len, bson_t *child)
{
    char stack[128];
    char *k = len + 2 <= sizeof stack ? stack : malloc(len + 2);
    if (!k)
        return false;
    k[0] = prefix;
    memcpy(k + 1, name, len);
    k[len + 1] = '\0';
    bool ok = bson_append_document_begin(out, k, (int)(len + 1), child);
    if (k != stack)
        free(k);
    return ok;
}

static int cmp_idx(const void *a, const void *b, void *ctx)
{
    const node *n = ctx;
    uint32_t x = n[*(const int *)a].idx, y = n[*(const int *)b].idx;
    return x < y ? -1 : x > y;
}

static bool write_node(tree *t, int i, bson_t *out, int depth);

static bool write_sub(tree *t, int c, bson_t *out, int depth)
{
    node *n = &t->n[c];
    bson_t child;
    char num[16];
    bool ok;
    if (n->index) {
        int l = snprintf(num, sizeof num, "%u", n->idx);
        ok = append_key(out, 's', num, (size_t)l, &child);
    } else {
        ok = append_key(out, 's', n->name, n->len, &child);
    }
    return ok && write_node(t, c, &child, depth + 1) && bson_append_document_end(out, &child);
}

static bool write_node(tree *t, int i, bson_t *out, int depth)
{
    node *n = &t->n[i];
    if (depth > 200)
        return false;
    if (n->kind == KIND_ARR) {
        size_t cnt = 0;
        for (int c = n->first; c >= 0; c = t->n[c].next)
            cnt++;
        int *order = malloc((cnt ? cnt : 1) * sizeof *order);
        if (!order)
            return false;
        cnt = 0;
        for (int c = n->first; c >= 0; c = t->n[c].next)
            order[cnt++] = c;
        qsort_r(order, cnt, sizeof *order, cmp_idx, t->n);
        bool ok = BSON_APPEND_BOOL(out, "a", true);
        if (ok && n->truncated)
            ok = BSON_APPEND_INT32(out, "l", n->new_size);
        for (size_t k = 0; ok && k < cnt; k++) {
            node *c = &t->n[order[k]];
            if (c->has_val) {
                char key[16];
                int l = snprintf(key, sizeof key, "u%u", c->idx);
                ok = bson_append_iter(out, key, l, &c->val);
            } else {
                ok = write_sub(t, order[k], out, depth);
            }
        }
        free(order);
        return ok;
    }
    /* An object diff: d, u, then the sub-diffs. */
    bool any = false;
    bson_t sec;
    for (int c = n->first; c >= 0; c = t->n[c].next)
        any |= t->n[c].removed;
    if (any) {
        if (!BSON_APPEND_DOCUMENT_BEGIN(out, "d", &sec))
            return false;
        for (int c = n->first; c >= 0; c = t->n[c].next)
            if (t->n[c].removed && !bson_append_bool(&sec, t->n[c].name, (int)t->n[c].len, false))
                return false;
        if (!bson_append_document_end(out, &sec))
            return false;
    }
    any = false;
    for (int c = n->first; c >= 0; c = t->n[c].next)
        any |= t->n[c].has_val;
    if (any) {
        if (!BSON_APPEND_DOCUMENT_BEGIN(out, "u", &sec))
            return false;
        for (int c = n->first; c >= 0; c = t->n[c].next)
            if (t->n[c].has_val && !bson_append_iter(&sec, t->n[c].name, (int)t->n[c].len, &t->n[c].val))
                return false;
        if (!bson_append_document_end(out, &sec))
            return false;
    }
    for (int c = n->first; c >= 0; c = t->n[c].next)
        if (t->n[c].kind != KIND_LEAF && !write_sub(t, c, out, depth))
            return false;
    return true;
}

/* Reads one path into the tree; what: 'u' updated (val), 'd' removed, 'l' truncated to new_size. */
static stream_ev_status add_path(tree *t, const char *path, size_t plen, char what, const bson_iter_t *val,
                                 int32_t new_size, const bson_t *dis, bool have_dis, segs *sg)
{
    stream_ev_status st = split_path(t, path, plen, dis, have_dis, sg);
    if (st != STREAM_EV_OK)
        return st;
    int i = walk(t, sg->v, sg->n, path, plen);
    if (i == -2)
        return STREAM_EV_NOMEM;
    if (i < 0)
        return STREAM_EV_MALFORMED;
    node *n = &t->n[i];
    if (what == 'l') {
        if (n->has_val || n->removed || n->truncated || n->kind == KIND_OBJ)
            return bad(t, STREAM_EV_MALFORMED, "updateDescription: truncatedArrays names '%.*s', changed otherwise too",
                       PLEN(plen), path);
        n->kind = KIND_ARR;
        n->truncated = true;
        n->new_size = new_size;
        return STREAM_EV_OK;
    }
    if (n->has_val || n->removed || n->truncated || n->kind != KIND_LEAF)
        return bad(t, STREAM_EV_MALFORMED, "updateDescription: the path '%.*s' is changed twice", PLEN(plen), path);
    if (what == 'd' && n->index) {
        /* An array element among removedFields comes from a $v:1 `$unset` of it (a $v:2 diff never removes one), which
         * sets the element to null rather than removing it (the $unset manual page; update/unset_node.cpp): the diff
         * sets it to null. */
        static const uint8_t null_doc[] = {8, 0, 0, 0, 0x0A, 0, 0, 0}; /* {"": null} */
        if (!bson_iter_init_from_data(&n->val, null_doc, sizeof null_doc) || !bson_iter_next(&n->val))
            return bad(t, STREAM_EV_MALFORMED, "updateDescription: internal error reading null");
        n->has_val = true;
        return STREAM_EV_OK;
    }
    if (what == 'u') {
        n->has_val = true;
        n->val = *val;
    } else {
        n->removed = true;
    }
    return STREAM_EV_OK;
}

stream_ev_status stream_updesc_to_diff(const bson_t *updesc, bson_t *o, char *err, size_t errlen)
{
    tree t = {.err = err, .errlen = errlen};
    segs sg = {0};
    bson_iter_t it, sub, f;
    bson_t dis, updated, removed, truncated;
    bool have_dis = false, have_upd = false, have_rem = false, have_trunc = false;
    stream_ev_status st = STREAM_EV_OK;
    if (err && errlen)
        err[0] = '\0';

    if (!bson_iter_init(&it, updesc))
        return bad(&t, STREAM_EV_MALFORMED, "updateDescription is not valid BSON");
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        const uint8_t *d;
        uint32_t l;
        bson_t *dst = NULL;
        bool *flag = NULL;
        if (strcmp(k, "updatedFields") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            dst = &updated;
            flag = &have_upd;
        } else if (strcmp(k, "removedFields") == 0 && BSON_ITER_HOLDS_ARRAY(&it)) {
            dst = &removed;
            flag = &have_rem;
        } else if (strcmp(k, "truncatedArrays") == 0 && BSON_ITER_HOLDS_ARRAY(&it)) {
            dst = &truncated;
            flag = &have_trunc;
        } else if (strcmp(k, "disambiguatedPaths") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            dst = &dis;
            flag = &have_dis;
        } else if (strcmp(k, "updatedFields") == 0 || strcmp(k, "removedFields") == 0 ||
                   strcmp(k, "truncatedArrays") == 0 || strcmp(k, "disambiguatedPaths") == 0) {
            return bad(&t, STREAM_EV_MALFORMED, "updateDescription.%.*s has the wrong type", (int)strlen(k), k);
        }
        if (!dst)
            continue;
        if (BSON_ITER_HOLDS_DOCUMENT(&it))
            bson_iter_document(&it, &l, &d);
        else
            bson_iter_array(&it, &l, &d);
        if (!bson_init_static(dst, d, l))
            return bad(&t, STREAM_EV_MALFORMED, "updateDescription.%.*s is not valid BSON", (int)strlen(k), k);
        *flag = true;
    }

    if (add_node(&t, -1, NULL) < 0)
        return STREAM_EV_NOMEM;
    t.n[0].kind = KIND_OBJ;
    if (have_upd && bson_iter_init(&f, &updated)) {
        while (st == STREAM_EV_OK && bson_iter_next(&f))
            st = add_path(&t, bson_iter_key(&f), bson_iter_key_len(&f), 'u', &f, 0, &dis, have_dis, &sg);
    }
    if (st == STREAM_EV_OK && have_rem && bson_iter_init(&f, &removed)) {
        while (st == STREAM_EV_OK && bson_iter_next(&f)) {
            uint32_t l = 0;
            const char *p;
            if (!BSON_ITER_HOLDS_UTF8(&f)) {
                st = bad(&t, STREAM_EV_MALFORMED, "updateDescription.removedFields holds a non-string");
                break;
            }
            p = bson_iter_utf8(&f, &l);
            st = add_path(&t, p, l, 'd', NULL, 0, &dis, have_dis, &sg);
        }
    }
    if (st == STREAM_EV_OK && have_trunc && bson_iter_init(&f, &truncated)) {
        while (st == STREAM_EV_OK && bson_iter_next(&f)) {
            const char *p = NULL;
            uint32_t l = 0;
            int64_t size = -1;
            if (BSON_ITER_HOLDS_DOCUMENT(&f) && bson_iter_recurse(&f, &sub)) {
                while (bson_iter_next(&sub)) {
                    if (strcmp(bson_iter_key(&sub), "field") == 0 && BSON_ITER_HOLDS_UTF8(&sub))
                        p = bson_iter_utf8(&sub, &l);
                    else if (strcmp(bson_iter_key(&sub), "newSize") == 0 &&
                             (BSON_ITER_HOLDS_INT32(&sub) || BSON_ITER_HOLDS_INT64(&sub)))
                        size = bson_iter_as_int64(&sub);
                }
            }
            if (!p || size < 0 || size > INT32_MAX) {
                st = bad(&t, STREAM_EV_MALFORMED,
                         "updateDescription.truncatedArrays holds an entry without field and newSize");
                break;
            }
            st = add_path(&t, p, l, 'l', NULL, (int32_t)size, &dis, have_dis, &sg);
        }
    }
    if (st == STREAM_EV_OK && t.n[0].first < 0)
        st = bad(&t, STREAM_EV_MALFORMED, "updateDescription changes nothing");
    if (st == STREAM_EV_OK) {
        bson_t diff;
        if (!BSON_APPEND_INT32(o, "$v", 2) || !BSON_APPEND_DOCUMENT_BEGIN(o, "diff", &diff) ||
            !write_node(&t, 0, &diff, 0) || !bson_append_document_end(o, &diff))
            st = bad(&t, STREAM_EV_MALFORMED,
                     "updateDescription: the rebuilt diff is too large or too deep (or memory ran out)");
    }
    free(t.n);
    free(sg.v);
    return st;
}

/*
 * project.c — a document of a mapped collection as binary COPY tuples of its tables (see map/project.h).
 */
#include "map/project.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map/convert.h"
#include "map/ejson.h"
#include "project_internal.h"

/* ---- tables ---- */

static size_t count_tables(const map_table *t)
{
    size_t n = 1;
    for (size_t i = 0; i < t->nchildren; i++)
        n += count_tables(t->children[i].table);
    return n;
}

size_t map_table_count(const map_collection *m)
{
    return count_tables(&m->table);
}

/* Table number *i below t (depth first), counting down; NULL when it is not there. */
static const map_table *find_table(const map_table *t, size_t *i)
{
    if (*i == 0)
        return t;
    (*i)--;
    for (size_t k = 0; k < t->nchildren; k++) {
        const map_table *found = find_table(t->children[k].table, i);
        if (found != NULL)
            return found;
    }
    return NULL;
}

const map_table *map_table_at(const map_collection *m, size_t i)
{
    return find_table(&m->table, &i);
}

size_t project_table_number(const map_collection *m, const map_table *t)
{
    size_t n = map_table_count(m);
    for (size_t i = 0; i < n; i++)
        if (map_table_at(m, i) == t)
            return i;
    return 0;
}

static bool is_child(const map_table *t)
{
    return t->parent_key_column != NULL;
}

size_t project_first_column(const map_table *t)
{
    return is_child(t) ? 2 : 0;
}

size_t map_table_fields(const map_table *t)
{
    return project_first_column(t) + t->ncols + (t->rest != MAP_REST_DROP ? 1 : 0);
}

const char *map_table_field(const map_table *t, size_t i, char *type, size_t typelen)
{
    static const map_type jsonb = {.scalar = MAP_JSONB};
    static const map_type integer = {.scalar = MAP_INTEGER};
    size_t first = project_first_column(t);
    if (is_child(t) && i == 0) {
        const map_table *root = t;
        while (root->parent != NULL)
            root = root->parent;
        map_type_sql(&root->cols[root->key].type, type, typelen);
        return t->parent_key_column;
    }
    if (is_child(t) && i == 1) {
        map_type_sql(&integer, type, typelen);
        return t->position_column;
    }
    if (i < first + t->ncols) {
        map_type_sql(&t->cols[i - first].type, type, typelen);
        return t->cols[i - first].name;
    }
    map_type_sql(&jsonb, type, typelen);
    return t->rest_column;
}

/* ---- values by path ---- */

/* The value at parts[0..n) below the document or array (data, len); false when missing (or the path crosses a
 * scalar). The value points into data. */
bool project_lookup(const uint8_t *data, size_t len, char *const *parts, size_t n, bson_value_t *out)
{
    bson_iter_t it;
    for (size_t i = 0; i < n; i++) {
        /* the first field of that name, compared case-sensitively as MongoDB does (not bson_iter_find, which
         * compares case-insensitively) */
        if (!bson_iter_init_from_data(&it, data, len))
            return false;
        bool found = false;
        while (!found && bson_iter_next(&it)) {
            const char *key = bson_iter_key(&it);
            found = key[0] == parts[i][0] && strcmp(key, parts[i]) == 0;
        }
        if (!found)
            return false;
        if (i + 1 == n)
            break;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) && !BSON_ITER_HOLDS_ARRAY(&it))
            return false;
        uint32_t l;
        const uint8_t *d;
        if (BSON_ITER_HOLDS_DOCUMENT(&it))
            bson_iter_document(&it, &l, &d);
        else
            bson_iter_array(&it, &l, &d);
        data = d;
        len = l;
    }
    const bson_value_t *v = bson_iter_value(&it);
    *out = *v;
    return true;
}

map_on_type_error project_on_type_error(const map_table *t, const map_column *c)
{
    return c->on_type_error != MAP_ON_TYPE_ERROR_INHERIT ? c->on_type_error : t->on_type_error;
}

convert_status project_array_lenient(strbuf *out, const map_type *t, const bson_value_t *v, uint64_t *nulled)
{
    bson_iter_t it;
    if (v == NULL || v->value_type != BSON_TYPE_ARRAY || t->scalar == MAP_JSONB ||
        !bson_iter_init_from_data(&it, v->value.v_doc.data, v->value.v_doc.data_len))
        return CONVERT_TYPE_ERROR;
    map_type elem = *t;
    elem.array = false;
    size_t start = out->len;
    uint32_t n = 0, bad = 0;
    bool nulls = false;
    strbuf_put_be32(out, 1);
    strbuf_put_be32(out, 0); /* has nulls: patched below */
    strbuf_put_be32(out, map_scalar_oid(t->scalar));
    strbuf_put_be32(out, 0); /* length: patched below */
    strbuf_put_be32(out, 1);
    while (bson_iter_next(&it)) {
        size_t at = out->len;
        strbuf_put_be32(out, 0);
        bool is_null = false;
        convert_status st = convert_binary(out, &elem, bson_iter_value(&it), &is_null, NULL, 0);
        if (st == CONVERT_NOMEM)
            return CONVERT_NOMEM;
        if (st == CONVERT_TYPE_ERROR) {
            bad++; /* convert_binary took back what it wrote */
            is_null = true;
        }
        uint32_t len = is_null ? UINT32_MAX : (uint32_t)(out->len - at - 4);
        if (!strbuf_failed(out)) {
            uint8_t *p = (uint8_t *)out->data + at;
            p[0] = (uint8_t)(len >> 24);
            p[1] = (uint8_t)(len >> 16);
            p[2] = (uint8_t)(len >> 8);
            p[3] = (uint8_t)len;
        }
        nulls = nulls || is_null;
        n++;
    }
    if (it.err_off != 0) {
        out->len = start;
        return CONVERT_TYPE_ERROR;
    }
    if (strbuf_failed(out))
        return CONVERT_NOMEM;
    if (n == 0) {
        out->len = start;
        strbuf_put_be32(out, 0);
        strbuf_put_be32(out, 0);
        strbuf_put_be32(out, map_scalar_oid(t->scalar));
        return strbuf_failed(out) ? CONVERT_NOMEM : CONVERT_OK;
    }
    uint8_t *p = (uint8_t *)out->data + start;
    p[7] = nulls ? 1 : 0;
    p[12] = (uint8_t)(n >> 24);
    p[13] = (uint8_t)(n >> 16);
    p[14] = (uint8_t)(n >> 8);
    p[15] = (uint8_t)n;
    if (nulled != NULL)
        *nulled += bad;
    return CONVERT_OK;
}

/* Appends column c's field for value v (NULL: missing) as a COPY field (length + bytes, or -1). */
project_status project_field(const map_table *t, const map_column *c, const bson_value_t *v, strbuf *out,
                             uint64_t *nulled, char *why, size_t whylen)
{
    char reason[240];
    size_t mark = out->len;
    convert_status st = convert_copy_field(out, &c->type, v, reason, sizeof reason);
    if (st == CONVERT_NOMEM)
        return PROJECT_NOMEM;
    if (st == CONVERT_OK)
        return strbuf_failed(out) ? PROJECT_NOMEM : PROJECT_OK;
    if (c->type.array && project_on_type_error(t, c) == MAP_ON_TYPE_ERROR_NULL && v != NULL &&
        v->value_type == BSON_TYPE_ARRAY) {
        /* an array whose elements the type cannot all take: those elements are NULL, the others kept, as an update
         * of one element leaves them (docs/mapping.md, Conversions) */
        out->len = mark;
        strbuf_put_be32(out, 0);
        st = project_array_lenient(out, &c->type, v, nulled);
        if (st == CONVERT_NOMEM || strbuf_failed(out))
            return PROJECT_NOMEM;
        if (st == CONVERT_OK) {
            uint32_t len = (uint32_t)(out->len - mark - 4);
            uint8_t *p = (uint8_t *)out->data + mark;
            p[0] = (uint8_t)(len >> 24);
            p[1] = (uint8_t)(len >> 16);
            p[2] = (uint8_t)(len >> 8);
            p[3] = (uint8_t)len;
            return PROJECT_OK;
        }
        out->len = mark;
    }
    if (project_on_type_error(t, c) == MAP_ON_TYPE_ERROR_NULL) {
        strbuf_put_be32(out, 0xFFFFFFFFu);
        if (nulled != NULL)
            (*nulled)++;
        return strbuf_failed(out) ? PROJECT_NOMEM : PROJECT_OK;
    }
    char type[64];
    snprintf(why, whylen, "column \"%s\" (%s) of %s.%s, from %s: %s", c->name,
             map_type_sql(&c->type, type, sizeof type), t->name.schema, t->name.table, c->path, reason);
    return PROJECT_TYPE_ERROR;
}

/* ---- the rest of a document ---- */

/* Whether column or child path parts[0..n) continues below prefix[0..depth) through field key: *leaf when it ends
 * there. */
static void path_at(char *const *parts, size_t n, char *const *prefix, size_t depth, const char *key, bool *leaf,
                    bool *inner)
{
    if (n <= depth)
        return;
    for (size_t i = 0; i < depth; i++)
        if (strcmp(parts[i], prefix[i]) != 0)
            return;
    if (parts[depth][0] != key[0] || strcmp(parts[depth], key) != 0)
        return;
    if (n == depth + 1)
        *leaf = true;
    else
        *inner = true;
}

void project_path_role(const map_table *t, char *const *prefix, size_t depth, const char *key, bool *leaf, bool *inner)
{
    *leaf = *inner = false;
    for (size_t c = 0; c < t->ncols; c++)
        path_at(t->cols[c].parts, t->cols[c].nparts, prefix, depth, key, leaf, inner);
    for (size_t c = 0; c < t->nchildren; c++)
        path_at(t->children[c].parts, t->children[c].nparts, prefix, depth, key, leaf, inner);
}

/* Appends to out the fields of the document (data, len) at prefix[0..depth) that no column or child table takes;
 * a document that holds taken paths is kept (without them, possibly empty), so the paths around stay as they were. */
static bool strip_into(bson_t *out, const uint8_t *data, size_t len, const map_table *t, char **prefix, size_t depth)
{
    bson_iter_t it;
    if (!bson_iter_init_from_data(&it, data, len))
        return false;
    while (bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        bool leaf, inner;
        project_path_role(t, prefix, depth, key, &leaf, &inner);
        if (leaf)
            continue;
        if (inner && BSON_ITER_HOLDS_DOCUMENT(&it) && depth < 64) {
            uint32_t l;
            const uint8_t *d;
            bson_iter_document(&it, &l, &d);
            bson_t sub;
            if (!bson_append_document_begin(out, key, (int)strlen(key), &sub))
                return false;
            prefix[depth] = (char *)key;
            bool ok = strip_into(&sub, d, l, t, prefix, depth + 1);
            if (!bson_append_document_end(out, &sub) || !ok)
                return false;
            continue;
        }
        if (!bson_append_iter(out, key, (int)strlen(key), &it))
            return false;
    }
    return true;
}

project_status project_strip(const map_table *t, const uint8_t *data, size_t len, char **prefix, size_t depth,
                             bson_t *out)
{
    bson_init(out);
    if (!strip_into(out, data, len, t, prefix, depth)) {
        bson_destroy(out);
        return PROJECT_NOMEM;
    }
    return PROJECT_OK;
}

/* Appends the rest field of a row of t for the document (data, len) (a whole document for doc, the stripped one for
 * extra). */
static project_status rest_field(const map_table *t, const uint8_t *data, size_t len, strbuf *out, char *why,
                                 size_t whylen)
{
    static const map_type jsonb = {.scalar = MAP_JSONB};
    bson_value_t v = {.value_type = BSON_TYPE_DOCUMENT};
    bson_t stripped;
    bool own = false;
    if (t->rest == MAP_REST_EXTRA) {
        char *prefix[65];
        if (project_strip(t, data, len, prefix, 0, &stripped) != PROJECT_OK)
            return PROJECT_NOMEM;
        own = true;
        v.value.v_doc.data = (uint8_t *)bson_get_data(&stripped);
        v.value.v_doc.data_len = stripped.len;
    } else {
        v.value.v_doc.data = (uint8_t *)data;
        v.value.v_doc.data_len = (uint32_t)len;
    }
    char reason[240];
    convert_status st = convert_copy_field(out, &jsonb, &v, reason, sizeof reason);
    if (own)
        bson_destroy(&stripped);
    if (st == CONVERT_NOMEM || strbuf_failed(out))
        return PROJECT_NOMEM;
    if (st != CONVERT_OK) {
        snprintf(why, whylen, "column \"%s\" (jsonb) of %s.%s: %s", t->rest_column, t->name.schema, t->name.table,
                 reason);
        return PROJECT_TYPE_ERROR;
    }
    return PROJECT_OK;
}

/* ---- rows ---- */

static void record_begin(map_rows *r, size_t table, size_t *at)
{
    strbuf_put_be16(&r->buf, (uint16_t)table);
    *at = r->buf.len;
    strbuf_put_be32(&r->buf, 0); /* the tuple's length, once known */
}

static void record_end(map_rows *r, size_t at)
{
    if (strbuf_failed(&r->buf))
        return;
    uint32_t len = (uint32_t)(r->buf.len - at - 4);
    uint8_t *p = (uint8_t *)r->buf.data + at;
    p[0] = (uint8_t)(len >> 24);
    p[1] = (uint8_t)(len >> 16);
    p[2] = (uint8_t)(len >> 8);
    p[3] = (uint8_t)len;
    r->count++;
}

/* ---- one pass over a document ---- */

/* The paths of a table's columns and child tables as a tree of field names, so that project_row finds every value,
 * and writes the rest = extra text, in one walk over the document's fields, instead of a search from the top for
 * each column and a second walk to strip the mapped fields. No path is a strict prefix of another and a child path
 * equals no other path (map_set_check), so a node is a leaf, where columns (several when their paths are equal) or
 * one child table take the value, or an inner node with paths going on below it, never both. */
typedef struct pnode {
    const char *name;
    size_t len;
    size_t id;    /* numbers the inner nodes, for the walk's "seen" marks */
    size_t *cols; /* leaf: the columns taking this path */
    size_t ncols;
    size_t child; /* leaf: the child table taking it, or SIZE_MAX */
    struct pnode *kids;
    size_t nkids;
} pnode;

typedef struct {
    pnode root;
    size_t inner; /* inner nodes (the root included) */
} pindex;

static void pnode_free(pnode *n)
{
    for (size_t i = 0; i < n->nkids; i++)
        pnode_free(&n->kids[i]);
    free(n->kids);
    free(n->cols);
}

void project_paths_free(void *paths)
{
    pindex *x = paths;
    if (x == NULL)
        return;
    pnode_free(&x->root);
    free(x);
}

/* Adds the path parts[0..n) below node n0, ending at column col or child table child. */
static bool pindex_add(pnode *n0, char *const *parts, size_t n, size_t col, size_t child)
{
    pnode *node = n0;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(parts[i]), k;
        for (k = 0; k < node->nkids; k++)
            if (node->kids[k].len == len && memcmp(node->kids[k].name, parts[i], len) == 0)
                break;
        if (k == node->nkids) {
            pnode *kids = realloc(node->kids, (node->nkids + 1) * sizeof *kids);
            if (kids == NULL)
                return false;
            node->kids = kids;
            node->kids[k] = (pnode){.name = parts[i], .len = len, .child = SIZE_MAX};
            node->nkids++;
        }
        node = &node->kids[k];
    }
    if (child != SIZE_MAX) {
        node->child = child;
        return true;
    }
    size_t *cols = realloc(node->cols, (node->ncols + 1) * sizeof *cols);
    if (cols == NULL)
        return false;
    node->cols = cols;
    node->cols[node->ncols++] = col;
    return true;
}

static void pindex_number(pnode *n, size_t *inner)
{
    if (n->nkids == 0)
        return;
    n->id = (*inner)++;
    for (size_t i = 0; i < n->nkids; i++)
        pindex_number(&n->kids[i], inner);
}

/* The table's tree, made on first use; NULL when memory runs out (the caller takes the slow path). */
static const pindex *table_paths(const map_table *t)
{
    pindex *x = __atomic_load_n((pindex *const *)&t->paths, __ATOMIC_ACQUIRE);
    if (x != NULL)
        return x;
    x = calloc(1, sizeof *x);
    if (x == NULL)
        return NULL;
    x->root.child = SIZE_MAX;
    bool ok = true;
    for (size_t c = 0; ok && c < t->ncols; c++)
        ok = pindex_add(&x->root, t->cols[c].parts, t->cols[c].nparts, c, SIZE_MAX);
    for (size_t k = 0; ok && k < t->nchildren; k++)
        ok = pindex_add(&x->root, t->children[k].parts, t->children[k].nparts, 0, k);
    if (!ok) {
        project_paths_free(x);
        return NULL;
    }
    pindex_number(&x->root, &x->inner);
    /* Two threads may make it at once (the initial copy's workers): the first one in is kept. */
    pindex *expected = NULL;
    if (!__atomic_compare_exchange_n((pindex **)&t->paths, &expected, x, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        project_paths_free(x);
        return expected;
    }
    return x;
}

static const pnode *pnode_find(const pnode *n, const char *key, size_t len)
{
    for (size_t i = 0; i < n->nkids; i++) {
        const pnode *k = &n->kids[i];
        if (k->len == len && k->name[0] == key[0] && memcmp(k->name, key, len) == 0)
            return k;
    }
    return NULL;
}

/* What one walk found: each column's value (the first field on its path, as project_lookup finds it), each child
 * table's array, and the rest = extra text. */
typedef struct {
    bson_value_t *vals;
    bool *have;
    bson_value_t *kid_vals;
    bool *kid_have;
    bool *seen;    /* inner nodes already followed for values (only the first field of a name is) */
    strbuf *extra; /* the rest = extra text, or NULL */
} pwalk;

/* Walks the fields of the document or array (data, len) at node n. capture: take values (false below a field that
 * is not the first of its name); extra: write the fields no path takes (only for documents, as project_strip keeps
 * an array whole). depth: the level of this object in the whole document (1 for the top). False when the bytes are
 * not valid BSON or the text cannot be made: the caller then takes the slow path, which says why. */
static bool walk(pwalk *w, const pnode *n, const uint8_t *data, uint32_t len, bool capture, bool extra, int depth)
{
    bson_iter_t it;
    if (!bson_iter_init_from_data(&it, data, len))
        return false;
    bool first = true;
    while (bson_iter_next(&it)) {
        uint32_t klen = bson_iter_key_len(&it);
        const char *key = bson_iter_key(&it);
        const pnode *k = klen > 0 ? pnode_find(n, key, klen) : NULL;
        if (k != NULL && k->nkids == 0) {
            /* a leaf: its columns or child table take the value, and the rest does not */
            if (!capture)
                continue;
            for (size_t c = 0; c < k->ncols; c++)
                if (!w->have[k->cols[c]]) {
                    w->have[k->cols[c]] = true;
                    w->vals[k->cols[c]] = *bson_iter_value(&it);
                }
            if (k->child != SIZE_MAX && !w->kid_have[k->child]) {
                w->kid_have[k->child] = true;
                w->kid_vals[k->child] = *bson_iter_value(&it);
            }
            continue;
        }
        bool follow = k != NULL && capture && !w->seen[k->id];
        if (k != NULL && capture)
            w->seen[k->id] = true;
        bool is_doc = BSON_ITER_HOLDS_DOCUMENT(&it), is_arr = BSON_ITER_HOLDS_ARRAY(&it);
        const uint8_t *sub = NULL;
        uint32_t sublen = 0;
        if (is_doc)
            bson_iter_document(&it, &sublen, &sub);
        else if (is_arr)
            bson_iter_array(&it, &sublen, &sub);
        if (extra) {
            if (!first)
                strbuf_putc(w->extra, ',');
            first = false;
            if (k != NULL && is_doc && depth < 65) {
                /* paths go on inside: the sub-document is kept without them */
                if (ejson_write_name(w->extra, key, klen) != EJSON_OK)
                    return false;
                strbuf_putc(w->extra, '{');
                if (!walk(w, k, sub, sublen, follow, true, depth + 1))
                    return false;
                strbuf_putc(w->extra, '}');
                continue;
            }
            ejson_error err;
            if (ejson_write_member(w->extra, &it, depth, &err) != EJSON_OK)
                return false;
        }
        if (follow && (is_doc || is_arr) && !walk(w, k, sub, sublen, true, false, depth + 1))
            return false;
    }
    return it.err_off == 0 && (w->extra == NULL || !strbuf_failed(w->extra));
}

/* The walk's scratch for tables of up to these sizes lives on the stack; larger ones take one allocation. */
#define WALK_COLS   32
#define WALK_INNER  32
#define WALK_CHILDS 8

/* The rest = extra text of a row is made in this thread's scratch buffer 0 (util/strbuf.h), so that a row costs no
 * allocation (a buffer that grew past 1 MB for a large document is given back after it). */
#define EXTRA_SCRATCH 0

typedef enum { FAST_DONE, FAST_SLOW, FAST_NOMEM } fast_status;

/* project_row for a document, in one walk (see pindex). FAST_SLOW when the walk cannot say what the slow path would:
 * malformed BSON, a text that cannot be made, or a NUL in the rest (the slow path then writes the same refusal as
 * always); nothing was appended then. */
static fast_status fast_row(const map_collection *m, const map_table *t, const uint8_t *data, size_t len,
                            const uint8_t *key, size_t key_len, int64_t pos, map_rows *out, uint64_t *nulled, char *why,
                            size_t whylen, project_status *st)
{
    const pindex *x = table_paths(t);
    if (x == NULL || len > UINT32_MAX)
        return FAST_SLOW;
    bson_value_t vals_s[WALK_COLS], kvals_s[WALK_CHILDS];
    bool have_s[WALK_COLS], khave_s[WALK_CHILDS], seen_s[WALK_INNER];
    void *heap = NULL;
    pwalk w = {.vals = vals_s, .have = have_s, .kid_vals = kvals_s, .kid_have = khave_s, .seen = seen_s};
    if (t->ncols > WALK_COLS || t->nchildren > WALK_CHILDS || x->inner > WALK_INNER) {
        size_t nc = t->ncols, nk = t->nchildren, ni = x->inner;
        heap = malloc(nc * sizeof(bson_value_t) + nk * sizeof(bson_value_t) + nc + nk + ni + 1);
        if (heap == NULL)
            return FAST_NOMEM;
        w.vals = heap;
        w.kid_vals = w.vals + nc;
        w.have = (bool *)(w.kid_vals + nk);
        w.kid_have = w.have + nc;
        w.seen = w.kid_have + nk;
    }
    memset(w.have, 0, t->ncols);
    memset(w.kid_have, 0, t->nchildren);
    memset(w.seen, 0, x->inner);
    fast_status fs = FAST_DONE;
    if (t->rest == MAP_REST_EXTRA) {
        if ((w.extra = strbuf_scratch(EXTRA_SCRATCH)) == NULL) {
            fs = FAST_SLOW;
            goto done;
        }
        strbuf_reset(w.extra, 1024 * 1024);
        strbuf_putc(w.extra, '{');
    }
    if (!walk(&w, &x->root, data, (uint32_t)len, true, t->rest == MAP_REST_EXTRA, 1)) {
        fs = w.extra != NULL && strbuf_failed(w.extra) ? FAST_NOMEM : FAST_SLOW;
        goto done;
    }
    if (w.extra != NULL) {
        strbuf_putc(w.extra, '}');
        if (strbuf_failed(w.extra)) {
            fs = FAST_NOMEM;
            goto done;
        }
        if (convert_json_has_nul(w.extra->data, w.extra->len)) {
            fs = FAST_SLOW;
            goto done;
        }
    }
    size_t mark = out->buf.len, at;
    uint32_t count = out->count;
    record_begin(out, project_table_number(m, t), &at);
    strbuf_put_be16(&out->buf, (uint16_t)map_table_fields(t));
    if (is_child(t)) {
        strbuf_append(&out->buf, key, key_len);
        strbuf_put_be32(&out->buf, 4);
        strbuf_put_be32(&out->buf, (uint32_t)pos);
    }
    *st = PROJECT_OK;
    for (size_t c = 0; c < t->ncols && *st == PROJECT_OK; c++) {
        if (!is_child(t) && c == t->key)
            strbuf_append(&out->buf, key, key_len);
        else
            *st = project_field(t, &t->cols[c], w.have[c] ? &w.vals[c] : NULL, &out->buf, nulled, why, whylen);
    }
    if (*st == PROJECT_OK && t->rest == MAP_REST_EXTRA) {
        strbuf_put_be32(&out->buf, (uint32_t)(w.extra->len + 1));
        strbuf_putc(&out->buf, 1); /* jsonb's binary format version */
        strbuf_append(&out->buf, w.extra->data, w.extra->len);
    } else if (*st == PROJECT_OK && t->rest == MAP_REST_DOC) {
        *st = rest_field(t, data, len, &out->buf, why, whylen);
    }
    if (*st != PROJECT_OK) {
        if (!strbuf_failed(&out->buf)) {
            out->buf.len = mark;
            out->count = count;
        }
        goto done;
    }
    record_end(out, at);
    if (strbuf_failed(&out->buf)) {
        *st = PROJECT_NOMEM;
        goto done;
    }
    for (size_t k = 0; k < t->nchildren && *st == PROJECT_OK; k++)
        if (w.kid_have[k])
            *st = project_child_rows(m, &t->children[k], &w.kid_vals[k], 0, key, key_len, out, nulled, why, whylen);
done:
    free(heap);
    if (w.extra != NULL && w.extra->cap > 1024 * 1024)
        strbuf_free(w.extra);
    return fs;
}

project_status project_row(const map_collection *m, const map_table *t, const uint8_t *data, size_t len,
                           const uint8_t *key, size_t key_len, int64_t pos, map_rows *out, uint64_t *nulled, char *why,
                           size_t whylen)
{
    if (data != NULL) {
        project_status st = PROJECT_OK;
        fast_status fs = fast_row(m, t, data, len, key, key_len, pos, out, nulled, why, whylen, &st);
        if (fs == FAST_NOMEM)
            return PROJECT_NOMEM;
        if (fs == FAST_DONE)
            return st;
    }
    size_t at;
    record_begin(out, project_table_number(m, t), &at);
    strbuf_put_be16(&out->buf, (uint16_t)map_table_fields(t));
    if (is_child(t)) {
        strbuf_append(&out->buf, key, key_len); /* the parent key, already framed as a field */
        strbuf_put_be32(&out->buf, 4);
        strbuf_put_be32(&out->buf, (uint32_t)pos);
    }
    for (size_t c = 0; c < t->ncols; c++) {
        const map_column *col = &t->cols[c];
        if (!is_child(t) && c == t->key) {
            strbuf_append(&out->buf, key, key_len);
            continue;
        }
        bson_value_t v;
        bool have = data != NULL && project_lookup(data, len, col->parts, col->nparts, &v);
        project_status st = project_field(t, col, have ? &v : NULL, &out->buf, nulled, why, whylen);
        if (st != PROJECT_OK)
            return st;
    }
    if (t->rest != MAP_REST_DROP) {
        if (data == NULL) {
            strbuf_put_be32(&out->buf, 0xFFFFFFFFu);
        } else {
            project_status st = rest_field(t, data, len, &out->buf, why, whylen);
            if (st != PROJECT_OK)
                return st;
        }
    }
    record_end(out, at);
    if (strbuf_failed(&out->buf))
        return PROJECT_NOMEM;
    /* the child tables' rows */
    for (size_t k = 0; k < t->nchildren && data != NULL; k++) {
        bson_value_t arr;
        if (!project_lookup(data, len, t->children[k].parts, t->children[k].nparts, &arr))
            continue;
        project_status st = project_child_rows(m, &t->children[k], &arr, 0, key, key_len, out, nulled, why, whylen);
        if (st != PROJECT_OK)
            return st;
    }
    return PROJECT_OK;
}

project_status project_child_rows(const map_collection *m, const map_child *ch, const bson_value_t *arr, uint32_t from,
                                  const uint8_t *key, size_t key_len, map_rows *out, uint64_t *nulled, char *why,
                                  size_t whylen)
{
    if (arr->value_type == BSON_TYPE_NULL || arr->value_type == BSON_TYPE_UNDEFINED)
        return PROJECT_OK;
    if (arr->value_type != BSON_TYPE_ARRAY) {
        const map_table *t = ch->table;
        if (project_on_type_error(t, &(map_column){.on_type_error = MAP_ON_TYPE_ERROR_INHERIT}) ==
            MAP_ON_TYPE_ERROR_NULL) {
            if (nulled != NULL)
                (*nulled)++;
            return PROJECT_OK;
        }
        snprintf(why, whylen, "child table %s.%s takes the array at %s, which holds a %s here", t->name.schema,
                 t->name.table, ch->path, convert_type_name(arr->value_type));
        return PROJECT_TYPE_ERROR;
    }
    bson_iter_t it;
    if (!bson_iter_init_from_data(&it, arr->value.v_doc.data, arr->value.v_doc.data_len))
        return PROJECT_OK;
    uint32_t pos = 0;
    while (bson_iter_next(&it)) {
        if (pos++ < from)
            continue;
        project_status st = project_element(m, ch, &it, pos - 1, key, key_len, out, nulled, why, whylen);
        if (st != PROJECT_OK)
            return st;
    }
    return PROJECT_OK;
}

project_status project_element(const map_collection *m, const map_child *ch, const bson_iter_t *el, uint32_t pos,
                               const uint8_t *key, size_t key_len, map_rows *out, uint64_t *nulled, char *why,
                               size_t whylen)
{
    const map_table *t = ch->table;
    if (BSON_ITER_HOLDS_DOCUMENT(el)) {
        uint32_t l;
        const uint8_t *d;
        bson_iter_document(el, &l, &d);
        return project_row(m, t, d, l, key, key_len, pos, out, nulled, why, whylen);
    }
    if (BSON_ITER_HOLDS_NULL(el) || BSON_ITER_HOLDS_UNDEFINED(el))
        return project_row(m, t, NULL, 0, key, key_len, pos, out, nulled, why, whylen);
    if (project_on_type_error(t, &(map_column){.on_type_error = MAP_ON_TYPE_ERROR_INHERIT}) == MAP_ON_TYPE_ERROR_NULL) {
        if (nulled != NULL)
            (*nulled)++;
        return project_row(m, t, NULL, 0, key, key_len, pos, out, nulled, why, whylen);
    }
    snprintf(why, whylen, "child table %s.%s takes the documents of the array at %s; element %u is a %s",
             t->name.schema, t->name.table, ch->path, pos, convert_type_name(bson_iter_type(el)));
    return PROJECT_TYPE_ERROR;
}

project_status map_project_key(const map_collection *m, const bson_value_t *id, strbuf *out, char *why, size_t whylen)
{
    const map_table *t = &m->table;
    const map_column *kc = &t->cols[t->key];
    if (kc->line == 0) {
        /* the column oplog2pg adds: the key text of the _id, as a jsonb-shaped table has it */
        size_t at = out->len;
        strbuf_put_be32(out, 0);
        ejson_error err;
        ejson_status st = ejson_write_key(out, id, &err);
        if (st == EJSON_NOMEM || strbuf_failed(out))
            return PROJECT_NOMEM;
        if (st != EJSON_OK) {
            char reason[240];
            snprintf(why, whylen, "the _id cannot be a key: %s", ejson_error_text(&err, reason, sizeof reason));
            return PROJECT_TYPE_ERROR;
        }
        uint32_t len = (uint32_t)(out->len - at - 4);
        uint8_t *p = (uint8_t *)out->data + at;
        p[0] = (uint8_t)(len >> 24);
        p[1] = (uint8_t)(len >> 16);
        p[2] = (uint8_t)(len >> 8);
        p[3] = (uint8_t)len;
        return PROJECT_OK;
    }
    char reason[240];
    convert_status st = convert_key_field(out, &kc->type, id, reason, sizeof reason);
    if (st == CONVERT_NOMEM || strbuf_failed(out))
        return PROJECT_NOMEM;
    if (st != CONVERT_OK || (id == NULL || id->value_type == BSON_TYPE_NULL)) {
        char type[64];
        snprintf(why, whylen, "key column \"%s\" (%s) of %s.%s: %s", kc->name,
                 map_type_sql(&kc->type, type, sizeof type), t->name.schema, t->name.table,
                 st != CONVERT_OK ? reason : "a key cannot be NULL");
        return PROJECT_TYPE_ERROR;
    }
    return PROJECT_OK;
}

project_status map_project_document_keyed(const map_collection *m, const uint8_t *doc, size_t len, const uint8_t *key,
                                          size_t key_len, map_rows *out, uint64_t *nulled, char *why, size_t whylen)
{
    static const uint8_t null_frame[4] = {0xff, 0xff, 0xff, 0xff};
    size_t mark = out->buf.len;
    uint32_t count = out->count;
    project_status st = project_row(m, &m->table, doc, len, key != NULL ? key : null_frame,
                                    key != NULL ? key_len : sizeof null_frame, -1, out, nulled, why, whylen);
    if (st != PROJECT_OK && !strbuf_failed(&out->buf)) {
        out->buf.len = mark;
        out->count = count;
    }
    return st;
}

project_status map_project_document(const map_collection *m, const uint8_t *doc, size_t len, const bson_value_t *id,
                                    map_rows *out, uint64_t *nulled, char *why, size_t whylen)
{
    strbuf key = STRBUF_INIT;
    size_t mark = out->buf.len;
    uint32_t count = out->count;
    project_status st = map_project_key(m, id, &key, why, whylen);
    if (st == PROJECT_OK)
        st = project_row(m, &m->table, doc, len, (const uint8_t *)key.data, key.len, -1, out, nulled, why, whylen);
    strbuf_free(&key);
    if (st != PROJECT_OK && !strbuf_failed(&out->buf)) {
        out->buf.len = mark; /* the document's rows go together or not at all */
        out->count = count;
    }
    return st;
}

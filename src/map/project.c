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

/* Appends column c's field for value v (NULL: missing) as a COPY field (length + bytes, or -1). */
project_status project_field(const map_table *t, const map_column *c, const bson_value_t *v, strbuf *out,
                             uint64_t *nulled, char *why, size_t whylen)
{
    char reason[240];
    convert_status st = convert_copy_field(out, &c->type, v, reason, sizeof reason);
    if (st == CONVERT_NOMEM)
        return PROJECT_NOMEM;
    if (st == CONVERT_OK)
        return strbuf_failed(out) ? PROJECT_NOMEM : PROJECT_OK;
    if (project_on_type_error(t, c) == MAP_ON_TYPE_ERROR_NULL) {
        strbuf_put_be32(out, 0xFFFFFFFFu);
        if (nulled != NULL)
            (*nulled)++;
        return strbuf_failed(out) ? PROJECT_NOMEM : PROJECT_OK;
    }
    char type[64];
    snprintf(why, whylen, "column \"%s\" (%s) of %s.%s, from %s: %s", c->name, map_type_sql(&c->type, type, sizeof type),
             t->name.schema, t->name.table, c->path, reason);
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

void project_path_role(const map_table *t, char *const *prefix, size_t depth, const char *key, bool *leaf,
                       bool *inner)
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

project_status project_row(const map_collection *m, const map_table *t, const uint8_t *data, size_t len,
                           const uint8_t *key, size_t key_len, int64_t pos, map_rows *out, uint64_t *nulled,
                           char *why, size_t whylen)
{
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

project_status project_child_rows(const map_collection *m, const map_child *ch, const bson_value_t *arr,
                                  uint32_t from, const uint8_t *key, size_t key_len, map_rows *out, uint64_t *nulled,
                                  char *why, size_t whylen)
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
                 t->name.table, ch->path, project_type_name(arr->value_type));
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
    if (project_on_type_error(t, &(map_column){.on_type_error = MAP_ON_TYPE_ERROR_INHERIT}) ==
        MAP_ON_TYPE_ERROR_NULL) {
        if (nulled != NULL)
            (*nulled)++;
        return project_row(m, t, NULL, 0, key, key_len, pos, out, nulled, why, whylen);
    }
    snprintf(why, whylen, "child table %s.%s takes the documents of the array at %s; element %u is a %s",
             t->name.schema, t->name.table, ch->path, pos, project_type_name(bson_iter_type(el)));
    return PROJECT_TYPE_ERROR;
}

const char *project_type_name(bson_type_t t)
{
    switch (t) {
    case BSON_TYPE_DOUBLE:
        return "double";
    case BSON_TYPE_UTF8:
        return "string";
    case BSON_TYPE_DOCUMENT:
        return "document";
    case BSON_TYPE_ARRAY:
        return "array";
    case BSON_TYPE_BINARY:
        return "binary";
    case BSON_TYPE_OID:
        return "ObjectId";
    case BSON_TYPE_BOOL:
        return "bool";
    case BSON_TYPE_DATE_TIME:
        return "date";
    case BSON_TYPE_NULL:
        return "null";
    case BSON_TYPE_INT32:
        return "int32";
    case BSON_TYPE_INT64:
        return "int64";
    case BSON_TYPE_DECIMAL128:
        return "decimal128";
    case BSON_TYPE_TIMESTAMP:
        return "timestamp";
    default:
        return "value of another BSON type";
    }
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
    convert_status st = convert_copy_field(out, &kc->type, id, reason, sizeof reason);
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

void map_rows_iter(const map_rows *r, map_row_iter *it)
{
    it->p = (const uint8_t *)r->buf.data;
    it->end = it->p + r->buf.len;
}

bool map_rows_next(map_row_iter *it, uint16_t *table, const uint8_t **tuple, uint32_t *len)
{
    if (it->p == NULL || it->end - it->p < 6)
        return false;
    const uint8_t *p = it->p;
    *table = (uint16_t)(p[0] << 8 | p[1]);
    *len = (uint32_t)p[2] << 24 | (uint32_t)p[3] << 16 | (uint32_t)p[4] << 8 | p[5];
    *tuple = p + 6;
    it->p = p + 6 + *len;
    return true;
}

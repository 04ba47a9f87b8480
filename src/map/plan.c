/*
 * plan.c — an update of a mapped collection as edits of its rows (see map/project.h).
 *
 * Every update form is first reduced to primitive edits at absolute paths, in the order the server applies them:
 * set a path to a value ($set, a $v:2 `u` or `i`, an array diff's `u<index>`), unset a path ($unset, `d`), resize an
 * array (an array diff's `l`, applied before the element edits of that array), enter a sub-diff (`s<field>`: a value
 * of the other kind there becomes null, as the server's applier writes it, and the edits inside never create missing
 * parents), patch a BinData (an 8.x `b` entry). Each primitive edit is then matched
 * against the map of the table it falls in:
 *   - a column at that path, or below it (the edit replaces a document holding the column's path): the column's new
 *     value, converted here from the oplog's value;
 *   - a path inside a column's value: for jsonb, an edit by path (oplog2pg.apply_edits); for an array column, an
 *     element; for any other type the column's value has become a document or array, which is a type error;
 *   - a child table's array, or a path above it: the child rows are replaced (or cut, for a resize);
 *   - a path inside one element of a child table's array: the same matching, one level down, on that child row;
 *   - the rest: with rest = doc the doc column takes the whole update as it is (once per op); with rest = extra the
 *     edits of paths no column or child table takes go to the extra column, their values without the mapped paths.
 * The server never logs two edits of one path or of a path and its prefix in one update, so the edits are
 * independent of each other except for a resize and the element edits after it, which keep their order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map/convert.h"
#include "map/ejson.h"
#include "map/project.h"
#include "project_internal.h"

#define PLAN_MAX_DEPTH 100 /* MongoDB nests documents at most 100 deep */

/* PRIM_SUB: a $v:2 sub-diff (`s<field>`) enters the value at the path. The server's applier recurses only when the
 * value there is of the diff's kind (an object, or an array for an array diff), writes null over a value of another
 * kind and does nothing when the field is missing (document_diff_applier.cpp); the edits inside then never create
 * the path's missing parents. A server logs a sub-diff only for a value of its kind, but the initial copy's replay
 * applies entries to later versions of a document, and the server's own applier tests do the same, so the plan
 * follows the applier. PRIM_BINARY: an 8.x `b` entry {o, d}: the BinData at the path becomes its first o bytes
 * followed by d (null over any other value, nothing when missing). */
typedef enum { PRIM_SET, PRIM_UNSET, PRIM_RESIZE, PRIM_SUB, PRIM_BINARY } prim_kind;

typedef struct {
    prim_kind kind;
    char *const *parts;
    size_t n;
    const bson_value_t *value; /* PRIM_SET; PRIM_BINARY: the {o, d} entry */
    uint32_t size;             /* PRIM_RESIZE; PRIM_BINARY: o */
    bool array;                /* PRIM_SUB: an array diff */
    bool in_sub;               /* PRIM_SET / PRIM_UNSET inside a sub-diff: the parents must exist */
    const bool *arr;           /* from a $v:2 diff: arr[i] when parts[i] is an index in an array diff (the value
                                * holding it is an array), false for a field of an object diff; NULL for $v:1 */
    const uint8_t *bin;        /* PRIM_BINARY: d's bytes */
    uint32_t bin_len;
} prim;

/* A jsonb column's edits, gathered so that each column gets one apply_edits call. */
typedef struct {
    uint16_t table, field;
    int64_t pos;
    bool wrapped; /* the column's value is wrapped as {"v": value} (a jsonb column), not a document (rest) */
    strbuf json;  /* the edits array, without its closing bracket */
} jsonb_acc;

typedef struct {
    const map_collection *m;
    const op *o;
    map_plan *plan;
    char *why;
    size_t whylen;
    const uint8_t *key; /* the parent key, framed as a COPY field (for child rows) */
    size_t key_len;
    jsonb_acc *acc;
    size_t nacc, capacc;
    bool nomem;
} walk;

void map_plan_init(map_plan *p)
{
    memset(p, 0, sizeof *p);
    strbuf_init(&p->data);
    strbuf_init(&p->rows.buf);
}

void map_plan_free(map_plan *p)
{
    free(p->edits);
    strbuf_free(&p->data);
    strbuf_free(&p->rows.buf);
    map_plan_init(p);
}

static map_edit *add_edit(walk *w, map_edit_kind kind, size_t table, size_t field, int64_t pos)
{
    map_plan *p = w->plan;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 8;
        map_edit *e = realloc(p->edits, cap * sizeof *e);
        if (e == NULL) {
            w->nomem = true;
            return NULL;
        }
        p->edits = e;
        p->cap = cap;
    }
    map_edit *e = &p->edits[p->n++];
    *e = (map_edit){
        .kind = kind, .table = (uint16_t)table, .field = (uint16_t)field, .pos = pos, .off = (uint32_t)p->data.len};
    return e;
}

static void end_value(walk *w, map_edit *e)
{
    e->len = (uint32_t)(w->plan->data.len - e->off);
    if (strbuf_failed(&w->plan->data))
        w->nomem = true;
}

static bool is_index(const char *s)
{
    if (s[0] == '\0' || (s[0] == '0' && s[1] != '\0') || strlen(s) > 9)
        return false;
    for (const char *c = s; *c; c++)
        if (*c < '0' || *c > '9')
            return false;
    return true;
}

/* How path a relates to path b: 0 unrelated, 1 equal, 2 a is above b (a proper prefix), 3 a is below b. */
enum { REL_NONE, REL_EQUAL, REL_ABOVE, REL_BELOW };
static int relate(char *const *a, size_t na, char *const *b, size_t nb)
{
    size_t n = na < nb ? na : nb;
    for (size_t i = 0; i < n; i++)
        if (strcmp(a[i], b[i]) != 0)
            return REL_NONE;
    return na == nb ? REL_EQUAL : na < nb ? REL_ABOVE : REL_BELOW;
}

/* ---- JSON for apply_edits ---- */

static void json_string(strbuf *b, const char *s)
{
    bson_value_t v = {.value_type = BSON_TYPE_UTF8};
    v.value.v_utf8.str = (char *)s;
    v.value.v_utf8.len = (uint32_t)strlen(s);
    ejson_error err;
    (void)ejson_write_value(b, &v, &err); /* names were checked as UTF-8 by the decoder */
}

static jsonb_acc *acc_for(walk *w, size_t table, size_t field, int64_t pos, bool wrapped)
{
    for (size_t i = 0; i < w->nacc; i++)
        if (w->acc[i].table == table && w->acc[i].field == field && w->acc[i].pos == pos)
            return &w->acc[i];
    if (w->nacc == w->capacc) {
        size_t cap = w->capacc ? w->capacc * 2 : 4;
        jsonb_acc *a = realloc(w->acc, cap * sizeof *a);
        if (a == NULL) {
            w->nomem = true;
            return NULL;
        }
        w->acc = a;
        w->capacc = cap;
    }
    jsonb_acc *a = &w->acc[w->nacc++];
    *a = (jsonb_acc){.table = (uint16_t)table, .field = (uint16_t)field, .pos = pos, .wrapped = wrapped};
    strbuf_init(&a->json);
    strbuf_putc(&a->json, '[');
    return a;
}

/* Adds one edit (kind, path parts[from..n), value) to the jsonb field's edits. */
static void jsonb_edit(walk *w, size_t table, size_t field, int64_t pos, bool wrapped, const prim *pr, size_t from,
                       const bson_value_t *value)
{
    jsonb_acc *a = acc_for(w, table, field, pos, wrapped);
    if (a == NULL)
        return;
    strbuf *b = &a->json;
    if (b->len > 1)
        strbuf_putc(b, ',');
    static const char *const kinds[] = {[PRIM_SET] = "[\"set\",[",
                                        [PRIM_UNSET] = "[\"unset\",[",
                                        [PRIM_RESIZE] = "[\"resize\",[",
                                        [PRIM_SUB] = "[\"sub\",[",
                                        [PRIM_BINARY] = "[\"binary\",["};
    strbuf_puts(b, pr->kind == PRIM_SET && pr->in_sub ? "[\"sset\",[" : kinds[pr->kind]);
    bool first = true;
    if (wrapped) {
        strbuf_puts(b, "\"v\"");
        first = false;
    }
    for (size_t i = from; i < pr->n; i++) {
        if (!first)
            strbuf_putc(b, ',');
        first = false;
        json_string(b, pr->parts[i]);
    }
    strbuf_putc(b, ']');
    if (pr->kind == PRIM_SET || pr->kind == PRIM_BINARY) {
        strbuf_putc(b, ',');
        ejson_error err;
        ejson_status st = ejson_write_value(b, value, &err);
        if (st == EJSON_NOMEM)
            w->nomem = true;
        else if (st != EJSON_OK)
            strbuf_puts(b, "null"); /* the decoder refused such ops before (op.refusal) */
    } else if (pr->kind == PRIM_RESIZE) {
        strbuf_printf(b, ",%u", pr->size);
    } else if (pr->kind == PRIM_SUB) {
        strbuf_puts(b, pr->array ? ",\"a\"" : ",\"o\"");
    }
    strbuf_putc(b, ']');
    if (strbuf_failed(b))
        w->nomem = true;
}

static void flush_jsonb(walk *w)
{
    for (size_t i = 0; i < w->nacc; i++) {
        jsonb_acc *a = &w->acc[i];
        strbuf_putc(&a->json, ']');
        if (!w->nomem && !strbuf_failed(&a->json)) {
            map_edit *e = add_edit(w, MAP_EDIT_JSONB, a->table, a->field, a->pos);
            if (e != NULL) {
                strbuf_putc(&w->plan->data, 1); /* jsonb's binary format: version 1, then the text */
                strbuf_append(&w->plan->data, a->json.data, a->json.len);
                end_value(w, e);
            }
        } else {
            w->nomem = true;
        }
        strbuf_free(&a->json);
    }
    free(w->acc);
    w->acc = NULL;
    w->nacc = w->capacc = 0;
}

/* ---- columns ---- */

/* field = the converted value (v NULL: SQL NULL). */
static project_status set_column(walk *w, const map_table *t, size_t table, size_t c, int64_t pos,
                                 const bson_value_t *v)
{
    const map_column *col = &t->cols[c];
    map_edit *e = add_edit(w, MAP_EDIT_COLUMN, table, project_first_column(t) + c, pos);
    if (e == NULL)
        return PROJECT_NOMEM;
    bool is_null = false;
    char reason[240];
    convert_status st =
        v == NULL ? CONVERT_OK : convert_binary(&w->plan->data, &col->type, v, &is_null, reason, sizeof reason);
    if (v == NULL)
        is_null = true;
    if (st == CONVERT_NOMEM)
        return PROJECT_NOMEM;
    if (st == CONVERT_TYPE_ERROR) {
        if (project_on_type_error(t, col) != MAP_ON_TYPE_ERROR_NULL) {
            char type[64];
            snprintf(w->why, w->whylen, "column \"%s\" (%s) of %s.%s, from %s: %s", col->name,
                     map_type_sql(&col->type, type, sizeof type), t->name.schema, t->name.table, col->path, reason);
            return PROJECT_TYPE_ERROR;
        }
        w->plan->data.len = e->off;
        if (col->type.array && v->value_type == BSON_TYPE_ARRAY) {
            /* elements the type cannot take are NULL elements, as an insert has them (project_field) */
            st = project_array_lenient(&w->plan->data, &col->type, v, &w->plan->nulled);
            if (st == CONVERT_NOMEM)
                return PROJECT_NOMEM;
            if (st == CONVERT_OK) {
                e->null = false;
                end_value(w, e);
                return w->nomem ? PROJECT_NOMEM : PROJECT_OK;
            }
            w->plan->data.len = e->off;
        }
        w->plan->nulled++;
        is_null = true;
    }
    e->null = is_null;
    end_value(w, e);
    return w->nomem ? PROJECT_NOMEM : PROJECT_OK;
}

/* A column whose value the edit makes a document or an array, which its type cannot hold. */
static project_status column_type_error(walk *w, const map_table *t, size_t table, size_t c, int64_t pos)
{
    const map_column *col = &t->cols[c];
    if (project_on_type_error(t, col) == MAP_ON_TYPE_ERROR_NULL) {
        w->plan->nulled++;
        return set_column(w, t, table, c, pos, NULL);
    }
    char type[64];
    snprintf(w->why, w->whylen, "column \"%s\" (%s) of %s.%s, from %s: the update makes it a document or an array",
             col->name, map_type_sql(&col->type, type, sizeof type), t->name.schema, t->name.table, col->path);
    return PROJECT_TYPE_ERROR;
}

static project_status element_edit(walk *w, const map_table *t, size_t table, size_t c, int64_t pos, uint32_t index,
                                   const bson_value_t *v)
{
    const map_column *col = &t->cols[c];
    map_type et = col->type;
    et.array = false;
    map_edit *e = add_edit(w, MAP_EDIT_ELEMENT, table, project_first_column(t) + c, pos);
    if (e == NULL)
        return PROJECT_NOMEM;
    e->n = index;
    bool is_null = true;
    if (v != NULL) {
        char reason[240];
        convert_status st = convert_binary(&w->plan->data, &et, v, &is_null, reason, sizeof reason);
        if (st == CONVERT_NOMEM)
            return PROJECT_NOMEM;
        if (st == CONVERT_TYPE_ERROR) {
            if (project_on_type_error(t, col) != MAP_ON_TYPE_ERROR_NULL) {
                char type[64];
                snprintf(w->why, w->whylen, "column \"%s\" (%s) of %s.%s, element %u: %s", col->name,
                         map_type_sql(&col->type, type, sizeof type), t->name.schema, t->name.table, index, reason);
                return PROJECT_TYPE_ERROR;
            }
            w->plan->data.len = e->off;
            w->plan->nulled++;
            is_null = true;
        }
    }
    e->null = is_null;
    end_value(w, e);
    return w->nomem ? PROJECT_NOMEM : PROJECT_OK;
}

/* The bytea column's value = its first o bytes, then d (an 8.x binary diff). */
static project_status binary_edit(walk *w, const map_table *t, size_t table, size_t c, int64_t pos, const prim *pr)
{
    map_edit *e = add_edit(w, MAP_EDIT_BINARY, table, project_first_column(t) + c, pos);
    if (e == NULL)
        return PROJECT_NOMEM;
    e->n = pr->size;
    strbuf_append(&w->plan->data, pr->bin, pr->bin_len);
    end_value(w, e);
    return w->nomem ? PROJECT_NOMEM : PROJECT_OK;
}

static project_status apply_to_column(walk *w, const map_table *t, size_t table, size_t c, int64_t pos, const prim *pr,
                                      char *const *at, size_t depth)
{
    const map_column *col = &t->cols[c];
    char *const *parts = pr->parts + depth;
    size_t n = pr->n - depth;
    bool jsonb = col->type.scalar == MAP_JSONB && !col->type.array;
    (void)at;
    int rel = relate(parts, n, col->parts, col->nparts);
    if (rel == REL_NONE)
        return PROJECT_OK;
    if (pr->kind == PRIM_SUB && rel != REL_BELOW) {
        if (rel == REL_EQUAL) {
            if (jsonb) {
                jsonb_edit(w, table, project_first_column(t) + c, pos, true, pr, pr->n, NULL);
                return w->nomem ? PROJECT_NOMEM : PROJECT_OK;
            }
            /* an array column under an array diff: its elements are edited next; any other value of a typed column
             * is not of the diff's kind (a document would not have converted): the server writes null */
            if (col->type.array && pr->array)
                return PROJECT_OK;
            return set_column(w, t, table, c, pos, NULL);
        }
        /* the column's path goes on below the sub-diff's: an array has no named fields, so under an array diff a
         * field name there finds nothing, now (the value is null after a mismatch) as before */
        if (pr->array && !is_index(col->parts[n]))
            return set_column(w, t, table, c, pos, NULL);
        return PROJECT_OK;
    }
    if (pr->kind == PRIM_BINARY && rel != REL_BELOW) {
        if (rel == REL_EQUAL && jsonb) {
            jsonb_edit(w, table, project_first_column(t) + c, pos, true, pr, pr->n, pr->value);
            return w->nomem ? PROJECT_NOMEM : PROJECT_OK;
        }
        if (rel == REL_EQUAL && col->type.scalar == MAP_BYTEA && !col->type.array)
            return binary_edit(w, t, table, c, pos, pr);
        /* a column of another type never held a BinData (null after the diff), and nothing lies below one */
        return set_column(w, t, table, c, pos, NULL);
    }
    if (rel == REL_EQUAL || rel == REL_ABOVE) {
        if (pr->kind == PRIM_UNSET)
            return set_column(w, t, table, c, pos, NULL);
        if (pr->kind == PRIM_RESIZE) {
            if (rel == REL_EQUAL) {
                if (jsonb) {
                    jsonb_edit(w, table, project_first_column(t) + c, pos, true, pr, pr->n, NULL);
                    return w->nomem ? PROJECT_NOMEM : PROJECT_OK;
                }
                if (!col->type.array)
                    return PROJECT_OK; /* an array never was this column's value (a type error at the time) */
                map_edit *e = add_edit(w, MAP_EDIT_RESIZE, table, project_first_column(t) + c, pos);
                if (e == NULL)
                    return PROJECT_NOMEM;
                e->n = pr->size;
                end_value(w, e);
                return PROJECT_OK;
            }
            /* the column's path goes through an element of the resized array: gone when it is cut off */
            const char *k = col->parts[n];
            if (is_index(k) && strtoul(k, NULL, 10) >= pr->size)
                return set_column(w, t, table, c, pos, NULL);
            return PROJECT_OK;
        }
        if (rel == REL_EQUAL)
            return set_column(w, t, table, c, pos, pr->value);
        bson_value_t v;
        bool have = (pr->value->value_type == BSON_TYPE_DOCUMENT || pr->value->value_type == BSON_TYPE_ARRAY) &&
                    project_lookup(pr->value->value.v_doc.data, pr->value->value.v_doc.data_len, col->parts + n,
                                   col->nparts - n, &v);
        return set_column(w, t, table, c, pos, have ? &v : NULL);
    }
    /* the edit is inside the column's value */
    if (jsonb) {
        jsonb_edit(w, table, project_first_column(t) + c, pos, true, pr, depth + col->nparts,
                   pr->kind == PRIM_SET || pr->kind == PRIM_BINARY ? pr->value : NULL);
        return w->nomem ? PROJECT_NOMEM : PROJECT_OK;
    }
    if (col->type.array && n == col->nparts + 1 && is_index(parts[col->nparts]) && pr->kind != PRIM_RESIZE &&
        (pr->arr == NULL || pr->arr[depth + col->nparts])) {
        uint32_t index = (uint32_t)strtoul(parts[col->nparts], NULL, 10);
        if (pr->kind == PRIM_SUB || pr->kind == PRIM_BINARY)
            /* a sub-diff of an element: an element of a typed array is a scalar, so the server writes null */
            return element_edit(w, t, table, c, pos, index, NULL);
        return element_edit(w, t, table, c, pos, index, pr->kind == PRIM_SET ? pr->value : NULL);
    }
    if (col->type.array && is_index(parts[col->nparts]) && pr->arr == NULL && !pr->in_sub &&
        (pr->kind == PRIM_SET || pr->kind == PRIM_UNSET)) {
        /* a $v:1 path below an element: the element is (or becomes) a document, which the type cannot take */
        static const uint8_t empty[5] = {5, 0, 0, 0, 0};
        bson_value_t doc = {.value_type = BSON_TYPE_DOCUMENT};
        doc.value.v_doc.data = (uint8_t *)empty;
        doc.value.v_doc.data_len = sizeof empty;
        return element_edit(w, t, table, c, pos, (uint32_t)strtoul(parts[col->nparts], NULL, 10), &doc);
    }
    if (pr->kind == PRIM_SUB || pr->kind == PRIM_BINARY || pr->in_sub || pr->kind == PRIM_RESIZE)
        /* inside a sub-diff of a value the column's type could not hold: the sub-diff that led here made it null
         * (above), or the column already had no value (a type error at the time) */
        return PROJECT_OK;
    return column_type_error(w, t, table, c, pos);
}

/* ---- child tables ---- */

static project_status child_rows_from(walk *w, size_t table, const map_child *ch, const bson_value_t *arr,
                                      uint32_t from)
{
    map_edit *e = add_edit(w, MAP_EDIT_CHILD_ROWS, table, 0, -1);
    if (e == NULL)
        return PROJECT_NOMEM;
    e->n = from;
    if (arr == NULL) {
        end_value(w, e);
        return PROJECT_OK;
    }
    map_rows rows = {.buf = STRBUF_INIT};
    project_status st =
        project_child_rows(w->m, ch, arr, from, w->key, w->key_len, &rows, &w->plan->nulled, w->why, w->whylen);
    if (st == PROJECT_OK && strbuf_failed(&rows.buf))
        st = PROJECT_NOMEM;
    if (st == PROJECT_OK)
        strbuf_append(&w->plan->data, rows.buf.data, rows.buf.len);
    strbuf_free(&rows.buf);
    end_value(w, e);
    return st != PROJECT_OK ? st : w->nomem ? PROJECT_NOMEM : PROJECT_OK;
}

static project_status dispatch(walk *w, const map_table *t, int64_t pos, const prim *pr, size_t depth);

/* The document a $v:1 $set of parts[0..n) = v creates where nothing was: {parts[0]: {parts[1]: ... v}}. */
static bool build_created(bson_t *out, char *const *parts, size_t n, const bson_value_t *v)
{
    if (n == 1)
        return bson_append_value(out, parts[0], -1, v);
    bson_t sub;
    if (!bson_append_document_begin(out, parts[0], -1, &sub))
        return false;
    bool ok = build_created(&sub, parts + 1, n - 1, v);
    return bson_append_document_end(out, &sub) && ok;
}

/* The row of element `index` of child table ch, as edit e's value: projected from value, or a row of nulls when value
 * is NULL (the element set to null). count_nulled: values the types refuse count in the plan's nulled. Ends e. */
static project_status element_row(walk *w, map_edit *e, const map_child *ch, uint32_t index, const bson_value_t *value,
                                  bool count_nulled)
{
    map_rows rows = {.buf = STRBUF_INIT};
    project_status st;
    if (value != NULL) {
        /* the element as a one-element array, so the one path projects it */
        bson_t one = BSON_INITIALIZER;
        bson_append_value(&one, "0", 1, value);
        bson_iter_t it;
        bson_iter_init(&it, &one);
        bson_iter_next(&it);
        st = project_element(w->m, ch, &it, index, w->key, w->key_len, &rows, count_nulled ? &w->plan->nulled : NULL,
                             w->why, w->whylen);
        bson_destroy(&one);
    } else {
        st = project_row(w->m, ch->table, NULL, 0, w->key, w->key_len, index, &rows, &w->plan->nulled, w->why,
                         w->whylen);
    }
    if (st == PROJECT_OK && strbuf_failed(&rows.buf))
        st = PROJECT_NOMEM;
    if (st == PROJECT_OK)
        strbuf_append(&w->plan->data, rows.buf.data, rows.buf.len);
    strbuf_free(&rows.buf);
    end_value(w, e);
    return st != PROJECT_OK ? st : w->nomem ? PROJECT_NOMEM : PROJECT_OK;
}

/* A $v:1 edit of element `index` of child table ch's array, which the entry alone cannot place: it does not say
 * whether the element, or the array, is there (see MAP_EDIT_CHILD_IF). value: the element's new value (UPSERT), the
 * document created (CREATE), or NULL (EXISTS: the element becomes null). */
static project_status child_if(walk *w, size_t table, const map_child *ch, uint32_t index, map_child_if mode,
                               const bson_value_t *value)
{
    map_edit *e = add_edit(w, MAP_EDIT_CHILD_IF, table, (size_t)mode, index);
    if (e == NULL)
        return PROJECT_NOMEM;
    e->n = index;
    return element_row(w, e, ch, index, value, mode != MAP_CHILD_IF_CREATE);
}

static project_status apply_to_child(walk *w, const map_table *t, const map_child *ch, const prim *pr, size_t depth)
{
    char *const *parts = pr->parts + depth;
    size_t n = pr->n - depth;
    size_t table = project_table_number(w->m, ch->table);
    int rel = relate(parts, n, ch->parts, ch->nparts);
    (void)t;
    if (rel == REL_NONE)
        return PROJECT_OK;
    if (pr->kind == PRIM_SUB && rel != REL_BELOW) {
        /* an array diff of the array goes on below; an object diff there (or an array diff above a field name of
         * the path) meets a value of another kind: the server writes null, so there are no elements any more */
        if (rel == REL_EQUAL ? !pr->array : pr->array && !is_index(ch->parts[n]))
            return child_rows_from(w, table, ch, NULL, 0);
        return PROJECT_OK;
    }
    if (pr->kind == PRIM_BINARY && rel != REL_BELOW)
        return child_rows_from(w, table, ch, NULL, 0); /* null over an array; nothing lies below a BinData */
    if (rel == REL_EQUAL || rel == REL_ABOVE) {
        if (pr->kind == PRIM_UNSET)
            return child_rows_from(w, table, ch, NULL, 0);
        if (pr->kind == PRIM_RESIZE) {
            if (rel == REL_EQUAL) {
                project_status st = child_rows_from(w, table, ch, NULL, pr->size);
                if (st != PROJECT_OK)
                    return st;
                map_edit *e = add_edit(w, MAP_EDIT_CHILD_PAD, table, 0, -1);
                if (e == NULL)
                    return PROJECT_NOMEM;
                e->n = pr->size;
                end_value(w, e);
                return PROJECT_OK;
            }
            const char *k = ch->parts[n];
            if (is_index(k) && strtoul(k, NULL, 10) >= pr->size)
                return child_rows_from(w, table, ch, NULL, 0);
            return PROJECT_OK;
        }
        if (rel == REL_EQUAL)
            return child_rows_from(w, table, ch, pr->value, 0);
        bson_value_t v;
        bool have = (pr->value->value_type == BSON_TYPE_DOCUMENT || pr->value->value_type == BSON_TYPE_ARRAY) &&
                    project_lookup(pr->value->value.v_doc.data, pr->value->value.v_doc.data_len, ch->parts + n,
                                   ch->nparts - n, &v);
        return child_rows_from(w, table, ch, have ? &v : NULL, 0);
    }
    /* inside the array: one element (the server's paths into an array always name an index) */
    const char *k = parts[ch->nparts];
    if (!is_index(k) && (pr->in_sub || pr->kind == PRIM_SUB || pr->kind == PRIM_BINARY))
        return PROJECT_OK; /* inside an object diff of the array: nulled above (PRIM_SUB), nothing to edit */
    if (pr->arr != NULL && !pr->arr[depth + ch->nparts])
        /* a $v:2 edit of a field named like an index in an object diff: the path holds a document, which has no
         * rows (the sub-diff that led here removed them, as an insert of the document has none) */
        return PROJECT_OK;
    bool v1 = pr->arr == NULL && w->o->form != OP_FORM_DIFF;
    if (!is_index(k) && v1 &&
        project_on_type_error(ch->table, &(map_column){.on_type_error = MAP_ON_TYPE_ERROR_INHERIT}) ==
            MAP_ON_TYPE_ERROR_NULL)
        return PROJECT_OK; /* a $v:1 field of a document at the path (an array has no named fields): no rows */
    if (!is_index(k)) {
        snprintf(w->why, w->whylen, "child table %s.%s: the update names field \"%s\" of the array at %s",
                 ch->table->name.schema, ch->table->name.table, k, ch->path);
        return PROJECT_TYPE_ERROR;
    }
    uint32_t index = (uint32_t)strtoul(k, NULL, 10);
    if (n == ch->nparts + 1) {
        if (pr->kind == PRIM_RESIZE || pr->kind == PRIM_SUB || pr->kind == PRIM_BINARY)
            /* an element that is an array: not a document the child table takes; a sub-diff of an element that is a
             * document goes on below (one that is not was null or a type error: its row has no values) */
            return PROJECT_OK;
        if (v1)
            return child_if(w, table, ch, index, pr->kind == PRIM_SET ? MAP_CHILD_IF_UPSERT : MAP_CHILD_IF_EXISTS,
                            pr->kind == PRIM_SET ? pr->value : NULL);
        map_edit *pad = add_edit(w, MAP_EDIT_CHILD_PAD, table, 0, -1);
        if (pad == NULL)
            return PROJECT_NOMEM;
        pad->n = index; /* MongoDB pads with nulls up to a new index */
        end_value(w, pad);
        map_edit *e = add_edit(w, MAP_EDIT_CHILD_ROW, table, 0, index);
        if (e == NULL)
            return PROJECT_NOMEM;
        return element_row(w, e, ch, index, pr->kind == PRIM_SET ? pr->value : NULL, true);
    }
    if (v1 && pr->kind == PRIM_SET) {
        /* a $v:1 path below element `index`: when the element is not there, the server pads the array with nulls
         * and creates it as the document that holds the path; the edits below then change the row made of it */
        bson_t created = BSON_INITIALIZER;
        bool ok = build_created(&created, parts + ch->nparts + 1, n - ch->nparts - 1, pr->value);
        bson_value_t v = {.value_type = BSON_TYPE_DOCUMENT};
        v.value.v_doc.data = (uint8_t *)bson_get_data(&created);
        v.value.v_doc.data_len = created.len;
        project_status st = ok ? child_if(w, table, ch, index, MAP_CHILD_IF_CREATE, &v) : PROJECT_NOMEM;
        bson_destroy(&created);
        if (st != PROJECT_OK)
            return st;
    }
    return dispatch(w, ch->table, index, pr, depth + ch->nparts + 1);
}

/* ---- the rest ---- */

/* Whether the edit's path is a column's or child table's path, or inside one (then the rest does not hold it). */
static bool taken(const map_table *t, char *const *parts, size_t n)
{
    for (size_t c = 0; c < t->ncols; c++) {
        int rel = relate(parts, n, t->cols[c].parts, t->cols[c].nparts);
        if (rel == REL_EQUAL || rel == REL_BELOW)
            return true;
    }
    for (size_t c = 0; c < t->nchildren; c++) {
        int rel = relate(parts, n, t->children[c].parts, t->children[c].nparts);
        if (rel == REL_EQUAL || rel == REL_BELOW)
            return true;
    }
    return false;
}

/* The length of the column or child path of t that the edit's path is, or lies inside (taken() said there is one). */
static size_t taken_at(const map_table *t, char *const *parts, size_t n)
{
    for (size_t c = 0; c < t->ncols; c++) {
        int rel = relate(parts, n, t->cols[c].parts, t->cols[c].nparts);
        if (rel == REL_EQUAL || rel == REL_BELOW)
            return t->cols[c].nparts;
    }
    for (size_t c = 0; c < t->nchildren; c++) {
        int rel = relate(parts, n, t->children[c].parts, t->children[c].nparts);
        if (rel == REL_EQUAL || rel == REL_BELOW)
            return t->children[c].nparts;
    }
    return 0;
}

static project_status apply_to_rest(walk *w, const map_table *t, size_t table, int64_t pos, const prim *pr,
                                    size_t depth)
{
    char *const *parts = pr->parts + depth;
    size_t n = pr->n - depth;
    size_t field = map_table_fields(t) - 1;
    if (t->rest == MAP_REST_DROP)
        return PROJECT_OK;
    if (t->rest == MAP_REST_DOC && pos < 0)
        return PROJECT_OK; /* the doc column takes the whole update (MAP_EDIT_UPDATE) */
    if (t->rest == MAP_REST_EXTRA && taken(t, parts, n)) {
        size_t len = taken_at(t, parts, n);
        if (len > 1 && pr->kind == PRIM_SET && pr->arr == NULL && !pr->in_sub && w->o->form != OP_FORM_DIFF) {
            /* a $v:1 path creates its missing parents, and extra keeps the documents above a mapped path (without
             * it): the parents are made there by setting the mapped path and removing it again */
            static const bson_value_t null_value = {.value_type = BSON_TYPE_NULL};
            prim made = *pr;
            made.n = depth + len;
            jsonb_edit(w, table, field, pos, false, &made, depth, &null_value);
            made.kind = PRIM_UNSET;
            jsonb_edit(w, table, field, pos, false, &made, depth, NULL);
        }
        return w->nomem ? PROJECT_NOMEM : PROJECT_OK; /* a column or child table holds it, not extra */
    }
    if (t->rest == MAP_REST_EXTRA && pr->kind == PRIM_SET && pr->value->value_type == BSON_TYPE_DOCUMENT) {
        /* the value without the paths columns and child tables take below this one */
        char *prefix[PLAN_MAX_DEPTH + 65];
        if (n > PLAN_MAX_DEPTH)
            return PROJECT_OK;
        for (size_t i = 0; i < n; i++)
            prefix[i] = parts[i];
        bson_t stripped;
        if (project_strip(t, pr->value->value.v_doc.data, pr->value->value.v_doc.data_len, prefix, n, &stripped) !=
            PROJECT_OK)
            return PROJECT_NOMEM;
        bson_value_t v = {.value_type = BSON_TYPE_DOCUMENT};
        v.value.v_doc.data = (uint8_t *)bson_get_data(&stripped);
        v.value.v_doc.data_len = stripped.len;
        jsonb_edit(w, table, field, pos, false, pr, depth, &v);
        bson_destroy(&stripped);
    } else {
        jsonb_edit(w, table, field, pos, false, pr, depth, pr->value);
    }
    return w->nomem ? PROJECT_NOMEM : PROJECT_OK;
}

/* Matches one primitive edit, whose path below depth is relative to a row of t, against t's map. */
static project_status dispatch(walk *w, const map_table *t, int64_t pos, const prim *pr, size_t depth)
{
    size_t table = project_table_number(w->m, t);
    for (size_t c = 0; c < t->ncols; c++) {
        if (pos < 0 && c == t->key)
            continue; /* the _id never changes */
        project_status st = apply_to_column(w, t, table, c, pos, pr, NULL, depth);
        if (st != PROJECT_OK)
            return st;
    }
    for (size_t c = 0; c < t->nchildren; c++) {
        project_status st = apply_to_child(w, t, &t->children[c], pr, depth);
        if (st != PROJECT_OK)
            return st;
    }
    return apply_to_rest(w, t, table, pos, pr, depth);
}

/* ---- reading the update forms ---- */

#define MAX_PARTS (PLAN_MAX_DEPTH + 1)

typedef struct {
    char *parts[MAX_PARTS];
    bool arr[MAX_PARTS]; /* $v:2: parts[i] is an index in an array diff */
    size_t n;
    char *owned; /* a dotted path split in place (one per $v:1 field) */
} pathbuf;

static project_status emit(walk *w, prim_kind kind, char *const *parts, size_t n, const bool *arr,
                           const bson_value_t *value, uint32_t size)
{
    /* from a $v:2 diff, an edit below the top level is inside a sub-diff; a $v:1 path creates its parents */
    prim pr = {.kind = kind,
               .parts = parts,
               .n = n,
               .value = value,
               .size = size,
               .in_sub = w->o->form == OP_FORM_DIFF && n > 1,
               .arr = w->o->form == OP_FORM_DIFF ? arr : NULL};
    return dispatch(w, &w->m->table, -1, &pr, 0);
}

static project_status emit_prim(walk *w, const prim *pr)
{
    return dispatch(w, &w->m->table, -1, pr, 0);
}

static project_status walk_diff(walk *w, const uint8_t *data, size_t len, pathbuf *pb, bool array);

static project_status walk_subdiff(walk *w, bson_iter_t *it, pathbuf *pb, const char *name, bool in_array)
{
    if (pb->n >= MAX_PARTS || !BSON_ITER_HOLDS_DOCUMENT(it))
        return PROJECT_OK;
    uint32_t l;
    const uint8_t *d;
    bson_iter_document(it, &l, &d);
    bson_iter_t a;
    bool array = bson_iter_init_from_data(&a, d, l) && bson_iter_find(&a, "a") && bson_iter_as_bool(&a);
    pb->arr[pb->n] = in_array;
    pb->parts[pb->n++] = (char *)name;
    prim sub = {.kind = PRIM_SUB, .parts = pb->parts, .n = pb->n, .array = array, .arr = pb->arr};
    project_status st = emit_prim(w, &sub);
    if (st == PROJECT_OK)
        st = walk_diff(w, d, l, pb, array);
    pb->n--;
    return st;
}

/* The entries of a `b` section (MongoDB 8.x): {field: {o: offset, d: BinData}}. */
static project_status walk_binary(walk *w, bson_iter_t *section, pathbuf *pb)
{
    bson_iter_t f;
    project_status st = PROJECT_OK;
    if (!bson_iter_recurse(section, &f))
        return PROJECT_OK;
    while (st == PROJECT_OK && bson_iter_next(&f)) {
        bson_iter_t o, d;
        if (!BSON_ITER_HOLDS_DOCUMENT(&f) || !bson_iter_recurse(&f, &o) || !bson_iter_find(&o, "o") ||
            !bson_iter_recurse(&f, &d) || !bson_iter_find(&d, "d") || !BSON_ITER_HOLDS_BINARY(&d))
            continue; /* the decoder refuses malformed entries (source/v2diff.c) */
        int64_t off = bson_iter_as_int64(&o);
        bson_subtype_t subtype;
        uint32_t blen;
        const uint8_t *bytes;
        bson_iter_binary(&d, &subtype, &blen, &bytes);
        pb->arr[pb->n] = false;
        pb->parts[pb->n++] = (char *)bson_iter_key(&f);
        prim pr = {.kind = PRIM_BINARY,
                   .parts = pb->parts,
                   .n = pb->n,
                   .arr = pb->arr,
                   .value = bson_iter_value(&f),
                   .size = off < 0           ? 0
                           : off > INT32_MAX ? (uint32_t)INT32_MAX
                                             : (uint32_t)off,
                   .bin = bytes,
                   .bin_len = blen};
        st = emit_prim(w, &pr);
        pb->n--;
    }
    return st;
}

/* A $v:2 diff at the path in pb (an object diff, or an array diff when array). */
static project_status walk_diff(walk *w, const uint8_t *data, size_t len, pathbuf *pb, bool array)
{
    bson_iter_t it;
    if (array) {
        /* the resize first: the element edits name indexes of the new length */
        if (bson_iter_init_from_data(&it, data, len) && bson_iter_find(&it, "l")) {
            project_status st =
                emit(w, PRIM_RESIZE, pb->parts, pb->n, pb->arr, NULL, (uint32_t)bson_iter_as_int64(&it));
            if (st != PROJECT_OK)
                return st;
        }
        if (!bson_iter_init_from_data(&it, data, len))
            return PROJECT_OK;
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if ((k[0] != 'u' && k[0] != 's') || !is_index(k + 1) || pb->n >= MAX_PARTS)
                continue;
            project_status st;
            if (k[0] == 'u') {
                pb->arr[pb->n] = true;
                pb->parts[pb->n++] = (char *)(k + 1);
                st = emit(w, PRIM_SET, pb->parts, pb->n, pb->arr, bson_iter_value(&it), 0);
                pb->n--;
            } else {
                st = walk_subdiff(w, &it, pb, k + 1, true);
            }
            if (st != PROJECT_OK)
                return st;
        }
        return PROJECT_OK;
    }
    if (!bson_iter_init_from_data(&it, data, len))
        return PROJECT_OK;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        project_status st = PROJECT_OK;
        if ((strcmp(k, "d") == 0 || strcmp(k, "u") == 0 || strcmp(k, "i") == 0) && BSON_ITER_HOLDS_DOCUMENT(&it) &&
            pb->n < MAX_PARTS) {
            bson_iter_t f;
            bson_iter_recurse(&it, &f);
            while (st == PROJECT_OK && bson_iter_next(&f)) {
                pb->arr[pb->n] = false;
                pb->parts[pb->n++] = (char *)bson_iter_key(&f);
                st = k[0] == 'd' ? emit(w, PRIM_UNSET, pb->parts, pb->n, pb->arr, NULL, 0)
                                 : emit(w, PRIM_SET, pb->parts, pb->n, pb->arr, bson_iter_value(&f), 0);
                pb->n--;
            }
        } else if (strcmp(k, "b") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it) && pb->n < MAX_PARTS) {
            st = walk_binary(w, &it, pb);
        } else if (k[0] == 's' && k[1] != '\0') {
            st = walk_subdiff(w, &it, pb, k + 1, false);
        }
        if (st != PROJECT_OK)
            return st;
    }
    return PROJECT_OK;
}

/* One $v:1 field path, split at the dots (into pb, which owns the copy). */
static bool split_path(pathbuf *pb, const char *dotted)
{
    free(pb->owned);
    pb->owned = strdup(dotted);
    if (pb->owned == NULL)
        return false;
    pb->n = 0;
    char *p = pb->owned;
    for (;;) {
        if (pb->n == MAX_PARTS)
            return true;
        pb->parts[pb->n++] = p;
        char *dot = strchr(p, '.');
        if (dot == NULL)
            return true;
        *dot = '\0';
        p = dot + 1;
    }
}

static project_status walk_modifier(walk *w, const uint8_t *data, size_t len)
{
    bson_iter_t it;
    pathbuf pb = {.n = 0};
    project_status st = PROJECT_OK;
    if (!bson_iter_init_from_data(&it, data, len))
        return PROJECT_OK;
    while (st == PROJECT_OK && bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        bool set = strcmp(k, "$set") == 0, unset = strcmp(k, "$unset") == 0;
        if ((!set && !unset) || !BSON_ITER_HOLDS_DOCUMENT(&it))
            continue;
        bson_iter_t f;
        bson_iter_recurse(&it, &f);
        while (st == PROJECT_OK && bson_iter_next(&f)) {
            if (!split_path(&pb, bson_iter_key(&f))) {
                st = PROJECT_NOMEM;
                break;
            }
            st = set ? emit(w, PRIM_SET, pb.parts, pb.n, NULL, bson_iter_value(&f), 0)
                     : emit(w, PRIM_UNSET, pb.parts, pb.n, NULL, NULL, 0);
        }
    }
    free(pb.owned);
    return st;
}

project_status map_plan_update(const map_collection *m, const op *o, map_plan *out, char *why, size_t whylen)
{
    strbuf_reset(&out->data, 0);
    out->n = 0;
    out->replace = false;
    out->nulled = 0;
    project_status st = map_project_key(m, &o->id, &out->data, why, whylen);
    if (st != PROJECT_OK)
        return st;
    out->key_off = 0;
    out->key_len = (uint32_t)out->data.len;
    if (o->form == OP_FORM_REPLACE) {
        out->replace = true;
        return map_project_document(m, o->doc, o->doc_len, &o->id, &out->rows, &out->nulled, why, whylen);
    }
    /* the key moves into its own buffer: plan data grows and may move */
    uint8_t *key = malloc(out->key_len ? out->key_len : 1);
    if (key == NULL)
        return PROJECT_NOMEM;
    memcpy(key, out->data.data, out->key_len);
    walk w = {.m = m, .o = o, .plan = out, .why = why, .whylen = whylen, .key = key, .key_len = out->key_len};
    if (o->form == OP_FORM_DIFF) {
        bson_iter_t it;
        pathbuf pb = {.n = 0};
        if (bson_iter_init_from_data(&it, o->doc, o->doc_len) && bson_iter_find(&it, "diff") &&
            BSON_ITER_HOLDS_DOCUMENT(&it)) {
            uint32_t l;
            const uint8_t *d;
            bson_iter_document(&it, &l, &d);
            st = walk_diff(&w, d, l, &pb, false);
        }
    } else {
        st = walk_modifier(&w, o->doc, o->doc_len);
    }
    if (st == PROJECT_OK && !w.nomem && m->table.rest == MAP_REST_DOC) {
        /* the doc column takes the update as logged */
        map_edit *e = add_edit(&w, MAP_EDIT_UPDATE, 0, map_table_fields(&m->table) - 1, -1);
        if (e != NULL) {
            strbuf_putc(&out->data, 1);
            ejson_error err;
            if (ejson_write_document(&out->data, o->doc, o->doc_len, &err) == EJSON_NOMEM)
                w.nomem = true;
            end_value(&w, e);
        }
    }
    flush_jsonb(&w);
    free(key);
    if (st == PROJECT_OK && w.nomem)
        st = PROJECT_NOMEM;
    return st;
}

static void plan_free(void *p)
{
    map_plan_free(p);
    free(p);
}

static bool prepare_op(op *o, const map_collection *m)
{
    map_plan *p = malloc(sizeof *p);
    if (p == NULL)
        return false;
    map_plan_init(p);
    char why[512] = "";
    project_status st;
    if (o->kind == OP_UPDATE) {
        st = map_plan_update(m, o, p, why, sizeof why);
    } else {
        st = map_project_key(m, &o->id, &p->data, why, sizeof why);
        p->key_len = (uint32_t)p->data.len;
        if (st == PROJECT_OK && o->kind == OP_INSERT) {
            p->replace = true;
            st = map_project_document(m, o->doc, o->doc_len, &o->id, &p->rows, &p->nulled, why, sizeof why);
        }
    }
    if (st == PROJECT_NOMEM || strbuf_failed(&p->data) || strbuf_failed(&p->rows.buf)) {
        plan_free(p);
        return false;
    }
    o->map = m;
    if (st == PROJECT_TYPE_ERROR) {
        plan_free(p);
        o->refusal = strdup(why);
        return o->refusal != NULL;
    }
    o->mapped = p;
    o->mapped_free = plan_free;
    o->mapped_bytes = (uint32_t)(sizeof *p + p->data.cap + p->rows.buf.cap + p->cap * sizeof *p->edits);
    o->mapped_len = (uint32_t)(p->data.len + p->rows.buf.len);
    return true;
}

bool map_prepare_entry(op_entry *e, const map_set *maps)
{
    if (maps == NULL || maps->n == 0)
        return true;
    for (size_t i = 0; i < e->n; i++) {
        op *o = &e->ops[i];
        if ((o->kind != OP_INSERT && o->kind != OP_UPDATE && o->kind != OP_DELETE) || o->mapped != NULL ||
            o->refusal != NULL || o->db == NULL || o->coll == NULL || o->bucket)
            continue; /* (a bucket's rows are made by the sink: sink/tseries.c) */
        const map_collection *m = map_find(maps, o->db, o->coll);
        if (m != NULL && !prepare_op(o, m))
            return false;
    }
    return true;
}

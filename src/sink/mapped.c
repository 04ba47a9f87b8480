/*
 * mapped.c — the typed table kind (map/map.h, docs/mapping.md): a collection's tables made or checked through the
 * catalog, their statements prepared, whole documents upserted through the row writer (sink/rows.h), and the plans
 * the reader thread made (map/project.h) turned into statements. Their SQL is built by mapped_sql.c; runs of inserts
 * go by COPY from pg.c like the jsonb shape's.
 *
 * Statements per map, prepared once per connection (<id> is the collection's table id, <k> a table number):
 *   I<id>_<k>  upsert one row of table k (INSERT ... ON CONFLICT (key) DO UPDATE): replayed inserts, replacements,
 *              child rows;
 *   D<id>      delete the collection's row by key;
 *   C<id>_<k>  delete child table k's rows of one parent from a position on (0: all of them);
 *   P<id>_<k>  add child table k's missing rows of one parent below a position (all NULL: MongoDB pads with null).
 * Edits of columns go out as one UPDATE per row (split where one column is edited twice), built per op and sent
 * unnamed, with every value a binary parameter. Everything is pipelined like the jsonb shape's statements.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_internal.h"
#include "sink/mapped.h"
#include "sink/pgerror.h"
#include "sink/rows.h"
#include "util/log.h"
#include "util/strbuf.h"

static void free_tables(table *t)
{
    sink_mapped_tables_free(t->mtabs, t->nmtabs);
    t->mtabs = NULL;
    t->nmtabs = 0;
}

static bool build_tables(sink *s, table *t)
{
    if (t->mtabs == NULL)
        t->mtabs = sink_mapped_tables_build(s->conn, t->map, &t->nmtabs);
    return t->mtabs != NULL;
}

static bool ensure_one(sink *s, table *t, size_t k, const op_pos *pos)
{
    sink_mapped_table *m = &t->mtabs[k];
    const char *values[8] = {s->service,        t->db,           t->coll,     m->mt->name.schema,
                             m->mt->name.table, m->columns_json, m->key_json, m->mt->adopt ? "true" : "false"};
    if (sink_catalog_call(s, t, SINK_MAPPED_ENSURE_SQL, 8, values, pos) != APPLY_OK)
        return false;
    char name[48];
    snprintf(name, sizeof name, "I%u_%zu", t->id, k);
    if (sink_prepare(s, t, name, m->upsert_sql) != APPLY_OK)
        return false;
    if (k == 0) {
        snprintf(name, sizeof name, "D%u", t->id);
        return sink_prepare(s, t, name, m->delete_sql) == APPLY_OK;
    }
    snprintf(name, sizeof name, "C%u_%zu", t->id, k);
    if (sink_prepare(s, t, name, m->children_sql) != APPLY_OK)
        return false;
    snprintf(name, sizeof name, "P%u_%zu", t->id, k);
    return sink_prepare(s, t, name, m->pad_sql) == APPLY_OK;
}

static bool prepare_tables(sink *s, table *t, const op_pos *pos)
{
    if (!build_tables(s, t)) {
        sink_set_err(s, APPLY_NOMEM, NULL, "out of memory preparing the tables of %s.%s", t->db, t->coll);
        return false;
    }
    for (size_t k = 0; k < t->nmtabs; k++)
        if (!ensure_one(s, t, k, pos)) {
            if (s->failed == APPLY_OK)
                sink_set_err(s, APPLY_NOMEM, NULL, "out of memory preparing the tables of %s.%s", t->db, t->coll);
            return false;
        }
    return true;
}

/* ---- sending ---- */

typedef struct {
    const char **values;
    int *lengths, *formats;
    int n, cap;
    bool nomem;
} params;

static void params_free(params *p)
{
    free(p->values);
    free(p->lengths);
    free(p->formats);
}

static void param(params *p, const void *data, int len)
{
    if (p->n == p->cap) {
        int cap = p->cap ? p->cap * 2 : 16;
        const char **v = realloc(p->values, (size_t)cap * sizeof *v);
        if (v)
            p->values = v;
        int *l = realloc(p->lengths, (size_t)cap * sizeof *l);
        if (l)
            p->lengths = l;
        int *f = realloc(p->formats, (size_t)cap * sizeof *f);
        if (f)
            p->formats = f;
        if (!v || !l || !f) {
            p->nomem = true;
            return;
        }
        p->cap = cap;
    }
    p->values[p->n] = data;
    p->lengths[p->n] = len < 0 ? 0 : len;
    p->formats[p->n] = 1;
    p->n++;
}

/* A framed field (int32 length, bytes; -1 for NULL) as a parameter; returns what follows it. */
static void param_field(params *p, const uint8_t *f)
{
    map_field v;
    map_field_read(f, &v);
    param(p, v.value, v.value == NULL ? -1 : v.len);
}

/* Every field of a tuple as a parameter. */
static void param_tuple(params *p, const uint8_t *tuple)
{
    map_tuple_iter it;
    map_field v;
    map_tuple_iter_init(&it, tuple);
    while (map_tuple_next(&it, &v))
        param(p, v.value, v.value == NULL ? -1 : v.len);
}

/* Sends a statement with binary parameters, pipelined: the prepared statement `name`, or (name NULL) sql unnamed. */
static sink_status send_stmt(sink *s, const table *t, pending_kind kind, const char *name, const char *sql, int n,
                             const char *const *values, const int *lengths, const int *formats, const op_pos *pos)
{
    if (!pipe_push_pending(s, kind, t, pos))
        return s->failed;
    size_t bytes = (name != NULL ? 0 : strlen(sql)) + 64;
    for (int i = 0; i < n; i++)
        bytes += (size_t)lengths[i];
    s->stats.bytes += bytes;
    int sent = name != NULL ? PQsendQueryPrepared(s->conn, name, n, values, lengths, formats, 0)
                            : PQsendQueryParams(s->conn, sql, n, NULL, values, lengths, formats, 0);
    return pipe_after_send(s, sent == 1, bytes);
}

static sink_status send_params(sink *s, const table *t, pending_kind kind, const char *name, const char *sql,
                               const params *p, const op_pos *pos)
{
    if (p->nomem) {
        sink_set_err(s, APPLY_NOMEM, NULL, "out of memory sending a statement for %s.%s", t->db, t->coll);
        return s->failed;
    }
    return send_stmt(s, t, kind, name, sql, p->n, p->values, p->lengths, p->formats, pos);
}

static sink_status send_prepared(sink *s, const table *t, pending_kind kind, const char *name, const params *p,
                                 const op_pos *pos)
{
    return send_params(s, t, kind, name, NULL, p, pos);
}

static sink_status send_sql(sink *s, const table *t, pending_kind kind, const char *sql, const params *p,
                            const op_pos *pos)
{
    return send_params(s, t, kind, NULL, sql, p, pos);
}

/* Deletes child table k's rows of the parent `key` (a framed field) from position `from` on. */
static sink_status delete_children(sink *s, const table *t, size_t k, const uint8_t *key, uint32_t from,
                                   const op_pos *pos)
{
    params p = {0};
    param_field(&p, key);
    uint8_t be[4] = {(uint8_t)(from >> 24), (uint8_t)(from >> 16), (uint8_t)(from >> 8), (uint8_t)from};
    param(&p, be, 4);
    char name[48];
    snprintf(name, sizeof name, "C%u_%zu", t->id, k);
    sink_status st = send_prepared(s, t, P_DELETE, name, &p, pos);
    params_free(&p);
    return st;
}

/* A row or edit names a table past the map's: the reader projected it with another map than the sink's, which cannot
 * happen. It is not skipped: the session ends without committing, and the process stops (exit 5) before the entry,
 * whose data would otherwise be left out of PostgreSQL while the checkpoint passed it. */
static sink_status past_tables(sink *s, const table *t, unsigned k, const op_pos *pos)
{
    char where[32];
    sink_fmt_pos(pos, where, sizeof where);
    sink_set_err(s, APPLY_UNRECORDABLE, NULL,
                 "the rows of %s.%s (oplog entries up to %s) name table %u of its map, which has %zu tables: the "
                 "entry was projected with another map (a bug); it is not applied",
                 t->db, t->coll, where, k, t->nmtabs);
    return s->failed;
}

/* The sink's way of sending the row writer's statements: pipelined, by the map's prepared statements. */
typedef struct {
    sink *s;
    const table *t;
    const op_pos *pos;
} row_sender;

static bool send_row_stmt(void *arg, sink_rows_stmt stmt, size_t k, int n, const char *const *values,
                          const int *lengths, const int *formats)
{
    const row_sender *r = arg;
    char name[48];
    snprintf(name, sizeof name, "%c%u_%zu", stmt == SINK_ROWS_UPSERT ? 'I' : 'C', r->t->id, k);
    return send_stmt(r->s, r->t, stmt == SINK_ROWS_UPSERT ? P_INSERT : P_DELETE, name, NULL, n, values, lengths,
                     formats, r->pos) == APPLY_OK;
}

static sink_rows_dest dest_of(const table *t)
{
    sink_rows_dest d = {.mtabs = t->mtabs, .nmtabs = t->nmtabs};
    return d;
}

/* The rows of whole documents (records): each parent row upserted with its child rows replaced (sink/rows.h). */
static sink_status upsert_records(sink *s, const table *t, const map_rows *rows, const op_pos *pos)
{
    row_sender r = {s, t, pos};
    sink_rows_dest d = dest_of(t);
    char why[200];
    switch (sink_rows_upsert(&d, rows, send_row_stmt, &r, why, sizeof why)) {
    case SINK_ROWS_OK:
        return APPLY_OK;
    case SINK_ROWS_SEND_FAILED:
        return s->failed;
    case SINK_ROWS_NOMEM:
        sink_set_err(s, APPLY_NOMEM, NULL, "out of memory sending the rows of %s.%s", t->db, t->coll);
        return s->failed;
    case SINK_ROWS_MALFORMED:
    default: {
        char where[32];
        sink_fmt_pos(pos, where, sizeof where);
        sink_set_err(s, APPLY_UNRECORDABLE, NULL,
                     "the rows of %s.%s (oplog entries up to %s): %s: the entry was projected with another map (a "
                     "bug); it is not applied",
                     t->db, t->coll, where, why);
        return s->failed;
    }
    }
}

static sink_status upsert_batch(sink *s, const table *t, const sink_batch *b, const op_pos *pos)
{
    s->stats.rows_inserted += sink_batch_rows(b);
    return upsert_records(s, t, sink_batch_mapped(b), pos);
}

/* ---- updates ---- */

/* One UPDATE of a row being built: SET clauses and their parameters ($1 the key, $2 the position of a child row). */
typedef struct {
    int table;
    int64_t pos;
    strbuf set;
    params p;
    uint8_t pos_be[4];
    bool *touched; /* fields already set in this statement */
    size_t nfields;
} row_update;

static sink_status flush_update(sink *s, const table *t, row_update *u, const op_pos *pos)
{
    if (u->table < 0)
        return APPLY_OK;
    const sink_mapped_table *m = &t->mtabs[u->table];
    strbuf sql = STRBUF_INIT;
    if (m->mt->parent_key_column != NULL)
        strbuf_printf(&sql, "UPDATE %s SET %s WHERE %s = $1 AND %s = $2", m->qname, u->set.data, m->qfields[0],
                      m->qfields[1]);
    else
        strbuf_printf(&sql, "UPDATE %s SET %s WHERE %s = $1", m->qname, u->set.data, m->qfields[m->mt->key]);
    sink_status st;
    if (strbuf_failed(&sql) || strbuf_failed(&u->set)) {
        sink_set_err(s, APPLY_NOMEM, NULL, "out of memory building an update of %s.%s", t->db, t->coll);
        st = s->failed;
    } else {
        st = send_sql(s, t, P_UPDATE, sql.data, &u->p, pos);
    }
    strbuf_free(&sql);
    strbuf_free(&u->set);
    params_free(&u->p);
    free(u->touched);
    u->touched = NULL;
    u->table = -1;
    return st;
}

static bool begin_update(row_update *u, const table *t, int tnum, int64_t pos, const uint8_t *key)
{
    memset(u, 0, sizeof *u);
    u->table = tnum;
    u->pos = pos;
    strbuf_init(&u->set);
    u->nfields = t->mtabs[tnum].nfields;
    u->touched = calloc(u->nfields ? u->nfields : 1, sizeof *u->touched);
    param_field(&u->p, key);
    if (t->mtabs[tnum].mt->parent_key_column != NULL) {
        uint32_t v = (uint32_t)pos;
        u->pos_be[0] = (uint8_t)(v >> 24);
        u->pos_be[1] = (uint8_t)(v >> 16);
        u->pos_be[2] = (uint8_t)(v >> 8);
        u->pos_be[3] = (uint8_t)v;
        param(&u->p, u->pos_be, 4);
    }
    return u->touched != NULL && !u->p.nomem;
}

/* Adds one column edit's SET clause. */
static void add_clause(row_update *u, const sink_mapped_table *m, const map_edit *e, const uint8_t *data)
{
    const char *f = m->qfields[e->field];
    if (u->set.len > 0)
        strbuf_puts(&u->set, ", ");
    const void *value = e->null ? NULL : data + e->off;
    int len = e->null ? -1 : (int)e->len;
    switch (e->kind) {
    case MAP_EDIT_COLUMN:
        param(&u->p, value, len);
        strbuf_printf(&u->set, "%s = $%d", f, u->p.n);
        break;
    case MAP_EDIT_ELEMENT: {
        /* a NULL column stays NULL: its value is no array (an element edit of a missing field, or of a document, as
         * a $v:1 path names them, leaves a document, which the type cannot take) */
        param(&u->p, value, len);
        strbuf_printf(&u->set, "%s = CASE WHEN %s IS NULL THEN NULL ELSE oplog2pg.set_element(%s, %u, $%d) END", f, f,
                      f, e->n, u->p.n);
        break;
    }
    case MAP_EDIT_RESIZE:
        strbuf_printf(&u->set, "%s = oplog2pg.resize_array(%s, %u)", f, f, e->n);
        break;
    case MAP_EDIT_JSONB:
        param(&u->p, value, len);
        if (e->field < m->nfields - 1 || m->mt->rest == MAP_REST_DROP)
            /* a jsonb column: its value wrapped as {"v": value}, so that edits of the value itself work too; a
             * NULL is a missing field there (a $v:1 path below it creates it; the server refuses one through a
             * null, and its applier skips a sub-diff of a missing field) */
            strbuf_printf(&u->set,
                          "%s = NULLIF(oplog2pg.apply_edits(CASE WHEN %s IS NULL THEN '{}'::jsonb ELSE "
                          "jsonb_build_object('v', %s) END, $%d) -> 'v', 'null'::jsonb)",
                          f, f, f, u->p.n);
        else
            strbuf_printf(&u->set, "%s = oplog2pg.apply_edits(%s, $%d)", f, f, u->p.n);
        break;
    case MAP_EDIT_BINARY:
        /* NULL stays NULL: a missing field stays missing, and a null is not a BinData (the server writes null) */
        param(&u->p, value, len);
        strbuf_printf(&u->set, "%s = substring(%s FROM 1 FOR %u) || $%d::bytea", f, f, e->n, u->p.n);
        break;
    case MAP_EDIT_UPDATE:
        param(&u->p, value, len);
        strbuf_printf(&u->set, "%s = oplog2pg.apply_update(%s, $%d)", f, f, u->p.n);
        break;
    default:
        break;
    }
}

static bool is_column_edit(map_edit_kind k)
{
    return k == MAP_EDIT_COLUMN || k == MAP_EDIT_ELEMENT || k == MAP_EDIT_RESIZE || k == MAP_EDIT_JSONB ||
           k == MAP_EDIT_UPDATE || k == MAP_EDIT_BINARY;
}

/* A MAP_EDIT_CHILD_IF: its guard (when the table has one), then its statement, with the row's fields as parameters. */
static sink_status apply_child_if(sink *s, const table *t, const map_edit *e, const uint8_t *data, const op_pos *pos)
{
    map_rows rows = {.buf = {.data = (char *)data + e->off, .len = e->len}};
    map_row_iter it;
    map_rows_iter(&rows, &it);
    uint16_t k;
    const uint8_t *tuple;
    uint32_t len;
    if (!map_rows_next(&it, &k, &tuple, &len))
        return APPLY_OK; /* no row: the element's value was refused (a type error said so) */
    if (k >= t->nmtabs || k != e->table)
        return past_tables(s, t, k, pos);
    const sink_mapped_table *m = &t->mtabs[k];
    unsigned mode = e->field;
    if (mode > MAP_CHILD_IF_EXISTS || m->if_sql[mode] == NULL) {
        sink_set_err(s, APPLY_UNRECORDABLE, NULL,
                     "an edit of element %u of a child array of %s.%s cannot be applied to %s (edit %u, %zu fields); "
                     "it is not applied",
                     e->n, t->db, t->coll, m->qname, mode, m->nfields);
        return s->failed;
    }
    params p = {0};
    param_tuple(&p, tuple);
    sink_status st = APPLY_OK;
    if (mode != MAP_CHILD_IF_EXISTS && m->guard_sql != NULL && p.n >= 2) {
        const map_child *ch = NULL;
        const map_table *root = t->mtabs[0].mt;
        for (size_t i = 0; i < root->nchildren; i++)
            if (root->children[i].table == m->mt)
                ch = &root->children[i];
        char msg[512];
        if (root->rest != MAP_REST_DOC)
            snprintf(msg, sizeof msg,
                     "a $v:1 update names element %u of the array at %s, and %s has no rows of this document: "
                     "whether %s holds an empty array, a document or nothing cannot be told without the document "
                     "(rest = doc keeps it)",
                     e->n, ch ? ch->path : "?", m->qname, ch ? ch->path : "?");
        else
            snprintf(msg, sizeof msg,
                     "child table %s takes the array at %s, which holds no array here (a $v:1 update names its "
                     "element %u)",
                     m->qname, ch ? ch->path : "?", e->n);
        params g = {0};
        param(&g, p.values[0], p.values[0] == NULL ? -1 : p.lengths[0]);
        param(&g, p.values[1], p.lengths[1]);
        param(&g, msg, (int)strlen(msg));
        st = send_sql(s, t, P_UPDATE, m->guard_sql, &g, pos);
        params_free(&g);
    }
    if (st == APPLY_OK)
        st = send_sql(s, t, P_UPDATE, m->if_sql[mode], &p, pos);
    params_free(&p);
    return st;
}

static sink_status apply_plan(sink *s, const table *t, const map_plan *plan, const op_pos *pos)
{
    const uint8_t *data = (const uint8_t *)plan->data.data;
    const uint8_t *key = data + plan->key_off;
    row_update u = {.table = -1};
    sink_status st = APPLY_OK;
    for (size_t i = 0; i < plan->n && st == APPLY_OK; i++) {
        const map_edit *e = &plan->edits[i];
        if (e->table >= t->nmtabs) {
            st = past_tables(s, t, e->table, pos);
            break;
        }
        if (is_column_edit(e->kind)) {
            if (u.table != e->table || u.pos != e->pos || (e->field < u.nfields && u.touched[e->field])) {
                st = flush_update(s, t, &u, pos);
                if (st != APPLY_OK)
                    break;
                if (!begin_update(&u, t, e->table, e->pos, key)) {
                    sink_set_err(s, APPLY_NOMEM, NULL, "out of memory building an update of %s.%s", t->db, t->coll);
                    st = s->failed;
                    break;
                }
            }
            add_clause(&u, &t->mtabs[e->table], e, data);
            if (e->field < u.nfields)
                u.touched[e->field] = true;
            continue;
        }
        st = flush_update(s, t, &u, pos);
        if (st != APPLY_OK)
            break;
        if (e->kind == MAP_EDIT_CHILD_ROWS) {
            st = delete_children(s, t, e->table, key, e->n, pos);
            map_rows rows = {.buf = {.data = (char *)data + e->off, .len = e->len}};
            if (st == APPLY_OK)
                st = upsert_records(s, t, &rows, pos);
        } else if (e->kind == MAP_EDIT_CHILD_ROW) {
            map_rows rows = {.buf = {.data = (char *)data + e->off, .len = e->len}};
            if (e->len > 0)
                st = upsert_records(s, t, &rows, pos);
        } else if (e->kind == MAP_EDIT_CHILD_IF) {
            st = apply_child_if(s, t, e, data, pos);
        } else if (e->kind == MAP_EDIT_CHILD_PAD && e->n > 0) {
            params p = {0};
            param_field(&p, key);
            uint8_t be[4] = {(uint8_t)(e->n >> 24), (uint8_t)(e->n >> 16), (uint8_t)(e->n >> 8), (uint8_t)e->n};
            param(&p, be, 4);
            char name[48];
            snprintf(name, sizeof name, "P%u_%u", t->id, (unsigned)e->table);
            st = send_prepared(s, t, P_INSERT, name, &p, pos);
            params_free(&p);
        }
    }
    if (st == APPLY_OK)
        st = flush_update(s, t, &u, pos);
    else if (u.table >= 0) {
        strbuf_free(&u.set);
        params_free(&u.p);
        free(u.touched);
    }
    return st;
}

static sink_status apply_op(sink *s, const table *t, const op *o)
{
    const map_plan *plan = o->mapped;
    if (o->kind == OP_DELETE) {
        params p = {0};
        param_field(&p, (const uint8_t *)plan->data.data + plan->key_off);
        char name[48];
        snprintf(name, sizeof name, "D%u", t->id);
        sink_status st = send_prepared(s, t, P_DELETE, name, &p, &o->pos);
        params_free(&p);
        for (size_t c = 1; st == APPLY_OK && c < t->nmtabs; c++)
            st = delete_children(s, t, c, (const uint8_t *)plan->data.data + plan->key_off, 0, &o->pos);
        s->stats.deletes++;
        return st;
    }
    if (plan->replace) {
        if (o->kind == OP_UPDATE)
            s->stats.updates++;
        else
            s->stats.rows_inserted++;
        return upsert_records(s, t, &plan->rows, &o->pos);
    }
    s->stats.updates++;
    return apply_plan(s, t, plan, &o->pos);
}

static sink_status drop_tables(sink *s, const char *db, const char *coll, const op_pos *pos)
{
    const char *values[3] = {s->service, db, coll};
    return sink_catalog_call(s, NULL, "SELECT oplog2pg.drop_namespace($1, $2, $3)", 3, values, pos);
}

/* ---- the kind ---- */

static bool name(sink *s, const char *db, const char *coll, pg_name *out, const op_pos *pos)
{
    (void)s;
    (void)pos;
    *out = map_find(s->cfg.maps, db, coll)->table.name; /* kind_of found it */
    return true;
}

static bool prepare(sink *s, table *t, const op_pos *pos)
{
    if (t->map == NULL)
        t->map = map_find(s->cfg.maps, t->db, t->coll);
    return prepare_tables(s, t, pos);
}

static sink_status insert_rows(sink *s, table *t, const sink_batch *b, const op_pos *pos, bool fresh)
{
    (void)fresh; /* every row is an upsert: a parent's child rows are replaced with it */
    return upsert_batch(s, t, b, pos);
}

/* A map of one table streams like the jsonb shape; one with child tables copies a run at its end, one COPY per table
 * (its rows are in document order, not table order). */
static bool streams(const table *t)
{
    return t->nmtabs == 1;
}

static bool copy_start(sink *s, const table *t, pgconn_error *e)
{
    return pgconn_copy_start(s->c, t->mtabs[0].copy_sql, e);
}

/* *from counts bytes of the run's records. */
static bool copy_rows(sink_copy_out *o, const table *t, const sink_batch *b, size_t *from, pgconn_error *e)
{
    return sink_copy_mapped(o, b, 0, (uint16_t)t->nmtabs, from, e);
}

static sink_rows_dest dest(const table *t)
{
    return dest_of(t);
}

static sink_status rename_refused(sink *s, const char *db, const char *coll, const char *to_db, const char *to_coll,
                                  const op_pos *pos)
{
    char where[32];
    sink_fmt_pos(pos, where, sizeof where);
    sink_set_err(s, APPLY_CONFIG, NULL,
                 "renameCollection %s.%s -> %s.%s (oplog entry %s) involves a collection with a typed map, which "
                 "this version cannot rename: move the map to the new name and copy that collection again "
                 "(--reimport)",
                 db, coll, to_db, to_coll, where);
    return s->failed;
}

static sink_status truncate_rows(sink *s, table *t, const op_pos *pos)
{
    char sql[256];
    for (size_t k = 0; k < t->nmtabs; k++) {
        snprintf(sql, sizeof sql, "DELETE FROM %s", t->mtabs[k].qname); /* not TRUNCATE: a lighter lock */
        if (pipe_send_simple(s, P_DDL, t, sql, pos) != APPLY_OK)
            return s->failed;
    }
    return APPLY_OK;
}

const table_kind sink_mapped_kind = {
    .name = name,
    .prepare = prepare,
    .insert_rows = insert_rows,
    .streams = streams,
    .copy_start = copy_start,
    .copy_rows = copy_rows,
    .dest = dest,
    .apply_plan = apply_op,
    .drop = drop_tables,
    .rename = rename_refused,
    .truncate = truncate_rows,
    .free = free_tables,
};

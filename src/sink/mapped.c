/*
 * mapped.c — the tables of typed maps (map/map.h, docs/mapping.md): made or checked through the catalog, written
 * with binary COPY of the rows the reader thread projected, and updated from the plans it made (map/project.h).
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

#include "map/ejson.h"
#include "pg_internal.h"
#include "sink/mapped.h"
#include "sink/pgerror.h"
#include "util/log.h"
#include "util/strbuf.h"

/* The type as format_type() spells it (what the catalog check compares). */
static const char *pg_type_name(const map_type *t, char *buf, size_t len)
{
    static const char *const names[MAP_SCALAR_COUNT] = {
        [MAP_TEXT] = "text",
        [MAP_VARCHAR] = "character varying",
        [MAP_BOOLEAN] = "boolean",
        [MAP_SMALLINT] = "smallint",
        [MAP_INTEGER] = "integer",
        [MAP_BIGINT] = "bigint",
        [MAP_NUMERIC] = "numeric",
        [MAP_REAL] = "real",
        [MAP_DOUBLE] = "double precision",
        [MAP_TIMESTAMPTZ] = "timestamp with time zone",
        [MAP_TIMESTAMP] = "timestamp without time zone",
        [MAP_DATE] = "date",
        [MAP_UUID] = "uuid",
        [MAP_BYTEA] = "bytea",
        [MAP_JSONB] = "jsonb",
    };
    if (t->scalar == MAP_VARCHAR)
        snprintf(buf, len, "character varying(%u)%s", t->varchar_chars, t->array ? "[]" : "");
    else
        snprintf(buf, len, "%s%s", names[t->scalar], t->array ? "[]" : "");
    return buf;
}

static const map_table *root_of(const map_table *t)
{
    while (t->parent != NULL)
        t = t->parent;
    return t;
}

/* Field i's type in the catalog's spelling; *ddl set when CREATE TABLE needs more (the key text's collation). */
static void field_type(const map_table *t, size_t i, char *buf, size_t len, bool *collate_c)
{
    static const map_type integer = {.scalar = MAP_INTEGER}, jsonb = {.scalar = MAP_JSONB};
    size_t first = t->parent_key_column != NULL ? 2 : 0;
    const map_table *root = root_of(t);
    const map_column *key = &root->cols[root->key];
    *collate_c = false;
    if (first == 2 && i == 0) {
        pg_type_name(&key->type, buf, len);
        *collate_c = key->line == 0;
    } else if (first == 2 && i == 1) {
        pg_type_name(&integer, buf, len);
    } else if (i - first < t->ncols) {
        const map_column *c = &t->cols[i - first];
        pg_type_name(&c->type, buf, len);
        *collate_c = first == 0 && i - first == t->key && c->line == 0;
    } else {
        pg_type_name(&jsonb, buf, len);
    }
}

static void json_str(strbuf *b, const char *s)
{
    bson_value_t v = {.value_type = BSON_TYPE_UTF8};
    v.value.v_utf8.str = (char *)s;
    v.value.v_utf8.len = (uint32_t)strlen(s);
    (void)ejson_write_value(b, &v, NULL);
}

static char *quote(PGconn *conn, const char *name)
{
    char *q = PQescapeIdentifier(conn, name, strlen(name));
    if (q == NULL)
        return NULL;
    char *copy = strdup(q);
    PQfreemem(q);
    return copy;
}

/* The key fields of a table: (parent key, position) for a child table, the key column for the collection's. */
static size_t key_fields(const map_table *mt, size_t out[2])
{
    if (mt->parent_key_column != NULL) {
        out[0] = 0;
        out[1] = 1;
        return 2;
    }
    out[0] = mt->key;
    return 1;
}

void sink_mapped_table_free(sink_mapped_table *m)
{
    for (size_t f = 0; f < m->nfields && m->qfields != NULL; f++)
        free(m->qfields[f]);
    free(m->qfields);
    free(m->qname);
    free(m->copy_sql);
    free(m->upsert_sql);
    free(m->children_sql);
    free(m->pad_sql);
    free(m->delete_sql);
    for (size_t i = 0; i < 3; i++)
        free(m->if_sql[i]);
    free(m->guard_sql);
    free(m->columns_json);
    free(m->key_json);
    memset(m, 0, sizeof *m);
}

static char *take(strbuf *b)
{
    char *s = strbuf_failed(b) ? NULL : strbuf_detach(b, NULL);
    strbuf_free(b);
    return s;
}

static bool put_literal(PGconn *conn, strbuf *b, const char *s)
{
    char *q = PQescapeLiteral(conn, s, strlen(s));
    if (q == NULL)
        return false;
    strbuf_puts(b, q);
    PQfreemem(q);
    return true;
}

/* The statements of MAP_EDIT_CHILD_IF (map/project.h) for child table m. Whether the path holds an array: from the
 * parent's doc column with rest = doc (its value before the update: the plan's doc edit comes last), else from the
 * parent's child rows (none: the guard refuses the op, an empty array being indistinguishable from a document or a
 * missing field). Every parameter is cast: INSERT ... SELECT does not take its types from the columns. */
static bool build_child_if(PGconn *conn, const map_collection *map, sink_mapped_table *m)
{
    const map_table *root = root_of(m->mt), *ct = m->mt;
    const map_child *ch = NULL;
    for (size_t i = 0; i < root->nchildren; i++)
        if (root->children[i].table == ct)
            ch = &root->children[i];
    if (ch == NULL)
        return true; /* not a child of the collection's table: no such edit names it */
    char types[64][80];
    char *const *q = m->qfields;
    size_t nf = m->nfields < 64 ? m->nfields : 64;
    for (size_t f = 0; f < nf; f++) {
        bool collate_c;
        field_type(ct, f, types[f], sizeof types[f], &collate_c);
    }
    if (nf < m->nfields)
        return true; /* more fields than a statement here is built for: the edit then fails (apply_child_if) */
    strbuf is_array = STRBUF_INIT, b = STRBUF_INIT;
    bool ok = true;
    if (root->rest == MAP_REST_DOC) {
        char *qs = quote(conn, root->name.schema), *qt = quote(conn, root->name.table),
             *qk = quote(conn, root->cols[root->key].name), *qd = quote(conn, root->rest_column);
        ok = qs && qt && qk && qd;
        if (ok) {
            strbuf_printf(&is_array, "EXISTS (SELECT 1 FROM %s.%s WHERE %s = $1::%s AND jsonb_typeof(%s #> ARRAY[", qs,
                          qt, qk, types[0], qd);
            for (size_t i = 0; ok && i < ch->nparts; i++) {
                if (i)
                    strbuf_putc(&is_array, ',');
                ok = put_literal(conn, &is_array, ch->parts[i]);
            }
            strbuf_puts(&is_array, "]::text[]) = 'array')");
        }
        free(qs);
        free(qt);
        free(qk);
        free(qd);
    } else {
        strbuf_printf(&is_array, "EXISTS (SELECT 1 FROM %s WHERE %s = $1::%s)", m->qname, q[0], types[0]);
    }
    if (!ok || strbuf_failed(&is_array)) {
        strbuf_free(&is_array);
        return false;
    }
    for (int mode = MAP_CHILD_IF_UPSERT; mode <= MAP_CHILD_IF_EXISTS; mode++) {
        if (mode == MAP_CHILD_IF_EXISTS) {
            strbuf_printf(&b, "UPDATE %s SET ", m->qname);
            for (size_t f = 2; f < nf; f++)
                strbuf_printf(&b, "%s%s = $%zu::%s", f > 2 ? ", " : "", q[f], f + 1, types[f]);
            if (nf == 2)
                strbuf_printf(&b, "%s = %s", q[1], q[1]);
            strbuf_printf(&b, " WHERE %s = $1::%s AND %s = $2::integer", q[0], types[0], q[1]);
        } else {
            strbuf_printf(
                &b,
                "WITH a AS (SELECT %s AS ok), p AS (INSERT INTO %s (%s, %s) SELECT $1::%s, g FROM a, "
                "generate_series(0, $2::integer - 1) AS g WHERE a.ok ON CONFLICT DO NOTHING) INSERT INTO %s (",
                is_array.data, m->qname, q[0], q[1], types[0], m->qname);
            for (size_t f = 0; f < nf; f++)
                strbuf_printf(&b, "%s%s", f ? ", " : "", q[f]);
            strbuf_puts(&b, ") SELECT ");
            for (size_t f = 0; f < nf; f++)
                strbuf_printf(&b, "%s$%zu::%s", f ? ", " : "", f + 1, types[f]);
            strbuf_printf(&b, " FROM a WHERE a.ok ON CONFLICT (%s, %s) DO ", q[0], q[1]);
            if (mode == MAP_CHILD_IF_CREATE || nf == 2) {
                strbuf_puts(&b, "NOTHING");
            } else {
                strbuf_puts(&b, "UPDATE SET ");
                for (size_t f = 2; f < nf; f++)
                    strbuf_printf(&b, "%s%s = EXCLUDED.%s", f > 2 ? ", " : "", q[f], q[f]);
            }
        }
        if ((m->if_sql[mode] = take(&b)) == NULL) {
            strbuf_free(&is_array);
            return false;
        }
    }
    if (root->rest != MAP_REST_DOC || ct->on_type_error != MAP_ON_TYPE_ERROR_NULL) {
        strbuf_printf(&b,
                      "SELECT oplog2pg.update_error(NULL, $3::text) WHERE NOT EXISTS (SELECT 1 FROM %s WHERE %s = "
                      "$1::%s AND %s = $2::integer) AND NOT %s",
                      m->qname, q[0], types[0], q[1], is_array.data);
        if ((m->guard_sql = take(&b)) == NULL) {
            strbuf_free(&is_array);
            return false;
        }
    }
    strbuf_free(&is_array);
    return true;
}

bool sink_mapped_table_build(PGconn *conn, const map_collection *map, size_t k, sink_mapped_table *m)
{
    memset(m, 0, sizeof *m);
    m->mt = map_table_at(map, k);
    m->nfields = map_table_fields(m->mt);
    m->qfields = calloc(m->nfields, sizeof *m->qfields);
    char *qs = quote(conn, m->mt->name.schema), *qt = quote(conn, m->mt->name.table);
    if (qs && qt && asprintf(&m->qname, "%s.%s", qs, qt) < 0)
        m->qname = NULL;
    free(qs);
    free(qt);
    if (m->qfields == NULL || m->qname == NULL)
        goto oom;
    strbuf b = STRBUF_INIT, cols = STRBUF_INIT;
    strbuf_putc(&cols, '[');
    for (size_t f = 0; f < m->nfields; f++) {
        char type[80], name_type[80];
        bool collate_c;
        const char *name = map_table_field(m->mt, f, name_type, sizeof name_type);
        m->qfields[f] = quote(conn, name);
        if (m->qfields[f] == NULL) {
            strbuf_free(&cols);
            goto oom;
        }
        field_type(m->mt, f, type, sizeof type, &collate_c);
        strbuf_puts(&cols, f ? ",{\"name\":" : "{\"name\":");
        json_str(&cols, name);
        strbuf_puts(&cols, ",\"type\":");
        json_str(&cols, type);
        if (collate_c)
            strbuf_puts(&cols, ",\"ddl\":\"text COLLATE \\\"C\\\"\"");
        strbuf_putc(&cols, '}');
    }
    strbuf_putc(&cols, ']');
    if ((m->columns_json = take(&cols)) == NULL)
        goto oom;
    size_t kf[2];
    size_t nk = key_fields(m->mt, kf);
    strbuf_putc(&b, '[');
    for (size_t i = 0; i < nk; i++) {
        char dummy[80];
        if (i)
            strbuf_putc(&b, ',');
        json_str(&b, map_table_field(m->mt, kf[i], dummy, sizeof dummy));
    }
    strbuf_putc(&b, ']');
    if ((m->key_json = take(&b)) == NULL)
        goto oom;

    strbuf_printf(&b, "COPY %s (", m->qname);
    for (size_t f = 0; f < m->nfields; f++)
        strbuf_printf(&b, "%s%s", f ? ", " : "", m->qfields[f]);
    strbuf_puts(&b, ") FROM STDIN (FORMAT binary)");
    if ((m->copy_sql = take(&b)) == NULL)
        goto oom;

    strbuf_printf(&b, "INSERT INTO %s (", m->qname);
    for (size_t f = 0; f < m->nfields; f++)
        strbuf_printf(&b, "%s%s", f ? ", " : "", m->qfields[f]);
    strbuf_puts(&b, ") VALUES (");
    for (size_t f = 0; f < m->nfields; f++)
        strbuf_printf(&b, "%s$%zu", f ? ", " : "", f + 1);
    strbuf_puts(&b, ") ON CONFLICT (");
    for (size_t i = 0; i < nk; i++)
        strbuf_printf(&b, "%s%s", i ? ", " : "", m->qfields[kf[i]]);
    size_t set = 0;
    for (size_t f = 0; f < m->nfields; f++) {
        if (f == kf[0] || (nk == 2 && f == kf[1]))
            continue;
        strbuf_printf(&b, "%s%s = EXCLUDED.%s", set++ ? ", " : ") DO UPDATE SET ", m->qfields[f], m->qfields[f]);
    }
    if (set == 0)
        strbuf_puts(&b, ") DO NOTHING");
    if ((m->upsert_sql = take(&b)) == NULL)
        goto oom;

    if (m->mt->parent_key_column == NULL) {
        strbuf_printf(&b, "DELETE FROM %s WHERE %s = $1", m->qname, m->qfields[kf[0]]);
        if ((m->delete_sql = take(&b)) == NULL)
            goto oom;
    } else {
        strbuf_printf(&b, "DELETE FROM %s WHERE %s = $1 AND %s >= $2", m->qname, m->qfields[0], m->qfields[1]);
        if ((m->children_sql = take(&b)) == NULL)
            goto oom;
        strbuf_printf(&b,
                      "INSERT INTO %s (%s, %s) SELECT $1, g FROM generate_series(0, $2 - 1) AS g ON CONFLICT DO "
                      "NOTHING",
                      m->qname, m->qfields[0], m->qfields[1]);
        if ((m->pad_sql = take(&b)) == NULL)
            goto oom;
        if (!build_child_if(conn, map, m))
            goto oom;
    }
    return true;
oom:
    sink_mapped_table_free(m);
    return false;
}

void mapped_free_tables(table *t)
{
    for (size_t k = 0; k < t->nmtabs; k++)
        sink_mapped_table_free(&t->mtabs[k]);
    free(t->mtabs);
    t->mtabs = NULL;
    t->nmtabs = 0;
}

static bool build_tables(sink *s, table *t)
{
    if (t->mtabs != NULL)
        return true;
    size_t n = map_table_count(t->map);
    t->mtabs = calloc(n, sizeof *t->mtabs);
    if (t->mtabs == NULL)
        return false;
    t->nmtabs = n;
    for (size_t k = 0; k < n; k++) {
        if (!sink_mapped_table_build(s->conn, t->map, k, &t->mtabs[k])) {
            mapped_free_tables(t);
            return false;
        }
    }
    return true;
}

static bool ensure_one(sink *s, table *t, size_t k, const op_pos *pos)
{
    sink_mapped_table *m = &t->mtabs[k];
    const char *values[8] = {s->service,     t->db,           t->coll,       m->mt->name.schema, m->mt->name.table,
                             m->columns_json, m->key_json, m->mt->adopt ? "true" : "false"};
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

bool mapped_prepare(sink *s, table *t, const op_pos *pos)
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
static const uint8_t *param_field(params *p, const uint8_t *f)
{
    int32_t len = (int32_t)((uint32_t)f[0] << 24 | (uint32_t)f[1] << 16 | (uint32_t)f[2] << 8 | f[3]);
    param(p, len < 0 ? NULL : f + 4, len);
    return f + 4 + (len < 0 ? 0 : len);
}

static sink_status send_prepared(sink *s, const table *t, pending_kind kind, const char *name, const params *p,
                                 const op_pos *pos)
{
    if (p->nomem) {
        sink_set_err(s, APPLY_NOMEM, NULL, "out of memory sending a statement for %s.%s", t->db, t->coll);
        return s->failed;
    }
    if (!pipe_push_pending(s, kind, t, pos))
        return s->failed;
    size_t bytes = 64;
    for (int i = 0; i < p->n; i++)
        bytes += (size_t)p->lengths[i];
    s->stats.bytes += bytes;
    return pipe_after_send(s, PQsendQueryPrepared(s->conn, name, p->n, p->values, p->lengths, p->formats, 0) == 1,
                           bytes);
}

static sink_status send_sql(sink *s, const table *t, pending_kind kind, const char *sql, const params *p,
                            const op_pos *pos)
{
    if (p->nomem) {
        sink_set_err(s, APPLY_NOMEM, NULL, "out of memory sending a statement for %s.%s", t->db, t->coll);
        return s->failed;
    }
    if (!pipe_push_pending(s, kind, t, pos))
        return s->failed;
    size_t bytes = strlen(sql) + 64;
    for (int i = 0; i < p->n; i++)
        bytes += (size_t)p->lengths[i];
    s->stats.bytes += bytes;
    return pipe_after_send(
        s, PQsendQueryParams(s->conn, sql, p->n, NULL, p->values, p->lengths, p->formats, 0) == 1, bytes);
}

/* Upserts one row record of table k (the tuple's fields as parameters). */
static sink_status upsert_tuple(sink *s, const table *t, size_t k, const uint8_t *tuple, const op_pos *pos)
{
    params p = {0};
    uint16_t nf = (uint16_t)(tuple[0] << 8 | tuple[1]);
    const uint8_t *f = tuple + 2;
    for (uint16_t i = 0; i < nf; i++)
        f = param_field(&p, f);
    char name[48];
    snprintf(name, sizeof name, "I%u_%zu", t->id, k);
    sink_status st = send_prepared(s, t, P_INSERT, name, &p, pos);
    params_free(&p);
    return st;
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

/* The rows of whole documents (records): each parent row upserted with its child rows replaced. */
static sink_status upsert_records(sink *s, const table *t, const map_rows *rows, const op_pos *pos)
{
    map_row_iter it;
    map_rows_iter(rows, &it);
    uint16_t k;
    const uint8_t *tuple;
    uint32_t len;
    while (map_rows_next(&it, &k, &tuple, &len)) {
        if (k >= t->nmtabs)
            return past_tables(s, t, k, pos);
        sink_status st = upsert_tuple(s, t, k, tuple, pos);
        if (st != APPLY_OK)
            return st;
        if (k != 0)
            continue;
        /* a parent row: its key field is field `key` of the tuple */
        const uint8_t *f = tuple + 2;
        for (size_t i = 0; i < t->mtabs[0].mt->key; i++) {
            int32_t l = (int32_t)((uint32_t)f[0] << 24 | (uint32_t)f[1] << 16 | (uint32_t)f[2] << 8 | f[3]);
            f += 4 + (l < 0 ? 0 : l);
        }
        for (size_t c = 1; c < t->nmtabs; c++) {
            st = delete_children(s, t, c, f, 0, pos);
            if (st != APPLY_OK)
                return st;
        }
    }
    return APPLY_OK;
}

sink_status mapped_upsert_batch(sink *s, const table *t, const sink_batch *b, const op_pos *pos)
{
    s->stats.rows_inserted += sink_batch_rows(b);
    return upsert_records(s, t, sink_batch_mapped(b), pos);
}

sink_status mapped_insert_batch(sink *s, table *t, sink_batch *b, const op_pos *pos)
{
    const map_rows *rows = sink_batch_mapped(b);
    if (s->cfg.per_op || (sink_batch_rows(b) < sink_copy_min_rows(s) && sink_batch_bytes(b) < SINK_COPY_BYTES)) {
        s->stats.rows_inserted += sink_batch_rows(b);
        return upsert_records(s, t, rows, pos);
    }
    /* which tables have rows */
    bool *used = calloc(t->nmtabs, sizeof *used);
    if (used == NULL) {
        sink_set_err(s, APPLY_NOMEM, NULL, "out of memory copying into %s.%s", t->db, t->coll);
        return s->failed;
    }
    map_row_iter it;
    map_rows_iter(rows, &it);
    uint16_t k;
    const uint8_t *tuple;
    uint32_t len;
    while (map_rows_next(&it, &k, &tuple, &len)) {
        if (k >= t->nmtabs) {
            free(used);
            return past_tables(s, t, k, pos);
        }
        used[k] = true;
    }
    if (pipe_send_simple(s, P_SAVEPOINT, NULL, "SAVEPOINT " SAVEPOINT_NAME, pos) != APPLY_OK ||
        pipe_drain(s) != APPLY_OK) {
        free(used);
        return s->failed;
    }
    if (PQexitPipelineMode(s->conn) != 1) {
        free(used);
        sink_set_err(s, APPLY_RETRY, NULL, "leaving pipeline mode: %s", PQerrorMessage(s->conn));
        return s->failed;
    }
    bool dup = false;
    pgconn_error e = {0};
    bool ok = true;
    size_t failed_table = 0;
    for (size_t c = 0; ok && c < t->nmtabs; c++) {
        if (!used[c])
            continue;
        ok = pgconn_copy_start(s->c, t->mtabs[c].copy_sql, &e) && sink_batch_copy_mapped(s->c, b, (uint16_t)c, &e);
        failed_table = c;
    }
    free(used);
    if (!ok) {
        if (strcmp(e.sqlstate, "23505") != 0) {
            char where[32];
            sink_fmt_pos(pos, where, sizeof where);
            const char *advice = e.status == APPLY_CONFIG ? pgerror_advice(e.sqlstate) : "";
            sink_set_err_at(s, pos, e.status, e.sqlstate,
                            "COPY into %s (of %s.%s, oplog entries up to %s) failed: [%s] %s%s%s",
                            t->mtabs[failed_table].qname, t->db, t->coll, where, e.sqlstate[0] ? e.sqlstate : "?",
                            e.message, advice[0] ? "; " : "", advice);
            return s->failed;
        }
        dup = true;
        if (!pgconn_exec(s->c, "ROLLBACK TO SAVEPOINT " SAVEPOINT_NAME, NULL, false, &e)) {
            sink_set_err(s, e.status, e.sqlstate, "rolling back a COPY: %s", e.message);
            return s->failed;
        }
        char where[32];
        sink_fmt_pos(pos, where, sizeof where);
        log_info("COPY of %zu documents into %s.%s (entries up to %s) met an existing key; re-sending them as upserts",
                 sink_batch_rows(b), t->db, t->coll, where);
        s->stats.dup_fallbacks++;
    }
    if (PQenterPipelineMode(s->conn) != 1) {
        sink_set_err(s, APPLY_RETRY, NULL, "entering pipeline mode: %s", PQerrorMessage(s->conn));
        return s->failed;
    }
    if (dup) {
        s->stats.rows_inserted += sink_batch_rows(b);
        if (upsert_records(s, t, rows, pos) != APPLY_OK)
            return s->failed;
    } else {
        s->stats.rows_copied += sink_batch_rows(b);
        s->stats.bytes += sink_batch_bytes(b);
    }
    return pipe_send_simple(s, P_RELEASE, NULL, "RELEASE SAVEPOINT " SAVEPOINT_NAME, pos);
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
    uint16_t nf = (uint16_t)(tuple[0] << 8 | tuple[1]);
    const uint8_t *f = tuple + 2;
    for (uint16_t i = 0; i < nf; i++)
        f = param_field(&p, f);
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

sink_status sink_apply_mapped(sink *s, const op *o)
{
    table *t = sink_open_table(s, o->db, o->coll, &o->pos);
    if (t == NULL)
        return s->failed;
    if (t->map == NULL) {
        sink_set_err(s, APPLY_CONFIG, NULL, "%s.%s has no typed map in this sink", o->db, o->coll);
        return s->failed;
    }
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

sink_status mapped_drop(sink *s, const char *db, const char *coll, const op_pos *pos)
{
    const char *values[3] = {s->service, db, coll};
    return sink_catalog_call(s, NULL, "SELECT oplog2pg.drop_namespace($1, $2, $3)", 3, values, pos);
}

/*
 * mapped_sql.c — the SQL of a typed map's tables (sink/mapped.h): names quoted, the COPY, the upserts, the deletes
 * and the guarded child-row statements, and the arguments of oplog2pg.ensure_mapped_table. Built once per table and
 * connection, for the sink (mapped.c) and for the initial copy (copy/writer.c) alike.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map/ejson.h"
#include "sink/mapped.h"
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

void sink_mapped_tables_free(sink_mapped_table *t, size_t n)
{
    for (size_t k = 0; t != NULL && k < n; k++)
        sink_mapped_table_free(&t[k]);
    free(t);
}

sink_mapped_table *sink_mapped_tables_build(PGconn *conn, const map_collection *m, size_t *n)
{
    size_t count = map_table_count(m);
    sink_mapped_table *t = calloc(count ? count : 1, sizeof *t);
    for (size_t k = 0; t != NULL && k < count; k++) {
        if (!sink_mapped_table_build(conn, m, k, &t[k])) {
            sink_mapped_tables_free(t, k);
            t = NULL;
        }
    }
    *n = t != NULL ? count : 0;
    return t;
}

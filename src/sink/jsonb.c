/*
 * jsonb.c — the jsonb table kind (pg_internal.h, table_kind): a collection as one table (_id text COLLATE "C", doc
 * jsonb), made or checked through the catalog (oplog2pg.ensure_table) and written by the jsonb shape's statements
 * (stmt.c) or by COPY of the run's (_id, doc) rows.
 */
#include "pg_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool sink_map_names(sink *s, const char *db, const char *coll, pg_name *out, const op_pos *pos)
{
    char why[120], where[32];
    if (names_map(db, coll, out, why, sizeof why))
        return true;
    sink_fmt_pos(pos, where, sizeof where);
    sink_set_err(s, APPLY_DATA, NULL, "namespace %s.%s (oplog entry %s) cannot be a PostgreSQL table: %s", db,
                 coll ? coll : "", where, why);
    return false;
}

/* The table made (schema, table, catalog row) or checked to be this service's; its statements are prepared as ops
 * need them (stmt.c). */
static bool prepare(sink *s, table *t, const op_pos *pos)
{
    if (t->copy_sql == NULL &&
        asprintf(&t->copy_sql, "COPY %s (" SINK_COLUMNS ") FROM STDIN (FORMAT binary)", t->qname) < 0) {
        t->copy_sql = NULL;
        return false;
    }
    const char *values[5] = {s->service, t->db, t->coll, t->name.schema, t->name.table};
    return sink_catalog_call(s, t, "SELECT oplog2pg.ensure_table($1, $2, $3, $4, $5)", 5, values, pos) == APPLY_OK;
}

/* Each row of the batch as parameters of an insert statement (binary, no conversion), pipelined.
 *
 * A fresh run past the keep point goes as plain INSERTs: the oplog inserts a _id only where it is not, so a row
 * already there is a replay (after an initial copy, or rows written from elsewhere), and ON CONFLICT's look at the
 * key before each row costs PostgreSQL a seventh of such a run's time (docs/benchmarks.md, "Plain inserts"). A row
 * already there fails the group, which is applied again from the checkpoint with upserts up to where it had got
 * (pipeline.c, rewind_for_existing). The run is judged by pos, its last entry, so a run that straddles the keep point
 * may cost one such rewind. Up to the keep point, in per-op and careful sessions, and for a COPY's rows that met a key
 * (fresh false): upserts, so an insert that meets its own _id becomes the document it carries. */
static sink_status insert_rows(sink *s, table *t, const sink_batch *b, const op_pos *pos, bool fresh)
{
    const int formats[2] = {1, 0};
    bool plain = fresh && !s->cfg.per_op && op_pos_cmp(pos, &s->keep_until) > 0;
    stmt_kind k = plain ? STMT_INSERT : STMT_UPSERT;
    pending_kind pk = plain ? P_INSERT_NEW : P_INSERT;
    for (size_t i = 0; i < sink_batch_held_rows(b); i++) {
        const char *key, *json;
        size_t klen, jlen;
        sink_batch_row(b, i, &key, &klen, &json, &jlen);
        const char *values[2] = {key, json};
        const int lengths[2] = {(int)klen, (int)jlen};
        if (sink_send_stmt(s, t, k, pk, pos, 2, values, lengths, formats, klen + jlen + 64) != APPLY_OK)
            return s->failed;
    }
    s->stats.rows_inserted += sink_batch_rows(b);
    s->stats.bytes += sink_batch_bytes(b);
    return APPLY_OK;
}

static bool streams(const table *t)
{
    (void)t;
    return true;
}

static bool copy_start(sink *s, const table *t, pgconn_error *e)
{
    return pgconn_copy_start(s->c, t->copy_sql, e);
}

/* *from counts rows. */
static bool copy_rows(sink_copy_out *o, const table *t, const sink_batch *b, size_t *from, pgconn_error *e)
{
    (void)t;
    size_t first = *from;
    *from = sink_batch_held_rows(b);
    return sink_copy_rows(o, b, first, e);
}

static sink_rows_dest dest(const table *t)
{
    sink_rows_dest d = {.copy_sql = t->copy_sql};
    return d;
}

sink_status jsonb_update(sink *s, table *t, const char *key, op_update_form form, const char *json, const op_pos *pos)
{
    const char *values[2] = {key, json};
    /* A replacement is the whole new document: upsert it. */
    size_t bytes = strlen(json);
    s->stats.bytes += bytes;
    s->stats.updates++;
    if (form == OP_FORM_REPLACE)
        return sink_send_stmt(s, t, STMT_UPSERT, P_INSERT, pos, 2, values, NULL, NULL, bytes + strlen(key) + 64);
    return sink_send_stmt(s, t, STMT_UPDATE, P_UPDATE, pos, 2, values, NULL, NULL, bytes + strlen(key) + 64);
}

sink_status jsonb_delete(sink *s, table *t, const char *key, const op_pos *pos)
{
    const char *values[1] = {key};
    s->stats.deletes++;
    return sink_send_stmt(s, t, STMT_DELETE, P_DELETE, pos, 1, values, NULL, NULL, strlen(key) + 64);
}

static sink_status drop(sink *s, const char *db, const char *coll, const op_pos *pos)
{
    pg_name nm;
    if (!sink_map_names(s, db, coll, &nm, pos))
        return s->failed;
    const char *values[3] = {s->service, nm.schema, nm.table};
    return sink_catalog_call(s, NULL, "SELECT oplog2pg.drop_table($1, $2, $3)", 3, values, pos);
}

/* A target the rename dropped (dropTarget), or one left over from an earlier run: dropped if it is this service's
 * (oplog2pg.rename_table); MongoDB would have refused the rename otherwise, so dropping is right either way, and
 * whether the entry says dropTarget changes nothing here. */
static sink_status rename_to(sink *s, const char *db, const char *coll, const char *to_db, const char *to_coll,
                             const op_pos *pos)
{
    pg_name from, to;
    if (!sink_map_names(s, db, coll, &from, pos) || !sink_map_names(s, to_db, to_coll, &to, pos))
        return s->failed;
    const char *values[7] = {s->service, from.schema, from.table, to_db, to_coll, to.schema, to.table};
    return sink_catalog_call(s, NULL, "SELECT oplog2pg.rename_table($1, $2, $3, $4, $5, $6, $7)", 7, values, pos);
}

static sink_status truncate_rows(sink *s, table *t, const op_pos *pos)
{
    char sql[256];
    snprintf(sql, sizeof sql, "DELETE FROM %s", t->qname); /* not TRUNCATE: it would take a stronger lock */
    return pipe_send_simple(s, P_DDL, t, sql, pos);
}

static void free_kind(table *t)
{
    free(t->copy_sql);
    t->copy_sql = NULL;
}

const table_kind sink_jsonb_kind = {
    .name = sink_map_names,
    .prepare = prepare,
    .insert_rows = insert_rows,
    .streams = streams,
    .copy_start = copy_start,
    .copy_rows = copy_rows,
    .dest = dest,
    .apply_plan = NULL,
    .drop = drop,
    .rename = rename_to,
    .truncate = truncate_rows,
    .free = free_kind,
};

/*
 * mapped.h — the SQL of a typed map's tables (map/map.h), for the sink and for the initial copy.
 *
 * Each table of a map (the collection's, then its child tables by number, map_table_at) has: its quoted name and
 * fields (in COPY order, map_table_field), the COPY statement, the upsert of one row (INSERT ... ON CONFLICT (key)
 * DO UPDATE every other field), for a child table the delete of one parent's rows from a position on ($1 parent key,
 * $2 position) and the padding insert of its missing rows below a position, and the arguments of
 * oplog2pg.ensure_mapped_table (src/sink/schema.sql), which makes or checks the table through the catalog.
 */
#ifndef OPLOG2PG_SINK_MAPPED_H
#define OPLOG2PG_SINK_MAPPED_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "map/map.h"
#include "map/project.h"

typedef struct sink_mapped_table {
    const map_table *mt;
    char *qname;    /* "schema"."table" */
    char **qfields; /* quoted, in COPY order */
    size_t nfields;
    char *copy_sql;
    char *upsert_sql;   /* $1..$n: the fields */
    char *children_sql; /* child tables: DELETE of one parent's rows from a position on; NULL for the collection's */
    char *pad_sql;      /* child tables: INSERT of the missing rows below a position; NULL for the collection's */
    char *delete_sql;   /* the collection's table: DELETE of a row by key ($1); NULL for child tables */
    char *if_sql[3];    /* child tables: MAP_EDIT_CHILD_IF by map_child_if ($1..$n the row's fields) */
    char *guard_sql;    /* child tables: raises $3 when row ($1, $2) is missing and the path holds no array; NULL
                         * when such an edit needs no guard (rest = doc with on_type_error = null) */
    char *columns_json; /* ensure_mapped_table's p_columns */
    char *key_json;     /* its p_key_json */
} sink_mapped_table;

/* Builds table k of m's SQL, identifiers quoted for conn. False when memory runs out (out is then freed). */
bool sink_mapped_table_build(PGconn *conn, const map_collection *m, size_t k, sink_mapped_table *out);
void sink_mapped_table_free(sink_mapped_table *t);
/* Every table of m, by number: an array of map_table_count(m) built for conn (*n of them), or NULL when memory runs
 * out. Freed by sink_mapped_tables_free. */
sink_mapped_table *sink_mapped_tables_build(PGconn *conn, const map_collection *m, size_t *n);
void sink_mapped_tables_free(sink_mapped_table *t, size_t n);

/* The ensure_mapped_table call, with its 8 parameters: service, db, coll, schema, table, columns, key, adopt. */
#define SINK_MAPPED_ENSURE_SQL                                                                                         \
    "SELECT oplog2pg.ensure_mapped_table($1, $2, $3, $4, $5, $6::jsonb, $7::jsonb, $8::boolean)"

#endif

/*
 * project.h — documents and updates of a mapped collection, as rows of its tables (map/map.h).
 *
 * A document becomes rows: one in the collection's table and one per element of each array of documents a child
 * table takes. Each row is a binary COPY tuple (int16 field count, then per field an int32 length and the value in
 * PostgreSQL's binary format, -1 for NULL), so the sink streams it without converting anything, and the same bytes
 * serve as binary statement parameters.
 *
 * An update becomes a plan: edits by table and column, derived from the oplog entry alone (a $v:2 diff, a $v:1
 * $set/$unset, or a replacement), never from a refetch. Each edit says what changes in one row: a column's new
 * value, an element of an array column, a bytea column patched by a binary diff, an edit of a jsonb column by path
 * (oplog2pg.apply_edits), the whole update
 * applied to the `doc` column (rest = doc keeps the whole document, so it takes the update as it is), child rows
 * replaced, removed or cut. The sink turns a plan into statements (sink/mapped.c).
 *
 * Tables are numbered: 0 is the collection's table, then its child tables depth first in declaration order
 * (map_table_at).
 */
#ifndef OPLOG2PG_MAP_PROJECT_H
#define OPLOG2PG_MAP_PROJECT_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/op.h"
#include "map/map.h"
#include "map/tuple.h"
#include "util/strbuf.h"

typedef enum project_status {
    PROJECT_OK = 0,
    PROJECT_TYPE_ERROR, /* a value cannot be converted and its column says dead_letter: why names column and value */
    PROJECT_NOMEM,
} project_status;

/* Frees what project.c made for a table on first use (map_table.paths); for whoever frees a table. */
void project_paths_free(void *paths);

/* The number of tables of a map (1 + its child tables, at every depth), and table number i. */
size_t map_table_count(const map_collection *m);
const map_table *map_table_at(const map_collection *m, size_t i);

/* The fields of a table's rows, in COPY order: for a child table its parent key and position columns first, then its
 * columns, then the rest column when it has one. */
size_t map_table_fields(const map_table *t);
/* Field i's name and SQL type (buf holds the type text). */
const char *map_table_field(const map_table *t, size_t i, char *type, size_t typelen);

/* Appends the rows of doc (the whole document, with its _id) to out. The key column's value comes from id. nulled
 * counts values that became NULL by on_type_error = null. */
project_status map_project_document(const map_collection *m, const uint8_t *doc, size_t len, const bson_value_t *id,
                                    map_rows *out, uint64_t *nulled, char *why, size_t whylen);

/* The same with the key column's value given as a framed field (key NULL: the key column is NULL): for a table whose
 * key column is not its primary key, where a document may lack the _id (a time-series measurement: sink/tseries.c). */
project_status map_project_document_keyed(const map_collection *m, const uint8_t *doc, size_t len, const uint8_t *key,
                                          size_t key_len, map_rows *out, uint64_t *nulled, char *why, size_t whylen);

/* The binary value of the key column for a document whose _id is id (the parameter that finds its row). */
project_status map_project_key(const map_collection *m, const bson_value_t *id, strbuf *out, char *why, size_t whylen);

/* ---- update plans ---- */

typedef enum map_edit_kind {
    MAP_EDIT_COLUMN,     /* field `field` of the row = value (or NULL) */
    MAP_EDIT_ELEMENT,    /* element n (from 0) of the array field `field` = value (or NULL), padding with NULLs */
    MAP_EDIT_RESIZE,     /* the array field `field` cut or padded with NULLs to n elements */
    MAP_EDIT_JSONB,      /* the jsonb field `field` = oplog2pg.apply_edits(field, value): value is the JSON text of
                          * the edits array */
    MAP_EDIT_UPDATE,     /* the jsonb field `field` (the doc column) = oplog2pg.apply_update(field, value): value is
                          * the update as logged (o), as JSON text */
    MAP_EDIT_CHILD_ROWS, /* child table `table`: every row of this parent from position n on is deleted, then the
                          * rows in value (map_rows records) are inserted */
    MAP_EDIT_CHILD_ROW,  /* child table `table`: the row at position n becomes the tuple in value (upsert) */
    MAP_EDIT_CHILD_PAD,  /* child table `table`: rows at positions 0..n-1 that do not exist are added (all NULL) */
    MAP_EDIT_BINARY,     /* the bytea field `field` = its first n bytes followed by value (an 8.x binary diff) */
    MAP_EDIT_CHILD_IF,   /* child table `table`, a $v:1 edit of element n, which the entry cannot place: whether the
                          * array (and the element) is there is read in PostgreSQL (map_child_if, in `field`); value
                          * is the row (map_rows records) */
} map_edit_kind;

/* What MAP_EDIT_CHILD_IF does with its row. The path holds an array when the parent's rest column (rest = doc) says
 * so, or else when the parent has child rows; with rest = extra or drop and no child rows at all, an empty array
 * cannot be told from a document or a missing field, and the edit refuses the op (a dead letter) rather than guess. */
typedef enum map_child_if {
    MAP_CHILD_IF_UPSERT, /* $set of the element: when the path holds an array, pad it with null rows below n and
                          * upsert the row */
    MAP_CHILD_IF_CREATE, /* $set below the element: when the path holds an array without element n, pad it and
                          * insert the row (the document the $set creates); an element already there is left as is */
    MAP_CHILD_IF_EXISTS, /* $unset of the element: when the row is there, it becomes the row (of a null element) */
} map_child_if;

typedef struct map_edit {
    map_edit_kind kind;
    uint16_t table; /* table number; for COLUMN/ELEMENT/RESIZE/JSONB/UPDATE on a child table, pos says which row */
    uint16_t field; /* field number in the table's COPY order (map_table_field) */
    int64_t pos;    /* the child row's position for edits of a child row's fields; -1 for the parent's row */
    uint32_t n;
    bool null;         /* the value is SQL NULL */
    uint32_t off, len; /* the value: bytes in the plan's data */
} map_edit;

typedef struct map_plan {
    map_edit *edits;
    size_t n, cap;
    strbuf data;
    uint32_t key_off, key_len; /* the parent row's key value (binary) in data */
    bool replace;              /* a replacement: rows holds the whole new document's rows (no edits): the parent row is
                                * upserted and every child row replaced */
    map_rows rows;
    uint64_t nulled;
} map_plan;

void map_plan_init(map_plan *p);
void map_plan_free(map_plan *p);

/* The plan of an update: o->form says which form o->doc holds; o->id is the document's _id. */
project_status map_plan_update(const map_collection *m, const op *o, map_plan *out, char *why, size_t whylen);

/* For every insert, update and delete of e on a collection maps has a map for: op->map, and op->mapped as a
 * map_plan (an insert's is a replacement: its rows; a delete's holds only the key), or op->refusal with the reason
 * when a value cannot be converted (its column says dead_letter). False only when memory runs out. */
bool map_prepare_entry(op_entry *e, const map_set *maps);

#endif

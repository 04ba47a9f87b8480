/*
 * rows.h — the row writer: how the rows of a batch reach their tables, for the sink and for the initial copy alike.
 *
 * The rows are the jsonb shape's (_id, doc) pairs or a typed map's records (map/tuple.h). They go by binary COPY
 * (sink_rows_copy), or, when a COPY met a key already there or a document must go on its own, as upserts of whole
 * documents (sink_rows_upsert): each row by its table's upsert and, after a parent row, its child rows deleted so the
 * document's own child rows that follow replace them. How a statement travels is the caller's: the sink pipelines it
 * on its connection, the copy runs it and waits (sink_rows_send_fn).
 */
#ifndef OPLOG2PG_SINK_ROWS_H
#define OPLOG2PG_SINK_ROWS_H

#include <stdbool.h>
#include <stddef.h>

#include "map/tuple.h"
#include "sink/batch.h"
#include "sink/mapped.h"
#include "sink/pgconn.h"

/* The tables a batch's rows go to: a typed map's tables by number, or (mtabs NULL) the jsonb table of copy_sql. */
typedef struct sink_rows_dest {
    const char *copy_sql; /* the jsonb shape: COPY ... (SINK_COLUMNS) FROM STDIN (FORMAT binary) */
    const sink_mapped_table *mtabs;
    size_t nmtabs;
} sink_rows_dest;

/* Writes b's rows by binary COPY on c (outside pipeline mode): one COPY into the jsonb table, or one into each table
 * of the map that has rows. False with *err set: SQLSTATE 23505 when a key was there already, APPLY_UNRECORDABLE
 * for a row naming a table the map does not have (projected with another map: a bug; nothing is left out silently).
 * *failed is the number of the table whose COPY failed (0 for the jsonb shape). */
bool sink_rows_copy(pgconn *c, const sink_rows_dest *d, const sink_batch *b, size_t *failed, pgconn_error *err);

/* The statements of an upsert of whole documents. */
typedef enum {
    SINK_ROWS_UPSERT,   /* table's upsert_sql: the row's fields */
    SINK_ROWS_CHILDREN, /* table's children_sql: (parent key, position 0), the parent's rows in that child table */
} sink_rows_stmt;

/* Sends one statement for table number `table` with binary parameters; false when it failed (the caller has noted
 * why). The arrays are the writer's, valid for the call. */
typedef bool (*sink_rows_send_fn)(void *arg, sink_rows_stmt stmt, size_t table, int n, const char *const *values,
                                  const int *lengths, const int *formats);

typedef enum {
    SINK_ROWS_OK,
    SINK_ROWS_SEND_FAILED, /* send said so */
    SINK_ROWS_NOMEM,
    SINK_ROWS_MALFORMED, /* a row names a table past the map's, or a parent row lacks its key: why says which */
} sink_rows_result;

/* Upserts rows (records of whole documents) into d's typed tables through send, in order: each row by its table's
 * upsert; after a row of the collection's table, every child table's rows of that key deleted (from position 0). */
sink_rows_result sink_rows_upsert(const sink_rows_dest *d, const map_rows *rows, sink_rows_send_fn send, void *arg,
                                  char *why, size_t whylen);

#endif

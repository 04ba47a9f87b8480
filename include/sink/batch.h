/*
 * batch.h — a run of rows for one table, as the sink writes them: a binary COPY of (_id text, doc jsonb), or
 * pipelined upserts of the same rows.
 *
 * A row is its key text and its document as relaxed Extended JSON. The key is copied into the batch; the JSON is
 * either copied (sink_batch_add) or handed over (sink_batch_take: the text the reader thread rendered moves into the
 * batch instead of being copied, so a large document is held once on the apply side). Framing for COPY (field
 * counts, lengths, the jsonb version byte) is written only while streaming, into a small staging buffer.
 */
#ifndef OPLOG2PG_SINK_BATCH_H
#define OPLOG2PG_SINK_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "map/project.h"
#include "sink/pgconn.h"

/* The columns of a replicated table, in COPY order. The table itself is made by oplog2pg.ensure_table
 * (src/sink/schema.sql): (_id text COLLATE "C" PRIMARY KEY, doc jsonb NOT NULL). */
#define SINK_COLUMNS "_id, doc"

typedef struct sink_batch sink_batch;

sink_batch *sink_batch_new(void);
void sink_batch_free(sink_batch *b);
/* Empties it, keeping up to 1 MB of its own storage; sink_batch_release gives all of it back. */
void sink_batch_reset(sink_batch *b);
void sink_batch_release(sink_batch *b);

/* Adds a row, copying both texts. False only when memory runs out. */
bool sink_batch_add(sink_batch *b, const char *key, size_t key_len, const char *json, size_t json_len);
/* Adds a row, taking *json (malloc'd; *json becomes NULL on success). False only when memory runs out (then *json
 * is still the caller's). */
bool sink_batch_take(sink_batch *b, const char *key, size_t key_len, char **json, size_t json_len);

/* Adds the rows of one document of a mapped collection (map/project.h: records for its table and child tables),
 * copying them. A batch holds either kind of row, never both (a namespace has one shape). False when memory runs
 * out. */
bool sink_batch_add_mapped(sink_batch *b, const map_rows *rows);
/* The mapped rows (records of every document added, in order) and how many documents they are. */
const map_rows *sink_batch_mapped(const sink_batch *b);

/* Rows: documents (for a mapped collection, each document counts once, whatever its child rows). */
size_t sink_batch_rows(const sink_batch *b);
/* The bytes the rows hold (keys and JSON). */
size_t sink_batch_bytes(const sink_batch *b);
/* A streaming run's rows, once sent, let go of to bound its memory: they still count in rows and bytes, but the
 * batch no longer holds them (held_rows), so it can no longer be re-sent (whole answers false). */
void sink_batch_let_go(sink_batch *b);
size_t sink_batch_held_rows(const sink_batch *b);
bool sink_batch_whole(const sink_batch *b);
/* Row i's texts (valid until the next reset). */
void sink_batch_row(const sink_batch *b, size_t i, const char **key, size_t *key_len, const char **json,
                    size_t *json_len);

/* A binary COPY body on its way to a COPY ... FROM STDIN (FORMAT binary) started on c: framing and small rows are
 * gathered in the stage, and libpq gets them in pieces of its size. The sink keeps one open while an insert run
 * still fills ("streaming", src/sink/pg.c); the whole-batch calls below open and close one at once. */
#define SINK_COPY_STAGE (256 * 1024)
typedef struct {
    pgconn *c;
    size_t used;
    char stage[SINK_COPY_STAGE];
} sink_copy_out;

/* Starts the body (its header). Every call answers false, with *err, when sending fails; the caller then abandons
 * the COPY. */
bool sink_copy_open(sink_copy_out *o, pgconn *c, pgconn_error *err);
/* Rows from, from + 1, ... of the batch (the jsonb shape's (_id, doc)). */
bool sink_copy_rows(sink_copy_out *o, const sink_batch *b, size_t from, pgconn_error *err);
/* The mapped records of table number `table` from byte *from of the batch's records on; *from becomes their end. */
/* ntables: the map's tables; a record of a table past them (a projection with another map, which cannot happen) fails
 * the COPY with err->status APPLY_UNRECORDABLE rather than being left out. */
bool sink_copy_mapped(sink_copy_out *o, const sink_batch *b, uint16_t table, uint16_t ntables, size_t *from,
                      pgconn_error *err);
/* The trailer, the end of the COPY and its outcome (err says why it failed: 23505 for a key already there). */
bool sink_copy_close(sink_copy_out *o, pgconn_error *err);
/* Ends the COPY as failed: the server refuses it, so nothing of it stays. */
void sink_copy_abandon(sink_copy_out *o, const char *why);

/* Streams the batch as a whole binary COPY body into a COPY started on c (header, tuples, trailer) and ends the COPY,
 * reading its outcome. Used by the sink and the initial copy. */
bool sink_batch_copy(pgconn *c, const sink_batch *b, pgconn_error *err);

/* The same for the mapped rows of table number `table` (into a COPY of that table's fields started on c). */
bool sink_batch_copy_mapped(pgconn *c, const sink_batch *b, uint16_t table, pgconn_error *err);

#endif

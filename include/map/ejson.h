/*
 * ejson.h — how documents and _ids look in PostgreSQL: relaxed Extended JSON, exactly as libbson writes it.
 *
 * `doc` holds the document as relaxed Extended JSON (doubles shortened), and `_id` is doc->'_id', so the text of an _id
 * parameter must be libbson's rendering of that value. Every conversion goes through here, so the two can never
 * disagree. ejson_prepare_entry runs on the reader thread: the apply loop then only copies text, and the conversion
 * (the daemon's largest CPU cost) overlaps with PostgreSQL's work instead of stalling it.
 */
#ifndef OPLOG2PG_MAP_EJSON_H
#define OPLOG2PG_MAP_EJSON_H

#include <bson/bson.h>
#include <stdbool.h>

#include "core/op.h"

/* A document as relaxed Extended JSON: libbson's rendering, with doubles in their shortest round-trip form
 * (14.42, not 14.419999999999999929). Free with bson_free; *len (may be NULL) gets the length. NULL if libbson
 * cannot render it (invalid UTF-8, ...). */
char *ejson_document(const bson_t *doc, size_t *len);

/* The relaxed Extended JSON of one value (free with bson_free), or NULL if libbson cannot render it. */
char *ejson_value(const bson_value_t *v);

/* Fill op->json / op->id_json for every op of e that needs them (see core/op.h). False when a document cannot be
 * rendered (invalid UTF-8, ...) or memory runs out; ops already prepared stay prepared, the rest stay NULL and the
 * sink reports the failure with its context when it meets them. */
bool ejson_prepare_entry(op_entry *e);

#endif

/*
 * ejson.h — how documents and _ids look in PostgreSQL.
 *
 * `doc` holds a document as relaxed Extended JSON (MongoDB's Extended JSON specification, relaxed mode), compact (no
 * spaces). A double is printed with the fewest significant digits that read back as the same double (util/dtoa.h):
 * 14.42, not 14.419999999999999929; 5e-324. The layout is C's %.15g (%.16g, %.17g for 16 or 17 digits): the
 * exponent form when the decimal exponent is below -4 or at least the larger of 15 and the number of digits (1e-05,
 * 1e+15, 1.2345678901234568e+17), and ".0" is added to a value printed without a point or an exponent (3.0,
 * 1234567890123456.0). Beyond the specification's relaxed mode:
 *   - -0.0 is {"$numberDouble":"-0.0"}, not the number -0.0 the specification writes, because a jsonb number has no
 *     negative zero; NaN and ±Infinity are {"$numberDouble":"NaN"} and so on, as the specification says;
 *   - a date is {"$date":"1970-01-01T00:00:00.001Z"} from 1970 to 9999 (milliseconds only when not zero) and
 *     {"$date":{"$numberLong":"-1000"}} outside that range, as the specification says;
 *   - a string, field name or other text (a regular expression, code, a symbol, a DBPointer's collection) that is
 *     not valid UTF-8, a document nested deeper than EJSON_MAX_DEPTH, or bytes that are not BSON are refused
 *     (ejson_status says which and where) instead of being written as something PostgreSQL cannot read.
 * Control characters in strings are escaped as PostgreSQL escapes them (\n, \u001f, ...). A NUL character is written
 * as \u0000, which jsonb refuses: such a document is refused by PostgreSQL (as data), not here.
 *
 * `_id` holds the key: a text (COLLATE "C") that is equal for two _ids exactly when MongoDB's _id index finds them
 * equal, and that reads like the _id's JSON (with jsonb's spacing, ", " and ": "):
 *   - numbers of every type (int32, int64, double, decimal128) are their exact value in one canonical decimal form:
 *     1, 1.0, NumberLong(1) and NumberDecimal("1.00") are all `1`; the double 0.1 is
 *     `0.1000000000000000055511151231257827021181583404541015625` (its exact value: it is not the decimal 0.1, and
 *     MongoDB keeps the two apart); -0.0 is `0`; a form longer than 64 characters is written in scientific notation
 *     as D.DDDE±X (`1E+6144`; the double 0.0001 is
 *     `1.00000000000000004792173602385929598312941379845142364501953125E-4`); NaN and ±Infinity are
 *     {"$numberDouble": "NaN"} etc. whatever their type;
 *   - a string and a symbol are the JSON string (`"abc"`), escaped as PostgreSQL's jsonb prints strings;
 *   - a sub-document is an array of [name, value] pairs in field order (`[["a", 1], ["b", 2]]`): field order counts
 *     in MongoDB, and a JSON object would lose it; an array inside one is {"$array": [...]};
 *   - every other type is its Extended JSON wrapper as jsonb prints it, keys in jsonb's order (shorter first):
 *     {"$oid": "65a1..."}, {"$date": "2024-01-01T00:00:00Z"}, {"$binary": {"base64": "...", "subType": "04"}},
 *     {"$regularExpression": {"options": "i", "pattern": "^a"}}, ...; a code-with-scope's scope is in key form too.
 * So for an ObjectId, a string or an int32/int64, `_id` is exactly `(doc->'_id')::text`, and
 * `WHERE _id = '{"$oid": "65a1f0c2e4b0a1b2c3d4e5f6"}'` finds the row. docs/architecture.md explains the choice.
 *
 * ejson_prepare_entry runs on the thread that reads the oplog (the reader, or replay's dump thread), so the apply
 * loop only moves the text on. The initial copy's workers, and the sink for an op that was not prepared or for a
 * dead letter, call the writers themselves.
 */
#ifndef OPLOG2PG_MAP_EJSON_H
#define OPLOG2PG_MAP_EJSON_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/op.h"
#include "util/strbuf.h"

/* Deeper documents are refused: MongoDB itself stores at most 100 levels, and PostgreSQL's JSON parser runs out of
 * stack a few thousand levels down. Documents and arrays count (a code-with-scope's scope too), the top document
 * (or the _id's own document) being level 1. */
#define EJSON_MAX_DEPTH 1000

typedef enum {
    EJSON_OK = 0,
    EJSON_BAD_UTF8, /* a string, field name or other text is not valid UTF-8 */
    EJSON_TOO_DEEP, /* nested deeper than EJSON_MAX_DEPTH */
    EJSON_BAD_BSON, /* the bytes are not a valid BSON document */
    EJSON_NOMEM,
} ejson_status;

typedef struct {
    ejson_status status;
    char where[200]; /* dotted path of the offending value ("" for the top; array elements by index; past 32 levels
                      * the middle is left out as "…"); sanitized, printable */
} ejson_error;

/* Appends the relaxed Extended JSON of a document, or of one value. On failure the buffer holds a partial text
 * (the caller truncates or resets it) and err (may be NULL) says why. */
ejson_status ejson_write_document(strbuf *out, const uint8_t *data, size_t len, ejson_error *err);
ejson_status ejson_write_value(strbuf *out, const bson_value_t *v, ejson_error *err);
/* The same document with every object's members in jsonb's key order (shorter names first, equal lengths bytewise;
 * equal names keep their order), for text bound for a jsonb column: PostgreSQL then finds them sorted instead of
 * sorting them. The value PostgreSQL stores is the same either way. */
ejson_status ejson_write_document_jsonb(strbuf *out, const uint8_t *data, size_t len, ejson_error *err);
/* An object one member at a time, for a document written without some of its fields (a mapped document's rest,
 * map/project.c): ejson_write_name appends a field name as a JSON string and a colon (EJSON_BAD_UTF8 when it is not
 * UTF-8); ejson_write_member appends the name and the value of the field the iterator is on. depth is the level of
 * the object the member belongs to (1 for the top document), so EJSON_MAX_DEPTH counts as for the whole document;
 * err->where then names the path below that object only. Commas and braces are the caller's. */
ejson_status ejson_write_name(strbuf *out, const char *name, size_t len);
ejson_status ejson_write_member(strbuf *out, const bson_iter_t *it, int depth, ejson_error *err);

/* At least the length of the document's relaxed Extended JSON (an upper bound, for a buffer made once); SIZE_MAX
 * when the bytes are not BSON. */
size_t ejson_document_bound(const uint8_t *data, size_t len);

/* Appends the key text of an _id (see above). */
ejson_status ejson_write_key(strbuf *out, const bson_value_t *id, ejson_error *err);

/* A sentence for logs and dead letters: "a string or field name at a.b is not valid UTF-8, which PostgreSQL cannot
 * store". */
const char *ejson_error_text(const ejson_error *err, char *buf, size_t len);

/* Conveniences: the text malloc'd (free()), NULL when it cannot be made (the error is lost: use the writers). */
char *ejson_document(const bson_t *doc, size_t *len);
char *ejson_value(const bson_value_t *v);
char *ejson_key(const bson_value_t *id);

/* For every op of e not prepared yet: op->json (inserts and updates, from op->doc) and op->id_key (inserts, updates
 * and deletes), or, for an op whose text cannot be made, op->refusal instead (see core/op.h; such an op gets no key
 * either). False only when memory runs out (the entry is then left partly prepared; throw it away). */
bool ejson_prepare_entry(op_entry *e);

#endif

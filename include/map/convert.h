/*
 * convert.h — one BSON value as a value of a column's PostgreSQL type, in PostgreSQL's binary format.
 *
 * The typed tables (map/map.h) are written with binary COPY (the initial copy) and binary statement parameters (the
 * sink), so a value never goes through PostgreSQL's text input functions: what is accepted, and how, is decided here
 * and nowhere else. docs/mapping.md ("Conversions") is the table of what goes where; in short:
 *   - numbers (int32, int64, double, decimal128) go into the integer types when integral and in range, into numeric
 *     exactly (a double as the shortest decimal that reads back as the same double; NaN and ±Infinity too), into
 *     real and double precision as the nearest value (a finite value too large for real is refused);
 *   - a string goes into text (valid UTF-8, no NUL), varchar(n) (at most n characters), uuid, date, timestamptz and
 *     timestamp when it parses (ISO 8601 / RFC 3339, years 1 to 9999; no offset means UTC);
 *   - an ObjectId into text (24 hex digits) or bytea (12 bytes); a date into timestamptz / timestamp (milliseconds
 *     kept) or date (its UTC day); a boolean into boolean; binary data into bytea, and into uuid when it is a 16-byte
 *     UUID (subtype 4, or the legacy 3);
 *   - any value into jsonb, as the relaxed Extended JSON of map/ejson.h;
 *   - an array into T[] element by element (a null element is a NULL element);
 *   - a missing field, null and undefined are SQL NULL, whatever the type.
 * Everything else is a type error: the caller applies the column's on_type_error (dead letter or NULL) with the
 * reason this module gives.
 */
#ifndef OPLOG2PG_MAP_CONVERT_H
#define OPLOG2PG_MAP_CONVERT_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "map/map.h"
#include "util/strbuf.h"

typedef enum {
    CONVERT_OK = 0,
    CONVERT_TYPE_ERROR, /* the value cannot be a value of the type: why says which and why */
    CONVERT_NOMEM,      /* out could not grow (its failure flag is set) */
} convert_status;

/* A good size for why: the reasons quote at most about 60 characters of the value. */
#define CONVERT_WHY_MAX 256

/*
 * Appends v in PostgreSQL's binary format for t (the bytes of one value, without a length in front). v NULL means
 * the field is missing; a missing value, BSON null and undefined set *is_null and append nothing. On a type error,
 * why (why may be NULL, whylen 0) holds a short sentence naming the value (cut after about 60 characters) and the
 * reason: `string "abc" is not a valid uuid`, `double 3.5 is not integral`, `int64 40000 is out of range for
 * smallint`, `element 2: ...` for an element of an array. On any failure out is back at the length it had.
 * t must be a column type (map_type_parse's kind: jsonb is never an array).
 */
convert_status convert_binary(strbuf *out, const map_type *t, const bson_value_t *v, bool *is_null, char *why,
                              size_t whylen);

/* The same framed as one field of a binary COPY row: an int32 length then the bytes, or the length -1 for NULL. */
convert_status convert_copy_field(strbuf *out, const map_type *t, const bson_value_t *v, char *why, size_t whylen);

/*
 * The key column's field for the _id v: convert_copy_field, after refusing (CONVERT_TYPE_ERROR, with the reason) an
 * _id that the key's type cannot hold exactly, so that two _ids MongoDB keeps apart never get one key value: a text
 * key takes strings and ObjectIds but no string of 24 lowercase hex digits; numeric no double that is not a whole
 * number up to 2^53; real and double precision only numbers that are values of the type; timestamptz and timestamp
 * only BSON dates, date only dates at midnight UTC; uuid only binary subtype 4; bytea only binary subtype 0; jsonb
 * and arrays nothing. A missing or null _id is refused too (a key cannot be NULL).
 */
convert_status convert_key_field(strbuf *out, const map_type *t, const bson_value_t *v, char *why, size_t whylen);

/* A BSON type as messages name it ("int32", "ObjectId", "code with scope", ...). */
const char *convert_type_name(bson_type_t t);
/* True when JSON text holds the escape \u0000, the one character jsonb refuses (an escape inside a string is read
 * as a pair, so an escaped backslash before "u0000" is not one). */
bool convert_json_has_nul(const char *s, size_t len);

/* False for the column types that can never be a key exactly (jsonb, arrays): the map is refused at load. */
bool map_type_key_ok(const map_type *t);

/* The OID of a column type (the array type's OID for T[]), for PQexecParams' paramTypes. */
uint32_t map_type_oid(const map_type *t);
/* The OID of a scalar type: the element type that a binary array names in its header. */
uint32_t map_scalar_oid(map_scalar s);

#endif

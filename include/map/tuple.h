/*
 * tuple.h — reading the rows a typed map projects (map/project.h): the records of a document's rows, the binary COPY
 * tuple of each, and the framed fields of a tuple. This is the one place that decodes them; the sink (statements,
 * COPY) and the initial copy read rows through it.
 *
 * The layout, as PostgreSQL's binary COPY has it (and as map/project.c writes it):
 *   records  (uint16 table number, uint32 tuple length, tuple), one after another;
 *   tuple    int16 field count, then that many framed fields;
 *   field    int32 length (-1 for NULL), then that many bytes in the column type's binary format.
 * A framed field is also how a plan holds its row's key (map_plan.key_off), and its bytes serve unchanged as a
 * binary statement parameter. Everything is big-endian.
 */
#ifndef OPLOG2PG_MAP_TUPLE_H
#define OPLOG2PG_MAP_TUPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/strbuf.h"

/* The rows of one document: records of (uint16 table number, uint32 tuple length, tuple), one after another. */
typedef struct map_rows {
    strbuf buf;
    uint32_t count; /* records */
} map_rows;

typedef struct map_row_iter {
    const uint8_t *p, *end;
} map_row_iter;

void map_rows_iter(const map_rows *r, map_row_iter *it);
/* The next record: its table number and tuple. False at the end (or before a record cut short). */
bool map_rows_next(map_row_iter *it, uint16_t *table, const uint8_t **tuple, uint32_t *len);

/* One field of a tuple: its value (NULL for a NULL) and length (0 for a NULL), and where its frame begins. */
typedef struct map_field {
    const uint8_t *value;
    int len;
    const uint8_t *frame;
} map_field;

/* The fields of one tuple, in order. */
typedef struct map_tuple_iter {
    const uint8_t *p;
    uint16_t left;
} map_tuple_iter;

/* The number of fields of a tuple. */
static inline uint16_t map_tuple_fields(const uint8_t *tuple)
{
    return (uint16_t)(tuple[0] << 8 | tuple[1]);
}

/* Reads the framed field at f into *out; returns where the next one begins. */
static inline const uint8_t *map_field_read(const uint8_t *f, map_field *out)
{
    int32_t len = (int32_t)((uint32_t)f[0] << 24 | (uint32_t)f[1] << 16 | (uint32_t)f[2] << 8 | f[3]);
    out->frame = f;
    out->value = len < 0 ? NULL : f + 4;
    out->len = len < 0 ? 0 : len;
    return f + 4 + out->len;
}

static inline void map_tuple_iter_init(map_tuple_iter *it, const uint8_t *tuple)
{
    it->left = map_tuple_fields(tuple);
    it->p = tuple + 2;
}

/* The next field; false after the last. */
static inline bool map_tuple_next(map_tuple_iter *it, map_field *out)
{
    if (it->left == 0)
        return false;
    it->left--;
    it->p = map_field_read(it->p, out);
    return true;
}

/* Field i of a tuple (false when it has fewer). */
bool map_tuple_field(const uint8_t *tuple, size_t i, map_field *out);

#endif

/*
 * tuple.c — reading the records, tuples and fields of a typed map's rows (map/tuple.h). The per-field steps are
 * inline in the header: they run once per value on the way to PostgreSQL.
 */
#include "map/tuple.h"

void map_rows_iter(const map_rows *r, map_row_iter *it)
{
    it->p = (const uint8_t *)r->buf.data;
    it->end = it->p + r->buf.len;
}

bool map_rows_next(map_row_iter *it, uint16_t *table, const uint8_t **tuple, uint32_t *len)
{
    if (it->p == NULL || it->end - it->p < 6)
        return false;
    const uint8_t *p = it->p;
    *table = (uint16_t)(p[0] << 8 | p[1]);
    *len = (uint32_t)p[2] << 24 | (uint32_t)p[3] << 16 | (uint32_t)p[4] << 8 | p[5];
    *tuple = p + 6;
    it->p = p + 6 + *len;
    return true;
}

bool map_tuple_field(const uint8_t *tuple, size_t i, map_field *out)
{
    map_tuple_iter it;
    map_tuple_iter_init(&it, tuple);
    for (size_t n = 0; map_tuple_next(&it, out); n++)
        if (n == i)
            return true;
    return false;
}

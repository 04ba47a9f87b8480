/* common.c — what the fuzz targets share (fuzz.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

void fuzz_fail(const char *file, int line, const char *what)
{
    fprintf(stderr, "%s:%d: invariant broken: %s\n", file, line, what);
    abort();
}

bool fuzz_next_doc(const uint8_t **p, size_t *left, uint8_t **buf, bson_t *doc)
{
    *buf = NULL;
    if (*left < 5)
        return false;
    uint32_t len;
    memcpy(&len, *p, 4);
    len = BSON_UINT32_FROM_LE(len);
    if (len < 5 || len > *left)
        len = (uint32_t)*left;
    *buf = malloc(len);
    if (*buf == NULL)
        return false;
    memcpy(*buf, *p, len);
    uint32_t le = BSON_UINT32_TO_LE(len);
    memcpy(*buf, &le, 4);
    *p += len;
    *left -= len;
    return bson_init_static(doc, *buf, len);
}

static bool sound(const uint8_t *data, size_t len, int depth)
{
    bson_iter_t it;
    if (depth > 200 || !bson_iter_init_from_data(&it, data, len))
        return false;
    while (bson_iter_next(&it)) {
        if (BSON_ITER_HOLDS_DOCUMENT(&it) || BSON_ITER_HOLDS_ARRAY(&it)) {
            uint32_t n;
            const uint8_t *p;
            if (BSON_ITER_HOLDS_DOCUMENT(&it))
                bson_iter_document(&it, &n, &p);
            else
                bson_iter_array(&it, &n, &p);
            if (p == NULL || !sound(p, n, depth + 1))
                return false;
        } else if (BSON_ITER_HOLDS_CODEWSCOPE(&it)) {
            uint32_t n, sn;
            const uint8_t *scope;
            if (bson_iter_codewscope(&it, &n, &sn, &scope) == NULL || scope == NULL || !sound(scope, sn, depth + 1))
                return false;
        }
    }
    return it.err_off == 0;
}

bool fuzz_bson_sound(const uint8_t *data, size_t len)
{
    return sound(data, len, 0);
}

bool fuzz_doc_sound(const bson_t *doc)
{
    return sound(bson_get_data(doc), doc->len, 0);
}

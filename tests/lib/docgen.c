/*
 * docgen.c — see docgen.h.
 */
#include "docgen.h"

#include <stdio.h>

uint64_t docgen_rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void docgen_sized_doc(bson_t *d, doc_size size, uint64_t i)
{
    uint64_t rng = 0xD0C5ull ^ (i * 0x9E3779B97F4A7C15ull);
    bson_oid_t oid;
    uint8_t bytes[12] = {0x65,
                         0xa1,
                         0,
                         0,
                         (uint8_t)(i >> 40),
                         (uint8_t)(i >> 32),
                         (uint8_t)(i >> 24),
                         (uint8_t)(i >> 16),
                         (uint8_t)(i >> 8),
                         (uint8_t)i,
                         0x42,
                         0x17};
    bson_oid_init_from_data(&oid, bytes);
    char text[200];
    bson_init(d);
    BSON_APPEND_OID(d, "_id", &oid);
    bson_t user, tags, items;
    BSON_APPEND_DOCUMENT_BEGIN(d, "user", &user);
    snprintf(text, sizeof text, "user %llu", (unsigned long long)i);
    BSON_APPEND_UTF8(&user, "name", text);
    snprintf(text, sizeof text, "user%llu@example.com", (unsigned long long)i);
    BSON_APPEND_UTF8(&user, "email", text);
    BSON_APPEND_INT32(&user, "age", (int32_t)(18 + docgen_rng_next(&rng) % 60));
    BSON_APPEND_UTF8(&user, "city", "Lisbon");
    bson_append_document_end(d, &user);
    BSON_APPEND_ARRAY_BEGIN(d, "tags", &tags);
    BSON_APPEND_UTF8(&tags, "0", "alpha");
    BSON_APPEND_UTF8(&tags, "1", "beta");
    BSON_APPEND_UTF8(&tags, "2", "gamma");
    bson_append_array_end(d, &tags);
    BSON_APPEND_DOUBLE(d, "score", (double)(docgen_rng_next(&rng) % 1000000) / 1000.0);
    BSON_APPEND_DATE_TIME(d, "created", 1700000000000 + (int64_t)(i * 1000));
    BSON_APPEND_BOOL(d, "active", (docgen_rng_next(&rng) & 1) != 0);
    BSON_APPEND_INT64(d, "n", (int64_t)i);
    BSON_APPEND_UTF8(d, "status", "shipped");
    BSON_APPEND_UTF8(d, "note", "an ordinary order, nothing to add about it");
    if (size == DOC_LARGE) {
        BSON_APPEND_ARRAY_BEGIN(d, "items", &items);
        for (int k = 0; k < 40; k++) {
            bson_t it;
            char key[8];
            snprintf(key, sizeof key, "%d", k);
            BSON_APPEND_DOCUMENT_BEGIN(&items, key, &it);
            snprintf(text, sizeof text, "SKU-%06u", (unsigned)(docgen_rng_next(&rng) % 1000000));
            BSON_APPEND_UTF8(&it, "sku", text);
            BSON_APPEND_INT32(&it, "qty", (int32_t)(1 + docgen_rng_next(&rng) % 9));
            BSON_APPEND_DOUBLE(&it, "price", (double)(docgen_rng_next(&rng) % 100000) / 100.0);
            size_t len = 120 + docgen_rng_next(&rng) % 60;
            for (size_t c = 0; c < len; c++)
                text[c] = "abcdefghijklmnopqrstuvwxyz        "[docgen_rng_next(&rng) % 34];
            text[len] = '\0';
            BSON_APPEND_UTF8(&it, "description", text);
            bson_append_document_end(&items, &it);
        }
        bson_append_array_end(d, &items);
    }
}

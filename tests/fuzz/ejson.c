/*
 * ejson.c — fuzz target: a BSON document through the renderer of the text PostgreSQL stores (map/ejson.h): the
 * document in field order and in jsonb's key order (which must both succeed, at the same length, or both fail), each of
 * its top-level values as a value and as an _id key, and the size bound, which must hold for every document that
 * renders.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "map/ejson.h"
#include "util/strbuf.h"

int fuzz_ejson(const uint8_t *data, size_t size)
{
    uint8_t *buf;
    bson_t doc;
    if (!fuzz_next_doc(&data, &size, &buf, &doc)) {
        free(buf);
        return 0;
    }
    const uint8_t *d = bson_get_data(&doc);
    strbuf a, b;
    strbuf_init(&a);
    strbuf_init(&b);
    ejson_error ea, eb;
    ejson_status sa = ejson_write_document(&a, d, doc.len, &ea);
    ejson_status sb = ejson_write_document_jsonb(&b, d, doc.len, &eb);
    /* Both succeed or both fail (when the input has several faults, the key order may meet another one first). */
    if ((sa == EJSON_OK) != (sb == EJSON_OK))
        fprintf(stderr, "field order: %d, jsonb order: %d\n", (int)sa, (int)sb);
    FUZZ_CHECK((sa == EJSON_OK) == (sb == EJSON_OK));
    size_t bound = ejson_document_bound(d, doc.len);
    if (sa == EJSON_OK) {
        FUZZ_CHECK(a.len == b.len);
        FUZZ_CHECK(bound != SIZE_MAX && bound >= a.len);
    } else {
        char text[512];
        ejson_error_text(&ea, text, sizeof text);
        FUZZ_CHECK(memchr(ea.where, '\0', sizeof ea.where) != NULL);
    }
    bson_iter_t it;
    if (bson_iter_init(&it, &doc)) {
        while (bson_iter_next(&it)) {
            const bson_value_t *v = bson_iter_value(&it);
            strbuf_reset(&a, 4096);
            (void)ejson_write_value(&a, v, NULL);
            strbuf_reset(&a, 4096);
            (void)ejson_write_key(&a, v, NULL);
        }
    }
    strbuf_free(&a);
    strbuf_free(&b);
    free(buf);
    return 0;
}

/*
 * token.c — fuzz target: the resume-token reader (source/stream/event.h). The input is a token's KeyString bytes
 * (its `_data` once unhexed): decoded by stream_token_decode_bytes, then again wrapped as the server sends it,
 * {_data: "<hex>"} and {_data: BinData}, by stream_token_decode, which must read the same token from all three;
 * decoded tokens are ordered against themselves and against the input cut short.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "source/stream/event.h"

static bool same(const stream_token *a, const stream_token *b)
{
    return a->keystring == b->keystring && a->secs == b->secs && a->inc == b->inc && a->version == b->version &&
           a->type == b->type && a->txn_op_index == b->txn_op_index && a->from_invalidate == b->from_invalidate &&
           a->has_uuid == b->has_uuid && a->identifier_read == b->identifier_read &&
           a->has_fragment == b->has_fragment && a->fragment == b->fragment;
}

int fuzz_token(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    stream_token raw, hex, bin, cut;
    bool ok = stream_token_decode_bytes(data, size, &raw);
    if (ok)
        FUZZ_CHECK(stream_token_cmp(&raw, &raw) == 0);

    char *text = malloc(size * 2 + 1);
    FUZZ_CHECK(text != NULL);
    for (size_t i = 0; i < size; i++)
        sprintf(text + 2 * i, "%02X", data[i]);
    text[size * 2] = '\0';
    bson_t *doc = bson_new();
    BSON_APPEND_UTF8(doc, "_data", text);
    bool hex_ok = stream_token_decode(bson_get_data(doc), doc->len, &hex);
    FUZZ_CHECK(hex_ok);
    if (ok)
        FUZZ_CHECK(same(&raw, &hex));
    bson_reinit(doc);
    BSON_APPEND_BINARY(doc, "_data", BSON_SUBTYPE_BINARY, data, (uint32_t)size);
    bool bin_ok = stream_token_decode(bson_get_data(doc), doc->len, &bin);
    FUZZ_CHECK(bin_ok);
    if (ok)
        FUZZ_CHECK(same(&raw, &bin));
    bson_destroy(doc);
    free(text);

    if (ok && size > 0 && stream_token_decode_bytes(data, size - 1, &cut) && cut.keystring && raw.keystring) {
        int c1 = stream_token_cmp(&raw, &cut), c2 = stream_token_cmp(&cut, &raw);
        FUZZ_CHECK((c1 > 0 && c2 < 0) || (c1 < 0 && c2 > 0) || (c1 == 0 && c2 == 0));
    }
    return 0;
}

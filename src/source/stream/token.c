/*
 * token.c — change-stream resume tokens: the KeyString V1 bytes of a MongoDB token read back into its fields (see
 * source/stream/event.h).
 *
 * NOTES
 * - The byte values are KeyString's CType enum (src/mongo/db/storage/key_string/key_string.cpp in mongodb/mongo):
 *   Timestamp 130 then 8 bytes big-endian (secs, inc); an integer n > 0 as CType 42 + k followed by the k big-endian
 *   bytes of n << 1 (the low bit would flag a fraction), 0 as CType 41; false 110, true 111; null 20; BinData 90, a
 *   size byte (255: a 4-byte size follows), the subtype, the bytes; the end of the key 4. The eventIdentifier is an
 *   object (70) whose fields are a generic CType (all numbers 30), the name and its NUL, then the value with its own
 *   CType, the object ending with a NUL (BuilderBase::_appendObject); strings (60) run to a NUL, an embedded NUL
 *   written as 0 255. Real tokens decoded byte by byte agree (airbytehq/airbyte#33790 and #70222; tested in
 *   tests/unit/test_stream_event.c).
 * - Only what a resume token holds is read: the identifier (a documentKey or operationDescription) is skipped value
 *   by value, and a value this reader cannot skip (a double with a fraction, a decimal) only leaves fragmentNum
 *   unknown (identifier_read false); the clusterTime, which is all the position needs, is read before it.
 */
#include <stdlib.h>
#include <string.h>

#include "source/stream/event.h"

enum {
    KS_MINKEY = 10,
    KS_UNDEFINED = 15,
    KS_NULL = 20,
    KS_NUM_NEG8 = 32, /* negative integers of 8 .. 1 bytes: 32 .. 39 */
    KS_NUM_NEG1 = 39,
    KS_NUM_ZERO = 41,
    KS_NUM_POS1 = 43, /* positive integers of 1 .. 8 bytes: 43 .. 50 */
    KS_NUM_POS8 = 50,
    KS_STRING = 60,
    KS_OBJECT = 70,
    KS_ARRAY = 80,
    KS_BINDATA = 90,
    KS_OID = 100,
    KS_FALSE = 110,
    KS_TRUE = 111,
    KS_DATE = 120,
    KS_TIMESTAMP = 130,
    KS_MAXKEY = 240,
    KS_END = 4,
};

typedef struct rd {
    const uint8_t *p, *end;
} rd;

static bool take(rd *r, size_t n, const uint8_t **out)
{
    if ((size_t)(r->end - r->p) < n)
        return false;
    if (out)
        *out = r->p;
    r->p += n;
    return true;
}

static uint64_t be(const uint8_t *b, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = (v << 8) | b[i];
    return v;
}

/* A non-negative integer (CType already read). */
static bool read_uint(rd *r, uint8_t ctype, uint64_t *out)
{
    const uint8_t *b;
    if (ctype == KS_NUM_ZERO) {
        *out = 0;
        return true;
    }
    if (ctype < KS_NUM_POS1 || ctype > KS_NUM_POS8)
        return false;
    size_t n = (size_t)(ctype - KS_NUM_POS1 + 1);
    if (!take(r, n, &b))
        return false;
    uint64_t v = be(b, n);
    if (v & 1)
        return false; /* a fraction follows: not an integer */
    *out = v >> 1;
    return true;
}

static bool next_ctype(rd *r, uint8_t *c)
{
    const uint8_t *b;
    if (!take(r, 1, &b))
        return false;
    *c = b[0];
    return true;
}

/* Skips a NUL-terminated run (a string with 0 255 escapes, or a field name). */
static bool skip_cstring(rd *r, bool escapes)
{
    while (r->p < r->end) {
        uint8_t c = *r->p++;
        if (c != 0)
            continue;
        if (escapes && r->p < r->end && *r->p == 0xFF) {
            r->p++;
            continue;
        }
        return true;
    }
    return false;
}

static bool skip_value(rd *r, uint8_t ctype, int depth)
{
    const uint8_t *b;
    uint64_t u;
    if (depth > 100)
        return false;
    switch (ctype) {
    case KS_MINKEY:
    case KS_UNDEFINED:
    case KS_NULL:
    case KS_MAXKEY:
    case KS_FALSE:
    case KS_TRUE:
    case KS_NUM_ZERO:
        return true;
    case KS_STRING:
        return skip_cstring(r, true);
    case KS_OID:
        return take(r, 12, NULL);
    case KS_DATE:
    case KS_TIMESTAMP:
        return take(r, 8, NULL);
    case KS_BINDATA: {
        if (!take(r, 1, &b))
            return false;
        uint64_t size = b[0];
        if (size == 0xFF) {
            if (!take(r, 4, &b))
                return false;
            size = be(b, 4);
        }
        return take(r, 1, NULL) && take(r, (size_t)size, NULL);
    }
    case KS_OBJECT:
    case KS_ARRAY:
        for (;;) {
            uint8_t c;
            if (!next_ctype(r, &c))
                return false;
            if (c == 0)
                return true;
            if (ctype == KS_OBJECT) {
                /* A field: its generic CType (read above), its name, then its value with the value's own CType. */
                if (!skip_cstring(r, false) || !next_ctype(r, &c))
                    return false;
            }
            if (!skip_value(r, c, depth + 1))
                return false;
        }
    default:
        if (ctype >= KS_NUM_POS1 && ctype <= KS_NUM_POS8)
            return read_uint(r, ctype, &u);
        if (ctype >= KS_NUM_NEG8 && ctype <= KS_NUM_NEG1) {
            /* Negative integers: the magnitude's bytes inverted, 8 bytes for 32 down to 1 byte for 39. */
            size_t n = (size_t)(KS_NUM_NEG1 - ctype + 1);
            if (!take(r, n, &b))
                return false;
            return (~b[n - 1] & 1) == 0; /* no fraction */
        }
        return false; /* doubles with a fraction, decimals, regexes, code, DBRefs: not read here */
    }
}

bool stream_token_decode_bytes(const uint8_t *data, size_t len, stream_token *out)
{
    rd r = {data, data + len};
    const uint8_t *b;
    uint8_t c;
    uint64_t v;
    stream_token t;
    memset(&t, 0, sizeof t);
    memset(out, 0, sizeof *out);
    if (!next_ctype(&r, &c) || c != KS_TIMESTAMP || !take(&r, 8, &b))
        return false;
    t.secs = (uint32_t)be(b, 4);
    t.inc = (uint32_t)be(b + 4, 4);
    if (!next_ctype(&r, &c) || !read_uint(&r, c, &v) || v > 2)
        return false;
    t.version = (int32_t)v;
    t.type = STREAM_TOKEN_EVENT;
    if (t.version >= 1) {
        if (!next_ctype(&r, &c) || !read_uint(&r, c, &v) || (v != STREAM_TOKEN_EVENT && v != STREAM_TOKEN_HWM))
            return false;
        t.type = (int32_t)v;
    }
    if (!next_ctype(&r, &c) || !read_uint(&r, c, &t.txn_op_index))
        return false;
    if (t.version >= 1) {
        if (!next_ctype(&r, &c) || (c != KS_FALSE && c != KS_TRUE))
            return false;
        t.from_invalidate = c == KS_TRUE;
    }
    if (!next_ctype(&r, &c))
        return false;
    if (c == KS_BINDATA) {
        /* A UUID: 16 bytes of subtype 4 (size byte 16). */
        if (!take(&r, 1, &b) || b[0] != 16 || !take(&r, 1, &b) || b[0] != 4 || !take(&r, 16, NULL))
            return false;
        t.has_uuid = true;
    } else if (c != KS_NULL) {
        return false;
    }
    t.keystring = true;
    /* Then the eventIdentifier (none in a high-water mark), fragmentNum when the event was split, and the end. */
    if (next_ctype(&r, &c)) {
        if (c == KS_END) {
            t.identifier_read = true;
        } else if (skip_value(&r, c, 0)) {
            t.identifier_read = true;
            if (next_ctype(&r, &c) && c != KS_END) {
                if (read_uint(&r, c, &t.fragment))
                    t.has_fragment = true;
                else
                    t.identifier_read = false; /* something this reader does not know: fragmentNum unknown */
            }
        }
    }
    *out = t;
    return true;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

bool stream_token_decode(const uint8_t *doc, uint32_t len, stream_token *out)
{
    bson_iter_t it;
    memset(out, 0, sizeof *out);
    if (!doc || !bson_iter_init_from_data(&it, doc, len) || !bson_iter_find(&it, "_data"))
        return false;
    if (BSON_ITER_HOLDS_UTF8(&it)) {
        uint32_t n = 0;
        const char *hex = bson_iter_utf8(&it, &n);
        uint8_t stackbuf[256];
        if (n % 2 != 0)
            return true; /* not hex: opaque */
        uint8_t *buf = n / 2 <= sizeof stackbuf ? stackbuf : malloc(n / 2);
        if (!buf)
            return true; /* no memory to look: treated as opaque, the event's clusterTime serves */
        bool hex_ok = true;
        for (uint32_t i = 0; i < n / 2 && hex_ok; i++) {
            int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
            hex_ok = hi >= 0 && lo >= 0;
            if (hex_ok)
                buf[i] = (uint8_t)(hi << 4 | lo);
        }
        if (hex_ok)
            stream_token_decode_bytes(buf, n / 2, out);
        if (buf != stackbuf)
            free(buf);
        return true;
    }
    if (BSON_ITER_HOLDS_BINARY(&it)) {
        uint32_t n = 0;
        const uint8_t *bin = NULL;
        bson_subtype_t st;
        bson_iter_binary(&it, &st, &n, &bin);
        stream_token_decode_bytes(bin, n, out);
        return true;
    }
    return true; /* opaque */
}

static int cmp_u64(uint64_t a, uint64_t b)
{
    return a < b ? -1 : a > b ? 1 : 0;
}

int stream_token_cmp(const stream_token *a, const stream_token *b)
{
    int c = cmp_u64(((uint64_t)a->secs << 32) | a->inc, ((uint64_t)b->secs << 32) | b->inc);
    if (c == 0)
        c = cmp_u64((uint64_t)a->type, (uint64_t)b->type);
    if (c == 0)
        c = cmp_u64(a->txn_op_index, b->txn_op_index);
    if (c == 0)
        c = cmp_u64(a->has_fragment ? a->fragment : 0, b->has_fragment ? b->fragment : 0);
    return c;
}

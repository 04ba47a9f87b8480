/*
 * hashkey.c — see hashkey.h. MD5 (RFC 1321) written here, then the element hashing of src/mongo/db/hasher.cpp
 * (BSONElementHasher::hash64 / recursiveHash), checked against jstests/core/hashtest.js's vectors in
 * tests/unit/test_mongosim_hashkey.c.
 */
#include "hashkey.h"
#include "update.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

/* ---- MD5 ---- */

typedef struct {
    uint32_t a, b, c, d;
    uint64_t len;
    uint8_t buf[64];
    size_t n;
} md5_ctx;
static const uint32_t K[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391};
static const uint8_t R[64] = {7,  12, 17, 22, 7,  12, 17, 22, 7,  12, 17, 22, 7,  12, 17, 22, 5,  9,  14, 20, 5,  9,
                              14, 20, 5,  9,  14, 20, 5,  9,  14, 20, 4,  11, 16, 23, 4,  11, 16, 23, 4,  11, 16, 23,
                              4,  11, 16, 23, 6,  10, 15, 21, 6,  10, 15, 21, 6,  10, 15, 21, 6,  10, 15, 21};
static void md5_block(md5_ctx *m, const uint8_t *p)
{
    uint32_t w[16];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[i * 4] | (uint32_t)p[i * 4 + 1] << 8 | (uint32_t)p[i * 4 + 2] << 16 |
               (uint32_t)p[i * 4 + 3] << 24;
    uint32_t a = m->a, b = m->b, c = m->c, d = m->d;
    for (int i = 0; i < 64; i++) {
        uint32_t f;
        int g;
        if (i < 16) {
            f = (b & c) | (~b & d);
            g = i;
        } else if (i < 32) {
            f = (d & b) | (~d & c);
            g = (5 * i + 1) % 16;
        } else if (i < 48) {
            f = b ^ c ^ d;
            g = (3 * i + 5) % 16;
        } else {
            f = c ^ (b | ~d);
            g = (7 * i) % 16;
        }
        uint32_t t = d;
        d = c;
        c = b;
        uint32_t x = a + f + K[i] + w[g];
        b = b + ((x << R[i]) | (x >> (32 - R[i])));
        a = t;
    }
    m->a += a;
    m->b += b;
    m->c += c;
    m->d += d;
}
static void md5_init(md5_ctx *m)
{
    m->a = 0x67452301;
    m->b = 0xefcdab89;
    m->c = 0x98badcfe;
    m->d = 0x10325476;
    m->len = 0;
    m->n = 0;
}
static void md5_add(md5_ctx *m, const void *data, size_t len)
{
    const uint8_t *p = data;
    m->len += len;
    while (len > 0) {
        size_t take = 64 - m->n < len ? 64 - m->n : len;
        memcpy(m->buf + m->n, p, take);
        m->n += take;
        p += take;
        len -= take;
        if (m->n == 64) {
            md5_block(m, m->buf);
            m->n = 0;
        }
    }
}
static void md5_finish(md5_ctx *m, uint8_t out[16])
{
    uint64_t bits = m->len * 8;
    uint8_t pad = 0x80, zero = 0;
    md5_add(m, &pad, 1);
    while (m->n != 56)
        md5_add(m, &zero, 1);
    uint8_t l[8];
    for (int i = 0; i < 8; i++)
        l[i] = (uint8_t)(bits >> (8 * i));
    md5_add(m, l, 8);
    uint32_t v[4] = {m->a, m->b, m->c, m->d};
    for (int i = 0; i < 16; i++)
        out[i] = (uint8_t)(v[i / 4] >> (8 * (i % 4)));
}

/* ---- the element hash ---- */

/* canonicalizeBSONType (src/mongo/bson/bsontypes.h): numbers share one class, so 1, 1L and 1.0 hash alike. */
static int32_t canonical_type(bson_type_t t)
{
    return update_type_rank(t);
}

/* BSONElement::safeNumberLongForHash: NaN is 0, exactly 2^63 is the lowest int64 (SERVER-37183), larger values clamp
 * to the largest, smaller to the lowest, others truncate. */
static int64_t number_for_hash(const bson_iter_t *it)
{
    if (BSON_ITER_HOLDS_DOUBLE(it)) {
        double d = bson_iter_double(it);
        if (isnan(d))
            return 0;
        if (d == 9223372036854775808.0)
            return INT64_MIN;
        if (d > 9223372036854775808.0)
            return INT64_MAX;
        if (d < -9223372036854775808.0)
            return INT64_MIN;
        return (int64_t)d;
    }
    return bson_iter_as_int64(it);
}

static void put_le32(md5_ctx *m, int32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)((uint32_t)v >> 8), (uint8_t)((uint32_t)v >> 16),
                    (uint8_t)((uint32_t)v >> 24)};
    md5_add(m, b, 4);
}

static void hash_element(md5_ctx *m, const bson_iter_t *it, bool with_name);

/* A sub-document: each element with its name, then the EOO element (canonical type 0, no name). */
static void hash_doc(md5_ctx *m, const uint8_t *data, uint32_t len)
{
    bson_t d;
    bson_iter_t in;
    if (bson_init_static(&d, data, len) && bson_iter_init(&in, &d))
        while (bson_iter_next(&in))
            hash_element(m, &in, true);
    put_le32(m, 0);
}

/* recursiveHash: the canonical type (int32, little-endian), the name with its NUL when inside a document, then an
 * int64 for a number, the elements of a document or array, or the value's bytes as BSON stores them. */
static void hash_element(md5_ctx *m, const bson_iter_t *it, bool with_name)
{
    bson_type_t t = bson_iter_type(it);
    put_le32(m, canonical_type(t));
    if (with_name)
        md5_add(m, bson_iter_key(it), strlen(bson_iter_key(it)) + 1);
    if (t == BSON_TYPE_DOCUMENT || t == BSON_TYPE_ARRAY) {
        uint32_t len;
        const uint8_t *p;
        if (t == BSON_TYPE_DOCUMENT)
            bson_iter_document(it, &len, &p);
        else
            bson_iter_array(it, &len, &p);
        hash_doc(m, p, len);
    } else if (t == BSON_TYPE_DOUBLE || t == BSON_TYPE_INT32 || t == BSON_TYPE_INT64) {
        uint64_t v = (uint64_t)number_for_hash(it);
        uint8_t b[8];
        for (int i = 0; i < 8; i++)
            b[i] = (uint8_t)(v >> (8 * i));
        md5_add(m, b, 8);
    } else {
        /* The value's bytes: libbson's iterator keeps the value's offset (d1) and the next element's (next_off). */
        md5_add(m, it->raw + it->d1, it->next_off - it->d1);
    }
}

int64_t hashkey_hash64(const bson_iter_t *element, int32_t seed)
{
    md5_ctx m;
    md5_init(&m);
    put_le32(&m, seed);
    hash_element(&m, element, false);
    uint8_t d[16];
    md5_finish(&m, d);
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--)
        h = (h << 8) | d[i];
    return (int64_t)h;
}

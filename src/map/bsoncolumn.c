/*
 * bsoncolumn.c — the BSONColumn decoder (see map/bsoncolumn.h).
 *
 * NOTES (the format, as the server reads it; sources in mongodb/mongo, src/mongo/bson/column/):
 *   - A column is a sequence of control bytes, each followed by its payload, ending with one 0x00 byte that must be
 *     the last byte (bsoncolumn.cpp, _handleEOO).
 *   - A control byte c with (c & 0xE0) == 0, or c == 0xFF (MinKey) or 0x7F (MaxKey), starts a literal: a BSON
 *     element whose field name is empty (type byte, 0x00, value) (bsoncolumn_util.h,
 *     isUncompressedLiteralControlByte). It is the next value and the base of the deltas that follow.
 *   - 0xF0 (legacy), 0xF1 and 0xF2 start interleaved mode: a reference object follows (0xF2: the root is an array;
 *     0xF1/0xF2 also descend into arrays, 0xF0 treats arrays as leaves). Each leaf of the reference object is a
 *     stream of its own; the reference itself is not a value. Each position rebuilds the object by taking one value
 *     from every leaf's stream in the reference's order, a stream's control bytes coming from the shared buffer when
 *     its blocks run out. A missing leaf is left out; a sub-object with nothing in it is left out unless it is empty
 *     in the reference; a root with nothing in it is a missing position. A 0x00 where the first leaf needs a control
 *     byte ends interleaved mode (every other stream must be exhausted then) (bsoncolumn.cpp,
 *     _incrementInterleaved, _processScalar, _drainAndVerifyDecoders; interleaved_schema.cpp).
 *   - Any other control byte is a run of (c & 0x0F) + 1 Simple-8b blocks of 8 little-endian bytes; its high nibble is
 *     the scale of double deltas: 0x9..0xD scale by 1, 10, 100, 10^4, 10^8, 0x8 means "the value's bits as an
 *     integer" and is the only scale other types allow (bsoncolumn_util.h, scaleIndexForControlByte;
 *     simple8b_type_util.h, kScaleMultiplier). The blocks must leave at least one byte after them.
 *   - Each slot of a block is a zigzag-encoded delta (or missing: all the slot's bits set). Strings, code, binary
 *     data and decimal128 take 128-bit deltas; the rest 64-bit. ObjectId, date and timestamp take deltas of deltas
 *     (bsoncolumn_util.h, usesDeltaOfDelta/uses128bit). A zero delta repeats the previous value whatever its type;
 *     a non-zero one is only valid for the numeric encodings (simple8b_type_util.cpp). Deltas before any literal
 *     are missing positions.
 *   - The Simple-8b selector tables are simple8b_helpers.h's; the run-length selector 15 repeats the last slot of
 *     the previous block (or of the stream's previous run of blocks; 0 right after a literal) (extension + 1) * 120
 *     times (simple8b.inl, decodeAndVisit, and bsoncolumn.cpp, loadControl).
 * The decoder works one position at a time with a fixed amount of state per stream: no block is expanded, so a
 * run-length block of 1920 positions costs nothing until read.
 */
#include "map/bsoncolumn.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Nesting of reference objects the decoder follows (BSON documents the server accepts nest at most ~180 deep). */
#define BCOL_MAX_DEPTH 200

typedef struct {
    uint64_t hi, lo;
} u128;

/* The previous value of a stream: a BSON type and its value bytes, either in the column or in own. */
typedef struct {
    uint8_t type; /* 0: none yet (EOO) */
    const uint8_t *ext;
    uint32_t len;
    bool owned;
    uint8_t own[32];
} lastval;

/* One stream: the state the server keeps in a DecodingState. */
typedef struct {
    lastval last;
    bool is128;
    bool dod;
    uint8_t scale;   /* 0..5 */
    int64_t enc;     /* last encoded value (or last delta, for delta of delta) */
    int64_t enc_dod; /* last encoded value, for delta of delta */
    u128 enc128;
    /* Simple-8b reader over the current run of blocks */
    bool reader_valid; /* a run was started since the last literal */
    size_t run_off;    /* offset of the control byte of the current run (when reader_valid) */
    size_t blk_off;    /* offset of the next block to read */
    size_t cur_blk;    /* offset of the block the last slot came from */
    unsigned blk_left; /* blocks not yet read in the run */
    uint64_t cur;      /* the current (non-RLE) block, its selector removed */
    unsigned slot_bits, slot_cnt_bits, slot_scale, slots_left;
    unsigned rle_left;
    bool prev_present; /* the last slot read (RLE repeats it) */
    u128 prev;
} stream;

typedef enum { E_ENTER, E_SCALAR, E_EXIT } entry_op;

typedef struct {
    entry_op op;
    const char *name; /* in the column's bytes */
    uint32_t namelen;
    uint8_t type; /* E_ENTER/E_EXIT: 0x03 or 0x04 */
    bool allow_empty;
    uint32_t idx; /* E_SCALAR: its stream */
} entry;

typedef struct {
    uint8_t *buf;
    size_t len, cap;
    bool oom;
} obuf;

struct bcol_decoder {
    const uint8_t *data;
    size_t len;
    size_t off; /* next control byte */
    size_t pos; /* positions returned */
    int done;   /* 0, or BCOL_END / BCOL_ERROR once reached */
    char err[BCOL_ERR_MAX];
    stream regular;
    /* interleaved mode */
    bool interleaved;
    stream *streams;
    size_t nstreams;
    entry *entries;
    size_t nentries, entcap;
    obuf obj;             /* the object being built */
    obuf lastobj;         /* the last object of interleaved mode (the regular stream's base after it) */
    bool lastobj_present; /* the last position of interleaved mode was an object, not a missing one */
};

/* ---- errors ---- */

static bcol_status fail(bcol_decoder *d, size_t at, const char *fmt, ...)
{
    char msg[BCOL_ERR_MAX - 40];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(d->err, sizeof d->err, "BSONColumn byte %zu: %s", at, msg);
    d->done = BCOL_ERROR;
    return BCOL_ERROR;
}

/* ---- 128-bit helpers ---- */

static u128 u128_add(u128 a, u128 b)
{
    u128 r = {a.hi + b.hi, a.lo + b.lo};
    if (r.lo < a.lo)
        r.hi++;
    return r;
}

static u128 u128_shl(u128 a, unsigned n)
{
    u128 r;
    if (n == 0)
        return a;
    if (n >= 128)
        return (u128){0, 0};
    if (n >= 64) {
        r.hi = a.lo << (n - 64);
        r.lo = 0;
    } else {
        r.hi = (a.hi << n) | (a.lo >> (64 - n));
        r.lo = a.lo << n;
    }
    return r;
}

/* Zigzag: the sign moved to the lowest bit (simple8b_type_util.h, decodeInt64/decodeInt128). */
static int64_t unzig64(uint64_t v)
{
    return (int64_t)((v >> 1) ^ (0 - (v & 1)));
}

static u128 unzig128(u128 v)
{
    uint64_t m = 0 - (v.lo & 1);
    u128 r = {v.hi >> 1, (v.lo >> 1) | (v.hi << 63)};
    r.hi ^= m;
    r.lo ^= m;
    return r;
}

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- output buffers ---- */

static bool ob_reserve(obuf *b, size_t n)
{
    if (b->oom)
        return false;
    if (b->len + n <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n) {
        if (cap > SIZE_MAX / 2) {
            b->oom = true;
            return false;
        }
        cap *= 2;
    }
    uint8_t *nb = realloc(b->buf, cap);
    if (!nb) {
        b->oom = true;
        return false;
    }
    b->buf = nb;
    b->cap = cap;
    return true;
}

static bool ob_put(obuf *b, const void *p, size_t n)
{
    if (!ob_reserve(b, n))
        return false;
    if (n)
        memcpy(b->buf + b->len, p, n);
    b->len += n;
    return true;
}

/* ---- values ---- */

static const uint8_t *lv_bytes(const lastval *l)
{
    return l->owned ? l->own : l->ext;
}

/* Whether a document (not yet validated) nests at most BCOL_MAX_DEPTH deep; bson_iter checks each element's bounds. */
static bool nesting_ok(const bson_t *b, int depth)
{
    bson_iter_t it;
    if (depth > BCOL_MAX_DEPTH || !bson_iter_init(&it, b))
        return false;
    while (bson_iter_next(&it)) {
        if (BSON_ITER_HOLDS_DOCUMENT(&it) || BSON_ITER_HOLDS_ARRAY(&it)) {
            uint32_t l;
            const uint8_t *p;
            bson_t sub;
            if (BSON_ITER_HOLDS_DOCUMENT(&it))
                bson_iter_document(&it, &l, &p);
            else
                bson_iter_array(&it, &l, &p);
            if (!p || !bson_init_static(&sub, p, l) || !nesting_ok(&sub, depth + 1))
                return false;
        }
    }
    return true;
}

/*
 * The size of the value of a BSON element of type t at p (n bytes available), or -1 when it does not fit or is not
 * a value BSONColumn allows. Documents are checked by libbson.
 */
static int64_t value_size(uint8_t t, const uint8_t *p, size_t n, const char **why)
{
    *why = "value runs past the end";
    switch (t) {
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DATE_TIME:
    case BSON_TYPE_TIMESTAMP:
    case BSON_TYPE_INT64:
        return n >= 8 ? 8 : -1;
    case BSON_TYPE_INT32:
        return n >= 4 ? 4 : -1;
    case BSON_TYPE_DECIMAL128:
        return n >= 16 ? 16 : -1;
    case BSON_TYPE_OID:
        return n >= 12 ? 12 : -1;
    case BSON_TYPE_BOOL:
        if (n < 1)
            return -1;
        *why = "boolean is neither 0 nor 1";
        return p[0] <= 1 ? 1 : -1;
    case BSON_TYPE_UNDEFINED:
    case BSON_TYPE_NULL:
    case BSON_TYPE_MINKEY:
    case BSON_TYPE_MAXKEY:
        return 0;
    case BSON_TYPE_UTF8:
    case BSON_TYPE_CODE:
    case BSON_TYPE_SYMBOL: {
        if (n < 4)
            return -1;
        uint32_t l = rd32(p);
        if (l < 1 || l > n - 4)
            return -1;
        *why = "string is not NUL-terminated";
        if (p[4 + l - 1] != 0)
            return -1;
        return 4 + (int64_t)l;
    }
    case BSON_TYPE_BINARY: {
        if (n < 5)
            return -1;
        uint32_t l = rd32(p);
        if (l > INT32_MAX || l > n - 5)
            return -1;
        return 5 + (int64_t)l;
    }
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY: {
        if (n < 5)
            return -1;
        uint32_t l = rd32(p);
        if (l < 5 || l > n || l > INT32_MAX)
            return -1;
        bson_t b;
        size_t eoff;
        *why = "embedded document is not valid BSON";
        if (!bson_init_static(&b, p, l))
            return -1;
        /* depth first (bounded), so that the validation's recursion is bounded too */
        if (!nesting_ok(&b, 0)) {
            *why = "embedded document nests too deep or is not valid BSON";
            return -1;
        }
        if (!bson_validate(&b, BSON_VALIDATE_NONE, &eoff))
            return -1;
        return l;
    }
    case BSON_TYPE_REGEX: {
        size_t i = 0;
        for (int k = 0; k < 2; k++) {
            while (i < n && p[i])
                i++;
            if (i >= n)
                return -1;
            i++;
        }
        return (int64_t)i;
    }
    case BSON_TYPE_DBPOINTER: {
        if (n < 4)
            return -1;
        uint32_t l = rd32(p);
        if (l < 1 || l > n - 4 || n - 4 - l < 12 || p[4 + l - 1] != 0)
            return -1;
        return 4 + (int64_t)l + 12;
    }
    case BSON_TYPE_CODEWSCOPE:
        *why = "CodeWScope is not a valid BSONColumn element type";
        return -1;
    default:
        *why = "unknown BSON type";
        return -1;
    }
}

/* Fills v from a value of type t (bytes p, already checked). The value borrows p. */
static void make_value(uint8_t t, const uint8_t *p, uint32_t len, bson_value_t *v)
{
    memset(v, 0, sizeof *v);
    v->value_type = (bson_type_t)t;
    switch (t) {
    case BSON_TYPE_DOUBLE: {
        uint64_t bits = rd64(p);
        memcpy(&v->value.v_double, &bits, 8);
        break;
    }
    case BSON_TYPE_UTF8:
        v->value.v_utf8.str = (char *)(uintptr_t)(p + 4);
        v->value.v_utf8.len = rd32(p) - 1;
        break;
    case BSON_TYPE_CODE:
        v->value.v_code.code = (char *)(uintptr_t)(p + 4);
        v->value.v_code.code_len = rd32(p) - 1;
        break;
    case BSON_TYPE_SYMBOL:
        v->value.v_symbol.symbol = (char *)(uintptr_t)(p + 4);
        v->value.v_symbol.len = rd32(p) - 1;
        break;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        v->value.v_doc.data = (uint8_t *)(uintptr_t)p;
        v->value.v_doc.data_len = len;
        break;
    case BSON_TYPE_BINARY:
        v->value.v_binary.data_len = rd32(p);
        v->value.v_binary.subtype = (bson_subtype_t)p[4];
        v->value.v_binary.data = (uint8_t *)(uintptr_t)(p + 5);
        break;
    case BSON_TYPE_OID:
        memcpy(v->value.v_oid.bytes, p, 12);
        break;
    case BSON_TYPE_BOOL:
        v->value.v_bool = p[0] != 0;
        break;
    case BSON_TYPE_DATE_TIME:
        v->value.v_datetime = (int64_t)rd64(p);
        break;
    case BSON_TYPE_REGEX: {
        size_t l = strlen((const char *)p);
        v->value.v_regex.regex = (char *)(uintptr_t)p;
        v->value.v_regex.options = (char *)(uintptr_t)(p + l + 1);
        break;
    }
    case BSON_TYPE_DBPOINTER: {
        v->value.v_dbpointer.collection = (char *)(uintptr_t)(p + 4);
        v->value.v_dbpointer.collection_len = rd32(p) - 1;
        memcpy(v->value.v_dbpointer.oid.bytes, p + 4 + rd32(p), 12);
        break;
    }
    case BSON_TYPE_INT32:
        v->value.v_int32 = (int32_t)rd32(p);
        break;
    case BSON_TYPE_TIMESTAMP: {
        uint64_t ts = rd64(p);
        v->value.v_timestamp.increment = (uint32_t)ts;
        v->value.v_timestamp.timestamp = (uint32_t)(ts >> 32);
        break;
    }
    case BSON_TYPE_INT64:
        v->value.v_int64 = (int64_t)rd64(p);
        break;
    case BSON_TYPE_DECIMAL128:
        v->value.v_decimal128.low = rd64(p);
        v->value.v_decimal128.high = rd64(p + 8);
        break;
    default: /* undefined, null, minkey, maxkey: no payload */
        break;
    }
}

static bool uses128(uint8_t t)
{
    return t == BSON_TYPE_UTF8 || t == BSON_TYPE_CODE || t == BSON_TYPE_BINARY || t == BSON_TYPE_DECIMAL128;
}

/* ObjectId → integer with the entropy low (simple8b_type_util.cpp, encodeObjectId): counter and time bytes
 * interleaved from the least significant byte: C2 T3 C1 T2 C0 T1 T0. */
static int64_t oid_encode(const uint8_t *o)
{
    uint8_t b[8] = {o[11], o[3], o[10], o[2], o[9], o[1], o[0], 0};
    return (int64_t)rd64(b);
}

static void oid_decode(int64_t val, const uint8_t *unique5, uint8_t *o)
{
    uint8_t b[8];
    wr64(b, (uint64_t)val);
    o[0] = b[6];
    o[1] = b[5];
    o[2] = b[3];
    o[3] = b[1];
    memmove(o + 4, unique5, 5);
    o[9] = b[4];
    o[10] = b[2];
    o[11] = b[0];
}

/* 16 bytes as a little-endian 128-bit integer (simple8b_type_util.cpp, encodeCharArray). */
static u128 bytes16(const uint8_t *p)
{
    return (u128){rd64(p + 8), rd64(p)};
}

static const double scale_mult[5] = {1, 10, 100, 10000, 100000000};

/* simple8b_type_util.cpp, encodeDouble: the double times the scale must be an integer within ±2^53 that divides
 * back to exactly the same bits. */
static bool double_encode(double v, unsigned scale, int64_t *out)
{
    if (scale == 5) {
        memcpy(out, &v, 8);
        return true;
    }
    double m = v * scale_mult[scale];
    if (!(m >= -9007199254740992.0 && m <= 9007199254740992.0))
        return false;
    long long r = llround(m);
    double back = (double)r / scale_mult[scale];
    if (memcmp(&back, &v, 8) != 0)
        return false;
    *out = r;
    return true;
}

static double double_decode(int64_t v, unsigned scale)
{
    if (scale == 5) {
        double d;
        memcpy(&d, &v, 8);
        return d;
    }
    return (double)v / scale_mult[scale];
}

/* The stream's base is the literal element's value at p (type t, len bytes): bsoncolumn.cpp loadUncompressed. */
static void stream_literal(stream *s, uint8_t t, const uint8_t *p, uint32_t len)
{
    memset(s, 0, sizeof *s);
    s->last.type = t;
    s->last.ext = p;
    s->last.len = len;
    s->is128 = uses128(t);
    s->dod = t == BSON_TYPE_OID || t == BSON_TYPE_DATE_TIME || t == BSON_TYPE_TIMESTAMP;
    s->scale = 5;
    switch (t) {
    case BSON_TYPE_UTF8:
    case BSON_TYPE_CODE: {
        /* a string of at most 16 bytes not starting with NUL, reversed (encodeString); others encode as 0 */
        uint32_t sl = rd32(p) - 1;
        if (sl <= 16 && (sl == 0 || p[4] != 0)) {
            uint8_t b[16] = {0};
            for (uint32_t i = 0; i < sl; i++)
                b[i] = p[4 + sl - 1 - i];
            s->enc128 = bytes16(b);
        }
        break;
    }
    case BSON_TYPE_BINARY: {
        uint32_t bl = rd32(p);
        if (bl <= 16) {
            uint8_t b[16] = {0};
            memcpy(b, p + 5, bl);
            s->enc128 = bytes16(b);
        }
        break;
    }
    case BSON_TYPE_DECIMAL128:
        s->enc128 = bytes16(p);
        break;
    case BSON_TYPE_OID:
        s->enc = oid_encode(p);
        break;
    case BSON_TYPE_DATE_TIME:
    case BSON_TYPE_INT64:
    case BSON_TYPE_TIMESTAMP:
        s->enc = (int64_t)rd64(p);
        break;
    case BSON_TYPE_BOOL:
        s->enc = p[0];
        break;
    case BSON_TYPE_INT32:
        s->enc = (int32_t)rd32(p);
        break;
    default:
        break;
    }
    if (s->dod) {
        s->enc_dod = s->enc;
        s->enc = 0;
    }
}

/* Reads the literal element at off (control byte = its type); sets *size to the element's bytes. */
static bcol_status read_literal(bcol_decoder *d, size_t off, stream *s, size_t *size)
{
    uint8_t t = d->data[off];
    if (off + 1 >= d->len)
        return fail(d, off, "literal runs past the end");
    if (d->data[off + 1] != 0)
        return fail(d, off, "literal has a field name");
    const char *why;
    int64_t vs = value_size(t, d->data + off + 2, d->len - off - 2, &why);
    if (vs < 0)
        return fail(d, off, "literal of type 0x%02x: %s", t, why);
    stream_literal(s, t, d->data + off + 2, (uint32_t)vs);
    *size = 2 + (size_t)vs;
    return BCOL_VALUE;
}

/* ---- Simple-8b ---- */

/* Bits per slot for selectors 1..14 and their slot counts (simple8b_helpers.h, kBitsPerIntForSelector[0] and
 * kIntsStoreForSelector[0]). */
static const uint8_t base_bits[15] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 20, 30, 60};
/* Selector 7 extended (1..9): value bits; 4 bits of trailing-zero count, each 1 zero. */
static const uint8_t sel7_bits[10] = {0, 2, 3, 4, 5, 7, 10, 14, 24, 52};
/* Selector 8 extended (1..13): value bits; 1..7 take a 4-bit count, 8..13 a 5-bit one, each 4 zeros. */
static const uint8_t sel8_bits[14] = {0, 4, 5, 7, 10, 14, 24, 52, 4, 6, 9, 13, 23, 51};

/* Loads the block at s->blk_off. */
static bcol_status load_block(bcol_decoder *d, stream *s)
{
    size_t at = s->blk_off;
    uint64_t b = rd64(d->data + at);
    s->cur_blk = at;
    unsigned sel = (unsigned)(b & 15);
    s->blk_off += 8;
    s->blk_left--;
    if (sel == 0)
        return fail(d, at, "Simple-8b block with selector 0");
    if (sel == 15) {
        s->rle_left = (unsigned)(((b >> 4) & 15) + 1) * 120;
        s->slots_left = 0;
        return BCOL_VALUE;
    }
    s->rle_left = 0;
    unsigned ext = (unsigned)((b >> 4) & 15);
    if ((sel == 7 || sel == 8) && ext != 0) {
        unsigned vbits, cbits, cscale;
        if (sel == 7) {
            if (ext > 9)
                return fail(d, at, "Simple-8b block with selector 7 and extension %u", ext);
            vbits = sel7_bits[ext];
            cbits = 4;
            cscale = 1;
        } else {
            if (ext > 13)
                return fail(d, at, "Simple-8b block with selector 8 and extension %u", ext);
            vbits = sel8_bits[ext];
            cbits = ext >= 8 ? 5 : 4;
            cscale = 4;
        }
        s->cur = b >> 8;
        s->slot_bits = vbits;
        s->slot_cnt_bits = cbits;
        s->slot_scale = cscale;
        s->slots_left = 56 / (vbits + cbits);
    } else if (sel == 7 || sel == 8) {
        /* extension 0: the plain selector, its 4 spare bits are the (zero) extension nibble */
        s->cur = b >> 8;
        s->slot_bits = base_bits[sel];
        s->slot_cnt_bits = 0;
        s->slot_scale = 0;
        s->slots_left = 56 / base_bits[sel];
    } else {
        s->cur = b >> 4;
        s->slot_bits = base_bits[sel];
        s->slot_cnt_bits = 0;
        s->slot_scale = 0;
        s->slots_left = 60 / base_bits[sel];
    }
    return BCOL_VALUE;
}

/* The next slot of the stream's run: *more false when the run is exhausted. */
static bcol_status next_slot(bcol_decoder *d, stream *s, bool *more, bool *present, u128 *val)
{
    while (s->slots_left == 0 && s->rle_left == 0) {
        if (!s->reader_valid || s->blk_left == 0) {
            *more = false;
            return BCOL_VALUE;
        }
        if (load_block(d, s) == BCOL_ERROR)
            return BCOL_ERROR;
    }
    *more = true;
    if (s->rle_left) {
        s->rle_left--;
        *present = s->prev_present;
        *val = s->prev;
        return BCOL_VALUE;
    }
    unsigned w = s->slot_bits + s->slot_cnt_bits;
    uint64_t mask = w >= 64 ? UINT64_MAX : (UINT64_C(1) << w) - 1;
    uint64_t slot = s->cur & mask;
    s->cur = w >= 64 ? 0 : s->cur >> w;
    s->slots_left--;
    if (slot == mask) {
        *present = false;
        *val = (u128){0, 0};
    } else {
        uint64_t cnt = s->slot_cnt_bits ? slot & ((UINT64_C(1) << s->slot_cnt_bits) - 1) : 0;
        u128 v = {0, slot >> s->slot_cnt_bits};
        unsigned zeros = (unsigned)cnt * s->slot_scale;
        /* 64-bit streams shift modulo 64, as the server's block decoder does (simple8b.inl, ExtendedDecoder) */
        if (!s->is128)
            zeros %= 64;
        v = u128_shl(v, zeros);
        if (!s->is128)
            v.hi = 0;
        *present = true;
        *val = v;
    }
    s->prev_present = *present;
    s->prev = *val;
    return BCOL_VALUE;
}

/* Starts a run of Simple-8b blocks at off for stream s (bsoncolumn.cpp, loadControl); *size its bytes. */
static bcol_status start_run(bcol_decoder *d, size_t off, stream *s, size_t *size)
{
    uint8_t c = d->data[off];
    unsigned nblocks = (c & 15u) + 1;
    static const uint8_t scale_of_nibble[16] = {255, 255, 255, 255, 255, 255, 255, 255, 5, 0, 1, 2, 3, 4, 255, 255};
    unsigned scale = scale_of_nibble[c >> 4];
    if (scale == 255)
        return fail(d, off, "invalid control byte 0x%02x", c);
    if (d->len - off - 1 <= (size_t)nblocks * 8)
        return fail(d, off, "control byte 0x%02x: %u Simple-8b blocks run past the end", c, nblocks);
    if (s->is128) {
        if (scale != 5)
            return fail(d, off, "control byte 0x%02x: a scale for a 128-bit type", c);
    } else if (s->last.type == BSON_TYPE_DOUBLE) {
        int64_t e;
        if (!double_encode(double_decode((int64_t)rd64(lv_bytes(&s->last)), 5), scale, &e))
            return fail(d, off, "control byte 0x%02x: the previous double does not fit its scale", c);
        s->enc = e;
    } else if (scale != 5) {
        return fail(d, off, "control byte 0x%02x: a double scale for type 0x%02x", c, s->last.type);
    }
    s->scale = (uint8_t)scale;
    if (!s->reader_valid) {
        s->prev_present = true;
        s->prev = (u128){0, 0};
    }
    s->reader_valid = true;
    s->run_off = off;
    s->blk_off = off + 1;
    s->blk_left = nblocks;
    s->slots_left = 0;
    s->rle_left = 0;
    *size = 1 + (size_t)nblocks * 8;
    return BCOL_VALUE;
}

/* Applies one slot to the stream (bsoncolumn.cpp loadDelta/materialize); *missing when the position is missing. */
static bcol_status apply_slot(bcol_decoder *d, stream *s, size_t at, bool present, u128 v, bool *missing)
{
    *missing = false;
    if (!s->is128) {
        if (!present || s->last.type == 0) {
            *missing = true;
            return BCOL_VALUE;
        }
        if (!s->dod && v.lo == 0)
            return BCOL_VALUE;
        s->enc = (int64_t)((uint64_t)s->enc + (uint64_t)unzig64(v.lo));
        if (s->dod)
            s->enc_dod = (int64_t)((uint64_t)s->enc_dod + (uint64_t)s->enc);
        int64_t w = s->dod ? s->enc_dod : s->enc;
        uint8_t t = s->last.type;
        uint8_t tmp[12];
        uint32_t len;
        switch (t) {
        case BSON_TYPE_DOUBLE: {
            double dv = double_decode(w, s->scale);
            uint64_t bits;
            memcpy(&bits, &dv, 8);
            wr64(tmp, bits);
            len = 8;
            break;
        }
        case BSON_TYPE_OID:
            oid_decode(w, lv_bytes(&s->last) + 4, tmp);
            len = 12;
            break;
        case BSON_TYPE_DATE_TIME:
        case BSON_TYPE_INT64:
        case BSON_TYPE_TIMESTAMP:
            wr64(tmp, (uint64_t)w);
            len = 8;
            break;
        case BSON_TYPE_BOOL:
            tmp[0] = w != 0;
            len = 1;
            break;
        case BSON_TYPE_INT32:
            wr32(tmp, (uint32_t)w);
            len = 4;
            break;
        default:
            return fail(d, at, "non-zero delta for a value of type 0x%02x", t);
        }
        memcpy(s->last.own, tmp, len);
        s->last.owned = true;
        s->last.len = len;
        return BCOL_VALUE;
    }
    if (!present) {
        *missing = true;
        return BCOL_VALUE;
    }
    if (v.hi == 0 && v.lo == 0)
        return BCOL_VALUE;
    s->enc128 = u128_add(s->enc128, unzig128(v));
    uint8_t b[16];
    wr64(b, s->enc128.lo);
    wr64(b + 8, s->enc128.hi);
    uint8_t t = s->last.type;
    uint8_t tmp[32];
    uint32_t len;
    switch (t) {
    case BSON_TYPE_UTF8:
    case BSON_TYPE_CODE: {
        int n = 16;
        while (n > 0 && b[n - 1] == 0)
            n--;
        wr32(tmp, (uint32_t)n + 1);
        for (int i = 0; i < n; i++)
            tmp[4 + i] = b[n - 1 - i];
        tmp[4 + n] = 0;
        len = 5 + (uint32_t)n;
        break;
    }
    case BSON_TYPE_BINARY: {
        const uint8_t *lp = lv_bytes(&s->last);
        uint32_t bl = rd32(lp);
        if (bl > 16)
            return fail(d, at, "delta for binary data longer than 16 bytes");
        memcpy(tmp, lp, 5);
        memcpy(tmp + 5, b, bl);
        len = 5 + bl;
        break;
    }
    case BSON_TYPE_DECIMAL128:
        memcpy(tmp, b, 16);
        len = 16;
        break;
    default:
        return fail(d, at, "non-zero delta for a value of type 0x%02x", t);
    }
    memcpy(s->last.own, tmp, len);
    s->last.owned = true;
    s->last.len = len;
    return BCOL_VALUE;
}

/* ---- interleaved mode ---- */

static bool add_entry(bcol_decoder *d, entry e)
{
    if (d->nentries == d->entcap) {
        size_t cap = d->entcap ? d->entcap * 2 : 16;
        entry *ne = realloc(d->entries, cap * sizeof *d->entries);
        if (!ne)
            return false;
        d->entries = ne;
        d->entcap = cap;
    }
    d->entries[d->nentries++] = e;
    return true;
}

/* The reference object's layout (interleaved_schema.cpp, _discover); every leaf's stream starts at its value.
 * NULL, or why not. */
static const char *discover(bcol_decoder *d, const bson_t *obj, const char *name, uint32_t namelen, uint8_t type,
                            bool arrays, int depth, size_t *nscalars)
{
    static const char *const oom = "out of memory";
    bson_iter_t it;
    if (depth > BCOL_MAX_DEPTH || !bson_iter_init(&it, obj))
        return "interleaved reference object nests too deep";
    if (!add_entry(d, (entry){E_ENTER, name, namelen, type, bson_empty(obj), 0}))
        return oom;
    while (bson_iter_next(&it)) {
        bson_type_t t = bson_iter_type(&it);
        if (t == BSON_TYPE_DOCUMENT || (arrays && t == BSON_TYPE_ARRAY)) {
            uint32_t l;
            const uint8_t *p;
            if (t == BSON_TYPE_DOCUMENT)
                bson_iter_document(&it, &l, &p);
            else
                bson_iter_array(&it, &l, &p);
            bson_t sub;
            if (!bson_init_static(&sub, p, l))
                return "interleaved reference object is not valid BSON";
            const char *why =
                discover(d, &sub, bson_iter_key(&it), bson_iter_key_len(&it), (uint8_t)t, arrays, depth + 1, nscalars);
            if (why)
                return why;
        } else {
            if (!add_entry(
                    d, (entry){E_SCALAR, bson_iter_key(&it), bson_iter_key_len(&it), 0, false, (uint32_t)*nscalars}))
                return oom;
            (*nscalars)++;
        }
    }
    if (!add_entry(d, (entry){E_EXIT, name, namelen, type, bson_empty(obj), 0}))
        return oom;
    return NULL;
}

static bcol_status start_interleaved(bcol_decoder *d)
{
    size_t at = d->off;
    uint8_t c = d->data[at];
    const char *why;
    int64_t vs = value_size(BSON_TYPE_DOCUMENT, d->data + at + 1, d->len - at - 1, &why);
    if (vs < 0)
        return fail(d, at, "interleaved reference object: %s", why);
    bson_t ref;
    bson_init_static(&ref, d->data + at + 1, (size_t)vs);
    bool arrays = c != 0xF0;
    size_t nscalars = 0;
    d->nentries = 0;
    d->lastobj_present = false;
    const char *why_not =
        discover(d, &ref, "", 0, c == 0xF2 ? BSON_TYPE_ARRAY : BSON_TYPE_DOCUMENT, arrays, 0, &nscalars);
    if (why_not)
        return fail(d, at, "%s", why_not);
    if (nscalars == 0)
        return fail(d, at, "interleaved reference object has no leaf");
    free(d->streams);
    d->streams = calloc(nscalars, sizeof *d->streams);
    if (!d->streams) {
        d->nstreams = 0;
        return fail(d, at, "out of memory");
    }
    d->nstreams = nscalars;
    /* each leaf's stream starts at its value in the reference object */
    for (size_t i = 0; i < d->nentries; i++) {
        entry *e = &d->entries[i];
        if (e->op != E_SCALAR)
            continue;
        const uint8_t *elem = (const uint8_t *)e->name - 1;
        const uint8_t *val = (const uint8_t *)e->name + e->namelen + 1;
        size_t avail = (size_t)(d->data + d->len - val);
        int64_t l = value_size(elem[0], val, avail, &why);
        if (l < 0)
            return fail(d, at, "interleaved reference object: leaf of type 0x%02x: %s", elem[0], why);
        stream_literal(&d->streams[e->idx], elem[0], val, (uint32_t)l);
    }
    d->off = at + 1 + (size_t)vs;
    if (d->off >= d->len || d->data[d->off] == 0)
        return fail(d, d->off, "interleaved mode holds no object");
    d->interleaved = true;
    return BCOL_VALUE;
}

/* The next value of an interleaved stream; *ended when the column ends interleaved mode here. */
static bcol_status scalar_next(bcol_decoder *d, stream *s, uint32_t idx, bool *ended, bool *missing)
{
    bool more, present;
    u128 v;
    *ended = false;
    if (next_slot(d, s, &more, &present, &v) == BCOL_ERROR)
        return BCOL_ERROR;
    if (more)
        return apply_slot(d, s, s->cur_blk, present, v, missing);
    if (d->off >= d->len)
        return fail(d, d->off, "column ends without its end byte");
    uint8_t c = d->data[d->off];
    if (c == 0) {
        if (idx != 0)
            return fail(d, d->off, "interleaved mode ends in the middle of an object");
        d->off++;
        *ended = true;
        return BCOL_VALUE;
    }
    size_t size;
    bool literal = (c & 0xE0) == 0 || c == 0xFF || c == 0x7F;
    if (literal) {
        if (read_literal(d, d->off, s, &size) == BCOL_ERROR)
            return BCOL_ERROR;
        d->off += size;
        *missing = false;
        return BCOL_VALUE;
    }
    size_t off = d->off;
    if (start_run(d, off, s, &size) == BCOL_ERROR)
        return BCOL_ERROR;
    d->off += size;
    if (next_slot(d, s, &more, &present, &v) == BCOL_ERROR)
        return BCOL_ERROR;
    return apply_slot(d, s, s->cur_blk, present, v, missing);
}

/* Builds the next object; *ended when interleaved mode ended instead. */
static bcol_status interleaved_next(bcol_decoder *d, bcol_elem *out, bool *ended)
{
    size_t stack[BCOL_MAX_DEPTH + 2];
    int sp = 0;
    obuf *b = &d->obj;
    b->len = 0;
    for (size_t i = 0; i < d->nentries; i++) {
        entry *e = &d->entries[i];
        if (e->op == E_ENTER) {
            stack[sp++] = b->len;
            if (sp > 1) {
                ob_put(b, &e->type, 1);
                ob_put(b, e->name, e->namelen);
                ob_put(b, "", 1);
            }
            ob_put(b, "\0\0\0\0", 4);
        } else if (e->op == E_EXIT) {
            size_t start = stack[--sp];
            size_t hdr = sp > 0 ? 2 + e->namelen : 0;
            if (b->oom)
                return fail(d, d->off, "out of memory");
            if (!e->allow_empty && b->len == start + hdr + 4) {
                b->len = start; /* nothing in it: left out */
                continue;
            }
            ob_put(b, "", 1);
            if (b->oom)
                return fail(d, d->off, "out of memory");
            size_t olen = b->len - start - hdr;
            if (olen > INT32_MAX)
                return fail(d, d->off, "object too large");
            wr32(b->buf + start + hdr, (uint32_t)olen);
        } else {
            stream *s = &d->streams[e->idx];
            bool missing;
            if (scalar_next(d, s, e->idx, ended, &missing) == BCOL_ERROR)
                return BCOL_ERROR;
            if (*ended) {
                /* every other stream must be exhausted (bsoncolumn.cpp, _drainAndVerifyDecoders) */
                for (size_t k = 1; k < d->nstreams; k++) {
                    bool more, present;
                    u128 v;
                    if (next_slot(d, &d->streams[k], &more, &present, &v) == BCOL_ERROR)
                        return BCOL_ERROR;
                    if (more)
                        return fail(d, d->off - 1, "interleaved mode ends with values left in a stream");
                }
                return BCOL_VALUE;
            }
            if (missing)
                continue;
            uint8_t t = s->last.type;
            ob_put(b, &t, 1);
            ob_put(b, e->name, e->namelen);
            ob_put(b, "", 1);
            ob_put(b, lv_bytes(&s->last), s->last.len);
        }
    }
    if (b->oom)
        return fail(d, d->off, "out of memory");
    if (b->len == 0) {
        d->lastobj_present = false;
        out->missing = true;
        return BCOL_VALUE;
    }
    /* the produced object moves to lastobj: it stays valid for the caller, and is the base after this mode */
    obuf tmp = d->lastobj;
    d->lastobj = d->obj;
    d->obj = tmp;
    d->lastobj_present = true;
    out->missing = false;
    make_value(d->entries[0].type, d->lastobj.buf, (uint32_t)d->lastobj.len, &out->value);
    return BCOL_VALUE;
}

/* ---- the public API ---- */

bcol_decoder *bcol_decoder_new(const uint8_t *data, size_t len)
{
    bcol_decoder *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->data = data;
    d->len = len;
    return d;
}

void bcol_decoder_destroy(bcol_decoder *d)
{
    if (!d)
        return;
    free(d->streams);
    free(d->entries);
    free(d->obj.buf);
    free(d->lastobj.buf);
    free(d);
}

size_t bcol_decoder_position(const bcol_decoder *d)
{
    return d->pos;
}

static void emit_last(const stream *s, bcol_elem *out)
{
    out->missing = false;
    make_value(s->last.type, lv_bytes(&s->last), s->last.len, &out->value);
}

static bcol_status next_regular(bcol_decoder *d, bcol_elem *out)
{
    stream *s = &d->regular;
    bool more, present, missing;
    u128 v;
    if (next_slot(d, s, &more, &present, &v) == BCOL_ERROR)
        return BCOL_ERROR;
    if (more) {
        if (apply_slot(d, s, s->cur_blk, present, v, &missing) == BCOL_ERROR)
            return BCOL_ERROR;
        if (missing)
            out->missing = true;
        else
            emit_last(s, out);
        return BCOL_VALUE;
    }
    if (d->off >= d->len)
        return fail(d, d->off, "column ends without its end byte");
    uint8_t c = d->data[d->off];
    if (c == 0) {
        if (d->off + 1 != d->len)
            return fail(d, d->off, "%zu bytes after the end byte", d->len - d->off - 1);
        d->done = BCOL_END;
        return BCOL_END;
    }
    if (c == 0xF0 || c == 0xF1 || c == 0xF2)
        return start_interleaved(d) == BCOL_ERROR ? BCOL_ERROR : 2;
    size_t size;
    if ((c & 0xE0) == 0 || c == 0xFF || c == 0x7F) {
        if (read_literal(d, d->off, s, &size) == BCOL_ERROR)
            return BCOL_ERROR;
        d->off += size;
        emit_last(s, out);
        return BCOL_VALUE;
    }
    size_t off = d->off;
    if (start_run(d, off, s, &size) == BCOL_ERROR)
        return BCOL_ERROR;
    d->off += size;
    if (next_slot(d, s, &more, &present, &v) == BCOL_ERROR)
        return BCOL_ERROR;
    if (apply_slot(d, s, s->cur_blk, present, v, &missing) == BCOL_ERROR)
        return BCOL_ERROR;
    if (missing)
        out->missing = true;
    else
        emit_last(s, out);
    return BCOL_VALUE;
}

bcol_status bcol_decoder_next(bcol_decoder *d, bcol_elem *out, char *err, size_t errlen)
{
    bcol_status st;
    if (!d->done && d->len == 0)
        fail(d, 0, "empty column (not even the end byte)");
    for (;;) {
        if (d->done)
            break;
        if (d->interleaved) {
            bool ended = false;
            st = interleaved_next(d, out, &ended);
            if (st == BCOL_ERROR)
                break;
            if (!ended) {
                /* keep the object: after interleaved mode it is the regular stream's base */
                d->pos++;
                return BCOL_VALUE;
            }
            /* back to regular mode, based on the last object (bsoncolumn.cpp, _exitInterleavedMode) */
            d->interleaved = false;
            memset(&d->regular, 0, sizeof d->regular);
            d->regular.scale = 5;
            if (d->lastobj_present) {
                d->regular.last.type = d->entries[0].type;
                d->regular.last.ext = d->lastobj.buf;
                d->regular.last.len = (uint32_t)d->lastobj.len;
            }
            continue;
        }
        st = next_regular(d, out);
        if (st == 2)
            continue;
        if (st == BCOL_VALUE) {
            d->pos++;
            return BCOL_VALUE;
        }
        break;
    }
    if (d->done == BCOL_ERROR && err && errlen)
        snprintf(err, errlen, "%s", d->err);
    return (bcol_status)d->done;
}

bool bcol_count(const uint8_t *data, size_t len, size_t *count, char *err, size_t errlen)
{
    bcol_decoder *d = bcol_decoder_new(data, len);
    bcol_elem e;
    bcol_status st;
    *count = 0;
    if (!d) {
        if (err && errlen)
            snprintf(err, errlen, "out of memory");
        return false;
    }
    while ((st = bcol_decoder_next(d, &e, err, errlen)) == BCOL_VALUE) {
    }
    *count = d->pos;
    bcol_decoder_destroy(d);
    return st == BCOL_END;
}

bool bcol_apply_binary_diff(const uint8_t *old, size_t oldlen, size_t offset, const uint8_t *diff, size_t difflen,
                            uint8_t **out, size_t *outlen, char *err, size_t errlen)
{
    if (offset > oldlen) {
        if (err && errlen)
            snprintf(err, errlen, "binary diff at offset %zu past the column's %zu bytes", offset, oldlen);
        return false;
    }
    if (difflen > SIZE_MAX - offset - 1) {
        if (err && errlen)
            snprintf(err, errlen, "binary diff too large");
        return false;
    }
    uint8_t *b = malloc(offset + difflen + 1);
    if (!b) {
        if (err && errlen)
            snprintf(err, errlen, "out of memory");
        return false;
    }
    if (offset)
        memcpy(b, old, offset);
    if (difflen)
        memcpy(b + offset, diff, difflen);
    *out = b;
    *outlen = offset + difflen;
    return true;
}

/* ---- marks ---- */

/* What a mark holds (bcol_mark.state): the regular stream, its previous value as an offset into the column when it is
 * not its own. */
typedef struct {
    stream s;
    size_t last_off; /* s.last.ext - data, when the value is in the column's bytes */
} mark_state;

_Static_assert(sizeof(mark_state) <= sizeof(((bcol_mark *)0)->state), "bcol_mark.state is too small");

bool bcol_decoder_mark(const bcol_decoder *d, bcol_mark *m)
{
    const stream *s = &d->regular;
    if (d->done || d->interleaved || s->slots_left != 0 || s->rle_left != 0)
        return false;
    mark_state ms;
    memset(&ms, 0, sizeof ms);
    ms.s = *s;
    if (s->last.type != 0 && !s->last.owned) {
        /* a value in the column (a literal); not one in the decoder's own buffers (after interleaved mode) */
        if (s->last.ext < d->data || s->last.ext >= d->data + d->len)
            return false;
        ms.last_off = (size_t)(s->last.ext - d->data);
    }
    ms.s.last.ext = NULL;
    m->pos = d->pos;
    if (s->reader_valid && s->blk_left > 0) {
        /* inside a run: its control byte counts blocks the column may since have added */
        m->run = s->run_off;
        m->prefix = s->blk_off;
    } else if (s->reader_valid) {
        m->run = s->run_off;
        m->prefix = d->off;
    } else {
        m->run = SIZE_MAX;
        m->prefix = d->off;
    }
    memcpy(m->state, &ms, sizeof ms);
    return true;
}

bcol_decoder *bcol_decoder_resume(const uint8_t *data, size_t len, const uint8_t *old, size_t oldlen,
                                  const bcol_mark *m, bool *nomem)
{
    *nomem = false;
    mark_state ms;
    memcpy(&ms, m->state, sizeof ms);
    size_t pre = m->prefix;
    if (pre > len || pre > oldlen)
        return NULL;
    size_t nblocks_now = 0;
    if (m->run != SIZE_MAX) {
        size_t r = m->run;
        if (r >= pre || memcmp(data, old, r) != 0 || (data[r] >> 4) != (old[r] >> 4) ||
            memcmp(data + r + 1, old + r + 1, pre - r - 1) != 0)
            return NULL;
        /* the run's blocks read so far, and those the column's control byte now counts */
        size_t read = (pre - r - 1) / 8;
        if ((pre - r - 1) % 8 != 0)
            return NULL;
        nblocks_now = (size_t)(data[r] & 15u) + 1;
        if (nblocks_now < read || len - r - 1 <= nblocks_now * 8) /* start_run's check, on the column as it is */
            return NULL;
        ms.s.blk_left = (unsigned)(nblocks_now - read);
        ms.s.blk_off = pre;
    } else if (memcmp(data, old, pre) != 0) {
        return NULL;
    }
    bcol_decoder *d = bcol_decoder_new(data, len);
    if (!d) {
        *nomem = true;
        return NULL;
    }
    d->regular = ms.s;
    if (d->regular.last.type != 0 && !d->regular.last.owned)
        d->regular.last.ext = data + ms.last_off;
    d->pos = m->pos;
    d->off = m->run != SIZE_MAX ? m->run + 1 + nblocks_now * 8 : pre;
    return d;
}

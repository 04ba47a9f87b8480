/*
 * bsoncolumn_enc.c — see bsoncolumn_enc.h. The server's sources this follows (mongodb/mongo, src/mongo/bson/column/):
 *
 *  - simple8b_helpers.h: the selector tables (integers per word, bits per integer, the selector 7 and 8 extensions
 *    that store trailing zeros, RLE selector 15 counting blocks of 120), the all-ones slot meaning "skip".
 *  - simple8b_builder.inl (Simple8bBuilder): values wait in a pending list; a word is written when the next value no
 *    longer fits; a word is encoded with the last extension type that fitted and the smallest selector that leaves no
 *    slot unused; a value equal to the last one of a written word starts a run, written as RLE words per 120.
 *  - simple8b_type_util.cpp: zigzag integers, ObjectId byte order, doubles scaled by 1, 10, 100, 10^4, 10^8 or
 *    taken as their bits, strings reversed into 128 bits, binaries and Decimal128 as 128-bit integers.
 *  - bsoncolumn_util.h: delta-of-delta for ObjectId, Date and Timestamp; 128-bit for String, Code, BinData and
 *    Decimal128; control bytes 0x80 (integers) and 0x90-0xD0 (double scales), 0xF1 / 0xF2 interleaved starts.
 *  - bsoncolumnbuilder.cpp (BSONColumnBuilder, EncodingState, Encoder64, Encoder128): literals on a type change or
 *    a value that cannot be a delta, up to 16 Simple-8b words per control byte, the double rescaling, and interleaved
 *    mode (reference object merged while objects are buffered, one stream per scalar leaf, control blocks written in
 *    the order a decoder consumes them).
 *
 * Written here from those descriptions; the code is not the server's.
 */
#include "bsoncolumn_enc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

__extension__ typedef unsigned __int128 u128;
__extension__ typedef __int128 i128;

/* ---------------------------------------------------------------- byte buffer */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} bcbuf;

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        abort();
    return q;
}

static void buf_reserve(bcbuf *b, size_t more)
{
    if (b->n + more <= b->cap)
        return;
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->n + more)
        cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
}

static void buf_put(bcbuf *b, const void *p, size_t n)
{
    buf_reserve(b, n);
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void buf_byte(bcbuf *b, uint8_t c)
{
    buf_put(b, &c, 1);
}

static void buf_u64le(bcbuf *b, uint64_t v)
{
    uint8_t t[8];
    for (int i = 0; i < 8; i++)
        t[i] = (uint8_t)(v >> (8 * i));
    buf_put(b, t, 8);
}

static uint64_t rd_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static int32_t rd_i32le(const uint8_t *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static u128 rd_u128le(const uint8_t *p)
{
    return ((u128)rd_u64le(p + 8) << 64) | rd_u64le(p);
}

/* ---------------------------------------------------------------- Simple-8b builder (simple8b_builder.inl) */

enum { EXT_BASE = 0, EXT_SEVEN = 1, EXT_EIGHT_SMALL = 2, EXT_EIGHT_LARGE = 3 };

/* simple8b_helpers.h */
static const uint8_t kMaxSelector[4] = {14, 9, 7, 13};
static const uint8_t kMinSelector[4] = {1, 1, 1, 8};
static const uint8_t kDataBits[4] = {60, 56, 56, 56};
static const uint8_t kTzBitSize[4] = {0, 4, 4, 5};
static const uint8_t kTzMaxCount[4] = {0, 15, 60, 124};
static const uint8_t kBaseToShift[16] = {0, 0, 0, 0, 0, 0, 0, 4, 4, 0, 0, 0, 0, 0, 0, 0};
static const uint8_t kExtToBase[4] = {0, 7, 8, 8}; /* extension types map to base selector 7 or 8 */
static const uint8_t kBitsPerInt[4][16] = {{64, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 20, 30, 60, 64},
                                           {64, 2, 3, 4, 5, 7, 10, 14, 24, 52, 64, 64, 64, 64, 64, 64},
                                           {64, 4, 5, 7, 10, 14, 24, 52, 0, 0, 64, 64, 64, 64, 64, 64},
                                           {64, 0, 0, 0, 0, 0, 0, 0, 4, 6, 9, 13, 23, 51, 64, 64}};
static const uint8_t kIntsPerSel[4][16] = {{0, 60, 30, 20, 15, 12, 10, 8, 7, 6, 5, 4, 3, 2, 1, 0},
                                           {0, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0},
                                           {0, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0},
                                           {0, 0, 0, 0, 0, 0, 0, 0, 6, 5, 4, 3, 2, 1, 0, 0}};
/* simple8b_builder.h: the fewest meaningful bits each extension type stores */
static const uint8_t kMinDataBits[4] = {1, 2, 4, 4};

typedef struct {
    bool has; /* false: a skip */
    u128 v;
    uint8_t bits[4];
    uint8_t tz[4];
} s8_value;

typedef void (*s8_write_fn)(void *ctx, uint64_t word);

typedef struct {
    bool wide; /* 128-bit values (Simple8bBuilder<uint128_t>) */
    s8_value *pend;
    size_t npend, cappend;
    uint32_t rle;  /* values counted toward a run */
    bool last_has; /* the last value of the previous word, what a run repeats */
    u128 last;
    uint8_t maxbits[4];
    uint8_t ext; /* last extension type that fitted */
    bool possible[4];
    s8_write_fn write;
    void *ctx;
} s8b;

static void s8_init(s8b *s, bool wide, s8_write_fn write, void *ctx)
{
    memset(s, 0, sizeof *s);
    s->wide = wide;
    s->last_has = true; /* _lastValueInPrevWord starts as 0 */
    s->last = 0;
    memcpy(s->maxbits, kMinDataBits, 4);
    for (int i = 0; i < 4; i++)
        s->possible[i] = true;
    s->write = write;
    s->ctx = ctx;
}

static void s8_free(s8b *s)
{
    free(s->pend);
    s->pend = NULL;
    s->npend = s->cappend = 0;
}

static void s8_push(s8b *s, s8_value v)
{
    if (s->npend == s->cappend) {
        s->cappend = s->cappend ? s->cappend * 2 : 16;
        s->pend = xrealloc(s->pend, s->cappend * sizeof *s->pend);
    }
    s->pend[s->npend++] = v;
}

static uint8_t clz64(uint64_t v)
{
    return (uint8_t)__builtin_clzll(v);
}
static uint8_t ctz64(uint64_t v)
{
    return (uint8_t)__builtin_ctzll(v);
}

/* countBitsWithoutLeadingZeros: the all-ones pattern is a skip, so a value needs the bits of value + 1. */
static uint8_t bits_needed(const s8b *s, u128 v)
{
    if (!s->wide || (uint64_t)(v >> 64) == 0) {
        uint64_t lo = (uint64_t)v;
        if (s->wide && lo == UINT64_MAX)
            return 65;
        return (uint8_t)(64 - clz64(lo + 1));
    }
    return (uint8_t)(128 - clz64((uint64_t)(v >> 64)));
}

static uint8_t trailing_zeros(u128 v)
{
    uint64_t lo = (uint64_t)v, hi = (uint64_t)(v >> 64);
    if (lo == 0 && hi != 0)
        return (uint8_t)(ctz64(hi) + 64);
    return lo == 0 ? 0 : ctz64(lo);
}

static uint8_t min8(uint8_t a, uint8_t b)
{
    return a < b ? a : b;
}
static uint8_t max8(uint8_t a, uint8_t b)
{
    return a > b ? a : b;
}

/* _calculatePendingValue: the bits each extension type needs for v, or false when none can hold it. */
static bool s8_calc(const s8b *s, u128 v, s8_value *out)
{
    u128 maxv = s->wide ? ~(u128)0 : (u128)UINT64_MAX;
    if (v == maxv)
        return false;
    uint8_t tz = trailing_zeros(v);
    uint8_t bits = bits_needed(s, v);
    uint8_t tz7 = min8(tz, kTzMaxCount[EXT_SEVEN]);
    uint8_t m7 = (uint8_t)(bits - tz7);
    uint8_t tz8s = (uint8_t)(min8(tz, kTzMaxCount[EXT_EIGHT_SMALL]) / 4 * 4);
    uint8_t m8s = (uint8_t)(bits - tz8s);
    uint8_t tz8l = (uint8_t)(min8(tz, kTzMaxCount[EXT_EIGHT_LARGE]) / 4 * 4);
    uint8_t m8l = (uint8_t)(bits - tz8l);
    /* a stored trailing-zero count of all ones would read as a skip: keep a padding bit */
    if (tz == kTzMaxCount[EXT_SEVEN])
        m7 = bits_needed(s, v >> tz);
    else if (tz == kTzMaxCount[EXT_EIGHT_SMALL])
        m8s = bits_needed(s, v >> tz);
    if (s->wide && tz == kTzMaxCount[EXT_EIGHT_LARGE])
        m8l = bits_needed(s, v >> tz);
    if (bits > kDataBits[EXT_BASE] && m7 + kTzBitSize[EXT_SEVEN] > kDataBits[EXT_SEVEN] &&
        m8s + kTzBitSize[EXT_EIGHT_SMALL] > kDataBits[EXT_EIGHT_SMALL] &&
        m8l + kTzBitSize[EXT_EIGHT_LARGE] > kDataBits[EXT_EIGHT_LARGE])
        return false;
    out->has = true;
    out->v = v;
    out->bits[0] = bits;
    out->bits[1] = m7;
    out->bits[2] = m8s;
    out->bits[3] = m8l;
    out->tz[0] = 0;
    out->tz[1] = tz7;
    out->tz[2] = tz8s;
    out->tz[3] = tz8l;
    return true;
}

static bool s8_fits_type(s8b *s, const s8_value *v, int t)
{
    uint64_t need = (uint64_t)(max8(s->maxbits[t], v->bits[t]) + kTzBitSize[t]) * (s->npend + 1);
    if (kDataBits[t] < need) {
        s->possible[t] = false;
        return false;
    }
    s->ext = (uint8_t)t;
    return true;
}

static bool s8_fits(s8b *s, const s8_value *v)
{
    for (int t = 0; t < 4; t++)
        if (s->possible[t] && s8_fits_type(s, v, t))
            return true;
    return false;
}

static void s8_update_state(s8b *s, const s8_value *v)
{
    for (int t = 0; t < 4; t++)
        s->maxbits[t] = max8(s->maxbits[t], v->bits[t]);
}

static uint8_t selector_index(size_t n, int ext)
{
    uint8_t i = kMinSelector[ext];
    for (; i < kMaxSelector[ext]; i++)
        if (n >= kIntsPerSel[ext][i])
            break;
    return i;
}

/* _encodeLargestPossibleWord: one word from the front of the pending list */
static uint64_t s8_encode_word(s8b *s, int ext)
{
    uint8_t sel = selector_index(s->npend, ext);
    uint8_t nints = kIntsPerSel[ext][sel];
    uint8_t base = ext == EXT_BASE ? sel : kExtToBase[ext];
    uint8_t bpi = kBitsPerInt[ext][sel];
    uint8_t tzbits = kTzBitSize[ext];
    uint64_t mask = (bpi + tzbits) >= 64 ? UINT64_MAX : (((uint64_t)1 << (bpi + tzbits)) - 1);
    uint64_t word = base;
    for (uint8_t i = 0; i < nints; i++) {
        unsigned shift = (unsigned)(bpi + tzbits) * i + 4 + kBaseToShift[base];
        const s8_value *pv = &s->pend[i];
        uint64_t cur;
        if (!pv->has) {
            cur = mask;
        } else if (ext == EXT_BASE) {
            cur = (uint64_t)pv->v;
        } else if (ext == EXT_SEVEN) {
            cur = pv->tz[ext] | (uint64_t)((pv->v >> pv->tz[ext]) << tzbits);
        } else {
            uint8_t nib = pv->tz[ext] / 4;
            cur = nib | (uint64_t)((pv->v >> (nib * 4)) << tzbits);
        }
        word |= cur << shift;
    }
    if (ext != EXT_BASE)
        word |= (uint64_t)sel << 4;
    memmove(s->pend, s->pend + nints, (s->npend - nints) * sizeof *s->pend);
    s->npend -= nints;
    memcpy(s->maxbits, kMinDataBits, 4);
    for (size_t i = 0; i < s->npend; i++)
        s8_update_state(s, &s->pend[i]);
    for (int t = 0; t < 4; t++)
        s->possible[t] = true;
    return word;
}

static void s8_write_largest(s8b *s)
{
    uint64_t w = s8_encode_word(s, s->ext);
    s->write(s->ctx, w);
}

static bool s8_rle_possible(const s8b *s)
{
    return s->npend == 0 || s->rle != 0;
}

static void s8_reset_selectors(s8b *s)
{
    s->ext = 0;
    for (int t = 0; t < 4; t++)
        s->possible[t] = true;
}

static bool s8_append_value(s8b *s, u128 v, bool try_rle)
{
    s8_value pv;
    if (!s8_calc(s, v, &pv))
        return false;
    if (s8_fits(s, &pv)) {
        s8_push(s, pv);
        s8_update_state(s, &pv);
        return true;
    }
    s8_value lastp = s->pend[s->npend - 1];
    do {
        s8_write_largest(s);
    } while (!s8_fits(s, &pv));
    if (try_rle && s->npend == 0 && lastp.has && lastp.v == v) {
        s->rle = 1;
        s->last_has = true;
        s->last = lastp.v;
        s8_reset_selectors(s);
    } else {
        s8_push(s, pv);
        s8_update_state(s, &pv);
    }
    return true;
}

static void s8_append_skip(s8b *s, bool try_rle)
{
    if (s->npend) {
        bool last_skip = !s->pend[s->npend - 1].has;
        s8_value probe = {.has = false, .v = 0, .bits = {1, 2, 4, 4}, .tz = {0, 0, 0, 0}};
        if (!s8_fits(s, &probe)) {
            s8_write_largest(s);
            s->ext = EXT_BASE;
        }
        if (s->npend == 0 && last_skip && try_rle) {
            s->rle = 1;
            s->last_has = false;
            return;
        }
    }
    s8_value sk = {.has = false, .v = 0, .bits = {0, 0, 0, 0}, .tz = {0, 0, 0, 0}};
    s8_push(s, sk);
}

static void s8_rle_words(s8b *s)
{
    uint32_t count = s->rle / 120;
    if (count < 1)
        return;
    while (count > 16) {
        s->rle -= 120 * 16;
        s->write(s->ctx, 15 | ((uint64_t)(16 - 1) << 4));
        count -= 16;
    }
    s->rle -= 120 * count;
    s->write(s->ctx, 15 | ((uint64_t)(count - 1) << 4));
}

static void s8_end_rle(s8b *s)
{
    s8_rle_words(s);
    while (s->rle > 0) {
        if (!s->last_has)
            s8_append_skip(s, false);
        else
            s8_append_value(s, s->last, false);
        --s->rle;
    }
    s->last_has = true;
    s->last = 0;
    if (s->npend == 0)
        s8_reset_selectors(s);
}

static bool s8_append(s8b *s, u128 v)
{
    if (s8_rle_possible(s)) {
        if (s->last_has && s->last == v) {
            ++s->rle;
            s8_reset_selectors(s);
            return true;
        }
        s8_end_rle(s);
    }
    return s8_append_value(s, v, true);
}

static void s8_skip(s8b *s)
{
    if (s8_rle_possible(s)) {
        if (!s->last_has) {
            ++s->rle;
            s8_reset_selectors(s);
            return;
        }
        s8_end_rle(s);
    }
    s8_append_skip(s, true);
}

static void s8_flush(s8b *s)
{
    s8_end_rle(s);
    if (s->npend) {
        do {
            s8_write_largest(s);
        } while (s->npend);
        s->rle = 0;
    }
}

/* initializeRLEFrom */
static void s8_rle_from(s8b *dst, const s8b *src)
{
    if (s8_rle_possible(src)) {
        dst->last_has = src->last_has;
        dst->last = src->last;
    }
}

/* The pending values in order, as Simple8bBuilder's iterator yields them: the run first, then the list. */
static size_t s8_npending(const s8b *s)
{
    return s->rle + s->npend;
}

static bool s8_pending_at(const s8b *s, size_t i, u128 *v)
{
    if (i < s->rle) {
        *v = s->last;
        return s->last_has;
    }
    const s8_value *pv = &s->pend[i - s->rle];
    *v = pv->v;
    return pv->has;
}

/* ---------------------------------------------------------------- value encodings (simple8b_type_util) */

static uint64_t zigzag64(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}
static int64_t unzigzag64(uint64_t v)
{
    return (int64_t)((v >> 1) ^ (~(v & 1) + 1));
}
static u128 zigzag128(i128 v)
{
    return ((u128)v << 1) ^ (u128)(v >> 127);
}

static int64_t delta64(int64_t v, int64_t prev)
{
    return (int64_t)((uint64_t)v - (uint64_t)prev);
}
static int64_t expand64(int64_t prev, int64_t d)
{
    return (int64_t)((uint64_t)prev + (uint64_t)d);
}

static const double kScale[5] = {1, 10, 100, 10000, 100000000};
enum { SCALE_MEMORY = 5 };

static int64_t dbits(double d)
{
    int64_t r;
    memcpy(&r, &d, 8);
    return r;
}

static bool encode_double(double val, uint8_t scale, int64_t *out)
{
    if (scale == SCALE_MEMORY) {
        *out = dbits(val);
        return true;
    }
    double m = kScale[scale];
    double x = val * m;
    /* within +-2^53, where every integer is a double */
    if (!(x >= -9007199254740992.0 && x <= 9007199254740992.0))
        return false;
    long long r = llround(x);
    if (dbits((double)r / m) != dbits(val))
        return false;
    *out = r;
    return true;
}

static double decode_double(int64_t v, uint8_t scale)
{
    if (scale == SCALE_MEMORY) {
        double d;
        memcpy(&d, &v, 8);
        return d;
    }
    return (double)v / kScale[scale];
}

static void scale_and_encode(double val, uint8_t min_scale, int64_t *enc, uint8_t *scale)
{
    for (;; min_scale++) {
        if (encode_double(val, min_scale, enc)) {
            *scale = min_scale;
            return;
        }
    }
}

static int64_t encode_oid(const uint8_t *o)
{
    uint8_t b[8] = {o[11], o[3], o[10], o[2], o[9], o[1], o[0], 0};
    return (int64_t)rd_u64le(b);
}

static bool encode_string(const uint8_t *s, size_t n, i128 *out)
{
    if (n > 16 || (n > 0 && s[0] == 0))
        return false;
    uint8_t arr[16] = {0};
    for (size_t i = 0; i < n; i++)
        arr[i] = s[n - 1 - i];
    *out = (i128)rd_u128le(arr);
    return true;
}

static bool encode_binary(const uint8_t *s, size_t n, i128 *out)
{
    if (n > 16)
        return false;
    uint8_t arr[16] = {0};
    memcpy(arr, s, n);
    *out = (i128)rd_u128le(arr);
    return true;
}

static bool uses_dod(uint8_t t)
{
    return t == BSON_TYPE_OID || t == BSON_TYPE_DATE_TIME || t == BSON_TYPE_TIMESTAMP;
}
static bool uses_128(uint8_t t)
{
    return t == BSON_TYPE_DECIMAL128 || t == BSON_TYPE_BINARY || t == BSON_TYPE_UTF8 || t == BSON_TYPE_CODE;
}

/* ---------------------------------------------------------------- EncodingState (one stream) */

typedef struct {
    size_t off, len;
} ctrl_block;

typedef struct {
    ctrl_block *v;
    size_t n, cap;
} ctrl_list;

static void ctrl_add(ctrl_list *l, size_t off, size_t len)
{
    if (!l)
        return; /* regular mode: the server's NoopControlBlockWriter */
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 8;
        l->v = xrealloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n].off = off;
    l->v[l->n].len = len;
    l->n++;
}

typedef struct encstate encstate;
struct encstate {
    uint8_t *prev; /* type, 0 (empty field name), value */
    size_t prevlen;
    bool wide;
    s8b s;
    /* Encoder64 */
    uint8_t scale;
    double last_in_prev_block;
    int64_t prev_delta;
    int64_t prev_enc64;
    /* Encoder128 */
    bool prev128_has;
    i128 prev128;
    ptrdiff_t ctrl; /* offset of the open control byte, -1 for none */
    /* where words go while this state works */
    bcbuf *out;
    ctrl_list *cbw;
    uint8_t cur_type; /* the type the block writer is told (Simple8bBlockWriter64's _type) */
};

static const uint8_t kControlForScale[6] = {0x90, 0xA0, 0xB0, 0xC0, 0xD0, 0x80};

/* incrementSimple8bCount: the control byte counts the words after it (count - 1 in its low nibble, at most 16). */
static ptrdiff_t increment_count(encstate *es, uint8_t scale)
{
    uint8_t control = kControlForScale[scale];
    bcbuf *b = es->out;
    uint8_t count;
    if (es->ctrl == -1) {
        buf_byte(b, 0);
        es->ctrl = (ptrdiff_t)b->n - 1;
        count = 0;
    } else {
        uint8_t cur = b->p[es->ctrl];
        if ((cur & 0xF0) != control) {
            ctrl_add(es->cbw, (size_t)es->ctrl, b->n - (size_t)es->ctrl);
            es->ctrl = -1;
            increment_count(es, scale);
            return -1;
        }
        count = (uint8_t)((cur & 0x0F) + 1);
    }
    b->p[es->ctrl] = (uint8_t)(control | (count & 0x0F));
    if (count + 1 == 16) {
        ptrdiff_t full = es->ctrl;
        es->ctrl = -1;
        return full;
    }
    return -1;
}

static void block_writer(void *ctx, uint64_t word)
{
    encstate *es = ctx;
    ptrdiff_t full = increment_count(es, es->wide ? SCALE_MEMORY : es->scale);
    buf_u64le(es->out, word);
    if (full != -1)
        ctrl_add(es->cbw, (size_t)full, es->out->n - (size_t)full);
    if (es->wide || es->cur_type != BSON_TYPE_DOUBLE)
        return;
    /* the double before the first pending value: what the next block's scale must express */
    int64_t cur = es->prev_enc64;
    for (size_t i = s8_npending(&es->s); i-- > 0;) {
        u128 v;
        if (s8_pending_at(&es->s, i, &v))
            cur = delta64(cur, unzigzag64((uint64_t)v));
    }
    es->last_in_prev_block = decode_double(cur, es->scale);
}

static uint8_t prev_type(const encstate *es)
{
    return es->prev[0];
}
static const uint8_t *prev_val(const encstate *es)
{
    return es->prev + 2;
}
static size_t prev_vlen(const encstate *es)
{
    return es->prevlen - 2;
}

static void store_prev(encstate *es, uint8_t type, const uint8_t *v, size_t n)
{
    es->prev = xrealloc(es->prev, n + 2);
    es->prev[0] = type;
    es->prev[1] = 0;
    if (n)
        memcpy(es->prev + 2, v, n);
    es->prevlen = n + 2;
}

static double rd_double(const uint8_t *p)
{
    uint64_t u = rd_u64le(p);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* _initializeFromPrevious: a fresh Encoder64 or Encoder128 seeded with the literal just written */
static void init_from_prev(encstate *es)
{
    uint8_t t = prev_type(es);
    s8_free(&es->s);
    es->wide = uses_128(t);
    s8_init(&es->s, es->wide, block_writer, es);
    es->scale = SCALE_MEMORY;
    es->last_in_prev_block = 0;
    es->prev_delta = 0;
    es->prev_enc64 = 0;
    es->prev128_has = false;
    es->prev128 = 0;
    const uint8_t *v = prev_val(es);
    switch (t) {
    case BSON_TYPE_DOUBLE:
        es->last_in_prev_block = rd_double(v);
        scale_and_encode(es->last_in_prev_block, 0, &es->prev_enc64, &es->scale);
        break;
    case BSON_TYPE_OID:
        es->prev_enc64 = encode_oid(v);
        break;
    case BSON_TYPE_UTF8:
    case BSON_TYPE_CODE:
        es->prev128_has = encode_string(v + 4, (size_t)rd_i32le(v) - 1, &es->prev128);
        break;
    case BSON_TYPE_BINARY:
        es->prev128_has = encode_binary(v + 5, (size_t)rd_i32le(v), &es->prev128);
        break;
    case BSON_TYPE_DECIMAL128:
        es->prev128_has = true;
        es->prev128 = (i128)rd_u128le(v);
        break;
    default:
        break;
    }
}

static void es_init(encstate *es, bcbuf *out, ctrl_list *cbw)
{
    memset(es, 0, sizeof *es);
    es->out = out;
    es->cbw = cbw;
    es->ctrl = -1;
    store_prev(es, BSON_TYPE_EOD, NULL, 0);
    es->wide = false;
    s8_init(&es->s, false, block_writer, es);
    es->scale = SCALE_MEMORY;
}

static void es_free(encstate *es)
{
    s8_free(&es->s);
    free(es->prev);
    es->prev = NULL;
}

static bool es_s8_append(encstate *es, uint8_t type, u128 v)
{
    es->cur_type = type;
    return s8_append(&es->s, v);
}

static void es_s8_skip(encstate *es, uint8_t type)
{
    es->cur_type = type;
    s8_skip(&es->s);
}

static void es_s8_flush(encstate *es, uint8_t type)
{
    es->cur_type = type;
    s8_flush(&es->s);
}

static void write_literal_from_prev(encstate *es)
{
    if (es->ctrl != -1)
        ctrl_add(es->cbw, (size_t)es->ctrl, es->out->n - (size_t)es->ctrl);
    buf_put(es->out, es->prev, es->prevlen);
    ctrl_add(es->cbw, es->out->n - es->prevlen, es->prevlen);
    es->ctrl = -1;
    init_from_prev(es);
}

/* Encoder64::_tryRescalePending: the pending deltas and the new value re-expressed at a larger scale, if that fits
 * in the words already pending without writing one. */
static void noop_writer(void *ctx, uint64_t w)
{
    (void)w;
    *(bool *)ctx = false;
}

static bool try_rescale(encstate *es, int64_t encoded, uint8_t new_scale, s8b *result)
{
    int64_t prev = 0;
    encode_double(es->last_in_prev_block, es->scale, &prev);
    int64_t prev_rescaled;
    if (!encode_double(es->last_in_prev_block, new_scale, &prev_rescaled))
        return false;
    bool possible = true;
    s8b b;
    s8_init(&b, false, noop_writer, &possible);
    s8_rle_from(&b, &es->s);
    size_t n = s8_npending(&es->s);
    for (size_t i = 0; i < n; i++) {
        u128 pv;
        if (!s8_pending_at(&es->s, i, &pv)) {
            s8_skip(&b);
            continue;
        }
        prev = expand64(prev, unzigzag64((uint64_t)pv));
        int64_t rescaled;
        if (!encode_double(decode_double(prev, es->scale), new_scale, &rescaled))
            goto fail;
        bool ok = s8_append(&b, zigzag64(delta64(rescaled, prev_rescaled)));
        if (!ok || !possible)
            goto fail;
        prev_rescaled = rescaled;
    }
    if (!s8_append(&b, zigzag64(delta64(encoded, prev_rescaled))) || !possible)
        goto fail;
    b.write = block_writer;
    b.ctx = es;
    *result = b;
    return true;
fail:
    s8_free(&b);
    return false;
}

/* Encoder64::_appendDouble */
static bool append_double(encstate *es, double value, double previous)
{
    int64_t encoded;
    uint8_t scale;
    scale_and_encode(value, es->scale, &encoded, &scale);
    if (scale != es->scale) {
        s8b r;
        if (try_rescale(es, encoded, scale, &r)) {
            s8_free(&es->s);
            es->s = r;
            es->prev_enc64 = encoded;
            es->scale = scale;
            return true;
        }
        /* otherwise the pending values are written at the old scale and a new control byte starts */
        es_s8_flush(es, BSON_TYPE_DOUBLE);
        if (es->ctrl != -1)
            ctrl_add(es->cbw, (size_t)es->ctrl, es->out->n - (size_t)es->ctrl);
        es->ctrl = -1;
        uint8_t prev_scale;
        scale_and_encode(previous, scale, &es->prev_enc64, &prev_scale);
        if (scale != prev_scale) {
            scale_and_encode(value, prev_scale, &encoded, &scale);
            scale_and_encode(previous, scale, &es->prev_enc64, &prev_scale);
        }
        es->scale = scale;
    }
    size_t before = es->out->n;
    if (!es_s8_append(es, BSON_TYPE_DOUBLE, zigzag64(delta64(encoded, es->prev_enc64))))
        return false;
    if (es->out->n == before) {
        es->prev_enc64 = encoded;
        return true;
    }
    /* A word was written: the values still pending may do with a smaller scale. Start again from scale 0 and
     * re-add them; in the worst case the scale comes back the same. */
    uint8_t old_scale = es->scale;
    scale_and_encode(es->last_in_prev_block, 0, &es->prev_enc64, &es->scale);
    s8b old = es->s;
    s8_init(&es->s, false, block_writer, es);
    s8_rle_from(&es->s, &old);
    double p = es->last_in_prev_block;
    int64_t penc = 0;
    encode_double(p, old_scale, &penc);
    size_t n = s8_npending(&old);
    for (size_t i = 0; i < n; i++) {
        u128 pv;
        if (s8_pending_at(&old, i, &pv)) {
            penc = expand64(penc, unzigzag64((uint64_t)pv));
            double val = decode_double(penc, old_scale);
            append_double(es, val, p);
            p = val;
        } else {
            es_s8_skip(es, BSON_TYPE_DOUBLE);
        }
    }
    s8_free(&old);
    return true;
}

/* Encoder64::appendDelta */
static bool append_delta64(encstate *es, uint8_t type, const uint8_t *v, size_t n)
{
    const uint8_t *p = prev_val(es);
    int64_t value = 0;
    switch (type) {
    case BSON_TYPE_DOUBLE:
        return append_double(es, rd_double(v), rd_double(p));
    case BSON_TYPE_INT32:
        value = delta64(rd_i32le(v), rd_i32le(p));
        break;
    case BSON_TYPE_INT64:
    case BSON_TYPE_DATE_TIME:
    case BSON_TYPE_TIMESTAMP:
        value = delta64((int64_t)rd_u64le(v), (int64_t)rd_u64le(p));
        break;
    case BSON_TYPE_OID: {
        if (memcmp(v + 4, p + 4, 5) != 0) /* the 5-byte instance-unique part must match */
            return false;
        int64_t cur = encode_oid(v);
        value = delta64(cur, es->prev_enc64);
        es->prev_enc64 = cur;
        break;
    }
    case BSON_TYPE_BOOL:
        value = delta64(v[0] != 0, p[0] != 0);
        break;
    case BSON_TYPE_UNDEFINED:
    case BSON_TYPE_NULL:
        value = 0;
        break;
    default: /* regex, dbpointer, code with scope, symbol, min/max key: only repeats */
        return false;
    }
    (void)n;
    if (uses_dod(type)) {
        int64_t d = value;
        value = delta64(d, es->prev_delta);
        es->prev_delta = d;
    }
    return es_s8_append(es, type, zigzag64(value));
}

static bool append_encoded128(encstate *es, uint8_t type, i128 enc)
{
    if (es->prev128_has || enc != 0) {
        i128 base = es->prev128_has ? es->prev128 : 0;
        bool ok = es_s8_append(es, type, zigzag128((i128)((u128)enc - (u128)base)));
        es->prev128_has = true;
        es->prev128 = enc;
        return ok;
    }
    return false;
}

/* Encoder128::appendDelta */
static bool append_delta128(encstate *es, uint8_t type, const uint8_t *v, size_t n)
{
    const uint8_t *p = prev_val(es);
    i128 enc;
    (void)n;
    switch (type) {
    case BSON_TYPE_UTF8:
    case BSON_TYPE_CODE:
        if (encode_string(v + 4, (size_t)rd_i32le(v) - 1, &enc))
            return append_encoded128(es, type, enc);
        return false;
    case BSON_TYPE_BINARY:
        /* only binaries of the same length and subtype */
        if (rd_i32le(v) != rd_i32le(p) || v[4] != p[4])
            return false;
        if (encode_binary(v + 5, (size_t)rd_i32le(v), &enc))
            return append_encoded128(es, type, enc);
        return false;
    case BSON_TYPE_DECIMAL128:
        return append_encoded128(es, type, (i128)rd_u128le(v));
    default:
        return false;
    }
}

/* EncodingState::append */
static void es_append(encstate *es, uint8_t type, const uint8_t *v, size_t n)
{
    if (prev_type(es) != type) {
        store_prev(es, type, v, n);
        es_s8_flush(es, type);
        write_literal_from_prev(es);
        return;
    }
    bool compressed = false;
    if (!uses_dod(type) && n == prev_vlen(es) && (n == 0 || memcmp(v, prev_val(es), n) == 0)) {
        es_s8_append(es, type, 0);
        compressed = true;
    }
    if (!compressed)
        compressed = es->wide ? append_delta128(es, type, v, n) : append_delta64(es, type, v, n);
    store_prev(es, type, v, n);
    if (!compressed) {
        es_s8_flush(es, type);
        write_literal_from_prev(es);
    }
}

/* EncodingState::skip */
static void es_skip(encstate *es)
{
    size_t before = es->out->n;
    es_s8_skip(es, prev_type(es));
    if (before != es->out->n && prev_type(es) == BSON_TYPE_DOUBLE) {
        bool skips_only = true;
        size_t n = s8_npending(&es->s);
        for (size_t i = 0; i < n; i++) {
            u128 v;
            if (s8_pending_at(&es->s, i, &v))
                skips_only = false;
        }
        if (skips_only)
            scale_and_encode(es->last_in_prev_block, 0, &es->prev_enc64, &es->scale);
    }
}

/* EncodingState::flush */
static void es_flush(encstate *es)
{
    es_s8_flush(es, prev_type(es));
    if (es->ctrl != -1)
        ctrl_add(es->cbw, (size_t)es->ctrl, es->out->n - (size_t)es->ctrl);
}

/* ---------------------------------------------------------------- objects (interleaved mode) */

static bool is_doc(uint8_t t)
{
    return t == BSON_TYPE_DOCUMENT || t == BSON_TYPE_ARRAY;
}

static bool doc_iter(bson_iter_t *it, const uint8_t *doc)
{
    uint32_t len = (uint32_t)rd_i32le(doc);
    return bson_iter_init_from_data(it, doc, len);
}

static bool doc_empty(const uint8_t *doc)
{
    return rd_i32le(doc) <= 5;
}

static const uint8_t *elem_value(const bson_iter_t *it, size_t *n)
{
    size_t klen = strlen((const char *)it->raw + it->key);
    uint32_t voff = it->key + (uint32_t)klen + 1;
    *n = it->next_off - voff;
    return it->raw + voff;
}

static const uint8_t *sub_doc(const bson_iter_t *it)
{
    size_t n;
    return elem_value(it, &n);
}

/* One scalar leaf visited in lock step: the reference's element and the object's (NULL when missing). */
typedef void (*leaf_fn)(void *ctx, const bson_iter_t *ref, const bson_iter_t *elem);

/* _traverseUntilEmptyObj: visits the leaves of a sub-object missing from the object; true at an empty one. */
static bool traverse_until_empty(const uint8_t *doc, leaf_fn fn, void *ctx)
{
    bson_iter_t it;
    doc_iter(&it, doc);
    bool any = false;
    while (bson_iter_next(&it)) {
        any = true;
        if (is_doc((uint8_t)bson_iter_type(&it))) {
            if (traverse_until_empty(sub_doc(&it), fn, ctx))
                return true;
        } else if (fn) {
            fn(ctx, &it, NULL);
        }
    }
    return !any;
}

static bool has_empty_obj(const uint8_t *doc)
{
    return traverse_until_empty(doc, NULL, NULL);
}

static bool contains_scalars(const uint8_t *doc)
{
    bson_iter_t it;
    doc_iter(&it, doc);
    while (bson_iter_next(&it)) {
        if (!is_doc((uint8_t)bson_iter_type(&it)))
            return true;
        if (contains_scalars(sub_doc(&it)))
            return true;
    }
    return false;
}

/* _traverseLockStep: the object must hold the reference's fields in its order, sub-objects where the reference has
 * them, nothing the reference lacks; missing fields are allowed. */
static bool lock_step(const uint8_t *ref, const uint8_t *obj, leaf_fn fn, void *ctx)
{
    bson_iter_t r, it;
    doc_iter(&r, ref);
    doc_iter(&it, obj);
    bool more = bson_iter_next(&it);
    while (bson_iter_next(&r)) {
        uint8_t rt = (uint8_t)bson_iter_type(&r);
        bool same = more && strcmp(bson_iter_key(&r), bson_iter_key(&it)) == 0;
        if (is_doc(rt)) {
            if (same) {
                if ((uint8_t)bson_iter_type(&it) != rt)
                    return false;
                if (doc_empty(sub_doc(&r)) != doc_empty(sub_doc(&it)))
                    return false;
                bool ok = lock_step(sub_doc(&r), sub_doc(&it), fn, ctx);
                more = bson_iter_next(&it);
                if (!ok)
                    return false;
            } else if (traverse_until_empty(sub_doc(&r), fn, ctx)) {
                return false;
            }
        } else {
            if (same && is_doc((uint8_t)bson_iter_type(&it)))
                return false;
            if (same) {
                fn(ctx, &r, &it);
                more = bson_iter_next(&it);
            } else {
                fn(ctx, &r, NULL);
            }
        }
    }
    return !more;
}

static bool builder_has(bson_t *b, const char *name)
{
    bson_iter_t it;
    if (!bson_iter_init(&it, b))
        return false;
    while (bson_iter_next(&it))
        if (strcmp(bson_iter_key(&it), name) == 0)
            return true;
    return false;
}

static bool append_elem(bson_t *b, const bson_iter_t *it)
{
    if (builder_has(b, bson_iter_key(it)))
        return false;
    return bson_append_iter(b, bson_iter_key(it), -1, it);
}

/* _mergeObj: the union of the reference's and the object's fields, keeping both orders, or false. */
static bool merge_obj(bson_t *b, const uint8_t *ref, const uint8_t *obj)
{
    bson_iter_t r, it;
    doc_iter(&r, ref);
    doc_iter(&it, obj);
    bool rm = bson_iter_next(&r), om = bson_iter_next(&it);
    while (rm && om) {
        const char *name = bson_iter_key(&r);
        if (strcmp(name, bson_iter_key(&it)) == 0) {
            uint8_t rt = (uint8_t)bson_iter_type(&r), ot = (uint8_t)bson_iter_type(&it);
            if (is_doc(rt) && is_doc(ot) && rt == ot) {
                if (doc_empty(sub_doc(&r)) != doc_empty(sub_doc(&it)))
                    return false;
                if (builder_has(b, name))
                    return false;
                bson_t child;
                if (rt == BSON_TYPE_DOCUMENT)
                    bson_append_document_begin(b, name, -1, &child);
                else
                    bson_append_array_begin(b, name, -1, &child);
                bool ok = merge_obj(&child, sub_doc(&r), sub_doc(&it));
                if (rt == BSON_TYPE_DOCUMENT)
                    bson_append_document_end(b, &child);
                else
                    bson_append_array_end(b, &child);
                if (!ok)
                    return false;
            } else if (is_doc(rt) || is_doc(ot)) {
                return false;
            } else if (!append_elem(b, &r)) {
                return false;
            }
            rm = bson_iter_next(&r);
            om = bson_iter_next(&it);
            continue;
        }
        /* is the reference's field later in the object? */
        bson_iter_t later = it;
        bool found = false;
        while (bson_iter_next(&later))
            if (strcmp(bson_iter_key(&later), name) == 0) {
                found = true;
                break;
            }
        if (!found) {
            if (is_doc((uint8_t)bson_iter_type(&r)) && has_empty_obj(sub_doc(&r)))
                return false;
            if (!append_elem(b, &r))
                return false;
            rm = bson_iter_next(&r);
        } else {
            if (is_doc((uint8_t)bson_iter_type(&it)) && has_empty_obj(sub_doc(&it)))
                return false;
            if (!append_elem(b, &it))
                return false;
            om = bson_iter_next(&it);
        }
    }
    for (; rm; rm = bson_iter_next(&r)) {
        if (is_doc((uint8_t)bson_iter_type(&r)) && has_empty_obj(sub_doc(&r)))
            return false;
        if (!append_elem(b, &r))
            return false;
    }
    for (; om; om = bson_iter_next(&it)) {
        if (is_doc((uint8_t)bson_iter_type(&it)) && has_empty_obj(sub_doc(&it)))
            return false;
        if (!append_elem(b, &it))
            return false;
    }
    return true;
}

/* ---------------------------------------------------------------- the column builder */

typedef struct {
    encstate es;
    bcbuf buf;
    ctrl_list cb;
} substate;

typedef struct {
    bcbuf out;
    bool interleaved;
    encstate reg;
    /* interleaved */
    bool determining;
    uint8_t *ref;
    uint8_t reftype;
    uint8_t **buffered; /* NULL: a skip */
    size_t nbuf, capbuf;
    substate *subs;
    size_t nsubs;
} colbuilder;

static uint8_t *dup_doc(const uint8_t *doc)
{
    size_t n = (size_t)rd_i32le(doc);
    uint8_t *p = xrealloc(NULL, n);
    memcpy(p, doc, n);
    return p;
}

static void cb_init(colbuilder *cb)
{
    memset(cb, 0, sizeof *cb);
    es_init(&cb->reg, &cb->out, NULL);
}

static void clear_interleaved(colbuilder *cb)
{
    free(cb->ref);
    cb->ref = NULL;
    for (size_t i = 0; i < cb->nbuf; i++)
        free(cb->buffered[i]);
    free(cb->buffered);
    cb->buffered = NULL;
    cb->nbuf = cb->capbuf = 0;
    for (size_t i = 0; i < cb->nsubs; i++) {
        es_free(&cb->subs[i].es);
        free(cb->subs[i].buf.p);
        free(cb->subs[i].cb.v);
    }
    free(cb->subs);
    cb->subs = NULL;
    cb->nsubs = 0;
    cb->interleaved = false;
}

static void cb_free(colbuilder *cb)
{
    clear_interleaved(cb);
    es_free(&cb->reg);
    free(cb->out.p);
}

static void buffer_obj(colbuilder *cb, uint8_t *doc)
{
    if (cb->nbuf == cb->capbuf) {
        cb->capbuf = cb->capbuf ? cb->capbuf * 2 : 8;
        cb->buffered = xrealloc(cb->buffered, cb->capbuf * sizeof *cb->buffered);
    }
    cb->buffered[cb->nbuf++] = doc;
}

static void fresh_regular(colbuilder *cb)
{
    es_free(&cb->reg);
    es_init(&cb->reg, &cb->out, NULL);
}

static void start_interleaved(colbuilder *cb, const uint8_t *obj, uint8_t type)
{
    cb->interleaved = true;
    cb->determining = true;
    cb->ref = dup_doc(obj);
    cb->reftype = type;
    buffer_obj(cb, dup_doc(obj));
}

/* _startDetermineSubObjReference */
static void start_determine(colbuilder *cb, const uint8_t *obj, uint8_t type)
{
    es_flush(&cb->reg);
    clear_interleaved(cb);
    start_interleaved(cb, obj, type);
}

static void count_leaf(void *ctx, const bson_iter_t *r, const bson_iter_t *e)
{
    (void)r;
    (void)e;
    ++*(uint32_t *)ctx;
}

/* A scalar leaf met in lock step: its type and value bytes (inside a document that outlives the list), or a missing
 * field. */
typedef struct {
    bool has;
    uint8_t type;
    const uint8_t *v;
    size_t n;
} leaf;

typedef struct {
    leaf *v;
    size_t n, cap;
} leaflist;

static void collect_leaf(void *ctx, const bson_iter_t *r, const bson_iter_t *e)
{
    (void)r;
    leaflist *l = ctx;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->v = xrealloc(l->v, l->cap * sizeof *l->v);
    }
    leaf *lf = &l->v[l->n++];
    memset(lf, 0, sizeof *lf);
    if (e) {
        lf->has = true;
        lf->type = (uint8_t)bson_iter_type(e);
        lf->v = elem_value(e, &lf->n);
    }
}

static void sub_feed(substate *s, const leaf *e)
{
    if (e->has)
        es_append(&s->es, e->type, e->v, e->n);
    else
        es_skip(&s->es);
}

/* A new stream whose previous value is the reference's leaf, so that the first object's value is a delta against
 * the reference (which already holds it) rather than a literal. */
static void init_leaf(colbuilder *cb, const leaf *r, const leaf *e)
{
    cb->subs = xrealloc(cb->subs, (cb->nsubs + 1) * sizeof *cb->subs);
    substate *s = &cb->subs[cb->nsubs++];
    memset(s, 0, sizeof *s);
    es_init(&s->es, &s->buf, &s->cb);
    store_prev(&s->es, r->type, r->v, r->n);
    init_from_prev(&s->es);
    sub_feed(s, e);
}

/* The streams point at their own buffers: set again after the array of streams moves. */
static void fix_sub_pointers(colbuilder *cb)
{
    for (size_t i = 0; i < cb->nsubs; i++) {
        substate *s = &cb->subs[i];
        s->es.out = &s->buf;
        s->es.cbw = &s->cb;
        s->es.s.ctx = &s->es;
    }
}

static const uint8_t kEmptyDoc[5] = {5, 0, 0, 0, 0};

static void flush_interleaved(colbuilder *cb);

/* _appendSubElements */
static bool append_sub_elements(colbuilder *cb, const uint8_t *obj)
{
    leaflist l = {0};
    if (!lock_step(cb->ref, obj ? obj : kEmptyDoc, collect_leaf, &l)) {
        free(l.v);
        flush_interleaved(cb);
        return false;
    }
    if (l.n != cb->nsubs)
        abort(); /* the reference fixes the number of streams: a mismatch is a bug here */
    for (size_t i = 0; i < l.n; i++)
        sub_feed(&cb->subs[i], &l.v[i]);
    free(l.v);
    return true;
}

/* _finishDetermineSubObjReference: writes the interleaved start and the reference, then feeds the buffered
 * objects to one stream per leaf. */
static void finish_determine(colbuilder *cb)
{
    buf_byte(&cb->out, cb->reftype == BSON_TYPE_DOCUMENT ? 0xF1 : 0xF2);
    buf_put(&cb->out, cb->ref, (size_t)rd_i32le(cb->ref));
    leaflist l = {0}, refl = {0};
    if (!lock_step(cb->ref, cb->buffered[0], collect_leaf, &l))
        abort(); /* the reference was merged from this object */
    /* the reference's own leaves, in order: one stream each */
    lock_step(cb->ref, cb->ref, collect_leaf, &refl);
    if (refl.n != l.n)
        abort();
    for (size_t i = 0; i < refl.n; i++) {
        init_leaf(cb, &refl.v[i], &l.v[i]);
        fix_sub_pointers(cb);
    }
    free(refl.v);
    free(l.v);
    cb->determining = false;
    for (size_t i = 1; i < cb->nbuf; i++)
        if (!append_sub_elements(cb, cb->buffered[i]))
            abort();
    for (size_t i = 0; i < cb->nbuf; i++)
        free(cb->buffered[i]);
    cb->nbuf = 0;
}

/* bsoncolumn_util.h numElemsForControlByte: the values (skips included) a control block holds */
static uint32_t elems_in_block(const uint8_t *p)
{
    uint8_t c = p[0];
    if ((c & 0xE0) == 0 || c == 0xFF || c == 0x7F)
        return 1;
    uint32_t n = 0;
    int words = (c & 0x0F) + 1;
    for (int w = 0; w < words; w++) {
        uint64_t word = rd_u64le(p + 1 + 8 * w);
        unsigned sel = word & 0xF, ext = (word >> 4) & 0xF;
        if (sel == 15) {
            n += (ext + 1) * 120;
            continue;
        }
        int et = EXT_BASE;
        if (sel == 7 && ext >= 1 && ext <= 9)
            et = EXT_SEVEN;
        else if (sel == 8 && ext >= 1 && ext <= 7)
            et = EXT_EIGHT_SMALL;
        else if (sel == 8 && ext >= 8 && ext <= 13)
            et = EXT_EIGHT_LARGE;
        n += et == EXT_BASE ? kIntsPerSel[EXT_BASE][sel] : kIntsPerSel[et][ext];
    }
    return n;
}

/* _flushSubObjMode: each stream's control blocks go out in the order a decoder reads them: next is the stream
 * that has delivered the fewest values so far, the lowest index on a tie. */
static void flush_interleaved(colbuilder *cb)
{
    if (cb->determining)
        finish_determine(cb);
    for (size_t i = 0; i < cb->nsubs; i++)
        es_flush(&cb->subs[i].es);
    size_t n = cb->nsubs;
    uint32_t *written = calloc(n ? n : 1, sizeof *written);
    size_t *next = calloc(n ? n : 1, sizeof *next);
    if (!written || !next)
        abort();
    for (;;) {
        size_t best = n;
        for (size_t i = 0; i < n; i++) {
            if (next[i] >= cb->subs[i].cb.n)
                continue;
            if (best == n || written[i] < written[best])
                best = i;
        }
        if (best == n)
            break;
        substate *s = &cb->subs[best];
        const ctrl_block *blk = &s->cb.v[next[best]++];
        buf_put(&cb->out, s->buf.p + blk->off, blk->len);
        written[best] += elems_in_block(s->buf.p + blk->off);
    }
    free(written);
    free(next);
    buf_byte(&cb->out, 0);
    clear_interleaved(cb);
    fresh_regular(cb);
}

/* BSONColumnBuilder::_appendObj */
static void append_obj(colbuilder *cb, uint8_t type, const uint8_t *obj, size_t n)
{
    bool scalars = contains_scalars(obj);
    if (!cb->interleaved) {
        if (!scalars)
            es_append(&cb->reg, type, obj, n);
        else
            start_determine(cb, obj, type);
        return;
    }
    if (type != cb->reftype) {
        flush_interleaved(cb);
        if (!scalars) {
            es_append(&cb->reg, type, obj, n);
            return;
        }
        start_determine(cb, obj, type);
        return;
    }
    if (cb->determining) {
        uint32_t count = 0;
        if (!lock_step(cb->ref, obj, count_leaf, &count)) {
            bson_t merged = BSON_INITIALIZER;
            if (!merge_obj(&merged, cb->ref, obj)) {
                bson_destroy(&merged);
                flush_interleaved(cb);
                if (!scalars) {
                    es_append(&cb->reg, type, obj, n);
                    return;
                }
                start_interleaved(cb, obj, type);
                return;
            }
            free(cb->ref);
            cb->ref = dup_doc(bson_get_data(&merged));
            bson_destroy(&merged);
        }
        /* buffer while there are at most twice as many objects as the reference has leaves */
        if ((size_t)count * 2 >= cb->nbuf) {
            buffer_obj(cb, dup_doc(obj));
            return;
        }
        finish_determine(cb);
    }
    if (!append_sub_elements(cb, obj)) {
        if (!scalars)
            es_append(&cb->reg, type, obj, n);
        else
            start_determine(cb, obj, type);
    }
}

static void cb_append(colbuilder *cb, uint8_t type, const uint8_t *v, size_t n)
{
    if (!is_doc(type) || doc_empty(v)) {
        if (cb->interleaved)
            flush_interleaved(cb);
        es_append(&cb->reg, type, v, n);
        return;
    }
    append_obj(cb, type, v, n);
}

static void cb_skip(colbuilder *cb)
{
    if (!cb->interleaved) {
        es_skip(&cb->reg);
        return;
    }
    if (has_empty_obj(cb->ref)) {
        flush_interleaved(cb);
        cb_skip(cb);
        return;
    }
    if (cb->determining) {
        buffer_obj(cb, NULL);
    } else {
        for (size_t i = 0; i < cb->nsubs; i++)
            es_skip(&cb->subs[i].es);
    }
}

static void cb_finalize(colbuilder *cb)
{
    if (!cb->interleaved)
        es_flush(&cb->reg);
    else
        flush_interleaved(cb);
    buf_byte(&cb->out, 0);
}

/* ---------------------------------------------------------------- public API: a log of the values, replayed */

struct bcenc {
    bcbuf log; /* per value: kind (0 value, 1 skip), type, u32 length, value bytes */
    size_t count;
    uint8_t *last;
    size_t lastlen;
    /* BSONColumnBuilder::intermediate()'s bookkeeping (_is.offset, lastControl, lastControlOffset, lastBufLength) */
    size_t consumed;
    int last_control; /* -1: kInvalidControlByte */
    ptrdiff_t last_control_off;
    size_t last_buf_len;
};

bcenc_t *bcenc_new(void)
{
    bcenc_t *e = calloc(1, sizeof *e);
    if (!e)
        abort();
    e->last_control = -1;
    return e;
}

void bcenc_free(bcenc_t *enc)
{
    if (!enc)
        return;
    free(enc->log.p);
    free(enc->last);
    free(enc);
}

void bcenc_append_raw(bcenc_t *enc, bson_type_t type, const uint8_t *value, size_t len)
{
    if (type == BSON_TYPE_EOD) {
        bcenc_skip(enc);
        return;
    }
    uint8_t h[6] = {0, (uint8_t)type, (uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16), (uint8_t)(len >> 24)};
    buf_put(&enc->log, h, 6);
    buf_put(&enc->log, value, len);
    enc->count++;
}

void bcenc_append_iter(bcenc_t *enc, const bson_iter_t *it)
{
    size_t n;
    const uint8_t *v = elem_value(it, &n);
    bcenc_append_raw(enc, bson_iter_type(it), v, n);
}

void bcenc_skip(bcenc_t *enc)
{
    uint8_t h[6] = {1, 0, 0, 0, 0, 0};
    buf_put(&enc->log, h, 6);
    enc->count++;
}

size_t bcenc_count(const bcenc_t *enc)
{
    return enc->count;
}

static void replay(const bcenc_t *enc, colbuilder *cb)
{
    cb_init(cb);
    size_t i = 0;
    while (i < enc->log.n) {
        const uint8_t *h = enc->log.p + i;
        size_t n = (size_t)h[2] | (size_t)h[3] << 8 | (size_t)h[4] << 16 | (size_t)h[5] << 24;
        if (h[0] == 1)
            cb_skip(cb);
        else
            cb_append(cb, h[1], h + 6, n);
        i += 6 + n;
    }
}

uint8_t *bcenc_finish(const bcenc_t *enc, size_t *len)
{
    colbuilder cb;
    replay(enc, &cb);
    cb_finalize(&cb);
    uint8_t *out = cb.out.p;
    *len = cb.out.n;
    cb.out.p = NULL;
    cb_free(&cb);
    return out;
}

size_t bcenc_diff_offset(const uint8_t *before, size_t blen, const uint8_t *after, size_t alen)
{
    size_t i = 0;
    while (i < blen && i < alen && before[i] == after[i])
        i++;
    return i;
}

static uint8_t scale_of_control(uint8_t c)
{
    static const uint8_t k[16] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 5, 0, 1, 2, 3, 4, 0xFF, 0xFF};
    return k[c >> 4];
}

/* BSONColumnBuilder::intermediate(): the builder keeps the bytes from its open control byte on (everything before is
 * handed out for good), finalizes a copy, and returns the finalized bytes from where its kept bytes start, or from
 * further on when the open control byte came out the same as last time. That offset can lie before the first byte
 * that changed (the diff then repeats some bytes); it never lies after it. */
uint8_t *bcenc_intermediate(bcenc_t *enc, size_t *offset, size_t *dlen)
{
    colbuilder cb;
    replay(enc, &cb);
    size_t length = cb.out.n - enc->consumed;
    ptrdiff_t ctrl = cb.interleaved || cb.reg.ctrl == -1 ? -1 : cb.reg.ctrl - (ptrdiff_t)enc->consumed;
    cb_finalize(&cb);
    const uint8_t *fin = cb.out.p;
    size_t n = cb.out.n;
    ptrdiff_t fctrl = cb.interleaved || cb.reg.ctrl == -1 ? -1 : cb.reg.ctrl - (ptrdiff_t)enc->consumed;
    size_t prev = enc->consumed, identical = 0;
    if (ctrl == -1) {
        enc->consumed += length;
        enc->last_control = -1;
        enc->last_control_off = 0;
        enc->last_buf_len = 0;
    } else {
        uint8_t fbyte = fctrl != -1 ? fin[prev + (size_t)fctrl] : 0;
        if (enc->last_control != -1 && prev != 0 && enc->last_control_off == fctrl && enc->last_control == (int)fbyte) {
            if ((ptrdiff_t)enc->last_buf_len < ctrl)
                abort(); /* the server's invariant(identicalBytes >= 0) */
            identical = enc->last_buf_len - (size_t)ctrl;
        }
        uint8_t at_ctrl = fin[prev + (size_t)ctrl];
        if (fctrl != -1 && scale_of_control(fbyte) != scale_of_control(at_ctrl)) {
            enc->last_control = fbyte;
            enc->last_control_off = fctrl - ctrl;
        } else {
            enc->last_control = at_ctrl;
            enc->last_control_off = 0;
        }
        enc->consumed += (size_t)ctrl;
        enc->last_buf_len = length - (size_t)ctrl;
    }
    size_t off = prev + identical;
    /* The diff must rebuild the binary from the previous one: never past the first byte that changed. */
    size_t exact = enc->last ? bcenc_diff_offset(enc->last, enc->lastlen, fin, n) : 0;
    if (off > exact || off > n)
        abort();
    uint8_t *d = xrealloc(NULL, n - off);
    memcpy(d, fin + off, n - off);
    free(enc->last);
    enc->last = cb.out.p;
    enc->lastlen = n;
    cb.out.p = NULL;
    cb_free(&cb);
    *offset = off;
    *dlen = n - off;
    return d;
}

static void words_writer(void *ctx, uint64_t w)
{
    buf_u64le(ctx, w);
}

uint8_t *bcenc_simple8b_words(bool wide, size_t n, const uint8_t *kind, const uint64_t *hi, const uint64_t *lo,
                              size_t *len)
{
    bcbuf out = {0};
    s8b s;
    s8_init(&s, wide, words_writer, &out);
    for (size_t i = 0; i < n; i++) {
        if (kind[i] == 0)
            s8_append(&s, ((u128)hi[i] << 64) | lo[i]);
        else if (kind[i] == 1)
            s8_skip(&s);
        else
            s8_flush(&s);
    }
    s8_flush(&s);
    s8_free(&s);
    *len = out.n;
    if (!out.p)
        out.p = xrealloc(NULL, 1);
    return out.p;
}

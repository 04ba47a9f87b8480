/*
 * changestream.c — change streams served from mongosim's oplog, as a MongoDB 7.0 replica set serves them.
 *
 * Sources (mongodb/mongo unless named): docs/change_streams.md; src/mongo/db/pipeline/resume_token.cpp (the token's
 * fields and their order); src/mongo/db/storage/key_string.cpp (the KeyString V1 bytes: CType values, integers as
 * magnitude << 1 in the fewest big-endian bytes, strings 0x00-terminated with 0x00 escaped as 0x00 0xFF, objects as
 * generic CType + field name + value, 0x04 at the end); change_stream_event_transform.cpp (the event fields);
 * change_stream_document_diff_parser.cpp (updateDescription from a $v:2 diff);
 * document_source_change_stream_unwind_transaction.cpp (transactions: every op its own event at the commit's ts,
 * txnOpIndex in the token); document_source_change_stream_ensure_resume_token_present.cpp (280 when the resume
 * token's event is not found); document_source_change_stream_check_resumability.cpp (286 when the oplog no longer
 * reaches the resume point); plan_executor_pipeline.cpp and jstests/change_streams/report_post_batch_resume_token.js
 * (the post-batch resume token); change_stream_split_event_helpers.cpp ($changeStreamSplitLargeEvent); the drivers'
 * change-streams specification (mongodb/specifications source/change-streams/change-streams.md).
 *
 * NOTES. A stream keeps its scan position (the oplog seq of the entry it reads next) and the position of the last
 * event it returned or passed over ((clusterTime, txnOpIndex, fromInvalidate, fragment), compared in that order as
 * the server compares tokens); an entry is re-read after a batch that stopped inside it (a transaction's events),
 * and events at or before the last position are skipped, so nothing is copied into the cursor but the events of
 * the entry being read (cached). Not modelled: the _typeBits of a token whose documentKey holds an int64, a double
 * or a decimal (the server adds them; this module writes the _data only), non-integral doubles and decimals in a
 * documentKey (written with an encoding of mongosim's own). Pre- and post-images come from images.c: kept for the
 * writes of collections with changeStreamPreAndPostImages enabled; for others "whenAvailable" gives null and
 * "required" fails, as on the server.
 */
#include "changestream.h"

#include "flavor.h"
#include "images.h"
#include "projection.h"
#include "sim_internal.h"
#include "update.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* BSONObjMaxInternalSize (src/mongo/bson/util/builder.h): an event over 16 MB + 16 KB fails serialization with
 * BSONObjectTooLarge (10334, plan_executor_pipeline.cpp _trySerializeToBson). */
#define CS_MAX_INTERNAL (16 * 1024 * 1024 + 16 * 1024)
/* DocumentSourceChangeStreamSplitLargeEvent::kBSONObjMaxChangeEventSize = BSONObjMaxInternalSize - 8 KB: a bigger
 * event is split by the stage. */
#define CS_MAX_CHANGE_EVENT (CS_MAX_INTERNAL - 8 * 1024)

/* ================================================================ KeyString V1 */

/* The KeyString bytes and its TypeBits: the BSON types the bytes alone do not tell (int32/int64/double, string or
 * symbol), one or two bits per value packed from the low bit up (key_string.h TypeBits: kInt 0, kDouble 1, kLong 2,
 * kNegativeZero 3 as two bits low bit first; kString 0, kSymbol 1 as one bit). */
typedef struct {
    uint8_t *p;
    size_t len, cap;
    uint8_t tb[CS_TYPEBITS_MAX];
    size_t tbits;
    bool tb_nonzero;
} ks_buf;

static void ks_tbit(ks_buf *k, int bit)
{
    if (k->tbits >= 8 * (CS_TYPEBITS_MAX - 1)) {
        fprintf(stderr, "mongosim: a resume token's type bits exceed %d bytes\n", CS_TYPEBITS_MAX);
        abort();
    }
    if (k->tbits % 8 == 0)
        k->tb[k->tbits / 8] = 0;
    if (bit) {
        k->tb[k->tbits / 8] |= (uint8_t)(1u << (k->tbits % 8));
        k->tb_nonzero = true;
    }
    k->tbits++;
}

static void ks_tnum(ks_buf *k, int code)
{
    ks_tbit(k, code & 1);
    ks_tbit(k, code >> 1);
}

static void ks_put(ks_buf *k, const void *d, size_t n)
{
    if (k->len + n > k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 256;
        while (cap < k->len + n)
            cap *= 2;
        uint8_t *p = realloc(k->p, cap);
        if (!p)
            abort();
        k->p = p;
        k->cap = cap;
    }
    memcpy(k->p + k->len, d, n);
    k->len += n;
}

static void ks_byte(ks_buf *k, uint8_t b)
{
    ks_put(k, &b, 1);
}

/* key_string.cpp CType values. */
enum {
    KS_MINKEY = 10,
    KS_UNDEFINED = 15,
    KS_NULL = 20,
    KS_NUMERIC = 30,
    KS_NUM_ZERO = 41,      /* kNumericZero */
    KS_NUM_POS1 = 43,      /* kNumericPositive1ByteInt; +n-1 for n bytes */
    KS_NUM_NEG1 = 39,      /* kNumericNegative1ByteInt; -(n-1) for n bytes */
    KS_NUM_POS_LARGE = 51, /* kNumericPositiveLargeMagnitude */
    KS_NUM_NEG_LARGE = 31,
    KS_STRING = 60,
    KS_OBJECT = 70,
    KS_ARRAY = 80,
    KS_BINDATA = 90,
    KS_OID = 100,
    KS_BOOL_FALSE = 110,
    KS_BOOL_TRUE = 111,
    KS_DATE = 120,
    KS_TIMESTAMP = 130,
    KS_MAXKEY = 240,
    KS_END = 4,
};

static void ks_be64(ks_buf *k, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (56 - 8 * i));
    ks_put(k, b, 8);
}

/* An integer: kNumericZero, or the magnitude shifted left one bit (the low bit marks a fractional part) in the
 * fewest big-endian bytes, after a CType that counts them; negative magnitudes are written inverted. */
static void ks_int(ks_buf *k, int64_t v)
{
    if (v == 0) {
        ks_byte(k, KS_NUM_ZERO);
        return;
    }
    bool neg = v < 0;
    uint64_t mag = neg ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v;
    if (mag >= (1ull << 63)) { /* does not fit once shifted: mongosim's own fallback (see NOTES) */
        ks_byte(k, neg ? KS_NUM_NEG_LARGE : KS_NUM_POS_LARGE);
        ks_be64(k, neg ? ~mag : mag);
        return;
    }
    uint64_t shifted = mag << 1;
    int n = 1;
    while (n < 8 && (shifted >> (8 * n)) != 0)
        n++;
    ks_byte(k, (uint8_t)(neg ? KS_NUM_NEG1 - (n - 1) : KS_NUM_POS1 + (n - 1)));
    for (int i = n - 1; i >= 0; i--) {
        uint8_t b = (uint8_t)(shifted >> (8 * i));
        ks_byte(k, neg ? (uint8_t)~b : b);
    }
}

static void ks_cstring(ks_buf *k, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        ks_byte(k, (uint8_t)s[i]);
        if (s[i] == 0)
            ks_byte(k, 0xff);
    }
    ks_byte(k, 0);
}

static uint8_t ks_generic_ctype(bson_type_t t, const bson_iter_t *it)
{
    switch (t) {
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DECIMAL128:
        return KS_NUMERIC;
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL:
        return KS_STRING;
    case BSON_TYPE_DOCUMENT:
        return KS_OBJECT;
    case BSON_TYPE_ARRAY:
        return KS_ARRAY;
    case BSON_TYPE_BINARY:
        return KS_BINDATA;
    case BSON_TYPE_OID:
        return KS_OID;
    case BSON_TYPE_BOOL:
        return KS_BOOL_FALSE;
    case BSON_TYPE_DATE_TIME:
        return KS_DATE;
    case BSON_TYPE_TIMESTAMP:
        return KS_TIMESTAMP;
    case BSON_TYPE_NULL:
        return KS_NULL;
    case BSON_TYPE_UNDEFINED:
        return KS_UNDEFINED;
    case BSON_TYPE_MINKEY:
        return KS_MINKEY;
    case BSON_TYPE_MAXKEY:
        return KS_MAXKEY;
    default:
        (void)it;
        return KS_NULL;
    }
}

static void ks_doc(ks_buf *k, const bson_t *doc);

static void ks_value(ks_buf *k, const bson_iter_t *it)
{
    switch (bson_iter_type(it)) {
    case BSON_TYPE_INT32:
        ks_int(k, bson_iter_int32(it));
        ks_tnum(k, 0); /* kInt */
        break;
    case BSON_TYPE_INT64:
        ks_int(k, bson_iter_int64(it));
        ks_tnum(k, 2); /* kLong */
        break;
    case BSON_TYPE_DOUBLE: {
        double d = bson_iter_double(it);
        if (d == (double)(int64_t)d && d > -9.2e18 && d < 9.2e18) {
            ks_int(k, (int64_t)d);
            ks_tnum(k, d == 0 && signbit(d) ? 3 : 1); /* kNegativeZero or kDouble */
        } else {                                      /* mongosim's own encoding of a fractional double (see NOTES) */
            uint64_t bits;
            memcpy(&bits, &d, 8);
            ks_byte(k, d < 0 ? KS_NUM_NEG_LARGE : KS_NUM_POS_LARGE);
            ks_be64(k, d < 0 ? ~bits : bits);
        }
        break;
    }
    case BSON_TYPE_DECIMAL128: {
        bson_decimal128_t dec;
        bson_iter_decimal128(it, &dec);
        ks_byte(k, KS_NUM_POS_LARGE);
        ks_be64(k, dec.high);
        ks_be64(k, dec.low);
        break;
    }
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL: {
        uint32_t len;
        const char *s = bson_iter_type(it) == BSON_TYPE_UTF8 ? bson_iter_utf8(it, &len) : bson_iter_symbol(it, &len);
        ks_byte(k, KS_STRING);
        ks_cstring(k, s, len);
        ks_tbit(k, bson_iter_type(it) == BSON_TYPE_SYMBOL); /* kString 0, kSymbol 1 */
        break;
    }
    case BSON_TYPE_DOCUMENT: {
        uint32_t len;
        const uint8_t *data;
        bson_t sub;
        bson_iter_document(it, &len, &data);
        bson_init_static(&sub, data, len);
        ks_byte(k, KS_OBJECT);
        ks_doc(k, &sub);
        break;
    }
    case BSON_TYPE_ARRAY: {
        bson_iter_t a;
        bson_iter_recurse(it, &a);
        ks_byte(k, KS_ARRAY);
        while (bson_iter_next(&a))
            ks_value(k, &a);
        ks_byte(k, 0);
        break;
    }
    case BSON_TYPE_BINARY: {
        bson_subtype_t st;
        uint32_t len;
        const uint8_t *data;
        bson_iter_binary(it, &st, &len, &data);
        ks_byte(k, KS_BINDATA);
        if (len < 0xff) {
            ks_byte(k, (uint8_t)len);
        } else {
            ks_byte(k, 0xff);
            uint8_t b[4] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
            ks_put(k, b, 4);
        }
        ks_byte(k, (uint8_t)st);
        ks_put(k, data, len);
        break;
    }
    case BSON_TYPE_OID:
        ks_byte(k, KS_OID);
        ks_put(k, bson_iter_oid(it)->bytes, 12);
        break;
    case BSON_TYPE_BOOL:
        ks_byte(k, bson_iter_bool(it) ? KS_BOOL_TRUE : KS_BOOL_FALSE);
        break;
    case BSON_TYPE_DATE_TIME:
        ks_byte(k, KS_DATE);
        ks_be64(k, (uint64_t)bson_iter_date_time(it) ^ (1ull << 63));
        break;
    case BSON_TYPE_TIMESTAMP: {
        uint32_t t, i;
        bson_iter_timestamp(it, &t, &i);
        ks_byte(k, KS_TIMESTAMP);
        ks_be64(k, OPLOG_TS(t, i));
        break;
    }
    default:
        ks_byte(k, ks_generic_ctype(bson_iter_type(it), it));
        break;
    }
}

static void ks_doc(ks_buf *k, const bson_t *doc)
{
    bson_iter_t it;
    bson_iter_init(&it, doc);
    while (bson_iter_next(&it)) {
        ks_byte(k, ks_generic_ctype(bson_iter_type(&it), &it));
        ks_cstring(k, bson_iter_key(&it), bson_iter_key_len(&it));
        ks_value(k, &it);
    }
    ks_byte(k, 0);
}

/* resume_token.cpp ResumeToken(const ResumeTokenData&): clusterTime, version, tokenType, txnOpIndex, fromInvalidate,
 * the UUID or (v2) an explicit null, the eventIdentifier (absent on a high-water mark), fragmentNum when split (each
 * number an int32: appendNumber); _data is the uppercase hex of the KeyString (hexblob::encode), and _typeBits the
 * TypeBits when any bit is set (BinData subtype 0), in their encoding: one byte when it holds all the bits and its
 * high bit is clear, else a size byte 0x80 | n and n bytes (key_string.h TypeBits::getBuffer). */
char *cs_token_make(uint64_t ts, int type, uint32_t txn_op, bool from_invalidate, const uint8_t *uuid,
                    const bson_t *event_id, int32_t fragment, uint8_t *tb, size_t *tblen)
{
    ks_buf k;
    memset(&k, 0, sizeof k);
    ks_byte(&k, KS_TIMESTAMP);
    ks_be64(&k, ts);
    ks_int(&k, 2); /* version 2: the only version a 7.0 server makes (docs/change_streams.md) */
    ks_tnum(&k, 0);
    ks_int(&k, type);
    ks_tnum(&k, 0);
    ks_int(&k, txn_op);
    ks_tnum(&k, 0);
    ks_byte(&k, from_invalidate ? KS_BOOL_TRUE : KS_BOOL_FALSE);
    if (uuid) {
        ks_byte(&k, KS_BINDATA);
        ks_byte(&k, 16);
        ks_byte(&k, BSON_SUBTYPE_UUID);
        ks_put(&k, uuid, 16);
    } else {
        ks_byte(&k, KS_NULL);
    }
    if (event_id) {
        ks_byte(&k, KS_OBJECT);
        ks_doc(&k, event_id);
    }
    if (fragment >= 0) {
        ks_int(&k, fragment);
        ks_tnum(&k, 0);
    }
    ks_byte(&k, KS_END);
    static const char hex[] = "0123456789ABCDEF";
    char *s = bson_malloc(k.len * 2 + 1);
    for (size_t i = 0; i < k.len; i++) {
        s[2 * i] = hex[k.p[i] >> 4];
        s[2 * i + 1] = hex[k.p[i] & 15];
    }
    s[k.len * 2] = 0;
    free(k.p);
    if (tblen) {
        *tblen = 0;
        if (k.tb_nonzero) {
            size_t n = (k.tbits + 7) / 8;
            if (n == 1 && !(k.tb[0] & 0x80)) {
                tb[0] = k.tb[0];
                *tblen = 1;
            } else {
                tb[0] = (uint8_t)(0x80 | n);
                memcpy(tb + 1, k.tb, n);
                *tblen = n + 1;
            }
        }
    }
    return s;
}

char *cs_token_hex(uint64_t ts, int type, uint32_t txn_op, bool from_invalidate, const uint8_t *uuid,
                   const bson_t *event_id, int32_t fragment)
{
    return cs_token_make(ts, type, txn_op, from_invalidate, uuid, event_id, fragment, NULL, NULL);
}

/* A token document {_data[, _typeBits]} under key. */
static void append_token(bson_t *b, const char *key, const char *hex, const uint8_t *tb, size_t tblen)
{
    bson_t id;
    BSON_APPEND_DOCUMENT_BEGIN(b, key, &id);
    BSON_APPEND_UTF8(&id, "_data", hex);
    if (tblen)
        bson_append_binary(&id, "_typeBits", -1, BSON_SUBTYPE_BINARY, tb, (uint32_t)tblen);
    bson_append_document_end(b, &id);
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

static bool ks_read_int(const uint8_t *b, size_t len, size_t *pos, int64_t *v)
{
    if (*pos >= len)
        return false;
    uint8_t c = b[(*pos)++];
    if (c == KS_NUM_ZERO) {
        *v = 0;
        return true;
    }
    if (c < KS_NUM_POS1 || c > KS_NUM_POS1 + 7)
        return false;
    int n = c - KS_NUM_POS1 + 1;
    if (*pos + (size_t)n > len)
        return false;
    uint64_t x = 0;
    for (int i = 0; i < n; i++)
        x = x << 8 | b[(*pos)++];
    *v = (int64_t)(x >> 1);
    return true;
}

bool cs_token_parse(const char *hex, cs_token_info *out)
{
    memset(out, 0, sizeof *out);
    out->fragment = -1;
    size_t hl = strlen(hex);
    if (hl % 2 || hl < 20)
        return false;
    size_t len = hl / 2;
    uint8_t *b = malloc(len);
    if (!b)
        abort();
    for (size_t i = 0; i < len; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(b);
            return false;
        }
        b[i] = (uint8_t)(hi << 4 | lo);
    }
    size_t pos = 0;
    int64_t version, type, op;
    bool ok = len >= 9 && b[0] == KS_TIMESTAMP;
    if (ok) {
        for (int i = 1; i <= 8; i++)
            out->ts = out->ts << 8 | b[i];
        pos = 9;
        ok = ks_read_int(b, len, &pos, &version) && version == 2 && ks_read_int(b, len, &pos, &type) &&
             (type == CS_TOKEN_EVENT || type == CS_TOKEN_HWM) && ks_read_int(b, len, &pos, &op) && pos < len &&
             (b[pos] == KS_BOOL_FALSE || b[pos] == KS_BOOL_TRUE);
    }
    if (ok) {
        out->version = (int)version;
        out->type = (int)type;
        out->txn_op = (uint32_t)op;
        out->from_invalidate = b[pos++] == KS_BOOL_TRUE;
        if (pos < len && b[pos] == KS_NULL) {
            pos++;
        } else if (pos + 19 <= len && b[pos] == KS_BINDATA && b[pos + 1] == 16 && b[pos + 2] == BSON_SUBTYPE_UUID) {
            out->has_uuid = true;
            memcpy(out->uuid, b + pos + 3, 16);
            pos += 19;
        } else {
            ok = false;
        }
    }
    if (ok && b[len - 1] != KS_END)
        ok = false;
    free(b);
    return ok;
}

/* ================================================================ $match on events */

/* mongosim's find filters only know _id, so events get a small matcher of their own: equality on dotted paths
 * (an array matches when an element equals), $eq $ne $gt $gte $lt $lte $in $nin $exists, $and $or $nor. Anything
 * else is refused when the stream opens (2 BadValue), never silently ignored. */

static bool path_values(const bson_t *doc, const char *path, bson_iter_t *out)
{
    bson_iter_t it;
    return bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, path, out);
}

static bool value_eq(const bson_iter_t *a, const bson_iter_t *b)
{
    return update_compare_iters(a, b) == 0;
}

static bool cmp_op(const char *op, const bson_iter_t *field, const bson_iter_t *arg)
{
    if (!strcmp(op, "$eq"))
        return value_eq(field, arg);
    int rf = update_type_rank(bson_iter_type(field)), ra = update_type_rank(bson_iter_type(arg));
    if (rf != ra) /* comparisons are within a type bracket (query semantics) */
        return false;
    int c = update_compare_iters(field, arg);
    if (!strcmp(op, "$gt"))
        return c > 0;
    if (!strcmp(op, "$gte"))
        return c >= 0;
    if (!strcmp(op, "$lt"))
        return c < 0;
    return c <= 0; /* $lte */
}

/* True when the value at field (or, for an array, one of its elements) satisfies pred. */
static bool any_value(const bson_iter_t *field, const char *op, const bson_iter_t *arg)
{
    if (cmp_op(op, field, arg))
        return true;
    if (BSON_ITER_HOLDS_ARRAY(field)) {
        bson_iter_t a;
        bson_iter_recurse(field, &a);
        while (bson_iter_next(&a))
            if (cmp_op(op, &a, arg))
                return true;
    }
    return false;
}

static bool in_list(bool found, const bson_iter_t *field, const bson_iter_t *arr)
{
    bson_iter_t a;
    bson_iter_recurse(arr, &a);
    while (bson_iter_next(&a)) {
        if (!found) {
            if (BSON_ITER_HOLDS_NULL(&a))
                return true;
            continue;
        }
        if (any_value(field, "$eq", &a))
            return true;
    }
    return false;
}

static int match_doc(const bson_t *doc, const bson_t *filter); /* 1 match, 0 no, -1 unsupported */

static int match_field(const bson_t *doc, const char *path, const bson_iter_t *cond)
{
    bson_iter_t field;
    bool found = path_values(doc, path, &field);
    bool ops = false;
    if (BSON_ITER_HOLDS_DOCUMENT(cond)) {
        bson_iter_t c;
        bson_iter_recurse(cond, &c);
        ops = bson_iter_next(&c) && bson_iter_key(&c)[0] == '$';
    }
    if (!ops) {
        if (!found)
            return BSON_ITER_HOLDS_NULL(cond) ? 1 : 0;
        return any_value(&field, "$eq", cond) ? 1 : 0;
    }
    bson_iter_t c;
    int all_true = 1;
    bson_iter_recurse(cond, &c);
    while (bson_iter_next(&c)) {
        const char *op = bson_iter_key(&c);
        bool r;
        if (!strcmp(op, "$eq") || !strcmp(op, "$gt") || !strcmp(op, "$gte") || !strcmp(op, "$lt") ||
            !strcmp(op, "$lte")) {
            r = found ? any_value(&field, op, &c) : (!strcmp(op, "$eq") && BSON_ITER_HOLDS_NULL(&c));
        } else if (!strcmp(op, "$ne")) {
            r = found ? !any_value(&field, "$eq", &c) : !BSON_ITER_HOLDS_NULL(&c);
        } else if (!strcmp(op, "$in") && BSON_ITER_HOLDS_ARRAY(&c)) {
            r = in_list(found, &field, &c);
        } else if (!strcmp(op, "$nin") && BSON_ITER_HOLDS_ARRAY(&c)) {
            r = !in_list(found, &field, &c);
        } else if (!strcmp(op, "$exists")) {
            r = found == bson_iter_as_bool(&c);
        } else {
            return -1;
        }
        all_true &= r ? 1 : 0;
    }
    return all_true;
}

static int match_doc(const bson_t *doc, const bson_t *filter)
{
    bson_iter_t it;
    int all_true = 1; /* every clause is read to the end, so an unsupported one is refused whatever the data */
    bson_iter_init(&it, filter);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        int r;
        if (!strcmp(k, "$and") || !strcmp(k, "$or") || !strcmp(k, "$nor")) {
            if (!BSON_ITER_HOLDS_ARRAY(&it))
                return -1;
            bson_iter_t a;
            bson_iter_recurse(&it, &a);
            int any = 0, all = 1;
            while (bson_iter_next(&a)) {
                bson_t sub;
                uint32_t len;
                const uint8_t *data;
                if (!BSON_ITER_HOLDS_DOCUMENT(&a))
                    return -1;
                bson_iter_document(&a, &len, &data);
                bson_init_static(&sub, data, len);
                int m = match_doc(doc, &sub);
                if (m < 0)
                    return -1;
                any |= m;
                all &= m;
            }
            r = !strcmp(k, "$and") ? all : !strcmp(k, "$or") ? any : !any;
        } else if (k[0] == '$') {
            return -1;
        } else {
            r = match_field(doc, k, &it);
            if (r < 0)
                return -1;
        }
        all_true &= r;
    }
    return all_true;
}

/* ================================================================ the stream */

enum { CS_COLL, CS_DB, CS_CLUSTER };
enum { FD_DEFAULT, FD_LOOKUP, FD_WHEN, FD_REQUIRED };
enum { FB_OFF, FB_WHEN, FB_REQUIRED };

typedef struct {
    uint64_t ts;
    uint32_t op;
    bool inv;
    int32_t frag; /* -1: whole event */
} cs_pos;

static int pos_cmp(const cs_pos *a, const cs_pos *b)
{
    if (a->ts != b->ts)
        return a->ts < b->ts ? -1 : 1;
    if (a->op != b->op)
        return a->op < b->op ? -1 : 1;
    if (a->inv != b->inv)
        return a->inv ? 1 : -1;
    if (a->frag != b->frag)
        return a->frag < b->frag ? -1 : 1;
    return 0;
}

typedef struct {
    cs_pos pos;
    bson_t *doc;                 /* the whole event, _id first (heap: a bson_t may not move) */
    char *hex;                   /* its token's _data */
    uint8_t tb[CS_TYPEBITS_MAX]; /* and _typeBits (tblen 0: none) */
    size_t tblen;
    bool closes; /* an invalidate */
} cs_event;

typedef struct {
    int kind; /* 0 $match, 1 $project */
    bson_t
        *spec; /* on the heap: stages live in an array, and a bson_t wants a 128-byte alignment malloc does not give */
    sim_projection *proj;
} cs_stage;

struct cs_stream {
    int kind;
    char db[128], coll[256];
    int full_doc, before;
    bool expanded, raw_update, split;
    cs_stage *stages;
    size_t nstages;
    uint64_t scan_seq;
    uint64_t start_ts; /* the oplog scan starts at this ts (inclusive) */
    cs_pos last;       /* events at or before it are not returned again */
    bool have_last;
    bool must_find; /* resumeAfter/startAfter an event: it must be the first event at or after its position */
    char *must_hex; /* the token's _data without its fragmentNum */
    cs_pos must_pos;
    char *pbrt_hex; /* the post-batch resume token */
    uint8_t pbrt_tb[CS_TYPEBITS_MAX];
    size_t pbrt_tblen;
    uint64_t pbrt_ts;
    bool closed;
    uint64_t cache_seq; /* the entry whose events are cached (UINT64_MAX: none) */
    cs_event *cache;
    size_t ncache;
};

static void cs_error_set(cs_error *err, int code, bool nonresumable, const char *fmt, ...) BSON_GNUC_PRINTF(4, 5);
static void cs_error_set(cs_error *err, int code, bool nonresumable, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->code = code;
    err->nonresumable = nonresumable;
}

static void cache_clear(cs_stream *s)
{
    for (size_t i = 0; i < s->ncache; i++) {
        bson_destroy(s->cache[i].doc);
        bson_free(s->cache[i].hex);
    }
    free(s->cache);
    s->cache = NULL;
    s->ncache = 0;
    s->cache_seq = UINT64_MAX;
}

void cs_close(cs_stream *s)
{
    if (!s)
        return;
    cache_clear(s);
    for (size_t i = 0; i < s->nstages; i++) {
        bson_destroy(s->stages[i].spec);
        projection_free(s->stages[i].proj);
    }
    free(s->stages);
    bson_free(s->must_hex);
    bson_free(s->pbrt_hex);
    free(s);
}

static void set_pbrt_hwm(cs_stream *s, uint64_t ts)
{
    bson_free(s->pbrt_hex);
    s->pbrt_hex = cs_token_hex(ts, CS_TOKEN_HWM, 0, false, NULL, NULL, -1);
    s->pbrt_tblen = 0; /* a high-water mark's numbers are all int32: no type bits */
    s->pbrt_ts = ts;
}

static bool get_doc(const bson_iter_t *it, bson_t *out)
{
    uint32_t len;
    const uint8_t *data;
    if (!BSON_ITER_HOLDS_DOCUMENT(it) && !BSON_ITER_HOLDS_ARRAY(it))
        return false;
    if (BSON_ITER_HOLDS_DOCUMENT(it))
        bson_iter_document(it, &len, &data);
    else
        bson_iter_array(it, &len, &data);
    return bson_init_static(out, data, len);
}

/* A resume token document {_data: "<hex>"[, _typeBits]}. */
static bool token_arg(const bson_iter_t *it, const char **hex, cs_token_info *info, uint8_t *tb, size_t *tblen,
                      cs_error *err)
{
    bson_t tok;
    bson_iter_t d;
    if (!get_doc(it, &tok) || !bson_iter_init_find(&d, &tok, "_data") || !BSON_ITER_HOLDS_UTF8(&d)) {
        /* resume_token.cpp ResumeToken(const Document&): 40647 */
        cs_error_set(err, 40647, false, "Bad resume token: _data of missing or of wrong type. Expected string");
        return false;
    }
    *hex = bson_iter_utf8(&d, NULL);
    *tblen = 0;
    if (bson_iter_init_find(&d, &tok, "_typeBits")) {
        bson_subtype_t st;
        uint32_t len;
        const uint8_t *data;
        if (!BSON_ITER_HOLDS_BINARY(&d) || (bson_iter_binary(&d, &st, &len, &data), st != BSON_SUBTYPE_BINARY) ||
            len > CS_TYPEBITS_MAX) {
            /* resume_token.cpp: 40648 "Bad resume token: _typeBits of wrong type" */
            cs_error_set(err, 40648, false, "Bad resume token: _typeBits of wrong type");
            return false;
        }
        memcpy(tb, data, len);
        *tblen = len;
    }
    if (!cs_token_parse(*hex, info)) {
        /* resume_token.cpp getData(): "resume token string was not a valid hex string" (FailedToParse) and the
         * KeyString checks after it */
        cs_error_set(err, 9, false, "resume token string was not a valid hex string");
        return false;
    }
    return true;
}

static bool parse_enum(const bson_iter_t *it, const char *field, const char *const *names, int n, int *out,
                       cs_error *err)
{
    if (!BSON_ITER_HOLDS_UTF8(it)) {
        cs_error_set(err, 14, false, "BSON field '$changeStream.%s' is the wrong type '%s', expected type 'string'",
                     field, sim_type_name(bson_iter_type(it)));
        return false;
    }
    const char *v = bson_iter_utf8(it, NULL);
    for (int i = 0; i < n; i++) {
        if (!strcmp(v, names[i])) {
            *out = i;
            return true;
        }
    }
    /* IDL enum parsing: BadValue "Enumeration value '...' for field '...' is not a valid value." */
    cs_error_set(err, 2, false, "Enumeration value '%s' for field '$changeStream.%s' is not a valid value.", v, field);
    return false;
}

cs_stream *cs_open(const cs_env *env, const char *db, const char *coll, const bson_t *pipeline, cs_error *err)
{
    memset(err, 0, sizeof *err);
    cs_stream *s = calloc(1, sizeof *s);
    if (!s)
        abort();
    s->cache_seq = UINT64_MAX;
    snprintf(s->db, sizeof s->db, "%s", db);
    s->kind = coll ? CS_COLL : CS_DB;
    if (coll)
        snprintf(s->coll, sizeof s->coll, "%s", coll);
    bson_iter_t st;
    bson_iter_init(&st, pipeline);
    bson_iter_next(&st);
    bson_t first, spec;
    bson_iter_t sp;
    if (!get_doc(&st, &first) || !bson_iter_init_find(&sp, &first, "$changeStream") || !get_doc(&sp, &spec) ||
        !BSON_ITER_HOLDS_DOCUMENT(&sp)) {
        cs_error_set(err, 50808, false, "$changeStream stage expects a document as argument");
        goto fail;
    }
    const char *resume_hex = NULL;
    cs_token_info rt;
    int starts = 0;
    bool start_after = false, have_sat = false, all_cluster = false, config_ok = false, have_ra = false,
         have_sa = false;
    uint64_t sat = 0;
    bson_iter_t o;
    bson_iter_init(&o, &spec);
    while (bson_iter_next(&o)) {
        const char *k = bson_iter_key(&o);
        if (!strcmp(k, "resumeAfter") || !strcmp(k, "startAfter")) {
            if (!token_arg(&o, &resume_hex, &rt, s->pbrt_tb, &s->pbrt_tblen, err))
                goto fail;
            start_after = !strcmp(k, "startAfter");
            have_ra |= !start_after;
            have_sa |= start_after;
            starts++;
        } else if (!strcmp(k, "startAtOperationTime")) {
            if (!BSON_ITER_HOLDS_TIMESTAMP(&o)) {
                cs_error_set(err, 14, false,
                             "BSON field '$changeStream.startAtOperationTime' is the wrong type, expected type "
                             "'timestamp'");
                goto fail;
            }
            uint32_t t, i;
            bson_iter_timestamp(&o, &t, &i);
            sat = OPLOG_TS(t, i);
            have_sat = true;
            starts++;
        } else if (!strcmp(k, "fullDocument")) {
            static const char *const n[] = {"default", "updateLookup", "whenAvailable", "required"};
            if (!parse_enum(&o, k, n, 4, &s->full_doc, err))
                goto fail;
        } else if (!strcmp(k, "fullDocumentBeforeChange")) {
            static const char *const n[] = {"off", "whenAvailable", "required"};
            if (!parse_enum(&o, k, n, 3, &s->before, err))
                goto fail;
        } else if (!strcmp(k, "showExpandedEvents")) {
            s->expanded = bson_iter_as_bool(&o);
        } else if (!strcmp(k, "showRawUpdateDescription")) {
            s->raw_update = bson_iter_as_bool(&o);
        } else if (!strcmp(k, "allChangesForCluster")) {
            all_cluster = bson_iter_as_bool(&o);
        } else if (!strcmp(k, "allowToRunOnConfigDB")) {
            config_ok = bson_iter_as_bool(&o);
        } else if (!strcmp(k, "showSystemEvents") || !strcmp(k, "showMigrationEvents") ||
                   !strcmp(k, "allowToRunOnConfigDB") || !strcmp(k, "allowToRunOnSystemNS") ||
                   !strcmp(k, "showCommitTimestamp") || !strcmp(k, "matchCollectionUUIDForUpdateLookup")) {
            /* accepted (document_source_change_stream.idl); mongosim logs no system or migration events a stream
             * would show */
        } else {
            /* IDL strict parsing: 40415 "BSON field '$changeStream.x' is an unknown field." */
            cs_error_set(err, 40415, false, "BSON field '$changeStream.%s' is an unknown field.", k);
            goto fail;
        }
    }
    /* document_source_change_stream.cpp, assertIsLegalSpecification: the namespace, then the start options. */
    if (all_cluster && (coll || strcmp(db, "admin") != 0)) {
        cs_error_set(err, 72 /* InvalidOptions */, false,
                     "A $changeStream with 'allChangesForCluster:true' may only be opened on the 'admin' database, "
                     "and with no collection name; found %s.%s",
                     db, coll ? coll : "$cmd.aggregate");
        goto fail;
    }
    if (all_cluster) {
        s->kind = CS_CLUSTER;
    } else if (!strcmp(db, "admin") || !strcmp(db, "local") || (!strcmp(db, "config") && !config_ok)) {
        cs_error_set(err, 73, false, "$changeStream may not be opened on the internal %s database", db);
        goto fail;
    }
    if (coll && !strncmp(coll, "system.", 7)) {
        cs_error_set(err, 73, false, "$changeStream may not be opened on the internal %s.%s collection", db, coll);
        goto fail;
    }
    if (have_ra && have_sa) {
        cs_error_set(err, 50865, false, "Do not specify both 'resumeAfter' and 'startAfter' in a $changeStream stage");
        goto fail;
    }
    if (starts > 1) {
        cs_error_set(err, 40674, false, "Only one type of resume option is allowed, but multiple were found");
        goto fail;
    }
    if (resume_hex && rt.type == CS_TOKEN_EVENT && !rt.has_uuid && s->kind == CS_COLL) {
        cs_error_set(err, 260 /* InvalidResumeToken */, false,
                     "Attempted to resume a single-collection stream, but the resume token does not include a UUID");
        goto fail;
    }
    /* The stages after $changeStream. */
    while (bson_iter_next(&st)) {
        bson_t stage;
        bson_iter_t sk;
        if (!get_doc(&st, &stage) || !bson_iter_init(&sk, &stage) || !bson_iter_next(&sk)) {
            cs_error_set(err, 40323, false, "A pipeline stage specification object must contain exactly one field.");
            goto fail;
        }
        const char *name = bson_iter_key(&sk);
        if (env->refuse_stage && !strcmp(name, env->refuse_stage)) {
            /* A server that does not know the stage (before 6.0.9 and 7.0 for $changeStreamSplitLargeEvent):
             * document_source.cpp, DocumentSource::parse: 40324 "Unrecognized pipeline stage name". */
            cs_error_set(err, 40324, false, "Unrecognized pipeline stage name: '%s'", name);
            goto fail;
        }
        if (!strcmp(name, "$changeStreamSplitLargeEvent")) {
            bson_iter_t rest = st;
            if (bson_iter_next(&rest)) {
                /* change_stream_split_event_helpers / document_source_change_stream_split_large_event.cpp */
                cs_error_set(err, 7182802, false,
                             "$changeStreamSplitLargeEvent must be the last stage in the pipeline");
                goto fail;
            }
            s->split = true;
            continue;
        }
        cs_stage *ns = realloc(s->stages, (s->nstages + 1) * sizeof *ns);
        if (!ns)
            abort();
        s->stages = ns;
        cs_stage *cst = &s->stages[s->nstages];
        memset(cst, 0, sizeof *cst);
        bson_t arg;
        if (!strcmp(name, "$match") && get_doc(&sk, &arg) && BSON_ITER_HOLDS_DOCUMENT(&sk)) {
            cst->spec = bson_copy(&arg);
            s->nstages++;
            bson_t empty = BSON_INITIALIZER;
            int m = match_doc(&empty, cst->spec);
            bson_destroy(&empty);
            if (m < 0) {
                cs_error_set(err, 2, false,
                             "mongosim's change-stream $match supports equality, $eq $ne $gt $gte $lt $lte $in $nin "
                             "$exists, $and $or $nor");
                goto fail;
            }
        } else if ((!strcmp(name, "$project")) && get_doc(&sk, &arg) && BSON_ITER_HOLDS_DOCUMENT(&sk)) {
            sim_proj_error pe;
            cst->spec = bson_copy(&arg);
            cst->kind = 1;
            s->nstages++;
            if (!projection_parse(cst->spec, &cst->proj, &pe)) {
                cs_error_set(err, pe.code, false, "%s", pe.message);
                goto fail;
            }
        } else {
            /* change streams allow only these stages after $changeStream (A1: $match $project $addFields
             * $replaceRoot $replaceWith $redact $set $unset); mongosim runs $match and $project. */
            cs_error_set(err, 2, false,
                         "mongosim's change streams run only $match and $project after $changeStream, "
                         "and $changeStreamSplitLargeEvent last");
            goto fail;
        }
    }
    /* The start. */
    uint64_t first_ts = oplog_count(env->oplog) ? oplog_entry_ts(env->oplog, oplog_first_seq(env->oplog)) : 0;
    uint64_t start_ts;
    if (resume_hex) {
        if (rt.type == CS_TOKEN_EVENT && rt.from_invalidate && !start_after) {
            /* document_source_change_stream.cpp: resumeAfter an invalidate is refused; startAfter it works. */
            cs_error_set(err, 260 /* InvalidResumeToken */, false,
                         "Attempting to resume a change stream using 'resumeAfter' is not allowed from an "
                         "invalidate notification");
            goto fail;
        }
        start_ts = rt.ts;
        s->pbrt_hex = bson_strdup(resume_hex);
        s->pbrt_ts = rt.ts;
        if (rt.type == CS_TOKEN_EVENT) {
            s->must_find = true;
            s->must_pos = (cs_pos){rt.ts, rt.txn_op, rt.from_invalidate, rt.fragment};
            s->last = s->must_pos;
            s->have_last = true;
            s->must_hex = bson_strdup(resume_hex);
        } else {
            s->last = (cs_pos){rt.ts, 0, false, -1};
            s->have_last = false; /* a high-water mark: every event at its ts or later */
        }
    } else if (have_sat) {
        start_ts = sat;
        set_pbrt_hwm(s, sat);
    } else {
        /* No start given: one tick after the last applied entry, "to ensure that the stream does not return it"
         * (document_source_change_stream.cpp, getStartTimeForNewStream: getMyLastAppliedOpTime().addTicks(1)). */
        uint64_t last = oplog_last_ts(env->oplog);
        start_ts = last + 1;
        set_pbrt_hwm(s, start_ts);
    }
    /* document_source_change_stream_check_resumability.cpp: the oplog must still hold the start point, else
     * ChangeStreamHistoryLost (286). */
    if ((resume_hex || have_sat) && oplog_count(env->oplog) && first_ts > start_ts) {
        cs_error_set(err, 286, true,
                     "Resume of change stream was not possible, as the resume point may no longer be in the oplog.");
        goto fail;
    }
    s->scan_seq = oplog_seek(env->oplog, start_ts, true);
    s->start_ts = start_ts;
    if (!s->have_last && !s->must_find) {
        s->last = (cs_pos){start_ts, 0, false, -1};
        s->have_last = false;
    }
    return s;
fail:
    cs_close(s);
    return NULL;
}

void cs_merge_part(cs_stream *s)
{
    /* document_source_change_stream.cpp (buildPipeline): a shard's part of a merged stream (needsMerge) checks only
     * that its oplog still holds the resume point (DocumentSourceChangeStreamCheckResumability) and passes the
     * resumed event itself on; the merging mongos runs DocumentSourceChangeStreamEnsureResumeTokenPresent, which
     * looks for the token's event among all shards' events and swallows it. */
    if (!s->must_find)
        return;
    s->must_find = false;
    s->last = (cs_pos){s->must_pos.ts, 0, false, -1};
    s->have_last = false;
}

/* ================================================================ events from oplog entries */

typedef struct {
    cs_stream *s;
    const cs_env *env;
    uint64_t ts;
    bool has_wall;
    int64_t wall;
    bson_iter_t lsid; /* a transaction's (lsid, txnNumber), or has_txn false */
    bool has_txn;
    int64_t txn_number;
    cs_error *err;
    bool failed;
    uint8_t tb[CS_TYPEBITS_MAX]; /* the _typeBits of the token made last */
    size_t tblen;
    uint64_t img_ts;    /* the ts of the entry holding the op being read, */
    uint32_t img_index; /* and its index in that entry's applyOps: the images' key (images.h) */
} ev_ctx;

static bool find_path(bson_iter_t *tmp, const bson_t *doc, const char *path, bson_iter_t *out)
{
    return bson_iter_init(tmp, doc) && bson_iter_find_descendant(tmp, path, out);
}

static void cache_push(cs_stream *s, cs_event *e)
{
    cs_event *n = realloc(s->cache, (s->ncache + 1) * sizeof *n);
    if (!n)
        abort();
    s->cache = n;
    s->cache[s->ncache++] = *e;
}

static bool split_ns(const char *ns, char *db, size_t dbsz, const char **coll)
{
    const char *dot = strchr(ns, '.');
    if (!dot || (size_t)(dot - ns) >= dbsz)
        return false;
    memcpy(db, ns, (size_t)(dot - ns));
    db[dot - ns] = 0;
    *coll = dot + 1;
    return true;
}

/* Which namespaces a stream sees. change_stream_filter_helpers.cpp: never the internal databases (admin, config,
 * local) nor system collections (unless showSystemEvents, which mongosim's streams do not show). */
static bool ns_wanted(const cs_stream *s, const char *db, const char *coll)
{
    if (!strcmp(db, "admin") || !strcmp(db, "config") || !strcmp(db, "local"))
        return false;
    if (coll && !strncmp(coll, "system.", 7))
        return false;
    if (s->kind == CS_CLUSTER)
        return true;
    if (strcmp(db, s->db) != 0)
        return false;
    return s->kind == CS_DB || (coll && !strcmp(coll, s->coll));
}

static void append_ns(bson_t *b, const char *key, const char *db, const char *coll)
{
    bson_t ns;
    BSON_APPEND_DOCUMENT_BEGIN(b, key, &ns);
    BSON_APPEND_UTF8(&ns, "db", db);
    if (coll)
        BSON_APPEND_UTF8(&ns, "coll", coll);
    bson_append_document_end(b, &ns);
}

/* ---- updateDescription (change_stream_document_diff_parser.cpp) ---- */

typedef struct {
    const char *name;
    bool index; /* an array index, not a field name */
} path_part;

typedef struct {
    bson_t updated, removed, truncated, disamb;
    uint32_t nremoved, ntruncated;
    path_part parts[130];
    int depth;
} diff_out;

/* isNumericPathComponentStrict (field_ref.cpp): digits only, and no leading zero unless it is "0". */
static bool numeric_strict(const char *p)
{
    if (!*p || (p[0] == '0' && p[1]))
        return false;
    for (; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return true;
}

/* The current path (parts[0..depth)) joined with dots; *ambiguous when a field name in it, other than an array
 * index, contains a dot or (past the first part) is numeric: DeltaUpdateDescriptionBuilder::_appendFieldToPath. */
static void path_join(const diff_out *d, char *out, size_t sz, bool *ambiguous)
{
    size_t n = 0;
    *ambiguous = false;
    out[0] = 0;
    for (int i = 0; i < d->depth; i++) {
        const path_part *p = &d->parts[i];
        if (!p->index && ((i > 0 && numeric_strict(p->name)) || strchr(p->name, '.')))
            *ambiguous = true;
        n += (size_t)snprintf(out + n, n < sz ? sz - n : 0, "%s%s", i ? "." : "", p->name);
    }
}

/* disambiguatedPaths[path] = the parts, array indices as ints, field names as strings. */
static void add_disamb(diff_out *d, const char *dotted)
{
    bson_t arr;
    char kb[16];
    const char *k;
    BSON_APPEND_ARRAY_BEGIN(&d->disamb, dotted, &arr);
    for (int i = 0; i < d->depth; i++) {
        bson_uint32_to_string((uint32_t)i, &k, kb, sizeof kb);
        if (d->parts[i].index)
            BSON_APPEND_INT32(&arr, k, atoi(d->parts[i].name));
        else
            BSON_APPEND_UTF8(&arr, k, d->parts[i].name);
    }
    bson_append_array_end(&d->disamb, &arr);
}

static bool path_push(diff_out *d, const char *name, bool index)
{
    if (d->depth >= 128)
        return false;
    d->parts[d->depth++] = (path_part){name, index};
    return true;
}

static void diff_updated(diff_out *d, const char *name, bool index, const bson_iter_t *v)
{
    char path[4096];
    bool amb;
    if (!path_push(d, name, index))
        return;
    path_join(d, path, sizeof path, &amb);
    bson_append_iter(&d->updated, path, -1, v);
    if (amb)
        add_disamb(d, path);
    d->depth--;
}

static void diff_removed(diff_out *d, const char *name)
{
    char path[4096], kb[16];
    const char *key;
    bool amb;
    if (!path_push(d, name, false))
        return;
    path_join(d, path, sizeof path, &amb);
    bson_uint32_to_string(d->nremoved++, &key, kb, sizeof kb);
    BSON_APPEND_UTF8(&d->removed, key, path);
    if (amb)
        add_disamb(d, path);
    d->depth--;
}

static void diff_walk(diff_out *d, const bson_t *diff, bool array);

static void diff_sub(diff_out *d, const char *name, bool index, const bson_iter_t *v)
{
    bson_t sub;
    if (!get_doc(v, &sub) || !path_push(d, name, index))
        return;
    bson_iter_t a;
    bool arr = bson_iter_init_find(&a, &sub, "a") && bson_iter_as_bool(&a);
    diff_walk(d, &sub, arr);
    d->depth--;
}

/* A $v:2 document diff, as buildUpdateDescriptionWithDeltaOplog reads it: the u (updated) then i (inserted) fields
 * into updatedFields, the d fields into removedFields, then each s<field> sub-diff; an array diff (a: true): its
 * new length l into truncatedArrays, then u<N> ("arr.N" into updatedFields) and s<N> sub-diffs in their order.
 * Binary diffs (b) of time-series buckets go into updatedFields as their raw {o, d} objects. */
static void diff_walk(diff_out *d, const bson_t *diff, bool array)
{
    bson_iter_t it, f;
    if (array) {
        char path[4096], kb[16];
        const char *key;
        bool amb;
        if (bson_iter_init_find(&it, diff, "l")) {
            path_join(d, path, sizeof path, &amb);
            bson_t t;
            bson_uint32_to_string(d->ntruncated++, &key, kb, sizeof kb);
            BSON_APPEND_DOCUMENT_BEGIN(&d->truncated, key, &t);
            BSON_APPEND_UTF8(&t, "field", path);
            BSON_APPEND_INT32(&t, "newSize", (int32_t)bson_iter_as_int64(&it));
            bson_append_document_end(&d->truncated, &t);
            if (amb)
                add_disamb(d, path);
        }
        bson_iter_init(&it, diff);
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (k[0] == 'u' && k[1])
                diff_updated(d, k + 1, true, &it);
            else if (k[0] == 's' && k[1])
                diff_sub(d, k + 1, true, &it);
        }
        return;
    }
    static const char *const upd[] = {"u", "i"};
    for (int pass = 0; pass < 2; pass++) {
        if (bson_iter_init_find(&it, diff, upd[pass]) && BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &f))
            while (bson_iter_next(&f))
                diff_updated(d, bson_iter_key(&f), false, &f);
    }
    /* A binary diff (b: time-series buckets) is listed in updatedFields as its raw {o, d} object
     * (change_stream_document_diff_parser.cpp: the b section goes where u and i go). */
    if (bson_iter_init_find(&it, diff, "b") && BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &f))
        while (bson_iter_next(&f))
            diff_updated(d, bson_iter_key(&f), false, &f);
    if (bson_iter_init_find(&it, diff, "d") && BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &f))
        while (bson_iter_next(&f))
            diff_removed(d, bson_iter_key(&f));
    bson_iter_init(&it, diff);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (k[0] == 's' && k[1])
            diff_sub(d, k + 1, false, &it);
    }
}

/* The updateDescription of an update's `o`: a $v:2 diff, or a 4.4 $v:1 {$set, $unset}. */
static void update_description(const bson_t *o, bool expanded, bson_t *out)
{
    diff_out d;
    memset(&d, 0, sizeof d);
    bson_init(&d.updated);
    bson_init(&d.removed);
    bson_init(&d.truncated);
    bson_init(&d.disamb);
    bson_iter_t it;
    bson_t diff;
    if (bson_iter_init_find(&it, o, "diff") && get_doc(&it, &diff)) {
        diff_walk(&d, &diff, false);
    } else {
        if (bson_iter_init_find(&it, o, "$set") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_t f;
            bson_iter_recurse(&it, &f);
            while (bson_iter_next(&f))
                bson_append_iter(&d.updated, bson_iter_key(&f), -1, &f);
        }
        if (bson_iter_init_find(&it, o, "$unset") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_t f;
            bson_iter_recurse(&it, &f);
            while (bson_iter_next(&f)) {
                char kb[16];
                const char *key;
                bson_uint32_to_string(d.nremoved++, &key, kb, sizeof kb);
                BSON_APPEND_UTF8(&d.removed, key, bson_iter_key(&f));
            }
        }
    }
    BSON_APPEND_DOCUMENT(out, "updatedFields", &d.updated);
    BSON_APPEND_ARRAY(out, "removedFields", &d.removed);
    BSON_APPEND_ARRAY(out, "truncatedArrays", &d.truncated);
    /* disambiguatedPaths (6.1+) only with showExpandedEvents (change_stream_event_transform.cpp). */
    if (expanded)
        BSON_APPEND_DOCUMENT(out, "disambiguatedPaths", &d.disamb);
    bson_destroy(&d.updated);
    bson_destroy(&d.removed);
    bson_destroy(&d.truncated);
    bson_destroy(&d.disamb);
}

/* ---- one event ---- */

static bool lookup_doc(const cs_env *env, const char *db, const char *coll, const bson_t *key, bson_t *out);

typedef struct {
    bson_t *found;
    bool any;
} lookup_ctx;

static bool lookup_one(void *ctx, const bson_t *doc)
{
    lookup_ctx *l = ctx;
    bson_copy_to(doc, l->found);
    l->any = true;
    return false;
}

/* fullDocument: "updateLookup": the current (majority) version of the document with the event's _id, or none. */
static bool lookup_doc(const cs_env *env, const char *db, const char *coll, const bson_t *key, bson_t *out)
{
    bson_iter_t id;
    if (!env->store || !bson_iter_init_find(&id, key, "_id"))
        return false;
    bson_t q = BSON_INITIALIZER;
    bson_append_iter(&q, "_id", 3, &id);
    lookup_ctx l = {out, false};
    store_find(env->store, db, coll, &q, lookup_one, &l);
    bson_destroy(&q);
    return l.any;
}

static void event_txn(ev_ctx *x, bson_t *ev)
{
    if (!x->has_txn)
        return;
    BSON_APPEND_INT64(ev, "txnNumber", x->txn_number);
    bson_append_iter(ev, "lsid", 4, &x->lsid);
}

/* Starts an event as change_stream_event_transform.cpp (applyTransformation) builds it: a rename's top-level `to`
 * (added while reading the entry), a transaction's txnNumber and lsid (only for ops unwound from applyOps:
 * addTransactionIdFieldsIfPresent runs when txnOpIndex is set, so a retryable write's own lsid is not shown), then
 * _id, operationType, clusterTime, collectionUUID (showExpandedEvents), wallTime. */
static void event_head(ev_ctx *x, bson_t *ev, const char *hex, const char *op_type, const uint8_t *uuid,
                       const char *to_db, const char *to_coll)
{
    if (to_db)
        append_ns(ev, "to", to_db, to_coll);
    event_txn(x, ev);
    append_token(ev, "_id", hex, x->tb, x->tblen);
    BSON_APPEND_UTF8(ev, "operationType", op_type);
    BSON_APPEND_TIMESTAMP(ev, "clusterTime", OPLOG_TS_SECS(x->ts), OPLOG_TS_INC(x->ts));
    if (x->s->expanded && uuid)
        bson_append_binary(ev, "collectionUUID", -1, BSON_SUBTYPE_UUID, uuid, 16);
    if (x->has_wall)
        BSON_APPEND_DATE_TIME(ev, "wallTime", x->wall);
}

static void push_event(ev_ctx *x, uint32_t op_index, bool inv, bson_t *ev, char *hex, bool closes)
{
    cs_event e = {.pos = {x->ts, op_index, inv, -1}, .hex = hex, .closes = closes};
    memcpy(e.tb, x->tb, x->tblen);
    e.tblen = x->tblen;
    e.doc = bson_copy(ev);
    bson_reinit(ev); /* the caller still destroys it */
    cache_push(x->s, &e);
}

/* The invalidate that ends a collection or database stream after a drop, a rename or a dropDatabase: the same
 * token as the event that caused it, with fromInvalidate true (document_source_change_stream_check_invalidate.cpp). */
static void push_invalidate(ev_ctx *x, uint32_t op_index, const uint8_t *uuid, const bson_t *eid)
{
    char *hex = cs_token_make(x->ts, CS_TOKEN_EVENT, op_index, true, uuid, eid, -1, x->tb, &x->tblen);
    bson_t ev = BSON_INITIALIZER;
    append_token(&ev, "_id", hex, x->tb, x->tblen);
    BSON_APPEND_UTF8(&ev, "operationType", "invalidate");
    BSON_APPEND_TIMESTAMP(&ev, "clusterTime", OPLOG_TS_SECS(x->ts), OPLOG_TS_INC(x->ts));
    if (x->has_wall)
        BSON_APPEND_DATE_TIME(&ev, "wallTime", x->wall);
    push_event(x, op_index, true, &ev, hex, true);
    bson_destroy(&ev);
}

static void image_error(ev_ctx *x, const bson_t *ev, bool pre)
{
    char *json = bson_as_relaxed_extended_json(ev, NULL);
    /* document_source_change_stream_add_pre_image.cpp / add_post_image.cpp: NoMatchingDocument (47) */
    if (pre)
        cs_error_set(x->err, 47, false,
                     "Change stream was configured to require a pre-image for all update, delete and replace "
                     "events, but the pre-image was not found for event: %.600s",
                     json ? json : "");
    else
        cs_error_set(x->err, 47, false,
                     "Change stream was configured to require a post-image for all update events, but the "
                     "post-image was not found for event: %.600s",
                     json ? json : "");
    bson_free(json);
    x->failed = true;
}

/* An event identifier (resume_token.cpp ResumeTokenData ctor): {operationType, documentKey} or
 * {operationType, operationDescription}; a missing operationDescription leaves the field out. */
static void make_eid(bson_t *eid, const char *op_type, const char *field, const bson_t *val)
{
    bson_init(eid);
    BSON_APPEND_UTF8(eid, "operationType", op_type);
    if (val)
        BSON_APPEND_DOCUMENT(eid, field, val);
}

/* A write to db.system.views on a database or cluster stream with showExpandedEvents: the view's create (nsType
 * "view", or "timeseries" when viewOn is a system.buckets collection), modify or drop
 * (change_stream_event_transform.cpp, ChangeStreamViewDefinitionEventTransformation: o._id is the view's namespace,
 * operationDescription is o without _id; no collectionUUID; the token has the system.views UUID). */
static void desc_from(const bson_t *o, const char *skip1, const char *skip2, bson_t *out);

static void view_event(ev_ctx *x, const bson_t *op, const char *opc, uint32_t op_index)
{
    bson_iter_t it;
    bson_t o;
    const uint8_t *uuid = NULL;
    uint32_t ulen;
    bson_subtype_t st;
    if (!bson_iter_init_find(&it, op, "o") || !get_doc(&it, &o))
        return;
    if (bson_iter_init_find(&it, op, "ui") && BSON_ITER_HOLDS_BINARY(&it)) {
        bson_iter_binary(&it, &st, &ulen, &uuid);
        if (ulen != 16)
            uuid = NULL;
    }
    const char *view_ns =
        bson_iter_init_find(&it, &o, "_id") && BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : NULL;
    char vdb[128];
    const char *vcoll;
    if (!view_ns || !split_ns(view_ns, vdb, sizeof vdb, &vcoll))
        return;
    const char *type = !strcmp(opc, "i") ? "create" : !strcmp(opc, "u") ? "modify" : "drop";
    bson_t desc;
    bool has_desc = strcmp(type, "drop") != 0;
    const char *ns_type = NULL;
    if (has_desc) {
        desc_from(&o, "_id", NULL, &desc);
        if (!strcmp(type, "create")) {
            const char *on =
                bson_iter_init_find(&it, &o, "viewOn") && BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
            ns_type = !strncmp(on, "system.buckets.", 15) ? "timeseries" : "view";
        }
    }
    bson_t eid, ev = BSON_INITIALIZER;
    make_eid(&eid, type, "operationDescription", has_desc ? &desc : NULL);
    char *hex = cs_token_make(x->ts, CS_TOKEN_EVENT, op_index, false, uuid, &eid, -1, x->tb, &x->tblen);
    bson_destroy(&eid);
    append_token(&ev, "_id", hex, x->tb, x->tblen);
    BSON_APPEND_UTF8(&ev, "operationType", type);
    BSON_APPEND_TIMESTAMP(&ev, "clusterTime", OPLOG_TS_SECS(x->ts), OPLOG_TS_INC(x->ts));
    if (x->has_wall)
        BSON_APPEND_DATE_TIME(&ev, "wallTime", x->wall);
    append_ns(&ev, "ns", vdb, vcoll);
    if (has_desc)
        BSON_APPEND_DOCUMENT(&ev, "operationDescription", &desc);
    if (ns_type)
        BSON_APPEND_UTF8(&ev, "nsType", ns_type);
    push_event(x, op_index, false, &ev, hex, false);
    bson_destroy(&ev);
    if (has_desc)
        bson_destroy(&desc);
}

static void crud_event(ev_ctx *x, const bson_t *op, uint32_t op_index)
{
    bson_iter_t it;
    const char *opc = bson_iter_init_find(&it, op, "op") && BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
    const char *ns = bson_iter_init_find(&it, op, "ns") && BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
    char db[128];
    const char *coll;
    if (!split_ns(ns, db, sizeof db, &coll))
        return;
    /* system.views on database and cluster streams, with showExpandedEvents (getViewNsRegexForChangeStream) */
    if (!strcmp(coll, "system.views") && x->s->expanded && x->s->kind != CS_COLL && ns_wanted(x->s, db, NULL)) {
        view_event(x, op, opc, op_index);
        return;
    }
    if (!ns_wanted(x->s, db, coll))
        return;
    /* fromMigrate entries (a chunk migration's copies and deletions) are hidden unless showMigrationEvents. */
    if (bson_iter_init_find(&it, op, "fromMigrate") && bson_iter_as_bool(&it))
        return;
    const uint8_t *uuid = NULL;
    uint32_t ulen;
    bson_subtype_t st;
    if (bson_iter_init_find(&it, op, "ui") && BSON_ITER_HOLDS_BINARY(&it)) {
        bson_iter_binary(&it, &st, &ulen, &uuid);
        if (ulen != 16)
            uuid = NULL;
    }
    bson_t o = BSON_INITIALIZER, o2 = BSON_INITIALIZER;
    bool has_o = bson_iter_init_find(&it, op, "o") && get_doc(&it, &o);
    bool has_o2 = bson_iter_init_find(&it, op, "o2") && get_doc(&it, &o2);
    if (!has_o)
        return;
    const char *type;
    bson_t key = BSON_INITIALIZER;
    bool update = false;
    if (!strcmp(opc, "i")) {
        type = "insert";
        /* documentKey: the insert's o2 (the shard key and _id, 4.4+ on sharded collections), else {_id}. */
        if (has_o2) {
            bson_copy_to_excluding_noinit(&o2, &key, "", NULL);
        } else if (bson_iter_init_find(&it, &o, "_id")) {
            bson_append_iter(&key, "_id", 3, &it);
        }
    } else if (!strcmp(opc, "u")) {
        bson_iter_t v;
        update = (bson_iter_init_find(&v, &o, "$v") && bson_iter_as_int64(&v) >= 1) ||
                 bson_iter_init_find(&v, &o, "$set") || bson_iter_init_find(&v, &o, "$unset");
        type = update ? "update" : "replace";
        if (has_o2)
            bson_copy_to_excluding_noinit(&o2, &key, "", NULL);
    } else if (!strcmp(opc, "d")) {
        type = "delete";
        bson_copy_to_excluding_noinit(&o, &key, "", NULL);
    } else {
        bson_destroy(&key);
        return;
    }
    bson_t eid;
    make_eid(&eid, type, "documentKey", &key);
    char *hex = cs_token_make(x->ts, CS_TOKEN_EVENT, op_index, false, uuid, &eid, -1, x->tb, &x->tblen);
    bson_destroy(&eid);
    bson_t ev = BSON_INITIALIZER;
    event_head(x, &ev, hex, type, uuid, NULL, NULL);
    bool is_insert = !strcmp(type, "insert"), is_replace = !strcmp(type, "replace");
    /* The images kept for this write (images.h): the collection had changeStreamPreAndPostImages enabled when it
     * happened (the server looks them up by {nsUUID, ts, applyOpsIndex}: document_source_change_stream_add_pre_image
     * .cpp; the post-image is the pre-image with the update applied, add_post_image.cpp). */
    bson_t pre, post;
    bool images = !is_insert && uuid && images_find(x->env->images, uuid, x->img_ts, x->img_index, &pre, &post);
    if (is_insert || is_replace) {
        BSON_APPEND_DOCUMENT(&ev, "fullDocument", &o);
    } else if (update && x->s->full_doc == FD_LOOKUP) {
        bson_t cur = BSON_INITIALIZER;
        if (lookup_doc(x->env, db, coll, &key, &cur))
            BSON_APPEND_DOCUMENT(&ev, "fullDocument", &cur);
        else
            BSON_APPEND_NULL(&ev, "fullDocument");
        bson_destroy(&cur);
    } else if (update && (x->s->full_doc == FD_WHEN || x->s->full_doc == FD_REQUIRED)) {
        if (images)
            BSON_APPEND_DOCUMENT(&ev, "fullDocument", &post);
        else if (x->s->full_doc == FD_WHEN)
            BSON_APPEND_NULL(&ev, "fullDocument"); /* whenAvailable without a post-image: null */
    }
    append_ns(&ev, "ns", db, coll);
    BSON_APPEND_DOCUMENT(&ev, "documentKey", &key);
    if (update) {
        if (x->s->raw_update) {
            /* showRawUpdateDescription (SERVER-61894): the oplog entry's o itself. */
            BSON_APPEND_DOCUMENT(&ev, "rawUpdateDescription", &o);
        } else {
            bson_t ud;
            BSON_APPEND_DOCUMENT_BEGIN(&ev, "updateDescription", &ud);
            update_description(&o, x->s->expanded, &ud);
            bson_append_document_end(&ev, &ud);
        }
    }
    if (!is_insert && images && (x->s->before == FB_WHEN || x->s->before == FB_REQUIRED))
        BSON_APPEND_DOCUMENT(&ev, "fullDocumentBeforeChange", &pre);
    else if (!is_insert && x->s->before == FB_WHEN)
        BSON_APPEND_NULL(&ev, "fullDocumentBeforeChange"); /* no pre-image kept */
    if (!is_insert && !images && x->s->before == FB_REQUIRED)
        image_error(x, &ev, true);
    else if (update && !images && x->s->full_doc == FD_REQUIRED)
        image_error(x, &ev, false);
    bson_destroy(&key);
    if (x->failed) {
        bson_destroy(&ev);
        bson_free(hex);
        return;
    }
    push_event(x, op_index, false, &ev, hex, false);
    bson_destroy(&ev);
}

/* Fields of o but the first (the command name): a DDL event's operationDescription. */
static void desc_from(const bson_t *o, const char *skip1, const char *skip2, bson_t *out)
{
    bson_init(out);
    bson_iter_t it;
    bson_iter_init(&it, o);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (!strcmp(k, skip1) || (skip2 && !strcmp(k, skip2)))
            continue;
        bson_append_iter(out, k, -1, &it);
    }
}

static void ddl_event(ev_ctx *x, const bson_t *op, uint32_t op_index)
{
    bson_iter_t it;
    const char *ns = bson_iter_init_find(&it, op, "ns") && BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
    char db[128];
    const char *cmdcoll;
    bson_t o;
    if (!split_ns(ns, db, sizeof db, &cmdcoll) || strcmp(cmdcoll, "$cmd") != 0 || !bson_iter_init_find(&it, op, "o") ||
        !get_doc(&it, &o))
        return;
    if (bson_iter_init_find(&it, op, "fromMigrate") && bson_iter_as_bool(&it))
        return;
    const uint8_t *uuid = NULL;
    uint32_t ulen;
    bson_subtype_t st;
    if (bson_iter_init_find(&it, op, "ui") && BSON_ITER_HOLDS_BINARY(&it)) {
        bson_iter_binary(&it, &st, &ulen, &uuid);
        if (ulen != 16)
            uuid = NULL;
    }
    bson_iter_t c;
    if (!bson_iter_init(&c, &o) || !bson_iter_next(&c))
        return;
    const char *cmd = bson_iter_key(&c);
    const char *coll = BSON_ITER_HOLDS_UTF8(&c) ? bson_iter_utf8(&c, NULL) : NULL;
    bson_t desc, ev = BSON_INITIALIZER, eid;
    bson_t state;
    bool has_desc = false, has_state = false, invalidates = false;
    const char *type = NULL;
    char to_db[128] = "";
    const char *to_coll = NULL;
    if (!strcmp(cmd, "drop") && coll) {
        if (!ns_wanted(x->s, db, coll))
            goto done;
        type = "drop";
        invalidates = x->s->kind == CS_COLL;
    } else if (!strcmp(cmd, "renameCollection") && coll) {
        char from_db[128];
        const char *from_coll;
        bson_iter_t t;
        if (!split_ns(coll, from_db, sizeof from_db, &from_coll) || !bson_iter_init_find(&t, &o, "to") ||
            !BSON_ITER_HOLDS_UTF8(&t) || !split_ns(bson_iter_utf8(&t, NULL), to_db, sizeof to_db, &to_coll))
            goto done;
        snprintf(db, sizeof db, "%s", from_db);
        coll = from_coll;
        if (!ns_wanted(x->s, db, coll))
            goto done;
        type = "rename";
        invalidates = x->s->kind == CS_COLL;
        /* operationDescription {to: {db, coll}[, dropTarget: UUID]} (5.3+; change_stream_event_transform.cpp) */
        bson_init(&desc);
        has_desc = true;
        append_ns(&desc, "to", to_db, to_coll);
        if (bson_iter_init_find(&t, &o, "dropTarget") && BSON_ITER_HOLDS_BINARY(&t))
            bson_append_iter(&desc, "dropTarget", -1, &t);
    } else if (!strcmp(cmd, "dropDatabase")) {
        if (x->s->kind == CS_COLL || !ns_wanted(x->s, db, NULL))
            goto done;
        type = "dropDatabase";
        coll = NULL;
        invalidates = x->s->kind == CS_DB;
    } else if (x->s->expanded && !strcmp(cmd, "create") && coll) {
        if (!ns_wanted(x->s, db, coll))
            goto done;
        type = "create";
        desc_from(&o, "create", NULL, &desc);
        has_desc = true;
    } else if (x->s->expanded && !strcmp(cmd, "createIndexes") && coll) {
        if (!ns_wanted(x->s, db, coll))
            goto done;
        type = "createIndexes";
        bson_t spec, arr;
        desc_from(&o, "createIndexes", NULL, &spec);
        bson_init(&desc);
        has_desc = true;
        BSON_APPEND_ARRAY_BEGIN(&desc, "indexes", &arr);
        BSON_APPEND_DOCUMENT(&arr, "0", &spec);
        bson_append_array_end(&desc, &arr);
        bson_destroy(&spec);
    } else if (x->s->expanded && !strcmp(cmd, "dropIndexes") && coll) {
        bson_t o2, arr;
        if (!ns_wanted(x->s, db, coll) || !bson_iter_init_find(&it, op, "o2") || !get_doc(&it, &o2))
            goto done;
        type = "dropIndexes";
        bson_t spec;
        desc_from(&o2, "dropIndexes", NULL, &spec);
        bson_init(&desc);
        has_desc = true;
        BSON_APPEND_ARRAY_BEGIN(&desc, "indexes", &arr);
        BSON_APPEND_DOCUMENT(&arr, "0", &spec);
        bson_append_array_end(&desc, &arr);
        bson_destroy(&spec);
    } else if (x->s->expanded && !strcmp(cmd, "collMod") && coll) {
        if (!ns_wanted(x->s, db, coll))
            goto done;
        type = "modify";
        desc_from(&o, "collMod", NULL, &desc);
        has_desc = true;
        /* stateBeforeChange {collectionOptions, indexOptions} from o2's *_old fields */
        bson_t o2;
        if (bson_iter_init_find(&it, op, "o2") && get_doc(&it, &o2)) {
            bson_iter_t f;
            bson_init(&state);
            has_state = true;
            if (bson_iter_init_find(&f, &o2, "collectionOptions_old"))
                bson_append_iter(&state, "collectionOptions", -1, &f);
            if (bson_iter_init_find(&f, &o2, "indexOptions_old"))
                bson_append_iter(&state, "indexOptions", -1, &f);
        }
    } else {
        goto done;
    }
    make_eid(&eid, type, "operationDescription", has_desc ? &desc : NULL);
    char *hex = cs_token_make(x->ts, CS_TOKEN_EVENT, op_index, false, uuid, &eid, -1, x->tb, &x->tblen);
    /* the top-level `to` predates operationDescription (5.3) and is kept */
    bool rename = !strcmp(type, "rename");
    event_head(x, &ev, hex, type, uuid, rename ? to_db : NULL, rename ? to_coll : NULL);
    append_ns(&ev, "ns", db, coll);
    if (x->s->expanded && has_desc)
        BSON_APPEND_DOCUMENT(&ev, "operationDescription", &desc);
    if (has_state)
        BSON_APPEND_DOCUMENT(&ev, "stateBeforeChange", &state);
    if (!strcmp(type, "create"))
        BSON_APPEND_UTF8(&ev, "nsType", "collection"); /* mongosim's views and time-series log no create here */
    push_event(x, op_index, false, &ev, hex, false);
    if (invalidates)
        push_invalidate(x, op_index, uuid, &eid);
    bson_destroy(&eid);
done:
    if (has_desc)
        bson_destroy(&desc);
    if (has_state)
        bson_destroy(&state);
    bson_destroy(&ev);
}

static void op_event(ev_ctx *x, const bson_t *op, uint32_t op_index)
{
    bson_iter_t it;
    const char *opc = bson_iter_init_find(&it, op, "op") && BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
    if (!strcmp(opc, "c"))
        ddl_event(x, op, op_index);
    else if (!strcmp(opc, "i") || !strcmp(opc, "u") || !strcmp(opc, "d"))
        crud_event(x, op, op_index);
}

/* The entry at ts, or false when the oplog no longer holds it. */
static bool entry_at(const sim_oplog *log, uint64_t ts, bson_t *out)
{
    uint64_t seq = oplog_seek(log, ts, true);
    if (seq >= oplog_end_seq(log) || oplog_entry_ts(log, seq) != ts)
        return false;
    uint32_t len;
    const uint8_t *d = oplog_entry(log, seq, &len);
    return bson_init_static(out, d, len);
}

static uint64_t prev_ts(const bson_t *entry)
{
    bson_iter_t it, t;
    uint32_t secs, inc;
    if (!bson_iter_init_find(&it, entry, "prevOpTime") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &t) || !bson_iter_find(&t, "ts") || !BSON_ITER_HOLDS_TIMESTAMP(&t))
        return 0;
    bson_iter_timestamp(&t, &secs, &inc);
    return OPLOG_TS(secs, inc);
}

/* Every op of the transaction that `last` ends (its final applyOps, or the prepare entry of a prepared one),
 * walking prevOpTime back to the null OpTime; each op is an event at the commit's ts, numbered by its index in the
 * whole transaction (txnOpIndex). */
static void unwind_chain(ev_ctx *x, const bson_t *last)
{
    bson_t chain[256];
    size_t n = 0;
    chain[n++] = *last;
    for (uint64_t p = prev_ts(last); p != 0 && n < 256; p = prev_ts(&chain[n - 1])) {
        if (!entry_at(x->env->oplog, p, &chain[n])) {
            cs_error_set(x->err, 286, true,
                         "Resume of change stream was not possible, as the resume point may no longer be in the "
                         "oplog.");
            x->failed = true;
            return;
        }
        n++;
    }
    uint32_t index = 0;
    for (size_t e = n; e-- > 0 && !x->failed;) {
        bson_iter_t it, ops, t;
        if (!find_path(&it, &chain[e], "o.applyOps", &ops) || !BSON_ITER_HOLDS_ARRAY(&ops) ||
            !bson_iter_recurse(&ops, &it))
            continue;
        uint32_t secs = 0, inc = 0;
        if (bson_iter_init_find(&t, &chain[e], "ts") && BSON_ITER_HOLDS_TIMESTAMP(&t))
            bson_iter_timestamp(&t, &secs, &inc);
        x->img_ts = OPLOG_TS(secs, inc);
        x->img_index = 0;
        while (bson_iter_next(&it) && !x->failed) {
            bson_t op;
            if (get_doc(&it, &op))
                op_event(x, &op, index);
            index++;
            x->img_index++;
        }
    }
}

static void entry_events(ev_ctx *x, const bson_t *entry)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, entry, "wall") && BSON_ITER_HOLDS_DATE_TIME(&it)) {
        x->has_wall = true;
        x->wall = bson_iter_date_time(&it);
    }
    if (bson_iter_init_find(&it, entry, "txnNumber") && BSON_ITER_HOLDS_INT64(&it) &&
        bson_iter_init_find(&x->lsid, entry, "lsid")) {
        x->has_txn = true;
        x->txn_number = bson_iter_int64(&it);
    }
    const char *opc =
        bson_iter_init_find(&it, entry, "op") && BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
    const char *ns =
        bson_iter_init_find(&it, entry, "ns") && BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
    if (!strcmp(opc, "c") && !strcmp(ns, "admin.$cmd")) {
        bson_iter_t f;
        if (find_path(&it, entry, "o.applyOps", &f)) {
            /* partialTxn entries and a prepare entry wait for their commit; an applyOps without them (a
             * transaction's last entry, or a batched write's, with or without lsid) is unwound now. */
            if ((find_path(&it, entry, "o.partialTxn", &f) && bson_iter_as_bool(&f)) ||
                (find_path(&it, entry, "o.prepare", &f) && bson_iter_as_bool(&f)))
                return;
            unwind_chain(x, entry);
        } else if (find_path(&it, entry, "o.commitTransaction", &f)) {
            /* A prepared transaction's commit: its ops come from the prepare entry prevOpTime points at; their
             * clusterTime is the commit entry's ts (commitTimestamp only with showCommitTimestamp). */
            bson_t prep;
            uint64_t p = prev_ts(entry);
            if (!p || !entry_at(x->env->oplog, p, &prep)) {
                cs_error_set(x->err, 286, true,
                             "Resume of change stream was not possible, as the resume point may no longer be in "
                             "the oplog.");
                x->failed = true;
                return;
            }
            unwind_chain(x, &prep);
        }
        return;
    }
    /* Noops (op n) give no event. A retryable write's entry carries lsid and txnNumber, but only ops unwound from
     * applyOps show them (change_stream_event_transform.cpp). */
    x->has_txn = false;
    x->img_ts = x->ts;
    x->img_index = 0;
    op_event(x, entry, 0);
}

static bool build_cache(cs_stream *s, const cs_env *env, uint64_t seq, cs_error *err)
{
    if (s->cache_seq == seq)
        return true;
    cache_clear(s);
    uint32_t len;
    const uint8_t *d = oplog_entry(env->oplog, seq, &len);
    bson_t entry;
    if (!bson_init_static(&entry, d, len))
        return true;
    ev_ctx x = {.s = s, .env = env, .ts = oplog_entry_ts(env->oplog, seq), .err = err};
    entry_events(&x, &entry);
    if (x.failed) {
        cache_clear(s);
        return false;
    }
    s->cache_seq = seq;
    return true;
}

/* ================================================================ batches */

static int pos_cmp3(const cs_pos *a, const cs_pos *b)
{
    cs_pos x = *a, y = *b;
    x.frag = y.frag = -1;
    return pos_cmp(&x, &y);
}

/* The user's stages on one event; false when a $match drops it. An event whose _id a stage removed or changed
 * fails the stream (plan_executor_pipeline.cpp, _validateChangeStreamsResumeToken: ChangeStreamFatalError 280;
 * the Expected/found part is written here in Extended JSON, the server prints its own BSON notation). */
static bool run_stages(cs_stream *s, const bson_t *ev, bson_t *out, bool *fatal, cs_error *err)
{
    *fatal = false;
    bson_copy_to(ev, out);
    for (size_t i = 0; i < s->nstages; i++) {
        if (s->stages[i].kind == 0) {
            if (match_doc(out, s->stages[i].spec) != 1)
                return false;
        } else {
            bson_t p = BSON_INITIALIZER;
            projection_apply(s->stages[i].proj, out, &p);
            bson_destroy(out);
            bson_steal(out, &p);
        }
    }
    if (s->nstages) {
        bson_iter_t a, b;
        const uint8_t *da, *db;
        uint32_t la, lb;
        bool same =
            bson_iter_init_find(&a, ev, "_id") && bson_iter_init_find(&b, out, "_id") && BSON_ITER_HOLDS_DOCUMENT(&b);
        if (same) {
            bson_iter_document(&a, &la, &da);
            bson_iter_document(&b, &lb, &db);
            same = la == lb && memcmp(da, db, la) == 0;
        }
        if (!same) {
            bson_iter_t t;
            const char *hex = bson_iter_init(&t, ev) && bson_iter_find_descendant(&t, "_id._data", &t)
                                  ? bson_iter_utf8(&t, NULL)
                                  : "";
            bson_t found = BSON_INITIALIZER;
            if (bson_iter_init_find(&b, out, "_id"))
                bson_append_iter(&found, "_id", 3, &b);
            char *fj = bson_as_relaxed_extended_json(&found, NULL);
            cs_error_set(err, 280, true,
                         "Encountered an event whose _id field, which contains the resume token, was modified by "
                         "the pipeline. Modifying the _id field of an event makes it impossible to resume the "
                         "stream from that point. Only transformations that retain the unmodified _id field are "
                         "allowed. Expected: { _id: { _data: \"%s\" } } but found: %s",
                         hex, fj ? fj : "{}");
            bson_free(fj);
            bson_destroy(&found);
            *fatal = true;
            return false;
        }
    }
    return true;
}

/* Does an event's token (no fragment) name the same event as a client's token (which may add a fragmentNum)? The
 * KeyString ends in 0x04; a fragmentNum sits just before it. */
static bool token_names(const char *event_hex, const char *client_hex, int32_t *frag)
{
    size_t el = strlen(event_hex), cl = strlen(client_hex);
    *frag = -1;
    if (!strcmp(event_hex, client_hex))
        return true;
    if (cl <= el || strncmp(event_hex, client_hex, el - 2) != 0)
        return false;
    /* the rest: fragmentNum (a KeyString integer), then 0x04 */
    uint8_t b[16];
    size_t n = (cl - (el - 2)) / 2, pos = 0;
    if (n > sizeof b)
        return false;
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(hexval(client_hex[el - 2 + 2 * i]) << 4 | hexval(client_hex[el - 1 + 2 * i]));
    int64_t v;
    if (!ks_read_int(b, n, &pos, &v) || pos + 1 != n || b[pos] != KS_END)
        return false;
    *frag = (int32_t)v;
    return true;
}

typedef struct {
    size_t size; /* the element's bytes: type, name, value (BSONElement::size) */
    const char *key;
    bson_iter_t it;
} split_field;

static int split_field_cmp(const void *a, const void *b)
{
    const split_field *x = a, *y = b;
    if (x->size != y->size)
        return x->size < y->size ? -1 : 1;
    return strcmp(x->key, y->key);
}

static size_t token_doc_size(const char *hex)
{
    bson_t t = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&t, "_data", hex);
    size_t n = t.len;
    bson_destroy(&t);
    return n;
}

/* change_stream_split_event_helpers.cpp, splitChangeEvent: the fields but _id, ordered by (size, name), fill
 * fragments greedily (each at least one field) up to kBSONObjMaxChangeEventSize minus the event token's size; each
 * fragment is {_id: its token (fragmentNum = its 0-based index), splitEvent: {fragment: 1-based, of: n}, fields}.
 * The server also counts the fragment's $sortKey metadata in its size; mongosim counts the token document once more
 * for it. Returns the count (0 with err set); frags[i] and hexes[i] owned by the caller. */
static size_t split_event(const bson_t *ev, const cs_event *src, const bson_t *eid, const uint8_t *uuid, bson_t **frags,
                          char ***hexes, cs_error *err)
{
    size_t nf = 0, cap = 16;
    split_field *fields = malloc(cap * sizeof *fields);
    if (!fields)
        abort();
    bson_iter_t it;
    bson_iter_init(&it, ev);
    while (bson_iter_next(&it)) {
        if (!strcmp(bson_iter_key(&it), "_id"))
            continue;
        if (nf == cap) {
            cap *= 2;
            fields = realloc(fields, cap * sizeof *fields);
            if (!fields)
                abort();
        }
        fields[nf++] = (split_field){it.next_off - it.off, bson_iter_key(&it), it};
    }
    if (nf == 0) {
        cs_error_set(err, 7182502, false, "Cannot split an empty event or an event containing solely '_id' field");
        free(fields);
        return 0;
    }
    qsort(fields, nf, sizeof *fields, split_field_cmp);
    size_t limit = CS_MAX_CHANGE_EVENT - token_doc_size(src->hex);
    size_t n = 0, fcap = 4;
    *frags = calloc(fcap, sizeof **frags);
    *hexes = calloc(fcap, sizeof **hexes);
    if (!*frags || !*hexes)
        abort();
    for (size_t f = 0; f < nf;) {
        if (n == fcap) {
            fcap *= 2;
            *frags = realloc(*frags, fcap * sizeof **frags);
            *hexes = realloc(*hexes, fcap * sizeof **hexes);
            if (!*frags || !*hexes)
                abort();
        }
        uint8_t tb[CS_TYPEBITS_MAX];
        size_t tblen;
        char *hex =
            cs_token_make(src->pos.ts, CS_TOKEN_EVENT, src->pos.op, src->pos.inv, uuid, eid, (int32_t)n, tb, &tblen);
        bson_t *fr = &(*frags)[n], se;
        bson_init(fr);
        append_token(fr, "_id", hex, tb, tblen);
        BSON_APPEND_DOCUMENT_BEGIN(fr, "splitEvent", &se);
        BSON_APPEND_INT32(&se, "fragment", (int32_t)n + 1);
        BSON_APPEND_INT32(&se, "of", 0); /* set below, once the count is known */
        bson_append_document_end(fr, &se);
        (*hexes)[n] = hex;
        n++;
        size_t size = fr->len + token_doc_size(hex);
        do {
            bson_append_iter(fr, fields[f].key, -1, &fields[f].it);
            size += fields[f].size;
        } while (++f < nf && size + fields[f].size <= limit);
        if (size > limit) {
            cs_error_set(err, 7182500, false,
                         "Splitting change event failed: fragment size %zu is greater than maximum allowed fragment "
                         "size %zu",
                         size, limit);
            for (size_t k = 0; k < n; k++) {
                bson_destroy(&(*frags)[k]);
                bson_free((*hexes)[k]);
            }
            free(*frags);
            free(*hexes);
            free(fields);
            return 0;
        }
    }
    free(fields);
    /* splitEvent.of: the int32 written as 0 above, patched in place */
    for (size_t k = 0; k < n; k++) {
        bson_iter_t of;
        if (bson_iter_init(&of, &(*frags)[k]) && bson_iter_find_descendant(&of, "splitEvent.of", &of))
            bson_iter_overwrite_int32(&of, (int32_t)n);
    }
    return n;
}

/* The eventIdentifier and UUID of a cached event, re-read from the token-making inputs: the event document. */
static void event_identity(const bson_t *ev, bson_t *eid, const uint8_t **uuid, const cs_token_info *ti,
                           uint8_t *uuid_buf)
{
    bson_iter_t it;
    const char *type = bson_iter_init_find(&it, ev, "operationType") ? bson_iter_utf8(&it, NULL) : "";
    bson_t key;
    bson_init(eid);
    BSON_APPEND_UTF8(eid, "operationType", type);
    if (bson_iter_init_find(&it, ev, "documentKey") && get_doc(&it, &key))
        BSON_APPEND_DOCUMENT(eid, "documentKey", &key);
    else if (bson_iter_init_find(&it, ev, "operationDescription") && get_doc(&it, &key))
        BSON_APPEND_DOCUMENT(eid, "operationDescription", &key);
    *uuid = NULL;
    if (ti->has_uuid) {
        memcpy(uuid_buf, ti->uuid, 16);
        *uuid = uuid_buf;
    }
}

static void append_event(bson_t *events, uint32_t *key, const bson_t *doc)
{
    char kb[16];
    const char *k;
    bson_uint32_to_string((*key)++, &k, kb, sizeof kb);
    BSON_APPEND_DOCUMENT(events, k, doc);
}

/* The post-batch token becomes the _id of a returned event (or fragment). */
static void set_pbrt(cs_stream *s, const bson_t *ev, uint64_t ts)
{
    bson_iter_t it, f;
    bson_free(s->pbrt_hex);
    s->pbrt_hex = bson_strdup(
        bson_iter_init(&it, ev) && bson_iter_find_descendant(&it, "_id._data", &f) ? bson_iter_utf8(&f, NULL) : "");
    s->pbrt_tblen = 0;
    if (bson_iter_init(&it, ev) && bson_iter_find_descendant(&it, "_id._typeBits", &f) && BSON_ITER_HOLDS_BINARY(&f)) {
        bson_subtype_t st;
        uint32_t len;
        const uint8_t *data;
        bson_iter_binary(&f, &st, &len, &data);
        if (len <= CS_TYPEBITS_MAX) {
            memcpy(s->pbrt_tb, data, len);
            s->pbrt_tblen = len;
        }
    }
    s->pbrt_ts = ts;
}

bool cs_next_batch(cs_stream *s, const cs_env *env, int64_t batch, bson_t *events, bson_t *pbrt, bool *closed,
                   cs_error *err)
{
    memset(err, 0, sizeof *err);
    int64_t n = 0;
    size_t bytes = 0;
    uint32_t key = 0;
    /* batchSize 0 (an aggregate's first batch): nothing is read, the token stays the start's
     * (report_post_batch_resume_token.js: an empty first batch reports the start point) */
    bool stop = s->closed || batch == 0;
    if (s->scan_seq < oplog_first_seq(env->oplog)) {
        /* The entry the stream reads next was capped away (check_resumability: ChangeStreamHistoryLost). */
        cs_error_set(err, 286, true,
                     "Resume of change stream was not possible, as the resume point may no longer be in the oplog.");
        return false;
    }
    while (!stop && s->scan_seq < env->visible_end && s->scan_seq < oplog_end_seq(env->oplog)) {
        uint64_t entry_ts = oplog_entry_ts(env->oplog, s->scan_seq);
        if (entry_ts < s->start_ts) {
            /* written after the open but before a start in the future: the oplog scan (ts >= start) never sees
             * it, and the post-batch token stays at the start (report_post_batch_resume_token.js) */
            s->scan_seq++;
            continue;
        }
        if (!build_cache(s, env, s->scan_seq, err))
            return false;
        for (size_t i = 0; i < s->ncache && !stop; i++) {
            cs_event *ev = &s->cache[i];
            int c = s->have_last ? pos_cmp3(&ev->pos, &s->last) : 1;
            if (c < 0 || (c == 0 && !s->must_find && s->last.frag < 0))
                continue;
            int32_t skip_frag = c == 0 ? s->last.frag : -1;
            if (batch >= 0 && n >= batch) {
                stop = true;
                break;
            }
            bson_t out;
            bool fatal;
            if (!run_stages(s, ev->doc, &out, &fatal, err)) {
                bson_destroy(&out);
                if (fatal)
                    return false;
                continue;
            }
            if (s->must_find) {
                /* ensure_resume_token_present: the first event the pipeline passes at or after the client's
                 * token must be the token's own event; anything else means it was not found (280). */
                int32_t frag;
                if (!token_names(ev->hex, s->must_hex, &frag)) {
                    bson_destroy(&out);
                    /* the message ends with the _id of the event that went past the token */
                    cs_error_set(err, 280, true,
                                 "cannot resume stream; the resume token was not found. {_data: \"%s\"}", ev->hex);
                    return false;
                }
                s->must_find = false;
                skip_frag = frag;
                if (skip_frag < 0) {
                    bson_destroy(&out);
                    continue;
                }
            }
            if (s->split && skip_frag >= 0 && out.len <= CS_MAX_CHANGE_EVENT) {
                /* document_source_change_stream_split_large_event.cpp, _handleResumeAfterSplit */
                bson_destroy(&out);
                cs_error_set(err, 280, true,
                             "Attempted to resume from a split event fragment, but the event in the resumed stream "
                             "was not large enough to be split");
                return false;
            }
            if (out.len > CS_MAX_CHANGE_EVENT && s->split) {
                bson_t eid;
                const uint8_t *uuid;
                uint8_t ub[16];
                cs_token_info ti;
                cs_token_parse(ev->hex, &ti);
                event_identity(ev->doc, &eid, &uuid, &ti, ub);
                bson_t *frags = NULL;
                char **hexes = NULL;
                size_t nf = split_event(&out, ev, &eid, uuid, &frags, &hexes, err);
                bson_destroy(&eid);
                bson_destroy(&out);
                if (nf == 0)
                    return false;
                if (skip_frag >= 0 && (size_t)skip_frag >= nf) {
                    for (size_t f = 0; f < nf; f++) {
                        bson_destroy(&frags[f]);
                        bson_free(hexes[f]);
                    }
                    free(frags);
                    free(hexes);
                    cs_error_set(err, 280, true,
                                 "Attempted to resume from a split event, but the resumed stream produced a different "
                                 "split. Ensure that the pipeline used to resume is the same as the original");
                    return false;
                }
                for (size_t f = 0; f < nf; f++) {
                    if (!stop && (int32_t)f > skip_frag) {
                        if ((batch >= 0 && n >= batch) || (n > 0 && bytes + frags[f].len > SIM_BATCH_BYTES)) {
                            stop = true;
                        } else {
                            append_event(events, &key, &frags[f]);
                            bytes += frags[f].len;
                            n++;
                            s->last = ev->pos;
                            s->last.frag = (int32_t)f;
                            s->have_last = true;
                            set_pbrt(s, &frags[f], ev->pos.ts);
                        }
                    }
                    bson_destroy(&frags[f]);
                    bson_free(hexes[f]);
                }
                free(frags);
                free(hexes);
                continue;
            }
            if (out.len > CS_MAX_INTERNAL) {
                /* BSONObj::_assertInvalid (bsonobj.cpp) when the event is serialized: BSONObjectTooLarge */
                bson_iter_t id;
                char *json = NULL;
                if (bson_iter_init_find(&id, &out, "_id")) {
                    bson_t one = BSON_INITIALIZER;
                    bson_append_iter(&one, "_id", 3, &id);
                    json = bson_as_relaxed_extended_json(&one, NULL);
                    bson_destroy(&one);
                }
                cs_error_set(err, 10334, false,
                             "BSONObj size: %u (0x%X) is invalid. Size must be between 0 and 16793600(16MB) First "
                             "element: %s",
                             out.len, out.len, json ? json : "");
                bson_free(json);
                bson_destroy(&out);
                return false;
            }
            if (n > 0 && bytes + out.len > SIM_BATCH_BYTES) {
                bson_destroy(&out);
                stop = true;
                break;
            }
            append_event(events, &key, &out);
            bytes += out.len;
            n++;
            bson_destroy(&out);
            s->last = ev->pos;
            s->have_last = true;
            set_pbrt(s, ev->doc, ev->pos.ts);
            if (ev->closes) {
                s->closed = true;
                stop = true;
            }
        }
        if (stop)
            break;
        s->scan_seq++;
        /* plan_executor_pipeline.cpp: once the scan has passed an entry, the post-batch token becomes a
         * high-water mark at that entry's ts when it is newer than the token's clusterTime (never while the
         * client's resume token is still to be found). */
        if (!s->must_find && entry_ts > s->pbrt_ts)
            set_pbrt_hwm(s, entry_ts);
    }
    *closed = s->closed;
    BSON_APPEND_UTF8(pbrt, "_data", s->pbrt_hex);
    if (s->pbrt_tblen)
        bson_append_binary(pbrt, "_typeBits", -1, BSON_SUBTYPE_BINARY, s->pbrt_tb, (uint32_t)s->pbrt_tblen);
    return true;
}

/* ================================================================ the wire: aggregate, getMore, killCursors */

typedef struct cs_cursor {
    int64_t id;
    struct cs_cursor *next;
    cs_stream *s;
    char ns[400];
} cs_cursor;

static cs_cursor *cs_find(sim_server *srv, int64_t id)
{
    for (cs_cursor *c = srv->cs_cursors; c; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

static void cs_cursor_free(sim_server *srv, cs_cursor *cur)
{
    for (cs_cursor **pp = &srv->cs_cursors; *pp; pp = &(*pp)->next) {
        if (*pp == cur) {
            *pp = cur->next;
            break;
        }
    }
    cs_close(cur->s);
    free(cur);
}

void cs_cursors_free(sim_server *srv)
{
    while (srv->cs_cursors)
        cs_cursor_free(srv, srv->cs_cursors);
}

bool cs_owns_cursor(sim_server *srv, int64_t id)
{
    return cs_find(srv, id) != NULL;
}

void cs_env_of(sim_server *srv, cs_env *env)
{
    uint64_t maj_ts;
    int64_t t, wall;
    cmd_majority_optime(srv, &maj_ts, &t, &wall);
    env->oplog = srv->oplog;
    env->store = srv->maj_frozen && srv->maj_store ? srv->maj_store : srv->store;
    /* change streams read majority-committed data only (docs/change_streams.md) */
    env->visible_end = srv->maj_frozen ? oplog_seek(srv->oplog, srv->maj_ts, false) : oplog_end_seq(srv->oplog);
    env->refuse_stage = srv->opts.refuse_stage;
    env->images = srv->images;
}

/* An error reply with the change-stream labels the server adds (error_labels.cpp, ErrorLabelBuilder):
 * NonResumableChangeStreamError for the codes of that category (error_codes.yml: ChangeStreamFatalError 280 and
 * ChangeStreamHistoryLost 286); ResumableChangeStreamError for a retriable or network error of a change stream's
 * aggregate or getMore (isResumableChangeStreamError; among mongosim's errors, 10107 NotWritablePrimary and 11602
 * InterruptedDueToReplStateChange). */
void cs_reply_error(sim_reply *r, const cs_error *err)
{
    bson_t doc = BSON_INITIALIZER;
    BSON_APPEND_DOUBLE(&doc, "ok", 0.0);
    BSON_APPEND_UTF8(&doc, "errmsg", err->msg);
    BSON_APPEND_INT32(&doc, "code", err->code);
    const char *name = err->code == 280     ? "ChangeStreamFatalError"
                       : err->code == 286   ? "ChangeStreamHistoryLost"
                       : err->code == 47    ? "NoMatchingDocument"
                       : err->code == 10334 ? "BSONObjectTooLarge"
                       : err->code == 40415 ? "Location40415"
                       : err->code == 40674 ? "Location40674"
                       : err->code == 50865 ? "Location50865"
                       : err->code == 72    ? "InvalidOptions"
                       : err->code == 260   ? "InvalidResumeToken"
                                            : sim_code_name(err->code);
    BSON_APPEND_UTF8(&doc, "codeName", name);
    bool resumable = err->code == 10107 || err->code == 11602;
    if (err->nonresumable || resumable) {
        bson_t labels;
        BSON_APPEND_ARRAY_BEGIN(&doc, "errorLabels", &labels);
        BSON_APPEND_UTF8(&labels, "0", resumable ? "ResumableChangeStreamError" : "NonResumableChangeStreamError");
        bson_append_array_end(&doc, &labels);
    }
    reply_bson(r, &doc);
    bson_destroy(&doc);
}

static const cs_error stepped_down_error = {11602, false, "operation was interrupted because the node stepped down"};

/* {cursor: {firstBatch|nextBatch, postBatchResumeToken, id, ns}, ok: 1} */
static void cs_reply_batch(sim_reply *r, cs_cursor *cur, bool first, const bson_t *events, const bson_t *pbrt,
                           bool closed)
{
    bson_t reply = BSON_INITIALIZER, c;
    BSON_APPEND_DOCUMENT_BEGIN(&reply, "cursor", &c);
    bson_t sent;
    flavor_cs_events(r->conn->srv, events, &sent); /* --flavor: the events as that server sends them */
    BSON_APPEND_ARRAY(&c, first ? "firstBatch" : "nextBatch", &sent);
    bson_destroy(&sent);
    if (flavor_cs_pbrt(r->conn->srv)) {
        bson_t tok;
        flavor_cs_token(r->conn->srv, pbrt, &tok);
        BSON_APPEND_DOCUMENT(&c, "postBatchResumeToken", &tok);
        bson_destroy(&tok);
    }
    BSON_APPEND_INT64(&c, "id", closed ? 0 : cur->id);
    BSON_APPEND_UTF8(&c, "ns", cur->ns);
    bson_append_document_end(&reply, &c);
    BSON_APPEND_DOUBLE(&reply, "ok", 1.0);
    if (!flavor_cs_pbrt(r->conn->srv) || r->conn->srv->opts.flavor == SIM_FLAVOR_COSMOS) {
        /* DocumentDB's replies carry operationTime (quoted in its errors, e.g. on the MongoDB community forum); a
         * driver without a post-batch token resumes from it (change-streams specification). Cosmos DB RU accepts
         * startAtOperationTime (adiom-data/dsync#44), whose value drivers take from a reply's operationTime; that its
         * stream replies carry one is inferred (its opaque tokens hold no time). */
        uint64_t ts;
        int64_t t, wall;
        cmd_majority_optime(r->conn->srv, &ts, &t, &wall);
        BSON_APPEND_TIMESTAMP(&reply, "operationTime", OPLOG_TS_SECS(ts), OPLOG_TS_INC(ts));
    }
    reply_bson(r, &reply);
    bson_destroy(&reply);
}

/* Runs one batch and replies; false (nothing written) when it is empty and the caller may wait instead. */
static bool cs_answer(sim_server *srv, sim_reply *r, cs_cursor *cur, bool first, int64_t batch, bool may_wait)
{
    cs_env env;
    cs_env_of(srv, &env);
    bson_t events = BSON_INITIALIZER, pbrt = BSON_INITIALIZER;
    bool closed = false;
    cs_error err;
    if (!cs_next_batch(cur->s, &env, batch, &events, &pbrt, &closed, &err)) {
        bson_destroy(&events);
        bson_destroy(&pbrt);
        cs_cursor_free(srv, cur);
        cs_reply_error(r, &err);
        return true;
    }
    if (may_wait && bson_empty(&events) && !closed) {
        bson_destroy(&events);
        bson_destroy(&pbrt);
        return false;
    }
    cs_reply_batch(r, cur, first, &events, &pbrt, closed);
    bson_destroy(&events);
    bson_destroy(&pbrt);
    if (closed)
        cs_cursor_free(srv, cur);
    return true;
}

/* Whether the pipeline's first stage is a $changeStream with allChangesForCluster: true. */
static bool refuses_cluster_stream(const bson_t *pipeline)
{
    bson_iter_t it, st, cs;
    if (!bson_iter_init(&it, pipeline) || !bson_iter_next(&it) || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &st) || !bson_iter_find(&st, "$changeStream") || !BSON_ITER_HOLDS_DOCUMENT(&st) ||
        !bson_iter_recurse(&st, &cs) || !bson_iter_find(&cs, "allChangesForCluster"))
        return false;
    return bson_iter_as_bool(&cs);
}

void cs_cmd_aggregate(sim_server *srv, sim_reply *r, const bson_t *cmd, const char *db)
{
    bson_iter_t it, p;
    const char *coll = NULL;
    bson_iter_init(&it, cmd);
    bson_iter_next(&it);
    if (BSON_ITER_HOLDS_UTF8(&it)) {
        coll = bson_iter_utf8(&it, NULL);
    } else if (!BSON_ITER_HOLDS_NUMBER(&it) || bson_iter_as_int64(&it) != 1) {
        reply_error(r, 2, "Invalid {aggregate: ...} value: must be a collection name or 1");
        return;
    }
    if (srv->stepped_down) {
        cs_error e = {.code = 10107};
        snprintf(e.msg, sizeof e.msg, "not primary");
        cs_reply_error(r, &e);
        return;
    }
    bson_t pipeline;
    uint32_t len;
    const uint8_t *data;
    if (!bson_iter_init_find(&p, cmd, "pipeline") || !BSON_ITER_HOLDS_ARRAY(&p)) {
        reply_error(r, 14, "'pipeline' option must be specified as an array");
        return;
    }
    bson_iter_array(&p, &len, &data);
    bson_init_static(&pipeline, data, len);
    /* aggregation_request_helper.cpp: "The 'cursor' option is required, except for aggregate with the explain
     * argument" (FailedToParse). */
    bson_iter_t cu, bs;
    int64_t batch = 101; /* the server's default first batch (query_request_helper kDefaultBatchSize) */
    if (!bson_iter_init_find(&cu, cmd, "cursor") || !BSON_ITER_HOLDS_DOCUMENT(&cu)) {
        reply_error(r, 9, "The 'cursor' option is required, except for aggregate with the explain argument");
        return;
    }
    if (bson_iter_recurse(&cu, &bs) && bson_iter_find(&bs, "batchSize") && BSON_ITER_HOLDS_NUMBER(&bs))
        batch = bson_iter_as_int64(&bs);
    /* A change stream reads majority-committed data; the specification's drivers send readConcern majority or
     * none (mongodb/specifications change-streams.md). mongosim refuses other levels with a message of its own
     * (the server's exact check is not modelled) and always reads the majority commit point. */
    bson_iter_t rct, rc;
    if (find_path(&rct, cmd, "readConcern.level", &rc) && BSON_ITER_HOLDS_UTF8(&rc)) {
        const char *lvl = bson_iter_utf8(&rc, NULL);
        if (strcmp(lvl, "majority") != 0 && strcmp(lvl, "local") != 0) {
            reply_error(r, 72, "Change stream must use majority read concern, got: %s", lvl);
            return;
        }
    }
    if (srv->opts.refuse_cluster_stream && refuses_cluster_stream(&pipeline)) {
        /* A cluster-wide stream needs the changeStream and find actions on every non-system collection of every
         * database (docs "Change Streams > Access Control"; document_source_change_stream.cpp /
         * change_stream_pipeline_helpers: the privileges of a cluster-wide stream are on the whole cluster,
         * ResourcePattern::forAnyNormalResource). The command's authorization check fails first
         * (commands.cpp, CommandHelpers / _checkAuthorizationImpl: uasserted(ErrorCodes::Unauthorized, "not
         * authorized on <db> to execute command <the command, redacted>")). The server prints the command as
         * BSONObj::toString ({ aggregate: 1, ... }); mongosim prints it as relaxed extended JSON. */
        char *js = bson_as_relaxed_extended_json(cmd, NULL);
        reply_error(r, 13, "not authorized on %s to execute command %s", db, js ? js : "{ aggregate: 1 }");
        bson_free(js);
        return;
    }
    bson_t opened;
    if (!flavor_cs_open(srv, r, db, coll, &pipeline, &opened)) {
        bson_destroy(&opened);
        return;
    }
    cs_env env;
    cs_env_of(srv, &env);
    cs_error err;
    cs_stream *s = cs_open(&env, db, coll, &opened, &err);
    bson_destroy(&opened);
    if (!s) {
        cs_reply_error(r, &err);
        return;
    }
    cs_cursor *cur = calloc(1, sizeof *cur);
    if (!cur)
        abort();
    cur->s = s;
    /* Ids apart from commands.c's cursors (whose ids keep bit 62 clear). */
    do {
        cur->id =
            (int64_t)((((uint64_t)rand() << 31 ^ (uint64_t)rand()) & 0x3fffffffffffffffull) | 0x4000000000000000ull);
    } while (cs_find(srv, cur->id));
    /* Cursor ns (A1): db.coll, db.$cmd.aggregate, admin.$cmd.aggregate. */
    if (coll)
        snprintf(cur->ns, sizeof cur->ns, "%s.%s", db, coll);
    else
        snprintf(cur->ns, sizeof cur->ns, "%s.$cmd.aggregate", db);
    cur->next = srv->cs_cursors;
    srv->cs_cursors = cur;
    cs_answer(srv, r, cur, true, batch, false);
}

void cs_cmd_get_more(sim_server *srv, sim_reply *r, const bson_t *cmd, int64_t id)
{
    cs_cursor *cur = cs_find(srv, id);
    int64_t batch = -1, max_time = 1000; /* without maxTimeMS: 1 s, as mongosim's oplog getMore (commands.c) */
    bson_iter_t it;
    if (bson_iter_init_find(&it, cmd, "batchSize") && BSON_ITER_HOLDS_NUMBER(&it))
        batch = bson_iter_as_int64(&it) > 0 ? bson_iter_as_int64(&it) : -1; /* getMore batchSize 0: no bound */
    if (bson_iter_init_find(&it, cmd, "maxTimeMS") && BSON_ITER_HOLDS_NUMBER(&it))
        max_time = bson_iter_as_int64(&it);
    if (srv->stepped_down) {
        cs_cursor_free(srv, cur);
        cs_reply_error(r, &stepped_down_error);
        return;
    }
    if (cs_answer(srv, r, cur, false, batch, max_time > 0 && !r->no_reply))
        return;
    sim_conn *c = r->conn;
    r->parked = true;
    c->park_kind = SIM_PARK_CHANGESTREAM;
    c->park_cursor = id;
    c->park_batch = batch;
    sim_conn_park(c, (double)max_time / 1000.0);
}

bool cs_parked_try(sim_server *srv, sim_conn *c, bool timeout)
{
    sim_reply r = {.conn = c, .request_id = c->park_request, .opcode = SIM_OP_MSG};
    cs_cursor *cur = cs_find(srv, c->park_cursor);
    if (!cur) {
        reply_error(&r, 237, "cursor id %" PRId64 " was killed", c->park_cursor);
        return true;
    }
    if (srv->stepped_down) {
        cs_cursor_free(srv, cur);
        cs_reply_error(&r, &stepped_down_error);
        return true;
    }
    return cs_answer(srv, &r, cur, false, c->park_batch, !timeout);
}

bool cs_kill(sim_server *srv, int64_t id)
{
    cs_cursor *cur = cs_find(srv, id);
    if (!cur)
        return false;
    cs_cursor_free(srv, cur);
    return true;
}

/* pipeline[0] is {$changeStream: ...} */
bool cs_is_change_stream(const bson_t *cmd)
{
    bson_iter_t p, s, k;
    if (!bson_iter_init_find(&p, cmd, "pipeline") || !BSON_ITER_HOLDS_ARRAY(&p) || !bson_iter_recurse(&p, &s) ||
        !bson_iter_next(&s) || !BSON_ITER_HOLDS_DOCUMENT(&s) || !bson_iter_recurse(&s, &k) || !bson_iter_next(&k))
        return false;
    return strcmp(bson_iter_key(&k), "$changeStream") == 0;
}

/*
 * ejson.c — documents as relaxed Extended JSON and _ids as key text (see ejson.h for the formats).
 *
 * NOTES
 * - One recursive writer over bson_iter for both formats; `key` mode differs in numbers (exact canonical values),
 *   sub-documents ([name, value] pairs), arrays ({"$array": ...}), symbols (plain strings) and spacing (jsonb's text
 *   style, so that simple keys equal (doc->'_id')::text).
 * - Strings are escaped and checked for UTF-8 in one pass; runs of plain ASCII are copied whole.
 * - A double in a document is written with the fewest digits that read back as the same double, found directly by
 *   util/dtoa.h's dtoa_g (no printf or strtod runs) and laid out as %.15g would lay them out, ".0" added to an
 *   integral value. Its exact value (for keys) comes from glibc's printf, which prints binary fractions exactly when
 *   given enough digits.
 */
#include "map/ejson.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/dtoa.h"
#include "util/utf8.h"

/* Longest plain form of a canonical key number before scientific notation is used. */
#define KEY_PLAIN_MAX 64

typedef struct {
    strbuf *out;
    bool key;         /* key text instead of relaxed Extended JSON */
    bool jsonb_order; /* every object's members in jsonb's key order (ejson_write_document_jsonb) */
    ejson_error *err;
    /* The path being written, for error messages: the names of the enclosing fields. */
    const char *path[32];
    size_t path_len[32];
    int depth;
} writer;

static ejson_status fail(writer *w, ejson_status st, const char *leaf, size_t leaf_len)
{
    if (w->err == NULL || w->err->status != EJSON_OK)
        return st;
    w->err->status = st;
    char raw[400];
    size_t off = 0;
    int shown = w->depth < 32 ? w->depth : 32;
    for (int i = 0; i <= shown; i++) {
        const char *name = i < shown ? w->path[i] : leaf;
        size_t n = i < shown ? w->path_len[i] : leaf_len;
        if (name == NULL || n == 0)
            continue; /* the top document, or an element of one written as a whole */
        if (i == shown && w->depth > 32 && off + 4 < sizeof raw) {
            memcpy(raw + off, ".…", strlen(".…"));
            off += strlen(".…");
        }
        if (off + 2 >= sizeof raw)
            break;
        if (off > 0)
            raw[off++] = '.';
        if (n > sizeof raw - off - 1)
            n = sizeof raw - off - 1;
        memcpy(raw + off, name, n);
        off += n;
    }
    utf8_sanitize(raw, off, w->err->where, sizeof w->err->where);
    return st;
}

static ejson_status nomem(writer *w)
{
    if (w->err != NULL && w->err->status == EJSON_OK)
        w->err->status = EJSON_NOMEM;
    return EJSON_NOMEM;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* strings */

/* True when none of the eight bytes of w needs a look of its own: each is printable ASCII (0x20 to 0x7F), neither
 * '"' nor '\\'. Without false negatives: a byte below 0x20 sets its top bit in w - 0x20.., whatever the borrow from
 * the byte below; a borrow only makes a clean byte look dirty, which costs a byte-by-byte look and nothing else. */
static inline bool plain8(uint64_t w)
{
    const uint64_t ones = UINT64_C(0x0101010101010101), tops = UINT64_C(0x8080808080808080);
    uint64_t quote = w ^ (ones * '"'), slash = w ^ (ones * '\\');
    uint64_t low = w - ones * 0x20;
    uint64_t has_quote = (quote - ones) & ~quote, has_slash = (slash - ones) & ~slash;
    return ((w | low | has_quote | has_slash) & tops) == 0;
}

/* A JSON string, escaped as PostgreSQL's escape_json writes it: \" \\ \b \f \n \r \t, other controls as \u00XX,
 * everything else (DEL, non-ASCII) as is. False when s is not valid UTF-8. */
static bool put_string(strbuf *out, const char *str, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)str;
    if (!strbuf_reserve(out, len + 2))
        return true; /* the failure is sticky; the caller checks strbuf_failed */
    strbuf_putc(out, '"');
    size_t run = 0; /* start of the pending run of characters copied as they are */
    bool ascii = true;
    size_t words_from = 0; /* where to try eight bytes at a time again: past a word that had to be looked into */
    for (size_t i = 0; i < len; i++) {
        if (i >= words_from) {
            while (i + 8 <= len) {
                uint64_t w;
                memcpy(&w, s + i, 8);
                if (!plain8(w))
                    break;
                i += 8;
            }
            if (i >= len)
                break;
            words_from = i + 8;
        }
        unsigned char c = s[i];
        if (c >= 0x80) {
            ascii = false;
            continue;
        }
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        strbuf_append(out, s + run, i - run);
        run = i + 1;
        char esc[7] = {'\\', 0, 0, 0, 0, 0, 0};
        size_t n = 2;
        switch (c) {
        case '"':
            esc[1] = '"';
            break;
        case '\\':
            esc[1] = '\\';
            break;
        case '\b':
            esc[1] = 'b';
            break;
        case '\f':
            esc[1] = 'f';
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        case '\t':
            esc[1] = 't';
            break;
        default:
            esc[1] = 'u';
            esc[2] = '0';
            esc[3] = '0';
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            n = 6;
            break;
        }
        strbuf_append(out, esc, n);
    }
    strbuf_append(out, s + run, len - run);
    strbuf_putc(out, '"');
    return ascii || utf8_valid(str, len, true);
}

static ejson_status write_string(writer *w, const char *s, size_t len, const char *name, size_t name_len)
{
    if (!put_string(w->out, s, len))
        return fail(w, EJSON_BAD_UTF8, name, name_len);
    return strbuf_failed(w->out) ? nomem(w) : EJSON_OK;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* numbers */

/* An integer's decimal digits into buf (at least 21 bytes), without a terminator; returns the length. */
static size_t int_text(int64_t v, char *buf)
{
    char tmp[24];
    size_t n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    size_t len = 0;
    if (v < 0)
        buf[len++] = '-';
    while (n > 0)
        buf[len++] = tmp[--n];
    return len;
}

static void put_int(strbuf *out, int64_t v)
{
    char buf[24];
    strbuf_append(out, buf, int_text(v, buf));
}

/* The shortest text that reads back to d (finite), laid out as %.15g would (dtoa_g), with ".0" added to an integral
 * value written without a point or exponent, so that it reads back as a double and not an integer. */
static size_t shortest_double(double d, char buf[DTOA_G_SIZE + 2])
{
    size_t n = dtoa_g(d, 15, buf);
    if (strpbrk(buf, ".e") == NULL) {
        memcpy(buf + n, ".0", 3);
        n += 2;
    }
    return n;
}

/* Canonical key form of a finite, non-zero number given as sign, digits (no leading or trailing zeros, at least
 * one) and a power of ten: value = (neg ? -1 : 1) * digits * 10^exp10. */
static void put_canonical(strbuf *out, bool neg, const char *digits, size_t nd, long exp10)
{
    /* Plain form length: the digits, the zeros on either side, the point and the sign. */
    long int_digits = (long)nd + exp10; /* digits before the point in the plain form */
    size_t plain;
    if (exp10 >= 0)
        plain = nd + (size_t)exp10;
    else if (int_digits > 0)
        plain = nd + 1;
    else
        plain = 2 + (size_t)(-int_digits) + nd;
    plain += neg;
    if (neg)
        strbuf_putc(out, '-');
    if (plain <= KEY_PLAIN_MAX) {
        if (exp10 >= 0) {
            strbuf_append(out, digits, nd);
            for (long i = 0; i < exp10; i++)
                strbuf_putc(out, '0');
        } else if (int_digits > 0) {
            strbuf_append(out, digits, (size_t)int_digits);
            strbuf_putc(out, '.');
            strbuf_append(out, digits + int_digits, nd - (size_t)int_digits);
        } else {
            strbuf_append(out, "0.", 2);
            for (long i = 0; i < -int_digits; i++)
                strbuf_putc(out, '0');
            strbuf_append(out, digits, nd);
        }
        return;
    }
    strbuf_putc(out, digits[0]);
    if (nd > 1) {
        strbuf_putc(out, '.');
        strbuf_append(out, digits + 1, nd - 1);
    }
    strbuf_printf(out, "E%+ld", exp10 + (long)nd - 1);
}

/* Canonical form of a plain decimal text "[-]DIGITS[.DIGITS]" (as printf %f writes it), or of "[-]D.DDDE[+-]X"
 * (as libbson writes a decimal128). Zero becomes "0". */
static void put_canonical_text(strbuf *out, const char *text)
{
    const char *p = text;
    bool neg = *p == '-';
    if (*p == '-' || *p == '+')
        p++;
    char stackbuf[160];
    size_t cap = strlen(p) + 1;
    char *digits = cap <= sizeof stackbuf ? stackbuf : malloc(cap);
    if (digits == NULL) {
        out->failed = true;
        return;
    }
    size_t nd = 0;
    long exp10 = 0;
    bool after_point = false;
    for (; *p && *p != 'E' && *p != 'e'; p++) {
        if (*p == '.') {
            after_point = true;
            continue;
        }
        if (nd == 0 && *p == '0') {
            if (after_point)
                exp10--;
            continue; /* leading zero */
        }
        digits[nd++] = *p;
        if (after_point)
            exp10--;
    }
    if (*p == 'E' || *p == 'e')
        exp10 += strtol(p + 1, NULL, 10);
    while (nd > 0 && digits[nd - 1] == '0') {
        nd--;
        exp10++;
    }
    if (nd == 0)
        strbuf_putc(out, '0');
    else
        put_canonical(out, neg, digits, nd, exp10);
    if (digits != stackbuf)
        free(digits);
}

static void put_nonfinite(strbuf *out, double d, bool key)
{
    const char *v = isnan(d) ? "NaN" : d > 0 ? "Infinity" : "-Infinity";
    strbuf_printf(out, key ? "{\"$numberDouble\": \"%s\"}" : "{\"$numberDouble\":\"%s\"}", v);
}

static void put_double(writer *w, double d)
{
    strbuf *out = w->out;
    if (!isfinite(d)) {
        put_nonfinite(out, d, w->key);
        return;
    }
    if (!w->key) {
        if (d == 0 && signbit(d)) {
            strbuf_puts(out, "{\"$numberDouble\":\"-0.0\"}");
            return;
        }
        char buf[DTOA_G_SIZE + 2];
        size_t n = shortest_double(d, buf);
        strbuf_append(out, buf, n);
        return;
    }
    if (d == 0) {
        strbuf_putc(out, '0');
        return;
    }
    /* The exact value: d = m * 2^e with m odd; -e fraction digits print it exactly. */
    int e2;
    double m = frexp(fabs(d), &e2); /* 0.5 <= m < 1, d = m * 2^e2 */
    uint64_t mant = (uint64_t)ldexp(m, 53);
    int e = e2 - 53;
    while (mant != 0 && (mant & 1) == 0) {
        mant >>= 1;
        e++;
    }
    int frac = e < 0 ? -e : 0;
    char small[1500];
    int n = snprintf(small, sizeof small, "%.*f", frac, d);
    if (n < 0 || (size_t)n >= sizeof small) {
        out->failed = true;
        return;
    }
    put_canonical_text(out, small);
}

static void put_decimal128(writer *w, const bson_decimal128_t *dec)
{
    char text[BSON_DECIMAL128_STRING];
    bson_decimal128_to_string(dec, text);
    if (!w->key) {
        strbuf_printf(w->out, "{\"$numberDecimal\":\"%s\"}", text);
        return;
    }
    const char *t = text[0] == '-' ? text + 1 : text;
    if (strcmp(t, "NaN") == 0)
        put_nonfinite(w->out, NAN, true);
    else if (strcmp(t, "Infinity") == 0)
        put_nonfinite(w->out, text[0] == '-' ? -INFINITY : INFINITY, true);
    else
        put_canonical_text(w->out, text);
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* other scalars */

static void put_oid(writer *w, const bson_oid_t *oid)
{
    static const char hexd[] = "0123456789abcdef";
    char text[48];
    size_t n = w->key ? 10 : 9;
    memcpy(text, w->key ? "{\"$oid\": \"" : "{\"$oid\":\"", n);
    for (int i = 0; i < 12; i++) {
        text[n++] = hexd[oid->bytes[i] >> 4];
        text[n++] = hexd[oid->bytes[i] & 15];
    }
    text[n++] = '"';
    text[n++] = '}';
    strbuf_append(w->out, text, n);
}

/* Days since 1970-01-01 to a civil date (proleptic Gregorian), for any day count. */
static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t yy = (int64_t)yoe + era * 400;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = yy + (*m <= 2);
}

#define DATE_ISO_MAX_MS INT64_C(253402300799999) /* 9999-12-31T23:59:59.999Z */

static void put_date(writer *w, int64_t ms)
{
    strbuf *out = w->out;
    if (ms < 0 || ms > DATE_ISO_MAX_MS) {
        strbuf_printf(out,
                      w->key ? "{\"$date\": {\"$numberLong\": \"%" PRId64 "\"}}"
                             : "{\"$date\":{\"$numberLong\":\"%" PRId64 "\"}}",
                      ms);
        return;
    }
    int64_t secs = ms / 1000, days = secs / 86400;
    unsigned rem = (unsigned)(secs % 86400), millis = (unsigned)(ms % 1000);
    int64_t y;
    unsigned mo, d;
    civil_from_days(days, &y, &mo, &d);
    /* {"$date":"YYYY-MM-DDTHH:MM:SS[.mmm]Z"}, digits placed by hand (this runs for every date of every document) */
    char text[48];
    size_t n = w->key ? 11 : 10;
    memcpy(text, w->key ? "{\"$date\": \"" : "{\"$date\":\"", n);
    unsigned fields[6] = {(unsigned)y, mo, d, rem / 3600, rem / 60 % 60, rem % 60};
    static const char sep[6] = {'-', '-', 'T', ':', ':', 0};
    for (int f = 0; f < 6; f++) {
        unsigned v = fields[f];
        if (f == 0) {
            text[n++] = (char)('0' + v / 1000);
            text[n++] = (char)('0' + v / 100 % 10);
        }
        text[n++] = (char)('0' + v / 10 % 10);
        text[n++] = (char)('0' + v % 10);
        if (sep[f])
            text[n++] = sep[f];
    }
    if (millis != 0) {
        text[n++] = '.';
        text[n++] = (char)('0' + millis / 100);
        text[n++] = (char)('0' + millis / 10 % 10);
        text[n++] = (char)('0' + millis % 10);
    }
    memcpy(text + n, "Z\"}", 3);
    strbuf_append(out, text, n + 3);
}

static void put_base64(strbuf *out, const uint8_t *data, size_t len)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (!strbuf_reserve(out, (len + 2) / 3 * 4))
        return;
    char *p = out->data + out->len;
    size_t i = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)data[i] << 16 | (uint32_t)data[i + 1] << 8 | data[i + 2];
        *p++ = tbl[v >> 18];
        *p++ = tbl[(v >> 12) & 63];
        *p++ = tbl[(v >> 6) & 63];
        *p++ = tbl[v & 63];
    }
    if (i < len) {
        uint32_t v = (uint32_t)data[i] << 16 | (i + 1 < len ? (uint32_t)data[i + 1] << 8 : 0);
        *p++ = tbl[v >> 18];
        *p++ = tbl[(v >> 12) & 63];
        *p++ = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
        *p++ = '=';
    }
    out->len = (size_t)(p - out->data);
    out->data[out->len] = '\0';
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* how long a document's text can be */

/* The most bytes a string's text takes: its bytes, escapes counted (a control character as \u00XX, a quote or a
 * backslash as two), and the quotes. */
static size_t string_bound(const char *s, size_t len)
{
    size_t n = len + 2;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20)
            n += 5;
        else if (c == '"' || c == '\\')
            n += 1;
    }
    return n;
}

/* An upper bound of the relaxed Extended JSON of the container (data, len); SIZE_MAX when the bytes are not BSON
 * (the writer then says why). Every fixed-size value counts the longest text its type can take. */
static size_t container_bound(const uint8_t *data, uint32_t len, int depth)
{
    bson_iter_t it;
    if (depth > EJSON_MAX_DEPTH || !bson_iter_init_from_data(&it, data, len))
        return SIZE_MAX;
    size_t n = 2;
    while (bson_iter_next(&it)) {
        n += string_bound(bson_iter_key(&it), bson_iter_key_len(&it)) + 2; /* "key": and a comma */
        uint32_t l = 0, l2 = 0;
        const uint8_t *d = NULL;
        const char *str = NULL, *str2 = NULL;
        size_t sub;
        switch (bson_iter_type(&it)) {
        case BSON_TYPE_UTF8:
            str = bson_iter_utf8(&it, &l);
            n += string_bound(str, l);
            break;
        case BSON_TYPE_DOCUMENT:
        case BSON_TYPE_ARRAY:
            if (BSON_ITER_HOLDS_ARRAY(&it))
                bson_iter_array(&it, &l, &d);
            else
                bson_iter_document(&it, &l, &d);
            if ((sub = container_bound(d, l, depth + 1)) == SIZE_MAX)
                return SIZE_MAX;
            n += sub;
            break;
        case BSON_TYPE_BINARY: {
            bson_subtype_t st;
            bson_iter_binary(&it, &st, &l, &d);
            n += 4 * ((size_t)l / 3 + 1) + 48;
            break;
        }
        case BSON_TYPE_REGEX:
            str = bson_iter_regex(&it, &str2);
            n += string_bound(str, strlen(str)) + string_bound(str2, strlen(str2)) + 64;
            break;
        case BSON_TYPE_DBPOINTER: {
            const bson_oid_t *oid;
            bson_iter_dbpointer(&it, &l, &str, &oid);
            n += string_bound(str, l) + 96;
            break;
        }
        case BSON_TYPE_CODE:
            str = bson_iter_code(&it, &l);
            n += string_bound(str, l) + 16;
            break;
        case BSON_TYPE_SYMBOL:
            str = bson_iter_symbol(&it, &l);
            n += string_bound(str, l) + 16;
            break;
        case BSON_TYPE_CODEWSCOPE:
            str = bson_iter_codewscope(&it, &l, &l2, &d);
            if ((sub = container_bound(d, l2, depth + 1)) == SIZE_MAX)
                return SIZE_MAX;
            n += string_bound(str, l) + sub + 32;
            break;
        default:
            n += 64; /* numbers, dates, ObjectIds, timestamps, decimals and the rest: at most this long */
            break;
        }
    }
    return it.err_off != 0 ? SIZE_MAX : n;
}

size_t ejson_document_bound(const uint8_t *data, size_t len)
{
    return len > UINT32_MAX ? SIZE_MAX : container_bound(data, (uint32_t)len, 1);
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* the walk */

static ejson_status write_iter_value(writer *w, bson_iter_t *it, const char *name, size_t name_len);

static ejson_status enter(writer *w, const char *name, size_t name_len)
{
    if (w->depth >= EJSON_MAX_DEPTH)
        return fail(w, EJSON_TOO_DEEP, name, name_len);
    if (w->depth < 32) {
        w->path[w->depth] = name;
        w->path_len[w->depth] = name_len;
    }
    w->depth++;
    return EJSON_OK;
}

/* One member (or array element) of a container, after a comma unless it is the first. */
static ejson_status write_member(writer *w, bson_iter_t *it, bool is_array, bool first)
{
    strbuf *out = w->out;
    uint32_t klen = bson_iter_key_len(it);
    const char *k = bson_iter_key(it);
    if (!first)
        strbuf_puts(out, w->key ? ", " : ",");
    if (!is_array) {
        if (w->key)
            strbuf_putc(out, '[');
        if (!put_string(out, k, klen))
            return fail(w, EJSON_BAD_UTF8, k, klen);
        strbuf_puts(out, w->key ? ", " : ":");
    }
    ejson_status st = write_iter_value(w, it, k, klen);
    if (st == EJSON_OK && !is_array && w->key)
        strbuf_putc(out, ']');
    return st;
}

/* ---- jsonb's key order ----
 * PostgreSQL keeps an object's keys sorted, shorter keys first and equal lengths bytewise, and sorts the pairs of
 * every object it reads (of two equal keys, the later one is kept). A document's members come in MongoDB's order,
 * which is seldom that one, and the sort cost the server up to a fifth of its CPU per row in a COPY of small
 * documents (docs/benchmarks.md, "Keys in jsonb's order"). Written already sorted, the server's sort only checks. */

typedef struct {
    const char *name;
    uint32_t name_len;
    uint32_t off; /* bson_iter_offset: the member's place, which also keeps equal names in their order */
} member;

#define MEMBERS_ON_STACK 16

static int member_cmp(const void *pa, const void *pb)
{
    const member *a = pa, *b = pb;
    if (a->name_len != b->name_len)
        return a->name_len < b->name_len ? -1 : 1;
    int c = memcmp(a->name, b->name, a->name_len);
    return c != 0 ? c : (a->off < b->off ? -1 : a->off > b->off);
}

/* The members of an object in jsonb's order. it is positioned before the first member. */
static ejson_status write_members_sorted(writer *w, const uint8_t *data, uint32_t len, bson_iter_t *it,
                                         const char *name, size_t name_len)
{
    member local[MEMBERS_ON_STACK], *m = local;
    size_t n = 0, cap = MEMBERS_ON_STACK;
    bool sorted = true;
    ejson_status st = EJSON_OK;
    while (bson_iter_next(it)) {
        if (n == cap) {
            member *bigger = malloc(2 * cap * sizeof *bigger);
            if (bigger == NULL) {
                st = nomem(w);
                goto out;
            }
            memcpy(bigger, m, n * sizeof *m);
            if (m != local)
                free(m);
            m = bigger;
            cap *= 2;
        }
        m[n] = (member){.name = bson_iter_key(it), .name_len = bson_iter_key_len(it), .off = bson_iter_offset(it)};
        sorted = sorted && (n == 0 || member_cmp(&m[n - 1], &m[n]) < 0);
        n++;
    }
    if (it->err_off != 0) {
        st = fail(w, EJSON_BAD_BSON, name, name_len);
        goto out;
    }
    if (!sorted) {
        if (n <= MEMBERS_ON_STACK) { /* insertion sort: few members, often nearly in order */
            for (size_t i = 1; i < n; i++) {
                member x = m[i];
                size_t j = i;
                for (; j > 0 && member_cmp(&m[j - 1], &x) > 0; j--)
                    m[j] = m[j - 1];
                m[j] = x;
            }
        } else {
            qsort(m, n, sizeof *m, member_cmp);
        }
    }
    for (size_t i = 0; i < n && st == EJSON_OK; i++) {
        bson_iter_t at;
        if (!bson_iter_init_from_data_at_offset(&at, data, len, m[i].off, m[i].name_len))
            st = fail(w, EJSON_BAD_BSON, name, name_len);
        else
            st = write_member(w, &at, false, i == 0);
    }
out:
    if (m != local)
        free(m);
    return st;
}

/* A document (is_array false) or an array, from raw BSON bytes. */
static ejson_status write_container(writer *w, const uint8_t *data, uint32_t len, bool is_array, const char *name,
                                    size_t name_len)
{
    bson_iter_t it;
    ejson_status st = enter(w, name, name_len);
    if (st != EJSON_OK)
        return st;
    if (!bson_iter_init_from_data(&it, data, len)) {
        w->depth--;
        return fail(w, EJSON_BAD_BSON, name, name_len);
    }
    strbuf *out = w->out;
    /* key mode: a document is [[name, value], ...] and an array {"$array": [...]}. */
    if (w->key && is_array)
        strbuf_puts(out, "{\"$array\": [");
    else
        strbuf_putc(out, is_array || w->key ? '[' : '{');
    if (w->jsonb_order && !is_array && !w->key) {
        st = write_members_sorted(w, data, len, &it, name, name_len);
    } else {
        for (bool first = true; st == EJSON_OK && bson_iter_next(&it); first = false)
            st = write_member(w, &it, is_array, first);
        if (st == EJSON_OK && it.err_off != 0)
            st = fail(w, EJSON_BAD_BSON, name, name_len);
    }
    w->depth--;
    if (st != EJSON_OK)
        return st;
    if (w->key && is_array)
        strbuf_puts(out, "]}");
    else
        strbuf_putc(out, is_array || w->key ? ']' : '}');
    return strbuf_failed(out) ? nomem(w) : EJSON_OK;
}

static ejson_status write_iter_value(writer *w, bson_iter_t *it, const char *name, size_t name_len)
{
    strbuf *out = w->out;
    const bool key = w->key;
    switch (bson_iter_type(it)) {
    case BSON_TYPE_DOUBLE:
        put_double(w, bson_iter_double(it));
        break;
    case BSON_TYPE_UTF8: {
        uint32_t len;
        const char *s = bson_iter_utf8(it, &len);
        return write_string(w, s, len, name, name_len);
    }
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY: {
        const uint8_t *data;
        uint32_t len;
        bool arr = bson_iter_type(it) == BSON_TYPE_ARRAY;
        if (arr)
            bson_iter_array(it, &len, &data);
        else
            bson_iter_document(it, &len, &data);
        return write_container(w, data, len, arr, name, name_len);
    }
    case BSON_TYPE_BINARY: {
        bson_subtype_t sub;
        uint32_t len;
        const uint8_t *data;
        bson_iter_binary(it, &sub, &len, &data);
        strbuf_puts(out, key ? "{\"$binary\": {\"base64\": \"" : "{\"$binary\":{\"base64\":\"");
        put_base64(out, data, len);
        strbuf_printf(out, key ? "\", \"subType\": \"%02x\"}}" : "\",\"subType\":\"%02x\"}}", (unsigned)sub);
        break;
    }
    case BSON_TYPE_UNDEFINED:
        strbuf_puts(out, key ? "{\"$undefined\": true}" : "{\"$undefined\":true}");
        break;
    case BSON_TYPE_OID:
        put_oid(w, bson_iter_oid(it));
        break;
    case BSON_TYPE_BOOL:
        strbuf_puts(out, bson_iter_bool(it) ? "true" : "false");
        break;
    case BSON_TYPE_DATE_TIME:
        put_date(w, bson_iter_date_time(it));
        break;
    case BSON_TYPE_NULL:
        strbuf_puts(out, "null");
        break;
    case BSON_TYPE_REGEX: {
        const char *opts;
        const char *pattern = bson_iter_regex(it, &opts);
        /* jsonb orders keys by length, then bytes: "options" before "pattern" (key text only). */
        if (key) {
            strbuf_puts(out, "{\"$regularExpression\": {\"options\": ");
            if (!put_string(out, opts, strlen(opts)))
                return fail(w, EJSON_BAD_UTF8, name, name_len);
            strbuf_puts(out, ", \"pattern\": ");
            if (!put_string(out, pattern, strlen(pattern)))
                return fail(w, EJSON_BAD_UTF8, name, name_len);
            strbuf_puts(out, "}}");
        } else {
            strbuf_puts(out, "{\"$regularExpression\":{\"pattern\":");
            if (!put_string(out, pattern, strlen(pattern)))
                return fail(w, EJSON_BAD_UTF8, name, name_len);
            strbuf_puts(out, ",\"options\":");
            if (!put_string(out, opts, strlen(opts)))
                return fail(w, EJSON_BAD_UTF8, name, name_len);
            strbuf_puts(out, "}}");
        }
        break;
    }
    case BSON_TYPE_DBPOINTER: {
        uint32_t len;
        const char *coll;
        const bson_oid_t *oid;
        char hex[25];
        bson_iter_dbpointer(it, &len, &coll, &oid);
        bson_oid_to_string(oid, hex);
        if (key) {
            strbuf_printf(out, "{\"$dbPointer\": {\"$id\": {\"$oid\": \"%s\"}, \"$ref\": ", hex);
            if (!put_string(out, coll, len))
                return fail(w, EJSON_BAD_UTF8, name, name_len);
            strbuf_puts(out, "}}");
        } else {
            strbuf_puts(out, "{\"$dbPointer\":{\"$ref\":");
            if (!put_string(out, coll, len))
                return fail(w, EJSON_BAD_UTF8, name, name_len);
            strbuf_printf(out, ",\"$id\":{\"$oid\":\"%s\"}}}", hex);
        }
        break;
    }
    case BSON_TYPE_CODE: {
        uint32_t len;
        const char *code = bson_iter_code(it, &len);
        strbuf_puts(out, key ? "{\"$code\": " : "{\"$code\":");
        if (!put_string(out, code, len))
            return fail(w, EJSON_BAD_UTF8, name, name_len);
        strbuf_putc(out, '}');
        break;
    }
    case BSON_TYPE_SYMBOL: {
        uint32_t len;
        const char *sym = bson_iter_symbol(it, &len);
        if (key) /* MongoDB compares a symbol equal to the string with the same text */
            return write_string(w, sym, len, name, name_len);
        strbuf_puts(out, "{\"$symbol\":");
        if (!put_string(out, sym, len))
            return fail(w, EJSON_BAD_UTF8, name, name_len);
        strbuf_putc(out, '}');
        break;
    }
    case BSON_TYPE_CODEWSCOPE: {
        uint32_t len, scope_len;
        const uint8_t *scope;
        const char *code = bson_iter_codewscope(it, &len, &scope_len, &scope);
        strbuf_puts(out, key ? "{\"$code\": " : "{\"$code\":");
        if (!put_string(out, code, len))
            return fail(w, EJSON_BAD_UTF8, name, name_len);
        strbuf_puts(out, key ? ", \"$scope\": " : ",\"$scope\":");
        ejson_status st = write_container(w, scope, scope_len, false, name, name_len);
        if (st != EJSON_OK)
            return st;
        strbuf_putc(out, '}');
        break;
    }
    case BSON_TYPE_INT32:
        put_int(out, bson_iter_int32(it));
        break;
    case BSON_TYPE_TIMESTAMP: {
        uint32_t t, i;
        bson_iter_timestamp(it, &t, &i);
        if (key)
            strbuf_printf(out, "{\"$timestamp\": {\"i\": %" PRIu32 ", \"t\": %" PRIu32 "}}", i, t);
        else
            strbuf_printf(out, "{\"$timestamp\":{\"t\":%" PRIu32 ",\"i\":%" PRIu32 "}}", t, i);
        break;
    }
    case BSON_TYPE_INT64:
        put_int(out, bson_iter_int64(it));
        break;
    case BSON_TYPE_DECIMAL128: {
        bson_decimal128_t dec;
        bson_iter_decimal128(it, &dec);
        put_decimal128(w, &dec);
        break;
    }
    case BSON_TYPE_MAXKEY:
        strbuf_puts(out, key ? "{\"$maxKey\": 1}" : "{\"$maxKey\":1}");
        break;
    case BSON_TYPE_MINKEY:
        strbuf_puts(out, key ? "{\"$minKey\": 1}" : "{\"$minKey\":1}");
        break;
    default:
        return fail(w, EJSON_BAD_BSON, name, name_len);
    }
    return strbuf_failed(out) ? nomem(w) : EJSON_OK;
}

static void writer_init(writer *w, strbuf *out, bool key, ejson_error *err)
{
    memset(w, 0, sizeof *w);
    w->out = out;
    w->key = key;
    w->err = err;
    if (err != NULL) {
        err->status = EJSON_OK;
        err->where[0] = '\0';
    }
}

static ejson_status write_document(strbuf *out, const uint8_t *data, size_t len, bool jsonb_order, ejson_error *err)
{
    writer w;
    writer_init(&w, out, false, err);
    w.jsonb_order = jsonb_order;
    if (len > UINT32_MAX)
        return fail(&w, EJSON_BAD_BSON, NULL, 0);
    return write_container(&w, data, (uint32_t)len, false, NULL, 0);
}

ejson_status ejson_write_document(strbuf *out, const uint8_t *data, size_t len, ejson_error *err)
{
    return write_document(out, data, len, false, err);
}

ejson_status ejson_write_document_jsonb(strbuf *out, const uint8_t *data, size_t len, ejson_error *err)
{
    return write_document(out, data, len, true, err);
}

ejson_status ejson_write_name(strbuf *out, const char *name, size_t len)
{
    if (!put_string(out, name, len))
        return EJSON_BAD_UTF8;
    strbuf_putc(out, ':');
    return strbuf_failed(out) ? EJSON_NOMEM : EJSON_OK;
}

ejson_status ejson_write_member(strbuf *out, const bson_iter_t *it, int depth, ejson_error *err)
{
    writer w;
    writer_init(&w, out, false, err);
    w.depth = depth; /* the enclosing names are not known here: fail() skips them */
    uint32_t klen = bson_iter_key_len(it);
    const char *k = bson_iter_key(it);
    if (!put_string(out, k, klen))
        return fail(&w, EJSON_BAD_UTF8, k, klen);
    strbuf_putc(out, ':');
    bson_iter_t at = *it;
    return write_iter_value(&w, &at, k, klen);
}

/* One value through the iterator path: wrap it in a one-field document. */
static ejson_status write_value(strbuf *out, const bson_value_t *v, bool key, ejson_error *err)
{
    writer w;
    writer_init(&w, out, key, err);
    bson_t tmp = BSON_INITIALIZER;
    bson_iter_t it;
    ejson_status st;
    if (!bson_append_value(&tmp, "", 0, v) || !bson_iter_init(&it, &tmp) || !bson_iter_next(&it))
        st = fail(&w, EJSON_BAD_BSON, NULL, 0);
    else
        st = write_iter_value(&w, &it, NULL, 0);
    bson_destroy(&tmp);
    return st;
}

ejson_status ejson_write_value(strbuf *out, const bson_value_t *v, ejson_error *err)
{
    return write_value(out, v, false, err);
}

ejson_status ejson_write_key(strbuf *out, const bson_value_t *id, ejson_error *err)
{
    return write_value(out, id, true, err);
}

const char *ejson_error_text(const ejson_error *err, char *buf, size_t len)
{
    char at[sizeof err->where + 8] = "";
    if (err->where[0])
        snprintf(at, sizeof at, " at %s", err->where);
    switch (err->status) {
    case EJSON_OK:
        snprintf(buf, len, "no error");
        break;
    case EJSON_BAD_UTF8:
        snprintf(buf, len, "a string or field name%s is not valid UTF-8, which PostgreSQL cannot store", at);
        break;
    case EJSON_TOO_DEEP:
        snprintf(buf, len, "nested deeper than %d levels%s, more than PostgreSQL's JSON parser takes", EJSON_MAX_DEPTH,
                 at);
        break;
    case EJSON_BAD_BSON:
        snprintf(buf, len, "malformed BSON%s", at);
        break;
    case EJSON_NOMEM:
        snprintf(buf, len, "out of memory");
        break;
    }
    return buf;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* conveniences and entry preparation */

char *ejson_document(const bson_t *doc, size_t *len)
{
    strbuf b = STRBUF_INIT;
    if (ejson_write_document(&b, bson_get_data(doc), doc->len, NULL) != EJSON_OK) {
        strbuf_free(&b);
        return NULL;
    }
    return strbuf_detach(&b, len);
}

char *ejson_value(const bson_value_t *v)
{
    strbuf b = STRBUF_INIT;
    if (ejson_write_value(&b, v, NULL) != EJSON_OK) {
        strbuf_free(&b);
        return NULL;
    }
    return strbuf_detach(&b, NULL);
}

char *ejson_key(const bson_value_t *id)
{
    strbuf b = STRBUF_INIT;
    if (ejson_write_key(&b, id, NULL) != EJSON_OK) {
        strbuf_free(&b);
        return NULL;
    }
    return strbuf_detach(&b, NULL);
}

/* Records why an op cannot be written; false only when even that fails for memory. */
static bool refuse(op *o, const char *what, const ejson_error *err)
{
    char why[400], text[300];
    snprintf(why, sizeof why, "%s: %s", what, ejson_error_text(err, text, sizeof text));
    free(o->refusal);
    o->refusal = strdup(why);
    return o->refusal != NULL;
}

/* Renders o's payload into o->json (an inserted document in jsonb's key order: it goes into a jsonb column as it
 * is). -1 out of memory, 0 refused (o->refusal set), 1 done. */
static int prepare_json(op *o, strbuf *b, const char *what)
{
    ejson_error err;
    strbuf_reset(b, 0);
    /* Room for the text at once, not by doubling from 256 bytes: about the size of the BSON (names and strings as
     * they are, numbers and dates a little longer); for a large document, the most its text can take, counted first
     * (a 16 MB document grown by doubling would hold its old and new buffers, 16 and 32 MB, while it is copied). */
    size_t room = (size_t)o->doc_len + o->doc_len / 4 + 64;
    if (o->doc_len > 1024 * 1024) {
        size_t bound = ejson_document_bound(o->doc, o->doc_len);
        if (bound != SIZE_MAX)
            room = bound;
    }
    strbuf_reserve(b, room);
    ejson_status st = o->kind == OP_INSERT ? ejson_write_document_jsonb(b, o->doc, o->doc_len, &err)
                                           : ejson_write_document(b, o->doc, o->doc_len, &err);
    if (st == EJSON_NOMEM)
        return -1;
    if (st != EJSON_OK) {
        strbuf_free(b);
        return refuse(o, what, &err) ? 0 : -1;
    }
    size_t len;
    o->json = strbuf_detach(b, &len);
    if (o->json == NULL)
        return -1;
    if (len > UINT32_MAX) {
        free(o->json);
        o->json = NULL;
        ejson_error big = {.status = EJSON_BAD_BSON, .where = ""};
        return refuse(o, "the document's JSON is larger than 4 GB", &big) ? 0 : -1;
    }
    o->json_len = (uint32_t)len;
    return 1;
}

/* The key text, made in this thread's scratch buffer 1 (util/strbuf.h) and kept in the op itself when short (the
 * common keys: an ObjectId's is 36 bytes), so that it costs no allocation. */
#define KEY_SCRATCH 1

static int prepare_key(op *o)
{
    ejson_error err;
    strbuf own = STRBUF_INIT, *b = strbuf_scratch(KEY_SCRATCH);
    if (b == NULL)
        b = &own;
    strbuf_reset(b, 64 * 1024);
    ejson_status st = ejson_write_key(b, &o->id, &err);
    if (st == EJSON_NOMEM || strbuf_failed(b)) {
        strbuf_free(b);
        return -1;
    }
    if (st != EJSON_OK) {
        strbuf_free(&own);
        return refuse(o, "its _id", &err) ? 0 : -1;
    }
    if (b->len < sizeof o->key_inline) {
        memcpy(o->key_inline, b->data, b->len + 1);
        o->id_key = o->key_inline;
    } else if ((o->id_key = malloc(b->len + 1)) != NULL) {
        memcpy(o->id_key, b->data, b->len + 1);
    }
    o->id_key_len = (uint32_t)b->len;
    strbuf_free(&own);
    return o->id_key != NULL ? 1 : -1;
}

bool ejson_prepare_entry(op_entry *e)
{
    strbuf b = STRBUF_INIT;
    bool ok = true;
    for (size_t i = 0; i < e->n && ok; i++) {
        op *o = &e->ops[i];
        int r = 1;
        if (o->mapped != NULL)
            continue; /* a mapped collection's op carries its rows or plan instead (map/project.h) */
        if (o->bucket)
            continue; /* a time-series bucket's rows are made by the sink, from the bucket (sink/tseries.c) */
        /* A mapped op refused for a value its column cannot take still gets its text, for the dead letter. */
        bool refused_by_map = o->map != NULL && o->refusal != NULL;
        switch (o->kind) {
        case OP_INSERT:
        case OP_UPDATE:
            if (o->json == NULL && (o->refusal == NULL || refused_by_map) && o->doc != NULL)
                r = prepare_json(o, &b, o->kind == OP_INSERT ? "the document" : "the update");
            if (r > 0 && o->id_key == NULL && o->refusal == NULL)
                r = prepare_key(o);
            break;
        case OP_DELETE:
            if (o->id_key == NULL && o->refusal == NULL)
                r = prepare_key(o);
            break;
        default:
            break;
        }
        ok = r >= 0;
    }
    strbuf_free(&b);
    return ok;
}

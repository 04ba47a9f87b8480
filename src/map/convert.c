/*
 * convert.c — BSON values in PostgreSQL's binary formats (see convert.h), and the names of map.h's column types.
 *
 * NOTES
 * - The formats are those of PostgreSQL's send/receive functions: big-endian integers and IEEE floats; timestamps
 *   as int64 microseconds and dates as int32 days since 2000-01-01 (UTC); numeric as ndigits, weight, sign, dscale
 *   and base-10000 digits (numeric.c); arrays as ndim, has-null flag, element OID, (length, lower bound) per
 *   dimension, then length-prefixed elements (arrayfuncs.c); uuid as its 16 bytes; jsonb as the version byte 1 and
 *   the JSON text. PostgreSQL checks what it receives (ranges, digits, element OIDs), so a mistake here fails
 *   loudly instead of storing something else.
 * - Every number that is not a plain integer goes through one decimal form (sign, digits, power of ten, and the
 *   scale as written): a decimal128 from its string, a double from its shortest round-trip text, an int64 from its
 *   digits. Integer and numeric columns both read that form, so "integral" and "exact" mean the same thing for
 *   every BSON number type.
 * - Strings are parsed here, strictly, rather than by PostgreSQL's input functions, so what is accepted does not
 *   depend on a server's DateStyle or TimeZone and a refusal is a type error of the value, not a failed batch.
 * - On a failure the output is cut back to the length it had: a caller builds a row field by field in one buffer.
 */
#include "map/convert.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "map/ejson.h"
#include "util/dtoa.h"
#include "util/strbuf.h"
#include "util/utf8.h"

#define SHOW_MAX 60 /* bytes of a value quoted in a reason */

/* PostgreSQL's epoch and ranges (src/include/datatype/timestamp.h). */
#define PG_EPOCH_DAYS        10957                 /* 2000-01-01 in days since 1970-01-01 */
#define PG_EPOCH_MS          INT64_C(946684800000) /* 2000-01-01 in ms since 1970-01-01 */
#define USECS_PER_DAY        INT64_C(86400000000)
#define MS_PER_DAY           INT64_C(86400000)
#define MIN_TIMESTAMP_MS     INT64_C(-211813488000000) /* 4714-11-24 BC 00:00 UTC (julian day 0), since 2000 */
#define END_TIMESTAMP_MS     INT64_C(9223371331200000) /* 294277-01-01 00:00 UTC, excluded, since 2000 */
#define POSTGRES_EPOCH_JDATE 2451545                   /* julian day of 2000-01-01 */
#define DATE_END_JULIAN      INT64_C(2147483494)       /* 5874898-01-01, excluded */

/* numeric's sign word (numeric.c); the special values have no digits. */
#define NUMERIC_POS        0x0000
#define NUMERIC_NEG        0x4000
#define NUMERIC_NAN        0xC000
#define NUMERIC_PINF       0xD000
#define NUMERIC_NINF       0xF000
#define NUMERIC_DSCALE_MAX 0x3FFF

#define VARCHAR_MAX_CHARS 10485760 /* PostgreSQL's limit on n of varchar(n) */

static const struct {
    const char *sql;
    uint32_t oid, array_oid;
} scalars[MAP_SCALAR_COUNT] = {
    [MAP_TEXT] = {"text", 25, 1009},
    [MAP_VARCHAR] = {"varchar", 1043, 1015},
    [MAP_BOOLEAN] = {"boolean", 16, 1000},
    [MAP_SMALLINT] = {"smallint", 21, 1005},
    [MAP_INTEGER] = {"integer", 23, 1007},
    [MAP_BIGINT] = {"bigint", 20, 1016},
    [MAP_NUMERIC] = {"numeric", 1700, 1231},
    [MAP_REAL] = {"real", 700, 1021},
    [MAP_DOUBLE] = {"double precision", 701, 1022},
    [MAP_TIMESTAMPTZ] = {"timestamptz", 1184, 1185},
    [MAP_TIMESTAMP] = {"timestamp", 1114, 1115},
    [MAP_DATE] = {"date", 1082, 1182},
    [MAP_UUID] = {"uuid", 2950, 2951},
    [MAP_BYTEA] = {"bytea", 17, 1001},
    [MAP_JSONB] = {"jsonb", 3802, 3807},
};

static bool scalar_ok(map_scalar s)
{
    return (unsigned)s < MAP_SCALAR_COUNT;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* the types of map.h */

uint32_t map_scalar_oid(map_scalar s)
{
    return scalar_ok(s) ? scalars[s].oid : 0;
}

uint32_t map_type_oid(const map_type *t)
{
    if (!scalar_ok(t->scalar))
        return 0;
    return t->array ? scalars[t->scalar].array_oid : scalars[t->scalar].oid;
}

const char *map_type_sql(const map_type *t, char *buf, size_t len)
{
    const char *name = scalar_ok(t->scalar) ? scalars[t->scalar].sql : "?";
    const char *dims = t->array ? "[]" : "";
    if (t->scalar == MAP_VARCHAR)
        snprintf(buf, len, "varchar(%" PRIu32 ")%s", t->varchar_chars, dims);
    else
        snprintf(buf, len, "%s%s", name, dims);
    return buf;
}

/* text lowercased, with runs of white space made one space between two words and dropped elsewhere:
 * " Character  Varying ( 20 ) [ ]" -> "character varying(20)[]". False when it does not fit. */
static bool normalize_type(const char *text, char *out, size_t len)
{
    size_t n = 0;
    bool space = false;
    for (const char *p = text; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            space = true;
            continue;
        }
        bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        bool prev_word = n > 0 && ((out[n - 1] >= 'a' && out[n - 1] <= 'z') ||
                                   (out[n - 1] >= '0' && out[n - 1] <= '9') || out[n - 1] == '_');
        if (space && word && prev_word) {
            if (n + 1 >= len)
                return false;
            out[n++] = ' ';
        }
        space = false;
        if (n + 1 >= len)
            return false;
        out[n++] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    out[n] = '\0';
    return true;
}

/* "(N)" with 1 <= N <= VARCHAR_MAX_CHARS, and nothing after it. */
static bool parse_varchar_chars(const char *p, uint32_t *n)
{
    if (*p++ != '(' || *p < '1' || *p > '9')
        return false;
    uint64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (uint64_t)(*p - '0');
        if (v > VARCHAR_MAX_CHARS)
            return false;
    }
    if (p[0] != ')' || p[1] != '\0')
        return false;
    *n = (uint32_t)v;
    return true;
}

bool map_type_parse(const char *text, map_type *out)
{
    static const struct {
        const char *name;
        map_scalar s;
    } names[] = {
        {"text", MAP_TEXT},
        {"boolean", MAP_BOOLEAN},
        {"bool", MAP_BOOLEAN},
        {"smallint", MAP_SMALLINT},
        {"int2", MAP_SMALLINT},
        {"integer", MAP_INTEGER},
        {"int", MAP_INTEGER},
        {"int4", MAP_INTEGER},
        {"bigint", MAP_BIGINT},
        {"int8", MAP_BIGINT},
        {"numeric", MAP_NUMERIC},
        {"decimal", MAP_NUMERIC},
        {"real", MAP_REAL},
        {"float4", MAP_REAL},
        {"double precision", MAP_DOUBLE},
        {"float8", MAP_DOUBLE},
        {"timestamptz", MAP_TIMESTAMPTZ},
        {"timestamp with time zone", MAP_TIMESTAMPTZ},
        {"timestamp", MAP_TIMESTAMP},
        {"timestamp without time zone", MAP_TIMESTAMP},
        {"date", MAP_DATE},
        {"uuid", MAP_UUID},
        {"bytea", MAP_BYTEA},
        {"jsonb", MAP_JSONB},
    };
    char buf[64];
    if (text == NULL || !normalize_type(text, buf, sizeof buf))
        return false;
    map_type t = {.scalar = MAP_TEXT, .array = false, .varchar_chars = 0};
    size_t n = strlen(buf);
    if (n > 2 && strcmp(buf + n - 2, "[]") == 0) {
        t.array = true;
        buf[n -= 2] = '\0';
    }
    bool found = false;
    if (strncmp(buf, "varchar(", 8) == 0 || strncmp(buf, "character varying(", 18) == 0) {
        found = parse_varchar_chars(strchr(buf, '('), &t.varchar_chars);
        t.scalar = MAP_VARCHAR;
    }
    for (size_t i = 0; !found && i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(buf, names[i].name) == 0) {
            t.scalar = names[i].s;
            found = true;
        }
    }
    /* A jsonb column holds arrays itself; jsonb[] would be a second, confusing way to store one. */
    if (!found || (t.array && t.scalar == MAP_JSONB))
        return false;
    *out = t;
    return true;
}

const char *map_rest_name(map_rest r)
{
    switch (r) {
    case MAP_REST_DOC:
        return "doc";
    case MAP_REST_EXTRA:
        return "extra";
    case MAP_REST_DROP:
        return "drop";
    }
    return "?";
}

const char *map_on_type_error_name(map_on_type_error e)
{
    switch (e) {
    case MAP_ON_TYPE_ERROR_INHERIT:
        return "inherit";
    case MAP_ON_TYPE_ERROR_DEAD_LETTER:
        return "dead-letter"; /* spelled like [replication] on_error's dead-letter */
    case MAP_ON_TYPE_ERROR_NULL:
        return "null";
    }
    return "?";
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* reasons */

const char *convert_type_name(bson_type_t t)
{
    switch (t) {
    case BSON_TYPE_DOUBLE:
        return "double";
    case BSON_TYPE_UTF8:
        return "string";
    case BSON_TYPE_DOCUMENT:
        return "document";
    case BSON_TYPE_ARRAY:
        return "array";
    case BSON_TYPE_BINARY:
        return "binary";
    case BSON_TYPE_UNDEFINED:
        return "undefined";
    case BSON_TYPE_OID:
        return "ObjectId";
    case BSON_TYPE_BOOL:
        return "bool";
    case BSON_TYPE_DATE_TIME:
        return "date";
    case BSON_TYPE_NULL:
        return "null";
    case BSON_TYPE_REGEX:
        return "regex";
    case BSON_TYPE_DBPOINTER:
        return "DBPointer";
    case BSON_TYPE_CODE:
        return "code";
    case BSON_TYPE_SYMBOL:
        return "symbol";
    case BSON_TYPE_CODEWSCOPE:
        return "code with scope";
    case BSON_TYPE_INT32:
        return "int32";
    case BSON_TYPE_TIMESTAMP:
        return "timestamp";
    case BSON_TYPE_INT64:
        return "int64";
    case BSON_TYPE_DECIMAL128:
        return "decimal128";
    case BSON_TYPE_MAXKEY:
        return "maxKey";
    case BSON_TYPE_MINKEY:
        return "minKey";
    default:
        return "value of an unknown type";
    }
}

/* The shortest %g text that reads back as d; NaN and the infinities as Extended JSON spells them. */
static void double_text(double d, char *buf, size_t len)
{
    char text[DTOA_G_SIZE];
    if (isnan(d))
        snprintf(buf, len, "NaN");
    else if (isinf(d))
        snprintf(buf, len, d > 0 ? "Infinity" : "-Infinity");
    else if (dtoa_g(d, 1, text) > 0)
        snprintf(buf, len, "%s", text);
}

/* The longest prefix of s[0..len) of at most max bytes that ends on a character boundary. */
static size_t cut_at_char(const char *s, size_t len, size_t max)
{
    if (len <= max)
        return len;
    size_t n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

/* s[0..len) made printable and cut after max bytes, "…" marking the cut. */
static void shorten(const char *s, size_t len, size_t max, char *buf, size_t buflen)
{
    size_t n = cut_at_char(s, len, max);
    utf8_sanitize(s, n, buf, buflen);
    if (n < len) {
        size_t off = strlen(buf);
        text_appendf(buf, buflen, &off, "…");
    }
}

/* The value as a reason quotes it: numbers as numbers, a string as a JSON string, the rest as Extended JSON. */
static void value_text(const bson_value_t *v, char *buf, size_t buflen)
{
    strbuf sb = STRBUF_INIT;
    char tmp[BSON_DECIMAL128_STRING > 64 ? BSON_DECIMAL128_STRING : 64];
    bool whole = false; /* already cut to size */
    switch (v->value_type) {
    case BSON_TYPE_DOUBLE:
        double_text(v->value.v_double, tmp, sizeof tmp);
        strbuf_puts(&sb, tmp);
        break;
    case BSON_TYPE_INT32:
        strbuf_printf(&sb, "%" PRId32, v->value.v_int32);
        break;
    case BSON_TYPE_INT64:
        strbuf_printf(&sb, "%" PRId64, v->value.v_int64);
        break;
    case BSON_TYPE_DECIMAL128:
        bson_decimal128_to_string(&v->value.v_decimal128, tmp);
        strbuf_puts(&sb, tmp);
        break;
    case BSON_TYPE_BOOL:
        strbuf_puts(&sb, v->value.v_bool ? "true" : "false");
        break;
    case BSON_TYPE_OID:
        bson_oid_to_string(&v->value.v_oid, tmp);
        strbuf_puts(&sb, tmp);
        break;
    case BSON_TYPE_UTF8: {
        /* Only the part that is shown (a string may be megabytes long), as a JSON string, "…" inside the quotes. */
        bson_value_t head = *v;
        head.value.v_utf8.len = (uint32_t)cut_at_char(v->value.v_utf8.str, v->value.v_utf8.len, SHOW_MAX);
        if (ejson_write_value(&sb, &head, NULL) != EJSON_OK) {
            strbuf_reset(&sb, 0);
            strbuf_putc(&sb, '"');
            strbuf_append(&sb, head.value.v_utf8.str, head.value.v_utf8.len);
            strbuf_putc(&sb, '"');
        }
        if (head.value.v_utf8.len < v->value.v_utf8.len && sb.len > 0) {
            sb.len--;
            strbuf_puts(&sb, "…\"");
        }
        whole = true;
        break;
    }
    default:
        if (ejson_write_value(&sb, v, NULL) != EJSON_OK) {
            strbuf_reset(&sb, 0);
            strbuf_puts(&sb, "(not printable)");
        }
        break;
    }
    if (strbuf_failed(&sb) || sb.data == NULL)
        snprintf(buf, buflen, "(not printable)");
    else
        shorten(sb.data, sb.len, whole ? sb.len : SHOW_MAX, buf, buflen);
    strbuf_free(&sb);
}

/* Where a reason goes, and what it starts with: the prefix, then "element 3: " for an array's element (written only
 * when a value is refused, so that an array's elements cost no formatting). */
typedef struct {
    char *why;
    size_t whylen;
    const char *prefix;
    bool in_array;    /* the value is element `element` of an array */
    uint32_t element; /* from 0 */
} reason;

/* Writes "<prefix><type> <value> <what>" (without the value when v is NULL); returns CONVERT_TYPE_ERROR. */
static convert_status refuse(const reason *r, const bson_value_t *v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static convert_status refuse(const reason *r, const bson_value_t *v, const char *fmt, ...)
{
    if (r->why == NULL || r->whylen == 0)
        return CONVERT_TYPE_ERROR;
    size_t off = 0;
    r->why[0] = '\0';
    text_appendf(r->why, r->whylen, &off, "%s", r->prefix);
    if (r->in_array)
        text_appendf(r->why, r->whylen, &off, "element %" PRIu32 ": ", r->element);
    if (v != NULL) {
        char shown[SHOW_MAX * 8];
        value_text(v, shown, sizeof shown);
        text_appendf(r->why, r->whylen, &off, "%s %s ", convert_type_name(v->value_type), shown);
    }
    va_list ap;
    va_start(ap, fmt);
    text_vappendf(r->why, r->whylen, &off, fmt, ap);
    va_end(ap);
    return CONVERT_TYPE_ERROR;
}

static convert_status incompatible(const reason *r, const bson_value_t *v, map_scalar s)
{
    return refuse(r, v, "cannot be converted to %s", scalars[s].sql);
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* output helpers */

static void put_be64(strbuf *out, uint64_t x)
{
    strbuf_put_be32(out, (uint32_t)(x >> 32));
    strbuf_put_be32(out, (uint32_t)x);
}

static void put_float4(strbuf *out, float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    strbuf_put_be32(out, bits);
}

static void put_float8(strbuf *out, double d)
{
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    put_be64(out, bits);
}

/* Overwrites 4 bytes at off (a length or count written as a placeholder before). */
static void patch_be32(strbuf *out, size_t off, uint32_t x)
{
    if (strbuf_failed(out))
        return;
    unsigned char *p = (unsigned char *)out->data + off;
    p[0] = (unsigned char)(x >> 24);
    p[1] = (unsigned char)(x >> 16);
    p[2] = (unsigned char)(x >> 8);
    p[3] = (unsigned char)x;
}

static void truncate_to(strbuf *out, size_t len)
{
    if (out->data != NULL && len <= out->len) {
        out->len = len;
        out->data[len] = '\0';
    }
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* decimal numbers */

typedef enum { DEC_FINITE, DEC_NAN, DEC_PINF, DEC_NINF } dec_kind;

/* value = (neg ? -1 : 1) * digits * 10^exp; digits have no leading or trailing zeros (nd == 0 for zero, which is
 * never negative). scale is the count of digits after the point as the number was written (numeric's dscale):
 * "1.50" has digits 15, exp -1, scale 2. */
typedef struct {
    dec_kind kind;
    bool neg;
    char digits[48];
    int nd;
    int exp;
    int scale;
} decimal;

#define DEC_EXP_LIMIT 100000 /* far beyond decimal128's and double's exponents; keeps the arithmetic in int */

/* Reads "[+-]digits[.digits][(e|E)[+-]digits]", "NaN", "[+-]Inf[inity]" (any case): the texts of
 * bson_decimal128_to_string and of printf's %e. False for anything else or more than 47 significant digits. */
static bool decimal_parse(const char *s, decimal *d)
{
    memset(d, 0, sizeof *d);
    d->neg = *s == '-';
    if (*s == '-' || *s == '+')
        s++;
    if (strcasecmp(s, "nan") == 0) {
        d->kind = DEC_NAN;
        d->neg = false;
        return true;
    }
    if (strcasecmp(s, "inf") == 0 || strcasecmp(s, "infinity") == 0) {
        d->kind = d->neg ? DEC_NINF : DEC_PINF;
        return true;
    }
    int frac = 0, seen = 0;
    bool point = false;
    for (; (*s >= '0' && *s <= '9') || (*s == '.' && !point); s++) {
        if (*s == '.') {
            point = true;
            continue;
        }
        seen++;
        frac += point;
        if (d->nd == 0 && *s == '0')
            continue;
        if (d->nd >= (int)sizeof d->digits - 1)
            return false;
        d->digits[d->nd++] = *s;
    }
    if (seen == 0)
        return false;
    long e = 0;
    if (*s == 'e' || *s == 'E') {
        char *end;
        e = strtol(s + 1, &end, 10);
        if (end == s + 1 || e > DEC_EXP_LIMIT || e < -DEC_EXP_LIMIT)
            return false;
        s = end;
    }
    if (*s != '\0')
        return false;
    d->exp = (int)e - frac;
    d->scale = d->exp < 0 ? -d->exp : 0;
    while (d->nd > 0 && d->digits[d->nd - 1] == '0') {
        d->nd--;
        d->exp++;
    }
    if (d->nd == 0) {
        d->exp = 0;
        d->neg = false;
    }
    d->digits[d->nd] = '\0';
    return true;
}

/* A double as the shortest decimal that reads back as the same double (0.1 is 0.1, not its exact binary value). */
static void decimal_from_double(double x, decimal *d)
{
    char buf[DTOA_G_SIZE];
    if (isnan(x) || isinf(x)) {
        decimal_parse(isnan(x) ? "NaN" : x > 0 ? "Infinity" : "-Infinity", d);
        return;
    }
    dtoa_g(x, 1, buf);
    decimal_parse(buf, d);
}

/* A BSON number as a decimal; false when v is not a number. */
static bool decimal_from_value(const bson_value_t *v, decimal *d)
{
    char buf[BSON_DECIMAL128_STRING > 32 ? BSON_DECIMAL128_STRING : 32];
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        snprintf(buf, sizeof buf, "%" PRId32, v->value.v_int32);
        break;
    case BSON_TYPE_INT64:
        snprintf(buf, sizeof buf, "%" PRId64, v->value.v_int64);
        break;
    case BSON_TYPE_DOUBLE:
        decimal_from_double(v->value.v_double, d);
        return true;
    case BSON_TYPE_DECIMAL128:
        bson_decimal128_to_string(&v->value.v_decimal128, buf);
        break;
    default:
        return false;
    }
    return decimal_parse(buf, d);
}

typedef enum { INT_OK, INT_NOT_INTEGRAL, INT_TOO_BIG } int_status;

static int_status decimal_to_int64(const decimal *d, int64_t *out)
{
    if (d->kind != DEC_FINITE || d->exp < 0)
        return INT_NOT_INTEGRAL;
    if (d->nd + d->exp > 19)
        return INT_TOO_BIG;
    uint64_t m = 0; /* at most 19 digits: below 10^19 < 2^64 */
    for (int i = 0; i < d->nd; i++)
        m = m * 10 + (uint64_t)(d->digits[i] - '0');
    for (int i = 0; i < d->exp; i++)
        m *= 10;
    if (m > (uint64_t)INT64_MAX + d->neg)
        return INT_TOO_BIG;
    if (!d->neg)
        *out = (int64_t)m;
    else
        *out = m == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)m;
    return INT_OK;
}

static int floor_div4(int p)
{
    return p >= 0 ? p / 4 : -((-p + 3) / 4);
}

/* numeric's binary form: ndigits, weight (of the first base-10000 digit), sign, dscale, the digits. */
static convert_status put_numeric(strbuf *out, const decimal *d, const reason *r, const bson_value_t *v)
{
    if (d->kind != DEC_FINITE) {
        uint16_t sign = d->kind == DEC_NAN ? NUMERIC_NAN : d->kind == DEC_PINF ? NUMERIC_PINF : NUMERIC_NINF;
        strbuf_put_be16(out, 0);
        strbuf_put_be16(out, 0);
        strbuf_put_be16(out, sign);
        strbuf_put_be16(out, 0);
        return CONVERT_OK;
    }
    static const uint16_t pow10[4] = {1, 10, 100, 1000};
    uint16_t groups[16] = {0};
    int weight = 0, ngroups = 0;
    if (d->nd > 0) {
        int top = d->exp + d->nd - 1; /* power of ten of the first digit */
        weight = floor_div4(top);
        ngroups = weight - floor_div4(d->exp) + 1;
        for (int i = 0; i < d->nd; i++) {
            int p = top - i, g = floor_div4(p);
            groups[weight - g] = (uint16_t)(groups[weight - g] + (d->digits[i] - '0') * pow10[p - 4 * g]);
        }
    }
    if (weight > INT16_MAX || weight < INT16_MIN || d->scale > NUMERIC_DSCALE_MAX)
        return refuse(r, v, "is out of range for numeric");
    strbuf_put_be16(out, (uint16_t)ngroups);
    strbuf_put_be16(out, (uint16_t)(int16_t)weight);
    strbuf_put_be16(out, d->neg ? NUMERIC_NEG : NUMERIC_POS);
    strbuf_put_be16(out, (uint16_t)d->scale);
    for (int i = 0; i < ngroups; i++)
        strbuf_put_be16(out, groups[i]);
    return CONVERT_OK;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* numbers */

static convert_status put_integer(strbuf *out, map_scalar s, int64_t x, const reason *r, const bson_value_t *v)
{
    int64_t lo = s == MAP_SMALLINT ? INT16_MIN : s == MAP_INTEGER ? INT32_MIN : INT64_MIN;
    int64_t hi = s == MAP_SMALLINT ? INT16_MAX : s == MAP_INTEGER ? INT32_MAX : INT64_MAX;
    if (x < lo || x > hi)
        return refuse(r, v, "is out of range for %s", scalars[s].sql);
    if (s == MAP_SMALLINT)
        strbuf_put_be16(out, (uint16_t)(int16_t)x);
    else if (s == MAP_INTEGER)
        strbuf_put_be32(out, (uint32_t)(int32_t)x);
    else
        put_be64(out, (uint64_t)x);
    return CONVERT_OK;
}

static convert_status to_integer(strbuf *out, map_scalar s, const bson_value_t *v, const reason *r)
{
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        return put_integer(out, s, v->value.v_int32, r, v);
    case BSON_TYPE_INT64:
        return put_integer(out, s, v->value.v_int64, r, v);
    case BSON_TYPE_DOUBLE: {
        double x = v->value.v_double;
        if (!isfinite(x) || x != trunc(x))
            return refuse(r, v, "is not integral");
        /* -2^63 is an int64, 2^63 is not; both are exact doubles. */
        if (x < -9223372036854775808.0 || x >= 9223372036854775808.0)
            return refuse(r, v, "is out of range for %s", scalars[s].sql);
        return put_integer(out, s, (int64_t)x, r, v);
    }
    case BSON_TYPE_DECIMAL128: {
        decimal d;
        int64_t x = 0;
        int_status st = decimal_from_value(v, &d) ? decimal_to_int64(&d, &x) : INT_NOT_INTEGRAL;
        if (st == INT_NOT_INTEGRAL)
            return refuse(r, v, "is not integral");
        if (st == INT_TOO_BIG)
            return refuse(r, v, "is out of range for %s", scalars[s].sql);
        return put_integer(out, s, x, r, v);
    }
    default:
        return incompatible(r, v, s);
    }
}

static convert_status to_numeric(strbuf *out, const bson_value_t *v, const reason *r)
{
    decimal d;
    if (!decimal_from_value(v, &d))
        return incompatible(r, v, MAP_NUMERIC);
    return put_numeric(out, &d, r, v);
}

/* The nearest real or double precision; a finite number too large for the type is refused (not made infinite). */
static convert_status to_float(strbuf *out, map_scalar s, const bson_value_t *v, const reason *r)
{
    bool real = s == MAP_REAL;
    double d = 0;
    float f = 0;
    bool finite = true;
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        d = v->value.v_int32;
        f = (float)v->value.v_int32;
        break;
    case BSON_TYPE_INT64:
        d = (double)v->value.v_int64; /* each rounded once, to its nearest */
        f = (float)v->value.v_int64;
        break;
    case BSON_TYPE_DOUBLE:
        d = v->value.v_double;
        f = (float)d;
        finite = isfinite(d);
        break;
    case BSON_TYPE_DECIMAL128: {
        char buf[BSON_DECIMAL128_STRING];
        bson_decimal128_to_string(&v->value.v_decimal128, buf);
        finite = (buf[0] >= '0' && buf[0] <= '9') || (buf[0] == '-' && buf[1] >= '0' && buf[1] <= '9');
        d = strtod(buf, NULL); /* from the text, so each is rounded once */
        f = strtof(buf, NULL);
        break;
    }
    default:
        return incompatible(r, v, s);
    }
    if (finite && (real ? isinf(f) : isinf(d)))
        return refuse(r, v, "is out of range for %s", scalars[s].sql);
    if (real)
        put_float4(out, f);
    else
        put_float8(out, d);
    return CONVERT_OK;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* strings */

static size_t utf8_chars(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

static convert_status to_text(strbuf *out, const map_type *t, const bson_value_t *v, const reason *r)
{
    const char *s;
    size_t len;
    char hex[25];
    if (v->value_type == BSON_TYPE_OID) {
        bson_oid_to_string(&v->value.v_oid, hex);
        s = hex;
        len = 24;
    } else if (v->value_type == BSON_TYPE_UTF8) {
        s = v->value.v_utf8.str;
        len = v->value.v_utf8.len;
    } else {
        return incompatible(r, v, t->scalar);
    }
    if (!utf8_valid(s, len, true))
        return refuse(r, v, "is not valid UTF-8");
    if (memchr(s, '\0', len) != NULL)
        return refuse(r, v, "contains a NUL character, which PostgreSQL text cannot hold");
    if (t->scalar == MAP_VARCHAR) {
        size_t chars = utf8_chars(s, len);
        if (chars > t->varchar_chars)
            return refuse(r, v, "is %zu characters long, more than varchar(%" PRIu32 ") holds", chars,
                          t->varchar_chars);
    }
    strbuf_append(out, s, len);
    return CONVERT_OK;
}

/* What PostgreSQL's uuid_in reads: 32 hex digits (either case), optionally in braces, with a hyphen allowed after
 * any group of four digits (so the canonical 8-4-4-4-12 form, none at all, or a hyphen every four digits). */
static bool parse_uuid(const char *s, size_t len, uint8_t out[16])
{
    size_t i = 0;
    bool braces = len > 0 && s[0] == '{';
    i += braces;
    for (int b = 0; b < 16; b++) {
        if (i + 2 > len)
            return false;
        int hi = hex_digit(s[i]), lo = hex_digit(s[i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[b] = (uint8_t)(hi << 4 | lo);
        i += 2;
        if (i < len && s[i] == '-' && b % 2 == 1 && b < 15)
            i++;
    }
    if (braces) {
        if (i >= len || s[i] != '}')
            return false;
        i++;
    }
    return i == len;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* dates and times */

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int days_in_month(int y, int m)
{
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 && leap ? 29 : days[m - 1];
}

typedef enum { PARSE_OK, PARSE_BAD, PARSE_RANGE } parse_status;

/* Exactly n digits at s[*i]. */
static bool read_digits(const char *s, size_t len, size_t *i, int n, int *out)
{
    int v = 0;
    for (int k = 0; k < n; k++, (*i)++) {
        if (*i >= len || s[*i] < '0' || s[*i] > '9')
            return false;
        v = v * 10 + (s[*i] - '0');
    }
    *out = v;
    return true;
}

static bool read_char(const char *s, size_t len, size_t *i, char c)
{
    if (*i < len && s[*i] == c) {
        (*i)++;
        return true;
    }
    return false;
}

/* YYYY-MM-DD at s[*i], as days since 2000-01-01. Years 1 to 9999 (PARSE_RANGE outside). */
static parse_status read_date(const char *s, size_t len, size_t *i, int64_t *days)
{
    int y, m, d;
    if (!read_digits(s, len, i, 4, &y) || !read_char(s, len, i, '-') || !read_digits(s, len, i, 2, &m) ||
        !read_char(s, len, i, '-') || !read_digits(s, len, i, 2, &d))
        return PARSE_BAD;
    if (m < 1 || m > 12 || d < 1 || d > days_in_month(y, m))
        return PARSE_BAD;
    if (y < 1)
        return PARSE_RANGE;
    *days = days_from_civil(y, m, d) - PG_EPOCH_DAYS;
    return PARSE_OK;
}

/* [.fraction]: microseconds; digits past the sixth must be zeros (nothing finer than a microsecond is dropped). */
static bool read_fraction(const char *s, size_t len, size_t *i, int64_t *usec)
{
    *usec = 0;
    if (!read_char(s, len, i, '.'))
        return true;
    int n = 0;
    for (; *i < len && s[*i] >= '0' && s[*i] <= '9'; (*i)++, n++) {
        if (n < 6)
            *usec = *usec * 10 + (s[*i] - '0');
        else if (s[*i] != '0')
            return false;
    }
    for (int k = n; k < 6; k++)
        *usec *= 10;
    return n > 0;
}

/* Z, or ±hh[[:]mm], as seconds east of UTC; nothing is UTC too. */
static bool read_offset(const char *s, size_t len, size_t *i, int64_t *secs)
{
    *secs = 0;
    if (*i == len || read_char(s, len, i, 'Z') || read_char(s, len, i, 'z'))
        return true;
    int sign = s[*i] == '+' ? 1 : s[*i] == '-' ? -1 : 0;
    if (sign == 0)
        return false;
    (*i)++;
    int h, m = 0;
    if (!read_digits(s, len, i, 2, &h) || h > 23)
        return false;
    bool colon = read_char(s, len, i, ':');
    if ((colon || *i < len) && (!read_digits(s, len, i, 2, &m) || m > 59))
        return false;
    *secs = sign * (h * 3600 + m * 60);
    return true;
}

/* date [(T|t|space) hh:mm[:ss[.fraction]] [offset]] as microseconds since 2000-01-01 00:00 UTC. */
static parse_status parse_timestamp(const char *s, size_t len, int64_t *usec)
{
    size_t i = 0;
    int64_t days;
    parse_status st = read_date(s, len, &i, &days);
    if (st != PARSE_OK)
        return st;
    int h = 0, mi = 0, sec = 0;
    int64_t frac = 0, offset = 0;
    if (i < len) {
        if (s[i] != 'T' && s[i] != 't' && s[i] != ' ')
            return PARSE_BAD;
        i++;
        if (!read_digits(s, len, &i, 2, &h) || h > 23 || !read_char(s, len, &i, ':') ||
            !read_digits(s, len, &i, 2, &mi) || mi > 59)
            return PARSE_BAD;
        /* :60 is a leap second, which PostgreSQL (without leap seconds) reads as the next minute's :00. */
        if (read_char(s, len, &i, ':') &&
            (!read_digits(s, len, &i, 2, &sec) || sec > 60 || !read_fraction(s, len, &i, &frac)))
            return PARSE_BAD;
        if (!read_offset(s, len, &i, &offset) || i != len)
            return PARSE_BAD;
    }
    *usec = days * USECS_PER_DAY + ((int64_t)h * 3600 + mi * 60 + sec - offset) * 1000000 + frac;
    return PARSE_OK;
}

static convert_status string_to_time(strbuf *out, map_scalar s, const bson_value_t *v, const reason *r)
{
    const char *str = v->value.v_utf8.str;
    size_t len = v->value.v_utf8.len;
    parse_status st;
    if (s == MAP_DATE) {
        size_t i = 0;
        int64_t days = 0;
        st = read_date(str, len, &i, &days);
        if (st == PARSE_OK && i != len)
            st = PARSE_BAD;
        if (st == PARSE_OK)
            strbuf_put_be32(out, (uint32_t)(int32_t)days);
    } else {
        int64_t usec = 0;
        st = parse_timestamp(str, len, &usec);
        if (st == PARSE_OK)
            put_be64(out, (uint64_t)usec);
    }
    if (st == PARSE_BAD)
        return refuse(r, v, "is not a valid %s (%s)", scalars[s].sql,
                      s == MAP_DATE ? "YYYY-MM-DD" : "ISO 8601: YYYY-MM-DD[Thh:mm[:ss[.ffffff]]][Z|±hh[:mm]]");
    if (st == PARSE_RANGE)
        return refuse(r, v, "is out of range for %s (years 1 to 9999 are read from strings)", scalars[s].sql);
    return CONVERT_OK;
}

/* A BSON date (ms since 1970, UTC) as timestamp(tz) microseconds, or as its UTC day. */
static convert_status date_to_time(strbuf *out, map_scalar s, const bson_value_t *v, const reason *r)
{
    int64_t ms = v->value.v_datetime;
    if (s == MAP_DATE) {
        int64_t day = ms / MS_PER_DAY - (ms % MS_PER_DAY < 0); /* floor: 1969-12-31T23:59 is day -1 */
        int64_t pg_day = day - PG_EPOCH_DAYS;
        if (pg_day + POSTGRES_EPOCH_JDATE < 0 || pg_day + POSTGRES_EPOCH_JDATE >= DATE_END_JULIAN)
            return refuse(r, v, "is out of range for date");
        strbuf_put_be32(out, (uint32_t)(int32_t)pg_day);
        return CONVERT_OK;
    }
    /* Compared before subtracting, so that no int64 arithmetic can overflow. */
    if (ms < MIN_TIMESTAMP_MS + PG_EPOCH_MS || ms >= END_TIMESTAMP_MS + PG_EPOCH_MS)
        return refuse(r, v, "is out of range for %s (4713 BC to 294276 AD)", scalars[s].sql);
    put_be64(out, (uint64_t)((ms - PG_EPOCH_MS) * 1000));
    return CONVERT_OK;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* the other types */

static convert_status to_uuid(strbuf *out, const bson_value_t *v, const reason *r)
{
    uint8_t u[16];
    if (v->value_type == BSON_TYPE_UTF8) {
        if (!parse_uuid(v->value.v_utf8.str, v->value.v_utf8.len, u))
            return refuse(r, v, "is not a valid uuid");
        strbuf_append(out, u, 16);
        return CONVERT_OK;
    }
    if (v->value_type == BSON_TYPE_BINARY) {
        bson_subtype_t st = v->value.v_binary.subtype;
        if ((st != BSON_SUBTYPE_UUID && st != BSON_SUBTYPE_UUID_DEPRECATED) || v->value.v_binary.data_len != 16)
            return refuse(r, v, "is not a uuid (binary subtype 4 or 3 of 16 bytes)");
        strbuf_append(out, v->value.v_binary.data, 16);
        return CONVERT_OK;
    }
    return incompatible(r, v, MAP_UUID);
}

static convert_status to_bytea(strbuf *out, const bson_value_t *v, const reason *r)
{
    if (v->value_type == BSON_TYPE_BINARY)
        strbuf_append(out, v->value.v_binary.data, v->value.v_binary.data_len);
    else if (v->value_type == BSON_TYPE_OID)
        strbuf_append(out, v->value.v_oid.bytes, sizeof v->value.v_oid.bytes);
    else
        return incompatible(r, v, MAP_BYTEA);
    return CONVERT_OK;
}

/* Backslashes only occur in strings, where each escape is read as a pair: "\\u0000" is a backslash, then "u0000". */
bool convert_json_has_nul(const char *s, size_t len)
{
    for (const char *p = memchr(s, '\\', len); p != NULL && p + 1 < s + len;) {
        if (p[1] == 'u' && p + 6 <= s + len && memcmp(p + 2, "0000", 4) == 0)
            return true;
        p += 2;
        p = p < s + len ? memchr(p, '\\', (size_t)(s + len - p)) : NULL;
    }
    return false;
}

static convert_status to_jsonb(strbuf *out, const bson_value_t *v, const reason *r)
{
    size_t start = out->len;
    strbuf_putc(out, 1); /* jsonb's binary format version */
    ejson_error err;
    memset(&err, 0, sizeof err);
    ejson_status st = ejson_write_value(out, v, &err);
    if (st == EJSON_NOMEM || strbuf_failed(out))
        return CONVERT_NOMEM;
    if (st != EJSON_OK) {
        char text[300];
        return refuse(r, NULL, "%s cannot be jsonb: %s", convert_type_name(v->value_type),
                      ejson_error_text(&err, text, sizeof text));
    }
    if (convert_json_has_nul(out->data + start + 1, out->len - start - 1))
        return refuse(r, v, "contains a NUL character (\\u0000), which jsonb cannot hold");
    return CONVERT_OK;
}

static convert_status to_scalar(strbuf *out, const map_type *t, const bson_value_t *v, const reason *r)
{
    map_scalar s = t->scalar;
    switch (s) {
    case MAP_TEXT:
    case MAP_VARCHAR:
        return to_text(out, t, v, r);
    case MAP_BOOLEAN:
        if (v->value_type != BSON_TYPE_BOOL)
            return incompatible(r, v, s);
        strbuf_putc(out, v->value.v_bool ? 1 : 0);
        return CONVERT_OK;
    case MAP_SMALLINT:
    case MAP_INTEGER:
    case MAP_BIGINT:
        return to_integer(out, s, v, r);
    case MAP_NUMERIC:
        return to_numeric(out, v, r);
    case MAP_REAL:
    case MAP_DOUBLE:
        return to_float(out, s, v, r);
    case MAP_TIMESTAMPTZ:
    case MAP_TIMESTAMP:
    case MAP_DATE:
        if (v->value_type == BSON_TYPE_UTF8)
            return string_to_time(out, s, v, r);
        if (v->value_type == BSON_TYPE_DATE_TIME)
            return date_to_time(out, s, v, r);
        return incompatible(r, v, s);
    case MAP_UUID:
        return to_uuid(out, v, r);
    case MAP_BYTEA:
        return to_bytea(out, v, r);
    case MAP_JSONB:
        return to_jsonb(out, v, r);
    case MAP_SCALAR_COUNT:
        break;
    }
    return refuse(r, NULL, "the column type is unknown (%d)", (int)s); /* convert_binary checked it */
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* arrays */

static bool is_sql_null(const bson_value_t *v)
{
    return v == NULL || v->value_type == BSON_TYPE_NULL || v->value_type == BSON_TYPE_UNDEFINED ||
           v->value_type == BSON_TYPE_EOD;
}

/* One element: its int32 length and bytes, or -1. *null is set for a NULL element. */
static convert_status put_element(strbuf *out, const map_type *elem, const bson_value_t *v, uint32_t index,
                                  const reason *outer, bool *null)
{
    if (elem->scalar == MAP_DOUBLE && v->value_type == BSON_TYPE_DOUBLE) {
        /* the common case of numeric arrays, in one append: length 8, then the double as to_float writes it */
        uint64_t bits;
        memcpy(&bits, &v->value.v_double, sizeof bits);
        unsigned char p[12] = {0, 0, 0, 8};
        for (int i = 0; i < 8; i++)
            p[4 + i] = (unsigned char)(bits >> (56 - 8 * i));
        strbuf_append(out, p, sizeof p);
        return CONVERT_OK;
    }
    reason r = {outer->why, outer->whylen, outer->prefix, true, index};
    if (v->value_type == BSON_TYPE_ARRAY || v->value_type == BSON_TYPE_DOCUMENT) {
        char sql[64];
        map_type whole = *elem;
        whole.array = true;
        return refuse(&r, NULL, "%s cannot be an element of %s (one dimension)",
                      v->value_type == BSON_TYPE_ARRAY ? "an array" : "a document",
                      map_type_sql(&whole, sql, sizeof sql));
    }
    if (is_sql_null(v)) {
        strbuf_put_be32(out, UINT32_MAX); /* -1 */
        *null = true;
        return CONVERT_OK;
    }
    size_t at = out->len;
    strbuf_put_be32(out, 0);
    convert_status st = to_scalar(out, elem, v, &r);
    if (st == CONVERT_OK)
        patch_be32(out, at, (uint32_t)(out->len - at - 4));
    return st;
}

/* A double precision[] from an array holding only doubles (numeric arrays, the common case), read straight from its
 * BSON bytes: type byte 0x01, the index as a C string, 8 little-endian bytes per element; each becomes a length of 8
 * and the double big-endian, as to_float writes it. False, with nothing appended, for anything else (another element
 * type, an empty array, bytes that are not BSON): the element-by-element path then decides. */
static bool doubles_fast(strbuf *out, const uint8_t *data, uint32_t len)
{
    if (len < 5 || data[len - 1] != 0)
        return false;
    const uint8_t *p = data + 4, *end = data + len - 1;
    /* An element takes at least 11 bytes of BSON (type, a one-digit index and its NUL, 8 bytes) and 12 of output:
     * reserve for the most there can be, then write in one pass. */
    if (!strbuf_reserve(out, 20 + ((size_t)len / 11 + 1) * 12))
        return false;
    unsigned char *o0 = (unsigned char *)out->data + out->len, *o = o0 + 20;
    uint32_t n = 0;
    while (p < end) {
        if (*p != BSON_TYPE_DOUBLE)
            return false;
        p++;
        while (p < end && *p != 0) /* the index: a few digits */
            p++;
        if (end - p < 9)
            return false;
        p++;
        uint64_t bits;
        memcpy(&bits, p, 8);
        bits = BSON_UINT64_FROM_LE(bits);
        o[0] = o[1] = o[2] = 0;
        o[3] = 8;
        for (int i = 0; i < 8; i++)
            o[4 + i] = (unsigned char)(bits >> (56 - 8 * i));
        o += 12;
        p += 8;
        n++;
    }
    if (n == 0)
        return false;
    static const unsigned char head[12] = {0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 2, 189 /* float8 = 701 */};
    memcpy(o0, head, sizeof head);
    o0[12] = (unsigned char)(n >> 24);
    o0[13] = (unsigned char)(n >> 16);
    o0[14] = (unsigned char)(n >> 8);
    o0[15] = (unsigned char)n;
    o0[16] = o0[17] = o0[18] = 0;
    o0[19] = 1;
    out->len += 20 + (size_t)n * 12;
    out->data[out->len] = '\0';
    return true;
}

/* array_send's format: ndim, has-null flag, element OID, then (length, lower bound 1) and the elements; an empty
 * array has no dimension. */
static convert_status to_array(strbuf *out, const map_type *t, const bson_value_t *v, const reason *r)
{
    char sql[64];
    if (t->scalar == MAP_JSONB)
        return refuse(r, NULL, "jsonb[] is not a column type");
    if (v->value_type != BSON_TYPE_ARRAY)
        return refuse(r, v, "is not an array (the column is %s)", map_type_sql(t, sql, sizeof sql));
    bson_iter_t it;
    if (!bson_iter_init_from_data(&it, v->value.v_doc.data, v->value.v_doc.data_len))
        return refuse(r, NULL, "the array is not valid BSON");
    map_type elem = *t;
    elem.array = false;
    size_t start = out->len;
    /* Room for the whole array at once, not by doubling as it grows: its binary form is about as long as its BSON
     * (a double element: 12 bytes against at least 11). */
    strbuf_reserve(out, 20 + (size_t)v->value.v_doc.data_len + v->value.v_doc.data_len / 8);
    if (t->scalar == MAP_DOUBLE && doubles_fast(out, v->value.v_doc.data, v->value.v_doc.data_len))
        return CONVERT_OK;
    strbuf_put_be32(out, 1);
    strbuf_put_be32(out, 0); /* has nulls: patched below */
    strbuf_put_be32(out, scalars[t->scalar].oid);
    strbuf_put_be32(out, 0); /* length: patched below */
    strbuf_put_be32(out, 1);
    uint32_t n = 0;
    bool nulls = false;
    while (bson_iter_next(&it)) {
        const bson_value_t *e = bson_iter_value(&it);
        convert_status st = put_element(out, &elem, e, n, r, &nulls);
        if (st != CONVERT_OK)
            return st;
        n++;
    }
    if (it.err_off != 0)
        return refuse(r, NULL, "the array is not valid BSON (at element %" PRIu32 ")", n);
    if (n == 0) {
        truncate_to(out, start);
        strbuf_put_be32(out, 0);
        strbuf_put_be32(out, 0);
        strbuf_put_be32(out, scalars[t->scalar].oid);
        return CONVERT_OK;
    }
    patch_be32(out, start + 4, nulls ? 1 : 0);
    patch_be32(out, start + 12, n);
    return CONVERT_OK;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* keys */

/* True when x (an integer) is exactly a value of real (float) or double precision. */
static bool int_exact_float(int64_t x, bool real)
{
    if (real) {
        float f = (float)x;
        /* 2^63 is a float: compared as double, which holds every float exactly */
        return (double)f < 9223372036854775808.0 && (int64_t)f == x;
    }
    double d = (double)x;
    return d < 9223372036854775808.0 && (int64_t)d == x;
}

/*
 * Whether v is an _id that a key column of type t holds exactly: two _ids get one key value only when MongoDB finds
 * them equal. MongoDB orders the BSON types first and compares values within a type (numbers by their exact value
 * across int32, int64, double and decimal128, as the server's src/mongo/base/compare_numbers.h does; strings byte by
 * byte; binary by length, subtype, then bytes), so a conversion that maps two types onto one value (an ObjectId and
 * the string of its hex), or two values onto one (0.1 and the decimal 0.1, two spellings of one uuid or instant)
 * would make two documents one row. Only what is one-to-one is taken; the rest is refused here, before
 * convert_binary sees it. docs/mapping.md ("Keys") has the table.
 */
static convert_status key_exact(const map_type *t, const bson_value_t *v, const reason *r)
{
    bson_type_t vt = v->value_type;
    if (t->array || t->scalar == MAP_JSONB)
        return refuse(r, v, "cannot be a key of type %s: it is not a one-to-one conversion of the _id",
                      scalars[t->scalar].sql);
    switch (t->scalar) {
    case MAP_TEXT:
    case MAP_VARCHAR:
        /* ObjectIds are their 24 lowercase hex digits: a string of exactly those would be the same key */
        if (vt == BSON_TYPE_UTF8 && v->value.v_utf8.len == 24) {
            const char *s = v->value.v_utf8.str;
            size_t i = 0;
            while (i < 24 && ((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
                i++;
            if (i == 24)
                return refuse(r, v,
                              "cannot be a %s key exactly: it is the text an ObjectId's key has there, so the "
                              "two _ids would be one row",
                              scalars[t->scalar].sql);
        }
        return CONVERT_OK;
    case MAP_NUMERIC:
        /* a double goes in as its shortest decimal, which is its value only for the whole numbers up to 2^53 */
        if (vt == BSON_TYPE_DOUBLE) {
            double x = v->value.v_double;
            if (isfinite(x) && (x != trunc(x) || fabs(x) > 9007199254740992.0))
                return refuse(r, v,
                              "cannot be a numeric key exactly: numeric holds its shortest decimal, not its "
                              "binary value, so it would be one row with a decimal128 of that text");
        }
        return CONVERT_OK;
    case MAP_REAL:
    case MAP_DOUBLE: {
        bool real = t->scalar == MAP_REAL;
        bool exact = true;
        if (vt == BSON_TYPE_INT32)
            exact = !real || int_exact_float(v->value.v_int32, true);
        else if (vt == BSON_TYPE_INT64)
            exact = int_exact_float(v->value.v_int64, real);
        else if (vt == BSON_TYPE_DOUBLE)
            exact = !real || isnan(v->value.v_double) || (double)(float)v->value.v_double == v->value.v_double;
        else if (vt == BSON_TYPE_DECIMAL128) {
            decimal d;
            int64_t x = 0;
            if (!decimal_from_value(v, &d))
                exact = false;
            else if (d.kind == DEC_FINITE)
                exact = decimal_to_int64(&d, &x) == INT_OK && int_exact_float(x, real);
        }
        if (!exact)
            return refuse(r, v,
                          "cannot be a %s key exactly: it is not a value of the type, and the nearest one "
                          "would be one row with another _id",
                          scalars[t->scalar].sql);
        return CONVERT_OK;
    }
    case MAP_TIMESTAMPTZ:
    case MAP_TIMESTAMP:
        if (vt == BSON_TYPE_UTF8)
            return refuse(r, v,
                          "cannot be a %s key exactly: a key of this type takes BSON dates only (two texts of "
                          "one instant would be one row)",
                          scalars[t->scalar].sql);
        return CONVERT_OK;
    case MAP_DATE:
        if (vt == BSON_TYPE_UTF8)
            return refuse(r, v,
                          "cannot be a date key exactly: a key of this type takes BSON dates only, at midnight "
                          "UTC");
        if (vt == BSON_TYPE_DATE_TIME && v->value.v_datetime % MS_PER_DAY != 0)
            return refuse(r, v,
                          "cannot be a date key exactly: it is not midnight UTC (two times of one day would be "
                          "one row)");
        return CONVERT_OK;
    case MAP_UUID:
        if (vt == BSON_TYPE_UTF8 || (vt == BSON_TYPE_BINARY && v->value.v_binary.subtype != BSON_SUBTYPE_UUID))
            return refuse(r, v,
                          "cannot be a uuid key exactly: a key of this type takes binary subtype 4 only (two "
                          "spellings of one uuid, or subtypes 3 and 4 of its bytes, would be one row)");
        return CONVERT_OK;
    case MAP_BYTEA:
        if (vt == BSON_TYPE_OID || (vt == BSON_TYPE_BINARY && v->value.v_binary.subtype != BSON_SUBTYPE_BINARY))
            return refuse(r, v,
                          "cannot be a bytea key exactly: a key of this type takes binary subtype 0 only (an "
                          "ObjectId or another subtype of the same bytes would be one row)");
        return CONVERT_OK;
    case MAP_BOOLEAN:
    case MAP_SMALLINT:
    case MAP_INTEGER:
    case MAP_BIGINT:
        /* one type (bool), or whole numbers by value, as MongoDB compares them */
        return CONVERT_OK;
    case MAP_JSONB:
    case MAP_SCALAR_COUNT:
        break;
    }
    return refuse(r, NULL, "the column type is unknown (%d)", (int)t->scalar);
}

bool map_type_key_ok(const map_type *t)
{
    return !t->array && scalar_ok(t->scalar) && t->scalar != MAP_JSONB;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* entry points */

convert_status convert_binary(strbuf *out, const map_type *t, const bson_value_t *v, bool *is_null, char *why,
                              size_t whylen)
{
    reason r = {.why = why, .whylen = whylen, .prefix = ""};
    if (why != NULL && whylen > 0)
        why[0] = '\0';
    *is_null = is_sql_null(v);
    if (*is_null)
        return CONVERT_OK;
    if (strbuf_failed(out))
        return CONVERT_NOMEM;
    if (!scalar_ok(t->scalar))
        return refuse(&r, NULL, "the column type is unknown (%d)", (int)t->scalar);
    size_t start = out->len;
    convert_status st = t->array ? to_array(out, t, v, &r) : to_scalar(out, t, v, &r);
    if (st == CONVERT_OK && strbuf_failed(out))
        st = CONVERT_NOMEM;
    if (st != CONVERT_OK)
        truncate_to(out, start);
    return st;
}

convert_status convert_copy_field(strbuf *out, const map_type *t, const bson_value_t *v, char *why, size_t whylen)
{
    if (strbuf_failed(out))
        return CONVERT_NOMEM;
    size_t start = out->len;
    strbuf_put_be32(out, 0);
    bool is_null = false;
    convert_status st = convert_binary(out, t, v, &is_null, why, whylen);
    if (st == CONVERT_OK && strbuf_failed(out))
        st = CONVERT_NOMEM;
    if (st == CONVERT_OK && out->len - start - 4 > INT32_MAX) {
        reason r = {.why = why, .whylen = whylen, .prefix = ""};
        st = refuse(&r, NULL, "the value is %zu bytes long, more than a field holds", out->len - start - 4);
    }
    if (st != CONVERT_OK) {
        truncate_to(out, start);
        return st;
    }
    patch_be32(out, start, is_null ? UINT32_MAX : (uint32_t)(out->len - start - 4));
    return CONVERT_OK;
}

convert_status convert_key_field(strbuf *out, const map_type *t, const bson_value_t *v, char *why, size_t whylen)
{
    reason r = {.why = why, .whylen = whylen, .prefix = ""};
    if (why != NULL && whylen > 0)
        why[0] = '\0';
    if (strbuf_failed(out))
        return CONVERT_NOMEM;
    if (is_sql_null(v))
        return refuse(&r, NULL, "a key cannot be NULL");
    if (!scalar_ok(t->scalar))
        return refuse(&r, NULL, "the column type is unknown (%d)", (int)t->scalar);
    if (key_exact(t, v, &r) != CONVERT_OK)
        return CONVERT_TYPE_ERROR;
    return convert_copy_field(out, t, v, why, whylen);
}

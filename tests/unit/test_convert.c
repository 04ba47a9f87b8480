/*
 * test_convert.c — BSON values in PostgreSQL's binary formats (map/convert.h), and the type names of map/map.h.
 *
 * Every row of the conversion table (docs/mapping.md), both sides of every bound, and the exact bytes of the
 * encodings. The expected bytes are written out by hand from PostgreSQL's send functions (numeric_send,
 * array_send, timestamp_send, ...); the dates and timestamps were computed independently (Python's datetime, from
 * 2000-01-01). tests/integration/test_convert_pg.c has PostgreSQL itself read the same values back.
 */
#include <bson/bson.h>
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map/convert.h"

Suite *convert_suite(void); /* called by the generated runner list */

/* ---------------------------------------------------------------------------------------------------------------- */
/* values and types */

static bson_value_t v_int32(int32_t x)
{
    bson_value_t v = {.value_type = BSON_TYPE_INT32};
    v.value.v_int32 = x;
    return v;
}

static bson_value_t v_int64(int64_t x)
{
    bson_value_t v = {.value_type = BSON_TYPE_INT64};
    v.value.v_int64 = x;
    return v;
}

static bson_value_t v_double(double x)
{
    bson_value_t v = {.value_type = BSON_TYPE_DOUBLE};
    v.value.v_double = x;
    return v;
}

static bson_value_t v_dec(const char *s)
{
    bson_value_t v = {.value_type = BSON_TYPE_DECIMAL128};
    ck_assert_msg(bson_decimal128_from_string(s, &v.value.v_decimal128), "bad decimal128 literal %s", s);
    return v;
}

static bson_value_t v_strn(const char *s, size_t len)
{
    bson_value_t v = {.value_type = BSON_TYPE_UTF8};
    v.value.v_utf8.str = (char *)s;
    v.value.v_utf8.len = (uint32_t)len;
    return v;
}

static bson_value_t v_str(const char *s)
{
    return v_strn(s, strlen(s));
}

static bson_value_t v_bool(bool b)
{
    bson_value_t v = {.value_type = BSON_TYPE_BOOL};
    v.value.v_bool = b;
    return v;
}

static bson_value_t v_oid(const char *hex)
{
    bson_value_t v = {.value_type = BSON_TYPE_OID};
    bson_oid_init_from_string(&v.value.v_oid, hex);
    return v;
}

static bson_value_t v_date(int64_t ms)
{
    bson_value_t v = {.value_type = BSON_TYPE_DATE_TIME};
    v.value.v_datetime = ms;
    return v;
}

static bson_value_t v_bin(bson_subtype_t st, const void *data, size_t len)
{
    bson_value_t v = {.value_type = BSON_TYPE_BINARY};
    v.value.v_binary.subtype = st;
    v.value.v_binary.data = (uint8_t *)data;
    v.value.v_binary.data_len = (uint32_t)len;
    return v;
}

static bson_value_t v_type(bson_type_t t)
{
    bson_value_t v = {.value_type = t};
    return v;
}

/* A document or array value over b's bytes (b must outlive the value). */
static bson_value_t v_bson(bson_type_t t, const bson_t *b)
{
    bson_value_t v = {.value_type = t};
    v.value.v_doc.data = (uint8_t *)bson_get_data(b);
    v.value.v_doc.data_len = b->len;
    return v;
}

static map_type T(map_scalar s)
{
    map_type t = {.scalar = s, .array = false, .varchar_chars = 0};
    return t;
}

static map_type TA(map_scalar s)
{
    map_type t = {.scalar = s, .array = true, .varchar_chars = 0};
    return t;
}

static map_type VC(uint32_t n, bool array)
{
    map_type t = {.scalar = MAP_VARCHAR, .array = array, .varchar_chars = n};
    return t;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* checks */

static void to_hex(const char *data, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[(unsigned char)data[i] >> 4];
        out[2 * i + 1] = digits[(unsigned char)data[i] & 15];
    }
    out[2 * len] = '\0';
}

/* hex without the spaces the expectations use for readability */
static void squeeze(const char *in, char *out)
{
    for (; *in; in++)
        if (*in != ' ')
            *out++ = *in;
    *out = '\0';
}

static void expect_hex_at(int line, map_type t, bson_value_t v, const char *hex)
{
    strbuf out = STRBUF_INIT;
    bool is_null = true;
    char why[CONVERT_WHY_MAX] = "";
    convert_status st = convert_binary(&out, &t, &v, &is_null, why, sizeof why);
    ck_assert_msg(st == CONVERT_OK, "line %d: refused: %s", line, why);
    ck_assert_msg(!is_null, "line %d: NULL", line);
    char *got = malloc(2 * out.len + 1), want[4096];
    to_hex(out.data ? out.data : "", out.len, got);
    squeeze(hex, want);
    ck_assert_msg(strcmp(got, want) == 0, "line %d: got %s, want %s", line, got, want);
    free(got);
    strbuf_free(&out);
}
#define expect_hex(t, v, hex) expect_hex_at(__LINE__, t, v, hex)

/* The bytes as text (for text-like results). */
static void expect_bytes_at(int line, map_type t, bson_value_t v, const char *bytes, size_t len)
{
    strbuf out = STRBUF_INIT;
    bool is_null = true;
    char why[CONVERT_WHY_MAX] = "";
    convert_status st = convert_binary(&out, &t, &v, &is_null, why, sizeof why);
    ck_assert_msg(st == CONVERT_OK, "line %d: refused: %s", line, why);
    ck_assert_msg(!is_null, "line %d: NULL", line);
    ck_assert_msg(out.len == len && (len == 0 || memcmp(out.data, bytes, len) == 0), "line %d: got %zu bytes %.*s",
                  line, out.len, (int)out.len, out.data ? out.data : "");
    strbuf_free(&out);
}
#define expect_bytes(t, v, s) expect_bytes_at(__LINE__, t, v, s, sizeof(s) - 1)

/* Refused, with a reason that contains `part` (or is exactly `part` when exact); out is left as it was. */
static void expect_error_at(int line, map_type t, bson_value_t v, const char *part, bool exact)
{
    strbuf out = STRBUF_INIT;
    strbuf_puts(&out, "before");
    bool is_null = true;
    char why[CONVERT_WHY_MAX] = "";
    convert_status st = convert_binary(&out, &t, &v, &is_null, why, sizeof why);
    ck_assert_msg(st == CONVERT_TYPE_ERROR, "line %d: status %d, want a type error (%s)", line, (int)st, part);
    ck_assert_msg(exact ? strcmp(why, part) == 0 : strstr(why, part) != NULL, "line %d: reason \"%s\", want %s\"%s\"",
                  line, why, exact ? "" : "one with ", part);
    ck_assert_msg(out.len == 6 && strcmp(out.data, "before") == 0, "line %d: the output changed on a refusal", line);
    ck_assert_msg(!is_null, "line %d: a refusal said NULL", line);
    strbuf_free(&out);
}
#define expect_error(t, v, part) expect_error_at(__LINE__, t, v, part, false)
#define expect_why(t, v, text)   expect_error_at(__LINE__, t, v, text, true)

static void expect_null_at(int line, map_type t, const bson_value_t *v)
{
    strbuf out = STRBUF_INIT;
    bool is_null = false;
    char why[CONVERT_WHY_MAX] = "";
    ck_assert_msg(convert_binary(&out, &t, v, &is_null, why, sizeof why) == CONVERT_OK, "line %d: %s", line, why);
    ck_assert_msg(is_null && out.len == 0, "line %d: not NULL", line);
    strbuf_free(&out);
}
#define expect_null(t, v) expect_null_at(__LINE__, t, v)

/* ---------------------------------------------------------------------------------------------------------------- */
/* integers */

START_TEST(test_integers_from_integers)
{
    expect_hex(T(MAP_SMALLINT), v_int32(1), "0001");
    expect_hex(T(MAP_INTEGER), v_int32(1), "00000001");
    expect_hex(T(MAP_BIGINT), v_int32(1), "0000000000000001");
    expect_hex(T(MAP_SMALLINT), v_int32(-1), "ffff");
    expect_hex(T(MAP_INTEGER), v_int64(-2), "fffffffe");
    /* smallint */
    expect_hex(T(MAP_SMALLINT), v_int32(32767), "7fff");
    expect_why(T(MAP_SMALLINT), v_int32(32768), "int32 32768 is out of range for smallint");
    expect_hex(T(MAP_SMALLINT), v_int32(-32768), "8000");
    expect_why(T(MAP_SMALLINT), v_int32(-32769), "int32 -32769 is out of range for smallint");
    expect_why(T(MAP_SMALLINT), v_int64(40000), "int64 40000 is out of range for smallint");
    /* integer */
    expect_hex(T(MAP_INTEGER), v_int32(INT32_MAX), "7fffffff");
    expect_hex(T(MAP_INTEGER), v_int32(INT32_MIN), "80000000");
    expect_hex(T(MAP_INTEGER), v_int64(2147483647), "7fffffff");
    expect_why(T(MAP_INTEGER), v_int64(2147483648), "int64 2147483648 is out of range for integer");
    expect_hex(T(MAP_INTEGER), v_int64(-2147483648), "80000000");
    expect_why(T(MAP_INTEGER), v_int64(-2147483649), "int64 -2147483649 is out of range for integer");
    /* bigint holds every int64 */
    expect_hex(T(MAP_BIGINT), v_int64(INT64_MAX), "7fffffffffffffff");
    expect_hex(T(MAP_BIGINT), v_int64(INT64_MIN), "8000000000000000");
    expect_hex(T(MAP_BIGINT), v_int32(INT32_MIN), "ffffffff80000000");
}
END_TEST

START_TEST(test_integers_from_doubles)
{
    expect_hex(T(MAP_INTEGER), v_double(3.0), "00000003");
    expect_why(T(MAP_INTEGER), v_double(3.5), "double 3.5 is not integral");
    expect_why(T(MAP_BIGINT), v_double(-0.5), "double -0.5 is not integral");
    expect_hex(T(MAP_INTEGER), v_double(-0.0), "00000000");
    expect_hex(T(MAP_SMALLINT), v_double(-0.0), "0000");
    expect_why(T(MAP_INTEGER), v_double(NAN), "double NaN is not integral");
    expect_why(T(MAP_BIGINT), v_double(INFINITY), "double Infinity is not integral");
    expect_why(T(MAP_BIGINT), v_double(-INFINITY), "double -Infinity is not integral");
    expect_error(T(MAP_INTEGER), v_double(1e-300), "is not integral");
    /* the bounds */
    expect_hex(T(MAP_SMALLINT), v_double(32767.0), "7fff");
    expect_why(T(MAP_SMALLINT), v_double(32768.0), "double 32768 is out of range for smallint");
    expect_hex(T(MAP_SMALLINT), v_double(-32768.0), "8000");
    expect_why(T(MAP_SMALLINT), v_double(-32769.0), "double -32769 is out of range for smallint");
    expect_hex(T(MAP_INTEGER), v_double(2147483647.0), "7fffffff");
    expect_why(T(MAP_INTEGER), v_double(2147483648.0), "double 2147483648 is out of range for integer");
    expect_hex(T(MAP_INTEGER), v_double(-2147483648.0), "80000000");
    expect_error(T(MAP_INTEGER), v_double(-2147483649.0), "out of range for integer");
    /* 2^53 and its neighbours are exact */
    expect_hex(T(MAP_BIGINT), v_double(9007199254740992.0), "0020000000000000");
    expect_hex(T(MAP_BIGINT), v_double(9007199254740994.0), "0020000000000002");
    expect_hex(T(MAP_BIGINT), v_double(-9007199254740992.0), "ffe0000000000000");
    /* 2^63 is the first double beyond bigint; -2^63 is bigint's minimum */
    expect_why(T(MAP_BIGINT), v_double(9223372036854775808.0),
               "double 9.223372036854776e+18 is out of range for bigint");
    expect_hex(T(MAP_BIGINT), v_double(9223372036854774784.0), "7ffffffffffffc00"); /* largest double below 2^63 */
    expect_hex(T(MAP_BIGINT), v_double(-9223372036854775808.0), "8000000000000000");
    expect_error(T(MAP_BIGINT), v_double(-9223372036854777856.0), "out of range for bigint");
    expect_error(T(MAP_BIGINT), v_double(1e300), "out of range for bigint");
}
END_TEST

START_TEST(test_integers_from_decimal128)
{
    expect_hex(T(MAP_INTEGER), v_dec("1"), "00000001");
    expect_hex(T(MAP_INTEGER), v_dec("1.00"), "00000001");
    expect_hex(T(MAP_INTEGER), v_dec("1E+3"), "000003e8");
    expect_hex(T(MAP_INTEGER), v_dec("1.50E+1"), "0000000f");
    expect_hex(T(MAP_INTEGER), v_dec("-0"), "00000000");
    expect_hex(T(MAP_INTEGER), v_dec("0E-10"), "00000000");
    expect_hex(T(MAP_INTEGER), v_dec("0E+100"), "00000000");
    expect_hex(T(MAP_BIGINT), v_dec("100000000000000000000E-2"), "0de0b6b3a7640000"); /* 10^18 */
    expect_why(T(MAP_INTEGER), v_dec("1.5"), "decimal128 1.5 is not integral");
    expect_why(T(MAP_INTEGER), v_dec("1E-1"), "decimal128 0.1 is not integral");
    expect_why(T(MAP_INTEGER), v_dec("1E-7"), "decimal128 1E-7 is not integral");
    expect_error(T(MAP_INTEGER), v_dec("1.0000000000000000000000000000001"), "is not integral");
    expect_why(T(MAP_INTEGER), v_dec("NaN"), "decimal128 NaN is not integral");
    expect_why(T(MAP_INTEGER), v_dec("Infinity"), "decimal128 Infinity is not integral");
    expect_error(T(MAP_INTEGER), v_dec("-Infinity"), "is not integral");
    /* the bounds */
    expect_hex(T(MAP_SMALLINT), v_dec("32767"), "7fff");
    expect_why(T(MAP_SMALLINT), v_dec("3.2768E+4"), "decimal128 32768 is out of range for smallint");
    expect_why(T(MAP_SMALLINT), v_dec("3.27680E+4"), "decimal128 32768.0 is out of range for smallint");
    expect_hex(T(MAP_SMALLINT), v_dec("-32768.000"), "8000");
    expect_error(T(MAP_SMALLINT), v_dec("-32769"), "out of range for smallint");
    expect_hex(T(MAP_INTEGER), v_dec("2147483647"), "7fffffff");
    expect_error(T(MAP_INTEGER), v_dec("2147483648"), "out of range for integer");
    expect_hex(T(MAP_BIGINT), v_dec("9223372036854775807"), "7fffffffffffffff");
    expect_hex(T(MAP_BIGINT), v_dec("92233720368547758.07E+2"), "7fffffffffffffff");
    expect_why(T(MAP_BIGINT), v_dec("9223372036854775808"),
               "decimal128 9223372036854775808 is out of range for bigint");
    expect_hex(T(MAP_BIGINT), v_dec("-9223372036854775808"), "8000000000000000");
    expect_error(T(MAP_BIGINT), v_dec("-9223372036854775809"), "out of range for bigint");
    expect_error(T(MAP_BIGINT), v_dec("1E+19"), "out of range for bigint");
    expect_error(T(MAP_BIGINT), v_dec("1E+6144"), "out of range for bigint");
    expect_error(T(MAP_BIGINT), v_dec("99999999999999999999"), "out of range for bigint");
}
END_TEST

START_TEST(test_integers_refuse_other_types)
{
    expect_why(T(MAP_INTEGER), v_str("5"), "string \"5\" cannot be converted to integer");
    expect_why(T(MAP_SMALLINT), v_bool(true), "bool true cannot be converted to smallint");
    expect_error(T(MAP_BIGINT), v_date(0), "date {\"$date\":\"1970-01-01T00:00:00Z\"} cannot be converted to bigint");
    expect_error(T(MAP_INTEGER), v_oid("65a1f0c2e4b0a1b2c3d4e5f6"), "cannot be converted to integer");
    expect_error(T(MAP_INTEGER), v_type(BSON_TYPE_MINKEY), "minKey {\"$minKey\":1} cannot be converted to integer");
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* numeric: ndigits, weight, sign, dscale, base-10000 digits */

START_TEST(test_numeric_from_integers)
{
    expect_hex(T(MAP_NUMERIC), v_int32(0), "0000 0000 0000 0000");
    expect_hex(T(MAP_NUMERIC), v_int32(1), "0001 0000 0000 0000 0001");
    expect_hex(T(MAP_NUMERIC), v_int32(-1), "0001 0000 4000 0000 0001");
    expect_hex(T(MAP_NUMERIC), v_int32(10000), "0001 0001 0000 0000 0001");
    expect_hex(T(MAP_NUMERIC), v_int32(12345), "0002 0001 0000 0000 0001 0929");
    expect_hex(T(MAP_NUMERIC), v_int64(INT64_MAX), "0005 0004 0000 0000 039a 0d2c 0170 1565 16af");
    expect_hex(T(MAP_NUMERIC), v_int64(INT64_MIN), "0005 0004 4000 0000 039a 0d2c 0170 1565 16b0");
}
END_TEST

START_TEST(test_numeric_from_decimal128)
{
    expect_hex(T(MAP_NUMERIC), v_dec("1.00"), "0001 0000 0000 0002 0001");
    expect_hex(T(MAP_NUMERIC), v_dec("-1.5"), "0002 0000 4000 0001 0001 1388");
    expect_hex(T(MAP_NUMERIC), v_dec("1234.5678"), "0002 0000 0000 0004 04d2 162e");
    expect_hex(T(MAP_NUMERIC), v_dec("12345678.9"), "0003 0001 0000 0001 04d2 162e 2328");
    expect_hex(T(MAP_NUMERIC), v_dec("0.00001"), "0001 fffe 0000 0005 03e8");
    expect_hex(T(MAP_NUMERIC), v_dec("1E+3"), "0001 0000 0000 0000 03e8");
    expect_hex(T(MAP_NUMERIC), v_dec("1.0E-7"), "0001 fffe 0000 0008 000a");
    expect_hex(T(MAP_NUMERIC), v_dec("0E-10"), "0000 0000 0000 000a");
    expect_hex(T(MAP_NUMERIC), v_dec("-0"), "0000 0000 0000 0000");
    expect_hex(T(MAP_NUMERIC), v_dec("-0.00"), "0000 0000 0000 0002");
    expect_hex(T(MAP_NUMERIC), v_dec("NaN"), "0000 0000 c000 0000");
    expect_hex(T(MAP_NUMERIC), v_dec("Infinity"), "0000 0000 d000 0000");
    expect_hex(T(MAP_NUMERIC), v_dec("-Infinity"), "0000 0000 f000 0000");
    /* the largest and the smallest decimal128, all 34 digits kept */
    expect_hex(T(MAP_NUMERIC), v_dec("9.999999999999999999999999999999999E+6144"),
               "000a 0600 0000 0000 0009 270f 270f 270f 270f 270f 270f 270f 270f 2328");
    expect_hex(T(MAP_NUMERIC), v_dec("1E-6176"), "0001 f9f8 0000 1820 0001");
    expect_hex(T(MAP_NUMERIC), v_dec("-1.234567890123456789012345678901234E-6143"),
               "0009 fa00 4000 1820 000c 0d80 1ed2 04d2 162e 2334 0d80 1ed2 04d2");
}
END_TEST

START_TEST(test_numeric_from_doubles)
{
    expect_hex(T(MAP_NUMERIC), v_double(0.1), "0001 ffff 0000 0001 03e8");
    expect_hex(T(MAP_NUMERIC), v_double(3.0), "0001 0000 0000 0000 0003");
    expect_hex(T(MAP_NUMERIC), v_double(-2.5), "0002 0000 4000 0001 0002 1388");
    expect_hex(T(MAP_NUMERIC), v_double(-0.0), "0000 0000 0000 0000");
    expect_hex(T(MAP_NUMERIC), v_double(0.1 + 0.2), "0005 ffff 0000 0011 0bb8 0000 0000 0000 0fa0");
    expect_hex(T(MAP_NUMERIC), v_double(9007199254740992.0), "0004 0003 0000 0000 232f 07c8 1562 03e0");
    expect_hex(T(MAP_NUMERIC), v_double(1e300), "0001 004b 0000 0000 0001");
    expect_hex(T(MAP_NUMERIC), v_double(5e-324), "0001 ffaf 0000 0144 0005");
    expect_hex(T(MAP_NUMERIC), v_double(NAN), "0000 0000 c000 0000");
    expect_hex(T(MAP_NUMERIC), v_double(INFINITY), "0000 0000 d000 0000");
    expect_hex(T(MAP_NUMERIC), v_double(-INFINITY), "0000 0000 f000 0000");
    expect_why(T(MAP_NUMERIC), v_str("1"), "string \"1\" cannot be converted to numeric");
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* real and double precision */

START_TEST(test_floats)
{
    expect_hex(T(MAP_DOUBLE), v_double(1.5), "3ff8000000000000");
    expect_hex(T(MAP_REAL), v_double(1.5), "3fc00000");
    expect_hex(T(MAP_REAL), v_int32(1), "3f800000");
    expect_hex(T(MAP_DOUBLE), v_int32(-1), "bff0000000000000");
    expect_hex(T(MAP_DOUBLE), v_double(-0.0), "8000000000000000");
    /* the nearest: 2^53 + 1 and 2^24 + 1 round (to even) */
    expect_hex(T(MAP_DOUBLE), v_int64(9007199254740993), "4340000000000000");
    expect_hex(T(MAP_REAL), v_int64(16777217), "4b800000");
    expect_hex(T(MAP_REAL), v_int32(16777217), "4b800000");
    expect_hex(T(MAP_DOUBLE), v_int64(INT64_MAX), "43e0000000000000");
    expect_hex(T(MAP_DOUBLE), v_double(0.1), "3fb999999999999a");
    expect_hex(T(MAP_REAL), v_double(0.1), "3dcccccd");
    /* real's range: FLT_MAX fits, beyond is refused; tiny values go to the nearest (zero) */
    expect_hex(T(MAP_REAL), v_double(3.4028234663852886e38), "7f7fffff");
    expect_why(T(MAP_REAL), v_double(3.5e38), "double 3.5e+38 is out of range for real");
    expect_error(T(MAP_REAL), v_double(-1e300), "out of range for real");
    expect_hex(T(MAP_REAL), v_double(1e-50), "00000000");
    expect_hex(T(MAP_REAL), v_double(INFINITY), "7f800000");
    expect_hex(T(MAP_REAL), v_double(-INFINITY), "ff800000");
    expect_hex(T(MAP_DOUBLE), v_double(INFINITY), "7ff0000000000000");
    /* decimal128: rounded once, from its digits */
    expect_hex(T(MAP_DOUBLE), v_dec("0.1"), "3fb999999999999a");
    expect_hex(T(MAP_REAL), v_dec("0.1"), "3dcccccd");
    expect_hex(T(MAP_DOUBLE), v_dec("1.00"), "3ff0000000000000");
    expect_hex(T(MAP_DOUBLE), v_dec("-Infinity"), "fff0000000000000");
    expect_hex(T(MAP_REAL), v_dec("Infinity"), "7f800000");
    expect_why(T(MAP_DOUBLE), v_dec("1E+400"), "decimal128 1E+400 is out of range for double precision");
    expect_error(T(MAP_REAL), v_dec("1E+39"), "out of range for real");
    expect_hex(T(MAP_DOUBLE), v_dec("1E+38"), "47d2ced32a16a1b1");
    expect_hex(T(MAP_DOUBLE), v_dec("1E-400"), "0000000000000000");
    expect_error(T(MAP_REAL), v_bool(false), "cannot be converted to real");
    expect_error(T(MAP_DOUBLE), v_str("1.5"), "cannot be converted to double precision");
}
END_TEST

START_TEST(test_float_nan)
{
    /* NaN is NaN (its payload is not specified): check the exponent and the quiet bit */
    strbuf out = STRBUF_INIT;
    bool is_null;
    map_type t = T(MAP_DOUBLE);
    bson_value_t v = v_double(NAN);
    ck_assert_int_eq(convert_binary(&out, &t, &v, &is_null, NULL, 0), CONVERT_OK);
    ck_assert_int_eq(out.len, 8);
    ck_assert_int_eq((unsigned char)out.data[0] & 0x7f, 0x7f);
    ck_assert_int_eq((unsigned char)out.data[1] & 0xf8, 0xf8);
    strbuf_reset(&out, 0);
    t = T(MAP_REAL);
    v = v_dec("NaN");
    ck_assert_int_eq(convert_binary(&out, &t, &v, &is_null, NULL, 0), CONVERT_OK);
    ck_assert_int_eq(out.len, 4);
    ck_assert_int_eq((unsigned char)out.data[0] & 0x7f, 0x7f);
    ck_assert_int_eq((unsigned char)out.data[1] & 0xc0, 0xc0);
    strbuf_free(&out);
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* text, varchar, bool, bytea */

START_TEST(test_text)
{
    expect_bytes(T(MAP_TEXT), v_str("abc"), "abc");
    expect_bytes(T(MAP_TEXT), v_str(""), "");
    expect_bytes(T(MAP_TEXT), v_str("naïve 日本"), "naïve 日本");
    expect_why(T(MAP_TEXT), v_strn("a\xff", 2), "string \"a\\xff\" is not valid UTF-8");
    expect_error(T(MAP_TEXT), v_strn("\xed\xa0\x80", 3), "is not valid UTF-8"); /* a surrogate */
    expect_why(T(MAP_TEXT), v_strn("a\0b", 3),
               "string \"a\\u0000b\" contains a NUL character, which PostgreSQL text cannot hold");
    expect_bytes(T(MAP_TEXT), v_oid("65a1f0c2e4b0a1b2c3d4e5f6"), "65a1f0c2e4b0a1b2c3d4e5f6");
    expect_bytes(T(MAP_TEXT), v_oid("65A1F0C2E4B0A1B2C3D4E5F6"), "65a1f0c2e4b0a1b2c3d4e5f6");
    expect_why(T(MAP_TEXT), v_int32(5), "int32 5 cannot be converted to text");
    expect_error(T(MAP_TEXT), v_double(1.5), "double 1.5 cannot be converted to text");
    expect_error(T(MAP_TEXT), v_type(BSON_TYPE_SYMBOL), "cannot be converted to text");
}
END_TEST

START_TEST(test_varchar_counts_characters)
{
    expect_bytes(VC(3, false), v_str("abc"), "abc");
    expect_why(VC(3, false), v_str("abcd"), "string \"abcd\" is 4 characters long, more than varchar(3) holds");
    expect_bytes(VC(3, false), v_str("héé"), "héé");       /* 5 bytes */
    expect_bytes(VC(3, false), v_str("日本語"), "日本語"); /* 9 bytes */
    expect_error(VC(3, false), v_str("日本語x"), "is 4 characters long, more than varchar(3) holds");
    expect_bytes(VC(1, false), v_str("😀"), "😀"); /* 4 bytes, one character */
    expect_bytes(VC(1, false), v_str(""), "");
    expect_bytes(VC(24, false), v_oid("65a1f0c2e4b0a1b2c3d4e5f6"), "65a1f0c2e4b0a1b2c3d4e5f6");
    expect_error(VC(23, false), v_oid("65a1f0c2e4b0a1b2c3d4e5f6"), "more than varchar(23) holds");
    expect_error(VC(10, false), v_strn("a\xc3", 2), "not valid UTF-8");
    expect_error(VC(10, false), v_int32(1), "cannot be converted to varchar");
}
END_TEST

START_TEST(test_boolean)
{
    expect_hex(T(MAP_BOOLEAN), v_bool(true), "01");
    expect_hex(T(MAP_BOOLEAN), v_bool(false), "00");
    expect_why(T(MAP_BOOLEAN), v_int32(1), "int32 1 cannot be converted to boolean");
    expect_why(T(MAP_BOOLEAN), v_str("true"), "string \"true\" cannot be converted to boolean");
}
END_TEST

START_TEST(test_bytea)
{
    expect_hex(T(MAP_BYTEA), v_bin(BSON_SUBTYPE_BINARY, "\x01\x02\x00\xff", 4), "010200ff");
    expect_hex(T(MAP_BYTEA), v_bin(BSON_SUBTYPE_UUID, "0123456789abcdef", 16), "30313233343536373839616263646566");
    expect_hex(T(MAP_BYTEA), v_bin(BSON_SUBTYPE_USER, "\x7f", 1), "7f");
    expect_hex(T(MAP_BYTEA), v_bin(BSON_SUBTYPE_BINARY, "", 0), "");
    expect_hex(T(MAP_BYTEA), v_oid("65a1f0c2e4b0a1b2c3d4e5f6"), "65a1f0c2e4b0a1b2c3d4e5f6");
    /* subtype 2 (old binary) has a length inside: the payload is what comes after it */
    bson_t doc = BSON_INITIALIZER;
    ck_assert(bson_append_binary(&doc, "b", 1, BSON_SUBTYPE_BINARY_DEPRECATED, (const uint8_t *)"ab", 2));
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, &doc, "b"));
    expect_hex(T(MAP_BYTEA), *bson_iter_value(&it), "6162");
    bson_destroy(&doc);
    expect_why(T(MAP_BYTEA), v_str("ab"), "string \"ab\" cannot be converted to bytea");
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* uuid */

START_TEST(test_uuid_from_strings)
{
    const char *bytes = "a0eebc999c0b4ef8bb6d6bb9bd380a11";
    expect_hex(T(MAP_UUID), v_str("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), bytes);
    expect_hex(T(MAP_UUID), v_str("A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"), bytes);
    expect_hex(T(MAP_UUID), v_str("{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}"), bytes);
    expect_hex(T(MAP_UUID), v_str("a0eebc999c0b4ef8bb6d6bb9bd380a11"), bytes);
    expect_hex(T(MAP_UUID), v_str("a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11"), bytes);
    expect_hex(T(MAP_UUID), v_str("{a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11}"), bytes);
    expect_why(T(MAP_UUID), v_str("abc"), "string \"abc\" is not a valid uuid");
    expect_error(T(MAP_UUID), v_str(""), "is not a valid uuid");
    expect_error(T(MAP_UUID), v_str("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1"), "is not a valid uuid");   /* 31 */
    expect_error(T(MAP_UUID), v_str("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a111"), "is not a valid uuid"); /* 33 */
    expect_error(T(MAP_UUID), v_str("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11-"), "is not a valid uuid");
    expect_error(T(MAP_UUID), v_str("-a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), "is not a valid uuid");
    expect_error(T(MAP_UUID), v_str("a0e-ebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), "is not a valid uuid");
    expect_error(T(MAP_UUID), v_str("a0eebc99--9c0b-4ef8-bb6d-6bb9bd380a11"), "is not a valid uuid");
    /* a hyphen only after a group of four digits */
    expect_error(T(MAP_UUID), v_str("a0-eebc999c0b4ef8bb6d6bb9bd380a11"), "is not a valid uuid");
    expect_error(T(MAP_UUID), v_str("a0eebc-999c0b4ef8bb6d6bb9bd380a11"), "is not a valid uuid");
    expect_hex(T(MAP_UUID), v_str("a0eebc999c0b4ef8bb6d6bb9bd38-0a11"), bytes);
    expect_error(T(MAP_UUID), v_str("{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), "is not a valid uuid");
    expect_error(T(MAP_UUID), v_str("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}"), "is not a valid uuid");
    expect_error(T(MAP_UUID), v_str("g0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), "is not a valid uuid");
    expect_error(T(MAP_UUID), v_str(" a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), "is not a valid uuid");
    expect_error(T(MAP_UUID), v_strn("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11\0", 37), "is not a valid uuid");
}
END_TEST

START_TEST(test_uuid_from_binary)
{
    const char u[] = "\xa0\xee\xbc\x99\x9c\x0b\x4e\xf8\xbb\x6d\x6b\xb9\xbd\x38\x0a\x11";
    expect_hex(T(MAP_UUID), v_bin(BSON_SUBTYPE_UUID, u, 16), "a0eebc999c0b4ef8bb6d6bb9bd380a11");
    expect_hex(T(MAP_UUID), v_bin(BSON_SUBTYPE_UUID_DEPRECATED, u, 16), "a0eebc999c0b4ef8bb6d6bb9bd380a11");
    expect_error(T(MAP_UUID), v_bin(BSON_SUBTYPE_BINARY, u, 16), "is not a uuid (binary subtype 4 or 3 of 16 bytes)");
    expect_error(T(MAP_UUID), v_bin(BSON_SUBTYPE_UUID, u, 15), "is not a uuid");
    expect_error(T(MAP_UUID), v_oid("65a1f0c2e4b0a1b2c3d4e5f6"), "cannot be converted to uuid");
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* dates and timestamps */

START_TEST(test_date_from_strings)
{
    expect_hex(T(MAP_DATE), v_str("2000-01-01"), "00000000");
    expect_hex(T(MAP_DATE), v_str("1999-12-31"), "ffffffff");
    expect_hex(T(MAP_DATE), v_str("1970-01-01"), "ffffd533");
    expect_hex(T(MAP_DATE), v_str("1900-03-01"), "ffff718f");
    expect_hex(T(MAP_DATE), v_str("2024-02-29"), "00002279");
    expect_hex(T(MAP_DATE), v_str("0001-01-01"), "fff4dbf9");
    expect_hex(T(MAP_DATE), v_str("9999-12-31"), "002c95d3");
    expect_why(T(MAP_DATE), v_str("0000-12-31"),
               "string \"0000-12-31\" is out of range for date (years 1 to 9999 are read from strings)");
    expect_why(T(MAP_DATE), v_str("2023-02-29"), "string \"2023-02-29\" is not a valid date (YYYY-MM-DD)");
    expect_error(T(MAP_DATE), v_str("1900-02-29"), "is not a valid date");
    expect_hex(T(MAP_DATE), v_str("2000-02-29"), "0000003b");
    expect_error(T(MAP_DATE), v_str("2024-04-31"), "is not a valid date");
    expect_error(T(MAP_DATE), v_str("2024-13-01"), "is not a valid date");
    expect_error(T(MAP_DATE), v_str("2024-00-10"), "is not a valid date");
    expect_error(T(MAP_DATE), v_str("2024-01-00"), "is not a valid date");
    expect_error(T(MAP_DATE), v_str("10000-01-01"), "is not a valid date");
    expect_error(T(MAP_DATE), v_str("2024-1-01"), "is not a valid date");
    expect_error(T(MAP_DATE), v_str("2024-01-01T00:00:00Z"), "is not a valid date");
    expect_error(T(MAP_DATE), v_str(" 2024-01-01"), "is not a valid date");
    expect_error(T(MAP_DATE), v_str("2024/01/01"), "is not a valid date");
    expect_error(T(MAP_DATE), v_str(""), "is not a valid date");
}
END_TEST

START_TEST(test_timestamps_from_strings)
{
    map_type tz = T(MAP_TIMESTAMPTZ), ts = T(MAP_TIMESTAMP);
    expect_hex(tz, v_str("2000-01-01T00:00:00Z"), "0000000000000000");
    expect_hex(tz, v_str("2000-01-01 00:00:00"), "0000000000000000");
    expect_hex(tz, v_str("2000-01-01t00:00:00z"), "0000000000000000");
    expect_hex(tz, v_str("2000-01-01T00:00"), "0000000000000000");
    expect_hex(tz, v_str("2000-01-01"), "0000000000000000");
    expect_hex(tz, v_str("2000-01-01T00:00:01.5Z"), "000000000016e360");
    expect_hex(tz, v_str("2000-01-01T00:00:00.000001Z"), "0000000000000001");
    expect_hex(tz, v_str("2000-01-01T00:00:00.0000010Z"), "0000000000000001"); /* zeros past µs are fine */
    expect_error(tz, v_str("2000-01-01T00:00:00.0000001Z"), "is not a valid timestamptz");
    expect_error(tz, v_str("2000-01-01T00:00:00.Z"), "is not a valid timestamptz");
    /* offsets: all of these are 2000-01-01 00:00 UTC */
    expect_hex(tz, v_str("2000-01-01T01:00:00+01:00"), "0000000000000000");
    expect_hex(tz, v_str("2000-01-01T01:00:00+0100"), "0000000000000000");
    expect_hex(tz, v_str("2000-01-01T01:00:00+01"), "0000000000000000");
    expect_hex(tz, v_str("1999-12-31T23:00:00-01:00"), "0000000000000000");
    expect_hex(tz, v_str("2000-01-01T05:30+05:30"), "0000000000000000");
    expect_hex(ts, v_str("2000-01-01T02:00:00+02:00"), "0000000000000000"); /* timestamp: UTC wall time */
    expect_hex(ts, v_str("2024-01-15T10:30:00.123"), "0002b1f843c09a78");
    expect_hex(tz, v_str("2024-01-15T10:30:00.123Z"), "0002b1f843c09a78");
    expect_hex(tz, v_str("1970-01-01T00:00:00Z"), "fffca2fec4c82000");
    /* the years read from strings: 1 to 9999 */
    expect_hex(tz, v_str("0001-01-01T00:00:00Z"), "ff1fe2ffc59c6000");
    expect_hex(tz, v_str("9999-12-31T23:59:59.999999Z"), "0380e70b913b7fff");
    expect_hex(tz, v_str("0001-01-01T00:30:00+01:00"), "ff1fe2ff5a528e00"); /* 0000-12-31T23:30Z: still fine */
    expect_why(tz, v_str("0000-12-31T23:00:00Z"),
               "string \"0000-12-31T23:00:00Z\" is out of range for timestamptz (years 1 to 9999 are read from "
               "strings)");
    /* a leap second is the next minute's :00, as PostgreSQL reads it */
    expect_hex(tz, v_str("1999-12-31T23:59:60Z"), "0000000000000000");
    /* refused */
    expect_why(tz, v_str("yesterday"),
               "string \"yesterday\" is not a valid timestamptz (ISO 8601: "
               "YYYY-MM-DD[Thh:mm[:ss[.ffffff]]][Z|±hh[:mm]])");
    expect_error(ts, v_str("2000-01-01T24:00:00Z"), "is not a valid timestamp");
    expect_error(tz, v_str("2000-01-01T23:60:00Z"), "is not a valid");
    expect_error(tz, v_str("2000-01-01T23:59:61Z"), "is not a valid");
    expect_error(tz, v_str("2000-01-01T1:00:00Z"), "is not a valid");
    expect_error(tz, v_str("2000-01-01T10"), "is not a valid");
    expect_error(tz, v_str("2000-01-01T10:00:00+2"), "is not a valid");
    expect_error(tz, v_str("2000-01-01T10:00:00+24:00"), "is not a valid");
    expect_error(tz, v_str("2000-01-01T10:00:00+01:60"), "is not a valid");
    expect_error(tz, v_str("2000-01-01T10:00:00+01:"), "is not a valid");
    expect_error(tz, v_str("2000-01-01T10:00:00ZZ"), "is not a valid");
    expect_error(tz, v_str("2000-01-01T10:00:00 +02:00"), "is not a valid");
    expect_error(tz, v_str("2000-01-01X10:00:00"), "is not a valid");
    expect_error(tz, v_str("2000-01-01T"), "is not a valid");
    expect_error(tz, v_str("2000-02-30T00:00:00Z"), "is not a valid");
    expect_error(tz, v_str("2000-01-01T10:00.5"), "is not a valid");
}
END_TEST

START_TEST(test_timestamps_from_dates)
{
    map_type tz = T(MAP_TIMESTAMPTZ), ts = T(MAP_TIMESTAMP);
    expect_hex(tz, v_date(946684800000), "0000000000000000");
    expect_hex(ts, v_date(946684800000), "0000000000000000");
    expect_hex(tz, v_date(946684800001), "00000000000003e8"); /* milliseconds kept */
    expect_hex(tz, v_date(946684799999), "fffffffffffffc18");
    expect_hex(tz, v_date(0), "fffca2fec4c82000");
    expect_hex(tz, v_date(-1), "fffca2fec4c81c18");
    expect_hex(ts, v_date(1705314600123), "0002b1f843c09a78");
    /* PostgreSQL's range: from julian day 0 (4714-11-24 BC) to 294277-01-01, excluded */
    expect_hex(tz, v_date(-210866803200000), "fd0f7cc1411fa000");
    expect_error(tz, v_date(-210866803200001), "is out of range for timestamptz (4713 BC to 294276 AD)");
    expect_hex(ts, v_date(9224318015999999), "7fffff5bb3b29c18");
    expect_error(ts, v_date(9224318016000000), "is out of range for timestamp");
    expect_error(tz, v_date(INT64_MIN), "is out of range");
    expect_error(tz, v_date(INT64_MAX), "is out of range");
}
END_TEST

START_TEST(test_date_from_dates)
{
    map_type d = T(MAP_DATE);
    expect_hex(d, v_date(946684800000), "00000000");
    expect_hex(d, v_date(946684799999), "ffffffff"); /* the last ms of 1999-12-31 */
    expect_hex(d, v_date(0), "ffffd533");
    expect_hex(d, v_date(86399999), "ffffd533");
    expect_hex(d, v_date(86400000), "ffffd534");
    expect_hex(d, v_date(-1), "ffffd532"); /* 1969-12-31: the day floors */
    expect_hex(d, v_date(-86400000), "ffffd532");
    expect_hex(d, v_date(-86400001), "ffffd531");
    /* date's range: julian day 0 to 5874898-01-01, excluded */
    expect_hex(d, v_date(-210866803200000), "ffda97a7"); /* -2451545 */
    expect_error(d, v_date(-210866803200001), "is out of range for date");
    expect_hex(d, v_date(INT64_C(2145042906) * 86400000 - 1), "7fda970c"); /* 2145031948 */
    expect_error(d, v_date(INT64_C(2145042906) * 86400000), "is out of range for date");
    expect_error(d, v_date(INT64_MIN), "is out of range for date");
    expect_error(d, v_int64(0), "int64 0 cannot be converted to date");
    expect_error(T(MAP_TIMESTAMPTZ), v_int64(0), "int64 0 cannot be converted to timestamptz");
    expect_error(T(MAP_TIMESTAMP), v_type(BSON_TYPE_TIMESTAMP), "cannot be converted to timestamp");
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* jsonb */

static void expect_jsonb_at(int line, bson_value_t v, const char *json)
{
    char want[1024];
    want[0] = 1;
    snprintf(want + 1, sizeof want - 1, "%s", json);
    expect_bytes_at(line, T(MAP_JSONB), v, want, strlen(json) + 1);
}
#define expect_jsonb(v, json) expect_jsonb_at(__LINE__, v, json)

START_TEST(test_jsonb)
{
    expect_jsonb(v_int32(1), "1");
    expect_jsonb(v_int64(-5), "-5");
    expect_jsonb(v_double(1.0), "1.0");
    expect_jsonb(v_double(NAN), "{\"$numberDouble\":\"NaN\"}");
    expect_jsonb(v_dec("1.00"), "{\"$numberDecimal\":\"1.00\"}");
    expect_jsonb(v_str("a\"b"), "\"a\\\"b\"");
    expect_jsonb(v_str("a\\u0000"), "\"a\\\\u0000\""); /* a backslash then u0000: not a NUL */
    expect_jsonb(v_bool(true), "true");
    expect_jsonb(v_date(0), "{\"$date\":\"1970-01-01T00:00:00Z\"}");
    expect_jsonb(v_oid("65a1f0c2e4b0a1b2c3d4e5f6"), "{\"$oid\":\"65a1f0c2e4b0a1b2c3d4e5f6\"}");
    bson_t doc = BSON_INITIALIZER, arr = BSON_INITIALIZER;
    BSON_APPEND_INT32(&doc, "a", 1);
    BSON_APPEND_UTF8(&doc, "b", "x");
    BSON_APPEND_INT32(&arr, "0", 1);
    BSON_APPEND_NULL(&arr, "1");
    expect_jsonb(v_bson(BSON_TYPE_DOCUMENT, &doc), "{\"a\":1,\"b\":\"x\"}");
    expect_jsonb(v_bson(BSON_TYPE_ARRAY, &arr), "[1,null]");
    bson_destroy(&doc);
    bson_destroy(&arr);
    /* what jsonb cannot hold */
    expect_why(T(MAP_JSONB), v_strn("a\0b", 3),
               "string \"a\\u0000b\" contains a NUL character (\\u0000), which jsonb cannot hold");
    bson_t bad = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&bad, "ok", "fine");
    bson_append_utf8(&bad, "s", 1, "\xff", 1);
    expect_why(T(MAP_JSONB), v_bson(BSON_TYPE_DOCUMENT, &bad),
               "document cannot be jsonb: a string or field name at s is not valid UTF-8, which PostgreSQL cannot "
               "store");
    bson_destroy(&bad);
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* NULL */

START_TEST(test_nulls)
{
    bson_value_t null = v_type(BSON_TYPE_NULL), undef = v_type(BSON_TYPE_UNDEFINED);
    for (map_scalar s = MAP_TEXT; s < MAP_SCALAR_COUNT; s++) {
        map_type t = s == MAP_VARCHAR ? VC(5, false) : T(s);
        expect_null(t, NULL);
        expect_null(t, &null);
        expect_null(t, &undef);
        if (s != MAP_JSONB) {
            t.array = true;
            expect_null(t, NULL);
            expect_null(t, &null);
            expect_null(t, &undef);
        }
    }
    /* convert_copy_field: -1 */
    strbuf out = STRBUF_INIT;
    map_type t = T(MAP_INTEGER);
    ck_assert_int_eq(convert_copy_field(&out, &t, &null, NULL, 0), CONVERT_OK);
    ck_assert_int_eq(convert_copy_field(&out, &t, NULL, NULL, 0), CONVERT_OK);
    ck_assert_int_eq(out.len, 8);
    ck_assert(memcmp(out.data, "\xff\xff\xff\xff\xff\xff\xff\xff", 8) == 0);
    strbuf_free(&out);
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* arrays */

START_TEST(test_arrays)
{
    bson_t a = BSON_INITIALIZER;
    BSON_APPEND_INT32(&a, "0", 1);
    BSON_APPEND_NULL(&a, "1");
    BSON_APPEND_INT64(&a, "2", 3);
    /* ndim 1, has nulls, int4, length 3, lower bound 1; 1, NULL, 3 */
    expect_hex(TA(MAP_INTEGER), v_bson(BSON_TYPE_ARRAY, &a),
               "00000001 00000001 00000017 00000003 00000001  00000004 00000001  ffffffff  00000004 00000003");
    expect_hex(TA(MAP_BIGINT), v_bson(BSON_TYPE_ARRAY, &a),
               "00000001 00000001 00000014 00000003 00000001  00000008 0000000000000001  ffffffff"
               "  00000008 0000000000000003");
    expect_why(TA(MAP_SMALLINT), v_int32(5), "int32 5 is not an array (the column is smallint[])");
    expect_error(TA(MAP_INTEGER), v_bson(BSON_TYPE_DOCUMENT, &a), "is not an array (the column is integer[])");
    expect_error(TA(MAP_TEXT), v_str("{a,b}"), "string \"{a,b}\" is not an array (the column is text[])");
    bson_destroy(&a);

    bson_t empty = BSON_INITIALIZER;
    expect_hex(TA(MAP_INTEGER), v_bson(BSON_TYPE_ARRAY, &empty), "00000000 00000000 00000017");
    expect_hex(TA(MAP_TIMESTAMPTZ), v_bson(BSON_TYPE_ARRAY, &empty), "00000000 00000000 000004a0");
    bson_destroy(&empty);

    bson_t t = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&t, "0", "a");
    BSON_APPEND_UTF8(&t, "1", "");
    bson_append_undefined(&t, "2", 1);
    expect_hex(TA(MAP_TEXT), v_bson(BSON_TYPE_ARRAY, &t),
               "00000001 00000001 00000019 00000003 00000001  00000001 61  00000000  ffffffff");
    expect_hex(VC(1, true), v_bson(BSON_TYPE_ARRAY, &t),
               "00000001 00000001 00000413 00000003 00000001  00000001 61  00000000  ffffffff");
    expect_error(TA(MAP_UUID), v_bson(BSON_TYPE_ARRAY, &t), "element 0: string \"a\" is not a valid uuid");
    bson_destroy(&t);

    bson_t v = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&v, "0", "ab");
    BSON_APPEND_UTF8(&v, "1", "abc");
    expect_why(VC(2, true), v_bson(BSON_TYPE_ARRAY, &v),
               "element 1: string \"abc\" is 3 characters long, more than varchar(2) holds");
    bson_destroy(&v);

    bson_t mixed = BSON_INITIALIZER;
    BSON_APPEND_INT32(&mixed, "0", 1);
    BSON_APPEND_UTF8(&mixed, "1", "x");
    expect_why(TA(MAP_INTEGER), v_bson(BSON_TYPE_ARRAY, &mixed),
               "element 1: string \"x\" cannot be converted to integer");
    bson_destroy(&mixed);

    bson_t nested = BSON_INITIALIZER, inner = BSON_INITIALIZER;
    BSON_APPEND_INT32(&inner, "0", 1);
    BSON_APPEND_INT32(&nested, "0", 1);
    BSON_APPEND_INT32(&nested, "1", 2);
    BSON_APPEND_ARRAY(&nested, "2", &inner);
    expect_why(TA(MAP_INTEGER), v_bson(BSON_TYPE_ARRAY, &nested),
               "element 2: an array cannot be an element of integer[] (one dimension)");
    bson_destroy(&nested);
    bson_t docs = BSON_INITIALIZER;
    BSON_APPEND_DOCUMENT(&docs, "0", &inner);
    expect_why(TA(MAP_TEXT), v_bson(BSON_TYPE_ARRAY, &docs),
               "element 0: a document cannot be an element of text[] (one dimension)");
    bson_destroy(&docs);
    bson_destroy(&inner);
}
END_TEST

/* double precision[] from an array of doubles only takes a path of its own over the raw bytes (convert.c,
 * doubles_fast); its output must be what the element-by-element path writes: -0.0, NaN and the infinities bit for bit,
 * a mixed array (an int32 among the doubles) and a null element through the general path. */
START_TEST(test_double_arrays)
{
    bson_t a = BSON_INITIALIZER;
    BSON_APPEND_DOUBLE(&a, "0", 1.5);
    BSON_APPEND_DOUBLE(&a, "1", -0.0);
    BSON_APPEND_DOUBLE(&a, "2", INFINITY);
    BSON_APPEND_DOUBLE(&a, "3", -INFINITY);
    expect_hex(TA(MAP_DOUBLE), v_bson(BSON_TYPE_ARRAY, &a),
               "00000001 00000000 000002bd 00000004 00000001  00000008 3ff8000000000000  00000008 8000000000000000"
               "  00000008 7ff0000000000000  00000008 fff0000000000000");
    BSON_APPEND_INT32(&a, "4", 2); /* no longer doubles only: converted element by element */
    expect_hex(TA(MAP_DOUBLE), v_bson(BSON_TYPE_ARRAY, &a),
               "00000001 00000000 000002bd 00000005 00000001  00000008 3ff8000000000000  00000008 8000000000000000"
               "  00000008 7ff0000000000000  00000008 fff0000000000000  00000008 4000000000000000");
    bson_destroy(&a);

    bson_t n = BSON_INITIALIZER;
    BSON_APPEND_DOUBLE(&n, "0", 0.25);
    BSON_APPEND_NULL(&n, "1");
    expect_hex(TA(MAP_DOUBLE), v_bson(BSON_TYPE_ARRAY, &n),
               "00000001 00000001 000002bd 00000002 00000001  00000008 3fd0000000000000  ffffffff");
    bson_destroy(&n);

    /* 1 000 doubles, the benchmark's shape: each element round-trips. */
    bson_t big = BSON_INITIALIZER;
    char key[16];
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof key, "%d", i);
        BSON_APPEND_DOUBLE(&big, key, i * 0.1 - 7.0);
    }
    strbuf out = STRBUF_INIT;
    bool is_null = true;
    bson_value_t v = v_bson(BSON_TYPE_ARRAY, &big);
    ck_assert_int_eq(convert_binary(&out, &(map_type){.scalar = MAP_DOUBLE, .array = true}, &v, &is_null, NULL, 0),
                     CONVERT_OK);
    ck_assert(!is_null);
    ck_assert_uint_eq(out.len, 20 + 1000 * 12);
    for (int i = 0; i < 1000; i++) {
        const unsigned char *e = (const unsigned char *)out.data + 20 + i * 12;
        ck_assert_uint_eq(e[3], 8);
        uint64_t bits = 0;
        for (int b = 0; b < 8; b++)
            bits = bits << 8 | e[4 + b];
        double d;
        memcpy(&d, &bits, sizeof d);
        ck_assert(d == i * 0.1 - 7.0);
    }
    strbuf_free(&out);
    bson_destroy(&big);
}
END_TEST

START_TEST(test_arrays_of_every_type)
{
    const char u[] = "\xa0\xee\xbc\x99\x9c\x0b\x4e\xf8\xbb\x6d\x6b\xb9\xbd\x38\x0a\x11";
    bson_t a = BSON_INITIALIZER;
    bson_append_binary(&a, "0", 1, BSON_SUBTYPE_UUID, (const uint8_t *)u, 16);
    BSON_APPEND_UTF8(&a, "1", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11");
    expect_hex(TA(MAP_UUID), v_bson(BSON_TYPE_ARRAY, &a),
               "00000001 00000000 00000b86 00000002 00000001  00000010 a0eebc999c0b4ef8bb6d6bb9bd380a11"
               "  00000010 a0eebc999c0b4ef8bb6d6bb9bd380a11");
    bson_destroy(&a);

    bson_t n = BSON_INITIALIZER;
    bson_value_t one_and_a_half = v_dec("1.5");
    BSON_APPEND_DECIMAL128(&n, "0", &one_and_a_half.value.v_decimal128);
    BSON_APPEND_DOUBLE(&n, "1", INFINITY);
    expect_hex(TA(MAP_NUMERIC), v_bson(BSON_TYPE_ARRAY, &n),
               "00000001 00000000 000006a4 00000002 00000001  0000000c 0002 0000 0000 0001 0001 1388"
               "  00000008 0000 0000 d000 0000");
    bson_destroy(&n);

    bson_t d = BSON_INITIALIZER;
    BSON_APPEND_DATE_TIME(&d, "0", 946684800000);
    BSON_APPEND_UTF8(&d, "1", "2000-01-02");
    expect_hex(TA(MAP_DATE), v_bson(BSON_TYPE_ARRAY, &d),
               "00000001 00000000 0000043a 00000002 00000001  00000004 00000000  00000004 00000001");
    bson_destroy(&d);

    bson_t b = BSON_INITIALIZER;
    BSON_APPEND_BOOL(&b, "0", true);
    BSON_APPEND_NULL(&b, "1");
    expect_hex(TA(MAP_BOOLEAN), v_bson(BSON_TYPE_ARRAY, &b),
               "00000001 00000001 00000010 00000002 00000001  00000001 01  ffffffff");
    bson_destroy(&b);

    /* the keys of a BSON array are not looked at: elements are taken in order */
    bson_t k = BSON_INITIALIZER;
    BSON_APPEND_DOUBLE(&k, "7", 2.5);
    BSON_APPEND_DOUBLE(&k, "x", -1.0);
    expect_hex(TA(MAP_REAL), v_bson(BSON_TYPE_ARRAY, &k),
               "00000001 00000000 000002bc 00000002 00000001  00000004 40200000  00000004 bf800000");
    bson_destroy(&k);

    /* jsonb[] is not a column type */
    bson_t j = BSON_INITIALIZER;
    map_type jt = TA(MAP_JSONB);
    expect_error(jt, v_bson(BSON_TYPE_ARRAY, &j), "jsonb[] is not a column type");
    bson_destroy(&j);
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* COPY fields, failures, reasons */

START_TEST(test_copy_fields)
{
    strbuf out = STRBUF_INIT;
    char why[CONVERT_WHY_MAX];
    map_type i4 = T(MAP_INTEGER), tx = T(MAP_TEXT), i2 = T(MAP_SMALLINT);
    bson_value_t one = v_int32(1), empty = v_str(""), big = v_int32(70000);
    ck_assert_int_eq(convert_copy_field(&out, &i4, &one, why, sizeof why), CONVERT_OK);
    ck_assert_int_eq(convert_copy_field(&out, &tx, &empty, why, sizeof why), CONVERT_OK);
    ck_assert_int_eq(convert_copy_field(&out, &i2, &big, why, sizeof why), CONVERT_TYPE_ERROR);
    ck_assert_str_eq(why, "int32 70000 is out of range for smallint");
    ck_assert_int_eq(convert_copy_field(&out, &tx, NULL, why, sizeof why), CONVERT_OK);
    char hex[64];
    to_hex(out.data, out.len, hex);
    /* 1 as int4 (length 4), "" (length 0, not NULL), nothing for the refused field, NULL */
    ck_assert_str_eq(hex, "000000040000000100000000ffffffff");
    strbuf_free(&out);
}
END_TEST

START_TEST(test_out_of_memory_is_reported)
{
    strbuf out = STRBUF_INIT;
    out.failed = true; /* as after a failed allocation: sticky */
    bool is_null;
    map_type t = T(MAP_INTEGER);
    bson_value_t v = v_int32(1);
    ck_assert_int_eq(convert_binary(&out, &t, &v, &is_null, NULL, 0), CONVERT_NOMEM);
    ck_assert_int_eq(convert_copy_field(&out, &t, &v, NULL, 0), CONVERT_NOMEM);
    strbuf_free(&out);
}
END_TEST

START_TEST(test_reasons_are_short_and_printable)
{
    char s[201];
    memset(s, 'x', 200);
    s[200] = '\0';
    strbuf out = STRBUF_INIT;
    bool is_null;
    char why[CONVERT_WHY_MAX];
    map_type t = T(MAP_UUID);
    bson_value_t v = v_str(s);
    ck_assert_int_eq(convert_binary(&out, &t, &v, &is_null, why, sizeof why), CONVERT_TYPE_ERROR);
    ck_assert_msg(strlen(why) < 100, "%s", why);
    ck_assert_msg(strstr(why, "xxxxxxxxxx…\" is not a valid uuid") != NULL, "%s", why);
    /* cut at a character boundary: 30 two-byte characters then more */
    char wide[201] = "";
    for (int i = 0; i < 50; i++)
        strcat(wide, "é");
    v = v_str(wide);
    ck_assert_int_eq(convert_binary(&out, &t, &v, &is_null, why, sizeof why), CONVERT_TYPE_ERROR);
    ck_assert_msg(strstr(why, "éé…\" is not a valid uuid") != NULL, "%s", why);
    /* a small buffer is cut, not overrun */
    char tiny[12];
    memset(tiny, '#', sizeof tiny);
    ck_assert_int_eq(convert_binary(&out, &t, &v, &is_null, tiny, 8), CONVERT_TYPE_ERROR);
    ck_assert_int_eq(strlen(tiny), 7);
    ck_assert_int_eq(tiny[8], '#');
    /* a long document is cut too */
    bson_t doc = BSON_INITIALIZER;
    for (int i = 0; i < 40; i++) {
        char k[8];
        snprintf(k, sizeof k, "k%d", i);
        bson_append_int32(&doc, k, -1, i);
    }
    v = v_bson(BSON_TYPE_DOCUMENT, &doc);
    t = T(MAP_TEXT);
    ck_assert_int_eq(convert_binary(&out, &t, &v, &is_null, why, sizeof why), CONVERT_TYPE_ERROR);
    ck_assert_msg(strncmp(why, "document {\"k0\":0,\"k1\":1,", 24) == 0 && strstr(why, "… cannot be converted to text"),
                  "%s", why);
    bson_destroy(&doc);
    strbuf_free(&out);
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* the types of map.h */

START_TEST(test_oids)
{
    static const struct {
        map_scalar s;
        uint32_t oid, array_oid;
    } want[] = {
        {MAP_BOOLEAN, 16, 1000},   {MAP_BYTEA, 17, 1001},  {MAP_BIGINT, 20, 1016},      {MAP_SMALLINT, 21, 1005},
        {MAP_INTEGER, 23, 1007},   {MAP_TEXT, 25, 1009},   {MAP_REAL, 700, 1021},       {MAP_DOUBLE, 701, 1022},
        {MAP_VARCHAR, 1043, 1015}, {MAP_DATE, 1082, 1182}, {MAP_TIMESTAMP, 1114, 1115}, {MAP_TIMESTAMPTZ, 1184, 1185},
        {MAP_NUMERIC, 1700, 1231}, {MAP_UUID, 2950, 2951}, {MAP_JSONB, 3802, 3807},
    };
    ck_assert_int_eq(sizeof want / sizeof want[0], MAP_SCALAR_COUNT);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        map_type t = T(want[i].s);
        ck_assert_uint_eq(map_type_oid(&t), want[i].oid);
        ck_assert_uint_eq(map_scalar_oid(want[i].s), want[i].oid);
        t.array = true;
        ck_assert_uint_eq(map_type_oid(&t), want[i].array_oid);
    }
}
END_TEST

static void expect_parse_at(int line, const char *text, map_scalar s, bool array, uint32_t chars)
{
    map_type t;
    memset(&t, 0xab, sizeof t);
    ck_assert_msg(map_type_parse(text, &t), "line %d: \"%s\" refused", line, text);
    ck_assert_msg(t.scalar == s && t.array == array && (s != MAP_VARCHAR || t.varchar_chars == chars),
                  "line %d: \"%s\" read as %d%s (%u)", line, text, (int)t.scalar, t.array ? "[]" : "",
                  (unsigned)t.varchar_chars);
}
#define expect_parse(text, s, array, chars) expect_parse_at(__LINE__, text, s, array, chars)

START_TEST(test_type_parse)
{
    expect_parse("text", MAP_TEXT, false, 0);
    expect_parse("varchar(20)", MAP_VARCHAR, false, 20);
    expect_parse("character varying(1)", MAP_VARCHAR, false, 1);
    expect_parse("Character  Varying ( 20 ) [ ]", MAP_VARCHAR, true, 20);
    expect_parse("varchar(10485760)", MAP_VARCHAR, false, 10485760);
    expect_parse("boolean", MAP_BOOLEAN, false, 0);
    expect_parse("bool[]", MAP_BOOLEAN, true, 0);
    expect_parse("smallint", MAP_SMALLINT, false, 0);
    expect_parse("int2", MAP_SMALLINT, false, 0);
    expect_parse("integer", MAP_INTEGER, false, 0);
    expect_parse("INT", MAP_INTEGER, false, 0);
    expect_parse("int4[]", MAP_INTEGER, true, 0);
    expect_parse("bigint", MAP_BIGINT, false, 0);
    expect_parse("int8", MAP_BIGINT, false, 0);
    expect_parse("numeric", MAP_NUMERIC, false, 0);
    expect_parse("decimal[]", MAP_NUMERIC, true, 0);
    expect_parse("real", MAP_REAL, false, 0);
    expect_parse("float4", MAP_REAL, false, 0);
    expect_parse("double precision", MAP_DOUBLE, false, 0);
    expect_parse("  Double   Precision []", MAP_DOUBLE, true, 0);
    expect_parse("float8", MAP_DOUBLE, false, 0);
    expect_parse("timestamptz", MAP_TIMESTAMPTZ, false, 0);
    expect_parse("timestamp with time zone[]", MAP_TIMESTAMPTZ, true, 0);
    expect_parse("TIMESTAMP\tWITH TIME\nZONE", MAP_TIMESTAMPTZ, false, 0);
    expect_parse("timestamp", MAP_TIMESTAMP, false, 0);
    expect_parse("timestamp without time zone", MAP_TIMESTAMP, false, 0);
    expect_parse("date", MAP_DATE, false, 0);
    expect_parse("uuid[]", MAP_UUID, true, 0);
    expect_parse("bytea", MAP_BYTEA, false, 0);
    expect_parse("jsonb", MAP_JSONB, false, 0);
    expect_parse("JSONB", MAP_JSONB, false, 0);
    static const char *const refused[] = {
        "",
        "   ",
        "jsonb[]",
        "integer[][]",
        "int[3]",
        "integer array",
        "varchar",
        "varchar()",
        "varchar(0)",
        "varchar(-1)",
        "varchar(10485761)",
        "varchar(20",
        "varchar(20)x",
        "varchar(99999999999999999999)",
        "character varying",
        "char(3)",
        "float",
        "double",
        "precision",
        "numeric(10,2)",
        "timestamp(3)",
        "timestamptz(3)",
        "json",
        "int eger",
        "text text",
        "[]",
        "integer[",
        "time",
        "interval",
        "string",
        "integer []x",
        "doubleprecision",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        map_type t = T(MAP_TEXT);
        ck_assert_msg(!map_type_parse(refused[i], &t), "\"%s\" accepted", refused[i]);
        ck_assert_msg(t.scalar == MAP_TEXT && !t.array, "\"%s\": the output changed on a refusal", refused[i]);
    }
    char longtext[200];
    memset(longtext, ' ', sizeof longtext - 5);
    strcpy(longtext + sizeof longtext - 5, "int");
    map_type t;
    ck_assert(map_type_parse(longtext, &t)); /* leading white space does not count against the limit */
    ck_assert(!map_type_parse(NULL, &t));
}
END_TEST

START_TEST(test_type_sql)
{
    char buf[64];
    map_type t = VC(20, false);
    ck_assert_str_eq(map_type_sql(&t, buf, sizeof buf), "varchar(20)");
    t = TA(MAP_DOUBLE);
    ck_assert_str_eq(map_type_sql(&t, buf, sizeof buf), "double precision[]");
    t = T(MAP_TIMESTAMPTZ);
    ck_assert_str_eq(map_type_sql(&t, buf, sizeof buf), "timestamptz");
    /* every type reads back as itself */
    for (map_scalar s = MAP_TEXT; s < MAP_SCALAR_COUNT; s++) {
        for (int array = 0; array < 2; array++) {
            if (s == MAP_JSONB && array)
                continue;
            map_type in = s == MAP_VARCHAR ? VC(7, array) : T(s), back;
            in.array = array;
            ck_assert_msg(map_type_parse(map_type_sql(&in, buf, sizeof buf), &back), "%s", buf);
            ck_assert_msg(back.scalar == in.scalar && back.array == in.array &&
                              (s != MAP_VARCHAR || back.varchar_chars == 7),
                          "%s", buf);
        }
    }
    ck_assert_str_eq(map_rest_name(MAP_REST_DOC), "doc");
    ck_assert_str_eq(map_rest_name(MAP_REST_EXTRA), "extra");
    ck_assert_str_eq(map_rest_name(MAP_REST_DROP), "drop");
    ck_assert_str_eq(map_on_type_error_name(MAP_ON_TYPE_ERROR_DEAD_LETTER), "dead-letter");
    ck_assert_str_eq(map_on_type_error_name(MAP_ON_TYPE_ERROR_NULL), "null");
    ck_assert_str_eq(map_on_type_error_name(MAP_ON_TYPE_ERROR_INHERIT), "inherit");
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* keys: two _ids MongoDB keeps apart never get one key value */

/* The key field of v for t, as hex; NULL (and why filled) when it is refused. */
static char *key_hex(map_type t, bson_value_t v, char *why, size_t whylen)
{
    strbuf out = STRBUF_INIT;
    convert_status st = convert_key_field(&out, &t, &v, why, whylen);
    if (st != CONVERT_OK) {
        ck_assert_int_eq(st, CONVERT_TYPE_ERROR);
        ck_assert_uint_eq(out.len, 0);
        strbuf_free(&out);
        return NULL;
    }
    char *hex = malloc(2 * out.len + 1);
    to_hex(out.data, out.len, hex);
    strbuf_free(&out);
    return hex;
}

/* a and b are _ids MongoDB keeps apart: a is taken, and b is refused with a reason holding `part` or taken as
 * another key (part NULL). */
static void expect_apart_at(int line, map_type t, bson_value_t a, bson_value_t b, const char *part)
{
    char why[CONVERT_WHY_MAX] = "";
    char *ha = key_hex(t, a, why, sizeof why);
    ck_assert_msg(ha != NULL, "line %d: the first _id is refused: %s", line, why);
    char *hb = key_hex(t, b, why, sizeof why);
    if (part == NULL) {
        ck_assert_msg(hb != NULL, "line %d: the second _id is refused: %s", line, why);
        ck_assert_msg(strcmp(ha, hb) != 0, "line %d: two _ids MongoDB keeps apart are one key %s", line, ha);
    } else {
        ck_assert_msg(hb == NULL, "line %d: the second _id is taken as %s (the first is %s)", line, hb, ha);
        ck_assert_msg(strstr(why, part) != NULL, "line %d: reason \"%s\", want one with \"%s\"", line, why, part);
    }
    free(ha);
    free(hb);
}
#define expect_apart(t, a, b, part) expect_apart_at(__LINE__, t, a, b, part)

/* a and b are one _id to MongoDB (numbers compare by value): one key value. */
static void expect_same_key_at(int line, map_type t, bson_value_t a, bson_value_t b)
{
    char why[CONVERT_WHY_MAX] = "";
    char *ha = key_hex(t, a, why, sizeof why);
    ck_assert_msg(ha != NULL, "line %d: refused: %s", line, why);
    char *hb = key_hex(t, b, why, sizeof why);
    ck_assert_msg(hb != NULL, "line %d: refused: %s", line, why);
    ck_assert_msg(strcmp(ha, hb) == 0, "line %d: %s and %s", line, ha, hb);
    free(ha);
    free(hb);
}
#define expect_same_key(t, a, b) expect_same_key_at(__LINE__, t, a, b)

START_TEST(test_keys_never_merge)
{
    static const uint8_t u[16] = {0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8,
                                  0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11};
    static const uint8_t oid12[12] = {0x65, 0xa1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    const double two53 = 9007199254740992.0;
    /* the eight pairs that were one row */
    expect_apart(T(MAP_TEXT), v_oid("65a100000000000000000001"), v_str("65a100000000000000000001"),
                 "the text an ObjectId's key has");
    expect_apart(VC(30, false), v_oid("65a100000000000000000001"), v_str("65a100000000000000000001"),
                 "the text an ObjectId's key has");
    expect_apart(T(MAP_NUMERIC), v_dec("0.1"), v_double(0.1), "numeric holds its shortest decimal");
    expect_apart(T(MAP_DOUBLE), v_double(two53), v_int64(INT64_C(9007199254740993)), "not a value of the type");
    expect_apart(T(MAP_UUID), v_bin(BSON_SUBTYPE_UUID, u, 16), v_bin(BSON_SUBTYPE_UUID_DEPRECATED, u, 16),
                 "binary subtype 4 only");
    expect_apart(T(MAP_UUID), v_bin(BSON_SUBTYPE_UUID, u, 16), v_str("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
                 "binary subtype 4 only");
    expect_apart(T(MAP_UUID), v_bin(BSON_SUBTYPE_UUID, u, 16), v_str("A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"),
                 "binary subtype 4 only");
    expect_apart(T(MAP_TIMESTAMPTZ), v_date(INT64_C(1705312800000)), v_str("2024-01-15T10:00:00Z"), "BSON dates only");
    expect_apart(T(MAP_TIMESTAMP), v_date(INT64_C(1705312800000)), v_str("2024-01-15T12:00:00+02:00"),
                 "BSON dates only");
    expect_apart(T(MAP_BYTEA), v_bin(BSON_SUBTYPE_BINARY, oid12, 12), v_oid("65a100000000000000000001"),
                 "binary subtype 0 only");
    expect_apart(T(MAP_BYTEA), v_bin(BSON_SUBTYPE_BINARY, u, 16), v_bin(BSON_SUBTYPE_UUID, u, 16),
                 "binary subtype 0 only");
    expect_apart(T(MAP_DATE), v_date(INT64_C(1705276800000)), v_date(INT64_C(1705312800000)), "not midnight UTC");
    expect_apart(T(MAP_DATE), v_date(INT64_C(1705276800000)), v_str("2024-01-15"), "BSON dates only");
    /* what stays apart, each taken */
    expect_apart(T(MAP_TEXT), v_str("A-17"), v_str("a-17"), NULL);
    expect_apart(T(MAP_TEXT), v_oid("65a100000000000000000001"), v_str("65A100000000000000000001"), NULL);
    expect_apart(T(MAP_NUMERIC), v_dec("0.1"), v_dec("0.10000000000000001"), NULL);
    expect_apart(T(MAP_NUMERIC), v_double(two53), v_int64(INT64_C(9007199254740993)), NULL);
    expect_apart(T(MAP_BIGINT), v_double(two53), v_int64(INT64_C(9007199254740993)), NULL);
    expect_apart(T(MAP_DOUBLE), v_double(0.1), v_double(0.2), NULL);
    expect_apart(T(MAP_DATE), v_date(INT64_C(1705276800000)), v_date(INT64_C(1705276800000) - 86400000), NULL);
    expect_apart(T(MAP_DATE), v_date(INT64_C(-86400000)), v_date(0), NULL);
    /* one _id to MongoDB (numbers by value): one key, as the unique _id index has it */
    expect_same_key(T(MAP_BIGINT), v_int32(1), v_double(1.0));
    expect_same_key(T(MAP_BIGINT), v_int64(1), v_dec("1.00"));
    expect_same_key(T(MAP_NUMERIC), v_int32(3), v_double(3.0));
    expect_same_key(T(MAP_NUMERIC), v_double(-0.0), v_int32(0));
    expect_same_key(T(MAP_DOUBLE), v_int64(INT64_C(9007199254740992)), v_double(two53));
    expect_same_key(T(MAP_DOUBLE), v_dec("5"), v_int32(5));
    expect_same_key(T(MAP_REAL), v_int32(16777216), v_double(16777216.0));
    /* the refusals at the edges */
    char why[CONVERT_WHY_MAX];
    ck_assert_ptr_null(key_hex(T(MAP_NUMERIC), v_double(two53 * 2), why, sizeof why));
    ck_assert_ptr_null(key_hex(T(MAP_NUMERIC), v_double(0.5), why, sizeof why));
    ck_assert_ptr_null(key_hex(T(MAP_DOUBLE), v_dec("0.1"), why, sizeof why));
    ck_assert_ptr_null(key_hex(T(MAP_DOUBLE), v_int64(INT64_MAX), why, sizeof why));
    ck_assert_ptr_null(key_hex(T(MAP_REAL), v_int32(16777217), why, sizeof why));
    ck_assert_ptr_null(key_hex(T(MAP_REAL), v_double(0.1), why, sizeof why));
    ck_assert_ptr_null(key_hex(T(MAP_DATE), v_date(-1), why, sizeof why));
    ck_assert_ptr_null(key_hex(T(MAP_JSONB), v_int32(1), why, sizeof why));
    ck_assert_ptr_null(key_hex(TA(MAP_INTEGER), v_int32(1), why, sizeof why));
    ck_assert_ptr_null(key_hex(T(MAP_TEXT), v_type(BSON_TYPE_NULL), why, sizeof why));
    ck_assert_str_eq(why, "a key cannot be NULL");
    ck_assert_ptr_null(key_hex(T(MAP_TEXT), v_type(BSON_TYPE_MINKEY), why, sizeof why));
    /* a conversion's own refusals still apply */
    ck_assert_ptr_null(key_hex(T(MAP_INTEGER), v_double(1.5), why, sizeof why));
    ck_assert_msg(strstr(why, "is not integral") != NULL, "%s", why);
    ck_assert(map_type_key_ok(&(map_type){.scalar = MAP_UUID}));
    ck_assert(!map_type_key_ok(&(map_type){.scalar = MAP_JSONB}));
    ck_assert(!map_type_key_ok(&(map_type){.scalar = MAP_TEXT, .array = true}));
}
END_TEST

Suite *convert_suite(void)
{
    Suite *s = suite_create("convert");
    TCase *tc = tcase_create("convert");
    tcase_add_test(tc, test_integers_from_integers);
    tcase_add_test(tc, test_double_arrays);
    tcase_add_test(tc, test_integers_from_doubles);
    tcase_add_test(tc, test_integers_from_decimal128);
    tcase_add_test(tc, test_integers_refuse_other_types);
    tcase_add_test(tc, test_numeric_from_integers);
    tcase_add_test(tc, test_numeric_from_decimal128);
    tcase_add_test(tc, test_numeric_from_doubles);
    tcase_add_test(tc, test_floats);
    tcase_add_test(tc, test_float_nan);
    tcase_add_test(tc, test_text);
    tcase_add_test(tc, test_varchar_counts_characters);
    tcase_add_test(tc, test_boolean);
    tcase_add_test(tc, test_bytea);
    tcase_add_test(tc, test_uuid_from_strings);
    tcase_add_test(tc, test_uuid_from_binary);
    tcase_add_test(tc, test_date_from_strings);
    tcase_add_test(tc, test_timestamps_from_strings);
    tcase_add_test(tc, test_timestamps_from_dates);
    tcase_add_test(tc, test_date_from_dates);
    tcase_add_test(tc, test_jsonb);
    tcase_add_test(tc, test_nulls);
    tcase_add_test(tc, test_arrays);
    tcase_add_test(tc, test_arrays_of_every_type);
    tcase_add_test(tc, test_copy_fields);
    tcase_add_test(tc, test_out_of_memory_is_reported);
    tcase_add_test(tc, test_reasons_are_short_and_printable);
    tcase_add_test(tc, test_oids);
    tcase_add_test(tc, test_type_parse);
    tcase_add_test(tc, test_type_sql);
    tcase_add_test(tc, test_keys_never_merge);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_convert_pg.c — PostgreSQL reads back what map/convert.h writes.
 *
 * Each value is converted, sent as a binary parameter with the type's OID (as the sink sends it), and read back as
 * text (`SELECT $1::text`) in a session with TimeZone UTC and ISO dates: every type, every array type, the numeric
 * edge cases (decimal128's extremes, exponents, NaN and the infinities), the date and timestamp limits. A table with a
 * column of every type is then filled by a binary COPY built with convert_copy_field, which also has PostgreSQL
 * apply varchar(n)'s limit (in characters, as convert counts them). The OIDs and the type spellings of map.h are
 * checked against pg_type.
 */
#include <bson/bson.h>
#include <check.h>
#include <libpq-fe.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map/convert.h"

Suite *convert_pg_suite(void);

static void quiet_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

static PGresult *exec_ok(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql,
                  PQresultErrorMessage(r));
    return r;
}

static PGconn *connect_pg(void)
{
    const char *conninfo = getenv("OPLOG2PG_TEST_PG");
    ck_assert_msg(conninfo != NULL && *conninfo,
                  "OPLOG2PG_TEST_PG is not set: run under scripts/with-pg.sh (it sets a libpq conninfo)");
    PGconn *c = PQconnectdb(conninfo);
    ck_assert_msg(PQstatus(c) == CONNECTION_OK, "cannot connect to PostgreSQL (%s): %s", conninfo, PQerrorMessage(c));
    PQsetNoticeProcessor(c, quiet_notice, NULL);
    PQclear(exec_ok(c, "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; SET extra_float_digits = 1; "
                       "SET bytea_output = 'hex'"));
    return c;
}

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

static bson_value_t v_str(const char *s)
{
    bson_value_t v = {.value_type = BSON_TYPE_UTF8};
    v.value.v_utf8.str = (char *)s;
    v.value.v_utf8.len = (uint32_t)strlen(s);
    return v;
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

/* prefix, then n copies of c, then suffix (bson_free) */
static char *repeat(const char *prefix, char c, size_t n, const char *suffix)
{
    size_t p = strlen(prefix), s = strlen(suffix);
    char *out = bson_malloc(p + n + s + 1);
    memcpy(out, prefix, p);
    memset(out + p, c, n);
    memcpy(out + p + n, suffix, s + 1);
    return out;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* the check */

static const char *SHARED_SQL = "SELECT $1::text";

/* v converted for t, sent as a binary parameter of t's OID, reads back as want (NULL: SQL NULL). */
static void expect_pg_at(int line, PGconn *c, map_type t, bson_value_t v, const char *want)
{
    strbuf b = STRBUF_INIT;
    bool is_null = false;
    char why[CONVERT_WHY_MAX] = "";
    convert_status st = convert_binary(&b, &t, &v, &is_null, why, sizeof why);
    ck_assert_msg(st == CONVERT_OK, "line %d: refused: %s", line, why);
    Oid types[1] = {map_type_oid(&t)};
    const char *vals[1] = {is_null ? NULL : b.data != NULL ? b.data : ""};
    int lens[1] = {(int)b.len};
    int fmts[1] = {1};
    PGresult *r = PQexecParams(c, SHARED_SQL, 1, types, vals, lens, fmts, 0);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "line %d: PostgreSQL refused it: %s", line,
                  PQresultErrorMessage(r));
    const char *got = PQgetisnull(r, 0, 0) ? NULL : PQgetvalue(r, 0, 0);
    bool same = (got == NULL && want == NULL) || (got != NULL && want != NULL && strcmp(got, want) == 0);
    ck_assert_msg(same, "line %d: PostgreSQL read %.300s%s, want %.300s%s", line, got ? got : "NULL",
                  got && strlen(got) > 300 ? "…" : "", want ? want : "NULL", want && strlen(want) > 300 ? "…" : "");
    PQclear(r);
    strbuf_free(&b);
}
#define expect_pg(c, t, v, want) expect_pg_at(__LINE__, c, t, v, want)

/* ---------------------------------------------------------------------------------------------------------------- */
/* scalars */

START_TEST(test_integers_and_floats)
{
    PGconn *c = connect_pg();
    expect_pg(c, T(MAP_SMALLINT), v_int32(32767), "32767");
    expect_pg(c, T(MAP_SMALLINT), v_int32(-32768), "-32768");
    expect_pg(c, T(MAP_SMALLINT), v_double(-0.0), "0");
    expect_pg(c, T(MAP_INTEGER), v_int64(2147483647), "2147483647");
    expect_pg(c, T(MAP_INTEGER), v_double(-2147483648.0), "-2147483648");
    expect_pg(c, T(MAP_INTEGER), v_dec("1E+3"), "1000");
    expect_pg(c, T(MAP_BIGINT), v_int64(INT64_MIN), "-9223372036854775808");
    expect_pg(c, T(MAP_BIGINT), v_int64(INT64_MAX), "9223372036854775807");
    expect_pg(c, T(MAP_BIGINT), v_double(9007199254740992.0), "9007199254740992");
    expect_pg(c, T(MAP_BIGINT), v_double(-9223372036854775808.0), "-9223372036854775808");
    expect_pg(c, T(MAP_BIGINT), v_dec("92233720368547758.07E+2"), "9223372036854775807");

    expect_pg(c, T(MAP_DOUBLE), v_double(0.1), "0.1");
    expect_pg(c, T(MAP_DOUBLE), v_double(-0.0), "-0");
    expect_pg(c, T(MAP_DOUBLE), v_double(1.7976931348623157e308), "1.7976931348623157e+308");
    expect_pg(c, T(MAP_DOUBLE), v_double(5e-324), "5e-324");
    expect_pg(c, T(MAP_DOUBLE), v_double(NAN), "NaN");
    expect_pg(c, T(MAP_DOUBLE), v_double(-INFINITY), "-Infinity");
    expect_pg(c, T(MAP_DOUBLE), v_int64(9007199254740993), "9.007199254740992e+15"); /* 2^53 + 1: nearest */
    expect_pg(c, T(MAP_DOUBLE), v_dec("0.1"), "0.1");
    expect_pg(c, T(MAP_DOUBLE), v_dec("-Infinity"), "-Infinity");
    expect_pg(c, T(MAP_REAL), v_double(0.1), "0.1");
    expect_pg(c, T(MAP_REAL), v_dec("0.1"), "0.1");
    expect_pg(c, T(MAP_REAL), v_double(3.4028234663852886e38), "3.4028235e+38");
    expect_pg(c, T(MAP_REAL), v_double(1e-50), "0");
    expect_pg(c, T(MAP_REAL), v_int32(16777217), "1.6777216e+07");
    expect_pg(c, T(MAP_REAL), v_double(INFINITY), "Infinity");
    expect_pg(c, T(MAP_REAL), v_dec("NaN"), "NaN");
    PQfinish(c);
}
END_TEST

START_TEST(test_numeric)
{
    PGconn *c = connect_pg();
    map_type n = T(MAP_NUMERIC);
    expect_pg(c, n, v_int32(0), "0");
    expect_pg(c, n, v_int32(12345), "12345");
    expect_pg(c, n, v_int64(INT64_MIN), "-9223372036854775808");
    expect_pg(c, n, v_int64(10000), "10000");
    expect_pg(c, n, v_dec("1.00"), "1.00");
    expect_pg(c, n, v_dec("-1.5"), "-1.5");
    expect_pg(c, n, v_dec("1234.5678"), "1234.5678");
    expect_pg(c, n, v_dec("12345678.9"), "12345678.9");
    expect_pg(c, n, v_dec("0.00001"), "0.00001");
    expect_pg(c, n, v_dec("1E+3"), "1000");
    expect_pg(c, n, v_dec("1.0E-7"), "0.00000010");
    expect_pg(c, n, v_dec("0E-10"), "0.0000000000");
    expect_pg(c, n, v_dec("-0"), "0");
    expect_pg(c, n, v_dec("-0.00"), "0.00");
    expect_pg(c, n, v_dec("NaN"), "NaN");
    expect_pg(c, n, v_dec("Infinity"), "Infinity");
    expect_pg(c, n, v_dec("-Infinity"), "-Infinity");
    expect_pg(c, n, v_dec("1234567890123456789012345678901234"), "1234567890123456789012345678901234");
    char *want = repeat("9999999999999999999999999999999999", '0', 6111, "");
    expect_pg(c, n, v_dec("9.999999999999999999999999999999999E+6144"), want);
    bson_free(want);
    want = repeat("0.", '0', 6175, "1");
    expect_pg(c, n, v_dec("1E-6176"), want);
    bson_free(want);
    want = repeat("-0.", '0', 6142, "1234567890123456789012345678901234");
    expect_pg(c, n, v_dec("-1.234567890123456789012345678901234E-6143"), want);
    bson_free(want);
    /* doubles: the shortest decimal that reads back as the same double */
    expect_pg(c, n, v_double(0.1), "0.1");
    expect_pg(c, n, v_double(0.1 + 0.2), "0.30000000000000004");
    expect_pg(c, n, v_double(-2.5), "-2.5");
    expect_pg(c, n, v_double(3.0), "3");
    expect_pg(c, n, v_double(-0.0), "0");
    expect_pg(c, n, v_double(123456.789), "123456.789");
    expect_pg(c, n, v_double(1e-7), "0.0000001");
    want = repeat("1", '0', 300, "");
    expect_pg(c, n, v_double(1e300), want);
    bson_free(want);
    want = repeat("17976931348623157", '0', 292, "");
    expect_pg(c, n, v_double(1.7976931348623157e308), want);
    bson_free(want);
    want = repeat("0.", '0', 323, "5");
    expect_pg(c, n, v_double(5e-324), want);
    bson_free(want);
    expect_pg(c, n, v_double(NAN), "NaN");
    expect_pg(c, n, v_double(INFINITY), "Infinity");
    expect_pg(c, n, v_double(-INFINITY), "-Infinity");
    PQfinish(c);
}
END_TEST

START_TEST(test_strings_and_binary)
{
    PGconn *c = connect_pg();
    expect_pg(c, T(MAP_TEXT), v_str("naïve 日本 😀"), "naïve 日本 😀");
    expect_pg(c, T(MAP_TEXT), v_str(""), "");
    expect_pg(c, T(MAP_TEXT), v_oid("65a1f0c2e4b0a1b2c3d4e5f6"), "65a1f0c2e4b0a1b2c3d4e5f6");
    expect_pg(c, VC(3, false), v_str("日本語"), "日本語");
    expect_pg(c, T(MAP_BOOLEAN), v_bool(true), "true");
    expect_pg(c, T(MAP_BOOLEAN), v_bool(false), "false");
    expect_pg(c, T(MAP_BYTEA), v_bin(BSON_SUBTYPE_BINARY, "\x01\x02\x00\xff", 4), "\\x010200ff");
    expect_pg(c, T(MAP_BYTEA), v_bin(BSON_SUBTYPE_BINARY, "", 0), "\\x");
    expect_pg(c, T(MAP_BYTEA), v_oid("65a1f0c2e4b0a1b2c3d4e5f6"), "\\x65a1f0c2e4b0a1b2c3d4e5f6");
    const char *canon = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11";
    expect_pg(c, T(MAP_UUID), v_str(canon), canon);
    expect_pg(c, T(MAP_UUID), v_str("{A0EEBC99-9C0B4EF8-BB6D6BB9-BD380A11}"), canon);
    expect_pg(c, T(MAP_UUID), v_str("a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11"), canon);
    expect_pg(c, T(MAP_UUID),
              v_bin(BSON_SUBTYPE_UUID, "\xa0\xee\xbc\x99\x9c\x0b\x4e\xf8\xbb\x6d\x6b\xb9\xbd\x38\x0a\x11", 16), canon);
    PQfinish(c);
}
END_TEST

START_TEST(test_dates_and_timestamps)
{
    PGconn *c = connect_pg();
    map_type d = T(MAP_DATE), tz = T(MAP_TIMESTAMPTZ), ts = T(MAP_TIMESTAMP);
    expect_pg(c, d, v_str("2024-02-29"), "2024-02-29");
    expect_pg(c, d, v_str("0001-01-01"), "0001-01-01");
    expect_pg(c, d, v_str("9999-12-31"), "9999-12-31");
    expect_pg(c, d, v_str("1900-03-01"), "1900-03-01");
    expect_pg(c, d, v_date(-1), "1969-12-31");
    expect_pg(c, d, v_date(0), "1970-01-01");
    expect_pg(c, d, v_date(946684799999), "1999-12-31");
    expect_pg(c, d, v_date(-210866803200000), "4714-11-24 BC");
    expect_pg(c, d, v_date(INT64_C(2145042906) * 86400000 - 1), "5874897-12-31");

    expect_pg(c, tz, v_str("2024-01-15T10:30:00.123+02:00"), "2024-01-15 08:30:00.123+00");
    expect_pg(c, tz, v_str("2024-01-15 10:30"), "2024-01-15 10:30:00+00");
    expect_pg(c, tz, v_str("2024-01-15"), "2024-01-15 00:00:00+00");
    expect_pg(c, tz, v_str("0001-01-01T00:30:00+01:00"), "0001-12-31 23:30:00+00 BC");
    expect_pg(c, tz, v_str("9999-12-31T23:59:59.999999Z"), "9999-12-31 23:59:59.999999+00");
    expect_pg(c, tz, v_str("1999-12-31T23:59:60Z"), "2000-01-01 00:00:00+00");
    expect_pg(c, tz, v_str("1969-07-20T20:17:40-05:00"), "1969-07-21 01:17:40+00");
    expect_pg(c, tz, v_date(-1), "1969-12-31 23:59:59.999+00");
    expect_pg(c, tz, v_date(1705314600123), "2024-01-15 10:30:00.123+00");
    expect_pg(c, tz, v_date(-210866803200000), "4714-11-24 00:00:00+00 BC");
    expect_pg(c, tz, v_date(9224318015999999), "294276-12-31 23:59:59.999+00");
    expect_pg(c, ts, v_str("2000-01-01T02:00:00+02:00"), "2000-01-01 00:00:00");
    expect_pg(c, ts, v_date(-62135596800001), "0001-12-31 23:59:59.999 BC");
    expect_pg(c, ts, v_date(9224318015999999), "294276-12-31 23:59:59.999");
    PQfinish(c);
}
END_TEST

START_TEST(test_jsonb)
{
    PGconn *c = connect_pg();
    map_type j = T(MAP_JSONB);
    bson_t doc = BSON_INITIALIZER, arr = BSON_INITIALIZER;
    BSON_APPEND_INT32(&doc, "b", 1);
    BSON_APPEND_UTF8(&doc, "a", "x");
    BSON_APPEND_DATE_TIME(&doc, "d", 0);
    BSON_APPEND_DOUBLE(&arr, "0", 1.0);
    BSON_APPEND_NULL(&arr, "1");
    BSON_APPEND_DOCUMENT(&arr, "2", &doc);
    expect_pg(c, j, v_bson(BSON_TYPE_DOCUMENT, &doc),
              "{\"a\": \"x\", \"b\": 1, \"d\": {\"$date\": \"1970-01-01T00:00:00Z\"}}");
    expect_pg(c, j, v_bson(BSON_TYPE_ARRAY, &arr),
              "[1.0, null, {\"a\": \"x\", \"b\": 1, \"d\": {\"$date\": \"1970-01-01T00:00:00Z\"}}]");
    expect_pg(c, j, v_str("a\\u0000"), "\"a\\\\u0000\"");
    expect_pg(c, j, v_int64(INT64_MAX), "9223372036854775807");
    expect_pg(c, j, v_double(NAN), "{\"$numberDouble\": \"NaN\"}");
    expect_pg(c, j, v_dec("1.00"), "{\"$numberDecimal\": \"1.00\"}");
    bson_destroy(&doc);
    bson_destroy(&arr);
    PQfinish(c);
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* arrays */

START_TEST(test_arrays)
{
    PGconn *c = connect_pg();
    bson_t empty = BSON_INITIALIZER;
    for (map_scalar s = MAP_TEXT; s < MAP_JSONB; s++) {
        map_type t = s == MAP_VARCHAR ? VC(3, true) : TA(s);
        expect_pg(c, t, v_bson(BSON_TYPE_ARRAY, &empty), "{}");
    }
    bson_destroy(&empty);

    bson_t n = BSON_INITIALIZER;
    BSON_APPEND_INT32(&n, "0", 1);
    BSON_APPEND_NULL(&n, "1");
    BSON_APPEND_DOUBLE(&n, "2", -3.0);
    expect_pg(c, TA(MAP_SMALLINT), v_bson(BSON_TYPE_ARRAY, &n), "{1,NULL,-3}");
    expect_pg(c, TA(MAP_INTEGER), v_bson(BSON_TYPE_ARRAY, &n), "{1,NULL,-3}");
    expect_pg(c, TA(MAP_BIGINT), v_bson(BSON_TYPE_ARRAY, &n), "{1,NULL,-3}");
    expect_pg(c, TA(MAP_REAL), v_bson(BSON_TYPE_ARRAY, &n), "{1,NULL,-3}");
    expect_pg(c, TA(MAP_DOUBLE), v_bson(BSON_TYPE_ARRAY, &n), "{1,NULL,-3}");
    expect_pg(c, TA(MAP_NUMERIC), v_bson(BSON_TYPE_ARRAY, &n), "{1,NULL,-3}");
    bson_destroy(&n);

    bson_t num = BSON_INITIALIZER;
    bson_value_t d1 = v_dec("1.50"), d2 = v_dec("-Infinity");
    BSON_APPEND_DECIMAL128(&num, "0", &d1.value.v_decimal128);
    BSON_APPEND_DECIMAL128(&num, "1", &d2.value.v_decimal128);
    BSON_APPEND_DOUBLE(&num, "2", NAN);
    expect_pg(c, TA(MAP_NUMERIC), v_bson(BSON_TYPE_ARRAY, &num), "{1.50,-Infinity,NaN}");
    bson_destroy(&num);

    bson_t t = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&t, "0", "a");
    BSON_APPEND_UTF8(&t, "1", "");
    bson_append_undefined(&t, "2", 1);
    BSON_APPEND_UTF8(&t, "3", "日本語");
    BSON_APPEND_UTF8(&t, "4", "a,\"b\"");
    expect_pg(c, TA(MAP_TEXT), v_bson(BSON_TYPE_ARRAY, &t), "{a,\"\",NULL,日本語,\"a,\\\"b\\\"\"}");
    bson_destroy(&t);

    bson_t v = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&v, "0", "ab");
    BSON_APPEND_NULL(&v, "1");
    expect_pg(c, VC(2, true), v_bson(BSON_TYPE_ARRAY, &v), "{ab,NULL}");
    bson_destroy(&v);

    bson_t b = BSON_INITIALIZER;
    BSON_APPEND_BOOL(&b, "0", true);
    BSON_APPEND_BOOL(&b, "1", false);
    BSON_APPEND_NULL(&b, "2");
    expect_pg(c, TA(MAP_BOOLEAN), v_bson(BSON_TYPE_ARRAY, &b), "{t,f,NULL}");
    bson_destroy(&b);

    bson_t dt = BSON_INITIALIZER;
    BSON_APPEND_DATE_TIME(&dt, "0", 0);
    BSON_APPEND_UTF8(&dt, "1", "2000-01-02T03:04:05.5+01:00");
    expect_pg(c, TA(MAP_TIMESTAMPTZ), v_bson(BSON_TYPE_ARRAY, &dt),
              "{\"1970-01-01 00:00:00+00\",\"2000-01-02 02:04:05.5+00\"}");
    expect_pg(c, TA(MAP_TIMESTAMP), v_bson(BSON_TYPE_ARRAY, &dt),
              "{\"1970-01-01 00:00:00\",\"2000-01-02 02:04:05.5\"}");
    bson_destroy(&dt);

    bson_t days = BSON_INITIALIZER;
    BSON_APPEND_DATE_TIME(&days, "0", -1);
    BSON_APPEND_UTF8(&days, "1", "2000-01-02");
    expect_pg(c, TA(MAP_DATE), v_bson(BSON_TYPE_ARRAY, &days), "{1969-12-31,2000-01-02}");
    bson_destroy(&days);

    bson_t u = BSON_INITIALIZER;
    bson_append_binary(&u, "0", 1, BSON_SUBTYPE_UUID,
                       (const uint8_t *)"\xa0\xee\xbc\x99\x9c\x0b\x4e\xf8\xbb\x6d\x6b\xb9\xbd\x38\x0a\x11", 16);
    BSON_APPEND_UTF8(&u, "1", "00000000-0000-0000-0000-000000000000");
    expect_pg(c, TA(MAP_UUID), v_bson(BSON_TYPE_ARRAY, &u),
              "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,00000000-0000-0000-0000-000000000000}");
    bson_destroy(&u);

    bson_t by = BSON_INITIALIZER;
    bson_append_binary(&by, "0", 1, BSON_SUBTYPE_BINARY, (const uint8_t *)"\x01\x02", 2);
    BSON_APPEND_NULL(&by, "1");
    expect_pg(c, TA(MAP_BYTEA), v_bson(BSON_TYPE_ARRAY, &by), "{\"\\\\x0102\",NULL}");
    bson_destroy(&by);
    PQfinish(c);
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* binary COPY into a table with a column of every type */

static const struct {
    const char *name;
    const char *type; /* as the map writes it */
} columns[] = {
    {"t", "text"},       {"v", "varchar(3)"},    {"b", "boolean"},    {"i2", "smallint"},        {"i4", "integer"},
    {"i8", "bigint"},    {"n", "numeric"},       {"r", "real"},       {"d", "double precision"}, {"tz", "timestamptz"},
    {"ts", "timestamp"}, {"dt", "date"},         {"u", "uuid"},       {"by", "bytea"},           {"j", "jsonb"},
    {"ai", "integer[]"}, {"av", "varchar(2)[]"}, {"an", "numeric[]"},
};
#define NCOLS (sizeof columns / sizeof columns[0])

/* One COPY row: the values of the columns in order (NULL entries: the field is missing). */
static void copy_row(strbuf *out, const bson_value_t *vals[NCOLS])
{
    strbuf_put_be16(out, (uint16_t)NCOLS);
    for (size_t i = 0; i < NCOLS; i++) {
        map_type t;
        ck_assert(map_type_parse(columns[i].type, &t));
        char why[CONVERT_WHY_MAX] = "";
        ck_assert_msg(convert_copy_field(out, &t, vals[i], why, sizeof why) == CONVERT_OK, "%s: %s", columns[i].name,
                      why);
    }
}

START_TEST(test_binary_copy)
{
    PGconn *c = connect_pg();
    strbuf sql = STRBUF_INIT;
    strbuf_puts(&sql, "DROP TABLE IF EXISTS convert_copy; CREATE TABLE convert_copy (");
    for (size_t i = 0; i < NCOLS; i++)
        strbuf_printf(&sql, "%s%s %s", i ? ", " : "", columns[i].name, columns[i].type);
    strbuf_puts(&sql, ")");
    PQclear(exec_ok(c, sql.data));
    strbuf_free(&sql);

    bson_value_t t = v_str("tëxt"), v = v_str("日本語"), b = v_bool(true), i2 = v_int32(-32768),
                 i4 = v_double(2147483647.0), i8 = v_dec("-9223372036854775808"), n = v_dec("-1.234E-20"),
                 r = v_double(0.1), d = v_int64(-7), tz = v_date(1705314600123), ts = v_str("2024-01-15T10:30:00Z"),
                 dt = v_date(-86400001), u = v_str("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
                 by = v_bin(BSON_SUBTYPE_USER, "\x00\x01", 2);
    bson_t doc = BSON_INITIALIZER, ai = BSON_INITIALIZER, av = BSON_INITIALIZER, an = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&doc, "k", "v");
    BSON_APPEND_INT32(&ai, "0", 7);
    BSON_APPEND_NULL(&ai, "1");
    BSON_APPEND_UTF8(&av, "0", "é!");
    BSON_APPEND_DOUBLE(&an, "0", INFINITY);
    BSON_APPEND_INT64(&an, "1", 5);
    bson_value_t j = v_bson(BSON_TYPE_DOCUMENT, &doc), aiv = v_bson(BSON_TYPE_ARRAY, &ai),
                 avv = v_bson(BSON_TYPE_ARRAY, &av), anv = v_bson(BSON_TYPE_ARRAY, &an);
    const bson_value_t *row1[NCOLS] = {&t,  &v,  &b,  &i2, &i4, &i8, &n,   &r,   &d,
                                       &tz, &ts, &dt, &u,  &by, &j,  &aiv, &avv, &anv};
    const bson_value_t *row2[NCOLS] = {NULL};

    strbuf data = STRBUF_INIT;
    strbuf_append(&data, "PGCOPY\n\377\r\n\0", 11);
    strbuf_put_be32(&data, 0); /* flags */
    strbuf_put_be32(&data, 0); /* header extension */
    copy_row(&data, row1);
    copy_row(&data, row2);
    strbuf_put_be16(&data, 0xFFFF);
    ck_assert(!strbuf_failed(&data));

    PGresult *res = PQexec(c, "COPY convert_copy FROM STDIN (FORMAT binary)");
    ck_assert_msg(PQresultStatus(res) == PGRES_COPY_IN, "%s", PQresultErrorMessage(res));
    PQclear(res);
    ck_assert(PQputCopyData(c, data.data, (int)data.len) == 1);
    ck_assert(PQputCopyEnd(c, NULL) == 1);
    res = PQgetResult(c);
    ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK, "COPY failed: %s", PQresultErrorMessage(res));
    PQclear(res);
    while ((res = PQgetResult(c)) != NULL)
        PQclear(res);
    strbuf_free(&data);

    static const char *const want[NCOLS] = {
        "tëxt",
        "日本語",
        "t",
        "-32768",
        "2147483647",
        "-9223372036854775808",
        "-0.00000000000000000001234",
        "0.1",
        "-7",
        "2024-01-15 10:30:00.123+00",
        "2024-01-15 10:30:00",
        "1969-12-30",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "\\x0001",
        "{\"k\": \"v\"}",
        "{7,NULL}",
        "{é!}",
        "{Infinity,5}",
    };
    res = exec_ok(c, "SELECT * FROM convert_copy");
    ck_assert_int_eq(PQntuples(res), 2);
    ck_assert_int_eq(PQnfields(res), (int)NCOLS);
    for (int row = 0; row < 2; row++) {
        int k = PQgetisnull(res, row, 0) ? 1 : 0; /* row order is not promised: the all-NULL row is the other */
        for (size_t i = 0; i < NCOLS; i++) {
            if (k == 1) {
                ck_assert_msg(PQgetisnull(res, row, (int)i), "%s is not NULL", columns[i].name);
                continue;
            }
            ck_assert_msg(!PQgetisnull(res, row, (int)i) && strcmp(PQgetvalue(res, row, (int)i), want[i]) == 0,
                          "%s: PostgreSQL read %s, want %s", columns[i].name, PQgetvalue(res, row, (int)i), want[i]);
        }
    }
    PQclear(res);
    bson_destroy(&doc);
    bson_destroy(&ai);
    bson_destroy(&av);
    bson_destroy(&an);
    PQclear(exec_ok(c, "DROP TABLE convert_copy"));
    PQfinish(c);
}
END_TEST

/* PostgreSQL's varchar(n) limit is the one convert applies: characters, not bytes. */
START_TEST(test_varchar_limit_agrees)
{
    PGconn *c = connect_pg();
    PQclear(exec_ok(c, "DROP TABLE IF EXISTS convert_vc; CREATE TABLE convert_vc (v varchar(3))"));
    static const struct {
        const char *s;
        bool fits;
    } cases[] = {{"abc", true}, {"日本語", true}, {"😀😀😀", true}, {"abcd", false}, {"日本語x", false}};
    map_type text = T(MAP_TEXT), vc = VC(3, false);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bson_value_t v = v_str(cases[i].s);
        strbuf b = STRBUF_INIT;
        bool is_null;
        char why[CONVERT_WHY_MAX];
        convert_status st = convert_binary(&b, &vc, &v, &is_null, why, sizeof why);
        ck_assert_msg((st == CONVERT_OK) == cases[i].fits, "%s: convert says %s", cases[i].s, why);
        /* the bytes as text, so that PostgreSQL's own check runs on the assignment */
        strbuf_reset(&b, 0);
        ck_assert_int_eq(convert_binary(&b, &text, &v, &is_null, why, sizeof why), CONVERT_OK);
        Oid types[1] = {map_type_oid(&vc)};
        const char *vals[1] = {b.data};
        int lens[1] = {(int)b.len}, fmts[1] = {1};
        PGresult *r = PQexecParams(c, "INSERT INTO convert_vc VALUES ($1)", 1, types, vals, lens, fmts, 0);
        ck_assert_msg((PQresultStatus(r) == PGRES_COMMAND_OK) == cases[i].fits, "%s: PostgreSQL says %s", cases[i].s,
                      PQresultStatus(r) == PGRES_COMMAND_OK ? "it fits" : PQresultErrorMessage(r));
        PQclear(r);
        strbuf_free(&b);
    }
    PQclear(exec_ok(c, "DROP TABLE convert_vc"));
    PQfinish(c);
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* the string parsers against PostgreSQL's input functions */

/* When convert accepts s for t, PostgreSQL's text input reads the same value; when PostgreSQL refuses s, so does
 * convert (convert may refuse more: it is stricter than the input functions). */
static void expect_parse_agrees_at(int line, PGconn *c, map_type t, const char *s)
{
    strbuf b = STRBUF_INIT;
    bool is_null;
    char why[CONVERT_WHY_MAX] = "";
    bson_value_t v = v_str(s);
    bool ours = convert_binary(&b, &t, &v, &is_null, why, sizeof why) == CONVERT_OK;
    char sqlt[64], sql[160];
    snprintf(sql, sizeof sql, "SELECT $1::%s::text", map_type_sql(&t, sqlt, sizeof sqlt));
    const char *vals[2] = {s};
    PGresult *r = PQexecParams(c, sql, 1, NULL, vals, NULL, NULL, 0);
    bool theirs = PQresultStatus(r) == PGRES_TUPLES_OK;
    ck_assert_msg(theirs || !ours, "line %d: \"%s\": PostgreSQL refuses it (%s), convert accepts it", line, s,
                  PQresultErrorMessage(r));
    if (ours) {
        char *want = bson_strdup(PQgetvalue(r, 0, 0));
        PQclear(r);
        expect_pg_at(line, c, t, v, want);
        bson_free(want);
    } else {
        PQclear(r);
    }
    strbuf_free(&b);
}
#define expect_parse_agrees(c, t, s) expect_parse_agrees_at(__LINE__, c, t, s)

START_TEST(test_parsers_agree)
{
    PGconn *c = connect_pg();
    static const char *const uuids[] = {
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
        "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
        "a0eebc999c0b4ef8bb6d6bb9bd380a11",
        "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
        "{a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11}",
        "a0eebc999c0b4ef8bb6d6bb9bd38-0a11",
        "a0-eebc999c0b4ef8bb6d6bb9bd380a11",
        "a0eebc-999c0b4ef8bb6d6bb9bd380a11",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11-",
        "-a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "{a0eebc999c0b4ef8bb6d6bb9bd380a11",
        "a0eebc99--9c0b-4ef8-bb6d-6bb9bd380a11",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",
        "abc",
        "",
    };
    for (size_t i = 0; i < sizeof uuids / sizeof uuids[0]; i++)
        expect_parse_agrees(c, T(MAP_UUID), uuids[i]);
    static const char *const dates[] = {
        "2024-02-29", "2023-02-29", "0001-01-01", "9999-12-31", "1900-02-29", "2000-02-29", "2024-04-31", "2024-13-01",
    };
    for (size_t i = 0; i < sizeof dates / sizeof dates[0]; i++)
        expect_parse_agrees(c, T(MAP_DATE), dates[i]);
    static const char *const stamps[] = {
        "2000-01-01T00:00:00Z",
        "2000-01-01 00:00:00",
        "2000-01-01t00:00:00z",
        "2000-01-01T00:00",
        "2000-01-01",
        "2000-01-01T00:00:01.5Z",
        "2000-01-01T00:00:00.000001Z",
        "2000-01-01T00:00:00.0000010Z",
        "2000-01-01T01:00:00+01:00",
        "2000-01-01T01:00:00+0100",
        "2000-01-01T01:00:00+01",
        "1999-12-31T23:00:00-01:00",
        "2000-01-01T05:30+05:30",
        "2024-01-15T10:30:00.123",
        "0001-01-01T00:00:00Z",
        "9999-12-31T23:59:59.999999Z",
        "0001-01-01T00:30:00+01:00",
        "1999-12-31T23:59:60Z",
        "2024-02-29T12:00:00-12:00",
        "1969-12-31T23:59:59.999-00:00",
        "2000-02-30T00:00:00Z",
        "2000-01-01T24:00:01Z",
        "2000-01-01T23:60:00Z",
    };
    for (size_t i = 0; i < sizeof stamps / sizeof stamps[0]; i++) {
        expect_parse_agrees(c, T(MAP_TIMESTAMPTZ), stamps[i]);
        /* timestamp: only the strings without an offset mean the same to PostgreSQL (it ignores an offset there) */
        if (strpbrk(stamps[i] + 10, "Zz+") == NULL && strchr(stamps[i] + 10, '-') == NULL)
            expect_parse_agrees(c, T(MAP_TIMESTAMP), stamps[i]);
    }
    PQfinish(c);
}
END_TEST

/* ---------------------------------------------------------------------------------------------------------------- */
/* OIDs and spellings */

static uint32_t regtype_oid(PGconn *c, const char *spelling)
{
    const char *vals[1] = {spelling};
    PGresult *r = PQexecParams(c, "SELECT $1::regtype::oid", 1, NULL, vals, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", spelling, PQresultErrorMessage(r));
    uint32_t oid = (uint32_t)strtoul(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return oid;
}

START_TEST(test_oids_and_spellings)
{
    PGconn *c = connect_pg();
    /* map_type_sql's spelling names the type whose OID map_type_oid gives, for every type */
    for (map_scalar s = MAP_TEXT; s < MAP_SCALAR_COUNT; s++) {
        for (int array = 0; array < 2; array++) {
            map_type t = s == MAP_VARCHAR ? VC(20, array) : T(s);
            t.array = array;
            char sql[64];
            map_type_sql(&t, sql, sizeof sql);
            ck_assert_msg(regtype_oid(c, sql) == map_type_oid(&t), "%s: pg_type says %u, map_type_oid %u", sql,
                          regtype_oid(c, sql), map_type_oid(&t));
            if (!array)
                ck_assert_uint_eq(map_scalar_oid(s), map_type_oid(&t));
        }
    }
    /* every spelling map_type_parse accepts means to PostgreSQL what it means to us */
    static const char *const spellings[] = {
        "text",
        "varchar(20)",
        "character varying(1)",
        "Character  Varying ( 20 ) [ ]",
        "boolean",
        "bool[]",
        "smallint",
        "int2",
        "integer",
        "INT",
        "int4[]",
        "bigint",
        "int8",
        "numeric",
        "decimal[]",
        "real",
        "float4",
        "double precision",
        "  Double   Precision []",
        "float8",
        "timestamptz",
        "timestamp with time zone[]",
        "TIMESTAMP\tWITH TIME\nZONE",
        "timestamp",
        "timestamp without time zone",
        "date",
        "uuid[]",
        "bytea",
        "jsonb",
    };
    for (size_t i = 0; i < sizeof spellings / sizeof spellings[0]; i++) {
        map_type t;
        ck_assert_msg(map_type_parse(spellings[i], &t), "%s refused", spellings[i]);
        ck_assert_msg(regtype_oid(c, spellings[i]) == map_type_oid(&t), "%s: pg_type says %u, map_type_oid %u",
                      spellings[i], regtype_oid(c, spellings[i]), map_type_oid(&t));
    }
    PQfinish(c);
}
END_TEST

Suite *convert_pg_suite(void)
{
    Suite *s = suite_create("convert_pg");
    TCase *tc = tcase_create("convert_pg");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_integers_and_floats);
    tcase_add_test(tc, test_numeric);
    tcase_add_test(tc, test_strings_and_binary);
    tcase_add_test(tc, test_dates_and_timestamps);
    tcase_add_test(tc, test_jsonb);
    tcase_add_test(tc, test_arrays);
    tcase_add_test(tc, test_binary_copy);
    tcase_add_test(tc, test_varchar_limit_agrees);
    tcase_add_test(tc, test_parsers_agree);
    tcase_add_test(tc, test_oids_and_spellings);
    suite_add_tcase(s, tc);
    return s;
}

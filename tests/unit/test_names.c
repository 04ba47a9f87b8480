/*
 * test_names.c — the one mapping from a MongoDB namespace to a PostgreSQL schema and table (map/names.h): plain
 * names as they are, reserved databases behind a `$`, long names shortened the documented way (the expected values
 * are computed independently: the first 52 bytes, `$`, the low 40 bits of FNV-1a-64 of the whole name in hex), and
 * names that cannot be identifiers refused.
 */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "map/names.h"

static pg_name map(const char *db, const char *coll)
{
    pg_name n;
    char why[120] = "";
    ck_assert_msg(names_map(db, coll, &n, why, sizeof why), "%s.%s: %s", db, coll ? coll : "", why);
    return n;
}

START_TEST(test_plain_names_are_kept)
{
    pg_name n = map("shop", "orders");
    ck_assert_str_eq(n.schema, "shop");
    ck_assert_str_eq(n.table, "orders");
    n = map("public", "Mixed Case.with dots");
    ck_assert_str_eq(n.schema, "public");
    ck_assert_str_eq(n.table, "Mixed Case.with dots");
    n = map("café", "naïve");
    ck_assert_str_eq(n.schema, "café");
    ck_assert_str_eq(n.table, "naïve");
    n = map("shop", NULL);
    ck_assert_str_eq(n.schema, "shop");
    ck_assert_str_eq(n.table, "");
}
END_TEST

START_TEST(test_reserved_databases)
{
    ck_assert_str_eq(map("oplog2pg", "checkpoint").schema, "$oplog2pg");
    ck_assert_str_eq(map("oplog2pg", "checkpoint").table, "checkpoint");
    ck_assert_str_eq(map("information_schema", "tables").schema, "$information_schema");
    ck_assert_str_eq(map("pg_catalog", "c").schema, "$pg_catalog");
    ck_assert_str_eq(map("pg_", "c").schema, "$pg_");
    /* Only those: near misses are ordinary names. */
    ck_assert_str_eq(map("oplog2pg2", "c").schema, "oplog2pg2");
    ck_assert_str_eq(map("pgdata", "c").schema, "pgdata");
    ck_assert_str_eq(map("PG_x", "c").schema, "PG_x");
    /* A collection may be called anything: only the schema is reserved. */
    ck_assert_str_eq(map("shop", "pg_class").table, "pg_class");
    char s[NAMES_MAX + 1], why[120];
    ck_assert(names_schema("oplog2pg", s, why, sizeof why));
    ck_assert_str_eq(s, "$oplog2pg");
}
END_TEST

START_TEST(test_long_names_shortened)
{
    char a63[64], b[80];
    memset(a63, 'a', 63);
    a63[63] = '\0';
    ck_assert_str_eq(map("db", a63).table, a63); /* exactly 63 bytes: kept */

    snprintf(b, sizeof b, "%s1", a63);
    pg_name n1 = map("db", b);
    ck_assert_str_eq(n1.table, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa$49f35f43d5");
    snprintf(b, sizeof b, "%s2", a63);
    pg_name n2 = map("db", b);
    ck_assert_str_eq(n2.table, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa$49f35f3ebc");
    ck_assert_uint_eq(strlen(n1.table), 63);
    /* Deterministic. */
    ck_assert_str_eq(map("db", b).table, n2.table);

    /* A long reserved database: the `$` is part of the name that is shortened and hashed. */
    char db[80];
    snprintf(db, sizeof db, "pg_%.70s", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
    ck_assert_str_eq(map(db, "c").schema, "$pg_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx$cf41664717");

    /* Cut at a character boundary: é takes bytes 51 and 52, so 51 bytes are kept. */
    snprintf(b, sizeof b, "%s",
             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\xc3\xa9"
             "bbbbbbbbbbbbbbbbbbbb");
    ck_assert_str_eq(map("db", b).table, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa$e008e9bfa6");
}
END_TEST

START_TEST(test_unmappable_names_refused)
{
    pg_name n;
    char why[120];
    ck_assert(!names_map("", "c", &n, why, sizeof why));
    ck_assert_ptr_nonnull(strstr(why, "database name is empty"));
    ck_assert(!names_map("db", "", &n, why, sizeof why));
    ck_assert_ptr_nonnull(strstr(why, "collection name is empty"));
    ck_assert(!names_map("db", "bad\xff", &n, why, sizeof why));
    ck_assert_ptr_nonnull(strstr(why, "not valid UTF-8"));
    ck_assert(!names_map("bad\xc3", "c", &n, why, sizeof why));
    ck_assert_ptr_nonnull(strstr(why, "database name is not valid UTF-8"));
}
END_TEST

Suite *names_suite(void); /* called by the generated runner list */

Suite *names_suite(void)
{
    Suite *s = suite_create("names");
    TCase *tc = tcase_create("names");
    tcase_add_test(tc, test_plain_names_are_kept);
    tcase_add_test(tc, test_reserved_databases);
    tcase_add_test(tc, test_long_names_shortened);
    tcase_add_test(tc, test_unmappable_names_refused);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_typed_keys.c — typed key columns never make one row of two _ids MongoDB keeps apart (docs/mapping.md, "Keys").
 *
 * Each collection has a key column of one type and receives a pair of _ids that are distinct to MongoDB (its unique
 * _id index takes both) but that a loose conversion would give one key value: an ObjectId and the string of its hex
 * in text, 0.1 and NumberDecimal("0.1") in numeric, 2^53 and 2^53+1 in double precision, one uuid spelled in lower
 * and upper case, subtypes 4 and 3 of one uuid's bytes, two spellings of one instant in timestamptz, an ObjectId and
 * the binary of its 12 bytes in bytea, two times of one day in date. Each _id the key cannot hold exactly is a dead
 * letter with its reason; a taken one is its own row; and a delete of a refused _id never removes the other's row.
 */
#include <check.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/daemonenv.h"

#define DB "rep_tkeys_m"

/* The pairs: collection, key type, the two _ids, and whether the first is taken (the second never is). */
typedef struct {
    const char *coll;
    const char *type;
    bool first_taken;
} pair_case;

static const pair_case cases[] = {
    {"oid_text", "text", true},
    {"dec_numeric", "numeric", true},
    {"big_double", "double precision", true},
    {"uuid_case", "uuid", false},
    {"uuid_subtype", "uuid", true},
    {"instant", "timestamptz", false},
    {"oid_bytea", "bytea", true},
    {"day", "date", true},
};
#define NCASES (sizeof cases / sizeof cases[0])

static const uint8_t uuid_bytes[16] = {0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8,
                                       0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11};

/* Appends the _id of pair i, element which (0 or 1), to b. */
static void append_id(bson_t *b, size_t i, int which)
{
    bson_oid_t oid;
    bson_oid_init_from_string(&oid, "65a100000000000000000001");
    bson_decimal128_t dec;
    switch (i) {
    case 0:
        if (which == 0)
            BSON_APPEND_OID(b, "_id", &oid);
        else
            BSON_APPEND_UTF8(b, "_id", "65a100000000000000000001");
        break;
    case 1:
        if (which == 0) {
            ck_assert(bson_decimal128_from_string("0.1", &dec));
            BSON_APPEND_DECIMAL128(b, "_id", &dec);
        } else {
            BSON_APPEND_DOUBLE(b, "_id", 0.1);
        }
        break;
    case 2:
        if (which == 0)
            BSON_APPEND_DOUBLE(b, "_id", 9007199254740992.0);
        else
            BSON_APPEND_INT64(b, "_id", INT64_C(9007199254740993));
        break;
    case 3:
        BSON_APPEND_UTF8(b, "_id",
                         which == 0 ? "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11" : "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11");
        break;
    case 4:
        BSON_APPEND_BINARY(b, "_id", which == 0 ? BSON_SUBTYPE_UUID : BSON_SUBTYPE_UUID_DEPRECATED, uuid_bytes, 16);
        break;
    case 5:
        BSON_APPEND_UTF8(b, "_id", which == 0 ? "2024-01-15T10:00:00Z" : "2024-01-15T12:00:00+02:00");
        break;
    case 6:
        if (which == 0)
            BSON_APPEND_BINARY(b, "_id", BSON_SUBTYPE_BINARY, oid.bytes, 12);
        else
            BSON_APPEND_OID(b, "_id", &oid);
        break;
    case 7:
        /* 2024-01-15 at midnight UTC, then at 10:00 */
        BSON_APPEND_DATE_TIME(b, "_id", which == 0 ? INT64_C(1705276800000) : INT64_C(1705312800000));
        break;
    default:
        ck_abort_msg("no pair %zu", i);
    }
}

static int64_t rows_in(const char *db, const char *coll)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.%s", db, coll);
    return denv_pg_int(sql);
}

static int64_t rows_of(const char *coll)
{
    return rows_in(DB, coll);
}

static int64_t dead_letters_in(const char *db, const char *coll, char op)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM oplog2pg.dead_letter WHERE db = '%s' AND coll = '%s' AND op = '%c' "
             "AND error LIKE '%%key exactly%%'",
             db, coll, op);
    return denv_pg_int(sql);
}

static int64_t dead_letters(const char *coll, char op)
{
    return dead_letters_in(DB, coll, op);
}

/* The maps of the eight collections of db. */
static void maps_of(char *out, size_t len, const char *db)
{
    size_t off = 0;
    for (size_t i = 0; i < NCASES; i++)
        off += (size_t)snprintf(out + off, len - off, "\n[map %s.%s]\nrest = doc\ncolumn.k = %s from _id\n", db,
                                cases[i].coll, cases[i].type);
}

/* Both _ids of each pair, into the collections of db: MongoDB keeps them apart. */
static void insert_pairs(mongoc_client_t *c, const char *db)
{
    bson_error_t err;
    for (size_t i = 0; i < NCASES; i++) {
        mongoc_collection_t *col = mongoc_client_get_collection(c, db, cases[i].coll);
        for (int which = 0; which < 2; which++) {
            bson_t d = BSON_INITIALIZER;
            append_id(&d, i, which);
            BSON_APPEND_INT32(&d, "which", which);
            ck_assert_msg(mongoc_collection_insert_one(col, &d, NULL, NULL, &err), "%s %d: %s", cases[i].coll, which,
                          err.message);
            bson_destroy(&d);
        }
        mongoc_collection_destroy(col);
    }
}

START_TEST(test_typed_keys_never_merge)
{
    denv e;
    char extra[4096];
    maps_of(extra, sizeof extra, DB);
    denv_start(&e, "tkeys", NULL, extra);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    mongoc_client_t *c = mongoc_client_new(e.uri);
    bson_error_t err;

    /* both _ids of each pair are inserted: MongoDB keeps them apart */
    insert_pairs(c, DB);
    ck_assert(denv_wait_caught_up(&e, 60));
    for (size_t i = 0; i < NCASES; i++) {
        const char *coll = cases[i].coll;
        ck_assert_msg(rows_of(coll) == (cases[i].first_taken ? 1 : 0), "%s: %lld rows", coll, (long long)rows_of(coll));
        ck_assert_msg(dead_letters(coll, 'i') == (cases[i].first_taken ? 1 : 2), "%s: %lld dead letters", coll,
                      (long long)dead_letters(coll, 'i'));
        if (cases[i].first_taken) {
            char sql[256];
            snprintf(sql, sizeof sql, "SELECT (doc->>'which')::int FROM " DB ".%s", coll);
            ck_assert_msg(denv_pg_int(sql) == 0, "%s: the row is not the first _id's", coll);
        }
    }

    /* a delete of the second _id leaves the first's row */
    for (size_t i = 0; i < NCASES; i++) {
        mongoc_collection_t *col = mongoc_client_get_collection(c, DB, cases[i].coll);
        bson_t q = BSON_INITIALIZER;
        append_id(&q, i, 1);
        bson_t reply;
        ck_assert_msg(mongoc_collection_delete_one(col, &q, NULL, &reply, &err), "%s", err.message);
        bson_iter_t it;
        ck_assert(bson_iter_init_find(&it, &reply, "deletedCount") && bson_iter_as_int64(&it) == 1);
        bson_destroy(&reply);
        bson_destroy(&q);
        mongoc_collection_destroy(col);
    }
    ck_assert(denv_wait_caught_up(&e, 60));
    for (size_t i = 0; i < NCASES; i++) {
        const char *coll = cases[i].coll;
        ck_assert_msg(rows_of(coll) == (cases[i].first_taken ? 1 : 0), "%s: %lld rows after the delete", coll,
                      (long long)rows_of(coll));
        ck_assert_msg(dead_letters(coll, 'd') == 1, "%s: %lld delete dead letters", coll,
                      (long long)dead_letters(coll, 'd'));
    }

    /* and a delete of the first removes its row */
    for (size_t i = 0; i < NCASES; i++) {
        mongoc_collection_t *col = mongoc_client_get_collection(c, DB, cases[i].coll);
        bson_t q = BSON_INITIALIZER;
        append_id(&q, i, 0);
        ck_assert_msg(mongoc_collection_delete_one(col, &q, NULL, NULL, &err), "%s", err.message);
        bson_destroy(&q);
        mongoc_collection_destroy(col);
    }
    ck_assert(denv_wait_caught_up(&e, 60));
    for (size_t i = 0; i < NCASES; i++)
        ck_assert_msg(rows_of(cases[i].coll) == 0, "%s: the first _id's row is still there", cases[i].coll);

    char msg[2048];
    denv_pg_text("SELECT error FROM oplog2pg.dead_letter WHERE db = '" DB "' AND coll = 'oid_text' AND op = 'i'", msg,
                 sizeof msg);
    ck_assert_msg(strstr(msg, "key column \"k\" (text)") != NULL && strstr(msg, "65a100000000000000000001") != NULL,
                  "%s", msg);
    mongoc_client_destroy(c);
    denv_stop(&e);
    denv_pg_exec("DROP SCHEMA " DB " CASCADE");
}
END_TEST

/* The same pairs in the initial copy: the copy projects each document by the same key conversion. */
START_TEST(test_typed_keys_copied)
{
    const char *db = "rep_tkeyc_m";
    denv e;
    char extra[4096];
    maps_of(extra, sizeof extra, db);
    denv_start(&e, "tkeyc", NULL, extra);
    mongoc_client_t *c = mongoc_client_new(e.uri);
    insert_pairs(c, db);
    mongoc_client_destroy(c);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    for (size_t i = 0; i < NCASES; i++) {
        const char *coll = cases[i].coll;
        ck_assert_msg(rows_in(db, coll) == (cases[i].first_taken ? 1 : 0), "%s: %lld rows", coll,
                      (long long)rows_in(db, coll));
        ck_assert_msg(dead_letters_in(db, coll, 'i') == (cases[i].first_taken ? 1 : 2), "%s: %lld dead letters", coll,
                      (long long)dead_letters_in(db, coll, 'i'));
    }
    denv_stop(&e);
    denv_pg_exec("DROP SCHEMA rep_tkeyc_m CASCADE");
}
END_TEST

Suite *typed_keys_suite(void); /* called by the generated runner list */

Suite *typed_keys_suite(void)
{
    Suite *s = suite_create("typed_keys");
    TCase *tc = tcase_create("typed_keys");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_typed_keys_never_merge);
    tcase_add_test(tc, test_typed_keys_copied);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_typed_limits.c — typed maps at the edges of what MongoDB stores, through `infer-map` and the daemon.
 *
 *   - infer-map on a hostile sample (field names with dots, `$`, spaces and `=`, a tab, empty, 64 KB long;
 *     nesting 100 levels deep, MongoDB's limit for a stored document; thousands of fields that are data; one path of
 *     many types) exits 0 with a bounded map that `run` loads, and replicates every document;
 *   - documents of 16 MB (the largest BSON document) and 100 levels deep, inserted, replaced and updated in a typed
 *     map: each a row, or a dead letter with its reason; never a crash or a hang, and replication goes on.
 */
#include <check.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/daemonenv.h"
#include "../lib/proc.h"
#include "../lib/textfile.h"

#define DB  "rep_tlim_m"
#define DB2 "rep_tbig_m"

/* MongoDB refuses to store a document nested more than 100 levels (BSONDepth::kDefaultMaxAllowableDepth for user
 * documents, src/mongo/bson/bson_depth.h): the deepest a replicated document can be. */
#define MONGO_MAX_DEPTH 100

/* {name: {d: {d: ... {leaf: 7} ...}}} with `levels` documents below b. */
static void append_deep(bson_t *b, const char *name, int levels)
{
    if (levels == 0) {
        BSON_APPEND_INT32(b, name, 7);
        return;
    }
    bson_t child;
    BSON_APPEND_DOCUMENT_BEGIN(b, name, &child);
    append_deep(&child, levels == 1 ? "leaf" : "d", levels - 1);
    bson_append_document_end(b, &child);
}

static void insert_raw(mongoc_collection_t *col, const bson_t *d)
{
    bson_t *opts = BCON_NEW("validate", BCON_BOOL(false));
    bson_error_t err;
    ck_assert_msg(mongoc_collection_insert_one(col, d, opts, NULL, &err), "insert: %s", err.message);
    bson_destroy(opts);
}

static int run_cmd(const denv *e, const char *args, char **out, char **err)
{
    char cmd[2048], out_path[300], err_path[300], bin[256];
    snprintf(bin, sizeof bin, "%s/oplog2pg", proc_build_dir());
    snprintf(out_path, sizeof out_path, "%s/cmd.out", e->dir);
    snprintf(err_path, sizeof err_path, "%s/cmd.err", e->dir);
    snprintf(cmd, sizeof cmd, "exec '%s' -c '%s' %s >'%s' 2>'%s'", bin, e->ini, args, out_path, err_path);
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    proc_handle p;
    char perr[256];
    ck_assert_msg(proc_start(argv, NULL, NULL, &p, perr, sizeof perr), "%s", perr);
    ck_assert_msg(proc_wait(&p, 300), "the command did not finish");
    *out = textfile_read(out_path);
    *err = textfile_read(err_path);
    ck_assert_ptr_nonnull(*out);
    ck_assert_ptr_nonnull(*err);
    return proc_exit_code(&p);
}

START_TEST(test_infer_map_hostile_sample)
{
    denv e;
    denv_start(&e, "tlim", NULL, NULL);
    mongoc_client_t *c = mongoc_client_new(e.uri);
    mongoc_collection_t *col = mongoc_client_get_collection(c, DB, "hostile");
    size_t huge_len = 65536;
    char *huge = malloc(huge_len + 1);
    ck_assert_ptr_nonnull(huge);
    memset(huge, 'h', huge_len);
    huge[huge_len] = '\0';
    /* (a name that is not UTF-8 is in the unit test: mongosim, through libbson, refuses such a document) */
    const char *names[] = {"a.b", "", " sp ", "k=v", "semi;colon", "tab\tx", "ok", "\xe6\x97\xa5"};
    for (int d = 0; d < 30; d++) {
        bson_t b = BSON_INITIALIZER;
        BSON_APPEND_INT32(&b, "_id", d);
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            if (d % 3 == 0)
                bson_append_int32(&b, names[i], -1, d);
            else if (d % 3 == 1)
                bson_append_utf8(&b, names[i], -1, "s", -1);
            else
                bson_append_bool(&b, names[i], -1, true);
        }
        bson_t sub;
        BSON_APPEND_DOCUMENT_BEGIN(&b, "nested", &sub);
        BSON_APPEND_INT32(&sub, "$x", 1);
        BSON_APPEND_INT32(&sub, "y", 2);
        bson_append_document_end(&b, &sub);
        huge[0] = (char)('a' + d % 26);
        bson_append_int32(&b, huge, (int)huge_len, d);
        /* fields that are data: 400 names a document */
        BSON_APPEND_DOCUMENT_BEGIN(&b, "by_id", &sub);
        for (int k = 0; k < 400; k++) {
            char key[32];
            snprintf(key, sizeof key, "u%d_%d", d, k);
            BSON_APPEND_INT32(&sub, key, k);
        }
        bson_append_document_end(&b, &sub);
        /* MongoDB's deepest document: _id and 100 levels below it */
        append_deep(&b, "deep", MONGO_MAX_DEPTH - 1);
        insert_raw(col, &b);
        bson_destroy(&b);
    }
    free(huge);

    char *out, *err;
    int code = run_cmd(&e, "infer-map --depth 32 " DB ".hostile", &out, &err);
    ck_assert_msg(code == 0, "infer-map exited %d: %s", code, err);
    ck_assert_msg(strlen(out) < 100 * 1024, "a map of %zu bytes", strlen(out));
    ck_assert_msg(strstr(out, "\ncolumn.ok = jsonb from ok\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "more paths that are no column, not listed") != NULL, "%s", out);
    /* the output as it is, appended to the file: it loads, and run replicates every document into the map */
    FILE *f = fopen(e.ini, "a");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "\n%s", out);
    ck_assert_int_eq(fclose(f), 0);
    free(out);
    free(err);
    char *cout, *cerr;
    ck_assert_int_eq(run_cmd(&e, "map", &cout, &cerr), 0);
    free(cout);
    free(cerr);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 120));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM " DB ".hostile"), 30);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM " DB ".hostile WHERE doc ? 'a.b' AND doc ? 'nested'"), 30);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE db = '" DB "'"), 0);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
    denv_stop(&e);
    denv_pg_exec("DROP SCHEMA IF EXISTS " DB " CASCADE");
}
END_TEST

/* A document of 16 MB all but a few bytes: `big` a string of most of it. */
static bson_t *big_doc(int id, char fill)
{
    size_t len = 16 * 1024 * 1024 - 512;
    char *s = malloc(len + 1);
    ck_assert_ptr_nonnull(s);
    memset(s, fill, len);
    s[len] = '\0';
    bson_t *b = bson_new();
    BSON_APPEND_INT32(b, "_id", id);
    BSON_APPEND_INT32(b, "n", id);
    BSON_APPEND_UTF8(b, "big", s);
    free(s);
    ck_assert_uint_le(b->len, 16 * 1024 * 1024);
    return b;
}

START_TEST(test_typed_map_big_and_deep)
{
    denv e;
    char leaf_path[1024];
    size_t off = 0;
    off += (size_t)snprintf(leaf_path + off, sizeof leaf_path - off, "deep");
    for (int i = 0; i < 20; i++)
        off += (size_t)snprintf(leaf_path + off, sizeof leaf_path - off, ".d");
    char extra[2048];
    snprintf(extra, sizeof extra,
             "\n[map " DB2 ".c]\nrest = doc\ncolumn.n = integer\ncolumn.big = text\n"
             "column.mid = jsonb from %s\nchild.items = c_items\n\n[child " DB2 ".c_items]\nrest = doc\n"
             "column.v = integer\n",
             leaf_path);
    denv_start(&e, "tbig", NULL, extra);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    mongoc_client_t *c = mongoc_client_new(e.uri);
    mongoc_collection_t *col = mongoc_client_get_collection(c, DB2, "c");
    bson_error_t err;

    /* two 16 MB documents in a row (one COPY), one 100 levels deep, one with a deep array element */
    bson_t *b1 = big_doc(1, 'a'), *b2 = big_doc(2, 'b');
    insert_raw(col, b1);
    insert_raw(col, b2);
    bson_destroy(b1);
    bson_destroy(b2);
    bson_t d3 = BSON_INITIALIZER;
    BSON_APPEND_INT32(&d3, "_id", 3);
    BSON_APPEND_INT32(&d3, "n", 3);
    append_deep(&d3, "deep", MONGO_MAX_DEPTH - 1);
    insert_raw(col, &d3);
    bson_destroy(&d3);
    bson_t d4 = BSON_INITIALIZER, arr, el;
    BSON_APPEND_INT32(&d4, "_id", 4);
    BSON_APPEND_ARRAY_BEGIN(&d4, "items", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &el);
    BSON_APPEND_INT32(&el, "v", 1);
    append_deep(&el, "deep", MONGO_MAX_DEPTH - 3);
    bson_append_document_end(&arr, &el);
    bson_append_array_end(&d4, &arr);
    insert_raw(col, &d4);
    bson_destroy(&d4);
    ck_assert(denv_wait_caught_up(&e, 180));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM " DB2 ".c"), 4);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM " DB2 ".c WHERE length(big) = 16 * 1024 * 1024 - 512 AND "
                                 "doc->>'big' = big"),
                     2);
    /* deep holds 98 levels of d, then leaf: mid is the document at the 20th d */
    char sql[1024];
    off = (size_t)snprintf(sql, sizeof sql, "SELECT (mid #>> '{");
    for (int i = 20; i < MONGO_MAX_DEPTH - 2; i++)
        off += (size_t)snprintf(sql + off, sizeof sql - off, "d,");
    snprintf(sql + off, sizeof sql - off, "leaf}')::int FROM " DB2 ".c WHERE n = 3");
    ck_assert_int_eq(denv_pg_int(sql), 7);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM " DB2 ".c_items WHERE parent_key = '4' AND v = 1"), 1);

    /* a replacement by another 16 MB document, and updates: a 16 MB $set, a $set deep inside the deep document */
    bson_t *r1 = big_doc(1, 'c');
    bson_t *q1 = BCON_NEW("_id", BCON_INT32(1));
    ck_assert_msg(mongoc_collection_replace_one(col, q1, r1, NULL, NULL, &err), "%s", err.message);
    bson_destroy(r1);
    bson_destroy(q1);
    bson_t *q3 = BCON_NEW("_id", BCON_INT32(3));
    char deep_path[1024];
    off = (size_t)snprintf(deep_path, sizeof deep_path, "deep");
    for (int i = 0; i < MONGO_MAX_DEPTH - 2; i++)
        off += (size_t)snprintf(deep_path + off, sizeof deep_path - off, ".d");
    snprintf(deep_path + off, sizeof deep_path - off, ".leaf");
    bson_t u3 = BSON_INITIALIZER, set;
    BSON_APPEND_DOCUMENT_BEGIN(&u3, "$set", &set);
    BSON_APPEND_INT32(&set, deep_path, 8);
    BSON_APPEND_UTF8(&set, "big", "small now");
    bson_append_document_end(&u3, &set);
    ck_assert_msg(mongoc_collection_update_one(col, q3, &u3, NULL, NULL, &err), "%s", err.message);
    bson_destroy(&u3);
    bson_destroy(q3);
    /* a document one level deeper than MongoDB stores would be refused by the server; here a value PostgreSQL
     * refuses in a typed column instead: a string with U+0000 in the text column, a dead letter with its reason */
    bson_t d5 = BSON_INITIALIZER;
    BSON_APPEND_INT32(&d5, "_id", 5);
    bson_append_utf8(&d5, "big", -1, "a\0b", 3);
    insert_raw(col, &d5);
    bson_destroy(&d5);
    ck_assert(denv_wait_caught_up(&e, 180));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM " DB2 ".c WHERE n = 1 AND big LIKE 'ccc%' AND "
                                 "length(big) = 16 * 1024 * 1024 - 512"),
                     1);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM " DB2 ".c WHERE n = 3 AND big = 'small now' AND "
                                 "doc::text LIKE '%\"leaf\": 8%'"),
                     1);
    char msg[1024];
    denv_pg_text("SELECT coalesce(string_agg(op || ' ' || doc_id || ' ' || error, ' | '), '') FROM "
                 "oplog2pg.dead_letter WHERE db = '" DB2 "'",
                 msg, sizeof msg);
    ck_assert_msg(strncmp(msg, "i 5 ", 4) == 0 && strstr(msg, "big") != NULL && strchr(msg, '|') == NULL, "%s", msg);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
    denv_stop(&e);
    denv_pg_exec("DROP SCHEMA IF EXISTS " DB2 " CASCADE");
}
END_TEST

Suite *typed_limits_suite(void); /* called by the generated runner list */

Suite *typed_limits_suite(void)
{
    Suite *s = suite_create("typed_limits");
    TCase *tc = tcase_create("typed_limits");
    tcase_set_timeout(tc, 400);
    tcase_add_test(tc, test_infer_map_hostile_sample);
    tcase_add_test(tc, test_typed_map_big_and_deep);
    suite_add_tcase(s, tc);
    return s;
}

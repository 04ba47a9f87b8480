/*
 * test_mongosim_images.c — pre- and post-images over the wire: `create` and `collMod` with
 * changeStreamPreAndPostImages, listCollections showing the option, and a database stream with fullDocument and
 * fullDocumentBeforeChange "whenAvailable" (libmongoc's mongoc_database_watch) giving each write's images where the
 * collection had them enabled at the time, null elsewhere. Runs against a real 7.0 replica set (MONGO_URI) alike.
 */
#include <check.h>
#include <mongoc/mongoc.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define IMG_DB "mongosim_images"

Suite *mongosim_images_suite(void);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void command_ok(mongoc_client_t *c, bson_t *cmd, bson_t *reply)
{
    bson_error_t err;
    bson_t tmp;
    bool ok = mongoc_client_command_simple(c, IMG_DB, cmd, NULL, reply ? reply : &tmp, &err);
    char *json = bson_as_relaxed_extended_json(cmd, NULL);
    bson_destroy(cmd);
    ck_assert_msg(ok, "%s: %s (code %u)", json, err.message, err.code);
    bson_free(json);
    if (!reply)
        bson_destroy(&tmp);
}

static void write_one(mongoc_client_t *c, const char *coll, int kind, int x)
{
    mongoc_collection_t *col = mongoc_client_get_collection(c, IMG_DB, coll);
    bson_error_t err;
    bson_t *q = BCON_NEW("_id", BCON_INT32(1));
    bool ok;
    if (kind == 0) {
        bson_t *d = BCON_NEW("_id", BCON_INT32(1), "x", BCON_INT32(x));
        ok = mongoc_collection_insert_one(col, d, NULL, NULL, &err);
        bson_destroy(d);
    } else if (kind == 1) {
        bson_t *u = BCON_NEW("$set", "{", "x", BCON_INT32(x), "}");
        ok = mongoc_collection_update_one(col, q, u, NULL, NULL, &err);
        bson_destroy(u);
    } else {
        ok = mongoc_collection_delete_one(col, q, NULL, NULL, &err);
    }
    ck_assert_msg(ok, "%s", err.message);
    bson_destroy(q);
    mongoc_collection_destroy(col);
}

static bool next_event(mongoc_change_stream_t *cs, const bson_t **ev)
{
    double until = now_s() + 30;
    bson_error_t err;
    const bson_t *edoc;
    while (now_s() < until) {
        if (mongoc_change_stream_next(cs, ev))
            return true;
        ck_assert_msg(!mongoc_change_stream_error_document(cs, &err, &edoc), "change stream error: %s", err.message);
    }
    return false;
}

/* The int at path, or -1 when the value there is null. */
static int64_t int_or_null(const bson_t *doc, const char *path)
{
    bson_iter_t it, f;
    ck_assert_msg(bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, path, &f), "no %s", path);
    return BSON_ITER_HOLDS_NULL(&f) ? -1 : bson_iter_as_int64(&f);
}

START_TEST(test_images_over_the_wire)
{
    const char *uri = getenv("MONGO_URI");
    ck_assert_msg(uri && *uri, "MONGO_URI is not set");
    mongoc_client_t *c = mongoc_client_new(uri);
    ck_assert_ptr_nonnull(c);
    mongoc_database_t *db = mongoc_client_get_database(c, IMG_DB);
    bson_error_t err;
    (void)mongoc_database_drop(db, &err); /* may not exist */
    command_ok(c, BCON_NEW("create", "img", "changeStreamPreAndPostImages", "{", "enabled", BCON_BOOL(true), "}"),
               NULL);
    command_ok(c, BCON_NEW("create", "plain"), NULL);
    command_ok(c, BCON_NEW("create", "later"), NULL);
    /* listCollections shows the option where it is enabled */
    bson_t reply;
    command_ok(c, BCON_NEW("listCollections", BCON_INT32(1), "filter", "{", "name", "img", "}"), &reply);
    bson_iter_t it, f;
    ck_assert(bson_iter_init(&it, &reply) &&
              bson_iter_find_descendant(&it, "cursor.firstBatch.0.options.changeStreamPreAndPostImages.enabled", &f) &&
              bson_iter_as_bool(&f));
    bson_destroy(&reply);

    bson_t *opts = BCON_NEW("maxAwaitTimeMS", BCON_INT32(500), "fullDocument", "whenAvailable",
                            "fullDocumentBeforeChange", "whenAvailable");
    bson_t pipeline = BSON_INITIALIZER;
    mongoc_change_stream_t *cs = mongoc_database_watch(db, &pipeline, opts);
    const bson_t *ev, *edoc;
    ck_assert_msg(!mongoc_change_stream_error_document(cs, &err, &edoc), "watch: %s", err.message);
    write_one(c, "img", 0, 1);
    write_one(c, "img", 1, 2);
    write_one(c, "plain", 0, 1);
    write_one(c, "plain", 1, 2);
    write_one(c, "later", 0, 1);
    write_one(c, "later", 1, 2); /* before the collMod: no images */
    command_ok(c, BCON_NEW("collMod", "later", "changeStreamPreAndPostImages", "{", "enabled", BCON_BOOL(true), "}"),
               NULL);
    write_one(c, "later", 1, 3);
    write_one(c, "img", 2, 0);
    /* {coll, pre x, post x} of each update and delete; -1: null */
    const struct {
        const char *coll, *type;
        int pre, post;
    } want[] = {{"img", "insert", 0, 0},     {"img", "update", 1, 2},   {"plain", "insert", 0, 0},
                {"plain", "update", -1, -1}, {"later", "insert", 0, 0}, {"later", "update", -1, -1},
                {"later", "update", 2, 3},   {"img", "delete", 2, 0}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        ck_assert_msg(next_event(cs, &ev), "event %zu did not come", i);
        ck_assert(bson_iter_init_find(&it, ev, "operationType"));
        ck_assert_str_eq(bson_iter_utf8(&it, NULL), want[i].type);
        ck_assert(bson_iter_init(&it, ev) && bson_iter_find_descendant(&it, "ns.coll", &f));
        ck_assert_str_eq(bson_iter_utf8(&f, NULL), want[i].coll);
        if (strcmp(want[i].type, "update") == 0) {
            ck_assert_int_eq(
                int_or_null(ev, want[i].pre < 0 ? "fullDocumentBeforeChange" : "fullDocumentBeforeChange.x"),
                want[i].pre);
            ck_assert_int_eq(int_or_null(ev, want[i].post < 0 ? "fullDocument" : "fullDocument.x"), want[i].post);
        } else if (strcmp(want[i].type, "delete") == 0) {
            ck_assert_int_eq(int_or_null(ev, "fullDocumentBeforeChange.x"), want[i].pre);
        }
    }
    mongoc_change_stream_destroy(cs);
    bson_destroy(opts);
    mongoc_database_destroy(db);
    mongoc_client_destroy(c);
}
END_TEST

Suite *mongosim_images_suite(void)
{
    Suite *s = suite_create("mongosim_images");
    TCase *tc = tcase_create("images");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_images_over_the_wire);
    suite_add_tcase(s, tc);
    return s;
}

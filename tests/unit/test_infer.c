/*
 * test_infer.c — the map inferred from sample documents (map/infer.h), as `oplog2pg infer-map` prints it: the column
 * type of one BSON type and of mixed ones, arrays of scalars and of documents (child tables), nested documents down
 * to the depth, the _id key, names that cannot be written, table names that are taken, the column limit, the
 * comments (presence and type shares, infer_percent's bounds), and the rendered text loading back through the
 * configuration reader to the very model infer_build returns.
 */
#include <bson/bson.h>
#include <check.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/config.h"
#include "daemon/config_map.h"
#include "map/infer.h"
#include "map/map.h"

/* ---- helpers ----------------------------------------------------------------------------------------------------- */

static bson_t *from_json(const char *json)
{
    bson_error_t e;
    bson_t *b = bson_new_from_json((const uint8_t *)json, -1, &e);
    ck_assert_msg(b != NULL, "bad test JSON %s: %s", json, e.message);
    return b;
}

/* The map of shop.orders inferred from the documents (Extended JSON, NULL-terminated). */
static infer_map *infer_opts(const char *const *docs, const infer_options *o, infer_taken_fn taken, void *arg)
{
    infer_stats *s = infer_stats_new(o);
    ck_assert_ptr_nonnull(s);
    uint64_t n = 0;
    for (; docs[n] != NULL; n++) {
        bson_t *b = from_json(docs[n]);
        ck_assert(infer_stats_add(s, b));
        bson_destroy(b);
    }
    ck_assert_uint_eq(infer_stats_docs(s), n);
    char why[256] = "";
    infer_map *m = infer_build(s, "shop", "orders", taken, arg, why, sizeof why);
    infer_stats_free(s); /* the map does not need the stats any more */
    ck_assert_msg(m != NULL, "infer_build failed: %s", why);
    return m;
}

static infer_map *infer_docs(const char *const *docs)
{
    return infer_opts(docs, NULL, NULL, NULL);
}

static char *render(const infer_map *m)
{
    strbuf b = STRBUF_INIT;
    infer_render(&b, m);
    ck_assert(!strbuf_failed(&b));
    return strbuf_detach(&b, NULL);
}

/* The column of t that takes path, NULL when none does. */
static const map_column *by_path(const map_table *t, const char *path)
{
    for (size_t i = 0; i < t->ncols; i++)
        if (strcmp(t->cols[i].path, path) == 0)
            return &t->cols[i];
    return NULL;
}

/* The SQL type of the column of t that takes path ("" when none does). */
static const char *type_at(const map_table *t, const char *path, char *buf, size_t len)
{
    const map_column *c = by_path(t, path);
    if (c == NULL) {
        snprintf(buf, len, "%s", "");
        return buf;
    }
    return map_type_sql(&c->type, buf, len);
}

static const map_table *root(const infer_map *m)
{
    return &infer_map_model(m)->table;
}

/* The child table at path, NULL when none. */
static const map_table *child_at(const map_table *t, const char *path)
{
    for (size_t i = 0; i < t->nchildren; i++)
        if (strcmp(t->children[i].path, path) == 0)
            return t->children[i].table;
    return NULL;
}

/* Every line of text is at most 199 characters (the configuration reader's limit). */
static void expect_short_lines(const char *text)
{
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        ck_assert_msg(len <= 199, "a line of %zu characters: %.*s", len, (int)len, p);
        p += len + (nl != NULL);
    }
}

/* The rendered text, loaded as the configuration reader loads a file (after `prefix`, which holds the [replication]
 * section), gives exactly the model infer_build returned: same tables, keys, columns (name, type, path,
 * on_type_error), rest modes, child tables. Returns the text (free it). */
static char *expect_roundtrip_with(const infer_map *m, const char *prefix)
{
    char *text = render(m);
    expect_short_lines(text);
    size_t len = strlen(prefix) + strlen(text) + 2;
    char *full = malloc(len);
    ck_assert_ptr_nonnull(full);
    snprintf(full, len, "%s\n%s", prefix, text);
    config c;
    char err[1024] = "";
    ck_assert_msg(config_load_string("inferred", full, &c, err, sizeof err), "the inferred map does not load: %s\n%s",
                  err, full);
    ck_assert_uint_eq(c.maps.n, 1);
    map_set model = {(map_collection *)infer_map_model(m), 1};
    if (!config_map_equal(&c.maps, &model)) {
        char *a = config_map_json(&c.maps), *b = config_map_json(&model);
        ck_abort_msg("loaded back differently:\nloaded: %s\nmodel:  %s\n%s", a, b, text);
    }
    /* and the model passes the set's checks as it is */
    int line = 0;
    char why[256] = "";
    ck_assert_msg(map_set_check(&model, &line, why, sizeof why), "map_set_check: line %d: %s", line, why);
    config_free(&c);
    free(full);
    return text;
}

static char *expect_roundtrip(const infer_map *m)
{
    return expect_roundtrip_with(m, "[replication]\ninclude = shop.*\n");
}

/* Each document {v: VALUE} for the values given (JSON), with _id 1, 2, ...; the type the column v gets. */
static void expect_type_of(const char *const *values, const char *want)
{
    char docs[16][256];
    const char *list[17];
    size_t n = 0;
    for (; values[n] != NULL; n++) {
        ck_assert(n < 16);
        snprintf(docs[n], sizeof docs[n], "{\"_id\": %zu, \"v\": %s}", n + 1, values[n]);
        list[n] = docs[n];
    }
    list[n] = NULL;
    infer_map *m = infer_docs(list);
    char buf[64];
    ck_assert_msg(strcmp(type_at(root(m), "v", buf, sizeof buf), want) == 0, "values %s ...: got \"%s\", want \"%s\"",
                  values[0], buf, want);
    free(expect_roundtrip(m));
    infer_map_free(m);
}

#define TYPE_OF(want, ...)                                                                                             \
    do {                                                                                                               \
        const char *const vals_[] = {__VA_ARGS__, NULL};                                                               \
        expect_type_of(vals_, want);                                                                                   \
    } while (0)

/* ---- single types ------------------------------------------------------------------------------------------------ */

START_TEST(test_single_types)
{
    TYPE_OF("integer", "1", "2");
    TYPE_OF("bigint", "{\"$numberLong\": \"5\"}");
    TYPE_OF("double precision", "1.5", "2.5");
    TYPE_OF("numeric", "{\"$numberDecimal\": \"1.00\"}");
    TYPE_OF("text", "\"a\"", "\"b\"");
    TYPE_OF("boolean", "true", "false");
    TYPE_OF("timestamptz", "{\"$date\": \"2024-01-15T10:00:00Z\"}");
    TYPE_OF("text", "{\"$oid\": \"65a1f0aaaaaaaaaaaaaaaaaa\"}");
    TYPE_OF("uuid", "{\"$binary\": {\"base64\": \"AAECAwQFBgcICQoLDA0ODw==\", \"subType\": \"04\"}}");
    TYPE_OF("bytea", "{\"$binary\": {\"base64\": \"AAEC\", \"subType\": \"00\"}}");
    /* a subtype 4 that is not 16 bytes long is not a uuid */
    TYPE_OF("bytea", "{\"$binary\": {\"base64\": \"AAEC\", \"subType\": \"04\"}}");
    TYPE_OF("jsonb", "{\"$timestamp\": {\"t\": 5, \"i\": 1}}");
    TYPE_OF("jsonb", "{\"$regularExpression\": {\"pattern\": \"a\", \"options\": \"\"}}");
    TYPE_OF("jsonb", "{\"$minKey\": 1}");
    /* only null: jsonb, which takes whatever comes later */
    TYPE_OF("jsonb", "null", "null");
    /* an empty document only: jsonb */
    TYPE_OF("jsonb", "{}");
}
END_TEST

/* ---- mixed types ------------------------------------------------------------------------------------------------- */

START_TEST(test_mixed_types)
{
    TYPE_OF("bigint", "1", "{\"$numberLong\": \"5\"}");
    TYPE_OF("double precision", "1", "2.5");
    TYPE_OF("double precision", "{\"$numberLong\": \"5\"}", "2.5");
    TYPE_OF("double precision", "1", "{\"$numberLong\": \"5\"}", "2.5");
    TYPE_OF("numeric", "1", "{\"$numberDecimal\": \"1.5\"}");
    TYPE_OF("numeric", "2.5", "{\"$numberDecimal\": \"1.5\"}");
    TYPE_OF("numeric", "1", "{\"$numberLong\": \"5\"}", "2.5", "{\"$numberDecimal\": \"1.5\"}");
    TYPE_OF("text", "\"a\"", "{\"$oid\": \"65a1f0aaaaaaaaaaaaaaaaaa\"}");
    TYPE_OF("bytea", "{\"$binary\": {\"base64\": \"AAECAwQFBgcICQoLDA0ODw==\", \"subType\": \"04\"}}",
            "{\"$binary\": {\"base64\": \"AAEC\", \"subType\": \"00\"}}");
    /* null and undefined count as absent */
    TYPE_OF("integer", "1", "null", "{\"$undefined\": true}");
    TYPE_OF("text", "null", "\"a\"");
    /* otherwise jsonb */
    TYPE_OF("jsonb", "\"a\"", "1");
    TYPE_OF("jsonb", "true", "1");
    TYPE_OF("jsonb", "{\"$date\": \"2024-01-15T10:00:00Z\"}", "\"2024-01-15\"");
    TYPE_OF("jsonb", "{\"$oid\": \"65a1f0aaaaaaaaaaaaaaaaaa\"}",
            "{\"$binary\": {\"base64\": \"AAEC\", \"subType\": "
            "\"00\"}}");
    /* a document in some documents, something else in others: one jsonb column, not dotted ones */
    TYPE_OF("jsonb", "{\"a\": 1}", "5");
    /* an array in some, a scalar in others */
    TYPE_OF("jsonb", "[1, 2]", "3");
}
END_TEST

/* The mixed choice is explained in a comment next to the column, with the shares seen. */
START_TEST(test_mixed_comments)
{
    const char *docs[] = {"{\"_id\": 1, \"n\": 1}", "{\"_id\": 2, \"n\": 2}", "{\"_id\": 3, \"n\": 3}",
                          "{\"_id\": 4, \"n\": {\"$numberLong\": \"4\"}}", NULL};
    infer_map *m = infer_docs(docs);
    char *text = expect_roundtrip(m);
    ck_assert_msg(strstr(text, "; n: 100% present; int32 75%, int64 25%\n") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "bigint holds int32 and int64") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "\ncolumn.n = bigint from n\n") != NULL, "%s", text);
    free(text);
    infer_map_free(m);
}
END_TEST

/* ---- arrays ------------------------------------------------------------------------------------------------------ */

START_TEST(test_arrays_of_scalars)
{
    TYPE_OF("text[]", "[\"a\", \"b\"]", "[\"c\"]");
    TYPE_OF("integer[]", "[1, 2]", "[3]");
    TYPE_OF("bigint[]", "[1, {\"$numberLong\": \"5\"}]", "[]");
    TYPE_OF("double precision[]", "[1, 2.5]");
    TYPE_OF("numeric[]", "[1, {\"$numberDecimal\": \"1.5\"}]");
    TYPE_OF("text[]", "[\"a\", {\"$oid\": \"65a1f0aaaaaaaaaaaaaaaaaa\"}]");
    TYPE_OF("boolean[]", "[true, null, false]");
    TYPE_OF("timestamptz[]", "[{\"$date\": \"2024-01-15T10:00:00Z\"}]");
    /* elements no one type holds, nested arrays, documents mixed with scalars, only empty arrays: jsonb */
    TYPE_OF("jsonb", "[\"a\", 1]");
    TYPE_OF("jsonb", "[[1, 2], [3]]");
    TYPE_OF("jsonb", "[{\"a\": 1}, 2]");
    TYPE_OF("jsonb", "[]", "[]");
    TYPE_OF("jsonb", "[null]");
    TYPE_OF("jsonb", "[{\"$timestamp\": {\"t\": 5, \"i\": 1}}]");
}
END_TEST

START_TEST(test_array_of_documents_child_table)
{
    const char *docs[] = {
        "{\"_id\": 1, \"items\": [{\"sku\": \"a\", \"qty\": 1}, {\"sku\": \"b\", \"qty\": 2, \"note\": \"x\"}]}",
        "{\"_id\": 2, \"items\": [{\"sku\": \"c\", \"qty\": {\"$numberLong\": \"3\"}, \"sub\": [{\"z\": 1}], "
        "\"dim\": {\"w\": 1.5, \"h\": 2}, \"tags\": [\"t\"]}]}",
        "{\"_id\": 3, \"items\": []}", "{\"_id\": 4}", NULL};
    infer_map *m = infer_docs(docs);
    const map_table *t = root(m);
    ck_assert_ptr_null(by_path(t, "items")); /* not a column: a child table */
    ck_assert_uint_eq(t->nchildren, 1);
    const map_table *k = child_at(t, "items");
    ck_assert_ptr_nonnull(k);
    ck_assert_str_eq(k->name.schema, "shop");
    ck_assert_str_eq(k->name.table, "orders_items");
    ck_assert_ptr_eq(k->parent, t);
    ck_assert_uint_eq(k->key, SIZE_MAX);
    ck_assert_str_eq(k->parent_key_column, "parent_key");
    ck_assert_str_eq(k->position_column, "position");
    char buf[64];
    ck_assert_str_eq(type_at(k, "sku", buf, sizeof buf), "text");
    ck_assert_str_eq(type_at(k, "qty", buf, sizeof buf), "bigint");
    ck_assert_str_eq(type_at(k, "note", buf, sizeof buf), "text");
    ck_assert_str_eq(type_at(k, "tags", buf, sizeof buf), "text[]");
    /* nested documents inside an element: dotted columns, to the same depth */
    ck_assert_str_eq(type_at(k, "dim.w", buf, sizeof buf), "double precision");
    ck_assert_str_eq(type_at(k, "dim.h", buf, sizeof buf), "integer");
    /* a child table has no child tables: an array of documents inside an element is jsonb */
    ck_assert_str_eq(type_at(k, "sub", buf, sizeof buf), "jsonb");
    ck_assert_uint_eq(k->nchildren, 0);
    char *text = expect_roundtrip(m);
    ck_assert_msg(strstr(text, "\nchild.items = shop.orders_items\n") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "\n[child shop.orders_items]\n") != NULL, "%s", text);
    /* presence of the array among the documents, and of the fields among the elements */
    ck_assert_msg(strstr(text, "; items: 75% present; array 100%; 3 elements: document 100%\n") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "; note: 33% present; string 100%\n") != NULL, "%s", text);
    free(text);
    infer_map_free(m);
}
END_TEST

/* ---- nested documents -------------------------------------------------------------------------------------------- */

static const char *const NESTED[] = {
    "{\"_id\": 1, \"a\": {\"b\": 1, \"c\": {\"d\": \"x\", \"e\": {\"f\": true}}}, \"top\": 1}",
    "{\"_id\": 2, \"a\": {\"b\": 2, \"c\": {\"d\": \"y\"}}, \"top\": 2}",
    NULL,
};

START_TEST(test_nested_default_depth)
{
    infer_map *m = infer_docs(NESTED);
    const map_table *t = root(m);
    char buf[64];
    ck_assert_str_eq(type_at(t, "top", buf, sizeof buf), "integer");
    ck_assert_str_eq(type_at(t, "a.b", buf, sizeof buf), "integer");
    ck_assert_str_eq(by_path(t, "a.b")->name, "a_b");
    /* depth 2: a.c.d has three parts, so a.c and below stay in the rest (the doc column) */
    ck_assert_ptr_null(by_path(t, "a"));
    ck_assert_ptr_null(by_path(t, "a.c"));
    ck_assert_ptr_null(by_path(t, "a.c.d"));
    ck_assert_int_eq(t->rest, MAP_REST_DOC);
    ck_assert_str_eq(t->rest_column, "doc");
    char *text = expect_roundtrip(m);
    ck_assert_msg(strstr(text, "; a.c: 100% present; document 100%\n") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "deeper than --depth 2") != NULL, "%s", text);
    free(text);
    infer_map_free(m);
}
END_TEST

START_TEST(test_nested_chosen_depth)
{
    char buf[64];
    infer_options o = {.depth = 4};
    infer_map *m = infer_opts(NESTED, &o, NULL, NULL);
    const map_table *t = root(m);
    ck_assert_str_eq(type_at(t, "a.c.d", buf, sizeof buf), "text");
    ck_assert_str_eq(by_path(t, "a.c.d")->name, "a_c_d");
    ck_assert_str_eq(type_at(t, "a.c.e.f", buf, sizeof buf), "boolean");
    ck_assert_uint_eq(by_path(t, "a.c.e.f")->nparts, 4);
    free(expect_roundtrip(m));
    infer_map_free(m);

    o.depth = 3;
    m = infer_opts(NESTED, &o, NULL, NULL);
    t = root(m);
    ck_assert_str_eq(type_at(t, "a.c.d", buf, sizeof buf), "text");
    ck_assert_ptr_null(by_path(t, "a.c.e"));
    ck_assert_ptr_null(by_path(t, "a.c.e.f"));
    free(expect_roundtrip(m));
    infer_map_free(m);

    o.depth = 1; /* top-level fields only: every document stays in the rest */
    m = infer_opts(NESTED, &o, NULL, NULL);
    t = root(m);
    ck_assert_str_eq(type_at(t, "top", buf, sizeof buf), "integer");
    ck_assert_ptr_null(by_path(t, "a"));
    ck_assert_ptr_null(by_path(t, "a.b"));
    free(expect_roundtrip(m));
    infer_map_free(m);
}
END_TEST

/* ---- the key ----------------------------------------------------------------------------------------------------- */

START_TEST(test_key_column)
{
    const char *oids[] = {"{\"_id\": {\"$oid\": \"65a1f0aaaaaaaaaaaaaaaaaa\"}, \"x\": 1}",
                          "{\"_id\": {\"$oid\": \"65a1f0aaaaaaaaaaaaaaaaab\"}, \"x\": 2}", NULL};
    infer_map *m = infer_docs(oids);
    const map_table *t = root(m);
    ck_assert_uint_eq(t->key, 0);
    ck_assert_str_eq(t->cols[0].name, "_id");
    ck_assert_str_eq(t->cols[0].path, "_id");
    ck_assert_int_eq(t->cols[0].type.scalar, MAP_TEXT);
    ck_assert_int_ne(t->cols[0].line, 0); /* declared in the text */
    char *text = expect_roundtrip(m);
    ck_assert_msg(strstr(text, "\ncolumn._id = text from _id\n") != NULL, "%s", text);
    free(text);
    infer_map_free(m);

    /* _ids of several types (or a compound _id): the key column oplog2pg adds, _id text with the key text */
    const char *mixed[] = {"{\"_id\": 1, \"x\": 1}", "{\"_id\": \"two\", \"x\": 2}", NULL};
    m = infer_docs(mixed);
    t = root(m);
    ck_assert_uint_eq(t->key, 0);
    ck_assert_str_eq(t->cols[0].name, "_id");
    ck_assert_int_eq(t->cols[0].type.scalar, MAP_TEXT);
    ck_assert_int_eq(t->cols[0].line, 0); /* added, not declared */
    text = expect_roundtrip(m);
    ck_assert_msg(strstr(text, "column._id") == NULL, "%s", text);
    ck_assert_msg(strstr(text, "of several types") != NULL, "%s", text);
    free(text);
    infer_map_free(m);

    /* one type, but values its key column would refuse: a string of an ObjectId's hex digits (it would be one row
     * with that ObjectId), binary of subtype 3 (one row with subtype 4 of its bytes in a uuid or bytea key) */
    const char *hexlike[] = {"{\"_id\": \"A-17\"}", "{\"_id\": \"65a1f0aaaaaaaaaaaaaaaaaa\"}", NULL};
    const char *legacy[] = {"{\"_id\": {\"$binary\": {\"base64\": \"oO68mZwLTvi7bWu5vTgKEQ==\", \"subType\": \"03\"}}}",
                            NULL};
    const char *const *refused[] = {hexlike, legacy};
    for (size_t i = 0; i < 2; i++) {
        m = infer_docs(refused[i]);
        t = root(m);
        ck_assert_int_eq(t->cols[t->key].line, 0);
        ck_assert_int_eq(t->cols[t->key].type.scalar, MAP_TEXT);
        text = expect_roundtrip(m);
        ck_assert_msg(strstr(text, "column._id") == NULL, "%s", text);
        ck_assert_msg(strstr(text, "1 of them a ") != NULL && strstr(text, " key cannot hold exactly") != NULL, "%s",
                      text);
        free(text);
        infer_map_free(m);
    }
    /* the same types where every value is exact: a key column */
    const char *strs[] = {"{\"_id\": \"A-17\"}", "{\"_id\": \"65A1F0AAAAAAAAAAAAAAAAAA\"}", NULL};
    const char *bins[] = {"{\"_id\": {\"$binary\": {\"base64\": \"oO68mZwLTvi7bWu5vTgKEQ==\", \"subType\": \"00\"}}}",
                          NULL};
    m = infer_docs(strs);
    ck_assert_int_eq(root(m)->cols[root(m)->key].type.scalar, MAP_TEXT);
    ck_assert_int_ne(root(m)->cols[root(m)->key].line, 0);
    infer_map_free(m);
    m = infer_docs(bins);
    ck_assert_int_eq(root(m)->cols[root(m)->key].type.scalar, MAP_BYTEA);
    ck_assert_int_ne(root(m)->cols[root(m)->key].line, 0);
    infer_map_free(m);

    const char *compound[] = {"{\"_id\": {\"r\": 1, \"n\": 2}, \"x\": 1}", NULL};
    m = infer_docs(compound);
    t = root(m);
    ck_assert_int_eq(t->cols[t->key].line, 0);
    ck_assert_ptr_null(by_path(t, "_id.r")); /* inside the key's path: never a column */
    free(expect_roundtrip(m));
    infer_map_free(m);
}
END_TEST

/* ---- names ------------------------------------------------------------------------------------------------------- */

START_TEST(test_names_that_cannot_be_written)
{
    const char *docs[] = {"{\"_id\": 1, \"a;b\": 1, \"c=d\": 2, \" sp\": 3, \"ok name\": 4, \"x:y\": 5, "
                          "\"dollar$\": 6, \"doc\": 7, \"xmin\": 8, \"a_b\": 9, \"a\": {\"b\": 10}}",
                          NULL};
    infer_map *m = infer_docs(docs);
    const map_table *t = root(m);
    ck_assert_ptr_null(by_path(t, "a;b"));
    ck_assert_ptr_null(by_path(t, "c=d"));
    ck_assert_ptr_null(by_path(t, " sp"));
    ck_assert_ptr_null(by_path(t, "dollar$"));
    ck_assert_ptr_nonnull(by_path(t, "ok name"));
    ck_assert_str_eq(by_path(t, "ok name")->name, "ok name");
    ck_assert_str_eq(by_path(t, "x:y")->name, "x_y");
    /* names that are taken (the rest column, system columns, another column) get a suffix */
    ck_assert_str_ne(by_path(t, "doc")->name, "doc");
    ck_assert_str_ne(by_path(t, "xmin")->name, "xmin");
    ck_assert_str_eq(by_path(t, "a_b")->name, "a_b");
    ck_assert_str_ne(by_path(t, "a.b")->name, "a_b");
    char *text = expect_roundtrip(m);
    ck_assert_msg(strstr(text, "skipped") != NULL, "%s", text);
    free(text);
    infer_map_free(m);
}
END_TEST

/* A table name another collection or map holds is not taken: the next free one is, and `table =` says which. */
struct taken_list {
    const char *names[8]; /* "schema.table" */
    int calls;
};

static bool taken_cb(void *arg, const char *schema, const char *table)
{
    struct taken_list *l = arg;
    char full[160];
    snprintf(full, sizeof full, "%s.%s", schema, table);
    l->calls++;
    for (int i = 0; l->names[i] != NULL; i++)
        if (strcmp(l->names[i], full) == 0)
            return true;
    return false;
}

START_TEST(test_taken_table_names)
{
    const char *docs[] = {"{\"_id\": 1, \"items\": [{\"a\": 1}], \"lines\": [{\"b\": 2}]}", NULL};
    struct taken_list l = {{"shop.orders", "shop.orders_items", "shop.orders_2", NULL}, 0};
    infer_map *m = infer_opts(docs, NULL, taken_cb, &l);
    const map_table *t = root(m);
    ck_assert_int_gt(l.calls, 0);
    ck_assert_str_eq(t->name.schema, "shop");
    ck_assert_str_eq(t->name.table, "orders_3");
    ck_assert_str_eq(child_at(t, "items")->name.table, "orders_items_2");
    ck_assert_str_eq(child_at(t, "lines")->name.table, "orders_lines");
    char *text = expect_roundtrip(m);
    ck_assert_msg(strstr(text, "\ntable = shop.orders_3\n") != NULL, "%s", text);
    free(text);
    infer_map_free(m);

    /* two child arrays whose names meet (a_b and a.b) get two tables */
    const char *meet[] = {"{\"_id\": 1, \"a_b\": [{\"x\": 1}], \"a\": {\"b\": [{\"y\": 2}]}}", NULL};
    m = infer_docs(meet);
    t = root(m);
    ck_assert_uint_eq(t->nchildren, 2);
    ck_assert_str_ne(child_at(t, "a_b")->name.table, child_at(t, "a.b")->name.table);
    free(expect_roundtrip(m));
    infer_map_free(m);
}
END_TEST

/* A database whose schema is reserved maps to $NAME, and the header still names the namespace. */
START_TEST(test_reserved_database)
{
    infer_stats *s = infer_stats_new(NULL);
    bson_t *b = from_json("{\"_id\": 1, \"v\": 1}");
    ck_assert(infer_stats_add(s, b));
    bson_destroy(b);
    char why[256];
    infer_map *m = infer_build(s, "pg_data", "c", NULL, NULL, why, sizeof why);
    ck_assert_msg(m != NULL, "%s", why);
    ck_assert_str_eq(infer_map_model(m)->table.name.schema, "$pg_data");
    char *text = expect_roundtrip_with(m, "[replication]\ninclude = pg_data.*\n");
    ck_assert_msg(strncmp(text, "[map pg_data.c]\n", 16) == 0, "%s", text);
    free(text);
    infer_map_free(m);
    /* a namespace a header cannot hold, and no documents: no map, and why says so */
    ck_assert_ptr_null(infer_build(s, "sh]op", "c", NULL, NULL, why, sizeof why));
    ck_assert_msg(strstr(why, "header") != NULL, "%s", why);
    infer_stats_free(s);
    s = infer_stats_new(NULL);
    ck_assert_ptr_null(infer_build(s, "shop", "c", NULL, NULL, why, sizeof why));
    ck_assert_str_eq(why, "no documents");
    infer_stats_free(s);
}
END_TEST

/* ---- hostile input ----------------------------------------------------------------------------------------------- */

/* {d: {d: ... {leaf: 1} ...}} nested `levels` deep, appended to b under key. */
static void append_deep(bson_t *b, const char *key, int levels)
{
    if (levels == 0) {
        BSON_APPEND_INT32(b, key, 1);
        return;
    }
    bson_t child;
    BSON_APPEND_DOCUMENT_BEGIN(b, key, &child);
    append_deep(&child, "d", levels - 1);
    BSON_APPEND_UTF8(&child, "s", "x");
    bson_append_document_end(b, &child);
}

/* An array holding an array ... `levels` deep, the innermost holding {x: 1}. */
static void append_deep_array(bson_t *b, const char *key, int levels)
{
    bson_t child;
    if (levels == 0) {
        BSON_APPEND_DOCUMENT_BEGIN(b, key, &child);
        BSON_APPEND_INT32(&child, "x", 1);
        bson_append_document_end(b, &child);
        return;
    }
    BSON_APPEND_ARRAY_BEGIN(b, key, &child);
    append_deep_array(&child, "0", levels - 1);
    bson_append_array_end(b, &child);
}

/* Field names that cannot be written, that are empty, huge or not UTF-8; far more fields than the path cap; nesting
 * far below --depth; the same paths with other types in other documents; arrays of documents holding the same. The
 * map is made, its text is bounded and loads back to the same map. */
START_TEST(test_hostile_documents)
{
    size_t huge_len = 65536;
    char *huge = malloc(huge_len + 1);
    ck_assert_ptr_nonnull(huge);
    memset(huge, 'n', huge_len);
    huge[huge_len] = '\0';
    const char *names[] = {"",        ".",           "..",  "$x", "a.b", "$", "\xff\xfe", "bad\xc3",
                           "nl\nx",   "ctl\x01",     "[x]", "=",  "#",   ";", " ",        "\xe6\x97\xa5\xe6\x9c\xac",
                           "quote\"", "back\\slash", "ok"};
    size_t nnames = sizeof names / sizeof names[0];
    infer_options o = {.depth = INFER_MAX_DEPTH};
    infer_stats *s = infer_stats_new(&o);
    ck_assert_ptr_nonnull(s);
    for (int d = 0; d < 40; d++) {
        bson_t *b = bson_new();
        BSON_APPEND_INT32(b, "_id", d);
        /* the hostile names, with a type that changes from document to document */
        for (size_t i = 0; i < nnames; i++) {
            if (d % 3 == 0)
                bson_append_int32(b, names[i], -1, d);
            else if (d % 3 == 1)
                bson_append_utf8(b, names[i], -1, "v", -1);
            else {
                bson_t sub;
                bson_append_document_begin(b, names[i], -1, &sub);
                bson_append_int32(&sub, names[(i + 1) % nnames], -1, 1);
                bson_append_document_end(b, &sub);
            }
        }
        /* a 64 KB name, and 64 KB names that differ in each document */
        bson_append_int32(b, huge, (int)huge_len, d);
        huge[0] = (char)('A' + d % 26);
        huge[1] = (char)('A' + d / 26);
        bson_append_int32(b, huge, (int)huge_len, d);
        huge[0] = huge[1] = 'n';
        /* fields that are data: 600 new names a document, 24 000 in all, beyond the 10 000 paths counted */
        for (int k = 0; k < 600; k++) {
            char key[32];
            snprintf(key, sizeof key, "id%d_%d", d, k);
            BSON_APPEND_INT32(b, key, k);
        }
        append_deep(b, "deep", 150);
        append_deep_array(b, "arrays", 150);
        /* an array of documents with the same hostile names, nested too */
        bson_t arr;
        BSON_APPEND_ARRAY_BEGIN(b, "items", &arr);
        for (int e = 0; e < 3; e++) {
            char idx[8];
            snprintf(idx, sizeof idx, "%d", e);
            bson_t el;
            BSON_APPEND_DOCUMENT_BEGIN(&arr, idx, &el);
            for (size_t i = 0; i < nnames; i++)
                bson_append_int32(&el, names[i], -1, e);
            bson_append_int32(&el, huge, (int)huge_len, e);
            append_deep(&el, "deep", 150);
            bson_append_document_end(&arr, &el);
        }
        bson_append_array_end(b, &arr);
        ck_assert(infer_stats_add(s, b));
        bson_destroy(b);
    }
    char why[256] = "";
    infer_map *m = infer_build(s, "shop", "orders", NULL, NULL, why, sizeof why);
    infer_stats_free(s);
    ck_assert_msg(m != NULL, "infer_build failed: %s", why);
    char *text = expect_roundtrip(m);
    /* bounded: 50 columns a table, lines of 199 characters, a comment or two each */
    ck_assert_msg(strlen(text) < 100 * 1024, "%zu bytes of map", strlen(text));
    ck_assert_msg(strstr(text, "more paths that are no column, not listed (at most 200 are)") != NULL, "%.2000s", text);
    ck_assert_uint_le(root(m)->ncols, INFER_DEFAULT_MAX_COLUMNS);
    ck_assert_ptr_nonnull(by_path(root(m), "ok"));
    ck_assert_msg(strstr(text, "10000") != NULL, "the path cap is not said:\n%.2000s", text);
    free(text);
    infer_map_free(m);
    free(huge);
}
END_TEST

/* The resident memory of this process, in bytes. */
static uint64_t resident_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    ck_assert_ptr_nonnull(f);
    unsigned long size = 0, resident = 0;
    ck_assert_int_eq(fscanf(f, "%lu %lu", &size, &resident), 2);
    fclose(f);
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* 10 000 distinct field names of 64 KB each (250 to a document of 16 MB, as names that are data could be): the
 * stats keep a bounded start of each, not 640 MB of names. */
START_TEST(test_huge_names_bounded_memory)
{
    size_t len = 65536;
    char *name = malloc(len + 1);
    ck_assert_ptr_nonnull(name);
    memset(name, 'n', len);
    name[len] = '\0';
    infer_stats *s = infer_stats_new(NULL);
    uint64_t before = resident_bytes();
    for (int d = 0; d < 40; d++) {
        bson_t *b = bson_new();
        BSON_APPEND_INT32(b, "_id", d);
        for (int k = 0; k < 250; k++) {
            /* distinct at the end: the start they share is all the stats keep */
            snprintf(name + len - 12, 13, "%06d%06d", d, k);
            bson_append_int32(b, name, (int)len, k);
        }
        ck_assert(infer_stats_add(s, b));
        bson_destroy(b);
    }
    uint64_t grown = resident_bytes() - before;
#ifndef __SANITIZE_ADDRESS__
    ck_assert_msg(grown < UINT64_C(256) << 20, "the stats grew the process by %" PRIu64 " MB", grown >> 20);
#else
    (void)grown; /* AddressSanitizer keeps freed documents in its quarantine: the resident size says nothing here */
#endif
    char why[256] = "";
    infer_map *m = infer_build(s, "shop", "orders", NULL, NULL, why, sizeof why);
    infer_stats_free(s);
    ck_assert_msg(m != NULL, "%s", why);
    char *text = expect_roundtrip(m);
    ck_assert_msg(strstr(text, "the path is too long") != NULL, "%.2000s", text);
    free(text);
    infer_map_free(m);
    free(name);
}
END_TEST

/* 1 000 documents of 2 000 fields that are data, new in each document, beyond the 10 000 paths counted: each field
 * is found (or found missing) by its name's hash, not by a scan of the 10 000 others (minutes for this sample). */
START_TEST(test_many_fields_are_found_fast)
{
    infer_stats *s = infer_stats_new(NULL);
    for (int d = 0; d < 1000; d++) {
        bson_t *b = bson_new();
        BSON_APPEND_INT32(b, "_id", d);
        for (int k = 0; k < 2000; k++) {
            char key[32];
            snprintf(key, sizeof key, "f%d_%d", d, k);
            BSON_APPEND_INT32(b, key, k);
        }
        BSON_APPEND_INT32(b, "f0_7", d); /* met again in every document */
        ck_assert(infer_stats_add(s, b));
        bson_destroy(b);
    }
    char why[256] = "";
    infer_map *m = infer_build(s, "shop", "orders", NULL, NULL, why, sizeof why);
    infer_stats_free(s);
    ck_assert_msg(m != NULL, "%s", why);
    char *text = expect_roundtrip(m);
    ck_assert_msg(strstr(text, "; f0_7: 100% present; int32 100%\n") != NULL, "%.3000s", text);
    ck_assert_msg(strstr(text, "more than 10000 distinct paths") != NULL, "%.1000s", text);
    free(text);
    infer_map_free(m);
}
END_TEST

/* ---- limits ------------------------------------------------------------------------------------------------------ */

START_TEST(test_column_limit)
{
    /* 10 fields; f0..f4 in every document, f5..f9 in one of two: with max_columns 6 (the key among them), the five
     * most present stay columns */
    const char *docs[] = {"{\"_id\": 1, \"f5\": 1, \"f0\": 1, \"f6\": 1, \"f1\": 1, \"f7\": 1, \"f2\": 1, \"f8\": 1, "
                          "\"f3\": 1, \"f9\": 1, \"f4\": 1}",
                          "{\"_id\": 2, \"f0\": 1, \"f1\": 1, \"f2\": 1, \"f3\": 1, \"f4\": 1}", NULL};
    infer_options o = {.max_columns = 6};
    infer_map *m = infer_opts(docs, &o, NULL, NULL);
    const map_table *t = root(m);
    ck_assert_uint_eq(t->ncols, 6);
    for (int i = 0; i < 5; i++) {
        char p[8];
        snprintf(p, sizeof p, "f%d", i);
        ck_assert_msg(by_path(t, p) != NULL, "%s is not a column", p);
    }
    char *text = expect_roundtrip(m);
    ck_assert_msg(strstr(text, "beyond the limit of 6 columns") != NULL, "%s", text);
    free(text);
    infer_map_free(m);

    /* the path cap: paths first met after it are not counted, and the header says so */
    infer_options p = {.max_paths = 3};
    m = infer_opts(docs, &p, NULL, NULL);
    t = root(m);
    ck_assert_uint_le(t->ncols, 3);
    text = expect_roundtrip(m);
    ck_assert_msg(strstr(text, "more than 3 distinct paths") != NULL, "%s", text);
    free(text);
    infer_map_free(m);
}
END_TEST

/* A path too long for a line of the file stays in the rest; every line stays within the limit. */
START_TEST(test_long_paths)
{
    char name[120], doc[512];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    snprintf(doc, sizeof doc, "{\"_id\": 1, \"%s\": {\"%s\": 1}, \"short\": [{\"%s\": 1}]}", name, name, name);
    const char *docs[] = {doc, NULL};
    infer_map *m = infer_docs(docs);
    const map_table *t = root(m);
    char path[300];
    snprintf(path, sizeof path, "%s.%s", name, name);
    ck_assert_ptr_null(by_path(t, path));
    ck_assert_ptr_nonnull(child_at(t, "short"));
    free(expect_roundtrip(m));
    infer_map_free(m);
}
END_TEST

/* ---- presence ---------------------------------------------------------------------------------------------------- */

START_TEST(test_percent_bounds)
{
    char buf[8];
    ck_assert_str_eq(infer_percent(0, 0, buf), "0%");
    ck_assert_str_eq(infer_percent(0, 10, buf), "0%");
    ck_assert_str_eq(infer_percent(10, 10, buf), "100%");
    ck_assert_str_eq(infer_percent(1, 2, buf), "50%");
    ck_assert_str_eq(infer_percent(1, 3, buf), "33%");
    ck_assert_str_eq(infer_percent(2, 3, buf), "67%");
    /* never 0% unless none, never 100% unless all */
    ck_assert_str_eq(infer_percent(1, 1000, buf), "<1%");
    ck_assert_str_eq(infer_percent(4, 1000, buf), "<1%");
    ck_assert_str_eq(infer_percent(5, 1000, buf), "1%");
    ck_assert_str_eq(infer_percent(995, 1000, buf), "99%");
    ck_assert_str_eq(infer_percent(999, 1000, buf), "99%");
    ck_assert_str_eq(infer_percent(UINT64_MAX - 1, UINT64_MAX, buf), "99%");
    ck_assert_str_eq(infer_percent(1, UINT64_MAX, buf), "<1%");
    ck_assert_str_eq(infer_percent(UINT64_MAX / 2, UINT64_MAX, buf), "50%");
    ck_assert_str_eq(infer_percent(UINT64_MAX, UINT64_MAX, buf), "100%");
    /* every share in between */
    for (uint64_t part = 1; part < 200; part++) {
        const char *p = infer_percent(part, 200, buf);
        ck_assert_str_ne(p, "0%");
        ck_assert_str_ne(p, "100%");
        ck_assert_uint_lt(strlen(p), 8);
    }
}
END_TEST

START_TEST(test_presence_comments)
{
    const char *docs[] = {"{\"_id\": 1, \"a\": 1, \"b\": \"x\"}", "{\"_id\": 2, \"a\": 2}", "{\"_id\": 3, \"a\": 3}",
                          "{\"_id\": 4, \"a\": null, \"b\": 5}", NULL};
    infer_map *m = infer_docs(docs);
    char *text = expect_roundtrip(m);
    ck_assert_msg(strstr(text, "; 4 documents:") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "; a: 100% present; int32 75%, null 25%\n") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "; b: 50% present; string 50%, int32 50%\n") != NULL, "%s", text);
    /* the comment comes before the line it is about */
    const char *c = strstr(text, "; b: 50%"), *col = strstr(text, "column.b = jsonb from b");
    ck_assert_ptr_nonnull(col);
    ck_assert(c != NULL && c < col);
    free(text);
    infer_map_free(m);
}
END_TEST

/* ---- the round trip of a varied collection ----------------------------------------------------------------------- */

START_TEST(test_roundtrip_varied)
{
    const char *docs[] = {
        "{\"_id\": 1, \"n\": 1, \"x\": 1, \"amount\": {\"total\": 2.5, \"cur\": \"EUR\", \"deep\": {\"a\": 1}}, "
        "\"tags\": [\"a\", \"b\"], \"items\": [{\"sku\": \"s\", \"qty\": 1}], \"mixed\": \"s\", "
        "\"d\": {\"$numberDecimal\": \"1.5\"}, \"ref\": {\"$oid\": \"65a1f0aaaaaaaaaaaaaaaaaa\"}, "
        "\"名前\": \"ü\"}",
        "{\"_id\": 2, \"n\": {\"$numberLong\": \"5\"}, \"x\": 1.5, \"amount\": {\"total\": 3, \"cur\": \"EUR\"}, "
        "\"tags\": [], \"items\": [{\"sku\": \"t\", \"qty\": 2, \"sub\": [{\"a\": 1}]}], \"mixed\": 3, \"d\": 2, "
        "\"ref\": \"abc\", \"opt\": null, \"when\": {\"$date\": \"2024-01-01T00:00:00Z\"}}",
        NULL};
    infer_map *m = infer_docs(docs);
    const map_table *t = root(m);
    char buf[64];
    ck_assert_str_eq(type_at(t, "_id", buf, sizeof buf), "integer");
    ck_assert_str_eq(type_at(t, "n", buf, sizeof buf), "bigint");
    ck_assert_str_eq(type_at(t, "x", buf, sizeof buf), "double precision");
    ck_assert_str_eq(type_at(t, "amount.total", buf, sizeof buf), "double precision");
    ck_assert_str_eq(type_at(t, "amount.cur", buf, sizeof buf), "text");
    ck_assert_str_eq(type_at(t, "tags", buf, sizeof buf), "text[]");
    ck_assert_str_eq(type_at(t, "mixed", buf, sizeof buf), "jsonb");
    ck_assert_str_eq(type_at(t, "d", buf, sizeof buf), "numeric");
    ck_assert_str_eq(type_at(t, "ref", buf, sizeof buf), "text");
    ck_assert_str_eq(type_at(t, "opt", buf, sizeof buf), "jsonb");
    ck_assert_str_eq(type_at(t, "when", buf, sizeof buf), "timestamptz");
    ck_assert_str_eq(type_at(t, "名前", buf, sizeof buf), "text");
    ck_assert_ptr_nonnull(child_at(t, "items"));
    /* the columns come in the order the fields were first met, the key first */
    ck_assert_str_eq(t->cols[0].path, "_id");
    ck_assert_str_eq(t->cols[1].path, "n");
    ck_assert_str_eq(t->cols[2].path, "x");
    ck_assert_str_eq(t->cols[3].path, "amount.total");
    char *text = expect_roundtrip(m);
    ck_assert_msg(strncmp(text, "[map shop.orders]\n", 18) == 0, "%s", text);
    free(text);
    infer_map_free(m);
}
END_TEST

/* ---- time-series collections ------------------------------------------------------------------------------------- */

/* Measurements as the time-series view returns them (the time field first, then the meta field, then the data
 * fields), with data fields named like the table's fixed columns and an array of documents. */
static const char *const MEASUREMENTS[] = {
    "{\"t\": {\"$date\": \"2026-11-29T10:00:00Z\"}, \"meta\": {\"sensor\": \"a\", \"site\": 1}, "
    "\"_id\": {\"$oid\": \"65a1f0aaaaaaaaaaaaaaaaaa\"}, \"temp\": 21.5, \"time\": \"noon\", \"bucket\": 3, "
    "\"pos\": true, \"readings\": [{\"a\": 1}, {\"a\": 2}], \"tags\": [\"x\"]}",
    "{\"t\": {\"$date\": \"2026-11-29T10:01:00Z\"}, \"meta\": {\"sensor\": \"b\", \"site\": 2}, "
    "\"_id\": {\"$oid\": \"65a1f0aaaaaaaaaaaaaaaaab\"}, \"temp\": 22, \"readings\": [{\"a\": 3}]}",
    NULL,
};

START_TEST(test_timeseries_measurements)
{
    infer_options o = {.time_field = "t", .meta_field = "meta"};
    infer_map *m = infer_opts(MEASUREMENTS, &o, NULL, NULL);
    const map_table *t = root(m);
    char buf[64];
    /* the time field is the fixed column time: no column of the map */
    ck_assert_ptr_null(by_path(t, "t"));
    /* the meta field under its own name, as dotted columns */
    ck_assert_str_eq(type_at(t, "meta.sensor", buf, sizeof buf), "text");
    ck_assert_str_eq(type_at(t, "meta.site", buf, sizeof buf), "integer");
    /* the key column takes the measurement's _id */
    ck_assert_str_eq(t->cols[0].path, "_id");
    ck_assert_str_eq(t->cols[0].name, "_id");
    ck_assert_str_eq(type_at(t, "_id", buf, sizeof buf), "text");
    ck_assert_str_eq(type_at(t, "temp", buf, sizeof buf), "double precision");
    ck_assert_str_eq(type_at(t, "tags", buf, sizeof buf), "text[]");
    /* an array of documents: jsonb, never a child table */
    ck_assert_uint_eq(t->nchildren, 0);
    ck_assert_str_eq(type_at(t, "readings", buf, sizeof buf), "jsonb");
    /* bucket, pos and time are the fixed columns' names: the fields of those names get others */
    ck_assert_str_eq(by_path(t, "time")->name, "time_2");
    ck_assert_str_eq(by_path(t, "bucket")->name, "bucket_2");
    ck_assert_str_eq(by_path(t, "pos")->name, "pos_2");
    for (size_t i = 0; i < t->ncols; i++)
        ck_assert_msg(strcmp(t->cols[i].name, "time") != 0 && strcmp(t->cols[i].name, "bucket") != 0 &&
                          strcmp(t->cols[i].name, "pos") != 0,
                      "column %s", t->cols[i].name);
    ck_assert_int_eq(t->rest, MAP_REST_DOC);
    char *text = expect_roundtrip(m);
    ck_assert_msg(strstr(text, "child.") == NULL && strstr(text, "[child") == NULL, "%s", text);
    ck_assert_msg(strstr(text, "\ncolumn.meta_sensor = text from meta.sensor\n") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "\ncolumn.time_2 = text from time\n") != NULL, "%s", text);
    ck_assert_msg(strncmp(text,
                          "[map shop.orders]\n; a time-series collection (timeField t, metaField meta): a row per "
                          "measurement;",
                          strlen("[map shop.orders]\n; a time-series collection (timeField t, metaField meta): a row "
                                 "per measurement;")) == 0,
                  "%s", text);
    ck_assert_msg(strstr(text, "; 2 measurements: per path") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "; t: 100% present; date 100%\n;   the time field (timeField): the table's fixed "
                               "column time (timestamptz), not a column here\n") != NULL,
                  "%s", text);
    ck_assert_msg(strstr(text, "; meta: 100% present; document 100%\n;   the meta field (metaField)") != NULL, "%s",
                  text);
    ck_assert_msg(strstr(text, "the measurement's _id, which MongoDB does not keep unique") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "(the table of a time-series collection has no child tables)") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "column.t ") == NULL, "%s", text);
    free(text);
    infer_map_free(m);

    /* the same documents of a collection that is not time-series: t a column, readings a child table, time named
     * time (what the time-series options change) */
    m = infer_docs(MEASUREMENTS);
    t = root(m);
    ck_assert_str_eq(type_at(t, "t", buf, sizeof buf), "timestamptz");
    ck_assert_ptr_nonnull(child_at(t, "readings"));
    ck_assert_str_eq(by_path(t, "time")->name, "time");
    text = expect_roundtrip(m);
    ck_assert_msg(strstr(text, "time-series") == NULL, "%s", text);
    free(text);
    infer_map_free(m);
}
END_TEST

/* No metaField; the options' strings are copied (the caller's buffers may go); a time field in some measurements
 * only is still no column; a field named like the time field below the top level is a column like any other. */
START_TEST(test_timeseries_no_meta)
{
    char tf[8] = "ts";
    infer_options o = {.time_field = tf};
    infer_stats *s = infer_stats_new(&o);
    ck_assert_ptr_nonnull(s);
    memset(tf, 'x', sizeof tf - 1); /* the stats hold their own copy */
    const char *docs[] = {"{\"ts\": {\"$date\": \"2026-11-29T10:00:00Z\"}, \"_id\": 1, \"v\": {\"ts\": 2}}",
                          "{\"ts\": {\"$date\": \"2026-11-29T10:00:01Z\"}, \"_id\": 2, \"v\": {\"ts\": 3}}", NULL};
    for (size_t i = 0; docs[i] != NULL; i++) {
        bson_t *b = from_json(docs[i]);
        ck_assert(infer_stats_add(s, b));
        bson_destroy(b);
    }
    char why[256] = "";
    infer_map *m = infer_build(s, "shop", "orders", NULL, NULL, why, sizeof why);
    infer_stats_free(s);
    ck_assert_msg(m != NULL, "%s", why);
    const map_table *t = root(m);
    char buf[64];
    ck_assert_ptr_null(by_path(t, "ts"));
    ck_assert_str_eq(type_at(t, "v.ts", buf, sizeof buf), "integer");
    ck_assert_str_eq(type_at(t, "_id", buf, sizeof buf), "integer");
    char *text = expect_roundtrip(m);
    ck_assert_msg(strstr(text, "; a time-series collection (timeField ts): a row per measurement;") != NULL, "%s",
                  text);
    ck_assert_msg(strstr(text, "metaField") == NULL, "%s", text);
    free(text);
    infer_map_free(m);
}
END_TEST

Suite *infer_suite(void); /* called by the generated runner list */

Suite *infer_suite(void)
{
    Suite *s = suite_create("infer");
    TCase *tc = tcase_create("infer");
    tcase_add_test(tc, test_single_types);
    tcase_add_test(tc, test_mixed_types);
    tcase_add_test(tc, test_mixed_comments);
    tcase_add_test(tc, test_arrays_of_scalars);
    tcase_add_test(tc, test_array_of_documents_child_table);
    tcase_add_test(tc, test_nested_default_depth);
    tcase_add_test(tc, test_nested_chosen_depth);
    tcase_add_test(tc, test_key_column);
    tcase_add_test(tc, test_names_that_cannot_be_written);
    tcase_add_test(tc, test_taken_table_names);
    tcase_add_test(tc, test_reserved_database);
    tcase_add_test(tc, test_column_limit);
    tcase_add_test(tc, test_long_paths);
    tcase_add_test(tc, test_percent_bounds);
    tcase_add_test(tc, test_presence_comments);
    tcase_add_test(tc, test_roundtrip_varied);
    tcase_add_test(tc, test_timeseries_measurements);
    tcase_add_test(tc, test_timeseries_no_meta);
    suite_add_tcase(s, tc);
    /* samples of many megabytes: a bound far above what they take, far below what they took before */
    TCase *hostile = tcase_create("hostile");
    tcase_set_timeout(hostile, 30);
    tcase_add_test(hostile, test_hostile_documents);
    tcase_add_test(hostile, test_huge_names_bounded_memory);
    tcase_add_test(hostile, test_many_fields_are_found_fast);
    suite_add_tcase(s, hostile);
    return s;
}

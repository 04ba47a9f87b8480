/*
 * test_mapped_vectors.c — every update vector of tests/vectors (diff_v2_pre_post.jsonl, update_v1_pre_post.jsonl)
 * replicated by the daemon into a typed map, in each rest-of-document mode, and compared with the projection of its
 * post-image.
 *
 * Per vector, a map is derived from the fields of its pre- and post-image (derive_map): a scalar column of a fitting
 * type for each field that only ever holds one kind of scalar (text, integer, bigint, double precision, numeric,
 * boolean, timestamptz, bytea), columns for the fields of nested documents (dotted paths), text[] / integer[] /
 * double precision[] / ... for arrays of one scalar type, a child table for an array of documents (its element
 * fields becoming the child's columns by the same rules), and jsonb for everything else (mixed types, arrays of
 * arrays, field names a path cannot take). Collection vNN and its reference vNN_ref have the same map.
 *
 * The real path: the pre-image is inserted into vNN through the driver (the daemon's reader projects it into rows,
 * the sink writes them); the vector's `o` is appended verbatim to mongosim's oplog as an update entry of vNN
 * (appendOplog, the same bytes a server logged: the reader decodes it and plans it, the sink applies the plan), and
 * the post-image is inserted into vNN_ref. Once the daemon has caught up, the rows of every table of vNN must equal
 * those of vNN_ref, field by field (EXCEPT ALL both ways), and nothing may be set aside as a dead letter.
 *
 * Among them are the server applier's own tests of a diff applied to a document it was not computed from (a
 * sub-diff on a field of another kind or an absent one, an 8.x binary diff): the typed row must end as the server's
 * applier leaves the document. A vector that cannot apply to a map for a principled reason would be listed in
 * `excluded` with the reason; it is still applied (the daemon must go on), its mismatch is required (a stale
 * exclusion fails), and the number of exclusions is asserted. Today the list is empty: all 49 vectors are compared in
 * all three modes.
 */
#include <check.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/daemonenv.h"
#include "../lib/skip.h"
#include "util/strbuf.h"

#define MAX_VECTORS 64

/* ---- the vectors ---- */

typedef struct {
    char id[160];
    bson_t *pre, *o, *post; /* pre and post with an _id in front */
    bson_value_t idv;       /* the _id (points into pre) */
} vector;

static char *vector_path(const char *name)
{
    const char *dir = getenv("OPLOG2PG_VECTORS_DIR");
    return bson_strdup_printf("%s/%s", dir && *dir ? dir : "tests/vectors", name);
}

/* The sub-document `key` of line, exactly: from `key`_bson_hex when the line has it, else from the EJSON. */
static bson_t *exact_subdoc(const bson_t *line, const char *key)
{
    char hexkey[64];
    snprintf(hexkey, sizeof hexkey, "%s_bson_hex", key);
    bson_iter_t it;
    if (bson_iter_init_find(&it, line, hexkey) && BSON_ITER_HOLDS_UTF8(&it)) {
        uint32_t n;
        const char *hex = bson_iter_utf8(&it, &n);
        ck_assert(n % 2 == 0);
        uint8_t *bytes = malloc(n / 2 + 1);
        for (uint32_t i = 0; i < n / 2; i++) {
            unsigned v;
            ck_assert(sscanf(hex + 2 * i, "%2x", &v) == 1);
            bytes[i] = (uint8_t)v;
        }
        bson_t *d = bson_new_from_data(bytes, n / 2);
        free(bytes);
        ck_assert_msg(d != NULL, "%s is not BSON", hexkey);
        return d;
    }
    ck_assert_msg(bson_iter_init_find(&it, line, key) && BSON_ITER_HOLDS_DOCUMENT(&it), "no %s", key);
    uint32_t len;
    const uint8_t *data;
    bson_iter_document(&it, &len, &data);
    return bson_new_from_data(data, len);
}

/* doc with _id in front: its own _id when it has one, else id. */
static bson_t *with_id(const bson_t *doc, int32_t id)
{
    bson_t *out = bson_new();
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, "_id"))
        bson_append_iter(out, "_id", 3, &it);
    else
        BSON_APPEND_INT32(out, "_id", id);
    bson_iter_init(&it, doc);
    while (bson_iter_next(&it))
        if (strcmp(bson_iter_key(&it), "_id") != 0)
            bson_append_iter(out, bson_iter_key(&it), -1, &it);
    return out;
}

static int read_vectors(const char *file, vector *v, int n)
{
    char *path = vector_path(file);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s (run from the repository root or set OPLOG2PG_VECTORS_DIR)", path);
    bson_free(path);
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        bson_error_t err;
        bson_t *doc = bson_new_from_json((const uint8_t *)line, -1, &err);
        ck_assert_msg(doc != NULL, "%s: not valid EJSON: %s", file, err.message);
        bson_iter_t it;
        if (!bson_iter_init_find(&it, doc, "id")) { /* the _comment line */
            bson_destroy(doc);
            continue;
        }
        ck_assert(n < MAX_VECTORS);
        vector *x = &v[n];
        snprintf(x->id, sizeof x->id, "%s %s", file, bson_iter_utf8(&it, NULL));
        bson_t *pre = exact_subdoc(doc, "pre"), *post = exact_subdoc(doc, "post");
        x->o = exact_subdoc(doc, "o");
        x->pre = with_id(pre, n);
        x->post = with_id(post, n);
        bson_destroy(pre);
        bson_destroy(post);
        ck_assert(bson_iter_init_find(&it, x->pre, "_id"));
        x->idv = *bson_iter_value(&it);
        bson_destroy(doc);
        n++;
    }
    free(line);
    fclose(f);
    return n;
}

/* ---- the map of a vector ---- */

enum {
    K_TEXT = 1,
    K_INT = 2,
    K_LONG = 4,
    K_DOUBLE = 8,
    K_DEC = 16,
    K_BOOL = 32,
    K_DATE = 64,
    K_BIN = 128,
    K_OID = 256,
    K_OTHER = 512
};

typedef struct fnode fnode;
struct fnode {
    char *key;
    unsigned scal; /* scalar kinds seen as the value */
    bool doc, arr; /* a document / an array seen as the value */
    fnode **kids;  /* fields of the document values */
    size_t nkids;
    bool badkey;         /* a field name a path cannot take */
    unsigned el_scal;    /* kinds of the scalar elements of array values */
    bool el_doc, el_arr; /* document / array elements */
    fnode *el;           /* the fields of the document elements */
};

static unsigned kind_of(bson_type_t t)
{
    switch (t) {
    case BSON_TYPE_UTF8:
        return K_TEXT;
    case BSON_TYPE_INT32:
        return K_INT;
    case BSON_TYPE_INT64:
        return K_LONG;
    case BSON_TYPE_DOUBLE:
        return K_DOUBLE;
    case BSON_TYPE_DECIMAL128:
        return K_DEC;
    case BSON_TYPE_BOOL:
        return K_BOOL;
    case BSON_TYPE_DATE_TIME:
        return K_DATE;
    case BSON_TYPE_BINARY:
        return K_BIN;
    case BSON_TYPE_OID:
        return K_OID;
    default:
        return K_OTHER;
    }
}

static fnode *node_new(const char *key)
{
    fnode *n = calloc(1, sizeof *n);
    ck_assert_ptr_nonnull(n);
    n->key = strdup(key);
    return n;
}

static void node_free(fnode *n)
{
    if (n == NULL)
        return;
    for (size_t i = 0; i < n->nkids; i++)
        node_free(n->kids[i]);
    free(n->kids);
    node_free(n->el);
    free(n->key);
    free(n);
}

/* A field name a map path (and the INI line) can hold. */
static bool path_ok(const char *k)
{
    if (k[0] == '\0' || k[0] == '$')
        return false;
    for (const char *c = k; *c; c++)
        if (*c == '.' || *c == '=' || *c == ':' || *c == ';' || *c == ' ' || *c == '\t' || (unsigned char)*c < 0x20)
            return false;
    return true;
}

static fnode *kid(fnode *n, const char *key)
{
    for (size_t i = 0; i < n->nkids; i++)
        if (strcmp(n->kids[i]->key, key) == 0)
            return n->kids[i];
    n->kids = realloc(n->kids, (n->nkids + 1) * sizeof *n->kids);
    ck_assert_ptr_nonnull(n->kids);
    return n->kids[n->nkids++] = node_new(key);
}

static void observe(fnode *n, const bson_iter_t *v);

static void observe_fields(fnode *n, const bson_iter_t *docv)
{
    bson_iter_t it;
    n->doc = true;
    ck_assert(bson_iter_recurse(docv, &it));
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (!path_ok(k))
            n->badkey = true;
        else
            observe(kid(n, k), &it);
    }
}

static void observe(fnode *n, const bson_iter_t *v)
{
    bson_type_t t = bson_iter_type(v);
    if (t == BSON_TYPE_NULL || t == BSON_TYPE_UNDEFINED)
        return;
    if (t == BSON_TYPE_DOCUMENT) {
        observe_fields(n, v);
    } else if (t == BSON_TYPE_ARRAY) {
        n->arr = true;
        bson_iter_t el;
        ck_assert(bson_iter_recurse(v, &el));
        while (bson_iter_next(&el)) {
            bson_type_t et = bson_iter_type(&el);
            if (et == BSON_TYPE_NULL || et == BSON_TYPE_UNDEFINED)
                continue;
            if (et == BSON_TYPE_DOCUMENT) {
                n->el_doc = true;
                if (n->el == NULL)
                    n->el = node_new("");
                observe_fields(n->el, &el);
            } else if (et == BSON_TYPE_ARRAY) {
                n->el_arr = true;
            } else {
                n->el_scal |= kind_of(et);
            }
        }
    } else {
        n->scal |= kind_of(t);
    }
}

/* The column type for values of the kinds in mask (NULL: none fits, jsonb). */
static const char *scalar_type(unsigned mask)
{
    if (mask == 0 || (mask & ~(unsigned)(K_TEXT | K_OID)) == 0)
        return "text";
    if (mask == K_INT)
        return "integer";
    if ((mask & ~(unsigned)(K_INT | K_LONG)) == 0)
        return "bigint";
    if ((mask & ~(unsigned)(K_INT | K_LONG | K_DOUBLE)) == 0)
        return "double precision";
    if ((mask & ~(unsigned)(K_INT | K_LONG | K_DOUBLE | K_DEC)) == 0)
        return "numeric";
    if (mask == K_BOOL)
        return "boolean";
    if (mask == K_DATE)
        return "timestamptz";
    if (mask == K_BIN)
        return "bytea";
    return NULL;
}

typedef struct {
    const char *db, *coll, *mode;
    strbuf *ini;
    strbuf children; /* the [child] sections, after the [map] one */
    int nchild, ncols;
} mapgen;

static void column(mapgen *g, strbuf *sec, const char *path, const char *type)
{
    char name[64];
    if (strlen(path) <= 63)
        snprintf(name, sizeof name, "%s", path);
    else
        snprintf(name, sizeof name, "col%d", g->ncols);
    g->ncols++;
    strbuf_printf(sec, "column.%s = %s from %s\n", name, type, path);
}

static void table_columns(mapgen *g, strbuf *sec, fnode *n, const char *prefix, bool in_child);

/* The columns (or child table) of field n at path. */
static void field(mapgen *g, strbuf *sec, fnode *n, const char *path, bool in_child)
{
    int kinds = (n->scal != 0) + n->doc + n->arr;
    if (kinds == 0) {
        column(g, sec, path, "text"); /* only null seen */
    } else if (kinds > 1) {
        column(g, sec, path, "jsonb");
    } else if (n->doc) {
        if (n->badkey || n->nkids == 0)
            column(g, sec, path, "jsonb");
        else
            table_columns(g, sec, n, path, in_child);
    } else if (n->arr) {
        if (n->el_doc && !n->el_scal && !n->el_arr && !in_child && !n->el->badkey) {
            char table[128];
            snprintf(table, sizeof table, "%s_c%d", g->coll, g->nchild++);
            strbuf_printf(sec, "child.%s = %s\n", path, table);
            strbuf_printf(&g->children, "\n[child %s.%s]\nparent_key = _parent\nposition = _pos\nrest = %s\n", g->db,
                          table, g->mode);
            if (strcmp(g->mode, "drop") != 0)
                strbuf_printf(&g->children, "rest_column = _rest\n");
            table_columns(g, &g->children, n->el, NULL, true);
        } else if (n->el_doc || n->el_arr || scalar_type(n->el_scal) == NULL) {
            column(g, sec, path, "jsonb");
        } else {
            char type[64];
            snprintf(type, sizeof type, "%s[]", scalar_type(n->el_scal));
            column(g, sec, path, type);
        }
    } else {
        const char *t = scalar_type(n->scal);
        column(g, sec, path, t ? t : "jsonb");
    }
}

static void table_columns(mapgen *g, strbuf *sec, fnode *n, const char *prefix, bool in_child)
{
    for (size_t i = 0; i < n->nkids; i++) {
        fnode *k = n->kids[i];
        if (prefix == NULL && !in_child && strcmp(k->key, "_id") == 0)
            continue; /* the key column oplog2pg adds takes it */
        char path[512];
        if (prefix)
            snprintf(path, sizeof path, "%s.%s", prefix, k->key);
        else
            snprintf(path, sizeof path, "%s", k->key);
        field(g, sec, k, path, in_child);
    }
}

/* The [map] (and [child]) sections of collection coll for the vector's documents. */
static void derive_map(strbuf *ini, const char *db, const char *coll, const char *mode, const vector *v)
{
    fnode *root = node_new("");
    bson_iter_t it;
    bson_t *docs[2] = {v->pre, v->post};
    for (int i = 0; i < 2; i++) {
        /* the document as a value, so that observe_fields can recurse into it */
        bson_t wrap = BSON_INITIALIZER;
        BSON_APPEND_DOCUMENT(&wrap, "d", docs[i]);
        ck_assert(bson_iter_init_find(&it, &wrap, "d"));
        observe_fields(root, &it);
        bson_destroy(&wrap);
    }
    mapgen g = {.db = db, .coll = coll, .mode = mode, .ini = ini};
    strbuf_printf(ini, "\n[map %s.%s]\nrest = %s\n", db, coll, mode);
    if (strcmp(mode, "drop") != 0)
        strbuf_printf(ini, "rest_column = _rest\n");
    table_columns(&g, ini, root, NULL, false);
    if (g.children.data)
        strbuf_printf(ini, "%s", g.children.data);
    free(g.children.data);
    node_free(root);
}

/* ---- what is excluded, and why ---- */

typedef struct {
    const char *id;
    const char *reason;
} exclusion;

static const exclusion excluded[] = {
    {NULL, NULL},
};

/* Read from a change stream's updateDescription (OPLOG2PG_TEST_SOURCE=change_stream with
 * OPLOG2PG_TEST_STREAM_UPDATES=description), a diff of binary data cannot come through: the server lists a `b` entry
 * in updatedFields as its raw {o, d} object (change_stream_document_diff_parser.cpp). Such diffs are only written for
 * time-series buckets, which change streams never show; with the raw diff they apply exactly. */
static const exclusion excluded_description[] = {
    {"diff_v2_pre_post.jsonl ut-BinaryOverwriteSimple", "a binary diff, given by updateDescription as {o, d}"},
    {"diff_v2_pre_post.jsonl ut-BinaryShrink", "a binary diff, given by updateDescription as {o, d}"},
    {NULL, NULL},
};

static const char *exclusion_reason(const char *id)
{
    for (size_t i = 0; excluded[i].id != NULL; i++)
        if (strcmp(excluded[i].id, id) == 0)
            return excluded[i].reason;
    for (size_t i = 0; denv_stream_descriptions() && excluded_description[i].id != NULL; i++)
        if (strcmp(excluded_description[i].id, id) == 0)
            return excluded_description[i].reason;
    return NULL;
}

/* ---- running ---- */

static PGresult *q(PGconn *pg, const char *sql)
{
    PGresult *r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK || PQresultStatus(r) == PGRES_COMMAND_OK, "%s: %s", sql,
                  PQerrorMessage(pg));
    return r;
}

/* Rows of table a that b lacks plus the other way round; prints both tables when they differ. */
static long table_diff(PGconn *pg, const char *db, const char *a, const char *b, const char *label)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT (SELECT count(*) FROM (SELECT * FROM \"%s\".\"%s\" EXCEPT ALL SELECT * FROM \"%s\".\"%s\") x) + "
             "(SELECT count(*) FROM (SELECT * FROM \"%s\".\"%s\" EXCEPT ALL SELECT * FROM \"%s\".\"%s\") y)",
             db, a, db, b, db, b, db, a);
    PGresult *r = q(pg, sql);
    long diff = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    if (diff != 0) {
        const char *t[2] = {a, b};
        fprintf(stderr, "[%s] %s and %s differ:\n", label, a, b);
        for (int i = 0; i < 2; i++) {
            snprintf(sql, sizeof sql, "SELECT coalesce(string_agg(t::text, E'\\n'), '(no rows)') FROM \"%s\".\"%s\" t",
                     db, t[i]);
            r = q(pg, sql);
            fprintf(stderr, "  %s:\n    %s\n", t[i], PQgetvalue(r, 0, 0));
            PQclear(r);
        }
    }
    return diff;
}

static void append_update(mongoc_client_t *c, const char *db, const char *coll, const vector *v)
{
    char ns[160];
    snprintf(ns, sizeof ns, "%s.%s", db, coll);
    bson_t cmd = BSON_INITIALIZER, arr, entry, o2;
    BSON_APPEND_ARRAY_BEGIN(&cmd, "appendOplog", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &entry);
    BSON_APPEND_UTF8(&entry, "op", "u");
    BSON_APPEND_UTF8(&entry, "ns", ns);
    BSON_APPEND_DOCUMENT(&entry, "o", v->o);
    BSON_APPEND_DOCUMENT_BEGIN(&entry, "o2", &o2);
    BSON_APPEND_VALUE(&o2, "_id", &v->idv);
    bson_append_document_end(&entry, &o2);
    bson_append_document_end(&arr, &entry);
    bson_append_array_end(&cmd, &arr);
    bson_t reply;
    bson_error_t err;
    bool ok = mongoc_client_command_simple(c, "admin", &cmd, NULL, &reply, &err);
    ck_assert_msg(ok, "appendOplog for %s: %s", v->id, err.message);
    bson_destroy(&reply);
    bson_destroy(&cmd);
}

static void insert(mongoc_client_t *c, const char *db, const char *coll, const bson_t *doc, const char *label)
{
    mongoc_collection_t *col = mongoc_client_get_collection(c, db, coll);
    bson_error_t err;
    ck_assert_msg(mongoc_collection_insert_one(col, doc, NULL, NULL, &err), "[%s] insert into %s: %s", label, coll,
                  err.message);
    mongoc_collection_destroy(col);
}

static void run_mode(const char *name, const char *mode)
{
    ck_assert_msg(denv_using_sim(), "%s appends to the oplog: its test must skip first on a real server", name);
    static vector v[MAX_VECTORS];
    int n = read_vectors("diff_v2_pre_post.jsonl", v, 0);
    ck_assert_int_eq(n, 37);
    n = read_vectors("update_v1_pre_post.jsonl", v, n);
    ck_assert_int_eq(n, 37 + 12);

    char db[64];
    snprintf(db, sizeof db, "rep_%s_v", name);
    strbuf ini = {0};
    for (int i = 0; i < n; i++) {
        char coll[32];
        snprintf(coll, sizeof coll, "v%02d", i);
        derive_map(&ini, db, coll, mode, &v[i]);
        snprintf(coll, sizeof coll, "v%02d_ref", i);
        derive_map(&ini, db, coll, mode, &v[i]);
    }
    if (getenv("MAPPED_VECTORS_SHOW_MAP"))
        fprintf(stderr, "%s\n", ini.data);

    denv e;
    denv_start(&e, name, NULL, ini.data);
    free(ini.data);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    mongoc_client_t *c = mongoc_client_new(e.uri);
    for (int i = 0; i < n; i++) {
        char coll[32], ref[32];
        snprintf(coll, sizeof coll, "v%02d", i);
        snprintf(ref, sizeof ref, "v%02d_ref", i);
        insert(c, db, coll, v[i].pre, v[i].id);
        append_update(c, db, coll, &v[i]);
        insert(c, db, ref, v[i].post, v[i].id);
    }
    ck_assert(denv_wait_caught_up(&e, 120));

    PGconn *pg = PQconnectdb(denv_pg_conninfo());
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    strbuf failed = {0}, stale = {0};
    int checked = 0, nexcluded = 0, nfailed = 0;
    for (int i = 0; i < n; i++) {
        char label[200];
        snprintf(label, sizeof label, "%.160s, rest = %.8s", v[i].id, mode);
        /* the tables of vNN: the collection's and its child tables, vNN_c0, vNN_c1, ... */
        char sql[512];
        snprintf(sql, sizeof sql,
                 "SELECT table_name FROM information_schema.tables WHERE table_schema = '%s' AND "
                 "(table_name = 'v%02d' OR table_name LIKE 'v%02d\\_c%%') ORDER BY table_name",
                 db, i, i);
        PGresult *r = q(pg, sql);
        ck_assert_msg(PQntuples(r) >= 1, "[%s] no table", label);
        long diff = 0;
        for (int t = 0; t < PQntuples(r); t++) {
            const char *a = PQgetvalue(r, t, 0);
            char b[80];
            if (strcmp(a, "") == 0)
                continue;
            /* v07 -> v07_ref, v07_c0 -> v07_ref_c0 */
            snprintf(b, sizeof b, "v%02d_ref%s", i, a + 3);
            diff += table_diff(pg, db, a, b, label);
        }
        PQclear(r);
        snprintf(sql, sizeof sql,
                 "SELECT coalesce(string_agg(op || ': ' || error, ' | '), '') FROM oplog2pg.dead_letter "
                 "WHERE db = '%s' AND (coll = 'v%02d' OR coll = 'v%02d_ref')",
                 db, i, i);
        r = q(pg, sql);
        const char *dead = PQgetvalue(r, 0, 0);
        if (dead[0] != '\0') {
            fprintf(stderr, "[%s] dead letters: %s\n", label, dead);
            diff++;
        }
        PQclear(r);
        const char *why = exclusion_reason(v[i].id);
        if (why != NULL) {
            nexcluded++;
            if (diff == 0)
                strbuf_printf(&stale, "%s%s", stale.len ? "; " : "", label);
            else
                fprintf(stderr, "[%s] excluded, as expected it differs: %s\n", label, why);
        } else {
            checked++;
            if (diff != 0) {
                nfailed++;
                strbuf_printf(&failed, "%s%s", failed.len ? "; " : "", label);
            }
        }
    }
    PQfinish(pg);
    ck_assert_msg(nfailed == 0,
                  "%d of %d vectors differ from the projection of their post-image (details on stderr): %s", nfailed,
                  checked, failed.data);
    ck_assert_msg(stale.len == 0, "excluded vectors that now match (remove them from the list): %s", stale.data);
    size_t nlist = sizeof excluded / sizeof excluded[0] - 1;
    if (denv_stream_descriptions())
        nlist += sizeof excluded_description / sizeof excluded_description[0] - 1;
    ck_assert_int_eq(nexcluded, (int)nlist);
    ck_assert_int_eq(checked + nexcluded, 49);
    free(failed.data);
    free(stale.data);
    mongoc_client_destroy(c);
    denv_stop(&e);
    char sql[128];
    snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", db);
    denv_pg_exec(sql);
    for (int i = 0; i < n; i++) {
        bson_destroy(v[i].pre);
        bson_destroy(v[i].o);
        bson_destroy(v[i].post);
    }
}

START_TEST(test_vectors_rest_doc)
{
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim's appendOplog (the vectors' update entries are written verbatim)");
    run_mode("mvdoc", "doc");
}
END_TEST

START_TEST(test_vectors_rest_extra)
{
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim's appendOplog (the vectors' update entries are written verbatim)");
    run_mode("mvextra", "extra");
}
END_TEST

START_TEST(test_vectors_rest_drop)
{
    if (!denv_using_sim())
        SKIP_TEST("needs mongosim's appendOplog (the vectors' update entries are written verbatim)");
    run_mode("mvdrop", "drop");
}
END_TEST

Suite *mapped_vectors_suite(void); /* called by the generated runner list */

Suite *mapped_vectors_suite(void)
{
    Suite *s = suite_create("mapped_vectors");
    TCase *tc = tcase_create("mapped_vectors");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_vectors_rest_doc);
    tcase_add_test(tc, test_vectors_rest_extra);
    tcase_add_test(tc, test_vectors_rest_drop);
    suite_add_tcase(s, tc);
    return s;
}

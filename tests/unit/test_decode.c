/*
 * test_decode.c — unit tests for the oplog entry decoder (source/decode.h) and the op structure (core/op.h).
 *
 * Every real and transcribed oplog entry under tests/vectors/ (JSON lines and raw BSON) is decoded and checked
 * against per-file expectations (counts per kind, particular entries' namespace/_id/form); the transaction
 * fixtures, the $v:2 diff vectors inside update entries (valid ones decode, must-reject ones fail naming the entry
 * and the server's code) and hand-built bad entries cover the error paths. The diff check itself is tested in
 * test_v2diff.c.
 * Paths are relative to the repository root, where the tests run.
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/op.h"
#include "source/decode.h"

#define VEC       "tests/vectors/"
#define MAX_LINES 1024

/* ---------------------------------------------------------------------------------------------------------- */
/* loading */

typedef struct docs {
    bson_t *v[MAX_LINES];
    size_t n;
} docs;

static void docs_free(docs *d)
{
    for (size_t i = 0; i < d->n; i++)
        bson_destroy(d->v[i]);
    d->n = 0;
}

/* Loads every non-empty line of a JSON-lines file with bson_new_from_json. */
static void load_jsonl(const char *path, docs *out)
{
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    out->n = 0;
    ck_assert_msg(f != NULL, "cannot open %s (run from the repository root)", path);
    while ((len = getline(&line, &cap, f)) > 0) {
        if (len <= 1)
            continue;
        bson_error_t e;
        bson_t *b = bson_new_from_json((const uint8_t *)line, len, &e);
        ck_assert_msg(b != NULL, "%s line %zu: %s", path, out->n + 1, e.message);
        ck_assert_uint_lt(out->n, MAX_LINES);
        out->v[out->n++] = b;
    }
    free(line);
    fclose(f);
}

/* Loads every document of a raw BSON file. docs too small for the 872-entry file: use load_raw_cb there. */
typedef void (*doc_cb)(const bson_t *doc, size_t index, void *arg);

static size_t load_raw_cb(const char *path, doc_cb cb, void *arg)
{
    bson_error_t e;
    bson_reader_t *r = bson_reader_new_from_file(path, &e);
    const bson_t *b;
    bool eof = false;
    size_t n = 0;
    ck_assert_msg(r != NULL, "cannot open %s: %s", path, e.message);
    while ((b = bson_reader_read(r, &eof)))
        cb(b, n++, arg);
    ck_assert_msg(eof, "%s: trailing garbage after document %zu", path, n);
    bson_reader_destroy(r);
    return n;
}

static void collect_cb(const bson_t *doc, size_t index, void *arg)
{
    docs *d = arg;
    ck_assert_uint_lt(d->n, MAX_LINES);
    d->v[d->n++] = bson_copy(doc);
}

static void load_raw(const char *path, docs *out)
{
    out->n = 0;
    load_raw_cb(path, collect_cb, out);
}

static bson_t *from_json(const char *json)
{
    bson_error_t e;
    bson_t *b = bson_new_from_json((const uint8_t *)json, -1, &e);
    ck_assert_msg(b != NULL, "bad test JSON %s: %s", json, e.message);
    return b;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* tallies */

typedef struct tally {
    size_t entries, ops, atomic;
    size_t kind[OP_TRUNCATE + 1];
    size_t form[OP_FORM_DIFF + 1];
} tally;

/* Decodes every entry (all must succeed) and counts kinds and forms over all ops. */
static void tally_docs(const docs *d, unsigned flags, tally *t, const char *what)
{
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i < d->n; i++) {
        op_entry e;
        char err[512];
        decode_status st = decode_entry_ex(d->v[i], flags, &e, err, sizeof err);
        ck_assert_msg(st == DECODE_OK, "%s entry %zu: %s (%s)", what, i, decode_status_name(st), err);
        ck_assert_uint_ge(e.n, 1);
        t->entries++;
        t->atomic += e.atomic;
        for (size_t j = 0; j < e.n; j++) {
            const op *o = &e.ops[j];
            ck_assert_uint_eq(o->index, j);
            ck_assert_int_eq(op_pos_cmp(&o->pos, &e.pos), 0);
            t->ops++;
            t->kind[o->kind]++;
            t->form[o->form]++;
            if (o->kind == OP_NOOP)
                ck_assert_ptr_nonnull(o->reason);
            if (o->kind == OP_INSERT || o->kind == OP_UPDATE || o->kind == OP_DELETE) {
                ck_assert_int_ne(o->id.value_type, BSON_TYPE_EOD);
                ck_assert_ptr_nonnull(o->db);
                ck_assert_ptr_nonnull(o->coll);
                ck_assert_ptr_nonnull(o->doc);
            }
            if (o->kind == OP_UPDATE)
                ck_assert_int_ne(o->form, OP_FORM_NONE);
            else
                ck_assert_int_eq(o->form, OP_FORM_NONE);
        }
        op_entry_clear(&e);
    }
}

typedef struct expect {
    const char *file; /* base name under tests/vectors/ (.jsonl) and raw_bson/ (.bson) */
    bool has_raw;
    size_t entries, ops, atomic;
    size_t noop, insert, update, del, create, drop, dropdb;
} expect;

static const expect real_files[] = {
    {"real_v3.0era_2014_noop_create_insert", true, 4, 4, 0, 2, 1, 0, 0, 1, 0, 0},
    {"real_v3.6-4.0_2018_create_createIndexes", true, 2, 2, 0, 1, 0, 0, 0, 1, 0, 0},
    {"real_v3.6_2017_insert_and_user_applyOps", true, 3, 5, 1, 0, 5, 0, 0, 0, 0, 0},
    {"real_v4.2_2020_crud_retryable_sessions", true, 21, 21, 0, 15, 5, 0, 0, 1, 0, 0},
    {"real_v4.2_2020_periodic_noop_createIndexes", true, 16, 16, 0, 15, 0, 0, 0, 1, 0, 0},
    {"real_v4.4-5.0_2021_delete_insert", true, 2, 2, 0, 0, 1, 0, 1, 0, 0, 0},
    {"real_v4.4_2020_abortIndexBuild", true, 2, 2, 0, 2, 0, 0, 0, 0, 0, 0},
    {"real_v4.4_2020_two_phase_index_build", true, 17, 17, 0, 15, 1, 0, 0, 1, 0, 0},
    {"real_v4.4_2021_ddl_stream", false, 22, 22, 0, 14, 0, 0, 0, 4, 3, 1},
    /* time-series buckets live in system.buckets.*: skipped by default */
    {"real_v5.0_2021_timeseries_v2_diff_updates_sample", false, 16, 16, 0, 16, 0, 0, 0, 0, 0, 0},
    {"real_v8.0_2024_linked_vectored_inserts", true, 2, 5, 0, 0, 5, 0, 0, 0, 0, 0},
    {"real_v8.0_2024_vectored_insert_applyOps", true, 1, 2, 0, 0, 2, 0, 0, 0, 0, 0},
    {"real_v8.x_2026_collMod_ttl", true, 2, 2, 0, 1, 1, 0, 0, 0, 0, 0},
    {"real_v8.x_2026_createIndexes_collMod_unique", true, 25, 25, 0, 24, 0, 0, 0, 1, 0, 0},
    {"real_v8.x_2026_retryable_inserts", true, 6, 6, 0, 2, 3, 0, 0, 1, 0, 0},
    {"transcribed_understanding_the_oplog_doc", false, 7, 8, 1, 1, 3, 2, 1, 1, 0, 0},
};

static void check_tally(const tally *t, const expect *x, const char *what)
{
    ck_assert_msg(t->entries == x->entries, "%s: %zu entries, expected %zu", what, t->entries, x->entries);
    ck_assert_msg(t->ops == x->ops, "%s: %zu ops, expected %zu", what, t->ops, x->ops);
    ck_assert_msg(t->atomic == x->atomic, "%s: %zu atomic, expected %zu", what, t->atomic, x->atomic);
    ck_assert_msg(t->kind[OP_NOOP] == x->noop, "%s: %zu noop, expected %zu", what, t->kind[OP_NOOP], x->noop);
    ck_assert_msg(t->kind[OP_INSERT] == x->insert, "%s: %zu insert, expected %zu", what, t->kind[OP_INSERT], x->insert);
    ck_assert_msg(t->kind[OP_UPDATE] == x->update, "%s: %zu update", what, t->kind[OP_UPDATE]);
    ck_assert_msg(t->kind[OP_DELETE] == x->del, "%s: %zu delete", what, t->kind[OP_DELETE]);
    ck_assert_msg(t->kind[OP_CREATE] == x->create, "%s: %zu create", what, t->kind[OP_CREATE]);
    ck_assert_msg(t->kind[OP_DROP] == x->drop, "%s: %zu drop", what, t->kind[OP_DROP]);
    ck_assert_msg(t->kind[OP_DROP_DATABASE] == x->dropdb, "%s: %zu dropDatabase", what, t->kind[OP_DROP_DATABASE]);
    ck_assert_uint_eq(t->kind[OP_RENAME], 0);
    ck_assert_uint_eq(t->kind[OP_TRUNCATE], 0);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* helpers for single entries */

static decode_status decode_json(const char *json, unsigned flags, op_entry *e, char *err, size_t errlen)
{
    bson_t *b = from_json(json);
    decode_status st = decode_entry_ex(b, flags, e, err, errlen);
    bson_destroy(b); /* the decoded entry must not point into b */
    return st;
}

static void assert_oid(const bson_value_t *v, const char *hex)
{
    char got[25];
    ck_assert_int_eq(v->value_type, BSON_TYPE_OID);
    bson_oid_to_string(&v->value.v_oid, got);
    ck_assert_str_eq(got, hex);
}

static void assert_int_id(const bson_value_t *v, int64_t want)
{
    ck_assert_msg(v->value_type == BSON_TYPE_INT32 || v->value_type == BSON_TYPE_INT64 ||
                      v->value_type == BSON_TYPE_DOUBLE,
                  "_id type %d is not numeric", (int)v->value_type);
    int64_t got = v->value_type == BSON_TYPE_INT32   ? v->value.v_int32
                  : v->value_type == BSON_TYPE_INT64 ? v->value.v_int64
                                                     : (int64_t)v->value.v_double;
    ck_assert_int_eq(got, want);
}

static void decode_ok(const bson_t *b, unsigned flags, op_entry *e)
{
    char err[512];
    decode_status st = decode_entry_ex(b, flags, e, err, sizeof err);
    ck_assert_msg(st == DECODE_OK, "%s: %s", decode_status_name(st), err);
}

/* Decoding json must fail with st; the message must contain every NULL-terminated needle. */
static void expect_fail(const char *json, decode_status want, ...)
{
    op_entry e;
    char err[512];
    decode_status st = decode_json(json, 0, &e, err, sizeof err);
    ck_assert_msg(st == want, "%s: got %s, want %s (%s)", json, decode_status_name(st), decode_status_name(want), err);
    ck_assert_ptr_null(e.ops);
    ck_assert_uint_eq(e.n, 0);
    va_list ap;
    va_start(ap, want);
    for (const char *needle; (needle = va_arg(ap, const char *));)
        ck_assert_msg(strstr(err, needle) != NULL, "message '%s' lacks '%s'", err, needle);
    va_end(ap);
}

/* Decodes json (must succeed into one op) and returns the op's kind; the op is copied to *out_kind fields. */
static op_kind one_kind(const char *json, const char **reason)
{
    op_entry e;
    char err[512];
    decode_status st = decode_json(json, 0, &e, err, sizeof err);
    ck_assert_msg(st == DECODE_OK, "%s: %s", json, err);
    ck_assert_uint_eq(e.n, 1);
    op_kind k = e.ops[0].kind;
    if (reason)
        *reason = e.ops[0].reason;
    op_entry_clear(&e);
    return k;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* tests */

START_TEST(test_pos)
{
    op_pos a = {100, 2, 1}, b = {100, 3, -1}, c = {101, 0, 5}, a2 = {100, 2, 7};
    char buf[OP_POS_STRLEN];
    ck_assert_int_lt(op_pos_cmp(&a, &b), 0);
    ck_assert_int_gt(op_pos_cmp(&c, &b), 0);
    ck_assert_int_eq(op_pos_cmp(&a, &a2), 0); /* term ignored */
    op_pos max = {UINT32_MAX, UINT32_MAX, 0};
    ck_assert_str_eq(op_pos_format(&max, buf, sizeof buf), "4294967295:4294967295");
    ck_assert_str_eq(op_pos_format(&a, buf, sizeof buf), "100:2");
    ck_assert_str_eq(op_kind_name(OP_DROP_DATABASE), "dropDatabase");
    ck_assert_str_eq(op_form_name(OP_FORM_DIFF), "diff");
}
END_TEST

START_TEST(test_real_files_counts)
{
    for (size_t i = 0; i < sizeof real_files / sizeof real_files[0]; i++) {
        const expect *x = &real_files[i];
        char path[256];
        docs d;
        tally t;
        snprintf(path, sizeof path, VEC "%s.jsonl", x->file);
        load_jsonl(path, &d);
        tally_docs(&d, 0, &t, path);
        check_tally(&t, x, path);
        docs_free(&d);
        if (!x->has_raw)
            continue;
        snprintf(path, sizeof path, VEC "raw_bson/%s.bson", x->file);
        load_raw(path, &d);
        tally_docs(&d, 0, &t, path);
        check_tally(&t, x, path);
        docs_free(&d);
    }
}
END_TEST

/* The raw BSON and the JSON lines of the same dump decode identically, op by op. */
START_TEST(test_raw_matches_jsonl)
{
    for (size_t i = 0; i < sizeof real_files / sizeof real_files[0]; i++) {
        const expect *x = &real_files[i];
        if (!x->has_raw)
            continue;
        char pj[256], pr[256];
        docs dj, dr;
        snprintf(pj, sizeof pj, VEC "%s.jsonl", x->file);
        snprintf(pr, sizeof pr, VEC "raw_bson/%s.bson", x->file);
        load_jsonl(pj, &dj);
        load_raw(pr, &dr);
        ck_assert_uint_eq(dj.n, dr.n);
        for (size_t k = 0; k < dj.n; k++) {
            op_entry a, b;
            decode_ok(dj.v[k], 0, &a);
            decode_ok(dr.v[k], 0, &b);
            ck_assert_int_eq(op_pos_cmp(&a.pos, &b.pos), 0);
            ck_assert_int_eq(a.pos.term, b.pos.term);
            ck_assert_uint_eq(a.n, b.n);
            for (size_t j = 0; j < a.n; j++) {
                ck_assert_int_eq(a.ops[j].kind, b.ops[j].kind);
                ck_assert_int_eq(a.ops[j].form, b.ops[j].form);
                ck_assert_uint_eq(a.ops[j].doc_len, b.ops[j].doc_len);
                if (a.ops[j].doc)
                    ck_assert_int_eq(memcmp(a.ops[j].doc, b.ops[j].doc, a.ops[j].doc_len), 0);
            }
            op_entry_clear(&a);
            op_entry_clear(&b);
        }
        docs_free(&dj);
        docs_free(&dr);
    }
}
END_TEST

START_TEST(test_real_entries_fields)
{
    docs d;
    op_entry e;

    /* ≤3.0: no t (term -1), random h, int32 v */
    load_jsonl(VEC "real_v3.0era_2014_noop_create_insert.jsonl", &d);
    decode_ok(d.v[3], 0, &e);
    ck_assert_uint_eq(e.pos.secs, 1416869724);
    ck_assert_uint_eq(e.pos.inc, 2);
    ck_assert_int_eq(e.pos.term, -1);
    ck_assert_int_eq(e.ops[0].kind, OP_INSERT);
    ck_assert_str_eq(e.ops[0].db, "test");
    ck_assert_str_eq(e.ops[0].coll, "data");
    assert_oid(&e.ops[0].id, "5473b75c8e32da600b686ed7");
    ck_assert_ptr_null(e.ops[0].key);
    op_entry_clear(&e);
    decode_ok(d.v[2], 0, &e);
    ck_assert_int_eq(e.ops[0].kind, OP_CREATE);
    ck_assert_str_eq(e.ops[0].coll, "data");
    ck_assert_ptr_nonnull(e.ops[0].doc);
    op_entry_clear(&e);
    decode_ok(d.v[0], 0, &e);
    ck_assert_int_eq(e.ops[0].kind, OP_NOOP);
    op_entry_clear(&e);
    docs_free(&d);

    /* 3.6 user applyOps: inner ops carry their own ts/h/v, ignored; outer pos shared; atomic (no lsid) */
    load_jsonl(VEC "real_v3.6_2017_insert_and_user_applyOps.jsonl", &d);
    decode_ok(d.v[1], 0, &e);
    ck_assert_uint_eq(e.n, 3);
    ck_assert(e.atomic);
    ck_assert_uint_eq(e.pos.secs, 1511064038);
    ck_assert_uint_eq(e.pos.inc, 29);
    static const char *const ids[] = {"5a1101e6a8feb0cc944981c5", "5a1101e6a8feb0cc944981c9",
                                      "5a1101e6a8feb0cc944981ca"};
    for (size_t i = 0; i < 3; i++) {
        ck_assert_int_eq(e.ops[i].kind, OP_INSERT);
        ck_assert_uint_eq(e.ops[i].index, i);
        ck_assert_uint_eq(e.ops[i].pos.inc, 29);
        ck_assert_str_eq(e.ops[i].db, "db1");
        ck_assert_str_eq(e.ops[i].coll, "c1");
        assert_oid(&e.ops[i].id, ids[i]);
    }
    op_entry_clear(&e);
    docs_free(&d);

    /* 4.2 retryable insert (lsid/txnNumber/stmtId) is a plain insert; config.* and system.sessions are skipped */
    load_jsonl(VEC "real_v4.2_2020_crud_retryable_sessions.jsonl", &d);
    decode_ok(d.v[4], 0, &e);
    ck_assert_int_eq(e.ops[0].kind, OP_INSERT);
    ck_assert(!e.atomic);
    ck_assert_int_eq(e.pos.term, 1);
    ck_assert_str_eq(e.ops[0].coll, "c1");
    op_entry_clear(&e);
    decode_ok(d.v[1], 0, &e); /* config.cache.test */
    ck_assert_int_eq(e.ops[0].kind, OP_NOOP);
    ck_assert_ptr_nonnull(strstr(e.ops[0].reason, "internal database"));
    op_entry_clear(&e);
    docs_free(&d);

    /* 4.4/5.0 with int32 t and v (changed by the test author) */
    load_jsonl(VEC "real_v4.4-5.0_2021_delete_insert.jsonl", &d);
    decode_ok(d.v[0], 0, &e);
    ck_assert_int_eq(e.pos.term, 182);
    ck_assert_int_eq(e.ops[0].kind, OP_DELETE);
    assert_oid(&e.ops[0].id, "60350a6f415a2fc63f3195a9");
    ck_assert_ptr_eq(e.ops[0].key, e.ops[0].doc);
    op_entry_clear(&e);
    docs_free(&d);

    /* 4.4 DDL stream: drop with o2 numRecords, dropDatabase */
    load_jsonl(VEC "real_v4.4_2021_ddl_stream.jsonl", &d);
    decode_ok(d.v[3], 0, &e);
    ck_assert_int_eq(e.ops[0].kind, OP_DROP);
    ck_assert_str_eq(e.ops[0].db, "test2");
    ck_assert_str_eq(e.ops[0].coll, "foo");
    op_entry_clear(&e);
    decode_ok(d.v[14], 0, &e);
    ck_assert_int_eq(e.ops[0].kind, OP_DROP_DATABASE);
    ck_assert_str_eq(e.ops[0].db, "test2");
    ck_assert_ptr_null(e.ops[0].coll);
    op_entry_clear(&e);
    decode_ok(d.v[18], 0, &e);
    ck_assert_str_eq(e.ops[0].coll, "bar");
    op_entry_clear(&e);
    docs_free(&d);

    /* 8.0 vectored inserts: lsid + multiOpType is not a transaction: plain, non-atomic inserts with o2 keys */
    load_jsonl(VEC "real_v8.0_2024_linked_vectored_inserts.jsonl", &d);
    static const int64_t vids[2][3] = {{300, 400, 500}, {600, 700, 0}};
    for (size_t k = 0; k < 2; k++) {
        decode_ok(d.v[k], 0, &e);
        ck_assert(!e.atomic);
        ck_assert_uint_eq(e.n, k == 0 ? 3 : 2);
        ck_assert_uint_eq(e.pos.secs, 1719861048);
        ck_assert_uint_eq(e.pos.inc, 2 + k);
        for (size_t i = 0; i < e.n; i++) {
            ck_assert_int_eq(e.ops[i].kind, OP_INSERT);
            ck_assert_str_eq(e.ops[i].db, "mongodump_test_db");
            ck_assert_str_eq(e.ops[i].coll, "coll1");
            assert_int_id(&e.ops[i].id, vids[k][i]);
            ck_assert_ptr_nonnull(e.ops[i].key); /* o2 {_id} */
        }
        op_entry_clear(&e);
    }
    docs_free(&d);

    /* transcribed 6.x/7.0: $v:2 update, a single-entry transaction, a retryable update with a document _id */
    load_jsonl(VEC "transcribed_understanding_the_oplog_doc.jsonl", &d);
    decode_ok(d.v[1], 0, &e);
    ck_assert_int_eq(e.ops[0].kind, OP_UPDATE);
    ck_assert_int_eq(e.ops[0].form, OP_FORM_DIFF);
    ck_assert_str_eq(e.ops[0].coll, "foo");
    assert_oid(&e.ops[0].id, "64ce90c1cbcfddc143753651");
    op_entry_clear(&e);
    decode_ok(d.v[2], 0, &e);
    ck_assert_int_eq(e.ops[0].id.value_type, BSON_TYPE_DOCUMENT);
    ck_assert_str_eq(e.ops[0].db, "mongosync_reserved_for_internal_use");
    op_entry_clear(&e);
    decode_ok(d.v[3], 0, &e);
    ck_assert(e.atomic);
    ck_assert_uint_eq(e.n, 2);
    ck_assert_uint_eq(e.pos.secs, 1690828162);
    ck_assert_uint_eq(e.pos.inc, 784);
    ck_assert_int_eq(e.ops[0].kind, OP_DELETE);
    ck_assert_int_eq(e.ops[1].kind, OP_INSERT);
    ck_assert_str_eq(e.ops[1].coll, "apple");
    assert_int_id(&e.ops[0].id, 19);
    assert_int_id(&e.ops[1].id, 19);
    op_entry_clear(&e);
    docs_free(&d);
}
END_TEST

/* Time-series updates: skipped by default (system.buckets.*), all 872 real $v:2 entries decode as validated diffs
 * with DECODE_KEEP_SYSTEM. */
typedef struct ts_state {
    size_t ok, noop;
} ts_state;

static void ts_cb(const bson_t *doc, size_t index, void *arg)
{
    ts_state *s = arg;
    op_entry e;
    decode_ok(doc, DECODE_KEEP_SYSTEM, &e);
    ck_assert_uint_eq(e.n, 1);
    ck_assert_int_eq(e.ops[0].kind, OP_UPDATE);
    ck_assert_int_eq(e.ops[0].form, OP_FORM_DIFF);
    ck_assert_str_eq(e.ops[0].db, "timeseries_test");
    ck_assert_str_eq(e.ops[0].coll, "foo_ts"); /* the collection's, not its buckets' */
    ck_assert(e.ops[0].bucket);
    ck_assert_int_eq(e.ops[0].id.value_type, BSON_TYPE_OID);
    op_entry_clear(&e);
    s->ok++;
    decode_ok(doc, 0, &e);
    ck_assert_int_eq(e.ops[0].kind, OP_NOOP);
    ck_assert_str_eq(e.ops[0].reason, "system collection");
    op_entry_clear(&e);
    s->noop++;
}

START_TEST(test_timeseries_diffs)
{
    ts_state s = {0, 0};
    size_t n = load_raw_cb(VEC "raw_bson/real_v5.0_2021_timeseries_v2_diff_updates_all.bson", ts_cb, &s);
    ck_assert_uint_eq(n, 872);
    ck_assert_uint_eq(s.ok, 872);
    ck_assert_uint_eq(s.noop, 872);

    docs d;
    tally t;
    load_jsonl(VEC "real_v5.0_2021_timeseries_v2_diff_updates_sample.jsonl", &d);
    tally_docs(&d, DECODE_KEEP_SYSTEM, &t, "timeseries sample");
    ck_assert_uint_eq(t.kind[OP_UPDATE], 16);
    ck_assert_uint_eq(t.form[OP_FORM_DIFF], 16);
    op_entry e;
    decode_ok(d.v[0], DECODE_KEEP_SYSTEM, &e);
    assert_oid(&e.ops[0].id, "60c7df2bf4549c58ea9377ec");
    ck_assert_uint_eq(e.pos.inc, 72);
    op_entry_clear(&e);
    docs_free(&d);
}
END_TEST

/* ts_buckets_pre.bson holds bucket documents, not oplog entries: every one must be rejected (no ts). */
START_TEST(test_non_oplog_bson_rejected)
{
    docs d;
    load_raw(VEC "raw_bson/ts_buckets_pre.bson", &d);
    ck_assert_uint_eq(d.n, 10);
    for (size_t i = 0; i < d.n; i++) {
        op_entry e;
        char err[512];
        ck_assert_int_eq(decode_entry(d.v[i], &e, err, sizeof err), DECODE_MALFORMED);
        ck_assert_ptr_nonnull(strstr(err, "ts"));
    }
    docs_free(&d);
}
END_TEST

/* o-only lines ($v:2 update documents) from Meteor and MongoShake: all classify as validated diffs. */
START_TEST(test_transcribed_o_fields)
{
    static const char *const files[] = {VEC "transcribed_meteor_v2_o_fields.jsonl",
                                        VEC "transcribed_mongoshake_v2_diff.jsonl"};
    size_t total = 0;
    for (size_t f = 0; f < 2; f++) {
        docs d;
        load_jsonl(files[f], &d);
        for (size_t i = 0; i < d.n; i++) {
            bson_iter_t it;
            op_entry e;
            bson_t *entry;
            if (bson_iter_init_find(&it, d.v[i], "op")) {
                entry = bson_copy(d.v[i]);
            } else {
                entry = BCON_NEW("ts", BCON_TIMESTAMP(1, (uint32_t)i + 1), "op", "u", "ns", "t.c", "o",
                                 BCON_DOCUMENT(d.v[i]), "o2", "{", "_id", BCON_INT32(7), "}");
            }
            decode_ok(entry, 0, &e);
            ck_assert_int_eq(e.ops[0].kind, OP_UPDATE);
            ck_assert_int_eq(e.ops[0].form, OP_FORM_DIFF);
            ck_assert_uint_eq(e.ops[0].doc_len,
                              bson_iter_init_find(&it, entry, "o") ? bson_iter_value(&it)->value.v_doc.data_len : 0);
            op_entry_clear(&e);
            bson_destroy(entry);
            total++;
        }
        docs_free(&d);
    }
    ck_assert_uint_eq(total, 9 + 2);
}
END_TEST

/* The mongo-tools transaction fixtures. */
START_TEST(test_txn_fixtures)
{
    bson_error_t berr;
    bson_t fixtures;
    char *text = NULL;
    size_t cap = 0;
    FILE *f = fopen(VEC "fixture_txn_scenarios_mongo-tools.json", "r");
    ck_assert_ptr_nonnull(f);
    ssize_t len = getdelim(&text, &cap, '\0', f);
    fclose(f);
    ck_assert_int_gt(len, 0);
    /* libbson 1.23 cannot parse an ISO-8601 offset written with a colon ("-05:00", one `wall` in the multiOpType
     * scenario); rewrite it as "-0500", which it accepts. The decoder never reads `wall`. */
    for (char *p = text; (p = strstr(p, "-05:00\"")) != NULL;)
        memmove(p + 3, p + 4, strlen(p + 4) + 1);
    len = (ssize_t)strlen(text);
    ck_assert_msg(bson_init_from_json(&fixtures, text, len, &berr), "fixture: %s", berr.message);
    free(text);

    bson_iter_t sc;
    size_t scenarios = 0, unsupported = 0, atomic_groups = 0, plain = 0;
    ck_assert(bson_iter_init(&sc, &fixtures));
    while (bson_iter_next(&sc)) {
        const char *name = bson_iter_key(&sc);
        bson_iter_t body, ops;
        const char *scen_ns = NULL;
        scenarios++;
        ck_assert(bson_iter_recurse(&sc, &body));
        ck_assert(bson_iter_find(&body, "ops") && bson_iter_recurse(&body, &ops));
        ck_assert(bson_iter_recurse(&sc, &body));
        if (bson_iter_find(&body, "ns"))
            scen_ns = bson_iter_utf8(&body, NULL);
        while (bson_iter_next(&ops)) {
            const uint8_t *data;
            uint32_t dlen;
            bson_t entry, *fixed = NULL;
            op_entry e;
            char err[512];
            bson_iter_document(&ops, &dlen, &data);
            ck_assert(bson_init_static(&entry, data, dlen));
            bson_iter_t probe;
            bool partial = false, prepare = false, txn_cmd = false;
            if (bson_iter_init_find(&probe, &entry, "o") && bson_iter_recurse(&probe, &probe)) {
                while (bson_iter_next(&probe)) {
                    const char *k = bson_iter_key(&probe);
                    partial |= strcmp(k, "partialTxn") == 0;
                    prepare |= strcmp(k, "prepare") == 0;
                    txn_cmd |= strcmp(k, "commitTransaction") == 0 || strcmp(k, "abortTransaction") == 0;
                }
            }
            if (!bson_iter_init_find(&probe, &entry, "ns")) {
                /* The multiOpType scenario's entry has no ns (the fixture keeps it at scenario level): a decoder
                 * must call that malformed; with the scenario's ns restored it decodes. */
                ck_assert_int_eq(decode_entry(&entry, &e, err, sizeof err), DECODE_MALFORMED);
                ck_assert_ptr_nonnull(strstr(err, "missing ns"));
                ck_assert_ptr_nonnull(scen_ns);
                fixed = bson_copy(&entry);
                BSON_APPEND_UTF8(fixed, "ns", scen_ns);
            }
            decode_status st = decode_entry(fixed ? fixed : &entry, &e, err, sizeof err);
            if (partial || prepare || txn_cmd) {
                ck_assert_msg(st == DECODE_UNSUPPORTED, "%s: %s", name, decode_status_name(st));
                ck_assert_ptr_nonnull(strstr(err, "ts 1515616500:"));
                ck_assert_ptr_nonnull(strstr(err, "admin.$cmd"));
                unsupported++;
            } else if (strcmp(name, "large, unprepared") == 0) {
                /* the last entry of a partialTxn chain (count:6): applying it alone would lose 4 inserts */
                ck_assert_int_eq(st, DECODE_UNSUPPORTED);
                ck_assert_ptr_nonnull(strstr(err, "count"));
                unsupported++;
            } else {
                ck_assert_msg(st == DECODE_OK, "%s: %s", name, err);
                if (strcmp(name, "small, unprepared") == 0) {
                    ck_assert(e.atomic);
                    ck_assert_uint_eq(e.n, 3);
                    ck_assert_int_eq(e.ops[0].kind, OP_INSERT);
                    ck_assert_int_eq(e.ops[1].kind, OP_UPDATE);
                    ck_assert_int_eq(e.ops[1].form, OP_FORM_MODIFIER);
                    ck_assert_int_eq(e.ops[2].kind, OP_DELETE);
                    ck_assert_str_eq(e.ops[2].coll, "c");
                    assert_int_id(&e.ops[0].id, 0);
                    assert_int_id(&e.ops[1].id, 0);
                    assert_int_id(&e.ops[2].id, 1);
                    atomic_groups++;
                } else if (strcmp(name, "applyops not transaction") == 0) {
                    ck_assert(e.atomic); /* user applyOps: applied all-or-nothing by the server */
                    ck_assert_uint_eq(e.n, 2);
                    ck_assert_int_eq(e.ops[1].form, OP_FORM_MODIFIER);
                } else if (strcmp(name, "not transaction with multiOpType") == 0) {
                    ck_assert(!e.atomic);
                    ck_assert_uint_eq(e.n, 2);
                    ck_assert_int_eq(e.ops[0].kind, OP_INSERT);
                    ck_assert_int_eq(e.ops[1].kind, OP_INSERT);
                    assert_int_id(&e.ops[0].id, 4);
                    assert_int_id(&e.ops[1].id, 5);
                    plain++;
                } else if (strcmp(name, "not transaction with lsid and txnNumber and command") == 0) {
                    ck_assert_int_eq(e.ops[0].kind, OP_NOOP); /* createIndexes */
                } else {
                    ck_assert_uint_eq(e.n, 1);
                    ck_assert_int_eq(e.ops[0].kind, OP_INSERT);
                    ck_assert(!e.atomic);
                    plain++;
                }
                op_entry_clear(&e);
            }
            if (fixed)
                bson_destroy(fixed);
        }
    }
    ck_assert_uint_eq(scenarios, 12);
    /* partial+partial+count, prepare+commit, prepare+abort, 2 partial+prepare+commit, 2 partial+prepare+abort */
    ck_assert_uint_eq(unsupported, 3 + 2 + 2 + 4 + 4);
    ck_assert_uint_eq(atomic_groups, 1);
    ck_assert_uint_eq(plain, 4);
    bson_destroy(&fixtures);
}
END_TEST

static bson_t *hex_to_bson(const char *hex)
{
    size_t n = strlen(hex) / 2;
    uint8_t *buf = malloc(n);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        ck_assert(sscanf(hex + 2 * i, "%2x", &v) == 1);
        buf[i] = (uint8_t)v;
    }
    bson_t *b = bson_new_from_data(buf, n);
    free(buf);
    ck_assert_ptr_nonnull(b);
    return b;
}

/* Every valid $v:2 vector, inside a full update entry, decodes as a diff update (the diff check itself:
 * test_v2diff.c). The raw hex keeps the exact types. */
START_TEST(test_diff_pre_post_decode)
{
    docs d;
    size_t checked = 0;
    load_jsonl(VEC "diff_v2_pre_post.jsonl", &d);
    for (size_t i = 0; i < d.n; i++) {
        bson_iter_t it;
        if (!bson_iter_init_find(&it, d.v[i], "o_bson_hex"))
            continue; /* the _comment line */
        bson_t *o = hex_to_bson(bson_iter_utf8(&it, NULL));
        bson_t *entry = BCON_NEW("o", BCON_DOCUMENT(o), "o2", "{", "_id", BCON_INT32(1), "}", "ns", "db.a.b", "op", "u",
                                 "v", BCON_INT64(2), "ts", BCON_TIMESTAMP(5, (uint32_t)i));
        op_entry e;
        decode_ok(entry, 0, &e);
        ck_assert_int_eq(e.ops[0].kind, OP_UPDATE);
        ck_assert_int_eq(e.ops[0].form, OP_FORM_DIFF);
        ck_assert_str_eq(e.ops[0].db, "db");
        ck_assert_str_eq(e.ops[0].coll, "a.b");
        op_entry_clear(&e);
        bson_destroy(entry);
        bson_destroy(o);
        checked++;
    }
    ck_assert_uint_eq(checked, 37);
    docs_free(&d);
}
END_TEST

/* Every must-reject $v:2 vector, inside an update entry: DECODE_MALFORMED naming ts, ns, _id and the server's code. */
START_TEST(test_diff_must_reject_decode)
{
    FILE *f = fopen(VEC "diff_v2_must_reject.jsonl", "r");
    char *line = NULL;
    size_t cap = 0, checked = 0;
    ssize_t len;
    ck_assert_ptr_nonnull(f);
    while ((len = getline(&line, &cap, f)) > 0) {
        bson_error_t berr;
        bson_t *rec = bson_new_from_json((const uint8_t *)line, len, &berr);
        bson_iter_t it;
        ck_assert_msg(rec != NULL, "%s", berr.message);
        if (!bson_iter_init_find(&it, rec, "diff_bson_hex")) {
            bson_destroy(rec);
            continue;
        }
        bson_t *diff = hex_to_bson(bson_iter_utf8(&it, NULL));
        ck_assert(bson_iter_init_find(&it, rec, "server_error_code"));
        int32_t want = (int32_t)bson_iter_as_int64(&it);
        char err[512], code_str[32];
        snprintf(code_str, sizeof code_str, "[%d]", want);
        bson_t *entry =
            BCON_NEW("op", "u", "ns", "shop.orders", "o", "{", "$v", BCON_INT32(2), "diff", BCON_DOCUMENT(diff), "}",
                     "o2", "{", "_id", BCON_INT32(42), "}", "ts", BCON_TIMESTAMP(77, 3), "t", BCON_INT64(1));
        op_entry e;
        ck_assert_int_eq(decode_entry(entry, &e, err, sizeof err), DECODE_MALFORMED);
        ck_assert_ptr_null(e.ops);
        ck_assert_msg(strstr(err, code_str) != NULL, "'%s' lacks %s", err, code_str);
        ck_assert_ptr_nonnull(strstr(err, "ts 77:3"));
        ck_assert_ptr_nonnull(strstr(err, "shop.orders"));
        ck_assert_ptr_nonnull(strstr(err, "_id 42"));
        ck_assert_ptr_nonnull(strstr(err, "invalid $v:2 diff"));
        bson_destroy(entry);
        bson_destroy(diff);
        bson_destroy(rec);
        checked++;
    }
    free(line);
    fclose(f);
    ck_assert_uint_eq(checked, 12);
}
END_TEST

START_TEST(test_bad_entries)
{
    /* missing / ill-typed required fields */
    expect_fail("{\"op\": \"i\", \"ns\": \"a.b\", \"o\": {\"_id\": 1}}", DECODE_MALFORMED, "ts ?", "ts", NULL);
    expect_fail("{\"ts\": {\"$numberLong\": \"5\"}, \"op\": \"i\", \"ns\": \"a.b\", \"o\": {\"_id\": 1}}",
                DECODE_MALFORMED, "Timestamp", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 1}}, \"op\": 5, \"ns\": \"a.b\", \"o\": {\"_id\": 1}}",
                DECODE_MALFORMED, "ts 9:1", "'op'", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 1}}, \"op\": \"i\", \"o\": {\"_id\": 1}}",
                DECODE_MALFORMED, "missing ns", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 1}}, \"op\": \"i\", \"ns\": \"a.b\"}", DECODE_MALFORMED,
                "missing o", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 1}}, \"op\": \"i\", \"ns\": \"a.b\", \"o\": [1]}",
                DECODE_MALFORMED, "'o'", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 1}}, \"t\": \"x\", \"op\": \"i\", \"ns\": \"a.b\", "
                "\"o\": {\"_id\": 1}}",
                DECODE_MALFORMED, "'t'", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 1}}, \"v\": \"2\", \"op\": \"i\", \"ns\": \"a.b\", "
                "\"o\": {\"_id\": 1}}",
                DECODE_MALFORMED, "'v'", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 1}}, \"v\": 1, \"op\": \"i\", \"ns\": \"a.b\", "
                "\"o\": {\"_id\": 1}}",
                DECODE_UNSUPPORTED, "'v'", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 1}}, \"op\": \"i\", \"ns\": \"nodot\", "
                "\"o\": {\"_id\": 1}}",
                DECODE_MALFORMED, "db.collection", NULL);
    /* data ops without their _id */
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 2}}, \"op\": \"i\", \"ns\": \"a.b\", \"o\": {\"x\": 1}}",
                DECODE_MALFORMED, "ts 9:2 op 'i' ns 'a.b'", "o._id", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 3}}, \"op\": \"u\", \"ns\": \"a.b\", "
                "\"o\": {\"$set\": {\"x\": 1}}}",
                DECODE_MALFORMED, "without o2", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 3}}, \"op\": \"u\", \"ns\": \"a.b\", "
                "\"o\": {\"$set\": {\"x\": 1}}, \"o2\": {\"k\": 1}}",
                DECODE_MALFORMED, "o2._id", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 4}}, \"op\": \"d\", \"ns\": \"a.b\", \"o\": {\"k\": 1}}",
                DECODE_MALFORMED, "o._id", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 3}}, \"op\": \"u\", \"ns\": \"a.b\", "
                "\"o\": {}, \"o2\": {\"_id\": 1}}",
                DECODE_MALFORMED, "empty", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 3}}, \"op\": \"u\", \"ns\": \"a.b\", "
                "\"o\": {\"$v\": 2}, \"o2\": {\"_id\": 1}}",
                DECODE_MALFORMED, "without a diff", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 3}}, \"op\": \"u\", \"ns\": \"a.b\", "
                "\"o\": {\"$set\": {\"x\": 1}, \"y\": 2}, \"o2\": {\"_id\": \"k\"}}",
                DECODE_MALFORMED, "_id \"k\"", "mixes", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 5}}, \"op\": \"c\", \"ns\": \"a.$cmd\", "
                "\"o\": {\"drop\": 5}}",
                DECODE_MALFORMED, "drop without a collection", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 5}}, \"op\": \"c\", \"ns\": \"admin.$cmd\", "
                "\"o\": {\"applyOps\": {\"x\": 1}}}",
                DECODE_MALFORMED, "not an array", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 5}}, \"op\": \"c\", \"ns\": \"admin.$cmd\", "
                "\"o\": {\"applyOps\": [{\"op\": \"i\", \"ns\": \"a.b\", \"o\": {\"_id\": 1}}, "
                "{\"op\": \"i\", \"ns\": \"a.b\", \"o\": {\"x\": 1}}]}}",
                DECODE_MALFORMED, "applyOps[1] op 'i' ns 'a.b'", "o._id", NULL);

    /* unknown op codes and commands, transactions: never silently skipped */
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 6}}, \"op\": \"x\", \"ns\": \"a.b\", \"o\": {}}",
                DECODE_UNSUPPORTED, "ts 9:6 op 'x' ns 'a.b'", "unknown op code", NULL);
    static const char *const codes[] = {"ci", "cu", "cd", "km", ""};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        char json[256];
        snprintf(json, sizeof json,
                 "{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 7}}, \"op\": \"%s\", \"ns\": \"a.b\", \"o\": {}}",
                 codes[i]);
        expect_fail(json, DECODE_UNSUPPORTED, "unknown op code", NULL);
    }
    /* even on a skipped namespace or with fromMigrate, an unknown op code stops */
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 7}}, \"op\": \"ci\", \"ns\": \"config.x\", "
                "\"fromMigrate\": true, \"o\": {}}",
                DECODE_UNSUPPORTED, "unknown op code", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 8}}, \"op\": \"c\", \"ns\": \"shop.$cmd\", "
                "\"o\": {\"frobnicate\": \"x\"}}",
                DECODE_UNSUPPORTED, "unknown command 'frobnicate'", NULL);
    /* importCollection attaches data files whose documents are not in the oplog: stop, never skip it silently */
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 9}}, \"op\": \"c\", \"ns\": \"shop.$cmd\", "
                "\"o\": {\"importCollection\": \"orders\"}}",
                DECODE_UNSUPPORTED, "importCollection", "--reimport", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 9}}, \"op\": \"c\", \"ns\": \"admin.$cmd\", "
                "\"o\": {\"commitTransaction\": 1, \"commitTimestamp\": {\"$timestamp\": {\"t\": 9, \"i\": 8}}}}",
                DECODE_UNSUPPORTED, "commitTransaction", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 9}}, \"op\": \"c\", \"ns\": \"admin.$cmd\", "
                "\"o\": {\"abortTransaction\": 1}}",
                DECODE_UNSUPPORTED, "abortTransaction", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 10}}, \"op\": \"c\", \"ns\": \"admin.$cmd\", "
                "\"o\": {\"applyOps\": [{\"op\": \"c\", \"ns\": \"admin.$cmd\", \"o\": {\"applyOps\": []}}]}}",
                DECODE_UNSUPPORTED, "nested applyOps", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 11}}, \"op\": \"c\", \"ns\": \"admin.$cmd\", "
                "\"o\": {\"applyOps\": [], \"partialTxn\": true}}",
                DECODE_UNSUPPORTED, "partialTxn", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 11}}, \"op\": \"c\", \"ns\": \"admin.$cmd\", "
                "\"o\": {\"applyOps\": [], \"prepare\": true}}",
                DECODE_UNSUPPORTED, "prepare", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 12}}, \"op\": \"u\", \"ns\": \"a.b\", "
                "\"o\": {\"$v\": 3, \"x\": 1}, \"o2\": {\"_id\": 1}}",
                DECODE_UNSUPPORTED, "$v", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 12}}, \"op\": \"u\", \"ns\": \"a.b\", "
                "\"o\": {\"$inc\": {\"x\": 1}}, \"o2\": {\"_id\": 1}}",
                DECODE_UNSUPPORTED, "$inc", NULL);
    expect_fail("{\"ts\": {\"$timestamp\": {\"t\": 9, \"i\": 13}}, \"op\": \"c\", \"ns\": \"admin.$cmd\", "
                "\"o\": {\"renameCollection\": \"shop.a\", \"to\": \"admin.b\"}}",
                DECODE_UNSUPPORTED, "skipped", NULL);
}
END_TEST

START_TEST(test_kinds_and_skips)
{
    const char *why = NULL;
#define TS "\"ts\": {\"$timestamp\": {\"t\": 50, \"i\": 1}}, "
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"n\", \"ns\": \"\", \"o\": {\"msg\": \"new primary\"}}", &why), OP_NOOP);
    /* an n entry with lsid and an image in o is still never data */
    ck_assert_int_eq(
        one_kind("{" TS "\"op\": \"n\", \"ns\": \"a.b\", \"lsid\": {\"id\": 1}, \"o\": {\"_id\": 1}}", NULL), OP_NOOP);
    ck_assert_int_eq(
        one_kind("{" TS "\"op\": \"i\", \"ns\": \"a.b\", \"fromMigrate\": true, \"o\": {\"_id\": 1}}", &why), OP_NOOP);
    ck_assert_str_eq(why, "fromMigrate");
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"i\", \"ns\": \"admin.users\", \"o\": {\"_id\": 1}}", &why), OP_NOOP);
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"i\", \"ns\": \"local.x\", \"o\": {\"_id\": 1}}", NULL), OP_NOOP);
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"d\", \"ns\": \"config.x\", \"o\": {\"_id\": 1}}", NULL), OP_NOOP);
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"i\", \"ns\": \"a.system.views\", \"o\": {\"_id\": \"a.v\"}}", &why),
                     OP_NOOP);
    ck_assert_str_eq(why, "system collection");
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"i\", \"ns\": \"a.system.indexes\", \"o\": {\"key\": {\"x\": 1}, "
                              "\"name\": \"x_1\", \"ns\": \"a.b\"}}",
                              NULL),
                     OP_NOOP);
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"c\", \"ns\": \"a.$cmd\", \"o\": {\"emptycapped\": \"log\"}}", NULL),
                     OP_TRUNCATE);
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"c\", \"ns\": \"a.$cmd\", \"o\": {\"convertToCapped\": \"log\", "
                              "\"size\": 100}}",
                              NULL),
                     OP_NOOP);
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"c\", \"ns\": \"a.$cmd\", \"o\": {\"create\": \"v\", \"viewOn\": "
                              "\"b\", \"pipeline\": []}}",
                              &why),
                     OP_NOOP);
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"c\", \"ns\": \"a.$cmd\", \"o\": {\"create\": \"system.views\"}}", NULL),
                     OP_NOOP);
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"c\", \"ns\": \"config.$cmd\", \"o\": {\"somethingNew\": 1}}", NULL),
                     OP_NOOP);
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"c\", \"ns\": \"a.$cmd\", \"o\": {\"dbCheck\": \"b\"}}", NULL), OP_NOOP);
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"c\", \"ns\": \"a.$cmd\", \"o\": {\"deleteIndexes\": \"b\"}}", NULL),
                     OP_NOOP);
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"c\", \"ns\": \"admin.$cmd\", \"o\": {\"dropDatabase\": 1}}", NULL),
                     OP_NOOP);
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"c\", \"ns\": \"admin.$cmd\", \"o\": {\"renameCollection\": "
                              "\"admin.a\", \"to\": \"admin.b\"}}",
                              NULL),
                     OP_NOOP);

    /* rename (on admin.$cmd, cross-database, dropTarget as UUID / bool / false) */
    op_entry e;
    char err[256];
    ck_assert_int_eq(decode_json("{" TS "\"op\": \"c\", \"ns\": \"admin.$cmd\", \"o\": {\"renameCollection\": "
                                 "\"shop.a.tmp\", \"to\": \"archive.a.b\", \"stayTemp\": false, \"dropTarget\": "
                                 "{\"$binary\": {\"base64\": \"ji4QhMx+TAyyn4Lud2x02A==\", \"subType\": \"04\"}}}}",
                                 0, &e, err, sizeof err),
                     DECODE_OK);
    ck_assert_int_eq(e.ops[0].kind, OP_RENAME);
    ck_assert_str_eq(e.ops[0].db, "shop");
    ck_assert_str_eq(e.ops[0].coll, "a.tmp");
    ck_assert_str_eq(e.ops[0].to_db, "archive");
    ck_assert_str_eq(e.ops[0].to_coll, "a.b");
    ck_assert(e.ops[0].drop_target);
    op_entry_clear(&e);
    ck_assert_int_eq(decode_json("{" TS "\"op\": \"c\", \"ns\": \"shop.$cmd\", \"o\": {\"renameCollection\": "
                                 "\"shop.a\", \"to\": \"shop.b\", \"dropTarget\": false}}",
                                 0, &e, err, sizeof err),
                     DECODE_OK);
    ck_assert_int_eq(e.ops[0].kind, OP_RENAME);
    ck_assert(!e.ops[0].drop_target);
    op_entry_clear(&e);

    /* update forms; field order does not matter; dotted collection names; upsert flag */
    ck_assert_int_eq(decode_json("{\"o2\": {\"_id\": 3, \"sk\": 1}, \"o\": {\"$set\": {\"a.0\": 1}, \"$unset\": "
                                 "{\"b\": true}}, \"ns\": \"db.a.b\", \"op\": \"u\", \"v\": {\"$numberLong\": \"2\"}, "
                                 "\"t\": {\"$numberLong\": \"4\"}, " TS "\"b\": true}",
                                 0, &e, err, sizeof err),
                     DECODE_OK);
    ck_assert_int_eq(e.ops[0].form, OP_FORM_MODIFIER);
    ck_assert_str_eq(e.ops[0].db, "db");
    ck_assert_str_eq(e.ops[0].coll, "a.b");
    ck_assert(e.ops[0].upsert);
    ck_assert_int_eq(e.pos.term, 4);
    assert_int_id(&e.ops[0].id, 3);
    bson_t key;
    ck_assert(op_key_view(&e.ops[0], &key));
    ck_assert_int_eq(bson_count_keys(&key), 2);
    op_entry_clear(&e);
    ck_assert_int_eq(decode_json("{" TS "\"op\": \"u\", \"ns\": \"a.b\", \"o\": {\"$v\": 1, \"$set\": {\"x\": 1}}, "
                                 "\"o2\": {\"_id\": 1}}",
                                 0, &e, err, sizeof err),
                     DECODE_OK);
    ck_assert_int_eq(e.ops[0].form, OP_FORM_MODIFIER);
    ck_assert(!e.ops[0].upsert);
    op_entry_clear(&e);
    ck_assert_int_eq(decode_json("{" TS "\"op\": \"u\", \"ns\": \"a.b\", \"o\": {\"_id\": 1, \"x\": 2}, "
                                 "\"o2\": {\"_id\": 1}}",
                                 0, &e, err, sizeof err),
                     DECODE_OK);
    ck_assert_int_eq(e.ops[0].form, OP_FORM_REPLACE);
    bson_t doc;
    ck_assert(op_doc_view(&e.ops[0], &doc));
    ck_assert_int_eq(bson_count_keys(&doc), 2);
    op_entry_clear(&e);

    /* applyOps: skipped inner ops keep their slot; user applyOps is atomic */
    ck_assert_int_eq(decode_json("{" TS "\"op\": \"c\", \"ns\": \"admin.$cmd\", \"o\": {\"applyOps\": ["
                                 "{\"op\": \"i\", \"ns\": \"a.b\", \"o\": {\"_id\": 1}},"
                                 "{\"op\": \"i\", \"ns\": \"a.system.views\", \"o\": {\"_id\": 2}},"
                                 "{\"op\": \"c\", \"ns\": \"a.$cmd\", \"o\": {\"create\": \"c\"}},"
                                 "{\"op\": \"n\", \"ns\": \"\", \"o\": {}},"
                                 "{\"op\": \"d\", \"ns\": \"a.b\", \"o\": {\"_id\": 1}}]}}",
                                 0, &e, err, sizeof err),
                     DECODE_OK);
    ck_assert_uint_eq(e.n, 5);
    ck_assert(e.atomic);
    ck_assert_int_eq(e.ops[0].kind, OP_INSERT);
    ck_assert_int_eq(e.ops[1].kind, OP_NOOP);
    ck_assert_int_eq(e.ops[2].kind, OP_CREATE);
    ck_assert_int_eq(e.ops[3].kind, OP_NOOP);
    ck_assert_int_eq(e.ops[4].kind, OP_DELETE);
    ck_assert_uint_eq(e.ops[4].index, 4);
    op_entry_clear(&e);
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"c\", \"ns\": \"admin.$cmd\", \"o\": {\"applyOps\": []}}", NULL),
                     OP_NOOP);
    /* the fromMigrate applyOps of a chunk migration is skipped whole */
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"c\", \"ns\": \"admin.$cmd\", \"fromMigrate\": true, \"o\": "
                              "{\"applyOps\": [{\"op\": \"x\"}]}}",
                              NULL),
                     OP_NOOP);
#undef TS
}
END_TEST

/* Decoded ops own their memory: the raw entry can be overwritten and freed (ASan/valgrind would catch a leak
 * of pointers into it). */
/* Views and time-series collections get no table, and one notice naming them (op.notice, the namespace kept); the
 * global-index bookkeeping of 7.0+ and newer shard-catalog commands are noops. */
START_TEST(test_views_timeseries_and_newer_entries)
{
#define TS "\"ts\": {\"$timestamp\": {\"t\": 51, \"i\": 1}}, "
    const char *why = NULL;
    op_entry e;
    char err[256];
    /* 5.0 to 7.x: the buckets collection (a system collection, silent), then the view on it */
    ck_assert_int_eq(decode_json("{" TS "\"op\": \"c\", \"ns\": \"m.$cmd\", \"o\": {\"create\": "
                                 "\"system.buckets.weather\", \"validator\": {}, \"clusteredIndex\": true, "
                                 "\"timeseries\": {\"timeField\": \"t\", \"granularity\": \"seconds\", "
                                 "\"bucketMaxSpanSeconds\": 3600}}}",
                                 0, &e, err, sizeof err),
                     DECODE_OK);
    ck_assert_int_eq(e.ops[0].kind, OP_NOOP);
    ck_assert(!e.ops[0].notice);
    ck_assert_str_eq(e.ops[0].reason, "system collection");
    op_entry_clear(&e);
    ck_assert_int_eq(decode_json("{" TS "\"op\": \"c\", \"ns\": \"m.$cmd\", \"o\": {\"create\": \"weather\", "
                                 "\"viewOn\": \"system.buckets.weather\", \"pipeline\": []}}",
                                 0, &e, err, sizeof err),
                     DECODE_OK);
    ck_assert_int_eq(e.ops[0].kind, OP_NOOP);
    ck_assert(e.ops[0].notice);
    ck_assert_str_eq(e.ops[0].db, "m");
    ck_assert_str_eq(e.ops[0].coll, "weather");
    ck_assert_ptr_nonnull(strstr(e.ops[0].reason, "time-series"));
    op_entry_clear(&e);
    /* what a server writes for a view: an insert into DB.system.views (and for a time-series view, its buckets) */
    ck_assert_int_eq(decode_json("{" TS "\"op\": \"i\", \"ns\": \"m.system.views\", \"o\": {\"_id\": "
                                 "\"m.weather\", \"viewOn\": \"system.buckets.weather\", \"pipeline\": "
                                 "[{\"$_internalUnpackBucket\": {\"timeField\": \"t\", \"bucketMaxSpanSeconds\": "
                                 "3600}}]}}",
                                 0, &e, err, sizeof err),
                     DECODE_OK);
    ck_assert_int_eq(e.ops[0].kind, OP_NOOP);
    ck_assert(e.ops[0].notice);
    ck_assert_str_eq(e.ops[0].db, "m");
    ck_assert_str_eq(e.ops[0].coll, "weather");
    ck_assert_ptr_nonnull(strstr(e.ops[0].reason, "time-series"));
    op_entry_clear(&e);
    ck_assert_int_eq(decode_json("{" TS "\"op\": \"i\", \"ns\": \"m.system.views\", \"o\": {\"_id\": "
                                 "\"m.big.orders\", \"viewOn\": \"orders\", \"pipeline\": []}}",
                                 0, &e, err, sizeof err),
                     DECODE_OK);
    ck_assert(e.ops[0].notice);
    ck_assert_str_eq(e.ops[0].coll, "big.orders");
    ck_assert_ptr_nonnull(strstr(e.ops[0].reason, "a view"));
    op_entry_clear(&e);
    /* a view document of another database, or an update of one: a silent noop */
    ck_assert_int_eq(decode_json("{" TS "\"op\": \"i\", \"ns\": \"m.system.views\", \"o\": {\"_id\": "
                                 "\"other.v\", \"viewOn\": \"orders\", \"pipeline\": []}}",
                                 0, &e, err, sizeof err),
                     DECODE_OK);
    ck_assert(!e.ops[0].notice);
    ck_assert_int_eq(e.ops[0].kind, OP_NOOP);
    op_entry_clear(&e);
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"u\", \"ns\": \"m.system.views\", \"o\": {\"$v\": 2, "
                              "\"diff\": {\"u\": {\"pipeline\": []}}}, \"o2\": {\"_id\": \"m.v\"}}",
                              NULL),
                     OP_NOOP);
    /* a server with viewless time-series collections: one create with the options */
    ck_assert_int_eq(decode_json("{" TS "\"op\": \"c\", \"ns\": \"m.$cmd\", \"o\": {\"create\": \"w2\", "
                                 "\"timeseries\": {\"timeField\": \"t\"}}}",
                                 0, &e, err, sizeof err),
                     DECODE_OK);
    ck_assert_int_eq(e.ops[0].kind, OP_NOOP);
    ck_assert(e.ops[0].notice);
    ck_assert_ptr_nonnull(strstr(e.ops[0].reason, "time-series"));
    op_entry_clear(&e);
    /* Read with DECODE_KEEP_SYSTEM (as the oplog is): the buckets' create is the collection's, with its options; the
     * view is silent; the buckets' drop is the collection's; a bucket write is the collection's, marked as a bucket */
    ck_assert_int_eq(decode_json("{" TS "\"op\": \"c\", \"ns\": \"m.$cmd\", \"o\": {\"create\": "
                                 "\"system.buckets.weather\", \"validator\": {}, \"clusteredIndex\": true, "
                                 "\"timeseries\": {\"timeField\": \"t\", \"metaField\": \"m\"}}}",
                                 DECODE_KEEP_SYSTEM, &e, err, sizeof err),
                     DECODE_OK);
    ck_assert_int_eq(e.ops[0].kind, OP_CREATE);
    ck_assert(e.ops[0].bucket);
    ck_assert_str_eq(e.ops[0].db, "m");
    ck_assert_str_eq(e.ops[0].coll, "weather");
    ck_assert_ptr_nonnull(e.ops[0].doc);
    op_entry_clear(&e);
    ck_assert_int_eq(decode_json("{" TS "\"op\": \"i\", \"ns\": \"m.system.views\", \"o\": {\"_id\": "
                                 "\"m.weather\", \"viewOn\": \"system.buckets.weather\", \"pipeline\": []}}",
                                 DECODE_KEEP_SYSTEM, &e, err, sizeof err),
                     DECODE_OK);
    ck_assert_int_eq(e.ops[0].kind, OP_NOOP);
    ck_assert(!e.ops[0].notice);
    op_entry_clear(&e);
    ck_assert_int_eq(decode_json("{" TS "\"op\": \"c\", \"ns\": \"m.$cmd\", \"o\": {\"drop\": "
                                 "\"system.buckets.weather\"}}",
                                 DECODE_KEEP_SYSTEM, &e, err, sizeof err),
                     DECODE_OK);
    ck_assert_int_eq(e.ops[0].kind, OP_DROP);
    ck_assert(e.ops[0].bucket);
    ck_assert_str_eq(e.ops[0].coll, "weather");
    op_entry_clear(&e);
    ck_assert_int_eq(decode_json("{" TS "\"op\": \"i\", \"ns\": \"m.system.buckets.weather\", \"o\": {\"_id\": "
                                 "{\"$oid\": \"65a1b2c3d4e5f60718293a4b\"}, \"control\": {\"version\": 1}}}",
                                 DECODE_KEEP_SYSTEM | DECODE_BORROW_PAYLOAD, &e, err, sizeof err),
                     DECODE_OK);
    ck_assert_int_eq(e.ops[0].kind, OP_INSERT);
    ck_assert(e.ops[0].bucket);
    ck_assert(!e.ops[0].doc_borrowed); /* the sink reads a bucket after rendering: kept */
    ck_assert_str_eq(e.ops[0].coll, "weather");
    op_entry_clear(&e);
    ck_assert_int_eq(decode_json("{" TS "\"op\": \"c\", \"ns\": \"m.$cmd\", \"o\": {\"renameCollection\": "
                                 "\"m.system.buckets.weather\", \"to\": \"m.w3\"}}",
                                 DECODE_KEEP_SYSTEM, &e, err, sizeof err),
                     DECODE_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "time-series buckets"));
    /* a viewless time-series collection (8.3 and later): its create makes its table, its buckets are written under
     * its own name marked isTimeseries; an entry without the mark is a document */
    ck_assert_int_eq(decode_json("{" TS "\"op\": \"c\", \"ns\": \"m.$cmd\", \"isTimeseries\": true, \"o\": "
                                 "{\"create\": \"w2\", \"timeseries\": {\"timeField\": \"t\"}}}",
                                 DECODE_KEEP_SYSTEM, &e, err, sizeof err),
                     DECODE_OK);
    ck_assert_int_eq(e.ops[0].kind, OP_CREATE);
    ck_assert(e.ops[0].bucket);
    ck_assert_str_eq(e.ops[0].coll, "w2");
    op_entry_clear(&e);
    ck_assert_int_eq(decode_json("{" TS "\"op\": \"i\", \"ns\": \"m.w2\", \"isTimeseries\": true, \"o\": {\"_id\": "
                                 "{\"$oid\": \"65a1b2c3d4e5f60718293a4b\"}, \"control\": {\"version\": 2}}}",
                                 DECODE_KEEP_SYSTEM, &e, err, sizeof err),
                     DECODE_OK);
    ck_assert(e.ops[0].bucket);
    ck_assert_str_eq(e.ops[0].coll, "w2");
    op_entry_clear(&e);
    ck_assert_int_eq(decode_json("{" TS "\"op\": \"i\", \"ns\": \"m.w2\", \"o\": {\"_id\": 1}}", DECODE_KEEP_SYSTEM, &e,
                                 err, sizeof err),
                     DECODE_OK);
    ck_assert(!e.ops[0].bucket);
    op_entry_clear(&e);
    /* a plain view */
    ck_assert_int_eq(decode_json("{" TS "\"op\": \"c\", \"ns\": \"m.$cmd\", \"o\": {\"create\": \"v\", "
                                 "\"viewOn\": \"orders\", \"pipeline\": [{\"$match\": {\"x\": 1}}]}}",
                                 0, &e, err, sizeof err),
                     DECODE_OK);
    ck_assert_int_eq(e.ops[0].kind, OP_NOOP);
    ck_assert(e.ops[0].notice);
    ck_assert_str_eq(e.ops[0].coll, "v");
    ck_assert_ptr_nonnull(strstr(e.ops[0].reason, "a view"));
    op_entry_clear(&e);
    /* capped, clustered and validated collections are collections: a table each */
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"c\", \"ns\": \"m.$cmd\", \"o\": {\"create\": \"c1\", "
                              "\"capped\": true, \"size\": 4096, \"max\": 10}}",
                              NULL),
                     OP_CREATE);
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"c\", \"ns\": \"m.$cmd\", \"o\": {\"create\": \"c2\", "
                              "\"clusteredIndex\": {\"key\": {\"_id\": 1}, \"unique\": true, \"v\": 2}}}",
                              NULL),
                     OP_CREATE);
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"c\", \"ns\": \"m.$cmd\", \"o\": {\"create\": \"c3\", "
                              "\"validator\": {\"$jsonSchema\": {\"required\": [\"a\"]}}, "
                              "\"validationLevel\": \"strict\"}}",
                              NULL),
                     OP_CREATE);
    /* global index keys and commands (7.0, feature flag), newer shard-catalog bookkeeping */
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"xi\", \"ns\": \"m.$cmd\", \"o\": {\"key\": {\"a\": 1}, "
                              "\"docKey\": {\"_id\": 1}}}",
                              &why),
                     OP_NOOP);
    ck_assert_str_eq(why, "global index key");
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"xd\", \"ns\": \"m.$cmd\", \"o\": {\"key\": {\"a\": 1}, "
                              "\"docKey\": {\"_id\": 1}}}",
                              NULL),
                     OP_NOOP);
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"c\", \"ns\": \"m.$cmd\", \"o\": {\"createGlobalIndex\": "
                              "\"g\"}}",
                              NULL),
                     OP_NOOP);
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"c\", \"ns\": \"m.$cmd\", \"o\": {\"dropGlobalIndex\": "
                              "\"g\"}}",
                              NULL),
                     OP_NOOP);
    ck_assert_int_eq(one_kind("{" TS "\"op\": \"c\", \"ns\": \"m.$cmd\", \"o\": {\"setAllowChunkOperations\": "
                              "\"c\", \"allowChunkOperations\": false}}",
                              NULL),
                     OP_NOOP);
    /* any other op code or command is still refused: the stream stops before what it cannot apply */
    expect_fail("{" TS "\"op\": \"xu\", \"ns\": \"m.$cmd\", \"o\": {}}", DECODE_UNSUPPORTED, "xu", NULL);
    expect_fail("{" TS "\"op\": \"c\", \"ns\": \"m.$cmd\", \"o\": {\"somethingNew\": \"c\"}}", DECODE_UNSUPPORTED,
                "somethingNew", NULL);
#undef TS
}
END_TEST

START_TEST(test_no_pointers_into_entry)
{
    bson_t *b = from_json("{\"ts\": {\"$timestamp\": {\"t\": 1, \"i\": 1}}, \"op\": \"i\", \"ns\": \"shop.orders\", "
                          "\"o\": {\"_id\": \"order-1\", \"n\": 1}}");
    op_entry e;
    char err[128];
    ck_assert_int_eq(decode_entry(b, &e, err, sizeof err), DECODE_OK);
    memset((uint8_t *)bson_get_data(b), 0xAB, b->len);
    ck_assert_str_eq(e.ops[0].db, "shop");
    ck_assert_str_eq(e.ops[0].coll, "orders");
    ck_assert_int_eq(e.ops[0].id.value_type, BSON_TYPE_UTF8);
    ck_assert_str_eq(e.ops[0].id.value.v_utf8.str, "order-1");
    bson_t doc;
    ck_assert(op_doc_view(&e.ops[0], &doc));
    ck_assert(bson_validate(&doc, BSON_VALIDATE_NONE, NULL));
    bson_destroy(b);
    op_entry *heap = malloc(sizeof *heap);
    *heap = e; /* moving the entry by value is fine: ops point into their own buffers */
    ck_assert_str_eq(heap->ops[0].id.value.v_utf8.str, "order-1");
    op_entry_free(heap);
    op_entry_clear(NULL);
    op_entry_free(NULL);
}
END_TEST

Suite *decode_suite(void); /* called by the generated runner list */

Suite *decode_suite(void)
{
    Suite *s = suite_create("decode");
    TCase *tc = tcase_create("decode");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_pos);
    tcase_add_test(tc, test_real_files_counts);
    tcase_add_test(tc, test_raw_matches_jsonl);
    tcase_add_test(tc, test_real_entries_fields);
    tcase_add_test(tc, test_timeseries_diffs);
    tcase_add_test(tc, test_non_oplog_bson_rejected);
    tcase_add_test(tc, test_transcribed_o_fields);
    tcase_add_test(tc, test_txn_fixtures);
    tcase_add_test(tc, test_diff_pre_post_decode);
    tcase_add_test(tc, test_diff_must_reject_decode);
    tcase_add_test(tc, test_bad_entries);
    tcase_add_test(tc, test_kinds_and_skips);
    tcase_add_test(tc, test_views_timeseries_and_newer_entries);
    tcase_add_test(tc, test_no_pointers_into_entry);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_replay_txn.c — `replay` of a dump holding transactions written over several entries (source/dump/dump.c), cut
 * after every entry.
 *
 * The dump is written here, entry by entry, in the shapes a 4.2+ server writes (source/txn.h): unprepared chains
 * ended by the implicit commit (count), a prepare alone and a partialTxn then a prepare, each ended by
 * commitTransaction or abortTransaction, two chains interleaved with each other and with ordinary writes, 6.0+
 * batched writes without lsid, and a transaction of one applyOps. Each entry says which changes become visible at it
 * (an ordinary write its own, a commit its whole transaction's, the others none); a reference mongosim receives them
 * through the driver as the cut moves on.
 *
 * - prefix by prefix: for every k the first k entries are written to a file and replayed into the same service, which
 *   resumes at its checkpoint (a cut inside a chain, between a prepare and its commit, anywhere); after each,
 * PostgreSQL equals the reference at k (every row of every collection of the test's databases, and no table more);
 * - the whole dump replayed once into a fresh service gives the same;
 * - a dump that begins inside a transaction stops with exit code 5 at its commit, saying so, and applies nothing of it;
 * - an op PostgreSQL refuses inside such a transaction is a dead letter, and the rest of it applies;
 * - a typed map's collection gets its typed rows from a dump as from the live oplog.
 *
 * mongosim only for the reference (a real replica set would do as well, but the cases start a reference mongosim).
 */
#include <check.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/compare.h"
#include "../lib/daemonenv.h"
#include "core/op.h"
#include "util/strbuf.h"

Suite *replay_txn_suite(void);

#define UI "\"ui\":{\"$binary\":{\"base64\":\"4p4kSLicSracQeNvveXz3g==\",\"subType\":\"04\"}}"

enum { MAXE = 64, MAXC = 16 };

/* One change: as an inner op of an applyOps or an ordinary entry, and as the reference's write. */
typedef struct {
    char kind; /* 'i', 'u' (x = new value), 'd'; 'n': an insert PostgreSQL refuses (a string holding U+0000) */
    const char *coll;
    int id, x;
} change;

typedef struct {
    denv e;
    proc_handle ref;
    char ref_uri[256];
    mongoc_client_t *refc;
    char db[64];
    uint32_t secs, inc;
    bson_t *entry[MAXE];
    change vis[MAXE][MAXC]; /* the changes that become visible at each entry */
    size_t nvis[MAXE];
    size_t n;
    /* the changes of the chains still open, by chain (the lsid's number) */
    change open[8][MAXC];
    size_t nopen[8];
    op_pos last[8]; /* each chain's newest entry */
} renv;

static void r_setup_ini(renv *t, const char *name, const char *extra_ini)
{
    memset(t, 0, sizeof *t);
    denv_start(&t->e, name, NULL, extra_ini);
    char err[512], log[300];
    snprintf(log, sizeof log, "%s/reference.log", t->e.dir);
    ck_assert_msg(proc_start_mongosim(NULL, log, &t->ref, err, sizeof err), "%s", err);
    snprintf(t->ref_uri, sizeof t->ref_uri, "mongodb://127.0.0.1:%d/?replicaSet=rs0", t->ref.port);
    t->refc = mongoc_client_new(t->ref_uri);
    ck_assert_ptr_nonnull(t->refc);
    snprintf(t->db, sizeof t->db, "%sa", t->e.prefix);
    t->secs = 1700000000;
}

static void r_setup(renv *t, const char *name)
{
    r_setup_ini(t, name, NULL);
}

static void r_stop(renv *t)
{
    for (size_t k = 0; k < t->n; k++)
        bson_destroy(t->entry[k]);
    mongoc_client_destroy(t->refc);
    proc_stop(&t->ref, 10);
    denv_stop(&t->e);
}

static void change_json(const renv *t, strbuf *b, const change *c)
{
    switch (c->kind) {
    case 'i':
        strbuf_printf(b, "\"op\":\"i\",\"ns\":\"%s.%s\"," UI ",\"o\":{\"_id\":%d,\"x\":%d}", t->db, c->coll, c->id,
                      c->x);
        break;
    case 'n':
        strbuf_printf(b, "\"op\":\"i\",\"ns\":\"%s.%s\"," UI ",\"o\":{\"_id\":%d,\"x\":%d,\"s\":\"a\\u0000b\"}", t->db,
                      c->coll, c->id, c->x);
        break;
    case 'u':
        strbuf_printf(
            b, "\"op\":\"u\",\"ns\":\"%s.%s\"," UI ",\"o\":{\"$v\":2,\"diff\":{\"u\":{\"x\":%d}}},\"o2\":{\"_id\":%d}",
            t->db, c->coll, c->x, c->id);
        break;
    default:
        strbuf_printf(b, "\"op\":\"d\",\"ns\":\"%s.%s\"," UI ",\"o\":{\"_id\":%d}", t->db, c->coll, c->id);
        break;
    }
}

/* The reference's write of a change; a refused insert ('n') is a dead letter, not a row. */
static void ref_apply(renv *t, const change *c)
{
    if (c->kind == 'n')
        return;
    mongoc_collection_t *coll = mongoc_client_get_collection(t->refc, t->db, c->coll);
    bson_error_t err;
    bool ok;
    if (c->kind == 'i') {
        bson_t *d = BCON_NEW("_id", BCON_INT32(c->id), "x", BCON_INT32(c->x));
        ok = mongoc_collection_insert_one(coll, d, NULL, NULL, &err);
        bson_destroy(d);
    } else if (c->kind == 'u') {
        bson_t *q = BCON_NEW("_id", BCON_INT32(c->id)), *u = BCON_NEW("$set", "{", "x", BCON_INT32(c->x), "}");
        ok = mongoc_collection_update_one(coll, q, u, NULL, NULL, &err);
        bson_destroy(q);
        bson_destroy(u);
    } else {
        bson_t *q = BCON_NEW("_id", BCON_INT32(c->id));
        ok = mongoc_collection_delete_one(coll, q, NULL, NULL, &err);
        bson_destroy(q);
    }
    ck_assert_msg(ok, "reference write: %s", err.message);
    mongoc_collection_destroy(coll);
}

/* Starts the next entry: its head (ts, t, v, wall) in b. */
static op_pos head(renv *t, strbuf *b)
{
    ck_assert_uint_lt(t->n, MAXE);
    op_pos ts = {.secs = t->secs, .inc = ++t->inc, .term = 1};
    strbuf_printf(b,
                  "{\"ts\":{\"$timestamp\":{\"t\":%u,\"i\":%u}},\"t\":{\"$numberLong\":\"1\"},\"v\":2,"
                  "\"wall\":{\"$date\":{\"$numberLong\":\"%llu\"}},",
                  ts.secs, ts.inc, (unsigned long long)ts.secs * 1000ULL);
    return ts;
}

/* Ends the entry in b: parsed and kept, with the changes that become visible at it. */
static void finish(renv *t, strbuf *b, const change *vis, size_t nvis)
{
    bson_error_t err;
    bson_t *doc = bson_new_from_json((const uint8_t *)b->data, (ssize_t)b->len, &err);
    ck_assert_msg(doc != NULL, "bad test JSON: %s: %s", err.message, b->data);
    free(b->data);
    ck_assert_uint_le(nvis, MAXC);
    t->entry[t->n] = doc;
    if (nvis > 0)
        memcpy(t->vis[t->n], vis, nvis * sizeof *vis);
    t->nvis[t->n] = nvis;
    t->n++;
}

/* An ordinary entry with one change. */
static void plain(renv *t, char kind, const char *coll, int id, int x)
{
    strbuf b = {0};
    change c = {kind, coll, id, x};
    head(t, &b);
    change_json(t, &b, &c);
    strbuf_printf(&b, "}");
    finish(t, &b, &c, 1);
}

enum { F_PARTIAL, F_PREPARE, F_COUNT, F_NONE };

/* The lsid of session s (s < 8): one byte of the UUID differs. */
static void lsid_json(strbuf *b, int s)
{
    strbuf_printf(b,
                  "\"lsid\":{\"id\":{\"$binary\":{\"base64\":\"%cK+8+nZ+Eem9p6vK9BEt9g==\",\"subType\":\"04\"}}},"
                  "\"txnNumber\":{\"$numberLong\":\"%d\"},",
                  "ABCDEFGH"[s], 10 + s);
}

/* An applyOps entry of chain s (a session, or none for batched writes when s < 0 ... chains keep their own slot
 * `slot`): prevOpTime is the chain's newest entry (the null OpTime for its first), the changes are noted with the
 * chain; F_COUNT makes it the implicit commit, at which the chain's changes become visible. */
static void chain(renv *t, int slot, bool lsid, int flag, const change *c, size_t n)
{
    strbuf b = {0};
    op_pos ts = head(t, &b);
    const op_pos *prev = t->last[slot].secs ? &t->last[slot] : NULL;
    strbuf_printf(&b, "\"op\":\"c\",\"ns\":\"admin.$cmd\",");
    if (lsid)
        lsid_json(&b, slot);
    strbuf_printf(&b, "\"prevOpTime\":{\"ts\":{\"$timestamp\":{\"t\":%u,\"i\":%u}},\"t\":{\"$numberLong\":\"%d\"}},",
                  prev ? prev->secs : 0, prev ? prev->inc : 0, prev ? 1 : -1);
    strbuf_printf(&b, "\"o\":{\"applyOps\":[");
    for (size_t i = 0; i < n; i++) {
        strbuf_printf(&b, "%s{", i ? "," : "");
        change_json(t, &b, &c[i]);
        strbuf_printf(&b, "}");
        ck_assert_uint_lt(t->nopen[slot], MAXC);
        t->open[slot][t->nopen[slot]++] = c[i];
    }
    strbuf_printf(&b, "]");
    if (flag == F_PARTIAL)
        strbuf_printf(&b, ",\"partialTxn\":true");
    else if (flag == F_PREPARE)
        strbuf_printf(&b, ",\"prepare\":true");
    else if (flag == F_COUNT)
        strbuf_printf(&b, ",\"count\":{\"$numberLong\":\"%zu\"}", t->nopen[slot]);
    strbuf_printf(&b, "}}");
    if (flag == F_COUNT || flag == F_NONE) {
        finish(t, &b, t->open[slot], t->nopen[slot]);
        t->nopen[slot] = 0;
        t->last[slot] = (op_pos){0, 0, -1};
    } else {
        finish(t, &b, NULL, 0);
        t->last[slot] = ts;
    }
}

/* commitTransaction (the chain's changes become visible) or abortTransaction (they are forgotten) of the prepared
 * chain in slot. */
static void end_prepared(renv *t, int slot, bool commit)
{
    strbuf b = {0};
    op_pos prev = t->last[slot];
    head(t, &b);
    strbuf_printf(&b, "\"op\":\"c\",\"ns\":\"admin.$cmd\",");
    lsid_json(&b, slot);
    strbuf_printf(&b, "\"prevOpTime\":{\"ts\":{\"$timestamp\":{\"t\":%u,\"i\":%u}},\"t\":{\"$numberLong\":\"1\"}},",
                  prev.secs, prev.inc);
    if (commit)
        strbuf_printf(&b, "\"o\":{\"commitTransaction\":1,\"commitTimestamp\":{\"$timestamp\":{\"t\":%u,\"i\":%u}}}}",
                      prev.secs, prev.inc);
    else
        strbuf_printf(&b, "\"o\":{\"abortTransaction\":1}}");
    finish(t, &b, commit ? t->open[slot] : NULL, commit ? t->nopen[slot] : 0);
    t->nopen[slot] = 0;
    t->last[slot] = (op_pos){0, 0, -1};
}

/* Every shape, interleaved (the comments say what each entry is). */
static void build(renv *t)
{
    plain(t, 'i', "o", 1, 1);
    /* A: an unprepared chain of three entries, ordinary writes in between */
    chain(t, 0, true, F_PARTIAL, (change[]){{'i', "t", 1, 1}, {'i', "t", 2, 2}}, 2);
    plain(t, 'i', "o", 2, 2);
    chain(t, 0, true, F_PARTIAL, (change[]){{'u', "t", 1, 10}, {'i', "t", 3, 3}}, 2);
    chain(t, 0, true, F_COUNT, (change[]){{'d', "t", 2, 0}}, 1);
    /* B: a prepare alone, committed */
    chain(t, 1, true, F_PREPARE, (change[]){{'i', "t", 10, 10}, {'i', "t", 11, 11}}, 2);
    plain(t, 'u', "o", 1, 100);
    end_prepared(t, 1, true);
    /* C: a partialTxn and a prepare, aborted, while D (unprepared) runs beside it */
    chain(t, 2, true, F_PARTIAL, (change[]){{'i', "t", 20, 20}}, 1);
    chain(t, 2, true, F_PREPARE, (change[]){{'i', "t", 21, 21}}, 1);
    chain(t, 3, true, F_PARTIAL, (change[]){{'i', "u", 1, 1}}, 1);
    end_prepared(t, 2, false);
    plain(t, 'd', "o", 2, 0);
    chain(t, 3, true, F_COUNT, (change[]){{'u', "u", 1, 5}, {'i', "u", 2, 2}}, 2);
    /* E: batched writes (a multi-delete) without lsid */
    chain(t, 4, false, F_PARTIAL, (change[]){{'d', "t", 10, 0}, {'d', "t", 11, 0}}, 2);
    chain(t, 4, false, F_COUNT, (change[]){{'d', "t", 3, 0}}, 1);
    /* F: a transaction of one applyOps (no count, null prevOpTime) */
    chain(t, 5, true, F_NONE, (change[]){{'i', "t", 30, 30}, {'i', "u", 30, 30}}, 2);
    /* G and H: two unprepared chains interleaved */
    chain(t, 6, true, F_PARTIAL, (change[]){{'i', "g", 1, 1}}, 1);
    chain(t, 7, true, F_PARTIAL, (change[]){{'i', "g", 2, 2}}, 1);
    chain(t, 6, true, F_COUNT, (change[]){{'i', "g", 3, 3}}, 1);
    chain(t, 7, true, F_PARTIAL, (change[]){{'i', "g", 4, 4}}, 1);
    plain(t, 'i', "o", 3, 3);
    chain(t, 7, true, F_COUNT, (change[]){{'u', "g", 1, 7}, {'d', "g", 3, 0}}, 2);
    /* I: a partialTxn and a prepare, committed, an ordinary write in between */
    chain(t, 1, true, F_PARTIAL, (change[]){{'i', "t", 40, 40}}, 1);
    chain(t, 1, true, F_PREPARE, (change[]){{'u', "t", 40, 41}, {'i', "t", 41, 41}}, 2);
    plain(t, 'u', "o", 3, 33);
    end_prepared(t, 1, true);
    plain(t, 'i', "o", 4, 4);
}

/* The first k entries as a dump, at path. */
static void write_dump(const renv *t, size_t from, size_t k, const char *path)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    for (size_t i = from; i < k; i++)
        ck_assert_uint_eq(fwrite(bson_get_data(t->entry[i]), 1, t->entry[i]->len, f), t->entry[i]->len);
    ck_assert_int_eq(fclose(f), 0);
}

/* `oplog2pg replay` of path; its output in out. Returns its exit code. */
static int replay(renv *t, const char *path, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/replay.out", t->e.dir);
    const char *args[] = {"-c", t->e.ini, "replay", path, NULL};
    return denv_run_command(&t->e, args, out);
}

/* PostgreSQL equals the reference for the test's databases; false (with the differences printed) when not. */
static bool matches(renv *t, const char *what)
{
    PGconn *pg = PQconnectdb(denv_pg_conninfo());
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    compare_options opts = {.db_prefix = t->e.prefix};
    compare_report rep;
    char err[512];
    bool ran = compare_all(t->ref_uri, pg, &opts, &rep, err, sizeof err);
    ck_assert_msg(ran, "compare failed to run: %s", err);
    bool match = rep.match;
    if (!match) {
        fprintf(stderr, "%s: PostgreSQL differs from the reference:\n", what);
        compare_report_print(&rep, stderr, false);
    }
    compare_report_free(&rep);
    PQfinish(pg);
    return match;
}

/* Cut after every entry: each prefix replayed in turn into one service (resuming at its checkpoint) equals the
 * reference up to that entry; then the whole dump, replayed once into a fresh service, equals it too. */
START_TEST(test_replay_every_cut)
{
    renv t;
    r_setup(&t, "rpltxn");
    build(&t);
    char path[300], out[300], what[64];
    snprintf(path, sizeof path, "%s/prefix.bson", t.e.dir);
    for (size_t k = 1; k <= t.n; k++) {
        for (size_t i = 0; i < t.nvis[k - 1]; i++)
            ref_apply(&t, &t.vis[k - 1][i]);
        write_dump(&t, 0, k, path);
        int rc = replay(&t, path, out, sizeof out);
        if (rc != 0) {
            snprintf(t.e.log, sizeof t.e.log, "%s", out);
            denv_show_log(&t.e);
        }
        ck_assert_msg(rc == 0, "replay of the first %zu entries exited %d", k, rc);
        snprintf(what, sizeof what, "after the first %zu entries", k);
        ck_assert_msg(matches(&t, what), "%s: PostgreSQL differs from the reference (see above)", what);
        ck_assert_uint_eq(denv_checkpoint_ts(t.e.service),
                          (uint64_t)t.secs << 32 | (uint32_t)(k)); /* entry k's ts: secs, inc k */
    }
    ck_assert_msg(denv_file_contains(out, "replayed 1 entries"), "the last replay did not apply exactly its new entry");

    /* The same dump in one run, into a service of its own (its own databases, the reference's changes under them). */
    renv u;
    r_setup(&u, "rpltxn1");
    build(&u);
    for (size_t k = 0; k < u.n; k++)
        for (size_t i = 0; i < u.nvis[k]; i++)
            ref_apply(&u, &u.vis[k][i]);
    snprintf(path, sizeof path, "%s/whole.bson", u.e.dir);
    write_dump(&u, 0, u.n, path);
    int rc = replay(&u, path, out, sizeof out);
    if (rc != 0) {
        snprintf(u.e.log, sizeof u.e.log, "%s", out);
        denv_show_log(&u.e);
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(matches(&u, "the whole dump"), "the whole dump: PostgreSQL differs from the reference (see above)");
    r_stop(&u);
    r_stop(&t);
}
END_TEST

/* A dump that begins inside a transaction (its first entry is the chain's second) cannot put it together: exit 5 at
 * the commit, naming it, with nothing of the transaction applied and the checkpoint before the commit. */
START_TEST(test_replay_dump_begins_inside_txn)
{
    renv t;
    r_setup(&t, "rplin");
    plain(&t, 'i', "o", 1, 1);
    chain(&t, 0, true, F_PARTIAL, (change[]){{'i', "t", 1, 1}}, 1);
    plain(&t, 'i', "o", 2, 2);
    chain(&t, 0, true, F_PARTIAL, (change[]){{'i', "t", 2, 2}}, 1);
    chain(&t, 0, true, F_COUNT, (change[]){{'i', "t", 3, 3}}, 1);
    plain(&t, 'i', "o", 3, 3);
    char path[300], out[300], sql[300];
    snprintf(path, sizeof path, "%s/inside.bson", t.e.dir);
    write_dump(&t, 2, t.n, path); /* from the ordinary write after the chain's first entry */
    ck_assert_int_eq(replay(&t, path, out, sizeof out), 5);
    ck_assert_msg(denv_file_contains(out, "begins inside that transaction"), "the message does not say why");
    snprintf(sql, sizeof sql, "SELECT (to_regclass('\"%s\".\"t\"') IS NULL)::int", t.db);
    ck_assert_int_eq(denv_pg_int(sql), 1); /* nothing of the transaction */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\".\"o\"", t.db);
    ck_assert_int_eq(denv_pg_int(sql), 1); /* the ordinary write before it */
    ck_assert_uint_lt(denv_checkpoint_ts(t.e.service), (uint64_t)t.secs << 32 | 5u);
    r_stop(&t);
}
END_TEST

/* An op PostgreSQL refuses inside a transaction put together from the dump: set aside as a dead letter with its raw
 * BSON (the careful pass that finds it reads the dump again from its start, chains included), the rest of the
 * transaction and the entries after it applied. */
START_TEST(test_replay_refused_op_in_txn)
{
    renv t;
    r_setup(&t, "rplref");
    plain(&t, 'i', "o", 1, 1);
    chain(&t, 0, true, F_PARTIAL, (change[]){{'i', "t", 1, 1}, {'n', "t", 2, 2}}, 2);
    plain(&t, 'i', "o", 2, 2);
    chain(&t, 0, true, F_PARTIAL, (change[]){{'i', "t", 3, 3}}, 1);
    chain(&t, 0, true, F_COUNT, (change[]){{'u', "t", 1, 10}}, 1);
    plain(&t, 'i', "o", 3, 3);
    for (size_t k = 0; k < t.n; k++)
        for (size_t i = 0; i < t.nvis[k]; i++)
            ref_apply(&t, &t.vis[k][i]);
    char path[300], out[300], sql[512];
    snprintf(path, sizeof path, "%s/refused.bson", t.e.dir);
    write_dump(&t, 0, t.n, path);
    int rc = replay(&t, path, out, sizeof out);
    if (rc != 0) {
        snprintf(t.e.log, sizeof t.e.log, "%s", out);
        denv_show_log(&t.e);
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(matches(&t, "a refused op in a transaction"), "PostgreSQL differs from the reference (see above)");
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM oplog2pg.dead_letter WHERE service = '%s' AND doc_id = '2' AND op_bson IS NOT NULL",
             t.e.service);
    ck_assert_int_eq(denv_pg_int(sql), 1);
    ck_assert_uint_eq(denv_checkpoint_ts(t.e.service), (uint64_t)t.secs << 32 | (uint32_t)t.n);
    r_stop(&t);
}
END_TEST

/* A typed map applies to a dump's ops as to the live oplog's: they are projected on the dump's reading thread. */
START_TEST(test_replay_typed_map)
{
    renv t;
    r_setup_ini(&t, "rpltyp", "[map rep_rpltyp_a.m]\ncolumn._id = integer from _id\ncolumn.x = integer from x\n");
    ck_assert_str_eq(t.db, "rep_rpltyp_a");
    plain(&t, 'i', "m", 1, 1);
    plain(&t, 'i', "m", 2, 2);
    plain(&t, 'u', "m", 1, 10);
    plain(&t, 'd', "m", 2, 0);
    plain(&t, 'i', "m", 3, 3);
    chain(&t, 0, true, F_PARTIAL, (change[]){{'i', "m", 4, 4}}, 1);
    chain(&t, 0, true, F_COUNT, (change[]){{'u', "m", 3, 30}}, 1);
    char path[300], out[300], rows[256];
    snprintf(path, sizeof path, "%s/typed.bson", t.e.dir);
    write_dump(&t, 0, t.n, path);
    int rc = replay(&t, path, out, sizeof out);
    if (rc != 0) {
        snprintf(t.e.log, sizeof t.e.log, "%s", out);
        denv_show_log(&t.e);
    }
    ck_assert_int_eq(rc, 0);
    denv_pg_text("SELECT string_agg(_id || ':' || x, ',' ORDER BY _id) FROM rep_rpltyp_a.m", rows, sizeof rows);
    ck_assert_str_eq(rows, "1:10,3:30,4:4");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE service = 'rep_rpltyp'"), 0);
    r_stop(&t);
}
END_TEST

Suite *replay_txn_suite(void)
{
    Suite *s = suite_create("replay_txn");
    TCase *tc = tcase_create("replay_txn");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_replay_every_cut);
    tcase_add_test(tc, test_replay_dump_begins_inside_txn);
    tcase_add_test(tc, test_replay_refused_op_in_txn);
    tcase_add_test(tc, test_replay_typed_map);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_reader_shard_tags.c — what the reader adds for the merge of several sources (source/oplog/reader.h): the
 * source index stamped on every entry, the tags of a prepared transaction's entries (the prepare, every part of its
 * commitTransaction, an abortTransaction: txn_role and a txn_key equal across them), starting after a position
 * that is not in the oplog (start_after), and the note_only prepare entries pushed first for the prepared
 * transactions still open at the start (report_prepares).
 *
 * The entries are appended verbatim to mongosim's oplog (appendOplog) in the shapes a 4.2+ server writes them (mongo
 * op_observer_impl.cpp: logOplogEntries, logCommitOrAbortForPreparedTransaction), each case at its own seconds past
 * the newest entry, and each case reads only the entries at those seconds. The last case reads two shards of a
 * `mongosim --shards 2` (tests/lib/simcluster.h) with one reader each, through a transaction the router commits by
 * two-phase commit: the participants' keys agree across shards, and a transaction on one shard carries no tag.
 * mongosim only: on a real server the cases skip (skip.h).
 */
#include <check.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../lib/oplogutil.h"
#include "../lib/simcluster.h"
#include "../lib/skip.h"
#include "core/op.h"
#include "core/queue.h"
#include "source/oplog/reader.h"
#include "util/strbuf.h"

Suite *reader_shard_tags_suite(void);

#define AWAIT_MS 300
#define WAIT_S   20.0

#define UI   "\"ui\":{\"$binary\":{\"base64\":\"4p4kSLicSracQeNvveXz3g==\",\"subType\":\"04\"}}"
#define LSID "\"lsid\":{\"id\":{\"$binary\":{\"base64\":\"CK+8+nZ+Eem9p6vK9BEt9g==\",\"subType\":\"04\"}}}"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static const char *mongo_uri(void)
{
    const char *uri = getenv("MONGO_URI");
    ck_assert_msg(uri && *uri, "MONGO_URI is not set: the integration harness (tests/integration/run.sh) sets it");
    return uri;
}

/* The case's client, or NULL after recording a skip (a real server has no appendOplog). */
static mongoc_client_t *sim_client(void)
{
    mongoc_init();
    mongoc_client_t *c = mongoc_client_new(mongo_uri());
    ck_assert_ptr_nonnull(c);
    if (!oplogutil_is_mongosim(c)) {
        mongoc_client_destroy(c);
        return NULL;
    }
    return c;
}

/* The seconds a case writes at: well past the newest entry, so that nothing else lands among its entries. */
static uint32_t case_secs(mongoc_client_t *c)
{
    uint64_t newest = 0;
    bson_error_t err;
    ck_assert_msg(oplogutil_newest_ts(c, &newest, &err), "newest oplog entry: %s", err.message);
    return (uint32_t)(newest >> 32) + 100;
}

/* ---- entries, as JSON, appended with appendOplog ---- */

static void head(strbuf *b, uint32_t secs, uint32_t inc)
{
    strbuf_printf(b,
                  "%s{\"ts\":{\"$timestamp\":{\"t\":%u,\"i\":%u}},\"t\":{\"$numberLong\":\"1\"},\"v\":2,"
                  "\"wall\":{\"$date\":{\"$numberLong\":\"%llu\"}},",
                  b->len ? "," : "", secs, inc, (unsigned long long)secs * 1000ULL);
}

static void plain_insert(strbuf *b, uint32_t secs, uint32_t inc, int id)
{
    head(b, secs, inc);
    strbuf_printf(b, "\"op\":\"i\",\"ns\":\"rst_tags.t\"," UI ",\"o\":{\"_id\":%d}}", id);
}

/* A `c` applyOps on admin.$cmd with one insert, in a session (txnNumber), with prevOpTime prev_inc at the same
 * seconds (0: the null OpTime) and a flag: "partialTxn", "prepare", "count" (count: 2) or NULL. */
static void chain(strbuf *b, uint32_t secs, uint32_t inc, long txn, uint32_t prev_inc, const char *flag, int id)
{
    head(b, secs, inc);
    strbuf_printf(b, "\"op\":\"c\",\"ns\":\"admin.$cmd\"," LSID ",\"txnNumber\":{\"$numberLong\":\"%ld\"},", txn);
    strbuf_printf(b, "\"prevOpTime\":{\"ts\":{\"$timestamp\":{\"t\":%u,\"i\":%u}},\"t\":{\"$numberLong\":\"%d\"}},",
                  prev_inc ? secs : 0, prev_inc, prev_inc ? 1 : -1);
    strbuf_printf(b, "\"o\":{\"applyOps\":[{\"op\":\"i\",\"ns\":\"rst_tags.t\"," UI ",\"o\":{\"_id\":%d}}]", id);
    if (flag && strcmp(flag, "count") == 0) /* the implicit commit of a chain of two entries */
        strbuf_printf(b, ",\"count\":{\"$numberLong\":\"2\"}");
    else if (flag)
        strbuf_printf(b, ",\"%s\":true", flag);
    strbuf_printf(b, "}}");
}

/* commitTransaction (commitTimestamp = the prepare's ts) or abortTransaction of the prepare at prep_inc. */
static void finish(strbuf *b, uint32_t secs, uint32_t inc, long txn, uint32_t prep_inc, bool commit)
{
    head(b, secs, inc);
    strbuf_printf(b, "\"op\":\"c\",\"ns\":\"admin.$cmd\"," LSID ",\"txnNumber\":{\"$numberLong\":\"%ld\"},", txn);
    strbuf_printf(b, "\"prevOpTime\":{\"ts\":{\"$timestamp\":{\"t\":%u,\"i\":%u}},\"t\":{\"$numberLong\":\"1\"}},",
                  secs, prep_inc);
    if (commit)
        strbuf_printf(b, "\"o\":{\"commitTransaction\":1,\"commitTimestamp\":{\"$timestamp\":{\"t\":%u,\"i\":%u}}}}",
                      secs, prep_inc);
    else
        strbuf_printf(b, "\"o\":{\"abortTransaction\":1}}");
}

static void append(mongoc_client_t *c, strbuf *b)
{
    strbuf cmd = {0};
    strbuf_printf(&cmd, "{\"appendOplog\": [%s]}", b->data);
    bson_error_t err;
    bson_t *doc = bson_new_from_json((const uint8_t *)cmd.data, (ssize_t)cmd.len, &err);
    ck_assert_msg(doc != NULL, "bad test JSON: %s", err.message);
    bson_t reply;
    bool ok = mongoc_client_command_simple(c, "admin", doc, NULL, &reply, &err);
    ck_assert_msg(ok, "appendOplog: %s", err.message);
    bson_destroy(&reply);
    bson_destroy(doc);
    free(cmd.data);
    free(b->data);
    memset(b, 0, sizeof *b);
}

/* ---- the reader ---- */

static reader *start(queue *q, const reader_config *base)
{
    reader_config cfg = *base;
    char err[256] = "";
    cfg.uri = mongo_uri();
    cfg.await_ms = AWAIT_MS;
    cfg.batch_size = 100;
    reader *r = reader_start(&cfg, q, err, sizeof err);
    ck_assert_msg(r != NULL, "reader_start: %s", err);
    return r;
}

static op_pos at(uint32_t secs, uint32_t inc)
{
    op_pos p = {.secs = secs, .inc = inc, .term = 1};
    return p;
}

/* Pops the entries at `secs` (and the notes, whatever their position) until one at or after `until` with no more
 * part to follow; a QUEUE_END fails the case. Returns how many, stored (owned) in out. */
static size_t collect(queue *q, uint32_t secs, const op_pos *until, op_entry **out, size_t max)
{
    size_t n = 0;
    double deadline = now_s() + WAIT_S;
    while (now_s() < deadline) {
        queue_item it;
        if (!queue_pop(q, &it)) {
            sleep_ms(5);
            continue;
        }
        if (it.type == QUEUE_END)
            ck_abort_msg("unexpected QUEUE_END (reason %d): %s", (int)it.reason, it.message);
        if (it.type != QUEUE_ENTRY || (it.entry->pos.secs != secs && !it.entry->note_only)) {
            queue_item_clear(&it);
            continue;
        }
        ck_assert_msg(n < max, "more entries than the case wrote");
        op_entry *e = it.entry;
        it.entry = NULL;
        queue_item_clear(&it);
        out[n++] = e;
        if (op_pos_cmp(&e->pos, until) >= 0 && !e->more)
            return n;
    }
    ck_abort_msg("the entry at %u:%u did not come within %.0f s", until->secs, until->inc, WAIT_S);
    return n;
}

static void free_entries(op_entry **e, size_t n)
{
    for (size_t i = 0; i < n; i++)
        op_entry_free(e[i]);
}

static void expect_at(const op_entry *e, uint32_t secs, uint32_t inc)
{
    ck_assert_msg(e->pos.secs == secs && e->pos.inc == inc, "entry at %u:%u, expected %u:%u", e->pos.secs, e->pos.inc,
                  secs, inc);
}

/* ---- the cases ---- */

/* Every entry carries the reader's source; the prepare (a noop), every part of its commitTransaction and an abort
 * carry their role and one key per transaction; partialTxn entries and ordinary ones carry none. */
START_TEST(test_source_and_txn_tags)
{
    mongoc_client_t *c = sim_client();
    if (!c)
        SKIP_TEST("needs mongosim's appendOplog");
    uint32_t s = case_secs(c);
    strbuf b = {0};
    plain_insert(&b, s, 1, 1);
    chain(&b, s, 2, 7, 0, "partialTxn", 2);
    chain(&b, s, 3, 7, 2, "prepare", 3);
    plain_insert(&b, s, 4, 4);
    finish(&b, s, 5, 7, 3, true);
    chain(&b, s, 6, 8, 0, "prepare", 6);
    finish(&b, s, 7, 8, 6, false);
    plain_insert(&b, s, 8, 8);
    append(c, &b);

    queue *q = queue_new(1000, 0);
    reader_config cfg;
    reader_config_init(&cfg);
    cfg.start = at(s, 1);
    cfg.source = 5;
    reader *r = start(q, &cfg);
    op_entry *e[32];
    op_pos end = at(s, 8);
    size_t n = collect(q, s, &end, e, 32);
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(e[i]->source, 5);
        ck_assert(!e[i]->note_only);
    }
    /* (s,2) partialTxn, (s,3) prepare, (s,4) insert, (s,5) the commit in parts, (s,6) prepare, (s,7) abort, (s,8) */
    ck_assert_uint_ge(n, 7);
    expect_at(e[0], s, 2);
    ck_assert_int_eq(e[0]->txn_role, OP_TXN_NONE);
    expect_at(e[1], s, 3);
    ck_assert_int_eq(e[1]->txn_role, OP_TXN_PREPARE);
    ck_assert_int_eq(e[1]->ops[0].kind, OP_NOOP);
    uint64_t k7 = e[1]->txn_key;
    expect_at(e[2], s, 4);
    ck_assert_int_eq(e[2]->txn_role, OP_TXN_NONE);
    size_t i = 3, inserts = 0;
    for (; i < n && e[i]->pos.inc == 5; i++) {
        ck_assert_int_eq(e[i]->txn_role, OP_TXN_COMMIT);
        ck_assert_msg(e[i]->txn_key == k7, "a commit part's key differs from its prepare's");
        ck_assert(e[i]->atomic);
        for (size_t k = 0; k < e[i]->n; k++)
            inserts += e[i]->ops[k].kind == OP_INSERT;
        if (!e[i]->more) {
            i++;
            break;
        }
    }
    ck_assert_msg(!e[i - 1]->more && e[i - 1]->pos.inc == 5, "the commit's last part has more set");
    ck_assert_uint_eq(inserts, 2); /* the partialTxn's and the prepare's */
    ck_assert_uint_eq(n, i + 3);
    expect_at(e[i], s, 6);
    ck_assert_int_eq(e[i]->txn_role, OP_TXN_PREPARE);
    uint64_t k8 = e[i]->txn_key;
    ck_assert_msg(k8 != k7, "two transactions of one session (txnNumber 7 and 8) share a key");
    expect_at(e[i + 1], s, 7);
    ck_assert_int_eq(e[i + 1]->txn_role, OP_TXN_ABORT);
    ck_assert_msg(e[i + 1]->txn_key == k8, "the abort's key differs from its prepare's");
    expect_at(e[i + 2], s, 8);
    ck_assert_int_eq(e[i + 2]->txn_role, OP_TXN_NONE);
    ck_assert_uint_eq(e[i + 2]->txn_key, 0);

    reader_free(r);
    free_entries(e, n);
    queue_free(q);
    mongoc_client_destroy(c);
}
END_TEST

/* A reader whose start is not in the oplog: with start_after it begins at the next entry (no QUEUE_END); an entry at
 * the start itself is skipped whatever its term; a start past the newest entry waits for the next one. Without
 * start_after the same absent start is a lost resume point. */
START_TEST(test_start_after)
{
    mongoc_client_t *c = sim_client();
    if (!c)
        SKIP_TEST("needs mongosim's appendOplog");
    uint32_t s = case_secs(c);
    strbuf b = {0};
    plain_insert(&b, s, 1, 1);
    plain_insert(&b, s, 3, 3);
    plain_insert(&b, s, 5, 5);
    append(c, &b);
    op_entry *e[8];
    reader_config cfg;
    op_pos end = at(s, 5);

    /* (s,2) is not in the oplog */
    queue *q = queue_new(1000, 0);
    reader_config_init(&cfg);
    cfg.start = at(s, 2);
    cfg.start_after = true;
    reader *r = start(q, &cfg);
    size_t n = collect(q, s, &end, e, 8);
    ck_assert_uint_eq(n, 2);
    expect_at(e[0], s, 3);
    expect_at(e[1], s, 5);
    reader_free(r);
    free_entries(e, n);
    queue_free(q);

    /* (s,3) is, under another term than the one given: skipped, not checked */
    q = queue_new(1000, 0);
    reader_config_init(&cfg);
    cfg.start = at(s, 3);
    cfg.start.term = 42;
    cfg.start_after = true;
    r = start(q, &cfg);
    n = collect(q, s, &end, e, 8);
    ck_assert_uint_eq(n, 1);
    expect_at(e[0], s, 5);
    reader_free(r);
    free_entries(e, n);
    queue_free(q);

    /* past the newest entry: the next one written comes */
    q = queue_new(1000, 0);
    reader_config_init(&cfg);
    cfg.start = at(s, 7);
    cfg.start_after = true;
    r = start(q, &cfg);
    plain_insert(&b, s, 6, 6); /* at or before the start: never pushed */
    plain_insert(&b, s, 9, 9);
    append(c, &b);
    end = at(s, 9);
    n = collect(q, s, &end, e, 8);
    ck_assert_uint_eq(n, 1);
    expect_at(e[0], s, 9);
    reader_stats st;
    reader_get_stats(r, &st);
    ck_assert(st.have_last && st.last.secs == s && st.last.inc == 9);
    reader_free(r);
    free_entries(e, n);
    queue_free(q);

    /* the control: the absent start without start_after */
    q = queue_new(1000, 0);
    reader_config_init(&cfg);
    cfg.start = at(s, 2);
    r = start(q, &cfg);
    queue_item it;
    double deadline = now_s() + WAIT_S;
    bool ended = false;
    while (!ended && now_s() < deadline) {
        if (!queue_pop(q, &it)) {
            sleep_ms(5);
            continue;
        }
        ck_assert_msg(it.type != QUEUE_ENTRY || it.entry->pos.secs != s, "an entry pushed past a lost start");
        ended = it.type == QUEUE_END;
        if (ended)
            ck_assert_int_eq(it.reason, QUEUE_END_RESUME_LOST);
        queue_item_clear(&it);
    }
    ck_assert_msg(ended, "no QUEUE_END for an absent start without start_after");
    reader_free(r);
    queue_free(q);
    mongoc_client_destroy(c);
}
END_TEST

/* A prepared transaction open at the start (the checkpoint's hold at its prepare): with report_prepares the reader
 * pushes one note_only prepare at the prepare's position before anything else, then the rest as usual (its commit
 * with the same key); without it, no note; with a start after its commit, none either. */
START_TEST(test_prepares_noted_at_start)
{
    mongoc_client_t *c = sim_client();
    if (!c)
        SKIP_TEST("needs mongosim's appendOplog");
    uint32_t s = case_secs(c);
    strbuf b = {0};
    chain(&b, s, 1, 9, 0, "prepare", 1); /* open at (s,2) */
    plain_insert(&b, s, 2, 2);
    chain(&b, s, 3, 10, 0, "prepare", 3); /* open at (s,4) too, committed after */
    plain_insert(&b, s, 4, 4);
    chain(&b, s, 5, 11, 0, "partialTxn", 5); /* a chain that is not prepared: open at (s,6), no note */
    plain_insert(&b, s, 6, 6);
    finish(&b, s, 7, 9, 1, true);
    finish(&b, s, 8, 10, 3, false);
    chain(&b, s, 9, 11, 5, "count", 9); /* the implicit commit of the partialTxn chain */
    append(c, &b);
    op_entry *e[16];
    reader_config cfg;
    op_pos end = at(s, 9);

    /* with report_prepares, at (s,6): notes for the prepares at (s,1) and (s,3), in that order, first */
    queue *q = queue_new(1000, 0);
    reader_config_init(&cfg);
    cfg.start = at(s, 6);
    cfg.has_hold = true;
    cfg.hold = at(s, 1);
    cfg.report_prepares = true;
    cfg.source = 2;
    reader *r = start(q, &cfg);
    size_t n = collect(q, s, &end, e, 16);
    ck_assert_uint_ge(n, 5);
    for (size_t i = 0; i < 2; i++) {
        ck_assert_msg(e[i]->note_only, "entry %zu at %u:%u is not a note", i, e[i]->pos.secs, e[i]->pos.inc);
        ck_assert_int_eq(e[i]->txn_role, OP_TXN_PREPARE);
        ck_assert_int_eq(e[i]->source, 2);
        ck_assert_uint_eq(e[i]->n, 1);
        ck_assert_int_eq(e[i]->ops[0].kind, OP_NOOP);
    }
    expect_at(e[0], s, 1);
    expect_at(e[1], s, 3);
    ck_assert_msg(e[0]->txn_key != e[1]->txn_key, "two transactions noted with one key");
    size_t i = 2;
    for (; i < n; i++)
        ck_assert_msg(!e[i]->note_only, "a note after the first entry");
    /* (s,7): txnNumber 9's commit, in parts, with the note's key; (s,8): txnNumber 10's abort, with the other's */
    i = 2;
    expect_at(e[i], s, 7);
    for (; i < n && e[i]->pos.inc == 7; i++) {
        ck_assert_int_eq(e[i]->txn_role, OP_TXN_COMMIT);
        ck_assert_msg(e[i]->txn_key == e[0]->txn_key, "the commit's key is not its noted prepare's");
    }
    expect_at(e[i], s, 8);
    ck_assert_int_eq(e[i]->txn_role, OP_TXN_ABORT);
    ck_assert_msg(e[i]->txn_key == e[1]->txn_key, "the abort's key is not its noted prepare's");
    expect_at(e[n - 1], s, 9);
    ck_assert_int_eq(e[n - 1]->txn_role, OP_TXN_NONE); /* an unprepared chain's commit carries no tag */
    reader_stats st;
    reader_get_stats(r, &st);
    ck_assert(st.last.secs == s && st.last.inc == 9); /* the notes did not move the position */
    reader_free(r);
    free_entries(e, n);
    queue_free(q);

    /* the same start without report_prepares: no note */
    q = queue_new(1000, 0);
    cfg.report_prepares = false;
    r = start(q, &cfg);
    n = collect(q, s, &end, e, 16);
    for (size_t k = 0; k < n; k++)
        ck_assert_msg(!e[k]->note_only, "a note without report_prepares");
    expect_at(e[0], s, 7);
    reader_free(r);
    free_entries(e, n);
    queue_free(q);

    /* a start after (s,1)'s commit, hold at (s,3): only (s,3) is noted */
    q = queue_new(1000, 0);
    cfg.report_prepares = true;
    cfg.start = at(s, 7);
    cfg.hold = at(s, 3);
    r = start(q, &cfg);
    n = collect(q, s, &end, e, 16);
    ck_assert(e[0]->note_only);
    expect_at(e[0], s, 3);
    ck_assert(!e[1]->note_only);
    expect_at(e[1], s, 8);
    reader_free(r);
    free_entries(e, n);
    queue_free(q);
    mongoc_client_destroy(c);
}
END_TEST

/* ---- two shards' readers and a transaction across them (mongosim --shards 2) ---- */

/* What a shard's reader pushed for db.c's transactions, until the end of a commit (or timeout). */
typedef struct {
    size_t prepares, commit_parts, plain_txn, updates;
    uint64_t prepare_key, commit_key;
    bool commit_ended, source_ok;
} tags_seen;

static void read_tags(queue *q, uint16_t source, bool want_commit, tags_seen *t)
{
    memset(t, 0, sizeof *t);
    t->source_ok = true;
    double until = now_s() + WAIT_S;
    while (now_s() < until) {
        queue_item it;
        if (!queue_pop(q, &it)) {
            if (!want_commit && t->plain_txn > 0)
                return;
            sleep_ms(5);
            continue;
        }
        ck_assert_msg(it.type != QUEUE_END, "reader ended: %s", it.message);
        if (it.type == QUEUE_ENTRY) {
            op_entry *e = it.entry;
            t->source_ok &= e->source == source;
            for (size_t i = 0; i < e->n; i++)
                t->updates += e->ops[i].kind == OP_UPDATE && e->ops[i].coll && strcmp(e->ops[i].coll, "c") == 0;
            if (e->txn_role == OP_TXN_PREPARE) {
                t->prepares++;
                t->prepare_key = e->txn_key;
            } else if (e->txn_role == OP_TXN_COMMIT) {
                t->commit_parts++;
                t->commit_key = e->txn_key;
                t->commit_ended = !e->more;
            } else if (e->atomic && e->txn_role == OP_TXN_NONE) {
                t->plain_txn++;
            }
            bool done = want_commit && t->commit_ended;
            queue_item_clear(&it);
            if (done)
                return;
            continue;
        }
        queue_item_clear(&it);
    }
}

/* Each shard's reader tags its part of a transaction across shards: a prepare and a commit with one key, the same
 * on both shards (the router's lsid and txnNumber), each entry stamped with its reader's source; a later transaction
 * on one shard alone (no prepare) carries no tag. */
START_TEST(test_readers_tag_a_cross_shard_transaction)
{
    simcluster cl;
    char err[512] = "";
    if (!simcluster_start(2, NULL, NULL, &cl, err, sizeof err))
        SKIP_TEST("needs mongosim --shards");
    ck_assert_uint_eq(cl.n, 2);
    char uri[2][128];
    simcluster_router_uri(&cl, uri[0], sizeof uri[0]);
    mongoc_client_t *router = mongoc_client_new(uri[0]);
    ck_assert_ptr_nonnull(router);
    simcluster_cmd_ok(router, "admin",
                      BCON_NEW("shardCollection", BCON_UTF8("db.c"), "key", "{", "k", BCON_INT32(1), "}"), NULL);
    simcluster_cmd_ok(router, "admin", BCON_NEW("split", BCON_UTF8("db.c"), "middle", "{", "k", BCON_INT64(5), "}"),
                      NULL);
    mongoc_collection_t *coll = mongoc_client_get_collection(router, "db", "c");
    for (int64_t k = 0; k < 10; k++) {
        bson_t *doc = BCON_NEW("_id", BCON_INT64(k), "k", BCON_INT64(k), "v", BCON_INT32(0));
        ck_assert_msg(mongoc_collection_insert_one(coll, doc, NULL, NULL, NULL), "insert %d", (int)k);
        bson_destroy(doc);
    }
    mongoc_collection_destroy(coll);
    simcluster_cmd_ok(
        router, "admin",
        BCON_NEW("moveChunk", BCON_UTF8("db.c"), "find", "{", "k", BCON_INT64(7), "}", "to", BCON_UTF8("shard1")),
        NULL);

    queue *q[2];
    reader *r[2];
    for (uint16_t i = 0; i < 2; i++) {
        simcluster_shard_uri(&cl, i, uri[i], sizeof uri[i]);
        mongoc_client_t *sc = mongoc_client_new(uri[i]);
        ck_assert_ptr_nonnull(sc);
        uint64_t newest;
        bson_error_t e;
        ck_assert_msg(oplogutil_newest_ts(sc, &newest, &e), "%s", e.message);
        reader_config cfg;
        reader_config_init(&cfg);
        cfg.uri = uri[i];
        cfg.await_ms = AWAIT_MS;
        cfg.start = at((uint32_t)(newest >> 32), (uint32_t)newest);
        cfg.start_after = true; /* the term is not checked: a shard with no checkpoint of its own */
        cfg.source = i;
        q[i] = queue_new(1000, 0);
        r[i] = reader_start(&cfg, q[i], err, sizeof err);
        ck_assert_msg(r[i] != NULL, "%s", err);
        mongoc_client_destroy(sc);
    }
    simcluster_txn_inc_two(router, 1, 6, false); /* _id 1 on shard0, _id 6 on shard1 */
    tags_seen t[2];
    for (uint16_t i = 0; i < 2; i++) {
        read_tags(q[i], i, true, &t[i]);
        ck_assert_msg(t[i].commit_ended, "shard%u: no commit within %.0f s", i, WAIT_S);
        ck_assert_uint_eq(t[i].prepares, 1);
        ck_assert_uint_ge(t[i].commit_parts, 1);
        ck_assert_uint_eq(t[i].updates, 1);
        ck_assert(t[i].source_ok);
        ck_assert_msg(t[i].prepare_key == t[i].commit_key, "shard%u: prepare and commit keys differ", i);
    }
    ck_assert_msg(t[0].commit_key == t[1].commit_key, "the participants' keys differ");

    simcluster_txn_inc_two(router, 6, 8, false); /* both on shard1: no two-phase commit */
    read_tags(q[1], 1, false, &t[1]);
    ck_assert_uint_eq(t[1].plain_txn, 1);
    ck_assert_uint_eq(t[1].prepares + t[1].commit_parts, 0);
    ck_assert_uint_eq(t[1].updates, 2);

    for (int i = 0; i < 2; i++) {
        reader_free(r[i]);
        queue_free(q[i]);
    }
    mongoc_client_destroy(router);
    simcluster_stop(&cl);
}
END_TEST

Suite *reader_shard_tags_suite(void)
{
    Suite *s = suite_create("reader_shard_tags");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_source_and_txn_tags);
    tcase_add_test(tc, test_start_after);
    tcase_add_test(tc, test_prepares_noted_at_start);
    tcase_add_test(tc, test_readers_tag_a_cross_shard_transaction);
    suite_add_tcase(s, tc);
    return s;
}

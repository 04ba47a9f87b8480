/*
 * test_txn.c — MongoDB transactions written over several oplog entries, replicated exactly once (source/txn.h).
 *
 * The chains are appended verbatim to mongosim's oplog (appendOplog) in the shapes a 4.2+ server writes: partialTxn
 * entries linked by prevOpTime and ended by the implicit commit (count), or by prepare and a later
 * commitTransaction / abortTransaction; 6.0+ batched writes without lsid; 8.0 vectored inserts (multiOpType: 1); the
 * mongo-tools scenarios of tests/vectors/fixture_txn_scenarios_mongo-tools.json. Ordinary entries sit in between.
 * appendOplog changes the oplog only, so every expected state is written to a second mongosim (the reference)
 * through the driver, and each test ends with the exact comparison of PostgreSQL with that reference
 * (tests/lib/compare.h: every row of every collection of the test's databases, and no table more). The mongo-tools
 * scenarios are also replayed from a dump of the same oplog (`replay`), into a PostgreSQL database of their own.
 *
 * Waits are on events (the checkpoint reaching the newest entry, a line of the daemon's log, the daemon's exit, a
 * PostgreSQL backend holding a transaction id), never on time. The schema-upgrade case works in a PostgreSQL
 * database of its own. mongosim only (appendOplog): against a real replica set every case skips (skip.h).
 *
 * mongosim builds its change streams from the same oplog, so the shapes (tcase `shapes`) also run through the
 * change-stream source (tests/integration/run.sh: txn:shapes, with change_stream_updates = description and raw) and
 * must end at the same reference; the cases about the oplog reader's own handling of chains skip there.
 */
#include <check.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../lib/compare.h"
#include "../lib/daemonenv.h"
#include "../lib/oplogutil.h"
#include "../lib/skip.h"
#include "../lib/textfile.h"
#include "core/op.h"
#include "util/strbuf.h"

#define UI   "\"ui\":{\"$binary\":{\"base64\":\"4p4kSLicSracQeNvveXz3g==\",\"subType\":\"04\"}}"
#define LSID "\"lsid\":{\"id\":{\"$binary\":{\"base64\":\"CK+8+nZ+Eem9p6vK9BEt9g==\",\"subType\":\"04\"}}}"

/* ---- the environment: the daemon's mongosim, the reference mongosim ---- */

typedef struct {
    denv e;
    proc_handle ref;
    char ref_uri[256];
    mongoc_client_t *src, *refc;
    uint32_t secs, inc; /* the last ts handed out */
    char db[64];        /* the test's database (rep_NAME_a) */
    strbuf batch;       /* entries waiting for append() */
} tenv;

/* Every case first: the chains are written into the oplog verbatim, which only mongosim's appendOplog does. */
#define NEED_APPEND_OPLOG()                                                                                            \
    do {                                                                                                               \
        if (!denv_using_sim())                                                                                         \
            SKIP_TEST("needs mongosim's appendOplog");                                                                 \
    } while (0)

/* A case about the oplog reader's own handling of chains (a chain's first entry, the walk back from a commit, the
 * hold on an open chain stored with the checkpoint): a change stream has none of it, the server unwinding each
 * transaction into events at its commit's clusterTime, so through one (OPLOG2PG_TEST_SOURCE=change_stream, as
 * tests/integration/run.sh's stream pass sets) the case skips. The transaction shapes themselves run there. */
#define OPLOG_SOURCE_ONLY(why)                                                                                         \
    do {                                                                                                               \
        const char *src_ = getenv("OPLOG2PG_TEST_SOURCE");                                                             \
        if (src_ != NULL && strcmp(src_, "change_stream") == 0)                                                        \
            SKIP_TEST("the oplog source only: %s", why);                                                               \
    } while (0)

/* The environment without the daemon (t_start starts it). */
static void t_setup(tenv *t, const char *name, const char *extra_ini)
{
    memset(t, 0, sizeof *t);
    ck_assert_msg(denv_using_sim(), "txn %s: a case that needs appendOplog runs without NEED_APPEND_OPLOG()", name);
    denv_start(&t->e, name, NULL, extra_ini);
    char err[512], log[300];
    snprintf(log, sizeof log, "%s/reference.log", t->e.dir);
    ck_assert_msg(proc_start_mongosim(NULL, log, &t->ref, err, sizeof err), "%s", err);
    snprintf(t->ref_uri, sizeof t->ref_uri, "mongodb://127.0.0.1:%d/?replicaSet=rs0", t->ref.port);
    t->src = mongoc_client_new(t->e.uri);
    t->refc = mongoc_client_new(t->ref_uri);
    ck_assert_ptr_nonnull(t->src);
    ck_assert_ptr_nonnull(t->refc);
    uint64_t newest = denv_newest_ts(t->e.uri);
    t->secs = (uint32_t)(newest >> 32) + 100;
    t->inc = 0;
    snprintf(t->db, sizeof t->db, "%sa", t->e.prefix);
}

static void t_start(tenv *t, const char *name, const char *extra_ini)
{
    t_setup(t, name, extra_ini);
    /* The first run copies (nothing) and takes the newest entry as its start: anything appended before it had
     * caught up would count as copied. */
    denv_daemon_start(&t->e);
    ck_assert_msg(denv_wait_caught_up(&t->e, 120), "the daemon did not start");
}

static void t_stop(tenv *t)
{
    mongoc_client_destroy(t->src);
    mongoc_client_destroy(t->refc);
    proc_stop(&t->ref, 10);
    free(t->batch.data);
    denv_stop(&t->e);
}

static op_pos next_ts(tenv *t)
{
    op_pos p = {.secs = t->secs, .inc = ++t->inc, .term = 1};
    return p;
}

/* Appends the entries gathered in t->batch to the daemon's oplog, verbatim. */
static void append(tenv *t)
{
    if (t->batch.len == 0)
        return;
    strbuf cmd = {0};
    strbuf_printf(&cmd, "{\"appendOplog\": [%s]}", t->batch.data);
    bson_error_t err;
    bson_t *c = bson_new_from_json((const uint8_t *)cmd.data, (ssize_t)cmd.len, &err);
    ck_assert_msg(c != NULL, "bad test JSON: %s", err.message);
    bson_t reply;
    bool ok = mongoc_client_command_simple(t->src, "admin", c, NULL, &reply, &err);
    ck_assert_msg(ok, "appendOplog: %s", err.message);
    bson_destroy(&reply);
    bson_destroy(c);
    free(cmd.data);
    strbuf_reset(&t->batch, 1 << 20);
}

static void entry_head(tenv *t, const op_pos *ts)
{
    strbuf_printf(&t->batch,
                  "%s{\"ts\":{\"$timestamp\":{\"t\":%u,\"i\":%u}},\"t\":{\"$numberLong\":\"1\"},\"v\":2,"
                  "\"wall\":{\"$date\":{\"$numberLong\":\"%llu\"}},",
                  t->batch.len ? "," : "", ts->secs, ts->inc, (unsigned long long)ts->secs * 1000ULL);
}

/* One change, as an inner op of an applyOps, as an ordinary entry, and applied to the reference. */
typedef struct {
    char kind; /* 'i', 'u' (x = new value), 'd' */
    const char *coll;
    int id, x;
} change;

static void change_json(tenv *t, strbuf *b, const change *c)
{
    switch (c->kind) {
    case 'i':
        strbuf_printf(b, "\"op\":\"i\",\"ns\":\"%s.%s\"," UI ",\"o\":{\"_id\":%d,\"x\":%d,\"pad\":\"%0200d\"}", t->db,
                      c->coll, c->id, c->x, c->id);
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

static void ref_apply(tenv *t, const change *c)
{
    mongoc_collection_t *coll = mongoc_client_get_collection(t->refc, t->db, c->coll);
    bson_error_t err;
    bool ok;
    char pad[256];
    snprintf(pad, sizeof pad, "%0200d", c->id);
    if (c->kind == 'i') {
        bson_t *d = BCON_NEW("_id", BCON_INT32(c->id), "x", BCON_INT32(c->x), "pad", BCON_UTF8(pad));
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

/* An ordinary entry with one change (applied to the reference too). */
static op_pos plain(tenv *t, const change *c)
{
    op_pos ts = next_ts(t);
    entry_head(t, &ts);
    change_json(t, &t->batch, c);
    strbuf_printf(&t->batch, "}");
    ref_apply(t, c);
    return ts;
}

enum { NO_FLAG = 0, F_PARTIAL, F_PREPARE, F_COUNT };

/* A `c` applyOps entry on admin.$cmd holding changes[0..n), with prevOpTime prev (NULL: the null OpTime), with or
 * without a session, and the flag; the changes are not applied to the reference (the caller decides: a committed
 * transaction's are, an aborted one's not). */
static op_pos chain_entry(tenv *t, const op_pos *prev, bool lsid, int flag, long count, const change *changes, size_t n)
{
    op_pos ts = next_ts(t);
    entry_head(t, &ts);
    strbuf_printf(&t->batch, "\"op\":\"c\",\"ns\":\"admin.$cmd\",");
    if (lsid)
        strbuf_printf(&t->batch, LSID ",\"txnNumber\":{\"$numberLong\":\"7\"},");
    strbuf_printf(&t->batch,
                  "\"prevOpTime\":{\"ts\":{\"$timestamp\":{\"t\":%u,\"i\":%u}},\"t\":{\"$numberLong\":\"%d\"}},",
                  prev ? prev->secs : 0, prev ? prev->inc : 0, prev ? 1 : -1);
    strbuf_printf(&t->batch, "\"o\":{\"applyOps\":[");
    for (size_t i = 0; i < n; i++) {
        strbuf_printf(&t->batch, "%s{", i ? "," : "");
        change_json(t, &t->batch, &changes[i]);
        strbuf_printf(&t->batch, "}");
    }
    strbuf_printf(&t->batch, "]");
    if (flag == F_PARTIAL)
        strbuf_printf(&t->batch, ",\"partialTxn\":true");
    else if (flag == F_PREPARE)
        strbuf_printf(&t->batch, ",\"prepare\":true");
    else if (flag == F_COUNT)
        strbuf_printf(&t->batch, ",\"count\":{\"$numberLong\":\"%ld\"}", count);
    strbuf_printf(&t->batch, "}}");
    return ts;
}

/* {commitTransaction: 1, commitTimestamp} or {abortTransaction: 1} for the prepare entry at prev. */
static op_pos finish_prepared(tenv *t, const op_pos *prev, bool commit)
{
    op_pos ts = next_ts(t);
    entry_head(t, &ts);
    strbuf_printf(&t->batch, "\"op\":\"c\",\"ns\":\"admin.$cmd\"," LSID ",\"txnNumber\":{\"$numberLong\":\"7\"},");
    strbuf_printf(&t->batch,
                  "\"prevOpTime\":{\"ts\":{\"$timestamp\":{\"t\":%u,\"i\":%u}},\"t\":{\"$numberLong\":\"1\"}},",
                  prev->secs, prev->inc);
    if (commit)
        strbuf_printf(&t->batch,
                      "\"o\":{\"commitTransaction\":1,\"commitTimestamp\":{\"$timestamp\":{\"t\":%u,\"i\":%u}}}}",
                      prev->secs, prev->inc);
    else
        strbuf_printf(&t->batch, "\"o\":{\"abortTransaction\":1}}");
    return ts;
}

static void ref_apply_all(tenv *t, const change *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ref_apply(t, &c[i]);
}

/* Rows of the test database's collection in PostgreSQL (0 when it has no table yet). */
static int64_t pg_rows(tenv *t, const char *coll)
{
    char sql[512], exists[8];
    snprintf(sql, sizeof sql, "SELECT (to_regclass('\"%s\".\"%s\"') IS NOT NULL)::text", t->db, coll);
    denv_pg_text(sql, exists, sizeof exists);
    if (strcmp(exists, "true") != 0)
        return 0;
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\".\"%s\"", t->db, coll);
    return denv_pg_int(sql);
}

/* Exactly the reference, for the test's databases, in the PostgreSQL database of conninfo. */
static void expect_reference_on(tenv *t, const char *conninfo)
{
    PGconn *pg = PQconnectdb(conninfo);
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    compare_options opts = {.db_prefix = t->e.prefix};
    compare_report rep;
    char err[512];
    bool ran = compare_all(t->ref_uri, pg, &opts, &rep, err, sizeof err);
    if (ran && !rep.match) {
        compare_report_print(&rep, stderr, false);
        denv_show_log(&t->e);
    }
    bool match = ran && rep.match;
    int64_t rows = rep.source_rows;
    compare_report_free(&rep);
    PQfinish(pg);
    ck_assert_msg(ran, "compare failed to run: %s", err);
    ck_assert_msg(match, "PostgreSQL differs from the reference (see above)");
    ck_assert_msg(rows > 0, "nothing to compare");
}

static void expect_reference(tenv *t)
{
    expect_reference_on(t, denv_pg_conninfo());
}

static void caught_up(tenv *t)
{
    ck_assert_msg(denv_wait_caught_up(&t->e, 120), "the daemon did not catch up");
}

static void stop_daemon(tenv *t)
{
    ck_assert_msg(proc_stop(&t->e.daemon, 30), "the daemon did not stop on SIGTERM");
    if (proc_exit_code(&t->e.daemon) != 0)
        denv_show_log(&t->e);
    ck_assert_int_eq(proc_exit_code(&t->e.daemon), 0);
}

/* The hold stored with the service's checkpoint (txn_oldest_sec/inc) in the PostgreSQL database of conninfo: "S:I",
 * or "none" when both are NULL. */
static void stored_hold(tenv *t, const char *conninfo, char *out, size_t len)
{
    PGconn *pg = PQconnectdb(conninfo);
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    const char *params[1] = {t->e.service};
    PGresult *r = PQexecParams(pg,
                               "SELECT CASE WHEN txn_oldest_sec IS NULL AND txn_oldest_inc IS NULL THEN 'none' ELSE "
                               "coalesce(txn_oldest_sec::text, 'NULL') || ':' || coalesce(txn_oldest_inc::text, "
                               "'NULL') END FROM oplog2pg.checkpoint WHERE service = $1",
                               1, NULL, params, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1, "reading the hold: %s",
                  PQerrorMessage(pg));
    snprintf(out, len, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    PQfinish(pg);
}

/* The checkpoint's hold is exactly `want` (NULL: none). */
static void expect_hold_on(tenv *t, const char *conninfo, const op_pos *want)
{
    char have[64], w[OP_POS_STRLEN] = "none";
    stored_hold(t, conninfo, have, sizeof have);
    if (want)
        op_pos_format(want, w, sizeof w);
    ck_assert_msg(strcmp(have, w) == 0, "the checkpoint's hold is %s, not %s", have, w);
}

static void expect_hold(tenv *t, const op_pos *want)
{
    expect_hold_on(t, denv_pg_conninfo(), want);
}

/* Waits until the checkpoint in the database of conninfo reaches the newest oplog entry (denv_wait_caught_up reads
 * the test cluster's default database); aborts when the daemon exits or after 120 s. */
static void caught_up_on(tenv *t, const char *conninfo)
{
    PGconn *pg = PQconnectdb(conninfo);
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    double until = denv_now() + 120;
    for (;;) {
        uint64_t want = denv_newest_ts(t->e.uri), have = oplogutil_checkpoint_ts(pg, t->e.service);
        if (want != 0 && have == want)
            break;
        if (proc_wait(&t->e.daemon, 0.0)) {
            denv_show_log(&t->e);
            ck_abort_msg("the daemon exited with %d while catching up", proc_exit_code(&t->e.daemon));
        }
        ck_assert_msg(denv_now() < until, "the daemon did not catch up");
        usleep(50 * 1000);
    }
    PQfinish(pg);
}

/* A mongosim test command on the daemon's mongosim. */
static void sim_cmd(tenv *t, bson_t *cmd)
{
    bson_error_t err;
    ck_assert_msg(mongoc_client_command_simple(t->src, "admin", cmd, NULL, NULL, &err), "%s", err.message);
    bson_destroy(cmd);
}

/* `oplog2pg status` and `status --json` say exactly this about an open transaction: its first entry `hold`, or
 * nothing (NULL). */
static void expect_status(tenv *t, const op_pos *hold)
{
    char out[300], line[400], at[OP_POS_STRLEN], when[64];
    snprintf(out, sizeof out, "%s/status.out", t->e.dir);
    if (hold) {
        time_t secs = (time_t)hold->secs;
        struct tm tm;
        gmtime_r(&secs, &tm);
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
        op_pos_format(hold, at, sizeof at);
    }

    const char *text_args[] = {"-c", t->e.ini, "status", NULL};
    ck_assert_int_eq(denv_run_command(&t->e, text_args, out), 0);
    char *text = textfile_read(out);
    ck_assert_ptr_nonnull(text);
    if (hold) {
        snprintf(line, sizeof line,
                 "\n  transaction:   an open transaction (since %s) holds the oplog window at %s: a restart reads it "
                 "again from there\n",
                 when, at);
        ck_assert_msg(strstr(text, line) != NULL, "status does not say%s\nit says:\n%s", line, text);
        ck_assert_msg(strstr(text, " of oplog before the open transaction's first entry would fall off\n") != NULL,
                      "status does not measure the margin from the open transaction:\n%s", text);
    } else {
        ck_assert_msg(strstr(text, "transaction:") == NULL, "status still shows an open transaction:\n%s", text);
        ck_assert_msg(strstr(text, " of oplog before the checkpoint would fall off\n") != NULL,
                      "status does not measure the margin from the checkpoint:\n%s", text);
    }
    free(text);

    const char *json_args[] = {"-c", t->e.ini, "status", "--json", NULL};
    ck_assert_int_eq(denv_run_command(&t->e, json_args, out), 0);
    text = textfile_read(out);
    ck_assert_ptr_nonnull(text);
    if (hold)
        snprintf(line, sizeof line, ", \"open_transaction\": {\"since\": \"%s\", \"time\": \"%s\"}, ", at, when);
    else
        snprintf(line, sizeof line, ", \"open_transaction\": null, ");
    const char *found = strstr(text, line);
    ck_assert_msg(found != NULL, "status --json lacks '%s'; it says:\n%s", line, text);
    ck_assert_msg(strstr(found + strlen(line), "\"open_transaction\"") == NULL, "open_transaction twice:\n%s", text);
    free(text);
}

/* ---- the cases ---- */

/* An unprepared chain of four entries (three partialTxn, the implicit commit with count) with ordinary entries in
 * between: nothing of it is visible while only its partial entries have been read (the daemon has caught up with
 * them, so they are committed past), and all of it once the commit comes. */
START_TEST(test_implicit_commit_atomic)
{
    NEED_APPEND_OPLOG();
    tenv t;
    t_start(&t, "txn_imp", NULL);
    change pre[] = {{'i', "t", 100, 1}, {'i', "t", 101, 1}};
    for (size_t i = 0; i < 2; i++)
        plain(&t, &pre[i]);
    change c1[] = {{'i', "t", 1, 1}, {'i', "t", 2, 2}}, c2[] = {{'u', "t", 1, 10}, {'i', "t", 3, 3}},
           c3[] = {{'d', "t", 100, 0}, {'i', "u", 1, 1}}, c4[] = {{'u', "t", 101, 5}, {'i', "t", 4, 4}};
    change o1 = {'i', "o", 1, 1}, o2 = {'i', "o", 2, 2}, o3 = {'i', "o", 3, 3};
    op_pos p1 = chain_entry(&t, NULL, true, F_PARTIAL, 0, c1, 2);
    plain(&t, &o1);
    op_pos p2 = chain_entry(&t, &p1, true, F_PARTIAL, 0, c2, 2);
    op_pos p3 = chain_entry(&t, &p2, true, F_PARTIAL, 0, c3, 2);
    plain(&t, &o2);
    append(&t);
    caught_up(&t);
    /* Held back: the commit entry is not in the oplog yet. */
    ck_assert_int_eq(pg_rows(&t, "t"), 2);
    ck_assert_int_eq(pg_rows(&t, "u"), 0);
    ck_assert_int_eq(pg_rows(&t, "o"), 2);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM \"rep_txn_imp_a\".\"t\" WHERE doc->>'x' = '1' AND _id = '100'"),
                     1);
    chain_entry(&t, &p3, true, F_COUNT, 8, c4, 2);
    plain(&t, &o3);
    ref_apply_all(&t, c1, 2);
    ref_apply_all(&t, c2, 2);
    ref_apply_all(&t, c3, 2);
    ref_apply_all(&t, c4, 2);
    append(&t);
    caught_up(&t);
    expect_reference(&t);
    t_stop(&t);
}
END_TEST

/* The forward read takes a chain entry's ops a window at a time ($slice on o.applyOps: 16 ops, then about 1 MB):
 * entries of exactly 16 ops (the second window comes back empty: for a partial entry nothing is added, for the commit
 * entry the empty window ends the transaction), entries of 50 ops over several windows, updates in later windows of
 * rows inserted in earlier ones, and a prepared chain whose commitTransaction has no ops: each applied whole. */
START_TEST(test_windows)
{
    NEED_APPEND_OPLOG();
    tenv t;
    t_start(&t, "txn_win", NULL);
    int id = 1;
    change a[16], b[50], c[16];
    for (int i = 0; i < 16; i++)
        a[i] = (change){'i', "t", id, id}, id++;
    for (int i = 0; i < 40; i++)
        b[i] = (change){'i', "t", id, id}, id++;
    for (int i = 40; i < 50; i++) /* rows of an earlier window of this entry, then of the entry before */
        b[i] = (change){'u', "t", i < 45 ? 17 + (i - 40) : 1 + (i - 45), 500 + i};
    for (int i = 0; i < 16; i++)
        c[i] = i % 2 ? (change){'u', "t", i, 900 + i} : (change){'i', "u", id++, i};
    op_pos p1 = chain_entry(&t, NULL, true, F_PARTIAL, 0, a, 16);
    op_pos p2 = chain_entry(&t, &p1, true, F_PARTIAL, 0, b, 50);
    chain_entry(&t, &p2, true, F_COUNT, 82, c, 16);
    ref_apply_all(&t, a, 16);
    ref_apply_all(&t, b, 50);
    ref_apply_all(&t, c, 16);
    change o = {'i', "o", 1, 1};
    plain(&t, &o);
    append(&t);
    caught_up(&t);
    expect_reference(&t);

    /* prepared, with entries of 50 and 16 ops, committed by commitTransaction */
    change d[50], e[16];
    for (int i = 0; i < 50; i++)
        d[i] = (change){'i', "p", 1000 + i, i};
    for (int i = 0; i < 16; i++)
        e[i] = (change){'u', "p", 1000 + i, 2000 + i};
    op_pos q1 = chain_entry(&t, NULL, true, F_PARTIAL, 0, d, 50);
    op_pos q2 = chain_entry(&t, &q1, true, F_PREPARE, 0, e, 16);
    finish_prepared(&t, &q2, true);
    ref_apply_all(&t, d, 50);
    ref_apply_all(&t, e, 16);
    append(&t);
    caught_up(&t);
    expect_reference(&t);
    t_stop(&t);
}
END_TEST

/* A prepared chain (two partialTxn entries and the prepare) committed by a later commitTransaction, a single-entry
 * prepared transaction aborted, ordinary entries in between: the committed one appears whole at the commit, the
 * aborted one leaves no trace. */
START_TEST(test_prepared_commit_and_abort)
{
    NEED_APPEND_OPLOG();
    tenv t;
    t_start(&t, "txn_prep", NULL);
    change c1[] = {{'i', "t", 1, 1}, {'i', "t", 2, 2}}, c2[] = {{'i', "t", 3, 3}}, c3[] = {{'u', "t", 2, 20}};
    change a1[] = {{'i', "gone", 1, 1}, {'i', "t", 99, 99}};
    change o1 = {'i', "o", 1, 1}, o2 = {'i', "o", 2, 2}, o3 = {'i', "o", 3, 3}, o4 = {'i', "o", 4, 4};
    op_pos p1 = chain_entry(&t, NULL, true, F_PARTIAL, 0, c1, 2);
    op_pos p2 = chain_entry(&t, &p1, true, F_PARTIAL, 0, c2, 1);
    plain(&t, &o1);
    op_pos prep = chain_entry(&t, &p2, true, F_PREPARE, 4, c3, 1);
    op_pos aprep = chain_entry(&t, NULL, true, F_PREPARE, 0, a1, 2);
    plain(&t, &o2);
    append(&t);
    caught_up(&t);
    ck_assert_int_eq(pg_rows(&t, "t"), 0); /* prepared, not committed: nothing */
    ck_assert_int_eq(pg_rows(&t, "o"), 2);
    finish_prepared(&t, &aprep, false);
    plain(&t, &o3);
    append(&t);
    caught_up(&t);
    ck_assert_int_eq(pg_rows(&t, "t"), 0);
    ck_assert_int_eq(pg_rows(&t, "gone"), 0);
    finish_prepared(&t, &prep, true);
    plain(&t, &o4);
    ref_apply_all(&t, c1, 2);
    ref_apply_all(&t, c2, 1);
    ref_apply_all(&t, c3, 1);
    append(&t);
    caught_up(&t);
    ck_assert_int_eq(pg_rows(&t, "gone"), 0);
    expect_reference(&t);
    t_stop(&t);
}
END_TEST

/* 6.0+ batched writes: a chain without lsid/txnNumber; 8.0 vectored inserts (multiOpType: 1, not a transaction, each
 * linked to the previous by prevOpTime as retryable writes are); 4.0's single-entry transaction. */
START_TEST(test_no_lsid_and_vectored)
{
    NEED_APPEND_OPLOG();
    tenv t;
    t_start(&t, "txn_nolsid", NULL);
    change pre[] = {{'i', "b", 1, 1}, {'i', "b", 2, 2}, {'i', "b", 3, 3}, {'i', "b", 4, 4}};
    for (size_t i = 0; i < 4; i++)
        plain(&t, &pre[i]);
    change d1[] = {{'d', "b", 1, 0}, {'d', "b", 2, 0}}, d2[] = {{'d', "b", 3, 0}};
    op_pos p1 = chain_entry(&t, NULL, false, F_PARTIAL, 0, d1, 2);
    append(&t);
    caught_up(&t);
    ck_assert_int_eq(pg_rows(&t, "b"), 4);
    chain_entry(&t, &p1, false, F_COUNT, 3, d2, 1);
    ref_apply_all(&t, d1, 2);
    ref_apply_all(&t, d2, 1);
    /* vectored inserts: two applyOps with lsid and multiOpType 1, the second's prevOpTime the first */
    change v1[] = {{'i', "v", 1, 1}, {'i', "v", 2, 2}}, v2[] = {{'i', "v", 3, 3}};
    for (int k = 0; k < 2; k++) {
        op_pos ts = next_ts(&t);
        entry_head(&t, &ts);
        strbuf_printf(&t.batch, "\"op\":\"c\",\"ns\":\"admin.$cmd\"," LSID ",\"txnNumber\":{\"$numberLong\":\"9\"},"
                                "\"multiOpType\":1,\"stmtId\":[0],");
        strbuf_printf(&t.batch,
                      "\"prevOpTime\":{\"ts\":{\"$timestamp\":{\"t\":%u,\"i\":%u}},\"t\":{\"$numberLong\":\"1\"}},",
                      k ? ts.secs : 0, k ? ts.inc - 1 : 0);
        strbuf_printf(&t.batch, "\"o\":{\"applyOps\":[");
        const change *v = k ? v2 : v1;
        size_t n = k ? 1 : 2;
        for (size_t i = 0; i < n; i++) {
            strbuf_printf(&t.batch, "%s{", i ? "," : "");
            change_json(&t, &t.batch, &v[i]);
            strbuf_printf(&t.batch, "}");
        }
        strbuf_printf(&t.batch, "]}}");
        ref_apply_all(&t, v, n);
    }
    /* 4.0: the whole transaction in one applyOps, lsid and txnNumber, no prevOpTime field */
    change s1[] = {{'i', "s", 1, 1}, {'u', "s", 1, 2}};
    op_pos ts = next_ts(&t);
    entry_head(&t, &ts);
    strbuf_printf(&t.batch, "\"op\":\"c\",\"ns\":\"admin.$cmd\"," LSID ",\"txnNumber\":{\"$numberLong\":\"11\"},"
                            "\"o\":{\"applyOps\":[{");
    change_json(&t, &t.batch, &s1[0]);
    strbuf_printf(&t.batch, "},{");
    change_json(&t, &t.batch, &s1[1]);
    strbuf_printf(&t.batch, "}]}}");
    ref_apply_all(&t, s1, 2);
    append(&t);
    caught_up(&t);
    expect_reference(&t);
    t_stop(&t);
}
END_TEST

/* A transaction of more than a thousand changes over two collections (three partialTxn entries of 400 inserts, the
 * commit entry's 200 updates and 100 deletes of rows inserted by the earlier entries and 50 inserts elsewhere),
 * ordinary entries before, between and after: exactly the reference. Through a change stream its 1 550 events are
 * handed to the batcher in parts that commit together (docs/sources.md, "Transactions"). */
START_TEST(test_large_in_parts)
{
    NEED_APPEND_OPLOG();
    tenv t;
    t_start(&t, "txn_large", NULL);
    enum { PER = 400 };
    static change c[PER];
    change o = {'i', "o", 1, 1};
    plain(&t, &o);
    op_pos prev = {0, 0, -1};
    int id = 1;
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < PER; i++)
            c[i] = (change){'i', "t", id, id}, id++;
        prev = chain_entry(&t, k ? &prev : NULL, true, F_PARTIAL, 0, c, PER);
        ref_apply_all(&t, c, PER);
        if (k == 1) {
            o.id = 2;
            plain(&t, &o);
        }
    }
    size_t n = 0;
    for (int i = 0; i < 200; i++)
        c[n++] = (change){'u', "t", 1 + i * 5, 7000 + i};
    for (int i = 0; i < 100; i++)
        c[n++] = (change){'d', "t", 3 + i * 11, 0};
    for (int i = 0; i < 50; i++)
        c[n++] = (change){'i', "u", 1 + i, i};
    chain_entry(&t, &prev, true, F_COUNT, 3 * PER + (long)n, c, n);
    ref_apply_all(&t, c, n);
    o.id = 3;
    plain(&t, &o);
    append(&t);
    caught_up(&t);
    ck_assert_int_eq(pg_rows(&t, "t"), 3 * PER - 100);
    expect_reference(&t);
    t_stop(&t);
}
END_TEST

/* Restart anywhere: for every entry k from just before the chain to just after its commit, the daemon starts with
 * its checkpoint at k (--tail-from) and PostgreSQL as a crash at k would have left it (the ordinary rows of entries
 * after k removed; the transaction's rows removed while k is before its commit), and must end exactly at the
 * reference. */
START_TEST(test_restart_anywhere)
{
    NEED_APPEND_OPLOG();
    tenv t;
    t_start(&t, "txn_rst", NULL);
    enum { MAXE = 32 };
    op_pos ts[MAXE];
    int oid[MAXE]; /* the ordinary insert's _id in collection o, or 0 for a chain entry */
    size_t n = 0;
    change o = {'i', "o", 0, 0};
    o.id = 1;
    ts[n] = plain(&t, &o), oid[n++] = 1;
    op_pos prev = {0, 0, -1};
    bool have_prev = false;
    int tid = 1;
    for (int k = 0; k < 6; k++) {
        change c[3] = {{'i', "t", tid, tid}, {'i', "t", tid + 1, tid + 1}, {'i', "t", tid + 2, tid + 2}};
        tid += 3;
        ts[n] = chain_entry(&t, have_prev ? &prev : NULL, true, F_PARTIAL, 0, c, 3), oid[n++] = 0;
        ref_apply_all(&t, c, 3);
        prev = ts[n - 1];
        have_prev = true;
        if (k % 2 == 1) {
            o.id = (int)n + 1;
            ts[n] = plain(&t, &o), oid[n++] = o.id;
        }
    }
    change last[] = {{'u', "t", 1, 100}, {'i', "t", tid, tid}};
    ts[n] = chain_entry(&t, &prev, true, F_COUNT, 20, last, 2), oid[n++] = 0;
    ref_apply_all(&t, last, 2);
    size_t commit = n - 1;
    o.id = (int)n + 1;
    ts[n] = plain(&t, &o), oid[n++] = o.id;
    append(&t);
    caught_up(&t);
    expect_reference(&t);
    stop_daemon(&t);

    for (size_t k = 0; k < n; k++) {
        char sql[512], at[OP_POS_STRLEN];
        for (size_t j = k + 1; j < n; j++) {
            if (oid[j] == 0)
                continue;
            snprintf(sql, sizeof sql, "DELETE FROM \"%s\".\"o\" WHERE _id = '%d'", t.db, oid[j]);
            denv_pg_exec(sql);
        }
        if (k < commit) {
            snprintf(sql, sizeof sql, "DELETE FROM \"%s\".\"t\"", t.db);
            denv_pg_exec(sql);
        }
        op_pos_format(&ts[k], at, sizeof at);
        const char *args[] = {"--tail-from", at, NULL};
        denv_daemon_start_args(&t.e, args, NULL);
        /* the checkpoint is at the newest entry until this run has put it at k: wait for that first */
        ck_assert_msg(denv_wait_log(&t.e, "ready:", 120), "the daemon did not get ready");
        caught_up(&t);
        expect_reference(&t);
        stop_daemon(&t);
    }
    t_stop(&t);
}
END_TEST

/* kill -9 while a large chain (40 entries of 100 inserts) is being applied — once a PostgreSQL backend of the
 * daemon holds a transaction id, so some of its parts were written uncommitted — then a restart: exactly the
 * reference. */
START_TEST(test_kill9_in_large_chain)
{
    NEED_APPEND_OPLOG();
    tenv t;
    t_start(&t, "txn_kill", "batch_bytes = 65536\nqueue_bytes = 1048576\n");
    change o = {'i', "o", 1, 1};
    plain(&t, &o);
    append(&t);
    caught_up(&t);
    op_pos prev = {0, 0, -1};
    int id = 1;
    enum { ENTRIES = 40, PER = 100 };
    for (int k = 0; k < ENTRIES; k++) {
        change c[PER];
        for (int i = 0; i < PER; i++)
            c[i] = (change){'i', "t", id, id}, id++;
        prev = chain_entry(&t, k ? &prev : NULL, true, k + 1 < ENTRIES ? F_PARTIAL : F_COUNT, ENTRIES * PER, c, PER);
        ref_apply_all(&t, c, PER);
        if (k % 10 == 0)
            append(&t); /* appendOplog takes a command of at most 16 MB: a few at a time */
    }
    /* Each reply of mongosim held 20 ms: the chain's 80-odd lookups spread its application over more than a second,
     * so the kill lands while parts are written and uncommitted (a fast daemon could otherwise commit between the
     * check below and the kill). */
    sim_cmd(&t, BCON_NEW("mongosimDelay", BCON_INT32(20)));
    append(&t);
    bool killed = false;
    uint64_t want = denv_newest_ts(t.e.uri);
    while (!killed && denv_checkpoint_ts(t.e.service) != want) {
        if (denv_pg_int("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'oplog2pg' "
                        "AND backend_xid IS NOT NULL") > 0) {
            ck_assert(proc_signal(&t.e.daemon, SIGKILL));
            ck_assert(proc_wait(&t.e.daemon, 30));
            killed = true;
        }
    }
    if (killed && pg_rows(&t, "t") != 0) {
        /* The transaction id seen was a later transaction's, or the commit's own while it was being sent: through a
         * change stream the chain's events come in a few batches and an idle stream commits its position, so the
         * chain can be committed between the check and the kill. Then it is there whole, never in part. */
        ck_assert_int_eq(pg_rows(&t, "t"), ENTRIES * PER);
        ck_assert_uint_ge(denv_checkpoint_ts(t.e.service), want);
        killed = false;
    }
    if (!killed)
        printf("note: txn kill -9: the daemon committed the chain before a backend was seen writing it\n");
    sim_cmd(&t, BCON_NEW("mongosimDelay", BCON_INT32(0)));
    denv_daemon_start(&t.e);
    caught_up(&t);
    expect_reference(&t);
    t_stop(&t);
}
END_TEST

/* The first entry of a chain still open at the checkpoint has left the oplog when its commit comes: the daemon
 * must stop with exit 4 and say to resync. */
START_TEST(test_chain_start_lost_exits_4)
{
    NEED_APPEND_OPLOG();
    OPLOG_SOURCE_ONLY(
        "a chain whose first entry left the oplog (a stream's lost history is error 286: test_stream_source)");
    tenv t;
    t_start(&t, "txn_lost", NULL);
    change c1[] = {{'i', "t", 1, 1}}, c2[] = {{'i', "t", 2, 2}}, c3[] = {{'i', "t", 3, 3}};
    change o1 = {'i', "o", 1, 1}, o2 = {'i', "o", 2, 2};
    op_pos p1 = chain_entry(&t, NULL, true, F_PARTIAL, 0, c1, 1);
    op_pos q1 = plain(&t, &o1);
    op_pos p2 = chain_entry(&t, &p1, true, F_PARTIAL, 0, c2, 1);
    plain(&t, &o2);
    append(&t);
    caught_up(&t);
    stop_daemon(&t);
    /* The checkpoint (o2) stays in the oplog; the chain's first entry goes. */
    bson_t *cmd = BCON_NEW("mongosimTruncateOplog", BCON_INT32(1), "before", BCON_TIMESTAMP(q1.secs, q1.inc));
    bson_error_t err;
    ck_assert_msg(mongoc_client_command_simple(t.src, "admin", cmd, NULL, NULL, &err), "%s", err.message);
    bson_destroy(cmd);
    chain_entry(&t, &p2, true, F_COUNT, 3, c3, 1);
    append(&t);
    denv_daemon_start(&t.e);
    ck_assert_msg(proc_wait(&t.e.daemon, 120), "the daemon did not stop");
    ck_assert_int_eq(proc_exit_code(&t.e.daemon), 4);
    t.e.daemon.pid = 0; /* it ended as it must: not one for denv_stop to stop */
    char want[160], at[OP_POS_STRLEN];
    snprintf(want, sizeof want, "began at %s, which is no longer in the oplog", op_pos_format(&p1, at, sizeof at));
    ck_assert_msg(denv_file_contains(t.e.log, want), "the log does not say '%s'", want);
    ck_assert(denv_file_contains(t.e.log, "--reimport"));
    ck_assert_int_eq(pg_rows(&t, "t"), 0);
    expect_reference(&t); /* what was committed before: o1 and o2 (plain() wrote them to the reference) */
    t_stop(&t);
}
END_TEST

/* The connection drops while the reader walks a chain back from its commit (mongosimDelay holds each lookup's reply
 * long enough for the drop to land among them; the debug log says when the walk began): the walk fails before
 * anything of the transaction was pushed, the reader re-opens its cursor at the last entry it pushed, meets the
 * commit again and applies the transaction once. Entries after the commit delete and change rows the transaction
 * wrote, so a transaction applied again after them, or lost, leaves PostgreSQL unlike the reference. */
START_TEST(test_walk_back_retry_after_drop)
{
    NEED_APPEND_OPLOG();
    OPLOG_SOURCE_ONLY("the reader's walk back of a chain from its commit");
    tenv t;
    t_start(&t, "txn_drop", "[logging]\nlevel = debug\n");
    enum { ENTRIES = 40, DELAY_MS = 100 };
    change pre = {'i', "t", 1000, 1};
    plain(&t, &pre);
    op_pos prev = {0, 0, -1};
    for (int k = 1; k < ENTRIES; k++) {
        change c[2] = {{'i', "t", k, k}, {'u', "t", 1000, k}};
        prev = chain_entry(&t, k > 1 ? &prev : NULL, true, F_PARTIAL, 0, c, 2);
        ref_apply_all(&t, c, 2);
    }
    change o1 = {'i', "o", 1, 1};
    plain(&t, &o1);
    append(&t);
    caught_up(&t);
    ck_assert_int_eq(pg_rows(&t, "t"), 1); /* open: nothing of it yet */

    change last[] = {{'i', "t", ENTRIES, ENTRIES}};
    sim_cmd(&t, BCON_NEW("mongosimDelay", BCON_INT32(DELAY_MS)));
    op_pos commit = chain_entry(&t, &prev, true, F_COUNT, 2 * (ENTRIES - 1) + 1, last, 1);
    ref_apply_all(&t, last, 1);
    change after[] = {{'d', "t", 1, 0}, {'u', "t", 2, 99}, {'u', "t", 1000, 99}};
    for (size_t i = 0; i < 3; i++)
        plain(&t, &after[i]);
    append(&t);
    char walking[160], failed[200], at[OP_POS_STRLEN];
    op_pos_format(&commit, at, sizeof at);
    snprintf(walking, sizeof walking, "walking back the transaction committed at %s", at);
    snprintf(failed, sizeof failed, "walking back the transaction committed at %s failed", at);
    ck_assert_msg(denv_wait_log(&t.e, walking, 60), "the reader did not begin the walk back");
    /* ENTRIES - 1 lookups of DELAY_MS each lie ahead of it: the drop lands in the middle. */
    sim_cmd(&t, BCON_NEW("mongosimDropConnections", BCON_INT32(1)));
    sim_cmd(&t, BCON_NEW("mongosimDelay", BCON_INT32(0)));
    ck_assert_msg(denv_wait_log(&t.e, failed, 60), "the walk back did not fail on the dropped connection");
    caught_up(&t);
    expect_reference(&t);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM oplog2pg.dead_letter WHERE service = '%s'", t.e.service);
    ck_assert_int_eq(denv_pg_int(sql), 0);
    expect_hold(&t, NULL);
    t_stop(&t);
}
END_TEST

/* A stop while a chain is open, the checkpoint past its first entry: a restart reads the hold stored with the
 * checkpoint and rebuilds its book of open chains from there, so the commits before the chain's own commit keep the
 * hold at its first entry (a daemon that did not rebuild it would store none), and the commit applies the transaction
 * once and clears the hold. Once after SIGTERM, once after kill -9. */
START_TEST(test_open_chain_rebuilt_at_start)
{
    NEED_APPEND_OPLOG();
    OPLOG_SOURCE_ONLY("the hold on an open chain's first entry, stored with the checkpoint");
    tenv t;
    t_start(&t, "txn_book", NULL);
    for (int round = 0; round < 2; round++) {
        int b = round * 100;
        change c1[] = {{'i', "t", b + 1, 1}, {'i', "t", b + 2, 2}}, c2[] = {{'u', "t", b + 1, 10}},
               c3[] = {{'i', "t", b + 3, 3}, {'d', "t", b + 2, 0}};
        change o1 = {'i', "o", b + 1, 1}, o2 = {'i', "o", b + 2, 2}, o3 = {'i', "o", b + 3, 3},
               o4 = {'u', "t", b + 1, 20};
        op_pos p1 = chain_entry(&t, NULL, true, F_PARTIAL, 0, c1, 2);
        plain(&t, &o1);
        op_pos p2 = chain_entry(&t, &p1, true, F_PARTIAL, 0, c2, 1);
        plain(&t, &o2);
        append(&t);
        caught_up(&t);
        expect_hold(&t, &p1);
        if (round == 0) {
            stop_daemon(&t);
        } else {
            ck_assert(proc_signal(&t.e.daemon, SIGKILL));
            ck_assert(proc_wait(&t.e.daemon, 30));
        }
        denv_daemon_start(&t.e);
        plain(&t, &o3);
        append(&t);
        caught_up(&t);
        /* The book was rebuilt from the stored hold; nothing of this round's chain is applied yet. */
        expect_hold(&t, &p1);
        ck_assert_int_eq(pg_rows(&t, "t"), round * 2);
        chain_entry(&t, &p2, true, F_COUNT, 5, c3, 2);
        ref_apply_all(&t, c1, 2);
        ref_apply_all(&t, c2, 1);
        ref_apply_all(&t, c3, 2);
        plain(&t, &o4); /* after the commit: a second application of it would undo this */
        append(&t);
        caught_up(&t);
        expect_hold(&t, NULL);
        expect_reference(&t);
    }
    t_stop(&t);
}
END_TEST

/* `status` while chains are open and the daemon has committed past their first entries: it names the oldest open
 * chain's first entry (text and --json), then the next oldest once the first commits, then nothing. */
START_TEST(test_status_open_transaction)
{
    NEED_APPEND_OPLOG();
    OPLOG_SOURCE_ONLY("status's open transaction holding the oplog window");
    tenv t;
    t_start(&t, "txn_status", NULL);
    change a1[] = {{'i', "t", 1, 1}}, a2[] = {{'i', "t", 2, 2}}, b1[] = {{'i', "t", 3, 3}};
    change o1 = {'i', "o", 1, 1}, o2 = {'i', "o", 2, 2}, o3 = {'i', "o", 3, 3}, o4 = {'i', "o", 4, 4};
    plain(&t, &o1);
    append(&t);
    caught_up(&t);
    expect_status(&t, NULL);

    op_pos pa = chain_entry(&t, NULL, true, F_PARTIAL, 0, a1, 1);
    plain(&t, &o2);
    op_pos pb = chain_entry(&t, NULL, true, F_PREPARE, 0, b1, 1); /* a prepared one of one entry */
    plain(&t, &o3);
    append(&t);
    caught_up(&t);
    expect_hold(&t, &pa);
    expect_status(&t, &pa);

    chain_entry(&t, &pa, true, F_COUNT, 2, a2, 1);
    ref_apply_all(&t, a1, 1);
    ref_apply_all(&t, a2, 1);
    append(&t);
    caught_up(&t);
    expect_hold(&t, &pb);
    expect_status(&t, &pb);

    finish_prepared(&t, &pb, true);
    ref_apply_all(&t, b1, 1);
    plain(&t, &o4);
    append(&t);
    caught_up(&t);
    expect_hold(&t, NULL);
    expect_status(&t, NULL);
    expect_reference(&t);
    t_stop(&t);
}
END_TEST

/* A catalog installed by a version before transactions (src/sink/schema.sql before bf739a5): the checkpoint table
 * without txn_oldest_sec/inc and the five-argument advance_checkpoint in PL/pgSQL, with a service's checkpoint in it.
 * In a database of its own (the other cases share the cluster's default one). The daemon must upgrade it at connect,
 * resume from that checkpoint, store and clear the hold through the seven-argument form, and keep the five-argument
 * form working for an older daemon (it stores no hold). */
#define UPG_DB "rep_txn_upg_pg"
static const char old_catalog[] =
    "CREATE SCHEMA oplog2pg;"
    "CREATE TABLE oplog2pg.checkpoint (service text PRIMARY KEY, ts_sec bigint, ts_inc bigint, term bigint, "
    "    applied_at timestamptz, owner uuid);"
    "CREATE FUNCTION oplog2pg.advance_checkpoint(p_service text, p_owner uuid, p_sec bigint, p_inc bigint, "
    "                                            p_term bigint) "
    "RETURNS void LANGUAGE plpgsql AS $$ "
    "DECLARE v_sec bigint; v_inc bigint; "
    "BEGIN "
    "    SELECT ts_sec, ts_inc INTO v_sec, v_inc FROM oplog2pg.checkpoint "
    "     WHERE service = p_service AND owner = p_owner FOR UPDATE; "
    "    IF NOT FOUND THEN "
    "        RAISE EXCEPTION 'the checkpoint of service \"%\" is held by another oplog2pg', p_service "
    "            USING ERRCODE = 'O2FEN'; "
    "    END IF; "
    "    IF v_sec IS NOT NULL AND (v_sec, v_inc) > (p_sec, p_inc) THEN "
    "        RAISE EXCEPTION 'the checkpoint of service \"%\" would move backwards, from %:% to %:%', p_service, "
    "            v_sec, v_inc, p_sec, p_inc USING ERRCODE = 'O2BAK'; "
    "    END IF; "
    "    UPDATE oplog2pg.checkpoint SET ts_sec = p_sec, ts_inc = p_inc, term = p_term, applied_at = now() "
    "     WHERE service = p_service; "
    "END $$;"
    "CREATE FUNCTION oplog2pg.set_checkpoint(p_service text, p_owner uuid, p_sec bigint, p_inc bigint, "
    "                                        p_term bigint) "
    "RETURNS void LANGUAGE plpgsql AS $$ "
    "BEGIN "
    "    UPDATE oplog2pg.checkpoint SET ts_sec = p_sec, ts_inc = p_inc, term = p_term, applied_at = now() "
    "     WHERE service = p_service AND owner = p_owner; "
    "    IF NOT FOUND THEN "
    "        RAISE EXCEPTION 'the checkpoint of service \"%\" is held by another oplog2pg', p_service "
    "            USING ERRCODE = 'O2FEN'; "
    "    END IF; "
    "END $$;";

/* One text value from the database of conninfo. */
static void pg_text_on(const char *conninfo, const char *sql, char *out, size_t len)
{
    PGconn *pg = PQconnectdb(conninfo);
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    PGresult *r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1, "%s: %s", sql, PQerrorMessage(pg));
    snprintf(out, len, "%s", PQgetisnull(r, 0, 0) ? "NULL" : PQgetvalue(r, 0, 0));
    PQclear(r);
    PQfinish(pg);
}

START_TEST(test_schema_upgrade_advance_checkpoint)
{
    NEED_APPEND_OPLOG();
    OPLOG_SOURCE_ONLY("the hold columns of an older catalog's checkpoint");
    tenv t;
    t_setup(&t, "txn_upg", NULL);
    char conninfo[600], sql[1024], got[256];
    snprintf(conninfo, sizeof conninfo, "%s dbname=" UPG_DB, denv_pg_conninfo());
    denv_pg_exec("DROP DATABASE IF EXISTS " UPG_DB);
    denv_pg_exec("CREATE DATABASE " UPG_DB);
    denv_set_conninfo(&t.e, "dbname=" UPG_DB);

    /* The older catalog, its service's checkpoint at the newest entry (with that entry's term, as it wrote it). */
    mongoc_collection_t *oplog = mongoc_client_get_collection(t.src, "local", "oplog.rs");
    bson_t *q = bson_new(), *opts = BCON_NEW("sort", "{", "$natural", BCON_INT32(-1), "}", "limit", BCON_INT64(1));
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, q, opts, NULL);
    const bson_t *newest;
    ck_assert(mongoc_cursor_next(cur, &newest));
    bson_iter_t it;
    uint32_t secs, inc;
    ck_assert(bson_iter_init_find(&it, newest, "ts"));
    bson_iter_timestamp(&it, &secs, &inc);
    ck_assert(bson_iter_init_find(&it, newest, "t"));
    int64_t term = bson_iter_as_int64(&it);
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    bson_destroy(q);
    mongoc_collection_destroy(oplog);
    PGconn *pg = PQconnectdb(conninfo);
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    PGresult *r = PQexec(pg, old_catalog);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "the older catalog: %s", PQerrorMessage(pg));
    PQclear(r);
    snprintf(sql, sizeof sql, "INSERT INTO oplog2pg.checkpoint VALUES ('%s', %u, %u, %lld, now(), gen_random_uuid())",
             t.e.service, secs, inc, (long long)term);
    r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s", PQerrorMessage(pg));
    PQclear(r);
    PQfinish(pg);

    denv_daemon_start(&t.e);
    change c1[] = {{'i', "t", 1, 1}, {'i', "t", 2, 2}}, c2[] = {{'u', "t", 1, 10}, {'i', "t", 3, 3}};
    change o1 = {'i', "o", 1, 1}, o2 = {'i', "o", 2, 2}, o3 = {'i', "o", 3, 3}, o4 = {'d', "t", 2, 0};
    plain(&t, &o1);
    op_pos p1 = chain_entry(&t, NULL, true, F_PARTIAL, 0, c1, 2);
    plain(&t, &o2);
    append(&t);
    caught_up_on(&t, conninfo);

    /* Upgraded: the hold columns, the nine-argument form (with a resume token), and the five- and seven-argument
     * ones SQL overloads of it. */
    pg_text_on(conninfo,
               "SELECT string_agg(attname, ',' ORDER BY attname) FROM pg_attribute WHERE attrelid = "
               "'oplog2pg.checkpoint'::regclass AND attname LIKE 'txn_oldest_%' AND NOT attisdropped",
               got, sizeof got);
    ck_assert_str_eq(got, "txn_oldest_inc,txn_oldest_sec");
    pg_text_on(conninfo,
               "SELECT string_agg(p.pronargs || ':' || l.lanname, ',' ORDER BY p.pronargs) FROM pg_proc p "
               "JOIN pg_language l ON l.oid = p.prolang WHERE p.pronamespace = 'oplog2pg'::regnamespace "
               "AND p.proname = 'advance_checkpoint'",
               got, sizeof got);
    ck_assert_str_eq(got, "5:sql,7:sql,9:plpgsql");
    expect_hold_on(&t, conninfo, &p1);

    /* An older daemon's five-argument call (here rolled back): it moves the position and stores no hold. */
    pg = PQconnectdb(conninfo);
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    snprintf(sql, sizeof sql,
             "BEGIN; SELECT oplog2pg.advance_checkpoint(service, owner, ts_sec, ts_inc + 1, term) "
             "FROM oplog2pg.checkpoint WHERE service = '%s'",
             t.e.service);
    r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "the five-argument form: %s", PQerrorMessage(pg));
    PQclear(r);
    snprintf(sql, sizeof sql,
             "SELECT format('%%s:%%s %%s', ts_sec, ts_inc, coalesce(txn_oldest_sec::text, 'none')) "
             "FROM oplog2pg.checkpoint WHERE service = '%s'",
             t.e.service);
    r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1, "%s", PQerrorMessage(pg));
    char want[64];
    uint64_t ck = denv_newest_ts(t.e.uri);
    snprintf(want, sizeof want, "%u:%u none", (uint32_t)(ck >> 32), (uint32_t)ck + 1);
    ck_assert_str_eq(PQgetvalue(r, 0, 0), want);
    PQclear(r);
    r = PQexec(pg, "ROLLBACK");
    PQclear(r);
    PQfinish(pg);
    expect_hold_on(&t, conninfo, &p1);

    /* A second start installs over the upgraded catalog, and rebuilds its book from the hold. */
    stop_daemon(&t);
    denv_daemon_start(&t.e);
    plain(&t, &o3);
    append(&t);
    caught_up_on(&t, conninfo);
    expect_hold_on(&t, conninfo, &p1);
    chain_entry(&t, &p1, true, F_COUNT, 4, c2, 2);
    ref_apply_all(&t, c1, 2);
    ref_apply_all(&t, c2, 2);
    plain(&t, &o4);
    append(&t);
    caught_up_on(&t, conninfo);
    expect_hold_on(&t, conninfo, NULL);
    expect_reference_on(&t, conninfo);
    t_stop(&t);
    denv_pg_exec("DROP DATABASE " UPG_DB);
}
END_TEST

/* ---- the mongo-tools scenarios (tests/vectors/fixture_txn_scenarios_mongo-tools.json) ---- */

#define VEC    "tests/vectors/"
#define VEC_DB "rep_txn_vec_replay"

typedef struct {
    uint32_t old_secs[16], old_inc[16];
    op_pos now[16];
    size_t n;
} ts_map;

static bool map_ts(const ts_map *m, uint32_t secs, uint32_t inc, op_pos *out)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->old_secs[i] == secs && m->old_inc[i] == inc) {
            *out = m->now[i];
            return true;
        }
    return false;
}

/* "txntest.X" (and "test.X", the multiOpType scenario's) becomes "<db>.X"; anything else stays. */
static void append_ns(tenv *t, bson_t *dst, bson_iter_t *it)
{
    const char *ns = bson_iter_utf8(it, NULL);
    char buf[200];
    if (strncmp(ns, "txntest.", 8) == 0 || strncmp(ns, "test.", 5) == 0) {
        snprintf(buf, sizeof buf, "%s.%s", t->db, strchr(ns, '.') + 1);
        BSON_APPEND_UTF8(dst, "ns", buf);
    } else {
        BSON_APPEND_UTF8(dst, "ns", ns);
    }
}

/* One fixture entry adapted to this oplog: its ts and prevOpTime mapped to new positions, its namespaces to the
 * test's database. The fixture's commitTransaction / abortTransaction entries name the chain's first entry as their
 * prevOpTime; a server names the prepare entry (op_observer_impl.cpp), so they get the entry before them. An entry
 * without ns (the multiOpType scenario's) gets admin.$cmd, as a server writes it. */
static void adapt_entry(tenv *t, const bson_t *src, const ts_map *m, size_t idx, bson_t *dst)
{
    bson_iter_t it;
    bool finish = false;
    bson_iter_init(&it, src);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "o") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_t o;
            bson_iter_recurse(&it, &o);
            finish = bson_iter_next(&o) && (strcmp(bson_iter_key(&o), "commitTransaction") == 0 ||
                                            strcmp(bson_iter_key(&o), "abortTransaction") == 0);
        }
    }
    if (!bson_has_field(src, "ns")) /* the multiOpType scenario's entry has none; a server writes admin.$cmd */
        BSON_APPEND_UTF8(dst, "ns", "admin.$cmd");
    bson_iter_init(&it, src);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "ts") == 0) {
            BSON_APPEND_TIMESTAMP(dst, "ts", m->now[idx].secs, m->now[idx].inc);
        } else if (strcmp(k, "ns") == 0) {
            append_ns(t, dst, &it);
        } else if (strcmp(k, "prevOpTime") == 0) {
            bson_iter_t p;
            uint32_t secs = 0, inc = 0;
            bson_iter_recurse(&it, &p);
            if (bson_iter_find(&p, "ts"))
                bson_iter_timestamp(&p, &secs, &inc);
            op_pos np;
            bson_t sub;
            BSON_APPEND_DOCUMENT_BEGIN(dst, "prevOpTime", &sub);
            if (finish && idx > 0)
                BSON_APPEND_TIMESTAMP(&sub, "ts", m->now[idx - 1].secs, m->now[idx - 1].inc);
            else if ((secs != 0 || inc != 0) && map_ts(m, secs, inc, &np))
                BSON_APPEND_TIMESTAMP(&sub, "ts", np.secs, np.inc);
            else
                BSON_APPEND_TIMESTAMP(&sub, "ts", secs, inc);
            BSON_APPEND_INT64(&sub, "t", secs || inc ? 1 : -1);
            bson_append_document_end(dst, &sub);
        } else if (strcmp(k, "o") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_t o;
            bson_t od;
            bson_iter_recurse(&it, &o);
            BSON_APPEND_DOCUMENT_BEGIN(dst, "o", &od);
            while (bson_iter_next(&o)) {
                if (strcmp(bson_iter_key(&o), "applyOps") == 0 && BSON_ITER_HOLDS_ARRAY(&o)) {
                    bson_iter_t arr;
                    bson_t ad;
                    bson_iter_recurse(&o, &arr);
                    BSON_APPEND_ARRAY_BEGIN(&od, "applyOps", &ad);
                    while (bson_iter_next(&arr)) {
                        bson_iter_t in;
                        bson_t idoc;
                        bson_iter_recurse(&arr, &in);
                        bson_append_document_begin(&ad, bson_iter_key(&arr), -1, &idoc);
                        while (bson_iter_next(&in)) {
                            if (strcmp(bson_iter_key(&in), "ns") == 0)
                                append_ns(t, &idoc, &in);
                            else
                                bson_append_iter(&idoc, NULL, 0, &in);
                        }
                        bson_append_document_end(&ad, &idoc);
                    }
                    bson_append_array_end(&od, &ad);
                } else {
                    bson_append_iter(&od, NULL, 0, &o);
                }
            }
            bson_append_document_end(dst, &od);
        } else {
            bson_append_iter(dst, NULL, 0, &it);
        }
    }
}

/* Every scenario of the fixture, one after the other, each with an ordinary entry after it: PostgreSQL must end
 * with every scenario's post-image and nothing else (the aborted ones leave nothing). */
START_TEST(test_mongo_tools_scenarios)
{
    NEED_APPEND_OPLOG();
    tenv t;
    t_start(&t, "txn_vec", NULL);
    bson_error_t err;
    char *text = NULL;
    size_t cap = 0;
    FILE *fp = fopen(VEC "fixture_txn_scenarios_mongo-tools.json", "r");
    ck_assert_ptr_nonnull(fp);
    ck_assert_int_gt(getdelim(&text, &cap, '\0', fp), 0);
    fclose(fp);
    /* libbson 1.23 cannot parse an ISO-8601 offset written with a colon ("-05:00", one `wall` in the multiOpType
     * scenario): rewritten as "-0500" (as tests/unit/test_decode.c does). */
    for (char *p = text; (p = strstr(p, "-05:00\"")) != NULL;)
        memmove(p + 3, p + 4, strlen(p + 4) + 1);
    bson_t all;
    ck_assert_msg(bson_init_from_json(&all, text, (ssize_t)strlen(text), &err), "fixture: %s", err.message);
    free(text);
    bson_iter_t sc;
    int scenarios = 0, oid = 1;
    bson_iter_init(&sc, &all);
    while (bson_iter_next(&sc)) {
        bson_iter_t f, ops;
        ck_assert(BSON_ITER_HOLDS_DOCUMENT(&sc));
        bson_iter_recurse(&sc, &f);
        ck_assert_msg(bson_iter_find(&f, "ops") && bson_iter_recurse(&f, &ops), "%s has no ops", bson_iter_key(&sc));
        ts_map m = {.n = 0};
        bson_t entries[16];
        while (bson_iter_next(&ops)) {
            const uint8_t *data;
            uint32_t len;
            bson_iter_document(&ops, &len, &data);
            ck_assert(m.n < 16);
            bson_init_static(&entries[m.n], data, len);
            bson_iter_t e;
            bson_iter_init_find(&e, &entries[m.n], "ts");
            bson_iter_timestamp(&e, &m.old_secs[m.n], &m.old_inc[m.n]);
            m.now[m.n] = next_ts(&t);
            m.n++;
        }
        bson_t cmd = BSON_INITIALIZER, arr;
        BSON_APPEND_ARRAY_BEGIN(&cmd, "appendOplog", &arr);
        for (size_t i = 0; i < m.n; i++) {
            char key[24];
            bson_t d;
            snprintf(key, sizeof key, "%zu", i);
            bson_append_document_begin(&arr, key, -1, &d);
            adapt_entry(&t, &entries[i], &m, i, &d);
            bson_append_document_end(&arr, &d);
        }
        bson_append_array_end(&cmd, &arr);
        ck_assert_msg(mongoc_client_command_simple(t.src, "admin", &cmd, NULL, NULL, &err), "%s: %s",
                      bson_iter_key(&sc), err.message);
        bson_destroy(&cmd);
        /* the post-image, into the reference; the multiOpType scenario has none: its inserts are its post-image */
        bson_iter_t g, post;
        bson_iter_recurse(&sc, &g);
        ck_assert(bson_iter_find(&g, "ns"));
        const char *ns = bson_iter_utf8(&g, NULL);
        bson_iter_recurse(&sc, &g);
        if (bson_iter_find(&g, "postimage")) {
            ck_assert(bson_iter_recurse(&g, &post));
            mongoc_collection_t *rc = mongoc_client_get_collection(t.refc, t.db, strchr(ns, '.') + 1);
            while (bson_iter_next(&post)) {
                const uint8_t *data;
                uint32_t len;
                bson_t d;
                bson_iter_document(&post, &len, &data);
                bson_init_static(&d, data, len);
                ck_assert_msg(mongoc_collection_insert_one(rc, &d, NULL, NULL, &err), "%s", err.message);
            }
            mongoc_collection_destroy(rc);
        } else {
            bson_iter_t ao, in;
            ck_assert(bson_iter_init(&ao, &entries[0]) && bson_iter_find_descendant(&ao, "o.applyOps", &in) &&
                      bson_iter_recurse(&in, &ao));
            while (bson_iter_next(&ao)) {
                bson_iter_t o, nsit;
                ck_assert(bson_iter_recurse(&ao, &o) && bson_iter_find(&o, "o"));
                ck_assert(bson_iter_recurse(&ao, &nsit) && bson_iter_find(&nsit, "ns"));
                const uint8_t *data;
                uint32_t len;
                bson_t d;
                bson_iter_document(&o, &len, &data);
                bson_init_static(&d, data, len);
                mongoc_collection_t *rc =
                    mongoc_client_get_collection(t.refc, t.db, strchr(bson_iter_utf8(&nsit, NULL), '.') + 1);
                ck_assert_msg(mongoc_collection_insert_one(rc, &d, NULL, NULL, &err), "%s", err.message);
                mongoc_collection_destroy(rc);
            }
        }
        change o = {'i', "o", oid++, 0};
        plain(&t, &o);
        append(&t);
        scenarios++;
    }
    bson_destroy(&all);
    ck_assert_int_ge(scenarios, 8);
    caught_up(&t);
    expect_reference(&t);
    stop_daemon(&t);

    /* The same oplog as a dump, replayed into a database of its own: the same result (source/dump/dump.c puts the
     * chains together from the file). */
    char conninfo[600], dump[300], out[300];
    snprintf(conninfo, sizeof conninfo, "%s dbname=" VEC_DB, denv_pg_conninfo());
    denv_pg_exec("DROP DATABASE IF EXISTS " VEC_DB);
    denv_pg_exec("CREATE DATABASE " VEC_DB);
    denv_set_conninfo(&t.e, "dbname=" VEC_DB);
    snprintf(dump, sizeof dump, "%s/oplog.bson", t.e.dir);
    snprintf(out, sizeof out, "%s/replay.out", t.e.dir);
    mongoc_collection_t *oplog = mongoc_client_get_collection(t.src, "local", "oplog.rs");
    bson_t everything = BSON_INITIALIZER;
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, &everything, NULL, NULL);
    FILE *f = fopen(dump, "wb");
    ck_assert_ptr_nonnull(f);
    const bson_t *entry;
    while (mongoc_cursor_next(cur, &entry))
        ck_assert_uint_eq(fwrite(bson_get_data(entry), 1, entry->len, f), entry->len);
    ck_assert_msg(!mongoc_cursor_error(cur, &err), "%s", err.message);
    ck_assert_int_eq(fclose(f), 0);
    mongoc_cursor_destroy(cur);
    bson_destroy(&everything);
    mongoc_collection_destroy(oplog);
    const char *args[] = {"-c", t.e.ini, "replay", dump, NULL};
    int rc = denv_run_command(&t.e, args, out);
    if (rc != 0)
        snprintf(t.e.log, sizeof t.e.log, "%s", out), denv_show_log(&t.e);
    ck_assert_int_eq(rc, 0);
    expect_reference_on(&t, conninfo);
    t_stop(&t);
    denv_pg_exec("DROP DATABASE " VEC_DB);
}
END_TEST

/* One transaction of 200 MB of oplog (200 entries of 1 MB: 10 documents of 100 kB each): the walk keeps OpTimes and
 * each entry passes the queue's byte bound on its own, so the daemon's peak stays within 64 MB plus one maximal
 * document (16 MB), and all of it commits at once. (Not under
 * AddressSanitizer, whose own memory is what it measures.) */
START_TEST(test_memory_large_transaction)
{
    if (getenv("OPLOG2PG_TEST_SANITIZE") != NULL)
        SKIP_TEST("sanitizer builds measure their own memory");
    NEED_APPEND_OPLOG();
    tenv t;
    t_start(&t, "txn_mem", NULL);
    enum { ENTRIES = 200, DOCS = 10, PAD = 100 * 1024 };
    char *pad = malloc(PAD + 1);
    ck_assert_ptr_nonnull(pad);
    memset(pad, 'p', PAD);
    pad[PAD] = '\0';
    mongoc_collection_t *rc = mongoc_client_get_collection(t.refc, t.db, "big");
    op_pos prev = {0, 0, -1};
    int id = 0;
    for (int k = 0; k < ENTRIES; k++) {
        op_pos ts = next_ts(&t);
        entry_head(&t, &ts);
        strbuf_printf(&t.batch, "\"op\":\"c\",\"ns\":\"admin.$cmd\"," LSID ",\"txnNumber\":{\"$numberLong\":\"21\"},");
        strbuf_printf(&t.batch,
                      "\"prevOpTime\":{\"ts\":{\"$timestamp\":{\"t\":%u,\"i\":%u}},\"t\":{\"$numberLong\":\"%d\"}},"
                      "\"o\":{\"applyOps\":[",
                      k ? prev.secs : 0, k ? prev.inc : 0, k ? 1 : -1);
        for (int i = 0; i < DOCS; i++, id++) {
            strbuf_printf(&t.batch, "%s{\"op\":\"i\",\"ns\":\"%s.big\"," UI ",\"o\":{\"_id\":%d,\"pad\":\"%s\"}}",
                          i ? "," : "", t.db, id, pad);
            bson_t *d = BCON_NEW("_id", BCON_INT32(id), "pad", BCON_UTF8(pad));
            bson_error_t err;
            ck_assert_msg(mongoc_collection_insert_one(rc, d, NULL, NULL, &err), "%s", err.message);
            bson_destroy(d);
        }
        strbuf_printf(&t.batch, "]");
        if (k + 1 < ENTRIES)
            strbuf_printf(&t.batch, ",\"partialTxn\":true}}");
        else
            strbuf_printf(&t.batch, ",\"count\":{\"$numberLong\":\"%d\"}}}", ENTRIES * DOCS);
        prev = ts;
        if (k % 8 == 7)
            append(&t); /* appendOplog takes a command of at most 16 MB */
    }
    append(&t);
    mongoc_collection_destroy(rc);
    free(pad);
    caught_up(&t);
    long kb = proc_peak_kb(t.e.daemon.pid);
    printf("peak resident memory with one transaction of 200 MB in 200 entries: %ld kB\n", kb);
    ck_assert_msg(kb > 0 && kb <= 80 * 1024, "the daemon's peak was %ld kB, over 64 MB + 16 MB", kb);
    expect_reference(&t);
    t_stop(&t);
}
END_TEST

Suite *txn_suite(void); /* called by the generated runner list */

Suite *txn_suite(void)
{
    Suite *s = suite_create("txn");
    /* The transaction shapes, which tests/integration/run.sh also runs through a change stream (txn:shapes). */
    TCase *shapes = tcase_create("shapes");
    tcase_set_timeout(shapes, 600);
    tcase_add_test(shapes, test_implicit_commit_atomic);
    tcase_add_test(shapes, test_windows);
    tcase_add_test(shapes, test_prepared_commit_and_abort);
    tcase_add_test(shapes, test_no_lsid_and_vectored);
    tcase_add_test(shapes, test_large_in_parts);
    suite_add_tcase(s, shapes);
    TCase *tc = tcase_create("txn");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_mongo_tools_scenarios);
    tcase_add_test(tc, test_chain_start_lost_exits_4);
    tcase_add_test(tc, test_restart_anywhere);
    tcase_add_test(tc, test_kill9_in_large_chain);
    tcase_add_test(tc, test_walk_back_retry_after_drop);
    tcase_add_test(tc, test_open_chain_rebuilt_at_start);
    tcase_add_test(tc, test_status_open_transaction);
    tcase_add_test(tc, test_schema_upgrade_advance_checkpoint);
    suite_add_tcase(s, tc);
    TCase *mem = tcase_create("memory");
    tcase_set_timeout(mem, 900);
    tcase_add_test(mem, test_memory_large_transaction);
    suite_add_tcase(s, mem);
    return s;
}

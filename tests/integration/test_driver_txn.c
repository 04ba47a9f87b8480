/*
 * test_driver_txn.c — a transaction written by a driver (a libmongoc session), large enough that the server logs it
 * as several applyOps entries, replicated to PostgreSQL at once and exactly.
 *
 * Nothing here uses mongosim's test commands or writes to the oplog directly, so the test runs the same against a
 * real replica set (MONGO_URI): the server alone decides how the transaction is split. A 4.2+ server packs a
 * transaction's operations into applyOps entries of at most 16 MB (BSONObjMaxUserSize; packOperationsIntoApplyOps in
 * src/mongo/db/transaction/transaction_operations.cpp), all but the last marked partialTxn; mongosim does the same
 * (tests/mongosim/txn.c, txn_split). The transaction below holds DOCS documents of PAD bytes each: more than twice
 * 16 MB, hence at least three entries, which the test checks in the oplog before it checks PostgreSQL.
 *
 * "At once" is checked two ways. While the daemon applies, an observer reads the table and the checkpoint in one
 * statement (one snapshot) again and again: it must only ever see none of the transaction or all of it, and never
 * a checkpoint at or past the transaction's last entry without all of it. And a row trigger the test puts on the
 * table records, for every row written, txid_current() (the top-level transaction, also inside the savepoints the
 * sink takes around a COPY): all rows of the MongoDB transaction must come from one PostgreSQL transaction. Then
 * PostgreSQL must equal the source. Waits are on events (the checkpoint reaching the newest entry), with generous
 * deadlines.
 */
#include <check.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/daemonenv.h"
#include "../lib/proc.h"

Suite *driver_txn_suite(void); /* called by the generated runner list */

enum { DOCS = 36, PAD = 1000 * 1000 };

#define ENTRY_LIMIT (16 * 1024 * 1024) /* the server's applyOps entry size limit (see the top of this file) */
_Static_assert((long long)DOCS *PAD > 2LL * ENTRY_LIMIT, "the transaction must need at least three entries");

/* What the observer saw. */
typedef struct {
    char conninfo[600];
    char table[160]; /* "schema"."table" of the collection */
    char service[64];
    uint64_t last_ts; /* the transaction's last oplog entry, set before the observer starts */
    atomic_bool stop;
    long samples, saw_none, saw_all;
    char bad[300]; /* the first sample that broke the rule, empty when none did */
} observer;

static void *observe(void *arg)
{
    observer *o = arg;
    PGconn *pg = PQconnectdb(o->conninfo);
    if (PQstatus(pg) != CONNECTION_OK) {
        snprintf(o->bad, sizeof o->bad, "observer cannot connect: %s", PQerrorMessage(pg));
        PQfinish(pg);
        return NULL;
    }
    char sql[800];
    /* One statement, one snapshot: the rows of the transaction (ids 1..DOCS, and _id 0 updated to v "after") and
     * the service's checkpoint as that snapshot has them. */
    snprintf(sql, sizeof sql,
             "SELECT count(*) FILTER (WHERE _id <> '0'), count(*) FILTER (WHERE _id = '0' AND doc->>'v' = 'after'), "
             "(SELECT (ts_sec::bigint << 32) | ts_inc::bigint FROM oplog2pg.checkpoint WHERE service = '%s') "
             "FROM %s",
             o->service, o->table);
    while (!atomic_load(&o->stop) && o->bad[0] == '\0') {
        PGresult *r = PQexec(pg, sql);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            snprintf(o->bad, sizeof o->bad, "observer query: %s", PQresultErrorMessage(r));
            PQclear(r);
            break;
        }
        long rows = atol(PQgetvalue(r, 0, 0)), updated = atol(PQgetvalue(r, 0, 1));
        uint64_t ckpt = PQgetisnull(r, 0, 2) ? 0 : (uint64_t)strtoll(PQgetvalue(r, 0, 2), NULL, 10);
        PQclear(r);
        o->samples++;
        if (rows == 0 && updated == 0 && ckpt < o->last_ts)
            o->saw_none++;
        else if (rows == DOCS && updated == 1)
            o->saw_all++;
        else
            snprintf(o->bad, sizeof o->bad,
                     "a snapshot held %ld of the %d inserted rows, %ld of 1 updated, checkpoint %llu (last entry %llu)",
                     rows, DOCS, updated, (unsigned long long)ckpt, (unsigned long long)o->last_ts);
    }
    PQfinish(pg);
    return NULL;
}

/* The applyOps entries after `after` that hold ops on ns: their count, whether all but the last are partialTxn,
 * and the last one's ts. */
static int chain_entries(const char *uri, uint64_t after, const char *ns, bool *partial_ok, uint64_t *last_ts)
{
    mongoc_client_t *c = mongoc_client_new(uri);
    ck_assert_ptr_nonnull(c);
    mongoc_collection_t *oplog = mongoc_client_get_collection(c, "local", "oplog.rs");
    bson_t *filter = BCON_NEW("ts", "{", "$gt", BCON_TIMESTAMP((uint32_t)(after >> 32), (uint32_t)after), "}");
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, filter, NULL, NULL);
    const bson_t *doc;
    int n = 0;
    bool last_partial = false;
    *partial_ok = true;
    while (mongoc_cursor_next(cur, &doc)) {
        bson_iter_t it, ops, op;
        if (!bson_iter_init_find(&it, doc, "op") || strcmp(bson_iter_utf8(&it, NULL), "c") != 0)
            continue;
        if (!bson_iter_init(&it, doc) || !bson_iter_find_descendant(&it, "o.applyOps", &ops) ||
            !BSON_ITER_HOLDS_ARRAY(&ops) || !bson_iter_recurse(&ops, &op) || !bson_iter_next(&op))
            continue;
        bson_iter_t first_ns;
        if (!bson_iter_recurse(&op, &first_ns) || !bson_iter_find(&first_ns, "ns") ||
            strcmp(bson_iter_utf8(&first_ns, NULL), ns) != 0)
            continue;
        if (n > 0 && !last_partial)
            *partial_ok = false; /* an entry followed one that was not partialTxn */
        bson_iter_t p;
        last_partial =
            bson_iter_init(&p, doc) && bson_iter_find_descendant(&p, "o.partialTxn", &p) && bson_iter_as_bool(&p);
        ck_assert(bson_iter_init_find(&it, doc, "ts"));
        uint32_t s, i;
        bson_iter_timestamp(&it, &s, &i);
        *last_ts = (uint64_t)s << 32 | i;
        n++;
    }
    bson_error_t err;
    ck_assert_msg(!mongoc_cursor_error(cur, &err), "reading the oplog: %s", err.message);
    if (last_partial)
        *partial_ok = false; /* the chain must end with its commit entry */
    mongoc_cursor_destroy(cur);
    bson_destroy(filter);
    mongoc_collection_destroy(oplog);
    mongoc_client_destroy(c);
    return n;
}

/* SIGTERM: the daemon commits what it read and exits 0. */
static void daemon_stop(denv *e)
{
    ck_assert_msg(proc_stop(&e->daemon, 60), "the daemon did not stop on SIGTERM");
    if (proc_exit_code(&e->daemon) != 0)
        denv_show_log(e);
    ck_assert_int_eq(proc_exit_code(&e->daemon), 0);
}

/* Inserts _id 1..DOCS of PAD bytes each into coll and sets _id 0's v to "after", in one driver transaction. */
static void big_transaction(const char *uri, const char *db, const char *coll)
{
    mongoc_client_t *c = mongoc_client_new(uri);
    ck_assert_ptr_nonnull(c);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db, coll);
    bson_error_t err;
    mongoc_client_session_t *s = mongoc_client_start_session(c, NULL, &err);
    ck_assert_msg(s != NULL, "start session: %s", err.message);
    ck_assert_msg(mongoc_client_session_start_transaction(s, NULL, &err), "start transaction: %s", err.message);
    char *pad = malloc(PAD + 1);
    ck_assert_ptr_nonnull(pad);
    for (int i = 1; i <= DOCS; i++) {
        memset(pad, 'a' + i % 26, PAD); /* a different text per document */
        pad[PAD] = '\0';
        bson_t opts = BSON_INITIALIZER;
        ck_assert_msg(mongoc_client_session_append(s, &opts, &err), "%s", err.message);
        bson_t *doc = BCON_NEW("_id", BCON_INT32(i), "pad", BCON_UTF8(pad));
        ck_assert_msg(mongoc_collection_insert_one(col, doc, &opts, NULL, &err), "insert %d: %s", i, err.message);
        bson_destroy(doc);
        bson_destroy(&opts);
    }
    free(pad);
    bson_t opts = BSON_INITIALIZER;
    ck_assert_msg(mongoc_client_session_append(s, &opts, &err), "%s", err.message);
    bson_t *q = BCON_NEW("_id", BCON_INT32(0));
    bson_t *u = BCON_NEW("$set", "{", "v", BCON_UTF8("after"), "}");
    ck_assert_msg(mongoc_collection_update_one(col, q, u, &opts, NULL, &err), "update: %s", err.message);
    bson_destroy(q);
    bson_destroy(u);
    bson_destroy(&opts);
    bson_t reply;
    ck_assert_msg(mongoc_client_session_commit_transaction(s, &reply, &err), "commit: %s", err.message);
    bson_destroy(&reply);
    mongoc_client_session_destroy(s);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
}

START_TEST(test_driver_transaction_over_several_entries)
{
    denv e;
    denv_start(&e, "dtxn", NULL, NULL);
    char db[64], ns[128];
    snprintf(db, sizeof db, "%sa", e.prefix);
    snprintf(ns, sizeof ns, "%s.big", db);
    /* The collection and _id 0 exist before: the table is there for the observer from the start. */
    mongoc_client_t *c = mongoc_client_new(e.uri);
    ck_assert_ptr_nonnull(c);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db, "big");
    bson_error_t err;
    bson_t *d0 = BCON_NEW("_id", BCON_INT32(0), "v", BCON_UTF8("before"));
    ck_assert_msg(mongoc_collection_insert_one(col, d0, NULL, NULL, &err), "%s", err.message);
    bson_destroy(d0);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
    denv_daemon_start(&e);
    ck_assert_msg(denv_wait_caught_up(&e, 120), "the daemon did not catch up before the transaction");

    /* The transaction is written while the daemon is stopped, so that its entries are all in the oplog before the
     * observer starts: the observer then knows the last entry, and sees the daemon read the whole chain. */
    daemon_stop(&e);
    uint64_t before = denv_newest_ts(e.uri);
    big_transaction(e.uri, db, "big");
    bool partial_ok;
    uint64_t last_ts = 0;
    int entries = chain_entries(e.uri, before, ns, &partial_ok, &last_ts);
    ck_assert_msg(entries >= 3, "the transaction (%d documents of %d bytes) took %d oplog entries, not >= 3", DOCS, PAD,
                  entries);
    ck_assert_msg(partial_ok, "the chain's entries are not partialTxn ... partialTxn, commit");

    /* The trigger that notes which PostgreSQL transaction wrote each row. */
    char sql[1200];
    snprintf(sql, sizeof sql,
             "DROP TABLE IF EXISTS public.driver_txn_seen; "
             "CREATE TABLE public.driver_txn_seen (xid bigint, id text); "
             "CREATE OR REPLACE FUNCTION public.driver_txn_note() RETURNS trigger LANGUAGE plpgsql AS "
             "$$BEGIN INSERT INTO public.driver_txn_seen VALUES (txid_current(), NEW._id); RETURN NEW; END$$; "
             "CREATE TRIGGER driver_txn_note AFTER INSERT OR UPDATE ON \"%s\".big FOR EACH ROW "
             "EXECUTE FUNCTION public.driver_txn_note()",
             db);
    denv_pg_exec(sql);

    observer o = {0};
    snprintf(o.conninfo, sizeof o.conninfo, "%s", denv_pg_conninfo());
    snprintf(o.table, sizeof o.table, "\"%s\".\"big\"", db);
    snprintf(o.service, sizeof o.service, "%s", e.service);
    o.last_ts = last_ts;
    atomic_init(&o.stop, false);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, observe, &o), 0);
    denv_daemon_start(&e);
    bool caught_up = denv_wait_caught_up(&e, 300);
    atomic_store(&o.stop, true);
    pthread_join(th, NULL);
    ck_assert_msg(caught_up, "the daemon did not apply the transaction");
    ck_assert_msg(o.bad[0] == '\0', "%s (after %ld samples)", o.bad, o.samples);
    ck_assert_msg(o.samples > 0, "the observer took no sample");
    fprintf(stderr, "driver_txn: %d entries; observer: %ld samples, %ld before the commit, %ld after\n", entries,
            o.samples, o.saw_none, o.saw_all);

    /* One PostgreSQL transaction wrote every row of the MongoDB transaction. */
    ck_assert_int_eq(denv_pg_int("SELECT count(DISTINCT id) FROM public.driver_txn_seen"), DOCS + 1);
    ck_assert_int_eq(denv_pg_int("SELECT count(DISTINCT xid) FROM public.driver_txn_seen"), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\".big", db);
    ck_assert_int_eq(denv_pg_int(sql), DOCS + 1);
    denv_expect_match(&e);
    denv_stop(&e);
    denv_pg_exec("DROP TABLE public.driver_txn_seen; DROP FUNCTION public.driver_txn_note() CASCADE");
}
END_TEST

Suite *driver_txn_suite(void)
{
    Suite *s = suite_create("driver_txn");
    TCase *tc = tcase_create("driver_txn");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_driver_transaction_over_several_entries);
    suite_add_tcase(s, tc);
    return s;
}

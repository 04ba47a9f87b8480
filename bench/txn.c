/*
 * txn.c — one transaction of 1 GB of oplog against the same documents as plain inserts.
 *
 *   bench/txn [N [PAD]]   N documents (default 270 000) of a PAD-byte string (default 4 000) in one transaction, a
 *                         chain of 16 MB applyOps entries (1.1 GB of oplog), against the same N as plain inserts; each
 *                         replicated from a checkpoint before them and checked (row count and an md5 of every row
 *                         against what was written); reports time, MB/s, rows/s and the daemon's peak memory.
 *                         BENCH_TXN_REPS pairs (default 1); BENCH_TXN_WRITE=driver writes the transaction through the
 *                         driver instead (the same split, but mongosim's client transactions are quadratic in their
 *                         documents: 270 000 did not finish in 14 minutes)
 *
 * Run by bench/run.sh under `make bench`. How a trial is timed: bench/lib/backlog.h.
 */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/lib/docgen.h"
#include "../tests/lib/proc.h"
#include "lib/backlog.h"
#include "lib/program.h"
#include "lib/stats.h"

/* The documents: {_id: i (int64), k: int32, tag: string, pad: PAD random letters and digits}, i = 1..n, each the same
 * whether written in one transaction or as plain inserts. What PostgreSQL must hold is known from them alone: the row
 * (key text "i", and the document as jsonb prints it: keys by length, then bytes) and its md5. */
#define TXN_PAD     4000 /* the default; `bench/txn N PAD` sets another */
#define TXN_BATCH   2000 /* documents per insert command (8 MB) */
#define TXN_ROW_PAD 200  /* a row's text beyond its pad */

static const char ALNUM[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/* Document i's fields (a pad of padlen letters and digits), and its row as `_id \t doc::text` in row (padlen +
 * TXN_ROW_PAD bytes; returns its length). */
static size_t txn_doc(uint64_t i, size_t padlen, int32_t *k, char *tag, size_t taglen, char *pad, char *row)
{
    uint64_t rng = 0x5EEDull ^ (i * 0x9E3779B97F4A7C15ull);
    for (size_t j = 0; j < padlen;) {
        uint64_t r = docgen_rng_next(&rng);
        for (int c = 0; c < 10 && j < padlen; c++, r /= 62)
            pad[j++] = ALNUM[r % 62];
    }
    pad[padlen] = '\0';
    *k = (int32_t)(docgen_rng_next(&rng) % 2000000) - 1000000;
    snprintf(tag, taglen, "t%u", (unsigned)(i % 97));
    return (size_t)snprintf(row, padlen + TXN_ROW_PAD,
                            "%llu\t{\"k\": %d, \"_id\": %llu, \"pad\": \"%s\", \"tag\": \"%s\"}", (unsigned long long)i,
                            (int)*k, (unsigned long long)i, pad, tag);
}

static void md5_hex(const void *data, size_t len, char hex[33])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!EVP_Digest(data, len, md, &mdlen, EVP_md5(), NULL) || mdlen != 16)
        bench_die("md5 failed");
    for (unsigned b = 0; b < 16; b++)
        snprintf(hex + 2 * b, 3, "%02x", md[b]);
}

typedef struct {
    char (*row_md5)[33]; /* each row's md5 (hex), row i at i - 1 */
    char sum[33];        /* md5 of those, in _id order: what txn_check computes in PostgreSQL */
    double write_s;      /* how long writing them to mongosim took */
} txn_written;

/* How the documents reach mongosim's oplog. */
typedef enum {
    TXN_PLAIN,  /* plain inserts (insert_many, ordered): one entry each, the baseline */
    TXN_CHAIN,  /* one transaction's chain, built here in the server's shapes and split, and appended (appendOplog) */
    TXN_DRIVER, /* one client transaction (startTransaction .. commitTransaction), split by mongosim */
} txn_how;

typedef struct {
    txn_how how;
    uint64_t n;
    size_t pad; /* bytes of each document's pad */
    char db[64];
    txn_written *out;
} txn_load;

/* The documents in _id order, with the checksum of the rows they must become. */
typedef struct {
    const txn_load *l;
    uint64_t next; /* the next _id */
    char *pad, *row;
    EVP_MD_CTX *sum;
} txn_gen;

static void gen_open(txn_gen *g, const txn_load *l)
{
    g->l = l;
    g->next = 1;
    g->pad = malloc(l->pad + 1);
    g->row = malloc(l->pad + TXN_ROW_PAD);
    g->sum = EVP_MD_CTX_new();
    l->out->row_md5 = malloc(l->n * sizeof *l->out->row_md5);
    if (!g->pad || !g->row || !g->sum || !l->out->row_md5 || !EVP_DigestInit_ex(g->sum, EVP_md5(), NULL))
        bench_die("out of memory");
}

/* The next document into *doc (initialised here); false after the last. */
static bool gen_next(txn_gen *g, bson_t *doc)
{
    if (g->next > g->l->n)
        return false;
    uint64_t id = g->next++;
    int32_t k;
    char tag[16];
    size_t len = txn_doc(id, g->l->pad, &k, tag, sizeof tag, g->pad, g->row);
    md5_hex(g->row, len, g->l->out->row_md5[id - 1]);
    EVP_DigestUpdate(g->sum, g->l->out->row_md5[id - 1], 32);
    bson_init(doc);
    BSON_APPEND_INT64(doc, "_id", (int64_t)id);
    BSON_APPEND_INT32(doc, "k", k);
    BSON_APPEND_UTF8(doc, "tag", tag);
    BSON_APPEND_UTF8(doc, "pad", g->pad);
    return true;
}

static void gen_close(txn_gen *g)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!EVP_DigestFinal_ex(g->sum, md, &mdlen) || mdlen != 16)
        bench_die("md5 failed");
    for (unsigned b = 0; b < 16; b++)
        snprintf(g->l->out->sum + 2 * b, 3, "%02x", md[b]);
    EVP_MD_CTX_free(g->sum);
    free(g->row);
    free(g->pad);
}

/* Plain inserts, or one client transaction (TXN_DRIVER): ordered insert commands of TXN_BATCH documents. */
static void write_inserts(trial *t, txn_gen *g)
{
    static bson_t docs[TXN_BATCH];
    const bson_t *ptrs[TXN_BATCH];
    bson_error_t err;
    mongoc_client_session_t *cs = NULL;
    bson_t opts = BSON_INITIALIZER;
    if (g->l->how == TXN_DRIVER) {
        if ((cs = mongoc_client_start_session(t->client, NULL, &err)) == NULL ||
            !mongoc_client_session_start_transaction(cs, NULL, &err) || !mongoc_client_session_append(cs, &opts, &err))
            bench_die("starting the transaction: %s", err.message);
    }
    mongoc_collection_t *coll = mongoc_client_get_collection(t->client, g->l->db, "c0");
    for (;;) {
        size_t nb = 0;
        while (nb < TXN_BATCH && gen_next(g, &docs[nb])) {
            ptrs[nb] = &docs[nb];
            nb++;
        }
        if (nb == 0)
            break;
        bool ok = mongoc_collection_insert_many(coll, ptrs, nb, &opts, NULL, &err);
        for (size_t i = 0; i < nb; i++)
            bson_destroy(&docs[i]);
        if (!ok)
            bench_die("inserting into %s.c0: %s", g->l->db, err.message);
    }
    if (cs != NULL && !mongoc_client_session_commit_transaction(cs, NULL, &err))
        bench_die("committing the transaction: %s", err.message);
    mongoc_collection_destroy(coll);
    if (cs != NULL)
        mongoc_client_session_destroy(cs);
    bson_destroy(&opts);
}

/* The collection's uuid (listCollections info.uuid), for the inner ops' ui. */
static void collection_uuid(trial *t, const char *db, uint8_t uuid[16])
{
    mongoc_database_t *d = mongoc_client_get_database(t->client, db);
    bson_t *opts = BCON_NEW("filter", "{", "name", BCON_UTF8("c0"), "}");
    mongoc_cursor_t *cur = mongoc_database_find_collections_with_opts(d, opts);
    const bson_t *info;
    bool found = false;
    while (!found && mongoc_cursor_next(cur, &info)) {
        bson_iter_t it;
        const uint8_t *bin;
        uint32_t len;
        bson_subtype_t st;
        if (bson_iter_init(&it, info) && bson_iter_find_descendant(&it, "info.uuid", &it) &&
            BSON_ITER_HOLDS_BINARY(&it)) {
            bson_iter_binary(&it, &st, &len, &bin);
            if (len == 16) {
                memcpy(uuid, bin, 16);
                found = true;
            }
        }
    }
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    mongoc_database_destroy(d);
    if (!found)
        bench_die("no uuid for %s.c0", db);
}

/* A chain entry's head and tail, in a 4.4+ server's field order ([lsid, txnNumber,] op, ns, o, ts, t, v, wall,
 * prevOpTime): the applyOps array is appended between them. */
static const uint8_t TXN_LSID[16] = {0x08, 0xaf, 0xbc, 0xfa, 0x76, 0x7e, 0x11, 0xe9,
                                     0xbd, 0xa7, 0xab, 0xca, 0xf4, 0x11, 0x2d, 0xf6};
static const uint8_t EMPTY_SHA256[32] = {0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4,
                                         0xc8, 0x99, 0x6f, 0xb9, 0x24, 0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b,
                                         0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55};

/* Appends one entry to the oplog (appendOplog, the entry verbatim). */
static void append_entry(trial *t, const bson_t *entry)
{
    bson_t cmd = BSON_INITIALIZER, arr, reply;
    BSON_APPEND_ARRAY_BEGIN(&cmd, "appendOplog", &arr);
    BSON_APPEND_DOCUMENT(&arr, "0", entry);
    bson_append_array_end(&cmd, &arr);
    bson_error_t err;
    if (!mongoc_client_command_simple(t->client, "admin", &cmd, NULL, &reply, &err))
        bench_die("appendOplog of a %u-byte entry: %s", entry->len, err.message);
    bson_destroy(&reply);
    bson_destroy(&cmd);
}

/* One transaction as the server logs it at commit (transaction_operations.cpp, packOperationsIntoApplyOps): the
 * inserts packed into applyOps entries, each taking ops until the next would pass 16 MB (an op counts its size and 8
 * bytes), all but the last with partialTxn, the last with count, each prevOpTime the previous entry's OpTime (the
 * first the null OpTime), consecutive timestamps in the term of the newest entry. */
static void write_chain(trial *t, txn_gen *g)
{
    enum { ENTRY_LIMIT = 16 * 1024 * 1024 };
    uint8_t ui[16];
    collection_uuid(t, g->l->db, ui);
    char ns[128];
    snprintf(ns, sizeof ns, "%s.c0", g->l->db);
    /* The newest entry's ts and term: the chain is logged after it, in its term. */
    mongoc_collection_t *oplog = mongoc_client_get_collection(t->client, "local", "oplog.rs");
    bson_t *last_opts = BCON_NEW("sort", "{", "$natural", BCON_INT32(-1), "}", "limit", BCON_INT64(1));
    bson_t empty = BSON_INITIALIZER;
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, &empty, last_opts, NULL);
    const bson_t *last;
    uint32_t secs = 0, inc = 0;
    int64_t term = -1;
    bson_iter_t it;
    if (mongoc_cursor_next(cur, &last)) {
        if (bson_iter_init_find(&it, last, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it))
            bson_iter_timestamp(&it, &secs, &inc);
        if (bson_iter_init_find(&it, last, "t"))
            term = bson_iter_as_int64(&it);
    }
    mongoc_cursor_destroy(cur);
    bson_destroy(&empty);
    bson_destroy(last_opts);
    mongoc_collection_destroy(oplog);
    if (secs == 0 || term < 0)
        bench_die("no newest oplog entry with ts and t");
    secs++;
    inc = 0;
    bson_t inner, doc, entry, o, arr;
    bool have = gen_next(g, &doc);
    uint64_t total = 0;
    while (have) {
        bson_init(&entry);
        bson_t lsid;
        BSON_APPEND_DOCUMENT_BEGIN(&entry, "lsid", &lsid);
        bson_append_binary(&lsid, "id", -1, BSON_SUBTYPE_UUID, TXN_LSID, 16);
        bson_append_binary(&lsid, "uid", -1, BSON_SUBTYPE_BINARY, EMPTY_SHA256, 32);
        bson_append_document_end(&entry, &lsid);
        BSON_APPEND_INT64(&entry, "txnNumber", 1);
        BSON_APPEND_UTF8(&entry, "op", "c");
        BSON_APPEND_UTF8(&entry, "ns", "admin.$cmd");
        BSON_APPEND_DOCUMENT_BEGIN(&entry, "o", &o);
        BSON_APPEND_ARRAY_BEGIN(&o, "applyOps", &arr);
        size_t size = 0;
        uint32_t k = 0;
        while (have) {
            bson_init(&inner);
            BSON_APPEND_UTF8(&inner, "op", "i");
            BSON_APPEND_UTF8(&inner, "ns", ns);
            bson_append_binary(&inner, "ui", -1, BSON_SUBTYPE_UUID, ui, 16);
            BSON_APPEND_DOCUMENT(&inner, "o", &doc);
            if (k > 0 && size + inner.len > ENTRY_LIMIT) {
                bson_destroy(&inner);
                break;
            }
            char key[16];
            const char *kp;
            bson_uint32_to_string(k++, &kp, key, sizeof key);
            bson_append_document(&arr, kp, -1, &inner);
            size += inner.len + 8;
            bson_destroy(&inner);
            bson_destroy(&doc);
            total++;
            have = gen_next(g, &doc);
        }
        bson_append_array_end(&o, &arr);
        if (have)
            BSON_APPEND_BOOL(&o, "partialTxn", true);
        else if (inc > 0) /* count only ends a chain of two or more entries (oplog/REPORT.md §4) */
            BSON_APPEND_INT64(&o, "count", (int64_t)total);
        bson_append_document_end(&entry, &o);
        BSON_APPEND_TIMESTAMP(&entry, "ts", secs, ++inc);
        BSON_APPEND_INT64(&entry, "t", term);
        BSON_APPEND_INT64(&entry, "v", 2);
        BSON_APPEND_DATE_TIME(&entry, "wall", (int64_t)secs * 1000);
        bson_t prev;
        BSON_APPEND_DOCUMENT_BEGIN(&entry, "prevOpTime", &prev);
        BSON_APPEND_TIMESTAMP(&prev, "ts", inc > 1 ? secs : 0, inc > 1 ? inc - 1 : 0);
        BSON_APPEND_INT64(&prev, "t", inc > 1 ? term : -1);
        bson_append_document_end(&entry, &prev);
        append_entry(t, &entry);
        bson_destroy(&entry);
    }
}

static void write_txn(trial *t, const void *ctx)
{
    const txn_load *l = ctx;
    txn_gen g;
    gen_open(&g, l);
    double t0 = bench_now_s();
    if (l->how == TXN_CHAIN)
        write_chain(t, &g);
    else
        write_inserts(t, &g);
    l->out->write_s = bench_now_s() - t0;
    gen_close(&g);
}

/* The oplog after the trial's starting checkpoint: entries, bytes, and the transaction's applyOps entries. */
typedef struct {
    uint64_t entries, bytes, chain, partial, chain_bytes;
    uint32_t largest;
} oplog_shape;

static oplog_shape oplog_after(mongoc_client_t *c, uint64_t start)
{
    oplog_shape s = {0};
    mongoc_collection_t *oplog = mongoc_client_get_collection(c, "local", "oplog.rs");
    bson_t *filter = BCON_NEW("ts", "{", "$gt", BCON_TIMESTAMP((uint32_t)(start >> 32), (uint32_t)start), "}");
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, filter, NULL, NULL);
    const bson_t *doc;
    while (mongoc_cursor_next(cur, &doc)) {
        s.entries++;
        s.bytes += doc->len;
        bson_iter_t it, o;
        if (bson_iter_init_find(&it, doc, "o") && bson_iter_recurse(&it, &o) && bson_iter_find(&o, "applyOps")) {
            s.chain++;
            s.chain_bytes += doc->len;
            s.largest = doc->len > s.largest ? doc->len : s.largest;
            if (bson_iter_recurse(&it, &o) && bson_iter_find(&o, "partialTxn") && bson_iter_as_bool(&o))
                s.partial++;
        }
    }
    bson_error_t err;
    if (mongoc_cursor_error(cur, &err))
        bench_die("reading the oplog: %s", err.message);
    mongoc_cursor_destroy(cur);
    bson_destroy(filter);
    mongoc_collection_destroy(oplog);
    return s;
}

/* PostgreSQL holds exactly documents 1..n: the row count, and the md5 of the rows' md5s in _id order. On a
 * difference, the first row that differs is named. */
static void txn_check(trial *t, const txn_load *l)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT count(*), md5(string_agg(md5(_id || E'\\t' || doc::text), '' ORDER BY _id::bigint)) FROM %s.c0",
             l->db);
    PGresult *r = PQexec(t->pg, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        bench_die("%s: %s", sql, PQerrorMessage(t->pg));
    uint64_t rows = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
    bool same = rows == l->n && strcmp(PQgetvalue(r, 0, 1), l->out->sum) == 0;
    fprintf(stderr, "txn check %s: %llu rows, md5 %s (written: %llu rows, md5 %s)\n", l->db, (unsigned long long)rows,
            PQgetvalue(r, 0, 1), (unsigned long long)l->n, l->out->sum);
    PQclear(r);
    if (same)
        return;
    snprintf(sql, sizeof sql,
             "SELECT _id, md5(_id || E'\\t' || doc::text), left(doc::text, 120) FROM %s.c0 ORDER BY "
             "_id::bigint",
             l->db);
    r = PQexec(t->pg, sql);
    for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r); i++) {
        uint64_t id = strtoull(PQgetvalue(r, i, 0), NULL, 10);
        if (id != (uint64_t)i + 1 || id > l->n || strcmp(PQgetvalue(r, i, 1), l->out->row_md5[i]) != 0)
            bench_die("%s.c0 differs from what was written at row %d: _id %s, doc %s...", l->db, i + 1,
                      PQgetvalue(r, i, 0), PQgetvalue(r, i, 2));
    }
    bench_die("%s.c0 holds %llu rows, not the %llu written", l->db, (unsigned long long)rows, (unsigned long long)l->n);
}

typedef struct {
    double secs, cpu_s, sim_cpu_s, write_s;
    long peak_kb, sim_peak_kb;
    oplog_shape shape;
} txn_result;

static txn_result txn_trial(txn_how how, uint64_t n, size_t pad, int rep)
{
    trial t;
    char name[32];
    snprintf(name, sizeof name, "%s%d", how == TXN_PLAIN ? "pl" : "tx", rep);
    trial_open(&t, name, "batched");
    txn_written w = {0};
    txn_load l = {.how = how, .n = n, .pad = pad, .out = &w};
    snprintf(l.db, sizeof l.db, "%s0", t.prefix);
    /* The collection first, so that its table is made before the timing, with either way of writing. */
    mongoc_database_t *db = mongoc_client_get_database(t.client, l.db);
    bson_error_t err;
    mongoc_collection_t *made = mongoc_database_create_collection(db, "c0", NULL, &err);
    if (made == NULL)
        bench_die("creating %s.c0: %s", l.db, err.message);
    mongoc_collection_destroy(made);
    mongoc_database_destroy(db);
    txn_result res = {.peak_kb = -1};
    res.secs = backlog_timed(&t, write_txn, &l, NULL, NULL, &res.peak_kb, &res.cpu_s);
    res.sim_cpu_s = t.sim_cpu_s;
    res.write_s = w.write_s;
    txn_check(&t, &l);
    res.shape = oplog_after(t.client, t.start);
    if (how != TXN_PLAIN && (res.shape.chain < 1 || res.shape.partial + 1 != res.shape.chain))
        bench_die("the transaction was logged as %llu applyOps entries (%llu partialTxn), not one transaction",
                  (unsigned long long)res.shape.chain, (unsigned long long)res.shape.partial);
    free(w.row_md5);
    res.sim_peak_kb = proc_peak_kb(t.sim.pid);
    trial_close(&t);
    fprintf(stderr,
            "txn %s run %d: written in %.1f s; replicated in %.2f s, peak %ld kB, daemon CPU %.1f s, mongosim CPU "
            "%.1f s (its peak %ld kB); %llu entries of %.1f MB\n",
            how == TXN_PLAIN ? "plain" : "transaction", rep + 1, res.write_s, res.secs, res.peak_kb, res.cpu_s,
            res.sim_cpu_s, res.sim_peak_kb, (unsigned long long)res.shape.entries, (double)res.shape.bytes / 1e6);
    return res;
}

/* Issue 12: n documents in one transaction (a chain of 16 MB entries) against the same n documents as plain inserts,
 * each replicated from a checkpoint before them; BENCH_TXN_REPS pairs (default 1), plain first, then the
 * transaction. The figure to hold: the daemon's peak resident memory within 64 MB. */
static void bench_txn(uint64_t n, size_t pad)
{
    int reps = stats_reps("BENCH_TXN_REPS", 1);
    if (pad < 1 || pad > 8u << 20)
        bench_die("the pad must be 1 byte to 8 MB");
    const char *write = getenv("BENCH_TXN_WRITE");
    txn_how how = TXN_CHAIN;
    if (write != NULL && strcmp(write, "driver") == 0)
        how = TXN_DRIVER;
    else if (write != NULL && *write != '\0' && strcmp(write, "chain") != 0)
        bench_die("BENCH_TXN_WRITE must be chain or driver");
    txn_result plain[STATS_MAX_RUNS], txn[STATS_MAX_RUNS];
    for (int i = 0; i < reps; i++) {
        plain[i] = txn_trial(TXN_PLAIN, n, pad, i);
        txn[i] = txn_trial(how, n, pad, i);
    }
    const oplog_shape *ts = &txn[0].shape;
    printf("%llu documents of %d bytes of text each in one transaction (%s): %.1f MB of oplog in %llu entries "
           "(%llu partialTxn and the implicit commit, the largest %.2f MB); and the same documents as %llu plain "
           "inserts (%.1f MB of oplog in %llu entries). Each replicated by oplog2pg from a checkpoint before them; "
           "rows and checksum equal to what was written.\n\n",
           (unsigned long long)n, (int)pad,
           how == TXN_CHAIN ? "its chain appended as the server logs it at commit"
                            : "written by the driver, startTransaction to commitTransaction",
           (double)ts->bytes / 1e6, (unsigned long long)ts->chain, (unsigned long long)ts->partial,
           (double)ts->largest / 1048576.0, (unsigned long long)n, (double)plain[0].shape.bytes / 1e6,
           (unsigned long long)plain[0].shape.entries);
    printf("| what | rows | oplog MB | seconds | MB/s | rows/s | daemon CPU s | mongosim CPU s | daemon peak RSS |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    double ratio[STATS_MAX_RUNS];
    long peak = 0;
    for (int i = 0; i < reps; i++) {
        const txn_result *rs[2] = {&plain[i], &txn[i]};
        for (int k = 0; k < 2; k++) {
            const txn_result *r = rs[k];
            char run[24] = "";
            if (reps > 1)
                snprintf(run, sizeof run, ", run %d", i + 1);
            printf("| %s%s | %llu | %.1f | %.2f | %.1f | %.0f | %.1f | %.1f | %.1f MB |\n",
                   k ? "one transaction" : "plain inserts (the baseline)", run, (unsigned long long)n,
                   (double)r->shape.bytes / 1e6, r->secs, (double)r->shape.bytes / 1e6 / r->secs, (double)n / r->secs,
                   r->cpu_s, r->sim_cpu_s, (double)r->peak_kb / 1024.0);
        }
        ratio[i] = txn[i].secs / plain[i].secs;
        peak = txn[i].peak_kb > peak ? txn[i].peak_kb : peak;
    }
    printf("\nThe transaction took **%.2fx** the baseline's time%s. The daemon's peak resident memory with the "
           "transaction: **%.1f MB** (%ld kB); bound 64 MB: **%s**. (mongosim's own peak: %.2f GB.)\n",
           stats_median(ratio, reps), reps > 1 ? " (median of the pairs)" : "", (double)peak / 1024.0, peak,
           peak > 0 && peak <= 64 * 1024 ? "met" : "not met", (double)txn[0].sim_peak_kb / 1048576.0);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    program_start("bench/txn", argv[0], "[N [PAD]]");
    uint64_t n = program_arg(argc, argv, 1, 0);
    bench_txn(n ? n : 270000, (size_t)program_arg(argc, argv, 2, TXN_PAD));
    return program_end();
}

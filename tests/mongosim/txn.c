/*
 * txn.c — client transactions, prepared transactions and batched multi-deletes, logged as a 4.2+ server logs them.
 *
 * Sources (mongodb/mongo): src/mongo/db/transaction/transaction_operations.cpp (the split into applyOps entries,
 * partialTxn, count, prevOpTime), src/mongo/db/op_observer/op_observer_impl.cpp (onUnpreparedTransactionCommit,
 * onTransactionPrepare, onPreparedTransactionCommit, onTransactionAbort, onBatchedWriteCommit),
 * src/mongo/db/transaction/transaction_participant.cpp (beginOrContinue and its errors),
 * src/mongo/db/handle_request_response.cpp (isTransientTransactionError: the TransientTransactionError label),
 * src/mongo/db/exec/batched_delete_stage.{cpp,idl} (batch targets).
 *
 * HOW: a transaction's writes run through the store like any write, so replies, errors and entry bodies are the
 * store's. Before a statement, the committed image of every document it may touch is kept (its "pre" image); after
 * it, the document as the transaction left it (its "post" image) is kept and the pre image is put back. The store
 * thus holds committed data between the transaction's commands, and the transaction's own writes only while one of
 * its commands runs (which is how its reads see them). Commit puts the post images in for good and logs the
 * collected bodies; abort only forgets them. A document whose committed image changed under the transaction
 * (another client wrote it) is a WriteConflict at the transaction's next command or at commit.
 */
#include "txn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* sha256("") — the lsid.uid a server records when no user is authenticated. */
static const uint8_t EMPTY_UID[32] = {0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4,
                                      0xc8, 0x99, 0x6f, 0xb9, 0x24, 0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b,
                                      0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55};

/* ---- pure part ---- */

size_t txn_split(const uint32_t *sizes, size_t n, size_t count_limit, size_t size_limit, size_t *counts)
{
    size_t entries = 0, i = 0;
    if (count_limit == 0)
        count_limit = 1;
    while (i < n) {
        size_t k = 0, total = 0;
        /* packOperationsIntoApplyOps: stop at the count limit, or when this op would pass the size limit (an entry
         * always takes its first op, however large). */
        while (i + k < n) {
            if (k == count_limit)
                break;
            if (k > 0 && total + sizes[i + k] > size_limit)
                break;
            total += sizes[i + k] + 8; /* kBSONArrayElementOverhead */
            k++;
        }
        counts[entries++] = k;
        i += k;
    }
    return entries;
}

void txn_append_lsid(bson_t *b, const uint8_t *id)
{
    bson_t l;
    BSON_APPEND_DOCUMENT_BEGIN(b, "lsid", &l);
    bson_append_binary(&l, "id", -1, BSON_SUBTYPE_UUID, id, 16);
    bson_append_binary(&l, "uid", -1, BSON_SUBTYPE_BINARY, EMPTY_UID, 32);
    bson_append_document_end(b, &l);
}

static void append_optime(bson_t *b, const char *key, uint64_t ts, int64_t t)
{
    bson_t o;
    BSON_APPEND_DOCUMENT_BEGIN(b, key, &o);
    BSON_APPEND_TIMESTAMP(&o, "ts", OPLOG_TS_SECS(ts), OPLOG_TS_INC(ts));
    BSON_APPEND_INT64(&o, "t", t);
    bson_append_document_end(b, &o);
}

long txn_log_chain(bson_t *const *ops, size_t n, const txn_chain_opts *o, uint64_t *last_ts)
{
    size_t *counts = calloc(n ? n : 1, sizeof *counts);
    uint32_t *sizes = calloc(n ? n : 1, sizeof *sizes);
    if (!counts || !sizes)
        abort();
    for (size_t i = 0; i < n; i++)
        sizes[i] = ops[i]->len;
    size_t entries = txn_split(sizes, n, o->count_limit, o->size_limit, counts);
    if (entries == 0 && o->kind == TXN_CHAIN_PREPARE) {
        /* onTransactionPrepare with no statements: "Log an empty 'prepare' oplog entry". */
        counts[0] = 0;
        entries = 1;
    }
    /* logOplogEntries: the first entry's prevOpTime is the null OpTime {ts: Timestamp(0, 0), t: -1}. */
    uint64_t prev_ts = 0;
    int64_t prev_t = -1;
    size_t next = 0;
    long logged = 0;
    for (size_t e = 0; e < entries; e++) {
        bool first = e == 0, last = e + 1 == entries;
        uint64_t ts = o->next_ts(o->ctx);
        bson_t entry = BSON_INITIALIZER, obj, arr;
        if (o->kind != TXN_CHAIN_BATCHED) {
            /* logApplyOps adds the session of a transaction (lsid, txnNumber) before the entry's fields. */
            txn_append_lsid(&entry, o->lsid);
            BSON_APPEND_INT64(&entry, "txnNumber", o->txn_number);
        }
        BSON_APPEND_UTF8(&entry, "op", "c");
        BSON_APPEND_UTF8(&entry, "ns", "admin.$cmd");
        BSON_APPEND_DOCUMENT_BEGIN(&entry, "o", &obj);
        BSON_APPEND_ARRAY_BEGIN(&obj, "applyOps", &arr);
        for (size_t i = 0; i < counts[e]; i++) {
            char keybuf[16];
            const char *key;
            bson_uint32_to_string((uint32_t)i, &key, keybuf, sizeof keybuf);
            BSON_APPEND_DOCUMENT(&arr, key, ops[next++]);
        }
        bson_append_array_end(&obj, &arr);
        /* "prepare" on the implicit prepare entry, "partialTxn" on every other but the last, and "count" (int64, all
         * operations) on a last entry that is not also the first. */
        if (last && o->kind == TXN_CHAIN_PREPARE)
            BSON_APPEND_BOOL(&obj, "prepare", true);
        if (!last)
            BSON_APPEND_BOOL(&obj, "partialTxn", true);
        if (last && !first)
            BSON_APPEND_INT64(&obj, "count", (int64_t)n);
        bson_append_document_end(&entry, &obj);
        BSON_APPEND_TIMESTAMP(&entry, "ts", OPLOG_TS_SECS(ts), OPLOG_TS_INC(ts));
        BSON_APPEND_INT64(&entry, "t", o->term);
        BSON_APPEND_INT64(&entry, "v", 2);
        BSON_APPEND_DATE_TIME(&entry, "wall", o->wall_ms);
        /* onBatchedWriteCommit removes prevOpTime from a batched write logged as a single entry (the legacy atomic
         * applyOps format); a chain keeps it (SERVER-70572). */
        if (!(o->kind == TXN_CHAIN_BATCHED && first && last))
            append_optime(&entry, "prevOpTime", prev_ts, prev_t);
        bool ok = o->append(o->ctx, &entry, ts);
        bson_destroy(&entry);
        if (!ok) {
            logged = -1;
            break;
        }
        logged++;
        prev_ts = ts;
        prev_t = o->term;
        if (last_ts)
            *last_ts = ts;
    }
    free(counts);
    free(sizes);
    return logged;
}

/* ---- server side ---- */

typedef enum { TXN_ACTIVE, TXN_PREPARED, TXN_COMMITTED, TXN_ABORTED } txn_state;

typedef struct {
    char db[128], coll[256];
    bson_t *key;  /* {_id: X} */
    bson_t *pre;  /* committed image, NULL when absent */
    bson_t *post; /* the transaction's image, NULL when absent */
} txn_doc;

typedef struct sim_txn {
    uint8_t lsid[16];
    int64_t txn_number;
    txn_state state;
    bson_t **ops;
    size_t nops, capops;
    txn_doc *docs;
    size_t ndocs, capdocs;
    char (*created)[400]; /* "db\0coll" pairs of collections the transaction created */
    size_t ncreated;
    bool failed;
    uint64_t prepare_ts;
    int64_t prepare_t;
    struct sim_txn *next;
} sim_txn;

struct sim_txns {
    sim_txn *list; /* one record per lsid: its newest txnNumber */
    sim_txn *current;
    /* Server parameters (setParameter). Defaults: maxNumberOfTransactionOperationsInSingleOplogEntry and
     * maxNumberOfBatchedOperationsInSingleOplogEntry INT_MAX (repl_server_parameters.idl), the batched size limit
     * 16 MB, batchedDeletesTargetBatchDocs 10 and batchedDeletesTargetStagedDocBytes 2 MB
     * (batched_delete_stage.idl). */
    int64_t max_txn_ops, max_batched_ops, max_batched_bytes, batch_docs, batch_bytes;
};

static struct sim_txns *state(sim_server *srv)
{
    if (!srv->txns) {
        srv->txns = calloc(1, sizeof *srv->txns);
        if (!srv->txns)
            abort();
        srv->txns->max_txn_ops = INT32_MAX;
        srv->txns->max_batched_ops = INT32_MAX;
        srv->txns->max_batched_bytes = TXN_ENTRY_SIZE_LIMIT;
        srv->txns->batch_docs = 10;
        srv->txns->batch_bytes = 2097152;
    }
    return srv->txns;
}

static void txn_clear(sim_txn *t)
{
    for (size_t i = 0; i < t->nops; i++)
        bson_destroy(t->ops[i]);
    free(t->ops);
    t->ops = NULL;
    t->nops = t->capops = 0;
    for (size_t i = 0; i < t->ndocs; i++) {
        bson_destroy(t->docs[i].key);
        if (t->docs[i].pre)
            bson_destroy(t->docs[i].pre);
        if (t->docs[i].post)
            bson_destroy(t->docs[i].post);
    }
    free(t->docs);
    t->docs = NULL;
    t->ndocs = t->capdocs = 0;
    free(t->created);
    t->created = NULL;
    t->ncreated = 0;
    t->failed = false;
}

void txn_state_free(sim_server *srv)
{
    if (!srv->txns)
        return;
    sim_txn *t = srv->txns->list;
    while (t) {
        sim_txn *n = t->next;
        txn_clear(t);
        free(t);
        t = n;
    }
    free(srv->txns);
    srv->txns = NULL;
}

bool txn_current(const sim_server *srv)
{
    return srv->txns && srv->txns->current;
}

/* ---- replies ---- */

static const char *code_name(int code)
{
    switch (code) {
    case 72:
        return "InvalidOptions";
    case 112:
        return "WriteConflict";
    case 225:
        return "TransactionTooOld";
    case 251:
        return "NoSuchTransaction";
    case 256:
        return "TransactionCommitted";
    case 263:
        return "OperationNotSupportedInTransaction";
    case 267:
        return "PreparedTransactionInProgress";
    default:
        return sim_code_name(code);
    }
}

/* {ok: 0, errmsg, code, codeName[, errorLabels: ["TransientTransactionError"]]}: isTransientTransactionError labels
 * WriteConflict and NoSuchTransaction (with no write concern error, as here). */
static void txn_error(sim_reply *r, int code, const char *fmt, ...) BSON_GNUC_PRINTF(3, 4);
static void txn_error(sim_reply *r, int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    bson_t d = BSON_INITIALIZER;
    BSON_APPEND_DOUBLE(&d, "ok", 0.0);
    BSON_APPEND_UTF8(&d, "errmsg", msg);
    BSON_APPEND_INT32(&d, "code", code);
    BSON_APPEND_UTF8(&d, "codeName", code_name(code));
    if (code == 112 || code == 251) {
        bson_t labels;
        BSON_APPEND_ARRAY_BEGIN(&d, "errorLabels", &labels);
        BSON_APPEND_UTF8(&labels, "0", "TransientTransactionError");
        bson_append_array_end(&d, &labels);
    }
    reply_bson(r, &d);
    bson_destroy(&d);
}

static void reply_ok_doc(sim_reply *r, bson_t *d)
{
    BSON_APPEND_DOUBLE(d, "ok", 1.0);
    reply_bson(r, d);
    bson_destroy(d);
}

/* ---- document images ---- */

typedef struct {
    bson_t *doc;
} find_one_ctx;

static bool find_one_cb(void *ctx, const bson_t *doc)
{
    ((find_one_ctx *)ctx)->doc = bson_copy(doc);
    return false;
}

static bson_t *store_get(sim_server *srv, const char *db, const char *coll, const bson_t *key)
{
    find_one_ctx c = {NULL};
    store_find(srv->store, db, coll, key, find_one_cb, &c);
    return c.doc;
}

/* Makes the store's document `key` equal to img (NULL: absent), logging nothing. */
static void store_put(sim_server *srv, const char *db, const char *coll, const bson_t *key, const bson_t *img)
{
    bson_error_t err;
    if (img) {
        if (!store_update(srv->store, db, coll, key, img, true, NULL, NULL, NULL, &err))
            fprintf(stderr, "mongosim: transaction: cannot restore a document in %s.%s: %s\n", db, coll, err.message);
    } else {
        int64_t n;
        store_delete(srv->store, db, coll, key, 1, &n, NULL, NULL, &err);
    }
}

static bool same_image(const bson_t *a, const bson_t *b)
{
    if (!a || !b)
        return a == b;
    return bson_equal(a, b);
}

static txn_doc *doc_find(sim_txn *t, const char *db, const char *coll, const bson_t *key)
{
    for (size_t i = 0; i < t->ndocs; i++)
        if (strcmp(t->docs[i].db, db) == 0 && strcmp(t->docs[i].coll, coll) == 0 && bson_equal(t->docs[i].key, key))
            return &t->docs[i];
    return NULL;
}

/* Records the committed image of db.coll {_id} unless the transaction already has the document. */
static void doc_note(sim_server *srv, sim_txn *t, const char *db, const char *coll, const bson_value_t *id)
{
    bson_t key = BSON_INITIALIZER;
    bson_append_value(&key, "_id", 3, id);
    if (doc_find(t, db, coll, &key) || strlen(db) >= 128 || strlen(coll) >= 256) {
        bson_destroy(&key);
        return;
    }
    if (t->ndocs == t->capdocs) {
        t->capdocs = t->capdocs ? t->capdocs * 2 : 16;
        t->docs = realloc(t->docs, t->capdocs * sizeof *t->docs);
        if (!t->docs)
            abort();
    }
    txn_doc *d = &t->docs[t->ndocs++];
    memset(d, 0, sizeof *d);
    snprintf(d->db, sizeof d->db, "%s", db);
    snprintf(d->coll, sizeof d->coll, "%s", coll);
    d->key = bson_copy(&key);
    d->pre = store_get(srv, db, coll, &key);
    d->post = d->pre ? bson_copy(d->pre) : NULL;
    bson_destroy(&key);
}

typedef struct {
    sim_server *srv;
    sim_txn *t;
    const char *db, *coll;
} note_all_ctx;

static bool note_all_cb(void *ctx, const bson_t *doc)
{
    note_all_ctx *c = ctx;
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, "_id"))
        doc_note(c->srv, c->t, c->db, c->coll, bson_iter_value(&it));
    return true;
}

/* The documents a write command may touch: inserted _ids, update q._id, delete q._id or (q {}) the whole
 * collection (store.c accepts no other query shapes for writes). */
static void note_candidates(sim_server *srv, sim_txn *t, const bson_t *cmd, const char *name, const char *db)
{
    bson_iter_t first, arr, it;
    if (!bson_iter_init(&first, cmd) || !bson_iter_next(&first) || !BSON_ITER_HOLDS_UTF8(&first))
        return;
    const char *coll = bson_iter_utf8(&first, NULL);
    const char *field = strcmp(name, "insert") == 0 ? "documents" : strcmp(name, "update") == 0 ? "updates" : "deletes";
    if (!bson_iter_init_find(&it, cmd, field) || !BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &arr))
        return;
    while (bson_iter_next(&arr)) {
        bson_iter_t sub, id;
        if (!BSON_ITER_HOLDS_DOCUMENT(&arr) || !bson_iter_recurse(&arr, &sub))
            continue;
        if (strcmp(name, "insert") == 0) {
            if (bson_iter_find(&sub, "_id"))
                doc_note(srv, t, db, coll, bson_iter_value(&sub));
            continue;
        }
        if (!bson_iter_find(&sub, "q") || !BSON_ITER_HOLDS_DOCUMENT(&sub) || !bson_iter_recurse(&sub, &id))
            continue;
        if (bson_iter_find(&id, "_id")) {
            doc_note(srv, t, db, coll, bson_iter_value(&id));
        } else if (strcmp(name, "delete") == 0) {
            note_all_ctx c = {srv, t, db, coll};
            bson_t empty = BSON_INITIALIZER;
            store_find(srv->store, db, coll, &empty, note_all_cb, &c);
        }
    }
}

/* ---- transaction records ---- */

static sim_txn *txn_by_lsid(sim_server *srv, const uint8_t *lsid)
{
    for (sim_txn *t = state(srv)->list; t; t = t->next)
        if (memcmp(t->lsid, lsid, 16) == 0)
            return t;
    return NULL;
}

/* Forgets the transaction's writes; drops the collections it created (the store holds committed data now). */
static void txn_abort_local(sim_server *srv, sim_txn *t)
{
    for (size_t i = 0; i < t->ncreated; i++) {
        const char *db = t->created[i], *coll = db + strlen(db) + 1;
        bool existed;
        bson_error_t err;
        if (store_count(srv->store, db, coll) == 0)
            store_drop(srv->store, db, coll, &existed, NULL, NULL, &err);
    }
    txn_clear(t);
    t->state = TXN_ABORTED;
}

bool txn_parse_session(const bson_t *cmd, uint8_t *lsid, int64_t *txn_number)
{
    bson_iter_t it, sub;
    if (!bson_iter_init_find(&it, cmd, "lsid") || !BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &sub) ||
        !bson_iter_find(&sub, "id") || !BSON_ITER_HOLDS_BINARY(&sub))
        return false;
    uint32_t len;
    const uint8_t *data;
    bson_subtype_t st;
    bson_iter_binary(&sub, &st, &len, &data);
    if (len != 16)
        return false;
    memcpy(lsid, data, 16);
    if (!bson_iter_init_find(&it, cmd, "txnNumber") || !BSON_ITER_HOLDS_NUMBER(&it))
        return false;
    *txn_number = bson_iter_as_int64(&it);
    return true;
}

/* A document changed under the transaction: WriteConflict, and the transaction is aborted. This simplifies the
 * server, which fails the second writer at once (WriteConflict or a prepare conflict). */
static bool check_conflicts(sim_server *srv, sim_reply *r, sim_txn *t)
{
    for (size_t i = 0; i < t->ndocs; i++) {
        txn_doc *d = &t->docs[i];
        bson_t *now = store_get(srv, d->db, d->coll, d->key);
        bool same = same_image(now, d->pre);
        if (now)
            bson_destroy(now);
        if (!same) {
            txn_abort_local(srv, t);
            txn_error(r, 112,
                      "Write conflict during plan execution and yielding is disabled. :: Please retry your operation "
                      "or multi-document transaction.");
            return false;
        }
    }
    return true;
}

static void apply_images(sim_server *srv, sim_txn *t, bool post)
{
    for (size_t i = 0; i < t->ndocs; i++) {
        txn_doc *d = &t->docs[i];
        if (!same_image(d->post, d->pre))
            store_put(srv, d->db, d->coll, d->key, post ? d->post : d->pre);
    }
}

static bool txn_allowed(const char *name)
{
    static const char *const ok[] = {"insert",  "update",    "delete", "find",
                                     "getMore", "aggregate", "count",  "killCursors"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (strcmp(ok[i], name) == 0)
            return true;
    return false;
}

/* transaction_participant.cpp beginOrContinue: the checks on txnNumber, startTransaction and the state. */
static sim_txn *txn_lookup(sim_server *srv, sim_reply *r, const bson_t *cmd, bool may_start, bool *started)
{
    uint8_t lsid[16];
    int64_t num;
    bson_iter_t it;
    *started = false;
    if (!txn_parse_session(cmd, lsid, &num)) {
        txn_error(r, 72, "'autocommit' and transaction commands need an lsid {id: UUID} and a txnNumber");
        return NULL;
    }
    if (bson_iter_init_find(&it, cmd, "autocommit") && bson_iter_as_bool(&it)) {
        txn_error(r, 72, "autocommit:true is not supported in a multi-document transaction");
        return NULL;
    }
    bool start = bson_iter_init_find(&it, cmd, "startTransaction") && bson_iter_as_bool(&it);
    sim_txn *t = txn_by_lsid(srv, lsid);
    if (start && may_start) {
        if (t && num < t->txn_number) {
            txn_error(r, 225,
                      "Cannot start transaction %" PRId64 " on session because a newer transaction %" PRId64
                      " has already started.",
                      num, t->txn_number);
            return NULL;
        }
        if (t && num == t->txn_number) {
            txn_error(r, 117, "Given transaction number %" PRId64 " is already in use", num);
            return NULL;
        }
        if (t && t->state == TXN_PREPARED) {
            txn_error(r, 267, "Cannot start a new transaction on a session with a prepared transaction");
            return NULL;
        }
        if (!t) {
            t = calloc(1, sizeof *t);
            if (!t)
                abort();
            memcpy(t->lsid, lsid, 16);
            t->next = state(srv)->list;
            state(srv)->list = t;
        } else if (t->state == TXN_ACTIVE) {
            txn_abort_local(srv, t); /* a newer txnNumber aborts the running transaction */
        }
        txn_clear(t);
        t->txn_number = num;
        t->state = TXN_ACTIVE;
        *started = true;
        return t;
    }
    if (t && num < t->txn_number) {
        txn_error(r, 225, "txnNumber %" PRId64 " is less than last txnNumber %" PRId64 " seen in this session", num,
                  t->txn_number);
        return NULL;
    }
    if (!t || num != t->txn_number) {
        txn_error(r, 251,
                  "Given transaction number %" PRId64
                  " does not match any in-progress transactions. The active transaction number is %" PRId64,
                  num, t ? t->txn_number : -1);
        return NULL;
    }
    return t;
}

bool txn_enter(sim_server *srv, sim_reply *r, const bson_t *cmd, const char *name, const char *db)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, cmd, "autocommit") || strcmp(name, "commitTransaction") == 0 ||
        strcmp(name, "abortTransaction") == 0 || strcmp(name, "prepareTransaction") == 0)
        return true;
    if (!txn_allowed(name)) {
        txn_error(r, 263, "Cannot run '%s' in a multi-document transaction.", name);
        return false;
    }
    bool started;
    sim_txn *t = txn_lookup(srv, r, cmd, true, &started);
    if (!t)
        return false;
    switch (t->state) {
    case TXN_ABORTED:
        txn_error(r, 251, "Transaction with { txnNumber: %" PRId64 " } has been aborted.", t->txn_number);
        return false;
    case TXN_COMMITTED:
        txn_error(r, 256, "Transaction with { txnNumber: %" PRId64 " } has been committed.", t->txn_number);
        return false;
    case TXN_PREPARED:
        txn_error(r, 267, "Cannot call %s on a prepared transaction", name);
        return false;
    case TXN_ACTIVE:
        break;
    }
    if (!check_conflicts(srv, r, t))
        return false;
    apply_images(srv, t, true);
    if (strcmp(name, "insert") == 0 || strcmp(name, "update") == 0 || strcmp(name, "delete") == 0)
        note_candidates(srv, t, cmd, name, db);
    state(srv)->current = t;
    return true;
}

void txn_take_ops(sim_server *srv, bson_t **ops, size_t n)
{
    sim_txn *t = state(srv)->current;
    for (size_t i = 0; i < n; i++) {
        bson_t *op = ops[i];
        bson_iter_t it, o;
        const char *kind = bson_iter_init_find(&it, op, "op") ? bson_iter_utf8(&it, NULL) : "";
        const char *ns = bson_iter_init_find(&it, op, "ns") ? bson_iter_utf8(&it, NULL) : "";
        const char *dot = strchr(ns, '.');
        char db[128];
        if (dot && (size_t)(dot - ns) < sizeof db) {
            memcpy(db, ns, (size_t)(dot - ns));
            db[dot - ns] = '\0';
            if (strcmp(kind, "c") == 0 && bson_iter_init_find(&it, op, "o") && bson_iter_recurse(&it, &o) &&
                bson_iter_find(&o, "create") && BSON_ITER_HOLDS_UTF8(&o)) {
                t->created = realloc(t->created, (t->ncreated + 1) * sizeof *t->created);
                if (!t->created)
                    abort();
                snprintf(t->created[t->ncreated], sizeof t->created[0], "%s%c%s", db, '\0', dot + 1);
                t->ncreated++;
            } else if (strcmp(kind, "i") == 0 && bson_iter_init_find(&it, op, "o") && bson_iter_recurse(&it, &o) &&
                       bson_iter_find(&o, "_id")) {
                /* An _id the store generated: the document did not exist before. */
                doc_note(srv, t, db, dot + 1, bson_iter_value(&o));
            }
        }
        if (t->nops == t->capops) {
            t->capops = t->capops ? t->capops * 2 : 16;
            t->ops = realloc(t->ops, t->capops * sizeof *t->ops);
            if (!t->ops)
                abort();
        }
        t->ops[t->nops++] = op;
    }
}

void txn_statement_failed(sim_server *srv)
{
    if (txn_current(srv))
        srv->txns->current->failed = true;
}

void txn_leave(sim_server *srv)
{
    if (!txn_current(srv))
        return;
    sim_txn *t = srv->txns->current;
    srv->txns->current = NULL;
    for (size_t i = 0; i < t->ndocs; i++) {
        txn_doc *d = &t->docs[i];
        if (d->post)
            bson_destroy(d->post);
        d->post = store_get(srv, d->db, d->coll, d->key);
    }
    apply_images(srv, t, false);
    if (t->failed)
        txn_abort_local(srv, t); /* a write error aborts the transaction */
}

/* ---- logging ---- */

typedef struct {
    sim_server *srv;
    bson_error_t err;
} log_ctx;

static uint64_t log_next_ts(void *ctx)
{
    return sim_next_ts(((log_ctx *)ctx)->srv);
}

static bool log_append(void *ctx, const bson_t *entry, uint64_t ts)
{
    log_ctx *c = ctx;
    if (!sim_append_entry(c->srv, entry, ts, &c->err)) {
        fprintf(stderr, "mongosim: cannot log a transaction entry: %s\n", c->err.message);
        return false;
    }
    return true;
}

static long log_txn_chain(sim_server *srv, sim_txn *t, txn_chain_kind kind, uint64_t *last_ts)
{
    log_ctx c = {.srv = srv};
    txn_chain_opts o = {.kind = kind,
                        .lsid = t->lsid,
                        .txn_number = t->txn_number,
                        .term = srv->term,
                        .wall_ms = sim_now_ms(),
                        .count_limit = (size_t)state(srv)->max_txn_ops,
                        .size_limit = TXN_ENTRY_SIZE_LIMIT,
                        .next_ts = log_next_ts,
                        .append = log_append,
                        .ctx = &c};
    return txn_log_chain(t->ops, t->nops, &o, last_ts);
}

/* {commitTransaction: 1} / {abortTransaction: 1} after a prepare: logCommitOrAbortForPreparedTransaction writes
 * lsid, txnNumber, op c on admin.$cmd, the object, and prevOpTime = the prepare entry's OpTime. */
static bool log_prepared_end(sim_server *srv, sim_txn *t, bool commit, uint32_t cts_secs, uint32_t cts_inc)
{
    uint64_t ts = sim_next_ts(srv);
    bson_t e = BSON_INITIALIZER, o;
    txn_append_lsid(&e, t->lsid);
    BSON_APPEND_INT64(&e, "txnNumber", t->txn_number);
    BSON_APPEND_UTF8(&e, "op", "c");
    BSON_APPEND_UTF8(&e, "ns", "admin.$cmd");
    BSON_APPEND_DOCUMENT_BEGIN(&e, "o", &o);
    if (commit) {
        BSON_APPEND_INT32(&o, "commitTransaction", 1);
        BSON_APPEND_TIMESTAMP(&o, "commitTimestamp", cts_secs, cts_inc);
    } else {
        BSON_APPEND_INT32(&o, "abortTransaction", 1);
    }
    bson_append_document_end(&e, &o);
    BSON_APPEND_TIMESTAMP(&e, "ts", OPLOG_TS_SECS(ts), OPLOG_TS_INC(ts));
    BSON_APPEND_INT64(&e, "t", srv->term);
    BSON_APPEND_INT64(&e, "v", 2);
    BSON_APPEND_DATE_TIME(&e, "wall", sim_now_ms());
    append_optime(&e, "prevOpTime", t->prepare_ts, t->prepare_t);
    log_ctx c = {.srv = srv};
    bool ok = log_append(&c, &e, ts);
    bson_destroy(&e);
    return ok;
}

static bool need_primary(sim_server *srv, sim_reply *r)
{
    if (!srv->stepped_down)
        return true;
    reply_error(r, 10107, "not primary");
    return false;
}

void txn_cmd_commit(sim_server *srv, sim_reply *r, const bson_t *cmd)
{
    bool started;
    if (!need_primary(srv, r))
        return;
    r->wc_ran = true; /* the command's write concern applies, even to its error (commands.c, write concern) */
    sim_txn *t = txn_lookup(srv, r, cmd, false, &started);
    if (!t)
        return;
    bson_iter_t it;
    bool have_cts = bson_iter_init_find(&it, cmd, "commitTimestamp") && BSON_ITER_HOLDS_TIMESTAMP(&it);
    uint32_t cts_secs = 0, cts_inc = 0;
    if (have_cts)
        bson_iter_timestamp(&it, &cts_secs, &cts_inc);
    bson_t reply = BSON_INITIALIZER;
    switch (t->state) {
    case TXN_COMMITTED:
        /* A retried commitTransaction succeeds again and writes nothing (transaction_participant.cpp). */
        reply_ok_doc(r, &reply);
        return;
    case TXN_ABORTED:
        bson_destroy(&reply);
        txn_error(r, 251, "Transaction with { txnNumber: %" PRId64 " } has been aborted.", t->txn_number);
        return;
    case TXN_PREPARED: {
        if (!have_cts) {
            bson_destroy(&reply);
            txn_error(r, 72, "commitTransaction for a prepared transaction must have a commitTimestamp");
            return;
        }
        if (OPLOG_TS(cts_secs, cts_inc) < t->prepare_ts) {
            bson_destroy(&reply);
            txn_error(r, 72, "'commitTimestamp' must be greater than or equal to 'prepareTimestamp'");
            return;
        }
        /* The prepared writes become visible only now. */
        apply_images(srv, t, true);
        log_prepared_end(srv, t, true, cts_secs, cts_inc);
        txn_clear(t);
        t->state = TXN_COMMITTED;
        reply_ok_doc(r, &reply);
        return;
    }
    case TXN_ACTIVE:
        break;
    }
    if (have_cts) {
        bson_destroy(&reply);
        txn_error(r, 72, "commitTransaction on an unprepared transaction cannot have a commitTimestamp");
        return;
    }
    if (!check_conflicts(srv, r, t)) {
        bson_destroy(&reply);
        return;
    }
    apply_images(srv, t, true);
    /* onUnpreparedTransactionCommit: nothing is logged for a transaction that wrote nothing. */
    if (t->nops > 0)
        log_txn_chain(srv, t, TXN_CHAIN_COMMIT, NULL);
    txn_clear(t);
    t->state = TXN_COMMITTED;
    reply_ok_doc(r, &reply);
}

void txn_cmd_abort(sim_server *srv, sim_reply *r, const bson_t *cmd)
{
    bool started;
    if (!need_primary(srv, r))
        return;
    r->wc_ran = true; /* the command's write concern applies, even to its error (commands.c, write concern) */
    sim_txn *t = txn_lookup(srv, r, cmd, false, &started);
    if (!t)
        return;
    bson_t reply = BSON_INITIALIZER;
    switch (t->state) {
    case TXN_COMMITTED:
        bson_destroy(&reply);
        txn_error(r, 256, "Transaction with { txnNumber: %" PRId64 " } has been committed.", t->txn_number);
        return;
    case TXN_ABORTED:
        bson_destroy(&reply);
        txn_error(r, 251, "Transaction with { txnNumber: %" PRId64 " } has been aborted.", t->txn_number);
        return;
    case TXN_PREPARED:
        /* onTransactionAbort with an abort slot: a prepared transaction logs {abortTransaction: 1}. */
        log_prepared_end(srv, t, false, 0, 0);
        txn_abort_local(srv, t);
        break;
    case TXN_ACTIVE:
        /* An unprepared abort writes nothing. */
        txn_abort_local(srv, t);
        break;
    }
    reply_ok_doc(r, &reply);
}

void txn_cmd_prepare(sim_server *srv, sim_reply *r, const bson_t *cmd)
{
    bool started;
    if (!need_primary(srv, r))
        return;
    r->wc_ran = true; /* the command's write concern applies, even to its error (commands.c, write concern) */
    sim_txn *t = txn_lookup(srv, r, cmd, false, &started);
    if (!t)
        return;
    if (t->state == TXN_ABORTED || t->state == TXN_COMMITTED) {
        txn_error(r, t->state == TXN_ABORTED ? 251 : 256, "Transaction with { txnNumber: %" PRId64 " } has been %s.",
                  t->txn_number, t->state == TXN_ABORTED ? "aborted" : "committed");
        return;
    }
    bson_t reply = BSON_INITIALIZER;
    if (t->state == TXN_ACTIVE) {
        if (!check_conflicts(srv, r, t)) {
            bson_destroy(&reply);
            return;
        }
        uint64_t last = 0;
        if (log_txn_chain(srv, t, TXN_CHAIN_PREPARE, &last) < 0) {
            bson_destroy(&reply);
            reply_error(r, 1, "cannot log the prepare entry");
            return;
        }
        /* The prepare entry's OpTime is the prepareTimestamp; the commit/abort entry points back at it. */
        t->prepare_ts = last;
        t->prepare_t = srv->term;
        t->state = TXN_PREPARED;
    }
    /* A repeated prepareTransaction answers the same prepareTimestamp. */
    BSON_APPEND_TIMESTAMP(&reply, "prepareTimestamp", OPLOG_TS_SECS(t->prepare_ts), OPLOG_TS_INC(t->prepare_ts));
    reply_ok_doc(r, &reply);
}

/* {setParameter: 1, name: value}: replies {was: old}. On a real server the two maxNumberOf...InSingleOplogEntry
 * parameters are startup-only; mongosim takes them at runtime so tests can force chains. */
void txn_cmd_set_parameter(sim_server *srv, sim_reply *r, const bson_t *cmd)
{
    struct sim_txns *s = state(srv);
    static const char *const names[] = {"maxNumberOfTransactionOperationsInSingleOplogEntry",
                                        "maxNumberOfBatchedOperationsInSingleOplogEntry",
                                        "maxSizeOfBatchedOperationsInSingleOplogEntryBytes",
                                        "batchedDeletesTargetBatchDocs", "batchedDeletesTargetStagedDocBytes"};
    int64_t *vars[] = {&s->max_txn_ops, &s->max_batched_ops, &s->max_batched_bytes, &s->batch_docs, &s->batch_bytes};
    const int64_t minimum[] = {1, 1, 1, 0, 0};
    bson_iter_t it;
    bson_iter_init(&it, cmd);
    bson_iter_next(&it);
    bson_t reply = BSON_INITIALIZER;
    bool any = false;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (k[0] == '$' || strcmp(k, "lsid") == 0 || strcmp(k, "comment") == 0)
            continue;
        size_t i = 0;
        while (i < sizeof names / sizeof names[0] && strcmp(names[i], k) != 0)
            i++;
        if (i == sizeof names / sizeof names[0]) {
            bson_destroy(&reply);
            reply_error(r, 72, "attempted to set unrecognized parameter [%s], use help:true to see options ", k);
            return;
        }
        if (!BSON_ITER_HOLDS_NUMBER(&it) || bson_iter_as_int64(&it) < minimum[i]) {
            bson_destroy(&reply);
            reply_error(r, 2, "Invalid value for parameter %s", k);
            return;
        }
        if (!any)
            BSON_APPEND_INT64(&reply, "was", *vars[i]);
        *vars[i] = bson_iter_as_int64(&it);
        any = true;
    }
    if (!any) {
        bson_destroy(&reply);
        reply_error(r, 72, "no option found to set, use help:true to see options ");
        return;
    }
    reply_ok_doc(r, &reply);
}

/* BatchedDeleteStage: a batch is committed once it holds batchedDeletesTargetBatchDocs documents or its staged
 * documents reach batchedDeletesTargetStagedDocBytes (0: no limit; the time target is not modelled: unlimited);
 * each batch is one onBatchedWriteCommit, split by the batched limits. */
bool txn_log_batched_delete(sim_server *srv, bson_t *const *ops, size_t n, const uint32_t *doc_sizes, bson_error_t *err)
{
    struct sim_txns *s = state(srv);
    log_ctx c = {.srv = srv};
    txn_chain_opts o = {.kind = TXN_CHAIN_BATCHED,
                        .term = srv->term,
                        .count_limit = (size_t)s->max_batched_ops,
                        .size_limit = (size_t)s->max_batched_bytes,
                        .next_ts = log_next_ts,
                        .append = log_append,
                        .ctx = &c};
    size_t i = 0;
    while (i < n) {
        size_t k = 0;
        int64_t bytes = 0;
        while (i + k < n) {
            bytes += doc_sizes ? doc_sizes[i + k] : 0;
            k++;
            if ((s->batch_docs > 0 && (int64_t)k >= s->batch_docs) || (s->batch_bytes > 0 && bytes >= s->batch_bytes))
                break;
        }
        o.wall_ms = sim_now_ms();
        if (txn_log_chain(ops + i, k, &o, NULL) < 0) {
            *err = c.err;
            return false;
        }
        i += k;
    }
    return true;
}

bool txn_log_grouped(sim_server *srv, bson_t *const *ops, size_t n, bson_error_t *err)
{
    struct sim_txns *s = state(srv);
    log_ctx c = {.srv = srv};
    txn_chain_opts o = {.kind = TXN_CHAIN_BATCHED,
                        .term = srv->term,
                        .count_limit = (size_t)s->max_batched_ops,
                        .size_limit = (size_t)s->max_batched_bytes,
                        .next_ts = log_next_ts,
                        .append = log_append,
                        .ctx = &c,
                        .wall_ms = sim_now_ms()};
    if (txn_log_chain(ops, n, &o, NULL) < 0) {
        *err = c.err;
        return false;
    }
    return true;
}

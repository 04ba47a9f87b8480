/*
 * txn.h — mongosim's client transactions (lsid + txnNumber + autocommit:false), prepared transactions, the applyOps
 * chains a 4.2+ server writes for them, and 6.0+ batched multi-deletes. Not for use outside tests/mongosim.
 *
 * The pure part (txn_split, txn_log_chain) builds entries without a server, for tests/unit/test_mongosim_txn.c.
 */
#ifndef MONGOSIM_TXN_H
#define MONGOSIM_TXN_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The 16 MB BSONObjMaxUserSize: getMaxSizeOfTransactionOperationsInSingleOplogEntryBytes() (op_observer_impl.cpp). */
#define TXN_ENTRY_SIZE_LIMIT (16 * 1024 * 1024)

/* Assigns n operations of the given BSON sizes to applyOps entries as TransactionOperations::getApplyOpsInfo() /
 * packOperationsIntoApplyOps() do (src/mongo/db/transaction/transaction_operations.cpp): an entry takes operations
 * until it holds count_limit of them, or until adding the next one (its size) to the running total (each earlier
 * one's size plus 8 bytes of array overhead, kBSONArrayElementOverhead) would pass size_limit; an entry always takes
 * at least one. counts gets each entry's number of operations (it needs room for n); returns the number of entries
 * (0 when n is 0). */
size_t txn_split(const uint32_t *sizes, size_t n, size_t count_limit, size_t size_limit, size_t *counts);

typedef enum {
    TXN_CHAIN_COMMIT,  /* an unprepared transaction: the last entry is the implicit commit */
    TXN_CHAIN_PREPARE, /* prepareTransaction: the last entry carries prepare:true */
    TXN_CHAIN_BATCHED, /* a batched write: no lsid/txnNumber, no prevOpTime when it is a single entry */
} txn_chain_kind;

typedef struct {
    txn_chain_kind kind;
    const uint8_t *lsid; /* 16-byte lsid.id (not for TXN_CHAIN_BATCHED) */
    int64_t txn_number;
    int64_t term;
    int64_t wall_ms;
    size_t count_limit, size_limit;
    uint64_t (*next_ts)(void *ctx);                              /* the ts of the next entry */
    bool (*append)(void *ctx, const bson_t *entry, uint64_t ts); /* logs it; false stops */
    void *ctx;
} txn_chain_opts;

/* Logs ops (inner operation bodies) as the chain of applyOps entries the server writes (logOplogEntries in
 * transaction_operations.cpp; logApplyOps / onBatchedWriteCommit in op_observer_impl.cpp). An empty prepared
 * transaction still logs {applyOps: [], prepare: true}. *last_ts gets the last entry's ts. Returns the number of
 * entries, or -1 when append failed. */
long txn_log_chain(bson_t *const *ops, size_t n, const txn_chain_opts *o, uint64_t *last_ts);

/* Appends lsid {id: UUID, uid: sha256("")} as a server records it for an unauthenticated client. */
void txn_append_lsid(bson_t *b, const uint8_t *id);

/* ---- the server side (txn.c), for commands.c ---- */

#include "sim_internal.h"

/* Called by cmd_dispatch for every command. A command with `autocommit` runs inside its transaction: this checks
 * lsid/txnNumber/startTransaction as TransactionParticipant::beginOrContinue does, replays the transaction's own
 * writes into the store, and for a write records the committed images of the documents it may touch. False after
 * replying an error. Commands without `autocommit` pass untouched. */
bool txn_enter(sim_server *srv, sim_reply *r, const bson_t *cmd, const char *name, const char *db);
/* After the command: records the transaction's images and takes its writes back out of the store. */
void txn_leave(sim_server *srv);
/* True while a command of a transaction runs (between txn_enter and txn_leave). */
bool txn_current(const sim_server *srv);
/* The entry bodies the running statement produced (ownership of each bson_t * passes). */
void txn_take_ops(sim_server *srv, bson_t **ops, size_t n);
/* The running statement failed (a write error): the transaction is aborted, as a server aborts it. */
void txn_statement_failed(sim_server *srv);
void txn_cmd_commit(sim_server *srv, sim_reply *r, const bson_t *cmd);
void txn_cmd_abort(sim_server *srv, sim_reply *r, const bson_t *cmd);
void txn_cmd_prepare(sim_server *srv, sim_reply *r, const bson_t *cmd);
void txn_cmd_set_parameter(sim_server *srv, sim_reply *r, const bson_t *cmd);
/* Batched multi-delete: the d bodies of one deleteMany and each deleted document's size, in order. */
bool txn_log_batched_delete(sim_server *srv, bson_t *const *ops, size_t n, const uint32_t *doc_sizes,
                            bson_error_t *err);
/* Writes a server makes in one WriteUnitOfWork grouped for replication (kGroupForTransaction): one applyOps chain
 * without lsid, as batched writes are logged. */
bool txn_log_grouped(sim_server *srv, bson_t *const *ops, size_t n, bson_error_t *err);
void txn_state_free(sim_server *srv);

/* The session of a command: lsid.id (16 bytes into lsid) and txnNumber; false when either is missing or lsid.id is
 * not 16 bytes of binary. */
bool txn_parse_session(const bson_t *cmd, uint8_t *lsid, int64_t *txn_number);

#endif

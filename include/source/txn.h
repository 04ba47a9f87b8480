/*
 * txn.h — MongoDB transactions written over several oplog entries: what an entry is in a chain, the walk back along
 * prevOpTime from the commit point, and the book of chains seen open.
 *
 * The shapes (mongodb/mongo op_observer_impl.cpp, logOplogEntries / logCommitOrAbortForPreparedTransaction):
 * - 4.2+: a transaction of N entries writes N `c` applyOps entries on admin.$cmd; all but the last carry
 *   o.partialTxn:true; the last is the implicit commit (o.count: the total number of ops, when N > 1) or carries
 *   o.prepare:true; each entry's prevOpTime is the previous entry's OpTime, the first one's the null OpTime (ts 0:0).
 * - a prepared transaction ends with a later {commitTransaction:1, commitTimestamp} or {abortTransaction:1} entry
 *   whose prevOpTime is the prepare entry's OpTime; other entries may sit in between.
 * - 6.0+ batched writes (multi-deletes) use the same chain without lsid/txnNumber;
 * - 8.0 vectored inserts (multiOpType:1) and 4.0's single-entry transactions are not chains (TXN_NONE).
 *
 * How the reader uses this (source/oplog/txn_read.c, docs/architecture.md "Transactions"): a TXN_PART or TXN_PREPARE
 * entry is skipped when read (it only moves the position; it is noted in the txn_book); at a TXN_COMMIT or
 * TXN_COMMIT_PREPARED the reader walks the chain back with point lookups (txn_walk_back: only the OpTimes are kept),
 * then reads the entries forward one at a time and pushes their ops as parts of one logical entry positioned at the
 * commit (op_entry.more); a TXN_ABORT only closes the chain. `replay` (source/dump/dump.c) does the same with lookups
 * that read the entries back from the dump.
 *
 * Everything here is pure (no I/O): the lookups go through a callback, so the walk is testable without a server.
 */
#ifndef OPLOG2PG_SOURCE_TXN_H
#define OPLOG2PG_SOURCE_TXN_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/op.h"

typedef enum txn_role {
    TXN_NONE = 0,        /* not part of a chain: decode and apply as usual */
    TXN_PART,            /* an applyOps with partialTxn: skipped when read, applied at the commit */
    TXN_PREPARE,         /* an applyOps with prepare: skipped when read, applied at commitTransaction */
    TXN_COMMIT,          /* the implicit commit: an applyOps ending a chain (count, or a non-null prevOpTime) */
    TXN_COMMIT_PREPARED, /* {commitTransaction: 1}: applies the chain ending at its prevOpTime (the prepare) */
    TXN_ABORT,           /* {abortTransaction: 1}: nothing to apply */
} txn_role;

typedef struct txn_info {
    txn_role role;
    op_pos pos;    /* the entry's ts and t */
    bool has_prev; /* prevOpTime is there and not the null OpTime */
    op_pos prev;
    bool has_count; /* o.count (the implicit commit of a chain of two or more entries) */
    /* The transaction's identity (txn_key_hash) on a TXN_PREPARE, TXN_COMMIT_PREPARED or TXN_ABORT entry: equal on
     * every participant shard of one transaction, so the merge of several sources (core/merge.h) can match them. */
    bool has_key; /* the entry carries an lsid or a txnNumber */
    uint64_t key;
} txn_info;

const char *txn_role_name(txn_role r);

/* A 64-bit hash (FNV-1a) of a transaction's identity: the lsid's id (its UUID bytes), the lsid's txnNumber and
 * txnUUID when there (internal sessions, 6.0+: two internal transactions of one parent session differ only there;
 * /work/shared/oplog/REPORT.md "compare the whole lsid"; the uid is a function of the user, not of the transaction)
 * and the entry's txnNumber. lsid and txnNumber may be NULL (absent). The router's session and transaction number
 * travel unchanged to every participant (mongo src/mongo/s/transaction_router.cpp attaches them to each command),
 * so every participant's prepare, commitTransaction and abortTransaction entries hash alike. */
uint64_t txn_key_hash(const bson_iter_t *lsid, const bson_iter_t *txn_number);

/* Classifies a raw oplog entry. False when it has no ts Timestamp (the decoder reports that). */
bool txn_classify(const bson_t *entry, txn_info *out);

/* ---- the walk back ---- */

typedef enum txn_lookup {
    TXN_LOOKUP_FOUND = 0, /* *out holds the entry at that ts (the callee initialised it; the caller destroys it) */
    TXN_LOOKUP_MISSING,   /* no entry at that ts: the oplog no longer holds it */
    TXN_LOOKUP_ERROR,     /* the lookup failed (network, ...): err says why */
} txn_lookup;

/* Finds the entry at ts exactly (the reader: find {ts: {$gte: ts}} limit 1 with the tailing cursor's read concern,
 * then checks the ts; replay: the dump's index of open chains, then a read at the entry's offset). */
typedef txn_lookup (*txn_lookup_fn)(void *ctx, const op_pos *ts, bson_t *out, char *err, size_t errlen);

typedef enum txn_walk {
    TXN_WALK_OK = 0, /* list holds the chain's entries before the commit point, oldest first */
    TXN_WALK_SINGLE, /* an applyOps with a prevOpTime but no count whose previous entry is not a partialTxn: it is
                      * not the end of a chain (apply it alone) */
    TXN_WALK_LOST,   /* an entry of the chain is no longer in the oplog (*missing says which) */
    TXN_WALK_BAD,    /* the chain is not what the server writes (err says how) */
    TXN_WALK_ERROR,  /* a lookup failed */
    TXN_WALK_NOMEM,
} txn_walk;

typedef struct txn_list {
    op_pos *v;
    size_t n, cap;
} txn_list;

void txn_list_init(txn_list *l);
void txn_list_free(txn_list *l);

/* Walks back from a TXN_COMMIT or TXN_COMMIT_PREPARED entry along prevOpTime, one lookup per entry, and fills list
 * with the OpTimes of the chain's entries (without the commit entry itself), oldest first. The entries found are
 * not kept. Each must be an applyOps with partialTxn, except the first one found from a commitTransaction, which
 * must carry prepare; positions must decrease. *missing receives the position that was not found (TXN_WALK_LOST). */
txn_walk txn_walk_back(const txn_info *commit, txn_lookup_fn lookup, void *ctx, txn_list *list, op_pos *missing,
                       char *err, size_t errlen);

/* ---- the book of open chains (status and metrics; the hold kept with the checkpoint) ---- */

typedef struct txn_chain {
    op_pos first; /* the chain's first entry (when first_known; else the oldest entry seen so far) */
    bool first_known;
    op_pos last; /* its newest entry: the next entry's prevOpTime */
    uint64_t entries, bytes;
    bool prepared; /* its last entry is a prepare (TXN_PREPARE): waiting for commitTransaction or abortTransaction */
    uint64_t key;  /* then the transaction's identity (txn_info.key) */
} txn_chain;

typedef struct txn_book {
    txn_chain *v;
    size_t n, cap;
} txn_book;

void txn_book_init(txn_book *b);
void txn_book_free(txn_book *b);
/* A TXN_PART or TXN_PREPARE entry of `bytes` bytes was read: extends the chain whose last entry is its prevOpTime,
 * or opens one (first_known when the entry has no prevOpTime: it is the chain's first). Returns the chain, NULL on
 * OOM. */
txn_chain *txn_book_note(txn_book *b, const txn_info *i, size_t bytes);
/* A commit or abort whose prevOpTime is `prev` closes the chain ending there (nothing when none does). */
void txn_book_close(txn_book *b, const op_pos *prev);
/* The oldest first entry of the open chains; false when none is open. */
bool txn_book_oldest(const txn_book *b, op_pos *first);
/* Totals over the open chains. */
uint64_t txn_book_bytes(const txn_book *b);

#endif

/*
 * decode.h — turns one raw oplog entry (a bson_t from local.oplog.rs) into an op_entry (core/op.h).
 *
 * The rules follow the entries MongoDB writes (their fields are declared in mongodb/mongo
 * src/mongo/db/repl/oplog_entry.idl) and never depend on field order. They are tested against the real and
 * transcribed entries of 3.0-era to 8.x servers under tests/vectors/ (tests/vectors/SOURCES.md says where each came
 * from).
 *
 * What becomes what:
 * - `i`/`u`/`d` → OP_INSERT/OP_UPDATE/OP_DELETE (the update's form classified and, for $v:2, validated).
 * - `n` → OP_NOOP (it only advances the checkpoint; never data, even with lsid and an image in `o`).
 * - `c` create/drop/renameCollection/dropDatabase → the DDL kinds. emptycapped → OP_TRUNCATE (it removes every
 *   document). convertToCapped → OP_NOOP (the documents stay; PostgreSQL has no capped tables). A create with
 *   `viewOn` → OP_NOOP (a view holds no data; its definition lives in the skipped system.views).
 * - index builds (startIndexBuild, commitIndexBuild, abortIndexBuild), createIndexes, dropIndexes (and its old
 *   aliases deleteIndex, deleteIndexes, dropIndex), collMod, and internal commands that change no document (dbCheck,
 *   setMultikeyMetadata, dropIdent, the sharding catalog's modifyCollectionShardingIndexCatalog,
 *   createDatabaseMetadata and dropDatabaseMetadata, upgradeDowngradeViewlessTimeseries) → OP_NOOP; so is
 *   importCollection, whose documents arrive as data files and are not in the oplog at all.
 * - applyOps → one op per inner op, in order (ops[i] is applyOps[i]; skipped inner ops stay as OP_NOOP so indexes
 *   are stable). Inner ts/h/v/wall (3.6 user applyOps) are ignored: every op carries the outer position.
 *
 * Atomicity (op_entry.atomic):
 * - a transaction's applyOps (lsid + txnNumber, no multiOpType): atomic — it is the whole transaction;
 * - an applyOps without lsid (a user applyOps command, or 6.0+ batched multi-deletes): atomic too — the server
 *   applied both in one storage transaction (all-or-nothing), so one PostgreSQL transaction reproduces it exactly
 *   and keeps the checkpoint at entry granularity;
 * - an applyOps with multiOpType (8.0 vectored insert): NOT atomic — independent inserts that the batcher may split
 *   across PostgreSQL transactions (resume position is (entry ts, op index));
 * - any plain entry: n == 1, atomic false.
 *
 * Skipped (decoded as OP_NOOP so the checkpoint advances): `fromMigrate: true`; data and DDL in the admin, local and
 * config databases (applyOps and renameCollection on admin.$cmd are still decoded, their inner/target namespaces
 * decide); collections named system.* (system.views, system.indexes, system.buckets.*, ...; with DECODE_KEEP_SYSTEM the
 * time-series system.buckets.* collections are decoded); a rename whose source and target are both skipped.
 *
 * DECODE_UNSUPPORTED (oplog2pg cannot apply it yet; the reader, or replay, stops before the entry): unless
 * DECODE_TXN_PART is given (the reader reassembles chains first, source/txn.h), an applyOps with partialTxn or
 * prepare, or with `count` in a transaction (lsid and txnNumber, no multiOpType: the last entry of a
 * transaction written over several entries), commitTransaction, abortTransaction, a nested applyOps, an unknown op
 * code (ci, cu, cd, km, ...), an unknown command outside the skipped databases, $v other than 1/2, modifier
 * operators other than $set/$unset, a rename between a skipped and a replicated namespace, an entry whose `v` is
 * not 2.
 *
 * DECODE_MALFORMED: a missing or ill-typed required field (ts Timestamp; op/ns strings; o document; t int32/int64;
 * v number), `i`/`d` without o._id, `u` without o2 or o2._id, an update `o` that is empty or mixes operators and
 * fields, a DDL command without its collection, a $v:2 diff whose structure the server would reject
 * (source/v2diff.h; the message names the server's error code when it has one, e.g. "[4728000]").
 *
 * Error messages name the entry as `ts SECS:INC op 'X' ns 'NS'` (plus applyOps[i] and _id where known).
 */
#ifndef OPLOG2PG_SOURCE_DECODE_H
#define OPLOG2PG_SOURCE_DECODE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/op.h"

typedef enum decode_status {
    DECODE_OK = 0,
    DECODE_MALFORMED,   /* the entry breaks the oplog format */
    DECODE_UNSUPPORTED, /* a valid entry that oplog2pg cannot apply (yet) */
    DECODE_NOMEM,
} decode_status;

/* Flags for decode_entry_ex. */
enum {
    /* Decode ops on time-series bucket collections (DB.system.buckets.*) instead of skipping them. Other system.*
     * collections and the admin/local/config databases are skipped regardless. */
    DECODE_KEEP_SYSTEM = 1u << 0,
    /* Do not copy an insert's or update's `o` into the op: op.doc points into the caller's entry, which must stay
     * alive until the op's text is rendered (map/ejson.h) and op_entry_drop_payload is called; an insert's op.id
     * points into it too. Halves the memory of a large document; the raw payload is then gone, so it is for sessions
     * that will not need it for a dead letter. */
    DECODE_BORROW_PAYLOAD = 1u << 1,
    /* The caller reassembles a transaction written over several entries (source/txn.h): decode the inner ops of an
     * applyOps with partialTxn, prepare or count like any applyOps, instead of refusing it. */
    DECODE_TXN_PART = 1u << 2,
};

/* Decodes entry into out (which need not be initialised; on failure it is left empty, as op_entry_init). On a
 * failure err receives a one-line message (err may be NULL). Nothing in out points into entry, unless
 * decode_entry_ex was given DECODE_BORROW_PAYLOAD. */
decode_status decode_entry(const bson_t *entry, op_entry *out, char *err, size_t errlen);
decode_status decode_entry_ex(const bson_t *entry, unsigned flags, op_entry *out, char *err, size_t errlen);

/* Logs one notice for each op of e a user should hear of (op.notice: the create of a view or of a time-series
 * collection, which get no table), after the namespace filter has had its say. */
void decode_log_notices(const op_entry *e);

const char *decode_status_name(decode_status s);

/* OP_NOOP's reason for the noop a chunk migration's donor writes before the recipient, a shard without chunks of the
 * collection, gets its first one (o2.migrateChunkToNewShard): op.db is then the recipient's shard id (toShardId). A
 * sharded cluster's reader must read that shard from before this entry on. */
extern const char DECODE_NEW_SHARD_REASON[];

#endif

/*
 * pg.h — the PostgreSQL side: one libpq connection that applies flush groups and commits the checkpoint with them.
 *
 * A flush group is one PostgreSQL transaction. It opens with the first write after a commit and ends with
 * sink_commit(), whose last statement moves the service's checkpoint row to the position of the last oplog entry the
 * group covers. Nothing is committed without its checkpoint and no checkpoint without its rows, so a crash at any
 * instant leaves PostgreSQL at a commit boundary that names exactly where to resume. The checkpoint only moves
 * forward (oplog2pg.advance_checkpoint refuses anything else); sink_set_checkpoint is the one explicit move.
 *
 * No network wait per op: statements (updates, deletes, short insert runs, DDL) go out in libpq pipeline mode and
 * their results are read as they arrive. The sink waits for PostgreSQL at the commit that ends the group, and for an
 * insert run long or large enough for COPY (copy_min_rows rows, or 1 MB; a long run opens its COPY while it still
 * fills, sink_stream_add), which leaves the pipeline behind a savepoint (waiting for the results still due) to send
 * a binary COPY, since pipeline mode forbids COPY. A COPY that meets an existing _id (a replay) is rolled back to the
 * savepoint and its run re-sent as pipelined upserts; a run that has let go of rows it sent (sink_stream_let_go)
 * cannot be re-sent, so the group fails with APPLY_REWIND instead, and is applied again from the checkpoint with
 * its runs keeping their rows up to that entry (sink_keep_until). Sending also waits while libpq holds more than
 * SINK_PIPE_BYTES unsent or more than 20000 results are due, and, in per-op mode, for each statement's result.
 *
 * Errors follow the one policy (sink/pgerror.h): every failure is an apply_status (core/status.h), and only
 * APPLY_DATA — PostgreSQL refusing an op's own data — leads to a dead letter. Waits go through sink/pgconn.h, so the
 * owner's wait hook runs at least every wait_slice_ms (1 s unless set) while PostgreSQL keeps the sink waiting.
 *
 * Fencing: at its first connect the sink takes a session advisory lock on the service name, on a connection of its
 * own that it keeps until sink_free (taking it again at a connect after that connection was lost), and at every
 * connect it writes a fresh owner token into the checkpoint row; every commit's checkpoint update requires that
 * token. So sink_connect refuses a second sink for the same service (APPLY_FENCED), a sink whose token has since been
 * replaced cannot commit (the checkpoint function raises O2FEN, APPLY_FENCED too), and the lock stays taken between
 * two connections of the writing one. What the daemon makes of that (exit 6) is its own choice.
 *
 * Tables: namespace db.coll lives in the schema and table map/names.h gives it (normally "db"."coll"), with
 * columns _id (text COLLATE "C", the key text) and doc (jsonb). The first write to it on a connection makes the
 * table, or checks that this service made it, through the catalog (oplog2pg.ensure_table, oplog2pg.tables) inside
 * the open group.
 */
#ifndef OPLOG2PG_SINK_PG_H
#define OPLOG2PG_SINK_PG_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/batcher.h"
#include "core/op.h"
#include "core/status.h"
#include "map/map.h"
#include "sink/batch.h"
#include "sink/pgconn.h"

/* The jsonb shape's statements (src/sink/stmt.c): how many are held prepared on a connection at once, unless
 * sink_config says otherwise; the use of a statement at which it is prepared (the first goes unnamed); the commits
 * after which one that none of them used may make room for another. */
#define SINK_MAX_PREPARED       1000
#define SINK_STMT_PREPARE_AT    2
#define SINK_STMT_STALE_COMMITS 100

/* The most bytes of statements libpq may hold unsent before the sink waits for the socket. */
#define SINK_PIPE_BYTES (2u * 1024 * 1024)

typedef struct sink sink;

/* One document of a collection read for a backfill; false stops the reading (the sink has noted why). */
typedef bool (*sink_doc_fn)(void *arg, const bson_t *doc);
/* Reads every document of db.coll from MongoDB, in any order, and calls each(arg, doc) for each one until it answers
 * false. The columns a map gained are filled from them, as a copy of the collection would fill them
 * (src/sink/backfill.c); the sink never reads MongoDB itself, the daemon lends it this. APPLY_OK when every document
 * was read, a collection that is not there having none, or when each stopped it; APPLY_RETRY when MongoDB could not
 * be read, APPLY_CONFIG when it refused, with the reason in why. */
typedef apply_status (*sink_read_docs_fn)(void *ctx, const char *db, const char *coll, sink_doc_fn each, void *arg,
                                          char *why, size_t whylen);

typedef struct {
    const char *conninfo;   /* libpq conninfo or URI */
    const char *service;    /* checkpoint row key */
    bool per_op;            /* wait for each statement's result before the next (per-op and careful mode; when to
                             * commit stays the caller's choice); no COPY */
    uint32_t copy_min_rows; /* insert runs this long (or of 1 MB) go by COPY, shorter ones by pipelined upserts;
                             * 0 means 32, raised on a slow network to 3 x the round trip / 10 us (measured at
                             * connect); a value set here is kept as it is */
    int peer_timeout_s;     /* see pgconn_params */
    const map_set *maps;    /* typed maps (map/map.h); NULL = every collection has the jsonb shape */
    pgconn_wait_fn wait_hook;
    void *wait_arg;
    int wait_slice_ms;
    uint32_t max_prepared;       /* statements of the jsonb shape held prepared at once (src/sink/stmt.c); 0 means
                                  * SINK_MAX_PREPARED */
    sink_read_docs_fn read_docs; /* the documents for the columns a map gained; NULL where MongoDB cannot be read
                                  * (replay): those columns then stay NULL in the rows already there */
    void *read_docs_ctx;
} sink_config;

typedef struct {
    uint64_t commits;
    uint64_t rows_copied;   /* inserted by COPY */
    uint64_t rows_inserted; /* inserted by pipelined upserts (a COPY run re-sent after a duplicate too) */
    uint64_t updates;       /* updates, replacements included */
    uint64_t deletes;
    uint64_t ddl;
    uint64_t dup_fallbacks; /* COPY runs re-sent as upserts after a duplicate _id */
    uint64_t rewinds;       /* duplicates met by a COPY that had let go of rows, or by a plain insert (APPLY_REWIND) */
    uint64_t bytes;         /* bytes of text sent for inserts (keys and documents) and updates (the update) */
    uint64_t dead_letters;  /* ops set aside in oplog2pg.dead_letter */
    uint64_t unnamed;       /* statements sent unnamed because max_prepared were held and none had gone stale */
    uint64_t ts_bucket_ops; /* time-series bucket changes applied (sink/tseries.c) */
    uint64_t ts_rows;       /* measurement rows they wrote (inserted or changed) */
    uint64_t ts_bucket_reads; /* bucket documents read back from oplog2pg.timeseries_bucket */
} sink_stats;

typedef apply_status sink_status;

sink *sink_new(const sink_config *cfg);
void sink_free(sink *s);

/* Connect, install the oplog2pg schema and functions, take the fence, make sure the checkpoint row exists and read
 * it. APPLY_RETRY when PostgreSQL cannot be reached, APPLY_CONFIG when it refuses the login or is older than 13
 * (sink_error says what to fix), APPLY_FENCED when another daemon holds the service. */
sink_status sink_connect(sink *s);
bool sink_connected(const sink *s);
/* Drop the connection (after an error; the open group is lost, the checkpoint says where to resume). */
void sink_disconnect(sink *s);

/* The checkpoint as read at connect (and moved by the commits since): 1 with *out set, 0 when the service has none
 * yet, -1 when not connected. */
int sink_read_checkpoint(sink *s, op_pos *out);

/* Writes within the open group; `pos` names the oplog entry for error messages. `key` is the key text of the _id
 * (map/ejson.h), `json` the relaxed Extended JSON of the document or the update's `o`. */
sink_status sink_insert_batch(sink *s, const char *db, const char *coll, sink_batch *b, const op_pos *pos);
/* A row was just added to the run b of db.coll (entry pos): a long run streams it into a COPY left open while the
 * run fills (see "streaming" in src/sink/pg.c); sink_insert_batch of b ends that COPY, as does anything else sent. */
sink_status sink_stream_add(sink *s, sink_batch *b, const char *db, const char *coll, const op_pos *pos);
/* The run b is about to be freed or emptied without being written: a COPY it still streams is abandoned (the group
 * fails and is not committed). */
void sink_stream_forget(sink *s, const sink_batch *b);
/* The run b streams, every row it holds is in its COPY, and its next row is entry pos: lets go of the rows it holds
 * (sink_batch_let_go) so that its memory stays bounded however long it streams, and answers true. False, and b
 * untouched, when b does not stream, or pos is at or before the keep point.
 *
 * A run that let go of rows cannot re-send them as upserts: when its COPY meets a _id already there, the sink sets
 * the keep point to the run's last entry and fails with APPLY_REWIND. The group is lost; the caller goes back to the
 * committed checkpoint and applies the same entries again, and until the keep point every run keeps its rows, so the
 * duplicate falls back to upserts as usual. */
bool sink_stream_let_go(sink *s, sink_batch *b, const op_pos *pos);
/* The keep point (0:0 until a rewind or sink_keep_rows_until set one). */
op_pos sink_keep_until(const sink *s);
/* Moves the keep point forward to pos (never back): runs keep their rows for entries up to pos, and short runs up to
 * there are upserts rather than plain inserts (a plain insert that meets its _id rewinds the same way). The daemon
 * sets it to the oplog's end when an initial copy completes, since tailing meets the rows the copy wrote until it
 * passes there, and a rewind for each would apply a group twice. */
void sink_keep_rows_until(sink *s, const op_pos *pos);
/* The oplog's end as the initial copy finished: the keep point moves there too, and up to it a time-series bucket's
 * changes are applied as a replay of what the copy may hold already (sink/tseries.c); a rewind never moves it. */
void sink_set_copy_end(sink *s, const op_pos *pos);
sink_status sink_update(sink *s, const char *db, const char *coll, const char *key, op_update_form form,
                        const char *json, const op_pos *pos);
sink_status sink_delete(sink *s, const char *db, const char *coll, const char *key, const op_pos *pos);
/* An insert, update or delete of a collection with a typed map, as prepared on the reader thread (op->mapped, a
 * map_plan): the rows upserted, or the plan's edits sent as statements. */
sink_status sink_apply_mapped(sink *s, const op *o);
/* A time-series collection's bucket op (o->bucket): its create makes the table of measurements (with the collection's
 * time and meta fields), an insert, update or delete of a bucket writes the rows of the measurements it changes
 * (sink/tseries.c; docs/timeseries.md). */
sink_status sink_apply_bucket(sink *s, const op *o);
sink_status sink_create(sink *s, const char *db, const char *coll, const op_pos *pos);
sink_status sink_drop(sink *s, const char *db, const char *coll, const op_pos *pos);
/* A rename drops a target this service owns first (as a rename with dropTarget, or one left from an earlier run). */
sink_status sink_rename(sink *s, const char *db, const char *coll, const char *to_db, const char *to_coll,
                        const op_pos *pos);
sink_status sink_drop_database(sink *s, const char *db, const op_pos *pos);
sink_status sink_truncate(sink *s, const char *db, const char *coll, const op_pos *pos);

/* End the group: checkpoint := pos (fenced, never backwards), COMMIT, wait for the result. Also valid with no writes
 * (moves the checkpoint past noops). */
sink_status sink_commit(sink *s, const op_pos *pos);
/* Put the checkpoint at pos (NULL: none), forward or back, in a transaction of its own, outside any group (inside
 * one it is refused, APPLY_CONFIG): --tail-from, --skip-import, the end of the initial copy, --reimport. */
sink_status sink_set_checkpoint(sink *s, const op_pos *pos);
/* The hold the next sink_commit writes with the checkpoint (txn_oldest_sec/inc: the first entry of the oldest
 * transaction open at that position; NULL: none). */
void sink_set_hold(sink *s, const op_pos *hold);
/* The committed checkpoint's hold (read at connect, then each commit's); false when none. */
bool sink_read_hold(const sink *s, op_pos *hold);
/* The change stream's resume token the next sink_commit writes with the checkpoint (oplog2pg.checkpoint.resume_token,
 * and source 'change_stream'), copied; NULL: none (the oplog: source 'oplog'). Out of memory fails that commit. */
void sink_set_token(sink *s, const uint8_t *tok, size_t len);
/* The committed resume token (read at connect, then each commit's; sink_set_checkpoint clears it): false (*tok NULL,
 * *len 0) when none. The bytes are the sink's, valid until its next commit. */
bool sink_read_token(const sink *s, const uint8_t **tok, size_t *len);

/* A sharded cluster: one reader per shard, merged into one stream (core/merge.h), and one checkpoint row per shard
 * (oplog2pg.shard_checkpoint) committed in the same transaction as the rows it covers.
 *
 * sink_set_shards names the sources: names[i] is the shard id (config.shards _id) of source index i (op_entry.source);
 * the sink copies them. With n = 0 (the default) the sink is a replica set's: every commit is as described above.
 * With n > 0, each sink_commit(pos) sends, pipelined before its COMMIT (no round trip of its own), one
 * oplog2pg.advance_shard_checkpoint per source that moved since the last commit (as the last sink_set_source_positions
 * said: its position, term and hold; never backwards, O2BAK), then oplog2pg.advance_cluster_checkpoint, which moves
 * the service's own row forward to pos, the merged cluster time, with term -1 and no hold (an older pos leaves it
 * where it is, without an error). Those positions are consumed by the commit: the next one writes only what moved
 * after them. A moved source with no name fails the commit (APPLY_CONFIG) before anything is committed.
 *
 * The committed rows are read at connect and moved by each commit (like sink_read_checkpoint):
 * sink_read_shard_checkpoints calls each() for every shard that has one, ordered by shard id, and returns how many, or
 * -1 when not connected. sink_set_shard_checkpoint puts one shard's row at pos (NULL: deletes it; either way its
 * hold is cleared), forward or back, in a transaction of its own outside any group (refused inside one,
 * APPLY_CONFIG): a shard's start point when it is added, the start of a copy, a retired shard; hosts, when not NULL,
 * are stored in the row in the same transaction (where a shard removed later is read). sink_set_checkpoint
 * with NULL (--reimport) deletes every shard row of the service as well. */
sink_status sink_set_shards(sink *s, const char *const *names, size_t n);
/* The batcher's set_sources (sink/batcher_pg.h): the sources' positions as the next commit is to write them. */
void sink_set_source_positions(sink *s, const batcher_source_pos *p, size_t n);
int sink_read_shard_checkpoints(sink *s,
                                void (*each)(void *arg, const char *shard, const op_pos *pos, bool has_hold,
                                             const op_pos *hold),
                                void *arg);
sink_status sink_set_shard_checkpoint(sink *s, const char *shard, const op_pos *pos, const char *hosts);
/* The shards' hosts, as config.shards lists them ("rs/h1:p,h2:p"), hosts[i] for source i (NULL: none), after
 * sink_set_shards: the next commit that moves a source's row writes them into its row (oplog2pg.shard_checkpoint
 * hosts) when the row holds others, pipelined like its position. So a shard removed from the cluster while oplog2pg
 * is stopped can still be read to its end. */
sink_status sink_set_shard_hosts(sink *s, const char *const *hosts, size_t n);
/* The hosts stored in shard's committed row (read at connect, then each commit's), NULL when none. */
const char *sink_shard_hosts(const sink *s, const char *shard);

/* Guarded ops, for finding an op PostgreSQL refuses and setting it aside ([replication] on_error = dead-letter):
 * sink_guard_begin opens a savepoint (the group's transaction first, if needed) and waits for it; after the op,
 * sink_guard_end releases it. When the op failed with APPLY_DATA, sink_dead_letter instead rolls back to the
 * savepoint and records the op in oplog2pg.dead_letter with the error (why, or the sink's own message when NULL),
 * in the same open group, so the commit that follows moves the checkpoint past it. Should the record itself be
 * refused, or no guard be open, it returns APPLY_UNRECORDABLE with a message saying why and leaves the rest to the
 * caller (the apply loop exits 5); memory or the connection failing on the way give APPLY_NOMEM or APPLY_RETRY, and
 * a failure other than APPLY_DATA that the sink already holds is returned as it is. Use per-op mode meanwhile, so
 * that an error is attributed to its own op. */
void sink_set_per_op(sink *s, bool on);
sink_status sink_guard_begin(sink *s);
sink_status sink_guard_end(sink *s);
sink_status sink_dead_letter(sink *s, const op *o, const char *why);
/* For on_error = stop instead: logs which op was refused (namespace, _id, position) and returns the failure
 * (APPLY_DATA, or the earlier failure the sink holds); records nothing. */
sink_status sink_refused(sink *s, const op *o, const char *why);
/* Records o in oplog2pg.dead_letter on c, outside any pipeline, in whatever transaction c has open (the initial
 * copy's batches). False with err set when the record itself fails. */
bool sink_record_dead_letter(pgconn *c, const char *service, const op *o, const char *why, const char *sqlstate,
                             pgconn_error *err);
/* Records that o cannot be written for the reason why (its text could not be made) as the sink's error, naming the
 * op; returns APPLY_DATA (or, when the sink already holds a failure, that one, whose message it keeps). */
sink_status sink_refuse(sink *s, const op *o, const char *why);

/* Installs (or brings up to date) the oplog2pg schema and the update functions on c, one installer at a time per
 * database (a transaction-scoped advisory lock). Every sink connect (each start and reconnect) and every copy run
 * does it; all of it is idempotent. */
bool sink_install_schema(pgconn *c, pgconn_error *err);

/* How many tables a flush group may write to when [replication] batch_tables is auto: a fifth of PostgreSQL's
 * shared lock table, at two locks a table (the table and its primary key), as the server reported its size at the
 * last connect: max_locks_per_transaction x (max_connections, autovacuum_max_workers, 1, max_worker_processes,
 * max_wal_senders, max_prepared_transactions), the slots PostgreSQL sizes it for. A fifth leaves the other sessions
 * four fifths of their share however many there are. SINK_AUTO_BATCH_TABLES before the first connect. */
#define SINK_AUTO_BATCH_TABLES 500
uint64_t sink_auto_batch_tables(const sink *s);
/* The lock table's slots as read at the last connect (0 before). */
uint64_t sink_lock_slots(const sink *s);

/* While idle between groups: the connection's socket (for the owner's event loop; -1 when not connected), and a
 * check of what arrived on it (a server that terminated the session says so before it closes the socket).
 * APPLY_OK while the connection is healthy. */
int sink_socket(const sink *s);
/* The PostgreSQL backend's process id (0 when not connected), for logs and tests. */
int sink_backend_pid(const sink *s);
sink_status sink_check_idle(sink *s);
/* Asks PostgreSQL to cancel the statement the sink waits on (from the wait hook: a stop that must not wait for a
 * lock forever). The call in progress then fails as passing (APPLY_RETRY); nothing uncommitted is kept. */
bool sink_cancel(sink *s, char *err, size_t errlen);

/* Says what the owner of the sink is doing ("applying", "retrying after SQLSTATE 40001", at most SINK_ACTIVITY_MAX
 * bytes) in the application_name of the connection holding the service lock, where `status` reads it (sink_probe)
 * along with when it last changed. Nothing when the lock is not held; a round trip when the text changes. A
 * connection found lost here is made again, with the lock, at the next sink_connect. */
#define SINK_ACTIVITY_MAX 45
void sink_set_activity(sink *s, const char *what);

/* One shard's checkpoint, as sink_probe reads it. */
typedef struct {
    char *shard;         /* the shard's id (config.shards _id) */
    op_pos pos;          /* its last entry committed */
    char applied_at[64]; /* when, as PostgreSQL prints it */
    bool has_hold;       /* a transaction was open on the shard there: its first entry (txn_oldest_sec/inc) */
    op_pos hold;
    char *hosts; /* its replica set as its row stores it ("rs/h1:p,..."), NULL when none */
} sink_probe_shard;

/* What a read-only look at PostgreSQL finds for a service (`check`, `status`): it takes no lock and writes
 * nothing, so it is safe while the daemon runs. */
typedef struct {
    char server_version[32];
    bool have_table;      /* oplog2pg.checkpoint exists */
    bool have_checkpoint; /* the service has committed a position */
    op_pos pos;
    char applied_at[64];                  /* when that commit happened, as PostgreSQL prints it */
    bool running;                         /* a daemon holds the service's lock right now */
    char activity[SINK_ACTIVITY_MAX + 1]; /* what it says it does (sink_set_activity); "" when it says nothing */
    int64_t activity_since;               /* since when (Unix seconds; 0 when unknown) */
    int64_t dead_letters;                 /* rows in oplog2pg.dead_letter for the service */
    int64_t ts_tables, ts_buckets;        /* the service's time-series tables, and the bucket documents kept for them */
    bool has_hold; /* a transaction was open at the checkpoint: its first entry (txn_oldest_sec/inc) */
    op_pos hold;
    char source[16]; /* what the last commit read ("oplog", "change_stream"); "" when the row does not say */
    uint8_t *token;  /* the committed resume token of a change stream (raw BSON, owned), NULL when none */
    size_t token_len;
    /* A sharded cluster's rows of oplog2pg.shard_checkpoint, ordered by shard id (none for a replica set, or a schema
     * older than that table): pos above is then the merged cluster time (term -1). */
    sink_probe_shard *shards;
    size_t nshards;
} sink_probe_result;

/* False with err set (err->status APPLY_CONFIG for a refused login, APPLY_RETRY when unreachable). What it found is
 * given back with sink_probe_free (after a failure too). */
bool sink_probe(const char *conninfo, const char *service, sink_probe_result *out, pgconn_error *err);
void sink_probe_free(sink_probe_result *r);

/* The error of the failure the sink holds, with context ("update on shop.orders (oplog entry 1700000000:3) failed:
 * [22P02] ..."), and its SQLSTATE ("" when PostgreSQL gave none). It is the first error since the sink last
 * connected (or set an op aside): what follows a failure in the same pipeline is its consequence, not kept. */
const char *sink_error(const sink *s);
const char *sink_error_state(const sink *s);
/* The oplog position of the op whose statement failed (of the last entry of a run written by COPY): false when the
 * failure is not a statement's for an op (a lost connection, a connect, oplog2pg's own plumbing outside a group). */
bool sink_error_pos(const sink *s, op_pos *out);
const sink_stats *sink_get_stats(const sink *s);

#endif

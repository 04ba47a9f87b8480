/*
 * pg.h — the PostgreSQL side: one libpq connection that applies flush groups and commits the checkpoint with them.
 *
 * A flush group is one PostgreSQL transaction. It opens with the first write after a commit and ends with
 * sink_commit(), whose last statement moves the service's checkpoint row to the position of the last oplog entry the
 * group covers. Nothing is committed without its checkpoint and no checkpoint without its rows, so a crash at any
 * instant leaves PostgreSQL at a commit boundary that names exactly where to resume.
 *
 * No network wait per op: statements (updates, deletes, short insert runs, DDL) go out in libpq pipeline mode and
 * their results are read as they arrive; the only wait is the commit at the end of the group, plus one per long
 * insert run, which leaves the pipeline to stream a binary COPY (pipeline mode forbids COPY). A COPY that meets a
 * duplicate _id (a replay) is rolled back to a savepoint and re-sent as per-row upserts.
 *
 * Fencing: at connect the sink takes a session advisory lock on the service name and writes a fresh owner token
 * into the checkpoint row; every commit's checkpoint update requires that token, so a second daemon with the same
 * service name can neither start nor, if it somehow did, commit.
 *
 * Tables: namespace db.coll lives in "db"."coll" (_id jsonb primary key generated from doc->'_id', doc jsonb), made
 * on first sight inside the group that first writes to it. Documents are relaxed Extended JSON.
 */
#ifndef OPLOG2PG_SINK_PG_H
#define OPLOG2PG_SINK_PG_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/op.h"

typedef struct sink sink;

/* A run of inserts into one namespace, already encoded as binary COPY tuples (one jsonb column). */
typedef struct sink_batch sink_batch;

typedef struct {
    const char *conninfo;   /* libpq conninfo or URI */
    const char *service;    /* checkpoint row key */
    bool per_op;            /* baseline mode: one statement and one commit per op, synchronous */
    uint32_t copy_min_rows; /* insert runs at least this long go by COPY; shorter ones by pipelined INSERT */
} sink_config;

typedef struct {
    uint64_t commits;
    uint64_t rows_copied;   /* inserted by COPY */
    uint64_t rows_inserted; /* inserted by pipelined INSERT */
    uint64_t updates;
    uint64_t deletes;
    uint64_t ddl;
    uint64_t dup_fallbacks; /* COPY runs re-sent as upserts after a duplicate _id */
    uint64_t bytes;         /* document bytes sent */
    uint64_t dead_letters;  /* ops set aside in oplog2pg.dead_letter */
} sink_stats;

/* Outcome classes, so the daemon knows whether to retry (connection) or stop (data, fence). */
typedef enum {
    SINK_OK = 0,
    SINK_ERR_CONNECTION, /* the connection broke: reconnect and resume from the committed checkpoint */
    SINK_ERR_DATA,       /* PostgreSQL refused an op (bad input, bad name): stop with the message */
    SINK_ERR_FENCED,     /* another daemon owns this service */
} sink_status;

sink *sink_new(const sink_config *cfg);
void sink_free(sink *s);

/* Connect, install the oplog2pg schema and functions, take the fence, make sure the checkpoint row exists. */
sink_status sink_connect(sink *s);
bool sink_connected(const sink *s);
/* Drop the connection (after an error; the open group is lost, the checkpoint says where to resume). */
void sink_disconnect(sink *s);

/* The committed checkpoint: 1 with *out set, 0 when the service has none yet, -1 on error. */
int sink_read_checkpoint(sink *s, op_pos *out);

/* Insert runs. The batcher owns batches; rows are encoded as they are added. */
sink_batch *sink_batch_new(void);
void sink_batch_free(sink_batch *b);
void sink_batch_reset(sink_batch *b);
bool sink_batch_add(sink_batch *b, const bson_t *doc);                 /* false if the document cannot be converted */
bool sink_batch_add_json(sink_batch *b, const char *json, size_t len); /* already relaxed Extended JSON */
size_t sink_batch_rows(const sink_batch *b);
size_t sink_batch_bytes(const sink_batch *b);

/* Streams the batch as a whole binary COPY body on a connection in the COPY IN state: header, the tuples in
 * pieces small enough that libpq never buffers the whole batch, trailer, end of data. The caller then reads the
 * COPY's result. False when sending failed (PQerrorMessage says why). Used by the sink and the initial copy. */
struct pg_conn;
bool sink_batch_put_copy(struct pg_conn *conn, const sink_batch *b);

/* Writes within the open group; `pos` names the oplog entry for error messages. */
sink_status sink_insert_batch(sink *s, const char *db, const char *coll, sink_batch *b, const op_pos *pos);
sink_status sink_update(sink *s, const char *db, const char *coll, const bson_value_t *id, op_update_form form,
                        const bson_t *o, const op_pos *pos);
sink_status sink_delete(sink *s, const char *db, const char *coll, const bson_value_t *id, const op_pos *pos);
/* The same with the text already made (map/ejson.h): the _id and `o` as relaxed Extended JSON. */
sink_status sink_update_json(sink *s, const char *db, const char *coll, const char *id_json, op_update_form form,
                             const char *o_json, const op_pos *pos);
sink_status sink_delete_json(sink *s, const char *db, const char *coll, const char *id_json, const op_pos *pos);
sink_status sink_create(sink *s, const char *db, const char *coll, const op_pos *pos);
sink_status sink_drop(sink *s, const char *db, const char *coll, const op_pos *pos);
sink_status sink_rename(sink *s, const char *db, const char *coll, const char *to_db, const char *to_coll,
                        bool drop_target, const op_pos *pos);
sink_status sink_drop_database(sink *s, const char *db, const op_pos *pos);
sink_status sink_truncate(sink *s, const char *db, const char *coll, const op_pos *pos);

/* End the group: checkpoint := pos (fenced), COMMIT, wait for the result. Also valid with no writes (moves the
 * checkpoint past noops). */
sink_status sink_commit(sink *s, const op_pos *pos);

/* Guarded ops, for finding an op PostgreSQL refuses and setting it aside ([replication] on_error = dead-letter):
 * sink_guard_begin opens a savepoint (the group's transaction first, if needed) and waits for it; after the op,
 * sink_guard_end releases it. When the op failed with SINK_ERR_DATA, sink_dead_letter instead rolls back to the
 * savepoint and records the op in oplog2pg.dead_letter with the error (why, or the sink's own message when NULL),
 * in the same open group, so the commit that follows moves the checkpoint past it. Use per-op mode meanwhile, so
 * that an error is attributed to its own op. */
void sink_set_per_op(sink *s, bool on);
sink_status sink_guard_begin(sink *s);
sink_status sink_guard_end(sink *s);
sink_status sink_dead_letter(sink *s, const op *o, const char *why);
/* The same for on_error = stop: logs which op was refused (namespace, _id, position) and returns the failure. */
sink_status sink_refused(sink *s, const op *o, const char *why);

/* What a read-only look at PostgreSQL finds for a service (`check`, later `status`): it takes no lock and writes
 * nothing, so it is safe while the daemon runs. */
typedef struct {
    char server_version[32];
    bool have_table;      /* oplog2pg.checkpoint exists */
    bool have_checkpoint; /* the service has committed a position */
    op_pos pos;
    char applied_at[64];  /* when that commit happened, as PostgreSQL prints it */
    bool running;         /* a daemon holds the service's lock right now */
    int64_t dead_letters; /* rows in oplog2pg.dead_letter for the service */
} sink_probe_result;

bool sink_probe(const char *conninfo, const char *service, sink_probe_result *out, char *err, size_t errlen);

/* Forget the service's checkpoint (--reimport): the next start copies again. Fenced like a commit. */
sink_status sink_clear_checkpoint(sink *s);

/* The last error, with context ("applying update to shop.orders at 1700000000:3: ..."). */
const char *sink_error(const sink *s);
const sink_stats *sink_get_stats(const sink *s);

#endif

/*
 * pg_internal.h — what the files of the PostgreSQL sink share (the contract is include/sink/pg.h). The files are
 * layers, lowest first; a file calls only functions of the layers below it (scripts/check-layers.sh holds it, and
 * docs/architecture.md draws it):
 *   pgerror.c     the one error policy (sink/pgerror.h);
 *   pgconn.c      the libpq layer: connecting, waits with the owner's hook, exec, COPY (sink/pgconn.h);
 *   batch.c       runs of rows and the COPY bodies made of them (sink/batch.h);
 *   mapped_sql.c  the SQL of a typed map's tables (sink/mapped.h);
 *   rows.c        the row writer, shared with the initial copy: a batch by COPY, whole documents as upserts
 *                 (sink/rows.h);
 *   failure.c     the group's first failure, and the keep point a rewind moves;
 *   pipeline.c    the channel: libpq pipeline mode, the queue of pending statements matched to their results, sends
 *                 that never wait per op, the one wait per group (with the wait hook and the probe of what
 *                 PostgreSQL waits on), the COPY it may carry (during which it refuses every send), the idle
 *                 connection's health;
 *   stmt.c        statements over the channel: the jsonb shape's (prepared at their second use, a bounded set per
 *                 connection), prepares and catalog calls;
 *   jsonb.c       the jsonb table kind: (_id, doc) tables, their statements and COPY (table_kind);
 *   mapped.c      the typed table kind: a map's tables made or checked, its statements, its plans applied;
 *   backfill.c    at connect, the columns a typed map gained: added, and filled from doc where it is kept;
 *   shards.c      a sharded cluster's checkpoints: the shards' names, the sources' positions, the statements that
 *                 write them with each commit, the committed rows;
 *   pg.c          the core: construction, tables (names, catalog, kinds), the entry points, the writes,
 *                 streaming COPY, DDL and the commit with its checkpoint;
 *   connect.c     connecting: schema, service lock (fence), checkpoint row, round trip, lock table, backfill;
 *   deadletter.c  guarded ops (a savepoint per op in careful mode) and the dead-letter records;
 *   probe.c       the read-only look at a service for `check` and `status`;
 *   batcher_pg.c  the batcher's adapter, on the public interface (sink/batcher_pg.h).
 */
#ifndef OPLOG2PG_SINK_PG_INTERNAL_H
#define OPLOG2PG_SINK_PG_INTERNAL_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "map/map.h"
#include "map/names.h"
#include "map/project.h"
#include "sink/mapped.h"
#include "sink/pg.h"
#include "sink/rows.h"

#define PG_MAX_IDENT    63    /* NAMEDATALEN - 1: longer names would be truncated by PostgreSQL */
#define MAX_PENDING     20000 /* results outstanding before a send waits for some to arrive */
#define SAVEPOINT_NAME  "oplog2pg_copy"
#define GUARD_NAME      "oplog2pg_op"
#define SINK_COPY_BYTES (1024 * 1024) /* runs this large go by COPY, however few their rows */
/* What a row costs less by COPY than as a pipelined upsert (seconds, on the daemon and the server together; see
 * docs/benchmarks.md, "Network round trips"). A COPY leaves the pipeline and waits three times on the network (the
 * drain before it, its start, its end), so a run takes COPY only when the rows gain more than three round trips:
 * rows >= 3 * rtt / SINK_COPY_ROW_GAIN_S (sink_copy_min_rows). */
#define SINK_COPY_ROW_GAIN_S 10e-6

typedef enum {
    P_BEGIN,
    P_PREPARE,
    P_INSERT,
    P_UPDATE,
    P_DELETE,
    P_DDL,
    P_SAVEPOINT,
    P_RELEASE,
    P_CKPT,
    P_COMMIT,
    P_SYNC,
    P_DEAD_LETTER,
    P_CATALOG,
    P_INSERT_NEW, /* an insert without ON CONFLICT: an existing _id fails it, and the sink rewinds (pg.c) */
    P_READ,       /* a read inside the group (pipe_read): its rows are kept for the caller */
} pending_kind;

extern const char *const sink_pending_what[]; /* what each kind is, for messages */

/* Whether a statement of this kind writes an op's own data (see pgerror_classify). */
static inline bool sink_is_data_kind(pending_kind k)
{
    return k == P_INSERT || k == P_INSERT_NEW || k == P_UPDATE || k == P_DELETE || k == P_DDL;
}

/* A statement of the jsonb shape (stmt.c): the upsert (replacements, inserts up to the keep point), the plain insert
 * (inserts past it), the update, the delete. */
typedef enum { STMT_UPSERT, STMT_INSERT, STMT_UPDATE, STMT_DELETE, STMT_KINDS } stmt_kind;

typedef struct sink_stmt {
    unsigned id;   /* its name's number on this connection (never reused); 0: not prepared */
    unsigned uses; /* sends on this connection, up to SINK_STMT_PREPARE_AT */
    stmt_kind kind;
    uint64_t used;                   /* sink.stats.commits when it was last sent */
    struct table *owner;             /* the table whose statement it is */
    struct sink_stmt *newer, *older; /* the connection's prepared ones, by last use */
} sink_stmt;

typedef struct table table;

/* A shard's committed checkpoint (oplog2pg.shard_checkpoint), as shards.c keeps it. */
typedef struct {
    char *shard;
    op_pos pos;
    bool has_hold;
    op_pos hold;
    char *hosts; /* its stored hosts ("rs/h1:p,..."), NULL when none */
} sink_shard_row;

/* What a kind of table does, so that the core (pg.c) never asks which kind it holds: one implementation per kind,
 * the jsonb shape (jsonb.c, sink_jsonb_kind) and a typed map with its child tables (mapped.c, sink_mapped_kind).
 * The core picks a namespace's kind once (kind_of), when it opens its table or runs a DDL op on it. */
typedef struct table_kind {
    /* db.coll's schema and table (false with s->failed set when the namespace cannot be a table) */
    bool (*name)(sink *s, const char *db, const char *coll, pg_name *out, const op_pos *pos);
    /* in the open group: the table (or tables) made or checked through the catalog, and what is prepared up front */
    bool (*prepare)(sink *s, table *t, const op_pos *pos);
    /* a run of inserts as pipelined statements; fresh: past the keep point, where plain inserts may do */
    sink_status (*insert_rows)(sink *s, table *t, const sink_batch *b, const op_pos *pos, bool fresh);
    /* whether its runs may stream into one COPY as they fill (else a whole run goes by sink_rows_copy) */
    bool (*streams)(const table *t);
    /* starts the one COPY of a streaming run */
    bool (*copy_start)(sink *s, const table *t, pgconn_error *e);
    /* the run's rows from *from on into the open COPY (*from: the kind's own count of what was sent; 0 at the start
     * and after the run let go of its rows) */
    bool (*copy_rows)(sink_copy_out *o, const table *t, const sink_batch *b, size_t *from, pgconn_error *e);
    /* where a whole run's COPY goes (sink/rows.h) */
    sink_rows_dest (*dest)(const table *t);
    /* an op of a typed map's plan (NULL: the kind has none) */
    sink_status (*apply_plan)(sink *s, const table *t, const op *o);
    /* DDL on the namespace (the core has forgotten its table first): its table(s) dropped, a rename (the kind is the
     * typed one when either name has a map), its rows deleted */
    sink_status (*drop)(sink *s, const char *db, const char *coll, const op_pos *pos);
    sink_status (*rename)(sink *s, const char *db, const char *coll, const char *to_db, const char *to_coll,
                          const op_pos *pos);
    sink_status (*truncate)(sink *s, table *t, const op_pos *pos);
    /* what the kind holds for t */
    void (*free)(table *t);
} table_kind;

struct table {
    char *db, *coll;            /* the MongoDB namespace */
    uint64_t hash;              /* of the namespace it was opened under (its slot in sink.tindex) */
    pg_name name;               /* its schema and table (map/names.h) */
    char *qname;                /* "schema"."table", quoted */
    unsigned id;                /* a typed map's statement names (mapped.c) */
    sink_stmt stmt[STMT_KINDS]; /* the jsonb shape's statements (stmt.c) */
    char *copy_sql;             /* the jsonb shape's COPY (jsonb.c) */
    bool ready;                 /* schema, table and statements sent on this connection */
    const table_kind *kind;
    const map_collection *map; /* a typed map's (mapped.c): its map */
    struct sink_tseries *ts;   /* a time-series collection's (tseries.c): its options and bucket documents */
    sink_mapped_table *mtabs;  /* the map's tables, by table number (map_table_at) */
    size_t nmtabs;
};

typedef struct {
    pending_kind kind;
    const table *t;
    op_pos pos;
    bool answered; /* a result came (its end-of-results marker may still be due) */
} pending;

/* A resume token's bytes in storage that grows and is reused. */
typedef struct sink_token {
    uint8_t *bytes;
    size_t len, cap;
    bool has;
} sink_token;

/* tok := (bytes, len), or none when bytes is NULL; false when out of memory (tok then has none). */
bool sink_token_put(sink_token *tok, const uint8_t *bytes, size_t len);

/* The sink's state, grouped by the file that owns (writes) each part; the others only read it. The counters in stats
 * are the one exception: every layer counts what it sends. */
struct sink {
    /* pg.c: what the sink was made with, and the tables by namespace */
    sink_config cfg;
    char *conninfo, *service;
    table **tables;
    size_t ntables, tables_cap;
    /* tables by namespace: open addressing over the hash of (db, coll) as given when the table was opened; a slot
     * holds a position in tables + 1, 0 = empty; tindex_cap a power of two, at least twice ntables */
    size_t *tindex, tindex_cap;
    unsigned next_table_id;
    bool copy_by_rtt; /* copy_min_rows was left to the default: raised by the round trip (sink_copy_min_rows) */

    /* pg.c: streaming, a long insert run being written by COPY while it still fills. stream_run is NULL when no
     * COPY is open; otherwise its rows up to stream_from are in the COPY, and every entry point that uses the
     * connection ends the COPY first (sink_settle). */
    sink_batch *stream_run;
    table *stream_t;
    size_t stream_from;        /* what of the run is in the COPY, as its table's kind counts it (copy_rows) */
    op_pos stream_last;        /* the position of the newest row in it, for messages */
    sink_copy_out *stream_out; /* allocated at the first COPY, kept */

    /* pg.c and connect.c: the checkpoint (read at connect, moved by each commit) and the hold written with it */
    bool ckpt_prepared;
    int have_ckpt;
    op_pos ckpt;
    bool has_hold; /* the hold the next commit writes (sink_set_hold) */
    op_pos hold;
    bool ckpt_has_hold; /* the committed checkpoint's hold */
    op_pos ckpt_hold;
    /* A change stream's resume token: the one the next commit writes (sink_set_token) and the committed one (read at
     * connect, then each commit's); has false: none (the oplog). */
    sink_token tok, ckpt_tok;
    bool tok_lost; /* the last sink_set_token ran out of memory: the next commit fails */

    /* shards.c: a sharded cluster's checkpoints (pg.h, "A sharded cluster"); nshards 0: a replica set */
    char **shard_names; /* source index -> shard id */
    size_t nshards;
    batcher_source_pos *src; /* the sources' positions the next commit writes (sink_set_source_positions) */
    size_t nsrc, src_cap;
    sink_shard_row *shard_rows; /* the committed rows, by shard id: read at connect, moved by each commit */
    size_t nshard_rows, shard_rows_cap;
    bool shard_prepared; /* the commit's statements prepared on this connection */
    char **shard_hosts;  /* source index -> its hosts to store in its row ("rs/h1:p,..."; NULL: none), or NULL */
    bool *hosts_stored;  /* source index -> its hosts are in its row (committed, or read at connect) */

    /* connect.c: what connecting learnt, and the connection holding the service lock for the sink's life ("the
     * service lock"): whether it holds it, what its application_name says now (sink_set_activity) */
    char owner[64];      /* fence token written into the checkpoint row */
    double rtt_s;        /* the network round trip to PostgreSQL: the fastest of three pings at connect */
    uint64_t lock_slots; /* the server's shared lock table, read at connect (sink_auto_batch_tables) */
    pgconn *fence;
    bool fence_held;
    char activity[SINK_ACTIVITY_MAX + 1];

    /* pipeline.c: the channel */
    pgconn *c;
    PGconn *conn; /* c->pg */
    bool in_txn;  /* BEGIN sent for the open group */
    bool in_copy; /* out of pipeline mode for a COPY (pipe_copy_begin): every send is refused until it ends */
    pending *pend;
    size_t pend_head, pend_tail, pend_cap;
    size_t unflushed;    /* bytes handed to libpq since its buffer was last seen empty */
    pgconn *probe;       /* a side connection that asks pg_stat_activity what a long wait is about */
    double probed_at;    /* clock_s() of the last probe */
    char wait_note[300]; /* what the server said about the wait */
    PGresult *read_res;  /* the rows of the last P_READ, until pipe_read hands them on */

    /* pg.c: a time-series collection's options while its table is opened by its create (NULL: the recorded ones) */
    const char *ts_hint_time, *ts_hint_meta;
    /* tseries.c: the bucket the last bucket op changed, undone when that op is set aside (sink_dead_letter) */
    struct table *ts_undo_table;
    char ts_undo_key[25];
    struct table *ts_copy; /* tseries.c: the time-series table whose COPY of new measurements is open (NULL: none) */

    /* stmt.c: the jsonb shape's prepared statements, newest first; nstmts of them, at most cfg.max_prepared */
    sink_stmt *stmt_newest, *stmt_oldest;
    size_t nstmts;
    unsigned next_stmt_id;

    /* deadletter.c: a per-op guard savepoint is open (sink_guard_begin); it ends with the connection (sink_disconnect)
     */
    bool guarded;

    /* failure.c: the group's first failure (reported at pipe_drain), and the keep point */
    sink_status failed;
    char err[1024];
    char err_state[6]; /* SQLSTATE of the first failure, "" when it was not PostgreSQL's */
    bool err_has_pos;  /* the first failure was a statement's for the op (or the run ending) at err_pos */
    op_pos err_pos;
    op_pos keep_until; /* runs keep their rows for entries up to here (sink_stream_let_go) */
    op_pos copy_end;   /* the oplog's end as the initial copy finished (0:0: none); never moved by a rewind */

    sink_stats stats;
};

/* The application_name of the connection holding the service lock; sink_set_activity appends ": " and what the
 * daemon does, sink_probe reads it back. */
#define SINK_FENCE_APP "oplog2pg-service"

/* The declarations below go by the sink's inner layers, lowest first; a file calls only those of the layers below
 * its own (scripts/check-layers.sh holds it). */

/* ---- failure.c: the group's first failure and the keep point ---- */

/* Records the first failure of the current group (later ones are its consequences): class, SQLSTATE, message. */
void sink_set_err(sink *s, sink_status st, const char *state, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The same for a failure of the statement that wrote the op (or the run of entries ending) at pos: the daemon tells
 * one op failing again and again from different failures by it (sink_error_pos). */
void sink_set_err_at(sink *s, const op_pos *pos, sink_status st, const char *state, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Forgets the failure: a new connection, or an op set aside in careful mode, starts clean. */
void sink_clear_err(sink *s);
/* "secs:inc" of an oplog position for messages ("-" for none). */
void sink_fmt_pos(const op_pos *pos, char *buf, size_t len);

/* ---- pipeline.c: the channel (the connection in pipeline mode, and the COPY it may carry) ---- */

/* Notes a statement just sent (false, s->failed set, when the queue cannot grow or a COPY holds the connection). */
bool pipe_push_pending(sink *s, pending_kind kind, const table *t, const op_pos *pos);
/* Takes every result that has arrived, without waiting. */
bool pipe_read_ready(sink *s);
/* Pushes output and reads what arrived until at most `until` items are pending and `unsent` bytes wait in libpq. */
bool pipe_pump(sink *s, size_t until, size_t unsent);
/* Sends a Sync and waits until every pending item is answered: the group's one wait. */
sink_status pipe_drain(sink *s);
/* After a PQsend*: notes a failed send, and pumps when enough is queued. */
sink_status pipe_after_send(sink *s, bool ok, size_t bytes);
sink_status pipe_send_simple(sink *s, pending_kind kind, const table *t, const char *sql, const op_pos *pos);
/* Leaves pipeline mode for a COPY, after the pipeline drained; until pipe_copy_done, no statement is sent (one that
 * would be fails the session: the layer above ends its COPY first, sink_settle). */
sink_status pipe_copy_begin(sink *s);
sink_status pipe_copy_done(sink *s);
/* A statement on the connection outside pipeline mode (at connect), waiting for its result (*out when wanted); a
 * failure is recorded as `what` failing. */
bool pipe_exec(sink *s, const char *sql, int n, const char *const *values, PGresult **out, const char *what);
/* A read inside the open group (a bucket's stored document, sink/tseries.c): sent pipelined behind everything
 * before it, with a flush request, and waited for; text results. *out (PQclear it) holds its rows. False (s->failed
 * set) when it or anything before it failed. The group's one wait becomes two: reads are for what the sink cannot
 * know otherwise. */
bool pipe_read(sink *s, const table *t, const char *sql, int n, const char *const *values, const int *lengths,
               const int *formats, const op_pos *pos, PGresult **out);
/* The pending queue, made with the sink and freed with it. */
bool pipe_init(sink *s);
void pipe_free(sink *s);
/* The connection the channel carries from now on (NULL: none; the one before is closed): nothing is pending on it,
 * no transaction or COPY is open, and the side connection that asks what a wait is about is closed. */
void pipe_attach(sink *s, pgconn *c);
/* COMMIT, pipelined: the group's transaction is no longer open (its result comes at the next drain). */
sink_status pipe_commit(sink *s, const op_pos *pos);
/* BEGIN, once per group. */
sink_status pipe_begin_if_needed(sink *s);

/* ---- stmt.c: statements over the channel ---- */

/* Sends t's statement k of the jsonb shape with these parameters (as PQsendQueryPrepared takes them), pipelined under
 * pending kind pk: prepared first if this connection has not (making room in the bounded set when it can), or sent
 * unnamed. */
sink_status sink_send_stmt(sink *s, table *t, stmt_kind k, pending_kind pk, const op_pos *pos, int n,
                           const char *const *values, const int *lengths, const int *formats, size_t bytes);
/* Takes t's statements out of the set, deallocating them (pipelined) when `deallocate`. */
void sink_stmt_forget(sink *s, table *t, bool deallocate);
/* The connection is gone, and its statements with it. */
void sink_stmt_clear(sink *s);
/* Prepares a named statement, pipelined. */
sink_status sink_prepare(sink *s, const table *t, const char *name, const char *sql);
/* Sends a call of one of the catalog functions, pipelined. */
sink_status sink_catalog_call(sink *s, const table *t, const char *sql, int n, const char *const *values,
                              const op_pos *pos);

/* ---- jsonb.c: the jsonb table kind ---- */

extern const table_kind sink_jsonb_kind;
/* Maps db.coll to its names; false (s->failed = APPLY_DATA, naming the op's entry) when it cannot be a table. */
bool sink_map_names(sink *s, const char *db, const char *coll, pg_name *out, const op_pos *pos);
/* An update (a replacement upserts the whole document) and a delete of the jsonb shape. */
sink_status jsonb_update(sink *s, table *t, const char *key, op_update_form form, const char *json, const op_pos *pos);
sink_status jsonb_delete(sink *s, table *t, const char *key, const op_pos *pos);

/* ---- mapped.c: the typed table kind ---- */

extern const table_kind sink_mapped_kind;

/* ---- tseries.c: the time-series table kind ---- */

typedef struct sink_tseries sink_tseries;
extern const table_kind sink_tseries_kind;
/* A bucket op (o->bucket: insert, update or delete of one bucket) applied to t, a time-series table: the rows of the
 * measurements that changed written, the bucket's new document kept for the next commit. */
sink_status tseries_apply(sink *s, table *t, const op *o);
/* Ends the open COPY of new measurements (s->ts_copy), if any: before any other statement (sink_settle). */
sink_status tseries_copy_end(sink *s);
/* Drops the rows t holds for a COPY (its table is being dropped: sink_forget_table). */
void tseries_discard(table *t);
/* The last bucket op's document made unknown, in memory and in PostgreSQL (its op is being set aside: after the
 * ROLLBACK TO SAVEPOINT of its guard, in the dead letter's transaction). */
sink_status tseries_undo(sink *s);
/* In the open group, before its COMMIT: every bucket document changed since the last commit written. */
sink_status tseries_flush(sink *s, const op_pos *pos);
/* After a COMMIT PostgreSQL answered: the documents written are clean (and let go when too many are held). */
void tseries_committed(sink *s);

/* ---- backfill.c ---- */

/* Before pipeline mode, at connect: the tables of every map compared with it; the fields a map gained are added and,
 * where the collection's table keeps the whole document, filled in the rows already there (one transaction per map).
 * False with s->failed set. */
bool sink_sync_maps(sink *s);

/* ---- shards.c: a sharded cluster's checkpoints ---- */

/* Outside pipeline mode, at connect: the service's rows of oplog2pg.shard_checkpoint read (false with s->failed set).
 */
bool sink_shards_load(sink *s);
/* Forgets the committed rows (a checkpoint set to none), and with `connection` the statements prepared on it. */
void sink_shards_clear(sink *s, bool connection);
void sink_shards_free(sink *s);
/* In the open group, before its COMMIT: one advance_shard_checkpoint per source that moved, then the service's row
 * moved forward to pos (advance_cluster_checkpoint). APPLY_CONFIG when a source that moved has no shard name. */
sink_status sink_shards_send(sink *s, const op_pos *pos);
/* After the COMMIT (committed: PostgreSQL answered it): the sources' moves are consumed, and the committed rows moved
 * by them. False (APPLY_NOMEM recorded) when the rows could not be noted. */
bool sink_shards_done(sink *s, bool committed);

/* ---- pg.c: the core ---- */

/* Forgets what this connection knows of db.coll's table (coll NULL: of every table of db), so the next op on it makes
 * sure of it again. Its prepared statements are deallocated when `deallocate` (they are known to exist: not after a
 * refusal inside a guard, which may have skipped their PREPARE), otherwise left to the connection's end. */
void sink_forget_table(sink *s, const char *db, const char *coll, bool deallocate);
/* How many rows an insert run needs to go by COPY rather than as pipelined upserts: copy_min_rows, or more when
 * the network round trip makes COPY's three waits cost more than its rows gain (SINK_COPY_ROW_GAIN_S). */
size_t sink_copy_min_rows(const sink *s);
/* Ends the open streaming COPY, if any: its rows are then written in the group's transaction (as upserts when one met
 * a key already there), and the run they came from is emptied. */
sink_status sink_stream_end(sink *s);
/* What every entry point of the sink that uses the connection does first: ends the open streaming COPY, so that its
 * rows precede whatever follows and a fallback to upserts goes out from there, never from inside another send. */
static inline sink_status sink_settle(sink *s)
{
    return s->stream_run != NULL || s->ts_copy != NULL ? sink_stream_end(s) : APPLY_OK;
}

#endif

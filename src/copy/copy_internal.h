/*
 * copy_internal.h — what the parts of the initial copy share (src/copy/; the contract is include/copy/copy.h):
 *   copy.c    the coordinator: plans or resumes, starts the workers, watches progress, the oplog window, the cancel;
 *   plan.c    which collections a new copy takes (MongoDB's list, the filter, the name mapping) and its first state;
 *   state.c   the copy state in PostgreSQL (oplog2pg.copy_state, copy_progress): load, --reimport, `status`;
 *   worker.c  a worker's reading thread: a collection at a time, read from MongoDB and rendered batch by batch;
 *   writer.c  a worker's writing thread: each batch one PostgreSQL transaction, while the next one is being read;
 *   shards.c  a sharded cluster's shards: each one's start and end in its own oplog (copy_shard_state), its window;
 *   common.c  the connections (sink/pgconn.h, source/mongo_client.h) and small helpers all of them use.
 */
#ifndef OPLOG2PG_COPY_INTERNAL_H
#define OPLOG2PG_COPY_INTERNAL_H

#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "copy/copy.h"
#include "core/status.h"
#include "sink/batch.h"
#include "sink/pgconn.h"

#define DEFAULT_BATCH_DOCS 10000
#define WINDOW_CHECK_MS    1000 /* how often the coordinator reads the oldest oplog entry */
#define WINDOW_WARN_EVERY  60.0 /* seconds between two window warnings */
#define RETRY_MIN_MS       250  /* backoff after a passing error, per collection, doubling ... */
#define RETRY_MAX_MS       5000 /* ... up to this */
#define STOP_GRACE_S       5.0 /* a stopping copy gives a statement PostgreSQL keeps waiting this long, then cancels it */
#define STAGE_TABLE        "oplog2pg_copy_stage"
#define COPY_BATCH_BYTES   (16u * 1024 * 1024) /* a batch commits at this many bytes of rows, whatever batch_docs */
#define FIRST_BATCH_SHARE  8 /* a pass's first batch is this much smaller: the writer starts sooner on a collection */
#define COPY_SLOTS         2 /* batches per worker: one being written, one being read (the memory bound) */
#define ERRLEN             1024

typedef enum { JOB_PENDING, JOB_RUNNING, JOB_FINISHED } job_state;

typedef struct {
    char db[128], coll[256];
    uint8_t uuid[16]; /* the collection's UUID when the copy was planned (has_uuid): followed through renames */
    bool has_uuid;
    char src_db[128], src_coll[256]; /* where the collection is read from: db.coll until a rename moves it */
    uint8_t *last_id;                /* committed {_id: v} BSON (malloc), NULL before the first batch */
    uint32_t last_id_len;
    int64_t copied; /* committed documents (the worker's, while it runs the job) */
    int64_t estimate;
    bool done;
    job_state state;             /* under mu */
    _Atomic int64_t live_copied; /* committed documents, for the progress lines */
    int64_t run_base;            /* copied when this run took the job */
    int64_t careful_left;        /* documents still to write row by row (after a batch was refused as data) */
    double run_started;          /* when this run took the job (monotonic seconds) */
    /* A time-series collection's buckets (coll is "system.buckets.NAME"): each bucket is written as the rows of its
     * measurements into NAME's table (sink/tseries.h), with the collection's options, read where the job is located
     * (ts_known once read; ts_meta "" when the collection has no metaField). */
    bool ts;
    bool ts_known;
    char ts_time[256], ts_meta[256];
    /* A viewless time-series collection (set where the job is located): its buckets are not a collection of their
     * own but the collection src_coll without the "system.buckets." prefix, read with rawData: true. */
    bool viewless;
} job;

/* "system.buckets.": the buckets of time-series collection NAME are db.system.buckets.NAME. */
#define COPY_BUCKETS_PREFIX     "system.buckets."
#define COPY_BUCKETS_PREFIX_LEN 15

/* Whether a listCollections entry is a viewless time-series collection: type "timeseries" with a UUID in its info.
 * A time-series collection with a view (MongoDB 5.0 to 8.x) is listed as type "timeseries" without one, beside its
 * buckets collection system.buckets.NAME; a viewless one (featureFlagCreateViewlessTimeseriesCollections, the only
 * layout from 9.0) is a collection of its own, with its UUID, and has no system.buckets.NAME (mongo
 * jstests/core/timeseries/ddl/timeseries_list_collections.js). Its buckets are read with rawData: true. */
bool copy_listed_viewless(const bson_t *entry);

/* One shard of a sharded cluster's copy (the coordinator's alone). */
typedef struct {
    char id[128];
    mongoc_client_t *client; /* on its replica set; NULL when config.shards no longer lists it */
    op_pos start;            /* its newest entry noted before the copy read anything */
    op_pos end;              /* its newest entry as the copy finished (have_end) */
    bool have_end;
    double last_warn; /* the last window warning about it */
} copy_shard_run;

typedef struct {
    const copy_config *cfg;
    op_pos start;           /* a sharded cluster's: the oldest of the shards' starts, term -1 */
    copy_shard_run *shards; /* a sharded cluster's (nshards > 0) */
    size_t nshards;
    uint32_t batch_docs;
    pthread_mutex_t mu;
    job *jobs;
    size_t njobs, next;
    atomic_bool stop;           /* a worker failed or the window is lost: everyone stops after the current batch */
    atomic_int workers_running; /* workers not yet returned */
    copy_result result;         /* the first failure (COPY_DONE while none), under mu */
    char err[ERRLEN];
    pthread_mutex_t ddl_mu; /* CREATE SCHEMA IF NOT EXISTS races between connections: one at a time */
    /* [mongodb] source = change_stream (stream.c): the post-batch resume token at the start noted in this run (NULL:
     * none), and whether the start could not be noted because no stream opens (a setup to fix, not a retry) */
    uint8_t *start_token;
    size_t start_token_len;
    bool start_refused;
} run_ctx;

typedef struct {
    char db[128], coll[256];
    int64_t estimate;
    uint8_t uuid[16]; /* info.uuid of listCollections (has_uuid) */
    bool has_uuid;
    bool ts; /* the buckets of a time-series collection whose entry lists options.timeseries.timeField */
    char ts_time[256], ts_meta[256];
    bool viewless; /* coll is "system.buckets.NAME" for a viewless time-series collection NAME (copy_listed_viewless) */
} plan_item;

typedef struct {
    plan_item *items;
    size_t n, cap;
} plan;

/* ---- common.c ---- */

void copy_trim_nl(char *s);
/* Internal namespaces, and those the filter leaves out. */
bool copy_skip_namespace(const nsfilter *f, const char *db, const char *coll);
/* The _id of a {_id: v} BSON as relaxed Extended JSON, for messages ("(none)" before the first batch). */
void copy_id_text(const uint8_t *bson, uint32_t len, char *buf, size_t buflen);
/* The shared libpq layer (sink/pgconn.h): a result, or NULL with the error (its class from the one policy,
 * sink/pgerror.h) in pg->last. */
PGresult *copy_query_params(pgconn *pg, const char *sql, int n, const char *const *values, const int *lengths,
                            const int *formats, int result_format);
PGresult *copy_query(pgconn *pg, const char *sql);
const char *copy_pg_error(const pgconn *pg);
/* Whether the last failure on pg may pass by itself (the one policy: only APPLY_RETRY and APPLY_NOMEM do). */
bool copy_pg_retryable(const pgconn *pg);
bool copy_pg_exec(pgconn *pg, const char *sql, char *err, size_t errlen, bool *retryable);
/* Connects (hook, may be NULL: the wait hook, sink/pgconn.h); on failure err says why and *fault (may be NULL) holds
 * the class (APPLY_CONFIG: a refused login). */
pgconn *copy_pg_connect(const char *conninfo, int peer_timeout_s, pgconn_wait_fn hook, void *hook_arg, char *err,
                        size_t errlen, apply_status *fault);
/* copy_pg_connect (no wait hook), then the oplog2pg schema installed (sink_install_schema). */
pgconn *copy_pg_open(const char *conninfo, int peer_timeout_s, char *err, size_t errlen, apply_status *fault);
mongoc_client_t *copy_mongo_connect(const char *uri, char *err, size_t errlen);
/* A worker failed, the window is lost or the daemon cancels: everyone stops after the current batch. */
bool copy_stopping(run_ctx *rc);
/* Records the run's first failure and stops everyone. */
void copy_run_fail(run_ctx *rc, copy_result r, const char *msg);

/* ---- state.c ---- */

/* 1 with *start and *finished when the service has a copy state row, 0 when not, -1 on error. */
int copy_state_load(pgconn *pg, const char *service, op_pos *start, bool *finished, char *err, size_t errlen);
bool copy_jobs_load(pgconn *pg, const char *service, job **out, size_t *nout, char *err, size_t errlen);
void copy_jobs_free(job *jobs, size_t n);

/* ---- plan.c ---- */

/* The collection's UUID from one listCollections entry (info.uuid, binary subtype 4); false when it has none. */
bool copy_listed_uuid(const bson_t *entry, uint8_t uuid[16]);
/* The time and meta fields of a listCollections entry's options.timeseries ("" when absent); false when it has no
 * timeField. */
bool copy_listed_timeseries(const bson_t *entry, char *time, size_t tlen, char *meta, size_t mlen);

/* Every included collection (views and system collections left out), with its estimated count. */
/* What becomes of a time-series collection's buckets (DB.system.buckets.NAME): copied into NAME's table (the oplog
 * keeps them current), or left out (a change stream never shows them; infer-map samples documents), with a notice. */
typedef enum { COPY_BUCKETS_TAKE, COPY_BUCKETS_LEAVE, COPY_BUCKETS_LEAVE_NOTICE } copy_buckets;
bool copy_plan_collections(mongoc_client_t *client, const nsfilter *filter, copy_buckets buckets, plan *p, char *err,
                           size_t errlen);
/* The copy_state row, one copy_progress row per collection and, for a sharded cluster, one copy_shard_state row per
 * shard (rc->shards), in one transaction. */
bool copy_plan_store(pgconn *pg, const char *service, const run_ctx *rc, const plan *p, char *err, size_t errlen);

/* ---- shards.c ---- */

/* The shards of cfg->shards, each with a client on its replica set (rc->shards), for a new copy. */
bool copy_shards_open(run_ctx *rc, char *err, size_t errlen);
/* Each shard's newest entry (majority-committed with majority) as its start, and rc->start the oldest of them. */
bool copy_shards_note_starts(run_ctx *rc, char *err, size_t errlen);
/* Whether an entry after a shard's start, up to its newest entry now, renames a collection, on any shard. */
bool copy_shards_renamed(run_ctx *rc, bool *renamed, char *err, size_t errlen);
/* One copy_shard_state row per shard, in the caller's transaction. */
bool copy_shards_store(pgconn *pg, const char *service, const run_ctx *rc, char *err, size_t errlen);
/* A copy resumed: the shards copy_shard_state noted (none: the copy was begun on a replica set), each matched with
 * the shard of cfg->shards of the same id for its client. 1 fine, 0 the copy was begun on a replica set and the URI
 * names a cluster now or the other way round (err says to --reimport), -1 an error (err set). */
int copy_shards_load(pgconn *pg, run_ctx *rc, char *err, size_t errlen);
/* The oplog window of every shard: 1 fine, 0 lost (err says which shard), -1 could not check (err set). */
int copy_shards_window(run_ctx *rc, double eta, char *err, size_t errlen);

/* stream.c: [mongodb] source = change_stream. The window guard: 1 a stream still opens after the copy's start, 0 the
 * server no longer holds that history (err names --reimport), -1 could not check (err set). */
int copy_stream_window(run_ctx *rc, mongoc_client_t *client, char *err, size_t errlen);
/* Whether a collection was renamed after `after`, up to `upto`, as the change stream shows it (plan_from_start). */
bool copy_stream_renamed(mongoc_client_t *client, const op_pos *after, const op_pos *upto, bool *renamed, char *err,
                         size_t errlen);
/* Each shard's newest entry now into copy_shard_state (end_*), and *end the newest of them (*have_end false when
 * some shard's is not known). */
bool copy_shards_record_ends(pgconn *pg, run_ctx *rc, op_pos *end, bool *have_end, char *err, size_t errlen);
/* The shards' starts into cfg->shard_starts (when the caller asked). False when memory runs out. */
bool copy_shards_export(const run_ctx *rc);
void copy_shards_free(run_ctx *rc);

/* ---- worker.c ---- */

/* The thread function of a worker (arg: its run_ctx): its reading side; it starts and ends its writing side. */
void *copy_worker_main(void *arg);

/* ---- writer.c ---- */

/* A document of a batch kept as BSON: one whose text cannot be made (a dead letter already), or, in a careful
 * batch, every one (so that the one PostgreSQL refuses can be recorded). */
typedef struct {
    uint8_t *bson;
    uint32_t len;
    char *why; /* why it is set aside; NULL for a row of a careful batch */
} kept_doc;

typedef enum { SLOT_FREE, SLOT_FILLING, SLOT_FULL, SLOT_WRITING } slot_state;

/* A batch on its way from a worker's reading thread to its writing thread. The reading thread fills it (SLOT_FILLING)
 * and hands it over (SLOT_FULL); the writing thread commits it (SLOT_WRITING) and gives it back (SLOT_FREE); its
 * rows are dropped when it is filled again, on the thread that made them. */
typedef struct {
    slot_state state; /* under the writer's lock */
    uint64_t seq;     /* hand-over order */
    job *j;
    sink_batch *rows;
    kept_doc *kept; /* see kept_doc, in document order */
    size_t nkept, kept_cap, kept_bytes;
    size_t docs;  /* documents read into it: its rows and the ones set aside */
    bson_t last;  /* {_id: v} of its last document (when docs > 0) */
    bool first;   /* the first of a pass: the writer (re)connects and makes sure of the tables before it */
    bool careful; /* written row by row behind savepoints */
    bool done;    /* the collection's last: its progress row says done */
} copy_batch;

/* How the batches of a pass ended on the writing side. */
typedef struct {
    bool failed;        /* a batch was not committed for a reason below (the batches after it were dropped) */
    bool retryable;     /* the one error policy calls it passing */
    bool data_refused;  /* PostgreSQL refused a row's data: that stretch is written again row by row */
    bool refused;       /* the operator must act (a refused login, a table oplog2pg did not make, a privilege) */
    bool malformed;     /* a batch broke the copy's own invariants (a fault in oplog2pg): the copy stops */
    size_t failed_docs; /* documents of the batch that failed */
    char err[ERRLEN];
} copy_outcome;

typedef struct copy_writer copy_writer;

/* Starts a worker's writing thread (its PostgreSQL connection is made at its first batch). NULL with err set. */
copy_writer *copy_writer_start(run_ctx *rc, char *err, size_t errlen);
/* Ends the thread (after copy_writer_drain), closes its connection, frees everything. NULL is fine. */
void copy_writer_stop(copy_writer *w);
/* A batch to fill, emptied (waits while both are in the writer's hands). NULL when a batch of this pass failed:
 * copy_writer_drain says why. */
copy_batch *copy_writer_acquire(copy_writer *w);
/* Hands a filled batch over, to be committed in hand-over order. False (and the batch is given back) when a batch
 * of this pass failed. */
bool copy_writer_submit(copy_writer *w, copy_batch *b);
/* Gives back a batch being filled, unwritten (the pass ends without it). */
void copy_writer_release(copy_writer *w, copy_batch *b);
/* Waits until every batch handed over is committed or dropped, then reports the pass's outcome and clears it for
 * the next pass. */
void copy_writer_drain(copy_writer *w, copy_outcome *out);
/* Keeps a document in b as BSON (why: see kept_doc). False when memory runs out. */
bool copy_batch_keep(copy_batch *b, const bson_t *doc, const char *why);
/* Whether a batch is what the reading thread makes: for a mapped collection (ntables > 0: its map's tables) every
 * row is for one of its tables; a careful batch of the jsonb shape keeps one document per row (besides those set
 * aside). False with why set otherwise: the writing thread then fails the batch rather than skip what it cannot
 * place (exposed for tests). */
bool copy_batch_check(const copy_batch *b, size_t ntables, char *why, size_t whylen);

#endif

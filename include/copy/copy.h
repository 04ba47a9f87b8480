/*
 * copy.h — the initial copy: every included collection copied into PostgreSQL before the daemon tails the oplog.
 *
 * A service without a checkpoint (or after --reimport) first notes the newest oplog entry, then copies every
 * included collection (find sorted by _id, binary COPY per batch), then tails from the noted entry: changes made
 * during the copy are replayed on top and converge (inserts of copied rows become upserts, updates and deletes are
 * idempotent).
 *
 * State lives in PostgreSQL (oplog2pg.copy_state, oplog2pg.copy_progress; see src/sink/schema.sql). Each batch's
 * rows and the collection's progress (last _id as BSON, count) commit in one transaction, so a crash or a cancel
 * loses nothing: the next copy_run continues after the last committed _id, in full BSON order.
 *
 * Threads: copy_run starts cfg->workers workers, each taking the next unfinished collection. A worker is a reading
 * thread with its own MongoDB client and a writing thread with its own PostgreSQL connection, which commits a batch
 * while the next is read (two batches per worker at most). The calling thread coordinates: it logs progress and
 * checks the oplog window (the oldest oplog entry must stay at or before the copy's start) about once a second.
 *
 * A sharded cluster's copy reads through its routers and notes one start per shard (copy_config.shards).
 */
#ifndef OPLOG2PG_COPY_COPY_H
#define OPLOG2PG_COPY_COPY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/nsfilter.h"
#include "core/op.h"
#include "map/map.h"

typedef struct copy_config {
    const char *mongo_uri;        /* source */
    const char *pg_conninfo;      /* target (libpq conninfo/URI) */
    const char *service;          /* the copy state's key, = the checkpoint's service */
    const nsfilter *filter;       /* which namespaces (NULL = all); admin/local/config and system.* never */
    const map_set *maps;          /* typed maps (map/map.h): those collections are copied into their tables */
    int workers;                  /* collections copied at once, each with its own MongoDB client and PG connection */
    uint32_t batch_docs;          /* documents per committed batch (0 = default 10000) */
    int64_t window_warn_ms;       /* warn when the oplog window margin falls under this */
    int64_t progress_interval_ms; /* progress log line period (0 = off) */
    const atomic_bool *cancel;    /* set by the daemon on SIGTERM: workers stop after their current batch commits */
    int peer_timeout_s;           /* PostgreSQL connect timeout and dead-peer detection (sink/pgconn.h) */
    bool majority;                /* [mongodb] read_concern = majority: start at the newest majority-committed entry
                                   * and read the collections with readConcern majority */
    /* Called by the coordinating (calling) thread about every 50 ms while the copy runs, with the documents
     * committed so far, the estimated total and the collections not finished yet: the daemon's watchdog, STATUS
     * line and metrics. May be NULL. */
    void (*tick)(void *arg, int64_t copied, int64_t estimate, size_t collections_left);
    void *tick_arg;
    /* Where a copy that finishes in this run puts the oplog's newest entry as it finished (also recorded in
     * oplog2pg.copy_state): until there, tailing meets rows the copy wrote. Left as it was when not known. May be
     * NULL. */
    op_pos *end;
    /* A sharded cluster (nshards > 0): mongo_uri names its routers, through which the collections are listed and
     * read (a router returns only what each shard owns: no orphan of a migration), and these are its shards as
     * config.shards lists them now, each with the URI of its own replica set. Each shard's newest oplog entry is
     * noted before the copy reads anything, as that shard's start (oplog2pg.copy_shard_state), and the oplog window
     * is watched per shard. On COPY_DONE *shard_starts (malloc'd, the caller frees it) holds one start per shard the
     * copy noted, and *start the oldest of them (term -1); *end is the newest of the shards' ends. */
    const struct copy_shard *shards;
    size_t nshards;
    struct copy_shard_pos **shard_starts;
    size_t *nshard_starts;
    /* [mongodb] source = change_stream (never with shards): no oplog is read. The copy's start is where a change
     * stream stands before the copy reads anything (copy_stream_start), the window guard opens a stream at that
     * start (a server that no longer holds the history from there: COPY_WINDOW_LOST), and the end is where the
     * stream stands after the copy. When the start is noted in this run and the server sent a post-batch resume
     * token, *start_token gets it (malloc'd, the caller frees it; NULL otherwise): the resume point to commit with
     * the checkpoint. May be NULL. */
    bool change_stream;
    uint8_t **start_token;
    size_t *start_token_len;
} copy_config;

typedef struct copy_shard {
    const char *id;  /* config.shards _id */
    const char *uri; /* its replica set's connection string */
} copy_shard;

typedef struct copy_shard_pos {
    char id[128];
    op_pos start;
} copy_shard_pos;

/* The position just before p (term -1): a change stream started after it (startAtOperationTime = it + 1) starts at
 * p. */
op_pos copy_pos_before(const op_pos *p);

/* COPY_REFUSED: PostgreSQL refused something the operator must fix (the login, a privilege, a table of that name
 * that oplog2pg did not make); COPY_UNSUPPORTED: the copy met what it cannot copy exactly (a collection that vanished
 * while the copy state holds no UUID to follow it by, or a batch that breaks the copy's own invariants): nothing past
 * it is committed, and err names what to do (--reimport, a report); COPY_FAILED: anything else that did not pass with
 * retries. */
typedef enum { COPY_DONE, COPY_CANCELLED, COPY_WINDOW_LOST, COPY_FAILED, COPY_REFUSED, COPY_UNSUPPORTED } copy_result;

/* Runs or resumes the copy for cfg->service. On COPY_DONE *start is the oplog position noted before the copy
 * began (the caller tails from it, checking it like any resume point; on a sharded cluster, see copy_config.shards). A
 * copy already finished returns COPY_DONE at once with its start. Otherwise err says why (naming the collection and the
 * last _id where one is concerned). */
copy_result copy_run(const copy_config *cfg, op_pos *start, char *err, size_t errlen);

/* --reimport: forget the service's copy state and drop (or truncate) the tables of the included collections that
 * the catalog (oplog2pg.tables) says this service made; no other table is ever touched. The caller clears the
 * checkpoint itself. */
bool copy_reset(const char *pg_conninfo, const char *service, const nsfilter *filter, bool drop, char *err,
                size_t errlen);

/* For `status` and the daemon: the state of the service's copy (none, running/resumable, finished) and per
 * collection progress. Read-only: no lock, no write, safe while a copy runs. */
typedef struct {
    char db[128], coll[256];
    int64_t copied, total_estimate;
    bool done;
} copy_progress_row;

typedef struct {
    bool exists, finished;
    op_pos start;
    char started_at[64], finished_at[64]; /* as PostgreSQL prints them; finished_at "" while running */
    copy_progress_row *rows;              /* sorted by db, coll */
    size_t n;
} copy_state;

bool copy_state_read(const char *pg_conninfo, const char *service, copy_state *out, char *err, size_t errlen);
void copy_state_free(copy_state *s);

/* The collections a new copy would take (views, system collections, excluded ones and names without a PostgreSQL
 * name left out; a time-series collection listed by its own name, from its buckets collection DB.system.buckets.NAME
 * and that entry's options.timeseries, or from its own entry when it is viewless), for `infer-map`
 * (src/daemon/infer_cmd.c). *out is malloc'd (free it), in MongoDB's listing order. False with err set when MongoDB
 * cannot list them. */
typedef struct _mongoc_client_t mongoc_client_t;
typedef struct {
    char db[128], coll[256];
    bool ts;                         /* a time-series collection: coll is its name, buckets its buckets collection */
    char buckets[256];               /* "system.buckets.NAME" */
    char ts_time[256], ts_meta[256]; /* its timeField ("" when the entry lists none) and metaField ("" when none) */
    bool viewless; /* a viewless time-series collection: no buckets collection; coll read with rawData: true */
} copy_collection;
bool copy_list_collections(mongoc_client_t *client, const nsfilter *filter, copy_collection **out, size_t *n, char *err,
                           size_t errlen);

/* Where a cluster-wide change stream stands now, as a checkpoint: the last position whose changes are already in
 * what a read now sees. With a post-batch resume token (a high-water mark: events at its clusterTime are still to
 * come) the position before its clusterTime, and *tok the token (malloc'd; the caller frees it); without one
 * (DocumentDB) the reply's operationTime, *tok NULL. tok may be NULL. False with err set when no stream opens;
 * *retry says whether a later attempt may succeed (the server could not be reached). */
bool copy_stream_start(mongoc_client_t *client, op_pos *out, uint8_t **tok, size_t *tok_len, bool *retry, char *err,
                       size_t errlen);

/* Pure helpers (exposed for the progress lines and `status`, and for tests). */

/* A duration for people: "45s", "12m05s", "3h07m", "2d04h"; "?" when secs is negative, NaN or infinite. */
const char *copy_format_duration(double secs, char *buf, size_t len);

/* Seconds left at `rate` documents per second for `done` of `total` documents; -1 when it cannot be estimated
 * (rate <= 0). 0 when done >= total. */
double copy_eta_seconds(int64_t done, int64_t total, double rate);

/* "copied", "cancelled", "oplog window lost", "failed", "refused by PostgreSQL", "cannot be copied exactly". */
const char *copy_result_name(copy_result r);

#endif

/*
 * metrics.h — the daemon's counters in the Prometheus text format, served over HTTP on a local address.
 *
 * The apply loop owns the numbers. It fills a metrics_snapshot and hands it over with metrics_publish() (a copy
 * under a mutex: cheap enough to do after every burst of work); the HTTP server (libmicrohttpd, its own thread)
 * renders the latest snapshot for each GET /metrics. So a scrape never touches the loop's state and never waits for
 * it, and a loop stuck in a long commit still answers with the last figures (and a growing lag).
 *
 * Off by default: [metrics] listen = HOST:PORT turns it on. Only GET (and HEAD) of /metrics are served; anything
 * else gets 404 (other paths) or 405 (other methods).
 */
#ifndef OPLOG2PG_DAEMON_METRICS_H
#define OPLOG2PG_DAEMON_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Kinds of applied ops, as labels of oplog2pg_ops_applied_total{kind=...}. */
enum metrics_op_kind {
    METRICS_OP_INSERT = 0,
    METRICS_OP_UPDATE,
    METRICS_OP_DELETE,
    METRICS_OP_DDL,  /* create, drop, rename, dropDatabase, truncate */
    METRICS_OP_NOOP, /* entries that change nothing in PostgreSQL (noops, filtered namespaces) */
    METRICS_OP_KINDS
};

/* Flush triggers, as labels of oplog2pg_flushes_total{trigger=...}; same order as core/batcher.h's flush_trigger. */
enum metrics_trigger {
    METRICS_FLUSH_CONFLICT = 0,
    METRICS_FLUSH_SIZE,
    METRICS_FLUSH_TIMER,
    METRICS_FLUSH_IDLE,
    METRICS_FLUSH_EXIT,
    METRICS_FLUSH_PER_OP,
    METRICS_FLUSH_TABLES,
    METRICS_FLUSH_TRIGGERS
};

/* Ways rows are written, as labels of oplog2pg_rows_written_total{method=...}. */
enum metrics_write_method {
    METRICS_WRITE_COPY = 0, /* binary COPY */
    METRICS_WRITE_INSERT,   /* pipelined upsert */
    METRICS_WRITE_UPDATE,
    METRICS_WRITE_DELETE,
    METRICS_WRITE_METHODS
};

/* A sharded cluster's shard, as the metrics show it (labels shard="ID"). */
#define METRICS_MAX_SHARDS 64
typedef struct metrics_shard {
    char id[64];
    double checkpoint_timestamp; /* oplog time of its committed checkpoint (UNIX seconds); 0 = none yet */
    double read_timestamp;       /* oplog time of the last entry its reader read; 0 = none yet */
    double merge_wait_seconds;   /* how long the merge has waited on it (counter) */
    uint64_t entries;            /* its entries handed on to the applier (counter) */
    uint64_t notes;              /* oplog notes written into it (counter) */
    bool notes_refused;          /* it refused appendOplogNote */
    bool window_known;           /* its oplog's edges were read (the last read worked): the two below are shown */
    double window_seconds;       /* newest minus oldest entry of its oplog */
    bool margin_known;           /* and its checkpoint is known: margin_seconds is shown */
    double margin_seconds;       /* what it still needs (checkpoint, or an open transaction's start) minus the oldest */
} metrics_shard;

/* Everything one scrape shows. Counters count since the process started (they survive reconnects). */
typedef struct metrics_snapshot {
    char service[64];                         /* label of oplog2pg_info */
    uint64_t entries_applied;                 /* oplog entries applied (committed or about to be) */
    uint64_t ops_applied[METRICS_OP_KINDS];   /* by kind */
    uint64_t flushes[METRICS_FLUSH_TRIGGERS]; /* by trigger */
    uint64_t commits;                         /* PostgreSQL transactions committed */
    uint64_t rows_written[METRICS_WRITE_METHODS];
    uint64_t bytes_written;     /* document bytes sent to PostgreSQL */
    uint64_t dup_fallbacks;     /* COPY runs re-sent as upserts after a duplicate _id */
    uint64_t rewinds;           /* groups applied again: a COPY that let go of rows, or a plain insert, met a _id */
    uint64_t unnamed;           /* statements sent unnamed: the connection held its bound of prepared ones */
    uint64_t dead_letters;      /* ops set aside in oplog2pg.dead_letter */
    uint64_t ts_bucket_ops;     /* time-series bucket changes applied */
    uint64_t ts_rows;           /* measurement rows they wrote */
    uint64_t ts_bucket_reads;   /* bucket documents read back from PostgreSQL */
    uint64_t reconcile_passes;  /* delete reconciliations that ran ([mongodb] delete_reconcile) */
    uint64_t reconcile_deleted; /* rows they deleted */
    uint64_t pg_reconnects;
    uint64_t mongo_reconnects;
    uint64_t queue_depth;        /* ops waiting between the reader and the applier (gauge) */
    uint64_t queue_capacity;     /* gauge */
    double lag_seconds;          /* how far the committed position is behind the oplog (gauge; 0 when caught up) */
    double checkpoint_timestamp; /* oplog time (UNIX seconds) of the committed checkpoint; 0 = none yet */
    int64_t copy_documents;      /* initial copy: documents committed so far (gauge; 0 when no copy ran) */
    int64_t copy_documents_estimate;
    uint64_t txn_open;     /* transactions over several oplog entries read but not yet committed (gauge) */
    uint64_t txn_bytes;    /* the oplog bytes of their entries read so far (gauge) */
    double txn_oldest_age; /* seconds since the first entry of the oldest of them (gauge; 0 when none) */
    /* The oplog window of a replica set's oplog (a sharded cluster's are per shard, in shards[]): absent from the
     * scrape when unknown (change stream, not read yet, the read failed, no checkpoint yet for the margin). */
    bool window_known;
    double window_seconds; /* newest minus oldest oplog entry time */
    bool margin_known;
    double margin_seconds; /* the oldest entry still needed (checkpoint or open transaction) minus the oldest */
    size_t nshards;        /* a sharded cluster's shards (this session's), 0 for a replica set */
    metrics_shard shards[METRICS_MAX_SHARDS];
    bool ready;        /* connected both ways and applying (1), or starting, copying, reconnecting (0) */
    double start_time; /* process start, UNIX seconds */
} metrics_snapshot;

typedef struct metrics_server metrics_server;

/* Starts serving on `listen` ("HOST:PORT": "127.0.0.1:9187", "[::1]:9187", "localhost:9187"; port 0 picks a free
 * one, see metrics_port). NULL with err set ("[metrics] listen 127.0.0.1:9187: Address already in use") on
 * failure. Until the first metrics_publish the server renders a zeroed snapshot. */
metrics_server *metrics_start(const char *listen, char *err, size_t errlen);
/* The TCP port actually bound. */
int metrics_port(const metrics_server *m);
/* Replaces the snapshot the next scrapes render (copied). Thread-safe. */
void metrics_publish(metrics_server *m, const metrics_snapshot *snap);
/* Stops the server and frees it. NULL is fine. */
void metrics_stop(metrics_server *m);

/* Renders a snapshot in the Prometheus text exposition format (version 0.0.4) into a malloc'd, NUL-terminated
 * string (*len without the NUL). NULL only when memory runs out. Pure: for the server and the unit tests. */
char *metrics_render(const metrics_snapshot *snap, size_t *len);

/* Splits "HOST:PORT" / "[V6]:PORT"; false with err when malformed or the port is outside 0..65535. Used by the
 * configuration check too. host must hold at least 256 bytes. */
bool metrics_parse_listen(const char *listen, char *host, size_t hostlen, int *port, char *err, size_t errlen);

#endif

/*
 * sim_internal.h — what mongosim's server.c (event loop, connections, framing) and commands.c (command handlers,
 * cursors, oplog writes) share. Not for use outside tests/mongosim.
 */
#ifndef MONGOSIM_SIM_INTERNAL_H
#define MONGOSIM_SIM_INTERNAL_H

#include <bson/bson.h>
#include <ev.h>
#include <stdbool.h>
#include <stdint.h>

#include "changestream.h"
#include "oplog.h"
#include "server.h"
#include "store.h"

#define SIM_OP_REPLY    1
#define SIM_OP_QUERY    2004
#define SIM_OP_MSG      2013
#define SIM_MAX_MESSAGE 48000000
#define SIM_MAX_BSON    16777216
/* Cursor batches stop growing past this many bytes, as a real server's do at 16 MB. */
#define SIM_BATCH_BYTES (16 * 1024 * 1024 - 64 * 1024)

/* A growable byte buffer. Allocation failure aborts: mongosim is a test tool, and a half-written reply is worse. */
typedef struct {
    uint8_t *data;
    size_t len, cap;
} sim_buf;

void buf_reserve(sim_buf *b, size_t more);
void buf_put(sim_buf *b, const void *p, size_t n);
void buf_free(sim_buf *b);
/* Raw BSON writing straight into a buffer (used for replies so entries are copied once). */
size_t bw_doc_begin(sim_buf *b);
void bw_doc_end(sim_buf *b, size_t start);
size_t bw_sub_begin(sim_buf *b, uint8_t type, const char *key); /* type 3 document or 4 array */
void bw_key(sim_buf *b, uint8_t type, const char *key);
void bw_int32(sim_buf *b, const char *key, int32_t v);
void bw_int64(sim_buf *b, const char *key, int64_t v);
void bw_double(sim_buf *b, const char *key, double v);
void bw_string(sim_buf *b, const char *key, const char *s);
void bw_doc(sim_buf *b, const char *key, const uint8_t *doc, uint32_t len);

typedef struct sim_cursor sim_cursor;
typedef struct sim_conn sim_conn;

struct sim_conn {
    sim_server *srv;
    int fd;
    int64_t id;
    ev_io rio, wio;
    sim_buf in, out;
    size_t out_off; /* bytes of out already sent */
    bool parked;    /* a request waits: an awaitData getMore for new entries, or a write for its write concern */
    int park_kind;  /* SIM_PARK_GETMORE or SIM_PARK_WRITE */
    int32_t park_request;
    int32_t park_opcode; /* of the parked request: OP_QUERY gets OP_REPLY, OP_MSG gets OP_MSG */
    int64_t park_cursor;
    int64_t park_batch;
    ev_timer park_timer; /* the getMore's maxTimeMS, or the write's wtimeout */
    /* SIM_PARK_WRITE: a write with writeConcern {w: "majority"} whose reply waits until the majority commit point
     * reaches wc_ts (commands.c, "write concern"). */
    uint64_t wc_ts;
    bson_t *wc_reply; /* the reply body, held back */
    bson_t *wc_used;  /* the write concern as errInfo.writeConcern shows it */
    bool held;        /* replies held back by the delay fault or --oplog-read-delay */
    bool oplog_reply; /* the reply just written answers a find/getMore on local.oplog.rs */
    ev_timer delay_timer;
    bool close_after_flush;
    bool dead; /* socket error: close at the next safe point */
    /* TLS (--tls-cert): the connection's OpenSSL session, NULL on a plain server. Until tls_ready the handshake runs;
     * afterwards SSL_read/SSL_write replace recv/send, and a read that must write first (or the reverse) waits on the
     * other watcher (server.c, "TLS"). */
    struct ssl_st *ssl;
    bool tls_ready;
    bool tls_read_wants_write, tls_write_wants_read;
    int tls_pending;    /* length of an SSL_write to repeat as it was (OpenSSL requires the same length) */
    char *x509_subject; /* the verified client certificate's subject, RFC 2253 (--tls-ca), or NULL */
    bool authenticated; /* MONGODB-X509 authentication succeeded on this connection */
    sim_conn *prev, *next;
};

struct sim_server {
    sim_options opts;
    struct ev_loop *loop;
    bool own_loop;
    int lfd;
    int port;
    struct ssl_ctx_st *tls_ctx; /* --tls-cert: every accepted connection speaks TLS; NULL: plain */
    ev_io accept_io;
    ev_async stop_async;
    ev_prepare prepare;
    ev_timer noop_timer;
    ev_timer stepdown_timer;
    ev_signal sig_term, sig_int;
    bool signals;
    sim_store *store;
    sim_oplog *oplog;
    int64_t term;
    uint8_t oplog_uuid[16];
    char me[512];
    sim_conn *conns;
    int64_t next_conn_id;
    sim_cursor *cursors;
    int64_t next_txn_number;
    uint64_t closed_gen; /* bumped whenever a connection is freed */
    uint64_t woken_end;  /* oplog_end_seq when parked getMores were last offered entries */
    bool stepped_down;
    int64_t delay_ms;
    uint64_t rng; /* the server's random stream (--oplog-read-delay), from opts.seed */
    uint64_t oplog_reads_delayed, oplog_read_delay_total_ms; /* oplog replies drawn a delay, and the delays' sum */
    struct sim_txns *txns; /* client transactions and their server parameters (txn.c) */
    /* The majority commit point (mongosimMajority): while maj_frozen it stays at maj_ts and maj_store holds the
     * data as of it (what majority reads and a rollback go back to); otherwise it is the newest entry. */
    bool maj_frozen;
    uint64_t maj_ts;
    sim_store *maj_store;
    uint64_t oplog_getmores; /* oplog getMores answered (mongosimStatus: a test's event to wait on) */
    /* mongosimBeforeNext: a command run once, on before_db, just before the next command named before_name is
     * handled (from any connection); NULL when none waits. */
    bson_t *before_cmd;
    char before_name[64], before_db[128];
    /* A member of a simulated sharded cluster (cluster.c): the router answers through cluster_dispatch; a shard
     * stamps its entries from the cluster's one clock (*clock: the newest ts given out anywhere). */
    struct sim_cluster *cluster;
    bool is_router;
    uint64_t *clock;
    uint64_t noop_last_known;     /* the newest entry's ts at the periodic noop writer's last tick */
    int malform_batch;            /* mongosimMalformBatch: 0 off, 1 a non-document element, 2 a corrupt one */
    bool malform_lookup;          /* ... in the next batch of a find with a projection, before its first entry */
    struct cs_cursor *cs_cursors; /* open change streams (changestream.c) */
    struct sim_images *images;    /* pre- and post-images (images.c) */
    /* --flavor documentdb: the namespaces modifyChangeStreams enabled, each "db\0coll\0" ("" for all) */
    char **cs_enabled;
    size_t n_cs_enabled;
};

/* One reply under construction: a header is written into conn->out by reply_begin, the body document follows,
 * reply_end fixes the length. With no_reply (OP_MSG moreToCome) the bytes are dropped. */
typedef struct {
    sim_conn *conn;
    int32_t request_id;
    int32_t opcode; /* of the request: OP_QUERY gets OP_REPLY, OP_MSG gets OP_MSG */
    bool no_reply;
    size_t start;
    bool parked; /* set by getMore when it parked instead of replying */
    bool
        wc_ran; /* set by a write command once it ran (past parsing and the primary check): its write concern applies */
} sim_reply;

#define SIM_PARK_GETMORE      0
#define SIM_PARK_WRITE        1
#define SIM_PARK_CHANGESTREAM 2 /* a getMore on a change stream waiting for events (changestream.c) */

void reply_begin(sim_reply *r);
void reply_end(sim_reply *r);
void reply_bson(sim_reply *r, const bson_t *doc);
void reply_error(sim_reply *r, int code, const char *fmt, ...) BSON_GNUC_PRINTF(3, 4);
const char *sim_code_name(int code);

/* server.c */
int64_t sim_now_ms(void);
/* Next ts and append a complete entry (it must contain that ts); caps the oplog. */
uint64_t sim_next_ts(sim_server *srv);
bool sim_append_entry(sim_server *srv, const bson_t *entry, uint64_t ts, bson_error_t *err);
/* Append a body with ts, t, v, wall added at its end. */
bool sim_append_body(sim_server *srv, const bson_t *body, bson_error_t *err);
void sim_conn_reply_ready(sim_conn *c);
/* One step of a seeded random stream (splitmix64): the same seed gives the same numbers. */
uint64_t sim_random_next(uint64_t *state);
/* A parked getMore was answered (its reply is in c->out): send it and resume the connection. */
void sim_conn_unpark(sim_conn *c);
/* Start the timer after which a parked getMore answers with an empty batch. */
void sim_conn_park(sim_conn *c, double seconds);
/* Closes every client connection but `except` (the one that asked). */
void sim_drop_connections(sim_server *srv, sim_conn *except);
void sim_step_down(sim_server *srv, int64_t ms);

/* commands.c */
/* Runs one command (db from OP_QUERY's namespace, or NULL to use the body's $db); the reply (unless parked) is
 * complete in r->conn->out when it returns. */
void cmd_dispatch(sim_server *srv, sim_reply *r, const bson_t *cmd, const char *db);
/* A parked request: offer a getMore new entries, or a write the majority commit point (timeout false), or give up
 * (timeout true: a getMore answers an empty batch, a write its wtimeout). True when it was answered. */
bool cmd_parked_try(sim_server *srv, sim_conn *c, bool timeout);
/* Frees what a parked write holds (its connection is closing). */
void cmd_parked_write_free(sim_conn *c);
/* Fail every parked getMore on oplog cursors with this error (step-down). */
void cmd_fail_parked(sim_server *srv, int code, const char *msg);
void cmd_cursors_free(sim_server *srv);
/* The majority commit point: its ts, the entry's t and wall time in ms (the newest entry's while it follows). */
void cmd_majority_optime(sim_server *srv, uint64_t *ts, int64_t *t, int64_t *wall_ms);

/* changestream.c: aggregate with a $changeStream first stage, getMore and killCursors on its cursors. */
bool cs_is_change_stream(const bson_t *cmd);
void cs_cmd_aggregate(sim_server *srv, sim_reply *r, const bson_t *cmd, const char *db);
bool cs_owns_cursor(sim_server *srv, int64_t id);
void cs_cmd_get_more(sim_server *srv, sim_reply *r, const bson_t *cmd, int64_t id);
bool cs_parked_try(sim_server *srv, sim_conn *c, bool timeout);
bool cs_kill(sim_server *srv, int64_t id);
void cs_cursors_free(sim_server *srv);
/* What a change stream on srv may read now (its oplog, the majority store, the visible end). */
void cs_env_of(sim_server *srv, cs_env *env);
/* An error reply with the server's change-stream error labels. */
void cs_reply_error(sim_reply *r, const cs_error *err);

/* cluster.c: the router's commands (srv->is_router). */
void cluster_dispatch(sim_server *srv, sim_reply *r, const bson_t *cmd, const char *db);
/* The shards of config.shards (removed ones included: their part still serves), each shard's server and the
 * cluster time it was added at (its topologyTime), and the cluster clock (the newest ts any shard stamped). */
size_t cluster_shard_count(const struct sim_cluster *cl);
sim_server *cluster_shard_server(const struct sim_cluster *cl, size_t i);
uint64_t cluster_shard_added(const struct sim_cluster *cl, size_t i);
uint64_t cluster_clock(const struct sim_cluster *cl);
struct cl_stream **cluster_streams(struct sim_cluster *cl);

/* cluster_stream.c: change streams through the router, merged from a stream on every shard. */
void cl_stream_aggregate(struct sim_cluster *cl, sim_reply *r, const bson_t *cmd, const char *db);
/* False when id is not one of the router's change-stream cursors. */
bool cl_stream_get_more(struct sim_cluster *cl, sim_reply *r, const bson_t *cmd, int64_t id);
bool cl_stream_kill(struct sim_cluster *cl, int64_t id);
bool cl_stream_parked_try(struct sim_cluster *cl, sim_conn *c, bool timeout);
/* Grows whenever any shard's oplog grows: the router's parked getMores are offered events then. */
uint64_t cl_stream_wake_gen(struct sim_cluster *cl);
void cl_stream_free_all(struct sim_cluster *cl);

#endif

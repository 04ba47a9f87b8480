/*
 * server.h — mongosim's server: one replica-set member (a PRIMARY) speaking the MongoDB wire protocol on 127.0.0.1.
 *
 * main.c parses options into a sim_options and runs the server on libev's default loop; tests create one with its
 * own loop and run it on a thread (sim_server_run), stopping it from another thread with sim_server_stop.
 */
#ifndef MONGOSIM_SERVER_H
#define MONGOSIM_SERVER_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "store.h"

struct ev_loop;

typedef struct {
    const char *bind_host;       /* "127.0.0.1" */
    int port;                    /* 0 = pick a free port (see sim_server_port) */
    const char *set_name;        /* "rs0" */
    const char *advertise_host;  /* host in me/hosts/primary; "127.0.0.1" */
    sim_oplog_format format;     /* SIM_FORMAT_70 */
    double noop_interval;        /* seconds between periodic noops; 0 = off */
    uint64_t max_oplog_entries;  /* 0 = unlimited */
    const char *oplog_file;      /* BSON file appended verbatim at start, or NULL */
    const char *data_dir;        /* mongodump layout loaded at start, or NULL */
    const char *state_dir;       /* loaded at start if present; saved on stop / mongosimSave, or NULL */
    bool verbose;                /* log each connection and command to stderr */
    uint64_t *clock;             /* a shard of a simulated cluster: the cluster's one clock (cluster.c); NULL */
    int64_t oplog_read_delay_ms; /* each reply to a find/getMore on local.oplog.rs waits a random 0..this ms; 0 off */
    uint64_t seed;               /* seeds the server's random stream (the oplog read delays) */
    const char *refuse_stage;    /* an aggregate stage answered as unknown (40324), as an older server does; NULL */
    sim_flavor flavor;           /* SIM_FLAVOR_MONGODB */
    int32_t ts_bucket_max_count; /* timeseriesBucketMaxCount (--timeseries-bucket-max-count); 0: the server's 1000 */
    bool ts_viewless;            /* time-series collections are viewless, rawData reads taken (--timeseries-viewless) */
    bool refuse_cluster_stream;  /* a cluster-wide $changeStream is refused (13 Unauthorized), as to a user whose roles
                                  * grant changeStream and find on some databases only (--refuse-cluster-stream) */
    const char *tls_cert;        /* PEM with the server's certificate (chain) and key: serve TLS only (--tls-cert) */
    const char *tls_ca;          /* PEM of the CAs client certificates must chain to; with it a client certificate is
                                  * required and commands need MONGODB-X509 authentication (--tls-ca); NULL */
} sim_options;

typedef struct sim_server sim_server;

void sim_options_init(sim_options *opts);

/* Binds the listening socket and loads files. loop NULL: the server makes (and frees) its own loop. */
sim_server *sim_server_new(const sim_options *opts, struct ev_loop *loop, bson_error_t *err);
int sim_server_port(const sim_server *srv);
/* Runs the loop until sim_server_stop (or SIGTERM/SIGINT when installed by sim_server_handle_signals). */
void sim_server_run(sim_server *srv);
/* Thread-safe: asks the loop to return. */
void sim_server_stop(sim_server *srv);
/* SIGTERM/SIGINT stop the loop (default loop only). */
void sim_server_handle_signals(sim_server *srv);
/* Serves a connected, non-blocking socket (one end of a socketpair) as if it had been accepted; the server owns fd
 * from then on (false, fd untouched, when memory runs out). With sim_server_run_once, which runs one loop iteration
 * without waiting, a test or a fuzz target (tests/fuzz/wire.c) drives the wire layer without TCP. */
bool sim_server_adopt(sim_server *srv, int fd);
void sim_server_run_once(sim_server *srv);
/* Saves oplog and data to state_dir (no-op without one). */
bool sim_server_save(sim_server *srv, bson_error_t *err);
void sim_server_free(sim_server *srv);

#endif

/*
 * shenv.h — one integration-test environment around the daemon on a sharded mongosim (simcluster.h): the cluster in
 * a folder under $TMPDIR, a configuration naming its router and the throwaway PostgreSQL, a service and a database
 * of their own; and the steps the sharded tests take with it (start, kill and stop the real daemon binary, commands
 * through the router, writes by _id, wait until PostgreSQL equals the cluster, run `oplog2pg status`/`check`).
 * Failures abort the Check test with a message (Check code: the benchmarks, which link no Check, never call these).
 */
#ifndef OPLOG2PG_TESTS_SHENV_H
#define OPLOG2PG_TESTS_SHENV_H

#include <mongoc/mongoc.h>
#include <stdbool.h>
#include <stddef.h>

#include "daemonenv.h"
#include "proc.h"
#include "simcluster.h"
#include "skip.h"

/* Skips the running test (and returns from it) unless the tests run on the simulator. */
#define SHENV_SKIP_UNLESS_SIM()                                                                                        \
    do {                                                                                                               \
        if (!denv_using_sim())                                                                                         \
            SKIP_TEST("a sharded cluster: mongosim --shards (MONGO_URI names a replica set)");                         \
    } while (0)

/* How a file's cases set up their environment. */
typedef struct {
    const char *prefix;          /* service and database PREFIX_NAME, folder $TMPDIR/oplog2pg-PREFIX-NAME.XXXXXX */
    size_t shards;               /* mongosim --shards */
    const char *const *sim_args; /* further mongosim arguments (NULL-terminated, may be NULL) */
    const char *uri_options;     /* appended to the router's URI in the configuration ("?...", may be NULL) */
    const char *extra_ini;       /* lines after the [mongodb] uri (may open further sections; may be NULL) */
    const char *log_grep;        /* shenv_show_log's grep arguments (NULL: -v 'info: applied') */
    bool log_tail;               /* shenv_show_log shows the last 60 lines it keeps, not the first 60 */
} shenv_opts;

typedef struct {
    simcluster c;
    char dir[200];
    char ini[256];
    char log[300]; /* the current daemon's log */
    char router[128];
    char service[64];
    char db[64];
    proc_handle daemon;
    int starts;
    mongoc_client_t *client; /* on the router */
    const char *log_grep;
    bool log_tail;
} shenv;

/* Starts the cluster and writes the configuration (include = DB.*, progress every second). */
void shenv_start(shenv *e, const char *name, const shenv_opts *o);
/* SIGTERM the daemon if one runs (it must exit 0), stop the cluster, remove the folder. */
void shenv_stop(shenv *e);
/* Prints the current daemon log, filtered (shenv_opts.log_grep), to stderr. */
void shenv_show_log(const shenv *e);

/* Starts `oplog2pg -c INI run [args...]` (NULL-terminated, may be NULL; at most 7), its log in DIR/oplog2pg.log.N. */
void shenv_daemon(shenv *e, const char *const *args);
/* The same, then waits until the daemon reads the shards (its log says "ready"). */
void shenv_daemon_ready(shenv *e, const char *const *args);
/* kill -9 the daemon and wait for it. */
void shenv_kill(shenv *e);
/* Runs `oplog2pg -c INI cmd` to completion with its output in DIR/CMD.txt (its path into out); returns its exit
 * code. */
int shenv_run(shenv *e, const char *cmd, char *out, size_t outlen);

/* An admin command through the router that must succeed (cmd destroyed); reply, when not NULL, gets the reply (the
 * caller destroys it). */
void shenv_admin(shenv *e, bson_t *cmd, bson_t *reply);
/* enableSharding of the test's database with the given primary shard. */
void shenv_enable_sharding(shenv *e, const char *primary);
/* DB.coll sharded on `field` (int32 values), split at each of at[0..n), the chunk from at[k] moved to the shard
 * listed (k + 1) % shards in config.shards. */
void shenv_shard_coll(shenv *e, const char *coll, const char *field, const int *at, size_t n);
/* moveChunk of the chunk of DB.coll holding {field: key} to shard `to`. */
void shenv_move(shenv *e, const char *coll, const char *field, int key, const char *to);

/* Writes through the router, each of which must succeed: {_id: id, v: v, s: "text"}; update (destroyed) and delete
 * by _id (int32), of one document or of every one with that _id. */
void shenv_insert(shenv *e, const char *coll, int id, int v);
void shenv_update(shenv *e, const char *coll, int id, bson_t *update, bool many);
void shenv_delete(shenv *e, const char *coll, int id, bool many);

/* True once PostgreSQL equals the cluster (read through the router: orphans filtered; at least one row) within
 * timeout_s; with report, a difference is printed, with the daemon log. Aborts if the daemon exits meanwhile. */
bool shenv_wait_equal(shenv *e, double timeout_s, bool report);

#endif

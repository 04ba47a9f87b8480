/*
 * daemonenv.h — one integration-test environment around the daemon: a mongosim of its own (or the replica set at
 * MONGO_URI), a configuration file naming the throwaway PostgreSQL, a service name and a database prefix of its own,
 * a folder under $TMPDIR for logs; and the steps tests take with it (start the daemon, wait until it caught up,
 * compare PostgreSQL with the source, run a command, stop). Failures abort the Check test with a message.
 */
#ifndef OPLOG2PG_TESTS_DAEMONENV_H
#define OPLOG2PG_TESTS_DAEMONENV_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "proc.h"

typedef struct {
    proc_handle sim;
    bool own_sim;
    char uri[1024]; /* long enough for TLS options naming files (test_tls.c) */
    char dir[200];
    char ini[256];
    char base_log[256];
    char log[300];
    char service[64];
    char prefix[32];
    proc_handle daemon;
    int starts;
} denv;

/* $OPLOG2PG_TEST_PG (set by scripts/with-pg.sh). */
const char *denv_pg_conninfo(void);
/* True unless MONGO_URI names a real replica set (and OPLOG2PG_TEST_SIM is unset). */
bool denv_using_sim(void);
/* A test's volume (documents, ops): `full`, or a quarter of it in a sanitizer build (OPLOG2PG_TEST_SANITIZE, set by
 * tests/run.sh). The sanitizers look for memory and undefined-behaviour errors, which every code path meets in the
 * smaller run as well; the full volume, for what it proves about sizes and overlap, runs in the plain build. */
long denv_scaled(long full);
/* Rewrites the `include = ...` line of the daemon's configuration file. */
void denv_set_include(denv *e, const char *include);
/* Waits (60 s at most) until no oplog2pg session is left in PostgreSQL: what a killed daemon committed is then all
 * there is of it. It counts every daemon's session on the cluster, so nothing else may run daemons against the same
 * PostgreSQL: tests/integration/shards.sh gives each parallel shard a cluster of its own. */
void denv_wait_sessions_gone(void);
double denv_now(void); /* monotonic seconds */
/* The newest oplog entry's ts as (secs << 32 | inc), 0 when the oplog is empty. */
uint64_t denv_newest_ts(const char *uri);
/* The service's committed checkpoint the same way (0 when none). */
uint64_t denv_checkpoint_ts(const char *service);
/* The newest write's ts as hello reports it (lastWrite.opTime.ts), for servers that do not let a test read the
 * oplog (mongosim --flavor). */
uint64_t denv_hello_newest_ts(const char *uri);
/* Waits until the service's checkpoint reaches the newest write hello reports at the call; aborts when the daemon
 * exits or timeout_s passes. */
void denv_wait_hello_caught_up(denv *e, double timeout_s);
/* Prints the last 30 lines of the current daemon log to stderr. */
void denv_show_log(const denv *e);
/* Sets up the environment `name` (service rep_NAME, databases rep_NAME_*); extra_ini is appended to the
 * [replication] section of the configuration (it may open further sections). */
void denv_start(denv *e, const char *name, const char *const *sim_args, const char *extra_ini);
/* Appends a [mongodb] section naming the source the daemon reads, when the environment asks for one:
 * OPLOG2PG_TEST_SOURCE (source = auto | oplog | change_stream) and OPLOG2PG_TEST_STREAM_UPDATES
 * (change_stream_updates = auto | raw | description). tests/integration/run.sh runs chosen suites again that way, so
 * the same tests check the change-stream source. */
void denv_write_source(FILE *f);
/* The environment asks for a change stream read through updateDescription (see denv_write_source). A MongoDB 4.4
 * ($v:1 updates) gives no disambiguatedPaths, so a test of 4.4's updates skips then: the oplog pass covers it, and
 * docs/sources.md says what such a server costs a change stream. */
bool denv_stream_descriptions(void);
/* Starts `oplog2pg -c INI run`, with env_extra ("NAME=value", NULL-terminated) added to its environment, and with
 * extra arguments after `run` (NULL-terminated, may be NULL). */
void denv_daemon_start(denv *e);
void denv_daemon_start_env(denv *e, const char *const *env_extra);
void denv_daemon_start_args(denv *e, const char *const *args, const char *const *env_extra);
/* Rewrites the configuration's [postgres] conninfo as the test cluster's plus `extra` (libpq keywords). */
void denv_set_conninfo(denv *e, const char *extra);
/* Waits until the current daemon log holds `needle`; false on timeout. */
bool denv_wait_log(denv *e, const char *needle, double timeout_s);
/* One number from PostgreSQL (the first column of the first row of sql). */
int64_t denv_pg_int(const char *sql);
/* The first column of the one row of sql, as text. */
void denv_pg_text(const char *sql, char *out, size_t outlen);
/* Runs statements that must succeed (several, separated by semicolons, are fine). */
void denv_pg_exec(const char *sql);
/* Waits until the checkpoint reaches the newest oplog entry; false on timeout. Aborts if the daemon exits. */
bool denv_wait_caught_up(denv *e, double timeout_s);
/* Every row of the rep_NAME_* databases equals the source. */
void denv_expect_match(denv *e);
/* The same for the databases whose name starts with prefix. */
void denv_expect_match_prefix(denv *e, const char *prefix);
/* SIGTERM the daemon (it must exit 0), stop the mongosim, remove the folder. */
void denv_stop(denv *e);
/* Runs `oplog2pg ARGS...` to completion with its output in out_path; returns its exit code. */
int denv_run_command(denv *e, const char *const *args, const char *out_path);
bool denv_file_contains(const char *path, const char *needle);

/* Writes to the source (each aborts the test on failure): documents {_id: k, v: 10k, s: "text"} for k in
 * [from, to]; drop; dropDatabase; renameCollection. */
void denv_insert_range(const denv *e, const char *db, const char *coll, int from, int to);
void denv_drop_collection(const denv *e, const char *db, const char *coll);
/* Runs a command on db of the environment's MongoDB, which must succeed; cmd is destroyed. */
void denv_command(const denv *e, const char *db, bson_t *cmd);
/* A TCP port nobody listens on right now. */
int denv_free_port(void);
/* GET url with curl; the body (with headers when `headers`) into out. Returns curl's exit code. */
int denv_http_get(const char *url, bool headers, char *out, size_t outlen);
/* The value of the metrics sample line that starts with `series` (name and labels as written), or -1. */
double denv_metric(const char *text, const char *series);
/* The seconds of the oldest and the newest entry of local.oplog.rs at uri, read with a find of its own (fails the
 * test when the oplog is empty). */
void denv_oplog_edges(const char *uri, uint32_t *oldest, uint32_t *newest);
void denv_drop_database(const denv *e, const char *db);
void denv_rename(const denv *e, const char *db, const char *coll, const char *to_db, const char *to_coll,
                 bool drop_target);

#endif

/*
 * daemon.h — the commands that move data: `run` (tail and apply until stopped) and `replay` (apply a dump of the
 * oplog, then exit). Both return a process exit code from daemon/exitcodes.h.
 */
#ifndef OPLOG2PG_DAEMON_DAEMON_H
#define OPLOG2PG_DAEMON_DAEMON_H

#include "daemon/config.h"

/* Tail the oplog into PostgreSQL until SIGTERM/SIGINT (flush, commit, exit 0) or a fault a person must see.
 * config_path is re-read on SIGHUP. */
int daemon_run(config *cfg, const char *config_path);

/* Apply the entries of a mongodump of local.oplog.rs (concatenated BSON) through the same batcher and sink, skipping
 * entries at or before the service's checkpoint, then commit and exit. */
int daemon_replay(config *cfg, const char *dump_path);

/* Validate the configuration, reach both sides, and report what was found. */
int daemon_check(config *cfg);

#endif

/*
 * daemon.h — the commands that move data: `run` (tail and apply until stopped) and `replay` (apply a dump of the
 * oplog, then exit). Both return a process exit code from daemon/exitcodes.h.
 */
#ifndef OPLOG2PG_DAEMON_DAEMON_H
#define OPLOG2PG_DAEMON_DAEMON_H

#include "daemon/config.h"

#include "core/op.h"

/* How a run starts (command-line flags). */
typedef struct {
    bool reimport;    /* --reimport: forget the checkpoint and the copy, empty the tables, copy again */
    bool skip_import; /* --skip-import: without a checkpoint, tail from the newest entry instead of copying */
    bool import_only; /* --import-only: copy (if needed), commit the start point, exit */
    bool have_tail_from;
    op_pos tail_from; /* --tail-from: the first oplog position to apply */
} daemon_options;

/* Parses a --tail-from value: "SECS:INC" or an ISO 8601 UTC time ("2026-11-29T10:00:00Z"). */
bool daemon_parse_position(const char *text, op_pos *out);

/* Tail the oplog into PostgreSQL until SIGTERM/SIGINT (flush, commit, exit 0) or a fault a person must see.
 * Without a checkpoint it first runs (or resumes) the initial copy. config_path is re-read on SIGHUP. */
int daemon_run(config *cfg, const char *config_path, const daemon_options *opts);

/* Where the service stands: checkpoint, lag, oplog window, copy progress. Read-only, works with the daemon running
 * or stopped. */
int daemon_status(config *cfg, bool json);

/* Apply the entries of a mongodump of local.oplog.rs (concatenated BSON) through the same batcher and sink, skipping
 * entries at or before the service's checkpoint, then commit and exit. */
int daemon_replay(config *cfg, const char *dump_path);

/* Validate the configuration, reach both sides, and report what was found. */
int daemon_check(config *cfg);

#endif

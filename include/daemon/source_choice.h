/*
 * source_choice.h — which source a service reads ([mongodb] source), decided from what the server offers
 * (source/stream/caps.h): the daemon chooses, the source layer only reports.
 *
 * - source = oplog: the oplog; a server that refuses to read local.oplog.rs is a configuration to fix.
 * - source = change_stream: a cluster-wide change stream; a server where none opens is a configuration to fix.
 * - source = auto: the oplog where it can be read, else a change stream, else neither (both refusals named). On a
 *   sharded cluster's routers auto keeps the oplog: the shards' oplogs are read directly (the routers' own answer on
 *   local.oplog.rs says nothing of them), and a change stream through the routers is taken only when asked for.
 * - With a change stream, change_stream_updates = raw needs showRawUpdateDescription: a server that refuses it is a
 *   configuration to fix (auto then reads updateDescription).
 */
#ifndef OPLOG2PG_DAEMON_SOURCE_CHOICE_H
#define OPLOG2PG_DAEMON_SOURCE_CHOICE_H

#include <stdbool.h>
#include <stddef.h>

#include "daemon/config.h"
#include "source/stream/caps.h"

typedef enum source_kind {
    SOURCE_OPLOG = 0,
    SOURCE_CHANGE_STREAM,
} source_kind;

/* "oplog" or "change_stream", as [mongodb] source and oplog2pg.checkpoint.source spell them. */
const char *source_kind_name(source_kind k);

/* The source to read: true with *out set and note saying why, in a sentence for the log ("the oplog can be read");
 * false when none can work, with note saying what to change. */
bool source_choose(enum config_source want, enum config_stream_updates updates, const stream_caps *caps,
                   source_kind *out, char *note, size_t len);

/* At start: asks the server (stream_caps_probe), decides, and logs which source and why, with what the server offers a
 * change stream. Returns -1 with *out set, or the exit code to stop with: EXIT_CONFIG when no source can work (the
 * log says what to change) or the login is refused; EXIT_FAILURE_GENERIC when the server cannot be reached and
 * nothing else says which source to take. committed: what the service's checkpoint row says its last commit read
 * (sink_probe_result.source: "oplog", "change_stream", "" when unknown); while the server cannot be reached, a
 * service with one goes on with it (it is what the row's position means), and source = oplog never needs the probe
 * (nothing to decide: the oplog reader reports its own errors, as before the choice existed). */
int source_resolve(const config *cfg, const char *committed, source_kind *out);

#endif

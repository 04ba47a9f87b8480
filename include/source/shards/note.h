/*
 * note.h — the oplog-note writer of one shard: on request, writes a no-op note into that shard's oplog with
 * appendOplogNote, so that its reader sees an entry (and the merge a watermark) past a cluster time even when the
 * shard has no writes of its own (core/merge.h calls for it through merge_config.nudge).
 *
 * The command: {appendOplogNote: 1, data: {msg: "oplog2pg: ...", shard, service?}, maxClusterTime: past,
 * writeConcern: {w: 1}} on admin, sent to the shard's primary (mongo src/mongo/db/commands/oplog_note.cpp: the
 * primary writes one `n` entry whose o is `data`, and with maxClusterTime only when its newest entry is before that
 * time; the server's own periodic noop writer, src/mongo/db/repl/noop_writer.cpp, writes the same kind). w: 1, as
 * that writer: the note is read by the shard's reader with readConcern majority once a majority has it, which
 * happens as fast whatever the command waits for; waiting for the majority here would only slow the next note.
 * The note's ts is the shard's next cluster time, at least the primary's wall-clock second (mongo
 * src/mongo/db/vector_clock_mutable.cpp tickClusterTime): a shard whose clock lags the requested time in the same
 * second gets a note before it, and the merge asks again while the shard still holds it back.
 *
 * It needs the appendOplogNote privilege on the cluster (the clusterManager role, or a custom role with it). A
 * refusal for lack of it (Unauthorized, code 13; or CommandNotFound, 59, a server without the command) is logged
 * once and remembered: noter_refused turns true for good, later requests are dropped (the merge then waits for the
 * shard's periodic noop, every 10 s by default), never retried in a loop. Any other failure (network, election) is
 * counted and the note is tried again at the next request, not before.
 *
 * noter_request never blocks on MongoDB (the merge calls it from the apply loop): requests are coalesced, and the
 * thread writes one note for all those that came since its last one. The thread owns its libmongoc client.
 */
#ifndef OPLOG2PG_SOURCE_SHARDS_NOTE_H
#define OPLOG2PG_SOURCE_SHARDS_NOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/op.h"

typedef struct noter_config {
    const char *uri;     /* the shard's connection string (shard_info.uri; copied) */
    const char *shard;   /* the shard's name, for logs and the note's data (copied) */
    const char *service; /* the oplog2pg service, written into the note's data; NULL = none (copied) */
} noter_config;

typedef struct noter_stats {
    uint64_t requests; /* noter_request calls (those dropped after a refusal included) */
    uint64_t attempts; /* appendOplogNote commands sent */
    uint64_t written;  /* notes the shard accepted (it skips one when its newest entry is past the time already) */
    uint64_t failures; /* attempts that failed (the refusal included) */
    bool refused;      /* the privilege is missing: no more attempts */
    bool has_last;     /* last: the operationTime of the last note's reply, when the reply has one */
    op_pos last;
    char last_error[256]; /* the last failure's message, "" when none */
} noter_stats;

typedef struct noter noter;

/* Parses the URI, makes the client and starts the thread. NULL with the reason in err. */
noter *noter_start(const noter_config *cfg, char *err, size_t errlen);

/* Asks for a note because the merge waits on this shard for `past` (another source's entry there): the shard writes
 * it unless its newest entry is at or after `past` already (maxClusterTime); NULL: a note in any case. Never blocks
 * on MongoDB; coalesced with the requests not yet served (the newest `past` wins); dropped once refused. */
void noter_request(noter *n, const op_pos *past);

/* The privilege was refused (see above): for `status`. */
bool noter_refused(const noter *n);

void noter_get_stats(const noter *n, noter_stats *out);

/* Ends the thread (a command in flight finishes first: at most the client's socket timeout) and frees. NULL is
 * fine. */
void noter_free(noter *n);

#endif

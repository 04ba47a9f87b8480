/*
 * caps.h — what a MongoDB deployment offers a change-stream source, found out by asking it: the server version, the
 * oplog readable or not, a cluster-wide change stream and the options it accepts, collections with pre- and
 * post-images. `source = auto` is decided from this (daemon/source_choice.h), and `check` and `status` print it.
 *
 * Every probe of a stream is an `aggregate: 1` on admin with `$changeStream: {allChangesForCluster: true, ...}` and
 * batchSize 0, run on one server with one session (a cursor's kill must carry its lsid), whose cursor is killed at
 * once: it reads nothing. A refusal by the server is an answer (the capability is missing, its message kept); only a
 * failure to talk to the server (the network, server selection, a refused login) fails the probe, for the caller to
 * retry or report. Nothing here picks an exit code.
 *
 * The resume-token helpers read the clusterTime at the head of a token's KeyString (`_data` hex: byte 0 the type
 * 0x82, a Timestamp, then 4 bytes of seconds and 4 of increment, big-endian; src/mongo/db/pipeline/resume_token.cpp,
 * as PeerDB's flow/connectors/mongo/resume_token.go decodes it). A token not in that form (DocumentDB, Azure) has
 * none.
 */
#ifndef OPLOG2PG_SOURCE_STREAM_CAPS_H
#define OPLOG2PG_SOURCE_STREAM_CAPS_H

#include <mongoc/mongoc.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/op.h"

/* One capability: offered (yes), refused (probed, not yes: why holds the server's message) or not tried (why says
 * why not). */
typedef struct stream_cap {
    bool yes;
    bool probed;
    char why[256];
} stream_cap;

typedef struct stream_caps {
    char version[32];           /* buildInfo's version, "" when the server did not say */
    bool router;                /* hello says isdbgrid: a sharded cluster's mongos */
    stream_cap oplog;           /* a find on local.oplog.rs (limit 1) is answered */
    stream_cap streams;         /* a cluster-wide change stream opens */
    stream_cap pbrt;            /* its reply carries a postBatchResumeToken */
    stream_cap start_after;     /* startAfter (tried with that token) */
    stream_cap expanded_events; /* showExpandedEvents */
    stream_cap raw_updates;     /* showRawUpdateDescription */
    stream_cap split_events;    /* a trailing $changeStreamSplitLargeEvent */
    stream_cap images;          /* some collection has changeStreamPreAndPostImages enabled (why: the first found) */
    /* Servers that are not MongoDB, told by their behaviour or the URI's host (the drivers' own check: a host ending
     * in .cosmos.azure.com or .docdb.amazonaws.com; mongodb/specifications, "Detect Cosmos DB and DocumentDB"). */
    bool documentdb; /* Amazon DocumentDB: change streams refused until modifyChangeStreams enables them */
    bool cosmos;     /* Azure Cosmos DB for MongoDB (RU): no delete events; streams.yes is false, streams.why says */
    /* Where the stream stands now: the post-batch resume token's clusterTime, else the reply's operationTime. */
    bool have_time;
    op_pos time;
    uint8_t *token; /* the post-batch resume token (raw BSON, owned), NULL when none */
    size_t token_len;
} stream_caps;

typedef enum stream_caps_status {
    STREAM_CAPS_OK = 0,
    STREAM_CAPS_RETRY,   /* the server could not be reached (err says why): a later attempt may succeed */
    STREAM_CAPS_REFUSED, /* the login was refused, or a privilege is missing for every probe: a person must act */
} stream_caps_status;

/* Probes everything above on client (out is reset first; free with stream_caps_free, whatever the result). */
stream_caps_status stream_caps_probe(mongoc_client_t *client, stream_caps *out, char *err, size_t errlen);
/* The same, leaving out the pre- and post-images unless `images` (that one lists the collections of every database:
 * `check` and `status` show it, the choice of a source at start needs none of it). */
stream_caps_status stream_caps_probe_ex(mongoc_client_t *client, bool images, stream_caps *out, char *err,
                                        size_t errlen);
void stream_caps_free(stream_caps *c);

/* Opens a cluster-wide change stream at startAtOperationTime `at` and kills it: STREAM_START_OK when the server
 * still holds history from there, STREAM_START_LOST when it no longer does (ChangeStreamHistoryLost 286, or
 * CappedPositionLost 136), STREAM_START_REFUSED for any other answer, STREAM_START_RETRY when it could not be asked;
 * why holds the server's message. batchSize 1, not 0: the history is checked when the scan of the oplog begins,
 * which a batch of 0 never starts. */
typedef enum stream_start_status {
    STREAM_START_OK = 0,
    STREAM_START_LOST,
    STREAM_START_REFUSED,
    STREAM_START_RETRY,
} stream_start_status;
stream_start_status stream_caps_start_at(mongoc_client_t *client, const op_pos *at, char *why, size_t len);

/* Where a cluster-wide change stream stands now (a stream opened with batchSize 0 and killed): its post-batch resume
 * token's clusterTime, else the reply's operationTime (*pbrt says which). STREAM_START_OK with *now set and, when tok
 * is not NULL, *tok the post-batch resume token (raw BSON, malloc'd, the caller frees it; NULL when the server sent
 * none); REFUSED (no stream opens) or RETRY with why set.
 * The two differ by one step: a post-batch resume token of an empty batch is a high-water mark that sorts before
 * every event of its clusterTime, so events at that time are still to come, while operationTime is the time of
 * the newest operation the reply's read saw. */
stream_start_status stream_caps_now(mongoc_client_t *client, op_pos *now, bool *pbrt, uint8_t **tok, size_t *tok_len,
                                    char *why, size_t len);

/* Whether a change stream shows a collection renamed after `after`, up to and including `upto` (`rename` events of
 * a cluster-wide stream, filtered on the server by a $match, read with getMores until the post-batch resume token
 * passes upto): *renamed. A server that sends no post-batch resume token (DocumentDB) is read until an event past
 * upto arrives or an awaited getMore comes back empty, upto being the operationTime of a reply given after the
 * events looked for (caps.c, renames_without_pbrt, says why that is enough). False with err set when that cannot be
 * told: no stream opens, or the stream did not reach upto within a bounded number of getMores. */
bool stream_renames_between(mongoc_client_t *client, const op_pos *after, const op_pos *upto, bool *renamed, char *err,
                            size_t errlen);

/* The clusterTime at the head of a resume token (raw BSON {_data: hex, ...}), term -1; false when the token is not
 * in KeyString form. For one token per database ({perdb: {<db>: token}}, source/stream/perdb.h), the earliest. */
bool stream_token_time(const uint8_t *tok, size_t len, op_pos *out);

#endif

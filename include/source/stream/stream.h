/*
 * stream.h — the change-stream source: a reader thread that follows a MongoDB change stream (where the oplog cannot
 * be read) and feeds the same queue, with the same entries, as the oplog reader (source/oplog/reader.h).
 *
 * It opens one cluster-wide stream (`aggregate: 1` on admin, `$changeStream: {allChangesForCluster: true,
 * showExpandedEvents, showRawUpdateDescription}` then `$changeStreamSplitLargeEvent`). The aggregate and every getMore
 * are built by hand (libmongoc's watch cannot pass showExpandedEvents nor showRawUpdateDescription, and hides the
 * post-batch resume token of each batch). The first aggregate (batchSize 0) finds which options the server accepts:
 * one it refuses by name is dropped, with a log line (showRawUpdateDescription refused under STREAM_UPDATES_RAW stops
 * the reader, QUEUE_END_UNSUPPORTED naming it). A server that refuses the cluster-wide stream itself (13 Unauthorized,
 * or a refusal naming allChangesForCluster) is read through one database-level stream per database the filter
 * names, merged in clusterTime order (source/stream/perdb.h), each entry then carrying a composite token
 * {perdb: {<db>: <token>}} (a committed one is resumed from directly); a filter that does not name its databases
 * exactly stops the reader then (QUEUE_END_REFUSED or QUEUE_END_UNSUPPORTED), the message naming the remedies.
 *
 * Events become ops as source/stream/event.h says: each is turned into the oplog op behind it and decoded by the oplog
 * decoder, so the ops equal the oplog source's; the namespace filter then turns those of namespaces not replicated
 * into noops and their PostgreSQL text is rendered on the reader thread (source/prepare.h), as the oplog reader does
 * (decode_flags: DECODE_BORROW_PAYLOAD borrows from the rebuilt entry until rendered).
 *
 * What it pushes, as the oplog reader does: QUEUE_ENTRY items (op_entry), QUEUE_IDLE when a batch comes back
 * under-full (the stream is drained), QUEUE_END when it must stop (the same end codes: QUEUE_END_RESUME_LOST for lost
 * history, error 286 or CappedPositionLost 136, the message naming --reimport; QUEUE_END_UNSUPPORTED for an event it
 * cannot turn into ops exactly, the message naming the event, and for an event over 16 MB the server does not split;
 * QUEUE_END_REFUSED when authentication or a privilege is refused; QUEUE_END_NOMEM; QUEUE_END_RETRY for a passing
 * fault after parts of a large transaction were handed on). Each entry's position is the event's clusterTime (term
 * -1), and op_entry.token holds the resume token after it: the events sharing one clusterTime (a transaction, a
 * batched write) make one entry, atomic, pushed once the next event has another clusterTime or a post-batch resume
 * token is later (on a quiet replica set, that is the periodic noop writer's next entry, within 10 s); a group of
 * more than STREAM_PART_OPS events or STREAM_PART_BYTES arrives as parts with `more`, only the last with the token.
 * An empty batch whose post-batch resume token is a high-water mark past the last entry pushed is pushed as a noop
 * entry (reason "change stream position") one tick before the mark's clusterTime, with that token, so an idle
 * stream's committed position keeps moving.
 *
 * Resuming: from `token` when given (resumeAfter; startAfter for a token of an invalidate), else from the first event
 * after `start` (startAtOperationTime start + 1). A resume the server refuses because the pipeline changed (280)
 * starts again at the last position pushed (the token's clusterTime; startAtOperationTime), with a log line: the
 * events of that instant are applied again, which the sink absorbs (upserts, idempotent updates and deletes). Network
 * errors and resumable errors (label ResumableChangeStreamError, CursorNotFound, the errors mongo_error_retryable
 * names) reopen the stream after the last entry pushed, with a backoff of 100 ms doubling to 5 s.
 *
 * stream_stop sets a flag, wakes the thread (also from a blocked queue push) and joins it: about one await_ms at most.
 * It does not stop the queue. When the thread ends by itself, stream_finished turns true.
 */
#ifndef OPLOG2PG_SOURCE_STREAM_H
#define OPLOG2PG_SOURCE_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/nsfilter.h"
#include "core/op.h"
#include "core/queue.h"
#include "map/map.h"
#include "source/oplog/reader.h"

/* Events asked for by each getMore (batch_size <= 0). */
#define STREAM_DEFAULT_BATCH_SIZE 1000

/* How updates are read ([mongodb] change_stream_updates). */
typedef enum stream_updates {
    STREAM_UPDATES_AUTO = 0,    /* the raw $v:2 diff where the server gives it (showRawUpdateDescription), else the
                                 * updateDescription */
    STREAM_UPDATES_RAW,         /* the raw diff only; a server that refuses it stops the source */
    STREAM_UPDATES_DESCRIPTION, /* updatedFields / removedFields / truncatedArrays */
} stream_updates;

typedef struct stream_config {
    const char *uri;      /* MongoDB connection string (copied); set up as the oplog reader's (mongo_client.h) */
    op_pos start;         /* the committed checkpoint's position (its clusterTime; the term is ignored) */
    const uint8_t *token; /* the committed resume token (raw BSON; copied), NULL when none: start after `start` */
    size_t token_len;
    int32_t await_ms;       /* maxTimeMS of each getMore; <= 0: READER_DEFAULT_AWAIT_MS */
    int32_t batch_size;     /* batchSize of each getMore (the aggregate asks 0); <= 0: STREAM_DEFAULT_BATCH_SIZE */
    const nsfilter *filter; /* NULL = everything; must outlive the reader. Decides every op as for the oplog; when
                             * its include patterns name their databases exactly, the server sends only theirs */
    const map_set *maps;    /* typed maps, projected on the reader thread as the oplog reader does */
    unsigned decode_flags;  /* as reader_config.decode_flags (DECODE_BORROW_PAYLOAD borrows from the entry rebuilt
                             * from the events; DECODE_KEEP_SYSTEM changes nothing: a stream shows no system.buckets) */
    stream_updates updates;
    bool lookup; /* fullDocument "updateLookup" on the stream, and events without operationType read as upserts of
                  * it (Azure Cosmos DB for MongoDB RU, whose deletes [mongodb] delete_reconcile reconciles) */
} stream_config;

typedef struct stream_reader stream_reader;

void stream_config_init(stream_config *cfg);
stream_reader *stream_start(const stream_config *cfg, queue *q, char *err, size_t errlen);
void stream_stop(stream_reader *r);
/* As reader_ask_stop: asks the thread to end without waiting; stream_stop or stream_free joins it. */
void stream_ask_stop(stream_reader *r);
void stream_free(stream_reader *r);
bool stream_finished(const stream_reader *r);
/* The same counters as the oplog reader's (entries pushed, last position, reconnects, idles; no open transactions). */
void stream_get_stats(const stream_reader *r, reader_stats *out);

#endif

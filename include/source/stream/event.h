/*
 * event.h — the pure part of the change-stream source: resume tokens, events turned into oplog-form ops, and the
 * grouping of events into entries. No I/O; the reader thread (source/stream/stream.h) drives it.
 *
 * Resume tokens. A token is `{_data: "<hex>"}` (or `_data` as BinData on 3.6/4.0): on MongoDB, the uppercase hex of a
 * KeyString V1 (src/mongo/db/storage/key_string/key_string.cpp) of the values [clusterTime, version, tokenType,
 * txnOpIndex, fromInvalidate, collection UUID or null, eventIdentifier, fragmentNum?] (ResumeToken's constructor in
 * src/mongo/db/pipeline/resume_token.cpp; version 0 tokens have no tokenType nor fromInvalidate). tokenType is 128 for
 * an event, 0 for a high-water mark (a post-batch resume token between events); txnOpIndex is the event's index inside
 * its applyOps (a transaction, a batched write). The leading Timestamp sorts first, so tokens of one version order by
 * time. Servers that are not MongoDB (Amazon DocumentDB, Azure) give tokens in another form: those are opaque here
 * (stream_token.keystring false), and the event's own clusterTime is its position.
 *
 * Events to ops. Each event becomes the oplog op a server writes for the same change ({op, ns, o, o2}), and the
 * events of one entry are decoded together by the oplog decoder (source/decode.h) as one oplog entry (a plain entry for
 * one event, an applyOps for several), so the ops, their noops and their reasons are exactly those the oplog source
 * gives for the same change and everything downstream applies them identically:
 *   insert → {op: i, o: fullDocument, o2: documentKey}; delete → {op: d, o: documentKey};
 *   replace → {op: u, o: fullDocument, o2: documentKey} (a replacement);
 *   update → {op: u, o: rawUpdateDescription (the oplog's own $v:2 diff, showRawUpdateDescription), o2: documentKey},
 *            or the $v:2 diff rebuilt from updateDescription (stream_updesc_to_diff), or, where a path is ambiguous
 *            and the server cannot say how, the post-image fullDocument as a replacement;
 *   create / drop / rename / dropDatabase → the `c` commands (create with the event's options, viewOn for a view,
 *            timeseries for a time-series collection, so the decoder's noops for those apply);
 *   createIndexes / dropIndexes / modify / startIndexBuild / abortIndexBuild → their `c` commands (noops);
 *   shardCollection, refineCollectionShardKey, reshardCollection and the internal events that change no document
 *            (endOfTransaction, migrateChunkToNewShard, migrateLastChunkFromShard, reshardBegin, reshardDoneCatchUp,
 *            reshardBlockingWrites) → a noop entry `n` (what the server logs for them);
 *   invalidate → refused (a cluster-wide stream never has one); any other operationType → refused, naming it.
 * (Event fields: docs/change_stream_events.md and document_source_change_stream_transform.cpp in mongodb/mongo.)
 *
 * Updates from updateDescription. The server derives it from the $v:2 diff (change_stream_document_diff_parser.cpp):
 * the diff's u, i (and b) entries → updatedFields under their dotted path, d → removedFields, an array diff's u<N> →
 * "path.N", its l → truncatedArrays {field, newSize}. Rebuilding the diff needs each path's segments and which are
 * array indexes. The parser lists in disambiguatedPaths (6.1+ with showExpandedEvents, 8.2+ always) every path that
 * has a field name with a dot or a numeric field name after the first segment, as an array of its segments (integers
 * for array indexes, strings for field names); so for a path not listed there, dots separate fields and every numeric
 * segment after the first is an array index. Without disambiguatedPaths (an older server, or no showExpandedEvents) a
 * path with a dot has no one reading: it is refused (STREAM_EV_AMBIGUOUS) and the caller takes the post-image or
 * stops. Lost in the description and so in the rebuilt diff: which new fields were `i` (appended) rather than `u`
 * (PostgreSQL's jsonb does not keep field order, the typed maps neither); a `b` (binary) entry, which only
 * time-series buckets have (system.buckets.*, not shown on a stream).
 *
 * Grouping. Events sharing one clusterTime (a transaction's, all at its commit time; a batched write's) make one
 * entry, atomic, at that clusterTime, carrying the token of its last event. Whether more events of that clusterTime
 * are to come is known only when the next event has another clusterTime, or when a post-batch resume token is past it
 * (stream_group_closes). A group of more than STREAM_PART_OPS events or STREAM_PART_BYTES bytes is handed on in parts
 * (op_entry.more), the last one with the token. Fragments of an event split by $changeStreamSplitLargeEvent
 * (splitEvent {fragment, of}) are joined back first (stream_frag), their top-level fields merged.
 */
#ifndef OPLOG2PG_SOURCE_STREAM_EVENT_H
#define OPLOG2PG_SOURCE_STREAM_EVENT_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/op.h"

/* ---- resume tokens ---- */

#define STREAM_TOKEN_EVENT 128 /* tokenType of an event's token */
#define STREAM_TOKEN_HWM   0   /* tokenType of a high-water mark */

typedef struct stream_token {
    bool keystring;        /* _data decoded as a MongoDB KeyString token; false: opaque (the fields below unset) */
    uint32_t secs, inc;    /* clusterTime */
    int32_t version;       /* 0, 1 or 2 */
    int32_t type;          /* STREAM_TOKEN_EVENT, STREAM_TOKEN_HWM (version 0: STREAM_TOKEN_EVENT) */
    uint64_t txn_op_index; /* the event's index in its applyOps (0 otherwise) */
    bool from_invalidate;
    bool has_uuid;        /* the collection UUID is set (not null) */
    bool identifier_read; /* the eventIdentifier was read to its end (so has_fragment is known) */
    bool has_fragment;    /* fragmentNum present (the token of a fragment of a split event) */
    uint64_t fragment;
} stream_token;

/* Decodes KeyString bytes (a token's _data once unhexed). False when they are not a MongoDB resume token (out is then
 * zeroed: opaque). */
bool stream_token_decode_bytes(const uint8_t *data, size_t len, stream_token *out);
/* Decodes a token document {_data: "<hex>" | BinData, ...}. False when it is not a document with `_data`; true
 * otherwise, with out->keystring false for an opaque token. */
bool stream_token_decode(const uint8_t *doc, uint32_t len, stream_token *out);

/* Orders two decoded KeyString tokens as the server does (time, then the rest of the bytes): <0, 0, >0 on
 * (secs, inc, type, txn_op_index, fragment). Only for tokens with keystring set. */
int stream_token_cmp(const stream_token *a, const stream_token *b);

/* ---- events ---- */

typedef enum stream_ev_status {
    STREAM_EV_OK = 0,
    STREAM_EV_MALFORMED,   /* a field the event must have is missing or ill-typed */
    STREAM_EV_UNSUPPORTED, /* a valid event that cannot be turned into ops exactly (invalidate, unknown type, ...) */
    STREAM_EV_AMBIGUOUS,   /* an update whose paths cannot be read without disambiguatedPaths, and no post-image */
    STREAM_EV_NOMEM,
} stream_ev_status;

/* What the caller knows of the event, read once (pointers into the event). */
typedef struct stream_event_info {
    const char *type; /* operationType, "" when absent */
    bool has_time;    /* clusterTime present (a Timestamp) */
    uint32_t secs, inc;
    const uint8_t *token; /* _id (the resume token document), NULL when absent */
    uint32_t token_len;
    bool has_txn;     /* lsid and txnNumber present: a transaction's event */
    bool split;       /* splitEvent present */
    int32_t fragment; /* splitEvent.fragment, splitEvent.of (1-based) */
    int32_t of;
} stream_event_info;

/* Reads operationType, clusterTime, _id, lsid/txnNumber and splitEvent. False when the event is not valid BSON. */
bool stream_event_info_read(const bson_t *event, stream_event_info *out);

/* Writes into op (initialised by the caller, empty) the oplog-form op of one event: {op, ns, o, o2?}, ready to be one
 * op of an applyOps or, with ts added, a plain entry (see above). On an error, err gets one line naming the event
 * (operationType, ns, documentKey._id, clusterTime) and op is left in an unspecified state (destroy it). An update
 * takes rawUpdateDescription when the event has it, else its updateDescription. */
stream_ev_status stream_event_to_op(const bson_t *event, bson_t *op, char *err, size_t errlen);
/* The same; lookup: the stream asks fullDocument "updateLookup" ([mongodb] delete_reconcile): an event without
 * operationType (Azure Cosmos DB for MongoDB RU) is the document as the server looked it up, an upsert of it (a
 * delete when fullDocument is null), and fullDocument is never taken as an update's post-image (a lookup is the
 * document as it is now, not as the update left it). */
stream_ev_status stream_event_to_op_ex(const bson_t *event, bson_t *op, bool lookup, char *err, size_t errlen);

/* Rebuilds the $v:2 diff of an updateDescription: appends `$v: 2` and `diff` to o. Reads disambiguatedPaths when
 * present (see above); without it a path holding a dot is STREAM_EV_AMBIGUOUS (err names it). STREAM_EV_MALFORMED for
 * a description no diff gives (a path that is both a field and an array element, a removed array element, ...). */
stream_ev_status stream_updesc_to_diff(const bson_t *updesc, bson_t *o, char *err, size_t errlen);

/* ---- fragments of a split event ---- */

typedef struct stream_frag {
    bson_t merged; /* the fields seen so far (initialised while active) */
    bool active;
    int32_t next; /* the fragment expected next (1-based) */
    int32_t of;
} stream_frag;

void stream_frag_init(stream_frag *f);
void stream_frag_clear(stream_frag *f);
/* Adds a fragment (info read by stream_event_info_read). Returns STREAM_EV_OK and sets *done when the event is whole:
 * f->merged then holds it (every field of every fragment, `_id` the last fragment's token, splitEvent dropped), to be
 * read before the next call. A fragment out of order (not the one expected) is STREAM_EV_MALFORMED. */
stream_ev_status stream_frag_add(stream_frag *f, const bson_t *event, const stream_event_info *info, bool *done,
                                 char *err, size_t errlen);

/* ---- grouping ---- */

#define STREAM_PART_OPS   1000
#define STREAM_PART_BYTES (4u * 1024 * 1024)

/* The events of one clusterTime not yet handed on: their oplog-form ops and the token of the last. */
typedef struct stream_group {
    bool open;
    uint32_t secs, inc;
    bson_t ops;     /* an array document {"0": op, "1": op, ...} (initialised while open) */
    uint32_t n;     /* ops in `ops` */
    uint32_t done;  /* ops of this clusterTime already handed on in parts (op_entry.more) */
    uint8_t *token; /* the last event's token (malloc'd), NULL when none */
    uint32_t token_len;
    bool has_txn; /* some event carried lsid/txnNumber */
} stream_group;

void stream_group_init(stream_group *g);
/* Forgets everything, parts included. */
void stream_group_clear(stream_group *g);
/* Adds one op (from stream_event_to_op) of the event at secs:inc with its token; the group must be empty or at the
 * same clusterTime. False on OOM. */
bool stream_group_add(stream_group *g, uint32_t secs, uint32_t inc, const bson_t *one, const uint8_t *token,
                      uint32_t token_len, bool has_txn);
/* The group holds enough to be handed on as a part (STREAM_PART_OPS ops, or two ops or more of STREAM_PART_BYTES
 * bytes: one event alone is handed on whole). */
bool stream_group_full(const stream_group *g);
/* Whether a token seen after the group (the next event's, or a post-batch resume token) shows it complete: its
 * clusterTime is later than the group's. An opaque token tells nothing (false). */
bool stream_group_closes(const stream_group *g, const stream_token *t);

/* Builds the oplog entry of the group's ops (a plain entry for one op of a group never split, else an applyOps at
 * ns admin.$cmd), decodes it (decode_entry_ex with flags) into a new entry e: pos = the clusterTime (term -1), ops
 * numbered after those handed on before, more = !last, the token (a copy) on the last part only; a last part with no
 * ops left (all went in parts before the group closed) is one noop at the group's position. *raw receives the
 * synthetic oplog entry, which must outlive e while e borrows from it (DECODE_BORROW_PAYLOAD): destroy it after
 * rendering and op_entry_drop_payload. The group is emptied of its ops (kept open at its clusterTime unless last).
 * A decoder error: its status, err naming the clusterTime. */
typedef enum stream_build_status {
    STREAM_BUILD_OK = 0,
    STREAM_BUILD_MALFORMED,
    STREAM_BUILD_UNSUPPORTED,
    STREAM_BUILD_NOMEM,
} stream_build_status;
stream_build_status stream_group_build(stream_group *g, bool last, unsigned flags, op_entry *e, bson_t *raw, char *err,
                                       size_t errlen);

#endif

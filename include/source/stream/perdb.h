/*
 * perdb.h — the pure part of reading one change stream per database (where the server refuses the cluster-wide
 * stream): the events of every database's stream merged into one clusterTime order, and the composite resume token
 * that lets each stream resume after exactly what was handed on. No I/O; the reader thread (source/stream/stream.h)
 * reads the cursors and feeds each lane.
 *
 * Lanes. One lane per database, each a queue of the events its stream gave, in its order, and a horizon: the point
 * before which the stream has shown it holds nothing more (from its events and its post-batch resume tokens). A
 * high-water mark at T on a stream that has scanned past T shows everything up to T inclusive (the server moves the
 * mark to an entry's time only past that entry's events, plan_executor_pipeline.cpp); a mark where the stream was
 * just opened, or an event's token as the post-batch token (a batch cut by its size), shows only what is before T.
 *
 * Merge rule (as the router merges its shards' streams, mongodb/mongo document_source_merge_cursors /
 * async_results_merger.cpp, and as mongosim's cluster_stream.c does): the earliest head event, at T, is handed on only
 * when every other lane has shown it holds nothing before T (its head is at T or later, or its horizon is). Heads of
 * one clusterTime are ordered by their token's txnOpIndex, then by lane: the events of a transaction that spans two
 * databases share the commit's clusterTime and leave together, in the transaction's order. A group of one clusterTime
 * is whole once every lane has shown it holds nothing more at T (perdb_passed).
 *
 * Positions. Each lane keeps its resume point: the token of the last event handed on, or, once its queue is empty,
 * its last post-batch resume token (the change-streams specification's rule for the cached token), or, before either,
 * where it was opened. perdb_token writes all of them as one document {"perdb": {<db>: <token>, ...}}, the token an
 * entry carries (op_entry.token; core/ carries it without reading it); perdb_commit notes that what was handed on is
 * pushed, so a reopening resumes there. perdb_parse reads such a document back.
 */
#ifndef OPLOG2PG_SOURCE_STREAM_PERDB_H
#define OPLOG2PG_SOURCE_STREAM_PERDB_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One event held in a lane (a copy). */
typedef struct perdb_event {
    uint8_t *doc; /* the whole event (fragments joined) */
    uint32_t len;
    uint32_t secs, inc;
    uint64_t txn_op_index;
    uint8_t *token; /* its _id */
    uint32_t token_len;
    bool position_only; /* an invalidate: moves the lane's resume point (startAfter), hands on no op */
} perdb_event;

typedef struct perdb_lane {
    char *db;
    perdb_event *ev; /* ring of n events from head */
    size_t head, n, cap;
    bool shown; /* the horizon is known (a batch was read since the lane was opened) */
    uint32_t hsecs, hinc;
    bool hincl;    /* nothing at the horizon itself is still to come either */
    uint8_t *pbrt; /* the last post-batch resume token (NULL when none since opening) */
    uint32_t pbrt_len;
    uint8_t *cur; /* the resume point of what was handed on (NULL: the lane's start) */
    uint32_t cur_len;
    uint8_t *pushed; /* the resume point of what was pushed and may be committed (NULL: the lane's start) */
    uint32_t pushed_len;
} perdb_lane;

typedef struct perdb_merge {
    perdb_lane *lanes;
    size_t n;
} perdb_merge;

void perdb_init(perdb_merge *m);
void perdb_free(perdb_merge *m);
/* Adds a lane for database db (len bytes); its index is the count before. False on OOM. */
bool perdb_add_lane(perdb_merge *m, const char *db, size_t len);
/* The lane of database db, or -1. */
int perdb_find(const perdb_merge *m, const char *db);

/* Reads a composite token {"perdb": {<db>: <token doc>, ...}} and sets each named lane's resume point (pushed and
 * current); databases without a lane are ignored (left out of the filter). False when doc is not such a document;
 * *nomem on OOM. */
bool perdb_parse(perdb_merge *m, const uint8_t *doc, uint32_t len, bool *nomem);

/* The lane's stream is (re)opened: its queue and horizon are forgotten, its current resume point goes back to what
 * was pushed. False on OOM. */
bool perdb_lane_reset(perdb_merge *m, size_t lane);

/* The lane's resume point now: its last post-batch resume token once its queue is empty, else the token of the last
 * event handed on (*t NULL: none, the lane's start). */
void perdb_lane_point(const perdb_merge *m, size_t lane, const uint8_t **t, uint32_t *len);

/* Appends an event (copied) to a lane's queue. False on OOM. */
bool perdb_lane_add(perdb_merge *m, size_t lane, const uint8_t *doc, uint32_t len, uint32_t secs, uint32_t inc,
                    uint64_t txn_op_index, const uint8_t *token, uint32_t token_len, bool position_only);

/* The end of a batch of the lane: its post-batch resume token (copied; NULL when the server sent none) and the
 * horizon it shows (secs:inc, incl as above). has_time false: the token tells no time (opaque), the horizon stays.
 * False on OOM. */
bool perdb_lane_batch_end(perdb_merge *m, size_t lane, const uint8_t *pbrt, uint32_t pbrt_len, bool has_time,
                          uint32_t secs, uint32_t inc, bool incl);

typedef enum perdb_next_status {
    PERDB_READY, /* *lane's head may be handed on (perdb_head), then perdb_pop */
    PERDB_READ,  /* nothing may be handed on before *lane shows more: read its stream */
} perdb_next_status;

/* What to do next (see the merge rule). With no lanes: PERDB_READ with *lane 0 (the caller has none to read). */
perdb_next_status perdb_next(const perdb_merge *m, size_t *lane);
const perdb_event *perdb_head(const perdb_merge *m, size_t lane);
/* Drops the lane's head, its token becoming the lane's current resume point. */
void perdb_pop(perdb_merge *m, size_t lane);

/* Whether every lane has shown it holds nothing more at or before secs:inc. */
bool perdb_passed(const perdb_merge *m, uint32_t secs, uint32_t inc);
/* When every queue is empty and every lane's horizon known: the latest point every lane has shown complete
 * (*secs:*inc, everything up to it inclusive seen) and true; false otherwise. */
bool perdb_complete_to(const perdb_merge *m, uint32_t *secs, uint32_t *inc);

/* Writes {"perdb": {<db>: <resume point>, ...}} of the current resume points into out (initialised by the caller);
 * lanes with none are left out (they start at the entry's clusterTime on a restart). False on OOM. */
bool perdb_token(const perdb_merge *m, bson_t *out);
/* What was handed on is pushed: the current resume points become the pushed ones. False on OOM. */
bool perdb_commit(perdb_merge *m);

#endif

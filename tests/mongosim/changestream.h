/*
 * changestream.h — mongosim's change streams: `$changeStream` aggregates on a collection, a database or the whole
 * cluster, built from mongosim's own oplog as a 7.0 replica set builds them (events, resume tokens in the server's
 * KeyString layout, post-batch resume tokens, resume, the server's errors).
 *
 * The core (cs_open / cs_next_batch / cs_close) knows no sockets: it reads an oplog and a store through a cs_env,
 * so unit tests drive it directly. The wire glue (cs_cmd_*) is called from commands.c.
 */
#ifndef MONGOSIM_CHANGESTREAM_H
#define MONGOSIM_CHANGESTREAM_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "oplog.h"
#include "store.h"

/* What one batch may read. */
typedef struct {
    const sim_oplog *oplog;
    const sim_store *store; /* fullDocument: "updateLookup" reads the current document here (the majority data) */
    uint64_t visible_end;   /* the first oplog seq a majority read may not see yet */
    const struct sim_images *images; /* pre- and post-images (images.h); NULL: none kept */
    const char *refuse_stage;        /* a stage this server does not know (--refuse-stage), or NULL */
} cs_env;

typedef struct {
    int code;
    bool nonresumable; /* errorLabels: ["NonResumableChangeStreamError"] */
    char msg[1024];
} cs_error;

typedef struct cs_stream cs_stream;

/* Opens a stream on db.coll (coll NULL: the database db; cluster: every database, db must be "admin"). pipeline is
 * the aggregate's whole pipeline (a BSON array whose first stage is $changeStream). NULL with err set on refusal. */
cs_stream *cs_open(const cs_env *env, const char *db, const char *coll, const bson_t *pipeline, cs_error *err);
/* One batch: up to `batch` events (< 0: no count bound; 0: none, nothing read; 16 MB in all either way) appended to
 * `events` (an initialized, empty BSON array), and the post-batch resume token written into pbrt (initialized, empty):
 * the last event's token, or a high-water mark at the newest oplog entry scanned. *closed when the stream ended (an
 * invalidate was returned). False with err set when the server would fail the command. */
bool cs_next_batch(cs_stream *s, const cs_env *env, int64_t batch, bson_t *events, bson_t *pbrt, bool *closed,
                   cs_error *err);
void cs_close(cs_stream *s);
/* Makes s a shard's part of a stream a router merges (cluster_stream.c): a resume token's event is not looked for
 * here (the router does), and events from the token's clusterTime on are returned, the token's own included. */
void cs_merge_part(cs_stream *s);

/* ---- resume tokens (src/mongo/db/pipeline/resume_token.cpp) ---- */

#define CS_TOKEN_HWM   0   /* ResumeTokenData::kHighWaterMarkToken */
#define CS_TOKEN_EVENT 128 /* ResumeTokenData::kEventToken */

typedef struct {
    uint64_t ts;
    int version;
    int type;
    uint32_t txn_op;
    bool from_invalidate;
    bool has_uuid;
    uint8_t uuid[16];
    int32_t fragment; /* -1: none */
} cs_token_info;

#define CS_TYPEBITS_MAX 256

/* The uppercase hex _data of a version-2 token; event_id NULL for a high-water mark, fragment -1 for none. Free
 * with bson_free. cs_token_make also writes the token's _typeBits (empty when every bit is zero: *tblen 0) into tb
 * (CS_TYPEBITS_MAX bytes). */
char *cs_token_hex(uint64_t ts, int type, uint32_t txn_op, bool from_invalidate, const uint8_t *uuid,
                   const bson_t *event_id, int32_t fragment);
char *cs_token_make(uint64_t ts, int type, uint32_t txn_op, bool from_invalidate, const uint8_t *uuid,
                    const bson_t *event_id, int32_t fragment, uint8_t *tb, size_t *tblen);
/* Reads clusterTime, version, tokenType, txnOpIndex, fromInvalidate and UUID back from a token this module (or a
 * 7.0 server) made; false when hex is not such a token. */
bool cs_token_parse(const char *hex, cs_token_info *out);

#endif

/*
 * update.h — mongosim's update engine: applies a modifier update ($set, $setOnInsert, $unset, $inc, $mul, $min,
 * $max, $rename, $currentDate, $push with $each/$slice/$sort/$position, $addToSet with $each, $pop, $pull, $pullAll)
 * or a replacement to one document and produces both the new document and the oplog `o` a MongoDB server would log for
 * it ({$v: 2, diff} for 7.0, {$v: 1, $set, $unset} for 4.4, the full document for a replacement).
 *
 * Kept apart from store.c so the rules (MongoDB's UpdateNode / V1LogBuilder / V2LogBuilder behaviour) can be unit
 * tested on bare documents. Errors carry MongoDB server codes in bson_error_t.code.
 */
#ifndef MONGOSIM_UPDATE_H
#define MONGOSIM_UPDATE_H

#include "store.h"

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

/* True if u is a modifier document (its first field starts with '$'), false for a replacement. */
bool update_is_modifier(const bson_t *u);

/*
 * Apply u to doc. On success *changed says whether the document changed; if it did, new_doc receives the new
 * document and o the oplog `o` field in `format` (both initialised here: the caller destroys them only when
 * *changed is true). With `inserting` (an upsert inserting doc), $setOnInsert applies and o is not produced
 * (the caller logs an 'i' entry with new_doc). On failure nothing is initialised and err holds the server code.
 */
bool update_apply(const bson_t *doc, const bson_t *u, sim_oplog_format format, bool inserting, bson_t *new_doc,
                  bson_t *o, bool *changed, bson_error_t *err);

/*
 * The clock $currentDate reads: date_ms gives milliseconds since the epoch ({$type: "date"} or true), timestamp a
 * BSON Timestamp packed as (seconds << 32) | increment ({$type: "timestamp"}). Process-wide; NULL restores the
 * default (CLOCK_REALTIME, and Timestamp(now, n) with n counting up within each second). For tests.
 */
typedef struct {
    int64_t (*date_ms)(void *ctx);
    uint64_t (*timestamp)(void *ctx);
    void *ctx;
} update_clock;
void update_set_clock(const update_clock *clock);

/* MongoDB's BSON comparison order for two values (<0, 0, >0); numbers compare by value across types. */
int update_compare_values(const bson_value_t *a, const bson_value_t *b);
int update_compare_iters(const bson_iter_t *a, const bson_iter_t *b);

/* MongoDB's canonical rank of a BSON type (canonicalizeBSONType, src/mongo/bson/bsontypes.h): the first key of the
 * comparison order (numbers share one rank), also hashed into a hashed index's value. */
int update_type_rank(bson_type_t t);

/* The name the server gives a BSON type in its messages ($type aliases: "double", "string", "objectId", ...). */
const char *sim_type_name(bson_type_t t);

#endif

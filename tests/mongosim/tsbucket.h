/*
 * tsbucket.h — mongosim's time-series bucket catalog: which bucket each measurement inserted into a time-series
 * collection goes to, and the bucket writes (a new bucket's document, or a `$v:2` diff appending to an open one) a
 * server commits for one insert command (see tsbucket.c for the server sources of each rule).
 *
 * The catalog keeps the open buckets of every buckets collection (keyed by the collection's UUID and the measurement's
 * normalized meta value). It knows no store: the caller hands it a lookup of a bucket's current document, and a bucket
 * whose stored document is no longer the one the catalog wrote last (deleted, updated by someone else, the collection
 * dropped) is forgotten, as a server clears a bucket from its catalog on a direct write to it.
 */
#ifndef MONGOSIM_TSBUCKET_H
#define MONGOSIM_TSBUCKET_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

typedef struct ts_catalog ts_catalog;

/* The server's startup parameter timeseriesBucketMaxCount (timeseries/timeseries.idl): 1000. */
#define TS_DEFAULT_BUCKET_MAX_COUNT 1000
/* timeseriesBucketMaxSize (timeseries.idl): 125 KiB. */
#define TS_BUCKET_MAX_SIZE (125 * 1024)

ts_catalog *ts_catalog_new(void);
void ts_catalog_free(ts_catalog *cat);

/* One write to the buckets collection. insert: `doc` is the new bucket. Otherwise `o` is the update's o
 * ({$v: 2, diff} or a whole replacement document) and `doc` the bucket after it; `id` its _id. */
typedef struct {
    bool insert;
    bson_oid_t id;
    bson_t *doc;
    bson_t *o;
    int32_t *stmt_ids; /* indexes in the command of the measurements it carries (their stmtIds), batch order */
    size_t nstmt;      /* 0: a compression, no statement of the command (kUninitializedStmtId) */
} ts_write;

void ts_writes_free(ts_write *w, size_t n);

/* The current document of bucket `id`, or NULL when it is gone. */
typedef const bson_t *(*ts_lookup_fn)(void *ctx, const bson_oid_t *id);

/* Places the measurements ms[0..n) of one insert command into buckets of the buckets collection `uuid` whose
 * options are `timeseries`, and returns in *writes and *nw the writes that commit them (in the order the server commits
 * them). errs[i] is set (code != 0) for a measurement refused (no valid time field); with ordered, the measurements
 * after the first refused one are not placed (*placed counts those considered). max_count: timeseriesBucketMaxCount. */
bool ts_catalog_insert(ts_catalog *cat, const uint8_t uuid[16], const bson_t *timeseries, sim_oplog_format fmt,
                       int32_t max_count, const bson_t *const *ms, size_t n, bool ordered, ts_lookup_fn lookup,
                       void *lookup_ctx, ts_write **writes, size_t *nw, bson_error_t *errs, size_t *placed);

/* Deletes and updates of measurements (timeseries_write_util.cpp makeModificationOp, performAtomicWrites):
 * ts_bucket_measurements gives the measurements of a stored bucket in column order (copies: ts_measurements_free):
 * the catalog's record of the bucket when it wrote this very document (mongosim has no BSONColumn decoder), else a
 * version 1 bucket unpacked; false when neither. ts_catalog_rebuild returns the bucket the given measurements make
 * under _id id (version 1, or compressed on 8.0) and records it; ts_catalog_forget drops a deleted bucket;
 * ts_catalog_adopt moves what a side catalog (new buckets for updated measurements) wrote into cat. A bucket
 * touched by these leaves the open buckets. */
bool ts_bucket_measurements(ts_catalog *cat, const bson_t *timeseries, const bson_t *doc, bson_t ***out, size_t *n);
void ts_measurements_free(bson_t **ms, size_t n);
bson_t *ts_catalog_rebuild(ts_catalog *cat, const bson_t *timeseries, sim_oplog_format fmt, const bson_oid_t *id,
                           bson_t *const *ms, size_t n);
void ts_catalog_forget(ts_catalog *cat, const bson_oid_t *id);
void ts_catalog_adopt(ts_catalog *cat, ts_catalog *side);

#endif

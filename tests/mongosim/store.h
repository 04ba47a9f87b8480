/*
 * store.h — mongosim's data engine: databases, collections and documents, and the oplog entry bodies writes produce.
 *
 * The store knows nothing of sockets, cursors or timestamps. Every write that changes data hands the body of the
 * oplog entry a MongoDB server would write for it to the caller's `emit` callback, in the server's field order
 * (op, ns, ui, o[, o2]); the caller (oplog.c) appends ts, t, v and wall, or collects bodies into an applyOps entry for
 * a transaction. One write may emit several bodies (a create before the first insert into a new collection, one drop
 * per collection before a dropDatabase).
 *
 * Errors are reported in a bson_error_t whose `code` is the MongoDB server error code (11000 DuplicateKey,
 * 26 NamespaceNotFound, 48 NamespaceExists, 2 BadValue, 9 FailedToParse, 14 TypeMismatch, ...), so the wire layer can
 * pass it to the client as `{ok: 0, code, codeName, errmsg}`; store_code_name() gives the codeName.
 *
 * Not thread-safe: mongosim runs one event loop.
 */
#ifndef MONGOSIM_STORE_H
#define MONGOSIM_STORE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct sim_store sim_store;

/* Which server's oplog shapes writes produce. */
typedef enum {
    SIM_FORMAT_70, /* MongoDB 7.0: updates as {$v: 2, diff: ...} */
    SIM_FORMAT_44, /* MongoDB 4.4: updates as {$v: 1, $set: ..., $unset: ...} */
    SIM_FORMAT_50, /* MongoDB 5.0: 7.0's shapes, but time-series buckets stay version 1 (tsbucket.c) */
    SIM_FORMAT_80, /* MongoDB 8.0: 7.0's shapes, time-series buckets compressed from the start (tsbucket.c) */
} sim_oplog_format;

/* hello's maxWireVersion for a format (db/wire_version.h: 4.4 = 9, 5.0 = 13, 8.0 = 25; mongosim's 7.0 has always
 * answered 17, the 6.0 value, and keeps it). */
static inline int32_t sim_max_wire_version(sim_oplog_format f)
{
    return f == SIM_FORMAT_44 ? 9 : f == SIM_FORMAT_50 ? 13 : f == SIM_FORMAT_80 ? 25 : 17;
}

/* Which server mongosim plays (--flavor; flavor.c): MongoDB itself, or one that differs. */
typedef enum {
    SIM_FLAVOR_MONGODB,
    SIM_FLAVOR_ATLAS_SHARED, /* Atlas M0 / Flex: local.oplog.rs only with an equality on ns */
    SIM_FLAVOR_DOCUMENTDB,   /* Amazon DocumentDB */
    SIM_FLAVOR_COSMOS,       /* Azure Cosmos DB for MongoDB (RU) */
} sim_flavor;

/* Receives one oplog entry body (op, ns, ui, o[, o2]); the callee copies what it keeps. */
typedef void (*store_emit_fn)(void *ctx, const bson_t *body);

typedef struct {
    int64_t matched;  /* documents matched by the query */
    int64_t modified; /* documents actually changed (a no-op update matches but does not modify, and logs nothing) */
    bool upserted;    /* a document was inserted by upsert; its _id is in upserted_id */
    bson_value_t upserted_id; /* owned by the result: free with store_update_result_clear() */
} sim_update_result;

sim_store *store_new(sim_oplog_format format);

/* A shard of a simulated sharded cluster (cluster.c). uuid_fn gives a collection created on this shard its
 * cluster-wide UUID (true) or lets the store pick one (false); key_fn writes into out (uninitialized) the document
 * key that update o2 and delete o carry: the shard key fields, then _id (true), or leaves the store's {_id} (false). */
typedef bool (*store_uuid_fn)(void *ctx, const char *db, const char *coll, uint8_t uuid[16]);
typedef bool (*store_doc_key_fn)(void *ctx, const char *db, const char *coll, const bson_t *doc, bson_t *out);
void store_set_shard_hooks(sim_store *store, store_uuid_fn uuid_fn, store_doc_key_fn key_fn, void *ctx);
void store_free(sim_store *store);
/* A deep copy (same collections, UUIDs and documents): mongosim's snapshot at the majority commit point. */
sim_store *store_clone(const sim_store *store);
sim_oplog_format store_format(const sim_store *store);

/* Writes. db/coll are names (no dots in db). Each returns false and fills err on failure, having emitted nothing. */

/* Insert one document; adds an ObjectId _id first if it has none. Creates the collection (emitting its create
 * entry first) if it does not exist. */
/* Before each write of store_insert_many: the indexes in the command of the documents it writes (their stmtIds; a
 * bucket write may carry several); n == 0 for a write that is no statement of the command (kUninitializedStmtId). */
typedef void (*store_stmt_fn)(void *ctx, const int32_t *ids, size_t n);
/* The documents of one insert command. Into a time-series collection the measurements are bucketed together (one
 * write per bucket: tsbucket.c); elsewhere each is store_insert'ed. errs[i].code != 0 for a refused document i; with
 * ordered, nothing after the first refused one is written. *placed: the documents considered. */
bool store_insert_many(sim_store *store, const char *db, const char *coll, const bson_t *const *docs, size_t n,
                       bool ordered, store_emit_fn emit, store_stmt_fn stmt, void *ctx, bson_error_t *errs,
                       size_t *placed);
/* Deletes and updates sent to a time-series collection (the shapes per --oplog-format: store.c). group(ctx, true)
 * and group(ctx, false) surround the writes a server makes atomically (one applyOps outside a retryable write). */
typedef void (*store_group_fn)(void *ctx, bool begin);
bool store_ts_delete(sim_store *store, const char *db, const char *coll, const bson_t *q, int limit, int64_t *deleted,
                     store_emit_fn emit, void *ctx, bson_error_t *err);
bool store_ts_update(sim_store *store, const char *db, const char *coll, const bson_t *q, const bson_t *u, bool multi,
                     bool upsert, sim_update_result *res, store_emit_fn emit, store_group_fn group, store_stmt_fn stmt,
                     void *ctx, bson_error_t *err);
/* The server's startup parameter timeseriesBucketMaxCount (--timeseries-bucket-max-count; 0: 1000). */
void store_set_ts_bucket_max_count(sim_store *store, int32_t n);
/* --timeseries-viewless: a create with `timeseries` makes a viewless time-series collection (README "Viewless
 * time-series collections"); store_ts_viewless says whether it is on. */
void store_set_ts_viewless(sim_store *store, bool on);
bool store_ts_viewless(const sim_store *store);
bool store_insert(sim_store *store, const char *db, const char *coll, const bson_t *doc, store_emit_fn emit, void *ctx,
                  bson_error_t *err);

/* Update the document whose _id equals the query's _id (q is {_id: X}; other query shapes are BadValue).
 * u is either a modifier document ($set, $unset, $inc, $push) or a replacement. With upsert and no match, inserts
 * (logged as an 'i' entry, as a real server does). */
bool store_update(sim_store *store, const char *db, const char *coll, const bson_t *q, const bson_t *u, bool upsert,
                  sim_update_result *res, store_emit_fn emit, void *ctx, bson_error_t *err);
void store_update_result_clear(sim_update_result *res);

/* Delete by _id (q is {_id: X}) or, with an empty q, every document (limit 0) or the first one (limit 1).
 * *deleted gets the count. */
bool store_delete(sim_store *store, const char *db, const char *coll, const bson_t *q, int limit, int64_t *deleted,
                  store_emit_fn emit, void *ctx, bson_error_t *err);

/* DDL. create fails with 48 if the collection exists; drop of a missing collection succeeds and emits nothing (as
 * a real server answers ns not found but writes nothing — the wire layer decides the reply from *existed). */
bool store_create(sim_store *store, const char *db, const char *coll, store_emit_fn emit, void *ctx, bson_error_t *err);
/* The same with the create command's options (cmd is the whole command, {create: coll, ...}; NULL for none),
 * validated and logged as a 7.0 server does (ddl.c): capped/size/max, validator/validationLevel/validationAction,
 * clusteredIndex, expireAfterSeconds go into the create entry; viewOn/pipeline make a view (an insert into
 * db.system.views, created first when missing); timeseries makes a time-series collection (a create of
 * db.system.buckets.coll, its default index when there is a metaField, then the view). */
bool store_create_cmd(sim_store *store, const char *db, const char *coll, const bson_t *cmd, store_emit_fn emit,
                      void *ctx, bson_error_t *err);

/* What a name is. Views and time-series collections are definitions in db.system.views: store_insert into a
 * time-series collection writes a bucket into db.system.buckets.coll (one per measurement); other writes on views
 * fail (166 for a view, 2 BadValue for a time-series collection); store_find on a view finds nothing. */
typedef enum {
    STORE_NS_NONE,
    STORE_NS_COLLECTION,
    STORE_NS_VIEW,
    STORE_NS_TIMESERIES,
} store_ns_kind;
store_ns_kind store_ns_kind_of(const sim_store *store, const char *db, const char *coll);
/* collMod {changeStreamPreAndPostImages: {enabled}}: sets or clears the option and logs the collMod entry. 26 when
 * db.coll is not a collection. */
bool store_coll_mod_images(sim_store *store, const char *db, const char *coll, bool enabled, store_emit_fn emit,
                           void *ctx, bson_error_t *err);
/* Receives, for each update (replace included) and delete of a collection with changeStreamPreAndPostImages
 * enabled, the entry body just before emit gets it, the document before the write and after it (NULL for a
 * delete). The callee copies what it keeps. */
typedef void (*store_image_fn)(void *ctx, const bson_t *body, const bson_t *pre, const bson_t *post);
void store_set_image_hook(sim_store *store, store_image_fn fn, void *ctx);
bool store_drop(sim_store *store, const char *db, const char *coll, bool *existed, store_emit_fn emit, void *ctx,
                bson_error_t *err);
bool store_rename(sim_store *store, const char *from_db, const char *from_coll, const char *to_db, const char *to_coll,
                  bool drop_target, store_emit_fn emit, void *ctx, bson_error_t *err);
bool store_drop_database(sim_store *store, const char *db, store_emit_fn emit, void *ctx, bson_error_t *err);

/* Reads. */

/* Calls fn for each document of db.coll in _id order that matches filter (empty filter, or {_id: X}, or
 * {_id: {$gt|$gte|$lt|$lte: X}} combinations); fn returns false to stop. A missing collection yields nothing. */
typedef bool (*store_doc_fn)(void *ctx, const bson_t *doc);
void store_find(const sim_store *store, const char *db, const char *coll, const bson_t *filter, store_doc_fn fn,
                void *ctx);
/* The same, continuing strictly after _id `after` in BSON order (a cursor's later batches). */
void store_find_after(const sim_store *store, const char *db, const char *coll, const bson_t *filter,
                      const bson_value_t *after, store_doc_fn fn, void *ctx);
int64_t store_count(const sim_store *store, const char *db, const char *coll);
/* The UUID of collection db.coll in uuid; false when there is no such collection (a view has none either). */
bool store_collection_uuid(const sim_store *store, const char *db, const char *coll, uint8_t uuid[16]);

/* (Added by the store's author.) True if store_find understands filter; otherwise fills err (code 2 BadValue) so
 * the wire layer can reject the query instead of returning nothing. fn passed to store_find must not write to the
 * store. */
bool store_filter_supported(const bson_t *filter, bson_error_t *err);

/* Names, sorted. fn gets each name; for collections also the collection's UUID (16 bytes). */
typedef void (*store_name_fn)(void *ctx, const char *name, const uint8_t *uuid);
void store_list_databases(const sim_store *store, store_name_fn fn, void *ctx);
void store_list_collections(const sim_store *store, const char *db, store_name_fn fn, void *ctx);
/* Every namespace of db (collections, views, time-series collections) as listCollections describes it, by name. */
typedef struct {
    const char *name;
    const char *type;      /* "collection", "view" or "timeseries" */
    const uint8_t *uuid;   /* 16 bytes; NULL for views and time-series collections */
    const bson_t *options; /* never NULL */
    bool id_index;         /* the collection has an _id index (not clustered, not a view) */
    bool read_only;        /* info.readOnly: true for views */
} store_ns_info;
typedef void (*store_ns_fn)(void *ctx, const store_ns_info *ns);
void store_list_namespaces(const sim_store *store, const char *db, store_ns_fn fn, void *ctx);

/* Loading and saving in mongodump's layout: DIR/<db>/<coll>.bson, concatenated BSON documents, and, for a collection
 * with options, DIR/<db>/<coll>.metadata.json {"options": {...}} (Extended JSON, as mongodump writes it). load adds
 * the collections found (emitting nothing: they are initial data, not writes); save writes every collection. */
bool store_load_dir(sim_store *store, const char *dir, bson_error_t *err);
bool store_save_dir(const sim_store *store, const char *dir, bson_error_t *err);

/* The codeName a server gives an error code ("DuplicateKey" for 11000), or "UnknownError". */
const char *store_code_name(int code);

#endif

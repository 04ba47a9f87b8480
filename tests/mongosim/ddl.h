/*
 * ddl.h — collection options, views and time-series collections as a MongoDB 7.0 server defines them, for mongosim's
 * store: what a `create` command's options become (the `o` of its oplog entry and listCollections' `options`), the
 * definition of a view, and the bucket document a time-series measurement is written as. Pure BSON work: no store,
 * no oplog. Not for use outside tests/mongosim (and its unit tests).
 *
 * Errors carry the server's codes in bson_error_t.code, as store.h describes.
 */
#ifndef MONGOSIM_DDL_H
#define MONGOSIM_DDL_H

#include <bson/bson.h>
#include <stdbool.h>

typedef enum {
    DDL_COLLECTION, /* a collection, with or without options */
    DDL_VIEW,       /* viewOn (+ pipeline) */
    DDL_TIMESERIES, /* timeseries: a buckets collection and a view on it */
} ddl_kind;

typedef struct {
    ddl_kind kind;
    /* DDL_COLLECTION: the collection's options; DDL_TIMESERIES: the buckets collection's. In the order
     * CollectionOptions::appendBSON writes them, as the create entry carries them after `create`. */
    bson_t options;
    bool clustered; /* clusteredIndex: the collection has no _id index (and its create entry no idIndex) */
    /* DDL_VIEW / DDL_TIMESERIES: the view's source collection (in the same database) and its pipeline (an array). */
    char view_on[256];
    bson_t pipeline;
    /* DDL_TIMESERIES with a metaField: the index 7.0 builds on the buckets collection at once,
     * {v, key, name} as its createIndexes entry carries it after `createIndexes`. */
    bool has_index;
    bson_t index;
} ddl_create;

/* Parses a create command (its first field names the collection, `coll`; db is the database) into *out, validating
 * the options as a 7.0 server does. Generic arguments (writeConcern, lsid, $db, ...) are skipped. On false, *out
 * holds nothing to clear. Options a server accepts but mongosim does not model (collation, storageEngine, ...) fail
 * with 2 BadValue naming them. */
bool ddl_parse_create(const bson_t *cmd, const char *db, const char *coll, ddl_create *out, bson_error_t *err);
void ddl_create_clear(ddl_create *c);

/* The `timeseries` sub-document of a buckets collection's options; false when there is none. */
bool ddl_timeseries_of(const bson_t *options, bson_t *timeseries);

/* changeStreamPreAndPostImages: parse the option's value {enabled: bool} (false and err on a bad one), append it to
 * a collection's options, and whether a collection's options have it enabled. */
bool ddl_images_option(const bson_iter_t *it, bool *enabled, bson_error_t *err);
void ddl_append_images(bson_t *options, bool enabled);
bool ddl_images_enabled(const bson_t *options);

#endif

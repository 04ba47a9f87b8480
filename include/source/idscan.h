/*
 * idscan.h — every _id of a collection, read from MongoDB in _id order (the delete reconciliation's MongoDB side:
 * docs/sources.md, "Azure Cosmos DB for MongoDB (RU)").
 *
 * A find with an empty filter, projection {_id: 1}, sorted by _id, in batches of IDSCAN_BATCH: the server walks its
 * _id index, so a document that exists from the scan's start to its end is returned exactly once, whatever writes
 * happen meanwhile (an _id never changes, so its index key never moves past the cursor). A document inserted or
 * deleted while the scan runs may or may not be returned. The read concern is majority unless [mongodb]
 * read_concern = local, as for the initial copy.
 */
#ifndef OPLOG2PG_SOURCE_IDSCAN_H
#define OPLOG2PG_SOURCE_IDSCAN_H

#include <mongoc/mongoc.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define IDSCAN_BATCH 10000

/* Called with each _id; false stops the scan (the caller's reason: idscan_collection then returns APPLY_OK with
 * *stopped set). */
typedef bool (*idscan_fn)(void *arg, const bson_value_t *id);
/* Called every IDSCAN_BATCH ids; false stops the scan (a stop request: APPLY_RETRY, "stopping"). May be NULL. */
typedef bool (*idscan_tick_fn)(void *arg);

typedef struct {
    bool majority;       /* readConcern majority */
    idscan_tick_fn tick; /* may be NULL */
    void *tick_arg;
} idscan_opts;

/* Every _id of db.coll to each(). APPLY_OK when the scan ended (*n ids seen; *stopped when each() stopped it);
 * APPLY_CONFIG when MongoDB refused it (a missing privilege); APPLY_RETRY for anything a later attempt may cure.
 * why says what failed. A document without an _id (none can exist in a collection) ends the scan with APPLY_RETRY. */
apply_status idscan_collection(mongoc_client_t *client, const char *db, const char *coll, const idscan_opts *o,
                               idscan_fn each, void *arg, uint64_t *n, bool *stopped, char *why, size_t whylen);

#endif

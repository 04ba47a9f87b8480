/*
 * reconcile.h — the delete reconciliation's PostgreSQL side: the rows of a table whose _id MongoDB no longer holds,
 * deleted by an anti-join (docs/sources.md, "Azure Cosmos DB for MongoDB (RU)"; the reasoning in src/sink/reconcile.c).
 *
 * The sink never talks to MongoDB: the daemon lends it a function that passes every _id of a collection, in one
 * scan, to the callback the sink gives it (as sink_config.read_docs lends the documents to the backfill).
 */
#ifndef OPLOG2PG_SINK_RECONCILE_H
#define OPLOG2PG_SINK_RECONCILE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "sink/pg.h"

/* Takes one _id; false stops the scan (the sink met a failure of its own: its error says which). */
typedef bool (*sink_id_fn)(void *arg, const bson_value_t *id);
/* Passes every _id of db.coll to each(). APPLY_OK when the scan ended; otherwise why says what failed
 * (APPLY_RETRY: a later attempt may succeed; APPLY_CONFIG: a person must act). */
typedef apply_status (*sink_id_scan_fn)(void *ctx, const char *db, const char *coll, sink_id_fn each, void *arg,
                                        char *why, size_t whylen);
/* Whether the namespace is replicated now ([replication] include/exclude). */
typedef bool (*sink_ns_included_fn)(void *ctx, const char *db, const char *coll);

typedef struct {
    uint64_t tables;          /* tables reconciled */
    uint64_t scanned;         /* _ids read from MongoDB */
    uint64_t deleted;         /* rows deleted */
    apply_status scan_status; /* APPLY_OK, or what the first failed scan returned (the sink itself is then fine) */
    char scan_why[512];
} sink_reconcile_result;

/* Reconciles every table of this service's catalog that holds an included collection in the jsonb shape (_id, doc):
 * per table, one transaction that reads the collection's _ids into a temporary table by COPY and deletes the rows
 * whose _id is not among them. Only between flush groups (nothing pending, no transaction open).
 * A scan that fails rolls its table's transaction back and stops the pass: scan_status and scan_why say why, and
 * the call still returns APPLY_OK (the sink is fine; the daemon tries again at the next interval). Any other
 * failure is the sink's (sink_error), as for a group. */
sink_status sink_reconcile_deletes(sink *s, sink_ns_included_fn included, sink_id_scan_fn scan, void *ctx,
                                   sink_reconcile_result *out);

#endif

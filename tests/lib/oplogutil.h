/*
 * oplogutil.h — where the source's oplog ends and where a service's checkpoint stands: the two numbers every
 * end-to-end test and benchmark compares to decide that the daemon has caught up.
 *
 * Positions are packed as (seconds << 32 | increment), which orders like the BSON Timestamp.
 */
#ifndef OPLOG2PG_TESTS_OPLOGUTIL_H
#define OPLOG2PG_TESTS_OPLOGUTIL_H

#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <stdbool.h>
#include <stdint.h>

/* The newest oplog entry's ts (find sorted {$natural: -1}, limit 1); 0 when the oplog is empty. False with err set
 * when the read fails. */
bool oplogutil_newest_ts(mongoc_client_t *client, uint64_t *ts, bson_error_t *err);

/* The service's committed checkpoint (oplog2pg.checkpoint); 0 when it has none or the table does not exist yet. */
uint64_t oplogutil_checkpoint_ts(PGconn *pg, const char *service);

/* True when the server answers buildInfo with mongosim: true (its test commands and faults are available). */
bool oplogutil_is_mongosim(mongoc_client_t *client);

#endif

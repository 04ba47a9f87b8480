/*
 * batcher_pg.h — the PostgreSQL sink behind the batcher's interface (core/batcher.h).
 *
 * Insert runs are sink_batch objects (binary COPY tuples); updates, deletes and DDL go to the matching sink calls.
 * An op that reached the sink without its text prepared (tests, tools) is rendered here; one that cannot be
 * rendered is refused as data, with the reason.
 */
#ifndef OPLOG2PG_SINK_BATCHER_PG_H
#define OPLOG2PG_SINK_BATCHER_PG_H

#include "core/batcher.h"
#include "sink/pg.h"

/* Careful mode sets refused ops aside (sink_dead_letter)... */
batcher_sink batcher_sink_pg(sink *s);
/* ... or, for [replication] on_error = stop, names the refused op and fails there (sink_refused). */
batcher_sink batcher_sink_pg_stop(sink *s);

#endif

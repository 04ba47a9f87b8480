/*
 * oplog_edge.h — the oldest or the newest entry of local.oplog.rs: where a copy starts, how wide the oplog window
 * is, whether a resume point is still there. One short find ({$natural: ±1}, limit 1) on any libmongoc client; the
 * one place oplog2pg asks for them.
 */
#ifndef OPLOG2PG_SOURCE_OPLOG_EDGE_H
#define OPLOG2PG_SOURCE_OPLOG_EDGE_H

#include <mongoc/mongoc.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/op.h"
#include "source/mongo_client.h"

/* natural 1: the oldest entry, -1: the newest. *found is false when the oplog is empty. False with a message in err
 * when the read fails. The term is -1 when the entry has none. */
bool oplog_edge(mongoc_client_t *client, int natural, op_pos *out, bool *found, char *err, size_t errlen);

/* The newest entry strictly before pos (*found false when there is none). */
bool oplog_entry_before(mongoc_client_t *client, const op_pos *pos, op_pos *out, bool *found, char *err, size_t errlen);

/* The newest entry, or with majority the newest a majority of the replica set has committed (readConcern
 * majority): where a copy or --skip-import starts in [mongodb] read_concern = majority. */
bool oplog_newest_committed(mongoc_client_t *client, bool majority, op_pos *out, bool *found, char *err, size_t errlen);

/* Whether an entry after `after`, up to and including `upto`, renames a collection (a renameCollection command,
 * alone or inside an applyOps): *renamed. One forward read of that stretch, from the primary's own oplog (not a
 * majority snapshot: a listing of collections may show a rename a majority has not committed yet). */
bool oplog_renames_between(mongoc_client_t *client, const op_pos *after, const op_pos *upto, bool *renamed, char *err,
                           size_t errlen);

/* Both edges, over a client of its own made from uri (for the commands). *found is false when the oplog is empty. */
bool oplog_window(const char *uri, op_pos *oldest, op_pos *newest, bool *found, char *err, size_t errlen);
/* The same with the client's options given (the daemon's periodic probe: its own appname and short timeouts). */
bool oplog_window_with(const char *uri, const mongo_client_opts *opts, op_pos *oldest, op_pos *newest, bool *found,
                       char *err, size_t errlen);

#endif

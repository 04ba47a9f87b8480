/*
 * window_probe.h — the oplog window the metrics show (oplog2pg_oplog_window_seconds, oplog2pg_oplog_margin_seconds),
 * read now and then by a thread of its own so that the apply loop never waits on MongoDB for it.
 *
 * The loop says which oplogs to read (window_probe_set_targets: the replica set's, or each shard's of a sharded
 * cluster, none with a change stream) and picks up the last edges read (window_probe_get). The thread reads the
 * oldest and the newest entry of each oplog every interval, each time over a client of its own with short timeouts
 * (source/oplog_edge.h's oplog_window_with). A target whose last read failed has no edges: the metric is absent.
 */
#ifndef OPLOG2PG_DAEMON_WINDOW_PROBE_H
#define OPLOG2PG_DAEMON_WINDOW_PROBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/op.h"

typedef struct window_probe window_probe;

/* Starts the thread; it reads every interval_ms. NULL when out of memory or no thread could be made. */
window_probe *window_probe_start(int64_t interval_ms);
/* Stops and joins the thread (a read under way ends first: at most its client's timeouts) and frees everything.
 * NULL is fine. */
void window_probe_stop(window_probe *w);

/* The oplogs to read: n of them, ids[i] ("" for a replica set, a shard's id otherwise) read through uris[i]. The
 * same list as before changes nothing; another one drops the edges read so far and wakes the thread. Copied. */
void window_probe_set_targets(window_probe *w, const char *const *ids, const char *const *uris, size_t n);
/* The edges last read from the oplog of that id: false when there are none (never read yet, the last read failed,
 * the oplog is empty, or no such target). */
bool window_probe_get(window_probe *w, const char *id, op_pos *oldest, op_pos *newest);

#endif

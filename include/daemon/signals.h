/*
 * signals.h — SIGTERM, SIGINT and SIGHUP in every state of the process.
 *
 * signals_init blocks the three signals in the calling thread before any other thread exists (every later thread
 * inherits the mask) and opens a signalfd for them, so no signal is ever lost to a thread that cannot handle it and
 * no handler runs work: whoever is in charge at the moment — the libev loop (an ev_io on signals_fd), a reconnect
 * backoff, the initial copy's coordinator, a wait on PostgreSQL — calls signals_poll, and the flags it sets are
 * acted on where that is safe:
 *   - the first SIGTERM or SIGINT sets a sticky stop request (what stopping means depends on the state: commit what
 *     was read, stop the copy after its current batches, or just exit);
 *   - a second one exits at once (_exit(1)), which is safe because every commit is atomic;
 *   - SIGHUP sets a reload request, taken once by signals_take_reload.
 */
#ifndef OPLOG2PG_DAEMON_SIGNALS_H
#define OPLOG2PG_DAEMON_SIGNALS_H

#include <stdbool.h>
#include <stdint.h>

/* Blocks the signals and opens the signalfd. Call from main() before any thread starts. False (errno) on failure. */
bool signals_init(void);
/* The signalfd (-1 before signals_init). */
int signals_fd(void);
/* Reads whatever signals are pending, without waiting, and updates the flags. May not return (second stop). */
void signals_poll(void);
/* Waits up to ms for a signal (or the timeout), then polls. False when a stop has been requested. */
bool signals_nap(uint64_t ms);
/* Sticky: a stop was requested. */
bool signals_stop_requested(void);
/* True once per SIGHUP received since the last call. */
bool signals_take_reload(void);

#endif

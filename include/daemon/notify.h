/*
 * notify.h — telling the service manager how the daemon is doing, with libsystemd's sd_notify protocol.
 *
 * Under systemd (Type=notify) NOTIFY_SOCKET names a datagram socket; elsewhere every call here does nothing, so the
 * daemon calls them unconditionally. What it sends:
 *   READY=1      once PostgreSQL is connected, the checkpoint read (and any initial copy done) and the oplog cursor
 *                has answered: from then on `systemctl start` returns and dependent units may start;
 *   STATUS=...   one line saying what it is doing ("tailing: 0.2 s behind ...", "copying: 45% ...",
 *                "reconnecting to PostgreSQL: ..."), shown by `systemctl status`; sent only when it changed;
 *   WATCHDOG=1   every quarter of the WatchdogSec interval, from the loop that does the work (so a stuck loop is
 * restarted); RELOADING=1  on SIGHUP, then READY=1 when the configuration is applied; STOPPING=1   when a stop begins
 * (the final flush follows). All calls come from the main thread.
 */
#ifndef OPLOG2PG_DAEMON_NOTIFY_H
#define OPLOG2PG_DAEMON_NOTIFY_H

#include <stdbool.h>
#include <stdint.h>

/* Reads NOTIFY_SOCKET and WATCHDOG_USEC (only when WATCHDOG_PID, if set, is this process). */
void notify_init(void);
/* The watchdog interval in microseconds (0 = no watchdog). */
uint64_t notify_watchdog_usec(void);

void notify_ready(void);
void notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* WATCHDOG=1 if a quarter of the interval passed since the last one; cheap to call often. */
void notify_watchdog(void);
void notify_reloading(void);
void notify_stopping(void);

#endif

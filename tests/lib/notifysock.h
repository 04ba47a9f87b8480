/*
 * notifysock.h — a fake service manager for tests: the datagram socket sd_notify writes to (NOTIFY_SOCKET), every
 * message kept in order with the kernel's receive time.
 *
 * A datagram socket holds only net.unix.max_dgram_qlen (10) unread messages; then sd_notify blocks the daemon, as it
 * would under a service manager that stopped reading. systemd always reads, so a test must too: while one socket is
 * open, notifysock_pump() (called from any wait loop) takes in whatever is queued.
 */
#ifndef OPLOG2PG_TESTS_NOTIFYSOCK_H
#define OPLOG2PG_TESTS_NOTIFYSOCK_H

#include <stdbool.h>

#define NOTIFYSOCK_KEEP 4096

typedef struct {
    int fd;
    char path[300];
    char seen[NOTIFYSOCK_KEEP][256]; /* every message, in order (the first NOTIFYSOCK_KEEP) */
    double at[NOTIFYSOCK_KEEP];      /* when the kernel received each (SO_TIMESTAMP, wall-clock seconds) */
    int n;
    int from; /* notifysock_wait looks at seen[from..] first: messages other waits took in meanwhile */
} notifysock;

/* Binds <dir>/notify.sock (the test fails if it cannot) and makes it the socket notifysock_pump() reads. Large:
 * declare it static. */
void notifysock_open(notifysock *ns, const char *dir);

/* Waits up to timeout_s for a message containing `want` (a datagram may hold several NAME=value lines) that is not
 * older than the last message a wait or mark consumed. True when it arrived. */
bool notifysock_wait(notifysock *ns, const char *want, double timeout_s);

/* Waits up to timeout_s until `count` messages containing `want` arrived after message number `from` (an index into
 * seen). True when they did. */
bool notifysock_wait_n(notifysock *ns, int from, const char *want, int count, double timeout_s);

/* Takes in every message already queued, without waiting. */
void notifysock_drain(notifysock *ns);

/* From now on, waits look only at messages that come after this point. */
void notifysock_mark(notifysock *ns);

/* How many messages received so far contain `what`. */
int notifysock_count(const notifysock *ns, const char *what);

/* Every message received so far, on stderr (for a failing test). */
void notifysock_print(const notifysock *ns);

/* Drains the open socket, if any. */
void notifysock_pump(void);

void notifysock_close(notifysock *ns);

#endif

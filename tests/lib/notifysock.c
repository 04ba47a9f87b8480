/*
 * notifysock.c — the fake service manager's socket (see notifysock.h).
 */
#include "notifysock.h"

#include <check.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemonenv.h"

static notifysock *active;

void notifysock_open(notifysock *ns, const char *dir)
{
    memset(ns, 0, sizeof *ns);
    snprintf(ns->path, sizeof ns->path, "%s/notify.sock", dir);
    ns->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(ns->fd, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    ck_assert_uint_lt(strlen(ns->path), sizeof sa.sun_path);
    memcpy(sa.sun_path, ns->path, strlen(ns->path) + 1);
    ck_assert_int_eq(bind(ns->fd, (struct sockaddr *)&sa, sizeof sa), 0);
    int on = 1;
    ck_assert_int_eq(setsockopt(ns->fd, SOL_SOCKET, SO_TIMESTAMP, &on, sizeof on), 0);
    active = ns;
}

/* Receives one queued datagram into seen[]; false when none is queued. The message is kept even when seen[] is full
 * (then only its text is looked at), so a wait never misses what it waits for. */
static bool receive_one(notifysock *ns, char *buf, size_t size)
{
    union {
        char space[CMSG_SPACE(sizeof(struct timeval))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = size - 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.space, .msg_controllen = sizeof ctl};
    ssize_t len = recvmsg(ns->fd, &msg, MSG_DONTWAIT);
    if (len <= 0)
        return false;
    buf[len] = '\0';
    struct timeval tv;
    gettimeofday(&tv, NULL);
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMP)
            memcpy(&tv, CMSG_DATA(c), sizeof tv);
    if (ns->n < NOTIFYSOCK_KEEP) {
        ns->at[ns->n] = (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
        snprintf(ns->seen[ns->n++], sizeof ns->seen[0], "%.255s", buf);
    }
    return true;
}

bool notifysock_wait(notifysock *ns, const char *want, double timeout_s)
{
    for (int i = ns->from; i < ns->n; i++) {
        if (strstr(ns->seen[i], want) != NULL) {
            ns->from = i + 1;
            return true;
        }
    }
    double until = denv_now() + timeout_s;
    for (;;) {
        char buf[4096];
        while (receive_one(ns, buf, sizeof buf)) {
            if (strstr(buf, want) != NULL) {
                ns->from = ns->n;
                return true;
            }
        }
        double left = until - denv_now();
        if (left <= 0)
            return false;
        struct pollfd pfd = {.fd = ns->fd, .events = POLLIN};
        (void)poll(&pfd, 1, (int)(left * 1000) + 1);
    }
}

bool notifysock_wait_n(notifysock *ns, int from, const char *want, int count, double timeout_s)
{
    double until = denv_now() + timeout_s;
    for (;;) {
        notifysock_drain(ns);
        int k = 0;
        for (int i = from; i < ns->n; i++)
            k += strstr(ns->seen[i], want) != NULL;
        if (k >= count)
            return true;
        double left = until - denv_now();
        if (left <= 0 || ns->n >= NOTIFYSOCK_KEEP)
            return false;
        struct pollfd pfd = {.fd = ns->fd, .events = POLLIN};
        (void)poll(&pfd, 1, (int)(left * 1000) + 1);
    }
}

void notifysock_drain(notifysock *ns)
{
    char buf[4096];
    while (receive_one(ns, buf, sizeof buf)) {
    }
}

void notifysock_mark(notifysock *ns)
{
    notifysock_drain(ns);
    ns->from = ns->n;
}

int notifysock_count(const notifysock *ns, const char *what)
{
    int k = 0;
    for (int i = 0; i < ns->n; i++)
        k += strstr(ns->seen[i], what) != NULL;
    return k;
}

void notifysock_print(const notifysock *ns)
{
    fprintf(stderr, "---- notify messages (%d)\n", ns->n);
    for (int i = 0; i < ns->n; i++)
        fprintf(stderr, "  %s\n", ns->seen[i]);
}

void notifysock_pump(void)
{
    if (active != NULL)
        notifysock_drain(active);
}

void notifysock_close(notifysock *ns)
{
    if (active == ns)
        active = NULL;
    close(ns->fd);
    unlink(ns->path);
}

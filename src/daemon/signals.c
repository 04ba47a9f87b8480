/*
 * signals.c — see signals.h.
 */
#include "daemon/signals.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "daemon/exitcodes.h"
#include "util/log.h"

static int sfd = -1;
static atomic_bool stop_requested;
static atomic_int reloads;

bool signals_init(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0)
        return false;
    if (sfd < 0)
        sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    return sfd >= 0;
}

int signals_fd(void)
{
    return sfd;
}

void signals_poll(void)
{
    if (sfd < 0)
        return;
    struct signalfd_siginfo si;
    for (;;) {
        ssize_t n = read(sfd, &si, sizeof si);
        if (n != (ssize_t)sizeof si)
            return; /* EAGAIN: nothing (more) pending */
        if (si.ssi_signo == SIGHUP) {
            atomic_fetch_add(&reloads, 1);
            continue;
        }
        if (atomic_load(&stop_requested)) {
            static const char msg[] = "oplog2pg: second signal, exiting at once (the last commit stands)\n";
            ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
            (void)w;
            _exit(EXIT_FAILURE_GENERIC);
        }
        atomic_store(&stop_requested, true);
        log_notice("%s received: stopping", strsignal((int)si.ssi_signo));
    }
}

bool signals_nap(uint64_t ms)
{
    signals_poll();
    if (atomic_load(&stop_requested))
        return false;
    struct pollfd pfd = {.fd = sfd, .events = POLLIN};
    if (sfd >= 0) {
        int r = poll(&pfd, 1, (int)ms);
        (void)r;
    } else {
        usleep((useconds_t)ms * 1000);
    }
    signals_poll();
    return !atomic_load(&stop_requested);
}

bool signals_stop_requested(void)
{
    return atomic_load(&stop_requested);
}

bool signals_take_reload(void)
{
    int n = atomic_load(&reloads);
    while (n > 0) {
        if (atomic_compare_exchange_weak(&reloads, &n, 0))
            return true;
    }
    return false;
}

/*
 * napper.c — see napper.h.
 */
#include "util/napper.h"

#include <errno.h>
#include <time.h>

bool napper_init(napper *n)
{
    if (pthread_mutex_init(&n->mu, NULL) != 0)
        return false;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&n->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        pthread_mutex_destroy(&n->mu);
        return false;
    }
    return true;
}

void napper_destroy(napper *n)
{
    pthread_cond_destroy(&n->cv);
    pthread_mutex_destroy(&n->mu);
}

bool napper_nap(napper *n, int64_t ms, const atomic_bool *stop)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&n->mu);
    while (!atomic_load(stop)) {
        if (pthread_cond_timedwait(&n->cv, &n->mu, &until) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&n->mu);
    return !atomic_load(stop);
}

void napper_wake(napper *n)
{
    pthread_mutex_lock(&n->mu);
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
}

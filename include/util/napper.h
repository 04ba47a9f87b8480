/*
 * napper.h — a thread's interruptible sleep: it naps for a while (a retry's backoff) unless another thread asks it to
 * stop, which wakes it at once. The readers of MongoDB (the oplog's, the change stream's) nap with one between
 * retries, and their stop calls napper_wake after setting their stop flag.
 */
#ifndef OPLOG2PG_UTIL_NAPPER_H
#define OPLOG2PG_UTIL_NAPPER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct napper {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC: a change of the wall clock neither shortens nor stretches a nap */
} napper;

/* False when the mutex or the condition cannot be made (nothing is left to destroy then). */
bool napper_init(napper *n);
void napper_destroy(napper *n);
/* Waits ms milliseconds, or until napper_wake once *stop is set; returns !*stop. */
bool napper_nap(napper *n, int64_t ms, const atomic_bool *stop);
/* Wakes a nap in progress (the caller has set the stop flag first). */
void napper_wake(napper *n);

#endif

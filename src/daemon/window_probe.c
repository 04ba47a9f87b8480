/*
 * window_probe.c — see window_probe.h.
 *
 * NOTES. The targets and the results live under one mutex; the thread copies the targets out, reads without the
 * lock, and stores each result only if the targets have not been changed meanwhile (generation). The loop's calls
 * take the mutex for a copy or a few string comparisons, never across a read.
 */
#include "daemon/window_probe.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "source/oplog_edge.h"
#include "util/log.h"

typedef struct {
    char *id, *uri;
    bool have;
    op_pos oldest, newest;
} probe_target;

struct window_probe {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;
    int64_t interval_ms;
    uint64_t generation; /* bumped by each change of the targets */
    probe_target *t;
    size_t n;
};

static void free_targets(probe_target *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(t[i].id);
        free(t[i].uri);
    }
    free(t);
}

/* A copy of the targets' ids and uris (results left out); NULL with *n 0 when there are none or memory ran out. */
static probe_target *copy_targets(const probe_target *t, size_t n, size_t *out_n)
{
    *out_n = 0;
    if (n == 0)
        return NULL;
    probe_target *c = calloc(n, sizeof *c);
    if (c == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        c[i].id = strdup(t[i].id);
        c[i].uri = strdup(t[i].uri);
        if (c[i].id == NULL || c[i].uri == NULL) {
            free_targets(c, i + 1);
            return NULL;
        }
    }
    *out_n = n;
    return c;
}

static void *probe_main(void *arg)
{
    window_probe *w = arg;
    /* Short timeouts: a MongoDB that does not answer costs the probe a few seconds, and a stop waits no longer. */
    mongo_client_opts o = {
        .appname = "oplog2pg-window", .server_selection_timeout_ms = 5000, .socket_timeout_ms = 10000};
    pthread_mutex_lock(&w->lock);
    while (!w->stop) {
        uint64_t gen = w->generation;
        size_t n;
        probe_target *c = copy_targets(w->t, w->n, &n);
        pthread_mutex_unlock(&w->lock);
        for (size_t i = 0; i < n; i++) {
            char err[512] = "";
            bool found = false;
            bool ok = oplog_window_with(c[i].uri, &o, &c[i].oldest, &c[i].newest, &found, err, sizeof err);
            c[i].have = ok && found;
            if (!ok)
                log_debug("[metrics] reading the oplog window%s%s: %s", c[i].id[0] ? " of shard " : "", c[i].id, err);
        }
        pthread_mutex_lock(&w->lock);
        if (gen == w->generation)
            for (size_t i = 0; i < n && i < w->n; i++) {
                w->t[i].have = c[i].have;
                w->t[i].oldest = c[i].oldest;
                w->t[i].newest = c[i].newest;
            }
        free_targets(c, n);
        if (w->stop || gen != w->generation)
            continue; /* targets changed while reading: read the new ones at once */
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += w->interval_ms / 1000;
        until.tv_nsec += (long)(w->interval_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!w->stop && gen == w->generation && pthread_cond_timedwait(&w->wake, &w->lock, &until) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

window_probe *window_probe_start(int64_t interval_ms)
{
    window_probe *w = calloc(1, sizeof *w);
    if (w == NULL)
        return NULL;
    w->interval_ms = interval_ms > 0 ? interval_ms : 30000;
    pthread_condattr_t ca;
    bool attr = pthread_condattr_init(&ca) == 0;
    if (!attr || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 || pthread_cond_init(&w->wake, &ca) != 0) {
        if (attr)
            pthread_condattr_destroy(&ca);
        free(w);
        return NULL;
    }
    pthread_condattr_destroy(&ca);
    if (pthread_mutex_init(&w->lock, NULL) != 0) {
        pthread_cond_destroy(&w->wake);
        free(w);
        return NULL;
    }
    if (pthread_create(&w->thread, NULL, probe_main, w) != 0) {
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->wake);
        free(w);
        return NULL;
    }
    return w;
}

void window_probe_stop(window_probe *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    free_targets(w->t, w->n);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->wake);
    free(w);
}

void window_probe_set_targets(window_probe *w, const char *const *ids, const char *const *uris, size_t n)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    bool same = n == w->n;
    for (size_t i = 0; same && i < n; i++)
        same = strcmp(ids[i], w->t[i].id) == 0 && strcmp(uris[i], w->t[i].uri) == 0;
    if (!same) {
        probe_target *t = n > 0 ? calloc(n, sizeof *t) : NULL;
        size_t made = 0;
        for (; t != NULL && made < n; made++) {
            t[made].id = strdup(ids[made]);
            t[made].uri = strdup(uris[made]);
            if (t[made].id == NULL || t[made].uri == NULL)
                break;
        }
        if (t != NULL && made < n) {
            free_targets(t, made + 1);
            t = NULL;
        }
        free_targets(w->t, w->n);
        w->t = t;
        w->n = t != NULL ? n : 0; /* out of memory: no targets, no metric */
        w->generation++;
        pthread_cond_signal(&w->wake);
    }
    pthread_mutex_unlock(&w->lock);
}

bool window_probe_get(window_probe *w, const char *id, op_pos *oldest, op_pos *newest)
{
    if (w == NULL)
        return false;
    bool have = false;
    pthread_mutex_lock(&w->lock);
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->t[i].id, id) == 0) {
            have = w->t[i].have;
            *oldest = w->t[i].oldest;
            *newest = w->t[i].newest;
            break;
        }
    pthread_mutex_unlock(&w->lock);
    return have;
}

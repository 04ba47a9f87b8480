/*
 * cluster.c — a sharded cluster as the apply loop's source: its shards (source/shards/discover.h), one oplog reader
 * and one queue per shard (source/oplog/reader.h), one note writer per shard (source/shards/note.h), and the merge
 * (core/merge.h) that makes one stream of them, in cluster-time order, for the batcher.
 *
 * NOTES
 * - A session's shards are config.shards as read when it starts. Each shard resumes after its own checkpoint row
 *   (checked like a replica set's); a shard without one (new to the service) starts after the service's cluster time,
 *   the last entry applied from any shard (reader_config.start_after).
 * - Each shard's queue gets an equal share of queue_size and queue_bytes (at least QUEUE_SHARE_MIN_* each), so that
 *   the memory the queues hold stays within the configured bounds whatever the number of shards.
 * - The merge waits on a shard that has shown nothing at or after the next entry; after shard_note_after it asks the
 *   shard's note writer for a note (noter_request, which never blocks), again each shard_note_after while it holds.
 * - A removed shard (removeShard completed: config.shards no longer lists it) is drained, then retired. Its end is
 *   the newest entry of its own oplog once it was seen gone: every write MongoDB routed to it came before the removal
 *   completed, so before that entry (one shard's oplog is in ts order). The poller reads that end (oplog_edge, on
 *   a client of its own: a shard that cannot be reached is retried every DRAIN_POLL_MS, and said so in `status`); the
 *   shard is read as before until the merge has handed on its entry at the end, then retired: the merge stops
 *   waiting on it (merge_retire_source), its reader and note writer stop, what it queued after its end is dropped
 *   (nothing but noops, notes and migration copies can follow: a guard ends the session on anything else), and
 *   apply.c commits and deletes its checkpoint row. A shard with a row and stored hosts that config.shards does not
 *   list when the session starts (removed while oplog2pg was stopped) is read at those hosts and drained the same.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apply_internal.h"
#include "core/merge.h"
#include "core/queue.h"
#include "source/decode.h"
#include "source/mongo_client.h"
#include "source/oplog/reader.h"
#include "source/oplog_edge.h"
#include "source/shards/discover.h"
#include "source/shards/note.h"
#include "util/clock.h"
#include "util/log.h"

#define POLL_MS               10000 /* config.shards is read again this often, for a shard added or removed */
#define DRAIN_POLL_MS         1000  /* a removed shard whose end is not known yet is asked again this often */
#define DRAIN_SELECT_MS       5000  /* ...each time waiting this long at most for its primary */
#define QUEUE_SHARE_MIN_OPS   256
#define QUEUE_SHARE_MIN_BYTES (1024 * 1024)

typedef struct cluster_shard {
    char *id;
    char *uri;
    queue *q;
    reader *rd;
    noter *nt;
    bool has_row; /* its checkpoint row */
    op_pos row;
    bool has_hold;
    op_pos hold;
    op_pos start;      /* this session reads it after here */
    bool has_topology; /* config.shards topologyTime: when the shard was added (5.0+) */
    op_pos topology;
    char *hosts; /* "rs/h1:p,h2:p", as config.shards lists it (or its row stored it) */
    /* A removed shard: under the cluster's lock (the poller writes them). */
    bool gone;    /* config.shards no longer lists it */
    bool has_end; /* end: the newest entry of its oplog once seen gone */
    op_pos end;
    char end_error[256]; /* why its end could not be read yet ("" when none) */
    /* The apply loop's own. */
    bool retired;     /* merge_retire_source done, reader and note writer stopped */
    bool row_deleted; /* its checkpoint row deleted (cluster_retired_row) */
} cluster_shard;

struct cluster {
    cluster_shard *s;
    size_t n;
    merge *m;
    /* The poll of config.shards, on a thread of its own (a listing may wait on the network). */
    char *uri;
    pthread_t poller;
    bool polling;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;         /* under lock */
    atomic_bool added; /* a shard this session does not read is listed now */
    char *refused;     /* a retired shard's entry that changes data (cluster_take ends the stream with it), or NULL */
    char added_id[64]; /* which (under lock) */
};

/* Reads the end of every removed shard that has none yet (the lock held on entry and return; dropped around the
 * reads). True when one still has none. */
static bool read_ends(cluster *c)
{
    bool pending = false;
    for (size_t i = 0; i < c->n && !c->stop; i++) {
        cluster_shard *s = &c->s[i];
        if (!s->gone || s->has_end)
            continue;
        op_pos newest;
        bool found = false, ok = false;
        char err[256];
        pthread_mutex_unlock(&c->lock);
        /* A short server selection: a stop waits for this read, and an unreachable shard is asked again soon. */
        mongo_client_opts mo = {.appname = "oplog2pg-drain", .server_selection_timeout_ms = DRAIN_SELECT_MS};
        mongoc_client_t *client = mongo_client_open(s->uri, &mo, err, sizeof err);
        if (client != NULL) {
            ok = oplog_edge(client, -1, &newest, &found, err, sizeof err);
            mongoc_client_destroy(client);
        }
        pthread_mutex_lock(&c->lock);
        if (ok && found) {
            char at[OP_POS_STRLEN];
            s->has_end = true;
            s->end = newest;
            s->end_error[0] = '\0';
            log_notice("shard '%s' is removed from the cluster: applying its oplog up to its newest entry %s, then "
                       "retiring it",
                       s->id, op_pos_format(&newest, at, sizeof at));
            continue;
        }
        if (ok)
            snprintf(err, sizeof err, "its oplog is empty");
        if (strcmp(err, s->end_error) != 0)
            log_warning("shard '%s' is removed from the cluster, and its oplog's end cannot be read: %s. The stream "
                        "holds until it can (keep a removed shard's replica set up until oplog2pg retires it)",
                        s->id, err);
        snprintf(s->end_error, sizeof s->end_error, "%s", err);
        pending = true;
    }
    return pending;
}

static void *poll_shards(void *arg)
{
    cluster *c = arg;
    char err[512];
    shard_discovery *sd = shard_discovery_open(c->uri, err, sizeof err);
    pthread_mutex_lock(&c->lock);
    while (!c->stop && sd != NULL) {
        bool pending = read_ends(c);
        if (c->stop)
            break;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        if (pending) {
            until.tv_nsec += (long)DRAIN_POLL_MS * 1000000L;
            until.tv_sec += until.tv_nsec / 1000000000L;
            until.tv_nsec %= 1000000000L;
        } else {
            until.tv_sec += POLL_MS / 1000;
        }
        while (!c->stop && pthread_cond_timedwait(&c->wake, &c->lock, &until) == 0) {
        }
        if (c->stop)
            break;
        pthread_mutex_unlock(&c->lock);
        shard_list sl = {0};
        discover_status st = shard_discovery_list(sd, &sl, err, sizeof err);
        pthread_mutex_lock(&c->lock);
        if (st != DISCOVER_OK) {
            log_debug("config.shards: %s (read again in %d s)", err, POLL_MS / 1000);
            continue;
        }
        for (size_t k = 0; k < c->n; k++) {
            if (!c->s[k].gone && shard_list_find(&sl, c->s[k].id) == NULL) {
                c->s[k].gone = true;
                log_notice("config.shards no longer lists shard '%s' (removeShard completed)", c->s[k].id);
            }
        }
        for (size_t i = 0; i < sl.n && !atomic_load(&c->added); i++) {
            bool known = false;
            for (size_t k = 0; k < c->n && !known; k++)
                known = strcmp(c->s[k].id, sl.v[i].id) == 0;
            if (!known) {
                snprintf(c->added_id, sizeof c->added_id, "%s", sl.v[i].id);
                atomic_store(&c->added, true);
            }
        }
        shard_list_free(&sl);
    }
    pthread_mutex_unlock(&c->lock);
    shard_discovery_close(sd);
    return NULL;
}

bool cluster_shard_added(cluster *c, char *id, size_t idlen)
{
    if (c == NULL || !atomic_load(&c->added))
        return false;
    pthread_mutex_lock(&c->lock);
    snprintf(id, idlen, "%s", c->added_id);
    pthread_mutex_unlock(&c->lock);
    return true;
}

int cluster_detect(const config *cfg, bool *is_router, char *err, size_t errlen)
{
    *is_router = false;
    shard_discovery *sd = shard_discovery_open(cfg->mongodb_uri_effective, err, errlen);
    if (sd == NULL)
        return -1;
    discover_status st = shard_discovery_hello(sd, is_router, err, errlen);
    shard_discovery_close(sd);
    if (st == DISCOVER_OK)
        return 1;
    return st == DISCOVER_REFUSED || st == DISCOVER_BAD ? -1 : 0;
}

/* The merge takes a shard's items in batches: one lock of its queue (and at most one wake of its blocked reader) per
 * batch, not per entry (core/merge.h, pop_many). */
static size_t pop_shard(void *arg, size_t source, queue_item *out, size_t max)
{
    cluster *c = arg;
    return source < c->n ? queue_pop_all(c->s[source].q, out, max) : 0;
}

static void nudge_shard(void *arg, size_t source, const op_pos *past)
{
    cluster *c = arg;
    if (source < c->n && c->s[source].nt != NULL)
        noter_request(c->s[source].nt, past);
}

typedef struct {
    cluster *c;
    const char *router; /* the configured URI */
    sink *snk;
    bool nomem;
    char unreadable[400]; /* a removed shard's row that cannot be read: the session does not start */
} rows_ctx;

/* A shard with a checkpoint row that config.shards no longer lists, at its stored hosts ("rs/h1:p,..."): added to
 * the session's shards, gone (drained, then retired). False when the hosts do not parse (err says why). */
static bool add_removed(rows_ctx *rc, const char *shard, const char *hosts, char *err, size_t errlen)
{
    cluster *c = rc->c;
    const char *slash = strchr(hosts, '/');
    if (slash == NULL || slash == hosts) {
        snprintf(err, errlen, "its stored hosts '%s' name no replica set", hosts);
        return false;
    }
    char *rs = strndup(hosts, (size_t)(slash - hosts));
    char *uri = rs != NULL ? shard_uri(rc->router, rs, slash + 1, err, errlen) : NULL;
    free(rs);
    if (uri == NULL)
        return false;
    cluster_shard *v = realloc(c->s, (c->n + 1) * sizeof *v);
    if (v == NULL) {
        bson_free(uri);
        rc->nomem = true;
        snprintf(err, errlen, "out of memory");
        return false;
    }
    c->s = v;
    cluster_shard *s = &c->s[c->n];
    memset(s, 0, sizeof *s);
    s->id = strdup(shard);
    s->uri = strdup(uri);
    s->hosts = strdup(hosts);
    bson_free(uri);
    c->n++;
    if (s->id == NULL || s->uri == NULL || s->hosts == NULL) {
        rc->nomem = true;
        snprintf(err, errlen, "out of memory");
        return false;
    }
    s->gone = true;
    return true;
}

static void take_row(void *arg, const char *shard, const op_pos *pos, bool has_hold, const op_pos *hold)
{
    rows_ctx *rc = arg;
    char at[OP_POS_STRLEN], err[256];
    const char *hosts = sink_shard_hosts(rc->snk, shard);
    bool listed = false;
    for (size_t i = 0; i < rc->c->n && !listed; i++)
        listed = strcmp(rc->c->s[i].id, shard) == 0;
    if (!listed && hosts != NULL) {
        if (!add_removed(rc, shard, hosts, err, sizeof err)) {
            if (!rc->nomem)
                snprintf(rc->unreadable, sizeof rc->unreadable,
                         "shard '%s' has a checkpoint (%s) but config.shards no longer lists it, and it cannot be "
                         "read: %s",
                         shard, op_pos_format(pos, at, sizeof at), err);
            return;
        }
        log_notice("shard '%s' has a checkpoint (%s) but config.shards no longer lists it (removed from the cluster): "
                   "reading the rest of its oplog at %s, then retiring it",
                   shard, op_pos_format(pos, at, sizeof at), hosts);
    }
    for (size_t i = 0; i < rc->c->n; i++) {
        cluster_shard *s = &rc->c->s[i];
        if (strcmp(s->id, shard) == 0) {
            s->has_row = true;
            s->row = *pos;
            s->has_hold = has_hold;
            if (has_hold)
                s->hold = *hold;
            return;
        }
    }
    snprintf(rc->unreadable, sizeof rc->unreadable,
             "shard '%s' has a checkpoint (%s) but config.shards no longer lists it, and its row stores no hosts "
             "(written by an older oplog2pg), so the rest of its oplog cannot be read; once its entries are known to "
             "be applied, stop oplog2pg and delete its row from oplog2pg.shard_checkpoint (docs/sharding.md)",
             shard, op_pos_format(pos, at, sizeof at));
}

void cluster_free(cluster *c)
{
    if (c == NULL)
        return;
    cluster_stop(c);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->wake);
    free(c->uri);
    free(c->refused);
    merge_free(c->m);
    for (size_t i = 0; i < c->n; i++) {
        reader_free(c->s[i].rd);
        noter_free(c->s[i].nt);
        queue_free(c->s[i].q);
        free(c->s[i].id);
        free(c->s[i].uri);
        free(c->s[i].hosts);
    }
    free(c->s);
    free(c);
}

void cluster_stop(cluster *c)
{
    if (c == NULL)
        return;
    if (c->polling) {
        pthread_mutex_lock(&c->lock);
        c->stop = true;
        pthread_cond_signal(&c->wake);
        pthread_mutex_unlock(&c->lock);
        pthread_join(c->poller, NULL);
        c->polling = false;
    }
    for (size_t i = 0; i < c->n; i++)
        reader_stop(c->s[i].rd);
}

cluster *cluster_start(daemon_ctx *d, const op_pos *cluster_pos, int *fatal, char *err, size_t errlen)
{
    *fatal = 0;
    shard_list sl = {0};
    shard_discovery *sd = shard_discovery_open(d->cfg->mongodb_uri_effective, err, errlen);
    if (sd == NULL) {
        *fatal = 1;
        return NULL;
    }
    discover_status ds = shard_discovery_list(sd, &sl, err, errlen);
    shard_discovery_close(sd);
    if (ds != DISCOVER_OK) {
        *fatal = ds == DISCOVER_REFUSED || ds == DISCOVER_BAD;
        return NULL;
    }
    if (sl.n == 0 || sl.n > UINT16_MAX) {
        /* none: a cluster being set up (retried, as at start); more than a source index holds: a person acts */
        snprintf(err, errlen, "config.shards lists %zu shards", sl.n);
        *fatal = sl.n > UINT16_MAX;
        shard_list_free(&sl);
        return NULL;
    }
    cluster *c = calloc(1, sizeof *c);
    if (c == NULL || (c->s = calloc(sl.n, sizeof *c->s)) == NULL) {
        free(c);
        shard_list_free(&sl);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->n = sl.n;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->wake, NULL);
    atomic_init(&c->added, false);
    c->uri = strdup(d->cfg->mongodb_uri_effective);
    bool ok = c->uri != NULL;
    for (size_t i = 0; i < sl.n && ok; i++) {
        c->s[i].id = strdup(sl.v[i].id);
        c->s[i].uri = strdup(sl.v[i].uri);
        c->s[i].has_topology = sl.v[i].has_topology_time;
        c->s[i].topology = (op_pos){sl.v[i].topology_secs, sl.v[i].topology_inc, -1};
        size_t hl = strlen(sl.v[i].rs) + strlen(sl.v[i].hosts) + 2;
        if ((c->s[i].hosts = malloc(hl)) != NULL)
            snprintf(c->s[i].hosts, hl, "%s/%s", sl.v[i].rs, sl.v[i].hosts);
        ok = c->s[i].id != NULL && c->s[i].uri != NULL && c->s[i].hosts != NULL;
    }
    shard_list_free(&sl);
    rows_ctx rc = {.c = c, .router = d->cfg->mongodb_uri_effective, .snk = d->snk};
    int rows = ok ? sink_read_shard_checkpoints(d->snk, take_row, &rc) : 0;
    if (rows >= 0 && rc.unreadable[0] != '\0') {
        snprintf(err, errlen, "%s", rc.unreadable);
        cluster_free(c);
        return NULL;
    }
    const char **names = ok && !rc.nomem ? calloc(c->n, sizeof *names) : NULL;
    const char **hosts = names != NULL ? calloc(c->n, sizeof *hosts) : NULL;
    if (hosts == NULL || c->n > UINT16_MAX) {
        free(names);
        cluster_free(c);
        snprintf(err, errlen, hosts == NULL ? "out of memory" : "too many shards");
        return NULL;
    }
    for (size_t i = 0; i < c->n; i++) {
        names[i] = c->s[i].id;
        hosts[i] = c->s[i].hosts;
    }
    sink_status ss = rows < 0 ? APPLY_RETRY : sink_set_shards(d->snk, names, c->n);
    if (ss == APPLY_OK)
        ss = sink_set_shard_hosts(d->snk, hosts, c->n);
    free(names);
    free(hosts);
    if (ss != APPLY_OK) {
        snprintf(err, errlen, "reading the shards' checkpoints: %s", sink_error(d->snk));
        cluster_free(c);
        return NULL;
    }

    merge_config mc = {.n_sources = c->n,
                       .wait_ms = (uint64_t)d->cfg->shard_note_after_ms,
                       .nudge = d->cfg->shard_note_after_ms > 0 ? nudge_shard : NULL,
                       .nudge_arg = c,
                       .pop_many = pop_shard,
                       .pop_arg = c};
    c->m = merge_new(&mc);
    size_t ops = (size_t)d->cfg->queue_size / c->n, bytes = (size_t)d->cfg->queue_bytes / c->n;
    ops = ops < QUEUE_SHARE_MIN_OPS ? QUEUE_SHARE_MIN_OPS : ops;
    bytes = bytes < QUEUE_SHARE_MIN_BYTES ? QUEUE_SHARE_MIN_BYTES : bytes;
    for (size_t i = 0; i < c->n && c->m != NULL; i++) {
        cluster_shard *s = &c->s[i];
        s->q = queue_new(ops, bytes);
        if (s->q == NULL) {
            snprintf(err, errlen, "out of memory");
            cluster_free(c);
            return NULL;
        }
        queue_set_notify(s->q, apply_notify_wake, d);
    }
    if (c->m == NULL) {
        snprintf(err, errlen, "out of memory");
        cluster_free(c);
        return NULL;
    }
    for (size_t i = 0; i < c->n; i++) {
        cluster_shard *s = &c->s[i];
        char at[OP_POS_STRLEN];
        reader_config rcfg;
        reader_config_init(&rcfg);
        rcfg.uri = s->uri;
        rcfg.source = (uint16_t)i;
        rcfg.filter = d->filter;
        rcfg.maps = &d->cfg->maps;
        rcfg.decode_flags = DECODE_KEEP_SYSTEM | (d->careful ? 0 : DECODE_BORROW_PAYLOAD);
        rcfg.majority = d->cfg->read_concern == CONFIG_READ_MAJORITY;
        rcfg.report_prepares = true;
        if (s->has_row) {
            rcfg.start = s->row;
            rcfg.has_hold = s->has_hold;
            rcfg.hold = s->hold;
            log_info("shard '%s': resuming after oplog entry %s (term %lld)", s->id,
                     op_pos_format(&s->row, at, sizeof at), (long long)s->row.term);
        } else if (s->has_topology) {
            /* A shard the service has not read yet (every start commits one row per shard): new to the cluster
             * since. Its entries from its addition on are the cluster's. */
            rcfg.start = s->topology;
            if (rcfg.start.inc > 0)
                rcfg.start.inc--;
            else if (rcfg.start.secs > 0) {
                rcfg.start.secs--;
                rcfg.start.inc = UINT32_MAX;
            }
            rcfg.start_after = true;
            log_notice("shard '%s' has no checkpoint of its own yet: reading its oplog from its addition to the "
                       "cluster (topologyTime %s)",
                       s->id, op_pos_format(&s->topology, at, sizeof at));
        } else {
            rcfg.start = *cluster_pos;
            rcfg.start.term = -1;
            rcfg.start_after = true;
            log_warning("shard '%s' has no checkpoint of its own yet and config.shards gives no time it was added "
                        "(topologyTime, 5.0+): reading its oplog after the service's cluster time %s",
                        s->id, op_pos_format(cluster_pos, at, sizeof at));
        }
        merge_set_watermark(c->m, i, &rcfg.start);
        s->start = rcfg.start;
        s->rd = reader_start(&rcfg, s->q, err, errlen);
        if (s->rd == NULL) {
            *fatal = 1;
            cluster_free(c);
            return NULL;
        }
        if (d->cfg->shard_note_after_ms > 0) {
            noter_config nc = {.uri = s->uri, .shard = s->id, .service = d->cfg->service};
            char nerr[256];
            s->nt = noter_start(&nc, nerr, sizeof nerr);
            if (s->nt == NULL)
                log_warning("shard '%s': no oplog notes (%s): an idle shard holds the others back until its periodic "
                            "noop",
                            s->id, nerr);
        }
    }
    c->polling = pthread_create(&c->poller, NULL, poll_shards, c) == 0;
    if (!c->polling)
        log_warning("cannot start the thread that reads config.shards again: a shard added while running is read "
                    "from the next restart on");
    return c;
}

/* A retired shard's entry: dropped when it changes nothing, else noted in c->refused (the first one). */
static void drop_after_end(cluster *c, queue_item *it)
{
    if (it->type == QUEUE_ENTRY && !op_entry_changes_nothing(it->entry) && c->refused == NULL) {
        char at[OP_POS_STRLEN], msg[256];
        snprintf(msg, sizeof msg,
                 "shard '%s' was retired (removed from the cluster, read to its end), and its oplog entry %s changes "
                 "data: stopping rather than leaving it out",
                 c->s[it->entry->source].id, op_pos_format(&it->entry->pos, at, sizeof at));
        c->refused = strdup(msg);
        if (c->refused == NULL)
            c->refused = strdup("out of memory");
    }
    queue_item_clear(it);
}

size_t cluster_take(cluster *c, queue_item *out, size_t max)
{
    size_t n, k;
    if (c->refused != NULL && max > 0) {
        /* After it nothing is handed on: the session ends there. */
        out[0] = (queue_item){.type = QUEUE_END, .reason = QUEUE_END_UNSUPPORTED, .message = c->refused};
        c->refused = strdup("a retired shard's entry changes data");
        return 1;
    }
    do {
        n = merge_take(c->m, out, max, clock_ms());
        k = 0;
        for (size_t i = 0; i < n; i++) {
            queue_item *it = &out[i];
            if (it->type == QUEUE_ENTRY && it->entry->source < c->n && c->s[it->entry->source].retired) {
                /* After its end (cluster_drain_step): a removed shard holds no chunk and no database. */
                drop_after_end(c, it);
                if (c->refused != NULL) {
                    for (size_t j = i + 1; j < n; j++)
                        queue_item_clear(&out[j]);
                    n = 0;
                    break;
                }
                continue;
            }
            out[k++] = *it;
        }
    } while (k == 0 && n == max);
    if (c->refused != NULL && k < max) {
        out[k++] = (queue_item){.type = QUEUE_END, .reason = QUEUE_END_UNSUPPORTED, .message = c->refused};
        c->refused = strdup("a retired shard's entry changes data");
    }
    return k;
}

bool cluster_drain_step(cluster *c)
{
    bool any = false;
    for (size_t i = 0; i < c->n; i++) {
        cluster_shard *s = &c->s[i];
        if (s->retired)
            continue;
        pthread_mutex_lock(&c->lock);
        bool gone = s->gone, has_end = s->has_end;
        op_pos end = s->end;
        pthread_mutex_unlock(&c->lock);
        if (!gone || !has_end)
            continue;
        merge_source_stats ms;
        if (!merge_get_source_stats(c->m, i, &ms))
            continue;
        /* Its entry at the end handed on: the merge's watermark at it with no head (or past it). */
        int past = ms.known ? op_pos_cmp(&ms.watermark, &end) : -1;
        if (past < 0 || (past == 0 && ms.has_head)) {
            /* Not yet: the reader reads on. Should the end not be shown (an entry the reader does not hand over), a
             * note past it makes one that is: written only when the shard has nothing after the end yet. */
            op_pos after = end;
            after.inc++;
            if (s->nt != NULL && !ms.has_head)
                noter_request(s->nt, &after);
            continue;
        }
        char at[OP_POS_STRLEN];
        merge_retire_source(c->m, i);
        s->retired = true;
        reader_stop(s->rd);
        noter_free(s->nt);
        s->nt = NULL;
        /* What it queued after its end (the merge's buffer first, the front of its queue): noops, notes, migration
         * copies; anything else ends the session. */
        queue_item it;
        while (merge_take_back(c->m, i, &it))
            drop_after_end(c, &it);
        while (queue_pop(s->q, &it))
            drop_after_end(c, &it);
        any = true;
        log_notice("shard '%s' is read to its end (%s): retired from the merge; its checkpoint row goes with the next "
                   "commit",
                   s->id, op_pos_format(&end, at, sizeof at));
    }
    return any;
}

bool cluster_retired_row(const cluster *c, size_t *i, const char **id)
{
    if (c != NULL && c->refused != NULL)
        return false; /* the stream ends on it (cluster_take): the row stays */
    for (size_t k = 0; c != NULL && k < c->n; k++) {
        if (c->s[k].retired && !c->s[k].row_deleted) {
            *i = k;
            *id = c->s[k].id;
            return true;
        }
    }
    return false;
}

void cluster_row_deleted(cluster *c, size_t i)
{
    if (i < c->n)
        c->s[i].row_deleted = true;
}

bool cluster_draining(cluster *c, size_t i, cluster_drain_info *out)
{
    if (c == NULL || i >= c->n)
        return false;
    cluster_shard *s = &c->s[i];
    pthread_mutex_lock(&c->lock);
    *out = (cluster_drain_info){.gone = s->gone, .has_end = s->has_end, .end = s->end, .retired = s->retired};
    snprintf(out->error, sizeof out->error, "%s", s->end_error);
    pthread_mutex_unlock(&c->lock);
    return s->gone;
}

bool cluster_drained(const cluster *c)
{
    if (merge_buffered(c->m) > 0)
        return false;
    for (size_t i = 0; i < c->n; i++)
        if (queue_len(c->s[i].q) > 0)
            return false;
    return true;
}

void cluster_release(cluster *c)
{
    for (size_t i = 0; i < c->n; i++)
        queue_release(c->s[i].q);
}

uint64_t cluster_deadline(const cluster *c)
{
    return merge_deadline(c->m);
}

size_t cluster_queued_ops(const cluster *c)
{
    size_t ops = 0;
    for (size_t i = 0; i < c->n; i++)
        ops += queue_ops(c->s[i].q);
    return ops;
}

void cluster_reader_totals(const cluster *c, reader_stats *sum)
{
    memset(sum, 0, sizeof *sum);
    for (size_t i = 0; i < c->n; i++) {
        reader_stats rs;
        reader_get_stats(c->s[i].rd, &rs);
        sum->entries += rs.entries;
        sum->idles += rs.idles;
        sum->reconnects += rs.reconnects;
        sum->txn_open += rs.txn_open;
        sum->txn_bytes += rs.txn_bytes;
        if (rs.txn_open > 0 && (sum->txn_open == rs.txn_open || op_pos_cmp(&rs.txn_oldest, &sum->txn_oldest) < 0))
            sum->txn_oldest = rs.txn_oldest;
    }
}

bool cluster_has_shard(const cluster *c, const char *id)
{
    for (size_t i = 0; c != NULL && i < c->n; i++)
        if (strcmp(c->s[i].id, id) == 0)
            return true;
    return false;
}

size_t cluster_shard_count(const cluster *c)
{
    return c != NULL ? c->n : 0;
}

bool cluster_shard_place(const cluster *c, const char *id, size_t *i, op_pos *start, bool *retired)
{
    for (size_t k = 0; c != NULL && k < c->n; k++) {
        if (strcmp(c->s[k].id, id) != 0)
            continue;
        *i = k;
        *start = c->s[k].start;
        *retired = c->s[k].retired;
        return true;
    }
    return false;
}

bool cluster_shard_report(const cluster *c, size_t i, cluster_shard_info *out)
{
    if (c == NULL || i >= c->n)
        return false;
    memset(out, 0, sizeof *out);
    out->id = c->s[i].id;
    out->uri = c->s[i].uri;
    reader_stats rs;
    reader_get_stats(c->s[i].rd, &rs);
    out->read_last = rs.last;
    out->has_read = rs.have_last;
    merge_source_stats ms;
    if (merge_get_source_stats(c->m, i, &ms)) {
        out->waited_ms = ms.waited_ms;
        out->holding = ms.holding;
        out->nudges = ms.nudges;
        out->entries = ms.entries;
    }
    if (c->s[i].nt != NULL) {
        noter_stats ns;
        noter_get_stats(c->s[i].nt, &ns);
        out->notes = ns.written;
        out->notes_refused = ns.refused;
    }
    return true;
}

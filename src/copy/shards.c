/*
 * shards.c — the initial copy of a sharded cluster: where each shard's reader starts once the copy is done.
 *
 * NOTES
 * - The copy reads every collection through the routers (a router returns only the documents each shard owns, so a
 *   migration's orphans are never copied), but each shard has its own oplog, so the copy's start is one position per
 *   shard: its newest entry (majority-committed in majority mode), noted on the shard's own replica set before
 *   anything is read. A change the copy missed was written after the start of the shard that took it, so tailing
 *   every shard from its start, merged in cluster-time order, replays it, and the catch-up converges through upserts
 *   and idempotent updates as on a replica set.
 * - The starts are in oplog2pg.copy_shard_state, stored with the plan in one transaction: a copy resumed after a
 *   crash keeps them. copy_state's own start is the oldest of them (term -1), for the messages and the dead letters.
 * - The window guard is per shard: each shard's oldest entry against its own start. A shard config.shards no longer
 *   lists (removed during the copy) has no client: its window is not watched, and it is said once.
 * - A shard added during the copy has no start: the daemon reads it from its addition to the cluster (topologyTime),
 *   which is after the copy's starts, as for any shard added while a service runs.
 * - When the copy ends, each shard's newest entry is its end, and the newest of the ends is where the copy's end
 *   (copy_state end_*) is put: the merged stream meets rows the copy wrote until it passes there.
 */
#include "copy_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sink/pg.h"
#include "source/oplog_edge.h"
#include "util/clock.h"
#include "util/log.h"

/* How long a new copy waits for a shard whose oplog is still empty before it gives up (seconds). */
#define EMPTY_OPLOG_WAIT_S 60

static bool shards_alloc(run_ctx *rc, size_t n, char *err, size_t errlen)
{
    rc->shards = calloc(n ? n : 1, sizeof *rc->shards);
    if (rc->shards == NULL) {
        snprintf(err, errlen, "out of memory");
        return false;
    }
    rc->nshards = n;
    return true;
}

/* The client of the shard cfg->shards lists under id, or NULL (err set) when its URI is refused. *listed false when
 * config.shards did not list it. */
static mongoc_client_t *client_for(const run_ctx *rc, const char *id, bool *listed, char *err, size_t errlen)
{
    *listed = false;
    for (size_t i = 0; i < rc->cfg->nshards; i++)
        if (strcmp(rc->cfg->shards[i].id, id) == 0) {
            *listed = true;
            return copy_mongo_connect(rc->cfg->shards[i].uri, err, errlen);
        }
    return NULL;
}

bool copy_shards_open(run_ctx *rc, char *err, size_t errlen)
{
    if (!shards_alloc(rc, rc->cfg->nshards, err, errlen))
        return false;
    for (size_t i = 0; i < rc->nshards; i++) {
        copy_shard_run *s = &rc->shards[i];
        bool listed;
        char m[ERRLEN];
        snprintf(s->id, sizeof s->id, "%s", rc->cfg->shards[i].id);
        s->client = client_for(rc, s->id, &listed, m, sizeof m);
        if (s->client == NULL) {
            snprintf(err, errlen, "shard '%s': %s", s->id, m);
            return false;
        }
    }
    return true;
}

bool copy_shards_note_starts(run_ctx *rc, char *err, size_t errlen)
{
    op_pos oldest = {0, 0, -1};
    for (size_t i = 0; i < rc->nshards; i++) {
        copy_shard_run *s = &rc->shards[i];
        char m[ERRLEN];
        bool found = false;
        double until = clock_s() + EMPTY_OPLOG_WAIT_S;
        for (bool logged = false;;) {
            if (!oplog_newest_committed(s->client, rc->cfg->majority, &s->start, &found, m, sizeof m)) {
                snprintf(err, errlen, "shard '%s': %s", s->id, m);
                return false;
            }
            if (found)
                break;
            if (clock_s() >= until || copy_stopping(rc)) {
                snprintf(err, errlen, "the oplog of shard '%s' is empty: there is no position to tail it from", s->id);
                return false;
            }
            if (!logged)
                log_notice("copy: the oplog of shard '%s' is empty; waiting for its first entry", s->id);
            logged = true;
            clock_sleep_ms(500);
        }
        if (i == 0 || op_pos_cmp(&s->start, &oldest) < 0)
            oldest = s->start;
    }
    oldest.term = -1;
    rc->start = oldest;
    return true;
}

bool copy_shards_renamed(run_ctx *rc, bool *renamed, char *err, size_t errlen)
{
    *renamed = false;
    for (size_t i = 0; i < rc->nshards && !*renamed; i++) {
        copy_shard_run *s = &rc->shards[i];
        op_pos listed;
        bool found;
        char m[ERRLEN];
        if (!oplog_edge(s->client, -1, &listed, &found, m, sizeof m) ||
            (found && !oplog_renames_between(s->client, &s->start, &listed, renamed, m, sizeof m))) {
            snprintf(err, errlen, "shard '%s': %s", s->id, m);
            return false;
        }
    }
    return true;
}

bool copy_shards_store(pgconn *pg, const char *service, const run_ctx *rc, char *err, size_t errlen)
{
    for (size_t i = 0; i < rc->nshards; i++) {
        const copy_shard_run *s = &rc->shards[i];
        char sec[24], inc[24], term[24];
        snprintf(sec, sizeof sec, "%u", s->start.secs);
        snprintf(inc, sizeof inc, "%u", s->start.inc);
        snprintf(term, sizeof term, "%lld", (long long)s->start.term);
        const char *v[5] = {service, s->id, sec, inc, term};
        PGresult *r = copy_query_params(pg,
                                        "INSERT INTO oplog2pg.copy_shard_state (service, shard, start_sec, start_inc, "
                                        "start_term) VALUES ($1, $2, $3, $4, $5)",
                                        5, v, NULL, NULL, 0);
        bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
        if (!ok) {
            snprintf(err, errlen, "%s", copy_pg_error(pg));
            copy_trim_nl(err);
            return false;
        }
    }
    return true;
}

int copy_shards_load(pgconn *pg, run_ctx *rc, char *err, size_t errlen)
{
    const char *p[1] = {rc->cfg->service};
    PGresult *r = copy_query_params(pg,
                                    "SELECT shard, start_sec, start_inc, start_term FROM oplog2pg.copy_shard_state "
                                    "WHERE service = $1 ORDER BY shard COLLATE \"C\"",
                                    1, p, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        snprintf(err, errlen, "reading oplog2pg.copy_shard_state: %s", copy_pg_error(pg));
        copy_trim_nl(err);
        PQclear(r);
        return -1;
    }
    size_t n = (size_t)PQntuples(r);
    bool ok = true, mismatch = false;
    if (n == 0 && rc->cfg->nshards > 0) {
        snprintf(err, errlen,
                 "the copy of service %s was begun on a replica set, and the URI now names a sharded cluster's "
                 "routers: a copy cannot go on from one to the other; start it again with --reimport",
                 rc->cfg->service);
        ok = false;
        mismatch = true;
    } else if (n > 0 && rc->cfg->nshards == 0) {
        snprintf(err, errlen,
                 "the copy of service %s was begun on a sharded cluster, and the URI now names a replica set: a copy "
                 "cannot go on from one to the other; start it again with --reimport",
                 rc->cfg->service);
        ok = false;
        mismatch = true;
    }
    if (ok && n > 0 && !shards_alloc(rc, n, err, errlen))
        ok = false;
    for (size_t i = 0; ok && i < n; i++) {
        copy_shard_run *s = &rc->shards[i];
        snprintf(s->id, sizeof s->id, "%s", PQgetvalue(r, (int)i, 0));
        sink_row_pos(r, (int)i, 1, &s->start);
        bool listed;
        char m[ERRLEN];
        s->client = client_for(rc, s->id, &listed, m, sizeof m);
        if (s->client == NULL && listed) {
            snprintf(err, errlen, "shard '%s': %s", s->id, m);
            ok = false;
        } else if (!listed) {
            log_warning("copy: shard '%s' had its start noted, but config.shards no longer lists it: its oplog window "
                        "is not watched, and its entries are not read after the copy (a removed shard)",
                        s->id);
        }
    }
    PQclear(r);
    return ok ? 1 : mismatch ? 0 : -1;
}

int copy_shards_window(run_ctx *rc, double eta, char *err, size_t errlen)
{
    for (size_t i = 0; i < rc->nshards; i++) {
        copy_shard_run *s = &rc->shards[i];
        if (s->client == NULL)
            continue;
        op_pos oldest;
        bool found;
        char m[ERRLEN], st[OP_POS_STRLEN], o[OP_POS_STRLEN];
        if (!oplog_edge(s->client, 1, &oldest, &found, m, sizeof m)) {
            snprintf(err, errlen, "shard '%s': %s", s->id, m);
            return -1;
        }
        op_pos_format(&s->start, st, sizeof st);
        if (!found || op_pos_cmp(&oldest, &s->start) > 0) {
            snprintf(err, errlen,
                     "the oplog of shard '%s' no longer holds its start for the copy; raise that shard's oplog size or "
                     "copy fewer collections at once (its start %s, its oldest oplog entry %s). The committed "
                     "progress is kept, but resuming this copy cannot make it consistent either: raise the oplog "
                     "size, then start over with --reimport",
                     s->id, st, found ? op_pos_format(&oldest, o, sizeof o) : "none");
            return 0;
        }
        int64_t margin_ms = ((int64_t)s->start.secs - (int64_t)oldest.secs) * 1000;
        double now = clock_s();
        if (margin_ms < rc->cfg->window_warn_ms && (s->last_warn == 0 || now - s->last_warn >= WINDOW_WARN_EVERY)) {
            char mg[32], e[32], l[32];
            op_pos_format(&oldest, o, sizeof o);
            log_warning("copy: the oplog window margin of shard '%s' is %s (oldest entry %s, its start %s), under the "
                        "configured %s; the copy needs %s%s more. If that oplog rolls past the shard's start the copy "
                        "fails: raise its oplog size",
                        s->id, copy_format_duration((double)margin_ms / 1000.0, mg, sizeof mg), o, st,
                        copy_format_duration((double)rc->cfg->window_warn_ms / 1000.0, l, sizeof l),
                        eta < 0 ? "" : "about ", eta < 0 ? "an unknown time" : copy_format_duration(eta, e, sizeof e));
            s->last_warn = now;
        }
    }
    return 1;
}

bool copy_shards_record_ends(pgconn *pg, run_ctx *rc, op_pos *end, bool *have_end, char *err, size_t errlen)
{
    *have_end = true;
    *end = (op_pos){0, 0, -1};
    for (size_t i = 0; i < rc->nshards; i++) {
        copy_shard_run *s = &rc->shards[i];
        char m[ERRLEN];
        bool found = false;
        s->have_end = s->client != NULL &&
                      oplog_newest_committed(s->client, rc->cfg->majority, &s->end, &found, m, sizeof m) && found;
        if (!s->have_end) {
            log_debug("copy: the end of shard '%s''s oplog after the copy is not known", s->id);
            *have_end = false;
            continue;
        }
        if (op_pos_cmp(&s->end, end) > 0)
            *end = s->end;
        char es[3][24];
        snprintf(es[0], sizeof es[0], "%u", s->end.secs);
        snprintf(es[1], sizeof es[1], "%u", s->end.inc);
        snprintf(es[2], sizeof es[2], "%lld", (long long)s->end.term);
        const char *v[5] = {rc->cfg->service, s->id, es[0], es[1], es[2]};
        PGresult *r = copy_query_params(pg,
                                        "UPDATE oplog2pg.copy_shard_state SET end_sec = $3, end_inc = $4, "
                                        "end_term = $5 WHERE service = $1 AND shard = $2",
                                        5, v, NULL, NULL, 0);
        bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
        if (!ok) {
            snprintf(err, errlen, "recording the end of shard '%s': %s", s->id, copy_pg_error(pg));
            copy_trim_nl(err);
            return false;
        }
    }
    end->term = -1;
    return true;
}

bool copy_shards_export(const run_ctx *rc)
{
    const copy_config *cfg = rc->cfg;
    if (cfg->shard_starts == NULL || cfg->nshard_starts == NULL)
        return true;
    *cfg->shard_starts = NULL;
    *cfg->nshard_starts = 0;
    if (rc->nshards == 0)
        return true;
    copy_shard_pos *v = calloc(rc->nshards, sizeof *v);
    if (v == NULL)
        return false;
    for (size_t i = 0; i < rc->nshards; i++) {
        snprintf(v[i].id, sizeof v[i].id, "%s", rc->shards[i].id);
        v[i].start = rc->shards[i].start;
    }
    *cfg->shard_starts = v;
    *cfg->nshard_starts = rc->nshards;
    return true;
}

void copy_shards_free(run_ctx *rc)
{
    for (size_t i = 0; i < rc->nshards; i++)
        if (rc->shards[i].client != NULL)
            mongoc_client_destroy(rc->shards[i].client);
    free(rc->shards);
    rc->shards = NULL;
    rc->nshards = 0;
}

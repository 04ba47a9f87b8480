/*
 * start.c — where a run starts (see start.h).
 */
#include "daemon/start.h"

#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "copy/copy.h"
#include "daemon/exitcodes.h"
#include "daemon/signals.h"
#include "source/mongo_client.h"
#include "source/oplog_edge.h"
#include "source/shards/discover.h"
#include "source/stream/caps.h"
#include "util/log.h"

/* A short-lived MongoDB client for the start-up reads. */
static mongoc_client_t *client_for(const config *cfg, char *err, size_t errlen)
{
    mongo_client_opts o = {.appname = "oplog2pg-start"};
    return mongo_client_open(cfg->mongodb_uri_effective, &o, err, errlen);
}

static int commit_start(const start_params *p, const op_pos *pos, const char *why)
{
    char at[OP_POS_STRLEN];
    apply_status st = sink_set_checkpoint(p->snk, pos);
    if (st != APPLY_OK) {
        log_error("%s: committing the start position: %s", why, sink_error(p->snk));
        return st == APPLY_CONFIG ? EXIT_CONFIG : st == APPLY_FENCED ? EXIT_FENCED : EXIT_FAILURE_GENERIC;
    }
    log_notice("service '%s': %s; tailing starts after oplog entry %s", p->cfg->service, why,
               op_pos_format(pos, at, sizeof at));
    return -1;
}

/* A change stream's start: the checkpoint at pos, then, where the server gave one, the resume token of that position
 * committed over it (the same position: advance_checkpoint takes it). A crash between the two leaves the position
 * alone, from which the stream starts at the next clusterTime: the same place. */
static int commit_stream_start(const start_params *p, const op_pos *pos, const uint8_t *tok, size_t tok_len,
                               const char *why)
{
    char at[OP_POS_STRLEN];
    apply_status st = sink_set_checkpoint(p->snk, pos);
    if (st == APPLY_OK && tok != NULL) {
        sink_set_token(p->snk, tok, tok_len);
        st = sink_commit(p->snk, pos);
        sink_set_token(p->snk, NULL, 0);
    }
    if (st != APPLY_OK) {
        log_error("%s: committing the start position: %s", why, sink_error(p->snk));
        return st == APPLY_CONFIG ? EXIT_CONFIG : st == APPLY_FENCED ? EXIT_FENCED : EXIT_FAILURE_GENERIC;
    }
    log_notice("service '%s': %s; the change stream starts after clusterTime %s%s", p->cfg->service, why,
               op_pos_format(pos, at, sizeof at), tok != NULL ? ", from the server's resume token there" : "");
    return -1;
}

/* --skip-import with a change stream: where the stream stands now. */
static int skip_import_stream(const start_params *p)
{
    char err[512];
    mongoc_client_t *c = client_for(p->cfg, err, sizeof err);
    if (c == NULL) {
        log_error("--skip-import: %s", err);
        return EXIT_CONFIG;
    }
    op_pos start;
    uint8_t *tok = NULL;
    size_t tok_len = 0;
    bool retry = false;
    int rc;
    if (copy_stream_start(c, &start, &tok, &tok_len, &retry, err, sizeof err)) {
        rc = commit_stream_start(p, &start, tok, tok_len, "--skip-import: no initial copy");
    } else {
        log_error("--skip-import: %s", err);
        rc = retry ? EXIT_FAILURE_GENERIC : EXIT_CONFIG;
    }
    free(tok);
    mongoc_client_destroy(c);
    return rc;
}

/* --tail-from with a change stream: the position just before POS, once the server says it still holds the stream's
 * history from there. */
static int tail_from_stream(const start_params *p)
{
    char err[512], why[256], want[OP_POS_STRLEN];
    const op_pos *from = &p->opts->tail_from;
    op_pos_format(from, want, sizeof want);
    mongoc_client_t *c = client_for(p->cfg, err, sizeof err);
    if (c == NULL) {
        log_error("--tail-from: %s", err);
        return EXIT_CONFIG;
    }
    int rc;
    switch (stream_caps_start_at(c, from, why, sizeof why)) {
    case STREAM_START_OK: {
        char note[128];
        snprintf(note, sizeof note, "--tail-from %s", want);
        op_pos before = copy_pos_before(from);
        rc = commit_stream_start(p, &before, NULL, 0, note);
        break;
    }
    case STREAM_START_LOST:
        log_error("--tail-from %s is no longer in the server's change stream history (%s): the changes before its "
                  "oldest are lost; copy instead (run without --tail-from, or with --reimport)",
                  want, why);
        rc = EXIT_RESUME_LOST;
        break;
    case STREAM_START_REFUSED:
        log_error("--tail-from %s: no change stream opens there: %s", want, why);
        rc = EXIT_CONFIG;
        break;
    default:
        log_error("--tail-from %s: %s", want, why);
        rc = EXIT_FAILURE_GENERIC;
        break;
    }
    mongoc_client_destroy(c);
    return rc;
}

/* Up to the oplog's end as the copy finished, tailing replays inserts of rows the copy already wrote: runs keep their
 * rows and short runs upsert until there (sink_keep_rows_until), so each such replayed row falls back to an upsert
 * instead of costing its group a rewind. Without the position nothing is wrong, only slower. The sink reads the same
 * position from oplog2pg.copy_state when it connects, so a restart during the catch-up keeps it too. */
static void keep_rows_through_copy(const start_params *p, const op_pos *end)
{
    char at[OP_POS_STRLEN];
    if (end->secs == 0 && end->inc == 0) {
        log_debug("the oplog's end after the copy is not known: a replayed insert may cost a rewind");
        return;
    }
    sink_set_copy_end(p->snk, end);
    log_info("insert runs keep their rows up to oplog entry %s, the oplog's end after the copy: tailing meets rows "
             "the copy wrote until there",
             op_pos_format(end, at, sizeof at));
}

/* --skip-import: the newest entry, once there is one. */
static int skip_import(const start_params *p)
{
    char err[512];
    mongoc_client_t *c = client_for(p->cfg, err, sizeof err);
    if (c == NULL) {
        log_error("--skip-import: %s", err);
        return EXIT_CONFIG;
    }
    int rc = -1;
    bool logged = false;
    for (;;) {
        op_pos newest;
        bool found = false;
        if (oplog_newest_committed(c, p->cfg->read_concern == CONFIG_READ_MAJORITY, &newest, &found, err, sizeof err) &&
            found) {
            rc = commit_start(p, &newest, "--skip-import: no initial copy");
            break;
        }
        if (!logged) {
            log_notice("--skip-import: %s; waiting for the oplog's first entry", found ? err : "the oplog is empty");
            logged = true;
        }
        if (!signals_nap(1000)) {
            rc = EXIT_OK;
            break;
        }
    }
    mongoc_client_destroy(c);
    return rc;
}

/* --tail-from: the last entry before the position becomes the checkpoint. */
static int tail_from(const start_params *p)
{
    char err[512], at[OP_POS_STRLEN], want[OP_POS_STRLEN];
    const op_pos *from = &p->opts->tail_from;
    mongoc_client_t *c = client_for(p->cfg, err, sizeof err);
    if (c == NULL) {
        log_error("--tail-from: %s", err);
        return EXIT_CONFIG;
    }
    op_pos oldest, before;
    bool found = false, have_before = false;
    int rc = -1;
    if (!oplog_edge(c, 1, &oldest, &found, err, sizeof err)) {
        log_error("--tail-from: %s", err);
        rc = EXIT_FAILURE_GENERIC;
    } else if (!found || op_pos_cmp(from, &oldest) <= 0) {
        /* The entry before the start must still be there too, or entries between it and the start may be gone. */
        log_error("--tail-from %s is no longer in the oplog (its oldest entry is %s): the changes before the oldest "
                  "entry are lost; copy instead (run without --tail-from, or with --reimport)",
                  op_pos_format(from, want, sizeof want), found ? op_pos_format(&oldest, at, sizeof at) : "none");
        rc = EXIT_RESUME_LOST;
    } else if (!oplog_entry_before(c, from, &before, &have_before, err, sizeof err) || !have_before) {
        log_error("--tail-from: finding the entry before %s: %s", op_pos_format(from, want, sizeof want),
                  have_before ? err : "none found");
        rc = EXIT_FAILURE_GENERIC;
    } else {
        char why[128];
        snprintf(why, sizeof why, "--tail-from %s", op_pos_format(from, want, sizeof want));
        rc = commit_start(p, &before, why);
    }
    mongoc_client_destroy(c);
    return rc;
}

/* ---- a sharded cluster ---- */

/* The shards config.shards lists now, each with a client on its replica set. NULL with a message logged. */
typedef struct {
    shard_list sl;
    mongoc_client_t **clients;
} start_shards;

static void shards_close(start_shards *ss)
{
    for (size_t i = 0; ss->clients != NULL && i < ss->sl.n; i++)
        if (ss->clients[i] != NULL)
            mongoc_client_destroy(ss->clients[i]);
    free(ss->clients);
    shard_list_free(&ss->sl);
}

/* -1 when every shard has its client, else the exit code: a cluster that cannot be read now (unreachable, a
 * passing server error, no shard yet) is a failure the service manager retries; a refused login, a URI or shard
 * document that does not parse is the configuration's. */
static int shards_open(const start_params *p, const char *why, start_shards *ss)
{
    char err[512];
    memset(ss, 0, sizeof *ss);
    shard_discovery *sd = shard_discovery_open(p->cfg->mongodb_uri_effective, err, sizeof err);
    discover_status st = sd != NULL ? shard_discovery_list(sd, &ss->sl, err, sizeof err) : DISCOVER_BAD;
    shard_discovery_close(sd);
    if (st != DISCOVER_OK || ss->sl.n == 0) {
        log_error("%s: reading the cluster's shards: %s", why, st != DISCOVER_OK ? err : "config.shards is empty");
        shards_close(ss);
        return st == DISCOVER_REFUSED || st == DISCOVER_BAD ? EXIT_CONFIG : EXIT_FAILURE_GENERIC;
    }
    ss->clients = calloc(ss->sl.n, sizeof *ss->clients);
    for (size_t i = 0; ss->clients != NULL && i < ss->sl.n; i++) {
        mongo_client_opts o = {.appname = "oplog2pg-start"};
        ss->clients[i] = mongo_client_open(ss->sl.v[i].uri, &o, err, sizeof err);
        if (ss->clients[i] == NULL) {
            log_error("%s: shard '%s': %s", why, ss->sl.v[i].id, err);
            shards_close(ss);
            return EXIT_CONFIG;
        }
    }
    if (ss->clients == NULL) {
        log_error("%s: out of memory", why);
        shards_close(ss);
        return EXIT_FAILURE_GENERIC;
    }
    return -1;
}

/* One shard's start becomes its row, with its hosts as config.shards lists them now ("rs/h1:p,..."; NULL when it
 * no longer lists the shard), so a shard removed before the first session still has a place to be read at. */
static int commit_shard(const start_params *p, const start_shards *ss, const char *shard, const op_pos *pos,
                        const char *why)
{
    char hosts[1024];
    const char *h = NULL;
    for (size_t i = 0; i < ss->sl.n && h == NULL; i++)
        if (strcmp(ss->sl.v[i].id, shard) == 0 &&
            (size_t)snprintf(hosts, sizeof hosts, "%s/%s", ss->sl.v[i].rs, ss->sl.v[i].hosts) < sizeof hosts)
            h = hosts;
    if (sink_set_shard_checkpoint(p->snk, shard, pos, h) == APPLY_OK)
        return -1;
    log_error("%s: committing shard '%s''s start position: %s", why, shard, sink_error(p->snk));
    return EXIT_FAILURE_GENERIC;
}

/* --skip-import on a cluster: each shard from its newest entry, the cluster time at the newest of them. */
static int skip_import_sharded(const start_params *p)
{
    static const char why[] = "--skip-import: no initial copy";
    start_shards ss;
    int open_rc = shards_open(p, "--skip-import", &ss);
    if (open_rc >= 0)
        return open_rc;
    op_pos *newest = calloc(ss.sl.n, sizeof *newest);
    op_pos top = {0, 0, -1};
    int rc = newest != NULL ? -1 : EXIT_FAILURE_GENERIC;
    for (size_t i = 0; rc < 0 && i < ss.sl.n; i++) {
        char err[512];
        bool found = false, logged = false;
        while (!oplog_newest_committed(ss.clients[i], p->cfg->read_concern == CONFIG_READ_MAJORITY, &newest[i], &found,
                                       err, sizeof err) ||
               !found) {
            if (!logged)
                log_notice("--skip-import: shard '%s': %s; waiting for its oplog's first entry", ss.sl.v[i].id,
                           found ? err : "the oplog is empty");
            logged = true;
            if (!signals_nap(1000)) {
                rc = EXIT_OK;
                break;
            }
        }
        if (rc < 0 && op_pos_cmp(&newest[i], &top) > 0)
            top = newest[i];
    }
    if (rc < 0) {
        top.term = -1;
        rc = commit_start(p, &top, why);
    }
    for (size_t i = 0; rc < 0 && i < ss.sl.n; i++)
        rc = commit_shard(p, &ss, ss.sl.v[i].id, &newest[i], why);
    free(newest);
    shards_close(&ss);
    return rc;
}

/* --tail-from on a cluster: every shard's oplog must still hold the position; each shard's checkpoint goes to its
 * last entry before it (so that its reader starts there and checks it, as on a replica set), the cluster time just
 * before it. */
static int tail_from_sharded(const start_params *p)
{
    char why[128], want[OP_POS_STRLEN], at[OP_POS_STRLEN];
    const op_pos *from = &p->opts->tail_from;
    snprintf(why, sizeof why, "--tail-from %s", op_pos_format(from, want, sizeof want));
    start_shards ss;
    int open_rc = shards_open(p, "--tail-from", &ss);
    if (open_rc >= 0)
        return open_rc;
    op_pos *before = calloc(ss.sl.n, sizeof *before);
    int rc = before != NULL ? -1 : EXIT_FAILURE_GENERIC;
    for (size_t i = 0; rc < 0 && i < ss.sl.n; i++) {
        char err[512];
        op_pos oldest;
        bool found = false, have_before = false;
        if (!oplog_edge(ss.clients[i], 1, &oldest, &found, err, sizeof err)) {
            log_error("--tail-from: shard '%s': %s", ss.sl.v[i].id, err);
            rc = EXIT_FAILURE_GENERIC;
        } else if (!found || op_pos_cmp(from, &oldest) <= 0) {
            log_error("--tail-from %s is no longer in the oplog of shard '%s' (its oldest entry is %s): the changes "
                      "before it are lost there; copy instead (--reimport)",
                      want, ss.sl.v[i].id, found ? op_pos_format(&oldest, at, sizeof at) : "none");
            rc = EXIT_RESUME_LOST;
        } else if (!oplog_entry_before(ss.clients[i], from, &before[i], &have_before, err, sizeof err) ||
                   !have_before) {
            log_error("--tail-from: shard '%s': finding the entry before %s: %s", ss.sl.v[i].id, want,
                      have_before ? err : "none found");
            rc = EXIT_FAILURE_GENERIC;
        }
    }
    if (rc < 0) {
        op_pos cluster = *from;
        if (cluster.inc > 0)
            cluster.inc--;
        else {
            cluster.secs--;
            cluster.inc = UINT32_MAX;
        }
        cluster.term = -1;
        /* No checkpoint first (that takes every shard's row with it), then the cluster time, then each shard's. */
        if (sink_set_checkpoint(p->snk, NULL) != APPLY_OK) {
            log_error("%s: %s", why, sink_error(p->snk));
            rc = EXIT_FAILURE_GENERIC;
        } else {
            rc = commit_start(p, &cluster, why);
        }
    }
    for (size_t i = 0; rc < 0 && i < ss.sl.n; i++)
        rc = commit_shard(p, &ss, ss.sl.v[i].id, &before[i], why);
    free(before);
    shards_close(&ss);
    return rc;
}

int start_prepare(const start_params *p)
{
    char err[1024], at[OP_POS_STRLEN];
    const config *cfg = p->cfg;
    if (p->opts->reimport) {
        bool drop = cfg->copy_reimport == CONFIG_REIMPORT_DROP;
        log_notice("--reimport: forgetting service '%s''s checkpoint and copy, and %s its tables", cfg->service,
                   drop ? "dropping" : "emptying");
        if (!copy_reset(cfg->postgres_conninfo, cfg->service, p->filter, drop, err, sizeof err)) {
            log_error("--reimport: %s", err);
            return EXIT_FAILURE_GENERIC;
        }
        if (sink_set_checkpoint(p->snk, NULL) != APPLY_OK) {
            log_error("--reimport: %s", sink_error(p->snk));
            return EXIT_FAILURE_GENERIC;
        }
    }
    if (p->opts->have_tail_from)
        return p->change_stream ? tail_from_stream(p) : p->sharded ? tail_from_sharded(p) : tail_from(p);

    op_pos ckpt;
    int have = sink_read_checkpoint(p->snk, &ckpt);
    if (have < 0) {
        log_error("%s", sink_error(p->snk));
        return EXIT_FAILURE_GENERIC;
    }
    if (have == 1) {
        if (p->opts->import_only) {
            log_notice("--import-only: service '%s' already has a checkpoint (%s): nothing to copy", cfg->service,
                       op_pos_format(&ckpt, at, sizeof at));
            return EXIT_OK;
        }
        return -1;
    }
    if (p->opts->skip_import)
        return p->change_stream ? skip_import_stream(p) : p->sharded ? skip_import_sharded(p) : skip_import(p);
    /* A sharded cluster: the copy reads through the routers and notes each shard's start in its own oplog. */
    start_shards ss = {0};
    copy_shard *shards = NULL;
    if (p->sharded && !p->change_stream) {
        int open_rc = shards_open(p, "the initial copy", &ss);
        if (open_rc >= 0)
            return open_rc;
        shards = calloc(ss.sl.n, sizeof *shards);
        if (shards == NULL) {
            log_error("the initial copy: out of memory");
            shards_close(&ss);
            return EXIT_FAILURE_GENERIC;
        }
        for (size_t i = 0; i < ss.sl.n; i++)
            shards[i] = (copy_shard){.id = ss.sl.v[i].id, .uri = ss.sl.v[i].uri};
    }
    copy_shard_pos *starts = NULL;
    size_t nstarts = 0;
    uint8_t *start_token = NULL;
    size_t start_token_len = 0;
    copy_config cc = {
        .tick = p->tick,
        .tick_arg = p->tick_arg,
        .mongo_uri = cfg->mongodb_uri_effective,
        .pg_conninfo = cfg->postgres_conninfo,
        .service = cfg->service,
        .filter = p->filter,
        .maps = &cfg->maps,
        .workers = (int)cfg->copy_workers,
        .batch_docs = (uint32_t)cfg->copy_batch_docs,
        .window_warn_ms = cfg->copy_window_warning_ms,
        .progress_interval_ms = cfg->progress_interval_ms,
        .cancel = p->copy_cancel,
        .peer_timeout_s = (int)(cfg->postgres_peer_timeout_ms / 1000),
        .majority = cfg->read_concern == CONFIG_READ_MAJORITY,
        .shards = shards,
        .nshards = p->sharded && !p->change_stream ? ss.sl.n : 0,
        .shard_starts = &starts,
        .nshard_starts = &nstarts,
        .change_stream = p->change_stream,
        .start_token = &start_token,
        .start_token_len = &start_token_len,
    };
    op_pos start, end = {0};
    cc.end = &end;
    log_notice("service '%s' has no checkpoint: copying the included collections first%s", cfg->service,
               p->sharded ? " (through the cluster's routers)" : "");
    /* A copy that ends otherwise has handed over no token (copy_config.start_token). */
    copy_result r = copy_run(&cc, &start, err, sizeof err);
    free(shards);
    if (r != COPY_DONE)
        shards_close(&ss);
    switch (r) {
    case COPY_DONE: {
        /* The copy's start becomes the checkpoint: tailing replays everything since, checked like any resume. On a
         * cluster each shard's start becomes its row first, while the service has no checkpoint yet: a crash
         * between the two leaves a service without one, whose next start finds the copy finished and commits the
         * same rows again; the cluster time, the oldest of the starts, comes last. */
        int rc = -1;
        for (size_t i = 0; rc < 0 && i < nstarts; i++) {
            rc = commit_shard(p, &ss, starts[i].id, &starts[i].start, "initial copy complete");
            if (rc < 0)
                log_info("shard '%s' is tailed after its oplog entry %s, where the copy began", starts[i].id,
                         op_pos_format(&starts[i].start, at, sizeof at));
        }
        free(starts);
        shards_close(&ss);
        if (rc < 0)
            rc = p->change_stream
                     ? commit_stream_start(p, &start, start_token, start_token_len, "initial copy complete")
                     : commit_start(p, &start, "initial copy complete");
        free(start_token);
        if (rc >= 0)
            return rc;
        if (p->opts->import_only)
            return EXIT_OK;
        keep_rows_through_copy(p, &end);
        return -1;
    }
    case COPY_CANCELLED:
        log_notice("initial copy stopped; its progress is committed and the next start continues it");
        return EXIT_OK;
    case COPY_WINDOW_LOST:
        log_error("%s", err);
        return EXIT_COPY_WINDOW;
    case COPY_REFUSED:
        log_error("initial copy stopped: %s", err);
        return EXIT_CONFIG;
    case COPY_UNSUPPORTED:
        log_error("initial copy stopped: %s", err);
        return EXIT_UNSUPPORTED;
    default:
        log_error("initial copy failed: %s", err);
        return EXIT_FAILURE_GENERIC;
    }
}

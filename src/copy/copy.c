/*
 * copy.c — the initial copy of every included collection into PostgreSQL (see copy.h for the contract); its
 * coordinator. The parts are listed in copy_internal.h.
 *
 * NOTES
 * - The coordinator (the caller's thread) plans or resumes the copy, starts the workers, and then only watches:
 *   progress lines, the oplog window (oldest entry versus the copy's start), the cancel flag. Workers share nothing
 *   but the job list (under `mu`) and their atomic counters.
 * - A worker copies one collection at a time: find sorted by _id, from the committed last _id with the find options
 *   min/hint (inclusive, full BSON order, so an _id of another type than the last one is never skipped, as a
 *   {$gt: X} filter would do), the documents with the last committed _id skipped (its key text: two documents of
 *   one _id, a sharded collection's whose shard key is not _id, are one row and dead letters, committed together,
 *   worker.c). Each batch is one PostgreSQL transaction: the binary COPY of the rows, then the progress row (last
 *   _id, count), then COMMIT.
 * - A sharded cluster (copy_config.shards) is read through its routers, from one start per shard, each noted in its
 *   own oplog and watched by the window guard there (shards.c).
 * - A worker is two threads, so that MongoDB and PostgreSQL work at the same time: the reading thread (worker.c: the
 *   cursor, the rendering or projection) fills a batch while the writing thread (writer.c: the connection, the
 *   transaction) commits the one before. They share two batches, handed over in order: a worker holds at most two
 *   batches of rows, and a batch that fails takes the one read after it with it (read again from the committed
 *   last _id).
 * - A COPY meeting an existing _id (a table left by an attempt whose progress was not committed, or rows the oplog
 *   replay of an earlier run put there) is rolled back and the batch is sent again as upserts: for a jsonb table
 *   through a temporary staging table and INSERT ... ON CONFLICT (_id) DO UPDATE, the same upsert the sink uses; for
 *   a typed map's tables, the upserts of their records (writer.c).
 * - Any error while copying a collection drops the uncommitted rows and restarts from the committed last _id. A row
 *   PostgreSQL refuses as data: the documents of the failed batch are then written one at a time, each behind a
 *   savepoint, the refused ones set aside in oplog2pg.dead_letter (worker.c, writer.c), and batches resume after
 *   them. A passing error (MongoDB's or PostgreSQL's, by their one classification each): with backoff for as long
 *   as it takes. Anything else ends the copy at once (COPY_REFUSED when the operator must act, else COPY_FAILED).
 */
#include "copy/copy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "copy_internal.h"
#include "source/oplog_edge.h"
#include "util/clock.h"
#include "util/log.h"

/* ---------------------------------------------------------------------------------------------------------------- */
/* pure helpers */

const char *copy_format_duration(double secs, char *buf, size_t len)
{
    if (!isfinite(secs) || secs < 0) {
        snprintf(buf, len, "?");
        return buf;
    }
    uint64_t s = (uint64_t)(secs + 0.5);
    if (s < 60)
        snprintf(buf, len, "%us", (unsigned)s);
    else if (s < 3600)
        snprintf(buf, len, "%um%02us", (unsigned)(s / 60), (unsigned)(s % 60));
    else if (s < 86400)
        snprintf(buf, len, "%uh%02um", (unsigned)(s / 3600), (unsigned)(s % 3600 / 60));
    else
        snprintf(buf, len, "%llud%02uh", (unsigned long long)(s / 86400), (unsigned)(s % 86400 / 3600));
    return buf;
}

double copy_eta_seconds(int64_t done, int64_t total, double rate)
{
    if (done >= total)
        return 0;
    if (!(rate > 0))
        return -1;
    return (double)(total - done) / rate;
}

const char *copy_result_name(copy_result r)
{
    switch (r) {
    case COPY_DONE:
        return "copied";
    case COPY_CANCELLED:
        return "cancelled";
    case COPY_WINDOW_LOST:
        return "oplog window lost";
    case COPY_FAILED:
        return "failed";
    case COPY_REFUSED:
        return "refused by PostgreSQL";
    case COPY_UNSUPPORTED:
        return "cannot be copied exactly";
    }
    return "?";
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* the coordinator */

/* Documents committed, the estimated total, and (left may be NULL) collections not finished: for the progress
 * lines and copy_config.tick. */
static void copy_totals(run_ctx *rc, int64_t *copied, int64_t *total, size_t *left)
{
    size_t unfinished = 0;
    *copied = *total = 0;
    pthread_mutex_lock(&rc->mu);
    for (size_t i = 0; i < rc->njobs; i++) {
        job *j = &rc->jobs[i];
        int64_t c = atomic_load(&j->live_copied);
        *copied += c;
        *total += j->state == JOB_FINISHED ? c : (j->estimate > c ? j->estimate : c);
        unfinished += j->state != JOB_FINISHED;
    }
    pthread_mutex_unlock(&rc->mu);
    if (left != NULL)
        *left = unfinished;
}

static void log_progress(run_ctx *rc, double started, int64_t base_total)
{
    double now = clock_s();
    int64_t total, copied;
    char eta[32], r2[32];
    copy_totals(rc, &copied, &total, NULL);
    pthread_mutex_lock(&rc->mu);
    for (size_t i = 0; i < rc->njobs; i++) {
        job *j = &rc->jobs[i];
        int64_t c = atomic_load(&j->live_copied);
        int64_t est = j->estimate > c ? j->estimate : c;
        if (j->state != JOB_RUNNING)
            continue;
        double secs = now - j->run_started;
        double rate = secs > 0 ? (double)(c - j->run_base) / secs : 0;
        log_info("copy: %s.%s %lld/%lld documents (%.0f%%), %.0f docs/s, ETA %s", j->db, j->coll, (long long)c,
                 (long long)est, est > 0 ? 100.0 * (double)c / (double)est : 100.0, rate,
                 copy_format_duration(copy_eta_seconds(c, est, rate), eta, sizeof eta));
    }
    pthread_mutex_unlock(&rc->mu);
    double secs = now - started;
    double rate = secs > 0 ? (double)(copied - base_total) / secs : 0;
    log_info("copy: total %lld/%lld documents (%.0f%%), %.0f docs/s, elapsed %s, ETA %s", (long long)copied,
             (long long)total, total > 0 ? 100.0 * (double)copied / (double)total : 100.0, rate,
             copy_format_duration(secs, r2, sizeof r2),
             copy_format_duration(copy_eta_seconds(copied, total, rate), eta, sizeof eta));
}

/* 1 fine, 0 window lost (err set), -1 could not check (err set; the caller logs and tries again later). */
static int window_check(run_ctx *rc, mongoc_client_t *client, double *last_warn, double eta, char *err, size_t errlen)
{
    if (rc->nshards > 0)
        return copy_shards_window(rc, eta, err, errlen);
    if (rc->cfg->change_stream)
        return copy_stream_window(rc, client, err, errlen);
    op_pos oldest;
    bool found;
    if (!oplog_edge(client, 1, &oldest, &found, err, errlen))
        return -1;
    char s[OP_POS_STRLEN], o[OP_POS_STRLEN];
    op_pos_format(&rc->start, s, sizeof s);
    if (!found || op_pos_cmp(&oldest, &rc->start) > 0) {
        if (found)
            op_pos_format(&oldest, o, sizeof o);
        else
            snprintf(o, sizeof o, "none");
        snprintf(err, errlen,
                 "the oplog no longer holds the copy's start; raise the oplog size or copy fewer collections at once "
                 "(copy start %s, oldest oplog entry %s). The committed progress is kept, but resuming this copy "
                 "cannot make it consistent either: raise the oplog size, then start over with --reimport",
                 s, o);
        return 0;
    }
    int64_t margin_ms = ((int64_t)rc->start.secs - (int64_t)oldest.secs) * 1000;
    double now = clock_s();
    if (margin_ms < rc->cfg->window_warn_ms && (*last_warn == 0 || now - *last_warn >= WINDOW_WARN_EVERY)) {
        char m[32], e[32], l[32];
        op_pos_format(&oldest, o, sizeof o);
        log_warning("copy: the oplog window margin is %s (oldest entry %s, copy start %s), under the configured %s; "
                    "the copy needs %s%s more. If the oplog rolls past the copy's start the copy fails: raise "
                    "the oplog size",
                    copy_format_duration((double)margin_ms / 1000.0, m, sizeof m), o, s,
                    copy_format_duration((double)rc->cfg->window_warn_ms / 1000.0, l, sizeof l),
                    eta < 0 ? "" : "about ", eta < 0 ? "an unknown time" : copy_format_duration(eta, e, sizeof e));
        *last_warn = now;
    }
    return 1;
}

static double overall_eta(run_ctx *rc, double started, int64_t base_total)
{
    int64_t total = 0, copied = 0;
    pthread_mutex_lock(&rc->mu);
    for (size_t i = 0; i < rc->njobs; i++) {
        int64_t c = atomic_load(&rc->jobs[i].live_copied);
        copied += c;
        total += rc->jobs[i].estimate > c ? rc->jobs[i].estimate : c;
    }
    pthread_mutex_unlock(&rc->mu);
    double secs = clock_s() - started;
    return copy_eta_seconds(copied, total, secs > 0 ? (double)(copied - base_total) / secs : 0);
}

/* How many times a plan is made again because a collection was renamed while it was made. */
#define PLAN_TRIES 10

/* The copy's start (the newest entry, majority-committed where reads are) and the collections to copy. A collection
 * renamed between the two is listed under its new name, and the oplog replay from the start would apply that rename
 * onto the copied table: the target's table is replaced by the source's, which the copy never wrote, and the
 * documents read under the new name are lost. A drop or a create in that stretch is harmless (the replay drops what
 * the copy wrote and inserts it all again, or finds the table there). So after the listing, the oplog from the start
 * to its newest entry is read, and if it holds a rename, the plan is made again from a later start. */
static bool plan_from_start(run_ctx *rc, mongoc_client_t *mongo, plan *p, char *m, size_t mlen)
{
    for (int attempt = 1;; attempt++) {
        bool found, renamed;
        op_pos listed;
        if (rc->nshards > 0) {
            /* A sharded cluster: each shard's start in its own oplog, the collections listed through the routers. */
            if (!copy_shards_note_starts(rc, m, mlen) ||
                !copy_plan_collections(mongo, rc->cfg->filter, COPY_BUCKETS_TAKE, p, m, mlen) ||
                !copy_shards_renamed(rc, &renamed, m, mlen))
                return false;
        } else if (rc->cfg->change_stream) {
            /* No oplog to read: the start from a change stream, and the renames from the stream's rename events up
             * to where it stands after the listing (stream.c). */
            bool retry = false;
            free(rc->start_token);
            rc->start_token = NULL;
            if (!copy_stream_start(mongo, &rc->start, &rc->start_token, &rc->start_token_len, &retry, m, mlen)) {
                rc->start_refused = !retry;
                return false;
            }
            if (!copy_plan_collections(mongo, rc->cfg->filter, COPY_BUCKETS_LEAVE_NOTICE, p, m, mlen) ||
                !copy_stream_start(mongo, &listed, NULL, NULL, &retry, m, mlen) ||
                !copy_stream_renamed(mongo, &rc->start, &listed, &renamed, m, mlen))
                return false;
        } else {
            if (!oplog_newest_committed(mongo, rc->cfg->majority, &rc->start, &found, m, mlen))
                return false;
            if (!found) {
                snprintf(m, mlen, "the oplog is empty: there is no position to tail from after the copy");
                return false;
            }
            if (!copy_plan_collections(mongo, rc->cfg->filter, COPY_BUCKETS_TAKE, p, m, mlen) ||
                !oplog_edge(mongo, -1, &listed, &found, m, mlen) ||
                !oplog_renames_between(mongo, &rc->start, &listed, &renamed, m, mlen))
                return false;
        }
        if (!renamed)
            return true;
        free(p->items);
        *p = (plan){0};
        if (attempt == PLAN_TRIES) {
            snprintf(m, mlen,
                     "collections were renamed each of the %d times the copy listed them; a copy listed while a "
                     "rename happens cannot be made exact: start again when the renames have ended",
                     PLAN_TRIES);
            return false;
        }
        log_info("copy: a collection was renamed while the copy listed the collections; listing them again from a "
                 "later start");
        clock_sleep_ms(100 * (uint64_t)attempt); /* with majority reads, the commit point passes the rename */
    }
}

copy_result copy_run(const copy_config *cfg, op_pos *start, char *err, size_t errlen)
{
    run_ctx rc = {.cfg = cfg, .result = COPY_DONE};
    pthread_mutex_init(&rc.mu, NULL);
    pthread_mutex_init(&rc.ddl_mu, NULL);
    atomic_init(&rc.stop, false);
    atomic_init(&rc.workers_running, 0);
    rc.batch_docs = cfg->batch_docs ? cfg->batch_docs : DEFAULT_BATCH_DOCS;
    copy_result result = COPY_FAILED;
    apply_status fault = APPLY_OK; /* of the coordinator's connect */
    pgconn *pg = NULL;
    mongoc_client_t *mongo = NULL;
    pthread_t *threads = NULL;
    int nthreads = 0;
    plan p = {0};
    char m[ERRLEN + 700];
    m[0] = '\0';

    mongoc_init(); /* idempotent */
    if (cfg->service == NULL || cfg->service[0] == '\0' || cfg->mongo_uri == NULL || cfg->pg_conninfo == NULL) {
        snprintf(m, sizeof m, "copy: service, MongoDB URI and PostgreSQL conninfo are required");
        goto fail;
    }
    pg = copy_pg_open(cfg->pg_conninfo, cfg->peer_timeout_s, m, sizeof m, &fault);
    if (pg == NULL)
        goto fail;
    mongo = copy_mongo_connect(cfg->mongo_uri, m, sizeof m);
    if (mongo == NULL)
        goto fail;

    bool finished = false;
    int have = copy_state_load(pg, cfg->service, &rc.start, &finished, m, sizeof m);
    if (have < 0)
        goto fail;
    int shards_ok = have == 1 ? copy_shards_load(pg, &rc, m, sizeof m) : 1;
    if (shards_ok < 0)
        goto fail;
    if (shards_ok == 0) {
        result = COPY_UNSUPPORTED;
        goto report;
    }
    char pos[OP_POS_STRLEN];
    if (have == 0) {
        if ((cfg->nshards > 0 && !copy_shards_open(&rc, m, sizeof m)) ||
            !plan_from_start(&rc, mongo, &p, m, sizeof m) || !copy_plan_store(pg, cfg->service, &rc, &p, m, sizeof m))
            goto fail;
        int64_t est = 0;
        for (size_t i = 0; i < p.n; i++)
            est += p.items[i].estimate;
        log_info("copy: service %s starts a copy of %zu collections (about %lld documents) from %s position %s",
                 cfg->service, p.n, (long long)est, cfg->change_stream ? "change stream" : "oplog",
                 op_pos_format(&rc.start, pos, sizeof pos));
        for (size_t i = 0; i < rc.nshards; i++)
            log_info("copy: shard '%s' is tailed from its oplog entry %s once the copy is done", rc.shards[i].id,
                     op_pos_format(&rc.shards[i].start, pos, sizeof pos));
    } else if (finished) {
        if (!copy_shards_export(&rc)) {
            snprintf(m, sizeof m, "out of memory");
            goto fail;
        }
        *start = rc.start;
        log_info("copy: service %s: the copy already finished (start %s)", cfg->service,
                 op_pos_format(&rc.start, pos, sizeof pos));
        result = COPY_DONE;
        goto out;
    } else {
        log_info("copy: service %s resumes its copy (start %s)", cfg->service,
                 op_pos_format(&rc.start, pos, sizeof pos));
    }
    if (!copy_jobs_load(pg, cfg->service, &rc.jobs, &rc.njobs, m, sizeof m))
        goto fail;

    double started = clock_s(), last_warn = 0;
    int64_t base_total = 0;
    size_t pending = 0;
    for (size_t i = 0; i < rc.njobs; i++) {
        base_total += rc.jobs[i].copied;
        pending += !rc.jobs[i].done;
    }
    int wr = window_check(&rc, mongo, &last_warn, -1, m, sizeof m);
    if (wr == 0) {
        result = COPY_WINDOW_LOST;
        goto report;
    }
    if (wr < 0)
        goto fail;

    int nw = cfg->workers > 0 ? cfg->workers : 1;
    if ((size_t)nw > pending)
        nw = (int)pending;
    threads = calloc(nw > 0 ? (size_t)nw : 1, sizeof *threads);
    if (threads == NULL) {
        snprintf(m, sizeof m, "out of memory");
        goto fail;
    }
    for (int i = 0; i < nw; i++) {
        atomic_fetch_add(&rc.workers_running, 1);
        if (pthread_create(&threads[i], NULL, copy_worker_main, &rc) != 0) {
            atomic_fetch_sub(&rc.workers_running, 1);
            copy_run_fail(&rc, COPY_FAILED, "cannot start a copy worker thread");
            break;
        }
        nthreads++;
    }
    double next_progress = cfg->progress_interval_ms > 0 ? started + (double)cfg->progress_interval_ms / 1000.0 : 0;
    double next_window = started + WINDOW_CHECK_MS / 1000.0;
    while (atomic_load(&rc.workers_running) > 0) {
        clock_sleep_ms(50);
        if (cfg->tick != NULL) {
            int64_t copied, total;
            size_t left;
            copy_totals(&rc, &copied, &total, &left);
            cfg->tick(cfg->tick_arg, copied, total, left);
        }
        double now = clock_s();
        if (next_progress > 0 && now >= next_progress) {
            log_progress(&rc, started, base_total);
            next_progress = now + (double)cfg->progress_interval_ms / 1000.0;
        }
        if (now >= next_window && !atomic_load(&rc.stop)) {
            char we[ERRLEN + 400];
            int w = window_check(&rc, mongo, &last_warn, overall_eta(&rc, started, base_total), we, sizeof we);
            if (w == 0)
                copy_run_fail(&rc, COPY_WINDOW_LOST, we);
            else if (w < 0)
                log_warning("copy: cannot check the oplog window: %s", we);
            next_window = clock_s() + WINDOW_CHECK_MS / 1000.0;
        }
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(threads[i], NULL);

    if (rc.result != COPY_DONE) {
        result = rc.result;
        snprintf(m, sizeof m, "%s", rc.err);
        goto report;
    }
    size_t left = 0;
    for (size_t i = 0; i < rc.njobs; i++)
        left += !rc.jobs[i].done;
    if (left > 0) {
        result = COPY_CANCELLED;
        snprintf(m, sizeof m, "the copy was cancelled with %zu collections left; it resumes at the next start", left);
        log_progress(&rc, started, base_total);
        goto report;
    }
    /* Finished: one last window check, so a copy is never declared done from a start the oplog no longer holds. */
    wr = window_check(&rc, mongo, &last_warn, 0, m, sizeof m);
    if (wr == 0) {
        result = COPY_WINDOW_LOST;
        goto report;
    }
    if (wr < 0)
        goto fail;
    /* With it, the oplog's end now: tailing meets rows the copy wrote until it passes there (the sink reads it at
     * connect and upserts up to it; sink_keep_rows_until). Unknown, nothing is wrong, only slower. */
    op_pos end = {0};
    bool have_end = false;
    char es[3][24];
    if (rc.nshards > 0) {
        /* Each shard's end, and the newest of them as the copy's: the merged stream compares its entries' ts. */
        if (!copy_shards_record_ends(pg, &rc, &end, &have_end, m, sizeof m))
            goto fail;
    } else if (cfg->change_stream) {
        bool retry;
        have_end = copy_stream_start(mongo, &end, NULL, NULL, &retry, m, sizeof m);
        if (!have_end)
            log_debug("copy: the change stream's position after the copy is not known: %s", m);
    } else if (!oplog_newest_committed(mongo, cfg->majority, &end, &have_end, m, sizeof m)) {
        log_debug("copy: the oplog's end after the copy is not known: %s", m);
        have_end = false;
    }
    if (have_end && cfg->end != NULL)
        *cfg->end = end;
    snprintf(es[0], sizeof es[0], "%u", end.secs);
    snprintf(es[1], sizeof es[1], "%u", end.inc);
    snprintf(es[2], sizeof es[2], "%lld", (long long)end.term);
    const char *fp[4] = {cfg->service, have_end ? es[0] : NULL, have_end ? es[1] : NULL,
                         have_end && end.term >= 0 ? es[2] : NULL};
    PGresult *r = copy_query_params(pg,
                                    "UPDATE oplog2pg.copy_state SET finished_at = now(), end_sec = $2, end_inc = $3, "
                                    "end_term = $4 WHERE service = $1",
                                    4, fp, NULL, NULL, 0);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok) {
        snprintf(m, sizeof m, "recording the end of the copy: %s", copy_pg_error(pg));
        copy_trim_nl(m);
        goto fail;
    }
    {
        double secs = clock_s() - started;
        int64_t total = 0;
        for (size_t i = 0; i < rc.njobs; i++)
            total += rc.jobs[i].copied;
        char d[32];
        log_info("copy: service %s copied %zu collections, %lld documents (%lld in this run) in %s, %.0f docs/s; "
                 "tailing from %s",
                 cfg->service, rc.njobs, (long long)total, (long long)(total - base_total),
                 copy_format_duration(secs, d, sizeof d), secs > 0 ? (double)(total - base_total) / secs : 0.0,
                 op_pos_format(&rc.start, pos, sizeof pos));
    }
    if (!copy_shards_export(&rc)) {
        snprintf(m, sizeof m, "out of memory");
        goto fail;
    }
    *start = rc.start;
    if (cfg->start_token != NULL) {
        *cfg->start_token = rc.start_token; /* handed over: NULL when the start was noted in an earlier run */
        *cfg->start_token_len = rc.start_token_len;
        rc.start_token = NULL;
    }
    result = COPY_DONE;
    goto out;

fail:
    result = fault == APPLY_CONFIG || (pg != NULL && pg->last.status == APPLY_CONFIG) || rc.start_refused ? COPY_REFUSED
                                                                                                          : COPY_FAILED;
report:
    snprintf(err, errlen, "%s", m);
    if (result == COPY_CANCELLED)
        log_notice("copy: %s", m);
    else
        log_error("copy: %s", m);
out:
    free(threads);
    free(rc.start_token);
    copy_jobs_free(rc.jobs, rc.njobs);
    free(p.items);
    copy_shards_free(&rc);
    if (mongo != NULL)
        mongoc_client_destroy(mongo);
    pgconn_close(pg);
    pthread_mutex_destroy(&rc.mu);
    pthread_mutex_destroy(&rc.ddl_mu);
    return result;
}

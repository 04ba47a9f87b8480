/*
 * report.c — what the apply loop (daemon/apply.c) tells about itself: the metrics snapshot (daemon/metrics.h), the
 * STATUS line and READY=1 systemd shows (daemon/notify.h), and the progress line in the log.
 *
 * NOTES
 * - The counters are the committed work only: a group rolled back (a lost connection) is applied again by the next
 *   session. The batcher and the source live as long as a session, so their counters are folded into d->totals when
 *   it ends (report_close_session); the sink lives as long as the run, so its counters are totals already.
 * - Nothing here acts on the loop: these functions read daemon_ctx and write only the reporting fields (rate, tick
 *   and quiet-source bookkeeping, READY sent, the committed position they refresh from the batcher).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "apply_internal.h"
#include "daemon/notify.h"
#include "util/log.h"

/* Bring d->committed up to the batcher's last commit (it starts as the checkpoint read at session start). */
void report_refresh_committed(daemon_ctx *d)
{
    if (d->bt != NULL && batcher_get_stats(d->bt)->committed.secs != 0)
        d->committed = batcher_get_stats(d->bt)->committed;
}

/* Seconds the committed position is behind the oplog: 0 once everything read is committed and the reader found
 * the oplog drained; otherwise the age of the last committed entry. */
static double current_lag(const daemon_ctx *d)
{
    if (d->caught_up || d->committed.secs == 0)
        return 0;
    double lag = (double)time(NULL) - (double)d->committed.secs;
    return lag < 0 ? 0 : lag;
}

/* What the source has seen: entries and idle markers, for the quiet-source STATUS. */
static uint64_t source_seen(const daemon_ctx *d, uint64_t *reconnects)
{
    *reconnects = 0;
    if (d->cl != NULL) {
        reader_stats rs;
        cluster_reader_totals(d->cl, &rs);
        *reconnects = rs.reconnects;
        return rs.entries + rs.idles;
    }
    if (d->rd != NULL || d->srd != NULL) {
        reader_stats rs;
        if (d->rd != NULL)
            reader_get_stats(d->rd, &rs);
        else
            stream_get_stats(d->srd, &rs);
        *reconnects = rs.reconnects;
        return rs.entries + rs.idles;
    }
    if (d->dump != NULL) {
        dump_stats ds;
        dump_get_stats(d->dump, &ds);
        return ds.entries + ds.skipped;
    }
    return 0;
}

/* The oldest entry still needed, as `status` counts it: the checkpoint, or the first entry of the transaction open
 * there (its hold) when that is older: it is read again from there at the commit. */
static const op_pos *needed_entry(const op_pos *pos, bool has_hold, const op_pos *hold)
{
    return has_hold && op_pos_cmp(hold, pos) < 0 ? hold : pos;
}

typedef struct {
    metrics_snapshot *m;
    op_pos oldest[METRICS_MAX_SHARDS]; /* each shard's oldest oplog entry, where m->shards[i].window_known */
} shard_rows_ctx;

static void shard_row(void *arg, const char *shard, const op_pos *pos, bool has_hold, const op_pos *hold)
{
    shard_rows_ctx *rc = arg;
    metrics_snapshot *m = rc->m;
    for (size_t i = 0; i < m->nshards; i++)
        if (strcmp(m->shards[i].id, shard) == 0) {
            m->shards[i].checkpoint_timestamp = (double)pos->secs;
            if (m->shards[i].window_known) {
                m->shards[i].margin_known = true;
                m->shards[i].margin_seconds =
                    (double)needed_entry(pos, has_hold, hold)->secs - (double)rc->oldest[i].secs;
            }
        }
}

/* Which oplogs the window probe reads: the replica set's while an oplog reader runs, each shard's while a sharded
 * cluster's readers run, none with a change stream or a dump (no oplog to read). Between sessions, and during an
 * initial copy, the last list stays. */
static void probe_targets(daemon_ctx *d)
{
    const char *ids[METRICS_MAX_SHARDS], *uris[METRICS_MAX_SHARDS];
    size_t n = 0;
    if (d->wprobe == NULL)
        return;
    if (d->cl != NULL) {
        cluster_shard_info si;
        for (size_t i = 0; i < cluster_shard_count(d->cl) && n < METRICS_MAX_SHARDS; i++) {
            if (!cluster_shard_report(d->cl, i, &si))
                break;
            ids[n] = si.id;
            uris[n++] = si.uri;
        }
    } else if (d->rd != NULL) {
        ids[0] = "";
        uris[n++] = d->cfg->mongodb_uri_effective;
    } else if (d->srd == NULL && d->dump == NULL) {
        return;
    }
    window_probe_set_targets(d->wprobe, ids, uris, n);
}

/* The replica set's oplog window and margin (a sharded cluster's are per shard: fill_shards). */
static void fill_window(daemon_ctx *d, metrics_snapshot *m)
{
    op_pos oldest, newest, hold;
    m->window_known = m->margin_known = false;
    if (d->cl != NULL || !window_probe_get(d->wprobe, "", &oldest, &newest))
        return;
    m->window_known = true;
    m->window_seconds = (double)newest.secs - (double)oldest.secs;
    if (d->committed.secs == 0)
        return;
    bool has_hold = sink_read_hold(d->snk, &hold);
    m->margin_known = true;
    m->margin_seconds = (double)needed_entry(&d->committed, has_hold, &hold)->secs - (double)oldest.secs;
}

/* A sharded cluster's shards: what the session's readers, merge and note writers say, and each one's committed
 * checkpoint as the sink keeps it. The counters are the session's (a new session starts them again). */
static void fill_shards(daemon_ctx *d, metrics_snapshot *m)
{
    m->nshards = 0;
    for (size_t i = 0; i < cluster_shard_count(d->cl) && m->nshards < METRICS_MAX_SHARDS; i++) {
        cluster_shard_info si;
        if (!cluster_shard_report(d->cl, i, &si))
            break;
        metrics_shard *ms = &m->shards[m->nshards++];
        memset(ms, 0, sizeof *ms);
        snprintf(ms->id, sizeof ms->id, "%s", si.id);
        ms->read_timestamp = si.has_read ? (double)si.read_last.secs : 0;
        ms->merge_wait_seconds = (double)si.waited_ms / 1000.0;
        ms->entries = si.entries;
        ms->notes = si.notes;
        ms->notes_refused = si.notes_refused;
    }
    if (m->nshards > 0) {
        shard_rows_ctx rc = {.m = m};
        for (size_t i = 0; i < m->nshards; i++) {
            op_pos newest;
            metrics_shard *ms = &m->shards[i];
            ms->window_known = window_probe_get(d->wprobe, ms->id, &rc.oldest[i], &newest);
            ms->window_seconds = ms->window_known ? (double)newest.secs - (double)rc.oldest[i].secs : 0;
        }
        sink_read_shard_checkpoints(d->snk, shard_row, &rc);
    }
}

/* The counters of the whole run so far: the sessions that ended plus the running one. */
static void fill_snapshot(daemon_ctx *d, metrics_snapshot *m)
{
    *m = d->totals;
    snprintf(m->service, sizeof m->service, "%s", d->cfg->service);
    if (d->bt != NULL) {
        const batcher_stats *bs = batcher_get_stats(d->bt);
        /* Committed work only: a group rolled back (a lost connection) is applied again by the next session. */
        m->entries_applied += bs->committed_entries;
        for (int k = 0; k <= OP_TRUNCATE; k++) {
            int mk = k == OP_INSERT   ? METRICS_OP_INSERT
                     : k == OP_UPDATE ? METRICS_OP_UPDATE
                     : k == OP_DELETE ? METRICS_OP_DELETE
                     : k == OP_NOOP   ? METRICS_OP_NOOP
                                      : METRICS_OP_DDL;
            m->ops_applied[mk] += bs->committed_ops[k];
        }
        _Static_assert((int)FLUSH_TRIGGERS == (int)METRICS_FLUSH_TRIGGERS &&
                           (int)FLUSH_TABLES == (int)METRICS_FLUSH_TABLES,
                       "core/batcher.h's flush triggers and daemon/metrics.h's labels are in the same order");
        for (int t = 0; t < FLUSH_TRIGGERS && t < METRICS_FLUSH_TRIGGERS; t++)
            m->flushes[t] += bs->flushes[t];
        m->commits += bs->commits;
    }
    report_refresh_committed(d);
    uint64_t reconnects;
    source_seen(d, &reconnects);
    m->mongo_reconnects += reconnects;
    if (d->rd != NULL || d->cl != NULL) {
        reader_stats rs;
        if (d->cl != NULL)
            cluster_reader_totals(d->cl, &rs);
        else
            reader_get_stats(d->rd, &rs);
        m->txn_open = rs.txn_open;
        m->txn_bytes = rs.txn_bytes;
        double age = rs.txn_open > 0 ? (double)time(NULL) - (double)rs.txn_oldest.secs : 0;
        m->txn_oldest_age = age > 0 ? age : 0;
    }
    /* The sink lives as long as the run: its counters are already totals. */
    const sink_stats *ss = sink_get_stats(d->snk);
    m->rows_written[METRICS_WRITE_COPY] = ss->rows_copied;
    m->rows_written[METRICS_WRITE_INSERT] = ss->rows_inserted;
    m->rows_written[METRICS_WRITE_UPDATE] = ss->updates;
    m->rows_written[METRICS_WRITE_DELETE] = ss->deletes;
    m->bytes_written = ss->bytes;
    m->dup_fallbacks = ss->dup_fallbacks;
    m->rewinds = ss->rewinds;
    m->unnamed = ss->unnamed;
    m->dead_letters = ss->dead_letters;
    m->ts_bucket_ops = ss->ts_bucket_ops;
    m->ts_rows = ss->ts_rows;
    m->ts_bucket_reads = ss->ts_bucket_reads;
    m->pg_reconnects = d->pg_reconnects;
    m->reconcile_passes = d->reconcile_passes;
    m->reconcile_deleted = d->reconcile_deleted;
    m->queue_depth = d->cl != NULL ? cluster_queued_ops(d->cl) : d->q != NULL ? queue_ops(d->q) : 0;
    m->queue_capacity = (uint64_t)d->cfg->queue_size;
    m->checkpoint_timestamp = d->committed.secs;
    m->lag_seconds = current_lag(d);
    m->copy_documents = d->copy_copied;
    m->copy_documents_estimate = d->copy_estimate;
    probe_targets(d);
    fill_window(d, m);
    fill_shards(d, m);
    m->ready = d->session_live && d->end == END_NONE;
}

/* Fold the ending session's counters into the totals (the batcher and source go away with it). */
void report_close_session(daemon_ctx *d)
{
    metrics_snapshot m;
    fill_snapshot(d, &m);
    d->totals.entries_applied = m.entries_applied;
    memcpy(d->totals.ops_applied, m.ops_applied, sizeof m.ops_applied);
    memcpy(d->totals.flushes, m.flushes, sizeof m.flushes);
    d->totals.commits = m.commits;
    d->totals.mongo_reconnects = m.mongo_reconnects;
}

void report_publish(daemon_ctx *d)
{
    if (d->metrics == NULL)
        return;
    metrics_snapshot m;
    fill_snapshot(d, &m);
    metrics_publish(d->metrics, &m);
}

/* The source answered (an entry or an idle marker): MongoDB is reachable and the resume point checked. */
void report_live(daemon_ctx *d)
{
    d->session_live = true;
    report_publish(d); /* oplog2pg_ready turns 1 now, not at the next tick (a scrape meanwhile read the copy's 0) */
    if (!d->ready_sent) {
        d->ready_sent = true;
        notify_ready();
        log_info("ready: PostgreSQL connected, checkpoint read, %s", d->dump ? "dump open" : "oplog cursor open");
    }
}

/* The counters of the whole run so far, published to the metrics endpoint (when there is one); *m gets them. */
void report_snapshot(daemon_ctx *d, metrics_snapshot *m)
{
    fill_snapshot(d, m);
    if (d->metrics != NULL)
        metrics_publish(d->metrics, m);
}

/* The tick's rate and the STATUS line systemd shows, from the snapshot m just taken. */
void report_status(daemon_ctx *d, ev_tstamp now, const metrics_snapshot *m)
{
    double secs = now - d->last_tick;
    d->rate = secs > 0 ? (double)(m->entries_applied - d->entries_at_tick) / secs : 0;
    d->entries_at_tick = m->entries_applied;
    d->last_tick = now;

    uint64_t reconnects;
    uint64_t seen = source_seen(d, &reconnects);
    if (seen != d->reader_seen_at_tick || !d->session_live)
        d->reader_quiet_since = now;
    d->reader_seen_at_tick = seen;

    char at[OP_POS_STRLEN];
    if (!d->session_live)
        notify_status("connecting to MongoDB and checking the resume point");
    else if (now - d->reader_quiet_since > 5.0 && d->dump == NULL)
        notify_status("tailing: no answer from MongoDB for %.0f s (retrying); committed through %s",
                      now - d->reader_quiet_since, op_pos_format(&d->committed, at, sizeof at));
    else if (d->careful)
        notify_status("setting aside ops PostgreSQL refused: applying one at a time up to %s",
                      op_pos_format(&d->careful_until.until, at, sizeof at));
    else if (m->lag_seconds <= 0)
        notify_status("%s: caught up, %.0f entries/s, committed through %s", d->dump ? "replaying" : "tailing", d->rate,
                      op_pos_format(&d->committed, at, sizeof at));
    else
        notify_status("%s: %.0f s behind, %.0f entries/s, queue %llu ops", d->dump ? "replaying" : "tailing",
                      m->lag_seconds, d->rate, (unsigned long long)m->queue_depth);
}

/* The progress line in the log (every [logging] progress_interval). */
void report_progress(daemon_ctx *d, ev_tstamp now)
{
    const batcher_stats *bs = batcher_get_stats(d->bt);
    double secs = now - d->last_progress;
    double rate = secs > 0 ? (double)(bs->entries - d->applied_at_last_progress) / secs : 0;
    char at[OP_POS_STRLEN];
    report_refresh_committed(d);
    log_info("applied %llu entries (%.0f/s), %llu commits; committed through %s, %.0f s behind; queue %zu ops, %zu "
             "bytes",
             (unsigned long long)bs->entries, rate, (unsigned long long)bs->commits,
             op_pos_format(&d->committed, at, sizeof at), current_lag(d),
             d->cl != NULL ? cluster_queued_ops(d->cl) : queue_ops(d->q), d->q != NULL ? queue_bytes(d->q) : 0);
    for (size_t i = 0; i < cluster_shard_count(d->cl); i++) {
        cluster_shard_info si;
        char read[OP_POS_STRLEN];
        if (!cluster_shard_report(d->cl, i, &si))
            break;
        log_info("shard '%s': read through %s, %llu entries applied, the merge waited on it %.1f s in all%s; %llu "
                 "oplog notes%s",
                 si.id, si.has_read ? op_pos_format(&si.read_last, read, sizeof read) : "nothing yet",
                 (unsigned long long)si.entries, (double)si.waited_ms / 1000.0, si.holding ? " (waiting now)" : "",
                 (unsigned long long)si.notes, si.notes_refused ? " (refused: waiting for its periodic noops)" : "");
    }
    d->applied_at_last_progress = bs->entries;
    d->last_progress = now;
}

/*
 * daemon.c — the apply loop: wires the reader thread, the queue, the batcher and the PostgreSQL sink together on a
 * libev loop, and owns the process's life (signals, reconnects, the exit code).
 *
 * NOTES
 * One session of the loop runs from a PostgreSQL connection to its loss. It reads the committed checkpoint, starts a
 * reader there, and applies what the reader queues. Every failure that a retry can cure (PostgreSQL gone, MongoDB
 * gone: the reader retries that one itself) ends the session without committing anything further; the next session
 * starts again from the committed checkpoint, so nothing is lost and nothing applied twice. Failures a person must
 * see (the resume point lost, an entry that cannot be applied, the service fenced) stop the process with a distinct
 * exit code, after committing everything before the bad entry.
 *
 * Signals are loop events (ev_signal). The first SIGTERM/SIGINT stops the reader, writes and commits what was taken,
 * and exits 0; from then on a plain handler makes a second signal exit at once, which is safe because a commit is
 * atomic. SIGHUP re-reads the configuration file and applies the reloadable options.
 */
#include "daemon/daemon.h"

#include <ev.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mongoc/mongoc.h>

#include "core/batcher.h"
#include "core/nsfilter.h"
#include "core/queue.h"
#include "daemon/exitcodes.h"
#include "daemon/logsetup.h"
#include "daemon/metrics.h"
#include "daemon/notify.h"
#include "map/ejson.h"
#include "sink/pg.h"
#include "source/copy.h"
#include "source/decode.h"
#include "source/oplog_edge.h"
#include "source/reader.h"
#include "util/log.h"

#define ITEMS_PER_WAKE 1024 /* queue items applied before the loop looks at signals and timers again */
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define FENCE_WAIT_MS  15000 /* how long a start waits for another holder of the service to go away */

#define TICK_S 1.0 /* STATUS line, metrics snapshot and watchdog period (shorter when the watchdog needs it) */

typedef enum {
    END_NONE = 0,
    END_STOP,      /* SIGTERM/SIGINT: flush, commit, exit 0 */
    END_FATAL,     /* exit with exit_code */
    END_RECONNECT, /* PostgreSQL failed: new session from the committed checkpoint */
    END_CAREFUL,   /* PostgreSQL refused an op: new session from the checkpoint, stepping over refused ops */
} session_end;

typedef struct {
    config *cfg;
    const char *config_path;
    struct ev_loop *loop;
    ev_async wake;
    ev_timer flush_timer, progress_timer, tick_timer;
    ev_signal sig_term, sig_int, sig_hup;

    nsfilter *filter;
    sink *snk;
    batcher *bt;
    queue *q;
    reader *rd;

    session_end end;
    int exit_code;
    bool have_tail_from;
    op_pos tail_from;
    uint64_t applied_at_last_progress;
    ev_tstamp last_progress;

    /* Careful mode ([replication] on_error = dead-letter): after PostgreSQL refused an op, the next session applies
     * the entries up to careful_until one at a time and sets refused ones aside (see batcher.h). */
    bool careful;
    op_pos careful_until;
    op_pos last_taken; /* the last entry handed to the batcher */

    /* What systemd, `status` and the metrics see. */
    bool ready_sent;   /* READY=1 went out */
    bool session_live; /* the reader has answered in this session */
    bool caught_up;    /* the last queue item was an idle marker and everything is committed */
    op_pos committed;  /* the committed checkpoint (from PostgreSQL at session start, then from the batcher) */
    uint64_t entries_at_tick, reader_seen_at_tick;
    ev_tstamp last_tick, reader_quiet_since;
    double rate; /* entries applied per second over the last tick */
    metrics_server *metrics;
    metrics_snapshot totals; /* counters of the sessions that ended (the running one is added at publish time) */
    uint64_t pg_reconnects;
    int64_t copy_copied, copy_estimate;
} daemon_ctx;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static batcher_config batcher_config_from(const config *cfg, bool careful)
{
    batcher_config bc = {
        .batch_rows = (uint64_t)cfg->batch_rows,
        .batch_bytes = (uint64_t)cfg->batch_bytes,
        .flush_interval_ms = (uint64_t)cfg->flush_interval_ms,
        .per_op = cfg->apply_mode == CONFIG_APPLY_PER_OP,
        .careful = careful,
    };
    return bc;
}

static nsfilter *make_filter(const config *cfg)
{
    char err[256];
    nsfilter *f =
        nsfilter_new((const char *const *)cfg->include.items, (const char *const *)cfg->exclude.items, err, sizeof err);
    if (f == NULL)
        log_error("namespace filter: %s", err);
    return f;
}

static sink *make_sink(const config *cfg)
{
    sink_config sc = {
        .conninfo = cfg->postgres_conninfo,
        .service = cfg->service,
        .per_op = cfg->apply_mode == CONFIG_APPLY_PER_OP,
    };
    return sink_new(&sc);
}

/* Connect to PostgreSQL, retrying connection failures with backoff. Returns the exit code to stop with, or -1 when
 * connected. `stop` is polled between attempts (a signal during the wait). */
static int connect_sink(sink *s, const volatile sig_atomic_t *stop)
{
    unsigned backoff = BACKOFF_MIN_MS, fenced_ms = 0;
    for (;;) {
        sink_status st = sink_connect(s);
        if (st == SINK_OK)
            return -1;
        if (st == SINK_ERR_FENCED) {
            /* A session of a daemon that was just killed can hold the lock until PostgreSQL notices the closed
             * socket; a live rival holds it for good. Wait out the first, give up on the second. */
            if (fenced_ms >= FENCE_WAIT_MS) {
                log_error("%s", sink_error(s));
                return EXIT_FENCED;
            }
            if (fenced_ms == 0) {
                log_warning("%s; waiting up to %d s for it to go away", sink_error(s), FENCE_WAIT_MS / 1000);
                notify_status("waiting for another oplog2pg to release the service");
            }
            for (unsigned slept = 0; slept < 250; slept += 50) {
                if (stop && *stop)
                    return EXIT_OK;
                notify_watchdog();
                usleep(50 * 1000);
            }
            fenced_ms += 250;
            continue;
        }
        if (st != SINK_ERR_CONNECTION) {
            log_error("%s", sink_error(s));
            return EXIT_FAILURE_GENERIC;
        }
        log_warning("%s; retrying in %u ms", sink_error(s), backoff);
        notify_status("reconnecting to PostgreSQL: %s", sink_error(s));
        for (unsigned slept = 0; slept < backoff; slept += 50) {
            if (stop && *stop)
                return EXIT_OK;
            notify_watchdog();
            usleep(50 * 1000);
        }
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* the loop's callbacks */

static void end_session(daemon_ctx *d, session_end why, int code)
{
    if (d->end == END_NONE || why == END_FATAL) {
        d->end = why;
        d->exit_code = code;
    }
    ev_break(d->loop, EVBREAK_ALL);
}

/* A sink failure: retryable ones end the session, the others the process. */
static void on_sink_failure(daemon_ctx *d, sink_status st)
{
    switch (st) {
    case SINK_ERR_CONNECTION:
        log_warning("%s; reconnecting and resuming from the committed checkpoint", sink_error(d->snk));
        end_session(d, END_RECONNECT, 0);
        break;
    case SINK_ERR_FENCED:
        log_error("%s", sink_error(d->snk));
        end_session(d, END_FATAL, EXIT_FENCED);
        break;
    default:
        if (!d->careful) {
            /* The group failed as a whole: find the op, committing each entry before it on its own. */
            char until[OP_POS_STRLEN];
            bool dl = d->cfg->on_error == CONFIG_ON_ERROR_DEAD_LETTER;
            d->careful_until = d->last_taken;
            log_warning("%s", sink_error(d->snk)[0] ? sink_error(d->snk) : "applying an oplog entry failed");
            log_warning("finding the op PostgreSQL refused: going back to the last commit and applying the entries "
                        "up to %s one at a time, %s ([replication] on_error = %s)",
                        op_pos_format(&d->careful_until, until, sizeof until),
                        dl ? "setting refused ones aside" : "to commit everything before it and stop there",
                        config_on_error_name(d->cfg->on_error));
            end_session(d, END_CAREFUL, 0);
            break;
        }
        log_error("%s", sink_error(d->snk)[0] ? sink_error(d->snk) : "applying an oplog entry failed");
        log_error("stopped; everything before this entry is committed. Fix the cause and start oplog2pg again: it "
                  "resumes at this entry%s",
                  d->careful ? "" : " (or set [replication] on_error = dead-letter to set such ops aside)");
        end_session(d, END_FATAL, EXIT_FAILURE_GENERIC);
        break;
    }
}

static void arm_flush_timer(daemon_ctx *d)
{
    uint64_t deadline = batcher_deadline(d->bt);
    if (deadline == UINT64_MAX) {
        ev_timer_stop(d->loop, &d->flush_timer);
        return;
    }
    if (ev_is_active(&d->flush_timer))
        return;
    uint64_t now = now_ms();
    double in = deadline > now ? (double)(deadline - now) / 1000.0 : 0.0;
    ev_timer_set(&d->flush_timer, in, 0.0);
    ev_timer_start(d->loop, &d->flush_timer);
}

static void leave_careful_if_past(daemon_ctx *d)
{
    const batcher_stats *bs = batcher_get_stats(d->bt);
    if (op_pos_cmp(&bs->committed, &d->careful_until) < 0)
        return;
    char at[OP_POS_STRLEN];
    d->careful = false;
    sink_set_per_op(d->snk, d->cfg->apply_mode == CONFIG_APPLY_PER_OP);
    batcher_config bc = batcher_config_from(d->cfg, false);
    batcher_set_config(d->bt, &bc);
    log_notice("stepped past oplog entry %s (%llu op(s) set aside in oplog2pg.dead_letter so far): back to batched "
               "apply",
               op_pos_format(&d->careful_until, at, sizeof at),
               (unsigned long long)sink_get_stats(d->snk)->dead_letters);
}

/* Bring d->committed up to the batcher's last commit (it starts as the checkpoint read at session start). */
static void refresh_committed(daemon_ctx *d)
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
        for (int t = 0; t < FLUSH_TRIGGERS && t < METRICS_FLUSH_TRIGGERS; t++)
            m->flushes[t] += bs->flushes[t];
        m->commits += bs->commits;
    }
    refresh_committed(d);
    if (d->rd != NULL) {
        reader_stats rs;
        reader_get_stats(d->rd, &rs);
        m->mongo_reconnects += rs.reconnects;
    }
    /* The sink lives as long as the run: its counters are already totals. */
    const sink_stats *ss = sink_get_stats(d->snk);
    m->rows_written[METRICS_WRITE_COPY] = ss->rows_copied;
    m->rows_written[METRICS_WRITE_INSERT] = ss->rows_inserted;
    m->rows_written[METRICS_WRITE_UPDATE] = ss->updates;
    m->rows_written[METRICS_WRITE_DELETE] = ss->deletes;
    m->bytes_written = ss->bytes;
    m->dup_fallbacks = ss->dup_fallbacks;
    m->dead_letters = ss->dead_letters;
    m->pg_reconnects = d->pg_reconnects;
    m->queue_depth = d->q != NULL ? queue_ops(d->q) : 0;
    m->queue_capacity = (uint64_t)d->cfg->queue_size;
    m->checkpoint_timestamp = d->committed.secs;
    m->lag_seconds = current_lag(d);
    m->copy_documents = d->copy_copied;
    m->copy_documents_estimate = d->copy_estimate;
    m->ready = d->session_live && d->end == END_NONE;
}

/* Fold the ending session's counters into the totals (the batcher and reader go away with it). */
static void close_session_counters(daemon_ctx *d)
{
    metrics_snapshot m;
    fill_snapshot(d, &m);
    d->totals.entries_applied = m.entries_applied;
    memcpy(d->totals.ops_applied, m.ops_applied, sizeof m.ops_applied);
    memcpy(d->totals.flushes, m.flushes, sizeof m.flushes);
    d->totals.commits = m.commits;
    d->totals.mongo_reconnects = m.mongo_reconnects;
}

static void publish(daemon_ctx *d)
{
    if (d->metrics == NULL)
        return;
    metrics_snapshot m;
    fill_snapshot(d, &m);
    metrics_publish(d->metrics, &m);
}

/* The reader answered (an entry or an idle marker): MongoDB is reachable and the resume point checked. */
static void session_is_live(daemon_ctx *d)
{
    d->session_live = true;
    if (!d->ready_sent) {
        d->ready_sent = true;
        notify_ready();
        log_info("ready: PostgreSQL connected, checkpoint read, oplog cursor open");
    }
}

/* Every TICK_S: STATUS line, metrics, watchdog. */
static void on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
    daemon_ctx *d = w->data;
    (void)revents;
    notify_watchdog();
    ev_tstamp now = ev_now(loop);
    metrics_snapshot m;
    fill_snapshot(d, &m);
    if (d->metrics != NULL)
        metrics_publish(d->metrics, &m);

    double secs = now - d->last_tick;
    d->rate = secs > 0 ? (double)(m.entries_applied - d->entries_at_tick) / secs : 0;
    d->entries_at_tick = m.entries_applied;
    d->last_tick = now;

    uint64_t seen = 0;
    if (d->rd != NULL) {
        reader_stats rs;
        reader_get_stats(d->rd, &rs);
        seen = rs.entries + rs.idles;
    }
    if (seen != d->reader_seen_at_tick || !d->session_live)
        d->reader_quiet_since = now;
    d->reader_seen_at_tick = seen;

    char at[OP_POS_STRLEN];
    if (!d->session_live)
        notify_status("connecting to MongoDB and checking the resume point");
    else if (now - d->reader_quiet_since > 5.0)
        notify_status("tailing: no answer from MongoDB for %.0f s (retrying); committed through %s",
                      now - d->reader_quiet_since, op_pos_format(&d->committed, at, sizeof at));
    else if (d->careful)
        notify_status("setting aside ops PostgreSQL refused: applying one at a time up to %s",
                      op_pos_format(&d->careful_until, at, sizeof at));
    else if (m.lag_seconds <= 0)
        notify_status("tailing: caught up, %.0f entries/s, committed through %s", d->rate,
                      op_pos_format(&d->committed, at, sizeof at));
    else
        notify_status("tailing: %.0f s behind, %.0f entries/s, queue %llu ops", m.lag_seconds, d->rate,
                      (unsigned long long)m.queue_depth);
}

static void on_wake(struct ev_loop *loop, ev_async *w, int revents)
{
    daemon_ctx *d = w->data;
    queue_item items[64];
    size_t done = 0;
    (void)loop;
    (void)revents;

    while (d->end == END_NONE && done < ITEMS_PER_WAKE) {
        size_t n = queue_pop_all(d->q, items, sizeof items / sizeof items[0]);
        if (n == 0)
            break;
        for (size_t i = 0; i < n; i++) {
            queue_item *it = &items[i];
            if (d->end != END_NONE) {
                queue_item_clear(it);
                continue;
            }
            sink_status st = SINK_OK;
            switch (it->type) {
            case QUEUE_ENTRY:
                d->caught_up = false;
                d->last_taken = it->entry->pos;
                st = batcher_add(d->bt, it->entry, now_ms());
                if (st == SINK_OK)
                    st = batcher_tick(d->bt, now_ms());
                if (st == SINK_OK && d->careful)
                    leave_careful_if_past(d);
                break;
            case QUEUE_IDLE:
                /* The reader drained the oplog; we have caught up with it only if nothing follows the marker. While
                 * the applier lags, markers are stale and committing on each would cost an fsync per getMore. */
                if (i + 1 == n && queue_len(d->q) == 0) {
                    st = batcher_flush(d->bt, FLUSH_IDLE);
                    d->caught_up = st == SINK_OK;
                }
                break;
            case QUEUE_FATAL:
                /* Everything before the entry the reader stopped at is good: commit it, then stop. */
                st = batcher_flush(d->bt, FLUSH_EXIT);
                log_error("%s", it->message ? it->message : "the oplog reader stopped");
                if (st == SINK_OK)
                    end_session(d, END_FATAL, it->exit_code);
                break;
            }
            queue_item_clear(it);
            if (st != SINK_OK)
                on_sink_failure(d, st);
        }
        done += n;
        if (!d->session_live && d->end == END_NONE)
            session_is_live(d);
    }
    if (d->end == END_NONE) {
        if (done >= ITEMS_PER_WAKE)
            ev_async_send(d->loop, &d->wake); /* more to do: come back after signals and timers had their turn */
        arm_flush_timer(d);
    }
}

static void on_flush_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    daemon_ctx *d = w->data;
    (void)loop;
    (void)revents;
    sink_status st = batcher_tick(d->bt, now_ms());
    if (st != SINK_OK) {
        on_sink_failure(d, st);
        return;
    }
    arm_flush_timer(d);
}

static void on_progress(struct ev_loop *loop, ev_timer *w, int revents)
{
    daemon_ctx *d = w->data;
    (void)revents;
    const batcher_stats *bs = batcher_get_stats(d->bt);
    ev_tstamp now = ev_now(loop);
    double secs = now - d->last_progress;
    double rate = secs > 0 ? (double)(bs->entries - d->applied_at_last_progress) / secs : 0;
    char at[OP_POS_STRLEN];
    refresh_committed(d);
    log_info("applied %llu entries (%.0f/s), %llu commits; committed through %s, %.0f s behind; queue %zu ops",
             (unsigned long long)bs->entries, rate, (unsigned long long)bs->commits,
             op_pos_format(&d->committed, at, sizeof at), current_lag(d), queue_ops(d->q));
    d->applied_at_last_progress = bs->entries;
    d->last_progress = now;
}

static void exit_now(int sig)
{
    (void)sig;
    static const char msg[] = "oplog2pg: second signal, exiting at once (the last commit stands)\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    _exit(EXIT_FAILURE_GENERIC);
}

static void on_stop_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    daemon_ctx *d = w->data;
    (void)revents;
    log_notice("%s received: stopping the reader, then committing what was read", strsignal(w->signum));
    notify_stopping();
    notify_status("stopping: committing what was read");
    /* A second signal must not wait for the flush: from now on the kernel calls exit_now directly. */
    ev_signal_stop(loop, &d->sig_term);
    ev_signal_stop(loop, &d->sig_int);
    struct sigaction sa = {.sa_handler = exit_now};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigset_t unblock;
    sigemptyset(&unblock);
    sigaddset(&unblock, SIGTERM);
    sigaddset(&unblock, SIGINT);
    pthread_sigmask(SIG_UNBLOCK, &unblock, NULL);
    end_session(d, END_STOP, EXIT_OK);
}

static void log_reload(void *arg, const char *msg)
{
    (void)arg;
    log_notice("reload: %s", msg);
}

static void on_hup(struct ev_loop *loop, ev_signal *w, int revents)
{
    daemon_ctx *d = w->data;
    (void)loop;
    (void)revents;
    char err[512];
    int changed = 0;
    if (d->config_path == NULL) {
        log_warning("SIGHUP: no configuration file to reload");
        return;
    }
    notify_reloading();
    if (!config_reload(d->config_path, d->cfg, err, sizeof err, log_reload, NULL, &changed)) {
        log_error("SIGHUP: keeping the running configuration: %s", err);
        notify_ready();
        return;
    }
    logsetup_apply(d->cfg);
    batcher_config bc = batcher_config_from(d->cfg, d->careful);
    batcher_set_config(d->bt, &bc);
    ev_timer_stop(d->loop, &d->progress_timer);
    if (d->cfg->progress_interval_ms > 0) {
        double every = (double)d->cfg->progress_interval_ms / 1000.0;
        ev_timer_set(&d->progress_timer, every, every);
        ev_timer_start(d->loop, &d->progress_timer);
    }
    log_notice("configuration reloaded from %s (%d option%s changed)", d->config_path, changed,
               changed == 1 ? "" : "s");
    notify_ready();
}

static void notify_wake(void *arg)
{
    daemon_ctx *d = arg;
    ev_async_send(d->loop, &d->wake);
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* run */

/* One session: from a fresh PostgreSQL connection until it fails, a stop, or a fatal fault. */
static void run_session(daemon_ctx *d)
{
    op_pos start = {0, 0, -1};
    int have = sink_read_checkpoint(d->snk, &start);
    if (have < 0) {
        on_sink_failure(d, SINK_ERR_CONNECTION);
        return;
    }
    char at[OP_POS_STRLEN];
    bool inclusive = false;
    if (have == 1)
        d->committed = start;
    d->session_live = false;
    d->caught_up = false;
    if (d->careful && (have != 1 || op_pos_cmp(&start, &d->careful_until) >= 0))
        d->careful = false; /* the refused op was committed past meanwhile (another run, or --reimport) */
    if (d->careful) {
        char until[OP_POS_STRLEN];
        log_notice("applying oplog entries after %s up to %s one at a time, setting aside what PostgreSQL refuses",
                   op_pos_format(&start, at, sizeof at), op_pos_format(&d->careful_until, until, sizeof until));
    }
    if (d->have_tail_from) {
        /* --tail-from applies to the first session only: once it commits, the checkpoint takes over. */
        start = d->tail_from;
        have = 1;
        inclusive = true;
        d->have_tail_from = false;
        log_notice("service '%s': tailing from oplog position %s (--tail-from)", d->cfg->service,
                   op_pos_format(&start, at, sizeof at));
    } else if (have) {
        log_info("service '%s': resuming after oplog entry %s (term %lld)", d->cfg->service,
                 op_pos_format(&start, at, sizeof at), (long long)start.term);
    }

    batcher_config bc = batcher_config_from(d->cfg, d->careful);
    sink_set_per_op(d->snk, d->careful || d->cfg->apply_mode == CONFIG_APPLY_PER_OP);
    batcher_sink out =
        d->cfg->on_error == CONFIG_ON_ERROR_STOP ? batcher_sink_pg_stop(d->snk) : batcher_sink_pg(d->snk);
    d->bt = batcher_new(&bc, &out);
    d->q = queue_new((size_t)d->cfg->queue_size);
    if (d->bt == NULL || d->q == NULL) {
        log_error("out of memory starting the apply loop");
        d->end = END_FATAL;
        d->exit_code = EXIT_FAILURE_GENERIC;
        return;
    }
    queue_set_notify(d->q, notify_wake, d);

    reader_config rc;
    reader_config_init(&rc);
    rc.uri = d->cfg->mongodb_uri_effective;
    rc.have_start = have == 1;
    rc.start = start;
    rc.start_inclusive = inclusive;
    rc.filter = d->filter;
    char err[512];
    d->rd = reader_start(&rc, d->q, err, sizeof err);
    if (d->rd == NULL) {
        log_error("cannot start reading the oplog: %s", err);
        d->end = END_FATAL;
        d->exit_code = EXIT_CONFIG;
        return;
    }

    d->end = END_NONE;
    ev_async_start(d->loop, &d->wake);
    ev_async_send(d->loop, &d->wake); /* anything queued before the notify was set */
    ev_run(d->loop, 0);

    reader_stop(d->rd);
    ev_timer_stop(d->loop, &d->flush_timer);
    ev_async_stop(d->loop, &d->wake);
    d->session_live = false;
    if (d->end == END_STOP) {
        /* Entries still queued are simply not applied: the checkpoint will say so and the next run reads them. */
        sink_status st = batcher_flush(d->bt, FLUSH_EXIT);
        if (st != SINK_OK) {
            log_error("final commit failed: %s (the previous commit stands; nothing is lost)", sink_error(d->snk));
            d->exit_code = EXIT_FAILURE_GENERIC;
        } else {
            const batcher_stats *bs = batcher_get_stats(d->bt);
            log_notice("stopped cleanly; committed through oplog entry %s",
                       op_pos_format(&bs->committed, at, sizeof at));
        }
    }
}

static void end_of_session_cleanup(daemon_ctx *d)
{
    close_session_counters(d);
    reader_free(d->rd);
    d->rd = NULL;
    queue_free(d->q);
    d->q = NULL;
    batcher_free(d->bt);
    d->bt = NULL;
}

static volatile sig_atomic_t stop_requested;
static atomic_bool copy_cancel; /* lock-free on every platform oplog2pg builds on: safe to set from a handler */

static void on_signal_during_connect(int sig)
{
    (void)sig;
    stop_requested = 1;
    atomic_store(&copy_cancel, true);
}

/* The oldest and newest oplog entries (0 when the oplog is empty). False with err when MongoDB cannot be read. */
static bool oplog_edges(const char *uri_text, uint64_t *oldest, uint64_t *newest, char *err, size_t errlen)
{
    bson_error_t berr;
    bool ok = true;
    *oldest = *newest = 0;
    mongoc_uri_t *uri = mongoc_uri_new_with_error(uri_text, &berr);
    mongoc_client_t *client = uri ? mongoc_client_new_from_uri(uri) : NULL;
    if (client == NULL) {
        snprintf(err, errlen, "bad MongoDB URI: %s", berr.message);
        ok = false;
        goto done;
    }
    mongoc_client_set_appname(client, "oplog2pg-probe");
    for (int dir = 0; dir < 2 && ok; dir++) {
        op_pos p;
        bool found;
        ok = oplog_edge(client, dir == 0 ? 1 : -1, &p, &found, err, errlen);
        if (ok && found)
            *(dir == 0 ? oldest : newest) = (uint64_t)p.secs << 32 | p.inc;
    }
done:
    if (client)
        mongoc_client_destroy(client);
    if (uri)
        mongoc_uri_destroy(uri);
    return ok;
}

static op_pos pos_from_ts(uint64_t ts)
{
    op_pos p = {(uint32_t)(ts >> 32), (uint32_t)ts, -1};
    return p;
}

bool daemon_parse_position(const char *text, op_pos *out)
{
    char *end;
    out->term = -1;
    unsigned long long secs = strtoull(text, &end, 10);
    if (end != text && *end == ':') {
        unsigned long long inc = strtoull(end + 1, &end, 10);
        if (*end == '\0' && secs <= UINT32_MAX && inc <= UINT32_MAX) {
            out->secs = (uint32_t)secs;
            out->inc = (uint32_t)inc;
            return true;
        }
        return false;
    }
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    end = strptime(text, "%Y-%m-%dT%H:%M:%S", &tm);
    if (end == NULL || (*end != '\0' && strcmp(end, "Z") != 0))
        return false;
    time_t t = timegm(&tm);
    if (t < 0 || (unsigned long long)t > UINT32_MAX)
        return false;
    out->secs = (uint32_t)t;
    out->inc = 0;
    return true;
}

/* The initial copy's coordinator calls this about every 50 ms. */
static void copy_tick(void *arg, int64_t copied, int64_t estimate, size_t left)
{
    daemon_ctx *d = arg;
    notify_watchdog();
    d->copy_copied = copied;
    d->copy_estimate = estimate;
    double pct = estimate > 0 ? 100.0 * (double)copied / (double)estimate : 0;
    notify_status("copying: %.0f%% (%lld of ~%lld documents), %zu collection%s left", pct > 100 ? 100 : pct,
                  (long long)copied, (long long)estimate, left, left == 1 ? "" : "s");
    publish(d);
}

/* Before the first session: --reimport, the initial copy, --tail-from's check. Returns -1 to go on tailing, or the
 * exit code to stop with. */
static int prepare_start(daemon_ctx *d, const daemon_options *opts)
{
    char err[1024], at[OP_POS_STRLEN];
    config *cfg = d->cfg;
    if (opts->reimport) {
        bool drop = cfg->copy_reimport == CONFIG_REIMPORT_DROP;
        log_notice("--reimport: forgetting service '%s''s checkpoint and copy, and %s its tables", cfg->service,
                   drop ? "dropping" : "emptying");
        if (!copy_reset(cfg->postgres_conninfo, cfg->service, d->filter, drop, err, sizeof err)) {
            log_error("--reimport: %s", err);
            return EXIT_FAILURE_GENERIC;
        }
        if (sink_clear_checkpoint(d->snk) != SINK_OK) {
            log_error("--reimport: %s", sink_error(d->snk));
            return EXIT_FAILURE_GENERIC;
        }
    }
    if (opts->have_tail_from) {
        uint64_t oldest, newest;
        if (!oplog_edges(cfg->mongodb_uri_effective, &oldest, &newest, err, sizeof err)) {
            log_error("--tail-from: %s", err);
            return EXIT_FAILURE_GENERIC;
        }
        op_pos first = pos_from_ts(oldest);
        /* The entry before the start must still be there too, or entries between it and the start may be gone. */
        if (oldest == 0 || op_pos_cmp(&opts->tail_from, &first) <= 0) {
            char want[OP_POS_STRLEN];
            log_error("--tail-from %s is no longer in the oplog (its oldest entry is %s): the changes before the "
                      "oldest entry are lost; copy instead (run without --tail-from, or with --reimport)",
                      op_pos_format(&opts->tail_from, want, sizeof want),
                      oldest ? op_pos_format(&first, at, sizeof at) : "none: it is empty");
            return EXIT_RESUME_LOST;
        }
        d->have_tail_from = true;
        d->tail_from = opts->tail_from;
        return -1;
    }

    op_pos ckpt;
    int have = sink_read_checkpoint(d->snk, &ckpt);
    if (have < 0) {
        log_error("%s", sink_error(d->snk));
        return EXIT_FAILURE_GENERIC;
    }
    if (have == 1) {
        if (opts->import_only) {
            log_notice("--import-only: service '%s' already has a checkpoint (%s): nothing to copy", cfg->service,
                       op_pos_format(&ckpt, at, sizeof at));
            return EXIT_OK;
        }
        return -1;
    }
    if (opts->skip_import) {
        log_notice("--skip-import: no initial copy; tailing starts at the newest oplog entry");
        return -1;
    }

    copy_config cc = {
        .tick = copy_tick,
        .tick_arg = d,
        .mongo_uri = cfg->mongodb_uri_effective,
        .pg_conninfo = cfg->postgres_conninfo,
        .service = cfg->service,
        .filter = d->filter,
        .workers = (int)cfg->copy_workers,
        .batch_docs = (uint32_t)cfg->copy_batch_docs,
        .window_warn_ms = cfg->copy_window_warning_ms,
        .progress_interval_ms = cfg->progress_interval_ms,
        .cancel = &copy_cancel,
    };
    op_pos start;
    log_notice("service '%s' has no checkpoint: copying the included collections first", cfg->service);
    copy_result r = copy_run(&cc, &start, err, sizeof err);
    switch (r) {
    case COPY_DONE:
        /* The copy's start becomes the checkpoint: tailing replays everything since, checked like any resume. */
        if (sink_commit(d->snk, &start) != SINK_OK) {
            log_error("committing the copy's start point: %s", sink_error(d->snk));
            return EXIT_FAILURE_GENERIC;
        }
        log_notice("initial copy complete; tailing from oplog entry %s", op_pos_format(&start, at, sizeof at));
        return opts->import_only ? EXIT_OK : -1;
    case COPY_CANCELLED:
        log_notice("initial copy stopped; its progress is committed and the next start continues it");
        return EXIT_OK;
    case COPY_WINDOW_LOST:
        log_error("%s", err);
        return EXIT_COPY_WINDOW;
    default:
        log_error("initial copy failed: %s", err);
        return EXIT_FAILURE_GENERIC;
    }
}

int daemon_run(config *cfg, const char *config_path, const daemon_options *opts)
{
    daemon_ctx d = {.cfg = cfg, .config_path = config_path};
    int code = EXIT_OK;

    d.filter = make_filter(cfg);
    d.snk = make_sink(cfg);
    d.loop = ev_default_loop(EVFLAG_AUTO);
    if (d.filter == NULL || d.snk == NULL || d.loop == NULL) {
        code = d.filter == NULL ? EXIT_CONFIG : EXIT_FAILURE_GENERIC;
        goto done;
    }
    ev_async_init(&d.wake, on_wake);
    d.wake.data = &d;
    ev_timer_init(&d.flush_timer, on_flush_timer, 1.0, 0.0);
    d.flush_timer.data = &d;
    double every = cfg->progress_interval_ms > 0 ? (double)cfg->progress_interval_ms / 1000.0 : 0;
    ev_timer_init(&d.progress_timer, on_progress, every, every);
    d.progress_timer.data = &d;
    ev_signal_init(&d.sig_term, on_stop_signal, SIGTERM);
    ev_signal_init(&d.sig_int, on_stop_signal, SIGINT);
    ev_signal_init(&d.sig_hup, on_hup, SIGHUP);
    d.sig_term.data = d.sig_int.data = d.sig_hup.data = &d;
    signal(SIGPIPE, SIG_IGN);

    notify_init();
    notify_status("starting: connecting to PostgreSQL");
    double tick = TICK_S;
    if (notify_watchdog_usec() > 0 && (double)notify_watchdog_usec() / 4e6 < tick)
        tick = (double)notify_watchdog_usec() / 4e6;
    ev_timer_init(&d.tick_timer, on_tick, tick, tick);
    d.tick_timer.data = &d;
    d.totals.start_time = (double)time(NULL);

    log_notice("oplog2pg %s starting: service '%s', apply mode %s", OPLOG2PG_VERSION, cfg->service,
               config_apply_mode_name(cfg->apply_mode));
    if (cfg->metrics_listen[0] != '\0') {
        char merr[512];
        d.metrics = metrics_start(cfg->metrics_listen, merr, sizeof merr);
        if (d.metrics == NULL) {
            log_error("%s", merr);
            code = EXIT_CONFIG;
            goto done;
        }
        log_info("serving metrics at http://%s/metrics", cfg->metrics_listen);
        publish(&d);
    }

    unsigned backoff = BACKOFF_MIN_MS;
    bool first_session = true;
    for (;;) {
        /* Between sessions (connecting, backing off) signals are plain flags; in a session they are loop events. */
        struct sigaction sa = {.sa_handler = on_signal_during_connect}, old_term, old_int;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, &old_term);
        sigaction(SIGINT, &sa, &old_int);
        int rc = connect_sink(d.snk, &stop_requested);
        if (rc >= 0 || stop_requested) {
            code = rc >= 0 ? rc : EXIT_OK;
            break;
        }
        if (first_session) {
            first_session = false;
            rc = prepare_start(&d, opts);
            if (rc >= 0 || stop_requested) {
                code = rc >= 0 ? rc : EXIT_OK;
                break;
            }
        }
        ev_signal_start(d.loop, &d.sig_term);
        ev_signal_start(d.loop, &d.sig_int);
        ev_signal_start(d.loop, &d.sig_hup);
        if (every > 0) {
            d.last_progress = ev_now(d.loop);
            ev_timer_start(d.loop, &d.progress_timer);
        }
        d.last_tick = d.reader_quiet_since = ev_now(d.loop);
        ev_timer_start(d.loop, &d.tick_timer);

        run_session(&d);

        ev_timer_stop(d.loop, &d.tick_timer);
        ev_timer_stop(d.loop, &d.progress_timer);
        ev_signal_stop(d.loop, &d.sig_term);
        ev_signal_stop(d.loop, &d.sig_int);
        ev_signal_stop(d.loop, &d.sig_hup);
        session_end end = d.end;
        code = d.exit_code;
        end_of_session_cleanup(&d);
        if (end == END_CAREFUL) {
            /* Not a fault of the connection: start over from the checkpoint at once, stepping carefully. */
            d.careful = true;
            sink_disconnect(d.snk);
            continue;
        }
        if (end != END_RECONNECT)
            break;
        d.pg_reconnects++;
        sink_disconnect(d.snk);
        notify_status("reconnecting to PostgreSQL");
        for (unsigned slept = 0; slept < backoff && !stop_requested; slept += 50) {
            notify_watchdog();
            usleep(50 * 1000);
        }
        if (stop_requested)
            break;
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }

done:
    metrics_stop(d.metrics);
    sink_free(d.snk);
    nsfilter_free(d.filter);
    if (d.loop)
        ev_loop_destroy(d.loop);
    return code;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* replay */

int daemon_replay(config *cfg, const char *dump_path)
{
    int code = EXIT_OK;
    bson_error_t berr;
    bson_reader_t *rd = bson_reader_new_from_file(dump_path, &berr);
    nsfilter *filter = make_filter(cfg);
    sink *snk = make_sink(cfg);
    batcher *bt = NULL;
    if (rd == NULL) {
        log_error("%s: %s", dump_path, berr.message);
        code = EXIT_USAGE;
        goto done;
    }
    if (filter == NULL || snk == NULL) {
        code = EXIT_CONFIG;
        goto done;
    }
    int rc = connect_sink(snk, NULL);
    if (rc >= 0) {
        code = rc;
        goto done;
    }
    op_pos ckpt = {0, 0, -1};
    int have = sink_read_checkpoint(snk, &ckpt);
    if (have < 0) {
        log_error("%s", sink_error(snk));
        code = EXIT_FAILURE_GENERIC;
        goto done;
    }
    batcher_config bc = batcher_config_from(cfg, false);
    batcher_sink out = batcher_sink_pg(snk);
    bt = batcher_new(&bc, &out);
    if (bt == NULL) {
        code = EXIT_FAILURE_GENERIC;
        goto done;
    }

    const bson_t *doc;
    bool eof = false;
    uint64_t n = 0, skipped = 0;
    char err[1024], at[OP_POS_STRLEN];
    sink_status st = SINK_OK;
    while (st == SINK_OK && (doc = bson_reader_read(rd, &eof)) != NULL) {
        n++;
        op_entry e;
        decode_status ds = decode_entry(doc, &e, err, sizeof err);
        if (ds != DECODE_OK) {
            log_error("%s: entry %llu: %s", dump_path, (unsigned long long)n, err);
            code = EXIT_UNSUPPORTED;
            break;
        }
        if (have == 1 && op_pos_cmp(&e.pos, &ckpt) <= 0) {
            skipped++; /* already applied by an earlier run */
            op_entry_clear(&e);
            continue;
        }
        nsfilter_filter_entry(filter, &e);
        ejson_prepare_entry(&e);
        st = batcher_add(bt, &e, now_ms());
        op_entry_clear(&e);
    }
    if (code == EXIT_OK && st == SINK_OK && !eof) {
        log_error("%s: entry %llu is not valid BSON (truncated dump?)", dump_path, (unsigned long long)n + 1);
        code = EXIT_UNSUPPORTED;
    }
    if (st == SINK_OK)
        st = batcher_flush(bt, FLUSH_EXIT); /* commit everything before a bad entry too */
    if (st != SINK_OK) {
        log_error("%s", sink_error(snk));
        code = st == SINK_ERR_FENCED ? EXIT_FENCED : EXIT_FAILURE_GENERIC;
    } else {
        const batcher_stats *bs = batcher_get_stats(bt);
        log_notice("replayed %llu entries from %s (%llu already applied, skipped); committed through %s",
                   (unsigned long long)bs->entries, dump_path, (unsigned long long)skipped,
                   op_pos_format(&bs->committed, at, sizeof at));
    }

done:
    batcher_free(bt);
    sink_free(snk);
    nsfilter_free(filter);
    if (rd)
        bson_reader_destroy(rd);
    return code;
}

static const char *utc_text(uint32_t secs, char *buf, size_t len)
{
    time_t t = (time_t)secs;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%d %H:%M:%S UTC", &tm);
    return buf;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* check */

int daemon_check(config *cfg)
{
    int code = EXIT_OK;
    bson_error_t err;
    printf("configuration: ok (service '%s')\n", cfg->service);

    mongoc_uri_t *uri = mongoc_uri_new_with_error(cfg->mongodb_uri_effective, &err);
    mongoc_client_t *client = uri ? mongoc_client_new_from_uri(uri) : NULL;
    if (client == NULL) {
        printf("mongodb: bad URI: %s\n", err.message);
        code = EXIT_CONFIG;
    } else {
        mongoc_client_set_appname(client, "oplog2pg-check");
        bson_t *ping = BCON_NEW("ping", BCON_INT32(1));
        if (!mongoc_client_command_simple(client, "admin", ping, NULL, NULL, &err)) {
            printf("mongodb: cannot reach it: %s\n", err.message);
            code = EXIT_FAILURE_GENERIC;
        } else {
            const char *names[2] = {"oldest", "newest"};
            for (int dir = 0; dir < 2; dir++) {
                op_pos p;
                bool found;
                char oerr[512], when[64], at[OP_POS_STRLEN];
                if (!oplog_edge(client, dir == 0 ? 1 : -1, &p, &found, oerr, sizeof oerr)) {
                    printf("mongodb: %s\n", oerr);
                    code = EXIT_FAILURE_GENERIC;
                    break;
                }
                if (!found) {
                    printf("mongodb: the oplog is empty (is this a replica set member?)\n");
                    break;
                }
                printf("mongodb: %s oplog entry %s (%s)\n", names[dir], op_pos_format(&p, at, sizeof at),
                       utc_text(p.secs, when, sizeof when));
            }
        }
        bson_destroy(ping);
        mongoc_client_destroy(client);
    }
    if (uri)
        mongoc_uri_destroy(uri);

    /* Read-only on PostgreSQL: safe next to a running daemon. */
    sink_probe_result pr;
    char perr[512], at[OP_POS_STRLEN];
    if (!sink_probe(cfg->postgres_conninfo, cfg->service, &pr, perr, sizeof perr)) {
        printf("postgres: %s\n", perr);
        code = EXIT_FAILURE_GENERIC;
    } else {
        printf("postgres: ok (server %s)%s\n", pr.server_version,
               pr.have_table ? "" : "; the oplog2pg schema will be created at the first run");
        if (pr.have_checkpoint)
            printf("postgres: service '%s' resumes after oplog entry %s (term %lld), committed %s\n", cfg->service,
                   op_pos_format(&pr.pos, at, sizeof at), (long long)pr.pos.term, pr.applied_at);
        else
            printf("postgres: service '%s' has no checkpoint yet (it starts at the newest oplog entry)\n",
                   cfg->service);
        printf("postgres: service '%s' is %s\n", cfg->service,
               pr.running ? "being applied by a running oplog2pg right now" : "not running");
    }
    printf("%s\n", code == EXIT_OK ? "check passed" : "check failed");
    return code;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* status */

/* A JSON string literal of s (status output only holds names and timestamps, but quote properly anyway). */
static void json_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

int daemon_status(config *cfg, bool json)
{
    int code = EXIT_OK;
    char perr[512] = "", merr[512] = "", cerr[512] = "", at[OP_POS_STRLEN], when[64];
    sink_probe_result pr;
    bool pg_ok = sink_probe(cfg->postgres_conninfo, cfg->service, &pr, perr, sizeof perr);
    uint64_t oldest = 0, newest = 0;
    bool mongo_ok = oplog_edges(cfg->mongodb_uri_effective, &oldest, &newest, merr, sizeof merr);
    copy_state cs;
    memset(&cs, 0, sizeof cs);
    bool copy_ok = pg_ok && copy_state_read(cfg->postgres_conninfo, cfg->service, &cs, cerr, sizeof cerr);
    if (!pg_ok || !mongo_ok || (pg_ok && !copy_ok))
        code = EXIT_FAILURE_GENERIC;

    op_pos old_p = pos_from_ts(oldest), new_p = pos_from_ts(newest);
    bool have_ck = pg_ok && pr.have_checkpoint;
    double lag = have_ck && newest ? (double)new_p.secs - (double)pr.pos.secs : -1;
    double window_h = oldest && newest ? ((double)new_p.secs - (double)old_p.secs) / 3600.0 : -1;
    double margin_h = have_ck && oldest ? ((double)pr.pos.secs - (double)old_p.secs) / 3600.0 : -1;

    if (json) {
        FILE *o = stdout;
        fprintf(o, "{\"service\": ");
        json_str(o, cfg->service);
        fprintf(o, ", \"running\": %s", pg_ok && pr.running ? "true" : "false");
        if (have_ck) {
            fprintf(o, ", \"checkpoint\": {\"position\": \"%s\", \"time\": ", op_pos_format(&pr.pos, at, sizeof at));
            json_str(o, utc_text(pr.pos.secs, when, sizeof when));
            fprintf(o, ", \"term\": %lld, \"committed_at\": ", (long long)pr.pos.term);
            json_str(o, pr.applied_at);
            fprintf(o, "}");
        } else {
            fprintf(o, ", \"checkpoint\": null");
        }
        if (lag >= 0)
            fprintf(o, ", \"lag_seconds\": %.0f", lag);
        else
            fprintf(o, ", \"lag_seconds\": null");
        if (mongo_ok && oldest) {
            fprintf(o, ", \"oplog\": {\"oldest\": \"%s\"", op_pos_format(&old_p, at, sizeof at));
            fprintf(o, ", \"newest\": \"%s\", \"window_hours\": %.2f", op_pos_format(&new_p, at, sizeof at), window_h);
            if (margin_h >= 0)
                fprintf(o, ", \"margin_hours\": %.2f", margin_h);
            fprintf(o, "}");
        } else {
            fprintf(o, ", \"oplog\": null");
        }
        if (copy_ok && cs.exists) {
            fprintf(o, ", \"copy\": {\"finished\": %s, \"start\": \"%s\", \"collections\": [",
                    cs.finished ? "true" : "false", op_pos_format(&cs.start, at, sizeof at));
            for (size_t i = 0; i < cs.n; i++) {
                fprintf(o, "%s{\"namespace\": ", i ? ", " : "");
                char ns[400];
                snprintf(ns, sizeof ns, "%s.%s", cs.rows[i].db, cs.rows[i].coll);
                json_str(o, ns);
                fprintf(o, ", \"copied\": %lld, \"estimate\": %lld, \"done\": %s}", (long long)cs.rows[i].copied,
                        (long long)cs.rows[i].total_estimate, cs.rows[i].done ? "true" : "false");
            }
            fprintf(o, "]}");
        } else {
            fprintf(o, ", \"copy\": null");
        }
        if (pg_ok)
            fprintf(o, ", \"dead_letters\": %lld", (long long)pr.dead_letters);
        else
            fprintf(o, ", \"dead_letters\": null");
        fprintf(o, ", \"errors\": [");
        const char *errs[3] = {pg_ok ? NULL : perr, mongo_ok ? NULL : merr, !pg_ok || copy_ok ? NULL : cerr};
        bool first = true;
        for (int i = 0; i < 3; i++) {
            if (errs[i] == NULL)
                continue;
            fputs(first ? "" : ", ", o);
            json_str(o, errs[i]);
            first = false;
        }
        fprintf(o, "]}\n");
        copy_state_free(&cs);
        return code;
    }

    printf("service '%s'\n", cfg->service);
    if (!pg_ok) {
        printf("  postgres:      %s\n", perr);
    } else {
        printf("  state:         %s\n", pr.running ? "running (an oplog2pg holds the service)" : "not running");
        if (have_ck)
            printf("  checkpoint:    %s (%s), term %lld, committed %s\n", op_pos_format(&pr.pos, at, sizeof at),
                   utc_text(pr.pos.secs, when, sizeof when), (long long)pr.pos.term, pr.applied_at);
        else
            printf("  checkpoint:    none yet\n");
        if (pr.dead_letters > 0)
            printf("  dead letters:  %lld (SELECT * FROM oplog2pg.dead_letter WHERE service = '%s')\n",
                   (long long)pr.dead_letters, cfg->service);
        else
            printf("  dead letters:  0\n");
    }
    if (!mongo_ok) {
        printf("  mongodb:       %s\n", merr);
    } else if (oldest == 0) {
        printf("  oplog:         empty\n");
    } else {
        if (lag >= 0)
            printf("  behind:        %.0f s (newest oplog entry %s)\n", lag, op_pos_format(&new_p, at, sizeof at));
        char w2[64];
        printf("  oplog window:  %s .. %s (%.2f h)\n", utc_text(old_p.secs, when, sizeof when),
               utc_text(new_p.secs, w2, sizeof w2), window_h);
        if (margin_h >= 0)
            printf("  margin:        %.2f h of oplog before the checkpoint would fall off\n", margin_h);
    }
    if (copy_ok && cs.exists) {
        size_t done = 0;
        int64_t copied = 0, total = 0;
        for (size_t i = 0; i < cs.n; i++) {
            done += cs.rows[i].done;
            copied += cs.rows[i].copied;
            total += cs.rows[i].total_estimate;
        }
        if (cs.finished)
            printf("  initial copy:  finished %s (%zu collections, %lld documents)\n", cs.finished_at, cs.n,
                   (long long)copied);
        else
            printf("  initial copy:  in progress since %s: %zu of %zu collections done, %lld of ~%lld documents\n",
                   cs.started_at, done, cs.n, (long long)copied, (long long)total);
        for (size_t i = 0; i < cs.n && !cs.finished; i++) {
            const copy_progress_row *r = &cs.rows[i];
            double pct = r->total_estimate > 0 ? 100.0 * (double)r->copied / (double)r->total_estimate : 100.0;
            printf("    %s.%s: %lld of ~%lld (%.0f%%)%s\n", r->db, r->coll, (long long)r->copied,
                   (long long)r->total_estimate, pct > 100 ? 100 : pct, r->done ? ", done" : "");
        }
    } else if (pg_ok && !copy_ok) {
        printf("  initial copy:  %s\n", cerr);
    }
    copy_state_free(&cs);
    return code;
}

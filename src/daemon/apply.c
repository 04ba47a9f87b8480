/*
 * apply.c — the apply loop: wires a source (the oplog reader thread for `run`, the dump reader for `replay`), the
 * queue, the batcher and the PostgreSQL sink together on a libev loop, and owns the process's life (signals,
 * reconnects, the exit code).
 *
 * NOTES
 * One session of the loop runs from a PostgreSQL connection to its loss. It starts at the committed checkpoint —
 * always: daemon/start.c puts the checkpoint where a new run must begin before the first session — starts the
 * source there, and applies what the source queues. Every failure that a retry can cure (PostgreSQL gone, a lock or
 * statement timeout, a deadlock, memory) ends the session without committing anything further; the next session
 * starts again from the committed checkpoint, so nothing is lost and nothing applied twice. A refusal of an op's
 * data starts a careful session (see "When PostgreSQL refuses an op" in docs/architecture.md). Failures a person
 * must see stop the process with a distinct exit code: one the source meets (an entry it cannot decode, a resume
 * point lost) after committing everything before that entry; one PostgreSQL meets at the committed checkpoint,
 * since outside careful and per-op sessions the failed group is rolled back whole (an op PostgreSQL refuses as data
 * goes through a careful session first, which commits every entry before it).
 *
 * Signals come through daemon/signals.h in every state: an ev_io on the signalfd while the loop runs, naps that
 * watch it between sessions, the copy's tick, and the sink's wait hook during a long wait on PostgreSQL (which only
 * notes them; the loop acts once the call returns).
 *
 * What the loop reports about itself (the metrics snapshot, the STATUS line, the progress line, READY=1) is
 * daemon/report.c's; apply_internal.h holds the loop's state, which both files read.
 */
#include "daemon/daemon.h"

#include <ev.h>
#include <mongoc/mongoc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apply_internal.h"
#include "core/batcher.h"
#include "core/nsfilter.h"
#include "core/queue.h"
#include "daemon/exitcodes.h"
#include "daemon/logsetup.h"
#include "daemon/metrics.h"
#include "daemon/notify.h"
#include "daemon/signals.h"
#include "daemon/start.h"
#include "sink/batcher_pg.h"
#include "sink/pg.h"
#include "sink/pgerror.h"
#include "source/decode.h"
#include "source/dump/dump.h"
#include "source/mongo_client.h"
#include "source/oplog/reader.h"
#include "source/stream/stream.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/memory.h"

#define ITEMS_PER_WAKE 1024 /* queue items applied before the loop looks at signals and timers again */
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define FENCE_WAIT_MS  15000 /* how long a start waits for another holder of the service to go away */
#define WAIT_WARN_S    30.0  /* a wait on PostgreSQL this long is logged (once per wait) */
#define STOP_GRACE_S   5.0   /* a stop waits this long for PostgreSQL to answer, then cancels the statement */

#define TICK_S 1.0 /* STATUS line, metrics snapshot and watchdog period (shorter when the watchdog needs it) */

/* How many tables a flush group may write to: batch_tables, or with auto the sink's share of PostgreSQL's lock table
 * as read at the last connect; never more than tables_cap. */
static uint64_t group_tables(const daemon_ctx *d)
{
    uint64_t n = d->cfg->batch_tables > 0 ? (uint64_t)d->cfg->batch_tables : sink_auto_batch_tables(d->snk);
    return d->tables_cap > 0 && d->tables_cap < n ? d->tables_cap : n;
}

/* Ops go one at a time, each guarded, each entry committed on its own: a careful session, once past the entries it
 * applies batched (careful_ahead). */
/* Tries with the entries before the named one batched, for one refusal, before stepping from the checkpoint. */
#define CAREFUL_AHEAD_TRIES 4

static bool stepping(const daemon_ctx *d)
{
    return d->careful && !d->careful_ahead;
}

static batcher_config batcher_config_from(const daemon_ctx *d, bool careful)
{
    const config *cfg = d->cfg;
    batcher_config bc = {
        .batch_rows = (uint64_t)cfg->batch_rows,
        .batch_bytes = (uint64_t)cfg->batch_bytes,
        .batch_tables = group_tables(d),
        .flush_interval_ms = (uint64_t)cfg->flush_interval_ms,
        .catchup_interval_ms = (uint64_t)cfg->catchup_interval_ms,
        .per_op = cfg->apply_mode == CONFIG_APPLY_PER_OP || d->isolating,
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

/* ---------------------------------------------------------------------------------------------------------------- */
/* signals, waits and reloads outside the loop's callbacks */

static void log_reload(void *arg, const char *msg)
{
    (void)arg;
    log_notice("reload: %s", msg);
}

static void do_reload(daemon_ctx *d)
{
    char err[512];
    int changed = 0;
    if (d->config_path == NULL) {
        log_warning("SIGHUP: no configuration file to reload");
        return;
    }
    /* RELOADING=1 ... READY=1 only once the service was ready: before that, READY=1 would tell systemd the start is
     * over while PostgreSQL is still unreachable or the initial copy still runs. */
    if (d->ready_sent)
        notify_reloading();
    if (!config_reload(d->config_path, d->cfg, err, sizeof err, log_reload, NULL, &changed)) {
        log_error("SIGHUP: keeping the running configuration: %s", err);
        if (d->ready_sent)
            notify_ready();
        return;
    }
    logsetup_apply(d->cfg);
    d->tables_cap = 0; /* a bound the lock table set is tried afresh with the configuration */
    if (d->bt != NULL) {
        batcher_config bc = batcher_config_from(d, stepping(d));
        batcher_set_config(d->bt, &bc);
    }
    if (d->loop != NULL && ev_is_active(&d->progress_timer)) {
        ev_timer_stop(d->loop, &d->progress_timer);
        if (d->cfg->progress_interval_ms > 0) {
            double every = (double)d->cfg->progress_interval_ms / 1000.0;
            ev_timer_set(&d->progress_timer, every, every);
            ev_timer_start(d->loop, &d->progress_timer);
        }
    }
    log_notice("configuration reloaded from %s (%d option%s changed)", d->config_path, changed,
               changed == 1 ? "" : "s");
    if (d->ready_sent)
        notify_ready();
}

/* Between sessions and before the first: waits up to ms, feeding the watchdog, handling SIGHUP. False when a stop
 * was requested. */
static bool nap(daemon_ctx *d, uint64_t ms)
{
    uint64_t until = clock_ms() + ms;
    for (;;) {
        notify_watchdog();
        if (signals_take_reload())
            do_reload(d);
        uint64_t now = clock_ms();
        if (signals_stop_requested())
            return false;
        if (now >= until)
            return true;
        uint64_t slice = until - now > 250 ? 250 : until - now;
        if (!signals_nap(slice))
            return false;
    }
}

/* The sink's wait hook: PostgreSQL keeps us waiting (a lock, a slow commit, a connect). Healthy waiting feeds the
 * watchdog and says in STATUS what it waits for; a dead peer is the kernel's to notice ([postgres] peer_timeout).
 * A stop requested while connecting gives the attempt up at once (nothing is at stake); one requested meanwhile
 * otherwise gives PostgreSQL STOP_GRACE_S to answer (the work then commits as usual), then cancels
 * the statement: the session ends uncommitted, which is safe (the next start reads it again), and a stop never
 * hangs on a lock someone else holds. A second SIGTERM exits at once. */
static bool pg_wait_hook(void *arg, const char *what, double waited)
{
    daemon_ctx *d = arg;
    notify_watchdog();
    signals_poll();
    double now = clock_s();
    if (signals_stop_requested() && !sink_connected(d->snk)) {
        /* A connection attempt has nothing to commit: give it up at once. */
        notify_status("stopping: giving up the connection attempt");
        return false;
    }
    if (signals_stop_requested()) {
        if (d->stop_seen == 0)
            d->stop_seen = now;
        if (!d->cancel_sent && now - d->stop_seen >= STOP_GRACE_S) {
            char err[256];
            d->cancel_sent = true;
            log_notice("stopping: cancelling %s, which PostgreSQL has kept waiting %.0f s; what it would have "
                       "committed is read again at the next start",
                       what, waited);
            if (!sink_cancel(d->snk, err, sizeof err))
                log_warning("cancelling %s: %s", what, err);
        }
    }
    notify_status("waiting %.0f s for PostgreSQL: %s%s", waited, what,
                  !signals_stop_requested() ? ""
                  : d->cancel_sent          ? " (stopping: cancelled)"
                                            : " (stopping once it answers, or cancelling it)");
    double started = now - waited;
    if (waited >= WAIT_WARN_S && (started - d->wait_logged > 1.0 || started < d->wait_logged - 1.0)) {
        d->wait_logged = started;
        log_warning("PostgreSQL has kept oplog2pg waiting %.0f s for %s (a lock held by another session? see "
                    "pg_stat_activity)",
                    waited, what);
    }
    return true;
}

/* The documents of db.coll for the columns a map gained (sink_config.read_docs, src/sink/backfill.c): read from
 * MongoDB as the initial copy reads them (majority-committed unless read_concern = local), on a client of their own,
 * while the sink holds its transaction open. A stop request ends the read (the sink's transaction is then rolled
 * back, and the next start does it again). */
static apply_status read_docs_for_sink(void *ctx, const char *db, const char *coll, sink_doc_fn each, void *arg,
                                       char *why, size_t whylen)
{
    daemon_ctx *d = ctx;
    mongo_client_opts mo = {.appname = "oplog2pg-backfill"};
    mongoc_client_t *client = mongo_client_open(d->cfg->mongodb_uri_effective, &mo, why, whylen);
    if (client == NULL)
        return APPLY_CONFIG;
    log_info("reading %s.%s from MongoDB to fill the columns its map gained", db, coll);
    notify_status("reading %s.%s from MongoDB to fill the columns its map gained", db, coll);
    mongoc_collection_t *c = mongoc_client_get_collection(client, db, coll);
    bson_t filter = BSON_INITIALIZER;
    bson_t *opts = BCON_NEW("batchSize", BCON_INT32(1000));
    if (d->cfg->read_concern == CONFIG_READ_MAJORITY)
        BCON_APPEND(opts, "readConcern", "{", "level", BCON_UTF8("majority"), "}");
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(c, &filter, opts, NULL);
    const bson_t *doc;
    apply_status st = APPLY_OK;
    uint64_t n = 0;
    while (mongoc_cursor_next(cur, &doc)) {
        if (++n % 1000 == 0) {
            notify_watchdog();
            signals_poll();
            if (signals_stop_requested()) {
                snprintf(why, whylen, "stopping before the read ended");
                st = APPLY_RETRY;
                break;
            }
        }
        if (!each(arg, doc))
            break;
    }
    bson_error_t e;
    if (st == APPLY_OK && mongoc_cursor_error(cur, &e)) {
        snprintf(why, whylen, "%s", e.message);
        st = mongo_error_refused(&e) ? APPLY_CONFIG : APPLY_RETRY;
    }
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    bson_destroy(&filter);
    mongoc_collection_destroy(c);
    mongoc_client_destroy(client);
    return st;
}

/* Connect to PostgreSQL, retrying passing failures with backoff. Returns the exit code to stop with, or -1 when
 * connected. */
static int connect_sink(daemon_ctx *d)
{
    backoff b;
    backoff_init(&b, BACKOFF_MIN_MS, BACKOFF_MAX_MS);
    uint64_t fenced_ms = 0;
    for (;;) {
        if (signals_stop_requested())
            return EXIT_OK;
        notify_watchdog();
        apply_status st = sink_connect(d->snk);
        switch (st) {
        case APPLY_OK:
            return -1;
        case APPLY_FENCED:
            /* A session of a daemon that was just killed can hold the lock until PostgreSQL notices the closed
             * socket; a live rival holds it for good. Wait out the first, give up on the second. */
            if (fenced_ms >= FENCE_WAIT_MS) {
                log_error("%s", sink_error(d->snk));
                return EXIT_FENCED;
            }
            if (fenced_ms == 0) {
                log_warning("%s; waiting up to %d s for it to go away", sink_error(d->snk), FENCE_WAIT_MS / 1000);
                notify_status("waiting for another oplog2pg to release the service");
            }
            if (!nap(d, 250))
                return EXIT_OK;
            fenced_ms += 250;
            continue;
        case APPLY_CONFIG:
            log_error("%s", sink_error(d->snk));
            notify_status("stopped: %s", sink_error(d->snk));
            return EXIT_CONFIG;
        default: {
            if (signals_stop_requested()) {
                log_notice("%s", sink_error(d->snk));
                return EXIT_OK;
            }
            uint64_t wait = backoff_next(&b);
            log_warning("%s; retrying in %llu ms", sink_error(d->snk), (unsigned long long)wait);
            notify_status("reconnecting to PostgreSQL: %s", sink_error(d->snk));
            sink_set_activity(d->snk, "reconnecting to PostgreSQL");
            if (!nap(d, wait))
                return EXIT_OK;
        }
        }
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

/* A group committed because it had written to as many tables as its bound: said once for each bound the session
 * start logs (tables_logged), with what it costs and what raises the bound. A stream that keeps going round more
 * tables than that gives each table a row or a few per transaction, and PostgreSQL pays for opening, locking and
 * planning each table again every time (docs/benchmarks.md, "Many tables: the prepared statements' bound, and the
 * groups the lock table cuts"). */
static void hint_tables_bound(daemon_ctx *d)
{
    d->tables_hinted = true;
    bool automatic = d->cfg->batch_tables == 0 && d->tables_cap == 0;
    const char *bound_is = d->tables_cap != 0 ? "the bound set after PostgreSQL ran out of shared memory"
                           : automatic        ? "batch_tables = auto, a fifth of PostgreSQL's lock table"
                                              : "batch_tables";
    log_info("a flush group committed on reaching %llu tables (%s): when the oplog spreads over more tables than that, "
             "each gets few rows a transaction; %soplog2pg_flushes_total{trigger=\"tables\"} counts these commits",
             (unsigned long long)group_tables(d), bound_is,
             automatic ? "raising max_locks_per_transaction in PostgreSQL raises the bound; " : "");
}

/* PostgreSQL ran out of shared memory (53200) in a group: most often its lock table, which every table the group
 * writes to adds to until the commit (two locks a table at least: the table and its key). Returns true when it
 * stopped the process; otherwise the session ends for a retry as any passing fault, with what is changed for it:
 * - a group of several entries: the bound on a group's tables falls to half the tables the group had, never above
 *   the bound in force. A group that went past the bound did so by its last entry, which no smaller bound splits off
 *   (the batcher commits between entries only): then the entries up to the last one taken also go one to a group,
 *   so that the next session meets an entry too large for the lock table alone, or gets past it;
 * - a group that is one entry (a MongoDB transaction or an applyOps, applied whole), writing to more tables than the
 *   bound in force lets a group have: no smaller group can take it, and no retry will: the process stops (exit 3),
 *   naming the entry, its tables and max_locks_per_transaction. One within the bound lowers the bound below it, so
 *   that it stops the second time, after one retry that other sessions' locks may have been the cause of;
 * - a group that wrote to one table or none: others hold the lock table; retried as it is. */
static bool out_of_locks(daemon_ctx *d, const char *msg)
{
    uint64_t had = batcher_group_tables(d->bt);
    uint64_t entry = batcher_entry_tables(d->bt);
    uint64_t bound = group_tables(d);
    char at[OP_POS_STRLEN];
    if (had <= 1)
        return false;
    if (entry == had && entry > bound) {
        log_error("%s", msg);
        log_error("oplog entry %s writes to %llu tables in one transaction (a MongoDB transaction or applyOps, which "
                  "oplog2pg applies whole, in one PostgreSQL transaction), more than PostgreSQL's shared lock table "
                  "holds for it beside the other sessions (%llu locks in all; the entry needs two or more a table): "
                  "raise max_locks_per_transaction in PostgreSQL (it takes a restart of PostgreSQL), then start "
                  "oplog2pg again: everything before this entry is committed, and it resumes at this entry",
                  op_pos_format(&d->last_taken, at, sizeof at), (unsigned long long)entry,
                  (unsigned long long)sink_lock_slots(d->snk));
        notify_status("stopped: oplog entry %s writes to %llu tables, more than PostgreSQL's lock table holds (raise "
                      "max_locks_per_transaction)",
                      at, (unsigned long long)entry);
        end_session(d, END_FATAL, EXIT_CONFIG);
        return true;
    }
    uint64_t cap = had / 2 < bound ? had / 2 : bound;
    if (cap < 1)
        cap = 1;
    if (cap < bound) {
        d->tables_cap = cap;
        log_warning("PostgreSQL ran out of shared memory in a flush group of %llu tables: groups now commit at %llu "
                    "tables at most, until a reload; raise max_locks_per_transaction in PostgreSQL, or lower "
                    "[replication] batch_tables",
                    (unsigned long long)had, (unsigned long long)cap);
    }
    if (entry != had && had > bound) {
        char until[BOUND_STRLEN];
        if (!bound_set(d, &d->isolate_until, NULL))
            return false; /* out of memory: retried as it is (the caller ends the session for a retry) */
        d->isolating = true;
        log_warning("PostgreSQL ran out of shared memory in a flush group of %llu tables, %llu of them written by its "
                    "last entry: the entries up to %s are committed one at a time, to find whether one of them alone "
                    "needs more locks than PostgreSQL's lock table holds",
                    (unsigned long long)had, (unsigned long long)entry,
                    bound_format(&d->isolate_until, until, sizeof until));
    }
    return false;
}

/* A failure with a SQLSTATE the error policy does not list: retried as a passing fault, unless it is the same one
 * (SQLSTATE and op) as the last such failure, [replication] unlisted_error_limit times in a row. Then the process
 * stops (exit 3): nobody foresaw this error, and retrying it forever would hide it (nothing after that op arrives,
 * while every retry looks like a passing fault). Ends the session either way, saying which. */
static void same_failure_again(daemon_ctx *d, const char *msg)
{
    const char *state = sink_error_state(d->snk);
    op_pos pos = {0, 0, -1};
    bool has_pos = sink_error_pos(d->snk, &pos);
    /* The same op: its position, or the message when the sink named none. Or, whatever the position, nothing was
     * committed since the last such failure: an error raised at COMMIT (a deferred trigger) is placed at the group's
     * last entry, and the group grows as entries arrive, but a checkpoint that does not move is one stuck group. */
    bool same_op =
        has_pos == d->repeat_has_pos &&
        (has_pos ? op_pos_cmp(&pos, &d->repeat_pos) == 0 : strncmp(msg, d->repeat_msg, sizeof d->repeat_msg - 1) == 0);
    bool stuck = d->repeat_count > 0 && op_pos_cmp(&d->committed, &d->repeat_committed) == 0;
    bool same = strcmp(state, d->repeat_state) == 0 && (same_op || stuck);
    d->repeat_count = same ? d->repeat_count + 1 : 1;
    d->repeat_committed = d->committed;
    snprintf(d->repeat_state, sizeof d->repeat_state, "%s", state);
    d->repeat_has_pos = has_pos;
    d->repeat_pos = pos;
    snprintf(d->repeat_msg, sizeof d->repeat_msg, "%s", msg);
    uint64_t limit = (uint64_t)d->cfg->unlisted_error_limit;
    if (d->repeat_count < limit) {
        log_warning("%s; SQLSTATE %s is not in oplog2pg's error policy: retried as a passing fault (%llu of %llu "
                    "times in a row for this op, then oplog2pg stops; [replication] unlisted_error_limit)",
                    msg, state, (unsigned long long)d->repeat_count, (unsigned long long)limit);
        snprintf(d->retry_reason, sizeof d->retry_reason, "SQLSTATE %s (%llu of %llu)", state,
                 (unsigned long long)d->repeat_count, (unsigned long long)limit);
        end_session(d, END_RETRY, 0);
        return;
    }
    log_error("%s", msg);
    log_error("stopped: the same op failed %llu times in a row with SQLSTATE %s, which oplog2pg's error policy does "
              "not list ([replication] unlisted_error_limit = %llu); the op is not applied, nor anything after it. "
              "Find what raises it (a trigger or rule on the table, an extension), fix it, and start oplog2pg again: "
              "it resumes from the committed checkpoint and applies the op",
              (unsigned long long)d->repeat_count, state, (unsigned long long)limit);
    notify_status("stopped: SQLSTATE %s failed the same op %llu times in a row", state,
                  (unsigned long long)d->repeat_count);
    end_session(d, END_FATAL, EXIT_CONFIG);
}

/* A failure while applying: passing ones end the session, a refusal of data goes careful, the rest stop. */
static void on_sink_failure(daemon_ctx *d, apply_status st)
{
    const char *msg = sink_error(d->snk)[0] ? sink_error(d->snk) : "applying an oplog entry failed";
    report_refresh_committed(d); /* the stuck check and the stop messages read the checkpoint as of now */
    switch (st) {
    case APPLY_RETRY:
    case APPLY_NOMEM: {
        const char *state = sink_error_state(d->snk);
        if (strcmp(state, "53200") == 0 && d->bt != NULL && out_of_locks(d, msg))
            break;
        if (st == APPLY_RETRY && state[0] != '\0' && !pgerror_listed(state)) {
            same_failure_again(d, msg);
            break;
        }
        log_warning("%s; the session ends uncommitted and resumes from the committed checkpoint", msg);
        if (state[0] != '\0')
            snprintf(d->retry_reason, sizeof d->retry_reason, "SQLSTATE %s", state);
        else
            snprintf(d->retry_reason, sizeof d->retry_reason, "%s",
                     st == APPLY_NOMEM ? "running out of memory" : "a PostgreSQL failure");
        end_session(d, END_RETRY, 0);
        break;
    }
    case APPLY_FENCED:
        log_error("%s", msg);
        end_session(d, END_FATAL, EXIT_FENCED);
        break;
    case APPLY_REWIND: {
        char until[OP_POS_STRLEN];
        op_pos keep = sink_keep_until(d->snk);
        log_notice("%s; going back to the last commit to apply the entries up to %s again, keeping every row so "
                   "that the duplicate can be re-sent as an upsert",
                   msg, op_pos_format(&keep, until, sizeof until));
        end_session(d, END_REWIND, 0);
        break;
    }
    case APPLY_CONFIG: {
        /* Outside careful and per-op sessions the failed group is rolled back whole: what is kept is the checkpoint,
         * which may be some entries before this one. */
        char at[OP_POS_STRLEN];
        log_error("%s", msg);
        log_error("stopped; what is committed ends at the checkpoint %s, and nothing after it is applied. Fix the "
                  "cause and start oplog2pg again: it resumes there",
                  op_pos_format(&d->committed, at, sizeof at));
        end_session(d, END_FATAL, EXIT_CONFIG);
        break;
    }
    case APPLY_UNRECORDABLE: {
        char at[OP_POS_STRLEN];
        log_error("%s", msg);
        log_error("stopped; what is committed ends at the checkpoint %s, and nothing after it is applied: it resumes "
                  "there once PostgreSQL can take the entry or its record",
                  op_pos_format(&d->committed, at, sizeof at));
        end_session(d, END_FATAL, EXIT_UNSUPPORTED);
        break;
    }
    case APPLY_DATA:
        if (d->end == END_CAREFUL)
            break; /* this session already ends to find the op: a later report is that failure's (sink_error) */
        if (!stepping(d)) {
            /* The group failed as a whole: find the op, committing each entry before it on its own. When the failure
             * names its op's entry, the entries before that one go batched (a failure among them, in a session
             * that applies them batched, sends the next one stepping from the checkpoint). */
            char until[BOUND_STRLEN], from[OP_POS_STRLEN];
            bool dl = d->cfg->on_error == CONFIG_ON_ERROR_DEAD_LETTER;
            op_pos failed_at;
            bool named = sink_error_pos(d->snk, &failed_at);
            if (!named && sink_error(d->snk)[0] == '\0') {
                /* Nothing was sent for it: the batcher refused the op of the entry it was taking (op.refusal, a
                 * value a typed column cannot take), the last one taken. */
                failed_at = d->last_taken;
                named = true;
            }
            /* Another try with the entries before batched, when the op came before the entry named last time (a
             * COPY's failure names its run's last entry) and this failure names an earlier one: a few such tries,
             * each a group applied batched, cost less than stepping through the whole group. */
            bool again = d->careful && d->careful_ahead && d->ahead_tries < CAREFUL_AHEAD_TRIES;
            bool ahead = (!d->careful || again) && named && op_pos_cmp(&failed_at, &d->committed) > 0 &&
                         (!again || op_pos_cmp(&failed_at, &d->careful_from) < 0);
            d->ahead_tries = !d->careful ? 0 : d->ahead_tries + 1;
            log_warning("%s", msg);
            if (!bound_set(d, &d->careful_until, named ? &failed_at : NULL)) {
                log_warning("out of memory noting how far to apply one at a time; the session ends uncommitted and "
                            "resumes from the committed checkpoint");
                end_session(d, END_RETRY, 0);
                break;
            }
            if (d->careful_ahead && !ahead)
                log_warning("that op comes before oplog entry %s, where the failure before was placed: applying "
                            "every entry after the last commit one at a time instead",
                            op_pos_format(&d->careful_from, from, sizeof from));
            d->careful_ahead = ahead;
            d->careful_from = ahead ? failed_at : d->committed;
            if (ahead)
                log_warning("finding the op PostgreSQL refused: going back to the last commit, applying the entries "
                            "before %s as before, then the entries up to %s one at a time, %s ([replication] "
                            "on_error = %s)",
                            op_pos_format(&d->careful_from, from, sizeof from),
                            bound_format(&d->careful_until, until, sizeof until),
                            dl ? "setting refused ones aside" : "to commit everything before it and stop there",
                            config_on_error_name(d->cfg->on_error));
            else
                log_warning("finding the op PostgreSQL refused: going back to the last commit and applying the "
                            "entries up to %s one at a time, %s ([replication] on_error = %s)",
                            bound_format(&d->careful_until, until, sizeof until),
                            dl ? "setting refused ones aside" : "to commit everything before it and stop there",
                            config_on_error_name(d->cfg->on_error));
            end_session(d, END_CAREFUL, 0);
            break;
        }
        log_error("%s", msg);
        log_error("stopped; everything before this entry is committed. Fix the cause and start oplog2pg again: it "
                  "resumes at this entry (or set [replication] on_error = dead-letter to set such ops aside)");
        end_session(d, END_FATAL, EXIT_FAILURE_GENERIC);
        break;
    case APPLY_OK:
        break;
    }
}

/* Working through a backlog: entries wait to be taken (more_in_hand: in the items just popped), and the reader has
 * not found the oplog drained since the group before this one committed. An idle marker, even one that came while
 * entries still waited, says the reader reached the oplog's end: the applier merely trails a steady stream, and
 * flush_interval stays the bound there (catchup_interval would delay every change by up to its length). */
/* The session's stream: one source's queue, or a sharded cluster's shards merged (cluster.c). */
static size_t stream_take(daemon_ctx *d, queue_item *items, size_t max)
{
    return d->cl != NULL ? cluster_take(d->cl, items, max) : queue_pop_all(d->q, items, max);
}

/* Nothing waits to be taken. */
static bool stream_drained(const daemon_ctx *d)
{
    return d->cl != NULL ? cluster_drained(d->cl) : queue_len(d->q) == 0;
}

/* Everything taken is written and freed (queue_release). */
static void stream_release(daemon_ctx *d)
{
    if (d->cl != NULL)
        cluster_release(d->cl);
    else
        queue_release(d->q);
}

static bool behind(const daemon_ctx *d, bool more_in_hand)
{
    if (!more_in_hand && stream_drained(d))
        return false;
    return d->idle_after == 0 || d->idle_after - 1 < batcher_get_stats(d->bt)->commits;
}

static void arm_flush_timer(daemon_ctx *d)
{
    uint64_t deadline = batcher_deadline(d->bt, behind(d, false));
    if (deadline == UINT64_MAX) {
        ev_timer_stop(d->loop, &d->flush_timer);
        return;
    }
    uint64_t now = clock_ms();
    double in = deadline > now ? (double)(deadline - now) / 1000.0 : 0.0;
    /* Armed already: kept, unless the deadline came nearer (armed while behind, for catchup_interval, and nothing
     * waits any more). */
    if (ev_is_active(&d->flush_timer)) {
        if (ev_timer_remaining(d->loop, &d->flush_timer) <= in + 0.001)
            return;
        ev_timer_stop(d->loop, &d->flush_timer);
    }
    ev_timer_set(&d->flush_timer, in, 0.0);
    ev_timer_start(d->loop, &d->flush_timer);
}

/* At session start (start: the checkpoint it resumed after) or after an entry was taken (start NULL). */
static void leave_careful_if_past(daemon_ctx *d, const op_pos *start)
{
    if (!bound_reached(d, &d->careful_until, start))
        return;
    char at[BOUND_STRLEN];
    d->careful = false;
    d->careful_ahead = false;
    sink_set_per_op(d->snk, d->cfg->apply_mode == CONFIG_APPLY_PER_OP);
    batcher_config bc = batcher_config_from(d, false);
    batcher_set_config(d->bt, &bc);
    log_notice("stepped past oplog entry %s (%llu op(s) set aside in oplog2pg.dead_letter so far): back to batched "
               "apply",
               bound_format(&d->careful_until, at, sizeof at),
               (unsigned long long)sink_get_stats(d->snk)->dead_letters);
}

/* A careful session that applied the entries before careful_from batched has reached it: what it applied is
 * committed, and from here ops go one at a time. A transaction open across the point (its parts, or one across
 * shards) cannot be committed apart: the next session steps from the checkpoint instead. */
static apply_status start_stepping(daemon_ctx *d)
{
    char at[OP_POS_STRLEN];
    d->careful_ahead = false;
    if (batcher_commit_held(d->bt)) {
        log_notice("a transaction is open at oplog entry %s: applying every entry after the last commit one at a "
                   "time instead",
                   op_pos_format(&d->careful_from, at, sizeof at));
        d->careful_from = d->committed;
        end_session(d, END_CAREFUL, 0);
        return APPLY_OK;
    }
    apply_status st = batcher_flush(d->bt, FLUSH_PER_OP);
    if (st != APPLY_OK) {
        d->careful_ahead = true; /* a failure before careful_from: on_sink_failure sends the next session stepping */
        return st;
    }
    sink_set_per_op(d->snk, true);
    batcher_config bc = batcher_config_from(d, true);
    batcher_set_config(d->bt, &bc);
    report_refresh_committed(d);
    log_notice("applied the entries before oplog entry %s batched: from there one at a time",
               op_pos_format(&d->careful_from, at, sizeof at));
    return APPLY_OK;
}

static void leave_isolating_if_past(daemon_ctx *d, const op_pos *start)
{
    if (!bound_reached(d, &d->isolate_until, start))
        return;
    char at[BOUND_STRLEN];
    d->isolating = false;
    batcher_config bc = batcher_config_from(d, stepping(d));
    batcher_set_config(d->bt, &bc);
    log_notice("committed the entries up to %s one at a time: back to flush groups of %llu tables at most",
               bound_format(&d->isolate_until, at, sizeof at), (unsigned long long)group_tables(d));
}

/* Stop and reload requests, acted on from the loop (never from inside a call on PostgreSQL). */
static void act_on_signals(daemon_ctx *d)
{
    if (signals_take_reload())
        do_reload(d);
    if (signals_stop_requested() && d->end == END_NONE) {
        log_notice("stopping the reader, then committing what was read");
        notify_stopping();
        notify_status("stopping: committing what was read");
        end_session(d, END_STOP, EXIT_OK);
    }
}

static void on_signal_fd(struct ev_loop *loop, ev_io *w, int revents)
{
    daemon_ctx *d = w->data;
    (void)loop;
    (void)revents;
    signals_poll();
    act_on_signals(d);
}

/* The PostgreSQL socket is readable between the loop's own calls: results on their way, or, while idle, a server
 * that is going away (a terminated session says so before it closes the socket). */
static void on_pg_readable(struct ev_loop *loop, ev_io *w, int revents)
{
    daemon_ctx *d = w->data;
    (void)loop;
    (void)revents;
    apply_status st = sink_check_idle(d->snk);
    if (st != APPLY_OK)
        on_sink_failure(d, st);
}

/* Removed shards (cluster.c): each one read to its end is retired, then its checkpoint row is deleted once everything
 * taken so far, its last entries included, is committed; a crash in between leaves the row, and the next start reads
 * the shard (at its stored hosts) to its end again. `status` says which shard drains, or cannot be reached. */
static void drain_removed_shards(daemon_ctx *d)
{
    if (cluster_drain_step(d->cl))
        apply_notify_wake(d); /* what a retirement left for cluster_take (a refusal ends the stream there) */
    size_t i;
    const char *id;
    while (d->end == END_NONE && cluster_retired_row(d->cl, &i, &id)) {
        apply_status st = batcher_flush(d->bt, FLUSH_IDLE);
        if (st == APPLY_OK && batcher_dirty(d->bt))
            return; /* a transaction across shards still open: its commit comes first */
        if (st == APPLY_OK)
            st = sink_set_shard_checkpoint(d->snk, id, NULL, NULL);
        if (st != APPLY_OK) {
            on_sink_failure(d, st);
            return;
        }
        cluster_row_deleted(d->cl, i);
        log_notice("shard '%s' is retired: removed from the cluster and applied to its end; its checkpoint row is "
                   "deleted",
                   id);
    }
    char what[SINK_ACTIVITY_MAX + 1] = "";
    for (size_t k = 0; k < cluster_shard_count(d->cl) && what[0] == '\0'; k++) {
        cluster_drain_info di;
        if (!cluster_draining(d->cl, k, &di) || di.retired)
            continue;
        cluster_shard_info si;
        cluster_shard_report(d->cl, k, &si);
        snprintf(what, sizeof what, "%s removed shard '%s'", di.error[0] ? "holding: unreachable" : "draining", si.id);
    }
    if (what[0] != '\0') {
        sink_set_activity(d->snk, what);
        d->drain_shown = true;
    } else if (d->drain_shown) {
        sink_set_activity(d->snk, "applying");
        d->drain_shown = false;
        d->notes_refused_shown = false; /* said again below when so */
    }
}

/* Every TICK_S: watchdog, metrics, STATUS line. */
static void on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
    daemon_ctx *d = w->data;
    (void)revents;
    notify_watchdog();
    ev_tstamp now = ev_now(loop);
    metrics_snapshot m;
    report_snapshot(d, &m);
    /* Caught up and nothing applied for a whole tick after some work: the burst is over, so what the allocator keeps
     * for reuse goes back to the system (memory.h). Not while busy: kept memory is what saves the page faults. */
    if (m.entries_applied != d->entries_at_tick)
        d->memory_used = true;
    else if (d->memory_used && d->caught_up) {
        memory_release();
        d->memory_used = false;
    }
    /* A shard added to the cluster: read from the next session on, which starts at once. */
    char added[64];
    if (d->end == END_NONE && cluster_shard_added(d->cl, added, sizeof added)) {
        log_notice("config.shards lists a new shard, '%s': starting again from the checkpoints to read it too", added);
        end_session(d, END_RESHARD, 0);
    }
    if (d->cl != NULL && d->end == END_NONE)
        drain_removed_shards(d);
    /* A shard that refuses oplog notes: `status` says so (its reader logged it once). */
    if (d->cl != NULL && !d->notes_refused_shown) {
        for (size_t i = 0; i < cluster_shard_count(d->cl); i++) {
            cluster_shard_info si;
            if (cluster_shard_report(d->cl, i, &si) && si.notes_refused) {
                sink_set_activity(d->snk, "applying; shard notes refused: noops only");
                d->notes_refused_shown = true;
                break;
            }
        }
    }
    report_status(d, now, &m);
}

/* What a source's end means for the process. */
static void on_source_end(daemon_ctx *d, queue_end_reason reason, const char *message)
{
    switch (reason) {
    case QUEUE_END_DONE:
        end_session(d, END_FINISHED, EXIT_OK);
        break;
    case QUEUE_END_RESUME_LOST:
        end_session(d, END_FATAL, EXIT_RESUME_LOST);
        break;
    case QUEUE_END_UNSUPPORTED:
    case QUEUE_END_BAD_INPUT:
        end_session(d, END_FATAL, EXIT_UNSUPPORTED);
        break;
    case QUEUE_END_REFUSED:
        end_session(d, END_FATAL, EXIT_CONFIG);
        break;
    case QUEUE_END_NOMEM:
    case QUEUE_END_RETRY:
        log_warning("%s; the session ends and resumes from the committed checkpoint", message ? message : "");
        snprintf(d->retry_reason, sizeof d->retry_reason, "%s",
                 reason == QUEUE_END_NOMEM ? "running out of memory" : "a MongoDB failure");
        end_session(d, END_RETRY, 0);
        break;
    }
}

static void arm_merge_timer(daemon_ctx *d);

/* A sharded cluster: a chunk migration's donor announces a recipient that holds no chunk of the collection yet
 * (source/decode.h DECODE_NEW_SHARD_REASON). When the session does not read that shard, what comes after the
 * announcement may depend on its entries: the session commits what came before and starts again at once, from the
 * checkpoints, reading that shard too (from its addition to the cluster on). True when the session ends so. */
static bool new_shard_announced(daemon_ctx *d, const op_entry *e, apply_status *st)
{
    for (size_t i = 0; i < e->n; i++) {
        const op *o = &e->ops[i];
        if (o->kind != OP_NOOP || o->reason != DECODE_NEW_SHARD_REASON || o->db == NULL ||
            cluster_has_shard(d->cl, o->db))
            continue;
        char at[OP_POS_STRLEN];
        if (strcmp(d->reshard_for, o->db) == 0) {
            log_error("oplog entry %s announces a chunk migration to shard '%s', which config.shards does not list: "
                      "its entries cannot be read",
                      op_pos_format(&e->pos, at, sizeof at), o->db);
            end_session(d, END_FATAL, EXIT_UNSUPPORTED);
            return true;
        }
        *st = batcher_flush(d->bt, FLUSH_IDLE);
        if (*st != APPLY_OK)
            return true;
        log_notice("oplog entry %s announces a chunk migration to shard '%s', which this session does not read: "
                   "starting again from the checkpoints to read it too",
                   op_pos_format(&e->pos, at, sizeof at), o->db);
        snprintf(d->reshard_for, sizeof d->reshard_for, "%s", o->db);
        end_session(d, END_RESHARD, 0);
        return true;
    }
    return false;
}

static void on_wake(struct ev_loop *loop, ev_async *w, int revents)
{
    daemon_ctx *d = w->data;
    queue_item items[64];
    size_t done = 0;
    (void)loop;
    (void)revents;

    while (d->end == END_NONE && done < ITEMS_PER_WAKE) {
        size_t n = stream_take(d, items, sizeof items / sizeof items[0]);
        if (n == 0)
            break;
        for (size_t i = 0; i < n; i++) {
            queue_item *it = &items[i];
            if (d->end != END_NONE) {
                queue_item_clear(it);
                continue;
            }
            apply_status st = APPLY_OK;
            switch (it->type) {
            case QUEUE_ENTRY:
                if (d->cl != NULL && new_shard_announced(d, it->entry, &st))
                    break;
                d->caught_up = false;
                if (d->careful_ahead && op_pos_cmp(&it->entry->pos, &d->careful_from) >= 0 &&
                    (st = start_stepping(d)) != APPLY_OK)
                    break;
                if (d->end != END_NONE)
                    break;
                d->last_taken = it->entry->pos;
                d->last_taken_source = it->entry->source;
                d->last_taken_changes = d->careful && !op_entry_changes_nothing(it->entry); /* read by bound.c only */
                st = batcher_add(d->bt, it->entry, clock_ms());
                if (st == APPLY_OK && !d->tables_hinted && batcher_get_stats(d->bt)->flushes[FLUSH_TABLES] > 0)
                    hint_tables_bound(d);
                if (st == APPLY_OK)
                    st = batcher_tick(d->bt, clock_ms(), behind(d, i + 1 < n));
                if (st == APPLY_OK && stepping(d))
                    leave_careful_if_past(d, NULL);
                if (st == APPLY_OK && d->isolating)
                    leave_isolating_if_past(d, NULL);
                break;
            case QUEUE_IDLE:
                /* The reader drained the oplog; we have caught up with it only if nothing follows the marker. While
                 * the applier lags, markers are stale and committing on each would cost an fsync per getMore. The
                 * merge of a cluster's shards hands one on only when nothing more is ready (core/merge.h): what it
                 * still holds waits on another shard, and is no backlog. */
                if (i + 1 == n && (d->cl != NULL || stream_drained(d))) {
                    st = batcher_flush(d->bt, FLUSH_IDLE);
                    d->caught_up = st == APPLY_OK;
                }
                d->idle_after = batcher_get_stats(d->bt)->commits + 1; /* not a backlog (behind) */
                break;
            case QUEUE_END:
                /* Everything before the point where the source stopped is good: commit it, then stop. */
                st = batcher_flush(d->bt, FLUSH_EXIT);
                if (it->reason != QUEUE_END_DONE && it->reason != QUEUE_END_NOMEM && it->reason != QUEUE_END_RETRY)
                    log_error("%s", it->message ? it->message : "the oplog reader stopped");
                if (st == APPLY_OK)
                    on_source_end(d, it->reason, it->message);
                break;
            }
            queue_item_clear(it);
            if (st != APPLY_OK)
                on_sink_failure(d, st);
        }
        done += n;
        if (!d->session_live && d->end == END_NONE)
            report_live(d);
        if (!batcher_dirty(d->bt))
            stream_release(d); /* everything taken is written and freed: the reader may fetch large entries again */
    }
    if (d->end == END_NONE) {
        act_on_signals(d); /* a wait on PostgreSQL may have noted one */
        if (done >= ITEMS_PER_WAKE)
            ev_async_send(d->loop, &d->wake); /* more to do: come back after signals and timers had their turn */
        if (d->end == END_NONE)
            arm_flush_timer(d);
        if (d->end == END_NONE)
            arm_merge_timer(d);
    }
}

/* The merge's next nudge of a shard that holds the stream back: the loop takes from the merge again then. */
static void on_merge_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    daemon_ctx *d = w->data;
    (void)revents;
    ev_async_send(loop, &d->wake);
}

static void arm_merge_timer(daemon_ctx *d)
{
    ev_timer_stop(d->loop, &d->merge_timer);
    if (d->cl == NULL)
        return;
    uint64_t at = cluster_deadline(d->cl);
    if (at == UINT64_MAX)
        return;
    uint64_t now = clock_ms();
    ev_timer_set(&d->merge_timer, at > now ? (double)(at - now) / 1000.0 : 0, 0);
    ev_timer_start(d->loop, &d->merge_timer);
}

static void on_flush_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    daemon_ctx *d = w->data;
    (void)loop;
    (void)revents;
    apply_status st = batcher_tick(d->bt, clock_ms(), behind(d, false));
    if (st != APPLY_OK) {
        on_sink_failure(d, st);
        return;
    }
    if (!batcher_dirty(d->bt))
        stream_release(d);
    act_on_signals(d);
    if (d->end == END_NONE)
        arm_flush_timer(d);
}

/* [mongodb] delete_reconcile: commit what is held, then reconcile while nothing is applied (daemon/reconcile.c). A
 * transaction still open across the flush (its end not seen yet) puts the pass off by a second. */
static void on_reconcile_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    daemon_ctx *d = w->data;
    (void)revents;
    if (d->end != END_NONE)
        return;
    double next = (double)d->cfg->delete_reconcile_ms / 1000.0;
    apply_status st = batcher_flush(d->bt, FLUSH_IDLE);
    if (st == APPLY_OK && batcher_dirty(d->bt)) {
        next = 1.0;
    } else if (st == APPLY_OK) {
        report_refresh_committed(d);
        st = reconcile_pass(d);
    }
    if (st != APPLY_OK) {
        on_sink_failure(d, st);
        return;
    }
    ev_timer_stop(loop, w);
    ev_timer_set(w, next, 0.0);
    ev_timer_start(loop, w);
    act_on_signals(d); /* the pass polled the signals while it scanned */
}

static void on_progress(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    report_progress(w->data, ev_now(loop));
}

void apply_notify_wake(void *arg)
{
    daemon_ctx *d = arg;
    ev_async_send(d->loop, &d->wake);
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* a session */

static bool start_source(daemon_ctx *d, int have, const op_pos *start, char *err, size_t errlen)
{
    if (d->dump_path != NULL) {
        dump_config dc = {.path = d->dump_path,
                          .have_start = have == 1,
                          .filter = d->filter,
                          .maps = &d->cfg->maps,
                          .keep_payload = d->careful};
        if (have == 1)
            dc.start = *start;
        d->dump = dump_start(&dc, d->q, err, errlen);
        return d->dump != NULL;
    }
    if (d->source == SOURCE_CHANGE_STREAM) {
        /* One stream in one order, from the replica set or through a sharded cluster's routers. */
        stream_config sc;
        stream_config_init(&sc);
        sc.uri = d->cfg->mongodb_uri_effective;
        sc.start = *start;
        const uint8_t *tok = NULL;
        size_t tok_len = 0;
        if (sink_read_token(d->snk, &tok, &tok_len) && tok != NULL) {
            sc.token = tok;
            sc.token_len = tok_len;
        }
        sc.filter = d->filter;
        sc.maps = &d->cfg->maps;
        sc.decode_flags = d->careful ? 0 : DECODE_BORROW_PAYLOAD;
        sc.updates = d->cfg->change_stream_updates == CONFIG_STREAM_UPDATES_RAW           ? STREAM_UPDATES_RAW
                     : d->cfg->change_stream_updates == CONFIG_STREAM_UPDATES_DESCRIPTION ? STREAM_UPDATES_DESCRIPTION
                                                                                          : STREAM_UPDATES_AUTO;
        sc.lookup = d->cfg->delete_reconcile_ms > 0;
        d->srd = stream_start(&sc, d->q, err, errlen);
        return d->srd != NULL;
    }
    if (d->sharded) {
        int fatal = 0;
        d->cl = cluster_start(d, start, &fatal, err, errlen);
        if (d->cl == NULL && !fatal) {
            /* config.shards could not be read now, or the shards' checkpoints: a passing fault */
            log_warning("cannot read the sharded cluster's shards: %s; retrying", err);
            snprintf(d->retry_reason, sizeof d->retry_reason, "a MongoDB failure");
            d->end = END_RETRY;
        }
        return d->cl != NULL;
    }
    reader_config rc;
    reader_config_init(&rc);
    rc.uri = d->cfg->mongodb_uri_effective;
    rc.start = *start;
    rc.has_hold = sink_read_hold(d->snk, &rc.hold);
    rc.filter = d->filter;
    rc.maps = &d->cfg->maps;
    /* Only a careful session can set an op aside, and a dead letter keeps the op's raw BSON: other sessions drop it
     * once the text is made, which halves the memory of large documents. */
    rc.decode_flags = DECODE_KEEP_SYSTEM | (d->careful ? 0 : DECODE_BORROW_PAYLOAD); /* buckets: sink/tseries.c */
    rc.majority = d->cfg->read_concern == CONFIG_READ_MAJORITY;
    d->rd = reader_start(&rc, d->q, err, errlen);
    return d->rd != NULL;
}

/* One session: from a fresh PostgreSQL connection until it fails, a stop, the source's end or a fatal fault. */
static void run_session(daemon_ctx *d)
{
    op_pos start = {0, 0, -1};
    int have = sink_read_checkpoint(d->snk, &start);
    char at[OP_POS_STRLEN];
    d->end = END_NONE;
    if (have < 0) {
        on_sink_failure(d, APPLY_RETRY);
        return;
    }
    if (have == 0 && d->dump_path == NULL) {
        /* start.c commits a checkpoint before the first session; only someone deleting it can get us here. */
        log_error("service '%s' has no checkpoint any more (was oplog2pg.checkpoint changed by hand?); start "
                  "oplog2pg again: it copies the collections again, or use --tail-from",
                  d->cfg->service);
        d->end = END_FATAL;
        d->exit_code = EXIT_FAILURE_GENERIC;
        return;
    }
    if (have == 1)
        d->committed = start;
    d->session_live = false;
    d->caught_up = false;
    d->idle_after = 0;
    /* The refused op was committed past meanwhile (another run, or --reimport). A replay into a service without a
     * checkpoint yet (have == 0) stays careful: it starts again from the dump's first entry. The same for a group
     * being taken apart after PostgreSQL's lock table ran out. */
    if (d->careful && have == 1 && d->careful_until.shard == NULL && bound_reached(d, &d->careful_until, &start))
        d->careful = d->careful_ahead = false;
    if (d->isolating && have == 1 && d->isolate_until.shard == NULL && bound_reached(d, &d->isolate_until, &start))
        d->isolating = false;
    if (d->careful && !d->careful_ahead) {
        char until[BOUND_STRLEN];
        log_notice("applying oplog entries after %s up to %s one at a time, setting aside what PostgreSQL refuses",
                   op_pos_format(&start, at, sizeof at), bound_format(&d->careful_until, until, sizeof until));
    } else if (d->careful) {
        char until[BOUND_STRLEN], from[OP_POS_STRLEN];
        log_notice("applying oplog entries after %s batched up to %s, then up to %s one at a time, setting aside what "
                   "PostgreSQL refuses",
                   op_pos_format(&start, at, sizeof at), op_pos_format(&d->careful_from, from, sizeof from),
                   bound_format(&d->careful_until, until, sizeof until));
    } else if (have == 1) {
        log_info("service '%s': resuming after oplog entry %s (term %lld)", d->cfg->service,
                 op_pos_format(&start, at, sizeof at), (long long)start.term);
    }

    sink_set_activity(d->snk, d->dump_path ? "replaying" : "applying");
    d->notes_refused_shown = false;
    batcher_config bc = batcher_config_from(d, stepping(d));
    if (bc.batch_tables != d->tables_logged) {
        d->tables_logged = bc.batch_tables;
        d->tables_hinted = false;
        if (d->tables_cap == 0 && d->cfg->batch_tables == 0)
            log_info("flush groups commit at %llu tables at most (batch_tables = auto: a fifth of PostgreSQL's lock "
                     "table of %llu locks, at two a table)",
                     (unsigned long long)bc.batch_tables, (unsigned long long)sink_lock_slots(d->snk));
    }
    sink_set_per_op(d->snk, stepping(d) || d->cfg->apply_mode == CONFIG_APPLY_PER_OP);
    batcher_sink out =
        d->cfg->on_error == CONFIG_ON_ERROR_STOP ? batcher_sink_pg_stop(d->snk) : batcher_sink_pg(d->snk);
    d->bt = batcher_new(&bc, &out);
    d->q = queue_new((size_t)d->cfg->queue_size, (size_t)d->cfg->queue_bytes);
    if (d->bt == NULL || d->q == NULL) {
        log_error("out of memory starting the apply loop");
        d->end = END_RETRY;
        return;
    }
    queue_set_notify(d->q, apply_notify_wake, d);

    char err[512];
    if (!start_source(d, have, &start, err, sizeof err)) {
        if (d->end == END_RETRY)
            return;
        log_error("cannot start reading %s: %s", d->dump_path ? "the dump" : "the oplog", err);
        d->end = END_FATAL;
        d->exit_code = d->dump_path ? EXIT_USAGE : EXIT_CONFIG;
        return;
    }
    /* A cluster's bounds are per shard: the shards' checkpoints are known once their readers start. */
    if (d->careful && have == 1 && d->careful_until.shard != NULL)
        leave_careful_if_past(d, &start);
    if (d->isolating && have == 1 && d->isolate_until.shard != NULL)
        leave_isolating_if_past(d, &start);

    ev_io_init(&d->pg_io, on_pg_readable, sink_socket(d->snk), EV_READ);
    d->pg_io.data = d;
    ev_io_start(d->loop, &d->pg_io);
    ev_async_start(d->loop, &d->wake);
    ev_async_send(d->loop, &d->wake); /* anything queued before the notify was set */
    d->in_session = true;
    if (d->cfg->delete_reconcile_ms > 0 && d->dump_path == NULL) {
        ev_timer_set(&d->reconcile_timer, (double)d->cfg->delete_reconcile_ms / 1000.0, 0.0);
        ev_timer_start(d->loop, &d->reconcile_timer);
    }
    act_on_signals(d);
    if (d->end == END_NONE)
        ev_run(d->loop, 0);
    d->in_session = false;

    if (d->end == END_CAREFUL || d->end == END_REWIND) {
        reader_ask_stop(d->rd); /* joined later (end_of_session_cleanup): the next session starts at once */
        stream_ask_stop(d->srd);
    } else {
        reader_stop(d->rd);
        stream_stop(d->srd);
    }
    cluster_stop(d->cl);
    dump_stop(d->dump);
    ev_io_stop(d->loop, &d->pg_io);
    ev_timer_stop(d->loop, &d->flush_timer);
    ev_timer_stop(d->loop, &d->merge_timer);
    ev_timer_stop(d->loop, &d->reconcile_timer);
    ev_async_stop(d->loop, &d->wake);
    d->session_live = false;
    if (d->end == END_STOP) {
        /* Entries still queued are simply not applied: the checkpoint will say so and the next run reads them. */
        apply_status st = batcher_flush(d->bt, FLUSH_EXIT);
        if (st != APPLY_OK) {
            log_error("final commit failed: %s (the previous commit stands; nothing is lost)", sink_error(d->snk));
            d->exit_code = EXIT_FAILURE_GENERIC;
        } else {
            const batcher_stats *bs = batcher_get_stats(d->bt);
            report_refresh_committed(d);
            log_notice("stopped cleanly; committed through oplog entry %s",
                       op_pos_format(&d->committed, at, sizeof at));
            (void)bs;
        }
    }
}

/* Joins and frees the reader of the session before, if one was left running (old_rd). */
static void free_old_reader(daemon_ctx *d)
{
    reader_free(d->old_rd);
    d->old_rd = NULL;
    stream_free(d->old_srd);
    d->old_srd = NULL;
    queue_free(d->old_q);
    d->old_q = NULL;
}

static void end_of_session_cleanup(daemon_ctx *d, bool keep_reader)
{
    report_close_session(d);
    free_old_reader(d);
    if (keep_reader && (d->rd != NULL || d->srd != NULL)) {
        d->old_rd = d->rd;
        d->old_srd = d->srd;
        d->old_q = d->q;
        d->rd = NULL;
        d->srd = NULL;
        d->q = NULL;
    }
    reader_free(d->rd);
    d->rd = NULL;
    stream_free(d->srd);
    d->srd = NULL;
    cluster_free(d->cl);
    d->cl = NULL;
    dump_free(d->dump);
    d->dump = NULL;
    queue_free(d->q);
    d->q = NULL;
    batcher_free(d->bt);
    d->bt = NULL;
}

/* The initial copy's coordinator calls this about every 50 ms. */
static void copy_tick(void *arg, int64_t copied, int64_t estimate, size_t left)
{
    daemon_ctx *d = arg;
    notify_watchdog();
    signals_poll();
    if (signals_take_reload())
        do_reload(d);
    if (signals_stop_requested() && !atomic_load(&d->copy_cancel)) {
        log_notice("stopping the initial copy once its current batches are committed");
        notify_stopping();
        atomic_store(&d->copy_cancel, true);
    }
    sink_set_activity(d->snk, "copying the collections"); /* a round trip only the first time */
    d->copy_copied = copied;
    d->copy_estimate = estimate;
    double pct = estimate > 0 ? 100.0 * (double)copied / (double)estimate : 0;
    notify_status("copying: %.0f%% (%lld of ~%lld documents), %zu collection%s left", pct > 100 ? 100 : pct,
                  (long long)copied, (long long)estimate, left, left == 1 ? "" : "s");
    report_publish(d);
}

/* Is the URI a sharded cluster's routers? A URI naming a replicaSet is a replica set, without asking; otherwise
 * `hello` tells. -1: known; -2: not now (MongoDB unreachable: try again); an exit code otherwise. */
static int learn_topology(daemon_ctx *d)
{
    char err[512];
    mongoc_uri_t *uri = mongoc_uri_new(d->cfg->mongodb_uri_effective);
    bool named_set = uri != NULL && mongoc_uri_get_replica_set(uri) != NULL;
    mongoc_uri_destroy(uri);
    if (named_set) {
        d->topology_known = true;
        return -1;
    }
    bool router = false;
    int rc = cluster_detect(d->cfg, &router, err, sizeof err);
    if (rc < 0) {
        log_error("cannot ask MongoDB what it is: %s", err);
        return EXIT_CONFIG;
    }
    if (rc == 0) {
        log_warning("cannot ask MongoDB what it is (a replica set or a sharded cluster's router): %s; retrying", err);
        sink_set_activity(d->snk, "waiting for MongoDB");
        return -2;
    }
    d->topology_known = true;
    d->sharded = router;
    if (router && d->cfg->source == CONFIG_SOURCE_CHANGE_STREAM)
        log_notice("the URI names a sharded cluster's router: reading one change stream through it (the router "
                   "merges its shards' streams)");
    else if (router)
        log_notice("the URI names a sharded cluster's router: reading every shard's oplog, merged in cluster-time "
                   "order");
    return -1;
}

/* Which source to read ([mongodb] source): decided once, before the first session (daemon/source_choice.h). -1:
 * known; -2: not now (MongoDB cannot be asked, and nothing else says which: try again); an exit code otherwise. */
static int learn_source(daemon_ctx *d)
{
    if (d->cfg->source == CONFIG_SOURCE_AUTO && d->sharded) {
        /* auto on a sharded cluster's routers reads the shards' oplogs (source_choice.h): nothing to ask them */
        d->source = SOURCE_OPLOG;
        d->source_known = true;
        return -1;
    }
    int rc = source_resolve(d->cfg, "", &d->source);
    if (rc == EXIT_FAILURE_GENERIC) {
        sink_set_activity(d->snk, "waiting for MongoDB");
        return -2;
    }
    if (rc < 0)
        d->source_known = true;
    return rc;
}

/* Sessions until a stop, the source's end or a fatal fault. */
static int run_sessions(daemon_ctx *d, const daemon_options *opts)
{
    backoff b;
    backoff_init(&b, BACKOFF_MIN_MS, BACKOFF_MAX_MS);
    bool first_session = true;
    int code = EXIT_OK;
    for (;;) {
        int rc = connect_sink(d);
        if (rc >= 0)
            return rc;
        if (!d->topology_known && d->dump_path == NULL) {
            rc = learn_topology(d);
            if (rc >= 0)
                return rc;
            if (rc == -2) {
                sink_disconnect(d->snk);
                if (!nap(d, backoff_next(&b)))
                    return EXIT_OK;
                continue;
            }
        }
        if (!d->source_known && d->dump_path == NULL) {
            rc = learn_source(d);
            if (rc >= 0)
                return rc;
            if (rc == -2) {
                sink_disconnect(d->snk);
                if (!nap(d, backoff_next(&b)))
                    return EXIT_OK;
                continue;
            }
        }
        if (first_session) {
            first_session = false;
            sink_set_activity(d->snk, "starting");
            if (opts != NULL) {
                start_params sp = {.sharded = d->sharded,
                                   .change_stream = d->source == SOURCE_CHANGE_STREAM,
                                   .cfg = d->cfg,
                                   .opts = opts,
                                   .snk = d->snk,
                                   .filter = d->filter,
                                   .copy_cancel = &d->copy_cancel,
                                   .tick = copy_tick,
                                   .tick_arg = d};
                rc = start_prepare(&sp);
                if (rc >= 0)
                    return rc;
                if (signals_stop_requested())
                    return EXIT_OK;
                memory_release(); /* what the copy's workers and batches used goes back before tailing starts */
            }
        }
        double every = d->cfg->progress_interval_ms > 0 ? (double)d->cfg->progress_interval_ms / 1000.0 : 0;
        if (every > 0) {
            ev_timer_set(&d->progress_timer, every, every);
            d->last_progress = ev_now(d->loop);
            d->applied_at_last_progress = 0; /* each session's batcher counts from 0 */
            ev_timer_start(d->loop, &d->progress_timer);
        }
        d->last_tick = d->reader_quiet_since = ev_now(d->loop);
        ev_timer_start(d->loop, &d->tick_timer);

        run_session(d);

        ev_timer_stop(d->loop, &d->tick_timer);
        ev_timer_stop(d->loop, &d->progress_timer);
        session_end end = d->end;
        code = d->exit_code;
        end_of_session_cleanup(d, end == END_CAREFUL || end == END_REWIND);
        if (end == END_CAREFUL || end == END_REWIND || end == END_RESHARD) {
            /* Not a fault of the connection: start over from the checkpoint at once (stepping carefully, or with the
             * runs keeping their rows up to the sink's keep point). */
            d->careful = d->careful || end == END_CAREFUL;
            sink_disconnect(d->snk);
            continue;
        }
        if (end != END_RETRY)
            return code;
        d->pg_reconnects++;
        sink_disconnect(d->snk);
        uint64_t wait = backoff_next(&b);
        if (d->retry_reason[0] == '\0')
            snprintf(d->retry_reason, sizeof d->retry_reason, "a passing fault");
        /* Still running, and `status` says so: the service lock stays held between sessions (sink/pg.h). */
        char activity[SINK_ACTIVITY_MAX + 1];
        snprintf(activity, sizeof activity, "retrying after %.30s", d->retry_reason);
        sink_set_activity(d->snk, activity);
        notify_status("%s: resuming from the committed checkpoint in %llu ms", activity, (unsigned long long)wait);
        d->retry_reason[0] = '\0';
        if (!nap(d, wait))
            return EXIT_OK;
    }
}

static bool ctx_init(daemon_ctx *d, config *cfg, const char *config_path, const char *dump_path)
{
    memset(d, 0, sizeof *d);
    d->cfg = cfg;
    d->config_path = config_path;
    d->dump_path = dump_path;
    atomic_init(&d->copy_cancel, false);
    d->filter = make_filter(cfg);
    sink_config sc = {
        .conninfo = cfg->postgres_conninfo,
        .service = cfg->service,
        .per_op = cfg->apply_mode == CONFIG_APPLY_PER_OP,
        .maps = &cfg->maps,
        .peer_timeout_s = (int)(cfg->postgres_peer_timeout_ms / 1000),
        .max_prepared = (uint32_t)cfg->postgres_max_prepared,
        .wait_hook = pg_wait_hook,
        .wait_arg = d,
        /* Columns a map gained are filled from MongoDB; replay has no MongoDB to read (they stay NULL there). */
        .read_docs = dump_path == NULL ? read_docs_for_sink : NULL,
        .read_docs_ctx = d,
        /* The watchdog is fed from the hook while PostgreSQL keeps us waiting: at least four times per period. */
        .wait_slice_ms = notify_watchdog_usec() > 0 && notify_watchdog_usec() / 4000 < 1000
                             ? (int)(notify_watchdog_usec() / 4000 > 10 ? notify_watchdog_usec() / 4000 : 10)
                             : 1000,
    };
    d->snk = sink_new(&sc);
    d->loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
    if (d->filter == NULL || d->snk == NULL || d->loop == NULL)
        return false;
    ev_async_init(&d->wake, on_wake);
    d->wake.data = d;
    ev_timer_init(&d->flush_timer, on_flush_timer, 1.0, 0.0);
    d->flush_timer.data = d;
    ev_timer_init(&d->merge_timer, on_merge_timer, 1.0, 0.0);
    ev_timer_init(&d->reconcile_timer, on_reconcile_timer, 1.0, 0.0);
    d->reconcile_timer.data = d;
    d->merge_timer.data = d;
    ev_timer_init(&d->progress_timer, on_progress, 10.0, 10.0);
    d->progress_timer.data = d;
    double tick = TICK_S;
    if (notify_watchdog_usec() > 0 && (double)notify_watchdog_usec() / 4e6 < tick)
        tick = (double)notify_watchdog_usec() / 4e6;
    ev_timer_init(&d->tick_timer, on_tick, tick, tick);
    d->tick_timer.data = d;
    if (signals_fd() >= 0) {
        ev_io_init(&d->sig_io, on_signal_fd, signals_fd(), EV_READ);
        d->sig_io.data = d;
        ev_io_start(d->loop, &d->sig_io);
    }
    d->totals.start_time = (double)time(NULL);
    return true;
}

static void ctx_free(daemon_ctx *d)
{
    free_old_reader(d);
    bound_clear(&d->careful_until);
    bound_clear(&d->isolate_until);
    window_probe_stop(d->wprobe);
    metrics_stop(d->metrics);
    sink_free(d->snk);
    nsfilter_free(d->filter);
    if (d->loop) {
        ev_io_stop(d->loop, &d->sig_io);
        ev_loop_destroy(d->loop);
    }
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* run and replay */

int daemon_run(config *cfg, const char *config_path, const daemon_options *opts)
{
    daemon_ctx d;
    int code = EXIT_OK;
    notify_init();
    notify_status("starting: connecting to PostgreSQL");
    if (!ctx_init(&d, cfg, config_path, NULL)) {
        code = d.filter == NULL ? EXIT_CONFIG : EXIT_FAILURE_GENERIC;
        goto done;
    }
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
        d.wprobe = window_probe_start(cfg->metrics_window_interval_ms);
        if (d.wprobe == NULL)
            log_warning("[metrics] cannot start the thread that reads the oplog window: its metrics stay absent");
        report_publish(&d);
    }
    code = run_sessions(&d, opts);
    if (signals_stop_requested() && code == EXIT_OK)
        notify_stopping();
done:
    ctx_free(&d);
    return code;
}

int daemon_replay(config *cfg, const char *dump_path)
{
    daemon_ctx d;
    int code = EXIT_OK;
    if (!ctx_init(&d, cfg, NULL, dump_path)) {
        code = d.filter == NULL ? EXIT_CONFIG : EXIT_FAILURE_GENERIC;
        goto done;
    }
    FILE *probe = fopen(dump_path, "rb");
    if (probe == NULL) {
        log_error("%s: cannot open it", dump_path);
        code = EXIT_USAGE;
        goto done;
    }
    fclose(probe);
    code = run_sessions(&d, NULL);
    if (code == EXIT_OK && !signals_stop_requested()) {
        char at[OP_POS_STRLEN];
        log_notice("replayed %llu entries from %s; committed through %s", (unsigned long long)d.totals.entries_applied,
                   dump_path, op_pos_format(&d.committed, at, sizeof at));
    }
done:
    ctx_free(&d);
    return code;
}

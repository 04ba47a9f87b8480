/*
 * connect.c — connecting the sink (sink_connect): the oplog2pg schema installed, the service lock taken on a
 * connection of its own (the fence), the owner token written into the checkpoint row and the checkpoint read, the
 * round trip and the lock table measured, the typed maps' tables brought up to date (backfill.c), and the writing
 * connection left in pipeline mode for pg.c. All of it before the first group, outside pipeline mode.
 */
#include "pg_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sink/pgerror.h"
#include "sql_embed.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/utf8.h"

/* ---------------------------------------------------------------------------------------------------------------- */
/* connecting (outside pipeline mode) */

bool sink_install_schema(pgconn *c, pgconn_error *err)
{
    /* One installer at a time: CREATE OR REPLACE FUNCTION and CREATE ... IF NOT EXISTS are not safe against a
     * concurrent run of themselves (two daemons starting together, a copy beside its daemon). */
    if (!pgconn_exec(c, "BEGIN; SELECT pg_advisory_xact_lock(hashtextextended('oplog2pg.schema', 0))", NULL, false,
                     err))
        return false;
    if (pgconn_exec(c, oplog2pg_sql_schema, NULL, false, err) &&
        pgconn_exec(c, oplog2pg_sql_update_functions, NULL, false, err) && pgconn_exec(c, "COMMIT", NULL, false, err))
        return true;
    pgconn_error ignored;
    pgconn_exec(c, "ROLLBACK", NULL, false, &ignored);
    return false;
}

static bool install_schema(sink *s)
{
    pgconn_error e;
    if (sink_install_schema(s->c, &e))
        return true;
    sink_set_err(s, e.status, e.sqlstate, "installing the oplog2pg schema: %s", e.message);
    return false;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* the service lock */

/* The session advisory lock that makes one daemon per service is held on a connection of its own, which lives from
 * the first connect to sink_free, not on the one that writes: between two sessions of the writing connection (a
 * retry, a careful pass) the lock stays taken, so no rival can slip in, and `status` (sink_probe) finds the daemon
 * running whatever it is doing. That connection also says what the daemon does (sink_set_activity), in its
 * application_name, where pg_stat_activity shows it to everyone. A lock whose connection was lost (the server
 * restarted, the session was terminated) is taken again at the next connect. */
static void fence_drop(sink *s)
{
    pgconn_close(s->fence);
    s->fence = NULL;
    s->fence_held = false;
    s->activity[0] = '\0';
}

static bool fence_take(sink *s)
{
    pgconn_error e;
    PGresult *res = NULL;
    const char *params[1] = {s->service};
    if (s->fence != NULL && s->fence_held) {
        if (pgconn_exec(s->fence, "SELECT 1", NULL, false, &e))
            return true;
        log_info("the connection holding the service lock was lost (%s): taking the lock again", e.message);
        fence_drop(s);
    }
    if (s->fence == NULL) {
        pgconn_params pp = {.conninfo = s->conninfo,
                            .app_name = SINK_FENCE_APP,
                            .peer_timeout_s = s->cfg.peer_timeout_s,
                            .wait_hook = s->cfg.wait_hook,
                            .wait_arg = s->cfg.wait_arg,
                            .wait_slice_ms = s->cfg.wait_slice_ms};
        s->fence = pgconn_connect(&pp, &e);
        if (s->fence == NULL) {
            sink_set_err(s, e.status, e.sqlstate, "connecting for the service lock: %s", e.message);
            return false;
        }
    }
    if (!pgconn_exec_params(s->fence, "SELECT pg_try_advisory_lock(hashtextextended('oplog2pg.service:' || $1, 0))", 1,
                            params, NULL, NULL, 0, &res, false, &e)) {
        sink_set_err(s, e.status, e.sqlstate, "taking the service lock: %s", e.message);
        fence_drop(s);
        return false;
    }
    s->fence_held = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    if (!s->fence_held) {
        /* The connection stays for the next attempt. */
        sink_set_err(s, APPLY_FENCED, NULL,
                     "another oplog2pg is running for service '%s' on this database (it holds the service lock); "
                     "stop it, or give this one a different [replication] service",
                     s->service);
        return false;
    }
    return true;
}

void sink_set_activity(sink *s, const char *what)
{
    if (s->fence == NULL || !s->fence_held || strcmp(s->activity, what) == 0)
        return;
    char name[SINK_ACTIVITY_MAX + sizeof SINK_FENCE_APP + 2];
    snprintf(name, sizeof name, "%s: %.*s", SINK_FENCE_APP, SINK_ACTIVITY_MAX, what);
    const char *params[1] = {name};
    pgconn_error e;
    if (!pgconn_exec_params(s->fence, "SELECT set_config('application_name', $1, false)", 1, params, NULL, NULL, 0,
                            NULL, false, &e)) {
        /* Lost with the lock: the next connect takes both again. */
        log_info("the connection holding the service lock was lost (%s); it is made again at the next connect",
                 e.message);
        fence_drop(s);
        return;
    }
    snprintf(s->activity, sizeof s->activity, "%.*s", SINK_ACTIVITY_MAX, what);
}

/* The committed resume token, column 6 of the claimed checkpoint row (bytea in its text form). */
static bool read_token(sink *s, const PGresult *res)
{
    (void)sink_token_put(&s->ckpt_tok, NULL, 0);
    (void)sink_token_put(&s->tok, NULL, 0);
    s->tok_lost = false;
    if (PQgetisnull(res, 0, 6))
        return true;
    size_t len = 0;
    unsigned char *raw = PQunescapeBytea((const unsigned char *)PQgetvalue(res, 0, 6), &len);
    bool ok = raw != NULL && sink_token_put(&s->ckpt_tok, raw, len);
    PQfreemem(raw);
    if (!ok)
        sink_set_err(s, APPLY_NOMEM, NULL, "out of memory reading the resume token");
    return ok;
}

sink_status sink_connect(sink *s)
{
    sink_disconnect(s);
    sink_clear_err(s);

    pgconn_params pp = {.conninfo = s->conninfo,
                        .app_name = "oplog2pg",
                        .peer_timeout_s = s->cfg.peer_timeout_s,
                        .wait_hook = s->cfg.wait_hook,
                        .wait_arg = s->cfg.wait_arg,
                        .wait_slice_ms = s->cfg.wait_slice_ms};
    pgconn_error e;
    pgconn *c = pgconn_connect(&pp, &e);
    if (c == NULL) {
        const char *advice = pgerror_advice(e.sqlstate);
        sink_set_err(s, e.status, e.sqlstate, "%s%s%s", e.message, advice[0] ? "; " : "", advice);
        return s->failed;
    }
    pipe_attach(s, c);
    PGresult *res = NULL;
    if (PQserverVersion(s->conn) < 130000) {
        sink_set_err(s, APPLY_CONFIG, NULL, "PostgreSQL %d is too old: oplog2pg needs 13 or later",
                     PQserverVersion(s->conn));
        goto fail;
    }
    if (!pipe_exec(s, "SET synchronous_commit = on; SET client_min_messages = warning", 0, NULL, NULL,
                   "setting session options") ||
        !install_schema(s))
        goto fail;
    /* The round trip, for the choice between COPY and pipelined upserts (sink_copy_min_rows). */
    s->rtt_s = 1e9;
    for (int i = 0; i < 3; i++) {
        double t0 = clock_s();
        if (!pipe_exec(s, "SELECT 1", 0, NULL, NULL, "measuring the round trip"))
            goto fail;
        if (clock_s() - t0 < s->rtt_s)
            s->rtt_s = clock_s() - t0;
    }
    log_debug("PostgreSQL round trip: %.2f ms; insert runs of %zu rows or more go by COPY", s->rtt_s * 1e3,
              sink_copy_min_rows(s));

    /* The shared lock table's size, for batch_tables = auto. PostgreSQL sizes it for max_locks_per_transaction locks
     * per process slot (lock.c: NLOCKENTS, over MaxBackends and the prepared transactions; MaxBackends counts the
     * connections, the autovacuum workers and launcher, the background workers and the WAL senders). A server that
     * counts further slots (17's auxiliary ones, 18's autovacuum_worker_slots) has a larger table: the figure errs
     * low. */
    if (!pipe_exec(s,
                   "SELECT current_setting('max_locks_per_transaction')::bigint * "
                   "(current_setting('max_connections')::bigint + current_setting('autovacuum_max_workers')::bigint "
                   "+ 1 + current_setting('max_worker_processes')::bigint + current_setting('max_wal_senders')::bigint "
                   "+ current_setting('max_prepared_transactions')::bigint)",
                   0, NULL, &res, "reading the size of the lock table"))
        goto fail;
    s->lock_slots = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    res = NULL;

    /* Fence: one daemon per service. */
    const char *params[1] = {s->service};
    if (!fence_take(s))
        goto fail;
    if (!pipe_exec(s,
                   "INSERT INTO oplog2pg.checkpoint (service, owner) VALUES ($1, gen_random_uuid()) "
                   "ON CONFLICT (service) DO UPDATE SET owner = excluded.owner "
                   "RETURNING owner, ts_sec, ts_inc, term, txn_oldest_sec, txn_oldest_inc, resume_token",
                   1, params, &res, "claiming the checkpoint row"))
        goto fail;
    snprintf(s->owner, sizeof s->owner, "%s", PQgetvalue(res, 0, 0));
    if (PQgetisnull(res, 0, 1)) {
        s->have_ckpt = 0;
    } else {
        sink_row_pos(res, 0, 1, &s->ckpt);
        s->have_ckpt = 1;
    }
    s->ckpt_has_hold = !PQgetisnull(res, 0, 4) && !PQgetisnull(res, 0, 5);
    if (s->ckpt_has_hold) {
        s->ckpt_hold.secs = (uint32_t)strtoul(PQgetvalue(res, 0, 4), NULL, 10);
        s->ckpt_hold.inc = (uint32_t)strtoul(PQgetvalue(res, 0, 5), NULL, 10);
        s->ckpt_hold.term = -1;
    }
    if (!read_token(s, res))
        goto fail;
    PQclear(res);
    res = NULL;

    /* A sharded cluster's checkpoints, one row per shard (none for a replica set). */
    if (!sink_shards_load(s))
        goto fail;

    /* The oplog's end as this service's initial copy finished: until there tailing meets rows the copy wrote. */
    if (!pipe_exec(s,
                   "SELECT end_sec, end_inc, end_term FROM oplog2pg.copy_state "
                   "WHERE service = $1 AND finished_at IS NOT NULL AND end_sec IS NOT NULL",
                   1, params, &res, "reading the end of the initial copy"))
        goto fail;
    if (PQntuples(res) == 1) {
        op_pos end;
        sink_row_pos(res, 0, 0, &end);
        if (s->have_ckpt == 1 && op_pos_cmp(&s->ckpt, &end) < 0 && op_pos_cmp(&s->keep_until, &end) < 0) {
            char at[32];
            sink_fmt_pos(&end, at, sizeof at);
            log_info("inserts up to oplog entry %s, the oplog's end as the initial copy finished, go as upserts: "
                     "tailing meets rows the copy wrote until there",
                     at);
        }
        sink_set_copy_end(s, &end);
    }
    PQclear(res);
    res = NULL;

    /* Columns a map gained since its tables were made: added, and filled from doc where it is kept. */
    if (!sink_sync_maps(s))
        goto fail;

    if (PQenterPipelineMode(s->conn) != 1) {
        sink_set_err(s, APPLY_RETRY, NULL, "entering pipeline mode: %s", PQerrorMessage(s->conn));
        goto fail;
    }
    return APPLY_OK;

fail : {
    sink_status st = s->failed;
    PQclear(res);
    pipe_attach(s, NULL);
    return st;
}
}

uint64_t sink_lock_slots(const sink *s)
{
    return s->lock_slots;
}

uint64_t sink_auto_batch_tables(const sink *s)
{
    if (s->lock_slots == 0)
        return SINK_AUTO_BATCH_TABLES;
    uint64_t n = s->lock_slots / 5 / 2;
    return n > 0 ? n : 1;
}

int sink_read_checkpoint(sink *s, op_pos *out)
{
    if (s->conn == NULL)
        return -1;
    if (s->have_ckpt == 1)
        *out = s->ckpt;
    return s->have_ckpt;
}

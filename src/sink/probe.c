/*
 * probe.c — the read-only look at a service for `check` and `status` (see pg.h): no lock, no write. For a sharded
 * cluster it reads each shard's row of oplog2pg.shard_checkpoint too.
 */
#include "pg_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------------------------- */
/* probe */

/* The service's rows of oplog2pg.shard_checkpoint into out->shards (none when the table is not there: a schema of an
 * earlier version, which status leaves as it is). */
static bool probe_shards(pgconn *c, const char *service, sink_probe_result *out, pgconn_error *err)
{
    PGresult *res = NULL;
    if (!pgconn_exec(c, "SELECT to_regclass('oplog2pg.shard_checkpoint') IS NOT NULL", &res, false, err))
        return false;
    bool have = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    if (!have)
        return true;
    const char *params[1] = {service};
    if (!pgconn_exec_params(c,
                            /* hosts through to_jsonb: a schema not upgraded yet has no such column */
                            "SELECT shard, ts_sec, ts_inc, term, applied_at, txn_oldest_sec, txn_oldest_inc, "
                            "to_jsonb(c) ->> 'hosts' FROM oplog2pg.shard_checkpoint c WHERE service = $1 "
                            "ORDER BY shard COLLATE \"C\"",
                            1, params, NULL, NULL, 0, &res, false, err))
        return false;
    int n = PQntuples(res);
    if (n > 0 && (out->shards = calloc((size_t)n, sizeof *out->shards)) == NULL)
        goto oom;
    for (int i = 0; i < n; i++) {
        sink_probe_shard *sh = &out->shards[i];
        if ((sh->shard = strdup(PQgetvalue(res, i, 0))) == NULL)
            goto oom;
        out->nshards++;
        if (!PQgetisnull(res, i, 7) && (sh->hosts = strdup(PQgetvalue(res, i, 7))) == NULL)
            goto oom;
        sink_row_pos(res, i, 1, &sh->pos);
        snprintf(sh->applied_at, sizeof sh->applied_at, "%s", PQgetvalue(res, i, 4));
        sh->has_hold = !PQgetisnull(res, i, 5) && !PQgetisnull(res, i, 6);
        sh->hold.term = -1;
        if (sh->has_hold) {
            sh->hold.secs = (uint32_t)strtoul(PQgetvalue(res, i, 5), NULL, 10);
            sh->hold.inc = (uint32_t)strtoul(PQgetvalue(res, i, 6), NULL, 10);
        }
    }
    PQclear(res);
    return true;
oom:
    PQclear(res);
    memset(err, 0, sizeof *err);
    err->status = APPLY_NOMEM;
    snprintf(err->message, sizeof err->message, "out of memory reading the shards' checkpoints");
    return false;
}

void sink_probe_free(sink_probe_result *r)
{
    for (size_t i = 0; i < r->nshards; i++) {
        free(r->shards[i].shard);
        free(r->shards[i].hosts);
    }
    free(r->shards);
    r->shards = NULL;
    r->nshards = 0;
    free(r->token);
    r->token = NULL;
    r->token_len = 0;
}

bool sink_probe(const char *conninfo, const char *service, sink_probe_result *out, pgconn_error *err)
{
    memset(out, 0, sizeof *out);
    pgconn_params pp = {.conninfo = conninfo, .app_name = "oplog2pg-probe"};
    pgconn *c = pgconn_connect(&pp, err);
    PGresult *res = NULL;
    bool ok = false;
    if (c == NULL)
        return false;
    int v = PQserverVersion(c->pg);
    snprintf(out->server_version, sizeof out->server_version, "%d.%d", v / 10000, v % 10000);
    /* The advisory lock the daemon holds for as long as it runs (pg.h, "Fencing"), in this database: a bigint key
     * shows in pg_locks as classid (high half), objid (low half). The application_name of the session holding it
     * says what the daemon does (sink_set_activity); state_change is when that last changed. */
    const char *params[1] = {service};
    if (!pgconn_exec_params(
            c,
            "WITH k AS (SELECT hashtextextended('oplog2pg.service:' || $1, 0) AS key), "
            "l AS (SELECT pid FROM pg_locks, k WHERE locktype = 'advisory' AND objsubid = 1 AND granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND classid::bigint = ((key >> 32) & 4294967295) AND objid::bigint = (key & 4294967295) "
            "LIMIT 1) "
            "SELECT to_regclass('oplog2pg.checkpoint') IS NOT NULL, EXISTS (SELECT 1 FROM l), "
            "a.application_name, extract(epoch FROM a.state_change)::bigint "
            "FROM (SELECT 1) one LEFT JOIN l ON true LEFT JOIN pg_stat_activity a ON a.pid = l.pid",
            1, params, NULL, NULL, 0, &res, false, err))
        goto done;
    out->have_table = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    out->running = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
    const char *app = PQgetisnull(res, 0, 2) ? "" : PQgetvalue(res, 0, 2);
    const char *prefix = SINK_FENCE_APP ": ";
    if (out->running && strncmp(app, prefix, strlen(prefix)) == 0) {
        snprintf(out->activity, sizeof out->activity, "%s", app + strlen(prefix));
        out->activity_since = PQgetisnull(res, 0, 3) ? 0 : strtoll(PQgetvalue(res, 0, 3), NULL, 10);
    }
    PQclear(res);
    res = NULL;
    if (out->have_table) {
        if (!pgconn_exec_params(c,
                                "SELECT ts_sec, ts_inc, term, applied_at, to_jsonb(c)->>'txn_oldest_sec', "
                                "to_jsonb(c)->>'txn_oldest_inc', to_jsonb(c)->>'source', "
                                "to_jsonb(c)->>'resume_token' FROM oplog2pg.checkpoint c "
                                "WHERE service = $1 AND ts_sec IS NOT NULL",
                                1, params, NULL, NULL, 0, &res, false, err))
            goto done;
        if (PQntuples(res) == 1) {
            out->have_checkpoint = true;
            sink_row_pos(res, 0, 0, &out->pos);
            snprintf(out->applied_at, sizeof out->applied_at, "%s", PQgetvalue(res, 0, 3));
            /* to_jsonb: a schema of an earlier version has no such columns (status is read-only: it installs
             * nothing), and they then read as NULL. */
            out->has_hold = !PQgetisnull(res, 0, 4) && !PQgetisnull(res, 0, 5);
            if (out->has_hold) {
                out->hold.secs = (uint32_t)strtoul(PQgetvalue(res, 0, 4), NULL, 10);
                out->hold.inc = (uint32_t)strtoul(PQgetvalue(res, 0, 5), NULL, 10);
                out->hold.term = -1;
            }
            if (!PQgetisnull(res, 0, 6))
                snprintf(out->source, sizeof out->source, "%s", PQgetvalue(res, 0, 6));
            /* a bytea in JSON is its hex text form ("\\x..."), which PQunescapeBytea reads */
            if (!PQgetisnull(res, 0, 7)) {
                size_t len = 0;
                unsigned char *raw = PQunescapeBytea((const unsigned char *)PQgetvalue(res, 0, 7), &len);
                if (raw != NULL && len > 0 && (out->token = malloc(len)) != NULL) {
                    memcpy(out->token, raw, len);
                    out->token_len = len;
                }
                PQfreemem(raw);
            }
        }
        PQclear(res);
        res = NULL;
        /* The table comes with the schema of a later version: an older database may not have it yet. */
        if (!pgconn_exec(c, "SELECT to_regclass('oplog2pg.dead_letter') IS NOT NULL", &res, false, err))
            goto done;
        bool have_dl = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
        PQclear(res);
        res = NULL;
        if (have_dl) {
            if (!pgconn_exec_params(c, "SELECT count(*) FROM oplog2pg.dead_letter WHERE service = $1", 1, params, NULL,
                                    NULL, 0, &res, false, err))
                goto done;
            out->dead_letters = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        }
        PQclear(res);
        res = NULL;
        /* time-series tables (a later schema's) */
        if (!pgconn_exec(c, "SELECT to_regclass('oplog2pg.timeseries_bucket') IS NOT NULL", &res, false, err))
            goto done;
        bool have_ts = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
        PQclear(res);
        res = NULL;
        if (have_ts) {
            if (!pgconn_exec_params(c,
                                    "SELECT count(*), coalesce(sum((SELECT count(*) FROM oplog2pg.timeseries_bucket b "
                                    "WHERE b.schema_name = t.schema_name AND b.table_name = t.table_name)), 0) "
                                    "FROM oplog2pg.tables t JOIN oplog2pg.timeseries x USING (schema_name, table_name) "
                                    "WHERE t.service = $1",
                                    1, params, NULL, NULL, 0, &res, false, err))
                goto done;
            out->ts_tables = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
            out->ts_buckets = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
        }
        PQclear(res);
        res = NULL;
        if (!probe_shards(c, service, out, err))
            goto done;
    }
    ok = true;
done:
    PQclear(res);
    pgconn_close(c);
    return ok;
}

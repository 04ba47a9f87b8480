/*
 * shards.c — a sharded cluster's checkpoints (see "A sharded cluster" in pg.h): which shard each source is, the
 * sources' positions the next commit writes, the statements that write them into the group's transaction, and the
 * committed rows of oplog2pg.shard_checkpoint as read at connect and moved by each commit.
 *
 * NOTES
 * A replica set's sink never gets here beyond a copy of the positions the batcher hands it: with no shard named
 * (nshards 0) the commit sends what it always sent. A sharded one's commit sends, before its COMMIT and pipelined
 * like every other statement, one advance_shard_checkpoint per source that moved and one advance_cluster_checkpoint:
 * the group still waits on the network once. Both are prepared at the first commit on a connection. Each of them
 * checks the owner token, so a daemon fenced out fails at the first of them and its transaction, data included,
 * rolls back; a shard whose position would go backwards does the same (O2BAK). The rows in memory change only once
 * PostgreSQL has answered the COMMIT.
 */
#include "pg_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------------------------- */
/* the committed rows */

/* Where shard's row is in s->shard_rows (ordered by shard id, as strcmp orders them), or where it would go. */
static size_t row_find(const sink *s, const char *shard, bool *found)
{
    size_t lo = 0, hi = s->nshard_rows;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(s->shard_rows[mid].shard, shard);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

/* Puts shard's row at pos with its hold (NULL: none), adding it when missing. False when out of memory. */
static bool row_put(sink *s, const char *shard, const op_pos *pos, const op_pos *hold)
{
    bool found;
    size_t i = row_find(s, shard, &found);
    if (!found) {
        if (s->nshard_rows == s->shard_rows_cap) {
            size_t cap = s->shard_rows_cap ? s->shard_rows_cap * 2 : 8;
            sink_shard_row *nr = realloc(s->shard_rows, cap * sizeof *nr);
            if (nr == NULL)
                return false;
            s->shard_rows = nr;
            s->shard_rows_cap = cap;
        }
        char *name = strdup(shard);
        if (name == NULL)
            return false;
        memmove(&s->shard_rows[i + 1], &s->shard_rows[i], (s->nshard_rows - i) * sizeof *s->shard_rows);
        s->nshard_rows++;
        s->shard_rows[i].shard = name;
        s->shard_rows[i].hosts = NULL;
    }
    sink_shard_row *r = &s->shard_rows[i];
    r->pos = *pos;
    r->has_hold = hold != NULL;
    r->hold = hold != NULL ? *hold : (op_pos){0, 0, -1};
    return true;
}

/* Notes the hosts stored in shard's row (which exists). False when out of memory. */
static bool row_set_hosts(sink *s, const char *shard, const char *hosts)
{
    bool found;
    size_t i = row_find(s, shard, &found);
    if (!found)
        return true;
    char *copy = hosts != NULL ? strdup(hosts) : NULL;
    if (hosts != NULL && copy == NULL)
        return false;
    free(s->shard_rows[i].hosts);
    s->shard_rows[i].hosts = copy;
    return true;
}

/* Source i has hosts to store that its committed row does not hold. */
static bool hosts_to_store(const sink *s, size_t i)
{
    if (s->shard_hosts == NULL || i >= s->nshards || s->shard_hosts[i] == NULL)
        return false;
    const char *stored = sink_shard_hosts(s, s->shard_names[i]);
    return stored == NULL || strcmp(stored, s->shard_hosts[i]) != 0;
}

static void row_delete(sink *s, const char *shard)
{
    bool found;
    size_t i = row_find(s, shard, &found);
    if (!found)
        return;
    free(s->shard_rows[i].shard);
    free(s->shard_rows[i].hosts);
    memmove(&s->shard_rows[i], &s->shard_rows[i + 1], (s->nshard_rows - i - 1) * sizeof *s->shard_rows);
    s->nshard_rows--;
}

void sink_shards_clear(sink *s, bool connection)
{
    for (size_t i = 0; i < s->nshard_rows; i++) {
        free(s->shard_rows[i].shard);
        free(s->shard_rows[i].hosts);
    }
    s->nshard_rows = 0;
    if (connection)
        s->shard_prepared = false;
}

bool sink_shards_load(sink *s)
{
    sink_shards_clear(s, true);
    PGresult *res = NULL;
    const char *params[1] = {s->service};
    if (!pipe_exec(
            s,
            "SELECT shard, ts_sec, ts_inc, term, txn_oldest_sec, txn_oldest_inc, hosts FROM oplog2pg.shard_checkpoint "
            "WHERE service = $1 ORDER BY shard COLLATE \"C\"",
            1, params, &res, "reading the shards' checkpoints"))
        return false;
    for (int i = 0; i < PQntuples(res); i++) {
        op_pos pos, hold = {0, 0, -1};
        sink_row_pos(res, i, 1, &pos);
        bool has_hold = !PQgetisnull(res, i, 4) && !PQgetisnull(res, i, 5);
        if (has_hold) {
            hold.secs = (uint32_t)strtoul(PQgetvalue(res, i, 4), NULL, 10);
            hold.inc = (uint32_t)strtoul(PQgetvalue(res, i, 5), NULL, 10);
        }
        if (!row_put(s, PQgetvalue(res, i, 0), &pos, has_hold ? &hold : NULL) ||
            !row_set_hosts(s, PQgetvalue(res, i, 0), PQgetisnull(res, i, 6) ? NULL : PQgetvalue(res, i, 6))) {
            PQclear(res);
            sink_set_err(s, APPLY_NOMEM, NULL, "out of memory reading the shards' checkpoints");
            return false;
        }
    }
    PQclear(res);
    return true;
}

static void free_hosts(sink *s)
{
    for (size_t i = 0; s->shard_hosts != NULL && i < s->nshards; i++)
        free(s->shard_hosts[i]);
    free(s->shard_hosts);
    s->shard_hosts = NULL;
}

void sink_shards_free(sink *s)
{
    sink_shards_clear(s, true);
    free(s->shard_rows);
    s->shard_rows = NULL;
    s->shard_rows_cap = 0;
    free_hosts(s);
    for (size_t i = 0; i < s->nshards; i++)
        free(s->shard_names[i]);
    free(s->shard_names);
    s->shard_names = NULL;
    s->nshards = 0;
    free(s->src);
    s->src = NULL;
    s->nsrc = s->src_cap = 0;
}

int sink_read_shard_checkpoints(sink *s,
                                void (*each)(void *arg, const char *shard, const op_pos *pos, bool has_hold,
                                             const op_pos *hold),
                                void *arg)
{
    if (s->conn == NULL)
        return -1;
    for (size_t i = 0; i < s->nshard_rows; i++) {
        const sink_shard_row *r = &s->shard_rows[i];
        each(arg, r->shard, &r->pos, r->has_hold, &r->hold);
    }
    return (int)s->nshard_rows;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* the sources */

sink_status sink_set_shards(sink *s, const char *const *names, size_t n)
{
    char **copy = n > 0 ? calloc(n, sizeof *copy) : NULL;
    if (n > 0 && copy == NULL)
        goto oom;
    for (size_t i = 0; i < n; i++) {
        if ((copy[i] = strdup(names[i] != NULL ? names[i] : "")) == NULL) {
            for (size_t k = 0; k < i; k++)
                free(copy[k]);
            free(copy);
            goto oom;
        }
    }
    free_hosts(s); /* they were by source index */
    for (size_t i = 0; i < s->nshards; i++)
        free(s->shard_names[i]);
    free(s->shard_names);
    s->shard_names = copy;
    s->nshards = n;
    return APPLY_OK;
oom:
    sink_set_err(s, APPLY_NOMEM, NULL, "out of memory naming the shards");
    return s->failed;
}

sink_status sink_set_shard_hosts(sink *s, const char *const *hosts, size_t n)
{
    free_hosts(s);
    if (s->nshards == 0)
        return APPLY_OK;
    if ((s->shard_hosts = calloc(s->nshards, sizeof *s->shard_hosts)) == NULL)
        goto oom;
    for (size_t i = 0; i < n && i < s->nshards; i++)
        if (hosts[i] != NULL && (s->shard_hosts[i] = strdup(hosts[i])) == NULL)
            goto oom;
    return APPLY_OK;
oom:
    free_hosts(s);
    sink_set_err(s, APPLY_NOMEM, NULL, "out of memory noting the shards' hosts");
    return s->failed;
}

const char *sink_shard_hosts(const sink *s, const char *shard)
{
    bool found;
    size_t i = row_find(s, shard, &found);
    return found ? s->shard_rows[i].hosts : NULL;
}

void sink_set_source_positions(sink *s, const batcher_source_pos *p, size_t n)
{
    if (n > s->src_cap) {
        batcher_source_pos *np = realloc(s->src, n * sizeof *np);
        if (np == NULL) {
            /* Nothing may be committed without its shards' positions: the commit that follows fails. */
            sink_set_err(s, APPLY_NOMEM, NULL, "out of memory for the sources' positions");
            s->nsrc = 0;
            return;
        }
        s->src = np;
        s->src_cap = n;
    }
    if (n > 0)
        memcpy(s->src, p, n * sizeof *p);
    s->nsrc = n;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* the commit's statements */

#define SHARD_STMT   "ckpt_shard"
#define CLUSTER_STMT "ckpt_cluster"

static sink_status prepare(sink *s, const char *name, const char *sql)
{
    if (!pipe_push_pending(s, P_PREPARE, NULL, NULL))
        return s->failed;
    return pipe_after_send(s, PQsendPrepare(s->conn, name, sql, 0, NULL) == 1, strlen(sql));
}

sink_status sink_shards_send(sink *s, const op_pos *pos)
{
    for (size_t i = 0; i < s->nsrc; i++) {
        if (s->src[i].moved && i >= s->nshards) {
            /* A source the sink cannot name has entries in this group: committing would leave its position behind
             * the rows it wrote. */
            sink_set_err(s, APPLY_CONFIG, NULL,
                         "internal error: source %zu moved, but the sink knows %zu shards: nothing is committed", i,
                         s->nshards);
            return s->failed;
        }
    }
    if (!s->shard_prepared) {
        if (prepare(s, SHARD_STMT, "SELECT oplog2pg.advance_shard_checkpoint($1, $2::uuid, $3, $4, $5, $6, $7, $8)") !=
                APPLY_OK ||
            prepare(s, CLUSTER_STMT, "SELECT oplog2pg.advance_cluster_checkpoint($1, $2::uuid, $3, $4)") != APPLY_OK)
            return s->failed;
        s->shard_prepared = true;
    }
    char secs[16], inc[16], term[24], hsecs[16], hinc[16];
    for (size_t i = 0; i < s->nsrc; i++) {
        const batcher_source_pos *sp = &s->src[i];
        if (!sp->moved)
            continue;
        snprintf(secs, sizeof secs, "%u", sp->pos.secs);
        snprintf(inc, sizeof inc, "%u", sp->pos.inc);
        snprintf(term, sizeof term, "%lld", (long long)sp->pos.term);
        snprintf(hsecs, sizeof hsecs, "%u", sp->hold.secs);
        snprintf(hinc, sizeof hinc, "%u", sp->hold.inc);
        const char *values[8] = {s->service,
                                 s->owner,
                                 s->shard_names[i],
                                 secs,
                                 inc,
                                 sp->pos.term < 0 ? NULL : term,
                                 sp->has_hold ? hsecs : NULL,
                                 sp->has_hold ? hinc : NULL};
        if (!pipe_push_pending(s, P_CKPT, NULL, &sp->pos))
            return s->failed;
        if (pipe_after_send(s, PQsendQueryPrepared(s->conn, SHARD_STMT, 8, values, NULL, NULL, 0) == 1, 160) !=
            APPLY_OK)
            return s->failed;
        if (hosts_to_store(s, i)) {
            /* Once a session per shard (its row then holds them): no statement to prepare. */
            static const char sql[] =
                "UPDATE oplog2pg.shard_checkpoint SET hosts = $3 WHERE service = $1 AND shard = $2";
            const char *hv[3] = {s->service, s->shard_names[i], s->shard_hosts[i]};
            if (!pipe_push_pending(s, P_CKPT, NULL, &sp->pos) ||
                pipe_after_send(s, PQsendQueryParams(s->conn, sql, 3, NULL, hv, NULL, NULL, 0) == 1, sizeof sql) !=
                    APPLY_OK)
                return s->failed;
        }
    }
    snprintf(secs, sizeof secs, "%u", pos->secs);
    snprintf(inc, sizeof inc, "%u", pos->inc);
    const char *values[4] = {s->service, s->owner, secs, inc};
    if (!pipe_push_pending(s, P_CKPT, NULL, pos))
        return s->failed;
    return pipe_after_send(s, PQsendQueryPrepared(s->conn, CLUSTER_STMT, 4, values, NULL, NULL, 0) == 1, 96);
}

bool sink_shards_done(sink *s, bool committed)
{
    bool ok = true;
    for (size_t i = 0; i < s->nsrc; i++) {
        batcher_source_pos *sp = &s->src[i];
        if (!sp->moved)
            continue;
        sp->moved = false; /* written, or lost with the group: either way, the next commit writes what moves next */
        if (committed && i < s->nshards && !row_put(s, s->shard_names[i], &sp->pos, sp->has_hold ? &sp->hold : NULL))
            ok = false;
        else if (committed && hosts_to_store(s, i) && !row_set_hosts(s, s->shard_names[i], s->shard_hosts[i]))
            ok = false;
    }
    if (!ok) {
        /* The rows are committed; only the copy kept for sink_read_shard_checkpoints is short of memory. It is read
         * again at the next connect, which this failure brings about. */
        sink_set_err(s, APPLY_NOMEM, NULL, "out of memory noting the shards' checkpoints");
    }
    return ok;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* the explicit move */

sink_status sink_set_shard_checkpoint(sink *s, const char *shard, const op_pos *pos, const char *hosts)
{
    if (s->in_txn) {
        sink_set_err(s, APPLY_CONFIG, NULL, "internal error: a shard's checkpoint is set only outside a flush group");
        return s->failed;
    }
    char secs[16], inc[16], term[24];
    const char *values[6] = {s->service, s->owner, shard, NULL, NULL, NULL};
    if (pos != NULL) {
        snprintf(secs, sizeof secs, "%u", pos->secs);
        snprintf(inc, sizeof inc, "%u", pos->inc);
        snprintf(term, sizeof term, "%lld", (long long)pos->term);
        values[3] = secs;
        values[4] = inc;
        values[5] = pos->term < 0 ? NULL : term;
    }
    static const char sql[] = "SELECT oplog2pg.set_shard_checkpoint($1, $2::uuid, $3, $4, $5, $6)";
    if (pipe_begin_if_needed(s) != APPLY_OK || !pipe_push_pending(s, P_CKPT, NULL, pos))
        return s->failed;
    if (pipe_after_send(s, PQsendQueryParams(s->conn, sql, 6, NULL, values, NULL, NULL, 0) == 1, sizeof sql) !=
        APPLY_OK)
        return s->failed;
    if (pos != NULL && hosts != NULL) {
        static const char hsql[] = "UPDATE oplog2pg.shard_checkpoint SET hosts = $3 WHERE service = $1 AND shard = $2";
        const char *hv[3] = {s->service, shard, hosts};
        if (!pipe_push_pending(s, P_CKPT, NULL, pos) ||
            pipe_after_send(s, PQsendQueryParams(s->conn, hsql, 3, NULL, hv, NULL, NULL, 0) == 1, sizeof hsql) !=
                APPLY_OK)
            return s->failed;
    }
    if (pipe_commit(s, pos) != APPLY_OK || pipe_drain(s) != APPLY_OK)
        return s->failed;
    s->stats.commits++;
    if (pos == NULL) {
        row_delete(s, shard);
    } else if (!row_put(s, shard, pos, NULL) || (hosts != NULL && !row_set_hosts(s, shard, hosts))) {
        sink_set_err(s, APPLY_NOMEM, NULL, "out of memory noting the checkpoint of shard %s", shard);
        return s->failed;
    }
    return APPLY_OK;
}

/*
 * stmt.c — statements over the channel (pipeline.c). Above all those of the jsonb shape's tables (upsert, plain
 * insert, update, delete): prepared on this connection when an op needs one the second time, and no more than
 * max_prepared of them at once ([postgres] max_prepared_statements; SINK_MAX_PREPARED unless set). Also the prepares
 * of a typed map's statements (mapped.c) and the catalog calls (oplog2pg.ensure_table, drop_table, ...).
 *
 * NOTES
 * Why a bound. A backend visits every plan it has cached for each invalidation message it processes (plancache.c
 * walks its whole list per message), and each CREATE TABLE, DROP or ANALYZE sends several. With three statements per
 * table prepared up front, making 2 000 tables in a row cost 7 ms each instead of 2.4 to 3 ms (docs/benchmarks.md,
 * "Prepared statements and many tables"; bench/plancache.sh), and every cached plan holds the backend's memory for as
 * long as the connection lives. So only the kind an op needs is prepared (a table that only gets inserts holds one
 * statement, or none when its runs go by COPY); it is prepared at its second use, the first going unnamed, so that a
 * burst of tables made one after another (a first replay, tenants arriving) is not slowed by plans of the tables made
 * just before; and the set is bounded.
 *
 * When it is full, the statement used longest ago is deallocated to make room, but only when no commit for
 * SINK_STMT_STALE_COMMITS groups has used it; otherwise the op goes out unnamed (parsed and planned for that one
 * execution). Evicting by recency alone would thrash on the commonest pattern of many collections, a cycle over more
 * tables than the bound: every statement would be evicted just before its next use, and each use would pay for a
 * prepare and a deallocation. This way a cycle keeps the first max_prepared tables prepared and sends the rest
 * unnamed, and a set of busy tables that moves on is prepared again as the old one goes stale.
 *
 * A statement is sent before anything that uses it, and a deallocation after everything sent before it, all in the
 * pipeline's order, so the names the pipeline holds are always valid when PostgreSQL reaches them. Names are never
 * reused on a connection (the number goes up), so a statement whose deallocation was skipped (an aborted pipeline)
 * is only left over until the connection ends, never confused with another.
 */
#include <stdio.h>
#include <string.h>

#include "pg_internal.h"

static void stmt_name(const table *t, stmt_kind k, char *buf, size_t len)
{
    static const char letter[STMT_KINDS] = {
        [STMT_UPSERT] = 'i', [STMT_INSERT] = 'n', [STMT_UPDATE] = 'u', [STMT_DELETE] = 'd'};
    snprintf(buf, len, "%c%u", letter[k], t->stmt[k].id);
}

/* The statement's text; false when the table's name cannot fit (it always does: qname is two quoted identifiers of
 * at most 63 bytes each). */
static bool stmt_sql(const table *t, stmt_kind k, char *buf, size_t len)
{
    int n = 0;
    switch (k) {
    case STMT_UPSERT: /* an insert that meets its own _id (a replay) becomes the document it carries */
        n = snprintf(buf, len,
                     "INSERT INTO %s (_id, doc) VALUES ($1, $2) ON CONFLICT (_id) DO UPDATE SET doc = EXCLUDED.doc",
                     t->qname);
        break;
    case STMT_INSERT: /* an insert that meets an existing _id fails, and the group is applied again with upserts */
        n = snprintf(buf, len, "INSERT INTO %s (_id, doc) VALUES ($1, $2)", t->qname);
        break;
    case STMT_UPDATE:
        n = snprintf(buf, len, "UPDATE %s SET doc = oplog2pg.apply_update(doc, $2::jsonb) WHERE _id = $1", t->qname);
        break;
    case STMT_DELETE:
        n = snprintf(buf, len, "DELETE FROM %s WHERE _id = $1", t->qname);
        break;
    default:
        return false;
    }
    return n > 0 && (size_t)n < len;
}

static void detach(sink *s, sink_stmt *st)
{
    if (st->newer != NULL)
        st->newer->older = st->older;
    else
        s->stmt_newest = st->older;
    if (st->older != NULL)
        st->older->newer = st->newer;
    else
        s->stmt_oldest = st->newer;
    st->newer = st->older = NULL;
}

static void link_newest(sink *s, sink_stmt *st)
{
    st->older = s->stmt_newest;
    st->newer = NULL;
    if (s->stmt_newest != NULL)
        s->stmt_newest->newer = st;
    else
        s->stmt_oldest = st;
    s->stmt_newest = st;
}

/* Forgets a statement, and deallocates it on the server (pipelined) when asked. */
static sink_status drop_stmt(sink *s, sink_stmt *st, bool dealloc)
{
    sink_status rc = APPLY_OK;
    if (dealloc) {
        char name[16], sql[32];
        stmt_name(st->owner, st->kind, name, sizeof name);
        snprintf(sql, sizeof sql, "DEALLOCATE %s", name);
        rc = pipe_send_simple(s, P_PREPARE, NULL, sql, NULL);
    }
    detach(s, st);
    st->id = 0;
    s->nstmts--;
    return rc;
}

/* Whether a statement can be prepared now: there is room, or the oldest has gone stale and makes room. */
static bool room_for_one(sink *s)
{
    if (s->nstmts < s->cfg.max_prepared)
        return true;
    sink_stmt *old = s->stmt_oldest;
    if (old == NULL || s->stats.commits - old->used < SINK_STMT_STALE_COMMITS)
        return false;
    return drop_stmt(s, old, true) == APPLY_OK;
}

sink_status sink_send_stmt(sink *s, table *t, stmt_kind k, pending_kind pk, const op_pos *pos, int n,
                           const char *const *values, const int *lengths, const int *formats, size_t bytes)
{
    sink_stmt *st = &t->stmt[k];
    char name[16];
    if (st->id == 0) {
        char sql[512];
        if (!stmt_sql(t, k, sql, sizeof sql)) {
            sink_set_err(s, APPLY_CONFIG, NULL, "the name of table %s is too long", t->qname);
            return s->failed;
        }
        bool once = st->uses < SINK_STMT_PREPARE_AT - 1;
        if (once)
            st->uses++;
        if (once || !room_for_one(s)) {
            if (s->failed != APPLY_OK || !pipe_push_pending(s, pk, t, pos))
                return s->failed;
            if (!once)
                s->stats.unnamed++;
            return pipe_after_send(s, PQsendQueryParams(s->conn, sql, n, NULL, values, lengths, formats, 0) == 1,
                                   bytes + strlen(sql));
        }
        st->id = ++s->next_stmt_id;
        st->owner = t;
        st->kind = k;
        stmt_name(t, k, name, sizeof name);
        if (sink_prepare(s, t, name, sql) != APPLY_OK) {
            st->id = 0;
            return s->failed;
        }
        link_newest(s, st);
        s->nstmts++;
    } else if (s->stmt_newest != st) {
        detach(s, st);
        link_newest(s, st);
    }
    st->used = s->stats.commits;
    stmt_name(t, k, name, sizeof name);
    if (!pipe_push_pending(s, pk, t, pos))
        return s->failed;
    return pipe_after_send(s, PQsendQueryPrepared(s->conn, name, n, values, lengths, formats, 0) == 1, bytes);
}

void sink_stmt_forget(sink *s, table *t, bool dealloc)
{
    for (int k = 0; k < STMT_KINDS; k++) {
        if (t->stmt[k].id != 0)
            (void)drop_stmt(s, &t->stmt[k], dealloc && s->failed == APPLY_OK);
    }
}

void sink_stmt_clear(sink *s)
{
    s->stmt_newest = s->stmt_oldest = NULL;
    s->nstmts = 0;
}

/* ---- other statements: prepared ones of a typed map, catalog calls ---- */

sink_status sink_prepare(sink *s, const table *t, const char *name, const char *sql)
{
    if (!pipe_push_pending(s, P_PREPARE, t, NULL))
        return s->failed;
    return pipe_after_send(s, PQsendPrepare(s->conn, name, sql, 0, NULL) == 1, strlen(sql));
}

/* Sends a call of one of the catalog functions (oplog2pg.ensure_table, drop_table, ...), pipelined. */
sink_status sink_catalog_call(sink *s, const table *t, const char *sql, int n, const char *const *values,
                              const op_pos *pos)
{
    if (!pipe_push_pending(s, P_CATALOG, t, pos))
        return s->failed;
    return pipe_after_send(s, PQsendQueryParams(s->conn, sql, n, NULL, values, NULL, NULL, 0) == 1, 256);
}

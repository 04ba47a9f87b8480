/*
 * pg.c — the core of the PostgreSQL sink (see pg.h for what it guarantees): construction, the tables (names,
 * catalog, kinds), the writes, streaming COPY, DDL and the commit with its checkpoint. Connecting is connect.c's.
 * The other parts, and the layers they form, are listed in pg_internal.h.
 *
 * NOTES
 * The connection stays in libpq pipeline mode, non-blocking, between commits (the channel, pipeline.c). Every
 * statement sent is recorded in a queue of pending items (kind, table, oplog position) so that a result, and above
 * all an error, can be matched to the op that caused it. pipe_pump() pushes output and reads whatever results have
 * arrived without waiting; pipe_drain() sends a Sync and waits until every pending item is answered. A group
 * therefore waits on the network once, at its commit.
 *
 * Long insert runs leave the pipeline for a binary COPY: copy_enter sends a SAVEPOINT and drains the pipeline, the
 * run goes by COPY ... (FORMAT binary) (streamed while it still fills, or whole: one COPY per table of a typed map),
 * and copy_leave comes back. A unique violation in the COPY rolls back to the savepoint and the run is re-sent as
 * pipelined upserts: a replay of inserts that are already there (after an initial copy, or a crash between COPY and
 * commit that PostgreSQL rolled back anyway) never stops the stream. A streaming run that let go of rows it sent
 * cannot be re-sent: the group fails with APPLY_REWIND instead (sink_stream_end). While a COPY is open the channel
 * refuses every other send; each entry point of the sink ends the COPY first (sink_settle), so the fallback's
 * upserts are sent from here, in order, and never from inside another send.
 *
 * An error loses the group (the transaction is aborted), except in careful mode: there each op runs behind its own
 * savepoint (sink_guard_begin, deadletter.c), and an op PostgreSQL refuses as data is rolled back to it and recorded
 * as a dead letter while the group goes on. After any other error the caller disconnects and resumes from the
 * committed checkpoint, so the table cache and prepared statements are simply rebuilt on the next connection.
 */
#include "pg_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sink/pgerror.h"
#include "sink/rows.h"
#include "util/log.h"

/* ---------------------------------------------------------------------------------------------------------------- */
/* construction */

sink *sink_new(const sink_config *cfg)
{
    sink *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->cfg = *cfg;
    s->conninfo = strdup(cfg->conninfo ? cfg->conninfo : "");
    s->service = strdup(cfg->service ? cfg->service : "default");
    if (s->conninfo == NULL || s->service == NULL || !pipe_init(s)) {
        sink_free(s);
        return NULL;
    }
    s->copy_by_rtt = s->cfg.copy_min_rows == 0; /* a threshold the caller set is kept as it is */
    if (s->cfg.copy_min_rows == 0)
        s->cfg.copy_min_rows = 32;
    if (s->cfg.max_prepared == 0)
        s->cfg.max_prepared = SINK_MAX_PREPARED;
    s->cfg.conninfo = s->conninfo;
    s->cfg.service = s->service;
    return s;
}

static void tables_clear(sink *s)
{
    for (size_t i = 0; i < s->ntables; i++) {
        free(s->tables[i]->db);
        free(s->tables[i]->coll);
        free(s->tables[i]->qname);
        if (s->tables[i]->kind != NULL)
            s->tables[i]->kind->free(s->tables[i]);
        free(s->tables[i]);
    }
    s->ntables = 0;
    sink_stmt_clear(s);
    if (s->tindex != NULL)
        memset(s->tindex, 0, s->tindex_cap * sizeof *s->tindex);
}

void sink_free(sink *s)
{
    if (s == NULL)
        return;
    sink_disconnect(s);
    pgconn_close(s->fence);
    tables_clear(s);
    sink_shards_free(s);
    free(s->tables);
    free(s->tindex);
    pipe_free(s);
    free(s->stream_out);
    free(s->tok.bytes);
    free(s->ckpt_tok.bytes);
    free(s->conninfo);
    free(s->service);
    free(s);
}

void sink_set_per_op(sink *s, bool on)
{
    s->cfg.per_op = on;
}

const sink_stats *sink_get_stats(const sink *s)
{
    return &s->stats;
}

bool sink_connected(const sink *s)
{
    return s->conn != NULL && PQstatus(s->conn) == CONNECTION_OK;
}

void sink_disconnect(sink *s)
{
    pipe_attach(s, NULL);
    s->stream_run = NULL; /* a COPY left open ends with the connection */
    s->ts_copy = NULL;
    s->ts_undo_table = NULL;
    s->ckpt_prepared = false;
    sink_shards_clear(s, true);
    s->guarded = false;
    s->have_ckpt = -1;
    tables_clear(s); /* prepared statements and "created" marks belong to the connection */
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* tables */

static char *quote_ident(sink *s, const char *name)
{
    char *q = PQescapeIdentifier(s->conn, name, strlen(name));
    if (q == NULL)
        return NULL;
    char *copy = strdup(q);
    PQfreemem(q);
    return copy;
}

static uint64_t ns_hash(const char *db, const char *coll)
{
    uint64_t h = 14695981039346656037u;
    for (const char *p = db; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211u;
    h = (h ^ 0xff) * 1099511628211u;
    for (const char *p = coll; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211u;
    return h ^ (h >> 29);
}

/* Thousands of collections: tables are found by a hash of their namespace. A forgotten table (sink_forget_table)
 * keeps its slot under its old hash with its names emptied, so no lookup matches it; probing goes past it. */
static table *find_table(sink *s, const char *db, const char *coll)
{
    if (s->tindex_cap == 0)
        return NULL;
    for (size_t i = ns_hash(db, coll) & (s->tindex_cap - 1); s->tindex[i] != 0; i = (i + 1) & (s->tindex_cap - 1)) {
        table *t = s->tables[s->tindex[i] - 1];
        if (strcmp(t->coll, coll) == 0 && strcmp(t->db, db) == 0)
            return t;
    }
    return NULL;
}

static void tindex_put(size_t *index, size_t cap, uint64_t h, size_t pos)
{
    size_t i = h & (cap - 1);
    while (index[i] != 0)
        i = (i + 1) & (cap - 1);
    index[i] = pos + 1;
}

/* Room for one more table in the index. Slots are re-hashed from the namespace a table was opened under, which
 * tables[i]->hash keeps (its names may have been emptied since). */
static bool tindex_reserve(sink *s)
{
    if ((s->ntables + 1) * 2 <= s->tindex_cap)
        return true;
    size_t cap = s->tindex_cap ? s->tindex_cap * 2 : 64;
    size_t *ni = calloc(cap, sizeof *ni);
    if (ni == NULL)
        return false;
    for (size_t k = 0; k < s->ntables; k++)
        tindex_put(ni, cap, s->tables[k]->hash, k);
    free(s->tindex);
    s->tindex = ni;
    s->tindex_cap = cap;
    return true;
}

void sink_forget_table(sink *s, const char *db, const char *coll, bool deallocate)
{
    for (size_t i = 0; i < s->ntables; i++) {
        table *t = s->tables[i];
        if ((coll == NULL || strcmp(t->coll, coll) == 0) && strcmp(t->db, db) == 0) {
            /* Statement names are never reused, so the ones not deallocated can stay until the connection ends.
             * Pending items may still point at the table, so it is kept, only marked not ready under a name no
             * lookup matches. */
            sink_stmt_forget(s, t, deallocate);
            if (t->kind == &sink_tseries_kind)
                tseries_discard(t); /* rows held for a table that goes */
            t->ready = false;
            t->coll[0] = '\0';
            t->db[0] = '\0';
        }
    }
}

/* The kind of db.coll's table: the one place that tells a typed map's namespace from the jsonb shape's. */
static const table_kind *kind_of(const sink *s, const char *db, const char *coll)
{
    return map_find(s->cfg.maps, db, coll) != NULL ? &sink_mapped_kind : &sink_jsonb_kind;
}

/* The table for db.coll: made (schema, table, catalog row) or checked to be this service's (a typed map's statements
 * prepared on this connection too). A table of that name that oplog2pg did not make stops everything (O2FOR,
 * a person must act). */
static table *get_table(sink *s, const char *db, const char *coll, const table_kind *want, const op_pos *pos)
{
    table *t = find_table(s, db, coll);
    const table_kind *kind = want != NULL ? want : kind_of(s, db, coll);
    if (t != NULL && t->kind != kind) {
        /* one namespace written both as a collection and as a time-series collection's buckets, with no drop
         * between: no server does that, so nothing is guessed */
        char where[32];
        sink_fmt_pos(pos, where, sizeof where);
        sink_set_err(s, APPLY_UNRECORDABLE, NULL,
                     "%s.%s (oplog entry %s) is written as %s after being written as %s, with no drop between", db,
                     coll, where, kind == &sink_tseries_kind ? "a time-series collection" : "a collection",
                     t->kind == &sink_tseries_kind ? "a time-series collection" : "a collection");
        return NULL;
    }
    if (t != NULL && t->ready)
        return t;
    pg_name nm;
    if (!kind->name(s, db, coll, &nm, pos))
        return NULL;
    if (t == NULL) {
        if (!tindex_reserve(s))
            goto oom;
        if (s->ntables == s->tables_cap) {
            size_t cap = s->tables_cap ? s->tables_cap * 2 : 16;
            table **nt = realloc(s->tables, cap * sizeof *nt);
            if (nt == NULL)
                goto oom;
            s->tables = nt;
            s->tables_cap = cap;
        }
        t = calloc(1, sizeof *t);
        if (t == NULL)
            goto oom;
        t->db = strdup(db);
        t->coll = strdup(coll);
        char *qs = quote_ident(s, nm.schema), *qt = quote_ident(s, nm.table);
        if (t->db && t->coll && qs && qt && asprintf(&t->qname, "%s.%s", qs, qt) < 0)
            t->qname = NULL;
        free(qs);
        free(qt);
        if (t->db == NULL || t->coll == NULL || t->qname == NULL) {
            free(t->db);
            free(t->coll);
            free(t->qname);
            free(t);
            goto oom;
        }
        t->name = nm;
        t->kind = kind;
        t->hash = ns_hash(db, coll);
        tindex_put(s->tindex, s->tindex_cap, t->hash, s->ntables);
        s->tables[s->ntables++] = t;
    }
    t->id = ++s->next_table_id;
    if (!t->kind->prepare(s, t, pos)) {
        if (s->failed == APPLY_OK)
            sink_set_err(s, APPLY_NOMEM, NULL, "out of memory preparing table %s.%s", db, coll);
        return NULL;
    }
    t->ready = true;
    return t;

oom:
    sink_set_err(s, APPLY_NOMEM, NULL, "out of memory preparing table %s.%s", db, coll);
    return NULL;
}

/* The group's transaction open and db.coll ready in it: what every write starts with. NULL on failure (s->failed). */
static table *open_table(sink *s, const char *db, const char *coll, const op_pos *pos)
{
    if (pipe_begin_if_needed(s) != APPLY_OK)
        return NULL;
    return get_table(s, db, coll, NULL, pos);
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* writes */

size_t sink_copy_min_rows(const sink *s)
{
    double by_rtt = 3.0 * s->rtt_s / SINK_COPY_ROW_GAIN_S;
    size_t min_rows = s->cfg.copy_min_rows;
    if (s->copy_by_rtt && by_rtt > (double)min_rows)
        min_rows = by_rtt > 1e9 ? (size_t)1e9 : (size_t)by_rtt;
    return min_rows;
}

/* ---- streaming ----
 * A long insert run goes by binary COPY. libpq cannot pipeline a COPY, so it leaves the pipeline (after draining it,
 * behind a savepoint) and, while it is open, nothing else can be sent on the connection. Sent only when its run is
 * written (at a conflict or the group's commit), the COPY would leave PostgreSQL idle while the apply loop fills the
 * run, and the apply loop idle while PostgreSQL loads it. So a run that has reached stream_min_rows opens its COPY
 * at once and sends each row as it is added (sink_stream_add): PostgreSQL works on the rows while the rest of the
 * group arrives. Anything else the connection must carry (another op, another run, the commit) first ends the COPY
 * (sink_stream_end, called by the pipeline's every send); the rows sent are then written and dropped from their
 * run. One run streams at a time. */

/* Rows a run holds before it streams. Each COPY costs three waits on the network (the drain before it, its start,
 * its end), paid again when an op of another kind interrupts it, so a run streams only when it is long enough that
 * its rows outweigh three round trips many times over (sink_copy_min_rows), and never on a short one. */
#define STREAM_MIN_ROWS  1000
#define STREAM_MIN_BYTES (4 * SINK_COPY_BYTES)

static bool stream_worth_it(const sink *s, const sink_batch *b)
{
    size_t min_rows = 10 * sink_copy_min_rows(s);
    if (min_rows < STREAM_MIN_ROWS)
        min_rows = STREAM_MIN_ROWS;
    return sink_batch_rows(b) >= min_rows ||
           (sink_batch_bytes(b) >= STREAM_MIN_BYTES && sink_batch_rows(b) >= sink_copy_min_rows(s));
}

/* The rows of the streaming run not yet in its COPY. */
static bool stream_put(sink *s, pgconn_error *e)
{
    return s->stream_t->kind->copy_rows(s->stream_out, s->stream_t, s->stream_run, &s->stream_from, e);
}

/* Short runs (plain inserts past the keep point) and rows that met a key already there (upserts), pipelined. */
static sink_status pipelined_rows(sink *s, table *t, const sink_batch *b, const op_pos *pos, bool fresh)
{
    return t->kind->insert_rows(s, t, b, pos, fresh);
}

/* A COPY that failed to start or end: what PostgreSQL said, with the entries it held. into: the table of a typed
 * map's that failed (NULL: t's). */
static sink_status copy_failed(sink *s, const table *t, const char *into, const pgconn_error *e, const op_pos *pos)
{
    char where[32];
    sink_fmt_pos(pos, where, sizeof where);
    const char *advice = e->status == APPLY_CONFIG ? pgerror_advice(e->sqlstate) : "";
    sink_set_err_at(s, pos, e->status, e->sqlstate,
                    "COPY into %s%s%s.%s%s (oplog entries up to %s) failed: [%s] %s%s%s", into ? into : "",
                    into ? " (of " : "", t->db, t->coll, into ? ")" : "", where, e->sqlstate[0] ? e->sqlstate : "?",
                    e->message, advice[0] ? "; " : "", advice);
    return s->failed;
}

/* Leaves the pipeline for a COPY: a savepoint first (a COPY that meets a key already there rolls back to it), then
 * the one wait for the pipeline to drain. */
static sink_status copy_enter(sink *s, const op_pos *pos)
{
    if (pipe_send_simple(s, P_SAVEPOINT, NULL, "SAVEPOINT " SAVEPOINT_NAME, pos) != APPLY_OK)
        return s->failed;
    return pipe_copy_begin(s);
}

/* Back into the pipeline after a COPY of b's rows into t that succeeded or (dup) met a key already there: then the
 * COPY is rolled back to the savepoint and the rows are re-sent as pipelined upserts, so a replay of inserts that are
 * there already never stops the stream. The caller then releases the savepoint (copy_release). */
static sink_status copy_leave(sink *s, table *t, const sink_batch *b, bool dup, const op_pos *pos)
{
    if (dup) {
        pgconn_error e;
        if (!pgconn_exec(s->c, "ROLLBACK TO SAVEPOINT " SAVEPOINT_NAME, NULL, false, &e)) {
            sink_set_err(s, e.status, e.sqlstate, "rolling back a COPY: %s", e.message);
            return s->failed;
        }
        char where[32];
        sink_fmt_pos(pos, where, sizeof where);
        log_info("COPY of %zu rows into %s.%s (entries up to %s) met an existing _id; re-sending them as upserts",
                 sink_batch_rows(b), t->db, t->coll, where);
        s->stats.dup_fallbacks++;
    }
    if (pipe_copy_done(s) != APPLY_OK)
        return s->failed;
    if (dup) {
        if (pipelined_rows(s, t, b, pos, false) != APPLY_OK)
            return s->failed;
    } else {
        s->stats.rows_copied += sink_batch_rows(b);
        s->stats.bytes += sink_batch_bytes(b);
    }
    return APPLY_OK;
}

static sink_status copy_release(sink *s, const op_pos *pos)
{
    return pipe_send_simple(s, P_RELEASE, NULL, "RELEASE SAVEPOINT " SAVEPOINT_NAME, pos);
}

/* A whole batch by COPY (a typed map's of several tables: one COPY per table that has rows, sink/rows.h). */
static sink_status copy_batch(sink *s, table *t, const sink_batch *b, const op_pos *pos)
{
    if (copy_enter(s, pos) != APPLY_OK)
        return s->failed;
    sink_rows_dest d = t->kind->dest(t);
    pgconn_error e;
    size_t failed;
    bool ok = sink_rows_copy(s->c, &d, b, &failed, &e);
    bool dup = !ok && strcmp(e.sqlstate, "23505") == 0;
    if (!ok && !dup)
        return copy_failed(s, t, d.mtabs != NULL && failed < d.nmtabs ? d.mtabs[failed].qname : NULL, &e, pos);
    if (copy_leave(s, t, b, dup, pos) != APPLY_OK)
        return s->failed;
    return copy_release(s, pos);
}

/* Sending into the open COPY failed: it is abandoned, and the group with it. */
static sink_status stream_fail(sink *s, const pgconn_error *e)
{
    const table *t = s->stream_t;
    s->stream_run = NULL;
    sink_copy_abandon(s->stream_out, "oplog2pg: sending failed");
    sink_status st = e->status != APPLY_OK ? e->status : APPLY_RETRY;
    sink_set_err(s, st, e->sqlstate, "COPY into %s.%s: %s", t->db, t->coll, e->message);
    return s->failed;
}

/* Opens a COPY of b's rows into t (outside the pipeline, behind a savepoint) and sends the rows it holds. */
static sink_status stream_open(sink *s, table *t, sink_batch *b, const op_pos *pos)
{
    if (s->stream_out == NULL && (s->stream_out = malloc(sizeof *s->stream_out)) == NULL) {
        sink_set_err(s, APPLY_NOMEM, NULL, "out of memory for a COPY's buffer");
        return s->failed;
    }
    if (copy_enter(s, pos) != APPLY_OK)
        return s->failed;
    pgconn_error e;
    s->stream_run = b;
    s->stream_t = t;
    s->stream_from = 0;
    s->stream_last = *pos;
    if (!t->kind->copy_start(s, t, &e)) {
        s->stream_run = NULL;
        return copy_failed(s, t, NULL, &e, pos);
    }
    if (!sink_copy_open(s->stream_out, s->c, &e) || !stream_put(s, &e))
        return stream_fail(s, &e);
    return APPLY_OK;
}

/* Ends the open COPY of an insert run (the jsonb shape's streaming). */
static sink_status jsonb_stream_end(sink *s)
{
    sink_batch *b = s->stream_run;
    if (b == NULL)
        return APPLY_OK;
    table *t = s->stream_t;
    op_pos pos = s->stream_last;
    s->stream_run = NULL;
    pgconn_error e;
    bool ok = sink_copy_close(s->stream_out, &e);
    bool dup = !ok && strcmp(e.sqlstate, "23505") == 0;
    if (!ok && !dup)
        return copy_failed(s, t, NULL, &e, &pos);
    if (dup && !sink_batch_whole(b)) {
        /* The rows it let go of are gone from memory, but not from the oplog: go back and keep them this time. */
        char where[32];
        sink_keep_rows_until(s, &pos); /* past the keep point: the run let go of rows only there */
        sink_fmt_pos(&pos, where, sizeof where);
        s->stats.rewinds++;
        sink_set_err(s, APPLY_REWIND, e.sqlstate,
                     "COPY of %zu rows into %s.%s (entries up to %s) met an existing _id after it had let go of rows "
                     "it had sent",
                     sink_batch_rows(b), t->db, t->coll, where);
        return s->failed;
    }
    if (copy_leave(s, t, b, dup, &pos) != APPLY_OK)
        return s->failed;
    sink_batch_reset(b); /* written: the run goes on from nothing */
    return copy_release(s, &pos);
}

sink_status sink_stream_end(sink *s)
{
    if (s->ts_copy != NULL && tseries_copy_end(s) != APPLY_OK) /* a time-series table's COPY (tseries.c) */
        return s->failed;
    return jsonb_stream_end(s);
}

sink_status sink_stream_add(sink *s, sink_batch *b, const char *db, const char *coll, const op_pos *pos)
{
    if (s->ts_copy != NULL && tseries_copy_end(s) != APPLY_OK)
        return s->failed;
    if (s->stream_run == b) {
        s->stream_last = *pos;
        pgconn_error e;
        return stream_put(s, &e) ? APPLY_OK : stream_fail(s, &e);
    }
    if (s->stream_run != NULL || s->cfg.per_op || s->failed != APPLY_OK || !stream_worth_it(s, b))
        return s->failed;
    table *t = open_table(s, db, coll, pos);
    if (t == NULL)
        return s->failed;
    if (!t->kind->streams(t))
        return APPLY_OK; /* a map with child tables: one COPY per table at the run's end (copy_batch) */
    return stream_open(s, t, b, pos);
}

bool sink_stream_let_go(sink *s, sink_batch *b, const op_pos *pos)
{
    if (s->stream_run != b || b == NULL || s->failed != APPLY_OK || op_pos_cmp(pos, &s->keep_until) <= 0)
        return false;
    sink_batch_let_go(b); /* stream_put has sent every row it held */
    s->stream_from = 0;
    return true;
}

void sink_stream_forget(sink *s, const sink_batch *b)
{
    if (s->stream_run != b || b == NULL)
        return;
    /* The run goes away with its COPY open (the session ends on a failure): the COPY fails, and with it the group. */
    s->stream_run = NULL;
    sink_copy_abandon(s->stream_out, "oplog2pg: the session ended");
    if (s->failed == APPLY_OK)
        sink_set_err(s, APPLY_RETRY, NULL, "a COPY was abandoned when its run was dropped");
}

sink_status sink_insert_batch(sink *s, const char *db, const char *coll, sink_batch *b, const op_pos *pos)
{
    if (s->stream_run == b) {
        s->stream_last = *pos;
        return sink_stream_end(s);
    }
    if (sink_settle(s) != APPLY_OK)
        return s->failed;
    if (sink_batch_rows(b) == 0)
        return APPLY_OK;
    table *t = open_table(s, db, coll, pos);
    if (t == NULL)
        return s->failed;
    /* Short runs go pipelined; a long run, or a large one (libpq would hold it whole), by COPY in pieces. */
    if (s->cfg.per_op || (sink_batch_rows(b) < sink_copy_min_rows(s) && sink_batch_bytes(b) < SINK_COPY_BYTES))
        return pipelined_rows(s, t, b, pos, true);
    if (!t->kind->streams(t))
        return copy_batch(s, t, b, pos);
    if (stream_open(s, t, b, pos) != APPLY_OK)
        return s->failed;
    return sink_stream_end(s);
}

sink_status sink_update(sink *s, const char *db, const char *coll, const char *key, op_update_form form,
                        const char *json, const op_pos *pos)
{
    if (sink_settle(s) != APPLY_OK)
        return s->failed;
    table *t = open_table(s, db, coll, pos);
    return t != NULL ? jsonb_update(s, t, key, form, json, pos) : s->failed;
}

sink_status sink_delete(sink *s, const char *db, const char *coll, const char *key, const op_pos *pos)
{
    if (sink_settle(s) != APPLY_OK)
        return s->failed;
    table *t = open_table(s, db, coll, pos);
    return t != NULL ? jsonb_delete(s, t, key, pos) : s->failed;
}

sink_status sink_apply_mapped(sink *s, const op *o)
{
    if (sink_settle(s) != APPLY_OK)
        return s->failed;
    table *t = open_table(s, o->db, o->coll, &o->pos);
    if (t == NULL)
        return s->failed;
    if (t->kind->apply_plan == NULL) {
        sink_set_err(s, APPLY_CONFIG, NULL, "%s.%s has no typed map in this sink", o->db, o->coll);
        return s->failed;
    }
    return t->kind->apply_plan(s, t, o);
}

/* The time and meta fields of a create's `timeseries` options (NULL when it has none). */
static void timeseries_options(const op *o, const char **time, const char **meta)
{
    bson_iter_t it, ts;
    *time = *meta = NULL;
    if (o->doc == NULL || !bson_iter_init_from_data(&it, o->doc, o->doc_len) || !bson_iter_find(&it, "timeseries") ||
        !BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &ts))
        return;
    while (bson_iter_next(&ts)) {
        if (strcmp(bson_iter_key(&ts), "timeField") == 0 && BSON_ITER_HOLDS_UTF8(&ts))
            *time = bson_iter_utf8(&ts, NULL);
        else if (strcmp(bson_iter_key(&ts), "metaField") == 0 && BSON_ITER_HOLDS_UTF8(&ts))
            *meta = bson_iter_utf8(&ts, NULL);
    }
}

sink_status sink_apply_bucket(sink *s, const op *o)
{
    /* an insert run's COPY ends here; a time-series table's stays open for the next bucket's new rows (tseries.c
     * ends it before anything else it sends) */
    if ((s->stream_run != NULL && jsonb_stream_end(s) != APPLY_OK) || pipe_begin_if_needed(s) != APPLY_OK)
        return s->failed;
    const char *time = NULL, *meta = NULL;
    if (o->kind == OP_CREATE) {
        timeseries_options(o, &time, &meta);
        if (time == NULL) {
            char where[32];
            sink_fmt_pos(&o->pos, where, sizeof where);
            sink_set_err(s, APPLY_UNRECORDABLE, NULL,
                         "the create of time-series collection %s.%s (oplog entry %s) has no timeseries.timeField",
                         o->db, o->coll, where);
            return s->failed;
        }
        sink_forget_table(s, o->db, o->coll, true); /* made (or checked) again, with these options */
    }
    s->ts_hint_time = time;
    s->ts_hint_meta = meta;
    table *t = get_table(s, o->db, o->coll, &sink_tseries_kind, &o->pos);
    s->ts_hint_time = s->ts_hint_meta = NULL;
    if (t == NULL)
        return s->failed;
    if (o->kind == OP_CREATE) {
        s->stats.ddl++;
        return APPLY_OK;
    }
    return tseries_apply(s, t, o);
}

sink_status sink_create(sink *s, const char *db, const char *coll, const op_pos *pos)
{
    if (sink_settle(s) != APPLY_OK)
        return s->failed;
    if (pipe_begin_if_needed(s) != APPLY_OK)
        return s->failed;
    s->stats.ddl++;
    return get_table(s, db, coll, NULL, pos) != NULL ? APPLY_OK : s->failed;
}

sink_status sink_drop(sink *s, const char *db, const char *coll, const op_pos *pos)
{
    if (sink_settle(s) != APPLY_OK || pipe_begin_if_needed(s) != APPLY_OK)
        return s->failed;
    sink_forget_table(s, db, coll, true);
    s->stats.ddl++;
    return kind_of(s, db, coll)->drop(s, db, coll, pos);
}

sink_status sink_rename(sink *s, const char *db, const char *coll, const char *to_db, const char *to_coll,
                        const op_pos *pos)
{
    if (sink_settle(s) != APPLY_OK || pipe_begin_if_needed(s) != APPLY_OK)
        return s->failed;
    /* the rename is a typed map's (which refuses it) when either name has one */
    const table_kind *kind = kind_of(s, db, coll);
    if (kind == &sink_jsonb_kind)
        kind = kind_of(s, to_db, to_coll);
    sink_forget_table(s, db, coll, true);
    sink_forget_table(s, to_db, to_coll, true);
    s->stats.ddl++;
    return kind->rename(s, db, coll, to_db, to_coll, pos);
}

sink_status sink_drop_database(sink *s, const char *db, const op_pos *pos)
{
    if (sink_settle(s) != APPLY_OK)
        return s->failed;
    pg_name nm;
    if (pipe_begin_if_needed(s) != APPLY_OK || !sink_map_names(s, db, NULL, &nm, pos))
        return s->failed;
    sink_forget_table(s, db, NULL, true);
    s->stats.ddl++;
    const char *values[2] = {s->service, db};
    return sink_catalog_call(s, NULL, "SELECT oplog2pg.drop_database($1, $2)", 2, values, pos);
}

sink_status sink_truncate(sink *s, const char *db, const char *coll, const op_pos *pos)
{
    if (sink_settle(s) != APPLY_OK)
        return s->failed;
    table *t = open_table(s, db, coll, pos);
    if (t == NULL)
        return s->failed;
    s->stats.ddl++;
    return t->kind->truncate(s, t, pos);
}

static bool token_reserve(sink_token *tok, size_t len)
{
    if (len <= tok->cap)
        return true;
    uint8_t *p = realloc(tok->bytes, len);
    if (p == NULL)
        return false;
    tok->bytes = p;
    tok->cap = len;
    return true;
}

bool sink_token_put(sink_token *tok, const uint8_t *bytes, size_t len)
{
    tok->has = false;
    tok->len = 0;
    if (bytes == NULL)
        return true;
    if (!token_reserve(tok, len))
        return false;
    if (len > 0)
        memcpy(tok->bytes, bytes, len);
    tok->len = len;
    tok->has = true;
    return true;
}

static sink_status send_checkpoint(sink *s, const char *stmt, const char *sql, const op_pos *pos, int nparams)
{
    char secs[16], inc[16], term[24], hsecs[16], hinc[16];
    /* $8, the resume token, goes in binary (bytea's binary form is its bytes); the others as text */
    const char *values[9] = {s->service, NULL, NULL, NULL, s->owner, NULL, NULL, NULL, "oplog"};
    int lengths[9] = {0}, formats[9] = {0};
    if (nparams == 9 && s->has_hold) {
        snprintf(hsecs, sizeof hsecs, "%u", s->hold.secs);
        snprintf(hinc, sizeof hinc, "%u", s->hold.inc);
        values[5] = hsecs;
        values[6] = hinc;
    }
    if (nparams == 9 && s->tok.has) {
        values[7] = (const char *)s->tok.bytes;
        lengths[7] = (int)s->tok.len;
        formats[7] = 1;
        values[8] = "change_stream";
    }
    if (pos != NULL) {
        snprintf(secs, sizeof secs, "%u", pos->secs);
        snprintf(inc, sizeof inc, "%u", pos->inc);
        snprintf(term, sizeof term, "%lld", (long long)pos->term);
        values[1] = secs;
        values[2] = inc;
        values[3] = pos->term < 0 ? NULL : term;
    }
    if (!pipe_push_pending(s, P_CKPT, NULL, pos))
        return s->failed;
    bool ok = stmt != NULL ? PQsendQueryPrepared(s->conn, stmt, nparams, values, lengths, formats, 0) == 1
                           : PQsendQueryParams(s->conn, sql, nparams, NULL, values, lengths, formats, 0) == 1;
    return pipe_after_send(s, ok, 128 + (nparams == 9 && s->tok.has ? s->tok.len : 0));
}

static sink_status commit_and_wait(sink *s, const op_pos *pos, const op_pos *new_ckpt)
{
    if (pipe_commit(s, pos) != APPLY_OK)
        return s->failed;
    /* A foreign owner token makes the checkpoint functions raise O2FEN: the transaction, data included, rolls back. */
    if (pipe_drain(s) != APPLY_OK)
        return s->failed;
    s->stats.commits++;
    if (new_ckpt != NULL) {
        s->ckpt = *new_ckpt;
        s->have_ckpt = 1;
    } else {
        s->have_ckpt = 0;
    }
    return APPLY_OK;
}

/* A sharded cluster's commit (pg.h, "A sharded cluster"): the shards' rows that moved, then the service's row at the
 * cluster time pos unless it is past it already. */
static sink_status commit_sharded(sink *s, const op_pos *pos)
{
    op_pos cluster = {pos->secs, pos->inc, -1};
    if (s->have_ckpt == 1 && op_pos_cmp(&s->ckpt, &cluster) > 0)
        cluster = s->ckpt;
    cluster.term = -1;
    if (sink_shards_send(s, pos) != APPLY_OK) {
        sink_shards_done(s, false);
        return s->failed;
    }
    sink_status st = commit_and_wait(s, pos, &cluster);
    if (!sink_shards_done(s, st == APPLY_OK))
        return s->failed;
    if (st == APPLY_OK)
        s->ckpt_has_hold = false; /* each shard's row has its own */
    return st;
}

sink_status sink_commit(sink *s, const op_pos *pos)
{
    if (sink_settle(s) != APPLY_OK)
        return s->failed;
    if (pipe_begin_if_needed(s) != APPLY_OK)
        return s->failed;
    if (tseries_flush(s, pos) != APPLY_OK)
        return s->failed;
    if (s->nshards > 0) {
        sink_status st = commit_sharded(s, pos);
        if (st == APPLY_OK)
            tseries_committed(s);
        return st;
    }
    if (!s->ckpt_prepared) {
        static const char sql[] = "SELECT oplog2pg.advance_checkpoint($1, $5::uuid, $2, $3, $4, $6, $7, $8::bytea, $9)";
        if (!pipe_push_pending(s, P_PREPARE, NULL, NULL))
            return s->failed;
        if (pipe_after_send(s, PQsendPrepare(s->conn, "ckpt", sql, 0, NULL) == 1, sizeof sql) != APPLY_OK)
            return s->failed;
        s->ckpt_prepared = true;
    }
    /* Room for the committed token's copy before the commit: once the commit is in, the copy cannot fail. */
    if (s->tok_lost || (s->tok.has && !token_reserve(&s->ckpt_tok, s->tok.len))) {
        sink_set_err(s, APPLY_NOMEM, NULL, "out of memory for the resume token");
        return s->failed;
    }
    if (send_checkpoint(s, "ckpt", NULL, pos, 9) != APPLY_OK)
        return s->failed;
    sink_status st = commit_and_wait(s, pos, pos);
    if (st == APPLY_OK) {
        tseries_committed(s);
        s->ckpt_has_hold = s->has_hold;
        s->ckpt_hold = s->hold;
        (void)sink_token_put(&s->ckpt_tok, s->tok.has ? s->tok.bytes : NULL, s->tok.len);
    }
    return st;
}

void sink_set_token(sink *s, const uint8_t *tok, size_t len)
{
    /* Out of memory: the next commit fails rather than write the position without its token. */
    s->tok_lost = !sink_token_put(&s->tok, tok, len);
}

bool sink_read_token(const sink *s, const uint8_t **tok, size_t *len)
{
    *tok = s->ckpt_tok.has ? s->ckpt_tok.bytes : NULL;
    *len = s->ckpt_tok.has ? s->ckpt_tok.len : 0;
    return s->ckpt_tok.has;
}

bool sink_read_hold(const sink *s, op_pos *hold)
{
    if (s->ckpt_has_hold)
        *hold = s->ckpt_hold;
    return s->ckpt_has_hold;
}

void sink_set_hold(sink *s, const op_pos *hold)
{
    s->has_hold = hold != NULL;
    if (hold != NULL)
        s->hold = *hold;
}

sink_status sink_set_checkpoint(sink *s, const op_pos *pos)
{
    if (s->in_txn) {
        sink_set_err(s, APPLY_CONFIG, NULL, "internal error: the checkpoint is set only outside a flush group");
        return s->failed;
    }
    if (pipe_begin_if_needed(s) != APPLY_OK ||
        send_checkpoint(s, NULL, "SELECT oplog2pg.set_checkpoint($1, $5::uuid, $2, $3, $4)", pos, 5) != APPLY_OK)
        return s->failed;
    s->ckpt_has_hold = false; /* set_checkpoint clears it, and the resume token */
    (void)sink_token_put(&s->ckpt_tok, NULL, 0);
    (void)sink_token_put(&s->tok, NULL, 0);
    sink_status st = commit_and_wait(s, pos, pos);
    if (st == APPLY_OK && pos == NULL)
        sink_shards_clear(s, false); /* set_checkpoint deleted the shards' rows with it */
    return st;
}

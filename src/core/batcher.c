/*
 * batcher.c — see batcher.h for the rules.
 *
 * NOTES
 * Pending insert runs are kept in a small array of namespaces (a daemon replicates tens of collections, and the last
 * one used is checked first), each with its own sink_batch holding the rows already encoded for COPY. A run is
 * written when its namespace sees another kind of op, when DDL comes, or when the group ends; the order in which the
 * runs of different namespaces reach PostgreSQL does not matter, since they touch different tables and commit
 * together. Per _id, oplog order is kept: a row is written before any later op on its namespace.
 */
#include "core/batcher.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"

typedef struct {
    char *db, *coll;
    sink_batch *rows;
    op_pos last; /* last entry that added to the run, for error messages */
} ns_run;

struct batcher {
    batcher_config cfg;
    batcher_sink out;
    ns_run *runs;
    size_t nruns, cap, hint;
    uint64_t group_ops, group_bytes;
    bool dirty, have_last;
    uint64_t opened_ms; /* when the open group took its first entry */
    op_pos last;
    batcher_stats stats;
    uint64_t pending_entries, pending_ops[OP_TRUNCATE + 1]; /* taken since the last commit */
    const char *why; /* careful mode: why the batcher itself refused the last op (static text), NULL = the sink did */
};

static const char *const trigger_names[FLUSH_TRIGGERS] = {"conflict", "size", "timer", "idle", "exit", "per-op"};

const char *flush_trigger_name(flush_trigger t)
{
    return t < FLUSH_TRIGGERS ? trigger_names[t] : "?";
}

batcher *batcher_new(const batcher_config *cfg, const batcher_sink *out)
{
    batcher *b = calloc(1, sizeof *b);
    if (b == NULL)
        return NULL;
    b->cfg = *cfg;
    b->out = *out;
    return b;
}

void batcher_free(batcher *b)
{
    if (b == NULL)
        return;
    for (size_t i = 0; i < b->nruns; i++) {
        free(b->runs[i].db);
        free(b->runs[i].coll);
        sink_batch_free(b->runs[i].rows);
    }
    free(b->runs);
    free(b);
}

void batcher_set_config(batcher *b, const batcher_config *cfg)
{
    b->cfg = *cfg;
}

static ns_run *find_run(batcher *b, const char *db, const char *coll)
{
    if (b->hint < b->nruns) {
        ns_run *r = &b->runs[b->hint];
        if (strcmp(r->coll, coll) == 0 && strcmp(r->db, db) == 0)
            return r;
    }
    for (size_t i = 0; i < b->nruns; i++) {
        ns_run *r = &b->runs[i];
        if (strcmp(r->coll, coll) == 0 && strcmp(r->db, db) == 0) {
            b->hint = i;
            return r;
        }
    }
    return NULL;
}

static ns_run *get_run(batcher *b, const char *db, const char *coll)
{
    ns_run *r = find_run(b, db, coll);
    if (r != NULL)
        return r;
    if (b->nruns == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 8;
        ns_run *nr = realloc(b->runs, cap * sizeof *nr);
        if (nr == NULL)
            return NULL;
        b->runs = nr;
        b->cap = cap;
    }
    r = &b->runs[b->nruns];
    r->db = strdup(db);
    r->coll = strdup(coll);
    r->rows = sink_batch_new();
    if (r->db == NULL || r->coll == NULL || r->rows == NULL) {
        free(r->db);
        free(r->coll);
        sink_batch_free(r->rows);
        return NULL;
    }
    b->hint = b->nruns++;
    return r;
}

static sink_status write_run(batcher *b, ns_run *r, flush_trigger why)
{
    if (sink_batch_rows(r->rows) == 0)
        return SINK_OK;
    sink_status st = b->out.insert_batch(b->out.ctx, r->db, r->coll, r->rows, &r->last);
    sink_batch_reset(r->rows);
    if (why == FLUSH_CONFLICT)
        b->stats.flushes[FLUSH_CONFLICT]++;
    return st;
}

static sink_status write_all(batcher *b, flush_trigger why)
{
    for (size_t i = 0; i < b->nruns; i++) {
        sink_status st = write_run(b, &b->runs[i], why);
        if (st != SINK_OK)
            return st;
    }
    return SINK_OK;
}

static sink_status apply_op(batcher *b, const op *o)
{
    switch (o->kind) {
    case OP_NOOP:
        return SINK_OK;
    case OP_INSERT: {
        ns_run *r = get_run(b, o->db, o->coll);
        bson_t doc;
        bool added = r != NULL && (o->json != NULL ? sink_batch_add_json(r->rows, o->json, o->json_len)
                                                   : op_doc_view(o, &doc) && sink_batch_add(r->rows, &doc));
        if (!added) {
            char at[OP_POS_STRLEN];
            b->why = "the document cannot be converted to JSON (invalid UTF-8?)";
            if (!b->cfg.careful)
                log_error("insert into %s.%s (oplog entry %s): %s", o->db, o->coll,
                          op_pos_format(&o->pos, at, sizeof at), b->why);
            return SINK_ERR_DATA;
        }
        r->last = o->pos;
        b->group_bytes += o->doc_len;
        return SINK_OK;
    }
    case OP_UPDATE:
    case OP_DELETE: {
        ns_run *r = find_run(b, o->db, o->coll);
        if (r != NULL) {
            sink_status st = write_run(b, r, FLUSH_CONFLICT);
            if (st != SINK_OK)
                return st;
        }
        b->group_bytes += o->doc_len;
        return b->out.apply(b->out.ctx, o);
    }
    default: {
        /* DDL: everything pending first, so no row lands in a table that is about to change. */
        for (size_t i = 0; i < b->nruns; i++) {
            sink_status st = write_run(b, &b->runs[i], FLUSH_CONFLICT);
            if (st != SINK_OK)
                return st;
        }
        return b->out.apply(b->out.ctx, o);
    }
    }
}

/* Careful mode: the op (a write or DDL) applied at once inside a guard; refused as data, it is set aside instead. */
static sink_status apply_guarded(batcher *b, const op *o)
{
    sink_status st = b->out.guard_begin(b->out.ctx);
    if (st != SINK_OK)
        return st;
    b->why = NULL;
    st = apply_op(b, o);
    if (st == SINK_OK && o->kind == OP_INSERT) {
        ns_run *r = find_run(b, o->db, o->coll);
        if (r != NULL)
            st = write_run(b, r, FLUSH_PER_OP);
    }
    if (st == SINK_ERR_DATA) {
        st = b->out.dead_letter(b->out.ctx, o, b->why);
        if (st == SINK_OK)
            b->stats.dead_letters++;
        return st;
    }
    if (st != SINK_OK)
        return st;
    return b->out.guard_end(b->out.ctx);
}

sink_status batcher_flush(batcher *b, flush_trigger why)
{
    if (!b->dirty)
        return SINK_OK;
    sink_status st = write_all(b, why);
    if (st == SINK_OK)
        st = b->out.commit(b->out.ctx, &b->last);
    if (st != SINK_OK)
        return st;
    b->stats.flushes[why]++;
    b->stats.commits++;
    b->stats.committed = b->last;
    b->stats.committed_entries += b->pending_entries;
    for (size_t k = 0; k <= OP_TRUNCATE; k++)
        b->stats.committed_ops[k] += b->pending_ops[k];
    b->pending_entries = 0;
    memset(b->pending_ops, 0, sizeof b->pending_ops);
    b->dirty = false;
    b->group_ops = b->group_bytes = 0;
    return SINK_OK;
}

sink_status batcher_add(batcher *b, const op_entry *e, uint64_t now_ms)
{
    if (!b->dirty)
        b->opened_ms = now_ms;
    for (size_t i = 0; i < e->n; i++) {
        const op *o = &e->ops[i];
        bool guarded = b->cfg.careful && b->out.dead_letter != NULL && o->kind != OP_NOOP;
        sink_status st = guarded ? apply_guarded(b, o) : apply_op(b, o);
        if (st != SINK_OK)
            return st;
        b->stats.ops[o->kind]++;
        b->pending_ops[o->kind]++;
        if (o->kind != OP_NOOP)
            b->group_ops++;
    }
    b->stats.entries++;
    b->pending_entries++;
    b->last = e->pos;
    b->have_last = true;
    b->dirty = true;

    if (b->cfg.per_op || b->cfg.careful)
        return batcher_flush(b, FLUSH_PER_OP);
    if (b->group_ops >= b->cfg.batch_rows || b->group_bytes >= b->cfg.batch_bytes)
        return batcher_flush(b, FLUSH_SIZE);
    return SINK_OK;
}

uint64_t batcher_deadline(const batcher *b)
{
    return b->dirty ? b->opened_ms + b->cfg.flush_interval_ms : UINT64_MAX;
}

sink_status batcher_tick(batcher *b, uint64_t now_ms)
{
    if (b->dirty && now_ms >= batcher_deadline(b))
        return batcher_flush(b, FLUSH_TIMER);
    return SINK_OK;
}

void batcher_reset(batcher *b)
{
    for (size_t i = 0; i < b->nruns; i++)
        sink_batch_reset(b->runs[i].rows);
    b->dirty = false;
    b->group_ops = b->group_bytes = 0;
    b->last = b->stats.committed;
    b->pending_entries = 0;
    memset(b->pending_ops, 0, sizeof b->pending_ops);
}

bool batcher_dirty(const batcher *b)
{
    return b->dirty;
}

const op_pos *batcher_last(const batcher *b)
{
    return &b->last;
}

const batcher_stats *batcher_get_stats(const batcher *b)
{
    return &b->stats;
}

/* ---- the PostgreSQL sink behind the batcher_sink interface ---- */

static sink_status pg_insert_batch(void *ctx, const char *db, const char *coll, sink_batch *rows, const op_pos *pos)
{
    return sink_insert_batch(ctx, db, coll, rows, pos);
}

static sink_status pg_apply(void *ctx, const op *o)
{
    sink *s = ctx;
    switch (o->kind) {
    case OP_UPDATE: {
        if (o->json != NULL && (o->id_json != NULL || o->form == OP_FORM_REPLACE))
            return sink_update_json(s, o->db, o->coll, o->id_json, o->form, o->json, &o->pos);
        bson_t doc;
        op_doc_view(o, &doc);
        return sink_update(s, o->db, o->coll, &o->id, o->form, &doc, &o->pos);
    }
    case OP_DELETE:
        if (o->id_json != NULL)
            return sink_delete_json(s, o->db, o->coll, o->id_json, &o->pos);
        return sink_delete(s, o->db, o->coll, &o->id, &o->pos);
    case OP_CREATE:
        return sink_create(s, o->db, o->coll, &o->pos);
    case OP_DROP:
        return sink_drop(s, o->db, o->coll, &o->pos);
    case OP_RENAME:
        return sink_rename(s, o->db, o->coll, o->to_db, o->to_coll, o->drop_target, &o->pos);
    case OP_DROP_DATABASE:
        return sink_drop_database(s, o->db, &o->pos);
    case OP_TRUNCATE:
        return sink_truncate(s, o->db, o->coll, &o->pos);
    default:
        return SINK_OK;
    }
}

static sink_status pg_commit(void *ctx, const op_pos *pos)
{
    return sink_commit(ctx, pos);
}

static sink_status pg_guard_begin(void *ctx)
{
    return sink_guard_begin(ctx);
}

static sink_status pg_guard_end(void *ctx)
{
    return sink_guard_end(ctx);
}

static sink_status pg_dead_letter(void *ctx, const op *o, const char *why)
{
    return sink_dead_letter(ctx, o, why);
}

static sink_status pg_refused(void *ctx, const op *o, const char *why)
{
    return sink_refused(ctx, o, why);
}

batcher_sink batcher_sink_pg_stop(sink *s)
{
    batcher_sink out = batcher_sink_pg(s);
    out.dead_letter = pg_refused;
    return out;
}

batcher_sink batcher_sink_pg(sink *s)
{
    batcher_sink out = {.ctx = s,
                        .insert_batch = pg_insert_batch,
                        .apply = pg_apply,
                        .commit = pg_commit,
                        .guard_begin = pg_guard_begin,
                        .guard_end = pg_guard_end,
                        .dead_letter = pg_dead_letter};
    return out;
}

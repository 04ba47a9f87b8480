/*
 * batcher_pg.c — the PostgreSQL sink as a batcher_sink (see batcher_pg.h).
 */
#include "sink/batcher_pg.h"

#include <stdlib.h>
#include <string.h>

#include "map/ejson.h"
#include "map/project.h"
#include "util/log.h"

static void *run_new(void *ctx)
{
    (void)ctx;
    return sink_batch_new();
}

static void run_free(void *ctx, void *run)
{
    sink_stream_forget(ctx, run);
    sink_batch_free(run);
}

/* The op's key and JSON as prepared on the reader thread, or made now (into *key_own / *json_own). APPLY_DATA with
 * the sink's error set when they cannot be made. */
static apply_status texts(sink *s, const op *o, bool need_json, const char **key, const char **json, size_t *json_len,
                          char **key_own, char **json_own)
{
    *key_own = *json_own = NULL;
    *key = o->id_key;
    *json = o->json;
    *json_len = o->json_len;
    if (*key == NULL) {
        strbuf b = STRBUF_INIT;
        ejson_error err;
        ejson_status st = ejson_write_key(&b, &o->id, &err);
        if (st != EJSON_OK) {
            strbuf_free(&b);
            if (st == EJSON_NOMEM)
                return APPLY_NOMEM;
            char why[300];
            return sink_refuse(s, o, ejson_error_text(&err, why, sizeof why));
        }
        *key = *key_own = strbuf_detach(&b, NULL);
        if (*key == NULL)
            return APPLY_NOMEM;
    }
    if (need_json && *json == NULL) {
        strbuf b = STRBUF_INIT;
        ejson_error err;
        ejson_status st = o->kind == OP_INSERT ? ejson_write_document_jsonb(&b, o->doc, o->doc_len, &err)
                                               : ejson_write_document(&b, o->doc, o->doc_len, &err);
        if (st != EJSON_OK) {
            strbuf_free(&b);
            free(*key_own);
            *key_own = NULL;
            if (st == EJSON_NOMEM)
                return APPLY_NOMEM;
            char why[300];
            return sink_refuse(s, o, ejson_error_text(&err, why, sizeof why));
        }
        *json = *json_own = strbuf_detach(&b, json_len);
        if (*json == NULL) {
            free(*key_own);
            *key_own = NULL;
            return APPLY_NOMEM;
        }
    }
    return APPLY_OK;
}

static apply_status add_row(void *ctx, void *run, op *o)
{
    if (o->mapped != NULL) {
        const map_plan *plan = o->mapped;
        return sink_batch_add_mapped(run, &plan->rows) ? APPLY_OK : APPLY_NOMEM;
    }
    if (o->json != NULL && o->id_key != NULL) {
        /* The text rendered on the reader thread moves into the run: a large document is held once. */
        bool taken = sink_batch_take(run, o->id_key, o->id_key_len, &o->json, o->json_len);
        if (taken)
            o->json_len = 0;
        return taken ? APPLY_OK : APPLY_NOMEM;
    }
    const char *key, *json;
    size_t json_len;
    char *key_own, *json_own;
    apply_status st = texts(ctx, o, true, &key, &json, &json_len, &key_own, &json_own);
    if (st != APPLY_OK)
        return st;
    bool added = json_own != NULL ? sink_batch_take(run, key, strlen(key), &json_own, json_len)
                                  : sink_batch_add(run, key, strlen(key), json, json_len);
    free(key_own);
    free(json_own);
    return added ? APPLY_OK : APPLY_NOMEM;
}

/* The row, then the run's COPY if it streams (a long run; sink/pg.h). */
static apply_status run_add(void *ctx, void *run, op *o)
{
    apply_status st = add_row(ctx, run, o);
    if (st != APPLY_OK)
        return st;
    return sink_stream_add(ctx, run, o->db, o->coll, &o->pos);
}

static size_t run_rows(void *ctx, const void *run)
{
    (void)ctx;
    return sink_batch_rows(run);
}

static bool run_let_go(void *ctx, void *run, const op_pos *pos)
{
    return sink_stream_let_go(ctx, run, pos);
}

static void run_reset(void *ctx, void *run, bool keep_storage)
{
    sink_stream_forget(ctx, run); /* a run emptied unwritten (insert_run ends its COPY first) */
    sink_batch_reset(run);
    if (!keep_storage)
        sink_batch_release(run);
}

static apply_status insert_run(void *ctx, const char *db, const char *coll, void *run, const op_pos *pos)
{
    return sink_insert_batch(ctx, db, coll, run, pos);
}

static apply_status apply(void *ctx, const op *o)
{
    sink *s = ctx;
    if (o->mapped != NULL)
        return sink_apply_mapped(s, o);
    if (o->bucket && o->kind != OP_DROP)
        return sink_apply_bucket(s, o); /* a drop goes as any drop: the table, and its buckets with it */
    switch (o->kind) {
    case OP_UPDATE:
    case OP_DELETE: {
        const char *key, *json;
        size_t json_len;
        char *key_own, *json_own;
        apply_status st = texts(s, o, o->kind == OP_UPDATE, &key, &json, &json_len, &key_own, &json_own);
        if (st != APPLY_OK)
            return st;
        st = o->kind == OP_UPDATE ? sink_update(s, o->db, o->coll, key, o->form, json, &o->pos)
                                  : sink_delete(s, o->db, o->coll, key, &o->pos);
        free(key_own);
        free(json_own);
        return st;
    }
    case OP_CREATE:
        return sink_create(s, o->db, o->coll, &o->pos);
    case OP_DROP:
        if (o->reason != NULL && o->to_db != NULL && o->to_coll != NULL) {
            char at[OP_POS_STRLEN];
            log_notice("renameCollection %s.%s -> %s.%s (oplog entry %s): %s, so the table of %s.%s is dropped", o->db,
                       o->coll, o->to_db, o->to_coll, op_pos_format(&o->pos, at, sizeof at), o->reason, o->db, o->coll);
        }
        return sink_drop(s, o->db, o->coll, &o->pos);
    case OP_RENAME:
        return sink_rename(s, o->db, o->coll, o->to_db, o->to_coll, &o->pos);
    case OP_DROP_DATABASE:
        return sink_drop_database(s, o->db, &o->pos);
    case OP_TRUNCATE:
        return sink_truncate(s, o->db, o->coll, &o->pos);
    default:
        return APPLY_OK;
    }
}

static apply_status commit(void *ctx, const op_pos *pos)
{
    return sink_commit(ctx, pos);
}

static void set_hold(void *ctx, const op_pos *hold)
{
    sink_set_hold(ctx, hold);
}

static void set_token(void *ctx, const uint8_t *tok, size_t len)
{
    sink_set_token(ctx, tok, len);
}

static void set_sources(void *ctx, const batcher_source_pos *p, size_t n)
{
    sink_set_source_positions(ctx, p, n);
}

static apply_status guard_begin(void *ctx)
{
    return sink_guard_begin(ctx);
}

static apply_status guard_end(void *ctx)
{
    return sink_guard_end(ctx);
}

static apply_status dead_letter(void *ctx, const op *o, const char *why)
{
    return sink_dead_letter(ctx, o, why);
}

static apply_status refused(void *ctx, const op *o, const char *why)
{
    return sink_refused(ctx, o, why);
}

batcher_sink batcher_sink_pg(sink *s)
{
    batcher_sink out = {.ctx = s,
                        .run_new = run_new,
                        .run_free = run_free,
                        .run_add = run_add,
                        .run_rows = run_rows,
                        .run_let_go = run_let_go,
                        .run_reset = run_reset,
                        .insert_run = insert_run,
                        .apply = apply,
                        .commit = commit,
                        .set_hold = set_hold,
                        .set_token = set_token,
                        .guard_begin = guard_begin,
                        .guard_end = guard_end,
                        .dead_letter = dead_letter,
                        .set_sources = set_sources};
    return out;
}

batcher_sink batcher_sink_pg_stop(sink *s)
{
    batcher_sink out = batcher_sink_pg(s);
    out.dead_letter = refused;
    return out;
}

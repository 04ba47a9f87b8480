/*
 * deadletter.c — guarded ops and dead letters (see pg.h): in careful mode each op runs behind a savepoint, and an op
 * PostgreSQL refuses as data is recorded in oplog2pg.dead_letter (its raw BSON, its JSON when it can be made, the
 * error and SQLSTATE) in the same transaction as the checkpoint that moves past it.
 */
#include "pg_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map/ejson.h"
#include "util/log.h"
#include "util/strbuf.h"
#include "util/utf8.h"

/* ---------------------------------------------------------------------------------------------------------------- */
/* guarded ops and dead letters */

sink_status sink_guard_begin(sink *s)
{
    if (sink_settle(s) != APPLY_OK)
        return s->failed;
    if (pipe_begin_if_needed(s) != APPLY_OK)
        return s->failed;
    if (pipe_send_simple(s, P_SAVEPOINT, NULL, "SAVEPOINT " GUARD_NAME, NULL) != APPLY_OK || pipe_drain(s) != APPLY_OK)
        return s->failed;
    s->guarded = true;
    s->ts_undo_table = NULL; /* the op about to run is the only one its undo may be about */
    return APPLY_OK;
}

sink_status sink_guard_end(sink *s)
{
    if (sink_settle(s) != APPLY_OK)
        return s->failed;
    if (!s->guarded)
        return s->failed;
    s->guarded = false;
    return pipe_send_simple(s, P_RELEASE, NULL, "RELEASE SAVEPOINT " GUARD_NAME, NULL);
}

/* The op's _id as key text (malloc'd), or NULL for DDL and when it cannot be made. */
static char *op_key_text(const op *o)
{
    if (o->id_key != NULL)
        return strdup(o->id_key);
    return o->id.value_type != BSON_TYPE_EOD ? ejson_key(&o->id) : NULL;
}

sink_status sink_refused(sink *s, const op *o, const char *why)
{
    char at[OP_POS_STRLEN], ns[400];
    char *key = op_key_text(o);
    if (why != NULL)
        sink_set_err(s, APPLY_DATA, NULL, "%s", why);
    snprintf(ns, sizeof ns, "%s.%s", o->db ? o->db : "", o->coll ? o->coll : "");
    char safe_ns[400];
    utf8_sanitize(ns, strlen(ns), safe_ns, sizeof safe_ns);
    log_error("the op PostgreSQL refused: %s%s%s (oplog entry %s, op %u of the entry)", safe_ns, key ? " _id " : "",
              key ? key : "", op_pos_format(&o->pos, at, sizeof at), o->index);
    free(key);
    return s->failed != APPLY_OK ? s->failed : APPLY_DATA;
}

sink_status sink_refuse(sink *s, const op *o, const char *why)
{
    char at[OP_POS_STRLEN];
    sink_set_err(s, APPLY_DATA, NULL, "%s on %s.%s (oplog entry %s): %s", op_kind_name(o->kind), o->db ? o->db : "",
                 o->coll ? o->coll : "", op_pos_format(&o->pos, at, sizeof at), why);
    return s->failed != APPLY_OK ? s->failed : APPLY_DATA;
}

/* Text a dead letter keeps: valid UTF-8 without NUL, whatever the op held (malloc'd; NULL for NULL). */
static char *safe_text(const char *s)
{
    return s != NULL ? utf8_sanitize_dup(s, strlen(s)) : NULL;
}

/* The parameters of oplog2pg.record_dead_letter for an op: every text made safe to store (valid UTF-8, no NUL). */
typedef struct {
    char secs[16], inc[16], term[24], idx[16];
    char *key, *op_text, *db, *coll, *msg;
    const char *values[13];
    int lengths[13], formats[13];
} dl_params;

static const char dl_sql[] =
    "SELECT oplog2pg.record_dead_letter($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)";

static void dl_free(dl_params *p)
{
    free(p->key);
    free(p->op_text);
    free(p->db);
    free(p->coll);
    free(p->msg);
}

static const char *op_letter(const op *o)
{
    return o->kind == OP_INSERT ? "i" : o->kind == OP_UPDATE ? "u" : o->kind == OP_DELETE ? "d" : "c";
}

/* False when memory runs out (p is freed then). */
static bool dl_build(dl_params *p, const char *service, const op *o, const char *why, const char *sqlstate)
{
    memset(p, 0, sizeof *p);
    char *key = op_key_text(o);
    p->key = key ? utf8_sanitize_dup(key, strlen(key)) : NULL;
    free(key);
    p->db = safe_text(o->db ? o->db : "");
    p->coll = safe_text(o->coll ? o->coll : "");
    p->msg = safe_text(why ? why : "refused");
    /* The text in the document's own field order (o->json of an insert is in jsonb's key order, made for the row). */
    if (o->doc != NULL) {
        strbuf b = STRBUF_INIT;
        if (ejson_write_document(&b, o->doc, o->doc_len, NULL) == EJSON_OK)
            p->op_text = strbuf_detach(&b, NULL);
        else
            strbuf_free(&b);
    }
    if (p->op_text == NULL && o->json != NULL)
        p->op_text = strdup(o->json);
    if (p->db == NULL || p->coll == NULL || p->msg == NULL) {
        dl_free(p);
        return false;
    }
    snprintf(p->secs, sizeof p->secs, "%u", o->pos.secs);
    snprintf(p->inc, sizeof p->inc, "%u", o->pos.inc);
    snprintf(p->term, sizeof p->term, "%lld", (long long)o->pos.term);
    snprintf(p->idx, sizeof p->idx, "%u", o->index);
    const char *v[13] = {service,
                         p->secs,
                         p->inc,
                         o->pos.term < 0 ? NULL : p->term,
                         p->idx,
                         p->db,
                         p->coll,
                         op_letter(o),
                         p->key,
                         (const char *)o->doc,
                         p->op_text,
                         p->msg,
                         sqlstate && sqlstate[0] ? sqlstate : NULL};
    memcpy(p->values, v, sizeof v);
    p->lengths[9] = (int)o->doc_len;
    p->formats[9] = 1;
    if (o->doc == NULL)
        p->values[9] = NULL;
    return true;
}

bool sink_record_dead_letter(pgconn *c, const char *service, const op *o, const char *why, const char *sqlstate,
                             pgconn_error *err)
{
    dl_params p;
    if (!dl_build(&p, service, o, why, sqlstate)) {
        if (err) {
            err->status = APPLY_NOMEM;
            snprintf(err->message, sizeof err->message, "out of memory recording a dead letter");
        }
        return false;
    }
    bool ok = pgconn_exec_params(c, dl_sql, 13, p.values, p.lengths, p.formats, 0, NULL, false, err);
    if (!ok && err != NULL && strncmp(err->sqlstate, "22", 2) == 0 && p.values[10] != NULL) {
        /* The JSON rendering itself was refused: keep the raw op without it rather than lose it. */
        p.values[10] = NULL;
        ok = pgconn_exec_params(c, dl_sql, 13, p.values, p.lengths, p.formats, 0, NULL, false, err);
    }
    dl_free(&p);
    return ok;
}

sink_status sink_dead_letter(sink *s, const op *o, const char *why)
{
    if (sink_settle(s) != APPLY_OK)
        return s->failed;
    char msg[sizeof s->err], state[sizeof s->err_state], at[OP_POS_STRLEN];
    if (s->failed != APPLY_OK && s->failed != APPLY_DATA)
        return s->failed; /* only a refusal of the op's data may set it aside */
    snprintf(msg, sizeof msg, "%s", why != NULL ? why : s->err[0] ? s->err : "refused");
    snprintf(state, sizeof state, "%s", why != NULL ? "" : s->err_state);
    if (!s->guarded) {
        sink_clear_err(s);
        sink_set_err(s, APPLY_UNRECORDABLE, NULL, "%s (and it cannot be set aside: no guard was open)", msg);
        return s->failed;
    }
    s->guarded = false;

    /* Settle the pipeline: after an error the server skips everything up to the next sync, whose results (aborted)
     * carry no news. Then undo the op back to its guard and record it instead. */
    sink_clear_err(s);
    if (PQpipelineSync(s->conn) != 1) {
        sink_set_err(s, APPLY_RETRY, NULL, "sending a sync: %s", PQerrorMessage(s->conn));
        return s->failed;
    }
    if (!pipe_push_pending(s, P_SYNC, NULL, NULL) || !pipe_pump(s, 0, 0))
        return s->failed;
    if (pipe_send_simple(s, P_SAVEPOINT, NULL, "ROLLBACK TO SAVEPOINT " GUARD_NAME, &o->pos) != APPLY_OK)
        return s->failed;
    if (o->bucket && tseries_undo(s) != APPLY_OK) /* its bucket's document is unknown now: a later change of it is
                                                   * refused, not guessed */
        return s->failed;

    dl_params p;
    if (!dl_build(&p, s->service, o, msg, state)) {
        sink_set_err(s, APPLY_NOMEM, NULL, "out of memory recording a dead letter");
        goto out;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!pipe_push_pending(s, P_DEAD_LETTER, NULL, &o->pos))
            break;
        bool ok = PQsendQueryParams(s->conn, dl_sql, 13, NULL, p.values, p.lengths, p.formats, 0) == 1;
        if (pipe_after_send(s, ok, (size_t)o->doc_len + (p.op_text ? strlen(p.op_text) : 0) + 256) == APPLY_OK)
            pipe_drain(s);
        if (s->failed != APPLY_CONFIG || strncmp(s->err_state, "22", 2) != 0 || p.values[10] == NULL)
            break;
        /* The record was refused for its JSON rendering: keep the raw op without it rather than lose it. */
        log_warning("recording the dead letter with its JSON failed (%s); recording it without", s->err);
        sink_clear_err(s);
        if (PQpipelineSync(s->conn) != 1 || !pipe_push_pending(s, P_SYNC, NULL, NULL) || !pipe_pump(s, 0, 0) ||
            pipe_send_simple(s, P_SAVEPOINT, NULL, "ROLLBACK TO SAVEPOINT " GUARD_NAME, &o->pos) != APPLY_OK)
            break;
        p.values[10] = NULL;
    }
    if (s->failed == APPLY_OK) {
        s->stats.dead_letters++;
        log_error("%s %s.%s%s%s (oplog entry %s): %s; set aside in oplog2pg.dead_letter, going on",
                  o->kind >= OP_CREATE ? "DDL on" : "op on", p.db, p.coll, p.key ? " _id " : "", p.key ? p.key : "",
                  op_pos_format(&o->pos, at, sizeof at), p.msg);
    } else if (s->failed == APPLY_CONFIG || s->failed == APPLY_DATA) {
        char first[sizeof s->err];
        snprintf(first, sizeof first, "%s", s->err);
        sink_clear_err(s);
        sink_set_err(s, APPLY_UNRECORDABLE, NULL,
                     "the op on %s.%s%s%s (oplog entry %s, op %u) was refused (%s), and recording it as a dead letter "
                     "failed too: %s",
                     p.db, p.coll, p.key ? " _id " : "", p.key ? p.key : "", op_pos_format(&o->pos, at, sizeof at),
                     o->index, p.msg, first);
    }
    dl_free(&p);
out:
    /* The op may have created its table inside the guard: forget it, so the next op on it makes sure again. */
    if (o->db != NULL)
        sink_forget_table(s, o->db, o->coll ? o->coll : NULL, false);
    return s->failed;
}

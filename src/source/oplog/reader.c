/*
 * reader.c — the reader thread: tails local.oplog.rs through raw find/getMore commands and feeds the queue.
 *
 * NOTES
 * - Raw commands rather than mongoc_cursor_t, so the reader sees every batch boundary (an under-full batch means
 *   the oplog is drained: push QUEUE_IDLE) and controls batchSize and maxTimeMS itself. find, getMore and
 *   killCursors share one explicit client session when the server supports sessions (an implicit session per
 *   command would give getMore another lsid, which a real server refuses) and one serverId chosen when the cursor is
 *   opened.
 * - mongoc_client_command_with_opts is used, never the read_command variant: that one is a retryable read, and a
 *   getMore silently retried after its reply was lost would skip a batch. retryReads is also switched off in the
 *   URI. Recovery is ours: every transient error re-opens the cursor with {ts: {$gte: last pushed}}, checks that the
 *   first document is that very entry (same ts, same term) and skips it, so nothing is lost or applied twice, and a
 *   rollback or a truncation past our position turns into QUEUE_END (QUEUE_END_RESUME_LOST).
 * - All state below the "thread only" line of struct reader (reader_internal.h) belongs to the reader thread; other
 *   threads read the atomic counters and set `stop`. The backoff between attempts is a timed wait on a condition
 * variable that reader_stop signals, and a blocked queue push is woken through queue_wake_pushers: no sleep ignores a
 * stop request. An empty oplog is waited on by the server (an awaitData getMore returns after at most maxTimeMS =
 * await_ms).
 * - Transactions written over several entries are read in txn_read.c (txn_read_entry for every entry of a batch,
 *   txn_read_book once before the first cursor); reader_internal.h holds the state and helpers the two files share.
 */
#include "source/oplog/reader.h"

#include <errno.h>
#include <inttypes.h>
#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reader_internal.h"
#include "source/decode.h"
#include "source/mongo_client.h"
#include "source/oplog_edge.h"
#include "source/prepare.h"
#include "source/txn.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/memory.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000

void reader_config_init(reader_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->start.term = -1;
    cfg->await_ms = READER_DEFAULT_AWAIT_MS;
    cfg->batch_size = READER_DEFAULT_BATCH_SIZE;
}

bool reader_stopping(reader *r)
{
    return atomic_load(&r->stop);
}

/* Waits ms milliseconds unless reader_stop comes first; false when stopping. */
static bool nap(reader *r, int64_t ms)
{
    return napper_nap(&r->napper, ms, &r->stop);
}

static const char *term_str(int64_t term, char *buf, size_t len)
{
    if (term < 0)
        snprintf(buf, len, "no term");
    else
        snprintf(buf, len, "term %" PRId64, term);
    return buf;
}

/* Logs why the reader stops and pushes QUEUE_END: the thread then ends. */
void reader_fatal(reader *r, queue_end_reason reason, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_error("reader: %s", msg);
    queue_pusher_flush(&r->out); /* everything before the stop goes on first */
    if (!queue_push_end(r->q, reason, msg))
        log_warning("reader: the queue is stopped; the error above was not handed to the apply loop");
}

static void publish_pos(reader *r, const op_pos *p)
{
    atomic_store(&r->last_ts, ((uint64_t)p->secs << 32) | p->inc);
    atomic_store(&r->last_term, p->term);
    atomic_store(&r->have_last, true);
}

/* Reads ts and t of a raw oplog document. False when ts is missing or not a Timestamp. */
bool reader_doc_pos(const bson_t *doc, op_pos *out)
{
    bson_iter_t it;
    out->term = -1;
    if (!bson_iter_init_find(&it, doc, "ts") || !BSON_ITER_HOLDS_TIMESTAMP(&it))
        return false;
    bson_iter_timestamp(&it, &out->secs, &out->inc);
    if (bson_iter_init_find(&it, doc, "t") && (BSON_ITER_HOLDS_INT32(&it) || BSON_ITER_HOLDS_INT64(&it)))
        out->term = bson_iter_as_int64(&it);
    return true;
}

/* ---- commands ---- */

/* Decides what a failed command means: auth refusals are fatal, everything else is retried. */
step reader_failed(reader *r, const char *what, const bson_error_t *e)
{
    char pbuf[OP_POS_STRLEN];
    if (r->out_failed)
        return STEP_END; /* not MongoDB's doing: the queue was stopped, or the reader told to stop */
    if (mongo_error_refused(e)) {
        reader_fatal(r, QUEUE_END_REFUSED,
                     "%s on local.oplog.rs refused: %s (code %u); check the user's roles in [mongodb]", what,
                     e->message, e->code);
        return STEP_END;
    }
    if (r->have_pos)
        log_warning("reader: %s failed (%s%s, code %u): re-opening the oplog cursor at %s in %" PRId64 " ms", what,
                    mongo_error_network(e) ? "network: " : "", e->message, e->code,
                    op_pos_format(&r->pos, pbuf, sizeof pbuf), (int64_t)r->bo.next_ms);
    else
        log_warning("reader: %s failed (%s%s, code %u): retrying in %" PRId64 " ms", what,
                    mongo_error_network(e) ? "network: " : "", e->message, e->code, (int64_t)r->bo.next_ms);
    return STEP_RETRY;
}

/* Runs cmd in db local with the reader's session and server. reply is always initialised. */
bool reader_run_cmd(reader *r, const bson_t *cmd, bson_t *reply, bson_error_t *err)
{
    /* Every round trip may wait: what was decoded so far goes to the applier first. */
    if (!queue_pusher_flush(&r->out)) {
        r->out_failed = true;
        bson_init(reply);
        bson_set_error(err, 0, 0, "the queue to the applier is stopped");
        return false;
    }
    bson_t opts = BSON_INITIALIZER;
    bool ok = true;
    if (r->cs && !mongoc_client_session_append(r->cs, &opts, err)) {
        bson_init(reply);
        ok = false;
    } else {
        if (r->server_id)
            BSON_APPEND_INT32(&opts, "serverId", (int32_t)r->server_id);
        ok = mongoc_client_command_with_opts(r->client, "local", cmd, NULL, &opts, reply, err);
    }
    bson_destroy(&opts);
    return ok;
}

void reader_kill_cursor(reader *r)
{
    if (r->cursor_id == 0)
        return;
    bson_t cmd = BSON_INITIALIZER, arr, reply;
    bson_error_t err;
    BSON_APPEND_UTF8(&cmd, "killCursors", "oplog.rs");
    BSON_APPEND_ARRAY_BEGIN(&cmd, "cursors", &arr);
    BSON_APPEND_INT64(&arr, "0", r->cursor_id);
    bson_append_array_end(&cmd, &arr);
    if (!reader_run_cmd(r, &cmd, &reply, &err))
        log_debug("reader: killCursors failed: %s", err.message);
    bson_destroy(&reply);
    bson_destroy(&cmd);
    r->cursor_id = 0;
}

/* A fresh session pinned to the current primary, for one cursor's life. */
static step open_session(reader *r)
{
    bson_error_t err;
    if (r->cs) {
        mongoc_client_session_destroy(r->cs);
        r->cs = NULL;
    }
    r->server_id = 0;
    r->cursor_id = 0;
    mongoc_server_description_t *sd = mongoc_client_select_server(r->client, false, NULL, &err);
    if (!sd)
        return reader_failed(r, "selecting the primary", &err);
    r->server_id = mongoc_server_description_id(sd);
    mongoc_server_description_destroy(sd);
    if (r->no_sessions)
        return STEP_OK;
    r->cs = mongoc_client_start_session(r->client, NULL, &err);
    if (!r->cs) {
        if (err.domain == MONGOC_ERROR_CLIENT && err.code == MONGOC_ERROR_CLIENT_SESSION_FAILURE) {
            log_info("reader: the server does not support sessions (%s); tailing without one", err.message);
            r->no_sessions = true;
            return STEP_OK;
        }
        return reader_failed(r, "starting a session", &err);
    }
    return STEP_OK;
}

/* Finds cursor.id and cursor.<batch_key> in a reply. */
bool reader_parse_cursor(const bson_t *reply, const char *batch_key, int64_t *id, bson_iter_t *batch)
{
    bson_iter_t it, cur;
    bool have_id = false, have_batch = false;
    if (!bson_iter_init_find(&it, reply, "cursor") || !BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &cur))
        return false;
    while (bson_iter_next(&cur)) {
        const char *k = bson_iter_key(&cur);
        if (strcmp(k, "id") == 0 && (BSON_ITER_HOLDS_INT64(&cur) || BSON_ITER_HOLDS_INT32(&cur))) {
            *id = bson_iter_as_int64(&cur);
            have_id = true;
        } else if (strcmp(k, batch_key) == 0 && BSON_ITER_HOLDS_ARRAY(&cur)) {
            have_batch = bson_iter_recurse(&cur, batch);
        }
    }
    return have_id && have_batch;
}

/* Next document of a batch array into *doc (a static view). DOC_END at the array's end; DOC_BAD when an element is
 * not a document or its bytes are not one (why says which): a server never sends that, and the entry it stands for
 * cannot be passed over, so every caller ends there, never skips it. */
doc_next reader_next_doc(bson_iter_t *batch, bson_t *doc, char *why, size_t whylen)
{
    const uint8_t *data;
    uint32_t len;
    if (!bson_iter_next(batch)) {
        if (batch->err_off == 0)
            return DOC_END;
        snprintf(why, whylen, "the batch is corrupt at byte %u of the reply's array", batch->err_off);
        return DOC_BAD;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(batch)) {
        snprintf(why, whylen, "element %s of the batch is not a document (BSON type 0x%02x)", bson_iter_key(batch),
                 (unsigned)bson_iter_type(batch));
        return DOC_BAD;
    }
    bson_iter_document(batch, &len, &data);
    if (!bson_init_static(doc, data, len)) {
        snprintf(why, whylen, "element %s of the batch is not a valid BSON document", bson_iter_key(batch));
        return DOC_BAD;
    }
    return DOC_NEXT;
}

/* A batch that next_doc refused: the reader stops before the element, the last entry handed on staying the position
 * (exit code 5 from the daemon, as for a malformed entry). */
static step bad_batch(reader *r, const char *what, const char *why)
{
    char pbuf[OP_POS_STRLEN];
    reader_fatal(
        r, QUEUE_END_UNSUPPORTED,
        "malformed reply from MongoDB to %s on local.oplog.rs: %s; stopped before it (the last entry handed on is "
        "%s), nothing after it was applied",
        what, why, op_pos_format(&r->pos, pbuf, sizeof pbuf));
    return STEP_END;
}

/* Hands a decoded entry on (in a group: see queue_pusher); `reserved` is the queue room reserved for it, or 0. */
step reader_push_entry(reader *r, op_entry *e, size_t reserved)
{
    op_pos p = e->pos;
    bool more = e->more, note = e->note_only;
    e->has_hold = txn_book_oldest(&r->book, &e->hold);
    e->source = r->cfg.source;
    if (!queue_pusher_add(&r->out, e, reserved)) { /* it and the rest of its group are freed */
        r->out_failed = true;
        return STEP_END;
    }
    if (more || note)
        return STEP_OK; /* a part: the position moves with the last one; a note is at or before the start */
    r->after = false;   /* from now on the resume point is an entry pushed, checked as usual */
    r->pos = p;
    r->have_pos = true;
    r->idle_due = true;
    atomic_fetch_add(&r->entries, 1);
    publish_pos(r, &p);
    return STEP_OK;
}

static step maybe_idle(reader *r)
{
    if (!r->idle_due)
        return STEP_OK;
    if (!queue_pusher_flush(&r->out)) {
        r->out_failed = true;
        return STEP_END;
    }
    if (!queue_push_idle(r->q))
        return STEP_END;
    r->idle_due = false;
    atomic_fetch_add(&r->idles, 1);
    return STEP_OK;
}

/* Decodes, filters and renders one raw entry into a new entry (*out) holding `*reserved` bytes of queue room, ready to
 * push. Room in the queue is reserved first (about the entry's size), so the text about to be rendered counts against
 * the queue's byte bound while this thread holds it. */
step reader_prepare_raw(reader *r, const bson_t *doc, unsigned flags, op_entry **out, size_t *reserved_out)
{
    char err[512];
    size_t reserved = doc->len;
    if (!queue_pusher_reserve(&r->out, reserved)) {
        r->out_failed = true;
        return STEP_END;
    }
    op_entry *e = malloc(sizeof *e);
    if (!e) {
        queue_pusher_unreserve(&r->out, reserved);
        reader_fatal(r, QUEUE_END_NOMEM, "out of memory decoding an oplog entry");
        return STEP_END;
    }
    decode_status st = decode_entry_ex(doc, r->cfg.decode_flags | flags, e, err, sizeof err);
    if (st != DECODE_OK) {
        queue_pusher_unreserve(&r->out, reserved);
        free(e);
        if (st == DECODE_NOMEM) {
            reader_fatal(r, QUEUE_END_NOMEM, "out of memory decoding an oplog entry");
        } else {
            char pbuf[OP_POS_STRLEN];
            reader_fatal(
                r, QUEUE_END_UNSUPPORTED,
                "%s oplog entry: %s; stopped before it (the last entry handed on is %s), a fixed version resumes "
                "there",
                st == DECODE_MALFORMED ? "malformed" : "unsupported", err, op_pos_format(&r->pos, pbuf, sizeof pbuf));
        }
        return STEP_END;
    }
    source_prepare_status ps = source_prepare_entry(e, r->cfg.filter, r->cfg.maps, err, sizeof err);
    if (ps != SOURCE_PREPARE_OK) {
        queue_pusher_unreserve(&r->out, reserved);
        op_entry_free(e);
        char pbuf[OP_POS_STRLEN];
        if (ps == SOURCE_PREPARE_NOMEM)
            reader_fatal(r, QUEUE_END_NOMEM, "out of memory rendering an oplog entry");
        else
            reader_fatal(r, QUEUE_END_UNSUPPORTED, "%s; stopped before it (the last entry handed on is %s)", err,
                         op_pos_format(&r->pos, pbuf, sizeof pbuf));
        return STEP_END;
    }
    *out = e;
    *reserved_out = reserved;
    return STEP_OK;
}

step reader_push_plain(reader *r, const bson_t *doc)
{
    op_entry *e;
    size_t reserved;
    step s = reader_prepare_raw(r, doc, 0, &e, &reserved);
    return s == STEP_OK ? reader_push_entry(r, e, reserved) : s;
}

/* Pushes every document of a batch (skipping the first when skip_first; in start_after mode, those at or before the
 * start instead); *count gets the batch's size. A malformed
 * element ends the reader there: what came before it is handed on, nothing after it. */
static step push_batch(reader *r, bson_iter_t *batch, bool skip_first, uint32_t *count)
{
    bson_t doc;
    char why[160];
    doc_next dn;
    *count = 0;
    while ((dn = reader_next_doc(batch, &doc, why, sizeof why)) != DOC_END) {
        if (dn == DOC_BAD)
            return bad_batch(r, skip_first ? "find" : "getMore", why);
        (*count)++;
        if (skip_first && !r->after && *count == 1)
            continue;
        op_pos at;
        if (r->after && reader_doc_pos(&doc, &at) && op_pos_cmp(&at, &r->pos) <= 0)
            continue; /* start_after: at or before the start */
        step s = txn_read_entry(r, &doc);
        if (s != STEP_OK)
            return s;
    }
    return STEP_OK;
}

/* ---- the resume check ---- */

/* After a rollback the oplog holds the common prefix, then the new primary's entries, all of a later term: the newest
 * entry before `at` whose term is at most `term` is the newest one both sides still agree on. A bounded walk back
 * with point lookups (found false when none is near enough, or the term is unknown). */
static bool common_point(reader *r, const op_pos *at, int64_t term, op_pos *out)
{
    char err[256];
    op_pos cur = *at, prev;
    bool have = false;
    if (term < 0)
        return false;
    for (int i = 0; i < 1000; i++) {
        if (!oplog_entry_before(r->client, &cur, &prev, &have, err, sizeof err) || !have)
            return false;
        if (prev.term >= 0 && prev.term <= term) {
            *out = prev;
            return true;
        }
        cur = prev;
    }
    return false;
}

static step resume_lost(reader *r, const char *why)
{
    char want[OP_POS_STRLEN], tbuf[32], oldest[128] = "unknown", obuf[OP_POS_STRLEN], otbuf[32], err[256];
    op_pos o;
    bool have = false;
    /* Best effort: name the oldest entry so the operator sees how far the oplog reaches. */
    bool known = oplog_edge(r->client, 1, &o, &have, err, sizeof err);
    if (known) {
        if (!have)
            snprintf(oldest, sizeof oldest, "none: the oplog is empty");
        else
            snprintf(oldest, sizeof oldest, "%s (%s)", op_pos_format(&o, obuf, sizeof obuf),
                     term_str(o.term, otbuf, sizeof otbuf));
    }
    if (known && have && op_pos_cmp(&o, &r->pos) <= 0) {
        /* The oplog still reaches back past the position, so it was not truncated away: it was rolled back. */
        char common[160] = "", cbuf[OP_POS_STRLEN], ctbuf[32];
        op_pos c;
        if (common_point(r, &r->pos, r->pos.term, &c))
            snprintf(common, sizeof common, "; the newest entry both still agree on is %s (%s)",
                     op_pos_format(&c, cbuf, sizeof cbuf), term_str(c.term, ctbuf, sizeof ctbuf));
        reader_fatal(
            r, QUEUE_END_RESUME_LOST,
            "rollback: MongoDB no longer holds the resume point %s (%s): %s%s. The changes PostgreSQL holds after "
            "%s were rolled back on MongoDB (a failover lost entries a majority had not committed; [mongodb] "
            "read_concern = %s), so PostgreSQL holds changes MongoDB does not; resync this service with --reimport",
            op_pos_format(&r->pos, want, sizeof want), term_str(r->pos.term, tbuf, sizeof tbuf), why, common,
            common[0] ? cbuf : "the common point", r->cfg.majority ? "majority" : "local");
        return STEP_END;
    }
    reader_fatal(
        r, QUEUE_END_RESUME_LOST,
        "the resume point %s (%s) is no longer in the oplog (oldest entry is %s; %s): the changes since then are "
        "lost to oplog2pg; resync this service with --reimport",
        op_pos_format(&r->pos, want, sizeof want), term_str(r->pos.term, tbuf, sizeof tbuf), oldest, why);
    return STEP_END;
}

/* Majority reads: a resume point the majority snapshot does not show yet (a checkpoint taken in read_concern =
 * local, or a --tail-from past the commit point) is waited for, not lost. True when it is in the oplog. */
static bool pending_commit(reader *r)
{
    char err[256];
    op_pos after = r->pos, got;
    bool have = false;
    if (!r->cfg.majority)
        return false;
    if (after.inc == UINT32_MAX) {
        after.secs++;
        after.inc = 0;
    } else {
        after.inc++;
    }
    return oplog_entry_before(r->client, &after, &got, &have, err, sizeof err) && have &&
           op_pos_cmp(&got, &r->pos) == 0 && (r->pos.term < 0 || got.term < 0 || got.term == r->pos.term);
}

/* The resume check: the first document of a cursor opened with {ts: {$gte: r->pos}} must be r->pos itself, with
 * the same term when both have one. Otherwise the oplog no longer holds that entry (it was truncated past it) or it
 * was rolled back (another entry, or another term, at its place): either way the changes since it are lost to
 * oplog2pg. */
static step check_first(reader *r, bson_iter_t batch)
{
    bson_t doc;
    op_pos got;
    char why[160], gbuf[OP_POS_STRLEN], tbuf[32];
    doc_next dn = reader_next_doc(&batch, &doc, why, sizeof why);
    if (dn == DOC_BAD)
        return bad_batch(r, "find", why);
    if (dn == DOC_END) {
        if (pending_commit(r)) {
            char pbuf[OP_POS_STRLEN];
            log_warning("reader: the resume point %s is in the oplog but not majority-committed yet; waiting for it",
                        op_pos_format(&r->pos, pbuf, sizeof pbuf));
            reader_kill_cursor(r);
            return STEP_RETRY;
        }
        return resume_lost(r, "no entry at or after it");
    }
    if (!reader_doc_pos(&doc, &got)) {
        reader_fatal(r, QUEUE_END_UNSUPPORTED,
                     "malformed oplog entry: the first entry at or after the resume point has no ts "
                     "Timestamp");
        return STEP_END;
    }
    if (op_pos_cmp(&got, &r->pos) != 0) {
        snprintf(why, sizeof why, "the first entry at or after it is %s (%s)", op_pos_format(&got, gbuf, sizeof gbuf),
                 term_str(got.term, tbuf, sizeof tbuf));
        return resume_lost(r, why);
    }
    if (r->pos.term >= 0 && got.term >= 0 && got.term != r->pos.term) {
        snprintf(why, sizeof why, "that position now holds an entry of term %" PRId64 ": it was rolled back", got.term);
        return resume_lost(r, why);
    }
    return STEP_OK;
}

/* ---- tailing ---- */

/* Where the cursor opens in start_after mode: at the newest entry at or before pos when there is one (the cursor then
 * finds something: a server's tailable cursor whose query matches nothing is dead at once, and pos may be past the
 * newest entry of an idle shard), else at pos. A failed look only costs that: the cursor opens at pos. */
static op_pos after_base(reader *r)
{
    char err[256] = "";
    op_pos next = r->pos, got;
    bool have = false;
    if (next.inc == UINT32_MAX) {
        next.secs++;
        next.inc = 0;
    } else {
        next.inc++;
    }
    if (oplog_entry_before(r->client, &next, &got, &have, err, sizeof err) && have)
        return got;
    if (err[0] == '\0' && !r->after_warned) { /* the look succeeded: nothing at or before the start */
        char pbuf[OP_POS_STRLEN];
        log_warning("reader: the oplog begins after the start %s: reading from its first entry (right for a shard "
                    "whose oplog began after that time; otherwise the entries between were lost to oplog2pg)",
                    op_pos_format(&r->pos, pbuf, sizeof pbuf));
        r->after_warned = true;
    }
    return r->pos;
}

/* Whether the entries of a batch weigh READER_REPLY_BYTES or more each (counted over a copy of the iterator). */
static bool huge_batch(const bson_t *reply, const bson_iter_t *batch)
{
    if (reply->len < READER_REPLY_BYTES)
        return false;
    bson_iter_t it = *batch;
    uint32_t n = 0;
    while (bson_iter_next(&it))
        n++;
    return n > 0 && reply->len / n >= READER_REPLY_BYTES;
}

/* The batchSize of the next getMore: as many entries as READER_REPLY_BYTES hold at the size of the last batch's
 * (its reply's bytes over its entries), at most batch_size; an empty batch leaves it as it was. */
static void next_ask(reader *r, uint32_t reply_bytes, uint32_t count)
{
    if (count == 0)
        return;
    uint64_t per = reply_bytes / count + 1;
    uint64_t ask = READER_REPLY_BYTES / per;
    r->huge = per >= READER_REPLY_BYTES;
    r->ask = ask < 1 ? 1 : ask > (uint64_t)r->cfg.batch_size ? r->cfg.batch_size : (int32_t)ask;
}

/* Opens a tailable cursor at r->pos, checks it, and follows it until an error or a stop. */
static step tail_once(reader *r)
{
    bson_t cmd = BSON_INITIALIZER, filter, ts, reply;
    bson_error_t err;
    bson_iter_t batch;
    uint32_t count;
    step s = open_session(r);
    if (s != STEP_OK)
        return s;
    if (!r->book_rebuilt) {
        s = txn_read_book(r);
        if (s != STEP_OK)
            return s;
    }

    BSON_APPEND_UTF8(&cmd, "find", "oplog.rs");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &filter);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "ts", &ts);
    op_pos from = r->after ? after_base(r) : r->pos;
    BSON_APPEND_TIMESTAMP(&ts, "$gte", from.secs, from.inc);
    bson_append_document_end(&filter, &ts);
    bson_append_document_end(&cmd, &filter);
    BSON_APPEND_BOOL(&cmd, "tailable", true);
    BSON_APPEND_BOOL(&cmd, "awaitData", true);
    int32_t first_ask = r->ask;
    BSON_APPEND_INT32(&cmd, "batchSize", first_ask);
    if (r->cfg.majority) {
        /* In the command itself: libmongoc sends a raw command's body as given, and the getMores inherit the
         * cursor's read concern on the server (they must not carry one). */
        bson_t rc;
        BSON_APPEND_DOCUMENT_BEGIN(&cmd, "readConcern", &rc);
        BSON_APPEND_UTF8(&rc, "level", "majority");
        bson_append_document_end(&cmd, &rc);
    }
    bool ok = reader_run_cmd(r, &cmd, &reply, &err);
    bson_destroy(&cmd);
    if (!ok) {
        bson_destroy(&reply);
        return reader_failed(r, "find", &err);
    }
    if (!reader_parse_cursor(&reply, "firstBatch", &r->cursor_id, &batch)) {
        bson_destroy(&reply);
        bson_set_error(&err, 0, 0, "reply without cursor.id/firstBatch");
        return reader_failed(r, "find", &err);
    }
    /* The start is an entry already applied (the committed checkpoint, or the last entry pushed): it must be
     * there, and is skipped. Starting after a position (start_after, until an entry is pushed): nothing is checked,
     * and every entry up to the position is skipped. */
    s = r->after ? STEP_OK : check_first(r, batch);
    if (s == STEP_OK) {
        backoff_reset(&r->bo);
        s = push_batch(r, &batch, true, &count);
        r->full = count >= (uint32_t)first_ask;
        if (s == STEP_OK && !r->full)
            s = maybe_idle(r);
        next_ask(r, reply.len, count);
    }
    bson_destroy(&reply);

    while (s == STEP_OK) {
        if (reader_stopping(r))
            return STEP_END;
        if (r->cursor_id == 0) {
            char pbuf[OP_POS_STRLEN];
            log_warning("reader: the server closed the oplog cursor: re-opening it at %s in %" PRId64 " ms",
                        op_pos_format(&r->pos, pbuf, sizeof pbuf), (int64_t)r->bo.next_ms);
            return STEP_RETRY;
        }
        if (r->huge) {
            /* Entries of several MB each: the next one arrives twice over (libmongoc's buffer and its copy), so let
             * the applier write and free the last ones first (core/queue.h). */
            if (!queue_pusher_flush(&r->out) || !queue_wait_drained(r->q, &r->stop))
                return STEP_END;
            memory_release(); /* the last ones' text and reply, so the next reply's two copies take their place */
        }
        bson_t gm = BSON_INITIALIZER;
        int32_t asked = r->ask;
        BSON_APPEND_INT64(&gm, "getMore", r->cursor_id);
        BSON_APPEND_UTF8(&gm, "collection", "oplog.rs");
        BSON_APPEND_INT32(&gm, "batchSize", asked);
        /* After a full batch the oplog may have run dry exactly at its end: wait only a moment, so that the applier
         * hears of it now rather than after await_ms (a server with more entries answers at once either way). */
        BSON_APPEND_INT64(&gm, "maxTimeMS", r->full ? READER_PROBE_MS : r->cfg.await_ms);
        ok = reader_run_cmd(r, &gm, &reply, &err);
        bson_destroy(&gm);
        if (!ok) {
            bson_destroy(&reply);
            r->cursor_id = 0; /* a failed getMore leaves the cursor to the server's timeout */
            return reader_failed(r, "getMore", &err);
        }
        if (!reader_parse_cursor(&reply, "nextBatch", &r->cursor_id, &batch)) {
            bson_destroy(&reply);
            r->cursor_id = 0;
            bson_set_error(&err, 0, 0, "reply without cursor.id/nextBatch");
            return reader_failed(r, "getMore", &err);
        }
        backoff_reset(&r->bo);
        if (huge_batch(&reply, &batch))
            memory_release(); /* libmongoc's receive buffer of that size is free: rendering must not add to it */
        s = push_batch(r, &batch, false, &count);
        r->full = count >= (uint32_t)asked;
        if (s == STEP_OK && !r->full)
            s = maybe_idle(r);
        next_ask(r, reply.len, count);
        bson_destroy(&reply);
        if (count > 0)
            log_debug("reader: %" PRIu32 " entries in a getMore batch", count);
    }
    return s;
}

static void *reader_main(void *arg)
{
    reader *r = arg;
    step s = STEP_OK;
    pthread_setname_np(pthread_self(), "o2p-reader"); /* what top -H and /proc/PID/task/TID/comm show */
    backoff_init(&r->bo, BACKOFF_MIN_MS, BACKOFF_MAX_MS);
    r->idle_due = true; /* the first drain is announced even when nothing new came */

    r->pos = r->cfg.start;
    r->have_pos = true;
    r->after = r->cfg.start_after;
    publish_pos(r, &r->pos);
    while (s != STEP_END && !reader_stopping(r)) {
        s = tail_once(r);
        if (s != STEP_RETRY)
            break;
        atomic_fetch_add(&r->reconnects, 1);
        if (!nap(r, (int64_t)backoff_next(&r->bo)))
            break;
    }

    if (!queue_pusher_flush(&r->out)) /* what was decoded before the end, unless the queue is stopped */
        queue_pusher_drop(&r->out);
    reader_kill_cursor(r);
    if (r->cs) {
        mongoc_client_session_destroy(r->cs);
        r->cs = NULL;
    }
    txn_book_free(&r->book);
    txn_list_free(&r->chain);
    mongoc_client_destroy(r->client);
    r->client = NULL;
    atomic_store(&r->finished, true);
    log_debug("reader: thread ended");
    return NULL;
}

/* ---- lifecycle ---- */

reader *reader_start(const reader_config *cfg, queue *q, char *err, size_t errlen)
{
    bool sync_ok = false;
    reader *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->cfg = *cfg;
    if (r->cfg.await_ms <= 0)
        r->cfg.await_ms = READER_DEFAULT_AWAIT_MS;
    if (r->cfg.batch_size <= 0)
        r->cfg.batch_size = READER_DEFAULT_BATCH_SIZE;
    r->ask = r->cfg.batch_size;
    r->q = q;
    queue_pusher_init(&r->out, q, &r->stop);
    r->uri_str = strdup(cfg->uri ? cfg->uri : "");
    if (!r->uri_str) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    r->cfg.uri = r->uri_str;
    atomic_init(&r->stop, false);
    atomic_init(&r->finished, false);
    atomic_init(&r->entries, 0);
    atomic_init(&r->reconnects, 0);
    atomic_init(&r->idles, 0);
    atomic_init(&r->last_ts, 0);
    atomic_init(&r->last_term, -1);
    atomic_init(&r->have_last, false);
    atomic_init(&r->txn_open, 0);
    atomic_init(&r->txn_bytes, 0);
    atomic_init(&r->txn_oldest, 0);
    txn_book_init(&r->book);
    txn_list_init(&r->chain);

    /* Our own recovery replaces the driver's retryReads (a retried getMore could skip a batch); a getMore waits
     * await_ms on the server, and a silent network loss should not block us for the 5-minute default. */
    mongo_client_opts mo = {
        .appname = "oplog2pg", .socket_timeout_ms = r->cfg.await_ms + 30000, .no_retry_reads = true};
    r->client = mongo_client_open(r->uri_str, &mo, err, errlen);
    if (!r->client)
        goto fail;

    if (!napper_init(&r->napper)) {
        snprintf(err, errlen, "cannot make the reader's timer (pthread)");
        goto fail;
    }
    sync_ok = true;
    int rc = pthread_create(&r->thread, NULL, reader_main, r);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the reader thread: %s", strerror(rc));
        goto fail;
    }
    return r;
fail:
    if (sync_ok)
        napper_destroy(&r->napper);
    if (r->client)
        mongoc_client_destroy(r->client);
    free(r->uri_str);
    free(r);
    return NULL;
}

void reader_ask_stop(reader *r)
{
    if (!r || r->joined)
        return;
    atomic_store(&r->stop, true);
    napper_wake(&r->napper);
    queue_wake_pushers(r->q);
}

void reader_stop(reader *r)
{
    if (!r || r->joined)
        return;
    reader_ask_stop(r);
    pthread_join(r->thread, NULL);
    r->joined = true;
}

void reader_free(reader *r)
{
    if (!r)
        return;
    reader_stop(r);
    napper_destroy(&r->napper);
    free(r->uri_str);
    free(r);
}

bool reader_finished(const reader *r)
{
    return atomic_load(&((reader *)r)->finished);
}

void reader_get_stats(const reader *r, reader_stats *out)
{
    reader *m = (reader *)r; /* atomic loads on C11 atomics need a non-const object on some compilers */
    uint64_t ts = atomic_load(&m->last_ts);
    out->entries = atomic_load(&m->entries);
    out->reconnects = atomic_load(&m->reconnects);
    out->idles = atomic_load(&m->idles);
    out->have_last = atomic_load(&m->have_last);
    out->last.secs = (uint32_t)(ts >> 32);
    out->last.inc = (uint32_t)ts;
    out->last.term = atomic_load(&m->last_term);
    out->txn_open = atomic_load(&m->txn_open);
    out->txn_bytes = atomic_load(&m->txn_bytes);
    uint64_t first = atomic_load(&m->txn_oldest);
    out->txn_oldest.secs = (uint32_t)(first >> 32);
    out->txn_oldest.inc = (uint32_t)first;
    out->txn_oldest.term = -1;
}

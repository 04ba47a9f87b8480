/*
 * txn_read.c — the reader's side of transactions written over several oplog entries (source/txn.h has their shapes
 * and the pure walk; reader.c the cursor that meets them).
 *
 * NOTES
 * - A TXN_PART or TXN_PREPARE entry is noted in the book and pushed as a noop: it moves the position, nothing else.
 *   At a commit the chain is walked back with point lookups (lookup_head: each entry with at most one op), then read
 *   forward a window of ops at a time (lookup_window, a $slice projection), each window pushed as one part of the
 *   logical entry at the commit's position (op_entry.more), so no read ever holds a whole 16 MB entry.
 * - Every lookup takes the tailing cursor's read concern (append_read_concern).
 * - A failed lookup before the first part went out is an ordinary retry (the re-opened cursor meets the commit
 *   again); after it, the session must end uncommitted (QUEUE_END_RETRY): the applier holds half a transaction.
 * - The book of open chains (status, metrics, the hold kept with the checkpoint) is published through the reader's
 *   atomic counters; at start it is rebuilt once from the checkpoint's hold (txn_read_book), best effort.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reader_internal.h"
#include "source/decode.h"
#include "source/txn.h"
#include "util/log.h"

/* ---- transactions over several entries (source/txn.h) ---- */

static void publish_book(reader *r)
{
    op_pos first;
    bool have = txn_book_oldest(&r->book, &first);
    atomic_store(&r->txn_open, (uint64_t)r->book.n);
    atomic_store(&r->txn_bytes, txn_book_bytes(&r->book));
    atomic_store(&r->txn_oldest, have ? ((uint64_t)first.secs << 32) | first.inc : 0);
}

/* The transactions' own reads of the oplog (the walk's point lookups, the book's re-read at start) take the tailing
 * cursor's read concern (tail_once), so that with read_concern = majority the rule "only majority-committed entries
 * are read" has no exception. A chain's entries are older than the majority-committed entry that led to them, so
 * the answers are the same in the normal case; what the rule buys is that no read can see an entry a failover rolls
 * back, whatever happens between the reads. In the command itself, as there: libmongoc sends a raw command's body
 * as given. */
static void append_read_concern(const reader *r, bson_t *cmd)
{
    if (!r->cfg.majority)
        return;
    bson_t rc;
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "readConcern", &rc);
    BSON_APPEND_UTF8(&rc, "level", "majority");
    bson_append_document_end(cmd, &rc);
}

/* The point lookup of a transaction's entries: the entry at ts exactly, with only the window [skip, skip + limit) of
 * its o.applyOps (a $slice projection, which keeps every other field). {ts: {$gte: ts}} with limit 1 finds it by
 * the oplog's ts order, as {ts: ts} would, and tells a missing entry apart in the same round trip. A chain entry
 * holds up to 16 MB of ops: the walk back needs none of them (limit 1 keeps the lookup small), and the forward read
 * takes them a window at a time, so neither ever holds a whole entry. */
static txn_lookup lookup_window(reader *r, const op_pos *ts, uint32_t skip, uint32_t limit, bson_t *out, char *err,
                                size_t errlen)
{
    bson_t cmd = BSON_INITIALIZER, filter, range, proj, slice, arg, reply;
    bson_error_t e;
    bson_iter_t batch;
    int64_t id = 0;
    BSON_APPEND_UTF8(&cmd, "find", "oplog.rs");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &filter);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "ts", &range);
    BSON_APPEND_TIMESTAMP(&range, "$gte", ts->secs, ts->inc);
    bson_append_document_end(&filter, &range);
    bson_append_document_end(&cmd, &filter);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "projection", &proj);
    BSON_APPEND_DOCUMENT_BEGIN(&proj, "o.applyOps", &slice);
    BSON_APPEND_ARRAY_BEGIN(&slice, "$slice", &arg);
    BSON_APPEND_INT32(&arg, "0", (int32_t)(skip > INT32_MAX ? INT32_MAX : skip));
    BSON_APPEND_INT32(&arg, "1", (int32_t)(limit > INT32_MAX ? INT32_MAX : limit));
    bson_append_array_end(&slice, &arg);
    bson_append_document_end(&proj, &slice);
    bson_append_document_end(&cmd, &proj);
    BSON_APPEND_INT64(&cmd, "limit", 1);
    BSON_APPEND_BOOL(&cmd, "singleBatch", true);
    append_read_concern(r, &cmd);
    bool ok = reader_run_cmd(r, &cmd, &reply, &e);
    bson_destroy(&cmd);
    if (!ok || !reader_parse_cursor(&reply, "firstBatch", &id, &batch)) {
        if (ok)
            snprintf(e.message, sizeof e.message, "reply without cursor.firstBatch");
        snprintf(err, errlen, "looking up the oplog entry at %u:%u: %s", ts->secs, ts->inc, e.message);
        bson_destroy(&reply);
        return TXN_LOOKUP_ERROR;
    }
    bson_t doc;
    op_pos got;
    char why[160];
    txn_lookup res = TXN_LOOKUP_MISSING;
    doc_next dn = reader_next_doc(&batch, &doc, why, sizeof why);
    if (dn == DOC_BAD) {
        snprintf(err, errlen, "looking up the oplog entry at %u:%u: malformed reply: %s", ts->secs, ts->inc, why);
        r->malformed = true;
        res = TXN_LOOKUP_ERROR;
    } else if (dn == DOC_NEXT && reader_doc_pos(&doc, &got) && op_pos_cmp(&got, ts) == 0) {
        bson_copy_to(&doc, out);
        res = TXN_LOOKUP_FOUND;
    }
    bson_destroy(&reply);
    return res;
}

/* The walk back's lookup (txn_lookup_fn): the entry with one op at most. */
static txn_lookup lookup_head(void *ctx, const op_pos *ts, bson_t *out, char *err, size_t errlen)
{
    return lookup_window(ctx, ts, 0, 1, out, err, errlen);
}

/* The first entry of a chain met half-way (the reader started inside it): found by walking back from the entry. */
static void find_first(reader *r, txn_chain *c, const txn_info *ti)
{
    txn_info w = *ti;
    char err[256];
    op_pos missing;
    w.role = TXN_COMMIT;
    w.has_count = true;
    txn_walk ws = txn_walk_back(&w, lookup_head, r, &r->chain, &missing, err, sizeof err);
    if (ws == TXN_WALK_OK && r->chain.n > 0) {
        c->first = r->chain.v[0];
        c->first_known = true;
    } else if (ws == TXN_WALK_LOST) {
        c->first = missing; /* at or after the true first: the oplog no longer reaches further */
    }
}

/* A new entry at pos holding one noop; NULL after reader_fatal when memory runs out. */
static op_entry *new_noop(reader *r, const op_pos *pos, const char *reason)
{
    op_entry *e = malloc(sizeof *e);
    if (!e || !op_entry_alloc(e, pos, 1)) {
        free(e);
        reader_fatal(r, QUEUE_END_NOMEM, "out of memory decoding an oplog entry");
        return NULL;
    }
    e->ops[0].kind = OP_NOOP;
    e->ops[0].reason = reason;
    return e;
}

/* The merge's tag of a prepared transaction's entry (op_entry.txn_role, txn_key): its prepare, every part of its
 * commitTransaction, its abortTransaction. Nothing on other entries. */
static void tag_entry(op_entry *e, const txn_info *ti)
{
    switch (ti->role) {
    case TXN_PREPARE:
        e->txn_role = OP_TXN_PREPARE;
        break;
    case TXN_COMMIT_PREPARED:
        e->txn_role = OP_TXN_COMMIT;
        break;
    case TXN_ABORT:
        e->txn_role = OP_TXN_ABORT;
        break;
    default:
        return;
    }
    e->txn_key = ti->key;
}

/* A chain entry that is not the commit: noted in the book, then pushed as a noop (it only moves the position). */
static step push_chain_noop(reader *r, const txn_info *ti, const char *reason)
{
    op_entry *e = new_noop(r, &ti->pos, reason);
    if (e == NULL)
        return STEP_END;
    tag_entry(e, ti);
    return reader_push_entry(r, e, 0);
}

static step chain_lost(reader *r, const txn_info *ti, const op_pos *missing)
{
    char at[OP_POS_STRLEN], began[OP_POS_STRLEN];
    op_pos first = *missing;
    for (size_t k = 0; k < r->book.n; k++)
        if (op_pos_cmp(&r->book.v[k].last, &ti->prev) == 0 && op_pos_cmp(&r->book.v[k].first, &first) < 0)
            first = r->book.v[k].first;
    reader_fatal(
        r, QUEUE_END_RESUME_LOST,
        "the transaction committed at %s began at %s, which is no longer in the oplog: the oplog window is shorter "
        "than that transaction; resync with --reimport",
        op_pos_format(&ti->pos, at, sizeof at), op_pos_format(&first, began, sizeof began));
    return STEP_END;
}

/* How many ops the forward read asks for at first, and about how many bytes of ops it aims at per window after. */
#define TXN_FIRST_WINDOW 16
#define TXN_WINDOW_BYTES (1024 * 1024)

/* The ops of the chain entry at `at`, read a window at a time (lookup_window) and pushed as parts of the logical
 * entry at the commit's position, numbered on from *base; `last`: the commit entry's own ops, whose final window ends
 * the logical entry. *pushed says whether a part went out already (a failed lookup then cannot be retried as if
 * nothing happened: the session must end uncommitted). */
static step push_windows(reader *r, const txn_info *ti, const op_pos *at, bool last, uint32_t *base, bool *pushed)
{
    char err[512];
    bson_error_t be;
    uint32_t skip = 0, want = TXN_FIRST_WINDOW;
    for (;;) {
        bson_t part;
        txn_lookup lr = lookup_window(r, at, skip, want, &part, err, sizeof err);
        if (lr == TXN_LOOKUP_MISSING && at != &ti->pos)
            return chain_lost(r, ti, at);
        if (lr == TXN_LOOKUP_MISSING) {
            /* The commit entry itself, read a moment ago, is gone: rolled back (read_concern = local). The re-opened
             * cursor's resume check says so. */
            snprintf(err, sizeof err, "the commit entry at %u:%u is no longer in the oplog", at->secs, at->inc);
            lr = TXN_LOOKUP_ERROR;
        }
        if (lr == TXN_LOOKUP_ERROR && r->malformed) {
            reader_fatal(r, QUEUE_END_UNSUPPORTED, "%s, in the transaction committed at %u:%u; stopped before it", err,
                         ti->pos.secs, ti->pos.inc);
            return STEP_END;
        }
        if (lr == TXN_LOOKUP_ERROR) {
            if (!*pushed) { /* nothing pushed yet: an ordinary retry, which meets the commit again */
                bson_set_error(&be, 0, 0, "%s", err);
                return reader_failed(r, "reading a transaction's entries", &be);
            }
            reader_fatal(r, QUEUE_END_RETRY, "reader: %s, in the middle of the transaction committed at %u:%u", err,
                         ti->pos.secs, ti->pos.inc);
            return STEP_END;
        }
        /* How many ops came (the window may be short: the entry's end). */
        uint32_t got = 0;
        bson_iter_t it, ops;
        if (bson_iter_init(&it, &part) && bson_iter_find(&it, "o") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
            bson_iter_recurse(&it, &ops) && bson_iter_find(&ops, "applyOps") && BSON_ITER_HOLDS_ARRAY(&ops)) {
            bson_iter_t el;
            if (bson_iter_recurse(&ops, &el))
                while (bson_iter_next(&el))
                    got++;
        }
        bool end = got < want;
        size_t part_len = part.len;
        op_entry *e;
        size_t reserved = 0;
        step s = reader_prepare_raw(r, &part, DECODE_TXN_PART, &e, &reserved);
        bson_destroy(&part);
        if (s != STEP_OK)
            return s;
        if (end && got == 0 && !last) { /* an empty last window of an entry that is not the last: nothing to add */
            queue_pusher_unreserve(&r->out, reserved);
            op_entry_free(e);
            return STEP_OK;
        }
        e->pos = ti->pos;
        for (size_t i = 0; i < e->n; i++) {
            e->ops[i].pos = ti->pos;
            e->ops[i].index = *base + (uint32_t)i;
        }
        *base += got;
        tag_entry(e, ti);
        e->atomic = true;
        e->more = !(last && end);
        s = reader_push_entry(r, e, reserved);
        if (s != STEP_OK)
            return s;
        *pushed = true;
        if (end)
            return STEP_OK;
        skip += got;
        /* The next window: about TXN_WINDOW_BYTES at the size of this one's ops. */
        uint64_t per = part_len / got + 1;
        uint64_t next = TXN_WINDOW_BYTES / per;
        want = next < 1 ? 1 : next > 100000 ? 100000 : (uint32_t)next;
    }
}

/* A commit point: the chain's entries are read forward, a window of ops at a time, and pushed as the parts of one
 * logical entry at the commit's position (ops numbered across the whole transaction), the last part being the end of
 * the commit's own ops (or, for a commitTransaction, a noop). */
static step push_commit(reader *r, const bson_t *doc, const txn_info *ti)
{
    char err[512], what[96], cbuf[OP_POS_STRLEN];
    op_pos missing;
    bson_error_t be;
    log_debug("reader: walking back the transaction committed at %s", op_pos_format(&ti->pos, cbuf, sizeof cbuf));
    txn_walk ws = txn_walk_back(ti, lookup_head, r, &r->chain, &missing, err, sizeof err);
    switch (ws) {
    case TXN_WALK_OK:
        break;
    case TXN_WALK_SINGLE:
        return reader_push_plain(r, doc);
    case TXN_WALK_LOST:
        return chain_lost(r, ti, &missing);
    case TXN_WALK_BAD: {
        char pbuf[OP_POS_STRLEN], lbuf[OP_POS_STRLEN];
        reader_fatal(r, QUEUE_END_UNSUPPORTED,
                     "malformed transaction: %s; stopped before its commit entry %s (the last entry handed on is %s)",
                     err, op_pos_format(&ti->pos, pbuf, sizeof pbuf), op_pos_format(&r->pos, lbuf, sizeof lbuf));
        return STEP_END;
    }
    case TXN_WALK_NOMEM:
        reader_fatal(r, QUEUE_END_NOMEM, "out of memory walking a transaction's oplog entries");
        return STEP_END;
    case TXN_WALK_ERROR: /* nothing pushed yet: an ordinary retry, which meets the commit again */
        if (r->malformed) {
            reader_fatal(r, QUEUE_END_UNSUPPORTED,
                         "%s, walking back the transaction committed at %s; stopped before it", err, cbuf);
            return STEP_END;
        }
        snprintf(what, sizeof what, "walking back the transaction committed at %s", cbuf);
        bson_set_error(&be, 0, 0, "%s", err);
        return reader_failed(r, what, &be);
    }

    /* Forward: each entry of the chain, then the commit entry itself (for an implicit commit; a commitTransaction
     * has no ops of its own), a window of ops at a time, each window one part. */
    txn_book_close(&r->book, &ti->prev);
    publish_book(r);
    uint32_t base = 0;
    bool pushed = false;
    size_t entries = r->chain.n + (ti->role == TXN_COMMIT ? 1 : 0);
    for (size_t k = 0; k < entries; k++) {
        const op_pos *at = k < r->chain.n ? &r->chain.v[k] : &ti->pos;
        step s = push_windows(r, ti, at, k + 1 == entries && ti->role == TXN_COMMIT, &base, &pushed);
        if (s != STEP_OK)
            return s;
    }
    if (ti->role == TXN_COMMIT_PREPARED) {
        op_entry *e = new_noop(r, &ti->pos, "commitTransaction");
        if (e == NULL)
            return STEP_END;
        e->ops[0].index = base;
        e->atomic = true;
        tag_entry(e, ti);
        return reader_push_entry(r, e, 0);
    }
    return STEP_OK;
}

/* One raw entry: chain entries are noted and skipped, commits reassembled, everything else pushed as it is. */
step txn_read_entry(reader *r, const bson_t *doc)
{
    txn_info ti;
    if (!txn_classify(doc, &ti))
        return reader_push_plain(r, doc); /* no ts: the decoder says so */
    switch (ti.role) {
    case TXN_NONE:
        return reader_push_plain(r, doc);
    case TXN_PART:
    case TXN_PREPARE: {
        txn_chain *c = txn_book_note(&r->book, &ti, doc->len);
        if (c == NULL) {
            reader_fatal(r, QUEUE_END_NOMEM, "out of memory noting a transaction");
            return STEP_END;
        }
        if (!c->first_known && c->entries == 1)
            find_first(r, c, &ti);
        publish_book(r);
        return push_chain_noop(r, &ti,
                               ti.role == TXN_PART ? "partialTxn entry (applied at its commit)"
                                                   : "prepared transaction (applied at commitTransaction)");
    }
    case TXN_ABORT:
        txn_book_close(&r->book, &ti.prev);
        publish_book(r);
        return push_chain_noop(r, &ti, "abortTransaction");
    case TXN_COMMIT:
    case TXN_COMMIT_PREPARED:
        return push_commit(r, doc, &ti);
    }
    return reader_push_plain(r, doc);
}

/* ---- the book at start ---- */

static int cmp_chain_last(const void *a, const void *b)
{
    return op_pos_cmp(&((const txn_chain *)a)->last, &((const txn_chain *)b)->last);
}

/* report_prepares: one note_only OP_TXN_PREPARE entry per prepared transaction open at the start, at its prepare's
 * position and in the oplog's order, before anything else is pushed. The notes do not move the position
 * (reader_push_entry). */
static step push_prepare_notes(reader *r)
{
    size_t n = 0;
    for (size_t k = 0; k < r->book.n; k++)
        n += r->book.v[k].prepared;
    if (n == 0)
        return STEP_OK;
    txn_chain *v = malloc(n * sizeof *v);
    if (v == NULL) {
        reader_fatal(r, QUEUE_END_NOMEM, "out of memory noting the prepared transactions open at the start");
        return STEP_END;
    }
    n = 0;
    for (size_t k = 0; k < r->book.n; k++)
        if (r->book.v[k].prepared)
            v[n++] = r->book.v[k];
    qsort(v, n, sizeof *v, cmp_chain_last);
    step s = STEP_OK;
    for (size_t k = 0; k < n && s == STEP_OK; k++) {
        op_entry *e = new_noop(r, &v[k].last, "prepared transaction open at the start (a note for the merge)");
        if (e == NULL) {
            s = STEP_END;
            break;
        }
        e->note_only = true;
        e->txn_role = OP_TXN_PREPARE;
        e->txn_key = v[k].key;
        s = reader_push_entry(r, e, 0);
    }
    free(v);
    if (s == STEP_OK)
        log_info("reader: %zu prepared transaction(s) open at the start, noted for the merge", n);
    return s;
}

/* The checkpoint says a transaction was open at the start (its first entry at cfg.hold): read the entries from there
 * to the start once, noting the chain heads, so the book (status, metrics, the hold of the next commits) knows the
 * chains that began before the start. Best effort: a failure only leaves the book incomplete (logged). */
step txn_read_book(reader *r)
{
    r->book_rebuilt = true;
    if (!r->cfg.has_hold || op_pos_cmp(&r->cfg.hold, &r->cfg.start) >= 0)
        return STEP_OK;
    bson_t cmd = BSON_INITIALIZER, filter, range, reply;
    bson_error_t err;
    bson_iter_t batch;
    int64_t id = 0;
    bool ok, done = false;
    uint64_t seen = 0;
    BSON_APPEND_UTF8(&cmd, "find", "oplog.rs");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &filter);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "ts", &range);
    BSON_APPEND_TIMESTAMP(&range, "$gte", r->cfg.hold.secs, r->cfg.hold.inc);
    bson_append_document_end(&filter, &range);
    bson_append_document_end(&cmd, &filter);
    BSON_APPEND_INT32(&cmd, "batchSize", r->cfg.batch_size);
    append_read_concern(r, &cmd); /* the getMores inherit it */
    ok = reader_run_cmd(r, &cmd, &reply, &err) && reader_parse_cursor(&reply, "firstBatch", &id, &batch);
    bson_destroy(&cmd);
    while (ok && !done && !reader_stopping(r)) {
        bson_t doc;
        char why[160];
        doc_next dn;
        while ((dn = reader_next_doc(&batch, &doc, why, sizeof why)) == DOC_NEXT) {
            txn_info ti;
            if (!txn_classify(&doc, &ti))
                continue;
            if (op_pos_cmp(&ti.pos, &r->cfg.start) > 0) {
                done = true;
                break;
            }
            seen++;
            if (ti.role == TXN_PART || ti.role == TXN_PREPARE)
                (void)txn_book_note(&r->book, &ti, doc.len);
            else if (ti.role != TXN_NONE)
                txn_book_close(&r->book, &ti.prev);
        }
        if (dn == DOC_BAD) { /* best effort (above): the book stays incomplete, the reply is destroyed below */
            bson_set_error(&err, 0, 0, "malformed reply: %s", why);
            ok = false;
            break;
        }
        bson_destroy(&reply);
        if (done || id == 0)
            break;
        bson_t gm = BSON_INITIALIZER;
        BSON_APPEND_INT64(&gm, "getMore", id);
        BSON_APPEND_UTF8(&gm, "collection", "oplog.rs");
        BSON_APPEND_INT32(&gm, "batchSize", r->cfg.batch_size);
        ok = reader_run_cmd(r, &gm, &reply, &err) && reader_parse_cursor(&reply, "nextBatch", &id, &batch);
        bson_destroy(&gm);
    }
    if (!ok)
        bson_destroy(&reply);
    if (id != 0) {
        r->cursor_id = id;
        reader_kill_cursor(r);
    }
    if (!ok && r->cfg.report_prepares) {
        /* The merge must hear of every prepared transaction open at the start: without the notes it could hand on
         * one participant's commit alone. Not best effort then: the book is read again at the next cursor. */
        txn_book_free(&r->book);
        r->book_rebuilt = false;
        if (reader_stopping(r))
            return STEP_END;
        return reader_failed(r, "re-reading the open transactions since the checkpoint's hold", &err);
    }
    if (!ok)
        log_warning("reader: could not re-read the open transactions since %u:%u (%s): status will not show them "
                    "until their commit",
                    r->cfg.hold.secs, r->cfg.hold.inc, err.message);
    publish_book(r);
    log_debug("reader: %" PRIu64 " entries re-read for open transactions, %zu open at the start", seen, r->book.n);
    return r->cfg.report_prepares ? push_prepare_notes(r) : STEP_OK;
}

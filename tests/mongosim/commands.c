/*
 * commands.c — mongosim's command handlers: handshake, catalog, CRUD through the store, cursors on collections and
 * on local.oplog.rs (tailable/awaitData), transactions and test-only fault commands.
 *
 * NOTES: every write goes through the store, which hands each oplog entry body to emit_body(); that adds the
 * session fields of a retryable write (lsid, txnNumber, stmtId, prevOpTime) when the command carried a txnNumber,
 * stamps ts/t/v/wall and appends to the oplog. Cursor batches are written straight into the connection's output
 * buffer (one copy per document). Collection cursors keep only the last returned _id and re-enter the store's
 * ordered find after it, so a large collection is never copied into a cursor. A write with writeConcern
 * {w: "majority"} has its finished reply cut out of the output buffer and parked until the majority commit point
 * covers it ("write concern" below).
 */
#include "ddl.h"
#include "flavor.h"
#include "images.h"
#include "projection.h"
#include "sim_internal.h"
#include "txn.h"
#include "update.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* sha256("") — the lsid.uid a server records when no user is authenticated. */
static const uint8_t EMPTY_USER_UID[32] = {0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4,
                                           0xc8, 0x99, 0x6f, 0xb9, 0x24, 0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b,
                                           0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55};

struct sim_cursor {
    int64_t id;
    sim_cursor *next;
    bool oplog, tailable, await_data;
    bool majority;      /* readConcern {level: "majority"}: sees only what the commit point covers */
    uint64_t next_seq;  /* oplog: next entry to return */
    int64_t limit_left; /* < 0: no limit */
    char db[128], coll[256];
    bson_t filter; /* collection: the user's filter, applied again to later batches */
    bool has_last;
    bson_value_t last_id;
    sim_projection *proj; /* the find's projection, applied to every batch (NULL: none) */
    int64_t skip_left;    /* the find's skip: matching documents still to pass over before the first returned */
    bool has_uuid;        /* collection: the UUID of the collection the find opened (a view's cursor has none) */
    uint8_t uuid[16];
};

typedef struct {
    sim_server *srv;
    sim_reply *r;
    const bson_t *cmd;
    const char *db;
    const char *name;
    bson_iter_t first; /* the command's first element */
} cmd_ctx;

/* ---- helpers ---- */

static void reply_ok(sim_reply *r, bson_t *doc)
{
    BSON_APPEND_DOUBLE(doc, "ok", 1.0);
    reply_bson(r, doc);
    bson_destroy(doc);
}

static bool opt_int64(const bson_t *cmd, const char *key, int64_t *v)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, cmd, key) || !BSON_ITER_HOLDS_NUMBER(&it))
        return false;
    *v = bson_iter_as_int64(&it);
    return true;
}

static bool opt_bool(const bson_t *cmd, const char *key)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, cmd, key) && bson_iter_as_bool(&it);
}

/* An optional sub-document; false when present with another type. */
static bool opt_doc(const bson_t *cmd, const char *key, bson_t *out, bool *present)
{
    bson_iter_t it;
    *present = false;
    bson_init(out);
    if (!bson_iter_init_find(&it, cmd, key))
        return true;
    if (!BSON_ITER_HOLDS_DOCUMENT(&it))
        return false;
    uint32_t len;
    const uint8_t *data;
    bson_iter_document(&it, &len, &data);
    bson_destroy(out);
    *present = true;
    return bson_init_static(out, data, len);
}

static const char *coll_name(cmd_ctx *x)
{
    if (!BSON_ITER_HOLDS_UTF8(&x->first)) {
        reply_error(x->r, 73, "collection name must be a string in '%s'", x->name);
        return NULL;
    }
    const char *c = bson_iter_utf8(&x->first, NULL);
    if (!*c || strlen(c) > 200) {
        reply_error(x->r, 73, "Invalid namespace specified '%s.%s'", x->db, c);
        return NULL;
    }
    return c;
}

static bool need_primary(cmd_ctx *x)
{
    if (!x->srv->stepped_down)
        return true;
    reply_error(x->r, 10107, "not primary");
    return false;
}

static void append_uuid(bson_t *b, const char *key, const uint8_t *uuid)
{
    bson_append_binary(b, key, -1, BSON_SUBTYPE_UUID, uuid, 16);
}

static void append_optime(bson_t *b, const char *key, uint64_t ts, int64_t t)
{
    bson_t o;
    BSON_APPEND_DOCUMENT_BEGIN(b, key, &o);
    BSON_APPEND_TIMESTAMP(&o, "ts", OPLOG_TS_SECS(ts), OPLOG_TS_INC(ts));
    BSON_APPEND_INT64(&o, "t", t);
    bson_append_document_end(b, &o);
}

/* ---- cursors ---- */

static sim_cursor *cursor_find(sim_server *srv, int64_t id)
{
    for (sim_cursor *c = srv->cursors; c; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

static sim_cursor *cursor_new(sim_server *srv)
{
    sim_cursor *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "mongosim: out of memory creating a cursor\n");
        abort();
    }
    do {
        c->id = (int64_t)(((uint64_t)rand() << 31 ^ (uint64_t)rand()) & 0x3fffffffffffffffull);
    } while (c->id == 0 || cursor_find(srv, c->id));
    bson_init(&c->filter);
    c->limit_left = -1;
    c->next = srv->cursors;
    srv->cursors = c;
    return c;
}

static void cursor_free(sim_server *srv, sim_cursor *cur)
{
    for (sim_cursor **pp = &srv->cursors; *pp; pp = &(*pp)->next) {
        if (*pp == cur) {
            *pp = cur->next;
            break;
        }
    }
    bson_destroy(&cur->filter);
    if (cur->has_last)
        bson_value_destroy(&cur->last_id);
    projection_free(cur->proj);
    free(cur);
}

void cmd_cursors_free(sim_server *srv)
{
    while (srv->cursors)
        cursor_free(srv, srv->cursors);
    cs_cursors_free(srv);
}

/* The entry a live oplog cursor last looked at was removed by capping or truncation. */
static bool cursor_lost(sim_server *srv, const sim_cursor *cur)
{
    return cur->next_seq >= 1 && cur->next_seq - 1 < oplog_first_seq(srv->oplog);
}

/* ---- the majority commit point ---- */

/* The first seq a cursor may not read yet: a majority read sees the oplog up to the commit point only. A real
 * server reads it from the majority-committed snapshot, also in every getMore: the cursor keeps the find's read
 * concern (mongodb/mongo src/mongo/db/commands/getmore_cmd.cpp, applyCursorReadConcern: kMajorityReadConcern ->
 * ReadSource::kMajorityCommitted), and an awaitData getMore waits for the snapshot to advance (SERVER-29127). */
static uint64_t visible_end(sim_server *srv, const sim_cursor *cur)
{
    uint64_t end = oplog_end_seq(srv->oplog);
    if (cur->majority && srv->maj_frozen) {
        uint64_t m = oplog_seek(srv->oplog, srv->maj_ts, false);
        if (m < end)
            end = m;
    }
    return end;
}

/* The data a read sees: a majority read while the commit point lags reads the snapshot kept at it. */
static const sim_store *read_store(sim_server *srv, bool majority)
{
    return majority && srv->maj_frozen && srv->maj_store ? srv->maj_store : srv->store;
}

void cmd_majority_optime(sim_server *srv, uint64_t *ts, int64_t *t, int64_t *wall_ms)
{
    *ts = srv->maj_frozen ? srv->maj_ts : oplog_last_ts(srv->oplog);
    *t = srv->term;
    *wall_ms = (int64_t)OPLOG_TS_SECS(*ts) * 1000;
    uint64_t seq = oplog_seek(srv->oplog, *ts, true);
    if (seq >= oplog_end_seq(srv->oplog) || oplog_entry_ts(srv->oplog, seq) != *ts)
        return;
    uint32_t len;
    const uint8_t *data = oplog_entry(srv->oplog, seq, &len);
    bson_t e;
    bson_iter_t it;
    if (!bson_init_static(&e, data, len))
        return;
    if (bson_iter_init_find(&it, &e, "t") && BSON_ITER_HOLDS_NUMBER(&it))
        *t = bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, &e, "wall") && BSON_ITER_HOLDS_DATE_TIME(&it))
        *wall_ms = bson_iter_date_time(&it);
}

/* readConcern {level: "majority"} in a command (any other level, or none, reads the newest data). */
static bool wants_majority(const bson_t *cmd)
{
    bson_iter_t it, lv;
    return bson_iter_init_find(&it, cmd, "readConcern") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
           bson_iter_recurse(&it, &lv) && bson_iter_find(&lv, "level") && BSON_ITER_HOLDS_UTF8(&lv) &&
           strcmp(bson_iter_utf8(&lv, NULL), "majority") == 0;
}

/* ---- write concern ----
 *
 * A write with writeConcern {w: "majority"} is answered once the majority commit point covers it, as a server's
 * RunCommandAndWaitForWriteConcern (service_entry_point_common.cpp) waits after the command ran, successful or not,
 * on the client's last OpTime; when the command wrote nothing that is the newest entry of the oplog
 * (ServiceEntryPointMongod waitForWriteConcern: setLastOpToSystemLastOpTime), so in both cases mongosim waits for
 * the newest entry at the command's end. The reply is parked on the connection like an awaitData getMore (the loop
 * never blocks) and sent when mongosimMajority advances or releases the point. Other write concerns (none, w: 1,
 * w: N) answer at once, as before.
 *
 * The answers a waiting write can get instead (the write stays applied; the reply keeps n, nModified, ...):
 *  - wtimeout ms passed: writeConcernError {code: 64, codeName: "WriteConcernFailed", errmsg: "waiting for
 *    replication timed out", errInfo: {wtimeout: true, writeConcern: {w, wtimeout, provenance}}}.
 *    ReplicationCoordinatorImpl::_awaitReplication_inlock returns {WriteConcernFailed, "waiting for replication
 *    timed out"} (repl/replication_coordinator_impl.cpp); waitForWriteConcern (write_concern.cpp) sets wTimedOut
 *    and wcUsed; CommandHelpers::appendCommandWCStatus (commands.cpp) builds errInfo {wtimeout: true, writeConcern:
 *    wcUsed.toBSON()}; WriteConcernErrorDetail::toBSON (rpc/write_concern_error_detail.cpp, its IDL) orders code,
 *    codeName, errmsg, errInfo; WriteConcernOptions::toBSON (write_concern_options.cpp) writes w, j/fsync when
 *    given, wtimeout as an int32, then provenance ("clientSupplied"). Code 64's name is WriteConcernFailed up to
 *    8.0 and WriteConcernTimeout from 8.1 (the Node.js driver's src/error.ts: "WriteConcernTimeout is
 *    WriteConcernFailed on pre-8.1 servers"; mongo's base/error_codes.yml on master).
 *  - a step-down or a rollback (mongosimStepDown, mongosimRollback): writeConcernError {code: 11602, codeName:
 *    "InterruptedDueToReplStateChange", errmsg: "operation was interrupted", errInfo: {writeConcern}}. Stepping down
 *    kills every operation that took the global lock for writes, as a waiting write did
 *    (_killConflictingOpsOnStepUpAndStepDown: wasGlobalLockTakenInModeConflictingWithWrites, reason
 *    InterruptedDueToReplStateChange), before the waiters left would get PrimarySteppedDown 189
 *    (_updateMemberStateFromTopologyCoordinator); the interrupted wait returns the kill status, whose message is
 *    "operation was interrupted" (operation_context.cpp, checkForInterruptNoAssert).
 * An ok:1 reply gets writeConcernError before its ok (the command's body, then the write concern status, then ok);
 * an ok:0 reply gets it after its error fields (the extra fields of an error reply). */

typedef struct {
    bool majority;
    int64_t wtimeout; /* ms; 0: wait forever, as a server does */
    bool has_j, j, fsync;
} wc_spec;

static bool parse_wc(const bson_t *cmd, wc_spec *wc)
{
    bson_iter_t it, f;
    memset(wc, 0, sizeof *wc);
    if (!bson_iter_init_find(&it, cmd, "writeConcern") || !BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &f))
        return false;
    while (bson_iter_next(&f)) {
        const char *k = bson_iter_key(&f);
        if (strcmp(k, "w") == 0)
            wc->majority = BSON_ITER_HOLDS_UTF8(&f) && strcmp(bson_iter_utf8(&f, NULL), "majority") == 0;
        else if (strcmp(k, "wtimeout") == 0 && BSON_ITER_HOLDS_NUMBER(&f))
            wc->wtimeout = bson_iter_as_int64(&f);
        else if (strcmp(k, "j") == 0) {
            wc->has_j = true;
            wc->j = bson_iter_as_bool(&f);
        } else if (strcmp(k, "fsync") == 0)
            wc->fsync = bson_iter_as_bool(&f);
    }
    return true;
}

static bool majority_covers(const sim_server *srv, uint64_t ts)
{
    return !srv->maj_frozen || srv->maj_ts >= ts;
}

void cmd_parked_write_free(sim_conn *c)
{
    if (c->wc_reply)
        bson_destroy(c->wc_reply);
    if (c->wc_used)
        bson_destroy(c->wc_used);
    c->wc_reply = c->wc_used = NULL;
}

/* Parks the reply just written (r->start onwards in the connection's output) when the command asked for a majority
 * write concern and the commit point does not cover the newest entry yet. */
static void wc_hold(sim_server *srv, sim_reply *r, const bson_t *cmd)
{
    wc_spec wc;
    if (!parse_wc(cmd, &wc) || !wc.majority)
        return;
    uint64_t target = oplog_last_ts(srv->oplog);
    if (majority_covers(srv, target))
        return;
    sim_conn *c = r->conn;
    size_t hdr = r->opcode == SIM_OP_QUERY ? 16 + 20 : 16 + 5; /* OP_REPLY's fields / OP_MSG's flagBits + kind 0 */
    if (c->out.len < r->start + hdr + 5)
        return;
    bson_t *body = bson_new_from_data(c->out.data + r->start + hdr, c->out.len - r->start - hdr);
    if (!body)
        return;
    c->out.len = r->start;
    cmd_parked_write_free(c);
    c->wc_reply = body;
    c->wc_used = bson_new();
    BSON_APPEND_UTF8(c->wc_used, "w", "majority");
    if (wc.fsync)
        BSON_APPEND_BOOL(c->wc_used, "fsync", true);
    else if (wc.has_j)
        BSON_APPEND_BOOL(c->wc_used, "j", wc.j);
    BSON_APPEND_INT32(c->wc_used, "wtimeout", (int32_t)wc.wtimeout);
    BSON_APPEND_UTF8(c->wc_used, "provenance", "clientSupplied");
    c->wc_ts = target;
    c->park_kind = SIM_PARK_WRITE;
    r->parked = true;
    if (wc.wtimeout > 0)
        sim_conn_park(c, (double)wc.wtimeout / 1000.0);
}

/* The held reply with a writeConcernError added (see above for where it goes). */
static void reply_with_wce(sim_reply *r, const bson_t *reply, const bson_t *used, int code, const char *msg,
                           bool wtimeout)
{
    bson_iter_t it, ok_it;
    bool ok = bson_iter_init_find(&ok_it, reply, "ok") && bson_iter_as_bool(&ok_it);
    bson_t out = BSON_INITIALIZER, wce, info;
    bson_iter_init(&it, reply);
    while (bson_iter_next(&it))
        if (!ok || strcmp(bson_iter_key(&it), "ok") != 0)
            bson_append_iter(&out, NULL, 0, &it);
    BSON_APPEND_DOCUMENT_BEGIN(&out, "writeConcernError", &wce);
    BSON_APPEND_INT32(&wce, "code", code);
    BSON_APPEND_UTF8(&wce, "codeName", sim_code_name(code));
    BSON_APPEND_UTF8(&wce, "errmsg", msg);
    BSON_APPEND_DOCUMENT_BEGIN(&wce, "errInfo", &info);
    if (wtimeout)
        BSON_APPEND_BOOL(&info, "wtimeout", true);
    BSON_APPEND_DOCUMENT(&info, "writeConcern", used);
    bson_append_document_end(&wce, &info);
    bson_append_document_end(&out, &wce);
    if (ok)
        bson_append_iter(&out, NULL, 0, &ok_it);
    reply_bson(r, &out);
    bson_destroy(&out);
}

/* A parked write: answered when the commit point covers it, at its wtimeout, or at a step-down/rollback. */
static bool wc_parked_try(sim_server *srv, sim_conn *c, bool timeout)
{
    sim_reply r = {.conn = c, .request_id = c->park_request, .opcode = c->park_opcode};
    if (srv->stepped_down)
        reply_with_wce(&r, c->wc_reply, c->wc_used, 11602, "operation was interrupted", false);
    else if (majority_covers(srv, c->wc_ts))
        reply_bson(&r, c->wc_reply);
    else if (timeout)
        reply_with_wce(&r, c->wc_reply, c->wc_used, 64, "waiting for replication timed out", true);
    else
        return false;
    cmd_parked_write_free(c);
    c->park_kind = SIM_PARK_GETMORE;
    return true;
}

/* mongosimMalformBatch: the bad element itself, under key k. */
static void write_bad_element(sim_buf *b, int how, const char *k)
{
    if (how == 1) {
        bw_int32(b, k, 42);
        return;
    }
    /* An embedded document whose length runs past the array's end. */
    static const uint8_t bad[5] = {0xff, 0xff, 0xff, 0x7f, 0x00};
    bw_key(b, BSON_TYPE_DOCUMENT, k);
    buf_put(b, bad, sizeof bad);
}

/* Writes `key: [entries...]` for an oplog cursor, advancing it; returns the number written. */
static int64_t write_oplog_batch(sim_server *srv, sim_buf *b, sim_cursor *cur, const char *key, int64_t max_docs)
{
    size_t arr = bw_sub_begin(b, BSON_TYPE_ARRAY, key);
    uint64_t end = visible_end(srv, cur);
    if (cur->next_seq < oplog_first_seq(srv->oplog))
        cur->next_seq = oplog_first_seq(srv->oplog);
    int64_t n = 0;
    size_t bytes = 0;
    uint32_t keys = 0;
    char keybuf[16];
    const char *k;
    for (; cur->skip_left > 0 && cur->next_seq < end; cur->skip_left--)
        cur->next_seq++;
    /* mongosimMalformBatch: a bad element after the first entry of the next batch of two entries or more, or (lookup)
     * before the first entry of the next batch of a find with a projection. */
    int malform = 0;
    int64_t malform_at = 1;
    if (srv->malform_batch && srv->malform_lookup && cur->proj != NULL && end > cur->next_seq) {
        malform = srv->malform_batch;
        malform_at = 0;
    } else if (srv->malform_batch && !srv->malform_lookup && end - cur->next_seq >= 2 &&
               (max_docs <= 0 || max_docs >= 2)) {
        malform = srv->malform_batch;
    }
    if (malform)
        srv->malform_batch = 0;
    while (cur->next_seq < end && (max_docs <= 0 || n < max_docs) && bytes < SIM_BATCH_BYTES) {
        if (malform && n == malform_at) {
            bson_uint32_to_string(keys++, &k, keybuf, sizeof keybuf);
            write_bad_element(b, malform, k);
            malform = 0;
        }
        uint32_t len;
        const uint8_t *data = oplog_entry(srv->oplog, cur->next_seq, &len);
        bson_t entry, projected = BSON_INITIALIZER;
        if (cur->proj && bson_init_static(&entry, data, len)) {
            projection_apply(cur->proj, &entry, &projected);
            data = bson_get_data(&projected);
            len = projected.len;
        }
        if (n > 0 && bytes + len > SIM_BATCH_BYTES) {
            bson_destroy(&projected);
            break;
        }
        bson_uint32_to_string(keys++, &k, keybuf, sizeof keybuf);
        bw_doc(b, k, data, len);
        bson_destroy(&projected);
        bytes += len;
        n++;
        cur->next_seq++;
    }
    if (malform) { /* the batch ended before its second entry (a byte bound): after the first */
        bson_uint32_to_string(keys++, &k, keybuf, sizeof keybuf);
        write_bad_element(b, malform, k);
    }
    bw_doc_end(b, arr);
    return n;
}

/* Writes a whole cursor reply for an oplog cursor; frees the cursor when it ends (id 0). */
static void reply_oplog_batch(sim_server *srv, sim_reply *r, sim_cursor *cur, bool first, int64_t batch, bool single)
{
    int64_t max = batch;
    if (cur->limit_left >= 0 && (max <= 0 || cur->limit_left < max))
        max = cur->limit_left;
    sim_buf *b = &r->conn->out;
    reply_begin(r);
    size_t doc = bw_doc_begin(b);
    size_t cdoc = bw_sub_begin(b, BSON_TYPE_DOCUMENT, "cursor");
    int64_t n = (cur->limit_left == 0) ? 0 : write_oplog_batch(srv, b, cur, first ? "firstBatch" : "nextBatch", max);
    if (cur->limit_left == 0) {
        size_t arr = bw_sub_begin(b, BSON_TYPE_ARRAY, first ? "firstBatch" : "nextBatch");
        bw_doc_end(b, arr);
    }
    if (cur->limit_left > 0)
        cur->limit_left -= n;
    if (!first)
        srv->oplog_getmores++;
    bool done = single || cur->limit_left == 0 || (!cur->tailable && cur->next_seq >= visible_end(srv, cur)) ||
                (cur->tailable && first && oplog_count(srv->oplog) == 0);
    bw_int64(b, "id", done ? 0 : cur->id);
    bw_string(b, "ns", "local.oplog.rs");
    bw_doc_end(b, cdoc);
    bw_double(b, "ok", 1.0);
    bw_doc_end(b, doc);
    reply_end(r);
    if (!r->no_reply)
        r->conn->oplog_reply = true;
    if (done)
        cursor_free(srv, cur);
}

/* Collection cursors: one batch from the store, after the cursor's last _id. */
typedef struct {
    sim_buf *b;
    int64_t max, n;
    size_t bytes;
    size_t last_off;
    uint32_t last_len;
    bool more;
    int64_t *skip_left;         /* the cursor's skip: documents passed over before the first returned */
    const sim_projection *proj; /* when set, each document is projected, and its _id kept in last_id */
    bool has_last_id;
    bson_value_t last_id; /* the last returned document's _id before projection (a projection may drop it) */
} coll_batch;

static bool coll_batch_doc(void *ctx, const bson_t *doc)
{
    coll_batch *cb = ctx;
    if (*cb->skip_left > 0) {
        (*cb->skip_left)--;
        return true;
    }
    bson_t projected = BSON_INITIALIZER;
    const bson_t *out = doc;
    if (cb->proj) {
        projection_apply(cb->proj, doc, &projected);
        out = &projected;
    }
    if ((cb->max > 0 && cb->n >= cb->max) || (cb->n > 0 && cb->bytes + out->len > SIM_BATCH_BYTES)) {
        bson_destroy(&projected);
        cb->more = true;
        return false;
    }
    char keybuf[16];
    const char *k;
    bson_uint32_to_string((uint32_t)cb->n, &k, keybuf, sizeof keybuf);
    bw_key(cb->b, BSON_TYPE_DOCUMENT, k);
    cb->last_off = cb->b->len;
    cb->last_len = out->len;
    buf_put(cb->b, bson_get_data(out), out->len);
    cb->bytes += out->len;
    cb->n++;
    bson_iter_t id;
    if (cb->proj && bson_iter_init_find(&id, doc, "_id")) {
        if (cb->has_last_id)
            bson_value_destroy(&cb->last_id);
        bson_value_copy(bson_iter_value(&id), &cb->last_id);
        cb->has_last_id = true;
    }
    bson_destroy(&projected);
    return true;
}

/* min (first batch only, may be NULL): the find option min {_id: X}, an inclusive lower bound in full BSON order. */
static void reply_coll_batch(sim_server *srv, sim_reply *r, sim_cursor *cur, const bson_t *filter,
                             const bson_value_t *min, bool first, int64_t batch, bool single)
{
    int64_t max = batch;
    if (cur->limit_left >= 0 && (max <= 0 || cur->limit_left < max))
        max = cur->limit_left;
    sim_buf *b = &r->conn->out;
    reply_begin(r);
    size_t doc = bw_doc_begin(b);
    size_t cdoc = bw_sub_begin(b, BSON_TYPE_DOCUMENT, "cursor");
    size_t arr = bw_sub_begin(b, BSON_TYPE_ARRAY, first ? "firstBatch" : "nextBatch");
    coll_batch cb = {.b = b, .max = max, .skip_left = &cur->skip_left, .proj = cur->proj};
    const sim_store *st = read_store(srv, cur->majority);
    if (cur->limit_left != 0) {
        if (first && min != NULL) {
            /* X itself if present, then everything after it: the store continues by full BSON order. */
            bson_t eq = BSON_INITIALIZER, sub;
            BSON_APPEND_DOCUMENT_BEGIN(&eq, "_id", &sub);
            bson_append_value(&sub, "$eq", 3, min);
            bson_append_document_end(&eq, &sub);
            store_find(st, cur->db, cur->coll, &eq, coll_batch_doc, &cb);
            if (!cb.more)
                store_find_after(st, cur->db, cur->coll, filter, min, coll_batch_doc, &cb);
            bson_destroy(&eq);
        } else if (first)
            store_find(st, cur->db, cur->coll, filter, coll_batch_doc, &cb);
        else
            store_find_after(st, cur->db, cur->coll, &cur->filter, &cur->last_id, coll_batch_doc, &cb);
    }
    bw_doc_end(b, arr);
    if (cb.has_last_id) {
        /* Projected: the _id of the document before projection. */
        if (cur->has_last)
            bson_value_destroy(&cur->last_id);
        cur->last_id = cb.last_id;
        cur->has_last = true;
    } else if (cb.n > 0 && !cur->proj) {
        bson_t last;
        bson_iter_t it;
        if (bson_init_static(&last, b->data + cb.last_off, cb.last_len) && bson_iter_init_find(&it, &last, "_id")) {
            if (cur->has_last)
                bson_value_destroy(&cur->last_id);
            bson_value_copy(bson_iter_value(&it), &cur->last_id);
            cur->has_last = true;
        }
    }
    if (cur->limit_left > 0)
        cur->limit_left -= cb.n;
    bool done = single || !cb.more || cur->limit_left == 0 || !cur->has_last;
    char ns[400];
    snprintf(ns, sizeof ns, "%s.%s", cur->db, cur->coll);
    bw_int64(b, "id", done ? 0 : cur->id);
    bw_string(b, "ns", ns);
    bw_doc_end(b, cdoc);
    bw_double(b, "ok", 1.0);
    bw_doc_end(b, doc);
    reply_end(r);
    if (!r->no_reply)
        r->conn->oplog_reply = true;
    if (done)
        cursor_free(srv, cur);
}

/* ---- writes ---- */

typedef struct {
    sim_server *srv;
    bool session;
    uint8_t lsid_id[16];
    int64_t txn_number;
    int32_t stmt_id;
    const int32_t *stmt_ids; /* a time-series bucket write of several measurements: their stmtIds (n_stmt > 1) */
    size_t n_stmt;
    bool have_prev;
    uint64_t prev_ts;
    int64_t prev_t;
    bson_t **collected; /* transaction: bodies kept for applyOps instead of being logged */
    size_t ncollected, capcollected;
    bool failed;
    bson_error_t err;
} write_ctx;

static void append_lsid(bson_t *b, const uint8_t *id)
{
    bson_t l;
    BSON_APPEND_DOCUMENT_BEGIN(b, "lsid", &l);
    append_uuid(&l, "id", id);
    bson_append_binary(&l, "uid", -1, BSON_SUBTYPE_BINARY, EMPTY_USER_UID, 32);
    bson_append_document_end(b, &l);
}

static void emit_body(void *ctx, const bson_t *body)
{
    write_ctx *w = ctx;
    sim_server *srv = w->srv;
    if (w->collected) {
        if (w->ncollected == w->capcollected) {
            size_t cap = w->capcollected ? w->capcollected * 2 : 16;
            bson_t **p = realloc(w->collected, cap * sizeof *p);
            if (!p) {
                w->failed = true;
                bson_set_error(&w->err, 0, 1, "out of memory collecting transaction operations");
                return;
            }
            w->collected = p;
            w->capcollected = cap;
        }
        w->collected[w->ncollected++] = bson_copy(body);
        return;
    }
    bson_iter_t it;
    bool command = bson_iter_init_find(&it, body, "op") && BSON_ITER_HOLDS_UTF8(&it) &&
                   strcmp(bson_iter_utf8(&it, NULL), "c") == 0;
    bool ok;
    /* stmtId kUninitializedStmtId (-1: a time-series bucket compression) is no retryable-write statement: the entry
     * carries no session fields (oplog.cpp appendOplogEntryChainInfo: "Not a retryable write."). */
    if (!w->session || command || w->stmt_id == -1) {
        ok = sim_append_body(srv, body, &w->err);
    } else {
        /* A retryable write: [lsid, txnNumber,] op, ns, ui, o, [o2,] stmtId, ts, t, v, wall, prevOpTime. */
        uint64_t ts = sim_next_ts(srv);
        bson_t e = BSON_INITIALIZER;
        append_lsid(&e, w->lsid_id);
        BSON_APPEND_INT64(&e, "txnNumber", w->txn_number);
        bson_concat(&e, body);
        if (w->stmt_ids && w->n_stmt > 1) {
            /* A bucket write carries the stmtIds of all its measurements, as an array (OplogEntryBase's stmtId:
             * a number or an array; timeseries write_ops_exec: the batch's stmtIds). */
            bson_t arr;
            char key[24];
            BSON_APPEND_ARRAY_BEGIN(&e, "stmtId", &arr);
            for (size_t i = 0; i < w->n_stmt; i++) {
                snprintf(key, sizeof key, "%zu", i);
                BSON_APPEND_INT32(&arr, key, w->stmt_ids[i]);
            }
            bson_append_array_end(&e, &arr);
        } else {
            BSON_APPEND_INT32(&e, "stmtId", w->stmt_id);
        }
        BSON_APPEND_TIMESTAMP(&e, "ts", OPLOG_TS_SECS(ts), OPLOG_TS_INC(ts));
        BSON_APPEND_INT64(&e, "t", srv->term);
        BSON_APPEND_INT64(&e, "v", 2);
        BSON_APPEND_DATE_TIME(&e, "wall", sim_now_ms());
        append_optime(&e, "prevOpTime", w->have_prev ? w->prev_ts : 0, w->have_prev ? w->prev_t : -1);
        ok = sim_append_entry(srv, &e, ts, &w->err);
        bson_destroy(&e);
        if (ok) {
            w->have_prev = true;
            w->prev_ts = ts;
            w->prev_t = srv->term;
        }
    }
    if (!ok) {
        w->failed = true;
        fprintf(stderr, "mongosim: cannot append an oplog entry: %s\n", w->err.message);
    }
}

/* Session fields of a retryable write (lsid + txnNumber, without autocommit). False after replying an error. */
static bool write_ctx_init(cmd_ctx *x, write_ctx *w)
{
    memset(w, 0, sizeof *w);
    w->srv = x->srv;
    bson_iter_t it, sub;
    if (txn_current(x->srv)) {
        /* A statement of a client transaction (txn.c): its bodies are collected for the applyOps at commit. */
        w->collected = calloc(16, sizeof *w->collected);
        if (!w->collected)
            abort();
        w->capcollected = 16;
        return true;
    }
    if (!opt_int64(x->cmd, "txnNumber", &w->txn_number))
        return true;
    if (bson_iter_init_find(&it, x->cmd, "lsid") && BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &sub) &&
        bson_iter_find(&sub, "id") && BSON_ITER_HOLDS_BINARY(&sub)) {
        uint32_t len;
        const uint8_t *data;
        bson_subtype_t st;
        bson_iter_binary(&sub, &st, &len, &data);
        if (len == 16) {
            memcpy(w->lsid_id, data, 16);
            w->session = true;
        }
    }
    return true;
}

static void write_ctx_clear(write_ctx *w)
{
    if (w->collected && txn_current(w->srv)) {
        txn_take_ops(w->srv, w->collected, w->ncollected); /* the transaction owns the bodies now */
        w->ncollected = 0;
    }
    for (size_t i = 0; i < w->ncollected; i++)
        bson_destroy(w->collected[i]);
    free(w->collected);
}

static void add_write_error(bson_t *errs, uint32_t *nerr, int64_t index, const bson_error_t *err)
{
    char keybuf[16];
    const char *k;
    bson_uint32_to_string((*nerr)++, &k, keybuf, sizeof keybuf);
    bson_t e;
    bson_append_document_begin(errs, k, -1, &e);
    BSON_APPEND_INT32(&e, "index", (int32_t)index);
    BSON_APPEND_INT32(&e, "code", (int32_t)err->code);
    BSON_APPEND_UTF8(&e, "errmsg", err->message);
    bson_append_document_end(errs, &e);
}

/* Iterates an array field of the command; false (after replying) when missing or not an array of documents. */
static bool array_field(cmd_ctx *x, const char *key, bson_iter_t *arr)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, x->cmd, key) || !BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, arr)) {
        reply_error(x->r, 40414, "BSON field '%s.%s' is missing but a required field", x->name, key);
        return false;
    }
    return true;
}

static bool iter_doc(bson_iter_t *it, bson_t *doc)
{
    if (!BSON_ITER_HOLDS_DOCUMENT(it))
        return false;
    uint32_t len;
    const uint8_t *data;
    bson_iter_document(it, &len, &data);
    return bson_init_static(doc, data, len);
}

static void finish_write_reply(cmd_ctx *x, bson_t *reply, bson_t *errs, uint32_t nerr)
{
    if (nerr > 0)
        txn_statement_failed(x->srv); /* a write error aborts a client transaction, as on a server */
    if (nerr > 0)
        BSON_APPEND_ARRAY(reply, "writeErrors", errs);
    bson_destroy(errs);
    reply_ok(x->r, reply);
}

/* A write's `ordered` option (default true, as on a real server): stop at the first error or go on. */
static bool write_ordered(const cmd_ctx *x)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, x->cmd, "ordered") ? bson_iter_as_bool(&it) : true;
}

static void set_stmt(void *ctx, const int32_t *ids, size_t n)
{
    write_ctx *w = ctx;
    w->stmt_id = n ? ids[0] : -1;
    w->stmt_ids = n > 1 ? ids : NULL;
    w->n_stmt = n;
}

/* Inserts into a time-series collection: the measurements (write errors for those refused); returns how many. */
static int32_t insert_measurements(cmd_ctx *x, const char *coll, bson_iter_t *docs, bool ordered, write_ctx *w,
                                   bson_t *errs, uint32_t *nerr)
{
    size_t n = 0, placed = 0;
    /* Counted first: a bson_t made by bson_init_static points into itself and must not move (no realloc). */
    bson_iter_t count_it = *docs;
    while (bson_iter_next(&count_it))
        n++;
    bson_t *ds = malloc((n ? n : 1) * sizeof *ds);
    bool *bad = malloc((n ? n : 1) * sizeof *bad);
    if (!ds || !bad)
        abort();
    for (size_t i = 0; i < n && bson_iter_next(docs); i++) {
        bad[i] = !iter_doc(docs, &ds[i]);
        if (bad[i])
            bson_init(&ds[i]);
    }
    /* A non-document ends an ordered command there: only the documents before it are inserted. */
    size_t upto = n;
    for (size_t i = 0; i < n; i++)
        if (bad[i] && ordered) {
            upto = i;
            break;
        }
    const bson_t **ptrs = malloc((n ? n : 1) * sizeof *ptrs);
    bson_error_t *es = calloc(n ? n : 1, sizeof *es);
    size_t *map = malloc((n ? n : 1) * sizeof *map);
    if (!ptrs || !es || !map)
        abort();
    size_t k = 0;
    for (size_t i = 0; i < upto; i++)
        if (!bad[i]) {
            map[k] = i;
            ptrs[k++] = &ds[i];
        }
    store_insert_many(x->srv->store, x->db, coll, ptrs, k, ordered, emit_body, set_stmt, w, es, &placed);
    w->stmt_ids = NULL;
    w->n_stmt = 0;
    int32_t ok = 0;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        bson_error_t err;
        if (bad[i] && i <= upto) {
            bson_set_error(&err, 0, 14, "insert document %zu is not a document", i);
            add_write_error(errs, nerr, (int32_t)i, &err);
            continue;
        }
        if (j < k && map[j] == i) {
            if (j < placed && es[j].code != 0)
                add_write_error(errs, nerr, (int32_t)i, &es[j]);
            else if (j < placed)
                ok++;
            j++;
        }
    }
    for (size_t i = 0; i < n; i++)
        bson_destroy(&ds[i]);
    free(ds);
    free(bad);
    free(ptrs);
    free(es);
    free(map);
    return ok;
}

static void h_insert(cmd_ctx *x)
{
    const char *coll = coll_name(x);
    bson_iter_t docs;
    write_ctx w;
    if (!coll || !need_primary(x) || !array_field(x, "documents", &docs))
        return;
    if (txn_current(x->srv) && store_ns_kind_of(x->srv->store, x->db, coll) == STORE_NS_TIMESERIES) {
        /* write_ops_exec.cpp, the time-series insert path: not in a multi-document transaction. */
        txn_statement_failed(x->srv);
        reply_error(x->r, 263, "Cannot insert into a time-series collection in a multi-document transaction: %s.%s",
                    x->db, coll);
        return;
    }
    if (!write_ctx_init(x, &w))
        return;
    x->r->wc_ran = true;
    bool ordered = write_ordered(x);
    bson_t errs = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    uint32_t nerr = 0;
    int32_t n = 0, index = 0;
    if (store_ns_kind_of(x->srv->store, x->db, coll) == STORE_NS_TIMESERIES) {
        /* The measurements of one command go to the bucket catalog together (write_ops_exec.cpp
         * performTimeseriesWrites: one WriteBatch per bucket, committed as one write). */
        n = insert_measurements(x, coll, &docs, ordered, &w, &errs, &nerr);
        write_ctx_clear(&w);
        BSON_APPEND_INT32(&reply, "n", n);
        finish_write_reply(x, &reply, &errs, nerr);
        return;
    }
    while (bson_iter_next(&docs)) {
        bson_t doc;
        bson_error_t err;
        w.stmt_id = index;
        if (!iter_doc(&docs, &doc)) {
            bson_set_error(&err, 0, 14, "insert document %d is not a document", index);
            add_write_error(&errs, &nerr, index, &err);
        } else if (store_insert(x->srv->store, x->db, coll, &doc, emit_body, &w, &err)) {
            n++;
        } else {
            add_write_error(&errs, &nerr, index, &err);
            if (ordered) {
                index++;
                break;
            }
        }
        index++;
    }
    write_ctx_clear(&w);
    BSON_APPEND_INT32(&reply, "n", n);
    finish_write_reply(x, &reply, &errs, nerr);
}

/* The writes a server makes atomically for one time-series bucket (its modification and the new buckets of updated
 * measurements): outside a retryable write and a transaction, one applyOps (timeseries_write_util.cpp
 * performAtomicWrites: WriteUnitOfWork::kGroupForTransaction), logged as batched writes are (txn.c). */
static void group_ts(void *ctx, bool begin)
{
    write_ctx *w = ctx;
    if (w->session || txn_current(w->srv))
        return;
    if (begin) {
        w->collected = calloc(16, sizeof *w->collected);
        if (!w->collected)
            abort();
        w->capcollected = 16;
        w->ncollected = 0;
        return;
    }
    if (w->ncollected > 0 && !txn_log_grouped(w->srv, w->collected, w->ncollected, &w->err)) {
        w->failed = true;
        fprintf(stderr, "mongosim: cannot append an oplog entry: %s\n", w->err.message);
    }
    for (size_t i = 0; i < w->ncollected; i++)
        bson_destroy(w->collected[i]);
    free(w->collected);
    w->collected = NULL;
    w->ncollected = w->capcollected = 0;
}

static void h_update(cmd_ctx *x)
{
    const char *coll = coll_name(x);
    bson_iter_t ups;
    write_ctx w;
    if (!coll || !need_primary(x) || !array_field(x, "updates", &ups) || !write_ctx_init(x, &w))
        return;
    x->r->wc_ran = true;
    bool ordered = write_ordered(x);
    bson_t errs = BSON_INITIALIZER, reply = BSON_INITIALIZER, upserted = BSON_INITIALIZER;
    uint32_t nerr = 0, nups = 0;
    int64_t n = 0, modified = 0;
    int32_t index = 0;
    for (; bson_iter_next(&ups); index++) {
        bson_t spec, q, u;
        bson_error_t err;
        bool has_q, has_u;
        w.stmt_id = index;
        if (!iter_doc(&ups, &spec) || !opt_doc(&spec, "q", &q, &has_q) || !has_q || !opt_doc(&spec, "u", &u, &has_u) ||
            !has_u) {
            bson_set_error(&err, 0, 9,
                           "update statement %d needs documents q and u (pipeline updates are not "
                           "supported by mongosim)",
                           index);
            add_write_error(&errs, &nerr, index, &err);
            if (ordered)
                break;
            continue;
        }
        sim_update_result res;
        memset(&res, 0, sizeof res);
        bool ts = store_ns_kind_of(x->srv->store, x->db, coll) == STORE_NS_TIMESERIES;
        if (ts ? !store_ts_update(x->srv->store, x->db, coll, &q, &u, opt_bool(&spec, "multi"),
                                  opt_bool(&spec, "upsert"), &res, emit_body, group_ts, set_stmt, &w, &err)
               : !store_update(x->srv->store, x->db, coll, &q, &u, opt_bool(&spec, "upsert"), &res, emit_body, &w,
                               &err)) {
            add_write_error(&errs, &nerr, index, &err);
            store_update_result_clear(&res);
            if (ordered)
                break;
            continue;
        }
        n += res.matched;
        modified += res.modified;
        if (res.upserted) {
            n++;
            char keybuf[16];
            const char *k;
            bson_uint32_to_string(nups++, &k, keybuf, sizeof keybuf);
            bson_t e;
            bson_append_document_begin(&upserted, k, -1, &e);
            BSON_APPEND_INT32(&e, "index", index);
            bson_append_value(&e, "_id", -1, &res.upserted_id);
            bson_append_document_end(&upserted, &e);
        }
        store_update_result_clear(&res);
    }
    write_ctx_clear(&w);
    BSON_APPEND_INT32(&reply, "n", (int32_t)n);
    BSON_APPEND_INT32(&reply, "nModified", (int32_t)modified);
    if (nups > 0)
        BSON_APPEND_ARRAY(&reply, "upserted", &upserted);
    bson_destroy(&upserted);
    finish_write_reply(x, &reply, &errs, nerr);
}

typedef struct {
    uint32_t *sizes;
    size_t n, cap;
} size_list;

static bool collect_size(void *ctx, const bson_t *doc)
{
    size_list *l = ctx;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->sizes = realloc(l->sizes, l->cap * sizeof *l->sizes);
        if (!l->sizes)
            abort();
    }
    l->sizes[l->n++] = doc->len;
    return true;
}

/* A multi-delete (limit 0) of a whole collection outside a session: a 6.0+ server runs it through the
 * BatchedDeleteStage and logs each batch with onBatchedWriteCommit, as applyOps entries without lsid (txn.c,
 * txn_log_batched_delete). An _id query stays a plain d entry: the IDHACK plan uses the ordinary DeleteStage
 * (mongodb/mongo src/mongo/db/query/get_executor.cpp, getExecutorDelete). */
static bool batched_delete(cmd_ctx *x, const char *coll, const bson_t *q, int64_t *deleted, bson_error_t *err)
{
    size_list sizes = {0};
    store_find(x->srv->store, x->db, coll, q, collect_size, &sizes); /* store_delete removes them in _id order */
    write_ctx bw;
    memset(&bw, 0, sizeof bw);
    bw.srv = x->srv;
    bw.collected = calloc(16, sizeof *bw.collected);
    if (!bw.collected)
        abort();
    bw.capcollected = 16;
    bool ok = store_delete(x->srv->store, x->db, coll, q, 0, deleted, emit_body, &bw, err);
    if (ok && bw.ncollected > 0)
        ok = txn_log_batched_delete(x->srv, bw.collected, bw.ncollected, sizes.sizes, err);
    write_ctx_clear(&bw);
    free(sizes.sizes);
    return ok;
}

static void h_delete(cmd_ctx *x)
{
    const char *coll = coll_name(x);
    bson_iter_t dels;
    write_ctx w;
    if (!coll || !need_primary(x) || !array_field(x, "deletes", &dels) || !write_ctx_init(x, &w))
        return;
    x->r->wc_ran = true;
    bool ordered = write_ordered(x);
    bson_t errs = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    uint32_t nerr = 0;
    int64_t n = 0;
    int32_t index = 0;
    for (; bson_iter_next(&dels); index++) {
        bson_t spec, q;
        bson_error_t err;
        bool has_q;
        int64_t limit = 0, deleted = 0;
        w.stmt_id = index;
        if (!iter_doc(&dels, &spec) || !opt_doc(&spec, "q", &q, &has_q) || !has_q) {
            bson_set_error(&err, 0, 9, "delete statement %d needs a document q", index);
            add_write_error(&errs, &nerr, index, &err);
            if (ordered)
                break;
            continue;
        }
        opt_int64(&spec, "limit", &limit);
        bool ts = store_ns_kind_of(x->srv->store, x->db, coll) == STORE_NS_TIMESERIES;
        bool batched = !ts && limit == 0 && bson_empty(&q) && !w.session && !txn_current(x->srv);
        bool ok = ts        ? store_ts_delete(x->srv->store, x->db, coll, &q, (int)limit, &deleted, emit_body, &w, &err)
                  : batched ? batched_delete(x, coll, &q, &deleted, &err)
                            : store_delete(x->srv->store, x->db, coll, &q, (int)limit, &deleted, emit_body, &w, &err);
        if (!ok) {
            add_write_error(&errs, &nerr, index, &err);
            if (ordered)
                break;
            continue;
        }
        n += deleted;
    }
    write_ctx_clear(&w);
    BSON_APPEND_INT32(&reply, "n", (int32_t)n);
    finish_write_reply(x, &reply, &errs, nerr);
}

/* Runs a DDL store call's result: error reply or ok. */
static void ddl_reply(cmd_ctx *x, bool ok, write_ctx *w, bson_error_t *err, bson_t *reply)
{
    write_ctx_clear(w);
    if (!ok) {
        bson_destroy(reply);
        reply_error(x->r, (int)err->code, "%s", err->message);
        return;
    }
    reply_ok(x->r, reply);
}

static void h_create(cmd_ctx *x)
{
    const char *coll = coll_name(x);
    write_ctx w;
    if (!coll || !need_primary(x) || !write_ctx_init(x, &w))
        return;
    x->r->wc_ran = true;
    bson_error_t err;
    bool ok = store_create_cmd(x->srv->store, x->db, coll, x->cmd, emit_body, &w, &err);
    bson_t reply = BSON_INITIALIZER;
    ddl_reply(x, ok, &w, &err, &reply);
}

/* collMod, with the one option mongosim models: changeStreamPreAndPostImages {enabled} (coll_mod.cpp; the option
 * parsed as create parses it, ddl.c). Reply {ok: 1} (7.0 adds nothing for this option). */
static void h_collmod(cmd_ctx *x)
{
    const char *coll = coll_name(x);
    write_ctx w;
    if (!coll || !need_primary(x))
        return;
    bson_iter_t it;
    bool enabled = false, have = false;
    bson_error_t err;
    bson_iter_init(&it, x->cmd);
    bson_iter_next(&it);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (k[0] == '$' || !strcmp(k, "lsid") || !strcmp(k, "txnNumber") || !strcmp(k, "writeConcern") ||
            !strcmp(k, "comment"))
            continue;
        if (strcmp(k, "changeStreamPreAndPostImages") != 0) {
            reply_error(x->r, 2, "mongosim's collMod supports only changeStreamPreAndPostImages, not '%s'", k);
            return;
        }
        if (!ddl_images_option(&it, &enabled, &err)) {
            reply_error(x->r, (int)err.code, "%s", err.message);
            return;
        }
        have = true;
    }
    if (!have) {
        reply_error(x->r, 2, "mongosim's collMod needs changeStreamPreAndPostImages");
        return;
    }
    if (!write_ctx_init(x, &w))
        return;
    x->r->wc_ran = true;
    bool ok = store_coll_mod_images(x->srv->store, x->db, coll, enabled, emit_body, &w, &err);
    bson_t reply = BSON_INITIALIZER;
    ddl_reply(x, ok, &w, &err, &reply);
}

static void h_modify_change_streams(cmd_ctx *x)
{
    flavor_cmd_modify_change_streams(x->srv, x->r, x->cmd, x->db);
}

static void h_drop(cmd_ctx *x)
{
    const char *coll = coll_name(x);
    write_ctx w;
    if (!coll || !need_primary(x) || !write_ctx_init(x, &w))
        return;
    x->r->wc_ran = true;
    bson_error_t err;
    bool existed = false;
    bool ok = store_drop(x->srv->store, x->db, coll, &existed, emit_body, &w, &err);
    if (ok && !existed) {
        write_ctx_clear(&w);
        reply_error(x->r, 26, "ns not found");
        return;
    }
    bson_t reply = BSON_INITIALIZER;
    char ns[400];
    snprintf(ns, sizeof ns, "%s.%s", x->db, coll);
    BSON_APPEND_INT32(&reply, "nIndexesWas", 1);
    BSON_APPEND_UTF8(&reply, "ns", ns);
    ddl_reply(x, ok, &w, &err, &reply);
}

static bool split_ns(const char *ns, char *db, size_t dbsz, const char **coll)
{
    const char *dot = strchr(ns, '.');
    if (!dot || dot == ns || !dot[1] || (size_t)(dot - ns) >= dbsz)
        return false;
    memcpy(db, ns, (size_t)(dot - ns));
    db[dot - ns] = '\0';
    *coll = dot + 1;
    return true;
}

static void h_rename(cmd_ctx *x)
{
    if (strcmp(x->db, "admin") != 0) {
        reply_error(x->r, 13, "renameCollection may only be run against the admin database.");
        return;
    }
    bson_iter_t it;
    char from_db[128], to_db[128];
    const char *from_coll, *to_coll;
    if (!BSON_ITER_HOLDS_UTF8(&x->first) ||
        !split_ns(bson_iter_utf8(&x->first, NULL), from_db, sizeof from_db, &from_coll) ||
        !bson_iter_init_find(&it, x->cmd, "to") || !BSON_ITER_HOLDS_UTF8(&it) ||
        !split_ns(bson_iter_utf8(&it, NULL), to_db, sizeof to_db, &to_coll)) {
        reply_error(x->r, 73, "renameCollection needs 'db.coll' strings in renameCollection and to");
        return;
    }
    write_ctx w;
    if (!need_primary(x) || !write_ctx_init(x, &w))
        return;
    x->r->wc_ran = true;
    bson_error_t err;
    bool ok = store_rename(x->srv->store, from_db, from_coll, to_db, to_coll, opt_bool(x->cmd, "dropTarget"), emit_body,
                           &w, &err);
    bson_t reply = BSON_INITIALIZER;
    ddl_reply(x, ok, &w, &err, &reply);
}

static void h_drop_database(cmd_ctx *x)
{
    write_ctx w;
    if (!need_primary(x) || !write_ctx_init(x, &w))
        return;
    x->r->wc_ran = true;
    bson_error_t err;
    bool ok = store_drop_database(x->srv->store, x->db, emit_body, &w, &err);
    bson_t reply = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&reply, "dropped", x->db);
    ddl_reply(x, ok, &w, &err, &reply);
}

/* ---- reads ---- */

/* Reads of a view or a time-series collection: mongosim does not run view pipelines (nor unpack buckets), so it
 * refuses them rather than answer as if the namespace were empty. False after replying. */
static bool refuse_view_read(cmd_ctx *x, const char *coll)
{
    store_ns_kind k = store_ns_kind_of(x->srv->store, x->db, coll);
    if (k == STORE_NS_VIEW) {
        reply_error(x->r, 2, "mongosim does not read views: %s.%s is a view (read the collection it is defined on)",
                    x->db, coll);
        return false;
    }
    uint8_t uuid[16];
    if (k == STORE_NS_TIMESERIES && store_collection_uuid(x->srv->store, x->db, coll, uuid)) {
        reply_error(x->r, 2,
                    "mongosim does not read time-series collections: %s.%s is a viewless one, whose buckets a read "
                    "with rawData: true returns",
                    x->db, coll);
        return false;
    }
    if (k == STORE_NS_TIMESERIES) {
        reply_error(x->r, 2,
                    "mongosim does not read time-series collections: read %s.system.buckets.%s, which holds its "
                    "buckets",
                    x->db, coll);
        return false;
    }
    return true;
}

/* rawData: true on find, count and aggregate (featureFlagRawDataCrudOperations, FCV 8.2 and later): the reads of a
 * time-series collection see its buckets, not its measurements; on a viewless one they read the collection itself,
 * on one with a view its system.buckets.NAME; on any other namespace the option changes nothing
 * (jstests/libs/raw_operation_utils.js: "getTimeseriesCollForRawOps acts as a no-op and simply returns the original
 * coll"; jstests/core/timeseries/ddl/timeseries_list_collections_rawdata.js). mongosim takes it only with
 * --timeseries-viewless, which stands for such a server; without it, as a server before 8.2, the field is unknown to
 * the command's strict IDL parser: 40415 "BSON field '<command>.rawData' is an unknown field.". *coll is pointed at
 * the namespace to read (buf when it is the buckets collection). False after replying. */
static bool raw_data_target(cmd_ctx *x, const char *command, const char **coll, char *buf, size_t len, bool *raw)
{
    bson_iter_t it;
    *raw = false;
    if (!bson_iter_init_find(&it, x->cmd, "rawData"))
        return true;
    if (!store_ts_viewless(x->srv->store)) {
        reply_error(x->r, 40415, "BSON field '%s.rawData' is an unknown field.", command);
        return false;
    }
    if (!bson_iter_as_bool(&it) || store_ns_kind_of(x->srv->store, x->db, *coll) != STORE_NS_TIMESERIES)
        return true;
    uint8_t uuid[16];
    *raw = true;
    if (store_collection_uuid(x->srv->store, x->db, *coll, uuid))
        return true; /* viewless: the collection holds the buckets */
    snprintf(buf, len, "system.buckets.%s", *coll);
    *coll = buf;
    return true;
}

/* Collection filters mongosim supports: {} or {_id: ...} (the store handles the _id operators). */
static bool check_coll_filter(cmd_ctx *x, const bson_t *filter)
{
    bson_iter_t it;
    bson_iter_init(&it, filter);
    while (bson_iter_next(&it)) {
        if (strcmp(bson_iter_key(&it), "_id") != 0) {
            reply_error(x->r, 2, "mongosim supports only filters on _id (got a filter on '%s')", bson_iter_key(&it));
            return false;
        }
    }
    return true;
}

static bool check_sort(cmd_ctx *x, const char *allowed)
{
    bson_t sort;
    bool present;
    if (!opt_doc(x->cmd, "sort", &sort, &present)) {
        reply_error(x->r, 14, "sort must be a document");
        return false;
    }
    bson_iter_t it;
    bson_iter_init(&it, &sort);
    while (bson_iter_next(&it)) {
        bool key_ok = strcmp(bson_iter_key(&it), allowed) == 0 || strcmp(bson_iter_key(&it), "$natural") == 0;
        if (!key_ok || !BSON_ITER_HOLDS_NUMBER(&it) || bson_iter_as_int64(&it) != 1) {
            reply_error(x->r, 2, "mongosim supports only sort {%s: 1} here", allowed);
            return false;
        }
    }
    return true;
}

/* True in *reverse when the sort is exactly {$natural: -1}. */
static bool oplog_reverse_sort(cmd_ctx *x, bool *reverse)
{
    bson_t sort;
    bool present;
    *reverse = false;
    if (!opt_doc(x->cmd, "sort", &sort, &present)) {
        reply_error(x->r, 14, "sort must be a document");
        return false;
    }
    bson_iter_t it;
    if (present && bson_iter_init(&it, &sort) && bson_iter_next(&it) && strcmp(bson_iter_key(&it), "$natural") == 0 &&
        BSON_ITER_HOLDS_NUMBER(&it) && bson_iter_as_int64(&it) == -1 && !bson_iter_next(&it))
        *reverse = true;
    return true;
}

/* The find's projection, parsed (projection.c); NULL when there is none. False after replying with the server's
 * error for an invalid projection, or 2 BadValue for one mongosim does not execute. */
static bool find_projection(cmd_ctx *x, sim_projection **out)
{
    bson_iter_t it;
    *out = NULL;
    if (!bson_iter_init_find(&it, x->cmd, "projection"))
        return true;
    if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
        /* The IDL's type error (FindCommandRequest, find_command.idl: projection is an object). */
        reply_error(x->r, 14,
                    "BSON field 'FindCommandRequest.projection' is the wrong type '%s', expected type 'object'",
                    sim_type_name(bson_iter_type(&it)));
        return false;
    }
    bson_t spec;
    uint32_t len;
    const uint8_t *data;
    bson_iter_document(&it, &len, &data);
    sim_proj_error err;
    if (!bson_init_static(&spec, data, len) || !projection_parse(&spec, out, &err)) {
        reply_error(x->r, err.code, "%s", err.message);
        return false;
    }
    return true;
}

/* skip (find_command.idl: a safeInt64 with validator {gte: 0}, whose failure is the IDL's error 51024). The server
 * passes over that many matching documents before the first it returns; limit counts after them. */
static bool find_skip(cmd_ctx *x, int64_t *skip)
{
    bson_iter_t it;
    *skip = 0;
    if (!bson_iter_init_find(&it, x->cmd, "skip"))
        return true;
    if (!BSON_ITER_HOLDS_NUMBER(&it)) {
        reply_error(x->r, 14,
                    "BSON field 'FindCommandRequest.skip' is the wrong type '%s', expected types '[long, int, decimal, "
                    "double]'",
                    sim_type_name(bson_iter_type(&it)));
        return false;
    }
    *skip = bson_iter_as_int64(&it);
    if (*skip < 0) {
        reply_error(x->r, 51024, "BSON field 'skip' value must be >= 0, actual value '%" PRId64 "'", *skip);
        return false;
    }
    return true;
}

static bool find_options(cmd_ctx *x, int64_t *batch, int64_t *limit, bool *single, int64_t *skip)
{
    sim_projection *proj;
    if (!find_projection(x, &proj) || !find_skip(x, skip))
        return false;
    projection_free(proj); /* checked here; the cursor parses it again when it is created */
    *batch = 101;
    *limit = -1;
    if (opt_int64(x->cmd, "batchSize", batch) && *batch < 0) {
        reply_error(x->r, 2, "BatchSize value must be non-negative, but received: %" PRId64, *batch);
        return false;
    }
    int64_t l;
    *single = opt_bool(x->cmd, "singleBatch");
    if (opt_int64(x->cmd, "limit", &l) && l != 0) {
        if (l < 0) {
            *single = true;
            l = -l;
        }
        *limit = l;
    }
    if (opt_bool(x->cmd, "awaitData") && !opt_bool(x->cmd, "tailable")) {
        reply_error(x->r, 9, "Cannot set 'awaitData' without also setting 'tailable'");
        return false;
    }
    return true;
}

/* local.oplog.rs filters: {} or {ts: {$gte|$gt: Timestamp}}; the start seq goes to *start. */
static bool oplog_filter_start(cmd_ctx *x, const bson_t *filter, uint64_t *start)
{
    *start = oplog_first_seq(x->srv->oplog);
    bson_iter_t it, op;
    bson_iter_init(&it, filter);
    int keys = 0;
    while (bson_iter_next(&it))
        keys++;
    if (keys == 0)
        return true;
    if (keys == 1 && bson_iter_init_find(&it, filter, "ts") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &op) && bson_iter_next(&op) && BSON_ITER_HOLDS_TIMESTAMP(&op)) {
        const char *k = bson_iter_key(&op);
        bool gte = strcmp(k, "$gte") == 0, gt = strcmp(k, "$gt") == 0;
        uint32_t secs, inc;
        bson_iter_timestamp(&op, &secs, &inc);
        if ((gte || gt) && !bson_iter_next(&op)) {
            *start = oplog_seek(x->srv->oplog, OPLOG_TS(secs, inc), gte);
            return true;
        }
    }
    char *json = bson_as_relaxed_extended_json(filter, NULL);
    reply_error(x->r, 2,
                "mongosim supports only {} or {ts: {$gte: Timestamp}} / {ts: {$gt: Timestamp}} filters on "
                "local.oplog.rs, not %s",
                json ? json : "?");
    bson_free(json);
    return false;
}

/* {ts: {$lt: T}} or {ts: {$lte: T}}: *end becomes the first seq past the entries that match. */
static bool oplog_filter_before(const bson_t *filter, sim_oplog *log, uint64_t *end)
{
    bson_iter_t it, op;
    if (!bson_iter_init(&it, filter) || !bson_iter_next(&it) || strcmp(bson_iter_key(&it), "ts") != 0 ||
        !BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &op) || !bson_iter_next(&op) ||
        !BSON_ITER_HOLDS_TIMESTAMP(&op))
        return false;
    bool lt = strcmp(bson_iter_key(&op), "$lt") == 0, lte = strcmp(bson_iter_key(&op), "$lte") == 0;
    uint32_t secs, inc;
    bson_iter_timestamp(&op, &secs, &inc);
    if ((!lt && !lte) || bson_iter_next(&op) || bson_iter_next(&it))
        return false;
    *end = oplog_seek(log, OPLOG_TS(secs, inc), lt);
    return true;
}

static void h_find(cmd_ctx *x)
{
    const char *coll = coll_name(x);
    if (!coll)
        return;
    bson_t filter;
    bool present;
    if (!opt_doc(x->cmd, "filter", &filter, &present)) {
        reply_error(x->r, 14, "BSON field 'FindCommandRequest.filter' is the wrong type, expected type 'object'");
        return;
    }
    int64_t batch, limit, skip;
    bool single;
    if (!find_options(x, &batch, &limit, &single, &skip))
        return;
    bool is_oplog = strcmp(x->db, "local") == 0 && strcmp(coll, "oplog.rs") == 0;
    if (is_oplog && !flavor_oplog_find(x->srv, x->r, &filter))
        return;
    if (is_oplog) {
        uint64_t start;
        bool reverse = false;
        if (!oplog_reverse_sort(x, &reverse) || (!reverse && !check_sort(x, "ts")) ||
            (!reverse && !oplog_filter_start(x, &filter, &start)))
            return;
        if (reverse) {
            /* {$natural: -1} with limit 1: the newest entry (how clients find the oplog's end), or with
             * {ts: {$lt|$lte: T}} the newest entry before T (a real server scans backwards from the end). */
            uint64_t end = oplog_end_seq(x->srv->oplog);
            if (limit != 1 || skip != 0 || opt_bool(x->cmd, "tailable") ||
                (!bson_empty(&filter) && !oplog_filter_before(&filter, x->srv->oplog, &end))) {
                reply_error(
                    x->r, 2,
                    "mongosim supports sort {$natural: -1} on the oplog only with limit 1, no skip, and a filter "
                    "{} or {ts: {$lt|$lte: Timestamp}}");
                return;
            }
            start = end > oplog_first_seq(x->srv->oplog) ? end - 1 : oplog_end_seq(x->srv->oplog);
        }
        sim_cursor *cur = cursor_new(x->srv);
        cur->oplog = true;
        cur->tailable = opt_bool(x->cmd, "tailable");
        cur->await_data = opt_bool(x->cmd, "awaitData");
        cur->majority = wants_majority(x->cmd);
        if (reverse && cur->majority && start < oplog_end_seq(x->srv->oplog) && start >= visible_end(x->srv, cur)) {
            /* {$natural: -1} in the majority snapshot: the newest entry the commit point covers. */
            uint64_t vis = visible_end(x->srv, cur);
            start = vis > oplog_first_seq(x->srv->oplog) ? vis - 1 : oplog_end_seq(x->srv->oplog);
        }
        cur->next_seq = start;
        cur->limit_left = limit;
        cur->skip_left = skip;
        find_projection(x, &cur->proj);
        snprintf(cur->db, sizeof cur->db, "local");
        snprintf(cur->coll, sizeof cur->coll, "oplog.rs");
        reply_oplog_batch(x->srv, x->r, cur, true, batch, single);
        return;
    }
    char raw_buf[300];
    bool raw;
    if (!raw_data_target(x, "find", &coll, raw_buf, sizeof raw_buf, &raw) || (!raw && !refuse_view_read(x, coll)))
        return;
    if (opt_bool(x->cmd, "tailable")) {
        reply_error(x->r, 2, "error processing query: tailable cursor requested on non capped collection");
        return;
    }
    if (!check_sort(x, "_id") || !check_coll_filter(x, &filter))
        return;
    /* min {_id: X} with hint {_id: 1}: start at X inclusive in full BSON order (how a resumable scan continues
     * across _id types). As on a real server, min without a hint is BadValue. */
    bson_t min_doc, hint;
    bool have_min, have_hint;
    bson_iter_t min_it;
    if (!opt_doc(x->cmd, "min", &min_doc, &have_min) || !opt_doc(x->cmd, "hint", &hint, &have_hint)) {
        reply_error(x->r, 14, "min and hint must be documents in mongosim");
        return;
    }
    const bson_value_t *min = NULL;
    if (have_min) {
        bson_iter_t hi;
        if (!have_hint) {
            reply_error(x->r, 2, "When using min()/max() a hint of which index to use must be provided");
            return;
        }
        if (!bson_iter_init(&hi, &hint) || !bson_iter_next(&hi) || strcmp(bson_iter_key(&hi), "_id") != 0 ||
            !BSON_ITER_HOLDS_NUMBER(&hi) || bson_iter_as_int64(&hi) != 1 || bson_iter_next(&hi)) {
            reply_error(x->r, 2, "mongosim supports min only with hint {_id: 1}");
            return;
        }
        if (!bson_iter_init(&min_it, &min_doc) || !bson_iter_next(&min_it) ||
            strcmp(bson_iter_key(&min_it), "_id") != 0 || bson_iter_next(&min_it) || !bson_empty(&filter)) {
            reply_error(x->r, 2, "mongosim supports only min {_id: X}, with an empty filter");
            return;
        }
        bson_iter_init_find(&min_it, &min_doc, "_id");
        min = bson_iter_value(&min_it);
    }
    sim_cursor *cur = cursor_new(x->srv);
    cur->limit_left = limit;
    cur->skip_left = skip;
    find_projection(x, &cur->proj);
    cur->majority = wants_majority(x->cmd);
    snprintf(cur->db, sizeof cur->db, "%s", x->db);
    snprintf(cur->coll, sizeof cur->coll, "%s", coll);
    bson_destroy(&cur->filter);
    bson_copy_to(&filter, &cur->filter);
    cur->has_uuid = store_collection_uuid(x->srv->store, x->db, coll, cur->uuid);
    reply_coll_batch(x->srv, x->r, cur, &filter, min, true, batch, single);
}

static void h_get_more(cmd_ctx *x)
{
    if (!BSON_ITER_HOLDS_INT64(&x->first) && !BSON_ITER_HOLDS_INT32(&x->first)) {
        reply_error(x->r, 14, "getMore id must be an int64");
        return;
    }
    int64_t id = bson_iter_as_int64(&x->first);
    if (cs_owns_cursor(x->srv, id)) {
        cs_cmd_get_more(x->srv, x->r, x->cmd, id);
        return;
    }
    int64_t batch = 0, max_time = 1000;
    opt_int64(x->cmd, "batchSize", &batch);
    opt_int64(x->cmd, "maxTimeMS", &max_time);
    sim_cursor *cur = cursor_find(x->srv, id);
    if (!cur) {
        reply_error(x->r, 43, "cursor id %" PRId64 " not found", id);
        return;
    }
    if (!cur->oplog) {
        /* A drop or a rename of the collection kills its cursors: the next getMore fails with QueryPlanKilled (175)
         * and the cursor is gone (jstests/core/getmore_invalidated_cursors.js; the server's CursorManager kills a
         * collection's cursors when the collection is dropped or renamed). A collection of the same name made since
         * is another collection: its UUID differs. */
        uint8_t now[16];
        if (cur->has_uuid && (!store_collection_uuid(x->srv->store, cur->db, cur->coll, now) ||
                              memcmp(now, cur->uuid, sizeof now) != 0)) {
            cursor_free(x->srv, cur);
            reply_error(x->r, 175, "collection dropped or renamed: the cursor was killed");
            return;
        }
        reply_coll_batch(x->srv, x->r, cur, NULL, NULL, false, batch, false);
        return;
    }
    if (x->srv->stepped_down) {
        cursor_free(x->srv, cur);
        reply_error(x->r, 11602, "operation was interrupted because the node stepped down");
        return;
    }
    if (cursor_lost(x->srv, cur)) {
        cursor_free(x->srv, cur);
        reply_error(x->r, 136, "CollectionScan died due to position in capped collection being deleted");
        return;
    }
    if (cur->tailable && cur->await_data && cur->next_seq >= visible_end(x->srv, cur) && max_time > 0 &&
        !x->r->no_reply) {
        sim_conn *c = x->r->conn;
        x->r->parked = true;
        c->park_kind = SIM_PARK_GETMORE;
        c->park_cursor = id;
        c->park_batch = batch;
        sim_conn_park(c, (double)max_time / 1000.0);
        return;
    }
    reply_oplog_batch(x->srv, x->r, cur, false, batch, false);
}

bool cmd_parked_try(sim_server *srv, sim_conn *c, bool timeout)
{
    if (srv->is_router)
        return cl_stream_parked_try(srv->cluster, c, timeout); /* the router parks only change-stream getMores */
    if (c->park_kind == SIM_PARK_WRITE)
        return wc_parked_try(srv, c, timeout);
    if (c->park_kind == SIM_PARK_CHANGESTREAM)
        return cs_parked_try(srv, c, timeout);
    sim_reply r = {.conn = c, .request_id = c->park_request, .opcode = SIM_OP_MSG};
    sim_cursor *cur = cursor_find(srv, c->park_cursor);
    if (!cur) {
        reply_error(&r, 237, "cursor id %" PRId64 " was killed", c->park_cursor);
        return true;
    }
    if (srv->stepped_down) {
        cursor_free(srv, cur);
        reply_error(&r, 11602, "operation was interrupted because the node stepped down");
        return true;
    }
    if (cursor_lost(srv, cur)) {
        cursor_free(srv, cur);
        reply_error(&r, 136, "CollectionScan died due to position in capped collection being deleted");
        return true;
    }
    if (!timeout && cur->next_seq >= visible_end(srv, cur))
        return false;
    reply_oplog_batch(srv, &r, cur, false, c->park_batch, false);
    return true;
}

/* Answer every parked request now (the node stepped down or rolled back...), or only the getMore on one cursor (it
 * was killed). */
static void wake_all_parked(sim_server *srv, int64_t only_cursor)
{
    for (sim_conn *c = srv->conns; c; c = c->next) {
        if (!c->parked ||
            (only_cursor != 0 && ((c->park_kind != SIM_PARK_GETMORE && c->park_kind != SIM_PARK_CHANGESTREAM) ||
                                  c->park_cursor != only_cursor)))
            continue;
        if (cmd_parked_try(srv, c, true))
            sim_conn_unpark(c);
    }
}

void cmd_fail_parked(sim_server *srv, int code, const char *msg)
{
    (void)code;
    (void)msg;
    wake_all_parked(srv, 0); /* srv->stepped_down is set, so each answers 11602 */
}

static void h_kill_cursors(cmd_ctx *x)
{
    bson_iter_t ids;
    if (!array_field(x, "cursors", &ids))
        return;
    bson_t reply = BSON_INITIALIZER, killed, notfound, empty;
    uint32_t nk = 0, nn = 0;
    BSON_APPEND_ARRAY_BEGIN(&reply, "cursorsKilled", &killed);
    bson_t nf = BSON_INITIALIZER;
    while (bson_iter_next(&ids)) {
        if (!BSON_ITER_HOLDS_NUMBER(&ids))
            continue;
        int64_t id = bson_iter_as_int64(&ids);
        char keybuf[16];
        const char *k;
        sim_cursor *cur = cursor_find(x->srv, id);
        bool stream = !cur && cs_kill(x->srv, id);
        if (stream) {
            wake_all_parked(x->srv, id);
            bson_uint32_to_string(nk++, &k, keybuf, sizeof keybuf);
            BSON_APPEND_INT64(&killed, k, id);
        } else if (cur) {
            cursor_free(x->srv, cur);
            wake_all_parked(x->srv, id);
            bson_uint32_to_string(nk++, &k, keybuf, sizeof keybuf);
            BSON_APPEND_INT64(&killed, k, id);
        } else {
            bson_uint32_to_string(nn++, &k, keybuf, sizeof keybuf);
            BSON_APPEND_INT64(&nf, k, id);
        }
    }
    bson_append_array_end(&reply, &killed);
    BSON_APPEND_ARRAY_BEGIN(&reply, "cursorsNotFound", &notfound);
    bson_concat(&notfound, &nf);
    bson_append_array_end(&reply, &notfound);
    bson_destroy(&nf);
    BSON_APPEND_ARRAY_BEGIN(&reply, "cursorsAlive", &empty);
    bson_append_array_end(&reply, &empty);
    BSON_APPEND_ARRAY_BEGIN(&reply, "cursorsUnknown", &empty);
    bson_append_array_end(&reply, &empty);
    reply_ok(x->r, &reply);
}

typedef struct {
    int64_t n;
} count_ctx;

static bool count_doc(void *ctx, const bson_t *doc)
{
    ((count_ctx *)ctx)->n++;
    return true;
}

static int64_t count_matching(sim_server *srv, const char *db, const char *coll, const bson_t *filter)
{
    if (bson_empty(filter))
        return store_count(srv->store, db, coll);
    count_ctx cc = {0};
    store_find(srv->store, db, coll, filter, count_doc, &cc);
    return cc.n;
}

static void h_count(cmd_ctx *x)
{
    const char *coll = coll_name(x);
    if (!coll)
        return;
    bson_t query;
    bool present;
    char raw_buf[300];
    bool raw;
    if (!opt_doc(x->cmd, "query", &query, &present) || !check_coll_filter(x, &query) ||
        !raw_data_target(x, "count", &coll, raw_buf, sizeof raw_buf, &raw) || (!raw && !refuse_view_read(x, coll)))
        return;
    int64_t n = strcmp(x->db, "local") == 0 && strcmp(coll, "oplog.rs") == 0
                    ? (int64_t)oplog_count(x->srv->oplog)
                    : count_matching(x->srv, x->db, coll, &query);
    bson_t reply = BSON_INITIALIZER;
    if (n <= INT32_MAX)
        BSON_APPEND_INT32(&reply, "n", (int32_t)n);
    else
        BSON_APPEND_INT64(&reply, "n", n);
    reply_ok(x->r, &reply);
}

/* aggregate: [{$match: F}?, {$count: name} | {$group: {_id: X, field: {$sum: 1}}}] only. */
static void h_aggregate(cmd_ctx *x)
{
    if (cs_is_change_stream(x->cmd)) {
        cs_cmd_aggregate(x->srv, x->r, x->cmd, x->db);
        return;
    }
    const char *coll = coll_name(x);
    bson_iter_t stages;
    char raw_buf[300];
    bool raw;
    if (!coll || !array_field(x, "pipeline", &stages) ||
        !raw_data_target(x, "aggregate", &coll, raw_buf, sizeof raw_buf, &raw) || (!raw && !refuse_view_read(x, coll)))
        return;
    bson_t match = BSON_INITIALIZER, out = BSON_INITIALIZER;
    bool have_out = false, bad = false;
    int i = 0;
    const char *count_name = NULL;
    bson_iter_t group_id;
    const char *group_field = NULL;
    while (bson_iter_next(&stages) && !bad) {
        bson_t stage;
        bson_iter_t it;
        if (!iter_doc(&stages, &stage) || !bson_iter_init(&it, &stage) || !bson_iter_next(&it)) {
            bad = true;
            break;
        }
        const char *op = bson_iter_key(&it);
        if (i == 0 && strcmp(op, "$match") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_t m;
            iter_doc(&it, &m);
            bson_destroy(&match);
            bson_copy_to(&m, &match);
        } else if (!count_name && !group_field && strcmp(op, "$count") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            count_name = bson_iter_utf8(&it, NULL);
        } else if (!count_name && !group_field && strcmp(op, "$group") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_t g, sum;
            bson_iter_recurse(&it, &g);
            if (!bson_iter_next(&g) || strcmp(bson_iter_key(&g), "_id") != 0) {
                bad = true;
                break;
            }
            group_id = g;
            if (!bson_iter_next(&g) || !BSON_ITER_HOLDS_DOCUMENT(&g) || !bson_iter_recurse(&g, &sum) ||
                !bson_iter_find(&sum, "$sum") || !BSON_ITER_HOLDS_NUMBER(&sum) || bson_iter_as_int64(&sum) != 1) {
                bad = true;
                break;
            }
            group_field = bson_iter_key(&g);
            if (bson_iter_next(&g))
                bad = true;
        } else {
            bad = true;
        }
        i++;
    }
    if (bad || (!count_name && !group_field)) {
        bson_destroy(&match);
        bson_destroy(&out);
        reply_error(x->r, 2,
                    "mongosim's aggregate supports only [{$match}?, {$count: name} | {$group: {_id: X, n: {$sum: "
                    "1}}}]");
        return;
    }
    if (!check_coll_filter(x, &match)) {
        bson_destroy(&match);
        bson_destroy(&out);
        return;
    }
    int64_t n = count_matching(x->srv, x->db, coll, &match);
    if (n > 0) {
        have_out = true;
        if (count_name) {
            BSON_APPEND_INT32(&out, count_name, (int32_t)n);
        } else {
            bson_append_iter(&out, "_id", -1, &group_id);
            BSON_APPEND_INT32(&out, group_field, (int32_t)n);
        }
    }
    char ns[400];
    snprintf(ns, sizeof ns, "%s.%s", x->db, coll);
    bson_t reply = BSON_INITIALIZER, cur, batch;
    BSON_APPEND_DOCUMENT_BEGIN(&reply, "cursor", &cur);
    BSON_APPEND_ARRAY_BEGIN(&cur, "firstBatch", &batch);
    if (have_out)
        BSON_APPEND_DOCUMENT(&batch, "0", &out);
    bson_append_array_end(&cur, &batch);
    BSON_APPEND_INT64(&cur, "id", 0);
    BSON_APPEND_UTF8(&cur, "ns", ns);
    bson_append_document_end(&reply, &cur);
    bson_destroy(&match);
    bson_destroy(&out);
    reply_ok(x->r, &reply);
}

/* ---- catalog ---- */

typedef struct {
    char **names;
    size_t n, cap;
} name_list;

static void collect_name(void *ctx, const char *name, const uint8_t *uuid)
{
    name_list *l = ctx;
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->names[i], name) == 0)
            return;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        char **p = realloc(l->names, l->cap * sizeof *p);
        if (!p)
            abort();
        l->names = p;
    }
    l->names[l->n++] = bson_strdup(name);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void h_list_databases(cmd_ctx *x)
{
    name_list l = {0};
    store_list_databases(x->srv->store, collect_name, &l);
    collect_name(&l, "local", NULL);
    qsort(l.names, l.n, sizeof *l.names, cmp_str);
    bool name_only = opt_bool(x->cmd, "nameOnly");
    bson_t reply = BSON_INITIALIZER, arr;
    BSON_APPEND_ARRAY_BEGIN(&reply, "databases", &arr);
    for (size_t i = 0; i < l.n; i++) {
        char keybuf[16];
        const char *k;
        bson_uint32_to_string((uint32_t)i, &k, keybuf, sizeof keybuf);
        bson_t d;
        bson_append_document_begin(&arr, k, -1, &d);
        BSON_APPEND_UTF8(&d, "name", l.names[i]);
        if (!name_only) {
            BSON_APPEND_INT64(&d, "sizeOnDisk", 4096);
            BSON_APPEND_BOOL(&d, "empty", false);
        }
        bson_append_document_end(&arr, &d);
        bson_free(l.names[i]);
    }
    free(l.names);
    bson_append_array_end(&reply, &arr);
    if (!name_only) {
        BSON_APPEND_INT64(&reply, "totalSize", (int64_t)(4096 * l.n));
        BSON_APPEND_INT64(&reply, "totalSizeMb", 0);
    }
    reply_ok(x->r, &reply);
}

typedef struct {
    bson_t *batch;
    uint32_t n;
    const char *only_name;
    const char *only_type;
    bool name_only;
} list_coll_ctx;

/* One listCollections entry: {name, type, options, info: {readOnly, uuid?}, idIndex?}; a view or a time-series
 * collection has no uuid and no idIndex, nor has a clustered collection an idIndex (commands/list_collections.cpp). */
static void list_coll_one(void *ctx, const store_ns_info *ns)
{
    list_coll_ctx *lc = ctx;
    if ((lc->only_name && strcmp(lc->only_name, ns->name) != 0) ||
        (lc->only_type && strcmp(lc->only_type, ns->type) != 0))
        return;
    char keybuf[16];
    const char *k;
    bson_uint32_to_string(lc->n++, &k, keybuf, sizeof keybuf);
    bson_t d, sub;
    bson_append_document_begin(lc->batch, k, -1, &d);
    BSON_APPEND_UTF8(&d, "name", ns->name);
    BSON_APPEND_UTF8(&d, "type", ns->type);
    if (!lc->name_only) {
        BSON_APPEND_DOCUMENT(&d, "options", ns->options);
        BSON_APPEND_DOCUMENT_BEGIN(&d, "info", &sub);
        BSON_APPEND_BOOL(&sub, "readOnly", ns->read_only);
        if (ns->uuid)
            append_uuid(&sub, "uuid", ns->uuid);
        bson_append_document_end(&d, &sub);
        if (ns->id_index) {
            bson_t key;
            BSON_APPEND_DOCUMENT_BEGIN(&d, "idIndex", &sub);
            BSON_APPEND_INT32(&sub, "v", 2);
            BSON_APPEND_DOCUMENT_BEGIN(&sub, "key", &key);
            BSON_APPEND_INT32(&key, "_id", 1);
            bson_append_document_end(&sub, &key);
            BSON_APPEND_UTF8(&sub, "name", "_id_");
            bson_append_document_end(&d, &sub);
        }
    }
    bson_append_document_end(lc->batch, &d);
}

static void h_list_collections(cmd_ctx *x)
{
    bson_t filter;
    bool present;
    if (!opt_doc(x->cmd, "filter", &filter, &present)) {
        reply_error(x->r, 14, "listCollections filter must be a document");
        return;
    }
    list_coll_ctx lc = {.name_only = opt_bool(x->cmd, "nameOnly")};
    bson_iter_t it;
    bson_iter_init(&it, &filter);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "name") == 0 && BSON_ITER_HOLDS_UTF8(&it))
            lc.only_name = bson_iter_utf8(&it, NULL);
        else if (strcmp(k, "type") == 0 && BSON_ITER_HOLDS_UTF8(&it))
            lc.only_type = bson_iter_utf8(&it, NULL);
        else {
            reply_error(x->r, 2,
                        "mongosim's listCollections supports only filters {name: S} and {type: \"collection\" | "
                        "\"view\" | \"timeseries\"}");
            return;
        }
    }
    char ns[300];
    snprintf(ns, sizeof ns, "%s.$cmd.listCollections", x->db);
    bson_t reply = BSON_INITIALIZER, cur, batch;
    BSON_APPEND_DOCUMENT_BEGIN(&reply, "cursor", &cur);
    BSON_APPEND_INT64(&cur, "id", 0);
    BSON_APPEND_UTF8(&cur, "ns", ns);
    BSON_APPEND_ARRAY_BEGIN(&cur, "firstBatch", &batch);
    lc.batch = &batch;
    if (strcmp(x->db, "local") == 0) {
        bson_t opts = BSON_INITIALIZER;
        BSON_APPEND_BOOL(&opts, "capped", true);
        BSON_APPEND_INT64(&opts, "size", 1024LL * 1024 * 1024);
        store_ns_info oplog = {
            .name = "oplog.rs", .type = "collection", .uuid = x->srv->oplog_uuid, .options = &opts, .id_index = true};
        list_coll_one(&lc, &oplog);
        bson_destroy(&opts);
    } else {
        store_list_namespaces(x->srv->store, x->db, list_coll_one, &lc);
    }
    bson_append_array_end(&cur, &batch);
    bson_append_document_end(&reply, &cur);
    reply_ok(x->r, &reply);
}

/* ---- handshake and server info ---- */

/* ---- MONGODB-X509 authentication (--tls-ca) ---- */

/* The X.509 checks of the server (src/mongo/db/commands/authentication_commands.cpp, _authenticateX509, 6.0/7.0):
 * a verified client certificate must be there ("No verified subject name available from client"), a user named in
 * the command must equal its subject in RFC 2253 form ("There is no x.509 client certificate matching the user."),
 * both AuthenticationFailed (18), and the database must be $external (ProtocolError 17). Every user is accepted as
 * if created in $external: mongosim has no user catalog. NULL when authenticated, else the reason (and *code). */
static const char *opt_utf8(const bson_t *doc, const char *key)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : NULL;
}

static const char *x509_check(sim_conn *c, const char *user, const char *db, int *code)
{
    *code = 18;
    if (c->x509_subject == NULL)
        return "No verified subject name available from client";
    if (user != NULL && strcmp(user, c->x509_subject) != 0)
        return "There is no x.509 client certificate matching the user.";
    if (strcmp(db, "$external") != 0) {
        *code = 17;
        return "X.509 authentication must always use the $external database.";
    }
    c->authenticated = true;
    return NULL;
}

/* {authenticate: 1, mechanism: "MONGODB-X509"[, user: SUBJECT]} on $external, as libmongoc 1.23 sends it
 * (mongoc-cluster.c, _mongoc_cluster_get_auth_cmd_x509: the user is the subject of tlsCertificateKeyFile, printed by
 * mongoc_ssl_extract_subject in RFC 2253 form). The reply is {dbname, user, ok: 1} (AuthenticateReply in
 * authentication_commands.idl). A failed AuthenticationFailed is answered "auth failed", without the reason, as the
 * server answers a client; --verbose logs the reason. Other mechanisms go through saslStart on a server; here they
 * are refused with 2 BadValue. */
static void h_authenticate(cmd_ctx *x)
{
    sim_conn *c = x->r->conn;
    const char *mech = opt_utf8(x->cmd, "mechanism");
    const char *user = opt_utf8(x->cmd, "user");
    if (mech == NULL || strcmp(mech, "MONGODB-X509") != 0) {
        reply_error(x->r, 2, "Unsupported mechanism '%s' on authenticate command (mongosim knows MONGODB-X509 only)",
                    mech ? mech : "");
        return;
    }
    int code;
    const char *why = x509_check(c, user, x->db, &code);
    if (why != NULL) {
        if (x->srv->opts.verbose)
            fprintf(stderr, "mongosim: conn %" PRId64 ": MONGODB-X509 authentication failed: %s\n", c->id, why);
        reply_error(x->r, code, "%s", code == 18 ? "auth failed" : why);
        return;
    }
    bson_t d = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&d, "dbname", "$external");
    BSON_APPEND_UTF8(&d, "user", c->x509_subject);
    reply_ok(x->r, &d);
}

/* hello's speculativeAuthenticate (src/mongo/db/repl/hello_auth.cpp, handleHelloAuth, which hands an `authenticate`
 * document to doSpeculativeAuthenticate in authentication_commands.cpp): MONGODB-X509 with its db is run as the
 * command would be; on success the reply carries speculativeAuthenticate {dbname, user}, on failure nothing (the
 * driver then authenticates explicitly). libmongoc adds it to its handshake (mongoc-topology-scanner.c,
 * _mongoc_topology_scanner_add_speculative_authentication). */
static void speculative_auth(cmd_ctx *x, bson_t *reply)
{
    bson_iter_t it;
    bson_t spec;
    if (x->srv->tls_ctx == NULL || !bson_iter_init_find(&it, x->cmd, "speculativeAuthenticate") ||
        !iter_doc(&it, &spec))
        return;
    const char *mech = opt_utf8(&spec, "mechanism");
    const char *db = opt_utf8(&spec, "db");
    if (!bson_has_field(&spec, "authenticate") || mech == NULL || strcmp(mech, "MONGODB-X509") != 0 || db == NULL)
        return;
    int code;
    if (x509_check(x->r->conn, opt_utf8(&spec, "user"), db, &code) != NULL)
        return;
    bson_t sub;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "speculativeAuthenticate", &sub);
    BSON_APPEND_UTF8(&sub, "dbname", "$external");
    BSON_APPEND_UTF8(&sub, "user", x->r->conn->x509_subject);
    bson_append_document_end(reply, &sub);
}

/* With --tls-ca a connection runs only these before it authenticates; anything else fails with 13 Unauthorized,
 * "command NAME requires authentication", as a server with authorization enabled answers (its command dispatch checks
 * Command::requiresAuth, src/mongo/db/service_entry_point_common.cpp; these are the commands that return false). */
static bool needs_auth(const sim_server *srv, const sim_conn *c, const char *name)
{
    static const char *const open_cmds[] = {"hello",        "isMaster", "ismaster",     "buildInfo",
                                            "buildinfo",    "ping",     "authenticate", "saslStart",
                                            "saslContinue", "logout",   "getnonce"};
    if (srv->opts.tls_ca == NULL || c->authenticated)
        return false;
    for (size_t i = 0; i < sizeof open_cmds / sizeof open_cmds[0]; i++)
        if (strcmp(open_cmds[i], name) == 0)
            return false;
    return true;
}

static void h_hello(cmd_ctx *x)
{
    sim_server *srv = x->srv;
    bool legacy = strcmp(x->name, "hello") != 0;
    bool primary = !srv->stepped_down;
    bson_t d = BSON_INITIALIZER, hosts, lw;
    BSON_APPEND_ARRAY_BEGIN(&d, "hosts", &hosts);
    BSON_APPEND_UTF8(&hosts, "0", srv->me);
    bson_append_array_end(&d, &hosts);
    BSON_APPEND_UTF8(&d, "setName", srv->opts.set_name);
    BSON_APPEND_INT32(&d, "setVersion", 1);
    BSON_APPEND_BOOL(&d, legacy ? "ismaster" : "isWritablePrimary", primary);
    BSON_APPEND_BOOL(&d, "secondary", !primary);
    if (primary)
        BSON_APPEND_UTF8(&d, "primary", srv->me);
    BSON_APPEND_UTF8(&d, "me", srv->me);
    if (primary) {
        bson_oid_t eid;
        memset(eid.bytes, 0, sizeof eid.bytes);
        eid.bytes[0] = 0x7f;
        eid.bytes[1] = eid.bytes[2] = eid.bytes[3] = 0xff;
        for (int i = 0; i < 8; i++)
            eid.bytes[4 + i] = (uint8_t)((uint64_t)srv->term >> (8 * (7 - i)));
        BSON_APPEND_OID(&d, "electionId", &eid);
    }
    uint64_t last = oplog_last_ts(srv->oplog);
    int64_t last_ms = (int64_t)OPLOG_TS_SECS(last) * 1000;
    BSON_APPEND_DOCUMENT_BEGIN(&d, "lastWrite", &lw);
    append_optime(&lw, "opTime", last, srv->term);
    BSON_APPEND_DATE_TIME(&lw, "lastWriteDate", last_ms);
    uint64_t maj;
    int64_t maj_t, maj_ms;
    cmd_majority_optime(srv, &maj, &maj_t, &maj_ms);
    append_optime(&lw, "majorityOpTime", maj, maj_t);
    BSON_APPEND_DATE_TIME(&lw, "majorityWriteDate", maj_ms);
    bson_append_document_end(&d, &lw);
    BSON_APPEND_INT32(&d, "maxBsonObjectSize", SIM_MAX_BSON);
    BSON_APPEND_INT32(&d, "maxMessageSizeBytes", SIM_MAX_MESSAGE);
    BSON_APPEND_INT32(&d, "maxWriteBatchSize", 100000);
    BSON_APPEND_DATE_TIME(&d, "localTime", sim_now_ms());
    BSON_APPEND_INT32(&d, "logicalSessionTimeoutMinutes", 30);
    BSON_APPEND_INT32(&d, "connectionId", (int32_t)x->r->conn->id);
    BSON_APPEND_INT32(&d, "minWireVersion", 0);
    BSON_APPEND_INT32(&d, "maxWireVersion", sim_max_wire_version(srv->opts.format));
    BSON_APPEND_BOOL(&d, "readOnly", false);
    if (opt_bool(x->cmd, "helloOk") || !legacy)
        BSON_APPEND_BOOL(&d, "helloOk", true);
    speculative_auth(x, &d);
    reply_ok(x->r, &d);
}

static void h_build_info(cmd_ctx *x)
{
    /* A release of each line mongosim plays (its oplog shapes: --oplog-format). */
    sim_oplog_format f = x->srv->opts.format;
    int major = f == SIM_FORMAT_44 ? 4 : f == SIM_FORMAT_50 ? 5 : f == SIM_FORMAT_80 ? 8 : 7;
    int minor = f == SIM_FORMAT_44 ? 4 : 0;
    int patch = f == SIM_FORMAT_44 ? 29 : f == SIM_FORMAT_50 ? 31 : f == SIM_FORMAT_80 ? 4 : 14;
    char version[32];
    snprintf(version, sizeof version, "%d.%d.%d", major, minor, patch);
    bson_t d = BSON_INITIALIZER, arr, eng;
    BSON_APPEND_UTF8(&d, "version", version);
    BSON_APPEND_UTF8(&d, "gitVersion", "mongosim");
    BSON_APPEND_ARRAY_BEGIN(&d, "versionArray", &arr);
    BSON_APPEND_INT32(&arr, "0", major);
    BSON_APPEND_INT32(&arr, "1", minor);
    BSON_APPEND_INT32(&arr, "2", patch);
    BSON_APPEND_INT32(&arr, "3", 0);
    bson_append_array_end(&d, &arr);
    BSON_APPEND_INT32(&d, "bits", 64);
    BSON_APPEND_BOOL(&d, "debug", false);
    BSON_APPEND_INT32(&d, "maxBsonObjectSize", SIM_MAX_BSON);
    BSON_APPEND_ARRAY_BEGIN(&d, "storageEngines", &eng);
    BSON_APPEND_UTF8(&eng, "0", "wiredTiger");
    bson_append_array_end(&d, &eng);
    BSON_APPEND_BOOL(&d, "mongosim", true);
    reply_ok(x->r, &d);
}

static void h_ok(cmd_ctx *x)
{
    bson_t d = BSON_INITIALIZER;
    reply_ok(x->r, &d);
}

/* ---- test commands ---- */

/* {appendOplog: [entries]}: verbatim; ts/t/v/wall are added only to entries without a ts. */
static void h_append_oplog(cmd_ctx *x)
{
    bson_iter_t arr;
    if (!BSON_ITER_HOLDS_ARRAY(&x->first) || !bson_iter_recurse(&x->first, &arr)) {
        reply_error(x->r, 2, "appendOplog needs an array of entries");
        return;
    }
    sim_server *srv = x->srv;
    int32_t n = 0;
    int64_t now_ms = sim_now_ms();
    while (bson_iter_next(&arr)) {
        bson_t e;
        bson_error_t err;
        if (!iter_doc(&arr, &e)) {
            reply_error(x->r, 2, "appendOplog entry %d is not a document", n);
            return;
        }
        bson_iter_t it;
        bool has_ts = false, has_t = false, has_v = false, has_wall = false;
        uint32_t secs = 0, inc = 0;
        bson_iter_init(&it, &e);
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (strcmp(k, "ts") == 0) {
                if (!BSON_ITER_HOLDS_TIMESTAMP(&it)) {
                    reply_error(x->r, 2, "appendOplog entry %d: ts must be a Timestamp", n);
                    return;
                }
                has_ts = true;
                bson_iter_timestamp(&it, &secs, &inc);
            } else if (strcmp(k, "t") == 0) {
                has_t = true;
            } else if (strcmp(k, "v") == 0) {
                has_v = true;
            } else if (strcmp(k, "wall") == 0) {
                has_wall = true;
            }
        }
        bool ok;
        if (has_ts) {
            ok = sim_append_entry(srv, &e, OPLOG_TS(secs, inc), &err);
        } else {
            uint64_t ts = sim_next_ts(srv); /* on a shard, from the cluster clock */
            ok = oplog_append_stamped(srv->oplog, bson_get_data(&e), e.len, ts, srv->term, now_ms, !has_t, !has_v,
                                      !has_wall, &err);
            if (ok)
                oplog_cap(srv->oplog, srv->opts.max_oplog_entries);
        }
        if (!ok) {
            reply_error(x->r, 2, "appendOplog entry %d: %s (%d entries appended before it)", n, err.message, n);
            return;
        }
        n++;
    }
    uint64_t last = oplog_last_ts(srv->oplog);
    bson_t reply = BSON_INITIALIZER;
    BSON_APPEND_INT32(&reply, "n", n);
    BSON_APPEND_TIMESTAMP(&reply, "lastTs", OPLOG_TS_SECS(last), OPLOG_TS_INC(last));
    reply_ok(x->r, &reply);
}

/* {mongosimTransaction: 1, ops: [{insert: "db.c", document} | {update: "db.c", q, u, upsert} |
 *  {delete: "db.c", q, limit}], chain: N, lsid: UUID?, txnNumber: long?} */
static void h_transaction(cmd_ctx *x)
{
    sim_server *srv = x->srv;
    bson_iter_t ops;
    write_ctx w;
    if (!need_primary(x) || !array_field(x, "ops", &ops))
        return;
    memset(&w, 0, sizeof w);
    w.srv = srv;
    w.collected = calloc(16, sizeof *w.collected);
    w.capcollected = 16;
    if (!w.collected)
        abort();
    int64_t chain = 1, txn_number;
    opt_int64(x->cmd, "chain", &chain);
    if (!opt_int64(x->cmd, "txnNumber", &txn_number))
        txn_number = srv->next_txn_number++;
    uint8_t lsid[16];
    bson_iter_t it;
    if (bson_iter_init_find(&it, x->cmd, "lsid") && BSON_ITER_HOLDS_BINARY(&it)) {
        uint32_t len;
        const uint8_t *data;
        bson_subtype_t st;
        bson_iter_binary(&it, &st, &len, &data);
        memcpy(lsid, data, len >= 16 ? 16 : len);
    } else {
        bson_oid_t oid;
        bson_oid_init(&oid, NULL);
        memcpy(lsid, oid.bytes, 12);
        uint32_t rnd = (uint32_t)rand();
        memcpy(lsid + 12, &rnd, 4);
        lsid[6] = (uint8_t)((lsid[6] & 0x0f) | 0x40);
        lsid[8] = (uint8_t)((lsid[8] & 0x3f) | 0x80);
    }
    bson_error_t err;
    bool failed = false;
    int index = 0;
    for (; bson_iter_next(&ops) && !failed; index++) {
        bson_t op, q, u, doc;
        bool has_q, has_u, has_doc;
        bson_iter_t k;
        char db[128];
        const char *coll;
        if (!iter_doc(&ops, &op) || !bson_iter_init(&k, &op) || !bson_iter_next(&k) || !BSON_ITER_HOLDS_UTF8(&k) ||
            !split_ns(bson_iter_utf8(&k, NULL), db, sizeof db, &coll)) {
            bson_set_error(&err, 0, 2, "ops[%d] must start with insert|update|delete: \"db.coll\"", index);
            failed = true;
            break;
        }
        const char *kind = bson_iter_key(&k);
        opt_doc(&op, "q", &q, &has_q);
        opt_doc(&op, "u", &u, &has_u);
        opt_doc(&op, "document", &doc, &has_doc);
        if (strcmp(kind, "insert") == 0 && has_doc) {
            failed = !store_insert(srv->store, db, coll, &doc, emit_body, &w, &err);
        } else if (strcmp(kind, "update") == 0 && has_q && has_u) {
            sim_update_result res;
            memset(&res, 0, sizeof res);
            failed = !store_update(srv->store, db, coll, &q, &u, opt_bool(&op, "upsert"), &res, emit_body, &w, &err);
            store_update_result_clear(&res);
        } else if (strcmp(kind, "delete") == 0 && has_q) {
            int64_t limit = 0, deleted;
            opt_int64(&op, "limit", &limit);
            failed = !store_delete(srv->store, db, coll, &q, (int)limit, &deleted, emit_body, &w, &err);
        } else {
            bson_set_error(&err, 0, 2, "ops[%d]: unknown or incomplete operation '%s'", index, kind);
            failed = true;
        }
    }
    /* Log what was applied (there is no rollback), split into `chain` applyOps entries. */
    size_t total = w.ncollected;
    size_t groups = chain < 1 ? 1 : (size_t)chain;
    if (groups > total)
        groups = total;
    uint64_t prev_ts = 0;
    int64_t prev_t = -1;
    size_t next = 0;
    bool log_ok = true;
    for (size_t g = 0; g < groups && log_ok; g++) {
        size_t take = total / groups + (g < total % groups ? 1 : 0);
        uint64_t ts = sim_next_ts(srv);
        bson_t e = BSON_INITIALIZER, o, arr;
        append_lsid(&e, lsid);
        BSON_APPEND_INT64(&e, "txnNumber", txn_number);
        BSON_APPEND_UTF8(&e, "op", "c");
        BSON_APPEND_UTF8(&e, "ns", "admin.$cmd");
        BSON_APPEND_DOCUMENT_BEGIN(&e, "o", &o);
        BSON_APPEND_ARRAY_BEGIN(&o, "applyOps", &arr);
        for (size_t i = 0; i < take; i++) {
            char keybuf[16];
            const char *key;
            bson_uint32_to_string((uint32_t)i, &key, keybuf, sizeof keybuf);
            BSON_APPEND_DOCUMENT(&arr, key, w.collected[next++]);
        }
        bson_append_array_end(&o, &arr);
        if (g + 1 < groups)
            BSON_APPEND_BOOL(&o, "partialTxn", true);
        else if (groups > 1)
            BSON_APPEND_INT64(&o, "count", (int64_t)total);
        bson_append_document_end(&e, &o);
        BSON_APPEND_TIMESTAMP(&e, "ts", OPLOG_TS_SECS(ts), OPLOG_TS_INC(ts));
        BSON_APPEND_INT64(&e, "t", srv->term);
        BSON_APPEND_INT64(&e, "v", 2);
        BSON_APPEND_DATE_TIME(&e, "wall", sim_now_ms());
        append_optime(&e, "prevOpTime", prev_ts, prev_t);
        bson_error_t lerr;
        log_ok = sim_append_entry(srv, &e, ts, &lerr);
        if (!log_ok)
            fprintf(stderr, "mongosim: cannot log a transaction entry: %s\n", lerr.message);
        bson_destroy(&e);
        prev_ts = ts;
        prev_t = srv->term;
    }
    write_ctx_clear(&w);
    if (failed) {
        reply_error(x->r, (int)err.code, "transaction op %d failed (%zu ops before it were applied and logged): %s",
                    index, total, err.message);
        return;
    }
    bson_t reply = BSON_INITIALIZER;
    BSON_APPEND_INT32(&reply, "nOps", (int32_t)total);
    BSON_APPEND_INT32(&reply, "entries", (int32_t)groups);
    BSON_APPEND_INT64(&reply, "txnNumber", txn_number);
    append_uuid(&reply, "lsid", lsid);
    reply_ok(x->r, &reply);
}

static void h_save(cmd_ctx *x)
{
    bson_error_t err;
    if (!x->srv->opts.state_dir) {
        reply_error(x->r, 20, "mongosim was started without --state DIR");
        return;
    }
    if (!sim_server_save(x->srv, &err)) {
        reply_error(x->r, 1, "mongosimSave: %s", err.message);
        return;
    }
    h_ok(x);
}

static void h_truncate(cmd_ctx *x)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, x->cmd, "before") || !BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        reply_error(x->r, 2, "mongosimTruncateOplog needs before: Timestamp");
        return;
    }
    uint32_t secs, inc;
    bson_iter_timestamp(&it, &secs, &inc);
    uint64_t before = oplog_count(x->srv->oplog);
    oplog_truncate_before(x->srv->oplog, OPLOG_TS(secs, inc));
    x->srv->woken_end = UINT64_MAX; /* re-check parked cursors: their position may be gone */
    bson_t reply = BSON_INITIALIZER;
    BSON_APPEND_INT64(&reply, "removed", (int64_t)(before - oplog_count(x->srv->oplog)));
    reply_ok(x->r, &reply);
}

static void h_drop_connections(cmd_ctx *x)
{
    sim_drop_connections(x->srv, x->r->conn);
    h_ok(x);
}

static void h_step_down(cmd_ctx *x)
{
    int64_t ms = BSON_ITER_HOLDS_NUMBER(&x->first) ? bson_iter_as_int64(&x->first) : 0;
    if (ms <= 0) {
        reply_error(x->r, 2, "mongosimStepDown needs a duration in ms");
        return;
    }
    sim_step_down(x->srv, ms);
    h_ok(x);
}

/* {mongosimMalformBatch: "notDocument" | "corrupt", lookup: bool}: the next oplog batch (find or getMore) of two
 * entries or more holds, right after its first entry, an element that is not a document (an int32), or a document
 * element whose length runs past the end of the array; with lookup: true, the next batch of a find with a projection
 * (a point lookup of a transaction's entry) holds it before its first entry instead. A real server never sends
 * either (a cursor's batch is an array of the documents the query returns, src/mongo/db/query/cursor_response.cpp);
 * this test-only fault reaches the client's guards against it. */
static void h_malform_batch(cmd_ctx *x)
{
    uint32_t len = 0;
    const char *how = BSON_ITER_HOLDS_UTF8(&x->first) ? bson_iter_utf8(&x->first, &len) : "";
    int mode = strcmp(how, "notDocument") == 0 ? 1 : strcmp(how, "corrupt") == 0 ? 2 : 0;
    if (mode == 0) {
        reply_error(x->r, 2, "mongosimMalformBatch needs \"notDocument\" or \"corrupt\"");
        return;
    }
    bson_iter_t it;
    x->srv->malform_lookup = bson_iter_init_find(&it, x->cmd, "lookup") && bson_iter_as_bool(&it);
    x->srv->malform_batch = mode;
    h_ok(x);
}

static void h_delay(cmd_ctx *x)
{
    int64_t ms = BSON_ITER_HOLDS_NUMBER(&x->first) ? bson_iter_as_int64(&x->first) : 0;
    x->srv->delay_ms = ms < 0 ? 0 : ms;
    h_ok(x);
}

/* {mongosimBeforeNext: NAME, run: {command}, db: DB?} — see README.md. A test's way to reach a moment inside a client's
 * sequence of calls (between the two reads of a plan, say) without racing it. */
static void h_before_next(cmd_ctx *x)
{
    bson_iter_t it;
    bson_t run;
    const char *db = "admin";
    if (!BSON_ITER_HOLDS_UTF8(&x->first) || !bson_iter_init_find(&it, x->cmd, "run") || !iter_doc(&it, &run) ||
        bson_empty(&run)) {
        reply_error(x->r, 2, "mongosimBeforeNext needs a command name and run: {a command}");
        return;
    }
    if (bson_iter_init_find(&it, x->cmd, "db") && BSON_ITER_HOLDS_UTF8(&it))
        db = bson_iter_utf8(&it, NULL);
    const char *name = bson_iter_utf8(&x->first, NULL);
    if (strlen(name) >= sizeof x->srv->before_name || strlen(db) >= sizeof x->srv->before_db) {
        reply_error(x->r, 2, "mongosimBeforeNext: name or db too long");
        return;
    }
    if (x->srv->before_cmd != NULL)
        bson_destroy(x->srv->before_cmd);
    x->srv->before_cmd = bson_copy(&run);
    snprintf(x->srv->before_name, sizeof x->srv->before_name, "%s", name);
    snprintf(x->srv->before_db, sizeof x->srv->before_db, "%s", db);
    h_ok(x);
}

/* {mongosimMajority: {freeze: true} | {advanceTo: Timestamp} | {follow: true}} — see README.md. */
static void h_majority(cmd_ctx *x)
{
    sim_server *srv = x->srv;
    bson_t spec;
    bson_iter_t it;
    if (!iter_doc(&x->first, &spec) || !bson_iter_init(&it, &spec) || !bson_iter_next(&it)) {
        reply_error(x->r, 2, "mongosimMajority needs {freeze: true}, {advanceTo: Timestamp} or {follow: true}");
        return;
    }
    const char *k = bson_iter_key(&it);
    uint64_t newest = oplog_last_ts(srv->oplog);
    if (strcmp(k, "freeze") == 0 && bson_iter_as_bool(&it)) {
        if (!srv->maj_frozen) {
            srv->maj_frozen = true;
            srv->maj_ts = newest;
            srv->maj_store = store_clone(srv->store);
        }
    } else if (strcmp(k, "follow") == 0 && bson_iter_as_bool(&it)) {
        srv->maj_frozen = false;
        store_free(srv->maj_store);
        srv->maj_store = NULL;
    } else if (strcmp(k, "advanceTo") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        uint32_t secs, inc;
        bson_iter_timestamp(&it, &secs, &inc);
        uint64_t to = OPLOG_TS(secs, inc);
        if (!srv->maj_frozen || to < srv->maj_ts || to > newest) {
            reply_error(x->r, 2,
                        "mongosimMajority advanceTo: the commit point is %s, it can only move forward up to "
                        "the newest entry",
                        srv->maj_frozen ? "frozen" : "following the newest entry");
            return;
        }
        if (to != srv->maj_ts && to != newest) {
            /* The data is kept at the commit point only (one snapshot), so it can jump to the newest entry but not
             * stop between: a simplification. */
            reply_error(x->r, 2,
                        "mongosimMajority advanceTo: mongosim can only advance a frozen commit point to the "
                        "newest entry");
            return;
        }
        if (to != srv->maj_ts) {
            store_free(srv->maj_store);
            srv->maj_store = store_clone(srv->store);
            srv->maj_ts = to;
        }
    } else {
        reply_error(x->r, 2, "mongosimMajority needs {freeze: true}, {advanceTo: Timestamp} or {follow: true}");
        return;
    }
    srv->woken_end = UINT64_MAX; /* parked majority getMores may see entries now */
    uint64_t ts;
    int64_t t, ms;
    cmd_majority_optime(srv, &ts, &t, &ms);
    bson_t reply = BSON_INITIALIZER;
    BSON_APPEND_TIMESTAMP(&reply, "majorityTs", OPLOG_TS_SECS(ts), OPLOG_TS_INC(ts));
    BSON_APPEND_INT64(&reply, "majorityT", t);
    BSON_APPEND_BOOL(&reply, "frozen", srv->maj_frozen);
    reply_ok(x->r, &reply);
}

/* {mongosimRollback: 1}: a failover that loses what the majority had not committed. The entries after the commit
 * point leave the oplog and their changes leave the collections (the data goes back to the snapshot taken at the
 * commit point), as on a real set where the old primary rolls back to the common point with the new one (mongodb/mongo
 * src/mongo/db/repl/rollback_impl.cpp). A rollback is a state change: user operations are killed with 11602
 * InterruptedDueToReplStateChange (replication_coordinator_external_state_impl.cpp, killAllUserOperations) and the
 * cursors are gone (a later getMore gets 43 CursorNotFound). The new primary then logs
 * {op: "n", ns: "", o: {msg: "new primary"}} in its new term (replication_coordinator_external_state_impl.cpp,
 * onTransitionToPrimary: onOpMessage(BSON("msg" << ReplicationCoordinator::newPrimaryMsg))). */
static void h_rollback(cmd_ctx *x)
{
    sim_server *srv = x->srv;
    uint64_t point;
    int64_t t, ms;
    cmd_majority_optime(srv, &point, &t, &ms);
    uint64_t before = oplog_count(srv->oplog);
    oplog_truncate_after(srv->oplog, point);
    uint64_t removed = before - oplog_count(srv->oplog);
    if (srv->maj_store) {
        store_free(srv->store);
        srv->store = srv->maj_store;
        store_set_image_hook(srv->store, images_pending, srv->images);
        srv->maj_store = NULL;
    }
    srv->maj_frozen = false;
    bool was_down = srv->stepped_down;
    srv->stepped_down = true;
    wake_all_parked(srv, 0); /* each parked getMore answers 11602 and frees its cursor */
    srv->stepped_down = was_down;
    cmd_cursors_free(srv);
    srv->term++;
    bson_t body = BSON_INITIALIZER, o;
    BSON_APPEND_UTF8(&body, "op", "n");
    BSON_APPEND_UTF8(&body, "ns", "");
    BSON_APPEND_DOCUMENT_BEGIN(&body, "o", &o);
    BSON_APPEND_UTF8(&o, "msg", "new primary");
    bson_append_document_end(&body, &o);
    bson_error_t err;
    bool ok = sim_append_body(srv, &body, &err);
    bson_destroy(&body);
    srv->woken_end = UINT64_MAX;
    if (!ok) {
        reply_error(x->r, 1, "mongosimRollback: logging the new primary noop: %s", err.message);
        return;
    }
    bson_t reply = BSON_INITIALIZER;
    BSON_APPEND_INT64(&reply, "removed", (int64_t)removed);
    BSON_APPEND_TIMESTAMP(&reply, "commonPoint", OPLOG_TS_SECS(point), OPLOG_TS_INC(point));
    BSON_APPEND_INT64(&reply, "term", srv->term);
    reply_ok(x->r, &reply);
}

static void h_status(cmd_ctx *x)
{
    sim_server *srv = x->srv;
    bson_t d = BSON_INITIALIZER;
    uint64_t n = oplog_count(srv->oplog);
    BSON_APPEND_INT64(&d, "oplogCount", (int64_t)n);
    if (n > 0) {
        uint64_t f = oplog_entry_ts(srv->oplog, oplog_first_seq(srv->oplog));
        BSON_APPEND_TIMESTAMP(&d, "firstTs", OPLOG_TS_SECS(f), OPLOG_TS_INC(f));
    }
    uint64_t l = oplog_last_ts(srv->oplog);
    BSON_APPEND_TIMESTAMP(&d, "lastTs", OPLOG_TS_SECS(l), OPLOG_TS_INC(l));
    BSON_APPEND_INT64(&d, "term", srv->term);
    BSON_APPEND_BOOL(&d, "steppedDown", srv->stepped_down);
    int64_t conns = 0, cursors = 0;
    for (sim_conn *c = srv->conns; c; c = c->next)
        conns++;
    for (sim_cursor *c = srv->cursors; c; c = c->next)
        cursors++;
    BSON_APPEND_INT64(&d, "connections", conns);
    BSON_APPEND_INT64(&d, "cursors", cursors);
    BSON_APPEND_INT64(&d, "delayMS", srv->delay_ms);
    uint64_t maj;
    int64_t maj_t, maj_ms;
    cmd_majority_optime(srv, &maj, &maj_t, &maj_ms);
    BSON_APPEND_TIMESTAMP(&d, "majorityTs", OPLOG_TS_SECS(maj), OPLOG_TS_INC(maj));
    BSON_APPEND_BOOL(&d, "majorityFrozen", srv->maj_frozen);
    BSON_APPEND_INT64(&d, "oplogGetMores", (int64_t)srv->oplog_getmores);
    BSON_APPEND_INT64(&d, "oplogReadsDelayed", (int64_t)srv->oplog_reads_delayed);
    BSON_APPEND_INT64(&d, "oplogReadDelayTotalMS", (int64_t)srv->oplog_read_delay_total_ms);
    int64_t waits = 0;
    for (sim_conn *c = srv->conns; c; c = c->next)
        if (c->parked && c->park_kind == SIM_PARK_WRITE)
            waits++;
    BSON_APPEND_INT64(&d, "writeConcernWaits", waits);
    reply_ok(x->r, &d);
}

/* {appendOplogNote: 1, data: {...}[, maxClusterTime: Timestamp]} on admin (src/mongo/db/commands/oplog_note.cpp):
 * logs {op: "n", ns: "", o: data} (_performNoopWrite -> OpObserver::onOpMessage). With maxClusterTime it writes only
 * when that time is after the node's last applied optime, and answers ok either way. data must be a document
 * (bsonExtractTypedField: 14 TypeMismatch, or 4 NoSuchKey when missing). The command is adminOnly and needs the
 * appendOplogNote action on the cluster resource (clusterManager, clusterAdmin, root; mongosim has no
 * authentication). */
static void h_append_oplog_note(cmd_ctx *x)
{
    sim_server *srv = x->srv;
    if (strcmp(x->db, "admin") != 0) {
        reply_error(x->r, 13, "appendOplogNote may only be run against the admin database.");
        return;
    }
    bson_iter_t it;
    if (!bson_iter_init_find(&it, x->cmd, "data")) {
        reply_error(x->r, 4, "Missing expected field \"data\"");
        return;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
        reply_error(x->r, 14, "\"data\" had the wrong type. Expected object, found %s",
                    BSON_ITER_HOLDS_UTF8(&it) ? "string" : "another type");
        return;
    }
    bson_t data;
    uint32_t len;
    const uint8_t *p;
    bson_iter_document(&it, &len, &p);
    bson_init_static(&data, p, len);
    bson_iter_t mt;
    if (bson_iter_init_find(&mt, x->cmd, "maxClusterTime")) {
        if (!BSON_ITER_HOLDS_TIMESTAMP(&mt)) {
            reply_error(x->r, 14, "\"maxClusterTime\" had the wrong type. Expected timestamp");
            return;
        }
        uint32_t secs, inc;
        bson_iter_timestamp(&mt, &secs, &inc);
        if (OPLOG_TS(secs, inc) <= oplog_last_ts(srv->oplog)) {
            bson_t d = BSON_INITIALIZER;
            reply_ok(x->r, &d);
            return;
        }
    }
    if (srv->stepped_down) {
        reply_error(x->r, 10107, "Not primary while running appendOpLogNote");
        return;
    }
    bson_t body = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&body, "op", "n");
    BSON_APPEND_UTF8(&body, "ns", "");
    BSON_APPEND_DOCUMENT(&body, "o", &data);
    bson_error_t err;
    bool ok = sim_append_body(srv, &body, &err);
    bson_destroy(&body);
    if (!ok) {
        reply_error(x->r, 1, "appendOplogNote: %s", err.message);
        return;
    }
    bson_t d = BSON_INITIALIZER;
    reply_ok(x->r, &d);
}

/* Client transactions and server parameters (txn.c). */
static void h_commit_txn(cmd_ctx *x)
{
    txn_cmd_commit(x->srv, x->r, x->cmd);
}

static void h_abort_txn(cmd_ctx *x)
{
    txn_cmd_abort(x->srv, x->r, x->cmd);
}

static void h_prepare_txn(cmd_ctx *x)
{
    txn_cmd_prepare(x->srv, x->r, x->cmd);
}

static void h_set_parameter(cmd_ctx *x)
{
    txn_cmd_set_parameter(x->srv, x->r, x->cmd);
}

/* ---- dispatch ---- */

typedef struct {
    const char *name;
    void (*fn)(cmd_ctx *x);
} cmd_entry;

static const cmd_entry COMMANDS[] = {
    {"hello", h_hello},
    {"isMaster", h_hello},
    {"ismaster", h_hello},
    {"ping", h_ok},
    {"authenticate", h_authenticate},
    {"endSessions", h_ok},
    {"buildInfo", h_build_info},
    {"buildinfo", h_build_info},
    {"listDatabases", h_list_databases},
    {"listCollections", h_list_collections},
    {"count", h_count},
    {"aggregate", h_aggregate},
    {"insert", h_insert},
    {"update", h_update},
    {"delete", h_delete},
    {"create", h_create},
    {"drop", h_drop},
    {"collMod", h_collmod},
    {"modifyChangeStreams", h_modify_change_streams},
    {"renameCollection", h_rename},
    {"dropDatabase", h_drop_database},
    {"find", h_find},
    {"getMore", h_get_more},
    {"killCursors", h_kill_cursors},
    {"appendOplog", h_append_oplog},
    {"appendOplogNote", h_append_oplog_note},
    {"mongosimTransaction", h_transaction},
    {"commitTransaction", h_commit_txn},
    {"abortTransaction", h_abort_txn},
    {"prepareTransaction", h_prepare_txn},
    {"setParameter", h_set_parameter},
    {"mongosimSave", h_save},
    {"mongosimTruncateOplog", h_truncate},
    {"mongosimDropConnections", h_drop_connections},
    {"mongosimStepDown", h_step_down},
    {"mongosimDelay", h_delay},
    {"mongosimMalformBatch", h_malform_batch},
    {"mongosimStatus", h_status},
    {"mongosimMajority", h_majority},
    {"mongosimRollback", h_rollback},
    {"mongosimBeforeNext", h_before_next},
};

void cmd_dispatch(sim_server *srv, sim_reply *r, const bson_t *cmd, const char *db)
{
    if (srv->is_router) {
        cluster_dispatch(srv, r, cmd, db);
        return;
    }
    cmd_ctx x = {.srv = srv, .r = r, .cmd = cmd, .db = db};
    if (!bson_iter_init(&x.first, cmd) || !bson_iter_next(&x.first)) {
        reply_error(r, 9, "empty command document");
        return;
    }
    x.name = bson_iter_key(&x.first);
    if (!x.db) {
        bson_iter_t it;
        if (!bson_iter_init_find(&it, cmd, "$db") || !BSON_ITER_HOLDS_UTF8(&it)) {
            reply_error(r, 40571, "OP_MSG requests require a $db argument");
            return;
        }
        x.db = bson_iter_utf8(&it, NULL);
    }
    if (!*x.db || strchr(x.db, '.')) {
        reply_error(r, 73, "Invalid database name: '%s'", x.db);
        return;
    }
    if (srv->opts.verbose)
        fprintf(stderr, "mongosim: conn %" PRId64 ": %s on %s\n", r->conn->id, x.name, x.db);
    if (needs_auth(srv, r->conn, x.name)) {
        reply_error(r, 13, "command %s requires authentication", x.name);
        return;
    }
    if (srv->before_cmd != NULL && strcmp(srv->before_name, x.name) == 0) {
        /* mongosimBeforeNext: taken first (so it runs once), answered into nothing. */
        bson_t *run = srv->before_cmd;
        char run_db[sizeof srv->before_db];
        snprintf(run_db, sizeof run_db, "%s", srv->before_db);
        srv->before_cmd = NULL;
        sim_reply quiet = {.conn = r->conn, .request_id = r->request_id, .opcode = SIM_OP_MSG, .no_reply = true};
        cmd_dispatch(srv, &quiet, run, run_db);
        bson_destroy(run);
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++) {
        if (strcmp(COMMANDS[i].name, x.name) == 0) {
            /* A command with autocommit runs inside its client transaction (txn.c). */
            if (!txn_enter(srv, r, cmd, x.name, x.db))
                return;
            COMMANDS[i].fn(&x);
            txn_leave(srv);
            /* A statement inside a transaction takes no write concern; its commitTransaction does. */
            bool statement = bson_has_field(cmd, "autocommit") && strcmp(x.name, "commitTransaction") != 0 &&
                             strcmp(x.name, "abortTransaction") != 0 && strcmp(x.name, "prepareTransaction") != 0;
            if (r->wc_ran && !statement && !r->parked && !r->no_reply)
                wc_hold(srv, r, cmd);
            return;
        }
    }
    reply_error(r, 59, "no such command: '%s'", x.name);
}

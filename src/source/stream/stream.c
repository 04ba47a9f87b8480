/*
 * stream.c — the change-stream reader thread: follows one cluster-wide change stream through hand-built aggregate
 * and getMore commands and feeds the queue with the same entries as the oplog reader (see source/stream/stream.h).
 *
 * NOTES
 * - Commands (mongodb/specifications source/change-streams/change-streams.md; mongodb/mongo docs/change_streams.md):
 *   {aggregate: 1, pipeline: [{$changeStream: {allChangesForCluster: true, showExpandedEvents: true,
 *   showRawUpdateDescription: true, fullDocument: "whenAvailable", resumeAfter | startAfter | startAtOperationTime}},
 *   {$changeStreamSplitLargeEvent: {}}], cursor: {batchSize: 0}} on admin, then {getMore: id, collection:
 *   "$cmd.aggregate", batchSize, maxTimeMS: await_ms}. Each reply's cursor.postBatchResumeToken is read. As in the
 *   oplog reader, mongoc_client_command_with_opts with one session and one serverId per cursor (never the retryable
 *   read: a getMore retried after a lost reply skips a batch), and recovery is ours.
 * - The options a server accepts are found by the first aggregate itself (batchSize 0: nothing is read): one the
 *   server refuses by name is dropped, with a log line, and the aggregate sent again. showRawUpdateDescription
 *   refused while [mongodb] change_stream_updates = raw stops the reader; fullDocument "whenAvailable" (the post-image,
 *   the fallback for an update whose paths are ambiguous) is asked only while updates are read from their
 *   description; the split stage (7.0, 6.0.9) refused means an event over 16 MB stops the reader, naming it.
 * - Positions: an entry's position is its clusterTime (term -1) and its op_entry.token the resume token after it; the
 *   reader resumes after the last token it pushed (resumeAfter, or startAfter for an invalidate's token), or, with no
 *   token, at startAtOperationTime = start + 1. Error 280 (the token is not in the stream any more: the pipeline or the
 *   filter changed) restarts at startAtOperationTime = the last position pushed, with a log line: the events of that
 *   instant come again and the sink's idempotent apply absorbs them.
 * - Grouping (source/stream/event.h): the events of one clusterTime are held until the next event has another one, or
 *   a post-batch resume token is later. On a quiet replica set that token moves with the periodic noop writer (10 s,
 *   periodicNoopIntervalSecs), so the last transaction of a burst may wait that long. A server that never sends a
 *   post-batch resume token (Amazon DocumentDB) has its group handed on at the end of each under-full batch instead
 *   (its cost: a transaction cut by a batch boundary commits in two PostgreSQL transactions).
 * - An empty batch whose post-batch resume token is a high-water mark past the last entry pushed is pushed as a noop
 *   entry carrying that token, positioned one tick before the mark (every event before the mark has been seen; an
 *   event at the mark's own time may still come), so a quiet stream's committed position keeps moving.
 * - A $match keeps the server from sending events of databases the filter leaves out, when its include patterns
 *   name their databases exactly (core/nsfilter.h nsfilter_each_exact_db); the filter still decides every op on this
 *   side, as for the oplog. A token taken under another filter may then be one the stream cannot find: error 280,
 *   handled as above.
 * - Per-database streams (source/stream/perdb.h): where the cluster-wide aggregate is refused, one lane per database
 *   the filter names exactly, each with its own cursor (lane_io), all on the one session; the merge decides which
 *   event goes on next and which lane to read (its getMore waits READER_PROBE_MS while events are held, else
 *   await_ms). An empty getMore shows its lane complete up to its post-batch token (as an empty batch closes a group
 *   above). Entries carry the composite token (perdb_token), and a whole entry pushed makes every lane's point the
 *   one a reopening resumes from (perdb_commit). A fault reopens every lane; a lane's invalidate reopens that lane
 *   after it (startAfter); a lane refused with 280 restarts at the last position pushed, as above.
 * - Not done here: the byte-sized getMore the oplog reader asks for (batch_size events; a
 *   batch of events of READER_REPLY_BYTES or more each waits, as there, for the applier to drain the queue before
 *   the next getMore).
 */
#include "source/stream/stream.h"

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

#include "source/decode.h"
#include "source/mongo_client.h"
#include "source/prepare.h"
#include "source/stream/event.h"
#include "source/stream/perdb.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/memory.h"
#include "util/napper.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000

/* Server error codes (src/mongo/base/error_codes.yml in mongodb/mongo). */
#define ERR_CURSOR_NOT_FOUND           43
#define ERR_CAPPED_POSITION_LOST       136
#define ERR_CHANGE_STREAM_FATAL        280
#define ERR_CHANGE_STREAM_HISTORY_LOST 286
#define ERR_BSON_OBJECT_TOO_LARGE      10334

typedef enum { STEP_OK, STEP_RETRY, STEP_END } step;

/* The $changeStream options this reader may ask for, in the order they are given up when a server refuses them. */
enum {
    OPT_SPLIT = 1u << 0,    /* the $changeStreamSplitLargeEvent stage */
    OPT_FULLDOC = 1u << 1,  /* fullDocument: "whenAvailable" */
    OPT_RAW = 1u << 2,      /* showRawUpdateDescription */
    OPT_EXPANDED = 1u << 3, /* showExpandedEvents */
};

static const struct {
    unsigned bit;
    const char *name; /* as the server names it in its refusal */
} optnames[] = {
    {OPT_SPLIT, "$changeStreamSplitLargeEvent"},
    {OPT_RAW, "showRawUpdateDescription"},
    {OPT_EXPANDED, "showExpandedEvents"},
    {OPT_FULLDOC, "fullDocument"},
    {0, NULL},
};

/* The cursor of one database's stream (per-database mode). Holds a bson_t: allocated with its alignment. */
typedef struct lane_io {
    stream_frag frag; /* the fragments of a split event of this stream */
    int64_t cursor_id;
    bool have_opened_at; /* opened at startAtOperationTime = opened_at, or first batch's high-water mark there */
    op_pos opened_at;
    bool at_time; /* the next aggregate starts at startAtOperationTime = time (after a 280) */
    op_pos time;
    bool reopen; /* the server ended the cursor after an invalidate: open it again after that event */
} lane_io;

struct stream_reader {
    stream_config cfg;
    char *uri_str;
    mongoc_client_t *client;
    queue *q;
    pthread_t thread;
    bool joined;

    atomic_bool stop;
    atomic_bool finished;
    napper napper; /* the backoff's sleep, which stream_stop interrupts */
    atomic_uint_fast64_t entries, reconnects, idles;
    atomic_uint_fast64_t last_ts; /* secs << 32 | inc */
    atomic_bool have_last;

    /* ---- thread only ---- */
    mongoc_client_session_t *cs;
    bool no_sessions;
    uint32_t server_id;
    int64_t cursor_id;
    unsigned opts;    /* the options asked for (OPT_*) */
    unsigned refused; /* the options the server refused */
    bool matched;     /* the pipeline has a $match of the filter's databases */
    bool probed;      /* an aggregate succeeded: opts are what the server accepts */
    bool pbrt_seen;   /* the server sends post-batch resume tokens */
    uint8_t *token;   /* the resume point: the last token pushed, or cfg.token (malloc'd), NULL when none */
    uint32_t token_len;
    bool token_invalidate;
    op_pos pos;   /* the last position pushed (or cfg.start) */
    bool at_time; /* the next aggregate starts at startAtOperationTime = time (after a 280) */
    op_pos time;
    bool have_opened_at; /* the stream was opened at startAtOperationTime = opened_at */
    op_pos opened_at;
    stream_group group; /* the events of one clusterTime not handed on yet */
    bool parts_pushed;  /* parts of the open group were handed on (op_entry.more): a fault must end the session */
    stream_frag frag;   /* the fragments of a split event */
    bool idle_due;
    backoff bo;
    queue_pusher out;
    bool out_failed;

    /* ---- one stream per database (the server refuses the cluster-wide one; source/stream/perdb.h) ---- */
    bool perdb;
    bool perdb_at_pos; /* a lane with no resume point starts at pos itself (a restart), not after it */
    perdb_merge pm;
    lane_io *lanes; /* pm.n of them */
};

void stream_config_init(stream_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->start.term = -1;
    cfg->await_ms = READER_DEFAULT_AWAIT_MS;
    cfg->batch_size = STREAM_DEFAULT_BATCH_SIZE;
}

static bool stopping(stream_reader *r)
{
    return atomic_load(&r->stop);
}

/* Waits ms milliseconds unless stream_stop comes first; false when stopping. */
static bool nap(stream_reader *r, int64_t ms)
{
    return napper_nap(&r->napper, ms, &r->stop);
}

static void fatal(stream_reader *r, queue_end_reason reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Logs why the reader stops and pushes QUEUE_END: the thread then ends. */
static void fatal(stream_reader *r, queue_end_reason reason, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_error("change stream: %s", msg);
    queue_pusher_flush(&r->out);
    if (!queue_push_end(r->q, reason, msg))
        log_warning("change stream: the queue is stopped; the error above was not handed to the apply loop");
}

static const char *posfmt(const op_pos *p, char *buf)
{
    return op_pos_format(p, buf, OP_POS_STRLEN);
}

/* ---- commands ---- */

static bool run_cmd_on(stream_reader *r, const char *db, const bson_t *cmd, bson_t *reply, bson_error_t *err)
{
    if (!queue_pusher_flush(&r->out)) { /* a round trip may wait: what was rendered goes on first */
        r->out_failed = true;
        bson_init(reply);
        bson_set_error(err, 0, 0, "the queue to the applier is stopped");
        return false;
    }
    bson_t opts = BSON_INITIALIZER;
    bool ok;
    if (r->cs && !mongoc_client_session_append(r->cs, &opts, err)) {
        bson_init(reply);
        ok = false;
    } else {
        if (r->server_id)
            BSON_APPEND_INT32(&opts, "serverId", (int32_t)r->server_id);
        ok = mongoc_client_command_with_opts(r->client, db, cmd, NULL, &opts, reply, err);
    }
    bson_destroy(&opts);
    return ok;
}

static bool run_cmd(stream_reader *r, const bson_t *cmd, bson_t *reply, bson_error_t *err)
{
    return run_cmd_on(r, "admin", cmd, reply, err);
}

static void kill_cursor_on(stream_reader *r, const char *db, int64_t *id)
{
    if (*id == 0)
        return;
    bson_t cmd = BSON_INITIALIZER, arr, reply;
    bson_error_t err;
    BSON_APPEND_UTF8(&cmd, "killCursors", "$cmd.aggregate");
    BSON_APPEND_ARRAY_BEGIN(&cmd, "cursors", &arr);
    BSON_APPEND_INT64(&arr, "0", *id);
    bson_append_array_end(&cmd, &arr);
    if (!run_cmd_on(r, db, &cmd, &reply, &err))
        log_debug("change stream: killCursors failed: %s", err.message);
    bson_destroy(&reply);
    bson_destroy(&cmd);
    *id = 0;
}

static void kill_lanes(stream_reader *r);

static void kill_cursor(stream_reader *r)
{
    kill_cursor_on(r, "admin", &r->cursor_id);
    kill_lanes(r);
}

static step open_session(stream_reader *r);

/* Whether the reply carries an error label. */
static bool has_label(const bson_t *reply, const char *label)
{
    bson_iter_t it, arr;
    if (!bson_iter_init_find(&it, reply, "errorLabels") || !BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &arr))
        return false;
    while (bson_iter_next(&arr))
        if (BSON_ITER_HOLDS_UTF8(&arr) && strcmp(bson_iter_utf8(&arr, NULL), label) == 0)
            return true;
    return false;
}

static bool server_code(const bson_error_t *e, uint32_t code)
{
    return (e->domain == MONGOC_ERROR_SERVER || e->domain == MONGOC_ERROR_QUERY) && e->code == code;
}

/* What a failed aggregate or getMore means. */
static step failed(stream_reader *r, const char *what, const bson_error_t *e, const bson_t *reply)
{
    char pbuf[OP_POS_STRLEN];
    if (r->out_failed)
        return STEP_END;
    if (mongo_error_refused(e)) {
        fatal(r, QUEUE_END_REFUSED,
              "%s of the change stream refused: %s (code %u); the user needs the changeStream and find actions on "
              "the cluster (e.g. the read role on every database, or readAnyDatabase), or on each database "
              "[replication] include names",
              what, e->message, e->code);
        return STEP_END;
    }
    if (server_code(e, ERR_CHANGE_STREAM_HISTORY_LOST) || server_code(e, ERR_CAPPED_POSITION_LOST)) {
        fatal(r, QUEUE_END_RESUME_LOST,
              "the change stream's history no longer holds the resume point %s (%s, code %u): the changes since "
              "then are lost to oplog2pg; resync this service with --reimport",
              posfmt(&r->pos, pbuf), e->message, e->code);
        return STEP_END;
    }
    if (server_code(e, ERR_CHANGE_STREAM_FATAL) && !r->at_time) {
        /* The stream no longer finds the token (the pipeline or the filter changed since it was taken): start again
         * at its time; what came at that instant is applied again, idempotently. */
        log_warning("change stream: the server cannot resume after the saved token (%s, code 280): restarting at its "
                    "clusterTime %s with startAtOperationTime; the changes of that instant are applied again",
                    e->message, posfmt(&r->pos, pbuf));
        r->at_time = true;
        r->time = r->pos;
        backoff_reset(&r->bo);
        return STEP_RETRY;
    }
    if (server_code(e, ERR_BSON_OBJECT_TOO_LARGE)) {
        fatal(r, QUEUE_END_UNSUPPORTED,
              "an event after %s is larger than 16 MB (%s) and the server %s the $changeStreamSplitLargeEvent stage "
              "(MongoDB 7.0, 6.0.9), so it cannot be read from a change stream; nothing after %s was applied. Use a "
              "server with that stage, or [mongodb] source = oplog",
              posfmt(&r->pos, pbuf), e->message, (r->opts & OPT_SPLIT) ? "split it with" : "refused",
              posfmt(&r->pos, pbuf));
        return STEP_END;
    }
    bool resumable = mongo_error_network(e) || server_code(e, ERR_CURSOR_NOT_FOUND) ||
                     has_label(reply, "ResumableChangeStreamError") || mongo_error_retryable(e);
    if (!resumable && (has_label(reply, "NonResumableChangeStreamError") || server_code(e, ERR_CHANGE_STREAM_FATAL))) {
        fatal(r, QUEUE_END_UNSUPPORTED,
              "%s of the change stream failed for good: %s (code %u); stopped after %s, nothing after it applied", what,
              e->message, e->code, posfmt(&r->pos, pbuf));
        return STEP_END;
    }
    if (!resumable && strcmp(what, "aggregate") == 0 &&
        (e->domain == MONGOC_ERROR_SERVER || e->domain == MONGOC_ERROR_QUERY)) {
        /* A refusal of the opening aggregate that no retry mends (the change-streams specification resumes nothing
         * there): a token the server cannot read, streams switched off (DocumentDB's modifyChangeStreams), ... */
        fatal(r, QUEUE_END_UNSUPPORTED,
              "the server refuses to open the change stream after %s: %s (code %u); nothing after it was applied",
              posfmt(&r->pos, pbuf), e->message, e->code);
        return STEP_END;
    }
    if (r->parts_pushed) {
        /* Parts of a logical entry were handed on: the session must end uncommitted and start again (core/queue.h). */
        fatal(r, QUEUE_END_RETRY, "%s failed (%s, code %u) while a transaction's parts were being handed on", what,
              e->message, e->code);
        return STEP_END;
    }
    log_warning("change stream: %s failed (%s%s, code %u): re-opening after %s in %" PRIu64 " ms", what,
                mongo_error_network(e) ? "network: " : "", e->message, e->code, posfmt(&r->pos, pbuf),
                (uint64_t)r->bo.next_ms);
    return STEP_RETRY;
}

/* A fresh session pinned to one server (the primary, or a mongos), for one cursor's life. */
static step open_session(stream_reader *r)
{
    bson_error_t err;
    if (r->cs) {
        mongoc_client_session_destroy(r->cs);
        r->cs = NULL;
    }
    r->server_id = 0;
    r->cursor_id = 0;
    mongoc_server_description_t *sd = mongoc_client_select_server(r->client, false, NULL, &err);
    if (!sd) {
        bson_t none = BSON_INITIALIZER;
        return failed(r, "selecting the primary", &err, &none);
    }
    r->server_id = mongoc_server_description_id(sd);
    mongoc_server_description_destroy(sd);
    if (r->no_sessions)
        return STEP_OK;
    r->cs = mongoc_client_start_session(r->client, NULL, &err);
    if (!r->cs) {
        if (err.domain == MONGOC_ERROR_CLIENT && err.code == MONGOC_ERROR_CLIENT_SESSION_FAILURE) {
            log_info("change stream: the server does not support sessions (%s); reading without one", err.message);
            r->no_sessions = true;
            return STEP_OK;
        }
        bson_t none = BSON_INITIALIZER;
        return failed(r, "starting a session", &err, &none);
    }
    return STEP_OK;
}

/* cursor.id, cursor.<batch_key> and cursor.postBatchResumeToken (pbrt NULL when absent). */
static bool parse_cursor(const bson_t *reply, const char *batch_key, int64_t *id, bson_iter_t *batch,
                         const uint8_t **pbrt, uint32_t *pbrt_len)
{
    bson_iter_t it, cur;
    bool have_id = false, have_batch = false;
    *pbrt = NULL;
    *pbrt_len = 0;
    if (!bson_iter_init_find(&it, reply, "cursor") || !BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &cur))
        return false;
    while (bson_iter_next(&cur)) {
        const char *k = bson_iter_key(&cur);
        if (strcmp(k, "id") == 0 && (BSON_ITER_HOLDS_INT64(&cur) || BSON_ITER_HOLDS_INT32(&cur))) {
            *id = bson_iter_as_int64(&cur);
            have_id = true;
        } else if (strcmp(k, batch_key) == 0 && BSON_ITER_HOLDS_ARRAY(&cur)) {
            have_batch = bson_iter_recurse(&cur, batch);
        } else if (strcmp(k, "postBatchResumeToken") == 0 && BSON_ITER_HOLDS_DOCUMENT(&cur)) {
            bson_iter_document(&cur, pbrt_len, pbrt);
        }
    }
    return have_id && have_batch;
}

/* ---- pushing ---- */

static void publish_pos(stream_reader *r, const op_pos *p)
{
    atomic_store(&r->last_ts, ((uint64_t)p->secs << 32) | p->inc);
    atomic_store(&r->have_last, true);
}

static bool set_token(stream_reader *r, const uint8_t *t, uint32_t len)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        return false;
    memcpy(copy, t, len);
    free(r->token);
    r->token = copy;
    r->token_len = len;
    stream_token d;
    stream_token_decode(t, len, &d);
    r->token_invalidate = d.keystring && d.from_invalidate;
    return true;
}

static bool perdb_swap_token(stream_reader *r, op_entry *e);
static bool perdb_pushed(stream_reader *r);

/* Renders an entry and hands it on; the entry's token (if any) becomes the resume point. */
static step push_entry(stream_reader *r, op_entry *e, size_t reserved)
{
    char err[1024], pbuf[OP_POS_STRLEN];
    source_prepare_status ps = source_prepare_entry(e, r->cfg.filter, r->cfg.maps, err, sizeof err);
    if (ps != SOURCE_PREPARE_OK) {
        queue_pusher_unreserve(&r->out, reserved);
        op_entry_free(e);
        if (ps == SOURCE_PREPARE_NOMEM)
            fatal(r, QUEUE_END_NOMEM, "out of memory rendering a change event");
        else
            fatal(r, QUEUE_END_UNSUPPORTED, "%s; stopped before it (the last entry handed on is %s)", err,
                  posfmt(&r->pos, pbuf));
        return STEP_END;
    }
    op_pos p = e->pos;
    bool more = e->more;
    if (e->token && !set_token(r, e->token, e->token_len)) {
        queue_pusher_unreserve(&r->out, reserved);
        op_entry_free(e);
        fatal(r, QUEUE_END_NOMEM, "out of memory keeping a resume token");
        return STEP_END;
    }
    if (!queue_pusher_add(&r->out, e, reserved)) {
        r->out_failed = true;
        return STEP_END;
    }
    if (more) {
        r->parts_pushed = true;
        return STEP_OK;
    }
    r->parts_pushed = false;
    r->at_time = false; /* from now on the resume point is a token pushed */
    if (r->perdb && !perdb_pushed(r)) {
        fatal(r, QUEUE_END_NOMEM, "out of memory noting the per-database streams' positions");
        return STEP_END;
    }
    r->pos = p;
    r->idle_due = true;
    atomic_fetch_add(&r->entries, 1);
    publish_pos(r, &p);
    return STEP_OK;
}

/* Decodes the open group (all of it, or a part) and hands it on. */
static step push_group(stream_reader *r, bool last)
{
    char err[1024], pbuf[OP_POS_STRLEN];
    op_entry *e = malloc(sizeof *e);
    bson_t raw;
    if (!e) {
        fatal(r, QUEUE_END_NOMEM, "out of memory decoding change events");
        return STEP_END;
    }
    stream_build_status bs = stream_group_build(&r->group, last, r->cfg.decode_flags, e, &raw, err, sizeof err);
    if (bs != STREAM_BUILD_OK) {
        bson_destroy(&raw);
        free(e);
        if (bs == STREAM_BUILD_NOMEM)
            fatal(r, QUEUE_END_NOMEM, "out of memory decoding change events");
        else
            fatal(r, QUEUE_END_UNSUPPORTED,
                  "%s %s; stopped before it (the last entry handed on is %s), a fixed version resumes there",
                  bs == STREAM_BUILD_MALFORMED ? "malformed" : "unsupported", err, posfmt(&r->pos, pbuf));
        return STEP_END;
    }
    if (r->perdb && e->token && !perdb_swap_token(r, e)) {
        bson_destroy(&raw);
        op_entry_free(e);
        fatal(r, QUEUE_END_NOMEM, "out of memory noting the per-database streams' positions");
        return STEP_END;
    }
    size_t reserved = raw.len;
    if (!queue_pusher_reserve(&r->out, reserved)) {
        bson_destroy(&raw);
        op_entry_free(e);
        r->out_failed = true;
        return STEP_END;
    }
    step s = push_entry(r, e, reserved); /* renders while the raw entry it may borrow from lives */
    bson_destroy(&raw);
    return s;
}

/* A noop entry for a post-batch resume token past the last entry pushed. */
static step push_mark(stream_reader *r, const uint8_t *pbrt, uint32_t len, const stream_token *t)
{
    /* A high-water mark at T once the scan has passed T says every event up to T came (the server moves it to an
     * entry's ts only past that entry's events: plan_executor_pipeline.cpp), so the position is T. The mark of a
     * stream just opened (at startAtOperationTime, or after a token) is where it opened, whose events may still
     * come: the position is then the tick before (the token, committed with it, resumes at T either way). */
    op_pos at = {.secs = t->secs, .inc = t->inc, .term = -1};
    if (r->have_opened_at && op_pos_cmp(&at, &r->opened_at) <= 0) {
        if (at.inc > 0) {
            at.inc--;
        } else if (at.secs > 0) {
            at.secs--;
            at.inc = UINT32_MAX;
        }
    }
    if (op_pos_cmp(&at, &r->pos) <= 0)
        return STEP_OK;
    op_entry *e = malloc(sizeof *e);
    if (!e || !op_entry_alloc(e, &at, 1)) {
        free(e);
        fatal(r, QUEUE_END_NOMEM, "out of memory noting the change stream's position");
        return STEP_END;
    }
    e->ops[0].kind = OP_NOOP;
    e->ops[0].reason = "change stream position";
    e->token = malloc(len);
    if (!e->token) {
        op_entry_free(e);
        fatal(r, QUEUE_END_NOMEM, "out of memory noting the change stream's position");
        return STEP_END;
    }
    memcpy(e->token, pbrt, len);
    e->token_len = len;
    return push_entry(r, e, 0);
}

static step maybe_idle(stream_reader *r)
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

/* One whole event (fragments joined): into the group, the group handed on first when the event starts another
 * clusterTime, and a part handed on when the group is full. */
static step take_event(stream_reader *r, const bson_t *ev, const stream_event_info *info)
{
    char err[1536], pbuf[OP_POS_STRLEN];
    if (r->group.open && (info->secs != r->group.secs || info->inc != r->group.inc)) {
        step s = push_group(r, true);
        if (s != STEP_OK)
            return s;
    }
    op_pos at = {.secs = info->secs, .inc = info->inc, .term = -1};
    if (op_pos_cmp(&at, &r->pos) < 0) {
        fatal(r, QUEUE_END_UNSUPPORTED,
              "the change stream went back in time: an event at %s after the entry at %s; stopped there",
              posfmt(&at, pbuf), posfmt(&r->pos, err));
        return STEP_END;
    }
    bson_t one = BSON_INITIALIZER;
    stream_ev_status st = stream_event_to_op_ex(ev, &one, r->cfg.lookup, err, sizeof err);
    if (st != STREAM_EV_OK) {
        bson_destroy(&one);
        if (st == STREAM_EV_NOMEM)
            fatal(r, QUEUE_END_NOMEM, "out of memory reading a change event");
        else
            fatal(r, QUEUE_END_UNSUPPORTED, "%s; stopped before it (the last entry handed on is %s)", err,
                  posfmt(&r->pos, pbuf));
        return STEP_END;
    }
    bool ok = stream_group_add(&r->group, info->secs, info->inc, &one, info->token, info->token_len, info->has_txn);
    bson_destroy(&one);
    if (!ok) {
        fatal(r, QUEUE_END_NOMEM, "out of memory holding a transaction's change events");
        return STEP_END;
    }
    return stream_group_full(&r->group) ? push_group(r, false) : STEP_OK;
}

/* Every event of a batch, then what the batch's end tells (the post-batch resume token, an under-full batch). */
static step take_batch(stream_reader *r, bson_iter_t *batch, const uint8_t *pbrt, uint32_t pbrt_len, int32_t asked,
                       const char *what)
{
    char pbuf[OP_POS_STRLEN], err[512];
    uint32_t count = 0;
    while (bson_iter_next(batch)) {
        const uint8_t *data;
        uint32_t len;
        bson_t ev;
        stream_event_info info;
        count++;
        if (!BSON_ITER_HOLDS_DOCUMENT(batch)) {
            fatal(r, QUEUE_END_UNSUPPORTED,
                  "malformed reply to %s: element %s of the batch is not a document; "
                  "stopped after %s",
                  what, bson_iter_key(batch), posfmt(&r->pos, pbuf));
            return STEP_END;
        }
        bson_iter_document(batch, &len, &data);
        /* A fragment of a split event need not hold the clusterTime (the fields are spread over the fragments); the
         * whole event must. */
        if (!bson_init_static(&ev, data, len) || !stream_event_info_read(&ev, &info) ||
            (!info.has_time && !info.split) || !info.token) {
            fatal(r, QUEUE_END_UNSUPPORTED,
                  "malformed change event in the reply to %s (no clusterTime Timestamp or no _id token); stopped "
                  "after %s",
                  what, posfmt(&r->pos, pbuf));
            return STEP_END;
        }
        step s;
        if (info.split || r->frag.active) {
            bool done = false;
            stream_ev_status st =
                info.split ? stream_frag_add(&r->frag, &ev, &info, &done, err, sizeof err) : STREAM_EV_MALFORMED;
            if (!info.split)
                snprintf(err, sizeof err, "a whole event where the next fragment of a split event was expected");
            if (st != STREAM_EV_OK) {
                fatal(r, st == STREAM_EV_NOMEM ? QUEUE_END_NOMEM : QUEUE_END_UNSUPPORTED,
                      "change stream: %s; stopped after %s", err, posfmt(&r->pos, pbuf));
                return STEP_END;
            }
            if (!done)
                continue;
            stream_event_info whole;
            if (!stream_event_info_read(&r->frag.merged, &whole) || !whole.has_time || !whole.token) {
                fatal(r, QUEUE_END_UNSUPPORTED,
                      "malformed split event in the reply to %s: its fragments hold no clusterTime Timestamp or no "
                      "_id token; stopped after %s",
                      what, posfmt(&r->pos, pbuf));
                return STEP_END;
            }
            s = take_event(r, &r->frag.merged, &whole);
            stream_frag_clear(&r->frag);
        } else {
            s = take_event(r, &ev, &info);
        }
        if (s != STEP_OK)
            return s;
    }
    if (batch->err_off != 0) {
        fatal(r, QUEUE_END_UNSUPPORTED, "malformed reply to %s: the batch is corrupt; stopped after %s", what,
              posfmt(&r->pos, pbuf));
        return STEP_END;
    }
    stream_token t;
    memset(&t, 0, sizeof t);
    if (pbrt) {
        r->pbrt_seen = true;
        stream_token_decode(pbrt, pbrt_len, &t);
    }
    bool under_full = count < (uint32_t)(asked > 0 ? asked : 1);
    /* An empty batch also closes the group: the rest of a clusterTime's events, were there any, would be in the
     * server's hands already (unwound from the one oplog entry it has read), and would have come at once. */
    if (r->group.open && !r->frag.active &&
        (stream_group_closes(&r->group, &t) || (!r->pbrt_seen && under_full) || count == 0)) {
        step s = push_group(r, true);
        if (s != STEP_OK)
            return s;
    }
    if (count == 0 && !r->group.open && pbrt && t.keystring && t.type == STREAM_TOKEN_HWM) {
        step s = push_mark(r, pbrt, pbrt_len, &t);
        if (s != STEP_OK)
            return s;
    }
    if (under_full)
        return maybe_idle(r);
    return STEP_OK;
}

/* ---- the stream ---- */

typedef struct dblist {
    bson_t arr;
    uint32_t n;
    bool ok;
} dblist;

static void add_db(const char *db, size_t len, void *arg)
{
    dblist *l = arg;
    char key[16];
    const char *k;
    bson_uint32_to_string(l->n++, &k, key, sizeof key);
    l->ok = l->ok && bson_append_utf8(&l->arr, k, -1, db, (int)len);
}

/* {$match: {$or: [{ns.db: {$in: DBS}}, {to.db: ...}, {operationDescription.to.db: ...}]}} when the namespace filter
 * names its databases exactly (a rename from elsewhere into them must come, for the filter to refuse it as from the
 * oplog); else nothing is appended and every event comes. */
static bool append_match(stream_reader *r, bson_t *pipe, const char *key)
{
    dblist l = {.n = 0, .ok = true};
    bson_init(&l.arr);
    if (!nsfilter_each_exact_db(r->cfg.filter, add_db, &l) || l.n == 0) {
        bson_destroy(&l.arr);
        return l.ok;
    }
    static const char *const fields[] = {"ns.db", "to.db", "operationDescription.to.db"};
    bson_t stage, match, or, one, in;
    bool ok = l.ok && BSON_APPEND_DOCUMENT_BEGIN(pipe, key, &stage) &&
              BSON_APPEND_DOCUMENT_BEGIN(&stage, "$match", &match) && BSON_APPEND_ARRAY_BEGIN(&match, "$or", & or);
    for (int i = 0; ok && i < 3; i++) {
        char k[4];
        snprintf(k, sizeof k, "%d", i);
        ok = BSON_APPEND_DOCUMENT_BEGIN(& or, k, &one) && BSON_APPEND_DOCUMENT_BEGIN(&one, fields[i], &in) &&
             BSON_APPEND_ARRAY(&in, "$in", &l.arr) && bson_append_document_end(&one, &in) &&
             bson_append_document_end(& or, &one);
    }
    ok = ok && bson_append_array_end(&match, & or) && bson_append_document_end(&stage, &match) &&
         bson_append_document_end(pipe, &stage);
    bson_destroy(&l.arr);
    r->matched = ok;
    return ok;
}

static bool build_aggregate(stream_reader *r, bson_t *cmd)
{
    bson_t pipe, stage, cs, cur, empty;
    bool ok = BSON_APPEND_INT32(cmd, "aggregate", 1) && BSON_APPEND_ARRAY_BEGIN(cmd, "pipeline", &pipe) &&
              BSON_APPEND_DOCUMENT_BEGIN(&pipe, "0", &stage) &&
              BSON_APPEND_DOCUMENT_BEGIN(&stage, "$changeStream", &cs) &&
              BSON_APPEND_BOOL(&cs, "allChangesForCluster", true);
    if (ok && (r->opts & OPT_EXPANDED))
        ok = BSON_APPEND_BOOL(&cs, "showExpandedEvents", true);
    if (ok && (r->opts & OPT_RAW))
        ok = BSON_APPEND_BOOL(&cs, "showRawUpdateDescription", true);
    if (ok && r->cfg.lookup)
        ok = BSON_APPEND_UTF8(&cs, "fullDocument", "updateLookup");
    else if (ok && (r->opts & OPT_FULLDOC))
        ok = BSON_APPEND_UTF8(&cs, "fullDocument", "whenAvailable");
    if (ok && r->token && !r->at_time) {
        bson_t tok;
        ok = bson_init_static(&tok, r->token, r->token_len) &&
             BSON_APPEND_DOCUMENT(&cs, r->token_invalidate ? "startAfter" : "resumeAfter", &tok);
    } else if (ok) {
        op_pos at = r->at_time ? r->time : r->pos;
        if (!r->at_time) { /* the first event after the committed position */
            if (at.inc == UINT32_MAX) {
                at.secs++;
                at.inc = 0;
            } else {
                at.inc++;
            }
        }
        ok = BSON_APPEND_TIMESTAMP(&cs, "startAtOperationTime", at.secs, at.inc);
        r->have_opened_at = true;
        r->opened_at = at;
    }
    ok = ok && bson_append_document_end(&stage, &cs) && bson_append_document_end(&pipe, &stage);
    r->matched = false;
    ok = ok && append_match(r, &pipe, "1");
    if (ok && (r->opts & OPT_SPLIT))
        ok = BSON_APPEND_DOCUMENT_BEGIN(&pipe, r->matched ? "2" : "1", &stage) &&
             BSON_APPEND_DOCUMENT_BEGIN(&stage, "$changeStreamSplitLargeEvent", &empty) &&
             bson_append_document_end(&stage, &empty) && bson_append_document_end(&pipe, &stage);
    ok = ok && bson_append_array_end(cmd, &pipe) && BSON_APPEND_DOCUMENT_BEGIN(cmd, "cursor", &cur) &&
         BSON_APPEND_INT32(&cur, "batchSize", 0) && bson_append_document_end(cmd, &cur);
    return ok;
}

/* Before the first success: an option the server refuses by name is dropped (logged) and the aggregate sent again.
 * True when one was dropped. */
static bool drop_refused_option(stream_reader *r, const bson_error_t *e)
{
    if (r->probed || !(e->domain == MONGOC_ERROR_SERVER || e->domain == MONGOC_ERROR_QUERY))
        return false;
    for (size_t i = 0; optnames[i].name; i++) {
        if (!(r->opts & optnames[i].bit) || strstr(e->message, optnames[i].name) == NULL)
            continue;
        r->opts &= ~optnames[i].bit;
        r->refused |= optnames[i].bit;
        log_warning("change stream: the server refuses %s (%s, code %u): reading without it", optnames[i].name,
                    e->message, e->code);
        return true;
    }
    return false;
}

static bool perdb_is_composite(const uint8_t *tok, uint32_t len);
static step perdb_setup(stream_reader *r, const bson_error_t *refusal);
static step follow_perdb(stream_reader *r);

static step follow_once(stream_reader *r)
{
    bson_t cmd, reply;
    bson_error_t err;
    bson_iter_t batch;
    const uint8_t *pbrt;
    uint32_t pbrt_len;
    char pbuf[OP_POS_STRLEN];

    if (!r->perdb && r->token && perdb_is_composite(r->token, r->token_len)) {
        step s = perdb_setup(r, NULL);
        if (s != STEP_OK)
            return s;
    }
    if (r->perdb)
        return follow_perdb(r);
    stream_group_clear(&r->group); /* what was not handed on is read again after the resume point */
    stream_frag_clear(&r->frag);
    step s = open_session(r);
    if (s != STEP_OK)
        return s;
    for (;;) {
        bson_init(&cmd);
        if (!build_aggregate(r, &cmd)) {
            bson_destroy(&cmd);
            fatal(r, QUEUE_END_NOMEM, "out of memory building the change stream's aggregate");
            return STEP_END;
        }
        bool ok = run_cmd(r, &cmd, &reply, &err);
        bson_destroy(&cmd);
        if (ok)
            break;
        if (!r->probed && (err.domain == MONGOC_ERROR_SERVER || err.domain == MONGOC_ERROR_QUERY) &&
            (mongo_error_refused(&err) || strstr(err.message, "allChangesForCluster") != NULL)) {
            /* Unauthorized (the user may read some databases only) or not supported: one stream per database. */
            bson_destroy(&reply);
            s = perdb_setup(r, &err);
            return s == STEP_OK ? follow_perdb(r) : s;
        }
        bool dropped = drop_refused_option(r, &err);
        if (dropped && r->cfg.updates == STREAM_UPDATES_RAW && !(r->opts & OPT_RAW)) {
            bson_destroy(&reply);
            fatal(r, QUEUE_END_UNSUPPORTED,
                  "the server refuses showRawUpdateDescription (%s), which [mongodb] change_stream_updates = raw "
                  "requires; use change_stream_updates = auto or description",
                  err.message);
            return STEP_END;
        }
        if (dropped && !(r->opts & OPT_RAW) && !(r->refused & OPT_FULLDOC))
            r->opts |= OPT_FULLDOC; /* updates come as descriptions now: the post-image is their fallback */
        if (!dropped) {
            s = failed(r, "aggregate", &err, &reply);
            bson_destroy(&reply);
            return s;
        }
        bson_destroy(&reply);
    }
    if (!r->probed) {
        r->probed = true;
        log_info("change stream: cluster-wide, showExpandedEvents %s, updates as %s, post-images %s, large events "
                 "%s",
                 (r->opts & OPT_EXPANDED) ? "on" : "refused",
                 (r->opts & OPT_RAW) ? "the raw $v:2 diff" : "updateDescription",
                 (r->opts & OPT_FULLDOC) ? "when available" : "off",
                 (r->opts & OPT_SPLIT) ? "split" : "not split (the server refuses the split stage)");
    }
    if (!parse_cursor(&reply, "firstBatch", &r->cursor_id, &batch, &pbrt, &pbrt_len)) {
        bson_destroy(&reply);
        bson_set_error(&err, 0, 0, "reply without cursor.id/firstBatch");
        bson_t none = BSON_INITIALIZER;
        return failed(r, "aggregate", &err, &none);
    }
    if (r->at_time)
        log_info("change stream: opened at %s", posfmt(&r->time, pbuf));
    backoff_reset(&r->bo);
    if (pbrt != NULL) {
        /* The first batch's high-water mark is where the stream opens (a time asked for, or the token resumed
         * after), not a point the scan has passed: its own events may still come (push_mark). */
        stream_token first;
        memset(&first, 0, sizeof first);
        if (stream_token_decode(pbrt, pbrt_len, &first) && first.keystring && first.type == STREAM_TOKEN_HWM) {
            op_pos at = {.secs = first.secs, .inc = first.inc, .term = -1};
            if (!r->have_opened_at || op_pos_cmp(&at, &r->opened_at) > 0)
                r->opened_at = at;
            r->have_opened_at = true;
        }
    }
    s = take_batch(r, &batch, pbrt, pbrt_len, 0, "aggregate");
    bson_destroy(&reply);
    bool huge = false; /* the last batch's events weighed READER_REPLY_BYTES or more each */

    while (s == STEP_OK) {
        if (stopping(r))
            return STEP_END;
        if (r->cursor_id == 0) {
            log_warning("change stream: the server closed the cursor: re-opening after %s", posfmt(&r->pos, pbuf));
            return r->parts_pushed
                       ? (fatal(r, QUEUE_END_RETRY, "the change stream's cursor closed mid-transaction"), STEP_END)
                       : STEP_RETRY;
        }
        if (huge && !r->parts_pushed) {
            /* Events of several MB each: the next one arrives twice over (libmongoc's buffer and its copy), so let
             * the applier write and free the last ones first, as the oplog reader does (core/queue.h). Not while
             * parts of a transaction are out: the applier commits nothing before its last part, so it would never
             * say it is done. */
            if (!queue_pusher_flush(&r->out) || !queue_wait_drained(r->q, &r->stop))
                return STEP_END;
            memory_release();
        }
        bson_t gm = BSON_INITIALIZER;
        int32_t asked = r->cfg.batch_size;
        BSON_APPEND_INT64(&gm, "getMore", r->cursor_id);
        BSON_APPEND_UTF8(&gm, "collection", "$cmd.aggregate");
        BSON_APPEND_INT32(&gm, "batchSize", asked);
        /* While a group is open, only an empty batch may say it is whole (take_batch): ask for the next one with a
         * short await, so the last transaction of a burst is not held back until the next write or periodic noop. */
        BSON_APPEND_INT64(&gm, "maxTimeMS", r->group.open && !r->frag.active ? READER_PROBE_MS : r->cfg.await_ms);
        bool ok = run_cmd(r, &gm, &reply, &err);
        bson_destroy(&gm);
        if (!ok) {
            r->cursor_id = 0;
            s = failed(r, "getMore", &err, &reply);
            bson_destroy(&reply);
            return s;
        }
        if (!parse_cursor(&reply, "nextBatch", &r->cursor_id, &batch, &pbrt, &pbrt_len)) {
            bson_destroy(&reply);
            r->cursor_id = 0;
            bson_set_error(&err, 0, 0, "reply without cursor.id/nextBatch");
            bson_t none = BSON_INITIALIZER;
            return failed(r, "getMore", &err, &none);
        }
        backoff_reset(&r->bo);
        uint32_t count = 0;
        for (bson_iter_t c = batch; bson_iter_next(&c);)
            count++;
        huge = count > 0 && reply.len / count >= READER_REPLY_BYTES;
        s = take_batch(r, &batch, pbrt, pbrt_len, asked, "getMore");
        bson_destroy(&reply);
    }
    return s;
}

/* ---- one stream per database ---- */

static bool perdb_is_composite(const uint8_t *tok, uint32_t len)
{
    bson_t b;
    bson_iter_t it;
    return bson_init_static(&b, tok, len) && bson_iter_init_find(&it, &b, "perdb") && BSON_ITER_HOLDS_DOCUMENT(&it);
}

/* The entry's token (its last event's) becomes the composite of every database's resume point. */
static bool perdb_swap_token(stream_reader *r, op_entry *e)
{
    bson_t doc = BSON_INITIALIZER;
    if (!perdb_token(&r->pm, &doc)) {
        bson_destroy(&doc);
        return false;
    }
    uint8_t *copy = malloc(doc.len);
    if (!copy) {
        bson_destroy(&doc);
        return false;
    }
    memcpy(copy, bson_get_data(&doc), doc.len);
    free(e->token);
    e->token = copy;
    e->token_len = doc.len;
    bson_destroy(&doc);
    return true;
}

/* A whole entry was handed on: every lane's resume point is now what a reopening resumes from. */
static bool perdb_pushed(stream_reader *r)
{
    if (!perdb_commit(&r->pm))
        return false;
    for (size_t i = 0; i < r->pm.n; i++)
        if (r->pm.lanes[i].pushed)
            r->lanes[i].at_time = false;
    return true;
}

typedef struct lane_ctx {
    stream_reader *r;
    bool ok;
} lane_ctx;

static void add_lane(const char *db, size_t len, void *arg)
{
    lane_ctx *c = arg;
    char name[256]; /* a database name is at most 64 bytes */
    if (!c->ok || len >= sizeof name)
        return;
    memcpy(name, db, len);
    name[len] = '\0';
    if (perdb_find(&c->r->pm, name) < 0)
        c->ok = perdb_add_lane(&c->r->pm, db, len);
}

/* Sets up one lane per database the filter names; refusal: the cluster-wide stream's error (NULL when a committed
 * composite token says so). */
static step perdb_setup(stream_reader *r, const bson_error_t *refusal)
{
    lane_ctx c = {.r = r, .ok = true};
    bool exact = nsfilter_each_exact_db(r->cfg.filter, add_lane, &c);
    if (!c.ok) {
        fatal(r, QUEUE_END_NOMEM, "out of memory setting up the per-database change streams");
        return STEP_END;
    }
    if (!exact || r->pm.n == 0) {
        char why[768];
        if (refusal)
            snprintf(why, sizeof why, "the server refuses the cluster-wide change stream (%s, code %u)",
                     refusal->message, refusal->code);
        else
            snprintf(why, sizeof why, "the committed position is one resume token per database");
        fatal(r, refusal && mongo_error_refused(refusal) ? QUEUE_END_REFUSED : QUEUE_END_UNSUPPORTED,
              "%s; one change stream per database can replace it only when [replication] include names every "
              "database exactly (a pattern such as 'shop.*', not '*.*' or 'shop*.*'): name the databases in "
              "include, or grant this user the changeStream and find actions on every database (e.g. the "
              "readAnyDatabase role)",
              why);
        return STEP_END;
    }
    size_t align = _Alignof(lane_io), size = (r->pm.n * sizeof(lane_io) + align - 1) / align * align;
    r->lanes = aligned_alloc(align, size);
    if (!r->lanes) {
        fatal(r, QUEUE_END_NOMEM, "out of memory setting up the per-database change streams");
        return STEP_END;
    }
    memset(r->lanes, 0, size);
    for (size_t i = 0; i < r->pm.n; i++)
        stream_frag_init(&r->lanes[i].frag);
    r->perdb = true;
    bool nomem = false;
    if (r->token && perdb_parse(&r->pm, r->token, r->token_len, &nomem)) {
        r->perdb_at_pos = true; /* a database without a token (added to the filter since) starts at the position */
    } else if (nomem) {
        fatal(r, QUEUE_END_NOMEM, "out of memory reading the committed per-database resume tokens");
        return STEP_END;
    } else if (r->token) {
        /* a cluster-wide token committed before the server refused that stream: every database starts at its
         * clusterTime, the changes of that instant applied again (idempotently) */
        r->perdb_at_pos = true;
    }
    char list[512] = "";
    size_t used = 0;
    for (size_t i = 0; i < r->pm.n && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", r->pm.lanes[i].db);
    if (refusal)
        log_warning("change stream: the server refuses the cluster-wide stream (%s, code %u): reading one stream per "
                    "database instead (%zu: %s), merged in clusterTime order",
                    refusal->message, refusal->code, r->pm.n, list);
    else
        log_info("change stream: resuming one stream per database (%zu: %s), merged in clusterTime order", r->pm.n,
                 list);
    return STEP_OK;
}

static void kill_lanes(stream_reader *r)
{
    for (size_t i = 0; r->perdb && i < r->pm.n; i++)
        kill_cursor_on(r, r->pm.lanes[i].db, &r->lanes[i].cursor_id);
}

/* Where a lane with no resume point starts. */
static op_pos lane_start(const stream_reader *r)
{
    op_pos at = r->pos;
    if (!r->perdb_at_pos) { /* the first event after the committed position */
        if (at.inc == UINT32_MAX) {
            at.secs++;
            at.inc = 0;
        } else {
            at.inc++;
        }
    }
    return at;
}

static bool build_lane_aggregate(stream_reader *r, size_t i, bson_t *cmd)
{
    lane_io *lio = &r->lanes[i];
    const uint8_t *point;
    uint32_t point_len;
    perdb_lane_point(&r->pm, i, &point, &point_len);
    bson_t pipe, stage, cs, cur, empty;
    bool ok = BSON_APPEND_INT32(cmd, "aggregate", 1) && BSON_APPEND_ARRAY_BEGIN(cmd, "pipeline", &pipe) &&
              BSON_APPEND_DOCUMENT_BEGIN(&pipe, "0", &stage) &&
              BSON_APPEND_DOCUMENT_BEGIN(&stage, "$changeStream", &cs);
    if (ok && (r->opts & OPT_EXPANDED))
        ok = BSON_APPEND_BOOL(&cs, "showExpandedEvents", true);
    if (ok && (r->opts & OPT_RAW))
        ok = BSON_APPEND_BOOL(&cs, "showRawUpdateDescription", true);
    if (ok && r->cfg.lookup)
        ok = BSON_APPEND_UTF8(&cs, "fullDocument", "updateLookup");
    else if (ok && (r->opts & OPT_FULLDOC))
        ok = BSON_APPEND_UTF8(&cs, "fullDocument", "whenAvailable");
    lio->have_opened_at = false;
    if (ok && point && !lio->at_time) {
        bson_t tok;
        stream_token d;
        stream_token_decode(point, point_len, &d);
        ok = bson_init_static(&tok, point, point_len) &&
             BSON_APPEND_DOCUMENT(&cs, d.keystring && d.from_invalidate ? "startAfter" : "resumeAfter", &tok);
    } else if (ok) {
        op_pos at = lio->at_time ? lio->time : lane_start(r);
        ok = BSON_APPEND_TIMESTAMP(&cs, "startAtOperationTime", at.secs, at.inc);
        lio->have_opened_at = true;
        lio->opened_at = at;
    }
    ok = ok && bson_append_document_end(&stage, &cs) && bson_append_document_end(&pipe, &stage);
    if (ok && (r->opts & OPT_SPLIT))
        ok = BSON_APPEND_DOCUMENT_BEGIN(&pipe, "1", &stage) &&
             BSON_APPEND_DOCUMENT_BEGIN(&stage, "$changeStreamSplitLargeEvent", &empty) &&
             bson_append_document_end(&stage, &empty) && bson_append_document_end(&pipe, &stage);
    ok = ok && bson_append_array_end(cmd, &pipe) && BSON_APPEND_DOCUMENT_BEGIN(cmd, "cursor", &cur) &&
         BSON_APPEND_INT32(&cur, "batchSize", 0) && bson_append_document_end(cmd, &cur);
    return ok;
}

/* Every event of a lane's batch into its queue (fragments joined), then the horizon its post-batch token shows. */
static step lane_take_batch(stream_reader *r, size_t i, bson_iter_t *batch, const uint8_t *pbrt, uint32_t pbrt_len,
                            const char *what)
{
    char pbuf[OP_POS_STRLEN], err[512];
    lane_io *lio = &r->lanes[i];
    const char *db = r->pm.lanes[i].db;
    uint32_t count = 0;
    while (bson_iter_next(batch)) {
        count++;
        const uint8_t *data;
        uint32_t len;
        bson_t ev;
        stream_event_info info;
        if (!BSON_ITER_HOLDS_DOCUMENT(batch)) {
            fatal(r, QUEUE_END_UNSUPPORTED, "malformed reply to %s on %s: an element of the batch is not a document",
                  what, db);
            return STEP_END;
        }
        bson_iter_document(batch, &len, &data);
        if (!bson_init_static(&ev, data, len) || !stream_event_info_read(&ev, &info) ||
            (!info.has_time && !info.split) || !info.token) {
            fatal(r, QUEUE_END_UNSUPPORTED,
                  "malformed change event in the reply to %s on %s (no clusterTime Timestamp or no _id token); "
                  "stopped after %s",
                  what, db, posfmt(&r->pos, pbuf));
            return STEP_END;
        }
        const bson_t *whole_ev = &ev;
        stream_event_info whole = info;
        if (info.split || lio->frag.active) {
            bool done = false;
            stream_ev_status st =
                info.split ? stream_frag_add(&lio->frag, &ev, &info, &done, err, sizeof err) : STREAM_EV_MALFORMED;
            if (!info.split)
                snprintf(err, sizeof err, "a whole event where the next fragment of a split event was expected");
            if (st != STREAM_EV_OK) {
                fatal(r, st == STREAM_EV_NOMEM ? QUEUE_END_NOMEM : QUEUE_END_UNSUPPORTED,
                      "%s (database %s); stopped after %s", err, db, posfmt(&r->pos, pbuf));
                return STEP_END;
            }
            if (!done)
                continue;
            if (!stream_event_info_read(&lio->frag.merged, &whole) || !whole.has_time || !whole.token) {
                fatal(r, QUEUE_END_UNSUPPORTED,
                      "malformed split event on %s: its fragments hold no clusterTime or no _id; stopped after %s", db,
                      posfmt(&r->pos, pbuf));
                return STEP_END;
            }
            whole_ev = &lio->frag.merged;
        }
        bool inval = strcmp(whole.type, "invalidate") == 0;
        stream_token t;
        memset(&t, 0, sizeof t);
        stream_token_decode(whole.token, whole.token_len, &t);
        bool ok = perdb_lane_add(&r->pm, i, bson_get_data(whole_ev), whole_ev->len, whole.secs, whole.inc,
                                 t.keystring ? t.txn_op_index : 0, whole.token, whole.token_len, inval);
        stream_frag_clear(&lio->frag);
        if (!ok) {
            fatal(r, QUEUE_END_NOMEM, "out of memory holding change events of %s", db);
            return STEP_END;
        }
        if (inval) {
            /* dropDatabase (or a rename away) ends a database's stream: it opens again after this event
             * (startAfter), so nothing after it is missed */
            lio->reopen = true;
            log_notice("change stream: the stream of database %s was invalidated (the database was dropped); "
                       "reopening it after that event",
                       db);
        }
    }
    if (batch->err_off != 0) {
        fatal(r, QUEUE_END_UNSUPPORTED, "malformed reply to %s on %s: the batch is corrupt; stopped after %s", what, db,
              posfmt(&r->pos, pbuf));
        return STEP_END;
    }
    if (!pbrt) {
        fatal(r, QUEUE_END_UNSUPPORTED,
              "the server sends no post-batch resume token, which merging one change stream per database requires "
              "(without it an idle database would hold every other back); grant this user the changeStream and find "
              "actions on every database so that one cluster-wide stream is read");
        return STEP_END;
    }
    r->pbrt_seen = true;
    stream_token t;
    memset(&t, 0, sizeof t);
    stream_token_decode(pbrt, pbrt_len, &t);
    bool incl = false;
    if (t.keystring && t.type == STREAM_TOKEN_HWM) {
        op_pos at = {.secs = t.secs, .inc = t.inc, .term = -1};
        incl = !(lio->have_opened_at && op_pos_cmp(&at, &lio->opened_at) <= 0);
    }
    /* An empty getMore shows its stream holds nothing more up to its token: the rest of a clusterTime's events, were
     * there any, would be in the server's hands already (unwound from the one oplog entry it read) and would have
     * come at once (as take_batch closes a group). */
    if (count == 0 && strcmp(what, "getMore") == 0 && !lio->frag.active)
        incl = true;
    if (!perdb_lane_batch_end(&r->pm, i, pbrt, pbrt_len, t.keystring, t.secs, t.inc, incl)) {
        fatal(r, QUEUE_END_NOMEM, "out of memory noting a change stream's position");
        return STEP_END;
    }
    return STEP_OK;
}

/* Opens (or reopens) lane i's stream at its resume point and takes its first batch. */
static step lane_open(stream_reader *r, size_t i)
{
    bson_t cmd, reply;
    bson_error_t err;
    bson_iter_t batch;
    const uint8_t *pbrt;
    uint32_t pbrt_len;
    lane_io *lio = &r->lanes[i];
    const char *db = r->pm.lanes[i].db;
    lio->reopen = false;
    stream_frag_clear(&lio->frag);
    for (;;) {
        bson_init(&cmd);
        if (!build_lane_aggregate(r, i, &cmd)) {
            bson_destroy(&cmd);
            fatal(r, QUEUE_END_NOMEM, "out of memory building a change stream's aggregate");
            return STEP_END;
        }
        bool ok = run_cmd_on(r, db, &cmd, &reply, &err);
        bson_destroy(&cmd);
        if (ok)
            break;
        bool dropped = drop_refused_option(r, &err);
        if (dropped && r->cfg.updates == STREAM_UPDATES_RAW && !(r->opts & OPT_RAW)) {
            bson_destroy(&reply);
            fatal(r, QUEUE_END_UNSUPPORTED,
                  "the server refuses showRawUpdateDescription (%s), which [mongodb] change_stream_updates = raw "
                  "requires; use change_stream_updates = auto or description",
                  err.message);
            return STEP_END;
        }
        if (dropped && !(r->opts & OPT_RAW) && !(r->refused & OPT_FULLDOC))
            r->opts |= OPT_FULLDOC;
        if (dropped) {
            bson_destroy(&reply);
            continue;
        }
        if (server_code(&err, ERR_CHANGE_STREAM_FATAL) && !lio->at_time && !r->out_failed) {
            char pbuf[OP_POS_STRLEN];
            log_warning("change stream: the server cannot resume database %s's stream after its saved token (%s, "
                        "code 280): restarting it at %s with startAtOperationTime; the changes of that instant are "
                        "applied again",
                        db, err.message, posfmt(&r->pos, pbuf));
            lio->at_time = true;
            lio->time = r->pos;
            bson_destroy(&reply);
            return STEP_RETRY;
        }
        step s = mongo_error_refused(&err)
                     ? (fatal(r, QUEUE_END_REFUSED,
                              "the change stream of database %s is refused too: %s (code %u); the user needs the "
                              "changeStream and find actions on every database [replication] include names",
                              db, err.message, err.code),
                        STEP_END)
                     : failed(r, "aggregate", &err, &reply);
        bson_destroy(&reply);
        return s;
    }
    if (!r->probed) {
        r->probed = true;
        log_info("change stream: per database, showExpandedEvents %s, updates as %s, post-images %s, large events "
                 "%s",
                 (r->opts & OPT_EXPANDED) ? "on" : "refused",
                 (r->opts & OPT_RAW) ? "the raw $v:2 diff" : "updateDescription",
                 (r->opts & OPT_FULLDOC) ? "when available" : "off",
                 (r->opts & OPT_SPLIT) ? "split" : "not split (the server refuses the split stage)");
    }
    if (!parse_cursor(&reply, "firstBatch", &lio->cursor_id, &batch, &pbrt, &pbrt_len)) {
        bson_destroy(&reply);
        bson_set_error(&err, 0, 0, "reply without cursor.id/firstBatch");
        bson_t none = BSON_INITIALIZER;
        return failed(r, "aggregate", &err, &none);
    }
    if (pbrt != NULL) { /* where the stream opens: its events at that time may still come (as in follow_once) */
        stream_token first;
        memset(&first, 0, sizeof first);
        if (stream_token_decode(pbrt, pbrt_len, &first) && first.keystring && first.type == STREAM_TOKEN_HWM) {
            op_pos at = {.secs = first.secs, .inc = first.inc, .term = -1};
            if (!lio->have_opened_at || op_pos_cmp(&at, &lio->opened_at) > 0)
                lio->opened_at = at;
            lio->have_opened_at = true;
        }
    }
    step s = lane_take_batch(r, i, &batch, pbrt, pbrt_len, "aggregate");
    bson_destroy(&reply);
    return s;
}

static step lane_get_more(stream_reader *r, size_t i, int64_t await_ms, bool *under_full)
{
    bson_t reply;
    bson_error_t err;
    bson_iter_t batch;
    const uint8_t *pbrt;
    uint32_t pbrt_len;
    lane_io *lio = &r->lanes[i];
    bson_t gm = BSON_INITIALIZER;
    BSON_APPEND_INT64(&gm, "getMore", lio->cursor_id);
    BSON_APPEND_UTF8(&gm, "collection", "$cmd.aggregate");
    BSON_APPEND_INT32(&gm, "batchSize", r->cfg.batch_size);
    BSON_APPEND_INT64(&gm, "maxTimeMS", await_ms);
    bool ok = run_cmd_on(r, r->pm.lanes[i].db, &gm, &reply, &err);
    bson_destroy(&gm);
    if (!ok) {
        lio->cursor_id = 0;
        step s = failed(r, "getMore", &err, &reply);
        bson_destroy(&reply);
        return s;
    }
    if (!parse_cursor(&reply, "nextBatch", &lio->cursor_id, &batch, &pbrt, &pbrt_len)) {
        bson_destroy(&reply);
        lio->cursor_id = 0;
        bson_set_error(&err, 0, 0, "reply without cursor.id/nextBatch");
        bson_t none = BSON_INITIALIZER;
        return failed(r, "getMore", &err, &none);
    }
    backoff_reset(&r->bo);
    uint32_t count = 0;
    for (bson_iter_t c = batch; bson_iter_next(&c);)
        count++;
    *under_full = count < (uint32_t)r->cfg.batch_size;
    step s = lane_take_batch(r, i, &batch, pbrt, pbrt_len, "getMore");
    bson_destroy(&reply);
    return s;
}

/* Hands on every event the merge lets go, closes the group once every stream is past it, and notes a position every
 * stream has passed while nothing is held. */
static step perdb_drain(stream_reader *r)
{
    size_t l;
    while (perdb_next(&r->pm, &l) == PERDB_READY) {
        const perdb_event *h = perdb_head(&r->pm, l);
        if (h->position_only) {
            perdb_pop(&r->pm, l);
            /* the lane resumes after the invalidate itself (startAfter), not after a later post-batch token */
            perdb_lane *pl = &r->pm.lanes[l];
            free(pl->pbrt);
            pl->pbrt = NULL;
            pl->pbrt_len = 0;
            continue;
        }
        bson_t ev;
        stream_event_info info;
        if (!bson_init_static(&ev, h->doc, h->len) || !stream_event_info_read(&ev, &info)) {
            fatal(r, QUEUE_END_UNSUPPORTED, "a held change event of %s is no longer valid BSON", r->pm.lanes[l].db);
            return STEP_END;
        }
        step s = take_event(r, &ev, &info); /* before the pop: a group it closes carries the positions before it */
        if (s != STEP_OK)
            return s;
        perdb_pop(&r->pm, l);
    }
    if (r->group.open && perdb_passed(&r->pm, r->group.secs, r->group.inc)) {
        step s = push_group(r, true);
        if (s != STEP_OK)
            return s;
    }
    uint32_t secs, inc;
    if (!r->group.open && perdb_complete_to(&r->pm, &secs, &inc)) {
        op_pos at = {.secs = secs, .inc = inc, .term = -1};
        if (op_pos_cmp(&at, &r->pos) > 0) {
            op_entry *e = malloc(sizeof *e);
            if (!e || !op_entry_alloc(e, &at, 1)) {
                free(e);
                fatal(r, QUEUE_END_NOMEM, "out of memory noting the change streams' position");
                return STEP_END;
            }
            e->ops[0].kind = OP_NOOP;
            e->ops[0].reason = "change stream position";
            if (!perdb_swap_token(r, e)) {
                op_entry_free(e);
                fatal(r, QUEUE_END_NOMEM, "out of memory noting the change streams' position");
                return STEP_END;
            }
            return push_entry(r, e, 0);
        }
    }
    return STEP_OK;
}

static bool perdb_holding(const stream_reader *r)
{
    for (size_t i = 0; i < r->pm.n; i++)
        if (r->pm.lanes[i].n > 0)
            return true;
    return false;
}

static step follow_perdb(stream_reader *r)
{
    char pbuf[OP_POS_STRLEN];
    stream_group_clear(&r->group); /* what was not handed on is read again after the resume points */
    for (size_t i = 0; i < r->pm.n; i++) {
        r->lanes[i].cursor_id = 0;
        r->lanes[i].reopen = false;
        stream_frag_clear(&r->lanes[i].frag);
        if (!perdb_lane_reset(&r->pm, i)) {
            fatal(r, QUEUE_END_NOMEM, "out of memory reopening the per-database change streams");
            return STEP_END;
        }
    }
    step s = open_session(r);
    if (s != STEP_OK)
        return s;
    for (size_t i = 0; i < r->pm.n && s == STEP_OK; i++)
        s = lane_open(r, i);
    if (s != STEP_OK)
        return s;
    backoff_reset(&r->bo);
    bool under_full = false;
    for (;;) {
        if (stopping(r))
            return STEP_END;
        s = perdb_drain(r);
        if (s != STEP_OK)
            return s;
        size_t l;
        perdb_next(&r->pm, &l); /* drained: the lane that holds the others back */
        lane_io *lio = &r->lanes[l];
        if (lio->reopen && lio->cursor_id == 0) {
            s = lane_open(r, l);
            if (s != STEP_OK)
                return s;
            continue;
        }
        if (lio->cursor_id == 0) {
            log_warning("change stream: the server closed database %s's cursor: re-opening the streams after %s",
                        r->pm.lanes[l].db, posfmt(&r->pos, pbuf));
            return r->parts_pushed
                       ? (fatal(r, QUEUE_END_RETRY, "a change stream's cursor closed mid-transaction"), STEP_END)
                       : STEP_RETRY;
        }
        bool busy = r->group.open || perdb_holding(r);
        if (!busy && under_full) {
            s = maybe_idle(r);
            if (s != STEP_OK)
                return s;
        }
        /* While events wait on this stream, ask it with a short await: its post-batch token is what frees them. */
        s = lane_get_more(r, l, busy ? READER_PROBE_MS : r->cfg.await_ms, &under_full);
        if (s != STEP_OK)
            return s;
    }
}

static void *stream_main(void *arg)
{
    stream_reader *r = arg;
    pthread_setname_np(pthread_self(), "o2p-stream");
    backoff_init(&r->bo, BACKOFF_MIN_MS, BACKOFF_MAX_MS);
    r->idle_due = true;
    r->pos = r->cfg.start;
    r->pos.term = -1;
    publish_pos(r, &r->pos);
    while (!stopping(r)) {
        step s = follow_once(r);
        if (s != STEP_RETRY)
            break;
        kill_cursor(r);
        atomic_fetch_add(&r->reconnects, 1);
        if (!nap(r, (int64_t)backoff_next(&r->bo)))
            break;
    }
    if (!queue_pusher_flush(&r->out))
        queue_pusher_drop(&r->out);
    kill_cursor(r);
    if (r->cs) {
        mongoc_client_session_destroy(r->cs);
        r->cs = NULL;
    }
    stream_group_clear(&r->group);
    stream_frag_clear(&r->frag);
    for (size_t i = 0; r->lanes && i < r->pm.n; i++)
        stream_frag_clear(&r->lanes[i].frag);
    mongoc_client_destroy(r->client);
    r->client = NULL;
    atomic_store(&r->finished, true);
    log_debug("change stream: thread ended");
    return NULL;
}

/* ---- lifecycle ---- */

stream_reader *stream_start(const stream_config *cfg, queue *q, char *err, size_t errlen)
{
    bool sync_ok = false;
    /* The reader holds bson_t members (the group, the fragments), which libbson here wants 128-byte aligned
     * (BSON_EXTRA_ALIGN, core/op.h): calloc's alignment is not enough. */
    size_t align = _Alignof(stream_reader), size = (sizeof(stream_reader) + align - 1) / align * align;
    stream_reader *r = aligned_alloc(align, size);
    if (r)
        memset(r, 0, size);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->cfg = *cfg;
    if (r->cfg.await_ms <= 0)
        r->cfg.await_ms = READER_DEFAULT_AWAIT_MS;
    if (r->cfg.batch_size <= 0)
        r->cfg.batch_size = STREAM_DEFAULT_BATCH_SIZE;
    r->q = q;
    queue_pusher_init(&r->out, q, &r->stop);
    stream_group_init(&r->group);
    perdb_init(&r->pm);
    stream_frag_init(&r->frag);
    r->uri_str = strdup(cfg->uri ? cfg->uri : "");
    if (!r->uri_str || (cfg->token && cfg->token_len && !set_token(r, cfg->token, (uint32_t)cfg->token_len))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    r->cfg.uri = r->uri_str;
    r->cfg.token = NULL; /* r->token holds the copy */
    r->opts = OPT_SPLIT | OPT_EXPANDED;
    if (cfg->updates != STREAM_UPDATES_DESCRIPTION)
        r->opts |= OPT_RAW;
    else
        r->opts |= OPT_FULLDOC;
    atomic_init(&r->stop, false);
    atomic_init(&r->finished, false);
    atomic_init(&r->entries, 0);
    atomic_init(&r->reconnects, 0);
    atomic_init(&r->idles, 0);
    atomic_init(&r->last_ts, 0);
    atomic_init(&r->have_last, false);

    mongo_client_opts mo = {
        .appname = "oplog2pg", .socket_timeout_ms = r->cfg.await_ms + 30000, .no_retry_reads = true};
    r->client = mongo_client_open(r->uri_str, &mo, err, errlen);
    if (!r->client)
        goto fail;
    if (!napper_init(&r->napper)) {
        snprintf(err, errlen, "cannot make the change-stream reader's timer (pthread)");
        goto fail;
    }
    sync_ok = true;
    int rc = pthread_create(&r->thread, NULL, stream_main, r);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the change-stream thread: %s", strerror(rc));
        goto fail;
    }
    return r;
fail:
    if (sync_ok)
        napper_destroy(&r->napper);
    if (r->client)
        mongoc_client_destroy(r->client);
    free(r->token);
    free(r->uri_str);
    free(r);
    return NULL;
}

void stream_ask_stop(stream_reader *r)
{
    if (!r || r->joined)
        return;
    atomic_store(&r->stop, true);
    napper_wake(&r->napper);
    queue_wake_pushers(r->q);
}

void stream_stop(stream_reader *r)
{
    if (!r || r->joined)
        return;
    stream_ask_stop(r);
    pthread_join(r->thread, NULL);
    r->joined = true;
}

void stream_free(stream_reader *r)
{
    if (!r)
        return;
    stream_stop(r);
    napper_destroy(&r->napper);
    perdb_free(&r->pm);
    free(r->lanes);
    free(r->token);
    free(r->uri_str);
    free(r);
}

bool stream_finished(const stream_reader *r)
{
    return atomic_load(&((stream_reader *)r)->finished);
}

void stream_get_stats(const stream_reader *r, reader_stats *out)
{
    stream_reader *m = (stream_reader *)r;
    uint64_t ts = atomic_load(&m->last_ts);
    memset(out, 0, sizeof *out);
    out->entries = atomic_load(&m->entries);
    out->reconnects = atomic_load(&m->reconnects);
    out->idles = atomic_load(&m->idles);
    out->have_last = atomic_load(&m->have_last);
    out->last.secs = (uint32_t)(ts >> 32);
    out->last.inc = (uint32_t)ts;
    out->last.term = -1;
    out->txn_oldest.term = -1;
}

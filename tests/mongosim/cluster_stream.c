/*
 * cluster_stream.c — change streams through mongosim's router, as a mongos serves them: the router opens the same
 * stream on every shard and merges the shards' events in resume-token order.
 *
 * NOTES: how a real mongos does it (mongodb/mongo): the $changeStream pipeline is split
 * (src/mongo/db/pipeline/document_source_change_stream.cpp, buildPipeline; docs/change_streams.md "Sharded
 * clusters"): each shard runs the stream with needsMerge (its oplog scan, transaction unwinding, CheckResumability
 * instead of EnsureResumeTokenPresent), and the mongos merges the shard cursors with an AsyncResultsMerger sorted on
 * {"_id._data": 1} (src/mongo/db/pipeline/change_stream_constants.h, kSortSpec). The merger is tailable-awaitData
 * and sorted, so it returns the smallest buffered event only when no shard can still produce a smaller one: each
 * shard's postBatchResumeToken promises that its later events sort after it (AsyncResultsMerger::_readySortedTailable,
 * the remote's promisedMinSortKey). A shard that gets no writes advances its token only at its periodic noop
 * (periodicNoopIntervalSecs, 10 s by default; mongosim --noop-interval), which holds the whole merged stream: the
 * latency a sharded stream pays. The router's postBatchResumeToken is the merger's high-water mark: the last
 * returned event's token, or the smallest promise of all shards once everything below it has been returned
 * (AsyncResultsMerger::getHighWaterMark; jstests/change_streams/report_post_batch_resume_token.js).
 * Resuming: every shard resumes from the client's token and passes the token's own event on; the router looks for
 * it in the merged order and swallows it, or fails 280 when the first event at or after the token is another
 * (document_source_change_stream_ensure_resume_token_present.cpp).
 * A stream with no start option starts at the cluster time of the open on every shard (a mongos passes its
 * startAtOperationTime to the shards), not at each shard's own last entry.
 * Shards added later: a real mongos learns of them from the config server's oplog (the kNewShardDetected
 * migrateChunkToNewShard event of document_source_change_stream_handle_topology_change.cpp) and opens a cursor on
 * the new shard from that time. mongosim's router holds the shard list itself: before each batch it opens a stream
 * on every shard it has no stream on yet, from the time the shard was added (its topologyTime; a new shard holds no
 * data before). Events from migrations (fromMigrate) are hidden by each shard's stream as on a replica set; the
 * router's internal events (migrateChunkToNewShard, reshard*) are not shown to clients and are not modelled.
 * Not modelled: invalidate of a collection stream is passed on from the first shard that emits it (a mongos waits
 * for it on every shard); split fragments ($changeStreamSplitLargeEvent) are merged like whole events.
 */
#include "changestream.h"
#include "cluster.h"
#include "sim_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define CL_STREAM_MAX_SHARDS 64 /* cluster.c's CL_MAX_SHARDS */

typedef struct {
    cs_stream *s; /* NULL: not opened yet (a shard added after the open) or closed */
    bson_t **buf; /* events returned by the shard, not yet merged */
    size_t n, pos, cap;
    char *pbrt;       /* the shard's latest postBatchResumeToken _data: its later events sort after it */
    bson_t *pbrt_doc; /* the whole token ({_data, _typeBits?}); heap: a bson_t may not move */
    bool closed;      /* returned an invalidate */
} cl_remote;

typedef struct cl_stream {
    int64_t id;
    char ns[400];
    char db[128];
    char coll[256];
    bool has_coll;
    bson_t *pipeline;  /* the client's pipeline, $changeStream first */
    bson_t *spec;      /* the client's $changeStream document */
    uint64_t start_ts; /* shards added before it open with the client's start; later ones at their topologyTime */
    cl_remote r[CL_STREAM_MAX_SHARDS];
    size_t nr;
    char *must;      /* the resume token whose event is still to be found (resumeAfter/startAfter an event) */
    char *last;      /* the last returned event's token _data */
    bson_t *pbrt;    /* the router's postBatchResumeToken */
    char *pbrt_data; /* its _data */
    bool closed;
    struct cl_stream *next;
} cl_stream;

static void remote_clear_buf(cl_remote *rm)
{
    for (size_t i = rm->pos; i < rm->n; i++)
        bson_destroy(rm->buf[i]);
    rm->n = rm->pos = 0;
}

static void stream_free(cl_stream *st)
{
    for (size_t i = 0; i < CL_STREAM_MAX_SHARDS; i++) {
        cl_remote *rm = &st->r[i];
        if (rm->s)
            cs_close(rm->s);
        remote_clear_buf(rm);
        free(rm->buf);
        bson_free(rm->pbrt);
        bson_destroy(rm->pbrt_doc);
    }
    bson_destroy(st->pipeline);
    bson_destroy(st->spec);
    bson_destroy(st->pbrt);
    bson_free(st->must);
    bson_free(st->last);
    bson_free(st->pbrt_data);
    free(st);
}

static void stream_unlink(sim_cluster *cl, cl_stream *st)
{
    for (cl_stream **p = cluster_streams(cl); *p; p = &(*p)->next)
        if (*p == st) {
            *p = st->next;
            break;
        }
    stream_free(st);
}

static const char *token_data(const bson_t *ev)
{
    bson_iter_t it, d;
    if (bson_iter_init(&it, ev) && bson_iter_find_descendant(&it, "_id._data", &d) && BSON_ITER_HOLDS_UTF8(&d))
        return bson_iter_utf8(&d, NULL);
    return NULL;
}

static void set_pbrt(cl_stream *st, const bson_t *token)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, token, "_data") || !BSON_ITER_HOLDS_UTF8(&it))
        return;
    const char *data = bson_iter_utf8(&it, NULL);
    /* never backwards: a high-water mark only moves on */
    if (st->pbrt_data && strcmp(data, st->pbrt_data) <= 0)
        return;
    bson_free(st->pbrt_data);
    st->pbrt_data = bson_strdup(data);
    bson_destroy(st->pbrt);
    st->pbrt = bson_copy(token);
}

/* The client's pipeline with $changeStream's start replaced by startAtOperationTime ts (a shard added later). */
static void pipeline_starting_at(const cl_stream *st, uint64_t ts, bson_t *out)
{
    bson_init(out);
    bson_iter_t it;
    bson_iter_init(&it, st->pipeline);
    bool first = true;
    while (bson_iter_next(&it)) {
        if (!first) {
            bson_append_iter(out, bson_iter_key(&it), -1, &it);
            continue;
        }
        first = false;
        bson_t stage, cs;
        BSON_APPEND_DOCUMENT_BEGIN(out, "0", &stage);
        BSON_APPEND_DOCUMENT_BEGIN(&stage, "$changeStream", &cs);
        bson_iter_t o;
        bson_iter_init(&o, st->spec);
        while (bson_iter_next(&o)) {
            const char *k = bson_iter_key(&o);
            if (strcmp(k, "resumeAfter") && strcmp(k, "startAfter") && strcmp(k, "startAtOperationTime"))
                bson_append_iter(&cs, k, -1, &o);
        }
        bson_append_timestamp(&cs, "startAtOperationTime", -1, (uint32_t)(ts >> 32), (uint32_t)ts);
        bson_append_document_end(&stage, &cs);
        bson_append_document_end(out, &stage);
    }
}

/* Opens the shard streams the router has none of yet. False with err set when a shard refuses. */
static bool open_remotes(sim_cluster *cl, cl_stream *st, cs_error *err)
{
    size_t n = cluster_shard_count(cl);
    if (n > CL_STREAM_MAX_SHARDS) {
        err->code = 1;
        snprintf(err->msg, sizeof err->msg, "mongosim's router merges at most %d shards", CL_STREAM_MAX_SHARDS);
        return false;
    }
    for (size_t i = st->nr; i < n; i++) {
        cl_remote *rm = &st->r[i];
        if (!rm->pbrt_doc)
            rm->pbrt_doc = bson_new();
        sim_server *srv = cluster_shard_server(cl, i);
        uint64_t added = cluster_shard_added(cl, i);
        cs_env env;
        cs_env_of(srv, &env);
        bson_t p;
        if (added > st->start_ts)
            pipeline_starting_at(st, added, &p);
        else
            bson_copy_to(st->pipeline, &p);
        rm->s = cs_open(&env, st->db, st->has_coll ? st->coll : NULL, &p, err);
        bson_destroy(&p);
        if (!rm->s) {
            st->nr = i; /* the shards from i on are opened (and refused) again next time */
            return false;
        }
        cs_merge_part(rm->s);
        st->nr = i + 1;
    }
    return true;
}

/* Reads the next batch of shard i when everything it returned is merged. */
static bool fill(sim_cluster *cl, cl_stream *st, size_t i, cs_error *err)
{
    cl_remote *rm = &st->r[i];
    if (rm->pos < rm->n || rm->closed || !rm->s)
        return true;
    rm->n = rm->pos = 0;
    cs_env env;
    cs_env_of(cluster_shard_server(cl, i), &env);
    bson_t events = BSON_INITIALIZER, pbrt = BSON_INITIALIZER;
    bool closed = false;
    if (!cs_next_batch(rm->s, &env, -1, &events, &pbrt, &closed, err)) {
        bson_destroy(&events);
        bson_destroy(&pbrt);
        return false;
    }
    bson_iter_t it;
    bson_iter_init(&it, &events);
    while (bson_iter_next(&it)) {
        uint32_t len;
        const uint8_t *data;
        bson_iter_document(&it, &len, &data);
        if (rm->n == rm->cap) {
            rm->cap = rm->cap ? rm->cap * 2 : 16;
            rm->buf = realloc(rm->buf, rm->cap * sizeof *rm->buf);
            if (!rm->buf)
                abort();
        }
        rm->buf[rm->n++] = bson_new_from_data(data, len);
    }
    bson_iter_t d;
    if (bson_iter_init_find(&d, &pbrt, "_data") && BSON_ITER_HOLDS_UTF8(&d)) {
        bson_free(rm->pbrt);
        rm->pbrt = bson_strdup(bson_iter_utf8(&d, NULL));
        bson_destroy(rm->pbrt_doc);
        rm->pbrt_doc = bson_copy(&pbrt);
    }
    if (closed) {
        cs_close(rm->s);
        rm->s = NULL;
        rm->closed = true;
    }
    bson_destroy(&events);
    bson_destroy(&pbrt);
    return true;
}

static void append_event(bson_t *arr, uint32_t *k, const bson_t *ev)
{
    char key[16];
    snprintf(key, sizeof key, "%u", (*k)++);
    BSON_APPEND_DOCUMENT(arr, key, ev);
}

/* Merges up to batch events (< 0: no count bound; 16 MB at most) into events; false with err set on a shard's
 * error or a resume token not found. */
static bool merge(sim_cluster *cl, cl_stream *st, int64_t batch, bson_t *events, int64_t *count, cs_error *err)
{
    memset(err, 0, sizeof *err);
    *count = 0;
    if (!open_remotes(cl, st, err))
        return false;
    size_t bytes = 0;
    uint32_t key = 0;
    bool full = batch == 0;
    while (!full && !st->closed) {
        for (size_t i = 0; i < st->nr; i++)
            if (!fill(cl, st, i, err))
                return false;
        /* the smallest buffered event, and whether every shard without one has promised past it */
        ssize_t best = -1;
        const char *best_data = NULL;
        for (size_t i = 0; i < st->nr; i++) {
            cl_remote *rm = &st->r[i];
            if (rm->pos >= rm->n)
                continue;
            const char *d = token_data(rm->buf[rm->pos]);
            if (!d) {
                snprintf(err->msg, sizeof err->msg, "mongosim: a shard's change event has no _id._data");
                err->code = 1;
                return false;
            }
            if (!best_data || strcmp(d, best_data) < 0) {
                best = (ssize_t)i;
                best_data = d;
            }
        }
        if (best < 0)
            break;
        bool ready = true;
        for (size_t i = 0; i < st->nr && ready; i++) {
            cl_remote *rm = &st->r[i];
            if (rm->pos < rm->n || rm->closed)
                continue;
            if (!rm->pbrt || strcmp(best_data, rm->pbrt) > 0)
                ready = false; /* this shard may still produce an event that sorts before */
        }
        if (!ready)
            break;
        cl_remote *rm = &st->r[best];
        bson_t *ev = rm->buf[rm->pos];
        if (st->must) {
            /* EnsureResumeTokenPresent: events before the token are dropped (the shards start at its
             * clusterTime), the token's own event is swallowed, anything else first means it is gone. */
            int c = strcmp(best_data, st->must);
            if (c <= 0) {
                if (c == 0) {
                    bson_free(st->must);
                    st->must = NULL;
                }
                rm->pos++;
                bson_destroy(ev);
                continue;
            }
            err->code = 280;
            err->nonresumable = true;
            snprintf(err->msg, sizeof err->msg, "cannot resume stream; the resume token was not found. {_data: \"%s\"}",
                     best_data);
            return false;
        }
        if (*count > 0 && ((batch > 0 && *count >= batch) || bytes + ev->len > SIM_BATCH_BYTES))
            break;
        append_event(events, &key, ev);
        bytes += ev->len;
        (*count)++;
        bson_free(st->last);
        st->last = bson_strdup(best_data);
        bson_t id;
        bson_iter_t it;
        uint32_t len;
        const uint8_t *data;
        if (bson_iter_init_find(&it, ev, "_id") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_document(&it, &len, &data);
            bson_init_static(&id, data, len);
            set_pbrt(st, &id);
        }
        bson_iter_t ot;
        if (bson_iter_init_find(&ot, ev, "operationType") && BSON_ITER_HOLDS_UTF8(&ot) &&
            strcmp(bson_iter_utf8(&ot, NULL), "invalidate") == 0)
            st->closed = true;
        rm->pos++;
        bson_destroy(ev);
        if (batch > 0 && *count >= batch)
            full = true;
    }
    /* The high-water mark: once nothing buffered remains and the token is found, everything up to the smallest
     * promise of all shards has been returned. */
    bool buffered = false;
    const char *min = NULL;
    const bson_t *min_doc = NULL;
    for (size_t i = 0; i < st->nr; i++) {
        cl_remote *rm = &st->r[i];
        if (rm->pos < rm->n)
            buffered = true;
        else if (!rm->closed && rm->pbrt && (!min || strcmp(rm->pbrt, min) < 0)) {
            min = rm->pbrt;
            min_doc = rm->pbrt_doc;
        }
    }
    if (!buffered && !st->must && min_doc)
        set_pbrt(st, min_doc);
    return true;
}

static void reply_batch(sim_reply *r, cl_stream *st, bool first, const bson_t *events)
{
    bson_t reply = BSON_INITIALIZER, c;
    BSON_APPEND_DOCUMENT_BEGIN(&reply, "cursor", &c);
    BSON_APPEND_ARRAY(&c, first ? "firstBatch" : "nextBatch", events);
    BSON_APPEND_DOCUMENT(&c, "postBatchResumeToken", st->pbrt);
    BSON_APPEND_INT64(&c, "id", st->closed ? 0 : st->id);
    BSON_APPEND_UTF8(&c, "ns", st->ns);
    bson_append_document_end(&reply, &c);
    BSON_APPEND_DOUBLE(&reply, "ok", 1.0);
    reply_bson(r, &reply);
    bson_destroy(&reply);
}

/* One batch; false (nothing written) when it is empty and the caller may wait. Frees the stream when it ends. */
static bool answer(sim_cluster *cl, sim_reply *r, cl_stream *st, bool first, int64_t batch, bool may_wait)
{
    bson_t events = BSON_INITIALIZER;
    int64_t n = 0;
    cs_error err;
    if (!merge(cl, st, batch, &events, &n, &err)) {
        bson_destroy(&events);
        stream_unlink(cl, st); /* registered already on the first batch too: the client never gets its id */
        cs_reply_error(r, &err);
        return true;
    }
    if (may_wait && n == 0 && !st->closed) {
        bson_destroy(&events);
        return false;
    }
    reply_batch(r, st, first, &events);
    bson_destroy(&events);
    if (st->closed)
        stream_unlink(cl, st);
    return true;
}

static bool doc_of(const bson_iter_t *it, bson_t *out)
{
    uint32_t len;
    const uint8_t *data;
    if (!BSON_ITER_HOLDS_DOCUMENT(it) && !BSON_ITER_HOLDS_ARRAY(it))
        return false;
    if (BSON_ITER_HOLDS_DOCUMENT(it))
        bson_iter_document(it, &len, &data);
    else
        bson_iter_array(it, &len, &data);
    return bson_init_static(out, data, len);
}

void cl_stream_aggregate(sim_cluster *cl, sim_reply *r, const bson_t *cmd, const char *db)
{
    bson_iter_t it;
    bson_iter_init(&it, cmd);
    bson_iter_next(&it);
    const char *coll = NULL;
    if (BSON_ITER_HOLDS_UTF8(&it))
        coll = bson_iter_utf8(&it, NULL);
    else if (!BSON_ITER_HOLDS_NUMBER(&it) || bson_iter_as_int64(&it) != 1) {
        reply_error(r, 2, "Invalid {aggregate: ...} value: must be a collection name or 1");
        return;
    }
    bson_iter_t p, s0, k, cu, bs;
    bson_t pipeline, spec;
    if (!bson_iter_init_find(&p, cmd, "pipeline") || !doc_of(&p, &pipeline) || !bson_iter_recurse(&p, &s0) ||
        !bson_iter_next(&s0) || !bson_iter_recurse(&s0, &k) || !bson_iter_find(&k, "$changeStream") ||
        !doc_of(&k, &spec)) {
        reply_error(r, 14, "'pipeline' option must be specified as an array");
        return;
    }
    int64_t batch = 101; /* query_request_helper kDefaultBatchSize */
    if (!bson_iter_init_find(&cu, cmd, "cursor") || !BSON_ITER_HOLDS_DOCUMENT(&cu)) {
        reply_error(r, 9, "The 'cursor' option is required, except for aggregate with the explain argument");
        return;
    }
    if (bson_iter_recurse(&cu, &bs) && bson_iter_find(&bs, "batchSize") && BSON_ITER_HOLDS_NUMBER(&bs))
        batch = bson_iter_as_int64(&bs);
    cl_stream *st = calloc(1, sizeof *st);
    if (!st)
        abort();
    snprintf(st->db, sizeof st->db, "%s", db);
    if (coll) {
        snprintf(st->coll, sizeof st->coll, "%s", coll);
        st->has_coll = true;
        snprintf(st->ns, sizeof st->ns, "%s.%s", db, coll);
    } else
        snprintf(st->ns, sizeof st->ns, "%s.$cmd.aggregate", db);
    st->spec = bson_copy(&spec);
    st->pbrt = bson_new();
    /* The start every shard shares: the client's, or the cluster time now (a mongos's startAtOperationTime for a
     * new stream; document_source_change_stream.cpp getStartTimeForNewStream, one tick after the last write). */
    bson_iter_t o;
    bool has_start = false;
    uint64_t start = cluster_clock(cl) + 1;
    bson_iter_init(&o, &spec);
    while (bson_iter_next(&o)) {
        const char *key = bson_iter_key(&o);
        if (!strcmp(key, "resumeAfter") || !strcmp(key, "startAfter")) {
            bson_t tok;
            bson_iter_t d;
            cs_token_info ti;
            has_start = true;
            if (doc_of(&o, &tok) && bson_iter_init_find(&d, &tok, "_data") && BSON_ITER_HOLDS_UTF8(&d) &&
                cs_token_parse(bson_iter_utf8(&d, NULL), &ti)) {
                start = ti.ts;
                set_pbrt(st, &tok);
                if (ti.type == CS_TOKEN_EVENT) {
                    /* the token's _data without a fragmentNum names the event the shards pass on */
                    st->must = bson_strdup(bson_iter_utf8(&d, NULL));
                }
            }
        } else if (!strcmp(key, "startAtOperationTime") && BSON_ITER_HOLDS_TIMESTAMP(&o)) {
            uint32_t t, i;
            bson_iter_timestamp(&o, &t, &i);
            start = (uint64_t)t << 32 | i;
            has_start = true;
        }
    }
    st->start_ts = start;
    st->pipeline = bson_copy(&pipeline);
    if (!has_start) {
        bson_t tmp;
        pipeline_starting_at(st, start, &tmp);
        bson_destroy(st->pipeline);
        st->pipeline = bson_copy(&tmp);
        bson_destroy(&tmp);
    }
    if (!st->pbrt_data) {
        /* before any event: the start as a high-water mark (report_post_batch_resume_token.js) */
        char *hwm = cs_token_hex(start, CS_TOKEN_HWM, 0, false, NULL, NULL, -1);
        bson_t tok = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&tok, "_data", hwm);
        set_pbrt(st, &tok);
        bson_destroy(&tok);
        bson_free(hwm);
    }
    /* the first batch opens every shard's stream: a refusal (bad option, history lost) fails the aggregate */
    cs_error err;
    if (!open_remotes(cl, st, &err)) {
        stream_free(st);
        cs_reply_error(r, &err);
        return;
    }
    do {
        st->id =
            (int64_t)((((uint64_t)rand() << 31 ^ (uint64_t)rand()) & 0x3fffffffffffffffull) | 0x4000000000000000ull);
        bool used = false;
        for (cl_stream *x = *cluster_streams(cl); x; x = x->next)
            used |= x->id == st->id;
        if (!used)
            break;
    } while (1);
    st->next = *cluster_streams(cl);
    *cluster_streams(cl) = st;
    answer(cl, r, st, true, batch, false); /* never waits: a first batch is answered at once */
}

static cl_stream *find(sim_cluster *cl, int64_t id)
{
    for (cl_stream *x = *cluster_streams(cl); x; x = x->next)
        if (x->id == id)
            return x;
    return NULL;
}

bool cl_stream_get_more(sim_cluster *cl, sim_reply *r, const bson_t *cmd, int64_t id)
{
    cl_stream *st = find(cl, id);
    if (!st)
        return false;
    int64_t batch = -1, max_time = 1000; /* as a shard's change-stream getMore (changestream.c) */
    bson_iter_t it;
    if (bson_iter_init_find(&it, cmd, "batchSize") && BSON_ITER_HOLDS_NUMBER(&it))
        batch = bson_iter_as_int64(&it) > 0 ? bson_iter_as_int64(&it) : -1;
    if (bson_iter_init_find(&it, cmd, "maxTimeMS") && BSON_ITER_HOLDS_NUMBER(&it))
        max_time = bson_iter_as_int64(&it);
    if (answer(cl, r, st, false, batch, max_time > 0 && !r->no_reply))
        return true;
    sim_conn *c = r->conn;
    r->parked = true;
    c->park_kind = SIM_PARK_CHANGESTREAM;
    c->park_cursor = id;
    c->park_batch = batch;
    sim_conn_park(c, (double)max_time / 1000.0);
    return true;
}

bool cl_stream_parked_try(sim_cluster *cl, sim_conn *c, bool timeout)
{
    sim_reply r = {.conn = c, .request_id = c->park_request, .opcode = SIM_OP_MSG};
    cl_stream *st = find(cl, c->park_cursor);
    if (!st) {
        reply_error(&r, 237, "cursor id %" PRId64 " was killed", c->park_cursor);
        return true;
    }
    return answer(cl, &r, st, false, c->park_batch, !timeout);
}

bool cl_stream_kill(sim_cluster *cl, int64_t id)
{
    cl_stream *st = find(cl, id);
    if (!st)
        return false;
    stream_unlink(cl, st);
    return true;
}

uint64_t cl_stream_wake_gen(sim_cluster *cl)
{
    uint64_t g = cluster_shard_count(cl);
    for (size_t i = 0; i < cluster_shard_count(cl); i++)
        g += oplog_end_seq(cluster_shard_server(cl, i)->oplog);
    return g;
}

void cl_stream_free_all(sim_cluster *cl)
{
    while (*cluster_streams(cl))
        stream_unlink(cl, *cluster_streams(cl));
}

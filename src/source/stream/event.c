/*
 * event.c — change events turned into oplog-form ops, split events joined back, and the events of one clusterTime
 * grouped into one entry decoded by the oplog decoder (see source/stream/event.h).
 *
 * NOTES
 * - Why through the oplog decoder: an event says what the oplog entry behind it said (the server builds events from
 *   the oplog: change_stream_event_transform.cpp in mongodb/mongo), so rebuilding that entry and decoding it gives ops
 *   equal to the oplog source's by construction: the same kinds, forms, noops and reasons, the same $v:2 check
 *   (source/v2diff.h), the same skipped namespaces. The cost is one copy of each event's payload into the rebuilt
 *   entry; with DECODE_BORROW_PAYLOAD the decoder then borrows from that copy instead of copying again.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/decode.h"
#include "source/stream/event.h"
#include "util/strbuf.h"

/* ---- reading an event ---- */

bool stream_event_info_read(const bson_t *event, stream_event_info *out)
{
    bson_iter_t it, sub;
    bool lsid = false, txn = false;
    memset(out, 0, sizeof *out);
    out->type = "";
    if (!bson_iter_init(&it, event))
        return false;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "operationType") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            out->type = bson_iter_utf8(&it, NULL);
        } else if (strcmp(k, "clusterTime") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            bson_iter_timestamp(&it, &out->secs, &out->inc);
            out->has_time = true;
        } else if (strcmp(k, "_id") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_document(&it, &out->token_len, &out->token);
        } else if (strcmp(k, "lsid") == 0) {
            lsid = true;
        } else if (strcmp(k, "txnNumber") == 0) {
            txn = true;
        } else if (strcmp(k, "splitEvent") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &sub)) {
            out->split = true;
            while (bson_iter_next(&sub)) {
                if (strcmp(bson_iter_key(&sub), "fragment") == 0 &&
                    (BSON_ITER_HOLDS_INT32(&sub) || BSON_ITER_HOLDS_INT64(&sub)))
                    out->fragment = (int32_t)bson_iter_as_int64(&sub);
                else if (strcmp(bson_iter_key(&sub), "of") == 0 &&
                         (BSON_ITER_HOLDS_INT32(&sub) || BSON_ITER_HOLDS_INT64(&sub)))
                    out->of = (int32_t)bson_iter_as_int64(&sub);
            }
        }
    }
    out->has_txn = lsid && txn;
    return true;
}

/* The fields of an event this file reads; pointers into the event. */
typedef struct evf {
    const char *type;
    const char *db, *coll; /* ns.db, ns.coll */
    uint32_t db_len, coll_len;
    const char *to_db, *to_coll; /* to, or operationDescription.to */
    uint32_t to_db_len, to_coll_len;
    bson_iter_t full, key, updesc, raw, opdesc, drop_target, ns_type;
    bool has_full, has_key, has_updesc, has_raw, has_opdesc, has_drop_target, has_ns_type;
    bool has_time;
    uint32_t secs, inc;
} evf;

static void read_ns(bson_iter_t *it, const char **db, uint32_t *dl, const char **coll, uint32_t *cl)
{
    bson_iter_t sub;
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bson_iter_recurse(it, &sub))
        return;
    while (bson_iter_next(&sub)) {
        if (strcmp(bson_iter_key(&sub), "db") == 0 && BSON_ITER_HOLDS_UTF8(&sub))
            *db = bson_iter_utf8(&sub, dl);
        else if (strcmp(bson_iter_key(&sub), "coll") == 0 && BSON_ITER_HOLDS_UTF8(&sub))
            *coll = bson_iter_utf8(&sub, cl);
    }
}

static void read_fields(const bson_t *event, evf *f)
{
    bson_iter_t it;
    memset(f, 0, sizeof *f);
    f->type = "";
    if (!bson_iter_init(&it, event))
        return;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "operationType") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            f->type = bson_iter_utf8(&it, NULL);
        } else if (strcmp(k, "ns") == 0) {
            read_ns(&it, &f->db, &f->db_len, &f->coll, &f->coll_len);
        } else if (strcmp(k, "to") == 0) {
            read_ns(&it, &f->to_db, &f->to_db_len, &f->to_coll, &f->to_coll_len);
        } else if (strcmp(k, "fullDocument") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            f->full = it;
            f->has_full = true;
        } else if (strcmp(k, "documentKey") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            f->key = it;
            f->has_key = true;
        } else if (strcmp(k, "updateDescription") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            f->updesc = it;
            f->has_updesc = true;
        } else if (strcmp(k, "rawUpdateDescription") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            f->raw = it;
            f->has_raw = true;
        } else if (strcmp(k, "operationDescription") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_t sub;
            f->opdesc = it;
            f->has_opdesc = true;
            if (bson_iter_recurse(&it, &sub)) {
                while (bson_iter_next(&sub)) {
                    if (strcmp(bson_iter_key(&sub), "to") == 0 && f->to_db == NULL)
                        read_ns(&sub, &f->to_db, &f->to_db_len, &f->to_coll, &f->to_coll_len);
                    else if (strcmp(bson_iter_key(&sub), "dropTarget") == 0) {
                        f->drop_target = sub;
                        f->has_drop_target = true;
                    }
                }
            }
        } else if (strcmp(k, "nsType") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            f->ns_type = it;
            f->has_ns_type = true;
        } else if (strcmp(k, "clusterTime") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            bson_iter_timestamp(&it, &f->secs, &f->inc);
            f->has_time = true;
        }
    }
}

static stream_ev_status fail(const evf *f, stream_ev_status st, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* "change event TYPE on DB.COLL _id X at clusterTime S:I: <message>". */
static stream_ev_status fail(const evf *f, stream_ev_status st, char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return st;
    size_t off = 0;
    err[0] = '\0';
    text_appendf(err, errlen, &off, "change event '%s'", f->type[0] ? f->type : "?");
    if (f->db)
        text_appendf(err, errlen, &off, " on %.*s%s%.*s", (int)f->db_len, f->db, f->coll ? "." : "",
                     f->coll ? (int)f->coll_len : 0, f->coll ? f->coll : "");
    if (f->has_key) {
        bson_iter_t k = f->key, id;
        if (bson_iter_recurse(&k, &id) && bson_iter_find(&id, "_id")) {
            bson_t one = BSON_INITIALIZER;
            char *json = NULL;
            if (bson_append_iter(&one, "_id", 3, &id))
                json = bson_as_relaxed_extended_json(&one, NULL);
            if (json)
                text_appendf(err, errlen, &off, " documentKey %.200s", json);
            bson_free(json);
            bson_destroy(&one);
        }
    }
    if (f->has_time)
        text_appendf(err, errlen, &off, " at clusterTime %u:%u", f->secs, f->inc);
    text_appendf(err, errlen, &off, ": ");
    va_list ap;
    va_start(ap, fmt);
    text_vappendf(err, errlen, &off, fmt, ap);
    va_end(ap);
    return st;
}

/* Appends "db.coll" (or "db.$cmd" when coll is NULL) under key. */
static bool append_ns(bson_t *out, const char *key, const char *db, uint32_t dl, const char *coll, uint32_t cl)
{
    size_t n = dl + 1 + (coll ? cl : 4);
    char stack[256];
    char *s = n + 1 <= sizeof stack ? stack : malloc(n + 1);
    if (!s)
        return false;
    memcpy(s, db, dl);
    s[dl] = '.';
    if (coll)
        memcpy(s + dl + 1, coll, cl);
    else
        memcpy(s + dl + 1, "$cmd", 4);
    s[n] = '\0';
    bool ok = bson_append_utf8(out, key, -1, s, (int)n);
    if (s != stack)
        free(s);
    return ok;
}

static bool append_doc_iter(bson_t *out, const char *key, const bson_iter_t *it)
{
    return bson_append_iter(out, key, -1, it);
}

/* A `c` command {name: coll} on db.$cmd. */
static bool command_op(bson_t *out, const evf *f, const char *name)
{
    bson_t o;
    return BSON_APPEND_UTF8(out, "op", "c") && append_ns(out, "ns", f->db, f->db_len, NULL, 0) &&
           BSON_APPEND_DOCUMENT_BEGIN(out, "o", &o) && bson_append_utf8(&o, name, -1, f->coll, (int)f->coll_len) &&
           bson_append_document_end(out, &o);
}

/* create: {create: coll, <operationDescription's options>}; a view keeps viewOn, a time-series collection gets its
 * `timeseries` (the decoder reads them: no table for either). */
static bool create_op(bson_t *out, const evf *f)
{
    bson_t o;
    bson_iter_t sub;
    bool has_view_on = false, has_ts = false;
    if (!BSON_APPEND_UTF8(out, "op", "c") || !append_ns(out, "ns", f->db, f->db_len, NULL, 0) ||
        !BSON_APPEND_DOCUMENT_BEGIN(out, "o", &o) || !bson_append_utf8(&o, "create", -1, f->coll, (int)f->coll_len))
        return false;
    if (f->has_opdesc) {
        bson_iter_t d = f->opdesc;
        if (bson_iter_recurse(&d, &sub)) {
            while (bson_iter_next(&sub)) {
                const char *k = bson_iter_key(&sub);
                if (strcmp(k, "create") == 0)
                    continue;
                has_view_on |= strcmp(k, "viewOn") == 0;
                has_ts |= strcmp(k, "timeseries") == 0;
                if (!bson_append_iter(&o, k, -1, &sub))
                    return false;
            }
        }
    }
    if (f->has_ns_type) {
        const char *t = bson_iter_utf8(&f->ns_type, NULL);
        bson_t empty;
        if (strcmp(t, "timeseries") == 0 && !has_ts && !has_view_on &&
            (!BSON_APPEND_DOCUMENT_BEGIN(&o, "timeseries", &empty) || !bson_append_document_end(&o, &empty)))
            return false;
        if (strcmp(t, "view") == 0 && !has_view_on && !BSON_APPEND_UTF8(&o, "viewOn", ""))
            return false;
    }
    return bson_append_document_end(out, &o);
}

static bool rename_op(bson_t *out, const evf *f)
{
    bson_t o;
    if (!BSON_APPEND_UTF8(out, "op", "c") || !append_ns(out, "ns", f->db, f->db_len, NULL, 0) ||
        !BSON_APPEND_DOCUMENT_BEGIN(out, "o", &o) ||
        !append_ns(&o, "renameCollection", f->db, f->db_len, f->coll, f->coll_len) ||
        !append_ns(&o, "to", f->to_db, f->to_db_len, f->to_coll, f->to_coll_len))
        return false;
    /* operationDescription.dropTarget: the dropped target's UUID, only when one was dropped (showExpandedEvents). */
    if (f->has_drop_target && !BSON_ITER_HOLDS_NULL(&f->drop_target) &&
        !bson_append_iter(&o, "dropTarget", -1, &f->drop_target))
        return false;
    return bson_append_document_end(out, &o);
}

/* A noop `n` entry, as the server logs shardCollection and the like (its o.msg names the event). */
static bool noop_op(bson_t *out, const evf *f)
{
    bson_t o;
    return BSON_APPEND_UTF8(out, "op", "n") &&
           (f->db && f->coll ? append_ns(out, "ns", f->db, f->db_len, f->coll, f->coll_len)
                             : BSON_APPEND_UTF8(out, "ns", "")) &&
           BSON_APPEND_DOCUMENT_BEGIN(out, "o", &o) && BSON_APPEND_UTF8(&o, "msg", f->type) &&
           bson_append_document_end(out, &o);
}

/* operationTypes that change no document, logged by the server as `c` commands the decoder takes as noops. */
static const struct {
    const char *type, *command;
} command_events[] = {
    {"createIndexes", "createIndexes"},     {"dropIndexes", "dropIndexes"},         {"modify", "collMod"},
    {"startIndexBuild", "startIndexBuild"}, {"abortIndexBuild", "abortIndexBuild"}, {NULL, NULL},
};

/* operationTypes that change no document and stand for a noop (`n`) entry or nothing at all in the oplog
 * (docs/change_stream_events.md; document_source_change_stream.h kShardCollectionOpType and the rest). */
static const char *const noop_events[] = {
    "shardCollection",        "refineCollectionShardKey",
    "reshardCollection",      "endOfTransaction",
    "migrateChunkToNewShard", "migrateLastChunkFromShard",
    "reshardBegin",           "reshardDoneCatchUp",
    "reshardBlockingWrites",  NULL,
};

#define NOMEM_OR(x) ((x) ? STREAM_EV_OK : STREAM_EV_NOMEM)

/* An event without operationType, as Azure Cosmos DB for MongoDB (RU) sends every one (its change-stream
 * documentation: no operationType, no updateDescription, inserts, updates and replaces only, fullDocument
 * "updateLookup" required): the document as the server looked it up, so a replacement, which the sink writes as an
 * upsert of the whole document. A null fullDocument means the document was gone when the server looked it up: a
 * later write of it comes as a later event, so its row goes now (a delete). */
static stream_ev_status lookup_op(const evf *f, bson_t *out, char *err, size_t errlen)
{
    if (!f->db || !f->coll)
        return fail(f, STREAM_EV_MALFORMED, err, errlen, "no ns.db or ns.coll");
    if (!f->has_key)
        return fail(f, STREAM_EV_MALFORMED, err, errlen, "no documentKey");
    if (!f->has_full)
        return NOMEM_OR(BSON_APPEND_UTF8(out, "op", "d") &&
                        append_ns(out, "ns", f->db, f->db_len, f->coll, f->coll_len) &&
                        append_doc_iter(out, "o", &f->key));
    return NOMEM_OR(BSON_APPEND_UTF8(out, "op", "u") && append_ns(out, "ns", f->db, f->db_len, f->coll, f->coll_len) &&
                    append_doc_iter(out, "o", &f->full) && append_doc_iter(out, "o2", &f->key));
}

stream_ev_status stream_event_to_op(const bson_t *event, bson_t *out, char *err, size_t errlen)
{
    return stream_event_to_op_ex(event, out, false, err, errlen);
}

stream_ev_status stream_event_to_op_ex(const bson_t *event, bson_t *out, bool lookup, char *err, size_t errlen)
{
    evf f;
    if (err && errlen)
        err[0] = '\0';
    read_fields(event, &f);
    const char *t = f.type;
    if (t[0] == '\0' && lookup)
        return lookup_op(&f, out, err, errlen);
    if (t[0] == '\0')
        return fail(&f, STREAM_EV_MALFORMED, err, errlen,
                    "no operationType: Azure Cosmos DB for MongoDB (RU) sends such events, and no delete events at "
                    "all, so a replica would keep every deleted document; oplog2pg reads that server only with "
                    "[mongodb] delete_reconcile set (docs/sources.md)");
    if (strcmp(t, "invalidate") == 0)
        return fail(&f, STREAM_EV_UNSUPPORTED, err, errlen,
                    "an invalidate ends a collection's or a database's stream, never the cluster's that oplog2pg "
                    "reads");
    for (size_t i = 0; noop_events[i]; i++)
        if (strcmp(t, noop_events[i]) == 0)
            return NOMEM_OR(noop_op(out, &f));
    bool data =
        strcmp(t, "insert") == 0 || strcmp(t, "update") == 0 || strcmp(t, "replace") == 0 || strcmp(t, "delete") == 0;
    bool ddl = strcmp(t, "create") == 0 || strcmp(t, "drop") == 0 || strcmp(t, "rename") == 0;
    const char *command = NULL;
    for (size_t i = 0; command_events[i].type; i++)
        if (strcmp(t, command_events[i].type) == 0)
            command = command_events[i].command;
    if (!data && !ddl && !command && strcmp(t, "dropDatabase") != 0)
        return fail(&f, STREAM_EV_UNSUPPORTED, err, errlen,
                    "unknown operationType: oplog2pg does not know what it changes, so it stops before it rather "
                    "than skip it (a newer oplog2pg may know it, or use source = oplog)");
    if (!f.db)
        return fail(&f, STREAM_EV_MALFORMED, err, errlen, "no ns.db");
    if (strcmp(t, "dropDatabase") == 0) {
        bson_t o;
        return NOMEM_OR(BSON_APPEND_UTF8(out, "op", "c") && append_ns(out, "ns", f.db, f.db_len, NULL, 0) &&
                        BSON_APPEND_DOCUMENT_BEGIN(out, "o", &o) && BSON_APPEND_INT32(&o, "dropDatabase", 1) &&
                        bson_append_document_end(out, &o));
    }
    if (!f.coll)
        return fail(&f, STREAM_EV_MALFORMED, err, errlen, "no ns.coll");
    if (command)
        return NOMEM_OR(command_op(out, &f, command));
    if (strcmp(t, "create") == 0)
        return NOMEM_OR(create_op(out, &f));
    if (strcmp(t, "drop") == 0)
        return NOMEM_OR(command_op(out, &f, "drop"));
    if (strcmp(t, "rename") == 0) {
        if (!f.to_db || !f.to_coll)
            return fail(&f, STREAM_EV_MALFORMED, err, errlen, "a rename without its target (to)");
        return NOMEM_OR(rename_op(out, &f));
    }
    /* insert, update, replace, delete */
    if (!f.has_key)
        return fail(&f, STREAM_EV_MALFORMED, err, errlen, "no documentKey");
    if (strcmp(t, "delete") == 0)
        return NOMEM_OR(BSON_APPEND_UTF8(out, "op", "d") && append_ns(out, "ns", f.db, f.db_len, f.coll, f.coll_len) &&
                        append_doc_iter(out, "o", &f.key));
    if (strcmp(t, "insert") == 0 || strcmp(t, "replace") == 0) {
        if (!f.has_full)
            return fail(&f, STREAM_EV_MALFORMED, err, errlen, "no fullDocument");
        return NOMEM_OR(BSON_APPEND_UTF8(out, "op", t[0] == 'i' ? "i" : "u") &&
                        append_ns(out, "ns", f.db, f.db_len, f.coll, f.coll_len) &&
                        append_doc_iter(out, "o", &f.full) && append_doc_iter(out, "o2", &f.key));
    }
    /* update */
    if (!BSON_APPEND_UTF8(out, "op", "u") || !append_ns(out, "ns", f.db, f.db_len, f.coll, f.coll_len))
        return STREAM_EV_NOMEM;
    if (f.has_raw) {
        if (!append_doc_iter(out, "o", &f.raw) || !append_doc_iter(out, "o2", &f.key))
            return STREAM_EV_NOMEM;
        return STREAM_EV_OK;
    }
    if (!f.has_updesc)
        return fail(&f, STREAM_EV_MALFORMED, err, errlen,
                    "an update with neither updateDescription nor "
                    "rawUpdateDescription");
    const uint8_t *d;
    uint32_t dl;
    bson_t desc, o;
    char why[512];
    bson_iter_document(&f.updesc, &dl, &d);
    if (!bson_init_static(&desc, d, dl))
        return fail(&f, STREAM_EV_MALFORMED, err, errlen, "updateDescription is not valid BSON");
    if (!BSON_APPEND_DOCUMENT_BEGIN(out, "o", &o))
        return STREAM_EV_NOMEM;
    stream_ev_status st = stream_updesc_to_diff(&desc, &o, why, sizeof why);
    if (st == STREAM_EV_AMBIGUOUS && f.has_full && !lookup) {
        /* The documented fallback: the post-image (fullDocument whenAvailable/required, which the stream asks for
         * only where changeStreamPreAndPostImages is on: the document as this update left it) as a replacement. */
        bson_append_document_end(out, &o);
        bson_reinit(out);
        return NOMEM_OR(BSON_APPEND_UTF8(out, "op", "u") && append_ns(out, "ns", f.db, f.db_len, f.coll, f.coll_len) &&
                        append_doc_iter(out, "o", &f.full) && append_doc_iter(out, "o2", &f.key));
    }
    if (st == STREAM_EV_AMBIGUOUS)
        return fail(&f, st, err, errlen,
                    "%s; oplog2pg will not guess. Remedies: a MongoDB server of 6.1 or later (its events say how to "
                    "read such a path), changeStreamPreAndPostImages on the collection (the post-image is then "
                    "applied), or [mongodb] source = oplog",
                    why);
    if (st != STREAM_EV_OK)
        return st == STREAM_EV_NOMEM ? st : fail(&f, st, err, errlen, "%s", why);
    if (!bson_append_document_end(out, &o) || !append_doc_iter(out, "o2", &f.key))
        return STREAM_EV_NOMEM;
    return STREAM_EV_OK;
}

/* ---- fragments ---- */

void stream_frag_init(stream_frag *f)
{
    memset(f, 0, sizeof *f);
}

void stream_frag_clear(stream_frag *f)
{
    if (f->active)
        bson_destroy(&f->merged);
    stream_frag_init(f);
}

stream_ev_status stream_frag_add(stream_frag *f, const bson_t *event, const stream_event_info *info, bool *done,
                                 char *err, size_t errlen)
{
    bson_iter_t it;
    *done = false;
    if (info->fragment < 1 || info->of < 1 || info->fragment > info->of) {
        snprintf(err, errlen, "a fragment of a split event with splitEvent {fragment: %d, of: %d}", info->fragment,
                 info->of);
        return STREAM_EV_MALFORMED;
    }
    if (info->fragment == 1) {
        stream_frag_clear(f);
        bson_init(&f->merged);
        f->active = true;
        f->next = 1;
        f->of = info->of;
    }
    if (!f->active || info->fragment != f->next || info->of != f->of) {
        snprintf(err, errlen, "fragment %d of %d of a split event, where fragment %d of %d was expected",
                 info->fragment, info->of, f->active ? f->next : 1, f->active ? f->of : info->of);
        stream_frag_clear(f);
        return STREAM_EV_MALFORMED;
    }
    /* Fields split only at the top level (DocumentSourceChangeStreamSplitLargeEvent): each fragment adds its own.
     * The _id of each is that fragment's token: only the last one's is kept. */
    if (!bson_iter_init(&it, event))
        return STREAM_EV_MALFORMED;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "splitEvent") == 0 || strcmp(k, "_id") == 0)
            continue;
        bson_iter_t seen;
        if (bson_iter_init_find(&seen, &f->merged, k))
            continue; /* the fields every fragment repeats (none today but _id; kept once) */
        if (!bson_append_iter(&f->merged, k, -1, &it))
            return STREAM_EV_NOMEM;
    }
    f->next++;
    if (info->fragment == info->of) {
        if (bson_iter_init_find(&it, event, "_id") && !bson_append_iter(&f->merged, "_id", 3, &it))
            return STREAM_EV_NOMEM;
        *done = true;
        f->next = 0; /* merged stays for the caller to read; a fragment after it must be a first one */
    }
    return STREAM_EV_OK;
}

/* ---- grouping ---- */

void stream_group_init(stream_group *g)
{
    memset(g, 0, sizeof *g);
}

void stream_group_clear(stream_group *g)
{
    if (g->open)
        bson_destroy(&g->ops);
    free(g->token);
    stream_group_init(g);
}

bool stream_group_add(stream_group *g, uint32_t secs, uint32_t inc, const bson_t *out, const uint8_t *token,
                      uint32_t token_len, bool has_txn)
{
    char key[16];
    const char *k;
    if (!g->open) {
        bson_init(&g->ops);
        g->open = true;
        g->secs = secs;
        g->inc = inc;
        g->n = g->done = 0;
    }
    bson_uint32_to_string(g->n, &k, key, sizeof key);
    if (!bson_append_document(&g->ops, k, -1, out))
        return false;
    g->n++;
    g->has_txn |= has_txn;
    if (token) {
        uint8_t *copy = malloc(token_len);
        if (!copy)
            return false;
        memcpy(copy, token, token_len);
        free(g->token);
        g->token = copy;
        g->token_len = token_len;
    }
    return true;
}

bool stream_group_full(const stream_group *g)
{
    /* One event alone is never a part: it is handed on whole, whatever its size. */
    return g->open && (g->n >= STREAM_PART_OPS || (g->n > 1 && g->ops.len >= STREAM_PART_BYTES));
}

bool stream_group_closes(const stream_group *g, const stream_token *t)
{
    if (!g->open || !t->keystring)
        return false;
    return t->secs > g->secs || (t->secs == g->secs && t->inc > g->inc);
}

stream_build_status stream_group_build(stream_group *g, bool last, unsigned flags, op_entry *e, bson_t *raw, char *err,
                                       size_t errlen)
{
    char derr[768];
    bson_init(raw);
    op_entry_init(e);
    if (!g->open || (g->n == 0 && (g->done == 0 || !last))) {
        snprintf(err, errlen, "no events to hand on");
        return STREAM_BUILD_MALFORMED;
    }
    if (g->n == 0) {
        /* Every event went in parts already and the group has just closed: its end is one noop carrying the token. */
        op_pos at = {.secs = g->secs, .inc = g->inc, .term = -1};
        if (!op_entry_alloc(e, &at, 1))
            return STREAM_BUILD_NOMEM;
        e->ops[0].kind = OP_NOOP;
        e->ops[0].reason = "the end of a transaction handed on in parts";
        e->ops[0].index = g->done;
        e->atomic = true;
        e->token = g->token;
        e->token_len = g->token_len;
        g->token = NULL;
        g->token_len = 0;
        stream_group_clear(g);
        return STREAM_BUILD_OK;
    }
    bool ok = BSON_APPEND_TIMESTAMP(raw, "ts", g->secs, g->inc);
    if (g->n == 1 && g->done == 0 && last) {
        /* One event: the plain entry the server logged ({ts, op, ns, o, o2}). */
        bson_iter_t it, oi;
        ok = ok && bson_iter_init(&it, &g->ops) && bson_iter_next(&it) && bson_iter_recurse(&it, &oi);
        while (ok && bson_iter_next(&oi))
            ok = bson_append_iter(raw, bson_iter_key(&oi), -1, &oi);
    } else {
        /* Several: an applyOps, atomic (no multiOpType), as a transaction's or a batched write's. */
        bson_t o;
        ok = ok && BSON_APPEND_UTF8(raw, "op", "c") && BSON_APPEND_UTF8(raw, "ns", "admin.$cmd") &&
             BSON_APPEND_DOCUMENT_BEGIN(raw, "o", &o) && BSON_APPEND_ARRAY(&o, "applyOps", &g->ops) &&
             bson_append_document_end(raw, &o);
    }
    if (!ok)
        return STREAM_BUILD_NOMEM;
    decode_status st = decode_entry_ex(raw, flags, e, derr, sizeof derr);
    if (st != DECODE_OK) {
        snprintf(err, errlen, "the events at clusterTime %u:%u: %s", g->secs, g->inc, derr);
        return st == DECODE_NOMEM       ? STREAM_BUILD_NOMEM
               : st == DECODE_MALFORMED ? STREAM_BUILD_MALFORMED
                                        : STREAM_BUILD_UNSUPPORTED;
    }
    for (size_t i = 0; i < e->n; i++)
        e->ops[i].index = g->done + (uint32_t)i;
    e->more = !last;
    if (g->n > 1 || g->done > 0)
        e->atomic = true;
    g->done += g->n;
    g->n = 0;
    bson_reinit(&g->ops);
    if (last) {
        if (g->token) {
            e->token = g->token;
            e->token_len = g->token_len;
            g->token = NULL;
            g->token_len = 0;
        }
        stream_group_clear(g);
    }
    return STREAM_BUILD_OK;
}

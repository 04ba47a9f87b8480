/*
 * decode.c — the oplog entry decoder: raw local.oplog.rs BSON → op_entry (see source/decode.h for the rules).
 *
 * NOTES
 * - One pass over the entry's top-level fields collects what we need (field order differs between server versions);
 *   type errors are remembered and reported after the pass so the message can name ts/op/ns wherever they sit.
 * - The op array is allocated once the entry's ts has been read (for an applyOps, once its inner ops are counted);
 *   an op's own buffer only once that op is known to be valid. The buffer receives the namespace strings and copies
 *   of o/o2 (op_fill), and the _id is a view into it (into the caller's entry instead for an insert decoded with
 *   DECODE_BORROW_PAYLOAD). A failure frees everything (op_entry_clear).
 * - A $v:2 update's diff is checked by source/v2diff.h, structure only; src/map/update_functions.sql gives it its
 *   meaning in PostgreSQL.
 */
#include "source/decode.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/nsfilter.h"
#include "source/v2diff.h"
#include "util/log.h"
#include "util/strbuf.h"

/* ------------------------------------------------------------------------------------------------------------ */
/* raw fields */

/* The fields of one entry (or one inner applyOps op) that decoding needs; pointers into the caller's BSON. */
typedef struct raw_op {
    bool has_ts;
    uint32_t secs, inc;
    int64_t term;
    const char *op; /* NULL when absent */
    uint32_t op_len;
    const char *ns;
    uint32_t ns_len;
    const uint8_t *o;
    uint32_t o_len;
    const uint8_t *o2;
    uint32_t o2_len;
    bool from_migrate, upsert, has_lsid, has_txn, has_multi;
    bool is_timeseries;    /* isTimeseries: true, which 8.3 and later put on a time-series collection's entries
                            * (jstests/core/timeseries/... oplog "isTimeseries set to true",
                            * featureFlagMarkTimeseriesEventsInOplog) */
    const char *bad_field; /* first ill-typed field, reported after the pass */
    const char *bad_what;
    decode_status bad_status;
} raw_op;

/* Decoding context, for error messages and flags. */
typedef struct dctx {
    unsigned flags;
    char *err;
    size_t errlen;
    const raw_op *top;   /* the entry */
    const raw_op *inner; /* the inner applyOps op being decoded, or NULL */
    long index;
} dctx;

typedef struct span {
    const char *s;
    size_t len;
} span;

static void append_id(char *buf, size_t len, size_t *off, const bson_value_t *id)
{
    bson_t b = BSON_INITIALIZER;
    char *json = NULL;
    if (bson_append_value(&b, "_id", 3, id))
        json = bson_as_relaxed_extended_json(&b, NULL);
    /* json is `{ "_id" : X }`: print X only. */
    const char *v = json ? strstr(json, ": ") : NULL;
    if (v) {
        size_t vl = strlen(v + 2);
        if (vl >= 2)
            vl -= 2; /* " }" */
        text_appendf(buf, len, off, " _id %.*s", (int)(vl > 200 ? 200 : vl), v + 2);
    } else {
        text_appendf(buf, len, off, " _id ?");
    }
    bson_free(json);
    bson_destroy(&b);
}

static decode_status fail(const dctx *c, decode_status st, const bson_value_t *id, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Writes "ts S:I op 'X' ns 'N'[ applyOps[i] op 'Y' ns 'M'][ _id V]: <message>" to c->err and returns st. */
static decode_status fail(const dctx *c, decode_status st, const bson_value_t *id, const char *fmt, ...)
{
    if (!c->err || c->errlen == 0)
        return st;
    size_t off = 0;
    c->err[0] = '\0';
    const raw_op *t = c->top;
    if (t && t->has_ts)
        text_appendf(c->err, c->errlen, &off, "ts %u:%u", t->secs, t->inc);
    else
        text_appendf(c->err, c->errlen, &off, "ts ?");
    if (t)
        text_appendf(c->err, c->errlen, &off, " op '%.*s' ns '%.*s'", t->op ? (int)t->op_len : 1, t->op ? t->op : "?",
                     t->ns ? (int)t->ns_len : 1, t->ns ? t->ns : "?");
    if (c->inner) {
        const raw_op *r = c->inner;
        text_appendf(c->err, c->errlen, &off, " applyOps[%ld] op '%.*s' ns '%.*s'", c->index,
                     r->op ? (int)r->op_len : 1, r->op ? r->op : "?", r->ns ? (int)r->ns_len : 1, r->ns ? r->ns : "?");
    } else if (c->index >= 0) {
        text_appendf(c->err, c->errlen, &off, " applyOps[%ld]", c->index);
    }
    if (id && id->value_type != BSON_TYPE_EOD)
        append_id(c->err, c->errlen, &off, id);
    text_appendf(c->err, c->errlen, &off, ": ");
    va_list ap;
    va_start(ap, fmt);
    text_vappendf(c->err, c->errlen, &off, fmt, ap);
    va_end(ap);
    return st;
}

static void mark_bad(raw_op *r, const char *field, const char *what, decode_status st)
{
    if (!r->bad_field) {
        r->bad_field = field;
        r->bad_what = what;
        r->bad_status = st;
    }
}

static bool utf8_field(bson_iter_t *it, const char **s, uint32_t *len)
{
    if (!BSON_ITER_HOLDS_UTF8(it))
        return false;
    *s = bson_iter_utf8(it, len);
    return strlen(*s) == *len; /* no embedded NUL */
}

static void doc_field(bson_iter_t *it, const uint8_t **data, uint32_t *len)
{
    bson_iter_document(it, len, data);
}

/* One pass over an entry (top) or an inner applyOps op (!top: ts/t/v and session fields are ignored there). */
static bool parse_raw(const uint8_t *data, uint32_t len, raw_op *r, bool top)
{
    bson_iter_t it;
    memset(r, 0, sizeof *r);
    r->term = -1;
    if (!bson_iter_init_from_data(&it, data, len))
        return false;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        switch (k[0]) {
        case 't':
            if (!top)
                break;
            if (strcmp(k, "ts") == 0) {
                if (BSON_ITER_HOLDS_TIMESTAMP(&it)) {
                    bson_iter_timestamp(&it, &r->secs, &r->inc);
                    r->has_ts = true;
                } else {
                    mark_bad(r, "ts", "is not a Timestamp", DECODE_MALFORMED);
                }
            } else if (strcmp(k, "t") == 0) {
                if (BSON_ITER_HOLDS_INT64(&it) || BSON_ITER_HOLDS_INT32(&it))
                    r->term = bson_iter_as_int64(&it);
                else
                    mark_bad(r, "t", "is not an int64/int32", DECODE_MALFORMED);
            } else if (strcmp(k, "txnNumber") == 0) {
                r->has_txn = true;
            }
            break;
        case 'v':
            if (!top || k[1] != '\0')
                break;
            if (BSON_ITER_HOLDS_INT32(&it) || BSON_ITER_HOLDS_INT64(&it) || BSON_ITER_HOLDS_DOUBLE(&it)) {
                if (bson_iter_as_int64(&it) != 2 || (BSON_ITER_HOLDS_DOUBLE(&it) && bson_iter_double(&it) != 2.0))
                    mark_bad(r, "v", "is not 2 (unsupported oplog format version)", DECODE_UNSUPPORTED);
            } else {
                mark_bad(r, "v", "is not a number", DECODE_MALFORMED);
            }
            break;
        case 'o':
            if (strcmp(k, "op") == 0) {
                if (!utf8_field(&it, &r->op, &r->op_len)) {
                    r->op = NULL;
                    mark_bad(r, "op", "is not a string", DECODE_MALFORMED);
                }
            } else if (strcmp(k, "o") == 0) {
                if (BSON_ITER_HOLDS_DOCUMENT(&it))
                    doc_field(&it, &r->o, &r->o_len);
                else
                    mark_bad(r, "o", "is not a document", DECODE_MALFORMED);
            } else if (strcmp(k, "o2") == 0) {
                if (BSON_ITER_HOLDS_DOCUMENT(&it))
                    doc_field(&it, &r->o2, &r->o2_len);
                else
                    mark_bad(r, "o2", "is not a document", DECODE_MALFORMED);
            }
            break;
        case 'n':
            if (strcmp(k, "ns") == 0 && !utf8_field(&it, &r->ns, &r->ns_len)) {
                r->ns = NULL;
                mark_bad(r, "ns", "is not a string", DECODE_MALFORMED);
            }
            break;
        case 'f':
            if (strcmp(k, "fromMigrate") == 0)
                r->from_migrate = bson_iter_as_bool(&it);
            break;
        case 'b':
            if (k[1] == '\0')
                r->upsert = bson_iter_as_bool(&it);
            break;
        case 'l':
            if (top && strcmp(k, "lsid") == 0)
                r->has_lsid = true;
            break;
        case 'i':
            if (strcmp(k, "isTimeseries") == 0)
                r->is_timeseries = bson_iter_as_bool(&it);
            break;
        case 'm':
            if (top && strcmp(k, "multiOpType") == 0)
                r->has_multi = true;
            break;
        default:
            break;
        }
    }
    return true;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* ops */

/* Splits "db.coll" at its first dot. False when there is no dot or the db part is empty. */
static bool split_ns(const char *ns, size_t len, span *db, span *coll)
{
    const char *dot = memchr(ns, '.', len);
    if (!dot || dot == ns)
        return false;
    db->s = ns;
    db->len = (size_t)(dot - ns);
    coll->s = dot + 1;
    coll->len = len - db->len - 1;
    return true;
}

#define BUCKETS_PREFIX_LEN 15 /* strlen("system.buckets.") */

/* db.system.buckets.NAME: the buckets of time-series collection NAME (5.0 to 8.x keep them there, under a view). */
static bool is_bucket_ns(span coll)
{
    return coll.len > BUCKETS_PREFIX_LEN && memcmp(coll.s, "system.buckets.", BUCKETS_PREFIX_LEN) == 0;
}

static bool internal_db(span db)
{
    return ns_is_internal(db.s, db.len, NULL, 0);
}

/* Why db.coll is not replicated, or NULL when it is. */
static const char *skip_reason(const dctx *c, span db, span coll)
{
    if (internal_db(db))
        return "internal database (admin/local/config)";
    if (ns_is_internal(db.s, db.len, coll.s, coll.len)) {
        if ((c->flags & DECODE_KEEP_SYSTEM) && is_bucket_ns(coll))
            return NULL;
        return "system collection";
    }
    return NULL;
}

static void set_noop(op *o, const char *reason)
{
    o->kind = OP_NOOP;
    o->reason = reason;
}

/* Copies the namespace strings and documents into one buffer owned by o. key may equal doc (shared copy). */
static bool op_fill(op *o, span db, span coll, span to_db, span to_coll, const uint8_t *doc, uint32_t doc_len,
                    const uint8_t *key, uint32_t key_len)
{
    bool key_is_doc = key && key == doc;
    size_t size = (size_t)doc_len + (key && !key_is_doc ? key_len : 0);
    if (db.s)
        size += db.len + 1;
    if (coll.s)
        size += coll.len + 1;
    if (to_db.s)
        size += to_db.len + 1;
    if (to_coll.s)
        size += to_coll.len + 1;
    uint8_t *buf = size <= sizeof o->buf_inline ? o->buf_inline : malloc(size);
    if (!buf)
        return false;
    uint8_t *p = buf;
    o->buf = buf;
    o->buf_len = size > UINT32_MAX ? UINT32_MAX : (uint32_t)size;
    if (doc) {
        memcpy(p, doc, doc_len);
        o->doc = p;
        o->doc_len = doc_len;
        p += doc_len;
    }
    if (key_is_doc) {
        o->key = o->doc;
        o->key_len = o->doc_len;
    } else if (key) {
        memcpy(p, key, key_len);
        o->key = p;
        o->key_len = key_len;
        p += key_len;
    }
    const span *src[4] = {&db, &coll, &to_db, &to_coll};
    const char **dst[4] = {&o->db, &o->coll, &o->to_db, &o->to_coll};
    for (int i = 0; i < 4; i++) {
        if (!src[i]->s)
            continue;
        memcpy(p, src[i]->s, src[i]->len);
        p[src[i]->len] = '\0';
        *dst[i] = (const char *)p;
        p += src[i]->len + 1;
    }
    return true;
}

/* Finds _id in a document; the value points into data. */
static bool find_id(const uint8_t *data, uint32_t len, bson_value_t *id)
{
    bson_iter_t it;
    if (!data || !bson_iter_init_from_data(&it, data, len) || !bson_iter_find(&it, "_id"))
        return false;
    *id = *bson_iter_value(&it);
    return true;
}

static bool numeric_value(bson_iter_t *it, double *v)
{
    if (BSON_ITER_HOLDS_INT32(it) || BSON_ITER_HOLDS_INT64(it) || BSON_ITER_HOLDS_DOUBLE(it)) {
        *v = bson_iter_as_double(it);
        return true;
    }
    return false;
}

/* Checks a modifier-style `o`: only $set/$unset (plus $v) with document values. */
static decode_status check_modifier(const dctx *c, const uint8_t *o, uint32_t len, const bson_value_t *id)
{
    bson_iter_t it;
    bson_iter_init_from_data(&it, o, len);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "$v") == 0)
            continue;
        if (strcmp(k, "$set") == 0 || strcmp(k, "$unset") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return fail(c, DECODE_MALFORMED, id, "modifier update: %s is not a document", k);
            continue;
        }
        if (k[0] == '$')
            return fail(c, DECODE_UNSUPPORTED, id, "modifier update uses operator %s (only $set/$unset expected)", k);
        return fail(c, DECODE_MALFORMED, id, "modifier update mixes operators and the plain field '%s'", k);
    }
    return DECODE_OK;
}

/* The form of an update's `o`: $v 2 → diff (checked by v2diff_validate); $v 1 → modifier; no $v and a first field
 * that starts with `$` → modifier (servers before 3.6 wrote no $v); anything else → replacement; any other $v →
 * unsupported. The server's own reading of `o` is extractUpdateType in mongodb/mongo
 * src/mongo/db/update/update_oplog_entry_serialization.cpp (current versions know only $v:2 and replacements). */
static decode_status classify_update(const dctx *c, const uint8_t *o, uint32_t len, const bson_value_t *id,
                                     op_update_form *form)
{
    bson_iter_t it;
    bool has_v = false, has_diff = false, first_dollar = false, empty = true;
    double v = 0;
    const uint8_t *diff = NULL;
    uint32_t diff_len = 0;

    bson_iter_init_from_data(&it, o, len);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (empty)
            first_dollar = k[0] == '$';
        empty = false;
        if (strcmp(k, "$v") == 0) {
            has_v = true;
            if (!numeric_value(&it, &v))
                return fail(c, DECODE_MALFORMED, id, "update $v is not a number");
        } else if (strcmp(k, "diff") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            has_diff = true;
            bson_iter_document(&it, &diff_len, &diff);
        }
    }
    if (empty)
        return fail(c, DECODE_MALFORMED, id, "update with an empty o");
    if (has_v && v == 2) {
        if (!has_diff)
            return fail(c, DECODE_MALFORMED, id, "$v:2 update without a diff document");
        bson_t view;
        char msg[256];
        int32_t code = 0;
        if (!bson_init_static(&view, diff, diff_len))
            return fail(c, DECODE_MALFORMED, id, "$v:2 diff is not valid BSON");
        if (!v2diff_validate(&view, &code, msg, sizeof msg))
            return fail(c, code == V2DIFF_NOMEM ? DECODE_NOMEM : DECODE_MALFORMED, id, "%s", msg);
        *form = OP_FORM_DIFF;
        return DECODE_OK;
    }
    if (has_v && v != 1)
        return fail(c, DECODE_UNSUPPORTED, id, "update with unknown $v %g", v);
    if (has_v || first_dollar) {
        *form = OP_FORM_MODIFIER;
        return check_modifier(c, o, len, id);
    }
    *form = OP_FORM_REPLACE;
    return DECODE_OK;
}

static decode_status nomem(const dctx *c)
{
    return fail(c, DECODE_NOMEM, NULL, "out of memory");
}

static const char VIEW_REASON[] = "a view: not replicated (no table); the collections it reads are";
static const char TIMESERIES_REASON[] =
    "a time-series collection: its buckets are not read from this source (no table)";
static const char TIMESERIES_VIEW_REASON[] = "the view of a time-series collection (its buckets are replicated)";

/* A view is created by an insert into DB.system.views, {_id: "DB.NAME", viewOn, pipeline} (the server's
 * DatabaseImpl::createView writes the view catalog's document with an ordinary insert; no create entry), and a
 * 5.0-7.x time-series collection NAME by one whose viewOn is "system.buckets.NAME". Both are noops that carry the
 * view's namespace, for one notice (decode_log_notices); anything unexpected in the document is only a noop. */
/* Whether a create names a view (viewOn). */
static bool has_view_on(const raw_op *r)
{
    bson_iter_t v;
    return bson_iter_init_from_data(&v, r->o, r->o_len) && bson_iter_find(&v, "viewOn");
}

static decode_status decode_view_insert(const dctx *c, const raw_op *r, span db, op *out)
{
    span vdb, vcoll, none = {NULL, 0};
    const char *view = NULL, *on = NULL;
    uint32_t view_len = 0;
    bson_iter_t v;
    if (bson_iter_init_from_data(&v, r->o, r->o_len)) {
        while (bson_iter_next(&v)) {
            if (strcmp(bson_iter_key(&v), "_id") == 0 && BSON_ITER_HOLDS_UTF8(&v))
                view = bson_iter_utf8(&v, &view_len);
            else if (strcmp(bson_iter_key(&v), "viewOn") == 0 && BSON_ITER_HOLDS_UTF8(&v))
                on = bson_iter_utf8(&v, NULL);
        }
    }
    if (view == NULL || on == NULL || !split_ns(view, view_len, &vdb, &vcoll) || vcoll.len == 0 || vdb.len != db.len ||
        memcmp(vdb.s, db.s, db.len) != 0) {
        set_noop(out, "system collection");
        return DECODE_OK;
    }
    if (!op_fill(out, vdb, vcoll, none, none, NULL, 0, NULL, 0))
        return nomem(c);
    bool ts = strncmp(on, "system.buckets.", BUCKETS_PREFIX_LEN) == 0;
    if (ts && (c->flags & DECODE_KEEP_SYSTEM)) {
        set_noop(out, TIMESERIES_VIEW_REASON); /* its buckets are read: the collection has its table */
        return DECODE_OK;
    }
    set_noop(out, ts ? TIMESERIES_REASON : VIEW_REASON);
    out->notice = true;
    return DECODE_OK;
}

/* i / u / d. */
static decode_status decode_data(const dctx *c, const raw_op *r, char code, op *out)
{
    bool borrow = (c->flags & DECODE_BORROW_PAYLOAD) != 0;
    span db, coll, none = {NULL, 0};
    bson_value_t id;
    id.value_type = BSON_TYPE_EOD;

    if (!split_ns(r->ns, r->ns_len, &db, &coll) || coll.len == 0)
        return fail(c, DECODE_MALFORMED, NULL, "namespace is not db.collection");
    const char *why = skip_reason(c, db, coll);
    if (why && code == 'i' && coll.len == 12 && memcmp(coll.s, "system.views", 12) == 0 && !internal_db(db))
        return decode_view_insert(c, r, db, out);
    if (why) {
        set_noop(out, why);
        return DECODE_OK;
    }
    /* A bucket of a time-series collection: the op is the collection's (db.NAME for db.system.buckets.NAME), and its
     * payload is kept whole, never borrowed: the sink reads it after rendering (sink/tseries.c). */
    bool bucket = is_bucket_ns(coll);
    if (bucket) {
        coll.s += BUCKETS_PREFIX_LEN;
        coll.len -= BUCKETS_PREFIX_LEN;
        borrow = false;
    }
    if (!bucket && r->is_timeseries && (c->flags & DECODE_KEEP_SYSTEM)) {
        /* a viewless time-series collection's bucket, under the collection's own name (8.3 and later mark it) */
        bucket = true;
        borrow = false;
    }
    out->bucket = bucket;
    switch (code) {
    case 'i':
        if (!find_id(r->o, r->o_len, &id))
            return fail(c, DECODE_MALFORMED, NULL, "insert without o._id");
        if (!op_fill(out, db, coll, none, none, borrow ? NULL : r->o, borrow ? 0 : r->o_len, r->o2, r->o2_len))
            return nomem(c);
        if (borrow) {
            out->doc = r->o;
            out->doc_len = r->o_len;
            out->doc_borrowed = true;
        }
        out->kind = OP_INSERT;
        find_id(out->doc, out->doc_len, &out->id);
        return DECODE_OK;
    case 'u': {
        op_update_form form = OP_FORM_NONE;
        if (!r->o2)
            return fail(c, DECODE_MALFORMED, NULL, "update without o2");
        if (!find_id(r->o2, r->o2_len, &id))
            return fail(c, DECODE_MALFORMED, NULL, "update without o2._id");
        decode_status st = classify_update(c, r->o, r->o_len, &id, &form);
        if (st != DECODE_OK)
            return st;
        if (!op_fill(out, db, coll, none, none, borrow ? NULL : r->o, borrow ? 0 : r->o_len, r->o2, r->o2_len))
            return nomem(c);
        if (borrow) {
            out->doc = r->o;
            out->doc_len = r->o_len;
            out->doc_borrowed = true;
        }
        out->kind = OP_UPDATE;
        out->form = form;
        out->upsert = r->upsert;
        find_id(out->key, out->key_len, &out->id);
        return DECODE_OK;
    }
    default: /* 'd' */
        if (!find_id(r->o, r->o_len, &id))
            return fail(c, DECODE_MALFORMED, NULL, "delete without o._id");
        if (!op_fill(out, db, coll, none, none, r->o, r->o_len, r->o, r->o_len))
            return nomem(c);
        out->kind = OP_DELETE;
        find_id(out->doc, out->doc_len, &out->id);
        return DECODE_OK;
    }
}

/* Commands decoded as noops: index builds and drops, collection options, and internal bookkeeping that changes no
 * document. (importCollection is not one: it attaches a collection's data files whole, so its documents are not in
 * the oplog; it is refused as unsupported, so the stream stops before it rather than silently miss them.) */
static const char *const noop_commands[] = {
    "createIndexes",
    "startIndexBuild",
    "commitIndexBuild",
    "abortIndexBuild",
    "dropIndexes",
    "deleteIndex",
    "deleteIndexes",
    "dropIndex",
    "collMod",
    "dbCheck",
    "modifyCollectionShardingIndexCatalog",
    "createDatabaseMetadata",
    "dropDatabaseMetadata",
    "setMultikeyMetadata",
    "dropIdent",
    "upgradeDowngradeViewlessTimeseries",
    /* The command names a 7.0 to 8.x server's parseCommandType (src/mongo/db/repl/oplog_entry.cpp) knows beyond the
     * above: global (unsharded-key) indexes, behind a feature flag; and newer shard-catalog bookkeeping. */
    "createGlobalIndex",
    "dropGlobalIndex",
    "setAllowChunkOperations",
    NULL,
};

static bool is_noop_command(const char *name)
{
    for (const char *const *p = noop_commands; *p; p++)
        if (strcmp(name, *p) == 0)
            return true;
    return false;
}

/* Reads a string-valued command field into s. */
static bool cmd_string(bson_iter_t *it, span *s)
{
    uint32_t len;
    const char *v;
    if (!utf8_field(it, &v, &len))
        return false;
    s->s = v;
    s->len = len;
    return true;
}

static decode_status decode_rename(const dctx *c, const raw_op *r, op *out)
{
    bson_iter_t it;
    span from = {NULL, 0}, to = {NULL, 0}, fdb, fcoll, tdb, tcoll;
    bool drop_target = false;

    bson_iter_init_from_data(&it, r->o, r->o_len);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "renameCollection") == 0) {
            if (!cmd_string(&it, &from))
                return fail(c, DECODE_MALFORMED, NULL, "renameCollection source is not a string");
        } else if (strcmp(k, "to") == 0) {
            if (!cmd_string(&it, &to))
                return fail(c, DECODE_MALFORMED, NULL, "renameCollection 'to' is not a string");
        } else if (strcmp(k, "dropTarget") == 0) {
            /* 3.6: bool or the dropped target's UUID; 4.0: UUID or false; later: UUID, only when one was dropped. */
            drop_target = BSON_ITER_HOLDS_BINARY(&it) || bson_iter_as_bool(&it);
        }
    }
    if (!from.s || !to.s)
        return fail(c, DECODE_MALFORMED, NULL, "renameCollection without its source or 'to'");
    if (!split_ns(from.s, from.len, &fdb, &fcoll) || fcoll.len == 0 || !split_ns(to.s, to.len, &tdb, &tcoll) ||
        tcoll.len == 0)
        return fail(c, DECODE_MALFORMED, NULL, "renameCollection '%.*s' -> '%.*s': not db.collection names",
                    (int)from.len, from.s, (int)to.len, to.s);
    const char *why_from = skip_reason(c, fdb, fcoll), *why_to = skip_reason(c, tdb, tcoll);
    if ((!why_from && is_bucket_ns(fcoll)) || (!why_to && is_bucket_ns(tcoll)))
        /* a server refuses to rename a time-series collection or its buckets (rename_collection.cpp) */
        return fail(c, DECODE_UNSUPPORTED, NULL, "renameCollection '%.*s' -> '%.*s' renames time-series buckets",
                    (int)from.len, from.s, (int)to.len, to.s);
    if (why_from && why_to) {
        set_noop(out, why_from);
        return DECODE_OK;
    }
    if (why_from || why_to)
        return fail(c, DECODE_UNSUPPORTED, NULL,
                    "renameCollection '%.*s' -> '%.*s' moves a collection between a replicated and a skipped "
                    "namespace",
                    (int)from.len, from.s, (int)to.len, to.s);
    if (!op_fill(out, fdb, fcoll, tdb, tcoll, NULL, 0, NULL, 0))
        return nomem(c);
    out->kind = OP_RENAME;
    out->drop_target = drop_target;
    return DECODE_OK;
}

/* `c` entries other than applyOps (which decode_entry_ex handles), at top level or inside an applyOps. */
static decode_status decode_command(const dctx *c, const raw_op *r, op *out)
{
    bson_iter_t it;
    span db, cmdcoll, none = {NULL, 0};

    if (!bson_iter_init_from_data(&it, r->o, r->o_len) || !bson_iter_next(&it))
        return fail(c, DECODE_MALFORMED, NULL, "command entry with an empty o");
    const char *name = bson_iter_key(&it);
    if (strcmp(name, "applyOps") == 0)
        return fail(c, DECODE_UNSUPPORTED, NULL, "nested applyOps");
    if (strcmp(name, "commitTransaction") == 0 || strcmp(name, "abortTransaction") == 0)
        return fail(c, DECODE_UNSUPPORTED, NULL, "%s (prepared transactions are not supported yet)", name);
    if (strcmp(name, "renameCollection") == 0)
        return decode_rename(c, r, out);
    if (!split_ns(r->ns, r->ns_len, &db, &cmdcoll))
        return fail(c, DECODE_MALFORMED, NULL, "command namespace is not db.$cmd");
    if (strcmp(name, "importCollection") == 0)
        return fail(c, DECODE_UNSUPPORTED, NULL,
                    "importCollection brings in documents the oplog does not hold: copy that collection again "
                    "(run --reimport)");
    if (is_noop_command(name)) {
        set_noop(out, "index or collection-option command");
        return DECODE_OK;
    }
    if (strcmp(name, "convertToCapped") == 0) {
        set_noop(out, "convertToCapped keeps the documents");
        return DECODE_OK;
    }
    bool create = strcmp(name, "create") == 0, drop = strcmp(name, "drop") == 0;
    bool empty = strcmp(name, "emptycapped") == 0, dropdb = strcmp(name, "dropDatabase") == 0;
    if (!create && !drop && !empty && !dropdb) {
        if (internal_db(db)) {
            set_noop(out, "command in an internal database");
            return DECODE_OK;
        }
        return fail(c, DECODE_UNSUPPORTED, NULL, "unknown command '%s'", name);
    }
    if (dropdb) {
        if (internal_db(db)) {
            set_noop(out, "internal database (admin/local/config)");
            return DECODE_OK;
        }
        if (!op_fill(out, db, none, none, none, NULL, 0, NULL, 0))
            return nomem(c);
        out->kind = OP_DROP_DATABASE;
        return DECODE_OK;
    }
    span coll;
    if (!cmd_string(&it, &coll) || coll.len == 0)
        return fail(c, DECODE_MALFORMED, NULL, "%s without a collection name", name);
    const char *why = skip_reason(c, db, coll);
    if (why) {
        set_noop(out, why);
        return DECODE_OK;
    }
    if (is_bucket_ns(coll)) {
        /* Read only with DECODE_KEEP_SYSTEM (skip_reason): the create of a time-series collection's buckets (with
         * its `timeseries` options, which the sink keeps) or their drop is the collection's; emptycapped cannot be
         * run on it. */
        coll.s += BUCKETS_PREFIX_LEN;
        coll.len -= BUCKETS_PREFIX_LEN;
        if (empty)
            return fail(c, DECODE_UNSUPPORTED, NULL, "emptycapped on the buckets of a time-series collection");
        if (!op_fill(out, db, coll, none, none, create ? r->o : NULL, create ? r->o_len : 0, NULL, 0))
            return nomem(c);
        out->kind = create ? OP_CREATE : OP_DROP;
        out->bucket = true;
        return DECODE_OK;
    }
    if (create) {
        /* Neither a view nor a time-series collection has a table yet. 5.0 to 7.x write a time-series collection
         * as a create of DB.system.buckets.NAME (skipped above, as a system collection) and its view as an insert
         * into DB.system.views (decode_view_insert); a server with viewless time-series collections writes one
         * create of NAME with its `timeseries` options. A create carrying viewOn is not what a server writes for a
         * view, but it would be one, so it is read the same way. One notice each (decode_log_notices). */
        bson_iter_t v;
        const char *reason = NULL;
        if (bson_iter_init_from_data(&v, r->o, r->o_len) && bson_iter_find(&v, "viewOn"))
            reason = BSON_ITER_HOLDS_UTF8(&v) && strncmp(bson_iter_utf8(&v, NULL), "system.buckets.", 15) == 0
                         ? TIMESERIES_REASON
                         : VIEW_REASON;
        else if (bson_iter_init_from_data(&v, r->o, r->o_len) && bson_iter_find(&v, "timeseries"))
            reason = TIMESERIES_REASON;
        if (reason == TIMESERIES_REASON && !has_view_on(r) && (c->flags & DECODE_KEEP_SYSTEM)) {
            /* A viewless time-series collection: its buckets are written under its own name, marked isTimeseries
             * (8.3 and later); its create makes its table of measurements. A write to it without the mark would be
             * taken for a document: the sink refuses that (a table of measurements, oplog2pg.ensure_table). */
            if (!op_fill(out, db, coll, none, none, r->o, r->o_len, NULL, 0))
                return nomem(c);
            out->kind = OP_CREATE;
            out->bucket = true;
            return DECODE_OK;
        }
        if (reason != NULL) {
            if (!op_fill(out, db, coll, none, none, NULL, 0, NULL, 0))
                return nomem(c);
            set_noop(out, reason);
            out->notice = true;
            return DECODE_OK;
        }
    }
    if (!op_fill(out, db, coll, none, none, create ? r->o : NULL, create ? r->o_len : 0, NULL, 0))
        return nomem(c);
    out->kind = create ? OP_CREATE : drop ? OP_DROP : OP_TRUNCATE;
    return DECODE_OK;
}

void decode_log_notices(const op_entry *e)
{
    for (size_t i = 0; i < e->n; i++) {
        const op *o = &e->ops[i];
        if (o->kind == OP_NOOP && o->notice && o->db != NULL && o->coll != NULL) {
            char at[OP_POS_STRLEN];
            log_notice("%s.%s (created at oplog entry %s) is %s", o->db, o->coll, op_pos_format(&o->pos, at, sizeof at),
                       o->reason);
        }
    }
}

const char DECODE_NEW_SHARD_REASON[] = "a chunk migration to a shard without chunks of the collection";

/* A noop. The one a chunk migration's donor writes, majority-committed, before a recipient that holds no chunk of the
 * collection gets one: {op: "n", ns, o: {msg: "Migrating chunk from shard A to shard B with no chunks for this
 * collection"}, o2: {migrateChunkToNewShard: ns, fromShardId, toShardId}} (mongo src/mongo/db/s/
 * migration_source_manager.cpp, notifyChangeStreamsOnRecipientFirstChunk) keeps the recipient's id in `db`, so that
 * the reader of a sharded cluster can tell a shard it does not read yet is about to hold data. */
static decode_status decode_noop(const dctx *c, const raw_op *r, op *out)
{
    bson_iter_t it, to;
    if (r->o2 != NULL && bson_iter_init_from_data(&it, r->o2, r->o2_len) &&
        bson_iter_find(&it, "migrateChunkToNewShard") && bson_iter_init_from_data(&to, r->o2, r->o2_len) &&
        bson_iter_find(&to, "toShardId") && BSON_ITER_HOLDS_UTF8(&to)) {
        uint32_t len = 0;
        const char *id = bson_iter_utf8(&to, &len);
        span none = {NULL, 0}, sid = {id, len};
        if (!op_fill(out, sid, none, none, none, NULL, 0, NULL, 0))
            return nomem(c);
        set_noop(out, DECODE_NEW_SHARD_REASON);
        return DECODE_OK;
    }
    set_noop(out, "noop entry");
    return DECODE_OK;
}

/* Checks the fields every op needs, then dispatches on the op code. */
static decode_status decode_op(const dctx *c, const raw_op *r, op *out)
{
    if (r->bad_field)
        return fail(c, r->bad_status, NULL, "field '%s' %s", r->bad_field, r->bad_what);
    if (!r->op)
        return fail(c, DECODE_MALFORMED, NULL, "missing op");
    if (!r->ns)
        return fail(c, DECODE_MALFORMED, NULL, "missing ns");
    if (r->op_len == 2 && r->op[0] == 'x' && (r->op[1] == 'i' || r->op[1] == 'd')) {
        /* Global index keys (op types "xi"/"xd", OpTypeEnum kInsertGlobalIndexKey/kDeleteGlobalIndexKey in 7.0's
         * oplog_entry.idl, behind a feature flag): index bookkeeping; the documents have their own entries. */
        set_noop(out, "global index key");
        return DECODE_OK;
    }
    char code = r->op_len == 1 ? r->op[0] : '\0';
    if (code != 'i' && code != 'u' && code != 'd' && code != 'c' && code != 'n')
        return fail(c, DECODE_UNSUPPORTED, NULL, "unknown op code '%.*s'", (int)r->op_len, r->op);
    if (!r->o)
        return fail(c, DECODE_MALFORMED, NULL, "missing o");
    if (r->from_migrate) {
        set_noop(out, "fromMigrate");
        return DECODE_OK;
    }
    switch (code) {
    case 'n':
        return decode_noop(c, r, out);
    case 'c':
        return decode_command(c, r, out);
    default:
        return decode_data(c, r, code, out);
    }
}

/* Is this entry an applyOps command (and not a skipped one)? */
static bool is_apply_ops(const raw_op *r)
{
    bson_iter_t it;
    if (r->bad_field || !r->op || r->op_len != 1 || r->op[0] != 'c' || !r->o || !r->ns || r->from_migrate)
        return false;
    return bson_iter_init_from_data(&it, r->o, r->o_len) && bson_iter_next(&it) &&
           strcmp(bson_iter_key(&it), "applyOps") == 0;
}

static decode_status decode_apply_ops(dctx *c, const raw_op *r, const op_pos *pos, op_entry *out)
{
    bson_iter_t it, arr;
    bool have_arr = false, partial = false, prepare = false, has_count = false;

    bson_iter_init_from_data(&it, r->o, r->o_len);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "applyOps") == 0) {
            if (!BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &arr))
                return fail(c, DECODE_MALFORMED, NULL, "applyOps is not an array");
            have_arr = true;
        } else if (strcmp(k, "partialTxn") == 0) {
            partial = bson_iter_as_bool(&it);
        } else if (strcmp(k, "prepare") == 0) {
            prepare = bson_iter_as_bool(&it);
        } else if (strcmp(k, "count") == 0) {
            has_count = true;
        }
    }
    if (!have_arr)
        return fail(c, DECODE_MALFORMED, NULL, "applyOps is not an array");
    bool reassembled = (c->flags & DECODE_TXN_PART) != 0; /* source/txn.h: the caller puts the chain together */
    if (partial && !reassembled)
        return fail(c, DECODE_UNSUPPORTED, NULL,
                    "applyOps with partialTxn (a transaction spread over several entries) is not supported yet");
    if (prepare && !reassembled)
        return fail(c, DECODE_UNSUPPORTED, NULL, "applyOps with prepare (a prepared transaction) is not supported yet");
    bool txn = r->has_lsid && r->has_txn && !r->has_multi;
    if (txn && has_count && !reassembled)
        return fail(c, DECODE_UNSUPPORTED, NULL,
                    "applyOps with count ends a transaction spread over several entries: not supported yet");

    size_t n = 0;
    bson_iter_t count_it = arr;
    while (bson_iter_next(&count_it))
        n++;
    if (!op_entry_alloc(out, pos, n ? n : 1))
        return nomem(c);
    out->atomic = !r->has_multi;
    if (n == 0) {
        set_noop(&out->ops[0], "empty applyOps");
        return DECODE_OK;
    }
    for (size_t i = 0; bson_iter_next(&arr); i++) {
        raw_op inner;
        const uint8_t *data;
        uint32_t len;
        decode_status st;
        c->index = (long)i;
        c->inner = NULL;
        if (!BSON_ITER_HOLDS_DOCUMENT(&arr))
            return fail(c, DECODE_MALFORMED, NULL, "inner op is not a document");
        bson_iter_document(&arr, &len, &data);
        if (!parse_raw(data, len, &inner, false))
            return fail(c, DECODE_MALFORMED, NULL, "inner op is not valid BSON");
        c->inner = &inner;
        st = decode_op(c, &inner, &out->ops[i]);
        c->inner = NULL;
        if (st != DECODE_OK)
            return st;
    }
    c->index = -1;
    return DECODE_OK;
}

decode_status decode_entry_ex(const bson_t *entry, unsigned flags, op_entry *out, char *err, size_t errlen)
{
    raw_op r;
    dctx c = {.flags = flags, .err = err, .errlen = errlen, .top = NULL, .inner = NULL, .index = -1};
    decode_status st;

    op_entry_init(out);
    if (err && errlen)
        err[0] = '\0';
    if (!parse_raw(bson_get_data(entry), entry->len, &r, true))
        return fail(&c, DECODE_MALFORMED, NULL, "not a valid BSON document");
    c.top = &r;
    if (!r.has_ts)
        return fail(&c, DECODE_MALFORMED, NULL, "missing or ill-typed ts (a Timestamp is required)");
    op_pos pos = {.secs = r.secs, .inc = r.inc, .term = r.term};

    if (is_apply_ops(&r))
        st = decode_apply_ops(&c, &r, &pos, out);
    else if (!op_entry_alloc(out, &pos, 1))
        st = nomem(&c);
    else
        st = decode_op(&c, &r, &out->ops[0]);
    if (st != DECODE_OK)
        op_entry_clear(out);
    return st;
}

decode_status decode_entry(const bson_t *entry, op_entry *out, char *err, size_t errlen)
{
    return decode_entry_ex(entry, 0, out, err, errlen);
}

const char *decode_status_name(decode_status s)
{
    switch (s) {
    case DECODE_OK:
        return "ok";
    case DECODE_MALFORMED:
        return "malformed";
    case DECODE_UNSUPPORTED:
        return "unsupported";
    case DECODE_NOMEM:
        return "out of memory";
    }
    return "?";
}

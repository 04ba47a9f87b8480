/*
 * oplog_edge.c — see oplog_edge.h.
 */
#include "source/oplog_edge.h"

#include "source/mongo_client.h"

#include <stdio.h>
#include <string.h>

/* One entry of local.oplog.rs: the first that `filter` matches in {$natural: natural} order. */
static bool find_one(mongoc_client_t *client, const bson_t *filter, int natural, bool majority, op_pos *out,
                     bool *found, char *err, size_t errlen, const char *what)
{
    mongoc_collection_t *oplog = mongoc_client_get_collection(client, "local", "oplog.rs");
    bson_t *opts = BCON_NEW("sort", "{", "$natural", BCON_INT32(natural), "}", "limit", BCON_INT64(1));
    if (majority) {
        /* The majority-committed snapshot: its newest entry is the majority commit point. */
        mongoc_read_concern_t *rc = mongoc_read_concern_new();
        mongoc_read_concern_set_level(rc, MONGOC_READ_CONCERN_LEVEL_MAJORITY);
        mongoc_read_concern_append(rc, opts);
        mongoc_read_concern_destroy(rc);
    }
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, filter, opts, NULL);
    const bson_t *doc;
    bson_iter_t it;
    bson_error_t e;
    *found = false;
    if (mongoc_cursor_next(cur, &doc) && bson_iter_init_find(&it, doc, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        bson_iter_timestamp(&it, &out->secs, &out->inc);
        out->term = -1;
        if (bson_iter_init_find(&it, doc, "t") && BSON_ITER_HOLDS_NUMBER(&it))
            out->term = bson_iter_as_int64(&it);
        *found = true;
    }
    bool ok = !mongoc_cursor_error(cur, &e);
    if (!ok)
        snprintf(err, errlen, "reading the %s oplog entry: %s", what, e.message);
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    mongoc_collection_destroy(oplog);
    return ok;
}

bool oplog_edge(mongoc_client_t *client, int natural, op_pos *out, bool *found, char *err, size_t errlen)
{
    bson_t filter = BSON_INITIALIZER;
    bool ok = find_one(client, &filter, natural, false, out, found, err, errlen, natural < 0 ? "newest" : "oldest");
    bson_destroy(&filter);
    return ok;
}

bool oplog_entry_before(mongoc_client_t *client, const op_pos *pos, op_pos *out, bool *found, char *err, size_t errlen)
{
    bson_t *filter = BCON_NEW("ts", "{", "$lt", BCON_TIMESTAMP(pos->secs, pos->inc), "}");
    bool ok = find_one(client, filter, -1, false, out, found, err, errlen, "previous");
    bson_destroy(filter);
    return ok;
}

bool oplog_newest_committed(mongoc_client_t *client, bool majority, op_pos *out, bool *found, char *err, size_t errlen)
{
    bson_t filter = BSON_INITIALIZER;
    bool ok = find_one(client, &filter, -1, majority, out, found, err, errlen,
                       majority ? "newest majority-committed" : "newest");
    bson_destroy(&filter);
    return ok;
}

/* A command entry's o renames a collection: {renameCollection: "db.a", to: "db.b", ...}, or an applyOps whose ops
 * hold one (a user's applyOps, or a transaction's: a rename is not allowed in a transaction, but the check costs
 * nothing). */
static bool renames(const bson_t *entry)
{
    bson_iter_t it, o, ops;
    if (!bson_iter_init_find(&it, entry, "op") || !BSON_ITER_HOLDS_UTF8(&it) ||
        strcmp(bson_iter_utf8(&it, NULL), "c") != 0)
        return false;
    if (!bson_iter_init_find(&o, entry, "o") || !BSON_ITER_HOLDS_DOCUMENT(&o) || !bson_iter_recurse(&o, &it))
        return false;
    if (bson_iter_find(&it, "renameCollection"))
        return true;
    if (!bson_iter_recurse(&o, &it) || !bson_iter_find(&it, "applyOps") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &ops))
        return false;
    while (bson_iter_next(&ops)) {
        const uint8_t *data;
        uint32_t len;
        bson_t inner;
        if (!BSON_ITER_HOLDS_DOCUMENT(&ops))
            continue; /* not an op; the decoder refuses such an entry when the reader meets it */
        bson_iter_document(&ops, &len, &data);
        if (bson_init_static(&inner, data, len) && renames(&inner))
            return true;
    }
    return false;
}

bool oplog_renames_between(mongoc_client_t *client, const op_pos *after, const op_pos *upto, bool *renamed, char *err,
                           size_t errlen)
{
    *renamed = false;
    mongoc_collection_t *oplog = mongoc_client_get_collection(client, "local", "oplog.rs");
    bson_t *filter = BCON_NEW("ts", "{", "$gt", BCON_TIMESTAMP(after->secs, after->inc), "}");
    bson_t *opts = BCON_NEW("sort", "{", "$natural", BCON_INT32(1), "}");
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, filter, opts, NULL);
    const bson_t *doc;
    bson_iter_t it;
    bson_error_t e;
    while (!*renamed && mongoc_cursor_next(cur, &doc)) {
        op_pos at = {0, 0, -1};
        if (bson_iter_init_find(&it, doc, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it))
            bson_iter_timestamp(&it, &at.secs, &at.inc);
        if (at.secs > upto->secs || (at.secs == upto->secs && at.inc > upto->inc))
            break;
        *renamed = renames(doc);
    }
    bool ok = !mongoc_cursor_error(cur, &e);
    if (!ok)
        snprintf(err, errlen, "reading the oplog after the copy's start: %s", e.message);
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    bson_destroy(filter);
    mongoc_collection_destroy(oplog);
    return ok;
}

bool oplog_window_with(const char *uri_text, const mongo_client_opts *opts, op_pos *oldest, op_pos *newest, bool *found,
                       char *err, size_t errlen)
{
    bool f1 = false, f2 = false;
    *found = false;
    mongoc_client_t *client = mongo_client_open(uri_text, opts, err, errlen);
    if (client == NULL)
        return false;
    bool ok = oplog_edge(client, 1, oldest, &f1, err, errlen) && oplog_edge(client, -1, newest, &f2, err, errlen);
    *found = ok && f1 && f2;
    mongoc_client_destroy(client);
    return ok;
}

bool oplog_window(const char *uri_text, op_pos *oldest, op_pos *newest, bool *found, char *err, size_t errlen)
{
    mongo_client_opts o = {.appname = "oplog2pg-probe"};
    return oplog_window_with(uri_text, &o, oldest, newest, found, err, errlen);
}

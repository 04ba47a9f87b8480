/*
 * caps.c — see caps.h: what a deployment offers a change-stream source, each capability asked of the server.
 *
 * NOTES
 * - One server (the primary libmongoc selects) and one explicit session for every command of a probe: a cursor
 *   opened in a session must be killed with that session's lsid (a real server refuses a killCursors from another),
 *   and with an implicit session per command each would get its own. A server without sessions is asked without.
 * - mongoc_client_command_with_opts, not the read_command variant: nothing here is retried behind our back, so a
 *   failure is seen as it happened.
 * - A server's answer is told from a failure to ask by the error's domain: with error API version 2 every reply
 *   with ok: 0 comes back in MONGOC_ERROR_SERVER (the write-concern and query domains are older servers' forms of
 *   the same); the network, server selection and the driver's own authentication have domains of their own.
 */
#include "source/stream/caps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "source/mongo_client.h"

/* The ChangeStreamHistoryLost and CappedPositionLost codes (src/mongo/base/error_codes.yml). */
#define CODE_HISTORY_LOST         286
#define CODE_CAPPED_POSITION_LOST 136

typedef struct probe {
    mongoc_client_t *client;
    mongoc_client_session_t *cs; /* NULL: the server has no sessions */
    uint32_t server_id;
    char db[128]; /* where the cluster-wide stream is refused: a database whose own stream this user may open */
} probe;

/* The server answered (ok: 0), as opposed to not being reached. */
static bool server_answered(const bson_error_t *e)
{
    return e->domain == MONGOC_ERROR_SERVER || e->domain == MONGOC_ERROR_QUERY ||
           e->domain == MONGOC_ERROR_WRITE_CONCERN;
}

static stream_caps_status failure_status(const bson_error_t *e)
{
    return mongo_error_refused(e) && !server_answered(e) ? STREAM_CAPS_REFUSED : STREAM_CAPS_RETRY;
}

static bool probe_open(probe *p, mongoc_client_t *client, bson_error_t *e)
{
    memset(p, 0, sizeof *p);
    p->client = client;
    mongoc_server_description_t *sd = mongoc_client_select_server(client, false, NULL, e);
    if (sd == NULL)
        return false;
    p->server_id = mongoc_server_description_id(sd);
    mongoc_server_description_destroy(sd);
    bson_error_t se;
    p->cs = mongoc_client_start_session(client, NULL, &se); /* NULL: no sessions there, asked without */
    return true;
}

static void probe_close(probe *p)
{
    if (p->cs != NULL)
        mongoc_client_session_destroy(p->cs);
    p->cs = NULL;
}

/* Runs cmd in db on the probe's server, in its session. reply is always initialised. */
static bool run(probe *p, const char *db, const bson_t *cmd, bson_t *reply, bson_error_t *e)
{
    bson_t opts = BSON_INITIALIZER;
    bool ok;
    if (p->cs != NULL && !mongoc_client_session_append(p->cs, &opts, e)) {
        bson_init(reply);
        ok = false;
    } else {
        BSON_APPEND_INT32(&opts, "serverId", (int32_t)p->server_id);
        ok = mongoc_client_command_with_opts(p->client, db, cmd, NULL, &opts, reply, e);
    }
    bson_destroy(&opts);
    return ok;
}

/* Kills cursor id of db's collection coll ("$cmd.aggregate" for a stream on admin); 0: none. */
static void kill_cursor(probe *p, const char *db, const char *coll, int64_t id)
{
    if (id == 0)
        return;
    bson_t cmd = BSON_INITIALIZER, arr, reply;
    bson_error_t e;
    BSON_APPEND_UTF8(&cmd, "killCursors", coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "cursors", &arr);
    BSON_APPEND_INT64(&arr, "0", id);
    bson_append_array_end(&cmd, &arr);
    (void)run(p, db, &cmd, &reply, &e); /* a cursor left behind times out on the server by itself */
    bson_destroy(&reply);
    bson_destroy(&cmd);
}

/* c->why := prefix and msg (a server's message, cut to what why holds). */
static void set_why(stream_cap *c, const char *prefix, const char *msg)
{
    snprintf(c->why, sizeof c->why, "%s%.200s", prefix, msg);
}

/* The reply's cursor id (0 when none). */
static int64_t cursor_id(const bson_t *reply)
{
    bson_iter_t it;
    if (bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, "cursor.id", &it) && BSON_ITER_HOLDS_NUMBER(&it))
        return bson_iter_as_int64(&it);
    return 0;
}

/* What opening a cluster-wide stream answered. */
typedef enum { OPEN_OK, OPEN_REFUSED, OPEN_FAILED } open_result;

/* aggregate: 1 on admin, [{$changeStream: {allChangesForCluster: true, <extra>}}, (split: the split stage)],
 * batchSize `batch`; the cursor is killed before returning. On OPEN_OK the reply is kept in *reply (the caller
 * destroys it); otherwise *e holds the error and *reply is empty. */
static open_result open_stream_on(probe *p, bool cluster, const bson_t *extra, bool split, int32_t batch, bson_t *reply,
                                  bson_error_t *e);

/* A database this user may read, for a probe where the cluster-wide stream is refused (Unauthorized, as to a user
 * whose roles grant changeStream and find on some databases only): {listDatabases: 1, nameOnly: true,
 * authorizedDatabases: true} lists those (docs "listDatabases"); the first that is not admin, local or config. What
 * a database's stream answers (the options, the post-batch token's time, the history) is the cluster's: every stream
 * reads the one oplog. */
static bool find_readable_db(probe *p)
{
    if (p->db[0] != '\0')
        return true;
    bson_t *cmd =
        BCON_NEW("listDatabases", BCON_INT32(1), "nameOnly", BCON_BOOL(true), "authorizedDatabases", BCON_BOOL(true));
    bson_t reply;
    bson_error_t e;
    bool ok = run(p, "admin", cmd, &reply, &e);
    bson_destroy(cmd);
    bson_iter_t it, dbs, one;
    if (ok && bson_iter_init_find(&it, &reply, "databases") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &dbs)) {
        while (p->db[0] == '\0' && bson_iter_next(&dbs)) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&dbs) || !bson_iter_recurse(&dbs, &one) || !bson_iter_find(&one, "name") ||
                !BSON_ITER_HOLDS_UTF8(&one))
                continue;
            const char *n = bson_iter_utf8(&one, NULL);
            if (strcmp(n, "admin") != 0 && strcmp(n, "local") != 0 && strcmp(n, "config") != 0 &&
                strlen(n) < sizeof p->db)
                snprintf(p->db, sizeof p->db, "%s", n);
        }
    }
    bson_destroy(&reply);
    return p->db[0] != '\0';
}

static open_result open_stream(probe *p, const bson_t *extra, bool split, int32_t batch, bson_t *reply, bson_error_t *e)
{
    if (p->db[0] == '\0') {
        open_result r = open_stream_on(p, true, extra, split, batch, reply, e);
        if (r != OPEN_REFUSED || e->code != 13 /* Unauthorized */ || !find_readable_db(p))
            return r;
    }
    return open_stream_on(p, false, extra, split, batch, reply, e);
}

/* cluster: the cluster-wide stream on admin; else a database-level stream on p->db. */
static open_result open_stream_on(probe *p, bool cluster, const bson_t *extra, bool split, int32_t batch, bson_t *reply,
                                  bson_error_t *e)
{
    bson_t cmd = BSON_INITIALIZER, pipeline, stage, spec, cursor, splitst, empty;
    BSON_APPEND_INT32(&cmd, "aggregate", 1);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "pipeline", &pipeline);
    BSON_APPEND_DOCUMENT_BEGIN(&pipeline, "0", &stage);
    BSON_APPEND_DOCUMENT_BEGIN(&stage, "$changeStream", &spec);
    if (cluster)
        BSON_APPEND_BOOL(&spec, "allChangesForCluster", true);
    if (extra != NULL)
        bson_concat(&spec, extra);
    bson_append_document_end(&stage, &spec);
    bson_append_document_end(&pipeline, &stage);
    if (split) {
        BSON_APPEND_DOCUMENT_BEGIN(&pipeline, "1", &splitst);
        BSON_APPEND_DOCUMENT_BEGIN(&splitst, "$changeStreamSplitLargeEvent", &empty);
        bson_append_document_end(&splitst, &empty);
        bson_append_document_end(&pipeline, &splitst);
    }
    bson_append_array_end(&cmd, &pipeline);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "cursor", &cursor);
    BSON_APPEND_INT32(&cursor, "batchSize", batch);
    bson_append_document_end(&cmd, &cursor);
    const char *db = cluster ? "admin" : p->db;
    bool ok = run(p, db, &cmd, reply, e);
    bson_destroy(&cmd);
    if (ok) {
        kill_cursor(p, db, "$cmd.aggregate", cursor_id(reply));
        return OPEN_OK;
    }
    bson_destroy(reply);
    bson_init(reply);
    return server_answered(e) ? OPEN_REFUSED : OPEN_FAILED;
}

/* open_stream, and where the server refuses it, again with fullDocument: "updateLookup": Azure Cosmos DB for MongoDB
 * (RU) opens no stream without it (learn.microsoft.com/azure/cosmos-db/mongodb/change-streams); its lack of deletes
 * is the start's business (source_choice.c), not these positions'. */
static open_result open_stream_lookup(probe *p, const bson_t *extra, bool split, int32_t batch, bson_t *reply,
                                      bson_error_t *e)
{
    open_result r = open_stream(p, extra, split, batch, reply, e);
    if (r != OPEN_REFUSED)
        return r;
    bson_t x = BSON_INITIALIZER, again;
    bson_error_t e2;
    if (extra != NULL)
        bson_concat(&x, extra);
    BSON_APPEND_UTF8(&x, "fullDocument", "updateLookup");
    open_result r2 = open_stream(p, &x, split, batch, &again, &e2);
    bson_destroy(&x);
    if (r2 != OPEN_OK) {
        bson_destroy(&again);
        return r;
    }
    bson_destroy(reply);
    bson_steal(reply, &again);
    return OPEN_OK;
}

/* One capability that is a $changeStream option (or the split stage): offered when a stream opens with it. */
static stream_caps_status probe_option(probe *p, stream_cap *c, const bson_t *extra, bool split, char *err,
                                       size_t errlen)
{
    bson_t reply;
    bson_error_t e;
    open_result r = open_stream(p, extra, split, 0, &reply, &e);
    bson_destroy(&reply);
    if (r == OPEN_FAILED) {
        snprintf(err, errlen, "opening a change stream: %s", e.message);
        return failure_status(&e);
    }
    c->probed = true;
    c->yes = r == OPEN_OK;
    if (!c->yes)
        set_why(c, "", e.message);
    return STREAM_CAPS_OK;
}

static uint32_t be32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

bool stream_token_time(const uint8_t *tok, size_t len, op_pos *out)
{
    bson_t doc;
    bson_iter_t it, dbs;
    if (tok != NULL && bson_init_static(&doc, tok, len) && bson_iter_init_find(&it, &doc, "perdb") &&
        BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &dbs)) {
        /* one token per database (source/stream/perdb.h): the earliest of their times, from which all resume */
        bool have = false;
        while (bson_iter_next(&dbs)) {
            const uint8_t *t;
            uint32_t tl;
            op_pos one;
            if (!BSON_ITER_HOLDS_DOCUMENT(&dbs))
                continue;
            bson_iter_document(&dbs, &tl, &t);
            if (stream_token_time(t, tl, &one) && (!have || op_pos_cmp(&one, out) < 0)) {
                *out = one;
                have = true;
            }
        }
        return have;
    }
    if (tok == NULL || !bson_init_static(&doc, tok, len) || !bson_iter_init_find(&it, &doc, "_data") ||
        !BSON_ITER_HOLDS_UTF8(&it))
        return false;
    uint32_t n;
    const char *hex = bson_iter_utf8(&it, &n);
    if (n < 18)
        return false;
    uint8_t b[9];
    for (int i = 0; i < 9; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        b[i] = (uint8_t)(hi << 4 | lo);
    }
    if (b[0] != 0x82) /* KeyString CType for a Timestamp (key_string.cpp, CType::kTimestamp = 130) */
        return false;
    out->secs = be32(b + 1);
    out->inc = be32(b + 5);
    out->term = -1;
    return true;
}

/* The post-batch resume token and the time of an opened stream's reply. */
static void note_position(stream_caps *out, const bson_t *reply)
{
    bson_iter_t it;
    if (bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, "cursor.postBatchResumeToken", &it) &&
        BSON_ITER_HOLDS_DOCUMENT(&it)) {
        uint32_t len;
        const uint8_t *data;
        bson_iter_document(&it, &len, &data);
        out->token = malloc(len);
        if (out->token != NULL) {
            memcpy(out->token, data, len);
            out->token_len = len;
        }
        out->pbrt.yes = true;
        out->have_time = stream_token_time(data, len, &out->time);
    } else {
        set_why(&out->pbrt, "", "the server sends no postBatchResumeToken");
    }
    out->pbrt.probed = true;
    if (!out->have_time && bson_iter_init_find(&it, reply, "operationTime") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        bson_iter_timestamp(&it, &out->time.secs, &out->time.inc);
        out->time.term = -1;
        out->have_time = true;
    }
}

/* buildInfo's version, and whether hello names a mongos. */
static stream_caps_status probe_server(probe *p, stream_caps *out, char *err, size_t errlen)
{
    bson_t *cmd = BCON_NEW("buildInfo", BCON_INT32(1)), reply;
    bson_error_t e;
    bson_iter_t it;
    bool ok = run(p, "admin", cmd, &reply, &e);
    bson_destroy(cmd);
    if (ok && bson_iter_init_find(&it, &reply, "version") && BSON_ITER_HOLDS_UTF8(&it))
        snprintf(out->version, sizeof out->version, "%s", bson_iter_utf8(&it, NULL));
    bson_destroy(&reply);
    if (!ok && !server_answered(&e)) {
        snprintf(err, errlen, "buildInfo: %s", e.message);
        return failure_status(&e);
    }
    cmd = BCON_NEW("hello", BCON_INT32(1));
    ok = run(p, "admin", cmd, &reply, &e);
    bson_destroy(cmd);
    if (ok && bson_iter_init_find(&it, &reply, "msg") && BSON_ITER_HOLDS_UTF8(&it))
        out->router = strcmp(bson_iter_utf8(&it, NULL), "isdbgrid") == 0;
    bson_destroy(&reply);
    if (!ok && !server_answered(&e)) {
        snprintf(err, errlen, "hello: %s", e.message);
        return failure_status(&e);
    }
    return STREAM_CAPS_OK;
}

/* A find on local.oplog.rs, limit 1: any answer but a refusal means the oplog can be read. */
static stream_caps_status probe_oplog(probe *p, stream_caps *out, char *err, size_t errlen)
{
    bson_t *cmd = BCON_NEW("find", BCON_UTF8("oplog.rs"), "filter", "{", "}", "limit", BCON_INT64(1), "singleBatch",
                           BCON_BOOL(true)),
           reply;
    bson_error_t e;
    bool ok = run(p, "local", cmd, &reply, &e);
    bson_destroy(cmd);
    bson_destroy(&reply);
    if (!ok && !server_answered(&e)) {
        snprintf(err, errlen, "reading local.oplog.rs: %s", e.message);
        return failure_status(&e);
    }
    out->oplog.probed = true;
    out->oplog.yes = ok;
    if (!ok)
        set_why(&out->oplog, "", e.message);
    return STREAM_CAPS_OK;
}

/* A collection of db with changeStreamPreAndPostImages enabled, into *found / c->why. */
static bool images_in(probe *p, const char *db, stream_cap *c, bool *found, bson_error_t *e)
{
    bson_t *cmd = BCON_NEW("listCollections", BCON_INT32(1)), reply;
    bool ok = run(p, db, cmd, &reply, e);
    bson_destroy(cmd);
    bson_iter_t it, batch, coll, f;
    if (ok && bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.firstBatch", &it) &&
        BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &batch)) {
        while (!*found && bson_iter_next(&batch)) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&batch) || !bson_iter_recurse(&batch, &coll))
                continue;
            bson_iter_t name = coll;
            if (bson_iter_find_descendant(&coll, "options.changeStreamPreAndPostImages.enabled", &f) &&
                bson_iter_as_bool(&f) && bson_iter_find(&name, "name") && BSON_ITER_HOLDS_UTF8(&name)) {
                *found = true;
                snprintf(c->why, sizeof c->why, "%s.%s", db, bson_iter_utf8(&name, NULL));
            }
        }
    }
    /* A database of more collections than one batch holds is read no further: what is found is reported, not
     * relied on (every event says itself whether it carries an image). */
    if (ok)
        kill_cursor(p, db, "$cmd.listCollections", cursor_id(&reply));
    bson_destroy(&reply);
    return ok;
}

static stream_caps_status probe_images(probe *p, stream_cap *c, char *err, size_t errlen)
{
    bson_t *cmd = BCON_NEW("listDatabases", BCON_INT32(1), "nameOnly", BCON_BOOL(true)), reply;
    bson_error_t e;
    bool ok = run(p, "admin", cmd, &reply, &e);
    bson_destroy(cmd);
    if (!ok) {
        bson_destroy(&reply);
        if (!server_answered(&e)) {
            snprintf(err, errlen, "listDatabases: %s", e.message);
            return failure_status(&e);
        }
        set_why(c, "listDatabases: ", e.message);
        return STREAM_CAPS_OK;
    }
    bson_iter_t it, dbs, d;
    bool found = false;
    if (bson_iter_init_find(&it, &reply, "databases") && BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &dbs)) {
        while (!found && bson_iter_next(&dbs)) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&dbs) || !bson_iter_recurse(&dbs, &d) || !bson_iter_find(&d, "name") ||
                !BSON_ITER_HOLDS_UTF8(&d))
                continue;
            const char *db = bson_iter_utf8(&d, NULL);
            if (strcmp(db, "local") == 0 || strcmp(db, "config") == 0)
                continue;
            if (!images_in(p, db, c, &found, &e) && !server_answered(&e)) {
                bson_destroy(&reply);
                snprintf(err, errlen, "listCollections on %s: %s", db, e.message);
                return failure_status(&e);
            }
        }
    }
    bson_destroy(&reply);
    c->probed = true;
    c->yes = found;
    if (!found)
        set_why(c, "", "no collection has changeStreamPreAndPostImages enabled");
    return STREAM_CAPS_OK;
}

/* A host of the client's URI ends with suffix. */
static bool host_ends_with(mongoc_client_t *client, const char *suffix)
{
    const mongoc_uri_t *uri = mongoc_client_get_uri(client);
    size_t sl = strlen(suffix);
    for (const mongoc_host_list_t *h = uri ? mongoc_uri_get_hosts(uri) : NULL; h != NULL; h = h->next) {
        size_t hl = strlen(h->host);
        if (hl >= sl && strcasecmp(h->host + hl - sl, suffix) == 0)
            return true;
    }
    return false;
}

#define COSMOS_REFUSAL                                                                                                 \
    "Azure Cosmos DB for MongoDB (RU) sends no delete events: a replica would keep every deleted document, so "        \
    "oplog2pg refuses it unless [mongodb] delete_reconcile is set (docs/sources.md)"

/* A refused cluster-wide stream (e holds the refusal): a server that is not MongoDB, saying what to do.
 * - Amazon DocumentDB answers 136 "modifyChangeStreams has not been run for this collection/database/cluster" until
 *   change streams are enabled (docs.aws.amazon.com/documentdb/latest/developerguide/change_streams.html; the reply
 *   as users quote it).
 * - Azure Cosmos DB for MongoDB (RU) requires fullDocument: "updateLookup" on every change stream
 *   (learn.microsoft.com/azure/cosmos-db/mongodb/change-streams): a stream that opens only with it is that server. */
static void server_kind(probe *p, stream_caps *out, const bson_error_t *e)
{
    if (strstr(e->message, "modifyChangeStreams") != NULL || host_ends_with(p->client, ".docdb.amazonaws.com") ||
        host_ends_with(p->client, ".docdb-elastic.amazonaws.com")) {
        out->documentdb = true;
        snprintf(out->streams.why, sizeof out->streams.why,
                 "change streams are not enabled: on Amazon DocumentDB, run {modifyChangeStreams: 1, database: \"\", "
                 "collection: \"\", enable: true} on admin (oplog2pg reads one stream of the whole cluster) "
                 "(server: code %u)",
                 e->code);
        return;
    }
    bson_t *x = BCON_NEW("fullDocument", BCON_UTF8("updateLookup")), reply;
    bson_error_t e2;
    open_result r = open_stream(p, x, false, 0, &reply, &e2);
    bson_destroy(x);
    bson_destroy(&reply);
    if (r == OPEN_OK || host_ends_with(p->client, ".cosmos.azure.com")) {
        out->cosmos = true;
        set_why(&out->streams, "", COSMOS_REFUSAL);
    }
}

static void not_tried(stream_cap *c, const char *why)
{
    c->probed = false;
    c->yes = false;
    set_why(c, "", why);
}

stream_caps_status stream_caps_probe(mongoc_client_t *client, stream_caps *out, char *err, size_t errlen)
{
    return stream_caps_probe_ex(client, true, out, err, errlen);
}

stream_caps_status stream_caps_probe_ex(mongoc_client_t *client, bool images, stream_caps *out, char *err,
                                        size_t errlen)
{
    memset(out, 0, sizeof *out);
    probe p;
    bson_error_t e;
    if (!probe_open(&p, client, &e)) {
        snprintf(err, errlen, "selecting a server: %s", e.message);
        return failure_status(&e);
    }
    stream_caps_status st = probe_server(&p, out, err, errlen);
    if (st == STREAM_CAPS_OK)
        st = probe_oplog(&p, out, err, errlen);
    if (st != STREAM_CAPS_OK)
        goto done;

    bson_t reply;
    open_result r = open_stream(&p, NULL, false, 0, &reply, &e);
    if (r == OPEN_FAILED) {
        snprintf(err, errlen, "opening a change stream: %s", e.message);
        st = failure_status(&e);
        goto done;
    }
    out->streams.probed = true;
    out->streams.yes = r == OPEN_OK;
    if (r == OPEN_OK)
        note_position(out, &reply);
    bson_destroy(&reply);
    if (!out->streams.yes) {
        set_why(&out->streams, "", e.message);
        server_kind(&p, out, &e);
        const char *why = "no change stream opens";
        not_tried(&out->pbrt, why);
        not_tried(&out->start_after, why);
        not_tried(&out->expanded_events, why);
        not_tried(&out->raw_updates, why);
        not_tried(&out->split_events, why);
    } else if (host_ends_with(client, ".cosmos.azure.com")) {
        out->cosmos = true;
        out->streams.yes = false;
        set_why(&out->streams, "", COSMOS_REFUSAL);
        const char *why = "no change stream oplog2pg can read";
        not_tried(&out->pbrt, why);
        not_tried(&out->start_after, why);
        not_tried(&out->expanded_events, why);
        not_tried(&out->raw_updates, why);
        not_tried(&out->split_events, why);
    } else {
        out->documentdb =
            host_ends_with(client, ".docdb.amazonaws.com") || host_ends_with(client, ".docdb-elastic.amazonaws.com");
        if (out->token != NULL) {
            bson_t extra = BSON_INITIALIZER, tok;
            if (bson_init_static(&tok, out->token, out->token_len))
                BSON_APPEND_DOCUMENT(&extra, "startAfter", &tok);
            st = probe_option(&p, &out->start_after, &extra, false, err, errlen);
            bson_destroy(&extra);
        } else {
            not_tried(&out->start_after, "no resume token to try it with");
        }
        bson_t *x = BCON_NEW("showExpandedEvents", BCON_BOOL(true));
        if (st == STREAM_CAPS_OK)
            st = probe_option(&p, &out->expanded_events, x, false, err, errlen);
        bson_destroy(x);
        x = BCON_NEW("showRawUpdateDescription", BCON_BOOL(true));
        if (st == STREAM_CAPS_OK)
            st = probe_option(&p, &out->raw_updates, x, false, err, errlen);
        bson_destroy(x);
        if (st == STREAM_CAPS_OK)
            st = probe_option(&p, &out->split_events, NULL, true, err, errlen);
    }
    if (st == STREAM_CAPS_OK && images)
        st = probe_images(&p, &out->images, err, errlen);
    else if (st == STREAM_CAPS_OK)
        not_tried(&out->images, "not asked");
done:
    probe_close(&p);
    return st;
}

void stream_caps_free(stream_caps *c)
{
    free(c->token);
    c->token = NULL;
    c->token_len = 0;
}

stream_start_status stream_caps_start_at(mongoc_client_t *client, const op_pos *at, char *why, size_t len)
{
    probe p;
    bson_error_t e;
    why[0] = '\0';
    if (!probe_open(&p, client, &e)) {
        snprintf(why, len, "selecting a server: %s", e.message);
        return STREAM_START_RETRY;
    }
    bson_t *extra = BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(at->secs, at->inc)), reply;
    open_result r = open_stream_lookup(&p, extra, false, 1, &reply, &e);
    bson_destroy(extra);
    bson_destroy(&reply);
    probe_close(&p);
    if (r == OPEN_OK)
        return STREAM_START_OK;
    snprintf(why, len, "%s", e.message);
    if (r == OPEN_FAILED)
        return STREAM_START_RETRY;
    return e.code == CODE_HISTORY_LOST || e.code == CODE_CAPPED_POSITION_LOST ? STREAM_START_LOST
                                                                              : STREAM_START_REFUSED;
}

stream_start_status stream_caps_now(mongoc_client_t *client, op_pos *now, bool *pbrt, uint8_t **tok, size_t *tok_len,
                                    char *why, size_t len)
{
    if (tok != NULL) {
        *tok = NULL;
        *tok_len = 0;
    }
    *pbrt = false;
    probe p;
    bson_error_t e;
    why[0] = '\0';
    if (!probe_open(&p, client, &e)) {
        snprintf(why, len, "selecting a server: %s", e.message);
        return STREAM_START_RETRY;
    }
    bson_t reply;
    open_result r = open_stream_lookup(&p, NULL, false, 0, &reply, &e);
    probe_close(&p);
    stream_start_status st = STREAM_START_OK;
    if (r == OPEN_OK) {
        stream_caps c;
        memset(&c, 0, sizeof c);
        note_position(&c, &reply);
        if (c.have_time) {
            *now = c.time;
            *pbrt = c.pbrt.yes && stream_token_time(c.token, c.token_len, now);
            if (tok != NULL && c.token != NULL) {
                *tok = c.token; /* handed over */
                *tok_len = c.token_len;
                c.token = NULL;
            }
        } else
            snprintf(why, len, "the server gave neither a post-batch resume token nor an operationTime");
        st = c.have_time ? STREAM_START_OK : STREAM_START_REFUSED;
        stream_caps_free(&c);
    } else {
        snprintf(why, len, "%s", e.message);
        st = r == OPEN_FAILED ? STREAM_START_RETRY : STREAM_START_REFUSED;
    }
    bson_destroy(&reply);
    return st;
}

/* getMores a rename search may take before it gives up (each waits at most RENAME_AWAIT_MS for new events). */
#define RENAME_GETMORES 50
#define RENAME_AWAIT_MS 200

/* The batch of a reply (firstBatch or nextBatch) holds a document; the post-batch resume token's clusterTime. */
static bool batch_read(const bson_t *reply, bool *any, op_pos *pbrt, bool *have_pbrt)
{
    bson_iter_t it, cur;
    *any = false;
    *have_pbrt = false;
    if (!bson_iter_init_find(&it, reply, "cursor") || !BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &cur))
        return false;
    while (bson_iter_next(&cur)) {
        const char *k = bson_iter_key(&cur);
        if ((strcmp(k, "firstBatch") == 0 || strcmp(k, "nextBatch") == 0) && BSON_ITER_HOLDS_ARRAY(&cur)) {
            bson_iter_t b;
            *any = bson_iter_recurse(&cur, &b) && bson_iter_next(&b);
        } else if (strcmp(k, "postBatchResumeToken") == 0 && BSON_ITER_HOLDS_DOCUMENT(&cur)) {
            uint32_t len;
            const uint8_t *data;
            bson_iter_document(&cur, &len, &data);
            *have_pbrt = stream_token_time(data, len, pbrt);
        }
    }
    return true;
}

/* Looks for a rename event in (from - 1, upto] on db's stream (admin: the cluster-wide one). *unauthorized: the
 * stream was refused with 13. */
static bool renames_scan(probe *p, const char *db, const op_pos *from, const op_pos *upto, bool *renamed,
                         bool *unauthorized, char *err, size_t errlen)
{
    /* [{$changeStream: {allChangesForCluster, startAtOperationTime}}, {$match: {operationType: "rename"}}] */
    bool cluster = strcmp(db, "admin") == 0;
    bson_t *cmd = BCON_NEW("aggregate", BCON_INT32(1), "pipeline", "[", "{", "$changeStream", "{",
                           "allChangesForCluster", BCON_BOOL(cluster), "startAtOperationTime",
                           BCON_TIMESTAMP(from->secs, from->inc), "}", "}", "{", "$match", "{", "operationType",
                           BCON_UTF8("rename"), "}", "}", "]", "cursor", "{", "batchSize", BCON_INT32(1), "}");
    bson_t reply;
    bson_error_t e;
    bool ok = run(p, db, cmd, &reply, &e);
    *unauthorized = !ok && server_answered(&e) && e.code == 13;
    bson_destroy(cmd);
    int64_t id = ok ? cursor_id(&reply) : 0;
    bool done = false, said = false; /* said: err holds the reason */
    for (int round = 0; ok && !done; round++) {
        bool any, have_pbrt;
        op_pos pbrt;
        if (!batch_read(&reply, &any, &pbrt, &have_pbrt)) {
            snprintf(err, errlen, "a change stream's reply without a cursor");
            ok = false;
            said = true;
            break;
        }
        if (any) {
            *renamed = true;
            done = true;
        } else if (!have_pbrt) {
            snprintf(err, errlen,
                     "the server sends no post-batch resume token (Amazon DocumentDB sends none), so how far the "
                     "stream was read is not known: the initial copy cannot run through per-database streams here "
                     "(docs/sources.md, \"One stream per database\"; --skip-import starts without it)");
            ok = false;
            said = true;
        } else if (op_pos_cmp(&pbrt, upto) > 0 || (round > 0 && op_pos_cmp(&pbrt, upto) == 0)) {
            /* past upto; or at it once the scan has run (a getMore's high-water mark is an entry the scan passed,
             * the aggregate's is only where the stream opens) */
            done = true;
        } else if (id == 0 || round == RENAME_GETMORES) {
            snprintf(err, errlen, "the change stream did not reach clusterTime %u:%u", upto->secs, upto->inc);
            ok = false;
            said = true;
        } else {
            bson_destroy(&reply);
            cmd = BCON_NEW("getMore", BCON_INT64(id), "collection", BCON_UTF8("$cmd.aggregate"), "batchSize",
                           BCON_INT32(1), "maxTimeMS", BCON_INT32(RENAME_AWAIT_MS));
            ok = run(p, db, cmd, &reply, &e);
            bson_destroy(cmd);
            if (ok)
                id = cursor_id(&reply);
        }
    }
    if (!ok && !said)
        snprintf(err, errlen, "reading the change stream for renames: %s", e.message);
    bson_destroy(&reply);
    kill_cursor(p, db, "$cmd.aggregate", id);
    return ok;
}

/* getMores the search without post-batch resume tokens may take, how long each awaits, and the events each asks
 * for. Every getMore either returns events (the stream moves on towards upto, and the first event past it ends the
 * search) or, awaited and empty, ends it: the bound only stops a search that would read on for ever. */
#define UNTIL_GETMORES 10000
#define UNTIL_AWAIT_MS 500
#define UNTIL_BATCH    100

/* An event of a batch: a rename (*is_rename), or its clusterTime (*at, *have_at). */
static void event_read(const bson_t *ev, bool *is_rename, op_pos *at, bool *have_at)
{
    bson_iter_t it;
    *is_rename = bson_iter_init_find(&it, ev, "operationType") && BSON_ITER_HOLDS_UTF8(&it) &&
                 strcmp(bson_iter_utf8(&it, NULL), "rename") == 0;
    *have_at = bson_iter_init_find(&it, ev, "clusterTime") && BSON_ITER_HOLDS_TIMESTAMP(&it);
    if (*have_at) {
        bson_iter_timestamp(&it, &at->secs, &at->inc);
        at->term = -1;
    }
}

/* stream_renames_between on a server that sends no post-batch resume token (DocumentDB), where nothing in a reply
 * says how far the stream has read. `upto` is then the operationTime of a reply the server gave after the
 * collections were listed (copy_stream_start), and the search reads every event of the stream from `from`, with no
 * stage that could hold one back, until either
 *   (a) an event with a clusterTime after upto arrives: a change stream returns its events in clusterTime order
 *       (the server's docs/change_streams.md; DocumentDB: "change events are ordered as they occurred"), so every
 *       event up to upto, each rename among them, came before it; or
 *   (b) a getMore that waited (maxTimeMS) comes back empty. It was sent after upto was reported, and upto is the
 *       time of a read the server had already answered: every write at or before upto was committed and visible
 *       then. With nothing filtered out, a getMore that waits and returns nothing found no event at all to return
 *       while it waited: the stream had none left that was visible when it began, and an event at or before upto
 *       that had not come yet was visible then, so it would have come in this batch. This holds where what a read
 *       sees is what the stream can show: on DocumentDB a write is visible only once durable in its storage quorum,
 *       with no separate majority point; a MongoDB server, where the stream shows only majority-committed writes,
 *       sends post-batch resume tokens and never comes here.
 * Unfiltered, the search reads the events written while the collections were listed and the first one after (a
 * $match on the server would send fewer, but a server that scans for long without a match may answer a getMore with
 * an empty batch before it reached the end, and (b) would no longer hold). A reply that is neither (no batch, the
 * cursor closed) ends the search with an error: nothing is assumed. */
static bool renames_without_pbrt(probe *p, const op_pos *from, const op_pos *upto, bool *renamed, char *err,
                                 size_t errlen)
{
    bson_t *cmd =
        BCON_NEW("aggregate", BCON_INT32(1), "pipeline", "[", "{", "$changeStream", "{", "allChangesForCluster",
                 BCON_BOOL(true), "startAtOperationTime", BCON_TIMESTAMP(from->secs, from->inc), "}", "}", "]",
                 "cursor", "{", "batchSize", BCON_INT32(UNTIL_BATCH), "}");
    bson_t reply;
    bson_error_t e;
    bool ok = run(p, "admin", cmd, &reply, &e);
    bson_destroy(cmd);
    if (!ok) {
        snprintf(err, errlen, "reading the change stream for renames: %s", e.message);
        bson_destroy(&reply);
        return false;
    }
    int64_t id = cursor_id(&reply);
    bool done = false;
    for (int round = 0; ok && !done; round++) {
        bson_iter_t it, b;
        if (!bson_iter_init(&it, &reply) ||
            !(bson_iter_find_descendant(&it, round == 0 ? "cursor.firstBatch" : "cursor.nextBatch", &it) &&
              BSON_ITER_HOLDS_ARRAY(&it)) ||
            !bson_iter_recurse(&it, &b)) {
            snprintf(err, errlen, "a change stream's reply without a batch");
            ok = false;
            break;
        }
        bool any = false;
        while (!done && bson_iter_next(&b)) {
            any = true;
            uint32_t len;
            const uint8_t *data;
            bson_t ev;
            bool readable = BSON_ITER_HOLDS_DOCUMENT(&b);
            if (readable) {
                bson_iter_document(&b, &len, &data);
                readable = bson_init_static(&ev, data, len);
            }
            if (!readable) {
                /* an event that cannot be read could be a rename: the search cannot say there was none */
                snprintf(err, errlen, "a change stream's batch holds an event that is not a document");
                ok = false;
                break;
            }
            bool is_rename, have_at;
            op_pos at;
            event_read(&ev, &is_rename, &at, &have_at);
            if (is_rename)
                *renamed = done = true; /* (even past upto: a rename that late costs only another listing) */
            else if (have_at && op_pos_cmp(&at, upto) > 0)
                done = true; /* (a) */
        }
        if (done || !ok)
            break;
        if (!any && round > 0)
            break; /* (b): an awaited getMore, empty */
        if (id == 0) {
            snprintf(err, errlen, "the change stream closed before clusterTime %u:%u", upto->secs, upto->inc);
            ok = false;
        } else if (round == UNTIL_GETMORES) {
            snprintf(err, errlen, "the change stream did not reach clusterTime %u:%u", upto->secs, upto->inc);
            ok = false;
        } else {
            bson_destroy(&reply);
            cmd = BCON_NEW("getMore", BCON_INT64(id), "collection", BCON_UTF8("$cmd.aggregate"), "batchSize",
                           BCON_INT32(UNTIL_BATCH), "maxTimeMS", BCON_INT32(UNTIL_AWAIT_MS));
            ok = run(p, "admin", cmd, &reply, &e);
            bson_destroy(cmd);
            if (ok)
                id = cursor_id(&reply);
            else
                snprintf(err, errlen, "reading the change stream for renames: %s", e.message);
        }
    }
    bson_destroy(&reply);
    kill_cursor(p, "admin", "$cmd.aggregate", id);
    return ok;
}

bool stream_renames_between(mongoc_client_t *client, const op_pos *after, const op_pos *upto, bool *renamed, char *err,
                            size_t errlen)
{
    probe p;
    bson_error_t e;
    *renamed = false;
    if (!probe_open(&p, client, &e)) {
        snprintf(err, errlen, "selecting a server: %s", e.message);
        return false;
    }
    op_pos from = *after;
    if (from.inc < UINT32_MAX) {
        from.inc++;
    } else {
        from.secs++;
        from.inc = 0;
    }
    /* [{$changeStream: {allChangesForCluster, startAtOperationTime}}, {$match: {operationType: "rename"}}] */
    bson_t *cmd = BCON_NEW("aggregate", BCON_INT32(1), "pipeline", "[", "{", "$changeStream", "{",
                           "allChangesForCluster", BCON_BOOL(true), "startAtOperationTime",
                           BCON_TIMESTAMP(from.secs, from.inc), "}", "}", "{", "$match", "{", "operationType",
                           BCON_UTF8("rename"), "}", "}", "]", "cursor", "{", "batchSize", BCON_INT32(1), "}");
    bson_t reply;
    bool ok = run(&p, "admin", cmd, &reply, &e), lookup_only = false;
    /* 13 Unauthorized: a user with rights on some databases only (who reads one stream per database) */
    bool unauthorized = !ok && server_answered(&e) && e.code == 13;
    if (!ok && server_answered(&e)) {
        /* Azure Cosmos DB for MongoDB (RU) opens a stream only with fullDocument "updateLookup" (as in
         * open_stream_lookup); it sends no rename events, so the search then finds none. */
        bson_t *cmd2 =
            BCON_NEW("aggregate", BCON_INT32(1), "pipeline", "[", "{", "$changeStream", "{", "allChangesForCluster",
                     BCON_BOOL(true), "fullDocument", BCON_UTF8("updateLookup"), "startAtOperationTime",
                     BCON_TIMESTAMP(from.secs, from.inc), "}", "}", "{", "$match", "{", "operationType",
                     BCON_UTF8("rename"), "}", "}", "]", "cursor", "{", "batchSize", BCON_INT32(1), "}");
        bson_t reply2;
        bson_error_t e2;
        if (run(&p, "admin", cmd2, &reply2, &e2)) {
            bson_destroy(&reply);
            bson_steal(&reply, &reply2);
            ok = lookup_only = true;
        } else {
            bson_destroy(&reply2); /* the refusal's reply */
        }
        bson_destroy(cmd2);
    }
    bson_destroy(cmd);
    int64_t id = ok ? cursor_id(&reply) : 0;
    bool done = false, said = false, no_pbrt = false; /* said: err holds the reason */
    for (int round = 0; ok && !done; round++) {
        bool any, have_pbrt;
        op_pos pbrt;
        if (!batch_read(&reply, &any, &pbrt, &have_pbrt)) {
            snprintf(err, errlen, "a change stream's reply without a cursor");
            ok = false;
            said = true;
            break;
        }
        if (!have_pbrt) {
            no_pbrt = done = true; /* searched another way, below (whatever this batch holds) */
        } else if (any) {
            *renamed = true;
            done = true;
        } else if (op_pos_cmp(&pbrt, upto) > 0 || (round > 0 && op_pos_cmp(&pbrt, upto) == 0)) {
            /* past upto; or at it once the scan has run (a getMore's high-water mark is an entry the scan passed,
             * the aggregate's is only where the stream opens) */
            done = true;
        } else if (id == 0 || round == RENAME_GETMORES) {
            snprintf(err, errlen, "the change stream did not reach clusterTime %u:%u", upto->secs, upto->inc);
            ok = false;
            said = true;
        } else {
            bson_destroy(&reply);
            cmd = BCON_NEW("getMore", BCON_INT64(id), "collection", BCON_UTF8("$cmd.aggregate"), "batchSize",
                           BCON_INT32(1), "maxTimeMS", BCON_INT32(RENAME_AWAIT_MS));
            ok = run(&p, "admin", cmd, &reply, &e);
            bson_destroy(cmd);
            if (ok)
                id = cursor_id(&reply);
        }
    }
    if (!ok && !said)
        snprintf(err, errlen, "reading the change stream for renames: %s", e.message);
    bson_destroy(&reply);
    kill_cursor(&p, "admin", "$cmd.aggregate", id);
    /* Without post-batch tokens the end is proved by reading every event (renames_without_pbrt); a server that opens
     * streams only with updateLookup (Cosmos DB RU) sends no rename events at all, so no search there can find one
     * (docs/sources.md says renames are not seen on it). */
    if (ok && no_pbrt && !lookup_only)
        ok = renames_without_pbrt(&p, &from, upto, renamed, err, errlen);
    if (!ok && unauthorized) {
        /* The cluster-wide stream refused: every database this user may read is scanned, which holds every database
         * it can copy (listDatabases with authorizedDatabases). */
        bson_t *lcmd = BCON_NEW("listDatabases", BCON_INT32(1), "nameOnly", BCON_BOOL(true), "authorizedDatabases",
                                BCON_BOOL(true));
        bson_t lreply;
        ok = run(&p, "admin", lcmd, &lreply, &e);
        bson_destroy(lcmd);
        bson_iter_t it, dbs, one;
        if (!ok)
            snprintf(err, errlen, "listing the databases to read for renames: %s", e.message);
        if (ok && bson_iter_init_find(&it, &lreply, "databases") && BSON_ITER_HOLDS_ARRAY(&it) &&
            bson_iter_recurse(&it, &dbs)) {
            while (ok && !*renamed && bson_iter_next(&dbs)) {
                if (!BSON_ITER_HOLDS_DOCUMENT(&dbs) || !bson_iter_recurse(&dbs, &one) ||
                    !bson_iter_find(&one, "name") || !BSON_ITER_HOLDS_UTF8(&one))
                    continue;
                const char *n = bson_iter_utf8(&one, NULL);
                bool refused = false;
                if (strcmp(n, "admin") != 0 && strcmp(n, "local") != 0 && strcmp(n, "config") != 0)
                    ok = renames_scan(&p, n, &from, upto, renamed, &refused, err, errlen);
            }
        }
        bson_destroy(&lreply);
    }
    probe_close(&p);
    return ok;
}

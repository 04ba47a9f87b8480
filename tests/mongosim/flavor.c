/*
 * flavor.c — `--flavor atlas-shared | documentdb | cosmos` (see flavor.h and README "Flavors").
 *
 * Sources, per flavor (an "(inferred)" marks what no public source states):
 * - atlas-shared: mongodb.com/docs/atlas/reference/unsupported-commands ("Limits the find operation on the local
 *   database to the oplog.rs collection"; "Limits the find operation to using an equality condition when querying
 *   the ns field in the oplog.rs collection"; the generic refusal "<$command> is not allowed or the syntax is
 *   incorrect, see the Atlas documentation for more information."); jira.mongodb.org DOCS-10049 (a find with an ns
 *   that is not a string: code 8000 AtlasError "querying oplog with an ns other than a string is not supported in
 *   this atlas tier"). A find with no ns at all getting the generic refusal is inferred.
 * - documentdb: docs.aws.amazon.com/documentdb/latest/developerguide/change_streams.html (change streams off until
 *   `modifyChangeStreams` on admin enables them for a collection, a database, or all: database "" and collection
 *   ""; the stages $match $project $redact $addFields $replaceRoot); the error a stream opened before that gets, code
 *   136 "modifyChangeStreams has not been run for this collection/database/cluster", quoted from DocumentDB replies
 *   on the MongoDB community forum ("Issue around usage of startAtOperationTime in change streams") and elsewhere;
 *   no postBatchResumeToken and `startAfter` refused (estuary/connectors source-mongodb; PeerDB); tokens that are not
 *   KeyString (PeerDB PR #4666). The refusals' codes and texts for startAfter, showExpandedEvents,
 *   showRawUpdateDescription (the IDL's 40415 for an unknown field) and the split stage (40324, the error of servers
 *   without the stage) are inferred, as is the refusal of a find on local.oplog.rs (13).
 * - cosmos: learn.microsoft.com/azure/cosmos-db/mongodb/change-streams (operationType and updateDescription not in
 *   the output; no delete events; `fullDocument: "updateLookup"` required; a dropped collection gives no
 *   invalidate). The refusal without updateLookup (its text) and of a find on local.oplog.rs are inferred.
 */
#include "flavor.h"

#include <stdlib.h>
#include <string.h>

bool flavor_parse(const char *name, sim_flavor *out)
{
    static const struct {
        const char *name;
        sim_flavor f;
    } names[] = {{"mongodb", SIM_FLAVOR_MONGODB},
                 {"atlas-shared", SIM_FLAVOR_ATLAS_SHARED},
                 {"documentdb", SIM_FLAVOR_DOCUMENTDB},
                 {"cosmos", SIM_FLAVOR_COSMOS}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i].name) == 0) {
            *out = names[i].f;
            return true;
        }
    return false;
}

static void reply_named(sim_reply *r, int code, const char *code_name, const char *msg)
{
    bson_t doc = BSON_INITIALIZER;
    BSON_APPEND_DOUBLE(&doc, "ok", 0.0);
    BSON_APPEND_UTF8(&doc, "errmsg", msg);
    BSON_APPEND_INT32(&doc, "code", code);
    BSON_APPEND_UTF8(&doc, "codeName", code_name);
    reply_bson(r, &doc);
    bson_destroy(&doc);
}

/* ---- local.oplog.rs ---- */

bool flavor_oplog_find(sim_server *srv, sim_reply *r, const bson_t *filter)
{
    bson_iter_t it;
    switch (srv->opts.flavor) {
    case SIM_FLAVOR_MONGODB:
        return true;
    case SIM_FLAVOR_ATLAS_SHARED:
        if (!bson_iter_init_find(&it, filter, "ns")) {
            reply_named(r, 8000, "AtlasError",
                        "find is not allowed or the syntax is incorrect, see the Atlas documentation for more "
                        "information.");
            return false;
        }
        if (!BSON_ITER_HOLDS_UTF8(&it)) {
            reply_named(r, 8000, "AtlasError",
                        "querying oplog with an ns other than a string is not supported in this atlas tier");
            return false;
        }
        return true;
    case SIM_FLAVOR_DOCUMENTDB:
    case SIM_FLAVOR_COSMOS:
        reply_named(r, 13, "Unauthorized", "not authorized on local to execute command { find: \"oplog.rs\" }");
        return false;
    }
    return true;
}

/* ---- modifyChangeStreams ---- */

static bool enabled_has(const sim_server *srv, const char *db, const char *coll, size_t *at)
{
    for (size_t i = 0; i < srv->n_cs_enabled; i++) {
        const char *d = srv->cs_enabled[i], *c = d + strlen(d) + 1;
        if (strcmp(d, db) == 0 && strcmp(c, coll) == 0) {
            if (at)
                *at = i;
            return true;
        }
    }
    return false;
}

/* A stream on db.coll (coll NULL: the database; db NULL: the cluster) may open: its namespace, or one holding it,
 * was enabled. */
static bool cs_enabled_for(const sim_server *srv, const char *db, const char *coll)
{
    if (enabled_has(srv, "", "", NULL))
        return true;
    if (db == NULL)
        return false;
    if (enabled_has(srv, db, "", NULL))
        return true;
    return coll != NULL && enabled_has(srv, db, coll, NULL);
}

void flavor_cmd_modify_change_streams(sim_server *srv, sim_reply *r, const bson_t *cmd, const char *db)
{
    if (srv->opts.flavor != SIM_FLAVOR_DOCUMENTDB) {
        reply_error(r, 59, "no such command: 'modifyChangeStreams'");
        return;
    }
    if (strcmp(db, "admin") != 0) {
        /* (inferred) the AWS examples run it on admin only */
        reply_error(r, 13, "modifyChangeStreams may only be run against the admin database.");
        return;
    }
    bson_iter_t it;
    const char *d = NULL, *c = NULL;
    bool enable = false, have_enable = false;
    if (bson_iter_init_find(&it, cmd, "database") && BSON_ITER_HOLDS_UTF8(&it))
        d = bson_iter_utf8(&it, NULL);
    if (bson_iter_init_find(&it, cmd, "collection") && BSON_ITER_HOLDS_UTF8(&it))
        c = bson_iter_utf8(&it, NULL);
    if (bson_iter_init_find(&it, cmd, "enable") && BSON_ITER_HOLDS_BOOL(&it)) {
        enable = bson_iter_bool(&it);
        have_enable = true;
    }
    if (!d || !c || !have_enable) {
        reply_error(r, 2, "modifyChangeStreams needs database, collection (strings) and enable (bool)");
        return;
    }
    if (*d == '\0' && *c != '\0') {
        reply_error(r, 2, "modifyChangeStreams: a collection needs its database");
        return;
    }
    size_t at;
    if (enable && !enabled_has(srv, d, c, NULL)) {
        size_t dl = strlen(d), cl = strlen(c);
        char *e = malloc(dl + cl + 2);
        char **v = realloc(srv->cs_enabled, (srv->n_cs_enabled + 1) * sizeof *v);
        if (!e || !v)
            abort();
        memcpy(e, d, dl + 1);
        memcpy(e + dl + 1, c, cl + 1);
        srv->cs_enabled = v;
        srv->cs_enabled[srv->n_cs_enabled++] = e;
    } else if (!enable && enabled_has(srv, d, c, &at)) {
        free(srv->cs_enabled[at]);
        srv->cs_enabled[at] = srv->cs_enabled[--srv->n_cs_enabled];
    }
    bson_t ok = BSON_INITIALIZER;
    BSON_APPEND_DOUBLE(&ok, "ok", 1.0);
    reply_bson(r, &ok);
    bson_destroy(&ok);
}

void flavor_free(sim_server *srv)
{
    for (size_t i = 0; i < srv->n_cs_enabled; i++)
        free(srv->cs_enabled[i]);
    free(srv->cs_enabled);
    srv->cs_enabled = NULL;
    srv->n_cs_enabled = 0;
}

/* ---- DocumentDB's opaque resume tokens: the server's token bytes in base64 ---- */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int hexv(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
}

/* Uppercase hex to base64; NULL when hex is not hex. */
static char *hex_to_b64(const char *hex)
{
    size_t n = strlen(hex) / 2;
    uint8_t *b = malloc(n + 1);
    char *out = malloc(4 * (n / 3 + 1) + 1);
    if (!b || !out)
        abort();
    for (size_t i = 0; i < n; i++) {
        int hi = hexv(hex[2 * i]), lo = hexv(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(b);
            free(out);
            return NULL;
        }
        b[i] = (uint8_t)(hi << 4 | lo);
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < n ? b[i + 2] : 0);
        out[o++] = B64[v >> 18 & 63];
        out[o++] = B64[v >> 12 & 63];
        out[o++] = i + 1 < n ? B64[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? B64[v & 63] : '=';
    }
    out[o] = '\0';
    free(b);
    return out;
}

/* base64 back to uppercase hex; NULL when it is not base64. */
static char *b64_to_hex(const char *s)
{
    size_t len = strlen(s);
    if (len == 0 || len % 4 != 0)
        return NULL;
    char *out = malloc(len / 4 * 6 + 1);
    if (!out)
        abort();
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        uint32_t v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            const char *p = s[i + k] ? strchr(B64, s[i + k]) : NULL;
            if (s[i + k] == '=' && i + 4 == len && k >= 2) {
                pad++;
                v <<= 6;
                continue;
            }
            if (!p || pad) {
                free(out);
                return NULL;
            }
            v = v << 6 | (uint32_t)(p - B64);
        }
        for (int k = 0; k < 3 - pad; k++) {
            static const char H[] = "0123456789ABCDEF";
            uint8_t byte = (uint8_t)(v >> (16 - 8 * k));
            out[o++] = H[byte >> 4];
            out[o++] = H[byte & 15];
        }
    }
    out[o] = '\0';
    return out;
}

/* ---- $changeStream ---- */

static bool refuse(sim_reply *r, int code, const char *code_name, const char *msg)
{
    reply_named(r, code, code_name, msg);
    return false;
}

bool flavor_cs_open(sim_server *srv, sim_reply *r, const char *db, const char *coll, const bson_t *pipeline,
                    bson_t *out)
{
    bson_init(out);
    sim_flavor f = srv->opts.flavor;
    if (f == SIM_FLAVOR_MONGODB || f == SIM_FLAVOR_ATLAS_SHARED) {
        bson_copy_to_excluding_noinit(pipeline, out, "", NULL);
        return true;
    }
    bson_iter_t st, sk, o;
    bool all_cluster = false, lookup = false;
    uint32_t index = 0;
    bson_iter_init(&st, pipeline);
    while (bson_iter_next(&st)) {
        char key[16];
        snprintf(key, sizeof key, "%u", index++);
        if (!BSON_ITER_HOLDS_DOCUMENT(&st) || !bson_iter_recurse(&st, &sk) || !bson_iter_next(&sk)) {
            bson_append_iter(out, key, -1, &st);
            continue;
        }
        const char *name = bson_iter_key(&sk);
        if (strcmp(name, "$changeStreamSplitLargeEvent") == 0)
            return refuse(r, 40324, "Location40324",
                          "Unrecognized pipeline stage name: '$changeStreamSplitLargeEvent'");
        if (strcmp(name, "$changeStream") != 0 || !BSON_ITER_HOLDS_DOCUMENT(&sk)) {
            bson_append_iter(out, key, -1, &st);
            continue;
        }
        bson_t stage, spec;
        BSON_APPEND_DOCUMENT_BEGIN(out, key, &stage);
        BSON_APPEND_DOCUMENT_BEGIN(&stage, "$changeStream", &spec);
        bson_iter_recurse(&sk, &o);
        while (bson_iter_next(&o)) {
            const char *k = bson_iter_key(&o);
            if (strcmp(k, "showExpandedEvents") == 0 || strcmp(k, "showRawUpdateDescription") == 0 ||
                (f == SIM_FLAVOR_DOCUMENTDB && strcmp(k, "startAfter") == 0)) {
                char msg[128];
                snprintf(msg, sizeof msg, "BSON field '$changeStream.%s' is an unknown field.", k);
                return refuse(r, 40415, "Location40415", msg);
            }
            if (strcmp(k, "allChangesForCluster") == 0)
                all_cluster = bson_iter_as_bool(&o);
            if (strcmp(k, "fullDocument") == 0 && BSON_ITER_HOLDS_UTF8(&o) &&
                strcmp(bson_iter_utf8(&o, NULL), "updateLookup") == 0)
                lookup = true;
            bson_iter_t d;
            if ((strcmp(k, "resumeAfter") == 0 || strcmp(k, "startAfter") == 0) && BSON_ITER_HOLDS_DOCUMENT(&o) &&
                bson_iter_recurse(&o, &d) && bson_iter_find(&d, "_data") && BSON_ITER_HOLDS_UTF8(&d)) {
                char *hex = b64_to_hex(bson_iter_utf8(&d, NULL));
                if (!hex)
                    return refuse(r, 9, "FailedToParse", "resume token is not one this server issued");
                bson_t tok;
                BSON_APPEND_DOCUMENT_BEGIN(&spec, k, &tok);
                BSON_APPEND_UTF8(&tok, "_data", hex);
                bson_append_document_end(&spec, &tok);
                free(hex);
                continue;
            }
            bson_append_iter(&spec, k, -1, &o);
        }
        bson_append_document_end(&stage, &spec);
        bson_append_document_end(out, &stage);
    }
    if (f == SIM_FLAVOR_DOCUMENTDB && !cs_enabled_for(srv, all_cluster ? NULL : db, coll))
        return refuse(r, 136, "CappedPositionLost",
                      "modifyChangeStreams has not been run for this collection/database/cluster");
    if (f == SIM_FLAVOR_COSMOS && !lookup)
        return refuse(r, 2, "BadValue",
                      "Change stream must be opened with fullDocument: \"updateLookup\" on this server");
    return true;
}

/* The namespace of an event, "" parts when absent. */
static void event_ns(const bson_t *ev, const char **db, const char **coll)
{
    bson_iter_t it, f;
    *db = *coll = "";
    if (bson_iter_init(&it, ev) && bson_iter_find_descendant(&it, "ns.db", &f) && BSON_ITER_HOLDS_UTF8(&f))
        *db = bson_iter_utf8(&f, NULL);
    if (bson_iter_init(&it, ev) && bson_iter_find_descendant(&it, "ns.coll", &f) && BSON_ITER_HOLDS_UTF8(&f))
        *coll = bson_iter_utf8(&f, NULL);
}

void flavor_cs_events(const sim_server *srv, const bson_t *events, bson_t *out)
{
    sim_flavor f = srv->opts.flavor;
    bson_init(out);
    if (f == SIM_FLAVOR_MONGODB || f == SIM_FLAVOR_ATLAS_SHARED) {
        bson_copy_to_excluding_noinit(events, out, "", NULL);
        return;
    }
    bson_iter_t it, k;
    uint32_t n = 0;
    bson_iter_init(&it, events);
    while (bson_iter_next(&it)) {
        uint32_t len;
        const uint8_t *data;
        bson_t ev;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it))
            continue;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&ev, data, len);
        const char *type =
            bson_iter_init_find(&k, &ev, "operationType") && BSON_ITER_HOLDS_UTF8(&k) ? bson_iter_utf8(&k, NULL) : "";
        const char *db, *coll;
        event_ns(&ev, &db, &coll);
        if (f == SIM_FLAVOR_COSMOS && strcmp(type, "insert") != 0 && strcmp(type, "update") != 0 &&
            strcmp(type, "replace") != 0)
            continue; /* no deletes, no DDL, no invalidate */
        if (f == SIM_FLAVOR_DOCUMENTDB && *coll && !cs_enabled_for(srv, db, coll))
            continue; /* a collection not enabled sends nothing */
        char key[16];
        snprintf(key, sizeof key, "%u", n++);
        bson_t e;
        BSON_APPEND_DOCUMENT_BEGIN(out, key, &e);
        bson_iter_init(&k, &ev);
        while (bson_iter_next(&k)) {
            const char *name = bson_iter_key(&k);
            if (f == SIM_FLAVOR_COSMOS &&
                (strcmp(name, "operationType") == 0 || strcmp(name, "updateDescription") == 0))
                continue;
            bson_iter_t d;
            if (strcmp(name, "_id") == 0 && BSON_ITER_HOLDS_DOCUMENT(&k) && bson_iter_recurse(&k, &d) &&
                bson_iter_find(&d, "_data") && BSON_ITER_HOLDS_UTF8(&d)) {
                char *b64 = hex_to_b64(bson_iter_utf8(&d, NULL));
                bson_t tok;
                BSON_APPEND_DOCUMENT_BEGIN(&e, "_id", &tok);
                BSON_APPEND_UTF8(&tok, "_data", b64 ? b64 : "");
                bson_append_document_end(&e, &tok);
                free(b64);
                continue;
            }
            bson_append_iter(&e, name, -1, &k);
        }
        bson_append_document_end(out, &e);
    }
}

bool flavor_cs_pbrt(const sim_server *srv)
{
    return srv->opts.flavor != SIM_FLAVOR_DOCUMENTDB;
}

void flavor_cs_token(const sim_server *srv, const bson_t *token, bson_t *out)
{
    bson_iter_t d;
    bson_init(out);
    if (srv->opts.flavor == SIM_FLAVOR_MONGODB || srv->opts.flavor == SIM_FLAVOR_ATLAS_SHARED ||
        !bson_iter_init_find(&d, token, "_data") || !BSON_ITER_HOLDS_UTF8(&d)) {
        bson_copy_to_excluding_noinit(token, out, "", NULL);
        return;
    }
    char *b64 = hex_to_b64(bson_iter_utf8(&d, NULL));
    BSON_APPEND_UTF8(out, "_data", b64 ? b64 : "");
    free(b64);
}

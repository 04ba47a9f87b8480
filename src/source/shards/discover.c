/*
 * discover.c — a sharded cluster's shards from its routers (see source/shards/discover.h).
 *
 * NOTES
 * - A shard's URI is written from the router's URI as libmongoc parsed it (mongoc_uri getters: credentials, auth
 *   database and mechanism, options by their type, compressors, TLS), its parts percent-encoded, with the shard's
 *   hosts (checked first, so they cannot reach another part of the URI) and replicaSet; then parsed back to be sure.
 *   libmongoc's setters do not change a URI's text (mongoc_uri_get_string is the text it was made from) and it has
 *   no writer, hence the text here.
 * - config.shards is read with a find on the config database through the router, sorted by _id.
 */
#include "source/shards/discover.h"

#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "source/mongo_client.h"
#include "util/strbuf.h"

struct shard_discovery {
    char *uri;
    mongoc_client_t *client;
};

const char *discover_status_name(discover_status s)
{
    switch (s) {
    case DISCOVER_OK:
        return "ok";
    case DISCOVER_UNREACHABLE:
        return "unreachable";
    case DISCOVER_REFUSED:
        return "refused";
    case DISCOVER_BAD:
        return "malformed";
    case DISCOVER_FAILED:
        return "failed";
    case DISCOVER_NOMEM:
        return "out of memory";
    }
    return "?";
}

void shard_info_free(shard_info *s)
{
    if (!s)
        return;
    free(s->id);
    free(s->rs);
    free(s->hosts);
    bson_free(s->uri);
    memset(s, 0, sizeof *s);
}

void shard_list_free(shard_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        shard_info_free(&l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

const shard_info *shard_list_find(const shard_list *l, const char *id)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i].id, id) == 0)
            return &l->v[i];
    return NULL;
}

/* ---- a shard's URI ---- */

/* One member "host:port" or "[v6]:port": a host of letters, digits, '.', '-', '_', ':' (IPv6 in brackets); no '@',
 * '/', '?', '#', ',' or space, which a URI would read as another part. */
static bool host_ok(const char *h, size_t len)
{
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = h[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
                  c == '_' || c == ':' || c == '[' || c == ']' || c == '%';
        if (!ok)
            return false;
    }
    return true;
}

/* The URI options that name the routers' deployment, not a shard's (lower case, as mongoc_uri_get_options keys), and
 * those written apart (compressors, tls). */
static bool skipped_option(const char *key)
{
    static const char *const skip[] = {"replicaset",     "directconnection", "loadbalanced",
                                       "srvservicename", "srvmaxhosts",      "compressors"};
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
        if (strcasecmp(key, skip[i]) == 0)
            return true;
    return false;
}

/* Percent-encodes s (RFC 3986: all but the unreserved characters), as a connection string's parts are read back. */
static void put_escaped(strbuf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
            c == '_' || c == '~') {
            strbuf_putc(b, (char)c);
        } else {
            strbuf_putc(b, '%');
            strbuf_putc(b, hex[c >> 4]);
            strbuf_putc(b, hex[c & 15]);
        }
    }
}

static void put_option(strbuf *b, const char *key, const bson_iter_t *it)
{
    if (BSON_ITER_HOLDS_BOOL(it))
        strbuf_printf(b, "&%s=%s", key, bson_iter_bool(it) ? "true" : "false");
    else if (BSON_ITER_HOLDS_INT32(it) || BSON_ITER_HOLDS_INT64(it))
        strbuf_printf(b, "&%s=%lld", key, (long long)bson_iter_as_int64(it));
    else if (BSON_ITER_HOLDS_UTF8(it)) {
        strbuf_printf(b, "&%s=", key);
        put_escaped(b, bson_iter_utf8(it, NULL));
    }
    /* nothing else is an option a connection string carries */
}

/* The parts of the router's URI a shard's carries: credentials, the auth database, options (see discover.h). */
static void put_router_parts(strbuf *b, const mongoc_uri_t *from, const char *rs)
{
    bson_iter_t it;
    const char *db = mongoc_uri_get_database(from);
    strbuf_putc(b, '/');
    if (db)
        put_escaped(b, db);
    strbuf_puts(b, "?replicaSet=");
    put_escaped(b, rs);
    const bson_t *cred = mongoc_uri_get_credentials(from);
    if (mongoc_uri_get_auth_mechanism(from)) {
        strbuf_puts(b, "&authMechanism=");
        put_escaped(b, mongoc_uri_get_auth_mechanism(from));
    }
    if (cred && bson_has_field(cred, MONGOC_URI_AUTHSOURCE)) {
        strbuf_puts(b, "&authSource=");
        put_escaped(b, mongoc_uri_get_auth_source(from));
    }
    bson_t props;
    if (mongoc_uri_get_mechanism_properties(from, &props)) {
        /* KEY:value,KEY:value (a value holding ',' or ':' cannot be written in a connection string at all) */
        bool first = true;
        if (bson_iter_init(&it, &props))
            while (bson_iter_next(&it)) {
                strbuf_puts(b, first ? "&authMechanismProperties=" : ",");
                put_escaped(b, bson_iter_key(&it));
                strbuf_putc(b, ':');
                if (BSON_ITER_HOLDS_UTF8(&it))
                    put_escaped(b, bson_iter_utf8(&it, NULL));
                else if (BSON_ITER_HOLDS_BOOL(&it))
                    strbuf_puts(b, bson_iter_bool(&it) ? "true" : "false");
                first = false;
            }
        bson_destroy(&props);
    }
    const bson_t *opts = mongoc_uri_get_options(from);
    bool tls_said = false;
    if (opts && bson_iter_init(&it, opts))
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (skipped_option(k))
                continue;
            tls_said |= strcasecmp(k, MONGOC_URI_TLS) == 0 || strcasecmp(k, MONGOC_URI_SSL) == 0;
            put_option(b, k, &it);
        }
    /* mongodb+srv:// implies tls=true without always saying so in the options. */
    if (!tls_said && mongoc_uri_get_tls(from))
        strbuf_puts(b, "&tls=true");
    const bson_t *comp = mongoc_uri_get_compressors(from);
    bool first = true;
    if (comp && bson_iter_init(&it, comp))
        while (bson_iter_next(&it)) {
            strbuf_puts(b, first ? "&compressors=" : ",");
            put_escaped(b, bson_iter_key(&it));
            first = false;
        }
}

char *shard_uri(const char *router, const char *rs, const char *hosts, char *err, size_t errlen)
{
    bson_error_t e;
    if (!rs || !*rs || !host_ok(rs, strlen(rs))) {
        snprintf(err, errlen, "the replica set name \"%s\" is not one a connection string can carry", rs ? rs : "");
        return NULL;
    }
    for (const char *p = hosts;;) { /* every member checked before any text is put together */
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (!host_ok(p, len)) {
            snprintf(err, errlen, "the host list \"%s\" does not parse: \"%.*s\" is not host:port", hosts, (int)len, p);
            return NULL;
        }
        if (!comma)
            break;
        p = comma + 1;
    }
    mongoc_uri_t *from = mongoc_uri_new_with_error(router, &e);
    if (!from) {
        snprintf(err, errlen, "bad MongoDB URI: %.400s", e.message);
        return NULL;
    }
    strbuf b;
    strbuf_init(&b);
    strbuf_puts(&b, "mongodb://");
    if (mongoc_uri_get_username(from)) {
        put_escaped(&b, mongoc_uri_get_username(from));
        if (mongoc_uri_get_password(from)) {
            strbuf_putc(&b, ':');
            put_escaped(&b, mongoc_uri_get_password(from));
        }
        strbuf_putc(&b, '@');
    }
    strbuf_puts(&b, hosts);
    put_router_parts(&b, from, rs);
    mongoc_uri_destroy(from);
    char *text = strbuf_detach(&b, NULL);
    if (!text) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    /* What was written must read back: libmongoc has the last word on a connection string. */
    mongoc_uri_t *check = mongoc_uri_new_with_error(text, &e);
    if (!check) {
        snprintf(err, errlen, "the URI made for replica set %s does not parse: %.300s", rs, e.message);
        free(text);
        return NULL;
    }
    mongoc_uri_destroy(check);
    char *out = bson_strdup(text);
    free(text);
    return out;
}

/* ---- config.shards ---- */

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

discover_status shard_info_from_doc(const bson_t *doc, const char *router, shard_info *out, char *err, size_t errlen)
{
    bson_iter_t it;
    const char *id = NULL, *host = NULL;
    memset(out, 0, sizeof *out);
    if (!bson_iter_init(&it, doc)) {
        snprintf(err, errlen, "a config.shards document is not valid BSON");
        return DISCOVER_BAD;
    }
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "_id") == 0 && BSON_ITER_HOLDS_UTF8(&it))
            id = bson_iter_utf8(&it, NULL);
        else if (strcmp(k, "host") == 0 && BSON_ITER_HOLDS_UTF8(&it))
            host = bson_iter_utf8(&it, NULL);
        else if (strcmp(k, "state") == 0 && BSON_ITER_HOLDS_NUMBER(&it))
            out->state = bson_iter_as_int64(&it);
        else if (strcmp(k, "draining") == 0)
            out->draining = bson_iter_as_bool(&it);
        else if (strcmp(k, "topologyTime") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            bson_iter_timestamp(&it, &out->topology_secs, &out->topology_inc);
            out->has_topology_time = true;
        }
    }
    if (!id || !*id || !host) {
        snprintf(err, errlen, "a config.shards document without a string _id and host");
        return DISCOVER_BAD;
    }
    /* "rs/h1:p,h2:p"; a shard that is not a replica set (a bare host list, before 3.6) has no oplog of its own
     * to tail with a resume point a failover keeps: refused. */
    const char *slash = strchr(host, '/');
    if (!slash || slash == host || !slash[1]) {
        snprintf(err, errlen, "shard %s: host \"%s\" is not \"replicaSet/host:port,...\"", id, host);
        return DISCOVER_BAD;
    }
    out->id = strdup(id);
    out->rs = dup_n(host, (size_t)(slash - host));
    out->hosts = strdup(slash + 1);
    if (!out->id || !out->rs || !out->hosts) {
        shard_info_free(out);
        snprintf(err, errlen, "out of memory");
        return DISCOVER_NOMEM;
    }
    char why[400];
    out->uri = shard_uri(router, out->rs, out->hosts, why, sizeof why);
    if (!out->uri) {
        snprintf(err, errlen, "shard %s: %s", id, why);
        shard_info_free(out);
        return DISCOVER_BAD;
    }
    return DISCOVER_OK;
}

/* ---- the router ---- */

static discover_status classify(const bson_error_t *e)
{
    if (mongo_error_refused(e))
        return DISCOVER_REFUSED;
    if (mongo_error_network(e))
        return DISCOVER_UNREACHABLE;
    return DISCOVER_FAILED;
}

shard_discovery *shard_discovery_open(const char *uri, char *err, size_t errlen)
{
    shard_discovery *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    d->uri = strdup(uri ? uri : "");
    mongo_client_opts mo = {.appname = "oplog2pg-discovery"};
    d->client = d->uri ? mongo_client_open(d->uri, &mo, err, errlen) : NULL;
    if (!d->client) {
        if (!d->uri)
            snprintf(err, errlen, "out of memory");
        free(d->uri);
        free(d);
        return NULL;
    }
    return d;
}

void shard_discovery_close(shard_discovery *d)
{
    if (!d)
        return;
    mongoc_client_destroy(d->client);
    free(d->uri);
    free(d);
}

discover_status shard_discovery_hello(shard_discovery *d, bool *is_router, char *err, size_t errlen)
{
    bson_t reply;
    bson_error_t e;
    bson_iter_t it;
    *is_router = false;
    bson_t *cmd = BCON_NEW("hello", BCON_INT32(1));
    bool ok = mongoc_client_command_simple(d->client, "admin", cmd, NULL, &reply, &e);
    bson_destroy(cmd);
    if (!ok && (e.domain == MONGOC_ERROR_SERVER || e.domain == MONGOC_ERROR_QUERY) && e.code == 59) {
        /* CommandNotFound: a server before hello (4.4.2); isMaster answers the same. */
        bson_destroy(&reply);
        cmd = BCON_NEW("isMaster", BCON_INT32(1));
        ok = mongoc_client_command_simple(d->client, "admin", cmd, NULL, &reply, &e);
        bson_destroy(cmd);
    }
    if (!ok) {
        snprintf(err, errlen, "hello on the MongoDB URI's servers: %s (code %u)", e.message, e.code);
        bson_destroy(&reply);
        return classify(&e);
    }
    if (bson_iter_init_find(&it, &reply, "msg") && BSON_ITER_HOLDS_UTF8(&it) &&
        strcmp(bson_iter_utf8(&it, NULL), "isdbgrid") == 0)
        *is_router = true;
    bson_destroy(&reply);
    return DISCOVER_OK;
}

discover_status shard_discovery_list(shard_discovery *d, shard_list *out, char *err, size_t errlen)
{
    shard_list_free(out);
    mongoc_collection_t *coll = mongoc_client_get_collection(d->client, "config", "shards");
    bson_t filter = BSON_INITIALIZER;
    bson_t *opts = BCON_NEW("sort", "{", "_id", BCON_INT32(1), "}");
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, &filter, opts, NULL);
    bson_destroy(opts);
    bson_destroy(&filter);
    const bson_t *doc;
    discover_status st = DISCOVER_OK;
    size_t cap = 0;
    while (st == DISCOVER_OK && mongoc_cursor_next(cur, &doc)) {
        if (out->n == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            shard_info *v = realloc(out->v, ncap * sizeof *v);
            if (!v) {
                snprintf(err, errlen, "out of memory");
                st = DISCOVER_NOMEM;
                break;
            }
            out->v = v;
            cap = ncap;
        }
        st = shard_info_from_doc(doc, d->uri, &out->v[out->n], err, errlen);
        if (st == DISCOVER_OK)
            out->n++;
    }
    bson_error_t e;
    if (st == DISCOVER_OK && mongoc_cursor_error(cur, &e)) {
        snprintf(err, errlen, "reading config.shards through the router: %s (code %u)%s", e.message, e.code,
                 mongo_error_refused(&e) ? ": the user needs read on the config database (role read on config, "
                                           "or clusterMonitor)"
                                         : "");
        st = classify(&e);
    }
    mongoc_cursor_destroy(cur);
    mongoc_collection_destroy(coll);
    if (st != DISCOVER_OK)
        shard_list_free(out);
    return st;
}

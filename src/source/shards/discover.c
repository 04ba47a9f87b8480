/*
 * discover.c — a sharded cluster's shards from its routers (see source/shards/discover.h).
 *
 * NOTES
 * - A shard's URI starts from its hosts alone ("mongodb://h1:p,h2:p/", the one piece of text put together here: the
 *   host string is checked first so it cannot reach another part of the URI), then everything else goes through the
 *   mongoc_uri setters: credentials, auth database, options (each by its type), TLS. libmongoc has no way to take the
 *   hosts out of a copy of the router's URI, hence this order.
 * - config.shards is read with a find on the config database through the router, sorted by _id.
 */
#include "source/shards/discover.h"

#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/mongo_client.h"

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

/* The URI options that name the routers' deployment, not a shard's (lower case, as mongoc_uri_get_options keys). */
static bool router_only_option(const char *key)
{
    static const char *const skip[] = {"replicaset", "directconnection", "loadbalanced", "srvservicename",
                                       "srvmaxhosts"};
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
        if (strcasecmp(key, skip[i]) == 0)
            return true;
    return false;
}

static bool copy_option(mongoc_uri_t *to, const bson_iter_t *it)
{
    const char *k = bson_iter_key(it);
    if (router_only_option(k))
        return true;
    if (strcasecmp(k, MONGOC_URI_COMPRESSORS) == 0) /* kept apart by libmongoc: copied below */
        return true;
    if (BSON_ITER_HOLDS_BOOL(it))
        return mongoc_uri_set_option_as_bool(to, k, bson_iter_bool(it));
    if (BSON_ITER_HOLDS_INT32(it))
        return mongoc_uri_set_option_as_int32(to, k, bson_iter_int32(it));
    if (BSON_ITER_HOLDS_INT64(it))
        return mongoc_uri_set_option_as_int64(to, k, bson_iter_int64(it));
    if (BSON_ITER_HOLDS_UTF8(it))
        return mongoc_uri_set_option_as_utf8(to, k, bson_iter_utf8(it, NULL));
    return true; /* nothing else is an option a connection string carries */
}

static bool copy_compressors(mongoc_uri_t *to, const mongoc_uri_t *from)
{
    const bson_t *c = mongoc_uri_get_compressors(from);
    bson_iter_t it;
    char list[256] = "";
    size_t len = 0;
    if (!c || !bson_iter_init(&it, c))
        return true;
    while (bson_iter_next(&it)) {
        int n = snprintf(list + len, sizeof list - len, "%s%s", len ? "," : "", bson_iter_key(&it));
        if (n < 0 || (size_t)n >= sizeof list - len)
            return false;
        len += (size_t)n;
    }
    return len == 0 || mongoc_uri_set_compressors(to, list);
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
    char *text = bson_strdup_printf("mongodb://%s/", hosts);
    mongoc_uri_t *to = mongoc_uri_new_with_error(text, &e);
    bson_free(text);
    char *out = NULL;
    if (!to) {
        snprintf(err, errlen, "the host list \"%s\" does not parse: %.300s", hosts, e.message);
        goto done;
    }
    bool ok = mongoc_uri_set_option_as_utf8(to, MONGOC_URI_REPLICASET, rs);
    bson_iter_t it;
    const bson_t *opts = mongoc_uri_get_options(from);
    if (ok && opts && bson_iter_init(&it, opts))
        while (ok && bson_iter_next(&it))
            ok = copy_option(to, &it);
    ok = ok && copy_compressors(to, from);
    /* Credentials: the user and password, then authSource, authMechanism and its properties. */
    if (ok && mongoc_uri_get_username(from))
        ok = mongoc_uri_set_username(to, mongoc_uri_get_username(from));
    if (ok && mongoc_uri_get_password(from))
        ok = mongoc_uri_set_password(to, mongoc_uri_get_password(from));
    const bson_t *cred = mongoc_uri_get_credentials(from);
    if (ok && cred && bson_has_field(cred, MONGOC_URI_AUTHSOURCE))
        ok = mongoc_uri_set_auth_source(to, mongoc_uri_get_auth_source(from));
    if (ok && mongoc_uri_get_auth_mechanism(from))
        ok = mongoc_uri_set_auth_mechanism(to, mongoc_uri_get_auth_mechanism(from));
    bson_t props;
    if (ok && mongoc_uri_get_mechanism_properties(from, &props)) {
        ok = mongoc_uri_set_mechanism_properties(to, &props);
        bson_destroy(&props);
    }
    if (ok && mongoc_uri_get_database(from))
        ok = mongoc_uri_set_database(to, mongoc_uri_get_database(from));
    /* mongodb+srv:// implies tls=true without saying so in the options. */
    if (ok && mongoc_uri_get_tls(from))
        ok = mongoc_uri_set_option_as_bool(to, MONGOC_URI_TLS, true);
    if (!ok) {
        snprintf(err, errlen, "cannot carry the router URI's options over to shard %s's URI", rs);
        goto done;
    }
    out = bson_strdup(mongoc_uri_get_string(to));
done:
    mongoc_uri_destroy(to);
    mongoc_uri_destroy(from);
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

/*
 * simcluster.c — see simcluster.h.
 */
#include "simcluster.h"

#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool simcluster_refresh(simcluster *c, char *err, size_t errlen)
{
    char uri[128];
    simcluster_router_uri(c, uri, sizeof uri);
    mongoc_init();
    mongoc_client_t *client = mongoc_client_new(uri);
    if (!client) {
        snprintf(err, errlen, "bad URI %s", uri);
        return false;
    }
    bson_t *cmd = BCON_NEW("listShards", BCON_INT32(1));
    bson_t reply;
    bson_error_t e;
    bool ok = mongoc_client_command_simple(client, "admin", cmd, NULL, &reply, &e);
    bson_destroy(cmd);
    mongoc_client_destroy(client);
    if (!ok) {
        snprintf(err, errlen, "listShards: %s", e.message);
        bson_destroy(&reply);
        return false;
    }
    bson_iter_t it, arr;
    c->n = 0;
    if (bson_iter_init_find(&it, &reply, "shards") && bson_iter_recurse(&it, &arr)) {
        while (bson_iter_next(&arr) && c->n < SIMCLUSTER_MAX) {
            bson_iter_t d;
            const char *id = NULL, *host = NULL;
            if (!bson_iter_recurse(&arr, &d))
                continue;
            while (bson_iter_next(&d)) {
                if (!strcmp(bson_iter_key(&d), "_id") && BSON_ITER_HOLDS_UTF8(&d))
                    id = bson_iter_utf8(&d, NULL);
                else if (!strcmp(bson_iter_key(&d), "host") && BSON_ITER_HOLDS_UTF8(&d))
                    host = bson_iter_utf8(&d, NULL);
            }
            const char *colon = host ? strrchr(host, ':') : NULL;
            if (!id || !colon)
                continue;
            snprintf(c->id[c->n], sizeof c->id[c->n], "%s", id);
            c->port[c->n] = atoi(colon + 1);
            c->n++;
        }
    }
    bson_destroy(&reply);
    if (c->n == 0) {
        snprintf(err, errlen, "listShards named no shard");
        return false;
    }
    return true;
}

bool simcluster_start(size_t nshards, const char *const *extra_args, const char *log_path, simcluster *out, char *err,
                      size_t errlen)
{
    memset(out, 0, sizeof *out);
    char n[16];
    snprintf(n, sizeof n, "%zu", nshards);
    const char *args[32] = {"--shards", n};
    size_t k = 2;
    for (size_t i = 0; extra_args && extra_args[i] && k < 31; i++)
        args[k++] = extra_args[i];
    args[k] = NULL;
    if (!proc_start_mongosim(args, log_path, &out->proc, err, errlen))
        return false;
    out->router_port = out->proc.port;
    if (!simcluster_refresh(out, err, errlen)) {
        proc_stop(&out->proc, 5);
        return false;
    }
    return true;
}

void simcluster_router_uri(const simcluster *c, char *out, size_t n)
{
    snprintf(out, n, "mongodb://127.0.0.1:%d/", c->router_port);
}

void simcluster_shard_uri(const simcluster *c, size_t k, char *out, size_t n)
{
    snprintf(out, n, "mongodb://127.0.0.1:%d/?replicaSet=%s", k < c->n ? c->port[k] : 0, k < c->n ? c->id[k] : "");
}

void simcluster_stop(simcluster *c)
{
    proc_stop(&c->proc, 5);
}

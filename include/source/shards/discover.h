/*
 * discover.h — a sharded cluster seen from its routers: whether the configured URI names a router (mongos) or a
 * replica set, the shards in config.shards, and one connection string per shard for its own oplog reader.
 *
 * A router answers `hello` with msg "isdbgrid" (mongo src/mongo/s/commands/cluster_hello_cmd.cpp). The shards are
 * the documents of config.shards (mongo src/mongo/s/catalog/type_shard.h): {_id: "shard0", host: "rs/h1:p,h2:p",
 * state: 1, draining?: true, topologyTime?: Timestamp}. Each shard's URI is made with libmongoc's mongoc_uri API:
 * the shard's hosts and replicaSet=<its set>, with the router URI's credentials (user, password, authSource,
 * authMechanism and its properties), its auth database, its TLS and other options (timeouts, appName, compressors);
 * not its replicaSet, directConnection, loadBalanced or SRV options, which name the routers, nor its read preference
 * and read or write concern (each reader and note writer sets its own). A mongodb+srv:// router URI implies TLS:
 * the shards' URIs say tls=true then.
 *
 * The privileges: read on config.shards through the router (the `read` role on the config database, or
 * clusterMonitor), and on every shard read on local (the oplog) with the same user, which must then exist on the
 * shards too (a user made through the router lives on the config servers only: shard-local users, or x509/LDAP).
 *
 * A shard_discovery holds one client of its own: call it from one thread at a time (the daemon's poll).
 */
#ifndef OPLOG2PG_SOURCE_SHARDS_DISCOVER_H
#define OPLOG2PG_SOURCE_SHARDS_DISCOVER_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum discover_status {
    DISCOVER_OK = 0,
    DISCOVER_UNREACHABLE, /* the network or server selection failed: try again later */
    DISCOVER_REFUSED,     /* the login failed or the user may not read config.shards (Unauthorized): a person acts */
    DISCOVER_BAD,         /* a shard document or host string that does not parse, or a URI libmongoc refuses */
    DISCOVER_FAILED,      /* another server error (err says which): try again later */
    DISCOVER_NOMEM,
} discover_status;

const char *discover_status_name(discover_status s);

typedef struct shard_info {
    char *id;      /* config.shards _id: the shard's name ("shard0") */
    char *rs;      /* its replica set's name (before the '/' of host) */
    char *hosts;   /* its members as config.shards lists them ("h1:p,h2:p") */
    char *uri;     /* the connection string of its replica set (see above) */
    int64_t state; /* config.shards state (1: shard aware), 0 when absent */
    bool draining; /* removeShard has begun: its chunks are moving away */
    bool has_topology_time;
    uint32_t topology_secs, topology_inc; /* topologyTime: when the shard was added (5.0+) */
} shard_info;

typedef struct shard_list {
    shard_info *v; /* in _id order */
    size_t n;
} shard_list;

void shard_list_free(shard_list *l);
/* The shard of that id, or NULL. */
const shard_info *shard_list_find(const shard_list *l, const char *id);

/* One config.shards document into *out (its strings allocated; shard_info_free frees them), with its URI made from
 * the router URI `router`. DISCOVER_BAD with the reason in err when _id or host is missing or host does not parse
 * ("rs/h1:p,h2:p": a set name, then one or more host:port, nothing a URI could read as another part). */
discover_status shard_info_from_doc(const bson_t *doc, const char *router, shard_info *out, char *err, size_t errlen);
void shard_info_free(shard_info *s);

/* The connection string of the replica set `rs` at `hosts` ("h1:p,h2:p") with the router URI's credentials and
 * options (see above). NULL with the reason in err (DISCOVER_BAD's cases) or on OOM; the caller frees it (bson_free).
 */
char *shard_uri(const char *router, const char *rs, const char *hosts, char *err, size_t errlen);

typedef struct shard_discovery shard_discovery;

/* A client on the router URI (no round trip yet). NULL with the reason in err when the URI does not parse. */
shard_discovery *shard_discovery_open(const char *uri, char *err, size_t errlen);
void shard_discovery_close(shard_discovery *d);

/* `hello` (or isMaster on a server without it): *is_router when the deployment is a sharded cluster's router. */
discover_status shard_discovery_hello(shard_discovery *d, bool *is_router, char *err, size_t errlen);

/* Reads config.shards (again: the daemon polls it for a shard added or removed while running) into *out (freed and
 * replaced; left empty on an error). A replica set has no config.shards: zero shards. */
discover_status shard_discovery_list(shard_discovery *d, shard_list *out, char *err, size_t errlen);

#endif

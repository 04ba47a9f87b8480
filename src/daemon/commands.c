/*
 * commands.c — the read-only commands: `check` (is the configuration good, can both sides be reached) and `status`
 * (where a service stands: checkpoint, lag, oplog window, copy progress, dead letters), and the parsing of a
 * --tail-from position. Neither command takes a lock or writes anything, so both work next to a running daemon.
 *
 * Exit codes follow daemon/exitcodes.h: 3 when PostgreSQL or MongoDB refuses the login or the configuration cannot
 * work (a person must fix it), 1 when a side cannot be reached right now.
 */
#include "daemon/daemon.h"

#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "copy/copy.h"
#include "daemon/exitcodes.h"
#include "daemon/source_choice.h"
#include "sink/pg.h"
#include "sink/pgerror.h"
#include "source/mongo_client.h"
#include "source/oplog_edge.h"
#include "source/shards/discover.h"
#include "source/stream/caps.h"
#include "util/log.h"

bool daemon_parse_position(const char *text, op_pos *out)
{
    char *end;
    out->term = -1;
    unsigned long long secs = strtoull(text, &end, 10);
    if (end != text && *end == ':') {
        unsigned long long inc = strtoull(end + 1, &end, 10);
        if (*end == '\0' && secs <= UINT32_MAX && inc <= UINT32_MAX) {
            out->secs = (uint32_t)secs;
            out->inc = (uint32_t)inc;
            return true;
        }
        return false;
    }
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    end = strptime(text, "%Y-%m-%dT%H:%M:%S", &tm);
    if (end == NULL || (*end != '\0' && strcmp(end, "Z") != 0))
        return false;
    time_t t = timegm(&tm);
    if (t < 0 || (unsigned long long)t > UINT32_MAX)
        return false;
    out->secs = (uint32_t)t;
    out->inc = 0;
    return true;
}

static const char *utc_text(uint32_t secs, char *buf, size_t len)
{
    time_t t = (time_t)secs;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%d %H:%M:%S UTC", &tm);
    return buf;
}

/* The worse of two exit codes (a person must act > cannot reach). */
static int worse(int a, int b)
{
    return a == EXIT_CONFIG || b == EXIT_CONFIG ? EXIT_CONFIG : a != EXIT_OK ? a : b;
}

/* `check` of one oplog: its oldest and newest entries, each line prefixed (e.g. "mongodb: shard 'shard0': "). */
static int check_oplog(mongoc_client_t *client, const char *prefix)
{
    const char *names[2] = {"oldest", "newest"};
    for (int dir = 0; dir < 2; dir++) {
        op_pos p;
        bool found;
        char oerr[512], when[64], at[OP_POS_STRLEN];
        if (!oplog_edge(client, dir == 0 ? 1 : -1, &p, &found, oerr, sizeof oerr)) {
            printf("%s%s\n", prefix, oerr);
            return EXIT_FAILURE_GENERIC;
        }
        if (!found) {
            printf("%sthe oplog is empty (is this a replica set member?)\n", prefix);
            return EXIT_OK;
        }
        printf("%s%s oplog entry %s (%s)\n", prefix, names[dir], op_pos_format(&p, at, sizeof at),
               utc_text(p.secs, when, sizeof when));
    }
    return EXIT_OK;
}

/* `check` of a sharded cluster, when the URI names its routers (no replicaSet, and hello says isdbgrid): the shards
 * from config.shards, each one's oplog read on its own connection (the privileges of docs/sharding.md). -1 when the
 * URI names no router (the caller checks the one oplog), else the exit code. */
static int check_cluster(const config *cfg)
{
    mongoc_uri_t *uri = mongoc_uri_new(cfg->mongodb_uri_effective);
    bool named_set = uri != NULL && mongoc_uri_get_replica_set(uri) != NULL;
    mongoc_uri_destroy(uri);
    if (named_set)
        return -1;
    char err[512];
    bool router = false;
    shard_discovery *sd = shard_discovery_open(cfg->mongodb_uri_effective, err, sizeof err);
    if (sd == NULL || shard_discovery_hello(sd, &router, err, sizeof err) != DISCOVER_OK || !router) {
        shard_discovery_close(sd);
        return -1;
    }
    shard_list sl = {0};
    discover_status st = shard_discovery_list(sd, &sl, err, sizeof err);
    shard_discovery_close(sd);
    if (st != DISCOVER_OK) {
        printf("mongodb: a sharded cluster's router, but config.shards: %s\n", err);
        return st == DISCOVER_REFUSED || st == DISCOVER_BAD ? EXIT_CONFIG : EXIT_FAILURE_GENERIC;
    }
    printf("mongodb: a sharded cluster's router; %zu shard%s in config.shards\n", sl.n, sl.n == 1 ? "" : "s");
    int code = EXIT_OK;
    for (size_t i = 0; i < sl.n; i++) {
        char prefix[160];
        snprintf(prefix, sizeof prefix, "mongodb: shard '%s': ", sl.v[i].id);
        mongo_client_opts mo = {.appname = "oplog2pg-check"};
        mongoc_client_t *c = mongo_client_open(sl.v[i].uri, &mo, err, sizeof err);
        if (c == NULL) {
            printf("%s%s\n", prefix, err);
            code = worse(code, EXIT_CONFIG);
            continue;
        }
        code = worse(code, check_oplog(c, prefix));
        mongoc_client_destroy(c);
    }
    /* Shards removed from the cluster that the service still drains (their rows): read at their stored hosts. */
    sink_probe_result pr;
    pgconn_error pe;
    if (sink_probe(cfg->postgres_conninfo, cfg->service, &pr, &pe)) {
        for (size_t k = 0; k < pr.nshards; k++) {
            const sink_probe_shard *row = &pr.shards[k];
            if (shard_list_find(&sl, row->shard) != NULL)
                continue;
            char prefix[160];
            snprintf(prefix, sizeof prefix,
                     "mongodb: shard '%s' (removed from the cluster, still drained): ", row->shard);
            const char *slash = row->hosts != NULL ? strchr(row->hosts, '/') : NULL;
            char *rs = slash != NULL ? strndup(row->hosts, (size_t)(slash - row->hosts)) : NULL;
            char *suri = rs != NULL ? shard_uri(cfg->mongodb_uri_effective, rs, slash + 1, err, sizeof err) : NULL;
            free(rs);
            mongo_client_opts mo = {.appname = "oplog2pg-check"};
            mongoc_client_t *c = suri != NULL ? mongo_client_open(suri, &mo, err, sizeof err) : NULL;
            bson_free(suri);
            if (c == NULL) {
                printf("%s%s\n", prefix, slash == NULL ? "its row stores no hosts: it cannot be read" : err);
                code = worse(code, EXIT_CONFIG);
                continue;
            }
            code = worse(code, check_oplog(c, prefix));
            mongoc_client_destroy(c);
        }
        sink_probe_free(&pr);
    }
    shard_list_free(&sl);
    return code;
}

/* One capability of the probe, as `check` prints it. */
static void print_cap(const char *what, const stream_cap *c)
{
    if (c->yes)
        printf("mongodb:   %s: yes%s%s\n", what, c->why[0] ? ", " : "", c->why);
    else
        printf("mongodb:   %s: %s (%s)\n", what, c->probed ? "no" : "not tried", c->why);
}

/* `check` of what the server offers each source (source/stream/caps.h), and the source [mongodb] source resolves to:
 * *kind set, or an exit code (EXIT_CONFIG when none can work). */
static int check_source(const config *cfg, mongoc_client_t *client, source_kind *kind)
{
    stream_caps caps;
    char err[512], note[1024], at[OP_POS_STRLEN], when[64];
    stream_caps_status st = stream_caps_probe(client, &caps, err, sizeof err);
    if (st != STREAM_CAPS_OK) {
        printf("mongodb: asking what the server offers: %s\n", err);
        stream_caps_free(&caps);
        return st == STREAM_CAPS_REFUSED ? EXIT_CONFIG : EXIT_FAILURE_GENERIC;
    }
    printf("mongodb: server %s%s\n", caps.version[0] ? caps.version : "(version not given)",
           caps.router ? ", a sharded cluster's router" : "");
    if (caps.oplog.yes)
        printf("mongodb: the oplog (local.oplog.rs) can be read\n");
    else
        printf("mongodb: the oplog (local.oplog.rs) cannot be read: %s\n", caps.oplog.why);
    if (caps.streams.yes && caps.have_time)
        printf("mongodb: a cluster-wide change stream opens (its clusterTime now %s, %s)\n",
               op_pos_format(&caps.time, at, sizeof at), utc_text(caps.time.secs, when, sizeof when));
    else if (caps.streams.yes)
        printf("mongodb: a cluster-wide change stream opens\n");
    else
        printf("mongodb: no cluster-wide change stream opens: %s\n", caps.streams.why);
    print_cap("post-batch resume tokens", &caps.pbrt);
    print_cap("startAfter", &caps.start_after);
    print_cap("showExpandedEvents (DDL events)", &caps.expanded_events);
    print_cap("showRawUpdateDescription (the oplog's own updates)", &caps.raw_updates);
    print_cap("$changeStreamSplitLargeEvent (events over 16 MB)", &caps.split_events);
    print_cap("pre- and post-images", &caps.images);
    if (caps.documentdb)
        printf("mongodb: Amazon DocumentDB: change streams are enabled with modifyChangeStreams; without post-batch "
               "resume tokens a quiet stream's position moves only with events (docs/sources.md)\n");
    if (caps.cosmos)
        printf("mongodb: Azure Cosmos DB for MongoDB (RU): its change streams send no delete events%s\n",
               cfg->delete_reconcile_ms > 0 ? "; delete_reconcile deletes the rows of documents gone from MongoDB"
                                            : "; read only with [mongodb] delete_reconcile set");
    if (caps.cosmos && cfg->delete_reconcile_ms > 0)
        caps.streams.yes = true;
    int code = EXIT_OK;
    if (source_choose(cfg->source, cfg->change_stream_updates, &caps, kind, note, sizeof note)) {
        printf("mongodb: reads %s (%s)\n", *kind == SOURCE_CHANGE_STREAM ? "a change stream" : "the oplog", note);
    } else {
        printf("mongodb: %s\n", note);
        code = EXIT_CONFIG;
    }
    stream_caps_free(&caps);
    return code;
}

int daemon_check(config *cfg)
{
    int code = EXIT_OK;
    bson_error_t err;
    printf("configuration: ok (service '%s')\n", cfg->service);

    char cerr[512];
    mongo_client_opts mo = {.appname = "oplog2pg-check"};
    mongoc_client_t *client = mongo_client_open(cfg->mongodb_uri_effective, &mo, cerr, sizeof cerr);
    if (client == NULL) {
        printf("mongodb: %s\n", cerr);
        code = EXIT_CONFIG;
    } else {
        bson_t *ping = BCON_NEW("ping", BCON_INT32(1));
        if (!mongoc_client_command_simple(client, "admin", ping, NULL, NULL, &err)) {
            bool refused = mongo_error_refused(&err);
            printf("mongodb: %s: %s\n",
                   mongo_error_tls(&err) ? "the server's TLS certificate was not accepted (check tlsCAFile and the "
                                           "host names in the URI)"
                   : refused             ? "the login was refused"
                                         : "cannot reach it",
                   err.message);
            code = worse(code, refused ? EXIT_CONFIG : EXIT_FAILURE_GENERIC);
        } else {
            source_kind kind = SOURCE_OPLOG;
            int sc = check_source(cfg, client, &kind);
            code = worse(code, sc);
            if (sc == EXIT_OK && kind == SOURCE_OPLOG) {
                int cc = check_cluster(cfg);
                code = worse(code, cc >= 0 ? cc : check_oplog(client, "mongodb: "));
            }
        }
        bson_destroy(ping);
        mongoc_client_destroy(client);
    }

    /* Read-only on PostgreSQL: safe next to a running daemon. */
    sink_probe_result pr;
    pgconn_error perr;
    char at[OP_POS_STRLEN];
    if (!sink_probe(cfg->postgres_conninfo, cfg->service, &pr, &perr)) {
        const char *advice = perr.status == APPLY_CONFIG ? pgerror_advice(perr.sqlstate) : "";
        printf("postgres: %s%s%s\n", perr.message, advice[0] ? "; " : "", advice);
        code = worse(code, perr.status == APPLY_CONFIG ? EXIT_CONFIG : EXIT_FAILURE_GENERIC);
    } else {
        printf("postgres: ok (server %s)%s\n", pr.server_version,
               pr.have_table ? "" : "; the oplog2pg schema will be created at the first run");
        if (pr.have_checkpoint && pr.token != NULL)
            printf("postgres: service '%s' resumes after a change stream's resume token at clusterTime %s, committed "
                   "%s\n",
                   cfg->service, op_pos_format(&pr.pos, at, sizeof at), pr.applied_at);
        else if (pr.have_checkpoint)
            printf("postgres: service '%s' resumes after oplog entry %s (term %lld), committed %s\n", cfg->service,
                   op_pos_format(&pr.pos, at, sizeof at), (long long)pr.pos.term, pr.applied_at);
        else
            printf("postgres: service '%s' has no checkpoint yet (its first run copies the included collections)\n",
                   cfg->service);
        printf("postgres: service '%s' is %s\n", cfg->service,
               pr.running ? "being applied by a running oplog2pg right now" : "not running");
        for (size_t i = 0; i < pr.nshards; i++)
            printf("postgres: service '%s', shard '%s' resumes after oplog entry %s (term %lld)\n", cfg->service,
                   pr.shards[i].shard, op_pos_format(&pr.shards[i].pos, at, sizeof at),
                   (long long)pr.shards[i].pos.term);
    }
    sink_probe_free(&pr);
    printf("%s\n", code == EXIT_OK ? "check passed" : "check failed");
    return code;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* status */

/* A JSON string literal of s (status output only holds names and timestamps, but quote properly anyway). */
static void json_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

/* A sharded cluster's shards, as `status` shows them: each one's checkpoint row (from sink_probe) and oplog. */
typedef struct {
    const char *id;
    const sink_probe_shard *row; /* NULL: none yet */
    bool removed;                /* config.shards no longer lists it: its row says the daemon still drains it */
    bool ok, have_oplog;
    op_pos oldest, newest;
    char err[256];
    double lag, window_h, margin_h; /* -1 when unknown */
} status_shard;

typedef struct {
    bool sharded;
    shard_list sl;
    status_shard *v; /* n listed in config.shards, then nremoved removed ones */
    size_t nremoved;
    size_t n;
    char err[512]; /* config.shards could not be read */
} status_cluster;

/* Whether the URI names routers (a URI with replicaSet= is a replica set, without asking), and then each shard's
 * oplog window beside its checkpoint row. */
static void status_read_cluster(const config *cfg, const sink_probe_result *pr, bool pg_ok, status_cluster *sc)
{
    memset(sc, 0, sizeof *sc);
    mongoc_uri_t *uri = mongoc_uri_new(cfg->mongodb_uri_effective);
    bool named_set = uri != NULL && mongoc_uri_get_replica_set(uri) != NULL;
    mongoc_uri_destroy(uri);
    if (named_set && !(pg_ok && pr->nshards > 0))
        return;
    shard_discovery *sd = shard_discovery_open(cfg->mongodb_uri_effective, sc->err, sizeof sc->err);
    bool router = false;
    if (sd != NULL && shard_discovery_hello(sd, &router, sc->err, sizeof sc->err) == DISCOVER_OK && router)
        sc->sharded = true;
    if (sc->sharded && shard_discovery_list(sd, &sc->sl, sc->err, sizeof sc->err) == DISCOVER_OK)
        sc->err[0] = '\0';
    else if (!sc->sharded && pg_ok && pr->nshards > 0)
        sc->sharded = true; /* the rows say so; the routers could not be asked (sc->err) */
    else if (!sc->sharded)
        sc->err[0] = '\0';
    shard_discovery_close(sd);
    if (!sc->sharded || sc->sl.n == 0)
        return;
    /* Rows of shards config.shards no longer lists: removed from the cluster, drained by the daemon, which deletes
     * the row once it has applied the shard to its end. Shown after the listed ones. */
    size_t removed = 0;
    for (size_t k = 0; pg_ok && k < pr->nshards; k++)
        removed += shard_list_find(&sc->sl, pr->shards[k].shard) == NULL;
    sc->v = calloc(sc->sl.n + removed, sizeof *sc->v);
    if (sc->v == NULL)
        return;
    sc->n = sc->sl.n;
    for (size_t k = 0; pg_ok && k < pr->nshards; k++) {
        if (shard_list_find(&sc->sl, pr->shards[k].shard) != NULL)
            continue;
        status_shard *h = &sc->v[sc->n + sc->nremoved++];
        h->id = pr->shards[k].shard;
        h->row = &pr->shards[k];
        h->removed = true;
        h->ok = true;
        h->lag = h->window_h = h->margin_h = -1;
    }
    for (size_t i = 0; i < sc->n; i++) {
        status_shard *h = &sc->v[i];
        h->id = sc->sl.v[i].id;
        h->lag = h->window_h = h->margin_h = -1;
        for (size_t k = 0; pg_ok && k < pr->nshards; k++)
            if (strcmp(pr->shards[k].shard, h->id) == 0)
                h->row = &pr->shards[k];
        h->ok = oplog_window(sc->sl.v[i].uri, &h->oldest, &h->newest, &h->have_oplog, h->err, sizeof h->err);
        if (!h->ok || !h->have_oplog)
            continue;
        h->window_h = ((double)h->newest.secs - (double)h->oldest.secs) / 3600.0;
        if (h->row != NULL) {
            const op_pos *needed =
                h->row->has_hold && op_pos_cmp(&h->row->hold, &h->row->pos) < 0 ? &h->row->hold : &h->row->pos;
            h->lag = (double)h->newest.secs - (double)h->row->pos.secs;
            h->lag = h->lag < 0 ? 0 : h->lag;
            h->margin_h = ((double)needed->secs - (double)h->oldest.secs) / 3600.0;
        }
    }
}

static void status_free_cluster(status_cluster *sc)
{
    free(sc->v);
    shard_list_free(&sc->sl);
}

static void status_print_shards_json(FILE *o, const status_cluster *sc)
{
    char at[OP_POS_STRLEN], when[64];
    fprintf(o, ", \"shards\": [");
    for (size_t i = 0; i < sc->n + sc->nremoved; i++) {
        const status_shard *h = &sc->v[i];
        fprintf(o, "%s{\"shard\": ", i ? ", " : "");
        json_str(o, h->id);
        if (h->row != NULL) {
            fprintf(o,
                    ", \"checkpoint\": {\"position\": \"%s\", \"time\": ", op_pos_format(&h->row->pos, at, sizeof at));
            json_str(o, utc_text(h->row->pos.secs, when, sizeof when));
            fprintf(o, ", \"term\": %lld, \"committed_at\": ", (long long)h->row->pos.term);
            json_str(o, h->row->applied_at);
            fprintf(o, "}");
        } else {
            fprintf(o, ", \"checkpoint\": null");
        }
        if (h->lag >= 0)
            fprintf(o, ", \"lag_seconds\": %.0f", h->lag);
        else
            fprintf(o, ", \"lag_seconds\": null");
        if (h->ok && h->have_oplog) {
            fprintf(o, ", \"oplog\": {\"oldest\": \"%s\"", op_pos_format(&h->oldest, at, sizeof at));
            fprintf(o, ", \"newest\": \"%s\", \"window_hours\": %.2f", op_pos_format(&h->newest, at, sizeof at),
                    h->window_h);
            if (h->margin_h >= 0)
                fprintf(o, ", \"margin_hours\": %.2f", h->margin_h);
            fprintf(o, "}");
        } else {
            fprintf(o, ", \"oplog\": null");
        }
        fprintf(o, ", \"removed\": %s", h->removed ? "true" : "false");
        fprintf(o, ", \"error\": ");
        if (!h->ok)
            json_str(o, h->err);
        else
            fprintf(o, "null");
        fprintf(o, "}");
    }
    fprintf(o, "]");
}

static void status_print_shards(const status_cluster *sc)
{
    char at[OP_POS_STRLEN], when[64], w2[64];
    if (sc->err[0] != '\0')
        printf("  shards:        %s\n", sc->err);
    else
        printf("  shards:        %zu (a sharded cluster: one checkpoint per shard)\n", sc->n);
    for (size_t i = 0; i < sc->n + sc->nremoved; i++) {
        const status_shard *h = &sc->v[i];
        printf("  shard %s\n", h->id);
        if (h->removed)
            printf("    removed:     no longer in config.shards; oplog2pg applies its oplog to its end, then deletes "
                   "its row (keep its replica set up until then)\n");
        if (h->row != NULL)
            printf("    checkpoint:  %s (%s), term %lld, committed %s\n", op_pos_format(&h->row->pos, at, sizeof at),
                   utc_text(h->row->pos.secs, when, sizeof when), (long long)h->row->pos.term, h->row->applied_at);
        else
            printf("    checkpoint:  none yet (read from the service's cluster time)\n");
        if (!h->ok) {
            printf("    mongodb:     %s\n", h->err);
            continue;
        }
        if (h->removed)
            continue;
        if (!h->have_oplog) {
            printf("    oplog:       empty\n");
            continue;
        }
        if (h->lag >= 0)
            printf("    behind:      %.0f s (newest oplog entry %s)\n", h->lag,
                   op_pos_format(&h->newest, at, sizeof at));
        printf("    oplog window: %s .. %s (%.2f h)\n", utc_text(h->oldest.secs, when, sizeof when),
               utc_text(h->newest.secs, w2, sizeof w2), h->window_h);
        if (h->margin_h >= 0)
            printf("    margin:      %.2f h of oplog before %s would fall off\n", h->margin_h,
                   h->row->has_hold ? "its open transaction's first entry" : "its checkpoint");
    }
}

/* A service read from a change stream, as `status` shows it: where the stream stands now, and whether the server
 * still holds its history from the checkpoint on. */
typedef struct {
    bool ok; /* the server was asked (err otherwise) */
    op_pos now;
    bool have_start;
    stream_start_status start; /* a stream opened at the checkpoint (have_start: there is one) */
    char start_why[256];
    char err[512];
} status_stream;

static void status_read_stream(const config *cfg, const sink_probe_result *pr, bool have_ck, status_stream *ss)
{
    memset(ss, 0, sizeof *ss);
    mongo_client_opts mo = {.appname = "oplog2pg-status"};
    mongoc_client_t *c = mongo_client_open(cfg->mongodb_uri_effective, &mo, ss->err, sizeof ss->err);
    if (c == NULL)
        return;
    bool pbrt;
    ss->ok = stream_caps_now(c, &ss->now, &pbrt, NULL, NULL, ss->err, sizeof ss->err) == STREAM_START_OK;
    if (ss->ok && have_ck) {
        ss->have_start = true;
        /* tailing opens its stream just after the checkpoint */
        op_pos next = pr->pos;
        if (next.inc < UINT32_MAX) {
            next.inc++;
        } else {
            next.secs++;
            next.inc = 0;
        }
        ss->start = stream_caps_start_at(c, &next, ss->start_why, sizeof ss->start_why);
    }
    mongoc_client_destroy(c);
}

/* The source a service reads, as `status` tells it: what its last commit read, else what the configuration names
 * (auto: the oplog, as far as status can tell without asking). */
static bool status_is_stream(const config *cfg, const sink_probe_result *pr, bool pg_ok)
{
    if (pg_ok && pr->source[0] != '\0')
        return strcmp(pr->source, "change_stream") == 0;
    return cfg->source == CONFIG_SOURCE_CHANGE_STREAM;
}

int daemon_status(config *cfg, bool json)
{
    int code = EXIT_OK;
    char perr[1400] = "", merr[512] = "", cerr[512] = "", at[OP_POS_STRLEN], when[64];
    sink_probe_result pr;
    pgconn_error pe;
    bool pg_ok = sink_probe(cfg->postgres_conninfo, cfg->service, &pr, &pe);
    if (!pg_ok) {
        const char *advice = pe.status == APPLY_CONFIG ? pgerror_advice(pe.sqlstate) : "";
        snprintf(perr, sizeof perr, "%s%s%s", pe.message, advice[0] ? "; " : "", advice);
    }
    op_pos old_p = {0, 0, -1}, new_p = {0, 0, -1};
    bool have_oplog = false;
    status_cluster sc;
    bool stream = status_is_stream(cfg, &pr, pg_ok);
    status_stream ss;
    memset(&ss, 0, sizeof ss);
    if (stream) {
        memset(&sc, 0, sizeof sc);
        status_read_stream(cfg, &pr, pg_ok && pr.have_checkpoint, &ss);
        if (!ss.ok)
            snprintf(merr, sizeof merr, "%s", ss.err);
    } else {
        status_read_cluster(cfg, &pr, pg_ok, &sc);
    }
    bool mongo_ok = stream ? ss.ok
                    : sc.sharded
                        ? sc.err[0] == '\0'
                        : oplog_window(cfg->mongodb_uri_effective, &old_p, &new_p, &have_oplog, merr, sizeof merr);
    if (sc.sharded && !mongo_ok)
        snprintf(merr, sizeof merr, "%s", sc.err);
    for (size_t i = 0; i < sc.n; i++)
        mongo_ok = mongo_ok && sc.v[i].ok;
    copy_state cs;
    memset(&cs, 0, sizeof cs);
    bool copy_ok = pg_ok && copy_state_read(cfg->postgres_conninfo, cfg->service, &cs, cerr, sizeof cerr);
    if (!pg_ok || !mongo_ok || (pg_ok && !copy_ok))
        code = EXIT_FAILURE_GENERIC;
    if (!pg_ok && pe.status == APPLY_CONFIG)
        code = EXIT_CONFIG;

    bool have_ck = pg_ok && pr.have_checkpoint;
    double lag = have_ck && have_oplog ? (double)new_p.secs - (double)pr.pos.secs : -1;
    if (stream && have_ck && ss.ok)
        lag = (double)ss.now.secs - (double)pr.pos.secs < 0 ? 0 : (double)ss.now.secs - (double)pr.pos.secs;
    bool history_lost = stream && ss.have_start && ss.start == STREAM_START_LOST;
    op_pos tok_time;
    bool have_tok_time = pg_ok && pr.token != NULL && stream_token_time(pr.token, pr.token_len, &tok_time);
    for (size_t i = 0; i < sc.n; i++)
        lag = sc.v[i].lag > lag ? sc.v[i].lag : lag;
    double window_h = have_oplog ? ((double)new_p.secs - (double)old_p.secs) / 3600.0 : -1;
    /* A transaction open at the checkpoint is read again, from its first entry, at its commit: that entry, not the
     * checkpoint, is what must stay in the oplog. */
    bool held = have_ck && pr.has_hold && op_pos_cmp(&pr.hold, &pr.pos) < 0;
    const op_pos *needed = held ? &pr.hold : &pr.pos;
    double margin_h = have_ck && have_oplog ? ((double)needed->secs - (double)old_p.secs) / 3600.0 : -1;

    if (json) {
        FILE *o = stdout;
        fprintf(o, "{\"service\": ");
        json_str(o, cfg->service);
        fprintf(o, ", \"running\": %s", pg_ok && pr.running ? "true" : "false");
        fprintf(o, ", \"source\": \"%s\"", stream ? "change_stream" : "oplog");
        if (pg_ok && pr.token != NULL) {
            fprintf(o, ", \"resume_token\": {\"bytes\": %zu, \"time\": ", pr.token_len);
            if (have_tok_time)
                fprintf(o, "\"%s\"}", op_pos_format(&tok_time, at, sizeof at));
            else
                fprintf(o, "null}");
        } else {
            fprintf(o, ", \"resume_token\": null");
        }
        if (stream && ss.ok) {
            fprintf(o, ", \"stream\": {\"newest\": \"%s\", \"history\": ", op_pos_format(&ss.now, at, sizeof at));
            if (!ss.have_start)
                fprintf(o, "null}");
            else
                fprintf(o, "\"%s\"}",
                        ss.start == STREAM_START_OK     ? "held"
                        : ss.start == STREAM_START_LOST ? "lost"
                                                        : "unknown");
        } else {
            fprintf(o, ", \"stream\": null");
        }
        if (pg_ok && pr.running && pr.activity[0] != '\0') {
            fprintf(o, ", \"activity\": ");
            json_str(o, pr.activity);
            fprintf(o, ", \"activity_since\": ");
            if (pr.activity_since > 0)
                json_str(o, utc_text((uint32_t)pr.activity_since, when, sizeof when));
            else
                fprintf(o, "null");
        } else {
            fprintf(o, ", \"activity\": null, \"activity_since\": null");
        }
        if (have_ck) {
            fprintf(o, ", \"checkpoint\": {\"position\": \"%s\", \"time\": ", op_pos_format(&pr.pos, at, sizeof at));
            json_str(o, utc_text(pr.pos.secs, when, sizeof when));
            fprintf(o, ", \"term\": %lld, \"committed_at\": ", (long long)pr.pos.term);
            json_str(o, pr.applied_at);
            fprintf(o, "}");
            if (held) {
                fprintf(o, ", \"open_transaction\": {\"since\": \"%s\", \"time\": ",
                        op_pos_format(&pr.hold, at, sizeof at));
                json_str(o, utc_text(pr.hold.secs, when, sizeof when));
                fprintf(o, "}");
            } else {
                fprintf(o, ", \"open_transaction\": null");
            }
        } else {
            fprintf(o, ", \"checkpoint\": null");
        }
        if (lag >= 0)
            fprintf(o, ", \"lag_seconds\": %.0f", lag);
        else
            fprintf(o, ", \"lag_seconds\": null");
        if (mongo_ok && have_oplog) {
            fprintf(o, ", \"oplog\": {\"oldest\": \"%s\"", op_pos_format(&old_p, at, sizeof at));
            fprintf(o, ", \"newest\": \"%s\", \"window_hours\": %.2f", op_pos_format(&new_p, at, sizeof at), window_h);
            if (margin_h >= 0)
                fprintf(o, ", \"margin_hours\": %.2f", margin_h);
            fprintf(o, "}");
        } else {
            fprintf(o, ", \"oplog\": null");
        }
        if (copy_ok && cs.exists) {
            fprintf(o, ", \"copy\": {\"finished\": %s, \"start\": \"%s\", \"collections\": [",
                    cs.finished ? "true" : "false", op_pos_format(&cs.start, at, sizeof at));
            for (size_t i = 0; i < cs.n; i++) {
                fprintf(o, "%s{\"namespace\": ", i ? ", " : "");
                char ns[400];
                snprintf(ns, sizeof ns, "%s.%s", cs.rows[i].db, cs.rows[i].coll);
                json_str(o, ns);
                fprintf(o, ", \"copied\": %lld, \"estimate\": %lld, \"done\": %s}", (long long)cs.rows[i].copied,
                        (long long)cs.rows[i].total_estimate, cs.rows[i].done ? "true" : "false");
            }
            fprintf(o, "]}");
        } else {
            fprintf(o, ", \"copy\": null");
        }
        if (pg_ok)
            fprintf(o, ", \"dead_letters\": %lld, \"timeseries\": {\"tables\": %lld, \"buckets\": %lld}",
                    (long long)pr.dead_letters, (long long)pr.ts_tables, (long long)pr.ts_buckets);
        else
            fprintf(o, ", \"dead_letters\": null, \"timeseries\": null");
        fprintf(o, ", \"errors\": [");
        const char *errs[3] = {pg_ok ? NULL : perr, mongo_ok ? NULL : merr, !pg_ok || copy_ok ? NULL : cerr};
        bool first = true;
        for (int i = 0; i < 3; i++) {
            if (errs[i] == NULL)
                continue;
            fputs(first ? "" : ", ", o);
            json_str(o, errs[i]);
            first = false;
        }
        fprintf(o, "]");
        if (sc.sharded)
            status_print_shards_json(o, &sc);
        fprintf(o, "}\n");
        copy_state_free(&cs);
        status_free_cluster(&sc);
        sink_probe_free(&pr);
        return code;
    }

    printf("service '%s'\n", cfg->service);
    if (!pg_ok) {
        printf("  postgres:      %s\n", perr);
    } else {
        if (!pr.running)
            printf("  state:         not running\n");
        else if (pr.activity[0] == '\0')
            printf("  state:         running (an oplog2pg holds the service)\n");
        else if (pr.activity_since > 0)
            printf("  state:         running (an oplog2pg holds the service): %s, since %s\n", pr.activity,
                   utc_text((uint32_t)pr.activity_since, when, sizeof when));
        else
            printf("  state:         running (an oplog2pg holds the service): %s\n", pr.activity);
        if (stream && pr.token != NULL && have_tok_time)
            printf("  source:        a change stream (its resume token, %zu bytes, at clusterTime %s, is committed "
                   "with the checkpoint)\n",
                   pr.token_len, op_pos_format(&tok_time, at, sizeof at));
        else if (stream && pr.token != NULL)
            printf("  source:        a change stream (its resume token, %zu bytes, is committed with the checkpoint)\n",
                   pr.token_len);
        else if (stream)
            printf("  source:        a change stream (no resume token yet: it starts at the checkpoint's time)\n");
        else
            printf("  source:        the oplog\n");
        if (have_ck && stream)
            printf("  checkpoint:    %s (%s), the last event's clusterTime, committed %s\n",
                   op_pos_format(&pr.pos, at, sizeof at), utc_text(pr.pos.secs, when, sizeof when), pr.applied_at);
        else if (have_ck)
            printf("  checkpoint:    %s (%s), term %lld, committed %s\n", op_pos_format(&pr.pos, at, sizeof at),
                   utc_text(pr.pos.secs, when, sizeof when), (long long)pr.pos.term, pr.applied_at);
        else
            printf("  checkpoint:    none yet\n");
        if (held)
            printf("  transaction:   an open transaction (since %s) holds the oplog window at %s: a restart reads it "
                   "again from there\n",
                   utc_text(pr.hold.secs, when, sizeof when), op_pos_format(&pr.hold, at, sizeof at));
        if (pr.dead_letters > 0)
            printf("  dead letters:  %lld (SELECT * FROM oplog2pg.dead_letter WHERE service = '%s')\n",
                   (long long)pr.dead_letters, cfg->service);
        else
            printf("  dead letters:  0\n");
        if (pr.ts_tables > 0)
            printf("  time-series:   %lld tables of measurements, %lld bucket documents kept for their next changes "
                   "(oplog2pg.timeseries_bucket)\n",
                   (long long)pr.ts_tables, (long long)pr.ts_buckets);
    }
    if (stream && mongo_ok) {
        if (lag >= 0)
            printf("  behind:        %.0f s (the stream's clusterTime now %s)\n", lag,
                   op_pos_format(&ss.now, at, sizeof at));
        if (history_lost)
            printf("  history:       LOST: the server no longer holds the changes after the checkpoint (%s); the "
                   "service must be resynced with --reimport\n",
                   ss.start_why);
        else if (ss.have_start && ss.start == STREAM_START_OK)
            printf("  history:       the server still holds the changes after the checkpoint\n");
        else if (ss.have_start)
            printf("  history:       unknown (%s)\n", ss.start_why);
    } else if (sc.sharded) {
        if (lag >= 0)
            printf("  behind:        %.0f s (the shard furthest behind)\n", lag);
        status_print_shards(&sc);
    } else if (!mongo_ok) {
        printf("  mongodb:       %s\n", merr);
    } else if (!have_oplog) {
        printf("  oplog:         empty\n");
    } else {
        if (lag >= 0)
            printf("  behind:        %.0f s (newest oplog entry %s)\n", lag, op_pos_format(&new_p, at, sizeof at));
        char w2[64];
        printf("  oplog window:  %s .. %s (%.2f h)\n", utc_text(old_p.secs, when, sizeof when),
               utc_text(new_p.secs, w2, sizeof w2), window_h);
        if (margin_h >= 0)
            printf("  margin:        %.2f h of oplog before %s would fall off\n", margin_h,
                   held ? "the open transaction's first entry" : "the checkpoint");
    }
    if (copy_ok && cs.exists) {
        size_t done = 0;
        int64_t copied = 0, total = 0;
        for (size_t i = 0; i < cs.n; i++) {
            done += cs.rows[i].done;
            copied += cs.rows[i].copied;
            total += cs.rows[i].total_estimate;
        }
        if (cs.finished)
            printf("  initial copy:  finished %s (%zu collections, %lld documents)\n", cs.finished_at, cs.n,
                   (long long)copied);
        else
            printf("  initial copy:  in progress since %s: %zu of %zu collections done, %lld of ~%lld documents\n",
                   cs.started_at, done, cs.n, (long long)copied, (long long)total);
        for (size_t i = 0; i < cs.n && !cs.finished; i++) {
            const copy_progress_row *r = &cs.rows[i];
            double pct = r->total_estimate > 0 ? 100.0 * (double)r->copied / (double)r->total_estimate : 100.0;
            printf("    %s.%s: %lld of ~%lld (%.0f%%)%s\n", r->db, r->coll, (long long)r->copied,
                   (long long)r->total_estimate, pct > 100 ? 100 : pct, r->done ? ", done" : "");
        }
    } else if (pg_ok && !copy_ok) {
        printf("  initial copy:  %s\n", cerr);
    }
    copy_state_free(&cs);
    status_free_cluster(&sc);
    sink_probe_free(&pr);
    return code;
}

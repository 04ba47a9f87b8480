/*
 * source_choice.c — see source_choice.h.
 */
#include "daemon/source_choice.h"

#include <stdio.h>
#include <string.h>

#include "daemon/exitcodes.h"
#include "source/mongo_client.h"
#include "util/log.h"

const char *source_kind_name(source_kind k)
{
    return k == SOURCE_CHANGE_STREAM ? "change_stream" : "oplog";
}

/* A change stream was chosen: may its updates be read as asked? */
static bool updates_ok(enum config_stream_updates updates, const stream_caps *caps, char *note, size_t len)
{
    if (updates != CONFIG_STREAM_UPDATES_RAW || caps->raw_updates.yes)
        return true;
    snprintf(note, len,
             "change_stream_updates = raw, but the server refuses showRawUpdateDescription (%s): set "
             "change_stream_updates = auto or description",
             caps->raw_updates.why);
    return false;
}

bool source_choose(enum config_source want, enum config_stream_updates updates, const stream_caps *caps,
                   source_kind *out, char *note, size_t len)
{
    switch (want) {
    case CONFIG_SOURCE_OPLOG:
        if (caps->oplog.probed && !caps->oplog.yes && !caps->router) {
            snprintf(note, len,
                     "source = oplog, but the server refuses to read local.oplog.rs (%s): grant read on the local "
                     "database, or set source = change_stream (or auto)",
                     caps->oplog.why);
            return false;
        }
        *out = SOURCE_OPLOG;
        snprintf(note, len, "source = oplog");
        return true;
    case CONFIG_SOURCE_CHANGE_STREAM:
        if (!caps->streams.yes) {
            snprintf(note, len, "source = change_stream, but no change stream opens on the cluster (%s)",
                     caps->streams.why[0] ? caps->streams.why : "not tried");
            return false;
        }
        *out = SOURCE_CHANGE_STREAM;
        snprintf(note, len, "source = change_stream");
        return updates_ok(updates, caps, note, len);
    case CONFIG_SOURCE_AUTO:
    default:
        break;
    }
    if (caps->router) {
        *out = SOURCE_OPLOG;
        snprintf(note, len, "source = auto on a sharded cluster's routers: the shards' oplogs, read directly");
        return true;
    }
    if (caps->oplog.yes) {
        *out = SOURCE_OPLOG;
        snprintf(note, len, "source = auto: the oplog can be read");
        return true;
    }
    if (caps->streams.yes) {
        *out = SOURCE_CHANGE_STREAM;
        snprintf(note, len, "source = auto: the oplog cannot be read (%s), so a change stream", caps->oplog.why);
        return updates_ok(updates, caps, note, len);
    }
    snprintf(note, len, "source = auto, but neither the oplog (%s) nor a change stream (%s) can be read",
             caps->oplog.why[0] ? caps->oplog.why : "not tried",
             caps->streams.why[0] ? caps->streams.why : "not tried");
    return false;
}

/* One line of what a server offers a change stream, for the log. */
static void log_caps(const stream_caps *c)
{
    /* (pre- and post-images are not asked at start: `check` shows them) */
    const stream_cap *caps[] = {&c->pbrt, &c->start_after, &c->expanded_events, &c->raw_updates, &c->split_events};
    const char *names[] = {"post-batch resume tokens", "startAfter", "showExpandedEvents", "showRawUpdateDescription",
                           "$changeStreamSplitLargeEvent"};
    char line[512];
    size_t n = 0;
    for (size_t i = 0; i < sizeof caps / sizeof *caps && n < sizeof line; i++)
        n += (size_t)snprintf(line + n, sizeof line - n, "%s%s %s", i ? ", " : "", names[i],
                              caps[i]->yes      ? "yes"
                              : caps[i]->probed ? "no"
                                                : "not tried");
    log_info("mongodb %s: the oplog %s; change streams %s (%s)", c->version[0] ? c->version : "(version not given)",
             c->oplog.yes ? "can be read" : "cannot be read", c->streams.yes ? "open" : "do not open", line);
}

int source_resolve(const config *cfg, const char *committed, source_kind *out)
{
    if (cfg->source == CONFIG_SOURCE_OPLOG) {
        *out = SOURCE_OPLOG;
        return -1;
    }
    char err[512], note[1024];
    mongo_client_opts mo = {.appname = "oplog2pg-start"};
    mongoc_client_t *c = mongo_client_open(cfg->mongodb_uri_effective, &mo, err, sizeof err);
    if (c == NULL) {
        log_error("[mongodb] uri: %s", err);
        return EXIT_CONFIG;
    }
    stream_caps caps;
    stream_caps_status st = stream_caps_probe_ex(c, false, &caps, err, sizeof err);
    mongoc_client_destroy(c);
    int rc = -1;
    if (st == STREAM_CAPS_REFUSED) {
        log_error("asking MongoDB what it offers: %s", err);
        rc = EXIT_CONFIG;
    } else if (st == STREAM_CAPS_RETRY) {
        bool known = committed != NULL && committed[0] != '\0';
        if (known && cfg->source == CONFIG_SOURCE_AUTO) {
            *out = strcmp(committed, "change_stream") == 0 ? SOURCE_CHANGE_STREAM : SOURCE_OPLOG;
            log_notice("source = auto: MongoDB cannot be asked what it offers (%s); going on with %s, the source "
                       "its checkpoint was committed from",
                       err, source_kind_name(*out));
        } else if (cfg->source == CONFIG_SOURCE_CHANGE_STREAM) {
            *out = SOURCE_CHANGE_STREAM; /* named: the reader reports its own errors, and retries */
            log_notice("source = change_stream: MongoDB cannot be asked what it offers now (%s)", err);
        } else {
            log_error("source = auto: MongoDB cannot be asked what it offers, so neither source can be chosen: %s",
                      err);
            rc = EXIT_FAILURE_GENERIC;
        }
    } else {
        log_caps(&caps);
        if (caps.cosmos && cfg->delete_reconcile_ms > 0) {
            /* Its streams open (with updateLookup) and lack only deletes, which the reconciliation supplies. */
            caps.streams.yes = true;
            log_notice("Azure Cosmos DB for MongoDB (RU): its change streams send no deletes; [mongodb] "
                       "delete_reconcile deletes the rows of documents no longer in MongoDB every %lld s",
                       (long long)(cfg->delete_reconcile_ms / 1000));
        }
        if (source_choose(cfg->source, cfg->change_stream_updates, &caps, out, note, sizeof note)) {
            log_notice("reading %s (%s)", *out == SOURCE_CHANGE_STREAM ? "a change stream" : "the oplog", note);
        } else {
            log_error("%s", note);
            rc = EXIT_CONFIG;
        }
    }
    stream_caps_free(&caps);
    return rc;
}

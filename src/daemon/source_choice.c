/*
 * source_choice.c — see source_choice.h.
 */
#include "daemon/source_choice.h"

#include <stdio.h>

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

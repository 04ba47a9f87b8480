/*
 * stream.c — the initial copy where the oplog cannot be read ([mongodb] source = change_stream): its start, its
 * window guard and its end taken from a change stream instead (source/stream/caps.h asks the server).
 *
 * Renames while the collections are listed are looked for as the oplog source does (copy.c, plan_from_start), in
 * the stream's rename events between the start and where the stream stands after the listing.
 *
 * A server without post-batch resume tokens (DocumentDB) gives positions only as its replies' operationTime: the
 * time of the newest operation the reply's read saw. The start is then that time itself: every write at or before it
 * was visible before the copy read anything, so it is in the copy, and tailing begins after it. The end of the rename
 * search is the operationTime of a reply given after the listing, and the search reads the stream until an event
 * past it or an awaited empty batch (caps.c, renames_without_pbrt, says why that is enough).
 *
 * A change stream's history is the oplog the user cannot read: the guard asks the server whether a stream can still
 * be opened at the copy's start (startAtOperationTime), and ChangeStreamHistoryLost (286) is the window lost, as an
 * oldest oplog entry past the start is for the oplog source. No margin can be measured (the oldest entry is not
 * visible), so there is no early warning: docs/configuration.md says to size the oplog for the copy.
 */
#include "copy/copy.h"

#include <stdio.h>
#include <stdlib.h>

#include "copy_internal.h"
#include "source/stream/caps.h"

op_pos copy_pos_before(const op_pos *p)
{
    op_pos b = {p->secs, p->inc, -1};
    if (b.inc > 0) {
        b.inc--;
    } else if (b.secs > 0) {
        b.secs--;
        b.inc = UINT32_MAX;
    }
    return b;
}

bool copy_stream_start(mongoc_client_t *client, op_pos *out, uint8_t **tok, size_t *tok_len, bool *retry, char *err,
                       size_t errlen)
{
    op_pos now;
    bool pbrt = false;
    uint8_t *t = NULL;
    size_t tlen = 0;
    char why[512];
    stream_start_status st = stream_caps_now(client, &now, &pbrt, &t, &tlen, why, sizeof why);
    *retry = st == STREAM_START_RETRY;
    if (st != STREAM_START_OK) {
        snprintf(err, errlen, "no change stream opens on the cluster to note the copy's start: %s", why);
        return false;
    }
    /* A high-water mark's events are still to come: the checkpoint is the position before it. operationTime is the
     * newest operation already seen: the checkpoint itself. */
    *out = pbrt ? copy_pos_before(&now) : now;
    out->term = -1;
    if (tok != NULL) {
        *tok = t;
        *tok_len = tlen;
    } else {
        free(t);
    }
    return true;
}

int copy_stream_window(run_ctx *rc, mongoc_client_t *client, char *err, size_t errlen)
{
    char why[256], s[OP_POS_STRLEN];
    /* A stream after the start (start + 1) is what tailing opens: the server must hold everything from there. */
    op_pos next = rc->start;
    if (next.inc < UINT32_MAX) {
        next.inc++;
    } else {
        next.secs++;
        next.inc = 0;
    }
    switch (stream_caps_start_at(client, &next, why, sizeof why)) {
    case STREAM_START_OK:
        return 1;
    case STREAM_START_LOST:
        snprintf(err, errlen,
                 "the server no longer holds the change stream's history from the copy's start (copy start %s: %s); "
                 "raise the oplog size or copy fewer collections at once. The committed progress is kept, but "
                 "resuming this copy cannot make it consistent either: raise the oplog size, then start over with "
                 "--reimport",
                 op_pos_format(&rc->start, s, sizeof s), why);
        return 0;
    default:
        snprintf(err, errlen, "opening a change stream at the copy's start: %s", why);
        return -1;
    }
}

bool copy_stream_renamed(mongoc_client_t *client, const op_pos *after, const op_pos *upto, bool *renamed, char *err,
                         size_t errlen)
{
    char why[400];
    if (stream_renames_between(client, after, upto, renamed, why, sizeof why))
        return true;
    snprintf(err, errlen, "looking for renames while the copy listed the collections: %s", why);
    return false;
}

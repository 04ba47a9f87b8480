/*
 * bound.c — how far a careful or isolating stretch of sessions reaches (apply_internal.h, stream_bound).
 *
 * NOTES
 * - One source (a replica set, a change stream, a dump): the stretch reaches through the last entry taken when the
 *   group failed, and it is passed once the checkpoint is there.
 * - A sharded cluster: the merge hands an entry that changes nothing on ahead of older entries of the other shards
 *   (core/merge.h), so the merged checkpoint may stand past an entry of another shard that is neither applied nor set
 *   aside yet. The bound keeps each shard's own last entry taken (by shard id: a later session may number the shards
 *   differently), and is passed once every shard's committed position is there. A shard the session does not read
 *   any more (removed, or retired: read to its end) has nothing more to give and counts as passed.
 * - The entry being taken when the failure came is not in the batcher's per-source positions yet (batcher_add stores
 *   them once the entry is in): its shard's bound is raised to it.
 * - A failure that names its op's entry (sink_error_pos: the failing statement's op, or the last entry of a COPY's
 *   run) has the refused op at or before it, so every bound is cut there: the entries after it go batched again at
 *   once, not one at a time (with many refusals in a backlog that is most of the stretch). Only when that entry is
 *   past the checkpoint: one that is not (a position the sink got wrong) would end each careful session before it
 *   began, so the whole group is stepped through instead. A wrong one past the checkpoint costs one more round:
 *   the next failure names the same entry, no longer past the checkpoint.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apply_internal.h"

void bound_clear(stream_bound *b)
{
    for (size_t i = 0; i < b->n; i++)
        free(b->shard[i].id);
    free(b->shard);
    memset(b, 0, sizeof *b);
    b->until.term = -1;
}

static bool pos_seen(const op_pos *p)
{
    return p->secs != 0 || p->inc != 0;
}

/* Raises shard id's bound to pos (adding the shard); false when memory runs out. */
static bool raise_shard(stream_bound *b, const char *id, const op_pos *pos)
{
    for (size_t k = 0; k < b->n; k++) {
        if (strcmp(b->shard[k].id, id) == 0) {
            if (op_pos_cmp(pos, &b->shard[k].pos) > 0)
                b->shard[k].pos = *pos;
            return true;
        }
    }
    bound_shard *ns = realloc(b->shard, (b->n + 1) * sizeof *ns);
    if (ns == NULL)
        return false;
    b->shard = ns;
    char *copy = strdup(id);
    if (copy == NULL)
        return false;
    b->shard[b->n++] = (bound_shard){.id = copy, .pos = *pos};
    return true;
}

/* Nothing after the failing op's entry needs stepping one at a time: each bound is cut there. */
static void cut_at(stream_bound *b, const op_pos *at)
{
    if (op_pos_cmp(at, &b->until) < 0)
        b->until = *at;
    for (size_t k = 0; k < b->n; k++)
        if (op_pos_cmp(at, &b->shard[k].pos) < 0)
            b->shard[k].pos = *at;
}

bool bound_set(daemon_ctx *d, stream_bound *b, const op_pos *failed_at)
{
    bound_clear(b);
    b->until = d->last_taken;
    bool cut = failed_at != NULL && op_pos_cmp(failed_at, &d->committed) > 0;
    if (d->cl == NULL) {
        if (cut)
            cut_at(b, failed_at);
        return true;
    }
    size_t n = 0;
    const batcher_source_pos *sp = d->bt != NULL ? batcher_sources(d->bt, &n) : NULL;
    for (size_t i = 0; i < n; i++) {
        cluster_shard_info info;
        if (!pos_seen(&sp[i].pos) || !cluster_shard_report(d->cl, i, &info))
            continue;
        if (!raise_shard(b, info.id, &sp[i].pos)) {
            bound_clear(b);
            return false;
        }
    }
    cluster_shard_info last;
    if (cluster_shard_report(d->cl, d->last_taken_source, &last) && !raise_shard(b, last.id, &d->last_taken)) {
        bound_clear(b);
        return false;
    }
    if (cut)
        cut_at(b, failed_at);
    return true;
}

bool bound_reached(const daemon_ctx *d, const stream_bound *b, const op_pos *session_start)
{
    if (b->shard == NULL || d->cl == NULL) {
        const op_pos *at = session_start != NULL ? session_start : &batcher_get_stats(d->bt)->committed;
        return op_pos_cmp(at, &b->until) >= 0;
    }
    /* Something taken and not committed yet (a transaction's parts, a group still open): not yet. */
    if (session_start == NULL && batcher_dirty(d->bt))
        return false;
    /* An entry that changes data, past the merged bound, is committed: the merge hands such entries on in cluster-time
     * order (core/merge.h), so every shard's entries up to the bound are committed before it. A shard whose next
     * entry comes long after the bound (an idle one) need not show it. */
    if (session_start == NULL && d->last_taken_changes && op_pos_cmp(&d->last_taken, &b->until) > 0)
        return true;
    size_t n = 0;
    const batcher_source_pos *sp = session_start == NULL ? batcher_sources(d->bt, &n) : NULL;
    for (size_t k = 0; k < b->n; k++) {
        size_t i;
        op_pos at;
        bool retired;
        if (!cluster_shard_place(d->cl, b->shard[k].id, &i, &at, &retired) || retired)
            continue;
        if (i < n && pos_seen(&sp[i].pos))
            at = sp[i].pos;
        if (op_pos_cmp(&at, &b->shard[k].pos) < 0)
            return false;
    }
    return true;
}

const char *bound_format(const stream_bound *b, char *buf, size_t len)
{
    char at[OP_POS_STRLEN];
    size_t used = (size_t)snprintf(buf, len, "%s", op_pos_format(&b->until, at, sizeof at));
    for (size_t k = 0; k < b->n && used < len; k++)
        used += (size_t)snprintf(buf + used, len - used, "%sshard '%s' through %s", k == 0 ? " (" : ", ",
                                 b->shard[k].id, op_pos_format(&b->shard[k].pos, at, sizeof at));
    if (b->n > 0 && used < len)
        snprintf(buf + used, len - used, ")");
    return buf;
}

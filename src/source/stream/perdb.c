/*
 * perdb.c — the merge of per-database change streams into one clusterTime order, and their composite resume token
 * (see source/stream/perdb.h). Pure: no MongoDB calls.
 */
#include "source/stream/perdb.h"

#include <stdlib.h>
#include <string.h>

void perdb_init(perdb_merge *m)
{
    memset(m, 0, sizeof *m);
}

static void event_free(perdb_event *e)
{
    free(e->doc);
    free(e->token);
    memset(e, 0, sizeof *e);
}

static perdb_event *at(const perdb_lane *l, size_t i)
{
    return &l->ev[(l->head + i) % l->cap];
}

static void lane_clear_queue(perdb_lane *l)
{
    for (size_t i = 0; i < l->n; i++)
        event_free(at(l, i));
    l->head = 0;
    l->n = 0;
}

void perdb_free(perdb_merge *m)
{
    for (size_t i = 0; i < m->n; i++) {
        perdb_lane *l = &m->lanes[i];
        lane_clear_queue(l);
        free(l->ev);
        free(l->db);
        free(l->pbrt);
        free(l->cur);
        free(l->pushed);
    }
    free(m->lanes);
    memset(m, 0, sizeof *m);
}

bool perdb_add_lane(perdb_merge *m, const char *db, size_t len)
{
    perdb_lane *v = realloc(m->lanes, (m->n + 1) * sizeof *v);
    if (!v)
        return false;
    m->lanes = v;
    perdb_lane *l = &v[m->n];
    memset(l, 0, sizeof *l);
    l->db = malloc(len + 1);
    if (!l->db)
        return false;
    memcpy(l->db, db, len);
    l->db[len] = '\0';
    m->n++;
    return true;
}

int perdb_find(const perdb_merge *m, const char *db)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->lanes[i].db, db) == 0)
            return (int)i;
    return -1;
}

/* Replaces *dst with a copy of src (NULL clears). */
static bool set_bytes(uint8_t **dst, uint32_t *dst_len, const uint8_t *src, uint32_t len)
{
    uint8_t *c = NULL;
    if (src) {
        c = malloc(len ? len : 1);
        if (!c)
            return false;
        memcpy(c, src, len);
    }
    free(*dst);
    *dst = c;
    *dst_len = src ? len : 0;
    return true;
}

bool perdb_parse(perdb_merge *m, const uint8_t *doc, uint32_t len, bool *nomem)
{
    bson_t b;
    bson_iter_t it, dbs;
    *nomem = false;
    if (!doc || !bson_init_static(&b, doc, len) || !bson_iter_init_find(&it, &b, "perdb") ||
        !BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &dbs))
        return false;
    while (bson_iter_next(&dbs)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&dbs))
            return false;
        int i = perdb_find(m, bson_iter_key(&dbs));
        if (i < 0)
            continue;
        const uint8_t *t;
        uint32_t tl;
        bson_iter_document(&dbs, &tl, &t);
        perdb_lane *l = &m->lanes[i];
        if (!set_bytes(&l->pushed, &l->pushed_len, t, tl) || !set_bytes(&l->cur, &l->cur_len, t, tl)) {
            *nomem = true;
            return false;
        }
    }
    return true;
}

bool perdb_lane_reset(perdb_merge *m, size_t lane)
{
    perdb_lane *l = &m->lanes[lane];
    lane_clear_queue(l);
    l->shown = false;
    l->hsecs = l->hinc = 0;
    l->hincl = false;
    free(l->pbrt);
    l->pbrt = NULL;
    l->pbrt_len = 0;
    return set_bytes(&l->cur, &l->cur_len, l->pushed, l->pushed_len);
}

bool perdb_lane_add(perdb_merge *m, size_t lane, const uint8_t *doc, uint32_t len, uint32_t secs, uint32_t inc,
                    uint64_t txn_op_index, const uint8_t *token, uint32_t token_len, bool position_only)
{
    perdb_lane *l = &m->lanes[lane];
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        perdb_event *v = malloc(cap * sizeof *v);
        if (!v)
            return false;
        for (size_t i = 0; i < l->n; i++)
            v[i] = *at(l, i);
        free(l->ev);
        l->ev = v;
        l->cap = cap;
        l->head = 0;
    }
    perdb_event e = {.secs = secs, .inc = inc, .txn_op_index = txn_op_index, .position_only = position_only};
    if (!set_bytes(&e.doc, &e.len, doc, len) || !set_bytes(&e.token, &e.token_len, token, token_len)) {
        event_free(&e);
        return false;
    }
    *at(l, l->n) = e;
    l->n++;
    return true;
}

static int tcmp(uint32_t as, uint32_t ai, uint32_t bs, uint32_t bi)
{
    if (as != bs)
        return as < bs ? -1 : 1;
    if (ai != bi)
        return ai < bi ? -1 : 1;
    return 0;
}

bool perdb_lane_batch_end(perdb_merge *m, size_t lane, const uint8_t *pbrt, uint32_t pbrt_len, bool has_time,
                          uint32_t secs, uint32_t inc, bool incl)
{
    perdb_lane *l = &m->lanes[lane];
    if (pbrt && !set_bytes(&l->pbrt, &l->pbrt_len, pbrt, pbrt_len))
        return false;
    if (has_time) {
        int c = l->shown ? tcmp(secs, inc, l->hsecs, l->hinc) : 1;
        if (c > 0 || (c == 0 && incl)) {
            l->hsecs = secs;
            l->hinc = inc;
            l->hincl = incl;
        }
        l->shown = true;
    }
    return true;
}

/* Whether the lane holds nothing before secs:inc (and, with at_too, nothing more at it). */
static bool lane_clear_to(const perdb_lane *l, uint32_t secs, uint32_t inc, bool at_too)
{
    if (l->n > 0) {
        const perdb_event *h = at(l, 0);
        int c = tcmp(h->secs, h->inc, secs, inc);
        return at_too ? c > 0 : c >= 0;
    }
    if (!l->shown)
        return false;
    int c = tcmp(l->hsecs, l->hinc, secs, inc);
    return at_too ? (c > 0 || (c == 0 && l->hincl)) : c >= 0;
}

perdb_next_status perdb_next(const perdb_merge *m, size_t *lane)
{
    /* the earliest head: time, then txnOpIndex, then lane */
    size_t best = m->n;
    for (size_t i = 0; i < m->n; i++) {
        const perdb_lane *l = &m->lanes[i];
        if (l->n == 0)
            continue;
        if (best == m->n) {
            best = i;
            continue;
        }
        const perdb_event *a = at(l, 0), *b = at(&m->lanes[best], 0);
        int c = tcmp(a->secs, a->inc, b->secs, b->inc);
        if (c < 0 || (c == 0 && a->txn_op_index < b->txn_op_index))
            best = i;
    }
    /* the lane to read: one not yet shown clear to the head (or, with no head, the one least far) */
    size_t read = m->n;
    for (size_t i = 0; i < m->n; i++) {
        const perdb_lane *l = &m->lanes[i];
        if (i == best || l->n > 0)
            continue;
        if (best < m->n) {
            const perdb_event *h = at(&m->lanes[best], 0);
            if (lane_clear_to(l, h->secs, h->inc, false))
                continue;
        }
        if (read == m->n) {
            read = i;
        } else {
            /* an unshown lane first, then the least far (at one point, one that still may hold events there) */
            const perdb_lane *r = &m->lanes[read];
            int c = tcmp(l->hsecs, l->hinc, r->hsecs, r->hinc);
            if (r->shown && (!l->shown || c < 0 || (c == 0 && r->hincl && !l->hincl)))
                read = i;
        }
    }
    if (best < m->n && read == m->n) {
        *lane = best;
        return PERDB_READY;
    }
    *lane = read < m->n ? read : 0;
    return PERDB_READ;
}

const perdb_event *perdb_head(const perdb_merge *m, size_t lane)
{
    const perdb_lane *l = &m->lanes[lane];
    return l->n ? at(l, 0) : NULL;
}

void perdb_pop(perdb_merge *m, size_t lane)
{
    perdb_lane *l = &m->lanes[lane];
    if (l->n == 0)
        return;
    perdb_event *e = at(l, 0);
    /* the token moves, it is not copied: the event goes */
    free(l->cur);
    l->cur = e->token;
    l->cur_len = e->token_len;
    e->token = NULL;
    event_free(e);
    l->head = (l->head + 1) % l->cap;
    l->n--;
}

bool perdb_passed(const perdb_merge *m, uint32_t secs, uint32_t inc)
{
    for (size_t i = 0; i < m->n; i++)
        if (!lane_clear_to(&m->lanes[i], secs, inc, true))
            return false;
    return true;
}

bool perdb_complete_to(const perdb_merge *m, uint32_t *secs, uint32_t *inc)
{
    bool have = false;
    uint32_t s = 0, c = 0;
    for (size_t i = 0; i < m->n; i++) {
        const perdb_lane *l = &m->lanes[i];
        if (l->n > 0 || !l->shown)
            return false;
        uint32_t ls = l->hsecs, lc = l->hinc;
        if (!l->hincl) { /* the tick before */
            if (lc > 0) {
                lc--;
            } else if (ls > 0) {
                ls--;
                lc = UINT32_MAX;
            } else {
                return false;
            }
        }
        if (!have || tcmp(ls, lc, s, c) < 0) {
            s = ls;
            c = lc;
            have = true;
        }
    }
    *secs = s;
    *inc = c;
    return have;
}

/* The lane's resume point now: its last post-batch token once its queue is empty, else the last event's handed on. */
static void lane_point(const perdb_lane *l, const uint8_t **t, uint32_t *len)
{
    if (l->n == 0 && l->pbrt) {
        *t = l->pbrt;
        *len = l->pbrt_len;
    } else {
        *t = l->cur;
        *len = l->cur_len;
    }
}

void perdb_lane_point(const perdb_merge *m, size_t lane, const uint8_t **t, uint32_t *len)
{
    lane_point(&m->lanes[lane], t, len);
}

bool perdb_token(const perdb_merge *m, bson_t *out)
{
    bson_t dbs;
    if (!BSON_APPEND_DOCUMENT_BEGIN(out, "perdb", &dbs))
        return false;
    for (size_t i = 0; i < m->n; i++) {
        const uint8_t *t;
        uint32_t len;
        bson_t doc;
        lane_point(&m->lanes[i], &t, &len);
        if (!t)
            continue;
        if (!bson_init_static(&doc, t, len) || !bson_append_document(&dbs, m->lanes[i].db, -1, &doc))
            return false;
    }
    return bson_append_document_end(out, &dbs);
}

bool perdb_commit(perdb_merge *m)
{
    for (size_t i = 0; i < m->n; i++) {
        perdb_lane *l = &m->lanes[i];
        const uint8_t *t;
        uint32_t len;
        lane_point(l, &t, &len);
        if (!t)
            continue;
        /* pushed first: t may be cur itself, which set_bytes would free before copying */
        if (!set_bytes(&l->pushed, &l->pushed_len, t, len))
            return false;
        if (t != l->cur && !set_bytes(&l->cur, &l->cur_len, l->pushed, l->pushed_len))
            return false;
    }
    return true;
}

/*
 * images.c — pre- and post-images kept for change streams (see images.h).
 *
 * Sources (mongodb/mongo): src/mongo/db/pipeline/change_stream_preimage.idl (the key {nsUUID, ts, applyOpsIndex});
 * src/mongo/db/op_observer/op_observer_impl.cpp (onUpdate / onDelete write the pre-image with the entry's optime,
 * and a transaction's writes with their applyOps index); change_stream_pre_image_util / the pre-image remover
 * (images older than the oplog's earliest entry are removed).
 *
 * NOTES. A write's images wait, keyed by the exact bytes of its entry body (op, ns, ui, o, o2), until an entry holding
 * that body is appended; the newest pending match is taken, so the images of a transaction that aborted (its body
 * never logged) are never taken by a later write whose body is the same. At most MAX_PENDING wait; older ones are
 * dropped (a transaction kept open across that many writes loses its images: whenAvailable gives null).
 */
#include "images.h"

#include <stdlib.h>
#include <string.h>

#define MAX_PENDING 4096

typedef struct {
    bson_t *body, *pre, *post;
} pending;

typedef struct {
    uint8_t uuid[16];
    uint64_t ts;
    uint32_t index;
    bson_t *pre, *post; /* post NULL for a delete */
} image;

struct sim_images {
    pending *p;
    size_t np, capp;
    image *v; /* in ts order: entries are appended in ts order */
    size_t nv, capv, first;
};

sim_images *images_new(void)
{
    sim_images *im = calloc(1, sizeof *im);
    if (!im)
        abort();
    return im;
}

static void pending_clear(pending *p)
{
    bson_destroy(p->body);
    bson_destroy(p->pre);
    if (p->post)
        bson_destroy(p->post);
}

static void image_clear(image *i)
{
    bson_destroy(i->pre);
    if (i->post)
        bson_destroy(i->post);
}

void images_free(sim_images *im)
{
    if (!im)
        return;
    for (size_t i = 0; i < im->np; i++)
        pending_clear(&im->p[i]);
    for (size_t i = im->first; i < im->nv; i++)
        image_clear(&im->v[i]);
    free(im->p);
    free(im->v);
    free(im);
}

void images_pending(void *ctx, const bson_t *body, const bson_t *pre, const bson_t *post)
{
    sim_images *im = ctx;
    if (im->np == MAX_PENDING) {
        pending_clear(&im->p[0]);
        memmove(im->p, im->p + 1, (im->np - 1) * sizeof *im->p);
        im->np--;
    }
    if (im->np == im->capp) {
        size_t cap = im->capp ? im->capp * 2 : 16;
        pending *n = realloc(im->p, cap * sizeof *n);
        if (!n)
            abort();
        im->p = n;
        im->capp = cap;
    }
    im->p[im->np++] = (pending){bson_copy(body), bson_copy(pre), post ? bson_copy(post) : NULL};
}

/* The body of an op as the store emitted it: op, ns, ui, o[, o2]. */
static bool body_of(const bson_t *op, bson_t *out, uint8_t uuid[16])
{
    static const char *const fields[] = {"op", "ns", "ui", "o", "o2"};
    bson_iter_t it;
    bson_init(out);
    for (size_t i = 0; i < 5; i++) {
        if (!bson_iter_init_find(&it, op, fields[i])) {
            if (i < 4) {
                bson_destroy(out);
                return false;
            }
            continue;
        }
        if (i == 2) {
            const uint8_t *u;
            uint32_t len;
            bson_subtype_t st;
            if (!BSON_ITER_HOLDS_BINARY(&it)) {
                bson_destroy(out);
                return false;
            }
            bson_iter_binary(&it, &st, &len, &u);
            if (len != 16) {
                bson_destroy(out);
                return false;
            }
            memcpy(uuid, u, 16);
        }
        bson_append_iter(out, fields[i], -1, &it);
    }
    return true;
}

static void take(sim_images *im, const bson_t *op, uint64_t ts, uint32_t index)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, op, "op") || !BSON_ITER_HOLDS_UTF8(&it))
        return;
    const char *opc = bson_iter_utf8(&it, NULL);
    if (strcmp(opc, "u") != 0 && strcmp(opc, "d") != 0)
        return;
    bson_t body;
    uint8_t uuid[16];
    if (!body_of(op, &body, uuid))
        return;
    for (size_t i = im->np; i-- > 0;) {
        pending *p = &im->p[i];
        if (p->body->len != body.len || memcmp(bson_get_data(p->body), bson_get_data(&body), body.len) != 0)
            continue;
        if (im->nv == im->capv) {
            size_t cap = im->capv ? im->capv * 2 : 64;
            image *n = realloc(im->v, cap * sizeof *n);
            if (!n)
                abort();
            im->v = n;
            im->capv = cap;
        }
        image *m = &im->v[im->nv++];
        memcpy(m->uuid, uuid, 16);
        m->ts = ts;
        m->index = index;
        m->pre = p->pre;
        m->post = p->post;
        bson_destroy(p->body);
        memmove(p, p + 1, (im->np - i - 1) * sizeof *p);
        im->np--;
        break;
    }
    bson_destroy(&body);
}

void images_on_entry(sim_images *im, const bson_t *entry, uint64_t ts)
{
    if (!im || im->np == 0)
        return;
    bson_iter_t it, ops;
    if (bson_iter_init(&it, entry) && bson_iter_find_descendant(&it, "o.applyOps", &ops) &&
        BSON_ITER_HOLDS_ARRAY(&ops) && bson_iter_recurse(&ops, &it)) {
        uint32_t index = 0;
        while (bson_iter_next(&it)) {
            if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
                uint32_t len;
                const uint8_t *d;
                bson_t op;
                bson_iter_document(&it, &len, &d);
                if (bson_init_static(&op, d, len))
                    take(im, &op, ts, index);
            }
            index++;
        }
        return;
    }
    take(im, entry, ts, 0);
}

bool images_find(const sim_images *im, const uint8_t uuid[16], uint64_t ts, uint32_t index, bson_t *pre, bson_t *post)
{
    if (!im)
        return false;
    size_t lo = im->first, hi = im->nv;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (im->v[mid].ts < ts)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < im->nv && im->v[i].ts == ts; i++) {
        const image *m = &im->v[i];
        if (m->index != index || memcmp(m->uuid, uuid, 16) != 0)
            continue;
        bson_init_static(pre, bson_get_data(m->pre), m->pre->len);
        if (m->post)
            bson_init_static(post, bson_get_data(m->post), m->post->len);
        else
            bson_init(post);
        return true;
    }
    return false;
}

void images_expire(sim_images *im, uint64_t ts)
{
    if (!im)
        return;
    while (im->first < im->nv && im->v[im->first].ts < ts)
        image_clear(&im->v[im->first++]);
    if (im->first == im->nv)
        im->first = im->nv = 0;
}

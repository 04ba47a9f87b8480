/*
 * op.c — constructors, destructors and small helpers for decoded oplog ops (core/op.h).
 *
 * Kept free of any decoding logic so that the batcher and the sink can build ops by hand in tests.
 */
#include "core/op.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int op_pos_cmp(const op_pos *a, const op_pos *b)
{
    if (a->secs != b->secs)
        return a->secs < b->secs ? -1 : 1;
    if (a->inc != b->inc)
        return a->inc < b->inc ? -1 : 1;
    return 0;
}

const char *op_pos_format(const op_pos *p, char *buf, size_t len)
{
    if (len == 0)
        return buf;
    snprintf(buf, len, "%" PRIu32 ":%" PRIu32, p->secs, p->inc);
    return buf;
}

void op_entry_init(op_entry *e)
{
    memset(e, 0, sizeof *e);
    e->pos.term = -1;
}

bool op_entry_alloc(op_entry *e, const op_pos *pos, size_t n)
{
    op_entry_init(e);
    if (n == 0)
        n = 1;
    e->ops = calloc(n, sizeof *e->ops);
    if (!e->ops)
        return false;
    e->pos = *pos;
    e->n = n;
    for (size_t i = 0; i < n; i++) {
        e->ops[i].pos = *pos;
        e->ops[i].index = (uint32_t)i;
        e->ops[i].id.value_type = BSON_TYPE_EOD;
    }
    return true;
}

void op_clear(op *o)
{
    op_pos pos = o->pos;
    uint32_t index = o->index;
    if (o->buf != o->buf_inline)
        free(o->buf);
    free(o->json);
    if (o->id_key != o->key_inline)
        free(o->id_key);
    free(o->refusal);
    if (o->mapped != NULL && o->mapped_free != NULL)
        o->mapped_free(o->mapped);
    memset(o, 0, sizeof *o);
    o->pos = pos;
    o->index = index;
    o->id.value_type = BSON_TYPE_EOD;
}

bool op_entry_changes_nothing(const op_entry *e)
{
    if (e->more || e->txn_role != OP_TXN_NONE)
        return false;
    for (size_t i = 0; i < e->n; i++)
        if (e->ops[i].kind != OP_NOOP)
            return false;
    return true;
}

size_t op_entry_bytes(const op_entry *e)
{
    size_t n = sizeof *e + e->n * sizeof *e->ops;
    for (size_t i = 0; i < e->n; i++) {
        const op *o = &e->ops[i];
        n += o->buf_len + o->json_len + (o->id_key ? o->id_key_len + 1 : 0) + (o->json ? 1 : 0) + o->mapped_bytes;
    }
    return n;
}

void op_entry_drop_payload(op_entry *e)
{
    for (size_t i = 0; i < e->n; i++) {
        op *o = &e->ops[i];
        if (!o->doc_borrowed)
            continue;
        o->doc = NULL;
        o->doc_len = 0;
        o->doc_borrowed = false;
        if (o->kind == OP_INSERT)
            o->id.value_type = BSON_TYPE_EOD;
    }
}

void op_entry_clear(op_entry *e)
{
    if (!e)
        return;
    for (size_t i = 0; i < e->n; i++)
        op_clear(&e->ops[i]);
    free(e->ops);
    free(e->token);
    op_entry_init(e);
}

void op_entry_free(op_entry *e)
{
    if (!e)
        return;
    op_entry_clear(e);
    free(e);
}

bool op_doc_view(const op *o, bson_t *view)
{
    return o->doc && bson_init_static(view, o->doc, o->doc_len);
}

bool op_key_view(const op *o, bson_t *view)
{
    return o->key && bson_init_static(view, o->key, o->key_len);
}

const char *op_kind_name(op_kind k)
{
    switch (k) {
    case OP_NOOP:
        return "noop";
    case OP_INSERT:
        return "insert";
    case OP_UPDATE:
        return "update";
    case OP_DELETE:
        return "delete";
    case OP_CREATE:
        return "create";
    case OP_DROP:
        return "drop";
    case OP_RENAME:
        return "rename";
    case OP_DROP_DATABASE:
        return "dropDatabase";
    case OP_TRUNCATE:
        return "truncate";
    }
    return "?";
}

const char *op_form_name(op_update_form f)
{
    switch (f) {
    case OP_FORM_NONE:
        return "none";
    case OP_FORM_REPLACE:
        return "replace";
    case OP_FORM_MODIFIER:
        return "modifier";
    case OP_FORM_DIFF:
        return "diff";
    }
    return "?";
}

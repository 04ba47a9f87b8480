/*
 * batch.c — see batch.h.
 */
#include "sink/batch.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/strbuf.h"

#define KEEP_CAP (1024 * 1024) /* storage kept across resets */

typedef struct {
    char *json;
    uint32_t json_len;
    uint32_t key_off, key_len;
} row;

struct sink_batch {
    row *rows;
    size_t n, cap;
    strbuf keys;
    size_t bytes;
    map_rows mapped; /* a mapped collection's rows (records), instead of rows[] */
    size_t mapped_docs;
    size_t gone_rows, gone_bytes; /* rows already streamed and let go (sink_batch_let_go) */
};

static const char copy_header[] = "PGCOPY\n\377\r\n\0\0\0\0\0\0\0\0\0"; /* signature, flags 0, extension 0 */
#define COPY_HEADER_LEN 19

sink_batch *sink_batch_new(void)
{
    sink_batch *b = calloc(1, sizeof *b);
    if (b != NULL) {
        strbuf_init(&b->keys);
        strbuf_init(&b->mapped.buf);
    }
    return b;
}

static void drop_rows(sink_batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        free(b->rows[i].json);
    b->n = 0;
    b->bytes = 0;
    b->mapped.count = 0;
    b->mapped.buf.len = 0;
    b->mapped_docs = 0;
}

void sink_batch_let_go(sink_batch *b)
{
    size_t rows = b->n + b->mapped_docs, bytes = b->bytes + b->mapped.buf.len;
    drop_rows(b);
    strbuf_reset(&b->keys, KEEP_CAP); /* the key texts go with their rows */
    b->gone_rows += rows;
    b->gone_bytes += bytes;
}

size_t sink_batch_held_rows(const sink_batch *b)
{
    return b->n + b->mapped_docs;
}

bool sink_batch_whole(const sink_batch *b)
{
    return b->gone_rows == 0;
}

void sink_batch_free(sink_batch *b)
{
    if (b == NULL)
        return;
    drop_rows(b);
    free(b->rows);
    strbuf_free(&b->keys);
    strbuf_free(&b->mapped.buf);
    free(b);
}

void sink_batch_reset(sink_batch *b)
{
    drop_rows(b);
    b->gone_rows = b->gone_bytes = 0;
    strbuf_reset(&b->keys, KEEP_CAP);
    strbuf_reset(&b->mapped.buf, KEEP_CAP);
    if (b->cap * sizeof *b->rows > KEEP_CAP) {
        free(b->rows);
        b->rows = NULL;
        b->cap = 0;
    }
}

void sink_batch_release(sink_batch *b)
{
    drop_rows(b);
    b->gone_rows = b->gone_bytes = 0;
    strbuf_free(&b->keys);
    strbuf_free(&b->mapped.buf);
    free(b->rows);
    b->rows = NULL;
    b->cap = 0;
}

static bool add_row(sink_batch *b, const char *key, size_t klen, char *json, size_t jlen)
{
    if (jlen > INT32_MAX - 1 || klen > INT32_MAX || b->keys.len + klen > UINT32_MAX)
        return false;
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        row *r = realloc(b->rows, cap * sizeof *r);
        if (r == NULL)
            return false;
        b->rows = r;
        b->cap = cap;
    }
    size_t off = b->keys.len;
    strbuf_append(&b->keys, key, klen);
    if (strbuf_failed(&b->keys)) {
        b->keys.len = off;
        b->keys.failed = false;
        return false;
    }
    b->rows[b->n++] =
        (row){.json = json, .json_len = (uint32_t)jlen, .key_off = (uint32_t)off, .key_len = (uint32_t)klen};
    b->bytes += klen + jlen;
    return true;
}

bool sink_batch_add(sink_batch *b, const char *key, size_t klen, const char *json, size_t jlen)
{
    char *copy = malloc(jlen + 1);
    if (copy == NULL)
        return false;
    memcpy(copy, json, jlen);
    copy[jlen] = '\0';
    if (!add_row(b, key, klen, copy, jlen)) {
        free(copy);
        return false;
    }
    return true;
}

bool sink_batch_take(sink_batch *b, const char *key, size_t klen, char **json, size_t jlen)
{
    if (!add_row(b, key, klen, *json, jlen))
        return false;
    *json = NULL;
    return true;
}

size_t sink_batch_rows(const sink_batch *b)
{
    return b->n + b->mapped_docs + b->gone_rows;
}

size_t sink_batch_bytes(const sink_batch *b)
{
    return b->bytes + b->mapped.buf.len + b->gone_bytes;
}

bool sink_batch_add_mapped(sink_batch *b, const map_rows *rows)
{
    size_t mark = b->mapped.buf.len;
    strbuf_append(&b->mapped.buf, rows->buf.data, rows->buf.len);
    if (strbuf_failed(&b->mapped.buf)) {
        /* the batch stays as it was, its earlier records and their counts together (a failed append changes no
         * byte of the buffer); only the failure flag goes */
        b->mapped.buf.len = mark;
        b->mapped.buf.failed = false;
        return false;
    }
    b->mapped.count += rows->count;
    b->mapped_docs++;
    return true;
}

const map_rows *sink_batch_mapped(const sink_batch *b)
{
    return &b->mapped;
}

void sink_batch_row(const sink_batch *b, size_t i, const char **key, size_t *klen, const char **json, size_t *jlen)
{
    const row *r = &b->rows[i];
    *key = b->keys.data + r->key_off;
    *klen = r->key_len;
    *json = r->json;
    *jlen = r->json_len;
}

static void put_be16(char *p, uint16_t v)
{
    p[0] = (char)(v >> 8);
    p[1] = (char)v;
}

static void put_be32(char *p, uint32_t v)
{
    p[0] = (char)(v >> 24);
    p[1] = (char)(v >> 16);
    p[2] = (char)(v >> 8);
    p[3] = (char)v;
}

/* The staged bytes, to libpq. */
static bool stage_flush(sink_copy_out *o, pgconn_error *err)
{
    bool ok = o->used == 0 || pgconn_copy_put(o->c, o->stage, o->used, err);
    o->used = 0;
    return ok;
}

/* Bytes of the COPY body: gathered in the stage, or handed to libpq as they are when they would not fit. */
static bool stage_put(sink_copy_out *o, const void *data, size_t len, pgconn_error *err)
{
    if (o->used + len > sizeof o->stage && !stage_flush(o, err))
        return false;
    if (len > sizeof o->stage)
        return pgconn_copy_put(o->c, data, len, err);
    memcpy(o->stage + o->used, data, len);
    o->used += len;
    return true;
}

bool sink_copy_open(sink_copy_out *o, pgconn *c, pgconn_error *err)
{
    o->c = c;
    o->used = 0;
    return stage_put(o, copy_header, COPY_HEADER_LEN, err);
}

bool sink_copy_rows(sink_copy_out *o, const sink_batch *b, size_t from, pgconn_error *err)
{
    for (size_t i = from; i < b->n; i++) {
        const row *r = &b->rows[i];
        /* int16 2 fields; int32 key length, key; int32 jsonb length (version byte + text), version 1, text. */
        char head[6], tail[5];
        put_be16(head, 2);
        put_be32(head + 2, r->key_len);
        put_be32(tail, r->json_len + 1);
        tail[4] = 1;
        if (!stage_put(o, head, sizeof head, err) || !stage_put(o, b->keys.data + r->key_off, r->key_len, err) ||
            !stage_put(o, tail, sizeof tail, err) || !stage_put(o, r->json, r->json_len, err))
            return false;
    }
    return true;
}

bool sink_copy_mapped(sink_copy_out *o, const sink_batch *b, uint16_t table, uint16_t ntables, size_t *from,
                      pgconn_error *err)
{
    map_row_iter it;
    map_rows_iter(&b->mapped, &it);
    if (*from > 0)
        it.p += *from;
    *from = b->mapped.buf.len;
    uint16_t t;
    const uint8_t *tuple;
    uint32_t len;
    while (map_rows_next(&it, &t, &tuple, &len)) {
        if (t >= ntables) {
            err->status = APPLY_UNRECORDABLE;
            err->sqlstate[0] = '\0';
            snprintf(err->message, sizeof err->message,
                     "a row names table %u of a map of %u tables: it was projected with another map (a bug); it is not "
                     "applied",
                     (unsigned)t, (unsigned)ntables);
            return false;
        }
        if (t == table && !stage_put(o, tuple, len, err))
            return false;
    }
    return true;
}

bool sink_copy_close(sink_copy_out *o, pgconn_error *err)
{
    static const char trailer[2] = {(char)0xff, (char)0xff};
    if (!stage_put(o, trailer, sizeof trailer, err) || !stage_flush(o, err)) {
        sink_copy_abandon(o, "oplog2pg: sending failed");
        return false;
    }
    return pgconn_copy_end(o->c, err);
}

void sink_copy_abandon(sink_copy_out *o, const char *why)
{
    o->used = 0;
    if (o->c != NULL && o->c->pg != NULL)
        PQputCopyEnd(o->c->pg, why); /* the server answers with an error: the statement (and what follows) fails */
}

/* A whole COPY body (header, the rows: the batch's, or table's mapped records when table >= 0; trailer), then the
 * end of the COPY. */
static bool copy_whole(pgconn *c, const sink_batch *b, int table, pgconn_error *err)
{
    sink_copy_out o; /* its stage on the stack, as the callers' threads have always allowed */
    size_t from = 0;
    bool ok =
        sink_copy_open(&o, c, err) &&
        (table < 0 ? sink_copy_rows(&o, b, 0, err) : sink_copy_mapped(&o, b, (uint16_t)table, UINT16_MAX, &from, err));
    if (!ok) {
        sink_copy_abandon(&o, "oplog2pg: sending failed");
        return false;
    }
    return sink_copy_close(&o, err);
}

bool sink_batch_copy(pgconn *c, const sink_batch *b, pgconn_error *err)
{
    return copy_whole(c, b, -1, err);
}

bool sink_batch_copy_mapped(pgconn *c, const sink_batch *b, uint16_t table, pgconn_error *err)
{
    return copy_whole(c, b, table, err);
}

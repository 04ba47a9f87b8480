/*
 * dump.c — see dump.h.
 *
 * NOTES
 * The file is read with our own framing rather than bson_reader_t, which treats a document cut short at the end of
 * the file like the end of the file: a BSON document is an int32 length (at least 5, at most the server's largest
 * internal document) followed by that many bytes minus four, the last one 0. Anything else is refused with its
 * offset.
 */
#include "source/dump.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map/ejson.h"
#include "source/decode.h"
#include "util/log.h"

/* BSONObjMaxInternalSize: 16 MB plus the 16 KB of headroom the server allows its own documents (oplog entries). */
#define DUMP_MAX_DOC (16 * 1024 * 1024 + 16 * 1024)

struct dump_reader {
    dump_config cfg;
    char *path;
    FILE *f;
    queue *q;
    pthread_t thread;
    bool joined;
    atomic_bool stop;
    atomic_uint_fast64_t entries, skipped, last_ts;
    atomic_bool have_last;
    atomic_int_fast64_t last_term;
    queue_pusher out; /* entries go to the queue in groups (core/queue.h) */
};

static void end(dump_reader *d, queue_end_reason reason, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void end(dump_reader *d, queue_end_reason reason, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (reason != QUEUE_END_DONE)
        log_error("replay: %s", msg);
    queue_pusher_flush(&d->out); /* everything before the end goes on first */
    queue_push_end(d->q, reason, msg);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void *dump_main(void *arg)
{
    dump_reader *d = arg;
    uint8_t *buf = NULL;
    size_t cap = 0;
    pthread_setname_np(pthread_self(), "o2p-dump");
    uint64_t offset = 0, n = 0;
    op_pos prev = {0, 0, -1};
    bool have_prev = false;
    char at[OP_POS_STRLEN], at2[OP_POS_STRLEN];

    while (!atomic_load(&d->stop)) {
        uint8_t hdr[4];
        size_t got = fread(hdr, 1, 4, d->f);
        if (got == 0 && feof(d->f)) {
            queue_pusher_flush(&d->out);
            queue_push_idle(d->q);
            end(d, QUEUE_END_DONE, "%s: %llu entries read", d->path, (unsigned long long)n);
            break;
        }
        if (got < 4) {
            end(d, QUEUE_END_BAD_INPUT,
                "%s: the dump ends inside entry %llu (byte offset %llu: %zu bytes where a document length should be); "
                "everything before it is applied",
                d->path, (unsigned long long)n + 1, (unsigned long long)offset, got);
            break;
        }
        uint32_t len = le32(hdr);
        if (len < 5 || len > DUMP_MAX_DOC) {
            end(d, QUEUE_END_BAD_INPUT,
                "%s: byte offset %llu, after entry %llu: not a BSON document (length %u); the dump is damaged or "
                "has something after its last entry; everything before it is applied",
                d->path, (unsigned long long)offset, (unsigned long long)n, len);
            break;
        }
        if (len > cap) {
            uint8_t *nb = realloc(buf, len);
            if (nb == NULL) {
                end(d, QUEUE_END_NOMEM, "out of memory reading %s", d->path);
                break;
            }
            buf = nb;
            cap = len;
        }
        memcpy(buf, hdr, 4);
        got = fread(buf + 4, 1, len - 4, d->f);
        if (got < len - 4) {
            end(d, QUEUE_END_BAD_INPUT,
                "%s: the dump ends inside entry %llu (byte offset %llu: %zu of its %u bytes); everything before it "
                "is applied",
                d->path, (unsigned long long)n + 1, (unsigned long long)offset, got + 4, len);
            break;
        }
        bson_t doc;
        if (buf[len - 1] != 0 || !bson_init_static(&doc, buf, len) || !bson_validate(&doc, BSON_VALIDATE_NONE, NULL)) {
            end(d, QUEUE_END_BAD_INPUT,
                "%s: entry %llu at byte offset %llu is not a valid BSON document; everything before it is applied",
                d->path, (unsigned long long)n + 1, (unsigned long long)offset);
            break;
        }
        offset += len;
        n++;
        op_entry *e = malloc(sizeof *e);
        char err[512];
        if (e == NULL) {
            end(d, QUEUE_END_NOMEM, "out of memory decoding entry %llu of %s", (unsigned long long)n, d->path);
            break;
        }
        /* Room in the queue first: the text about to be rendered counts against its byte bound. */
        size_t reserved = len;
        if (!queue_pusher_reserve(&d->out, reserved)) {
            free(e);
            break;
        }
        decode_status ds = decode_entry_ex(&doc, d->cfg.keep_payload ? 0 : DECODE_BORROW_PAYLOAD, e, err, sizeof err);
        if (ds != DECODE_OK) {
            queue_pusher_unreserve(&d->out, reserved);
            free(e);
            end(d, ds == DECODE_NOMEM ? QUEUE_END_NOMEM : QUEUE_END_UNSUPPORTED, "%s: entry %llu: %s", d->path,
                (unsigned long long)n, err);
            break;
        }
        if (have_prev && op_pos_cmp(&e->pos, &prev) <= 0) {
            end(d, QUEUE_END_BAD_INPUT,
                "%s: entry %llu at %s does not come after entry %llu at %s: the dump is not in oplog order; "
                "everything before it is applied",
                d->path, (unsigned long long)n, op_pos_format(&e->pos, at, sizeof at), (unsigned long long)n - 1,
                op_pos_format(&prev, at2, sizeof at2));
            queue_pusher_unreserve(&d->out, reserved);
            op_entry_free(e);
            break;
        }
        prev = e->pos;
        have_prev = true;
        if (d->cfg.have_start && op_pos_cmp(&e->pos, &d->cfg.start) <= 0) {
            atomic_fetch_add(&d->skipped, 1); /* applied by an earlier run */
            queue_pusher_unreserve(&d->out, reserved);
            op_entry_free(e);
            continue;
        }
        char ferr[512];
        if (!nsfilter_filter_entry(d->cfg.filter, e, ferr, sizeof ferr)) {
            queue_pusher_unreserve(&d->out, reserved);
            op_entry_free(e);
            end(d, QUEUE_END_UNSUPPORTED, "%s: entry %llu: %s", d->path, (unsigned long long)n, ferr);
            break;
        }
        decode_log_notices(e);
        if (!ejson_prepare_entry(e)) {
            queue_pusher_unreserve(&d->out, reserved);
            op_entry_free(e);
            end(d, QUEUE_END_NOMEM, "out of memory rendering entry %llu of %s", (unsigned long long)n, d->path);
            break;
        }
        op_entry_drop_payload(e); /* buf is reused for the next entry */
        op_pos p = e->pos;
        if (!queue_pusher_add(&d->out, e, reserved)) /* it and the rest of its group are freed */
            break;
        atomic_store(&d->last_ts, (uint64_t)p.secs << 32 | p.inc);
        atomic_store(&d->last_term, p.term);
        atomic_store(&d->have_last, true);
        atomic_fetch_add(&d->entries, 1);
    }
    queue_pusher_drop(&d->out); /* a stop: what was not handed on is not needed */
    free(buf);
    return NULL;
}

dump_reader *dump_start(const dump_config *cfg, queue *q, char *err, size_t errlen)
{
    dump_reader *d = calloc(1, sizeof *d);
    if (d == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    d->cfg = *cfg;
    d->q = q;
    queue_pusher_init(&d->out, q, &d->stop);
    d->path = strdup(cfg->path ? cfg->path : "");
    if (d->path == NULL) {
        snprintf(err, errlen, "out of memory");
        free(d);
        return NULL;
    }
    d->cfg.path = d->path;
    d->f = fopen(d->path, "rb");
    if (d->f == NULL) {
        snprintf(err, errlen, "%s: %s", d->path, strerror(errno));
        free(d->path);
        free(d);
        return NULL;
    }
    atomic_init(&d->stop, false);
    atomic_init(&d->entries, 0);
    atomic_init(&d->skipped, 0);
    atomic_init(&d->last_ts, 0);
    atomic_init(&d->last_term, -1);
    atomic_init(&d->have_last, false);
    int rc = pthread_create(&d->thread, NULL, dump_main, d);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the dump reader thread: %s", strerror(rc));
        fclose(d->f);
        free(d->path);
        free(d);
        return NULL;
    }
    return d;
}

void dump_stop(dump_reader *d)
{
    if (d == NULL || d->joined)
        return;
    atomic_store(&d->stop, true);
    queue_wake_pushers(d->q);
    pthread_join(d->thread, NULL);
    d->joined = true;
}

void dump_free(dump_reader *d)
{
    if (d == NULL)
        return;
    dump_stop(d);
    fclose(d->f);
    free(d->path);
    free(d);
}

void dump_get_stats(const dump_reader *d, dump_stats *out)
{
    dump_reader *m = (dump_reader *)d;
    uint64_t ts = atomic_load(&m->last_ts);
    out->entries = atomic_load(&m->entries);
    out->skipped = atomic_load(&m->skipped);
    out->have_last = atomic_load(&m->have_last);
    out->last.secs = (uint32_t)(ts >> 32);
    out->last.inc = (uint32_t)ts;
    out->last.term = atomic_load(&m->last_term);
}

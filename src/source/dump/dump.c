/*
 * dump.c — see dump.h.
 *
 * NOTES
 * - The file is read with our own framing rather than bson_reader_t, which treats a document cut short at the end of
 *   the file like the end of the file: a BSON document is an int32 length (at least 5, at most the server's largest
 *   internal document) followed by that many bytes minus four, the last one 0. Anything else is refused with its
 *   offset.
 * - Transactions written over several entries (source/txn.h) are put together as the oplog reader does, with the
 *   file in place of the oplog's point lookups: every partialTxn and prepare entry read is noted in an index
 *   (its ts, its prevOpTime's ts, its byte offset: 24 bytes an entry), which forgets a chain's entries at its commit
 *   or abort; at a commit the walk back and the forward read take the entries from the file at those offsets
 *   (pread on a descriptor of their own, so the sequential read is not disturbed), one entry at a time. Memory is
 *   bounded as on the live path: the OpTimes of the chain (16 bytes an entry), the index of the chains still open
 *   (24 bytes an entry), and one chain entry at a time, never the ops of a whole transaction. Each chain entry is
 *   one part (the live path reads an entry in windows of about 1 MB of ops; here a whole entry is held, up to
 *   16 MB, as for every other entry of a dump). The walk back reads each entry whole for its prevOpTime, which
 *   comes after its ops; the page cache makes the second read, forward, cheap. Entries at or before the start
 *   position are indexed too (and their commits close their chains), so a replay resumed after a cut inside a
 *   chain still finds its first entries.
 */
#include "source/dump/dump.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "map/ejson.h"
#include "map/project.h"
#include "source/decode.h"
#include "source/txn.h"
#include "util/log.h"

/* BSONObjMaxInternalSize: 16 MB plus the 16 KB of headroom the server allows its own documents (oplog entries). */
#define DUMP_MAX_DOC (16 * 1024 * 1024 + 16 * 1024)

/* An entry of a chain still open: where to find it again, and the entry before it in its chain. */
typedef struct {
    uint64_t ts;   /* secs << 32 | inc */
    uint64_t prev; /* its prevOpTime's ts, 0 for the chain's first entry */
    uint64_t off;  /* byte offset in the file */
} chain_ix;

struct dump_reader {
    dump_config cfg;
    char *path;
    FILE *f;
    int rfd; /* the same file, for the lookups of chain entries (pread) */
    queue *q;
    pthread_t thread;
    bool joined;
    atomic_bool stop;
    atomic_uint_fast64_t entries, skipped, last_ts;
    atomic_bool have_last;
    atomic_int_fast64_t last_term;
    queue_pusher out; /* entries go to the queue in groups (core/queue.h) */

    /* ---- thread only ---- */
    uint64_t n;      /* entries read so far (the current one included) */
    bool have_first; /* first: the dump's first entry */
    op_pos first;
    chain_ix *ix; /* the open chains' entries, in ts order */
    size_t ix_n, ix_cap;
    txn_book book;  /* the open chains, for the hold kept with the checkpoint */
    txn_list chain; /* the OpTimes of the chain being applied */
    uint8_t *lbuf;  /* a chain entry read back */
    size_t lcap;
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

static uint64_t ts_key(const op_pos *p)
{
    return (uint64_t)p->secs << 32 | p->inc;
}

/* ---- the index of open chains ---- */

static bool ix_add(dump_reader *d, const txn_info *ti, uint64_t off)
{
    if (d->ix_n == d->ix_cap) {
        size_t cap = d->ix_cap ? d->ix_cap * 2 : 64;
        chain_ix *v = realloc(d->ix, cap * sizeof *v);
        if (v == NULL)
            return false;
        d->ix = v;
        d->ix_cap = cap;
    }
    /* The dump is in oplog order (checked before), so appending keeps the index sorted. */
    d->ix[d->ix_n++] = (chain_ix){.ts = ts_key(&ti->pos), .prev = ti->has_prev ? ts_key(&ti->prev) : 0, .off = off};
    return true;
}

/* The index of the entry at ts, or ix_n when none is noted. */
static size_t ix_find(const dump_reader *d, uint64_t ts)
{
    size_t lo = 0, hi = d->ix_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->ix[mid].ts < ts)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < d->ix_n && d->ix[lo].ts == ts ? lo : d->ix_n;
}

/* A commit or abort whose prevOpTime is prev: its chain's entries are forgotten (following prevOpTime in the index). */
static void ix_close(dump_reader *d, const op_pos *prev)
{
    uint64_t at = ts_key(prev);
    while (at != 0) {
        size_t k = ix_find(d, at);
        if (k == d->ix_n)
            break;
        at = d->ix[k].prev;
        memmove(&d->ix[k], &d->ix[k + 1], (d->ix_n - k - 1) * sizeof *d->ix);
        d->ix_n--;
    }
}

/* The chain walk's lookup (txn_lookup_fn): the entry at ts, read back from the file when it is an entry of an open
 * chain. Anything else is MISSING; the caller tells an entry before the dump's first from one the dump holds but
 * that is no open chain entry. The document is a view into d->lbuf, valid until the next lookup. */
static txn_lookup lookup(void *ctx, const op_pos *ts, bson_t *out, char *err, size_t errlen)
{
    dump_reader *d = ctx;
    size_t k = ix_find(d, ts_key(ts));
    if (k == d->ix_n)
        return TXN_LOOKUP_MISSING;
    uint64_t off = d->ix[k].off;
    uint8_t hdr[4];
    ssize_t got = pread(d->rfd, hdr, 4, (off_t)off);
    uint32_t len = got == 4 ? le32(hdr) : 0;
    if (got != 4 || len < 5 || len > DUMP_MAX_DOC) {
        snprintf(err, errlen, "reading the entry at byte offset %llu again: %s", (unsigned long long)off,
                 got < 0 ? strerror(errno) : "the file changed while it was replayed");
        return TXN_LOOKUP_ERROR;
    }
    if (len > d->lcap) {
        uint8_t *nb = realloc(d->lbuf, len);
        if (nb == NULL) {
            snprintf(err, errlen, "out of memory reading a transaction's entry back");
            return TXN_LOOKUP_ERROR;
        }
        d->lbuf = nb;
        d->lcap = len;
    }
    got = pread(d->rfd, d->lbuf, len, (off_t)off);
    txn_info ti;
    if (got != (ssize_t)len || d->lbuf[len - 1] != 0 || !bson_init_static(out, d->lbuf, len) ||
        !bson_validate(out, BSON_VALIDATE_NONE, NULL) || !txn_classify(out, &ti) || ts_key(&ti.pos) != ts_key(ts)) {
        snprintf(err, errlen, "reading the entry at byte offset %llu again: %s", (unsigned long long)off,
                 got < 0 ? strerror(errno) : "the file changed while it was replayed");
        return TXN_LOOKUP_ERROR;
    }
    return TXN_LOOKUP_FOUND;
}

/* ---- pushing ---- */

/* Hands an entry on; the position and the counters move with the last part of a logical entry. */
static bool push(dump_reader *d, op_entry *e, size_t reserved)
{
    op_pos p = e->pos;
    bool more = e->more;
    e->has_hold = txn_book_oldest(&d->book, &e->hold);
    if (!queue_pusher_add(&d->out, e, reserved)) /* it and the rest of its group are freed */
        return false;
    if (more)
        return true;
    atomic_store(&d->last_ts, ts_key(&p));
    atomic_store(&d->last_term, p.term);
    atomic_store(&d->have_last, true);
    atomic_fetch_add(&d->entries, 1);
    return true;
}

/* Decodes, filters and renders the raw entry doc (entry number `num`, flags for the decoder) into *out with
 * `*reserved` bytes of queue room; false when the reader ends (it said why). */
static bool prepare(dump_reader *d, const bson_t *doc, uint64_t num, unsigned flags, op_entry **out, size_t *reserved)
{
    char err[512];
    op_entry *e = malloc(sizeof *e);
    if (e == NULL) {
        end(d, QUEUE_END_NOMEM, "out of memory decoding entry %llu of %s", (unsigned long long)num, d->path);
        return false;
    }
    /* Room in the queue first: the text about to be rendered counts against its byte bound. */
    if (!queue_pusher_reserve(&d->out, doc->len)) {
        free(e);
        return false;
    }
    decode_status ds =
        decode_entry_ex(doc, DECODE_KEEP_SYSTEM | (d->cfg.keep_payload ? 0 : DECODE_BORROW_PAYLOAD) | flags, e, err,
                        sizeof err);
    if (ds != DECODE_OK) {
        queue_pusher_unreserve(&d->out, doc->len);
        free(e);
        end(d, ds == DECODE_NOMEM ? QUEUE_END_NOMEM : QUEUE_END_UNSUPPORTED, "%s: entry %llu: %s", d->path,
            (unsigned long long)num, err);
        return false;
    }
    if (!nsfilter_filter_entry(d->cfg.filter, e, err, sizeof err)) {
        queue_pusher_unreserve(&d->out, doc->len);
        op_entry_free(e);
        end(d, QUEUE_END_UNSUPPORTED, "%s: entry %llu: %s", d->path, (unsigned long long)num, err);
        return false;
    }
    decode_log_notices(e);
    if (!map_prepare_entry(e, d->cfg.maps) || !ejson_prepare_entry(e)) {
        queue_pusher_unreserve(&d->out, doc->len);
        op_entry_free(e);
        end(d, QUEUE_END_NOMEM, "out of memory rendering entry %llu of %s", (unsigned long long)num, d->path);
        return false;
    }
    op_entry_drop_payload(e); /* the buffer is reused for the next entry */
    *out = e;
    *reserved = doc->len;
    return true;
}

static bool push_plain(dump_reader *d, const bson_t *doc)
{
    op_entry *e;
    size_t reserved;
    return prepare(d, doc, d->n, 0, &e, &reserved) && push(d, e, reserved);
}

/* A chain entry that is not a commit only moves the position (the oplog reader does the same). */
static bool push_noop(dump_reader *d, const txn_info *ti, const char *reason, bool atomic, uint32_t index)
{
    op_entry *e = malloc(sizeof *e);
    if (e == NULL || !op_entry_alloc(e, &ti->pos, 1)) {
        free(e);
        end(d, QUEUE_END_NOMEM, "out of memory decoding entry %llu of %s", (unsigned long long)d->n, d->path);
        return false;
    }
    e->ops[0].kind = OP_NOOP;
    e->ops[0].reason = reason;
    e->ops[0].index = index;
    e->atomic = atomic;
    return push(d, e, 0);
}

/* One entry of a transaction (a chain entry read back, or the commit itself) as a part of the logical entry at the
 * commit's position, its ops numbered on from *base. */
static bool push_part(dump_reader *d, const bson_t *doc, const txn_info *commit, bool more, uint32_t *base)
{
    op_entry *e;
    size_t reserved;
    if (!prepare(d, doc, d->n, DECODE_TXN_PART, &e, &reserved))
        return false;
    e->pos = commit->pos;
    for (size_t i = 0; i < e->n; i++) {
        e->ops[i].pos = commit->pos;
        e->ops[i].index = *base + (uint32_t)i;
    }
    *base += (uint32_t)e->n;
    e->atomic = true;
    e->more = more;
    return push(d, e, reserved);
}

/* A commit: the chain is walked back through the index, then its entries are read forward from the file, each one
 * part of the logical entry at the commit's position, the commit's own ops (or, for a commitTransaction, a noop)
 * last. */
static bool push_commit(dump_reader *d, const bson_t *doc, const txn_info *ti)
{
    char err[512], at[OP_POS_STRLEN], miss[OP_POS_STRLEN], first[OP_POS_STRLEN];
    op_pos missing;
    op_pos_format(&ti->pos, at, sizeof at);
    txn_walk ws = txn_walk_back(ti, lookup, d, &d->chain, &missing, err, sizeof err);
    switch (ws) {
    case TXN_WALK_OK:
        break;
    case TXN_WALK_SINGLE:
        return push_plain(d, doc);
    case TXN_WALK_LOST:
        op_pos_format(&missing, miss, sizeof miss);
        if (op_pos_cmp(&missing, &d->first) < 0) {
            end(d, QUEUE_END_BAD_INPUT,
                "%s: entry %llu: the transaction committed at %s has its entry at %s before the dump's first entry "
                "(%s): the dump begins inside that transaction; replay a dump that starts before it",
                d->path, (unsigned long long)d->n, at, miss, op_pos_format(&d->first, first, sizeof first));
            return false;
        }
        if (op_pos_cmp(&missing, &ti->prev) == 0 && ti->role == TXN_COMMIT && !ti->has_count)
            return push_plain(d, doc); /* its prevOpTime names an entry that is not a chain's: not a chain */
        end(d, QUEUE_END_UNSUPPORTED,
            "%s: entry %llu: malformed transaction: the transaction committed at %s reaches by prevOpTime the entry "
            "at %s, which is not a partialTxn or prepare entry of an open transaction in the dump",
            d->path, (unsigned long long)d->n, at, miss);
        return false;
    case TXN_WALK_BAD:
        end(d, QUEUE_END_UNSUPPORTED, "%s: entry %llu: malformed transaction: %s", d->path, (unsigned long long)d->n,
            err);
        return false;
    case TXN_WALK_NOMEM:
        end(d, QUEUE_END_NOMEM, "out of memory walking the transaction committed at %s", at);
        return false;
    case TXN_WALK_ERROR:
        end(d, QUEUE_END_BAD_INPUT, "%s: the transaction committed at %s: %s", d->path, at, err);
        return false;
    }
    txn_book_close(&d->book, &ti->prev); /* the parts' hold no longer counts this chain (as the oplog reader's) */
    uint32_t base = 0;
    for (size_t k = 0; k < d->chain.n; k++) {
        bson_t part;
        txn_lookup lr = lookup(d, &d->chain.v[k], &part, err, sizeof err);
        if (lr != TXN_LOOKUP_FOUND) { /* it was there a moment ago */
            end(d, QUEUE_END_BAD_INPUT, "%s: the transaction committed at %s: %s", d->path, at,
                lr == TXN_LOOKUP_ERROR ? err : "an entry of it is no longer indexed");
            return false;
        }
        if (!push_part(d, &part, ti, true, &base))
            return false;
    }
    ix_close(d, &ti->prev); /* after the forward read, which found the entries through it */
    if (ti->role == TXN_COMMIT)
        return push_part(d, doc, ti, false, &base);
    return push_noop(d, ti, "commitTransaction", true, base);
}

/* One whole, valid entry at byte offset `off`: noted when it belongs to a chain, skipped when at or before the start,
 * else pushed (a chain entry as a noop, a commit with its chain's ops). False when the reader ends. */
static bool handle(dump_reader *d, const bson_t *doc, uint64_t off)
{
    txn_info ti;
    if (!txn_classify(doc, &ti)) /* no ts Timestamp: the decoder names the fault */
        return push_plain(d, doc);
    if (ti.role == TXN_PART || ti.role == TXN_PREPARE) {
        if (!ix_add(d, &ti, off) || txn_book_note(&d->book, &ti, doc->len) == NULL) {
            end(d, QUEUE_END_NOMEM, "out of memory noting the transaction entry %llu of %s", (unsigned long long)d->n,
                d->path);
            return false;
        }
    }
    if (d->cfg.have_start && op_pos_cmp(&ti.pos, &d->cfg.start) <= 0) {
        atomic_fetch_add(&d->skipped, 1); /* applied by an earlier run */
        if (ti.role == TXN_COMMIT || ti.role == TXN_COMMIT_PREPARED || ti.role == TXN_ABORT) {
            txn_book_close(&d->book, &ti.prev);
            ix_close(d, &ti.prev);
        }
        return true;
    }
    switch (ti.role) {
    case TXN_NONE:
        break;
    case TXN_PART:
        return push_noop(d, &ti, "partialTxn entry (applied at its commit)", false, 0);
    case TXN_PREPARE:
        return push_noop(d, &ti, "prepared transaction (applied at commitTransaction)", false, 0);
    case TXN_ABORT:
        txn_book_close(&d->book, &ti.prev);
        ix_close(d, &ti.prev);
        return push_noop(d, &ti, "abortTransaction", false, 0);
    case TXN_COMMIT:
    case TXN_COMMIT_PREPARED:
        return push_commit(d, doc, &ti);
    }
    return push_plain(d, doc);
}

static void *dump_main(void *arg)
{
    dump_reader *d = arg;
    uint8_t *buf = NULL;
    size_t cap = 0;
    pthread_setname_np(pthread_self(), "o2p-dump");
    uint64_t offset = 0;
    op_pos prev = {0, 0, -1};
    bool have_prev = false;
    char at[OP_POS_STRLEN], at2[OP_POS_STRLEN];

    while (!atomic_load(&d->stop)) {
        uint8_t hdr[4];
        size_t got = fread(hdr, 1, 4, d->f);
        if (got == 0 && feof(d->f)) {
            queue_pusher_flush(&d->out);
            queue_push_idle(d->q);
            end(d, QUEUE_END_DONE, "%s: %llu entries read", d->path, (unsigned long long)d->n);
            break;
        }
        if (got < 4) {
            end(d, QUEUE_END_BAD_INPUT,
                "%s: the dump ends inside entry %llu (byte offset %llu: %zu bytes where a document length should be); "
                "everything before it is applied",
                d->path, (unsigned long long)d->n + 1, (unsigned long long)offset, got);
            break;
        }
        uint32_t len = le32(hdr);
        if (len < 5 || len > DUMP_MAX_DOC) {
            end(d, QUEUE_END_BAD_INPUT,
                "%s: byte offset %llu, after entry %llu: not a BSON document (length %u); the dump is damaged or "
                "has something after its last entry; everything before it is applied",
                d->path, (unsigned long long)offset, (unsigned long long)d->n, len);
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
                d->path, (unsigned long long)d->n + 1, (unsigned long long)offset, got + 4, len);
            break;
        }
        bson_t doc;
        if (buf[len - 1] != 0 || !bson_init_static(&doc, buf, len) || !bson_validate(&doc, BSON_VALIDATE_NONE, NULL)) {
            end(d, QUEUE_END_BAD_INPUT,
                "%s: entry %llu at byte offset %llu is not a valid BSON document; everything before it is applied",
                d->path, (unsigned long long)d->n + 1, (unsigned long long)offset);
            break;
        }
        uint64_t here = offset;
        offset += len;
        d->n++;
        op_pos pos;
        txn_info ti;
        if (txn_classify(&doc, &ti)) {
            pos = ti.pos;
            if (have_prev && op_pos_cmp(&pos, &prev) <= 0) {
                end(d, QUEUE_END_BAD_INPUT,
                    "%s: entry %llu at %s does not come after entry %llu at %s: the dump is not in oplog order; "
                    "everything before it is applied",
                    d->path, (unsigned long long)d->n, op_pos_format(&pos, at, sizeof at), (unsigned long long)d->n - 1,
                    op_pos_format(&prev, at2, sizeof at2));
                break;
            }
            prev = pos;
            have_prev = true;
            if (!d->have_first) {
                d->first = pos;
                d->have_first = true;
            }
        }
        if (!handle(d, &doc, here))
            break;
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
    d->rfd = -1;
    queue_pusher_init(&d->out, q, &d->stop);
    txn_book_init(&d->book);
    txn_list_init(&d->chain);
    d->path = strdup(cfg->path ? cfg->path : "");
    if (d->path == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    d->cfg.path = d->path;
    d->f = fopen(d->path, "rb");
    if (d->f == NULL) {
        snprintf(err, errlen, "%s: %s", d->path, strerror(errno));
        goto fail;
    }
    d->rfd = open(d->path, O_RDONLY | O_CLOEXEC);
    if (d->rfd < 0) {
        snprintf(err, errlen, "%s: %s", d->path, strerror(errno));
        goto fail;
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
        goto fail;
    }
    return d;
fail:
    if (d->rfd >= 0)
        close(d->rfd);
    if (d->f != NULL)
        fclose(d->f);
    free(d->path);
    free(d);
    return NULL;
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
    close(d->rfd);
    free(d->ix);
    free(d->lbuf);
    txn_book_free(&d->book);
    txn_list_free(&d->chain);
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

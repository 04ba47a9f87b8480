/*
 * oplog.c — mongosim's oplog storage (see oplog.h).
 *
 * NOTES: entries live back to back in `buf`; `idx` maps each entry to (ts, offset, length). Removing from the front
 * only advances `first`; the arrays are compacted (one memmove) when more than half of them is dead, so capping a
 * busy oplog costs amortised O(1) per entry. `base` is the seq of idx[0], so seqs survive compaction.
 */
#include "oplog.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t ts;
    size_t off;
    uint32_t len;
} oplog_idx;

struct sim_oplog {
    uint8_t *buf;
    size_t buf_len, buf_cap;
    oplog_idx *idx;
    size_t n, cap; /* idx[0..n) allocated, idx[first..n) live */
    size_t first;
    uint64_t base; /* seq of idx[0] */
    uint64_t last_ts;
};

sim_oplog *oplog_new(void)
{
    sim_oplog *log = calloc(1, sizeof *log);
    return log;
}

void oplog_free(sim_oplog *log)
{
    if (!log)
        return;
    free(log->buf);
    free(log->idx);
    free(log);
}

uint64_t oplog_first_seq(const sim_oplog *log)
{
    return log->base + log->first;
}
uint64_t oplog_end_seq(const sim_oplog *log)
{
    return log->base + log->n;
}
uint64_t oplog_count(const sim_oplog *log)
{
    return log->n - log->first;
}
uint64_t oplog_last_ts(const sim_oplog *log)
{
    return log->last_ts;
}

const uint8_t *oplog_entry(const sim_oplog *log, uint64_t seq, uint32_t *len)
{
    const oplog_idx *e = &log->idx[seq - log->base];
    *len = e->len;
    return log->buf + e->off;
}

uint64_t oplog_entry_ts(const sim_oplog *log, uint64_t seq)
{
    return log->idx[seq - log->base].ts;
}

uint64_t oplog_seek(const sim_oplog *log, uint64_t ts, bool inclusive)
{
    size_t lo = log->first, hi = log->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        bool before = inclusive ? log->idx[mid].ts < ts : log->idx[mid].ts <= ts;
        if (before)
            lo = mid + 1;
        else
            hi = mid;
    }
    return log->base + lo;
}

uint64_t oplog_next_ts(const sim_oplog *log, int64_t now_secs)
{
    uint32_t last_secs = OPLOG_TS_SECS(log->last_ts), last_inc = OPLOG_TS_INC(log->last_ts);
    uint32_t secs = now_secs > (int64_t)last_secs ? (uint32_t)now_secs : last_secs;
    if (secs == last_secs && log->last_ts != 0)
        return OPLOG_TS(secs, last_inc + 1);
    return OPLOG_TS(secs, 1);
}

static void compact(sim_oplog *log)
{
    if (log->first == 0)
        return;
    if (log->first == log->n) {
        log->base += log->n;
        log->n = log->first = 0;
        log->buf_len = 0;
        return;
    }
    size_t shift = log->idx[log->first].off;
    memmove(log->buf, log->buf + shift, log->buf_len - shift);
    log->buf_len -= shift;
    memmove(log->idx, log->idx + log->first, (log->n - log->first) * sizeof *log->idx);
    log->base += log->first;
    log->n -= log->first;
    log->first = 0;
    for (size_t i = 0; i < log->n; i++)
        log->idx[i].off -= shift;
}

/* Room for one more entry of `len` bytes; returns where it goes. */
static uint8_t *reserve(sim_oplog *log, size_t len, bson_error_t *err)
{
    if (log->first > 0 && log->first * 2 >= log->n)
        compact(log);
    if (log->n == log->cap) {
        size_t cap = log->cap ? log->cap * 2 : 1024;
        oplog_idx *idx = realloc(log->idx, cap * sizeof *idx);
        if (!idx)
            goto fail;
        log->idx = idx;
        log->cap = cap;
    }
    if (log->buf_len + len > log->buf_cap) {
        size_t cap = log->buf_cap ? log->buf_cap : 1 << 20;
        while (cap < log->buf_len + len)
            cap *= 2;
        uint8_t *buf = realloc(log->buf, cap);
        if (!buf)
            goto fail;
        log->buf = buf;
        log->buf_cap = cap;
    }
    return log->buf + log->buf_len;
fail:
    bson_set_error(err, 0, 1, "oplog: out of memory growing to %zu entries", log->n + 1);
    return NULL;
}

static void commit(sim_oplog *log, uint32_t len, uint64_t ts)
{
    log->idx[log->n].ts = ts;
    log->idx[log->n].off = log->buf_len;
    log->idx[log->n].len = len;
    log->n++;
    log->buf_len += len;
    log->last_ts = ts;
}

bool oplog_append(sim_oplog *log, const uint8_t *doc, uint32_t len, uint64_t ts, bson_error_t *err)
{
    if (ts <= log->last_ts) {
        bson_set_error(err, 0, 2, "oplog entry ts Timestamp(%u, %u) is not after the last ts Timestamp(%u, %u)",
                       OPLOG_TS_SECS(ts), OPLOG_TS_INC(ts), OPLOG_TS_SECS(log->last_ts), OPLOG_TS_INC(log->last_ts));
        return false;
    }
    uint8_t *dst = reserve(log, len, err);
    if (!dst)
        return false;
    memcpy(dst, doc, len);
    commit(log, len, ts);
    return true;
}

static uint8_t *put_key(uint8_t *p, uint8_t type, const char *key)
{
    *p++ = type;
    size_t n = strlen(key) + 1;
    memcpy(p, key, n);
    return p + n;
}

static uint8_t *put_u64(uint8_t *p, uint64_t v)
{
    uint64_t le = BSON_UINT64_TO_LE(v);
    memcpy(p, &le, 8);
    return p + 8;
}

bool oplog_append_stamped(sim_oplog *log, const uint8_t *doc, uint32_t len, uint64_t ts, int64_t term, int64_t wall_ms,
                          bool add_t, bool add_v, bool add_wall, bson_error_t *err)
{
    if (len < 5) {
        bson_set_error(err, 0, 2, "oplog entry of %u bytes is not a document", len);
        return false;
    }
    if (ts <= log->last_ts) {
        bson_set_error(err, 0, 2, "oplog entry ts is not after the last ts");
        return false;
    }
    size_t max = len + 4 * 16 + 8;
    uint8_t *dst = reserve(log, max, err);
    if (!dst)
        return false;
    memcpy(dst, doc, len - 1); /* without the trailing NUL */
    uint8_t *p = dst + len - 1;
    p = put_u64(put_key(p, BSON_TYPE_TIMESTAMP, "ts"), ts);
    if (add_t)
        p = put_u64(put_key(p, BSON_TYPE_INT64, "t"), (uint64_t)term);
    if (add_v)
        p = put_u64(put_key(p, BSON_TYPE_INT64, "v"), 2);
    if (add_wall)
        p = put_u64(put_key(p, BSON_TYPE_DATE_TIME, "wall"), (uint64_t)wall_ms);
    *p++ = 0;
    uint32_t total = (uint32_t)(p - dst);
    uint32_t le = BSON_UINT32_TO_LE(total);
    memcpy(dst, &le, 4);
    commit(log, total, ts);
    return true;
}

void oplog_truncate_before(sim_oplog *log, uint64_t ts)
{
    while (log->first < log->n && log->idx[log->first].ts < ts)
        log->first++;
}

void oplog_truncate_after(sim_oplog *log, uint64_t ts)
{
    while (log->n > log->first && log->idx[log->n - 1].ts > ts) {
        log->n--;
        log->buf_len = log->idx[log->n].off;
    }
    log->last_ts = log->n > log->first ? log->idx[log->n - 1].ts : (ts < log->last_ts ? ts : log->last_ts);
}

void oplog_cap(sim_oplog *log, uint64_t max)
{
    if (max == 0)
        return;
    while (log->n - log->first > max)
        log->first++;
}

bool oplog_save_file(const sim_oplog *log, const char *path, bson_error_t *err)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        bson_set_error(err, 0, 1, "cannot write %s: %s", tmp, strerror(errno));
        return false;
    }
    size_t from = log->n > log->first ? log->idx[log->first].off : 0;
    size_t bytes = log->buf_len - from;
    bool wrote = bytes == 0 || fwrite(log->buf + from, 1, bytes, f) == bytes;
    bool closed = fclose(f) == 0;
    if (!wrote || !closed) {
        bson_set_error(err, 0, 1, "cannot write %s: %s", tmp, strerror(errno));
        return false;
    }
    if (rename(tmp, path) != 0) {
        bson_set_error(err, 0, 1, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        return false;
    }
    return true;
}

bool oplog_load_file(sim_oplog *log, const char *path, bson_error_t *err)
{
    bool ok = false;
    bson_reader_t *reader = bson_reader_new_from_file(path, err);
    if (!reader)
        return false;
    const bson_t *doc;
    bool eof = false;
    size_t n = 0;
    while ((doc = bson_reader_read(reader, &eof))) {
        bson_iter_t it;
        uint32_t secs, inc;
        if (!bson_iter_init_find(&it, doc, "ts") || !BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            bson_set_error(err, 0, 2, "%s: entry %zu has no Timestamp ts", path, n);
            goto fail;
        }
        bson_iter_timestamp(&it, &secs, &inc);
        if (!oplog_append(log, bson_get_data(doc), doc->len, OPLOG_TS(secs, inc), err)) {
            char msg[sizeof err->message];
            memcpy(msg, err->message, sizeof msg);
            bson_set_error(err, 0, 2, "entry %zu of %.200s: %.250s", n, path, msg);
            goto fail;
        }
        n++;
    }
    if (!eof) {
        bson_set_error(err, 0, 2, "%s: invalid BSON after %zu entries", path, n);
        goto fail;
    }
    ok = true;
fail:
    bson_reader_destroy(reader);
    return ok;
}

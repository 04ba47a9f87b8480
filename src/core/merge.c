/*
 * merge.c — see merge.h for the rules.
 *
 * NOTES
 * - Each source is a slot: its head (one queue_item), its watermark, and its holding state for the nudges. The next
 *   entry is the smallest head by (pos, index) (a source in the middle of its parts is the next one by rule); it is
 *   ready when every other source without a head has a known watermark at or after it. A source's later entries are
 *   at or after its watermark, and after it unless it is in the middle of its parts, whose next one is then the next
 *   entry anyway, so nothing handed on can be overtaken.
 * - Holding is settled once per merge_take, after the last entry it could hand on: the sources that keep the next
 *   entry back. One that holds since held_since is nudged at held_since + wait_ms and each wait_ms after; the time
 *   it held is added to waited_ms when it stops.
 * - pop_many fills a source's buf (MERGE_POP_MAX items, allocated once, with its first pop) and items are accepted
 *   from it one at a time, exactly when pop would have given them: the buffer is the front of the source's queue,
 *   moved to this side so that taking it costs one lock instead of one per item.
 * - Open transactions across sources: an open-addressing table keyed by txn_key (linear probing, removal by backward
 *   shift), counting each key's open participants and whether a COMMIT part of it was handed on;
 *   committed_open counts the keys with both, and an entry gets no_commit while it is not zero.
 */
#include "core/merge.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NONE SIZE_MAX

typedef struct msrc {
    queue_item head; /* valid when has_head */
    queue_item *buf; /* pop_many: items taken from the source's queue, not accepted yet: buf[pos .. len) */
    size_t buf_pos, buf_len;
    op_pos wm; /* valid when known */
    bool known, has_head, ended, retired, holding;
    uint64_t held_since, next_nudge;
    uint64_t waited_ms, nudges, entries, notes;
} msrc;

typedef struct txn_slot {
    uint64_t key;
    uint32_t open; /* participants that prepared and have not committed or aborted yet */
    bool used;
    bool committed; /* a COMMIT part of it was handed on */
} txn_slot;

struct merge {
    merge_config cfg;
    msrc *src;
    size_t n, cap;
    size_t parts_src; /* the source in the middle of its parts (its last entry handed on had more), or NONE */
    bool idle_seen;   /* a source reported IDLE since the last IDLE handed on */
    bool failed;      /* the merge ended the stream itself: nothing more is handed on */
    bool end_pending; /* ...and its END item (end) is still to be handed on */
    size_t end_heads; /* sources whose head is an END (handed on before anything else) */
    queue_item end;
    txn_slot *txn;
    size_t txn_cap, txn_n;
    size_t committed_open; /* keys with a COMMIT handed on and open participants */
    uint64_t now;          /* the clock of the last merge_take */
    merge_stats stats;
};

/* ---- the transaction table ---- */

static size_t txn_home(uint64_t key, size_t cap)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdu;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

static txn_slot *txn_find(merge *m, uint64_t key)
{
    for (size_t i = txn_home(key, m->txn_cap);; i = (i + 1) & (m->txn_cap - 1)) {
        if (!m->txn[i].used)
            return NULL;
        if (m->txn[i].key == key)
            return &m->txn[i];
    }
}

static bool txn_grow(merge *m)
{
    size_t cap = m->txn_cap * 2;
    txn_slot *t = calloc(cap, sizeof *t);
    if (t == NULL)
        return false;
    for (size_t j = 0; j < m->txn_cap; j++) {
        if (!m->txn[j].used)
            continue;
        size_t i = txn_home(m->txn[j].key, cap);
        while (t[i].used)
            i = (i + 1) & (cap - 1);
        t[i] = m->txn[j];
    }
    free(m->txn);
    m->txn = t;
    m->txn_cap = cap;
    return true;
}

/* One more open participant of key; false when memory runs out. */
static bool txn_open(merge *m, uint64_t key)
{
    txn_slot *t = txn_find(m, key);
    if (t != NULL) {
        t->open++;
        return true;
    }
    if ((m->txn_n + 1) * 2 > m->txn_cap && !txn_grow(m))
        return false;
    size_t i = txn_home(key, m->txn_cap);
    while (m->txn[i].used)
        i = (i + 1) & (m->txn_cap - 1);
    m->txn[i] = (txn_slot){.key = key, .open = 1, .used = true};
    m->txn_n++;
    return true;
}

static void txn_remove(merge *m, txn_slot *t)
{
    size_t mask = m->txn_cap - 1;
    size_t i = (size_t)(t - m->txn);
    m->txn[i].used = false;
    m->txn_n--;
    for (size_t j = (i + 1) & mask; m->txn[j].used; j = (j + 1) & mask) {
        size_t h = txn_home(m->txn[j].key, m->txn_cap);
        /* the entry at j may move to the hole at i unless its home lies cyclically in (i, j] */
        bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
        if (stays)
            continue;
        m->txn[i] = m->txn[j];
        m->txn[j].used = false;
        i = j;
    }
}

/* One participant of key committed (its last part) or aborted. */
static void txn_close(merge *m, txn_slot *t)
{
    if (--t->open > 0)
        return;
    if (t->committed)
        m->committed_open--;
    txn_remove(m, t);
}

/* ---- the merge ---- */

static void fail(merge *m, queue_end_reason reason, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(merge *m, queue_end_reason reason, const char *fmt, ...)
{
    if (m->failed)
        return;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    m->failed = true;
    m->end_pending = true;
    m->end = (queue_item){.type = QUEUE_END, .reason = reason, .message = strdup(msg)};
}

merge *merge_new(const merge_config *cfg)
{
    if (cfg->n_sources == 0)
        return NULL;
    merge *m = calloc(1, sizeof *m);
    if (m == NULL)
        return NULL;
    m->cfg = *cfg;
    m->cap = cfg->n_sources < 4 ? 4 : cfg->n_sources;
    m->src = calloc(m->cap, sizeof *m->src);
    m->txn_cap = 16;
    m->txn = calloc(m->txn_cap, sizeof *m->txn);
    if (m->src == NULL || m->txn == NULL) {
        free(m->src);
        free(m->txn);
        free(m);
        return NULL;
    }
    m->n = cfg->n_sources;
    m->parts_src = NONE;
    return m;
}

void merge_free(merge *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->n; i++) {
        msrc *x = &m->src[i];
        if (x->has_head)
            queue_item_clear(&x->head);
        for (size_t j = x->buf_pos; j < x->buf_len; j++)
            queue_item_clear(&x->buf[j]);
        free(x->buf);
    }
    if (m->end_pending)
        queue_item_clear(&m->end);
    free(m->src);
    free(m->txn);
    free(m);
}

size_t merge_add_source(merge *m)
{
    if (m->n == m->cap) {
        size_t cap = m->cap * 2;
        msrc *s = realloc(m->src, cap * sizeof *s);
        if (s == NULL)
            return NONE;
        m->src = s;
        m->cap = cap;
    }
    memset(&m->src[m->n], 0, sizeof *m->src);
    return m->n++;
}

void merge_set_watermark(merge *m, size_t source, const op_pos *pos)
{
    if (source >= m->n)
        return;
    msrc *x = &m->src[source];
    if (!x->known || op_pos_cmp(pos, &x->wm) > 0) {
        x->wm = *pos;
        x->known = true;
    }
}

void merge_retire_source(merge *m, size_t source)
{
    if (source < m->n)
        m->src[source].retired = true;
}

bool merge_take_back(merge *m, size_t source, queue_item *out)
{
    if (source >= m->n || !m->src[source].retired)
        return false;
    msrc *x = &m->src[source];
    if (x->buf_pos >= x->buf_len)
        return false;
    *out = x->buf[x->buf_pos];
    memset(&x->buf[x->buf_pos], 0, sizeof x->buf[x->buf_pos]);
    x->buf_pos++;
    return true;
}

size_t merge_source_count(const merge *m)
{
    return m->n;
}

bool merge_wants(const merge *m, size_t source)
{
    if (source >= m->n)
        return false;
    const msrc *x = &m->src[source];
    return !x->has_head && x->buf_pos == x->buf_len && !x->ended && !x->retired;
}

/* Whether the merge will take another item of source s: it has no head, and is neither ended nor retired (what its
 * buffer holds comes first). */
static bool takes(const merge *m, size_t s)
{
    const msrc *x = &m->src[s];
    return !x->has_head && !x->ended && !x->retired;
}

/* Takes one item of source s (which has no head): IDLE is noted, a note_only entry counted and freed, an entry or
 * END becomes the head. */
static void accept(merge *m, size_t s, queue_item *it)
{
    msrc *x = &m->src[s];
    if (it->type == QUEUE_IDLE) {
        m->idle_seen = true;
        queue_item_clear(it);
        return;
    }
    if (it->type == QUEUE_ENTRY && it->entry->note_only) {
        x->notes++;
        if (it->entry->txn_role == OP_TXN_PREPARE && !txn_open(m, it->entry->txn_key))
            fail(m, QUEUE_END_NOMEM, "out of memory counting the prepared transactions open across sources");
        queue_item_clear(it);
        return;
    }
    if (it->type == QUEUE_ENTRY) {
        const op_pos *p = &it->entry->pos;
        if (x->known && op_pos_cmp(p, &x->wm) < 0) {
            char at[OP_POS_STRLEN], wm[OP_POS_STRLEN];
            fail(m, QUEUE_END_UNSUPPORTED,
                 "the merge of the sources: source %zu went back from %s to %s (its entries must come in order)", s,
                 op_pos_format(&x->wm, wm, sizeof wm), op_pos_format(p, at, sizeof at));
            queue_item_clear(it);
            return;
        }
        x->wm = *p;
        x->known = true;
    }
    if (it->type == QUEUE_END)
        m->end_heads++;
    x->head = *it;
    x->has_head = true;
    memset(it, 0, sizeof *it);
}

bool merge_put(merge *m, size_t source, queue_item *it)
{
    if (!merge_wants(m, source))
        return false;
    accept(m, source, it);
    return true;
}

/* The next item of source s, from its buffer or its queue; false when there is none now. */
static bool next_item(merge *m, size_t s, queue_item *it)
{
    msrc *x = &m->src[s];
    if (x->buf_pos == x->buf_len && m->cfg.pop_many != NULL) {
        if (x->buf == NULL && (x->buf = calloc(MERGE_POP_MAX, sizeof *x->buf)) == NULL) {
            /* nothing was taken from the queue: a new session may do better */
            fail(m, QUEUE_END_NOMEM, "out of memory for the merge's buffer of source %zu", s);
            return false;
        }
        x->buf_pos = 0;
        size_t n = m->cfg.pop_many(m->cfg.pop_arg, s, x->buf, MERGE_POP_MAX);
        x->buf_len = n < MERGE_POP_MAX ? n : MERGE_POP_MAX;
        if (n > MERGE_POP_MAX) { /* the caller broke the contract: stop, never guess what was lost */
            fail(m, QUEUE_END_UNSUPPORTED,
                 "the merge of the sources: source %zu handed over %zu items at once (at most %d)", s, n,
                 MERGE_POP_MAX);
            return false;
        }
    }
    if (x->buf_pos < x->buf_len) {
        *it = x->buf[x->buf_pos];
        memset(&x->buf[x->buf_pos], 0, sizeof x->buf[x->buf_pos]);
        x->buf_pos++;
        return true;
    }
    return m->cfg.pop_many == NULL && m->cfg.pop != NULL && m->cfg.pop(m->cfg.pop_arg, s, it);
}

/* Pulls items of source s until it has a head or its queue is empty. */
static void pull(merge *m, size_t s)
{
    while (takes(m, s) && !m->failed) {
        queue_item it;
        if (!next_item(m, s, &it))
            return;
        accept(m, s, &it);
    }
}

/* The source whose head is the next entry in order, or NONE (no entry head, or the source in the middle of its parts
 * has none yet). */
static size_t next_source(const merge *m)
{
    if (m->parts_src != NONE)
        return m->src[m->parts_src].has_head ? m->parts_src : NONE;
    size_t best = NONE;
    const op_pos *bp = NULL;
    for (size_t i = 0; i < m->n; i++) {
        const msrc *x = &m->src[i];
        if (!x->has_head || x->head.type != QUEUE_ENTRY)
            continue;
        if (bp == NULL || op_pos_cmp(&x->head.entry->pos, bp) < 0) {
            best = i;
            bp = &x->head.entry->pos;
        }
    }
    return best;
}

/* An entry that changes nothing (every op a noop: a periodic noop, an oplog note, a migration's copy, a transaction's
 * partial entry) and plays no part in a transaction across sources: it may be handed on before the entries of other
 * sources that are older, since its only effect is its own source's position. Held in order like the rest, an
 * oplog note written to let another source's entry pass would in turn wait for that source to show a later one, and
 * so on: each note would call for the next. */
static bool quiet(const queue_item *it)
{
    return it->type == QUEUE_ENTRY && op_entry_changes_nothing(it->entry);
}

/* A source whose head is quiet (handed on at once), or NONE; never while a source is in the middle of its parts. */
static size_t quiet_source(const merge *m)
{
    if (m->parts_src != NONE)
        return NONE;
    for (size_t i = 0; i < m->n; i++)
        if (m->src[i].has_head && quiet(&m->src[i].head))
            return i;
    return NONE;
}

/* Does source i (not the next one) keep an entry at t from being handed on? */
static bool holds(const merge *m, size_t i, const op_pos *t)
{
    const msrc *x = &m->src[i];
    if (x->has_head || x->retired)
        return false; /* a head is at or after the next entry (it is the smallest) */
    return !x->known || op_pos_cmp(&x->wm, t) < 0;
}

static bool ready(const merge *m, size_t next)
{
    const op_pos *t = &m->src[next].head.entry->pos;
    for (size_t i = 0; i < m->n; i++)
        if (i != next && holds(m, i, t))
            return false;
    return true;
}

/* Hands on the head of s into *out, with the transaction rule; false when it cannot (the merge failed). */
static bool hand_on(merge *m, size_t s, queue_item *out)
{
    msrc *x = &m->src[s];
    op_entry *e = x->head.entry;
    txn_slot *t;
    switch (e->txn_role) {
    case OP_TXN_PREPARE:
        if (!txn_open(m, e->txn_key)) {
            fail(m, QUEUE_END_NOMEM, "out of memory counting the prepared transactions open across sources");
            return false;
        }
        break;
    case OP_TXN_COMMIT:
        t = txn_find(m, e->txn_key);
        if (t != NULL) {
            if (!t->committed) {
                t->committed = true;
                m->committed_open++;
            }
            if (!e->more)
                txn_close(m, t);
        }
        break;
    case OP_TXN_ABORT:
        t = txn_find(m, e->txn_key);
        if (t != NULL)
            txn_close(m, t);
        break;
    default:
        break;
    }
    if (m->committed_open > 0) {
        e->no_commit = true;
        m->stats.no_commit++;
    }
    *out = x->head;
    memset(&x->head, 0, sizeof x->head);
    x->has_head = false;
    x->entries++;
    m->stats.entries++;
    m->parts_src = e->more ? s : NONE;
    return true;
}

/* Settles which sources hold the stream back now, and sends the nudges due. */
static void settle(merge *m, uint64_t now)
{
    size_t next = m->failed ? NONE : next_source(m);
    const op_pos *t = NULL;
    if (next != NONE && !ready(m, next))
        t = &m->src[next].head.entry->pos;
    uint64_t period = m->cfg.wait_ms > 0 ? m->cfg.wait_ms : 1;
    for (size_t i = 0; i < m->n; i++) {
        msrc *x = &m->src[i];
        bool h;
        if (t != NULL)
            h = i != next && holds(m, i, t);
        else /* waiting for the next part of source parts_src */
            h = !m->failed && i == m->parts_src && !x->has_head;
        if (!h) {
            if (x->holding) {
                x->waited_ms += now - x->held_since;
                x->holding = false;
            }
            continue;
        }
        if (!x->holding) {
            x->holding = true;
            x->held_since = now;
            x->next_nudge = now + m->cfg.wait_ms;
        }
        if (t != NULL && m->cfg.nudge != NULL && !x->ended && now >= x->next_nudge) {
            m->cfg.nudge(m->cfg.nudge_arg, i, t);
            x->nudges++;
            m->stats.nudges++;
            x->next_nudge = now + period;
        }
    }
}

size_t merge_take(merge *m, queue_item *out, size_t max, uint64_t now_ms)
{
    size_t k = 0;
    if (now_ms > m->now)
        m->now = now_ms;
    for (size_t i = 0; i < m->n; i++)
        pull(m, i);
    while (k < max) {
        if (m->end_pending) {
            out[k++] = m->end;
            m->end_pending = false;
            continue;
        }
        if (m->failed)
            break;
        if (m->end_heads > 0) {
            for (size_t i = 0; i < m->n; i++) {
                msrc *x = &m->src[i];
                if (x->has_head && x->head.type == QUEUE_END) {
                    out[k++] = x->head;
                    memset(&x->head, 0, sizeof x->head);
                    x->has_head = false;
                    x->ended = true;
                    m->end_heads--;
                    break;
                }
            }
            continue;
        }
        size_t next = quiet_source(m);
        if (next == NONE)
            next = next_source(m);
        if (next == NONE || (!quiet(&m->src[next].head) && !ready(m, next)))
            break;
        if (!hand_on(m, next, &out[k]))
            continue;
        k++;
        pull(m, next);
    }
    if (k < max && m->idle_seen && !m->failed) {
        out[k++] = (queue_item){.type = QUEUE_IDLE};
        m->idle_seen = false;
        m->stats.idles++;
    }
    settle(m, m->now);
    return k;
}

uint64_t merge_deadline(const merge *m)
{
    uint64_t d = UINT64_MAX;
    if (m->cfg.nudge == NULL)
        return d;
    for (size_t i = 0; i < m->n; i++) {
        const msrc *x = &m->src[i];
        if (x->holding && !x->ended && i != m->parts_src && x->next_nudge < d)
            d = x->next_nudge;
    }
    return d;
}

size_t merge_held(const merge *m)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n; i++)
        n += m->src[i].has_head;
    return n;
}

size_t merge_buffered(const merge *m)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n; i++)
        n += m->src[i].buf_len - m->src[i].buf_pos;
    return n;
}

bool merge_get_source_stats(const merge *m, size_t source, merge_source_stats *out)
{
    if (source >= m->n)
        return false;
    const msrc *x = &m->src[source];
    *out = (merge_source_stats){.known = x->known,
                                .watermark = x->wm,
                                .has_head = x->has_head,
                                .holding = x->holding,
                                .ended = x->ended,
                                .retired = x->retired,
                                .waited_ms = x->waited_ms + (x->holding ? m->now - x->held_since : 0),
                                .nudges = x->nudges,
                                .entries = x->entries,
                                .notes = x->notes};
    return true;
}

void merge_get_stats(const merge *m, merge_stats *out)
{
    *out = m->stats;
    out->open_txns = m->txn_n;
}

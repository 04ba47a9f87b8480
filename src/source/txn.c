/*
 * txn.c — transactions over several oplog entries: classification, the walk back, the book of open chains (see
 * source/txn.h).
 *
 * NOTES
 * - The walk keeps only OpTimes (16 bytes each): a chain of a thousand 16 MB entries costs 16 kB here. Each entry is
 *   looked up once on the way back (for its prevOpTime); the way forward is the caller's (the reader reads each
 *   entry's ops a window at a time, source/oplog/txn_read.c; replay reads each entry whole, source/dump/dump.c).
 * - The book is a small array: a replica set rarely has more than a few chains open at once.
 */
#include "source/txn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *txn_role_name(txn_role r)
{
    switch (r) {
    case TXN_NONE:
        return "none";
    case TXN_PART:
        return "partialTxn";
    case TXN_PREPARE:
        return "prepare";
    case TXN_COMMIT:
        return "commit";
    case TXN_COMMIT_PREPARED:
        return "commitTransaction";
    case TXN_ABORT:
        return "abortTransaction";
    }
    return "?";
}

#define FNV_OFFSET 14695981039346656037ULL
#define FNV_PRIME  1099511628211ULL

static uint64_t fnv(uint64_t h, const void *data, size_t len)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= FNV_PRIME;
    }
    return h;
}

/* A field into the hash: a tag (which field), then its bytes (binary: the payload; a number: 8 bytes little-endian),
 * so that no two different identities feed the same bytes. */
static uint64_t fnv_field(uint64_t h, char tag, const bson_iter_t *it)
{
    h = fnv(h, &tag, 1);
    if (BSON_ITER_HOLDS_BINARY(it)) {
        bson_subtype_t st;
        uint32_t len;
        const uint8_t *data;
        bson_iter_binary(it, &st, &len, &data);
        h = fnv(h, data, len);
    } else if (BSON_ITER_HOLDS_INT64(it) || BSON_ITER_HOLDS_INT32(it)) {
        uint64_t v = (uint64_t)bson_iter_as_int64(it);
        uint8_t le[8];
        for (int i = 0; i < 8; i++)
            le[i] = (uint8_t)(v >> (8 * i));
        h = fnv(h, le, sizeof le);
    }
    return h;
}

uint64_t txn_key_hash(const bson_iter_t *lsid, const bson_iter_t *txn_number)
{
    uint64_t h = FNV_OFFSET;
    bson_iter_t sub;
    if (lsid && BSON_ITER_HOLDS_DOCUMENT(lsid) && bson_iter_recurse(lsid, &sub)) {
        while (bson_iter_next(&sub)) {
            const char *k = bson_iter_key(&sub);
            if (strcmp(k, "id") == 0)
                h = fnv_field(h, 'i', &sub);
            else if (strcmp(k, "txnNumber") == 0)
                h = fnv_field(h, 'n', &sub);
            else if (strcmp(k, "txnUUID") == 0)
                h = fnv_field(h, 'u', &sub);
        }
    }
    if (txn_number)
        h = fnv_field(h, 'T', txn_number);
    return h;
}

/* prevOpTime {ts: Timestamp, t: long}; the null OpTime (ts 0:0) counts as none. */
static void read_prev(bson_iter_t *it, txn_info *out)
{
    bson_iter_t sub;
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bson_iter_recurse(it, &sub))
        return;
    op_pos p = {.secs = 0, .inc = 0, .term = -1};
    while (bson_iter_next(&sub)) {
        const char *k = bson_iter_key(&sub);
        if (strcmp(k, "ts") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&sub))
            bson_iter_timestamp(&sub, &p.secs, &p.inc);
        else if (strcmp(k, "t") == 0 && (BSON_ITER_HOLDS_INT64(&sub) || BSON_ITER_HOLDS_INT32(&sub)))
            p.term = bson_iter_as_int64(&sub);
    }
    if (p.secs != 0 || p.inc != 0) {
        out->has_prev = true;
        out->prev = p;
    }
}

bool txn_classify(const bson_t *entry, txn_info *out)
{
    bson_iter_t it;
    const uint8_t *o = NULL;
    uint32_t o_len = 0;
    bool has_ts = false, is_c = false, multi = false, from_migrate = false;
    bson_iter_t lsid, txn_number;
    bool has_lsid = false, has_txn_number = false;

    memset(out, 0, sizeof *out);
    out->pos.term = -1;
    if (!bson_iter_init(&it, entry))
        return false;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "ts") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            bson_iter_timestamp(&it, &out->pos.secs, &out->pos.inc);
            has_ts = true;
        } else if (strcmp(k, "t") == 0 && (BSON_ITER_HOLDS_INT64(&it) || BSON_ITER_HOLDS_INT32(&it))) {
            out->pos.term = bson_iter_as_int64(&it);
        } else if (strcmp(k, "op") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            uint32_t len;
            const char *s = bson_iter_utf8(&it, &len);
            is_c = len == 1 && s[0] == 'c';
        } else if (strcmp(k, "o") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_document(&it, &o_len, &o);
        } else if (strcmp(k, "prevOpTime") == 0) {
            read_prev(&it, out);
        } else if (strcmp(k, "multiOpType") == 0) {
            multi = true;
        } else if (strcmp(k, "fromMigrate") == 0) {
            from_migrate = bson_iter_as_bool(&it);
        } else if (strcmp(k, "lsid") == 0) {
            lsid = it;
            has_lsid = true;
        } else if (strcmp(k, "txnNumber") == 0) {
            txn_number = it;
            has_txn_number = true;
        }
    }
    if (!has_ts)
        return false;
    if (!is_c || o == NULL || multi || from_migrate)
        return true;

    bson_iter_t oi;
    if (!bson_iter_init_from_data(&oi, o, o_len) || !bson_iter_next(&oi))
        return true;
    const char *cmd = bson_iter_key(&oi);
    bool keyed = has_lsid || has_txn_number;
    if (strcmp(cmd, "commitTransaction") == 0) {
        out->role = TXN_COMMIT_PREPARED;
        out->has_key = keyed;
        out->key = txn_key_hash(has_lsid ? &lsid : NULL, has_txn_number ? &txn_number : NULL);
        return true;
    }
    if (strcmp(cmd, "abortTransaction") == 0) {
        out->role = TXN_ABORT;
        out->has_key = keyed;
        out->key = txn_key_hash(has_lsid ? &lsid : NULL, has_txn_number ? &txn_number : NULL);
        return true;
    }
    if (strcmp(cmd, "applyOps") != 0)
        return true;
    bool partial = false, prepare = false;
    while (bson_iter_next(&oi)) {
        const char *k = bson_iter_key(&oi);
        if (strcmp(k, "partialTxn") == 0)
            partial = bson_iter_as_bool(&oi);
        else if (strcmp(k, "prepare") == 0)
            prepare = bson_iter_as_bool(&oi);
        else if (strcmp(k, "count") == 0)
            out->has_count = true;
    }
    if (partial)
        out->role = TXN_PART;
    else if (prepare) {
        out->role = TXN_PREPARE;
        out->has_key = keyed;
        out->key = txn_key_hash(has_lsid ? &lsid : NULL, has_txn_number ? &txn_number : NULL);
    } else if (out->has_count || out->has_prev)
        out->role = TXN_COMMIT;
    return true;
}

/* ---- the walk back ---- */

void txn_list_init(txn_list *l)
{
    memset(l, 0, sizeof *l);
}

void txn_list_free(txn_list *l)
{
    free(l->v);
    txn_list_init(l);
}

static bool list_push(txn_list *l, const op_pos *p)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        op_pos *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return false;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *p;
    return true;
}

txn_walk txn_walk_back(const txn_info *commit, txn_lookup_fn lookup, void *ctx, txn_list *list, op_pos *missing,
                       char *err, size_t errlen)
{
    char a[OP_POS_STRLEN], b[OP_POS_STRLEN];
    list->n = 0;
    if (err && errlen)
        err[0] = '\0';
    if (!commit->has_prev) {
        if (commit->role == TXN_COMMIT_PREPARED) {
            snprintf(err, errlen, "commitTransaction at %s has no prevOpTime (the prepare entry)",
                     op_pos_format(&commit->pos, a, sizeof a));
            return TXN_WALK_BAD;
        }
        if (commit->has_count) { /* a server writes count only on the last of two or more entries */
            snprintf(err, errlen, "the applyOps at %s has a count but no prevOpTime (the entry before it)",
                     op_pos_format(&commit->pos, a, sizeof a));
            return TXN_WALK_BAD;
        }
        return TXN_WALK_SINGLE;
    }
    op_pos at = commit->prev, newer = commit->pos;
    bool first_step = true;
    for (;;) {
        if (op_pos_cmp(&at, &newer) >= 0) {
            snprintf(err, errlen, "the entry at %s names %s, not an earlier entry, as its prevOpTime",
                     op_pos_format(&newer, a, sizeof a), op_pos_format(&at, b, sizeof b));
            return TXN_WALK_BAD;
        }
        bson_t doc;
        txn_lookup lr = lookup(ctx, &at, &doc, err, errlen);
        if (lr == TXN_LOOKUP_ERROR)
            return TXN_WALK_ERROR;
        if (lr == TXN_LOOKUP_MISSING) {
            *missing = at;
            return TXN_WALK_LOST;
        }
        txn_info i;
        bool ok = txn_classify(&doc, &i);
        bson_destroy(&doc);
        txn_role want = first_step && commit->role == TXN_COMMIT_PREPARED ? TXN_PREPARE : TXN_PART;
        if (!ok || i.role != want) {
            if (first_step && commit->role == TXN_COMMIT && !commit->has_count)
                return TXN_WALK_SINGLE; /* a prevOpTime of another kind (not a chain) */
            snprintf(err, errlen, "the entry at %s, reached from %s by prevOpTime, is %s, not an applyOps with %s",
                     op_pos_format(&at, a, sizeof a), op_pos_format(&newer, b, sizeof b),
                     ok ? txn_role_name(i.role) : "not an oplog entry", txn_role_name(want));
            return TXN_WALK_BAD;
        }
        if (!list_push(list, &i.pos))
            return TXN_WALK_NOMEM;
        first_step = false;
        if (!i.has_prev)
            break;
        newer = i.pos;
        at = i.prev;
    }
    for (size_t l = 0, r = list->n - 1; l < r; l++, r--) {
        op_pos t = list->v[l];
        list->v[l] = list->v[r];
        list->v[r] = t;
    }
    return TXN_WALK_OK;
}

/* ---- the book ---- */

void txn_book_init(txn_book *b)
{
    memset(b, 0, sizeof *b);
}

void txn_book_free(txn_book *b)
{
    free(b->v);
    txn_book_init(b);
}

static txn_chain *find_last(txn_book *b, const op_pos *last)
{
    for (size_t k = 0; k < b->n; k++)
        if (op_pos_cmp(&b->v[k].last, last) == 0)
            return &b->v[k];
    return NULL;
}

txn_chain *txn_book_note(txn_book *b, const txn_info *i, size_t bytes)
{
    txn_chain *c = i->has_prev ? find_last(b, &i->prev) : NULL;
    if (c == NULL) {
        if (b->n == b->cap) {
            size_t cap = b->cap ? b->cap * 2 : 8;
            txn_chain *v = realloc(b->v, cap * sizeof *v);
            if (!v)
                return NULL;
            b->v = v;
            b->cap = cap;
        }
        c = &b->v[b->n++];
        memset(c, 0, sizeof *c);
        c->first = i->pos;
        c->first_known = !i->has_prev;
    }
    c->last = i->pos;
    c->prepared = i->role == TXN_PREPARE;
    c->key = i->key;
    c->entries++;
    c->bytes += bytes;
    return c;
}

void txn_book_close(txn_book *b, const op_pos *prev)
{
    txn_chain *c = find_last(b, prev);
    if (c == NULL)
        return;
    *c = b->v[--b->n];
}

bool txn_book_oldest(const txn_book *b, op_pos *first)
{
    bool have = false;
    for (size_t k = 0; k < b->n; k++) {
        if (!have || op_pos_cmp(&b->v[k].first, first) < 0)
            *first = b->v[k].first;
        have = true;
    }
    return have;
}

uint64_t txn_book_bytes(const txn_book *b)
{
    uint64_t sum = 0;
    for (size_t k = 0; k < b->n; k++)
        sum += b->v[k].bytes;
    return sum;
}

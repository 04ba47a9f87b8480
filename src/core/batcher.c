/*
 * batcher.c — see batcher.h for the rules.
 *
 * NOTES
 * Pending insert runs are kept in an array of namespaces, found through a hash index (the last one used is checked
 * first; a multi-tenant database may hold thousands of collections), each with its own run (an opaque handle of the
 * sink's, holding the rows already encoded). A run is written when an update or delete of its namespace touches a
 * row it holds (below), when DDL comes (every run), when one more row would take it past batch_bytes (unless the sink
 * lets go of rows already on their way instead: run_let_go), or when the group ends; the order in which the runs of
 * different namespaces reach PostgreSQL does not matter, since they touch different tables and commit together.
 *
 * Per _id, oplog order is kept. Each run remembers the 64-bit hashes of the key texts (op.id_key, which are equal
 * exactly when MongoDB's _id index finds two keys equal) of the rows it holds. An update or delete whose key is not
 * among them touches no row of the run, so it goes to PostgreSQL at once, ahead of the run, and the run grows on:
 * statements on different rows of one table commute inside the group's transaction. Only an op on a key the run
 * holds (or a hash that collides with one: a needless write, never a wrong order) writes the run first ("conflict").
 * A run that took a row without key text (a typed map's rows, or text the sink renders itself), or more keys than its
 * bound (batch_bytes / 16), conflicts with every later op on its namespace, as does an op without key text. So
 * updates of older documents do not cut a stream of inserts into short runs, which would keep it off COPY and cost a
 * network round trip per run.
 */
#include "core/batcher.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"

typedef struct {
    char *db, *coll;
    void *rows;     /* the sink's encoded run */
    uint64_t bytes; /* what the rows it still holds weigh (op_bytes): not yet written, nor let go */
    op_pos last;    /* last entry that added to the run, for error messages */
    /* The key hashes of the rows in the run: open addressing, 0 = empty slot, kcap a power of two or 0. */
    uint64_t *keys;
    size_t nkeys, kcap;
    bool keyless;   /* a row without key text: every later op on the namespace conflicts */
    uint64_t group; /* the group that last wrote to the namespace (batcher.group_no) */
} ns_run;

/* Runs of more namespaces than this give their storage back at each commit (thousands of collections must not each
 * pin a buffer). */
#define KEEP_STORAGE_RUNS 16

/* A resume token's bytes, in storage that grows and is reused (a token is some 100 bytes, one per entry). */
typedef struct token_copy {
    uint8_t *bytes;
    size_t len, cap;
    bool has;
} token_copy;

struct batcher {
    batcher_config cfg;
    batcher_sink out;
    ns_run *runs;
    size_t nruns, cap, hint;
    /* An index of runs by namespace, for thousands of collections: open addressing over the hash of (db, coll);
     * a slot holds a run's position + 1, 0 = empty; icap is a power of two, at least twice nruns. Runs are never
     * removed, so neither are slots. */
    size_t *index, icap;
    uint64_t group_ops;
    uint64_t group_bytes;  /* what the group's runs hold (the sum of their bytes) */
    uint64_t group_no;     /* counts groups (commits and resets), so a run knows whether the open group touched it */
    uint64_t group_tables; /* namespaces written to in the open group, and DDL ops (batch_tables) */
    uint64_t entry_base;   /* group_tables before the last logical entry taken (batcher_entry_tables) */
    bool dirty, have_last;
    bool in_parts;  /* the last entry taken was a part with more to come: no commit now */
    bool no_commit; /* the last entry taken had no_commit (a transaction across sources is open): no commit now */
    bool has_hold;  /* the last entry's hold (op_entry.hold), handed to the sink with each commit */
    op_pos hold;
    uint64_t opened_ms; /* when the open group took its first entry */
    op_pos last;
    batcher_stats stats;
    uint64_t pending_entries, pending_ops[OP_TRUNCATE + 1]; /* taken since the last commit */
    const char *why; /* why the batcher itself refused the last op (the op's refusal text), NULL = the sink did */
    /* Per source (op_entry.source): src as of the last entry taken, src_done as the last commit covered (what
     * batcher_reset brings back); nsrc and nsrc_done of them, room for src_cap in each. */
    batcher_source_pos *src, *src_done;
    size_t nsrc, nsrc_done, src_cap;
    /* The resume token of the last entry taken that had one (op_entry.token), and the one the last commit covered
     * (what batcher_reset brings back): copies, since entries are freed after batcher_add; `has` false: none yet. */
    token_copy tok, tok_done;
};

static const char *const trigger_names[FLUSH_TRIGGERS] = {"conflict", "size",   "timer", "idle",
                                                          "exit",     "per_op", "tables"};

const char *flush_trigger_name(flush_trigger t)
{
    return t < FLUSH_TRIGGERS ? trigger_names[t] : "?";
}

batcher *batcher_new(const batcher_config *cfg, const batcher_sink *out)
{
    batcher *b = calloc(1, sizeof *b);
    if (b == NULL)
        return NULL;
    b->cfg = *cfg;
    b->out = *out;
    b->group_no = 1;
    return b;
}

void batcher_free(batcher *b)
{
    if (b == NULL)
        return;
    for (size_t i = 0; i < b->nruns; i++) {
        free(b->runs[i].db);
        free(b->runs[i].coll);
        free(b->runs[i].keys);
        b->out.run_free(b->out.ctx, b->runs[i].rows);
    }
    free(b->runs);
    free(b->index);
    free(b->src);
    free(b->src_done);
    free(b->tok.bytes);
    free(b->tok_done.bytes);
    free(b);
}

void batcher_set_config(batcher *b, const batcher_config *cfg)
{
    b->cfg = *cfg;
}

/* ---- the key set of a run ---- */

/* 64 bits of a byte string, eight bytes at a step (a multiply-xorshift mix per word, the length folded in, a final
 * avalanche so the low bits index well): every insert of a run and every update or delete is hashed, and a key
 * text is some 30 bytes. */
static uint64_t bytes_hash(const char *p, size_t len, uint64_t seed)
{
    uint64_t h = seed ^ (len * 0x9E3779B97F4A7C15u);
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdu;
        h ^= h >> 32;
        p += 8;
        len -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, len);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53u;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdu;
    h ^= h >> 33;
    return h;
}

static uint64_t key_hash(const char *key, size_t len)
{
    uint64_t h = bytes_hash(key, len, 0x6b65797365656421u);
    return h != 0 ? h : 1;
}

static bool keys_contain(const ns_run *r, uint64_t h)
{
    if (r->kcap == 0)
        return false;
    for (size_t i = h & (r->kcap - 1);; i = (i + 1) & (r->kcap - 1)) {
        if (r->keys[i] == h)
            return true;
        if (r->keys[i] == 0)
            return false;
    }
}

/* Adds h; false when memory runs out or the set would pass max_bytes (the caller then treats the run as keyless:
 * correct, only slower). A run that streams and lets go of its rows (batcher_sink.run_let_go) can grow far past
 * batch_bytes; its key set is what bounds it then. */
static bool keys_add(ns_run *r, uint64_t h, uint64_t max_bytes)
{
    if ((r->nkeys + 1) * 2 > r->kcap) {
        size_t cap = r->kcap ? r->kcap * 2 : 64;
        if (r->kcap > 0 && cap * sizeof *r->keys > max_bytes)
            return false;
        uint64_t *nk = calloc(cap, sizeof *nk);
        if (nk == NULL)
            return false;
        for (size_t j = 0; j < r->kcap; j++) {
            if (r->keys[j] == 0)
                continue;
            size_t i = r->keys[j] & (cap - 1);
            while (nk[i] != 0)
                i = (i + 1) & (cap - 1);
            nk[i] = r->keys[j];
        }
        free(r->keys);
        r->keys = nk;
        r->kcap = cap;
    }
    size_t i = h & (r->kcap - 1);
    while (r->keys[i] != 0) {
        if (r->keys[i] == h)
            return true;
        i = (i + 1) & (r->kcap - 1);
    }
    r->keys[i] = h;
    r->nkeys++;
    return true;
}

static void keys_clear(ns_run *r, bool keep_storage)
{
    if (keep_storage && r->kcap <= 4096) {
        if (r->nkeys > 0)
            memset(r->keys, 0, r->kcap * sizeof *r->keys);
    } else {
        free(r->keys);
        r->keys = NULL;
        r->kcap = 0;
    }
    r->nkeys = 0;
    r->keyless = false;
}

/* Must an op on key (NULL: no key text) write the run first? */
static bool run_conflicts(const batcher *b, const ns_run *r, const op *o)
{
    if (b->out.run_rows(b->out.ctx, r->rows) == 0)
        return false;
    if (r->keyless || o->id_key == NULL)
        return true;
    return keys_contain(r, key_hash(o->id_key, o->id_key_len));
}

static uint64_t ns_hash(const char *db, const char *coll)
{
    /* the database's hash seeds the collection's: db "a.b" + coll "c" differs from "a" + "b.c" */
    return bytes_hash(coll, strlen(coll), bytes_hash(db, strlen(db), 0x6e616d6573706163u));
}

static void index_put(size_t *index, size_t icap, const ns_run *r, size_t pos)
{
    size_t i = ns_hash(r->db, r->coll) & (icap - 1);
    while (index[i] != 0)
        i = (i + 1) & (icap - 1);
    index[i] = pos + 1;
}

/* Makes room for one more run in the index; false when memory runs out. */
static bool index_reserve(batcher *b)
{
    if ((b->nruns + 1) * 2 <= b->icap)
        return true;
    size_t cap = b->icap ? b->icap * 2 : 32;
    size_t *ni = calloc(cap, sizeof *ni);
    if (ni == NULL)
        return false;
    for (size_t k = 0; k < b->nruns; k++)
        index_put(ni, cap, &b->runs[k], k);
    free(b->index);
    b->index = ni;
    b->icap = cap;
    return true;
}

static ns_run *find_run(batcher *b, const char *db, const char *coll)
{
    if (b->hint < b->nruns) {
        ns_run *r = &b->runs[b->hint];
        if (strcmp(r->coll, coll) == 0 && strcmp(r->db, db) == 0)
            return r;
    }
    if (b->icap == 0)
        return NULL;
    for (size_t i = ns_hash(db, coll) & (b->icap - 1); b->index[i] != 0; i = (i + 1) & (b->icap - 1)) {
        ns_run *r = &b->runs[b->index[i] - 1];
        if (strcmp(r->coll, coll) == 0 && strcmp(r->db, db) == 0) {
            b->hint = b->index[i] - 1;
            return r;
        }
    }
    return NULL;
}

static ns_run *get_run(batcher *b, const char *db, const char *coll)
{
    ns_run *r = find_run(b, db, coll);
    if (r != NULL)
        return r;
    if (!index_reserve(b))
        return NULL;
    if (b->nruns == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 8;
        ns_run *nr = realloc(b->runs, cap * sizeof *nr);
        if (nr == NULL)
            return NULL;
        b->runs = nr;
        b->cap = cap;
    }
    r = &b->runs[b->nruns];
    memset(r, 0, sizeof *r);
    r->db = strdup(db);
    r->coll = strdup(coll);
    r->rows = b->out.run_new(b->out.ctx);
    if (r->db == NULL || r->coll == NULL || r->rows == NULL) {
        free(r->db);
        free(r->coll);
        if (r->rows != NULL)
            b->out.run_free(b->out.ctx, r->rows);
        return NULL;
    }
    index_put(b->index, b->icap, r, b->nruns);
    b->hint = b->nruns++;
    return r;
}

static apply_status write_run(batcher *b, ns_run *r, flush_trigger why)
{
    if (b->out.run_rows(b->out.ctx, r->rows) == 0)
        return APPLY_OK;
    apply_status st = b->out.insert_run(b->out.ctx, r->db, r->coll, r->rows, &r->last);
    b->out.run_reset(b->out.ctx, r->rows, b->nruns <= KEEP_STORAGE_RUNS);
    keys_clear(r, b->nruns <= KEEP_STORAGE_RUNS);
    b->group_bytes -= r->bytes;
    r->bytes = 0;
    if (why == FLUSH_CONFLICT)
        b->stats.flushes[FLUSH_CONFLICT]++;
    return st;
}

static apply_status write_all(batcher *b, flush_trigger why)
{
    for (size_t i = 0; i < b->nruns; i++) {
        apply_status st = write_run(b, &b->runs[i], why);
        if (st != APPLY_OK)
            return st;
    }
    return APPLY_OK;
}

/* A namespace written to in the open group: each one costs the group's transaction a lock on its table and on each of
 * its indexes (more when the group creates it), held to the commit; batch_tables bounds how many. */
static void touch(batcher *b, ns_run *r)
{
    if (r->group != b->group_no) {
        r->group = b->group_no;
        b->group_tables++;
    }
}

/* The bytes an op adds to the group: what will be sent for it. */
static uint64_t op_bytes(const op *o)
{
    if (o->mapped != NULL)
        return o->mapped_len; /* a typed map's rows and values: their text is NULL, their payload gone */
    if (o->json != NULL)
        return (uint64_t)o->json_len + (o->id_key ? o->id_key_len : 0);
    return o->doc_len;
}

static apply_status apply_op(batcher *b, op *o)
{
    if (o->refusal != NULL && o->kind != OP_NOOP) {
        char at[OP_POS_STRLEN];
        b->why = o->refusal;
        if (!b->cfg.careful)
            log_warning("%s on %s.%s (oplog entry %s) cannot be written: %s", op_kind_name(o->kind),
                        o->db ? o->db : "?", o->coll ? o->coll : "", op_pos_format(&o->pos, at, sizeof at), o->refusal);
        return APPLY_DATA;
    }
    switch (o->kind) {
    case OP_NOOP:
        return APPLY_OK;
    case OP_INSERT:
        if (o->bucket)
            goto apply_now; /* a time-series bucket: rows made and written by the sink, never a run's */
        {
            ns_run *r = get_run(b, o->db, o->coll);
            if (r == NULL)
                return APPLY_NOMEM;
            touch(b, r);
            /* A run never holds more than batch_bytes plus one row. Before it would, a run whose rows are already on
             * their way (a streaming COPY) lets go of them and grows on; any other is written (no commit). */
            uint64_t w = op_bytes(o);
            if (r->bytes > 0 && r->bytes + w > b->cfg.batch_bytes) {
                if (b->out.run_let_go != NULL && b->out.run_let_go(b->out.ctx, r->rows, &o->pos)) {
                    b->group_bytes -= r->bytes;
                    r->bytes = 0;
                    b->stats.let_go++;
                } else {
                    apply_status st = write_run(b, r, FLUSH_SIZE);
                    if (st != APPLY_OK)
                        return st;
                }
            }
            /* The key first: the sink may take the op's texts. */
            if (!r->keyless &&
                (o->id_key == NULL || !keys_add(r, key_hash(o->id_key, o->id_key_len), b->cfg.batch_bytes / 16)))
                r->keyless = true;
            apply_status st = b->out.run_add(b->out.ctx, r->rows, o);
            if (st != APPLY_OK)
                return st;
            r->last = o->pos;
            r->bytes += w;
            b->group_bytes += w;
            return APPLY_OK;
        }
    case OP_UPDATE:
    case OP_DELETE:
    apply_now : {
        ns_run *r = get_run(b, o->db, o->coll); /* a run (empty) even without inserts: it counts the namespace */
        if (r == NULL)
            return APPLY_NOMEM;
        touch(b, r);
        if (run_conflicts(b, r, o)) {
            apply_status st = write_run(b, r, FLUSH_CONFLICT);
            if (st != APPLY_OK)
                return st;
        } else if (b->out.run_rows(b->out.ctx, r->rows) > 0) {
            b->stats.commuted++;
        }
        return b->out.apply(b->out.ctx, o); /* sent at once: the group does not hold it */
    }
    default: {
        /* DDL: everything pending first, so no row lands in a table that is about to change. */
        for (size_t i = 0; i < b->nruns; i++) {
            apply_status st = write_run(b, &b->runs[i], FLUSH_CONFLICT);
            if (st != APPLY_OK)
                return st;
        }
        return b->out.apply(b->out.ctx, o); /* counted toward batch_tables by count_tables */
    }
    }
}

/* Careful mode: the op (a write or DDL) applied at once inside a guard; refused as data, it is set aside instead. */
static apply_status apply_guarded(batcher *b, op *o)
{
    apply_status st = b->out.guard_begin(b->out.ctx);
    if (st != APPLY_OK)
        return st;
    b->why = NULL;
    st = apply_op(b, o);
    if (st == APPLY_OK && o->kind == OP_INSERT) {
        ns_run *r = find_run(b, o->db, o->coll);
        if (r != NULL)
            st = write_run(b, r, FLUSH_PER_OP);
    }
    if (st == APPLY_DATA) {
        st = b->out.dead_letter(b->out.ctx, o, b->why);
        if (st == APPLY_OK)
            b->stats.dead_letters++;
        return st;
    }
    if (st != APPLY_OK)
        return st;
    return b->out.guard_end(b->out.ctx);
}

/* Room for len bytes in dst, its token kept; false when out of memory. */
static bool token_reserve(token_copy *dst, size_t len)
{
    if (len <= dst->cap)
        return true;
    uint8_t *p = realloc(dst->bytes, len);
    if (p == NULL)
        return false;
    dst->bytes = p;
    dst->cap = len;
    return true;
}

/* dst := the token (tok, len); false when out of memory (dst unchanged). Never fails when token_reserve(dst, len)
 * did. */
static bool token_put(token_copy *dst, const uint8_t *tok, size_t len)
{
    if (!token_reserve(dst, len))
        return false;
    if (len > 0)
        memcpy(dst->bytes, tok, len);
    dst->len = len;
    dst->has = true;
    return true;
}

/* dst := src, or none when src has none. */
static bool token_copy_from(token_copy *dst, const token_copy *src)
{
    if (!src->has) {
        dst->has = false;
        dst->len = 0;
        return true;
    }
    return token_put(dst, src->bytes, src->len);
}

/* Makes room for source s in both per-source arrays (new slots zeroed); false when memory runs out. */
static bool sources_reserve(batcher *b, size_t s)
{
    if (s < b->src_cap)
        return true;
    size_t cap = b->src_cap ? b->src_cap : 4;
    while (cap <= s)
        cap *= 2;
    batcher_source_pos *a = realloc(b->src, cap * sizeof *a);
    if (a == NULL)
        return false;
    b->src = a;
    a = realloc(b->src_done, cap * sizeof *a);
    if (a == NULL)
        return false; /* src is larger, src_cap is not: the next call reallocates src to the same size, harmless */
    b->src_done = a;
    memset(b->src + b->src_cap, 0, (cap - b->src_cap) * sizeof *b->src);
    memset(b->src_done + b->src_cap, 0, (cap - b->src_cap) * sizeof *b->src_done);
    b->src_cap = cap;
    return true;
}

apply_status batcher_flush(batcher *b, flush_trigger why)
{
    if (!b->dirty || b->in_parts || b->no_commit)
        return APPLY_OK; /* in the middle of a logical entry, or of a transaction across sources: its end commits */
    apply_status st = write_all(b, why);
    if (st == APPLY_OK && b->out.set_hold != NULL)
        b->out.set_hold(b->out.ctx, b->has_hold ? &b->hold : NULL);
    if (st == APPLY_OK && b->out.set_sources != NULL && b->nsrc > 0)
        b->out.set_sources(b->out.ctx, b->src, b->nsrc);
    if (st == APPLY_OK && b->out.set_token != NULL)
        b->out.set_token(b->out.ctx, b->tok.has ? b->tok.bytes : NULL, b->tok.has ? b->tok.len : 0);
    /* Room for the committed token before the commit: once the commit is in, its copy cannot fail. */
    if (st == APPLY_OK && !token_reserve(&b->tok_done, b->tok.len))
        st = APPLY_NOMEM;
    if (st == APPLY_OK)
        st = b->out.commit(b->out.ctx, &b->last);
    if (st != APPLY_OK)
        return st;
    (void)token_copy_from(&b->tok_done, &b->tok); /* its room was made above */
    for (size_t i = 0; i < b->nsrc; i++)
        b->src[i].moved = false;
    if (b->nsrc > 0)
        memcpy(b->src_done, b->src, b->nsrc * sizeof *b->src);
    b->nsrc_done = b->nsrc;
    b->stats.flushes[why]++;
    b->stats.commits++;
    b->stats.committed = b->last;
    b->stats.committed_entries += b->pending_entries;
    for (size_t k = 0; k <= OP_TRUNCATE; k++)
        b->stats.committed_ops[k] += b->pending_ops[k];
    b->pending_entries = 0;
    memset(b->pending_ops, 0, sizeof b->pending_ops);
    b->dirty = false;
    b->group_ops = b->group_bytes = b->group_tables = b->entry_base = 0;
    b->group_no++;
    return APPLY_OK;
}

/* The tables of a part of an entry, counted toward batch_tables before any of its ops is sent: should the group fail,
 * batcher_group_tables and batcher_entry_tables then count the whole entry taken last, not the ops that happened to
 * be sent before the failure showed. */
static apply_status count_tables(batcher *b, const op_entry *e)
{
    for (size_t i = 0; i < e->n; i++) {
        const op *o = &e->ops[i];
        if (o->kind == OP_NOOP || o->refusal != NULL)
            continue;
        if (o->kind == OP_INSERT || o->kind == OP_UPDATE || o->kind == OP_DELETE) {
            ns_run *r = get_run(b, o->db, o->coll);
            if (r == NULL)
                return APPLY_NOMEM;
            touch(b, r);
        } else {
            b->group_tables += BATCHER_DDL_TABLES;
        }
    }
    return APPLY_OK;
}

apply_status batcher_add(batcher *b, op_entry *e, uint64_t now_ms)
{
    if (!b->dirty)
        b->opened_ms = now_ms;
    if (!b->in_parts)
        b->entry_base = b->group_tables; /* a logical entry begins */
    if (!sources_reserve(b, e->source))
        return APPLY_NOMEM;
    apply_status counted = count_tables(b, e);
    if (counted != APPLY_OK)
        return counted;
    for (size_t i = 0; i < e->n; i++) {
        op *o = &e->ops[i];
        bool guarded = b->cfg.careful && b->out.dead_letter != NULL && o->kind != OP_NOOP;
        apply_status st = guarded ? apply_guarded(b, o) : apply_op(b, o);
        if (st != APPLY_OK)
            return st;
        b->stats.ops[o->kind]++;
        b->pending_ops[o->kind]++;
        if (o->kind != OP_NOOP)
            b->group_ops++;
    }
    if (!e->more) { /* a logical entry counts once, at its last part */
        b->stats.entries++;
        b->pending_entries++;
    }
    if (e->token != NULL && !token_put(&b->tok, e->token, e->token_len))
        return APPLY_NOMEM;
    b->last = e->pos;
    b->have_last = true;
    b->dirty = true;
    b->has_hold = e->has_hold;
    b->hold = e->hold;
    b->in_parts = e->more;
    b->no_commit = e->no_commit;
    batcher_source_pos *sp = &b->src[e->source];
    sp->pos = e->pos;
    sp->has_hold = e->has_hold;
    sp->hold = e->hold;
    sp->moved = true;
    if (e->source >= b->nsrc)
        b->nsrc = (size_t)e->source + 1;

    if (b->in_parts || b->no_commit)
        return APPLY_OK;
    if (b->cfg.per_op || b->cfg.careful)
        return batcher_flush(b, FLUSH_PER_OP);
    if (b->group_ops >= b->cfg.batch_rows || b->group_bytes >= b->cfg.batch_bytes)
        return batcher_flush(b, FLUSH_SIZE);
    if (b->cfg.batch_tables > 0 && b->group_tables >= b->cfg.batch_tables)
        return batcher_flush(b, FLUSH_TABLES);
    return APPLY_OK;
}

uint64_t batcher_deadline(const batcher *b, bool behind)
{
    if (!b->dirty || b->in_parts || b->no_commit)
        return UINT64_MAX;
    uint64_t age = b->cfg.flush_interval_ms;
    if (behind && b->cfg.catchup_interval_ms > age)
        age = b->cfg.catchup_interval_ms;
    return b->opened_ms + age;
}

apply_status batcher_tick(batcher *b, uint64_t now_ms, bool behind)
{
    if (b->dirty && now_ms >= batcher_deadline(b, behind))
        return batcher_flush(b, FLUSH_TIMER);
    return APPLY_OK;
}

void batcher_reset(batcher *b)
{
    for (size_t i = 0; i < b->nruns; i++) {
        b->out.run_reset(b->out.ctx, b->runs[i].rows, false);
        keys_clear(&b->runs[i], false);
        b->runs[i].bytes = 0;
    }
    b->dirty = false;
    b->in_parts = false;
    b->no_commit = false;
    b->group_ops = b->group_bytes = b->group_tables = b->entry_base = 0;
    b->group_no++;
    b->last = b->stats.committed;
    /* the failed group's sources are forgotten: back to what the last commit covered */
    if (b->src_cap > 0) {
        memcpy(b->src, b->src_done, b->src_cap * sizeof *b->src);
    }
    b->nsrc = b->nsrc_done;
    /* cannot fail: tok's storage is at least as large as any token taken, the committed one included */
    (void)token_copy_from(&b->tok, &b->tok_done);
    b->pending_entries = 0;
    memset(b->pending_ops, 0, sizeof b->pending_ops);
}

bool batcher_dirty(const batcher *b)
{
    return b->dirty;
}

bool batcher_in_parts(const batcher *b)
{
    return b->in_parts;
}

bool batcher_commit_held(const batcher *b)
{
    return b->in_parts || b->no_commit;
}

const batcher_source_pos *batcher_sources(const batcher *b, size_t *n)
{
    *n = b->nsrc;
    return b->src;
}

const uint8_t *batcher_token(const batcher *b, size_t *len)
{
    *len = b->tok.has ? b->tok.len : 0;
    return b->tok.has ? b->tok.bytes : NULL;
}

const op_pos *batcher_last(const batcher *b)
{
    return &b->last;
}

const batcher_stats *batcher_get_stats(const batcher *b)
{
    return &b->stats;
}

uint64_t batcher_group_tables(const batcher *b)
{
    return b->group_tables;
}

uint64_t batcher_entry_tables(const batcher *b)
{
    return b->group_tables - b->entry_base;
}

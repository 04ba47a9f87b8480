/*
 * workload.c — the seeded MongoDB write workload (see workload.h).
 *
 * NOTES
 * Determinism: every choice comes from one splitmix64 stream seeded by cfg->seed, and nothing the server answers
 * feeds back into generation, so a dry run and a real run with the same config produce the same operations and the
 * same op_hash. ObjectIds are derived from (namespace slot, per-slot counter), never from the clock.
 *
 * Valid updates without reading documents back: documents keep a fixed skeleton — "arr" and "tags" are always
 * arrays (never unset, never $set to a non-array), "sub" and "sub.b" are objects or absent, "n" is an int32 or
 * absent, "f" a double — so every generated $set / $unset / $inc / $push path is legal on every live document.
 */
#include "workload.h"

#include <mongoc/mongoc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ID_OID, ID_INT, ID_STR };

typedef struct {
    uint8_t type;
    uint32_t n;
} wl_id;

typedef struct {
    char db[96];
    char coll[96];
    bool exists;
    wl_id *live;
    size_t n_live, cap_live;
    uint32_t next_id;
    unsigned renames;
    mongoc_collection_t *mcoll;
    mongoc_bulk_operation_t *bulk;
    unsigned pending;
} wl_ns;

typedef struct {
    const workload_config *cfg;
    uint64_t rng;
    mongoc_client_t *client;
    wl_ns *ns;
    int n_ns;
    workload_stats *st;
    uint64_t op_index;
    char *pad;
    char *err;
    size_t errlen;
} wl_state;

void workload_config_init(workload_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->seed = 1;
    cfg->ops = 10000;
    cfg->db_prefix = "wl_";
    cfg->n_databases = 2;
    cfg->n_namespaces = 6;
    cfg->mode = WORKLOAD_MIXED;
    cfg->w_insert = 450;
    cfg->w_update = 350;
    cfg->w_replace = 80;
    cfg->w_delete = 119;
    cfg->w_ddl = 1;
    cfg->inserts_per_update = 10;
    cfg->batch_size = 500;
}

static void set_err(wl_state *s, const char *fmt, ...) BSON_GNUC_PRINTF(2, 3);
static void set_err(wl_state *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, s->errlen, fmt, ap);
    va_end(ap);
}

/* ---- PRNG (splitmix64) and hashing ---- */

static uint64_t rnd(wl_state *s)
{
    uint64_t z = (s->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint32_t below(wl_state *s, uint32_t n)
{
    return n ? (uint32_t)(rnd(s) % n) : 0;
}

static void hash_bytes(wl_state *s, const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = s->st->op_hash;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001B3ull;
    }
    s->st->op_hash = h;
}

static void hash_op(wl_state *s, char kind, int slot, const bson_t *a, const bson_t *b)
{
    hash_bytes(s, &kind, 1);
    uint32_t sl = (uint32_t)slot;
    hash_bytes(s, &sl, sizeof sl);
    hash_bytes(s, s->ns[slot].coll, strlen(s->ns[slot].coll) + 1);
    if (a)
        hash_bytes(s, bson_get_data(a), a->len);
    if (b)
        hash_bytes(s, bson_get_data(b), b->len);
}

/* ---- values ---- */

static void random_string(wl_state *s, char *buf, size_t cap)
{
    static const char *const pieces[] = {"a",
                                         "b",
                                         "c",
                                         "x",
                                         "y",
                                         "z",
                                         "0",
                                         "7",
                                         " ",
                                         "-",
                                         "_",
                                         "\"",
                                         "\\",
                                         "/",
                                         "\t",
                                         "\n",
                                         "\xc3\xa9" /* é */,
                                         "\xe6\x97\xa5" /* 日 */,
                                         "\xf0\x9f\x98\x80" /* 😀 */,
                                         "{",
                                         "}",
                                         "$",
                                         ".",
                                         "'"};
    size_t len = 0, want = below(s, 24);
    buf[0] = '\0';
    for (size_t i = 0; i < want; i++) {
        const char *p = pieces[below(s, sizeof pieces / sizeof pieces[0])];
        size_t pl = strlen(p);
        if (len + pl + 1 > cap)
            break;
        memcpy(buf + len, p, pl + 1);
        len += pl;
    }
}

static void make_oid(uint32_t hi, uint32_t slot, uint32_t n, bson_oid_t *oid)
{
    uint8_t *b = oid->bytes;
    b[0] = (uint8_t)(hi >> 24);
    b[1] = (uint8_t)(hi >> 16);
    b[2] = (uint8_t)(hi >> 8);
    b[3] = (uint8_t)hi;
    b[4] = (uint8_t)slot;
    b[5] = 0x5a;
    b[6] = 0xa5;
    b[7] = (uint8_t)(slot >> 8);
    b[8] = (uint8_t)(n >> 24);
    b[9] = (uint8_t)(n >> 16);
    b[10] = (uint8_t)(n >> 8);
    b[11] = (uint8_t)n;
}

static int64_t random_date(wl_state *s)
{
    /* Mostly 1970..2100 (relaxed JSON writes an ISO string), sometimes before 1970 ($numberLong form). */
    if (below(s, 10) == 0)
        return -(int64_t)(rnd(s) % 2208988800000ull);
    return (int64_t)(rnd(s) % 4102444800000ull);
}

static double random_double(wl_state *s)
{
    switch (below(s, 8)) {
    case 0:
        return (double)((int32_t)below(s, 2000) - 1000); /* integral */
    case 1:
        return ((double)(rnd(s) >> 11) / 9007199254740992.0) * 1e300;
    case 2:
        return ((double)(rnd(s) >> 11) / 9007199254740992.0) * 1e-300;
    case 3:
        return -0.5 * below(s, 100);
    default:
        return ((double)(rnd(s) >> 11) / 9007199254740992.0) * 1000.0 - 500.0;
    }
}

static void append_value(wl_state *s, bson_t *b, const char *key, int depth);

static void append_scalar(wl_state *s, bson_t *b, const char *key)
{
    char buf[128];
    bson_oid_t oid;
    switch (below(s, 9)) {
    case 0:
        BSON_APPEND_INT32(b, key, (int32_t)(rnd(s) & 0xffffffffu));
        break;
    case 1:
        BSON_APPEND_INT64(b, key, (int64_t)rnd(s));
        break;
    case 2:
        BSON_APPEND_DOUBLE(b, key, random_double(s));
        break;
    case 3:
        random_string(s, buf, sizeof buf);
        BSON_APPEND_UTF8(b, key, buf);
        break;
    case 4:
        BSON_APPEND_BOOL(b, key, below(s, 2));
        break;
    case 5:
        BSON_APPEND_NULL(b, key);
        break;
    case 6:
        make_oid((uint32_t)rnd(s), 0xfff, (uint32_t)rnd(s), &oid);
        BSON_APPEND_OID(b, key, &oid);
        break;
    case 7:
        BSON_APPEND_DATE_TIME(b, key, random_date(s));
        break;
    default:
        BSON_APPEND_INT32(b, key, (int32_t)below(s, 100));
        break;
    }
}

static void append_value(wl_state *s, bson_t *b, const char *key, int depth)
{
    uint32_t k = below(s, depth < 2 ? 12 : 9);
    if (k < 9) {
        append_scalar(s, b, key);
    } else if (k < 11) {
        bson_t child;
        BSON_APPEND_DOCUMENT_BEGIN(b, key, &child);
        uint32_t n = below(s, 4);
        for (uint32_t i = 0; i < n; i++) {
            char kb[16];
            snprintf(kb, sizeof kb, "k%u", i);
            append_value(s, &child, kb, depth + 1);
        }
        bson_append_document_end(b, &child);
    } else {
        bson_t child;
        BSON_APPEND_ARRAY_BEGIN(b, key, &child);
        uint32_t n = below(s, 4);
        for (uint32_t i = 0; i < n; i++) {
            char kb[16];
            snprintf(kb, sizeof kb, "%u", i);
            append_value(s, &child, kb, depth + 1);
        }
        bson_append_array_end(b, &child);
    }
}

static void append_id(wl_state *s, bson_t *b, int slot, wl_id id)
{
    char buf[32];
    bson_oid_t oid;
    switch (id.type) {
    case ID_OID:
        make_oid(0x64000000u + id.n, (uint32_t)slot, id.n, &oid);
        BSON_APPEND_OID(b, "_id", &oid);
        break;
    case ID_INT:
        BSON_APPEND_INT32(b, "_id", (int32_t)id.n);
        break;
    default:
        snprintf(buf, sizeof buf, "s%u-%u", (unsigned)slot, id.n);
        BSON_APPEND_UTF8(b, "_id", buf);
        break;
    }
}

/* A full document of the skeleton described in NOTES. */
static void build_doc(wl_state *s, int slot, wl_id id, bson_t *doc)
{
    char buf[128];
    bson_oid_t oid;
    bson_t child, sub, subb;

    append_id(s, doc, slot, id);
    BSON_APPEND_INT64(doc, "seq", (int64_t)s->op_index);
    BSON_APPEND_INT32(doc, "n", (int32_t)below(s, 2001) - 1000);
    random_string(s, buf, sizeof buf);
    BSON_APPEND_UTF8(doc, "s", buf);
    BSON_APPEND_DOUBLE(doc, "f", random_double(s));
    BSON_APPEND_INT64(doc, "big", (int64_t)(rnd(s) >> below(s, 40)));
    BSON_APPEND_BOOL(doc, "flag", below(s, 2));
    if (below(s, 2))
        BSON_APPEND_NULL(doc, "nil");
    make_oid((uint32_t)rnd(s), (uint32_t)slot, (uint32_t)rnd(s), &oid);
    BSON_APPEND_OID(doc, "oid", &oid);
    BSON_APPEND_DATE_TIME(doc, "at", random_date(s));

    BSON_APPEND_ARRAY_BEGIN(doc, "tags", &child);
    uint32_t nt = below(s, 5);
    for (uint32_t i = 0; i < nt; i++) {
        char kb[16];
        snprintf(kb, sizeof kb, "%u", i);
        random_string(s, buf, sizeof buf);
        BSON_APPEND_UTF8(&child, kb, buf);
    }
    bson_append_array_end(doc, &child);

    BSON_APPEND_ARRAY_BEGIN(doc, "arr", &child);
    uint32_t na = 2 + below(s, 5);
    for (uint32_t i = 0; i < na; i++) {
        char kb[16];
        snprintf(kb, sizeof kb, "%u", i);
        append_value(s, &child, kb, 1);
    }
    bson_append_array_end(doc, &child);

    BSON_APPEND_DOCUMENT_BEGIN(doc, "sub", &sub);
    append_scalar(s, &sub, "a");
    BSON_APPEND_DOCUMENT_BEGIN(&sub, "b", &subb);
    random_string(s, buf, sizeof buf);
    BSON_APPEND_UTF8(&subb, "c", buf);
    BSON_APPEND_ARRAY_BEGIN(&subb, "d", &child);
    uint32_t nd = below(s, 4);
    for (uint32_t i = 0; i < nd; i++) {
        char kb[16];
        snprintf(kb, sizeof kb, "%u", i);
        BSON_APPEND_INT32(&child, kb, (int32_t)below(s, 1000));
    }
    bson_append_array_end(&subb, &child);
    bson_append_document_end(&sub, &subb);
    BSON_APPEND_DATE_TIME(&sub, "t", random_date(s));
    bson_append_document_end(doc, &sub);

    uint32_t nx = below(s, 4);
    for (uint32_t i = 0; i < nx; i++) {
        char kb[16];
        snprintf(kb, sizeof kb, "x%u", below(s, 4));
        if (!bson_has_field(doc, kb))
            append_value(s, doc, kb, 0);
    }
    if (s->pad)
        BSON_APPEND_UTF8(doc, "pad", s->pad);
}

/* An update document ($set / $unset / $inc / $push) legal on any document of the skeleton. */
static void build_update(wl_state *s, bson_t *upd)
{
    static const char *const set_paths[] = {"s",      "sub.a", "sub.b.c", "sub.b.d.1", "x0",    "x1",       "sub.new",
                                            "tags.0", "arr.0", "arr.1",   "arr.3",     "arr.7", "sub.b.e.f"};
    static const char *const unset_paths[] = {"s",  "sub.a", "sub.b.c", "sub.b", "sub", "x0", "x1",
                                              "x2", "nil",   "flag",    "oid",   "at",  "big"};
    bson_t op, each;
    char buf[128];
    uint32_t k = below(s, 10);
    if (k <= 3) {
        BSON_APPEND_DOCUMENT_BEGIN(upd, "$set", &op);
        const char *p1 = set_paths[below(s, sizeof set_paths / sizeof set_paths[0])];
        if (strcmp(p1, "tags.0") == 0) {
            random_string(s, buf, sizeof buf);
            BSON_APPEND_UTF8(&op, p1, buf);
        } else {
            append_value(s, &op, p1, 0);
        }
        if (k == 3)
            BSON_APPEND_INT32(&op, "n", (int32_t)below(s, 2001) - 1000);
        bson_append_document_end(upd, &op);
    } else if (k == 4) {
        BSON_APPEND_DOCUMENT_BEGIN(upd, "$unset", &op);
        /* (the BSON_APPEND_* macros evaluate the key twice: pick it first) */
        const char *path = unset_paths[below(s, sizeof unset_paths / sizeof unset_paths[0])];
        BSON_APPEND_UTF8(&op, path, "");
        bson_append_document_end(upd, &op);
    } else if (k <= 6) {
        BSON_APPEND_DOCUMENT_BEGIN(upd, "$inc", &op);
        switch (below(s, 3)) {
        case 0:
            BSON_APPEND_INT32(&op, "n", (int32_t)below(s, 201) - 100);
            break;
        case 1:
            BSON_APPEND_DOUBLE(&op, "f", 0.25 * below(s, 9));
            break;
        default:
            BSON_APPEND_INT64(&op, "cnt", (int64_t)below(s, 50) + 1);
            break;
        }
        bson_append_document_end(upd, &op);
    } else if (k <= 8) {
        BSON_APPEND_DOCUMENT_BEGIN(upd, "$push", &op);
        if (below(s, 2)) {
            if (below(s, 3) == 0) {
                BSON_APPEND_DOCUMENT_BEGIN(&op, "arr", &each);
                bson_t arr;
                BSON_APPEND_ARRAY_BEGIN(&each, "$each", &arr);
                uint32_t n = 1 + below(s, 3);
                for (uint32_t i = 0; i < n; i++) {
                    char kb[16];
                    snprintf(kb, sizeof kb, "%u", i);
                    append_value(s, &arr, kb, 1);
                }
                bson_append_array_end(&each, &arr);
                bson_append_document_end(&op, &each);
            } else {
                append_value(s, &op, "arr", 1);
            }
        } else {
            random_string(s, buf, sizeof buf);
            BSON_APPEND_UTF8(&op, "tags", buf);
        }
        bson_append_document_end(upd, &op);
    } else {
        BSON_APPEND_DOCUMENT_BEGIN(upd, "$set", &op);
        random_string(s, buf, sizeof buf);
        BSON_APPEND_UTF8(&op, "s", buf);
        BSON_APPEND_INT64(&op, "seq", (int64_t)s->op_index);
        bson_append_document_end(upd, &op);
        BSON_APPEND_DOCUMENT_BEGIN(upd, "$inc", &op);
        BSON_APPEND_INT32(&op, "n", 1);
        bson_append_document_end(upd, &op);
    }
}

/* ---- sending ---- */

static bool ensure_bulk(wl_state *s, wl_ns *ns)
{
    if (s->cfg->dry_run || ns->bulk)
        return true;
    if (!ns->mcoll)
        ns->mcoll = mongoc_client_get_collection(s->client, ns->db, ns->coll);
    ns->bulk = mongoc_collection_create_bulk_operation_with_opts(ns->mcoll, NULL);
    return ns->bulk != NULL;
}

static bool flush_ns(wl_state *s, wl_ns *ns)
{
    if (!ns->bulk)
        return true;
    bson_error_t e;
    bson_t reply;
    uint32_t ok = mongoc_bulk_operation_execute(ns->bulk, &reply, &e);
    if (!ok) {
        char *js = bson_as_relaxed_extended_json(&reply, NULL);
        set_err(s, "workload: bulk of %u writes on %s.%s (before op %llu) failed: %s; reply %s", ns->pending, ns->db,
                ns->coll, (unsigned long long)s->op_index, e.message, js ? js : "?");
        bson_free(js);
    }
    bson_destroy(&reply);
    mongoc_bulk_operation_destroy(ns->bulk);
    ns->bulk = NULL;
    ns->pending = 0;
    s->st->bulks++;
    return ok != 0;
}

static bool after_add(wl_state *s, wl_ns *ns)
{
    ns->pending++;
    if (ns->pending >= s->cfg->batch_size)
        return flush_ns(s, ns);
    return true;
}

static void live_push(wl_ns *ns, wl_id id)
{
    if (ns->n_live == ns->cap_live) {
        ns->cap_live = ns->cap_live ? ns->cap_live * 2 : 256;
        ns->live = bson_realloc(ns->live, ns->cap_live * sizeof *ns->live);
    }
    ns->live[ns->n_live++] = id;
}

static bool do_insert(wl_state *s, int slot)
{
    wl_ns *ns = &s->ns[slot];
    wl_id id = {.type = (uint8_t)below(s, 3), .n = ns->next_id++};
    bson_t doc = BSON_INITIALIZER;
    bson_error_t e;
    bool ok = true;
    build_doc(s, slot, id, &doc);
    hash_op(s, 'i', slot, &doc, NULL);
    if (!s->cfg->dry_run) {
        ok = ensure_bulk(s, ns) && mongoc_bulk_operation_insert_with_opts(ns->bulk, &doc, NULL, &e);
        if (!ok)
            set_err(s, "workload: queueing insert %llu into %s.%s: %s", (unsigned long long)s->op_index, ns->db,
                    ns->coll, ns->bulk ? e.message : "no bulk");
        else
            ok = after_add(s, ns);
    }
    bson_destroy(&doc);
    live_push(ns, id);
    ns->exists = true;
    s->st->inserts++;
    return ok;
}

/* kind: 'u' update, 'r' replace, 'd' delete. The slot must have a live document. */
static bool do_write_existing(wl_state *s, int slot, char kind)
{
    wl_ns *ns = &s->ns[slot];
    size_t idx = below(s, (uint32_t)ns->n_live);
    wl_id id = ns->live[idx];
    bson_t sel = BSON_INITIALIZER, body = BSON_INITIALIZER;
    bson_error_t e;
    bool ok = true;

    append_id(s, &sel, slot, id);
    if (kind == 'u')
        build_update(s, &body);
    else if (kind == 'r')
        build_doc(s, slot, id, &body);
    hash_op(s, kind, slot, &sel, kind == 'd' ? NULL : &body);

    if (!s->cfg->dry_run) {
        ok = ensure_bulk(s, ns);
        if (ok) {
            if (kind == 'u')
                ok = mongoc_bulk_operation_update_one_with_opts(ns->bulk, &sel, &body, NULL, &e);
            else if (kind == 'r')
                ok = mongoc_bulk_operation_replace_one_with_opts(ns->bulk, &sel, &body, NULL, &e);
            else
                ok = mongoc_bulk_operation_remove_one_with_opts(ns->bulk, &sel, NULL, &e);
        }
        if (!ok)
            set_err(s, "workload: queueing %c op %llu on %s.%s: %s", kind, (unsigned long long)s->op_index, ns->db,
                    ns->coll, ns->bulk ? e.message : "no bulk");
        else
            ok = after_add(s, ns);
    }
    bson_destroy(&sel);
    bson_destroy(&body);
    if (kind == 'd') {
        ns->live[idx] = ns->live[--ns->n_live];
        s->st->deletes++;
    } else if (kind == 'u') {
        s->st->updates++;
    } else {
        s->st->replaces++;
    }
    return ok;
}

/* DDL on one slot. A slot that does not exist is created; an existing one is renamed to a new name (half the
 * time), dropped (a quarter) or dropped and explicitly re-created empty (a quarter; counted as a drop and a create). */
static bool do_ddl(wl_state *s, int slot)
{
    wl_ns *ns = &s->ns[slot];
    bson_error_t e;
    char kind, newname[96] = "";
    const char *what = "";

    if (!ns->exists) {
        kind = 'c';
    } else {
        uint32_t k = below(s, 4);
        kind = k < 2 ? 'R' : k == 2 ? 'D' : 'C';
    }
    if (kind == 'R')
        snprintf(newname, sizeof newname, "c%d_r%u", slot, ++ns->renames);

    bson_t h = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&h, "ddl", newname);
    hash_op(s, kind, slot, &h, NULL);
    bson_destroy(&h);

    if (!s->cfg->dry_run) {
        bool ok = flush_ns(s, ns);
        if (!ok)
            return false;
        if (!ns->mcoll)
            ns->mcoll = mongoc_client_get_collection(s->client, ns->db, ns->coll);
        if (kind == 'R') {
            what = "rename";
            ok = mongoc_collection_rename(ns->mcoll, ns->db, newname, false, &e);
        }
        if (kind == 'D' || kind == 'C') {
            what = "drop";
            ok = mongoc_collection_drop(ns->mcoll, &e);
        }
        if (ok && (kind == 'c' || kind == 'C')) {
            what = "create";
            mongoc_database_t *db = mongoc_client_get_database(s->client, ns->db);
            mongoc_collection_t *c = mongoc_database_create_collection(db, ns->coll, NULL, &e);
            ok = c != NULL;
            if (c)
                mongoc_collection_destroy(c);
            mongoc_database_destroy(db);
        }
        if (!ok) {
            set_err(s, "workload: %s of %s.%s (op %llu) failed: %s", what, ns->db, ns->coll,
                    (unsigned long long)s->op_index, e.message);
            return false;
        }
    }
    if (kind == 'D' || kind == 'C') {
        ns->exists = false;
        ns->n_live = 0;
        s->st->drops++;
    }
    if (kind == 'c' || kind == 'C') {
        ns->exists = true;
        s->st->creates++;
    }
    if (kind == 'R') {
        snprintf(ns->coll, sizeof ns->coll, "%s", newname);
        s->st->renames++;
    }
    if (ns->mcoll) {
        mongoc_collection_destroy(ns->mcoll); /* its name may be stale now */
        ns->mcoll = NULL;
    }
    return true;
}

static bool flush_all(wl_state *s)
{
    for (int i = 0; i < s->n_ns; i++) {
        if (!flush_ns(s, &s->ns[i]))
            return false;
    }
    return true;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A paced run, at a tick: what is pending goes out, then a sleep until the op at hand is due. */
static bool pace(wl_state *s, double t0)
{
    if (!flush_all(s))
        return false;
    double due = t0 + (double)s->op_index / s->cfg->rate, now = mono_s();
    if (due > now) {
        struct timespec ts = {.tv_sec = (time_t)(due - now),
                              .tv_nsec = (long)((due - now - (double)(time_t)(due - now)) * 1e9)};
        nanosleep(&ts, NULL);
    } else if (now - due > s->st->behind_max) {
        s->st->behind_max = now - due;
    }
    return true;
}

static bool mixed_step(wl_state *s)
{
    const workload_config *c = s->cfg;
    int slot = (int)below(s, (uint32_t)s->n_ns);
    uint32_t total = c->w_insert + c->w_update + c->w_replace + c->w_delete + c->w_ddl;
    uint32_t r = below(s, total);
    if (r < c->w_insert)
        return do_insert(s, slot);
    r -= c->w_insert;
    bool has_live = s->ns[slot].n_live > 0;
    if (r < c->w_update)
        return has_live ? do_write_existing(s, slot, 'u') : do_insert(s, slot);
    r -= c->w_update;
    if (r < c->w_replace)
        return has_live ? do_write_existing(s, slot, 'r') : do_insert(s, slot);
    r -= c->w_replace;
    if (r < c->w_delete)
        return has_live ? do_write_existing(s, slot, 'd') : do_insert(s, slot);
    return do_ddl(s, slot);
}

bool workload_run(const char *mongo_uri, const workload_config *cfg, workload_stats *out, char *err, size_t errlen)
{
    wl_state s;
    mongoc_uri_t *uri = NULL;
    bson_error_t e;
    bool ok = false;
    struct timespec t0, t1;

    memset(out, 0, sizeof *out);
    out->op_hash = 0xCBF29CE484222325ull;
    memset(&s, 0, sizeof s);
    s.cfg = cfg;
    s.rng = cfg->seed;
    s.st = out;
    s.err = err;
    s.errlen = errlen;
    clock_gettime(CLOCK_MONOTONIC, &t0);

    if (cfg->n_namespaces < 1 || cfg->n_databases < 1 || !cfg->db_prefix || cfg->batch_size < 1) {
        set_err(&s, "workload: bad config (n_namespaces %d, n_databases %d, batch_size %u, db_prefix %s)",
                cfg->n_namespaces, cfg->n_databases, cfg->batch_size, cfg->db_prefix ? "set" : "NULL");
        return false;
    }
    if (cfg->mode == WORKLOAD_MIXED &&
        cfg->w_insert + cfg->w_update + cfg->w_replace + cfg->w_delete + cfg->w_ddl == 0) {
        set_err(&s, "workload: all weights are 0");
        return false;
    }
    if (cfg->mode == WORKLOAD_INSERTS_PER_UPDATE && cfg->inserts_per_update < 1) {
        set_err(&s, "workload: inserts_per_update must be ≥ 1");
        return false;
    }
    s.n_ns = cfg->n_namespaces;
    s.ns = bson_malloc0((size_t)s.n_ns * sizeof *s.ns);
    for (int i = 0; i < s.n_ns; i++)
        s.ns[i].next_id = cfg->first_id;
    for (int i = 0; i < s.n_ns; i++) {
        snprintf(s.ns[i].db, sizeof s.ns[i].db, "%s%d", cfg->db_prefix, i % cfg->n_databases);
        snprintf(s.ns[i].coll, sizeof s.ns[i].coll, "c%d", i);
    }
    if (cfg->pad_bytes) {
        s.pad = bson_malloc(cfg->pad_bytes + 1);
        for (unsigned i = 0; i < cfg->pad_bytes; i++)
            s.pad[i] = (char)('a' + i % 26);
        s.pad[cfg->pad_bytes] = '\0';
    }

    if (!cfg->dry_run) {
        mongoc_init();
        uri = mongoc_uri_new_with_error(mongo_uri, &e);
        if (!uri) {
            set_err(&s, "workload: bad MongoDB URI %s: %s", mongo_uri ? mongo_uri : "(null)", e.message);
            goto done;
        }
        s.client = mongoc_client_new_from_uri(uri);
        if (!s.client) {
            set_err(&s, "workload: cannot create a client for %s", mongo_uri);
            goto done;
        }
        mongoc_client_set_error_api(s.client, MONGOC_ERROR_API_VERSION_2);
        mongoc_client_set_appname(s.client, "oplog2pg-workload");
    }

    int run_slot = 0;
    uint64_t per_tick = 0, next_tick = 0;
    double paced_from = mono_s();
    if (cfg->rate > 0) {
        double per = cfg->rate * (cfg->tick_ms ? cfg->tick_ms : 10) / 1000.0;
        per_tick = per < 1 ? 1 : (uint64_t)per;
    }
    for (s.op_index = 0; s.op_index < cfg->ops; s.op_index++) {
        bool step_ok;
        if (cfg->stop != NULL && atomic_load_explicit(cfg->stop, memory_order_relaxed))
            break;
        if (per_tick > 0 && s.op_index == next_tick) {
            if (!pace(&s, paced_from))
                goto done;
            next_tick += per_tick;
        }
        if (cfg->mode == WORKLOAD_INSERT_ONLY) {
            step_ok = do_insert(&s, (int)below(&s, (uint32_t)s.n_ns));
        } else if (cfg->mode == WORKLOAD_INSERTS_PER_UPDATE) {
            uint64_t pos = s.op_index % ((uint64_t)cfg->inserts_per_update + 1);
            if (pos == 0)
                run_slot = (int)below(&s, (uint32_t)s.n_ns);
            if (pos < cfg->inserts_per_update)
                step_ok = do_insert(&s, run_slot);
            else
                step_ok = do_write_existing(&s, run_slot, 'u');
        } else {
            step_ok = mixed_step(&s);
        }
        if (!step_ok)
            goto done;
    }
    out->ops = s.op_index;
    if (!flush_all(&s))
        goto done;
    ok = true;

done:
    out->ops = s.op_index;
    for (int i = 0; i < s.n_ns; i++) {
        out->live_docs += s.ns[i].n_live;
        if (s.ns[i].bulk)
            mongoc_bulk_operation_destroy(s.ns[i].bulk);
        if (s.ns[i].mcoll)
            mongoc_collection_destroy(s.ns[i].mcoll);
        bson_free(s.ns[i].live);
    }
    bson_free(s.ns);
    bson_free(s.pad);
    if (s.client)
        mongoc_client_destroy(s.client);
    if (uri)
        mongoc_uri_destroy(uri);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    out->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    return ok;
}

/*
 * store.c — mongosim's data engine (see store.h): databases → collections → documents, and the oplog entry bodies
 * a MongoDB 7.0 (or 4.4) server writes for each change.
 *
 * Documents of a collection live in a treap keyed by `_id` in MongoDB's BSON comparison order
 * (update_compare_iters), so insert, lookup, delete and "first _id > X" are O(log n) expected. Databases and
 * collections are small sorted arrays. Collection UUIDs are random v4 UUIDs from getrandom().
 *
 * Oplog bodies (op, ns, ui, o[, o2]) follow the real entries under tests/vectors/ (tests/vectors/SOURCES.md):
 *   - create {create, idIndex: {v: 2, key: {_id: 1}, name: "_id_"}} before the first write into a new collection;
 *     an explicit create carries its options between the two (ddl.c), and a clustered collection has no idIndex;
 *   - a view or a time-series collection: see "Views and time-series collections" below;
 *   - insert: `o` only — the 7.0-era entries (transcribed_understanding_the_oplog_doc) and the 4.4 dumps carry no
 *     `o2` on inserts; only 8.0 adds it. Upserts that insert are logged as `i`;
 *   - update: o from update.c, o2 {_id}; a no-op update logs nothing;
 *   - delete: o {_id};
 *   - drop: o {drop}, o2 {numRecords: int32} (int32 in the 4.4 ddl_stream dump);
 *   - renameCollection within a db: ns "<db>.$cmd", ui = source UUID, o {renameCollection, to, stayTemp: false
 *     [, dropTarget: UUID]} with o2 {numRecords: int32 of the dropped target} only when a target was dropped;
 *   - renameCollection across databases (the server's SERVER-30371 procedure, simplified): create a temporary
 *     collection "<todb>.tmpXXXXX.renameCollection" (new UUID), one insert per source document into it, a
 *     within-db rename of the temporary collection to the target (dropTarget if one existed), then a drop of the
 *     source. The target ends up with the temporary collection's UUID. Index copies are not simulated.
 *   - dropDatabase: one drop per collection (name order), then {dropDatabase: 1} with no ui.
 * Every write validates everything before emitting, so a failed write emits nothing.
 */
#include "store.h"
#include "ddl.h"
#include "tsbucket.h"
#include "update.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------------------------------
 * Treap of documents
 * ------------------------------------------------------------------------------------------------------------- */

typedef struct tnode {
    bson_t *doc;
    uint32_t id_off; /* offset of doc's _id element (bson_iter_t needs 128-byte alignment, so none is stored) */
    uint32_t prio;
    struct tnode *l, *r;
} tnode;

typedef struct {
    char *name;
    uint8_t uuid[16];
    tnode *root;
    int64_t count;
    bson_t *options; /* the create options (ddl.c), as listCollections shows them; NULL when none */
    bool clustered;  /* clusteredIndex: no _id index */
} scoll;

typedef struct {
    char *name;
    scoll **colls;
    size_t n, cap;
} sdb;

struct sim_store {
    sim_oplog_format format;
    sdb **dbs;
    size_t n, cap;
    uint64_t rng;
    /* A shard of a simulated cluster (store_set_shard_hooks); NULL on a replica set. */
    store_uuid_fn uuid_fn;
    store_doc_key_fn key_fn;
    void *hook_ctx;
    /* changeStreamPreAndPostImages (store_set_image_hook); NULL: nothing kept */
    store_image_fn image_fn;
    void *image_ctx;
    /* time-series buckets open for inserts (tsbucket.c), and timeseriesBucketMaxCount (0: the server's 1000) */
    ts_catalog *ts;
    int32_t ts_max_count;
    bool ts_viewless; /* --timeseries-viewless: a time-series collection is created viewless */
};

void store_set_ts_viewless(sim_store *store, bool on)
{
    store->ts_viewless = on;
}

bool store_ts_viewless(const sim_store *store)
{
    return store->ts_viewless;
}

void store_set_ts_bucket_max_count(sim_store *store, int32_t n)
{
    store->ts_max_count = n;
}

void store_set_image_hook(sim_store *store, store_image_fn fn, void *ctx)
{
    store->image_fn = fn;
    store->image_ctx = ctx;
}

void store_set_shard_hooks(sim_store *store, store_uuid_fn uuid_fn, store_doc_key_fn key_fn, void *ctx)
{
    store->uuid_fn = uuid_fn;
    store->key_fn = key_fn;
    store->hook_ctx = ctx;
}

static uint32_t store_rand(sim_store *s)
{
    s->rng ^= s->rng << 13;
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    return (uint32_t)(s->rng >> 11);
}

static void tnode_free_all(tnode *t)
{
    while (t) {
        tnode_free_all(t->l);
        tnode *r = t->r;
        bson_destroy(t->doc);
        free(t);
        t = r;
    }
}

/* Positions it on t's _id. */
static void tnode_id(const tnode *t, bson_iter_t *it)
{
    bson_iter_init_from_data_at_offset(it, bson_get_data(t->doc), t->doc->len, t->id_off, 3);
}

static int key_cmp(const bson_iter_t *a, const tnode *t)
{
    bson_iter_t id;
    tnode_id(t, &id);
    return update_compare_iters(a, &id);
}

static tnode *treap_find(tnode *t, const bson_iter_t *key)
{
    while (t) {
        int r = key_cmp(key, t);
        if (r == 0)
            return t;
        t = r < 0 ? t->l : t->r;
    }
    return NULL;
}

/* First node with id > key (strict) or >= key. */
static tnode *treap_lower(tnode *t, const bson_iter_t *key, bool strict)
{
    tnode *best = NULL;
    while (t) {
        int r = key_cmp(key, t);
        if (r < 0 || (r == 0 && !strict)) {
            best = t;
            t = t->l;
        } else {
            t = t->r;
        }
    }
    return best;
}

static tnode *treap_first(tnode *t)
{
    while (t && t->l)
        t = t->l;
    return t;
}

/* Split t into < key (l) and >= key (r). */
static void treap_split(tnode *t, const bson_iter_t *key, tnode **l, tnode **r)
{
    if (!t) {
        *l = *r = NULL;
        return;
    }
    if (key_cmp(key, t) <= 0) {
        treap_split(t->l, key, l, &t->l);
        *r = t;
    } else {
        treap_split(t->r, key, &t->r, r);
        *l = t;
    }
}

static tnode *treap_merge(tnode *a, tnode *b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    if (a->prio > b->prio) {
        a->r = treap_merge(a->r, b);
        return a;
    }
    b->l = treap_merge(a, b->l);
    return b;
}

static tnode *treap_insert(tnode *t, tnode *nd)
{
    if (!t)
        return nd;
    bson_iter_t id;
    tnode_id(nd, &id);
    if (nd->prio > t->prio) {
        treap_split(t, &id, &nd->l, &nd->r);
        return nd;
    }
    if (key_cmp(&id, t) < 0)
        t->l = treap_insert(t->l, nd);
    else
        t->r = treap_insert(t->r, nd);
    return t;
}

/* Unlinks the node whose id equals key; returns it (or NULL). */
static tnode *treap_remove(tnode **tp, const bson_iter_t *key)
{
    while (*tp) {
        int r = key_cmp(key, *tp);
        if (r == 0) {
            tnode *hit = *tp;
            *tp = treap_merge(hit->l, hit->r);
            hit->l = hit->r = NULL;
            return hit;
        }
        tp = r < 0 ? &(*tp)->l : &(*tp)->r;
    }
    return NULL;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Catalog
 * ------------------------------------------------------------------------------------------------------------- */

sim_store *store_new(sim_oplog_format format)
{
    sim_store *s = bson_malloc0(sizeof *s);
    s->format = format;
    if (getrandom(&s->rng, sizeof s->rng, 0) != sizeof s->rng || !s->rng)
        s->rng = 0x9E3779B97F4A7C15ull;
    return s;
}

static void coll_free(scoll *c)
{
    if (!c)
        return;
    tnode_free_all(c->root);
    free(c->name);
    if (c->options)
        bson_destroy(c->options);
    free(c);
}

static void db_free(sdb *d)
{
    for (size_t i = 0; i < d->n; i++)
        coll_free(d->colls[i]);
    free(d->colls);
    free(d->name);
    free(d);
}

void store_free(sim_store *store)
{
    if (!store)
        return;
    for (size_t i = 0; i < store->n; i++)
        db_free(store->dbs[i]);
    free(store->dbs);
    ts_catalog_free(store->ts);
    free(store);
}

/* A deep copy of a subtree: same documents, priorities and shape. */
static tnode *tnode_clone(const tnode *t)
{
    if (!t)
        return NULL;
    tnode *nd = bson_malloc0(sizeof *nd);
    nd->doc = bson_copy(t->doc);
    nd->id_off = t->id_off;
    nd->prio = t->prio;
    nd->l = tnode_clone(t->l);
    nd->r = tnode_clone(t->r);
    return nd;
}

sim_store *store_clone(const sim_store *store)
{
    sim_store *s = store_new(store->format);
    s->ts_max_count = store->ts_max_count;
    s->dbs = bson_malloc0((store->cap ? store->cap : 1) * sizeof *s->dbs);
    s->cap = store->cap;
    for (size_t i = 0; i < store->n; i++) {
        const sdb *from = store->dbs[i];
        sdb *d = bson_malloc0(sizeof *d);
        d->name = bson_strdup(from->name);
        d->colls = bson_malloc0((from->cap ? from->cap : 1) * sizeof *d->colls);
        d->cap = from->cap;
        for (size_t j = 0; j < from->n; j++) {
            const scoll *fc = from->colls[j];
            scoll *c = bson_malloc0(sizeof *c);
            c->name = bson_strdup(fc->name);
            memcpy(c->uuid, fc->uuid, sizeof c->uuid);
            c->root = tnode_clone(fc->root);
            c->count = fc->count;
            c->options = fc->options ? bson_copy(fc->options) : NULL;
            c->clustered = fc->clustered;
            d->colls[d->n++] = c;
        }
        s->dbs[s->n++] = d;
    }
    return s;
}

sim_oplog_format store_format(const sim_store *store)
{
    return store->format;
}

/* Binary search in a sorted array of name-first structs; returns the index found or the insertion point. */
#define FIND_SORTED(arr, n, key, found)                                                                                \
    ({                                                                                                                 \
        size_t lo_ = 0, hi_ = (n);                                                                                     \
        *(found) = false;                                                                                              \
        while (lo_ < hi_) {                                                                                            \
            size_t mid_ = (lo_ + hi_) / 2;                                                                             \
            int r_ = strcmp((arr)[mid_]->name, (key));                                                                 \
            if (r_ == 0) {                                                                                             \
                *(found) = true;                                                                                       \
                lo_ = mid_;                                                                                            \
                break;                                                                                                 \
            }                                                                                                          \
            if (r_ < 0)                                                                                                \
                lo_ = mid_ + 1;                                                                                        \
            else                                                                                                       \
                hi_ = mid_;                                                                                            \
        }                                                                                                              \
        lo_;                                                                                                           \
    })

static sdb *db_get(const sim_store *s, const char *name, size_t *pos)
{
    bool found;
    size_t i = FIND_SORTED(s->dbs, s->n, name, &found);
    if (pos)
        *pos = i;
    return found ? s->dbs[i] : NULL;
}

static scoll *coll_get(const sim_store *s, const char *db, const char *coll)
{
    sdb *d = db_get(s, db, NULL);
    if (!d)
        return NULL;
    bool found;
    size_t i = FIND_SORTED(d->colls, d->n, coll, &found);
    return found ? d->colls[i] : NULL;
}

static void new_uuid(uint8_t uuid[16])
{
    if (getrandom(uuid, 16, 0) != 16) {
        for (int i = 0; i < 16; i++)
            uuid[i] = (uint8_t)rand();
    }
    uuid[6] = (uint8_t)((uuid[6] & 0x0f) | 0x40);
    uuid[8] = (uint8_t)((uuid[8] & 0x3f) | 0x80);
}

/* Adds an (empty) collection object to the catalog, creating the db entry if needed. */
static void catalog_add(sim_store *s, const char *db, scoll *c)
{
    size_t pos;
    sdb *d = db_get(s, db, &pos);
    if (!d) {
        d = bson_malloc0(sizeof *d);
        d->name = bson_strdup(db);
        if (s->n == s->cap) {
            s->cap = s->cap ? s->cap * 2 : 8;
            s->dbs = bson_realloc(s->dbs, s->cap * sizeof *s->dbs);
        }
        memmove(&s->dbs[pos + 1], &s->dbs[pos], (s->n - pos) * sizeof *s->dbs);
        s->dbs[pos] = d;
        s->n++;
    }
    bool found;
    size_t i = FIND_SORTED(d->colls, d->n, c->name, &found);
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 8;
        d->colls = bson_realloc(d->colls, d->cap * sizeof *d->colls);
    }
    memmove(&d->colls[i + 1], &d->colls[i], (d->n - i) * sizeof *d->colls);
    d->colls[i] = c;
    d->n++;
}

/* Unlinks a collection from the catalog (dropping the db entry when it becomes empty) and returns it. */
static scoll *catalog_remove(sim_store *s, const char *db, const char *coll)
{
    size_t dpos;
    sdb *d = db_get(s, db, &dpos);
    if (!d)
        return NULL;
    bool found;
    size_t i = FIND_SORTED(d->colls, d->n, coll, &found);
    if (!found)
        return NULL;
    scoll *c = d->colls[i];
    memmove(&d->colls[i], &d->colls[i + 1], (d->n - i - 1) * sizeof *d->colls);
    d->n--;
    if (d->n == 0) {
        db_free(d);
        memmove(&s->dbs[dpos], &s->dbs[dpos + 1], (s->n - dpos - 1) * sizeof *s->dbs);
        s->n--;
    }
    return c;
}

/* A sharded collection has one UUID on every shard (the config server's config.collections uuid): a shard's store
 * asks its hook for it when it creates the collection. */
static scoll *coll_new(const sim_store *s, const char *db, const char *name)
{
    scoll *c = bson_malloc0(sizeof *c);
    c->name = bson_strdup(name);
    if (!s->uuid_fn || !s->uuid_fn(s->hook_ctx, db, name, c->uuid))
        new_uuid(c->uuid);
    return c;
}

/* The document key a shard logs: {_id} on a replica set; on a shard the hook's shard key fields, then _id
 * (op_observer_util.cpp, DocumentKey::getShardKeyAndId). */
static void doc_key(const sim_store *s, const char *db, const scoll *c, const bson_t *doc, const bson_iter_t *id,
                    bson_t *out)
{
    if (s->key_fn && s->key_fn(s->hook_ctx, db, c->name, doc, out))
        return;
    bson_init(out);
    bson_append_iter(out, "_id", 3, id);
}

static bool check_ns(const char *db, const char *coll, bson_error_t *err)
{
    if (!db || !*db || strchr(db, '.') || strchr(db, '$') || strchr(db, '/') || strchr(db, ' ')) {
        bson_set_error(err, 0, 73, "Invalid database name: '%s'", db ? db : "");
        return false;
    }
    if (coll && (!*coll || strchr(coll, '$') || coll[0] == '.')) {
        bson_set_error(err, 0, 73, "Invalid collection name: '%s.%s'", db, coll);
        return false;
    }
    if (coll && strlen(db) + strlen(coll) + 1 > 255) {
        bson_set_error(err, 0, 73, "Fully qualified namespace is too long: '%s.%s'", db, coll);
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Oplog bodies
 * ------------------------------------------------------------------------------------------------------------- */

/* A viewless time-series collection (--timeseries-viewless; featureFlagCreateViewlessTimeseriesCollections, the only
 * layout from 9.0): a collection under the time-series collection's own name holding its buckets, with the buckets
 * collection's options (`timeseries` among them). A collection with `timeseries` options under any other name than
 * system.buckets.* is one. */
static bool coll_viewless(const scoll *c)
{
    bson_iter_t it;
    return c->options != NULL && strncmp(c->name, "system.buckets.", 15) != 0 &&
           bson_iter_init_find(&it, c->options, "timeseries");
}

/* mark: isTimeseries: true, which a server with featureFlagMarkTimeseriesEventsInOplog (8.3 and later) puts on the
 * entries of a viewless time-series collection: its create, index builds, collMod, drop and bucket writes (mongo
 * jstests/core/timeseries/write/timeseries_viewless_oplog_entries.js: "Tests expected operations on time-series
 * collections produce oplog entries with isTimeseries set to true"; the DurableReplOperation field isTimeseries). */
static void emit_body(store_emit_fn emit, void *ctx, const char *op, const char *ns, const uint8_t *uuid,
                      const bson_t *o, const bson_t *o2, bool mark)
{
    if (!emit)
        return;
    bson_t body = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&body, "op", op);
    BSON_APPEND_UTF8(&body, "ns", ns);
    if (uuid)
        BSON_APPEND_BINARY(&body, "ui", BSON_SUBTYPE_UUID, uuid, 16);
    BSON_APPEND_DOCUMENT(&body, "o", o);
    if (o2)
        BSON_APPEND_DOCUMENT(&body, "o2", o2);
    if (mark)
        BSON_APPEND_BOOL(&body, "isTimeseries", true);
    emit(ctx, &body);
    bson_destroy(&body);
}

static void emit_cmd(store_emit_fn emit, void *ctx, const char *db, const uint8_t *uuid, const bson_t *o,
                     const bson_t *o2, bool mark)
{
    char *ns = bson_strdup_printf("%s.$cmd", db);
    emit_body(emit, ctx, "c", ns, uuid, o, o2, mark);
    bson_free(ns);
}

/* {create, <options>, idIndex}: the options in CollectionOptions::appendBSON order, then the _id index spec unless
 * the collection is clustered (op_observer_impl.cpp onCreateCollection / MutableOplogEntry::makeCreateCommand: the
 * idIndex is the full spec the collection was created with, and a clustered collection has none). */
static void emit_create(store_emit_fn emit, void *ctx, const char *db, const scoll *c)
{
    bson_t o = BSON_INITIALIZER, idx, key;
    BSON_APPEND_UTF8(&o, "create", c->name);
    if (c->options)
        bson_concat(&o, c->options);
    if (!c->clustered) {
        BSON_APPEND_DOCUMENT_BEGIN(&o, "idIndex", &idx);
        BSON_APPEND_INT32(&idx, "v", 2);
        BSON_APPEND_DOCUMENT_BEGIN(&idx, "key", &key);
        BSON_APPEND_INT32(&key, "_id", 1);
        bson_append_document_end(&idx, &key);
        BSON_APPEND_UTF8(&idx, "name", "_id_");
        bson_append_document_end(&o, &idx);
    }
    emit_cmd(emit, ctx, db, c->uuid, &o, NULL, coll_viewless(c));
    bson_destroy(&o);
}

static void emit_drop(store_emit_fn emit, void *ctx, const char *db, const scoll *c)
{
    bson_t o = BSON_INITIALIZER, o2 = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&o, "drop", c->name);
    BSON_APPEND_INT32(&o2, "numRecords", (int32_t)c->count);
    emit_cmd(emit, ctx, db, c->uuid, &o, &o2, coll_viewless(c));
    bson_destroy(&o);
    bson_destroy(&o2);
}

static void emit_doc_op(store_emit_fn emit, void *ctx, const char *op, const char *db, const scoll *c, const bson_t *o,
                        const bson_t *o2)
{
    char *ns = bson_strdup_printf("%s.%s", db, c->name);
    emit_body(emit, ctx, op, ns, c->uuid, o, o2, coll_viewless(c));
    bson_free(ns);
}

/* An update or delete of a collection with changeStreamPreAndPostImages enabled: the body and its images go to the
 * image hook first (the server writes the pre-image in the same storage transaction as the oplog entry:
 * ChangeStreamPreImagesCollectionManager::insertPreImage from OpObserverImpl::onUpdate / onDelete), then the body
 * to emit. Writes replayed without emit (a transaction's undo) keep nothing. */
static void emit_doc_op_images(sim_store *store, store_emit_fn emit, void *ctx, const char *op, const char *db,
                               const scoll *c, const bson_t *o, const bson_t *o2, const bson_t *pre, const bson_t *post)
{
    if (emit && store->image_fn && ddl_images_enabled(c->options)) {
        bson_t body = BSON_INITIALIZER;
        char *ns = bson_strdup_printf("%s.%s", db, c->name);
        BSON_APPEND_UTF8(&body, "op", op);
        BSON_APPEND_UTF8(&body, "ns", ns);
        BSON_APPEND_BINARY(&body, "ui", BSON_SUBTYPE_UUID, c->uuid, 16);
        BSON_APPEND_DOCUMENT(&body, "o", o);
        if (o2)
            BSON_APPEND_DOCUMENT(&body, "o2", o2);
        store->image_fn(store->image_ctx, &body, pre, post);
        bson_destroy(&body);
        bson_free(ns);
    }
    emit_doc_op(emit, ctx, op, db, c, o, o2);
}

static void id_doc(const bson_iter_t *id, bson_t *out)
{
    bson_init(out);
    bson_append_iter(out, "_id", 3, id);
}

/* ---------------------------------------------------------------------------------------------------------------
 * Writes
 * ------------------------------------------------------------------------------------------------------------- */

static char *dup_key_text(const bson_iter_t *id)
{
    if (BSON_ITER_HOLDS_OID(id)) {
        char hex[25];
        bson_oid_to_string(bson_iter_oid(id), hex);
        return bson_strdup_printf("{ _id: ObjectId('%s') }", hex);
    }
    bson_t tmp = BSON_INITIALIZER;
    bson_append_iter(&tmp, "_id", 3, id);
    char *js = bson_as_relaxed_extended_json(&tmp, NULL);
    bson_destroy(&tmp);
    /* `{ "_id" : V }` → `{ _id: V }` */
    const char *v = strstr(js, " : ");
    char *out = bson_strdup_printf("{ _id: %s", v ? v + 3 : js);
    bson_free(js);
    return out;
}

/* Builds the stored form of doc: _id first (an ObjectId added when missing). */
static bool prepare_doc(const bson_t *doc, bson_t **out, bson_error_t *err)
{
    bson_iter_t it, id;
    if (!bson_validate(doc, BSON_VALIDATE_NONE, NULL)) {
        bson_set_error(err, 0, 2, "invalid BSON document");
        return false;
    }
    bool has_id = bson_iter_init_find(&id, doc, "_id");
    if (has_id) {
        bson_type_t t = bson_iter_type(&id);
        if (t == BSON_TYPE_ARRAY || t == BSON_TYPE_REGEX || t == BSON_TYPE_UNDEFINED) {
            bson_set_error(err, 0, 2, "can't use a%s %s for _id",
                           t == BSON_TYPE_ARRAY       ? "n"
                           : t == BSON_TYPE_UNDEFINED ? "n"
                                                      : "",
                           t == BSON_TYPE_ARRAY   ? "array"
                           : t == BSON_TYPE_REGEX ? "regex"
                                                  : "undefined");
            return false;
        }
    }
    bson_t *d = bson_sized_new(doc->len + 20);
    if (has_id) {
        bson_append_iter(d, "_id", 3, &id);
    } else {
        bson_oid_t oid;
        bson_oid_init(&oid, NULL);
        BSON_APPEND_OID(d, "_id", &oid);
    }
    if (bson_iter_init(&it, doc))
        while (bson_iter_next(&it))
            if (strcmp(bson_iter_key(&it), "_id") != 0)
                bson_append_iter(d, NULL, 0, &it);
    if (d->len > 16 * 1024 * 1024 + 16 * 1024) {
        bson_destroy(d);
        bson_set_error(err, 0, 10334, "object to insert too large");
        return false;
    }
    *out = d;
    return true;
}

static tnode *tnode_new(sim_store *s, bson_t *doc)
{
    tnode *nd = bson_malloc0(sizeof *nd);
    bson_iter_t it;
    nd->doc = doc;
    if (bson_iter_init_find(&it, doc, "_id"))
        nd->id_off = bson_iter_offset(&it);
    nd->prio = store_rand(s);
    return nd;
}

/* Inserts a prepared document (owned) into db.coll, creating the collection; emits create/insert. */
static bool insert_prepared(sim_store *store, const char *db, const char *coll, bson_t *d, store_emit_fn emit,
                            void *ctx, bson_error_t *err)
{
    scoll *c = coll_get(store, db, coll);
    tnode *nd = tnode_new(store, d);
    bson_iter_t id;
    tnode_id(nd, &id);
    if (c && treap_find(c->root, &id)) {
        char *k = dup_key_text(&id);
        bson_set_error(err, 0, 11000, "E11000 duplicate key error collection: %s.%s index: _id_ dup key: %s", db, coll,
                       k);
        bson_free(k);
        bson_destroy(d);
        free(nd);
        return false;
    }
    if (!c) {
        c = coll_new(store, db, coll);
        catalog_add(store, db, c);
        emit_create(emit, ctx, db, c);
    }
    c->root = treap_insert(c->root, nd);
    c->count++;
    emit_doc_op(emit, ctx, "i", db, c, d, NULL);
    return true;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Views and time-series collections
 *
 * A view is what a server makes of it: the document {_id: "<db>.<name>", viewOn, pipeline} in the collection
 * <db>.system.views, written as an ordinary insert ('i' on <db>.system.views) after a create of system.views when it
 * is missing (create_collection.cpp, _createView / _createSystemDotViewsIfNecessary; views/durable_view_catalog.cpp
 * and catalog/views_for_database.cpp, the insert into system.views). There is no `create` entry for a view: the
 * server's change streams turn that insert into the view's create event (pipeline/change_stream_event_transform.cpp,
 * ChangeStreamViewDefinitionEventTransformation), and a secondary creates the view by applying it. A time-series
 * collection NAME is the buckets collection system.buckets.NAME (with `timeseries` options) plus such a view on it.
 * ------------------------------------------------------------------------------------------------------------- */

#define SYSTEM_VIEWS   "system.views"
#define BUCKETS_PREFIX "system.buckets."

/* The node of db.coll's definition in db.system.views, or NULL. */
static tnode *view_node(const sim_store *s, const char *db, const char *coll)
{
    scoll *v = coll_get(s, db, SYSTEM_VIEWS);
    if (!v || !v->root)
        return NULL;
    char *id = bson_strdup_printf("%s.%s", db, coll);
    bson_t key = BSON_INITIALIZER;
    bson_iter_t it;
    BSON_APPEND_UTF8(&key, "_id", id);
    bson_iter_init_find(&it, &key, "_id");
    tnode *nd = treap_find(v->root, &it);
    bson_destroy(&key);
    bson_free(id);
    return nd;
}

/* The buckets collection a view definition reads when it is a time-series collection's, else NULL. */
static scoll *view_buckets(const sim_store *s, const char *db, const char *coll, const bson_t *def)
{
    bson_iter_t it;
    bson_t ts;
    if (!bson_iter_init_find(&it, def, "viewOn") || !BSON_ITER_HOLDS_UTF8(&it))
        return NULL;
    const char *on = bson_iter_utf8(&it, NULL);
    if (strncmp(on, BUCKETS_PREFIX, strlen(BUCKETS_PREFIX)) != 0 || strcmp(on + strlen(BUCKETS_PREFIX), coll) != 0)
        return NULL;
    scoll *b = coll_get(s, db, on);
    return b && ddl_timeseries_of(b->options, &ts) ? b : NULL;
}

bool store_collection_uuid(const sim_store *store, const char *db, const char *coll, uint8_t uuid[16])
{
    const scoll *c = coll_get(store, db, coll);
    if (c == NULL)
        return false;
    memcpy(uuid, c->uuid, 16);
    return true;
}

store_ns_kind store_ns_kind_of(const sim_store *store, const char *db, const char *coll)
{
    const scoll *c = coll_get(store, db, coll);
    if (c)
        return coll_viewless(c) ? STORE_NS_TIMESERIES : STORE_NS_COLLECTION;
    tnode *v = view_node(store, db, coll);
    if (!v)
        return STORE_NS_NONE;
    return view_buckets(store, db, coll, v->doc) ? STORE_NS_TIMESERIES : STORE_NS_VIEW;
}

/* Refuses a write on a view (166 CommandNotSupportedOnView, as a server answers for a plain view) or on a
 * time-series collection other than an insert (mongosim models inserts only). */
static bool refuse_view_write(const sim_store *s, const char *db, const char *coll, const char *what, bson_error_t *err)
{
    const scoll *c = coll_get(s, db, coll);
    if (c && coll_viewless(c)) {
        bson_set_error(err, 0, 2, "mongosim does not support %s on the time-series collection %s.%s (only inserts)",
                       what, db, coll);
        return true;
    }
    tnode *v = c ? NULL : view_node(s, db, coll);
    if (!v)
        return false;
    if (view_buckets(s, db, coll, v->doc))
        bson_set_error(err, 0, 2, "mongosim does not support %s on the time-series collection %s.%s (only inserts)",
                       what, db, coll);
    else
        bson_set_error(err, 0, 166, "Namespace %s.%s is a view, not a collection", db, coll);
    return true;
}

/* Inserts the view definition {_id, viewOn, pipeline} into db.system.views (creating that collection first). */
static bool insert_view(sim_store *s, const char *db, const char *coll, const char *view_on, const bson_t *pipeline,
                        store_emit_fn emit, void *ctx, bson_error_t *err)
{
    bson_t *def = bson_new();
    char *id = bson_strdup_printf("%s.%s", db, coll);
    BSON_APPEND_UTF8(def, "_id", id);
    BSON_APPEND_UTF8(def, "viewOn", view_on);
    BSON_APPEND_ARRAY(def, "pipeline", pipeline);
    bson_free(id);
    return insert_prepared(s, db, SYSTEM_VIEWS, def, emit, ctx, err);
}

/* A measurement inserted into a time-series collection goes into a bucket of the buckets collection (tsbucket.c). No
 * _id is added: a server does not add one to measurements (drivers do, client-side). */
typedef struct {
    sim_store *s;
    scoll *c;
} bucket_lookup;

static const bson_t *lookup_bucket(void *ctx, const bson_oid_t *id)
{
    bucket_lookup *l = ctx;
    bson_t key = BSON_INITIALIZER;
    bson_iter_t it;
    BSON_APPEND_OID(&key, "_id", id);
    bson_iter_init_find(&it, &key, "_id");
    tnode *nd = treap_find(l->c->root, &it);
    bson_destroy(&key);
    return nd ? nd->doc : NULL;
}

/* Applies one bucket write: the insert of a new bucket, or the update (o: the diff) of an open one. */
static const bson_t *lookup_nothing(void *ctx, const bson_oid_t *id)
{
    return NULL;
}

static bool apply_bucket_write(sim_store *s, const char *db, scoll *c, const ts_write *w, store_emit_fn emit, void *ctx,
                               bson_error_t *err)
{
    if (w->insert)
        return insert_prepared(s, db, c->name, bson_copy(w->doc), emit, ctx, err);
    bson_t key = BSON_INITIALIZER;
    bson_iter_t it;
    BSON_APPEND_OID(&key, "_id", &w->id);
    bson_iter_init_find(&it, &key, "_id");
    tnode *nd = treap_find(c->root, &it);
    bson_destroy(&key);
    if (!nd) {
        bson_set_error(err, 0, 1, "time-series bucket vanished before its update");
        return false;
    }
    bson_t *pre = nd->doc;
    nd->doc = bson_copy(w->doc);
    bson_iter_t nid;
    if (bson_iter_init_find(&nid, nd->doc, "_id"))
        nd->id_off = bson_iter_offset(&nid);
    bson_t o2;
    doc_key(s, db, c, nd->doc, &nid, &o2);
    emit_doc_op_images(s, emit, ctx, "u", db, c, w->o, &o2, pre, nd->doc);
    bson_destroy(&o2);
    bson_destroy(pre);
    return true;
}

static bool insert_measurements(sim_store *s, const char *db, scoll *buckets, const bson_t *const *docs, size_t n,
                                bool ordered, store_emit_fn emit, store_stmt_fn stmt, void *ctx, bson_error_t *errs,
                                size_t *placed)
{
    bson_t ts;
    for (size_t i = 0; i < n; i++) {
        if (!bson_validate(docs[i], BSON_VALIDATE_NONE, NULL)) {
            for (size_t j = 0; j < n; j++)
                memset(&errs[j], 0, sizeof errs[j]);
            bson_set_error(&errs[i], 0, 2, "invalid BSON document");
            *placed = i + 1;
            return false;
        }
    }
    if (!ddl_timeseries_of(buckets->options, &ts)) {
        for (size_t i = 0; i < n; i++)
            bson_set_error(&errs[i], 0, 72, "Time-series buckets collection is missing time-series options");
        *placed = ordered ? 1 : n;
        return false;
    }
    if (!s->ts)
        s->ts = ts_catalog_new();
    bucket_lookup l = {s, buckets};
    ts_write *w;
    size_t nw;
    ts_catalog_insert(s->ts, buckets->uuid, &ts, s->format, s->ts_max_count, docs, n, ordered, lookup_bucket, &l, &w,
                      &nw, errs, placed);
    bool ok = true;
    for (size_t k = 0; k < nw && ok; k++) {
        bson_error_t e;
        if (stmt)
            stmt(ctx, w[k].stmt_ids, w[k].nstmt);
        if (!apply_bucket_write(s, db, buckets, &w[k], emit, ctx, &e)) {
            errs[w[k].nstmt ? w[k].stmt_ids[0] : 0] = e;
            ok = false;
        }
    }
    ts_writes_free(w, nw);
    return ok;
}

bool store_insert_many(sim_store *store, const char *db, const char *coll, const bson_t *const *docs, size_t n,
                       bool ordered, store_emit_fn emit, store_stmt_fn stmt, void *ctx, bson_error_t *errs,
                       size_t *placed)
{
    *placed = 0;
    for (size_t i = 0; i < n; i++)
        memset(&errs[i], 0, sizeof errs[i]);
    if (n == 0)
        return true;
    if (!check_ns(db, coll, &errs[0])) {
        *placed = 1;
        return false;
    }
    scoll *vl = coll_get(store, db, coll);
    if (vl && coll_viewless(vl))
        return insert_measurements(store, db, vl, docs, n, ordered, emit, stmt, ctx, errs, placed);
    if (!vl) {
        tnode *v = view_node(store, db, coll);
        scoll *b = v ? view_buckets(store, db, coll, v->doc) : NULL;
        if (b)
            return insert_measurements(store, db, b, docs, n, ordered, emit, stmt, ctx, errs, placed);
    }
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
        *placed = i + 1;
        int32_t id = (int32_t)i;
        if (stmt)
            stmt(ctx, &id, 1);
        if (!store_insert(store, db, coll, docs[i], emit, ctx, &errs[i])) {
            ok = false;
            if (ordered)
                break;
        }
    }
    return ok;
}

bool store_insert(sim_store *store, const char *db, const char *coll, const bson_t *doc, store_emit_fn emit, void *ctx,
                  bson_error_t *err)
{
    bson_t *d;
    if (!check_ns(db, coll, err))
        return false;
    scoll *vl = coll_get(store, db, coll);
    if (vl && coll_viewless(vl)) {
        const bson_t *one[1] = {doc};
        size_t placed;
        bool ok = insert_measurements(store, db, vl, one, 1, true, emit, NULL, ctx, err, &placed);
        return ok && err->code == 0;
    }
    if (!vl) {
        tnode *v = view_node(store, db, coll);
        if (v) {
            scoll *b = view_buckets(store, db, coll, v->doc);
            if (b) {
                const bson_t *one[1] = {doc};
                size_t placed;
                bool ok = insert_measurements(store, db, b, one, 1, true, emit, NULL, ctx, err, &placed);
                return ok && err->code == 0;
            }
            bson_set_error(err, 0, 166, "Namespace %s.%s is a view, not a collection", db, coll);
            return false;
        }
    }
    if (!prepare_doc(doc, &d, err))
        return false;
    return insert_prepared(store, db, coll, d, emit, ctx, err);
}

/* q must be {_id: X} with X not an operator document. */
static bool parse_id_query(const bson_t *q, bson_iter_t *id, bson_error_t *err)
{
    bson_iter_t it;
    if (bson_iter_init(&it, q) && bson_iter_next(&it) && strcmp(bson_iter_key(&it), "_id") == 0) {
        *id = it;
        bool extra = bson_iter_next(&it);
        bool op = false;
        if (BSON_ITER_HOLDS_DOCUMENT(id)) {
            bson_iter_t sub;
            op = bson_iter_recurse(id, &sub) && bson_iter_next(&sub) && bson_iter_key(&sub)[0] == '$';
        }
        if (!extra && !op)
            return true;
    }
    char *js = bson_as_relaxed_extended_json(q, NULL);
    bson_set_error(err, 0, 2, "mongosim supports only {_id: <value>} queries here, got %s", js);
    bson_free(js);
    return false;
}

void store_update_result_clear(sim_update_result *res)
{
    if (!res)
        return;
    if (res->upserted)
        bson_value_destroy(&res->upserted_id);
    memset(res, 0, sizeof *res);
}

bool store_update(sim_store *store, const char *db, const char *coll, const bson_t *q, const bson_t *u, bool upsert,
                  sim_update_result *res, store_emit_fn emit, void *ctx, bson_error_t *err)
{
    sim_update_result local;
    if (!res)
        res = &local;
    memset(res, 0, sizeof *res);
    bson_iter_t id;
    if (!check_ns(db, coll, err) || refuse_view_write(store, db, coll, "updates", err) || !parse_id_query(q, &id, err))
        return false;
    scoll *c = coll_get(store, db, coll);
    tnode *nd = c ? treap_find(c->root, &id) : NULL;
    bson_t new_doc, o;
    bool changed;
    if (nd) {
        if (!update_apply(nd->doc, u, store->format, false, &new_doc, &o, &changed, err))
            return false;
        res->matched = 1;
        if (!changed)
            return true;
        res->modified = 1;
        bson_t *pre = nd->doc;
        nd->doc = bson_copy(&new_doc);
        bson_destroy(&new_doc);
        bson_iter_t nid;
        if (bson_iter_init_find(&nid, nd->doc, "_id"))
            nd->id_off = bson_iter_offset(&nid);
        bson_t o2;
        doc_key(store, db, c, nd->doc, &nid, &o2);
        emit_doc_op_images(store, emit, ctx, "u", db, c, &o, &o2, pre, nd->doc);
        bson_destroy(pre);
        bson_destroy(&o2);
        bson_destroy(&o);
        if (res == &local)
            store_update_result_clear(res);
        return true;
    }
    if (!upsert)
        return true;

    bson_t base;
    id_doc(&id, &base);
    bson_t *d;
    if (!update_apply(&base, u, store->format, true, &new_doc, &o, &changed, err)) {
        bson_destroy(&base);
        return false;
    }
    if (changed) {
        bson_destroy(&o);
        bool ok = prepare_doc(&new_doc, &d, err);
        bson_destroy(&new_doc);
        if (!ok) {
            bson_destroy(&base);
            return false;
        }
    } else {
        d = bson_copy(&base);
    }
    bson_destroy(&base);
    bson_iter_t nid;
    bson_iter_init_find(&nid, d, "_id");
    bson_value_t idv;
    bson_value_copy(bson_iter_value(&nid), &idv);
    if (!insert_prepared(store, db, coll, d, emit, ctx, err)) {
        bson_value_destroy(&idv);
        return false;
    }
    res->upserted = true;
    res->upserted_id = idv;
    if (res == &local)
        store_update_result_clear(res);
    return true;
}

static void delete_node(sim_store *store, const char *db, scoll *c, tnode *nd, store_emit_fn emit, void *ctx)
{
    bson_iter_t key;
    tnode_id(nd, &key);
    tnode *hit = treap_remove(&c->root, &key);
    c->count--;
    bson_t o;
    doc_key(store, db, c, hit->doc, &key, &o);
    emit_doc_op_images(store, emit, ctx, "d", db, c, &o, NULL, hit->doc, NULL);
    bson_destroy(&o);
    bson_destroy(hit->doc);
    free(hit);
}

bool store_delete(sim_store *store, const char *db, const char *coll, const bson_t *q, int limit, int64_t *deleted,
                  store_emit_fn emit, void *ctx, bson_error_t *err)
{
    int64_t n = 0;
    if (deleted)
        *deleted = 0;
    if (!check_ns(db, coll, err) || refuse_view_write(store, db, coll, "deletes", err))
        return false;
    scoll *c = coll_get(store, db, coll);
    if (bson_empty(q)) {
        while (c && c->root && (limit != 1 || n == 0)) {
            delete_node(store, db, c, treap_first(c->root), emit, ctx);
            n++;
        }
    } else {
        bson_iter_t id;
        if (!parse_id_query(q, &id, err))
            return false;
        tnode *nd = c ? treap_find(c->root, &id) : NULL;
        if (nd) {
            delete_node(store, db, c, nd, emit, ctx);
            n++;
        }
    }
    if (deleted)
        *deleted = n;
    return true;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Deletes and updates of measurements in a time-series collection
 *
 * 5.0 (and 4.4) take only multi deletes and updates whose query names the metaField alone, and updates that only
 * change the metaField; they become writes of the buckets whose meta matches (timeseries_update_delete_util.cpp
 * translateQuery / translateUpdate, write_ops_exec.cpp deleteRequestCheckFunction / updateRequestCheckFunction: the
 * errors below). 7.0 and 8.0 take any (gTimeseriesDeletesSupport / gTimeseriesUpdatesSupport): each bucket holding
 * a matching measurement is rewritten by itself (the TimeseriesModify stage, timeseries_write_util.cpp
 * performAtomicWritesForDelete / performAtomicWritesForUpdate, makeModificationOp): deleted ('d') when no
 * measurement remains, else replaced ('u' whose o is the rebuilt bucket: a replacement); updated measurements go to
 * new buckets (a side bucket catalog, never reopening) inserted in the same atomic write, and outside a retryable
 * write the replacement and the inserts are one applyOps (WriteUnitOfWork::kGroupForTransaction).
 * mongosim matches equality filters only ({path: value, ...}).
 * ------------------------------------------------------------------------------------------------------------- */

static bool ts_filter_supported(const bson_t *q, bson_error_t *err)
{
    bson_iter_t it, sub;
    bson_iter_init(&it, q);
    while (bson_iter_next(&it)) {
        bool op = bson_iter_key(&it)[0] == '$';
        if (!op && BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &sub) && bson_iter_next(&sub))
            op = bson_iter_key(&sub)[0] == '$';
        if (op) {
            char *js = bson_as_relaxed_extended_json(q, NULL);
            bson_set_error(err, 0, 2,
                           "mongosim matches only equality filters {path: value} on time-series "
                           "measurements, not %s",
                           js);
            bson_free(js);
            return false;
        }
    }
    return true;
}

/* Every {path: value} of q holds in doc (a missing path equals null), with prefix `from` replaced by `to` when set. */
static bool ts_match(const bson_t *doc, const bson_t *q, const char *from, const char *to)
{
    bson_iter_t it;
    bson_iter_init(&it, q);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        char *path = NULL;
        if (from) {
            size_t fl = strlen(from);
            path = bson_strdup_printf("%s%s", to, k + fl);
        }
        bson_iter_t d, f;
        bool found = bson_iter_init(&d, doc) && bson_iter_find_descendant(&d, path ? path : k, &f);
        bson_free(path);
        const bson_value_t *want = bson_iter_value(&it);
        if (!found) {
            if (want->value_type != BSON_TYPE_NULL)
                return false;
            continue;
        }
        if (update_compare_values(bson_iter_value(&f), want) != 0)
            return false;
    }
    return true;
}

/* The path names the metaField (m or m.<...>). */
static bool on_meta(const char *path, const char *meta)
{
    if (!meta)
        return false;
    size_t ml = strlen(meta);
    return strncmp(path, meta, ml) == 0 && (path[ml] == '\0' || path[ml] == '.');
}

static const char *ts_meta_field(const bson_t *ts)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, ts, "metaField") && BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : NULL;
}

/* translateQuery: every field of q on the metaField. */
static bool ts_meta_query(const bson_t *q, const char *meta, bson_error_t *err)
{
    bson_iter_t it;
    if (!meta && !bson_empty(q)) {
        bson_set_error(err, 0, 72,
                       "Cannot perform an update or delete on a time-series collection that does not have a "
                       "metaField");
        return false;
    }
    bson_iter_init(&it, q);
    while (bson_iter_next(&it)) {
        if (!on_meta(bson_iter_key(&it), meta)) {
            bson_set_error(err, 0, 72,
                           "Cannot perform an update or delete on a time-series collection when querying on a field "
                           "that is not the metaField '%s'",
                           meta);
            return false;
        }
    }
    return true;
}

/* The buckets collection of the time-series collection db.coll, its options and the _ids of its buckets in order. */
static scoll *ts_buckets_of(sim_store *s, const char *db, const char *coll, bson_t *ts, bson_error_t *err)
{
    scoll *b = coll_get(s, db, coll);
    if (b == NULL || !coll_viewless(b)) {
        tnode *v = b ? NULL : view_node(s, db, coll);
        b = v ? view_buckets(s, db, coll, v->doc) : NULL;
    }
    if (!b || !ddl_timeseries_of(b->options, ts)) {
        bson_set_error(err, 0, 2, "%s.%s is not a time-series collection", db, coll);
        return NULL;
    }
    if (!s->ts)
        s->ts = ts_catalog_new();
    return b;
}

static void collect_ids(tnode *t, bson_value_t **ids, size_t *n, size_t *cap)
{
    if (!t)
        return;
    collect_ids(t->l, ids, n, cap);
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        bson_value_t *p = realloc(*ids, *cap * sizeof *p);
        if (!p)
            abort();
        *ids = p;
    }
    bson_iter_t id;
    tnode_id(t, &id);
    bson_value_copy(bson_iter_value(&id), &(*ids)[(*n)++]);
    collect_ids(t->r, ids, n, cap);
}

static tnode *node_by_id(scoll *c, const bson_value_t *id)
{
    bson_t key = BSON_INITIALIZER;
    bson_iter_t it;
    bson_append_value(&key, "_id", 3, id);
    bson_iter_init_find(&it, &key, "_id");
    tnode *nd = treap_find(c->root, &it);
    bson_destroy(&key);
    return nd;
}

/* Replaces bucket nd by doc, logging a replacement 'u' (o: the whole bucket, o2: {_id}). */
static void replace_bucket(sim_store *s, const char *db, scoll *c, tnode *nd, bson_t *doc, store_emit_fn emit,
                           void *ctx)
{
    bson_t *pre = nd->doc;
    nd->doc = doc;
    bson_iter_t nid;
    if (bson_iter_init_find(&nid, nd->doc, "_id"))
        nd->id_off = bson_iter_offset(&nid);
    bson_t o2;
    doc_key(s, db, c, nd->doc, &nid, &o2);
    emit_doc_op_images(s, emit, ctx, "u", db, c, nd->doc, &o2, pre, nd->doc);
    bson_destroy(&o2);
    bson_destroy(pre);
}

/* One bucket after a modification: deleted when nothing remains, else rebuilt from what remains. */
static void modify_bucket(sim_store *s, const char *db, scoll *c, tnode *nd, const bson_t *ts, bson_t **keep,
                          size_t nkeep, store_emit_fn emit, void *ctx)
{
    bson_iter_t id;
    tnode_id(nd, &id);
    const bson_oid_t oid = *bson_iter_oid(&id);
    if (nkeep == 0) {
        ts_catalog_forget(s->ts, &oid);
        delete_node(s, db, c, nd, emit, ctx);
    } else {
        replace_bucket(s, db, c, nd, ts_catalog_rebuild(s->ts, ts, s->format, &oid, keep, nkeep), emit, ctx);
    }
}

static bool ts_v50(const sim_store *s)
{
    return s->format == SIM_FORMAT_50 || s->format == SIM_FORMAT_44;
}

bool store_ts_delete(sim_store *store, const char *db, const char *coll, const bson_t *q, int limit, int64_t *deleted,
                     store_emit_fn emit, void *ctx, bson_error_t *err)
{
    bson_t ts;
    *deleted = 0;
    scoll *b = ts_buckets_of(store, db, coll, &ts, err);
    if (!b || !ts_filter_supported(q, err))
        return false;
    const char *meta = ts_meta_field(&ts);
    if (ts_v50(store)) {
        if (limit != 0) {
            bson_set_error(err, 0, 20, "Cannot perform a non-multi delete on a time-series collection");
            return false;
        }
        if (!ts_meta_query(q, meta, err))
            return false;
    }
    bson_value_t *ids = NULL;
    size_t nids = 0, cap = 0;
    collect_ids(b->root, &ids, &nids, &cap);
    bool ok = true;
    for (size_t i = 0; i < nids && ok && !(limit == 1 && *deleted > 0); i++) {
        tnode *nd = node_by_id(b, &ids[i]);
        if (!nd)
            continue;
        if (ts_v50(store)) {
            /* The translated query on the buckets: meta.<...> (a plain delete of each bucket). */
            if (ts_match(nd->doc, q, meta, "meta")) {
                ts_catalog_forget(store->ts, &ids[i].value.v_oid);
                delete_node(store, db, b, nd, emit, ctx);
                (*deleted)++;
            }
            continue;
        }
        bson_t **ms;
        size_t n;
        if (!ts_bucket_measurements(store->ts, &ts, nd->doc, &ms, &n)) {
            bson_set_error(err, 0, 2, "mongosim cannot unpack a compressed bucket it did not write");
            ok = false;
            break;
        }
        bson_t **keep = malloc((n ? n : 1) * sizeof *keep);
        if (!keep)
            abort();
        size_t nkeep = 0, hit = 0;
        for (size_t j = 0; j < n; j++) {
            if ((limit != 1 || *deleted + (int64_t)hit == 0) && ts_match(ms[j], q, NULL, NULL))
                hit++;
            else
                keep[nkeep++] = ms[j];
        }
        if (hit) {
            modify_bucket(store, db, b, nd, &ts, keep, nkeep, emit, ctx);
            *deleted += (int64_t)hit;
        }
        free(keep);
        ts_measurements_free(ms, n);
    }
    for (size_t i = 0; i < nids; i++)
        bson_value_destroy(&ids[i]);
    free(ids);
    return ok;
}

/* translateUpdate (5.0): a modifier update whose every path is on the metaField, rewritten onto meta. */
static bool ts_meta_update(const bson_t *u, const char *meta, bson_t *out, bson_error_t *err)
{
    bson_iter_t op, f;
    bson_init(out);
    bson_iter_init(&op, u);
    while (bson_iter_next(&op)) {
        if (bson_iter_key(&op)[0] != '$' || !BSON_ITER_HOLDS_DOCUMENT(&op)) {
            bson_set_error(err, 0, 72,
                           "Cannot perform an update on a time-series collection with a replacement "
                           "document or a pipeline");
            bson_destroy(out);
            return false;
        }
        bson_t sub;
        bson_append_document_begin(out, bson_iter_key(&op), -1, &sub);
        bson_iter_recurse(&op, &f);
        while (bson_iter_next(&f)) {
            const char *k = bson_iter_key(&f);
            if (!meta || !on_meta(k, meta)) {
                bson_set_error(err, 0, 72,
                               "Cannot perform an update on a time-series collection which updates a field that is "
                               "not the metaField '%s'",
                               meta ? meta : "");
                bson_append_document_end(out, &sub);
                bson_destroy(out);
                return false;
            }
            char *path = bson_strdup_printf("meta%s", k + strlen(meta));
            bson_append_iter(&sub, path, -1, &f);
            bson_free(path);
        }
        bson_append_document_end(out, &sub);
    }
    return true;
}

bool store_ts_update(sim_store *store, const char *db, const char *coll, const bson_t *q, const bson_t *u, bool multi,
                     bool upsert, sim_update_result *res, store_emit_fn emit, store_group_fn group, store_stmt_fn stmt,
                     void *ctx, bson_error_t *err)
{
    bson_t ts;
    memset(res, 0, sizeof *res);
    scoll *b = ts_buckets_of(store, db, coll, &ts, err);
    if (!b || !ts_filter_supported(q, err))
        return false;
    const char *meta = ts_meta_field(&ts);
    bson_t tu = BSON_INITIALIZER;
    if (ts_v50(store)) {
        if (!multi) {
            bson_set_error(err, 0, 72, "Cannot perform a non-multi update on a time-series collection");
            return false;
        }
        if (upsert) {
            bson_set_error(err, 0, 72, "Cannot perform an upsert on a time-series collection");
            return false;
        }
        if (!meta) {
            bson_set_error(err, 0, 72,
                           "Cannot perform an update on a time-series collection that does not have a metaField");
            return false;
        }
        bson_destroy(&tu);
        if (!ts_meta_query(q, meta, err) || !ts_meta_update(u, meta, &tu, err))
            return false;
    } else if (upsert) {
        bson_set_error(err, 0, 2, "mongosim does not model upserts into a time-series collection");
        bson_destroy(&tu);
        return false;
    }
    bson_value_t *ids = NULL;
    size_t nids = 0, cap = 0;
    collect_ids(b->root, &ids, &nids, &cap);
    bool ok = true;
    for (size_t i = 0; i < nids && ok && (multi || res->matched == 0); i++) {
        tnode *nd = node_by_id(b, &ids[i]);
        if (!nd)
            continue;
        if (ts_v50(store)) {
            if (!ts_match(nd->doc, q, meta, "meta"))
                continue;
            bson_t idq = BSON_INITIALIZER;
            sim_update_result one;
            bson_append_value(&idq, "_id", 3, &ids[i]);
            ts_catalog_forget(store->ts, &ids[i].value.v_oid);
            ok = store_update(store, db, b->name, &idq, &tu, false, &one, emit, ctx, err);
            bson_destroy(&idq);
            res->matched += one.matched;
            res->modified += one.modified;
            store_update_result_clear(&one);
            continue;
        }
        bson_t **ms;
        size_t n;
        if (!ts_bucket_measurements(store->ts, &ts, nd->doc, &ms, &n)) {
            bson_set_error(err, 0, 2, "mongosim cannot unpack a compressed bucket it did not write");
            ok = false;
            break;
        }
        bson_t **keep = malloc((n ? n : 1) * sizeof *keep);
        const bson_t **changed = malloc((n ? n : 1) * sizeof *changed);
        bson_t *news = calloc(n ? n : 1, sizeof *news);
        if (!keep || !changed || !news)
            abort();
        size_t nkeep = 0, nchanged = 0;
        for (size_t j = 0; j < n && ok; j++) {
            bool ch = false;
            if ((multi || res->matched == 0) && ts_match(ms[j], q, NULL, NULL)) {
                bson_t o;
                res->matched++;
                if (!update_apply(ms[j], u, store->format, false, &news[nchanged], &o, &ch, err)) {
                    ok = false;
                    break;
                }
                if (ch) {
                    bson_destroy(&o);
                    changed[nchanged] = &news[nchanged];
                    nchanged++;
                    res->modified++;
                }
            }
            if (!ch)
                keep[nkeep++] = ms[j];
        }
        if (ok && nchanged) {
            /* performAtomicWritesForUpdate: the side catalog's new buckets for the updated measurements, then the
             * original bucket's modification and the inserts in one atomic write. */
            ts_catalog *side = ts_catalog_new();
            ts_write *w;
            size_t nw, placed;
            bson_error_t *errs = calloc(nchanged, sizeof *errs);
            if (!errs)
                abort();
            bson_t *buckets_ts = &ts;
            ts_catalog_insert(side, b->uuid, buckets_ts, store->format, store->ts_max_count, changed, nchanged, true,
                              lookup_nothing, NULL, &w, &nw, errs, &placed);
            for (size_t j = 0; j < nchanged && ok; j++)
                if (errs[j].code) {
                    *err = errs[j];
                    ok = false;
                }
            if (ok) {
                if (group)
                    group(ctx, true);
                modify_bucket(store, db, b, nd, &ts, keep, nkeep, emit, ctx);
                if (stmt)
                    stmt(ctx, NULL, 0); /* the inserts carry no stmtId (InsertStatement without one) */
                for (size_t k = 0; k < nw && ok; k++)
                    ok = insert_prepared(store, db, b->name, bson_copy(w[k].doc), emit, ctx, err);
                if (group)
                    group(ctx, false);
                ts_catalog_adopt(store->ts, side);
            }
            ts_writes_free(w, nw);
            ts_catalog_free(side);
            free(errs);
        }
        for (size_t j = 0; j < nchanged; j++)
            bson_destroy(&news[j]);
        free(news);
        free(changed);
        free(keep);
        ts_measurements_free(ms, n);
    }
    for (size_t i = 0; i < nids; i++)
        bson_value_destroy(&ids[i]);
    free(ids);
    bson_destroy(&tu);
    return ok;
}

/* ---------------------------------------------------------------------------------------------------------------
 * DDL
 * ------------------------------------------------------------------------------------------------------------- */

/* Removes db.coll's view definition ('d' on db.system.views, o {_id}). */
static void delete_view(sim_store *s, const char *db, const char *coll, store_emit_fn emit, void *ctx)
{
    scoll *v = coll_get(s, db, SYSTEM_VIEWS);
    tnode *nd = view_node(s, db, coll);
    if (v && nd)
        delete_node(s, db, v, nd, emit, ctx);
}

/* A time-series collection's buckets collection NAME (the viewless collection itself when marked): made with the
 * create's options, clustered, logged as its create, then its default index when it has a metaField
 * ({createIndexes: coll, v, key, name}: op_observer_impl.cpp, onCreateIndex); marked isTimeseries when viewless. */
static void create_buckets(sim_store *store, const char *db, const char *name, const ddl_create *d, store_emit_fn emit,
                           void *ctx, bool marked)
{
    scoll *b = coll_new(store, db, name);
    b->options = bson_copy(&d->options);
    b->clustered = true;
    catalog_add(store, db, b);
    emit_create(emit, ctx, db, b);
    if (d->has_index) {
        bson_t o = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&o, "createIndexes", b->name);
        bson_concat(&o, &d->index);
        emit_cmd(emit, ctx, db, b->uuid, &o, NULL, marked);
        bson_destroy(&o);
    }
}

bool store_create(sim_store *store, const char *db, const char *coll, store_emit_fn emit, void *ctx, bson_error_t *err)
{
    return store_create_cmd(store, db, coll, NULL, emit, ctx, err);
}

bool store_create_cmd(sim_store *store, const char *db, const char *coll, const bson_t *cmd, store_emit_fn emit,
                      void *ctx, bson_error_t *err)
{
    if (!check_ns(db, coll, err))
        return false;
    ddl_create d;
    bson_t empty = BSON_INITIALIZER;
    if (!cmd) {
        BSON_APPEND_UTF8(&empty, "create", coll);
        cmd = &empty;
    }
    bool parsed = ddl_parse_create(cmd, db, coll, &d, err);
    bson_destroy(&empty);
    if (!parsed)
        return false;
    bool ok = false;
    if (coll_get(store, db, coll) || view_node(store, db, coll)) {
        bson_set_error(err, 0, 48, "Collection %s.%s already exists.", db, coll);
        goto out;
    }
    if (d.kind == DDL_TIMESERIES && coll_get(store, db, d.view_on)) {
        bson_set_error(err, 0, 48, "Bucket Collection already exists. NS: %s.%s", db, d.view_on);
        goto out;
    }
    if (d.kind == DDL_TIMESERIES && !check_ns(db, d.view_on, err))
        goto out;
    if (d.kind == DDL_COLLECTION) {
        scoll *c = coll_new(store, db, coll);
        if (!bson_empty(&d.options))
            c->options = bson_copy(&d.options);
        c->clustered = d.clustered;
        catalog_add(store, db, c);
        emit_create(emit, ctx, db, c);
        ok = true;
    } else if (d.kind == DDL_VIEW) {
        ok = insert_view(store, db, coll, d.view_on, &d.pipeline, emit, ctx, err);
    } else if (store->ts_viewless) {
        /* A viewless time-series collection (featureFlagCreateViewlessTimeseriesCollections): one collection under
         * its own name with the buckets collection's options, logged as a create of NAME marked isTimeseries, then
         * its default index (marked too) (jstests/core/timeseries/write/timeseries_viewless_oplog_entries.js finds the
         * create {op: "c", ns: "DB.$cmd", o.create, isTimeseries: true} and the meta index's createIndexes; no
         * system.buckets.NAME and no view: jstests/core/timeseries/ddl/timeseries_list_collections.js). */
        create_buckets(store, db, coll, &d, emit, ctx, true);
        ok = true;
    } else {
        /* _createTimeseries: the buckets collection, its default index (with a metaField), then the view. */
        create_buckets(store, db, d.view_on, &d, emit, ctx, false);
        ok = insert_view(store, db, coll, d.view_on, &d.pipeline, emit, ctx, err);
    }
out:
    ddl_create_clear(&d);
    return ok;
}

bool store_coll_mod_images(sim_store *store, const char *db, const char *coll, bool enabled, store_emit_fn emit,
                           void *ctx, bson_error_t *err)
{
    if (!check_ns(db, coll, err))
        return false;
    scoll *c = coll_get(store, db, coll);
    if (!c) {
        /* coll_mod.cpp: the namespace must be a collection or a view */
        bson_set_error(err, 0, 26, "ns does not exist: %s.%s", db, coll);
        return false;
    }
    /* coll_mod.cpp, _collModInternal: the entry is {collMod: coll, <the changed options>}, o2
     * {collectionOptions_old: <the options before, with the uuid>} (OpObserverImpl::onCollMod). */
    bson_t o = BSON_INITIALIZER, o2 = BSON_INITIALIZER, old;
    BSON_APPEND_UTF8(&o, "collMod", c->name);
    ddl_append_images(&o, enabled);
    BSON_APPEND_DOCUMENT_BEGIN(&o2, "collectionOptions_old", &old);
    BSON_APPEND_BINARY(&old, "uuid", BSON_SUBTYPE_UUID, c->uuid, 16);
    if (c->options)
        bson_concat(&old, c->options);
    bson_append_document_end(&o2, &old);
    /* the new options: the old ones without the images option, with it appended when enabled */
    bson_t *next = bson_new();
    if (c->options)
        bson_copy_to_excluding_noinit(c->options, next, "changeStreamPreAndPostImages", NULL);
    if (enabled)
        ddl_append_images(next, true);
    if (c->options)
        bson_destroy(c->options);
    c->options = next;
    emit_cmd(emit, ctx, db, c->uuid, &o, &o2, coll_viewless(c));
    bson_destroy(&o);
    bson_destroy(&o2);
    return true;
}

bool store_drop(sim_store *store, const char *db, const char *coll, bool *existed, store_emit_fn emit, void *ctx,
                bson_error_t *err)
{
    if (existed)
        *existed = false;
    if (!check_ns(db, coll, err))
        return false;
    /* A view's drop deletes its definition; a time-series collection's (by its name or its buckets collection's)
     * deletes the view, then drops the buckets collection (drop_collection.cpp, _dropView then
     * dropCollectionEvenIfSystem). */
    const char *view = coll;
    size_t plen = strlen(BUCKETS_PREFIX);
    if (strncmp(coll, BUCKETS_PREFIX, plen) == 0 && view_node(store, db, coll + plen))
        view = coll + plen;
    tnode *vn = view == coll && coll_get(store, db, coll) ? NULL : view_node(store, db, view);
    if (vn) {
        scoll *b = view_buckets(store, db, view, vn->doc);
        if (b || view == coll) {
            delete_view(store, db, view, emit, ctx);
            if (existed)
                *existed = true;
            if (!b)
                return true;
            scoll *bc = catalog_remove(store, db, b->name);
            emit_drop(emit, ctx, db, bc);
            coll_free(bc);
            return true;
        }
    }
    scoll *c = catalog_remove(store, db, coll);
    if (!c)
        return true;
    if (existed)
        *existed = true;
    emit_drop(emit, ctx, db, c);
    coll_free(c);
    return true;
}

static void emit_rename(store_emit_fn emit, void *ctx, const char *db, const uint8_t *uuid, const char *from_ns,
                        const char *to_ns, const scoll *dropped)
{
    bson_t o = BSON_INITIALIZER, o2 = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&o, "renameCollection", from_ns);
    BSON_APPEND_UTF8(&o, "to", to_ns);
    BSON_APPEND_BOOL(&o, "stayTemp", false);
    if (dropped) {
        BSON_APPEND_BINARY(&o, "dropTarget", BSON_SUBTYPE_UUID, dropped->uuid, 16);
        BSON_APPEND_INT32(&o2, "numRecords", (int32_t)dropped->count);
    }
    emit_cmd(emit, ctx, db, uuid, &o, dropped ? &o2 : NULL, false);
    bson_destroy(&o);
    bson_destroy(&o2);
}

static void emit_inserts(tnode *t, const char *db, const scoll *c, store_emit_fn emit, void *ctx)
{
    while (t) {
        emit_inserts(t->l, db, c, emit, ctx);
        emit_doc_op(emit, ctx, "i", db, c, t->doc, NULL);
        t = t->r;
    }
}

bool store_rename(sim_store *store, const char *from_db, const char *from_coll, const char *to_db, const char *to_coll,
                  bool drop_target, store_emit_fn emit, void *ctx, bson_error_t *err)
{
    if (!check_ns(from_db, from_coll, err) || !check_ns(to_db, to_coll, err))
        return false;
    if (!coll_get(store, from_db, from_coll)) {
        /* rename_collection.cpp: a view cannot be renamed (nor, then, a time-series collection). */
        if (view_node(store, from_db, from_coll))
            bson_set_error(err, 0, 166, "cannot rename view: %s.%s", from_db, from_coll);
        else
            bson_set_error(err, 0, 26, "Source collection %s.%s does not exist", from_db, from_coll);
        return false;
    }
    if (view_node(store, to_db, to_coll)) {
        bson_set_error(err, 0, 48, "a view already exists with that name: %s.%s", to_db, to_coll);
        return false;
    }
    if (strcmp(from_db, to_db) == 0 && strcmp(from_coll, to_coll) == 0) {
        bson_set_error(err, 0, 20, "Can't rename a collection to itself");
        return false;
    }
    scoll *target = coll_get(store, to_db, to_coll);
    if (target && !drop_target) {
        bson_set_error(err, 0, 48, "target namespace exists");
        return false;
    }
    char *from_ns = bson_strdup_printf("%s.%s", from_db, from_coll);
    char *to_ns = bson_strdup_printf("%s.%s", to_db, to_coll);
    if (target)
        target = catalog_remove(store, to_db, to_coll);
    scoll *src = catalog_remove(store, from_db, from_coll);

    if (strcmp(from_db, to_db) == 0) {
        emit_rename(emit, ctx, from_db, src->uuid, from_ns, to_ns, target);
        free(src->name);
        src->name = bson_strdup(to_coll);
        catalog_add(store, to_db, src);
    } else {
        /* SERVER-30371: copy into a temporary collection of the target db, rename it over the target, drop the
         * source. */
        static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        char tmpname[40];
        do {
            char r[6];
            for (int i = 0; i < 5; i++)
                r[i] = alnum[store_rand(store) % (sizeof alnum - 1)];
            r[5] = '\0';
            snprintf(tmpname, sizeof tmpname, "tmp%s.renameCollection", r);
        } while (coll_get(store, to_db, tmpname));
        scoll *tmp = coll_new(store, to_db, tmpname);
        tmp->options = src->options ? bson_copy(src->options) : NULL; /* the temporary collection takes its options */
        tmp->clustered = src->clustered;
        emit_create(emit, ctx, to_db, tmp);
        emit_inserts(src->root, to_db, tmp, emit, ctx);
        char *tmp_ns = bson_strdup_printf("%s.%s", to_db, tmpname);
        emit_rename(emit, ctx, to_db, tmp->uuid, tmp_ns, to_ns, target);
        bson_free(tmp_ns);
        emit_drop(emit, ctx, from_db, src);
        /* The documents move to the new collection object. */
        tmp->root = src->root;
        tmp->count = src->count;
        src->root = NULL;
        free(tmp->name);
        tmp->name = bson_strdup(to_coll);
        catalog_add(store, to_db, tmp);
        coll_free(src);
    }
    coll_free(target);
    bson_free(from_ns);
    bson_free(to_ns);
    return true;
}

bool store_drop_database(sim_store *store, const char *db, store_emit_fn emit, void *ctx, bson_error_t *err)
{
    if (!check_ns(db, NULL, err))
        return false;
    size_t pos;
    sdb *d = db_get(store, db, &pos);
    if (!d)
        return true;
    for (size_t i = 0; i < d->n; i++)
        emit_drop(emit, ctx, db, d->colls[i]);
    bson_t o = BSON_INITIALIZER;
    BSON_APPEND_INT32(&o, "dropDatabase", 1);
    emit_cmd(emit, ctx, db, NULL, &o, NULL, false);
    bson_destroy(&o);
    db_free(d);
    memmove(&store->dbs[pos], &store->dbs[pos + 1], (store->n - pos - 1) * sizeof *store->dbs);
    store->n--;
    return true;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Reads
 * ------------------------------------------------------------------------------------------------------------- */

typedef struct {
    bool exact, has_lo, lo_incl, has_hi, hi_incl, none;
    bson_iter_t eq, lo, hi;
    int bracket; /* canonical type rank the range is restricted to, or INT32_MIN */
} id_filter;

static int rank_of(const bson_iter_t *it)
{
    return update_type_rank(bson_iter_type(it));
}

static bool parse_filter(const bson_t *filter, id_filter *f, bson_error_t *err)
{
    memset(f, 0, sizeof *f);
    f->bracket = INT32_MIN;
    bson_iter_t it;
    if (!filter || bson_empty(filter))
        return true;
    if (!bson_iter_init(&it, filter) || !bson_iter_next(&it) || strcmp(bson_iter_key(&it), "_id") != 0)
        goto bad;
    bson_iter_t val = it;
    if (bson_iter_next(&it))
        goto bad;
    bson_iter_t sub;
    if (!BSON_ITER_HOLDS_DOCUMENT(&val) || !bson_iter_recurse(&val, &sub) || !bson_iter_next(&sub) ||
        bson_iter_key(&sub)[0] != '$') {
        f->exact = true;
        f->eq = val;
        return true;
    }
    do {
        const char *op = bson_iter_key(&sub);
        bool gt = strcmp(op, "$gt") == 0, gte = strcmp(op, "$gte") == 0;
        bool lt = strcmp(op, "$lt") == 0, lte = strcmp(op, "$lte") == 0;
        if (strcmp(op, "$eq") == 0) {
            if (f->exact && update_compare_iters(&f->eq, &sub) != 0)
                f->none = true;
            f->exact = true;
            f->eq = sub;
            continue;
        }
        if (!gt && !gte && !lt && !lte)
            goto bad;
        int r = rank_of(&sub);
        if (r != -1 && r != 100) {
            if (f->bracket != INT32_MIN && f->bracket != r)
                f->none = true;
            f->bracket = r;
        }
        if (gt || gte) {
            int c = f->has_lo ? update_compare_iters(&sub, &f->lo) : 1;
            if (c > 0 || (c == 0 && gt)) {
                f->lo = sub;
                f->lo_incl = gte;
                f->has_lo = true;
            }
        } else {
            int c = f->has_hi ? update_compare_iters(&sub, &f->hi) : -1;
            if (c < 0 || (c == 0 && lt)) {
                f->hi = sub;
                f->hi_incl = lte;
                f->has_hi = true;
            }
        }
    } while (bson_iter_next(&sub));
    return true;
bad : {
    char *js = bson_as_relaxed_extended_json(filter, NULL);
    bson_set_error(err, 0, 2,
                   "mongosim supports only {}, {_id: X} and {_id: {$gt|$gte|$lt|$lte|$eq: X}} filters, "
                   "got %s",
                   js);
    bson_free(js);
    return false;
}
}

bool store_filter_supported(const bson_t *filter, bson_error_t *err)
{
    id_filter f;
    return parse_filter(filter, &f, err);
}

/* The documents matching filter, in _id order, strictly after `after` in BSON order when it is given (a cursor's
 * next batch: continuing by order rather than by a $gt filter keeps _ids of other types, which $gt would bracket
 * away). */
static void find_impl(const sim_store *store, const char *db, const char *coll, const bson_t *filter,
                      const bson_value_t *after, store_doc_fn fn, void *ctx)
{
    id_filter f;
    bson_error_t err;
    scoll *c = coll_get(store, db, coll);
    if (!c || !parse_filter(filter, &f, &err) || f.none)
        return;
    bson_t after_doc = BSON_INITIALIZER;
    bson_iter_t after_it;
    bool has_after = after != NULL && bson_append_value(&after_doc, "_id", 3, after) &&
                     bson_iter_init_find(&after_it, &after_doc, "_id");
    if (f.exact) {
        tnode *nd = treap_find(c->root, &f.eq);
        bson_iter_t id;
        if (nd)
            tnode_id(nd, &id);
        if (!nd || (has_after && update_compare_iters(&id, &after_it) <= 0) ||
            (f.has_lo && update_compare_iters(&id, &f.lo) < (f.lo_incl ? 0 : 1)) ||
            (f.has_hi && update_compare_iters(&id, &f.hi) > (f.hi_incl ? 0 : -1))) {
            bson_destroy(&after_doc);
            return;
        }
        fn(ctx, nd->doc);
        bson_destroy(&after_doc);
        return;
    }
    tnode *nd = f.has_lo ? treap_lower(c->root, &f.lo, !f.lo_incl) : treap_first(c->root);
    if (has_after) {
        bson_iter_t id;
        if (nd)
            tnode_id(nd, &id);
        if (nd && update_compare_iters(&id, &after_it) <= 0)
            nd = treap_lower(c->root, &after_it, true);
    }
    while (nd) {
        bson_iter_t id;
        tnode_id(nd, &id);
        int r = rank_of(&id);
        if (f.bracket != INT32_MIN && r > f.bracket)
            break;
        if (f.has_hi) {
            int cmp = update_compare_iters(&id, &f.hi);
            if (cmp > 0 || (cmp == 0 && !f.hi_incl))
                break;
        }
        if (f.bracket == INT32_MIN || r == f.bracket)
            if (!fn(ctx, nd->doc))
                break;
        nd = treap_lower(c->root, &id, true);
    }
    bson_destroy(&after_doc);
}

void store_find(const sim_store *store, const char *db, const char *coll, const bson_t *filter, store_doc_fn fn,
                void *ctx)
{
    find_impl(store, db, coll, filter, NULL, fn, ctx);
}

void store_find_after(const sim_store *store, const char *db, const char *coll, const bson_t *filter,
                      const bson_value_t *after, store_doc_fn fn, void *ctx)
{
    find_impl(store, db, coll, filter, after, fn, ctx);
}

int64_t store_count(const sim_store *store, const char *db, const char *coll)
{
    scoll *c = coll_get(store, db, coll);
    return c ? c->count : 0;
}

void store_list_databases(const sim_store *store, store_name_fn fn, void *ctx)
{
    for (size_t i = 0; i < store->n; i++)
        fn(ctx, store->dbs[i]->name, NULL);
}

void store_list_collections(const sim_store *store, const char *db, store_name_fn fn, void *ctx)
{
    sdb *d = db_get(store, db, NULL);
    for (size_t i = 0; d && i < d->n; i++)
        fn(ctx, d->colls[i]->name, d->colls[i]->uuid);
}

typedef struct {
    store_ns_info info;
    bson_t *options; /* on the heap: a bson_t must not move (libbson keeps pointers into it) */
} ns_entry;

typedef struct {
    ns_entry *v;
    size_t n, cap;
} ns_list;

static ns_entry *ns_push(ns_list *l)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->v = bson_realloc(l->v, l->cap * sizeof *l->v);
    }
    ns_entry *e = &l->v[l->n++];
    memset(e, 0, sizeof *e);
    return e;
}

/* The views of db (in db.system.views) as listCollections shows them (commands/list_collections.cpp): a view
 * {type: "view", options: {viewOn, pipeline}, info: {readOnly: true}}; a time-series collection {type: "timeseries",
 * options: {timeseries[, expireAfterSeconds]} from its buckets collection, info: {readOnly: false}}. */
static void list_views(const sim_store *s, const char *db, const tnode *t, ns_list *l)
{
    size_t plen = strlen(db) + 1;
    while (t) {
        list_views(s, db, t->l, l);
        bson_iter_t it, f;
        const char *id =
            bson_iter_init_find(&it, t->doc, "_id") && BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : NULL;
        if (id && strncmp(id, db, plen - 1) == 0 && id[plen - 1] == '.') {
            ns_entry *e = ns_push(l);
            e->info.name = id + plen;
            e->options = bson_new();
            scoll *b = view_buckets(s, db, e->info.name, t->doc);
            if (b) {
                e->info.type = "timeseries";
                if (bson_iter_init_find(&f, b->options, "timeseries"))
                    bson_append_iter(e->options, NULL, 0, &f);
                if (bson_iter_init_find(&f, b->options, "expireAfterSeconds"))
                    bson_append_iter(e->options, NULL, 0, &f);
            } else {
                e->info.type = "view";
                e->info.read_only = true;
                if (bson_iter_init_find(&f, t->doc, "viewOn"))
                    bson_append_iter(e->options, NULL, 0, &f);
                if (bson_iter_init_find(&f, t->doc, "pipeline"))
                    bson_append_iter(e->options, NULL, 0, &f);
            }
        }
        t = t->r;
    }
}

static int cmp_ns(const void *a, const void *b)
{
    return strcmp(((const ns_entry *)a)->info.name, ((const ns_entry *)b)->info.name);
}

void store_list_namespaces(const sim_store *store, const char *db, store_ns_fn fn, void *ctx)
{
    sdb *d = db_get(store, db, NULL);
    ns_list l = {0};
    for (size_t i = 0; d && i < d->n; i++) {
        const scoll *c = d->colls[i];
        ns_entry *e = ns_push(&l);
        e->info.name = c->name;
        e->info.type = "collection";
        e->info.uuid = c->uuid;
        e->info.id_index = !c->clustered;
        if (coll_viewless(c)) {
            /* A viewless time-series collection: {type: "timeseries", options: its options without the validator
             * (clusteredIndex: true stays: "TODO(SERVER-105339): listCollections should not return clusteredIndex
             * field"), info: {readOnly: false, uuid}}, and no system.buckets.NAME beside it
             * (jstests/core/timeseries/ddl/timeseries_list_collections.js). */
            e->info.type = "timeseries";
            e->options = bson_new();
            bson_copy_to_excluding_noinit(c->options, e->options, "validator", NULL);
            continue;
        }
        e->options = c->options ? bson_copy(c->options) : bson_new();
    }
    scoll *views = coll_get(store, db, SYSTEM_VIEWS);
    if (views)
        list_views(store, db, views->root, &l);
    if (l.n > 1) /* qsort's array must not be NULL, even for no elements */
        qsort(l.v, l.n, sizeof *l.v, cmp_ns);
    for (size_t i = 0; i < l.n; i++) {
        l.v[i].info.options = l.v[i].options;
        fn(ctx, &l.v[i].info);
    }
    for (size_t i = 0; i < l.n; i++)
        bson_destroy(l.v[i].options);
    bson_free(l.v);
}

/* ---------------------------------------------------------------------------------------------------------------
 * mongodump layout
 * ------------------------------------------------------------------------------------------------------------- */

static bool load_file(sim_store *store, const char *path, const char *db, const char *coll, bson_error_t *err)
{
    FILE *fp = fopen(path, "rb");
    uint8_t *buf = NULL;
    if (!fp) {
        bson_set_error(err, 0, 1, "%s: %s", path, strerror(errno));
        return false;
    }
    struct stat st;
    if (fstat(fileno(fp), &st) != 0)
        goto io_fail;
    size_t size = (size_t)st.st_size;
    buf = bson_malloc(size ? size : 1);
    if (size && fread(buf, 1, size, fp) != size)
        goto io_fail;
    fclose(fp);
    fp = NULL;
    if (!coll_get(store, db, coll)) {
        bson_error_t e;
        if (!check_ns(db, coll, &e)) {
            bson_set_error(err, 0, 73, "%s: %s", path, e.message);
            goto fail;
        }
        catalog_add(store, db, coll_new(store, db, coll));
    }
    scoll *c = coll_get(store, db, coll);
    size_t off = 0;
    while (off < size) {
        uint32_t len;
        if (size - off < 5) {
            bson_set_error(err, 0, 2, "%s: truncated document at offset %zu", path, off);
            goto fail;
        }
        memcpy(&len, buf + off, 4);
        len = BSON_UINT32_FROM_LE(len);
        bson_t view;
        size_t bad = 0;
        if (len < 5 || len > size - off) {
            bson_set_error(err, 0, 2, "%s: bad document length %u at offset %zu", path, len, off);
            goto fail;
        }
        if (!bson_init_static(&view, buf + off, len) || !bson_validate(&view, BSON_VALIDATE_NONE, &bad)) {
            bson_set_error(err, 0, 2, "%s: invalid BSON document at offset %zu (error at byte %zu)", path, off, bad);
            goto fail;
        }
        bson_t *d;
        bson_error_t e;
        if (!prepare_doc(&view, &d, &e)) {
            bson_set_error(err, 0, e.code, "%s: document at offset %zu: %s", path, off, e.message);
            goto fail;
        }
        tnode *nd = tnode_new(store, d);
        bson_iter_t nid;
        tnode_id(nd, &nid);
        if (treap_find(c->root, &nid)) {
            char *k = dup_key_text(&nid);
            bson_set_error(err, 0, 11000,
                           "%s: document at offset %zu: E11000 duplicate key error collection: %s.%s index: _id_ "
                           "dup key: %s",
                           path, off, db, coll, k);
            bson_free(k);
            bson_destroy(d);
            free(nd);
            goto fail;
        }
        c->root = treap_insert(c->root, nd);
        c->count++;
        off += len;
    }
    bson_free(buf);
    return true;
io_fail:
    bson_set_error(err, 0, 1, "%s: %s", path, strerror(errno));
fail:
    if (fp)
        fclose(fp);
    bson_free(buf);
    return false;
}

/* DIR/<db>/<coll>.metadata.json, when present: the collection's options and UUID (mongodump writes them there). */
static bool load_metadata(sim_store *store, const char *dbdir, const char *db, const char *coll, bson_error_t *err)
{
    char *path = bson_strdup_printf("%s/%s.metadata.json", dbdir, coll);
    FILE *fp = fopen(path, "rb");
    bool ok = true;
    if (fp) {
        char *text = NULL;
        size_t len = 0, cap = 0;
        int ch;
        while ((ch = fgetc(fp)) != EOF) {
            if (len + 1 >= cap) {
                cap = cap ? cap * 2 : 4096;
                text = bson_realloc(text, cap);
            }
            text[len++] = (char)ch;
        }
        fclose(fp);
        bson_error_t je;
        bson_t *meta = text ? bson_new_from_json((const uint8_t *)text, (ssize_t)len, &je) : NULL;
        bson_iter_t it;
        bson_t opts;
        scoll *c = coll_get(store, db, coll);
        if (meta && c && bson_iter_init_find(&it, meta, "uuid") && BSON_ITER_HOLDS_UTF8(&it)) {
            uint32_t hlen;
            const char *hex = bson_iter_utf8(&it, &hlen);
            uint8_t uuid[16];
            bool good = hlen == 32;
            for (int i = 0; good && i < 16; i++) {
                unsigned int byte = 0;
                good = isxdigit((unsigned char)hex[2 * i]) && isxdigit((unsigned char)hex[2 * i + 1]) &&
                       sscanf(hex + 2 * i, "%2x", &byte) == 1;
                uuid[i] = (uint8_t)byte;
            }
            if (good)
                memcpy(c->uuid, uuid, 16);
        }
        if (!meta) {
            bson_set_error(err, 0, 2, "%s: %s", path, text ? je.message : "empty file");
            ok = false;
        } else if (c && bson_iter_init_find(&it, meta, "options") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            uint32_t olen;
            const uint8_t *odata;
            bson_iter_document(&it, &olen, &odata);
            if (bson_init_static(&opts, odata, olen) && !bson_empty(&opts)) {
                if (c->options)
                    bson_destroy(c->options);
                c->options = bson_copy(&opts);
                c->clustered = bson_iter_init_find(&it, &opts, "clusteredIndex") && bson_iter_as_bool(&it);
            }
        }
        if (meta)
            bson_destroy(meta);
        bson_free(text);
    }
    bson_free(path);
    return ok;
}

/* Calls each(arg, db, dbdir, file) for every file of every database folder of a saved state (names starting with a
 * dot left out), and after(arg, db, dbdir) once a folder's files are done; stops at the first that fails. */
typedef bool (*saved_file_fn)(void *arg, const char *db, const char *dbdir, const char *file, bson_error_t *err);
typedef void (*saved_dir_fn)(void *arg, const char *db, const char *dbdir);

static bool walk_saved(const char *dir, saved_file_fn each, saved_dir_fn after, void *arg, bson_error_t *err)
{
    DIR *top = opendir(dir);
    if (!top) {
        bson_set_error(err, 0, 1, "%s: %s", dir, strerror(errno));
        return false;
    }
    struct dirent *de;
    bool ok = true;
    while (ok && (de = readdir(top))) {
        if (de->d_name[0] == '.')
            continue;
        char *dbdir = bson_strdup_printf("%s/%s", dir, de->d_name);
        struct stat st;
        DIR *dd = stat(dbdir, &st) == 0 && S_ISDIR(st.st_mode) ? opendir(dbdir) : NULL;
        struct dirent *fe;
        while (ok && dd && (fe = readdir(dd)))
            if (fe->d_name[0] != '.')
                ok = each(arg, de->d_name, dbdir, fe->d_name, err);
        if (dd) {
            closedir(dd);
            if (ok && after)
                after(arg, de->d_name, dbdir);
        }
        bson_free(dbdir);
    }
    closedir(top);
    return ok;
}

/* A collection's COLL.bson (and its COLL.metadata.json) loaded. */
static bool load_saved(void *arg, const char *db, const char *dbdir, const char *file, bson_error_t *err)
{
    sim_store *store = arg;
    size_t l = strlen(file);
    if (l <= 5 || strcmp(file + l - 5, ".bson") != 0)
        return true;
    char *coll = bson_strndup(file, l - 5);
    char *path = bson_strdup_printf("%s/%s", dbdir, file);
    bool ok = load_file(store, path, db, coll, err) && load_metadata(store, dbdir, db, coll, err);
    bson_free(coll);
    bson_free(path);
    return ok;
}

bool store_load_dir(sim_store *store, const char *dir, bson_error_t *err)
{
    return walk_saved(dir, load_saved, NULL, store, err);
}

static bool save_tree(FILE *fp, const tnode *t)
{
    while (t) {
        if (!save_tree(fp, t->l))
            return false;
        if (fwrite(bson_get_data(t->doc), 1, t->doc->len, fp) != t->doc->len)
            return false;
        t = t->r;
    }
    return true;
}

static bool save_metadata(const char *dbdir, const scoll *c, bson_error_t *err)
{
    char *path = bson_strdup_printf("%s/%s.metadata.json", dbdir, c->name);
    bson_t meta = BSON_INITIALIZER, none = BSON_INITIALIZER;
    BSON_APPEND_DOCUMENT(&meta, "options", c->options ? c->options : &none);
    /* the collection's UUID, as mongodump writes it (32 hex digits): a restart keeps it, as a server does */
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", c->uuid[i]);
    BSON_APPEND_UTF8(&meta, "uuid", hex);
    char *json = bson_as_canonical_extended_json(&meta, NULL);
    FILE *fp = fopen(path, "wb");
    bool ok = fp && json && fputs(json, fp) >= 0;
    if (fp && fclose(fp) != 0)
        ok = false;
    if (!ok)
        bson_set_error(err, 0, 1, "%s: %s", path, strerror(errno));
    bson_free(json);
    bson_destroy(&meta);
    bson_free(path);
    return ok;
}

/* Whether `name`, a file of database folder `db` in a saved state, is one store_save_dir writes for the store as it
 * is now: COLL.bson and COLL.metadata.json of a collection. */
static bool saved_file_current(const sim_store *store, const char *db, const char *name)
{
    size_t l = strlen(name);
    const char *suffix = NULL;
    if (l > 5 && strcmp(name + l - 5, ".bson") == 0)
        suffix = name + l - 5;
    else if (l > 14 && strcmp(name + l - 14, ".metadata.json") == 0)
        suffix = name + l - 14;
    if (!suffix)
        return true; /* not ours: left alone */
    char *coll = bson_strndup(name, (size_t)(suffix - name));
    const scoll *c = coll_get(store, db, coll);
    bson_free(coll);
    return c != NULL;
}

/* What an earlier save wrote for collections and databases dropped (or renamed) since, removed: without this a
 * restart from the state would bring them back, with no oplog entry that created them. */
static bool remove_stale(void *arg, const char *db, const char *dbdir, const char *file, bson_error_t *err)
{
    if (saved_file_current(arg, db, file))
        return true;
    char *path = bson_strdup_printf("%s/%s", dbdir, file);
    bool ok = unlink(path) == 0 || errno == ENOENT;
    if (!ok)
        bson_set_error(err, 0, 1, "%s: %s", path, strerror(errno));
    bson_free(path);
    return ok;
}

static void remove_stale_dir(void *arg, const char *db, const char *dbdir)
{
    if (!db_get(arg, db, NULL))
        rmdir(dbdir); /* empty now, unless it holds files that are not ours */
}

bool store_save_dir(const sim_store *store, const char *dir, bson_error_t *err)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        bson_set_error(err, 0, 1, "%s: %s", dir, strerror(errno));
        return false;
    }
    for (size_t i = 0; i < store->n; i++) {
        sdb *d = store->dbs[i];
        char *dbdir = bson_strdup_printf("%s/%s", dir, d->name);
        if (mkdir(dbdir, 0755) != 0 && errno != EEXIST) {
            bson_set_error(err, 0, 1, "%s: %s", dbdir, strerror(errno));
            bson_free(dbdir);
            return false;
        }
        for (size_t j = 0; j < d->n; j++) {
            char *path = bson_strdup_printf("%s/%s.bson", dbdir, d->colls[j]->name);
            FILE *fp = fopen(path, "wb");
            bool ok = fp && save_tree(fp, d->colls[j]->root);
            if (fp && fclose(fp) != 0)
                ok = false;
            if (!ok) {
                bson_set_error(err, 0, 1, "%s: %s", path, strerror(errno));
                bson_free(path);
                bson_free(dbdir);
                return false;
            }
            bson_free(path);
            if (!save_metadata(dbdir, d->colls[j], err)) {
                bson_free(dbdir);
                return false;
            }
        }
        bson_free(dbdir);
    }
    return walk_saved(dir, remove_stale, remove_stale_dir, (void *)store, err);
}

const char *store_code_name(int code)
{
    switch (code) {
    case 0:
        return "OK";
    case 1:
        return "InternalError";
    case 2:
        return "BadValue";
    case 4:
        return "NoSuchKey";
    case 8:
        return "UnknownError";
    case 9:
        return "FailedToParse";
    case 11:
        return "UserNotFound";
    case 13:
        return "Unauthorized";
    case 14:
        return "TypeMismatch";
    case 18:
        return "AuthenticationFailed";
    case 20:
        return "IllegalOperation";
    case 26:
        return "NamespaceNotFound";
    case 28:
        return "PathNotViable";
    case 40:
        return "ConflictingUpdateOperators";
    case 43:
        return "CursorNotFound";
    case 48:
        return "NamespaceExists";
    case 50:
        return "MaxTimeMSExpired";
    case 56:
        return "EmptyFieldName";
    case 59:
        return "CommandNotFound";
    case 66:
        return "ImmutableField";
    case 72:
        return "InvalidOptions";
    case 73:
        return "InvalidNamespace";
    case 96:
        return "OperationFailed";
    case 112:
        return "WriteConflict";
    case 125:
        return "CommandFailed";
    case 64:
        return "WriteConcernFailed"; /* 7.0; renamed WriteConcernTimeout in 8.1 (see commands.c, write concern) */
    case 136:
        return "CappedPositionLost";
    case 166:
        return "CommandNotSupportedOnView";
    case 189:
        return "PrimarySteppedDown";
    case 197:
        return "InvalidIndexSpecificationOption";
    case 251:
        return "NoSuchTransaction";
    case 256:
        return "TransactionCommitted";
    case 263:
        return "OperationNotSupportedInTransaction";
    case 286:
        return "ChangeStreamHistoryLost";
    case 10107:
        return "NotWritablePrimary";
    case 10334:
        return "BSONObjectTooLarge";
    case 11000:
        return "DuplicateKey";
    case 11600:
        return "InterruptedAtShutdown";
    case 11601:
        return "Interrupted";
    case 13435:
        return "NotPrimaryNoSecondaryOk";
    case 13436:
        return "NotPrimaryOrSecondary";
    case 17419:
        return "Location17419";
    case 40414:
        return "Location40414";
    case 40415:
        return "Location40415";
    case 51024:
        return "Location51024";
    case 5979700:
        return "Location5979700";
    case 5979702:
        return "Location5979702";
    case 5979703:
        return "Location5979703";
    case 5979704:
        return "Location5979704";
    default:
        return "UnknownError";
    }
}

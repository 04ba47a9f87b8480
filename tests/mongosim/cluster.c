/*
 * cluster.c — mongosim as a sharded cluster: a router (mongos) whose config server metadata lives in this file, and
 * shards that are today's one-member replica sets (sim_server), all on one libev loop in one thread.
 *
 * NOTES: the router is a sim_server with is_router set, so it keeps the connection handling and wire framing; its
 * commands come here (cluster_dispatch). It talks to a shard in process: a write is handed to the shard's own command
 * handler (cmd_dispatch) on a connection that exists only for that call, and the reply is read back from its buffer,
 * so retryable writes, transactions and write errors behave on each shard exactly as on a replica set. Reads (find,
 * count) go to the shards' stores directly and keep only what each shard owns (orphans filtered by the chunk map), as
 * a mongos's shard filtering does. A shard's store gets two hooks: a sharded collection's UUID is the same on every
 * shard (config.collections uuid), and update o2 / delete o carry the shard key. Migrations are done here: the
 * recipient's copies and the donor's range deletion are written through the shards' stores with fromMigrate: true.
 * Every shard stamps its entries from one clock (cl->clock, see sim_next_ts).
 */
#include "cluster.h"

#include "hashkey.h"
#include "projection.h"
#include "sim_internal.h"
#include "txn.h"
#include "update.h"

#include <ev.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CL_MAX_SHARDS 64

typedef struct {
    char id[32];
    sim_server *srv;
    bool draining;
    bool removed; /* no longer in config.shards; its process part still serves its port */
    uint64_t topology_time;
} cl_shard;

typedef struct {
    bson_oid_t id;
    bson_t min, max;
    int shard;
    uint32_t major, minor;
    uint64_t since; /* onCurrentShardSince */
    bson_t history; /* [{validAfter, shard}], newest first */
} cl_chunk;

typedef struct {
    char ns[256];
    char db[128];
    char coll[128];
    bson_t key;
    char hashed[128]; /* the key's hashed field, "" for a range key */
    bool unique;
    uint8_t uuid[16];
    bson_oid_t epoch;
    uint64_t timestamp;
    int64_t lastmod_ms;
    cl_chunk **chunks; /* each its own allocation: a bson_t must not move */
    size_t nchunks;
    uint32_t major;
} cl_coll;

typedef struct {
    char name[128];
    int primary;
    uint8_t uuid[16];
    uint64_t timestamp;
} cl_db;

typedef struct cl_cursor {
    int64_t id;
    char ns[320];
    bson_t **docs;
    size_t n, pos;
    struct cl_cursor *next;
} cl_cursor;

typedef struct cl_txn {
    uint8_t lsid[16];
    int64_t txn_number;
    int parts[CL_MAX_SHARDS];
    size_t nparts;
    int decided; /* two-phase commit's decision: 0 none yet, 1 commit, 2 abort */
    struct cl_txn *next;
} cl_txn;

typedef struct cl_range_del {
    ev_timer timer;
    struct sim_cluster *cl;
    int shard;
    char ns[256];
    bson_t min, max;
    struct cl_range_del *next;
} cl_range_del;

struct sim_cluster {
    struct ev_loop *loop;
    sim_options opts;
    double orphan_delay;
    sim_server *router;
    cl_shard shards[CL_MAX_SHARDS];
    size_t nshards;
    uint64_t clock;
    cl_db *dbs;
    size_t ndbs;
    cl_coll **colls;
    size_t ncolls;
    cl_cursor *cursors;
    int64_t next_cursor;
    cl_txn *txns;
    cl_range_del *dels;
    struct cl_stream *streams; /* change streams through the router (cluster_stream.c) */
};

/* ---- small helpers ---- */

static void reply_doc_ok(sim_reply *r, bson_t *doc)
{
    BSON_APPEND_DOUBLE(doc, "ok", 1.0);
    reply_bson(r, doc);
    bson_destroy(doc);
}

static void append_uuid16(bson_t *b, const char *key, const uint8_t *u)
{
    bson_append_binary(b, key, -1, BSON_SUBTYPE_UUID, u, 16);
}

static void new_uuid16(uint8_t u[16])
{
    bson_oid_t oid;
    bson_oid_init(&oid, NULL);
    memcpy(u, oid.bytes, 12);
    uint32_t rnd = (uint32_t)rand() ^ (uint32_t)sim_now_ms();
    memcpy(u + 12, &rnd, 4);
    u[6] = (uint8_t)((u[6] & 0x0f) | 0x40);
    u[8] = (uint8_t)((u[8] & 0x3f) | 0x80);
}

static bool get_str(const bson_t *d, const char *key, const char **out)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, d, key) || !BSON_ITER_HOLDS_UTF8(&it))
        return false;
    *out = bson_iter_utf8(&it, NULL);
    return true;
}

static bool get_doc(const bson_t *d, const char *key, bson_t *out)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, d, key) || !(BSON_ITER_HOLDS_DOCUMENT(&it) || BSON_ITER_HOLDS_ARRAY(&it)))
        return false;
    uint32_t len;
    const uint8_t *p;
    if (BSON_ITER_HOLDS_DOCUMENT(&it))
        bson_iter_document(&it, &len, &p);
    else
        bson_iter_array(&it, &len, &p);
    return bson_init_static(out, p, len);
}

static bool iter_subdoc(const bson_iter_t *it, bson_t *out)
{
    uint32_t len;
    const uint8_t *p;
    if (BSON_ITER_HOLDS_DOCUMENT(it))
        bson_iter_document(it, &len, &p);
    else if (BSON_ITER_HOLDS_ARRAY(it))
        bson_iter_array(it, &len, &p);
    else
        return false;
    return bson_init_static(out, p, len);
}

static bool get_bool(const bson_t *d, const char *key)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, d, key) && bson_iter_as_bool(&it);
}

/* Copies cmd's fields except the listed ones (and what only the router reads: $db, writeConcern, $clusterTime,
 * $readPreference). */
static void copy_except(const bson_t *cmd, bson_t *out, const char *const *skip)
{
    static const char *const always[] = {"$db", "writeConcern", "$clusterTime", "$readPreference", NULL};
    bson_iter_t it;
    if (!bson_iter_init(&it, cmd))
        return;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        bool drop = false;
        for (const char *const *s = always; *s && !drop; s++)
            drop = strcmp(*s, k) == 0;
        for (const char *const *s = skip; s && *s && !drop; s++)
            drop = strcmp(*s, k) == 0;
        if (!drop)
            bson_append_iter(out, k, -1, &it);
    }
}

/* ---- metadata ---- */

static cl_coll *coll_find(sim_cluster *cl, const char *db, const char *coll)
{
    for (size_t i = 0; i < cl->ncolls; i++)
        if (strcmp(cl->colls[i]->db, db) == 0 && strcmp(cl->colls[i]->coll, coll) == 0)
            return cl->colls[i];
    return NULL;
}

static cl_coll *coll_find_ns(sim_cluster *cl, const char *ns)
{
    for (size_t i = 0; i < cl->ncolls; i++)
        if (strcmp(cl->colls[i]->ns, ns) == 0)
            return cl->colls[i];
    return NULL;
}

static void coll_free(cl_coll *c)
{
    for (size_t i = 0; i < c->nchunks; i++) {
        bson_destroy(&c->chunks[i]->min);
        bson_destroy(&c->chunks[i]->max);
        bson_destroy(&c->chunks[i]->history);
        free(c->chunks[i]);
    }
    free(c->chunks);
    bson_destroy(&c->key);
    free(c);
}

static void coll_remove(sim_cluster *cl, cl_coll *c)
{
    for (size_t i = 0; i < cl->ncolls; i++)
        if (cl->colls[i] == c) {
            memmove(&cl->colls[i], &cl->colls[i + 1], (cl->ncolls - i - 1) * sizeof *cl->colls);
            cl->ncolls--;
            break;
        }
    coll_free(c);
}

static cl_db *db_find(sim_cluster *cl, const char *name)
{
    for (size_t i = 0; i < cl->ndbs; i++)
        if (strcmp(cl->dbs[i].name, name) == 0)
            return &cl->dbs[i];
    return NULL;
}

/* A database gets its primary shard when it is first written through the router (the config server's
 * createDatabase; a real one picks the shard with the least data, mongosim shard0 or the first shard not draining). */
static cl_db *db_ensure(sim_cluster *cl, const char *name, int primary)
{
    cl_db *d = db_find(cl, name);
    if (d)
        return d;
    if (primary < 0) {
        primary = 0;
        for (size_t i = 0; i < cl->nshards; i++)
            if (!cl->shards[i].draining && !cl->shards[i].removed) {
                primary = (int)i;
                break;
            }
    }
    cl->dbs = realloc(cl->dbs, (cl->ndbs + 1) * sizeof *cl->dbs);
    if (!cl->dbs)
        abort();
    d = &cl->dbs[cl->ndbs++];
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    d->primary = primary;
    new_uuid16(d->uuid);
    d->timestamp = cl->clock;
    return d;
}

static int db_primary(sim_cluster *cl, const char *db)
{
    cl_db *d = db_find(cl, db);
    return d ? d->primary : 0;
}

/* The shard key value of doc under c's pattern into `out` (field name -> value; a missing field is null, as
 * ShardKeyPattern::extractShardKeyFromDoc treats it for targeting). A hashed field holds the value's hash as an int64
 * (seed 0: BSONElementHasher::DEFAULT_HASH_SEED), unless `as_given` (split's middle and bounds name hashed values). */
static void extract_key_as(const cl_coll *c, const bson_t *doc, bool as_given, bson_t *out)
{
    bson_init(out);
    bson_iter_t kp;
    bson_iter_init(&kp, &c->key);
    while (bson_iter_next(&kp)) {
        const char *f = bson_iter_key(&kp);
        bson_iter_t it, d;
        bool found = bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, f, &d);
        if (c->hashed[0] && strcmp(f, c->hashed) == 0 && !as_given) {
            bson_t null_doc = BSON_INITIALIZER;
            bson_iter_t ni;
            if (!found) {
                bson_append_null(&null_doc, "", 0);
                bson_iter_init(&ni, &null_doc);
                bson_iter_next(&ni);
            }
            bson_append_int64(out, f, -1, hashkey_hash64(found ? &d : &ni, 0));
            bson_destroy(&null_doc);
        } else if (found)
            bson_append_value(out, f, -1, bson_iter_value(&d));
        else
            bson_append_null(out, f, -1);
    }
}

static void extract_key(const cl_coll *c, const bson_t *doc, bson_t *out)
{
    extract_key_as(c, doc, false, out);
}

/* Compares two key documents field by field (same pattern order), BSON order; MinKey and MaxKey bound the range. */
static int key_cmp(const bson_t *a, const bson_t *b)
{
    bson_iter_t ia, ib;
    bson_iter_init(&ia, a);
    bson_iter_init(&ib, b);
    while (bson_iter_next(&ia) && bson_iter_next(&ib)) {
        int c = update_compare_values(bson_iter_value(&ia), bson_iter_value(&ib));
        if (c)
            return c;
    }
    return 0;
}

static cl_chunk *chunk_for_key(cl_coll *c, const bson_t *key)
{
    for (size_t i = 0; i < c->nchunks; i++)
        if (key_cmp(&c->chunks[i]->min, key) <= 0 && key_cmp(key, &c->chunks[i]->max) < 0)
            return c->chunks[i];
    return NULL;
}

static int owner_of_doc(cl_coll *c, const bson_t *doc)
{
    bson_t key;
    extract_key(c, doc, &key);
    cl_chunk *ch = chunk_for_key(c, &key);
    bson_destroy(&key);
    return ch ? ch->shard : -1;
}

static size_t chunks_on(const cl_coll *c, int shard)
{
    size_t n = 0;
    for (size_t i = 0; i < c->nchunks; i++)
        n += c->chunks[i]->shard == shard;
    return n;
}

static void history_set(sim_cluster *cl, cl_chunk *ch, bool keep_old)
{
    bson_t h = BSON_INITIALIZER, e;
    BSON_APPEND_DOCUMENT_BEGIN(&h, "0", &e);
    BSON_APPEND_TIMESTAMP(&e, "validAfter", OPLOG_TS_SECS(ch->since), OPLOG_TS_INC(ch->since));
    BSON_APPEND_UTF8(&e, "shard", cl->shards[ch->shard].id);
    bson_append_document_end(&h, &e);
    if (keep_old) {
        bson_iter_t it;
        int i = 1;
        if (bson_iter_init(&it, &ch->history))
            while (bson_iter_next(&it)) {
                char k[24];
                snprintf(k, sizeof k, "%d", i++);
                bson_append_iter(&h, k, -1, &it);
            }
        bson_destroy(&ch->history);
    }
    /* Copied, never assigned: a bson_t that had a child appended points into itself. */
    bson_copy_to(&h, &ch->history);
    bson_destroy(&h);
}

static cl_chunk *chunk_add(cl_coll *c)
{
    c->chunks = realloc(c->chunks, (c->nchunks + 1) * sizeof *c->chunks);
    if (!c->chunks)
        abort();
    cl_chunk *ch = calloc(1, sizeof *ch);
    if (!ch)
        abort();
    c->chunks[c->nchunks++] = ch;
    bson_oid_init(&ch->id, NULL);
    return ch;
}

/* ---- the shards' store hooks ---- */

static bool hook_uuid(void *ctx, const char *db, const char *coll, uint8_t uuid[16])
{
    cl_coll *c = coll_find(ctx, db, coll);
    if (!c)
        return false;
    memcpy(uuid, c->uuid, 16);
    return true;
}

/* The document key of a sharded collection's document: the shard key fields in the pattern's order, then _id unless
 * the key has it (op_observer_util.cpp getDocumentKey: extractElementsBasedOnTemplate of the shard key pattern;
 * DocumentKey::getShardKeyAndId: appendElementsUnique(_id)). Updates log it as o2 (the update's criteria) and deletes
 * as o (op_observer_impl.cpp onUpdate / onDelete). */
static bool hook_doc_key(void *ctx, const char *db, const char *coll, const bson_t *doc, bson_t *out)
{
    cl_coll *c = coll_find(ctx, db, coll);
    if (!c)
        return false;
    bson_init(out);
    bool has_id = false;
    bson_iter_t kp;
    bson_iter_init(&kp, &c->key);
    while (bson_iter_next(&kp)) {
        const char *f = bson_iter_key(&kp);
        bson_iter_t it, d;
        if (bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, f, &d))
            bson_append_value(out, f, -1, bson_iter_value(&d));
        has_id = has_id || strcmp(f, "_id") == 0;
    }
    bson_iter_t id;
    if (!has_id && bson_iter_init_find(&id, doc, "_id"))
        bson_append_iter(out, "_id", 3, &id);
    return true;
}

/* ---- calling a shard in process ---- */

/* Runs cmd on the shard's own command handler and copies its reply into *reply (always initialized). */
static void shard_call(sim_server *shard, const char *db, const bson_t *cmd, bson_t *reply)
{
    sim_conn c;
    memset(&c, 0, sizeof c);
    c.srv = shard;
    c.fd = -1;
    sim_reply r = {.conn = &c, .request_id = 0, .opcode = SIM_OP_MSG};
    cmd_dispatch(shard, &r, cmd, db);
    /* OP_MSG: 16-byte header, 4-byte flagBits, section kind 0, then the body. */
    bson_t tmp;
    if (!r.parked && c.out.len > 21 && bson_init_static(&tmp, c.out.data + 21, c.out.len - 21))
        bson_copy_to(&tmp, reply);
    else {
        bson_init(reply);
        BSON_APPEND_DOUBLE(reply, "ok", 0.0);
        BSON_APPEND_INT32(reply, "code", 1);
        BSON_APPEND_UTF8(reply, "errmsg", "mongosim: a shard's reply could not be read");
    }
    buf_free(&c.out);
    buf_free(&c.in);
}

static bool reply_is_ok(const bson_t *reply)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, reply, "ok") && bson_iter_as_double(&it) == 1.0;
}

/* Writes body (op, ns, ui, o[, o2]) with fromMigrate: true before ts (a migration's writes: the recipient's
 * MigrationDestinationManager and the donor's range deleter pass fromMigrate to the op observer, which sets the
 * entry's fromMigrate; src/mongo/db/repl/oplog_entry.idl: a DurableReplOperation field after o2 and stmtId, before
 * the OpTimeBase fields ts and t). */
typedef struct {
    sim_server *srv;
    bool failed;
} migrate_emit_ctx;

static void emit_from_migrate(void *ctx, const bson_t *body)
{
    migrate_emit_ctx *m = ctx;
    bson_t e = BSON_INITIALIZER;
    bson_concat(&e, body);
    BSON_APPEND_BOOL(&e, "fromMigrate", true);
    bson_error_t err;
    if (!sim_append_body(m->srv, &e, &err)) {
        fprintf(stderr, "mongosim: cannot log a migration entry: %s\n", err.message);
        m->failed = true;
    }
    bson_destroy(&e);
}

/* ---- router cursors ---- */

static void cursor_free(sim_cluster *cl, cl_cursor *cur)
{
    for (cl_cursor **p = &cl->cursors; *p; p = &(*p)->next)
        if (*p == cur) {
            *p = cur->next;
            break;
        }
    for (size_t i = 0; i < cur->n; i++)
        bson_destroy(cur->docs[i]);
    free(cur->docs);
    free(cur);
}

/* Frees a cursor that was never registered (no id). */
static void cursor_discard(cl_cursor *cur)
{
    for (size_t i = 0; i < cur->n; i++)
        bson_destroy(cur->docs[i]);
    free(cur->docs);
    free(cur);
}

static cl_cursor *cursor_new(sim_cluster *cl, const char *ns)
{
    cl_cursor *cur = calloc(1, sizeof *cur);
    if (!cur)
        abort();
    snprintf(cur->ns, sizeof cur->ns, "%s", ns);
    return cur;
}

static void cursor_push(cl_cursor *cur, const bson_t *doc)
{
    if ((cur->n & (cur->n - 1)) == 0 || cur->n == 0) {
        size_t cap = cur->n ? cur->n * 2 : 16;
        cur->docs = realloc(cur->docs, cap * sizeof *cur->docs);
        if (!cur->docs)
            abort();
    }
    cur->docs[cur->n++] = bson_copy(doc);
}

/* Replies a batch of at most batch documents (ending at about 16 MB) and keeps the cursor for the rest. */
static void cursor_reply(sim_cluster *cl, sim_reply *r, cl_cursor *cur, int64_t batch, bool first, bool single)
{
    bson_t d = BSON_INITIALIZER, c, arr;
    BSON_APPEND_DOCUMENT_BEGIN(&d, "cursor", &c);
    BSON_APPEND_ARRAY_BEGIN(&c, first ? "firstBatch" : "nextBatch", &arr);
    size_t bytes = 0;
    int64_t n = 0;
    while (cur->pos < cur->n && (batch <= 0 || n < batch) && bytes < SIM_BATCH_BYTES) {
        char k[24];
        snprintf(k, sizeof k, "%" PRId64, n);
        BSON_APPEND_DOCUMENT(&arr, k, cur->docs[cur->pos]);
        bytes += cur->docs[cur->pos]->len;
        cur->pos++;
        n++;
    }
    bson_append_array_end(&c, &arr);
    bool done = single || cur->pos >= cur->n;
    if (!done && cur->id == 0) {
        cur->id = ++cl->next_cursor;
        cur->next = cl->cursors;
        cl->cursors = cur;
    }
    BSON_APPEND_INT64(&c, "id", done ? 0 : cur->id);
    BSON_APPEND_UTF8(&c, "ns", cur->ns);
    bson_append_document_end(&d, &c);
    reply_doc_ok(r, &d);
    if (done) {
        if (cur->id)
            cursor_free(cl, cur);
        else {
            for (size_t i = 0; i < cur->n; i++)
                bson_destroy(cur->docs[i]);
            free(cur->docs);
            free(cur);
        }
    }
}

/* ---- config reads ---- */

static void shard_doc(sim_cluster *cl, size_t i, bson_t *out)
{
    char host[600];
    snprintf(host, sizeof host, "%s/%s", cl->shards[i].id, cl->shards[i].srv->me);
    bson_init(out);
    BSON_APPEND_UTF8(out, "_id", cl->shards[i].id);
    BSON_APPEND_UTF8(out, "host", host);
    BSON_APPEND_INT32(out, "state", 1);
    BSON_APPEND_TIMESTAMP(out, "topologyTime", OPLOG_TS_SECS(cl->shards[i].topology_time),
                          OPLOG_TS_INC(cl->shards[i].topology_time));
    if (cl->shards[i].draining)
        BSON_APPEND_BOOL(out, "draining", true);
}

static void coll_doc(const cl_coll *c, bson_t *out)
{
    bson_init(out);
    BSON_APPEND_UTF8(out, "_id", c->ns);
    BSON_APPEND_OID(out, "lastmodEpoch", &c->epoch);
    BSON_APPEND_DATE_TIME(out, "lastmod", c->lastmod_ms);
    BSON_APPEND_TIMESTAMP(out, "timestamp", OPLOG_TS_SECS(c->timestamp), OPLOG_TS_INC(c->timestamp));
    append_uuid16(out, "uuid", c->uuid);
    BSON_APPEND_DOCUMENT(out, "key", &c->key);
    BSON_APPEND_BOOL(out, "unique", c->unique);
    BSON_APPEND_BOOL(out, "noBalance", false);
}

static void chunk_doc(sim_cluster *cl, const cl_coll *c, const cl_chunk *ch, bson_t *out)
{
    bson_init(out);
    BSON_APPEND_OID(out, "_id", &ch->id);
    append_uuid16(out, "uuid", c->uuid);
    BSON_APPEND_DOCUMENT(out, "min", &ch->min);
    BSON_APPEND_DOCUMENT(out, "max", &ch->max);
    BSON_APPEND_UTF8(out, "shard", cl->shards[ch->shard].id);
    BSON_APPEND_TIMESTAMP(out, "lastmod", ch->major, ch->minor);
    BSON_APPEND_TIMESTAMP(out, "onCurrentShardSince", OPLOG_TS_SECS(ch->since), OPLOG_TS_INC(ch->since));
    BSON_APPEND_ARRAY(out, "history", &ch->history);
}

static void db_doc(sim_cluster *cl, const cl_db *d, bson_t *out)
{
    bson_t v;
    bson_init(out);
    BSON_APPEND_UTF8(out, "_id", d->name);
    BSON_APPEND_UTF8(out, "primary", cl->shards[d->primary].id);
    BSON_APPEND_DOCUMENT_BEGIN(out, "version", &v);
    append_uuid16(&v, "uuid", d->uuid);
    BSON_APPEND_TIMESTAMP(&v, "timestamp", OPLOG_TS_SECS(d->timestamp), OPLOG_TS_INC(d->timestamp));
    BSON_APPEND_INT32(&v, "lastMod", 1);
    bson_append_document_end(out, &v);
}

/* A config query's filter: top-level fields equal to values ({} matches all). */
static bool simple_match(const bson_t *filter, const bson_t *doc)
{
    bson_iter_t f;
    if (!filter || !bson_iter_init(&f, filter))
        return true;
    while (bson_iter_next(&f)) {
        bson_iter_t d;
        if (!bson_iter_init_find(&d, doc, bson_iter_key(&f)) ||
            update_compare_values(bson_iter_value(&f), bson_iter_value(&d)) != 0)
            return false;
    }
    return true;
}

static void cursor_push_if(cl_cursor *cur, const bson_t *filter, bson_t *doc)
{
    if (simple_match(filter, doc))
        cursor_push(cur, doc);
    bson_destroy(doc);
}

static bool config_find(sim_cluster *cl, const char *coll, const bson_t *filter, cl_cursor *cur)
{
    bson_t d;
    if (strcmp(coll, "shards") == 0) {
        for (size_t i = 0; i < cl->nshards; i++)
            if (!cl->shards[i].removed) {
                shard_doc(cl, i, &d);
                cursor_push_if(cur, filter, &d);
            }
    } else if (strcmp(coll, "collections") == 0) {
        for (size_t i = 0; i < cl->ncolls; i++) {
            coll_doc(cl->colls[i], &d);
            cursor_push_if(cur, filter, &d);
        }
    } else if (strcmp(coll, "chunks") == 0) {
        for (size_t i = 0; i < cl->ncolls; i++)
            for (size_t j = 0; j < cl->colls[i]->nchunks; j++) {
                chunk_doc(cl, cl->colls[i], cl->colls[i]->chunks[j], &d);
                cursor_push_if(cur, filter, &d);
            }
    } else if (strcmp(coll, "databases") == 0) {
        for (size_t i = 0; i < cl->ndbs; i++) {
            db_doc(cl, &cl->dbs[i], &d);
            cursor_push_if(cur, filter, &d);
        }
    } else
        return false;
    return true;
}

/* ---- reads through the router ---- */

typedef struct {
    sim_cluster *cl;
    cl_coll *c; /* NULL: unsharded */
    int shard;
    cl_cursor *cur;
} collect_ctx;

static bool collect_doc(void *ctx, const bson_t *doc)
{
    collect_ctx *x = ctx;
    /* Shard filtering: a shard returns only the documents of chunks it owns (orphans of a migration are skipped), as
     * the SHARDING_FILTER stage does (src/mongo/db/exec/shard_filter.cpp). */
    if (x->c && owner_of_doc(x->c, doc) != x->shard)
        return true;
    cursor_push(x->cur, doc);
    return true;
}

static int cmp_by_id(const void *a, const void *b)
{
    const bson_t *da = *(bson_t *const *)a, *db = *(bson_t *const *)b;
    bson_iter_t ia, ib;
    bool ha = bson_iter_init_find(&ia, da, "_id"), hb = bson_iter_init_find(&ib, db, "_id");
    if (!ha || !hb)
        return ha - hb;
    return update_compare_values(bson_iter_value(&ia), bson_iter_value(&ib));
}

/* Every owned document of db.coll matching filter, from every shard, in _id order. */
static void gather(sim_cluster *cl, const char *db, const char *coll, const bson_t *filter, cl_cursor *cur)
{
    cl_coll *c = coll_find(cl, db, coll);
    for (size_t i = 0; i < cl->nshards; i++) {
        if (!c && (int)i != db_primary(cl, db))
            continue;
        collect_ctx x = {.cl = cl, .c = c, .shard = (int)i, .cur = cur};
        store_find(cl->shards[i].srv->store, db, coll, filter, collect_doc, &x);
    }
    if (cur->n > 1)
        qsort(cur->docs, cur->n, sizeof *cur->docs, cmp_by_id);
}

static int64_t opt_i64(const bson_t *cmd, const char *key, int64_t dflt)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, cmd, key) && BSON_ITER_HOLDS_NUMBER(&it))
        return bson_iter_as_int64(&it);
    return dflt;
}

static void r_find(sim_cluster *cl, sim_reply *r, const bson_t *cmd, const char *db)
{
    const char *coll;
    if (!get_str(cmd, "find", &coll)) {
        reply_error(r, 2, "find: the collection name must be a string");
        return;
    }
    char ns[300];
    snprintf(ns, sizeof ns, "%s.%s", db, coll);
    bson_t filter;
    bool has_filter = get_doc(cmd, "filter", &filter);
    cl_cursor *cur = cursor_new(cl, ns);
    if (strcmp(db, "config") == 0) {
        if (!config_find(cl, coll, has_filter ? &filter : NULL, cur)) {
            /* Other config collections (transaction_coordinators, ...) are the shards': nothing at the router. */
        }
    } else {
        bson_error_t err;
        if (has_filter && !store_filter_supported(&filter, &err)) {
            reply_error(r, 2, "%s", err.message);
            cursor_discard(cur);
            return;
        }
        bson_t empty = BSON_INITIALIZER;
        gather(cl, db, coll, has_filter ? &filter : &empty, cur);
        bson_destroy(&empty);
    }
    /* min / max on the _id index (with its hint): an inclusive lower and an exclusive upper bound, in BSON order
     * (the copy resumes with min). A mongos sends them on to every targeted shard with the hint ("min() exists
     * primarily to support the mongos process", docs cursor.min()), and merges the shards' sorted results by the sort
     * key alone (src/mongo/s/query/async_results_merger.cpp): two shards' documents with one _id (a shard key other
     * than _id) come side by side, in no set order, as gather's sort leaves them. */
    static const char *const bounds[] = {"min", "max"};
    for (int b = 0; b < 2; b++) {
        bson_t bd;
        bson_iter_t bi;
        if (!get_doc(cmd, bounds[b], &bd) || !bson_iter_init_find(&bi, &bd, "_id"))
            continue;
        size_t kept = 0;
        for (size_t i = 0; i < cur->n; i++) {
            bson_iter_t di;
            int c = bson_iter_init_find(&di, cur->docs[i], "_id")
                        ? update_compare_values(bson_iter_value(&di), bson_iter_value(&bi))
                        : -1;
            if (b == 0 ? c >= 0 : c < 0)
                cur->docs[kept++] = cur->docs[i];
            else
                bson_destroy(cur->docs[i]);
        }
        cur->n = kept;
    }
    /* skip, limit and projection over the merged result, as mongos applies them after merging. */
    int64_t skip = opt_i64(cmd, "skip", 0), limit = opt_i64(cmd, "limit", 0);
    if (skip < 0) {
        reply_error(r, 51024, "BSON field 'skip' value must be >= 0, actual value '%" PRId64 "'", skip);
        cursor_discard(cur);
        return;
    }
    size_t from = (size_t)skip < cur->n ? (size_t)skip : cur->n;
    for (size_t i = 0; i < from; i++)
        bson_destroy(cur->docs[i]);
    if (from > 0) /* with no documents, docs may be NULL: memmove's arguments may never be */
        memmove(cur->docs, cur->docs + from, (cur->n - from) * sizeof *cur->docs);
    cur->n -= from;
    if (limit < 0)
        limit = -limit;
    if (limit > 0 && (size_t)limit < cur->n) {
        for (size_t i = (size_t)limit; i < cur->n; i++)
            bson_destroy(cur->docs[i]);
        cur->n = (size_t)limit;
    }
    bson_t pspec;
    if (get_doc(cmd, "projection", &pspec)) {
        sim_projection *p = NULL;
        sim_proj_error perr;
        if (!projection_parse(&pspec, &p, &perr)) {
            reply_error(r, perr.code, "%s", perr.message);
            cursor_discard(cur);
            return;
        }
        if (p) {
            for (size_t i = 0; i < cur->n; i++) {
                bson_t out = BSON_INITIALIZER;
                projection_apply(p, cur->docs[i], &out);
                bson_destroy(cur->docs[i]);
                cur->docs[i] = bson_copy(&out);
                bson_destroy(&out);
            }
            projection_free(p);
        }
    }
    cursor_reply(cl, r, cur, opt_i64(cmd, "batchSize", 101), true, get_bool(cmd, "singleBatch"));
}

static void r_get_more(sim_cluster *cl, sim_reply *r, const bson_t *cmd)
{
    int64_t id = opt_i64(cmd, "getMore", 0);
    if (cl_stream_get_more(cl, r, cmd, id))
        return;
    for (cl_cursor *cur = cl->cursors; cur; cur = cur->next)
        if (cur->id == id) {
            cursor_reply(cl, r, cur, opt_i64(cmd, "batchSize", 0), false, false);
            return;
        }
    reply_error(r, 43, "cursor id %" PRId64 " not found", id);
}

static void r_kill_cursors(sim_cluster *cl, sim_reply *r, const bson_t *cmd)
{
    bson_t ids, killed = BSON_INITIALIZER, nf = BSON_INITIALIZER;
    int nk = 0, nn = 0;
    if (get_doc(cmd, "cursors", &ids)) {
        bson_iter_t it;
        bson_iter_init(&it, &ids);
        while (bson_iter_next(&it)) {
            int64_t id = bson_iter_as_int64(&it);
            cl_cursor *hit = NULL;
            for (cl_cursor *cur = cl->cursors; cur && !hit; cur = cur->next)
                if (cur->id == id)
                    hit = cur;
            char k[24];
            if (hit || cl_stream_kill(cl, id)) {
                if (hit)
                    cursor_free(cl, hit);
                snprintf(k, sizeof k, "%d", nk++);
                BSON_APPEND_INT64(&killed, k, id);
            } else {
                snprintf(k, sizeof k, "%d", nn++);
                BSON_APPEND_INT64(&nf, k, id);
            }
        }
    }
    bson_t d = BSON_INITIALIZER, empty = BSON_INITIALIZER;
    BSON_APPEND_ARRAY(&d, "cursorsKilled", &killed);
    BSON_APPEND_ARRAY(&d, "cursorsNotFound", &nf);
    BSON_APPEND_ARRAY(&d, "cursorsAlive", &empty);
    BSON_APPEND_ARRAY(&d, "cursorsUnknown", &empty);
    bson_destroy(&killed);
    bson_destroy(&nf);
    bson_destroy(&empty);
    reply_doc_ok(r, &d);
}

static int64_t count_owned(sim_cluster *cl, const char *db, const char *coll, const bson_t *filter)
{
    cl_cursor *cur = cursor_new(cl, "");
    bson_t empty = BSON_INITIALIZER;
    gather(cl, db, coll, filter ? filter : &empty, cur);
    bson_destroy(&empty);
    int64_t n = (int64_t)cur->n;
    for (size_t i = 0; i < cur->n; i++)
        bson_destroy(cur->docs[i]);
    free(cur->docs);
    free(cur);
    return n;
}

static void r_count(sim_cluster *cl, sim_reply *r, const bson_t *cmd, const char *db)
{
    const char *coll;
    if (!get_str(cmd, "count", &coll)) {
        reply_error(r, 2, "count: the collection name must be a string");
        return;
    }
    bson_t q;
    bool has_q = get_doc(cmd, "query", &q);
    bson_error_t err;
    if (has_q && !store_filter_supported(&q, &err)) {
        reply_error(r, 2, "%s", err.message);
        return;
    }
    bson_t d = BSON_INITIALIZER;
    BSON_APPEND_INT32(&d, "n", (int32_t)count_owned(cl, db, coll, has_q ? &q : NULL));
    reply_doc_ok(r, &d);
}

/* The count pipelines of drivers' countDocuments: [{$match}?, {$count: name}] or [{$match}?, {$group: {_id: X, n:
 * {$sum: 1}}}]. */
static void r_aggregate(sim_cluster *cl, sim_reply *r, const bson_t *cmd, const char *db)
{
    const char *coll;
    bson_t pipeline;
    if (!get_str(cmd, "aggregate", &coll) || !get_doc(cmd, "pipeline", &pipeline)) {
        reply_error(r, 2, "mongosim's router runs only count pipelines on a named collection");
        return;
    }
    bson_t match, group, stage;
    bool has_match = false, has_group = false;
    const char *count_name = NULL;
    bson_iter_t it;
    bson_iter_init(&it, &pipeline);
    while (bson_iter_next(&it)) {
        if (!iter_subdoc(&it, &stage))
            break;
        if (get_doc(&stage, "$match", &match))
            has_match = true;
        else if (get_str(&stage, "$count", &count_name))
            ;
        else if (get_doc(&stage, "$group", &group))
            has_group = true;
        else {
            reply_error(r, 2, "mongosim's router runs only count pipelines ($match, then $count or $group)");
            return;
        }
    }
    bson_error_t err;
    if (has_match && !store_filter_supported(&match, &err)) {
        reply_error(r, 2, "%s", err.message);
        return;
    }
    int64_t n = count_owned(cl, db, coll, has_match ? &match : NULL);
    char ns[300];
    snprintf(ns, sizeof ns, "%s.%s", db, coll);
    cl_cursor *cur = cursor_new(cl, ns);
    if (n > 0) {
        bson_t d = BSON_INITIALIZER;
        if (count_name)
            BSON_APPEND_INT32(&d, count_name, (int32_t)n);
        else if (has_group) {
            bson_iter_t g;
            bson_iter_init(&g, &group);
            while (bson_iter_next(&g)) {
                if (strcmp(bson_iter_key(&g), "_id") == 0)
                    bson_append_iter(&d, "_id", 3, &g);
                else
                    BSON_APPEND_INT32(&d, bson_iter_key(&g), (int32_t)n);
            }
        }
        cursor_push(cur, &d);
        bson_destroy(&d);
    }
    cursor_reply(cl, r, cur, 101, true, true);
}

/* ---- writes through the router ---- */

static cl_txn *txn_find(sim_cluster *cl, const uint8_t *lsid, int64_t txn, bool create)
{
    for (cl_txn *t = cl->txns; t; t = t->next)
        if (memcmp(t->lsid, lsid, 16) == 0) {
            if (t->txn_number != txn && create) {
                t->txn_number = txn;
                t->nparts = 0;
                t->decided = 0;
            }
            return t->txn_number == txn ? t : NULL;
        }
    if (!create)
        return NULL;
    cl_txn *t = calloc(1, sizeof *t);
    if (!t)
        abort();
    memcpy(t->lsid, lsid, 16);
    t->txn_number = txn;
    t->next = cl->txns;
    cl->txns = t;
    return t;
}

/* The command a shard gets: the router's (its write concern left out) with the session's transaction fields fitted
 * to that shard: startTransaction on the first statement a participant sees (as mongos's TransactionRouter adds it
 * when it first contacts a participant). */
static void shard_cmd_begin(sim_cluster *cl, const bson_t *cmd, int shard, const char *const *skip, bson_t *out)
{
    bson_init(out);
    copy_except(cmd, out, skip);
    if (!bson_has_field(cmd, "autocommit"))
        return;
    uint8_t lsid[16];
    int64_t txn;
    if (!txn_parse_session(cmd, lsid, &txn))
        return;
    cl_txn *t = txn_find(cl, lsid, txn, get_bool(cmd, "startTransaction"));
    if (!t)
        t = txn_find(cl, lsid, txn, true);
    bool known = false;
    for (size_t i = 0; i < t->nparts; i++)
        known = known || t->parts[i] == shard;
    bson_t rebuilt = BSON_INITIALIZER;
    bson_iter_t it;
    bson_iter_init(&it, out);
    while (bson_iter_next(&it))
        if (strcmp(bson_iter_key(&it), "startTransaction") != 0)
            bson_append_iter(&rebuilt, bson_iter_key(&it), -1, &it);
    if (!known) {
        BSON_APPEND_BOOL(&rebuilt, "startTransaction", true);
        if (t->nparts < CL_MAX_SHARDS)
            t->parts[t->nparts++] = shard;
    }
    bson_destroy(out);
    bson_copy_to(&rebuilt, out);
    bson_destroy(&rebuilt);
}

/* Where a document goes: its chunk's shard, or the database's primary shard for an unsharded collection. */
static int target_doc(sim_cluster *cl, const char *db, cl_coll *c, const bson_t *doc)
{
    if (!c)
        return db_primary(cl, db);
    int s = owner_of_doc(c, doc);
    return s < 0 ? db_primary(cl, db) : s;
}

/* Merges a shard's write reply into the router's: n, nModified, writeErrors and upserted with indexes shifted by
 * base. A top-level error is kept in *fail. */
typedef struct {
    int64_t n, n_modified;
    bson_t errors, upserted;
    int nerr, nups;
    bson_t *fail;
} write_merge;

static void merge_shift(bson_t *dst, int *count, const bson_t *reply, const char *key, int base)
{
    bson_t arr;
    if (!get_doc(reply, key, &arr))
        return;
    bson_iter_t it;
    bson_iter_init(&it, &arr);
    while (bson_iter_next(&it)) {
        bson_t e;
        if (!iter_subdoc(&it, &e))
            continue;
        bson_t out = BSON_INITIALIZER;
        bson_iter_t f;
        bson_iter_init(&f, &e);
        while (bson_iter_next(&f)) {
            if (strcmp(bson_iter_key(&f), "index") == 0)
                BSON_APPEND_INT32(&out, "index", (int32_t)(bson_iter_as_int64(&f) + base));
            else
                bson_append_iter(&out, bson_iter_key(&f), -1, &f);
        }
        char k[24];
        snprintf(k, sizeof k, "%d", (*count)++);
        BSON_APPEND_DOCUMENT(dst, k, &out);
        bson_destroy(&out);
    }
}

static bool merge_reply(write_merge *m, bson_t *reply, int base)
{
    if (!reply_is_ok(reply)) {
        if (!m->fail)
            m->fail = bson_copy(reply);
        return false;
    }
    m->n += opt_i64(reply, "n", 0);
    m->n_modified += opt_i64(reply, "nModified", 0);
    int before = m->nerr;
    merge_shift(&m->errors, &m->nerr, reply, "writeErrors", base);
    merge_shift(&m->upserted, &m->nups, reply, "upserted", base);
    return m->nerr == before;
}

static void write_merge_reply(sim_reply *r, write_merge *m, bool updates)
{
    if (m->fail) {
        reply_bson(r, m->fail);
        bson_destroy(m->fail);
        bson_destroy(&m->errors);
        bson_destroy(&m->upserted);
        return;
    }
    bson_t d = BSON_INITIALIZER;
    BSON_APPEND_INT32(&d, "n", (int32_t)m->n);
    if (updates) {
        if (m->nups)
            BSON_APPEND_ARRAY(&d, "upserted", &m->upserted);
        BSON_APPEND_INT32(&d, "nModified", (int32_t)m->n_modified);
    }
    if (m->nerr)
        BSON_APPEND_ARRAY(&d, "writeErrors", &m->errors);
    bson_destroy(&m->errors);
    bson_destroy(&m->upserted);
    reply_doc_ok(r, &d);
}

static void r_insert(sim_cluster *cl, sim_reply *r, const bson_t *cmd, const char *db)
{
    const char *coll;
    bson_t docs;
    if (!get_str(cmd, "insert", &coll) || !get_doc(cmd, "documents", &docs)) {
        reply_error(r, 2, "insert needs a collection name and documents");
        return;
    }
    db_ensure(cl, db, -1);
    cl_coll *c = coll_find(cl, db, coll);
    bool ordered = true;
    bson_iter_t oi;
    if (bson_iter_init_find(&oi, cmd, "ordered"))
        ordered = bson_iter_as_bool(&oi);
    write_merge m = {0};
    bson_init(&m.errors);
    bson_init(&m.upserted);
    /* Runs of consecutive documents for one shard, in order (mongos's batch writer splits a batch by target). */
    bson_iter_t it;
    bson_iter_init(&it, &docs);
    int idx = 0, run_start = 0, run_shard = -1;
    bson_t run = BSON_INITIALIZER;
    int run_n = 0;
    bool stop = false;
    static const char *const skip[] = {"documents", NULL};
    for (;;) {
        bool more = bson_iter_next(&it);
        bson_t doc;
        int s = -1;
        if (more) {
            if (!iter_subdoc(&it, &doc)) {
                bson_destroy(&run);
                reply_error(r, 14, "insert: documents must be objects");
                bson_destroy(&m.errors);
                bson_destroy(&m.upserted);
                return;
            }
            s = target_doc(cl, db, c, &doc);
        }
        if (run_n > 0 && (!more || s != run_shard)) {
            bson_t sc;
            shard_cmd_begin(cl, cmd, run_shard, skip, &sc);
            BSON_APPEND_ARRAY(&sc, "documents", &run);
            bson_t rep;
            shard_call(cl->shards[run_shard].srv, db, &sc, &rep);
            bool clean = merge_reply(&m, &rep, run_start);
            bson_destroy(&rep);
            bson_destroy(&sc);
            bson_reinit(&run);
            run_n = 0;
            if (!clean && ordered) {
                stop = true;
            }
        }
        if (!more || stop)
            break;
        if (run_n == 0) {
            run_start = idx;
            run_shard = s;
        }
        char k[24];
        snprintf(k, sizeof k, "%d", run_n++);
        BSON_APPEND_DOCUMENT(&run, k, &doc);
        idx++;
    }
    bson_destroy(&run);
    write_merge_reply(r, &m, false);
}

/* The shard holding the owned document with this _id (a sharded collection), or -1. */
static int shard_of_id(sim_cluster *cl, cl_coll *c, const bson_value_t *id, bson_t *found)
{
    bson_t q = BSON_INITIALIZER;
    bson_append_value(&q, "_id", 3, id);
    int hit = -1;
    for (size_t i = 0; i < cl->nshards && hit < 0; i++) {
        cl_cursor *cur = cursor_new(cl, "");
        collect_ctx x = {.cl = cl, .c = c, .shard = (int)i, .cur = cur};
        store_find(cl->shards[i].srv->store, c->db, c->coll, &q, collect_doc, &x);
        if (cur->n > 0) {
            hit = (int)i;
            if (found)
                bson_copy_to(cur->docs[0], found);
        }
        for (size_t j = 0; j < cur->n; j++)
            bson_destroy(cur->docs[j]);
        free(cur->docs);
        free(cur);
    }
    bson_destroy(&q);
    return hit;
}

/* Targets one update or delete statement. A sharded collection's statement names its document by _id (the store's
 * query shape), optionally with shard key fields; mongosim finds the shard owning that _id (a mongos targets by the
 * shard key, or broadcasts and lets the shards' filtering skip orphans) and checks the other equality fields itself;
 * the shard gets {_id}. No owned match: an upsert goes to the chunk of the shard key found in q or in u; otherwise
 * nothing is written (-1, *none). */
static int target_stmt(sim_cluster *cl, const char *db, cl_coll *c, const bson_t *q, const bson_t *u, bson_t *q_out,
                       bool *none)
{
    *none = false;
    bson_init(q_out);
    if (!c) {
        bson_concat(q_out, q);
        return db_primary(cl, db);
    }
    bson_iter_t id;
    if (!bson_iter_init_find(&id, q, "_id")) {
        bson_concat(q_out, q); /* {} with limit 0: every shard (the caller broadcasts) */
        return -2;
    }
    bson_t found;
    int s = shard_of_id(cl, c, bson_iter_value(&id), &found);
    if (s >= 0) {
        bson_iter_t f;
        bson_iter_init(&f, q);
        bool match = true;
        while (bson_iter_next(&f) && match) {
            if (strcmp(bson_iter_key(&f), "_id") == 0)
                continue;
            bson_iter_t d;
            match = bson_iter_init(&d, &found) && bson_iter_find_descendant(&d, bson_iter_key(&f), &d) &&
                    update_compare_values(bson_iter_value(&f), bson_iter_value(&d)) == 0;
        }
        bson_destroy(&found);
        if (!match) {
            *none = true;
            return -1;
        }
        bson_append_iter(q_out, "_id", 3, &id);
        return s;
    }
    bson_append_iter(q_out, "_id", 3, &id);
    /* Not found: an upsert inserts where its shard key belongs. */
    bson_t keysrc = BSON_INITIALIZER, set;
    bson_concat(&keysrc, q);
    if (u && get_doc(u, "$set", &set))
        bson_concat(&keysrc, &set);
    else if (u && !bson_empty(u)) {
        bson_iter_t ui;
        bson_iter_init(&ui, u);
        if (bson_iter_next(&ui) && bson_iter_key(&ui)[0] != '$')
            bson_concat(&keysrc, u);
    }
    int t = owner_of_doc(c, &keysrc);
    bson_destroy(&keysrc);
    if (t < 0)
        t = db_primary(cl, db);
    return t;
}

/* An upsert's modifiers with the query's other equality fields (the shard key) added under $setOnInsert: a server
 * builds an upserted document from the query's equality fields, then applies the modifiers (update_driver.cpp,
 * populateDocumentWithQueryFields); the shard gets q {_id} only, so they travel in u. Fields some operator of u
 * already names are left to it. */
static bool upsert_u(const bson_t *q, const bson_t *u, bson_t *out)
{
    bson_iter_t ui;
    if (!bson_iter_init(&ui, u) || !bson_iter_next(&ui) || bson_iter_key(&ui)[0] != '$')
        return false;
    bson_t extra = BSON_INITIALIZER;
    bson_iter_t qi;
    bson_iter_init(&qi, q);
    while (bson_iter_next(&qi)) {
        const char *k = bson_iter_key(&qi);
        if (!strcmp(k, "_id") || k[0] == '$')
            continue;
        if (BSON_ITER_HOLDS_DOCUMENT(&qi)) {
            bson_t sub;
            bson_iter_t si;
            if (iter_subdoc(&qi, &sub) && bson_iter_init(&si, &sub) && bson_iter_next(&si) &&
                bson_iter_key(&si)[0] == '$')
                continue;
        }
        bool named = false;
        bson_iter_init(&ui, u);
        while (bson_iter_next(&ui) && !named) {
            bson_t opdoc;
            named = iter_subdoc(&ui, &opdoc) && bson_has_field(&opdoc, k);
        }
        if (!named)
            bson_append_iter(&extra, k, -1, &qi);
    }
    if (bson_empty(&extra)) {
        bson_destroy(&extra);
        return false;
    }
    bson_init(out);
    bool merged = false;
    bson_iter_init(&ui, u);
    while (bson_iter_next(&ui)) {
        bson_t opdoc;
        if (!strcmp(bson_iter_key(&ui), "$setOnInsert") && iter_subdoc(&ui, &opdoc)) {
            bson_t both = BSON_INITIALIZER;
            bson_concat(&both, &opdoc);
            bson_concat(&both, &extra);
            BSON_APPEND_DOCUMENT(out, "$setOnInsert", &both);
            bson_destroy(&both);
            merged = true;
        } else
            bson_append_iter(out, bson_iter_key(&ui), -1, &ui);
    }
    if (!merged)
        BSON_APPEND_DOCUMENT(out, "$setOnInsert", &extra);
    bson_destroy(&extra);
    return true;
}

static void r_update_delete(sim_cluster *cl, sim_reply *r, const bson_t *cmd, const char *db, bool is_update)
{
    const char *coll;
    bson_t stmts;
    const char *arr_key = is_update ? "updates" : "deletes";
    if (!get_str(cmd, is_update ? "update" : "delete", &coll) || !get_doc(cmd, arr_key, &stmts)) {
        reply_error(r, 2, "%s needs a collection name and %s", is_update ? "update" : "delete", arr_key);
        return;
    }
    db_ensure(cl, db, -1);
    cl_coll *c = coll_find(cl, db, coll);
    bool ordered = true;
    bson_iter_t oi;
    if (bson_iter_init_find(&oi, cmd, "ordered"))
        ordered = bson_iter_as_bool(&oi);
    write_merge m = {0};
    bson_init(&m.errors);
    bson_init(&m.upserted);
    const char *const skip[] = {arr_key, NULL};
    bson_iter_t it;
    bson_iter_init(&it, &stmts);
    int idx = 0;
    while (bson_iter_next(&it)) {
        bson_t st, q, u;
        if (!iter_subdoc(&it, &st) || !get_doc(&st, "q", &q)) {
            reply_error(r, 9, "%s statement %d needs a document q", is_update ? "update" : "delete", idx);
            bson_destroy(&m.errors);
            bson_destroy(&m.upserted);
            return;
        }
        bool has_u = is_update && get_doc(&st, "u", &u);
        bson_t q2;
        bool none;
        int s = target_stmt(cl, db, c, &q, has_u ? &u : NULL, &q2, &none);
        bool clean = true;
        for (size_t i = 0; i < cl->nshards && !none; i++) {
            if (s >= 0 && (int)i != s)
                continue;
            if (s == -2 && chunks_on(c, (int)i) == 0)
                continue;
            bson_t stmt = BSON_INITIALIZER;
            bson_iter_t f;
            bson_iter_init(&f, &st);
            bson_t u2;
            while (bson_iter_next(&f)) {
                if (strcmp(bson_iter_key(&f), "q") == 0)
                    BSON_APPEND_DOCUMENT(&stmt, "q", &q2);
                else if (c && has_u && strcmp(bson_iter_key(&f), "u") == 0 && get_bool(&st, "upsert") &&
                         upsert_u(&q, &u, &u2)) {
                    BSON_APPEND_DOCUMENT(&stmt, "u", &u2);
                    bson_destroy(&u2);
                } else
                    bson_append_iter(&stmt, bson_iter_key(&f), -1, &f);
            }
            bson_t sc, list = BSON_INITIALIZER;
            BSON_APPEND_DOCUMENT(&list, "0", &stmt);
            shard_cmd_begin(cl, cmd, (int)i, skip, &sc);
            BSON_APPEND_ARRAY(&sc, arr_key, &list);
            bson_t rep;
            shard_call(cl->shards[i].srv, db, &sc, &rep);
            clean = merge_reply(&m, &rep, idx) && clean;
            bson_destroy(&rep);
            bson_destroy(&sc);
            bson_destroy(&list);
            bson_destroy(&stmt);
        }
        bson_destroy(&q2);
        idx++;
        if (!clean && (ordered || m.fail))
            break;
    }
    write_merge_reply(r, &m, is_update);
}

/* ---- DDL through the router ---- */

static void r_forward_primary(sim_cluster *cl, sim_reply *r, const bson_t *cmd, const char *db)
{
    db_ensure(cl, db, -1);
    bson_t sc = BSON_INITIALIZER, rep;
    copy_except(cmd, &sc, NULL);
    shard_call(cl->shards[db_primary(cl, db)].srv, db, &sc, &rep);
    bson_destroy(&sc);
    reply_bson(r, &rep);
    bson_destroy(&rep);
}

static void r_drop(sim_cluster *cl, sim_reply *r, const bson_t *cmd, const char *db)
{
    const char *coll;
    if (!get_str(cmd, "drop", &coll)) {
        reply_error(r, 2, "drop: the collection name must be a string");
        return;
    }
    int primary = db_primary(cl, db);
    bson_t sc = BSON_INITIALIZER, primary_rep;
    copy_except(cmd, &sc, NULL);
    bson_init(&primary_rep);
    for (size_t i = 0; i < cl->nshards; i++) {
        if ((int)i != primary && store_ns_kind_of(cl->shards[i].srv->store, db, coll) == STORE_NS_NONE)
            continue;
        bson_t rep;
        shard_call(cl->shards[i].srv, db, &sc, &rep);
        if ((int)i == primary) {
            bson_destroy(&primary_rep);
            bson_copy_to(&rep, &primary_rep);
        }
        bson_destroy(&rep);
    }
    cl_coll *c = coll_find(cl, db, coll);
    if (c)
        coll_remove(cl, c);
    bson_destroy(&sc);
    reply_bson(r, &primary_rep);
    bson_destroy(&primary_rep);
}

static void r_drop_database(sim_cluster *cl, sim_reply *r, const bson_t *cmd, const char *db)
{
    bson_t sc = BSON_INITIALIZER;
    copy_except(cmd, &sc, NULL);
    for (size_t i = 0; i < cl->nshards; i++) {
        bson_t rep;
        shard_call(cl->shards[i].srv, db, &sc, &rep);
        bson_destroy(&rep);
    }
    bson_destroy(&sc);
    for (size_t i = cl->ncolls; i-- > 0;)
        if (strcmp(cl->colls[i]->db, db) == 0)
            coll_remove(cl, cl->colls[i]);
    for (size_t i = 0; i < cl->ndbs; i++)
        if (strcmp(cl->dbs[i].name, db) == 0) {
            memmove(&cl->dbs[i], &cl->dbs[i + 1], (cl->ndbs - i - 1) * sizeof *cl->dbs);
            cl->ndbs--;
            break;
        }
    bson_t d = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&d, "dropped", db);
    reply_doc_ok(r, &d);
}

static bool split_ns(const char *ns, char *db, size_t dbn, char *coll, size_t colln)
{
    const char *dot = strchr(ns, '.');
    if (!dot || dot == ns || !dot[1] || (size_t)(dot - ns) >= dbn)
        return false;
    snprintf(db, dbn, "%.*s", (int)(dot - ns), ns);
    snprintf(coll, colln, "%s", dot + 1);
    return true;
}

/* renameCollection of an unsharded collection: on its database's primary shard (mongosim refuses a sharded one,
 * which 5.0+ servers rename through a coordinator). */
static void r_rename(sim_cluster *cl, sim_reply *r, const bson_t *cmd)
{
    const char *from;
    char db[128], coll[128];
    if (!get_str(cmd, "renameCollection", &from) || !split_ns(from, db, sizeof db, coll, sizeof coll)) {
        reply_error(r, 73, "renameCollection needs a namespace db.coll");
        return;
    }
    if (coll_find(cl, db, coll)) {
        reply_error(r, 2, "mongosim does not rename sharded collections ('%s')", from);
        return;
    }
    bson_t sc = BSON_INITIALIZER, rep;
    copy_except(cmd, &sc, NULL);
    shard_call(cl->shards[db_primary(cl, db)].srv, "admin", &sc, &rep);
    bson_destroy(&sc);
    reply_bson(r, &rep);
    bson_destroy(&rep);
}

static void r_list_databases(sim_cluster *cl, sim_reply *r)
{
    bson_t d = BSON_INITIALIZER, arr;
    BSON_APPEND_ARRAY_BEGIN(&d, "databases", &arr);
    for (size_t i = 0; i < cl->ndbs; i++) {
        bson_t e;
        char k[24];
        snprintf(k, sizeof k, "%zu", i);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, k, &e);
        BSON_APPEND_UTF8(&e, "name", cl->dbs[i].name);
        BSON_APPEND_INT64(&e, "sizeOnDisk", 0);
        BSON_APPEND_BOOL(&e, "empty", false);
        bson_append_document_end(&arr, &e);
    }
    bson_append_array_end(&d, &arr);
    BSON_APPEND_INT64(&d, "totalSize", 0);
    reply_doc_ok(r, &d);
}

/* ---- sharding commands ---- */

static int shard_index(sim_cluster *cl, const char *id)
{
    for (size_t i = 0; i < cl->nshards; i++)
        if (strcmp(cl->shards[i].id, id) == 0 && !cl->shards[i].removed)
            return (int)i;
    return -1;
}

static void r_list_shards(sim_cluster *cl, sim_reply *r)
{
    bson_t d = BSON_INITIALIZER, arr;
    BSON_APPEND_ARRAY_BEGIN(&d, "shards", &arr);
    int n = 0;
    for (size_t i = 0; i < cl->nshards; i++) {
        if (cl->shards[i].removed)
            continue;
        bson_t s;
        shard_doc(cl, i, &s);
        char k[24];
        snprintf(k, sizeof k, "%d", n++);
        BSON_APPEND_DOCUMENT(&arr, k, &s);
        bson_destroy(&s);
    }
    bson_append_array_end(&d, &arr);
    reply_doc_ok(r, &d);
}

/* {enableSharding: db, primaryShard?}: creates the database's entry in config.databases (since 6.0 sharding needs no
 * enabling; the command still creates the database, with the given primary shard). */
static void r_enable_sharding(sim_cluster *cl, sim_reply *r, const bson_t *cmd)
{
    const char *db, *ps = NULL;
    if (!get_str(cmd, "enableSharding", &db) || !*db || strchr(db, '.')) {
        reply_error(r, 73, "enableSharding needs a database name");
        return;
    }
    int primary = -1;
    if (get_str(cmd, "primaryShard", &ps) && (primary = shard_index(cl, ps)) < 0) {
        reply_error(r, 70, "Shard %s not found", ps);
        return;
    }
    cl_db *d = db_find(cl, db);
    if (d && primary >= 0 && d->primary != primary) {
        reply_error(r, 117,
                    "database %s could not be created :: caused by :: database already exists with a "
                    "different primary shard",
                    db);
        return;
    }
    db_ensure(cl, db, primary);
    bson_t o = BSON_INITIALIZER;
    reply_doc_ok(r, &o);
}

static void r_shard_collection(sim_cluster *cl, sim_reply *r, const bson_t *cmd)
{
    const char *ns;
    bson_t key;
    char db[128], coll[128];
    if (!get_str(cmd, "shardCollection", &ns) || !split_ns(ns, db, sizeof db, coll, sizeof coll)) {
        reply_error(r, 73, "shardCollection needs a namespace db.coll");
        return;
    }
    if (!get_doc(cmd, "key", &key) || bson_empty(&key)) {
        reply_error(r, 2, "shardCollection needs a key");
        return;
    }
    /* Ascending fields, at most one of them "hashed" (ShardKeyPattern::isValid: 4.4+ allows one hashed field in a
     * compound key). */
    bson_iter_t kit;
    bson_iter_init(&kit, &key);
    const char *hashed = NULL;
    size_t nfields = 0;
    while (bson_iter_next(&kit)) {
        nfields++;
        bool is_hashed = BSON_ITER_HOLDS_UTF8(&kit) && strcmp(bson_iter_utf8(&kit, NULL), "hashed") == 0;
        if ((is_hashed && hashed) || (!is_hashed && (!BSON_ITER_HOLDS_NUMBER(&kit) || bson_iter_as_int64(&kit) != 1))) {
            reply_error(r, 2,
                        "Unsupported shard key pattern. Pattern must either be a single hashed field, or a list "
                        "of ascending fields");
            return;
        }
        if (is_hashed)
            hashed = bson_iter_key(&kit);
    }
    cl_coll *existing = coll_find(cl, db, coll);
    if (existing) {
        if (key_cmp(&existing->key, &key) == 0 && bson_equal(&existing->key, &key)) {
            bson_t d = BSON_INITIALIZER;
            BSON_APPEND_UTF8(&d, "collectionsharded", ns);
            reply_doc_ok(r, &d);
        } else
            reply_error(r, 20, "sharding already enabled for collection %s with a different key", ns);
        return;
    }
    cl_db *d = db_ensure(cl, db, -1);
    sim_server *ps = cl->shards[d->primary].srv;
    bool was_empty = store_count(ps->store, db, coll) == 0;
    /* The collection is created on the primary shard when missing (shardCollection creates it), logged as a create. */
    if (store_ns_kind_of(ps->store, db, coll) == STORE_NS_NONE) {
        bson_t cc = BSON_INITIALIZER, rep;
        BSON_APPEND_UTF8(&cc, "create", coll);
        shard_call(ps, db, &cc, &rep);
        bson_destroy(&cc);
        if (!reply_is_ok(&rep)) {
            reply_bson(r, &rep);
            bson_destroy(&rep);
            return;
        }
        bson_destroy(&rep);
    } else if (store_ns_kind_of(ps->store, db, coll) != STORE_NS_COLLECTION) {
        reply_error(r, 166, "Namespace %s is a view, not a collection", ns);
        return;
    }
    cl_coll *c = calloc(1, sizeof *c);
    if (!c)
        abort();
    snprintf(c->ns, sizeof c->ns, "%s", ns);
    snprintf(c->db, sizeof c->db, "%s", db);
    snprintf(c->coll, sizeof c->coll, "%s", coll);
    bson_copy_to(&key, &c->key);
    if (hashed)
        snprintf(c->hashed, sizeof c->hashed, "%s", hashed);
    c->unique = get_bool(cmd, "unique");
    store_collection_uuid(ps->store, db, coll, c->uuid);
    bson_oid_init(&c->epoch, NULL);
    c->timestamp = ++cl->clock;
    c->lastmod_ms = sim_now_ms();
    c->major = 1;
    /* Existing documents must have the key (a real server checks the shard key index; mongosim treats a missing
     * field as null, which MinKey..MaxKey holds). One chunk covers the whole key space on the primary shard, except
     * for an empty collection with a single hashed field: 2 chunks per shard, split points symmetric around 0
     * (InitialSplitPolicy::calculateHashedSplitPoints), in contiguous runs per shard
     * (generateShardCollectionInitialChunks). */
    int active[CL_MAX_SHARDS];
    size_t nactive = 0;
    for (size_t i = 0; i < cl->nshards; i++)
        if (!cl->shards[i].removed && !cl->shards[i].draining)
            active[nactive++] = (int)i;
    int64_t splits[2 * CL_MAX_SHARDS];
    size_t nsplits = 0;
    if (hashed && nfields == 1 && was_empty && nactive > 0) {
        int64_t nchunks = 2 * (int64_t)nactive;
        int64_t interval = (INT64_MAX / nchunks) * 2, cur = 0;
        if (nchunks % 2 == 0) {
            splits[nsplits++] = cur;
            cur += interval;
        } else
            cur += interval / 2;
        for (int64_t i = 0; i < (nchunks - 1) / 2; i++) {
            splits[nsplits++] = cur;
            splits[nsplits++] = -cur;
            cur += interval;
        }
        for (size_t i = 1; i < nsplits; i++)
            for (size_t j = i; j > 0 && splits[j - 1] > splits[j]; j--) {
                int64_t t = splits[j];
                splits[j] = splits[j - 1];
                splits[j - 1] = t;
            }
    }
    size_t per_shard = nsplits ? (nsplits + 1 + nactive - 1) / nactive : 1;
    for (size_t i = 0; i <= nsplits; i++) {
        cl_chunk *ch = chunk_add(c);
        bson_init(&ch->min);
        bson_init(&ch->max);
        bson_iter_init(&kit, &key);
        while (bson_iter_next(&kit)) {
            if (i == 0)
                bson_append_minkey(&ch->min, bson_iter_key(&kit), -1);
            else
                bson_append_int64(&ch->min, bson_iter_key(&kit), -1, splits[i - 1]);
            if (i == nsplits)
                bson_append_maxkey(&ch->max, bson_iter_key(&kit), -1);
            else
                bson_append_int64(&ch->max, bson_iter_key(&kit), -1, splits[i]);
        }
        ch->shard = nsplits ? active[(i / per_shard) % nactive] : d->primary;
        ch->major = 1;
        ch->minor = (uint32_t)i;
        ch->since = c->timestamp;
        history_set(cl, ch, false);
    }
    cl->colls = realloc(cl->colls, (cl->ncolls + 1) * sizeof *cl->colls);
    if (!cl->colls)
        abort();
    cl->colls[cl->ncolls++] = c;
    /* The other shards that got chunks create the collection as participants, with its UUID and fromMigrate: true
     * (_shardsvrCreateCollectionParticipant -> MigrationDestinationManager::cloneCollectionIndexesAndOptions). */
    for (size_t i = 0; i < cl->nshards; i++) {
        if ((int)i == d->primary || chunks_on(c, (int)i) == 0 ||
            store_ns_kind_of(cl->shards[i].srv->store, db, coll) != STORE_NS_NONE)
            continue;
        migrate_emit_ctx m = {.srv = cl->shards[i].srv};
        bson_error_t err;
        if (!store_create(cl->shards[i].srv->store, db, coll, emit_from_migrate, &m, &err))
            fprintf(stderr, "mongosim: shardCollection: creating %s on %s: %s\n", ns, cl->shards[i].id, err.message);
    }
    /* The primary shard's noop for change streams: {op: "n", ns, ui, o: {msg: {shardCollection: ns}}, o2:
     * {shardCollection: ns, shardKey, unique?}} (notifyChangeStreamsOnShardCollection, the request's fields after
     * the namespace). */
    {
        bson_t body = BSON_INITIALIZER, o, msg, o2;
        BSON_APPEND_UTF8(&body, "op", "n");
        BSON_APPEND_UTF8(&body, "ns", ns);
        append_uuid16(&body, "ui", c->uuid);
        BSON_APPEND_DOCUMENT_BEGIN(&body, "o", &o);
        BSON_APPEND_DOCUMENT_BEGIN(&o, "msg", &msg);
        BSON_APPEND_UTF8(&msg, "shardCollection", ns);
        bson_append_document_end(&o, &msg);
        bson_append_document_end(&body, &o);
        BSON_APPEND_DOCUMENT_BEGIN(&body, "o2", &o2);
        BSON_APPEND_UTF8(&o2, "shardCollection", ns);
        BSON_APPEND_DOCUMENT(&o2, "shardKey", &key);
        if (bson_has_field(cmd, "unique"))
            BSON_APPEND_BOOL(&o2, "unique", c->unique);
        bson_append_document_end(&body, &o2);
        bson_error_t err;
        if (!sim_append_body(ps, &body, &err))
            fprintf(stderr, "mongosim: shardCollection noop: %s\n", err.message);
        bson_destroy(&body);
    }
    bson_t o = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&o, "collectionsharded", ns);
    append_uuid16(&o, "collectionUUID", c->uuid);
    reply_doc_ok(r, &o);
}

static cl_coll *coll_arg(sim_cluster *cl, sim_reply *r, const bson_t *cmd, const char *name)
{
    const char *ns;
    if (!get_str(cmd, name, &ns)) {
        reply_error(r, 73, "%s needs a namespace", name);
        return NULL;
    }
    cl_coll *c = coll_find_ns(cl, ns);
    if (!c)
        reply_error(r, 118, "Collection %s is not sharded.", ns);
    return c;
}

/* The chunk a command names: find (a document with the shard key) or bounds [min, max]. */
static cl_chunk *chunk_arg(cl_coll *c, const bson_t *cmd, sim_reply *r)
{
    bson_t find, bounds;
    if (get_doc(cmd, "find", &find)) {
        bson_t key;
        extract_key(c, &find, &key);
        cl_chunk *ch = chunk_for_key(c, &key);
        bson_destroy(&key);
        if (!ch)
            reply_error(r, 2, "no chunk holds that key");
        return ch;
    }
    if (get_doc(cmd, "bounds", &bounds)) {
        bson_iter_t it;
        bson_t mn, mx;
        if (bson_iter_init(&it, &bounds) && bson_iter_next(&it) && iter_subdoc(&it, &mn) && bson_iter_next(&it) &&
            iter_subdoc(&it, &mx)) {
            for (size_t i = 0; i < c->nchunks; i++)
                if (key_cmp(&c->chunks[i]->min, &mn) == 0 && key_cmp(&c->chunks[i]->max, &mx) == 0)
                    return c->chunks[i];
        }
        reply_error(r, 2, "no chunk has exactly these bounds");
        return NULL;
    }
    reply_error(r, 2, "need either find or bounds");
    return NULL;
}

/* {split: ns, middle: {k: v}}: the chunk holding middle becomes [min, middle) and [middle, max), both with the
 * collection's next minor versions (config server's commitChunkSplit). */
static void r_split(sim_cluster *cl, sim_reply *r, const bson_t *cmd)
{
    cl_coll *c = coll_arg(cl, r, cmd, "split");
    if (!c)
        return;
    bson_t middle, mkey;
    if (!get_doc(cmd, "middle", &middle)) {
        reply_error(r, 2, "mongosim's split needs middle");
        return;
    }
    extract_key_as(c, &middle, true, &mkey);
    cl_chunk *ch = chunk_for_key(c, &mkey);
    if (!ch || key_cmp(&ch->min, &mkey) == 0) {
        bson_destroy(&mkey);
        reply_error(r, 2, "cannot split on the chunk's lower bound");
        return;
    }
    cl_chunk *hi = chunk_add(c);
    bson_copy_to(&mkey, &hi->min);
    bson_copy_to(&ch->max, &hi->max);
    bson_destroy(&ch->max);
    bson_copy_to(&mkey, &ch->max);
    bson_destroy(&mkey);
    hi->shard = ch->shard;
    hi->since = ch->since;
    bson_copy_to(&ch->history, &hi->history);
    uint32_t minor = 0;
    for (size_t i = 0; i < c->nchunks; i++)
        if (c->chunks[i]->major == c->major && c->chunks[i]->minor > minor)
            minor = c->chunks[i]->minor;
    ch->major = hi->major = c->major;
    ch->minor = minor + 1;
    hi->minor = minor + 2;
    bson_t o = BSON_INITIALIZER;
    reply_doc_ok(r, &o);
}

/* The range deleter: deletes what is left of [min, max) on a shard that does not own it (fromMigrate: true). */
static void range_delete(sim_cluster *cl, int shard, const char *ns, const bson_t *mn, const bson_t *mx)
{
    cl_coll *c = coll_find_ns(cl, ns);
    if (!c)
        return;
    sim_server *srv = cl->shards[shard].srv;
    cl_cursor *cur = cursor_new(cl, "");
    bson_t empty = BSON_INITIALIZER;
    /* Every document of the collection on that shard; those in the range and not owned there go. */
    collect_ctx x = {.cl = cl, .c = NULL, .shard = shard, .cur = cur};
    store_find(srv->store, c->db, c->coll, &empty, collect_doc, &x);
    migrate_emit_ctx m = {.srv = srv};
    for (size_t i = 0; i < cur->n; i++) {
        bson_t key;
        extract_key(c, cur->docs[i], &key);
        bool in = key_cmp(mn, &key) <= 0 && key_cmp(&key, mx) < 0;
        cl_chunk *ch = chunk_for_key(c, &key);
        bson_destroy(&key);
        bson_iter_t id;
        if (!in || (ch && ch->shard == shard) || !bson_iter_init_find(&id, cur->docs[i], "_id"))
            continue;
        bson_t q = BSON_INITIALIZER;
        bson_append_iter(&q, "_id", 3, &id);
        int64_t n;
        bson_error_t err;
        if (!store_delete(srv->store, c->db, c->coll, &q, 1, &n, emit_from_migrate, &m, &err))
            fprintf(stderr, "mongosim: range deletion on %s: %s\n", cl->shards[shard].id, err.message);
        bson_destroy(&q);
    }
    bson_destroy(&empty);
    for (size_t i = 0; i < cur->n; i++)
        bson_destroy(cur->docs[i]);
    free(cur->docs);
    free(cur);
}

static void range_del_free(sim_cluster *cl, cl_range_del *d)
{
    for (cl_range_del **p = &cl->dels; *p; p = &(*p)->next)
        if (*p == d) {
            *p = d->next;
            break;
        }
    ev_timer_stop(cl->loop, &d->timer);
    bson_destroy(&d->min);
    bson_destroy(&d->max);
    free(d);
}

static void on_range_delete(struct ev_loop *loop, ev_timer *w, int revents)
{
    cl_range_del *d = w->data;
    sim_cluster *cl = d->cl;
    range_delete(cl, d->shard, d->ns, &d->min, &d->max);
    range_del_free(cl, d);
}

static bool append_noop_o2(sim_server *srv, const cl_coll *c, const char *msg, const bson_t *o2)
{
    bson_t body = BSON_INITIALIZER, o;
    BSON_APPEND_UTF8(&body, "op", "n");
    BSON_APPEND_UTF8(&body, "ns", c->ns);
    append_uuid16(&body, "ui", c->uuid);
    BSON_APPEND_DOCUMENT_BEGIN(&body, "o", &o);
    BSON_APPEND_UTF8(&o, "msg", msg);
    bson_append_document_end(&body, &o);
    BSON_APPEND_DOCUMENT(&body, "o2", o2);
    bson_error_t err;
    bool ok = sim_append_body(srv, &body, &err);
    if (!ok)
        fprintf(stderr, "mongosim: cannot log a migration noop: %s\n", err.message);
    bson_destroy(&body);
    return ok;
}

typedef struct {
    cl_coll *c;
    const cl_chunk *ch;
    cl_cursor *cur;
} range_ctx;

static bool collect_in_range(void *ctx, const bson_t *doc)
{
    range_ctx *x = ctx;
    bson_t key;
    extract_key(x->c, doc, &key);
    if (key_cmp(&x->ch->min, &key) <= 0 && key_cmp(&key, &x->ch->max) < 0)
        cursor_push(x->cur, doc);
    bson_destroy(&key);
    return true;
}

/* Moves one chunk, writing what servers write (see README.md, "Migrations"). */
static bool move_chunk(sim_cluster *cl, cl_coll *c, cl_chunk *ch, int to, char *errmsg, size_t errlen)
{
    int from = ch->shard;
    if (from == to)
        return true;
    sim_server *donor = cl->shards[from].srv, *recip = cl->shards[to].srv;
    /* A recipient without a chunk of the collection: the donor first logs the noop change streams use to open a
     * cursor on the new shard (migration_source_manager.cpp, _notifyChangeStreamsOnRecipientFirstChunk). */
    if (chunks_on(c, to) == 0) {
        char msg[600];
        snprintf(msg, sizeof msg, "Migrating chunk from shard %s to shard %s with no chunks for this collection",
                 cl->shards[from].id, cl->shards[to].id);
        bson_t o2 = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&o2, "migrateChunkToNewShard", c->ns);
        BSON_APPEND_UTF8(&o2, "fromShardId", cl->shards[from].id);
        BSON_APPEND_UTF8(&o2, "toShardId", cl->shards[to].id);
        append_noop_o2(donor, c, msg, &o2);
        bson_destroy(&o2);
    }
    /* The recipient creates the collection with the donor's UUID and options (fromMigrate: true,
     * migration_destination_manager.cpp cloneCollectionIndexesAndOptions -> userCreateNS(..., fromMigrate)), then
     * inserts the cloned documents with fromMigrate: true. */
    migrate_emit_ctx m = {.srv = recip};
    bson_error_t err;
    if (store_ns_kind_of(recip->store, c->db, c->coll) == STORE_NS_NONE &&
        !store_create(recip->store, c->db, c->coll, emit_from_migrate, &m, &err)) {
        snprintf(errmsg, errlen, "recipient cannot create %s: %s", c->ns, err.message);
        return false;
    }
    cl_cursor *cur = cursor_new(cl, "");
    bson_t empty = BSON_INITIALIZER;
    range_ctx rx = {.c = c, .ch = ch, .cur = cur};
    store_find(donor->store, c->db, c->coll, &empty, collect_in_range, &rx);
    bson_destroy(&empty);
    bool ok = true;
    for (size_t i = 0; i < cur->n && ok; i++) {
        if (!store_insert(recip->store, c->db, c->coll, cur->docs[i], emit_from_migrate, &m, &err)) {
            snprintf(errmsg, errlen, "recipient cannot insert a cloned document: %s", err.message);
            ok = false;
        }
    }
    for (size_t i = 0; i < cur->n; i++)
        bson_destroy(cur->docs[i]);
    free(cur->docs);
    free(cur);
    if (!ok || m.failed)
        return false;
    /* Commit on the config server: the chunk's new shard and major version (commitChunkMigration). */
    c->major++;
    ch->shard = to;
    ch->major = c->major;
    ch->minor = 0;
    ch->since = ++cl->clock;
    history_set(cl, ch, true);
    /* A donor left without chunks logs migrateLastChunkFromShard (migration_source_manager.cpp,
     * _notifyChangeStreamsOnDonorLastChunk). */
    if (chunks_on(c, from) == 0) {
        char msg[600];
        snprintf(msg, sizeof msg, "Migrate the last chunk for %s off shard %s", c->ns, cl->shards[from].id);
        bson_t o2 = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&o2, "migrateLastChunkFromShard", c->ns);
        BSON_APPEND_UTF8(&o2, "shardId", cl->shards[from].id);
        append_noop_o2(donor, c, msg, &o2);
        bson_destroy(&o2);
    }
    /* The donor's range deletion, after orphanCleanupDelaySecs (range_deletion_util.cpp; fromMigrate: true). */
    if (cl->orphan_delay <= 0)
        range_delete(cl, from, c->ns, &ch->min, &ch->max);
    else {
        cl_range_del *d = calloc(1, sizeof *d);
        if (!d)
            abort();
        d->cl = cl;
        d->shard = from;
        snprintf(d->ns, sizeof d->ns, "%s", c->ns);
        bson_copy_to(&ch->min, &d->min);
        bson_copy_to(&ch->max, &d->max);
        ev_timer_init(&d->timer, on_range_delete, cl->orphan_delay, 0.);
        d->timer.data = d;
        ev_timer_start(cl->loop, &d->timer);
        d->next = cl->dels;
        cl->dels = d;
    }
    return true;
}

static void r_move_chunk(sim_cluster *cl, sim_reply *r, const bson_t *cmd)
{
    cl_coll *c = coll_arg(cl, r, cmd, "moveChunk");
    if (!c)
        return;
    const char *to;
    int ti;
    if (!get_str(cmd, "to", &to) || (ti = shard_index(cl, to)) < 0) {
        reply_error(r, 70, "moveChunk: unknown destination shard");
        return;
    }
    cl_chunk *ch = chunk_arg(c, cmd, r);
    if (!ch)
        return;
    char errmsg[800];
    if (!move_chunk(cl, c, ch, ti, errmsg, sizeof errmsg)) {
        reply_error(r, 1, "moveChunk: %s", errmsg);
        return;
    }
    bson_t o = BSON_INITIALIZER;
    BSON_APPEND_BOOL(&o, "millis", 0);
    reply_doc_ok(r, &o);
}

/* A new shard: today's replica set on a free port, named shardK (test command mongosimAddShard). */
static sim_server *shard_start(sim_cluster *cl, size_t i, bson_error_t *err)
{
    sim_options so = cl->opts;
    snprintf(cl->shards[i].id, sizeof cl->shards[i].id, "shard%zu", i);
    so.port = 0;
    so.set_name = cl->shards[i].id;
    so.state_dir = so.data_dir = so.oplog_file = NULL;
    so.clock = &cl->clock;
    /* Each shard its own random stream (its oplog read delays), all from the one --seed. */
    uint64_t mix = cl->opts.seed ^ (0xd1b54a32d192ed03ull * (uint64_t)(i + 1));
    so.seed = sim_random_next(&mix);
    sim_server *s = sim_server_new(&so, cl->loop, err);
    if (!s)
        return NULL;
    /* set_name points into cl->shards[i].id, which lives as long as the cluster. */
    s->cluster = cl;
    store_set_shard_hooks(s->store, hook_uuid, hook_doc_key, cl);
    cl->shards[i].srv = s;
    cl->shards[i].topology_time = ++cl->clock;
    return s;
}

static void r_add_shard(sim_cluster *cl, sim_reply *r)
{
    if (cl->nshards >= CL_MAX_SHARDS) {
        reply_error(r, 2, "mongosim holds at most %d shards", CL_MAX_SHARDS);
        return;
    }
    bson_error_t err;
    size_t i = cl->nshards;
    memset(&cl->shards[i], 0, sizeof cl->shards[i]);
    if (!shard_start(cl, i, &err)) {
        reply_error(r, 1, "mongosimAddShard: %s", err.message);
        return;
    }
    cl->nshards++;
    char host[600];
    snprintf(host, sizeof host, "%s/%s", cl->shards[i].id, cl->shards[i].srv->me);
    bson_t d = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&d, "shardAdded", cl->shards[i].id);
    BSON_APPEND_UTF8(&d, "host", host);
    BSON_APPEND_INT32(&d, "port", sim_server_port(cl->shards[i].srv));
    reply_doc_ok(r, &d);
}

/* {removeShard: id}: the first call marks the shard draining and, standing in for the balancer, moves every chunk it
 * holds to the other shards at once (state "started"); later calls answer "ongoing" while databases still have it as
 * primary (dbsToMove), then remove it from config.shards ("completed"). Replies as
 * src/mongo/s/commands/cluster_remove_shard_cmd.cpp / the config server's removeShard. */
static void r_remove_shard(sim_cluster *cl, sim_reply *r, const bson_t *cmd)
{
    const char *id;
    int s;
    if (!get_str(cmd, "removeShard", &id) || (s = shard_index(cl, id)) < 0) {
        reply_error(r, 70, "Shard %s not found", get_str(cmd, "removeShard", &id) ? id : "?");
        return;
    }
    size_t active = 0;
    for (size_t i = 0; i < cl->nshards; i++)
        active += !cl->shards[i].removed && !cl->shards[i].draining;
    if (!cl->shards[s].draining && active <= 1) {
        reply_error(r, 20, "Operation not allowed because it would remove the last shard");
        return;
    }
    bson_t d = BSON_INITIALIZER;
    if (!cl->shards[s].draining) {
        cl->shards[s].draining = true;
        size_t rr = 0;
        for (size_t k = 0; k < cl->ncolls; k++) {
            cl_coll *c = cl->colls[k];
            for (size_t j = 0; j < c->nchunks; j++) {
                if (c->chunks[j]->shard != s)
                    continue;
                int to = -1;
                for (size_t tries = 0; tries < cl->nshards && to < 0; tries++, rr++) {
                    size_t cand = rr % cl->nshards;
                    if (!cl->shards[cand].removed && !cl->shards[cand].draining)
                        to = (int)cand;
                }
                char errmsg[800];
                if (to < 0 || !move_chunk(cl, c, c->chunks[j], to, errmsg, sizeof errmsg)) {
                    bson_destroy(&d);
                    reply_error(r, 1, "removeShard: moving a chunk: %s", to < 0 ? "no shard left" : errmsg);
                    return;
                }
            }
        }
        BSON_APPEND_UTF8(&d, "msg", "draining started successfully");
        BSON_APPEND_UTF8(&d, "state", "started");
        BSON_APPEND_UTF8(&d, "shard", id);
    }
    bson_t dbs = BSON_INITIALIZER;
    int ndb = 0;
    for (size_t i = 0; i < cl->ndbs; i++)
        if (cl->dbs[i].primary == s) {
            char k[24];
            snprintf(k, sizeof k, "%d", ndb++);
            BSON_APPEND_UTF8(&dbs, k, cl->dbs[i].name);
        }
    if (bson_empty(&d)) {
        if (ndb == 0) {
            cl->shards[s].removed = true;
            cl->shards[s].topology_time = ++cl->clock;
            BSON_APPEND_UTF8(&d, "msg", "removeshard completed successfully");
            BSON_APPEND_UTF8(&d, "state", "completed");
            BSON_APPEND_UTF8(&d, "shard", id);
        } else {
            bson_t rem;
            BSON_APPEND_UTF8(&d, "msg", "draining ongoing");
            BSON_APPEND_UTF8(&d, "state", "ongoing");
            BSON_APPEND_DOCUMENT_BEGIN(&d, "remaining", &rem);
            BSON_APPEND_INT64(&rem, "chunks", 0);
            BSON_APPEND_INT64(&rem, "dbs", ndb);
            BSON_APPEND_INT64(&rem, "jumboChunks", 0);
            bson_append_document_end(&d, &rem);
            BSON_APPEND_UTF8(&d, "note", "you need to call movePrimary for these databases");
            BSON_APPEND_ARRAY(&d, "dbsToMove", &dbs);
        }
    } else {
        BSON_APPEND_UTF8(&d, "note", "you need to call movePrimary for these databases");
        BSON_APPEND_ARRAY(&d, "dbsToMove", &dbs);
    }
    bson_destroy(&dbs);
    reply_doc_ok(r, &d);
}

/* {movePrimary: db, to: shard}: the database's unsharded collections are copied to the new primary and dropped on the
 * old one (movePrimary's cloner; entries written as a plain copy, fromMigrate: true) and config.databases changes. */
static void r_move_primary(sim_cluster *cl, sim_reply *r, const bson_t *cmd)
{
    const char *db, *to;
    int ti;
    cl_db *d;
    if (!get_str(cmd, "movePrimary", &db) || !(d = db_find(cl, db))) {
        reply_error(r, 26, "Database not found");
        return;
    }
    if (!get_str(cmd, "to", &to) || (ti = shard_index(cl, to)) < 0) {
        reply_error(r, 70, "movePrimary: unknown destination shard");
        return;
    }
    int from = d->primary;
    if (from != ti) {
        sim_server *src = cl->shards[from].srv, *dst = cl->shards[ti].srv;
        cl_cursor *names = cursor_new(cl, "");
        bson_t cmd_l = BSON_INITIALIZER, rep;
        BSON_APPEND_INT32(&cmd_l, "listCollections", 1);
        BSON_APPEND_BOOL(&cmd_l, "nameOnly", true);
        shard_call(src, db, &cmd_l, &rep);
        bson_destroy(&cmd_l);
        bson_iter_t it;
        if (bson_iter_init(&it, &rep) && bson_iter_find_descendant(&it, "cursor.firstBatch", &it) &&
            BSON_ITER_HOLDS_ARRAY(&it)) {
            bson_iter_t e;
            bson_iter_recurse(&it, &e);
            while (bson_iter_next(&e)) {
                bson_t nd;
                const char *nm;
                if (iter_subdoc(&e, &nd) && get_str(&nd, "name", &nm) && !coll_find(cl, db, nm) &&
                    strncmp(nm, "system.", 7) != 0) {
                    bson_t one = BSON_INITIALIZER;
                    BSON_APPEND_UTF8(&one, "n", nm);
                    cursor_push(names, &one);
                    bson_destroy(&one);
                }
            }
        }
        bson_destroy(&rep);
        for (size_t i = 0; i < names->n; i++) {
            const char *nm = "";
            get_str(names->docs[i], "n", &nm);
            cl_cursor *docs = cursor_new(cl, "");
            bson_t empty = BSON_INITIALIZER;
            collect_ctx x = {.cl = cl, .c = NULL, .shard = from, .cur = docs};
            store_find(src->store, db, nm, &empty, collect_doc, &x);
            migrate_emit_ctx mi = {.srv = dst}, md = {.srv = src};
            bson_error_t err;
            if (store_ns_kind_of(dst->store, db, nm) == STORE_NS_NONE)
                store_create(dst->store, db, nm, emit_from_migrate, &mi, &err);
            for (size_t j = 0; j < docs->n; j++)
                store_insert(dst->store, db, nm, docs->docs[j], emit_from_migrate, &mi, &err);
            bool existed;
            store_drop(src->store, db, nm, &existed, emit_from_migrate, &md, &err);
            bson_destroy(&empty);
            for (size_t j = 0; j < docs->n; j++)
                bson_destroy(docs->docs[j]);
            free(docs->docs);
            free(docs);
        }
        for (size_t i = 0; i < names->n; i++)
            bson_destroy(names->docs[i]);
        free(names->docs);
        free(names);
        d->primary = ti;
    }
    bson_t o = BSON_INITIALIZER;
    reply_doc_ok(r, &o);
}

/* ---- transactions through the router ---- */

static void txn_cmd(const bson_t *cmd, const char *name, bson_t *out)
{
    bson_init(out);
    BSON_APPEND_INT32(out, name, 1);
    bson_iter_t it;
    if (bson_iter_init_find(&it, cmd, "lsid"))
        bson_append_iter(out, "lsid", 4, &it);
    if (bson_iter_init_find(&it, cmd, "txnNumber"))
        bson_append_iter(out, "txnNumber", 9, &it);
    BSON_APPEND_BOOL(out, "autocommit", false);
}

static void coord_id(const uint8_t *lsid, int64_t txn, bson_t *out)
{
    bson_t l;
    bson_init(out);
    BSON_APPEND_DOCUMENT_BEGIN(out, "lsid", &l);
    append_uuid16(&l, "id", lsid);
    {
        /* uid: sha256 of the empty user name, as shards record an unauthenticated client's lsid (txn.c). */
        bson_t tmp = BSON_INITIALIZER;
        txn_append_lsid(&tmp, lsid);
        bson_iter_t it;
        if (bson_iter_init(&it, &tmp) && bson_iter_find_descendant(&it, "lsid.uid", &it))
            bson_append_iter(&l, "uid", 3, &it);
        bson_destroy(&tmp);
    }
    bson_append_document_end(out, &l);
    BSON_APPEND_INT64(out, "txnNumber", txn);
}

/* Runs a write on the coordinator shard's config.transaction_coordinators (no session: the coordinator's own writes,
 * transaction_coordinator_util.cpp). */
static void coord_write(sim_server *srv, const char *kind, const char *arr_key, bson_t *stmt)
{
    bson_t c = BSON_INITIALIZER, list = BSON_INITIALIZER, rep;
    BSON_APPEND_UTF8(&c, kind, "transaction_coordinators");
    BSON_APPEND_DOCUMENT(&list, "0", stmt);
    BSON_APPEND_ARRAY(&c, arr_key, &list);
    shard_call(srv, "config", &c, &rep);
    if (!reply_is_ok(&rep))
        fprintf(stderr, "mongosim: the coordinator's %s of config.transaction_coordinators failed\n", kind);
    bson_destroy(&rep);
    bson_destroy(&list);
    bson_destroy(&c);
}

/* commitTransaction through the router (mongos's TransactionRouter::commitTransaction): no participant: nothing; one:
 * its commitTransaction; several: two-phase commit run by the first participant as coordinator
 * (transaction_coordinator.cpp): persist {_id: {lsid, txnNumber}, participants} (an upsert, so an 'i' entry), send
 * prepareTransaction to each participant, pick the largest prepareTimestamp as commitTimestamp, persist the decision
 * {$set: {decision: {decision: "commit", commitTimestamp}}}, send commitTransaction with it to each participant, then
 * delete the document. A failed prepare decides abort: {decision: "abort"}, then abortTransaction everywhere. */
/* The coordinator's abort decision reaches the client as NoSuchTransaction, a TransientTransactionError
 * (transaction_coordinator.cpp: the decision's abortStatus; isTransientTransactionError). */
static void reply_aborted(sim_reply *r, int64_t txn)
{
    char msg[200];
    snprintf(msg, sizeof msg,
             "Transaction with { txnNumber: %" PRId64 " } has been aborted. :: caused by :: a participant failed to "
             "prepare",
             txn);
    bson_t e = BSON_INITIALIZER, labels;
    BSON_APPEND_DOUBLE(&e, "ok", 0.0);
    BSON_APPEND_UTF8(&e, "errmsg", msg);
    BSON_APPEND_INT32(&e, "code", 251);
    BSON_APPEND_UTF8(&e, "codeName", "NoSuchTransaction");
    BSON_APPEND_ARRAY_BEGIN(&e, "errorLabels", &labels);
    BSON_APPEND_UTF8(&labels, "0", "TransientTransactionError");
    bson_append_array_end(&e, &labels);
    reply_bson(r, &e);
    bson_destroy(&e);
}

static void r_commit(sim_cluster *cl, sim_reply *r, const bson_t *cmd, bool abort_it)
{
    uint8_t lsid[16];
    int64_t txn;
    cl_txn *t = txn_parse_session(cmd, lsid, &txn) ? txn_find(cl, lsid, txn, false) : NULL;
    /* A decided two-phase commit answers a retried commitTransaction (the drivers retry it) with its decision, as the
     * coordinator does while it remembers it; abortTransaction after a commit is 256 TransactionCommitted. */
    if (t && t->decided == 1) {
        if (abort_it) {
            reply_error(r, 256, "Transaction with { txnNumber: %" PRId64 " } has been committed.", txn);
            return;
        }
        bson_t o = BSON_INITIALIZER;
        reply_doc_ok(r, &o);
        return;
    }
    if (t && t->decided == 2) {
        reply_aborted(r, txn);
        return;
    }
    if (!t || t->nparts == 0) {
        if (abort_it) {
            reply_error(r, 251, "Transaction with { txnNumber: %" PRId64 " } has been aborted.", txn);
            return;
        }
        bson_t o = BSON_INITIALIZER;
        reply_doc_ok(r, &o);
        return;
    }
    if (abort_it || t->nparts == 1) {
        bson_t first;
        bool have = false;
        for (size_t i = 0; i < t->nparts; i++) {
            bson_t sc = BSON_INITIALIZER, rep;
            copy_except(cmd, &sc, NULL);
            shard_call(cl->shards[t->parts[i]].srv, "admin", &sc, &rep);
            bson_destroy(&sc);
            if (!have) {
                bson_copy_to(&rep, &first);
                have = true;
            }
            bson_destroy(&rep);
        }
        if (abort_it)
            t->nparts = 0;
        reply_bson(r, &first);
        bson_destroy(&first);
        return;
    }
    sim_server *coord = cl->shards[t->parts[0]].srv;
    bson_t id, stmt, u, parts = BSON_INITIALIZER;
    coord_id(lsid, txn, &id);
    for (size_t i = 0; i < t->nparts; i++) {
        char k[24];
        snprintf(k, sizeof k, "%zu", i);
        BSON_APPEND_UTF8(&parts, k, cl->shards[t->parts[i]].id);
    }
    bson_init(&stmt);
    bson_t q = BSON_INITIALIZER;
    BSON_APPEND_DOCUMENT(&q, "_id", &id);
    BSON_APPEND_DOCUMENT(&stmt, "q", &q);
    bson_init(&u);
    BSON_APPEND_DOCUMENT(&u, "_id", &id);
    BSON_APPEND_ARRAY(&u, "participants", &parts);
    BSON_APPEND_DOCUMENT(&stmt, "u", &u);
    BSON_APPEND_BOOL(&stmt, "upsert", true);
    coord_write(coord, "update", "updates", &stmt);
    bson_destroy(&stmt);
    bson_destroy(&u);
    uint64_t commit_ts = 0;
    bool prepared_ok = true;
    bson_t fail;
    bson_init(&fail);
    for (size_t i = 0; i < t->nparts; i++) {
        bson_t pc, rep;
        txn_cmd(cmd, "prepareTransaction", &pc);
        shard_call(cl->shards[t->parts[i]].srv, "admin", &pc, &rep);
        bson_destroy(&pc);
        bson_iter_t it;
        if (reply_is_ok(&rep) && bson_iter_init_find(&it, &rep, "prepareTimestamp") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            uint32_t s, n;
            bson_iter_timestamp(&it, &s, &n);
            if (OPLOG_TS(s, n) > commit_ts)
                commit_ts = OPLOG_TS(s, n);
        } else if (prepared_ok) {
            prepared_ok = false;
            bson_destroy(&fail);
            bson_copy_to(&rep, &fail);
        }
        bson_destroy(&rep);
    }
    bson_t dec, set, dd;
    bson_init(&stmt);
    BSON_APPEND_DOCUMENT(&stmt, "q", &q);
    bson_init(&dec);
    BSON_APPEND_DOCUMENT_BEGIN(&dec, "$set", &set);
    BSON_APPEND_DOCUMENT_BEGIN(&set, "decision", &dd);
    BSON_APPEND_UTF8(&dd, "decision", prepared_ok ? "commit" : "abort");
    if (prepared_ok)
        BSON_APPEND_TIMESTAMP(&dd, "commitTimestamp", OPLOG_TS_SECS(commit_ts), OPLOG_TS_INC(commit_ts));
    else {
        /* An abort decision carries the participant's error (CoordinatorCommitDecision's abortStatus,
         * transaction_coordinator_document.idl). */
        bson_t st;
        const char *cn = "UnknownError", *em = "";
        get_str(&fail, "codeName", &cn);
        get_str(&fail, "errmsg", &em);
        BSON_APPEND_DOCUMENT_BEGIN(&dd, "abortStatus", &st);
        BSON_APPEND_INT32(&st, "code", (int32_t)opt_i64(&fail, "code", 1));
        BSON_APPEND_UTF8(&st, "codeName", cn);
        BSON_APPEND_UTF8(&st, "errmsg", em);
        bson_append_document_end(&dd, &st);
    }
    bson_append_document_end(&set, &dd);
    bson_append_document_end(&dec, &set);
    BSON_APPEND_DOCUMENT(&stmt, "u", &dec);
    coord_write(coord, "update", "updates", &stmt);
    bson_destroy(&stmt);
    bson_destroy(&dec);
    for (size_t i = 0; i < t->nparts; i++) {
        bson_t cc, rep;
        txn_cmd(cmd, prepared_ok ? "commitTransaction" : "abortTransaction", &cc);
        if (prepared_ok)
            BSON_APPEND_TIMESTAMP(&cc, "commitTimestamp", OPLOG_TS_SECS(commit_ts), OPLOG_TS_INC(commit_ts));
        shard_call(cl->shards[t->parts[i]].srv, "admin", &cc, &rep);
        bson_destroy(&cc);
        bson_destroy(&rep);
    }
    bson_init(&stmt);
    BSON_APPEND_DOCUMENT(&stmt, "q", &q);
    BSON_APPEND_INT32(&stmt, "limit", 1);
    coord_write(coord, "delete", "deletes", &stmt);
    bson_destroy(&stmt);
    bson_destroy(&q);
    bson_destroy(&id);
    bson_destroy(&parts);
    if (!prepared_ok) {
        t->nparts = 0;
        t->decided = 2;
        bson_destroy(&fail);
        reply_aborted(r, txn);
        return;
    }
    t->decided = 1;
    bson_destroy(&fail);
    bson_t o = BSON_INITIALIZER;
    reply_doc_ok(r, &o);
}

/* ---- handshake and status ---- */

/* mongos's hello (src/mongo/s/commands/cluster_hello_cmd.cpp): isWritablePrimary (ismaster for the legacy names),
 * msg "isdbgrid", the size limits, localTime, logicalSessionTimeoutMinutes, connectionId, wire versions, readOnly;
 * no setName, hosts or lastWrite. */
static void r_hello(sim_cluster *cl, sim_reply *r, const bson_t *cmd, const char *name)
{
    bool legacy = strcmp(name, "hello") != 0;
    bson_t d = BSON_INITIALIZER;
    BSON_APPEND_BOOL(&d, legacy ? "ismaster" : "isWritablePrimary", true);
    BSON_APPEND_UTF8(&d, "msg", "isdbgrid");
    BSON_APPEND_INT32(&d, "maxBsonObjectSize", SIM_MAX_BSON);
    BSON_APPEND_INT32(&d, "maxMessageSizeBytes", SIM_MAX_MESSAGE);
    BSON_APPEND_INT32(&d, "maxWriteBatchSize", 100000);
    BSON_APPEND_DATE_TIME(&d, "localTime", sim_now_ms());
    BSON_APPEND_INT32(&d, "logicalSessionTimeoutMinutes", 30);
    BSON_APPEND_INT32(&d, "connectionId", (int32_t)r->conn->id);
    BSON_APPEND_INT32(&d, "minWireVersion", 0);
    BSON_APPEND_INT32(&d, "maxWireVersion", sim_max_wire_version(cl->opts.format));
    BSON_APPEND_BOOL(&d, "readOnly", false);
    if (get_bool(cmd, "helloOk") || !legacy)
        BSON_APPEND_BOOL(&d, "helloOk", true);
    reply_doc_ok(r, &d);
}

static void r_status(sim_cluster *cl, sim_reply *r)
{
    bson_t d = BSON_INITIALIZER, arr;
    BSON_APPEND_TIMESTAMP(&d, "clusterTime", OPLOG_TS_SECS(cl->clock), OPLOG_TS_INC(cl->clock));
    BSON_APPEND_ARRAY_BEGIN(&d, "shards", &arr);
    for (size_t i = 0; i < cl->nshards; i++) {
        bson_t s;
        char k[24];
        snprintf(k, sizeof k, "%zu", i);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, k, &s);
        BSON_APPEND_UTF8(&s, "_id", cl->shards[i].id);
        BSON_APPEND_INT32(&s, "port", sim_server_port(cl->shards[i].srv));
        BSON_APPEND_BOOL(&s, "draining", cl->shards[i].draining);
        BSON_APPEND_BOOL(&s, "removed", cl->shards[i].removed);
        uint64_t l = oplog_last_ts(cl->shards[i].srv->oplog);
        BSON_APPEND_TIMESTAMP(&s, "lastTs", OPLOG_TS_SECS(l), OPLOG_TS_INC(l));
        BSON_APPEND_INT64(&s, "oplogCount", (int64_t)oplog_count(cl->shards[i].srv->oplog));
        bson_append_document_end(&arr, &s);
    }
    bson_append_array_end(&d, &arr);
    int64_t pending = 0;
    for (cl_range_del *x = cl->dels; x; x = x->next)
        pending++;
    BSON_APPEND_INT64(&d, "pendingRangeDeletions", pending);
    reply_doc_ok(r, &d);
}

/* ---- dispatch ---- */

void cluster_dispatch(sim_server *srv, sim_reply *r, const bson_t *cmd, const char *db)
{
    sim_cluster *cl = srv->cluster;
    bson_iter_t first;
    if (!bson_iter_init(&first, cmd) || !bson_iter_next(&first)) {
        reply_error(r, 9, "empty command document");
        return;
    }
    const char *name = bson_iter_key(&first);
    if (!db) {
        bson_iter_t it;
        if (!bson_iter_init_find(&it, cmd, "$db") || !BSON_ITER_HOLDS_UTF8(&it)) {
            reply_error(r, 40571, "OP_MSG requests require a $db argument");
            return;
        }
        db = bson_iter_utf8(&it, NULL);
    }
    if (cl->opts.verbose)
        fprintf(stderr, "mongosim: router conn %" PRId64 ": %s on %s\n", r->conn->id, name, db);
    /* mongos refuses every command on the local database: each shard and the config servers have their own, and
     * none is the cluster's (mongodb/mongo src/mongo/s/commands/strategy.cpp, runCommand: IllegalOperation, "Can't
     * use 'local' database through mongos"). */
    if (!strcmp(db, "local")) {
        reply_error(r, 20, "Can't use 'local' database through mongos");
        return;
    }
    bool admin = strcmp(db, "admin") == 0;
    if (!strcmp(name, "hello") || !strcmp(name, "isMaster") || !strcmp(name, "ismaster"))
        r_hello(cl, r, cmd, name);
    else if (!strcmp(name, "ping") || !strcmp(name, "endSessions")) {
        bson_t o = BSON_INITIALIZER;
        reply_doc_ok(r, &o);
    } else if (!strcmp(name, "buildInfo") || !strcmp(name, "buildinfo") || !strcmp(name, "listCollections") ||
               !strcmp(name, "create"))
        r_forward_primary(cl, r, cmd, !strcmp(name, "create") || !strcmp(name, "listCollections") ? db : "admin");
    else if (!strcmp(name, "listDatabases"))
        r_list_databases(cl, r);
    else if (!strcmp(name, "find"))
        r_find(cl, r, cmd, db);
    else if (!strcmp(name, "getMore"))
        r_get_more(cl, r, cmd);
    else if (!strcmp(name, "killCursors"))
        r_kill_cursors(cl, r, cmd);
    else if (!strcmp(name, "count"))
        r_count(cl, r, cmd, db);
    else if (!strcmp(name, "aggregate") && cs_is_change_stream(cmd))
        cl_stream_aggregate(cl, r, cmd, db);
    else if (!strcmp(name, "aggregate"))
        r_aggregate(cl, r, cmd, db);
    else if (!strcmp(name, "insert"))
        r_insert(cl, r, cmd, db);
    else if (!strcmp(name, "update"))
        r_update_delete(cl, r, cmd, db, true);
    else if (!strcmp(name, "delete"))
        r_update_delete(cl, r, cmd, db, false);
    else if (!strcmp(name, "drop"))
        r_drop(cl, r, cmd, db);
    else if (!strcmp(name, "renameCollection") && admin)
        r_rename(cl, r, cmd);
    else if (!strcmp(name, "dropDatabase"))
        r_drop_database(cl, r, cmd, db);
    else if (!strcmp(name, "commitTransaction") || !strcmp(name, "abortTransaction"))
        r_commit(cl, r, cmd, !strcmp(name, "abortTransaction"));
    else if (!strcmp(name, "mongosimStatus"))
        r_status(cl, r);
    else if (!admin &&
             (!strcmp(name, "listShards") || !strcmp(name, "enableSharding") || !strcmp(name, "shardCollection") ||
              !strcmp(name, "split") || !strcmp(name, "moveChunk") || !strcmp(name, "removeShard") ||
              !strcmp(name, "movePrimary") || !strcmp(name, "mongosimAddShard")))
        reply_error(r, 13, "%s may only be run against the admin database.", name);
    else if (!strcmp(name, "listShards"))
        r_list_shards(cl, r);
    else if (!strcmp(name, "enableSharding"))
        r_enable_sharding(cl, r, cmd);
    else if (!strcmp(name, "shardCollection"))
        r_shard_collection(cl, r, cmd);
    else if (!strcmp(name, "split"))
        r_split(cl, r, cmd);
    else if (!strcmp(name, "moveChunk"))
        r_move_chunk(cl, r, cmd);
    else if (!strcmp(name, "removeShard"))
        r_remove_shard(cl, r, cmd);
    else if (!strcmp(name, "movePrimary"))
        r_move_primary(cl, r, cmd);
    else if (!strcmp(name, "mongosimAddShard"))
        r_add_shard(cl, r);
    else
        reply_error(r, 59, "no such command: '%s'", name);
}

/* ---- what cluster_stream.c reads ---- */

size_t cluster_shard_count(const sim_cluster *cl)
{
    return cl->nshards;
}

sim_server *cluster_shard_server(const sim_cluster *cl, size_t i)
{
    return cl->shards[i].srv;
}

uint64_t cluster_shard_added(const sim_cluster *cl, size_t i)
{
    return cl->shards[i].topology_time;
}

uint64_t cluster_clock(const sim_cluster *cl)
{
    return cl->clock;
}

struct cl_stream **cluster_streams(sim_cluster *cl)
{
    return &cl->streams;
}

/* ---- lifecycle ---- */

sim_cluster *sim_cluster_new(const sim_options *opts, size_t nshards, double orphan_delay, struct ev_loop *loop,
                             bson_error_t *err)
{
    if (nshards < 1 || nshards > CL_MAX_SHARDS) {
        bson_set_error(err, 0, 1, "--shards must be between 1 and %d", CL_MAX_SHARDS);
        return NULL;
    }
    if (opts->state_dir || opts->data_dir || opts->oplog_file) {
        bson_set_error(err, 0, 1, "--state, --data and --oplog are not supported with --shards");
        return NULL;
    }
    sim_cluster *cl = calloc(1, sizeof *cl);
    if (!cl) {
        bson_set_error(err, 0, 1, "out of memory");
        return NULL;
    }
    cl->opts = *opts;
    cl->opts.clock = NULL;
    cl->orphan_delay = orphan_delay;
    cl->loop = loop;
    for (size_t i = 0; i < nshards; i++) {
        if (!shard_start(cl, i, err)) {
            sim_cluster_free(cl);
            return NULL;
        }
        cl->nshards++;
    }
    sim_options ro = *opts;
    ro.clock = NULL;
    ro.noop_interval = 0;
    ro.oplog_read_delay_ms = 0;
    ro.set_name = "router";
    cl->router = sim_server_new(&ro, loop, err);
    if (!cl->router) {
        sim_cluster_free(cl);
        return NULL;
    }
    cl->router->cluster = cl;
    cl->router->is_router = true;
    return cl;
}

int sim_cluster_port(const sim_cluster *cl)
{
    return sim_server_port(cl->router);
}

void sim_cluster_handle_signals(sim_cluster *cl)
{
    sim_server_handle_signals(cl->router);
}

void sim_cluster_run(sim_cluster *cl)
{
    sim_server_run(cl->router);
}

void sim_cluster_free(sim_cluster *cl)
{
    if (!cl)
        return;
    while (cl->dels)
        range_del_free(cl, cl->dels);
    while (cl->cursors)
        cursor_free(cl, cl->cursors);
    cl_stream_free_all(cl);
    while (cl->txns) {
        cl_txn *t = cl->txns;
        cl->txns = t->next;
        free(t);
    }
    sim_server_free(cl->router);
    for (size_t i = 0; i < cl->nshards; i++)
        sim_server_free(cl->shards[i].srv);
    for (size_t i = 0; i < cl->ncolls; i++)
        coll_free(cl->colls[i]);
    free(cl->colls);
    free(cl->dbs);
    free(cl);
}

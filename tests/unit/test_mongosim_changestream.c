/*
 * test_mongosim_changestream.c — mongosim's change streams (tests/mongosim/changestream.c) on an oplog the test
 * writes itself: the events (insert, update from a $v:2 diff, replace, delete, DDL, invalidate), transactions
 * unwound at the commit's ts, resume tokens (byte for byte against real 7.0 tokens quoted in public sources, and
 * read back by a decoder written here), post-batch resume tokens, resume, the split stage and the server's errors.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../mongosim/changestream.h"
#include "../mongosim/ddl.h"
#include "../mongosim/images.h"
#include "../mongosim/oplog.h"
#include "../mongosim/store.h"

Suite *mongosim_changestream_suite(void);

static const uint8_t UUID_A[16] = {0xab, 0x11, 0x54, 0xac, 0xac, 0xd8, 0x49, 0xa4,
                                   0x8c, 0x61, 0x75, 0x6d, 0x70, 0xd3, 0xb2, 0x1f};

/* ---- an independent reader of a token's leading fields (KeyString V1: 0x82 + 8-byte timestamp, then integers as
 * 0x29 for zero or 0x2B+(n-1) followed by n big-endian bytes of value << 1, then 0x6E/0x6F) ---- */
typedef struct {
    uint64_t ts;
    int64_t version, type, txn_op;
    bool inv;
} dec_token;

static int hx(char c)
{
    return c <= '9' ? c - '0' : c - 'A' + 10;
}

static int64_t dec_int(const uint8_t *b, size_t *p)
{
    uint8_t c = b[(*p)++];
    if (c == 0x29)
        return 0;
    ck_assert_msg(c >= 0x2B && c <= 0x32, "not a positive integer CType: %02X", c);
    uint64_t v = 0;
    for (int i = 0; i < c - 0x2A; i++)
        v = v << 8 | b[(*p)++];
    return (int64_t)(v >> 1);
}

static dec_token decode(const char *hex)
{
    uint8_t b[4096];
    size_t n = strlen(hex) / 2, p = 1;
    ck_assert_uint_lt(n, sizeof b);
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(hx(hex[2 * i]) << 4 | hx(hex[2 * i + 1]));
    ck_assert_uint_eq(b[0], 0x82);
    dec_token t = {0};
    for (int i = 0; i < 8; i++)
        t.ts = t.ts << 8 | b[p++];
    t.version = dec_int(b, &p);
    t.type = dec_int(b, &p);
    t.txn_op = dec_int(b, &p);
    ck_assert(b[p] == 0x6E || b[p] == 0x6F);
    t.inv = b[p] == 0x6F;
    ck_assert_uint_eq(b[n - 1], 0x04);
    return t;
}

/* ---- an oplog written by hand ---- */

typedef struct {
    sim_oplog *log;
    sim_store *store;
    uint32_t secs, inc;
} fixture;

static void fx_init(fixture *f)
{
    f->log = oplog_new();
    f->store = store_new(SIM_FORMAT_70);
    f->secs = 1700000000;
    f->inc = 0;
}

static void fx_free(fixture *f)
{
    oplog_free(f->log);
    store_free(f->store);
}

/* Appends an entry body (op, ns, ...) with ts, t, v, wall; returns its ts. */
static uint64_t put(fixture *f, bson_t *body)
{
    uint64_t ts = OPLOG_TS(f->secs, ++f->inc);
    bson_t e = BSON_INITIALIZER;
    bson_concat(&e, body);
    BSON_APPEND_TIMESTAMP(&e, "ts", f->secs, f->inc);
    BSON_APPEND_INT64(&e, "t", 1);
    BSON_APPEND_INT64(&e, "v", 2);
    BSON_APPEND_DATE_TIME(&e, "wall", (int64_t)f->secs * 1000);
    bson_error_t err;
    ck_assert_msg(oplog_append(f->log, bson_get_data(&e), e.len, ts, &err), "%s", err.message);
    bson_destroy(&e);
    bson_destroy(body);
    return ts;
}

static uint64_t put_insert(fixture *f, const char *ns, int id, int x)
{
    return put(f, BCON_NEW("op", "i", "ns", ns, "ui", BCON_BIN(BSON_SUBTYPE_UUID, UUID_A, 16), "o", "{", "_id",
                           BCON_INT32(id), "x", BCON_INT32(x), "}"));
}

static cs_env env_of(fixture *f)
{
    cs_env e = {f->log, f->store, oplog_end_seq(f->log), NULL, NULL};
    return e;
}

static cs_stream *open_ok(fixture *f, const char *db, const char *coll, bson_t *pipeline)
{
    cs_env env = env_of(f);
    cs_error err;
    cs_stream *s = cs_open(&env, db, coll, pipeline, &err);
    ck_assert_msg(s, "cs_open: %d %s", err.code, err.msg);
    bson_destroy(pipeline);
    return s;
}

static int open_err(fixture *f, const char *db, const char *coll, bson_t *pipeline, cs_error *err)
{
    cs_env env = env_of(f);
    cs_stream *s = cs_open(&env, db, coll, pipeline, err);
    bson_destroy(pipeline);
    ck_assert_ptr_null(s);
    return err->code;
}

/* One batch: events copied into out[] (up to 64), the PBRT's hex into pbrt. */
typedef struct {
    bson_t ev[64];
    size_t n;
    char pbrt[4096];
    bool closed;
    cs_error err;
    bool ok;
} batch_t;

static void batch_free(batch_t *b)
{
    for (size_t i = 0; i < b->n; i++)
        bson_destroy(&b->ev[i]);
    b->n = 0;
}

static void next(fixture *f, cs_stream *s, int64_t size, batch_t *b)
{
    cs_env env = env_of(f);
    bson_t events = BSON_INITIALIZER, pbrt = BSON_INITIALIZER;
    memset(b, 0, sizeof *b);
    b->ok = cs_next_batch(s, &env, size, &events, &pbrt, &b->closed, &b->err);
    if (b->ok) {
        bson_iter_t it, d;
        bson_iter_init(&it, &events);
        while (bson_iter_next(&it) && b->n < 64) {
            uint32_t len;
            const uint8_t *data;
            bson_iter_document(&it, &len, &data);
            bson_t tmp;
            bson_init_static(&tmp, data, len);
            bson_copy_to(&tmp, &b->ev[b->n++]);
        }
        ck_assert(bson_iter_init_find(&d, &pbrt, "_data"));
        snprintf(b->pbrt, sizeof b->pbrt, "%s", bson_iter_utf8(&d, NULL));
    }
    bson_destroy(&events);
    bson_destroy(&pbrt);
}

static const char *str_at(const bson_t *doc, const char *path)
{
    bson_iter_t it, f;
    ck_assert_msg(bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, path, &f), "no %s", path);
    return bson_iter_utf8(&f, NULL);
}

static bool has(const bson_t *doc, const char *path)
{
    bson_iter_t it, f;
    return bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, path, &f);
}

static int64_t int_at(const bson_t *doc, const char *path)
{
    bson_iter_t it, f;
    ck_assert_msg(bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, path, &f), "no %s", path);
    return bson_iter_as_int64(&f);
}

static const char *token_of(const bson_t *ev)
{
    return str_at(ev, "_id._data");
}

static bson_t *pipe_cs(bson_t *spec)
{
    bson_t *p = bson_new(), st;
    BSON_APPEND_DOCUMENT_BEGIN(p, "0", &st);
    BSON_APPEND_DOCUMENT(&st, "$changeStream", spec);
    bson_append_document_end(p, &st);
    bson_destroy(spec);
    return p;
}

/* ---- tokens ---- */

START_TEST(test_token_bytes_match_real_server)
{
    /* An insert's token from the MongoDB manual ("Resume Tokens from Change Events",
     * https://www.mongodb.com/docs/manual/changeStreams/#resume-tokens-from-change-events), quoted in
     * debezium/debezium debezium-connector-mongodb/src/test/java/io/debezium/connector/mongodb/SourceInfoTest.java:
     * ts Timestamp(1666193824, 1), collection UUID ab1154ac-acd8-49a4-8c61-756d70d3b21f, _id
     * ObjectId("635019a078be67426d7cf4d2"). */
    bson_oid_t oid;
    bson_oid_init_from_string(&oid, "635019a078be67426d7cf4d2");
    bson_t *eid = BCON_NEW("operationType", "insert", "documentKey", "{", "_id", BCON_OID(&oid), "}");
    char *hex = cs_token_hex(OPLOG_TS(1666193824, 1), CS_TOKEN_EVENT, 0, false, UUID_A, eid, -1);
    ck_assert_str_eq(hex, "82635019A0000000012B042C0100296E5A1004AB1154ACACD849A48C61756D70D3B21F463C6F7065726174696F"
                          "6E54797065003C696E736572740046646F63756D656E744B65790046645F69640064635019A078BE67426D7CF4"
                          "D2000004");
    bson_free(hex);
    bson_destroy(eid);
    /* The high-water-mark token of an empty aggregate from the same manual page ("Resume Tokens from aggregate"),
     * quoted in the same test: Timestamp(1666277036, 2). */
    hex = cs_token_hex(OPLOG_TS(1666277036, 2), CS_TOKEN_HWM, 0, false, NULL, NULL, -1);
    ck_assert_str_eq(hex, "8263515EAC000000022B0429296E1404");
    bson_free(hex);
    /* An update with a string _id "beer", printed by a 7.0 shell in the mongodb-developer article on transactions
     * (Timestamp(1700267321, 1), UUID a7f55a5b-35bd-4c7d-b2cd-56c6cfea9c49). */
    static const uint8_t u2[16] = {0xa7, 0xf5, 0x5a, 0x5b, 0x35, 0xbd, 0x4c, 0x7d,
                                   0xb2, 0xcd, 0x56, 0xc6, 0xcf, 0xea, 0x9c, 0x49};
    eid = BCON_NEW("operationType", "update", "documentKey", "{", "_id", "beer", "}");
    hex = cs_token_hex(OPLOG_TS(1700267321, 1), CS_TOKEN_EVENT, 0, false, u2, eid, -1);
    ck_assert_str_eq(hex, "8265580539000000012B042C0100296E5A1004A7F55A5B35BD4C7DB2CD56C6CFEA9C49463C6F7065726174696F"
                          "6E54797065003C7570646174650046646F63756D656E744B657900463C5F6964003C6265657200000004");
    bson_free(hex);
    bson_destroy(eid);
}
END_TEST

START_TEST(test_token_fields_read_back)
{
    bson_t *eid = BCON_NEW("operationType", "delete", "documentKey", "{", "_id", BCON_INT64(-7), "}");
    char *hex = cs_token_hex(OPLOG_TS(5, 300), CS_TOKEN_EVENT, 1000, true, UUID_A, eid, 3);
    dec_token t = decode(hex);
    ck_assert_uint_eq(t.ts, OPLOG_TS(5, 300));
    ck_assert_int_eq(t.version, 2);
    ck_assert_int_eq(t.type, 128);
    ck_assert_int_eq(t.txn_op, 1000);
    ck_assert(t.inv);
    cs_token_info info;
    ck_assert(cs_token_parse(hex, &info));
    ck_assert_uint_eq(info.txn_op, 1000);
    ck_assert(info.has_uuid && memcmp(info.uuid, UUID_A, 16) == 0);
    ck_assert(!cs_token_parse("82ZZ", &info));
    bson_free(hex);
    bson_destroy(eid);
}
END_TEST

/* _typeBits: one or two bits per value, packed from the low bit (key_string.h TypeBits). The layout is the one a
 * real 4.4 server printed for a v1 token of documentKey {_id: 2} (a double from the shell): _typeBits
 * BinData(0, "40") after three int32s, i.e. bits 0-5 zero and the double's kDouble (1, then 0) at bits 6 and 7
 * (quoted in a public tutorial on change-stream pre-images, found by the search tool; the v1 _data was
 * 825F103409000000042B022C0100296E5A10044912D5BB665545B48DDAD38FCD774270461E5F6964002B040004). A v2 token has the
 * operationType string's bit (0) before the documentKey, so the double's bits move to 7 and 8. */
START_TEST(test_token_type_bits)
{
    uint8_t tb[CS_TYPEBITS_MAX];
    size_t n;
    bson_t *eid = BCON_NEW("operationType", "update", "documentKey", "{", "_id", BCON_DOUBLE(2.0), "}");
    char *hex = cs_token_make(OPLOG_TS(1, 1), CS_TOKEN_EVENT, 0, false, UUID_A, eid, -1, tb, &n);
    ck_assert_uint_eq(n, 3);
    ck_assert(tb[0] == 0x82 && tb[1] == 0x80 && tb[2] == 0x00);
    char *hex_int = cs_token_hex(OPLOG_TS(1, 1), CS_TOKEN_EVENT, 0, false, UUID_A, eid, -1);
    ck_assert_str_eq(hex, hex_int); /* the bytes do not tell a double 2 from an int 2: only the type bits do */
    bson_free(hex);
    bson_free(hex_int);
    bson_destroy(eid);
    eid = BCON_NEW("operationType", "insert", "documentKey", "{", "_id", BCON_INT64(7), "}");
    bson_free(cs_token_make(OPLOG_TS(1, 1), CS_TOKEN_EVENT, 0, false, UUID_A, eid, -1, tb, &n));
    ck_assert_uint_eq(n, 3);
    ck_assert(tb[0] == 0x82 && tb[1] == 0x00 && tb[2] == 0x01); /* kLong: 0, then 1 */
    bson_destroy(eid);
    eid = BCON_NEW("operationType", "insert", "documentKey", "{", "_id", BCON_INT32(7), "}");
    bson_free(cs_token_make(OPLOG_TS(1, 1), CS_TOKEN_EVENT, 0, false, UUID_A, eid, -1, tb, &n));
    ck_assert_uint_eq(n, 0); /* all zero: no _typeBits */
    bson_destroy(eid);
}
END_TEST

/* ---- events ---- */

START_TEST(test_crud_events)
{
    fixture f;
    fx_init(&f);
    uint64_t t0 = put(&f, BCON_NEW("op", "n", "ns", "", "o", "{", "msg", "start", "}"));
    cs_stream *s = open_ok(&f, "db", "c", pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(f.secs, 2))));
    (void)t0;
    uint64_t ti = put_insert(&f, "db.c", 1, 10);
    put_insert(&f, "db.other", 2, 20); /* another collection: not on this stream */
    /* $v:2 diff: u, i, d, a sub-document diff and an array diff (a: true, l, u1, s2) */
    uint64_t tu = put(&f, BCON_NEW("op", "u", "ns", "db.c", "ui", BCON_BIN(BSON_SUBTYPE_UUID, UUID_A, 16), "o", "{",
                                   "$v", BCON_INT32(2), "diff", "{", "d", "{", "gone", BCON_BOOL(false), "}", "u", "{",
                                   "x", BCON_INT32(11), "}", "i", "{", "y", BCON_INT32(1), "}", "ssub", "{", "u", "{",
                                   "k", BCON_INT32(5), "}", "}", "sarr", "{", "a", BCON_BOOL(true), "l", BCON_INT32(3),
                                   "u1", BCON_INT32(9), "s2", "{", "u", "{", "z", BCON_INT32(1), "}", "}", "}", "}",
                                   "}", "o2", "{", "_id", BCON_INT32(1), "}"));
    put(&f, BCON_NEW("op", "u", "ns", "db.c", "ui", BCON_BIN(BSON_SUBTYPE_UUID, UUID_A, 16), "o", "{", "_id",
                     BCON_INT32(1), "x", BCON_INT32(99), "}", "o2", "{", "_id", BCON_INT32(1), "}"));
    put(&f, BCON_NEW("op", "d", "ns", "db.c", "ui", BCON_BIN(BSON_SUBTYPE_UUID, UUID_A, 16), "o", "{", "_id",
                     BCON_INT32(1), "}"));
    batch_t b;
    next(&f, s, -1, &b);
    ck_assert(b.ok);
    ck_assert_uint_eq(b.n, 4);
    ck_assert_str_eq(str_at(&b.ev[0], "operationType"), "insert");
    ck_assert_int_eq(int_at(&b.ev[0], "fullDocument.x"), 10);
    ck_assert_int_eq(int_at(&b.ev[0], "documentKey._id"), 1);
    ck_assert_str_eq(str_at(&b.ev[0], "ns.coll"), "c");
    ck_assert_uint_eq(decode(token_of(&b.ev[0])).ts, ti);
    ck_assert_str_eq(str_at(&b.ev[1], "operationType"), "update");
    ck_assert_uint_eq(decode(token_of(&b.ev[1])).ts, tu);
    ck_assert(!has(&b.ev[1], "fullDocument"));
    bson_iter_t it, uf;
    ck_assert(bson_iter_init_find(&it, &b.ev[1], "updateDescription"));
    bson_t ud;
    uint32_t len;
    const uint8_t *data;
    bson_iter_document(&it, &len, &data);
    bson_init_static(&ud, data, len);
    ck_assert(bson_iter_init_find(&uf, &ud, "updatedFields"));
    bson_t *want = BCON_NEW("updatedFields", "{", "x", BCON_INT32(11), "y", BCON_INT32(1), "sub.k", BCON_INT32(5),
                            "arr.1", BCON_INT32(9), "arr.2.z", BCON_INT32(1), "}", "removedFields", "[", "gone", "]",
                            "truncatedArrays", "[", "{", "field", "arr", "newSize", BCON_INT32(3), "}", "]");
    ck_assert_msg(bson_equal(&ud, want), "got %s", bson_as_relaxed_extended_json(&ud, NULL));
    bson_destroy(want);
    ck_assert_str_eq(str_at(&b.ev[2], "operationType"), "replace");
    ck_assert_int_eq(int_at(&b.ev[2], "fullDocument.x"), 99);
    ck_assert_str_eq(str_at(&b.ev[3], "operationType"), "delete");
    ck_assert(!has(&b.ev[3], "fullDocument"));
    ck_assert(!has(&b.ev[3], "_id._typeBits"));
    batch_free(&b);
    /* an int64 _id: the event's _id and the PBRT carry _typeBits */
    put(&f, BCON_NEW("op", "d", "ns", "db.c", "ui", BCON_BIN(BSON_SUBTYPE_UUID, UUID_A, 16), "o", "{", "_id",
                     BCON_INT64(5), "}"));
    cs_env env = env_of(&f);
    bson_t events = BSON_INITIALIZER, pbrt = BSON_INITIALIZER;
    bool closed;
    cs_error err;
    ck_assert(cs_next_batch(s, &env, -1, &events, &pbrt, &closed, &err));
    ck_assert(has(&events, "0._id._typeBits"));
    ck_assert(has(&pbrt, "_typeBits"));
    bson_destroy(&events);
    bson_destroy(&pbrt);
    cs_close(s);
    fx_free(&f);
}
END_TEST

static void put_txn_op(bson_t *arr, const char *key, int id)
{
    bson_t op;
    BSON_APPEND_DOCUMENT_BEGIN(arr, key, &op);
    BSON_APPEND_UTF8(&op, "op", "i");
    BSON_APPEND_UTF8(&op, "ns", "db.c");
    bson_append_binary(&op, "ui", -1, BSON_SUBTYPE_UUID, UUID_A, 16);
    bson_t o;
    BSON_APPEND_DOCUMENT_BEGIN(&op, "o", &o);
    BSON_APPEND_INT32(&o, "_id", id);
    bson_append_document_end(&op, &o);
    bson_append_document_end(arr, &op);
}

/* An applyOps entry of a transaction: ops ids [from, from+n), flags, prevOpTime ts (0: the null OpTime). */
static uint64_t put_apply(fixture *f, bool lsid, int from, int n, const char *flag, uint64_t prev)
{
    bson_t body = BSON_INITIALIZER, o, arr, l, pot;
    if (lsid) {
        BSON_APPEND_DOCUMENT_BEGIN(&body, "lsid", &l);
        bson_append_binary(&l, "id", -1, BSON_SUBTYPE_UUID, UUID_A, 16);
        bson_append_document_end(&body, &l);
        BSON_APPEND_INT64(&body, "txnNumber", 7);
    }
    BSON_APPEND_UTF8(&body, "op", "c");
    BSON_APPEND_UTF8(&body, "ns", "admin.$cmd");
    BSON_APPEND_DOCUMENT_BEGIN(&body, "o", &o);
    BSON_APPEND_ARRAY_BEGIN(&o, "applyOps", &arr);
    for (int i = 0; i < n; i++) {
        char k[8];
        snprintf(k, sizeof k, "%d", i);
        put_txn_op(&arr, k, from + i);
    }
    bson_append_array_end(&o, &arr);
    if (flag)
        BSON_APPEND_BOOL(&o, flag, true);
    bson_append_document_end(&body, &o);
    if (prev != (uint64_t)-1) {
        BSON_APPEND_DOCUMENT_BEGIN(&body, "prevOpTime", &pot);
        BSON_APPEND_TIMESTAMP(&pot, "ts", OPLOG_TS_SECS(prev), OPLOG_TS_INC(prev));
        BSON_APPEND_INT64(&pot, "t", prev ? 1 : -1);
        bson_append_document_end(&body, &pot);
    }
    bson_t *copy = bson_copy(&body);
    bson_destroy(&body);
    return put(f, copy);
}

START_TEST(test_transactions_unwound)
{
    fixture f;
    fx_init(&f);
    cs_stream *s = open_ok(&f, "db", NULL, pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(f.secs, 1))));
    /* a chain: partialTxn, partialTxn, final */
    uint64_t p1 = put_apply(&f, true, 0, 2, "partialTxn", 0);
    uint64_t p2 = put_apply(&f, true, 2, 2, "partialTxn", p1);
    uint64_t commit = put_apply(&f, true, 4, 1, NULL, p2);
    /* a prepared transaction: prepare entry, then commitTransaction pointing at it */
    uint64_t prep = put_apply(&f, true, 10, 2, "prepare", 0);
    /* a retryable write between prepare and commit: comes first, without its lsid (only unwound ops show it) */
    put(&f, BCON_NEW("lsid", "{", "id", BCON_BIN(BSON_SUBTYPE_UUID, UUID_A, 16), "}", "txnNumber", BCON_INT64(3), "op",
                     "i", "ns", "db.c", "ui", BCON_BIN(BSON_SUBTYPE_UUID, UUID_A, 16), "o", "{", "_id", BCON_INT32(50),
                     "}", "stmtId", BCON_INT32(0)));
    bson_t *cb = BCON_NEW("lsid", "{", "id", BCON_BIN(BSON_SUBTYPE_UUID, UUID_A, 16), "}", "txnNumber", BCON_INT64(8),
                          "op", "c", "ns", "admin.$cmd", "o", "{", "commitTransaction", BCON_INT32(1),
                          "commitTimestamp", BCON_TIMESTAMP(f.secs, 6), "}", "prevOpTime", "{", "ts",
                          BCON_TIMESTAMP(OPLOG_TS_SECS(prep), OPLOG_TS_INC(prep)), "t", BCON_INT64(1), "}");
    uint64_t pcommit = put(&f, cb);
    /* a batched write without lsid: one applyOps, no prevOpTime */
    uint64_t batched = put_apply(&f, false, 20, 2, NULL, (uint64_t)-1);
    batch_t b;
    next(&f, s, 3, &b); /* the batch ends inside the first transaction */
    ck_assert(b.ok);
    ck_assert_uint_eq(b.n, 3);
    for (size_t i = 0; i < 3; i++) {
        dec_token t = decode(token_of(&b.ev[i]));
        ck_assert_uint_eq(t.ts, commit);
        ck_assert_int_eq(t.txn_op, (int64_t)i);
        ck_assert_int_eq(int_at(&b.ev[i], "documentKey._id"), (int64_t)i);
        ck_assert_int_eq(int_at(&b.ev[i], "txnNumber"), 7);
        ck_assert(has(&b.ev[i], "lsid.id"));
    }
    /* change_stream_event_transform.cpp: a transaction's txnNumber and lsid come before _id */
    bson_iter_t ki;
    ck_assert(bson_iter_init(&ki, &b.ev[0]) && bson_iter_next(&ki));
    ck_assert_str_eq(bson_iter_key(&ki), "txnNumber");
    ck_assert(bson_iter_next(&ki));
    ck_assert_str_eq(bson_iter_key(&ki), "lsid");
    ck_assert(bson_iter_next(&ki));
    ck_assert_str_eq(bson_iter_key(&ki), "_id");
    /* mid-transaction the PBRT is the last event's token (report_post_batch_resume_token.js) */
    ck_assert_str_eq(b.pbrt, token_of(&b.ev[2]));
    batch_free(&b);
    next(&f, s, -1, &b);
    ck_assert(b.ok);
    ck_assert_uint_eq(b.n, 2 + 1 + 2 + 2);
    ck_assert_int_eq(decode(token_of(&b.ev[1])).txn_op, 4);
    ck_assert_int_eq(int_at(&b.ev[2], "documentKey._id"), 50);
    ck_assert(!has(&b.ev[2], "lsid") && !has(&b.ev[2], "txnNumber"));
    ck_assert_uint_eq(decode(token_of(&b.ev[3])).ts, pcommit);
    ck_assert_int_eq(int_at(&b.ev[3], "documentKey._id"), 10);
    ck_assert_int_eq(int_at(&b.ev[4], "txnNumber"), 8);
    ck_assert_uint_eq(decode(token_of(&b.ev[6])).ts, batched);
    ck_assert_int_eq(decode(token_of(&b.ev[6])).txn_op, 1);
    ck_assert(!has(&b.ev[6], "lsid"));
    batch_free(&b);
    cs_close(s);
    fx_free(&f);
}
END_TEST

START_TEST(test_match_stage)
{
    fixture f;
    fx_init(&f);
    bson_t *p = pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(f.secs, 1)));
    bson_t *m = BCON_NEW("$match", "{", "operationType", "insert", "ns.coll", "{", "$in", "[", "a", "b", "]", "}",
                         "fullDocument.x", "{", "$gte", BCON_INT32(5), "}", "}");
    BSON_APPEND_DOCUMENT(p, "1", m);
    bson_destroy(m);
    cs_stream *s = open_ok(&f, "db", NULL, p);
    put_insert(&f, "db.a", 1, 7);
    put_insert(&f, "db.b", 2, 1);
    put_insert(&f, "db.c", 3, 9);
    put(&f, BCON_NEW("op", "d", "ns", "db.a", "ui", BCON_BIN(BSON_SUBTYPE_UUID, UUID_A, 16), "o", "{", "_id",
                     BCON_INT32(1), "}"));
    uint64_t last = put_insert(&f, "db.b", 4, 5);
    batch_t b;
    next(&f, s, -1, &b);
    ck_assert(b.ok);
    ck_assert_uint_eq(b.n, 2);
    ck_assert_int_eq(int_at(&b.ev[0], "documentKey._id"), 1);
    ck_assert_int_eq(int_at(&b.ev[1], "documentKey._id"), 4);
    ck_assert_uint_eq(decode(b.pbrt).ts, last);
    batch_free(&b);
    cs_close(s);
    /* an operator mongosim does not run is refused, never ignored */
    cs_error err;
    p = pipe_cs(bson_new());
    m = BCON_NEW("$match", "{", "x", "{", "$regex", "^a", "}", "}");
    BSON_APPEND_DOCUMENT(p, "1", m);
    bson_destroy(m);
    ck_assert_int_eq(open_err(&f, "db", NULL, p, &err), 2);
    fx_free(&f);
}
END_TEST

/* ---- post-batch resume tokens and resume ---- */

START_TEST(test_pbrt_and_resume)
{
    fixture f;
    fx_init(&f);
    uint64_t t1 = put_insert(&f, "db.other", 1, 0);
    cs_stream *s = open_ok(&f, "db", "c", pipe_cs(bson_new()));
    batch_t b;
    next(&f, s, -1, &b);
    ck_assert(b.ok && b.n == 0);
    /* no start given: a high-water mark just after the newest entry */
    dec_token t = decode(b.pbrt);
    ck_assert_int_eq(t.type, 0);
    ck_assert_uint_eq(t.ts, t1 + 1);
    uint64_t t2 = put_insert(&f, "db.c", 2, 0);
    uint64_t t3 = put_insert(&f, "db.c", 3, 0);
    uint64_t t4 = put_insert(&f, "db.other", 4, 0);
    next(&f, s, 1, &b);
    ck_assert_uint_eq(b.n, 1);
    ck_assert_str_eq(b.pbrt, token_of(&b.ev[0])); /* the batch was full at an event */
    char tok2[4096];
    snprintf(tok2, sizeof tok2, "%s", token_of(&b.ev[0]));
    batch_free(&b);
    next(&f, s, -1, &b);
    ck_assert_uint_eq(b.n, 1);
    ck_assert_uint_eq(decode(token_of(&b.ev[0])).ts, t3);
    /* the scan went on past an unrelated entry: a high-water mark at its ts */
    t = decode(b.pbrt);
    ck_assert_int_eq(t.type, 0);
    ck_assert_uint_eq(t.ts, t4);
    char hwm[4096];
    snprintf(hwm, sizeof hwm, "%s", b.pbrt);
    batch_free(&b);
    next(&f, s, -1, &b); /* empty getMore keeps it */
    ck_assert_uint_eq(b.n, 0);
    ck_assert_str_eq(b.pbrt, hwm);
    cs_close(s);
    (void)t2;

    /* resumeAfter the first event: the second comes next; the PBRT of a resumed stream that found nothing yet is
     * the given token */
    s = open_ok(&f, "db", "c", pipe_cs(BCON_NEW("resumeAfter", "{", "_data", tok2, "}")));
    next(&f, s, 0, &b); /* batchSize 0: nothing read, the given token */
    ck_assert_uint_eq(b.n, 0);
    ck_assert_str_eq(b.pbrt, tok2);
    next(&f, s, -1, &b);
    ck_assert_uint_eq(b.n, 1);
    ck_assert_uint_eq(decode(token_of(&b.ev[0])).ts, t3);
    batch_free(&b);
    cs_close(s);
    /* resume from the high-water mark: nothing again, and the same token */
    s = open_ok(&f, "db", "c", pipe_cs(BCON_NEW("resumeAfter", "{", "_data", hwm, "}")));
    next(&f, s, -1, &b);
    ck_assert_uint_eq(b.n, 0);
    ck_assert_str_eq(b.pbrt, hwm);
    cs_close(s);
    /* the token's event filtered out by the new $match: 280 with the non-resumable label */
    bson_t *p = pipe_cs(BCON_NEW("resumeAfter", "{", "_data", tok2, "}"));
    bson_t *m = BCON_NEW("$match", "{", "documentKey._id", "{", "$ne", BCON_INT32(2), "}", "}");
    BSON_APPEND_DOCUMENT(p, "1", m);
    bson_destroy(m);
    s = open_ok(&f, "db", "c", p);
    next(&f, s, -1, &b);
    ck_assert(!b.ok);
    ck_assert_int_eq(b.err.code, 280);
    ck_assert(b.err.nonresumable);
    ck_assert(strstr(b.err.msg, "resume token was not found"));
    cs_close(s);
    /* a startAtOperationTime in the future: the PBRT stays at it while older entries are written
     * (report_post_batch_resume_token.js) */
    uint64_t future = OPLOG_TS(f.secs + 100, 1);
    s = open_ok(&f, "db", "c", pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(f.secs + 100, 1))));
    put_insert(&f, "db.c", 9, 0);
    next(&f, s, -1, &b);
    ck_assert(b.ok && b.n == 0);
    ck_assert_uint_eq(decode(b.pbrt).ts, future);
    cs_close(s);
    /* two start options */
    cs_error err;
    ck_assert_int_eq(open_err(&f, "db", "c",
                              pipe_cs(BCON_NEW("resumeAfter", "{", "_data", tok2, "}", "startAtOperationTime",
                                               BCON_TIMESTAMP(1, 1))),
                              &err),
                     40674);
    /* history gone */
    oplog_truncate_before(f.log, t4);
    ck_assert_int_eq(open_err(&f, "db", "c", pipe_cs(BCON_NEW("resumeAfter", "{", "_data", tok2, "}")), &err), 286);
    ck_assert(err.nonresumable);
    ck_assert_int_eq(
        open_err(&f, "db", "c", pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(f.secs, 1))), &err), 286);
    fx_free(&f);
}
END_TEST

/* ---- DDL and invalidate ---- */

START_TEST(test_drop_invalidates)
{
    fixture f;
    fx_init(&f);
    cs_stream *s = open_ok(&f, "db", "c", pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(f.secs, 1))));
    put_insert(&f, "db.c", 1, 0);
    uint64_t td = put(&f, BCON_NEW("op", "c", "ns", "db.$cmd", "ui", BCON_BIN(BSON_SUBTYPE_UUID, UUID_A, 16), "o", "{",
                                   "drop", "c", "}"));
    put_insert(&f, "db.c", 2, 0);
    batch_t b;
    next(&f, s, -1, &b);
    ck_assert(b.ok);
    ck_assert_uint_eq(b.n, 3);
    ck_assert_str_eq(str_at(&b.ev[1], "operationType"), "drop");
    ck_assert_str_eq(str_at(&b.ev[2], "operationType"), "invalidate");
    dec_token t = decode(token_of(&b.ev[2]));
    ck_assert(t.inv);
    ck_assert_uint_eq(t.ts, td);
    ck_assert(b.closed);
    char inv[4096];
    snprintf(inv, sizeof inv, "%s", token_of(&b.ev[2]));
    batch_free(&b);
    cs_close(s);
    /* startAfter the invalidate: the insert after the drop; resumeAfter it is refused */
    s = open_ok(&f, "db", "c", pipe_cs(BCON_NEW("startAfter", "{", "_data", inv, "}")));
    next(&f, s, -1, &b);
    ck_assert(b.ok);
    ck_assert_uint_eq(b.n, 1);
    ck_assert_int_eq(int_at(&b.ev[0], "documentKey._id"), 2);
    batch_free(&b);
    cs_close(s);
    cs_error err;
    ck_assert_int_eq(open_err(&f, "db", "c", pipe_cs(BCON_NEW("resumeAfter", "{", "_data", inv, "}")), &err), 260);
    /* a database stream: the drop, no invalidate; with showExpandedEvents, a create and collectionUUID */
    s = open_ok(
        &f, "db", NULL,
        pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(f.secs, 1), "showExpandedEvents", BCON_BOOL(true))));
    put(&f, BCON_NEW("op", "c", "ns", "db.$cmd", "ui", BCON_BIN(BSON_SUBTYPE_UUID, UUID_A, 16), "o", "{", "create", "n",
                     "idIndex", "{", "v", BCON_INT32(2), "}", "}"));
    put(&f, BCON_NEW("op", "c", "ns", "db.$cmd", "o", "{", "dropDatabase", BCON_INT32(1), "}"));
    next(&f, s, -1, &b);
    ck_assert(b.ok);
    ck_assert_uint_eq(b.n, 6); /* insert, drop, insert, create, dropDatabase, invalidate */
    ck_assert(has(&b.ev[0], "collectionUUID"));
    ck_assert_str_eq(str_at(&b.ev[3], "operationType"), "create");
    ck_assert_str_eq(str_at(&b.ev[3], "nsType"), "collection");
    ck_assert(has(&b.ev[3], "operationDescription.idIndex"));
    ck_assert_str_eq(str_at(&b.ev[4], "operationType"), "dropDatabase");
    ck_assert_str_eq(str_at(&b.ev[5], "operationType"), "invalidate");
    ck_assert(b.closed);
    batch_free(&b);
    cs_close(s);
    fx_free(&f);
}
END_TEST

START_TEST(test_view_events)
{
    fixture f;
    fx_init(&f);
    cs_stream *exp = open_ok(
        &f, "db", NULL,
        pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(f.secs, 1), "showExpandedEvents", BCON_BOOL(true))));
    cs_stream *plain = open_ok(&f, "db", NULL, pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(f.secs, 1))));
    put(&f, BCON_NEW("op", "i", "ns", "db.system.views", "ui", BCON_BIN(BSON_SUBTYPE_UUID, UUID_A, 16), "o", "{", "_id",
                     "db.v", "viewOn", "c", "pipeline", "[", "]", "}"));
    put(&f, BCON_NEW("op", "i", "ns", "db.system.views", "ui", BCON_BIN(BSON_SUBTYPE_UUID, UUID_A, 16), "o", "{", "_id",
                     "db.ts", "viewOn", "system.buckets.ts", "pipeline", "[", "]", "}"));
    put(&f, BCON_NEW("op", "d", "ns", "db.system.views", "ui", BCON_BIN(BSON_SUBTYPE_UUID, UUID_A, 16), "o", "{", "_id",
                     "db.v", "}"));
    batch_t b;
    next(&f, exp, -1, &b);
    ck_assert(b.ok);
    ck_assert_uint_eq(b.n, 3);
    ck_assert_str_eq(str_at(&b.ev[0], "operationType"), "create");
    ck_assert_str_eq(str_at(&b.ev[0], "ns.coll"), "v");
    ck_assert_str_eq(str_at(&b.ev[0], "nsType"), "view");
    ck_assert_str_eq(str_at(&b.ev[0], "operationDescription.viewOn"), "c");
    ck_assert(!has(&b.ev[0], "collectionUUID") && !has(&b.ev[0], "operationDescription._id"));
    ck_assert_str_eq(str_at(&b.ev[1], "nsType"), "timeseries");
    ck_assert_str_eq(str_at(&b.ev[2], "operationType"), "drop");
    ck_assert_str_eq(str_at(&b.ev[2], "ns.coll"), "v");
    batch_free(&b);
    next(&f, plain, -1, &b); /* without showExpandedEvents: nothing from system.views */
    ck_assert(b.ok);
    ck_assert_uint_eq(b.n, 0);
    cs_close(exp);
    cs_close(plain);
    fx_free(&f);
}
END_TEST

/* ---- every $v:2 vector: the updateDescription applied to the pre-image gives the post-image ---- */

/* A path's parts: disambiguatedPaths[path] when listed (ints are array indices), else the dotted path split. */
typedef struct {
    char name[64][256];
    int n;
} vpath;

static void vpath_of(const char *dotted, const bson_t *disamb, vpath *p)
{
    bson_iter_t it, a;
    p->n = 0;
    if (disamb && bson_iter_init_find(&it, disamb, dotted) && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &a)) {
        while (bson_iter_next(&a) && p->n < 64) {
            if (BSON_ITER_HOLDS_UTF8(&a))
                snprintf(p->name[p->n++], 256, "%s", bson_iter_utf8(&a, NULL));
            else
                snprintf(p->name[p->n++], 256, "%d", (int)bson_iter_as_int64(&a));
        }
        return;
    }
    const char *s = dotted;
    while (*s && p->n < 64) {
        const char *dot = strchr(s, '.');
        size_t len = dot ? (size_t)(dot - s) : strlen(s);
        snprintf(p->name[p->n++], 256, "%.*s", (int)len, s);
        s += len + (dot ? 1 : 0);
    }
}

/* out = doc with the value at parts[i..] set (val), removed (val NULL) or, for an array there, cut to newsize
 * (newsize >= 0); missing documents on the way are made, an array set past its end is padded with nulls (the
 * server's diff applier does both). */
static void vapply(const bson_t *doc, bool is_array, const vpath *p, int i, const bson_iter_t *val, int newsize,
                   bson_t *out)
{
    bson_iter_t it;
    bool done = false;
    int idx = 0;
    bson_iter_init(&it, doc);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        char kb[16];
        if (is_array)
            snprintf(kb, sizeof kb, "%d", idx);
        const char *key = is_array ? kb : k;
        idx++;
        if (strcmp(key, p->name[i]) != 0) {
            bson_append_iter(out, key, -1, &it);
            continue;
        }
        done = true;
        if (i + 1 == p->n && newsize < 0) {
            if (val)
                bson_append_iter(out, key, -1, val);
            continue; /* removed */
        }
        bool arr = BSON_ITER_HOLDS_ARRAY(&it);
        bson_t sub, child;
        uint32_t len;
        const uint8_t *data;
        if (arr)
            bson_iter_array(&it, &len, &data);
        else if (BSON_ITER_HOLDS_DOCUMENT(&it))
            bson_iter_document(&it, &len, &data);
        else {
            data = NULL;
            len = 0;
        }
        bson_t empty = BSON_INITIALIZER;
        if (data)
            bson_init_static(&sub, data, len);
        if (arr)
            bson_append_array_begin(out, key, -1, &child);
        else
            bson_append_document_begin(out, key, -1, &child);
        if (i + 1 == p->n) { /* truncate this array */
            bson_iter_t e;
            bson_iter_init(&e, &sub);
            for (int n = 0; n < newsize && bson_iter_next(&e); n++)
                bson_append_iter(&child, bson_iter_key(&e), -1, &e);
        } else {
            vapply(data ? &sub : &empty, arr, p, i + 1, val, newsize, &child);
        }
        if (arr)
            bson_append_array_end(out, &child);
        else
            bson_append_document_end(out, &child);
        bson_destroy(&empty);
    }
    if (done || !val)
        return;
    if (is_array) { /* pad to the index */
        int want = atoi(p->name[i]);
        for (; idx < want; idx++) {
            char kb[16];
            snprintf(kb, sizeof kb, "%d", idx);
            bson_append_null(out, kb, -1);
        }
    }
    if (i + 1 == p->n) {
        bson_append_iter(out, p->name[i], -1, val);
        return;
    }
    bson_t child, empty = BSON_INITIALIZER;
    bson_append_document_begin(out, p->name[i], -1, &child);
    vapply(&empty, false, p, i + 1, val, newsize, &child);
    bson_append_document_end(out, &child);
    bson_destroy(&empty);
}

static void vapply_doc(bson_t **doc, const vpath *p, const bson_iter_t *val, int newsize)
{
    bson_t *out = bson_new();
    vapply(*doc, false, p, 0, val, newsize, out);
    bson_destroy(*doc);
    *doc = out;
}

/* Equal as documents whatever the field order (an updateDescription does not keep positions); arrays in order. */
static bool same_unordered(const bson_t *a, const bson_t *b, bool arrays)
{
    bson_iter_t ia, ib;
    int na = 0, nb = 0;
    bson_iter_init(&ia, a);
    while (bson_iter_next(&ia))
        na++;
    bson_iter_init(&ib, b);
    while (bson_iter_next(&ib))
        nb++;
    if (na != nb)
        return false;
    bson_iter_init(&ia, a);
    while (bson_iter_next(&ia)) {
        if (!bson_iter_init_find(&ib, b, bson_iter_key(&ia)) || bson_iter_type(&ia) != bson_iter_type(&ib))
            return false;
        if (BSON_ITER_HOLDS_DOCUMENT(&ia) || BSON_ITER_HOLDS_ARRAY(&ia)) {
            bson_t sa, sb;
            uint32_t la, lb;
            const uint8_t *da, *db;
            if (BSON_ITER_HOLDS_DOCUMENT(&ia)) {
                bson_iter_document(&ia, &la, &da);
                bson_iter_document(&ib, &lb, &db);
            } else {
                bson_iter_array(&ia, &la, &da);
                bson_iter_array(&ib, &lb, &db);
            }
            bson_init_static(&sa, da, la);
            bson_init_static(&sb, db, lb);
            if (!same_unordered(&sa, &sb, BSON_ITER_HOLDS_ARRAY(&ia)))
                return false;
        } else if (!bson_iter_value(&ia) || !bson_iter_value(&ib)) {
            return false;
        } else {
            bson_t x = BSON_INITIALIZER, y = BSON_INITIALIZER;
            bson_append_iter(&x, "v", 1, &ia);
            bson_append_iter(&y, "v", 1, &ib);
            bool eq = bson_equal(&x, &y);
            bson_destroy(&x);
            bson_destroy(&y);
            if (!eq)
                return false;
        }
    }
    (void)arrays;
    return true;
}

START_TEST(test_update_description_vectors)
{
    /* tests/vectors/diff_v2_pre_post.jsonl: real $v:2 diffs (the server's own tests) with their pre- and
     * post-images. The updateDescription mongosim derives, applied to the pre-image with disambiguatedPaths, must
     * give the post-image (field order aside). Left out: binary diffs of time-series buckets (b: updatedFields then
     * holds the raw {o, d}, change_stream_document_diff_parser.cpp) and the vectors whose diff meets a pre-image of
     * another shape than the one it was made for (an absent or mismatched sub-document, an object or a scalar where
     * the diff expects an array or a sub-document, which the diff applier turns into null): an updateDescription
     * describes the change to the document the diff was made from. */
    FILE *fp = fopen("tests/vectors/diff_v2_pre_post.jsonl", "r");
    ck_assert_msg(fp != NULL, "run from the repository root");
    char *line = NULL;
    size_t cap = 0;
    int checked = 0;
    while (getline(&line, &cap, fp) > 0) {
        bson_error_t e;
        bson_t *v = bson_new_from_json((const uint8_t *)line, -1, &e);
        ck_assert_msg(v, "%s", e.message);
        bson_iter_t it;
        if (!bson_iter_init_find(&it, v, "id")) {
            bson_destroy(v);
            continue;
        }
        const char *id = bson_iter_utf8(&it, NULL);
        if (strstr(id, "Binary") || strstr(id, "-absent") || strstr(id, "Mismatch") || strstr(id, "NotArray") ||
            strstr(id, "-scalars")) {
            bson_destroy(v);
            continue;
        }
        bson_t pre, o, post;
        uint32_t len;
        const uint8_t *data;
        ck_assert(bson_iter_init_find(&it, v, "pre"));
        bson_iter_document(&it, &len, &data);
        bson_init_static(&pre, data, len);
        ck_assert(bson_iter_init_find(&it, v, "o"));
        bson_iter_document(&it, &len, &data);
        bson_init_static(&o, data, len);
        ck_assert(bson_iter_init_find(&it, v, "post"));
        bson_iter_document(&it, &len, &data);
        bson_init_static(&post, data, len);
        fixture f;
        fx_init(&f);
        cs_stream *s = open_ok(&f, "db", "c",
                               pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(f.secs, 1), "showExpandedEvents",
                                                BCON_BOOL(true))));
        bson_t *body = BCON_NEW("op", "u", "ns", "db.c", "ui", BCON_BIN(BSON_SUBTYPE_UUID, UUID_A, 16));
        BSON_APPEND_DOCUMENT(body, "o", &o);
        bson_t *o2 = BCON_NEW("_id", BCON_INT32(1));
        BSON_APPEND_DOCUMENT(body, "o2", o2);
        bson_destroy(o2);
        put(&f, body);
        batch_t b;
        next(&f, s, -1, &b);
        ck_assert_msg(b.ok && b.n == 1, "%s", id);
        bson_t ud, part, disamb;
        bson_iter_t u;
        ck_assert(bson_iter_init_find(&u, &b.ev[0], "updateDescription"));
        bson_iter_document(&u, &len, &data);
        bson_init_static(&ud, data, len);
        ck_assert(bson_iter_init_find(&u, &ud, "disambiguatedPaths"));
        bson_iter_document(&u, &len, &data);
        bson_init_static(&disamb, data, len);
        bson_t *doc = bson_copy(&pre);
        vpath p;
        bson_iter_t x;
        /* truncations first (the array diff's new length), then the updated and the removed fields */
        ck_assert(bson_iter_init_find(&u, &ud, "truncatedArrays"));
        bson_iter_array(&u, &len, &data);
        bson_init_static(&part, data, len);
        bson_iter_init(&x, &part);
        while (bson_iter_next(&x)) {
            bson_t t;
            bson_iter_t fld, ns;
            bson_iter_document(&x, &len, &data);
            bson_init_static(&t, data, len);
            ck_assert(bson_iter_init_find(&fld, &t, "field") && bson_iter_init_find(&ns, &t, "newSize"));
            vpath_of(bson_iter_utf8(&fld, NULL), &disamb, &p);
            vapply_doc(&doc, &p, NULL, (int)bson_iter_as_int64(&ns));
        }
        ck_assert(bson_iter_init_find(&u, &ud, "updatedFields"));
        bson_iter_document(&u, &len, &data);
        bson_init_static(&part, data, len);
        bson_iter_init(&x, &part);
        while (bson_iter_next(&x)) {
            vpath_of(bson_iter_key(&x), &disamb, &p);
            vapply_doc(&doc, &p, &x, -1);
        }
        ck_assert(bson_iter_init_find(&u, &ud, "removedFields"));
        bson_iter_array(&u, &len, &data);
        bson_init_static(&part, data, len);
        bson_iter_init(&x, &part);
        while (bson_iter_next(&x)) {
            vpath_of(bson_iter_utf8(&x, NULL), &disamb, &p);
            vapply_doc(&doc, &p, NULL, -1);
        }
        char *got = bson_as_relaxed_extended_json(doc, NULL), *want = bson_as_relaxed_extended_json(&post, NULL);
        ck_assert_msg(same_unordered(doc, &post, false), "%s: got %s, want %s", id, got, want);
        bson_free(got);
        bson_free(want);
        bson_destroy(doc);
        batch_free(&b);
        cs_close(s);
        fx_free(&f);
        bson_destroy(v);
        checked++;
    }
    free(line);
    fclose(fp);
    ck_assert_int_ge(checked, 25);
}
END_TEST

/* ---- options ---- */

static void noemit(void *ctx, const bson_t *body)
{
    (void)ctx;
    (void)body;
}

START_TEST(test_full_document_options)
{
    fixture f;
    fx_init(&f);
    bson_error_t e;
    bson_t *doc = BCON_NEW("_id", BCON_INT32(1), "x", BCON_INT32(42), "a.b", BCON_INT32(1));
    ck_assert(store_insert(f.store, "db", "c", doc, noemit, NULL, &e));
    bson_destroy(doc);
    /* a dotted name (ambiguous even first), a numeric name past the first part (ambiguous), a numeric first part
     * (not), an array index (not, but shown as an int once the path is ambiguous) */
    bson_t *upd = BCON_NEW("op", "u", "ns", "db.c", "ui", BCON_BIN(BSON_SUBTYPE_UUID, UUID_A, 16), "o", "{", "$v",
                           BCON_INT32(2), "diff", "{", "u", "{", "x", BCON_INT32(42), "a.b", BCON_INT32(1), "}", "s0",
                           "{", "u", "{", "q", BCON_INT32(1), "}", "}", "sm", "{", "s1", "{", "a", BCON_BOOL(true),
                           "u2", BCON_INT32(7), "}", "}", "sarr", "{", "a", BCON_BOOL(true), "u3", BCON_INT32(1), "}",
                           "}", "}", "o2", "{", "_id", BCON_INT32(1), "}");
    bson_t *upd2 = bson_copy(upd);
    put(&f, upd);
    put(&f,
        BCON_NEW("op", "u", "ns", "db.c", "ui", BCON_BIN(BSON_SUBTYPE_UUID, UUID_A, 16), "o", "{", "$v", BCON_INT32(2),
                 "diff", "{", "u", "{", "x", BCON_INT32(1), "}", "}", "}", "o2", "{", "_id", BCON_INT32(2), "}"));
    bson_destroy(upd2);
    batch_t b;
    /* updateLookup: the current document, or null when it is gone */
    cs_stream *s = open_ok(&f, "db", "c",
                           pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(f.secs, 1), "fullDocument",
                                            "updateLookup", "showExpandedEvents", BCON_BOOL(true))));
    next(&f, s, -1, &b);
    ck_assert_uint_eq(b.n, 2);
    ck_assert_int_eq(int_at(&b.ev[0], "fullDocument.x"), 42);
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, &b.ev[1], "fullDocument") && BSON_ITER_HOLDS_NULL(&it));
    /* disambiguatedPaths for a field name with a dot and a numeric field name */
    ck_assert(has(&b.ev[0], "updateDescription.disambiguatedPaths"));
    bson_iter_t dp;
    ck_assert(bson_iter_init(&it, &b.ev[0]) &&
              bson_iter_find_descendant(&it, "updateDescription.disambiguatedPaths", &dp));
    bson_t d;
    uint32_t len;
    const uint8_t *data;
    bson_iter_document(&dp, &len, &data);
    bson_init_static(&d, data, len);
    bson_t *want = BCON_NEW("a.b", "[", "a.b", "]", "m.1.2", "[", "m", "1", BCON_INT32(2), "]");
    ck_assert_msg(bson_equal(&d, want), "got %s", bson_as_relaxed_extended_json(&d, NULL));
    bson_destroy(want);
    batch_free(&b);
    cs_close(s);
    /* whenAvailable without stored images: null; required: NoMatchingDocument */
    s = open_ok(&f, "db", "c",
                pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(f.secs, 1), "fullDocument", "whenAvailable",
                                 "fullDocumentBeforeChange", "whenAvailable")));
    next(&f, s, -1, &b);
    ck_assert(bson_iter_init_find(&it, &b.ev[0], "fullDocument") && BSON_ITER_HOLDS_NULL(&it));
    ck_assert(bson_iter_init_find(&it, &b.ev[0], "fullDocumentBeforeChange") && BSON_ITER_HOLDS_NULL(&it));
    ck_assert(!has(&b.ev[0], "updateDescription.disambiguatedPaths"));
    batch_free(&b);
    cs_close(s);
    s = open_ok(&f, "db", "c",
                pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(f.secs, 1), "fullDocument", "required")));
    next(&f, s, -1, &b);
    ck_assert(!b.ok);
    ck_assert_int_eq(b.err.code, 47);
    cs_close(s);
    s = open_ok(
        &f, "db", "c",
        pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(f.secs, 1), "fullDocumentBeforeChange", "required")));
    next(&f, s, -1, &b);
    ck_assert(!b.ok);
    ck_assert_int_eq(b.err.code, 47);
    cs_close(s);
    /* showRawUpdateDescription: the oplog's o */
    s = open_ok(&f, "db", "c",
                pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(f.secs, 1), "showRawUpdateDescription",
                                 BCON_BOOL(true))));
    next(&f, s, -1, &b);
    ck_assert_int_eq(int_at(&b.ev[0], "rawUpdateDescription.$v"), 2);
    ck_assert_int_eq(int_at(&b.ev[0], "rawUpdateDescription.diff.u.x"), 42);
    ck_assert(!has(&b.ev[0], "updateDescription"));
    batch_free(&b);
    cs_close(s);
    /* $project that removes _id: 280 */
    bson_t *p = pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(f.secs, 1)));
    bson_t *pr = BCON_NEW("$project", "{", "_id", BCON_INT32(0), "}");
    BSON_APPEND_DOCUMENT(p, "1", pr);
    bson_destroy(pr);
    s = open_ok(&f, "db", "c", p);
    next(&f, s, -1, &b);
    ck_assert(!b.ok);
    ck_assert_int_eq(b.err.code, 280);
    cs_close(s);
    /* $project keeping fields */
    p = pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(f.secs, 1)));
    pr = BCON_NEW("$project", "{", "documentKey", BCON_INT32(1), "}");
    BSON_APPEND_DOCUMENT(p, "1", pr);
    bson_destroy(pr);
    s = open_ok(&f, "db", "c", p);
    next(&f, s, -1, &b);
    ck_assert(b.ok);
    ck_assert_uint_eq(b.n, 2);
    ck_assert(has(&b.ev[0], "_id._data") && has(&b.ev[0], "documentKey._id") && !has(&b.ev[0], "operationType"));
    batch_free(&b);
    cs_close(s);
    fx_free(&f);
}
END_TEST

/* ---- pre- and post-images (changeStreamPreAndPostImages) ---- */

typedef struct {
    fixture *f;
    sim_images *im;
    bson_t *collected[8]; /* a transaction's bodies, logged in one applyOps; NULL: each logged at once */
    size_t n;
    bool txn;
} img_log;

/* cs_open with a pipeline it then frees (cs_open only reads it). */
static cs_stream *open_owned(const cs_env *env, const char *db, const char *coll, bson_t *pipeline, cs_error *err)
{
    cs_stream *s = cs_open(env, db, coll, pipeline, err);
    bson_destroy(pipeline);
    return s;
}

/* The store's emit: logs the body as its own entry (or collects it for an applyOps), giving its images their key. */
static void img_emit(void *ctx, const bson_t *body)
{
    img_log *l = ctx;
    if (l->txn) {
        ck_assert_uint_lt(l->n, 8);
        l->collected[l->n++] = bson_copy(body);
        return;
    }
    uint64_t ts = OPLOG_TS(l->f->secs, l->f->inc + 1);
    bson_t *e = bson_copy(body);
    BSON_APPEND_TIMESTAMP(e, "ts", OPLOG_TS_SECS(ts), OPLOG_TS_INC(ts));
    images_on_entry(l->im, e, ts);
    bson_destroy(e);
    put(l->f, bson_copy(body));
}

static void img_commit(img_log *l)
{
    bson_t body = BSON_INITIALIZER, o, arr;
    BSON_APPEND_UTF8(&body, "op", "c");
    BSON_APPEND_UTF8(&body, "ns", "admin.$cmd");
    BSON_APPEND_DOCUMENT_BEGIN(&body, "o", &o);
    BSON_APPEND_ARRAY_BEGIN(&o, "applyOps", &arr);
    for (size_t i = 0; i < l->n; i++) {
        char k[24];
        snprintf(k, sizeof k, "%zu", i);
        BSON_APPEND_DOCUMENT(&arr, k, l->collected[i]);
        bson_destroy(l->collected[i]);
    }
    bson_append_array_end(&o, &arr);
    bson_append_document_end(&body, &o);
    uint64_t ts = OPLOG_TS(l->f->secs, l->f->inc + 1);
    images_on_entry(l->im, &body, ts);
    put(l->f, bson_copy(&body));
    bson_destroy(&body);
    l->n = 0;
    l->txn = false;
}

static bool null_at(const bson_t *doc, const char *path)
{
    bson_iter_t it, f;
    return bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, path, &f) && BSON_ITER_HOLDS_NULL(&f);
}

static void ns_images(void *ctx, const store_ns_info *ns)
{
    if (ddl_images_enabled(ns->options)) {
        strcat(ctx, ns->name);
        strcat(ctx, " ");
    }
}

START_TEST(test_pre_post_images)
{
    fixture f;
    fx_init(&f);
    img_log l = {.f = &f, .im = images_new()};
    store_set_image_hook(f.store, images_pending, l.im);
    bson_error_t e;
    /* db.c with images from its create, db.plain without, db.later with them from a collMod */
    bson_t *cmd = BCON_NEW("create", "c", "changeStreamPreAndPostImages", "{", "enabled", BCON_BOOL(true), "}");
    ck_assert_msg(store_create_cmd(f.store, "db", "c", cmd, img_emit, &l, &e), "%s", e.message);
    bson_destroy(cmd);
    /* the option's value is checked as the server's IDL checks it */
    cmd = BCON_NEW("create", "bad", "changeStreamPreAndPostImages", "{", "on", BCON_BOOL(true), "}");
    ck_assert(!store_create_cmd(f.store, "db", "bad", cmd, img_emit, &l, &e));
    ck_assert_int_eq(e.code, 40415);
    bson_destroy(cmd);
    uint64_t start = OPLOG_TS(f.secs, f.inc + 1);
    const char *colls[] = {"c", "plain", "later"};
    for (int i = 0; i < 3; i++) {
        bson_t *d = BCON_NEW("_id", BCON_INT32(1), "x", BCON_INT32(1));
        ck_assert(store_insert(f.store, "db", colls[i], d, img_emit, &l, &e));
        bson_destroy(d);
    }
    ck_assert(store_coll_mod_images(f.store, "db", "later", true, img_emit, &l, &e));
    bson_t *q = BCON_NEW("_id", BCON_INT32(1));
    bson_t *set2 = BCON_NEW("$set", "{", "x", BCON_INT32(2), "}");
    for (int i = 0; i < 3; i++)
        ck_assert(store_update(f.store, "db", colls[i], q, set2, false, NULL, img_emit, &l, &e));
    /* a replace, then a transaction of two updates of the same document, then a delete */
    bson_t *repl = BCON_NEW("_id", BCON_INT32(1), "y", BCON_INT32(3));
    ck_assert(store_update(f.store, "db", "c", q, repl, false, NULL, img_emit, &l, &e));
    l.txn = true;
    bson_t *set4 = BCON_NEW("$set", "{", "y", BCON_INT32(4), "}");
    bson_t *set5 = BCON_NEW("$set", "{", "y", BCON_INT32(5), "}");
    ck_assert(store_update(f.store, "db", "c", q, set4, false, NULL, img_emit, &l, &e));
    ck_assert(store_update(f.store, "db", "c", q, set5, false, NULL, img_emit, &l, &e));
    img_commit(&l);
    /* the same body as the first update ({$set: {y: 4}}) again, logged alone: its own images, not the txn's */
    ck_assert(store_update(f.store, "db", "c", q, set4, false, NULL, img_emit, &l, &e));
    int64_t n;
    ck_assert(store_delete(f.store, "db", "c", q, 1, &n, img_emit, &l, &e));
    ck_assert_int_eq(n, 1);
    /* listCollections shows the option on db.c and db.later */
    char shown[64] = "";
    store_list_namespaces(f.store, "db", ns_images, shown);
    ck_assert_str_eq(shown, "c later ");

    cs_env env = env_of(&f);
    env.images = l.im;
    cs_error err;
    cs_stream *s =
        open_owned(&env, "db", NULL,
                   pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(OPLOG_TS_SECS(start), OPLOG_TS_INC(start)),
                                    "fullDocument", "whenAvailable", "fullDocumentBeforeChange", "whenAvailable")),
                   &err);
    ck_assert_msg(s, "%s", err.msg);
    bson_t events = BSON_INITIALIZER, pbrt = BSON_INITIALIZER;
    bool closed;
    ck_assert_msg(cs_next_batch(s, &env, -1, &events, &pbrt, &closed, &err), "%s", err.msg);
    bson_t ev[16];
    size_t ne = 0;
    bson_iter_t it;
    bson_iter_init(&it, &events);
    while (bson_iter_next(&it) && ne < 16) {
        uint32_t len;
        const uint8_t *data;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&ev[ne++], data, len);
    }
    /* 3 inserts, 3 updates, replace, 2 txn updates, update, delete (the collMod is no event without
     * showExpandedEvents) */
    ck_assert_uint_eq(ne, 11);
    /* db.c's update: pre {x:1}, post {x:2} */
    ck_assert_str_eq(str_at(&ev[3], "operationType"), "update");
    ck_assert_str_eq(str_at(&ev[3], "ns.coll"), "c");
    ck_assert_int_eq(int_at(&ev[3], "fullDocumentBeforeChange.x"), 1);
    ck_assert_int_eq(int_at(&ev[3], "fullDocument.x"), 2);
    /* db.plain: no images, whenAvailable gives null */
    ck_assert_str_eq(str_at(&ev[4], "ns.coll"), "plain");
    ck_assert(null_at(&ev[4], "fullDocument") && null_at(&ev[4], "fullDocumentBeforeChange"));
    /* db.later: images since the collMod */
    ck_assert_str_eq(str_at(&ev[5], "ns.coll"), "later");
    ck_assert_int_eq(int_at(&ev[5], "fullDocumentBeforeChange.x"), 1);
    ck_assert_int_eq(int_at(&ev[5], "fullDocument.x"), 2);
    /* the replace: its fullDocument is the replacement, its pre-image the document before */
    ck_assert_str_eq(str_at(&ev[6], "operationType"), "replace");
    ck_assert_int_eq(int_at(&ev[6], "fullDocumentBeforeChange.x"), 2);
    ck_assert_int_eq(int_at(&ev[6], "fullDocument.y"), 3);
    /* the transaction: each write its own images (post-image as right after that write, not the commit's state) */
    ck_assert_int_eq(int_at(&ev[7], "fullDocumentBeforeChange.y"), 3);
    ck_assert_int_eq(int_at(&ev[7], "fullDocument.y"), 4);
    ck_assert_int_eq(int_at(&ev[8], "fullDocumentBeforeChange.y"), 4);
    ck_assert_int_eq(int_at(&ev[8], "fullDocument.y"), 5);
    /* the same body logged alone later */
    ck_assert_int_eq(int_at(&ev[9], "fullDocumentBeforeChange.y"), 5);
    ck_assert_int_eq(int_at(&ev[9], "fullDocument.y"), 4);
    /* the delete: the pre-image */
    ck_assert_str_eq(str_at(&ev[10], "operationType"), "delete");
    ck_assert_int_eq(int_at(&ev[10], "fullDocumentBeforeChange.y"), 4);
    ck_assert(!has(&ev[10], "fullDocument"));
    bson_destroy(&events);
    bson_destroy(&pbrt);
    cs_close(s);
    /* required: served where images were kept, NoMatchingDocument (47) at db.plain's update */
    s = open_owned(&env, "db", "c",
                   pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(OPLOG_TS_SECS(start), OPLOG_TS_INC(start)),
                                    "fullDocument", "required", "fullDocumentBeforeChange", "required")),
                   &err);
    ck_assert(s);
    bson_init(&events);
    bson_init(&pbrt);
    ck_assert_msg(cs_next_batch(s, &env, -1, &events, &pbrt, &closed, &err), "%s", err.msg);
    ck_assert_uint_eq(bson_count_keys(&events), 7);
    bson_destroy(&events);
    bson_destroy(&pbrt);
    cs_close(s);
    s = open_owned(&env, "db", "plain",
                   pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(OPLOG_TS_SECS(start), OPLOG_TS_INC(start)),
                                    "fullDocument", "required")),
                   &err);
    ck_assert(s);
    bson_init(&events);
    bson_init(&pbrt);
    ck_assert(!cs_next_batch(s, &env, -1, &events, &pbrt, &closed, &err));
    ck_assert_int_eq(err.code, 47);
    bson_destroy(&events);
    bson_destroy(&pbrt);
    cs_close(s);
    bson_destroy(q);
    bson_destroy(set2);
    bson_destroy(repl);
    bson_destroy(set4);
    bson_destroy(set5);
    images_free(l.im);
    fx_free(&f);
}
END_TEST

/* ---- 16 MB ---- */

START_TEST(test_large_event_split)
{
    fixture f;
    fx_init(&f);
    /* a replace of 10 MB, looked-up... simpler: an insert whose fullDocument and documentKey hold two 9 MB fields */
    size_t big = 9 * 1024 * 1024;
    char *s1 = malloc(big + 1);
    memset(s1, 'a', big);
    s1[big] = 0;
    bson_t body = BSON_INITIALIZER, o;
    BSON_APPEND_UTF8(&body, "op", "u");
    BSON_APPEND_UTF8(&body, "ns", "db.c");
    bson_append_binary(&body, "ui", -1, BSON_SUBTYPE_UUID, UUID_A, 16);
    BSON_APPEND_DOCUMENT_BEGIN(&body, "o", &o);
    BSON_APPEND_INT32(&o, "$v", 2);
    bson_t diff, u;
    BSON_APPEND_DOCUMENT_BEGIN(&o, "diff", &diff);
    BSON_APPEND_DOCUMENT_BEGIN(&diff, "u", &u);
    BSON_APPEND_UTF8(&u, "big", s1);
    bson_append_document_end(&diff, &u);
    bson_append_document_end(&o, &diff);
    bson_append_document_end(&body, &o);
    bson_t *o2 = BCON_NEW("_id", BCON_INT32(1));
    BSON_APPEND_DOCUMENT(&body, "o2", o2);
    bson_destroy(o2);
    put(&f, bson_copy(&body));
    bson_destroy(&body);
    put_insert(&f, "db.c", 2, 0);
    /* the current document, looked up, holds the same 9 MB field: the event is over 16 MB */
    bson_t *doc = BCON_NEW("_id", BCON_INT32(1));
    BSON_APPEND_UTF8(doc, "big", s1);
    bson_error_t e;
    ck_assert(store_insert(f.store, "db", "c", doc, noemit, NULL, &e));
    bson_destroy(doc);
    free(s1);
    batch_t b;
    cs_stream *s =
        open_ok(&f, "db", "c",
                pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(f.secs, 1), "fullDocument", "updateLookup")));
    next(&f, s, -1, &b);
    ck_assert(!b.ok);
    ck_assert_int_eq(b.err.code, 10334);
    ck_assert(strstr(b.err.msg, "BSONObj size"));
    cs_close(s);
    bson_t *p = pipe_cs(BCON_NEW("startAtOperationTime", BCON_TIMESTAMP(f.secs, 1), "fullDocument", "updateLookup"));
    bson_t *sp = BCON_NEW("$changeStreamSplitLargeEvent", "{", "}");
    BSON_APPEND_DOCUMENT(p, "1", sp);
    bson_t *p2 = bson_copy(p);
    s = open_ok(&f, "db", "c", p);
    next(&f, s, 1, &b);
    ck_assert(b.ok);
    ck_assert_uint_eq(b.n, 1);
    ck_assert_int_eq(int_at(&b.ev[0], "splitEvent.fragment"), 1);
    ck_assert_int_eq(int_at(&b.ev[0], "splitEvent.of"), 2);
    ck_assert_uint_le(b.ev[0].len, 16 * 1024 * 1024 + 8 * 1024);
    ck_assert_str_eq(str_at(&b.ev[0], "operationType"), "update");
    ck_assert_str_eq(str_at(&b.ev[0], "ns.coll"), "c");
    char frag1[4096];
    snprintf(frag1, sizeof frag1, "%s", token_of(&b.ev[0]));
    ck_assert_str_eq(b.pbrt, frag1);
    batch_free(&b);
    cs_close(s);
    /* resume from the first fragment: the second fragment, then the insert */
    bson_t *spec = BCON_NEW("resumeAfter", "{", "_data", frag1, "}", "fullDocument", "updateLookup");
    bson_t *p3 = pipe_cs(spec);
    BSON_APPEND_DOCUMENT(p3, "1", sp);
    bson_destroy(sp);
    bson_destroy(p2);
    sp = NULL;
    s = open_ok(&f, "db", "c", p3);
    next(&f, s, -1, &b);
    ck_assert(b.ok);
    ck_assert_uint_eq(b.n, 2);
    ck_assert_int_eq(int_at(&b.ev[0], "splitEvent.fragment"), 2);
    ck_assert_int_eq(int_at(&b.ev[0], "splitEvent.of"), 2);
    ck_assert_str_eq(str_at(&b.ev[1], "operationType"), "insert");
    /* the fields go by size, smallest first: the small ones in fragment 1, one 9 MB field in each */
    ck_assert(!has(&b.ev[0], "operationType") && !has(&b.ev[0], "ns"));
    char frag2[4096];
    snprintf(frag2, sizeof frag2, "%s", token_of(&b.ev[0]));
    batch_free(&b);
    cs_close(s);
    /* resume from the last fragment: the next event */
    bson_t *p4 = pipe_cs(BCON_NEW("resumeAfter", "{", "_data", frag2, "}", "fullDocument", "updateLookup"));
    sp = BCON_NEW("$changeStreamSplitLargeEvent", "{", "}");
    BSON_APPEND_DOCUMENT(p4, "1", sp);
    bson_destroy(sp);
    s = open_ok(&f, "db", "c", p4);
    next(&f, s, -1, &b);
    ck_assert(b.ok);
    ck_assert_uint_eq(b.n, 1);
    ck_assert_str_eq(str_at(&b.ev[0], "operationType"), "insert");
    batch_free(&b);
    cs_close(s);
    fx_free(&f);
}
END_TEST

Suite *mongosim_changestream_suite(void)
{
    Suite *s = suite_create("mongosim_changestream");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_token_bytes_match_real_server);
    tcase_add_test(tc, test_token_fields_read_back);
    tcase_add_test(tc, test_token_type_bits);
    tcase_add_test(tc, test_crud_events);
    tcase_add_test(tc, test_update_description_vectors);
    tcase_add_test(tc, test_transactions_unwound);
    tcase_add_test(tc, test_match_stage);
    tcase_add_test(tc, test_pbrt_and_resume);
    tcase_add_test(tc, test_drop_invalidates);
    tcase_add_test(tc, test_view_events);
    tcase_add_test(tc, test_full_document_options);
    tcase_add_test(tc, test_pre_post_images);
    tcase_add_test(tc, test_large_event_split);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * seeds.c — writes the fuzz targets' seed corpora: `seeds OUTDIR`, run from the repository root, fills
 * OUTDIR/<target>/ with inputs made from the test vectors (tests/vectors: real and transcribed oplog entries, $v:2
 * diffs, BSONColumns, time-series buckets and dumps), the configuration samples (the .ini files of conf/) and a few
 * hand-made inputs (change events, HTTP requests, wire messages). Built and run by `make fuzz`; nothing it writes is
 * committed.
 */
#include <bson/bson.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *outdir;
static unsigned written;

static void put(const char *target, const char *name, const void *data, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", outdir, target);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", outdir, target, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "seeds: cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
    written++;
}

static void put_doc(const char *target, const char *name, const bson_t *doc)
{
    put(target, name, bson_get_data(doc), doc->len);
}

/* Two documents one after another (a target that reads a second one). */
static void put_pair(const char *target, const char *name, const bson_t *a, const bson_t *b)
{
    uint8_t *buf = malloc(a->len + b->len);
    memcpy(buf, bson_get_data(a), a->len);
    memcpy(buf + a->len, bson_get_data(b), b->len);
    put(target, name, buf, a->len + b->len);
    free(buf);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "seeds: cannot read %s: %s\n", path, strerror(errno));
        exit(1);
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t k;
    while ((k = fread(buf + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap)
            buf = realloc(buf, (cap *= 2) + 1);
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

static bool has_suffix(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static bool unhex(const char *hex, uint8_t **out, size_t *len)
{
    size_t n = strlen(hex);
    if (n % 2 != 0)
        return false;
    *out = malloc(n / 2 + 1);
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) {
            free(*out);
            return false;
        }
        (*out)[i] = (uint8_t)v;
    }
    *len = n / 2;
    return true;
}

/* Calls fn on each JSON line of path that is a document (the _comment lines too: fn decides). */
static void each_line(const char *path, void (*fn)(const char *base, unsigned line, const bson_t *doc))
{
    size_t len;
    char *text = slurp(path, &len);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    unsigned n = 0;
    for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        bson_error_t err;
        bson_t *doc = bson_new_from_json((const uint8_t *)line, -1, &err);
        n++;
        if (doc == NULL)
            continue;
        fn(base, n, doc);
        bson_destroy(doc);
    }
    free(text);
}

/* ---- oplog entries: decode, ejson, dump ---- */

static void entry_line(const char *base, unsigned line, const bson_t *doc)
{
    if (bson_has_field(doc, "_comment"))
        return;
    char name[512];
    snprintf(name, sizeof name, "%s-%u", base, line);
    put_doc("decode", name, doc);
    put_doc("ejson", name, doc);
}

static void dump_file(const char *path)
{
    size_t len;
    char *data = slurp(path, &len);
    const char *base = strrchr(path, '/') + 1;
    put("dump", base, data, len);
    /* Each entry alone for the decoder too. */
    size_t off = 0;
    unsigned n = 0;
    while (off + 4 <= len) {
        uint32_t l;
        memcpy(&l, data + off, 4);
        l = BSON_UINT32_FROM_LE(l);
        if (l < 5 || l > len - off)
            break;
        char name[512];
        snprintf(name, sizeof name, "%s-%u", base, n++);
        put("decode", name, data + off, l);
        off += l;
    }
    free(data);
}

static void oplog_vectors(void)
{
    DIR *dir = opendir("tests/vectors");
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        if (has_suffix(de->d_name, ".jsonl") &&
            (strncmp(de->d_name, "real_", 5) == 0 || strncmp(de->d_name, "transcribed_", 12) == 0)) {
            char path[1024];
            snprintf(path, sizeof path, "tests/vectors/%s", de->d_name);
            each_line(path, entry_line);
        }
    }
    closedir(dir);
    dir = opendir("tests/vectors/raw_bson");
    while ((de = readdir(dir)) != NULL) {
        if (has_suffix(de->d_name, ".bson") && strncmp(de->d_name, "ts_", 3) != 0) {
            char path[1024];
            snprintf(path, sizeof path, "tests/vectors/raw_bson/%s", de->d_name);
            dump_file(path);
        }
    }
    closedir(dir);
    dump_file("tests/vectors/timeseries/mongo-tools_ts_dump_with_oplog.oplog.bson");
}

/* ---- $v:2 diffs: v2diff, bucket applies ---- */

static void diff_line(const char *base, unsigned line, const bson_t *doc)
{
    bson_iter_t it;
    char name[512];
    snprintf(name, sizeof name, "%s-%u", base, line);
    if (bson_iter_init_find(&it, doc, "diff_bson_hex") && BSON_ITER_HOLDS_UTF8(&it)) {
        uint8_t *bytes;
        size_t len;
        if (unhex(bson_iter_utf8(&it, NULL), &bytes, &len)) {
            put("v2diff", name, bytes, len);
            free(bytes);
        }
        return;
    }
    bson_iter_t o, d, p;
    if (!bson_iter_init_find(&o, doc, "o") || !BSON_ITER_HOLDS_DOCUMENT(&o) || !bson_iter_recurse(&o, &d) ||
        !bson_iter_find(&d, "diff") || !BSON_ITER_HOLDS_DOCUMENT(&d) || !bson_iter_init_find(&p, doc, "pre") ||
        !BSON_ITER_HOLDS_DOCUMENT(&p))
        return;
    uint32_t dl, pl;
    const uint8_t *dd, *pd;
    bson_iter_document(&d, &dl, &dd);
    bson_iter_document(&p, &pl, &pd);
    bson_t diff, pre;
    if (bson_init_static(&diff, dd, dl) && bson_init_static(&pre, pd, pl))
        put_pair("v2diff", name, &diff, &pre);
}

/* ---- buckets and columns ---- */

static void column_line(const char *base, unsigned line, const bson_t *doc)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, doc, "column") || !BSON_ITER_HOLDS_BINARY(&it))
        return;
    bson_subtype_t st;
    uint32_t len;
    const uint8_t *data;
    bson_iter_binary(&it, &st, &len, &data);
    char name[512];
    snprintf(name, sizeof name, "%s-%u", base, line);
    put("bsoncolumn", name, data, len);
}

/* The bucket diffs of the time-series oplog vectors, applied to the buckets below. */
static bson_t *ts_diffs[64];
static size_t n_ts_diffs;

static void ts_entry(const bson_t *entry)
{
    bson_iter_t it, d;
    if (n_ts_diffs < 64 && bson_iter_init_find(&it, entry, "o") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &d) && bson_iter_find(&d, "diff") && BSON_ITER_HOLDS_DOCUMENT(&d)) {
        uint32_t l;
        const uint8_t *p;
        bson_iter_document(&d, &l, &p);
        ts_diffs[n_ts_diffs++] = bson_new_from_data(p, l);
    }
}

static void bucket_doc(const char *base, unsigned n, const bson_t *bucket)
{
    char name[512];
    snprintf(name, sizeof name, "%s-%u", base, n);
    put_doc("bucket", name, bucket);
    if (n_ts_diffs > 0) {
        snprintf(name, sizeof name, "%s-%u-diff", base, n);
        put_pair("bucket", name, bucket, ts_diffs[n % n_ts_diffs]);
    }
    /* Its compressed columns, for the column decoder. */
    bson_iter_t it, col;
    if (bson_iter_init_find(&it, bucket, "data") && BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &col)) {
        while (bson_iter_next(&col)) {
            if (!BSON_ITER_HOLDS_BINARY(&col))
                continue;
            bson_subtype_t st;
            uint32_t len;
            const uint8_t *data;
            bson_iter_binary(&col, &st, &len, &data);
            snprintf(name, sizeof name, "%s-%u-%s", base, n, bson_iter_key(&col));
            put("bsoncolumn", name, data, len);
        }
    }
}

static void each_doc(const char *path, void (*fn)(const char *base, unsigned n, const bson_t *doc))
{
    size_t len;
    char *data = slurp(path, &len);
    const char *base = strrchr(path, '/') + 1;
    bson_reader_t *r = bson_reader_new_from_data((const uint8_t *)data, len);
    const bson_t *doc;
    unsigned n = 0;
    while ((doc = bson_reader_read(r, NULL)) != NULL)
        fn(base, n++, doc);
    bson_reader_destroy(r);
    free(data);
}

static void ts_oplog(const char *base, unsigned n, const bson_t *doc)
{
    (void)base;
    (void)n;
    ts_entry(doc);
}

static void ts_jsonl(const char *base, unsigned n, const bson_t *doc)
{
    ts_oplog(base, n, doc);
}

static void buckets(void)
{
    each_doc("tests/vectors/timeseries/mongo-tools_ts_dump_with_oplog.oplog.bson", ts_oplog);
    each_doc("tests/vectors/raw_bson/real_v5.0_2021_timeseries_v2_diff_updates_all.bson", ts_oplog);
    each_line("tests/vectors/real_v5.0_2021_timeseries_v2_diff_updates_sample.jsonl", ts_jsonl);
    each_doc("tests/vectors/timeseries/mongo-tools_ts_dump_with_oplog.buckets.bson", bucket_doc);
    each_doc("tests/vectors/raw_bson/ts_buckets_pre.bson", bucket_doc);
    each_line("tests/vectors/bsoncolumn/server_columns.jsonl", column_line);
    for (size_t i = 0; i < n_ts_diffs; i++) {
        char name[64];
        snprintf(name, sizeof name, "ts-diff-%zu", i);
        put_doc("v2diff", name, ts_diffs[i]);
        bson_destroy(ts_diffs[i]);
    }
}

/* ---- change events and resume tokens ---- */

#define TOK "{\"_data\": \"8269253153000000052B042C0100296E1404\"}"
#define CT  "{\"$timestamp\": {\"t\": 1764045139, \"i\": 5}}"
#define NS  "\"ns\": {\"db\": \"shop\", \"coll\": \"c\"}"

static const char *const events[] = {
    "{\"_id\": " TOK ", \"operationType\": \"insert\", \"clusterTime\": " CT ", " NS
    ", \"documentKey\": {\"_id\": 1}, \"fullDocument\": {\"_id\": 1, \"x\": [1, {\"y\": 2}]}}",
    "{\"_id\": " TOK ", \"operationType\": \"update\", \"clusterTime\": " CT ", " NS
    ", \"documentKey\": {\"_id\": 1}, \"updateDescription\": {\"updatedFields\": {\"b\": 3, \"x.0\": 5}, "
    "\"removedFields\": [\"c\"], \"truncatedArrays\": [{\"field\": \"arr\", \"newSize\": 2}], "
    "\"disambiguatedPaths\": {\"x.0\": [\"x\", 0]}}}",
    "{\"_id\": " TOK ", \"operationType\": \"update\", \"clusterTime\": " CT ", " NS
    ", \"documentKey\": {\"_id\": 1}, \"updateDescription\": {\"updatedFields\": {\"a.b\": 1}, \"removedFields\": "
    "[]}, \"fullDocument\": {\"_id\": 1, \"a\": {\"b\": 1}}}",
    "{\"_id\": " TOK ", \"operationType\": \"replace\", \"clusterTime\": " CT ", " NS
    ", \"documentKey\": {\"_id\": 1}, \"fullDocument\": {\"_id\": 1, \"z\": \"zz\"}}",
    "{\"_id\": " TOK ", \"operationType\": \"delete\", \"clusterTime\": " CT ", " NS ", \"documentKey\": {\"_id\": 1}}",
    "{\"_id\": " TOK ", \"operationType\": \"drop\", \"clusterTime\": " CT ", " NS "}",
    "{\"_id\": " TOK ", \"operationType\": \"rename\", \"clusterTime\": " CT ", " NS
    ", \"to\": {\"db\": \"shop\", \"coll\": \"d\"}}",
    "{\"_id\": " TOK ", \"operationType\": \"dropDatabase\", \"clusterTime\": " CT ", \"ns\": {\"db\": \"shop\"}}",
    "{\"_id\": " TOK ", \"operationType\": \"create\", \"clusterTime\": " CT ", " NS
    ", \"operationDescription\": {\"idIndex\": {\"v\": 2, \"key\": {\"_id\": 1}, \"name\": \"_id_\"}}}",
    "{\"_id\": {\"_data\": \"gmsTk4kAAAAG\"}, \"fullDocument\": {\"_id\": 1, \"x\": 2}, " NS
    ", \"documentKey\": {\"_id\": 1}}",
};

static const char *const txn_events[] = {
    "{\"_id\": " TOK ", \"operationType\": \"insert\", \"clusterTime\": " CT ", " NS
    ", \"lsid\": {\"id\": {\"$binary\": {\"base64\": \"AAAAAAAAAAAAAAAAAAAAAA==\", \"subType\": \"04\"}}}, "
    "\"txnNumber\": {\"$numberLong\": \"3\"}, \"documentKey\": {\"_id\": 1}, \"fullDocument\": {\"_id\": 1}}",
    "{\"_id\": " TOK ", \"operationType\": \"delete\", \"clusterTime\": " CT ", " NS
    ", \"lsid\": {\"id\": {\"$binary\": {\"base64\": \"AAAAAAAAAAAAAAAAAAAAAA==\", \"subType\": \"04\"}}}, "
    "\"txnNumber\": {\"$numberLong\": \"3\"}, \"documentKey\": {\"_id\": 2}}",
    "{\"_id\": " TOK ", \"operationType\": \"update\", \"clusterTime\": " CT ", " NS
    ", \"documentKey\": {\"_id\": 1}, \"splitEvent\": {\"fragment\": 1, \"of\": 2}, "
    "\"updateDescription\": {\"updatedFields\": {\"big\": \"x\"}, \"removedFields\": []}}",
    "{\"_id\": " TOK ", \"splitEvent\": {\"fragment\": 2, \"of\": 2}, \"fullDocumentBeforeChange\": {\"_id\": 1}}",
};

static const char *const tokens[] = {
    "8269253153000000052B042C0100296E1404",
    "8269253153000000052B0429296E1404",
    "8269253154000000012B0429296E1404",
    "8269253153000000052B042C0100296E5A10043F82CF1E692D4B2794FC0410BC2F0F66463C6F706572",
    ("82658B3ED8000000012B022C0100296E5A10045E66C3ACFD4C48E08BD30480813E5BA9463C5F6964003C643934346131333937363630"
     "616533"),
    "82F54892F8B8B8D4C53CCAEF364BB84E",
};

static void stream_seeds(void)
{
    bson_error_t err;
    size_t cap = 0, len = 0;
    uint8_t *seq = NULL;
    for (size_t i = 0; i < sizeof events / sizeof *events; i++) {
        bson_t *ev = bson_new_from_json((const uint8_t *)events[i], -1, &err);
        if (ev == NULL) {
            fprintf(stderr, "seeds: event %zu: %s\n", i, err.message);
            exit(1);
        }
        char name[64];
        snprintf(name, sizeof name, "event-%zu", i);
        put_doc("stream", name, ev);
        bson_destroy(ev);
    }
    for (size_t i = 0; i < sizeof txn_events / sizeof *txn_events; i++) {
        bson_t *ev = bson_new_from_json((const uint8_t *)txn_events[i], -1, &err);
        if (ev == NULL) {
            fprintf(stderr, "seeds: transaction event %zu: %s\n", i, err.message);
            exit(1);
        }
        if (len + ev->len > cap)
            seq = realloc(seq, cap = (len + ev->len) * 2);
        memcpy(seq + len, bson_get_data(ev), ev->len);
        len += ev->len;
        bson_destroy(ev);
    }
    put("stream", "transaction-and-split", seq, len);
    free(seq);
    for (size_t i = 0; i < sizeof tokens / sizeof *tokens; i++) {
        uint8_t *bytes;
        size_t n;
        if (!unhex(tokens[i], &bytes, &n))
            exit(1);
        char name[64];
        snprintf(name, sizeof name, "token-%zu", i);
        put("token", name, bytes, n);
        free(bytes);
    }
}

/* ---- configuration, metrics, wire ---- */

static void config_seeds(void)
{
    const char *files[] = {"conf/oplog2pg.ini", "conf/oplog2pg-minimal.ini"};
    for (size_t i = 0; i < 2; i++) {
        size_t len;
        char *text = slurp(files[i], &len);
        put("config", strrchr(files[i], '/') + 1, text, len);
        free(text);
    }
    static const char maps[] = "[mongodb]\nuri = mongodb://127.0.0.1:27017/?replicaSet=rs0\n"
                               "[postgres]\nconninfo = host=127.0.0.1 dbname=app user=oplog2pg\n"
                               "[replication]\ninclude = shop.*\nexclude = shop.tmp*\n"
                               "[metrics]\nlisten = 127.0.0.1:9187\n"
                               "[map shop.orders]\ntable = sales.orders\nrest = extra\nrest_column = extra_props\n"
                               "on_type_error = dead_letter\nkey = order_id\nadopt = false\n"
                               "column.order_id = text from _id\ncolumn.total = numeric from amount.total\n"
                               "column.placed = timestamptz from placed_at on_type_error=null\n"
                               "column.tags = text[]\nchild.items = order_items\n"
                               "[child sales.order_items]\nparent_key = order_id\nposition = pos\nrest = drop\n"
                               "column.sku = text\ncolumn.qty = integer\n";
    put("config", "maps.ini", maps, sizeof maps - 1);
}

static void metrics_seeds(void)
{
    static const char *const listens[] = {"127.0.0.1:9187", "[::1]:9187", "localhost:0", ":9187", "[::]:65535"};
    for (size_t i = 0; i < 5; i++) {
        char buf[128], name[32];
        buf[0] = 0;
        size_t n = strlen(listens[i]);
        memcpy(buf + 1, listens[i], n);
        snprintf(name, sizeof name, "listen-%zu", i);
        put("metrics", name, buf, n + 1);
    }
    uint8_t snap[2048];
    for (size_t i = 0; i < sizeof snap; i++)
        snap[i] = (uint8_t)(i * 7 + 1);
    snap[0] = 1;
    put("metrics", "render", snap, sizeof snap);
    static const char *const reqs[] = {
        "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        "HEAD /metrics HTTP/1.0\r\n\r\n",
        "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
        "GET /other?x=1 HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    };
    for (size_t i = 0; i < 5; i++) {
        char buf[256], name[32];
        buf[0] = 2;
        size_t n = strlen(reqs[i]);
        memcpy(buf + 1, reqs[i], n);
        snprintf(name, sizeof name, "http-%zu", i);
        put("metrics", name, buf, n + 1);
    }
}

/* An OP_MSG (opcode 2013) with body doc, request id id. */
static size_t op_msg(uint8_t *out, int32_t id, const bson_t *doc)
{
    int32_t len = 16 + 4 + 1 + (int32_t)doc->len, zero = 0, op = 2013;
    memcpy(out, &len, 4);
    memcpy(out + 4, &id, 4);
    memcpy(out + 8, &zero, 4);
    memcpy(out + 12, &op, 4);
    memcpy(out + 16, &zero, 4);
    out[20] = 0;
    memcpy(out + 21, bson_get_data(doc), doc->len);
    return (size_t)len;
}

static void wire_seeds(void)
{
    static const char *const cmds[] = {
        "{\"hello\": 1, \"$db\": \"admin\"}",
        "{\"insert\": \"c\", \"documents\": [{\"_id\": 1, \"a\": 2}], \"$db\": \"shop\"}",
        ("{\"update\": \"c\", \"updates\": [{\"q\": {\"_id\": 1}, \"u\": {\"$set\": {\"a.b\": 3}}, \"upsert\": true}], "
         "\"$db\": \"shop\"}"),
        "{\"find\": \"oplog.rs\", \"filter\": {}, \"tailable\": true, \"awaitData\": true, \"$db\": \"local\"}",
        "{\"aggregate\": 1, \"pipeline\": [{\"$changeStream\": {}}], \"cursor\": {}, \"$db\": \"admin\"}",
        "{\"delete\": \"c\", \"deletes\": [{\"q\": {\"_id\": 1}, \"limit\": 1}], \"$db\": \"shop\"}",
        "{\"create\": \"ts\", \"timeseries\": {\"timeField\": \"t\", \"metaField\": \"m\"}, \"$db\": \"shop\"}",
    };
    uint8_t all[8192];
    size_t alln = 0;
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        bson_error_t err;
        bson_t *doc = bson_new_from_json((const uint8_t *)cmds[i], -1, &err);
        if (doc == NULL) {
            fprintf(stderr, "seeds: command %zu: %s\n", i, err.message);
            exit(1);
        }
        uint8_t buf[1024];
        size_t n = op_msg(buf, (int32_t)i + 1, doc);
        char name[32];
        snprintf(name, sizeof name, "msg-%zu", i);
        put("wire", name, buf, n);
        memcpy(all + alln, buf, n);
        alln += n;
        bson_destroy(doc);
    }
    put("wire", "session", all, alln);
    /* An OP_QUERY isMaster on admin.$cmd (opcode 2004). */
    bson_t *q = BCON_NEW("isMaster", BCON_INT32(1));
    uint8_t buf[256];
    int32_t len = 16 + 4 + 11 + 4 + 4 + (int32_t)q->len, id = 9, zero = 0, op = 2004, nret = -1;
    memcpy(buf, &len, 4);
    memcpy(buf + 4, &id, 4);
    memcpy(buf + 8, &zero, 4);
    memcpy(buf + 12, &op, 4);
    memcpy(buf + 16, &zero, 4);
    memcpy(buf + 20, "admin.$cmd", 11);
    memcpy(buf + 31, &zero, 4);
    memcpy(buf + 35, &nret, 4);
    memcpy(buf + 39, bson_get_data(q), q->len);
    put("wire", "op-query", buf, (size_t)len);
    bson_destroy(q);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: seeds OUTDIR (run from the repository root)\n");
        return 2;
    }
    outdir = argv[1];
    mkdir(outdir, 0755);
    oplog_vectors();
    each_line("tests/vectors/diff_v2_pre_post.jsonl", diff_line);
    each_line("tests/vectors/diff_v2_must_reject.jsonl", diff_line);
    buckets();
    stream_seeds();
    config_seeds();
    metrics_seeds();
    wire_seeds();
    printf("seeds: %u inputs in %s\n", written, outdir);
    return 0;
}

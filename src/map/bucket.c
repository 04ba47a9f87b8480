/*
 * bucket.c — time-series buckets unpacked into measurements, and `$v:2` diffs applied to documents.
 *
 * NOTES
 * Unpacking follows the server's BucketUnpacker (mongodb/mongo src/mongo/db/exec/timeseries/bucket_unpacker.cpp:
 * reset, BucketUnpackerV1::getNext, BucketUnpackerV2::getNext). A measurement is built as
 *   <timeField>: the time column's value, <metaField>: the bucket's `meta` (only when the bucket has one),
 *   then every other data column in the order of the bucket's data region, each only where it has a value.
 * Version 1: a measurement's place is its key's number in the time column; each other column gives a value at the
 * places its keys name. Version 2/3: one BSONColumn per field,
 * all advanced together, a missing value (a skip) leaves the field out. The server also refuses: an empty bucket,
 * no time column in a non-empty data region (5346700), `meta` with no metaField (5369601) or of type undefined
 * (5369600), no control document (5857902), a non-numeric version (5857903), an unknown one (5857900), a column
 * shorter than the time column (6067601). Stricter here, because a row would otherwise vanish silently: a version 1
 * time column must be keyed by exactly the places "0" to "n-1" (the server assumes it:
 * computeElementCountFromTimestampObjSize; in any order here, see unpack_v1), a value in a version 1 column at a key
 * the time column does not have is an error, a
 * version 2/3 column longer than the time column is an error, times must be dates (the collection's timeField is
 * always one: timeseries README), and a version 2/3 control.count must match the time column.
 *
 * The diff applier follows src/mongo/db/update/document_diff_applier.cpp (applyDiffToObject, applyDiffToArray,
 * appendNewValueForArrayIndex) with mustCheckExistenceForInsertOperations on, the mode applyOps and recovery use and
 * the one that makes re-applying an insert harmless; the grammar is document_diff_serialization.h's (sections d, u,
 * i, b, then s<field>; array diffs {a: true, l?, u<idx>, s<idx>}). Section order and names are checked by
 * source/v2diff.c before a diff gets here; this walk checks what it needs to apply safely. The binary section is
 * what 8.0 servers log for an append to a compressed bucket (makeTimeseriesCompressedDiffEntry in
 * src/mongo/db/timeseries/write_ops/timeseries_write_ops_utils.cpp: sdata.b.<column> = {o, d} from
 * BSONColumnBuilder::intermediate, new columns whole in sdata.i, control.count (and version 3) in scontrol.u): the
 * field keeps its place and subtype, its bytes become [0, o) of the old ones followed by d (bcol_apply_binary_diff);
 * d itself arrives as subtype 0. On a missing or non-binary field the idempotent mode does what the applier does for
 * any other section that does not fit (nothing, or null), as src/map/update_functions.sql does too.
 * The existence check changes nothing for a diff the server computed from the document it is applied to (its `i`
 * fields are new); it only makes re-applying an entry harmless.
 */
#include "map/bucket.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map/bsoncolumn.h"

/* Recursion bound of the diff walk (BSON nests at most ~100 levels in the server: BSONDepth::kDefaultMaxAllowable). */
#define DIFF_MAX_DEPTH 200
/* The largest document the server writes (BSONObjMaxInternalSize): no diff it logs makes a larger one. */
#define BUCKET_DIFF_MAX_DOC (16 * 1024 * 1024 + 16 * 1024)

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Unpacking                                                                                                     */
/* ------------------------------------------------------------------------------------------------------------ */

/* The documents of rows: one block, shared (counted) by the rows of successive versions of a bucket
 * (bucket_unpack_next). Bytes below len are never written again; later documents go after them. */
typedef struct rowstore {
    size_t refs, len, cap;
    uint8_t data[];
} rowstore;

static rowstore *store_new(size_t cap)
{
    rowstore *st = malloc(sizeof *st + cap);
    if (st) {
        st->refs = 1;
        st->len = 0;
        st->cap = cap;
    }
    return st;
}

static void store_unref(rowstore *st)
{
    if (st && --st->refs == 0)
        free(st);
}

/* The measurements being built: their bytes one after another in st, each one's offset, length and time. */
typedef struct {
    rowstore *st;
    size_t n, ncap;
    size_t *offs;
    uint32_t *lens;
    int64_t *times;
} rowbuf;

static void rowbuf_free(rowbuf *rb)
{
    free(rb->st);
    free(rb->offs);
    free(rb->lens);
    free(rb->times);
    memset(rb, 0, sizeof *rb);
}

static bool rowbuf_add(rowbuf *rb, const bson_t *doc, int64_t t)
{
    if (rb->n == rb->ncap) {
        size_t nc = rb->ncap ? rb->ncap * 2 : 64;
        size_t *o = realloc(rb->offs, nc * sizeof *o);
        if (!o)
            return false;
        rb->offs = o;
        uint32_t *l = realloc(rb->lens, nc * sizeof *l);
        if (!l)
            return false;
        rb->lens = l;
        int64_t *tt = realloc(rb->times, nc * sizeof *tt);
        if (!tt)
            return false;
        rb->times = tt;
        rb->ncap = nc;
    }
    size_t dl = doc->len;
    size_t used = rb->st ? rb->st->len : 0, cap = rb->st ? rb->st->cap : 0;
    if (cap - used < dl) {
        size_t nc = cap ? cap : 4096;
        while (nc - used < dl)
            nc *= 2;
        rowstore *st = realloc(rb->st, sizeof *st + nc); /* not shared yet */
        if (!st)
            return false;
        if (!rb->st) {
            st->refs = 1;
            st->len = 0;
        }
        st->cap = nc;
        rb->st = st;
    }
    memcpy(rb->st->data + rb->st->len, bson_get_data(doc), dl);
    rb->offs[rb->n] = rb->st->len;
    rb->lens[rb->n] = (uint32_t)dl;
    rb->times[rb->n] = t;
    rb->st->len += dl;
    rb->n++;
    return true;
}

/* The one block of a rows' three arrays, with room for cap places: times first (8-byte aligned), then pointers,
 * then lengths. Shared by the rows of successive versions of a bucket that only grew (bucket_unpack_next): each
 * writes only past the places of the rows it came from. */
typedef struct rowarrays {
    size_t refs, cap;
    int64_t data[];
} rowarrays;

static bool rows_arrays_cap(bucket_rows *out, size_t n, size_t cap)
{
    size_t a1 = cap * sizeof(const uint8_t *), a2 = cap * sizeof(uint32_t), a3 = cap * sizeof(int64_t);
    rowarrays *ra = malloc(sizeof *ra + a1 + a2 + a3 + 1);
    if (!ra)
        return false;
    ra->refs = 1;
    ra->cap = cap;
    uint8_t *block = (uint8_t *)ra->data;
    out->times = ra->data;
    out->docs = (const uint8_t **)(void *)(block + a3);
    out->lens = (uint32_t *)(void *)(block + a3 + a1);
    out->arrays = ra;
    out->n = n;
    return true;
}

static void arrays_unref(void *arrays)
{
    rowarrays *ra = arrays;
    if (ra && --ra->refs == 0)
        free(ra);
}

/* Makes r's arrays its own (a copy, when they are shared), so that its places may be written. */
static bool arrays_own(bucket_rows *r)
{
    rowarrays *ra = r->arrays;
    if (!ra || ra->refs == 1)
        return true;
    bucket_rows c = *r;
    if (!rows_arrays_cap(&c, r->n, ra->cap))
        return false;
    memcpy(c.times, r->times, r->n * sizeof *c.times);
    memcpy(c.docs, r->docs, r->n * sizeof *c.docs);
    memcpy(c.lens, r->lens, r->n * sizeof *c.lens);
    arrays_unref(ra);
    *r = c;
    return true;
}

static bool rows_arrays(bucket_rows *out, size_t n)
{
    return rows_arrays_cap(out, n, n);
}

/* Hands the rows over to *out (one block for the three arrays, the documents' store as is). */
static bool rowbuf_finish(rowbuf *rb, bucket_rows *out)
{
    size_t n = rb->n;
    if (!rows_arrays(out, n))
        return false;
    for (size_t i = 0; i < n; i++) {
        out->times[i] = rb->times[i];
        out->docs[i] = rb->st->data + rb->offs[i];
        out->lens[i] = rb->lens[i];
    }
    out->store = rb->st;
    rb->st = NULL;
    rowbuf_free(rb);
    return true;
}

static void resume_free(struct bucket_resume *r);

void bucket_rows_clear(bucket_rows *r)
{
    if (!r)
        return;
    store_unref(r->store);
    arrays_unref(r->arrays);
    resume_free(r->resume);
    memset(r, 0, sizeof *r);
}

static bool is_number(bson_type_t t)
{
    return t == BSON_TYPE_INT32 || t == BSON_TYPE_INT64 || t == BSON_TYPE_DOUBLE || t == BSON_TYPE_DECIMAL128;
}

/* The server's safeNumberInt of a numeric element (decimal counts as not an integer here). */
static bool number_as_int64(const bson_iter_t *it, int64_t *v)
{
    switch (bson_iter_type(it)) {
    case BSON_TYPE_INT32:
        *v = bson_iter_int32(it);
        return true;
    case BSON_TYPE_INT64:
        *v = bson_iter_int64(it);
        return true;
    case BSON_TYPE_DOUBLE: {
        double d = bson_iter_double(it);
        if (!(d >= -9.0e15 && d <= 9.0e15) || d != (double)(int64_t)d)
            return false;
        *v = (int64_t)d;
        return true;
    }
    default:
        return false;
    }
}

/* Where the measurement's fixed fields come from. */
typedef struct {
    const bucket_spec *spec;
    bool has_meta;
    bson_iter_t meta;
} unpack_ctx;

static bool start_measurement(const unpack_ctx *c, bson_t *m, const bson_value_t *time)
{
    bson_reinit(m);
    if (!bson_append_value(m, c->spec->time_field, -1, time))
        return false;
    if (c->has_meta && !bson_append_iter(m, c->spec->meta_field, -1, &c->meta))
        return false;
    return true;
}

/* A version 1 key: the canonical decimal of a place (no sign, no leading zero but "0" itself). */
static bool v1_key(const char *key, size_t *out)
{
    size_t v = 0;
    if (key[0] == '\0' || (key[0] == '0' && key[1] != '\0'))
        return false;
    for (const char *p = key; *p; p++) {
        if (*p < '0' || *p > '9' || v > (SIZE_MAX - 9) / 10)
            return false;
        v = v * 10 + (size_t)(*p - '0');
    }
    *out = v;
    return true;
}

/* Version 1: data.<f> documents keyed by place. A measurement's place is its key's number: the time column's keys
 * are exactly "0" to "n-1", in any order. The server writes them in order, but applying an oplog entry again (an
 * insert of a key that is there already moves it to the end: document_diff_applier.cpp) may reorder them, and the
 * place, the row's key, must not move with it. Every other column's keys must be places the time column has. */
static bool unpack_v1(const unpack_ctx *c, const bson_iter_t *data, const bson_iter_t *timecol, rowbuf *rb, char *err,
                      size_t errlen)
{
    const char *tf = c->spec->time_field;
    if (!BSON_ITER_HOLDS_DOCUMENT(timecol)) {
        seterr(err, errlen, "version 1 bucket: data.%s is a %s, not a document", tf,
               bson_iter_type(timecol) == BSON_TYPE_BINARY ? "binary" : "non-document");
        return false;
    }
    size_t n = 0, ncols = 0;
    bson_iter_t it, ti;
    bson_iter_recurse(timecol, &ti);
    while (bson_iter_next(&ti))
        n++;
    it = *data;
    while (bson_iter_next(&it))
        ncols++;
    /* the time column and every other column by place: slot [col * n + place], col 0 the time column (values, not
     * iterators: libbson here aligns bson_iter_t to 128 bytes, which calloc does not) */
    bson_value_t *at = calloc((ncols + 1) * (n ? n : 1), sizeof *at);
    bool *has = calloc((ncols + 1) * (n ? n : 1), sizeof *has);
    const char **names = calloc(ncols + 1, sizeof *names);
    bson_t m = BSON_INITIALIZER;
    bool ok = false;
    size_t pos = 0;
    if (!at || !has || !names) {
        seterr(err, errlen, "out of memory unpacking a bucket");
        goto done;
    }
    bson_iter_recurse(timecol, &ti);
    while (bson_iter_next(&ti)) {
        const char *key = bson_iter_key(&ti);
        size_t p;
        if (!v1_key(key, &p) || p >= n || has[p]) {
            seterr(err, errlen, "version 1 bucket: data.%s has key '%s': its %zu keys are not the places 0 to %zu", tf,
                   key, n, n ? n - 1 : 0);
            goto done;
        }
        if (!BSON_ITER_HOLDS_DATE_TIME(&ti)) {
            seterr(err, errlen, "version 1 bucket: the time at place %zu (data.%s.%s) is not a date", p, tf, key);
            goto done;
        }
        at[p] = *bson_iter_value(&ti);
        has[p] = true;
    }
    size_t k = 1;
    it = *data;
    while (bson_iter_next(&it)) {
        const char *name = bson_iter_key(&it);
        if (strcmp(name, tf) == 0)
            continue;
        bson_iter_t ci;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &ci)) {
            seterr(err, errlen, "version 1 bucket: data.%s is not a document", name);
            goto done;
        }
        names[k] = name;
        while (bson_iter_next(&ci)) {
            size_t p;
            if (!v1_key(bson_iter_key(&ci), &p) || p >= n || has[k * n + p]) {
                seterr(err, errlen,
                       "version 1 bucket: data.%s has a value at key '%s' that matches no time place (a key the time "
                       "column lacks, or given twice)",
                       name, bson_iter_key(&ci));
                goto done;
            }
            at[k * n + p] = *bson_iter_value(&ci);
            has[k * n + p] = true;
        }
        k++;
    }
    ncols = k;
    for (pos = 0; pos < n; pos++) {
        if (!start_measurement(c, &m, &at[pos]))
            goto toolarge;
        for (size_t j = 1; j < ncols; j++)
            if (has[j * n + pos] && !bson_append_value(&m, names[j], -1, &at[j * n + pos]))
                goto toolarge;
        if (!rowbuf_add(rb, &m, at[pos].value.v_datetime)) {
            seterr(err, errlen, "out of memory unpacking a bucket");
            goto done;
        }
    }
    ok = true;
    goto done;
toolarge:
    seterr(err, errlen, "measurement %zu does not fit in a BSON document", pos);
done:
    bson_destroy(&m);
    free(at);
    free(has);
    free(names);
    return ok;
}

/* A column of a version 2/3 bucket: the BinData subtype 7 payload. */
static bool column_bytes(const bson_iter_t *it, const uint8_t **data, uint32_t *len, char *err, size_t errlen)
{
    bson_subtype_t st;
    if (!BSON_ITER_HOLDS_BINARY(it)) {
        seterr(err, errlen, "compressed bucket: data.%s is not BinData", bson_iter_key(it));
        return false;
    }
    bson_iter_binary(it, &st, len, data);
    if (st != BSON_SUBTYPE_COLUMN) {
        seterr(err, errlen, "compressed bucket: data.%s is BinData subtype %d, not 7 (BSONColumn)", bson_iter_key(it),
               (int)st);
        return false;
    }
    return true;
}

/* Version 2/3: one BSONColumn per field, all advanced together. */
static bool unpack_v2(const unpack_ctx *c, int64_t version, const bson_iter_t *data, const bson_iter_t *timecol,
                      bool has_count, int64_t count, rowbuf *rb, char *err, size_t errlen)
{
    const char *tf = c->spec->time_field;
    char cerr[BCOL_ERR_MAX];
    size_t ncols = 0;
    bson_iter_t it = *data;
    while (bson_iter_next(&it))
        ncols++;
    bcol_decoder **dec = calloc(ncols + 1, sizeof *dec); /* dec[0]: the time column */
    const char **names = calloc(ncols + 1, sizeof *names);
    bson_t m = BSON_INITIALIZER;
    bool ok = false;
    size_t k = 0, pos = 0;
    if (!dec || !names)
        goto nomem;
    const uint8_t *bytes;
    uint32_t blen;
    if (!column_bytes(timecol, &bytes, &blen, err, errlen))
        goto done;
    if (!(dec[0] = bcol_decoder_new(bytes, blen)))
        goto nomem;
    names[0] = tf;
    k = 1;
    it = *data;
    while (bson_iter_next(&it)) {
        if (strcmp(bson_iter_key(&it), tf) == 0)
            continue;
        if (!column_bytes(&it, &bytes, &blen, err, errlen))
            goto done;
        names[k] = bson_iter_key(&it);
        if (!(dec[k] = bcol_decoder_new(bytes, blen)))
            goto nomem;
        k++;
    }
    for (;; pos++) {
        bcol_elem te, e;
        bcol_status st = bcol_decoder_next(dec[0], &te, cerr, sizeof cerr);
        if (st == BCOL_ERROR) {
            seterr(err, errlen, "version %" PRId64 " bucket: data.%s: %s", version, tf, cerr);
            goto done;
        }
        if (st == BCOL_END)
            break;
        if (te.missing) {
            seterr(err, errlen, "version %" PRId64 " bucket: no time at position %zu (data.%s has a skip)", version,
                   pos, tf);
            goto done;
        }
        if (te.value.value_type != BSON_TYPE_DATE_TIME) {
            seterr(err, errlen, "version %" PRId64 " bucket: the time at position %zu (data.%s) is not a date", version,
                   pos, tf);
            goto done;
        }
        if (!start_measurement(c, &m, &te.value))
            goto toolarge;
        for (size_t j = 1; j < k; j++) {
            st = bcol_decoder_next(dec[j], &e, cerr, sizeof cerr);
            if (st == BCOL_ERROR) {
                seterr(err, errlen, "version %" PRId64 " bucket: data.%s: %s", version, names[j], cerr);
                goto done;
            }
            if (st == BCOL_END) {
                seterr(err, errlen, "version %" PRId64 " bucket: data.%s ends at position %zu, before data.%s", version,
                       names[j], pos, tf);
                goto done;
            }
            if (!e.missing && !bson_append_value(&m, names[j], -1, &e.value))
                goto toolarge;
        }
        if (!rowbuf_add(rb, &m, te.value.value.v_datetime))
            goto nomem;
    }
    for (size_t j = 1; j < k; j++) {
        bcol_elem e;
        bcol_status st = bcol_decoder_next(dec[j], &e, cerr, sizeof cerr);
        if (st == BCOL_ERROR) {
            seterr(err, errlen, "version %" PRId64 " bucket: data.%s: %s", version, names[j], cerr);
            goto done;
        }
        if (st != BCOL_END) {
            seterr(err, errlen, "version %" PRId64 " bucket: data.%s has more positions than data.%s (%zu)", version,
                   names[j], tf, pos);
            goto done;
        }
    }
    if (has_count && count != (int64_t)pos) {
        seterr(err, errlen, "version %" PRId64 " bucket: control.count is %" PRId64 " but data.%s has %zu positions",
               version, count, tf, pos);
        goto done;
    }
    ok = true;
    goto done;
toolarge:
    seterr(err, errlen, "measurement %zu does not fit in a BSON document", pos);
    goto done;
nomem:
    seterr(err, errlen, "out of memory unpacking a bucket");
done:
    if (dec)
        for (size_t j = 0; j < k; j++)
            bcol_decoder_destroy(dec[j]);
    free(dec);
    free(names);
    bson_destroy(&m);
    return ok;
}

/* A bucket's parts, as parse_bucket found them. */
typedef struct {
    unpack_ctx c;
    bson_t b;
    bson_iter_t dr, timecol;
    int64_t version; /* 0: the data region is empty (no measurement) */
    bool has_count;
    int64_t count;
} parsed_bucket;

/* The checks and parts every unpack shares (BucketUnpacker::reset). */
static bool parse_bucket(const uint8_t *bucket, size_t len, const bucket_spec *spec, bool validated, parsed_bucket *pb,
                         char *err, size_t errlen)
{
    memset(pb, 0, sizeof *pb);
    if (!spec || !spec->time_field) {
        seterr(err, errlen, "no time field given");
        return false;
    }
    size_t off = 0;
    if (!bucket || !bson_init_static(&pb->b, bucket, len)) {
        seterr(err, errlen, "bucket is not a BSON document (%zu bytes)", len);
        return false;
    }
    if (!validated && !spec->docs_valid && !bson_validate(&pb->b, BSON_VALIDATE_NONE, &off)) {
        seterr(err, errlen, "bucket is not valid BSON (at byte %zu)", off);
        return false;
    }
    if (bson_empty(&pb->b)) {
        seterr(err, errlen, "an empty bucket cannot be unpacked");
        return false;
    }
    unpack_ctx *c = &pb->c;
    c->spec = spec;
    bson_iter_t it, control, data;
    bool has_control = false, has_data = false;
    bson_iter_init(&it, &pb->b);
    while (bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        if (strcmp(key, "control") == 0 && !has_control) {
            control = it;
            has_control = true;
        } else if (strcmp(key, "data") == 0 && !has_data) {
            data = it;
            has_data = true;
        } else if (strcmp(key, "meta") == 0 && !c->has_meta) {
            c->meta = it;
            c->has_meta = true;
        }
    }
    if (!has_data || !BSON_ITER_HOLDS_DOCUMENT(&data)) {
        seterr(err, errlen, has_data ? "bucket's data is not a document" : "bucket has no data");
        return false;
    }
    if (c->has_meta) {
        if (!spec->meta_field) {
            seterr(err, errlen, "bucket has meta but the collection has no metaField");
            return false;
        }
        if (bson_iter_type(&c->meta) == BSON_TYPE_UNDEFINED) {
            seterr(err, errlen, "bucket's meta is of the deprecated type undefined");
            return false;
        }
    }
    bson_iter_recurse(&data, &pb->dr);
    bson_iter_t probe = pb->dr;
    if (!bson_iter_next(&probe))
        return true; /* an empty data region holds no measurement (BucketUnpacker::reset) */
    if (!has_control || !BSON_ITER_HOLDS_DOCUMENT(&control)) {
        seterr(err, errlen, has_control ? "bucket's control is not a document" : "bucket has no control");
        return false;
    }
    bson_iter_t ci, vi, cnt;
    bson_iter_recurse(&control, &ci);
    vi = ci;
    if (!bson_iter_find(&vi, "version") || !is_number(bson_iter_type(&vi))) {
        seterr(err, errlen, "bucket has no numeric control.version");
        return false;
    }
    int64_t version;
    if (!number_as_int64(&vi, &version)) {
        seterr(err, errlen, "bucket has a control.version that is not an integer");
        return false;
    }
    if (version < 1 || version > 3) {
        seterr(err, errlen, "bucket has unknown control.version %" PRId64, version);
        return false;
    }
    pb->timecol = pb->dr;
    if (!bson_iter_find(&pb->timecol, spec->time_field)) {
        seterr(err, errlen, "bucket has no time column data.%s", spec->time_field);
        return false;
    }
    if (version != 1) {
        cnt = ci;
        if (bson_iter_find(&cnt, "count") && is_number(bson_iter_type(&cnt))) {
            if (!number_as_int64(&cnt, &pb->count)) {
                seterr(err, errlen, "bucket's control.count is not an integer");
                return false;
            }
            pb->has_count = true;
        }
    }
    pb->version = version;
    return true;
}

bool bucket_unpack(const uint8_t *bucket, size_t len, const bucket_spec *spec, bucket_rows *out, char *err,
                   size_t errlen)
{
    memset(out, 0, sizeof *out);
    parsed_bucket pb;
    if (!parse_bucket(bucket, len, spec, false, &pb, err, errlen))
        return false;
    if (pb.version == 0)
        return true;
    rowbuf rb;
    memset(&rb, 0, sizeof rb);
    bool ok;
    if (pb.version == 1)
        ok = unpack_v1(&pb.c, &pb.dr, &pb.timecol, &rb, err, errlen);
    else
        ok = unpack_v2(&pb.c, pb.version, &pb.dr, &pb.timecol, pb.has_count, pb.count, &rb, err, errlen);
    if (ok && !rowbuf_finish(&rb, out)) {
        seterr(err, errlen, "out of memory unpacking a bucket");
        ok = false;
    }
    if (!ok) {
        rowbuf_free(&rb);
        bucket_rows_clear(out);
    }
    return ok;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Unpacking the next version of a bucket                                                                       */
/* ------------------------------------------------------------------------------------------------------------ */

/* Marks kept per column: the last block boundaries (an append rewrites the blocks of the open control byte, which
 * holds at most 16). When full, the older half goes. */
#define MARKS_KEPT 12

/* A column's value at one position: the bytes a BSON element holds after its field name, in the column's bytes
 * buffer (made by bson_append_value, so exactly what a measurement gets). */
typedef struct {
    uint32_t off, len;
    uint8_t type; /* 0: missing */
} colval;

typedef struct {
    /* what every step reads first, together at the start (bucket_rows_prefetch) */
    char *name;
    size_t nmarks;
    size_t len;  /* the column's positions */
    size_t base; /* position of vals[0] */
    colval *vals;
    uint8_t *bytes;
    size_t nvals, valcap;
    size_t nbytes, bytecap;
    bcol_mark marks[MARKS_KEPT]; /* ascending positions */
} colstate;

struct bucket_resume {
    size_t ncols; /* cols[0]: the time column, then the others in the data region's order */
    colstate *cols;
};

static void col_free(colstate *c)
{
    free(c->name);
    free(c->vals);
    free(c->bytes);
    memset(c, 0, sizeof *c);
}

static void resume_free(struct bucket_resume *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->ncols; i++)
        col_free(&r->cols[i]);
    free(r->cols);
    free(r);
}

static bool col_put(colstate *c, uint8_t type, const uint8_t *p, uint32_t len)
{
    if (c->nvals == c->valcap) {
        size_t nc = c->valcap ? c->valcap * 2 : 64;
        colval *v = realloc(c->vals, nc * sizeof *v);
        if (!v)
            return false;
        c->vals = v;
        c->valcap = nc;
    }
    if (c->bytecap - c->nbytes < len) {
        size_t nc = c->bytecap ? c->bytecap : 512;
        while (nc - c->nbytes < len)
            nc *= 2;
        uint8_t *b = realloc(c->bytes, nc);
        if (!b)
            return false;
        c->bytes = b;
        c->bytecap = nc;
    }
    if (len)
        memcpy(c->bytes + c->nbytes, p, len);
    c->vals[c->nvals++] = (colval){.off = (uint32_t)c->nbytes, .len = len, .type = type};
    c->nbytes += len;
    return true;
}

static void col_push_mark(colstate *c, const bcol_mark *m)
{
    if (c->nmarks == MARKS_KEPT) {
        memmove(&c->marks[0], &c->marks[MARKS_KEPT / 2], (MARKS_KEPT - MARKS_KEPT / 2) * sizeof c->marks[0]);
        c->nmarks -= MARKS_KEPT / 2;
    }
    c->marks[c->nmarks++] = *m;
}

/* Drops the values before the oldest mark kept (none are needed then), once they are many. */
static void col_trim(colstate *c)
{
    size_t keep_from = c->nmarks ? c->marks[0].pos : c->len;
    if (keep_from <= c->base || keep_from - c->base < 64 + c->nvals / 2)
        return;
    size_t drop = keep_from - c->base;
    if (drop > c->nvals)
        drop = c->nvals;
    size_t start = drop < c->nvals ? c->vals[drop].off : c->nbytes;
    if (c->nbytes > start)
        memmove(c->bytes, c->bytes + start, c->nbytes - start);
    c->nbytes -= start;
    if (c->nvals > drop)
        memmove(c->vals, c->vals + drop, (c->nvals - drop) * sizeof *c->vals);
    c->nvals -= drop;
    for (size_t i = 0; i < c->nvals; i++)
        c->vals[i].off -= (uint32_t)start;
    c->base += drop;
}

/* Forgets the values from position p on (p within the values held). */
static void col_cut(colstate *c, size_t p)
{
    size_t k = p - c->base;
    if (k < c->nvals) {
        c->nbytes = c->vals[k].off;
        c->nvals = k;
    }
}

static const colval *col_at(const colstate *c, size_t pos)
{
    return pos >= c->base && pos - c->base < c->nvals ? &c->vals[pos - c->base] : NULL;
}

/* The next bucket's columns: name, bytes. */
typedef struct {
    const char *name;
    const uint8_t *data;
    uint32_t len;
} colref;

/* The columns of a parsed version 2/3 bucket, the time column first; false when one is not a BSONColumn (the full
 * unpack says so). */
static bool list_columns(const parsed_bucket *pb, colref **cols, size_t *ncols)
{
    const char *tf = pb->c.spec->time_field;
    size_t n = 0;
    bson_iter_t it = pb->dr;
    while (bson_iter_next(&it))
        n++;
    colref *v = calloc(n + 1, sizeof *v);
    if (!v)
        return false;
    size_t k = 0;
    char e[8];
    if (!column_bytes(&pb->timecol, &v[0].data, &v[0].len, e, 0)) {
        free(v);
        return false;
    }
    v[k++].name = tf;
    it = pb->dr;
    while (bson_iter_next(&it)) {
        if (strcmp(bson_iter_key(&it), tf) == 0)
            continue;
        if (!column_bytes(&it, &v[k].data, &v[k].len, e, 0)) {
            free(v);
            return false;
        }
        v[k++].name = bson_iter_key(&it);
    }
    *cols = v;
    *ncols = k;
    return true;
}

/* Decodes the column from d (which stands at position c->base + c->nvals) to its end into c, keeping its marks.
 * False on a malformed column or out of memory. */
static bool col_decode(colstate *c, bcol_decoder *d)
{
    bson_t tmp = BSON_INITIALIZER;
    bool ok = false;
    for (;;) {
        bcol_elem e;
        bcol_status st = bcol_decoder_next(d, &e, NULL, 0);
        if (st == BCOL_ERROR)
            goto done;
        if (st == BCOL_END)
            break;
        uint8_t le[8];
        if (e.missing) {
            if (!col_put(c, 0, NULL, 0))
                goto done;
        } else if (e.value.value_type == BSON_TYPE_DATE_TIME || e.value.value_type == BSON_TYPE_INT64 ||
                   e.value.value_type == BSON_TYPE_DOUBLE) {
            /* the common fixed-size values, as bson_append_value writes them (little-endian) */
            uint64_t u;
            if (e.value.value_type == BSON_TYPE_DOUBLE)
                memcpy(&u, &e.value.value.v_double, 8);
            else if (e.value.value_type == BSON_TYPE_INT64)
                u = (uint64_t)e.value.value.v_int64;
            else
                u = (uint64_t)e.value.value.v_datetime;
            u = BSON_UINT64_TO_LE(u);
            memcpy(le, &u, 8);
            if (!col_put(c, (uint8_t)e.value.value_type, le, 8))
                goto done;
        } else if (e.value.value_type == BSON_TYPE_INT32) {
            uint32_t u = BSON_UINT32_TO_LE((uint32_t)e.value.value.v_int32);
            memcpy(le, &u, 4);
            if (!col_put(c, BSON_TYPE_INT32, le, 4))
                goto done;
        } else if (e.value.value_type == BSON_TYPE_BOOL) {
            le[0] = e.value.value.v_bool ? 1 : 0;
            if (!col_put(c, BSON_TYPE_BOOL, le, 1))
                goto done;
        } else {
            bson_reinit(&tmp);
            if (!bson_append_value(&tmp, "", 0, &e.value))
                goto done;
            /* the element: type, "" (one NUL), value; then the document's end byte */
            const uint8_t *p = bson_get_data(&tmp);
            if (!col_put(c, p[4], p + 6, tmp.len - 7))
                goto done;
        }
        bcol_mark m;
        if (bcol_decoder_mark(d, &m))
            col_push_mark(c, &m);
    }
    c->len = bcol_decoder_position(d);
    ok = true;
done:
    bson_destroy(&tmp);
    return ok;
}

/* Appends an element (type, name, value bytes) to a document being built in buf. */
static bool put_elem(uint8_t **buf, size_t *len, size_t *cap, uint8_t type, const char *name, const uint8_t *v,
                     uint32_t vlen)
{
    size_t nl = strlen(name), need = 1 + nl + 1 + vlen;
    if (*cap - *len < need) {
        size_t nc = *cap ? *cap : 256;
        while (nc - *len < need)
            nc *= 2;
        uint8_t *b = realloc(*buf, nc);
        if (!b)
            return false;
        *buf = b;
        *cap = nc;
    }
    uint8_t *p = *buf + *len;
    *p++ = type;
    memcpy(p, name, nl + 1);
    p += nl + 1;
    if (vlen)
        memcpy(p, v, vlen);
    *len += need;
    return true;
}

/* Where the new rows' documents go: prev's store while it has room (its bytes past its end are nobody's), else a
 * store of their own, into which the documents placed so far move. */
typedef struct {
    bucket_rows *out;
    const bucket_rows *prev;
    rowstore *st;
    bool own; /* st is out's own (not prev's) */
} placer;

static bool place_doc(placer *pl, size_t i, const uint8_t *doc, uint32_t dl)
{
    rowstore *st = pl->st;
    if (!st || st->cap - st->len < dl) {
        /* the places before move to the new store: in arrays of out's own, since prev's places point to its store */
        if (!arrays_own(pl->out))
            return false;
        size_t live = dl;
        for (size_t j = 0; j < i; j++)
            live += pl->out->lens[j];
        rowstore *ns = store_new(live * 2 + 4096);
        if (!ns)
            return false;
        for (size_t j = 0; j < i; j++) {
            memcpy(ns->data + ns->len, pl->out->docs[j], pl->out->lens[j]);
            pl->out->docs[j] = ns->data + ns->len;
            ns->len += pl->out->lens[j];
        }
        if (pl->own)
            store_unref(pl->st);
        pl->st = st = ns;
        pl->own = true;
    }
    memcpy(st->data + st->len, doc, dl);
    pl->out->docs[i] = st->data + st->len;
    pl->out->lens[i] = dl;
    st->len += dl;
    return true;
}

typedef enum { NEXT_OK, NEXT_FULL, NEXT_NOMEM } next_result;

/* The column-wise unpack of a version 2/3 bucket (pb), going on from prev where it can. NEXT_FULL: anything this
 * does not settle (a malformed bucket, a rewrite reaching back too far): the caller unpacks in full instead. */
static next_result unpack_next_v2(const parsed_bucket *pb, const parsed_bucket *ppb, bucket_rows *prev,
                                  bucket_rows *out)
{
    colref *cols = NULL, *pcols = NULL;
    size_t ncols = 0, npcols = 0;
    colval *tail = NULL;
    uint8_t *tailbytes = NULL;
    const struct bucket_resume *pr = prev ? prev->resume : NULL;
    struct bucket_resume *r = NULL;
    uint8_t *doc = NULL, *meta = NULL;
    size_t doccap = 0, metalen = 0;
    next_result res = NEXT_FULL;
    placer pl = {.out = out, .prev = prev};
    if (!list_columns(pb, &cols, &ncols))
        goto done;
    /* prev is usable when its columns are these, by name and order */
    if (pr && ppb && list_columns(ppb, &pcols, &npcols) && npcols == ncols && pr->ncols == ncols) {
        for (size_t j = 0; j < ncols && pr; j++)
            if (strcmp(cols[j].name, pcols[j].name) != 0 || strcmp(pr->cols[j].name, cols[j].name) != 0)
                pr = NULL;
    } else {
        pr = NULL;
    }
    size_t first = pr ? prev->n : 0; /* the first place that may differ from prev's */
    if (pr) {
        /* prev's resume state moves here: its columns' values are kept in place and go on from a mark */
        r = prev->resume;
        prev->resume = NULL;
    } else {
        if (!(r = calloc(1, sizeof *r)) || !(r->cols = calloc(ncols, sizeof *r->cols)))
            goto nomem;
        r->ncols = ncols;
    }
    for (size_t j = 0; j < ncols; j++) {
        colstate *c = &r->cols[j];
        if (!c->name && !(c->name = strdup(cols[j].name)))
            goto nomem;
        bcol_decoder *d = NULL;
        size_t from = 0, oldlen = c->len;
        for (size_t t = c->nmarks; pr && t-- > 0 && !d;) {
            bool nomem;
            const bcol_mark *m = &c->marks[t];
            if (m->pos < c->base)
                break;
            d = bcol_decoder_resume(cols[j].data, cols[j].len, pcols[j].data, pcols[j].len, m, &nomem);
            if (nomem)
                goto nomem;
            if (d) {
                from = m->pos;
                c->nmarks = t + 1; /* the marks up to it hold for the new bytes too */
            }
        }
        /* prev's values from `from` on, to compare with the new ones */
        size_t ntail = 0;
        if (d) {
            ntail = oldlen - from;
            if (!(tail = realloc(tail, (ntail + 1) * sizeof *tail)))
                goto nomem;
            size_t b0 = ntail ? c->vals[from - c->base].off : 0, nb = c->nbytes - b0;
            if (!(tailbytes = realloc(tailbytes, nb + 1)))
                goto nomem;
            for (size_t k = 0; k < ntail; k++) {
                tail[k] = c->vals[from - c->base + k];
                tail[k].off -= (uint32_t)b0;
            }
            if (nb)
                memcpy(tailbytes, c->bytes + b0, nb);
            col_cut(c, from);
        } else {
            c->nmarks = c->nvals = c->nbytes = c->base = 0;
            if (!(d = bcol_decoder_new(cols[j].data, cols[j].len)))
                goto nomem;
        }
        bool ok = col_decode(c, d);
        bcol_decoder_destroy(d);
        if (!ok)
            goto done;
        /* the first position whose value differs from prev's (those before `from` are the same bytes) */
        if (pr) {
            size_t p = from, end = c->len < oldlen ? c->len : oldlen;
            if (ntail == 0 && from == 0)
                end = 0; /* decoded afresh: nothing to compare with */
            for (; p < end; p++) {
                const colval *x = col_at(c, p), *y = &tail[p - from];
                if (x->type != y->type || x->len != y->len ||
                    (x->len && memcmp(c->bytes + x->off, tailbytes + y->off, x->len) != 0))
                    break;
            }
            if (p < first)
                first = p;
        }
    }
    size_t n = r->cols[0].len;
    for (size_t j = 1; j < ncols; j++)
        if (r->cols[j].len != n)
            goto done; /* a column of another length: the full unpack says which */
    if (pb->has_count && pb->count != (int64_t)n)
        goto done;
    if (first > n)
        first = n;
    /* the meta element's value, as bson_append_iter writes it; rows differ from prev's everywhere when it changed */
    if (pb->c.has_meta) {
        bson_t tmp = BSON_INITIALIZER;
        bool ok = bson_append_iter(&tmp, "", 0, &pb->c.meta);
        if (ok) {
            metalen = tmp.len - 7;
            meta = malloc(metalen + 2);
            if (meta)
                memcpy(meta, bson_get_data(&tmp) + 4, metalen + 2); /* type, "", value */
        }
        bson_destroy(&tmp);
        if (!ok)
            goto done;
        if (!meta)
            goto nomem;
    }
    if (pr) {
        bool same_meta = pb->c.has_meta == ppb->c.has_meta;
        if (same_meta && pb->c.has_meta) {
            bson_t tmp = BSON_INITIALIZER;
            same_meta = bson_append_iter(&tmp, "", 0, &ppb->c.meta) && tmp.len - 7 == metalen &&
                        memcmp(bson_get_data(&tmp) + 4, meta, metalen + 2) == 0;
            bson_destroy(&tmp);
        }
        if (!same_meta)
            first = 0;
    }
    /* every column's values from `first` on must be at hand */
    for (size_t j = 0; j < ncols; j++)
        if (first < n && first < r->cols[j].base)
            goto done;
    if (pr && first > 0 && first == prev->n && prev->arrays && ((rowarrays *)prev->arrays)->cap >= n) {
        /* places added only, and room for them: prev's arrays go on, shared (prev's places stay as they are) */
        out->arrays = prev->arrays;
        ((rowarrays *)out->arrays)->refs++;
        out->times = prev->times;
        out->docs = prev->docs;
        out->lens = prev->lens;
        out->n = n;
    } else {
        /* a bucket this follows is likely to grow: room for half as much again */
        if (!rows_arrays_cap(out, n, n + n / 2 + 8))
            goto nomem;
        if (pr && first > 0) {
            memcpy(out->times, prev->times, first * sizeof *out->times);
            memcpy(out->docs, prev->docs, first * sizeof *out->docs);
            memcpy(out->lens, prev->lens, first * sizeof *out->lens);
        }
    }
    if (pr && first > 0)
        pl.st = prev->store;
    out->same = pr ? first : 0;
    const bucket_spec *spec = pb->c.spec;
    for (size_t i = first; i < n; i++) {
        const colstate *tc = &r->cols[0];
        const colval *tv = col_at(tc, i);
        if (tv->type != BSON_TYPE_DATE_TIME)
            goto done; /* a skip or not a date: the full unpack says so */
        size_t dl = 4;
        if (!doccap) {
            doccap = 256;
            if (!(doc = malloc(doccap)))
                goto nomem;
        }
        if (!put_elem(&doc, &dl, &doccap, tv->type, spec->time_field, tc->bytes + tv->off, tv->len))
            goto nomem;
        if (meta && !put_elem(&doc, &dl, &doccap, meta[0], spec->meta_field, meta + 2, (uint32_t)metalen))
            goto nomem;
        for (size_t j = 1; j < ncols; j++) {
            const colstate *c = &r->cols[j];
            const colval *v = col_at(c, i);
            if (v->type && !put_elem(&doc, &dl, &doccap, v->type, c->name, c->bytes + v->off, v->len))
                goto nomem;
        }
        if (!put_elem(&doc, &dl, &doccap, 0, "", NULL, 0))
            goto nomem;
        dl -= 1; /* the end byte is one byte, not an element */
        if (dl > INT32_MAX)
            goto done;
        uint32_t l32 = (uint32_t)dl;
        doc[0] = (uint8_t)l32;
        doc[1] = (uint8_t)(l32 >> 8);
        doc[2] = (uint8_t)(l32 >> 16);
        doc[3] = (uint8_t)(l32 >> 24);
        int64_t t;
        memcpy(&t, tc->bytes + tv->off, 8);
        t = (int64_t)BSON_UINT64_FROM_LE((uint64_t)t);
        out->times[i] = t;
        if (pr && i < prev->n && !pl.own && pl.st == prev->store && prev->lens[i] == l32 &&
            memcmp(prev->docs[i], doc, l32) == 0) {
            out->docs[i] = prev->docs[i];
            out->lens[i] = l32;
        } else if (!place_doc(&pl, i, doc, l32)) {
            goto nomem;
        }
    }
    if (!pl.st && !(pl.st = store_new(16)))
        goto nomem;
    if (!pl.own)
        pl.st->refs++;
    out->store = pl.st;
    pl.st = NULL;
    for (size_t j = 0; j < ncols; j++)
        col_trim(&r->cols[j]);
    out->resume = r;
    r = NULL;
    res = NEXT_OK;
    goto done;
nomem:
    res = NEXT_NOMEM;
done:
    if (res != NEXT_OK) {
        if (pl.own)
            store_unref(pl.st);
        arrays_unref(out->arrays);
        memset(out, 0, sizeof *out);
    }
    resume_free(r);
    free(cols);
    free(pcols);
    free(tail);
    free(tailbytes);
    free(doc);
    free(meta);
    return res;
}

void bucket_rows_prefetch(const bucket_rows *r)
{
    if (!r || !r->resume)
        return;
    if (r->n > 0) {
        __builtin_prefetch(&r->times[r->n - 1]);
        __builtin_prefetch(&r->docs[r->n - 1]);
        __builtin_prefetch(&r->lens[r->n - 1]);
    }
    __builtin_prefetch(r->store);
    const struct bucket_resume *res = r->resume;
    /* first every column's head, all at once; then what the heads point to (the marks an append resumes from are
     * the last few, and their values) */
    for (size_t j = 0; j < res->ncols; j++)
        __builtin_prefetch(&res->cols[j]);
    for (size_t j = 0; j < res->ncols; j++) {
        const colstate *c = &res->cols[j];
        __builtin_prefetch(c->name);
        for (size_t t = c->nmarks, k = 0; t-- > 0 && k < 2; k++) {
            const bcol_mark *m = &c->marks[t];
            for (size_t b = 0; b < sizeof *m; b += 64)
                __builtin_prefetch((const char *)m + b);
        }
        if (c->nvals > 0) {
            size_t from = c->nvals > 8 ? c->nvals - 8 : 0;
            __builtin_prefetch(&c->vals[from]);
            __builtin_prefetch(&c->vals[c->nvals - 1]);
            __builtin_prefetch(c->bytes + c->vals[from].off);
        }
    }
}

bool bucket_unpack_next(const uint8_t *bucket, size_t len, const bucket_spec *spec, const uint8_t *prev_bucket,
                        size_t prev_len, bucket_rows *prev, bucket_rows *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    parsed_bucket pb, ppb;
    if (!parse_bucket(bucket, len, spec, false, &pb, err, errlen))
        return false;
    if (pb.version < 2)
        return bucket_unpack(bucket, len, spec, out, err, errlen);
    bool have_prev = prev && prev->resume && prev_bucket &&
                     parse_bucket(prev_bucket, prev_len, spec, true, &ppb, NULL, 0) && ppb.version >= 2;
    next_result r = unpack_next_v2(&pb, have_prev ? &ppb : NULL, have_prev ? prev : NULL, out);
    if (r == NEXT_FULL && have_prev)
        r = unpack_next_v2(&pb, NULL, NULL, out);
    if (r == NEXT_OK)
        return true;
    if (r == NEXT_NOMEM) {
        seterr(err, errlen, "out of memory unpacking a bucket");
        return false;
    }
    return bucket_unpack(bucket, len, spec, out, err, errlen);
}

/* ------------------------------------------------------------------------------------------------------------ */
/* $v:2 diffs                                                                                                    */
/* ------------------------------------------------------------------------------------------------------------ */

typedef enum { MOD_DELETE, MOD_UPDATE, MOD_INSERT, MOD_BINARY, MOD_SUBDIFF } mod_kind;

/* One field's modification at one level of an object diff (DocumentDiffTables in the server). */
typedef struct {
    const char *name; /* the field it changes */
    mod_kind kind;
    bson_iter_t val; /* the new element (u, i), the {o, d} entry (b) or the sub-diff (s) */
    size_t order;    /* position among the level's u and i entries, for the appends at the end */
    bool seen;       /* the document has this field */
} fieldmod;

typedef struct {
    bucket_diff_mode mode;
    char *err;
    size_t errlen;
    uint64_t padded; /* bytes of elements appended past arrays' ends, all arrays together (bounded: apply_array) */
} diffctx;

static int cmp_mod(const void *a, const void *b)
{
    return strcmp(((const fieldmod *)a)->name, ((const fieldmod *)b)->name);
}

static int cmp_order(const void *a, const void *b)
{
    size_t x = (*(const fieldmod *const *)a)->order, y = (*(const fieldmod *const *)b)->order;
    return x < y ? -1 : x > y;
}

/* A level's modifications are searched in order up to this many (a bucket's levels have a few), sorted beyond. */
#define MODS_LINEAR 8

static fieldmod *find_mod(fieldmod *mods, size_t n, const char *name)
{
    if (n <= MODS_LINEAR) {
        for (size_t i = 0; i < n; i++)
            if (strcmp(mods[i].name, name) == 0)
                return &mods[i];
        return NULL;
    }
    fieldmod key = {.name = name};
    return bsearch(&key, mods, n, sizeof *mods, cmp_mod);
}

static bool is_array_diff(const bson_iter_t *sub)
{
    bson_iter_t it;
    return BSON_ITER_HOLDS_DOCUMENT(sub) && bson_iter_recurse(sub, &it) && bson_iter_next(&it) &&
           strcmp(bson_iter_key(&it), "a") == 0;
}

static bool apply_object(diffctx *c, const bson_iter_t *pre, const bson_iter_t *diff, bson_t *out, const char *path,
                         int depth);
static bool apply_array(diffctx *c, const bson_iter_t *pre, const bson_iter_t *diff, bson_t *out, const char *path,
                        int depth);

/* path.name into buf (cut at n - 1 bytes): the path errors name. Made for every field a diff changes, so no printf. */
static void subpath(char *buf, size_t n, const char *path, const char *name)
{
    size_t pl = strlen(path), nl = strlen(name), k = 0;
    if (n == 0)
        return;
    size_t take = pl < n - 1 ? pl : n - 1;
    memcpy(buf, path, take);
    k = take;
    if (pl > 0 && k < n - 1)
        buf[k++] = '.';
    take = nl < n - 1 - k ? nl : n - 1 - k;
    memcpy(buf + k, name, take);
    buf[k + take] = '\0';
}

/* A binary diff {o: offset, d: BinData} applied to the binary element pre, appended to out as name. */
static bool apply_binary(diffctx *c, const bson_iter_t *pre, const fieldmod *m, bson_t *out, const char *path)
{
    bson_iter_t e, o, d;
    int64_t off = -1;
    bool has_o = false, has_d = false;
    if (!BSON_ITER_HOLDS_DOCUMENT(&m->val) || !bson_iter_recurse(&m->val, &e)) {
        seterr(c->err, c->errlen, "$v:2 diff: binary diff of %s is not {o, d}", path);
        return false;
    }
    while (bson_iter_next(&e)) {
        if (strcmp(bson_iter_key(&e), "o") == 0 && !has_o) {
            o = e;
            has_o = true;
        } else if (strcmp(bson_iter_key(&e), "d") == 0 && !has_d) {
            d = e;
            has_d = true;
        } else {
            seterr(c->err, c->errlen, "$v:2 diff: binary diff of %s has an unexpected field '%s'", path,
                   bson_iter_key(&e));
            return false;
        }
    }
    if (has_o && BSON_ITER_HOLDS_INT32(&o))
        off = bson_iter_int32(&o);
    else if (has_o && BSON_ITER_HOLDS_INT64(&o))
        off = bson_iter_int64(&o);
    if (!has_o || !has_d || off < 0 || !BSON_ITER_HOLDS_BINARY(&d)) {
        seterr(c->err, c->errlen, "$v:2 diff: binary diff of %s is not {o: offset >= 0, d: BinData}", path);
        return false;
    }
    bson_subtype_t pst, dst;
    uint32_t plen, dlen;
    const uint8_t *pdata, *ddata;
    bson_iter_binary(pre, &pst, &plen, &pdata);
    bson_iter_binary(&d, &dst, &dlen, &ddata);
    uint8_t *nb = NULL;
    size_t nlen = 0;
    char berr[BCOL_ERR_MAX];
    if (!bcol_apply_binary_diff(pdata, plen, (size_t)off, ddata, dlen, &nb, &nlen, berr, sizeof berr)) {
        seterr(c->err, c->errlen, "$v:2 diff: binary diff of %s: %s", path, berr);
        return false;
    }
    bool ok = nlen <= INT32_MAX && bson_append_binary(out, bson_iter_key(pre), -1, pst, nb, (uint32_t)nlen);
    free(nb);
    if (!ok)
        seterr(c->err, c->errlen, "$v:2 diff: %s does not fit in a BSON document", path);
    return ok;
}

/* Collects one object diff level's modifications (buildObjDiffTables). *mods is malloc'd. */
static bool build_tables(diffctx *c, const bson_iter_t *diff, const char *path, fieldmod **mods, size_t *nmods)
{
    bson_iter_t lvl, sec;
    size_t n = 0, cap = 0, order = 0;
    fieldmod *v = NULL;
    *mods = NULL;
    *nmods = 0;
    if (!bson_iter_recurse(diff, &lvl))
        goto bad;
    while (bson_iter_next(&lvl)) {
        const char *key = bson_iter_key(&lvl);
        mod_kind kind;
        bool section = key[0] != '\0' && key[1] == '\0';
        if (section && key[0] == 'd')
            kind = MOD_DELETE;
        else if (section && key[0] == 'u')
            kind = MOD_UPDATE;
        else if (section && key[0] == 'i')
            kind = MOD_INSERT;
        else if (section && key[0] == 'b')
            kind = MOD_BINARY;
        else if (key[0] == 's' && key[1] != '\0')
            kind = MOD_SUBDIFF;
        else {
            seterr(c->err, c->errlen, "$v:2 diff at %s: unknown section '%s'", *path ? path : "(top)", key);
            goto fail;
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(&lvl)) {
            seterr(c->err, c->errlen, "$v:2 diff at %s: section '%s' is not a document", *path ? path : "(top)", key);
            goto fail;
        }
        if (kind == MOD_SUBDIFF) {
            sec = lvl;
            if (n == cap) {
                cap = cap ? cap * 2 : 8;
                fieldmod *nv = realloc(v, cap * sizeof *nv);
                if (!nv)
                    goto nomem;
                v = nv;
            }
            v[n++] = (fieldmod){.name = key + 1, .kind = kind, .val = sec};
            continue;
        }
        if (!bson_iter_recurse(&lvl, &sec))
            goto bad;
        while (bson_iter_next(&sec)) {
            if (n == cap) {
                cap = cap ? cap * 2 : 8;
                fieldmod *nv = realloc(v, cap * sizeof *nv);
                if (!nv)
                    goto nomem;
                v = nv;
            }
            /* the server's fieldsToInsert lists the u entries before the i entries */
            size_t o = (kind == MOD_INSERT ? SIZE_MAX / 2 : 0) + order++;
            v[n++] = (fieldmod){.name = bson_iter_key(&sec), .kind = kind, .val = sec, .order = o};
        }
    }
    if (n > 1) {
        /* a name twice is the server's safeInsert refusal: uassert 4728000 */
        const char *dup = NULL;
        if (n <= MODS_LINEAR) {
            for (size_t i = 1; i < n && !dup; i++)
                for (size_t j = 0; j < i && !dup; j++)
                    if (strcmp(v[j].name, v[i].name) == 0)
                        dup = v[i].name;
        } else {
            qsort(v, n, sizeof *v, cmp_mod);
            for (size_t i = 1; i < n && !dup; i++)
                if (strcmp(v[i - 1].name, v[i].name) == 0)
                    dup = v[i].name;
        }
        if (dup) {
            seterr(c->err, c->errlen, "$v:2 diff at %s: duplicate field name in diff: %s", *path ? path : "(top)", dup);
            goto fail;
        }
    }
    *mods = v;
    *nmods = n;
    return true;
bad:
    seterr(c->err, c->errlen, "$v:2 diff at %s: not a valid document", *path ? path : "(top)");
    goto fail;
nomem:
    seterr(c->err, c->errlen, "out of memory applying a $v:2 diff");
fail:
    free(v);
    return false;
}

/* Applies the sub-diff m to the pre-image element pre (of the matching type), appended to out under key. */
static bool apply_sub(diffctx *c, const bson_iter_t *pre, const bson_iter_t *sub, const char *key, bson_t *out,
                      const char *path, int depth, bool *mismatch)
{
    bool arr = is_array_diff(sub);
    *mismatch = false;
    if ((arr && !BSON_ITER_HOLDS_ARRAY(pre)) || (!arr && !BSON_ITER_HOLDS_DOCUMENT(pre))) {
        *mismatch = true;
        return true;
    }
    bson_t child;
    bson_iter_t pi;
    if (!bson_iter_recurse(pre, &pi)) {
        seterr(c->err, c->errlen, "$v:2 diff: %s is not a valid document", path);
        return false;
    }
    if (arr ? !bson_append_array_begin(out, key, -1, &child) : !bson_append_document_begin(out, key, -1, &child)) {
        seterr(c->err, c->errlen, "$v:2 diff: %s does not fit in a BSON document", path);
        return false;
    }
    bool ok =
        arr ? apply_array(c, &pi, sub, &child, path, depth + 1) : apply_object(c, &pi, sub, &child, path, depth + 1);
    bool ended = arr ? bson_append_array_end(out, &child) : bson_append_document_end(out, &child);
    if (ok && !ended) {
        seterr(c->err, c->errlen, "$v:2 diff: %s does not fit in a BSON document", path);
        ok = false;
    }
    return ok;
}

/* applyDiffToObject: pre iterates the pre-image object (before its first element), diff holds the level's diff. */
static bool apply_object(diffctx *c, const bson_iter_t *pre, const bson_iter_t *diff, bson_t *out, const char *path,
                         int depth)
{
    if (depth > DIFF_MAX_DEPTH) {
        seterr(c->err, c->errlen, "$v:2 diff nests deeper than %d levels", DIFF_MAX_DEPTH);
        return false;
    }
    fieldmod *mods = NULL;
    size_t n = 0;
    fieldmod **tail = NULL;
    bool ok = false;
    char sp[512];
    if (!build_tables(c, diff, path, &mods, &n))
        return false;
    bson_iter_t it = *pre;
    while (bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        fieldmod *m = n ? find_mod(mods, n, key) : NULL;
        if (!m) {
            if (!bson_append_iter(out, NULL, 0, &it))
                goto toolarge;
            continue;
        }
        m->seen = true;
        subpath(sp, sizeof sp, path, key);
        switch (m->kind) {
        case MOD_DELETE:
            break;
        case MOD_UPDATE: /* in place */
            if (!bson_append_iter(out, key, -1, &m->val))
                goto toolarge;
            break;
        case MOD_INSERT: /* the pre-image's value goes; the new one is appended at the end */
            break;
        case MOD_BINARY:
            if (!BSON_ITER_HOLDS_BINARY(&it)) {
                if (c->mode == BUCKET_DIFF_STRICT) {
                    seterr(c->err, c->errlen, "$v:2 diff: binary diff of %s, which is not BinData", sp);
                    goto done;
                }
                if (!bson_append_null(out, key, -1))
                    goto toolarge;
                break;
            }
            if (!apply_binary(c, &it, m, out, sp))
                goto done;
            break;
        case MOD_SUBDIFF: {
            bool mismatch;
            if (!apply_sub(c, &it, &m->val, key, out, sp, depth, &mismatch))
                goto done;
            if (mismatch) {
                if (c->mode == BUCKET_DIFF_STRICT) {
                    seterr(c->err, c->errlen, "$v:2 diff: %s sub-diff of %s, which is %s",
                           is_array_diff(&m->val) ? "array" : "object", sp,
                           BSON_ITER_HOLDS_ARRAY(&it)      ? "an array"
                           : BSON_ITER_HOLDS_DOCUMENT(&it) ? "a document"
                                                           : "a scalar");
                    goto done;
                }
                /* the server: a type mismatch means a later entry rewrites the field; null meanwhile */
                if (!bson_append_null(out, key, -1))
                    goto toolarge;
            }
            break;
        }
        }
    }
    /* Fields the diff changes that the document lacks. */
    size_t ntail = 0;
    for (size_t i = 0; i < n; i++) {
        fieldmod *m = &mods[i];
        if (m->kind == MOD_UPDATE ? !m->seen : m->kind == MOD_INSERT)
            ntail++;
        else if (!m->seen && m->kind != MOD_UPDATE && c->mode == BUCKET_DIFF_STRICT) {
            subpath(sp, sizeof sp, path, m->name);
            seterr(c->err, c->errlen, "$v:2 diff: %s of %s, which the document lacks",
                   m->kind == MOD_DELETE   ? "delete"
                   : m->kind == MOD_BINARY ? "binary diff"
                                           : "sub-diff",
                   sp);
            goto done;
        }
    }
    /* Appended in the order of the server's fieldsToInsert: the u entries, then the i entries, each as in the
     * diff (an u of a field already written in place is skipped: fieldsToSkipInserting). */
    if (ntail) {
        tail = malloc(ntail * sizeof *tail);
        if (!tail) {
            seterr(c->err, c->errlen, "out of memory applying a $v:2 diff");
            goto done;
        }
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (mods[i].kind == MOD_UPDATE ? !mods[i].seen : mods[i].kind == MOD_INSERT)
                tail[k++] = &mods[i];
        qsort(tail, ntail, sizeof *tail, cmp_order);
        for (size_t i = 0; i < ntail; i++)
            if (!bson_append_iter(out, tail[i]->name, -1, &tail[i]->val))
                goto toolarge;
    }
    ok = true;
    goto done;
toolarge:
    seterr(c->err, c->errlen, "$v:2 diff: the document at %s outgrows a BSON document", *path ? path : "(top)");
done:
    free(tail);
    free(mods);
    return ok;
}

/* An array diff index: decimal digits only, fitting in 32 bits (the server's ArrayDiffReader). */
static bool parse_index(const char *s, uint32_t *idx)
{
    uint64_t v = 0;
    if (!*s)
        return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
        if (v > UINT32_MAX)
            return false;
    }
    *idx = (uint32_t)v;
    return true;
}

/* One array diff modification, read in the diff's order. */
typedef struct {
    bson_iter_t it;
    bool have;
    bool sub; /* s<idx> (else u<idx>) */
    uint32_t idx;
} arraymod;

static bool next_arraymod(diffctx *c, bson_iter_t *lvl, arraymod *m, const char *path)
{
    if (!bson_iter_next(lvl)) {
        m->have = false;
        return true;
    }
    const char *key = bson_iter_key(lvl);
    uint32_t prev = m->idx;
    bool had = m->have;
    if ((key[0] != 'u' && key[0] != 's') || !parse_index(key + 1, &m->idx)) {
        seterr(c->err, c->errlen, "$v:2 array diff at %s: unexpected field '%s'", path, key);
        return false;
    }
    m->sub = key[0] == 's';
    if (m->sub && !BSON_ITER_HOLDS_DOCUMENT(lvl)) {
        seterr(c->err, c->errlen, "$v:2 array diff at %s: '%s' is not a document", path, key);
        return false;
    }
    if (had && m->idx <= prev) {
        seterr(c->err, c->errlen, "$v:2 array diff at %s: index %" PRIu32 " after %" PRIu32 " (not ascending)", path,
               m->idx, prev);
        return false;
    }
    m->it = *lvl;
    m->have = true;
    return true;
}

/* appendNewValueForArrayIndex: pre is NULL past the pre-image's end. */
static bool array_value(diffctx *c, const bson_iter_t *pre, const arraymod *m, const char *key, bson_t *out,
                        const char *path, int depth)
{
    if (!m->sub)
        return bson_append_iter(out, key, -1, &m->it) ||
               (seterr(c->err, c->errlen, "$v:2 diff: %s outgrows a BSON document", path), false);
    bool mismatch = pre == NULL;
    if (pre && !apply_sub(c, pre, &m->it, key, out, path, depth, &mismatch))
        return false;
    if (!mismatch)
        return true;
    if (c->mode == BUCKET_DIFF_STRICT) {
        seterr(c->err, c->errlen, "$v:2 diff: sub-diff of %s, which %s", path,
               pre ? "is of another type" : "is past the array's end");
        return false;
    }
    return bson_append_null(out, key, -1) ||
           (seterr(c->err, c->errlen, "$v:2 diff: %s outgrows a BSON document", path), false);
}

/* applyDiffToArray. */
/* The bytes of the elements [a, b) of an array at their smallest (a null: type byte, decimal key, its NUL). */
static uint64_t null_bytes(uint64_t a, uint64_t b)
{
    uint64_t sum = 0, lo = 0, hi = 10;
    for (uint64_t digits = 1; lo < b; digits++, lo = hi, hi *= 10) {
        uint64_t s = a > lo ? a : lo, e = b < hi ? b : hi;
        if (s < e)
            sum += (e - s) * (2 + digits);
    }
    return sum;
}

static bool apply_array(diffctx *c, const bson_iter_t *pre, const bson_iter_t *diff, bson_t *out, const char *path,
                        int depth)
{
    if (depth > DIFF_MAX_DEPTH) {
        seterr(c->err, c->errlen, "$v:2 diff nests deeper than %d levels", DIFF_MAX_DEPTH);
        return false;
    }
    bson_iter_t lvl;
    if (!bson_iter_recurse(diff, &lvl) || !bson_iter_next(&lvl) || strcmp(bson_iter_key(&lvl), "a") != 0 ||
        !BSON_ITER_HOLDS_BOOL(&lvl) || !bson_iter_bool(&lvl)) {
        seterr(c->err, c->errlen, "$v:2 array diff at %s: must start with a: true", path);
        return false;
    }
    bool has_len = false;
    uint32_t newlen = 0;
    arraymod m = {.have = false};
    bson_iter_t peek = lvl;
    if (bson_iter_next(&peek) && strcmp(bson_iter_key(&peek), "l") == 0) {
        if (!BSON_ITER_HOLDS_INT32(&peek) || bson_iter_int32(&peek) < 0) {
            seterr(c->err, c->errlen, "$v:2 array diff at %s: l is not a non-negative int32", path);
            return false;
        }
        has_len = true;
        newlen = (uint32_t)bson_iter_int32(&peek);
        lvl = peek;
    }
    if (!next_arraymod(c, &lvl, &m, path))
        return false;
    char key[16], sp[512];
    bson_iter_t it = *pre;
    uint32_t idx = 0;
    bool more = bson_iter_next(&it);
    for (; more && (!has_len || idx < newlen); idx++, more = bson_iter_next(&it)) {
        snprintf(key, sizeof key, "%" PRIu32, idx);
        if (m.have && m.idx == idx) {
            snprintf(sp, sizeof sp, "%s.%s", path, key);
            if (!array_value(c, &it, &m, key, out, sp, depth) || !next_arraymod(c, &lvl, &m, path))
                return false;
        } else if (!bson_append_iter(out, key, -1, &it)) {
            seterr(c->err, c->errlen, "$v:2 diff: %s outgrows a BSON document", path);
            return false;
        }
    }
    /* Past the pre-image's end: the diff's values, null for the indexes it does not name. A length or an index far
     * past the end (l: 805306371 is 35 bytes of diff) would fill gigabytes of nulls: all arrays together may grow
     * only by what a document the server can hold (BSONObjMaxInternalSize, 16 MB + 16 KB) has room for, which no
     * diff the server logs passes. Each element checks room for all those still to come, so a huge one fails at once.
     */
    for (; (has_len && idx < newlen) || m.have; idx++) {
        uint64_t want = has_len ? newlen : (uint64_t)m.idx + 1;
        if (want > idx && c->padded + null_bytes(idx, want) > BUCKET_DIFF_MAX_DOC) {
            seterr(c->err, c->errlen,
                   "$v:2 array diff at %s: index %" PRIu64 " makes the document outgrow a BSON document", path,
                   want - 1);
            return false;
        }
        c->padded += null_bytes(idx, (uint64_t)idx + 1);
        if (has_len && idx >= newlen) {
            seterr(c->err, c->errlen, "$v:2 array diff at %s: index %" PRIu32 " is past the new length %" PRIu32, path,
                   m.idx, newlen);
            return false;
        }
        snprintf(key, sizeof key, "%" PRIu32, idx);
        if (m.have && m.idx == idx) {
            snprintf(sp, sizeof sp, "%s.%s", path, key);
            if (!array_value(c, NULL, &m, key, out, sp, depth) || !next_arraymod(c, &lvl, &m, path))
                return false;
        } else if (!bson_append_null(out, key, -1)) {
            seterr(c->err, c->errlen, "$v:2 diff: %s outgrows a BSON document", path);
            return false;
        }
    }
    return true;
}

bool bucket_apply_diff_ex(const uint8_t *doc, size_t len, const uint8_t *diff, size_t diff_len, bucket_diff_mode mode,
                          bson_t *out, char *err, size_t errlen)
{
    bson_init(out);
    bson_t pre, d;
    size_t off = 0;
    bool doc_valid = (mode & BUCKET_DIFF_DOC_VALID) != 0;
    mode = (bucket_diff_mode)(mode & ~BUCKET_DIFF_DOC_VALID);
    if (!doc || !bson_init_static(&pre, doc, len) || (!doc_valid && !bson_validate(&pre, BSON_VALIDATE_NONE, &off))) {
        seterr(err, errlen, "$v:2 diff: the document is not valid BSON (at byte %zu)", off);
        return false;
    }
    if (!diff || !bson_init_static(&d, diff, diff_len) || !bson_validate(&d, BSON_VALIDATE_NONE, &off)) {
        seterr(err, errlen, "$v:2 diff: the diff is not valid BSON (at byte %zu)", off);
        return false;
    }
    /* apply_object takes the diff level as an element: wrap the top-level diff as one. */
    bson_t holder = BSON_INITIALIZER;
    bson_iter_t hi, pi;
    diffctx c = {.mode = mode, .err = err, .errlen = errlen};
    bool ok = bson_append_document(&holder, "diff", 4, &d) && bson_iter_init_find(&hi, &holder, "diff") &&
              bson_iter_init(&pi, &pre);
    if (!ok)
        seterr(err, errlen, "out of memory applying a $v:2 diff");
    else
        ok = apply_object(&c, &pi, &hi, out, "", 0);
    bson_destroy(&holder);
    if (!ok) {
        bson_destroy(out);
        bson_init(out);
    }
    return ok;
}

bool bucket_apply_diff(const uint8_t *doc, size_t len, const uint8_t *diff, size_t diff_len, bson_t *out, char *err,
                       size_t errlen)
{
    return bucket_apply_diff_ex(doc, len, diff, diff_len, BUCKET_DIFF_STRICT, out, err, errlen);
}

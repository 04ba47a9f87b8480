/*
 * tsbucket.c — the time-series bucket catalog (see tsbucket.h), after the server's:
 *   - timeseries/bucket_catalog/bucket_catalog.cpp and bucket_catalog_internal.cpp (5.0: timeseries/bucket_catalog.cpp
 *     BucketCatalog::insert): a measurement goes to the open bucket of its collection and normalized meta value
 *     unless that bucket must roll over: it holds timeseriesBucketMaxCount measurements already, the measurement would
 *     take its size past timeseriesBucketMaxSize, or its time is before the bucket's (rounded) time or at least
 *     bucketMaxSpanSeconds after it (determineRolloverAction / _determineRolloverAction). A rolled-over bucket is
 *     closed and a new one allocated (allocateBucket), whose _id is generateBucketOID's: a fresh ObjectId whose
 *     timestamp is the measurement's time rounded down to the bucket rounding (roundTimestampToGranularity), and
 *     whose control.min time is that rounded time (allocateBucket: "Make sure we set the control.min time field to
 *     match the rounded _id timestamp": the MinMax is first updated with {<timeField>: roundedTime}).
 *   - write_batch.cpp / prepareWriteBatchForCommit: the measurements of one insert command that go to one bucket are
 *     one WriteBatch, committed as one write: the first batch of a bucket inserts it (min and max are MinMax::min()/
 *     max()), a later one updates it (MinMax::minUpdates()/maxUpdates(); the updated flags are cleared only there,
 *     so the first update also carries what the insert set).
 *   - timeseries/timeseries_write_util.cpp makeNewDocument / makeTimeseriesInsertDocument (5.0:
 *     commands/write_commands.cpp) for the new bucket {_id, control: {version: 1, min, max}, meta?, data: {<field>:
 *     {"0": v, ...}}}, and makeTimeseriesUpdateOpEntry for the append, a $v:2 diff
 *     {scontrol: {smin?, smax?}, sdata: {i?: {<new field>: {"<n>": v}}, s<field>: {i: {"<n>": v}}}}: fields first
 *     seen in this batch (newFieldNamesToBeInserted) are inserted whole under sdata.i, before the sub-diffs.
 *   - timeseries/minmax.cpp (5.0: the MinMax class in bucket_catalog.cpp): min and max per field, objects and arrays
 *     element-wise, values in BSON order; an update section `u` lists whatever changed since the last minUpdates
 *     (a new field too), sub-diffs `s<field>` follow for objects whose members changed, arrays as {a: true,
 *     u<i>: ..., s<i>: ...}.
 *   - per --oplog-format: 5.0 keeps version 1 buckets; 7.0 compresses a bucket closed with more than one measurement
 *     (write_ops_exec.cpp performTimeseriesBucketCompression, bucket_compression.cpp compressBucket), logged as a
 *     replacement (a transform update: update_oplog_entry::makeReplacementOplogEntry); 8.0 writes compressed buckets
 *     from the start (timeseries_write_util.cpp makeNewCompressedDocumentForWrite) and appends BSONColumn binary
 *     diffs (makeTimeseriesCompressedDiffUpdateOp / makeTimeseriesCompressedDiffEntry / makeBSONColumnDocDiff,
 *     the columns in tests/mongosim/bsoncolumn_enc.c).
 *   - deletes and updates of measurements (store.c store_ts_delete / store_ts_update): makeModificationOp rebuilds
 *     a bucket from its remaining measurements (ts_catalog_rebuild).
 *
 * NOTES (deviations, each documented in README.md):
 *   - The server builds data columns and sdata sub-diffs in a hash map (StringDataMap), so their order differs run to
 *     run (see the 5.0 sample vector: sts, smeasurement, s_id in varying order); mongosim writes fields in the order
 *     they were first seen. A field new to MinMax is placed at the end (the server may place it before fields the
 *     measurement skipped), so the stored min and max always equal the diff applied to the previous bucket.
 *   - The bucket size counted against timeseriesBucketMaxSize is the sum of the measurements' data elements (value
 *     plus the decimal index key), close to the server's calculateBucketSizeAndTimeRange.
 */
#include "tsbucket.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bsoncolumn_enc.h"
#include "update.h"

/* ---- MinMax ---- */

typedef enum { MM_UNSET, MM_VALUE, MM_OBJECT, MM_ARRAY } mm_type;

typedef struct {
    mm_type type;
    bool updated;
    bson_value_t v; /* MM_VALUE */
} mm_data;

typedef struct mm_node {
    char *name; /* NULL: an array element */
    mm_data min, max;
    struct mm_node **kids;
    size_t n, cap;
} mm_node;

static void mm_data_clear(mm_data *d)
{
    if (d->type == MM_VALUE)
        bson_value_destroy(&d->v);
    d->type = MM_UNSET;
}

static void mm_free(mm_node *nd)
{
    if (!nd)
        return;
    for (size_t i = 0; i < nd->n; i++)
        mm_free(nd->kids[i]);
    free(nd->kids);
    mm_data_clear(&nd->min);
    mm_data_clear(&nd->max);
    free(nd->name);
    free(nd);
}

static mm_node *mm_add(mm_node *parent, const char *name)
{
    mm_node *nd = calloc(1, sizeof *nd);
    if (!nd)
        abort();
    nd->name = name ? strdup(name) : NULL;
    if (parent->n == parent->cap) {
        parent->cap = parent->cap ? parent->cap * 2 : 8;
        mm_node **k = realloc(parent->kids, parent->cap * sizeof *k);
        if (!k)
            abort();
        parent->kids = k;
    }
    parent->kids[parent->n++] = nd;
    return nd;
}

/* The sign of (canonical type of elem) - (canonical type of a value of kind `kind`), by comparing elem with an empty
 * object or array (values of different canonical types compare by type: update_compare_values). */
static int type_cmp(const bson_iter_t *elem, mm_type kind)
{
    static const uint8_t empty[5] = {5, 0, 0, 0, 0};
    bson_value_t other = {0};
    other.value_type = kind == MM_ARRAY ? BSON_TYPE_ARRAY : BSON_TYPE_DOCUMENT;
    other.value.v_doc.data = (uint8_t *)empty;
    other.value.v_doc.data_len = 5;
    return update_compare_values(bson_iter_value((bson_iter_t *)elem), &other);
}

static mm_data *side(mm_node *nd, bool max)
{
    return max ? &nd->max : &nd->min;
}

/* _setTypeObject / _setTypeArray: a change of kind resets the members' data on that side. */
static void mm_set_kind(mm_node *nd, bool max, mm_type kind)
{
    mm_data *d = side(nd, max);
    if (d->type == kind)
        return;
    mm_data_clear(d);
    d->type = kind;
    d->updated = true;
    for (size_t i = 0; i < nd->n; i++) {
        mm_data *k = side(nd->kids[i], max);
        mm_data_clear(k);
        k->updated = false;
    }
}

static void mm_update(mm_node *nd, const bson_iter_t *elem, bool upd_min, bool upd_max);

/* _updateObj: each field of doc (but skip) into nd's members, found by name, new ones appended. */
static void mm_update_obj(mm_node *nd, const bson_iter_t *doc_it, bool upd_min, bool upd_max, const char *skip)
{
    bson_iter_t it;
    if (!bson_iter_recurse(doc_it, &it))
        return;
    size_t pos = 0;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (skip && strcmp(k, skip) == 0)
            continue;
        mm_node *kid = NULL;
        if (pos < nd->n && nd->kids[pos]->name && strcmp(nd->kids[pos]->name, k) == 0) {
            kid = nd->kids[pos];
        } else {
            for (size_t i = 0; i < nd->n && !kid; i++) {
                if (nd->kids[i]->name && strcmp(nd->kids[i]->name, k) == 0) {
                    kid = nd->kids[i];
                    pos = i;
                } else if (!nd->kids[i]->name) { /* claimArrayFieldNameForObject */
                    nd->kids[i]->name = strdup(k);
                    kid = nd->kids[i];
                    pos = i;
                }
            }
            if (!kid) {
                kid = mm_add(nd, k);
                pos = nd->n - 1;
            }
        }
        mm_update(kid, &it, upd_min, upd_max);
        pos++;
    }
}

static bool should_update_container(const mm_data *d, const bson_iter_t *elem, mm_type kind, bool max)
{
    mm_type other = kind == MM_OBJECT ? MM_ARRAY : MM_OBJECT;
    int c;
    if (d->type == kind || d->type == MM_UNSET)
        return true;
    if (d->type == other)
        c = type_cmp(elem, other);
    else
        c = update_compare_values(bson_iter_value((bson_iter_t *)elem), &d->v);
    return max ? c > 0 : c < 0;
}

static void mm_update(mm_node *nd, const bson_iter_t *elem, bool upd_min, bool upd_max)
{
    if (BSON_ITER_HOLDS_DOCUMENT(elem) || BSON_ITER_HOLDS_ARRAY(elem)) {
        mm_type kind = BSON_ITER_HOLDS_DOCUMENT(elem) ? MM_OBJECT : MM_ARRAY;
        bool umin = upd_min && should_update_container(&nd->min, elem, kind, false);
        bool umax = upd_max && should_update_container(&nd->max, elem, kind, true);
        if (umin)
            mm_set_kind(nd, false, kind);
        if (umax)
            mm_set_kind(nd, true, kind);
        if (!umin && !umax)
            return;
        if (kind == MM_OBJECT) {
            mm_update_obj(nd, elem, umin, umax, NULL);
        } else {
            bson_iter_t it;
            size_t pos = 0;
            bson_iter_recurse(elem, &it);
            while (bson_iter_next(&it)) {
                mm_node *kid = pos < nd->n ? nd->kids[pos] : mm_add(nd, NULL);
                mm_update(kid, &it, umin, umax);
                pos++;
            }
        }
        return;
    }
    for (int s = 0; s < 2; s++) {
        bool max = s == 1;
        if (!(max ? upd_max : upd_min))
            continue;
        mm_data *d = side(nd, max);
        int c = 0;
        bool set = false;
        if (d->type == MM_UNSET) {
            set = true;
        } else if (d->type == MM_OBJECT || d->type == MM_ARRAY) {
            c = type_cmp(elem, d->type);
            set = max ? c > 0 : c < 0;
        } else {
            c = update_compare_values(bson_iter_value((bson_iter_t *)elem), &d->v);
            set = max ? c > 0 : c < 0;
        }
        if (set) {
            mm_data_clear(d);
            d->type = MM_VALUE;
            bson_value_copy(bson_iter_value((bson_iter_t *)elem), &d->v);
            d->updated = true;
        }
    }
}

static void mm_append(const mm_node *nd, bson_t *b, bool max);

static void mm_append_one(const mm_node *kid, bson_t *b, const char *key, bool max)
{
    const mm_data *d = max ? &kid->max : &kid->min;
    bson_t sub;
    if (d->type == MM_VALUE) {
        bson_append_value(b, key, -1, &d->v);
    } else if (d->type == MM_OBJECT) {
        bson_append_document_begin(b, key, -1, &sub);
        mm_append(kid, &sub, max);
        bson_append_document_end(b, &sub);
    } else if (d->type == MM_ARRAY) {
        bson_append_array_begin(b, key, -1, &sub);
        mm_append(kid, &sub, max);
        bson_append_array_end(b, &sub);
    }
}

/* MinMax::_append: members of nd (an object or an array; arrays keyed 0, 1, ... over set members). */
static void mm_append(const mm_node *nd, bson_t *b, bool max)
{
    const mm_data *self = max ? &nd->max : &nd->min;
    size_t idx = 0;
    for (size_t i = 0; i < nd->n; i++) {
        const mm_data *d = max ? &nd->kids[i]->max : &nd->kids[i]->min;
        if (d->type == MM_UNSET)
            continue;
        char key[24];
        if (self->type == MM_ARRAY)
            snprintf(key, sizeof key, "%zu", idx++);
        mm_append_one(nd->kids[i], b, self->type == MM_ARRAY ? key : nd->kids[i]->name, max);
    }
}

static void mm_clear_updated(mm_node *nd, bool max)
{
    side(nd, max)->updated = false;
    for (size_t i = 0; i < nd->n; i++)
        mm_clear_updated(nd->kids[i], max);
}

/* MinMax::_appendUpdates: the $v:2 diff of nd's side since the last call; true when something was written. */
static bool mm_updates(mm_node *nd, bson_t *b, bool max)
{
    bool appended = false;
    if (side(nd, max)->type == MM_OBJECT) {
        bson_t u = BSON_INITIALIZER, subs = BSON_INITIALIZER;
        bool has_u = false;
        for (size_t i = 0; i < nd->n; i++) {
            mm_node *kid = nd->kids[i];
            mm_data *d = side(kid, max);
            if (d->updated) {
                mm_append_one(kid, &u, kid->name, max);
                mm_clear_updated(kid, max);
                appended = has_u = true;
            } else if (d->type == MM_OBJECT || d->type == MM_ARRAY) {
                bson_t sd = BSON_INITIALIZER;
                if (mm_updates(kid, &sd, max)) {
                    char *k = bson_strdup_printf("s%s", kid->name);
                    BSON_APPEND_DOCUMENT(&subs, k, &sd);
                    bson_free(k);
                    appended = true;
                }
                bson_destroy(&sd);
            }
        }
        if (has_u)
            BSON_APPEND_DOCUMENT(b, "u", &u);
        bson_concat(b, &subs); /* "Sub diffs are required to come last." */
        bson_destroy(&u);
        bson_destroy(&subs);
    } else {
        BSON_APPEND_BOOL(b, "a", true);
        for (size_t i = 0; i < nd->n; i++) {
            mm_node *kid = nd->kids[i];
            mm_data *d = side(kid, max);
            char key[32];
            if (d->updated) {
                snprintf(key, sizeof key, "u%zu", i);
                mm_append_one(kid, b, key, max);
                mm_clear_updated(kid, max);
                appended = true;
            } else if (d->type == MM_OBJECT || d->type == MM_ARRAY) {
                bson_t sd = BSON_INITIALIZER;
                if (mm_updates(kid, &sd, max)) {
                    snprintf(key, sizeof key, "s%zu", i);
                    BSON_APPEND_DOCUMENT(b, key, &sd);
                    appended = true;
                }
                bson_destroy(&sd);
            }
        }
    }
    return appended;
}

/* ---- the catalog ---- */

typedef struct {
    char *name;
    bson_t *col;  /* {"0": v, "1": v, ...}: the values by arrival index (a bson_t of its own: the array of
                   * columns is reallocated, and a bson_t must not move) */
    bcenc_t *enc; /* 8.0: the column's BSONColumnBuilder (values in bucket order), else NULL */
} ts_column;

typedef struct ts_bucket {
    uint8_t uuid[16];
    bson_t *meta_key; /* {"": normalized meta} or an empty document when there is none */
    bson_oid_t id;
    int64_t time_ms; /* the rounded time: control.min's time and the _id's timestamp */
    int32_t count;   /* measurements committed */
    int64_t size;
    int version;          /* control.version written: 1, or 2 / 3 (8.0: compressed sorted / unsorted) */
    bool archived;        /* 7.0 / 8.0: rolled over by a time before it, kept for measurements that fit it */
    int64_t last_time_ms; /* 8.0: the time of the last measurement appended to the columns */
    mm_node *mm;
    ts_column *cols;
    size_t ncols, capcols;
    bson_t *doc; /* the bucket as last written */
    bson_t **ms; /* its measurements (copies) in the order of its columns */
    size_t nms, capms;
    struct ts_bucket *next;
} ts_bucket;

/* A bucket the catalog wrote, with its measurements: how mongosim unpacks a compressed bucket for a delete or an
 * update (it has no BSONColumn decoder of its own); valid while the stored bucket is still this document. */
typedef struct ts_known {
    bson_oid_t id;
    bson_t *doc;
    bson_t **ms;
    size_t n;
    struct ts_known *next;
} ts_known;

struct ts_catalog {
    ts_bucket *open;
    ts_known *known;
};

ts_catalog *ts_catalog_new(void)
{
    ts_catalog *c = calloc(1, sizeof *c);
    if (!c)
        abort();
    return c;
}

static void bucket_free(ts_bucket *b)
{
    if (!b)
        return;
    bson_destroy(b->meta_key);
    mm_free(b->mm);
    for (size_t i = 0; i < b->ncols; i++) {
        free(b->cols[i].name);
        bson_destroy(b->cols[i].col);
        bcenc_free(b->cols[i].enc);
    }
    free(b->cols);
    if (b->doc)
        bson_destroy(b->doc);
    for (size_t i = 0; i < b->nms; i++)
        bson_destroy(b->ms[i]);
    free(b->ms);
    free(b);
}

static void known_free(ts_known *k)
{
    bson_destroy(k->doc);
    for (size_t i = 0; i < k->n; i++)
        bson_destroy(k->ms[i]);
    free(k->ms);
    free(k);
}

static ts_known *known_find(ts_catalog *cat, const bson_oid_t *id)
{
    for (ts_known *k = cat->known; k; k = k->next)
        if (bson_oid_equal(&k->id, id))
            return k;
    return NULL;
}

static void known_drop(ts_catalog *cat, const bson_oid_t *id)
{
    for (ts_known **p = &cat->known; *p; p = &(*p)->next) {
        if (bson_oid_equal(&(*p)->id, id)) {
            ts_known *k = *p;
            *p = k->next;
            known_free(k);
            return;
        }
    }
}

/* Records bucket id as doc holding ms[0..n) (copied). */
static void known_set(ts_catalog *cat, const bson_oid_t *id, const bson_t *doc, bson_t *const *ms, size_t n)
{
    known_drop(cat, id);
    ts_known *k = calloc(1, sizeof *k);
    if (!k)
        abort();
    k->id = *id;
    k->doc = bson_copy(doc);
    k->ms = malloc((n ? n : 1) * sizeof *k->ms);
    if (!k->ms)
        abort();
    for (size_t i = 0; i < n; i++)
        k->ms[i] = bson_copy(ms[i]);
    k->n = n;
    k->next = cat->known;
    cat->known = k;
}

static void bucket_push_ms(ts_bucket *b, const bson_t *m)
{
    if (b->nms == b->capms) {
        b->capms = b->capms ? b->capms * 2 : 16;
        bson_t **p = realloc(b->ms, b->capms * sizeof *p);
        if (!p)
            abort();
        b->ms = p;
    }
    b->ms[b->nms++] = bson_copy(m);
}

void ts_catalog_free(ts_catalog *cat)
{
    if (!cat)
        return;
    while (cat->open) {
        ts_bucket *n = cat->open->next;
        bucket_free(cat->open);
        cat->open = n;
    }
    while (cat->known) {
        ts_known *n = cat->known->next;
        known_free(cat->known);
        cat->known = n;
    }
    free(cat);
}

void ts_writes_free(ts_write *w, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (w[i].doc)
            bson_destroy(w[i].doc);
        if (w[i].o)
            bson_destroy(w[i].o);
        free(w[i].stmt_ids);
    }
    free(w);
}

static void unlink_bucket(ts_catalog *cat, ts_bucket *b)
{
    for (ts_bucket **p = &cat->open; *p; p = &(*p)->next) {
        if (*p == b) {
            *p = b->next;
            return;
        }
    }
}

/* Buckets closed at once by one command, compressed before its writes (7.0); more are left uncompressed, as the
 * server leaves a bucket whose compression fails. */
#define TS_MAX_PRE 64

typedef struct {
    const char *time_field, *meta_field;
    int64_t rounding, max_span;
} ts_opts;

/* timeseries_options.cpp getBucketRoundingSecondsFromGranularity: seconds 60, minutes 3600, hours 86400. */
static void parse_opts(const bson_t *ts, ts_opts *o)
{
    bson_iter_t it;
    const char *gran = NULL;
    memset(o, 0, sizeof *o);
    if (bson_iter_init(&it, ts)) {
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (strcmp(k, "timeField") == 0 && BSON_ITER_HOLDS_UTF8(&it))
                o->time_field = bson_iter_utf8(&it, NULL);
            else if (strcmp(k, "metaField") == 0 && BSON_ITER_HOLDS_UTF8(&it))
                o->meta_field = bson_iter_utf8(&it, NULL);
            else if (strcmp(k, "granularity") == 0 && BSON_ITER_HOLDS_UTF8(&it))
                gran = bson_iter_utf8(&it, NULL);
            else if (strcmp(k, "bucketRoundingSeconds") == 0)
                o->rounding = bson_iter_as_int64(&it);
            else if (strcmp(k, "bucketMaxSpanSeconds") == 0)
                o->max_span = bson_iter_as_int64(&it);
        }
    }
    if (gran)
        o->rounding = strcmp(gran, "hours") == 0 ? 86400 : strcmp(gran, "minutes") == 0 ? 3600 : 60;
    else if (o->rounding <= 0)
        o->rounding = 60;
    if (o->max_span <= 0)
        o->max_span = 3600; /* the default for granularity "seconds" (checkBucketingParameters) */
}

static void normalize_value(bson_t *b, const char *key, const bson_iter_t *v);

typedef struct {
    bson_iter_t it;
} sort_elem;

static int cmp_keys(const void *a, const void *b)
{
    return strcmp(bson_iter_key(&((const sort_elem *)a)->it), bson_iter_key(&((const sort_elem *)b)->it));
}

/* bucket_catalog_helpers.cpp normalizeMetadata / normalizeObject: object fields sorted by name, recursively. */
static void normalize_value(bson_t *b, const char *key, const bson_iter_t *v)
{
    bson_iter_t it;
    if (BSON_ITER_HOLDS_DOCUMENT(v)) {
        size_t n = 0, cap = 16;
        sort_elem *els = malloc(cap * sizeof *els);
        if (!els)
            abort();
        bson_iter_recurse(v, &it);
        while (bson_iter_next(&it)) {
            if (n == cap) {
                cap *= 2;
                sort_elem *p = realloc(els, cap * sizeof *els);
                if (!p)
                    abort();
                els = p;
            }
            els[n++].it = it;
        }
        if (n > 1)
            qsort(els, n, sizeof *els, cmp_keys);
        bson_t sub;
        bson_append_document_begin(b, key, -1, &sub);
        for (size_t i = 0; i < n; i++)
            normalize_value(&sub, bson_iter_key(&els[i].it), &els[i].it);
        bson_append_document_end(b, &sub);
        free(els);
    } else if (BSON_ITER_HOLDS_ARRAY(v)) {
        bson_t arr;
        bson_append_array_begin(b, key, -1, &arr);
        bson_iter_recurse(v, &it);
        while (bson_iter_next(&it))
            normalize_value(&arr, bson_iter_key(&it), &it);
        bson_append_array_end(b, &arr);
    } else {
        bson_append_iter(b, key, -1, v);
    }
}

static ts_column *column_of(ts_bucket *b, const char *name)
{
    for (size_t i = 0; i < b->ncols; i++)
        if (strcmp(b->cols[i].name, name) == 0)
            return &b->cols[i];
    return NULL;
}

static ts_column *column_add(ts_bucket *b, const char *name)
{
    if (b->ncols == b->capcols) {
        b->capcols = b->capcols ? b->capcols * 2 : 8;
        ts_column *c = realloc(b->cols, b->capcols * sizeof *c);
        if (!c)
            abort();
        b->cols = c;
    }
    ts_column *c = &b->cols[b->ncols++];
    c->name = strdup(name);
    c->col = bson_new();
    c->enc = NULL;
    return c;
}

static int digits(int32_t n)
{
    int d = 1;
    while (n >= 10) {
        n /= 10;
        d++;
    }
    return d;
}

/* The size a measurement adds to a bucket holding `count` measurements (see NOTES). */
static int64_t measurement_size(const bson_t *m, const char *meta, int32_t count)
{
    bson_iter_t it;
    int64_t size = 0;
    bson_iter_init(&it, m);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (meta && strcmp(k, meta) == 0)
            continue;
        size += (int64_t)(it.next_off - bson_iter_offset(&it)) - (int64_t)strlen(k) + digits(count);
    }
    return size;
}

/* The bucket document as it stands: {_id, control: {version: 1, min, max}, meta?, data}. */
static bson_t *bucket_doc(const ts_bucket *b, const bson_iter_t *meta)
{
    bson_t *d = bson_new(), control, sub, data;
    BSON_APPEND_OID(d, "_id", &b->id);
    BSON_APPEND_DOCUMENT_BEGIN(d, "control", &control);
    BSON_APPEND_INT32(&control, "version", 1); /* kTimeseriesControlUncompressedVersion */
    BSON_APPEND_DOCUMENT_BEGIN(&control, "min", &sub);
    mm_append(b->mm, &sub, false);
    bson_append_document_end(&control, &sub);
    BSON_APPEND_DOCUMENT_BEGIN(&control, "max", &sub);
    mm_append(b->mm, &sub, true);
    bson_append_document_end(&control, &sub);
    bson_append_document_end(d, &control);
    if (meta)
        bson_append_iter(d, "meta", 4, meta);
    BSON_APPEND_DOCUMENT_BEGIN(d, "data", &data);
    for (size_t i = 0; i < b->ncols; i++)
        BSON_APPEND_DOCUMENT(&data, b->cols[i].name, b->cols[i].col);
    bson_append_document_end(d, &data);
    return d;
}

/* ---- compression (bucket_compression.cpp compressBucket) ---- */

typedef struct {
    int32_t idx;
    int64_t t;
} ts_order;

static int cmp_order(const void *a, const void *b)
{
    const ts_order *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx; /* stable (the server's std::sort leaves ties unspecified) */
}

static ts_column *time_column(ts_bucket *b, const ts_opts *o)
{
    return column_of(b, o->time_field);
}

/* The arrival indexes 0..count-1 in time order. */
static ts_order *time_order(ts_bucket *b, const ts_opts *o)
{
    ts_order *ord = calloc((size_t)(b->count ? b->count : 1), sizeof *ord);
    if (!ord)
        abort();
    ts_column *tc = time_column(b, o);
    bson_iter_t it;
    int32_t n = 0;
    if (tc && bson_iter_init(&it, tc->col)) {
        while (bson_iter_next(&it) && n < b->count) {
            ord[n].idx = atoi(bson_iter_key(&it));
            ord[n].t = bson_iter_date_time(&it);
            n++;
        }
    }
    qsort(ord, (size_t)n, sizeof *ord, cmp_order);
    return ord;
}

/* A column's values (skips where a measurement lacks the field) in the order `ord` into a new encoder. */
static bcenc_t *encode_column(const ts_column *c, const ts_order *ord, int32_t n)
{
    bcenc_t *enc = bcenc_new();
    for (int32_t i = 0; i < n; i++) {
        char key[16];
        bson_iter_t it;
        snprintf(key, sizeof key, "%d", ord[i].idx);
        if (bson_iter_init_find(&it, c->col, key))
            bcenc_append_iter(enc, &it);
        else
            bcenc_skip(enc);
    }
    return enc;
}

static void append_column_binary(bson_t *data, const char *name, bcenc_t *enc)
{
    size_t len;
    uint8_t *bin = bcenc_finish(enc, &len);
    bson_append_binary(data, name, -1, BSON_SUBTYPE_COLUMN, bin, (uint32_t)len);
    free(bin);
}

/* The compressed bucket: {_id, control: {version, min, max, count}, meta?, data: {<time>: BinData 7, <field>:
 * BinData 7, ...}}: compressBucket keeps control's fields (version set to 2, kTimeseriesControlCompressedSorted-
 * Version, or 3 for an 8.0 bucket gone unsorted) and appends count; the other top-level fields follow as they were;
 * in data the time column comes first, then the others in the bucket's order. With b's encoders (8.0) the columns
 * are theirs; otherwise every column is encoded anew in time order (compressBucket sorts the measurements by time). */
static bson_t *compressed_doc(ts_bucket *b, const ts_opts *o, int version)
{
    bson_t *d = bson_new(), control, sub, data;
    BSON_APPEND_OID(d, "_id", &b->id);
    BSON_APPEND_DOCUMENT_BEGIN(d, "control", &control);
    BSON_APPEND_INT32(&control, "version", version);
    BSON_APPEND_DOCUMENT_BEGIN(&control, "min", &sub);
    mm_append(b->mm, &sub, false);
    bson_append_document_end(&control, &sub);
    BSON_APPEND_DOCUMENT_BEGIN(&control, "max", &sub);
    mm_append(b->mm, &sub, true);
    bson_append_document_end(&control, &sub);
    BSON_APPEND_INT32(&control, "count", b->count);
    bson_append_document_end(d, &control);
    if (!bson_empty(b->meta_key)) {
        bson_iter_t mit;
        bson_iter_init(&mit, b->meta_key);
        bson_iter_next(&mit);
        bson_append_iter(d, "meta", 4, &mit);
    }
    BSON_APPEND_DOCUMENT_BEGIN(d, "data", &data);
    ts_order *ord = NULL;
    ts_column *tc = time_column(b, o);
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < b->ncols; i++) {
            ts_column *c = &b->cols[i];
            if ((pass == 0) != (c == tc))
                continue;
            if (c->enc) {
                append_column_binary(&data, c->name, c->enc);
            } else {
                if (!ord)
                    ord = time_order(b, o);
                bcenc_t *enc = encode_column(c, ord, b->count);
                append_column_binary(&data, c->name, enc);
                bcenc_free(enc);
            }
        }
    }
    free(ord);
    bson_append_document_end(d, &data);
    return d;
}

/* 8.0: the bucket's columns become encoders holding its measurements in time order, their intermediate() state at
 * the binaries just written (the next intermediate() is the diff against them). */
static void start_encoders(ts_bucket *b, const ts_opts *o)
{
    ts_order *ord = time_order(b, o);
    for (size_t i = 0; i < b->ncols; i++) {
        size_t off, dlen;
        b->cols[i].enc = encode_column(&b->cols[i], ord, b->count);
        free(bcenc_intermediate(b->cols[i].enc, &off, &dlen));
    }
    b->last_time_ms = b->count ? ord[b->count - 1].t : 0;
    free(ord);
}

/* The bucket's measurement list in time order (as compressBucket sorts them), from arrival order. */
static void reorder_by_time(ts_bucket *b, const ts_opts *o)
{
    ts_order *ord = time_order(b, o);
    bson_t **sorted = malloc((b->nms ? b->nms : 1) * sizeof *sorted);
    if (!sorted)
        abort();
    for (size_t i = 0; i < b->nms; i++)
        sorted[i] = b->ms[ord[i].idx];
    free(b->ms);
    b->ms = sorted;
    b->capms = b->nms;
    free(ord);
}

static ts_bucket *find_open(ts_catalog *cat, const uint8_t uuid[16], const bson_t *meta_key, ts_lookup_fn lookup,
                            void *lctx)
{
    for (ts_bucket *b = cat->open; b; b = b->next) {
        if (b->archived || memcmp(b->uuid, uuid, 16) != 0 || !bson_equal(b->meta_key, meta_key))
            continue;
        if (b->count == 0)
            return b; /* opened by this command, not written yet */
        const bson_t *cur = lookup(lctx, &b->id);
        if (!cur || !bson_equal(cur, b->doc)) {
            /* Gone or written by someone else: the server clears such a bucket from its catalog
             * (bucket_catalog.cpp clear / directWriteStart). */
            unlink_bucket(cat, b);
            bucket_free(b);
            return NULL;
        }
        return b;
    }
    return NULL;
}

/* One batch: the measurements of this command bound for one bucket. */
typedef struct {
    ts_bucket *b;
    bool is_new;
    int32_t prev_count; /* numPreviouslyCommittedMeasurements */
    size_t *idx;
    size_t n, cap;
    bson_iter_t meta;
    bool has_meta;
} ts_batch;

static ts_batch *batch_for(ts_batch **bs, size_t *nb, size_t *capb, ts_bucket *b)
{
    for (size_t i = 0; i < *nb; i++)
        if ((*bs)[i].b == b)
            return &(*bs)[i];
    if (*nb == *capb) {
        *capb = *capb ? *capb * 2 : 8;
        ts_batch *p = realloc(*bs, *capb * sizeof *p);
        if (!p)
            abort();
        *bs = p;
    }
    ts_batch *t = &(*bs)[(*nb)++];
    memset(t, 0, sizeof *t);
    t->b = b;
    t->prev_count = b->count;
    t->is_new = b->count == 0;
    return t;
}

static void batch_push(ts_batch *t, size_t i)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 8;
        size_t *p = realloc(t->idx, t->cap * sizeof *p);
        if (!p)
            abort();
        t->idx = p;
    }
    t->idx[t->n++] = i;
}

/* MinMax::update(doc, metaField) with one measurement. */
static void minmax_add(ts_bucket *b, const bson_t *m, const char *meta_field)
{
    bson_t wrap = BSON_INITIALIZER;
    bson_iter_t mit;
    BSON_APPEND_DOCUMENT(&wrap, "", m);
    bson_iter_init(&mit, &wrap);
    bson_iter_next(&mit);
    mm_update_obj(b->mm, &mit, true, true, meta_field);
    bson_destroy(&wrap);
}

/* Adds m's fields (but the meta) to the bucket's by-index columns at index b->count; a field new to the bucket gets a
 * column (with an encoder holding b->count skips when the bucket has encoders: measurement_map.cpp insertOne). */
static void columns_add(ts_bucket *b, const bson_t *m, const char *meta_field, bool encoders)
{
    bson_iter_t it;
    char key[16];
    bucket_push_ms(b, m);
    snprintf(key, sizeof key, "%d", b->count);
    bson_iter_init(&it, m);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (meta_field && strcmp(k, meta_field) == 0)
            continue;
        ts_column *c = column_of(b, k);
        if (!c) {
            c = column_add(b, k);
            if (encoders) {
                c->enc = bcenc_new();
                for (int32_t i = 0; i < b->count; i++)
                    bcenc_skip(c->enc);
            }
        }
        bson_append_iter(c->col, key, -1, &it);
        if (c->enc)
            bcenc_append_iter(c->enc, &it);
    }
    if (!encoders)
        return;
    for (size_t i = 0; i < b->ncols; i++) /* the columns m lacks get a skip */
        if (bcenc_count(b->cols[i].enc) == (size_t)b->count)
            bcenc_skip(b->cols[i].enc);
}

/* MinMax updates into scontrol's smin / smax (makeTimeseriesUpdateOpEntry, makeTimeseriesCompressedDiffEntry). */
static void append_minmax_diffs(ts_bucket *b, bson_t *ctl)
{
    bson_t smin = BSON_INITIALIZER, smax = BSON_INITIALIZER;
    if (mm_updates(b->mm, &smin, false))
        BSON_APPEND_DOCUMENT(ctl, "smin", &smin);
    if (mm_updates(b->mm, &smax, true))
        BSON_APPEND_DOCUMENT(ctl, "smax", &smax);
    bson_destroy(&smin);
    bson_destroy(&smax);
}

/* The batch's indexes sorted by measurement time (sortMeasurementsOnTimeField), stably. */
static void sort_batch(ts_batch *t, const bson_t *const *ms, const ts_opts *o, ts_order *ord)
{
    for (size_t j = 0; j < t->n; j++) {
        bson_iter_t it;
        ord[j].idx = (int32_t)t->idx[j];
        ord[j].t = bson_iter_init_find(&it, ms[t->idx[j]], o->time_field) ? bson_iter_date_time(&it) : 0;
    }
    qsort(ord, t->n, sizeof *ord, cmp_order);
}

/* 8.0: appends a batch to a compressed bucket (makeTimeseriesCompressedDiffUpdateOp): the measurements in time
 * order into the column builders, then {$v: 2, diff: {scontrol: {u: {count[, version: 3]}, smin?, smax?}, sdata:
 * {i?: {<new field>: BinData 7}, b?: {<field>: {o: <offset>, d: BinData 0}}}}} from each builder's intermediate()
 * (makeTimeseriesCompressedDiffEntry, makeBSONColumnDocDiff). Version 3 when the batch's first measurement is before
 * the bucket's last one (kTimeseriesControlCompressedUnsortedVersion). */
static bson_t *append_compressed(ts_batch *t, const bson_t *const *ms, const ts_opts *o)
{
    ts_bucket *b = t->b;
    ts_order *ord = calloc(t->n, sizeof *ord);
    if (!ord)
        abort();
    sort_batch(t, ms, o, ord);
    bool to_unsorted = b->version == 2 && ord[0].t < b->last_time_ms;
    if (to_unsorted)
        b->version = 3;
    size_t first_new_col = b->ncols;
    for (size_t j = 0; j < t->n; j++) {
        const bson_t *m = ms[ord[j].idx];
        columns_add(b, m, o->meta_field, true);
        minmax_add(b, m, o->meta_field);
        b->count++;
        b->last_time_ms = ord[j].t;
    }
    free(ord);
    bson_t *op = bson_new(), diff, ctl, u, dat, ins = BSON_INITIALIZER, bin = BSON_INITIALIZER, col;
    BSON_APPEND_INT32(op, "$v", 2);
    BSON_APPEND_DOCUMENT_BEGIN(op, "diff", &diff);
    BSON_APPEND_DOCUMENT_BEGIN(&diff, "scontrol", &ctl);
    BSON_APPEND_DOCUMENT_BEGIN(&ctl, "u", &u);
    BSON_APPEND_INT32(&u, "count", b->count);
    if (to_unsorted)
        BSON_APPEND_INT32(&u, "version", 3);
    bson_append_document_end(&ctl, &u);
    append_minmax_diffs(b, &ctl);
    bson_append_document_end(&diff, &ctl);
    for (size_t i = 0; i < b->ncols; i++) {
        size_t off, dlen;
        uint8_t *d = bcenc_intermediate(b->cols[i].enc, &off, &dlen);
        if (i >= first_new_col) {
            bson_append_binary(&ins, b->cols[i].name, -1, BSON_SUBTYPE_COLUMN, d, (uint32_t)dlen);
        } else {
            bson_append_document_begin(&bin, b->cols[i].name, -1, &col);
            BSON_APPEND_INT32(&col, "o", (int32_t)off);
            bson_append_binary(&col, "d", 1, BSON_SUBTYPE_BINARY, d, (uint32_t)dlen);
            bson_append_document_end(&bin, &col);
        }
        free(d);
    }
    BSON_APPEND_DOCUMENT_BEGIN(&diff, "sdata", &dat);
    if (!bson_empty(&ins))
        BSON_APPEND_DOCUMENT(&dat, "i", &ins);
    if (!bson_empty(&bin))
        BSON_APPEND_DOCUMENT(&dat, "b", &bin);
    bson_append_document_end(&diff, &dat);
    bson_append_document_end(op, &diff);
    bson_destroy(&ins);
    bson_destroy(&bin);
    return op;
}

/* 5.0 / 7.0 (version 1): appends a batch; the $v:2 diff of makeTimeseriesUpdateOpEntry. */
static bson_t *append_v1(ts_batch *t, const bson_t *const *ms, const ts_opts *o)
{
    ts_bucket *b = t->b;
    size_t first_new_col = b->ncols;
    for (size_t j = 0; j < t->n; j++) {
        const bson_t *m = ms[t->idx[j]];
        columns_add(b, m, o->meta_field, false);
        minmax_add(b, m, o->meta_field);
        b->count++;
    }
    bson_t *op = bson_new(), diff, dat, sub, new_fields = BSON_INITIALIZER;
    bson_t probe = BSON_INITIALIZER;
    bool has_mm;
    BSON_APPEND_INT32(op, "$v", 2);
    BSON_APPEND_DOCUMENT_BEGIN(op, "diff", &diff);
    append_minmax_diffs(b, &probe);
    has_mm = !bson_empty(&probe);
    if (has_mm)
        BSON_APPEND_DOCUMENT(&diff, "scontrol", &probe);
    bson_destroy(&probe);
    BSON_APPEND_DOCUMENT_BEGIN(&diff, "sdata", &dat);
    for (size_t i = first_new_col; i < b->ncols; i++)
        BSON_APPEND_DOCUMENT(&new_fields, b->cols[i].name, b->cols[i].col);
    if (first_new_col < b->ncols)
        BSON_APPEND_DOCUMENT(&dat, "i", &new_fields);
    for (size_t i = 0; i < first_new_col; i++) {
        bson_t part = BSON_INITIALIZER;
        bson_iter_t it;
        bson_iter_init(&it, b->cols[i].col);
        while (bson_iter_next(&it))
            if (atoi(bson_iter_key(&it)) >= t->prev_count)
                bson_append_iter(&part, NULL, 0, &it);
        if (!bson_empty(&part)) {
            char *k = bson_strdup_printf("s%s", b->cols[i].name);
            BSON_APPEND_DOCUMENT_BEGIN(&dat, k, &sub);
            BSON_APPEND_DOCUMENT(&sub, "i", &part);
            bson_append_document_end(&dat, &sub);
            bson_free(k);
        }
        bson_destroy(&part);
    }
    bson_append_document_end(&diff, &dat);
    bson_append_document_end(op, &diff);
    bson_destroy(&new_fields);
    return op;
}

/* Commits one batch: a new bucket's insert or an open bucket's update. */
static void commit_batch(ts_catalog *cat, ts_batch *t, const bson_t *const *ms, const ts_opts *o, sim_oplog_format fmt,
                         ts_write *w)
{
    ts_bucket *b = t->b;
    bool compressed = fmt == SIM_FORMAT_80;
    memset(w, 0, sizeof *w);
    w->id = b->id;
    w->stmt_ids = malloc(t->n * sizeof *w->stmt_ids);
    if (!w->stmt_ids)
        abort();
    for (size_t j = 0; j < t->n; j++)
        w->stmt_ids[j] = (int32_t)t->idx[j];
    w->nstmt = t->n;
    if (t->is_new) {
        /* makeNewDocument (5.0 / 7.0); 8.0: makeNewCompressedDocumentForWrite, that document compressed. */
        for (size_t j = 0; j < t->n; j++) {
            columns_add(b, ms[t->idx[j]], o->meta_field, false);
            minmax_add(b, ms[t->idx[j]], o->meta_field);
            b->count++;
        }
        w->insert = true;
        if (compressed) {
            w->doc = compressed_doc(b, o, 2);
            start_encoders(b, o);
            reorder_by_time(b, o);
            b->version = 2;
        } else {
            w->doc = bucket_doc(b, t->has_meta ? &t->meta : NULL);
            b->version = 1;
        }
    } else if (compressed) {
        w->o = append_compressed(t, ms, o);
        w->doc = compressed_doc(b, o, b->version);
    } else {
        w->o = append_v1(t, ms, o);
        w->doc = bucket_doc(b, t->has_meta ? &t->meta : NULL);
    }
    if (b->doc)
        bson_destroy(b->doc);
    b->doc = bson_copy(w->doc);
    known_set(cat, &b->id, b->doc, b->ms, b->nms);
}

/* 7.0: a closed bucket holding more than one measurement is rewritten compressed (write_ops_exec.cpp
 * performTimeseriesBucketCompression: "Buckets with just a single measurement is not worth compressing"). The
 * update is a transform (makeTimeseriesCompressionOpEntry / makeTimeseriesTransformationOpEntry), logged as a
 * replacement: o is the whole compressed bucket (update_oplog_entry::makeReplacementOplogEntry, as
 * updateTimeseriesDocument and ObjectTransformExecutor log it). Its stmtId is kUninitializedStmtId (no stmt_ids):
 * it is no statement of the user's insert. */
static bool compress_closed(ts_catalog *cat, ts_bucket *b, const ts_opts *o, ts_write *w)
{
    if (b->count <= 1 || b->version != 1)
        return false;
    memset(w, 0, sizeof *w);
    w->id = b->id;
    w->doc = compressed_doc(b, o, 2);
    w->o = bson_copy(w->doc);
    reorder_by_time(b, o);
    known_set(cat, &b->id, w->doc, b->ms, b->nms);
    return true;
}

/* What this command has placed in bucket b so far: measurements and their size. */
static void pending_of(const ts_batch *bs, size_t nb, const ts_bucket *b, const bson_t *const *ms, const ts_opts *o,
                       int32_t *count, int64_t *size)
{
    *count = 0;
    *size = 0;
    for (size_t k = 0; k < nb; k++) {
        if (bs[k].b != b)
            continue;
        *count = (int32_t)bs[k].n;
        for (size_t j = 0; j < bs[k].n; j++)
            *size += measurement_size(ms[bs[k].idx[j]], o->meta_field, b->count + (int32_t)j);
    }
}

/* An archived bucket of the series (same collection and meta) whose time range holds t and that has room for m
 * (useAlternateBucket), or NULL. One no longer stored as written is forgotten. */
static ts_bucket *find_alternate(ts_catalog *cat, const ts_batch *bs, size_t nb, const uint8_t uuid[16],
                                 const bson_t *meta_key, const bson_t *const *ms, size_t i, int64_t t, const ts_opts *o,
                                 int32_t max_count, ts_lookup_fn lookup, void *lctx)
{
    for (ts_bucket *b = cat->open; b; b = b->next) {
        if (!b->archived || memcmp(b->uuid, uuid, 16) != 0 || !bson_equal(b->meta_key, meta_key))
            continue;
        if (b->count > 0) {
            const bson_t *cur = lookup(lctx, &b->id);
            if (!cur || !bson_equal(cur, b->doc))
                continue;
        }
        if (t < b->time_ms || t - b->time_ms >= o->max_span * 1000)
            continue;
        int32_t pending;
        int64_t pending_size;
        pending_of(bs, nb, b, ms, o, &pending, &pending_size);
        if (b->count + pending >= max_count ||
            b->size + pending_size + measurement_size(ms[i], o->meta_field, b->count + pending) > TS_BUCKET_MAX_SIZE)
            continue;
        return b;
    }
    return NULL;
}

static void fail_at(bson_error_t *e, int code, const char *field)
{
    bson_set_error(e, 0, (uint32_t)code, "'%s' must be present and contain a valid BSON UTC datetime value", field);
}

bool ts_catalog_insert(ts_catalog *cat, const uint8_t uuid[16], const bson_t *timeseries, sim_oplog_format fmt,
                       int32_t max_count, const bson_t *const *ms, size_t n, bool ordered, ts_lookup_fn lookup,
                       void *lookup_ctx, ts_write **writes, size_t *nw, bson_error_t *errs, size_t *placed)
{
    ts_opts o;
    parse_opts(timeseries, &o);
    if (max_count <= 0)
        max_count = TS_DEFAULT_BUCKET_MAX_COUNT;
    *writes = NULL;
    *nw = 0;
    *placed = 0;
    if (!o.time_field) {
        for (size_t i = 0; i < n; i++)
            bson_set_error(&errs[i], 0, 72, "Time-series buckets collection is missing time-series options");
        *placed = ordered ? 1 : n;
        return true;
    }
    ts_batch *bs = NULL;
    size_t nb = 0, capb = 0;
    ts_write pre[TS_MAX_PRE];
    size_t nw_pre = 0;
    for (size_t i = 0; i < n; i++) {
        memset(&errs[i], 0, sizeof errs[i]);
        *placed = i + 1;
        bson_iter_t time_it, meta_it;
        /* extractTimeAndMeta (bucket_catalog_helpers.cpp): the time field must be a date. */
        if (!bson_iter_init_find(&time_it, ms[i], o.time_field) || !BSON_ITER_HOLDS_DATE_TIME(&time_it)) {
            fail_at(&errs[i], 2, o.time_field);
            if (ordered)
                break;
            continue;
        }
        bool has_meta = o.meta_field && bson_iter_init_find(&meta_it, ms[i], o.meta_field);
        bson_t *meta_key = bson_new();
        if (has_meta)
            normalize_value(meta_key, "", &meta_it);
        int64_t ms_time = bson_iter_date_time(&time_it);
        ts_bucket *b = find_open(cat, uuid, meta_key, lookup, lookup_ctx);
        if (b) {
            int32_t pending;
            int64_t pending_size;
            pending_of(bs, nb, b, ms, &o, &pending, &pending_size);
            int32_t count = b->count + pending;
            int64_t add = measurement_size(ms[i], o.meta_field, count);
            /* determineRolloverAction: kTimeForward (soft close), kTimeBackward (archive where buckets can be
             * reopened: 6.3+, else close), kCount and kSize (hard close). */
            bool fwd = ms_time - b->time_ms >= o.max_span * 1000, back = ms_time < b->time_ms;
            bool full = count >= max_count || b->size + pending_size + add > TS_BUCKET_MAX_SIZE;
            bool reopening = fmt == SIM_FORMAT_70 || fmt == SIM_FORMAT_80;
            if (fwd || back || full) {
                /* A time rollover first tries an archived bucket of the series that the measurement fits
                 * (useAlternateBucket: "we might be able to reopen a bucket we still have in memory"); the open
                 * bucket stays open. */
                ts_bucket *alt = reopening && (fwd || back) ? find_alternate(cat, bs, nb, uuid, meta_key, ms, i,
                                                                             ms_time, &o, max_count, lookup, lookup_ctx)
                                                            : NULL;
                if (alt) {
                    b = alt;
                } else if (reopening && back) {
                    b->archived = true; /* archiveBucket: kept, not closed (nor compressed) */
                    b = NULL;
                } else {
                    /* Closed. With measurements of this command pending in it, it is closed once they are
                     * committed (allCommitted / finish returns the ClosedBucket); otherwise at once: 7.0
                     * compresses it before this command's batches are committed (the ClosedBucket of the insert
                     * result). */
                    bool has_batch = false;
                    for (size_t k = 0; k < nb; k++)
                        if (bs[k].b == b)
                            has_batch = true;
                    unlink_bucket(cat, b);
                    if (has_batch) {
                        b->size = -1; /* marks: closed after its batch */
                    } else {
                        if (fmt == SIM_FORMAT_70 && nw_pre < TS_MAX_PRE && compress_closed(cat, b, &o, &pre[nw_pre]))
                            nw_pre++;
                        bucket_free(b);
                    }
                    b = NULL;
                }
            }
        }
        if (!b) {
            b = calloc(1, sizeof *b);
            if (!b)
                abort();
            memcpy(b->uuid, uuid, 16);
            b->meta_key = meta_key;
            meta_key = NULL;
            /* roundTimestampToGranularity */
            int64_t secs = ms_time >= 0 ? ms_time / 1000 : -((-ms_time + 999) / 1000);
            int64_t rem = secs % o.rounding;
            if (rem < 0)
                rem += o.rounding;
            int64_t rounded = secs - rem;
            b->time_ms = rounded * 1000;
            /* generateBucketOID: a fresh ObjectId whose timestamp is the rounded time. */
            bson_oid_init(&b->id, NULL);
            uint32_t ts32 = (uint32_t)rounded;
            b->id.bytes[0] = (uint8_t)(ts32 >> 24);
            b->id.bytes[1] = (uint8_t)(ts32 >> 16);
            b->id.bytes[2] = (uint8_t)(ts32 >> 8);
            b->id.bytes[3] = (uint8_t)ts32;
            b->mm = calloc(1, sizeof *b->mm);
            if (!b->mm)
                abort();
            b->mm->min.type = b->mm->max.type = MM_OBJECT;
            /* allocateBucket: control.min's time is the rounded time. */
            bson_t ctl = BSON_INITIALIZER, wrap = BSON_INITIALIZER;
            bson_iter_t wit;
            bson_append_date_time(&ctl, o.time_field, -1, b->time_ms);
            BSON_APPEND_DOCUMENT(&wrap, "", &ctl);
            bson_iter_init(&wit, &wrap);
            bson_iter_next(&wit);
            mm_update_obj(b->mm, &wit, true, true, NULL);
            bson_destroy(&ctl);
            bson_destroy(&wrap);
            b->next = cat->open;
            cat->open = b;
        }
        if (meta_key)
            bson_destroy(meta_key);
        ts_batch *t = batch_for(&bs, &nb, &capb, b);
        if (has_meta && !t->has_meta) {
            /* The bucket's meta is the normalized value (makeNewDocument appends the normalized metadata). */
            bson_iter_init(&t->meta, b->meta_key);
            bson_iter_next(&t->meta);
            t->has_meta = true;
        }
        batch_push(t, i);
    }
    /* Commit: the compressions of buckets closed at once, then one write per batch in the order the batches were
     * opened, each followed by its bucket's compression when the batch closed it. */
    size_t cap = nw_pre + 2 * nb;
    ts_write *w = calloc(cap ? cap : 1, sizeof *w);
    if (!w)
        abort();
    size_t nwr = 0;
    for (size_t k = 0; k < nw_pre; k++)
        w[nwr++] = pre[k];
    for (size_t k = 0; k < nb; k++) {
        ts_batch *t = &bs[k];
        bool closing = t->b->size == -1;
        int64_t add = 0;
        for (size_t j = 0; j < t->n; j++)
            add += measurement_size(ms[t->idx[j]], o.meta_field, t->prev_count + (int32_t)j);
        commit_batch(cat, t, ms, &o, fmt, &w[nwr++]);
        if (closing) {
            if (fmt == SIM_FORMAT_70 && compress_closed(cat, t->b, &o, &w[nwr]))
                nwr++;
        } else {
            t->b->size += add;
        }
        free(t->idx);
    }
    /* Buckets closed by this command leave the catalog (they were unlinked when they rolled over). */
    for (size_t k = 0; k < nb; k++)
        if (bs[k].b->size == -1)
            bucket_free(bs[k].b);
    free(bs);
    *writes = w;
    *nw = nwr;
    return true;
}

/* ---- deletes and updates of measurements (timeseries_write_util.cpp) ---- */

void ts_measurements_free(bson_t **ms, size_t n)
{
    for (size_t i = 0; i < n; i++)
        bson_destroy(ms[i]);
    free(ms);
}

static void push_copy(bson_t ***ms, size_t *n, size_t *cap, bson_t *m)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        bson_t **p = realloc(*ms, *cap * sizeof *p);
        if (!p)
            abort();
        *ms = p;
    }
    (*ms)[(*n)++] = m;
}

/* A version 1 bucket unpacked: per index of the time column, the fields of data at that index, then the meta
 * field (the order $_internalUnpackBucket gives: bucket_unpacker.cpp, the time field's column drives the rows). */
static bool unpack_v1(const bson_t *doc, const ts_opts *o, bson_t ***out, size_t *n)
{
    bson_iter_t it, data, tcol, meta;
    size_t cap = 0;
    bool has_meta = o->meta_field && bson_iter_init_find(&meta, doc, "meta");
    if (!bson_iter_init_find(&data, doc, "data") || !BSON_ITER_HOLDS_DOCUMENT(&data))
        return false;
    bson_iter_t dcopy = data;
    if (!bson_iter_recurse(&dcopy, &it) || !bson_iter_find(&it, o->time_field) || !BSON_ITER_HOLDS_DOCUMENT(&it))
        return false;
    bson_iter_recurse(&it, &tcol);
    while (bson_iter_next(&tcol)) {
        const char *idx = bson_iter_key(&tcol);
        bson_t *m = bson_new();
        bson_iter_t cols, v;
        bson_iter_recurse(&data, &cols);
        while (bson_iter_next(&cols)) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&cols) || !bson_iter_recurse(&cols, &v))
                continue;
            if (bson_iter_find(&v, idx))
                bson_append_iter(m, bson_iter_key(&cols), -1, &v);
        }
        if (has_meta)
            bson_append_iter(m, o->meta_field, -1, &meta);
        push_copy(out, n, &cap, m);
    }
    return true;
}

bool ts_bucket_measurements(ts_catalog *cat, const bson_t *timeseries, const bson_t *doc, bson_t ***out, size_t *n)
{
    ts_opts o;
    bson_iter_t it;
    parse_opts(timeseries, &o);
    *out = NULL;
    *n = 0;
    if (!bson_iter_init_find(&it, doc, "_id") || !BSON_ITER_HOLDS_OID(&it))
        return false;
    ts_known *k = cat ? known_find(cat, bson_iter_oid(&it)) : NULL;
    if (k && bson_equal(k->doc, doc)) {
        *out = malloc((k->n ? k->n : 1) * sizeof **out);
        if (!*out)
            abort();
        for (size_t i = 0; i < k->n; i++)
            (*out)[i] = bson_copy(k->ms[i]);
        *n = k->n;
        return true;
    }
    bson_iter_t ctl;
    if (bson_iter_init(&ctl, doc) && bson_iter_find_descendant(&ctl, "control.version", &it) &&
        bson_iter_as_int64(&it) == 1)
        return unpack_v1(doc, &o, out, n);
    return false;
}

void ts_catalog_forget(ts_catalog *cat, const bson_oid_t *id)
{
    for (ts_bucket *b = cat->open; b; b = b->next) {
        if (bson_oid_equal(&b->id, id)) {
            unlink_bucket(cat, b);
            bucket_free(b);
            break;
        }
    }
    known_drop(cat, id);
}

/* makeModificationOp: the bucket the remaining measurements make under the same _id (makeNewDocumentForWrite:
 * processTimeseriesMeasurements updates the MinMax with each measurement, then with the rounded minimum time; the
 * meta is measurements[0]'s), compressed on 8.0 (gTimeseriesAlwaysUseCompressedBuckets). */
bson_t *ts_catalog_rebuild(ts_catalog *cat, const bson_t *timeseries, sim_oplog_format fmt, const bson_oid_t *id,
                           bson_t *const *ms, size_t n)
{
    ts_opts o;
    parse_opts(timeseries, &o);
    ts_catalog_forget(cat, id);
    ts_bucket *b = calloc(1, sizeof *b);
    if (!b)
        abort();
    b->id = *id;
    b->meta_key = bson_new();
    bson_iter_t mit;
    bool has_meta = o.meta_field && n && bson_iter_init_find(&mit, ms[0], o.meta_field);
    if (has_meta)
        bson_append_iter(b->meta_key, "", 0, &mit);
    b->mm = calloc(1, sizeof *b->mm);
    if (!b->mm)
        abort();
    b->mm->min.type = b->mm->max.type = MM_OBJECT;
    int64_t min_t = INT64_MAX;
    for (size_t i = 0; i < n; i++) {
        bson_iter_t t;
        if (bson_iter_init_find(&t, ms[i], o.time_field) && BSON_ITER_HOLDS_DATE_TIME(&t) &&
            bson_iter_date_time(&t) < min_t)
            min_t = bson_iter_date_time(&t);
        columns_add(b, ms[i], o.meta_field, false);
        minmax_add(b, ms[i], o.meta_field);
        b->count++;
    }
    int64_t secs = min_t >= 0 ? min_t / 1000 : -((-min_t + 999) / 1000);
    int64_t rem = secs % o.rounding;
    if (rem < 0)
        rem += o.rounding;
    bson_t ctl = BSON_INITIALIZER;
    bson_append_date_time(&ctl, o.time_field, -1, (secs - rem) * 1000);
    minmax_add(b, &ctl, NULL);
    bson_destroy(&ctl);
    bson_t *doc;
    if (fmt == SIM_FORMAT_80) {
        doc = compressed_doc(b, &o, 2);
        reorder_by_time(b, &o);
    } else {
        bson_iter_t meta;
        bool m = !bson_empty(b->meta_key) && bson_iter_init(&meta, b->meta_key) && bson_iter_next(&meta);
        doc = bucket_doc(b, m ? &meta : NULL);
    }
    known_set(cat, id, doc, b->ms, b->nms);
    bucket_free(b);
    return doc;
}

void ts_catalog_adopt(ts_catalog *cat, ts_catalog *side)
{
    while (side->known) {
        ts_known *k = side->known;
        side->known = k->next;
        known_drop(cat, &k->id);
        k->next = cat->known;
        cat->known = k;
    }
}

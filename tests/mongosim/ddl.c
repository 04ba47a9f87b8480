/*
 * ddl.c — collection options, views and time-series collections as a MongoDB 7.0 server writes them (see ddl.h).
 *
 * Each rule names the mongodb/mongo file it follows, under src/mongo/db/ (7.0-era versions):
 *   - commands/create_command.cpp, CmdCreate::typedRun: the cross-option checks and their codes;
 *   - catalog/collection_options.cpp: CollectionOptions::appendBSON gives the order of the options (capped, size,
 *     max, ..., validator, validationLevel, validationAction, collation, clusteredIndex, expireAfterSeconds, viewOn,
 *     pipeline, idIndex, timeseries) and fromCreateCommand/adjustCappedSize rounds `size` up to a multiple of 256
 *     (7.0 does; 7.1 stopped: the 7.1 compatibility notes) and turns `max` <= 0 into 0x7fffffff; both are appended
 *     with BSONObjBuilder::appendNumber (int32 below 2^30, a double below 2^40, else int64);
 *   - catalog/clustered_collection_util.cpp: a clusteredIndex spec {v: 2, key, name ("_id_" when none), unique}
 *     (its IDL, catalog/clustered_collection_options.idl, gives the field order), and `clusteredIndex: true` (the
 *     "legacy format") only for buckets collections;
 *   - catalog/create_collection.cpp, _createTimeseries: the buckets collection gets the options plus a $jsonSchema
 *     validator, `clusteredIndex: true` and the expireAfterSeconds; with a metaField, the index {meta: 1,
 *     control.min.<time>: 1, control.max.<time>: 1} named "<meta>_1_<time>_1" (_createDefaultTimeseriesIndex);
 *     then the view {viewOn: "system.buckets.NAME", pipeline: timeseries::generateViewPipeline(...)};
 *   - timeseries/timeseries_options.cpp: checkBucketingParameters (granularity "seconds" and bucketMaxSpanSeconds
 *     3600 by default; bucketMaxSpanSeconds from the granularity), generateViewPipeline
 *     ([{$_internalUnpackBucket: {timeField, metaField?, bucketMaxSpanSeconds}}]), getBucketRoundingSeconds-
 *     FromGranularity (60, 3600, 86400 s) and roundTimestampToGranularity; timeseries/timeseries.idl gives the field
 *     order (timeField, metaField, granularity, bucketRoundingSeconds, bucketMaxSpanSeconds);
 *
 * NOTES: the buckets themselves are written by tsbucket.c (the bucket catalog).
 */
#include "ddl.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "update.h"

static bool fail(bson_error_t *err, int code, const char *fmt, ...) BSON_GNUC_PRINTF(3, 4);
static bool fail(bson_error_t *err, int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    bson_set_error(err, 0, (uint32_t)code, "%s", msg);
    return false;
}

/* The IDL's error for a field of the wrong type (idl/idl_parser.cpp, IDLParserContext::throwBadType). */
static bool wrong_type(bson_error_t *err, const char *path, const bson_iter_t *it, const char *want)
{
    return fail(err, 14, "BSON field '%s' is the wrong type '%s', expected type '%s'", path,
                sim_type_name(bson_iter_type(it)), want);
}

/* Generic command arguments, which `create` ignores (idl/generic_argument.idl); any other $-field too. */
static bool is_generic(const char *k)
{
    static const char *const names[] = {"lsid",
                                        "txnNumber",
                                        "txnRetryCounter",
                                        "autocommit",
                                        "startTransaction",
                                        "stmtId",
                                        "writeConcern",
                                        "readConcern",
                                        "maxTimeMS",
                                        "comment",
                                        "apiVersion",
                                        "apiStrict",
                                        "apiDeprecationErrors",
                                        "clientOperationKey",
                                        "mayBypassWriteBlocking",
                                        "shardVersion",
                                        "databaseVersion",
                                        "allowImplicitCollectionCreation"};
    if (k[0] == '$')
        return true;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(names[i], k) == 0)
            return true;
    return false;
}

/* BSONObjBuilder::appendNumber(StringData, long long): int32 below 2^30, a double below 2^40, else int64. */
static void append_number(bson_t *b, const char *key, int64_t n)
{
    const int64_t max_int = (int64_t)1 << 30, max_double = (int64_t)1 << 40;
    if (-max_int < n && n < max_int)
        BSON_APPEND_INT32(b, key, (int32_t)n);
    else if (-max_double < n && n < max_double)
        BSON_APPEND_DOUBLE(b, key, (double)n);
    else
        BSON_APPEND_INT64(b, key, n);
}

static bool iter_doc(const bson_iter_t *it, bson_t *out)
{
    uint32_t len;
    const uint8_t *data;
    bson_iter_document(it, &len, &data);
    return bson_init_static(out, data, len);
}

static bool iter_array(const bson_iter_t *it, bson_t *out)
{
    uint32_t len;
    const uint8_t *data;
    bson_iter_array(it, &len, &data);
    return bson_init_static(out, data, len);
}

/* ---- options found in the command ---- */

typedef struct {
    bool has_capped, capped;
    bool has_size, has_max;
    int64_t size, max;
    bool has_validator, has_level, has_action, has_clustered, has_expire, has_view_on, has_pipeline, has_ts;
    bool images; /* changeStreamPreAndPostImages: {enabled: true} */
    bson_iter_t validator, level, action, clustered, expire, view_on, pipeline, ts;
    char first_other[64];    /* the first option a time-series collection does not take */
    char first_non_view[64]; /* the first option other than viewOn and pipeline */
} found_opts;

static bool enum_ok(const char *v, const char *const *allowed)
{
    for (; *allowed; allowed++)
        if (strcmp(*allowed, v) == 0)
            return true;
    return false;
}

/* changeStreamPreAndPostImages (catalog/collection_options.idl, ChangeStreamPreAndPostImagesOptions): an object
 * {enabled: bool}, the field required (IDL error 40414), no other field (40415). Shown by listCollections only when
 * enabled (CollectionOptions::appendBSON appends it when getEnabled()); its place among the options, after
 * validationAction and before clusteredIndex, is inferred. */
bool ddl_images_option(const bson_iter_t *it, bool *enabled, bson_error_t *err)
{
    if (!BSON_ITER_HOLDS_DOCUMENT(it))
        return wrong_type(err, "changeStreamPreAndPostImages", it, "object");
    bson_t d;
    bson_iter_t f;
    iter_doc(it, &d);
    bool has = false;
    bson_iter_init(&f, &d);
    while (bson_iter_next(&f)) {
        if (strcmp(bson_iter_key(&f), "enabled") != 0)
            return fail(err, 40415, "BSON field 'changeStreamPreAndPostImages.%s' is an unknown field.",
                        bson_iter_key(&f));
        if (!BSON_ITER_HOLDS_BOOL(&f))
            return wrong_type(err, "changeStreamPreAndPostImages.enabled", &f, "bool");
        has = true;
        *enabled = bson_iter_bool(&f);
    }
    if (!has)
        return fail(err, 40414, "BSON field 'changeStreamPreAndPostImages.enabled' is missing but a required field");
    return true;
}

void ddl_append_images(bson_t *options, bool enabled)
{
    bson_t d;
    BSON_APPEND_DOCUMENT_BEGIN(options, "changeStreamPreAndPostImages", &d);
    BSON_APPEND_BOOL(&d, "enabled", enabled);
    bson_append_document_end(options, &d);
}

bool ddl_images_enabled(const bson_t *options)
{
    bson_iter_t it;
    return options && bson_iter_init(&it, options) &&
           bson_iter_find_descendant(&it, "changeStreamPreAndPostImages.enabled", &it) && BSON_ITER_HOLDS_BOOL(&it) &&
           bson_iter_bool(&it);
}

static bool collect(const bson_t *cmd, found_opts *f, bson_error_t *err)
{
    static const char *const unsupported[] = {"autoIndexId",   "idIndex",
                                              "storageEngine", "indexOptionDefaults",
                                              "collation",     "recordPreImages",
                                              "temp",          "encryptedFields",
                                              "flags",         NULL};
    static const char *const levels[] = {"off", "strict", "moderate", NULL};
    static const char *const actions[] = {"error", "warn", NULL};
    bson_iter_t it;
    memset(f, 0, sizeof *f);
    if (!bson_iter_init(&it, cmd) || !bson_iter_next(&it))
        return fail(err, 9, "empty create command");
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        char path[160];
        snprintf(path, sizeof path, "create.%s", k);
        if (is_generic(k))
            continue;
        bool other = true; /* not timeseries / expireAfterSeconds / capped:false */
        if (strcmp(k, "capped") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it) && !BSON_ITER_HOLDS_NUMBER(&it))
                return wrong_type(err, path, &it, "bool");
            f->has_capped = true;
            f->capped = bson_iter_as_bool(&it);
            other = f->capped;
        } else if (strcmp(k, "size") == 0 || strcmp(k, "max") == 0) {
            if (!BSON_ITER_HOLDS_NUMBER(&it))
                return wrong_type(err, path, &it, "long");
            int64_t v = bson_iter_as_int64(&it);
            if (k[0] == 's') {
                /* create.idl: size is a safeInt64 with validator {gte: 1} (the IDL's error 51024). */
                if (v < 1)
                    return fail(err, 51024, "BSON field 'size' value must be >= 1, actual value '%" PRId64 "'", v);
                f->has_size = true;
                f->size = v;
            } else {
                if (v >= (int64_t)1 << 31)
                    return fail(err, 2, "max in a capped collection has to be < 2^31 or not set");
                f->has_max = true;
                f->max = v;
            }
        } else if (strcmp(k, "validator") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return wrong_type(err, path, &it, "object");
            f->has_validator = true;
            f->validator = it;
        } else if (strcmp(k, "validationLevel") == 0 || strcmp(k, "validationAction") == 0) {
            bool level = k[10] == 'L';
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return wrong_type(err, path, &it, "string");
            if (!enum_ok(bson_iter_utf8(&it, NULL), level ? levels : actions))
                return fail(err, 2, "Enumeration value '%s' for field '%s' is not a valid value.",
                            bson_iter_utf8(&it, NULL), path);
            if (level) {
                f->has_level = true;
                f->level = it;
            } else {
                f->has_action = true;
                f->action = it;
            }
        } else if (strcmp(k, "clusteredIndex") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it) && !BSON_ITER_HOLDS_DOCUMENT(&it))
                return fail(err, 5979702, "'clusteredIndex' has to be a boolean or object.");
            f->has_clustered = !(BSON_ITER_HOLDS_BOOL(&it) && !bson_iter_bool(&it));
            f->clustered = it;
        } else if (strcmp(k, "expireAfterSeconds") == 0) {
            if (!BSON_ITER_HOLDS_NUMBER(&it))
                return wrong_type(err, path, &it, "long");
            f->has_expire = true;
            f->expire = it;
            other = false;
        } else if (strcmp(k, "viewOn") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return wrong_type(err, path, &it, "string");
            f->has_view_on = true;
            f->view_on = it;
        } else if (strcmp(k, "pipeline") == 0) {
            if (!BSON_ITER_HOLDS_ARRAY(&it))
                return wrong_type(err, path, &it, "array");
            bson_iter_t st;
            bson_iter_recurse(&it, &st);
            while (bson_iter_next(&st)) {
                char sp[200];
                snprintf(sp, sizeof sp, "create.pipeline.%s", bson_iter_key(&st));
                if (!BSON_ITER_HOLDS_DOCUMENT(&st))
                    return wrong_type(err, sp, &st, "object");
            }
            f->has_pipeline = true;
            f->pipeline = it;
        } else if (strcmp(k, "changeStreamPreAndPostImages") == 0) {
            if (!ddl_images_option(&it, &f->images, err))
                return false;
        } else if (strcmp(k, "timeseries") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return wrong_type(err, path, &it, "object");
            f->has_ts = true;
            f->ts = it;
            other = false;
        } else if (enum_ok(k, unsupported)) {
            return fail(err, 2, "mongosim does not support the create option '%s'", k);
        } else {
            return fail(err, 40415, "BSON field '%s' is an unknown field.", path);
        }
        if (other && !f->first_other[0])
            snprintf(f->first_other, sizeof f->first_other, "%s", k);
        bool view_field =
            strcmp(k, "viewOn") == 0 || strcmp(k, "pipeline") == 0 || (strcmp(k, "capped") == 0 && !f->capped);
        if (!view_field && !f->first_non_view[0])
            snprintf(f->first_non_view, sizeof f->first_non_view, "%s", k);
    }
    return true;
}

/* ---- clusteredIndex ---- */

/* A user's clusteredIndex spec as the catalog keeps it: {v: 2, key, name, unique: true} (validateClusteredIndexSpec
 * in create_collection.cpp; the IDL parse of ClusteredIndexSpec; ensureClusteredIndexName). */
static bool clustered_spec(const bson_iter_t *ci, bson_t *out, bson_error_t *err)
{
    bson_t spec;
    bson_iter_t it, key_it;
    bool has_key = false, has_unique = false, unique = false;
    int64_t v = 2;
    const char *name = NULL;
    iter_doc(ci, &spec);
    bson_iter_init(&it, &spec);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        char path[160];
        snprintf(path, sizeof path, "clusteredIndex.%s", k);
        if (strcmp(k, "v") == 0) {
            if (!BSON_ITER_HOLDS_NUMBER(&it))
                return wrong_type(err, path, &it, "int");
            v = bson_iter_as_int64(&it);
        } else if (strcmp(k, "key") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return wrong_type(err, path, &it, "object");
            has_key = true;
            key_it = it;
        } else if (strcmp(k, "name") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return wrong_type(err, path, &it, "string");
            name = bson_iter_utf8(&it, NULL);
        } else if (strcmp(k, "unique") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it) && !BSON_ITER_HOLDS_NUMBER(&it))
                return wrong_type(err, path, &it, "bool");
            has_unique = true;
            unique = bson_iter_as_bool(&it);
        } else {
            return fail(err, 40415, "BSON field '%s' is an unknown field.", path);
        }
    }
    if (!has_key)
        return fail(err, 40414, "BSON field 'clusteredIndex.key' is missing but a required field");
    if (!has_unique)
        return fail(err, 40414, "BSON field 'clusteredIndex.unique' is missing but a required field");
    if (!unique)
        return fail(err, 5979700, "The clusteredIndex option requires unique: true to be specified");
    bson_t key;
    bson_iter_t kit;
    iter_doc(&key_it, &key);
    bool on_id = bson_iter_init(&kit, &key) && bson_iter_next(&kit) && strcmp(bson_iter_key(&kit), "_id") == 0 &&
                 BSON_ITER_HOLDS_NUMBER(&kit) && bson_iter_as_double(&kit) == 1.0 && !bson_iter_next(&kit);
    if (!on_id)
        return fail(err, 197, "The clusteredIndex option is only supported for key: {_id: 1}");
    if (v != 2)
        return fail(err, 5979704,
                    "Invalid clusteredIndex specification; cannot create a clusteredIndex with v=%" PRId64, v);
    bson_init(out);
    BSON_APPEND_INT32(out, "v", 2);
    BSON_APPEND_DOCUMENT(out, "key", &key);
    BSON_APPEND_UTF8(out, "name", name ? name : "_id_");
    BSON_APPEND_BOOL(out, "unique", true);
    return true;
}

/* ---- time-series options ---- */

typedef struct {
    const char *time_field, *meta_field, *granularity;
    int32_t rounding, max_span; /* 0: absent */
} ts_opts;

static int32_t span_of(const char *granularity)
{
    return strcmp(granularity, "minutes") == 0 ? 60 * 60 * 24
           : strcmp(granularity, "hours") == 0 ? 60 * 60 * 24 * 30
                                               : 60 * 60;
}

/* The IDL parse of TimeseriesOptions (strict), then checkBucketingParameters with kSetToDefault. */
static bool parse_ts(const bson_iter_t *ts_it, ts_opts *t, bson_error_t *err)
{
    static const char *const grans[] = {"seconds", "minutes", "hours", NULL};
    bson_t ts;
    bson_iter_t it;
    memset(t, 0, sizeof *t);
    iter_doc(ts_it, &ts);
    bson_iter_init(&it, &ts);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        char path[160];
        snprintf(path, sizeof path, "create.timeseries.%s", k);
        if (strcmp(k, "timeField") == 0 || strcmp(k, "metaField") == 0 || strcmp(k, "granularity") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return wrong_type(err, path, &it, "string");
            const char *v = bson_iter_utf8(&it, NULL);
            if (k[0] == 't')
                t->time_field = v;
            else if (k[0] == 'm')
                t->meta_field = v;
            else if (!enum_ok(v, grans))
                return fail(err, 2, "Enumeration value '%s' for field '%s' is not a valid value.", v, path);
            else
                t->granularity = v;
        } else if (strcmp(k, "bucketRoundingSeconds") == 0 || strcmp(k, "bucketMaxSpanSeconds") == 0) {
            if (!BSON_ITER_HOLDS_NUMBER(&it))
                return wrong_type(err, path, &it, "int");
            int64_t v = bson_iter_as_int64(&it);
            if (v < 1 || v > INT32_MAX)
                return fail(err, 51024, "BSON field '%s' value must be >= 1, actual value '%" PRId64 "'", k, v);
            if (k[6] == 'R')
                t->rounding = (int32_t)v;
            else
                t->max_span = (int32_t)v;
        } else {
            return fail(err, 40415, "BSON field '%s' is an unknown field.", path);
        }
    }
    if (!t->time_field)
        return fail(err, 40414, "BSON field 'create.timeseries.timeField' is missing but a required field");
    if (t->granularity) {
        if (t->max_span && t->max_span != span_of(t->granularity))
            return fail(err, 72,
                        "Time-series 'bucketMaxSpanSeconds' cannot be set to a value other than the default of %d for "
                        "the provided granularity",
                        span_of(t->granularity));
        if (t->rounding)
            return fail(err, 72,
                        "Time-series 'bucketRoundingSeconds' cannot be set alongside the granularity parameter");
        t->max_span = span_of(t->granularity);
    } else if (t->max_span || t->rounding) {
        if (t->rounding != t->max_span)
            return fail(err, 72, "Time-series 'bucketRoundingSeconds' must be equal to 'bucketMaxSpanSeconds'");
    } else {
        t->granularity = "seconds";
        t->max_span = span_of("seconds");
    }
    return true;
}

static void append_ts(bson_t *b, const char *key, const ts_opts *t)
{
    bson_t d;
    BSON_APPEND_DOCUMENT_BEGIN(b, key, &d);
    BSON_APPEND_UTF8(&d, "timeField", t->time_field);
    if (t->meta_field)
        BSON_APPEND_UTF8(&d, "metaField", t->meta_field);
    if (t->granularity)
        BSON_APPEND_UTF8(&d, "granularity", t->granularity);
    if (t->rounding)
        BSON_APPEND_INT32(&d, "bucketRoundingSeconds", t->rounding);
    BSON_APPEND_INT32(&d, "bucketMaxSpanSeconds", t->max_span);
    bson_append_document_end(b, &d);
}

static void append_strings(bson_t *b, const char *key, const char *const *v, size_t n)
{
    bson_t arr;
    BSON_APPEND_ARRAY_BEGIN(b, key, &arr);
    for (size_t i = 0; i < n; i++) {
        char kb[16];
        const char *k;
        bson_uint32_to_string((uint32_t)i, &k, kb, sizeof kb);
        bson_append_utf8(&arr, k, -1, v[i], -1);
    }
    bson_append_array_end(b, &arr);
}

static void append_type(bson_t *b, const char *key, const char *bson_type)
{
    bson_t d;
    BSON_APPEND_DOCUMENT_BEGIN(b, key, &d);
    BSON_APPEND_UTF8(&d, "bsonType", bson_type);
    bson_append_document_end(b, &d);
}

/* control.min / control.max: an object whose time field is a date. */
static void append_minmax_schema(bson_t *b, const char *key, const char *time_field)
{
    bson_t d, props;
    BSON_APPEND_DOCUMENT_BEGIN(b, key, &d);
    BSON_APPEND_UTF8(&d, "bsonType", "object");
    append_strings(&d, "required", &time_field, 1);
    BSON_APPEND_DOCUMENT_BEGIN(&d, "properties", &props);
    append_type(&props, time_field, "date");
    bson_append_document_end(&d, &props);
    bson_append_document_end(b, &d);
}

/* The buckets collection's validator, the $jsonSchema _createTimeseries builds (create_collection.cpp). */
static void append_bucket_validator(bson_t *b, const char *time_field)
{
    static const char *const top_required[] = {"_id", "control", "data"};
    static const char *const control_required[] = {"version", "min", "max"};
    bson_t v, schema, props, control, cprops, count, meta;
    BSON_APPEND_DOCUMENT_BEGIN(b, "validator", &v);
    BSON_APPEND_DOCUMENT_BEGIN(&v, "$jsonSchema", &schema);
    BSON_APPEND_UTF8(&schema, "bsonType", "object");
    append_strings(&schema, "required", top_required, 3);
    BSON_APPEND_DOCUMENT_BEGIN(&schema, "properties", &props);
    append_type(&props, "_id", "objectId");
    BSON_APPEND_DOCUMENT_BEGIN(&props, "control", &control);
    BSON_APPEND_UTF8(&control, "bsonType", "object");
    append_strings(&control, "required", control_required, 3);
    BSON_APPEND_DOCUMENT_BEGIN(&control, "properties", &cprops);
    append_type(&cprops, "version", "number");
    append_minmax_schema(&cprops, "min", time_field);
    append_minmax_schema(&cprops, "max", time_field);
    append_type(&cprops, "closed", "bool");
    BSON_APPEND_DOCUMENT_BEGIN(&cprops, "count", &count);
    BSON_APPEND_UTF8(&count, "bsonType", "number");
    BSON_APPEND_INT32(&count, "minimum", 1);
    bson_append_document_end(&cprops, &count);
    bson_append_document_end(&control, &cprops);
    BSON_APPEND_BOOL(&control, "additionalProperties", false);
    bson_append_document_end(&props, &control);
    append_type(&props, "data", "object");
    BSON_APPEND_DOCUMENT_BEGIN(&props, "meta", &meta);
    bson_append_document_end(&props, &meta);
    bson_append_document_end(&schema, &props);
    BSON_APPEND_BOOL(&schema, "additionalProperties", false);
    bson_append_document_end(&v, &schema);
    bson_append_document_end(b, &v);
}

/* ---- create ---- */

static bool has_dot(const char *s)
{
    return strchr(s, '.') != NULL;
}

bool ddl_parse_create(const bson_t *cmd, const char *db, const char *coll, ddl_create *out, bson_error_t *err)
{
    found_opts f;
    memset(out, 0, sizeof *out);
    if (!collect(cmd, &f, err))
        return false;
    /* create_command.cpp, CmdCreate::typedRun, in its order. */
    if (!f.has_clustered) {
        if (f.capped && !f.has_size)
            return fail(err, 72, "the 'size' field is required when 'capped' is true");
        if ((f.has_size || f.has_max) && !f.capped)
            return fail(err, 72,
                        "the 'capped' field needs to be true when either the 'size' or 'max' fields are present");
    }
    if (f.has_pipeline && !f.has_view_on)
        return fail(err, 72, "'pipeline' requires 'viewOn' to also be specified");
    ts_opts ts = {0};
    if (f.has_ts) {
        if (f.first_other[0])
            return fail(err, 72, "%s.%s: 'timeseries' is not allowed with '%s'", db, coll, f.first_other);
        if (!parse_ts(&f.ts, &ts, err))
            return false;
        if (has_dot(ts.time_field))
            return fail(err, 72, "%s.%s: 'timeField' must be a top-level field and not contain a '.'", db, coll);
        if (ts.meta_field) {
            if (strcmp(ts.meta_field, "_id") == 0)
                return fail(err, 72, "'metaField' cannot be \"_id\"");
            if (strcmp(ts.meta_field, ts.time_field) == 0)
                return fail(err, 72, "'metaField' cannot be the same as 'timeField'");
            if (has_dot(ts.meta_field))
                return fail(err, 72, "%s.%s: 'metaField' must be a top-level field and not contain a '.'", db, coll);
        }
    }
    if (f.has_expire && !f.has_ts && !f.has_clustered)
        return fail(err, 72,
                    "'expireAfterSeconds' is only supported on time-series collections or when the 'clusteredIndex' "
                    "option is specified");
    int64_t expire = f.has_expire ? bson_iter_as_int64(&f.expire) : 0;
    if (f.has_expire && expire < 0)
        return fail(err, 72, "TTL index 'expireAfterSeconds' option must be within an acceptable range");
    bson_t cspec = BSON_INITIALIZER;
    if (f.has_clustered) {
        if (BSON_ITER_HOLDS_BOOL(&f.clustered))
            return fail(err, 5979703,
                        "The 'clusteredIndex' legacy format {clusteredIndex: <bool>} is only supported for specific "
                        "internal collections and vice versa");
        if (f.capped)
            return fail(err, 2, "mongosim does not support capped clustered collections");
        bson_destroy(&cspec);
        if (!clustered_spec(&f.clustered, &cspec, err))
            return false;
    }
    if (f.has_view_on) {
        const char *on = bson_iter_utf8(&f.view_on, NULL);
        if (f.first_non_view[0]) {
            bson_destroy(&cspec);
            return fail(err, 2, "mongosim does not support the option '%s' on a view", f.first_non_view);
        }
        if (!*on) {
            bson_destroy(&cspec);
            return fail(err, 2, "'viewOn' cannot be empty.'");
        }
        /* create_collection.cpp, _createView; database_impl.cpp, userCreateNS. */
        if (strncmp(on, "system.buckets.", 15) == 0) {
            bson_destroy(&cspec);
            return fail(err, 73,
                        "Cannot create view on a system.buckets namespace except by creating a time-series collection");
        }
        if (strncmp(coll, "system.", 7) == 0) {
            bson_destroy(&cspec);
            return fail(err, 73, "View name cannot start with 'system.', which is reserved for system namespaces");
        }
        if (strlen(on) >= sizeof out->view_on) {
            bson_destroy(&cspec);
            return fail(err, 73, "viewOn is too long");
        }
        out->kind = DDL_VIEW;
        snprintf(out->view_on, sizeof out->view_on, "%s", on);
        bson_init(&out->options);
        if (f.has_pipeline) {
            bson_t p;
            iter_array(&f.pipeline, &p);
            bson_copy_to(&p, &out->pipeline);
        } else {
            bson_init(&out->pipeline);
        }
        bson_destroy(&cspec);
        return true;
    }
    if (f.has_ts) {
        size_t need = strlen("system.buckets.") + strlen(coll);
        if (need >= sizeof out->view_on)
            return fail(err, 73, "Fully qualified namespace is too long: '%s.system.buckets.%s'", db, coll);
        out->kind = DDL_TIMESERIES;
        out->clustered = true;
        bson_init(&out->options);
        append_bucket_validator(&out->options, ts.time_field);
        BSON_APPEND_BOOL(&out->options, "clusteredIndex", true); /* the legacy format */
        if (f.has_expire)
            BSON_APPEND_INT64(&out->options, "expireAfterSeconds", expire);
        append_ts(&out->options, "timeseries", &ts);
        snprintf(out->view_on, sizeof out->view_on, "system.buckets.%s", coll);
        /* [{$_internalUnpackBucket: {timeField, metaField?, bucketMaxSpanSeconds}}] (generateViewPipeline). */
        bson_t stage, unpack;
        bson_init(&out->pipeline);
        BSON_APPEND_DOCUMENT_BEGIN(&out->pipeline, "0", &stage);
        BSON_APPEND_DOCUMENT_BEGIN(&stage, "$_internalUnpackBucket", &unpack);
        BSON_APPEND_UTF8(&unpack, "timeField", ts.time_field);
        if (ts.meta_field)
            BSON_APPEND_UTF8(&unpack, "metaField", ts.meta_field);
        BSON_APPEND_INT32(&unpack, "bucketMaxSpanSeconds", ts.max_span);
        bson_append_document_end(&stage, &unpack);
        bson_append_document_end(&out->pipeline, &stage);
        if (ts.meta_field) {
            /* _createDefaultTimeseriesIndex: {meta: 1, control.min.<time>: 1, control.max.<time>: 1}, spelled
             * {v, key, name} as IndexCatalogImpl::_fixIndexSpec orders a spec. */
            char kmin[300], kmax[300], name[600];
            bson_t key;
            snprintf(kmin, sizeof kmin, "control.min.%s", ts.time_field);
            snprintf(kmax, sizeof kmax, "control.max.%s", ts.time_field);
            snprintf(name, sizeof name, "%s_1_%s_1", ts.meta_field, ts.time_field);
            out->has_index = true;
            bson_init(&out->index);
            BSON_APPEND_INT32(&out->index, "v", 2);
            BSON_APPEND_DOCUMENT_BEGIN(&out->index, "key", &key);
            BSON_APPEND_INT32(&key, "meta", 1);
            BSON_APPEND_INT32(&key, kmin, 1);
            BSON_APPEND_INT32(&key, kmax, 1);
            bson_append_document_end(&out->index, &key);
            BSON_APPEND_UTF8(&out->index, "name", name);
        }
        bson_destroy(&cspec);
        return true;
    }
    out->kind = DDL_COLLECTION;
    out->clustered = f.has_clustered;
    bson_init(&out->options);
    bson_init(&out->pipeline);
    if (f.capped) {
        BSON_APPEND_BOOL(&out->options, "capped", true);
        append_number(&out->options, "size", (f.size + 0xff) & ~(int64_t)0xff);
        int64_t max = f.has_max ? f.max : 0;
        if (f.has_max && max <= 0)
            max = 0x7fffffff;
        if (max)
            append_number(&out->options, "max", max);
    }
    if (f.has_validator) {
        bson_t v;
        iter_doc(&f.validator, &v);
        BSON_APPEND_DOCUMENT(&out->options, "validator", &v);
    }
    if (f.has_level)
        BSON_APPEND_UTF8(&out->options, "validationLevel", bson_iter_utf8(&f.level, NULL));
    if (f.has_action)
        BSON_APPEND_UTF8(&out->options, "validationAction", bson_iter_utf8(&f.action, NULL));
    if (f.images)
        ddl_append_images(&out->options, true);
    if (f.has_clustered)
        BSON_APPEND_DOCUMENT(&out->options, "clusteredIndex", &cspec);
    if (f.has_expire)
        BSON_APPEND_INT64(&out->options, "expireAfterSeconds", expire);
    bson_destroy(&cspec);
    return true;
}

void ddl_create_clear(ddl_create *c)
{
    if (!c)
        return;
    bson_destroy(&c->options);
    bson_destroy(&c->pipeline);
    if (c->has_index)
        bson_destroy(&c->index);
    memset(c, 0, sizeof *c);
}

bool ddl_timeseries_of(const bson_t *options, bson_t *timeseries)
{
    bson_iter_t it;
    return options && bson_iter_init_find(&it, options, "timeseries") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
           iter_doc(&it, timeseries);
}

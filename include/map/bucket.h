/*
 * bucket.h — time-series buckets as measurements, and `$v:2` diffs applied to a BSON document.
 *
 * A time-series collection stores its measurements in bucket documents (mongodb/mongo src/mongo/db/timeseries/
 * README.md): {_id, control: {version, min, max, count (v2/v3)}, meta, data: {<field>: column}}. A version 1 column
 * is a document keyed "0", "1", ... (a key missing where the measurement lacks the field); a version 2 (sorted) or 3
 * (unsorted) column is BinData subtype 7, BSONColumn (map/bsoncolumn.h). bucket_unpack rebuilds the measurements as
 * the time-series view returns them ($_internalUnpackBucket); bucket_apply_diff applies the `$v:2` update diffs the
 * oplog logs for bucket changes (and any other document), including the 8.0 binary diffs of compressed columns.
 *
 * Pure: libbson and the BSONColumn decoder only. Every input comes from outside: a malformed one is an error with a
 * one-line reason, never an over-read. docs/bsoncolumn.md "Unpacking buckets" has the facts these functions rest on.
 */
#ifndef OPLOG2PG_MAP_BUCKET_H
#define OPLOG2PG_MAP_BUCKET_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct bucket_spec {
    const char *time_field; /* the collection's timeField */
    const char *meta_field; /* its metaField, NULL when none */
    bool docs_valid;        /* the caller vouches that the buckets given are valid BSON (libbson made them, or they
                               were validated when they came in): they are not walked again */
} bucket_spec;

/* The measurements of one bucket, in position order (position = index 0..n-1 in the bucket's time column). */
typedef struct bucket_rows {
    size_t n;
    const uint8_t **docs; /* docs[i], lens[i]: measurement i as a BSON document, as the time-series view returns it:
                             the time field first, then the meta field under the metaField name when the bucket has
                             `meta`, then the bucket's other data fields in the order of its data region (the
                             server's BucketUnpacker getNext) */
    uint32_t *lens;
    int64_t *times;         /* measurement i's time (a BSON date, ms since the epoch) */
    struct rowstore *store; /* holds every document above (shared, counted, with the rows bucket_unpack_next
                               made from these or these from) */
    void *arrays; /* holds docs, lens and times (one block, shared (counted) with the rows bucket_unpack_next made
                     from these when it only added places) */
    size_t same;  /* bucket_unpack_next: places 0..same-1 hold the same as prev's (0 without a prev) */
    struct bucket_resume *resume; /* what bucket_unpack_next needs to go on from these rows (NULL: nothing) */
} bucket_rows;

/*
 * Unpacks a whole bucket document (control.version 1: data.<f> documents keyed "0","1",.. with gaps; version 2/3:
 * data.<f> BinData subtype 7 BSONColumns). *out is overwritten (clear it first if it held rows). False with a
 * one-line reason in err naming what is wrong (not BSON, no control, unknown version, a time missing at a position
 * or not a date, a column of the wrong type or malformed (with its byte offset), columns of different lengths, a
 * count that differs from control.count, or out of memory); *out is then empty. Never reads out of bounds.
 */
bool bucket_unpack(const uint8_t *bucket, size_t len, const bucket_spec *spec, bucket_rows *out, char *err,
                   size_t errlen);
/*
 * The same as bucket_unpack (the same rows, or the same error), doing less when prev holds the rows of an earlier
 * version of the same bucket, prev_bucket[0..prev_len), made by bucket_unpack_next with the same spec: the columns'
 * decoding resumes where their bytes stop being the same (at a Simple-8b block boundary, bcol_mark), only the
 * places whose values may differ are built again, and every document that is the same as prev's at that place is
 * prev's own (docs[i] == prev->docs[i]: a place whose pointer is the same holds the same document). prev may be NULL
 * (prev_bucket is then ignored); prev_bucket must be the very bucket prev was made from (it was checked then, and is
 * not again). Version 2/3 buckets only go on from prev; what the next call needs moves from prev (which keeps its
 * rows: a later call from it decodes in full) to *out. out->same tells how many leading places are prev's, unchanged.
 * When only places were added, out shares prev's arrays (each clears its own rows; prev's places are never written).
 */
bool bucket_unpack_next(const uint8_t *bucket, size_t len, const bucket_spec *spec, const uint8_t *prev_bucket,
                        size_t prev_len, bucket_rows *prev, bucket_rows *out, char *err, size_t errlen);
/* Asks the CPU to bring what bucket_unpack_next reads of r (its arrays' ends, its columns' resume state) into the
 * cache, so that the misses of a bucket not touched for a while overlap each other and the caller's work before the
 * unpack (applying the diff). Changes nothing; r may be zeroed. */
void bucket_rows_prefetch(const bucket_rows *r);
/* Frees what bucket_unpack allocated and zeroes *r. Safe on a zeroed or cleared one. */
void bucket_rows_clear(bucket_rows *r);

/* How bucket_apply_diff_ex treats a diff that does not fit the document. */
typedef enum {
    /* A diff that does not fit is an error: the document is not the one the diff was computed from. */
    BUCKET_DIFF_STRICT = 0,
    /* The server's own application (document_diff_applier.cpp), made for re-applying entries to a document that
     * may already hold later changes: a sub-diff or binary diff of a missing field does nothing, one of a field of
     * another type writes null, a sub-diff of a missing array index writes null. */
    BUCKET_DIFF_IDEMPOTENT = 1,
    /* Or'd into either mode: the caller vouches that the document is valid BSON (libbson made it, or it was
     * validated when it came in), so it is not walked again; the diff is always validated. */
    BUCKET_DIFF_DOC_VALID = 0x10
} bucket_diff_mode;

/*
 * Applies a $v:2 update diff (the value of the oplog entry's o.diff) to doc, writing the new document to *out
 * (bson_init'ed by the function, also on failure; the caller bson_destroy's it). The whole grammar as the server's
 * document_diff_applier.cpp applies it with its existence check for inserts on: object level d/u/i/b/s<field>,
 * array sub-diffs {a: true, l: <newlen>, u<idx>: v, s<idx>: subdiff}, binary diffs
 * `b: {<field>: {o: <offset>, d: BinData}}` (the old bytes [0, o) then d, the old subtype kept). Field order exactly
 * as the server produces: unchanged, updated, sub-diffed and binary-diffed fields stay where they are; deleted ones
 * go; `u` fields the document lacked and then every `i` field (an `i` of a field that exists moves it) are appended,
 * in the diff's order. Strict (BUCKET_DIFF_STRICT): false with a reason on a diff that does not fit the document
 * (a sub-diff of a missing or wrong-typed field, a delete of a missing field, an offset past the end, ...), on a
 * malformed diff and when out of memory.
 */
bool bucket_apply_diff(const uint8_t *doc, size_t len, const uint8_t *diff, size_t diff_len, bson_t *out, char *err,
                       size_t errlen);
bool bucket_apply_diff_ex(const uint8_t *doc, size_t len, const uint8_t *diff, size_t diff_len, bucket_diff_mode mode,
                          bson_t *out, char *err, size_t errlen);

#endif

/*
 * bsoncolumn.h — a decoder for BSONColumn (BinData subtype 7), the column format of compressed time-series buckets.
 *
 * A column holds the values of one field of a bucket's measurements, in order: literal BSON elements, runs of
 * Simple-8b blocks carrying deltas (or deltas of deltas) from the previous value, run-length blocks, and
 * "interleaved" runs that rebuild whole objects and arrays from one stream per leaf of a reference object. Any
 * position may be missing (the measurement had no such field). The format is the server's
 * (src/mongo/bson/column/ in mongodb/mongo: bsoncolumn.cpp, bsoncolumn_util.h, simple8b*.h/.inl,
 * simple8b_type_util.cpp); docs/bsoncolumn.md says what is supported and how it is checked.
 *
 * The bytes come from outside: every malformed column is an error naming the byte offset where decoding stopped,
 * never an over-read; memory use is bounded by a small multiple of the column's size. Pure: libbson only.
 */
#ifndef OPLOG2PG_MAP_BSONCOLUMN_H
#define OPLOG2PG_MAP_BSONCOLUMN_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A good size for an error message. */
#define BCOL_ERR_MAX 200

typedef struct bcol_decoder bcol_decoder;

typedef enum {
    BCOL_VALUE = 1, /* *out holds the next position's value (or says it is missing) */
    BCOL_END = 0,   /* the column's end byte was reached: no more positions */
    BCOL_ERROR = -1 /* malformed column (err says where and why), or out of memory */
} bcol_status;

/*
 * One position of the column. missing: the measurement has no value here (value is then untouched). Otherwise value
 * is borrowed: its strings, binary data and documents point into the column's bytes or the decoder's buffers, and
 * stay valid until the next bcol_decoder_next or bcol_decoder_destroy. Never bson_value_destroy it; copy it
 * (bson_value_copy) to keep it.
 */
typedef struct {
    bool missing;
    bson_value_t value;
} bcol_elem;

/* A decoder over data[0..len) (the BinData's payload, without its length and subtype). data must outlive it. NULL
 * only when out of memory. */
bcol_decoder *bcol_decoder_new(const uint8_t *data, size_t len);
void bcol_decoder_destroy(bcol_decoder *d);

/* The next position. After BCOL_END or BCOL_ERROR every later call returns the same status (err is written each
 * time it returns BCOL_ERROR). err may be NULL. */
bcol_status bcol_decoder_next(bcol_decoder *d, bcol_elem *out, char *err, size_t errlen);

/* Positions so far returned (values and missing ones). */
size_t bcol_decoder_position(const bcol_decoder *d);

/*
 * A point where decoding can resume: a decoder's whole state between two Simple-8b blocks or two control bytes
 * (regular mode). Plain data: copy it freely. Its state is a function of the column's first `prefix` bytes, save
 * that, inside a run (`run` is then the offset of the run's control byte), the column may since have rewritten the
 * run's control byte with more blocks (as the server's builder does when it appends: bsoncolumnbuilder.cpp
 * intermediate).
 */
typedef struct bcol_mark {
    size_t pos;    /* positions returned before it */
    size_t prefix; /* bytes of the column it rests on */
    size_t run;    /* the control byte of the run it is inside or at the end of; SIZE_MAX: none */
    uint64_t state[28];
} bcol_mark;

/* True when d stands where it can resume from (in regular mode, between two blocks or two control bytes, its last
 * value its own or in the column's bytes): *m then holds that point. */
bool bcol_decoder_mark(const bcol_decoder *d, bcol_mark *m);

/*
 * A decoder over data[0..len) that goes on from m, a mark a decoder over old[0..oldlen) passed: exactly the decoder
 * bcol_decoder_new(data, len) would be once it returned m->pos positions. NULL when the column does not continue
 * old's bytes up to m (its first m->prefix bytes differ, beyond a run's control byte counting more blocks of the same
 * kind) or when the column is too short for the run it counts (a fresh decoder then says why); *nomem also when out
 * of memory.
 */
bcol_decoder *bcol_decoder_resume(const uint8_t *data, size_t len, const uint8_t *old, size_t oldlen,
                                  const bcol_mark *m, bool *nomem);

/* Counts the positions of a whole column (decoding it: a malformed column, or running out of memory, is an error;
 * *count is then the positions read before it). */
bool bcol_count(const uint8_t *data, size_t len, size_t *count, char *err, size_t errlen);

/*
 * The column after a $v:2 binary diff `{o: offset, d: BinData}` (how 8.0 servers log an append to a compressed
 * bucket): the old bytes up to offset, then the diff's bytes. offset past the old column's end is an error (and out
 * of memory one too). *out is malloc'd (free it with free), *outlen its size.
 */
bool bcol_apply_binary_diff(const uint8_t *old, size_t oldlen, size_t offset, const uint8_t *diff, size_t difflen,
                            uint8_t **out, size_t *outlen, char *err, size_t errlen);

#endif

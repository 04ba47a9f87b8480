/*
 * bsoncolumn_enc.h — mongosim's BSONColumn encoder: the BinData subtype 7 column format of compressed time-series
 * buckets, written the way the server's BSONColumnBuilder writes it (src/mongo/bson/column/bsoncolumnbuilder.cpp,
 * simple8b_builder.inl, simple8b_helpers.h, simple8b_type_util.cpp, bsoncolumn_util.h; the format overview in
 * src/mongo/bson/column/README.md): literals, delta and delta-of-delta Simple-8b blocks, scaled doubles, run lengths,
 * skips, interleaved sub-objects. Not for use outside tests/mongosim.
 *
 * The encoder keeps the values appended so far; bcenc_finish() encodes them as the server's finalize() would, and
 * bcenc_intermediate() returns what changed since the previous call as an 8.0 oplog append does
 * (`b: {<field>: {o: offset, d: BinData}}`): the new binary is the old one's first `offset` bytes followed by `d`.
 */
#ifndef MONGOSIM_BSONCOLUMN_ENC_H
#define MONGOSIM_BSONCOLUMN_ENC_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct bcenc bcenc_t;

bcenc_t *bcenc_new(void);
void bcenc_free(bcenc_t *enc);

/* Appends the value of the element 'it' points at (its field name is ignored). */
void bcenc_append_iter(bcenc_t *enc, const bson_iter_t *it);
/* Appends a value given as its BSON type and value bytes (as they follow the field name in a document). */
void bcenc_append_raw(bcenc_t *enc, bson_type_t type, const uint8_t *value, size_t len);
/* A measurement without this field. */
void bcenc_skip(bcenc_t *enc);
/* The number of values (skips included) appended so far. */
size_t bcenc_count(const bcenc_t *enc);

/* The whole column as the server's finalize() writes it (the terminating 0x00 included); malloc'd. */
uint8_t *bcenc_finish(const bcenc_t *enc, size_t *len);

/* The change since the previous call, as BSONColumnBuilder::intermediate() reports it: an offset into the binary
 * returned last time and the bytes of the new binary from there on (malloc'd, *dlen of them). The offset is where
 * the server's builder kept its bytes (its open control byte), or further when that byte came out unchanged; it is
 * never past the first byte that differs. The first call returns the whole binary at offset 0. */
uint8_t *bcenc_intermediate(bcenc_t *enc, size_t *offset, size_t *dlen);

/* The binary diff between two column binaries: the length of their common prefix. */
size_t bcenc_diff_offset(const uint8_t *before, size_t blen, const uint8_t *after, size_t alen);

/* For tests: the Simple-8b words the server's Simple8bBuilder writes (simple8b_builder.inl) for a sequence of
 * operations, each kind[i] 0 (append the value hi[i]:lo[i]), 1 (skip) or 2 (flush), then a final flush; 'wide' picks
 * the 128-bit builder. malloc'd, *len bytes (8 per word). */
uint8_t *bcenc_simple8b_words(bool wide, size_t n, const uint8_t *kind, const uint64_t *hi, const uint64_t *lo,
                              size_t *len);

#endif

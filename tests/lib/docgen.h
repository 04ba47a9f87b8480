/*
 * docgen.h — documents and random numbers the benchmarks (and tests) generate, the same in every program that uses
 * them: bench/throughput.c, bench/steady.c, bench/memory.c and bench/collections.c load the sized documents,
 * bench/render.c times their rendering and draws its doubles from the generator, as the dtoa unit suite does.
 */
#ifndef OPLOG2PG_TESTS_DOCGEN_H
#define OPLOG2PG_TESTS_DOCGEN_H

#include <bson/bson.h>
#include <stdint.h>

/* splitmix64: the next number of the stream whose state is *s. */
uint64_t docgen_rng_next(uint64_t *s);

typedef enum { DOC_SMALL, DOC_LARGE } doc_size;

/* Document i of a shape: small (about 320 bytes of BSON: a nested object, an array, a double, a date, and the common
 * scalars) or large (about 10 kB: the same and an array of 40 line items with text). Deterministic from i. */
void docgen_sized_doc(bson_t *d, doc_size size, uint64_t i);

#endif

/*
 * docload.h — documents written into a trial's mongosim in ordered batches: any kind (a maker per document), and the
 * sized documents of tests/lib/docgen.h (about 320 bytes or 10 kB) that several benchmarks load.
 */
#ifndef OPLOG2PG_BENCH_DOCLOAD_H
#define OPLOG2PG_BENCH_DOCLOAD_H

#include <bson/bson.h>
#include <stdint.h>

#include "../../tests/lib/benchtrial.h"
#include "../../tests/lib/docgen.h"

/* Makes document `id` into *d (initialised here). */
typedef void (*docload_maker)(bson_t *d, uint64_t id, void *ctx);

/* Inserts documents first..last (by _id) into db.c0 in ordered batches of 200, each made by make(d, id, ctx). */
void docload_range(trial *t, const char *db, uint64_t first, uint64_t last, docload_maker make, void *ctx);

/* n sized documents into db.c0. */
typedef struct {
    doc_size size;
    uint64_t n;
    char db[64];
} docload_sized;

/* Documents first..last of l's size into l->db.c0 (document 0 is the seed a trial writes before the timing). */
void docload_sized_range(trial *t, const docload_sized *l, uint64_t first, uint64_t last);
/* A backlog_write_fn: documents 1..n, then a CHECKPOINT (as before a psql \copy: each side starts without dirty
 * buffers). */
void docload_write_sized(trial *t, const void *ctx);

#endif

/*
 * dump.h — the source of `replay`: a dump of local.oplog.rs (concatenated BSON, as mongodump writes oplog.rs.bson)
 * read on a thread of its own, decoded and rendered there, and fed to the same queue and apply loop as the oplog
 * reader, so replaying a dump follows exactly the rules of tailing (error policy, dead letters, checkpoint).
 *
 * It is strict about its input: every entry must be one whole, valid BSON document, and every entry's position must
 * come after the one before it. A dump cut inside an entry, followed by anything that is not an entry, or out of
 * oplog order ends with QUEUE_END_BAD_INPUT naming the byte offset and the entry number; an entry the decoder
 * rejects ends with QUEUE_END_UNSUPPORTED. Entries at or before the start position (the committed checkpoint) are
 * skipped, so a replay interrupted anywhere can simply run again. At the end of a good dump it pushes QUEUE_IDLE,
 * then QUEUE_END_DONE.
 *
 * Transactions written over several entries (source/txn.h) are put together as the oplog reader does: chain entries
 * are pushed as noops, and a commit as the parts of one logical entry at its position, read back from the file (see
 * dump.c's NOTES for the index and its memory). A dump beginning inside a chain ends with QUEUE_END_BAD_INPUT at
 * that chain's commit; a chain that is not what a server writes, with QUEUE_END_UNSUPPORTED.
 */
#ifndef OPLOG2PG_SOURCE_DUMP_H
#define OPLOG2PG_SOURCE_DUMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/nsfilter.h"
#include "core/op.h"
#include "core/queue.h"
#include "map/map.h"

typedef struct {
    const char *path;       /* the dump (copied) */
    bool have_start;        /* start holds the committed checkpoint */
    op_pos start;           /* entries at or before it are skipped */
    const nsfilter *filter; /* NULL = everything; must outlive the reader */
    const map_set *maps;    /* typed maps: their ops are projected on the reader's thread, as live; NULL = none */
    bool keep_payload;      /* keep each op's raw BSON (for dead letters); false drops it once rendered */
} dump_config;

typedef struct {
    uint64_t entries; /* pushed */
    uint64_t skipped; /* at or before the start */
    bool have_last;
    op_pos last; /* the last entry pushed */
} dump_stats;

typedef struct dump_reader dump_reader;

/* Opens the file and starts the thread; NULL with err when the file cannot be opened. */
dump_reader *dump_start(const dump_config *cfg, queue *q, char *err, size_t errlen);
/* Asks the thread to end and joins it (idempotent). */
void dump_stop(dump_reader *d);
void dump_free(dump_reader *d);
void dump_get_stats(const dump_reader *d, dump_stats *out);

#endif

/*
 * memory.h — the allocator the daemon runs on, and when it hands memory back to the system.
 *
 * The daemon is linked with tcmalloc (gperftools' tcmalloc_minimal, Debian's libtcmalloc-minimal4), except in
 * sanitizer builds, which keep glibc's malloc under AddressSanitizer. The reason is measured, not assumed
 * (docs/benchmarks.md, "The allocator"): on the replication path every entry is decoded and rendered on the reader
 * thread and freed on the apply loop, and every getMore reply is a buffer of several MB.
 *   - glibc frees a block into the arena of the thread that allocated it, under that arena's lock: the apply loop's
 *     frees fight the reader's mallocs for it, and the losers sleep in futex calls (hundreds of context switches per
 *     thousand rows);
 *   - glibc serves large blocks with fresh mappings (or from secondary heaps that are unmapped once empty), so each
 *     getMore reply costs a page fault per 4 kB, twice (libmongoc's receive buffer and the reply it copies).
 * tcmalloc frees into per-thread caches and keeps freed spans for reuse. On a typed-table backlog the daemon's CPU
 * per row fell from 9 to 17 us to about 5, and its page faults tenfold.
 *
 * What tcmalloc keeps is bounded: the thread caches together at most MEMORY_THREAD_CACHE_BYTES, and free spans are
 * handed back to the system by memory_release, which the apply loop calls once the daemon is caught up and quiet, so a
 * daemon at rest after a burst of large documents does not go on holding them.
 */
#ifndef OPLOG2PG_UTIL_MEMORY_H
#define OPLOG2PG_UTIL_MEMORY_H

#include <stdbool.h>
#include <stddef.h>

#define MEMORY_THREAD_CACHE_BYTES (4u * 1024 * 1024)

/* Sets the allocator up for `run` and `replay` (tcmalloc: the thread caches' bound; glibc: a fixed mmap threshold,
 * so large buffers are unmapped when freed, and at most four arenas). */
void memory_setup(void);

/* Gives free memory back to the system (tcmalloc: its free spans; glibc: malloc_trim). */
void memory_release(void);

#endif

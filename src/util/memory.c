/*
 * memory.c — see memory.h.
 */
#include "util/memory.h"

#include <malloc.h>

#ifdef OPLOG2PG_TCMALLOC
#include <gperftools/malloc_extension_c.h>
#endif

void memory_setup(void)
{
#ifdef OPLOG2PG_TCMALLOC
    MallocExtension_SetNumericProperty("tcmalloc.max_total_thread_cache_bytes", MEMORY_THREAD_CACHE_BYTES);
#else
    /* Large buffers (a 16 MB document's text) are mapped and unmapped, never kept in the heap after use: a fixed
     * threshold stops glibc from raising it after the first large free. */
    mallopt(M_MMAP_THRESHOLD, 512 * 1024);
    mallopt(M_ARENA_MAX, 4);
#endif
}

void memory_release(void)
{
#ifdef OPLOG2PG_TCMALLOC
    MallocExtension_ReleaseFreeMemory();
#else
    malloc_trim(0);
#endif
}

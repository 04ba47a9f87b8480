/*
 * dump.c — fuzz target: a whole oplog dump (concatenated BSON, as mongodump writes oplog.rs.bson) read by `replay`'s
 * source (source/dump/dump.h) on its own thread, as `oplog2pg replay` reads a file: the framing of each entry, the
 * order of positions, the reassembly of transactions written over several entries (read back from the file), the
 * decoder and the rendering of every entry. The input is put in an anonymous memory file; the target pops every item
 * until the reader ends, which it must do with exactly one QUEUE_END.
 */
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/queue.h"
#include "fuzz.h"
#include "source/dump/dump.h"

static void wake(void *arg)
{
    sem_post(arg);
}

int fuzz_dump(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz-dump", MFD_CLOEXEC);
    FUZZ_CHECK(fd >= 0);
    size_t off = 0;
    while (off < size) {
        ssize_t n = write(fd, data + off, size - off);
        FUZZ_CHECK(n > 0);
        off += (size_t)n;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);

    sem_t sem;
    sem_init(&sem, 0, 0);
    queue *q = queue_new(1u << 20, 0);
    FUZZ_CHECK(q != NULL);
    queue_set_notify(q, wake, &sem);
    dump_config cfg = {.path = path};
    char err[512];
    dump_reader *d = dump_start(&cfg, q, err, sizeof err);
    FUZZ_CHECK(d != NULL);
    int ends = 0;
    while (ends == 0) {
        queue_item it;
        bool any = false;
        while (queue_pop(q, &it)) {
            any = true;
            if (it.type == QUEUE_END)
                ends++;
            queue_item_clear(&it);
        }
        queue_release(q);
        if (!any && ends == 0)
            sem_wait(&sem);
    }
    dump_stop(d);
    queue_item it;
    while (queue_pop(q, &it)) {
        FUZZ_CHECK(it.type != QUEUE_END); /* one end, and nothing after it */
        queue_item_clear(&it);
    }
    dump_free(d);
    queue_free(q);
    sem_destroy(&sem);
    close(fd);
    return 0;
}

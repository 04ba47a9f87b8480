/*
 * memory.c — the daemon's peak memory with a long backlog and with the largest documents.
 *
 *   bench/memory [N [M]]   the daemon's peak resident memory (VmHWM, its whole life) with a backlog of N small inserts
 *                          (default 10 000 000) and with M documents of 16 MB (default 40; every other one binary);
 *                          0 skips either. The goal: at most 64 MB.
 *
 * Run by bench/run.sh under `make bench`. How a trial is timed: bench/lib/backlog.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/backlog.h"
#include "lib/baseline.h"
#include "lib/docload.h"
#include "lib/program.h"

/* Documents of about 16 MB: `_id` i and (16 MB - 1 kB) of letters, as a string or, every other one, as binary, so the
 * oplog entry stays within the 16 MB a server allows a user document (BSONObjMaxUserSize). */
#define HUGE_PAD (16 * 1024 * 1024 - 1024)

static void write_huge(trial *t, const void *ctx)
{
    const docload_sized *l = ctx;
    char *pad = malloc(HUGE_PAD + 1);
    if (pad == NULL)
        bench_die("out of memory");
    mongoc_collection_t *coll = mongoc_client_get_collection(t->client, l->db, "c0");
    for (uint64_t i = 1; i <= l->n; i++) {
        memset(pad, 'a' + (int)(i % 26), HUGE_PAD);
        pad[HUGE_PAD] = '\0';
        /* every other one binary: its text (base64) is a third longer than its BSON */
        bson_t *d = i % 2 ? BCON_NEW("_id", BCON_INT64((int64_t)i), "pad", BCON_UTF8(pad))
                          : BCON_NEW("_id", BCON_INT64((int64_t)i), "pad",
                                     BCON_BIN(BSON_SUBTYPE_BINARY, (const uint8_t *)pad, HUGE_PAD));
        bson_error_t err;
        if (!mongoc_collection_insert_one(coll, d, NULL, NULL, &err))
            bench_die("inserting a 16 MB document: %s", err.message);
        bson_destroy(d);
    }
    mongoc_collection_destroy(coll);
    free(pad);
}

/* The memory goal: the daemon's peak resident memory (VmHWM, its whole life) at most 64 MB with a backlog of
 * n small inserts (default 10 million), and with m documents of 16 MB (default 40). */
static void bench_memory(uint64_t n, uint64_t m)
{
    printf(
        "| backlog | entries | oplog MB | seconds | entries/s | daemon peak RSS |\n|---|---:|---:|---:|---:|---:|\n");
    for (int k = 0; k < 2; k++) {
        uint64_t count = k ? m : n;
        if (count == 0)
            continue;
        trial t;
        trial_open(&t, k ? "memhuge" : "memmany", "batched");
        docload_sized l = {.size = DOC_SMALL, .n = count};
        snprintf(l.db, sizeof l.db, "%s0", t.prefix);
        trial_write_ini(&t, "batched", "");
        docload_sized_range(&t, &l, 0, 0);
        long peak = -1;
        double secs = backlog_timed(&t, k ? write_huge : docload_write_sized, &l, NULL, NULL, &peak, NULL);
        char qtable[128];
        snprintf(qtable, sizeof qtable, "%s.c0", l.db);
        baseline_expect_rows(&t, qtable, count + 1);
        double mb = k ? (double)count * 16.0 : (double)count * 430.0 / 1e6;
        printf("| %s | %llu | %.0f | %.1f | %.0f | **%.1f MB** |\n",
               k ? "documents of 16 MB" : "small inserts (about 320-byte documents)", (unsigned long long)count, mb,
               secs, (double)count / secs, (double)peak / 1024.0);
        fflush(stdout);
        trial_close(&t);
    }
}

int main(int argc, char **argv)
{
    program_start("bench/memory", argv[0], "[N [M]]");
    bench_memory(program_arg(argc, argv, 1, 10000000), program_arg(argc, argv, 2, 40));
    return program_end();
}

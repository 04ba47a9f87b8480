/*
 * inserts.c — insert-only throughput against psql \copy of the same rows.
 *
 *   bench/inserts [N]   N inserts (default 1 000 000) replicated by oplog2pg tailing the oplog, then by `oplog2pg
 *                       replay` of a dump of the same entries, against psql \copy of the same rows into the same table
 *                       shape; reports the daemon's peak memory
 *
 * Run by bench/run.sh under `make bench` and by bench/compare-builds.sh. How a trial is timed: bench/lib/backlog.h.
 */
#include <stdio.h>

#include "lib/backlog.h"
#include "lib/baseline.h"
#include "lib/program.h"

static void bench_inserts(uint64_t n)
{
    trial t;
    trial_open(&t, "ins", "batched");
    workload_config wc;
    backlog_inserts_config(&wc, &t, 77, n, 1);
    long peak_kb = -1;
    double daemon_s = backlog_workload(&t, &wc, &peak_kb);

    /* The same entries by `oplog2pg replay` of a dump of the oplog, from the same checkpoint, into empty tables. */
    char dump[128], sql[512];
    snprintf(dump, sizeof dump, "%s/oplog.bson", t.dir);
    baseline_dump_oplog(t.client, dump, NULL);
    snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s0 CASCADE", t.prefix);
    bench_exec_sql(t.pg, sql);
    backlog_rewind(&t);
    double replay_s = backlog_replay(&t, dump, NULL);

    /* The same rows by psql \copy into a table of the same shape, on the same server. */
    char path[128], db[64];
    snprintf(path, sizeof path, "%s/rows.copy", t.dir);
    snprintf(db, sizeof db, "%s0", t.prefix);
    uint64_t rows = baseline_dump_collection(t.client, db, "c0", path);
    double copy_s = baseline_copy(t.pg, "public.bench_copy", BASELINE_SAME_SHAPE, "(_id, doc)", path, "", NULL);
    trial_close(&t);

    double daemon_rate = (double)n / daemon_s, copy_rate = (double)rows / copy_s;
    printf("| what | rows | seconds | rows/s |\n|---|---:|---:|---:|\n");
    printf("| psql \\copy (the same key and document text, same table shape) | %llu | %.2f | %.0f |\n",
           (unsigned long long)rows, copy_s, copy_rate);
    printf("| oplog2pg, tailing the oplog of those inserts | %llu | %.2f | %.0f |\n", (unsigned long long)n, daemon_s,
           daemon_rate);
    printf("| oplog2pg replay of a dump of that oplog (start-up included) | %llu | %.2f | %.0f |\n",
           (unsigned long long)n, replay_s, (double)n / replay_s);
    printf("\noplog2pg reached %.0f%% of the COPY rate tailing and %.0f%% replaying; its peak resident memory was "
           "%.1f MB\n",
           100.0 * daemon_rate / copy_rate, 100.0 * ((double)n / replay_s) / copy_rate, (double)peak_kb / 1024.0);
}

int main(int argc, char **argv)
{
    program_start("bench/inserts", argv[0], "[N]");
    uint64_t n = program_arg(argc, argv, 1, 0);
    bench_inserts(n ? n : 1000000);
    return program_end();
}

/*
 * throughput.c — insert throughput of the jsonb table shape, small and large documents, against psql \copy.
 *
 *   bench/throughput [N [M]]   N inserts of ~320-byte documents (default 300 000) and M of ~10 kB (default 30 000;
 *                              0 skips either): oplog2pg tailing them, `oplog2pg replay` of a dump of the same entries,
 *                              and psql \copy of the very rows into a table LIKE the daemon's; BENCH_THROUGHPUT_REPS
 *                              trials each (default 3, at most 9), medians of the trials' own ratios
 *
 * Run by bench/run.sh under `make bench`. How a trial is timed: bench/lib/backlog.h.
 */
#include <stdio.h>

#include "../tests/lib/proc.h"
#include "lib/backlog.h"
#include "lib/baseline.h"
#include "lib/docload.h"
#include "lib/program.h"
#include "lib/stats.h"

typedef struct {
    double tail_s, replay_s, copy_s, cpu_s, sim_cpu_s, pg_cpu_s, copy_pg_cpu_s;
    long peak_kb;
    long long file_bytes;
} sized_result;

/* One side-by-side trial: oplog2pg tails the n inserts of a fresh mongosim into the jsonb table (_id text key, doc
 * jsonb); then `oplog2pg replay` of a dump of the same oplog entries, from the same checkpoint, into the same table
 * emptied; then psql \copy of the very rows oplog2pg wrote (COPY ... TO, text) into a fresh table made LIKE it
 * (same columns, collation, primary key, no generated column). */
static sized_result sized_trial(doc_size size, uint64_t n, int rep)
{
    trial t;
    char name[32], qtable[128], sql[1024], path[160], dump[160];
    snprintf(name, sizeof name, "%s%d", size == DOC_LARGE ? "big" : "sml", rep);
    trial_open(&t, name, "batched");
    docload_sized l = {.size = size, .n = n};
    snprintf(l.db, sizeof l.db, "%s0", t.prefix);
    trial_write_ini(&t, "batched", "");
    docload_sized_range(&t, &l, 0, 0); /* the seed document, so that the table exists before the timing */
    sized_result res = {.peak_kb = -1};
    res.tail_s = backlog_timed(&t, docload_write_sized, &l, NULL, NULL, &res.peak_kb, &res.cpu_s);
    res.sim_cpu_s = t.sim_cpu_s;
    res.pg_cpu_s = t.pg_cpu_s;
    snprintf(qtable, sizeof qtable, "%s.c0", l.db);
    baseline_expect_rows(&t, qtable, n + 1);
    proc_stop(&t.daemon, 60);
    t.daemon.pid = 0;

    /* replay: the same entries from a dump, from the same checkpoint, into the table emptied of them */
    snprintf(dump, sizeof dump, "%s/oplog.bson", t.dir);
    baseline_dump_oplog(t.client, dump, NULL);
    snprintf(path, sizeof path, "%s/rows.copy", t.dir);
    baseline_dump_rows(qtable, path);
    res.file_bytes = baseline_file_bytes(path);
    snprintf(sql, sizeof sql, "DELETE FROM %s WHERE doc->>'n' <> '0'", qtable); /* all but the seed (n 0) */
    bench_exec_sql(t.pg, sql);
    snprintf(sql, sizeof sql, "VACUUM %s", qtable);
    bench_exec_sql(t.pg, sql);
    backlog_rewind(&t);
    bench_exec_sql(t.pg, "CHECKPOINT");
    res.replay_s = backlog_replay(&t, dump, NULL);
    baseline_expect_rows(&t, qtable, n + 1);

    char like[200];
    snprintf(like, sizeof like, "(LIKE %s INCLUDING ALL)", qtable);
    res.copy_s = baseline_copy(t.pg, "public.bench_sized_copy", like, "", path, "", &res.copy_pg_cpu_s);
    trial_close(&t);
    return res;
}

/* The throughput goal: tailing at least 0.9 of psql \copy of the same rows into the same shape, for small and
 * large documents, and replay at least as fast as tailing; reps side-by-side trials each (BENCH_THROUGHPUT_REPS,
 * default 3), medians of the trials' own ratios. */
static void bench_throughput(uint64_t n_small, uint64_t n_large)
{
    int reps = stats_reps("BENCH_THROUGHPUT_REPS", 3);
    for (int s = 0; s < 2; s++) {
        doc_size size = s ? DOC_LARGE : DOC_SMALL;
        uint64_t n = s ? n_large : n_small;
        if (n == 0)
            continue;
        double tail[STATS_MAX_RUNS], replay[STATS_MAX_RUNS], copy[STATS_MAX_RUNS], rt[STATS_MAX_RUNS],
            rr[STATS_MAX_RUNS], cpu_us[STATS_MAX_RUNS];
        long peak = 0;
        sized_result r = {0};
        for (int i = 0; i < reps; i++) {
            r = sized_trial(size, n, i);
            tail[i] = (double)n / r.tail_s;
            replay[i] = (double)n / r.replay_s;
            copy[i] = (double)n / r.copy_s;
            rt[i] = tail[i] / copy[i];
            rr[i] = replay[i] / copy[i];
            cpu_us[i] = r.cpu_s * 1e6 / (double)n;
            if (r.peak_kb > peak)
                peak = r.peak_kb;
            fprintf(stderr,
                    "throughput %s run %d: tailing %.0f rows/s (%.2fx; daemon %.1f, mongosim %.1f, PostgreSQL %.1f us "
                    "CPU/row), replay %.0f rows/s (%.2fx), psql \\copy %.0f rows/s (PostgreSQL %.1f us CPU/row)\n",
                    s ? "large" : "small", i + 1, tail[i], rt[i], cpu_us[i], r.sim_cpu_s * 1e6 / (double)n,
                    r.pg_cpu_s * 1e6 / (double)n, replay[i], rr[i], copy[i], r.copy_pg_cpu_s * 1e6 / (double)n);
        }
        printf("%s### %s documents (about %s of BSON each)\n\n%llu inserts; the rows as COPY text are %.1f MB.\n\n",
               s ? "\n" : "", s ? "Large" : "Small", s ? "10 kB" : "320 bytes", (unsigned long long)n,
               (double)r.file_bytes / 1e6);
        printf("| what | rows/s, median of %d | the runs, in order (rows/s) |\n|---|---:|---|\n", reps);
        printf("| psql \\copy of the same rows, same table | %.0f |", stats_median(copy, reps));
        stats_print_runs(copy, reps);
        printf(" |\n| oplog2pg, tailing the oplog of those inserts | %.0f |", stats_median(tail, reps));
        stats_print_runs(tail, reps);
        printf(" |\n| oplog2pg replay of a dump of that oplog (start-up included) | %.0f |",
               stats_median(replay, reps));
        stats_print_runs(replay, reps);
        double lo, hi;
        stats_range(rt, reps, &lo, &hi);
        printf(
            " |\n\nTailing / psql \\copy: **%.2fx** (%.2fx to %.2fx); replay / psql \\copy: **%.2fx**. The daemon used "
            "%.1f us of CPU per row tailing (all threads, median) and at most %.1f MB of resident memory.\n",
            stats_median(rt, reps), lo, hi, stats_median(rr, reps), stats_median(cpu_us, reps), (double)peak / 1024.0);
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    program_start("bench/throughput", argv[0], "[N [M]]");
    bench_throughput(program_arg(argc, argv, 1, 300000), program_arg(argc, argv, 2, 30000));
    return program_end();
}

/*
 * streams.c — the change-stream source against the oplog source, on the same workload.
 *
 *   bench/streams [N]   N writes (default 100 000) of tests/lib/workload.h's mixed workload (inserts, updates,
 *                       replaces, deletes and a little DDL, the same seed each time), applied by oplog2pg reading
 *                       the oplog, and reading a change stream with the raw `$v:2` diff and with updateDescription;
 *                       BENCH_STREAMS_REPS trials of each (default 3, at most 9), in turn, so that each trial of one
 *                       source has its neighbours of the others beside it
 *
 * Prints, per source: writes applied per second and the daemon's CPU microseconds per write (all threads: the reader
 * decoding events, the apply loop), each the median and range of the trials, and the medians of the per-trial ratios
 * against the oplog source. The goal: the daemon's CPU per event within 1.5x of the oplog path. mongosim's own CPU is
 * printed apart (building change events from its oplog is the server's cost, not oplog2pg's). How a trial is timed:
 * bench/lib/backlog.h.
 */
#include <stdio.h>
#include <stdlib.h>

#include "lib/backlog.h"
#include "lib/program.h"
#include "lib/stats.h"

enum { OPLOG = 0, RAW, DESCRIPTION, SOURCES };
static const char *const source_name[SOURCES] = {"oplog", "change stream, raw $v:2 diff",
                                                 "change stream, updateDescription"};
static const char *const source_ini[SOURCES] = {
    "[mongodb]\nsource = oplog\n",
    "[mongodb]\nsource = change_stream\nchange_stream_updates = raw\n",
    "[mongodb]\nsource = change_stream\nchange_stream_updates = description\n",
};

typedef struct {
    double writes_s, cpu_us, sim_cpu_us;
} stream_result;

static stream_result stream_trial(int source, uint64_t n, int rep)
{
    trial t;
    char name[32];
    snprintf(name, sizeof name, "cs%d_%d", source, rep);
    trial_open(&t, name, "batched");
    trial_write_ini(&t, "batched", source_ini[source]);
    workload_config wc;
    workload_config_init(&wc);
    wc.seed = 3300 + (uint64_t)rep;
    wc.ops = n;
    wc.db_prefix = t.prefix;
    wc.n_databases = 2;
    wc.n_namespaces = 6;
    double cpu_s = 0;
    double secs = backlog_workload_cpu(&t, &wc, NULL, &cpu_s);
    stream_result r = {
        .writes_s = (double)n / secs, .cpu_us = cpu_s * 1e6 / (double)n, .sim_cpu_us = t.sim_cpu_s * 1e6 / (double)n};
    trial_close(&t);
    return r;
}

int main(int argc, char **argv)
{
    program_start("bench/streams", argv[0], "[N]");
    uint64_t n = program_arg(argc, argv, 1, 0);
    if (n == 0)
        n = 100000;
    int reps = stats_reps("BENCH_STREAMS_REPS", 3);
    double rate[SOURCES][STATS_MAX_RUNS], cpu[SOURCES][STATS_MAX_RUNS], sim[SOURCES][STATS_MAX_RUNS];
    double rate_ratio[SOURCES][STATS_MAX_RUNS], cpu_ratio[SOURCES][STATS_MAX_RUNS];
    for (int rep = 0; rep < reps; rep++) {
        for (int s = 0; s < SOURCES; s++) {
            stream_result r = stream_trial(s, n, rep);
            rate[s][rep] = r.writes_s;
            cpu[s][rep] = r.cpu_us;
            sim[s][rep] = r.sim_cpu_us;
        }
        for (int s = 0; s < SOURCES; s++) {
            rate_ratio[s][rep] = rate[s][rep] / rate[OPLOG][rep];
            cpu_ratio[s][rep] = cpu[s][rep] / cpu[OPLOG][rep];
        }
    }
    printf("%llu writes of the mixed workload, median of %d trials (range)\n\n", (unsigned long long)n, reps);
    printf("| source | writes/s | of the oplog source | daemon CPU per write (µs) | of the oplog source | mongosim CPU "
           "per write (µs) |\n");
    printf("|---|---:|---:|---:|---:|---:|\n");
    for (int s = 0; s < SOURCES; s++) {
        double rlo, rhi, clo, chi;
        stats_range(rate[s], reps, &rlo, &rhi);
        stats_range(cpu[s], reps, &clo, &chi);
        printf("| %s | %.0f (%.0f–%.0f) | %.2fx | %.1f (%.1f–%.1f) | %.2fx | %.1f |\n", source_name[s],
               stats_median(rate[s], reps), rlo, rhi, stats_median(rate_ratio[s], reps), stats_median(cpu[s], reps),
               clo, chi, stats_median(cpu_ratio[s], reps), stats_median(sim[s], reps));
    }
    return program_end();
}

/*
 * copy.c — the initial copy (`run --import-only`) with one worker and with four, against psql \copy.
 *
 *   bench/copy [N]   the initial copy of N documents (default 1 000 000) in 4 collections, with 1 and 4 workers
 *                    (BENCH_COPY_WORKERS), against psql \copy of the same rows (one session, and four at once), in
 *                    BENCH_COPY_REPS rounds (default 3, at most 9)
 *
 * Run by bench/run.sh under `make bench`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../tests/lib/proc.h"
#include "lib/backlog.h"
#include "lib/baseline.h"
#include "lib/program.h"
#include "lib/stats.h"

/* The initial copy of n documents in 4 collections, in BENCH_COPY_REPS rounds (default 3, at most 9). A round runs
 * `run --import-only` with 1 worker, then psql \copy of the very rows that run wrote (the four tables one after
 * another in one session, then all four at once in four sessions: what PostgreSQL itself reaches with four writers
 * here), then the copy with 4 workers, so each ratio compares runs made side by side. Before each side, CHECKPOINT:
 * neither pays for the other's dirty buffers. BENCH_COPY_WORKERS="1 2" sets other worker counts (the first is the one
 * psql \copy follows); BENCH_PERF=FILE records each daemon run with `perf record` into
 * FILE.<service>.w<workers>.r<round> (those runs are slower and not the figures to report). */

/* What one side of a round cost: its wall time, and the CPU time of the daemon (every thread), of mongosim and of
 * PostgreSQL (every process) over it; the daemon's peak resident memory. */
typedef struct {
    double secs, daemon_cpu_s, sim_cpu_s, pg_cpu_s;
    long peak_kb;
} copy_side;

/* One `run --import-only` from nothing: the schema dropped, the copy state and the checkpoint forgotten. */
static copy_side copy_daemon_run(trial *t, const char *db, int workers, int round)
{
    char sql[512], extra[64], bin[256], err[512];
    snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s CASCADE", db);
    bench_exec_sql(t->pg, sql);
    snprintf(sql, sizeof sql, "DELETE FROM oplog2pg.copy_state WHERE service = '%s'", t->service);
    PQclear(PQexec(t->pg, sql));
    snprintf(sql, sizeof sql, "DELETE FROM oplog2pg.checkpoint WHERE service = '%s'", t->service);
    PQclear(PQexec(t->pg, sql));
    snprintf(extra, sizeof extra, "[copy]\nworkers = %d\n", workers);
    trial_write_ini(t, "batched", extra);
    bench_exec_sql(t->pg, "CHECKPOINT");
    snprintf(bin, sizeof bin, "%s/oplog2pg", proc_build_dir());
    const char *argv[] = {bin, "-c", t->ini, "run", "--import-only", NULL};
    copy_side s = {.peak_kb = -1};
    double pg0 = bench_cluster_cpu_seconds(t->pg), sim0 = bench_cpu_seconds(t->sim.pid), t0 = bench_now_s();
    if (!proc_start(argv, NULL, t->log, &t->daemon, err, sizeof err))
        bench_die("%s", err);
    proc_handle perf = {0};
    const char *perf_out = getenv("BENCH_PERF");
    if (perf_out != NULL && *perf_out != '\0') {
        char pid[16], out[256], plog[160];
        snprintf(pid, sizeof pid, "%d", (int)t->daemon.pid);
        snprintf(out, sizeof out, "%s.%s.w%d.r%d", perf_out, t->service, workers, round);
        snprintf(plog, sizeof plog, "%s/perf.log", t->dir);
        const char *pargv[] = {"perf", "record", "-q", "-e", "cpu-clock", "-F", "999",
                               "-g",   "-p",     pid,  "-o", out,         NULL};
        if (!proc_start(pargv, NULL, plog, &perf, err, sizeof err))
            bench_die("%s", err);
    }
    /* Until it exits: its CPU time and peak memory, sampled (the last sample is at most 100 ms old). */
    double cpu = 0;
    while (!proc_wait(&t->daemon, 0.1)) {
        double c = bench_cpu_seconds(t->daemon.pid);
        long kb = proc_peak_kb(t->daemon.pid);
        cpu = c > cpu ? c : cpu;
        s.peak_kb = kb > s.peak_kb ? kb : s.peak_kb;
    }
    s.secs = bench_now_s() - t0;
    s.daemon_cpu_s = cpu;
    s.sim_cpu_s = bench_cpu_seconds(t->sim.pid) - sim0;
    usleep(100000); /* the copy's backends end after the daemon: then their time is the postmaster's cutime */
    s.pg_cpu_s = bench_cluster_cpu_seconds(t->pg) - pg0;
    if (proc_exit_code(&t->daemon) != 0)
        bench_die("oplog2pg --import-only failed; see %s", t->log);
    t->daemon.pid = 0;
    if (perf.pid != 0)
        proc_wait(&perf, 120);
    return s;
}

/* psql \copy of the four dumps into fresh tables made LIKE the daemon's (same columns, types, collations, primary
 * key): one after another in one psql (script), or, with script NULL, in four psql sessions at once, one table each
 * (PostgreSQL's own ceiling for four writers on this machine, which the copy's workers cannot pass). */
static copy_side copy_psql_run(trial *t, const char *db, const char *script)
{
    char sql[512];
    bench_exec_sql(t->pg, "DROP SCHEMA IF EXISTS bench_psql CASCADE");
    bench_exec_sql(t->pg, "CREATE SCHEMA bench_psql");
    for (int i = 0; i < 4; i++) {
        snprintf(sql, sizeof sql, "CREATE TABLE bench_psql.c%d (LIKE %s.c%d INCLUDING ALL)", i, db, i);
        bench_exec_sql(t->pg, sql);
    }
    bench_exec_sql(t->pg, "CHECKPOINT");
    char err[512], lines[4][300];
    for (int i = 0; i < 4; i++)
        snprintf(lines[i], sizeof lines[i], "\\copy bench_psql.c%d from '%s/c%d.copy'", i, t->dir, i);
    copy_side s = {.peak_kb = -1};
    double pg0 = bench_cluster_cpu_seconds(t->pg), sim0 = bench_cpu_seconds(t->sim.pid), t0 = bench_now_s();
    proc_handle psql[4] = {{0}};
    int sessions = script != NULL ? 1 : 4;
    for (int i = 0; i < sessions; i++) {
        const char *argv[] = {
            "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", script ? "-f" : "-c", script ? script : lines[i], NULL};
        if (!proc_start(argv, NULL, NULL, &psql[i], err, sizeof err))
            bench_die("%s", err);
    }
    for (int i = 0; i < sessions; i++)
        proc_wait(&psql[i], 3600);
    s.secs = bench_now_s() - t0;
    for (int i = 0; i < sessions; i++)
        if (proc_exit_code(&psql[i]) != 0)
            bench_die("psql \\copy failed");
    s.sim_cpu_s = bench_cpu_seconds(t->sim.pid) - sim0;
    usleep(100000); /* psql's backend ends after psql: then its time is the postmaster's cutime */
    s.pg_cpu_s = bench_cluster_cpu_seconds(t->pg) - pg0;
    bench_exec_sql(t->pg, "DROP SCHEMA bench_psql CASCADE");
    return s;
}

/* The rows the daemon wrote into db.c0..c3, dumped as COPY text for the psql side, and the psql script that loads
 * them; the number of rows. */
static uint64_t copy_dump_rows(trial *t, const char *db, const char *script)
{
    FILE *f = fopen(script, "w");
    if (!f)
        bench_die("cannot write %s", script);
    uint64_t rows = 0;
    for (int i = 0; i < 4; i++) {
        char qtable[96], path[200];
        snprintf(qtable, sizeof qtable, "%s.c%d", db, i);
        snprintf(path, sizeof path, "%s/c%d.copy", t->dir, i);
        baseline_dump(qtable, path, "");
        rows += baseline_count_rows(t->pg, qtable);
        fprintf(f, "\\copy bench_psql.c%d from '%s'\n", i, path);
    }
    fclose(f);
    return rows;
}

static void bench_copy(uint64_t n)
{
    int reps = stats_reps("BENCH_COPY_REPS", 3);
    int workers[4] = {1, 4}, nw = 2;
    const char *env = getenv("BENCH_COPY_WORKERS");
    if (env != NULL && *env != '\0') {
        char *end;
        const char *p = env;
        for (nw = 0; nw < 4 && *p != '\0'; p = end) {
            long w = strtol(p, &end, 10);
            if (end == p || w < 1 || w > 64)
                bench_die("BENCH_COPY_WORKERS: worker counts from 1 to 64, at most 4 of them");
            workers[nw++] = (int)w;
        }
    }
    trial t;
    trial_open(&t, "cp", "batched");
    workload_config wc;
    backlog_inserts_config(&wc, &t, 88, n, 4);
    workload_stats st;
    char err[512], db[64], script[200];
    if (!workload_run(t.uri, &wc, &st, err, sizeof err))
        bench_die("workload: %s", err);
    snprintf(db, sizeof db, "%s0", t.prefix);
    snprintf(script, sizeof script, "%s/copy.sql", t.dir);

    double rate[4][STATS_MAX_RUNS], ratio[4][STATS_MAX_RUNS], psql_rate[STATS_MAX_RUNS], cpu_us[4][STATS_MAX_RUNS],
        sim_us[4][STATS_MAX_RUNS], pg_us[4][STATS_MAX_RUNS], psql_pg_us[STATS_MAX_RUNS];
    double par_rate[STATS_MAX_RUNS], par_ratio[STATS_MAX_RUNS], par_pg_us[STATS_MAX_RUNS];
    long peak[4] = {-1, -1, -1, -1};
    uint64_t rows = 0;
    for (int r = 0; r < reps; r++) {
        for (int w = 0; w < nw; w++) {
            copy_side s = copy_daemon_run(&t, db, workers[w], r);
            double docs = (double)st.live_docs;
            rate[w][r] = docs / s.secs;
            cpu_us[w][r] = s.daemon_cpu_s * 1e6 / docs;
            sim_us[w][r] = s.sim_cpu_s * 1e6 / docs;
            pg_us[w][r] = s.pg_cpu_s * 1e6 / docs;
            peak[w] = s.peak_kb > peak[w] ? s.peak_kb : peak[w];
            if (w == 0) {
                if (r == 0 && (rows = copy_dump_rows(&t, db, script)) != st.live_docs)
                    bench_die("the copy wrote %llu rows, not %llu; see %s", (unsigned long long)rows,
                              (unsigned long long)st.live_docs, t.log);
                copy_side psql = copy_psql_run(&t, db, script);
                psql_rate[r] = (double)rows / psql.secs;
                psql_pg_us[r] = psql.pg_cpu_s * 1e6 / (double)rows;
                copy_side par = copy_psql_run(&t, db, NULL);
                par_rate[r] = (double)rows / par.secs;
                par_ratio[r] = par_rate[r] / psql_rate[r];
                par_pg_us[r] = par.pg_cpu_s * 1e6 / (double)rows;
            }
            fprintf(stderr,
                    "copy round %d, %d worker%s: %.0f docs/s (daemon %.1f, mongosim %.1f, PostgreSQL %.1f us "
                    "CPU/doc, peak %.1f MB)\n",
                    r + 1, workers[w], workers[w] > 1 ? "s" : "", rate[w][r], cpu_us[w][r], sim_us[w][r], pg_us[w][r],
                    (double)s.peak_kb / 1024.0);
            if (w == 0)
                fprintf(stderr,
                        "copy round %d, psql \\copy: %.0f rows/s (PostgreSQL %.1f us CPU/row); four at once: %.0f "
                        "rows/s (%.1f us)\n",
                        r + 1, psql_rate[r], psql_pg_us[r], par_rate[r], par_pg_us[r]);
        }
        for (int w = 0; w < nw; w++)
            ratio[w][r] = rate[w][r] / psql_rate[r];
    }
    trial_close(&t);

    printf("%llu documents in 4 collections, %d rounds; psql \\copy loads the rows the copy wrote (dumped with psql "
           "\\copy ... to) into 4 fresh tables LIKE the copy's, one after another.\n\n",
           (unsigned long long)st.live_docs, reps);
    printf("| what | documents/s, median of %d | the runs, in order | of the psql \\copy rate: median (range) | "
           "CPU us/doc: daemon, mongosim, PostgreSQL | peak RSS |\n|---|---:|---|---:|---|---:|\n",
           reps);
    printf("| psql \\copy, the 4 tables one after another | %.0f |", stats_median(psql_rate, reps));
    stats_print_runs(psql_rate, reps);
    printf(" | 1.00 | -, -, %.1f | |\n", stats_median(psql_pg_us, reps));
    double plo, phi;
    stats_range(par_ratio, reps, &plo, &phi);
    printf("| psql \\copy, the 4 tables at once (four sessions) | %.0f |", stats_median(par_rate, reps));
    stats_print_runs(par_rate, reps);
    printf(" | %.2f (%.2f to %.2f) | -, -, %.1f | |\n", stats_median(par_ratio, reps), plo, phi,
           stats_median(par_pg_us, reps));
    for (int w = 0; w < nw; w++) {
        double lo, hi;
        stats_range(ratio[w], reps, &lo, &hi);
        printf("| oplog2pg initial copy, %d worker%s | %.0f |", workers[w], workers[w] > 1 ? "s" : "",
               stats_median(rate[w], reps));
        stats_print_runs(rate[w], reps);
        printf(" | **%.2f** (%.2f to %.2f) | %.1f, %.1f, %.1f | %.1f MB |\n", stats_median(ratio[w], reps), lo, hi,
               stats_median(cpu_us[w], reps), stats_median(sim_us[w], reps), stats_median(pg_us[w], reps),
               (double)peak[w] / 1024.0);
    }
    /* Against four psql sessions at once: how close several workers come to what PostgreSQL itself reaches with as
     * many writers here (each round's own pair). */
    for (int w = 0; w < nw; w++) {
        if (workers[w] < 2)
            continue;
        double of_par[STATS_MAX_RUNS];
        for (int r = 0; r < reps; r++)
            of_par[r] = rate[w][r] / par_rate[r];
        printf("\nWith %d workers the copy reaches %.2f of four psql sessions loading the same rows at once (median of "
               "the rounds' pairs).\n",
               workers[w], stats_median(of_par, reps));
    }
    fflush(stdout);
}

int main(int argc, char **argv)
{
    program_start("bench/copy", argv[0], "[N]");
    uint64_t n = program_arg(argc, argv, 1, 0);
    bench_copy(n ? n : 1000000);
    return program_end();
}

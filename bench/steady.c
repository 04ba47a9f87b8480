/*
 * steady.c — insert throughput of the jsonb table shape on warm connections, against psql \copy.
 *
 *   bench/steady [N [M]]   as bench/throughput (N small documents, default 300 000; M large, default 30 000; 0 skips
 *                          either), tailing and psql \copy only, each side on a warm connection: the daemon applies as
 *                          many untimed inserts into another table through its session first, psql loads the rows
 *                          into a scratch table in the same session first; BENCH_THROUGHPUT_REPS trials each
 *
 * A fresh PostgreSQL backend pays a page fault for each page of shared memory it touches first, and a COPY that
 * starts takes buffers this backend has not touched yet; a daemon keeps its connection, so it pays that only over
 * about its first shared_buffers of rows. These trials measure both sides past that.
 *
 * Run by bench/run.sh under `make bench`. How a trial is timed: bench/lib/backlog.h.
 */
#include <stdio.h>
#include <unistd.h>

#include "../tests/lib/proc.h"
#include "lib/backlog.h"
#include "lib/baseline.h"
#include "lib/docload.h"
#include "lib/program.h"
#include "lib/stats.h"

/* The untimed warm-up: as many documents into another database's c0 (a backlog_write_fn). */
static void warm_sized(trial *t, const void *ctx)
{
    const docload_sized *l = ctx;
    docload_sized_range(t, l, 1, l->n);
}

/* psql \copy of `path` into a fresh table LIKE qtable, after the same rows into another such table in the same
 * session; the second load's seconds, and its backend's CPU seconds into *pg_cpu_s (from /proc, in clock ticks). */
static double psql_copy_warm(trial *t, const char *qtable, const char *path, double *pg_cpu_s)
{
    char sql[1024], script[200], before[200], after[200];
    const char *const tables[2] = {"public.bench_steady_warm", "public.bench_steady_copy"};
    for (int i = 0; i < 2; i++) {
        snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS %s", tables[i]);
        bench_exec_sql(t->pg, sql);
        snprintf(sql, sizeof sql, "CREATE TABLE %s (LIKE %s INCLUDING ALL)", tables[i], qtable);
        bench_exec_sql(t->pg, sql);
    }
    snprintf(script, sizeof script, "%s/steady.sql", t->dir);
    snprintf(before, sizeof before, "%s/steady.before", t->dir);
    snprintf(after, sizeof after, "%s/steady.after", t->dir);
    FILE *f = fopen(script, "w");
    if (f == NULL)
        bench_die("cannot write %s", script);
    fprintf(f,
            "\\copy %s from '%s'\n"
            "CHECKPOINT;\n"
            "SELECT pg_backend_pid() AS pid \\gset\n"
            "\\setenv PID :pid\n"
            "\\! { awk '{print $14 + $15}' /proc/$PID/stat; date +%%s.%%N; } > %s\n"
            "\\copy %s from '%s'\n"
            "\\! { awk '{print $14 + $15}' /proc/$PID/stat; date +%%s.%%N; } > %s\n",
            tables[0], path, before, tables[1], path, after);
    fclose(f);
    snprintf(sql, sizeof sql, "psql -X -q -v ON_ERROR_STOP=1 -f '%s'", script);
    if (system(sql) != 0)
        bench_die("psql \\copy into %s failed", tables[1]);
    double ticks[2] = {0, 0}, at[2] = {0, 0};
    const char *const files[2] = {before, after};
    for (int i = 0; i < 2; i++) {
        FILE *r = fopen(files[i], "r");
        if (r == NULL || fscanf(r, "%lf %lf", &ticks[i], &at[i]) != 2)
            bench_die("cannot read %s", files[i]);
        fclose(r);
    }
    *pg_cpu_s = (ticks[1] - ticks[0]) / (double)sysconf(_SC_CLK_TCK);
    for (int i = 0; i < 2; i++) {
        snprintf(sql, sizeof sql, "DROP TABLE %s", tables[i]);
        bench_exec_sql(t->pg, sql);
    }
    return at[1] - at[0];
}

typedef struct {
    double tail_s, copy_s, cpu_s, pg_cpu_s, copy_pg_cpu_s;
    long peak_kb;
} steady_result;

/* One side-by-side trial on warm connections: oplog2pg tails n inserts into the jsonb table after applying n others
 * into another table through the same session; then psql \copy of the very rows it wrote, after the same rows into
 * a scratch table in the same session. */
static steady_result steady_trial(doc_size size, uint64_t n, int rep)
{
    trial t;
    char name[32], qtable[128], sql[1024], path[160];
    snprintf(name, sizeof name, "%s%d", size == DOC_LARGE ? "wbig" : "wsml", rep);
    trial_open(&t, name, "batched");
    docload_sized l = {.size = size, .n = n}, warm = {.size = size, .n = n};
    snprintf(l.db, sizeof l.db, "%s0", t.prefix);
    snprintf(warm.db, sizeof warm.db, "%s1", t.prefix);
    trial_write_ini(&t, "batched", "");
    docload_sized_range(&t, &l, 0, 0); /* the seed document, so that the table exists before the timing */
    steady_result res = {.peak_kb = -1};
    res.tail_s = backlog_timed(&t, docload_write_sized, &l, warm_sized, &warm, &res.peak_kb, &res.cpu_s);
    res.pg_cpu_s = t.pg_cpu_s;
    snprintf(qtable, sizeof qtable, "%s.c0", l.db);
    baseline_expect_rows(&t, qtable, n + 1);
    snprintf(sql, sizeof sql, "%s.c0", warm.db);
    baseline_expect_rows(&t, sql, n);
    proc_stop(&t.daemon, 60);
    t.daemon.pid = 0;
    snprintf(path, sizeof path, "%s/rows.copy", t.dir);
    baseline_dump_rows(qtable, path);
    res.copy_s = psql_copy_warm(&t, qtable, path, &res.copy_pg_cpu_s);
    trial_close(&t);
    return res;
}

/* Tailing against psql \copy, both on warm connections; reps trials each (BENCH_THROUGHPUT_REPS, default 3). */
static void bench_steady(uint64_t n_small, uint64_t n_large)
{
    int reps = stats_reps("BENCH_THROUGHPUT_REPS", 3);
    for (int s = 0; s < 2; s++) {
        doc_size size = s ? DOC_LARGE : DOC_SMALL;
        uint64_t n = s ? n_large : n_small;
        if (n == 0)
            continue;
        double tail[STATS_MAX_RUNS], copy[STATS_MAX_RUNS], rt[STATS_MAX_RUNS], cpu_us[STATS_MAX_RUNS],
            pg_us[STATS_MAX_RUNS], psql_pg_us[STATS_MAX_RUNS];
        long peak = 0;
        for (int i = 0; i < reps; i++) {
            steady_result r = steady_trial(size, n, i);
            tail[i] = (double)n / r.tail_s;
            copy[i] = (double)n / r.copy_s;
            rt[i] = tail[i] / copy[i];
            cpu_us[i] = r.cpu_s * 1e6 / (double)n;
            pg_us[i] = r.pg_cpu_s * 1e6 / (double)n;
            psql_pg_us[i] = r.copy_pg_cpu_s * 1e6 / (double)n;
            if (r.peak_kb > peak)
                peak = r.peak_kb;
            fprintf(stderr,
                    "steady %s run %d: tailing %.0f rows/s (%.2fx; daemon %.1f, PostgreSQL %.1f us CPU/row), psql "
                    "\\copy %.0f rows/s (PostgreSQL backend %.1f us CPU/row)\n",
                    s ? "large" : "small", i + 1, tail[i], rt[i], cpu_us[i], pg_us[i], copy[i], psql_pg_us[i]);
        }
        printf("%s### %s documents on warm connections\n\n%llu inserts, after as many untimed through the same "
               "connection.\n\n",
               s ? "\n" : "", s ? "Large" : "Small", (unsigned long long)n);
        printf("| what | rows/s, median of %d | the runs, in order (rows/s) |\n|---|---:|---|\n", reps);
        printf("| psql \\copy of the same rows, same table, second load of the session | %.0f |",
               stats_median(copy, reps));
        stats_print_runs(copy, reps);
        printf(" |\n| oplog2pg, tailing the oplog of those inserts, after as many others | %.0f |",
               stats_median(tail, reps));
        stats_print_runs(tail, reps);
        double lo, hi;
        stats_range(rt, reps, &lo, &hi);
        printf(" |\n\nTailing / psql \\copy: **%.2fx** (%.2fx to %.2fx). CPU per row (medians): the daemon %.1f us, "
               "PostgreSQL %.1f us behind it (all its processes) and %.1f us in psql's backend. The daemon's peak "
               "resident memory: %.1f MB.\n",
               stats_median(rt, reps), lo, hi, stats_median(cpu_us, reps), stats_median(pg_us, reps),
               stats_median(psql_pg_us, reps), (double)peak / 1024.0);
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    program_start("bench/steady", argv[0], "[N [M]]");
    bench_steady(program_arg(argc, argv, 1, 300000), program_arg(argc, argv, 2, 30000));
    return program_end();
}

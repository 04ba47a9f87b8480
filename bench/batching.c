/*
 * batching.c — the batching table: oplog2pg batched against per-op mode, by the ratio of inserts to updates.
 *
 *   bench/batching [N]   N oplog entries (default 20 000) at 1, 10, 20, 50 and 1000 inserts per update, applied by
 *                        oplog2pg in per-op mode and batched (median of 3), and the rows a batched run left loaded
 *                        by psql \copy into a table LIKE its own: the COPY rate its last column compares with
 *
 * Run by bench/run.sh under `make bench` and by bench/compare-builds.sh; bench/plots.sh draws its table. How a trial
 * is timed: bench/lib/backlog.h.
 */
#include <stdio.h>
#include <stdlib.h>

#include "lib/backlog.h"
#include "lib/baseline.h"
#include "lib/program.h"
#include "lib/stats.h"

typedef struct {
    double entries_s; /* oplog2pg: oplog entries applied per second */
    double copy_s;    /* batched trials: psql \copy of the rows it left, rows per second (0 for per-op) */
} batching_result;

/* One trial of the batching table. A batched one then loads the rows oplog2pg left (dumped with \copy ... to) with
 * psql \copy into a fresh table LIKE its own: the COPY rate the table's last column compares with. */
static batching_result batching_trial(unsigned ratio, bool batched, uint64_t n, int rep)
{
    trial t;
    char name[32];
    snprintf(name, sizeof name, "r%u_%s%d", ratio, batched ? "b" : "p", rep);
    trial_open(&t, name, batched ? "batched" : "per-op");
    workload_config wc;
    workload_config_init(&wc);
    wc.seed = 1000 + ratio;
    wc.ops = n;
    wc.db_prefix = t.prefix;
    wc.n_databases = 1;
    wc.n_namespaces = 1;
    wc.mode = WORKLOAD_INSERTS_PER_UPDATE;
    wc.inserts_per_update = ratio;
    batching_result res = {.entries_s = (double)n / backlog_workload(&t, &wc, NULL)};
    if (batched) {
        char sql[512], qtable[160], path[200], like[200];
        snprintf(sql, sizeof sql,
                 "SELECT format('%%I.%%I', schemaname, tablename) FROM pg_tables WHERE schemaname LIKE '%s%%'",
                 t.prefix);
        PGresult *r = PQexec(t.pg, sql);
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
            bench_die("the batching trial's one table: %s", PQerrorMessage(t.pg));
        snprintf(qtable, sizeof qtable, "%s", PQgetvalue(r, 0, 0));
        PQclear(r);
        snprintf(path, sizeof path, "%s/rows.copy", t.dir);
        baseline_dump(qtable, path, "");
        snprintf(like, sizeof like, "(LIKE %s INCLUDING ALL)", qtable);
        uint64_t rows = baseline_count_rows(t.pg, qtable);
        res.copy_s = (double)rows / baseline_copy(t.pg, "public.bench_batching_copy", like, "", path, "", NULL);
    }
    trial_close(&t);
    return res;
}

/* Per-op runs take seconds and vary little; batched runs take a fraction of a second, so each batched figure is the
 * median of three runs, as is the COPY rate of the rows they left (and the ratio of the two). */
static void bench_batching(uint64_t n)
{
    static const unsigned ratios[] = {1, 10, 20, 50, 1000};
    printf("| inserts per update | per-op mode (entries/s) | batched, median of 3 (entries/s) | speed-up | psql \\copy "
           "of the rows left, median of 3 (rows/s) | batched entries/s, of the COPY rate |\n");
    printf("|---:|---:|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < sizeof ratios / sizeof ratios[0]; i++) {
        double per_op = batching_trial(ratios[i], false, n, 0).entries_s;
        double batched[3], copy[3], of_copy[3];
        for (int rep = 0; rep < 3; rep++) {
            batching_result r = batching_trial(ratios[i], true, n, rep);
            batched[rep] = r.entries_s;
            copy[rep] = r.copy_s;
            of_copy[rep] = r.entries_s / r.copy_s;
        }
        double b = stats_median(batched, 3);
        printf("| %u | %.0f | %.0f | %.1fx | %.0f | %.2f |\n", ratios[i], per_op, b, b / per_op, stats_median(copy, 3),
               stats_median(of_copy, 3));
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    program_start("bench/batching", argv[0], "[N]");
    uint64_t n = program_arg(argc, argv, 1, 0);
    bench_batching(n ? n : 20000);
    return program_end();
}

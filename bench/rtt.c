/*
 * rtt.c — network round trips: oplog2pg through bench/rttproxy at 0, 1 and 5 ms round trip to PostgreSQL.
 *
 *   bench/rtt [N [R]]   N mixed ops (default 10 000; six collections, no DDL), or with R runs of R inserts then an
 *                       update of an older document, applied batched (median of 3) and per-op
 *
 * Run by bench/run.sh under `make bench`. How a trial is timed: bench/lib/backlog.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tests/lib/proc.h"
#include "lib/backlog.h"
#include "lib/program.h"
#include "lib/stats.h"

/* A mixed workload (inserts, updates, replacements, deletes over six collections; no DDL), written while the daemon
 * is paused, then applied through bench/rttproxy with the given round trip to PostgreSQL: entries/s. */
static double rtt_trial(bool batched, uint64_t n, int rep, unsigned rtt_ms, unsigned ratio)
{
    trial t;
    char name[32];
    snprintf(name, sizeof name, "rtt%u_%s%d", rtt_ms, batched ? "b" : "p", rep);
    trial_open(&t, name, batched ? "batched" : "per-op");
    trial_write_ini(&t, batched ? "batched" : "per-op", "");
    workload_config wc;
    workload_config_init(&wc);
    wc.seed = 4242;
    wc.ops = n;
    wc.db_prefix = t.prefix;
    wc.n_databases = 1;
    wc.n_namespaces = 6;
    wc.mode = ratio ? WORKLOAD_INSERTS_PER_UPDATE : WORKLOAD_MIXED;
    wc.inserts_per_update = ratio;
    wc.w_ddl = 0;
    double secs = backlog_workload(&t, &wc, NULL);
    trial_close(&t);
    return (double)n / secs;
}

static void bench_rtt(uint64_t n, unsigned ratio)
{
    static const unsigned rtts[] = {0, 1, 5};
    const char *port = strstr(bench_conninfo, "port=");
    if (port == NULL)
        bench_die("the test cluster's conninfo (%s) names no port to put the proxy in front of", bench_conninfo);
    char pgport[16];
    snprintf(pgport, sizeof pgport, "%d", atoi(port + 5));
    printf(
        "| RTT to PostgreSQL | batched, median of 3 (time for %llu ops; entries/s) | per-op (entries/s) | speed-up |\n",
        (unsigned long long)n);
    printf("|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < sizeof rtts / sizeof rtts[0]; i++) {
        char err[512], bin[256], rtt[16], log[64], dc[256];
        snprintf(bin, sizeof bin, "%s/bench/rttproxy", proc_build_dir());
        snprintf(rtt, sizeof rtt, "%u", rtts[i]);
        snprintf(log, sizeof log, "/tmp/oplog2pg-rttproxy.%d.log", (int)getpid());
        const char *argv[] = {bin, "127.0.0.1", pgport, rtt, NULL};
        proc_handle proxy;
        if (!proc_start(argv, NULL, log, &proxy, err, sizeof err))
            bench_die("%s", err);
        int pport = 0;
        for (int tries = 0; tries < 100 && pport == 0; tries++) {
            FILE *f = fopen(log, "r");
            if (f != NULL) {
                if (fscanf(f, "%d", &pport) != 1)
                    pport = 0;
                fclose(f);
            }
            if (pport == 0)
                usleep(20000);
        }
        if (pport == 0)
            bench_die("bench/rttproxy did not say its port (%s)", log);
        snprintf(dc, sizeof dc, "host=127.0.0.1 port=%d user=postgres dbname=postgres", pport);
        bench_daemon_conninfo = dc;
        /* per-op at 5 ms applies about 40 entries/s: a share of the workload is enough for its rate */
        uint64_t n_per_op = rtts[i] == 0 ? n : rtts[i] == 1 ? n / 5 : n / 20;
        double per_op = rtt_trial(false, n_per_op, 0, rtts[i], ratio);
        double batched[3];
        for (int rep = 0; rep < 3; rep++)
            batched[rep] = rtt_trial(true, n, rep, rtts[i], ratio);
        double b = stats_median(batched, 3);
        bench_daemon_conninfo = NULL;
        proc_stop(&proxy, 10);
        unlink(log);
        printf("| %u ms | %.2f s (%.0f) | %.0f | %.1fx |\n", rtts[i], (double)n / b, b, per_op, b / per_op);
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    program_start("bench/rtt", argv[0], "[N [R]]");
    bench_rtt(program_arg(argc, argv, 1, 10000), (unsigned)program_arg(argc, argv, 2, 0));
    return program_end();
}

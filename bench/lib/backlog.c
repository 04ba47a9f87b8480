/*
 * backlog.c — see backlog.h.
 */
#include "backlog.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../../tests/lib/oplogutil.h"
#include "../../tests/lib/proc.h"

/* What costs a process time in the kernel: its page faults (minor and major, /proc/PID/stat, all threads) and its
 * context switches (voluntary and not, summed over /proc/PID/task/TID/status: the process's own line counts only
 * its first thread). */
static void kernel_counts(pid_t pid, unsigned long long *faults, unsigned long long *switches)
{
    unsigned long long minflt, majflt;
    *faults = bench_page_faults(pid, &minflt, &majflt) ? minflt + majflt : 0;
    double vol = 0, invol = 0;
    char path[320];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    struct dirent *de;
    while (d != NULL && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%d/task/%s", (int)pid, de->d_name);
        bench_add_switches(path, &vol, &invol);
    }
    if (d != NULL)
        closedir(d);
    *switches = (unsigned long long)(vol + invol);
}

/* BENCH_PERF=FILE: `perf record` (call graphs) of the daemon into FILE.<service>; a zero handle when not asked. */
static proc_handle perf_start(trial *t)
{
    proc_handle perf = {0};
    const char *perf_out = getenv("BENCH_PERF");
    if (perf_out == NULL || *perf_out == '\0')
        return perf;
    char err[512], pid[16], out[256], plog[160];
    snprintf(pid, sizeof pid, "%d", (int)t->daemon.pid);
    snprintf(out, sizeof out, "%s.%s", perf_out, t->service);
    snprintf(plog, sizeof plog, "%s/perf.log", t->dir);
    const char *argv[] = {"perf",        "record", "-q", "-F", "999", "--call-graph",
                          "dwarf,16384", "-p",     pid,  "-o", out,   NULL};
    if (!proc_start(argv, NULL, plog, &perf, err, sizeof err))
        bench_die("%s", err);
    usleep(500000); /* perf attaches */
    return perf;
}

double backlog_timed(trial *t, backlog_write_fn write, const void *ctx, backlog_write_fn warm, const void *warm_ctx,
                     long *peak_kb, double *cpu_s)
{
    trial_daemon_start(t);
    trial_wait_caught_up(t, 60);
    if (warm != NULL) {
        warm(t, warm_ctx);
        trial_wait_caught_up(t, 3600);
    }
    if (!proc_signal(&t->daemon, SIGSTOP))
        bench_die("cannot pause the daemon");
    t->start = oplogutil_checkpoint_ts(t->pg, t->service);
    write(t, ctx);
    proc_handle perf = perf_start(t);
    /* BENCH_RSS=FILE: the daemon's VmRSS and checkpoint at every poll of the timed part, into FILE.<service>. */
    const char *rss_out = getenv("BENCH_RSS");
    if (rss_out != NULL && *rss_out != '\0') {
        char path[256];
        snprintf(path, sizeof path, "%s.%s", rss_out, t->service);
        if ((t->rss_trace = fopen(path, "w")) == NULL)
            bench_die("cannot write %s", path);
    }
    unsigned long long faults0, switches0;
    kernel_counts(t->daemon.pid, &faults0, &switches0);
    double t0 = bench_now_s(), cpu0 = bench_cpu_seconds(t->daemon.pid), sim0 = bench_cpu_seconds(t->sim.pid),
           pg0 = bench_cluster_cpu_seconds(t->pg), rd0 = bench_thread_cpu_seconds(t->daemon.pid, "o2p-reader");
    proc_signal(&t->daemon, SIGCONT);
    trial_wait_caught_up(t, 3600);
    double secs = bench_now_s() - t0;
    if (cpu_s)
        *cpu_s = bench_cpu_seconds(t->daemon.pid) - cpu0;
    t->sim_cpu_s = bench_cpu_seconds(t->sim.pid) - sim0;
    t->pg_cpu_s = bench_cluster_cpu_seconds(t->pg) - pg0;
    t->reader_cpu_s = bench_thread_cpu_seconds(t->daemon.pid, "o2p-reader") - rd0;
    kernel_counts(t->daemon.pid, &t->faults, &t->switches);
    t->faults -= faults0;
    t->switches -= switches0;
    if (t->rss_trace != NULL) {
        fclose(t->rss_trace);
        t->rss_trace = NULL;
    }
    if (perf.pid != 0) {
        proc_signal(&perf, SIGINT);
        proc_wait(&perf, 120);
    }
    if (peak_kb)
        *peak_kb = proc_peak_kb(t->daemon.pid);
    if (!proc_stop(&t->daemon, 60) || proc_exit_code(&t->daemon) != 0)
        bench_die("the daemon did not stop cleanly; see %s", t->log);
    return secs;
}

static void write_workload(trial *t, const void *ctx)
{
    char err[512];
    workload_stats st;
    if (!workload_run(t->uri, ctx, &st, err, sizeof err))
        bench_die("workload: %s", err);
}

void backlog_inserts_config(workload_config *wc, const trial *t, uint64_t seed, uint64_t n, unsigned namespaces)
{
    workload_config_init(wc);
    wc->seed = seed;
    wc->ops = n;
    wc->db_prefix = t->prefix;
    wc->n_databases = 1;
    wc->n_namespaces = namespaces;
    wc->mode = WORKLOAD_INSERT_ONLY;
    wc->batch_size = 1000;
}

double backlog_workload(trial *t, const workload_config *wc, long *peak_kb)
{
    return backlog_timed(t, write_workload, wc, NULL, NULL, peak_kb, NULL);
}

double backlog_workload_cpu(trial *t, const workload_config *wc, long *peak_kb, double *cpu_s)
{
    return backlog_timed(t, write_workload, wc, NULL, NULL, peak_kb, cpu_s);
}

double backlog_replay(trial *t, const char *dump, double *pg_cpu_s)
{
    char bin[256], err[512];
    snprintf(bin, sizeof bin, "%s/oplog2pg", proc_build_dir());
    const char *argv[] = {bin, "-c", t->ini, "replay", dump, NULL};
    double t0 = bench_now_s(), pg0 = pg_cpu_s != NULL ? bench_cluster_cpu_seconds(t->pg) : 0;
    if (!proc_start(argv, NULL, t->log, &t->daemon, err, sizeof err))
        bench_die("%s", err);
    if (!proc_wait(&t->daemon, 3600) || proc_exit_code(&t->daemon) != 0)
        bench_die("oplog2pg replay of %s failed; see %s", dump, t->log);
    double secs = bench_now_s() - t0;
    t->daemon.pid = 0;
    if (pg_cpu_s != NULL) {
        usleep(100000); /* the daemon's backend ends after the daemon: then its time is the postmaster's cutime */
        *pg_cpu_s = bench_cluster_cpu_seconds(t->pg) - pg0;
    }
    return secs;
}

void backlog_rewind(trial *t)
{
    char sql[256];
    snprintf(sql, sizeof sql, "UPDATE oplog2pg.checkpoint SET ts_sec = %u, ts_inc = %u WHERE service = '%s'",
             (unsigned)(t->start >> 32), (unsigned)t->start, t->service);
    bench_exec_sql(t->pg, sql);
}

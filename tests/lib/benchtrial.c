/*
 * benchtrial.c — see benchtrial.h.
 */
#include "benchtrial.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "oplogutil.h"

const char *bench_program = "bench";
const char *bench_conninfo;
const char *bench_daemon_conninfo;

bool bench_init(const char *program)
{
    bench_program = program;
    bench_conninfo = getenv("OPLOG2PG_TEST_PG");
    return bench_conninfo != NULL && *bench_conninfo != '\0';
}

double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void bench_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", bench_program);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    proc_kill_all();
    exit(1);
}

void bench_exec_sql(PGconn *pg, const char *sql)
{
    PGresult *r = PQexec(pg, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
        bench_die("%s: %s", sql, PQerrorMessage(pg));
    PQclear(r);
}

uint64_t bench_newest_ts(mongoc_client_t *c)
{
    uint64_t ts;
    bson_error_t err;
    if (!oplogutil_newest_ts(c, &ts, &err))
        bench_die("reading the oplog: %s", err.message);
    return ts;
}

/* ---- /proc ---- */

const char *bench_proc_stat(const char *what, char *buf, size_t len)
{
    char path[320];
    snprintf(path, sizeof path, "/proc/%s/stat", what);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, len - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* after the command name, which may hold spaces */
    return p != NULL && p[1] == ' ' ? p + 2 : NULL;
}

bool bench_page_faults(pid_t pid, unsigned long long *minor, unsigned long long *major)
{
    char what[24], buf[1024];
    snprintf(what, sizeof what, "%d", (int)pid);
    const char *p = bench_proc_stat(what, buf, sizeof buf);
    /* state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt */
    return p != NULL && sscanf(p, "%*c %*d %*d %*d %*d %*d %*u %llu %*u %llu", minor, major) == 2;
}

void bench_add_switches(const char *what, double *voluntary, double *involuntary)
{
    char path[320], line[128];
    snprintf(path, sizeof path, "/proc/%s/status", what);
    FILE *f = fopen(path, "r");
    unsigned long long v;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        if (sscanf(line, "voluntary_ctxt_switches: %llu", &v) == 1)
            *voluntary += (double)v;
        else if (sscanf(line, "nonvoluntary_ctxt_switches: %llu", &v) == 1)
            *involuntary += (double)v;
    }
    if (f != NULL)
        fclose(f);
}

double bench_cpu_seconds_of(const char *what)
{
    char buf[1024];
    const char *p = bench_proc_stat(what, buf, sizeof buf);
    unsigned long long ut, st;
    if (p == NULL || sscanf(p, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

double bench_cpu_seconds(pid_t pid)
{
    char what[16];
    snprintf(what, sizeof what, "%d", (int)pid);
    return bench_cpu_seconds_of(what);
}

double bench_postgres_cpu_seconds(void)
{
    double sum = 0;
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d != NULL && (de = readdir(d)) != NULL) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        char path[300], comm[64] = "";
        snprintf(path, sizeof path, "/proc/%s/comm", de->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        bool pg = fgets(comm, sizeof comm, f) != NULL && strncmp(comm, "postgres", 8) == 0;
        fclose(f);
        if (pg)
            sum += bench_cpu_seconds((pid_t)atoi(de->d_name));
    }
    if (d != NULL)
        closedir(d);
    return sum;
}

/* The PPid line of /proc/PID/status; 0 when unknown. */
static pid_t parent_of(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    pid_t ppid = 0;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "PPid:", 5) == 0)
            ppid = (pid_t)strtol(line + 5, NULL, 10);
    if (f)
        fclose(f);
    return ppid;
}

/* A process's own CPU time and that of its children that have ended and been waited for (cutime, cstime). */
static double cpu_seconds_with_ended_children(pid_t pid)
{
    char what[16], buf[1024];
    snprintf(what, sizeof what, "%d", (int)pid);
    const char *p = bench_proc_stat(what, buf, sizeof buf);
    unsigned long long ut, st, cut, cst;
    if (p == NULL ||
        sscanf(p, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu", &ut, &st, &cut, &cst) != 4)
        return -1;
    return (double)(ut + st + cut + cst) / (double)sysconf(_SC_CLK_TCK);
}

double bench_cluster_cpu_seconds(PGconn *pg)
{
    pid_t postmaster = parent_of((pid_t)PQbackendPID(pg));
    if (postmaster <= 1)
        return -1;
    /* the postmaster's ended children count too: a psql session's backend is gone by the end of its load */
    double sum = cpu_seconds_with_ended_children(postmaster);
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d != NULL && (de = readdir(d)) != NULL) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        pid_t pid = (pid_t)atoi(de->d_name);
        if (parent_of(pid) == postmaster) {
            double s = bench_cpu_seconds(pid);
            if (s > 0)
                sum += s;
        }
    }
    if (d != NULL)
        closedir(d);
    return sum;
}

double bench_thread_cpu_seconds(pid_t pid, const char *name)
{
    char path[320];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    struct dirent *de;
    double cpu = -1;
    while (d != NULL && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char comm[64] = "";
        snprintf(path, sizeof path, "/proc/%d/task/%s/comm", (int)pid, de->d_name);
        FILE *f = fopen(path, "r");
        if (f != NULL && fgets(comm, sizeof comm, f) != NULL && strncmp(comm, name, strlen(name)) == 0) {
            snprintf(path, sizeof path, "%d/task/%s", (int)pid, de->d_name);
            cpu = bench_cpu_seconds_of(path);
        }
        if (f != NULL)
            fclose(f);
    }
    if (d != NULL)
        closedir(d);
    return cpu;
}

double bench_cpu_pressure_s(void)
{
    FILE *f = fopen("/proc/pressure/cpu", "r");
    char line[256];
    double s = -1;
    unsigned long long us;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        const char *p = strstr(line, "total=");
        if (strncmp(line, "some ", 5) == 0 && p != NULL && sscanf(p, "total=%llu", &us) == 1)
            s = (double)us / 1e6;
    }
    if (f != NULL)
        fclose(f);
    return s;
}

long bench_rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kb;
}

/* ---- trials ---- */

void trial_write_ini(trial *t, const char *apply_mode, const char *extra)
{
    FILE *f = fopen(t->ini, "w");
    if (!f)
        bench_die("cannot write %s", t->ini);
    const char *lines = getenv("BENCH_REPLICATION_INI"), *level = getenv("BENCH_LOG_LEVEL");
    fprintf(f,
            "[mongodb]\nuri = %s\n[postgres]\nconninfo = %s\n[replication]\nservice = %s\ninclude = %s*.*\n"
            "apply_mode = %s\n%s\n[logging]\nlevel = %s\n%s",
            t->uri, bench_daemon_conninfo ? bench_daemon_conninfo : bench_conninfo, t->service, t->prefix, apply_mode,
            lines ? lines : "", level && *level ? level : "warning", extra);
    fclose(f);
}

void trial_open(trial *t, const char *name, const char *apply_mode)
{
    trial_open_sim(t, name, apply_mode, NULL);
}

void trial_open_sim(trial *t, const char *name, const char *apply_mode, const char *const *sim_args)
{
    char err[512];
    memset(t, 0, sizeof *t);
    snprintf(t->dir, sizeof t->dir, "/tmp/oplog2pg-bench.XXXXXX");
    if (!mkdtemp(t->dir))
        bench_die("mkdtemp failed");
    char simlog[128];
    snprintf(simlog, sizeof simlog, "%s/mongosim.log", t->dir);
    if (!proc_start_mongosim(sim_args, simlog, &t->sim, err, sizeof err))
        bench_die("%s", err);
    snprintf(t->uri, sizeof t->uri, "mongodb://127.0.0.1:%d/?replicaSet=rs0", t->sim.port);
    snprintf(t->service, sizeof t->service, "bench_%s", name);
    snprintf(t->prefix, sizeof t->prefix, "bench_%s_", name);
    snprintf(t->ini, sizeof t->ini, "%s/oplog2pg.ini", t->dir);
    snprintf(t->log, sizeof t->log, "%s/oplog2pg.log", t->dir);
    t->client = mongoc_client_new(t->uri);
    t->pg = PQconnectdb(bench_conninfo);
    if (PQstatus(t->pg) != CONNECTION_OK)
        bench_die("%s", PQerrorMessage(t->pg));
    /* A fresh start for this service: no checkpoint, no copy state, no tables (the same PostgreSQL may have run
     * this benchmark before, against another mongosim: an old copy's start point would not be in this oplog). */
    char sql[256];
    snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s0 CASCADE", t->prefix);
    bench_exec_sql(t->pg, sql);
    bench_exec_sql(t->pg, "CREATE SCHEMA IF NOT EXISTS oplog2pg");
    snprintf(sql, sizeof sql, "DELETE FROM oplog2pg.checkpoint WHERE service = '%s'", t->service);
    PQclear(PQexec(t->pg, sql));
    snprintf(sql, sizeof sql, "DELETE FROM oplog2pg.copy_state WHERE service = '%s'", t->service);
    PQclear(PQexec(t->pg, sql)); /* fails harmlessly when the table does not exist yet */

    mongoc_collection_t *coll = mongoc_client_get_collection(t->client, "bench_seed", "start");
    bson_t *doc = BCON_NEW("started", BCON_BOOL(true));
    bson_error_t berr;
    if (!mongoc_collection_insert_one(coll, doc, NULL, NULL, &berr))
        bench_die("seed insert: %s", berr.message);
    bson_destroy(doc);
    mongoc_collection_destroy(coll);

    trial_write_ini(t, apply_mode, "");
}

void trial_daemon_start(trial *t)
{
    char err[512], bin[256], wrap[512];
    const char *argv[24];
    size_t n = 0;
    const char *w = getenv("BENCH_DAEMON_WRAP");
    snprintf(wrap, sizeof wrap, "%s", w ? w : "");
    for (char *save = NULL, *word = strtok_r(wrap, " ", &save); word != NULL && n < 16;
         word = strtok_r(NULL, " ", &save))
        argv[n++] = word;
    snprintf(bin, sizeof bin, "%s/oplog2pg", proc_build_dir());
    argv[n++] = bin;
    argv[n++] = "-c";
    argv[n++] = t->ini;
    argv[n++] = "run";
    argv[n] = NULL;
    if (!proc_start(argv, NULL, t->log, &t->daemon, err, sizeof err))
        bench_die("%s", err);
}

double trial_wait_caught_up(trial *t, double timeout_s)
{
    double t0 = bench_now_s();
    uint64_t want = bench_newest_ts(t->client);
    while (bench_now_s() - t0 < timeout_s) {
        uint64_t at = oplogutil_checkpoint_ts(t->pg, t->service);
        if (t->rss_trace != NULL)
            fprintf(t->rss_trace, "%.3f %ld %u:%u\n", bench_now_s() - t0, bench_rss_kb(t->daemon.pid),
                    (unsigned)(at >> 32), (unsigned)at);
        if (at == want)
            return bench_now_s() - t0;
        if (proc_wait(&t->daemon, 0.0))
            bench_die("the daemon exited with %d; see %s", proc_exit_code(&t->daemon), t->log);
        usleep(5000); /* polling costs PostgreSQL a little CPU: not too often */
    }
    bench_die("the daemon did not catch up within %.0f s; see %s", timeout_s, t->log);
}

void trial_close(trial *t)
{
    if (t->daemon.pid)
        proc_stop(&t->daemon, 60);
    proc_stop(&t->sim, 10);
    char sql[256];
    snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s0 CASCADE", t->prefix);
    bench_exec_sql(t->pg, sql);
    PQfinish(t->pg);
    mongoc_client_destroy(t->client);
    bench_remove_dir(t->dir);
}

void bench_remove_dir(const char *dir)
{
    if (getenv("BENCH_KEEP") != NULL) {
        fprintf(stderr, "%s: kept %s\n", bench_program, dir);
        return;
    }
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/*
 * benchtrial.h — what every replication benchmark (the programs in bench/) does around the daemon: a fresh mongosim, a
 * service and a database prefix of its own on the throwaway PostgreSQL, the daemon started on them, waits until its
 * checkpoint reaches the newest oplog entry, and the CPU time of the processes involved, from /proc.
 *
 * Benchmarks are programs, not Check tests: a failure prints "<bench_program>: message", kills every child
 * (proc_kill_all) and exits 1.
 */
#ifndef OPLOG2PG_TESTS_BENCHTRIAL_H
#define OPLOG2PG_TESTS_BENCHTRIAL_H

#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "proc.h"

/* Set by bench_init: the program name in messages, and the test cluster's conninfo ($OPLOG2PG_TEST_PG). */
extern const char *bench_program;
extern const char *bench_conninfo;
/* The conninfo the daemon is given when not the test cluster's own (a proxy in front of it); NULL: the cluster's. */
extern const char *bench_daemon_conninfo;

/* Reads $OPLOG2PG_TEST_PG into bench_conninfo; false when it is not set (the caller prints its usage). */
bool bench_init(const char *program);

/* CLOCK_MONOTONIC in seconds. */
double bench_now_s(void);
/* Prints the message, kills every child and exits 1. */
void bench_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Runs a statement that must succeed (rows, if any, are ignored). */
void bench_exec_sql(PGconn *pg, const char *sql);
/* The newest oplog entry's ts, packed as oplogutil.h says. */
uint64_t bench_newest_ts(mongoc_client_t *c);

/* The fields of /proc/WHAT/stat after the command name (from the state on), read into buf; NULL when unreadable. */
const char *bench_proc_stat(const char *what, char *buf, size_t len);
/* The page faults of a process, all its threads (/proc/PID/stat): false when unreadable. */
bool bench_page_faults(pid_t pid, unsigned long long *minor, unsigned long long *major);
/* Adds the context switches of one thread ("PID/task/TID": /proc/WHAT/status) to *voluntary and *involuntary. */
void bench_add_switches(const char *what, double *voluntary, double *involuntary);
/* CPU seconds (user + system) of /proc/WHAT/stat: a process ("PID", all its threads) or a thread ("PID/task/TID");
 * -1 when unknown. */
double bench_cpu_seconds_of(const char *what);
double bench_cpu_seconds(pid_t pid);
/* Of every process on this machine whose name starts with "postgres" (backends, WAL writer, checkpointer...). */
double bench_postgres_cpu_seconds(void);
/* Of the PostgreSQL cluster pg is connected to: its postmaster, every child of it, and the children that have ended
 * (a psql session's backend). Unlike bench_postgres_cpu_seconds, it leaves out other clusters on the machine. */
double bench_cluster_cpu_seconds(PGconn *pg);
/* Of the thread of pid named `name` (the daemon's reader thread is "o2p-reader"); -1 when there is none. */
double bench_thread_cpu_seconds(pid_t pid, const char *name);
/* The machine's CPU pressure so far (/proc/pressure/cpu, "some" total: seconds in which at least one runnable task
 * waited for a CPU); the difference over an interval, divided by its length, is the share of it spent so. -1 when
 * the kernel does not say. */
double bench_cpu_pressure_s(void);
/* Resident memory of a process now (VmRSS), in kB; -1 when unknown. */
long bench_rss_kb(pid_t pid);

typedef struct {
    proc_handle sim, daemon;
    mongoc_client_t *client;
    PGconn *pg;
    char dir[64], ini[128], log[128], uri[128], service[64], prefix[32];
    uint64_t start;                      /* the checkpoint before the timed workload */
    double sim_cpu_s;                    /* mongosim's CPU time over the timed part */
    double pg_cpu_s;                     /* PostgreSQL's (every process of the server) */
    double reader_cpu_s;                 /* the daemon's reader thread's */
    unsigned long long faults, switches; /* the daemon's page faults and context switches (all threads) over it */
    FILE *rss_trace;                     /* the daemon's VmRSS at each poll of trial_wait_caught_up, or NULL */
} trial;

/* A fresh mongosim (its log in the trial's folder under /tmp), service bench_NAME, databases bench_NAME_*, one
 * seed document in bench_seed.start, and the configuration written with trial_write_ini(apply_mode, ""). Any
 * schema bench_NAME_0, checkpoint or copy state of the service left by an earlier run is removed. */
void trial_open(trial *t, const char *name, const char *apply_mode);
/* The same, with mongosim started with sim_args (NULL-terminated; NULL: none), such as {"--oplog-format", "8.0"}. */
void trial_open_sim(trial *t, const char *name, const char *apply_mode, const char *const *sim_args);
/* (Re)writes the daemon's configuration: the trial's mongosim and service, include bench_NAME_*.*, apply_mode, then
 * the lines of $BENCH_REPLICATION_INI in [replication], [logging] level = $BENCH_LOG_LEVEL (default warning), then
 * `extra` (which may open sections of its own). */
void trial_write_ini(trial *t, const char *apply_mode, const char *extra);
/* Starts `oplog2pg -c INI run`, its output in the trial's log; $BENCH_DAEMON_WRAP ("valgrind --tool=massif ...")
 * puts words before the command line (a tool that runs the daemon in the same process). */
void trial_daemon_start(trial *t);
/* Seconds until the checkpoint reaches the oplog's newest entry (read once, at the call); dies when the daemon
 * exits or timeout_s passes. Polls every 5 ms; with t->rss_trace, writes "secs VmRSS-kB ts" at each poll. */
double trial_wait_caught_up(trial *t, double timeout_s);
/* Stops the daemon and mongosim, drops schema bench_NAME_0, closes the connections, removes the folder (unless
 * $BENCH_KEEP is set: then it names it on stderr, with the logs in it). */
void trial_close(trial *t);
/* Removes a trial's folder, or keeps it and names it on stderr when $BENCH_KEEP is set. */
void bench_remove_dir(const char *dir);

#endif

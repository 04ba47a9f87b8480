/*
 * backlog.h — how a replication benchmark times the daemon: the pure cost of applying a backlog.
 *
 * The daemon starts on the trial's fresh mongosim, commits its starting point and catches up; then it is paused
 * (SIGSTOP) while the workload is written, and timed from SIGCONT until its checkpoint equals the newest oplog entry:
 * the whole backlog, read, applied and committed, without the fixed cost of starting up (about 50 ms, most of a short
 * batched trial). Every figure the benchmarks print is a ratio of such runs and of a baseline made side by side on the
 * same PostgreSQL (OPLOG2PG_TEST_PG, from scripts/with-pg.sh) and the same mongosim build, never a timed pass/fail.
 *
 * Environment: BENCH_PERF=FILE records the timed part with `perf record --call-graph dwarf` into FILE.<service> (a
 * profile of the daemon alone; the figures of such a run are not the ones to report); BENCH_RSS=FILE writes the
 * daemon's VmRSS and checkpoint at every poll of the timed part into FILE.<service>. The trial itself reads
 * BENCH_DAEMON_WRAP, BENCH_REPLICATION_INI, BENCH_LOG_LEVEL and BENCH_KEEP (tests/lib/benchtrial.h).
 */
#ifndef OPLOG2PG_BENCH_BACKLOG_H
#define OPLOG2PG_BENCH_BACKLOG_H

#include "../../tests/lib/benchtrial.h"
#include "../../tests/lib/workload.h"

/* Writes a workload into the trial's mongosim (ctx says what). */
typedef void (*backlog_write_fn)(trial *t, const void *ctx);

/* Starts the daemon on the trial, waits until it has caught up, and, with `warm`, writes that workload and waits
 * again (untimed: it warms the daemon's session); then pauses it, writes the timed workload, resumes it and returns
 * the seconds until it has caught up. Sets t->start (the checkpoint before the timed workload) and the CPU times,
 * page faults and context switches over the timed part in *t; the daemon's peak resident memory (kB) into *peak_kb and
 * its CPU seconds (all threads) over the timed part into *cpu_s, each when not NULL. The daemon is stopped after;
 * dies when it does not stop cleanly. */
double backlog_timed(trial *t, backlog_write_fn write, const void *ctx, backlog_write_fn warm, const void *warm_ctx,
                     long *peak_kb, double *cpu_s);
/* A workload of n inserts in bulks of 1 000 into the trial's mongosim, in one database of `namespaces` collections,
 * seeded. */
void backlog_inserts_config(workload_config *wc, const trial *t, uint64_t seed, uint64_t n, unsigned namespaces);
/* backlog_timed of a tests/lib/workload.h workload, without warming. */
double backlog_workload(trial *t, const workload_config *wc, long *peak_kb);
/* The same, with the daemon's CPU seconds (all threads) over the timed part into *cpu_s. */
double backlog_workload_cpu(trial *t, const workload_config *wc, long *peak_kb, double *cpu_s);
/* `oplog2pg replay DUMP` with the trial's configuration, from whatever checkpoint the service holds: its seconds
 * (start-up included), and PostgreSQL's CPU seconds over it (every process of the cluster, its backend's included)
 * into *pg_cpu_s when not NULL. Dies when it fails. */
double backlog_replay(trial *t, const char *dump, double *pg_cpu_s);
/* Moves the service's checkpoint back to t->start, where the timed workload began (for a replay of it). */
void backlog_rewind(trial *t);

#endif

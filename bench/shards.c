/*
 * shards.c — oplog2pg reading a sharded cluster (mongosim --shards N): the throughput of the merge of one reader per
 * shard, and the latency it adds, with all shards busy and with one shard idle. Run by bench/run.sh under `make bench`.
 *
 *   bench/shards [N [SECS [RATE [SLOW]]]]
 *     N     insert-only entries of the throughput trials (default 200 000; 0 skips them)
 *     SECS  seconds of probes of each latency trial beside the stream (replica set, shards all busy), and of the
 *           idle-shard trial with notes (default 10; 0 skips the latency trials)
 *     RATE  inserts per second of the steady stream beside the probes with all shards busy (default 2 000)
 *     SLOW  probes of the idle-shard trial without notes (default 3, 0 skips it; each waits for a periodic noop, up
 *           to 10 s)
 *
 * 1. Throughput, with 1, 2 and 4 shards, BENCH_SHARDS_REPS rounds (default 3, at most 9). One collection, sharded on
 *    _id (int64 keys 1..N), split into one range chunk per shard of N/shards keys each, moved so that each shard holds
 *    one. The daemon (`run --skip-import`, batched, default settings) reads a seed document, catches up and is paused
 *    (SIGSTOP); the N small documents (~320 bytes, tests/lib/docgen.h, with the int64 _id) are written through the
 *    router in ordered bulks of 1 000, four key ranges in turn whatever the number of shards (so every trial gives
 *    PostgreSQL the same rows in the same order), so every shard's oplog holds an even share interleaved in time; then
 * the daemon is resumed (SIGCONT) and timed until the service's checkpoint (the merged cluster time) reaches the newest
 * entry of every shard's oplog, as bench/lib/backlog.h does for a replica set. Each round also times psql \copy of the
 * very rows oplog2pg wrote into a fresh table LIKE its own (same columns, collation and key), after a CHECKPOINT
 * (bench/lib/baseline.h): the fastest honest baseline. Printed: entries/s (median, range), the ratio to psql \copy and
 * to the 1-shard figure of the same round (the merge's cost: the goal is >= 0.90). And where the CPU went during each
 * catch-up, per 1M entries: the daemon's CPU seconds (its main thread, the apply loop with the merge; its readers),
 * mongosim's (one process and one thread serving every shard) and the PostgreSQL cluster's; the cores the three kept
 * busy; the machine's CPU pressure (/proc/pressure/cpu: the share of the catch-up in which a runnable task waited for a
 * CPU, whoever's); the daemon's context switches and minor page faults per 1 000 entries. The daemon's CPU per entry is
 * the merge's cost that other load on the machine does not blur; the entries/s ratio is what a user sees, and only
 * means much when the pressure is low. BENCH_PERF=PREFIX records each catch-up with `perf record -g` into
 * PREFIX.shards<N>.r<ROUND>.
 * 2. Latency with all shards busy (2 shards; BENCH_SHARDS_BUSY = 1..16), against the same on a replica set (mongosim
 *    without --shards): a thread of its own writes a steady stream of RATE inserts/s into collection `load`, every
 *    10 ms a bulk for each shard's range; meanwhile probes (single inserts into `probe`, the shards in turn, 50 to
 *    150 ms apart, for SECS seconds) are timed from the acknowledgement of the insert (w:1) to the arrival of the
 *    notification an AFTER INSERT trigger on the probe table sends (pg_notify: delivered when the transaction commits,
 *    so when the row became visible), as bench/latency.c measures. Percentiles are nearest-rank.
 * 3. One shard idle (2 shards): probes on shard0 only, nothing else written. With `[mongodb] shard_note_after =
 *    100ms` (the default: oplog2pg writes a note into the shard that holds the stream back) for SECS seconds, and with
 *    `shard_note_after = 0` (no notes) and mongosim `--noop-interval 10` (the server's periodic noop) for SLOW probes.
 *
 * Every figure is a ratio or a difference between runs made side by side in this one invocation, on the same throwaway
 * PostgreSQL (OPLOG2PG_TEST_PG, scripts/with-pg.sh) and mongosim build; nothing is asserted. BENCH_REPLICATION_INI and
 * BENCH_LOG_LEVEL set the daemon's configuration, BENCH_KEEP keeps each trial's folder (logs) as the other benchmarks.
 */
#include <dirent.h>
#include <errno.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../tests/lib/docgen.h"
#include "../tests/lib/oplogutil.h"
#include "../tests/lib/proc.h"
#include "../tests/lib/simcluster.h"
#include "lib/baseline.h"
#include "lib/program.h"
#include "lib/stats.h"

#define CHANNEL "o2p_shards"
/* The probe and load collections: shard k of a latency trial holds keys [k * SPAN, (k + 1) * SPAN). */
#define SPAN 1000000000LL

/* ---- a trial: a cluster (or a replica set), the daemon on it ---- */

typedef struct {
    bool sharded;
    simcluster c;            /* sharded */
    proc_handle sim;         /* replica set */
    size_t nshards;          /* 0: replica set */
    mongoc_client_t *client; /* the router's (or the replica set's) */
    mongoc_client_t *shard[SIMCLUSTER_MAX];
    PGconn *pg;
    proc_handle daemon;
    char dir[200], ini[256], log[300], uri[256], service[64], db[64];
} shtrial;

static void sh_open(shtrial *t, const char *name, size_t nshards, const char *const *sim_args)
{
    char err[512], simlog[320], sql[512];
    memset(t, 0, sizeof *t);
    snprintf(t->dir, sizeof t->dir, "/tmp/oplog2pg-bench-shards.XXXXXX");
    if (!mkdtemp(t->dir))
        bench_die("mkdtemp failed");
    snprintf(simlog, sizeof simlog, "%s/mongosim.log", t->dir);
    t->nshards = nshards;
    t->sharded = nshards > 0;
    if (t->sharded) {
        if (!simcluster_start(nshards, sim_args, simlog, &t->c, err, sizeof err))
            bench_die("%s", err);
        simcluster_router_uri(&t->c, t->uri, sizeof t->uri);
        for (size_t k = 0; k < t->c.n; k++) {
            char su[256];
            simcluster_shard_uri(&t->c, k, su, sizeof su);
            t->shard[k] = mongoc_client_new(su);
        }
    } else {
        if (!proc_start_mongosim(sim_args, simlog, &t->sim, err, sizeof err))
            bench_die("%s", err);
        snprintf(t->uri, sizeof t->uri, "mongodb://127.0.0.1:%d/?replicaSet=rs0", t->sim.port);
        t->shard[0] = mongoc_client_new(t->uri);
    }
    t->client = mongoc_client_new(t->uri);
    snprintf(t->service, sizeof t->service, "bench_%s", name);
    snprintf(t->db, sizeof t->db, "bench_%s_0", name);
    snprintf(t->ini, sizeof t->ini, "%s/oplog2pg.ini", t->dir);
    snprintf(t->log, sizeof t->log, "%s/oplog2pg.log", t->dir);
    t->pg = PQconnectdb(bench_conninfo);
    if (PQstatus(t->pg) != CONNECTION_OK)
        bench_die("%s", PQerrorMessage(t->pg));
    snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s CASCADE", t->db);
    bench_exec_sql(t->pg, sql);
    /* a fresh start for the service (these tables may not exist yet: then there is nothing to remove) */
    snprintf(sql, sizeof sql, "DELETE FROM oplog2pg.checkpoint WHERE service = '%s'", t->service);
    PQclear(PQexec(t->pg, sql));
    snprintf(sql, sizeof sql, "DELETE FROM oplog2pg.shard_checkpoint WHERE service = '%s'", t->service);
    PQclear(PQexec(t->pg, sql));
}

static void sh_write_ini(shtrial *t, const char *mongodb_extra)
{
    FILE *f = fopen(t->ini, "w");
    if (!f)
        bench_die("cannot write %s", t->ini);
    const char *lines = getenv("BENCH_REPLICATION_INI"), *level = getenv("BENCH_LOG_LEVEL");
    fprintf(f,
            "[mongodb]\nuri = %s\n%s\n[postgres]\nconninfo = %s\n[replication]\nservice = %s\ninclude = %s.*\n"
            "apply_mode = batched\n%s\n[logging]\nlevel = %s\n",
            t->uri, mongodb_extra, bench_conninfo, t->service, t->db, lines ? lines : "",
            level && *level ? level : "warning");
    fclose(f);
}

static void sh_admin(shtrial *t, bson_t *cmd)
{
    bson_error_t err;
    bson_t reply;
    bool ok = mongoc_client_command_simple(t->client, "admin", cmd, NULL, &reply, &err);
    if (!ok) {
        char *txt = bson_as_relaxed_extended_json(cmd, NULL);
        bench_die("%s: %s", txt, err.message);
    }
    bson_destroy(&reply);
    bson_destroy(cmd);
}

/* db.coll sharded on _id, split at bounds[1..n-1], the chunk starting at bounds[k] moved to shard k. */
static void sh_shard_coll(shtrial *t, const char *coll, const int64_t *bounds)
{
    char ns[160];
    snprintf(ns, sizeof ns, "%s.%s", t->db, coll);
    sh_admin(t, BCON_NEW("enableSharding", BCON_UTF8(t->db), "primaryShard", BCON_UTF8(t->c.id[0])));
    sh_admin(t, BCON_NEW("shardCollection", BCON_UTF8(ns), "key", "{", "_id", BCON_INT32(1), "}"));
    for (size_t k = 1; k < t->nshards; k++)
        sh_admin(t, BCON_NEW("split", BCON_UTF8(ns), "middle", "{", "_id", BCON_INT64(bounds[k]), "}"));
    for (size_t k = 1; k < t->nshards; k++)
        sh_admin(t, BCON_NEW("moveChunk", BCON_UTF8(ns), "find", "{", "_id", BCON_INT64(bounds[k]), "}", "to",
                             BCON_UTF8(t->c.id[k])));
}

/* A small document (tests/lib/docgen.h's, ~320 bytes) with _id an int64. */
static void make_doc(bson_t *d, int64_t id, uint64_t n)
{
    bson_t src;
    docgen_sized_doc(&src, DOC_SMALL, n);
    bson_init(d);
    BSON_APPEND_INT64(d, "_id", id);
    bson_copy_to_excluding_noinit(&src, d, "_id", NULL);
    bson_destroy(&src);
}

static void insert_many(mongoc_collection_t *c, bson_t *docs, size_t n)
{
    const bson_t *ptrs[1000];
    for (size_t i = 0; i < n; i++)
        ptrs[i] = &docs[i];
    bson_error_t err;
    if (!mongoc_collection_insert_many(c, ptrs, n, NULL, NULL, &err))
        bench_die("insert_many: %s", err.message);
    for (size_t i = 0; i < n; i++)
        bson_destroy(&docs[i]);
}

static uint64_t count_rows(shtrial *t, const char *coll)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.%s", t->db, coll);
    PGresult *r = PQexec(t->pg, sql);
    uint64_t n = PQresultStatus(r) == PGRES_TUPLES_OK ? strtoull(PQgetvalue(r, 0, 0), NULL, 10) : 0;
    PQclear(r);
    return n;
}

static uint64_t count_sql(shtrial *t, const char *sql)
{
    PGresult *r = PQexec(t->pg, sql);
    uint64_t n = PQresultStatus(r) == PGRES_TUPLES_OK ? strtoull(PQgetvalue(r, 0, 0), NULL, 10) : 0;
    PQclear(r);
    return n;
}

/* Starts `oplog2pg run --skip-import`, waits until it has committed its start (the service's checkpoint row, and one
 * row per shard), then writes a seed document (_id 0, n 0) into each collection named and waits until the daemon has
 * applied them (so that the tables exist before anything is timed). */
static void sh_daemon_start(shtrial *t, const char *const *colls)
{
    char err[512], bin[256], sql[512];
    snprintf(bin, sizeof bin, "%s/oplog2pg", proc_build_dir());
    const char *argv[] = {bin, "-c", t->ini, "run", "--skip-import", NULL};
    if (!proc_start(argv, NULL, t->log, &t->daemon, err, sizeof err))
        bench_die("%s", err);
    double until = bench_now_s() + 60;
    for (int stage = 0; stage < 2; stage++) {
        for (size_t i = 0; stage == 0 ? i < 1 : colls[i] != NULL; i++) {
            for (;;) {
                bool done;
                if (stage == 0) {
                    snprintf(sql, sizeof sql, "SELECT count(*) FROM oplog2pg.checkpoint WHERE service = '%s'",
                             t->service);
                    done = count_sql(t, sql) == 1;
                    snprintf(sql, sizeof sql, "SELECT count(*) FROM oplog2pg.shard_checkpoint WHERE service = '%s'",
                             t->service);
                    done = done && (!t->sharded || count_sql(t, sql) == t->nshards);
                } else {
                    done = count_rows(t, colls[i]) >= 1;
                }
                if (done)
                    break;
                if (proc_wait(&t->daemon, 0.0))
                    bench_die("the daemon exited with %d; see %s", proc_exit_code(&t->daemon), t->log);
                if (bench_now_s() > until)
                    bench_die("the daemon did not start within 60 s; see %s", t->log);
                usleep(20000);
            }
        }
        for (size_t i = 0; stage == 0 && colls[i] != NULL; i++) {
            mongoc_collection_t *c = mongoc_client_get_collection(t->client, t->db, colls[i]);
            bson_t seed;
            make_doc(&seed, 0, 0); /* n 0: left out of the baseline's rows */
            insert_many(c, &seed, 1);
            mongoc_collection_destroy(c);
        }
    }
}

static void sh_close(shtrial *t)
{
    if (t->daemon.pid)
        proc_stop(&t->daemon, 60);
    for (size_t k = 0; k < SIMCLUSTER_MAX; k++)
        if (t->shard[k] != NULL)
            mongoc_client_destroy(t->shard[k]);
    mongoc_client_destroy(t->client);
    if (t->sharded)
        simcluster_stop(&t->c);
    else
        proc_stop(&t->sim, 10);
    char sql[256];
    snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s CASCADE", t->db);
    bench_exec_sql(t->pg, sql);
    PQfinish(t->pg);
    bench_remove_dir(t->dir);
}

/* ---- 1. throughput ---- */

/* What the processes of a trial used so far: CPU seconds of the daemon (its main thread, the apply loop; its
 * readers), of mongosim (one process, one thread, serving every shard) and of the PostgreSQL cluster, the machine's
 * CPU pressure (seconds in which a runnable task waited for a CPU), and the daemon's context switches (all threads;
 * voluntary: a thread waited, on a lock, a condition or the network; involuntary: it was preempted). */
typedef struct {
    double daemon, main, readers, sim, pg, pressure;
    double vcsw, ivcsw, main_vcsw;
    double minflt; /* the daemon's minor page faults (memory touched for the first time) */
} usage;

static usage usage_now(shtrial *t)
{
    usage u = {0};
    pid_t pid = t->daemon.pid;
    u.daemon = bench_cpu_seconds(pid);
    u.sim = bench_cpu_seconds(t->sharded ? t->c.proc.pid : t->sim.pid);
    u.pg = bench_cluster_cpu_seconds(t->pg);
    u.pressure = bench_cpu_pressure_s();
    char path[320];
    unsigned long long minflt, majflt;
    if (bench_page_faults(pid, &minflt, &majflt))
        u.minflt = (double)minflt;
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    struct dirent *de;
    while (d != NULL && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        bool main = atoi(de->d_name) == (int)pid;
        char comm[64] = "";
        snprintf(path, sizeof path, "/proc/%d/task/%s/comm", (int)pid, de->d_name);
        FILE *f = fopen(path, "r");
        if (f != NULL && fgets(comm, sizeof comm, f) == NULL)
            comm[0] = '\0';
        if (f != NULL)
            fclose(f);
        snprintf(path, sizeof path, "%d/task/%s", (int)pid, de->d_name);
        double cpu = bench_cpu_seconds_of(path);
        if (main)
            u.main += cpu;
        else if (strncmp(comm, "o2p-reader", 10) == 0)
            u.readers += cpu;
        double vol = 0;
        bench_add_switches(path, &vol, &u.ivcsw); /* path: "PID/task/TID" */
        u.vcsw += vol;
        if (main)
            u.main_vcsw += vol;
    }
    if (d != NULL)
        closedir(d);
    return u;
}

static usage usage_diff(usage a, usage b)
{
    return (usage){.daemon = b.daemon - a.daemon,
                   .main = b.main - a.main,
                   .readers = b.readers - a.readers,
                   .sim = b.sim - a.sim,
                   .pg = b.pg - a.pg,
                   .pressure = b.pressure - a.pressure,
                   .vcsw = b.vcsw - a.vcsw,
                   .ivcsw = b.ivcsw - a.ivcsw,
                   .main_vcsw = b.main_vcsw - a.main_vcsw,
                   .minflt = b.minflt - a.minflt};
}

typedef struct {
    double tail_s, copy_s;
    usage use; /* over the catch-up */
} thr_result;

/* One trial of n entries over `shards` shards; with copy, psql \copy of the same rows too. */
/* The key ranges the throughput trials write in turn: the largest number of shards measured. */
#define THR_RANGES 4

static thr_result thr_trial(size_t shards, uint64_t n, int rep, bool copy)
{
    shtrial t;
    char name[32], qtable[160];
    snprintf(name, sizeof name, "shthr%zu_%d", shards, rep);
    sh_open(&t, name, shards, NULL);
    int64_t bounds[SIMCLUSTER_MAX];
    for (size_t k = 0; k < shards; k++)
        bounds[k] = 1 + (int64_t)(k * n / shards);
    sh_shard_coll(&t, "c0", bounds);
    sh_write_ini(&t, "");
    const char *colls[] = {"c0", NULL};
    sh_daemon_start(&t, colls);
    mongoc_collection_t *c = mongoc_client_get_collection(t.client, t.db, "c0");
    if (!proc_signal(&t.daemon, SIGSTOP))
        bench_die("cannot pause the daemon");

    /* Bulks of 1 000, the key ranges in turn: always THR_RANGES ranges, whatever the number of shards (each shard's
     * chunk holds THR_RANGES / shards of them), so every trial writes the same documents in the same order and
     * PostgreSQL's index takes them at the same places (one ascending run is cheaper for a btree than several: a
     * 1-shard trial written in one run would measure that, not the merge). */
    static bson_t docs[1000];
    int64_t next[THR_RANGES], rbound[THR_RANGES + 1];
    for (size_t r = 0; r <= THR_RANGES; r++)
        rbound[r] = 1 + (int64_t)(r * n / THR_RANGES);
    for (size_t r = 0; r < THR_RANGES; r++)
        next[r] = rbound[r];
    uint64_t written = 0;
    for (size_t k = 0; written < n; k = (k + 1) % THR_RANGES) {
        int64_t end = rbound[k + 1];
        size_t nb = 0;
        for (; nb < 1000 && next[k] < end; nb++, next[k]++)
            make_doc(&docs[nb], next[k], (uint64_t)next[k]);
        if (nb > 0)
            insert_many(c, docs, nb);
        written += nb;
    }
    mongoc_collection_destroy(c);
    uint64_t want = 0;
    for (size_t k = 0; k < shards; k++) {
        uint64_t ts;
        bson_error_t err;
        if (!oplogutil_newest_ts(t.shard[k], &ts, &err))
            bench_die("the newest entry of %s: %s", t.c.id[k], err.message);
        if (ts > want)
            want = ts;
    }
    bench_exec_sql(t.pg, "CHECKPOINT"); /* as before the psql \copy: each side starts without dirty buffers */

    thr_result res = {0};
    /* BENCH_PERF=PREFIX: the catch-up recorded by perf (call graphs, all the daemon's threads) into
     * PREFIX.shards<N>.r<ROUND> */
    proc_handle perf = {0};
    const char *perf_out = getenv("BENCH_PERF");
    if (perf_out != NULL && *perf_out != '\0') {
        char pid[16], out[256], plog[320], err[512];
        snprintf(pid, sizeof pid, "%d", (int)t.daemon.pid);
        snprintf(out, sizeof out, "%s.shards%zu.r%d", perf_out, shards, rep);
        snprintf(plog, sizeof plog, "%s/perf.log", t.dir);
        const char *pargv[] = {"perf", "record", "-q", "-e", "cpu-clock", "-F", "999",
                               "-g",   "-p",     pid,  "-o", out,         NULL};
        if (!proc_start(pargv, NULL, plog, &perf, err, sizeof err))
            bench_die("%s", err);
        usleep(300000); /* perf attaches */
    }
    usage u0 = usage_now(&t);
    if (!proc_signal(&t.daemon, SIGCONT))
        bench_die("cannot resume the daemon");
    double t0 = bench_now_s();
    for (;;) {
        if (oplogutil_checkpoint_ts(t.pg, t.service) >= want) {
            res.use = usage_diff(u0, usage_now(&t));
            if (perf.pid != 0) {
                proc_signal(&perf, SIGINT);
                proc_wait(&perf, 60);
            }
            break;
        }
        if (proc_wait(&t.daemon, 0.0))
            bench_die("the daemon exited with %d; see %s", proc_exit_code(&t.daemon), t.log);
        if (bench_now_s() - t0 > 3600)
            bench_die("the daemon did not catch up within an hour; see %s", t.log);
        usleep(5000);
    }
    res.tail_s = bench_now_s() - t0;
    snprintf(qtable, sizeof qtable, "%s.c0", t.db);
    uint64_t rows = count_rows(&t, "c0");
    if (rows != n + 1)
        bench_die("%s holds %llu rows, not %llu; see %s", qtable, (unsigned long long)rows, (unsigned long long)(n + 1),
                  t.log);
    if (copy) {
        char path[320], like[200];
        snprintf(path, sizeof path, "%s/rows.copy", t.dir);
        baseline_dump_rows(qtable, path);
        snprintf(like, sizeof like, "(LIKE %s INCLUDING ALL)", qtable);
        res.copy_s = baseline_copy(t.pg, "public.bench_shards_copy", like, "", path, "", NULL);
    }
    sh_close(&t);
    return res;
}

static void print_row(const char *what, const double *v, int reps)
{
    double lo, hi;
    stats_range(v, reps, &lo, &hi);
    printf("| %s | %.0f | %.0f to %.0f |", what, stats_median(v, reps), lo, hi);
    stats_print_runs(v, reps);
    printf(" |\n");
}

/* One figure per shard count and round: the median and the range of its rounds, in a table cell. */
static void print_cell(const double *v, int reps, const char *fmt)
{
    double lo, hi;
    stats_range(v, reps, &lo, &hi);
    printf(" ");
    printf(fmt, stats_median(v, reps));
    printf(" (");
    printf(fmt, lo);
    printf(" to ");
    printf(fmt, hi);
    printf(") |");
}

static void bench_throughput(uint64_t n)
{
    static const size_t counts[] = {1, 2, 4};
    int reps = stats_reps("BENCH_SHARDS_REPS", 3);
    double copy[STATS_MAX_RUNS], rate[3][STATS_MAX_RUNS], vs_copy[3][STATS_MAX_RUNS], vs_one[3][STATS_MAX_RUNS];
    /* per 1M entries: CPU seconds of the daemon, its apply loop, its readers, mongosim, PostgreSQL; the share of the
     * catch-up in which a task waited for a CPU; context switches of the daemon per 1 000 entries */
    double d_cpu[3][STATS_MAX_RUNS], d_main[3][STATS_MAX_RUNS], d_rd[3][STATS_MAX_RUNS], sim[3][STATS_MAX_RUNS],
        pg[3][STATS_MAX_RUNS], press[3][STATS_MAX_RUNS], busy[3][STATS_MAX_RUNS], vcsw[3][STATS_MAX_RUNS],
        ivcsw[3][STATS_MAX_RUNS], flt[3][STATS_MAX_RUNS];
    double per_m = 1e6 / (double)n;
    for (int i = 0; i < reps; i++)
        for (size_t s = 0; s < 3; s++) {
            thr_result r = thr_trial(counts[s], n, i, s == 0);
            rate[s][i] = (double)n / r.tail_s;
            if (s == 0)
                copy[i] = (double)n / r.copy_s;
            vs_copy[s][i] = rate[s][i] / copy[i];
            vs_one[s][i] = rate[s][i] / rate[0][i];
            d_cpu[s][i] = r.use.daemon * per_m;
            d_main[s][i] = r.use.main * per_m;
            d_rd[s][i] = r.use.readers * per_m;
            sim[s][i] = r.use.sim * per_m;
            pg[s][i] = r.use.pg * per_m;
            press[s][i] = r.use.pressure / r.tail_s * 100.0;
            busy[s][i] = (r.use.daemon + r.use.sim + r.use.pg) / r.tail_s;
            vcsw[s][i] = r.use.vcsw * 1000.0 / (double)n;
            ivcsw[s][i] = r.use.ivcsw * 1000.0 / (double)n;
            flt[s][i] = r.use.minflt * 1000.0 / (double)n;
            fprintf(stderr,
                    "shards throughput round %d, %zu shard(s): %.0f entries/s (%.2fx psql \\copy, %.2fx one shard); "
                    "CPU s per 1M entries: daemon %.2f (apply loop %.2f, readers %.2f), mongosim %.2f, PostgreSQL "
                    "%.2f; %.2f cores busy, CPU pressure %.0f%%; daemon context switches per 1000 entries: %.1f "
                    "voluntary (apply loop %.1f), %.1f involuntary; %.1f page faults\n",
                    i + 1, counts[s], rate[s][i], vs_copy[s][i], vs_one[s][i], d_cpu[s][i], d_main[s][i], d_rd[s][i],
                    sim[s][i], pg[s][i], busy[s][i], press[s][i], vcsw[s][i], r.use.main_vcsw * 1000.0 / (double)n,
                    ivcsw[s][i], r.use.minflt * 1000.0 / (double)n);
        }
    printf("### Throughput by number of shards\n\n%llu inserts of ~320-byte documents into one collection sharded on "
           "_id, an even range chunk per shard, written in bulks of 1 000, four key ranges in turn (the same order for "
           "every "
           "number of shards); %d round%s.\n\n",
           (unsigned long long)n, reps, reps > 1 ? "s" : "");
    printf("| what | entries/s, median | range | the runs, in order |\n|---|---:|---|---|\n");
    print_row("psql \\copy of the same rows, same table", copy, reps);
    char what[64];
    for (size_t s = 0; s < 3; s++) {
        snprintf(what, sizeof what, "oplog2pg, %zu shard%s", counts[s], counts[s] > 1 ? "s" : "");
        print_row(what, rate[s], reps);
    }
    printf("\n| shards | / psql \\copy, median (range) | / 1 shard, median (range) |\n|---:|---|---|\n");
    for (size_t s = 0; s < 3; s++) {
        printf("| %zu |", counts[s]);
        print_cell(vs_copy[s], reps, "%.2fx");
        print_cell(vs_one[s], reps, "%.2fx");
        printf("\n");
    }
    printf("\nThe merge's cost is 1 minus the ratio to one shard (goal: the ratio >= 0.90).\n");
    printf("\nWhere the CPU went during the catch-up, per 1M entries (CPU seconds; median (range)); cores busy: the "
           "three's CPU seconds per second of the catch-up (the machine has %ld); CPU pressure: the share of the "
           "catch-up in which a runnable task waited for a CPU (/proc/pressure/cpu).\n\n",
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("| shards | daemon | its apply loop | its readers | mongosim | PostgreSQL | cores busy | CPU pressure | "
           "daemon's voluntary context switches / 1 000 entries | involuntary | page faults / 1 000 entries |\n"
           "|---:|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t s = 0; s < 3; s++) {
        printf("| %zu |", counts[s]);
        print_cell(d_cpu[s], reps, "%.2f");
        print_cell(d_main[s], reps, "%.2f");
        print_cell(d_rd[s], reps, "%.2f");
        print_cell(sim[s], reps, "%.2f");
        print_cell(pg[s], reps, "%.2f");
        print_cell(busy[s], reps, "%.2f");
        print_cell(press[s], reps, "%.0f%%");
        print_cell(vcsw[s], reps, "%.1f");
        print_cell(ivcsw[s], reps, "%.1f");
        print_cell(flt[s], reps, "%.1f");
        printf("\n");
    }
    fflush(stdout);
}

/* ---- 2 and 3. latency ---- */

/* The steady stream of `load`: its own client and thread. */
typedef struct {
    const char *uri, *db;
    size_t nshards; /* 1 for the replica set */
    unsigned rate;
    atomic_bool stop;
    pthread_t thread;
} load_stream;

static void *load_main(void *arg)
{
    load_stream *l = arg;
    mongoc_client_t *cl = mongoc_client_new(l->uri);
    mongoc_collection_t *c = mongoc_client_get_collection(cl, l->db, "load");
    static bson_t docs[1000];
    int64_t next[SIMCLUSTER_MAX];
    for (size_t k = 0; k < l->nshards; k++)
        next[k] = (int64_t)k * SPAN + 1;
    double t0 = bench_now_s();
    uint64_t sent = 0;
    while (!atomic_load(&l->stop)) {
        uint64_t due = (uint64_t)((bench_now_s() - t0) * l->rate);
        for (size_t k = 0; k < l->nshards && due > sent; k++) {
            size_t nb = (size_t)((due - sent) / (l->nshards - k));
            if (nb == 0)
                nb = 1;
            if (nb > 1000)
                nb = 1000;
            for (size_t i = 0; i < nb; i++, next[k]++)
                make_doc(&docs[i], next[k], (uint64_t)next[k]);
            insert_many(c, docs, nb);
            sent += nb;
        }
        usleep(10000);
    }
    mongoc_collection_destroy(c);
    mongoc_client_destroy(cl);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    return stats_cmp_double(a, b);
}

/* Nearest-rank percentile of sorted v[0..n-1]. */
static double pct(const double *v, size_t n, double p)
{
    size_t r = (size_t)((p / 100.0) * (double)n + 0.999999);
    if (r < 1)
        r = 1;
    if (r > n)
        r = n;
    return v[r - 1];
}

typedef struct {
    double p50, p99, max;
    size_t n;
} lat_result;

/* A latency trial: `shards` shards (0: a replica set), probes on the first `probe_shards` shards in turn, for secs
 * seconds or `count` probes (whichever is set), beside a stream of `rate` inserts/s (0: none). */
static lat_result lat_trial(const char *name, size_t shards, const char *const *sim_args, const char *mongodb_extra,
                            size_t probe_shards, double secs, size_t count, unsigned rate)
{
    shtrial t;
    sh_open(&t, name, shards, sim_args);
    size_t ranges = shards ? shards : 1;
    if (shards) {
        int64_t bounds[SIMCLUSTER_MAX];
        for (size_t k = 0; k < shards; k++)
            bounds[k] = (int64_t)k * SPAN;
        sh_shard_coll(&t, "probe", bounds);
        char ns[160];
        snprintf(ns, sizeof ns, "%s.load", t.db);
        sh_admin(&t, BCON_NEW("shardCollection", BCON_UTF8(ns), "key", "{", "_id", BCON_INT32(1), "}"));
        for (size_t k = 1; k < shards; k++)
            sh_admin(&t, BCON_NEW("split", BCON_UTF8(ns), "middle", "{", "_id", BCON_INT64(bounds[k]), "}"));
        for (size_t k = 1; k < shards; k++)
            sh_admin(&t, BCON_NEW("moveChunk", BCON_UTF8(ns), "find", "{", "_id", BCON_INT64(bounds[k]), "}", "to",
                                  BCON_UTF8(t.c.id[k])));
    }
    sh_write_ini(&t, mongodb_extra);
    const char *colls[] = {"probe", "load", NULL};
    sh_daemon_start(&t, colls);
    mongoc_collection_t *pc = mongoc_client_get_collection(t.client, t.db, "probe");

    char sql[1024];
    snprintf(sql, sizeof sql,
             "CREATE FUNCTION %s.o2p_notify() RETURNS trigger LANGUAGE plpgsql AS "
             "$$BEGIN PERFORM pg_notify('" CHANNEL "', NEW._id); RETURN NULL; END$$",
             t.db);
    bench_exec_sql(t.pg, sql);
    snprintf(sql, sizeof sql,
             "CREATE TRIGGER o2p_notify AFTER INSERT ON %s.probe FOR EACH ROW EXECUTE FUNCTION %s.o2p_notify()", t.db,
             t.db);
    bench_exec_sql(t.pg, sql);
    PGconn *lis = PQconnectdb(bench_conninfo);
    if (PQstatus(lis) != CONNECTION_OK)
        bench_die("%s", PQerrorMessage(lis));
    bench_exec_sql(lis, "LISTEN " CHANNEL);

    load_stream load = {.uri = t.uri, .db = t.db, .nshards = ranges, .rate = rate};
    atomic_init(&load.stop, false);
    if (rate > 0) {
        if (pthread_create(&load.thread, NULL, load_main, &load) != 0)
            bench_die("cannot start the load thread");
        usleep(1000000); /* the stream settles */
    }

    size_t cap = count ? count : (size_t)(secs * 20) + 16;
    double *lat = calloc(cap, sizeof *lat);
    size_t n = 0;
    uint64_t rng = 42;
    double end = bench_now_s() + secs;
    int64_t next[SIMCLUSTER_MAX];
    for (size_t k = 0; k < ranges; k++)
        next[k] = (int64_t)k * SPAN + 1;
    while (n < cap && (count ? n < count : bench_now_s() < end)) {
        size_t k = n % (probe_shards ? probe_shards : 1);
        int64_t id = next[k]++;
        bson_t *d = BCON_NEW("_id", BCON_INT64(id), "probe", BCON_INT64((int64_t)n));
        bson_error_t err;
        if (!mongoc_collection_insert_one(pc, d, NULL, NULL, &err))
            bench_die("probe insert: %s", err.message);
        double acked = bench_now_s();
        bson_destroy(d);
        char want[32];
        snprintf(want, sizeof want, "%lld", (long long)id);
        double arrived = 0;
        struct pollfd pfd = {.fd = PQsocket(lis), .events = POLLIN};
        while (arrived == 0) {
            if (bench_now_s() - acked > 120)
                bench_die("probe %lld not visible within 120 s; see %s", (long long)id, t.log);
            int rc = poll(&pfd, 1, 100);
            if (rc < 0 && errno != EINTR)
                bench_die("poll: %s", strerror(errno));
            if (rc <= 0)
                continue;
            if (!PQconsumeInput(lis))
                bench_die("the listening connection: %s", PQerrorMessage(lis));
            double at = bench_now_s();
            PGnotify *nt;
            while ((nt = PQnotifies(lis)) != NULL) {
                if (strcmp(nt->extra, want) == 0)
                    arrived = at;
                PQfreemem(nt);
            }
        }
        lat[n++] = (arrived - acked) * 1000.0;
        usleep((useconds_t)(50000 + docgen_rng_next(&rng) % 100000)); /* 50 to 150 ms apart */
    }
    if (rate > 0) {
        atomic_store(&load.stop, true);
        pthread_join(load.thread, NULL);
    }
    mongoc_collection_destroy(pc);
    PQfinish(lis);
    qsort(lat, n, sizeof *lat, cmp_double);
    lat_result r = {.p50 = pct(lat, n, 50), .p99 = pct(lat, n, 99), .max = lat[n - 1], .n = n};
    free(lat);
    fprintf(stderr, "shards latency %s: %zu probes, p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", name, r.n, r.p50, r.p99,
            r.max);
    sh_close(&t);
    return r;
}

static void print_lat(const char *what, lat_result r)
{
    printf("| %s | %zu | %.1f | %.1f | %.1f |\n", what, r.n, r.p50, r.p99, r.max);
}

static void bench_latency(double secs, unsigned rate, size_t slow)
{
    const char *busy_env = getenv("BENCH_SHARDS_BUSY");
    size_t busy = busy_env ? strtoul(busy_env, NULL, 10) : 2;
    if (busy < 1 || busy > SIMCLUSTER_MAX)
        bench_die("BENCH_SHARDS_BUSY must be 1 to %d", SIMCLUSTER_MAX);
    lat_result rs = lat_trial("shlat_rs", 0, NULL, "", 1, secs, 0, rate);
    lat_result sh = lat_trial("shlat_busy", busy, NULL, "", busy, secs, 0, rate);
    printf(
        "\n### Latency with all shards busy\n\nProbes (single inserts, 50 to 150 ms apart, %.0f s) beside a stream of "
        "%u inserts/s, from MongoDB's acknowledgement to the commit in PostgreSQL (ms, nearest rank).\n\n",
        secs, rate);
    printf("| source | probes | p50 | p99 | max |\n|---|---:|---:|---:|---:|\n");
    print_lat("replica set", rs);
    char what[64];
    snprintf(what, sizeof what, "%zu shards, all busy", busy);
    print_lat(what, sh);
    printf("\nThe merge adds %+.1f ms at p99 (goal: <= 20 ms) and %+.1f ms at p50.\n", sh.p99 - rs.p99,
           sh.p50 - rs.p50);
    fflush(stdout);

    static const char *const noop[] = {"--noop-interval", "10", NULL};
    lat_result notes = lat_trial("shlat_note", 2, NULL, "shard_note_after = 100ms", 1, secs, 0, 0);
    lat_result none = slow ? lat_trial("shlat_noop", 2, noop, "shard_note_after = 0", 1, 0, slow, 0) : (lat_result){0};
    printf("\n### Latency with one shard idle\n\n2 shards; probes on shard0 only, nothing else written (ms).\n\n");
    printf("| oplog notes | probes | p50 | p99 | max |\n|---|---:|---:|---:|---:|\n");
    print_lat("shard_note_after = 100ms", notes);
    if (slow)
        print_lat("none (shard_note_after = 0; periodic noop every 10 s)", none);
    printf("\nGoal: p99 <= 150 ms with the notes (against up to the noop interval without).\n");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    program_start("bench/shards", argv[0], "[N [SECS [RATE [SLOW]]]]");
    uint64_t n = program_arg(argc, argv, 1, 200000);
    uint64_t secs = program_arg(argc, argv, 2, 10);
    uint64_t rate = program_arg(argc, argv, 3, 2000);
    uint64_t slow = program_arg(argc, argv, 4, 3);
    if (n > 0)
        bench_throughput(n);
    if (secs > 0)
        bench_latency((double)secs, (unsigned)rate, (size_t)slow);
    return program_end();
}

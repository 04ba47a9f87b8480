/*
 * replication.c — oplog2pg's replication benchmarks (run by bench/run.sh under `make bench`).
 *
 *   replication batching [N]   the batching table: N oplog entries (default 20 000) at 1, 10, 20, 50 and 1000
 *                              inserts per update, applied by oplog2pg batched and in per-op mode, same run
 *   replication inserts [N]    N inserts (default 1 000 000) replicated by oplog2pg, against psql \copy of the same
 *                              rows into the same table shape; reports the daemon's peak memory
 *   replication copy [N]       the initial copy of N documents (default 1 000 000) in 4 collections, with 1 and 4
 *                              workers, against psql \copy of the same rows
 *   replication rtt [N [R]]    N mixed ops (default 10 000; six collections, no DDL), or with R runs of R inserts
 *                              then an update of an older document, applied through bench/rttproxy at 0, 1 and
 *                              5 ms round trip to PostgreSQL, batched (median of 3) and per-op
 *   replication keys [N]       what the key column costs an insert: psql \copy of the same N rows (default 300 000)
 *                              with the key as text, as jsonb, and as a jsonb generated from the document
 *   replication mapped [N [M]] typed tables (issue 11): N inserts (default 200 000) into a mapped collection of
 *                              typed columns, and M inserts (default 10 000) of 1 000 doubles into a double
 *                              precision[] column, each replicated by oplog2pg against psql \copy of the same rows
 *                              (text, then binary: PostgreSQL's own floor) into a table LIKE the daemon's; three
 *                              trials each (BENCH_MAPPED_REPS), oplog2pg and psql side by side (0 skips a workload)
 *   replication txn [N [PAD]] issue 12: N documents (default 270 000) of a PAD-byte string (default 4 000) in one
 *                              transaction, a chain of 16 MB applyOps entries (1.1 GB of oplog), against the same N
 *                              as plain inserts; each replicated from a checkpoint before them and checked (row count
 *                              and an md5 of every row against what was written); reports time, MB/s, rows/s and the
 *                              daemon's peak memory. BENCH_TXN_REPS pairs (default 1); BENCH_TXN_WRITE=driver writes
 *                              the transaction through the driver instead (the same split, but mongosim's client
 *                              transactions are quadratic in their documents: 270 000 did not finish in 14 minutes)
 *   replication throughput [N [M]] issue 13: N inserts of ~320-byte documents (default 300 000) and M of ~10 kB
 *                              (default 30 000; 0 skips either): oplog2pg tailing them, `oplog2pg replay` of a dump of
 *                              the same entries, and psql \copy of the very rows into a table LIKE the daemon's; three
 *                              trials each (BENCH_THROUGHPUT_REPS), medians of the trials' own ratios
 *   replication steady [N [M]] issue 13: the same on warm connections: the daemon applies as many untimed inserts
 *                              into another table through its session first, psql loads the rows into a scratch table
 *                              in the same session first (a new backend pays a page fault per page of shared memory it
 *                              touches first); tailing and psql only, BENCH_THROUGHPUT_REPS trials
 *   replication memory [N [M]] issue 13: the daemon's peak memory with a backlog of N small inserts (default
 *                              10 000 000) and with M documents of 16 MB (default 40; every other one binary)
 *   replication collections [N [C...]] issue 13: N inserts (default 100 000) round-robin over C collections (default 1,
 *                              100 and 2 000), replayed with the tables to make and with the tables there, against
 *                              PostgreSQL's own CREATE TABLE one statement at a time and one COPY per table
 *
 * Every figure is a ratio of two runs made side by side on the same PostgreSQL (OPLOG2PG_TEST_PG, from
 * scripts/with-pg.sh) and the same mongosim build, never a timed pass/fail. A trial starts the daemon on a fresh
 * mongosim, pauses it once it has caught up, writes the workload, and times it from the moment it resumes until its
 * checkpoint equals the newest oplog entry: the whole backlog, read, applied and committed.
 *
 * BENCH_PERF=FILE records the timed part of each trial with `perf record --call-graph dwarf` into FILE.<service>
 * (a profile of the daemon alone; the figures of such a run are not the ones to report). BENCH_RSS=FILE writes the
 * daemon's VmRSS and checkpoint at every poll of the timed part into FILE.<service>. BENCH_DAEMON_WRAP="valgrind
 * --tool=massif ..." puts words before the daemon's command line (a tool that runs it in the same process).
 * BENCH_REPLICATION_INI="batch_rows = 50000" adds lines to the daemon's [replication] section (to try settings);
 * BENCH_KEEP=1 keeps each trial's directory (the daemon's log, the dumps) instead of removing it.
 */
#include <dirent.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../tests/lib/benchtrial.h"
#include "../tests/lib/docgen.h"
#include "../tests/lib/oplogutil.h"
#include "../tests/lib/proc.h"
#include "../tests/lib/workload.h"
#include "map/ejson.h"

/* The daemon starts, commits its starting point and catches up; then it is paused (SIGSTOP) while the workload is
 * written, and timed from SIGCONT until its checkpoint reaches the newest entry: the pure cost of applying the
 * backlog, without the fixed cost of starting up (about 50 ms, most of a short batched trial). */
/* What costs a process time in the kernel: its page faults (minor and major, /proc/PID/stat, all threads) and its
 * context switches (voluntary and not, summed over /proc/PID/task/TID/status: the process's own line counts only
 * its first thread). */
static void kernel_counts(pid_t pid, unsigned long long *faults, unsigned long long *switches)
{
    char path[320], buf[1024];
    *faults = *switches = 0;
    snprintf(path, sizeof path, "%d", (int)pid);
    const char *p = bench_proc_stat(path, buf, sizeof buf);
    unsigned long long minflt, majflt;
    if (p != NULL && sscanf(p, "%*c %*d %*d %*d %*d %*d %*u %llu %*u %llu", &minflt, &majflt) == 2)
        *faults = minflt + majflt;
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    struct dirent *de;
    while (d != NULL && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/%d/task/%s/status", (int)pid, de->d_name);
        FILE *s = fopen(path, "r");
        char line[128];
        unsigned long long v;
        while (s != NULL && fgets(line, sizeof line, s) != NULL)
            if (sscanf(line, "voluntary_ctxt_switches: %llu", &v) == 1 ||
                sscanf(line, "nonvoluntary_ctxt_switches: %llu", &v) == 1)
                *switches += v;
        if (s != NULL)
            fclose(s);
    }
    if (d != NULL)
        closedir(d);
}

/* Set by the steady-state trials: written once the daemon has caught up, and applied (untimed) through the same
 * session before the daemon is paused for the timed backlog. */
static void (*backlog_warmup)(trial *t, const void *ctx);
static const void *backlog_warmup_ctx;

static double timed_backlog_of(trial *t, void (*write)(trial *, const void *), const void *ctx, long *peak_kb,
                               double *cpu_s)
{
    trial_daemon_start(t);
    trial_wait_caught_up(t, 60);
    if (backlog_warmup != NULL) {
        backlog_warmup(t, backlog_warmup_ctx);
        trial_wait_caught_up(t, 3600);
    }
    if (!proc_signal(&t->daemon, SIGSTOP))
        bench_die("cannot pause the daemon");
    t->start = oplogutil_checkpoint_ts(t->pg, t->service);
    write(t, ctx);
    /* BENCH_PERF=FILE: the timed part is also recorded by `perf record` (call graphs) into FILE.<service>. */
    proc_handle perf = {0};
    const char *perf_out = getenv("BENCH_PERF");
    if (perf_out != NULL && *perf_out != '\0') {
        char err[512], pid[16], out[256], plog[160];
        snprintf(pid, sizeof pid, "%d", (int)t->daemon.pid);
        snprintf(out, sizeof out, "%s.%s", perf_out, t->service);
        snprintf(plog, sizeof plog, "%s/perf.log", t->dir);
        const char *argv[] = {"perf",        "record", "-q", "-F", "999", "--call-graph",
                              "dwarf,16384", "-p",     pid,  "-o", out,   NULL};
        if (!proc_start(argv, NULL, plog, &perf, err, sizeof err))
            bench_die("%s", err);
        usleep(500000); /* perf attaches */
    }
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

static double timed_backlog(trial *t, const workload_config *wc, long *peak_kb)
{
    return timed_backlog_of(t, write_workload, wc, peak_kb, NULL);
}

static double psql_copy(PGconn *pg, const char *name, const char *create, const char *cols, const char *path);
static uint64_t count_rows(PGconn *pg, const char *qtable);

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
    batching_result res = {.entries_s = (double)n / timed_backlog(&t, &wc, NULL)};
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
        snprintf(sql, sizeof sql, "psql -X -q -v ON_ERROR_STOP=1 -c \"\\copy %s to '%s'\"", qtable, path);
        if (system(sql) != 0)
            bench_die("psql \\copy from %s failed", qtable);
        snprintf(like, sizeof like, "(LIKE %s INCLUDING ALL)", qtable);
        uint64_t rows = count_rows(t.pg, qtable);
        res.copy_s = (double)rows / psql_copy(t.pg, "public.bench_batching_copy", like, "", path);
    }
    trial_close(&t);
    return res;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
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
        qsort(batched, 3, sizeof batched[0], cmp_double);
        qsort(copy, 3, sizeof copy[0], cmp_double);
        qsort(of_copy, 3, sizeof of_copy[0], cmp_double);
        printf("| %u | %.0f | %.0f | %.1fx | %.0f | %.2f |\n", ratios[i], per_op, batched[1], batched[1] / per_op,
               copy[1], of_copy[1]);
        fflush(stdout);
    }
}

/* The source's oplog as a dump (concatenated BSON), as mongodump writes it; with cmd_db, only the commands on that
 * database (its create entries, say). */
static void dump_oplog_of(mongoc_client_t *c, const char *path, const char *cmd_db)
{
    mongoc_collection_t *oplog = mongoc_client_get_collection(c, "local", "oplog.rs");
    bson_t filter = BSON_INITIALIZER; /* all of it: mongosim filters the oplog by ts only, as the daemon asks */
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, &filter, NULL, NULL);
    FILE *f = fopen(path, "wb");
    if (!f)
        bench_die("cannot write %s", path);
    char ns[128];
    snprintf(ns, sizeof ns, "%s.$cmd", cmd_db != NULL ? cmd_db : "");
    const bson_t *doc;
    while (mongoc_cursor_next(cur, &doc)) {
        bson_iter_t it;
        if (cmd_db != NULL && !(bson_iter_init_find(&it, doc, "op") && BSON_ITER_HOLDS_UTF8(&it) &&
                                strcmp(bson_iter_utf8(&it, NULL), "c") == 0 && bson_iter_init_find(&it, doc, "ns") &&
                                BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_utf8(&it, NULL), ns) == 0))
            continue;
        if (fwrite(bson_get_data(doc), 1, doc->len, f) != doc->len)
            bench_die("writing %s", path);
    }
    bson_error_t err;
    if (mongoc_cursor_error(cur, &err))
        bench_die("reading the oplog: %s", err.message);
    fclose(f);
    mongoc_cursor_destroy(cur);
    bson_destroy(&filter);
    mongoc_collection_destroy(oplog);
}

static void dump_oplog(mongoc_client_t *c, const char *path)
{
    dump_oplog_of(c, path, NULL);
}

static void put_copy_text(FILE *f, const char *text, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        char ch = text[i];
        if (ch == '\\' || ch == '\t' || ch == '\n' || ch == '\r')
            fputc('\\', f);
        fputc(ch == '\t' ? 't' : ch == '\n' ? 'n' : ch == '\r' ? 'r' : ch, f);
    }
}

/* The rows of db.coll as COPY text: the key text of _id, a tab, the document (the daemon's own two formats). */
static uint64_t dump_for_copy(mongoc_client_t *c, const char *db, const char *coll, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        bench_die("cannot write %s", path);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db, coll);
    bson_t filter = BSON_INITIALIZER;
    bson_t *opts = BCON_NEW("batchSize", BCON_INT32(10000));
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(col, &filter, opts, NULL);
    const bson_t *doc;
    uint64_t n = 0;
    while (mongoc_cursor_next(cur, &doc)) {
        size_t len;
        bson_iter_t it;
        char *key = bson_iter_init_find(&it, doc, "_id") ? ejson_key(bson_iter_value(&it)) : NULL;
        char *json = ejson_document(doc, &len);
        if (key == NULL || json == NULL)
            bench_die("cannot render a document of %s.%s", db, coll);
        put_copy_text(f, key, strlen(key));
        fputc('\t', f);
        put_copy_text(f, json, len);
        fputc('\n', f);
        free(key);
        free(json);
        n++;
    }
    bson_error_t err;
    if (mongoc_cursor_error(cur, &err))
        bench_die("reading %s.%s: %s", db, coll, err.message);
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    bson_destroy(&filter);
    mongoc_collection_destroy(col);
    fclose(f);
    return n;
}

/* The table shape oplog2pg writes, for the psql \copy baselines: same columns, same key, no generated column. */
#define SAME_SHAPE "(_id text COLLATE \"C\" PRIMARY KEY, doc jsonb NOT NULL)"

/* Seconds psql \copy takes to load `path` into a fresh table `name` made by `create` (columns from `cols`, options
 * such as " with (format binary)" from `opts`). */
static double last_copy_pg_cpu_s; /* PostgreSQL's CPU time over the last psql_copy_opts load */

static double psql_copy_opts(PGconn *pg, const char *name, const char *create, const char *cols, const char *path,
                             const char *opts)
{
    char sql[1024];
    snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS %s", name);
    bench_exec_sql(pg, sql);
    snprintf(sql, sizeof sql, "CREATE TABLE %s %s", name, create);
    bench_exec_sql(pg, sql);
    bench_exec_sql(pg, "CHECKPOINT");
    snprintf(sql, sizeof sql, "psql -X -q -v ON_ERROR_STOP=1 -c \"\\copy %s %s from '%s'%s\"", name, cols, path, opts);
    double t0 = bench_now_s(), pg0 = bench_cluster_cpu_seconds(pg);
    if (system(sql) != 0)
        bench_die("psql \\copy into %s failed", name);
    double secs = bench_now_s() - t0;
    last_copy_pg_cpu_s = bench_cluster_cpu_seconds(pg) - pg0;
    snprintf(sql, sizeof sql, "DROP TABLE %s", name);
    bench_exec_sql(pg, sql);
    return secs;
}

static double psql_copy(PGconn *pg, const char *name, const char *create, const char *cols, const char *path)
{
    return psql_copy_opts(pg, name, create, cols, path, "");
}

static void bench_inserts(uint64_t n)
{
    trial t;
    trial_open(&t, "ins", "batched");
    workload_config wc;
    workload_config_init(&wc);
    wc.seed = 77;
    wc.ops = n;
    wc.db_prefix = t.prefix;
    wc.n_databases = 1;
    wc.n_namespaces = 1;
    wc.mode = WORKLOAD_INSERT_ONLY;
    wc.batch_size = 1000;
    long peak_kb = -1;
    double daemon_s = timed_backlog(&t, &wc, &peak_kb);

    /* The same entries by `oplog2pg replay` of a dump of the oplog, from the same checkpoint, into empty tables. */
    char dump[128], sql[512], bin[256], err[512];
    snprintf(dump, sizeof dump, "%s/oplog.bson", t.dir);
    dump_oplog(t.client, dump);
    snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s0 CASCADE", t.prefix);
    bench_exec_sql(t.pg, sql);
    snprintf(sql, sizeof sql, "UPDATE oplog2pg.checkpoint SET ts_sec = %u, ts_inc = %u WHERE service = '%s'",
             (unsigned)(t.start >> 32), (unsigned)t.start, t.service);
    bench_exec_sql(t.pg, sql);
    snprintf(bin, sizeof bin, "%s/oplog2pg", proc_build_dir());
    const char *argv[] = {bin, "-c", t.ini, "replay", dump, NULL};
    double r0 = bench_now_s();
    if (!proc_start(argv, NULL, t.log, &t.daemon, err, sizeof err))
        bench_die("%s", err);
    if (!proc_wait(&t.daemon, 3600) || proc_exit_code(&t.daemon) != 0)
        bench_die("oplog2pg replay failed; see %s", t.log);
    double replay_s = bench_now_s() - r0;
    t.daemon.pid = 0;

    /* The same rows by psql \copy into a table of the same shape, on the same server. */
    char path[128], db[64];
    snprintf(path, sizeof path, "%s/rows.copy", t.dir);
    snprintf(db, sizeof db, "%s0", t.prefix);
    uint64_t rows = dump_for_copy(t.client, db, "c0", path);
    double copy_s = psql_copy(t.pg, "public.bench_copy", SAME_SHAPE, "(_id, doc)", path);
    trial_close(&t);

    double daemon_rate = (double)n / daemon_s, copy_rate = (double)rows / copy_s;
    printf("| what | rows | seconds | rows/s |\n|---|---:|---:|---:|\n");
    printf("| psql \\copy (the same key and document text, same table shape) | %llu | %.2f | %.0f |\n",
           (unsigned long long)rows, copy_s, copy_rate);
    printf("| oplog2pg, tailing the oplog of those inserts | %llu | %.2f | %.0f |\n", (unsigned long long)n, daemon_s,
           daemon_rate);
    printf("| oplog2pg replay of a dump of that oplog (start-up included) | %llu | %.2f | %.0f |\n",
           (unsigned long long)n, replay_s, (double)n / replay_s);
    printf("\noplog2pg reached %.0f%% of the COPY rate tailing and %.0f%% replaying; its peak resident memory was "
           "%.1f MB\n",
           100.0 * daemon_rate / copy_rate, 100.0 * ((double)n / replay_s) / copy_rate, (double)peak_kb / 1024.0);
}

/* What the key encoding costs an insert: the same n rows (the workload's documents, ObjectId, int32 and string
 * _ids) loaded by psql \copy into the three shapes a key could take, median of three loads each. */
static void bench_keys(uint64_t n)
{
    trial t;
    trial_open(&t, "keys", "batched");
    workload_config wc;
    workload_config_init(&wc);
    wc.seed = 99;
    wc.ops = n;
    wc.db_prefix = t.prefix;
    wc.n_databases = 1;
    wc.n_namespaces = 1;
    wc.mode = WORKLOAD_INSERT_ONLY;
    wc.batch_size = 1000;
    workload_stats st;
    char err[512], path[128], docs[140], db[64];
    if (!workload_run(t.uri, &wc, &st, err, sizeof err))
        bench_die("workload: %s", err);
    snprintf(path, sizeof path, "%s/rows.copy", t.dir);
    snprintf(docs, sizeof docs, "%s/docs.copy", t.dir);
    snprintf(db, sizeof db, "%s0", t.prefix);
    uint64_t rows = dump_for_copy(t.client, db, "c0", path);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "cut -f2 '%s' > '%s'", path, docs);
    if (system(cmd) != 0)
        bench_die("cut failed");
    static const struct {
        const char *what, *create, *cols;
        bool docs_only;
    } shapes[] = {
        {"`_id text COLLATE \"C\"` key text (oplog2pg 0.2)", SAME_SHAPE, "(_id, doc)", false},
        {"`_id jsonb`, the same key text as jsonb", "(_id jsonb PRIMARY KEY, doc jsonb NOT NULL)", "(_id, doc)", false},
        {"`_id jsonb GENERATED ALWAYS AS (doc->'_id') STORED` (oplog2pg 0.1)",
         "(_id jsonb GENERATED ALWAYS AS (doc -> '_id') STORED PRIMARY KEY, doc jsonb NOT NULL)", "(doc)", true},
    };
    double secs[3][3];
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 3; i++)
            secs[i][round] = psql_copy(t.pg, "public.bench_keys", shapes[i].create, shapes[i].cols,
                                       shapes[i].docs_only ? docs : path);
    trial_close(&t);
    printf(
        "| key column | rows | seconds (median of 3) | rows/s | of the text key's rate |\n|---|---:|---:|---:|---:|\n");
    double base = 0;
    for (int i = 0; i < 3; i++) {
        qsort(secs[i], 3, sizeof secs[i][0], cmp_double);
        double rate = (double)rows / secs[i][1];
        if (i == 0)
            base = rate;
        printf("| %s | %llu | %.2f | %.0f | %.0f%% |\n", shapes[i].what, (unsigned long long)rows, secs[i][1], rate,
               100.0 * rate / base);
    }
}

/* ---- typed tables (issue 11): a mapped collection against psql \copy of the same typed rows ---- */

/* The two shapes: TYPED, a row of the common scalar types (bigint key, double precision, numeric, text,
 * timestamptz, boolean, uuid, text[], and the rest in jsonb); ARRAY, 1 000 doubles through a double precision[]. */
typedef enum { SHAPE_TYPED, SHAPE_ARRAY } map_shape;

#define ARRAY_LEN 1000

typedef struct {
    map_shape shape;
    uint64_t n; /* documents, _id 1..n (the seed document, _id 0, is written before the daemon is paused) */
    uint64_t seed;
    char db[64];
} mapped_load;

static double rng_unit(uint64_t *s) /* [0, 1) with 53 random bits: most such doubles need 16 or 17 digits */
{
    return (double)(docgen_rng_next(s) >> 11) / 9007199254740992.0;
}

static void mapped_doc(bson_t *d, map_shape shape, int64_t id, uint64_t *rng)
{
    static const char *const colors[] = {"red", "green", "blue", "amber", "violet", "grey"};
    bson_init(d);
    BSON_APPEND_INT64(d, "_id", id);
    bson_t arr;
    char key[16];
    if (shape == SHAPE_ARRAY) {
        BSON_APPEND_ARRAY_BEGIN(d, "v", &arr);
        for (int i = 0; i < ARRAY_LEN; i++) {
            snprintf(key, sizeof key, "%d", i);
            BSON_APPEND_DOUBLE(&arr, key, rng_unit(rng) * 1000.0 - 500.0);
        }
        bson_append_array_end(d, &arr);
        return;
    }
    uint64_t r = docgen_rng_next(rng);
    char text[64];
    BSON_APPEND_DOUBLE(d, "price", rng_unit(rng) * 1000.0);
    snprintf(text, sizeof text, "%u.%02u", (unsigned)(r % 100000), (unsigned)(r >> 20) % 100);
    bson_decimal128_t dec;
    bson_decimal128_from_string(text, &dec);
    BSON_APPEND_DECIMAL128(d, "amount", &dec);
    snprintf(text, sizeof text, "customer %llu of region %u", (unsigned long long)(r >> 24) % 100000,
             (unsigned)(r >> 40) % 50);
    BSON_APPEND_UTF8(d, "name", text);
    BSON_APPEND_DATE_TIME(d, "created", INT64_C(1764403200000) + id * 1000 + (int64_t)((r >> 8) % 1000));
    BSON_APPEND_BOOL(d, "active", (r >> 3) & 1);
    uint8_t u[16];
    uint64_t a = docgen_rng_next(rng), b = docgen_rng_next(rng);
    memcpy(u, &a, 8);
    memcpy(u + 8, &b, 8);
    u[6] = (uint8_t)((u[6] & 0x0F) | 0x40); /* a version 4 uuid */
    u[8] = (uint8_t)((u[8] & 0x3F) | 0x80);
    BSON_APPEND_BINARY(d, "ref", BSON_SUBTYPE_UUID, u, 16);
    BSON_APPEND_ARRAY_BEGIN(d, "tags", &arr);
    unsigned ntags = 1 + (unsigned)(r >> 50) % 3;
    for (unsigned i = 0; i < ntags; i++) {
        snprintf(key, sizeof key, "%u", i);
        BSON_APPEND_UTF8(&arr, key, colors[(r >> (4 * i)) % 6]);
    }
    bson_append_array_end(d, &arr);
    /* what no column takes: the rest (rest = extra) */
    BSON_APPEND_UTF8(d, "note", (r & 7) == 0 ? "gift wrap, deliver after 18:00" : "standard");
    BSON_APPEND_INT32(d, "qty", (int32_t)(r % 20) + 1);
}

static const char *mapped_ini(const mapped_load *l, char *buf, size_t len)
{
    if (l->shape == SHAPE_ARRAY)
        snprintf(buf, len, "[map %s.c0]\nrest = drop\ncolumn.id = bigint from _id\ncolumn.v = double precision[]\n",
                 l->db);
    else
        snprintf(buf, len,
                 "[map %s.c0]\nrest = extra\ncolumn.id = bigint from _id\ncolumn.price = double precision\n"
                 "column.amount = numeric\ncolumn.name = text\ncolumn.created = timestamptz\n"
                 "column.active = boolean\ncolumn.ref = uuid\ncolumn.tags = text[]\n",
                 l->db);
    return buf;
}

/* Inserts documents first..last (by _id) into db.c0 in ordered batches, each made by make(d, id, ctx). */
typedef void (*doc_maker)(bson_t *d, uint64_t id, void *ctx);

static void insert_range(trial *t, const char *db, uint64_t first, uint64_t last, doc_maker make, void *ctx)
{
    enum { BATCH = 200 };
    static bson_t docs[BATCH];
    const bson_t *ptrs[BATCH];
    mongoc_collection_t *coll = mongoc_client_get_collection(t->client, db, "c0");
    for (uint64_t id = first; id <= last;) {
        size_t nb = 0;
        for (; nb < BATCH && id <= last; nb++, id++) {
            make(&docs[nb], id, ctx);
            ptrs[nb] = &docs[nb];
        }
        bson_error_t err;
        bool ok = mongoc_collection_insert_many(coll, ptrs, nb, NULL, NULL, &err);
        for (size_t i = 0; i < nb; i++)
            bson_destroy(&docs[i]);
        if (!ok)
            bench_die("inserting into %s.c0: %s", db, err.message);
    }
    mongoc_collection_destroy(coll);
}

typedef struct {
    const mapped_load *l;
    uint64_t *rng;
} mapped_maker;

static void make_mapped(bson_t *d, uint64_t id, void *ctx)
{
    mapped_maker *m = ctx;
    mapped_doc(d, m->l->shape, (int64_t)id, m->rng);
}

static void insert_mapped(trial *t, const mapped_load *l, uint64_t first, uint64_t last, uint64_t *rng)
{
    mapped_maker m = {l, rng};
    insert_range(t, l->db, first, last, make_mapped, &m);
}

static void write_mapped(trial *t, const void *ctx)
{
    const mapped_load *l = ctx;
    uint64_t rng = l->seed;
    insert_mapped(t, l, 1, l->n, &rng);
    bench_exec_sql(t->pg, "CHECKPOINT"); /* as before the psql \copy: each side starts without dirty buffers */
}

static uint64_t count_rows(PGconn *pg, const char *qtable)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", qtable);
    PGresult *r = PQexec(pg, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        bench_die("%s: %s", sql, PQerrorMessage(pg));
    uint64_t n = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return n;
}

typedef struct {
    double daemon_s, copy_s, binary_s, cpu_s; /* cpu_s: the daemon's CPU time (all threads) over daemon_s */
    double sim_cpu_s, pg_cpu_s;               /* mongosim's and PostgreSQL's, over the same time */
    double reader_cpu_s;                      /* the daemon's reader thread's (part of cpu_s) */
    unsigned long long faults, switches;      /* the daemon's page faults and context switches, over the same time */
    long peak_kb;
    uint64_t rows;
    long long file_bytes;
} mapped_result;

/* One side-by-side trial: oplog2pg replicates the n documents of a fresh mongosim into the mapped table, then psql
 * \copy loads the very rows it wrote (COPY ... TO, text format) into a fresh table made LIKE it (same columns,
 * types, collations, primary key), and then the same rows in COPY's binary format: what PostgreSQL alone needs to
 * store them, the floor under both. */
static mapped_result mapped_trial(map_shape shape, uint64_t n, int rep)
{
    trial t;
    char name[32], ini[1024], qtable[128], sql[1024], path[160];
    snprintf(name, sizeof name, "%s%d", shape == SHAPE_ARRAY ? "arr" : "typ", rep);
    trial_open(&t, name, "batched");
    mapped_load l = {.shape = shape, .n = n, .seed = shape == SHAPE_ARRAY ? 111 : 222};
    snprintf(l.db, sizeof l.db, "%s0", t.prefix);
    trial_write_ini(&t, "batched", mapped_ini(&l, ini, sizeof ini));
    /* The seed document (_id 0) first, so that the table is made and its statements prepared before the timing. */
    uint64_t seed_rng = 1;
    insert_mapped(&t, &l, 0, 0, &seed_rng);
    mapped_result res = {.peak_kb = -1};
    res.daemon_s = timed_backlog_of(&t, write_mapped, &l, &res.peak_kb, &res.cpu_s);
    res.sim_cpu_s = t.sim_cpu_s;
    res.pg_cpu_s = t.pg_cpu_s;
    res.reader_cpu_s = t.reader_cpu_s;
    res.faults = t.faults;
    res.switches = t.switches;
    snprintf(qtable, sizeof qtable, "%s.c0", l.db);
    if ((res.rows = count_rows(t.pg, qtable)) != n + 1)
        bench_die("%s holds %llu rows, not %llu; see %s", qtable, (unsigned long long)res.rows,
                  (unsigned long long)n + 1, t.log);
    res.rows = n;

    snprintf(path, sizeof path, "%s/rows.copy", t.dir);
    snprintf(sql, sizeof sql, "psql -X -q -v ON_ERROR_STOP=1 -c \"\\copy (SELECT * FROM %s WHERE id <> 0) to '%s'\"",
             qtable, path);
    if (system(sql) != 0)
        bench_die("psql \\copy from %s failed", qtable);
    FILE *f = fopen(path, "r");
    if (f != NULL && fseek(f, 0, SEEK_END) == 0)
        res.file_bytes = ftell(f);
    if (f != NULL)
        fclose(f);
    char bin[170];
    snprintf(bin, sizeof bin, "%s/rows.bin", t.dir);
    snprintf(sql, sizeof sql,
             "psql -X -q -v ON_ERROR_STOP=1 -c \"\\copy (SELECT * FROM %s WHERE id <> 0) to '%s' with (format "
             "binary)\"",
             qtable, bin);
    if (system(sql) != 0)
        bench_die("psql \\copy from %s failed", qtable);
    char like[200];
    snprintf(like, sizeof like, "(LIKE %s INCLUDING ALL)", qtable);
    res.copy_s = psql_copy(t.pg, "public.bench_mapped_copy", like, "", path);
    res.binary_s = psql_copy_opts(t.pg, "public.bench_mapped_copy", like, "", bin, " with (format binary)");
    trial_close(&t);
    return res;
}

static double median(const double *v, int n)
{
    double tmp[9];
    memcpy(tmp, v, (size_t)n * sizeof *v);
    qsort(tmp, (size_t)n, sizeof tmp[0], cmp_double);
    return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}

static void min_max(const double *v, int n, double *lo, double *hi)
{
    *lo = *hi = v[0];
    for (int i = 1; i < n; i++) {
        *lo = v[i] < *lo ? v[i] : *lo;
        *hi = v[i] > *hi ? v[i] : *hi;
    }
}

static void print_runs(const double *v, int n)
{
    for (int i = 0; i < n; i++)
        printf("%s%.0f", i ? ", " : " ", v[i]);
}

/* reps side-by-side pairs (oplog2pg, then psql \copy, each on fresh tables), as a table of medians and runs. */
static void bench_mapped_shape(map_shape shape, uint64_t n, int reps)
{
    double daemon[9], copy[9], binary[9], ratio[9], cpu_us[9];
    long peak = 0;
    mapped_result r = {0};
    for (int i = 0; i < reps; i++) {
        r = mapped_trial(shape, n, i);
        daemon[i] = (double)n / r.daemon_s;
        copy[i] = (double)n / r.copy_s;
        binary[i] = (double)n / r.binary_s;
        ratio[i] = daemon[i] / copy[i];
        cpu_us[i] = r.cpu_s * 1e6 / (double)n;
        if (r.peak_kb > peak)
            peak = r.peak_kb;
        fprintf(stderr,
                "mapped %s run %d: oplog2pg %.0f rows/s (%.1f us CPU/row, reader thread %.1f; per 1000 rows %.0f page "
                "faults, %.0f "
                "context switches; mongosim %.1f, PostgreSQL %.1f us CPU/row), psql \\copy %.0f rows/s (%.2fx), binary "
                "%.0f "
                "rows/s\n",
                shape == SHAPE_ARRAY ? "array" : "typed", i + 1, daemon[i], cpu_us[i], r.reader_cpu_s * 1e6 / (double)n,
                (double)r.faults * 1e3 / (double)n, (double)r.switches * 1e3 / (double)n, r.sim_cpu_s * 1e6 / (double)n,
                r.pg_cpu_s * 1e6 / (double)n, copy[i], ratio[i], binary[i]);
    }
    if (shape == SHAPE_TYPED)
        printf("%llu documents into `bigint` (key, from _id), `double precision`, `numeric`, `text`, `timestamptz`, "
               "`boolean`, `uuid`, `text[]` and the rest (`rest = extra`, jsonb); the COPY text file is %.1f MB.\n\n",
               (unsigned long long)n, (double)r.file_bytes / 1e6);
    else
        printf("%llu documents of %d doubles each into `double precision[]` (key `bigint` from _id, `rest = drop`); "
               "the COPY text file is %.1f MB.\n\n",
               (unsigned long long)n, ARRAY_LEN, (double)r.file_bytes / 1e6);
    printf("| what | rows | rows/s, median of %d | the %d runs, in order (rows/s) |\n|---|---:|---:|---|\n", reps,
           reps);
    printf("| psql \\copy of the same rows (text), same table | %llu | %.0f |", (unsigned long long)n,
           median(copy, reps));
    print_runs(copy, reps);
    printf(" |\n| oplog2pg, tailing the oplog of those inserts | %llu | %.0f |", (unsigned long long)n,
           median(daemon, reps));
    print_runs(daemon, reps);
    printf(" |\n| (the floor) psql \\copy of the same rows in binary format, same table | %llu | %.0f |",
           (unsigned long long)n, median(binary, reps));
    print_runs(binary, reps);
    double lo, hi;
    min_max(ratio, reps, &lo, &hi);
    printf(" |\n\noplog2pg / psql \\copy: **%.2fx** (median of the %d pairs' ratios; %.2fx to %.2fx). The daemon used "
           "%.1f us of CPU per row (all threads, median) and at most %.1f MB of resident memory.\n",
           median(ratio, reps), reps, lo, hi, median(cpu_us, reps), (double)peak / 1024.0);
    fflush(stdout);
}

/* Issue 11's two figures: typed rows against psql \copy of the same rows, and arrays of doubles against psql \copy
 * of their text; three side-by-side pairs each (BENCH_MAPPED_REPS, at most 9). */
static void bench_mapped(uint64_t n_typed, uint64_t n_arrays)
{
    const char *env = getenv("BENCH_MAPPED_REPS");
    int reps = env ? atoi(env) : 3;
    if (reps < 1 || reps > 9)
        bench_die("BENCH_MAPPED_REPS must be 1 to 9");
    if (n_typed > 0) {
        printf("### Typed columns\n\n");
        bench_mapped_shape(SHAPE_TYPED, n_typed, reps);
    }
    if (n_arrays > 0) {
        printf("%s### Arrays of %d doubles\n\n", n_typed > 0 ? "\n" : "", ARRAY_LEN);
        bench_mapped_shape(SHAPE_ARRAY, n_arrays, reps);
    }
}

/* ---- one transaction of 1 GB of oplog (issue 12) ---- */

/* The documents: {_id: i (int64), k: int32, tag: string, pad: PAD random letters and digits}, i = 1..n, each the same
 * whether written in one transaction or as plain inserts. What PostgreSQL must hold is known from them alone: the row
 * (key text "i", and the document as jsonb prints it: keys by length, then bytes) and its md5. */
#define TXN_PAD     4000 /* the default; `replication txn N PAD` sets another */
#define TXN_BATCH   2000 /* documents per insert command (8 MB) */
#define TXN_ROW_PAD 200  /* a row's text beyond its pad */

static const char ALNUM[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/* Document i's fields (a pad of padlen letters and digits), and its row as `_id \t doc::text` in row (padlen +
 * TXN_ROW_PAD bytes; returns its length). */
static size_t txn_doc(uint64_t i, size_t padlen, int32_t *k, char *tag, size_t taglen, char *pad, char *row)
{
    uint64_t rng = 0x5EEDull ^ (i * 0x9E3779B97F4A7C15ull);
    for (size_t j = 0; j < padlen;) {
        uint64_t r = docgen_rng_next(&rng);
        for (int c = 0; c < 10 && j < padlen; c++, r /= 62)
            pad[j++] = ALNUM[r % 62];
    }
    pad[padlen] = '\0';
    *k = (int32_t)(docgen_rng_next(&rng) % 2000000) - 1000000;
    snprintf(tag, taglen, "t%u", (unsigned)(i % 97));
    return (size_t)snprintf(row, padlen + TXN_ROW_PAD,
                            "%llu\t{\"k\": %d, \"_id\": %llu, \"pad\": \"%s\", \"tag\": \"%s\"}", (unsigned long long)i,
                            (int)*k, (unsigned long long)i, pad, tag);
}

static void md5_hex(const void *data, size_t len, char hex[33])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!EVP_Digest(data, len, md, &mdlen, EVP_md5(), NULL) || mdlen != 16)
        bench_die("md5 failed");
    for (unsigned b = 0; b < 16; b++)
        snprintf(hex + 2 * b, 3, "%02x", md[b]);
}

typedef struct {
    char (*row_md5)[33]; /* each row's md5 (hex), row i at i - 1 */
    char sum[33];        /* md5 of those, in _id order: what txn_check computes in PostgreSQL */
    double write_s;      /* how long writing them to mongosim took */
} txn_written;

/* How the documents reach mongosim's oplog. */
typedef enum {
    TXN_PLAIN,  /* plain inserts (insert_many, ordered): one entry each, the baseline */
    TXN_CHAIN,  /* one transaction's chain, built here in the server's shapes and split, and appended (appendOplog) */
    TXN_DRIVER, /* one client transaction (startTransaction .. commitTransaction), split by mongosim */
} txn_how;

typedef struct {
    txn_how how;
    uint64_t n;
    size_t pad; /* bytes of each document's pad */
    char db[64];
    txn_written *out;
} txn_load;

/* The documents in _id order, with the checksum of the rows they must become. */
typedef struct {
    const txn_load *l;
    uint64_t next; /* the next _id */
    char *pad, *row;
    EVP_MD_CTX *sum;
} txn_gen;

static void gen_open(txn_gen *g, const txn_load *l)
{
    g->l = l;
    g->next = 1;
    g->pad = malloc(l->pad + 1);
    g->row = malloc(l->pad + TXN_ROW_PAD);
    g->sum = EVP_MD_CTX_new();
    l->out->row_md5 = malloc(l->n * sizeof *l->out->row_md5);
    if (!g->pad || !g->row || !g->sum || !l->out->row_md5 || !EVP_DigestInit_ex(g->sum, EVP_md5(), NULL))
        bench_die("out of memory");
}

/* The next document into *doc (initialised here); false after the last. */
static bool gen_next(txn_gen *g, bson_t *doc)
{
    if (g->next > g->l->n)
        return false;
    uint64_t id = g->next++;
    int32_t k;
    char tag[16];
    size_t len = txn_doc(id, g->l->pad, &k, tag, sizeof tag, g->pad, g->row);
    md5_hex(g->row, len, g->l->out->row_md5[id - 1]);
    EVP_DigestUpdate(g->sum, g->l->out->row_md5[id - 1], 32);
    bson_init(doc);
    BSON_APPEND_INT64(doc, "_id", (int64_t)id);
    BSON_APPEND_INT32(doc, "k", k);
    BSON_APPEND_UTF8(doc, "tag", tag);
    BSON_APPEND_UTF8(doc, "pad", g->pad);
    return true;
}

static void gen_close(txn_gen *g)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!EVP_DigestFinal_ex(g->sum, md, &mdlen) || mdlen != 16)
        bench_die("md5 failed");
    for (unsigned b = 0; b < 16; b++)
        snprintf(g->l->out->sum + 2 * b, 3, "%02x", md[b]);
    EVP_MD_CTX_free(g->sum);
    free(g->row);
    free(g->pad);
}

/* Plain inserts, or one client transaction (TXN_DRIVER): ordered insert commands of TXN_BATCH documents. */
static void write_inserts(trial *t, txn_gen *g)
{
    static bson_t docs[TXN_BATCH];
    const bson_t *ptrs[TXN_BATCH];
    bson_error_t err;
    mongoc_client_session_t *cs = NULL;
    bson_t opts = BSON_INITIALIZER;
    if (g->l->how == TXN_DRIVER) {
        if ((cs = mongoc_client_start_session(t->client, NULL, &err)) == NULL ||
            !mongoc_client_session_start_transaction(cs, NULL, &err) || !mongoc_client_session_append(cs, &opts, &err))
            bench_die("starting the transaction: %s", err.message);
    }
    mongoc_collection_t *coll = mongoc_client_get_collection(t->client, g->l->db, "c0");
    for (;;) {
        size_t nb = 0;
        while (nb < TXN_BATCH && gen_next(g, &docs[nb])) {
            ptrs[nb] = &docs[nb];
            nb++;
        }
        if (nb == 0)
            break;
        bool ok = mongoc_collection_insert_many(coll, ptrs, nb, &opts, NULL, &err);
        for (size_t i = 0; i < nb; i++)
            bson_destroy(&docs[i]);
        if (!ok)
            bench_die("inserting into %s.c0: %s", g->l->db, err.message);
    }
    if (cs != NULL && !mongoc_client_session_commit_transaction(cs, NULL, &err))
        bench_die("committing the transaction: %s", err.message);
    mongoc_collection_destroy(coll);
    if (cs != NULL)
        mongoc_client_session_destroy(cs);
    bson_destroy(&opts);
}

/* The collection's uuid (listCollections info.uuid), for the inner ops' ui. */
static void collection_uuid(trial *t, const char *db, uint8_t uuid[16])
{
    mongoc_database_t *d = mongoc_client_get_database(t->client, db);
    bson_t *opts = BCON_NEW("filter", "{", "name", BCON_UTF8("c0"), "}");
    mongoc_cursor_t *cur = mongoc_database_find_collections_with_opts(d, opts);
    const bson_t *info;
    bool found = false;
    while (!found && mongoc_cursor_next(cur, &info)) {
        bson_iter_t it;
        const uint8_t *bin;
        uint32_t len;
        bson_subtype_t st;
        if (bson_iter_init(&it, info) && bson_iter_find_descendant(&it, "info.uuid", &it) &&
            BSON_ITER_HOLDS_BINARY(&it)) {
            bson_iter_binary(&it, &st, &len, &bin);
            if (len == 16) {
                memcpy(uuid, bin, 16);
                found = true;
            }
        }
    }
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    mongoc_database_destroy(d);
    if (!found)
        bench_die("no uuid for %s.c0", db);
}

/* A chain entry's head and tail, in a 4.4+ server's field order ([lsid, txnNumber,] op, ns, o, ts, t, v, wall,
 * prevOpTime): the applyOps array is appended between them. */
static const uint8_t TXN_LSID[16] = {0x08, 0xaf, 0xbc, 0xfa, 0x76, 0x7e, 0x11, 0xe9,
                                     0xbd, 0xa7, 0xab, 0xca, 0xf4, 0x11, 0x2d, 0xf6};
static const uint8_t EMPTY_SHA256[32] = {0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4,
                                         0xc8, 0x99, 0x6f, 0xb9, 0x24, 0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b,
                                         0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55};

/* Appends one entry to the oplog (appendOplog, the entry verbatim). */
static void append_entry(trial *t, const bson_t *entry)
{
    bson_t cmd = BSON_INITIALIZER, arr, reply;
    BSON_APPEND_ARRAY_BEGIN(&cmd, "appendOplog", &arr);
    BSON_APPEND_DOCUMENT(&arr, "0", entry);
    bson_append_array_end(&cmd, &arr);
    bson_error_t err;
    if (!mongoc_client_command_simple(t->client, "admin", &cmd, NULL, &reply, &err))
        bench_die("appendOplog of a %u-byte entry: %s", entry->len, err.message);
    bson_destroy(&reply);
    bson_destroy(&cmd);
}

/* One transaction as the server logs it at commit (transaction_operations.cpp, packOperationsIntoApplyOps): the
 * inserts packed into applyOps entries, each taking ops until the next would pass 16 MB (an op counts its size and 8
 * bytes), all but the last with partialTxn, the last with count, each prevOpTime the previous entry's OpTime (the
 * first the null OpTime), consecutive timestamps in the term of the newest entry. */
static void write_chain(trial *t, txn_gen *g)
{
    enum { ENTRY_LIMIT = 16 * 1024 * 1024 };
    uint8_t ui[16];
    collection_uuid(t, g->l->db, ui);
    char ns[128];
    snprintf(ns, sizeof ns, "%s.c0", g->l->db);
    /* The newest entry's ts and term: the chain is logged after it, in its term. */
    mongoc_collection_t *oplog = mongoc_client_get_collection(t->client, "local", "oplog.rs");
    bson_t *last_opts = BCON_NEW("sort", "{", "$natural", BCON_INT32(-1), "}", "limit", BCON_INT64(1));
    bson_t empty = BSON_INITIALIZER;
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, &empty, last_opts, NULL);
    const bson_t *last;
    uint32_t secs = 0, inc = 0;
    int64_t term = -1;
    bson_iter_t it;
    if (mongoc_cursor_next(cur, &last)) {
        if (bson_iter_init_find(&it, last, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it))
            bson_iter_timestamp(&it, &secs, &inc);
        if (bson_iter_init_find(&it, last, "t"))
            term = bson_iter_as_int64(&it);
    }
    mongoc_cursor_destroy(cur);
    bson_destroy(&empty);
    bson_destroy(last_opts);
    mongoc_collection_destroy(oplog);
    if (secs == 0 || term < 0)
        bench_die("no newest oplog entry with ts and t");
    secs++;
    inc = 0;
    bson_t inner, doc, entry, o, arr;
    bool have = gen_next(g, &doc);
    uint64_t total = 0;
    while (have) {
        bson_init(&entry);
        bson_t lsid;
        BSON_APPEND_DOCUMENT_BEGIN(&entry, "lsid", &lsid);
        bson_append_binary(&lsid, "id", -1, BSON_SUBTYPE_UUID, TXN_LSID, 16);
        bson_append_binary(&lsid, "uid", -1, BSON_SUBTYPE_BINARY, EMPTY_SHA256, 32);
        bson_append_document_end(&entry, &lsid);
        BSON_APPEND_INT64(&entry, "txnNumber", 1);
        BSON_APPEND_UTF8(&entry, "op", "c");
        BSON_APPEND_UTF8(&entry, "ns", "admin.$cmd");
        BSON_APPEND_DOCUMENT_BEGIN(&entry, "o", &o);
        BSON_APPEND_ARRAY_BEGIN(&o, "applyOps", &arr);
        size_t size = 0;
        uint32_t k = 0;
        while (have) {
            bson_init(&inner);
            BSON_APPEND_UTF8(&inner, "op", "i");
            BSON_APPEND_UTF8(&inner, "ns", ns);
            bson_append_binary(&inner, "ui", -1, BSON_SUBTYPE_UUID, ui, 16);
            BSON_APPEND_DOCUMENT(&inner, "o", &doc);
            if (k > 0 && size + inner.len > ENTRY_LIMIT) {
                bson_destroy(&inner);
                break;
            }
            char key[16];
            const char *kp;
            bson_uint32_to_string(k++, &kp, key, sizeof key);
            bson_append_document(&arr, kp, -1, &inner);
            size += inner.len + 8;
            bson_destroy(&inner);
            bson_destroy(&doc);
            total++;
            have = gen_next(g, &doc);
        }
        bson_append_array_end(&o, &arr);
        if (have)
            BSON_APPEND_BOOL(&o, "partialTxn", true);
        else if (inc > 0) /* count only ends a chain of two or more entries (oplog/REPORT.md §4) */
            BSON_APPEND_INT64(&o, "count", (int64_t)total);
        bson_append_document_end(&entry, &o);
        BSON_APPEND_TIMESTAMP(&entry, "ts", secs, ++inc);
        BSON_APPEND_INT64(&entry, "t", term);
        BSON_APPEND_INT64(&entry, "v", 2);
        BSON_APPEND_DATE_TIME(&entry, "wall", (int64_t)secs * 1000);
        bson_t prev;
        BSON_APPEND_DOCUMENT_BEGIN(&entry, "prevOpTime", &prev);
        BSON_APPEND_TIMESTAMP(&prev, "ts", inc > 1 ? secs : 0, inc > 1 ? inc - 1 : 0);
        BSON_APPEND_INT64(&prev, "t", inc > 1 ? term : -1);
        bson_append_document_end(&entry, &prev);
        append_entry(t, &entry);
        bson_destroy(&entry);
    }
}

static void write_txn(trial *t, const void *ctx)
{
    const txn_load *l = ctx;
    txn_gen g;
    gen_open(&g, l);
    double t0 = bench_now_s();
    if (l->how == TXN_CHAIN)
        write_chain(t, &g);
    else
        write_inserts(t, &g);
    l->out->write_s = bench_now_s() - t0;
    gen_close(&g);
}

/* The oplog after the trial's starting checkpoint: entries, bytes, and the transaction's applyOps entries. */
typedef struct {
    uint64_t entries, bytes, chain, partial, chain_bytes;
    uint32_t largest;
} oplog_shape;

static oplog_shape oplog_after(mongoc_client_t *c, uint64_t start)
{
    oplog_shape s = {0};
    mongoc_collection_t *oplog = mongoc_client_get_collection(c, "local", "oplog.rs");
    bson_t *filter = BCON_NEW("ts", "{", "$gt", BCON_TIMESTAMP((uint32_t)(start >> 32), (uint32_t)start), "}");
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, filter, NULL, NULL);
    const bson_t *doc;
    while (mongoc_cursor_next(cur, &doc)) {
        s.entries++;
        s.bytes += doc->len;
        bson_iter_t it, o;
        if (bson_iter_init_find(&it, doc, "o") && bson_iter_recurse(&it, &o) && bson_iter_find(&o, "applyOps")) {
            s.chain++;
            s.chain_bytes += doc->len;
            s.largest = doc->len > s.largest ? doc->len : s.largest;
            if (bson_iter_recurse(&it, &o) && bson_iter_find(&o, "partialTxn") && bson_iter_as_bool(&o))
                s.partial++;
        }
    }
    bson_error_t err;
    if (mongoc_cursor_error(cur, &err))
        bench_die("reading the oplog: %s", err.message);
    mongoc_cursor_destroy(cur);
    bson_destroy(filter);
    mongoc_collection_destroy(oplog);
    return s;
}

/* PostgreSQL holds exactly documents 1..n: the row count, and the md5 of the rows' md5s in _id order. On a
 * difference, the first row that differs is named. */
static void txn_check(trial *t, const txn_load *l)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT count(*), md5(string_agg(md5(_id || E'\\t' || doc::text), '' ORDER BY _id::bigint)) FROM %s.c0",
             l->db);
    PGresult *r = PQexec(t->pg, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        bench_die("%s: %s", sql, PQerrorMessage(t->pg));
    uint64_t rows = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
    bool same = rows == l->n && strcmp(PQgetvalue(r, 0, 1), l->out->sum) == 0;
    fprintf(stderr, "txn check %s: %llu rows, md5 %s (written: %llu rows, md5 %s)\n", l->db, (unsigned long long)rows,
            PQgetvalue(r, 0, 1), (unsigned long long)l->n, l->out->sum);
    PQclear(r);
    if (same)
        return;
    snprintf(sql, sizeof sql,
             "SELECT _id, md5(_id || E'\\t' || doc::text), left(doc::text, 120) FROM %s.c0 ORDER BY "
             "_id::bigint",
             l->db);
    r = PQexec(t->pg, sql);
    for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r); i++) {
        uint64_t id = strtoull(PQgetvalue(r, i, 0), NULL, 10);
        if (id != (uint64_t)i + 1 || id > l->n || strcmp(PQgetvalue(r, i, 1), l->out->row_md5[i]) != 0)
            bench_die("%s.c0 differs from what was written at row %d: _id %s, doc %s...", l->db, i + 1,
                      PQgetvalue(r, i, 0), PQgetvalue(r, i, 2));
    }
    bench_die("%s.c0 holds %llu rows, not the %llu written", l->db, (unsigned long long)rows, (unsigned long long)l->n);
}

typedef struct {
    double secs, cpu_s, sim_cpu_s, write_s;
    long peak_kb, sim_peak_kb;
    oplog_shape shape;
} txn_result;

static txn_result txn_trial(txn_how how, uint64_t n, size_t pad, int rep)
{
    trial t;
    char name[32];
    snprintf(name, sizeof name, "%s%d", how == TXN_PLAIN ? "pl" : "tx", rep);
    trial_open(&t, name, "batched");
    txn_written w = {0};
    txn_load l = {.how = how, .n = n, .pad = pad, .out = &w};
    snprintf(l.db, sizeof l.db, "%s0", t.prefix);
    /* The collection first, so that its table is made before the timing, with either way of writing. */
    mongoc_database_t *db = mongoc_client_get_database(t.client, l.db);
    bson_error_t err;
    mongoc_collection_t *made = mongoc_database_create_collection(db, "c0", NULL, &err);
    if (made == NULL)
        bench_die("creating %s.c0: %s", l.db, err.message);
    mongoc_collection_destroy(made);
    mongoc_database_destroy(db);
    txn_result res = {.peak_kb = -1};
    res.secs = timed_backlog_of(&t, write_txn, &l, &res.peak_kb, &res.cpu_s);
    res.sim_cpu_s = t.sim_cpu_s;
    res.write_s = w.write_s;
    txn_check(&t, &l);
    res.shape = oplog_after(t.client, t.start);
    if (how != TXN_PLAIN && (res.shape.chain < 1 || res.shape.partial + 1 != res.shape.chain))
        bench_die("the transaction was logged as %llu applyOps entries (%llu partialTxn), not one transaction",
                  (unsigned long long)res.shape.chain, (unsigned long long)res.shape.partial);
    free(w.row_md5);
    res.sim_peak_kb = proc_peak_kb(t.sim.pid);
    trial_close(&t);
    fprintf(stderr,
            "txn %s run %d: written in %.1f s; replicated in %.2f s, peak %ld kB, daemon CPU %.1f s, mongosim CPU "
            "%.1f s (its peak %ld kB); %llu entries of %.1f MB\n",
            how == TXN_PLAIN ? "plain" : "transaction", rep + 1, res.write_s, res.secs, res.peak_kb, res.cpu_s,
            res.sim_cpu_s, res.sim_peak_kb, (unsigned long long)res.shape.entries, (double)res.shape.bytes / 1e6);
    return res;
}

/* Issue 12: n documents in one transaction (a chain of 16 MB entries) against the same n documents as plain inserts,
 * each replicated from a checkpoint before them; BENCH_TXN_REPS pairs (default 1), plain first, then the
 * transaction. The figure to hold: the daemon's peak resident memory within 64 MB. */
static void bench_txn(uint64_t n, size_t pad)
{
    const char *env = getenv("BENCH_TXN_REPS");
    int reps = env ? atoi(env) : 1;
    if (reps < 1 || reps > 9)
        bench_die("BENCH_TXN_REPS must be 1 to 9");
    if (pad < 1 || pad > 8u << 20)
        bench_die("the pad must be 1 byte to 8 MB");
    const char *write = getenv("BENCH_TXN_WRITE");
    txn_how how = TXN_CHAIN;
    if (write != NULL && strcmp(write, "driver") == 0)
        how = TXN_DRIVER;
    else if (write != NULL && *write != '\0' && strcmp(write, "chain") != 0)
        bench_die("BENCH_TXN_WRITE must be chain or driver");
    txn_result plain[9], txn[9];
    for (int i = 0; i < reps; i++) {
        plain[i] = txn_trial(TXN_PLAIN, n, pad, i);
        txn[i] = txn_trial(how, n, pad, i);
    }
    const oplog_shape *ts = &txn[0].shape;
    printf("%llu documents of %d bytes of text each in one transaction (%s): %.1f MB of oplog in %llu entries "
           "(%llu partialTxn and the implicit commit, the largest %.2f MB); and the same documents as %llu plain "
           "inserts (%.1f MB of oplog in %llu entries). Each replicated by oplog2pg from a checkpoint before them; "
           "rows and checksum equal to what was written.\n\n",
           (unsigned long long)n, (int)pad,
           how == TXN_CHAIN ? "its chain appended as the server logs it at commit"
                            : "written by the driver, startTransaction to commitTransaction",
           (double)ts->bytes / 1e6, (unsigned long long)ts->chain, (unsigned long long)ts->partial,
           (double)ts->largest / 1048576.0, (unsigned long long)n, (double)plain[0].shape.bytes / 1e6,
           (unsigned long long)plain[0].shape.entries);
    printf("| what | rows | oplog MB | seconds | MB/s | rows/s | daemon CPU s | mongosim CPU s | daemon peak RSS |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    double ratio[9];
    long peak = 0;
    for (int i = 0; i < reps; i++) {
        const txn_result *rs[2] = {&plain[i], &txn[i]};
        for (int k = 0; k < 2; k++) {
            const txn_result *r = rs[k];
            char run[16] = "";
            if (reps > 1)
                snprintf(run, sizeof run, ", run %d", i + 1);
            printf("| %s%s | %llu | %.1f | %.2f | %.1f | %.0f | %.1f | %.1f | %.1f MB |\n",
                   k ? "one transaction" : "plain inserts (the baseline)", run, (unsigned long long)n,
                   (double)r->shape.bytes / 1e6, r->secs, (double)r->shape.bytes / 1e6 / r->secs, (double)n / r->secs,
                   r->cpu_s, r->sim_cpu_s, (double)r->peak_kb / 1024.0);
        }
        ratio[i] = txn[i].secs / plain[i].secs;
        peak = txn[i].peak_kb > peak ? txn[i].peak_kb : peak;
    }
    printf("\nThe transaction took **%.2fx** the baseline's time%s. The daemon's peak resident memory with the "
           "transaction: **%.1f MB** (%ld kB); bound 64 MB: **%s**. (mongosim's own peak: %.2f GB.)\n",
           median(ratio, reps), reps > 1 ? " (median of the pairs)" : "", (double)peak / 1024.0, peak,
           peak > 0 && peak <= 64 * 1024 ? "met" : "not met", (double)txn[0].sim_peak_kb / 1048576.0);
    fflush(stdout);
}

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
    char sql[512];
    FILE *f = fopen(script, "w");
    if (!f)
        bench_die("cannot write %s", script);
    uint64_t rows = 0;
    for (int i = 0; i < 4; i++) {
        char qtable[96], path[200];
        snprintf(qtable, sizeof qtable, "%s.c%d", db, i);
        snprintf(path, sizeof path, "%s/c%d.copy", t->dir, i);
        snprintf(sql, sizeof sql, "psql -X -q -v ON_ERROR_STOP=1 -c \"\\copy %s to '%s'\"", qtable, path);
        if (system(sql) != 0)
            bench_die("psql \\copy from %s failed", qtable);
        rows += count_rows(t->pg, qtable);
        fprintf(f, "\\copy bench_psql.c%d from '%s'\n", i, path);
    }
    fclose(f);
    return rows;
}

static void copy_print_runs(const double *v, int n, double scale, const char *fmt)
{
    for (int i = 0; i < n; i++) {
        printf("%s", i ? ", " : " ");
        printf(fmt, v[i] * scale);
    }
}

static void bench_copy(uint64_t n)
{
    const char *env = getenv("BENCH_COPY_REPS");
    int reps = env ? atoi(env) : 3;
    if (reps < 1 || reps > 9)
        bench_die("BENCH_COPY_REPS must be 1 to 9");
    int workers[4] = {1, 4}, nw = 2;
    env = getenv("BENCH_COPY_WORKERS");
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
    workload_config_init(&wc);
    wc.seed = 88;
    wc.ops = n;
    wc.db_prefix = t.prefix;
    wc.n_databases = 1;
    wc.n_namespaces = 4;
    wc.mode = WORKLOAD_INSERT_ONLY;
    wc.batch_size = 1000;
    workload_stats st;
    char err[512], db[64], script[200];
    if (!workload_run(t.uri, &wc, &st, err, sizeof err))
        bench_die("workload: %s", err);
    snprintf(db, sizeof db, "%s0", t.prefix);
    snprintf(script, sizeof script, "%s/copy.sql", t.dir);

    double rate[4][9], ratio[4][9], psql_rate[9], cpu_us[4][9], sim_us[4][9], pg_us[4][9], psql_pg_us[9];
    double par_rate[9], par_ratio[9], par_pg_us[9];
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
    printf("| psql \\copy, the 4 tables one after another | %.0f |", median(psql_rate, reps));
    copy_print_runs(psql_rate, reps, 1, "%.0f");
    printf(" | 1.00 | -, -, %.1f | |\n", median(psql_pg_us, reps));
    double plo, phi;
    min_max(par_ratio, reps, &plo, &phi);
    printf("| psql \\copy, the 4 tables at once (four sessions) | %.0f |", median(par_rate, reps));
    copy_print_runs(par_rate, reps, 1, "%.0f");
    printf(" | %.2f (%.2f to %.2f) | -, -, %.1f | |\n", median(par_ratio, reps), plo, phi, median(par_pg_us, reps));
    for (int w = 0; w < nw; w++) {
        double lo, hi;
        min_max(ratio[w], reps, &lo, &hi);
        printf("| oplog2pg initial copy, %d worker%s | %.0f |", workers[w], workers[w] > 1 ? "s" : "",
               median(rate[w], reps));
        copy_print_runs(rate[w], reps, 1, "%.0f");
        printf(" | **%.2f** (%.2f to %.2f) | %.1f, %.1f, %.1f | %.1f MB |\n", median(ratio[w], reps), lo, hi,
               median(cpu_us[w], reps), median(sim_us[w], reps), median(pg_us[w], reps), (double)peak[w] / 1024.0);
    }
    /* Against four psql sessions at once: how close several workers come to what PostgreSQL itself reaches with as
     * many writers here (each round's own pair). */
    for (int w = 0; w < nw; w++) {
        if (workers[w] < 2)
            continue;
        double of_par[9];
        for (int r = 0; r < reps; r++)
            of_par[r] = rate[w][r] / par_rate[r];
        printf("\nWith %d workers the copy reaches %.2f of four psql sessions loading the same rows at once (median of "
               "the rounds' pairs).\n",
               workers[w], median(of_par, reps));
    }
    fflush(stdout);
}

/* ---- network round trips (issue 13) ---- */

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
    double secs = timed_backlog(&t, &wc, NULL);
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
        qsort(batched, 3, sizeof batched[0], cmp_double);
        bench_daemon_conninfo = NULL;
        proc_stop(&proxy, 10);
        unlink(log);
        printf("| %u ms | %.2f s (%.0f) | %.0f | %.1fx |\n", rtts[i], (double)n / batched[1], batched[1], per_op,
               batched[1] / per_op);
        fflush(stdout);
    }
}

/* ---- insert throughput of the jsonb shape, small and large documents (issue 13) ---- */

typedef struct {
    doc_size size;
    uint64_t n;
    char db[64];
} sized_load;

static void make_sized(bson_t *d, uint64_t id, void *ctx)
{
    docgen_sized_doc(d, ((const sized_load *)ctx)->size, id);
}

static void insert_sized(trial *t, const sized_load *l, uint64_t first, uint64_t last)
{
    insert_range(t, l->db, first, last, make_sized, (void *)l);
}

static void write_sized(trial *t, const void *ctx)
{
    const sized_load *l = ctx;
    insert_sized(t, l, 1, l->n);
    bench_exec_sql(t->pg, "CHECKPOINT"); /* as before the psql \copy: each side starts without dirty buffers */
}

/* BENCH_THROUGHPUT_REPS (default 3): trials per table of the throughput and steady benchmarks. */
static int throughput_reps(void)
{
    const char *env = getenv("BENCH_THROUGHPUT_REPS");
    int reps = env ? atoi(env) : 3;
    if (reps < 1 || reps > 9)
        bench_die("BENCH_THROUGHPUT_REPS must be 1 to 9");
    return reps;
}

static void value_range(const double *v, int n, double *lo, double *hi)
{
    *lo = *hi = v[0];
    for (int i = 1; i < n; i++) {
        *lo = v[i] < *lo ? v[i] : *lo;
        *hi = v[i] > *hi ? v[i] : *hi;
    }
}

/* The trial's rows but the seed document (n 0), as COPY text into path, for the psql side. */
static void dump_rows(const char *qtable, const char *path)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "psql -X -q -v ON_ERROR_STOP=1 -c \"\\copy (SELECT _id, doc FROM %s WHERE doc->>'n' <> '0') to '%s'\"",
             qtable, path);
    if (system(sql) != 0)
        bench_die("psql \\copy from %s failed", qtable);
}

static void expect_rows(trial *t, const char *qtable, uint64_t want)
{
    uint64_t have = count_rows(t->pg, qtable);
    if (have != want)
        bench_die("%s holds %llu rows, not %llu; see %s", qtable, (unsigned long long)have, (unsigned long long)want,
                  t->log);
}

typedef struct {
    double tail_s, replay_s, copy_s, cpu_s, sim_cpu_s, pg_cpu_s, copy_pg_cpu_s;
    long peak_kb;
    long long file_bytes;
} sized_result;

/* One side-by-side trial: oplog2pg tails the n inserts of a fresh mongosim into the jsonb table (_id text key, doc
 * jsonb); then `oplog2pg replay` of a dump of the same oplog entries, from the same checkpoint, into the same table
 * emptied; then psql \copy of the very rows oplog2pg wrote (COPY ... TO, text) into a fresh table made LIKE it
 * (same columns, collation, primary key, no generated column). */
static sized_result sized_trial(doc_size size, uint64_t n, int rep)
{
    trial t;
    char name[32], qtable[128], sql[1024], path[160], dump[160], bin[256], err[512];
    snprintf(name, sizeof name, "%s%d", size == DOC_LARGE ? "big" : "sml", rep);
    trial_open(&t, name, "batched");
    sized_load l = {.size = size, .n = n};
    snprintf(l.db, sizeof l.db, "%s0", t.prefix);
    trial_write_ini(&t, "batched", "");
    insert_sized(&t, &l, 0, 0); /* the seed document, so that the table exists before the timing */
    sized_result res = {.peak_kb = -1};
    res.tail_s = timed_backlog_of(&t, write_sized, &l, &res.peak_kb, &res.cpu_s);
    res.sim_cpu_s = t.sim_cpu_s;
    res.pg_cpu_s = t.pg_cpu_s;
    snprintf(qtable, sizeof qtable, "%s.c0", l.db);
    expect_rows(&t, qtable, n + 1);
    proc_stop(&t.daemon, 60);
    t.daemon.pid = 0;

    /* replay: the same entries from a dump, from the same checkpoint, into the table emptied of them */
    snprintf(dump, sizeof dump, "%s/oplog.bson", t.dir);
    dump_oplog(t.client, dump);
    snprintf(path, sizeof path, "%s/rows.copy", t.dir);
    dump_rows(qtable, path);
    FILE *f = fopen(path, "r");
    if (f != NULL && fseek(f, 0, SEEK_END) == 0)
        res.file_bytes = ftell(f);
    if (f != NULL)
        fclose(f);
    snprintf(sql, sizeof sql, "DELETE FROM %s WHERE doc->>'n' <> '0'", qtable); /* all but the seed (n 0) */
    bench_exec_sql(t.pg, sql);
    snprintf(sql, sizeof sql, "VACUUM %s", qtable);
    bench_exec_sql(t.pg, sql);
    snprintf(sql, sizeof sql, "UPDATE oplog2pg.checkpoint SET ts_sec = %u, ts_inc = %u WHERE service = '%s'",
             (unsigned)(t.start >> 32), (unsigned)t.start, t.service);
    bench_exec_sql(t.pg, sql);
    bench_exec_sql(t.pg, "CHECKPOINT");
    snprintf(bin, sizeof bin, "%s/oplog2pg", proc_build_dir());
    const char *argv[] = {bin, "-c", t.ini, "replay", dump, NULL};
    double r0 = bench_now_s();
    if (!proc_start(argv, NULL, t.log, &t.daemon, err, sizeof err))
        bench_die("%s", err);
    if (!proc_wait(&t.daemon, 3600) || proc_exit_code(&t.daemon) != 0)
        bench_die("oplog2pg replay failed; see %s", t.log);
    res.replay_s = bench_now_s() - r0;
    t.daemon.pid = 0;
    if (count_rows(t.pg, qtable) != n + 1)
        bench_die("after replay %s holds %llu rows, not %llu; see %s", qtable,
                  (unsigned long long)count_rows(t.pg, qtable), (unsigned long long)n + 1, t.log);

    char like[200];
    snprintf(like, sizeof like, "(LIKE %s INCLUDING ALL)", qtable);
    res.copy_s = psql_copy(t.pg, "public.bench_sized_copy", like, "", path);
    res.copy_pg_cpu_s = last_copy_pg_cpu_s;
    trial_close(&t);
    return res;
}

/* ---- the same on warm connections (issue 13) ---- */

/* A fresh PostgreSQL backend pays a page fault for each page of shared memory it touches first, and a COPY that
 * starts takes buffers this backend has not touched yet; a daemon keeps its connection, so it pays that only over
 * about its first shared_buffers of rows (docs/benchmarks.md, "What that cost is"). These trials measure both sides
 * past that: the daemon applies as many untimed rows into another table through the same session first, and psql
 * loads the rows into a scratch table in the same session before the timed load. */

static void warm_sized(trial *t, const void *ctx)
{
    const sized_load *l = ctx;
    insert_sized(t, l, 1, l->n);
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
    sized_load l = {.size = size, .n = n}, warm = {.size = size, .n = n};
    snprintf(l.db, sizeof l.db, "%s0", t.prefix);
    snprintf(warm.db, sizeof warm.db, "%s1", t.prefix);
    trial_write_ini(&t, "batched", "");
    insert_sized(&t, &l, 0, 0); /* the seed document, so that the table exists before the timing */
    steady_result res = {.peak_kb = -1};
    backlog_warmup = warm_sized;
    backlog_warmup_ctx = &warm;
    res.tail_s = timed_backlog_of(&t, write_sized, &l, &res.peak_kb, &res.cpu_s);
    backlog_warmup = NULL;
    backlog_warmup_ctx = NULL;
    res.pg_cpu_s = t.pg_cpu_s;
    snprintf(qtable, sizeof qtable, "%s.c0", l.db);
    expect_rows(&t, qtable, n + 1);
    snprintf(sql, sizeof sql, "%s.c0", warm.db);
    expect_rows(&t, sql, n);
    proc_stop(&t.daemon, 60);
    t.daemon.pid = 0;
    snprintf(path, sizeof path, "%s/rows.copy", t.dir);
    dump_rows(qtable, path);
    res.copy_s = psql_copy_warm(&t, qtable, path, &res.copy_pg_cpu_s);
    trial_close(&t);
    return res;
}

/* Tailing against psql \copy, both on warm connections; reps trials each (BENCH_THROUGHPUT_REPS, default 3). */
static void bench_steady(uint64_t n_small, uint64_t n_large)
{
    int reps = throughput_reps();
    for (int s = 0; s < 2; s++) {
        doc_size size = s ? DOC_LARGE : DOC_SMALL;
        uint64_t n = s ? n_large : n_small;
        if (n == 0)
            continue;
        double tail[9], copy[9], rt[9], cpu_us[9], pg_us[9], psql_pg_us[9];
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
        printf("| psql \\copy of the same rows, same table, second load of the session | %.0f |", median(copy, reps));
        print_runs(copy, reps);
        printf(" |\n| oplog2pg, tailing the oplog of those inserts, after as many others | %.0f |", median(tail, reps));
        print_runs(tail, reps);
        double lo, hi;
        value_range(rt, reps, &lo, &hi);
        printf(" |\n\nTailing / psql \\copy: **%.2fx** (%.2fx to %.2fx). CPU per row (medians): the daemon %.1f us, "
               "PostgreSQL %.1f us behind it (all its processes) and %.1f us in psql's backend. The daemon's peak "
               "resident memory: %.1f MB.\n",
               median(rt, reps), lo, hi, median(cpu_us, reps), median(pg_us, reps), median(psql_pg_us, reps),
               (double)peak / 1024.0);
        fflush(stdout);
    }
}

/* Issue 13's throughput goal: tailing at least 0.9 of psql \copy of the same rows into the same shape, for small and
 * large documents, and replay at least as fast as tailing; reps side-by-side trials each (BENCH_THROUGHPUT_REPS,
 * default 3), medians of the trials' own ratios. */
static void bench_throughput(uint64_t n_small, uint64_t n_large)
{
    int reps = throughput_reps();
    for (int s = 0; s < 2; s++) {
        doc_size size = s ? DOC_LARGE : DOC_SMALL;
        uint64_t n = s ? n_large : n_small;
        if (n == 0)
            continue;
        double tail[9], replay[9], copy[9], rt[9], rr[9], cpu_us[9];
        long peak = 0;
        sized_result r = {0};
        for (int i = 0; i < reps; i++) {
            r = sized_trial(size, n, i);
            tail[i] = (double)n / r.tail_s;
            replay[i] = (double)n / r.replay_s;
            copy[i] = (double)n / r.copy_s;
            rt[i] = tail[i] / copy[i];
            rr[i] = replay[i] / copy[i];
            cpu_us[i] = r.cpu_s * 1e6 / (double)n;
            if (r.peak_kb > peak)
                peak = r.peak_kb;
            fprintf(stderr,
                    "throughput %s run %d: tailing %.0f rows/s (%.2fx; daemon %.1f, mongosim %.1f, PostgreSQL %.1f us "
                    "CPU/row), replay %.0f rows/s (%.2fx), psql \\copy %.0f rows/s (PostgreSQL %.1f us CPU/row)\n",
                    s ? "large" : "small", i + 1, tail[i], rt[i], cpu_us[i], r.sim_cpu_s * 1e6 / (double)n,
                    r.pg_cpu_s * 1e6 / (double)n, replay[i], rr[i], copy[i], r.copy_pg_cpu_s * 1e6 / (double)n);
        }
        printf("%s### %s documents (about %s of BSON each)\n\n%llu inserts; the rows as COPY text are %.1f MB.\n\n",
               s ? "\n" : "", s ? "Large" : "Small", s ? "10 kB" : "320 bytes", (unsigned long long)n,
               (double)r.file_bytes / 1e6);
        printf("| what | rows/s, median of %d | the runs, in order (rows/s) |\n|---|---:|---|\n", reps);
        printf("| psql \\copy of the same rows, same table | %.0f |", median(copy, reps));
        print_runs(copy, reps);
        printf(" |\n| oplog2pg, tailing the oplog of those inserts | %.0f |", median(tail, reps));
        print_runs(tail, reps);
        printf(" |\n| oplog2pg replay of a dump of that oplog (start-up included) | %.0f |", median(replay, reps));
        print_runs(replay, reps);
        double lo, hi;
        value_range(rt, reps, &lo, &hi);
        printf(
            " |\n\nTailing / psql \\copy: **%.2fx** (%.2fx to %.2fx); replay / psql \\copy: **%.2fx**. The daemon used "
            "%.1f us of CPU per row tailing (all threads, median) and at most %.1f MB of resident memory.\n",
            median(rt, reps), lo, hi, median(rr, reps), median(cpu_us, reps), (double)peak / 1024.0);
        fflush(stdout);
    }
}

/* ---- memory (issue 13) ---- */

/* Documents of about 16 MB: `_id` i and (16 MB - 1 kB) of letters, as a string or, every other one, as binary, so the
 * oplog entry stays within the 16 MB a server allows a user document (BSONObjMaxUserSize). */
#define HUGE_PAD (16 * 1024 * 1024 - 1024)

static void write_huge(trial *t, const void *ctx)
{
    const sized_load *l = ctx;
    char *pad = malloc(HUGE_PAD + 1);
    if (pad == NULL)
        bench_die("out of memory");
    mongoc_collection_t *coll = mongoc_client_get_collection(t->client, l->db, "c0");
    for (uint64_t i = 1; i <= l->n; i++) {
        memset(pad, 'a' + (int)(i % 26), HUGE_PAD);
        pad[HUGE_PAD] = '\0';
        /* every other one binary: its text (base64) is a third longer than its BSON */
        bson_t *d = i % 2 ? BCON_NEW("_id", BCON_INT64((int64_t)i), "pad", BCON_UTF8(pad))
                          : BCON_NEW("_id", BCON_INT64((int64_t)i), "pad",
                                     BCON_BIN(BSON_SUBTYPE_BINARY, (const uint8_t *)pad, HUGE_PAD));
        bson_error_t err;
        if (!mongoc_collection_insert_one(coll, d, NULL, NULL, &err))
            bench_die("inserting a 16 MB document: %s", err.message);
        bson_destroy(d);
    }
    mongoc_collection_destroy(coll);
    free(pad);
}

/* Issue 13's memory goal: the daemon's peak resident memory (VmHWM, its whole life) at most 64 MB with a backlog of
 * n small inserts (default 10 million), and with m documents of 16 MB (default 40). */
static void bench_memory(uint64_t n, uint64_t m)
{
    printf(
        "| backlog | entries | oplog MB | seconds | entries/s | daemon peak RSS |\n|---|---:|---:|---:|---:|---:|\n");
    for (int k = 0; k < 2; k++) {
        uint64_t count = k ? m : n;
        if (count == 0)
            continue;
        trial t;
        trial_open(&t, k ? "memhuge" : "memmany", "batched");
        sized_load l = {.size = DOC_SMALL, .n = count};
        snprintf(l.db, sizeof l.db, "%s0", t.prefix);
        trial_write_ini(&t, "batched", "");
        insert_sized(&t, &l, 0, 0);
        long peak = -1;
        double secs = timed_backlog_of(&t, k ? write_huge : write_sized, &l, &peak, NULL);
        char qtable[128];
        snprintf(qtable, sizeof qtable, "%s.c0", l.db);
        if (count_rows(t.pg, qtable) != count + 1)
            bench_die("%s holds %llu rows, not %llu; see %s", qtable, (unsigned long long)count_rows(t.pg, qtable),
                      (unsigned long long)count + 1, t.log);
        double mb = k ? (double)count * 16.0 : (double)count * 430.0 / 1e6;
        printf("| %s | %llu | %.0f | %.1f | %.0f | **%.1f MB** |\n",
               k ? "documents of 16 MB" : "small inserts (about 320-byte documents)", (unsigned long long)count, mb,
               secs, (double)count / secs, (double)peak / 1024.0);
        fflush(stdout);
        trial_close(&t);
    }
}

/* ---- many collections (issue 13) ---- */

/* One round of n inserts spread round-robin over `colls` collections c0..c<colls-1> of one database, replayed
 * from a dump, against PostgreSQL doing the same by itself, each side in fresh tables it made moments before:
 *   - making the tables: PostgreSQL's CREATE TABLEs of the same shape, one statement at a time (autocommit, as a person
 *     would run them), against `oplog2pg replay` of the dump's create entries alone (the server writes one as it
 *     makes each collection);
 *   - the rows: one COPY per table in one psql session, of the rows the daemon wrote, against `oplog2pg replay` of
 *     the whole dump into the tables it made (from a checkpoint before the first entry; its creates find their
 *     tables there).
 * Nothing is deleted, truncated or dropped before a timed step: a table emptied by DELETE keeps the same keys as dead
 * rows for every insert to step over, one emptied by TRUNCATE made the loads after it slower on this machine, and a
 * file system may make new files slower for a while after many were removed. PostgreSQL's CPU time (every process of
 * the cluster) per row, over the replay and over the COPYs, says what each costs the server, which the wall times
 * of this shared machine blur. */
static double colls_psql(const char *script)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "psql -X -q -v ON_ERROR_STOP=1 -f '%s'", script);
    double t0 = bench_now_s();
    if (system(cmd) != 0)
        bench_die("psql -f %s failed", script);
    return bench_now_s() - t0;
}

/* `oplog2pg replay` of a dump from no checkpoint: its seconds, and PostgreSQL's CPU seconds over it (when pg_s). */
static double colls_replay(trial *t, const char *dump, double *pg_s)
{
    char sql[256], bin[256], err[512];
    snprintf(sql, sizeof sql, "DELETE FROM oplog2pg.checkpoint WHERE service = '%s'", t->service);
    PQclear(PQexec(t->pg, sql)); /* the table is there after the daemon's first start */
    bench_exec_sql(t->pg, "CHECKPOINT");
    snprintf(bin, sizeof bin, "%s/oplog2pg", proc_build_dir());
    const char *argv[] = {bin, "-c", t->ini, "replay", dump, NULL};
    double r0 = bench_now_s(), pg0 = bench_cluster_cpu_seconds(t->pg);
    if (!proc_start(argv, NULL, t->log, &t->daemon, err, sizeof err))
        bench_die("%s", err);
    if (!proc_wait(&t->daemon, 3600) || proc_exit_code(&t->daemon) != 0)
        bench_die("oplog2pg replay of %s failed; see %s", dump, t->log);
    double secs = bench_now_s() - r0;
    usleep(100000); /* the daemon's backend ends after the daemon: then its time is the postmaster's cutime */
    if (pg_s != NULL)
        *pg_s = bench_cluster_cpu_seconds(t->pg) - pg0;
    t->daemon.pid = 0;
    return secs;
}

static void colls_round(uint64_t n, unsigned colls)
{
    trial t;
    char name[32], sql[512], dump[160], creates[160];
    snprintf(name, sizeof name, "col%u", colls);
    trial_open(&t, name, "batched");
    trial_write_ini(&t, "batched", "");
    char db[64];
    snprintf(db, sizeof db, "%s0", t.prefix);
    /* the writes: document i into collection i % colls, one insert command each (round-robin: no two consecutive
     * documents share a collection) */
    for (uint64_t i = 0; i < n; i++) {
        bson_t cmd = BSON_INITIALIZER, arr, reply, d;
        char cname[32];
        snprintf(cname, sizeof cname, "c%u", (unsigned)(i % colls));
        BSON_APPEND_UTF8(&cmd, "insert", cname);
        BSON_APPEND_ARRAY_BEGIN(&cmd, "documents", &arr);
        docgen_sized_doc(&d, DOC_SMALL, i + 1);
        BSON_APPEND_DOCUMENT(&arr, "0", &d);
        bson_destroy(&d);
        bson_append_array_end(&cmd, &arr);
        bson_error_t e;
        if (!mongoc_client_command_simple(t.client, db, &cmd, NULL, &reply, &e))
            bench_die("insert into %s.%s: %s", db, cname, e.message);
        bson_destroy(&reply);
        bson_destroy(&cmd);
    }
    snprintf(dump, sizeof dump, "%s/oplog.bson", t.dir);
    dump_oplog(t.client, dump);
    snprintf(creates, sizeof creates, "%s/creates.bson", t.dir);
    dump_oplog_of(t.client, creates, db);

    /* the scripts: PostgreSQL's DDL, the rows out of the daemon's tables, the rows into PostgreSQL's */
    char ddl[200], out[200], load[200];
    snprintf(ddl, sizeof ddl, "%s/ddl.sql", t.dir);
    snprintf(out, sizeof out, "%s/out.sql", t.dir);
    snprintf(load, sizeof load, "%s/load.sql", t.dir);
    FILE *fd = fopen(ddl, "w"), *fo = fopen(out, "w"), *fl = fopen(load, "w");
    if (fd == NULL || fo == NULL || fl == NULL)
        bench_die("cannot write in %s", t.dir);
    fprintf(fd, "CREATE SCHEMA bench_colls;\n");
    for (unsigned c = 0; c < colls; c++) {
        fprintf(fd, "CREATE TABLE bench_colls.c%u " SAME_SHAPE ";\n", c);
        fprintf(fo, "\\copy %s.c%u to '%s/rows%u.copy'\n", db, c, t.dir, c);
        fprintf(fl, "\\copy bench_colls.c%u from '%s/rows%u.copy'\n", c, t.dir, c);
    }
    fclose(fd);
    fclose(fo);
    fclose(fl);

    /* making the tables: PostgreSQL's DDL, then the daemon's replay of the creates */
    bench_exec_sql(t.pg, "DROP SCHEMA IF EXISTS bench_colls CASCADE");
    bench_exec_sql(t.pg, "CHECKPOINT");
    double ddl_s = colls_psql(ddl);
    double make_s = colls_replay(&t, creates, NULL);
    uint64_t tables = 0;
    for (unsigned c = 0; c < colls; c++) {
        snprintf(sql, sizeof sql, "SELECT to_regclass('%s.c%u') IS NOT NULL", db, c);
        PGresult *r = PQexec(t.pg, sql);
        tables += PQresultStatus(r) == PGRES_TUPLES_OK && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
        PQclear(r);
    }
    if (tables != colls)
        bench_die("the replay of the creates made %llu tables, not %u; see %s", (unsigned long long)tables, colls,
                  t.log);

    /* the rows: the daemon's replay of the whole dump into its tables, then PostgreSQL's COPYs into its own */
    double replay_pg_s, replay_s = colls_replay(&t, dump, &replay_pg_s);
    uint64_t rows = 0;
    for (unsigned c = 0; c < colls; c++) {
        char q[128];
        snprintf(q, sizeof q, "%s.c%u", db, c);
        rows += count_rows(t.pg, q);
    }
    if (rows != n)
        bench_die("after replay the %u tables hold %llu rows, not %llu; see %s", colls, (unsigned long long)rows,
                  (unsigned long long)n, t.log);
    colls_psql(out);
    bench_exec_sql(t.pg, "CHECKPOINT");
    double lpg0 = bench_cluster_cpu_seconds(t.pg);
    double load_s = colls_psql(load);
    usleep(100000); /* as after the replay: psql's backend has ended */
    double load_pg_s = bench_cluster_cpu_seconds(t.pg) - lpg0;
    /* thousands of tables: dropped two per statement (one DROP SCHEMA CASCADE of them all would need a lock per
     * table and index at once, more than the server's lock table holds) */
    for (unsigned c = 0; c < colls; c++) {
        snprintf(sql, sizeof sql, "DROP TABLE bench_colls.c%u, %s.c%u", c, db, c);
        bench_exec_sql(t.pg, sql);
    }
    bench_exec_sql(t.pg, "DROP SCHEMA bench_colls");
    trial_close(&t);

    double rate = (double)n / replay_s, base = (double)n / load_s;
    printf("| %u | %.2f s | %.2f s | **%.2fx** | %.2f s (%.0f/s) | %.2f s (%.0f/s) | **%.2fx** | %.1f / %.1f µs |\n",
           colls, make_s, ddl_s, ddl_s / make_s, replay_s, rate, load_s, base, rate / base,
           replay_pg_s * 1e6 / (double)n, load_pg_s * 1e6 / (double)n);
    fflush(stdout);
}

static void bench_collections(uint64_t n, const unsigned *counts, size_t k)
{
    printf("%llu inserts of about 320-byte documents, round-robin over N collections, replayed from a dump: first its "
           "create entries alone (the daemon makes the tables), then the whole dump into those tables. PostgreSQL "
           "makes tables of the same shape one CREATE TABLE at a time, and loads the same rows with one COPY per "
           "table. Both sides' tables are fresh.\n\n"
           "| N | oplog2pg: making the tables | PostgreSQL: CREATE TABLE one at a time | making the tables: "
           "PostgreSQL's time / oplog2pg's | oplog2pg replay into its tables | PostgreSQL: one COPY per table | rows, "
           "of the COPY rate | PostgreSQL's CPU per row: oplog2pg / COPY |\n"
           "|---:|---:|---:|---:|---:|---:|---:|---:|\n",
           (unsigned long long)n);
    for (size_t i = 0; i < k; i++)
        colls_round(n, counts[i]);
}

int main(int argc, char **argv)
{
    if (!bench_init("replication bench") || argc < 2) {
        fprintf(stderr,
                "usage: OPLOG2PG_TEST_PG=... %s batching|inserts|copy|keys [N] | rtt [N [R]] | mapped [N [M]] | txn [N "
                "[PAD]] | throughput|steady [N [M]] | memory [N [M]] | collections [N [C...]]\n"
                "  (run through scripts/with-pg.sh)\n",
                argv[0]);
        return 2;
    }
    mongoc_init();
    uint64_t n = argc > 2 ? strtoull(argv[2], NULL, 10) : 0;
    if (strcmp(argv[1], "batching") == 0)
        bench_batching(n ? n : 20000);
    else if (strcmp(argv[1], "inserts") == 0)
        bench_inserts(n ? n : 1000000);
    else if (strcmp(argv[1], "keys") == 0)
        bench_keys(argc > 2 ? strtoull(argv[2], NULL, 10) : 300000);
    else if (strcmp(argv[1], "copy") == 0)
        bench_copy(n ? n : 1000000);
    else if (strcmp(argv[1], "rtt") == 0)
        bench_rtt(argc > 2 ? strtoull(argv[2], NULL, 10) : 10000, argc > 3 ? (unsigned)atoi(argv[3]) : 0);
    else if (strcmp(argv[1], "txn") == 0)
        bench_txn(n ? n : 270000, argc > 3 ? strtoull(argv[3], NULL, 10) : TXN_PAD);
    else if (strcmp(argv[1], "mapped") == 0)
        bench_mapped(argc > 2 ? n : 200000, argc > 3 ? strtoull(argv[3], NULL, 10) : 10000);
    else if (strcmp(argv[1], "throughput") == 0)
        bench_throughput(argc > 2 ? n : 300000, argc > 3 ? strtoull(argv[3], NULL, 10) : 30000);
    else if (strcmp(argv[1], "steady") == 0)
        bench_steady(argc > 2 ? n : 300000, argc > 3 ? strtoull(argv[3], NULL, 10) : 30000);
    else if (strcmp(argv[1], "collections") == 0) {
        unsigned counts[8] = {1, 100, 2000};
        size_t k = 3;
        if (argc > 3)
            for (k = 0; k < 8 && (int)k + 3 < argc; k++)
                counts[k] = (unsigned)atoi(argv[k + 3]);
        bench_collections(argc > 2 ? n : 100000, counts, k);
    } else if (strcmp(argv[1], "memory") == 0)
        bench_memory(argc > 2 ? n : 10000000, argc > 3 ? strtoull(argv[3], NULL, 10) : 40);
    else
        bench_die("unknown benchmark '%s'", argv[1]);
    mongoc_cleanup();
    return 0;
}

/*
 * timeseries.c — a time-series collection replicated as rows of measurements (docs/timeseries.md): measurements per
 * second from MongoDB 8.0 buckets (compressed from the start, appends as binary diffs of their columns) against psql
 * \copy of the very rows into a table of the same shape; and the CPU the bucket decoder spends per measurement.
 *
 *   bench/timeseries [N [SENSORS]]   N measurements (default 200 000) of SENSORS sensors (default 10), written by
 *                                     insertMany of 1 000 (each sensor's measurements a second apart, so each bucket
 *                                     fills to MongoDB's 1 000 and rolls over); BENCH_TIMESERIES_REPS trials (default
 *                                     3, at most 9), medians of the trials' own ratios
 *
 * Run by bench/run.sh under `make bench`. How a trial is timed: bench/lib/backlog.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../tests/lib/proc.h"
#include "lib/backlog.h"
#include "lib/baseline.h"
#include "lib/program.h"
#include "lib/stats.h"
#include "map/bucket.h"

#define T0_MS 1767225600000LL /* 2026-01-01 00:00:00 UTC */

typedef struct {
    char db[64];
    uint64_t n;
    unsigned sensors;
    uint64_t first; /* measurement number of the first one written */
} ts_load;

/* Measurements first..first+n-1: measurement k is sensor k % sensors's, at T0 + k / sensors seconds, with a
 * temperature, a humidity and a status (what a sensor sends). */
static void write_measurements(trial *t, const void *ctx)
{
    const ts_load *l = ctx;
    mongoc_collection_t *c = mongoc_client_get_collection(t->client, l->db, "m");
    enum { BATCH = 1000 };
    bson_t *docs[BATCH];
    for (uint64_t done = 0; done < l->n;) {
        size_t k = 0;
        for (; k < BATCH && done < l->n; k++, done++) {
            uint64_t i = l->first + done;
            unsigned s = (unsigned)(i % l->sensors);
            docs[k] = BCON_NEW("t", BCON_DATE_TIME(T0_MS + (int64_t)(i / l->sensors) * 1000), "sensor", "{", "site",
                               BCON_INT32((int32_t)(s % 3)), "id", BCON_INT32((int32_t)s), "}", "temp",
                               BCON_DOUBLE(20.0 + (double)(i % 97) / 10.0), "hum", BCON_INT32((int32_t)(40 + i % 30)),
                               "ok", BCON_BOOL(i % 50 != 0));
        }
        bson_error_t err;
        if (!mongoc_collection_insert_many(c, (const bson_t **)docs, k, NULL, NULL, &err))
            bench_die("insert_many: %s", err.message);
        for (size_t j = 0; j < k; j++)
            bson_destroy(docs[j]);
    }
    mongoc_collection_destroy(c);
    bench_exec_sql(t->pg, "CHECKPOINT");
}

/* The CPU seconds bucket_unpack takes for every bucket of the collection (read from mongosim first), and the
 * measurements they hold. */
static double decode_cpu(trial *t, const char *db, uint64_t *measurements)
{
    mongoc_collection_t *c = mongoc_client_get_collection(t->client, db, "system.buckets.m");
    bson_t q = BSON_INITIALIZER;
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(c, &q, NULL, NULL);
    const bson_t *doc;
    size_t n = 0, cap = 0;
    bson_t **buckets = NULL;
    while (mongoc_cursor_next(cur, &doc)) {
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            buckets = realloc(buckets, cap * sizeof *buckets);
        }
        buckets[n++] = bson_copy(doc);
    }
    bson_error_t err;
    if (mongoc_cursor_error(cur, &err))
        bench_die("reading the buckets: %s", err.message);
    mongoc_cursor_destroy(cur);
    mongoc_collection_destroy(c);
    bson_destroy(&q);
    bucket_spec spec = {.time_field = "t", .meta_field = "sensor"};
    struct timespec a, b;
    *measurements = 0;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
    for (size_t i = 0; i < n; i++) {
        bucket_rows r;
        char why[256];
        if (!bucket_unpack(bson_get_data(buckets[i]), buckets[i]->len, &spec, &r, why, sizeof why))
            bench_die("bucket %zu: %s", i, why);
        *measurements += r.n;
        bucket_rows_clear(&r);
    }
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
    for (size_t i = 0; i < n; i++)
        bson_destroy(buckets[i]);
    free(buckets);
    return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
}

typedef struct {
    double tail_s, copy_s, cpu_s, decode_s, pg_cpu_s, copy_pg_cpu_s;
    uint64_t decoded;
    long peak_kb;
} ts_result;

/* One side-by-side trial: oplog2pg tails the buckets MongoDB 8.0 writes for n measurements into the table of
 * measurements; then psql \copy of the very rows (COPY ... TO, text) into a fresh table made LIKE it (same columns,
 * collation and primary key, no generated column). */
static ts_result ts_trial(uint64_t n, unsigned sensors, int rep)
{
    trial t;
    char name[32], qtable[128], path[160], like[200], sql[256];
    snprintf(name, sizeof name, "ts%d", rep);
    const char *sim_args[] = {"--oplog-format", "8.0", NULL};
    trial_open_sim(&t, name, "batched", sim_args);
    ts_load l = {.n = n, .sensors = sensors, .first = 1};
    snprintf(l.db, sizeof l.db, "%s0", t.prefix);
    bson_error_t err;
    bson_t reply;
    bson_t *cmd = BCON_NEW("create", "m", "timeseries", "{", "timeField", "t", "metaField", "sensor", "}");
    if (!mongoc_client_command_simple(t.client, l.db, cmd, NULL, &reply, &err))
        bench_die("create: %s", err.message);
    bson_destroy(cmd);
    bson_destroy(&reply);
    ts_load seed = l;
    seed.n = 1;
    seed.first = 0;
    write_measurements(&t, &seed); /* the table exists before the timing */
    ts_result res = {.peak_kb = -1};
    res.tail_s = backlog_timed(&t, write_measurements, &l, NULL, NULL, &res.peak_kb, &res.cpu_s);
    res.pg_cpu_s = t.pg_cpu_s;
    snprintf(qtable, sizeof qtable, "%s.m", l.db);
    baseline_expect_rows(&t, qtable, n + 1);
    res.decode_s = decode_cpu(&t, l.db, &res.decoded);
    if (res.decoded != n + 1)
        bench_die("the buckets hold %llu measurements, not %llu", (unsigned long long)res.decoded,
                  (unsigned long long)(n + 1));
    snprintf(path, sizeof path, "%s/rows.copy", t.dir);
    snprintf(sql, sizeof sql, "(SELECT * FROM %s WHERE doc->>'temp' IS NOT NULL)", qtable);
    baseline_dump(sql, path, "");
    snprintf(like, sizeof like, "(LIKE %s INCLUDING ALL)", qtable);
    res.copy_s = baseline_copy(t.pg, "public.bench_ts_copy", like, "", path, "", &res.copy_pg_cpu_s);
    trial_close(&t);
    return res;
}

/* The goal: tailing at least 0.8 of psql \copy of the same measurement rows into the same shape. */
static void bench_timeseries(uint64_t n, unsigned sensors)
{
    int reps = stats_reps("BENCH_TIMESERIES_REPS", 3);
    double tail[STATS_MAX_RUNS], copy[STATS_MAX_RUNS], ratio[STATS_MAX_RUNS], cpu_us[STATS_MAX_RUNS],
        dec_us[STATS_MAX_RUNS];
    long peak = 0;
    for (int i = 0; i < reps; i++) {
        ts_result r = ts_trial(n, sensors, i);
        tail[i] = (double)n / r.tail_s;
        copy[i] = (double)n / r.copy_s;
        ratio[i] = tail[i] / copy[i];
        cpu_us[i] = r.cpu_s * 1e6 / (double)n;
        dec_us[i] = r.decode_s * 1e6 / (double)r.decoded;
        if (r.peak_kb > peak)
            peak = r.peak_kb;
        fprintf(stderr,
                "timeseries run %d: tailing %.0f measurements/s (%.2fx; daemon %.2f us CPU each, PostgreSQL %.2f), "
                "psql \\copy %.0f rows/s (PostgreSQL %.2f us CPU each); bucket_unpack %.3f us CPU per measurement\n",
                i + 1, tail[i], ratio[i], cpu_us[i], r.pg_cpu_s * 1e6 / (double)n, copy[i],
                r.copy_pg_cpu_s * 1e6 / (double)n, dec_us[i]);
    }
    printf(
        "### Time-series measurements from MongoDB 8.0 buckets\n\n%llu measurements of %u sensors, inserted 1 000 at "
        "a time; MongoDB 8.0 writes them as compressed buckets of up to 1 000, appends as binary diffs.\n\n",
        (unsigned long long)n, sensors);
    printf("| what | rows/s, median of %d | the runs, in order (rows/s) |\n|---|---:|---|\n", reps);
    printf("| psql \\copy of the same rows, same table | %.0f |", stats_median(copy, reps));
    stats_print_runs(copy, reps);
    printf(" |\n| oplog2pg, tailing the buckets | %.0f |", stats_median(tail, reps));
    stats_print_runs(tail, reps);
    double lo, hi;
    stats_range(ratio, reps, &lo, &hi);
    printf(" |\n\nTailing / psql \\copy: **%.2fx** (%.2fx to %.2fx). The daemon used %.2f us of CPU per measurement "
           "(all threads, median), of which unpacking the buckets (bucket_unpack: the BSONColumn decoder and the "
           "measurements' BSON) %.3f us; at most %.1f MB of resident memory.\n",
           stats_median(ratio, reps), lo, hi, stats_median(cpu_us, reps), stats_median(dec_us, reps),
           (double)peak / 1024.0);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    program_start("bench/timeseries", argv[0], "[N [SENSORS]]");
    bench_timeseries(program_arg(argc, argv, 1, 200000), (unsigned)program_arg(argc, argv, 2, 10));
    return program_end();
}

/*
 * mapped.c — typed tables: a mapped collection of typed columns, and arrays of doubles, against psql \copy.
 *
 *   bench/mapped [N [M]]   N inserts (default 200 000) into a mapped collection of typed columns, and M inserts
 *                          (default 10 000) of 1 000 doubles into a double precision[] column (0 skips either), each
 *                          replicated by oplog2pg against psql \copy of the same rows (text, then binary: PostgreSQL's
 *                          own floor) into a table LIKE the daemon's; BENCH_MAPPED_REPS side-by-side pairs each
 *                          (default 3, at most 9)
 *
 * Run by bench/run.sh under `make bench` and by bench/compare-builds.sh. How a trial is timed: bench/lib/backlog.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/backlog.h"
#include "lib/baseline.h"
#include "lib/docload.h"
#include "lib/program.h"
#include "lib/stats.h"

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
    docload_range(t, l->db, first, last, make_mapped, &m);
}

static void write_mapped(trial *t, const void *ctx)
{
    const mapped_load *l = ctx;
    uint64_t rng = l->seed;
    insert_mapped(t, l, 1, l->n, &rng);
    bench_exec_sql(t->pg, "CHECKPOINT"); /* as before the psql \copy: each side starts without dirty buffers */
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
    char name[32], ini[1024], qtable[128], what[256], path[160];
    snprintf(name, sizeof name, "%s%d", shape == SHAPE_ARRAY ? "arr" : "typ", rep);
    trial_open(&t, name, "batched");
    mapped_load l = {.shape = shape, .n = n, .seed = shape == SHAPE_ARRAY ? 111 : 222};
    snprintf(l.db, sizeof l.db, "%s0", t.prefix);
    trial_write_ini(&t, "batched", mapped_ini(&l, ini, sizeof ini));
    /* The seed document (_id 0) first, so that the table is made and its statements prepared before the timing. */
    uint64_t seed_rng = 1;
    insert_mapped(&t, &l, 0, 0, &seed_rng);
    mapped_result res = {.peak_kb = -1};
    res.daemon_s = backlog_timed(&t, write_mapped, &l, NULL, NULL, &res.peak_kb, &res.cpu_s);
    res.sim_cpu_s = t.sim_cpu_s;
    res.pg_cpu_s = t.pg_cpu_s;
    res.reader_cpu_s = t.reader_cpu_s;
    res.faults = t.faults;
    res.switches = t.switches;
    snprintf(qtable, sizeof qtable, "%s.c0", l.db);
    baseline_expect_rows(&t, qtable, n + 1);
    res.rows = n;

    snprintf(what, sizeof what, "(SELECT * FROM %s WHERE id <> 0)", qtable);
    snprintf(path, sizeof path, "%s/rows.copy", t.dir);
    baseline_dump(what, path, "");
    res.file_bytes = baseline_file_bytes(path);
    char bin[170];
    snprintf(bin, sizeof bin, "%s/rows.bin", t.dir);
    baseline_dump(what, bin, " with (format binary)");
    char like[200];
    snprintf(like, sizeof like, "(LIKE %s INCLUDING ALL)", qtable);
    res.copy_s = baseline_copy(t.pg, "public.bench_mapped_copy", like, "", path, "", NULL);
    res.binary_s = baseline_copy(t.pg, "public.bench_mapped_copy", like, "", bin, " with (format binary)", NULL);
    trial_close(&t);
    return res;
}

/* reps side-by-side pairs (oplog2pg, then psql \copy, each on fresh tables), as a table of medians and runs. */
static void bench_mapped_shape(map_shape shape, uint64_t n, int reps)
{
    double daemon[STATS_MAX_RUNS], copy[STATS_MAX_RUNS], binary[STATS_MAX_RUNS], ratio[STATS_MAX_RUNS],
        cpu_us[STATS_MAX_RUNS];
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
                "faults, %.0f context switches; mongosim %.1f, PostgreSQL %.1f us CPU/row), psql \\copy %.0f rows/s "
                "(%.2fx), binary %.0f rows/s\n",
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
           stats_median(copy, reps));
    stats_print_runs(copy, reps);
    printf(" |\n| oplog2pg, tailing the oplog of those inserts | %llu | %.0f |", (unsigned long long)n,
           stats_median(daemon, reps));
    stats_print_runs(daemon, reps);
    printf(" |\n| (the floor) psql \\copy of the same rows in binary format, same table | %llu | %.0f |",
           (unsigned long long)n, stats_median(binary, reps));
    stats_print_runs(binary, reps);
    double lo, hi;
    stats_range(ratio, reps, &lo, &hi);
    printf(" |\n\noplog2pg / psql \\copy: **%.2fx** (median of the %d pairs' ratios; %.2fx to %.2fx). The daemon used "
           "%.1f us of CPU per row (all threads, median) and at most %.1f MB of resident memory.\n",
           stats_median(ratio, reps), reps, lo, hi, stats_median(cpu_us, reps), (double)peak / 1024.0);
    fflush(stdout);
}

/* Typed rows against psql \copy of the same rows, and arrays of doubles against psql \copy of their text. */
static void bench_mapped(uint64_t n_typed, uint64_t n_arrays)
{
    int reps = stats_reps("BENCH_MAPPED_REPS", 3);
    if (n_typed > 0) {
        printf("### Typed columns\n\n");
        bench_mapped_shape(SHAPE_TYPED, n_typed, reps);
    }
    if (n_arrays > 0) {
        printf("%s### Arrays of %d doubles\n\n", n_typed > 0 ? "\n" : "", ARRAY_LEN);
        bench_mapped_shape(SHAPE_ARRAY, n_arrays, reps);
    }
}

int main(int argc, char **argv)
{
    program_start("bench/mapped", argv[0], "[N [M]]");
    bench_mapped(program_arg(argc, argv, 1, 200000), program_arg(argc, argv, 2, 10000));
    return program_end();
}

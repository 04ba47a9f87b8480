/*
 * latency.c — how long a change acknowledged by MongoDB takes to be visible in PostgreSQL through oplog2pg, from
 * an idle system to a steady mixed stream. Run by bench/run.sh under `make bench`.
 *
 *   latency [all [SECS [RATE]]]   everything below, in this order, with the defaults (SECS and RATE: steady's)
 *   latency idle [COUNT]          COUNT single inserts (default 300), one about every 100 ms, nothing else written
 *   latency bursts [N ...]        insertMany of N documents at once (default 10, 10 000 and 200 000), repeated
 *                                 (BENCH_LAT_REPS, default 30 for N ≤ 100, 15 for N ≤ 20 000, 5 above)
 *   latency steady [SECS [RATE]]  single inserts, about 10 per second for SECS seconds (default 30: 300 probes),
 *                                 while a paced mixed stream of RATE ops/s (default 20 000: inserts, updates,
 *                                 replacements, deletes over six other collections) replicates beside them; RATE
 *                                 may list several ("20000,5000"), one trial each
 *
 * The method. A trial starts a fresh mongosim and the daemon (batched mode, default settings), which copies two
 * seeded collections (`probe`, `bulk`) and so creates their tables; once it has caught up, the benchmark adds
 * triggers to those tables and LISTENs on a connection of its own:
 *   - `probe`: AFTER INSERT FOR EACH ROW, pg_notify('o2p_latency', 'p ' || _id);
 *   - `bulk`: AFTER INSERT FOR EACH ROW WHEN (doc ? 'mark'), pg_notify('o2p_latency', 'b ' || mark || ' ' ||
 *     txid_current()). The first document of a burst, every 1000th and the last carry a field `mark` (their
 *     place in it); the others cost PostgreSQL only the WHEN test, so the measurement hardly slows the COPY.
 * PostgreSQL delivers a notification when the transaction that sent it commits, so its arrival is the moment the
 * rows became visible (plus the notification's trip to the client, which the idle probes bound). A listener thread
 * polls that connection and stamps each notification with CLOCK_MONOTONIC as it reads it; the writer stamps the
 * moment libmongoc returns the acknowledgement of the write (insert_one, insert_many; writeConcern w:1). The latency
 * is the difference. For a burst it is the arrival of its last document's notification: oplog2pg commits in oplog
 * order, so the others are visible by then. The number of transactions a burst took is counted from the marked
 * documents' transaction ids (exact when groups hold 1 000 documents or more). The table gives the
 * acknowledgement's own wait too (the write took that long before it).
 * Probes are jittered (50 to 150 ms apart) so they do not fall at one phase of the stream's 10 ms ticks. The stream
 * is tests/lib/workload.c's mixed workload (no DDL), on a connection and thread of its own, paced: every 10 ms it
 * sends the ops due by then, one ordered bulk per collection. Percentiles are nearest-rank over all samples. The
 * benchmark also reports the machine's CPU pressure over each scenario (/proc/pressure/cpu, "some": the share of
 * time in which some runnable task waited for a CPU), as the machine is shared.
 *
 * Output: Markdown tables, a summary (p50/p90/p99/max against the goals) and the distributions (min, p10 ... max)
 * that bench/plots.sh draws. BENCH_REPLICATION_INI and BENCH_LOG_LEVEL set the daemon's configuration, BENCH_KEEP
 * keeps the trials' folders with the daemon's log (tests/lib/benchtrial.h); BENCH_LAT_RAW=FILE appends every sample,
 * "scenario latency_ms", to FILE; BENCH_LAT_TRACE=FILE appends each probe's and burst's acknowledgement time (UTC,
 * to compare with the daemon's log at BENCH_LOG_LEVEL=debug) and latency.
 */
#include <errno.h>
#include <libpq-fe.h>
#include <math.h>
#include <mongoc/mongoc.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../tests/lib/benchtrial.h"
#include "../tests/lib/workload.h"

#define CHANNEL "o2p_latency"

/* ---- the listener: a LISTENing connection on its own thread ---- */

#define MAX_TXIDS 4096

typedef struct {
    PGconn *pg;
    pthread_t thread;
    atomic_bool stop;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    /* probes: arrival time by probe id (0 = not yet) */
    double *probe_at;
    size_t probe_cap;
    /* the burst in flight, of bulk_target documents: when its first and its last one arrived, and the transactions
     * of its marked documents */
    uint64_t bulk_target;
    double bulk_first, bulk_done;
    uint64_t txids[MAX_TXIDS];
    size_t ntxids;
} listener;

static void on_notify(listener *l, const PGnotify *n, double at)
{
    const char *p = n->extra;
    pthread_mutex_lock(&l->mu);
    if (p[0] == 'p' && p[1] == ' ') {
        long id = strtol(p + 2, NULL, 10);
        if (id >= 0 && (size_t)id < l->probe_cap && l->probe_at[id] == 0)
            l->probe_at[id] = at;
    } else if (p[0] == 'b' && p[1] == ' ' && l->bulk_target > 0) {
        char *end;
        unsigned long long mark = strtoull(p + 2, &end, 10);
        unsigned long long txid = strtoull(end, NULL, 10);
        if (mark == 0)
            l->bulk_first = at;
        bool known = false;
        for (size_t i = 0; i < l->ntxids && !known; i++)
            known = l->txids[i] == txid;
        if (!known && l->ntxids < MAX_TXIDS)
            l->txids[l->ntxids++] = txid;
        if (mark + 1 == l->bulk_target) {
            l->bulk_done = at;
            pthread_cond_broadcast(&l->cond);
        }
    }
    pthread_mutex_unlock(&l->mu);
}

static void *listener_main(void *arg)
{
    listener *l = arg;
    struct pollfd pfd = {.fd = PQsocket(l->pg), .events = POLLIN};
    while (!atomic_load(&l->stop)) {
        int rc = poll(&pfd, 1, 50);
        if (rc < 0 && errno != EINTR)
            bench_die("poll on the listening connection: %s", strerror(errno));
        if (rc <= 0)
            continue;
        if (!PQconsumeInput(l->pg))
            bench_die("the listening connection: %s", PQerrorMessage(l->pg));
        double at = bench_now_s();
        PGnotify *n;
        while ((n = PQnotifies(l->pg)) != NULL) {
            on_notify(l, n, at);
            PQfreemem(n);
        }
    }
    return NULL;
}

static void listener_start(listener *l, size_t probes)
{
    memset(l, 0, sizeof *l);
    atomic_init(&l->stop, false);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cond, NULL);
    l->probe_cap = probes;
    l->probe_at = calloc(probes ? probes : 1, sizeof *l->probe_at);
    l->pg = PQconnectdb(bench_conninfo);
    if (PQstatus(l->pg) != CONNECTION_OK)
        bench_die("%s", PQerrorMessage(l->pg));
    bench_exec_sql(l->pg, "LISTEN " CHANNEL);
    if (pthread_create(&l->thread, NULL, listener_main, l) != 0)
        bench_die("cannot start the listener thread");
}

static void listener_stop(listener *l)
{
    atomic_store(&l->stop, true);
    pthread_join(l->thread, NULL);
    PQfinish(l->pg);
    free(l->probe_at);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cond);
}

static double probe_arrival(listener *l, size_t id)
{
    pthread_mutex_lock(&l->mu);
    double at = id < l->probe_cap ? l->probe_at[id] : 0;
    pthread_mutex_unlock(&l->mu);
    return at;
}

/* ---- the trial: collections, triggers ---- */

static void seed_doc(trial *t, const char *coll)
{
    char db[64];
    snprintf(db, sizeof db, "%s0", t->prefix);
    mongoc_collection_t *c = mongoc_client_get_collection(t->client, db, coll);
    bson_t *doc = BCON_NEW("_id", BCON_INT32(-1), "seed", BCON_BOOL(true));
    bson_error_t err;
    if (!mongoc_collection_insert_one(c, doc, NULL, NULL, &err))
        bench_die("seeding %s.%s: %s", db, coll, err.message);
    bson_destroy(doc);
    mongoc_collection_destroy(c);
}

/* A trial whose daemon has created `probe` and `bulk` (by copying one seed document each) and caught up, with the
 * triggers in place. The configuration gets [metrics] on a free port, to read the flush triggers. */
static int open_latency_trial(trial *t, const char *name)
{
    trial_open(t, name, "batched");
    seed_doc(t, "probe");
    seed_doc(t, "bulk");
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(s, (struct sockaddr *)&a, &al) != 0)
        bench_die("cannot find a free port for the metrics");
    int port = ntohs(a.sin_port);
    close(s);
    char extra[64];
    snprintf(extra, sizeof extra, "[metrics]\nlisten = 127.0.0.1:%d\n", port);
    trial_write_ini(t, "batched", extra);
    trial_daemon_start(t);
    trial_wait_caught_up(t, 60);
    char sql[2048];
    const char *s0 = t->prefix;
    snprintf(sql, sizeof sql,
             "CREATE FUNCTION \"%s0\".o2p_lat_probe() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN "
             "PERFORM pg_notify('" CHANNEL "', 'p ' || NEW._id); RETURN NULL; END$$;"
             "CREATE TRIGGER o2p_latency AFTER INSERT ON \"%s0\".probe FOR EACH ROW EXECUTE FUNCTION "
             "\"%s0\".o2p_lat_probe();"
             "CREATE FUNCTION \"%s0\".o2p_lat_bulk() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN "
             "PERFORM pg_notify('" CHANNEL "', 'b ' || (NEW.doc->>'mark') || ' ' || txid_current()); RETURN NULL; "
             "END$$;"
             "CREATE TRIGGER o2p_latency AFTER INSERT ON \"%s0\".bulk FOR EACH ROW WHEN (NEW.doc ? 'mark') "
             "EXECUTE FUNCTION \"%s0\".o2p_lat_bulk();",
             s0, s0, s0, s0, s0, s0);
    bench_exec_sql(t->pg, sql);
    return port;
}

/* ---- the daemon's flush triggers, from its metrics ---- */

typedef struct {
    double commits, conflict, size, timer, idle;
} flush_counts;

static double metric_value(const char *text, const char *name)
{
    const char *p = text;
    size_t nl = strlen(name);
    while ((p = strstr(p, name)) != NULL) {
        if ((p == text || p[-1] == '\n') && p[nl] == ' ')
            return strtod(p + nl + 1, NULL);
        p += nl;
    }
    return 0;
}

static flush_counts read_flushes(int port)
{
    flush_counts f = {0};
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
        if (s >= 0)
            close(s);
        return f;
    }
    static const char req[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(s, req, sizeof req - 1) != (ssize_t)(sizeof req - 1)) {
        close(s);
        return f;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ssize_t n;
    while (buf != NULL && (n = read(s, buf + len, cap - 1 - len)) > 0) {
        len += (size_t)n;
        if (len + 1 >= cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
    }
    close(s);
    if (buf == NULL)
        return f;
    buf[len] = '\0';
    f.commits = metric_value(buf, "oplog2pg_commits_total");
    f.conflict = metric_value(buf, "oplog2pg_flushes_total{trigger=\"conflict\"}");
    f.size = metric_value(buf, "oplog2pg_flushes_total{trigger=\"size\"}");
    f.timer = metric_value(buf, "oplog2pg_flushes_total{trigger=\"timer\"}");
    f.idle = metric_value(buf, "oplog2pg_flushes_total{trigger=\"idle\"}");
    free(buf);
    return f;
}

/* ---- statistics ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest rank: the smallest sample with at least p% of the samples at or below it. v sorted. */
static double pct(const double *v, size_t n, double p)
{
    if (n == 0)
        return NAN;
    size_t rank = (size_t)ceil(p / 100.0 * (double)n);
    return v[rank == 0 ? 0 : rank - 1];
}

typedef struct {
    char name[96];    /* the scenario, as in the tables */
    char goal[48];    /* "≤ 50 ms at p99", or "" */
    double goal_ms;   /* the figure the goal bounds (0: none) */
    bool goal_is_p99; /* the goal bounds p99 (else max) */
    char notes[400];  /* what else was measured */
    double *ms;       /* the samples, sorted */
    size_t n, lost;   /* samples; writes that never became visible */
    double pressure;  /* the machine's CPU pressure over the scenario, % (-1: unknown) */
} scenario;

#define MAX_SCENARIOS 16
static scenario results[MAX_SCENARIOS];
static size_t nresults;

static scenario *new_scenario(const char *name)
{
    if (nresults == MAX_SCENARIOS)
        bench_die("too many scenarios");
    scenario *s = &results[nresults++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    return s;
}

static void finish_scenario(scenario *s, double *ms, size_t n)
{
    qsort(ms, n, sizeof *ms, cmp_double);
    s->ms = ms;
    s->n = n;
    const char *raw = getenv("BENCH_LAT_RAW");
    FILE *f = raw && *raw ? fopen(raw, "a") : NULL;
    for (size_t i = 0; f != NULL && i < n; i++)
        fprintf(f, "\"%s\" %.3f\n", s->name, ms[i]);
    if (f != NULL)
        fclose(f);
    fprintf(stderr, "latency: %s: %zu samples, p50 %.1f p90 %.1f p99 %.1f max %.1f ms%s%s\n", s->name, n,
            pct(ms, n, 50), pct(ms, n, 90), pct(ms, n, 99), n ? ms[n - 1] : NAN, s->notes[0] ? "; " : "", s->notes);
}

/* ---- writes ---- */

static void sleep_s(double s)
{
    if (s <= 0)
        return;
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static uint64_t rng_state = 0x5eed1a7e9c3b2d41ull;
static double rng_unit(void) /* splitmix64, [0, 1) */
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

/* The documents of the tables: small, of the usual types. */
static void make_doc(bson_t *d, int32_t id)
{
    char s[32];
    snprintf(s, sizeof s, "document %d", (int)id);
    BSON_APPEND_INT32(d, "_id", id);
    BSON_APPEND_INT32(d, "n", id % 1000);
    BSON_APPEND_UTF8(d, "s", s);
    BSON_APPEND_DOUBLE(d, "f", (double)id / 7.0);
    BSON_APPEND_DATE_TIME(d, "at", (int64_t)time(NULL) * 1000);
    bson_t tags;
    BSON_APPEND_ARRAY_BEGIN(d, "tags", &tags);
    BSON_APPEND_UTF8(&tags, "0", "red");
    BSON_APPEND_UTF8(&tags, "1", "green");
    bson_append_array_end(d, &tags);
}

typedef struct {
    double *ms; /* latency of each visible probe */
    size_t n, lost;
    double ack_p50, ack_p99; /* how long the insert_one itself took */
} probe_result;

/* `count` single inserts into probe, 50 to 150 ms apart; each one's latency is its notification's arrival minus its
 * acknowledgement. Waits up to `grace` seconds after the last for the stragglers. */
static probe_result run_probes(trial *t, listener *l, size_t count, double grace)
{
    const char *trace = getenv("BENCH_LAT_TRACE");
    double *wall = calloc(count, sizeof *wall);
    char db[64];
    snprintf(db, sizeof db, "%s0", t->prefix);
    mongoc_collection_t *c = mongoc_client_get_collection(t->client, db, "probe");
    double *ack = calloc(count, sizeof *ack), *took = calloc(count, sizeof *took);
    double next = bench_now_s();
    for (size_t i = 0; i < count; i++) {
        sleep_s(next - bench_now_s());
        bson_t doc = BSON_INITIALIZER;
        make_doc(&doc, (int32_t)i);
        bson_error_t err;
        double t0 = bench_now_s();
        if (!mongoc_collection_insert_one(c, &doc, NULL, NULL, &err))
            bench_die("probe %zu: %s", i, err.message);
        ack[i] = bench_now_s();
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        wall[i] = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
        took[i] = (ack[i] - t0) * 1000.0;
        bson_destroy(&doc);
        next += 0.05 + 0.1 * rng_unit();
    }
    mongoc_collection_destroy(c);
    double until = bench_now_s() + grace;
    while (probe_arrival(l, count - 1) == 0 && bench_now_s() < until)
        sleep_s(0.01);
    sleep_s(0.05);
    probe_result r = {.ms = calloc(count, sizeof(double))};
    /* BENCH_LAT_TRACE=FILE: each probe's acknowledgement (UTC, as the daemon's log stamps its lines) and latency. */
    FILE *tf = trace && *trace ? fopen(trace, "a") : NULL;
    for (size_t i = 0; i < count; i++) {
        double at = probe_arrival(l, i);
        if (tf != NULL) {
            time_t secs = (time_t)wall[i];
            struct tm tm;
            char stamp[32];
            gmtime_r(&secs, &tm);
            strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
            fprintf(tf, "%s probe %zu acked %s.%06ld latency %.3f ms\n", t->service, i, stamp,
                    (long)((wall[i] - (double)secs) * 1e6), at ? (at - ack[i]) * 1000.0 : -1.0);
        }
        if (at == 0)
            r.lost++;
        else
            r.ms[r.n++] = (at - ack[i]) * 1000.0;
    }
    if (tf != NULL)
        fclose(tf);
    free(wall);
    qsort(took, count, sizeof *took, cmp_double);
    r.ack_p50 = pct(took, count, 50);
    r.ack_p99 = pct(took, count, 99);
    free(ack);
    free(took);
    return r;
}

/* ---- scenarios ---- */

static void bench_idle(size_t count)
{
    trial t;
    listener l;
    open_latency_trial(&t, "lat_idle");
    listener_start(&l, count);
    sleep_s(0.5);
    double w0 = bench_now_s(), p0 = bench_cpu_pressure_s();
    probe_result r = run_probes(&t, &l, count, 10);
    double w1 = bench_now_s(), p1 = bench_cpu_pressure_s();
    listener_stop(&l);
    trial_close(&t);
    scenario *s = new_scenario("one insert every ~100 ms, nothing else written");
    s->lost = r.lost;
    s->pressure = p0 >= 0 ? 100.0 * (p1 - p0) / (w1 - w0) : -1;
    snprintf(s->notes, sizeof s->notes, "the insert's own round trip: p50 %.2f ms, p99 %.2f ms", r.ack_p50, r.ack_p99);
    finish_scenario(s, r.ms, r.n);
}

static unsigned reps_for(uint64_t n)
{
    const char *e = getenv("BENCH_LAT_REPS");
    if (e && atoi(e) > 0)
        return (unsigned)atoi(e);
    return n <= 100 ? 30 : n <= 20000 ? 15 : 5;
}

static void bench_bursts(const uint64_t *sizes, size_t nsizes)
{
    trial t;
    listener l;
    open_latency_trial(&t, "lat_burst");
    listener_start(&l, 0);
    char db[64], sql[256];
    snprintf(db, sizeof db, "%s0", t.prefix);
    mongoc_collection_t *c = mongoc_client_get_collection(t.client, db, "bulk");
    int32_t next_id = 0;
    for (size_t k = 0; k < nsizes; k++) {
        uint64_t n = sizes[k];
        unsigned reps = reps_for(n);
        double *ms = calloc(reps, sizeof *ms), *first = calloc(reps, sizeof *first),
               *write = calloc(reps, sizeof *write), *commits = calloc(reps, sizeof *commits);
        bson_t **docs = malloc(n * sizeof *docs);
        size_t got = 0;
        double w0 = bench_now_s(), p0 = bench_cpu_pressure_s();
        for (unsigned rep = 0; rep < reps; rep++) {
            /* The same start each time: an empty table, no checkpoint of PostgreSQL's own about to write. */
            snprintf(sql, sizeof sql, "TRUNCATE \"%s\".bulk", db);
            bench_exec_sql(t.pg, sql);
            bench_exec_sql(t.pg, "CHECKPOINT");
            for (uint64_t i = 0; i < n; i++) {
                docs[i] = bson_new();
                make_doc(docs[i], next_id++);
                if (i % 1000 == 0 || i + 1 == n)
                    BSON_APPEND_INT64(docs[i], "mark", (int64_t)i);
            }
            sleep_s(0.3);
            pthread_mutex_lock(&l.mu);
            l.bulk_target = n;
            l.bulk_first = l.bulk_done = 0;
            l.ntxids = 0;
            pthread_mutex_unlock(&l.mu);
            bson_error_t err;
            double t0 = bench_now_s();
            if (!mongoc_collection_insert_many(c, (const bson_t **)docs, n, NULL, NULL, &err))
                bench_die("insertMany of %llu: %s", (unsigned long long)n, err.message);
            double ack = bench_now_s();
            if (getenv("BENCH_LAT_TRACE") != NULL) {
                FILE *tf = fopen(getenv("BENCH_LAT_TRACE"), "a");
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                struct tm tm;
                char stamp[32];
                gmtime_r(&ts.tv_sec, &tm);
                strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
                if (tf != NULL) {
                    fprintf(tf, "%s burst %llu sent %.1f ms before its ack at %s.%06ld\n", t.service,
                            (unsigned long long)n, (ack - t0) * 1000.0, stamp, ts.tv_nsec / 1000);
                    fclose(tf);
                }
            }
            for (uint64_t i = 0; i < n; i++)
                bson_destroy(docs[i]);
            pthread_mutex_lock(&l.mu);
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 120;
            while (l.bulk_done == 0) {
                if (pthread_cond_timedwait(&l.cond, &l.mu, &until) == ETIMEDOUT)
                    break;
            }
            double done = l.bulk_done, first_at = l.bulk_first;
            size_t ntx = l.ntxids;
            l.bulk_target = 0;
            pthread_mutex_unlock(&l.mu);
            if (done == 0)
                bench_die("insertMany of %llu: its last document was not visible after 120 s; see %s",
                          (unsigned long long)n, t.log);
            ms[got] = (done - ack) * 1000.0;
            first[got] = (first_at - ack) * 1000.0;
            write[got] = (ack - t0) * 1000.0;
            commits[got] = (double)ntx;
            got++;
            trial_wait_caught_up(&t, 60);
        }
        free(docs);
        qsort(first, got, sizeof *first, cmp_double);
        qsort(write, got, sizeof *write, cmp_double);
        qsort(commits, got, sizeof *commits, cmp_double);
        char name[96];
        snprintf(name, sizeof name, "insertMany of %llu documents, all visible", (unsigned long long)n);
        scenario *s = new_scenario(name);
        s->pressure = p0 >= 0 ? 100.0 * (bench_cpu_pressure_s() - p0) / (bench_now_s() - w0) : -1;
        if (n == 10000 || n == 200000) {
            s->goal_ms = n == 10000 ? 150 : 2000;
            snprintf(s->goal, sizeof s->goal, "max ≤ %.0f ms", s->goal_ms);
        }
        snprintf(s->notes, sizeof s->notes,
                 "the insertMany itself took %.1f ms (median); the first rows were visible at %+.1f ms; "
                 "%.0f commit(s) (median)",
                 pct(write, got, 50), pct(first, got, 50), pct(commits, got, 50));
        finish_scenario(s, ms, got);
        free(first);
        free(write);
        free(commits);
    }
    mongoc_collection_destroy(c);
    listener_stop(&l);
    trial_close(&t);
}

typedef struct {
    const char *uri;
    workload_config cfg;
    workload_stats st;
    bool ok;
    char err[512];
} stream;

static void *stream_main(void *arg)
{
    stream *s = arg;
    s->ok = workload_run(s->uri, &s->cfg, &s->st, s->err, sizeof s->err);
    return NULL;
}

static void bench_steady(double secs, double rate)
{
    trial t;
    listener l;
    size_t count = (size_t)(secs * 10.0);
    int port = open_latency_trial(&t, "lat_steady");
    listener_start(&l, count);

    atomic_bool stop;
    atomic_init(&stop, false);
    stream st = {.uri = t.uri};
    workload_config_init(&st.cfg);
    st.cfg.seed = 2013;
    st.cfg.ops = UINT64_MAX;
    st.cfg.db_prefix = t.prefix;
    st.cfg.n_databases = 1;
    st.cfg.n_namespaces = 6;
    st.cfg.w_ddl = 0;
    st.cfg.rate = rate;
    st.cfg.tick_ms = 10;
    st.cfg.stop = &stop;
    pthread_t writer;
    if (pthread_create(&writer, NULL, stream_main, &st) != 0)
        bench_die("cannot start the stream's thread");
    sleep_s(3.0); /* the stream's tables are created, the daemon settles */

    pid_t self = getpid();
    flush_counts f0 = read_flushes(port);
    double w0 = bench_now_s(), d0 = bench_cpu_seconds(t.daemon.pid),
           rd0 = bench_thread_cpu_seconds(t.daemon.pid, "o2p-reader"), m0 = bench_cpu_seconds(t.sim.pid),
           p0 = bench_cluster_cpu_seconds(t.pg), b0 = bench_cpu_seconds(self), q0 = bench_cpu_pressure_s();
    probe_result r = run_probes(&t, &l, count, 30);
    double w1 = bench_now_s(), d1 = bench_cpu_seconds(t.daemon.pid),
           rd1 = bench_thread_cpu_seconds(t.daemon.pid, "o2p-reader"), m1 = bench_cpu_seconds(t.sim.pid),
           p1 = bench_cluster_cpu_seconds(t.pg), b1 = bench_cpu_seconds(self), q1 = bench_cpu_pressure_s();
    flush_counts f1 = read_flushes(port);

    atomic_store(&stop, true);
    pthread_join(writer, NULL);
    if (!st.ok)
        bench_die("the stream: %s", st.err);
    double caught = trial_wait_caught_up(&t, 600);
    listener_stop(&l);
    trial_close(&t);

    double win = w1 - w0, commits = f1.commits - f0.commits;
    char name[96];
    snprintf(name, sizeof name, "single inserts, ~10/s, beside a mixed stream of %.0f ops/s", rate);
    scenario *s = new_scenario(name);
    s->lost = r.lost;
    if (rate >= 20000) { /* the goal is set at 20 000 ops/s */
        s->goal_ms = 50;
        s->goal_is_p99 = true;
        snprintf(s->goal, sizeof s->goal, "p99 ≤ 50 ms");
    }
    s->pressure = q0 >= 0 ? 100.0 * (q1 - q0) / win : -1;
    snprintf(s->notes, sizeof s->notes,
             "stream: %.0f ops/s achieved over its %.1f s (at most %.0f ms behind its schedule); the probe's insert: "
             "p50 %.2f ms, p99 %.2f ms; %.0f commits/s (timer %.0f, idle %.0f, size %.0f); CPU over the probes: "
             "daemon %.0f%% (reader %.0f%%), PostgreSQL %.0f%%, mongosim %.0f%%, this program %.0f%%; caught up "
             "%.2f s after the stream stopped",
             (double)st.st.ops / st.st.seconds, st.st.seconds, st.st.behind_max * 1000.0, r.ack_p50, r.ack_p99,
             commits / win, f1.timer - f0.timer, f1.idle - f0.idle, f1.size - f0.size, 100.0 * (d1 - d0) / win,
             100.0 * (rd1 - rd0) / win, 100.0 * (p1 - p0) / win, 100.0 * (m1 - m0) / win, 100.0 * (b1 - b0) / win,
             caught);
    finish_scenario(s, r.ms, r.n);
}

/* ---- output ---- */

static void print_tables(void)
{
    printf("Latency: from the moment MongoDB acknowledged the write to the arrival, at a LISTENing client, of the "
           "NOTIFY sent by a trigger on the target table (so: to the commit). Milliseconds; nearest-rank "
           "percentiles.\n\n");
    printf("| scenario | samples | p50 (ms) | p90 (ms) | p99 (ms) | max (ms) | goal | met | CPU pressure |\n");
    printf("|---|---:|---:|---:|---:|---:|---|---|---:|\n");
    for (size_t i = 0; i < nresults; i++) {
        scenario *s = &results[i];
        double p99 = pct(s->ms, s->n, 99), max = s->n ? s->ms[s->n - 1] : NAN;
        const char *met = "";
        if (s->goal_ms > 0)
            met = s->lost == 0 && (s->goal_is_p99 ? p99 : max) <= s->goal_ms ? "yes" : "no";
        char lost[48] = "";
        if (s->lost)
            snprintf(lost, sizeof lost, " (%zu never visible)", s->lost);
        char pressure[16] = "?";
        if (s->pressure >= 0)
            snprintf(pressure, sizeof pressure, "%.0f%%", s->pressure);
        printf("| %s | %zu%s | %.1f | %.1f | %.1f | %.1f | %s | %s | %s |\n", s->name, s->n, lost, pct(s->ms, s->n, 50),
               pct(s->ms, s->n, 90), p99, max, s->goal, met, pressure);
    }
    printf("\n");
    for (size_t i = 0; i < nresults; i++)
        if (results[i].notes[0])
            printf("- %s: %s.\n", results[i].name, results[i].notes);
    printf("\nThe distributions (ms):\n\n");
    printf("| scenario | samples | min | p10 | p25 | p50 | p75 | p90 | p95 | p99 | max |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < nresults; i++) {
        scenario *s = &results[i];
        printf("| %s | %zu | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", s->name, s->n,
               s->n ? s->ms[0] : NAN, pct(s->ms, s->n, 10), pct(s->ms, s->n, 25), pct(s->ms, s->n, 50),
               pct(s->ms, s->n, 75), pct(s->ms, s->n, 90), pct(s->ms, s->n, 95), pct(s->ms, s->n, 99),
               s->n ? s->ms[s->n - 1] : NAN);
    }
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (!bench_init("latency bench")) {
        fprintf(stderr,
                "usage: OPLOG2PG_TEST_PG=... %s [all [SECONDS [RATE,...]] | idle [COUNT] | bursts [N ...] | "
                "steady [SECONDS [RATE,...]]]\n"
                "  (run through scripts/with-pg.sh)\n",
                argv[0]);
        return 2;
    }
    mongoc_init();
    const char *what = argc > 1 ? argv[1] : "all";
    bool all = strcmp(what, "all") == 0;
    if (all || strcmp(what, "idle") == 0)
        bench_idle(!all && argc > 2 ? strtoull(argv[2], NULL, 10) : 300);
    if (all || strcmp(what, "bursts") == 0) {
        uint64_t sizes[16] = {10, 10000, 200000};
        size_t n = 3;
        if (!all && argc > 2) {
            n = 0;
            for (int i = 2; i < argc && n < 16; i++)
                sizes[n++] = strtoull(argv[i], NULL, 10);
        }
        bench_bursts(sizes, n);
    }
    if (all || strcmp(what, "steady") == 0) {
        /* RATE may list several, "20000,5000": one trial each, in that order */
        char rates[128];
        snprintf(rates, sizeof rates, "%s", argc > 3 ? argv[3] : "20000");
        for (char *save = NULL, *r = strtok_r(rates, ",", &save); r != NULL; r = strtok_r(NULL, ",", &save))
            bench_steady(argc > 2 ? atof(argv[2]) : 30.0, atof(r));
    }
    if (nresults == 0)
        bench_die("unknown benchmark '%s'", what);
    print_tables();
    mongoc_cleanup();
    return 0;
}

/*
 * keys.c — what the key column costs an insert.
 *
 *   bench/keys [N]   psql \copy of the same N rows (default 300 000: the workload's documents, ObjectId, int32 and
 *                    string _ids) with the key as text, as jsonb, and as a jsonb generated from the document; median
 *                    of three loads each
 *
 * Run by bench/run.sh under `make bench`. No daemon runs: the trial's mongosim holds the documents.
 */
#include <stdio.h>
#include <stdlib.h>

#include "lib/backlog.h"
#include "lib/baseline.h"
#include "lib/program.h"
#include "lib/stats.h"

static void bench_keys(uint64_t n)
{
    trial t;
    trial_open(&t, "keys", "batched");
    workload_config wc;
    backlog_inserts_config(&wc, &t, 99, n, 1);
    workload_stats st;
    char err[512], path[128], docs[140], db[64];
    if (!workload_run(t.uri, &wc, &st, err, sizeof err))
        bench_die("workload: %s", err);
    snprintf(path, sizeof path, "%s/rows.copy", t.dir);
    snprintf(docs, sizeof docs, "%s/docs.copy", t.dir);
    snprintf(db, sizeof db, "%s0", t.prefix);
    uint64_t rows = baseline_dump_collection(t.client, db, "c0", path);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "cut -f2 '%s' > '%s'", path, docs);
    if (system(cmd) != 0)
        bench_die("cut failed");
    static const struct {
        const char *what, *create, *cols;
        bool docs_only;
    } shapes[] = {
        {"`_id text COLLATE \"C\"` key text (oplog2pg 0.2)", BASELINE_SAME_SHAPE, "(_id, doc)", false},
        {"`_id jsonb`, the same key text as jsonb", "(_id jsonb PRIMARY KEY, doc jsonb NOT NULL)", "(_id, doc)", false},
        {"`_id jsonb GENERATED ALWAYS AS (doc->'_id') STORED` (oplog2pg 0.1)",
         "(_id jsonb GENERATED ALWAYS AS (doc -> '_id') STORED PRIMARY KEY, doc jsonb NOT NULL)", "(doc)", true},
    };
    double secs[3][3];
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 3; i++)
            secs[i][round] = baseline_copy(t.pg, "public.bench_keys", shapes[i].create, shapes[i].cols,
                                           shapes[i].docs_only ? docs : path, "", NULL);
    trial_close(&t);
    printf(
        "| key column | rows | seconds (median of 3) | rows/s | of the text key's rate |\n|---|---:|---:|---:|---:|\n");
    double base = 0;
    for (int i = 0; i < 3; i++) {
        double s = stats_median(secs[i], 3);
        double rate = (double)rows / s;
        if (i == 0)
            base = rate;
        printf("| %s | %llu | %.2f | %.0f | %.0f%% |\n", shapes[i].what, (unsigned long long)rows, s, rate,
               100.0 * rate / base);
    }
}

int main(int argc, char **argv)
{
    program_start("bench/keys", argv[0], "[N]");
    bench_keys(program_arg(argc, argv, 1, 300000));
    return program_end();
}

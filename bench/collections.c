/*
 * collections.c — many collections: making their tables and writing round-robin over them.
 *
 *   bench/collections [N [C...]]   N inserts (default 100 000) round-robin over C collections (default 1, 100 and
 *                                  2 000), replayed with the tables to make and with the tables there, against
 *                                  PostgreSQL's own CREATE TABLE one statement at a time and one COPY per table
 *
 * Run by bench/run.sh under `make bench` (2 000 also on a cluster with a larger lock table, and with the daemon's
 * max_prepared_statements = 4000).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../tests/lib/docgen.h"
#include "lib/backlog.h"
#include "lib/baseline.h"
#include "lib/program.h"

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
    char sql[256];
    snprintf(sql, sizeof sql, "DELETE FROM oplog2pg.checkpoint WHERE service = '%s'", t->service);
    PQclear(PQexec(t->pg, sql)); /* the table is there after the daemon's first start */
    bench_exec_sql(t->pg, "CHECKPOINT");
    return backlog_replay(t, dump, pg_s);
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
    baseline_dump_oplog(t.client, dump, NULL);
    snprintf(creates, sizeof creates, "%s/creates.bson", t.dir);
    baseline_dump_oplog(t.client, creates, db);

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
        fprintf(fd, "CREATE TABLE bench_colls.c%u " BASELINE_SAME_SHAPE ";\n", c);
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
        rows += baseline_count_rows(t.pg, q);
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
    program_start("bench/collections", argv[0], "[N [C...]]");
    uint64_t n = program_arg(argc, argv, 1, 100000);
    unsigned counts[8] = {1, 100, 2000};
    size_t k = 3;
    if (argc > 2)
        for (k = 0; k < 8 && (int)k + 2 < argc; k++)
            counts[k] = (unsigned)program_arg(argc, argv, (int)k + 2, 0);
    bench_collections(n, counts, k);
    return program_end();
}

/*
 * baseline.h — PostgreSQL's own side of a benchmark: the rows a trial wrote, dumped as files, and loaded by psql \copy
 * into fresh tables of the same shape on the same server (the baseline oplog2pg is compared with). Also the MongoDB
 * side's dumps that `oplog2pg replay` and the baselines read: the oplog as mongodump writes it, and a collection's
 * documents as the rows the daemon would make of them.
 */
#ifndef OPLOG2PG_BENCH_BASELINE_H
#define OPLOG2PG_BENCH_BASELINE_H

#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <stdint.h>

#include "../../tests/lib/benchtrial.h"

/* The table shape oplog2pg writes for a jsonb table, for the psql \copy baselines: same columns, same key, no
 * generated column. */
#define BASELINE_SAME_SHAPE "(_id text COLLATE \"C\" PRIMARY KEY, doc jsonb NOT NULL)"

/* Seconds psql \copy takes to load `path` into a fresh table `name` made by `create` (columns from `cols`, options such
 * as " with (format binary)" from `opts`), after a CHECKPOINT; PostgreSQL's CPU seconds over the load (the cluster's
 * processes, psql's backend included) into *pg_cpu_s when not NULL. The table is dropped after. */
double baseline_copy(PGconn *pg, const char *name, const char *create, const char *cols, const char *path,
                     const char *opts, double *pg_cpu_s);
/* psql \copy WHAT to PATH OPTS: WHAT is a table or a parenthesised query, opts "" or " with (format binary)". */
void baseline_dump(const char *what, const char *path, const char *opts);
/* A jsonb table's rows but the seed document (doc->>'n' 0), as COPY text into path. */
void baseline_dump_rows(const char *qtable, const char *path);
/* The size of a file in bytes; 0 when unknown. */
long long baseline_file_bytes(const char *path);
/* SELECT count(*) of a table. */
uint64_t baseline_count_rows(PGconn *pg, const char *qtable);
/* Dies unless the table holds `want` rows (naming the trial's log). */
void baseline_expect_rows(trial *t, const char *qtable, uint64_t want);

/* The source's oplog as a dump (concatenated BSON), as mongodump writes it; with cmd_db, only the commands on that
 * database (its create entries, say). */
void baseline_dump_oplog(mongoc_client_t *c, const char *path, const char *cmd_db);
/* The documents of db.coll as COPY text: the key text of _id, a tab, the document (the daemon's own two formats);
 * the number of rows. */
uint64_t baseline_dump_collection(mongoc_client_t *c, const char *db, const char *coll, const char *path);

#endif

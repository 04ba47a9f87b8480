/*
 * compare.h — checks that PostgreSQL holds exactly what the MongoDB source holds.
 *
 * For every source collection (databases admin/local/config and collections system.* skipped) all documents are
 * read sorted by _id, converted with ejson_document and ejson_key (map/ejson.h, the daemon's own `doc` and `_id`
 * formats), COPYed into a temporary table and compared with the replicated table of the namespace (map/names.h; columns
 * `_id text`, `doc jsonb`) in SQL: EXCEPT ALL both ways on (_id, doc), then the unmatched rows are paired by _id. A row
 * only in the source is *missing*, only in PostgreSQL *extra*, on both sides with unequal documents *different*. Tables
 * in PostgreSQL with no source collection (schema oplog2pg and system schemas ignored) are *orphans*. A source
 * collection with 0 documents and no table counts as equal.
 */
#ifndef OPLOG2PG_TESTS_COMPARE_H
#define OPLOG2PG_TESTS_COMPARE_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define COMPARE_MAX_EXAMPLES 3
#define COMPARE_ID_LEN       128

typedef struct {
    const char *db_prefix; /* only databases / schemas whose name starts with this (NULL or "" = all) */
} compare_options;

typedef struct {
    char db[128];
    char coll[128];
    int64_t source_rows, pg_rows;
    bool table_missing; /* no "db"."coll" table (source_rows rows are then all missing) */
    int64_t missing, extra, different;
    /* up to COMPARE_MAX_EXAMPLES example _ids per kind, as key text */
    int n_ex_missing, n_ex_extra, n_ex_different;
    char ex_missing[COMPARE_MAX_EXAMPLES][COMPARE_ID_LEN];
    char ex_extra[COMPARE_MAX_EXAMPLES][COMPARE_ID_LEN];
    char ex_different[COMPARE_MAX_EXAMPLES][COMPARE_ID_LEN];
} compare_ns;

typedef struct {
    compare_ns *ns; /* one per source collection, sorted by db then collection */
    size_t n_ns;
    char (*orphans)[260]; /* "schema.table" of PostgreSQL tables without a source collection */
    size_t n_orphans;
    int64_t source_rows, missing, extra, different;
    bool match; /* everything equal and no orphans */
} compare_report;

/* Compares the source at mongo_uri with PostgreSQL on pg (a temporary table is created and dropped on this
 * connection). Returns false only when the comparison could not run (err says why); the verdict is out->match.
 * out must be freed with compare_report_free in both cases. */
bool compare_all(const char *mongo_uri, PGconn *pg, const compare_options *opts, compare_report *out, char *err,
                 size_t errlen);
void compare_report_free(compare_report *r);
/* Human-readable summary: one line per namespace with differences (or all, when verbose), then orphans. */
void compare_report_print(const compare_report *r, FILE *f, bool verbose);

#endif

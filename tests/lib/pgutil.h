/*
 * pgutil.h — small libpq helpers for the test tools: run a statement and report its error with context, and stream
 * MongoDB documents into a COPY as relaxed Extended JSON (the daemon's `doc` format) in COPY text format.
 */
#ifndef OPLOG2PG_TESTS_PGUTIL_H
#define OPLOG2PG_TESTS_PGUTIL_H

#include <bson/bson.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Runs one statement that returns no rows (or rows that are ignored). */
bool pgutil_exec(PGconn *pg, const char *sql, char *err, size_t errlen);

/* "db"."coll" with both parts quoted by libpq; caller bson_free()s it. NULL (with err) when quoting fails. */
char *pgutil_qualified_name(PGconn *pg, const char *schema, const char *table, char *err, size_t errlen);

/* A COPY ... FROM STDIN in progress; rows are buffered and sent in large chunks. */
typedef struct {
    PGconn *pg;
    char *buf;
    size_t len, cap;
    int64_t rows;
} pgutil_copy;

/* Starts copy_sql (a "COPY t (_id, doc) FROM STDIN" statement: text format, two columns). */
bool pgutil_copy_begin(pgutil_copy *c, PGconn *pg, const char *copy_sql, char *err, size_t errlen);
/* Appends one row: the key text of doc's _id and doc as ejson_document renders it (the daemon's formats), escaped
 * for COPY text format. */
bool pgutil_copy_doc(pgutil_copy *c, const bson_t *doc, char *err, size_t errlen);
/* Finishes (ok true) or aborts (ok false) the COPY; always frees the buffer. Returns false on any error. */
bool pgutil_copy_end(pgutil_copy *c, bool ok, char *err, size_t errlen);

#endif

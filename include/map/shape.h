/*
 * shape.h — the one definition of a replicated collection's PostgreSQL table.
 *
 * Namespace db.coll lives in schema "db", table "db"."coll" (_id text COLLATE "C" PRIMARY KEY, doc jsonb NOT NULL):
 * `_id` is the key text of the document's _id (map/ejson.h: equal exactly when MongoDB's _id index says so) and
 * `doc` the whole document as relaxed Extended JSON. The sink (sink/pg.c) and the initial copy (source/copy.c)
 * both create tables with these statements and write rows with the same two-column COPY, so a table made by one is
 * exactly what the other expects.
 */
#ifndef OPLOG2PG_MAP_SHAPE_H
#define OPLOG2PG_MAP_SHAPE_H

/* The two statements that make the table, idempotent (IF NOT EXISTS), for names already quoted as identifiers:
 * qschema is "db", qtable is "db"."coll". Each result is malloc'd (free()); NULL on out of memory. */
char *shape_schema_sql(const char *qschema);
char *shape_table_sql(const char *qtable);

/* The column list every write names, in COPY order. */
#define SHAPE_COLUMNS "_id, doc"

#endif

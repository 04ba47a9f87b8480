/*
 * names.h — the one mapping from a MongoDB namespace to a PostgreSQL schema and table.
 *
 * Every path that names a table goes through names_map: the sink's writes and DDL, the initial copy, --reimport,
 * `status`, the test tools. The rules:
 *   - the schema is the database's name and the table the collection's, as they are, when that is possible;
 *   - a database whose name PostgreSQL reserves or oplog2pg uses — `oplog2pg`, `information_schema`, anything
 *     starting with `pg_` — gets a `$` in front: database `oplog2pg` lives in schema `$oplog2pg`, `pg_data` in
 *     `$pg_data`. MongoDB forbids `$` in database names, so no other database can map there;
 *   - a name longer than PostgreSQL's 63 bytes keeps its first 52 bytes (cut at a character boundary), then `$` and
 *     10 hexadecimal digits of a hash of the whole name: deterministic, and two long names that share their first 63
 *     bytes still differ. MongoDB forbids `$` in collection names too, so a shortened name never meets a natural
 *     one; the catalog (oplog2pg.tables) refuses the 1-in-2^40 case where two long names would meet.
 * A name that is empty or not valid UTF-8 cannot be a PostgreSQL identifier: names_map refuses it (the op that
 * carries it is refused as data, and set aside as a dead letter).
 */
#ifndef OPLOG2PG_MAP_NAMES_H
#define OPLOG2PG_MAP_NAMES_H

#include <stdbool.h>
#include <stddef.h>

#define NAMES_MAX 63 /* PostgreSQL's NAMEDATALEN - 1 */

typedef struct {
    char schema[NAMES_MAX + 1];
    char table[NAMES_MAX + 1];
} pg_name;

/* Maps db.coll (coll may be NULL: the schema only). False with the reason in why when it cannot be mapped. */
bool names_map(const char *db, const char *coll, pg_name *out, char *why, size_t whylen);

/* The schema of a database alone (names_map with no collection). */
bool names_schema(const char *db, char out[NAMES_MAX + 1], char *why, size_t whylen);

#endif

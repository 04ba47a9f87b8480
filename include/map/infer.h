/*
 * infer.h — a column map inferred from sample documents: what `oplog2pg infer-map` prints (docs/mapping.md,
 * "Generating a map: infer-map").
 *
 * Pure: documents go in (infer_stats_add, one at a time, none kept), a model comes out (infer_build: a map_collection
 * of map/map.h, complete with the defaults the configuration reader would fill in) together with the INI text that
 * declares it, commented with what was seen per path (infer_render). Reading MongoDB and printing is the command's
 * (src/daemon/infer_cmd.c).
 *
 * The rules, in short (docs/mapping.md has them in full):
 *   - a path seen with one scalar type gets that type's natural column type (int32 integer, int64 bigint, double
 *     double precision, decimal128 numeric, string text, bool boolean, date timestamptz, ObjectId text, binary
 *     subtype 4 of 16 bytes uuid, other binary bytea, timestamp jsonb); mixed types get the type that holds them all
 *     (int32+int64 bigint, ints+double double precision, numbers+decimal128 numeric, string+ObjectId text, uuid+other
 *     binary bytea), else jsonb; null and undefined count as absent for typing;
 *   - arrays of scalars of one type (or of types that one type holds) become TYPE[], other arrays jsonb; an array of
 *     documents becomes a child table (one level: inside an element it is a jsonb column);
 *   - nested documents become dotted columns down to depth levels; deeper, beyond max_columns, or with names the
 *     INI or path syntax cannot express, a path is left to the rest column (rest = doc) with a comment;
 *   - a path that is a document in some documents and something else in others is one jsonb column;
 *   - _id becomes the key column _id when every _id has one type that converts exactly; otherwise it is left to the
 *     text key column oplog2pg adds;
 *   - a time-series collection (infer_options.time_field): samples are measurements; the time field is the table's
 *     fixed column time (a comment says so), bucket, pos and time are no column's names, no child tables.
 */
#ifndef OPLOG2PG_MAP_INFER_H
#define OPLOG2PG_MAP_INFER_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "map/map.h"
#include "map/names.h"
#include "util/strbuf.h"

#define INFER_DEFAULT_DEPTH       2
#define INFER_DEFAULT_MAX_COLUMNS 50
#define INFER_DEFAULT_MAX_PATHS   10000
#define INFER_MAX_DEPTH           32

typedef struct infer_options {
    unsigned depth;     /* 1..INFER_MAX_DEPTH: a column path has at most this many parts (0: the default) */
    size_t max_columns; /* columns per table, the key included (0: the default) */
    size_t max_paths;   /* distinct paths followed per collection; later new paths are not (0: the default) */
    /* A time-series collection: its timeField (NULL: a collection of documents) and its metaField (NULL: none). The
     * samples are then its measurements, as the time-series view returns them (map/bucket.h), and the map is one for
     * the table of measurements (docs/timeseries.md): its fixed columns bucket, pos and time are not the map's, so
     * the time field is no column and those three names are no column's; an array of documents is never a child
     * table. The strings are copied. */
    const char *time_field;
    const char *meta_field;
} infer_options;

/* What was seen in the documents of one collection. */
typedef struct infer_stats infer_stats;

/* NULL when memory runs out. The options are copied (their defaults filled in). */
infer_stats *infer_stats_new(const infer_options *o);
/* Counts one document. False when memory runs out (the stats are then unusable). */
bool infer_stats_add(infer_stats *s, const bson_t *doc);
/* The number of documents counted. */
uint64_t infer_stats_docs(const infer_stats *s);
void infer_stats_free(infer_stats *s);

/* Whether a table name is taken already (by another collection's table, another map's table, a table inferred
 * before): the inferred tables avoid those names. */
typedef bool (*infer_taken_fn)(void *arg, const char *schema, const char *table);

/* The map inferred for one collection: the model and the comments that go with it. */
typedef struct infer_map infer_map;

/* Builds the map of db.coll from s. taken may be NULL. NULL with the reason in why when the namespace cannot be
 * written as a [map DB.COLL] header or has no PostgreSQL name, when no document was counted, or when memory runs
 * out (why says which). */
infer_map *infer_build(const infer_stats *s, const char *db, const char *coll, infer_taken_fn taken, void *arg,
                       char *why, size_t whylen);

/* The model: what loading infer_render's text gives (map_set_check accepts it). Owned by m. */
const map_collection *infer_map_model(const infer_map *m);

/* Appends the [map DB.COLL] section and its [child ...] sections, each key preceded by comments saying what was
 * seen at its path (presence, the BSON types and their shares) and why it became what it is. Every line fits the
 * configuration reader's limit (199 characters). */
void infer_render(strbuf *out, const infer_map *m);

void infer_map_free(infer_map *m);

/* The comment text that follows "; " for one path's statistics is cut to fit a line; exposed for the tests: the
 * share of part in whole as the comments print it ("100%", "97%", "<1%"; never 100% unless part == whole, never 0%
 * unless part == 0). */
const char *infer_percent(uint64_t part, uint64_t whole, char buf[8]);

#endif

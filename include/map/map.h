/*
 * map.h — the typed column map: how the documents of a MongoDB collection become rows of a relational table.
 *
 * A collection without a map keeps the jsonb shape (_id text key, doc jsonb). A mapped collection lands in a table
 * whose columns the map declares, each with a PostgreSQL type and a source path into the document; the rest of the
 * document is kept whole (rest = doc), kept without the mapped paths (rest = extra), or dropped (rest = drop). An
 * array of documents may become a child table: one row per element, with the parent's key and the element's
 * position. The map is declared in the INI configuration (docs/mapping.md); this header is its model, shared by the
 * configuration reader (daemon/), the projection of documents into rows (map/project.h), the sink's DDL and
 * statements (sink/) and the initial copy (copy/).
 */
#ifndef OPLOG2PG_MAP_MAP_H
#define OPLOG2PG_MAP_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "map/names.h"

/* The longest physical line of the configuration file, in characters, the line end not counted: the limit of its
 * reader (daemon/config_ini.h, CONFIG_INI_MAX_LINE) and of whatever writes map sections for it (map/infer.c). */
#define MAP_INI_MAX_LINE 199

/* The scalar PostgreSQL types a column may have (a column is one of these or a one-dimensional array of one). */
typedef enum map_scalar {
    MAP_TEXT = 0,
    MAP_VARCHAR, /* varchar(n): n characters at most */
    MAP_BOOLEAN,
    MAP_SMALLINT,
    MAP_INTEGER,
    MAP_BIGINT,
    MAP_NUMERIC,
    MAP_REAL,
    MAP_DOUBLE, /* double precision */
    MAP_TIMESTAMPTZ,
    MAP_TIMESTAMP,
    MAP_DATE,
    MAP_UUID,
    MAP_BYTEA,
    MAP_JSONB,
    MAP_SCALAR_COUNT
} map_scalar;

typedef struct map_type {
    map_scalar scalar;
    bool array;             /* scalar[] (not allowed for jsonb: a jsonb column holds arrays itself) */
    uint32_t varchar_chars; /* MAP_VARCHAR: n of varchar(n) */
} map_type;

/* What a value that cannot be converted to its column's type does. */
typedef enum map_on_type_error {
    MAP_ON_TYPE_ERROR_INHERIT = 0, /* a column's default: the table's setting */
    MAP_ON_TYPE_ERROR_DEAD_LETTER, /* the op is refused as data: a dead letter naming column, value and reason */
    MAP_ON_TYPE_ERROR_NULL,        /* the column gets NULL (counted in the metrics) */
} map_on_type_error;

/* What becomes of the fields no column takes. */
typedef enum map_rest {
    MAP_REST_DOC = 0, /* the whole document, in a jsonb column (rest_column, default "doc") */
    MAP_REST_EXTRA,   /* the document without the mapped paths, in a jsonb column (rest_column, default "extra") */
    MAP_REST_DROP,    /* nothing */
} map_rest;

typedef struct map_column {
    char *name; /* the PostgreSQL column name, as written (quoted in SQL) */
    map_type type;
    char *path;    /* the dotted source path, as written (default: the column name) */
    char **parts;  /* path split at the dots */
    size_t nparts; /* >= 1 */
    map_on_type_error on_type_error;
    int line; /* where it was declared (0 when made by oplog2pg: the default key column) */
} map_column;

typedef struct map_table map_table;

/* An array of documents that becomes a table of its own. Its table's key is (parent key, position). */
typedef struct map_child {
    char *path; /* dotted path of the array in the parent document (the parent's element, for a child's child) */
    char **parts;
    size_t nparts;
    map_table *table;
    int line;
} map_child;

struct map_table {
    pg_name name; /* schema and table */
    map_column *cols;
    size_t ncols;
    size_t key; /* index in cols of the key column; SIZE_MAX for a child table (its key, parent_key_column and
                 * position_column, is not in cols) */
    map_rest rest;
    char *rest_column;               /* the jsonb column of rest = doc / extra; NULL for drop */
    map_on_type_error on_type_error; /* never INHERIT once loaded */
    bool adopt;                      /* write into this table if it exists already (checked, recorded as adopted) */
    /* child tables only: */
    const map_table *parent; /* the table whose rows own these (set when the map is loaded) */
    char *parent_key_column; /* holds the parent row's key (same type as the parent's key column) */
    char *position_column;   /* the element's index in the array, from 0 (integer) */
    map_child *children;
    size_t nchildren;
    int line;
    /* The column and child paths as a tree, for projecting a document in one pass (map/project.c): made on first
     * use, by whichever thread projects first, and freed with the table. */
    void *paths;
};

/* The map of one collection. */
typedef struct map_collection {
    char *db;
    char *coll;
    map_table table;
    int line;
} map_collection;

/* Every map of a configuration. */
typedef struct map_set {
    map_collection *colls;
    size_t n;
} map_set;

/* The map of db.coll, NULL when the collection has none (it keeps the jsonb shape). */
const map_collection *map_find(const map_set *m, const char *db, const char *coll);

/* The PostgreSQL spelling of a type ("varchar(20)", "double precision[]"). */
const char *map_type_sql(const map_type *t, char *buf, size_t len);

/* Parses a type as the map writes it ("integer", "int4", "varchar(20)", "timestamptz[]", "double precision").
 * False when it is not one of the types a column may have. */
bool map_type_parse(const char *text, map_type *out);

/* The name of a rest mode / on_type_error setting as the map writes it. */
const char *map_rest_name(map_rest r);
const char *map_on_type_error_name(map_on_type_error e);

/* Frees everything a set holds and empties it. */
void map_set_clear(map_set *m);

/* Splits a dotted path into its parts (*parts malloc'd, each part too; free both). False with the reason in why when
 * it is not a path a column or child table may take: an empty part, a part starting with `$`, not valid UTF-8. */
bool map_path_split(const char *path, char ***parts, size_t *nparts, char *why, size_t whylen);

/* Checks a complete set against the rules of docs/mapping.md: names (1..63 bytes of UTF-8, no reserved schema), no
 * two columns of a table with one name (rest, parent key and position columns included), paths, no column or child
 * path a prefix of another, the key column (a column of the table taking _id), a child path other than _id, one map
 * per namespace and one map or child per table. False with the line the model records for the offending part and
 * the reason. */
bool map_set_check(const map_set *m, int *line, char *why, size_t whylen);

#endif

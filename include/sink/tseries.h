/*
 * tseries.h — what the initial copy needs of the time-series table kind (src/sink/tseries.c; docs/timeseries.md): a
 * time-series collection's table made with its options, and one bucket written as its measurements' rows, with its
 * document stored for the changes tailing applies to it next.
 */
#ifndef OPLOG2PG_SINK_TSERIES_H
#define OPLOG2PG_SINK_TSERIES_H

#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "map/map.h"
#include "sink/pgconn.h"

/* Makes (or checks) the table of a time-series collection and records its options; $1..$9: service, db, coll,
 * schema, table, timeField, metaField (NULL when none, or both NULL to rely on what is recorded), the columns of a
 * typed map (sink_tseries_typed_columns; NULL for the default ones) and whether the map adopts the table. One row:
 * the recorded time_field and meta_field. */
#define SINK_TSERIES_ENSURE_SQL                                                                                        \
    "SELECT time_field, meta_field FROM oplog2pg.ensure_timeseries_table($1, $2, $3, $4, $5, $6, $7, $8::jsonb, "      \
    "$9::boolean)"

/* The table of a typed map of a time-series collection (docs/timeseries.md, "Typed columns"): bucket, pos and time,
 * then the map's fields, projected from each measurement. */
typedef struct sink_tseries_typed sink_tseries_typed;

typedef enum {
    SINK_TS_TYPED_OK = 0,
    SINK_TS_TYPED_REFUSED, /* the map cannot describe a time-series table (why says why): a configuration error */
    SINK_TS_TYPED_NOMEM,
} sink_tseries_typed_status;

/* The statements of m's table for a time-series collection, names quoted for conn. */
sink_tseries_typed_status sink_tseries_typed_new(PGconn *conn, const map_collection *m, sink_tseries_typed **out,
                                                 char *why, size_t whylen);
void sink_tseries_typed_free(sink_tseries_typed *ty);
/* Its columns as SINK_TSERIES_ENSURE_SQL's $8 takes them. */
const char *sink_tseries_typed_columns(const sink_tseries_typed *ty);

typedef struct sink_tseries_copy_target {
    const char *qtable;                  /* "schema"."table", quoted */
    const char *schema, *table;          /* unquoted, for oplog2pg.timeseries_bucket */
    const char *time_field, *meta_field; /* the collection's options (meta_field NULL when none) */
    sink_tseries_typed *typed;           /* its typed map's table, NULL for the default columns */
} sink_tseries_copy_target;

typedef enum {
    SINK_TS_COPY_OK = 0,
    SINK_TS_COPY_REFUSED, /* the bucket cannot become rows (why says why): nothing was sent */
    SINK_TS_COPY_PG,      /* a statement failed: c->last holds the error and its class */
    SINK_TS_COPY_NOMEM,
    SINK_TS_COPY_BUG, /* what cannot happen happened (why says what): the copy stops, nothing is set aside */
} sink_tseries_copy_status;

/* One bucket read by the initial copy, in the caller's open transaction on c: its measurements upserted (a row that
 * holds the same values is left alone), the places past its end deleted, and its document stored. */
sink_tseries_copy_status sink_tseries_copy_bucket(pgconn *c, const sink_tseries_copy_target *to, const uint8_t *bucket,
                                                  uint32_t len, char *why, size_t whylen);

#endif

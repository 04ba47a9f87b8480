/*
 * tseries.c — the time-series table kind (pg_internal.h, table_kind): a time-series collection as a table of its
 * measurements, one row each, keyed by the bucket that holds it and its place there (docs/timeseries.md):
 *
 *     bucket text COLLATE "C"   the bucket's _id, 24 hex digits  }  the primary key
 *     pos    integer            its place in the bucket, from 0   }
 *     time   timestamptz        the measurement's time field
 *     meta   jsonb              the bucket's meta field (NULL without one)
 *     doc    jsonb              the measurement as the collection returns it (its _id, time, meta and fields)
 *
 * or, for a collection with a typed map, bucket, pos and time followed by the map's fields, projected from each
 * measurement as a mapped collection's document is (sink_tseries_typed; "Typed columns" in the docs).
 *
 * MongoDB writes buckets, not measurements: a new bucket is an insert of many measurements, an append an update of
 * the bucket (a `$v:2` diff: new keys of its columns up to 7.x, binary diffs of its compressed columns from 8.0), a
 * compression or a re-pack a replacement, a deletion a delete. Each is applied here to the bucket's document as of
 * the last op (kept in memory, and in oplog2pg.timeseries_bucket with each commit, so a restart or a later session
 * finds it), old and new are unpacked (map/bucket.h), and only the rows that differ are written: an append inserts
 * its new places, a compression that keeps the order writes nothing, a re-pack rewrites the places that changed and
 * deletes those past the new end. Every op goes out as at most two pipelined statements whatever its size (the rows
 * as arrays, binary), in the group's transaction like every other write.
 *
 * A change whose bucket has no stored document (a diff of a bucket whose insert was never applied, or after an
 * earlier change of it was set aside) cannot be applied: it is refused as data, with that reason, and never guessed.
 */
#include "pg_internal.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map/bucket.h"
#include "map/ejson.h"
#include "map/project.h"
#include "sink/mapped.h"
#include "sink/tseries.h"
#include "util/strbuf.h"

#define TS_KEY_LEN 24 /* an ObjectId in hex */
/* Bucket documents kept in memory past a commit, in bytes, before the clean ones are let go (they are read back from
 * oplog2pg.timeseries_bucket when needed again). */
#define TS_CACHE_BYTES (64u * 1024 * 1024)

/* PostgreSQL's type OIDs (pg_type.dat; fixed since the types were built in) */
#define OID_BYTEA       17
#define OID_INT4        23
#define OID_TEXT        25
#define OID_TIMESTAMPTZ 1184
#define OID_JSONB       3802

/* The instants PostgreSQL's timestamptz holds, in milliseconds since 1970 (4713 BC to 294276 AD, datetime.h's
 * MIN_TIMESTAMP and END_TIMESTAMP), and the distance from 1970 to its epoch, 2000-01-01. */
#define TS_MIN_MS       (-210866803200000LL)
#define TS_END_MS       9224318016000000LL
#define PG_EPOCH_OFF_MS 946684800000LL

typedef struct ts_state {
    char key[TS_KEY_LEN + 1]; /* "" marks a free slot */
    uint8_t *doc;             /* the bucket document; NULL: none (deleted, or its last change set aside) */
    uint32_t len;
    bool dirty;       /* changed since the last commit: written (or its row deleted) with the next one */
    bool unpacked;    /* rows holds doc's measurements (so the next change compares with them, unpacking once) */
    bucket_rows rows; /* when unpacked */
    size_t rows_bytes;
} ts_state;

struct sink_tseries {
    char *time_field, *meta_field; /* the collection's options (meta_field NULL when none) */
    sink_tseries_typed *typed;     /* the collection's typed map, NULL for the default columns */
    ts_state *slots;
    size_t cap, n; /* open addressing; cap a power of two, at least twice n */
    size_t bytes;  /* of the documents held */
    bool any_dirty;
    /* Rows of new places (past the keep point, in buckets whose document is known), held for one binary COPY: sent
     * before any other statement on the table (copy_flush), and before the commit. */
    strbuf copy;
    size_t copy_rows;
    op_pos copy_last; /* the last op whose rows it holds */
};

/* ---------------------------------------------------------------------------------------------------------------- */
/* the bucket documents, by _id */

static uint64_t key_hash(const char *k)
{
    uint64_t h = 1469598103934665603u;
    for (; *k; k++)
        h = (h ^ (uint8_t)*k) * 1099511628211u;
    return h;
}

static ts_state *state_find(sink_tseries *ts, const char *key)
{
    if (ts->cap == 0)
        return NULL;
    for (size_t i = key_hash(key) & (ts->cap - 1);; i = (i + 1) & (ts->cap - 1)) {
        if (ts->slots[i].key[0] == '\0')
            return NULL;
        if (strcmp(ts->slots[i].key, key) == 0)
            return &ts->slots[i];
    }
}

static bool state_grow(sink_tseries *ts)
{
    size_t cap = ts->cap ? ts->cap * 2 : 64;
    ts_state *slots = calloc(cap, sizeof *slots);
    if (slots == NULL)
        return false;
    for (size_t i = 0; i < ts->cap; i++) {
        if (ts->slots[i].key[0] == '\0')
            continue;
        size_t j = key_hash(ts->slots[i].key) & (cap - 1);
        while (slots[j].key[0] != '\0')
            j = (j + 1) & (cap - 1);
        slots[j] = ts->slots[i];
    }
    free(ts->slots);
    ts->slots = slots;
    ts->cap = cap;
    return true;
}

/* The slot of key, made (empty, no document) when missing; NULL when memory ran out. */
static ts_state *state_put(sink_tseries *ts, const char *key)
{
    ts_state *st = state_find(ts, key);
    if (st != NULL)
        return st;
    if ((ts->n + 1) * 2 > ts->cap && !state_grow(ts))
        return NULL;
    size_t i = key_hash(key) & (ts->cap - 1);
    while (ts->slots[i].key[0] != '\0')
        i = (i + 1) & (ts->cap - 1);
    memcpy(ts->slots[i].key, key, TS_KEY_LEN + 1);
    ts->n++;
    return &ts->slots[i];
}

static size_t rows_bytes(const bucket_rows *r)
{
    size_t n = r->n * (sizeof *r->docs + sizeof *r->lens + sizeof *r->times);
    for (size_t i = 0; i < r->n; i++)
        n += r->lens[i];
    return n;
}

/* Forgets st's measurements (st->rows). */
static void state_drop_rows(sink_tseries *ts, ts_state *st)
{
    bucket_rows_clear(&st->rows);
    ts->bytes -= st->rows_bytes;
    st->rows_bytes = 0;
    st->unpacked = false;
}

/* Keeps r (moved in, and zeroed) as st's measurements. */
static void state_keep_rows(sink_tseries *ts, ts_state *st, bucket_rows *r)
{
    state_drop_rows(ts, st);
    st->rows = *r;
    memset(r, 0, sizeof *r);
    st->rows_bytes = rows_bytes(&st->rows);
    ts->bytes += st->rows_bytes;
    st->unpacked = true;
}

/* Sets st's document (taking ownership of doc, which may be NULL) and marks it for the next commit; its rows are
 * forgotten (the caller keeps the new ones). */
static void state_set(sink_tseries *ts, ts_state *st, uint8_t *doc, uint32_t len)
{
    state_drop_rows(ts, st);
    ts->bytes -= st->len;
    free(st->doc);
    st->doc = doc;
    st->len = doc != NULL ? len : 0;
    ts->bytes += st->len;
    st->dirty = true;
    ts->any_dirty = true;
}

/* Lets every document go, once the last commit wrote them all, when they take more than TS_CACHE_BYTES (the next
 * change of a bucket reads its document back). A table holding a change not yet written keeps everything. */
static void state_trim(sink_tseries *ts)
{
    if (ts->bytes <= TS_CACHE_BYTES || ts->any_dirty)
        return;
    for (size_t i = 0; i < ts->cap; i++) {
        free(ts->slots[i].doc);
        bucket_rows_clear(&ts->slots[i].rows);
    }
    free(ts->slots);
    ts->slots = NULL;
    ts->cap = ts->n = ts->bytes = 0;
}

static void tseries_free_state(sink_tseries *ts)
{
    if (ts == NULL)
        return;
    for (size_t i = 0; i < ts->cap; i++) {
        free(ts->slots[i].doc);
        bucket_rows_clear(&ts->slots[i].rows);
    }
    free(ts->slots);
    strbuf_free(&ts->copy);
    sink_tseries_typed_free(ts->typed);
    free(ts->time_field);
    free(ts->meta_field);
    free(ts);
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* binary parameters */

static void put_u32(strbuf *b, uint32_t v)
{
    uint32_t n = htonl(v);
    strbuf_append(b, &n, 4);
}

static void put_u16(strbuf *b, uint16_t v)
{
    uint16_t n = htons(v);
    strbuf_append(b, &n, 2);
}

static void put_u64(strbuf *b, uint64_t v)
{
    put_u32(b, (uint32_t)(v >> 32));
    put_u32(b, (uint32_t)v);
}

/* The header of a one-dimensional array of n elements of type oid, without NULLs (array_recv's format); each element
 * follows as its length and bytes. */
static void array_begin(strbuf *b, uint32_t oid, size_t n)
{
    put_u32(b, 1);
    put_u32(b, 0);
    put_u32(b, oid);
    put_u32(b, (uint32_t)n);
    put_u32(b, 1);
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* a typed map (docs/timeseries.md, "Typed columns") */

/* The table of a typed map of a time-series collection: bucket, pos and time, as in the default shape, then the map's
 * fields (map_table_field: its columns, the one taking the measurement's _id among them, and its rest column), taken
 * from each measurement as the collection returns it, by the same projection as a document of a mapped collection. */
struct sink_tseries_typed {
    const map_collection *map;
    sink_mapped_table mt; /* the map's table: its fields quoted, in COPY order */
    char *columns_json;   /* ensure_timeseries_table's p_columns */
    char *copy_sql;       /* COPY of whole rows, binary */
    char *upsert_sql;     /* one row ($1..$n: bucket, pos, time, the map's fields); the same values are left alone */
    size_t nfields;       /* the map's fields */
    map_rows scratch;     /* one measurement's projection */
    strbuf key;           /* its key column's value, framed */
};

void sink_tseries_typed_free(sink_tseries_typed *ty)
{
    if (ty == NULL)
        return;
    sink_mapped_table_free(&ty->mt);
    free(ty->columns_json);
    free(ty->copy_sql);
    free(ty->upsert_sql);
    strbuf_free(&ty->scratch.buf);
    strbuf_free(&ty->key);
    free(ty);
}

/* The column names the table has whatever the map says. */
static const char *const ts_fixed[3] = {"bucket", "pos", "time"};

sink_tseries_typed_status sink_tseries_typed_new(PGconn *conn, const map_collection *m, sink_tseries_typed **out,
                                                 char *why, size_t whylen)
{
    *out = NULL;
    if (m->table.nchildren > 0) {
        snprintf(why, whylen,
                 "%s.%s is a time-series collection, and its map declares a child table (child.%s): a measurement's "
                 "rows have no key of their own for child rows to point to; take the array as a jsonb column instead",
                 m->db, m->coll, m->table.children[0].path);
        return SINK_TS_TYPED_REFUSED;
    }
    size_t nf = map_table_fields(&m->table);
    for (size_t f = 0; f < nf; f++) {
        char type[80];
        const char *name = map_table_field(&m->table, f, type, sizeof type);
        for (size_t k = 0; k < 3; k++)
            if (strcmp(name, ts_fixed[k]) == 0) {
                snprintf(why, whylen,
                         "%s.%s is a time-series collection, whose table has the columns bucket, pos and time of its "
                         "own, and its map names a column %s: rename that column in [map %s.%s]",
                         m->db, m->coll, name, m->db, m->coll);
                return SINK_TS_TYPED_REFUSED;
            }
    }
    sink_tseries_typed *ty = calloc(1, sizeof *ty);
    if (ty == NULL)
        return SINK_TS_TYPED_NOMEM;
    ty->map = m;
    ty->nfields = nf;
    if (!sink_mapped_table_build(conn, m, 0, &ty->mt)) {
        free(ty);
        return SINK_TS_TYPED_NOMEM;
    }
    strbuf b = STRBUF_INIT;
    strbuf_puts(&b, "[{\"name\": \"bucket\", \"type\": \"text\", \"ddl\": \"text COLLATE \\\"C\\\" NOT NULL\"}, "
                    "{\"name\": \"pos\", \"type\": \"integer\", \"ddl\": \"integer NOT NULL\"}, "
                    "{\"name\": \"time\", \"type\": \"timestamp with time zone\", \"ddl\": \"timestamptz NOT NULL\"}");
    const char *cols = ty->mt.columns_json; /* "[...]": its elements follow the fixed ones */
    if (cols[1] != ']')
        strbuf_puts(&b, ", ");
    strbuf_puts(&b, cols + 1);
    ty->columns_json = b.failed ? NULL : strndup(b.data, b.len);
    strbuf_reset(&b, 0);

    strbuf fields = STRBUF_INIT; /* the column list */
    strbuf_puts(&fields, "(bucket, pos, \"time\"");
    for (size_t f = 0; f < nf; f++)
        strbuf_printf(&fields, ", %s", ty->mt.qfields[f]);
    strbuf_putc(&fields, ')');
    strbuf_printf(&b, "COPY %s %.*s FROM STDIN (FORMAT binary)", ty->mt.qname, (int)fields.len, fields.data);
    ty->copy_sql = b.failed || fields.failed ? NULL : strndup(b.data, b.len);
    strbuf_reset(&b, 0);

    strbuf_printf(&b, "INSERT INTO %s AS r %.*s VALUES ($1, $2, $3", ty->mt.qname, (int)fields.len, fields.data);
    strbuf_free(&fields);
    for (size_t f = 0; f < nf; f++)
        strbuf_printf(&b, ", $%zu", f + 4);
    strbuf_puts(&b, ") ON CONFLICT (bucket, pos) DO UPDATE SET \"time\" = excluded.\"time\"");
    for (size_t f = 0; f < nf; f++)
        strbuf_printf(&b, ", %s = excluded.%s", ty->mt.qfields[f], ty->mt.qfields[f]);
    strbuf_puts(&b, " WHERE (r.\"time\"");
    for (size_t f = 0; f < nf; f++)
        strbuf_printf(&b, ", r.%s", ty->mt.qfields[f]);
    strbuf_puts(&b, ") IS DISTINCT FROM (excluded.\"time\"");
    for (size_t f = 0; f < nf; f++)
        strbuf_printf(&b, ", excluded.%s", ty->mt.qfields[f]);
    strbuf_puts(&b, ")");
    ty->upsert_sql = b.failed ? NULL : strndup(b.data, b.len);
    strbuf_free(&b);
    if (ty->columns_json == NULL || ty->copy_sql == NULL || ty->upsert_sql == NULL) {
        sink_tseries_typed_free(ty);
        return SINK_TS_TYPED_NOMEM;
    }
    *out = ty;
    return SINK_TS_TYPED_OK;
}

const char *sink_tseries_typed_columns(const sink_tseries_typed *ty)
{
    return ty->columns_json;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* the kind */

static bool prepare(sink *s, table *t, const op_pos *pos)
{
    if (tseries_copy_end(s) != APPLY_OK) /* another table's open COPY ends before the read */
        return false;
    if (t->ts == NULL && (t->ts = calloc(1, sizeof *t->ts)) == NULL)
        return false;
    const map_collection *m = map_find(s->cfg.maps, t->db, t->coll);
    if (m != NULL && t->ts->typed == NULL) {
        char why[600];
        switch (sink_tseries_typed_new(s->conn, m, &t->ts->typed, why, sizeof why)) {
        case SINK_TS_TYPED_OK:
            break;
        case SINK_TS_TYPED_REFUSED:
            sink_set_err(s, APPLY_CONFIG, NULL, "%s", why);
            return false;
        case SINK_TS_TYPED_NOMEM:
            sink_set_err(s, APPLY_NOMEM, NULL, "out of memory preparing the table of %s.%s", t->db, t->coll);
            return false;
        }
    }
    sink_tseries_typed *ty = t->ts->typed;
    const char *values[9] = {s->service,
                             t->db,
                             t->coll,
                             t->name.schema,
                             t->name.table,
                             s->ts_hint_time,
                             s->ts_hint_meta,
                             ty != NULL ? ty->columns_json : NULL,
                             ty != NULL && ty->map->table.adopt ? "true" : "false"};
    PGresult *res = NULL;
    if (!pipe_read(s, t, SINK_TSERIES_ENSURE_SQL, 9, values, NULL, NULL, pos, &res))
        return false;
    bool ok = PQntuples(res) == 1 && !PQgetisnull(res, 0, 0);
    if (ok) {
        free(t->ts->time_field);
        free(t->ts->meta_field);
        t->ts->time_field = strdup(PQgetvalue(res, 0, 0));
        t->ts->meta_field = PQgetisnull(res, 0, 1) ? NULL : strdup(PQgetvalue(res, 0, 1));
        ok = t->ts->time_field != NULL && (PQgetisnull(res, 0, 1) || t->ts->meta_field != NULL);
        if (!ok)
            sink_set_err(s, APPLY_NOMEM, NULL, "out of memory reading the options of %s.%s", t->db, t->coll);
    } else {
        sink_set_err(s, APPLY_CONFIG, NULL, "the options of time-series collection %s.%s came back empty", t->db,
                     t->coll);
    }
    PQclear(res);
    if (ok && ty != NULL) {
        char name[32];
        snprintf(name, sizeof name, "TSU%u", t->id);
        ok = sink_prepare(s, t, name, ty->upsert_sql) == APPLY_OK;
    }
    return ok;
}

/* The table of db.coll: its map's, else the one names_map gives (as for the jsonb shape). */
static bool ts_name(sink *s, const char *db, const char *coll, pg_name *out, const op_pos *pos)
{
    const map_collection *m = map_find(s->cfg.maps, db, coll);
    if (m != NULL) {
        *out = m->table.name;
        return true;
    }
    return sink_map_names(s, db, coll, out, pos);
}

/* A time-series table is written only by its bucket ops (tseries_apply): runs of inserts never reach it (the batcher
 * hands bucket ops on one by one), and its DDL goes by the catalog as the jsonb shape's does. */
static sink_status no_runs(sink *s, table *t, const sink_batch *b, const op_pos *pos, bool fresh)
{
    (void)b;
    (void)fresh;
    char where[32];
    sink_fmt_pos(pos, where, sizeof where);
    sink_set_err(s, APPLY_UNRECORDABLE, NULL,
                 "a run of documents reached the time-series table of %s.%s (oplog entry %s): a bug", t->db, t->coll,
                 where);
    return s->failed;
}

static bool no_streams(const table *t)
{
    (void)t;
    return false;
}

static bool no_copy_start(sink *s, const table *t, pgconn_error *e)
{
    (void)s;
    (void)t;
    memset(e, 0, sizeof *e);
    e->status = APPLY_UNRECORDABLE;
    snprintf(e->message, sizeof e->message, "a COPY of documents into a time-series table: a bug");
    return false;
}

static bool no_copy_rows(sink_copy_out *o, const table *t, const sink_batch *b, size_t *from, pgconn_error *e)
{
    (void)o;
    (void)b;
    (void)from;
    return no_copy_start(NULL, t, e);
}

static sink_rows_dest no_dest(const table *t)
{
    return sink_jsonb_kind.dest(t);
}

static sink_status ddl_drop(sink *s, const char *db, const char *coll, const op_pos *pos)
{
    return sink_jsonb_kind.drop(s, db, coll, pos);
}

static sink_status ddl_rename(sink *s, const char *db, const char *coll, const char *to_db, const char *to_coll,
                              const op_pos *pos)
{
    return sink_jsonb_kind.rename(s, db, coll, to_db, to_coll, pos);
}

static sink_status ddl_truncate(sink *s, table *t, const op_pos *pos)
{
    return sink_jsonb_kind.truncate(s, t, pos);
}

static void kind_free(table *t)
{
    tseries_free_state(t->ts);
    t->ts = NULL;
}

const table_kind sink_tseries_kind = {
    .name = ts_name,
    .prepare = prepare,
    .insert_rows = no_runs,
    .streams = no_streams,
    .copy_start = no_copy_start,
    .copy_rows = no_copy_rows,
    .dest = no_dest,
    .apply_plan = NULL,
    .drop = ddl_drop,
    .rename = ddl_rename,
    .truncate = ddl_truncate,
    .free = kind_free,
};

/* ---------------------------------------------------------------------------------------------------------------- */
/* a bucket op */

/* A refusal of the op's data: what cannot become rows (the bucket itself, or what it holds). */
static sink_status refuse(sink *s, const table *t, const op *o, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static sink_status refuse(sink *s, const table *t, const op *o, const char *fmt, ...)
{
    char why[600], where[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    sink_fmt_pos(&o->pos, where, sizeof where);
    sink_set_err_at(s, &o->pos, APPLY_DATA, NULL, "%s of a bucket of time-series collection %s.%s (oplog entry %s): %s",
                    op_kind_name(o->kind), t->db, t->coll, where, why);
    return s->failed;
}

/* The stored document of a bucket missing from memory, read back (NULL doc: there is none). */
static bool state_load(sink *s, table *t, ts_state *st, const op_pos *pos)
{
    if (tseries_copy_end(s) != APPLY_OK)
        return false;
    const char *values[3] = {t->name.schema, t->name.table, st->key};
    const int formats[3] = {0, 0, 0};
    PGresult *res = NULL;
    if (!pipe_read(s, t,
                   "SELECT doc FROM oplog2pg.timeseries_bucket WHERE schema_name = $1 AND table_name = $2 AND "
                   "bucket = $3",
                   3, values, NULL, formats, pos, &res))
        return false;
    bool ok = true;
    if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0)) {
        size_t len = 0;
        unsigned char *raw = PQunescapeBytea((const unsigned char *)PQgetvalue(res, 0, 0), &len);
        uint8_t *doc = raw != NULL ? malloc(len > 0 ? len : 1) : NULL;
        bson_t b;
        if (doc == NULL) {
            ok = false;
            sink_set_err(s, APPLY_NOMEM, NULL, "out of memory reading a bucket of %s.%s", t->db, t->coll);
        } else if (!bson_init_static(&b, raw, len) || !bson_validate(&b, BSON_VALIDATE_NONE, NULL)) {
            /* the kept document is trusted from here on (bucket_apply_diff_ex, bucket_unpack_next): checked once */
            free(doc);
            ok = false;
            sink_set_err(s, APPLY_CONFIG, NULL,
                         "the kept document of bucket %s of %s.%s in oplog2pg.timeseries_bucket is not valid BSON; "
                         "only oplog2pg writes that table: a new copy of the collection (oplog2pg run --reimport) "
                         "makes it again",
                         st->key, t->db, t->coll);
        } else {
            memcpy(doc, raw, len);
            s->stats.ts_bucket_reads++;
            st->doc = doc;
            st->len = (uint32_t)len;
            t->ts->bytes += len;
        }
        PQfreemem(raw);
    }
    PQclear(res);
    return ok;
}

/* The rows of a bucket op as the parameters of TS_UPSERT_SQL: the bucket's meta value (the same in each of its rows)
 * and, for each place whose measurement differs between old and new (old NULL: unknown, so every one), its place,
 * time and document, as binary arrays. */
typedef struct ts_params {
    strbuf pos, times, docs, meta, js;
    bool has_meta;
    size_t n;
} ts_params;

typedef enum { TS_BUILD_OK, TS_BUILD_REFUSED, TS_BUILD_NOMEM, TS_BUILD_BUG } ts_build;

static void params_free(ts_params *p)
{
    strbuf_free(&p->pos);
    strbuf_free(&p->times);
    strbuf_free(&p->docs);
    strbuf_free(&p->meta);
    strbuf_free(&p->js);
}

static bool same_row(const bucket_rows *old, const bucket_rows *nw, size_t i)
{
    /* the same pointer: the same document (bucket_unpack_next shares the places it did not build again) */
    return old != NULL && i < old->n && old->times[i] == nw->times[i] && old->lens[i] == nw->lens[i] &&
           (old->docs[i] == nw->docs[i] || memcmp(old->docs[i], nw->docs[i], nw->lens[i]) == 0);
}

/* The rows of places from..to-1 of nw, those that differ from old's; as arrays in p, or, with tuples, appended to it
 * as binary COPY tuples of (bucket = key, pos, time, meta, doc) (p then counts them). */
static ts_build build_rows(const char *meta_field, const uint8_t *bucket, uint32_t len, const bucket_rows *old,
                           const bucket_rows *nw, size_t from, size_t to, ts_params *p, strbuf *tuples, const char *key,
                           char *why, size_t whylen)
{
    memset(p, 0, sizeof *p);
    bson_iter_t it;
    if (meta_field != NULL && bson_iter_init_from_data(&it, bucket, len) && bson_iter_find(&it, "meta")) {
        ejson_error err;
        strbuf_putc(&p->meta, 1); /* jsonb's binary format: version 1, then the text */
        if (ejson_write_value(&p->meta, bson_iter_value(&it), &err) != EJSON_OK) {
            if (p->meta.failed)
                return TS_BUILD_NOMEM;
            char e[200];
            snprintf(why, whylen, "its meta value cannot be written as JSON: %s", ejson_error_text(&err, e, sizeof e));
            return TS_BUILD_REFUSED;
        }
        p->has_meta = true;
    }
    for (size_t i = from; i < to; i++)
        p->n += !same_row(old, nw, i);
    if (p->n == 0)
        return TS_BUILD_OK;
    if (tuples == NULL) {
        array_begin(&p->pos, OID_INT4, p->n);
        array_begin(&p->times, OID_TIMESTAMPTZ, p->n);
        array_begin(&p->docs, OID_JSONB, p->n);
    }
    for (size_t i = from; i < to; i++) {
        if (same_row(old, nw, i))
            continue; /* the same measurement in the same place: nothing to write */
        int64_t ms = nw->times[i];
        if (ms < TS_MIN_MS || ms >= TS_END_MS) {
            snprintf(why, whylen, "measurement %zu's time (%lld ms from 1970) is outside timestamptz's range", i,
                     (long long)ms);
            return TS_BUILD_REFUSED;
        }
        if (tuples != NULL) {
            put_u16(tuples, 5);
            put_u32(tuples, TS_KEY_LEN);
            strbuf_append(tuples, key, TS_KEY_LEN);
        }
        strbuf *pb = tuples != NULL ? tuples : &p->pos, *tb = tuples != NULL ? tuples : &p->times;
        put_u32(pb, 4);
        put_u32(pb, (uint32_t)i);
        put_u32(tb, 8);
        put_u64(tb, (uint64_t)((ms - PG_EPOCH_OFF_MS) * 1000));
        if (tuples != NULL) {
            if (p->has_meta) {
                put_u32(tuples, (uint32_t)p->meta.len);
                strbuf_append(tuples, p->meta.data, p->meta.len);
            } else {
                put_u32(tuples, UINT32_MAX); /* -1: NULL */
            }
        }
        ejson_error err;
        strbuf_reset(&p->js, 1 << 20);
        strbuf_putc(&p->js, 1);
        if (ejson_write_document_jsonb(&p->js, nw->docs[i], nw->lens[i], &err) != EJSON_OK) {
            if (p->js.failed)
                return TS_BUILD_NOMEM;
            char e[200];
            snprintf(why, whylen, "measurement %zu cannot be written as JSON: %s", i,
                     ejson_error_text(&err, e, sizeof e));
            return TS_BUILD_REFUSED;
        }
        strbuf *db = tuples != NULL ? tuples : &p->docs;
        put_u32(db, (uint32_t)p->js.len);
        strbuf_append(db, p->js.data, p->js.len);
    }
    bool failed = p->pos.failed || p->times.failed || p->docs.failed || p->meta.failed || (tuples && tuples->failed);
    return failed ? TS_BUILD_NOMEM : TS_BUILD_OK;
}

/* Place i of nw as a row of a typed map: its COPY tuple (bucket = key, pos, time, then the map's fields, projected
 * from the measurement as a mapped collection's document is; its _id, if it has one, in the key column) appended to
 * out. */
static ts_build typed_row(sink_tseries_typed *ty, const char *key, const bucket_rows *nw, size_t i, strbuf *out,
                          char *why, size_t whylen)
{
    int64_t ms = nw->times[i];
    if (ms < TS_MIN_MS || ms >= TS_END_MS) {
        snprintf(why, whylen, "measurement %zu's time (%lld ms from 1970) is outside timestamptz's range", i,
                 (long long)ms);
        return TS_BUILD_REFUSED;
    }
    strbuf_reset(&ty->scratch.buf, 1u << 20);
    ty->scratch.count = 0;
    strbuf_reset(&ty->key, 4096);
    bson_iter_t it;
    bool has_id = bson_iter_init_from_data(&it, nw->docs[i], nw->lens[i]) && bson_iter_find(&it, "_id") &&
                  !BSON_ITER_HOLDS_NULL(&it);
    char e[400];
    project_status ps = has_id ? map_project_key(ty->map, bson_iter_value(&it), &ty->key, e, sizeof e) : PROJECT_OK;
    if (ps == PROJECT_OK)
        ps =
            map_project_document_keyed(ty->map, nw->docs[i], nw->lens[i], has_id ? (const uint8_t *)ty->key.data : NULL,
                                       ty->key.len, &ty->scratch, NULL, e, sizeof e);
    if (ps == PROJECT_NOMEM || ty->key.failed)
        return TS_BUILD_NOMEM;
    if (ps == PROJECT_TYPE_ERROR) {
        snprintf(why, whylen, "measurement %zu: %s", i, e);
        return TS_BUILD_REFUSED;
    }
    map_row_iter ri;
    uint16_t tn;
    const uint8_t *tuple;
    uint32_t tlen;
    map_rows_iter(&ty->scratch, &ri);
    if (!map_rows_next(&ri, &tn, &tuple, &tlen) || tn != 0 || tlen < 2 || map_tuple_fields(tuple) != ty->nfields)
        return TS_BUILD_BUG; /* a map without child tables projects one row of its own fields */
    put_u16(out, (uint16_t)(3 + ty->nfields));
    put_u32(out, TS_KEY_LEN);
    strbuf_append(out, key, TS_KEY_LEN);
    put_u32(out, 4);
    put_u32(out, (uint32_t)i);
    put_u32(out, 8);
    put_u64(out, (uint64_t)((ms - PG_EPOCH_OFF_MS) * 1000));
    strbuf_append(out, tuple + 2, tlen - 2);
    return out->failed ? TS_BUILD_NOMEM : TS_BUILD_OK;
}

/* The statements of a bucket's rows, for the table %s: the upsert of ts_params (a row whose values are the same is
 * left alone), and the delete of the places from $2 on. */
#define TS_UPSERT_SQL                                                                                                  \
    "INSERT INTO %s AS r (bucket, pos, \"time\", meta, doc) SELECT $1, u.p, u.tm, $2::jsonb, u.d "                     \
    "FROM unnest($3::int4[], $4::timestamptz[], $5::jsonb[]) AS u(p, tm, d) "                                          \
    "ON CONFLICT (bucket, pos) DO UPDATE SET \"time\" = excluded.\"time\", meta = excluded.meta, "                     \
    "doc = excluded.doc WHERE (r.\"time\", r.meta, r.doc) IS DISTINCT FROM "                                           \
    "(excluded.\"time\", excluded.meta, excluded.doc)"
#define TS_COPY_MAX (8u * 1024 * 1024) /* storage kept for held rows between groups */
#define TS_CUT_SQL  "DELETE FROM %s WHERE bucket = $1 AND pos >= $2::int4"
#define TS_STORE_ONE_SQL                                                                                               \
    "INSERT INTO oplog2pg.timeseries_bucket (schema_name, table_name, bucket, doc) VALUES ($1, $2, $3, $4) "           \
    "ON CONFLICT (schema_name, table_name, bucket) DO UPDATE SET doc = excluded.doc"

#define TS_STREAM_AT (256u * 1024) /* bytes of new rows held before their COPY opens and takes them as they come */

/* The new rows of a group go into one binary COPY per table, which opens once TS_STREAM_AT bytes are held and then
 * takes the rows as the ops make them, so that PostgreSQL stores them while the next buckets are decoded (s->ts_copy:
 * the table whose COPY is open). It ends before any other statement is sent (tseries_copy_end: sink_settle, and every
 * send of this file), and at the commit; what is held for a table without an open COPY then goes by a COPY of its
 * own (copy_flush). A row already there (a replay past the keep point: rows written from elsewhere) fails the group,
 * which is applied again with upserts up to there. */
static const char copy_header[] = "PGCOPY\n\377\r\n\0\0\0\0\0\0\0\0\0"; /* signature, flags 0, extension 0 */

static sink_status copy_failed_at(sink *s, const table *t, const op_pos *last, const pgconn_error *e)
{
    char where[32];
    sink_fmt_pos(last, where, sizeof where);
    if (strcmp(e->sqlstate, "23505") == 0) {
        sink_keep_rows_until(s, last);
        s->stats.rewinds++;
        sink_set_err(s, APPLY_REWIND, e->sqlstate,
                     "new measurements of %s.%s (oplog entries up to %s) met rows already there", t->db, t->coll,
                     where);
        return s->failed;
    }
    sink_set_err_at(s, last, e->status != APPLY_OK ? e->status : APPLY_RETRY, e->sqlstate,
                    "COPY of measurements into %s.%s (oplog entries up to %s) failed: [%s] %s", t->db, t->coll, where,
                    e->sqlstate[0] ? e->sqlstate : "?", e->message);
    return s->failed;
}

/* The rows t holds, into its open COPY. */
static bool copy_put_held(sink *s, table *t, pgconn_error *e)
{
    sink_tseries *ts = t->ts;
    if (ts->copy.len > 0 && !pgconn_copy_put(s->c, ts->copy.data, ts->copy.len, e))
        return false;
    s->stats.ts_rows += ts->copy_rows;
    s->stats.bytes += ts->copy.len;
    strbuf_reset(&ts->copy, TS_COPY_MAX);
    ts->copy_rows = 0;
    return true;
}

/* Opens t's COPY (the pipeline drained first) and sends what t holds. */
static sink_status copy_open(sink *s, table *t)
{
    char *sql = NULL;
    if (t->ts->typed != NULL
            ? (sql = strdup(t->ts->typed->copy_sql)) == NULL
            : asprintf(&sql, "COPY %s (bucket, pos, \"time\", meta, doc) FROM STDIN (FORMAT binary)", t->qname) < 0) {
        sink_set_err(s, APPLY_NOMEM, NULL, "out of memory writing the rows of %s.%s", t->db, t->coll);
        return s->failed;
    }
    if (pipe_copy_begin(s) != APPLY_OK) {
        free(sql);
        return s->failed;
    }
    pgconn_error e;
    op_pos last = t->ts->copy_last;
    bool ok = pgconn_copy_start(s->c, sql, &e) && pgconn_copy_put(s->c, copy_header, sizeof copy_header - 1, &e) &&
              copy_put_held(s, t, &e);
    free(sql);
    if (!ok) {
        s->ts_copy = NULL;
        if (pipe_copy_done(s) != APPLY_OK)
            return s->failed;
        return copy_failed_at(s, t, &last, &e);
    }
    s->ts_copy = t;
    return APPLY_OK;
}

sink_status tseries_copy_end(sink *s)
{
    table *t = s->ts_copy;
    if (t == NULL)
        return APPLY_OK;
    static const char trailer[2] = {'\377', '\377'};
    pgconn_error e;
    op_pos last = t->ts->copy_last;
    bool ok =
        copy_put_held(s, t, &e) && pgconn_copy_put(s->c, trailer, sizeof trailer, &e) && pgconn_copy_end(s->c, &e);
    s->ts_copy = NULL;
    if (pipe_copy_done(s) != APPLY_OK)
        return s->failed;
    return ok ? APPLY_OK : copy_failed_at(s, t, &last, &e);
}

/* What t holds, written: into its open COPY, or by a COPY of its own; before any other statement on t. */
static sink_status copy_flush(sink *s, table *t)
{
    if (t->ts == NULL || (t->ts->copy_rows == 0 && s->ts_copy != t))
        return APPLY_OK;
    if (s->ts_copy != t && (tseries_copy_end(s) != APPLY_OK || copy_open(s, t) != APPLY_OK))
        return s->failed;
    return tseries_copy_end(s);
}

/* After an op added rows to t's held ones: into t's open COPY once enough are held, or a COPY opened for them. */
static sink_status copy_more(sink *s, table *t)
{
    if (t->ts->copy.len < TS_STREAM_AT)
        return APPLY_OK;
    if (s->ts_copy == t) {
        pgconn_error e;
        op_pos last = t->ts->copy_last;
        if (!copy_put_held(s, t, &e)) {
            s->ts_copy = NULL;
            PQputCopyEnd(s->conn, "oplog2pg: sending failed"); /* the group fails; the session ends */
            return copy_failed_at(s, t, &last, &e);
        }
        return APPLY_OK;
    }
    if (tseries_copy_end(s) != APPLY_OK)
        return s->failed;
    return copy_open(s, t);
}

void tseries_discard(table *t)
{
    if (t->ts == NULL)
        return;
    strbuf_reset(&t->ts->copy, TS_COPY_MAX);
    t->ts->copy_rows = 0;
}

/* Sends one statement of rows (TS_UPSERT_SQL) with p's parameters. */
static sink_status send_rows(sink *s, table *t, const op *o, const char *key, const char *fmt, pending_kind kind,
                             const ts_params *p)
{
    char *sql = NULL;
    if (asprintf(&sql, fmt, t->qname) < 0) {
        sink_set_err(s, APPLY_NOMEM, NULL, "out of memory writing the rows of a bucket of %s.%s", t->db, t->coll);
        return s->failed;
    }
    const char *values[5] = {key, p->has_meta ? p->meta.data : NULL, p->pos.data, p->times.data, p->docs.data};
    const int lengths[5] = {TS_KEY_LEN, p->has_meta ? (int)p->meta.len : 0, (int)p->pos.len, (int)p->times.len,
                            (int)p->docs.len};
    const int formats[5] = {1, 1, 1, 1, 1};
    if (!pipe_push_pending(s, kind, t, &o->pos)) {
        free(sql);
        return s->failed;
    }
    bool ok = PQsendQueryParams(s->conn, sql, 5, NULL, values, lengths, formats, 0) == 1;
    free(sql);
    sink_status st = pipe_after_send(s, ok, p->pos.len + p->times.len + p->docs.len + p->meta.len + 256);
    if (st == APPLY_OK) {
        s->stats.ts_rows += p->n;
        s->stats.bytes += p->docs.len;
    }
    return st;
}

/* The rows of places from..to-1 of nw for a typed map: those that differ from old's, each by the prepared upsert of one
 * row (places already written: a re-pack, a replay), or (held) all of them held for the group's COPY (new places). */
static sink_status typed_rows(sink *s, table *t, const op *o, const char *key, const bucket_rows *old,
                              const bucket_rows *nw, size_t from, size_t to, bool held)
{
    sink_tseries_typed *ty = t->ts->typed;
    char why[600];
    ts_build b = TS_BUILD_OK;
    if (held) {
        size_t mark = t->ts->copy.len;
        for (size_t i = from; i < to && b == TS_BUILD_OK; i++)
            b = typed_row(ty, key, nw, i, &t->ts->copy, why, sizeof why);
        if (b == TS_BUILD_OK) {
            t->ts->copy_rows += to - from;
            t->ts->copy_last = o->pos;
            return copy_more(s, t);
        }
        t->ts->copy.len = mark; /* none of this op's rows stay held */
    } else {
        strbuf row = STRBUF_INIT;
        size_t n = 3 + ty->nfields;
        const char **values = calloc(n, sizeof *values);
        int *lengths = calloc(n, sizeof *lengths), *formats = calloc(n, sizeof *formats);
        char name[32];
        snprintf(name, sizeof name, "TSU%u", t->id);
        bool flushed = false;
        sink_status st = APPLY_OK;
        if (values == NULL || lengths == NULL || formats == NULL)
            b = TS_BUILD_NOMEM;
        for (size_t i = from; i < to && b == TS_BUILD_OK && st == APPLY_OK; i++) {
            if (same_row(old, nw, i))
                continue; /* the same measurement in the same place: nothing to write */
            if (!flushed && (st = copy_flush(s, t)) != APPLY_OK) /* after the rows held for the COPY */
                break;
            flushed = true;
            strbuf_reset(&row, 1u << 20);
            if ((b = typed_row(ty, key, nw, i, &row, why, sizeof why)) != TS_BUILD_OK)
                break;
            map_tuple_iter ti;
            map_field v;
            map_tuple_iter_init(&ti, (const uint8_t *)row.data);
            for (size_t f = 0; f < n && map_tuple_next(&ti, &v); f++) {
                values[f] = (const char *)v.value;
                lengths[f] = v.len;
                formats[f] = 1;
            }
            if (!pipe_push_pending(s, P_INSERT, t, &o->pos)) {
                st = s->failed;
                break;
            }
            bool ok = PQsendQueryPrepared(s->conn, name, (int)n, values, lengths, formats, 0) == 1;
            if ((st = pipe_after_send(s, ok, row.len + 64)) == APPLY_OK) {
                s->stats.ts_rows++;
                s->stats.bytes += row.len;
            }
        }
        strbuf_free(&row);
        free(values);
        free(lengths);
        free(formats);
        if (st != APPLY_OK)
            return st;
    }
    switch (b) {
    case TS_BUILD_OK:
        return APPLY_OK;
    case TS_BUILD_REFUSED:
        return refuse(s, t, o, "%s", why);
    case TS_BUILD_NOMEM:
        break;
    case TS_BUILD_BUG:
        sink_set_err(s, APPLY_UNRECORDABLE, NULL,
                     "the map of time-series collection %s.%s projected a measurement into other rows than its "
                     "table's one: a bug",
                     t->db, t->coll);
        return s->failed;
    }
    sink_set_err(s, APPLY_NOMEM, NULL, "out of memory writing the rows of a bucket of %s.%s", t->db, t->coll);
    return s->failed;
}

/* The rows that differ between old and new (old may be NULL: unknown, so every row of new is written); the places
 * past new's end deleted (when old had more, or is unknown). Places new adds past old's end, known to be free (old
 * known, and past the keep point), are held for one binary COPY of the group's new places (copy_flush); everything
 * else goes pipelined, after the rows held. */
static sink_status write_rows(sink *s, table *t, const op *o, const char *key, const uint8_t *bucket, uint32_t len,
                              const bucket_rows *old, const bucket_rows *nw)
{
    char why[400];
    sink_status st = APPLY_OK;
    bool plain = old != NULL && !s->cfg.per_op && op_pos_cmp(&o->pos, &s->keep_until) > 0 && old->n < nw->n;
    size_t fresh = plain ? old->n : nw->n;
    /* the leading places bucket_unpack_next found unchanged from old (the rows it went on from) need no look */
    size_t same = old != NULL && nw->same <= old->n ? nw->same : 0;
    for (int part = 0; part < 2 && st == APPLY_OK; part++) {
        size_t from = part == 0 ? (same < fresh ? same : fresh) : fresh, to = part == 0 ? fresh : nw->n;
        if (from >= to)
            continue;
        if (t->ts->typed != NULL) {
            st = typed_rows(s, t, o, key, part == 0 ? old : NULL, nw, from, to, part == 1);
            continue;
        }
        ts_params p;
        strbuf *tuples = part == 1 ? &t->ts->copy : NULL;
        size_t held = t->ts->copy.len;
        switch (build_rows(t->ts->meta_field, bucket, len, part == 0 ? old : NULL, nw, from, to, &p, tuples, key, why,
                           sizeof why)) {
        case TS_BUILD_OK:
            if (p.n > 0 && part == 1) {
                t->ts->copy_rows += p.n;
                t->ts->copy_last = o->pos;
                st = copy_more(s, t);
            } else if (p.n > 0) {
                /* a change of places already written: after the rows held for the COPY */
                st = copy_flush(s, t);
                if (st == APPLY_OK)
                    st = send_rows(s, t, o, key, TS_UPSERT_SQL, P_INSERT, &p);
            }
            break;
        case TS_BUILD_REFUSED:
            if (tuples != NULL)
                t->ts->copy.len = held; /* none of this op's rows stay held */
            st = refuse(s, t, o, "%s", why);
            break;
        case TS_BUILD_NOMEM:
            sink_set_err(s, APPLY_NOMEM, NULL, "out of memory writing the rows of a bucket of %s.%s", t->db, t->coll);
            st = s->failed;
            break;
        case TS_BUILD_BUG: /* (only typed_row says that) */
            sink_set_err(s, APPLY_UNRECORDABLE, NULL, "the rows of a bucket of %s.%s: a bug", t->db, t->coll);
            st = s->failed;
            break;
        }
        params_free(&p);
    }
    if (st != APPLY_OK || (old != NULL && old->n <= nw->n))
        return st;
    if (copy_flush(s, t) != APPLY_OK)
        return s->failed;
    char *sql = NULL, cut[24];
    if (asprintf(&sql, TS_CUT_SQL, t->qname) < 0) {
        sink_set_err(s, APPLY_NOMEM, NULL, "out of memory writing the rows of a bucket of %s.%s", t->db, t->coll);
        return s->failed;
    }
    snprintf(cut, sizeof cut, "%zu", nw->n);
    const char *values[2] = {key, cut};
    if (!pipe_push_pending(s, P_DELETE, t, &o->pos)) {
        free(sql);
        return s->failed;
    }
    bool ok = PQsendQueryParams(s->conn, sql, 2, NULL, values, NULL, NULL, 0) == 1;
    free(sql);
    return pipe_after_send(s, ok, 128);
}

/* The key of the op's bucket: its _id, an ObjectId, in hex. */
static bool bucket_key(const op *o, char key[TS_KEY_LEN + 1])
{
    if (o->id.value_type != BSON_TYPE_OID)
        return false;
    bson_oid_to_string(&o->id.value.v_oid, key);
    return true;
}

static sink_status apply_op(sink *s, table *t, const op *o);

sink_status tseries_apply(sink *s, table *t, const op *o)
{
    sink_status st = apply_op(s, t, o);
    if (st == APPLY_DATA) {
        /* A bucket change set aside (or about to be: the group goes careful): the bucket's document is unknown from
         * now on, so that its next change is refused rather than applied to a document without this one (a binary
         * diff of a column that lacks what was set aside could decode to values of the wrong places). */
        char key[TS_KEY_LEN + 1];
        ts_state *b = bucket_key(o, key) ? state_put(t->ts, key) : NULL;
        if (b != NULL) {
            state_set(t->ts, b, NULL, 0);
            s->ts_undo_table = t; /* a dead letter forgets the table: tseries_undo deletes the stored document */
            memcpy(s->ts_undo_key, key, sizeof key);
        }
    }
    return st;
}

static sink_status apply_op(sink *s, table *t, const op *o)
{
    sink_tseries *ts = t->ts;
    char key[TS_KEY_LEN + 1];
    char why[300];
    if (!bucket_key(o, key))
        return refuse(s, t, o, "its _id is not an ObjectId, as a bucket's always is");
    ts_state *st = state_put(ts, key);
    if (st == NULL)
        goto oom;
    /* A slot made just now knows nothing yet: an update reads the stored document (a diff needs it; a replacement
     * then writes only what it changes), an insert does without (a new bucket has none). */
    /* the bucket's kept state is likely cold (other buckets came between): its misses start now, and overlap */
    if (st->unpacked)
        bucket_rows_prefetch(&st->rows);
    bool known = st->doc != NULL || st->dirty;
    if (!known && o->kind == OP_UPDATE) {
        if (!state_load(s, t, st, &o->pos))
            return s->failed;
        known = st->doc != NULL;
    }
    /* the bucket after the op */
    uint8_t *after = NULL;
    uint32_t after_len = 0;
    bool after_valid = false;
    switch (o->kind) {
    case OP_INSERT:
    case OP_UPDATE: {
        if (o->doc == NULL)
            return refuse(s, t, o, "it carries no document");
        if (o->kind == OP_INSERT || o->form == OP_FORM_REPLACE) {
            after = malloc(o->doc_len);
            if (after == NULL)
                goto oom;
            memcpy(after, o->doc, o->doc_len);
            after_len = o->doc_len;
            break;
        }
        if (o->form != OP_FORM_DIFF)
            return refuse(s, t, o, "a %s update, which no server writes for a bucket", op_form_name(o->form));
        /* Up to the end of an initial copy, the oplog replays changes the copy may already hold:
         * a bucket the copy never saw was deleted before it read on (its delete comes later in this replay), and a
         * change is applied as the server re-applies one (an insert of a field already there replaces it) */
        bool replay = op_pos_cmp(&o->pos, &s->copy_end) <= 0; /* not the keep point: a rewind moves that */
        if (st->doc == NULL && replay)
            return APPLY_OK;
        if (st->doc == NULL)
            return refuse(s, t, o,
                          "no document of bucket %s is known to apply this change to (its insert was not replicated, "
                          "or an earlier change of it was set aside)",
                          key);
        bson_iter_t it, d;
        if (!bson_iter_init_from_data(&it, o->doc, o->doc_len) || !bson_iter_find(&it, "diff") ||
            !BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &d))
            return refuse(s, t, o, "a $v:2 update without its diff");
        uint32_t dlen;
        const uint8_t *ddata;
        bson_iter_document(&it, &dlen, &ddata);
        /* st->doc is valid BSON: it passed bucket_unpack_next's checks, or state_load's */
        bson_t out;
        if (!bucket_apply_diff_ex(st->doc, st->len, ddata, dlen,
                                  (replay ? BUCKET_DIFF_IDEMPOTENT : BUCKET_DIFF_STRICT) | BUCKET_DIFF_DOC_VALID, &out,
                                  why, sizeof why)) {
            bson_destroy(&out);
            return refuse(s, t, o, "its diff does not apply to bucket %s: %s", key, why);
        }
        /* libbson made it from valid parts: valid */
        after = bson_destroy_with_steal(&out, true, &after_len);
        if (after == NULL)
            goto oom;
        after_valid = true;
        break;
    }
    case OP_DELETE:
        break;
    default:
        return refuse(s, t, o, "a %s, which no server writes for a bucket", op_kind_name(o->kind));
    }

    bucket_spec spec = {.time_field = ts->time_field, .meta_field = ts->meta_field, .docs_valid = true};
    bucket_rows old = {0}, nw = {0};
    sink_status res = APPLY_OK;
    /* the measurements before the op (kept from the op before, or unpacked once), then those after it, decoded from
     * where the columns' bytes stop being the same (bucket_unpack_next); a document from the oplog entry itself is
     * checked there, once, before it becomes the bucket's */
    if (after != NULL && st->doc != NULL && !st->unpacked &&
        bucket_unpack_next(st->doc, st->len, &spec, NULL, 0, NULL, &old, why, sizeof why))
        state_keep_rows(ts, st, &old);
    spec.docs_valid = after_valid;
    if (after != NULL && !bucket_unpack_next(after, after_len, &spec, st->doc, st->len, st->unpacked ? &st->rows : NULL,
                                             &nw, why, sizeof why)) {
        if (after_valid && op_pos_cmp(&o->pos, &s->copy_end) <= 0) {
            /* Replaying up to the copy's end, a diff applied to the copy's newer document may leave it between two
             * shapes, as the server's own re-application does (a field of another type becomes null until a later
             * entry rewrites it; by the copy's end the document is MongoDB's again). It is kept as the server keeps
             * it, nothing of it is refused, its rows stay as they are, and the bucket's next change, which makes it
             * whole, writes them all. */
            state_set(ts, st, after, after_len);
            s->stats.ts_bucket_ops++;
            return APPLY_OK;
        }
        free(after);
        return refuse(s, t, o, "bucket %s cannot be read: %s", key, why);
    }
    if (after == NULL) {
        /* a deleted bucket: all its rows go (after those held for the COPY) */
        if (copy_flush(s, t) != APPLY_OK)
            return s->failed;
        char *sql = NULL;
        if (asprintf(&sql, "DELETE FROM %s WHERE bucket = $1", t->qname) < 0)
            goto oom;
        const char *values[1] = {key};
        if (!pipe_push_pending(s, P_DELETE, t, &o->pos)) {
            free(sql);
            return s->failed;
        }
        bool ok = PQsendQueryParams(s->conn, sql, 1, NULL, values, NULL, NULL, 0) == 1;
        free(sql);
        res = pipe_after_send(s, ok, 128);
    } else {
        /* the measurements before the op: st->rows when known (else: rewrite them all) */
        /* A bucket inserted past the keep point is new (an ObjectId MongoDB made for it), so it has no rows yet: its
         * places go as new ones (a replay that meets them all the same rewinds, copy_flush). */
        bucket_rows none = {0};
        const bucket_rows *before = st->unpacked                                                      ? &st->rows
                                    : o->kind == OP_INSERT && op_pos_cmp(&o->pos, &s->keep_until) > 0 ? &none
                                                                                                      : NULL;
        res = write_rows(s, t, o, key, after, after_len, before, &nw);
    }
    if (res != APPLY_OK) {
        bucket_rows_clear(&nw);
        free(after);
        return res;
    }
    /* what the op changed, for an undo if it is set aside (careful sessions: sink_dead_letter) */
    s->ts_undo_table = t;
    memcpy(s->ts_undo_key, key, sizeof key);
    s->stats.ts_bucket_ops++;
    state_set(ts, st, after, after_len);
    if (after != NULL)
        state_keep_rows(ts, st, &nw);
    bucket_rows_clear(&nw);
    return APPLY_OK;

oom:
    sink_set_err(s, APPLY_NOMEM, NULL, "out of memory applying a bucket of %s.%s", t->db, t->coll);
    return s->failed;
}

sink_status tseries_undo(sink *s)
{
    table *t = s->ts_undo_table;
    s->ts_undo_table = NULL;
    if (t == NULL || t->ts == NULL)
        return APPLY_OK;
    ts_state *st = state_find(t->ts, s->ts_undo_key);
    if (st != NULL)
        state_set(t->ts, st, NULL, 0); /* unknown from now on: a later diff of it is refused, never guessed */
    /* and in PostgreSQL, in the dead letter's transaction: the table is forgotten after a dead letter (and its held
     * documents with it), and the next session reads the stored one */
    const char *values[3] = {t->name.schema, t->name.table, s->ts_undo_key};
    if (!pipe_push_pending(s, P_CATALOG, t, NULL))
        return s->failed;
    bool ok = PQsendQueryParams(s->conn,
                                "DELETE FROM oplog2pg.timeseries_bucket WHERE schema_name = $1 AND table_name = $2 "
                                "AND bucket = $3",
                                3, NULL, values, NULL, NULL, 0) == 1;
    return pipe_after_send(s, ok, 128);
}

/* One table's changed documents written (and the rows of those that went deleted), in the open group. */
static sink_status flush_table(sink *s, table *t, const op_pos *pos)
{
    sink_tseries *ts = t->ts;
    strbuf keys = STRBUF_INIT, docs = STRBUF_INIT, gone = STRBUF_INIT;
    size_t nput = 0, ngone = 0;
    for (size_t i = 0; i < ts->cap; i++)
        if (ts->slots[i].key[0] != '\0' && ts->slots[i].dirty)
            (ts->slots[i].doc != NULL ? nput++ : ngone++);
    sink_status st = APPLY_OK;
    if (nput > 0) {
        array_begin(&keys, OID_TEXT, nput);
        array_begin(&docs, OID_BYTEA, nput);
    }
    if (ngone > 0)
        array_begin(&gone, OID_TEXT, ngone);
    for (size_t i = 0; i < ts->cap; i++) {
        ts_state *x = &ts->slots[i];
        if (x->key[0] == '\0' || !x->dirty)
            continue;
        strbuf *k = x->doc != NULL ? &keys : &gone;
        put_u32(k, TS_KEY_LEN);
        strbuf_append(k, x->key, TS_KEY_LEN);
        if (x->doc != NULL) {
            put_u32(&docs, x->len);
            strbuf_append(&docs, x->doc, x->len);
        }
    }
    if (keys.failed || docs.failed || gone.failed) {
        sink_set_err(s, APPLY_NOMEM, NULL, "out of memory writing the buckets of %s.%s", t->db, t->coll);
        st = s->failed;
        goto out;
    }
    const int formats[4] = {0, 0, 1, 1};
    if (nput > 0) {
        const char *values[4] = {t->name.schema, t->name.table, keys.data, docs.data};
        const int lengths[4] = {0, 0, (int)keys.len, (int)docs.len};
        if (!pipe_push_pending(s, P_CATALOG, t, pos)) {
            st = s->failed;
            goto out;
        }
        bool ok = PQsendQueryParams(s->conn,
                                    "INSERT INTO oplog2pg.timeseries_bucket (schema_name, table_name, bucket, doc) "
                                    "SELECT $1, $2, u.b, u.d FROM unnest($3::text[], $4::bytea[]) AS u(b, d) "
                                    "ON CONFLICT (schema_name, table_name, bucket) DO UPDATE SET doc = excluded.doc",
                                    4, NULL, values, lengths, formats, 0) == 1;
        if ((st = pipe_after_send(s, ok, keys.len + docs.len + 128)) != APPLY_OK)
            goto out;
    }
    if (ngone > 0) {
        const char *values[3] = {t->name.schema, t->name.table, gone.data};
        const int lengths[3] = {0, 0, (int)gone.len};
        if (!pipe_push_pending(s, P_CATALOG, t, pos)) {
            st = s->failed;
            goto out;
        }
        bool ok = PQsendQueryParams(s->conn,
                                    "DELETE FROM oplog2pg.timeseries_bucket WHERE schema_name = $1 AND table_name = $2 "
                                    "AND bucket = ANY ($3::text[])",
                                    3, NULL, values, lengths, formats, 0) == 1;
        st = pipe_after_send(s, ok, gone.len + 128);
    }
out:
    strbuf_free(&keys);
    strbuf_free(&docs);
    strbuf_free(&gone);
    return st;
}

sink_status tseries_flush(sink *s, const op_pos *pos)
{
    s->ts_undo_table = NULL;
    for (size_t i = 0; i < s->ntables; i++) {
        table *t = s->tables[i];
        if (t->kind == &sink_tseries_kind && t->db[0] != '\0' && copy_flush(s, t) != APPLY_OK)
            return s->failed;
    }
    for (size_t i = 0; i < s->ntables; i++) {
        table *t = s->tables[i];
        if (t->kind != &sink_tseries_kind || t->ts == NULL || !t->ts->any_dirty || t->db[0] == '\0')
            continue;
        if (flush_table(s, t, pos) != APPLY_OK)
            return s->failed;
    }
    return APPLY_OK;
}

void tseries_committed(sink *s)
{
    for (size_t i = 0; i < s->ntables; i++) {
        table *t = s->tables[i];
        if (t->kind != &sink_tseries_kind || t->ts == NULL || !t->ts->any_dirty)
            continue;
        for (size_t j = 0; j < t->ts->cap; j++)
            t->ts->slots[j].dirty = false;
        t->ts->any_dirty = false;
        state_trim(t->ts);
    }
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* the initial copy's buckets */

/* The places past a bucket's end deleted, and its document stored. */
static sink_tseries_copy_status copy_cut_and_store(pgconn *c, const sink_tseries_copy_target *to, const char *key,
                                                   const uint8_t *bucket, uint32_t len, size_t n)
{
    char *cut = NULL, places[24];
    if (asprintf(&cut, TS_CUT_SQL, to->qtable) < 0)
        return SINK_TS_COPY_NOMEM;
    snprintf(places, sizeof places, "%zu", n);
    const char *cv[2] = {key, places};
    bool ok = pgconn_exec_params(c, cut, 2, cv, NULL, NULL, 0, NULL, true, &c->last);
    free(cut);
    if (!ok)
        return SINK_TS_COPY_PG;
    const char *sv[4] = {to->schema, to->table, key, (const char *)bucket};
    const int sl[4] = {0, 0, 0, (int)len};
    const int sf[4] = {0, 0, 0, 1};
    return pgconn_exec_params(c, TS_STORE_ONE_SQL, 4, sv, sl, sf, 0, NULL, false, &c->last) ? SINK_TS_COPY_OK
                                                                                            : SINK_TS_COPY_PG;
}

/* A bucket's rows for a typed map: one binary COPY, which a bucket read again (its rows there already) turns into
 * upserts of one row each, behind a savepoint of their own. */
static sink_tseries_copy_status copy_typed(pgconn *c, const sink_tseries_copy_target *to, const char *key,
                                           const uint8_t *bucket, uint32_t len, const bucket_rows *nw, char *why,
                                           size_t whylen)
{
    sink_tseries_typed *ty = to->typed;
    strbuf rows = STRBUF_INIT;
    char e[600];
    ts_build b = TS_BUILD_OK;
    strbuf_append(&rows, copy_header, sizeof copy_header - 1);
    size_t *at = calloc(nw->n + 1, sizeof *at); /* where each row's tuple begins */
    for (size_t i = 0; i < nw->n && b == TS_BUILD_OK && at != NULL; i++) {
        at[i] = rows.len;
        b = typed_row(ty, key, nw, i, &rows, e, sizeof e);
    }
    strbuf_append(&rows, "\377\377", 2);
    sink_tseries_copy_status st = SINK_TS_COPY_OK;
    if (b == TS_BUILD_BUG) {
        snprintf(why, whylen, "bucket %s: its map projected a measurement into other rows than its table's one: a bug",
                 key);
        st = SINK_TS_COPY_BUG;
        goto out;
    }
    if (at == NULL || rows.failed || b == TS_BUILD_NOMEM) {
        st = SINK_TS_COPY_NOMEM;
        goto out;
    }
    if (b == TS_BUILD_REFUSED) {
        snprintf(why, whylen, "bucket %s: %s", key, e);
        st = SINK_TS_COPY_REFUSED;
        goto out;
    }
    if (!pgconn_exec(c, "SAVEPOINT oplog2pg_rows", NULL, false, &c->last)) {
        st = SINK_TS_COPY_PG;
        goto out;
    }
    bool copied = pgconn_copy_start(c, ty->copy_sql, &c->last) && pgconn_copy_put(c, rows.data, rows.len, &c->last) &&
                  pgconn_copy_end(c, &c->last);
    if (!copied && strcmp(c->last.sqlstate, "23505") != 0) {
        st = SINK_TS_COPY_PG;
        goto out;
    }
    if (!copied) {
        /* rows already there (a batch read again): each place upserted, a row holding the same values left alone */
        if (!pgconn_exec(c, "ROLLBACK TO SAVEPOINT oplog2pg_rows", NULL, false, &c->last)) {
            st = SINK_TS_COPY_PG;
            goto out;
        }
        size_t n = 3 + ty->nfields;
        const char **values = calloc(n, sizeof *values);
        int *lengths = calloc(n, sizeof *lengths), *formats = calloc(n, sizeof *formats);
        if (values == NULL || lengths == NULL || formats == NULL)
            st = SINK_TS_COPY_NOMEM;
        for (size_t i = 0; i < nw->n && st == SINK_TS_COPY_OK; i++) {
            map_tuple_iter ti;
            map_field v;
            map_tuple_iter_init(&ti, (const uint8_t *)rows.data + at[i]);
            for (size_t f = 0; f < n && map_tuple_next(&ti, &v); f++) {
                values[f] = (const char *)v.value;
                lengths[f] = v.len;
                formats[f] = 1;
            }
            if (!pgconn_exec_params(c, ty->upsert_sql, (int)n, values, lengths, formats, 0, NULL, true, &c->last))
                st = SINK_TS_COPY_PG;
        }
        free(values);
        free(lengths);
        free(formats);
        if (st != SINK_TS_COPY_OK)
            goto out;
    }
    if (!pgconn_exec(c, "RELEASE SAVEPOINT oplog2pg_rows", NULL, false, &c->last)) {
        st = SINK_TS_COPY_PG;
        goto out;
    }
    st = copy_cut_and_store(c, to, key, bucket, len, nw->n);
out:
    free(at);
    strbuf_free(&rows);
    return st;
}

sink_tseries_copy_status sink_tseries_copy_bucket(pgconn *c, const sink_tseries_copy_target *to, const uint8_t *bucket,
                                                  uint32_t len, char *why, size_t whylen)
{
    bson_iter_t it;
    char key[TS_KEY_LEN + 1];
    if (!bson_iter_init_from_data(&it, bucket, len) || !bson_iter_find(&it, "_id") || !BSON_ITER_HOLDS_OID(&it)) {
        snprintf(why, whylen, "a bucket whose _id is not an ObjectId");
        return SINK_TS_COPY_REFUSED;
    }
    bson_oid_to_string(bson_iter_oid(&it), key);
    bucket_spec spec = {.time_field = to->time_field, .meta_field = to->meta_field};
    bucket_rows nw = {0};
    char e[600];
    if (!bucket_unpack(bucket, len, &spec, &nw, e, sizeof e)) {
        snprintf(why, whylen, "bucket %s cannot be read: %s", key, e);
        return SINK_TS_COPY_REFUSED;
    }
    if (to->typed != NULL) {
        sink_tseries_copy_status ts = copy_typed(c, to, key, bucket, len, &nw, why, whylen);
        bucket_rows_clear(&nw);
        return ts;
    }
    ts_params p;
    sink_tseries_copy_status st = SINK_TS_COPY_OK;
    char *upsert = NULL;
    switch (build_rows(to->meta_field, bucket, len, NULL, &nw, 0, nw.n, &p, NULL, NULL, e, sizeof e)) {
    case TS_BUILD_OK:
        break;
    case TS_BUILD_REFUSED:
        snprintf(why, whylen, "bucket %s: %s", key, e);
        st = SINK_TS_COPY_REFUSED;
        goto out;
    case TS_BUILD_NOMEM:
        st = SINK_TS_COPY_NOMEM;
        goto out;
    case TS_BUILD_BUG: /* (only typed_row says that) */
        snprintf(why, whylen, "bucket %s: its rows could not be built: a bug", key);
        st = SINK_TS_COPY_BUG;
        goto out;
    }
    if (asprintf(&upsert, TS_UPSERT_SQL, to->qtable) < 0) {
        st = SINK_TS_COPY_NOMEM;
        goto out;
    }
    if (p.n > 0) {
        const char *values[5] = {key, p.has_meta ? p.meta.data : NULL, p.pos.data, p.times.data, p.docs.data};
        const int lengths[5] = {TS_KEY_LEN, p.has_meta ? (int)p.meta.len : 0, (int)p.pos.len, (int)p.times.len,
                                (int)p.docs.len};
        const int formats[5] = {1, 1, 1, 1, 1};
        if (!pgconn_exec_params(c, upsert, 5, values, lengths, formats, 0, NULL, true, &c->last)) {
            st = SINK_TS_COPY_PG;
            goto out;
        }
    }
    st = copy_cut_and_store(c, to, key, bucket, len, nw.n);
out:
    free(upsert);
    params_free(&p);
    bucket_rows_clear(&nw);
    return st;
}

/*
 * reconcile.c — the delete reconciliation's PostgreSQL side (sink/reconcile.h).
 *
 * A server whose change stream sends no delete events (Azure Cosmos DB for MongoDB, RU) leaves in PostgreSQL every
 * row whose document was deleted. At an interval the daemon commits what it holds, stops applying, and calls
 * sink_reconcile_deletes; per table, in one transaction: every _id of the collection goes from MongoDB into a
 * temporary table by COPY, in the key form of the table's _id column (map/ejson.h: equal texts exactly when the _id
 * index finds the _ids equal), and
 *   DELETE FROM t WHERE NOT EXISTS (SELECT 1 FROM tmp WHERE tmp._id = t._id)
 * removes the rows MongoDB no longer holds; then COMMIT, and applying resumes.
 *
 * WHY IT NEVER DELETES A ROW WHOSE DOCUMENT EXISTS
 * Let P be the moment applying paused: every row in the table came from an event the daemon received before P (or
 * from the initial copy, older still), and nothing is written to the table from P until the COMMIT here. The scan
 * starts after P and walks the _id index (source/idscan.h): a document that exists from the scan's start to its end
 * is returned, so its row is kept. A row is deleted only when its _id was absent from MongoDB at some moment after
 * P, which leaves two cases:
 *   - the document is still absent: its row must go, and no delete event will ever say so. Correct.
 *   - it was inserted again after that moment (so after P): that insert's event was not received before P, so it
 *     has not been applied; it comes after the pause and writes the row back (each Cosmos event is an upsert of the
 *     whole document). The row is absent only in between, as it would be in MongoDB.
 * A row written after P cannot be deleted, as none is written until the COMMIT. A document inserted after P is in
 * the scan and has no row yet: the anti-join only deletes, so it is not touched, and its own event brings it. So
 * the reconciliation deletes no row that the events still to be applied would not write again.
 * What it cannot do: a document deleted after P but whose event (received before P, fullDocument looked up while
 * it existed) is still queued comes back when the queue is applied, and goes at the next reconciliation; a delete
 * shows up to one interval late, such a one up to two.
 *
 * Only tables this service made (its catalog rows, not adopted) in the jsonb shape, of collections the filter
 * includes, are touched. A failure of the scan rolls back its table's transaction (nothing deleted) and ends the
 * pass; the daemon tries again at the next interval. A failure of PostgreSQL is the sink's, as in a flush group:
 * the session ends, the transaction is rolled back, and the next pass tries again. Nothing here is a dead letter.
 */
#include "sink/reconcile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map/ejson.h"
#include "pg_internal.h"
#include "util/log.h"
#include "util/strbuf.h"

#define COPY_CHUNK (1024u * 1024) /* bytes of ids sent to the COPY at once */

typedef struct {
    sink *s;
    const char *qname;
    strbuf rows, key;
    uint64_t n;
    bool failed; /* the sink's error says why */
} feeder;

static bool send_rows(feeder *f)
{
    if (f->rows.len == 0)
        return true;
    pgconn_error e;
    if (!pgconn_copy_put(f->s->c, f->rows.data, f->rows.len, &e)) {
        sink_set_err(f->s, e.status, e.sqlstate, "reconciling the deletes of %s: %s", f->qname, e.message);
        f->failed = true;
        return false;
    }
    strbuf_reset(&f->rows, COPY_CHUNK * 2);
    return true;
}

/* One _id: its key text as a line of COPY's text format (a backslash, tab, newline or carriage return escaped). */
static bool put_id(void *arg, const bson_value_t *id)
{
    feeder *f = arg;
    ejson_error e;
    strbuf_reset(&f->key, 4096);
    ejson_status st = ejson_write_key(&f->key, id, &e);
    if (st == EJSON_NOMEM || strbuf_failed(&f->key)) {
        sink_set_err(f->s, APPLY_NOMEM, NULL, "out of memory reconciling the deletes of %s", f->qname);
        f->failed = true;
        return false;
    }
    if (st != EJSON_OK)
        return true; /* an _id without a key text: the sink refuses its ops, so no row holds it */
    for (size_t i = 0; i < f->key.len; i++) {
        char c = f->key.data[i];
        switch (c) {
        case '\\':
            strbuf_append(&f->rows, "\\\\", 2);
            break;
        case '\t':
            strbuf_append(&f->rows, "\\t", 2);
            break;
        case '\n':
            strbuf_append(&f->rows, "\\n", 2);
            break;
        case '\r':
            strbuf_append(&f->rows, "\\r", 2);
            break;
        default:
            strbuf_putc(&f->rows, c);
        }
    }
    strbuf_putc(&f->rows, '\n');
    if (strbuf_failed(&f->rows)) {
        sink_set_err(f->s, APPLY_NOMEM, NULL, "out of memory reconciling the deletes of %s", f->qname);
        f->failed = true;
        return false;
    }
    f->n++;
    return f->rows.len < COPY_CHUNK || send_rows(f);
}

/* One table: true when the sink is fine (*deleted set, or *scan_st and why set when the scan failed). */
static bool reconcile_table(sink *s, const char *db, const char *coll, const char *qname, sink_id_scan_fn scan,
                            void *ctx, uint64_t *scanned, uint64_t *deleted, apply_status *scan_st, char *why,
                            size_t whylen)
{
    *scanned = *deleted = 0;
    *scan_st = APPLY_OK;
    if (!pipe_exec(s, "BEGIN", 0, NULL, NULL, "beginning a delete reconciliation") ||
        !pipe_exec(s, "CREATE TEMP TABLE oplog2pg_reconcile (_id text COLLATE \"C\") ON COMMIT DROP", 0, NULL, NULL,
                   "making the delete reconciliation's temporary table"))
        return false;
    pgconn_error e;
    if (!pgconn_copy_start(s->c, "COPY oplog2pg_reconcile (_id) FROM STDIN", &e)) {
        sink_set_err(s, e.status, e.sqlstate, "reconciling the deletes of %s: %s", qname, e.message);
        return false;
    }
    feeder f = {.s = s, .qname = qname};
    strbuf_init(&f.rows);
    strbuf_init(&f.key);
    apply_status st = scan(ctx, db, coll, put_id, &f, why, whylen);
    bool ok = !f.failed && send_rows(&f);
    strbuf_free(&f.rows);
    strbuf_free(&f.key);
    *scanned = f.n;
    if (!ok)
        return false; /* the COPY is cut off with the connection: the session ends */
    if (!pgconn_copy_end(s->c, &e)) {
        sink_set_err(s, e.status, e.sqlstate, "reconciling the deletes of %s: %s", qname, e.message);
        return false;
    }
    if (st != APPLY_OK) {
        *scan_st = st;
        return pipe_exec(s, "ROLLBACK", 0, NULL, NULL, "rolling back a delete reconciliation");
    }
    char sql[512];
    snprintf(sql, sizeof sql,
             "DELETE FROM %s t WHERE NOT EXISTS (SELECT 1 FROM oplog2pg_reconcile r WHERE r._id = t._id)", qname);
    PGresult *r = NULL;
    if (!pipe_exec(s, "ANALYZE oplog2pg_reconcile", 0, NULL, NULL, "analyzing the reconciliation's _ids") ||
        !pipe_exec(s, sql, 0, NULL, &r, "deleting the rows MongoDB no longer holds"))
        return false;
    *deleted = strtoull(PQcmdTuples(r), NULL, 10);
    PQclear(r);
    return pipe_exec(s, "COMMIT", 0, NULL, NULL, "committing a delete reconciliation");
}

sink_status sink_reconcile_deletes(sink *s, sink_ns_included_fn included, sink_id_scan_fn scan, void *ctx,
                                   sink_reconcile_result *out)
{
    memset(out, 0, sizeof *out);
    if (s->failed != APPLY_OK)
        return s->failed;
    if (s->conn == NULL) {
        sink_set_err(s, APPLY_RETRY, NULL, "not connected to PostgreSQL");
        return s->failed;
    }
    if (s->in_txn) {
        sink_set_err(s, APPLY_CONFIG, NULL, "internal error: a delete reconciliation runs only between flush groups");
        return s->failed;
    }
    if (pipe_copy_begin(s) != APPLY_OK)
        return s->failed;
    const char *params[1] = {s->service};
    PGresult *tabs = NULL;
    /* The tables of the jsonb shape (_id, doc) this service made. */
    bool ok = pipe_exec(s,
                        "SELECT t.db, t.coll, format('%I.%I', t.schema_name, t.table_name) FROM oplog2pg.tables t "
                        "WHERE t.service = $1 AND NOT t.adopted AND (SELECT array_agg(a.attname::text ORDER BY "
                        "a.attnum) FROM pg_attribute a WHERE a.attrelid = to_regclass(format('%I.%I', t.schema_name, "
                        "t.table_name)) AND a.attnum > 0 AND NOT a.attisdropped) = ARRAY['_id', 'doc'] "
                        "ORDER BY 1, 2",
                        1, params, &tabs, "listing the tables to reconcile");
    for (int i = 0; ok && tabs != NULL && i < PQntuples(tabs); i++) {
        const char *db = PQgetvalue(tabs, i, 0), *coll = PQgetvalue(tabs, i, 1), *qname = PQgetvalue(tabs, i, 2);
        if (map_find(s->cfg.maps, db, coll) != NULL || !included(ctx, db, coll))
            continue;
        uint64_t scanned, deleted;
        apply_status st;
        ok = reconcile_table(s, db, coll, qname, scan, ctx, &scanned, &deleted, &st, out->scan_why,
                             sizeof out->scan_why);
        if (!ok)
            break;
        if (st != APPLY_OK) {
            out->scan_status = st;
            break;
        }
        out->tables++;
        out->scanned += scanned;
        out->deleted += deleted;
        if (deleted > 0)
            log_info("delete reconciliation: %llu rows of %s whose _id %s.%s no longer holds deleted (%llu _ids read)",
                     (unsigned long long)deleted, qname, db, coll, (unsigned long long)scanned);
    }
    PQclear(tabs);
    if (!ok)
        return s->failed;
    if (pipe_copy_done(s) != APPLY_OK)
        return s->failed;
    return APPLY_OK;
}

/*
 * backfill.c — columns a typed map gained since its tables were made (docs/mapping.md, "Changing a map").
 *
 * At every connect, before the first group, each table of a map that exists already is checked against the map by
 * oplog2pg.ensure_mapped_table (so a mismatch, or a table that is not oplog2pg's, stops the start rather than the
 * first write), in one transaction per map:
 *   1. a table this service made (its catalog row, not adopted) gets the fields the map gained (ALTER TABLE ADD
 *      COLUMN), and a child table the map gained is made;
 *   2. the rows already there get the new fields' values from the documents as MongoDB holds them, read by the
 *      function the daemon lends the sink (sink_config.read_docs: the sink never talks to MongoDB) and projected by
 *      the same code as a live insert (map_project_document); the projected rows go by binary COPY into a temporary
 *      table per changed table, from which one UPDATE per table sets the new fields (one INSERT fills a new child
 *      table);
 *   3. COMMIT. A crash before it leaves the table as it was, and the next start does it again.
 * The table of a time-series collection is not checked here: its map's columns follow columns of its own, and it is
 * checked when its first bucket is written (sink/tseries.c); a column its map gained stays NULL in its older rows.
 *
 * NOTES. Why MongoDB and not the document kept in the rest column: relaxed Extended JSON does not keep BSON's types.
 * A double and an int64 are both JSON numbers, and jsonb keeps neither the double's binary value nor that it was one:
 * the double 2^62 reads back as 4611686018427388000, and 1e300, which jsonb writes as 1 and 300 zeros, as no number
 * BSON holds. A document whose field is named $numberLong reads back as the number it spells. Values read back from
 * there would differ from what an insert of the same document writes; a document read from MongoDB is exact,
 * whatever the rest mode.
 *
 * Why reading MongoDB now is right although PostgreSQL is at an older position (its checkpoint): the copy does the
 * same. The documents are at least as new as the checkpoint; the oplog from the checkpoint on is applied after this,
 * as it would be anyway, and each entry applied to a newer state of its row leaves it where MongoDB left it, as it
 * does for the rows of the initial copy. A document inserted after the checkpoint has no row yet (the UPDATE passes
 * it by; its insert brings it), one deleted after it keeps NULL in its row until its delete removes the row.
 *
 * Where MongoDB cannot be read (replay of a dump) nothing is filled: the new fields stay NULL in the rows already
 * there and the log says that a new copy of the collection fills them (--reimport). A value the new column cannot
 * take is NULL in the backfill (an op that wrote it long ago cannot be set aside now), and the log counts them.
 */
#include <bson/bson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_internal.h"
#include "sink/batch.h"
#include "util/log.h"
#include "util/strbuf.h"

#define FLUSH_BYTES (8u * 1024 * 1024) /* the rows of documents read that go out in one COPY per table */
#define FLUSH_ROWS  20000

/* Whether table t exists, and whether it is this service's own (made by it, not adopted). */
static bool table_state(sink *s, const sink_mapped_table *t, bool *exists, bool *own)
{
    const char *v[3] = {t->mt->name.schema, t->mt->name.table, s->service};
    PGresult *r = NULL;
    if (!pipe_exec(s,
                   "SELECT to_regclass(format('%I.%I', $1::text, $2::text)) IS NOT NULL, EXISTS (SELECT 1 FROM "
                   "oplog2pg.tables "
                   "WHERE schema_name = $1 AND table_name = $2 AND service = $3 AND NOT adopted)",
                   3, v, &r, "looking up a mapped table"))
        return false;
    *exists = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    *own = *exists && strcmp(PQgetvalue(r, 0, 1), "t") == 0;
    PQclear(r);
    return true;
}

/* The UPDATE that takes the new fields from the temporary table `tmp`, matching rows by the table's key. */
static char *update_sql(const sink_mapped_table *t, const bool *added, const char *tmp)
{
    strbuf b;
    strbuf_init(&b);
    strbuf_printf(&b, "UPDATE %s AS t SET ", t->qname);
    bool first = true;
    for (size_t f = 0; f < t->nfields; f++) {
        if (!added[f])
            continue;
        strbuf_printf(&b, "%s%s = b.%s", first ? "" : ", ", t->qfields[f], t->qfields[f]);
        first = false;
    }
    strbuf_printf(&b, " FROM %s AS b WHERE ", tmp);
    /* The key: a child table's first two fields (parent key, position); the collection table's key column. */
    if (t->mt->parent != NULL) {
        strbuf_printf(&b, "t.%s = b.%s AND t.%s = b.%s", t->qfields[0], t->qfields[0], t->qfields[1], t->qfields[1]);
    } else {
        strbuf_printf(&b, "t.%s = b.%s", t->qfields[t->mt->key], t->qfields[t->mt->key]);
    }
    size_t len;
    return strbuf_failed(&b) ? (strbuf_free(&b), NULL) : strbuf_detach(&b, &len);
}

/* The fields of table t that it lacked before ensure_mapped_table added them: compared with `before`, its columns
 * as they were (one name per row of the result). */
static void added_fields(const sink_mapped_table *t, const PGresult *before, bool *added)
{
    char type[64];
    for (size_t f = 0; f < t->nfields; f++) {
        const char *name = map_table_field(t->mt, f, type, sizeof type);
        bool found = false;
        for (int i = 0; i < PQntuples(before) && !found; i++)
            found = strcmp(PQgetvalue(before, i, 0), name) == 0;
        added[f] = !found;
    }
}

/* The state of one backfill while MongoDB hands it the collection's documents. */
typedef struct {
    sink *s;
    const map_collection *m;
    const sink_mapped_table *tabs;
    size_t ntabs;
    const bool *changed;
    sink_batch *batch;
    map_rows rows;
    uint64_t docs, refused, nulled, no_id;
    bool failed; /* the sink's error says why */
} filler;

/* Sends the rows the batch holds, each changed table's into its temporary table, and empties the batch. */
static bool flush_rows(filler *f)
{
    for (size_t k = 0; k < f->ntabs; k++) {
        if (!f->changed[k])
            continue;
        strbuf b;
        strbuf_init(&b);
        strbuf_printf(&b, "COPY oplog2pg_backfill_%zu (", k);
        for (size_t c = 0; c < f->tabs[k].nfields; c++)
            strbuf_printf(&b, "%s%s", c ? ", " : "", f->tabs[k].qfields[c]);
        strbuf_puts(&b, ") FROM STDIN (FORMAT binary)");
        pgconn_error e;
        bool ok = !strbuf_failed(&b);
        if (!ok)
            sink_set_err(f->s, APPLY_NOMEM, NULL, "out of memory backfilling %s.%s", f->m->db, f->m->coll);
        else if (!pgconn_copy_start(f->s->c, b.data, &e) ||
                 !sink_batch_copy_mapped(f->s->c, f->batch, (uint16_t)k, &e)) {
            sink_set_err(f->s, e.status, e.sqlstate, "backfilling %s: %s", f->tabs[k].qname, e.message);
            ok = false;
        }
        strbuf_free(&b);
        if (!ok)
            return false;
    }
    sink_batch_reset(f->batch);
    return true;
}

/* One document read from MongoDB: projected by the code that projects an insert, its rows kept for the next COPY. */
static bool fill_doc(void *arg, const bson_t *doc)
{
    filler *f = arg;
    bson_iter_t it;
    if (!bson_iter_init_find(&it, doc, "_id")) {
        /* No row can hold a document without _id (an insert of it is refused), so there is nothing to fill. */
        f->no_id++;
        return true;
    }
    char why[256];
    strbuf_reset(&f->rows.buf, 1 << 20);
    f->rows.count = 0;
    project_status st = map_project_document(f->m, bson_get_data(doc), doc->len, bson_iter_value(&it), &f->rows,
                                             &f->nulled, why, sizeof why);
    f->docs++;
    if (st == PROJECT_TYPE_ERROR) {
        if (f->refused++ == 0)
            log_warning("backfill of %s.%s: a document cannot fill the new columns (%s): they stay NULL in its rows",
                        f->m->db, f->m->coll, why);
        return true;
    }
    if (st == PROJECT_NOMEM || strbuf_failed(&f->rows.buf) || !sink_batch_add_mapped(f->batch, &f->rows)) {
        sink_set_err(f->s, APPLY_NOMEM, NULL, "out of memory backfilling %s.%s", f->m->db, f->m->coll);
        f->failed = true;
        return false;
    }
    if ((sink_batch_bytes(f->batch) >= FLUSH_BYTES || sink_batch_rows(f->batch) >= FLUSH_ROWS) && !flush_rows(f)) {
        f->failed = true;
        return false;
    }
    return true;
}

/* The statement that moves the rows of temporary table `tmp` into table k: an UPDATE of the new fields of the rows
 * there (matched by the table's key), or, for a child table made just now, an INSERT of the rows whose parent row is
 * there. A document MongoDB holds and PostgreSQL not yet (inserted after the checkpoint) gets its rows when the oplog
 * brings its insert; a row whose document MongoDB no longer holds keeps NULL until the oplog brings its delete. */
static char *move_sql(const sink_mapped_table *tabs, size_t k, const bool *added, bool created, const char *tmp)
{
    const sink_mapped_table *t = &tabs[k];
    if (!created)
        return update_sql(t, added, tmp);
    strbuf b;
    strbuf_init(&b);
    strbuf_printf(&b, "INSERT INTO %s (", t->qname);
    for (size_t f = 0; f < t->nfields; f++)
        strbuf_printf(&b, "%s%s", f ? ", " : "", t->qfields[f]);
    strbuf_puts(&b, ") SELECT ");
    for (size_t f = 0; f < t->nfields; f++)
        strbuf_printf(&b, "%sb.%s", f ? ", " : "", t->qfields[f]);
    /* A child table's first field is its parent key, which holds the collection table's key. */
    strbuf_printf(&b, " FROM %s AS b WHERE EXISTS (SELECT 1 FROM %s AS p WHERE p.%s = b.%s)", tmp, tabs[0].qname,
                  tabs[0].qfields[tabs[0].mt->key], t->qfields[0]);
    size_t len;
    return strbuf_failed(&b) ? (strbuf_free(&b), NULL) : strbuf_detach(&b, &len);
}

/* Reads every document of the collection from MongoDB (s->cfg.read_docs) and fills the new fields of the changed
 * tables with what a copy of the collection would write there. */
static bool fill_from_mongodb(sink *s, const map_collection *m, sink_mapped_table *tabs, size_t ntabs, bool **added,
                              const bool *changed, const bool *created)
{
    char sql[1024];
    for (size_t k = 0; k < ntabs; k++) {
        if (!changed[k])
            continue;
        snprintf(sql, sizeof sql, "CREATE TEMP TABLE oplog2pg_backfill_%zu (LIKE %s) ON COMMIT DROP", k, tabs[k].qname);
        if (!pipe_exec(s, sql, 0, NULL, NULL, "making the backfill's temporary table"))
            return false;
    }
    filler f = {.s = s, .m = m, .tabs = tabs, .ntabs = ntabs, .changed = changed, .batch = sink_batch_new()};
    strbuf_init(&f.rows.buf);
    bool ok = f.batch != NULL;
    if (!ok) {
        sink_set_err(s, APPLY_NOMEM, NULL, "out of memory backfilling %s.%s", m->db, m->coll);
    } else {
        char why[512] = "";
        apply_status st = s->cfg.read_docs(s->cfg.read_docs_ctx, m->db, m->coll, fill_doc, &f, why, sizeof why);
        if (f.failed) {
            ok = false;
        } else if (st != APPLY_OK) {
            sink_set_err(s, st, NULL, "reading %s.%s from MongoDB to fill the columns its map gained: %s", m->db,
                         m->coll, why);
            ok = false;
        } else if (sink_batch_rows(f.batch) > 0) {
            ok = flush_rows(&f);
        }
    }
    sink_batch_free(f.batch);
    strbuf_free(&f.rows.buf);
    if (!ok)
        return false;
    for (size_t k = 0; k < ntabs; k++) {
        if (!changed[k])
            continue;
        char tmp[64];
        snprintf(tmp, sizeof tmp, "oplog2pg_backfill_%zu", k);
        char *move = move_sql(tabs, k, added[k], created[k], tmp);
        if (move == NULL) {
            sink_set_err(s, APPLY_NOMEM, NULL, "out of memory backfilling %s.%s", m->db, m->coll);
            return false;
        }
        PGresult *r = NULL;
        bool done = pipe_exec(s, move, 0, NULL, &r, "backfilling the new columns");
        free(move);
        if (!done)
            return false;
        if (created[k])
            log_notice("map of %s.%s: filled the new child table %s with %s rows of the documents read from MongoDB",
                       m->db, m->coll, tabs[k].qname, PQcmdTuples(r));
        else
            log_notice("map of %s.%s: filled the new columns of %s in %s rows from the documents read from MongoDB",
                       m->db, m->coll, tabs[k].qname, PQcmdTuples(r));
        PQclear(r);
    }
    if (f.refused > 0 || f.nulled > 0 || f.no_id > 0)
        log_warning("map of %s.%s: of %llu documents read, %llu had a value the new columns cannot take (their new "
                    "columns are NULL), %llu values became NULL by on_type_error = null, and %llu had no _id (no row "
                    "holds them)",
                    m->db, m->coll, (unsigned long long)f.docs, (unsigned long long)f.refused,
                    (unsigned long long)f.nulled, (unsigned long long)f.no_id);
    return true;
}

/* One map: the tables of it that exist checked (and adopted) by ensure_mapped_table, and those of this service that
 * lack fields of the map given them, in one transaction. */
static bool sync_map(sink *s, const map_collection *m)
{
    /* The table of a time-series collection has columns of its own before the map's, and is checked (and given the
     * columns the map gained) when its first bucket is written (sink/tseries.c): not here. */
    const char *tv[2] = {m->table.name.schema, m->table.name.table};
    PGresult *tr = NULL;
    if (!pipe_exec(s, "SELECT 1 FROM oplog2pg.timeseries WHERE schema_name = $1 AND table_name = $2", 2, tv, &tr,
                   "looking up a time-series table"))
        return false;
    bool ts = PQntuples(tr) > 0;
    PQclear(tr);
    if (ts)
        return true;

    size_t ntabs = map_table_count(m);
    sink_mapped_table *tabs = calloc(ntabs, sizeof *tabs);
    bool *changed = calloc(ntabs, sizeof *changed);
    bool **added = calloc(ntabs, sizeof *added);
    PGresult **before = calloc(ntabs, sizeof *before);
    bool *exists = calloc(ntabs, sizeof *exists), *own = calloc(ntabs, sizeof *own);
    bool *created = calloc(ntabs, sizeof *created);
    bool ok = tabs != NULL && changed != NULL && added != NULL && before != NULL && exists != NULL && own != NULL &&
              created != NULL;
    size_t built = 0, nchanged = 0, nexisting = 0;
    while (ok && built < ntabs) {
        ok = sink_mapped_table_build(s->conn, m, built, &tabs[built]);
        built += ok;
    }
    if (!ok) {
        sink_set_err(s, APPLY_NOMEM, NULL, "out of memory comparing the tables of %s.%s with the map", m->db, m->coll);
        goto out;
    }
    for (size_t k = 0; ok && k < ntabs; k++) {
        ok = table_state(s, &tabs[k], &exists[k], &own[k]);
        nexisting += exists[k];
    }
    if (!ok || nexisting == 0)
        goto out;

    /* Every table of the map that exists is checked now (a mismatch stops the start, not the first write), its new
     * columns added. A child table the map gained is made now and filled when the collection's table is this
     * service's and MongoDB can be read; any other table that does not exist yet is made when it is first written. */
    bool fill = exists[0] && own[0] && s->cfg.read_docs != NULL;
    ok = pipe_exec(s, "BEGIN", 0, NULL, NULL, "checking the tables of a map");
    for (size_t k = 0; ok && k < ntabs; k++) {
        if (!exists[k] && !(k > 0 && fill))
            continue;
        const char *v[8] = {s->service,
                            m->db,
                            m->coll,
                            tabs[k].mt->name.schema,
                            tabs[k].mt->name.table,
                            tabs[k].columns_json,
                            tabs[k].key_json,
                            tabs[k].mt->adopt ? "true" : "false"};
        const char *w[2] = {tabs[k].mt->name.schema, tabs[k].mt->name.table};
        added[k] = calloc(tabs[k].nfields ? tabs[k].nfields : 1, sizeof *added[k]);
        ok = added[k] != NULL;
        if (!ok)
            sink_set_err(s, APPLY_NOMEM, NULL, "out of memory checking the tables of %s.%s", m->db, m->coll);
        ok = ok &&
             pipe_exec(
                 s,
                 "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(format('%I.%I', $1::text, $2::text)) "
                 "AND attnum > 0 AND NOT attisdropped",
                 2, w, &before[k], "reading the columns of a mapped table") &&
             pipe_exec(s, SINK_MAPPED_ENSURE_SQL, 8, v, NULL, "checking a table of the map");
        if (ok && !exists[k]) {
            created[k] = changed[k] = true;
            nchanged++;
        } else if (ok && own[k]) {
            added_fields(&tabs[k], before[k], added[k]);
            for (size_t f = 0; f < tabs[k].nfields && !changed[k]; f++)
                changed[k] = added[k][f];
            nchanged += changed[k];
        }
    }
    if (ok && nchanged > 0) {
        if (s->cfg.read_docs != NULL) {
            ok = fill_from_mongodb(s, m, tabs, ntabs, added, changed, created);
        } else {
            for (size_t k = 0; k < ntabs; k++)
                if (changed[k])
                    log_warning("map of %s.%s: the new columns of %s are NULL in the rows already there: MongoDB is "
                                "not read here, so only a new copy of the collection fills them (oplog2pg run "
                                "--reimport)",
                                m->db, m->coll, tabs[k].qname);
        }
    }
    ok = ok && pipe_exec(s, "COMMIT", 0, NULL, NULL, "changing the tables of a map");
    if (!ok) {
        pgconn_error ignored;
        pgconn_exec(s->c, "ROLLBACK", NULL, false, &ignored);
    }

out:
    for (size_t k = 0; k < ntabs && tabs != NULL; k++) {
        if (k < built)
            sink_mapped_table_free(&tabs[k]);
        if (added != NULL)
            free(added[k]);
        if (before != NULL)
            PQclear(before[k]);
    }
    free(tabs);
    free(changed);
    free(added);
    free(before);
    free(exists);
    free(own);
    free(created);
    return ok;
}

bool sink_sync_maps(sink *s)
{
    const map_set *maps = s->cfg.maps;
    for (size_t i = 0; maps != NULL && i < maps->n; i++)
        if (!sync_map(s, &maps->colls[i]))
            return false;
    return true;
}

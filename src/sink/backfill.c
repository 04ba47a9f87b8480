/*
 * backfill.c — columns a typed map gained since its tables were made (docs/mapping.md, "Changing a map").
 *
 * At every connect, before the first group, each table of a map that exists already is checked against the map by
 * oplog2pg.ensure_mapped_table (so a mismatch, or a table that is not oplog2pg's, stops the start rather than the
 * first write), in one transaction per map:
 *   1. a table this service made (its catalog row, not adopted) gets the fields the map gained (ALTER TABLE ADD
 *      COLUMN);
 *   2. when the collection's table keeps the whole document (rest = doc), the rows already there get their values
 *      from it: every `doc` is read back (a cursor, a few megabytes at a time), parsed from its Extended JSON into
 *      BSON and projected by the same code as a live insert (map_project_document), and the projected rows go by
 *      binary COPY into a temporary table per changed table, from which one UPDATE per table sets the new columns;
 *   3. COMMIT. A crash before it leaves the table as it was, and the next start does it again.
 * Without the whole document (rest = extra or drop) the new columns stay NULL in the old rows, and the log says
 * that a new copy of the collection fills them (--reimport). A value the new column cannot take is NULL in the
 * backfill (an op that wrote it long ago cannot be set aside now), and the log counts them.
 */
#include <bson/bson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_internal.h"
#include "sink/batch.h"
#include "util/log.h"
#include "util/strbuf.h"

#define FETCH_BYTES (8u * 1024 * 1024) /* what one FETCH of documents aims at */
#define FETCH_MAX   5000

static bool exec(sink *s, const char *sql, int n, const char *const *values, PGresult **out, const char *what)
{
    pgconn_error e;
    if (pgconn_exec_params(s->c, sql, n, values, NULL, NULL, 0, out, false, &e))
        return true;
    sink_set_err(s, e.status, e.sqlstate, "%s: %s", what, e.message);
    return false;
}

/* Whether table t exists, and whether it is this service's own (made by it, not adopted). */
static bool table_state(sink *s, const sink_mapped_table *t, bool *exists, bool *own)
{
    const char *v[3] = {t->mt->name.schema, t->mt->name.table, s->service};
    PGresult *r = NULL;
    if (!exec(s,
              "SELECT to_regclass(format('%I.%I', $1::text, $2::text)) IS NOT NULL, EXISTS (SELECT 1 FROM oplog2pg.tables "
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

static uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Appends the records of `rows` to out with the key field of each tuple (the collection table's key column, a child
 * table's parent key) replaced by `key` (a text value: its bytes are its binary form). False when a tuple is not
 * well-formed or memory runs out. */
static bool with_key(const map_rows *rows, size_t root_key, const char *key, size_t key_len, map_rows *out)
{
    map_row_iter it;
    map_rows_iter(rows, &it);
    uint16_t t;
    const uint8_t *tuple;
    uint32_t len;
    while (map_rows_next(&it, &t, &tuple, &len)) {
        if (len < 2)
            return false;
        size_t field = t == 0 ? root_key : 0, nfields = (size_t)(tuple[0] << 8 | tuple[1]);
        const uint8_t *p = tuple + 2, *end = tuple + len;
        size_t at = out->buf.len;
        strbuf_put_be16(&out->buf, t);
        strbuf_put_be32(&out->buf, 0); /* the tuple's length, set below */
        strbuf_append(&out->buf, tuple, 2);
        for (size_t f = 0; f < nfields; f++) {
            if (end - p < 4)
                return false;
            uint32_t flen = get_be32(p);
            size_t body = flen == 0xffffffffu ? 0 : flen;
            if ((size_t)(end - p - 4) < body)
                return false;
            if (f == field) {
                strbuf_put_be32(&out->buf, (uint32_t)key_len);
                strbuf_append(&out->buf, key, key_len);
            } else {
                strbuf_append(&out->buf, p, 4 + body);
            }
            p += 4 + body;
        }
        if (strbuf_failed(&out->buf))
            return false;
        uint32_t tlen = (uint32_t)(out->buf.len - at - 6);
        uint8_t *q = (uint8_t *)out->buf.data + at + 2;
        q[0] = (uint8_t)(tlen >> 24);
        q[1] = (uint8_t)(tlen >> 16);
        q[2] = (uint8_t)(tlen >> 8);
        q[3] = (uint8_t)tlen;
        out->count++;
    }
    return true;
}

/* Reads every document of the collection's table and fills the new fields of the changed tables. */
static bool fill_from_doc(sink *s, const map_collection *m, sink_mapped_table *tabs, size_t ntabs, bool **added,
                          const bool *changed, const bool *created)
{
    const sink_mapped_table *root = &tabs[0];
    char *qdoc = sink_quote_ident(s, m->table.rest_column);
    if (qdoc == NULL) {
        sink_set_err(s, APPLY_NOMEM, NULL, "out of memory backfilling %s.%s", m->db, m->coll);
        return false;
    }
    /* jsonb keeps the keys of an object sorted, so the _id of a document read back from doc may have its fields in
     * another order than the key was made from (docs/architecture.md: the key text keeps MongoDB's order). Where the
     * key is that text, the rows take the key stored with the document instead of one made from the _id read back. */
    const map_column *key = &m->table.cols[m->table.key];
    bool id_from_key = key->line == 0;
    char sql[1024];
    snprintf(sql, sizeof sql, "DECLARE oplog2pg_backfill NO SCROLL CURSOR FOR SELECT %s::text, %s FROM %s", qdoc,
             id_from_key ? root->qfields[m->table.key] : "NULL", root->qname);
    free(qdoc);
    if (!exec(s, sql, 0, NULL, NULL, "reading the documents to backfill"))
        return false;
    for (size_t k = 0; k < ntabs; k++) {
        if (!changed[k] || created[k])
            continue;
        snprintf(sql, sizeof sql, "CREATE TEMP TABLE oplog2pg_backfill_%zu (LIKE %s) ON COMMIT DROP", k, tabs[k].qname);
        if (!exec(s, sql, 0, NULL, NULL, "making the backfill's temporary table"))
            return false;
    }

    sink_batch *batch = sink_batch_new();
    map_rows rows = {.count = 0};
    strbuf_init(&rows.buf);
    map_rows keyed = {.count = 0};
    strbuf_init(&keyed.buf);
    bool ok = batch != NULL;
    uint64_t docs = 0, unreadable = 0, nulled = 0, refused = 0;
    unsigned fetch = 100;
    while (ok) {
        snprintf(sql, sizeof sql, "FETCH %u FROM oplog2pg_backfill", fetch);
        PGresult *r = NULL;
        if (!exec(s, sql, 0, NULL, &r, "reading the documents to backfill")) {
            ok = false;
            break;
        }
        int n = PQntuples(r);
        size_t bytes = 0;
        for (int i = 0; ok && i < n; i++) {
            const char *json = PQgetvalue(r, i, 0);
            size_t len = (size_t)PQgetlength(r, i, 0);
            bytes += len;
            bson_t doc;
            bson_error_t berr;
            bson_iter_t it;
            if (!bson_init_from_json(&doc, json, (ssize_t)len, &berr)) {
                unreadable++;
                continue;
            }
            if (!bson_iter_init_find(&it, &doc, "_id")) {
                bson_destroy(&doc);
                unreadable++;
                continue;
            }
            char why[256];
            strbuf_reset(&rows.buf, 1 << 20);
            rows.count = 0;
            project_status st = map_project_document(m, bson_get_data(&doc), doc.len, bson_iter_value(&it), &rows,
                                                     &nulled, why, sizeof why);
            bson_destroy(&doc);
            if (st == PROJECT_OK && id_from_key) {
                strbuf_reset(&keyed.buf, 1 << 20);
                keyed.count = 0;
                if (!with_key(&rows, m->table.key, PQgetvalue(r, i, 1), (size_t)PQgetlength(r, i, 1), &keyed))
                    st = PROJECT_NOMEM;
            }
            if (st == PROJECT_NOMEM || strbuf_failed(&rows.buf)) {
                sink_set_err(s, APPLY_NOMEM, NULL, "out of memory backfilling %s.%s", m->db, m->coll);
                ok = false;
            } else if (st == PROJECT_TYPE_ERROR) {
                if (refused++ == 0)
                    log_warning("backfill of %s.%s: a document cannot fill the new columns (%s): they stay NULL "
                                "in its rows",
                                m->db, m->coll, why);
            } else if (!sink_batch_add_mapped(batch, id_from_key ? &keyed : &rows)) {
                sink_set_err(s, APPLY_NOMEM, NULL, "out of memory backfilling %s.%s", m->db, m->coll);
                ok = false;
            }
            docs++;
        }
        PQclear(r);
        if (ok && sink_batch_rows(batch) > 0) {
            for (size_t k = 0; ok && k < ntabs; k++) {
                if (!changed[k])
                    continue;
                strbuf b;
                strbuf_init(&b);
                /* A table made just now takes its rows as they are; one that gained columns, through its temporary
                 * table. */
                if (created[k])
                    strbuf_printf(&b, "COPY %s (", tabs[k].qname);
                else
                    strbuf_printf(&b, "COPY oplog2pg_backfill_%zu (", k);
                for (size_t f = 0; f < tabs[k].nfields; f++)
                    strbuf_printf(&b, "%s%s", f ? ", " : "", tabs[k].qfields[f]);
                strbuf_puts(&b, ") FROM STDIN (FORMAT binary)");
                pgconn_error e;
                if (strbuf_failed(&b)) {
                    sink_set_err(s, APPLY_NOMEM, NULL, "out of memory backfilling %s.%s", m->db, m->coll);
                    ok = false;
                } else if (!pgconn_copy_start(s->c, b.data, &e) ||
                           !sink_batch_copy_mapped(s->c, batch, (uint16_t)k, &e)) {
                    sink_set_err(s, e.status, e.sqlstate, "backfilling %s: %s", tabs[k].qname, e.message);
                    ok = false;
                }
                strbuf_free(&b);
            }
            sink_batch_reset(batch);
        }
        if (n == 0 || !ok)
            break;
        /* Aim each FETCH at FETCH_BYTES, whatever the documents' size. */
        size_t avg = bytes / (size_t)n + 1;
        size_t want = FETCH_BYTES / avg;
        fetch = want < 1 ? 1 : want > FETCH_MAX ? FETCH_MAX : (unsigned)want;
    }
    sink_batch_free(batch);
    strbuf_free(&rows.buf);
    strbuf_free(&keyed.buf);
    if (!ok)
        return false;
    if (!exec(s, "CLOSE oplog2pg_backfill", 0, NULL, NULL, "reading the documents to backfill"))
        return false;
    for (size_t k = 0; k < ntabs; k++) {
        if (created[k])
            log_notice("map of %s.%s: filled the new child table %s from the documents kept in %s", m->db, m->coll,
                       tabs[k].qname, m->table.rest_column);
        if (!changed[k] || created[k])
            continue;
        char tmp[64];
        snprintf(tmp, sizeof tmp, "oplog2pg_backfill_%zu", k);
        char *upd = update_sql(&tabs[k], added[k], tmp);
        if (upd == NULL) {
            sink_set_err(s, APPLY_NOMEM, NULL, "out of memory backfilling %s.%s", m->db, m->coll);
            return false;
        }
        PGresult *r = NULL;
        bool done = exec(s, upd, 0, NULL, &r, "backfilling the new columns");
        free(upd);
        if (!done)
            return false;
        log_notice("map of %s.%s: filled the new columns of %s in %s rows from the documents kept in %s", m->db,
                   m->coll, tabs[k].qname, PQcmdTuples(r), m->table.rest_column);
        PQclear(r);
    }
    if (unreadable > 0 || refused > 0 || nulled > 0)
        log_warning("map of %s.%s: of %llu documents, %llu could not be read back and %llu had a value the new columns "
                    "cannot take (and %llu values became NULL by on_type_error = null): their new columns are NULL",
                    m->db, m->coll, (unsigned long long)docs, (unsigned long long)unreadable,
                    (unsigned long long)refused, (unsigned long long)nulled);
    return true;
}

/* One map: the tables of it that exist checked (and adopted) by ensure_mapped_table, and those of this service that
 * lack fields of the map given them, in one transaction. */
static bool sync_map(sink *s, const map_collection *m)
{
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
     * service's and keeps the whole document; any other table that does not exist yet is made when it is first
     * written. */
    bool fill = exists[0] && own[0] && m->table.rest == MAP_REST_DOC;
    ok = exec(s, "BEGIN", 0, NULL, NULL, "checking the tables of a map");
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
             exec(s,
                  "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(format('%I.%I', $1::text, $2::text)) "
                  "AND attnum > 0 AND NOT attisdropped",
                  2, w, &before[k], "reading the columns of a mapped table") &&
             exec(s, SINK_MAPPED_ENSURE_SQL, 8, v, NULL, "checking a table of the map");
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
        if (m->table.rest == MAP_REST_DOC) {
            ok = fill_from_doc(s, m, tabs, ntabs, added, changed, created);
        } else {
            for (size_t k = 0; k < ntabs; k++)
                if (changed[k])
                    log_warning("map of %s.%s: the new columns of %s are NULL in the rows already there: the table "
                                "does not keep the whole document (rest = %s), so only a new copy of the collection "
                                "fills them (oplog2pg run --reimport)",
                                m->db, m->coll, tabs[k].qname, map_rest_name(m->table.rest));
        }
    }
    ok = ok && exec(s, "COMMIT", 0, NULL, NULL, "changing the tables of a map");
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

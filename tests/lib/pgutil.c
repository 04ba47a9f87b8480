/*
 * pgutil.c — libpq helpers for the test tools (see pgutil.h).
 *
 * COPY text format: a backslash, tab, newline or carriage return inside a value must be escaped. libbson's JSON
 * escapes control characters inside strings, but it keeps backslashes (its own escapes), so those are always doubled.
 */
#include "pgutil.h"

#include <stdio.h>
#include <string.h>

#include "map/ejson.h"

#define COPY_CHUNK (1u << 20)

bool pgutil_exec(PGconn *pg, const char *sql, char *err, size_t errlen)
{
    PGresult *r = PQexec(pg, sql);
    ExecStatusType st = PQresultStatus(r);
    bool ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
    if (!ok)
        snprintf(err, errlen, "SQL failed: %s: %.200s", PQresultErrorMessage(r), sql);
    PQclear(r);
    return ok;
}

char *pgutil_qualified_name(PGconn *pg, const char *schema, const char *table, char *err, size_t errlen)
{
    char *qs = PQescapeIdentifier(pg, schema, strlen(schema));
    char *qt = PQescapeIdentifier(pg, table, strlen(table));
    char *out = NULL;
    if (!qs || !qt)
        snprintf(err, errlen, "cannot quote %s.%s: %s", schema, table, PQerrorMessage(pg));
    else
        out = bson_strdup_printf("%s.%s", qs, qt);
    PQfreemem(qs);
    PQfreemem(qt);
    return out;
}

bool pgutil_copy_begin(pgutil_copy *c, PGconn *pg, const char *copy_sql, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->pg = pg;
    PGresult *r = PQexec(pg, copy_sql);
    bool ok = PQresultStatus(r) == PGRES_COPY_IN;
    if (!ok)
        snprintf(err, errlen, "COPY did not start: %s: %.200s", PQresultErrorMessage(r), copy_sql);
    PQclear(r);
    if (ok) {
        c->cap = COPY_CHUNK + 4096;
        c->buf = bson_malloc(c->cap);
    }
    return ok;
}

static bool copy_flush(pgutil_copy *c, char *err, size_t errlen)
{
    if (c->len && PQputCopyData(c->pg, c->buf, (int)c->len) != 1) {
        snprintf(err, errlen, "PQputCopyData failed: %s", PQerrorMessage(c->pg));
        return false;
    }
    c->len = 0;
    return true;
}

/* Appends s[0..len) escaped for COPY text format (room checked by the caller). */
static char *put_escaped(char *o, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        switch (ch) {
        case '\\':
            *o++ = '\\';
            *o++ = '\\';
            break;
        case '\n':
            *o++ = '\\';
            *o++ = 'n';
            break;
        case '\r':
            *o++ = '\\';
            *o++ = 'r';
            break;
        case '\t':
            *o++ = '\\';
            *o++ = 't';
            break;
        default:
            *o++ = ch;
            break;
        }
    }
    return o;
}

bool pgutil_copy_doc(pgutil_copy *c, const bson_t *doc, char *err, size_t errlen)
{
    size_t jl = 0;
    bson_iter_t it;
    char *js = ejson_document(doc, &jl);
    char *key = bson_iter_init_find(&it, doc, "_id") ? ejson_key(bson_iter_value(&it)) : NULL;
    if (!js || !key) {
        snprintf(err, errlen, "ejson_document/ejson_key failed (invalid BSON or UTF-8, or no _id?)");
        free(js);
        free(key);
        return false;
    }
    size_t kl = strlen(key);
    /* Worst case every byte doubles, plus the tab and the newline. */
    size_t need = 2 * (jl + kl) + 2;
    if (c->len + need > c->cap) {
        if (!copy_flush(c, err, errlen)) {
            free(js);
            free(key);
            return false;
        }
        if (need > c->cap) {
            c->cap = need;
            c->buf = bson_realloc(c->buf, c->cap);
        }
    }
    char *o = put_escaped(c->buf + c->len, key, kl);
    *o++ = '\t';
    o = put_escaped(o, js, jl);
    *o++ = '\n';
    c->len = (size_t)(o - c->buf);
    c->rows++;
    free(js);
    free(key);
    if (c->len >= COPY_CHUNK)
        return copy_flush(c, err, errlen);
    return true;
}

bool pgutil_copy_end(pgutil_copy *c, bool ok, char *err, size_t errlen)
{
    if (!c->pg)
        return false;
    if (ok)
        ok = copy_flush(c, err, errlen);
    if (PQputCopyEnd(c->pg, ok ? NULL : "aborted by the test tool") != 1 && ok) {
        snprintf(err, errlen, "PQputCopyEnd failed: %s", PQerrorMessage(c->pg));
        ok = false;
    }
    PGresult *r;
    while ((r = PQgetResult(c->pg)) != NULL) {
        if (PQresultStatus(r) != PGRES_COMMAND_OK && ok) {
            snprintf(err, errlen, "COPY failed: %s", PQresultErrorMessage(r));
            ok = false;
        }
        PQclear(r);
    }
    bson_free(c->buf);
    c->buf = NULL;
    c->pg = NULL;
    return ok;
}

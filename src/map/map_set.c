/*
 * map_set.c — the set of column maps as a whole (map/map.h): finding a collection's map, freeing a set, splitting
 * paths, and the rules a complete set must follow, whoever built it.
 *
 * NOTES
 * The configuration reader (daemon/config_map.c) checks the syntax of each line as it reads it; what needs the whole
 * set (a prefix between two paths, a table written twice, the key column once the defaults are in) is checked here,
 * after the defaults are filled in, so that the rules hold for the model itself and not only for one way of
 * declaring it. An error names the line the model records (map_column.line, map_child.line, map_table.line,
 * map_collection.line), so the reader can put FILE:LINE in front.
 *
 * Equal column paths are allowed (two columns may take one field, as text and as a number); a path that is a strict
 * prefix of another is not, because the shorter column holds the longer one's value as well, and an update below
 * it would have two places to go. A child path may be neither a prefix of nor equal to any other path of its table.
 */
#include "map/convert.h"
#include "map/map.h"
#include "map/project.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"

/* ---- finding and freeing ----------------------------------------------------------------------------------------- */

const map_collection *map_find(const map_set *m, const char *db, const char *coll)
{
    for (size_t i = 0; m != NULL && i < m->n; i++)
        if (strcmp(m->colls[i].db, db) == 0 && strcmp(m->colls[i].coll, coll) == 0)
            return &m->colls[i];
    return NULL;
}

static void free_parts(char **parts, size_t n)
{
    for (size_t i = 0; parts != NULL && i < n; i++)
        free(parts[i]);
    free(parts);
}

static void table_clear(map_table *t)
{
    for (size_t i = 0; i < t->ncols; i++) {
        free(t->cols[i].name);
        free(t->cols[i].path);
        free_parts(t->cols[i].parts, t->cols[i].nparts);
    }
    free(t->cols);
    for (size_t i = 0; i < t->nchildren; i++) {
        free(t->children[i].path);
        free_parts(t->children[i].parts, t->children[i].nparts);
        if (t->children[i].table != NULL) {
            table_clear(t->children[i].table);
            free(t->children[i].table);
        }
    }
    free(t->children);
    free(t->rest_column);
    free(t->parent_key_column);
    free(t->position_column);
    project_paths_free(t->paths);
    memset(t, 0, sizeof *t);
}

void map_set_clear(map_set *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->n; i++) {
        free(m->colls[i].db);
        free(m->colls[i].coll);
        table_clear(&m->colls[i].table);
    }
    free(m->colls);
    m->colls = NULL;
    m->n = 0;
}

/* ---- paths ------------------------------------------------------------------------------------------------------- */

/* One part of a path: not empty, not an operator-like `$` name (MongoDB refuses those as field names in stored
 * documents, and an update path that starts with `$` is positional, never a field). */
static bool part_ok(const char *part, size_t len, char *why, size_t whylen)
{
    if (len == 0) {
        snprintf(why, whylen, "a path has no empty parts (no leading, trailing or double dot)");
        return false;
    }
    if (part[0] == '$') {
        snprintf(why, whylen, "a part of a path cannot start with $");
        return false;
    }
    return true;
}

bool map_path_split(const char *path, char ***parts, size_t *nparts, char *why, size_t whylen)
{
    size_t len = strlen(path), n = 1;

    *parts = NULL;
    *nparts = 0;
    if (!utf8_valid(path, len, false)) {
        snprintf(why, whylen, "a path is valid UTF-8");
        return false;
    }
    for (const char *p = path; *p; p++)
        n += *p == '.';
    char **out = calloc(n, sizeof *out);
    if (out == NULL) {
        snprintf(why, whylen, "out of memory");
        return false;
    }
    const char *start = path;
    for (size_t i = 0; i < n; i++) {
        const char *dot = strchr(start, '.');
        size_t plen = dot != NULL ? (size_t)(dot - start) : strlen(start);
        if (!part_ok(start, plen, why, whylen)) {
            free_parts(out, n);
            return false;
        }
        if ((out[i] = strndup(start, plen)) == NULL) {
            snprintf(why, whylen, "out of memory");
            free_parts(out, n);
            return false;
        }
        start = dot != NULL ? dot + 1 : start + plen;
    }
    *parts = out;
    *nparts = n;
    return true;
}

/* ---- checks ------------------------------------------------------------------------------------------------------ */

static bool fail(int *line, int at, char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static bool fail(int *line, int at, char *why, size_t whylen, const char *fmt, ...)
{
    va_list ap;

    *line = at;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
    return false;
}

/* A PostgreSQL identifier as the map writes it: quoted in SQL, so any text but NUL, within NAMEDATALEN - 1 bytes. */
static bool name_ok(const char *name, const char *what, int at, int *line, char *why, size_t whylen)
{
    size_t len = name != NULL ? strlen(name) : 0;
    if (len == 0 || len > NAMES_MAX)
        return fail(line, at, why, whylen, "%s \"%s\" must have 1 to %d bytes", what, name != NULL ? name : "",
                    NAMES_MAX);
    if (!utf8_valid(name, len, false))
        return fail(line, at, why, whylen, "%s is not valid UTF-8", what);
    return true;
}

/* PostgreSQL's own schemas and oplog2pg's: a map never writes there. */
static bool reserved_schema(const char *s)
{
    return strcmp(s, "oplog2pg") == 0 || strcmp(s, "information_schema") == 0 || strncmp(s, "pg_", 3) == 0;
}

/* a[0..na) is a strict prefix of b[0..nb) (strict: equal paths are not prefixes). */
static bool strict_prefix(char *const *a, size_t na, char *const *b, size_t nb)
{
    if (na >= nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i], b[i]) != 0)
            return false;
    return true;
}

static bool same_path(char *const *a, size_t na, char *const *b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i], b[i]) != 0)
            return false;
    return true;
}

static bool parts_ok(char *const *parts, size_t n, int at, int *line, char *why, size_t whylen)
{
    char reason[160];
    if (parts == NULL || n == 0)
        return fail(line, at, why, whylen, "the path is empty");
    for (size_t i = 0; i < n; i++) {
        if (parts[i] == NULL || !part_ok(parts[i], strlen(parts[i]), reason, sizeof reason) ||
            !utf8_valid(parts[i], strlen(parts[i]), false))
            return fail(line, at, why, whylen, "bad path: %s", parts[i] == NULL ? "missing part" : reason);
    }
    return true;
}

/* A table of the set with the line that names it: its child declaration for a child table, else the table's own. */
struct named {
    const map_table *t;
    int line;
};

/* The names of a table's extra columns (rest, parent key, position) against its columns and each other. */
static bool special_names_ok(const map_table *t, int *line, char *why, size_t whylen)
{
    const struct {
        const char *name, *what;
    } special[] = {
        {t->rest_column, "the rest column (rest_column)"},
        {t->parent_key_column, "the parent key column (parent_key)"},
        {t->position_column, "the position column (position)"},
    };
    size_t ns = sizeof special / sizeof special[0];

    for (size_t s = 0; s < ns; s++) {
        if (special[s].name == NULL)
            continue;
        if (!name_ok(special[s].name, special[s].what, t->line, line, why, whylen))
            return false;
        for (size_t s2 = 0; s2 < s; s2++)
            if (special[s2].name != NULL && strcmp(special[s].name, special[s2].name) == 0)
                return fail(line, t->line, why, whylen, "%s and %s are both named \"%s\"", special[s2].what,
                            special[s].what, special[s].name);
        for (size_t c = 0; c < t->ncols; c++)
            if (strcmp(t->cols[c].name, special[s].name) == 0)
                return fail(line, t->cols[c].line != 0 ? t->cols[c].line : t->line, why, whylen,
                            "duplicate column \"%s\": it is also the name of %s", special[s].name, special[s].what);
    }
    return true;
}

static bool table_ok(const map_table *t, bool child, int *line, char *why, size_t whylen);

static bool columns_ok(const map_table *t, int *line, char *why, size_t whylen)
{
    for (size_t c = 0; c < t->ncols; c++) {
        const map_column *col = &t->cols[c];
        int at = col->line != 0 ? col->line : t->line;
        if (!name_ok(col->name, "a column name", at, line, why, whylen) ||
            !parts_ok(col->parts, col->nparts, at, line, why, whylen))
            return false;
        if (col->type.array && col->type.scalar == MAP_JSONB)
            return fail(line, at, why, whylen,
                        "column \"%s\": jsonb[] is not a column type (a jsonb column holds "
                        "arrays itself)",
                        col->name);
        for (size_t d = 0; d < c; d++) {
            const map_column *o = &t->cols[d];
            if (strcmp(o->name, col->name) == 0 && o->line == 0)
                return fail(line, at, why, whylen,
                            "duplicate column \"%s\": it is the name of the key column that "
                            "oplog2pg adds (no column takes _id)",
                            col->name);
            if (strcmp(o->name, col->name) == 0)
                return fail(line, at, why, whylen, "duplicate column \"%s\" (also declared on line %d)", col->name,
                            o->line);
            const map_column *shorter = strict_prefix(o->parts, o->nparts, col->parts, col->nparts)   ? o
                                        : strict_prefix(col->parts, col->nparts, o->parts, o->nparts) ? col
                                                                                                      : NULL;
            if (shorter != NULL)
                return fail(line, at, why, whylen,
                            "column \"%s\" takes %s and column \"%s\" takes %s: one path lies inside the other, so "
                            "its value would be in both columns (map the outer one only, or the inner ones only)",
                            o->name, o->path, col->name, col->path);
        }
    }
    return true;
}

static bool children_ok(const map_table *t, int *line, char *why, size_t whylen)
{
    for (size_t k = 0; k < t->nchildren; k++) {
        const map_child *ch = &t->children[k];
        int at = ch->line != 0 ? ch->line : t->line;
        if (!parts_ok(ch->parts, ch->nparts, at, line, why, whylen))
            return false;
        if (ch->table == NULL)
            return fail(line, at, why, whylen, "child %s has no table", ch->path);
        if (t->parent == NULL && ch->nparts == 1 && strcmp(ch->parts[0], "_id") == 0)
            return fail(line, at, why, whylen, "the _id cannot be a child table (it is the key of the row)");
        for (size_t c = 0; c < t->ncols; c++) {
            const map_column *col = &t->cols[c];
            if (same_path(col->parts, col->nparts, ch->parts, ch->nparts) ||
                strict_prefix(col->parts, col->nparts, ch->parts, ch->nparts) ||
                strict_prefix(ch->parts, ch->nparts, col->parts, col->nparts))
                return fail(line, at, why, whylen,
                            "child table at %s and column \"%s\" (from %s) overlap: the array would be in both",
                            ch->path, col->name, col->path);
        }
        for (size_t d = 0; d < k; d++) {
            const map_child *o = &t->children[d];
            if (same_path(o->parts, o->nparts, ch->parts, ch->nparts) ||
                strict_prefix(o->parts, o->nparts, ch->parts, ch->nparts) ||
                strict_prefix(ch->parts, ch->nparts, o->parts, o->nparts))
                return fail(line, at, why, whylen,
                            "child tables at %s and at %s overlap (one path lies inside the "
                            "other)",
                            o->path, ch->path);
        }
        if (ch->table->parent != t)
            return fail(line, at, why, whylen, "child table at %s does not point back at its parent", ch->path);
        if (!table_ok(ch->table, true, line, why, whylen))
            return false;
    }
    return true;
}

static bool table_ok(const map_table *t, bool child, int *line, char *why, size_t whylen)
{
    if (!name_ok(t->name.schema, "the schema name", t->line, line, why, whylen) ||
        !name_ok(t->name.table, "the table name", t->line, line, why, whylen))
        return false;
    if (t->on_type_error == MAP_ON_TYPE_ERROR_INHERIT)
        return fail(line, t->line, why, whylen, "table %s.%s: on_type_error is not set", t->name.schema, t->name.table);
    if ((t->rest == MAP_REST_DROP) != (t->rest_column == NULL))
        return fail(line, t->line, why, whylen, "table %s.%s: rest = %s %s", t->name.schema, t->name.table,
                    map_rest_name(t->rest), t->rest == MAP_REST_DROP ? "has no rest column" : "needs a rest column");
    if (!columns_ok(t, line, why, whylen) || !special_names_ok(t, line, why, whylen))
        return false;
    if (child) {
        if (t->parent_key_column == NULL || t->position_column == NULL)
            return fail(line, t->line, why, whylen, "child table %s.%s needs its parent key and position columns",
                        t->name.schema, t->name.table);
        if (t->key != SIZE_MAX)
            return fail(line, t->line, why, whylen,
                        "child table %s.%s: its key is (parent key, position), not a "
                        "column",
                        t->name.schema, t->name.table);
    } else {
        if (t->parent_key_column != NULL || t->position_column != NULL || t->parent != NULL)
            return fail(line, t->line, why, whylen, "table %s.%s is a collection's table, not a child table",
                        t->name.schema, t->name.table);
        if (t->key >= t->ncols)
            return fail(line, t->line, why, whylen, "table %s.%s has no key column", t->name.schema, t->name.table);
        const map_column *k = &t->cols[t->key];
        if (k->nparts != 1 || strcmp(k->parts[0], "_id") != 0)
            return fail(line, k->line != 0 ? k->line : t->line, why, whylen,
                        "the key column \"%s\" takes %s: a key column takes _id", k->name, k->path);
        if (!map_type_key_ok(&k->type)) {
            char type[64];
            return fail(line, k->line != 0 ? k->line : t->line, why, whylen,
                        "the key column \"%s\" is %s: a %s cannot hold every _id exactly (two _ids MongoDB keeps "
                        "apart could be one row); use a scalar type, or leave _id unmapped for the key oplog2pg adds",
                        k->name, map_type_sql(&k->type, type, sizeof type),
                        k->type.array ? "key of an array type" : "jsonb key");
        }
    }
    return children_ok(t, line, why, whylen);
}

/* Every table of the set with the line that names it, depth first. */
static bool collect(const map_table *t, int at, struct named **v, size_t *n, size_t *cap)
{
    if (*n == *cap) {
        size_t ncap = *cap ? 2 * *cap : 16;
        struct named *nv = realloc(*v, ncap * sizeof *nv);
        if (nv == NULL)
            return false;
        *v = nv;
        *cap = ncap;
    }
    (*v)[(*n)++] = (struct named){t, at};
    for (size_t k = 0; k < t->nchildren; k++)
        if (t->children[k].table != NULL &&
            !collect(t->children[k].table, t->children[k].line != 0 ? t->children[k].line : t->children[k].table->line,
                     v, n, cap))
            return false;
    return true;
}

bool map_set_check(const map_set *m, int *line, char *why, size_t whylen)
{
    struct named *tables = NULL;
    size_t n = 0, cap = 0;
    bool ok = true;

    *line = 0;
    for (size_t i = 0; i < m->n && ok; i++) {
        const map_collection *mc = &m->colls[i];
        for (size_t j = 0; j < i && ok; j++)
            if (strcmp(m->colls[j].db, mc->db) == 0 && strcmp(m->colls[j].coll, mc->coll) == 0)
                ok = fail(line, mc->line, why, whylen, "a second map for %s.%s (the first is on line %d)", mc->db,
                          mc->coll, m->colls[j].line);
        if (ok)
            ok = table_ok(&mc->table, false, line, why, whylen);
        if (ok && !collect(&mc->table, mc->table.line, &tables, &n, &cap))
            ok = fail(line, 0, why, whylen, "out of memory");
    }
    for (size_t i = 0; i < n && ok; i++) {
        const map_table *t = tables[i].t;
        if (reserved_schema(t->name.schema))
            ok = fail(line, tables[i].line, why, whylen,
                      "schema %s is reserved (oplog2pg, information_schema and pg_* are not for mapped tables)",
                      t->name.schema);
        for (size_t j = 0; j < i && ok; j++)
            if (strcmp(tables[j].t->name.schema, t->name.schema) == 0 &&
                strcmp(tables[j].t->name.table, t->name.table) == 0)
                ok = fail(line, tables[i].line, why, whylen,
                          "table %s.%s is written by two maps or child tables (also on line %d)", t->name.schema,
                          t->name.table, tables[j].line);
    }
    free(tables);
    return ok;
}

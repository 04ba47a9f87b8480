/*
 * config_map.c — the [map DB.COLLECTION] and [child SCHEMA.TABLE] sections of the configuration, read into a map_set
 * (include/daemon/config_map.h). Writing the map out again (INI sections for `config`, text and JSON for the `map`
 * command) is config_map_print.c's.
 *
 * NOTES
 * Reading happens in two steps. While the INI reader goes through the file, each map section is kept as written
 * (struct section): its keys are checked one by one, so a bad type, path or value is reported at its own line. Only
 * when the file is complete can the sections be joined up (config_map_finish): a map's `table` may come after its
 * child.PATH lines, and a [child] section may stand before or after the map that names it, so which schema a child
 * table lands in, which [child] section a child.PATH line names, the default key column and the rest column are
 * settled there, and then map_set_check (map/map_set.c) checks the complete set. Every error still names a line: the
 * model records the line of each column, child and table.
 *
 * Child tables of child tables are refused: a child row's key is (the collection row's key, position), which cannot
 * tell apart the elements of two different parent elements' arrays.
 *
 * on_type_error is written dead_letter or null, in the file, the `map` output and the JSON alike; the reader also
 * accepts dead-letter, the spelling of [replication] on_error (and of map_on_type_error_name, for log messages).
 */
#include "daemon/config_map.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon/config_ini.h"
#include "daemon/config_values.h"
#include "util/utf8.h"

/* The fixed keys of the sections; column.NAME and child.PATH are the others. */
enum key_id { K_TABLE, K_KEY, K_PARENT_KEY, K_POSITION, K_REST, K_REST_COLUMN, K_ON_TYPE_ERROR, K_ADOPT, NKEYS };

static const struct {
    const char *name;
    bool in_map, in_child;
} keys[NKEYS] = {
    [K_TABLE] = {"table", true, false},
    [K_KEY] = {"key", true, false},
    [K_PARENT_KEY] = {"parent_key", false, true},
    [K_POSITION] = {"position", false, true},
    [K_REST] = {"rest", true, true},
    [K_REST_COLUMN] = {"rest_column", true, true},
    [K_ON_TYPE_ERROR] = {"on_type_error", true, true},
    [K_ADOPT] = {"adopt", true, true},
};

/* A child.PATH line. */
struct child_decl {
    char *path;
    char **parts;
    size_t nparts;
    char *schema; /* NULL: the parent's */
    char *table;
    int line;
};

/* One [map ...] or [child ...] section as written. */
struct section {
    bool child;
    int line;
    char label[CONFIG_INI_MAX_LINE + 16]; /* "[map shop.orders]", for messages */
    char *db, *coll;                      /* [map DB.COLL] */
    char *schema, *table;                 /* [child S.T]; a map's `table` (schema NULL: the database's) */
    int seen[NKEYS];                      /* line of each fixed key, 0 when not given */
    map_rest rest;
    map_on_type_error on_type_error;
    bool adopt;
    char *key, *rest_column, *parent_key, *position;
    map_column *cols;
    size_t ncols, capcols;
    struct child_decl *children;
    size_t nchildren, capchildren;
    bool claimed; /* [child]: named by a child.PATH line */
};

struct config_map_reader {
    char *file;
    struct section **secs;
    size_t n, cap;
    struct section *cur; /* the section keys go to; NULL after another section or a refused header */
};

/* ---- small helpers ----------------------------------------------------------------------------------------------- */

static void free_parts(char **parts, size_t n)
{
    for (size_t i = 0; parts != NULL && i < n; i++)
        free(parts[i]);
    free(parts);
}

static void column_free(map_column *c)
{
    free(c->name);
    free(c->path);
    free_parts(c->parts, c->nparts);
    memset(c, 0, sizeof *c);
}

static void section_free(struct section *s)
{
    if (s == NULL)
        return;
    free(s->db);
    free(s->coll);
    free(s->schema);
    free(s->table);
    free(s->key);
    free(s->rest_column);
    free(s->parent_key);
    free(s->position);
    for (size_t i = 0; i < s->ncols; i++)
        column_free(&s->cols[i]);
    free(s->cols);
    for (size_t i = 0; i < s->nchildren; i++) {
        free(s->children[i].path);
        free_parts(s->children[i].parts, s->children[i].nparts);
        free(s->children[i].schema);
        free(s->children[i].table);
    }
    free(s->children);
    free(s);
}

/* What follows prefix w (any case) in s, or NULL when s does not start with it. */
static const char *after_prefix(const char *s, const char *w)
{
    size_t n = strlen(w);
    return strncasecmp(s, w, n) == 0 ? s + n : NULL;
}

/* A PostgreSQL name as the map takes it: 1 to 63 bytes of UTF-8 (quoted in SQL, so anything else goes). */
static bool check_name(const char *name, const char *what, char *err, size_t errlen)
{
    size_t len = strlen(name);
    if (len == 0 || len > NAMES_MAX) {
        snprintf(err, errlen, "%s \"%s\" must have 1 to %d bytes (PostgreSQL's limit)", what, name, NAMES_MAX);
        return false;
    }
    if (!utf8_valid(name, len, false)) {
        snprintf(err, errlen, "%s is not valid UTF-8", what);
        return false;
    }
    return true;
}

/* "SCHEMA.TABLE" or "TABLE", split at the first dot (a schema never holds one: it comes from a database name, and
 * MongoDB forbids dots there; a table may, so "shop.orders.v2" is table orders.v2 of schema shop). *schema is NULL
 * when none is written. */
static bool split_table(const char *text, char **schema, char **table, char *err, size_t errlen)
{
    const char *dot = strchr(text, '.');
    const char *tname = dot != NULL ? dot + 1 : text;
    char *s = NULL, *t = NULL;

    *schema = NULL;
    *table = NULL;
    if (dot != NULL) {
        if ((s = strndup(text, (size_t)(dot - text))) == NULL)
            goto nomem;
        if (!check_name(s, "the schema name", err, errlen)) {
            free(s);
            return false;
        }
    }
    if (!check_name(tname, "the table name", err, errlen)) {
        free(s);
        return false;
    }
    if ((t = strdup(tname)) == NULL)
        goto nomem;
    *schema = s;
    *table = t;
    return true;
nomem:
    free(s);
    snprintf(err, errlen, "out of memory");
    return false;
}

#define ADD(arr, n, cap) ((n) < (cap) || grow((void **)&(arr), &(cap), sizeof *(arr)))

static bool grow(void **arr, size_t *cap, size_t size)
{
    size_t ncap = *cap ? 2 * *cap : 8;
    void *p = realloc(*arr, ncap * size);
    if (p == NULL)
        return false;
    *arr = p;
    *cap = ncap;
    return true;
}

/* ---- reading: section headers ------------------------------------------------------------------------------------ */

enum kind { KIND_OTHER = 0, KIND_MAP, KIND_CHILD };

/* Which kind of section a header names; *rest is what follows its first word, trimmed on the left. */
static enum kind section_kind(const char *name, const char **rest)
{
    const char *p = name, *q;
    enum kind k = KIND_OTHER;

    while (isspace((unsigned char)*p))
        p++;
    if ((q = after_prefix(p, "map")) != NULL && (*q == '\0' || isspace((unsigned char)*q)))
        k = KIND_MAP;
    else if ((q = after_prefix(p, "child")) != NULL && (*q == '\0' || isspace((unsigned char)*q)))
        k = KIND_CHILD;
    if (k != KIND_OTHER && rest != NULL) {
        while (isspace((unsigned char)*q))
            q++;
        *rest = q;
    }
    return k;
}

bool config_map_is_section(const char *name)
{
    return section_kind(name, NULL) != KIND_OTHER;
}

config_map_reader *config_map_reader_new(const char *file)
{
    config_map_reader *r = calloc(1, sizeof *r);
    if (r == NULL || (r->file = strdup(file)) == NULL) {
        free(r);
        return NULL;
    }
    return r;
}

void config_map_reader_free(config_map_reader *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->n; i++)
        section_free(r->secs[i]);
    free(r->secs);
    free(r->file);
    free(r);
}

/* Fills s from the name of a [map DB.COLL] header (name: what follows "map", trimmed). */
static bool map_header(config_map_reader *r, struct section *s, const char *name, char *err, size_t errlen)
{
    const char *dot = strchr(name, '.');
    pg_name pg;
    char why[256];

    if (dot == NULL || dot == name || dot[1] == '\0') {
        snprintf(err, errlen, "%s: name the collection as [map DB.COLLECTION]", s->label);
        return false;
    }
    if ((s->db = strndup(name, (size_t)(dot - name))) == NULL || (s->coll = strdup(dot + 1)) == NULL) {
        snprintf(err, errlen, "out of memory");
        return false;
    }
    if (!names_map(s->db, s->coll, &pg, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", s->label, why);
        return false;
    }
    for (size_t i = 0; i < r->n; i++) {
        const struct section *o = r->secs[i];
        if (!o->child && strcmp(o->db, s->db) == 0 && strcmp(o->coll, s->coll) == 0) {
            snprintf(err, errlen, "%s: a second map for %s.%s (the first is on line %d)", s->label, s->db, s->coll,
                     o->line);
            return false;
        }
    }
    return true;
}

/* Fills s from the name of a [child SCHEMA.TABLE] header. */
static bool child_header(config_map_reader *r, struct section *s, const char *name, char *err, size_t errlen)
{
    char why[256];

    if (!split_table(name, &s->schema, &s->table, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", s->label, why);
        return false;
    }
    if (s->schema == NULL) {
        snprintf(err, errlen, "%s: name the child table with its schema, as it is resolved: [child SCHEMA.TABLE]",
                 s->label);
        return false;
    }
    for (size_t i = 0; i < r->n; i++) {
        const struct section *o = r->secs[i];
        if (o->child && strcmp(o->schema, s->schema) == 0 && strcmp(o->table, s->table) == 0) {
            snprintf(err, errlen, "%s: a second section for child table %s.%s (the first is on line %d)", s->label,
                     s->schema, s->table, o->line);
            return false;
        }
    }
    return true;
}

bool config_map_section(config_map_reader *r, const char *name, int line, char *err, size_t errlen)
{
    const char *rest;
    enum kind k = section_kind(name, &rest);

    r->cur = NULL;
    if (k == KIND_OTHER)
        return true;
    struct section *s = calloc(1, sizeof *s);
    if (s == NULL || !ADD(r->secs, r->n, r->cap)) {
        free(s);
        snprintf(err, errlen, "out of memory");
        return false;
    }
    s->child = k == KIND_CHILD;
    s->line = line;
    s->on_type_error = MAP_ON_TYPE_ERROR_DEAD_LETTER;
    /* The name trimmed on the right too: "[map  shop.orders ]" is shop.orders. */
    size_t len = strlen(rest);
    while (len > 0 && isspace((unsigned char)rest[len - 1]))
        len--;
    char target[CONFIG_INI_MAX_LINE + 1];
    snprintf(target, sizeof target, "%.*s", (int)len, rest);
    snprintf(s->label, sizeof s->label, "[%s %s]", s->child ? "child" : "map", target);
    bool ok;
    if (target[0] == '\0') {
        snprintf(err, errlen, "[%s]: %s", s->child ? "child" : "map",
                 s->child ? "name the child table: [child SCHEMA.TABLE]" : "name the collection: [map DB.COLLECTION]");
        ok = false;
    } else {
        ok = s->child ? child_header(r, s, target, err, errlen) : map_header(r, s, target, err, errlen);
    }
    if (!ok) {
        section_free(s);
        return false;
    }
    r->secs[r->n++] = s;
    r->cur = s;
    return true;
}

/* ---- reading: keys ----------------------------------------------------------------------------------------------- */

static bool parse_rest(const char *v, map_rest *out)
{
    for (map_rest r = MAP_REST_DOC; r <= MAP_REST_DROP; r++)
        if (strcasecmp(v, map_rest_name(r)) == 0) {
            *out = r;
            return true;
        }
    return false;
}

static bool parse_on_type_error(const char *v, map_on_type_error *out)
{
    if (strcasecmp(v, "dead_letter") == 0 || strcasecmp(v, "dead-letter") == 0)
        *out = MAP_ON_TYPE_ERROR_DEAD_LETTER;
    else if (strcasecmp(v, "null") == 0)
        *out = MAP_ON_TYPE_ERROR_NULL;
    else
        return false;
    return true;
}

/* Copies text[0..len) with its runs of whitespace made one space and the ends trimmed ("double   precision"). */
static char *squeeze(const char *text, size_t len)
{
    char *out = malloc(len + 1);
    size_t o = 0;
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        if (isspace((unsigned char)text[i])) {
            if (o > 0 && out[o - 1] != ' ')
                out[o++] = ' ';
        } else {
            out[o++] = text[i];
        }
    }
    while (o > 0 && out[o - 1] == ' ')
        o--;
    out[o] = '\0';
    return out;
}

#define COLUMN_SYNTAX "TYPE [from PATH] [on_type_error=null|dead_letter]"

/* A column's value: "TYPE [from PATH] [on_type_error=null|dead_letter]". TYPE may hold spaces ("double precision");
 * it ends at the word "from" or at "on_type_error=". PATH runs up to a final on_type_error= word, so a field name
 * with a space in it can be written. *path is NULL when there is no "from". */
static bool parse_column_value(const char *value, char **type, char **path, map_on_type_error *ote, char *err,
                               size_t errlen)
{
    const char *from_at = NULL, *ote_at = NULL, *ote_end = NULL;
    const char *p = value;
    static const char ote_word[] = "on_type_error=";

    *type = *path = NULL;
    *ote = MAP_ON_TYPE_ERROR_INHERIT;
    while (*p) {
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '\0')
            break;
        const char *ws = p;
        while (*p && !isspace((unsigned char)*p))
            p++;
        size_t wl = (size_t)(p - ws);
        if (ote_at != NULL) {
            snprintf(err, errlen, "\"%.*s\" after on_type_error=: expected " COLUMN_SYNTAX, (int)wl, ws);
            return false;
        }
        if (from_at == NULL && wl == 4 && strncasecmp(ws, "from", 4) == 0) {
            from_at = ws;
        } else if (wl >= sizeof ote_word - 1 && strncasecmp(ws, ote_word, sizeof ote_word - 1) == 0) {
            ote_at = ws;
            ote_end = p;
        }
    }
    const char *type_end = from_at != NULL ? from_at : ote_at != NULL ? ote_at : value + strlen(value);
    if (ote_at != NULL) {
        const char *v = ote_at + sizeof ote_word - 1;
        char word[32];
        snprintf(word, sizeof word, "%.*s", (int)(ote_end - v), v);
        if (!parse_on_type_error(word, ote)) {
            snprintf(err, errlen, "on_type_error=%s: expected on_type_error=null or on_type_error=dead_letter", word);
            return false;
        }
    }
    if ((*type = squeeze(value, (size_t)(type_end - value))) == NULL)
        goto nomem;
    if ((*type)[0] == '\0') {
        snprintf(err, errlen, "no type: expected " COLUMN_SYNTAX);
        goto fail;
    }
    if (from_at != NULL) {
        const char *ps = from_at + 4, *pe = ote_at != NULL ? ote_at : value + strlen(value);
        while (ps < pe && isspace((unsigned char)*ps))
            ps++;
        while (pe > ps && isspace((unsigned char)pe[-1]))
            pe--;
        if (ps == pe) {
            snprintf(err, errlen, "\"from\" needs a path: expected " COLUMN_SYNTAX);
            goto fail;
        }
        if ((*path = strndup(ps, (size_t)(pe - ps))) == NULL)
            goto nomem;
    }
    return true;
nomem:
    snprintf(err, errlen, "out of memory");
fail:
    free(*type);
    free(*path);
    *type = *path = NULL;
    return false;
}

/* column.NAME = TYPE [from PATH] [on_type_error=...] */
static bool add_column(struct section *s, const char *key, const char *name, const char *value, int line, char *err,
                       size_t errlen)
{
    char why[256], *type_text = NULL, *path = NULL;
    map_column col = {.line = line};

    if (!check_name(name, "a column name", why, sizeof why)) {
        snprintf(err, errlen, "%s %s: %s", s->label, key, why);
        return false;
    }
    for (size_t i = 0; i < s->ncols; i++)
        if (strcmp(s->cols[i].name, name) == 0) {
            snprintf(err, errlen, "%s %s: duplicate column \"%s\" (first declared on line %d)", s->label, key, name,
                     s->cols[i].line);
            return false;
        }
    if (!parse_column_value(value, &type_text, &path, &col.on_type_error, why, sizeof why)) {
        snprintf(err, errlen, "%s %s: %s", s->label, key, why);
        return false;
    }
    if (!map_type_parse(type_text, &col.type)) {
        snprintf(err, errlen,
                 "%s %s: unknown type \"%s\" (a column is text, varchar(N), boolean, smallint, integer, bigint, "
                 "numeric, real, double precision, timestamptz, timestamp, date, uuid, bytea or jsonb, or an array "
                 "of one of them but jsonb: TYPE[])",
                 s->label, key, type_text);
        goto fail;
    }
    bool defaulted = path == NULL;
    if (defaulted && (path = strdup(name)) == NULL)
        goto nomem;
    if (!map_path_split(path, &col.parts, &col.nparts, why, sizeof why)) {
        snprintf(err, errlen, "%s %s: bad path \"%s\": %s%s", s->label, key, path, why,
                 defaulted ? " (the path is the column's name unless \"from PATH\" says otherwise)" : "");
        goto fail;
    }
    if ((col.name = strdup(name)) == NULL || !ADD(s->cols, s->ncols, s->capcols))
        goto nomem;
    col.path = path;
    s->cols[s->ncols++] = col;
    free(type_text);
    return true;
nomem:
    snprintf(err, errlen, "out of memory");
fail:
    free(type_text);
    free(path);
    free(col.name);
    free_parts(col.parts, col.nparts);
    return false;
}

/* child.PATH = [SCHEMA.]TABLE */
static bool add_child(struct section *s, const char *key, const char *path, const char *value, int line, char *err,
                      size_t errlen)
{
    char why[256];
    struct child_decl d = {.line = line};

    if (s->child) {
        snprintf(err, errlen,
                 "%s %s: a child table cannot have child tables of its own (its rows are keyed by the collection "
                 "row's key and their position, which cannot tell the arrays of two elements apart); map the array "
                 "as a jsonb column instead",
                 s->label, key);
        return false;
    }
    for (size_t i = 0; i < s->nchildren; i++)
        if (strcmp(s->children[i].path, path) == 0) {
            snprintf(err, errlen, "%s %s: set twice (first on line %d)", s->label, key, s->children[i].line);
            return false;
        }
    if (!map_path_split(path, &d.parts, &d.nparts, why, sizeof why)) {
        snprintf(err, errlen, "%s %s: bad path \"%s\": %s", s->label, key, path, why);
        return false;
    }
    if (!split_table(value, &d.schema, &d.table, why, sizeof why)) {
        snprintf(err, errlen, "%s %s: %s (expected TABLE or SCHEMA.TABLE)", s->label, key, why);
        free_parts(d.parts, d.nparts);
        return false;
    }
    if ((d.path = strdup(path)) == NULL || !ADD(s->children, s->nchildren, s->capchildren)) {
        snprintf(err, errlen, "out of memory");
        free(d.path);
        free(d.schema);
        free(d.table);
        free_parts(d.parts, d.nparts);
        return false;
    }
    s->children[s->nchildren++] = d;
    return true;
}

/* The keys a section of s's kind takes, for a message. */
static void list_keys(const struct section *s, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int k = 0; k < NKEYS; k++)
        if (s->child ? keys[k].in_child : keys[k].in_map)
            off += (size_t)snprintf(buf + off, off < len ? len - off : 0, "%s, ", keys[k].name);
    snprintf(buf + (off < len ? off : len - 1), off < len ? len - off : 1, "column.NAME%s",
             s->child ? "" : ", child.PATH");
}

static bool set_name(char **field, const struct section *s, const char *key, const char *value, char *err,
                     size_t errlen)
{
    char why[256];
    if (!check_name(value, "a column name", why, sizeof why)) {
        snprintf(err, errlen, "%s %s: %s", s->label, key, why);
        return false;
    }
    if ((*field = strdup(value)) == NULL) {
        snprintf(err, errlen, "out of memory");
        return false;
    }
    return true;
}

bool config_map_key(config_map_reader *r, const char *name, const char *value, bool continuation, int line, char *err,
                    size_t errlen)
{
    struct section *s = r->cur;
    const char *rest;
    char why[256];

    if (s == NULL) {
        err[0] = '\0'; /* the section header was refused, and said why */
        return false;
    }
    if (continuation) {
        snprintf(err, errlen, "%s %s: a line of a map section cannot be continued on the next line", s->label, name);
        return false;
    }
    if ((rest = after_prefix(name, "column.")) != NULL)
        return add_column(s, name, rest, value, line, err, errlen);
    if ((rest = after_prefix(name, "child.")) != NULL)
        return add_child(s, name, rest, value, line, err, errlen);

    int k = 0;
    while (k < NKEYS && !(strcasecmp(keys[k].name, name) == 0 && (s->child ? keys[k].in_child : keys[k].in_map)))
        k++;
    if (k == NKEYS) {
        char list[256];
        list_keys(s, list, sizeof list);
        snprintf(err, errlen, "%s %s: unknown key (the keys of a %s section are: %s)", s->label, name,
                 s->child ? "[child]" : "[map]", list);
        return false;
    }
    if (s->seen[k] != 0) {
        snprintf(err, errlen, "%s %s: set twice (first on line %d)", s->label, keys[k].name, s->seen[k]);
        return false;
    }
    switch ((enum key_id)k) {
    case K_TABLE:
        if (!split_table(value, &s->schema, &s->table, why, sizeof why)) {
            snprintf(err, errlen, "%s table: %s (expected TABLE or SCHEMA.TABLE)", s->label, why);
            return false;
        }
        break;
    case K_KEY:
        if (!set_name(&s->key, s, "key", value, err, errlen))
            return false;
        break;
    case K_PARENT_KEY:
        if (!set_name(&s->parent_key, s, "parent_key", value, err, errlen))
            return false;
        break;
    case K_POSITION:
        if (!set_name(&s->position, s, "position", value, err, errlen))
            return false;
        break;
    case K_REST_COLUMN:
        if (!set_name(&s->rest_column, s, "rest_column", value, err, errlen))
            return false;
        break;
    case K_REST:
        if (!parse_rest(value, &s->rest)) {
            snprintf(err, errlen, "%s rest: \"%s\" is not one of doc, extra, drop", s->label, value);
            return false;
        }
        break;
    case K_ON_TYPE_ERROR:
        if (!parse_on_type_error(value, &s->on_type_error)) {
            snprintf(err, errlen, "%s on_type_error: \"%s\" is not one of dead_letter, null", s->label, value);
            return false;
        }
        break;
    case K_ADOPT:
        if (!config_parse_bool(value, &s->adopt, why, sizeof why)) {
            snprintf(err, errlen, "%s adopt: %s", s->label, why);
            return false;
        }
        break;
    case NKEYS:
        break;
    }
    s->seen[k] = line;
    return true;
}

/* ---- joining the sections up ------------------------------------------------------------------------------------- */

struct finishing {
    config_map_reader *r;
    char *err;
    size_t errlen;
};

static bool fin_error(struct finishing *f, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static bool fin_error(struct finishing *f, int line, const char *fmt, ...)
{
    char msg[640];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    config_ini_error(f->err, f->errlen, f->r->file, line, "%s", msg);
    return false;
}

static bool path_is_id(const map_column *c)
{
    return c->nparts == 1 && strcmp(c->parts[0], "_id") == 0;
}

/* The key column of a collection's table: the one `key` names, else the one that takes _id, else one added. */
static bool settle_key(struct finishing *f, struct section *s, map_table *t)
{
    if (s->key != NULL) {
        for (size_t i = 0; i < t->ncols; i++) {
            if (strcmp(t->cols[i].name, s->key) != 0)
                continue;
            if (!path_is_id(&t->cols[i]))
                return fin_error(f, s->seen[K_KEY], "%s key: column \"%s\" takes %s; the key column takes _id",
                                 s->label, s->key, t->cols[i].path);
            t->key = i;
            return true;
        }
        return fin_error(f, s->seen[K_KEY],
                         "%s key: no column \"%s\" (the key is a column of this section that takes _id: "
                         "column.%s = TYPE from _id)",
                         s->label, s->key, s->key);
    }
    size_t found = SIZE_MAX;
    for (size_t i = 0; i < t->ncols; i++) {
        if (!path_is_id(&t->cols[i]))
            continue;
        if (found != SIZE_MAX)
            return fin_error(f, t->cols[i].line,
                             "%s column.%s: columns \"%s\" and \"%s\" both take _id: say which is the key with "
                             "key = NAME",
                             s->label, t->cols[i].name, t->cols[found].name, t->cols[i].name);
        found = i;
    }
    if (found != SIZE_MAX) {
        t->key = found;
        return true;
    }
    for (size_t i = 0; i < t->ncols; i++)
        if (strcmp(t->cols[i].name, "_id") == 0)
            return fin_error(f, t->cols[i].line,
                             "%s column._id: no column takes _id, so oplog2pg adds the key column \"_id\" (the key "
                             "text of the _id), and this column has its name: take _id with it (from _id) or name it "
                             "otherwise",
                             s->label);
    /* The key as a jsonb-shaped table has it: text, the key text of the _id (map/ejson.h). */
    map_column id = {.type = {.scalar = MAP_TEXT}, .nparts = 1, .line = 0};
    map_column *cols = realloc(t->cols, (t->ncols + 1) * sizeof *cols);
    if (cols == NULL)
        return fin_error(f, 0, "out of memory");
    t->cols = cols;
    if ((id.name = strdup("_id")) == NULL || (id.path = strdup("_id")) == NULL ||
        (id.parts = calloc(1, sizeof *id.parts)) == NULL || (id.parts[0] = strdup("_id")) == NULL) {
        column_free(&id);
        return fin_error(f, 0, "out of memory");
    }
    memmove(t->cols + 1, t->cols, t->ncols * sizeof *t->cols);
    t->cols[0] = id;
    t->ncols++;
    t->key = 0;
    return true;
}

static struct section *find_child_section(config_map_reader *r, const char *schema, const char *table)
{
    for (size_t i = 0; i < r->n; i++) {
        struct section *s = r->secs[i];
        if (s->child && strcmp(s->schema, schema) == 0 && strcmp(s->table, table) == 0)
            return s;
    }
    return NULL;
}

static char *dup_or(const char *a, const char *b)
{
    return strdup(a != NULL ? a : b);
}

/* Builds t (whose name is set) from section s; parent NULL for a collection's table. */
static bool build_table(struct finishing *f, struct section *s, map_table *t, map_table *parent)
{
    t->rest = s->seen[K_REST] != 0 ? s->rest : parent != NULL ? MAP_REST_DROP : MAP_REST_DOC;
    if (t->rest == MAP_REST_DROP && s->rest_column != NULL)
        return fin_error(f, s->seen[K_REST_COLUMN], "%s rest_column: rest = drop keeps no rest column", s->label);
    if (t->rest != MAP_REST_DROP &&
        (t->rest_column = dup_or(s->rest_column, t->rest == MAP_REST_DOC ? "doc" : "extra")) == NULL)
        return fin_error(f, 0, "out of memory");
    t->on_type_error = s->seen[K_ON_TYPE_ERROR] != 0 ? s->on_type_error
                       : parent != NULL              ? parent->on_type_error
                                                     : MAP_ON_TYPE_ERROR_DEAD_LETTER;
    t->adopt = s->adopt;
    t->cols = s->cols;
    t->ncols = s->ncols;
    s->cols = NULL;
    s->ncols = s->capcols = 0;
    if (parent == NULL) {
        if (!settle_key(f, s, t))
            return false;
    } else {
        t->key = SIZE_MAX;
        t->parent = parent;
        t->line = s->line;
        if ((t->parent_key_column = dup_or(s->parent_key, "parent_key")) == NULL ||
            (t->position_column = dup_or(s->position, "position")) == NULL)
            return fin_error(f, 0, "out of memory");
    }
    if (s->nchildren > 0 && (t->children = calloc(s->nchildren, sizeof *t->children)) == NULL)
        return fin_error(f, 0, "out of memory");
    for (size_t i = 0; i < s->nchildren; i++) {
        struct child_decl *d = &s->children[i];
        map_child *ch = &t->children[t->nchildren++];
        ch->path = d->path;
        ch->parts = d->parts;
        ch->nparts = d->nparts;
        ch->line = d->line;
        d->path = NULL;
        d->parts = NULL;
        d->nparts = 0;
        const char *schema = d->schema != NULL ? d->schema : t->name.schema;
        struct section *cs = find_child_section(f->r, schema, d->table);
        if (cs == NULL)
            return fin_error(f, d->line, "%s child.%s: no [child %s.%s] section declares this child table", s->label,
                             ch->path, schema, d->table);
        if (cs->claimed)
            return fin_error(f, d->line, "%s child.%s: table %s.%s is already the child table of another array",
                             s->label, ch->path, schema, d->table);
        cs->claimed = true;
        if ((ch->table = calloc(1, sizeof *ch->table)) == NULL)
            return fin_error(f, 0, "out of memory");
        snprintf(ch->table->name.schema, sizeof ch->table->name.schema, "%s", schema);
        snprintf(ch->table->name.table, sizeof ch->table->name.table, "%s", d->table);
        if (!build_table(f, cs, ch->table, t))
            return false;
    }
    return true;
}

/* The section that holds line (the last header at or above it), for the label of an error found in the model. */
static const struct section *section_at_line(const config_map_reader *r, int line)
{
    const struct section *best = NULL;
    for (size_t i = 0; i < r->n; i++)
        if (r->secs[i]->line <= line && (best == NULL || r->secs[i]->line > best->line))
            best = r->secs[i];
    return best;
}

bool config_map_finish(config_map_reader *r, map_set *out, char *err, size_t errlen)
{
    struct finishing f = {r, err, errlen};
    map_set set = {0};
    size_t nmaps = 0;
    char why[512];

    for (size_t i = 0; i < r->n; i++)
        nmaps += !r->secs[i]->child;
    /* Sized once: a child table points at its parent, which lives in this array. */
    if (nmaps > 0 && (set.colls = calloc(nmaps, sizeof *set.colls)) == NULL)
        return fin_error(&f, 0, "out of memory");
    for (size_t i = 0; i < r->n; i++) {
        struct section *s = r->secs[i];
        if (s->child)
            continue;
        map_collection *mc = &set.colls[set.n++];
        mc->line = s->line;
        if ((mc->db = strdup(s->db)) == NULL || (mc->coll = strdup(s->coll)) == NULL) {
            fin_error(&f, 0, "out of memory");
            goto fail;
        }
        map_table *t = &mc->table;
        t->line = s->seen[K_TABLE] != 0 ? s->seen[K_TABLE] : s->line;
        if (s->table != NULL) {
            if (s->schema != NULL)
                snprintf(t->name.schema, sizeof t->name.schema, "%s", s->schema);
            else if (!names_schema(s->db, t->name.schema, why, sizeof why)) {
                fin_error(&f, s->line, "%s: %s", s->label, why);
                goto fail;
            }
            snprintf(t->name.table, sizeof t->name.table, "%s", s->table);
        } else if (!names_map(s->db, s->coll, &t->name, why, sizeof why)) {
            fin_error(&f, s->line, "%s: %s", s->label, why);
            goto fail;
        }
        if (!build_table(&f, s, t, NULL))
            goto fail;
    }
    for (size_t i = 0; i < r->n; i++) {
        const struct section *s = r->secs[i];
        if (s->child && !s->claimed) {
            fin_error(&f, s->line,
                      "%s: no map names this child table (a child.PATH = %s.%s line in the section of its parent "
                      "does)",
                      s->label, s->schema, s->table);
            goto fail;
        }
    }
    int line;
    if (!map_set_check(&set, &line, why, sizeof why)) {
        const struct section *s = line > 0 ? section_at_line(r, line) : NULL;
        fin_error(&f, line, "%s%s%s", s != NULL ? s->label : "", s != NULL ? " " : "", why);
        goto fail;
    }
    *out = set;
    return true;
fail:
    map_set_clear(&set);
    return false;
}

/* ---- the filter -------------------------------------------------------------------------------------------------- */

bool config_map_check_filter(const map_set *m, const nsfilter *f, int *line, char *msg, size_t msglen)
{
    for (size_t i = 0; i < m->n; i++) {
        const map_collection *mc = &m->colls[i];
        *line = mc->line;
        if (ns_is_internal(mc->db, strlen(mc->db), mc->coll, strlen(mc->coll))) {
            snprintf(msg, msglen,
                     "[map %s.%s]: oplog2pg never replicates %s.%s (the admin, local and config databases and "
                     "system.* collections are internal)",
                     mc->db, mc->coll, mc->db, mc->coll);
            return false;
        }
        if (!nsfilter_match(f, mc->db, mc->coll)) {
            snprintf(msg, msglen,
                     "[map %s.%s]: the filter excludes it ([replication] include and exclude leave %s.%s out), so "
                     "the map would never be used",
                     mc->db, mc->coll, mc->db, mc->coll);
            return false;
        }
    }
    *line = 0;
    return true;
}

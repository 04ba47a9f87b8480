/*
 * infer.c — a column map inferred from sample documents (include/map/infer.h).
 *
 * NOTES
 * Counting: every path is a node of a tree (one per collection, the top-level fields below its root) that counts how
 * often the path was present and with which BSON type, and, for arrays, the types of the elements. Documents are
 * followed down to the depth a column may have and no further (deeper content only needs to be known as "a document
 * here"), and the _id is never followed (a path below the _id cannot be a column next to the key). The elements of
 * arrays of documents are counted in a tree of their own, hung from the array's node: that tree is the child table's
 * map. Inside it arrays of documents are not followed (a child table has no child tables). The number of nodes is
 * capped (max_paths), so a collection whose field names are data (a map keyed by ids) cannot exhaust memory; paths
 * first met after the cap are not counted and stay in the rest column, which the map's first comment says.
 *
 * Building: per table, the paths are walked in the order they were first met (the order of the fields in the
 * documents), each becoming a column, a child table, or a comment saying why it stays in the rest column. Then the
 * column limit is applied (the most present paths, then the shallowest, then the first met are kept), names are
 * given in output order (so the first of two colliding names keeps it), and the model is assembled exactly as the
 * configuration reader would build it from the rendered text: the key column oplog2pg adds when _id is not mapped
 * (line 0, not rendered), the child tables' defaults, the parent pointers. Lines are numbered in output order, so
 * that map_set_check's messages about the model point somewhere meaningful.
 *
 * The INI syntax limits what can be written (docs/mapping.md, "Declaring a map"): the reader splits a key at the first
 * '=' or ':', takes "space ;" as the start of a comment, trims keys and values, and refuses lines longer than 199
 * characters; a path part cannot hold a dot or start with '$'. A path whose parts cannot be written is skipped with
 * a comment; a column name replaces the dots and colons of its path with '_'; a line that would be too long is
 * skipped with a comment; a child path that cannot be a key (a ':') or is too long for its line becomes a jsonb
 * column instead.
 */
#include "map/infer.h"
#include "map/convert.h"
#include "map/project.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"

/* ---- BSON types as the comments name them ------------------------------------------------------------------------ */

enum ity {
    IT_DOUBLE,
    IT_STRING,
    IT_DOCUMENT,
    IT_ARRAY,
    IT_UUID, /* binary subtype 4 of 16 bytes */
    IT_BINARY,
    IT_OID,
    IT_BOOL,
    IT_DATE,
    IT_NULL,
    IT_UNDEFINED,
    IT_REGEX,
    IT_DBPOINTER,
    IT_CODE,
    IT_SYMBOL,
    IT_CODEWSCOPE,
    IT_INT32,
    IT_TIMESTAMP,
    IT_INT64,
    IT_DECIMAL128,
    IT_MINKEY,
    IT_MAXKEY,
    IT_COUNT
};

static const char *const ity_names[IT_COUNT] = {
    [IT_DOUBLE] = "double",       [IT_STRING] = "string",
    [IT_DOCUMENT] = "document",   [IT_ARRAY] = "array",
    [IT_UUID] = "uuid",           [IT_BINARY] = "binary",
    [IT_OID] = "objectId",        [IT_BOOL] = "bool",
    [IT_DATE] = "date",           [IT_NULL] = "null",
    [IT_UNDEFINED] = "undefined", [IT_REGEX] = "regex",
    [IT_DBPOINTER] = "dbPointer", [IT_CODE] = "javascript",
    [IT_SYMBOL] = "symbol",       [IT_CODEWSCOPE] = "javascriptWithScope",
    [IT_INT32] = "int32",         [IT_TIMESTAMP] = "timestamp",
    [IT_INT64] = "int64",         [IT_DECIMAL128] = "decimal128",
    [IT_MINKEY] = "minKey",       [IT_MAXKEY] = "maxKey",
};

#define BIT(t)  (1u << (t))
#define NUMBERS (BIT(IT_INT32) | BIT(IT_INT64) | BIT(IT_DOUBLE) | BIT(IT_DECIMAL128))
#define NULLISH (BIT(IT_NULL) | BIT(IT_UNDEFINED))

static enum ity classify(const bson_iter_t *it)
{
    switch (bson_iter_type(it)) {
    case BSON_TYPE_DOUBLE:
        return IT_DOUBLE;
    case BSON_TYPE_UTF8:
        return IT_STRING;
    case BSON_TYPE_DOCUMENT:
        return IT_DOCUMENT;
    case BSON_TYPE_ARRAY:
        return IT_ARRAY;
    case BSON_TYPE_BINARY: {
        bson_subtype_t st;
        uint32_t len;
        const uint8_t *data;
        bson_iter_binary(it, &st, &len, &data);
        return st == BSON_SUBTYPE_UUID && len == 16 ? IT_UUID : IT_BINARY;
    }
    case BSON_TYPE_UNDEFINED:
        return IT_UNDEFINED;
    case BSON_TYPE_OID:
        return IT_OID;
    case BSON_TYPE_BOOL:
        return IT_BOOL;
    case BSON_TYPE_DATE_TIME:
        return IT_DATE;
    case BSON_TYPE_NULL:
        return IT_NULL;
    case BSON_TYPE_REGEX:
        return IT_REGEX;
    case BSON_TYPE_DBPOINTER:
        return IT_DBPOINTER;
    case BSON_TYPE_CODE:
        return IT_CODE;
    case BSON_TYPE_SYMBOL:
        return IT_SYMBOL;
    case BSON_TYPE_CODEWSCOPE:
        return IT_CODEWSCOPE;
    case BSON_TYPE_INT32:
        return IT_INT32;
    case BSON_TYPE_TIMESTAMP:
        return IT_TIMESTAMP;
    case BSON_TYPE_INT64:
        return IT_INT64;
    case BSON_TYPE_DECIMAL128:
        return IT_DECIMAL128;
    case BSON_TYPE_MINKEY:
        return IT_MINKEY;
    case BSON_TYPE_MAXKEY:
        return IT_MAXKEY;
    default:
        return IT_NULL; /* BSON_TYPE_EOD: never met while iterating */
    }
}

/* ---- counting ---------------------------------------------------------------------------------------------------- */

typedef struct inode inode;
typedef struct itree itree;

struct inode {
    char *name;   /* the field name (one part of the path) */
    size_t depth; /* parts from its tree's root: a top-level field is 1 */
    uint64_t present;
    uint64_t types[IT_COUNT];
    uint64_t elems[IT_COUNT]; /* arrays: the types of their elements */
    uint64_t nelems;
    inode **kids; /* documents: their fields, in the order first met */
    size_t nkids, capkids, hint;
    /* many fields: the kids' positions + 1 by the hash of their names (0: free), open addressing */
    size_t *index;
    size_t capindex;
    itree *edocs; /* arrays of the top tree: their document elements */
    /* the top tree's _id: the values that the key column their type alone would get refuses */
    uint64_t key_refused;
};

struct itree {
    inode root; /* root.present: the documents (or document elements) counted */
};

struct infer_stats {
    infer_options o;
    itree top;
    size_t nnodes;
    bool capped;        /* some new path was not counted (max_paths) */
    strbuf key_scratch; /* the key field of an _id, made to see whether the key's conversion takes it exactly */
    char *time_field;   /* a time-series collection: o.time_field and o.meta_field point at these copies */
    char *meta_field;
};

static void node_clear(inode *n);

static void tree_free(itree *t)
{
    if (t != NULL) {
        node_clear(&t->root);
        free(t);
    }
}

static void node_clear(inode *n)
{
    for (size_t i = 0; i < n->nkids; i++) {
        node_clear(n->kids[i]);
        free(n->kids[i]);
    }
    free(n->kids);
    free(n->index);
    free(n->name);
    tree_free(n->edocs);
}

infer_stats *infer_stats_new(const infer_options *o)
{
    infer_stats *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    if (o != NULL)
        s->o = *o;
    if (s->o.depth == 0)
        s->o.depth = INFER_DEFAULT_DEPTH;
    if (s->o.depth > INFER_MAX_DEPTH)
        s->o.depth = INFER_MAX_DEPTH;
    if (s->o.max_columns == 0)
        s->o.max_columns = INFER_DEFAULT_MAX_COLUMNS;
    if (s->o.max_paths == 0)
        s->o.max_paths = INFER_DEFAULT_MAX_PATHS;
    if ((s->o.time_field != NULL && (s->time_field = strdup(s->o.time_field)) == NULL) ||
        (s->o.time_field != NULL && s->o.meta_field != NULL && (s->meta_field = strdup(s->o.meta_field)) == NULL)) {
        infer_stats_free(s);
        return NULL;
    }
    s->o.time_field = s->time_field;
    s->o.meta_field = s->meta_field;
    return s;
}

void infer_stats_free(infer_stats *s)
{
    if (s == NULL)
        return;
    node_clear(&s->top.root);
    strbuf_free(&s->key_scratch);
    free(s->time_field);
    free(s->meta_field);
    free(s);
}

uint64_t infer_stats_docs(const infer_stats *s)
{
    return s->top.root.present;
}

#define INFER_NAME_KEPT 256 /* bytes of a field name kept: more than a line of the file holds */

#define INDEX_FROM 32 /* fields of a document from which its kids are found by hash */

static size_t name_hash(const char *s)
{
    uint64_t h = UINT64_C(1469598103934665603); /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * UINT64_C(1099511628211);
    return (size_t)h;
}

/* Puts kids[at] in n's index, made or doubled first when it would be more than half full. */
static bool index_kid(inode *n, size_t at)
{
    if (n->index == NULL || 2 * n->nkids > n->capindex) {
        size_t cap = n->capindex ? 2 * n->capindex : 4 * INDEX_FROM;
        while (2 * n->nkids > cap)
            cap *= 2;
        size_t *t = calloc(cap, sizeof *t);
        if (t == NULL)
            return false;
        free(n->index);
        n->index = t;
        n->capindex = cap;
        for (size_t k = 0; k < n->nkids; k++)
            if (k != at)
                index_kid(n, k); /* fits: cannot fail */
    }
    size_t mask = n->capindex - 1, i = name_hash(n->kids[at]->name) & mask;
    while (n->index[i] != 0)
        i = (i + 1) & mask;
    n->index[i] = at + 1;
    return true;
}

/* The node of field key below parent: found (the field after the last one found first: documents tend to hold
 * their fields in one order), or added. NULL with *nomem false when the path cap is reached. */
static inode *kid(infer_stats *s, inode *parent, const char *key, bool *nomem)
{
    /* A name longer than a line of the file can never be a column: only its start is kept (cut at a character),
     * so that names that are data cannot hold the stats' memory at their length times the paths counted. Long names
     * with one start share a node, which only their comment shows. */
    char cut[INFER_NAME_KEPT + 1];
    size_t klen = strlen(key);
    if (klen > INFER_NAME_KEPT) {
        size_t k = INFER_NAME_KEPT;
        while (k > 0 && ((unsigned char)key[k] & 0xC0) == 0x80)
            k--;
        memcpy(cut, key, k);
        cut[k] = '\0';
        key = cut;
    }
    size_t n = parent->nkids;
    if (parent->hint < n && strcmp(parent->kids[parent->hint]->name, key) == 0)
        return parent->kids[parent->hint++];
    if (parent->index != NULL) {
        /* many fields (names that are data): by hash, so a document's fields cost no scan of all the others */
        size_t mask = parent->capindex - 1;
        for (size_t i = name_hash(key) & mask; parent->index[i] != 0; i = (i + 1) & mask) {
            size_t at = parent->index[i] - 1;
            if (strcmp(parent->kids[at]->name, key) == 0) {
                parent->hint = at + 1;
                return parent->kids[at];
            }
        }
    } else if (n > 0) {
        size_t h = parent->hint < n ? parent->hint : 0;
        for (size_t k = 0; k < n; k++) {
            size_t i = (h + k) % n;
            if (strcmp(parent->kids[i]->name, key) == 0) {
                parent->hint = i + 1;
                return parent->kids[i];
            }
        }
    }
    if (s->nnodes >= s->o.max_paths) {
        s->capped = true;
        return NULL;
    }
    if (parent->nkids == parent->capkids) {
        size_t cap = parent->capkids ? 2 * parent->capkids : 8;
        inode **k = realloc(parent->kids, cap * sizeof *k);
        if (k == NULL) {
            *nomem = true;
            return NULL;
        }
        parent->kids = k;
        parent->capkids = cap;
    }
    inode *c = calloc(1, sizeof *c);
    if (c == NULL || (c->name = strdup(key)) == NULL) {
        free(c);
        *nomem = true;
        return NULL;
    }
    c->depth = parent->depth + 1;
    parent->kids[parent->nkids++] = c;
    parent->hint = parent->nkids;
    s->nnodes++;
    if (parent->nkids >= INDEX_FROM && !index_kid(parent, parent->nkids - 1)) {
        *nomem = true; /* c is in kids: freed with the tree */
        return NULL;
    }
    return c;
}

static bool unify(unsigned m, map_scalar *out);

/* Whether the _id it points at would be refused by the key column its type alone would get (convert_key_field: a
 * string of 24 lowercase hex digits, binary of a subtype other than 0, a string that is not UTF-8, ...). False when
 * the scratch buffer cannot grow. */
static bool count_key_refusal(infer_stats *s, inode *n, enum ity t, bson_iter_t *it)
{
    map_scalar sc;
    if (!unify(BIT(t), &sc))
        return true; /* no column type keys this type: build_key says so */
    map_type kt = {.scalar = sc};
    s->key_scratch.len = 0;
    convert_status st = convert_key_field(&s->key_scratch, &kt, bson_iter_value(it), NULL, 0);
    if (st == CONVERT_NOMEM)
        return false;
    n->key_refused += st != CONVERT_OK;
    return true;
}

/* Counts the fields of one document (or element) below parent. top: parent is the root of the top tree. in_elem:
 * the document is an element of a child table's array (its arrays of documents are not followed). */
static bool count_doc(infer_stats *s, inode *parent, const uint8_t *data, uint32_t len, bool top, bool in_elem)
{
    bson_iter_t it;
    if (!bson_iter_init_from_data(&it, data, len))
        return true; /* a malformed document counts for nothing below here */
    while (bson_iter_next(&it)) {
        bool nomem = false;
        inode *n = kid(s, parent, bson_iter_key(&it), &nomem);
        if (n == NULL) {
            if (nomem)
                return false;
            continue;
        }
        enum ity t = classify(&it);
        n->present++;
        n->types[t]++;
        if (top && strcmp(n->name, "_id") == 0 && !count_key_refusal(s, n, t, &it))
            return false;
        if (t == IT_DOCUMENT) {
            if (n->depth < s->o.depth && !(top && strcmp(n->name, "_id") == 0)) {
                uint32_t l;
                const uint8_t *d;
                bson_iter_document(&it, &l, &d);
                if (!count_doc(s, n, d, l, false, in_elem))
                    return false;
            }
        } else if (t == IT_ARRAY) {
            uint32_t l;
            const uint8_t *d;
            bson_iter_array(&it, &l, &d);
            bson_iter_t el;
            if (!bson_iter_init_from_data(&el, d, l))
                continue;
            while (bson_iter_next(&el)) {
                enum ity et = classify(&el);
                n->nelems++;
                n->elems[et]++;
                if (et != IT_DOCUMENT || in_elem)
                    continue;
                if (n->edocs == NULL && (n->edocs = calloc(1, sizeof *n->edocs)) == NULL)
                    return false;
                n->edocs->root.present++;
                uint32_t el_len;
                const uint8_t *el_data;
                bson_iter_document(&el, &el_len, &el_data);
                if (!count_doc(s, &n->edocs->root, el_data, el_len, false, true))
                    return false;
            }
        }
    }
    return true;
}

bool infer_stats_add(infer_stats *s, const bson_t *doc)
{
    s->top.root.present++;
    /* a time-series table has no child tables: the document elements of arrays need no tree of their own */
    return count_doc(s, &s->top.root, bson_get_data(doc), doc->len, true, s->time_field != NULL);
}

/* ---- text helpers ------------------------------------------------------------------------------------------------ */

const char *infer_percent(uint64_t part, uint64_t whole, char buf[8])
{
    if (whole == 0 || part == 0) {
        snprintf(buf, 8, "0%%");
        return buf;
    }
    if (part >= whole) {
        snprintf(buf, 8, "100%%");
        return buf;
    }
    /* part * 100 would overflow for counts beyond 2^57: a long double holds the ratio closely enough, and the bounds
     * below keep the two ends exact */
    long double r = (long double)part * 100.0L / (long double)whole;
    uint64_t p = (uint64_t)(r + 0.5L);
    if (p == 0) {
        snprintf(buf, 8, "<1%%");
        return buf;
    }
    if (p >= 100)
        p = 99;
    snprintf(buf, 8, "%u%%", (unsigned)p);
    return buf;
}

/* A name or path made safe to show in a comment: invalid bytes as \xHH, control characters as '?'. */
static void display(const char *s, char *out, size_t outlen)
{
    utf8_sanitize(s, strlen(s), out, outlen);
    for (char *p = out; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
}

/* A growing list of comment lines ('\n' after each). */
typedef struct notes {
    strbuf b;
} notes;

static void note(notes *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(notes *n, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    strbuf_puts(&n->b, line);
    strbuf_putc(&n->b, '\n');
}

/* The types counted in counts[], most frequent first, with their shares of whole: "double 97%, int32 3%". */
static void type_shares(const uint64_t counts[IT_COUNT], uint64_t whole, char *out, size_t outlen)
{
    bool used[IT_COUNT] = {false};
    size_t off = 0;
    out[0] = '\0';
    for (;;) {
        int best = -1;
        for (int t = 0; t < IT_COUNT; t++)
            if (!used[t] && counts[t] > 0 && (best < 0 || counts[t] > counts[best]))
                best = t;
        if (best < 0)
            break;
        used[best] = true;
        char pct[8];
        text_appendf(out, outlen, &off, "%s%s %s", off > 0 ? ", " : "", ity_names[best],
                     infer_percent(counts[best], whole, pct));
    }
}

/* The statistics line of a path: "amount.total: 100% present; double 97%, int32 3%", with the elements of arrays. */
static void stats_line(notes *ns, const char *path, const inode *n, uint64_t total)
{
    char shown[256], pct[8], types[512], elems[512];
    display(path, shown, sizeof shown);
    type_shares(n->types, n->present, types, sizeof types);
    if (n->types[IT_ARRAY] == 0) {
        note(ns, "%s: %s present; %s", shown, infer_percent(n->present, total, pct), types);
        return;
    }
    if (n->nelems == 0) {
        note(ns, "%s: %s present; %s; no elements", shown, infer_percent(n->present, total, pct), types);
        return;
    }
    type_shares(n->elems, n->nelems, elems, sizeof elems);
    note(ns, "%s: %s present; %s; %llu element%s: %s", shown, infer_percent(n->present, total, pct), types,
         (unsigned long long)n->nelems, n->nelems == 1 ? "" : "s", elems);
}

/* ---- type choice ------------------------------------------------------------------------------------------------- */

/* The BSON types of a count array as a bit set, null and undefined left out. */
static unsigned type_set(const uint64_t counts[IT_COUNT])
{
    unsigned m = 0;
    for (int t = 0; t < IT_COUNT; t++)
        if (counts[t] > 0)
            m |= BIT(t);
    return m & ~NULLISH;
}

/* The column type that holds every value of the scalar types in m; false when only jsonb does. */
static bool unify(unsigned m, map_scalar *out)
{
    if (m == 0)
        return false;
    if ((m & ~NUMBERS) == 0)
        *out = m & BIT(IT_DECIMAL128) ? MAP_NUMERIC
               : m & BIT(IT_DOUBLE)   ? MAP_DOUBLE
               : m & BIT(IT_INT64)    ? MAP_BIGINT
                                      : MAP_INTEGER;
    else if ((m & ~(BIT(IT_STRING) | BIT(IT_OID))) == 0)
        *out = MAP_TEXT;
    else if (m == BIT(IT_BOOL))
        *out = MAP_BOOLEAN;
    else if (m == BIT(IT_DATE))
        *out = MAP_TIMESTAMPTZ;
    else if (m == BIT(IT_UUID))
        *out = MAP_UUID;
    else if ((m & ~(BIT(IT_UUID) | BIT(IT_BINARY))) == 0)
        *out = MAP_BYTEA;
    else
        return false;
    return true;
}

/* "string and int32" for a note: the names of the types in m. */
static void set_names(unsigned m, char *out, size_t outlen)
{
    size_t off = 0, n = 0, total = 0;
    out[0] = '\0';
    for (int t = 0; t < IT_COUNT; t++)
        total += (m & BIT(t)) != 0;
    for (int t = 0; t < IT_COUNT; t++)
        if (m & BIT(t)) {
            n++;
            text_appendf(out, outlen, &off, "%s%s", n == 1 ? "" : n == total ? " and " : ", ", ity_names[t]);
        }
}

/* Notes on a type choice that holds several types (what it costs). */
static void unify_notes(notes *ns, unsigned m, map_scalar s, const char *what)
{
    char names[256];
    if ((m & (m - 1)) == 0)
        return; /* one type */
    set_names(m, names, sizeof names);
    if (s == MAP_DOUBLE && (m & BIT(IT_INT64)))
        note(ns, "  %s: double precision holds %s (int64 values beyond 2^53 are rounded)", what, names);
    else if (s == MAP_TEXT)
        note(ns, "  %s: text holds %s (an ObjectId as its 24 hex digits)", what, names);
    else {
        char sql[32];
        map_type ty = {.scalar = s};
        note(ns, "  %s: %s holds %s", what, map_type_sql(&ty, sql, sizeof sql), names);
    }
}

/* ---- the INI syntax ---------------------------------------------------------------------------------------------- */

/* Why a field name cannot be a part of a path the map can write, or NULL when it can. */
static const char *part_problem(const char *p)
{
    size_t len = strlen(p);
    if (len == 0)
        return "an empty field name";
    if (!utf8_valid(p, len, false))
        return "a field name that is not valid UTF-8";
    if (strchr(p, '.') != NULL)
        return "a dot inside a field name (a path splits at dots)";
    if (strchr(p, '$') != NULL)
        return "a $ in a field name";
    if (strpbrk(p, ";#=") != NULL)
        return "a ;, # or = in a field name (the INI syntax)";
    for (const char *c = p; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            return "a control character in a field name";
    if (p[0] == ' ' || p[0] == '\t' || p[len - 1] == ' ' || p[len - 1] == '\t')
        return "a field name starting or ending with a space (the INI syntax trims it)";
    return NULL;
}

/* Why a database or collection name cannot be written in a [map DB.COLL] header, or NULL. */
static const char *ns_problem(const char *s)
{
    size_t len = strlen(s);
    if (len == 0)
        return "an empty name";
    if (!utf8_valid(s, len, false))
        return "a name that is not valid UTF-8";
    if (strpbrk(s, "];") != NULL)
        return "a ] or ; in the name (the INI syntax)";
    for (const char *c = s; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            return "a control character in the name";
    if (isspace((unsigned char)s[0]) || isspace((unsigned char)s[len - 1]))
        return "a name starting or ending with a space (the INI syntax trims it)";
    return NULL;
}

/* ---- building ---------------------------------------------------------------------------------------------------- */

enum ckind { C_NOTE, C_COLUMN, C_CHILD, C_KEY_ADDED };

/* One entry of a table, in output order. */
typedef struct cand {
    enum ckind kind;
    const inode *n;
    char *path;
    char **parts;
    size_t nparts;
    map_type type;
    notes ns;
    size_t order;
    char *name;         /* columns: given once the limit is applied */
    struct tbuild *kid; /* children: the child table */
} cand;

typedef struct tbuild {
    const infer_stats *s;
    bool child;
    const char *schema;
    uint64_t total; /* documents (or document elements) of the table */
    cand *c;
    size_t n, cap;
    notes head;    /* comments at the top of the section */
    bool left_out; /* something stays only in the rest column */
    char **names;  /* the column names taken, reserved ones included */
    size_t nnames, capnames;
    map_table *t; /* the model, once assembled */
} tbuild;

struct infer_map {
    map_collection mc;
    tbuild *root;
    bool renamed; /* the table is not the namespace's own: render `table = ...` */
    int lines;
};

static void cand_free(cand *c)
{
    free(c->path);
    for (size_t i = 0; c->parts != NULL && i < c->nparts; i++)
        free(c->parts[i]);
    free(c->parts);
    strbuf_free(&c->ns.b);
    free(c->name);
}

static void tbuild_free(tbuild *b)
{
    if (b == NULL)
        return;
    for (size_t i = 0; i < b->n; i++) {
        tbuild_free(b->c[i].kid);
        cand_free(&b->c[i]);
    }
    free(b->c);
    strbuf_free(&b->head.b);
    for (size_t i = 0; i < b->nnames; i++)
        free(b->names[i]);
    free(b->names);
    free(b);
}

static bool grow(void **arr, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return true;
    size_t ncap = *cap ? 2 * *cap : 16;
    void *p = realloc(*arr, ncap * size);
    if (p == NULL)
        return false;
    *arr = p;
    *cap = ncap;
    return true;
}

/* A new entry at path prefix + name (prefix NULL at the top). NULL when memory runs out. */
static cand *add_cand(tbuild *b, enum ckind kind, const inode *n, char *const *prefix, size_t nprefix, const char *name)
{
    if (!grow((void **)&b->c, &b->cap, b->n, sizeof *b->c))
        return NULL;
    cand *c = &b->c[b->n];
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->n = n;
    c->order = b->n;
    c->nparts = nprefix + (name != NULL ? 1 : 0);
    if ((c->parts = calloc(c->nparts ? c->nparts : 1, sizeof *c->parts)) == NULL)
        return NULL;
    size_t len = 0;
    for (size_t i = 0; i < c->nparts; i++) {
        const char *p = i < nprefix ? prefix[i] : name;
        if ((c->parts[i] = strdup(p)) == NULL) {
            cand_free(c);
            return NULL;
        }
        len += strlen(p) + 1;
    }
    if ((c->path = malloc(len + 1)) == NULL) {
        cand_free(c);
        return NULL;
    }
    size_t off = 0;
    for (size_t i = 0; i < c->nparts; i++) {
        size_t l = strlen(c->parts[i]);
        if (i > 0)
            c->path[off++] = '.';
        memcpy(c->path + off, c->parts[i], l);
        off += l;
    }
    c->path[off] = '\0';
    b->n++;
    return c;
}

/* The length of "column.NAME = TYPE from PATH" at most (the name is at most the path's length, and 63 bytes). */
static size_t column_line_max(const char *path, const map_type *t)
{
    char sql[32];
    size_t plen = strlen(path);
    return strlen("column.") + (plen < NAMES_MAX ? plen : NAMES_MAX) + strlen(" = ") +
           strlen(map_type_sql(t, sql, sizeof sql)) + strlen(" from ") + plen;
}

/* Makes c a column of type t, unless its line would be too long (then a note, and the path stays in the rest). */
static void make_column(tbuild *b, cand *c, map_scalar s, bool array)
{
    c->type = (map_type){.scalar = s, .array = array};
    if (column_line_max(c->path, &c->type) > MAP_INI_MAX_LINE) {
        note(&c->ns, "  skipped: the path is too long for a line of the file (%d characters at most); kept in rest",
             MAP_INI_MAX_LINE);
        c->kind = C_NOTE;
        b->left_out = true;
        return;
    }
    c->kind = C_COLUMN;
}

static bool build_table(tbuild *b, const inode *parent, char *const *prefix, size_t nprefix);

/* One path of a table: a column, a child table, its fields (a document), or a note. */
static bool build_path(tbuild *b, const inode *n, char *const *prefix, size_t nprefix)
{
    const unsigned depth = b->s->o.depth;
    cand *c = add_cand(b, C_NOTE, n, prefix, nprefix, n->name);
    if (c == NULL)
        return false;
    stats_line(&c->ns, c->path, n, b->total);
    if (b->s->meta_field != NULL && nprefix == 0 && !b->child && strcmp(n->name, b->s->meta_field) == 0)
        note(&c->ns, "  the meta field (metaField) of the time-series collection");
    const char *problem = part_problem(n->name);
    if (problem != NULL) {
        note(&c->ns, "  skipped: %s; kept in rest", problem);
        b->left_out = true;
        return true;
    }
    unsigned m = type_set(n->types);
    map_scalar s;
    if (m == 0) {
        note(&c->ns, "  only null seen: jsonb, which takes whatever comes");
        make_column(b, c, MAP_JSONB, false);
        return true;
    }
    if (m == BIT(IT_DOCUMENT)) {
        if (n->depth >= depth) {
            note(&c->ns, "  nested deeper than --depth %u: kept in rest", depth);
            b->left_out = true;
            return true;
        }
        if (n->nkids == 0) {
            note(&c->ns, "  only empty documents seen: jsonb");
            make_column(b, c, MAP_JSONB, false);
            return true;
        }
        /* its fields, as paths of their own; c stays a note (the document's statistics) */
        char **parts = c->parts;
        size_t nparts = c->nparts;
        (void)prefix;
        return build_table(b, n, parts, nparts);
    }
    if (m & BIT(IT_DOCUMENT)) {
        char names[256];
        set_names(m, names, sizeof names);
        note(&c->ns, "  %s: jsonb (a document in some documents, not in others)", names);
        make_column(b, c, MAP_JSONB, false);
        return true;
    }
    if (m & BIT(IT_ARRAY)) {
        if (m != BIT(IT_ARRAY)) {
            char names[256];
            set_names(m, names, sizeof names);
            note(&c->ns, "  %s: jsonb (an array in some documents, not in others)", names);
            make_column(b, c, MAP_JSONB, false);
            return true;
        }
        unsigned e = type_set(n->elems);
        if (e == 0) {
            note(&c->ns, "  no element seen but null: jsonb");
            make_column(b, c, MAP_JSONB, false);
            return true;
        }
        if (e == BIT(IT_DOCUMENT)) {
            if (b->s->time_field != NULL) {
                note(&c->ns, "  an array of documents: jsonb (the table of a time-series collection has no child "
                             "tables)");
                make_column(b, c, MAP_JSONB, false);
                return true;
            }
            if (b->child) {
                note(&c->ns, "  an array of documents inside an element: jsonb (a child table has no child tables)");
                make_column(b, c, MAP_JSONB, false);
                return true;
            }
            if (strchr(c->path, ':') != NULL) {
                note(&c->ns, "  an array of documents, but a child.PATH key cannot hold a ':': jsonb");
                make_column(b, c, MAP_JSONB, false);
                return true;
            }
            /* "child.PATH = SCHEMA.TABLE": the table name has at most 63 bytes */
            if (strlen("child.") + strlen(c->path) + strlen(" = ") + strlen(b->schema) + 1 + NAMES_MAX >
                MAP_INI_MAX_LINE) {
                note(&c->ns, "  an array of documents, but its path is too long for a child.PATH line: jsonb");
                make_column(b, c, MAP_JSONB, false);
                return true;
            }
            c->kind = C_CHILD;
            return true;
        }
        if ((e & (BIT(IT_DOCUMENT) | BIT(IT_ARRAY))) == 0 && unify(e, &s) && s != MAP_JSONB) {
            unify_notes(&c->ns, e, s, "elements");
            make_column(b, c, s, true);
            return true;
        }
        char names[256];
        set_names(e, names, sizeof names);
        note(&c->ns, "  elements of %s: jsonb", names);
        make_column(b, c, MAP_JSONB, false);
        return true;
    }
    if (unify(m, &s)) {
        unify_notes(&c->ns, m, s, "mixed");
        make_column(b, c, s, false);
        return true;
    }
    char names[256];
    set_names(m, names, sizeof names);
    if ((m & (m - 1)) == 0 && m == BIT(IT_TIMESTAMP))
        note(&c->ns, "  timestamp (MongoDB's internal type): jsonb, as {\"$timestamp\": {\"t\": ..., \"i\": ...}}");
    else if ((m & (m - 1)) == 0)
        note(&c->ns, "  %s has no column type of its own: jsonb", names);
    else
        note(&c->ns, "  no one column type holds %s: jsonb", names);
    make_column(b, c, MAP_JSONB, false);
    return true;
}

static bool build_table(tbuild *b, const inode *parent, char *const *prefix, size_t nprefix)
{
    for (size_t i = 0; i < parent->nkids; i++) {
        const inode *n = parent->kids[i];
        if (!b->child && nprefix == 0 && strcmp(n->name, "_id") == 0)
            continue; /* the key: see build_key */
        if (!b->child && nprefix == 0 && b->s->time_field != NULL && strcmp(n->name, b->s->time_field) == 0) {
            /* the time field: the table's fixed column time, not a column of the map */
            cand *c = add_cand(b, C_NOTE, n, prefix, nprefix, n->name);
            if (c == NULL)
                return false;
            stats_line(&c->ns, c->path, n, b->total);
            note(&c->ns, "  the time field (timeField): the table's fixed column time (timestamptz), not a column "
                         "here");
            continue;
        }
        if (!build_path(b, n, prefix, nprefix))
            return false;
    }
    return true;
}

/* The _id: the key column when every _id has one type that converts exactly, else left to the key oplog2pg adds. */
static bool build_key(tbuild *b, const inode *root)
{
    const inode *n = NULL;
    for (size_t i = 0; i < root->nkids; i++)
        if (strcmp(root->kids[i]->name, "_id") == 0)
            n = root->kids[i];
    cand *c = add_cand(b, C_KEY_ADDED, n, NULL, 0, "_id");
    if (c == NULL)
        return false;
    if (n == NULL) {
        note(&c->ns, "_id: not seen");
    } else {
        stats_line(&c->ns, "_id", n, b->total);
    }
    unsigned all = 0;
    for (int t = 0; n != NULL && t < IT_COUNT; t++)
        if (n->types[t] > 0)
            all |= BIT(t);
    const unsigned exact =
        NUMBERS | BIT(IT_STRING) | BIT(IT_OID) | BIT(IT_BOOL) | BIT(IT_DATE) | BIT(IT_UUID) | BIT(IT_BINARY);
    map_scalar s;
    if (n != NULL && n->present == b->total && all != 0 && (all & (all - 1)) == 0 && (all & exact) != 0 &&
        unify(all, &s) && n->key_refused == 0) {
        c->kind = C_COLUMN;
        c->type = (map_type){.scalar = s};
        char sql[32];
        if (all == BIT(IT_OID))
            note(&c->ns, "  the key column: text, an ObjectId as its 24 hex digits (lower case: WHERE _id = "
                         "'65a1f0...')");
        else
            note(&c->ns, "  the key column: %s (an _id of another type would be refused as a dead letter)",
                 map_type_sql(&c->type, sql, sizeof sql));
        if (b->s->time_field != NULL)
            note(&c->ns, "  the measurement's _id, which MongoDB does not keep unique: not the table's primary key");
        return true;
    }
    if (b->s->time_field != NULL)
        note(&c->ns, "  the measurement's _id, which MongoDB does not keep unique: not the table's primary key");
    char why[300];
    if (n == NULL || n->present < b->total)
        snprintf(why, sizeof why, "not in every document");
    else if ((all & (all - 1)) != 0) {
        char names[256];
        set_names(all, names, sizeof names);
        snprintf(why, sizeof why, "of several types (%s)", names);
    } else if (n->key_refused > 0 && unify(all, &s)) {
        char names[64], sql[32];
        set_names(all, names, sizeof names);
        map_type kt = {.scalar = s};
        snprintf(why, sizeof why,
                 "%s, but %" PRIu64 " of them a %s key cannot hold exactly (such as a string of an ObjectId's 24 hex "
                 "digits, or binary of a subtype other than 0)",
                 names, n->key_refused, map_type_sql(&kt, sql, sizeof sql));
    } else {
        char names[256];
        set_names(all, names, sizeof names);
        snprintf(why, sizeof why, "%s, which no column type keys exactly", names);
    }
    note(&c->ns, "  not mapped, the _id is %s: oplog2pg adds the key column _id text (the key text of the _id)", why);
    return true;
}

/* ---- names ------------------------------------------------------------------------------------------------------- */

static bool name_taken(const tbuild *b, const char *name)
{
    for (size_t i = 0; i < b->nnames; i++)
        if (strcmp(b->names[i], name) == 0)
            return true;
    return false;
}

static bool take_name(tbuild *b, const char *name)
{
    if (!grow((void **)&b->names, &b->capnames, b->nnames, sizeof *b->names))
        return false;
    if ((b->names[b->nnames] = strdup(name)) == NULL)
        return false;
    b->nnames++;
    return true;
}

/* base cut to leave room for suffix, at a character boundary, without trailing spaces, then suffix. */
static void with_suffix(const char *base, const char *suffix, char out[NAMES_MAX + 1])
{
    size_t room = NAMES_MAX - strlen(suffix);
    size_t n = utf8_prefix_len(base, strlen(base), room);
    while (n > 0 && (base[n - 1] == ' ' || base[n - 1] == '\t'))
        n--;
    snprintf(out, NAMES_MAX + 1, "%.*s%s", (int)n, base, suffix);
}

/* A name from base not yet used according to used(arg, name): base itself, else base_2, base_3, ... */
static bool unique_name(const char *base, bool (*used)(const void *arg, const char *name), const void *arg,
                        char out[NAMES_MAX + 1])
{
    with_suffix(base, "", out);
    for (unsigned k = 2; used(arg, out); k++) {
        char suffix[16];
        if (k > 100000)
            return false;
        snprintf(suffix, sizeof suffix, "_%u", k);
        with_suffix(base, suffix, out);
    }
    return true;
}

static bool column_name_used(const void *arg, const char *name)
{
    return name_taken(arg, name);
}

/* PostgreSQL's system columns: a table cannot have a column of one of these names. */
static const char *const system_columns[] = {"tableoid", "xmin", "cmin", "xmax", "cmax", "ctid"};

/* The path as a column name: dots and colons made '_'. */
static void base_name(const char *path, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s", path);
    for (char *p = out; *p; p++)
        if (*p == '.' || *p == ':')
            *p = '_';
}

/* ---- the column limit -------------------------------------------------------------------------------------------- */

static const tbuild *sort_table; /* qsort has no argument; building is not reentrant across threads anyway */

static int by_priority(const void *a, const void *b)
{
    const cand *x = &sort_table->c[*(const size_t *)a], *y = &sort_table->c[*(const size_t *)b];
    if (x->n->present != y->n->present)
        return x->n->present > y->n->present ? -1 : 1;
    if (x->nparts != y->nparts)
        return x->nparts < y->nparts ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Keeps the max columns of b (the key among them) that matter most; the others become notes. */
static bool apply_limit(tbuild *b, size_t max)
{
    size_t ncols = 0, fixed = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (b->c[i].kind == C_COLUMN && b->c[i].nparts == 1 && !b->child && strcmp(b->c[i].path, "_id") == 0)
            fixed++;
        else if (b->c[i].kind == C_KEY_ADDED)
            fixed++;
        else if (b->c[i].kind == C_COLUMN)
            ncols++;
    }
    if (ncols + fixed <= max)
        return true;
    size_t *idx = malloc(ncols * sizeof *idx), k = 0;
    if (idx == NULL)
        return false;
    for (size_t i = 0; i < b->n; i++)
        if (b->c[i].kind == C_COLUMN && !(b->c[i].nparts == 1 && !b->child && strcmp(b->c[i].path, "_id") == 0))
            idx[k++] = i;
    sort_table = b;
    qsort(idx, ncols, sizeof *idx, by_priority);
    sort_table = NULL;
    size_t keep = max > fixed ? max - fixed : 0;
    for (size_t i = keep; i < ncols; i++) {
        cand *c = &b->c[idx[i]];
        c->kind = C_NOTE;
        note(&c->ns, "  beyond the limit of %zu columns (the most present paths are kept): kept in rest", max);
        b->left_out = true;
    }
    free(idx);
    return true;
}

/* ---- the model --------------------------------------------------------------------------------------------------- */

static bool dup_parts(const cand *c, char ***parts)
{
    if ((*parts = calloc(c->nparts, sizeof **parts)) == NULL)
        return false;
    for (size_t i = 0; i < c->nparts; i++)
        if (((*parts)[i] = strdup(c->parts[i])) == NULL)
            return false;
    return true;
}

typedef struct ctx {
    infer_map *m;
    infer_taken_fn taken;
    void *arg;
    char *why;
    size_t whylen;
} ctx;

static bool fail_nomem(ctx *x)
{
    snprintf(x->why, x->whylen, "out of memory");
    return false;
}

/* The table names of this map so far (the collection's and its child tables'). */
struct table_used {
    const ctx *x;
    const char *schema;
};

static bool table_in_map(const map_table *t, const char *schema, const char *table)
{
    if (strcmp(t->name.schema, schema) == 0 && strcmp(t->name.table, table) == 0)
        return true;
    for (size_t i = 0; i < t->nchildren; i++)
        if (t->children[i].table != NULL && table_in_map(t->children[i].table, schema, table))
            return true;
    return false;
}

static bool table_used(const void *arg, const char *name)
{
    const struct table_used *u = arg;
    if (table_in_map(&u->x->m->mc.table, u->schema, name))
        return true;
    return u->x->taken != NULL && u->x->taken(u->x->arg, u->schema, name);
}

/* Names the columns of b in output order and assembles b->t (whose name is set): columns, children (built and
 * assembled in turn), rest, defaults. */
static bool assemble(ctx *x, tbuild *b, map_table *parent);

static bool assemble_child(ctx *x, tbuild *b, cand *c, map_child *ch)
{
    infer_map *m = x->m;
    const char *coll = m->mc.coll;
    char base[1024], tname[NAMES_MAX + 1];
    snprintf(base, sizeof base, "%s_%s", coll, c->path);
    for (char *p = base; *p; p++)
        if (*p == '.' || *p == ']' || *p == ';')
            *p = '_';
    struct table_used u = {x, b->t->name.schema};
    if (!unique_name(base, table_used, &u, tname)) {
        snprintf(x->why, x->whylen, "no free name for the child table of %s", c->path);
        return false;
    }
    ch->line = ++m->lines;
    if ((ch->path = strdup(c->path)) == NULL || !dup_parts(c, &ch->parts))
        return fail_nomem(x);
    ch->nparts = c->nparts;
    if ((ch->table = calloc(1, sizeof *ch->table)) == NULL)
        return fail_nomem(x);
    snprintf(ch->table->name.schema, sizeof ch->table->name.schema, "%s", b->t->name.schema);
    snprintf(ch->table->name.table, sizeof ch->table->name.table, "%s", tname);
    char shown[256];
    display(c->path, shown, sizeof shown);
    char tshown[160];
    display(tname, tshown, sizeof tshown);
    note(&c->ns, "  an array of documents: child table %s.%s, a row per element", b->t->name.schema, tshown);
    c->kid->t = ch->table;
    return assemble(x, c->kid, b->t);
}

static bool assemble(ctx *x, tbuild *b, map_table *parent)
{
    infer_map *m = x->m;
    map_table *t = b->t;
    /* a time-series table's fixed columns are bucket, pos and time (docs/timeseries.md) */
    const char *reserved_root[] = {"_id", "doc", "bucket", "pos", "time"};
    const char *reserved_child[] = {"parent_key", "position", "doc"};
    const char *const *reserved = parent == NULL ? reserved_root : reserved_child;
    size_t nreserved = parent == NULL ? (b->s->time_field != NULL ? 5 : 2) : 3;

    t->line = ++m->lines;
    for (size_t i = 0; i < nreserved; i++)
        if (!take_name(b, reserved[i]))
            return fail_nomem(x);
    for (size_t i = 0; i < sizeof system_columns / sizeof system_columns[0]; i++)
        if (!take_name(b, system_columns[i]))
            return fail_nomem(x);

    size_t ncols = 0, nchildren = 0;
    for (size_t i = 0; i < b->n; i++) {
        ncols += b->c[i].kind == C_COLUMN || b->c[i].kind == C_KEY_ADDED;
        nchildren += b->c[i].kind == C_CHILD;
    }
    if (ncols > 0 && (t->cols = calloc(ncols, sizeof *t->cols)) == NULL)
        return fail_nomem(x);
    if (nchildren > 0 && (t->children = calloc(nchildren, sizeof *t->children)) == NULL)
        return fail_nomem(x);
    t->key = parent == NULL ? 0 : SIZE_MAX;
    for (size_t i = 0; i < b->n; i++) {
        cand *c = &b->c[i];
        if (c->kind == C_KEY_ADDED || (c->kind == C_COLUMN && parent == NULL && i == 0)) {
            /* the key column, first: taken from _id, or the one oplog2pg adds (line 0) */
            map_column *col = &t->cols[t->ncols++];
            col->type = c->kind == C_KEY_ADDED ? (map_type){.scalar = MAP_TEXT} : c->type;
            col->line = c->kind == C_KEY_ADDED ? 0 : ++m->lines;
            col->nparts = 1;
            if ((col->name = strdup("_id")) == NULL || (col->path = strdup("_id")) == NULL ||
                (col->parts = calloc(1, sizeof *col->parts)) == NULL || (col->parts[0] = strdup("_id")) == NULL ||
                (c->name = strdup("_id")) == NULL)
                return fail_nomem(x);
            continue;
        }
        if (c->kind == C_COLUMN) {
            char base[1024], name[NAMES_MAX + 1];
            base_name(c->path, base, sizeof base);
            if (!unique_name(base, column_name_used, b, name)) {
                snprintf(x->why, x->whylen, "no free column name for %s", c->path);
                return false;
            }
            if (!take_name(b, name) || (c->name = strdup(name)) == NULL)
                return fail_nomem(x);
            map_column *col = &t->cols[t->ncols++];
            col->type = c->type;
            col->line = ++m->lines;
            col->nparts = c->nparts;
            if ((col->name = strdup(name)) == NULL || (col->path = strdup(c->path)) == NULL ||
                !dup_parts(c, &col->parts))
                return fail_nomem(x);
            continue;
        }
        if (c->kind == C_CHILD) {
            map_child *ch = &t->children[t->nchildren++];
            if (!assemble_child(x, b, c, ch))
                return false;
        }
    }
    t->on_type_error = MAP_ON_TYPE_ERROR_DEAD_LETTER;
    if (parent == NULL) {
        t->rest = MAP_REST_DOC;
    } else {
        t->parent = parent;
        t->rest = b->left_out ? MAP_REST_DOC : MAP_REST_DROP;
        if ((t->parent_key_column = strdup("parent_key")) == NULL || (t->position_column = strdup("position")) == NULL)
            return fail_nomem(x);
    }
    if (t->rest != MAP_REST_DROP && (t->rest_column = strdup("doc")) == NULL)
        return fail_nomem(x);
    return true;
}

/* The child tables' counts: a tbuild per C_CHILD entry, from the elements' tree. */
static bool build_children(const infer_stats *s, tbuild *b)
{
    for (size_t i = 0; i < b->n; i++) {
        cand *c = &b->c[i];
        if (c->kind != C_CHILD)
            continue;
        tbuild *k = calloc(1, sizeof *k);
        if (k == NULL)
            return false;
        c->kid = k;
        k->s = s;
        k->child = true;
        k->schema = b->schema;
        k->total = c->n->edocs != NULL ? c->n->edocs->root.present : 0;
        char shown[256];
        display(c->path, shown, sizeof shown);
        note(&k->head, "the %llu document element%s of the arrays at %s, a row each (parent_key, position, columns)",
             (unsigned long long)k->total, k->total == 1 ? "" : "s", shown);
        if (c->n->edocs != NULL && !build_table(k, &c->n->edocs->root, NULL, 0))
            return false;
        if (!apply_limit(k, s->o.max_columns))
            return false;
    }
    return true;
}

infer_map *infer_build(const infer_stats *s, const char *db, const char *coll, infer_taken_fn taken, void *arg,
                       char *why, size_t whylen)
{
    const char *problem;
    char shown[300];
    if ((problem = ns_problem(db)) != NULL || (problem = ns_problem(coll)) != NULL) {
        display(problem == ns_problem(db) ? db : coll, shown, sizeof shown);
        snprintf(why, whylen, "cannot be written as a [map DB.COLLECTION] header: %s", problem);
        return NULL;
    }
    if (strlen("[map .]") + strlen(db) + strlen(coll) > MAP_INI_MAX_LINE) {
        snprintf(why, whylen, "the name is too long for a [map DB.COLLECTION] header (%d characters at most)",
                 MAP_INI_MAX_LINE);
        return NULL;
    }
    if (s->top.root.present == 0) {
        snprintf(why, whylen, "no documents");
        return NULL;
    }
    pg_name own;
    char nwhy[256];
    if (!names_map(db, coll, &own, nwhy, sizeof nwhy)) {
        snprintf(why, whylen, "%s", nwhy);
        return NULL;
    }

    infer_map *m = calloc(1, sizeof *m);
    tbuild *b = calloc(1, sizeof *b);
    ctx x = {m, taken, arg, why, whylen};
    if (m == NULL || b == NULL) {
        free(m);
        free(b);
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    m->root = b;
    b->s = s;
    b->total = s->top.root.present;
    b->schema = m->mc.table.name.schema;
    m->mc.line = ++m->lines;
    if ((m->mc.db = strdup(db)) == NULL || (m->mc.coll = strdup(coll)) == NULL)
        goto nomem;
    snprintf(m->mc.table.name.schema, sizeof m->mc.table.name.schema, "%s", own.schema);
    /* The collection's own table, unless another map or an inferred table has that name already. */
    struct table_used u = {&x, own.schema};
    char tname[NAMES_MAX + 1];
    if (!unique_name(own.table, table_used, &u, tname)) {
        snprintf(why, whylen, "no free table name");
        goto fail;
    }
    snprintf(m->mc.table.name.table, sizeof m->mc.table.name.table, "%s", tname);
    m->renamed = strcmp(tname, own.table) != 0;

    if (s->time_field != NULL) {
        char tf[256], mf[256];
        display(s->time_field, tf, sizeof tf);
        if (s->meta_field != NULL)
            display(s->meta_field, mf, sizeof mf);
        note(&b->head,
             "a time-series collection (timeField %s%s%s): a row per measurement; the table's first columns "
             "are fixed, not written here:",
             tf, s->meta_field != NULL ? ", metaField " : "", s->meta_field != NULL ? mf : "");
        note(&b->head,
             "  bucket text, pos integer (the primary key: the bucket's _id and the measurement's place in "
             "it), time timestamptz (the time field %s);",
             tf);
        note(&b->head, "  the paths below are paths into the measurement; no column may be named bucket, pos or time; "
                       "no child tables");
    }
    note(&b->head, "%llu %s%s: per path, the share of them that hold it and the BSON types seen there",
         (unsigned long long)b->total, s->time_field != NULL ? "measurement" : "document", b->total == 1 ? "" : "s");
    if (s->capped)
        note(&b->head, "more than %zu distinct paths: the paths met after the first %zu are not counted (kept in rest)",
             s->o.max_paths, s->o.max_paths);
    if (!build_key(b, &s->top.root) || !build_table(b, &s->top.root, NULL, 0) || !apply_limit(b, s->o.max_columns) ||
        !build_children(s, b))
        goto nomem;
    b->t = &m->mc.table;
    if (!assemble(&x, b, NULL))
        goto fail;
    if (strbuf_failed(&b->head.b))
        goto nomem;
    return m;
nomem:
    snprintf(why, whylen, "out of memory");
fail:
    infer_map_free(m);
    return NULL;
}

const map_collection *infer_map_model(const infer_map *m)
{
    return &m->mc;
}

/* Frees a table of the model (what map_set_clear does for a set). */
static void model_table_clear(map_table *t)
{
    for (size_t i = 0; i < t->ncols; i++) {
        free(t->cols[i].name);
        free(t->cols[i].path);
        for (size_t k = 0; t->cols[i].parts != NULL && k < t->cols[i].nparts; k++)
            free(t->cols[i].parts[k]);
        free(t->cols[i].parts);
    }
    free(t->cols);
    for (size_t i = 0; i < t->nchildren; i++) {
        map_child *ch = &t->children[i];
        free(ch->path);
        for (size_t k = 0; ch->parts != NULL && k < ch->nparts; k++)
            free(ch->parts[k]);
        free(ch->parts);
        if (ch->table != NULL) {
            model_table_clear(ch->table);
            free(ch->table);
        }
    }
    free(t->children);
    free(t->rest_column);
    free(t->parent_key_column);
    free(t->position_column);
    project_paths_free(t->paths);
}

void infer_map_free(infer_map *m)
{
    if (m == NULL)
        return;
    model_table_clear(&m->mc.table);
    free(m->mc.db);
    free(m->mc.coll);
    tbuild_free(m->root);
    free(m);
}

/* ---- rendering --------------------------------------------------------------------------------------------------- */

/* One line, cut to the reader's limit at a character boundary ("..." at the end when cut). */
static void put_line(strbuf *out, const char *prefix, const char *text, size_t len)
{
    size_t plen = strlen(prefix);
    strbuf_puts(out, prefix);
    if (plen + len <= MAP_INI_MAX_LINE) {
        strbuf_append(out, text, len);
    } else {
        size_t n = utf8_prefix_len(text, len, MAP_INI_MAX_LINE - plen - 3);
        strbuf_append(out, text, n);
        strbuf_puts(out, "...");
    }
    strbuf_putc(out, '\n');
}

static void put_notes(strbuf *out, const notes *ns)
{
    const char *p = ns->b.data;
    while (p != NULL && *p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl != NULL ? (size_t)(nl - p) : strlen(p);
        put_line(out, "; ", p, len);
        p = nl != NULL ? nl + 1 : p + len;
    }
}

#define INFER_MAX_LISTED 200 /* paths that are no column, listed with their comments, per table */

static void render_table(strbuf *out, const infer_map *m, const tbuild *b)
{
    const map_table *t = b->t;
    char sql[32];
    put_notes(out, &b->head);
    if (b->t->parent == NULL && m->renamed)
        strbuf_printf(out, "table = %s.%s\n", t->name.schema, t->name.table);
    strbuf_printf(out, "rest = %s\n", map_rest_name(t->rest));
    if (t->parent == NULL)
        strbuf_printf(out, "on_type_error = %s\n", "dead_letter");
    size_t col = 0, child = 0, noted = 0, unlisted = 0;
    for (size_t i = 0; i < b->n; i++) {
        const cand *c = &b->c[i];
        /* the paths that are no column are listed up to a bound, so that fields that are data (a document keyed by
         * ids) cannot make the text as long as the sample's paths */
        if (c->kind == C_NOTE && noted++ >= INFER_MAX_LISTED) {
            unlisted++;
            continue;
        }
        put_notes(out, &c->ns);
        if (c->kind == C_KEY_ADDED) {
            col++;
        } else if (c->kind == C_COLUMN) {
            const map_column *mc = &t->cols[col++];
            strbuf_printf(out, "column.%s = %s from %s\n", mc->name, map_type_sql(&mc->type, sql, sizeof sql),
                          mc->path);
        } else if (c->kind == C_CHILD) {
            const map_child *ch = &t->children[child++];
            strbuf_printf(out, "child.%s = %s.%s\n", ch->path, ch->table->name.schema, ch->table->name.table);
        }
    }
    if (unlisted > 0)
        strbuf_printf(out, "; and %zu more paths that are no column, not listed (at most %d are): kept in rest\n",
                      unlisted, INFER_MAX_LISTED);
}

void infer_render(strbuf *out, const infer_map *m)
{
    strbuf_printf(out, "[map %s.%s]\n", m->mc.db, m->mc.coll);
    render_table(out, m, m->root);
    for (size_t i = 0; i < m->root->n; i++) {
        const cand *c = &m->root->c[i];
        if (c->kind != C_CHILD)
            continue;
        strbuf_printf(out, "\n[child %s.%s]\n", c->kid->t->name.schema, c->kid->t->name.table);
        render_table(out, m, c->kid);
    }
}

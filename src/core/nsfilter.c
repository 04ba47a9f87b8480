/*
 * nsfilter.c — compiled include/exclude namespace patterns (see core/nsfilter.h for the rules).
 *
 * Every op passes through nsfilter_match, so the patterns are split and classified once, at start: a part that is
 * only stars matches anything, a part without wildcards is compared with memcmp, "abc*" is a prefix test, and only
 * the rest runs the general glob matcher (it backtracks to the last star only: no recursion, no allocation, at worst
 * about pattern length × name length steps).
 * `?` matches one character: one UTF-8 sequence, not one byte, so "caf?" matches "café".
 */
#include "core/nsfilter.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum part_kind { PART_ANY, PART_EXACT, PART_PREFIX, PART_GLOB };

struct part {
    enum part_kind kind;
    const char *text; /* points into nsfilter.storage; for PART_PREFIX the text before the star */
    size_t len;
};

struct pattern {
    struct part db;
    struct part coll;
};

struct nsfilter {
    struct pattern *include;
    size_t ninclude;
    struct pattern *exclude;
    size_t nexclude;
    char *storage; /* all pattern texts, NUL-separated */
};

static bool is_continuation(unsigned char c)
{
    return (c & 0xC0) == 0x80;
}

static size_t skip_char(const char *s, size_t n, size_t i)
{
    i++;
    while (i < n && is_continuation((unsigned char)s[i]))
        i++;
    return i;
}

/* Glob match of p[0..pn) against s[0..sn): `*` any run, `?` one UTF-8 character, anything else itself. */
static bool glob_match(const char *p, size_t pn, const char *s, size_t sn)
{
    size_t pi = 0, si = 0, star = SIZE_MAX, mark = 0;

    while (si < sn) {
        if (pi < pn && p[pi] == '?') {
            pi++;
            si = skip_char(s, sn, si);
        } else if (pi < pn && p[pi] == '*') {
            star = pi++;
            mark = si;
        } else if (pi < pn && p[pi] == s[si]) {
            pi++;
            si++;
        } else if (star != SIZE_MAX) {
            pi = star + 1;
            mark = skip_char(s, sn, mark);
            si = mark;
        } else {
            return false;
        }
    }
    while (pi < pn && p[pi] == '*')
        pi++;
    return pi == pn;
}

static bool part_match(const struct part *p, const char *s, size_t n)
{
    switch (p->kind) {
    case PART_ANY:
        return true;
    case PART_EXACT:
        return n == p->len && memcmp(s, p->text, n) == 0;
    case PART_PREFIX:
        return n >= p->len && memcmp(s, p->text, p->len) == 0;
    case PART_GLOB:
        return glob_match(p->text, p->len, s, n);
    }
    return false;
}

static void classify(struct part *p, const char *text, size_t len)
{
    size_t stars = 0, questions = 0;

    for (size_t i = 0; i < len; i++) {
        if (text[i] == '*')
            stars++;
        else if (text[i] == '?')
            questions++;
    }
    p->text = text;
    p->len = len;
    if (stars == len)
        p->kind = PART_ANY;
    else if (stars == 0 && questions == 0)
        p->kind = PART_EXACT;
    else if (stars == 1 && questions == 0 && text[len - 1] == '*') {
        p->kind = PART_PREFIX;
        p->len = len - 1;
    } else
        p->kind = PART_GLOB;
}

bool nsfilter_check_pattern(const char *pattern, char *err, size_t errlen)
{
    const char *dot = strchr(pattern, '.');

    if (pattern[0] == '\0') {
        snprintf(err, errlen, "empty namespace pattern (write DB.COLLECTION, e.g. \"shop.*\")");
        return false;
    }
    if (dot == NULL) {
        snprintf(err, errlen, "namespace pattern \"%s\" has no dot (write DB.COLLECTION, e.g. \"%s.*\")", pattern,
                 pattern);
        return false;
    }
    if (dot == pattern) {
        snprintf(err, errlen, "namespace pattern \"%s\" has an empty database part (use \"*%s\" for any database)",
                 pattern, dot);
        return false;
    }
    if (dot[1] == '\0') {
        snprintf(err, errlen,
                 "namespace pattern \"%s\" has an empty collection part (use \"%s*\" for every collection)", pattern,
                 pattern);
        return false;
    }
    for (const char *c = pattern; *c; c++) {
        if ((unsigned char)*c < 0x20 || *c == ' ') {
            snprintf(err, errlen, "namespace pattern \"%s\" contains a space or control character", pattern);
            return false;
        }
    }
    return true;
}

/* Compiles a NULL-terminated list into out[], copying texts to *cursor in the shared storage. */
static bool compile_list(const char *const *list, struct pattern *out, char **cursor, char *err, size_t errlen)
{
    for (size_t i = 0; list != NULL && list[i] != NULL; i++) {
        if (!nsfilter_check_pattern(list[i], err, errlen))
            return false;
        size_t len = strlen(list[i]);
        char *text = *cursor;
        memcpy(text, list[i], len + 1);
        *cursor += len + 1;

        char *dot = strchr(text, '.');
        classify(&out[i].db, text, (size_t)(dot - text));
        classify(&out[i].coll, dot + 1, len - (size_t)(dot - text) - 1);
    }
    return true;
}

static size_t count_list(const char *const *list, size_t *bytes)
{
    size_t n = 0;
    for (; list != NULL && list[n] != NULL; n++)
        *bytes += strlen(list[n]) + 1;
    return n;
}

nsfilter *nsfilter_new(const char *const *include, const char *const *exclude, char *err, size_t errlen)
{
    size_t bytes = 0;
    size_t ninc = count_list(include, &bytes);
    size_t nexc = count_list(exclude, &bytes);
    nsfilter *f = calloc(1, sizeof *f);

    if (f == NULL)
        goto nomem;
    f->include = calloc(ninc + 1, sizeof *f->include);
    f->exclude = calloc(nexc + 1, sizeof *f->exclude);
    f->storage = malloc(bytes + 1);
    if (f->include == NULL || f->exclude == NULL || f->storage == NULL)
        goto nomem;
    f->ninclude = ninc;
    f->nexclude = nexc;

    char *cursor = f->storage;
    if (!compile_list(include, f->include, &cursor, err, errlen) ||
        !compile_list(exclude, f->exclude, &cursor, err, errlen))
        goto fail;
    return f;

nomem:
    snprintf(err, errlen, "out of memory compiling namespace patterns");
fail:
    nsfilter_free(f);
    return NULL;
}

static bool any_match(const struct pattern *list, size_t n, const char *db, size_t dblen, const char *coll,
                      size_t colllen)
{
    for (size_t i = 0; i < n; i++) {
        if (part_match(&list[i].db, db, dblen) && part_match(&list[i].coll, coll, colllen))
            return true;
    }
    return false;
}

/* The temporary collection a rename across databases copies into: "tmp" + five random characters +
 * ".renameCollection" in the target database (the server's renameBetweenDBs, src/mongo/db/catalog/
 * rename_collection.cpp, names it with makeUniqueCollectionName and the model "tmp%%%%%.renameCollection"). */
static bool is_rename_temp(const char *coll, size_t len)
{
    static const char suffix[] = ".renameCollection";
    const size_t slen = sizeof suffix - 1;
    return len == 3 + 5 + slen && memcmp(coll, "tmp", 3) == 0 && memcmp(coll + 8, suffix, slen) == 0;
}

static bool match_db(const nsfilter *f, const char *db, size_t dblen)
{
    for (size_t i = 0; i < f->nexclude; i++) /* db.* excluded as a whole */
        if (f->exclude[i].coll.kind == PART_ANY && part_match(&f->exclude[i].db, db, dblen))
            return false;
    for (size_t i = 0; i < f->ninclude; i++)
        if (part_match(&f->include[i].db, db, dblen))
            return true;
    return false;
}

static bool match_parts(const nsfilter *f, const char *db, size_t dblen, const char *coll, size_t colllen)
{
    /* A rename's temporary collection is replicated wherever its database may be: which collection it becomes is
     * known only at the rename that ends it, and that rename either keeps it (the target is replicated) or drops
     * its table (nsfilter_filter_entry). */
    if (is_rename_temp(coll, colllen))
        return match_db(f, db, dblen);
    return any_match(f->include, f->ninclude, db, dblen, coll, colllen) &&
           !any_match(f->exclude, f->nexclude, db, dblen, coll, colllen);
}

bool nsfilter_match(const nsfilter *f, const char *db, const char *coll)
{
    return match_parts(f, db, strlen(db), coll, strlen(coll));
}

bool nsfilter_match_ns(const nsfilter *f, const char *ns)
{
    const char *dot = strchr(ns, '.');

    if (dot == NULL)
        return false;
    return match_parts(f, ns, (size_t)(dot - ns), dot + 1, strlen(dot + 1));
}

bool nsfilter_match_db(const nsfilter *f, const char *db)
{
    return match_db(f, db, strlen(db));
}

bool ns_is_internal(const char *db, size_t dblen, const char *coll, size_t colllen)
{
    static const char *const internal[] = {"admin", "local", "config"};
    for (size_t i = 0; i < sizeof internal / sizeof internal[0]; i++)
        if (dblen == strlen(internal[i]) && memcmp(db, internal[i], dblen) == 0)
            return true;
    return coll != NULL && colllen >= 7 && memcmp(coll, "system.", 7) == 0;
}

bool nsfilter_each_exact_db(const nsfilter *f, void (*fn)(const char *db, size_t len, void *arg), void *arg)
{
    if (f == NULL)
        return false;
    for (size_t i = 0; i < f->ninclude; i++)
        if (f->include[i].db.kind != PART_EXACT)
            return false;
    for (size_t i = 0; i < f->ninclude; i++)
        fn(f->include[i].db.text, f->include[i].db.len, arg);
    return true;
}

void nsfilter_free(nsfilter *f)
{
    if (f == NULL)
        return;
    free(f->include);
    free(f->exclude);
    free(f->storage);
    free(f);
}

bool nsfilter_filter_entry(const nsfilter *f, op_entry *e, char *err, size_t errlen)
{
    if (f == NULL)
        return true;
    for (size_t i = 0; i < e->n; i++) {
        op *o = &e->ops[i];
        bool keep;
        switch (o->kind) {
        case OP_NOOP:
            if (o->notice && !(o->db && o->coll && nsfilter_match(f, o->db, o->coll)))
                o->notice = false; /* nothing to say of a namespace the service leaves out */
            continue;
        case OP_DROP_DATABASE:
            /* It drops only the tables this service made (the catalog); a database no pattern can include has
             * none, and gets no DDL at all. */
            keep = o->db != NULL && nsfilter_match_db(f, o->db);
            break;
        case OP_RENAME: {
            bool from = o->db && o->coll && nsfilter_match(f, o->db, o->coll);
            bool to = o->to_db && o->to_coll && nsfilter_match(f, o->to_db, o->to_coll);
            if (from && !to) {
                /* Out of the filter: the collection is no longer replicated, so its table goes, as a drop would
                 * take it. */
                o->kind = OP_DROP;
                o->reason = "renamed to a namespace [replication] leaves out";
                continue;
            }
            if (to && !from) {
                /* Into the filter: the documents it brings were never in this service's stream. */
                snprintf(err, errlen,
                         "renameCollection %s.%s -> %s.%s brings a collection [replication] leaves out into one it "
                         "replicates; its documents are not in the oplog, so that table cannot be made from it: copy "
                         "the service again (run --reimport), or leave %s.%s out too",
                         o->db, o->coll, o->to_db, o->to_coll, o->to_db, o->to_coll);
                return false;
            }
            keep = from;
            break;
        }
        default:
            keep = !(o->db && o->coll) || nsfilter_match(f, o->db, o->coll);
            break;
        }
        if (!keep) {
            op_clear(o);
            o->kind = OP_NOOP;
            o->reason = "excluded by include/exclude";
        }
    }
    return true;
}

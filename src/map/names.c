/*
 * names.c — see names.h.
 */
#include "map/names.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util/utf8.h"

#define KEEP_BYTES 52 /* of a long name: 52 + "$" + 10 hex digits = 63 */

/* FNV-1a, 64 bits: stable across builds and machines (the mapping must never change for a given name). */
static uint64_t fnv1a(const char *s, size_t len)
{
    uint64_t h = UINT64_C(14695981039346656037);
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= UINT64_C(1099511628211);
    }
    return h;
}

static bool reserved_schema(const char *db)
{
    return strcmp(db, "oplog2pg") == 0 || strcmp(db, "information_schema") == 0 || strncmp(db, "pg_", 3) == 0;
}

/* One identifier: `name`, with `prefix` in front, shortened when longer than NAMES_MAX. */
static void ident(const char *prefix, const char *name, char out[NAMES_MAX + 1])
{
    char full[1024];
    int n = snprintf(full, sizeof full, "%s%s", prefix, name);
    size_t len = n < 0 ? 0 : (size_t)n;
    if (len >= sizeof full)
        len = sizeof full - 1;
    if (len <= NAMES_MAX) {
        memcpy(out, full, len + 1);
        return;
    }
    /* The hash is of the whole name (with its prefix), so it depends on nothing else. */
    uint64_t h = fnv1a(full, len);
    size_t keep = utf8_prefix_len(full, len, KEEP_BYTES);
    memcpy(out, full, keep);
    snprintf(out + keep, NAMES_MAX + 1 - keep, "$%010llx", (unsigned long long)(h & UINT64_C(0xFFFFFFFFFF)));
}

static bool check(const char *what, const char *name, char *why, size_t whylen)
{
    size_t len = strlen(name);
    if (len == 0) {
        snprintf(why, whylen, "the %s name is empty", what);
        return false;
    }
    if (!utf8_valid(name, len, false)) {
        snprintf(why, whylen, "the %s name is not valid UTF-8", what);
        return false;
    }
    return true;
}

bool names_schema(const char *db, char out[NAMES_MAX + 1], char *why, size_t whylen)
{
    if (!check("database", db, why, whylen))
        return false;
    ident(reserved_schema(db) ? "$" : "", db, out);
    return true;
}

bool names_map(const char *db, const char *coll, pg_name *out, char *why, size_t whylen)
{
    if (!names_schema(db, out->schema, why, whylen))
        return false;
    out->table[0] = '\0';
    if (coll == NULL)
        return true;
    if (!check("collection", coll, why, whylen))
        return false;
    ident("", coll, out->table);
    return true;
}

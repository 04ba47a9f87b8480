/*
 * v2diff.c — the structural check of a $v:2 update diff (see source/v2diff.h for the format, the codes and the
 * limits).
 *
 * NOTES
 * - A recursive walk: validate_object_diff and validate_array_diff call validate_subdiff for each s<name> or
 *   s<index>, which picks the kind of the sub-diff from its first field. Depth is bounded by V2DIFF_MAX_DEPTH.
 * - The field names of one object-diff level are collected (pointers into the diff, no copies), sorted and compared
 *   neighbour to neighbour for duplicates; up to 32 of them live on the stack.
 * - `path` follows the walk ("diff", "diff.sa", "diff.sa.s0") so that a message says where the fault is; a path
 *   longer than the buffer is cut short.
 */
#include "source/v2diff.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/strbuf.h"

typedef struct walk {
    int32_t code;
    char *err;
    size_t errlen;
    char path[192]; /* where in the diff, for messages: "diff.sa.s0" */
} walk;

static bool fail(walk *w, int32_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Records the fault (code 0: no server code) and returns false. */
static bool fail(walk *w, int32_t code, const char *fmt, ...)
{
    w->code = code;
    if (w->err && w->errlen) {
        size_t off = 0;
        w->err[0] = '\0';
        if (code)
            text_appendf(w->err, w->errlen, &off, "invalid $v:2 diff [%d] at %s: ", code, w->path);
        else
            text_appendf(w->err, w->errlen, &off, "invalid $v:2 diff at %s: ", w->path);
        va_list ap;
        va_start(ap, fmt);
        text_vappendf(w->err, w->errlen, &off, fmt, ap);
        va_end(ap);
    }
    return false;
}

/* Field names of one object-diff level, for the duplicate check. Small levels stay on the stack. */
typedef struct names {
    const char **v;
    size_t n, cap;
    const char *stack[32];
} names;

static void names_init(names *s)
{
    s->v = s->stack;
    s->n = 0;
    s->cap = sizeof s->stack / sizeof s->stack[0];
}

static bool names_add(names *s, const char *name)
{
    if (s->n == s->cap) {
        size_t cap = s->cap * 2;
        const char **v = malloc(cap * sizeof *v);
        if (!v)
            return false;
        memcpy(v, s->v, s->n * sizeof *v);
        if (s->v != s->stack)
            free(s->v);
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = name;
    return true;
}

static void names_free(names *s)
{
    if (s->v != s->stack)
        free(s->v);
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Appends ".key" to the path; returns the old length, to cut back to. */
static size_t path_push(walk *w, const char *key)
{
    size_t old = strlen(w->path);
    size_t off = old;
    text_appendf(w->path, sizeof w->path, &off, ".%s", key);
    return old;
}

static bool validate_subdiff(walk *w, bson_iter_t *it, int depth);

/* An object diff: sections d < u < i < b < s..., each at most once, sub-diffs last. This level's structure and its
 * field names (duplicates: 4728000) are all checked before any of its sub-diffs is entered. */
static bool validate_object_diff(walk *w, const uint8_t *data, uint32_t len, int depth)
{
    bson_iter_t it, subdiffs;
    names nm;
    bool ok = false;
    int prev = 0;
    bool in_subdiffs = false, any = false;

    names_init(&nm);
    if (depth > V2DIFF_MAX_DEPTH)
        return fail(w, 0, "nested deeper than %d levels", V2DIFF_MAX_DEPTH);
    if (!bson_iter_init_from_data(&it, data, len))
        return fail(w, 0, "not a valid BSON document");
    while (bson_iter_next(&it)) {
        uint32_t klen = bson_iter_key_len(&it);
        const char *key = bson_iter_key(&it);
        any = true;
        if (klen == 0) {
            fail(w, 4770505, "empty section name");
            goto done;
        }
        char ch = key[0];
        if (in_subdiffs) {
            if (ch != 's') {
                fail(w, 4770514, "section '%s' after the sub-diffs", key);
                goto done;
            }
            if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
                fail(w, 470510, "sub-diff '%s' is not an object", key); /* sic: the server's code */
                goto done;
            }
            if (!names_add(&nm, key + 1)) {
                fail(w, V2DIFF_NOMEM, "out of memory");
                goto done;
            }
            continue;
        }
        int order = ch == 'd' ? 1 : ch == 'u' ? 2 : ch == 'i' ? 3 : ch == 'b' ? 4 : ch == 's' ? 5 : 0;
        if (order == 0 || order <= prev) {
            fail(w, 4770503, "unexpected section '%s'%s", key, order ? " (repeated or out of order)" : "");
            goto done;
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            fail(w, 4770507, "section '%s' is not an object", key);
            goto done;
        }
        prev = order;
        if (ch == 's') {
            in_subdiffs = true;
            subdiffs = it; /* revisited after the duplicate check */
            if (!names_add(&nm, key + 1)) {
                fail(w, V2DIFF_NOMEM, "out of memory");
                goto done;
            }
            continue;
        }
        bson_iter_t sec;
        if (!bson_iter_recurse(&it, &sec)) {
            fail(w, 0, "section '%s' is not valid BSON", key);
            goto done;
        }
        while (bson_iter_next(&sec)) {
            const char *field = bson_iter_key(&sec);
            if (ch == 'b') {
                /* 8.x binary diff: {field: {o: int offset, d: BinData}}. The server codes are not known here. */
                bson_iter_t bi;
                bool has_o = false, has_d = false;
                if (BSON_ITER_HOLDS_DOCUMENT(&sec) && bson_iter_recurse(&sec, &bi)) {
                    while (bson_iter_next(&bi)) {
                        if (strcmp(bson_iter_key(&bi), "o") == 0)
                            has_o = BSON_ITER_HOLDS_INT32(&bi) || BSON_ITER_HOLDS_INT64(&bi);
                        else if (strcmp(bson_iter_key(&bi), "d") == 0)
                            has_d = BSON_ITER_HOLDS_BINARY(&bi);
                    }
                }
                if (!has_o || !has_d) {
                    fail(w, 0, "binary section entry '%s' is not {o: int, d: BinData}", field);
                    goto done;
                }
            }
            if (!names_add(&nm, field)) {
                fail(w, V2DIFF_NOMEM, "out of memory");
                goto done;
            }
        }
    }
    if (!any) {
        fail(w, 4770500, "empty diff");
        goto done;
    }
    if (nm.n > 1) {
        qsort(nm.v, nm.n, sizeof *nm.v, cmp_names);
        for (size_t i = 1; i < nm.n; i++) {
            if (strcmp(nm.v[i - 1], nm.v[i]) == 0) {
                fail(w, 4728000, "duplicate field name in diff: '%s'", nm.v[i]);
                goto done;
            }
        }
    }
    if (in_subdiffs) {
        do {
            if (!validate_subdiff(w, &subdiffs, depth + 1))
                goto done;
        } while (bson_iter_next(&subdiffs));
    }
    ok = true;
done:
    names_free(&nm);
    return ok;
}

/* Digits only, and the value fits in 32 bits (an array index). */
static bool parse_index(const char *s)
{
    uint64_t v = 0;
    if (!*s)
        return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
        if (v > UINT32_MAX)
            return false;
    }
    return true;
}

/* An array diff: {a: true, [l: int32], (u<idx>: value | s<idx>: sub-diff)*}. */
static bool validate_array_diff(walk *w, const uint8_t *data, uint32_t len, int depth)
{
    bson_iter_t it;
    if (!bson_iter_init_from_data(&it, data, len) || !bson_iter_next(&it))
        return fail(w, 4770500, "empty diff");
    if (strcmp(bson_iter_key(&it), "a") != 0)
        return fail(w, 4770504, "first field is '%s', not the array header 'a'", bson_iter_key(&it));
    if (!BSON_ITER_HOLDS_BOOL(&it))
        return fail(w, 4770519, "array header 'a' is not a bool");
    if (!bson_iter_bool(&it))
        return fail(w, 4770520, "array header 'a' is not true");
    bool first = true;
    while (bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        if (first && strcmp(key, "l") == 0) {
            first = false;
            if (!BSON_ITER_HOLDS_INT32(&it))
                return fail(w, 4770507, "array resize 'l' is not an int32");
            continue;
        }
        first = false;
        if (bson_iter_key_len(&it) < 2)
            return fail(w, 4770521, "array diff field '%s' is shorter than two characters", key);
        if (!parse_index(key + 1))
            return fail(w, 4770512, "array diff field '%s' does not name an index", key);
        if (key[0] == 'u')
            continue;
        if (key[0] != 's')
            return fail(w, 4770502, "array diff field '%s' is neither u<index> nor s<index>", key);
        if (!BSON_ITER_HOLDS_DOCUMENT(&it))
            return fail(w, 4770501, "array sub-diff '%s' is not an object", key);
        if (!validate_subdiff(w, &it, depth + 1))
            return false;
    }
    return true;
}

/* A sub-diff (the value of s<field> or s<index>): an array diff when its first field is "a", else an object diff. */
static bool validate_subdiff(walk *w, bson_iter_t *it, int depth)
{
    const uint8_t *data;
    uint32_t len;
    bson_iter_t first;
    size_t mark = path_push(w, bson_iter_key(it));
    bool ok;

    bson_iter_document(it, &len, &data);
    if (depth > V2DIFF_MAX_DEPTH)
        return fail(w, 0, "nested deeper than %d levels", V2DIFF_MAX_DEPTH);
    if (!bson_iter_init_from_data(&first, data, len) || !bson_iter_next(&first))
        return fail(w, 4770500, "empty diff");
    if (strcmp(bson_iter_key(&first), "a") == 0)
        ok = validate_array_diff(w, data, len, depth);
    else
        ok = validate_object_diff(w, data, len, depth);
    if (ok)
        w->path[mark] = '\0';
    return ok;
}

bool v2diff_validate(const bson_t *diff, int32_t *code, char *err, size_t errlen)
{
    walk w = {.code = 0, .err = err, .errlen = errlen};
    snprintf(w.path, sizeof w.path, "diff");
    /* The top level is always an object diff: a leading "a" is an unknown section there (4770503). */
    bool ok = validate_object_diff(&w, bson_get_data(diff), diff->len, 0);
    if (code)
        *code = ok ? 0 : w.code;
    return ok;
}

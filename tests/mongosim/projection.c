/*
 * projection.c — find projections, parsed and applied as a MongoDB 7.0 server does (see projection.h).
 *
 * Parsing follows mongodb/mongo src/mongo/db/query/projection_parser.cpp (projection_ast::parse; the file moved to
 * src/mongo/db/query/compiler/logical_model/projection/ after 7.0): each element of the spec, in order, is
 *  - a sub-document: an expression when it has one field whose name starts with '$' ($slice, $elemMatch, $meta or
 *    an aggregation expression), otherwise a nested projection {a: {b: 1}} (mongosim flattens it to "a.b");
 *  - a bool or a number (int, long, double, decimal): an inclusion when it is true / non-zero, else an exclusion;
 *  - anything else: a literal, i.e. a computed field.
 * Every path is added to a tree, and a path that is, or runs through, a path already there is a collision
 * (addNodeAtPath: 31250, 31249). The projection's type is set by the first inclusion (or expression) or exclusion
 * other than a top-level _id; the other kind then fails (31253, 31254, 31252, 31310). When nothing set it,
 * computeProjectionType decides from $slice / $elemMatch / $meta and _id. An inclusion projection includes _id
 * unless the spec names _id; an exclusion projection drops an explicit {_id: 1}.
 *
 * Applying follows src/mongo/db/exec/projection_executor_builder.cpp (a find $slice in an inclusion projection also
 * includes its path; then every $slice rewrites the projected document), inclusion_projection_executor /
 * exclusion_projection_executor (ProjectionNode::applyProjections: fields keep the document's order; arrays are
 * walked element by element, nested arrays too, as ProjectionPolicies::findProjectionPolicies asks; in an inclusion
 * a scalar where a sub-path was asked for is dropped, in an exclusion it is kept) and
 * src/mongo/db/exec/find_projection_executor.cpp (applySliceProjection, sliceArray: see slice_doc below).
 *
 * Simplifications, all of them on forms mongosim refuses or on malformed specs:
 *  - Valid projections mongosim does not execute fail with 2 BadValue after the whole spec was checked, so an error
 *    the server would report for a later element still comes first.
 *  - Nested projections are flattened, so a collision inside one names the whole dotted path.
 *  - mongosim does not know the server's list of aggregation expression names: any {$name: ...} that is not $slice
 *    or $elemMatch counts as an expression (a server answers 31325 "Unknown expression" for an unknown name).
 */
#include "projection.h"
#include "update.h" /* sim_type_name: typeName (src/mongo/bson/bsontypes.cpp), which `<< BSONType` prints */

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    PN_PATH,    /* an inner node: {a: {...}} or the "a" of "a.b" */
    PN_INCLUDE, /* true / non-zero */
    PN_EXCLUDE, /* false / zero */
    PN_SLICE,   /* find $slice */
    PN_OTHER,   /* parsed but not executed ($elemMatch, positional, expressions, literals) */
} pn_kind;

typedef struct pnode {
    char *name;
    pn_kind kind;
    bool has_skip;
    int32_t skip, limit;
    struct pnode **kids;
    size_t nkids, cap;
} pnode;

typedef struct {
    char **comps; /* the path's field names */
    size_t ncomps;
    bool has_skip;
    int32_t skip, limit;
} slice_op;

struct sim_projection {
    pnode root;
    bool inclusion;
    slice_op *slices;
    size_t nslices;
};

/* ---- the tree ---- */

static pnode *node_child(const pnode *n, const char *name, size_t len)
{
    for (size_t i = 0; i < n->nkids; i++)
        if (strlen(n->kids[i]->name) == len && memcmp(n->kids[i]->name, name, len) == 0)
            return n->kids[i];
    return NULL;
}

static pnode *node_add(pnode *n, const char *name, size_t len, pn_kind kind)
{
    if (n->nkids == n->cap) {
        n->cap = n->cap ? n->cap * 2 : 4;
        n->kids = bson_realloc(n->kids, n->cap * sizeof *n->kids);
    }
    pnode *k = bson_malloc0(sizeof *k);
    k->name = bson_strndup(name, len);
    k->kind = kind;
    n->kids[n->nkids++] = k;
    return k;
}

static void node_clear(pnode *n)
{
    for (size_t i = 0; i < n->nkids; i++) {
        node_clear(n->kids[i]);
        bson_free(n->kids[i]);
    }
    bson_free(n->kids);
    bson_free(n->name);
    memset(n, 0, sizeof *n);
}

static bool set_error(sim_proj_error *e, int code, const char *fmt, ...) BSON_GNUC_PRINTF(3, 4);
static bool set_error(sim_proj_error *e, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    e->code = code;
    return false;
}

/* addNodeAtPath (projection_parser.cpp): the path's last field must be new (31250), and every field before it must
 * be an inner node (31249; the message's "remaining portion" is FieldPath::tail(), the path without its first
 * field). */
static pnode *add_node(pnode *root, const char *path, pn_kind kind, sim_proj_error *e)
{
    pnode *n = root;
    const char *p = path;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        pnode *child = node_child(n, p, len);
        if (!dot) {
            if (child) {
                set_error(e, 31250, "Path collision at %s", path);
                return NULL;
            }
            return node_add(n, p, len, kind);
        }
        if (!child) {
            child = node_add(n, p, len, PN_PATH);
        } else if (child->kind != PN_PATH) {
            set_error(e, 31249, "Path collision at %s remaining portion %s", path, strchr(path, '.') + 1);
            return NULL;
        }
        n = child;
        p = dot + 1;
    }
}

/* ---- BSON as the server prints it in messages ---- */

static void print_doc(bson_string_t *s, const bson_iter_t *container, bool is_array);

/* BSONElement::toString's value part (src/mongo/bson/bsonelement.cpp) for the types a projection holds: strings in
 * double quotes, numbers plain, a double through StringBuilder::appendDoubleNice ("%.16g", plus ".0" when that has
 * no '.', 'E' or 'N'), documents "{ a: 1 }" and arrays "[ 1, 2 ]" ("{}" and "[]" when empty). */
static void print_value(bson_string_t *s, const bson_iter_t *it)
{
    switch (bson_iter_type(it)) {
    case BSON_TYPE_DOUBLE: {
        char buf[40];
        snprintf(buf, sizeof buf, "%.16g", bson_iter_double(it));
        bson_string_append(s, buf);
        if (!strchr(buf, '.') && !strchr(buf, 'E') && !strchr(buf, 'N'))
            bson_string_append(s, ".0");
        break;
    }
    case BSON_TYPE_UTF8:
        bson_string_append_printf(s, "\"%s\"", bson_iter_utf8(it, NULL));
        break;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        print_doc(s, it, BSON_ITER_HOLDS_ARRAY(it));
        break;
    case BSON_TYPE_BOOL:
        bson_string_append(s, bson_iter_bool(it) ? "true" : "false");
        break;
    case BSON_TYPE_NULL:
        bson_string_append(s, "null");
        break;
    case BSON_TYPE_UNDEFINED:
        bson_string_append(s, "undefined");
        break;
    case BSON_TYPE_INT32:
        bson_string_append_printf(s, "%d", (int)bson_iter_int32(it));
        break;
    case BSON_TYPE_INT64:
        bson_string_append_printf(s, "%lld", (long long)bson_iter_int64(it));
        break;
    case BSON_TYPE_OID: {
        char hex[25];
        bson_oid_to_string(bson_iter_oid(it), hex);
        bson_string_append_printf(s, "ObjectId('%s')", hex);
        break;
    }
    case BSON_TYPE_DATE_TIME:
        bson_string_append_printf(s, "new Date(%lld)", (long long)bson_iter_date_time(it));
        break;
    case BSON_TYPE_TIMESTAMP: {
        uint32_t secs, inc;
        bson_iter_timestamp(it, &secs, &inc);
        bson_string_append_printf(s, "Timestamp(%u, %u)", secs, inc);
        break;
    }
    case BSON_TYPE_DECIMAL128: {
        bson_decimal128_t d;
        char buf[BSON_DECIMAL128_STRING];
        bson_iter_decimal128(it, &d);
        bson_decimal128_to_string(&d, buf);
        bson_string_append(s, buf);
        break;
    }
    default:
        bson_string_append(s, sim_type_name(bson_iter_type(it)));
        break;
    }
}

/* BSONObj::toString: "{ k: v, k2: v2 }", an array without its keys. */
static void print_doc(bson_string_t *s, const bson_iter_t *container, bool is_array)
{
    bson_iter_t it;
    bool first = true;
    bson_string_append(s, is_array ? "[" : "{");
    if (bson_iter_recurse(container, &it)) {
        while (bson_iter_next(&it)) {
            bson_string_append(s, first ? " " : ", ");
            first = false;
            if (!is_array)
                bson_string_append_printf(s, "%s: ", bson_iter_key(&it));
            print_value(s, &it);
        }
    }
    bson_string_append(s, first ? (is_array ? "]" : "}") : (is_array ? " ]" : " }"));
}

/* The sub-document {$slice: ...} an iterator points at, printed. */
static char *print_subdoc(const bson_iter_t *it)
{
    bson_string_t *s = bson_string_new(NULL);
    print_doc(s, it, false);
    return bson_string_free(s, false);
}

/* ---- parsing ---- */

typedef enum { T_UNSET, T_INCLUSION, T_EXCLUSION } ptype;

typedef struct {
    pnode *root;
    ptype type;
    bool has_positional, has_elem_match, has_find_slice, has_meta;
    bool id_included, id_excluded; /* {_id: 1} / {_id: 0} at the top level */
    const char *unsupported;       /* the first valid form mongosim does not execute */
    sim_proj_error *err;
} pctx;

static void unsupported(pctx *c, const char *what)
{
    if (!c->unsupported)
        c->unsupported = what;
}

/* isInclusionOrExclusionType (projection_parser.cpp): bool, int, long, double and decimal. */
static bool is_bool_or_number(const bson_iter_t *it)
{
    return BSON_ITER_HOLDS_BOOL(it) || BSON_ITER_HOLDS_NUMBER(it) || BSON_ITER_HOLDS_DECIMAL128(it);
}

/* BSONElement::trueValue: a non-zero number (NaN counts as true) or true. */
static bool true_value(const bson_iter_t *it)
{
    if (BSON_ITER_HOLDS_DECIMAL128(it)) {
        bson_decimal128_t d;
        char buf[BSON_DECIMAL128_STRING];
        bson_iter_decimal128(it, &d);
        bson_decimal128_to_string(&d, buf);
        double v = strtod(buf, NULL);
        return v != 0 || strstr(buf, "NaN") != NULL;
    }
    if (BSON_ITER_HOLDS_DOUBLE(it))
        return bson_iter_double(it) != 0;
    return bson_iter_as_bool(it);
}

/* FieldPath's checks on a projection's field name (src/mongo/db/pipeline/field_path.cpp): not empty (40352), no
 * trailing '.' (40353), no empty field (15998), no field starting with '$' except the DBRef fields $id, $ref and $db
 * (16410). */
static bool fieldpath_ok(pctx *c, const char *path)
{
    if (!*path)
        return set_error(c->err, 40352, "FieldPath cannot be constructed with empty string");
    if (path[strlen(path) - 1] == '.')
        return set_error(c->err, 40353, "FieldPath must not end with a '.'.");
    for (const char *p = path;;) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (len == 0)
            return set_error(c->err, 15998, "FieldPath field names may not be empty strings.");
        if (p[0] == '$' && !((len == 3 && (strncmp(p, "$id", 3) == 0 || strncmp(p, "$db", 3) == 0)) ||
                             (len == 4 && strncmp(p, "$ref", 4) == 0)))
            return set_error(c->err, 16410,
                             "FieldPath field names may not start with '$'. Consider using $getField or $setField.");
        if (!dot)
            return true;
        p = dot + 1;
    }
}

/* BSONElement::safeNumberInt, which the parser applies to $slice's numbers: a double is truncated, NaN is 0, and
 * values past the int range are clamped. FerretDB's compatibility tests (integration/query_projection_test.go, run
 * against MongoDB) record the outcomes: $slice 1.4 is 1, [-2.5, 2] is [-2, 2], [1, 2.8] is [1, 2], NaN is 0 (an
 * empty array) and Infinity keeps the whole array. False for a decimal, which mongosim does not convert. */
static bool slice_int(const bson_iter_t *it, int32_t *out)
{
    if (BSON_ITER_HOLDS_INT32(it)) {
        *out = bson_iter_int32(it);
    } else if (BSON_ITER_HOLDS_INT64(it)) {
        int64_t v = bson_iter_int64(it);
        *out = v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : (int32_t)v;
    } else if (BSON_ITER_HOLDS_DOUBLE(it)) {
        double v = bson_iter_double(it);
        *out = isnan(v) ? 0 : v >= (double)INT32_MAX ? INT32_MAX : v <= (double)INT32_MIN ? INT32_MIN : (int32_t)v;
    } else {
        return false;
    }
    return true;
}

static bool parse_element(pctx *c, const char *full, const char *key, const bson_iter_t *it);

/* parseInclusion: a path, or a positional "a.$" (31276, 31256; mongosim does not execute it). Then, but for the
 * top-level _id, the projection becomes an inclusion (31253 when it is an exclusion). */
static bool parse_inclusion(pctx *c, const char *full, const char *key, bool positional)
{
    bool top_id = strcmp(full, "_id") == 0;
    if (!positional) {
        if (!fieldpath_ok(c, key) || !add_node(c->root, full, PN_INCLUDE, c->err))
            return false;
        if (top_id)
            c->id_included = true;
    } else {
        if (c->has_positional)
            return set_error(c->err, 31276, "Cannot specify more than one positional projection per query.");
        if (c->has_elem_match)
            return set_error(c->err, 31256, "Cannot specify positional operator and $elemMatch.");
        char *trimmed_key = bson_strndup(key, strlen(key) - 2);
        char *trimmed = bson_strndup(full, strlen(full) - 2);
        bool ok = fieldpath_ok(c, trimmed_key) && add_node(c->root, trimmed, PN_OTHER, c->err);
        bson_free(trimmed_key);
        bson_free(trimmed);
        if (!ok)
            return false;
        c->has_positional = true;
        unsupported(c, "the positional projection (a.$)");
    }
    if (!top_id) {
        if (c->type == T_EXCLUSION)
            return set_error(c->err, 31253, "Cannot do inclusion on field %s in exclusion projection", key);
        c->type = T_INCLUSION;
    }
    return true;
}

/* parseExclusion: 31254 in an inclusion projection, but for the top-level _id. */
static bool parse_exclusion(pctx *c, const char *full, const char *key)
{
    if (!fieldpath_ok(c, key) || !add_node(c->root, full, PN_EXCLUDE, c->err))
        return false;
    if (strcmp(full, "_id") == 0) {
        c->id_excluded = true;
        return true;
    }
    if (c->type == T_INCLUSION)
        return set_error(c->err, 31254, "Cannot do exclusion on field %s in inclusion projection", key);
    c->type = T_EXCLUSION;
    return true;
}

/* parseLiteral: {a: "x"} is a computed field, which makes an inclusion (31310 in an exclusion). */
static bool parse_literal(pctx *c, const char *full, const char *key, const bson_iter_t *it)
{
    if (!fieldpath_ok(c, key) || !add_node(c->root, full, PN_OTHER, c->err))
        return false;
    if (c->type == T_EXCLUSION) {
        bson_string_t *s = bson_string_new(NULL);
        bson_string_append_printf(s, "%s: ", key);
        print_value(s, it);
        set_error(c->err, 31310, "Cannot use an expression %s in an exclusion projection", s->str);
        bson_string_free(s, true);
        return false;
    }
    c->type = T_INCLUSION;
    unsupported(c, "literal values (computed fields)");
    return true;
}

/* attemptToParseGenericExpression: any expression but $meta makes an inclusion (31252 in an exclusion). */
static bool parse_expression(pctx *c, const char *full, const char *name)
{
    bool meta = strcmp(name, "$meta") == 0;
    if (c->type == T_EXCLUSION && !meta)
        return set_error(c->err, 31252, "Cannot use expression other than $meta in exclusion projection");
    if (!meta)
        c->type = T_INCLUSION;
    if (!add_node(c->root, full, PN_OTHER, c->err))
        return false;
    c->has_meta = c->has_meta || meta;
    unsupported(c, meta ? "$meta" : "aggregation expressions");
    return true;
}

/* parseSubObjectAsExpression, $elemMatch: an object (31274), not with a positional projection (31255), on a
 * top-level field (31275). mongosim does not execute it. */
static bool parse_elem_match(pctx *c, const char *full, const bson_iter_t *arg)
{
    if (!BSON_ITER_HOLDS_DOCUMENT(arg))
        return set_error(c->err, 31274, "elemMatch: Invalid argument, object required, but got %s",
                         sim_type_name(bson_iter_type(arg)));
    if (c->has_positional)
        return set_error(c->err, 31255, "Cannot specify positional operator and $elemMatch.");
    if (strchr(full, '.'))
        return set_error(c->err, 31275, "Cannot use $elemMatch projection on a nested field.");
    if (!add_node(c->root, full, PN_OTHER, c->err))
        return false;
    c->has_elem_match = true;
    unsupported(c, "$elemMatch");
    return true;
}

/* An operand of the aggregation $slice whose parse mongosim cannot predict: an expression or a field path. */
static bool complex_operand(const bson_iter_t *it)
{
    if (BSON_ITER_HOLDS_UTF8(it))
        return bson_iter_utf8(it, NULL)[0] == '$';
    if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_iter_t sub;
        return bson_iter_recurse(it, &sub) && bson_iter_next(&sub) && bson_iter_key(&sub)[0] == '$';
    }
    return false;
}

/* $slice (parseSubObjectAsExpression and attemptToParseFindSlice). The find forms: a number n (the first n, or the
 * last -n), or [skip, limit] with two numbers and limit > 0; the numbers through safeNumberInt. Anything else, or a
 * find form whose path collides, is then parsed as the aggregation expression $slice (2 or 3 operands, else 28667),
 * and an error of that parse carries the find form's error in its message: "Invalid $slice syntax. The given
 * syntax { $slice: ... } did not match the find() syntax because :: Location31273: ... :: The given syntax did not
 * match the expression $slice syntax. :: caused by :: <the expression's error>" (DBException::addContext adds
 * " :: caused by :: "; a Status prints as "<codeString>: <reason>", and a code without a name is "Location<code>").
 * The messages are recorded by FerretDB's compatibility tests (integration/query_projection_test.go). mongosim does
 * not execute the aggregation $slice (a server would evaluate it, e.g. failing 28724 on a non-array first operand). */
static bool parse_slice(pctx *c, const char *full, const bson_iter_t *sub, const bson_iter_t *arg)
{
    sim_proj_error st = {0};
    bool find_ok = false, decimal = false;
    if (BSON_ITER_HOLDS_NUMBER(arg) || BSON_ITER_HOLDS_DECIMAL128(arg)) {
        int32_t limit = 0;
        decimal = !slice_int(arg, &limit);
        pnode *n = add_node(c->root, full, decimal ? PN_OTHER : PN_SLICE, &st);
        if (n) {
            n->limit = limit;
            find_ok = true;
        }
    } else if (BSON_ITER_HOLDS_ARRAY(arg)) {
        bson_iter_t a, skip_it, limit_it;
        int count = 0;
        bson_iter_recurse(arg, &a);
        while (bson_iter_next(&a)) {
            if (count == 0)
                skip_it = a;
            else if (count == 1)
                limit_it = a;
            count++;
        }
        int32_t skip = 0, limit = 0;
        if (count != 2) {
            set_error(&st, 31272, "$slice array argument should be of form [skip, limit]");
        } else if (!BSON_ITER_HOLDS_NUMBER(&skip_it) && !BSON_ITER_HOLDS_DECIMAL128(&skip_it)) {
            set_error(&st, 31257, "$slice expects the skip argument to be a number, got %s",
                      sim_type_name(bson_iter_type(&skip_it)));
        } else if (!BSON_ITER_HOLDS_NUMBER(&limit_it) && !BSON_ITER_HOLDS_DECIMAL128(&limit_it)) {
            set_error(&st, 31258, "$slice expects the limit argument to be a number, got %s",
                      sim_type_name(bson_iter_type(&limit_it)));
        } else if (!slice_int(&skip_it, &skip) || !slice_int(&limit_it, &limit)) {
            decimal = true;
            find_ok = add_node(c->root, full, PN_OTHER, &st) != NULL;
        } else if (limit <= 0) {
            set_error(&st, 31259, "$slice limit must be positive, got %d", (int)limit);
        } else {
            pnode *n = add_node(c->root, full, PN_SLICE, &st);
            if (n) {
                n->has_skip = true;
                n->skip = skip;
                n->limit = limit;
                find_ok = true;
            }
        }
    } else {
        set_error(&st, 31273, "$slice only supports numbers and [skip, limit] arrays");
    }
    if (find_ok) {
        c->has_find_slice = true;
        if (decimal)
            unsupported(c, "decimal $slice arguments");
        return true;
    }

    /* The aggregation expression $slice. */
    char *syntax = print_subdoc(sub);
    bson_string_t *ctx = bson_string_new(NULL);
    bson_string_append_printf(ctx,
                              "Invalid $slice syntax. The given syntax %s did not match the find() syntax because :: "
                              "Location%d: %s :: The given syntax did not match the expression $slice syntax.",
                              syntax, st.code, st.message);
    bson_free(syntax);
    bool ok = false;
    int operands = 1;
    bool complex_ops = complex_operand(arg);
    if (BSON_ITER_HOLDS_ARRAY(arg)) {
        bson_iter_t a;
        operands = 0;
        bson_iter_recurse(arg, &a);
        while (bson_iter_next(&a)) {
            operands++;
            complex_ops = complex_ops || complex_operand(&a);
        }
    }
    sim_proj_error st2 = {0};
    if (c->type == T_EXCLUSION) {
        set_error(c->err, 31252, "%s :: caused by :: Cannot use expression other than $meta in exclusion projection",
                  ctx->str);
    } else if (!complex_ops && (operands < 2 || operands > 3)) {
        c->type = T_INCLUSION;
        set_error(c->err, 28667,
                  "%s :: caused by :: Expression $slice takes at least 2 arguments, and at most 3, but %d were passed "
                  "in.",
                  ctx->str, operands);
    } else if (!add_node(c->root, full, PN_OTHER, &st2)) {
        set_error(c->err, st2.code, "%s :: caused by :: %s", ctx->str, st2.message);
    } else {
        c->type = T_INCLUSION;
        unsupported(c, "the aggregation expression $slice (a $slice argument other than n or [skip, limit > 0])");
        ok = true;
    }
    bson_string_free(ctx, true);
    return ok;
}

/* parseSubObject: an empty sub-document is an error (51270, with the text 5.0 to 7.0 servers report: mongo's master
 * now says "Invalid empty sub-projection: <field>"); its field name must be a valid path; then it is an expression
 * or a nested projection. A one-field {$name: ...} that is no expression and no valid field name is 31325. */
static bool parse_subobject(pctx *c, const char *full, const char *key, const bson_iter_t *it)
{
    bson_iter_t sub;
    if (!bson_iter_recurse(it, &sub) || !bson_iter_next(&sub))
        return set_error(c->err, 51270, "An empty sub-projection is not a valid value. Found empty object at path");
    if (!fieldpath_ok(c, key))
        return false;
    const char *name = bson_iter_key(&sub);
    bson_iter_t next = sub;
    if (name[0] == '$' && !bson_iter_next(&next)) {
        if (strcmp(name, "$slice") == 0)
            return parse_slice(c, full, it, &sub);
        if (strcmp(name, "$elemMatch") == 0)
            return parse_elem_match(c, full, &sub);
        bool dbref = strcmp(name, "$id") == 0 || strcmp(name, "$ref") == 0 || strcmp(name, "$db") == 0;
        bool word = name[1] != '\0';
        for (const char *p = name + 1; *p && word; p++)
            word = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' ||
                   (p > name + 1 && *p >= '0' && *p <= '9');
        if (!dbref && word)
            return parse_expression(c, full, name);
        if (!dbref)
            return set_error(c->err, 31325, "Unknown expression %s", name);
    }
    do {
        const char *k = bson_iter_key(&sub);
        char *path = bson_strdup_printf("%s.%s", full, k);
        bool ok = parse_element(c, path, k, &sub);
        bson_free(path);
        if (!ok)
            return false;
    } while (bson_iter_next(&sub));
    return true;
}

/* parseElement: a positional operator may only end a path (31394); a positional path takes neither a sub-document
 * (31271) nor a literal (31308). */
static bool parse_element(pctx *c, const char *full, const char *key, const bson_iter_t *it)
{
    if (strstr(key, ".$."))
        return set_error(c->err, 31394,
                         "As of 4.4, it's illegal to specify positional operator in the middle of a path.Positional "
                         "projection may only be used at the end, for example: a.b.$. If the query previously used a "
                         "form like a.b.$.d, remove the parts following the '$' and the results will be equivalent.");
    size_t klen = strlen(key);
    bool positional = klen > 2 && strcmp(key + klen - 2, ".$") == 0;
    if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        if (positional)
            return set_error(c->err, 31271, "positional projection cannot be used with an expression or sub object");
        return parse_subobject(c, full, key, it);
    }
    if (is_bool_or_number(it))
        return true_value(it) ? parse_inclusion(c, full, key, positional) : parse_exclusion(c, full, key);
    if (positional)
        return set_error(c->err, 31308, "positional projection cannot be used with a literal");
    return parse_literal(c, full, key, it);
}

/* computeProjectionType: when no element decided. */
static bool compute_inclusion(const pctx *c)
{
    if (c->has_find_slice)
        return c->id_included;
    if (c->has_elem_match)
        return true;
    if (c->has_meta)
        return !c->id_excluded && c->id_included;
    return c->id_included;
}

static void split_path(const char *path, slice_op *op)
{
    op->ncomps = 1;
    for (const char *p = path; *p; p++)
        op->ncomps += *p == '.';
    op->comps = bson_malloc0(op->ncomps * sizeof *op->comps);
    const char *p = path;
    for (size_t i = 0; i < op->ncomps; i++) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        op->comps[i] = bson_strndup(p, len);
        p = dot ? dot + 1 : p + len;
    }
}

/* The $slice nodes in the tree's order (the order the executor chains them in). */
static void collect_slices(sim_projection *p, const pnode *n, const char *prefix)
{
    for (size_t i = 0; i < n->nkids; i++) {
        const pnode *k = n->kids[i];
        char *path = prefix ? bson_strdup_printf("%s.%s", prefix, k->name) : bson_strdup(k->name);
        if (k->kind == PN_SLICE) {
            p->slices = bson_realloc(p->slices, (p->nslices + 1) * sizeof *p->slices);
            slice_op *op = &p->slices[p->nslices++];
            split_path(path, op);
            op->has_skip = k->has_skip;
            op->skip = k->skip;
            op->limit = k->limit;
        } else if (k->kind == PN_PATH) {
            collect_slices(p, k, path);
        }
        bson_free(path);
    }
}

bool projection_parse(const bson_t *spec, sim_projection **out, sim_proj_error *err)
{
    *out = NULL;
    memset(err, 0, sizeof *err);
    if (!spec || bson_empty(spec))
        return true;
    sim_projection *p = bson_malloc0(sizeof *p);
    pctx c = {.root = &p->root, .err = err};
    bool id_specified = false;
    bson_iter_t it;
    bson_iter_init(&it, spec);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        id_specified = id_specified || strcmp(k, "_id") == 0 || strncmp(k, "_id.", 4) == 0;
        if (!parse_element(&c, k, k, &it)) {
            projection_free(p);
            return false;
        }
    }
    bool inclusion = c.type == T_UNSET ? compute_inclusion(&c) : c.type == T_INCLUSION;
    /* parse(): an inclusion projection includes _id unless the spec names it; an exclusion drops {_id: 1}. */
    if (!id_specified && inclusion)
        add_node(&p->root, "_id", PN_INCLUDE, err);
    if (!inclusion && id_specified && c.id_included) {
        for (size_t i = 0; i < p->root.nkids; i++) {
            if (strcmp(p->root.kids[i]->name, "_id") == 0) {
                node_clear(p->root.kids[i]);
                bson_free(p->root.kids[i]);
                memmove(&p->root.kids[i], &p->root.kids[i + 1], (p->root.nkids - i - 1) * sizeof *p->root.kids);
                p->root.nkids--;
                break;
            }
        }
    }
    if (c.unsupported) {
        set_error(err, 2,
                  "mongosim does not support %s in a find projection (it supports inclusion, exclusion and $slice "
                  "with n or [skip, limit])",
                  c.unsupported);
        projection_free(p);
        return false;
    }
    p->inclusion = inclusion;
    collect_slices(p, &p->root, NULL);
    *out = p;
    return true;
}

void projection_free(sim_projection *p)
{
    if (!p)
        return;
    node_clear(&p->root);
    for (size_t i = 0; i < p->nslices; i++) {
        for (size_t j = 0; j < p->slices[i].ncomps; j++)
            bson_free(p->slices[i].comps[j]);
        bson_free(p->slices[i].comps);
    }
    bson_free(p->slices);
    bson_free(p);
}

/* ---- applying ---- */

static bool iter_sub(const bson_iter_t *it, bson_t *out)
{
    uint32_t len;
    const uint8_t *data;
    if (BSON_ITER_HOLDS_DOCUMENT(it))
        bson_iter_document(it, &len, &data);
    else
        bson_iter_array(it, &len, &data);
    return bson_init_static(out, data, len);
}

static void include_doc(const pnode *n, const bson_t *doc, bson_t *out);

/* An array key for element i. */
static const char *array_key(uint32_t i, char *buf, size_t size)
{
    const char *k;
    bson_uint32_to_string(i, &k, buf, size);
    return k;
}

/* The inclusion of sub-paths n in an array: documents are projected, nested arrays walked, scalars dropped. */
static void include_array(const pnode *n, const bson_t *arr, bson_t *out)
{
    bson_iter_t it;
    uint32_t i = 0;
    char buf[16];
    bson_iter_init(&it, arr);
    while (bson_iter_next(&it)) {
        bson_t in, sub;
        if (BSON_ITER_HOLDS_DOCUMENT(&it) && iter_sub(&it, &in)) {
            bson_append_document_begin(out, array_key(i++, buf, sizeof buf), -1, &sub);
            include_doc(n, &in, &sub);
            bson_append_document_end(out, &sub);
        } else if (BSON_ITER_HOLDS_ARRAY(&it) && iter_sub(&it, &in)) {
            bson_append_array_begin(out, array_key(i++, buf, sizeof buf), -1, &sub);
            include_array(n, &in, &sub);
            bson_append_array_end(out, &sub);
        }
    }
}

/* An inclusion projection (ProjectionNode::applyProjections with InclusionNode): the document's fields in its
 * order, each kept whole when included, projected when sub-paths of it are, dropped otherwise (and dropped when a
 * sub-path was asked of a scalar). A $slice path is included whole; an excluded _id is not included. The walk stops
 * once every field the node names has been seen, as the server's does. */
static void include_doc(const pnode *n, const bson_t *doc, bson_t *out)
{
    bson_iter_t it;
    size_t seen = 0;
    bson_iter_init(&it, doc);
    while (seen < n->nkids && bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        const pnode *k = node_child(n, key, strlen(key));
        if (!k)
            continue;
        seen++;
        bson_t in, sub;
        if (k->kind == PN_INCLUDE || k->kind == PN_SLICE) {
            bson_append_iter(out, NULL, 0, &it);
        } else if (k->kind != PN_PATH) {
            continue;
        } else if (BSON_ITER_HOLDS_DOCUMENT(&it) && iter_sub(&it, &in)) {
            bson_append_document_begin(out, key, -1, &sub);
            include_doc(k, &in, &sub);
            bson_append_document_end(out, &sub);
        } else if (BSON_ITER_HOLDS_ARRAY(&it) && iter_sub(&it, &in)) {
            bson_append_array_begin(out, key, -1, &sub);
            include_array(k, &in, &sub);
            bson_append_array_end(out, &sub);
        }
    }
}

static void exclude_doc(const pnode *n, const bson_t *doc, bson_t *out);

static void exclude_array(const pnode *n, const bson_t *arr, bson_t *out)
{
    bson_iter_t it;
    uint32_t i = 0;
    char buf[16];
    bson_iter_init(&it, arr);
    while (bson_iter_next(&it)) {
        bson_t in, sub;
        const char *k = array_key(i++, buf, sizeof buf);
        if (BSON_ITER_HOLDS_DOCUMENT(&it) && iter_sub(&it, &in)) {
            bson_append_document_begin(out, k, -1, &sub);
            exclude_doc(n, &in, &sub);
            bson_append_document_end(out, &sub);
        } else if (BSON_ITER_HOLDS_ARRAY(&it) && iter_sub(&it, &in)) {
            bson_append_array_begin(out, k, -1, &sub);
            exclude_array(n, &in, &sub);
            bson_append_array_end(out, &sub);
        } else {
            bson_append_iter(out, k, -1, &it);
        }
    }
}

/* An exclusion projection (ExclusionNode): the document as it is, less the excluded paths; documents and arrays on
 * a path are walked, scalars kept. */
static void exclude_doc(const pnode *n, const bson_t *doc, bson_t *out)
{
    bson_iter_t it;
    size_t seen = 0;
    bson_iter_init(&it, doc);
    while (bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        const pnode *k = seen < n->nkids ? node_child(n, key, strlen(key)) : NULL;
        bson_t in, sub;
        if (k)
            seen++;
        if (!k || k->kind != PN_PATH) {
            if (!k || k->kind != PN_EXCLUDE)
                bson_append_iter(out, NULL, 0, &it);
        } else if (BSON_ITER_HOLDS_DOCUMENT(&it) && iter_sub(&it, &in)) {
            bson_append_document_begin(out, key, -1, &sub);
            exclude_doc(k, &in, &sub);
            bson_append_document_end(out, &sub);
        } else if (BSON_ITER_HOLDS_ARRAY(&it) && iter_sub(&it, &in)) {
            bson_append_array_begin(out, key, -1, &sub);
            exclude_array(k, &in, &sub);
            bson_append_array_end(out, &sub);
        } else {
            bson_append_iter(out, NULL, 0, &it);
        }
    }
}

/* sliceArray (find_projection_executor.cpp): $slice n takes the first n, or the last -n; [skip, limit] skips from
 * the start, or when skip < 0 starts -skip from the end (at the start when that is before it), and takes limit. */
static void slice_array(const slice_op *op, const bson_t *arr, bson_t *out)
{
    int64_t len = bson_count_keys(arr), start = 0, forward;
    if (!op->has_skip) {
        if (op->limit < 0) {
            start = len + op->limit > 0 ? len + op->limit : 0;
            forward = len - start;
        } else {
            forward = op->limit < len ? op->limit : len;
        }
    } else {
        if (op->skip < 0)
            start = len + op->skip > 0 ? len + op->skip : 0;
        else
            start = op->skip < len ? op->skip : len;
        forward = len - start < op->limit ? len - start : op->limit;
    }
    bson_iter_t it;
    int64_t i = 0;
    uint32_t n = 0;
    char buf[16];
    bson_iter_init(&it, arr);
    while (i < start + forward && bson_iter_next(&it)) {
        if (i++ >= start)
            bson_append_iter(out, array_key(n++, buf, sizeof buf), -1, &it);
    }
}

static void slice_doc(const slice_op *op, size_t idx, const bson_t *doc, bson_t *out);

/* applySliceProjectionHelper / applySliceProjectionToArray (find_projection_executor.cpp), for one field on the
 * path: the last field's array is sliced; an array before the last field has each of its documents walked, and
 * everything else in it (nested arrays too) kept as it is; a document is walked when the path goes on; any other
 * value is kept. */
static void slice_field(const slice_op *op, size_t next, const bson_iter_t *it, bson_t *out)
{
    const char *key = bson_iter_key(it);
    bson_t in, sub;
    if (BSON_ITER_HOLDS_ARRAY(it) && iter_sub(it, &in)) {
        bson_append_array_begin(out, key, -1, &sub);
        if (next == op->ncomps) {
            slice_array(op, &in, &sub);
        } else {
            bson_iter_t e;
            uint32_t i = 0;
            char buf[16];
            bson_iter_init(&e, &in);
            while (bson_iter_next(&e)) {
                const char *k = array_key(i++, buf, sizeof buf);
                bson_t ein, esub;
                if (BSON_ITER_HOLDS_DOCUMENT(&e) && iter_sub(&e, &ein)) {
                    bson_append_document_begin(&sub, k, -1, &esub);
                    slice_doc(op, next, &ein, &esub);
                    bson_append_document_end(&sub, &esub);
                } else {
                    bson_append_iter(&sub, k, -1, &e);
                }
            }
        }
        bson_append_array_end(out, &sub);
    } else if (BSON_ITER_HOLDS_DOCUMENT(it) && next < op->ncomps && iter_sub(it, &in)) {
        bson_append_document_begin(out, key, -1, &sub);
        slice_doc(op, next, &in, &sub);
        bson_append_document_end(out, &sub);
    } else {
        bson_append_iter(out, NULL, 0, it);
    }
}

/* The document with its field comps[idx] (the first of that name) replaced; missing, nothing changes. */
static void slice_doc(const slice_op *op, size_t idx, const bson_t *doc, bson_t *out)
{
    bson_iter_t it;
    bool done = false;
    bson_iter_init(&it, doc);
    while (bson_iter_next(&it)) {
        if (!done && strcmp(bson_iter_key(&it), op->comps[idx]) == 0) {
            done = true;
            slice_field(op, idx + 1, &it, out);
        } else {
            bson_append_iter(out, NULL, 0, &it);
        }
    }
}

void projection_apply(const sim_projection *p, const bson_t *doc, bson_t *out)
{
    if (!p->nslices) {
        if (p->inclusion)
            include_doc(&p->root, doc, out);
        else
            exclude_doc(&p->root, doc, out);
        return;
    }
    bson_t *cur = bson_new();
    if (p->inclusion)
        include_doc(&p->root, doc, cur);
    else
        exclude_doc(&p->root, doc, cur);
    /* Each $slice rewrites the projected document (the root replacement expressions, chained), the last one into
     * out. */
    for (size_t i = 0; i < p->nslices; i++) {
        bson_t *next = i + 1 == p->nslices ? out : bson_new();
        slice_doc(&p->slices[i], 0, cur, next);
        bson_destroy(cur);
        cur = next;
    }
}

const char *projection_code_name(int code)
{
    /* Codes without a name in src/mongo/base/error_codes.yml: the reply's codeName is "Location<code>". */
    static const struct {
        int code;
        const char *name;
    } names[] = {
        {15998, "Location15998"}, {16410, "Location16410"}, {28667, "Location28667"}, {31249, "Location31249"},
        {31250, "Location31250"}, {31252, "Location31252"}, {31253, "Location31253"}, {31254, "Location31254"},
        {31255, "Location31255"}, {31256, "Location31256"}, {31271, "Location31271"}, {31274, "Location31274"},
        {31275, "Location31275"}, {31276, "Location31276"}, {31308, "Location31308"}, {31310, "Location31310"},
        {31325, "Location31325"}, {31394, "Location31394"}, {40352, "Location40352"}, {40353, "Location40353"},
        {51270, "Location51270"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].code == code)
            return names[i].name;
    return NULL;
}

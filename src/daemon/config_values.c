/*
 * config_values.c — values of the configuration: the text of one value parsed into its type and printed back
 * (numbers with units, booleans, enums, lists; include/daemon/config_values.h), and the field of struct config that
 * holds an option's value, reached through its row of the table (set, check, print, compare, swap, free;
 * config_internal.h). A new unit or value type, or a change to how values are written, belongs here; a new option
 * belongs in the table in config.c.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_internal.h"
#include "daemon/config_values.h"

/* Enum fields are stored and read as int. */
_Static_assert(sizeof(enum config_apply_mode) == sizeof(int), "enum fields are accessed as int");
_Static_assert(sizeof(enum config_log_level) == sizeof(int), "enum fields are accessed as int");

#define FIELD(c, def, T)  ((T *)(void *)((char *)(c) + (def)->offset))
#define CFIELD(c, def, T) ((const T *)(const void *)((const char *)(c) + (def)->offset))

/* ---- units ------------------------------------------------------------------------------------------------------ */

struct unit {
    const char *name;
    int64_t factor;
    bool alias; /* accepted, never printed (nor listed among the valid units) */
};

static const struct unit duration_units[] = {
    {"ms", 1, false}, {"s", MS_PER_S, false}, {"min", MS_PER_MIN, false}, {"h", MS_PER_H, false}, {NULL, 0, false},
};
/* kB is PostgreSQL's spelling; KB is accepted too because people write it, and means the same 1024 bytes. */
static const struct unit size_units[] = {
    {"B", 1, false}, {"kB", KB, false}, {"KB", KB, true}, {"MB", MB, false}, {"GB", GB, false}, {NULL, 0, false},
};

static const struct unit *units_of(enum config_type type)
{
    return type == CONFIG_TYPE_DURATION ? duration_units : size_units;
}

/* The units, for a message: "ms, s, min, h". */
static void unit_names(const struct unit *units, char *buf, size_t buflen)
{
    struct sbuf sb = {buf, 0, buflen};

    if (buflen > 0)
        buf[0] = '\0';
    for (const struct unit *u = units; u->name != NULL; u++) {
        if (u->alias)
            continue;
        if (sb.len > 0)
            sb_adds(&sb, ", ");
        sb_adds(&sb, u->name);
    }
}

/* ---- numbers ---------------------------------------------------------------------------------------------------- */

/* A whole number, optionally signed, then optional spaces, then the rest in *rest. */
static bool parse_whole(const char *text, int64_t *out, const char **rest)
{
    char *end;
    const char *p = text;

    while (isspace((unsigned char)*p))
        p++;
    if (!(isdigit((unsigned char)*p) || ((*p == '-' || *p == '+') && isdigit((unsigned char)p[1]))))
        return false;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (errno == ERANGE)
        return false;
    while (isspace((unsigned char)*end))
        end++;
    *out = v;
    *rest = end;
    return true;
}

void config_format_number(const config_option_info *o, int64_t v, char *buf, size_t buflen)
{
    if (v == 0 && o->zero_word != NULL) {
        snprintf(buf, buflen, "%s", o->zero_word);
        return;
    }
    if (o->type != CONFIG_TYPE_DURATION && o->type != CONFIG_TYPE_SIZE) {
        snprintf(buf, buflen, "%" PRId64, v);
        return;
    }
    if (v == 0) {
        snprintf(buf, buflen, "0");
        return;
    }
    const struct unit *units = units_of(o->type), *best = &units[0];
    for (const struct unit *u = units; u->name != NULL; u++) {
        if (v % u->factor == 0 && u->factor >= best->factor && !u->alias)
            best = u;
    }
    snprintf(buf, buflen, "%" PRId64 "%s", v / best->factor, best->name);
}

bool config_parse_number(const config_option_info *o, const char *text, int64_t *out, char *err, size_t errlen)
{
    const struct unit *units = units_of(o->type);
    const char *rest;
    int64_t n, factor = 1;

    if (o->zero_word != NULL && strcasecmp(text, o->zero_word) == 0) {
        *out = 0;
        return true;
    }
    if (!parse_whole(text, &n, &rest)) {
        snprintf(err, errlen, "\"%s\" is not a whole number%s%s%s", text,
                 o->type == CONFIG_TYPE_INT ? "" : " with an optional unit", o->zero_word != NULL ? " or " : "",
                 o->zero_word != NULL ? o->zero_word : "");
        return false;
    }
    if (o->type == CONFIG_TYPE_INT) {
        if (*rest != '\0') {
            snprintf(err, errlen, "\"%s\" is not a whole number", text);
            return false;
        }
    } else if (*rest == '\0') {
        if (o->base_unit != NULL) {
            for (const struct unit *u = units; u->name != NULL; u++)
                if (strcmp(u->name, o->base_unit) == 0)
                    factor = u->factor;
        }
    } else {
        const struct unit *u = units;
        while (u->name != NULL && strcmp(u->name, rest) != 0)
            u++;
        if (u->name == NULL) {
            char valid[64];
            unit_names(units, valid, sizeof valid);
            snprintf(err, errlen, "\"%s\" has an unknown unit \"%s\" (valid units: %s)", text, rest, valid);
            return false;
        }
        factor = u->factor;
    }
    if ((n > 0 && n > INT64_MAX / factor) || (n < 0 && n < INT64_MIN / factor) || n * factor < o->min ||
        n * factor > o->max) {
        char lo[32], hi[32];
        config_format_number(o, o->min, lo, sizeof lo);
        config_format_number(o, o->max, hi, sizeof hi);
        snprintf(err, errlen, "%s is out of range (%s .. %s)", text, lo, hi);
        return false;
    }
    *out = n * factor;
    return true;
}

/* ---- booleans and enums ----------------------------------------------------------------------------------------- */

bool config_parse_bool(const char *text, bool *out, char *err, size_t errlen)
{
    static const char *const yes[] = {"on", "true", "yes", "1"};
    static const char *const no[] = {"off", "false", "no", "0"};

    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcasecmp(text, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(text, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    snprintf(err, errlen, "\"%s\" is not a boolean (on/off, true/false, yes/no, 1/0)", text);
    return false;
}

bool config_parse_enum(const config_option_info *o, const char *text, int *out, char *err, size_t errlen)
{
    char names[256];
    struct sbuf sb = {names, 0, sizeof names};

    names[0] = '\0';
    for (int i = 0; o->choices[i] != NULL; i++) {
        if (strcasecmp(o->choices[i], text) == 0) {
            *out = i;
            return true;
        }
        if (i > 0)
            sb_adds(&sb, ", ");
        sb_adds(&sb, o->choices[i]);
    }
    snprintf(err, errlen, "\"%s\" is not one of: %s", text, names);
    return false;
}

/* ---- lists ------------------------------------------------------------------------------------------------------ */

void config_list_clear(config_list *l)
{
    if (l->items != NULL) {
        for (size_t i = 0; i < l->count; i++)
            free(l->items[i]);
        free(l->items);
    }
    l->items = NULL;
    l->count = 0;
}

bool config_list_append(config_list *l, const char *text, config_check_fn check, char *err, size_t errlen)
{
    const char *p = text;

    if (l->items == NULL) {
        l->items = calloc(1, sizeof *l->items);
        if (l->items == NULL)
            goto nomem;
    }
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '\0')
        return true;
    for (;;) {
        const char *end = strchr(p, ',');
        const char *stop = end ? end : p + strlen(p);
        const char *a = p, *b = stop;
        while (a < b && isspace((unsigned char)*a))
            a++;
        while (b > a && isspace((unsigned char)b[-1]))
            b--;
        if (a == b && end == NULL && l->count > 0)
            break; /* a trailing comma, as at the end of a line that a continuation line extends */
        if (a == b) {
            snprintf(err, errlen, "\"%s\" has an empty item (items are separated by commas)", text);
            return false;
        }
        char *item = strndup(a, (size_t)(b - a));
        if (item == NULL)
            goto nomem;
        if (check != NULL && !check(item, err, errlen)) {
            free(item);
            return false;
        }
        char **grown = realloc(l->items, (l->count + 2) * sizeof *grown);
        if (grown == NULL) {
            free(item);
            goto nomem;
        }
        l->items = grown;
        l->items[l->count++] = item;
        l->items[l->count] = NULL;
        if (end == NULL)
            break;
        p = end + 1;
    }
    return true;
nomem:
    snprintf(err, errlen, "out of memory");
    return false;
}

/* ---- the field of struct config behind a row of the table ------------------------------------------------------- */

bool config_field_set(config *c, const struct option_def *def, const char *value, bool continuation, char *err,
                      size_t errlen)
{
    if (continuation && def->info.type != CONFIG_TYPE_STRING && def->info.type != CONFIG_TYPE_LIST) {
        snprintf(err, errlen,
                 "this line starts with whitespace, which continues the previous value, and a %s value cannot "
                 "continue (remove the indentation)",
                 def->info.type_name);
        return false;
    }
    if (continuation && def->info.type == CONFIG_TYPE_STRING && def->join == NULL) {
        snprintf(err, errlen,
                 "this line starts with whitespace, which continues the previous value, and this value cannot "
                 "continue (remove the indentation)");
        return false;
    }

    switch (def->info.type) {
    case CONFIG_TYPE_STRING: {
        char **field = FIELD(c, def, char *);
        char *s;
        if (continuation) {
            if (asprintf(&s, "%s%s%s", *field ? *field : "", def->join, value) < 0)
                s = NULL;
        } else
            s = strdup(value);
        if (s == NULL) {
            snprintf(err, errlen, "out of memory");
            return false;
        }
        /* The check runs once the value is complete: at validation (a continuation line may follow) or in
         * config_override. */
        if (def->secret)
            config_secret_free(*field);
        else
            free(*field);
        *field = s;
        return true;
    }
    case CONFIG_TYPE_LIST: {
        config_list *field = FIELD(c, def, config_list);
        config_list l = {0};
        if (continuation) {
            for (size_t i = 0; i < field->count; i++)
                if (!config_list_append(&l, field->items[i], NULL, err, errlen))
                    goto list_fail;
        }
        if (!config_list_append(&l, value, def->check, err, errlen))
            goto list_fail;
        config_list_clear(field);
        *field = l;
        return true;
    list_fail:
        config_list_clear(&l);
        return false;
    }
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_DURATION:
    case CONFIG_TYPE_SIZE:
        return config_parse_number(&def->info, value, FIELD(c, def, int64_t), err, errlen);
    case CONFIG_TYPE_BOOL:
        return config_parse_bool(value, FIELD(c, def, bool), err, errlen);
    case CONFIG_TYPE_ENUM:
        return config_parse_enum(&def->info, value, FIELD(c, def, int), err, errlen);
    }
    return false;
}

bool config_field_check(const config *c, const struct option_def *def, char *err, size_t errlen)
{
    return def->info.type != CONFIG_TYPE_STRING || def->check == NULL ||
           def->check(*CFIELD(c, def, char *), err, errlen);
}

const char *config_field_format(const config *c, const struct option_def *def, bool mask, char *buf, size_t buflen)
{
    struct sbuf sb = {buf, 0, buflen};

    if (buflen > 0)
        buf[0] = '\0';
    switch (def->info.type) {
    case CONFIG_TYPE_STRING: {
        const char *s = *CFIELD(c, def, char *);
        if (mask && def->secret)
            config_mask_secrets(s, buf, buflen);
        else
            sb_adds(&sb, s ? s : "");
        break;
    }
    case CONFIG_TYPE_LIST: {
        const config_list *l = CFIELD(c, def, config_list);
        for (size_t i = 0; i < l->count; i++) {
            if (i > 0)
                sb_adds(&sb, ", ");
            sb_adds(&sb, l->items[i]);
        }
        break;
    }
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_DURATION:
    case CONFIG_TYPE_SIZE:
        config_format_number(&def->info, *CFIELD(c, def, int64_t), buf, buflen);
        break;
    case CONFIG_TYPE_BOOL:
        sb_adds(&sb, *CFIELD(c, def, bool) ? "on" : "off");
        break;
    case CONFIG_TYPE_ENUM:
        sb_adds(&sb, def->info.choices[*CFIELD(c, def, int)]);
        break;
    }
    return buf;
}

bool config_field_equal(const struct option_def *def, const config *a, const config *b)
{
    switch (def->info.type) {
    case CONFIG_TYPE_STRING: {
        const char *x = *CFIELD(a, def, char *), *y = *CFIELD(b, def, char *);
        return strcmp(x ? x : "", y ? y : "") == 0;
    }
    case CONFIG_TYPE_LIST: {
        const config_list *x = CFIELD(a, def, config_list), *y = CFIELD(b, def, config_list);
        if (x->count != y->count)
            return false;
        for (size_t i = 0; i < x->count; i++)
            if (strcmp(x->items[i], y->items[i]) != 0)
                return false;
        return true;
    }
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_DURATION:
    case CONFIG_TYPE_SIZE:
        return *CFIELD(a, def, int64_t) == *CFIELD(b, def, int64_t);
    case CONFIG_TYPE_BOOL:
        return *CFIELD(a, def, bool) == *CFIELD(b, def, bool);
    case CONFIG_TYPE_ENUM:
        return *CFIELD(a, def, int) == *CFIELD(b, def, int);
    }
    return false;
}

static size_t field_size(const struct option_def *def)
{
    switch (def->info.type) {
    case CONFIG_TYPE_STRING:
        return sizeof(char *);
    case CONFIG_TYPE_LIST:
        return sizeof(config_list);
    case CONFIG_TYPE_BOOL:
        return sizeof(bool);
    case CONFIG_TYPE_ENUM:
        return sizeof(int);
    default:
        return sizeof(int64_t);
    }
}

void config_field_swap(const struct option_def *def, config *a, config *b)
{
    unsigned char tmp[sizeof(config_list)];
    size_t n = field_size(def);
    void *x = (char *)a + def->offset, *y = (char *)b + def->offset;

    memcpy(tmp, x, n);
    memcpy(x, y, n);
    memcpy(y, tmp, n);
}

void config_field_clear(config *c, const struct option_def *def)
{
    if (def->info.type == CONFIG_TYPE_STRING) {
        if (def->secret)
            config_secret_free(*FIELD(c, def, char *)); /* may hold a password */
        else
            free(*FIELD(c, def, char *));
        *FIELD(c, def, char *) = NULL;
    } else if (def->info.type == CONFIG_TYPE_LIST) {
        config_list_clear(FIELD(c, def, config_list));
    }
}

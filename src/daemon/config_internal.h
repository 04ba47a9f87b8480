/*
 * config_internal.h — what the files of the configuration module share and nothing else sees:
 *
 *   config.c          the option table (one struct option_def per option), defaults, load, validation, override,
 *                     reload, printing: the API of include/daemon/config.h
 *   config_values.c   the value syntax (include/daemon/config_values.h) and, below, the field of struct config an
 *                     option_def points at: set from text, print, compare, swap, free
 *   config_secrets.c  passwords: [mongodb] password_file, the world-readable warning, masking
 *   config_ini.c      the INI file format (include/daemon/config_ini.h)
 *   config_map.c      the map sections (include/daemon/config_map.h), hooked into config.c's section and key handlers
 */
#ifndef OPLOG2PG_DAEMON_CONFIG_INTERNAL_H
#define OPLOG2PG_DAEMON_CONFIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "daemon/config.h"
#include "daemon/config_values.h"

/* Durations are kept in milliseconds, sizes in bytes; the table's bounds and the units are written with these. */
#define MS_PER_S   INT64_C(1000)
#define MS_PER_MIN (60 * MS_PER_S)
#define MS_PER_H   (60 * MS_PER_MIN)
#define KB         INT64_C(1024)
#define MB         (1024 * KB)
#define GB         (1024 * MB)

/* One row of the option table. */
struct option_def {
    config_option_info info;
    size_t offset;         /* of the field in struct config */
    config_check_fn check; /* string: the whole value; list: each item; may be NULL */
    const char *join;      /* string: what joins a continuation line to the value before it; NULL = no continuation */
    bool secret;           /* may hold a password: masked when printed */
};

/* ---- config_values.c: the field of c that def describes ---------------------------------------------------------- */

/* Stores value into the field. A continuation appends to a string or list instead of replacing it (and is refused for
 * other types, and for a string without def->join). A list's items are checked here; a string is checked only once
 * complete, by config_field_check. On failure the field keeps its old value and err says why (without the option's
 * name). */
bool config_field_set(config *c, const struct option_def *def, const char *value, bool continuation, char *err,
                      size_t errlen);
/* Runs def->check on a string field (true for other types and when there is no check). */
bool config_field_check(const config *c, const struct option_def *def, char *err, size_t errlen);
/* The field as text, as config_print writes it; with mask, a secret's password is replaced. Returns buf. */
const char *config_field_format(const config *c, const struct option_def *def, bool mask, char *buf, size_t buflen);
bool config_field_equal(const struct option_def *def, const config *a, const config *b);
void config_field_swap(const struct option_def *def, config *a, config *b);
/* Frees what the field owns (a string, a list) and zeroes it. */
void config_field_clear(config *c, const struct option_def *def);

/* ---- config_secrets.c -------------------------------------------------------------------------------------------- */

/* Sets c->mongodb_uri_effective: the URI as written, or, with a password_file, the URI with that file's password.
 * The URI itself has passed its check. On failure c is unchanged and err says what is wrong (without the
 * "[mongodb] password_file: " that the caller puts in front). */
bool config_resolve_mongodb_uri(config *c, char *err, size_t errlen);

/* Zeroes the string s (which may hold a password) and frees it; NULL is fine. */
void config_secret_free(char *s);

/* ---- a small bounded string builder: appends what fits, always NUL-terminated ----------------------------------- */

struct sbuf {
    char *buf;
    size_t len, cap;
};

static inline void sb_add(struct sbuf *sb, const char *s, size_t n)
{
    if (sb->cap == 0)
        return;
    size_t room = sb->cap - 1 - sb->len;
    if (n > room)
        n = room;
    memcpy(sb->buf + sb->len, s, n);
    sb->len += n;
    sb->buf[sb->len] = '\0';
}

static inline void sb_adds(struct sbuf *sb, const char *s)
{
    sb_add(sb, s, strlen(s));
}

#endif

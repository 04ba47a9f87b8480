/*
 * config_values.h — the value syntax of the configuration file, one value at a time: whole numbers with units
 * (int, duration, size), booleans, enum names and comma-separated lists, parsed from and printed back to the text
 * docs/configuration.md ("Values") describes. Each function is given the option's description (config_option_info:
 * type, bounds, base unit, choices) and knows nothing of struct config or of the INI file; src/daemon/config_values.c
 * implements them. config.c uses them for every option of its table; the unit tests call them directly.
 */
#ifndef OPLOG2PG_DAEMON_CONFIG_VALUES_H
#define OPLOG2PG_DAEMON_CONFIG_VALUES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/config.h"

/* A check of one string value (or one list item): false with err set when it is not acceptable. */
typedef bool (*config_check_fn)(const char *value, char *err, size_t errlen);

/* o->type is INT, DURATION or SIZE. A whole number, optionally signed, with leading and trailing spaces allowed; for a
 * duration or size an optional unit may follow (a space before it is allowed): ms, s, min, h; B, kB (or KB), MB, GB.
 * A bare duration is in o->base_unit, a bare size in bytes. The result (ms for a duration, bytes for a size) must lie
 * in [o->min, o->max]. On failure *out is untouched and err says why, e.g. "2h is out of range (1ms .. 1h)". */
bool config_parse_number(const config_option_info *o, const char *text, int64_t *out, char *err, size_t errlen);

/* v as config_print writes it: an int as it is; a duration or size in the largest unit that divides it exactly
 * (61000 ms -> "61s", 1536 kB -> "1536kB", never "KB"); 0 as "0". */
void config_format_number(const config_option_info *o, int64_t v, char *buf, size_t buflen);

/* on/off, true/false, yes/no, 1/0, in any case. */
bool config_parse_bool(const char *text, bool *out, char *err, size_t errlen);

/* One of o->choices, in any case; *out is its index. */
bool config_parse_enum(const config_option_info *o, const char *text, int *out, char *err, size_t errlen);

/* Appends the comma-separated items of text to l, each trimmed and passed to check (when not NULL). A text of only
 * whitespace adds nothing; an empty item is an error, except a trailing comma after at least one item (a
 * continuation line adds the next items). l->items is allocated even when nothing is added (count 0, items[0] NULL).
 * On failure l keeps the items added before the bad one: the caller owns l either way. */
bool config_list_append(config_list *l, const char *text, config_check_fn check, char *err, size_t errlen);

/* Frees l's items and zeroes it. */
void config_list_clear(config_list *l);

#endif

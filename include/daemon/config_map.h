/*
 * config_map.h — the column maps in the configuration file: [map DB.COLLECTION] and [child SCHEMA.TABLE] sections
 * read into a map_set (map/map.h), and the map printed back (the `map` command, `config`, reload).
 *
 * config.c hands every section header and every key of a map section to the reader below as the INI reader
 * (config_ini.h) meets them; each line's syntax is checked there and then, so its error names its line. What needs
 * the whole file (defaults, which [child] section a child.PATH line names, the key column, the rules of a complete
 * set in map/map_set.c) is done by config_map_finish once the file is read; those errors name the line they are
 * about too. docs/mapping.md is the user's description of the syntax, the rules and the output.
 */
#ifndef OPLOG2PG_DAEMON_CONFIG_MAP_H
#define OPLOG2PG_DAEMON_CONFIG_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/nsfilter.h"
#include "map/map.h"
#include "util/strbuf.h"

typedef struct config_map_reader config_map_reader;

/* A reader for one file; file names it in messages. NULL when memory runs out. */
config_map_reader *config_map_reader_new(const char *file);
void config_map_reader_free(config_map_reader *r);

/* Whether a section name is a map's: "map DB.COLL" or "child SCHEMA.TABLE" (the first word in any case). */
bool config_map_is_section(const char *name);

/* Every section header, in order, with its line. A map section is checked (its name; a second map for one
 * namespace) and becomes the section its keys go to; any other header ends the map section before it. False with
 * err set (no FILE:LINE: the INI reader adds it) when a map section header is refused. */
bool config_map_section(config_map_reader *r, const char *name, int line, char *err, size_t errlen);

/* A key of the current map section (the INI reader's key callback, for a section config_map_is_section accepts).
 * False with err set when the line is refused; false with err empty when its section header was refused already. */
bool config_map_key(config_map_reader *r, const char *name, const char *value, bool continuation, int line, char *err,
                    size_t errlen);

/* Once the whole file is read: defaults, child tables, key columns, then map_set_check. On success the set is moved
 * into *out (which must be empty); otherwise err holds "FILE:LINE: [section] ...: what is wrong". */
bool config_map_finish(config_map_reader *r, map_set *out, char *err, size_t errlen);

/* Every map names a namespace the filter replicates (and not an internal one: admin, local, config, system.*).
 * False with the map's line and msg "[map DB.COLL]: ..." otherwise. */
bool config_map_check_filter(const map_set *m, const nsfilter *f, int *line, char *msg, size_t msglen);

/* Whether two sets map the same (lines apart). */
bool config_map_equal(const map_set *a, const map_set *b);

/* The sections of the set as config_map_section/_key read them back to the same set (for `config`). */
void config_map_print_ini(FILE *out, const map_set *m);

/* The map as a person reads it (the `map` command): per collection its table, key, rest, on_type_error and adopt,
 * each column with its SQL type, source path and on_type_error, child tables indented below. */
void config_map_render_text(strbuf *out, const map_set *m);

/* The map as one JSON document (`map --json`; its fields are described in docs/mapping.md, "Inspecting the map").
 * Malloc'd text, NULL when memory runs out. */
char *config_map_json(const map_set *m);

/* The `map` command: the text (or with json, the JSON document and a newline) written to out. Returns the process
 * exit code: EXIT_OK, or EXIT_SOFTWARE when memory runs out or out cannot be written. */
int config_map_command(FILE *out, const map_set *m, bool json);

#endif

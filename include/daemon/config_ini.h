/*
 * config_ini.h — the INI file format of the configuration, read line by line: sections, "key = value" lines,
 * comments, continuation lines, and errors that name the line. src/daemon/config_ini.c implements it over libinih.
 *
 * The reader knows nothing of the options: it reports each section header and each key to a handler, which decides
 * whether they exist and what their values mean (config.c's handler looks them up in the option table, refuses a key
 * given twice, and stores the value). What the reader adds to libinih:
 *   - the physical line of every key;
 *   - continuation lines told apart from a key given again: a line that starts with whitespace, right below a key of
 *     the same section (comment lines between allowed), is handed over as that key with continuation set;
 *   - every section header, also one with no keys below it (libinih names a section only through its keys), and
 *     also an indented one: a line whose first non-blank character is '[' is a header, never a continuation line;
 *   - a line longer than libinih's buffer (CONFIG_INI_MAX_LINE characters) is an error, never split in two;
 *   - errors written as "NAME:LINE: what is wrong"; the error of the earliest line wins.
 */
#ifndef OPLOG2PG_DAEMON_CONFIG_INI_H
#define OPLOG2PG_DAEMON_CONFIG_INI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "map/map.h"

/* The longest physical line the reader accepts, in characters, the line end not counted ("\r" counts). */
#define CONFIG_INI_MAX_LINE MAP_INI_MAX_LINE

typedef struct config_ini_handler {
    /* A section header "[name]" that starts a line (name as written between the brackets). Return false with err set
     * to refuse it: the error is reported at the header's line. May be NULL. */
    bool (*section)(void *arg, const char *name, char *err, size_t errlen);
    /* A "key = value" line of section, or a continuation line (continuation true, name that of the key it continues,
     * value the line's text). line is the physical line. Return false with err set to refuse it; false with err left
     * empty refuses it without a message of its own (its error was reported before, e.g. at its section header; if
     * none was, the line is reported as a syntax error). A key before any section header is refused by the reader
     * and not handed over. */
    bool (*key)(void *arg, const char *section, const char *name, const char *value, bool continuation, int line,
                char *err, size_t errlen);
    void *arg;
    /* As section, with the header's physical line, for a handler that reports errors about the section once the
     * whole file is read (the map sections). Called instead of section when not NULL. */
    bool (*section_at)(void *arg, const char *name, int line, char *err, size_t errlen);
} config_ini_handler;

/* Reads the INI text of fp (when not NULL) or of text, up to its end, calling h. name stands for the source in
 * messages. True when there was no error; otherwise err holds the error of the earliest line, as
 * "NAME:LINE: what is wrong", or "NAME: what is wrong" when it belongs to no line (a read error). */
bool config_ini_parse(const char *name, FILE *fp, const char *text, const config_ini_handler *h, char *err,
                      size_t errlen);

/* Writes "NAME:LINE: " (or "NAME: " when line is 0) and then the formatted message into buf: the form of every error
 * about a configuration file, also the ones found after reading it. */
void config_ini_error(char *buf, size_t buflen, const char *name, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif

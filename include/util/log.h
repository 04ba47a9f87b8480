/*
 * log.h — oplog2pg's logging: levels, one line per message, to stderr (journald picks it up) or to syslog.
 *
 * Messages at or above the configured level are written whole with one write(2), so lines from the reader thread and
 * the apply loop never interleave. Every error names its context (namespace, _id, oplog position) in the message
 * itself; nothing is logged per op above debug.
 *
 * On stderr a line is "[<N>][TIMESTAMP ]LEVEL: message\n": the "<N>" syslog priority prefix only when stderr is the
 * systemd journal (log_set_journal_prefix; journald strips it and files the line at that priority), the UTC
 * timestamp only when log_set_timestamps(true). With syslog, syslog(3) gets "LEVEL: message" at the level's priority.
 *
 * The level constants are LOGL_* because <syslog.h> owns the LOG_* names. This module knows nothing of the
 * configuration file: src/daemon/logsetup.c maps the [logging] options onto these calls.
 */
#ifndef OPLOG2PG_UTIL_LOG_H
#define OPLOG2PG_UTIL_LOG_H

#include <stdbool.h>

typedef enum {
    LOGL_DEBUG = 0,
    LOGL_INFO,
    LOGL_NOTICE,
    LOGL_WARNING,
    LOGL_ERROR,
} log_level;

/* The most bytes of one line (prefixes, message and newline); longer messages are cut, the newline kept. */
#define LOG_LINE_MAX 4096

/* Set the lowest level written (default LOGL_INFO). Safe to call from a SIGHUP reload. */
void log_set_level(log_level level);
log_level log_get_level(void);
/* Parse "debug", "info", "notice", "warning", "error"; false if unknown. */
bool log_level_parse(const char *name, log_level *out);
const char *log_level_name(log_level level);
/* The syslog(3) priority of a level: LOG_DEBUG .. LOG_ERR (the numbers 7 .. 3). */
int log_level_priority(log_level level);

/* stderr lines: prefix every line with a UTC timestamp (default on). */
void log_set_timestamps(bool on);
/* stderr lines: prefix every line with "<N>", its syslog priority, as journald reads it on a stream (default off). */
void log_set_journal_prefix(bool on);
/* Whether fd 2 is the systemd journal: JOURNAL_STREAM ("DEV:INODE", set by systemd for a unit whose stderr it
 * connects to the journal) names the device and inode that fstat(2) reports for fd 2. */
bool log_stderr_is_journal(void);

/* Send lines to syslog(3): openlog(ident, LOG_PID | LOG_NDELAY, facility), facility one of <syslog.h>'s LOG_DAEMON,
 * LOG_USER, LOG_LOCAL0 ... The ident is copied (at most 64 bytes). Reopens only when ident or facility changed. Meant
 * for start-up: a line being logged by another thread while the ident changes may go out under either ident. */
void log_use_syslog(const char *ident, int facility);
/* Send lines to stderr (the default); closes syslog if it was open. */
void log_use_stderr(void);
bool log_is_syslog(void);

void log_msg(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...)   log_msg(LOGL_DEBUG, __VA_ARGS__)
#define log_info(...)    log_msg(LOGL_INFO, __VA_ARGS__)
#define log_notice(...)  log_msg(LOGL_NOTICE, __VA_ARGS__)
#define log_warning(...) log_msg(LOGL_WARNING, __VA_ARGS__)
#define log_error(...)   log_msg(LOGL_ERROR, __VA_ARGS__)

#endif

/*
 * log.h — oplog2pg's logging: levels, one line per message, to stderr (journald picks it up) by default.
 *
 * Messages at or above the configured level are written whole with one write(2), so lines from the reader thread and
 * the apply loop never interleave. Every error names its context (namespace, _id, oplog position) in the message
 * itself; nothing is logged per op above debug.
 */
#ifndef OPLOG2PG_UTIL_LOG_H
#define OPLOG2PG_UTIL_LOG_H

#include <stdbool.h>

typedef enum {
    LOG_DEBUG = 0,
    LOG_INFO,
    LOG_NOTICE,
    LOG_WARNING,
    LOG_ERROR,
} log_level;

/* Set the lowest level written (default LOG_INFO). Safe to call from a SIGHUP reload. */
void log_set_level(log_level level);
log_level log_get_level(void);
/* Parse "debug", "info", "notice", "warning", "error"; false if unknown. */
bool log_level_parse(const char *name, log_level *out);
const char *log_level_name(log_level level);
/* Prefix every line with an ISO timestamp (off under systemd, where journald stamps lines itself). */
void log_set_timestamps(bool on);

void log_msg(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...)   log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)    log_msg(LOG_INFO, __VA_ARGS__)
#define log_notice(...)  log_msg(LOG_NOTICE, __VA_ARGS__)
#define log_warning(...) log_msg(LOG_WARNING, __VA_ARGS__)
#define log_error(...)   log_msg(LOG_ERROR, __VA_ARGS__)

#endif

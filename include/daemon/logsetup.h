/*
 * logsetup.h — applies the [logging] options of the configuration to the logger (util/log.h), and routes the MongoDB
 * C driver's own log messages into it.
 *
 * util/log knows nothing of the configuration; this is the one place that maps the config enums (level, timestamps
 * auto/on/off, destination, syslog facility) onto log.c calls. The daemon calls logsetup_apply at start and after
 * every successful SIGHUP reload.
 */
#ifndef OPLOG2PG_DAEMON_LOGSETUP_H
#define OPLOG2PG_DAEMON_LOGSETUP_H

#include <mongoc/mongoc.h>

#include "daemon/config.h"

/* Level, destination (stderr or syslog with ident and facility), and for stderr the timestamp and journal-priority
 * prefixes: timestamps = auto means on unless stderr is the systemd journal; under the journal every line starts
 * with "<N>". Safe to call again on reload (syslog is reopened only when ident or facility changed). */
void logsetup_apply(const config *cfg);

/* The <syslog.h> facility (LOG_DAEMON, LOG_USER, LOG_LOCAL0..7) of a [logging] syslog_facility value. */
int logsetup_facility(enum config_syslog_facility facility);

/* A mongoc_log_func_t writing libmongoc's messages through our logger as "mongoc: DOMAIN: message" at the matching
 * level (ERROR/CRITICAL -> error, WARNING -> warning, MESSAGE/INFO -> info, DEBUG/TRACE -> debug). The driver's
 * generic domain "mongoc" is not repeated: "mongoc: message". */
void logsetup_mongoc_handler(mongoc_log_level_t level, const char *domain, const char *message, void *arg);

/* Installs logsetup_mongoc_handler with mongoc_log_set_handler; call right after mongoc_init(). */
void logsetup_route_mongoc(void);

#endif

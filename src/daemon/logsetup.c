/*
 * logsetup.c — see logsetup.h: the [logging] options mapped onto util/log, and libmongoc's log routed into it.
 */
#include "daemon/logsetup.h"

#include <string.h>
#include <syslog.h>

#include "util/log.h"

int logsetup_facility(enum config_syslog_facility facility)
{
    static const int locals[] = {LOG_LOCAL0, LOG_LOCAL1, LOG_LOCAL2, LOG_LOCAL3,
                                 LOG_LOCAL4, LOG_LOCAL5, LOG_LOCAL6, LOG_LOCAL7};

    if (facility == CONFIG_FACILITY_USER)
        return LOG_USER;
    if (facility >= CONFIG_FACILITY_LOCAL0 && facility < CONFIG_FACILITY_LOCAL0 + 8)
        return locals[facility - CONFIG_FACILITY_LOCAL0];
    return LOG_DAEMON;
}

static log_level level_of(enum config_log_level level)
{
    switch (level) {
    case CONFIG_LOG_DEBUG:
        return LOGL_DEBUG;
    case CONFIG_LOG_INFO:
        return LOGL_INFO;
    case CONFIG_LOG_NOTICE:
        return LOGL_NOTICE;
    case CONFIG_LOG_WARNING:
        return LOGL_WARNING;
    case CONFIG_LOG_ERROR:
        return LOGL_ERROR;
    }
    return LOGL_INFO;
}

void logsetup_apply(const config *cfg)
{
    bool journal = log_stderr_is_journal();

    log_set_level(level_of(cfg->log_level));
    log_set_journal_prefix(journal);
    log_set_timestamps(cfg->log_timestamps == CONFIG_TIMESTAMPS_ON ||
                       (cfg->log_timestamps == CONFIG_TIMESTAMPS_AUTO && !journal));
    if (cfg->log_destination == CONFIG_LOG_SYSLOG)
        log_use_syslog(cfg->syslog_ident != NULL && cfg->syslog_ident[0] != '\0' ? cfg->syslog_ident : "oplog2pg",
                       logsetup_facility(cfg->syslog_facility));
    else
        log_use_stderr();
}

void logsetup_mongoc_handler(mongoc_log_level_t level, const char *domain, const char *message, void *arg)
{
    log_level ours;

    (void)arg;
    switch (level) {
    case MONGOC_LOG_LEVEL_ERROR:
    case MONGOC_LOG_LEVEL_CRITICAL:
        ours = LOGL_ERROR;
        break;
    case MONGOC_LOG_LEVEL_WARNING:
        ours = LOGL_WARNING;
        break;
    case MONGOC_LOG_LEVEL_MESSAGE:
    case MONGOC_LOG_LEVEL_INFO:
        ours = LOGL_INFO;
        break;
    default: /* DEBUG, TRACE */
        ours = LOGL_DEBUG;
        break;
    }
    /* The driver's generic domain is "mongoc" itself (URI parsing, for one): "mongoc: mongoc: " would say nothing. */
    if (domain == NULL || domain[0] == '\0' || strcmp(domain, "mongoc") == 0)
        log_msg(ours, "mongoc: %s", message != NULL ? message : "");
    else
        log_msg(ours, "mongoc: %s: %s", domain, message != NULL ? message : "");
}

void logsetup_route_mongoc(void)
{
    mongoc_log_set_handler(logsetup_mongoc_handler, NULL);
}

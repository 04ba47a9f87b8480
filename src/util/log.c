/*
 * log.c — see log.h. Settings live in atomics so the reader thread can log while a SIGHUP reload changes the level
 * or the stderr prefixes. Each line is formatted into one stack buffer and written with one write(2) (or handed to
 * syslog(3) whole), so concurrent lines never interleave.
 */
#include "util/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

static atomic_int current_level = LOGL_INFO;
static atomic_bool with_timestamps = true;
static atomic_bool with_priority = false;
static atomic_bool to_syslog = false;

/* openlog(3) keeps the ident pointer, so the text lives here for as long as syslog is open. */
static char syslog_ident[65];
static int syslog_facility = -1;

static const char *const level_names[] = {"debug", "info", "notice", "warning", "error"};
static const int level_priorities[] = {LOG_DEBUG, LOG_INFO, LOG_NOTICE, LOG_WARNING, LOG_ERR};

void log_set_level(log_level level)
{
    atomic_store(&current_level, (int)level);
}

log_level log_get_level(void)
{
    return (log_level)atomic_load(&current_level);
}

void log_set_timestamps(bool on)
{
    atomic_store(&with_timestamps, on);
}

void log_set_journal_prefix(bool on)
{
    atomic_store(&with_priority, on);
}

bool log_level_parse(const char *name, log_level *out)
{
    for (size_t i = 0; i < sizeof level_names / sizeof level_names[0]; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *out = (log_level)i;
            return true;
        }
    }
    return false;
}

const char *log_level_name(log_level level)
{
    return level >= LOGL_DEBUG && level <= LOGL_ERROR ? level_names[level] : "?";
}

int log_level_priority(log_level level)
{
    return level >= LOGL_DEBUG && level <= LOGL_ERROR ? level_priorities[level] : LOG_ERR;
}

bool log_stderr_is_journal(void)
{
    const char *env = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    int used = 0;
    struct stat st;

    if (env == NULL || sscanf(env, "%llu:%llu%n", &dev, &ino, &used) != 2 || env[used] != '\0')
        return false;
    if (fstat(STDERR_FILENO, &st) != 0)
        return false;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_use_syslog(const char *ident, int facility)
{
    if (atomic_load(&to_syslog) && facility == syslog_facility && strncmp(ident, syslog_ident, 64) == 0)
        return;
    if (atomic_load(&to_syslog)) {
        atomic_store(&to_syslog, false);
        closelog();
    }
    snprintf(syslog_ident, sizeof syslog_ident, "%s", ident);
    syslog_facility = facility;
    openlog(syslog_ident, LOG_PID | LOG_NDELAY, facility);
    atomic_store(&to_syslog, true);
}

void log_use_stderr(void)
{
    if (atomic_exchange(&to_syslog, false)) {
        closelog();
        syslog_facility = -1;
    }
}

bool log_is_syslog(void)
{
    return atomic_load(&to_syslog);
}

void log_msg(log_level level, const char *fmt, ...)
{
    if ((int)level < atomic_load(&current_level))
        return;

    bool syslog_dest = atomic_load(&to_syslog);
    char line[LOG_LINE_MAX];
    size_t len = 0;
    if (!syslog_dest && atomic_load(&with_priority))
        len += (size_t)snprintf(line + len, sizeof line - len, "<%d>", log_level_priority(level));
    if (!syslog_dest && atomic_load(&with_timestamps)) {
        struct timespec now;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &now);
        gmtime_r(&now.tv_sec, &tm);
        len += strftime(line + len, sizeof line - len, "%Y-%m-%d %H:%M:%S", &tm);
        len += (size_t)snprintf(line + len, sizeof line - len, ".%03ldZ ", now.tv_nsec / 1000000);
    }
    len += (size_t)snprintf(line + len, sizeof line - len, "%s: ", log_level_name(level));

    /* The message may fill the buffer but for the newline and the terminating NUL. */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line + len, sizeof line - len - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    len += (size_t)n;
    if (len > sizeof line - 2)
        len = sizeof line - 2; /* truncated: keep the newline */

    if (syslog_dest) {
        line[len] = '\0';
        syslog(log_level_priority(level), "%s", line);
        return;
    }
    line[len++] = '\n';
    /* One write per line: concurrent lines from two threads stay whole. Nothing useful to do if stderr is gone. */
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

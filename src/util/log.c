/*
 * log.c — see log.h. The level lives in an atomic so the reader thread can read it while a reload changes it.
 */
#include "util/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int current_level = LOG_INFO;
static atomic_bool with_timestamps = true;

static const char *const level_names[] = {"debug", "info", "notice", "warning", "error"};

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
    return level >= LOG_DEBUG && level <= LOG_ERROR ? level_names[level] : "?";
}

void log_msg(log_level level, const char *fmt, ...)
{
    if ((int)level < atomic_load(&current_level))
        return;

    char line[4096];
    size_t len = 0;
    if (atomic_load(&with_timestamps)) {
        struct timespec now;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &now);
        gmtime_r(&now.tv_sec, &tm);
        len = strftime(line, sizeof line, "%Y-%m-%d %H:%M:%S", &tm);
        len += (size_t)snprintf(line + len, sizeof line - len, ".%03ldZ ", now.tv_nsec / 1000000);
    }
    len += (size_t)snprintf(line + len, sizeof line - len, "%s: ", log_level_name(level));

    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line + len, sizeof line - len, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    len += (size_t)n;
    if (len > sizeof line - 2)
        len = sizeof line - 2; /* truncated: keep the newline */
    line[len++] = '\n';

    /* One write per line: concurrent lines from two threads stay whole. Nothing useful to do if stderr is gone. */
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

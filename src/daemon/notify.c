/*
 * notify.c — see notify.h. A thin layer over sd_notify that remembers the last STATUS (so the same line is not sent
 * every second) and paces WATCHDOG=1.
 */
#include "daemon/notify.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <time.h>

#include "util/clock.h"
#include "util/log.h"

static bool enabled;
static uint64_t watchdog_usec;
static uint64_t last_watchdog_us;
static char last_status[256];

static uint64_t mono_us(void)
{
    return clock_ms() * 1000u;
}

static void emit(const char *msg)
{
    if (!enabled)
        return;
    int rc = sd_notify(0, msg);
    if (rc < 0)
        log_debug("sd_notify(%s): %s", msg, strerror(-rc));
}

void notify_init(void)
{
    const char *sock = getenv("NOTIFY_SOCKET");
    enabled = sock != NULL && sock[0] != '\0';
    uint64_t usec = 0;
    watchdog_usec = enabled && sd_watchdog_enabled(0, &usec) > 0 ? usec : 0;
    last_watchdog_us = mono_us();
    last_status[0] = '\0';
    if (watchdog_usec > 0)
        log_info("systemd watchdog: pinging every %.2f s (a quarter of WatchdogSec)", (double)watchdog_usec / 4e6);
}

uint64_t notify_watchdog_usec(void)
{
    return watchdog_usec;
}

void notify_ready(void)
{
    emit("READY=1");
}

void notify_status(const char *fmt, ...)
{
    if (!enabled)
        return;
    char line[sizeof last_status];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    for (char *p = line; *p; p++)
        if (*p == '\n')
            *p = ' '; /* one STATUS= line: a newline would start another assignment */
    if (strcmp(line, last_status) == 0)
        return;
    snprintf(last_status, sizeof last_status, "%s", line);
    char msg[sizeof line + 8];
    snprintf(msg, sizeof msg, "STATUS=%s", line);
    emit(msg);
}

void notify_watchdog(void)
{
    if (watchdog_usec == 0)
        return;
    uint64_t now = mono_us();
    if (now - last_watchdog_us < watchdog_usec / 4)
        return;
    last_watchdog_us = now;
    emit("WATCHDOG=1");
}

void notify_reloading(void)
{
    emit("RELOADING=1");
}

void notify_stopping(void)
{
    emit("STOPPING=1");
}

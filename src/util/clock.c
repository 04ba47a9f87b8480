/*
 * clock.c — see clock.h.
 */
#include "util/clock.h"

#include <errno.h>
#include <time.h>

uint64_t clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

double clock_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void clock_sleep_ms(uint64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void backoff_init(backoff *b, uint64_t floor_ms, uint64_t ceiling_ms)
{
    b->floor_ms = floor_ms;
    b->ceiling_ms = ceiling_ms < floor_ms ? floor_ms : ceiling_ms;
    b->next_ms = floor_ms;
}

uint64_t backoff_next(backoff *b)
{
    uint64_t now = b->next_ms;
    b->next_ms = now * 2 > b->ceiling_ms ? b->ceiling_ms : now * 2;
    return now;
}

void backoff_reset(backoff *b)
{
    b->next_ms = b->floor_ms;
}

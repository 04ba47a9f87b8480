/*
 * clock.h — the one monotonic clock and the one backoff rule of the daemon.
 *
 * Every wait that retries (a reconnect, a copy batch, the oplog reader) doubles its delay from a floor to a ceiling,
 * and every timeout is measured on CLOCK_MONOTONIC, which wall-clock steps cannot move.
 */
#ifndef OPLOG2PG_UTIL_CLOCK_H
#define OPLOG2PG_UTIL_CLOCK_H

#include <stdint.h>

/* Milliseconds and seconds on CLOCK_MONOTONIC. */
uint64_t clock_ms(void);
double clock_s(void);

/* Sleeps ms milliseconds (resuming after signals). */
void clock_sleep_ms(uint64_t ms);

typedef struct {
    uint64_t floor_ms, ceiling_ms, next_ms;
} backoff;

/* A backoff starting at floor_ms and doubling up to ceiling_ms. */
void backoff_init(backoff *b, uint64_t floor_ms, uint64_t ceiling_ms);
/* The delay to wait now; the next one doubles (up to the ceiling). */
uint64_t backoff_next(backoff *b);
/* Back to the floor (after a success). */
void backoff_reset(backoff *b);

#endif

/*
 * stats.c — see stats.h.
 */
#include "stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../tests/lib/benchtrial.h"

int stats_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double stats_median(const double *v, int n)
{
    double tmp[STATS_MAX_RUNS];
    if (n < 1 || n > STATS_MAX_RUNS)
        bench_die("a median of %d runs (1 to %d)", n, STATS_MAX_RUNS);
    memcpy(tmp, v, (size_t)n * sizeof *v);
    qsort(tmp, (size_t)n, sizeof tmp[0], stats_cmp_double);
    return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}

void stats_range(const double *v, int n, double *lo, double *hi)
{
    *lo = *hi = v[0];
    for (int i = 1; i < n; i++) {
        *lo = v[i] < *lo ? v[i] : *lo;
        *hi = v[i] > *hi ? v[i] : *hi;
    }
}

void stats_print_runs(const double *v, int n)
{
    for (int i = 0; i < n; i++)
        printf("%s%.0f", i ? ", " : " ", v[i]);
}

int stats_reps(const char *name, int fallback)
{
    const char *env = getenv(name);
    int reps = env ? atoi(env) : fallback;
    if (reps < 1 || reps > STATS_MAX_RUNS)
        bench_die("%s must be 1 to %d", name, STATS_MAX_RUNS);
    return reps;
}

/*
 * stats.h — the few statistics the benchmarks print: medians and ranges of a handful of runs (at most 9), the runs
 * themselves in order, and the number of runs an environment variable asks for.
 */
#ifndef OPLOG2PG_BENCH_STATS_H
#define OPLOG2PG_BENCH_STATS_H

/* At most this many runs of one figure (the arrays the benchmarks keep are this long). */
#define STATS_MAX_RUNS 9

/* qsort's comparison of two doubles, ascending. */
int stats_cmp_double(const void *a, const void *b);
/* The median of v[0..n-1] (n at most STATS_MAX_RUNS; v is left as it is); of an even n, the mean of the middle two. */
double stats_median(const double *v, int n);
/* The smallest and the largest of v[0..n-1] (n at least 1). */
void stats_range(const double *v, int n, double *lo, double *hi);
/* The runs in order, each " %.0f" after a comma but the first: " 812, 790, 805". */
void stats_print_runs(const double *v, int n);
/* The number of runs $name asks for, `fallback` when it is not set; dies unless it is 1 to STATS_MAX_RUNS. */
int stats_reps(const char *name, int fallback);

#endif

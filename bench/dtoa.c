/*
 * dtoa.c — what writing a double as its shortest text costs (util/dtoa.h), against the printf route it replaced.
 *
 * Usage: dtoa [N]   (N doubles of each kind, default 1000000)
 * The printf route is the one a C program reaches for: printf at %.15g, %.16g and %.17g in turn, each read back with
 * strtod, until one gives the same double. dtoa_g writes the same text from libdouble-conversion's digits. Both run
 * over the same doubles, in three kinds: random doubles of 53 bits in [0, 1000) (most need 16 or 17 digits: computed
 * values, measurements), decimals of three places (prices, scores: 15 digits or fewer), and any 64 bits at all
 * (every exponent). Prints nanoseconds per double for each, and checks that both wrote the same texts' lengths in
 * all (the texts themselves are compared by the unit tests, tests/unit/test_dtoa.c).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../tests/lib/docgen.h"
#include "util/dtoa.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t printf_route(double d, char *buf, size_t len)
{
    int n = 0;
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(buf, len, "%.*g", prec, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    return (size_t)n;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    if (n < 1) {
        fprintf(stderr, "usage: dtoa [N]\n");
        return 2;
    }
    double *v = malloc((size_t)n * sizeof *v);
    if (v == NULL)
        return 1;
    static const char *const kinds[] = {"random 53-bit doubles in [0, 1000)", "decimals of three places",
                                        "any 64 bits (finite)"};
    printf("| doubles (%ld of each kind) | printf route, ns each | dtoa_g, ns each | ratio |\n|---|---:|---:|---:|\n",
           n);
    uint64_t seed = 1;
    for (int kind = 0; kind < 3; kind++) {
        for (long i = 0; i < n; i++) {
            uint64_t r = docgen_rng_next(&seed);
            if (kind == 0)
                v[i] = (double)(r >> 11) / 9007199254740992.0 * 1000.0;
            else if (kind == 1)
                v[i] = (double)(r % 10000000) / 1000.0;
            else {
                memcpy(&v[i], &r, sizeof v[i]);
                if (v[i] != v[i] || v[i] - v[i] != 0) /* NaN or infinite */
                    v[i] = 1.5;
            }
        }
        char buf[64];
        size_t len_a = 0, len_b = 0;
        double t0 = now_s();
        for (long i = 0; i < n; i++)
            len_a += printf_route(v[i], buf, sizeof buf);
        double t1 = now_s();
        for (long i = 0; i < n; i++)
            len_b += dtoa_g(v[i], 15, buf);
        double t2 = now_s();
        printf("| %s | %.0f | %.0f | %.1fx |\n", kinds[kind], (t1 - t0) * 1e9 / (double)n, (t2 - t1) * 1e9 / (double)n,
               (t1 - t0) / (t2 - t1));
        /* Below the normal range printf's %.15g keeps digits the double does not have: only there may dtoa_g be
         * shorter. */
        if (len_b > len_a || (kind < 2 && len_b != len_a)) {
            fprintf(stderr, "dtoa: the texts differ in length: %zu against %zu\n", len_b, len_a);
            return 1;
        }
    }
    free(v);
    return 0;
}

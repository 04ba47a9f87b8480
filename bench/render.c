/*
 * render.c — what the reader thread's rendering costs, on one thread with nothing else in the way.
 *
 * Usage: render [N]   (default 20000)
 * 1. Doubles: dtoa_g (util/dtoa.h) against the printf route it replaced, the one a C program reaches for: printf at
 *    %.15g, %.16g and %.17g in turn, each read back with strtod, until one gives the same double. Both run over the
 *    same 50 N doubles of each of three kinds: random doubles of 53 bits in [0, 1000) (most need 16 or 17 digits:
 *    computed values, measurements), decimals of three places (prices, scores: 15 digits or fewer), and any 64 bits
 *    at all (every exponent). Nanoseconds per double; the texts' lengths must agree (the texts themselves are
 *    compared by the unit suite dtoa, tests/unit/test_dtoa.c).
 * 2. Documents: ejson_write_document_jsonb (map/ejson.h) on N small (~320 B) and N large (~10 kB) documents of the
 *    throughput benchmark (tests/lib/docgen.h), each rendered 20 times: bytes per document, and nanoseconds per
 *    document, the best of five passes. This part has no baseline of its own: it compares builds (run it from each),
 *    as docs/benchmarks.md does for the changes to the writer.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../tests/lib/docgen.h"
#include "map/ejson.h"
#include "util/dtoa.h"
#include "util/strbuf.h"

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

static int doubles(long n)
{
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
            fprintf(stderr, "render: the doubles' texts differ in length: %zu against %zu\n", len_b, len_a);
            free(v);
            return 1;
        }
    }
    free(v);
    return 0;
}

static int documents(long n)
{
    bson_t *docs = malloc((size_t)n * sizeof *docs);
    if (docs == NULL)
        return 1;
    printf("| documents (%ld, each rendered 20 times) | BSON bytes | JSON bytes | ns per document, best of 5 |\n"
           "|---|---:|---:|---:|\n",
           n);
    for (int size = DOC_SMALL; size <= DOC_LARGE; size++) {
        size_t bson_bytes = 0, json_bytes = 0;
        for (long i = 0; i < n; i++) {
            docgen_sized_doc(&docs[i], (doc_size)size, (uint64_t)i + 1);
            bson_bytes += docs[i].len;
        }
        strbuf out = STRBUF_INIT;
        double best = 0;
        bool ok = true;
        for (int pass = 0; ok && pass < 5; pass++) {
            double t0 = now_s();
            json_bytes = 0;
            for (int rep = 0; ok && rep < 20; rep++)
                for (long i = 0; ok && i < n; i++) {
                    ejson_error err;
                    strbuf_reset(&out, 1024 * 1024);
                    ok = ejson_write_document_jsonb(&out, bson_get_data(&docs[i]), docs[i].len, &err) == EJSON_OK;
                    json_bytes += out.len;
                }
            double ns = (now_s() - t0) * 1e9 / (20.0 * (double)n);
            best = pass == 0 || ns < best ? ns : best;
        }
        strbuf_free(&out);
        for (long i = 0; i < n; i++)
            bson_destroy(&docs[i]);
        if (!ok) {
            fprintf(stderr, "render: a document could not be rendered\n");
            free(docs);
            return 1;
        }
        printf("| %s | %.0f | %.0f | %.0f |\n", size == DOC_SMALL ? "small" : "large", (double)bson_bytes / (double)n,
               (double)json_bytes / (20.0 * (double)n), best);
    }
    free(docs);
    return 0;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 20000;
    if (n < 1 || n > 10000000) {
        fprintf(stderr, "usage: render [N]   (1 to 10000000)\n");
        return 2;
    }
    if (doubles(50 * n) != 0)
        return 1;
    printf("\n");
    return documents(n);
}

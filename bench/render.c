/*
 * render.c — what the reader thread's rendering costs per document: ejson_write_document_jsonb (map/ejson.h) on
 * the documents the throughput benchmark loads (tests/lib/docgen.h), on one thread, with nothing else in the way.
 *
 * Usage: render [N]   (N documents of each size, default 20000; each rendered 20 times)
 * Prints, for small (~320 B) and large (~10 kB) documents, the BSON and JSON bytes per document and the nanoseconds
 * per document, the best of five passes. It has no baseline of its own: it compares builds (run it from each), as
 * docs/benchmarks.md does for the changes to the writer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../tests/lib/docgen.h"
#include "map/ejson.h"
#include "util/strbuf.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 20000;
    if (n < 1) {
        fprintf(stderr, "usage: render [N]\n");
        return 2;
    }
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
        for (int pass = 0; pass < 5; pass++) {
            double t0 = now_s();
            json_bytes = 0;
            for (int rep = 0; rep < 20; rep++)
                for (long i = 0; i < n; i++) {
                    ejson_error err;
                    strbuf_reset(&out, 1024 * 1024);
                    if (ejson_write_document_jsonb(&out, bson_get_data(&docs[i]), docs[i].len, &err) != EJSON_OK) {
                        fprintf(stderr, "render: document %ld could not be rendered\n", i + 1);
                        return 1;
                    }
                    json_bytes += out.len;
                }
            double ns = (now_s() - t0) * 1e9 / (20.0 * (double)n);
            best = pass == 0 || ns < best ? ns : best;
        }
        printf("| %s | %.0f | %.0f | %.0f |\n", size == DOC_SMALL ? "small" : "large", (double)bson_bytes / (double)n,
               (double)json_bytes / (20.0 * (double)n), best);
        strbuf_free(&out);
        for (long i = 0; i < n; i++)
            bson_destroy(&docs[i]);
    }
    free(docs);
    return 0;
}

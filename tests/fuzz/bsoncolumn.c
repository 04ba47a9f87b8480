/*
 * bsoncolumn.c — fuzz target: a BSONColumn (the payload of a BinData subtype 7, as compressed time-series buckets
 * hold it) through the decoder (map/bsoncolumn.h). Every value it returns is rendered as PostgreSQL will receive it
 * (ejson_write_value), so a borrowed value that points outside the column's bytes or the decoder's buffers is read
 * whole. bcol_count must count what the decoder returned, and agree on whether the column is malformed.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "map/bsoncolumn.h"
#include "map/ejson.h"
#include "util/strbuf.h"

/* Enough positions for any column a fuzzer writes in its size limit, bounded so a run of repeats cannot stall. */
#define MAX_POSITIONS 200000

int fuzz_bsoncolumn(const uint8_t *data, size_t size)
{
    bcol_decoder *d = bcol_decoder_new(data, size);
    FUZZ_CHECK(d != NULL);
    strbuf out;
    strbuf_init(&out);
    char err[BCOL_ERR_MAX];
    bcol_status st;
    size_t n = 0;
    bcol_elem e;
    while (n < MAX_POSITIONS && (st = bcol_decoder_next(d, &e, err, sizeof err)) == BCOL_VALUE) {
        n++;
        if (!e.missing) {
            strbuf_reset(&out, 4096);
            (void)ejson_write_value(&out, &e.value, NULL);
        }
    }
    if (n < MAX_POSITIONS) {
        FUZZ_CHECK(bcol_decoder_position(d) == n);
        /* The status is sticky. */
        FUZZ_CHECK(bcol_decoder_next(d, &e, err, sizeof err) == st);
        size_t count = 0;
        bool counted = bcol_count(data, size, &count, err, sizeof err);
        FUZZ_CHECK(counted == (st == BCOL_END));
        FUZZ_CHECK(count == n);
    }
    strbuf_free(&out);
    bcol_decoder_destroy(d);
    return 0;
}

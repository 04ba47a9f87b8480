/*
 * bucket.c — fuzz target: a time-series bucket document, then optionally a `$v:2` diff (the next BSON document of
 * the input), through map/bucket.h: the bucket unpacked into measurements (bucket_unpack, its timeField taken as
 * the first field of the bucket's `data`, and its metaField as "meta"), the diff applied to the bucket in both
 * modes (bucket_apply_diff_ex), which must give a valid BSON document when both inputs were valid, and that document
 * unpacked again, as the time-series sink does with an updated bucket. Every measurement is rendered as PostgreSQL
 * would receive it.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "map/bucket.h"
#include "map/ejson.h"
#include "util/strbuf.h"

/* valid: the input is valid BSON throughout, so everything made from it must be too. */
static void unpack(const uint8_t *doc, size_t len, const char *time_field, bool valid)
{
    bucket_spec spec = {.time_field = time_field, .meta_field = "meta"};
    bucket_rows rows;
    char err[512];
    memset(&rows, 0, sizeof rows);
    if (bucket_unpack(doc, len, &spec, &rows, err, sizeof err)) {
        strbuf out;
        strbuf_init(&out);
        for (size_t i = 0; i < rows.n; i++) {
            strbuf_reset(&out, 4096);
            ejson_status st = ejson_write_document(&out, rows.docs[i], rows.lens[i], NULL);
            FUZZ_CHECK(!valid || st != EJSON_BAD_BSON);
        }
        strbuf_free(&out);
    } else {
        FUZZ_CHECK(rows.n == 0);
    }
    bucket_rows_clear(&rows);
}

int fuzz_bucket(const uint8_t *data, size_t size)
{
    uint8_t *bbuf = NULL, *dbuf = NULL;
    bson_t bucket, diff;
    if (!fuzz_next_doc(&data, &size, &bbuf, &bucket))
        goto out;
    char time_field[128] = "t";
    bson_iter_t it, sub;
    if (bson_iter_init_find(&it, &bucket, "data") && BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &sub) &&
        bson_iter_next(&sub))
        snprintf(time_field, sizeof time_field, "%s", bson_iter_key(&sub));
    bool valid = fuzz_doc_sound(&bucket);
    unpack(bson_get_data(&bucket), bucket.len, time_field, valid);
    if (!fuzz_next_doc(&data, &size, &dbuf, &diff))
        goto out;
    for (int mode = 0; mode < 2; mode++) {
        bson_t after;
        char err[512];
        if (bucket_apply_diff_ex(bson_get_data(&bucket), bucket.len, bson_get_data(&diff), diff.len,
                                 mode == 0 ? BUCKET_DIFF_STRICT : BUCKET_DIFF_IDEMPOTENT, &after, err, sizeof err)) {
            bool both = valid && fuzz_doc_sound(&diff);
            FUZZ_CHECK(!both || fuzz_doc_sound(&after));
            unpack(bson_get_data(&after), after.len, time_field, both);
        }
        bson_destroy(&after);
    }
out:
    free(bbuf);
    free(dbuf);
    return 0;
}

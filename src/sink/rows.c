/*
 * rows.c — the row writer (sink/rows.h): a batch's rows by COPY into their tables, or as upserts of whole documents.
 * The sink (streaming and batches, sink/pg.c and sink/mapped.c) and the initial copy (copy/writer.c) both write
 * rows through here; only how an upsert's statement travels (pipelined, or one at a time) is theirs.
 */
#include "sink/rows.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool sink_rows_copy(pgconn *c, const sink_rows_dest *d, const sink_batch *b, size_t *failed, pgconn_error *err)
{
    *failed = 0;
    if (d->mtabs == NULL)
        return pgconn_copy_start(c, d->copy_sql, err) && sink_batch_copy(c, b, err);
    /* which tables have rows: one COPY for each, in table order */
    bool *used = calloc(d->nmtabs ? d->nmtabs : 1, sizeof *used);
    if (used == NULL) {
        pgconn_error_clear(err);
        err->status = APPLY_NOMEM;
        snprintf(err->message, sizeof err->message, "out of memory");
        return false;
    }
    map_row_iter it;
    map_rows_iter(sink_batch_mapped(b), &it);
    uint16_t k;
    const uint8_t *tuple;
    uint32_t len;
    while (map_rows_next(&it, &k, &tuple, &len)) {
        if (k >= d->nmtabs) {
            free(used);
            pgconn_error_clear(err);
            err->status = APPLY_UNRECORDABLE;
            snprintf(err->message, sizeof err->message,
                     "a row names table %u of a map of %zu tables: it was projected with another map (a bug); it is "
                     "not applied",
                     (unsigned)k, d->nmtabs);
            *failed = k;
            return false;
        }
        used[k] = true;
    }
    bool ok = true;
    for (size_t t = 0; ok && t < d->nmtabs; t++) {
        if (!used[t])
            continue;
        *failed = t;
        ok = pgconn_copy_start(c, d->mtabs[t].copy_sql, err) && sink_batch_copy_mapped(c, b, (uint16_t)t, err);
    }
    free(used);
    return ok;
}

sink_rows_result sink_rows_upsert(const sink_rows_dest *d, const map_rows *rows, sink_rows_send_fn send, void *arg,
                                  char *why, size_t whylen)
{
    /* one set of parameter arrays for the call, as long as the widest table's rows */
    size_t width = 2;
    for (size_t t = 0; t < d->nmtabs; t++)
        if (d->mtabs[t].nfields > width)
            width = d->mtabs[t].nfields;
    const char **values = malloc(width * sizeof *values);
    int *lengths = malloc(width * sizeof *lengths), *formats = malloc(width * sizeof *formats);
    sink_rows_result res = SINK_ROWS_OK;
    if (values == NULL || lengths == NULL || formats == NULL) {
        res = SINK_ROWS_NOMEM;
        goto done;
    }
    for (size_t i = 0; i < width; i++)
        formats[i] = 1;
    static const char zero[4] = {0, 0, 0, 0}; /* position 0: a child table's rows from the first on */
    map_row_iter it;
    map_rows_iter(rows, &it);
    uint16_t k;
    const uint8_t *tuple;
    uint32_t len;
    while (res == SINK_ROWS_OK && map_rows_next(&it, &k, &tuple, &len)) {
        if (k >= d->nmtabs) {
            snprintf(why, whylen, "a row for table %u of a map with %zu tables", (unsigned)k, d->nmtabs);
            res = SINK_ROWS_MALFORMED;
            break;
        }
        size_t keyf = k == 0 ? d->mtabs[0].mt->key : SIZE_MAX;
        map_field key = {0};
        map_tuple_iter ti;
        map_field f;
        int n = 0;
        map_tuple_iter_init(&ti, tuple);
        while ((size_t)n < width && map_tuple_next(&ti, &f)) {
            if ((size_t)n == keyf)
                key = f;
            values[n] = (const char *)f.value;
            lengths[n] = f.len;
            n++;
        }
        if (ti.left > 0) {
            snprintf(why, whylen, "a row of %u fields for table %s of %zu", (unsigned)map_tuple_fields(tuple),
                     d->mtabs[k].qname, d->mtabs[k].nfields);
            res = SINK_ROWS_MALFORMED;
            break;
        }
        if (!send(arg, SINK_ROWS_UPSERT, k, n, values, lengths, formats)) {
            res = SINK_ROWS_SEND_FAILED;
            break;
        }
        if (k != 0 || d->nmtabs < 2)
            continue;
        if (key.frame == NULL) {
            snprintf(why, whylen, "a row of %s without its key field", d->mtabs[0].qname);
            res = SINK_ROWS_MALFORMED;
            break;
        }
        /* a parent row: its child rows are replaced by the ones that follow it */
        for (size_t c = 1; c < d->nmtabs && res == SINK_ROWS_OK; c++) {
            const char *cv[2] = {(const char *)key.value, zero};
            const int cl[2] = {key.len, 4};
            if (!send(arg, SINK_ROWS_CHILDREN, c, 2, cv, cl, formats))
                res = SINK_ROWS_SEND_FAILED;
        }
    }
done:
    free(values);
    free(lengths);
    free(formats);
    return res;
}

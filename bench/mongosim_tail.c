/*
 * mongosim_tail.c — how fast a libmongoc tailable awaitData cursor reads mongosim's oplog.
 *
 * Usage: mongosim_tail [URI] [N]   (URI defaults to $MONGO_URI, N to 1000000)
 * Starts nothing: point it at a running mongosim. Appends N small insert entries with the appendOplog test command
 * (in chunks), then tails them from just before the first with a tailable+awaitData cursor, as oplog2pg does, and
 * prints "mongosim_tail: N entries in S s = R entries/s" for the tailing part.
 */
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static bool last_ts(mongoc_client_t *c, uint32_t *secs, uint32_t *inc, bson_error_t *err)
{
    bson_t *cmd = BCON_NEW("hello", BCON_INT32(1));
    bson_t reply;
    bson_iter_t it;
    bool ok = mongoc_client_command_simple(c, "admin", cmd, NULL, &reply, err);
    bson_destroy(cmd);
    if (ok && bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "lastWrite.opTime.ts", &it) &&
        BSON_ITER_HOLDS_TIMESTAMP(&it))
        bson_iter_timestamp(&it, secs, inc);
    else if (ok) {
        bson_set_error(err, 0, 1, "hello has no lastWrite.opTime.ts");
        ok = false;
    }
    bson_destroy(&reply);
    return ok;
}

int main(int argc, char **argv)
{
    const char *uri = argc > 1 ? argv[1] : getenv("MONGO_URI");
    long n = argc > 2 ? strtol(argv[2], NULL, 10) : 1000000;
    if (!uri || n <= 0) {
        fprintf(stderr, "usage: mongosim_tail [URI] [N]   (or set MONGO_URI)\n");
        return 2;
    }
    mongoc_init();
    int rc = 1;
    bson_error_t err;
    mongoc_cursor_t *cur = NULL;
    mongoc_collection_t *oplog = NULL;
    mongoc_client_t *c = mongoc_client_new(uri);
    if (!c) {
        fprintf(stderr, "mongosim_tail: bad URI %s\n", uri);
        goto fail;
    }
    uint32_t secs = 0, inc = 0;
    if (!last_ts(c, &secs, &inc, &err)) {
        fprintf(stderr, "mongosim_tail: %s\n", err.message);
        goto fail;
    }
    double t0 = now_s();
    const long chunk = 20000;
    for (long done = 0; done < n; done += chunk) {
        bson_t cmd = BSON_INITIALIZER, arr, e, o, reply;
        BSON_APPEND_ARRAY_BEGIN(&cmd, "appendOplog", &arr);
        for (long i = done; i < n && i < done + chunk; i++) {
            char key[16];
            const char *k;
            bson_uint32_to_string((uint32_t)(i - done), &k, key, sizeof key);
            bson_append_document_begin(&arr, k, -1, &e);
            BSON_APPEND_UTF8(&e, "op", "i");
            BSON_APPEND_UTF8(&e, "ns", "bench.tail");
            BSON_APPEND_DOCUMENT_BEGIN(&e, "o", &o);
            BSON_APPEND_INT64(&o, "_id", i);
            BSON_APPEND_UTF8(&o, "payload", "0123456789abcdef");
            bson_append_document_end(&e, &o);
            bson_append_document_end(&arr, &e);
        }
        bson_append_array_end(&cmd, &arr);
        bool ok = mongoc_client_command_simple(c, "admin", &cmd, NULL, &reply, &err);
        bson_destroy(&cmd);
        bson_destroy(&reply);
        if (!ok) {
            fprintf(stderr, "mongosim_tail: appendOplog: %s\n", err.message);
            goto fail;
        }
    }
    double t1 = now_s();
    fprintf(stderr, "mongosim_tail: appended %ld entries in %.2f s\n", n, t1 - t0);

    oplog = mongoc_client_get_collection(c, "local", "oplog.rs");
    bson_t *filter = BCON_NEW("ts", "{", "$gt", BCON_TIMESTAMP(secs, inc), "}");
    bson_t *opts =
        BCON_NEW("tailable", BCON_BOOL(true), "awaitData", BCON_BOOL(true), "maxAwaitTimeMS", BCON_INT64(1000));
    t0 = now_s();
    cur = mongoc_collection_find_with_opts(oplog, filter, opts, NULL);
    bson_destroy(filter);
    bson_destroy(opts);
    long seen = 0;
    const bson_t *doc;
    int empty = 0;
    while (seen < n && mongoc_cursor_more(cur)) {
        if (mongoc_cursor_next(cur, &doc)) {
            seen++;
            empty = 0;
        } else if (mongoc_cursor_error(cur, &err)) {
            fprintf(stderr, "mongosim_tail: tailing failed after %ld entries: %s\n", seen, err.message);
            goto fail;
        } else if (++empty > 5) {
            fprintf(stderr, "mongosim_tail: only %ld of %ld entries arrived\n", seen, n);
            goto fail;
        }
    }
    double took = now_s() - t0;
    printf("mongosim_tail: %ld entries in %.2f s = %.0f entries/s\n", seen, took, (double)seen / took);
    rc = seen == n ? 0 : 1;
fail:
    if (cur)
        mongoc_cursor_destroy(cur);
    if (oplog)
        mongoc_collection_destroy(oplog);
    if (c)
        mongoc_client_destroy(c);
    mongoc_cleanup();
    return rc;
}

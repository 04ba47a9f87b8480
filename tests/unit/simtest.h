/*
 * simtest.h — what the mongosim unit suites share: an in-process server on its own thread (for the suites that talk
 * to it over raw sockets), BSON from JSON and exact comparison, and a collector of the oplog entries a store emits.
 */
#ifndef OPLOG2PG_TESTS_UNIT_SIMTEST_H
#define OPLOG2PG_TESTS_UNIT_SIMTEST_H

#include <bson/bson.h>
#include <stdbool.h>

/* Starts mongosim (default options, a free port) on a thread of its own; simtest_stop ends and frees it. For a
 * checked fixture: each test gets a fresh server. */
void simtest_start(void);
void simtest_stop(void);
/* A connected TCP socket to the running server. */
int simtest_connect(void);

/* BSON from relaxed/canonical Extended JSON (aborts the test on bad JSON); free with bson_destroy. */
bson_t *simtest_json(const char *json);
/* got and want byte for byte, or the test fails showing both as canonical Extended JSON. */
void simtest_assert_bson_eq(const bson_t *got, const bson_t *want, const char *what);

/* Collects copies of the entries a store emits (store_emit_fn). */
typedef struct {
    bson_t *bodies[64];
    int n;
} simtest_sink;
void simtest_sink_emit(void *ctx, const bson_t *body);
void simtest_sink_clear(simtest_sink *s);

/* A string field of b (NULL when absent or of another type); a sub-document field as a static view. */
const char *simtest_str(const bson_t *b, const char *key);
bool simtest_sub(const bson_t *b, const char *key, bson_t *out);

#endif

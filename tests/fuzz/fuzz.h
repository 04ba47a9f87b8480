/*
 * fuzz.h — the fuzz targets' entry points (docs/reliability.md says what each covers).
 *
 * Each fuzz_NAME takes one input and feeds it to the parser it covers; it returns 0, and it aborts (through a
 * sanitizer, or FUZZ_CHECK) when the code under test misbehaves. The same functions are built twice: into a libFuzzer
 * program each (tests/fuzz/main.c, `make fuzz`), and into the unit tests, which run every saved input of
 * tests/fuzz/regressions/NAME/ through fuzz_NAME (tests/unit/test_fuzz_regressions.c).
 */
#ifndef OPLOG2PG_TESTS_FUZZ_H
#define OPLOG2PG_TESTS_FUZZ_H

#include <bson/bson.h>
#include <stddef.h>
#include <stdint.h>

/* X(name): every target, in the order `make fuzz` runs them. */
#define FUZZ_TARGETS(X)                                                                                                \
    X(decode)                                                                                                          \
    X(stream)                                                                                                          \
    X(token)                                                                                                           \
    X(bsoncolumn)                                                                                                      \
    X(bucket)                                                                                                          \
    X(v2diff)                                                                                                          \
    X(ejson)                                                                                                           \
    X(dump)                                                                                                            \
    X(config)                                                                                                          \
    X(metrics)                                                                                                         \
    X(wire)

#define FUZZ_DECLARE(name) int fuzz_##name(const uint8_t *data, size_t size);
FUZZ_TARGETS(FUZZ_DECLARE)
#undef FUZZ_DECLARE

/* An invariant of the code under test: aborts with the condition and the place when it does not hold. */
#define FUZZ_CHECK(cond)                                                                                               \
    do {                                                                                                               \
        if (!(cond))                                                                                                   \
            fuzz_fail(__FILE__, __LINE__, #cond);                                                                      \
    } while (0)
void fuzz_fail(const char *file, int line, const char *what) __attribute__((noreturn));

/* The next document of an input made of BSON documents one after another. The document at *p is taken as long as
 * its length prefix says when that fits in what is left, else as everything left (its prefix rewritten to that):
 * so a seed that is one document is one document, and mutations of the prefix do not waste the input. The bytes are
 * copied into *buf (malloc'd, freed by the caller, also when false); false when fewer than 5 bytes are left or the
 * copy is not a BSON document by its frame (bson_init_static). */
bool fuzz_next_doc(const uint8_t **p, size_t *left, uint8_t **buf, bson_t *doc);

/* Whether data is a BSON document whose every element, at every level, reads to its end (bson_iter_next stops at
 * the end, not on an error). The targets check what they make with it, and only when their input is sound too: a
 * value copied whole from a broken input stays broken. (bson_validate with BSON_VALIDATE_NONE is not enough: libbson
 * 1.23 passes documents whose nested elements run past their document's end.) */
bool fuzz_bson_sound(const uint8_t *data, size_t len);
bool fuzz_doc_sound(const bson_t *doc);

#endif

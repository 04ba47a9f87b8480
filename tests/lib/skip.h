/*
 * skip.h — a test that cannot run here says so: a skip is a result of its own, never a pass.
 *
 * Check has no skip status, so a skipping test records itself and returns: SKIP_TEST("needs ...") appends one line,
 * "<test>: <reason>", to the file named by
 * $OPLOG2PG_TEST_SKIPS, and the runner (runner_main.h) subtracts those tests from the passes, printing "N passed, M
 * skipped, F failed" and every skip by name with its reason. The runner makes that file when the caller did not;
 * tests/run.sh names one for the whole of `make check`, so that the shell passes (valgrind) record their skips there
 * too and the run ends with one list.
 */
#ifndef OPLOG2PG_TESTS_SKIP_H
#define OPLOG2PG_TESTS_SKIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define SKIP_ENV "OPLOG2PG_TEST_SKIPS"

/* Records that the running test (Check's tcase_name(): the name given to START_TEST) was skipped, and why. A test
 * that cannot record its skip fails: an unrecorded skip would count as a pass. */
void skip_record(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Skips the running test: records it and returns from the function it is written in (the test body, or a helper
 * whose caller then returns at once). */
#define SKIP_TEST(...)                                                                                                 \
    do {                                                                                                               \
        skip_record(__VA_ARGS__);                                                                                      \
        return;                                                                                                        \
    } while (0)

/* For the runner. skip_file_open makes sure $OPLOG2PG_TEST_SKIPS names a file (it creates a temporary one when the
 * variable is unset: *owned is then true, and skip_file_close removes it) and returns how many lines it holds now. */
bool skip_file_open(long *lines_before, bool *owned);
/* Prints the lines recorded after the first `lines_before` to f (when not NULL), each indented, and returns how many
 * there were. */
long skip_file_report(long lines_before, FILE *f);
void skip_file_close(bool owned);

#endif

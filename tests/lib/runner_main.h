/*
 * runner_main.h — the body shared by the unit and the integration test runners.
 *
 * Each runner defines SUITES_HEADER (a generated list of SUITE(name) lines, one per `Suite *name_suite(void)` found
 * in its folder) and includes this file. One Check SRunner runs every suite; CK_RUN_SUITE / CK_RUN_CASE select a
 * part, as Check documents. The exit status is non-zero when any test failed.
 *
 * Check counts a test that skipped (skip.h) as passed; after Check's own summary the runner prints its count apart:
 * "RUNNER: N passed, M skipped, F failed", then each skipped test with its reason.
 */
#ifndef OPLOG2PG_TESTS_RUNNER_MAIN_H
#define OPLOG2PG_TESTS_RUNNER_MAIN_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "skip.h"

#define SUITE(name) Suite *name(void);
#include SUITES_HEADER
#undef SUITE

int main(int argc, char **argv)
{
    (void)argc;
    const char *me = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    long skips_before;
    bool owned;
    if (!skip_file_open(&skips_before, &owned))
        return EXIT_FAILURE;
    SRunner *sr = srunner_create(NULL);
#define SUITE(name) srunner_add_suite(sr, name());
#include SUITES_HEADER
#undef SUITE
    srunner_run_all(sr, CK_ENV);
    int run = srunner_ntests_run(sr), failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    long skipped = skip_file_report(skips_before, NULL);
    long passed = run - failed - skipped;
    printf("%s: %ld passed, %ld skipped, %d failed\n", me, passed < 0 ? 0 : passed, skipped, failed);
    skip_file_report(skips_before, stdout);
    skip_file_close(owned);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif

/*
 * runner_main.h — the body shared by the unit and the integration test runners.
 *
 * Each runner defines SUITES_HEADER (a generated list of SUITE(name) lines, one per `Suite *name_suite(void)` found
 * in its folder) and includes this file. One Check SRunner runs every suite; CK_RUN_SUITE / CK_RUN_CASE select a
 * part, as Check documents. The exit status is non-zero when any test failed.
 */
#ifndef OPLOG2PG_TESTS_RUNNER_MAIN_H
#define OPLOG2PG_TESTS_RUNNER_MAIN_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#define SUITE(name) Suite *name(void);
#include SUITES_HEADER
#undef SUITE

int main(void)
{
    SRunner *sr = srunner_create(NULL);
#define SUITE(name) srunner_add_suite(sr, name());
#include SUITES_HEADER
#undef SUITE
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif

/*
 * program.c — see program.h.
 */
#include "program.h"

#include <errno.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../tests/lib/benchtrial.h"

void program_start(const char *name, const char *argv0, const char *args_usage)
{
    if (!bench_init(name)) {
        fprintf(stderr, "usage: OPLOG2PG_TEST_PG=... %s %s\n  (run through scripts/with-pg.sh)\n", argv0, args_usage);
        exit(2);
    }
    mongoc_init();
}

uint64_t program_arg(int argc, char **argv, int i, uint64_t fallback)
{
    if (i >= argc)
        return fallback;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(argv[i], &end, 10);
    if (end == argv[i] || *end != '\0' || errno != 0)
        bench_die("argument %d: '%s' is not a whole number", i, argv[i]);
    return (uint64_t)v;
}

int program_end(void)
{
    mongoc_cleanup();
    return 0;
}

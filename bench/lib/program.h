/*
 * program.h — the start of every replication benchmark program (bench/NAME.c): its name in messages, the test
 * cluster it needs (OPLOG2PG_TEST_PG: run it through scripts/with-pg.sh), libmongoc, and its numeric arguments.
 */
#ifndef OPLOG2PG_BENCH_PROGRAM_H
#define OPLOG2PG_BENCH_PROGRAM_H

#include <stdint.h>

/* bench_init(name) and mongoc_init(); without OPLOG2PG_TEST_PG, prints "usage: OPLOG2PG_TEST_PG=... PROGRAM ARGS"
 * and a hint to use scripts/with-pg.sh, and exits 2. */
void program_start(const char *name, const char *argv0, const char *args_usage);
/* argv[i] as a whole number, `fallback` when there are not that many arguments; dies when it is not a number. */
uint64_t program_arg(int argc, char **argv, int i, uint64_t fallback);
/* mongoc_cleanup(); the program's exit status (0). */
int program_end(void);

#endif

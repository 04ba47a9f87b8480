/*
 * main.c — the libFuzzer side of one target: built once per target with -DFUZZ_ENTRY=fuzz_NAME (the Makefile's fuzz
 * section), linked with -fsanitize=fuzzer, which brings main().
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz.h"
#include "util/log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* Inputs are wrong on purpose: the daemon's warnings about them are noise (errors still show). */
    log_set_level(LOGL_ERROR);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return FUZZ_ENTRY(data, size);
}

/*
 * textfile.c — see textfile.h.
 */
#include "textfile.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

char *textfile_read(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (mem == NULL) {
        fclose(f);
        return NULL;
    }
    char chunk[4096];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
        fwrite(chunk, 1, got, mem);
    bool failed = ferror(f) != 0;
    fclose(f);
    fclose(mem);
    if (failed) {
        free(buf);
        return NULL;
    }
    return buf;
}

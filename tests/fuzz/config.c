/*
 * config.c — fuzz target: the text of a configuration file through the INI loader and its checks
 * (config_load_string, daemon/config.h: the INI reader, every option's parser, the [map]/[child] sections, the
 * checks across options). A configuration that loads is printed (config_print) and the print loaded again: it must
 * load, and print the same text, as config.h promises (secrets aside, which the print masks).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config.h"
#include "fuzz.h"

static char *print(const config *c, size_t *len)
{
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    FUZZ_CHECK(f != NULL);
    config_print(f, c);
    FUZZ_CHECK(fclose(f) == 0);
    return text;
}

int fuzz_config(const uint8_t *data, size_t size)
{
    if (size > 64 * 1024)
        return 0;
    char *text = malloc(size + 1);
    FUZZ_CHECK(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    config c;
    char err[2048];
    if (config_load_string("fuzz.ini", text, &c, err, sizeof err)) {
        size_t len1, len2;
        char *p1 = print(&c, &len1);
        /* A masked secret does not read back as the secret: only secret-free configurations go round. */
        if (strstr(p1, "********") == NULL) {
            config again;
            bool ok = config_load_string("fuzz-printed.ini", p1, &again, err, sizeof err);
            if (!ok)
                fprintf(stderr, "the printed configuration does not load: %s\n---\n%s---\n", err, p1);
            FUZZ_CHECK(ok);
            char *p2 = print(&again, &len2);
            if (len1 != len2 || memcmp(p1, p2, len1) != 0)
                fprintf(stderr, "printed twice, differently:\n---\n%s---\n%s---\n", p1, p2);
            FUZZ_CHECK(len1 == len2 && memcmp(p1, p2, len1) == 0);
            free(p2);
            config_free(&again);
        }
        free(p1);
        config_free(&c);
    } else {
        FUZZ_CHECK(memchr(err, '\0', sizeof err) != NULL);
    }
    free(text);
    return 0;
}

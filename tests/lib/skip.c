/*
 * skip.c — skips recorded by the tests, one line each, in the file named by $OPLOG2PG_TEST_SKIPS (see skip.h).
 *
 * Check runs each test in a child process by default: a line is appended with one write() on a file opened with
 * O_APPEND, so children never interleave their lines and the runner (the parent) reads them after the run.
 */
#include "skip.h"

#include <check.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void skip_record(const char *fmt, ...)
{
    char reason[512], line[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    for (char *p = reason; *p; p++)
        if (*p == '\n')
            *p = ' ';
    const char *test = tcase_name(); /* Check: the running test's name, as given to START_TEST */
    int len = snprintf(line, sizeof line, "%s: %s\n", test, reason);
    if (len < 0 || (size_t)len >= sizeof line) { /* cut short: still one line */
        len = (int)sizeof line - 1;
        line[len - 1] = '\n';
    }
    const char *path = getenv(SKIP_ENV);
    ck_assert_msg(path && *path, "%s skips (%s) but $%s is not set: run the tests through their runner", test, reason,
                  SKIP_ENV);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    ck_assert_msg(fd >= 0, "%s skips (%s) but cannot open %s", test, reason, path);
    ssize_t w = write(fd, line, (size_t)len);
    close(fd);
    ck_assert_msg(w == len, "%s skips (%s) but cannot write to %s", test, reason, path);
}

static char own_path[512];

static long count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    long lines = 0;
    int c;
    while ((c = fgetc(f)) != EOF)
        if (c == '\n')
            lines++;
    fclose(f);
    return lines;
}

bool skip_file_open(long *lines_before, bool *owned)
{
    const char *path = getenv(SKIP_ENV);
    *owned = false;
    *lines_before = 0;
    if (path && *path) {
        *lines_before = count_lines(path);
        return true;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(own_path, sizeof own_path, "%s/oplog2pg-skips.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(own_path);
    if (fd < 0) {
        perror("runner: cannot make the skip file");
        return false;
    }
    close(fd);
    if (setenv(SKIP_ENV, own_path, 1) != 0) {
        unlink(own_path);
        return false;
    }
    *owned = true;
    return true;
}

long skip_file_report(long lines_before, FILE *f)
{
    FILE *in = fopen(getenv(SKIP_ENV), "r");
    if (!in)
        return 0;
    char line[1024];
    long seen = 0, skipped = 0;
    while (fgets(line, sizeof line, in)) {
        if (seen++ < lines_before)
            continue;
        if (f)
            fprintf(f, "  SKIP %s", line);
        skipped++;
    }
    fclose(in);
    return skipped;
}

void skip_file_close(bool owned)
{
    if (owned) {
        unlink(own_path);
        unsetenv(SKIP_ENV);
    }
}

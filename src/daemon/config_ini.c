/*
 * config_ini.c — the INI file format of the configuration (include/daemon/config_ini.h): physical lines, section
 * headers, continuation lines, line length, syntax errors, and "FILE:LINE: " in front of every error. What a section
 * or key means is the handler's business (config.c).
 *
 * NOTES
 * libinih splits the lines; we hand it our own line reader (ini_parse_stream) so that we always know the physical line
 * a key comes from, can tell a continuation line (one that starts with whitespace; libinih passes it as the previous
 * key again) from a key given twice, can see section headers (libinih reports a section only through its keys, so an
 * unknown empty section would otherwise pass silently), and can reject a line longer than libinih's fixed buffer
 * instead of letting it be split in two. An indented "[section]" line is handed to libinih unindented, so that it is a
 * header wherever it stands (libinih would read one right below a key as a continuation of that key). Errors are
 * recorded as they are found; the one of the earliest line wins, and libinih's own first error (a syntax error) is
 * weighed against it by line when the parse ends.
 */
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "daemon/config_ini.h"

_Static_assert(CONFIG_INI_MAX_LINE == INI_MAX_LINE - 1, "libinih's buffer holds INI_MAX_LINE - 1 characters");

struct reader {
    const char *name;
    const config_ini_handler *h;
    FILE *fp;           /* the source: a file, */
    const char *text;   /* or a string (advanced as it is read) */
    int lineno;         /* physical line last handed to libinih */
    bool indented;      /* that line starts with whitespace */
    bool have_prev;     /* a key line was read since the last section header (or the start): */
    char prev_name[64]; /* its name */
    bool failed;        /* an error was recorded: */
    int err_line;       /* its line (0 when it has none) */
    char err[640];
};

static void vformat_error(char *buf, size_t buflen, const char *name, int line, const char *fmt, va_list ap)
{
    int n = line > 0 ? snprintf(buf, buflen, "%s:%d: ", name, line) : snprintf(buf, buflen, "%s: ", name);
    if (n >= 0 && (size_t)n < buflen)
        vsnprintf(buf + n, buflen - (size_t)n, fmt, ap);
}

void config_ini_error(char *buf, size_t buflen, const char *name, int line, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vformat_error(buf, buflen, name, line, fmt, ap);
    va_end(ap);
}

static void record_error(struct reader *r, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Keeps the error unless one of an earlier (or the same) line is already kept. */
static void record_error(struct reader *r, int line, const char *fmt, ...)
{
    va_list ap;

    if (r->failed && r->err_line <= line)
        return;
    r->failed = true;
    r->err_line = line;
    va_start(ap, fmt);
    vformat_error(r->err, sizeof r->err, r->name, line, fmt, ap);
    va_end(ap);
}

/* Reads one physical line into buf (at most num-1 bytes), as fgets would; *too_long when the line did not fit (the
 * rest of it is skipped). */
static bool next_line(struct reader *r, char *buf, int num, bool *too_long)
{
    size_t len;

    *too_long = false;
    if (r->fp != NULL) {
        if (fgets(buf, num, r->fp) == NULL)
            return false;
        len = strlen(buf);
        if (len > 0 && buf[len - 1] != '\n') {
            int ch = fgetc(r->fp);
            if (ch != EOF && ch != '\n') {
                *too_long = true;
                while (ch != EOF && ch != '\n')
                    ch = fgetc(r->fp);
            }
        }
        return true;
    }
    if (*r->text == '\0')
        return false;
    const char *nl = strchr(r->text, '\n');
    size_t linelen = nl ? (size_t)(nl - r->text) + 1 : strlen(r->text);
    len = linelen < (size_t)num - 1 ? linelen : (size_t)num - 1;
    memcpy(buf, r->text, len);
    buf[len] = '\0';
    /* A line that fills the buffer exactly but for its newline still fits (the newline is dropped). */
    if (len < linelen && !(len + 1 == linelen && r->text[len] == '\n'))
        *too_long = true;
    r->text += linelen;
    return true;
}

/* libinih's reader: one physical line per call, with the bookkeeping the key handler needs. */
static char *read_line(char *buf, int num, void *stream)
{
    struct reader *r = stream;
    bool too_long;

    if (!next_line(r, buf, num, &too_long))
        return NULL;
    r->lineno++;
    if (too_long)
        record_error(r, r->lineno, "line is longer than %d characters, the most this parser reads", num - 1);

    char *p = buf;
    if (r->lineno == 1 && strncmp(p, "\xEF\xBB\xBF", 3) == 0)
        p += 3;
    /* Indented the way libinih sees it (isspace), so that a continuation is one for both of us. */
    r->indented = isspace((unsigned char)*p) != 0;
    if (r->indented) {
        /* A "[section]" line is a section header, indented or not. libinih would take an indented one below a key
         * as a continuation of that key's value ("[logging]" added to a list...), and reports the others only
         * through their keys: with the indentation dropped, libinih and we both see a header. */
        char *q = p;
        while (isspace((unsigned char)*q))
            q++;
        if (*q == '[') {
            memmove(p, q, strlen(q) + 1);
            r->indented = false;
        }
    }
    if (*p == '[') {
        /* A section header: libinih forgets the previous key here, and so do we. */
        r->have_prev = false;
        r->prev_name[0] = '\0';
        const char *end = strchr(p, ']');
        if (end != NULL && (r->h->section != NULL || r->h->section_at != NULL)) {
            char name[CONFIG_INI_MAX_LINE + 1], msg[640] = "";
            snprintf(name, sizeof name, "%.*s", (int)(end - p - 1), p + 1);
            bool ok = r->h->section_at != NULL ? r->h->section_at(r->h->arg, name, r->lineno, msg, sizeof msg)
                                               : r->h->section(r->h->arg, name, msg, sizeof msg);
            if (!ok)
                record_error(r, r->lineno, "%s", msg);
        }
    }
    return buf;
}

/* libinih's handler: one key line or continuation line. */
static int handle_key(void *user, const char *section, const char *name, const char *value)
{
    struct reader *r = user;
    int line = r->lineno;
    bool continuation = r->indented && r->have_prev && strcmp(name, r->prev_name) == 0;
    char msg[640] = "";

    if (!continuation) {
        snprintf(r->prev_name, sizeof r->prev_name, "%s", name);
        r->have_prev = true;
    }
    if (section[0] == '\0') {
        record_error(r, line, "%s: a key before any [section]", name);
        return 0;
    }
    if (!r->h->key(r->h->arg, section, name, value, continuation, line, msg, sizeof msg)) {
        if (msg[0] != '\0')
            record_error(r, line, "%s", msg);
        return 0;
    }
    return 1;
}

bool config_ini_parse(const char *name, FILE *fp, const char *text, const config_ini_handler *h, char *err,
                      size_t errlen)
{
    struct reader r = {.name = name, .h = h, .fp = fp, .text = fp != NULL ? NULL : text};

    int rc = ini_parse_stream(read_line, &r, handle_key, &r);
    if (rc > 0 && (!r.failed || rc < r.err_line))
        record_error(&r, rc, "syntax error (expected \"[section]\", \"key = value\" or a comment)");
    else if (rc < 0 && !r.failed)
        record_error(&r, 0, "cannot parse (out of memory)");
    if (!r.failed && r.fp != NULL && ferror(r.fp))
        record_error(&r, 0, "read error: %s", strerror(errno));
    if (r.failed) {
        snprintf(err, errlen, "%s", r.err);
        return false;
    }
    return true;
}

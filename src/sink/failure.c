/*
 * failure.c — what went wrong in the open group, for the whole sink: the first failure (its class, SQLSTATE, message
 * and, when a statement for an op failed, that op's position; later failures are its consequences and are not
 * kept), and the keep point a rewind moves (up to it, runs keep their rows and inserts are upserts: pg.c,
 * "streaming", and pipeline.c, rewind_for_existing). The lowest part of the sink that knows struct sink: every
 * other part records its failures here.
 */
#include "pg_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/utf8.h"

static void set_err(sink *s, const op_pos *pos, sink_status st, const char *state, const char *fmt, va_list ap)
{
    if (s->failed != APPLY_OK)
        return; /* keep the first, which is the cause */
    char raw[sizeof s->err];
    vsnprintf(raw, sizeof raw, fmt, ap);
    size_t n = strlen(raw);
    while (n > 0 && (raw[n - 1] == '\n' || raw[n - 1] == ' '))
        raw[--n] = '\0';
    utf8_sanitize(raw, n, s->err, sizeof s->err);
    snprintf(s->err_state, sizeof s->err_state, "%s", state ? state : "");
    s->err_has_pos = pos != NULL;
    if (pos != NULL)
        s->err_pos = *pos;
    s->failed = st;
}

void sink_set_err(sink *s, sink_status st, const char *state, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_err(s, NULL, st, state, fmt, ap);
    va_end(ap);
}

void sink_set_err_at(sink *s, const op_pos *pos, sink_status st, const char *state, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_err(s, pos, st, state, fmt, ap);
    va_end(ap);
}

void sink_fmt_pos(const op_pos *pos, char *buf, size_t len)
{
    if (pos == NULL || (pos->secs == 0 && pos->inc == 0))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%u:%u", pos->secs, pos->inc);
}

const char *sink_error(const sink *s)
{
    return s->err;
}

const char *sink_error_state(const sink *s)
{
    return s->err_state;
}

bool sink_error_pos(const sink *s, op_pos *out)
{
    if (!s->err_has_pos)
        return false;
    *out = s->err_pos;
    return true;
}

op_pos sink_keep_until(const sink *s)
{
    return s->keep_until;
}

void sink_keep_rows_until(sink *s, const op_pos *pos)
{
    if (op_pos_cmp(pos, &s->keep_until) > 0)
        s->keep_until = *pos;
}

void sink_set_copy_end(sink *s, const op_pos *pos)
{
    if (op_pos_cmp(pos, &s->copy_end) > 0)
        s->copy_end = *pos;
    sink_keep_rows_until(s, pos);
}

void sink_clear_err(sink *s)
{
    s->failed = APPLY_OK;
    s->err[0] = '\0';
    s->err_state[0] = '\0';
    s->err_has_pos = false;
}

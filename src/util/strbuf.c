/*
 * strbuf.c — see strbuf.h.
 */
#include "util/strbuf.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void strbuf_init(strbuf *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = false;
}

void strbuf_free(strbuf *b)
{
    free(b->data);
    strbuf_init(b);
}

void strbuf_reset(strbuf *b, size_t keep_cap)
{
    if (b->cap > keep_cap) {
        free(b->data);
        b->data = NULL;
        b->cap = 0;
    }
    b->len = 0;
    b->failed = false;
    if (b->data)
        b->data[0] = '\0';
}

bool strbuf_reserve(strbuf *b, size_t more)
{
    if (b->failed)
        return false;
    if (more > SIZE_MAX / 2 - b->len - 1) {
        b->failed = true;
        return false;
    }
    size_t need = b->len + more + 1;
    if (need <= b->cap)
        return true;
    /* Growing by appends: doubling, by half past 1 MB (a large text overshoots less, and the copy of a realloc holds
     * old and new at once). A reservation beyond that is taken as asked: a caller that knows the size gets it. */
    size_t cap = b->cap ? b->cap : 256;
    cap += cap < 1024 * 1024 ? cap : cap / 2;
    if (cap < need)
        cap = need;
    char *nd = realloc(b->data, cap);
    if (nd == NULL) {
        b->failed = true;
        return false;
    }
    b->data = nd;
    b->cap = cap;
    return true;
}

void strbuf_append_slow(strbuf *b, const void *data, size_t len)
{
    if (!strbuf_reserve(b, len))
        return;
    if (len > 0)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
}

void strbuf_putc_slow(strbuf *b, char c)
{
    if (!strbuf_reserve(b, 1))
        return;
    b->data[b->len++] = c;
    b->data[b->len] = '\0';
}

void strbuf_printf(strbuf *b, const char *fmt, ...)
{
    va_list ap;
    char small[256];
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
        return;
    }
    if ((size_t)n < sizeof small) {
        strbuf_append(b, small, (size_t)n);
        return;
    }
    if (!strbuf_reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void strbuf_put_be16(strbuf *b, uint16_t v)
{
    char p[2] = {(char)(v >> 8), (char)v};
    strbuf_append(b, p, 2);
}

void strbuf_put_be32(strbuf *b, uint32_t v)
{
    char p[4] = {(char)(v >> 24), (char)(v >> 16), (char)(v >> 8), (char)v};
    strbuf_append(b, p, 4);
}

char *strbuf_detach(strbuf *b, size_t *len)
{
    char *d;
    if (b->failed) {
        free(b->data);
        d = NULL;
    } else if (b->data == NULL) {
        d = calloc(1, 1);
    } else {
        d = b->data;
        /* Give back the slack of the doubling when it is large (a big document's text lives on in a queue). */
        if (b->cap - b->len > 64 * 1024 && b->cap - b->len > b->len / 4) {
            char *shrunk = realloc(d, b->len + 1);
            if (shrunk != NULL)
                d = shrunk;
        }
    }
    if (len)
        *len = d ? b->len : 0;
    strbuf_init(b);
    return d;
}

void text_vappendf(char *buf, size_t len, size_t *off, const char *fmt, va_list ap)
{
    if (*off + 1 >= len)
        return;
    int n = vsnprintf(buf + *off, len - *off, fmt, ap);
    if (n < 0)
        return;
    *off += (size_t)n;
    if (*off >= len)
        *off = len - 1;
}

void text_appendf(char *buf, size_t len, size_t *off, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    text_vappendf(buf, len, off, fmt, ap);
    va_end(ap);
}

/* ---- per-thread scratch buffers ---- */

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static bool scratch_key_ok;

static void scratch_free(void *p)
{
    strbuf *b = p;
    for (unsigned i = 0; i < STRBUF_SCRATCH; i++)
        strbuf_free(&b[i]);
    free(b);
}

static void scratch_key_make(void)
{
    scratch_key_ok = pthread_key_create(&scratch_key, scratch_free) == 0;
}

strbuf *strbuf_scratch(unsigned which)
{
    if (which >= STRBUF_SCRATCH)
        return NULL;
    pthread_once(&scratch_once, scratch_key_make);
    if (!scratch_key_ok)
        return NULL;
    strbuf *b = pthread_getspecific(scratch_key);
    if (b == NULL) {
        if ((b = calloc(STRBUF_SCRATCH, sizeof *b)) == NULL)
            return NULL;
        if (pthread_setspecific(scratch_key, b) != 0) {
            free(b);
            return NULL;
        }
    }
    return &b[which];
}

int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

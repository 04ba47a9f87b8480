/*
 * strbuf.h — a growable byte buffer, always NUL-terminated, for building text and binary rows.
 *
 * Allocation failures are sticky: once an append could not grow the buffer, every later append is a no-op and
 * strbuf_failed() stays true until strbuf_reset(), so a caller can append a whole row and check once.
 */
#ifndef OPLOG2PG_UTIL_STRBUF_H
#define OPLOG2PG_UTIL_STRBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct strbuf {
    char *data; /* NUL-terminated when cap > 0; NULL before the first append */
    size_t len, cap;
    bool failed; /* an allocation failed since the last reset */
} strbuf;

#define STRBUF_INIT                                                                                                    \
    {                                                                                                                  \
        NULL, 0, 0, false                                                                                              \
    }

void strbuf_init(strbuf *b);
/* Frees the storage; the buffer is empty and usable again. */
void strbuf_free(strbuf *b);
/* Empties the buffer and clears the failure flag. Keeps up to keep_cap bytes of storage (frees a larger one), so a
 * buffer that once held a huge document does not pin that memory. */
void strbuf_reset(strbuf *b, size_t keep_cap);
/* Makes room for `more` bytes after len (plus the terminator). False (and failed set) when memory runs out. */
bool strbuf_reserve(strbuf *b, size_t more);
/* Growing, and a failure: the appends' slow paths (strbuf.c). */
void strbuf_append_slow(strbuf *b, const void *data, size_t len);
void strbuf_putc_slow(strbuf *b, char c);
/* The appends themselves are inline while the room is there: the JSON writer makes several per value, and a call
 * each was a fifth of the reader thread's time (docs/benchmarks.md, "The appends inline"). */
static inline void strbuf_append(strbuf *b, const void *data, size_t len)
{
    if (!b->failed && b->cap - b->len > len) { /* cap is 0 or above b->len: this reads b->len + len + 1 <= cap */
        if (len > 0)
            memcpy(b->data + b->len, data, len);
        b->len += len;
        b->data[b->len] = '\0';
    } else {
        strbuf_append_slow(b, data, len);
    }
}
static inline void strbuf_puts(strbuf *b, const char *s)
{
    strbuf_append(b, s, strlen(s));
}
static inline void strbuf_putc(strbuf *b, char c)
{
    if (!b->failed && b->cap - b->len > 1) {
        b->data[b->len++] = c;
        b->data[b->len] = '\0';
    } else {
        strbuf_putc_slow(b, c);
    }
}
void strbuf_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Big-endian integers (binary COPY). */
void strbuf_put_be16(strbuf *b, uint16_t v);
void strbuf_put_be32(strbuf *b, uint32_t v);
static inline bool strbuf_failed(const strbuf *b)
{
    return b->failed;
}
/* Hands the storage to the caller (free() it) and leaves the buffer empty; "" when nothing was appended; NULL when
 * an allocation failed (the storage is freed then). Large unused room is given back first. */
char *strbuf_detach(strbuf *b, size_t *len);

/* Scratch buffers of the calling thread (which: 0 .. STRBUF_SCRATCH - 1), kept between calls so that text made and
 * copied elsewhere costs no allocation, and freed when the thread ends. The caller resets it before use (strbuf_reset
 * with what it may keep); NULL when memory runs out. */
#define STRBUF_SCRATCH 2
strbuf *strbuf_scratch(unsigned which);

/* The value of a hexadecimal digit (either case), -1 for any other character. */
int hex_digit(char c);

/* Formatted text appended to a fixed buffer buf[0..len) at *off, which moves past it; always NUL-terminated, and
 * what does not fit is dropped (for messages, which may be cut but never overflow). */
void text_appendf(char *buf, size_t len, size_t *off, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void text_vappendf(char *buf, size_t len, size_t *off, const char *fmt, va_list ap);

#endif

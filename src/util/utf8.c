/*
 * utf8.c — see utf8.h.
 */
#include "util/utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Length of the well-formed sequence at s (1..4), or 0 when the bytes there are not one (RFC 3629 table). */
static size_t seq_len(const unsigned char *s, size_t left)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return left >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (left < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80)
            return 0;
        if (c == 0xE0 && s[1] < 0xA0)
            return 0; /* overlong */
        if (c == 0xED && s[1] > 0x9F)
            return 0; /* surrogate */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (left < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        if (c == 0xF0 && s[1] < 0x90)
            return 0; /* overlong */
        if (c == 0xF4 && s[1] > 0x8F)
            return 0; /* above U+10FFFF */
        return 4;
    }
    return 0;
}

bool utf8_valid(const char *str, size_t len, bool allow_nul)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        /* ASCII runs, eight bytes at a time. */
        while (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & UINT64_C(0x8080808080808080))
                break;
            if (!allow_nul && ((w - UINT64_C(0x0101010101010101)) & ~w & UINT64_C(0x8080808080808080)))
                break;
            i += 8;
        }
        if (i >= len)
            break;
        if (s[i] == 0 && !allow_nul)
            return false;
        size_t n = seq_len(s + i, len - i);
        if (n == 0)
            return false;
        i += n;
    }
    return true;
}

char *utf8_sanitize(const char *str, size_t len, char *out, size_t outlen)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)str;
    size_t w = 0;
    if (outlen == 0)
        return out;
    for (size_t i = 0; i < len;) {
        size_t n = s[i] == 0 ? 0 : seq_len(s + i, len - i);
        if (n > 0) {
            if (w + n >= outlen)
                break;
            memcpy(out + w, s + i, n);
            w += n;
            i += n;
            continue;
        }
        if (w + 4 >= outlen)
            break;
        out[w++] = '\\';
        out[w++] = 'x';
        out[w++] = hex[s[i] >> 4];
        out[w++] = hex[s[i] & 15];
        i++;
    }
    out[w] = '\0';
    return out;
}

char *utf8_sanitize_dup(const char *s, size_t len)
{
    size_t cap = len * 4 + 1;
    char *out = malloc(cap);
    if (out == NULL)
        return NULL;
    return utf8_sanitize(s, len, out, cap);
}

size_t utf8_prefix_len(const char *s, size_t len, size_t max)
{
    if (len <= max)
        return len;
    size_t n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

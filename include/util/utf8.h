/*
 * utf8.h — UTF-8 checks, and making arbitrary bytes safe to store as PostgreSQL text.
 *
 * MongoDB stores strings and names as bytes it never checks against UTF-8 everywhere (namespaces, old documents,
 * applyOps inputs). PostgreSQL refuses invalid UTF-8 and U+0000 in text. Whatever can be replicated is checked with
 * utf8_valid; whatever must be written anyway (a dead letter's namespace, an error message quoting a bad name) goes
 * through utf8_sanitize, which keeps valid text as it is and spells every other byte as \xHH.
 */
#ifndef OPLOG2PG_UTIL_UTF8_H
#define OPLOG2PG_UTIL_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* True when s[0..len) is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF). NUL bytes count
 * as valid here; the callers that must refuse them check allow_nul. */
bool utf8_valid(const char *s, size_t len, bool allow_nul);

/* Writes a NUL-terminated copy of s[0..len) into out (at most outlen bytes, always terminated): valid UTF-8 is kept,
 * a NUL byte or an invalid byte becomes a \xHH escape. Idempotent (text already made safe stays as it is), so a
 * message that quotes a sanitized name can be sanitized again; the raw bytes, where they matter, are kept elsewhere
 * (a dead letter's op_bson). Cut at a character boundary when out is too small. Returns out. */
char *utf8_sanitize(const char *s, size_t len, char *out, size_t outlen);

/* The same, allocated (free()); NULL when memory runs out. */
char *utf8_sanitize_dup(const char *s, size_t len);

/* The length of the longest prefix of s[0..len) of at most max bytes that ends on a character boundary. */
size_t utf8_prefix_len(const char *s, size_t len, size_t max);

#endif

/*
 * ejson.c — documents and _ids as relaxed Extended JSON (see ejson.h).
 */
#include "map/ejson.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rewrite one number token of libbson's output (JSON text, a double) into the shortest form that reads back to
 * the same double; writes into out (at least 32 bytes) and returns its length, or 0 to keep the token. */
static size_t shortest_double(const char *tok, size_t len, char *out)
{
    char buf[64];
    if (len >= sizeof buf)
        return 0;
    memcpy(buf, tok, len);
    buf[len] = '\0';
    char *end;
    double d = strtod(buf, &end);
    if (end != buf + len || !isfinite(d))
        return 0;
    for (int prec = 15; prec <= 17; prec++) {
        int n = snprintf(out, 32, "%.*g", prec, d);
        if (n > 0 && n < 32 && strtod(out, NULL) == d) {
            /* Keep a double recognisable as one: 3 stays 3.0, as libbson writes it. */
            if (strpbrk(out, ".eE") == NULL && n + 2 < 32) {
                memcpy(out + n, ".0", 3);
                n += 2;
            }
            return (size_t)n < len ? (size_t)n : 0;
        }
    }
    return 0;
}

/* libbson writes doubles with 20 significant digits (14.42 becomes 14.419999999999999929): correct, but not what a
 * person querying `doc->>'total'` expects, and not equal to 14.42 as a PostgreSQL numeric. Shorten every number
 * token that has a fraction or an exponent (integers, exact already, are left alone), outside strings, in place. */
static size_t shorten_doubles(char *json, size_t len)
{
    size_t r = 0, w = 0;
    while (r < len) {
        char ch = json[r];
        if (ch == '"') {
            json[w++] = json[r++];
            while (r < len && json[r] != '"') {
                if (json[r] == '\\' && r + 1 < len)
                    json[w++] = json[r++];
                json[w++] = json[r++];
            }
            if (r < len)
                json[w++] = json[r++];
            continue;
        }
        if (ch == '-' || (ch >= '0' && ch <= '9')) {
            size_t start = r;
            bool is_double = false;
            while (r < len && (isdigit((unsigned char)json[r]) || strchr("+-.eE", json[r]) != NULL)) {
                if (json[r] == '.' || json[r] == 'e' || json[r] == 'E')
                    is_double = true;
                r++;
            }
            char out[32];
            size_t n = is_double ? shortest_double(json + start, r - start, out) : 0;
            if (n > 0) {
                memcpy(json + w, out, n);
                w += n;
            } else {
                memmove(json + w, json + start, r - start);
                w += r - start;
            }
            continue;
        }
        json[w++] = json[r++];
    }
    json[w] = '\0';
    return w;
}

char *ejson_document(const bson_t *doc, size_t *len)
{
    size_t n = 0;
    char *json = bson_as_relaxed_extended_json(doc, &n);
    if (json == NULL)
        return NULL;
    n = shorten_doubles(json, n);
    if (len)
        *len = n;
    return json;
}

char *ejson_value(const bson_value_t *v)
{
    bson_t tmp = BSON_INITIALIZER;
    char *out = NULL;
    if (bson_append_value(&tmp, "v", 1, v)) {
        size_t len = 0;
        char *json = ejson_document(&tmp, &len);
        /* libbson writes { "v" : VALUE }: keep VALUE. */
        static const char prefix[] = "{ \"v\" : ";
        if (json != NULL && len > sizeof prefix + 1 && memcmp(json, prefix, sizeof prefix - 1) == 0 &&
            memcmp(json + len - 2, " }", 2) == 0) {
            size_t vlen = len - (sizeof prefix - 1) - 2;
            out = bson_malloc(vlen + 1);
            if (out) {
                memcpy(out, json + sizeof prefix - 1, vlen);
                out[vlen] = '\0';
            }
        }
        bson_free(json);
    }
    bson_destroy(&tmp);
    return out;
}

static bool doc_json(const op *o, char **out, uint32_t *len)
{
    bson_t view;
    if (!op_doc_view(o, &view))
        return false;
    size_t n = 0;
    *out = ejson_document(&view, &n);
    if (*out == NULL || n > UINT32_MAX) {
        bson_free(*out);
        *out = NULL;
        return false;
    }
    *len = (uint32_t)n;
    return true;
}

bool ejson_prepare_entry(op_entry *e)
{
    bool ok = true;
    for (size_t i = 0; i < e->n; i++) {
        op *o = &e->ops[i];
        switch (o->kind) {
        case OP_INSERT:
            if (o->json == NULL && !doc_json(o, &o->json, &o->json_len))
                ok = false;
            break;
        case OP_UPDATE:
            if (o->json == NULL && !doc_json(o, &o->json, &o->json_len))
                ok = false;
            if (o->form != OP_FORM_REPLACE && o->id_json == NULL && (o->id_json = ejson_value(&o->id)) == NULL)
                ok = false;
            break;
        case OP_DELETE:
            if (o->id_json == NULL && (o->id_json = ejson_value(&o->id)) == NULL)
                ok = false;
            break;
        default:
            break;
        }
    }
    return ok;
}

/*
 * config_secrets.c — passwords in the configuration: [mongodb] password_file (its first line put into the URI the
 * daemon connects with, mongodb_uri_effective), the warning for a world-readable file that holds a password
 * (config_secret_exposed), and masking passwords wherever the configuration is printed or logged
 * (config_mask_secrets). A buffer that held a password is zeroed before it is freed.
 *
 * NOTES
 * Two scans of a URI's userinfo live here, on purpose not the same. uri_userinfo reads a MongoDB URI that has passed
 * the driver's check, whose userinfo ends at the last '@' before the first '/'. mask_uri must also cover what was
 * never checked or is malformed (a password holding '/' or '@', a postgresql:// URI), so it masks what either library
 * would read as a password and a little more (the comment above mask_uri says what): when in doubt, mask. A '?' does
 * not end a userinfo: "postgresql://u:p?w@h/x" holds the password p?w for libpq and for the driver alike.
 */
#include <ctype.h>
#include <errno.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "config_internal.h"
#include "util/strbuf.h"

#define MASK "********"

void config_secret_free(char *s)
{
    if (s == NULL)
        return;
    explicit_bzero(s, strlen(s));
    free(s);
}

/* ---- [mongodb] password_file ------------------------------------------------------------------------------------ */

/* The first line of path, trailing whitespace (and the newline) dropped, in *out (malloc'd). */
static bool read_password_file(const char *path, char **out, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;

    if (f == NULL) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return false;
    }
    errno = 0;
    ssize_t n = getline(&line, &cap, f);
    if (n < 0 && ferror(f)) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        goto fail;
    }
    if (n < 0)
        n = 0;
    while (n > 0 && isspace((unsigned char)line[n - 1]))
        n--;
    if (n == 0) {
        snprintf(err, errlen, "%s is empty (its first line must be the password)", path);
        goto fail;
    }
    line[n] = '\0';
    fclose(f);
    *out = line;
    return true;
fail:
    if (line != NULL) {
        explicit_bzero(line, cap); /* all of it: a failed read may have left a partial line past a NUL */
        free(line);
    }
    fclose(f);
    return false;
}

/* The userinfo of a MongoDB URI ("USER" or "USER:PASSWORD", still percent-encoded, before the '@' that precedes the
 * hosts), split at its first ':'. */
struct userinfo {
    const char *user;     /* start of the userinfo */
    size_t user_len;      /* the user name: up to the first ':', or all of the userinfo */
    const char *password; /* after that ':'; NULL when there is none */
    size_t password_len;
    const char *at; /* the '@' after the userinfo */
};

/* False when the URI has no userinfo. Scanned as text rather than with the driver's parser, which would repeat its
 * warnings (an unsupported option, ...) each time; the URI has passed its check. */
static bool uri_userinfo(const char *uri, struct userinfo *ui)
{
    const char *host = strstr(uri, "://");

    if (host == NULL)
        return false;
    host += 3;
    const char *slash = strchr(host, '/');
    ui->at = memrchr(host, '@', slash ? (size_t)(slash - host) : strlen(host));
    if (ui->at == NULL)
        return false;
    ui->user = host;
    const char *colon = memchr(host, ':', (size_t)(ui->at - host));
    ui->user_len = (size_t)((colon != NULL ? colon : ui->at) - host);
    ui->password = colon != NULL ? colon + 1 : NULL;
    ui->password_len = colon != NULL ? (size_t)(ui->at - (colon + 1)) : 0;
    return true;
}

/* uri with ":PASSWORD" (percent-encoded) inserted before the '@' of its userinfo ui, which has no password field.
 * mongoc_uri_set_password would not do: mongoc_uri_get_string returns the text the URI was parsed from, without the
 * password. NULL when memory runs out. */
static char *uri_with_password(const char *uri, const struct userinfo *ui, const char *password)
{
    static const char hex[] = "0123456789ABCDEF";
    char *out = malloc(strlen(uri) + 1 + 3 * strlen(password) + 1);
    char *w;

    if (out == NULL)
        return NULL;
    memcpy(out, uri, (size_t)(ui->at - uri));
    w = out + (ui->at - uri);
    *w++ = ':';
    for (const unsigned char *p = (const unsigned char *)password; *p != '\0'; p++) {
        if (isalnum(*p) || *p == '-' || *p == '.' || *p == '_' || *p == '~') {
            *w++ = (char)*p;
        } else {
            *w++ = '%';
            *w++ = hex[*p >> 4];
            *w++ = hex[*p & 15];
        }
    }
    strcpy(w, ui->at);
    return out;
}

bool config_resolve_mongodb_uri(config *c, char *err, size_t errlen)
{
    const char *uri = c->mongodb_uri != NULL ? c->mongodb_uri : "";
    const char *file = c->mongodb_password_file;
    char *password = NULL, *effective;
    struct userinfo ui;

    if (file == NULL || file[0] == '\0') {
        effective = strdup(uri);
    } else {
        if (!uri_userinfo(uri, &ui) || ui.user_len == 0) {
            snprintf(err, errlen,
                     "is set, so [mongodb] uri must name the user whose password it holds "
                     "(mongodb://USER@host/...)");
            return false;
        }
        if (ui.password != NULL) { /* even an empty one: "USER:@" */
            snprintf(err, errlen,
                     "is set, but [mongodb] uri already holds a password: remove the password from the URI "
                     "(or do not set password_file)");
            return false;
        }
        if (!read_password_file(file, &password, err, errlen))
            return false;
        /* The driver refuses a password that is not UTF-8; say so here rather than at the first connection. */
        if (!bson_utf8_validate(password, strlen(password), false)) {
            snprintf(err, errlen, "the first line of %s is not valid UTF-8", file);
            config_secret_free(password);
            return false;
        }
        effective = uri_with_password(uri, &ui, password);
        config_secret_free(password);
    }
    if (effective == NULL) {
        snprintf(err, errlen, "out of memory");
        return false;
    }
    config_secret_free(c->mongodb_uri_effective);
    c->mongodb_uri_effective = effective;
    return true;
}

/* ---- the world-readable warning --------------------------------------------------------------------------------- */

/* A non-empty password in the URI's userinfo (percent-encoded or not, it is a secret either way). */
static bool uri_has_password(const char *s)
{
    struct userinfo ui;
    return s != NULL && uri_userinfo(s, &ui) && ui.password_len > 0;
}

static bool conninfo_has_password(const char *s)
{
    PQconninfoOption *opts;
    bool has = false;

    if (s == NULL || (opts = PQconninfoParse(s, NULL)) == NULL)
        return false;
    for (PQconninfoOption *o = opts; o->keyword != NULL; o++) {
        if (strcmp(o->keyword, "password") == 0 && o->val != NULL && o->val[0] != '\0')
            has = true;
    }
    PQconninfoFree(opts);
    return has;
}

bool config_secret_exposed(const char *path, const config *c, char *msg, size_t len)
{
    struct stat st;

    if (len > 0)
        msg[0] = '\0';
    if (stat(path, &st) != 0 || (st.st_mode & S_IROTH) == 0)
        return false;
    if (!uri_has_password(c->mongodb_uri) && !conninfo_has_password(c->postgres_conninfo))
        return false;
    snprintf(msg, len,
             "%s is readable by every user and holds a password: chmod 0640 it (owner root, group oplog2pg) or move "
             "the password out (see docs/configuration.md)",
             path);
    return true;
}

/* ---- masking ---------------------------------------------------------------------------------------------------- */

/* What libpq and the MongoDB driver read as the password of a URI, checked against both (PQconninfoParse, libpq 15;
 * mongoc_uri_new, libmongoc 1.23):
 *   - userinfo: both take the text after "://" up to the first '@', when no '/' comes before that '@', as
 *     "USER:PASSWORD" split at the first ':'. Any other character belongs to the password, '?' and '#' included:
 *     "postgresql://u:p?w@h/x" is user u, password p?w.
 *   - a query parameter password=VALUE (libpq; the driver ignores it), its key and value percent-decoded, the value
 *     ending at the next '&'.
 * The masking covers more than that, since what is malformed or was never checked must not show either: the
 * userinfo reaches to the last '@' before the host part ("u:a@b@h" masks a@b, which libpq would read as password a
 * and host b@h), and also past a '/' ("u:p/w@h", where neither library finds a password), unless that '@' stands in
 * the query ("h/db?x=a@b"); a password= parameter is looked for after every '?' and '&'. */

enum { MASKED = 1, MASK_START = 2 };

static void mark(unsigned char *m, const char *s, const char *from, const char *to)
{
    m[from - s] |= MASK_START; /* also for an empty password: it is shown as ******** too */
    for (const char *p = from; p < to; p++)
        m[p - s] |= MASKED;
}

/* Whether key[0..len), percent-decoded, is "password" in any case (libpq wants it lower case; when in doubt, mask). */
static bool key_is_password(const char *key, size_t len)
{
    static const char want[] = "password";
    size_t j = 0;

    for (size_t i = 0; i < len; i++, j++) {
        int c = (unsigned char)key[i];
        if (c == '%' && i + 2 < len && hex_digit(key[i + 1]) >= 0 && hex_digit(key[i + 2]) >= 0) {
            c = hex_digit(key[i + 1]) * 16 + hex_digit(key[i + 2]);
            i += 2;
        }
        if (j >= sizeof want - 1 || tolower(c) != want[j])
            return false;
    }
    return j == sizeof want - 1;
}

/* Marks the userinfo password of the URI whose authority starts at auth. */
static void mark_userinfo(unsigned char *m, const char *s, const char *auth)
{
    const char *first = strchr(auth, '@');

    if (first == NULL)
        return;
    const char *slash = memchr(auth, '/', (size_t)(first - auth));
    if (slash != NULL) {
        /* Neither library sees a userinfo here; it is one all the same, unless the '@' is in a query parameter. */
        const char *q = memchr(slash, '?', (size_t)(first - slash));
        if (q != NULL && memchr(q, '=', (size_t)(first - q)) != NULL)
            return;
    }
    /* The host part starts after the last '@' before the '/' or '?' that ends it. */
    const char *at = first;
    for (const char *p = first + 1; *p != '\0' && *p != '/' && *p != '?'; p++)
        if (*p == '@')
            at = p;
    const char *colon = memchr(auth, ':', (size_t)(at - auth));
    if (colon != NULL)
        mark(m, s, colon + 1, at);
}

/* Marks the value of every password=... parameter after a '?' or '&'. */
static void mark_query_passwords(unsigned char *m, const char *s, const char *auth)
{
    for (const char *p = auth; *p != '\0'; p++) {
        if (*p != '?' && *p != '&')
            continue;
        const char *key = p + 1;
        size_t keylen = strcspn(key, "=&");
        if (key[keylen] != '=' || !key_is_password(key, keylen))
            continue;
        const char *value = key + keylen + 1;
        mark(m, s, value, value + strcspn(value, "&"));
    }
}

/* A URI with the passwords it may hold masked (see above). */
static void mask_uri(const char *s, struct sbuf *sb)
{
    const char *auth = strstr(s, "://") + 3;
    size_t n = strlen(s);
    unsigned char *m = calloc(n + 1, 1);

    if (m == NULL) { /* cannot tell where the password is: show only the scheme */
        sb_add(sb, s, (size_t)(auth - s));
        sb_adds(sb, MASK);
        return;
    }
    mark_userinfo(m, s, auth);
    mark_query_passwords(m, s, auth);
    for (size_t i = 0; i <= n; i++) {
        bool prev_masked = i > 0 && (m[i - 1] & MASKED);
        if ((m[i] & (MASKED | MASK_START)) && !prev_masked)
            sb_adds(sb, MASK);
        if (i < n && !(m[i] & MASKED))
            sb_add(sb, s + i, 1);
    }
    free(m);
}

/* In a libpq key/value string: the value of every password keyword (quoted or not) becomes ********. */
static void mask_keyvalue(const char *s, struct sbuf *sb)
{
    const char *p = s;

    while (*p) {
        const char *start = p;
        while (isspace((unsigned char)*p))
            p++;
        const char *key = p;
        while (*p && *p != '=' && !isspace((unsigned char)*p))
            p++;
        size_t keylen = (size_t)(p - key);
        while (isspace((unsigned char)*p))
            p++;
        if (*p != '=') { /* a word without '=' (libpq refuses the string): copy it and go on with the next */
            sb_add(sb, start, (size_t)(p - start));
            continue;
        }
        p++;
        while (isspace((unsigned char)*p))
            p++;
        const char *value = p;
        if (*p == '\'') {
            for (p++; *p && *p != '\''; p++)
                if (*p == '\\' && p[1])
                    p++;
            if (*p == '\'')
                p++;
        } else {
            for (; *p && !isspace((unsigned char)*p); p++)
                if (*p == '\\' && p[1])
                    p++;
        }
        sb_add(sb, start, (size_t)(value - start));
        if (keylen == 8 && strncasecmp(key, "password", 8) == 0)
            sb_adds(sb, MASK);
        else
            sb_add(sb, value, (size_t)(p - value));
    }
}

const char *config_mask_secrets(const char *s, char *buf, size_t buflen)
{
    struct sbuf sb = {buf, 0, buflen};

    if (buflen > 0)
        buf[0] = '\0';
    if (s == NULL)
        return buf;
    if (strncmp(s, "mongodb://", 10) == 0 || strncmp(s, "mongodb+srv://", 14) == 0 ||
        strncmp(s, "postgresql://", 13) == 0 || strncmp(s, "postgres://", 11) == 0)
        mask_uri(s, &sb);
    else
        mask_keyvalue(s, &sb);
    return buf;
}

/*
 * config.c — the option table and everything it drives: INI parsing (libinih), validation, reload, printing.
 *
 * NOTES
 * Each option is one row of `options[]` below: section, name, type, default (written as in the file, so the same
 * parser produces the defaults), bounds, base unit, reloadable flag, help, and where it lives in `struct config`.
 * Nothing else in the daemon lists option names; docs/configuration.md and conf/oplog2pg.ini are checked against
 * this table by tests/unit/test_config.c.
 *
 * libinih reads the file; we hand it our own line reader (ini_parse_stream) so that we always know the physical line
 * a handler call comes from, can tell a continuation line (one that starts with whitespace; libinih passes it as the
 * previous key again) from a duplicate key, can see section headers (libinih reports a section only through its
 * keys, so an unknown empty section would otherwise pass silently), and can reject a line longer than libinih's
 * fixed buffer instead of letting it be split in two. The first error wins; the handler returns 0 on an error.
 *
 * A load parses into a fresh struct and validates it as a whole; only a complete, valid configuration is moved
 * into the caller's struct. A reload does the same and then copies only the reloadable options that changed.
 */
#include "daemon/config.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/nsfilter.h"
#include "daemon/metrics.h"
#include "sink/pgerror.h"

_Static_assert(sizeof(enum config_apply_mode) == sizeof(int), "enum fields are accessed as int");
_Static_assert(sizeof(enum config_log_level) == sizeof(int), "enum fields are accessed as int");

#define MASK "********"

typedef bool (*check_fn)(const char *value, char *err, size_t errlen);

struct option_def {
    config_option_info info;
    size_t offset;    /* of the field in struct config */
    check_fn check;   /* string: the whole value; list: each item; may be NULL */
    const char *join; /* string: what joins a continuation line to the value before it; NULL = no continuation */
    bool secret;      /* may hold a password: masked when printed */
};

static bool check_mongodb_uri(const char *value, char *err, size_t errlen);
static bool check_conninfo(const char *value, char *err, size_t errlen);
static bool check_service(const char *value, char *err, size_t errlen);
static bool check_pattern(const char *value, char *err, size_t errlen);
static bool check_listen(const char *value, char *err, size_t errlen);
static bool check_ident(const char *value, char *err, size_t errlen);

static const char *const apply_mode_names[] = {"batched", "per-op", NULL};
static const char *const log_level_names[] = {"debug", "info", "notice", "warning", "error", NULL};
static const char *const reimport_names[] = {"drop", "truncate", NULL};
static const char *const on_error_names[] = {"dead-letter", "stop", NULL};
static const char *const timestamps_names[] = {"auto", "on", "off", NULL};
static const char *const destination_names[] = {"stderr", "syslog", NULL};
static const char *const facility_names[] = {"daemon", "user",   "local0", "local1", "local2", "local3",
                                             "local4", "local5", "local6", "local7", NULL};

#define MS_PER_S   INT64_C(1000)
#define MS_PER_MIN (60 * MS_PER_S)
#define MS_PER_H   (60 * MS_PER_MIN)
#define KB         INT64_C(1024)
#define MB         (1024 * KB)
#define GB         (1024 * MB)

/* Sets both the type and its name in a row of the table. */
#define TYPE(t, name) .type = CONFIG_TYPE_##t, .type_name = name

/* clang-format off */
static const struct option_def options[] = {
    {.info = {.section = "mongodb", .name = "uri", TYPE(STRING, "string"),
              .default_text = "mongodb://127.0.0.1:27017/?replicaSet=rs0",
              .help = "MongoDB connection string of the replica set whose oplog is read"},
     .offset = offsetof(config, mongodb_uri), .check = check_mongodb_uri, .join = "", .secret = true},

    {.info = {.section = "mongodb", .name = "password_file", TYPE(STRING, "string"), .default_text = "",
              .help = "file whose first line is the password of the user named in the URI (keeps it out of this "
                      "file; e.g. a systemd credential); empty = none"},
     .offset = offsetof(config, mongodb_password_file)},

    {.info = {.section = "postgres", .name = "conninfo", TYPE(STRING, "string"), .default_text = "",
              .help = "libpq connection string or URI of the target database; empty = libpq's defaults (PGHOST, ...)"},
     .offset = offsetof(config, postgres_conninfo), .check = check_conninfo, .join = " ", .secret = true},

    {.info = {.section = "postgres", .name = "peer_timeout", TYPE(DURATION, "duration"), .default_text = "30s",
              .min = 2 * MS_PER_S, .max = MS_PER_H, .base_unit = "s",
              .help = "how long PostgreSQL may stay silent at the network level before its connection counts as dead: "
                      "the connect timeout, and TCP keepalives and tcp_user_timeout (unless conninfo sets them); a "
                      "busy server that merely keeps oplog2pg waiting (a lock) is not dead"},
     .offset = offsetof(config, postgres_peer_timeout_ms)},

    {.info = {.section = "replication", .name = "service", TYPE(STRING, "string"), .default_text = "default",
              .help = "name of this replication stream: the key of its checkpoint row (--service overrides it)"},
     .offset = offsetof(config, service), .check = check_service},

    {.info = {.section = "replication", .name = "include", TYPE(LIST, "list"), .default_text = "*.*",
              .help = "namespace patterns (DB.COLLECTION, * and ? globs) to replicate"},
     .offset = offsetof(config, include), .check = check_pattern},

    {.info = {.section = "replication", .name = "exclude", TYPE(LIST, "list"), .default_text = "",
              .help = "namespace patterns never replicated, even when an include pattern matches"},
     .offset = offsetof(config, exclude), .check = check_pattern},

    {.info = {.section = "replication", .name = "batch_rows", TYPE(INT, "int"), .default_text = "10000",
              .min = 1, .max = 10000000, .reloadable = true,
              .help = "commit a flush group once it holds this many rows"},
     .offset = offsetof(config, batch_rows)},

    {.info = {.section = "replication", .name = "batch_bytes", TYPE(SIZE, "size"), .default_text = "8MB",
              .min = KB, .max = GB, .reloadable = true,
              .help = "commit a flush group once its rows add up to this many bytes (their text as sent); an insert "
                      "run is also written at this size, so it bounds the memory a run takes"},
     .offset = offsetof(config, batch_bytes)},

    {.info = {.section = "replication", .name = "flush_interval", TYPE(DURATION, "duration"),
              .default_text = "200ms", .min = 1, .max = MS_PER_H, .base_unit = "ms", .reloadable = true,
              .help = "commit a flush group at least this often while the oplog keeps delivering (it is also "
                      "committed as soon as the oplog is drained)"},
     .offset = offsetof(config, flush_interval_ms)},

    {.info = {.section = "replication", .name = "queue_size", TYPE(INT, "int"), .default_text = "10000",
              .min = 16, .max = 10000000,
              .help = "ops held between the oplog reader and the applier; a full queue makes the reader wait"},
     .offset = offsetof(config, queue_size)},

    {.info = {.section = "replication", .name = "queue_bytes", TYPE(SIZE, "size"), .default_text = "8MB",
              .min = MB, .max = GB,
              .help = "bytes of decoded entries held between the oplog reader and the applier (with queue_size, "
                      "whichever is reached first); one entry larger than this still passes alone"},
     .offset = offsetof(config, queue_bytes)},

    {.info = {.section = "replication", .name = "apply_mode", TYPE(ENUM, "enum"), .default_text = "batched",
              .choices = apply_mode_names,
              .help = "batched: flush groups, one commit each; per-op: one statement and one commit per op "
                      "(slow; a benchmark baseline and a debugging aid)"},
     .offset = offsetof(config, apply_mode)},

    {.info = {.section = "replication", .name = "on_error", TYPE(ENUM, "enum"), .default_text = "dead-letter",
              .choices = on_error_names, .reloadable = true,
              .help = "an op PostgreSQL refuses (a document it cannot store, a collection it cannot make, an update "
                      "it cannot apply): dead-letter sets it aside in oplog2pg.dead_letter and goes on; stop commits "
                      "everything before it and exits"},
     .offset = offsetof(config, on_error)},

    {.info = {.section = "copy", .name = "workers", TYPE(INT, "int"), .default_text = "2", .min = 1, .max = 64,
              .help = "collections copied at once by the initial copy, each over its own MongoDB and PostgreSQL "
                      "connection"},
     .offset = offsetof(config, copy_workers)},

    {.info = {.section = "copy", .name = "batch_docs", TYPE(INT, "int"), .default_text = "10000",
              .min = 100, .max = 1000000,
              .help = "documents per committed batch of the initial copy: the most a crash makes it copy again"},
     .offset = offsetof(config, copy_batch_docs)},

    {.info = {.section = "copy", .name = "window_warning", TYPE(DURATION, "duration"), .default_text = "1h",
              .min = 0, .max = 30 * 24 * MS_PER_H, .base_unit = "s",
              .help = "warn when the oplog holds less than this much history before the copy's start point"},
     .offset = offsetof(config, copy_window_warning_ms)},

    {.info = {.section = "copy", .name = "reimport", TYPE(ENUM, "enum"), .default_text = "drop",
              .choices = reimport_names,
              .help = "what --reimport does to the tables of included collections before copying: drop or truncate"},
     .offset = offsetof(config, copy_reimport)},

    {.info = {.section = "logging", .name = "level", TYPE(ENUM, "enum"), .default_text = "info",
              .choices = log_level_names, .reloadable = true,
              .help = "least severe message logged"},
     .offset = offsetof(config, log_level)},

    {.info = {.section = "logging", .name = "progress_interval", TYPE(DURATION, "duration"),
              .default_text = "10s", .min = 0, .max = 24 * MS_PER_H, .base_unit = "s", .reloadable = true,
              .help = "log a progress line (ops applied, lag) this often; 0 = never"},
     .offset = offsetof(config, progress_interval_ms)},

    {.info = {.section = "logging", .name = "timestamps", TYPE(ENUM, "enum"), .default_text = "auto",
              .choices = timestamps_names, .reloadable = true,
              .help = "start each stderr line with a timestamp: auto = unless stderr is the systemd journal, which "
                      "stamps lines itself"},
     .offset = offsetof(config, log_timestamps)},

    {.info = {.section = "logging", .name = "destination", TYPE(ENUM, "enum"), .default_text = "stderr",
              .choices = destination_names,
              .help = "stderr (the journal under systemd) or syslog"},
     .offset = offsetof(config, log_destination)},

    {.info = {.section = "logging", .name = "syslog_facility", TYPE(ENUM, "enum"), .default_text = "daemon",
              .choices = facility_names,
              .help = "syslog facility when destination = syslog"},
     .offset = offsetof(config, syslog_facility)},

    {.info = {.section = "logging", .name = "syslog_ident", TYPE(STRING, "string"), .default_text = "oplog2pg",
              .help = "syslog identity (program name) when destination = syslog"},
     .offset = offsetof(config, syslog_ident), .check = check_ident},

    {.info = {.section = "metrics", .name = "listen", TYPE(STRING, "string"), .default_text = "",
              .help = "serve Prometheus metrics at http://HOST:PORT/metrics (e.g. 127.0.0.1:9187); empty = off"},
     .offset = offsetof(config, metrics_listen), .check = check_listen},
};
/* clang-format on */

#define NOPTIONS (sizeof options / sizeof options[0])

static const char *const type_names[] = {
    [CONFIG_TYPE_STRING] = "string", [CONFIG_TYPE_INT] = "int",           [CONFIG_TYPE_BOOL] = "bool",
    [CONFIG_TYPE_ENUM] = "enum",     [CONFIG_TYPE_DURATION] = "duration", [CONFIG_TYPE_SIZE] = "size",
    [CONFIG_TYPE_LIST] = "list",
};

struct unit {
    const char *name;
    int64_t factor;
};

static const struct unit duration_units[] = {
    {"ms", 1}, {"s", MS_PER_S}, {"min", MS_PER_MIN}, {"h", MS_PER_H}, {NULL, 0},
};
/* kB is PostgreSQL's spelling; KB is accepted too because people write it, and means the same 1024 bytes. */
static const struct unit size_units[] = {
    {"B", 1}, {"kB", KB}, {"KB", KB}, {"MB", MB}, {"GB", GB}, {NULL, 0},
};

/* ---- the table ---------------------------------------------------------------------------------------------- */

size_t config_option_count(void)
{
    return NOPTIONS;
}

const config_option_info *config_option_at(size_t i)
{
    return i < NOPTIONS ? &options[i].info : NULL;
}

int config_option_find(const char *section, const char *name)
{
    for (size_t i = 0; i < NOPTIONS; i++) {
        if (strcasecmp(options[i].info.section, section) == 0 && strcasecmp(options[i].info.name, name) == 0)
            return (int)i;
    }
    return -1;
}

static bool section_known(const char *section, size_t len)
{
    for (size_t i = 0; i < NOPTIONS; i++) {
        if (strlen(options[i].info.section) == len && strncasecmp(options[i].info.section, section, len) == 0)
            return true;
    }
    return false;
}

const char *config_log_level_name(enum config_log_level level)
{
    return (unsigned)level < sizeof log_level_names / sizeof log_level_names[0] - 1 ? log_level_names[level] : "?";
}

const char *config_reimport_mode_name(enum config_reimport_mode mode)
{
    return mode <= CONFIG_REIMPORT_TRUNCATE ? reimport_names[mode] : "?";
}

const char *config_on_error_name(enum config_on_error mode)
{
    return (unsigned)mode < sizeof on_error_names / sizeof on_error_names[0] - 1 ? on_error_names[mode] : "?";
}

const char *config_apply_mode_name(enum config_apply_mode mode)
{
    return (unsigned)mode < sizeof apply_mode_names / sizeof apply_mode_names[0] - 1 ? apply_mode_names[mode] : "?";
}

#define FIELD(c, def, T)  ((T *)(void *)((char *)(c) + (def)->offset))
#define CFIELD(c, def, T) ((const T *)(const void *)((const char *)(c) + (def)->offset))

/* ---- per-option checks ---------------------------------------------------------------------------------------- */

static bool check_mongodb_uri(const char *value, char *err, size_t errlen)
{
    bson_error_t error;
    mongoc_uri_t *uri;

    if (strncmp(value, "mongodb://", 10) != 0 && strncmp(value, "mongodb+srv://", 14) != 0) {
        snprintf(err, errlen, "a MongoDB URI starts with mongodb:// or mongodb+srv://");
        return false;
    }
    uri = mongoc_uri_new_with_error(value, &error);
    if (uri == NULL) {
        snprintf(err, errlen, "not a valid MongoDB URI: %s", error.message);
        return false;
    }
    mongoc_uri_destroy(uri);
    return true;
}

static bool check_conninfo(const char *value, char *err, size_t errlen)
{
    /* libpq's reason may quote pieces of the string, the password among them: pgerror masks those. */
    return pgerror_check_conninfo(value, err, errlen);
}

static bool check_listen(const char *value, char *err, size_t errlen)
{
    char host[256];
    int port;
    return value[0] == '\0' || metrics_parse_listen(value, host, sizeof host, &port, err, errlen);
}

static bool check_ident(const char *value, char *err, size_t errlen)
{
    if (value[0] == '\0' || strlen(value) > 64) {
        snprintf(err, errlen, "a syslog identity is 1 to 64 characters");
        return false;
    }
    return true;
}

static bool check_service(const char *value, char *err, size_t errlen)
{
    size_t n = strlen(value);

    if (n == 0 || n > 200) {
        snprintf(err, errlen, "a service name has 1 to 200 characters");
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)value[i] < 0x20 || value[i] == 0x7f) {
            snprintf(err, errlen, "a service name may not contain control characters");
            return false;
        }
    }
    return true;
}

static bool check_pattern(const char *value, char *err, size_t errlen)
{
    return nsfilter_check_pattern(value, err, errlen);
}

/* ---- [mongodb] password_file ----------------------------------------------------------------------------------- */

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
        explicit_bzero(line, cap);
        free(line);
    }
    fclose(f);
    return false;
}

/* The userinfo of a MongoDB URI: [*user, *at) is "USER" or "USER:PASSWORD" (still percent-encoded), *at the '@'
 * before the hosts. False when the URI has no userinfo. Scanned as text rather than with the driver's parser, which
 * would repeat its warnings (an unsupported option, ...) each time; the URI has passed check_mongodb_uri. */
static bool uri_userinfo(const char *uri, const char **user, const char **at)
{
    const char *host = strstr(uri, "://");

    if (host == NULL)
        return false;
    host += 3;
    const char *slash = strchr(host, '/');
    *at = memrchr(host, '@', slash ? (size_t)(slash - host) : strlen(host));
    *user = host;
    return *at != NULL;
}

/* The URI names a user ("USER@" or "USER:...@" with USER not empty). */
static bool uri_has_user(const char *uri)
{
    const char *user, *at;
    return uri_userinfo(uri, &user, &at) && at > user && *user != ':';
}

/* The URI's userinfo holds a password field (even an empty one: "USER:@"). */
static bool uri_has_password_field(const char *uri)
{
    const char *user, *at;
    return uri_userinfo(uri, &user, &at) && memchr(user, ':', (size_t)(at - user)) != NULL;
}

/* uri with ":PASSWORD" (percent-encoded) inserted after the user name of its userinfo. mongoc_uri_set_password
 * would not do: mongoc_uri_get_string returns the text the URI was parsed from, without the password. */
static char *uri_with_password(const char *uri, const char *password)
{
    static const char hex[] = "0123456789ABCDEF";
    const char *user, *at;
    char *out, *w;

    if (!uri_userinfo(uri, &user, &at))
        return NULL;
    out = malloc(strlen(uri) + 1 + 3 * strlen(password) + 1);
    if (out == NULL)
        return NULL;
    memcpy(out, uri, (size_t)(at - uri));
    w = out + (at - uri);
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
    strcpy(w, at);
    return out;
}

/* Sets c->mongodb_uri_effective: the URI as written, or, with a password_file, the URI with that file's password.
 * The URI itself has passed check_mongodb_uri. On failure c is unchanged and err says what is wrong (without the
 * "[mongodb] password_file: " that the caller puts in front). */
static bool resolve_mongodb_uri(config *c, char *err, size_t errlen)
{
    const char *uri = c->mongodb_uri != NULL ? c->mongodb_uri : "";
    char *password = NULL, *effective = NULL;

    if (c->mongodb_password_file == NULL || c->mongodb_password_file[0] == '\0') {
        effective = strdup(uri);
        if (effective == NULL) {
            snprintf(err, errlen, "out of memory");
            return false;
        }
        goto done;
    }
    if (!uri_has_user(uri)) {
        snprintf(err, errlen,
                 "is set, so [mongodb] uri must name the user whose password it holds "
                 "(mongodb://USER@host/...)");
        goto fail;
    }
    if (uri_has_password_field(uri)) {
        snprintf(err, errlen,
                 "is set, but [mongodb] uri already holds a password: remove the password from the URI "
                 "(or do not set password_file)");
        goto fail;
    }
    if (!read_password_file(c->mongodb_password_file, &password, err, errlen))
        goto fail;
    /* The driver refuses a password that is not UTF-8; say so here rather than at the first connection. */
    if (!bson_utf8_validate(password, strlen(password), false)) {
        snprintf(err, errlen, "the first line of %s is not valid UTF-8", c->mongodb_password_file);
        goto fail;
    }
    effective = uri_with_password(uri, password);
    if (effective == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    explicit_bzero(password, strlen(password));
    free(password);
done:
    free(c->mongodb_uri_effective);
    c->mongodb_uri_effective = effective;
    return true;
fail:
    if (password != NULL) {
        explicit_bzero(password, strlen(password));
        free(password);
    }
    return false;
}

/* A non-empty password in the URI's userinfo (percent-encoded or not, it is a secret either way). */
static bool uri_has_password(const char *s)
{
    const char *user, *at;
    const char *colon;

    if (s == NULL || !uri_userinfo(s, &user, &at))
        return false;
    colon = memchr(user, ':', (size_t)(at - user));
    return colon != NULL && colon + 1 < at;
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

/* ---- values: parsing -------------------------------------------------------------------------------------------- */

static void list_clear(config_list *l)
{
    if (l->items != NULL) {
        for (size_t i = 0; i < l->count; i++)
            free(l->items[i]);
        free(l->items);
    }
    l->items = NULL;
    l->count = 0;
}

/* Appends the comma-separated items of text to l (trimmed; an empty text adds nothing). */
static bool list_append_text(config_list *l, const char *text, check_fn check, char *err, size_t errlen)
{
    const char *p = text;

    if (l->items == NULL) {
        l->items = calloc(1, sizeof *l->items);
        if (l->items == NULL)
            goto nomem;
    }
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '\0')
        return true;
    for (;;) {
        const char *end = strchr(p, ',');
        const char *stop = end ? end : p + strlen(p);
        const char *a = p, *b = stop;
        while (a < b && isspace((unsigned char)*a))
            a++;
        while (b > a && isspace((unsigned char)b[-1]))
            b--;
        if (a == b && end == NULL && l->count > 0)
            break; /* a trailing comma, as at the end of a line that a continuation line extends */
        if (a == b) {
            snprintf(err, errlen, "\"%s\" has an empty item (items are separated by commas)", text);
            return false;
        }
        char *item = strndup(a, (size_t)(b - a));
        if (item == NULL)
            goto nomem;
        if (check != NULL && !check(item, err, errlen)) {
            free(item);
            return false;
        }
        char **grown = realloc(l->items, (l->count + 2) * sizeof *grown);
        if (grown == NULL) {
            free(item);
            goto nomem;
        }
        l->items = grown;
        l->items[l->count++] = item;
        l->items[l->count] = NULL;
        if (end == NULL)
            break;
        p = end + 1;
    }
    return true;
nomem:
    snprintf(err, errlen, "out of memory");
    return false;
}

/* A whole number, optionally signed, then optional spaces, then the rest in *rest. */
static bool parse_number(const char *text, int64_t *out, const char **rest)
{
    char *end;
    const char *p = text;

    while (isspace((unsigned char)*p))
        p++;
    if (!(isdigit((unsigned char)*p) || ((*p == '-' || *p == '+') && isdigit((unsigned char)p[1]))))
        return false;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (errno == ERANGE)
        return false;
    while (isspace((unsigned char)*end))
        end++;
    *out = v;
    *rest = end;
    return true;
}

static void format_scaled(int64_t v, const struct unit *units, char *buf, size_t buflen)
{
    const struct unit *best = &units[0];

    if (v == 0) {
        snprintf(buf, buflen, "0");
        return;
    }
    for (const struct unit *u = units; u->name != NULL; u++) {
        if (v % u->factor == 0 && u->factor >= best->factor && strcmp(u->name, "KB") != 0)
            best = u;
    }
    snprintf(buf, buflen, "%" PRId64 "%s", v / best->factor, best->name);
}

static void format_bound(const struct option_def *def, int64_t v, char *buf, size_t buflen)
{
    if (def->info.type == CONFIG_TYPE_DURATION)
        format_scaled(v, duration_units, buf, buflen);
    else if (def->info.type == CONFIG_TYPE_SIZE)
        format_scaled(v, size_units, buf, buflen);
    else
        snprintf(buf, buflen, "%" PRId64, v);
}

static bool parse_scaled(const struct option_def *def, const char *value, int64_t *out, char *err, size_t errlen)
{
    const struct unit *units = def->info.type == CONFIG_TYPE_DURATION ? duration_units : size_units;
    const char *rest;
    int64_t n, factor = 1;

    if (!parse_number(value, &n, &rest)) {
        snprintf(err, errlen, "\"%s\" is not a whole number%s", value,
                 def->info.type == CONFIG_TYPE_INT ? "" : " with an optional unit");
        return false;
    }
    if (def->info.type == CONFIG_TYPE_INT) {
        if (*rest != '\0') {
            snprintf(err, errlen, "\"%s\" is not a whole number", value);
            return false;
        }
    } else if (*rest == '\0') {
        if (def->info.base_unit != NULL) {
            for (const struct unit *u = units; u->name != NULL; u++)
                if (strcmp(u->name, def->info.base_unit) == 0)
                    factor = u->factor;
        }
    } else {
        const struct unit *u = units;
        while (u->name != NULL && strcmp(u->name, rest) != 0)
            u++;
        if (u->name == NULL) {
            snprintf(err, errlen, "\"%s\" has an unknown unit \"%s\" (valid units: %s)", value, rest,
                     units == duration_units ? "ms, s, min, h" : "B, kB, MB, GB");
            return false;
        }
        factor = u->factor;
    }
    char lo[32], hi[32];
    format_bound(def, def->info.min, lo, sizeof lo);
    format_bound(def, def->info.max, hi, sizeof hi);
    if ((n > 0 && n > INT64_MAX / factor) || (n < 0 && n < INT64_MIN / factor) || n * factor < def->info.min ||
        n * factor > def->info.max) {
        snprintf(err, errlen, "%s is out of range (%s .. %s)", value, lo, hi);
        return false;
    }
    *out = n * factor;
    return true;
}

static bool parse_bool(const char *value, bool *out, char *err, size_t errlen)
{
    static const char *const yes[] = {"on", "true", "yes", "1"};
    static const char *const no[] = {"off", "false", "no", "0"};

    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(value, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(value, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    snprintf(err, errlen, "\"%s\" is not a boolean (on/off, true/false, yes/no, 1/0)", value);
    return false;
}

static bool parse_enum(const struct option_def *def, const char *value, int *out, char *err, size_t errlen)
{
    char names[256] = "";

    for (int i = 0; def->info.choices[i] != NULL; i++) {
        if (strcasecmp(def->info.choices[i], value) == 0) {
            *out = i;
            return true;
        }
        size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", def->info.choices[i]);
    }
    snprintf(err, errlen, "\"%s\" is not one of: %s", value, names);
    return false;
}

/* Stores value into c's field for def. A continuation appends to a string or list instead of replacing it. On
 * failure the field keeps its old value. */
static bool set_value(config *c, const struct option_def *def, const char *value, bool continuation, char *err,
                      size_t errlen)
{
    if (continuation && def->info.type != CONFIG_TYPE_STRING && def->info.type != CONFIG_TYPE_LIST) {
        snprintf(err, errlen,
                 "this line starts with whitespace, which continues the previous value, and a %s value cannot "
                 "continue (remove the indentation)",
                 type_names[def->info.type]);
        return false;
    }
    if (continuation && def->info.type == CONFIG_TYPE_STRING && def->join == NULL) {
        snprintf(err, errlen,
                 "this line starts with whitespace, which continues the previous value, and this value cannot "
                 "continue (remove the indentation)");
        return false;
    }

    switch (def->info.type) {
    case CONFIG_TYPE_STRING: {
        char **field = FIELD(c, def, char *);
        char *s;
        if (continuation) {
            if (asprintf(&s, "%s%s%s", *field ? *field : "", def->join, value) < 0)
                s = NULL;
        } else
            s = strdup(value);
        if (s == NULL) {
            snprintf(err, errlen, "out of memory");
            return false;
        }
        /* The check runs once the value is complete: at validation (a continuation line may follow) or in
         * config_override. */
        free(*field);
        *field = s;
        return true;
    }
    case CONFIG_TYPE_LIST: {
        config_list *field = FIELD(c, def, config_list);
        config_list l = {0};
        if (continuation) {
            for (size_t i = 0; i < field->count; i++)
                if (!list_append_text(&l, field->items[i], NULL, err, errlen))
                    goto list_fail;
        }
        if (!list_append_text(&l, value, def->check, err, errlen))
            goto list_fail;
        list_clear(field);
        *field = l;
        return true;
    list_fail:
        list_clear(&l);
        return false;
    }
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_DURATION:
    case CONFIG_TYPE_SIZE:
        return parse_scaled(def, value, FIELD(c, def, int64_t), err, errlen);
    case CONFIG_TYPE_BOOL:
        return parse_bool(value, FIELD(c, def, bool), err, errlen);
    case CONFIG_TYPE_ENUM:
        return parse_enum(def, value, FIELD(c, def, int), err, errlen);
    }
    return false;
}

/* ---- values: comparing, moving, printing ---------------------------------------------------------------------- */

static bool field_equal(const struct option_def *def, const config *a, const config *b)
{
    switch (def->info.type) {
    case CONFIG_TYPE_STRING: {
        const char *x = *CFIELD(a, def, char *), *y = *CFIELD(b, def, char *);
        return strcmp(x ? x : "", y ? y : "") == 0;
    }
    case CONFIG_TYPE_LIST: {
        const config_list *x = CFIELD(a, def, config_list), *y = CFIELD(b, def, config_list);
        if (x->count != y->count)
            return false;
        for (size_t i = 0; i < x->count; i++)
            if (strcmp(x->items[i], y->items[i]) != 0)
                return false;
        return true;
    }
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_DURATION:
    case CONFIG_TYPE_SIZE:
        return *CFIELD(a, def, int64_t) == *CFIELD(b, def, int64_t);
    case CONFIG_TYPE_BOOL:
        return *CFIELD(a, def, bool) == *CFIELD(b, def, bool);
    case CONFIG_TYPE_ENUM:
        return *CFIELD(a, def, int) == *CFIELD(b, def, int);
    }
    return false;
}

static size_t field_size(const struct option_def *def)
{
    switch (def->info.type) {
    case CONFIG_TYPE_STRING:
        return sizeof(char *);
    case CONFIG_TYPE_LIST:
        return sizeof(config_list);
    case CONFIG_TYPE_BOOL:
        return sizeof(bool);
    case CONFIG_TYPE_ENUM:
        return sizeof(int);
    default:
        return sizeof(int64_t);
    }
}

static void field_swap(const struct option_def *def, config *a, config *b)
{
    unsigned char tmp[sizeof(config_list)];
    size_t n = field_size(def);
    void *x = (char *)a + def->offset, *y = (char *)b + def->offset;

    memcpy(tmp, x, n);
    memcpy(x, y, n);
    memcpy(y, tmp, n);
}

/* A small bounded string builder: appends what fits, always NUL-terminated. */
struct sbuf {
    char *buf;
    size_t len, cap;
};

static void sb_add(struct sbuf *sb, const char *s, size_t n)
{
    if (sb->cap == 0)
        return;
    size_t room = sb->cap - 1 - sb->len;
    if (n > room)
        n = room;
    memcpy(sb->buf + sb->len, s, n);
    sb->len += n;
    sb->buf[sb->len] = '\0';
}

static void sb_adds(struct sbuf *sb, const char *s)
{
    sb_add(sb, s, strlen(s));
}

/* In a URI: userinfo "user:secret@" -> "user:********@", and a password=... query parameter. */
static void mask_uri(const char *s, struct sbuf *sb)
{
    const char *auth = strstr(s, "://") + 3;
    const char *query = strchr(auth, '?');
    const char *at = NULL;

    for (const char *p = auth; *p && (query == NULL || p < query); p++)
        if (*p == '@')
            at = p;
    if (at != NULL) {
        const char *colon = memchr(auth, ':', (size_t)(at - auth));
        if (colon != NULL) {
            sb_add(sb, s, (size_t)(colon + 1 - s));
            sb_adds(sb, MASK);
            s = at;
        }
    }
    if (query == NULL) {
        sb_adds(sb, s);
        return;
    }
    sb_add(sb, s, (size_t)(query - s));
    for (const char *p = query; *p;) {
        const char *end = strchr(p + 1, '&');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        /* p points at '?' or '&' */
        if (strncasecmp(p + 1, "password=", 9) == 0) {
            sb_add(sb, p, 10);
            sb_adds(sb, MASK);
        } else
            sb_add(sb, p, n);
        p += n;
    }
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
        if (*p != '=') { /* not key=value: copy the rest as it is (the check rejects such strings anyway) */
            sb_adds(sb, start);
            return;
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

static const char *format_value(const config *c, const struct option_def *def, bool mask, char *buf, size_t buflen)
{
    struct sbuf sb = {buf, 0, buflen};

    if (buflen > 0)
        buf[0] = '\0';
    switch (def->info.type) {
    case CONFIG_TYPE_STRING: {
        const char *s = *CFIELD(c, def, char *);
        if (mask && def->secret)
            config_mask_secrets(s, buf, buflen);
        else
            sb_adds(&sb, s ? s : "");
        break;
    }
    case CONFIG_TYPE_LIST: {
        const config_list *l = CFIELD(c, def, config_list);
        for (size_t i = 0; i < l->count; i++) {
            if (i > 0)
                sb_adds(&sb, ", ");
            sb_adds(&sb, l->items[i]);
        }
        break;
    }
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_DURATION:
    case CONFIG_TYPE_SIZE:
        format_bound(def, *CFIELD(c, def, int64_t), buf, buflen);
        break;
    case CONFIG_TYPE_BOOL:
        sb_adds(&sb, *CFIELD(c, def, bool) ? "on" : "off");
        break;
    case CONFIG_TYPE_ENUM:
        sb_adds(&sb, def->info.choices[*CFIELD(c, def, int)]);
        break;
    }
    return buf;
}

const char *config_value_text(const config *c, size_t index, char *buf, size_t buflen)
{
    if (index >= NOPTIONS) {
        if (buflen > 0)
            buf[0] = '\0';
        return buf;
    }
    return format_value(c, &options[index], true, buf, buflen);
}

void config_print(FILE *out, const config *c)
{
    const char *section = NULL;
    char buf[4096];

    fprintf(out, "; oplog2pg effective configuration (passwords masked)\n");
    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct option_def *def = &options[i];
        if (section == NULL || strcmp(section, def->info.section) != 0) {
            section = def->info.section;
            fprintf(out, "\n[%s]\n", section);
        }
        if (c->overrides != NULL && c->overrides[i] != NULL)
            fprintf(out, "; set on the command line\n");
        format_value(c, def, true, buf, sizeof buf);
        fprintf(out, "%s =%s%s\n", def->info.name, buf[0] ? " " : "", buf);
    }
}

/* ---- lifecycle ------------------------------------------------------------------------------------------------- */

void config_free(config *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct option_def *def = &options[i];
        if (def->info.type == CONFIG_TYPE_STRING)
            free(*FIELD(c, def, char *));
        else if (def->info.type == CONFIG_TYPE_LIST)
            list_clear(FIELD(c, def, config_list));
    }
    if (c->overrides != NULL) {
        for (size_t i = 0; i < NOPTIONS; i++)
            free(c->overrides[i]);
        free(c->overrides);
    }
    if (c->mongodb_uri_effective != NULL) {
        explicit_bzero(c->mongodb_uri_effective, strlen(c->mongodb_uri_effective));
        free(c->mongodb_uri_effective);
    }
    memset(c, 0, sizeof *c);
}

bool config_init_defaults(config *c)
{
    char err[256];

    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < NOPTIONS; i++) {
        if (!set_value(c, &options[i], options[i].info.default_text, false, err, sizeof err)) {
            /* Only an allocation can fail here: test_config checks that every default parses. */
            config_free(c);
            return false;
        }
    }
    /* The default has no password_file, so this only copies the URI. */
    if (!resolve_mongodb_uri(c, err, sizeof err)) {
        config_free(c);
        return false;
    }
    return true;
}

bool config_override(config *c, const char *section, const char *name, const char *value, char *err, size_t errlen)
{
    int idx = config_option_find(section, name);
    char msg[512];
    char *copy = NULL;

    if (idx < 0) {
        snprintf(err, errlen, "[%s] %s: unknown option", section, name);
        return false;
    }
    if (c->overrides == NULL && (c->overrides = calloc(NOPTIONS, sizeof *c->overrides)) == NULL)
        goto nomem;
    if ((copy = strdup(value)) == NULL)
        goto nomem;
    if (!set_value(c, &options[idx], value, false, msg, sizeof msg) ||
        (options[idx].info.type == CONFIG_TYPE_STRING && options[idx].check != NULL &&
         !options[idx].check(*FIELD(c, &options[idx], char *), msg, sizeof msg))) {
        snprintf(err, errlen, "[%s] %s: %s", options[idx].info.section, options[idx].info.name, msg);
        free(copy);
        return false;
    }
    if (strcmp(options[idx].info.section, "mongodb") == 0 && !resolve_mongodb_uri(c, msg, sizeof msg)) {
        snprintf(err, errlen, "[mongodb] password_file: %s", msg);
        free(copy);
        return false;
    }
    free(c->overrides[idx]);
    c->overrides[idx] = copy;
    return true;
nomem:
    snprintf(err, errlen, "out of memory");
    return false;
}

/* ---- parsing a file --------------------------------------------------------------------------------------------- */

struct parse_ctx {
    const char *file;
    config cfg;       /* the configuration being built (moved out only when valid) */
    FILE *fp;         /* the source: a file, */
    const char *text; /* or a string (advanced as it is read) */
    int lineno;       /* physical line last handed to libinih */
    bool indented;    /* that line starts with whitespace */
    int prev_index;   /* option set by the previous key line in the current section (-2: none) */
    char prev_name[64];
    int seen_line[NOPTIONS]; /* line where each option was set, 0 if not */
    bool failed;             /* an error was recorded: */
    int err_line;            /* its line (0 when it has none) */
    char err[640];
};

static void record_error(struct parse_ctx *ctx, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void record_error(struct parse_ctx *ctx, int line, const char *fmt, ...)
{
    va_list ap;

    if (ctx->failed && ctx->err_line <= line)
        return;
    ctx->failed = true;
    ctx->err_line = line;
    int n = line > 0 ? snprintf(ctx->err, sizeof ctx->err, "%s:%d: ", ctx->file, line)
                     : snprintf(ctx->err, sizeof ctx->err, "%s: ", ctx->file);
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof ctx->err)
        vsnprintf(ctx->err + n, sizeof ctx->err - (size_t)n, fmt, ap);
    va_end(ap);
}

/* Reads one physical line into buf (at most num-1 bytes), as fgets would. */
static bool next_line(struct parse_ctx *ctx, char *buf, int num, bool *too_long)
{
    size_t len;

    *too_long = false;
    if (ctx->fp != NULL) {
        if (fgets(buf, num, ctx->fp) == NULL)
            return false;
        len = strlen(buf);
        if (len > 0 && buf[len - 1] != '\n') {
            int ch = fgetc(ctx->fp);
            if (ch != EOF && ch != '\n') {
                *too_long = true;
                while (ch != EOF && ch != '\n')
                    ch = fgetc(ctx->fp);
            }
        }
        return true;
    }
    if (*ctx->text == '\0')
        return false;
    const char *nl = strchr(ctx->text, '\n');
    size_t linelen = nl ? (size_t)(nl - ctx->text) + 1 : strlen(ctx->text);
    len = linelen < (size_t)num - 1 ? linelen : (size_t)num - 1;
    memcpy(buf, ctx->text, len);
    buf[len] = '\0';
    /* A line that fills the buffer exactly but for its newline still fits (the newline is dropped). */
    if (len < linelen && !(len + 1 == linelen && ctx->text[len] == '\n'))
        *too_long = true;
    ctx->text += linelen;
    return true;
}

/* libinih's reader: one physical line per call, with the bookkeeping the handler needs. */
static char *read_line(char *buf, int num, void *stream)
{
    struct parse_ctx *ctx = stream;
    bool too_long;

    if (!next_line(ctx, buf, num, &too_long))
        return NULL;
    ctx->lineno++;
    if (too_long)
        record_error(ctx, ctx->lineno, "line is longer than %d characters, the most this parser reads", num - 1);

    const char *p = buf;
    if (ctx->lineno == 1 && strncmp(p, "\xEF\xBB\xBF", 3) == 0)
        p += 3;
    ctx->indented = (*p == ' ' || *p == '\t');
    if (*p == '[') {
        /* A section header: libinih forgets the previous key here, and so do we. */
        ctx->prev_index = -2;
        ctx->prev_name[0] = '\0';
        const char *end = strchr(p, ']');
        if (end != NULL && !section_known(p + 1, (size_t)(end - p - 1)))
            record_error(ctx, ctx->lineno,
                         "unknown section [%.*s] (sections: [mongodb], [postgres], "
                         "[replication], [logging])",
                         (int)(end - p - 1), p + 1);
    }
    return buf;
}

static void list_keys(const char *section, char *buf, size_t buflen)
{
    struct sbuf sb = {buf, 0, buflen};

    buf[0] = '\0';
    for (size_t i = 0; i < NOPTIONS; i++) {
        if (strcasecmp(options[i].info.section, section) != 0)
            continue;
        if (sb.len > 0)
            sb_adds(&sb, ", ");
        sb_adds(&sb, options[i].info.name);
    }
}

static int handle_key(void *user, const char *section, const char *name, const char *value)
{
    struct parse_ctx *ctx = user;
    int line = ctx->lineno;
    bool continuation = ctx->indented && ctx->prev_index != -2 && strcmp(name, ctx->prev_name) == 0;
    char msg[512];

    if (!continuation) {
        snprintf(ctx->prev_name, sizeof ctx->prev_name, "%s", name);
        ctx->prev_index = -1;
    }
    if (section[0] == '\0') {
        record_error(ctx, line, "%s: a key before any [section]", name);
        return 0;
    }
    int idx = config_option_find(section, name);
    if (idx < 0) {
        if (!section_known(section, strlen(section)))
            return 0; /* already reported at the section header */
        list_keys(section, msg, sizeof msg);
        record_error(ctx, line, "[%s] %s: unknown key (the keys of [%s] are: %s)", section, name, section, msg);
        return 0;
    }

    const struct option_def *def = &options[idx];
    if (!continuation) {
        ctx->prev_index = idx;
        if (ctx->seen_line[idx] != 0) {
            record_error(ctx, line, "[%s] %s: set twice (first on line %d)", def->info.section, def->info.name,
                         ctx->seen_line[idx]);
            return 0;
        }
        ctx->seen_line[idx] = line;
    }
    if (!set_value(&ctx->cfg, def, value, continuation, msg, sizeof msg)) {
        record_error(ctx, line, "[%s] %s: %s", def->info.section, def->info.name, msg);
        return 0;
    }
    return 1;
}

/* Checks that need the whole configuration. */
static bool validate(struct parse_ctx *ctx)
{
    config *c = &ctx->cfg;
    char msg[512];
    int inc = config_option_find("replication", "include");

    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct option_def *def = &options[i];
        if (def->info.type == CONFIG_TYPE_STRING && def->check != NULL &&
            !def->check(*FIELD(c, def, char *), msg, sizeof msg)) {
            record_error(ctx, ctx->seen_line[i], "[%s] %s: %s", def->info.section, def->info.name, msg);
            return false;
        }
    }
    if (!resolve_mongodb_uri(c, msg, sizeof msg)) {
        int pwf = config_option_find("mongodb", "password_file");
        record_error(ctx, ctx->seen_line[pwf], "[mongodb] password_file: %s", msg);
        return false;
    }
    if (c->include.count == 0) {
        record_error(ctx, ctx->seen_line[inc],
                     "[replication] include: is empty, so nothing would be replicated "
                     "(use *.* for everything)");
        return false;
    }
    nsfilter *f =
        nsfilter_new((const char *const *)c->include.items, (const char *const *)c->exclude.items, msg, sizeof msg);
    if (f == NULL) {
        record_error(ctx, ctx->seen_line[inc], "[replication] include/exclude: %s", msg);
        return false;
    }
    nsfilter_free(f);
    return true;
}

static bool load(struct parse_ctx *ctx, config *out, char *err, size_t errlen)
{
    if (!config_init_defaults(&ctx->cfg)) {
        snprintf(err, errlen, "%s: out of memory", ctx->file);
        return false;
    }
    ctx->prev_index = -2;

    int rc = ini_parse_stream(read_line, ctx, handle_key, ctx);
    if (rc > 0 && (!ctx->failed || rc < ctx->err_line))
        record_error(ctx, rc, "syntax error (expected \"[section]\", \"key = value\" or a comment)");
    else if (rc < 0 && !ctx->failed)
        record_error(ctx, 0, "cannot parse (out of memory)");
    if (!ctx->failed && ctx->fp != NULL && ferror(ctx->fp))
        record_error(ctx, 0, "read error: %s", strerror(errno));
    if (!ctx->failed)
        (void)validate(ctx);
    if (ctx->failed) {
        snprintf(err, errlen, "%s", ctx->err);
        config_free(&ctx->cfg);
        return false;
    }
    *out = ctx->cfg;
    return true;
}

bool config_load(const char *path, config *out, char *err, size_t errlen)
{
    struct parse_ctx ctx = {.file = path};
    bool ok;

    ctx.fp = fopen(path, "r");
    if (ctx.fp == NULL) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return false;
    }
    ok = load(&ctx, out, err, errlen);
    fclose(ctx.fp);
    return ok;
}

bool config_load_string(const char *name, const char *text, config *out, char *err, size_t errlen)
{
    struct parse_ctx ctx = {.file = name, .text = text};

    return load(&ctx, out, err, errlen);
}

static void say(config_log_fn log, void *arg, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void say(config_log_fn log, void *arg, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    if (log == NULL)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log(arg, msg);
}

bool config_reload(const char *path, config *current, char *err, size_t errlen, config_log_fn log, void *log_arg,
                   int *changed)
{
    config fresh;
    int applied = 0;
    char old_text[1024], new_text[1024];

    if (changed != NULL)
        *changed = 0;
    if (!config_load(path, &fresh, err, errlen))
        return false;
    for (size_t i = 0; current->overrides != NULL && i < NOPTIONS; i++) {
        if (current->overrides[i] != NULL &&
            !set_value(&fresh, &options[i], current->overrides[i], false, err, errlen)) {
            config_free(&fresh);
            return false;
        }
    }
    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct option_def *def = &options[i];
        if (field_equal(def, current, &fresh))
            continue;
        format_value(current, def, true, old_text, sizeof old_text);
        format_value(&fresh, def, true, new_text, sizeof new_text);
        if (def->info.reloadable) {
            field_swap(def, current, &fresh);
            applied++;
            say(log, log_arg, "[%s] %s changed: %s -> %s", def->info.section, def->info.name, old_text, new_text);
        } else {
            say(log, log_arg, "[%s] %s changed in the file to %s; restart required to apply it (keeping %s)",
                def->info.section, def->info.name, new_text, old_text);
        }
    }
    config_free(&fresh);
    if (changed != NULL)
        *changed = applied;
    return true;
}

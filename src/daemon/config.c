/*
 * config.c — the option table and what it drives: defaults, loading a file (checked as a whole), --service style
 * overrides, reload, printing; the API of include/daemon/config.h.
 *
 * NOTES
 * Each option is one row of `options[]` below: section, name, type, default (written as in the file, so the same
 * parser produces the defaults), bounds, base unit, reloadable flag, help, where it lives in `struct config`, and the
 * check its value must pass. Nothing else in the daemon lists option names; docs/configuration.md and
 * conf/oplog2pg.ini are checked against this table by tests/unit/test_config.c, man/oplog2pg.ini.5 by
 * tests/unit/test_docs.c. To add an option: a field in struct config, a row here, an entry in those three files.
 *
 * The rest of the module, by concern (config_internal.h lists what they share):
 *   config_values.c   value syntax (numbers and units, booleans, enums, lists) and the struct field behind a row
 *   config_secrets.c  [mongodb] password_file, the world-readable warning, masking passwords when printing
 *   config_ini.c      the INI file format: lines, sections, continuation lines, errors with line numbers
 *   config_map.c      the [map DB.COLL] and [child SCHEMA.TABLE] sections: the column maps (struct config's maps)
 *   config_map_print.c  the maps written out again (INI for `config`, text and JSON for `map`, compared on reload)
 *
 * A load parses into a fresh struct and validates it as a whole; only a complete, valid configuration is moved
 * into the caller's struct. A reload does the same and then copies only the reloadable options that changed.
 */
#include "daemon/config.h"

#include <errno.h>
#include <mongoc/mongoc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_internal.h"
#include "core/nsfilter.h"
#include "daemon/config_ini.h"
#include "daemon/config_map.h"
#include "daemon/metrics.h"
#include "sink/pgerror.h"

static bool check_mongodb_uri(const char *value, char *err, size_t errlen);
static bool check_service(const char *value, char *err, size_t errlen);
static bool check_listen(const char *value, char *err, size_t errlen);
static bool check_ident(const char *value, char *err, size_t errlen);

static const char *const apply_mode_names[] = {"batched", "per-op", NULL};
static const char *const log_level_names[] = {"debug", "info", "notice", "warning", "error", NULL};
static const char *const reimport_names[] = {"drop", "truncate", NULL};
static const char *const on_error_names[] = {"dead-letter", "stop", NULL};
static const char *const read_concern_names[] = {"majority", "local", NULL};
static const char *const source_names[] = {"auto", "oplog", "change_stream", NULL};
static const char *const stream_updates_names[] = {"auto", "raw", "description", NULL};
static const char *const timestamps_names[] = {"auto", "on", "off", NULL};
static const char *const destination_names[] = {"stderr", "syslog", NULL};
static const char *const facility_names[] = {"daemon", "user",   "local0", "local1", "local2", "local3",
                                             "local4", "local5", "local6", "local7", NULL};

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

    {.info = {.section = "mongodb", .name = "read_concern", TYPE(ENUM, "enum"), .default_text = "majority",
              .choices = read_concern_names,
              .help = "majority: read the oplog (and the initial copy's data) with readConcern majority, so only "
                      "entries a majority of the replica set committed are applied and none can be rolled back; "
                      "local: the primary's newest entries, with less lag, but a failover can roll back entries "
                      "PostgreSQL already holds (oplog2pg then stops with exit code 4 and the data needs "
                      "--reimport)"},
     .offset = offsetof(config, read_concern)},

    {.info = {.section = "mongodb", .name = "source", TYPE(ENUM, "enum"), .default_text = "auto",
              .choices = source_names,
              .help = "what changes are read from: oplog (local.oplog.rs, the fastest; needs read access to "
                      "local), change_stream (a cluster-wide change stream, where the oplog cannot be read: Atlas "
                      "shared tiers, DocumentDB, accounts without access to local, a sharded cluster's routers "
                      "alone), or auto (the oplog where it can be read, else a change stream; the log and status "
                      "say which)"},
     .offset = offsetof(config, source)},

    {.info = {.section = "mongodb", .name = "change_stream_updates", TYPE(ENUM, "enum"), .default_text = "auto",
              .choices = stream_updates_names,
              .help = "change streams: how updates are read. raw: the oplog's own update (showRawUpdateDescription), "
                      "applied as the oplog source applies it; a server that refuses it stops the source. "
                      "description: the event's updateDescription (updatedFields, removedFields, truncatedArrays). "
                      "auto: raw where the server gives it, else description"},
     .offset = offsetof(config, change_stream_updates)},

    {.info = {.section = "mongodb", .name = "delete_reconcile", TYPE(DURATION, "duration"), .default_text = "off",
              .min = 0, .max = 7 * 24 * MS_PER_H, .base_unit = "s", .zero_word = "off",
              .help = "Azure Cosmos DB for MongoDB (RU), whose change streams send no deletes: every this often, "
                      "applying pauses and the rows whose _id no longer exists in MongoDB are deleted from the "
                      "tables of the included collections (a scan of every _id of each, so deletes appear up to "
                      "one interval late); off = never, and such a server is refused at start"},
     .offset = offsetof(config, delete_reconcile_ms)},

    {.info = {.section = "mongodb", .name = "shard_note_after", TYPE(DURATION, "duration"), .default_text = "100ms",
              .min = 0, .max = MS_PER_H, .base_unit = "ms",
              .help = "sharded clusters: when one shard has shown nothing for this long while the others wait on "
                      "it, write a note into its oplog (appendOplogNote) so the merged stream moves on; 0 = never "
                      "(wait for the shard's periodic noop, every 10 s by default)"},
     .offset = offsetof(config, shard_note_after_ms)},

    /* libpq's reason for refusing a conninfo may quote pieces of it, the password among them: pgerror masks those. */
    {.info = {.section = "postgres", .name = "conninfo", TYPE(STRING, "string"), .default_text = "",
              .help = "libpq connection string or URI of the target database; empty = libpq's defaults (PGHOST, ...)"},
     .offset = offsetof(config, postgres_conninfo), .check = pgerror_check_conninfo, .join = " ", .secret = true},

    {.info = {.section = "postgres", .name = "peer_timeout", TYPE(DURATION, "duration"), .default_text = "30s",
              .min = 2 * MS_PER_S, .max = MS_PER_H, .base_unit = "s",
              .help = "how long PostgreSQL may stay silent at the network level before its connection counts as dead: "
                      "the connect timeout, and TCP keepalives and tcp_user_timeout (unless conninfo sets them); a "
                      "busy server that merely keeps oplog2pg waiting (a lock) is not dead"},
     .offset = offsetof(config, postgres_peer_timeout_ms)},

    {.info = {.section = "postgres", .name = "max_prepared_statements", TYPE(INT, "int"), .default_text = "1000",
              .min = 1, .max = 1000000,
              .help = "statements (a table's insert, update or delete) the daemon's connection keeps prepared at "
                      "once; past it, a statement no recent commit used makes room, or the op is planned for one "
                      "execution. Each costs PostgreSQL about 8 kB in that connection's backend, and every "
                      "catalog change in the database (any session's CREATE, DROP or ANALYZE) makes the backend "
                      "visit all of them; raise it when writes go round more tables than this "
                      "(oplog2pg_statements_unnamed_total keeps growing)"},
     .offset = offsetof(config, postgres_max_prepared)},

    {.info = {.section = "replication", .name = "service", TYPE(STRING, "string"), .default_text = "default",
              .help = "name of this replication stream: the key of its checkpoint row (--service overrides it)"},
     .offset = offsetof(config, service), .check = check_service},

    {.info = {.section = "replication", .name = "include", TYPE(LIST, "list"), .default_text = "*.*",
              .help = "namespace patterns (DB.COLLECTION, * and ? globs) to replicate"},
     .offset = offsetof(config, include), .check = nsfilter_check_pattern},

    {.info = {.section = "replication", .name = "exclude", TYPE(LIST, "list"), .default_text = "",
              .help = "namespace patterns never replicated, even when an include pattern matches"},
     .offset = offsetof(config, exclude), .check = nsfilter_check_pattern},

    {.info = {.section = "replication", .name = "batch_rows", TYPE(INT, "int"), .default_text = "100000",
              .min = 1, .max = 10000000, .reloadable = true,
              .help = "commit a flush group once it holds this many rows"},
     .offset = offsetof(config, batch_rows)},

    {.info = {.section = "replication", .name = "batch_bytes", TYPE(SIZE, "size"), .default_text = "8MB",
              .min = KB, .max = GB, .reloadable = true,
              .help = "the memory a flush group may hold: an insert run is written at this size (one whose COPY "
                      "streams lets go of the rows it has sent instead), and the group commits once its runs hold "
                      "this much"},
     .offset = offsetof(config, batch_bytes)},

    {.info = {.section = "replication", .name = "batch_tables", TYPE(INT, "int"), .default_text = "auto",
              .min = 1, .max = 1000000, .zero_word = "auto", .reloadable = true,
              .help = "commit a flush group once it has written to this many tables (each holds locks until the "
                      "commit, in PostgreSQL's shared lock table); auto = a fifth of that table, at two locks a "
                      "table, as PostgreSQL reports its size at connect"},
     .offset = offsetof(config, batch_tables)},

    {.info = {.section = "replication", .name = "flush_interval", TYPE(DURATION, "duration"),
              .default_text = "200ms", .min = 1, .max = MS_PER_H, .base_unit = "ms", .reloadable = true,
              .help = "commit a flush group at least this often while the oplog keeps delivering (it is also "
                      "committed as soon as the oplog is drained)"},
     .offset = offsetof(config, flush_interval_ms)},

    {.info = {.section = "replication", .name = "catchup_interval", TYPE(DURATION, "duration"),
              .default_text = "1s", .min = 1, .max = MS_PER_H, .base_unit = "ms", .reloadable = true,
              .help = "while oplog2pg is behind (entries are already waiting when flush_interval has passed), a flush "
                      "group may stay open this long instead, so a backlog is caught up with fewer commits and "
                      "longer COPYs; no effect when it is not longer than flush_interval"},
     .offset = offsetof(config, catchup_interval_ms)},

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

    {.info = {.section = "replication", .name = "unlisted_error_limit", TYPE(INT, "int"), .default_text = "10",
              .min = 1, .max = 1000000, .reloadable = true,
              .help = "an error whose SQLSTATE the error policy does not list is retried like a passing fault, but "
                      "when it fails the same op this many times in a row oplog2pg stops (exit 3) naming both"},
     .offset = offsetof(config, unlisted_error_limit)},

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

    {.info = {.section = "metrics", .name = "oplog_window_interval", TYPE(DURATION, "duration"),
              .default_text = "30s", .min = MS_PER_S, .max = MS_PER_H, .base_unit = "s",
              .help = "how often the oplog's oldest and newest entries are read for oplog2pg_oplog_window_seconds and "
                      "oplog2pg_oplog_margin_seconds (a thread of its own, off the apply loop)"},
     .offset = offsetof(config, metrics_window_interval_ms)},
};
/* clang-format on */

#define NOPTIONS (sizeof options / sizeof options[0])

/* ---- the table -------------------------------------------------------------------------------------------------- */

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

static bool section_known(const char *section)
{
    for (size_t i = 0; i < NOPTIONS; i++) {
        if (strcasecmp(options[i].info.section, section) == 0)
            return true;
    }
    return false;
}

/* The keys of section, for a message: "service, include, ...". */
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

/* The sections of the table, in its order, for a message: "[mongodb], [postgres], ...". */
static void list_sections(char *buf, size_t buflen)
{
    struct sbuf sb = {buf, 0, buflen};

    buf[0] = '\0';
    for (size_t i = 0; i < NOPTIONS; i++) {
        size_t j = 0;
        while (j < i && strcasecmp(options[j].info.section, options[i].info.section) != 0)
            j++;
        if (j < i)
            continue; /* listed already */
        if (sb.len > 0)
            sb_adds(&sb, ", ");
        sb_adds(&sb, "[");
        sb_adds(&sb, options[i].info.section);
        sb_adds(&sb, "]");
    }
}

/* names[value], or "?" when value is not an index of the NULL-terminated names. */
static const char *choice_name(const char *const *names, unsigned value)
{
    for (unsigned i = 0; names[i] != NULL; i++)
        if (i == value)
            return names[i];
    return "?";
}

const char *config_log_level_name(enum config_log_level level)
{
    return choice_name(log_level_names, (unsigned)level);
}

const char *config_on_error_name(enum config_on_error mode)
{
    return choice_name(on_error_names, (unsigned)mode);
}

const char *config_apply_mode_name(enum config_apply_mode mode)
{
    return choice_name(apply_mode_names, (unsigned)mode);
}

/* ---- per-option checks (the table's .check; a check of a list runs on each item) -------------------------------- */

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

/* ---- lifecycle -------------------------------------------------------------------------------------------------- */

void config_free(config *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < NOPTIONS; i++)
        config_field_clear(c, &options[i]);
    if (c->overrides != NULL) {
        for (size_t i = 0; i < NOPTIONS; i++)
            config_secret_free(c->overrides[i]); /* may be a URI with a password */
        free(c->overrides);
    }
    config_secret_free(c->mongodb_uri_effective);
    map_set_clear(&c->maps);
    memset(c, 0, sizeof *c);
}

bool config_init_defaults(config *c)
{
    char err[256];

    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < NOPTIONS; i++) {
        if (!config_field_set(c, &options[i], options[i].info.default_text, false, err, sizeof err)) {
            /* Only an allocation can fail here: test_config checks that every default parses. */
            config_free(c);
            return false;
        }
    }
    /* The default has no password_file, so this only copies the URI. */
    if (!config_resolve_mongodb_uri(c, err, sizeof err)) {
        config_free(c);
        return false;
    }
    return true;
}

static bool check_whole(config *c, char *msg, size_t msglen, size_t *about, int *map_line);

/* Works on c itself: the option's old value is moved aside, the new one set and the whole configuration checked as a
 * load checks it; a refusal puts the old value (and the effective URI) back, so c is as it was, also c->overrides. */
bool config_override(config *c, const char *section, const char *name, const char *value, char *err, size_t errlen)
{
    int idx = config_option_find(section, name);
    char msg[640], field_msg[512];
    size_t about;
    int map_line;

    if (idx < 0) {
        snprintf(err, errlen, "[%s] %s: unknown option", section, name);
        return false;
    }
    const struct option_def *def = &options[idx];
    char **overrides = c->overrides != NULL ? c->overrides : calloc(NOPTIONS, sizeof *overrides);
    char *copy = strdup(value);
    if (overrides == NULL || copy == NULL) {
        free(copy);
        if (overrides != c->overrides)
            free(overrides);
        snprintf(err, errlen, "out of memory");
        return false;
    }

    config saved;
    memset(&saved, 0, sizeof saved);
    config_field_swap(def, &saved, c); /* the old value into saved; c's field is now empty */
    char *old_effective = c->mongodb_uri_effective;
    c->mongodb_uri_effective = NULL;

    bool ok = config_field_set(c, def, value, false, field_msg, sizeof field_msg);
    if (!ok)
        snprintf(msg, sizeof msg, "[%s] %s: %s", def->info.section, def->info.name, field_msg);
    else
        ok = check_whole(c, msg, sizeof msg, &about, &map_line);
    if (!ok) {
        config_field_clear(c, def);
        config_field_swap(def, &saved, c);
        config_secret_free(c->mongodb_uri_effective);
        c->mongodb_uri_effective = old_effective;
        config_secret_free(copy);
        if (overrides != c->overrides)
            free(overrides);
        snprintf(err, errlen, "%s", msg);
        return false;
    }
    config_field_clear(&saved, def);
    config_secret_free(old_effective);
    c->overrides = overrides;
    config_secret_free(c->overrides[idx]);
    c->overrides[idx] = copy;
    return true;
}

/* ---- loading a file --------------------------------------------------------------------------------------------- */

/* A configuration being loaded: built from the defaults, moved out only when valid. */
struct loading {
    const char *file;
    config cfg;
    int seen_line[NOPTIONS]; /* line where each option was set, 0 if not */
    config_map_reader *maps; /* the [map] and [child] sections */
};

/* config_ini_handler.section_at: a section of the table, or a map's. */
static bool on_section(void *arg, const char *name, int line, char *err, size_t errlen)
{
    struct loading *ld = arg;
    char sections[256];

    if (!config_map_section(ld->maps, name, line, err, errlen))
        return false;
    if (config_map_is_section(name) || section_known(name))
        return true;
    list_sections(sections, sizeof sections);
    snprintf(err, errlen, "unknown section [%s] (sections: %s)", name, sections);
    return false;
}

/* config_ini_handler.key: an option of the table, set once. */
static bool on_key(void *arg, const char *section, const char *name, const char *value, bool continuation, int line,
                   char *err, size_t errlen)
{
    struct loading *ld = arg;
    char msg[512];

    if (config_map_is_section(section))
        return config_map_key(ld->maps, name, value, continuation, line, err, errlen);
    int idx = config_option_find(section, name);
    if (idx < 0) {
        if (!section_known(section))
            return false; /* already reported at the section header */
        list_keys(section, msg, sizeof msg);
        snprintf(err, errlen, "[%s] %s: unknown key (the keys of [%s] are: %s)", section, name, section, msg);
        return false;
    }
    const struct option_def *def = &options[idx];
    if (!continuation) {
        if (ld->seen_line[idx] != 0) {
            snprintf(err, errlen, "[%s] %s: set twice (first on line %d)", def->info.section, def->info.name,
                     ld->seen_line[idx]);
            return false;
        }
        ld->seen_line[idx] = line;
    }
    if (!config_field_set(&ld->cfg, def, value, continuation, msg, sizeof msg)) {
        snprintf(err, errlen, "[%s] %s: %s", def->info.section, def->info.name, msg);
        return false;
    }
    return true;
}

/* The checks of a whole configuration, after every value has been set (by the file and by the overrides): each
 * string option's own check, [mongodb] password_file with uri (this sets c->mongodb_uri_effective), include not
 * empty, include and exclude together, and every map for a namespace they replicate. On failure msg holds
 * "[section] key: what is wrong" and *about the index of the option it is about (for the line of an error about a
 * file), or *map_line the line of the map it is about (0 when it is about an option). */
static bool check_whole(config *c, char *msg, size_t msglen, size_t *about, int *map_line)
{
    char why[512];
    int inc = config_option_find("replication", "include");

    *map_line = 0;

    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct option_def *def = &options[i];
        if (!config_field_check(c, def, why, sizeof why)) {
            snprintf(msg, msglen, "[%s] %s: %s", def->info.section, def->info.name, why);
            *about = i;
            return false;
        }
    }
    if (!config_resolve_mongodb_uri(c, why, sizeof why)) {
        snprintf(msg, msglen, "[mongodb] password_file: %s", why);
        *about = (size_t)config_option_find("mongodb", "password_file");
        return false;
    }
    *about = (size_t)inc;
    if (c->include.count == 0) {
        snprintf(msg, msglen,
                 "[replication] include: is empty, so nothing would be replicated (use *.* for everything)");
        return false;
    }
    nsfilter *f =
        nsfilter_new((const char *const *)c->include.items, (const char *const *)c->exclude.items, why, sizeof why);
    if (f == NULL) {
        snprintf(msg, msglen, "[replication] include/exclude: %s", why);
        return false;
    }
    bool maps_ok = config_map_check_filter(&c->maps, f, map_line, msg, msglen);
    nsfilter_free(f);
    if (maps_ok && c->delete_reconcile_ms > 0 && c->maps.n > 0) {
        /* the reconciliation deletes from tables of the jsonb shape only: a typed table's deleted documents would
         * keep their rows, so the two are refused together rather than left to drift */
        snprintf(msg, msglen,
                 "[mongodb] delete_reconcile: collections with a typed map ([map ...] sections) are not reconciled, "
                 "so documents deleted from them would keep their rows; remove the maps or delete_reconcile");
        *about = (size_t)config_option_find("mongodb", "delete_reconcile");
        return false;
    }
    return maps_ok;
}

/* check_whole on a configuration being loaded; an error names the line of the option it is about. */
static bool validate(struct loading *ld, char *err, size_t errlen)
{
    char msg[640];
    size_t about;
    int map_line;

    if (check_whole(&ld->cfg, msg, sizeof msg, &about, &map_line))
        return true;
    config_ini_error(err, errlen, ld->file, map_line != 0 ? map_line : ld->seen_line[about], "%s", msg);
    return false;
}

/* Sets the overrides (config_override's, kept for a reload) over what the file set; the option's line is forgotten,
 * so that a later error about it names no line of the file. */
static bool apply_overrides(struct loading *ld, char *const *overrides, char *err, size_t errlen)
{
    char msg[512];

    for (size_t i = 0; overrides != NULL && i < NOPTIONS; i++) {
        const struct option_def *def = &options[i];
        if (overrides[i] == NULL)
            continue;
        if (!config_field_set(&ld->cfg, def, overrides[i], false, msg, sizeof msg)) {
            config_ini_error(err, errlen, ld->file, 0, "[%s] %s (set on the command line): %s", def->info.section,
                             def->info.name, msg);
            return false;
        }
        ld->seen_line[i] = 0;
    }
    return true;
}

/* Reads fp (or text when fp is NULL) over the defaults, sets the overrides (may be NULL) over that, validates, and
 * moves the result into *out. */
static bool load(const char *file, FILE *fp, const char *text, char *const *overrides, config *out, char *err,
                 size_t errlen)
{
    struct loading ld = {.file = file};
    const config_ini_handler handler = {.section_at = on_section, .key = on_key, .arg = &ld};
    char msg[640]; /* errors are cut at this length, whatever errlen */

    if (!config_init_defaults(&ld.cfg) || (ld.maps = config_map_reader_new(file)) == NULL) {
        config_free(&ld.cfg);
        snprintf(err, errlen, "%s: out of memory", file);
        return false;
    }
    /* The maps are joined up once the whole file is read (a [child] section may come before its map), and before
     * the whole is validated (a map must name a namespace the filter replicates). */
    bool ok = config_ini_parse(file, fp, text, &handler, msg, sizeof msg) &&
              apply_overrides(&ld, overrides, msg, sizeof msg) &&
              config_map_finish(ld.maps, &ld.cfg.maps, msg, sizeof msg) && validate(&ld, msg, sizeof msg);
    config_map_reader_free(ld.maps);
    if (!ok) {
        snprintf(err, errlen, "%s", msg);
        config_free(&ld.cfg);
        return false;
    }
    *out = ld.cfg;
    return true;
}

static bool load_file(const char *path, char *const *overrides, config *out, char *err, size_t errlen)
{
    FILE *fp = fopen(path, "r");
    bool ok;

    if (fp == NULL) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return false;
    }
    ok = load(path, fp, NULL, overrides, out, err, errlen);
    fclose(fp);
    return ok;
}

bool config_load(const char *path, config *out, char *err, size_t errlen)
{
    return load_file(path, NULL, out, err, errlen);
}

bool config_load_string(const char *name, const char *text, config *out, char *err, size_t errlen)
{
    return load(name, NULL, text, NULL, out, err, errlen);
}

/* ---- reload ----------------------------------------------------------------------------------------------------- */

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
    /* The overrides go over the new file before it is checked as a whole, as a load checks a file. */
    if (!load_file(path, current->overrides, &fresh, err, errlen))
        return false;
    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct option_def *def = &options[i];
        if (config_field_equal(def, current, &fresh))
            continue;
        config_field_format(current, def, true, old_text, sizeof old_text);
        config_field_format(&fresh, def, true, new_text, sizeof new_text);
        if (def->info.reloadable) {
            config_field_swap(def, current, &fresh);
            applied++;
            say(log, log_arg, "[%s] %s changed: %s -> %s", def->info.section, def->info.name, old_text, new_text);
        } else {
            say(log, log_arg, "[%s] %s changed in the file to %s; restart required to apply it (keeping %s)",
                def->info.section, def->info.name, new_text, old_text);
        }
    }
    /* The maps shape the tables the daemon writes and the statements it has prepared: they change with a restart. */
    if (!config_map_equal(&current->maps, &fresh.maps))
        say(log, log_arg,
            "the map sections ([map ...], [child ...]) changed in the file; restart required to apply "
            "them (keeping the running map)");
    config_free(&fresh);
    if (changed != NULL)
        *changed = applied;
    return true;
}

/* ---- printing --------------------------------------------------------------------------------------------------- */

const char *config_value_text(const config *c, size_t index, char *buf, size_t buflen)
{
    if (index >= NOPTIONS) {
        if (buflen > 0)
            buf[0] = '\0';
        return buf;
    }
    return config_field_format(c, &options[index], true, buf, buflen);
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
        config_field_format(c, def, true, buf, sizeof buf);
        fprintf(out, "%s =%s%s\n", def->info.name, buf[0] ? " " : "", buf);
    }
    config_map_print_ini(out, &c->maps);
}

/*
 * config.h — oplog2pg's configuration: one table of options, an INI parser over it, reload and printing.
 *
 * Every option is declared once, in the table in src/daemon/config.c (section, name, type, default, bounds, unit,
 * reloadable flag, help). That table drives parsing (libinih), validation, the printed effective configuration and
 * the unit test that checks docs/configuration.md and conf/oplog2pg.ini list every key. docs/configuration.md is the
 * user's reference for every option and for how values, units and errors are written.
 *
 * The column maps ([map DB.COLL] and [child SCHEMA.TABLE] sections, docs/mapping.md) are not options of the table:
 * daemon/config_map.h reads them into `maps`, in the same load and with the same FILE:LINE errors.
 *
 * Loading parses into a fresh struct and validates it as a whole before anything is handed to the caller; a failed
 * load or reload leaves the caller's configuration untouched. Errors name the file, the line and the key:
 *     /etc/oplog2pg/oplog2pg.ini:12: [replication] batch_rows: "10x" is not a whole number
 */
#ifndef OPLOG2PG_DAEMON_CONFIG_H
#define OPLOG2PG_DAEMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "map/map.h"

/* A comma-separated list, items trimmed. items is NULL-terminated (items[count] == NULL), so it can be handed to
 * nsfilter_new as is. An empty list has count 0 and items pointing at a lone NULL. */
typedef struct config_list {
    char **items;
    size_t count;
} config_list;

/* [mongodb] read_concern: which oplog entries the reader sees. */
enum config_read_concern {
    CONFIG_READ_MAJORITY = 0, /* readConcern majority: only entries a majority committed (never rolled back) */
    CONFIG_READ_LOCAL = 1,    /* the primary's newest entries: lower latency, but a failover can roll them back */
};

/* [mongodb] source: where the changes are read. */
enum config_source {
    CONFIG_SOURCE_AUTO = 0,      /* the oplog where it can be read, else a change stream (daemon/source_choice.h) */
    CONFIG_SOURCE_OPLOG,         /* local.oplog.rs */
    CONFIG_SOURCE_CHANGE_STREAM, /* a cluster-wide change stream */
};

/* [mongodb] change_stream_updates: how a change stream's updates are read (in the order of source/stream/stream.h's
 * stream_updates). */
enum config_stream_updates {
    CONFIG_STREAM_UPDATES_AUTO = 0,    /* the raw $v:2 diff where the server gives it, else updateDescription */
    CONFIG_STREAM_UPDATES_RAW,         /* the raw diff only (showRawUpdateDescription) */
    CONFIG_STREAM_UPDATES_DESCRIPTION, /* updateDescription only */
};

enum config_apply_mode {
    CONFIG_APPLY_BATCHED = 0, /* flush groups: COPY runs + pipelined statements, one commit per group */
    CONFIG_APPLY_PER_OP = 1,  /* one statement and one commit per op (baseline for benchmarks, debugging) */
};

enum config_reimport_mode {
    CONFIG_REIMPORT_DROP = 0,     /* --reimport drops the tables of included collections (the copy recreates them) */
    CONFIG_REIMPORT_TRUNCATE = 1, /* --reimport empties them, keeping grants, indexes and views built on them */
};

enum config_on_error {
    CONFIG_ON_ERROR_DEAD_LETTER = 0, /* set the refused op aside in oplog2pg.dead_letter, go on */
    CONFIG_ON_ERROR_STOP = 1,        /* commit everything before it, stop (exit 1) */
};

enum config_timestamps {
    CONFIG_TIMESTAMPS_AUTO = 0, /* on, unless stderr is the systemd journal */
    CONFIG_TIMESTAMPS_ON,
    CONFIG_TIMESTAMPS_OFF,
};

enum config_log_destination {
    CONFIG_LOG_STDERR = 0,
    CONFIG_LOG_SYSLOG = 1,
};

/* Index into the [logging] syslog_facility choices: daemon, user, local0 .. local7. */
enum config_syslog_facility {
    CONFIG_FACILITY_DAEMON = 0,
    CONFIG_FACILITY_USER,
    CONFIG_FACILITY_LOCAL0, /* LOCAL1..LOCAL7 follow */
};

enum config_log_level {
    CONFIG_LOG_DEBUG = 0,
    CONFIG_LOG_INFO,
    CONFIG_LOG_NOTICE,
    CONFIG_LOG_WARNING,
    CONFIG_LOG_ERROR,
};

/* The effective configuration. Durations are in milliseconds, sizes in bytes. Owned strings; free with
 * config_free. */
typedef struct config {
    /* [mongodb] */
    char *mongodb_uri;           /* as written in the file (printed, masked) */
    char *mongodb_password_file; /* "" = none */
    /* The URI to connect with: mongodb_uri, plus the password read from password_file when that is set. Not an
     * option of the table (never printed); set by config_load, config_init_defaults and config_override. Every
     * connection to MongoDB uses this one. */
    char *mongodb_uri_effective;
    enum config_read_concern read_concern;
    enum config_source source;
    enum config_stream_updates change_stream_updates;
    int64_t delete_reconcile_ms; /* delete_reconcile: the interval of the _id anti-join; 0 = off */
    int64_t shard_note_after_ms; /* sharded clusters: appendOplogNote after this wait on a shard; 0 = never */
    /* [postgres] */
    char *postgres_conninfo; /* libpq conninfo or URI; "" = libpq's environment defaults */
    int64_t postgres_peer_timeout_ms;
    int64_t postgres_max_prepared; /* max_prepared_statements: the sink's bound (src/sink/stmt.c) */
    /* [replication] */
    char *service;
    config_list include;
    config_list exclude;
    int64_t batch_rows;
    int64_t batch_bytes;
    int64_t batch_tables; /* 0: auto (sink_auto_batch_tables) */
    int64_t flush_interval_ms;
    int64_t catchup_interval_ms;
    int64_t queue_size;
    int64_t queue_bytes;
    enum config_apply_mode apply_mode;
    enum config_on_error on_error;
    int64_t unlisted_error_limit; /* failures in a row of one op with one SQLSTATE the error policy does not list */
    /* [copy] */
    int64_t copy_workers;
    int64_t copy_batch_docs;
    int64_t copy_window_warning_ms;
    enum config_reimport_mode copy_reimport;

    /* [logging] */
    enum config_log_level log_level;
    int64_t progress_interval_ms; /* 0 = off */
    enum config_timestamps log_timestamps;
    enum config_log_destination log_destination;
    enum config_syslog_facility syslog_facility; /* LOCALn = CONFIG_FACILITY_LOCAL0 + n */
    char *syslog_ident;

    /* [metrics] */
    char *metrics_listen;               /* "HOST:PORT"; "" = off */
    int64_t metrics_window_interval_ms; /* how often the oplog window of the metrics is read */

    /* [map DB.COLL] and [child SCHEMA.TABLE] sections (daemon/config_map.h, docs/mapping.md): not options of the
     * table, and not reloadable (a reload that finds them changed keeps these and says a restart is needed). */
    map_set maps;

    /* Values set by config_override (e.g. --service), kept so config_reload applies them again; one slot per
     * option, NULL when not overridden. Internal: use config_override. */
    char **overrides;
} config;

enum config_type {
    CONFIG_TYPE_STRING,
    CONFIG_TYPE_INT,
    CONFIG_TYPE_BOOL,
    CONFIG_TYPE_ENUM,
    CONFIG_TYPE_DURATION,
    CONFIG_TYPE_SIZE,
    CONFIG_TYPE_LIST,
};

/* What the table says about one option (for tests, docs checks and help output). */
typedef struct config_option_info {
    const char *section;
    const char *name;
    enum config_type type;
    const char *type_name;      /* "string", "int", "bool", "enum", "duration", "size", "list" */
    const char *default_text;   /* as written in the INI file, e.g. "16MB", "200ms", "" */
    int64_t min, max;           /* int: bounds; duration: ms; size: bytes (unused for other types) */
    const char *base_unit;      /* duration: unit of a bare number ("ms" or "s"); NULL otherwise */
    const char *const *choices; /* enum: NULL-terminated names, index = stored value; NULL otherwise */
    const char *zero_word;      /* int: a word accepted for 0, and printed for it ("auto": oplog2pg chooses); NULL
                                 * otherwise (0 is then an ordinary number, within min .. max) */
    bool reloadable;
    const char *help;
} config_option_info;

/* A sink for messages from config_reload ("restart required", "changed"). */
typedef void (*config_log_fn)(void *arg, const char *msg);

/* Fills c with the defaults (after zeroing it). False only when memory runs out. Free with config_free. */
bool config_init_defaults(config *c);

/* Parses path into a fresh configuration starting from the defaults, validates it, and only then moves it into
 * *out (which must not hold a configuration: it is overwritten). On failure *out is left as it was and err holds
 * "FILE:LINE: [section] key: what is wrong" (or "FILE: ..." when the file cannot be read). */
bool config_load(const char *path, config *out, char *err, size_t errlen);

/* The same from a string (name is used in messages in place of a file name); for tests and tools. */
bool config_load_string(const char *name, const char *text, config *out, char *err, size_t errlen);

/* Sets one option from its text form, with the same checks as the file, and remembers it so that config_reload
 * applies it again (the command line wins over the file: --service). The configuration with the new value is then
 * checked as a whole, as config_load checks a file (an empty include, a password_file that cannot be read or a uri
 * that holds a password as well, ...). On failure err says why ("[section] key: what is wrong") and c is left
 * exactly as it was, its remembered overrides included. */
bool config_override(config *c, const char *section, const char *name, const char *value, char *err, size_t errlen);

/* Re-reads path. When it is invalid, returns false with err set and *current unchanged. Otherwise copies into
 * *current the reloadable options whose value changed (logging "[s] k changed: OLD -> NEW") and leaves the others,
 * logging "[s] k changed in the file; restart required to apply it (keeping OLD)". Overrides from config_override
 * are applied to the new file first, and the result is checked as a whole as config_load checks a file. *changed (may
 * be NULL) receives the number of options applied. */
bool config_reload(const char *path, config *current, char *err, size_t errlen, config_log_fn log, void *log_arg,
                   int *changed);

/* Frees what c owns and zeroes it. Safe on a zeroed struct and twice. */
void config_free(config *c);

/* Writes the effective configuration as an INI file that config_load reads back to the same values, except that
 * secrets (a password in the conninfo or in either URI) are replaced by "********". */
void config_print(FILE *out, const config *c);

/* The text form of one option's value in c (as config_print writes it, secrets masked). Returns buf. */
const char *config_value_text(const config *c, size_t index, char *buf, size_t buflen);

/* A copy of s with passwords masked (libpq conninfo key/value or URI userinfo/password=, MongoDB URI userinfo).
 * Returns buf. */
const char *config_mask_secrets(const char *s, char *buf, size_t buflen);

/* Whether the configuration file at path can be read by every user (S_IROTH) while c holds a password in
 * [mongodb] uri (as written) or [postgres] conninfo (libpq's "password" keyword). When it does, msg receives
 * "PATH is readable by every user and holds a password: chmod 0640 it (owner root, group oplog2pg) or move the
 * password out (see docs/configuration.md)" and the result is true; otherwise msg is "" and the result false
 * (also when path cannot be stat'ed: the load has read it, so that does not happen in practice). */
bool config_secret_exposed(const char *path, const config *c, char *msg, size_t len);

/* The option table. */
size_t config_option_count(void);
const config_option_info *config_option_at(size_t i);
/* Index of [section] name, or -1. Case-insensitive, as in the file. */
int config_option_find(const char *section, const char *name);

const char *config_log_level_name(enum config_log_level level);
const char *config_apply_mode_name(enum config_apply_mode mode);
const char *config_on_error_name(enum config_on_error mode);

#endif

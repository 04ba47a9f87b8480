/*
 * pgerror.c — the PostgreSQL error policy (see pgerror.h).
 *
 * NOTES
 * The table below is the whole policy. An entry is either a class (two characters) or one SQLSTATE; the most
 * specific match wins. Anything not listed is APPLY_RETRY: an error nobody foresaw must never set an op aside, and a
 * retry from the committed checkpoint loses nothing (the log says what happens, every time). It is not retried
 * forever, though: pgerror_listed tells the daemon that nobody foresaw it, and the daemon stops when it fails the
 * same op again and again ([replication] unlisted_error_limit).
 *
 * oplog2pg's own SQL (sink/schema.sql, map/update_functions.sql) raises only SQLSTATEs of its own (O2...) or of class
 * 22, never PL/pgSQL's default P0001: a P0001 met by a data statement comes from a trigger or rule someone put on the
 * table, refusing that op's row.
 */
#include "sink/pgerror.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util/utf8.h"

typedef struct {
    const char *code; /* a class ("22") or a SQLSTATE ("54000") */
    apply_status status;
    const char *why;
} policy_row;

/* clang-format off */
static const policy_row policy[] = {
    /* The op's data. */
    {"22", APPLY_DATA, "data exception: the value cannot be stored (invalid text or JSON, U+0000, out of range, an "
                       "update entry oplog2pg's functions reject)"},
    {"23", APPLY_DATA, "integrity constraint: a constraint on the table refuses the row"},
    {"54000", APPLY_DATA, "program limit exceeded: an index row or a value larger than PostgreSQL allows"},
    {"54001", APPLY_DATA, "statement too complex: a document nested deeper than PostgreSQL's parser allows"},
    {"P0001", APPLY_DATA, "raise_exception: a trigger or rule on the table refuses the row (RAISE EXCEPTION without "
                          "an ERRCODE)"},
    /* A person must act. */
    {"28", APPLY_CONFIG, "the login was refused"},
    {"3D000", APPLY_CONFIG, "the database does not exist"},
    {"57P04", APPLY_CONFIG, "the database was dropped"},
    {"42", APPLY_CONFIG, "syntax error or access rule violation: a table or function oplog2pg uses was changed, or a "
                         "privilege is missing"},
    {"O2FEN", APPLY_FENCED, "another oplog2pg holds the service"},
    {"O2FOR", APPLY_CONFIG, "a table of that name exists and oplog2pg did not make it (for this service)"},
    {"O2MAP", APPLY_CONFIG, "a table does not match its typed map (columns, types or key)"},
    {"O2BAK", APPLY_CONFIG, "the checkpoint would move backwards"},
    {"O2TSO", APPLY_CONFIG, "the time field of a time-series collection is not known"},
    {"O2TSK", APPLY_CONFIG, "a namespace written both as a collection and as a time-series collection"},
    /* Passing faults (listed for the record: the default is the same). */
    {"08", APPLY_RETRY, "connection exception"},
    {"40", APPLY_RETRY, "transaction rollback: deadlock or serialization failure"},
    {"53", APPLY_RETRY, "insufficient resources: disk full, out of memory, too many connections"},
    {"55P03", APPLY_RETRY, "lock not available (lock_timeout)"},
    {"57014", APPLY_RETRY, "query canceled (statement_timeout, or a cancel request)"},
    {"57", APPLY_RETRY, "operator intervention: shutdown, terminated session"},
    {"58", APPLY_RETRY, "system error: I/O"},
    {"25006", APPLY_RETRY, "read-only transaction: connected to a standby"},
    {"25P03", APPLY_RETRY, "idle-in-transaction timeout: the server ended a session that waited too long"},
    {"XX", APPLY_RETRY, "internal error"},
};
/* clang-format on */

static const policy_row *lookup(const char *state)
{
    const policy_row *cls = NULL;
    for (size_t i = 0; i < sizeof policy / sizeof policy[0]; i++) {
        const policy_row *r = &policy[i];
        if (strlen(r->code) == 5 && strncmp(r->code, state, 5) == 0)
            return r;
        if (strlen(r->code) == 2 && cls == NULL && strncmp(r->code, state, 2) == 0)
            cls = r;
    }
    return cls;
}

apply_status pgerror_classify(const char *sqlstate, bool data_statement)
{
    if (sqlstate == NULL || strlen(sqlstate) != 5)
        return APPLY_RETRY;
    const policy_row *r = lookup(sqlstate);
    if (r == NULL)
        return APPLY_RETRY;
    if (r->status == APPLY_DATA && !data_statement) {
        /* Not an op's row: a concurrent CREATE SCHEMA/TABLE meets the catalog's unique index (23505) in a race
         * that a retry wins; anything else in oplog2pg's own statements is for a person to look at. */
        return strcmp(sqlstate, "23505") == 0 ? APPLY_RETRY : APPLY_CONFIG;
    }
    return r->status;
}

bool pgerror_listed(const char *sqlstate)
{
    return sqlstate != NULL && strlen(sqlstate) == 5 && lookup(sqlstate) != NULL;
}

apply_status pgerror_classify_result(PGconn *conn, const PGresult *res, bool data_statement)
{
    if (conn == NULL || PQstatus(conn) == CONNECTION_BAD)
        return APPLY_RETRY;
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    return pgerror_classify(state, data_statement);
}

/* The SQLSTATE in a verbose libpq message ("...FATAL:  28P01: password authentication failed..."). */
static bool find_sqlstate(const char *msg, char *state)
{
    for (const char *p = msg; p && (p = strstr(p, ":  ")) != NULL; p += 3) {
        const char *c = p + 3;
        bool ok = true;
        for (int i = 0; i < 5 && ok; i++)
            ok = isdigit((unsigned char)c[i]) || isupper((unsigned char)c[i]);
        if (ok && c[5] == ':') {
            memcpy(state, c, 5);
            state[5] = '\0';
            return true;
        }
    }
    return false;
}

apply_status pgerror_classify_connect(PGconn *conn, char *state)
{
    char found[6] = "";
    const char *msg = conn ? PQerrorMessage(conn) : "";
    if (conn != NULL && PQconnectionNeedsPassword(conn)) {
        if (state)
            snprintf(state, 6, "28P01");
        return APPLY_CONFIG;
    }
    if (find_sqlstate(msg, found)) {
        if (state)
            memcpy(state, found, 6);
        apply_status st = pgerror_classify(found, false);
        /* At connect time only a refused login is for a person; 57P03 (starting up), 53300 (too many clients)
         * and the like pass. */
        return st == APPLY_CONFIG ? APPLY_CONFIG : APPLY_RETRY;
    }
    if (state)
        state[0] = '\0';
    /* libpq's own refusals of the connection string (invalid option, bad URI) cannot pass by waiting. */
    if (strstr(msg, "invalid connection option") != NULL || strstr(msg, "invalid URI") != NULL ||
        strstr(msg, "invalid integer value") != NULL || strstr(msg, "invalid sslmode value") != NULL)
        return APPLY_CONFIG;
    /* Nor can TLS that fails verification (libpq's fe-secure-openssl.c words these): the server's certificate is not
     * issued by a CA in sslrootcert, or does not name the host; a certificate file cannot be read; the server sent an
     * alert refusing ours. */
    if (pgerror_tls_refused(msg))
        return APPLY_CONFIG;
    return APPLY_RETRY;
}

bool pgerror_tls_refused(const char *msg)
{
    static const char *const texts[] = {
        "certificate verify failed",  /* SSL error: ... (an unknown CA, expired, not yet valid) */
        "does not match host name",   /* server certificate for "X" does not match host name "Y" */
        "root certificate file",      /* ... does not exist, could not read root certificate file */
        "could not open certificate", /* sslcert */
        "could not read certificate", /* sslcert */
        "certificate present, but not private key file",
        "private key file",            /* could not load, has group or world access, does not exist */
        "server does not support SSL", /* ... but SSL was required */
        "alert unknown ca",            /* the server does not know the CA of our certificate */
        "alert bad certificate",
        "alert certificate required",
    };
    for (size_t i = 0; msg != NULL && i < sizeof texts / sizeof texts[0]; i++)
        if (strstr(msg, texts[i]) != NULL)
            return true;
    return false;
}

const char *pgerror_advice(const char *sqlstate)
{
    if (sqlstate == NULL)
        return "";
    if (strcmp(sqlstate, "28P01") == 0)
        return "check the password for [postgres] conninfo (password=, PGPASSWORD or a passfile)";
    if (strncmp(sqlstate, "28", 2) == 0)
        return "check the user name in [postgres] conninfo, that the role exists and may log in, and pg_hba.conf";
    if (strcmp(sqlstate, "3D000") == 0 || strcmp(sqlstate, "57P04") == 0)
        return "check dbname in [postgres] conninfo, or create the database";
    if (strcmp(sqlstate, "42501") == 0)
        return "grant the role oplog2pg connects as what it needs (see docs/operations.md, \"PostgreSQL role\")";
    if (strcmp(sqlstate, "O2FOR") == 0)
        return "oplog2pg writes only tables it made: rename or move that table, or leave the namespace out of "
               "[replication] include";
    if (strcmp(sqlstate, "O2MAP") == 0)
        return "make the table and its map agree (docs/mapping.md, \"Existing tables\")";
    if (strcmp(sqlstate, "O2BAK") == 0)
        return "a commit would have moved the checkpoint backwards; this is a bug, please report it with the log";
    if (strncmp(sqlstate, "42", 2) == 0)
        return "a table, column or function oplog2pg uses is missing or was changed; restore it or resync the "
               "service (--reimport)";
    return "";
}

/* Start of the part of a connection string that may hold a password: the first "password" keyword, or the
 * userinfo of a URI. strlen(conninfo) when there is none. */
static size_t secret_from(const char *conninfo)
{
    size_t n = strlen(conninfo), from = n;
    for (size_t i = 0; i + 8 <= n; i++) {
        if (strncasecmp(conninfo + i, "password", 8) == 0) {
            from = i;
            break;
        }
    }
    const char *scheme = strstr(conninfo, "://");
    if (scheme != NULL) {
        const char *at = strchr(scheme + 3, '@');
        size_t u = (size_t)(scheme + 3 - conninfo);
        if (at != NULL && u < from)
            from = u;
    }
    return from;
}

char *pgerror_message(const char *msg, const char *conninfo, char *out, size_t outlen)
{
    char tmp[2048];
    size_t w = 0;
    size_t sfrom = conninfo ? secret_from(conninfo) : 0;
    const char *secret = conninfo ? conninfo + sfrom : "";
    (void)secret;
    if (outlen == 0)
        return out;
    for (const char *p = msg ? msg : ""; *p && w + 8 < sizeof tmp;) {
        if (strncmp(p, "LOCATION:", 9) == 0 || strncmp(p, "\nLOCATION:", 10) == 0) {
            const char *nl = strchr(p + 1, '\n');
            if (nl == NULL)
                break;
            p = nl;
            continue;
        }
        if (*p == '\n') {
            while (*p == '\n' || *p == '\t' || *p == ' ')
                p++;
            if (*p && strncmp(p, "LOCATION:", 9) != 0) {
                memcpy(tmp + w, "; ", 2);
                w += 2;
            }
            continue;
        }
        if (*p == '"' && conninfo != NULL) {
            const char *end = strchr(p + 1, '"');
            if (end != NULL) {
                size_t len = (size_t)(end - p - 1);
                char token[512];
                if (len > 0 && len < sizeof token) {
                    memcpy(token, p + 1, len);
                    token[len] = '\0';
                    /* Masked when it reaches into the password's part, or cannot be found as it is. */
                    const char *at = strstr(conninfo, token);
                    bool has_secret = secret[0] != '\0';
                    if (has_secret && (at == NULL || (size_t)(at - conninfo) + len > sfrom)) {
                        const char *mask = "\"…\"";
                        size_t ml = strlen(mask);
                        if (w + ml < sizeof tmp) {
                            memcpy(tmp + w, mask, ml);
                            w += ml;
                        }
                        p = end + 1;
                        continue;
                    }
                }
                /* Shown: the whole quoted token as it is (its closing quote must not open another). */
                size_t n = (size_t)(end - p) + 1;
                if (w + n + 8 < sizeof tmp) {
                    memcpy(tmp + w, p, n);
                    w += n;
                }
                p = end + 1;
                continue;
            }
        }
        tmp[w++] = *p++;
    }
    while (w > 0 && (tmp[w - 1] == ' ' || tmp[w - 1] == ';'))
        w--;
    return utf8_sanitize(tmp, w, out, outlen);
}

bool pgerror_check_conninfo(const char *conninfo, char *err, size_t errlen)
{
    char *msg = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo, &msg);
    if (opts != NULL) {
        PQconninfoFree(opts);
        return true;
    }
    char clean[512];
    pgerror_message(msg ? msg : "out of memory", conninfo, clean, sizeof clean);
    snprintf(err, errlen, "not a valid libpq connection string: %s", clean);
    PQfreemem(msg);
    return false;
}

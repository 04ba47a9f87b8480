/*
 * pgerror.h — the one PostgreSQL error policy: what an error from PostgreSQL means for the op that met it.
 *
 * Every libpq error in oplog2pg (the sink, the initial copy, the commands) goes through pgerror_classify, so one
 * table decides between the outcomes of core/status.h:
 *   APPLY_DATA   PostgreSQL refuses the op's own data. Only these SQLSTATEs: class 22 (data exception: a value jsonb
 *                or a column type cannot take, an update entry oplog2pg's SQL functions reject), class 23 (integrity
 *                constraint: a constraint a user put on the table refuses the row), 54000/54001 (program limit: an
 *                index row or a document too large, a document nested too deep), P0001 (a trigger or rule on the
 *                table raised PL/pgSQL's default SQLSTATE). Only data statements (writes of an op's rows) can end
 *                here; the same code from oplog2pg's own statements (BEGIN, checkpoint, DDL plumbing) is not the op's
 *                fault and is treated as below.
 *   APPLY_CONFIG a person must act: authentication and authorisation (class 28, 42501), a database that does not
 *                exist or was dropped (3D000, 57P04), and syntax or undefined-object errors (class 42: someone
 *                changed a table or function oplog2pg uses).
 *   APPLY_FENCED another oplog2pg holds the service (O2FEN, raised by oplog2pg.advance_checkpoint).
 *   APPLY_RETRY  everything else, in particular a broken connection (class 08, or no SQLSTATE at all), a statement
 *                or lock timeout and cancels (57014, 55P03), deadlocks and serialization failures (class 40), full
 *                disks and memory (class 53), server shutdowns (57P01-57P03), read-only standbys (25006), I/O and
 *                internal errors (classes 58, XX). Of these, a SQLSTATE the list does not name (pgerror_listed
 *                false) is one nobody foresaw: the daemon retries it, but not forever on the same op.
 * The list is in pgerror.c, with the reason for each entry; docs/operations.md repeats it for operators.
 */
#ifndef OPLOG2PG_SINK_PGERROR_H
#define OPLOG2PG_SINK_PGERROR_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

/* What a SQLSTATE means. data_statement: the statement wrote an op's rows (insert, update, delete, COPY, an op's
 * DDL); false for oplog2pg's own plumbing, where a data-class error is not the op's fault. NULL = no SQLSTATE (the
 * connection broke, or libpq failed on its own): APPLY_RETRY. */
apply_status pgerror_classify(const char *sqlstate, bool data_statement);

/* Whether the policy names this SQLSTATE (itself or its class); false for NULL and "" (an error without a SQLSTATE,
 * a broken connection, is for the caller to treat as the passing fault it is). */
bool pgerror_listed(const char *sqlstate);

/* The same for a result (NULL result, or a connection gone bad: APPLY_RETRY). */
apply_status pgerror_classify_result(PGconn *conn, const PGresult *res, bool data_statement);

/* A failed connection attempt (made with PQERRORS_VERBOSE, see sink/pgconn.h): APPLY_CONFIG when the server refused
 * the login (authentication, role, database; or a password is needed and none was given) or TLS failed verification
 * (pgerror_tls_refused), APPLY_RETRY otherwise (unreachable, starting up, shutting down, too many connections). The
 * SQLSTATE found in the message, if any, goes to state (6 bytes). */
apply_status pgerror_classify_connect(PGconn *conn, char *state);

/* libpq's message of a failed connection says TLS could not be set up as the connection string asks: the server's
 * certificate failed verification (its CA is not in sslrootcert, it does not name the host), a certificate or key
 * file cannot be used, the server has no TLS while sslmode requires it, or the server refused our certificate. */
bool pgerror_tls_refused(const char *msg);

/* What to tell the operator to do about a SQLSTATE of class APPLY_CONFIG (a sentence, or "" when nothing
 * specific). */
const char *pgerror_advice(const char *sqlstate);

/* Copies a libpq error message for a log line: the trailing newline and the verbose LOCATION line dropped, the
 * lines joined with "; ", invalid UTF-8 made safe, and — when conninfo is given — every quoted token that comes from
 * the part of the connection string holding a password replaced by "…" (libpq quotes pieces of a malformed
 * connection string in its messages). Returns out. */
char *pgerror_message(const char *msg, const char *conninfo, char *out, size_t outlen);

/* Checks a connection string with PQconninfoParse; on failure writes libpq's reason, with the password masked as
 * above, to err. */
bool pgerror_check_conninfo(const char *conninfo, char *err, size_t errlen);

#endif

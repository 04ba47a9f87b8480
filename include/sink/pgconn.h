/*
 * pgconn.h — a libpq connection as oplog2pg uses it, for the sink, the initial copy and the commands alike.
 *
 * - Connecting never hangs: the attempt is non-blocking and gives up after the peer timeout; unless the connection
 *   string sets them itself, TCP keepalives and tcp_user_timeout make the kernel notice a dead peer (one that
 *   vanished without a reset) within that time, idle or busy; the login's SQLSTATE is captured so that a refused
 *   login (exit 3) is told from a server that is merely away (retry).
 * - The connection is non-blocking from then on, and every wait on it goes through pgconn_wait: a poll in slices of
 *   at most a second that calls the owner's wait hook with what it waits for and for how long. The daemon's hook
 *   feeds the systemd watchdog, says in STATUS what PostgreSQL keeps it waiting for, and handles signals, so a long
 *   lock wait is healthy waiting, not a hang the watchdog kills.
 * - Errors come back as a pgconn_error: the class of the one error policy (sink/pgerror.h), the SQLSTATE and a
 *   message cleaned for a log line (no password pieces, valid UTF-8).
 */
#ifndef OPLOG2PG_SINK_PGCONN_H
#define OPLOG2PG_SINK_PGCONN_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/op.h"
#include "core/status.h"

/* Called at least every wait_slice_ms while a call waits on PostgreSQL (from the first slice on). what: "the
 * COMMIT", "the update on shop.orders", "the connection", ... Returns true to go on waiting; false gives the wait up
 * (the call then fails as passing: APPLY_RETRY), which the daemon does with a connection attempt once it is
 * stopping. */
typedef bool (*pgconn_wait_fn)(void *arg, const char *what, double waited_s);

typedef struct {
    const char *conninfo;     /* libpq conninfo or URI (copied) */
    const char *app_name;     /* fallback_application_name */
    int peer_timeout_s;       /* connect timeout and dead-peer detection; 0 = 30 */
    pgconn_wait_fn wait_hook; /* may be NULL */
    void *wait_arg;
    int wait_slice_ms; /* the hook runs at least this often while waiting; 0 = 1000 */
} pgconn_params;

typedef struct {
    apply_status status; /* APPLY_OK when nothing failed */
    char sqlstate[6];    /* "" when PostgreSQL gave none */
    char message[880];
} pgconn_error;

typedef struct pgconn {
    PGconn *pg;
    pgconn_params p;
    char *conninfo;    /* owned copy */
    pgconn_error last; /* the last failure of pgconn_exec/pgconn_exec_params, whatever err was passed */
    char goodbye[300]; /* a FATAL the server sent outside any query (it is about to close the connection) */
    bool abandoned;    /* the wait hook gave a wait up */
} pgconn;

/* Connects (see above). NULL with err set on failure: APPLY_CONFIG for a refused login or a bad connection string,
 * APPLY_RETRY for everything a later attempt may cure, APPLY_NOMEM. */
pgconn *pgconn_connect(const pgconn_params *params, pgconn_error *err);
void pgconn_close(pgconn *c);
/* Asks the server to cancel what the connection runs now (it then fails with 57014, a passing error). False with
 * the reason in err when the request could not be sent. */
bool pgconn_cancel(pgconn *c, char *err, size_t errlen);

/* Waits until the socket is readable (or also writable, for_write), a wait slice ends, or the connection fails;
 * calls the hook when the wait, counted from `since` (clock_s), has lasted a slice or more. False when poll itself
 * fails. */
bool pgconn_wait(pgconn *c, bool for_write, const char *what, double since);

/* Sends what libpq holds, waiting as needed. False (err set) when the connection broke. */
bool pgconn_flush(pgconn *c, const char *what, pgconn_error *err);

/* The next result of the current query, waiting as needed; NULL when there are no more (or the connection broke:
 * check PQstatus). */
PGresult *pgconn_next_result(pgconn *c, const char *what);

/* Runs one statement and reads all its results. True when the last one is COMMAND_OK or TUPLES_OK; *out (may be
 * NULL) then receives that result (PQclear it). On failure err holds the class (data_statement as for
 * pgerror_classify) and the message. */
bool pgconn_exec(pgconn *c, const char *sql, PGresult **out, bool data_statement, pgconn_error *err);
bool pgconn_exec_params(pgconn *c, const char *sql, int n, const char *const *values, const int *lengths,
                        const int *formats, int result_format, PGresult **out, bool data_statement, pgconn_error *err);

/* COPY FROM STDIN in pieces: start with the COPY statement, put data (libpq's buffer is flushed whenever it fills,
 * so memory stays bounded), end and read the outcome. */
bool pgconn_copy_start(pgconn *c, const char *sql, pgconn_error *err);
bool pgconn_copy_put(pgconn *c, const char *data, size_t len, pgconn_error *err);
bool pgconn_copy_end(pgconn *c, pgconn_error *err);

/* Fills err from a result (or from the connection when res is NULL). */
void pgconn_set_error(pgconn *c, const PGresult *res, bool data_statement, pgconn_error *err, const char *context);
void pgconn_error_clear(pgconn_error *err);

/* An oplog position stored as three columns (seconds, increment, term; a NULL term is -1) of a text-format result,
 * from column col of row: the checkpoint's and the copy state's. */
void sink_row_pos(const PGresult *res, int row, int col, op_pos *out);

#endif

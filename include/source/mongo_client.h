/*
 * mongo_client.h — a libmongoc client as oplog2pg makes it, and what a MongoDB error means to it.
 *
 * Every part that talks to MongoDB (the oplog reader, the initial copy, the start-up reads, `check` and `status`)
 * opens its client here: error API version 2, an application name that says which part it is (unless the URI names
 * one), and the reader's own options. The one classification of MongoDB errors lives here too: a refused login or
 * missing role is the operator's to fix; the network, elections and killed cursors pass with a retry.
 */
#ifndef OPLOG2PG_SOURCE_MONGO_CLIENT_H
#define OPLOG2PG_SOURCE_MONGO_CLIENT_H

#include <mongoc/mongoc.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *appname;       /* "oplog2pg", "oplog2pg-copy", ...; the URI's appName wins */
    int32_t socket_timeout_ms; /* > 0: socketTimeoutMS unless the URI sets it */
    bool no_retry_reads;       /* retryReads=false (the reader recovers by itself: a retried getMore could skip) */
    int32_t server_selection_timeout_ms; /* > 0: serverSelectionTimeoutMS unless the URI sets it */
} mongo_client_opts;

/* A client for uri, or NULL with the reason in err (a URI that does not parse, a client libmongoc refuses). */
mongoc_client_t *mongo_client_open(const char *uri, const mongo_client_opts *opts, char *err, size_t errlen);

/* MongoDB refused the login or the role lacks a privilege (Unauthorized 13, AuthenticationFailed 18, or the driver's
 * authentication failure), or the server's TLS certificate failed verification (mongo_error_tls): a person must act,
 * retrying will not help. */
bool mongo_error_refused(const bson_error_t *e);

/* The server's TLS certificate failed verification (an unknown CA, a host name it does not name, expired): libmongoc
 * reports it only in the text of a stream or server-selection error ("TLS handshake failed: certificate verify
 * failed (N): REASON"). */
bool mongo_error_tls(const bson_error_t *e);

/* An error that a later attempt may not meet: the network, server selection, elections and stepdowns, shutdowns,
 * killed or timed-out cursors. */
bool mongo_error_retryable(const bson_error_t *e);

/* The network failed (for messages). */
bool mongo_error_network(const bson_error_t *e);

#endif

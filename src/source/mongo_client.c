/*
 * mongo_client.c — see mongo_client.h.
 */
#include "source/mongo_client.h"

#include <string.h>

#include <stdio.h>

mongoc_client_t *mongo_client_open(const char *uri_text, const mongo_client_opts *opts, char *err, size_t errlen)
{
    bson_error_t e;
    mongoc_uri_t *uri = mongoc_uri_new_with_error(uri_text, &e);
    if (uri == NULL) {
        snprintf(err, errlen, "bad MongoDB URI: %.400s", e.message);
        return NULL;
    }
    if (opts != NULL && opts->appname != NULL && mongoc_uri_get_appname(uri) == NULL)
        mongoc_uri_set_appname(uri, opts->appname);
    if (opts != NULL && opts->no_retry_reads)
        mongoc_uri_set_option_as_bool(uri, MONGOC_URI_RETRYREADS, false);
    if (opts != NULL && opts->socket_timeout_ms > 0 && !mongoc_uri_has_option(uri, MONGOC_URI_SOCKETTIMEOUTMS))
        mongoc_uri_set_option_as_int32(uri, MONGOC_URI_SOCKETTIMEOUTMS, opts->socket_timeout_ms);
    if (opts != NULL && opts->server_selection_timeout_ms > 0 &&
        !mongoc_uri_has_option(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS))
        mongoc_uri_set_option_as_int32(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS, opts->server_selection_timeout_ms);
    mongoc_client_t *c = mongoc_client_new_from_uri_with_error(uri, &e);
    mongoc_uri_destroy(uri);
    if (c == NULL) {
        snprintf(err, errlen, "cannot create a MongoDB client: %.400s", e.message);
        return NULL;
    }
    mongoc_client_set_error_api(c, MONGOC_ERROR_API_VERSION_2);
    return c;
}

static bool server_error(const bson_error_t *e)
{
    return e->domain == MONGOC_ERROR_SERVER || e->domain == MONGOC_ERROR_QUERY ||
           e->domain == MONGOC_ERROR_WRITE_CONCERN;
}

bool mongo_error_tls(const bson_error_t *e)
{
    /* libmongoc's OpenSSL stream (mongoc-stream-tls-openssl.c) words a failed verification this way; server selection
     * copies it into its own message. No error code tells it apart from a network failure. */
    return (e->domain == MONGOC_ERROR_STREAM || e->domain == MONGOC_ERROR_SERVER_SELECTION) &&
           strstr(e->message, "TLS handshake failed: certificate verify failed") != NULL;
}

bool mongo_error_refused(const bson_error_t *e)
{
    return (server_error(e) && (e->code == 13 || e->code == 18)) ||
           (e->domain == MONGOC_ERROR_CLIENT && e->code == MONGOC_ERROR_CLIENT_AUTHENTICATE) || mongo_error_tls(e);
}

bool mongo_error_network(const bson_error_t *e)
{
    return e->domain == MONGOC_ERROR_STREAM || e->domain == MONGOC_ERROR_SERVER_SELECTION ||
           e->domain == MONGOC_ERROR_PROTOCOL;
}

bool mongo_error_retryable(const bson_error_t *e)
{
    if (!server_error(e))
        return mongo_error_network(e) || (e->domain == MONGOC_ERROR_CLIENT && !mongo_error_refused(e)) ||
               e->domain == MONGOC_ERROR_CURSOR;
    /* Server codes (the names are MongoDB's, src/mongo/base/error_codes.yml in mongodb/mongo). */
    switch (e->code) {
    case 6:     /* HostUnreachable */
    case 7:     /* HostNotFound */
    case 43:    /* CursorNotFound */
    case 89:    /* NetworkTimeout */
    case 91:    /* ShutdownInProgress */
    case 175:   /* QueryPlanKilled */
    case 189:   /* PrimarySteppedDown */
    case 237:   /* CursorKilled */
    case 262:   /* ExceededTimeLimit */
    case 9001:  /* SocketException */
    case 10107: /* NotWritablePrimary */
    case 11600: /* InterruptedAtShutdown */
    case 11602: /* InterruptedDueToReplStateChange */
    case 13435: /* NotPrimaryNoSecondaryOk */
    case 13436: /* NotPrimaryOrSecondary */
        return true;
    default:
        return false;
    }
}

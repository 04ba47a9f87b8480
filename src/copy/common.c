/*
 * common.c — the initial copy's connections and small helpers (see copy_internal.h).
 */
#include "copy_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "map/ejson.h"
#include "sink/pg.h"
#include "source/mongo_client.h"

/* ---------------------------------------------------------------------------------------------------------------- */
/* small utilities */

void copy_trim_nl(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' '))
        s[--n] = '\0';
}

bool copy_skip_namespace(const nsfilter *f, const char *db, const char *coll)
{
    return ns_is_internal(db, strlen(db), coll, strlen(coll)) || (f != NULL && !nsfilter_match(f, db, coll));
}

/* The _id of a {_id: v} BSON as relaxed Extended JSON, for messages ("(none)" before the first batch). */
void copy_id_text(const uint8_t *bson, uint32_t len, char *buf, size_t buflen)
{
    bson_t b;
    bson_iter_t it;
    if (bson == NULL || !bson_init_static(&b, bson, len) || !bson_iter_init_find(&it, &b, "_id")) {
        snprintf(buf, buflen, "(none)");
        return;
    }
    char *j = ejson_value(bson_iter_value(&it));
    snprintf(buf, buflen, "%s", j ? j : "(unprintable)");
    free(j);
}
/* The shared libpq layer (sink/pgconn.h) under the names of the calls it replaces: a result, or NULL with the
 * error (its class from the one policy, sink/pgerror.h) in pg->last. */
PGresult *copy_query_params(pgconn *pg, const char *sql, int n, const char *const *values, const int *lengths,
                            const int *formats, int result_format)
{
    PGresult *r = NULL;
    pgconn_exec_params(pg, sql, n, values, lengths, formats, result_format, &r, false, &pg->last);
    return r;
}

PGresult *copy_query(pgconn *pg, const char *sql)
{
    return copy_query_params(pg, sql, 0, NULL, NULL, NULL, 0);
}

const char *copy_pg_error(const pgconn *pg)
{
    return pg->last.message;
}

/* Whether the last failure on pg may pass by itself (the one policy: only APPLY_RETRY and APPLY_NOMEM do). */
bool copy_pg_retryable(const pgconn *pg)
{
    return pg->last.status == APPLY_RETRY || pg->last.status == APPLY_NOMEM;
}

bool copy_pg_exec(pgconn *pg, const char *sql, char *err, size_t errlen, bool *retryable)
{
    PGresult *r = copy_query(pg, sql);
    if (r != NULL) {
        PQclear(r);
        return true;
    }
    if (retryable)
        *retryable = copy_pg_retryable(pg);
    snprintf(err, errlen, "%s", copy_pg_error(pg));
    return false;
}

/* Connects; on failure err says why and *fault (may be NULL) holds the class (APPLY_CONFIG: a refused login). */
pgconn *copy_pg_connect(const char *conninfo, int peer_timeout_s, pgconn_wait_fn hook, void *hook_arg, char *err,
                        size_t errlen, apply_status *fault)
{
    pgconn_params pp = {.conninfo = conninfo,
                        .app_name = "oplog2pg-copy",
                        .peer_timeout_s = peer_timeout_s,
                        .wait_hook = hook,
                        .wait_arg = hook_arg};
    pgconn_error e;
    pgconn *pg = pgconn_connect(&pp, &e);
    if (pg == NULL) {
        snprintf(err, errlen, "%s", e.message);
        if (fault != NULL)
            *fault = e.status;
        return NULL;
    }
    copy_pg_exec(pg, "SET client_min_messages = warning", err, errlen, NULL);
    return pg;
}

mongoc_client_t *copy_mongo_connect(const char *uri, char *err, size_t errlen)
{
    mongo_client_opts o = {.appname = "oplog2pg-copy"};
    return mongo_client_open(uri, &o, err, errlen);
}

bool copy_stopping(run_ctx *rc)
{
    return atomic_load(&rc->stop) || (rc->cfg->cancel != NULL && atomic_load(rc->cfg->cancel));
}

void copy_run_fail(run_ctx *rc, copy_result r, const char *msg)
{
    pthread_mutex_lock(&rc->mu);
    if (rc->result == COPY_DONE) {
        rc->result = r;
        snprintf(rc->err, sizeof rc->err, "%.*s", (int)sizeof rc->err - 1, msg);
    }
    pthread_mutex_unlock(&rc->mu);
    atomic_store(&rc->stop, true);
}

pgconn *copy_pg_open(const char *conninfo, int peer_timeout_s, char *err, size_t errlen, apply_status *fault)
{
    pgconn *pg = copy_pg_connect(conninfo, peer_timeout_s, NULL, NULL, err, errlen, fault);
    if (pg == NULL)
        return NULL;
    pgconn_error ie;
    if (sink_install_schema(pg, &ie))
        return pg;
    snprintf(err, errlen, "installing the oplog2pg schema: %s", ie.message);
    if (fault != NULL)
        *fault = ie.status;
    pgconn_close(pg);
    return NULL;
}

/*
 * note.c — the oplog-note writer of one shard (see source/shards/note.h).
 *
 * NOTES
 * - One mutex guards the request state (pending, the newest time asked for) and the stats; the thread never holds
 *   it during a round trip, so noter_request only ever waits for a few assignments.
 * - Coalescing: a request sets `pending`; the thread takes every pending request at once (clears the flag) and
 *   writes one note. Requests that come during the round trip set it again: one more note after it, not one each.
 * - A refusal is terminal: `refused` is set, the pending request dropped, and the thread only waits for the stop.
 */
#include "source/shards/note.h"

#include <inttypes.h>
#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/mongo_client.h"
#include "util/log.h"

#define NOTE_SOCKET_TIMEOUT_MS    10000
#define NOTE_SELECTION_TIMEOUT_MS 5000

struct noter {
    char *uri, *shard, *service;
    mongoc_client_t *client; /* the thread's */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* ---- under mu ---- */
    bool stop;
    bool pending;
    bool has_past;
    op_pos past; /* the newest time asked for since the last note */
    noter_stats st;
};

static bool refusal(const bson_error_t *e)
{
    bool server = e->domain == MONGOC_ERROR_SERVER || e->domain == MONGOC_ERROR_QUERY;
    return mongo_error_refused(e) || (server && e->code == 59); /* CommandNotFound */
}

/* Sends one note; returns with the outcome recorded in the stats (under mu). */
static void write_note(noter *n, bool has_past, const op_pos *past)
{
    bson_t cmd = BSON_INITIALIZER, data, wc, opts = BSON_INITIALIZER, reply;
    bson_error_t e;
    char msg[160];
    if (has_past)
        snprintf(msg, sizeof msg, "oplog2pg: past %u:%u for the merge of the shards", past->secs, past->inc);
    else
        snprintf(msg, sizeof msg, "oplog2pg: a note for the merge of the shards");
    BSON_APPEND_INT32(&cmd, "appendOplogNote", 1);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "data", &data);
    BSON_APPEND_UTF8(&data, "msg", msg);
    BSON_APPEND_UTF8(&data, "shard", n->shard);
    if (n->service)
        BSON_APPEND_UTF8(&data, "service", n->service);
    bson_append_document_end(&cmd, &data);
    /* Written only when the shard's newest entry is before that time (oplog_note.cpp): a shard already past it shows
     * its reader an entry there anyway. */
    if (has_past)
        BSON_APPEND_TIMESTAMP(&cmd, "maxClusterTime", past->secs, past->inc);
    /* w: 1 even when the URI asks for more (note.h says why). */
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "writeConcern", &wc);
    BSON_APPEND_INT32(&wc, "w", 1);
    bson_append_document_end(&opts, &wc);
    bool ok = mongoc_client_write_command_with_opts(n->client, "admin", &cmd, &opts, &reply, &e);
    bson_destroy(&cmd);
    bson_destroy(&opts);
    op_pos at = {.secs = 0, .inc = 0, .term = -1};
    bool has_at = false;
    bson_iter_t it;
    if (ok && bson_iter_init_find(&it, &reply, "operationTime") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        bson_iter_timestamp(&it, &at.secs, &at.inc);
        has_at = true;
    }
    bson_destroy(&reply);

    bool log_refusal = false;
    pthread_mutex_lock(&n->mu);
    if (ok) {
        n->st.written++;
        if (has_at) {
            n->st.last = at;
            n->st.has_last = true;
        }
    } else {
        n->st.failures++;
        snprintf(n->st.last_error, sizeof n->st.last_error, "%.200s (code %u)", e.message, e.code);
        if (refusal(&e) && !n->st.refused) {
            n->st.refused = true;
            n->pending = false;
            log_refusal = true;
        }
    }
    pthread_mutex_unlock(&n->mu);
    if (log_refusal)
        log_warning("shard %s: appendOplogNote refused (%s, code %u): the merge waits for this shard's periodic noop "
                    "when it is idle (10 s by default) instead of a note; grant the appendOplogNote privilege (the "
                    "clusterManager role) to the user to bound that wait",
                    n->shard, e.message, e.code);
    else if (!ok)
        log_debug("shard %s: appendOplogNote failed (%s, code %u): tried again at the next request", n->shard,
                  e.message, e.code);
}

static void *noter_main(void *arg)
{
    noter *n = arg;
    pthread_setname_np(pthread_self(), "o2p-noter");
    pthread_mutex_lock(&n->mu);
    for (;;) {
        while (!n->stop && (!n->pending || n->st.refused))
            pthread_cond_wait(&n->cv, &n->mu);
        if (n->stop)
            break;
        bool has_past = n->has_past;
        op_pos past = n->past;
        n->pending = false;
        n->has_past = false;
        n->st.attempts++;
        pthread_mutex_unlock(&n->mu);
        write_note(n, has_past, &past);
        pthread_mutex_lock(&n->mu);
    }
    pthread_mutex_unlock(&n->mu);
    return NULL;
}

noter *noter_start(const noter_config *cfg, char *err, size_t errlen)
{
    noter *n = calloc(1, sizeof *n);
    if (!n) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    n->uri = strdup(cfg->uri ? cfg->uri : "");
    n->shard = strdup(cfg->shard ? cfg->shard : "");
    n->service = cfg->service ? strdup(cfg->service) : NULL;
    if (!n->uri || !n->shard || (cfg->service && !n->service)) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    mongo_client_opts mo = {.appname = "oplog2pg-note",
                            .socket_timeout_ms = NOTE_SOCKET_TIMEOUT_MS,
                            .server_selection_timeout_ms = NOTE_SELECTION_TIMEOUT_MS};
    n->client = mongo_client_open(n->uri, &mo, err, errlen);
    if (!n->client)
        goto fail;
    pthread_mutex_init(&n->mu, NULL);
    pthread_cond_init(&n->cv, NULL);
    int rc = pthread_create(&n->thread, NULL, noter_main, n);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the oplog-note thread of shard %s: %s", n->shard, strerror(rc));
        pthread_cond_destroy(&n->cv);
        pthread_mutex_destroy(&n->mu);
        goto fail;
    }
    return n;
fail:
    if (n->client)
        mongoc_client_destroy(n->client);
    free(n->uri);
    free(n->shard);
    free(n->service);
    free(n);
    return NULL;
}

void noter_request(noter *n, const op_pos *past)
{
    pthread_mutex_lock(&n->mu);
    n->st.requests++;
    if (!n->st.refused) {
        if (past && (!n->has_past || op_pos_cmp(past, &n->past) > 0)) {
            n->past = *past;
            n->has_past = true;
        }
        if (!n->pending) {
            n->pending = true;
            pthread_cond_signal(&n->cv);
        }
    }
    pthread_mutex_unlock(&n->mu);
}

bool noter_refused(const noter *n)
{
    noter *m = (noter *)n; /* the mutex, not the state, changes */
    pthread_mutex_lock(&m->mu);
    bool r = m->st.refused;
    pthread_mutex_unlock(&m->mu);
    return r;
}

void noter_get_stats(const noter *n, noter_stats *out)
{
    noter *m = (noter *)n;
    pthread_mutex_lock(&m->mu);
    *out = m->st;
    pthread_mutex_unlock(&m->mu);
}

void noter_free(noter *n)
{
    if (!n)
        return;
    pthread_mutex_lock(&n->mu);
    n->stop = true;
    pthread_cond_signal(&n->cv);
    pthread_mutex_unlock(&n->mu);
    pthread_join(n->thread, NULL);
    pthread_cond_destroy(&n->cv);
    pthread_mutex_destroy(&n->mu);
    mongoc_client_destroy(n->client);
    free(n->uri);
    free(n->shard);
    free(n->service);
    free(n);
}

/*
 * metrics.c — see metrics.h: the Prometheus text rendering (exposition format 0.0.4) and the HTTP endpoint
 * (libmicrohttpd, one internal polling thread).
 *
 * NOTES. The apply loop publishes a whole snapshot under a mutex; a scrape copies it under the same mutex and renders
 * the copy outside it, so the loop never waits for a slow client. The listening socket is opened here (getaddrinfo,
 * bind, listen) and handed to libmicrohttpd, so a bind failure names the address and the OS error.
 */
#include "daemon/metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/batcher.h"
#include "util/dtoa.h"
#include "util/log.h"

_Static_assert((int)METRICS_FLUSH_TRIGGERS == (int)FLUSH_TRIGGERS, "the flush labels are core/batcher.h's names");

bool metrics_parse_listen(const char *listen, char *host, size_t hostlen, int *port, char *err, size_t errlen)
{
    const char *colon, *h = listen;
    size_t hl;
    if (listen[0] == '[') {
        const char *close = strchr(listen, ']');
        if (close == NULL || close[1] != ':') {
            snprintf(err, errlen, "\"%s\": an IPv6 address is written [ADDRESS]:PORT", listen);
            return false;
        }
        h = listen + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(listen, ':');
        if (colon == NULL || strchr(listen, ':') != colon) {
            snprintf(err, errlen, "\"%s\" is not HOST:PORT (e.g. 127.0.0.1:9187; IPv6 as [::1]:9187)", listen);
            return false;
        }
        hl = (size_t)(colon - listen);
    }
    if (hl == 0 || hl >= hostlen) {
        snprintf(err, errlen, "\"%s\": the host is missing or too long", listen);
        return false;
    }
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || p < 0 || p > 65535) {
        snprintf(err, errlen, "\"%s\": the port must be a number from 0 to 65535", listen);
        return false;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (int)p;
    return true;
}

/* ---- rendering --------------------------------------------------------------------------------------------------- */

static const char *const op_kind_label[METRICS_OP_KINDS] = {"insert", "update", "delete", "ddl", "noop"};
static const char *const method_label[METRICS_WRITE_METHODS] = {"copy", "insert", "update", "delete"};

/* The fewest digits that read back as the same double, laid out as %.15g would (dtoa_g); NaN and the infinities in
 * Prometheus spelling. */
static void format_double(char buf[DTOA_G_SIZE], double v)
{
    if (isnan(v))
        snprintf(buf, DTOA_G_SIZE, "NaN");
    else if (isinf(v))
        snprintf(buf, DTOA_G_SIZE, v > 0 ? "+Inf" : "-Inf");
    else
        dtoa_g(v, 15, buf);
}

/* A label value with backslash, double quote and newline escaped, as the text format requires. At most max bytes of
 * s are read (service is a fixed array the caller may have filled to the brim). */
static void put_label_value(FILE *f, const char *s, size_t max)
{
    for (size_t i = 0; i < max && s[i] != '\0'; i++) {
        switch (s[i]) {
        case '\\':
            fputs("\\\\", f);
            break;
        case '"':
            fputs("\\\"", f);
            break;
        case '\n':
            fputs("\\n", f);
            break;
        default:
            fputc(s[i], f);
            break;
        }
    }
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample_u64(FILE *f, const char *name, const char *label, const char *value_label, uint64_t v)
{
    if (label != NULL)
        fprintf(f, "%s{%s=\"%s\"} %" PRIu64 "\n", name, label, value_label, v);
    else
        fprintf(f, "%s %" PRIu64 "\n", name, v);
}

static void counter(FILE *f, const char *name, const char *help, uint64_t v)
{
    family(f, name, "counter", help);
    sample_u64(f, name, NULL, NULL, v);
}

/* A counter family with one sample per label value. */
static void counter_by(FILE *f, const char *name, const char *help, const char *label, const char *const *values,
                       const uint64_t *v, size_t n)
{
    family(f, name, "counter", help);
    for (size_t i = 0; i < n; i++)
        sample_u64(f, name, label, values[i], v[i]);
}

static void gauge_u64(FILE *f, const char *name, const char *help, uint64_t v)
{
    family(f, name, "gauge", help);
    sample_u64(f, name, NULL, NULL, v);
}

static void gauge_i64(FILE *f, const char *name, const char *help, int64_t v)
{
    family(f, name, "gauge", help);
    fprintf(f, "%s %" PRId64 "\n", name, v);
}

static void gauge_double(FILE *f, const char *name, const char *help, double v)
{
    char num[DTOA_G_SIZE];
    format_double(num, v);
    family(f, name, "gauge", help);
    fprintf(f, "%s %s\n", name, num);
}

/* One sample per shard of a sharded cluster, labelled shard="ID" (escaped as the exposition format asks). */
static void shard_sample(FILE *f, const char *name, const char *id, double v)
{
    char num[DTOA_G_SIZE];
    format_double(num, v);
    fprintf(f, "%s{shard=\"", name);
    for (const char *c = id; *c; c++) {
        if (*c == '\\' || *c == '"')
            fprintf(f, "\\%c", *c);
        else if (*c == '\n')
            fputs("\\n", f);
        else
            fputc(*c, f);
    }
    fprintf(f, "\"} %s\n", num);
}

#define WINDOW_HELP                                                                                                    \
    "Time between the oldest and the newest entry of the oplog (each shard's in a sharded cluster), read every "       \
    "[metrics] oplog_window_interval; absent when unknown (a change stream has no oplog to read)."
#define MARGIN_HELP                                                                                                    \
    "How far the oldest entry still needed (the checkpoint, or the first entry of a transaction open there) is "       \
    "from falling off the oplog, in seconds; negative: it has fallen off. Absent when unknown."

/* The oplog window and margin of a replica set: unlabelled, and only what is known (no sample at all otherwise). */
static void render_window(FILE *f, const metrics_snapshot *s)
{
    if (s->window_known)
        gauge_double(f, "oplog2pg_oplog_window_seconds", WINDOW_HELP, s->window_seconds);
    if (s->margin_known)
        gauge_double(f, "oplog2pg_oplog_margin_seconds", MARGIN_HELP, s->margin_seconds);
}

/* The same for each shard whose figure is known, labelled shard="ID"; no family when no shard's is. */
static void render_shard_windows(FILE *f, const metrics_snapshot *s, size_t n)
{
    bool window = false, margin = false;
    for (size_t i = 0; i < n; i++) {
        window = window || s->shards[i].window_known;
        margin = margin || s->shards[i].margin_known;
    }
    if (window)
        family(f, "oplog2pg_oplog_window_seconds", "gauge", WINDOW_HELP);
    for (size_t i = 0; window && i < n; i++)
        if (s->shards[i].window_known)
            shard_sample(f, "oplog2pg_oplog_window_seconds", s->shards[i].id, s->shards[i].window_seconds);
    if (margin)
        family(f, "oplog2pg_oplog_margin_seconds", "gauge", MARGIN_HELP);
    for (size_t i = 0; margin && i < n; i++)
        if (s->shards[i].margin_known)
            shard_sample(f, "oplog2pg_oplog_margin_seconds", s->shards[i].id, s->shards[i].margin_seconds);
}

static void render_shards(FILE *f, const metrics_snapshot *s)
{
    if (s->nshards == 0)
        return;
    size_t n = s->nshards < METRICS_MAX_SHARDS ? s->nshards : METRICS_MAX_SHARDS;
    family(f, "oplog2pg_shard_checkpoint_timestamp_seconds", "gauge",
           "A sharded cluster: oplog time of each shard's committed checkpoint since the UNIX epoch in seconds.");
    for (size_t i = 0; i < n; i++)
        shard_sample(f, "oplog2pg_shard_checkpoint_timestamp_seconds", s->shards[i].id,
                     s->shards[i].checkpoint_timestamp);
    family(
        f, "oplog2pg_shard_read_timestamp_seconds", "gauge",
        "A sharded cluster: oplog time of the last entry each shard's reader read, since the UNIX epoch in seconds.");
    for (size_t i = 0; i < n; i++)
        shard_sample(f, "oplog2pg_shard_read_timestamp_seconds", s->shards[i].id, s->shards[i].read_timestamp);
    family(f, "oplog2pg_shard_lag_seconds", "gauge",
           "A sharded cluster: how far each shard's committed checkpoint is behind what its reader read, in seconds.");
    for (size_t i = 0; i < n; i++) {
        double lag = s->shards[i].read_timestamp - s->shards[i].checkpoint_timestamp;
        shard_sample(f, "oplog2pg_shard_lag_seconds", s->shards[i].id,
                     s->shards[i].checkpoint_timestamp > 0 && lag > 0 ? lag : 0);
    }
    family(f, "oplog2pg_shard_merge_wait_seconds_total", "counter",
           "A sharded cluster: how long the merge of the shards waited on each shard to show it had nothing older.");
    for (size_t i = 0; i < n; i++)
        shard_sample(f, "oplog2pg_shard_merge_wait_seconds_total", s->shards[i].id, s->shards[i].merge_wait_seconds);
    family(f, "oplog2pg_shard_entries_total", "counter",
           "A sharded cluster: each shard's oplog entries handed on by the merge to the applier.");
    for (size_t i = 0; i < n; i++)
        shard_sample(f, "oplog2pg_shard_entries_total", s->shards[i].id, (double)s->shards[i].entries);
    family(
        f, "oplog2pg_shard_notes_total", "counter",
        "A sharded cluster: oplog notes (appendOplogNote) written into each shard so an idle one holds nothing back.");
    for (size_t i = 0; i < n; i++)
        shard_sample(f, "oplog2pg_shard_notes_total", s->shards[i].id, (double)s->shards[i].notes);
    family(f, "oplog2pg_shard_notes_refused", "gauge",
           "A sharded cluster: 1 when a shard refused appendOplogNote (the privilege); it is then waited for until its "
           "periodic noop.");
    for (size_t i = 0; i < n; i++)
        shard_sample(f, "oplog2pg_shard_notes_refused", s->shards[i].id, s->shards[i].notes_refused ? 1 : 0);
    render_shard_windows(f, s, n);
}

char *metrics_render(const metrics_snapshot *s, size_t *len)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (f == NULL)
        return NULL;

    family(f, "oplog2pg_info", "gauge", "Build and instance information; always 1.");
    fputs("oplog2pg_info{service=\"", f);
    put_label_value(f, s->service, sizeof s->service);
    fputs("\",version=\"", f);
    put_label_value(f, OPLOG2PG_VERSION, SIZE_MAX);
    fputs("\"} 1\n", f);
    gauge_u64(f, "oplog2pg_ready",
              "1 when connected to both sides and applying; 0 while starting, copying or "
              "reconnecting.",
              s->ready ? 1 : 0);
    gauge_double(f, "oplog2pg_start_time_seconds", "Start time of the process since the UNIX epoch in seconds.",
                 s->start_time);
    counter(f, "oplog2pg_entries_applied_total", "Oplog entries applied to PostgreSQL.", s->entries_applied);
    counter_by(f, "oplog2pg_ops_applied_total", "Applied operations by kind.", "kind", op_kind_label, s->ops_applied,
               METRICS_OP_KINDS);
    const char *trigger_label[METRICS_FLUSH_TRIGGERS];
    for (int t = 0; t < METRICS_FLUSH_TRIGGERS; t++)
        trigger_label[t] = flush_trigger_name((flush_trigger)t);
    counter_by(f, "oplog2pg_flushes_total", "Batches flushed to PostgreSQL, by what triggered the flush.", "trigger",
               trigger_label, s->flushes, METRICS_FLUSH_TRIGGERS);
    counter(f, "oplog2pg_commits_total", "PostgreSQL transactions committed.", s->commits);
    counter_by(f, "oplog2pg_rows_written_total", "Rows written to PostgreSQL, by method.", "method", method_label,
               s->rows_written, METRICS_WRITE_METHODS);
    counter(f, "oplog2pg_bytes_written_total", "Document bytes sent to PostgreSQL.", s->bytes_written);
    counter(f, "oplog2pg_duplicate_fallbacks_total", "COPY runs re-sent as upserts after a duplicate _id.",
            s->dup_fallbacks);
    counter(f, "oplog2pg_rewinds_total",
            "Flush groups applied again from the checkpoint because an insert met a duplicate _id where none was "
            "expected (a COPY that had let go of its rows, or a plain INSERT).",
            s->rewinds);
    counter(f, "oplog2pg_statements_unnamed_total",
            "Statements sent unnamed, parsed and planned once, because the connection held its bound of prepared "
            "ones.",
            s->unnamed);
    counter(f, "oplog2pg_dead_letters_total", "Operations set aside in oplog2pg.dead_letter.", s->dead_letters);
    counter(f, "oplog2pg_timeseries_bucket_changes_total",
            "Time-series bucket changes applied (an insert, update or delete of a bucket).", s->ts_bucket_ops);
    counter(f, "oplog2pg_timeseries_measurements_written_total",
            "Measurement rows the bucket changes wrote (new places, and places whose measurement changed).",
            s->ts_rows);
    counter(f, "oplog2pg_timeseries_bucket_reads_total",
            "Bucket documents read back from oplog2pg.timeseries_bucket (not held in memory when a change came).",
            s->ts_bucket_reads);
    counter(f, "oplog2pg_delete_reconciliations_total",
            "Delete reconciliations run ([mongodb] delete_reconcile: a server whose change streams send no deletes).",
            s->reconcile_passes);
    counter(f, "oplog2pg_reconciled_deletes_total",
            "Rows deleted by the delete reconciliation: their _id no longer exists in MongoDB.", s->reconcile_deleted);
    family(f, "oplog2pg_reconnects_total", "counter", "Reconnections, by side.");
    sample_u64(f, "oplog2pg_reconnects_total", "side", "postgres", s->pg_reconnects);
    sample_u64(f, "oplog2pg_reconnects_total", "side", "mongodb", s->mongo_reconnects);
    gauge_u64(f, "oplog2pg_queue_depth", "Operations waiting between the oplog reader and the applier.",
              s->queue_depth);
    gauge_u64(f, "oplog2pg_queue_capacity", "Capacity of the queue between the oplog reader and the applier.",
              s->queue_capacity);
    gauge_double(f, "oplog2pg_lag_seconds", "How far the committed position is behind the oplog, in seconds.",
                 s->lag_seconds);
    gauge_double(f, "oplog2pg_checkpoint_timestamp_seconds",
                 "Oplog time of the committed checkpoint since the UNIX epoch in seconds; 0 before the first.",
                 s->checkpoint_timestamp);
    gauge_u64(f, "oplog2pg_open_transactions",
              "MongoDB transactions written over several oplog entries whose commit is not read yet.", s->txn_open);
    gauge_u64(f, "oplog2pg_open_transaction_bytes", "Oplog bytes of the entries of the open transactions read so far.",
              s->txn_bytes);
    gauge_double(f, "oplog2pg_open_transaction_oldest_age_seconds",
                 "Age of the first oplog entry of the oldest open transaction, in seconds; 0 when none is open.",
                 s->txn_oldest_age);
    gauge_i64(f, "oplog2pg_copy_documents", "Initial copy: documents committed so far.", s->copy_documents);
    gauge_i64(f, "oplog2pg_copy_documents_estimate", "Initial copy: estimated number of documents to copy.",
              s->copy_documents_estimate);

    if (s->nshards == 0)
        render_window(f, s);
    render_shards(f, s);

    bool failed = ferror(f) != 0;
    if (fclose(f) != 0 || failed || buf == NULL) {
        free(buf);
        return NULL;
    }
    if (len != NULL)
        *len = size;
    return buf;
}

/* ---- HTTP server ------------------------------------------------------------------------------------------------- */

struct metrics_server {
    struct MHD_Daemon *mhd;
    int port;
    pthread_mutex_t lock; /* guards snap */
    metrics_snapshot snap;
};

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* libmicrohttpd's own error messages (it only has any with MHD_USE_ERROR_LOG) go to our log, one line each. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    log_warning("[metrics] HTTP server: %s", msg);
}

static enum MHD_Result reply_static(struct MHD_Connection *conn, unsigned int status, const char *body)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
    if (r == NULL)
        return MHD_NO;
    enum MHD_Result ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    if (ok == MHD_YES && status == MHD_HTTP_METHOD_NOT_ALLOWED)
        ok = MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    if (ok == MHD_YES)
        ok = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ok;
}

/* One request. The answer goes out on the first call, before any request body is read: nothing here takes a body,
 * and libmicrohttpd discards (or refuses) what a client sends after a queued response. */
static enum MHD_Result handle_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                      const char *version, const char *upload_data, size_t *upload_data_size,
                                      void **req_cls)
{
    metrics_server *m = cls;

    if (strcmp(url, "/metrics") != 0)
        return reply_static(conn, MHD_HTTP_NOT_FOUND, "Not found: metrics are served at /metrics\n");
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return reply_static(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "Method not allowed: use GET or HEAD\n");

    metrics_snapshot copy;
    pthread_mutex_lock(&m->lock);
    copy = m->snap;
    pthread_mutex_unlock(&m->lock);

    size_t len;
    char *text = metrics_render(&copy, &len);
    if (text == NULL)
        return reply_static(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "Out of memory\n");
    /* MHD_RESPMEM_MUST_FREE: libmicrohttpd calls free() on text when the response is destroyed. */
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        free(text);
        return MHD_NO;
    }
    enum MHD_Result ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, CONTENT_TYPE);
    if (ok == MHD_YES)
        ok = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ok;
}

/* Binds and listens on the first address of host:port that works. Done here rather than by libmicrohttpd
 * (MHD_OPTION_SOCK_ADDR) so that a failure is reported with the errno of the call that failed: MHD_start_daemon
 * only returns NULL. *family_out gets the socket's address family. -1 with err set on failure. */
static int open_listener(const char *spec, const char *host, int port, int *family_out, char *err, size_t errlen)
{
    struct addrinfo hints = {0}, *res = NULL;
    char service[8];
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    snprintf(service, sizeof service, "%d", port);
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "[metrics] listen %s: cannot resolve \"%s\": %s", spec, host,
                 rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        return -1;
    }
    int fd = -1, saved = 0;
    const char *what = "socket";
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
            continue;
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            what = "socket";
            continue;
        }
        int on = 1, off = 0;
        /* SO_REUSEADDR: a restart may bind while old connections sit in TIME_WAIT (it never lets two listeners share
         * a port on Linux). An IPv6 wildcard ("[::]:PORT") also takes IPv4, i.e. dual stack. */
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        if (ai->ai_family == AF_INET6)
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            saved = errno;
            what = "bind";
        } else if (listen(fd, 16) != 0) {
            saved = errno;
            what = "listen";
        } else {
            *family_out = ai->ai_family;
            break;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        if (saved == 0)
            snprintf(err, errlen, "[metrics] listen %s: \"%s\" has no IPv4 or IPv6 address", spec, host);
        else if (strcmp(what, "bind") == 0)
            snprintf(err, errlen, "[metrics] listen %s: %s", spec, strerror(saved));
        else
            snprintf(err, errlen, "[metrics] listen %s: %s: %s", spec, what, strerror(saved));
    }
    return fd;
}

metrics_server *metrics_start(const char *listen, char *err, size_t errlen)
{
    char host[256], perr[256];
    int port, family = AF_INET, fd = -1;
    metrics_server *m = NULL;
    bool locked_init = false;

    if (!metrics_parse_listen(listen, host, sizeof host, &port, perr, sizeof perr)) {
        snprintf(err, errlen, "[metrics] listen: %s", perr);
        return NULL;
    }
    m = calloc(1, sizeof *m);
    if (m == NULL) {
        snprintf(err, errlen, "[metrics] listen %s: out of memory", listen);
        goto fail;
    }
    if (pthread_mutex_init(&m->lock, NULL) != 0) {
        snprintf(err, errlen, "[metrics] listen %s: cannot create a mutex", listen);
        goto fail;
    }
    locked_init = true;

    fd = open_listener(listen, host, port, &family, err, errlen);
    if (fd < 0)
        goto fail;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        snprintf(err, errlen, "[metrics] listen %s: getsockname: %s", listen, strerror(errno));
        goto fail;
    }
    m->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);

    /* One internal thread polls every connection (epoll where available): a scrape is a few kilobytes every few
     * seconds, no reason for a thread per connection. libmicrohttpd blocks SIGPIPE in the threads it starts and sends
     * with MSG_NOSIGNAL (MHD_FEATURE_AUTOSUPPRESS_SIGPIPE on Linux), and our responses are memory buffers (no
     * sendfile), so a scraper hanging up mid-answer cannot raise SIGPIPE; the daemon ignores SIGPIPE anyway. */
    unsigned int flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
    if (family == AF_INET6)
        flags |= MHD_USE_IPv6;
    m->mhd =
        MHD_start_daemon(flags, (uint16_t)m->port, NULL, NULL, handle_request, m, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
                         (void *)NULL, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd, MHD_OPTION_CONNECTION_LIMIT,
                         (unsigned int)32, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)30, MHD_OPTION_END);
    if (m->mhd == NULL) {
        /* Whether libmicrohttpd has already closed a socket it was handed when its start fails is not documented;
         * rather than risk closing a descriptor number another thread may have reused, it is left open (a failed
         * start stops the daemon anyway). */
        fd = -1;
        snprintf(err, errlen, "[metrics] listen %s: cannot start the HTTP server (libmicrohttpd)", listen);
        goto fail;
    }
    return m;

fail:
    if (fd >= 0)
        close(fd);
    if (locked_init)
        pthread_mutex_destroy(&m->lock);
    free(m);
    return NULL;
}

int metrics_port(const metrics_server *m)
{
    return m->port;
}

void metrics_publish(metrics_server *m, const metrics_snapshot *snap)
{
    pthread_mutex_lock(&m->lock);
    m->snap = *snap;
    pthread_mutex_unlock(&m->lock);
}

void metrics_stop(metrics_server *m)
{
    if (m == NULL)
        return;
    MHD_stop_daemon(m->mhd); /* joins its thread, closes the listening socket and every connection */
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/*
 * server.c — mongosim's event loop, connections and wire framing (OP_QUERY/OP_REPLY for the handshake, OP_MSG for
 * the rest), plus the oplog stamping every write goes through and the step-down / noop timers.
 *
 * NOTES: one libev loop, non-blocking sockets. A connection reads into `in`, runs complete messages in order and
 * writes replies into `out`, which is flushed as far as the socket takes it. Reading pauses while an awaitData
 * getMore is parked (it waits for oplog entries) or while replies are held back by the delay fault, so replies stay
 * in request order. Parked getMores are woken from an ev_prepare watcher whenever the oplog has grown since the last
 * look: that catches every append (writes, noops, appendOplog, step-up) in one place without polling. A write waiting
 * for writeConcern {w: "majority"} is parked the same way (its reply held in the connection) and is offered the
 * commit point from the same watcher, which mongosimMajority re-arms. Connections
 * are only freed from top-level callbacks (conn_service), never while a handler further up the stack uses them.
 *
 * TLS (--tls-cert): the same loop and the same non-blocking sockets, with OpenSSL between them and the buffers. An
 * accepted connection first runs SSL_accept from its watchers until it completes (WANT_READ waits on the read
 * watcher, WANT_WRITE on the write watcher); then SSL_read fills `in` until WANT_READ, and SSL_write drains `out` a
 * record at a time until WANT_WRITE. A read that needs to write first (WANT_WRITE from SSL_read) or a write that needs
 * to read (WANT_READ from SSL_write) sets a flag that keeps the other watcher running, and is retried from it. An
 * SSL_write that could not finish is repeated with the same length, as OpenSSL requires.
 */
#include "flavor.h"
#include "images.h"
#include "projection.h"
#include "sim_internal.h"
#include "txn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- buffers and raw BSON writing ---- */

void buf_reserve(sim_buf *b, size_t more)
{
    if (b->len + more <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more)
        cap *= 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p) {
        fprintf(stderr, "mongosim: out of memory growing a buffer to %zu bytes\n", cap);
        abort();
    }
    b->data = p;
    b->cap = cap;
}

void buf_put(sim_buf *b, const void *p, size_t n)
{
    buf_reserve(b, n);
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

void buf_free(sim_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

static void put_i32_at(sim_buf *b, size_t at, int32_t v)
{
    uint32_t le = BSON_UINT32_TO_LE((uint32_t)v);
    memcpy(b->data + at, &le, 4);
}

static void put_i32(sim_buf *b, int32_t v)
{
    buf_reserve(b, 4);
    b->len += 4;
    put_i32_at(b, b->len - 4, v);
}

static void put_i64(sim_buf *b, int64_t v)
{
    uint64_t le = BSON_UINT64_TO_LE((uint64_t)v);
    buf_put(b, &le, 8);
}

size_t bw_doc_begin(sim_buf *b)
{
    size_t start = b->len;
    put_i32(b, 0);
    return start;
}

void bw_doc_end(sim_buf *b, size_t start)
{
    uint8_t nul = 0;
    buf_put(b, &nul, 1);
    put_i32_at(b, start, (int32_t)(b->len - start));
}

void bw_key(sim_buf *b, uint8_t type, const char *key)
{
    buf_put(b, &type, 1);
    buf_put(b, key, strlen(key) + 1);
}

size_t bw_sub_begin(sim_buf *b, uint8_t type, const char *key)
{
    bw_key(b, type, key);
    return bw_doc_begin(b);
}

void bw_int32(sim_buf *b, const char *key, int32_t v)
{
    bw_key(b, BSON_TYPE_INT32, key);
    put_i32(b, v);
}

void bw_int64(sim_buf *b, const char *key, int64_t v)
{
    bw_key(b, BSON_TYPE_INT64, key);
    put_i64(b, v);
}

void bw_double(sim_buf *b, const char *key, double v)
{
    bw_key(b, BSON_TYPE_DOUBLE, key);
    int64_t bits;
    memcpy(&bits, &v, 8);
    put_i64(b, bits);
}

void bw_string(sim_buf *b, const char *key, const char *s)
{
    bw_key(b, BSON_TYPE_UTF8, key);
    size_t n = strlen(s) + 1;
    put_i32(b, (int32_t)n);
    buf_put(b, s, n);
}

void bw_doc(sim_buf *b, const char *key, const uint8_t *doc, uint32_t len)
{
    bw_key(b, BSON_TYPE_DOCUMENT, key);
    buf_put(b, doc, len);
}

/* ---- replies ---- */

void reply_begin(sim_reply *r)
{
    sim_buf *b = &r->conn->out;
    r->start = b->len;
    put_i32(b, 0);                                                /* messageLength, fixed by reply_end */
    put_i32(b, (int32_t)(r->conn->srv->next_conn_id * 1000 + 1)); /* requestID: any value */
    put_i32(b, r->request_id);                                    /* responseTo */
    if (r->opcode == SIM_OP_QUERY) {
        put_i32(b, SIM_OP_REPLY);
        put_i32(b, 0); /* responseFlags */
        put_i64(b, 0); /* cursorID */
        put_i32(b, 0); /* startingFrom */
        put_i32(b, 1); /* numberReturned */
    } else {
        put_i32(b, SIM_OP_MSG);
        put_i32(b, 0); /* flagBits: never checksumPresent, never moreToCome */
        uint8_t kind = 0;
        buf_put(b, &kind, 1);
    }
}

void reply_end(sim_reply *r)
{
    sim_buf *b = &r->conn->out;
    if (r->no_reply) {
        b->len = r->start;
        return;
    }
    put_i32_at(b, r->start, (int32_t)(b->len - r->start));
}

void reply_bson(sim_reply *r, const bson_t *doc)
{
    reply_begin(r);
    buf_put(&r->conn->out, bson_get_data(doc), doc->len);
    reply_end(r);
}

const char *sim_code_name(int code)
{
    switch (code) {
    case 2:
        return "BadValue";
    case 9:
        return "FailedToParse";
    case 20:
        return "IllegalOperation";
    case 22:
        return "InvalidBSON";
    case 26:
        return "NamespaceNotFound";
    case 43:
        return "CursorNotFound";
    case 59:
        return "CommandNotFound";
    case 73:
        return "InvalidNamespace";
    case 136:
        return "CappedPositionLost";
    case 175:
        return "QueryPlanKilled";
    case 237:
        return "CursorKilled";
    case 10107:
        return "NotWritablePrimary";
    case 11000:
        return "DuplicateKey";
    case 11602:
        return "InterruptedDueToReplStateChange";
    default:
        return projection_code_name(code) ? projection_code_name(code) : store_code_name(code);
    }
}

void reply_error(sim_reply *r, int code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    bson_t doc = BSON_INITIALIZER;
    BSON_APPEND_DOUBLE(&doc, "ok", 0.0);
    BSON_APPEND_UTF8(&doc, "errmsg", msg);
    BSON_APPEND_INT32(&doc, "code", code);
    BSON_APPEND_UTF8(&doc, "codeName", sim_code_name(code));
    reply_bson(r, &doc);
    bson_destroy(&doc);
    if (r->conn->srv->opts.verbose)
        fprintf(stderr, "mongosim: conn %" PRId64 ": error %d: %s\n", r->conn->id, code, msg);
}

/* ---- oplog stamping ---- */

int64_t sim_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* In a simulated cluster every shard takes its ts from one clock, as the cluster time gossiped between a real
 * cluster's nodes orders causally related writes (src/mongo/db/vector_clock.h: a node's clusterTime is at least every
 * time it has seen, and an oplog slot is reserved after it): whatever was written before, on any shard, has a smaller
 * ts. */
uint64_t sim_next_ts(sim_server *srv)
{
    uint64_t ts = oplog_next_ts(srv->oplog, sim_now_ms() / 1000);
    if (srv->clock) {
        if (ts <= *srv->clock)
            ts = *srv->clock + 1;
        *srv->clock = ts;
    }
    return ts;
}

/* A write's pre- and post-images get their key (images.c) when its entry is logged; the oplog's capping removes the
 * images of the entries it drops. */
static void entry_images(sim_server *srv, const bson_t *entry, uint64_t ts)
{
    images_on_entry(srv->images, entry, ts);
    if (oplog_count(srv->oplog))
        images_expire(srv->images, oplog_entry_ts(srv->oplog, oplog_first_seq(srv->oplog)));
}

bool sim_append_entry(sim_server *srv, const bson_t *entry, uint64_t ts, bson_error_t *err)
{
    if (!oplog_append(srv->oplog, bson_get_data(entry), entry->len, ts, err))
        return false;
    entry_images(srv, entry, ts);
    if (srv->clock && ts > *srv->clock)
        *srv->clock = ts;
    oplog_cap(srv->oplog, srv->opts.max_oplog_entries);
    return true;
}

bool sim_append_body(sim_server *srv, const bson_t *body, bson_error_t *err)
{
    uint64_t ts = sim_next_ts(srv);
    if (!oplog_append_stamped(srv->oplog, bson_get_data(body), body->len, ts, srv->term, sim_now_ms(), true, true, true,
                              err))
        return false;
    entry_images(srv, body, ts);
    oplog_cap(srv->oplog, srv->opts.max_oplog_entries);
    return true;
}

static void append_noop(sim_server *srv, const char *msg)
{
    bson_t body = BSON_INITIALIZER, o;
    BSON_APPEND_UTF8(&body, "op", "n");
    BSON_APPEND_UTF8(&body, "ns", "");
    BSON_APPEND_DOCUMENT_BEGIN(&body, "o", &o);
    BSON_APPEND_UTF8(&o, "msg", msg);
    bson_append_document_end(&body, &o);
    bson_error_t err;
    if (!sim_append_body(srv, &body, &err))
        fprintf(stderr, "mongosim: cannot log noop \"%s\": %s\n", msg, err.message);
    bson_destroy(&body);
}

/* ---- connections ---- */

static void conn_service(sim_conn *c);

static void conn_free(sim_conn *c)
{
    sim_server *srv = c->srv;
    ev_io_stop(srv->loop, &c->rio);
    ev_io_stop(srv->loop, &c->wio);
    ev_timer_stop(srv->loop, &c->park_timer);
    ev_timer_stop(srv->loop, &c->delay_timer);
    if (c->ssl != NULL) {
        if (c->tls_ready && !c->dead)
            SSL_shutdown(c->ssl); /* best effort: one close_notify, not waited for */
        SSL_free(c->ssl);
        free(c->x509_subject);
    }
    close(c->fd);
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    buf_free(&c->in);
    buf_free(&c->out);
    cmd_parked_write_free(c);
    if (srv->opts.verbose)
        fprintf(stderr, "mongosim: conn %" PRId64 " closed\n", c->id);
    srv->closed_gen++;
    free(c);
}

/* Sends what the socket takes; false on a socket error. */
static bool conn_flush(sim_conn *c)
{
    c->tls_write_wants_read = false;
    while (c->ssl != NULL && c->out_off < c->out.len) {
        size_t left = c->out.len - c->out_off;
        int len = c->tls_pending > 0 ? c->tls_pending : (int)(left < 16384 ? left : 16384);
        ERR_clear_error();
        int n = SSL_write(c->ssl, c->out.data + c->out_off, len);
        if (n > 0) {
            c->out_off += (size_t)n;
            c->tls_pending = 0;
            continue;
        }
        int e = SSL_get_error(c->ssl, n);
        if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
            c->tls_pending = len;
            c->tls_write_wants_read = e == SSL_ERROR_WANT_READ;
            if (e == SSL_ERROR_WANT_WRITE)
                ev_io_start(c->srv->loop, &c->wio);
            return true;
        }
        return false;
    }
    while (c->out_off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            ev_io_start(c->srv->loop, &c->wio);
            return true;
        }
        return false;
    }
    c->out.len = c->out_off = 0;
    ev_io_stop(c->srv->loop, &c->wio);
    return true;
}

/* splitmix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", 2014): one step of *state. */
uint64_t sim_random_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* How long the reply now in c->out waits before it is sent: the delay fault's fixed delay, or for an oplog read a
 * random 0..--oplog-read-delay ms drawn from this server's own stream (a slow link or a busy member: the reply is
 * late, its content is what the server had when it answered). */
static int64_t reply_delay_ms(sim_conn *c)
{
    sim_server *srv = c->srv;
    bool oplog_reply = c->oplog_reply;
    c->oplog_reply = false;
    if (srv->delay_ms > 0)
        return srv->delay_ms;
    if (!oplog_reply || srv->opts.oplog_read_delay_ms <= 0)
        return 0;
    uint64_t ms = sim_random_next(&srv->rng) % (uint64_t)(srv->opts.oplog_read_delay_ms + 1);
    srv->oplog_reads_delayed++;
    srv->oplog_read_delay_total_ms += ms;
    return (int64_t)ms;
}

void sim_conn_reply_ready(sim_conn *c)
{
    int64_t delay = reply_delay_ms(c);
    if (delay > 0 && c->out.len > c->out_off) {
        c->held = true;
        ev_timer_set(&c->delay_timer, (double)delay / 1000.0, 0.);
        ev_timer_start(c->srv->loop, &c->delay_timer);
        return;
    }
    if (!conn_flush(c))
        c->dead = true;
}

static bool read_cstring(const uint8_t **p, const uint8_t *end, const char **out)
{
    const uint8_t *nul = memchr(*p, 0, (size_t)(end - *p));
    if (!nul)
        return false;
    *out = (const char *)*p;
    *p = nul + 1;
    return true;
}

static bool read_i32(const uint8_t **p, const uint8_t *end, int32_t *v)
{
    if (end - *p < 4)
        return false;
    uint32_t le;
    memcpy(&le, *p, 4);
    *v = (int32_t)BSON_UINT32_FROM_LE(le);
    *p += 4;
    return true;
}

/* Deeper than this a document is not walked further (the server refuses user documents past 100 levels and any
 * message past a few hundred; the walk is recursive). */
#define SIM_DOC_WALK_DEPTH 1000

/* Every element of the document at every level reads to its end. bson_validate with BSON_VALIDATE_NONE alone is not
 * enough: libbson 1.23 passes documents with nested elements that do not, and its copy functions then abort on them
 * (found by tests/fuzz/wire.c: an aggregate pipeline so broken stopped mongosim). */
static bool doc_sound(const uint8_t *data, size_t len, int depth)
{
    bson_iter_t it;
    if (!bson_iter_init_from_data(&it, data, len))
        return false;
    while (bson_iter_next(&it)) {
        uint32_t n = 0, scope_len = 0;
        const uint8_t *sub = NULL;
        if (BSON_ITER_HOLDS_DOCUMENT(&it))
            bson_iter_document(&it, &n, &sub);
        else if (BSON_ITER_HOLDS_ARRAY(&it))
            bson_iter_array(&it, &n, &sub);
        else if (BSON_ITER_HOLDS_CODEWSCOPE(&it) && bson_iter_codewscope(&it, &n, &scope_len, &sub) != NULL)
            n = scope_len;
        else
            continue;
        if (sub == NULL || (depth < SIM_DOC_WALK_DEPTH && !doc_sound(sub, n, depth + 1)))
            return false;
    }
    return it.err_off == 0;
}

/* A BSON document at *p (fully inside [p, end)) that passes structural validation, at every level. */
static bool read_doc(const uint8_t **p, const uint8_t *end, bson_t *doc)
{
    const uint8_t *q = *p;
    int32_t len;
    if (!read_i32(&q, end, &len) || len < 5 || len > end - *p)
        return false;
    if (!bson_init_static(doc, *p, (size_t)len))
        return false;
    size_t off;
    if (!bson_validate(doc, BSON_VALIDATE_NONE, &off) || !doc_sound(*p, (size_t)len, 0))
        return false;
    *p += len;
    return true;
}

static void handle_query(sim_conn *c, sim_reply *r, const uint8_t *p, const uint8_t *end)
{
    int32_t flags, skip, nret;
    const char *ns;
    bson_t query;
    if (!read_i32(&p, end, &flags) || !read_cstring(&p, end, &ns) || !read_i32(&p, end, &skip) ||
        !read_i32(&p, end, &nret) || !read_doc(&p, end, &query)) {
        reply_error(r, 22, "malformed OP_QUERY: truncated or invalid BSON");
        return;
    }
    size_t nslen = strlen(ns);
    if (nslen < 6 || strcmp(ns + nslen - 5, ".$cmd") != 0 || nslen - 5 >= 256) {
        reply_error(r, 20, "OP_QUERY is only supported on <db>.$cmd (got '%s'); use OP_MSG", ns);
        return;
    }
    char db[256];
    memcpy(db, ns, nslen - 5);
    db[nslen - 5] = '\0';
    bson_iter_t it;
    bson_t inner;
    if (bson_iter_init_find(&it, &query, "$query") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        uint32_t len;
        const uint8_t *data;
        bson_iter_document(&it, &len, &data);
        if (!bson_init_static(&inner, data, len)) {
            reply_error(r, 22, "invalid $query document");
            return;
        }
        cmd_dispatch(c->srv, r, &inner, db);
        return;
    }
    cmd_dispatch(c->srv, r, &query, db);
}

static void handle_msg(sim_conn *c, sim_reply *r, const uint8_t *p, const uint8_t *end)
{
    int32_t flags;
    if (!read_i32(&p, end, &flags)) {
        reply_error(r, 9, "malformed OP_MSG: no flagBits");
        return;
    }
    uint32_t uflags = (uint32_t)flags;
    if (uflags & 2u)
        r->no_reply = true;
    if (uflags & 1u) {
        reply_error(r, 9, "OP_MSG with checksumPresent is not supported by mongosim");
        return;
    }
    if (uflags & 0xfffcu) {
        reply_error(r, 9, "OP_MSG has unknown required flag bits 0x%x", uflags & 0xfffcu);
        return;
    }
    bson_t body;
    bool have_body = false;
    bson_t cmd = BSON_INITIALIZER;
    bool copied = false;
    struct {
        const char *id;
        const uint8_t *start, *end;
    } seqs[8];
    int nseq = 0;
    while (p < end) {
        uint8_t kind = *p++;
        if (kind == 0) {
            if (have_body || !read_doc(&p, end, &body)) {
                reply_error(r, have_body ? 40430 : 22,
                            have_body ? "OP_MSG has more than one body section" : "OP_MSG body is invalid BSON");
                goto out;
            }
            have_body = true;
        } else if (kind == 1) {
            const uint8_t *sec = p;
            int32_t size;
            if (!read_i32(&p, end, &size) || size < 5 || size > end - sec || nseq == 8) {
                reply_error(r, 9, "malformed OP_MSG document sequence");
                goto out;
            }
            const uint8_t *sec_end = sec + size;
            if (!read_cstring(&p, sec_end, &seqs[nseq].id)) {
                reply_error(r, 9, "malformed OP_MSG document sequence identifier");
                goto out;
            }
            seqs[nseq].start = p;
            seqs[nseq].end = sec_end;
            nseq++;
            p = sec_end;
        } else {
            reply_error(r, 9, "OP_MSG has an unknown section kind %u", kind);
            goto out;
        }
    }
    if (!have_body) {
        reply_error(r, 40587, "OP_MSG has no body section");
        goto out;
    }
    if (nseq == 0) {
        cmd_dispatch(c->srv, r, &body, NULL);
        goto out;
    }
    /* Fold document sequences into the body as arrays, as the server does. */
    bson_copy_to(&body, &cmd);
    copied = true;
    for (int i = 0; i < nseq; i++) {
        bson_t arr;
        bson_append_array_begin(&cmd, seqs[i].id, -1, &arr);
        const uint8_t *q = seqs[i].start;
        uint32_t n = 0;
        while (q < seqs[i].end) {
            bson_t d;
            if (!read_doc(&q, seqs[i].end, &d)) {
                bson_append_array_end(&cmd, &arr);
                reply_error(r, 22, "invalid BSON in OP_MSG document sequence '%s'", seqs[i].id);
                goto out;
            }
            char key[16];
            const char *k;
            bson_uint32_to_string(n++, &k, key, sizeof key);
            bson_append_document(&arr, k, -1, &d);
        }
        bson_append_array_end(&cmd, &arr);
    }
    cmd_dispatch(c->srv, r, &cmd, NULL);
out:
    if (copied)
        bson_destroy(&cmd);
}

/* Runs buffered messages until one parks or replies are held; false when the connection must close. */
static bool conn_process(sim_conn *c)
{
    size_t pos = 0;
    bool ok = true;
    while (!c->parked && !c->held && !c->close_after_flush && !c->dead) {
        size_t avail = c->in.len - pos;
        if (avail < 4)
            break;
        int32_t len;
        const uint8_t *p = c->in.data + pos;
        read_i32(&p, p + 4, &len);
        if (len < 16 || len > SIM_MAX_MESSAGE) {
            if (c->srv->opts.verbose)
                fprintf(stderr, "mongosim: conn %" PRId64 ": bad message length %d, closing\n", c->id, len);
            ok = false;
            break;
        }
        if (avail < (size_t)len)
            break;
        const uint8_t *msg = c->in.data + pos;
        const uint8_t *end = msg + len;
        int32_t request_id, response_to, opcode;
        p = msg + 4;
        read_i32(&p, end, &request_id);
        read_i32(&p, end, &response_to);
        read_i32(&p, end, &opcode);
        sim_reply r = {.conn = c, .request_id = request_id, .opcode = opcode};
        if (opcode == SIM_OP_QUERY)
            handle_query(c, &r, p, end);
        else if (opcode == SIM_OP_MSG)
            handle_msg(c, &r, p, end);
        else {
            if (c->srv->opts.verbose)
                fprintf(stderr, "mongosim: conn %" PRId64 ": unsupported opcode %d, closing\n", c->id, opcode);
            ok = false;
            break;
        }
        pos += (size_t)len;
        if (r.parked) {
            c->parked = true;
            c->park_request = request_id;
            c->park_opcode = opcode;
        } else {
            sim_conn_reply_ready(c);
        }
    }
    if (pos > 0) {
        memmove(c->in.data, c->in.data + pos, c->in.len - pos);
        c->in.len -= pos;
    }
    return ok;
}

/* The one place a connection is advanced and, when finished, freed. */
static void conn_service(sim_conn *c)
{
    if (!c->dead && !conn_process(c))
        c->dead = true;
    if (!c->dead && !c->held && !conn_flush(c))
        c->dead = true;
    if (c->dead || (c->close_after_flush && c->out.len == 0)) {
        conn_free(c);
        return;
    }
    if ((c->parked || c->held) && !c->tls_write_wants_read)
        ev_io_stop(c->srv->loop, &c->rio);
    else
        ev_io_start(c->srv->loop, &c->rio);
    if (c->tls_read_wants_write)
        ev_io_start(c->srv->loop, &c->wio);
}

/* ---- TLS ---- */

/* The subject of the client's verified certificate in RFC 2253 form, the user name MONGODB-X509 authenticates (as
 * libmongoc's mongoc_ssl_extract_subject prints it: X509_NAME_print_ex with XN_FLAG_RFC2253). NULL without one. */
static char *peer_subject(SSL *ssl)
{
    if (SSL_get_verify_result(ssl) != X509_V_OK)
        return NULL;
    X509 *peer = SSL_get1_peer_certificate(ssl);
    if (peer == NULL)
        return NULL;
    char *out = NULL;
    BIO *b = BIO_new(BIO_s_mem());
    if (b != NULL && X509_NAME_print_ex(b, X509_get_subject_name(peer), 0, XN_FLAG_RFC2253) >= 0) {
        char *p;
        long n = BIO_get_mem_data(b, &p);
        if (n > 0)
            out = strndup(p, (size_t)n);
    }
    BIO_free(b);
    X509_free(peer);
    return out;
}

static void tls_log_error(sim_conn *c, const char *what)
{
    if (!c->srv->opts.verbose)
        return;
    char buf[256];
    unsigned long e = ERR_peek_error();
    ERR_error_string_n(e, buf, sizeof buf);
    fprintf(stderr, "mongosim: conn %" PRId64 ": TLS %s failed: %s\n", c->id, what, e ? buf : strerror(errno));
}

/* Advances the handshake: 1 done, 0 waiting for the socket (the right watcher runs), -1 failed. */
static int tls_handshake(sim_conn *c)
{
    ERR_clear_error();
    int rc = SSL_accept(c->ssl);
    if (rc == 1) {
        c->tls_ready = true;
        c->x509_subject = peer_subject(c->ssl);
        ev_io_stop(c->srv->loop, &c->wio);
        ev_io_start(c->srv->loop, &c->rio);
        if (c->srv->opts.verbose)
            fprintf(stderr, "mongosim: conn %" PRId64 ": TLS %s%s%s\n", c->id, SSL_get_version(c->ssl),
                    c->x509_subject ? ", client certificate " : "", c->x509_subject ? c->x509_subject : "");
        return 1;
    }
    int e = SSL_get_error(c->ssl, rc);
    if (e == SSL_ERROR_WANT_READ) {
        ev_io_stop(c->srv->loop, &c->wio);
        ev_io_start(c->srv->loop, &c->rio);
        return 0;
    }
    if (e == SSL_ERROR_WANT_WRITE) {
        ev_io_start(c->srv->loop, &c->wio);
        return 0;
    }
    tls_log_error(c, "handshake");
    return -1;
}

/* Reads what OpenSSL has into `in`, until it needs the socket again. */
static void tls_read(sim_conn *c)
{
    c->tls_read_wants_write = false;
    for (;;) {
        buf_reserve(&c->in, 64 * 1024);
        size_t room = c->in.cap - c->in.len;
        ERR_clear_error();
        int n = SSL_read(c->ssl, c->in.data + c->in.len, room > INT32_MAX ? INT32_MAX : (int)room);
        if (n > 0) {
            c->in.len += (size_t)n;
            continue;
        }
        int e = SSL_get_error(c->ssl, n);
        if (e == SSL_ERROR_WANT_READ)
            return;
        if (e == SSL_ERROR_WANT_WRITE) {
            c->tls_read_wants_write = true;
            return;
        }
        if (e != SSL_ERROR_ZERO_RETURN)
            tls_log_error(c, "read");
        c->dead = true; /* close_notify, EOF or error */
        return;
    }
}

/* A watcher of a TLS connection fired. */
static void tls_io(sim_conn *c, bool readable)
{
    if (!c->tls_ready) {
        int h = tls_handshake(c);
        if (h == 0)
            return;
        if (h < 0) {
            c->dead = true;
            conn_service(c);
            return;
        }
        readable = true; /* what came with the last handshake flight may already sit in OpenSSL's buffer */
    }
    if (readable || c->tls_read_wants_write)
        tls_read(c);
    conn_service(c);
}

static void on_read(struct ev_loop *loop, ev_io *w, int revents)
{
    sim_conn *c = w->data;
    if (c->ssl != NULL) {
        tls_io(c, true);
        return;
    }
    for (;;) {
        buf_reserve(&c->in, 64 * 1024);
        ssize_t n = recv(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len, 0);
        if (n > 0) {
            c->in.len += (size_t)n;
            if ((size_t)n < 64 * 1024)
                break;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        c->dead = true; /* EOF or error */
        break;
    }
    conn_service(c);
}

static void on_write(struct ev_loop *loop, ev_io *w, int revents)
{
    sim_conn *c = w->data;
    if (c->ssl != NULL) {
        tls_io(c, false);
        return;
    }
    conn_service(c);
}

static void on_park_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
    sim_conn *c = w->data;
    if (c->parked && cmd_parked_try(c->srv, c, true)) {
        c->parked = false;
        sim_conn_reply_ready(c);
    }
    conn_service(c);
}

static void on_delay_done(struct ev_loop *loop, ev_timer *w, int revents)
{
    sim_conn *c = w->data;
    c->held = false;
    conn_service(c);
}

/* A connection on fd (non-blocking), served from the next loop iteration on. */
static bool conn_adopt(sim_server *srv, int fd)
{
    sim_conn *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "mongosim: out of memory accepting a connection\n");
        return false;
    }
    c->srv = srv;
    c->fd = fd;
    c->id = ++srv->next_conn_id;
    if (srv->tls_ctx != NULL) {
        c->ssl = SSL_new(srv->tls_ctx);
        if (c->ssl == NULL || SSL_set_fd(c->ssl, fd) != 1) {
            fprintf(stderr, "mongosim: cannot set up TLS for a connection\n");
            SSL_free(c->ssl);
            free(c);
            return false;
        }
    }
    ev_io_init(&c->rio, on_read, fd, EV_READ);
    ev_io_init(&c->wio, on_write, fd, EV_WRITE);
    ev_init(&c->park_timer, on_park_timeout);
    ev_init(&c->delay_timer, on_delay_done);
    c->rio.data = c->wio.data = c->park_timer.data = c->delay_timer.data = c;
    c->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = c;
    srv->conns = c;
    ev_io_start(srv->loop, &c->rio);
    if (srv->opts.verbose)
        fprintf(stderr, "mongosim: conn %" PRId64 " accepted\n", c->id);
    return true;
}

static void on_accept(struct ev_loop *loop, ev_io *w, int revents)
{
    sim_server *srv = w->data;
    for (;;) {
        int fd = accept4(srv->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                fprintf(stderr, "mongosim: accept: %s\n", strerror(errno));
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (!conn_adopt(srv, fd))
            close(fd);
    }
}

bool sim_server_adopt(sim_server *srv, int fd)
{
    return conn_adopt(srv, fd);
}

void sim_server_run_once(sim_server *srv)
{
    ev_run(srv->loop, EVRUN_NOWAIT);
}

/* Offers new oplog entries to parked getMores (see NOTES). */
static void on_prepare(struct ev_loop *loop, ev_prepare *w, int revents)
{
    sim_server *srv = w->data;
    /* the router's parked change-stream getMores wait on the shards' oplogs */
    uint64_t end = srv->is_router ? cl_stream_wake_gen(srv->cluster) : oplog_end_seq(srv->oplog);
    if (end == srv->woken_end)
        return;
    srv->woken_end = end;
restart:;
    uint64_t gen = srv->closed_gen;
    for (sim_conn *c = srv->conns; c; c = c->next) {
        if (!c->parked || !cmd_parked_try(srv, c, false))
            continue;
        c->parked = false;
        ev_timer_stop(loop, &c->park_timer);
        sim_conn_reply_ready(c);
        conn_service(c);
        if (srv->closed_gen != gen)
            goto restart;
    }
}

void sim_drop_connections(sim_server *srv, sim_conn *except)
{
    sim_conn *c = srv->conns;
    while (c) {
        sim_conn *next = c->next;
        if (c != except)
            conn_free(c);
        c = next;
    }
}

static void on_step_up(struct ev_loop *loop, ev_timer *w, int revents)
{
    sim_server *srv = w->data;
    srv->stepped_down = false;
    srv->term++;
    append_noop(srv, "new primary");
}

void sim_step_down(sim_server *srv, int64_t ms)
{
    srv->stepped_down = true;
    cmd_fail_parked(srv, 11602, "operation was interrupted because the node stepped down");
    ev_timer_stop(srv->loop, &srv->stepdown_timer);
    ev_timer_set(&srv->stepdown_timer, (double)ms / 1000.0, 0.);
    ev_timer_start(srv->loop, &srv->stepdown_timer);
}

void sim_conn_unpark(sim_conn *c)
{
    c->parked = false;
    ev_timer_stop(c->srv->loop, &c->park_timer);
    sim_conn_reply_ready(c);
    /* Resume reading (and run any buffered request) from the loop, not from the caller's stack. */
    ev_feed_event(c->srv->loop, &c->rio, EV_READ);
}

void sim_conn_park(sim_conn *c, double seconds)
{
    ev_timer_set(&c->park_timer, seconds, 0.);
    ev_timer_start(c->srv->loop, &c->park_timer);
}

/* The periodic noop writer writes only on a primary whose last applied optime has not moved since its previous tick
 * (src/mongo/db/repl/noop_writer.cpp, NoopWriter::_writeNoop: "Not scheduling a noop write. Last known OpTime !=
 * last primary OpTime"), so a busy node writes none; then it remembers the newest optime. */
static void on_noop(struct ev_loop *loop, ev_timer *w, int revents)
{
    sim_server *srv = w->data;
    if (!srv->stepped_down && oplog_last_ts(srv->oplog) == srv->noop_last_known)
        append_noop(srv, "periodic noop");
    srv->noop_last_known = oplog_last_ts(srv->oplog);
}

static void on_stop(struct ev_loop *loop, ev_async *w, int revents)
{
    ev_break(loop, EVBREAK_ALL);
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    fprintf(stderr, "mongosim: signal %d, stopping\n", w->signum);
    ev_break(loop, EVBREAK_ALL);
}

/* ---- lifecycle ---- */

void sim_options_init(sim_options *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->bind_host = "127.0.0.1";
    opts->set_name = "rs0";
    opts->advertise_host = "127.0.0.1";
    opts->format = SIM_FORMAT_70;
}

static bool path_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static bool load_state(sim_server *srv, bson_error_t *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/oplog.bson", srv->opts.state_dir);
    if (path_exists(path) && !oplog_load_file(srv->oplog, path, err))
        return false;
    snprintf(path, sizeof path, "%s/data", srv->opts.state_dir);
    if (path_exists(path) && !store_load_dir(srv->store, path, err))
        return false;
    return true;
}

bool sim_server_save(sim_server *srv, bson_error_t *err)
{
    if (!srv->opts.state_dir)
        return true;
    char path[4096];
    mkdir(srv->opts.state_dir, 0755);
    snprintf(path, sizeof path, "%s/data", srv->opts.state_dir);
    mkdir(path, 0755);
    if (!store_save_dir(srv->store, path, err))
        return false;
    snprintf(path, sizeof path, "%s/oplog.bson", srv->opts.state_dir);
    return oplog_save_file(srv->oplog, path, err);
}

/* The term continues from the newest entry's t (a restarted mongosim keeps its term). */
static void recover_term(sim_server *srv)
{
    srv->term = 1;
    if (oplog_count(srv->oplog) == 0)
        return;
    uint32_t len;
    const uint8_t *data = oplog_entry(srv->oplog, oplog_end_seq(srv->oplog) - 1, &len);
    bson_t entry;
    bson_iter_t it;
    if (bson_init_static(&entry, data, len) && bson_iter_init_find(&it, &entry, "t") && BSON_ITER_HOLDS_NUMBER(&it) &&
        bson_iter_as_int64(&it) > 1)
        srv->term = bson_iter_as_int64(&it);
}

/* The server side of --tls-cert/--tls-ca, as a mongod with net.tls.mode requireTLS, certificateKeyFile and CAFile:
 * TLS 1.2 or later, and with a CA a client certificate that chains to it is required (mongod's default without
 * allowConnectionsWithoutCertificates). */
static SSL_CTX *tls_context_new(const sim_options *opts, bson_error_t *err)
{
    char why[256] = "";
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        bson_set_error(err, 0, 1, "cannot create a TLS context");
        return NULL;
    }
    /* OpenSSL's socket BIO writes with write(2), which raises SIGPIPE when the peer is gone (the plain path sends with
     * MSG_NOSIGNAL): a server embedded in a test process must not die of it. */
    signal(SIGPIPE, SIG_IGN);
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (SSL_CTX_use_certificate_chain_file(ctx, opts->tls_cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, opts->tls_cert, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
        ERR_error_string_n(ERR_get_error(), why, sizeof why);
        bson_set_error(err, 0, 1, "--tls-cert %s: not a PEM with a certificate and its private key (%s)",
                       opts->tls_cert, why);
        SSL_CTX_free(ctx);
        return NULL;
    }
    if (opts->tls_ca != NULL) {
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(opts->tls_ca);
        if (names == NULL || SSL_CTX_load_verify_locations(ctx, opts->tls_ca, NULL) != 1) {
            ERR_error_string_n(ERR_get_error(), why, sizeof why);
            bson_set_error(err, 0, 1, "--tls-ca %s: no CA certificate could be read (%s)", opts->tls_ca, why);
            if (names != NULL)
                sk_X509_NAME_pop_free(names, X509_NAME_free);
            SSL_CTX_free(ctx);
            return NULL;
        }
        SSL_CTX_set_client_CA_list(ctx, names);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    }
    return ctx;
}

sim_server *sim_server_new(const sim_options *opts, struct ev_loop *loop, bson_error_t *err)
{
    sim_server *srv = calloc(1, sizeof *srv);
    if (!srv) {
        bson_set_error(err, 0, 1, "out of memory");
        return NULL;
    }
    srv->opts = *opts;
    srv->lfd = -1;
    srv->clock = opts->clock;
    srv->rng = opts->seed;
    srv->store = store_new(opts->format);
    store_set_ts_bucket_max_count(srv->store, opts->ts_bucket_max_count);
    store_set_ts_viewless(srv->store, opts->ts_viewless);
    srv->oplog = oplog_new();
    srv->images = images_new();
    store_set_image_hook(srv->store, images_pending, srv->images);
    if (!srv->store || !srv->oplog) {
        bson_set_error(err, 0, 1, "out of memory creating the store or the oplog");
        goto fail;
    }
    bson_oid_t oid;
    bson_oid_init(&oid, NULL);
    memcpy(srv->oplog_uuid, oid.bytes, 12);
    uint32_t rnd = (uint32_t)rand() ^ (uint32_t)sim_now_ms();
    memcpy(srv->oplog_uuid + 12, &rnd, 4);
    srv->oplog_uuid[6] = (uint8_t)((srv->oplog_uuid[6] & 0x0f) | 0x40);
    srv->oplog_uuid[8] = (uint8_t)((srv->oplog_uuid[8] & 0x3f) | 0x80);
    srv->next_txn_number = 1;

    if (opts->tls_ca != NULL && opts->tls_cert == NULL) {
        bson_set_error(err, 0, 1, "--tls-ca needs --tls-cert");
        goto fail;
    }
    if (opts->tls_cert != NULL && (srv->tls_ctx = tls_context_new(opts, err)) == NULL)
        goto fail;
    if (opts->state_dir && !load_state(srv, err))
        goto fail;
    if (opts->oplog_file && !oplog_load_file(srv->oplog, opts->oplog_file, err))
        goto fail;
    if (opts->data_dir && !store_load_dir(srv->store, opts->data_dir, err))
        goto fail;
    recover_term(srv);
    /* A fresh member's oplog is never empty: replSetInitiate's first oplog entry is the noop
     * {op: "n", ns: "", o: {msg: "initiating set"}} (mongodb/mongo src/mongo/db/repl/
     * replication_coordinator_external_state_impl.cpp, initializeReplSetStorage: onOpMessage(BSON("msg" <<
     * kInitiatingSetMsg)); kInitiatingSetMsg = "initiating set" in src/mongo/db/repl/oplog_entry.h). A loaded oplog
     * (--state, --oplog) already has its own start. */
    if (oplog_count(srv->oplog) == 0)
        append_noop(srv, "initiating set");

    srv->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (srv->lfd < 0) {
        bson_set_error(err, 0, 1, "socket: %s", strerror(errno));
        goto fail;
    }
    int one = 1;
    setsockopt(srv->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opts->port)};
    if (inet_pton(AF_INET, opts->bind_host, &sa.sin_addr) != 1) {
        bson_set_error(err, 0, 1, "bad bind address '%s' (an IPv4 address is expected)", opts->bind_host);
        goto fail;
    }
    if (bind(srv->lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(srv->lfd, 128) != 0) {
        bson_set_error(err, 0, 1, "cannot listen on %s:%d: %s", opts->bind_host, opts->port, strerror(errno));
        goto fail;
    }
    socklen_t salen = sizeof sa;
    getsockname(srv->lfd, (struct sockaddr *)&sa, &salen);
    srv->port = ntohs(sa.sin_port);
    snprintf(srv->me, sizeof srv->me, "%s:%d", opts->advertise_host, srv->port);

    if (loop) {
        srv->loop = loop;
    } else {
        srv->loop = ev_loop_new(EVFLAG_AUTO);
        srv->own_loop = true;
        if (!srv->loop) {
            bson_set_error(err, 0, 1, "cannot create an event loop");
            goto fail;
        }
    }
    ev_io_init(&srv->accept_io, on_accept, srv->lfd, EV_READ);
    ev_async_init(&srv->stop_async, on_stop);
    ev_prepare_init(&srv->prepare, on_prepare);
    ev_init(&srv->stepdown_timer, on_step_up);
    ev_init(&srv->noop_timer, on_noop);
    srv->accept_io.data = srv->stop_async.data = srv->prepare.data = srv;
    srv->stepdown_timer.data = srv->noop_timer.data = srv;
    ev_io_start(srv->loop, &srv->accept_io);
    ev_async_start(srv->loop, &srv->stop_async);
    ev_prepare_start(srv->loop, &srv->prepare);
    if (opts->noop_interval > 0) {
        ev_timer_set(&srv->noop_timer, opts->noop_interval, opts->noop_interval);
        ev_timer_start(srv->loop, &srv->noop_timer);
    }
    srv->woken_end = oplog_end_seq(srv->oplog);
    srv->noop_last_known = oplog_last_ts(srv->oplog);
    return srv;
fail:
    sim_server_free(srv);
    return NULL;
}

int sim_server_port(const sim_server *srv)
{
    return srv->port;
}

void sim_server_run(sim_server *srv)
{
    ev_run(srv->loop, 0);
}

void sim_server_stop(sim_server *srv)
{
    ev_async_send(srv->loop, &srv->stop_async);
}

void sim_server_handle_signals(sim_server *srv)
{
    ev_signal_init(&srv->sig_term, on_signal, SIGTERM);
    ev_signal_init(&srv->sig_int, on_signal, SIGINT);
    ev_signal_start(srv->loop, &srv->sig_term);
    ev_signal_start(srv->loop, &srv->sig_int);
    srv->signals = true;
}

void sim_server_free(sim_server *srv)
{
    if (!srv)
        return;
    if (srv->loop) {
        while (srv->conns)
            conn_free(srv->conns);
        ev_io_stop(srv->loop, &srv->accept_io);
        ev_async_stop(srv->loop, &srv->stop_async);
        ev_prepare_stop(srv->loop, &srv->prepare);
        ev_timer_stop(srv->loop, &srv->stepdown_timer);
        ev_timer_stop(srv->loop, &srv->noop_timer);
        if (srv->signals) {
            ev_signal_stop(srv->loop, &srv->sig_term);
            ev_signal_stop(srv->loop, &srv->sig_int);
        }
        if (srv->own_loop)
            ev_loop_destroy(srv->loop);
    }
    cmd_cursors_free(srv);
    txn_state_free(srv);
    if (srv->lfd >= 0)
        close(srv->lfd);
    store_free(srv->store);
    store_free(srv->maj_store);
    images_free(srv->images);
    flavor_free(srv);
    if (srv->before_cmd != NULL)
        bson_destroy(srv->before_cmd);
    oplog_free(srv->oplog);
    SSL_CTX_free(srv->tls_ctx);
    free(srv);
}

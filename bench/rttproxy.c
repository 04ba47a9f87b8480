/*
 * rttproxy.c — a TCP proxy that adds a fixed delay each way, to measure how a client copes with network round trips.
 *
 * Usage: rttproxy UPSTREAM_HOST UPSTREAM_PORT RTT_MS [LISTEN_PORT]
 * Listens on 127.0.0.1:LISTEN_PORT (0 or absent: a free port) and prints the port on stdout, then accepts any number
 * of connections, each forwarded to UPSTREAM. Every chunk read on one side is written to the other RTT_MS/2 later
 * (so a request and its answer take RTT_MS more than without the proxy), in order; bandwidth is not limited. One
 * libev loop, non-blocking sockets; a connection closed on one side is closed on the other once what was read from it
 * has been delivered. SIGTERM/SIGINT stop it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct chunk {
    struct chunk *next;
    ev_tstamp due;
    size_t len, off;
    char data[];
} chunk;

struct link;

/* One direction: read from `from`, write to `to` after the delay. */
typedef struct dir {
    struct link *l;
    int from, to;
    ev_io rd, wr;
    ev_timer tm;
    chunk *head, *tail;
    bool eof; /* `from` closed: shut `to` down once the queue is empty */
    bool done;
} dir;

typedef struct link {
    dir up, down; /* up: client -> server; down: server -> client */
    int cfd, sfd;
} link_t;

static ev_tstamp g_delay;
static struct addrinfo *g_upstream;

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void link_close(struct ev_loop *loop, link_t *l)
{
    dir *ds[2] = {&l->up, &l->down};
    for (int i = 0; i < 2; i++) {
        ev_io_stop(loop, &ds[i]->rd);
        ev_io_stop(loop, &ds[i]->wr);
        ev_timer_stop(loop, &ds[i]->tm);
        for (chunk *c = ds[i]->head, *n; c; c = n) {
            n = c->next;
            free(c);
        }
    }
    close(l->cfd);
    close(l->sfd);
    free(l);
}

static void maybe_finish(struct ev_loop *loop, dir *d)
{
    if (d->eof && d->head == NULL && !d->done) {
        d->done = true;
        shutdown(d->to, SHUT_WR);
    }
    if (d->l->up.done && d->l->down.done)
        link_close(loop, d->l);
}

/* Writes the chunks that are due; arms the timer for the next one, or the write watcher when the socket is full. */
static void pump(struct ev_loop *loop, dir *d)
{
    ev_tstamp now = ev_now(loop);
    while (d->head && d->head->due <= now) {
        chunk *c = d->head;
        ssize_t n = write(d->to, c->data + c->off, c->len - c->off);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            ev_io_start(loop, &d->wr);
            return;
        }
        if (n < 0) {
            d->eof = true;
            d->done = true;
            d->l->up.done = d->l->down.done = true;
            link_close(loop, d->l);
            return;
        }
        c->off += (size_t)n;
        if (c->off < c->len)
            continue;
        d->head = c->next;
        if (d->head == NULL)
            d->tail = NULL;
        free(c);
    }
    ev_io_stop(loop, &d->wr);
    if (d->head) {
        ev_timer_stop(loop, &d->tm);
        ev_timer_set(&d->tm, d->head->due - now, 0.);
        ev_timer_start(loop, &d->tm);
    }
    maybe_finish(loop, d);
}

static void on_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    pump(loop, w->data);
}

static void on_writable(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    pump(loop, w->data);
}

static void on_readable(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    dir *d = w->data;
    char buf[65536];
    ssize_t n = read(d->from, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) {
        ev_io_stop(loop, &d->rd);
        d->eof = true;
        maybe_finish(loop, d);
        return;
    }
    chunk *c = malloc(sizeof *c + (size_t)n);
    if (c == NULL) {
        fprintf(stderr, "rttproxy: out of memory\n");
        exit(1);
    }
    memcpy(c->data, buf, (size_t)n);
    c->len = (size_t)n;
    c->off = 0;
    c->next = NULL;
    c->due = ev_time() + g_delay;
    bool was_empty = d->head == NULL;
    if (d->tail)
        d->tail->next = c;
    else
        d->head = c;
    d->tail = c;
    if (was_empty) {
        ev_timer_set(&d->tm, g_delay, 0.);
        ev_timer_start(loop, &d->tm);
    }
}

static void dir_init(struct ev_loop *loop, dir *d, link_t *l, int from, int to)
{
    d->l = l;
    d->from = from;
    d->to = to;
    ev_io_init(&d->rd, on_readable, from, EV_READ);
    ev_io_init(&d->wr, on_writable, to, EV_WRITE);
    ev_timer_init(&d->tm, on_timer, 0., 0.);
    d->rd.data = d->wr.data = d->tm.data = d;
    ev_io_start(loop, &d->rd);
}

static void on_accept(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    int cfd = accept(w->fd, NULL, NULL);
    if (cfd < 0)
        return;
    int sfd = socket(g_upstream->ai_family, SOCK_STREAM, 0);
    if (sfd < 0 || connect(sfd, g_upstream->ai_addr, g_upstream->ai_addrlen) != 0) {
        perror("rttproxy: connecting upstream");
        close(cfd);
        if (sfd >= 0)
            close(sfd);
        return;
    }
    set_nonblock(cfd);
    set_nonblock(sfd);
    link_t *l = calloc(1, sizeof *l);
    if (l == NULL) {
        close(cfd);
        close(sfd);
        return;
    }
    l->cfd = cfd;
    l->sfd = sfd;
    dir_init(loop, &l->up, l, cfd, sfd);
    dir_init(loop, &l->down, l, sfd, cfd);
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: rttproxy UPSTREAM_HOST UPSTREAM_PORT RTT_MS [LISTEN_PORT]\n");
        return 2;
    }
    g_delay = atof(argv[3]) / 2000.0;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
    int rc = getaddrinfo(argv[1], argv[2], &hints, &g_upstream);
    if (rc != 0) {
        fprintf(stderr, "rttproxy: %s:%s: %s\n", argv[1], argv[2], gai_strerror(rc));
        return 1;
    }
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)(argc > 4 ? atoi(argv[4]) : 0))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t slen = sizeof sa;
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, 64) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &slen) != 0) {
        perror("rttproxy: listening");
        return 1;
    }
    set_nonblock(lfd);
    signal(SIGPIPE, SIG_IGN);
    printf("%u\n", (unsigned)ntohs(sa.sin_port));
    fflush(stdout);

    struct ev_loop *loop = EV_DEFAULT;
    ev_io acc;
    ev_io_init(&acc, on_accept, lfd, EV_READ);
    ev_io_start(loop, &acc);
    ev_signal sterm, sint;
    ev_signal_init(&sterm, on_signal, SIGTERM);
    ev_signal_init(&sint, on_signal, SIGINT);
    ev_signal_start(loop, &sterm);
    ev_signal_start(loop, &sint);
    ev_run(loop, 0);
    close(lfd);
    freeaddrinfo(g_upstream);
    return 0;
}

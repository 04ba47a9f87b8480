/*
 * metrics.c — fuzz target: the metrics endpoint (daemon/metrics.h). The first byte of the input picks the part:
 *   0  the rest is the `[metrics] listen` value, through metrics_parse_listen;
 *   1  the rest fills a metrics snapshot (numbers, the service name and the shards' ids as the apply loop would
 *      write them: NUL-terminated), rendered in Prometheus' text format, whose label values must stay quoted;
 *   2  the rest is sent as an HTTP request to a metrics server of this process (127.0.0.1, port picked by the
 *      system) over a TCP connection that is then half-closed. When no answer comes within 200 ms (libmicrohttpd
 *      waits for the rest of a request cut short, up to its 30 s connection timeout) the connection is reset and a
 *      plain GET /metrics must then get the metrics within 10 s: the server is still serving.
 * The HTTP parsing itself is libmicrohttpd's; what the request reaches of ours is the request handler and the
 * renderer, on the server's thread.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/metrics.h"
#include "fuzz.h"

static void listen_value(const uint8_t *data, size_t size)
{
    char text[512], host[256], err[512];
    int port = -1;
    if (size >= sizeof text)
        return;
    memcpy(text, data, size);
    text[size] = '\0';
    if (metrics_parse_listen(text, host, sizeof host, &port, err, sizeof err))
        FUZZ_CHECK(port >= 0 && port <= 65535 && memchr(host, '\0', sizeof host) != NULL);
}

static void render(const uint8_t *data, size_t size)
{
    metrics_snapshot s;
    memset(&s, 0, sizeof s);
    /* The plain numbers in order, then the strings. */
    size_t off = 0;
#define TAKE(field)                                                                                                    \
    do {                                                                                                               \
        size_t k = size - off < sizeof(field) ? size - off : sizeof(field);                                            \
        memcpy(&(field), data + off, k);                                                                               \
        off += k;                                                                                                      \
    } while (0)
    TAKE(s.entries_applied);
    TAKE(s.ops_applied);
    TAKE(s.flushes);
    TAKE(s.rows_written);
    TAKE(s.lag_seconds);
    TAKE(s.checkpoint_timestamp);
    TAKE(s.copy_documents);
    TAKE(s.copy_documents_estimate);
    TAKE(s.txn_oldest_age);
    TAKE(s.start_time);
    uint8_t nshards = 0;
    TAKE(nshards);
    s.nshards = nshards % (METRICS_MAX_SHARDS + 1);
    TAKE(s.service);
    s.service[sizeof s.service - 1] = '\0';
    for (size_t i = 0; i < s.nshards; i++) {
        TAKE(s.shards[i].id);
        s.shards[i].id[sizeof s.shards[i].id - 1] = '\0';
        TAKE(s.shards[i].read_timestamp);
        TAKE(s.shards[i].entries);
        uint8_t refused = 0;
        TAKE(refused);
        s.shards[i].notes_refused = refused & 1;
    }
#undef TAKE
    s.ready = nshards & 1;
    size_t len = 0;
    char *text = metrics_render(&s, &len);
    FUZZ_CHECK(text != NULL);
    FUZZ_CHECK(strlen(text) == len);
    /* Every line is a comment, or a sample: NAME[{labels}] VALUE, with no raw newline inside a label value. */
    for (char *line = text; *line != '\0';) {
        char *nl = strchr(line, '\n');
        FUZZ_CHECK(nl != NULL);
        *nl = '\0';
        if (line[0] != '#') {
            FUZZ_CHECK(strncmp(line, "oplog2pg_", 9) == 0);
            FUZZ_CHECK(strrchr(line, ' ') != NULL);
        }
        line = nl + 1;
    }
    free(text);
}

static metrics_server *server(void)
{
    static metrics_server *m;
    if (m == NULL) {
        char err[512];
        m = metrics_start("127.0.0.1:0", err, sizeof err);
        if (m == NULL) {
            fprintf(stderr, "fuzz metrics: %s\n", err);
            abort();
        }
    }
    return m;
}

/* Sends bytes on a new connection and half-closes it; reads the reply (up to the end, or until nothing came for
 * wait_ms) into reply (NUL-terminated, cut at its size); then resets the connection. False when nothing came. */
static bool exchange(const uint8_t *data, size_t size, int wait_ms, char *reply, size_t cap)
{
    metrics_server *m = server();
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)metrics_port(m))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    FUZZ_CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    size_t off = 0;
    while (off < size) {
        ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (n <= 0)
            break; /* the server may answer and close before reading it all */
        off += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    size_t got = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, wait_ms) != 1)
            break; /* libmicrohttpd waits for the rest of a request cut short, up to its connection timeout */
        char tmp[4096];
        ssize_t n = recv(fd, tmp, sizeof tmp, 0);
        if (n <= 0)
            break;
        size_t k = (size_t)n < cap - 1 - got ? (size_t)n : cap - 1 - got;
        memcpy(reply + got, tmp, k);
        got += k;
    }
    reply[got] = '\0';
    struct linger lg = {.l_onoff = 1, .l_linger = 0}; /* a reset: no TIME_WAIT left behind a million connections */
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
    return got > 0;
}

static void request(const uint8_t *data, size_t size)
{
    static const char GET[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    char reply[4096];
    bool answered = exchange(data, size, 200, reply, sizeof reply);
    bool plain_get = size == sizeof GET - 1 && memcmp(data, GET, size) == 0;
    if (answered && !plain_get)
        return;
    /* A scrape after it (or the plain GET itself) gets the metrics, within 10 s: the server is still serving. */
    FUZZ_CHECK(exchange((const uint8_t *)GET, sizeof GET - 1, 10000, reply, sizeof reply));
    FUZZ_CHECK(strncmp(reply, "HTTP/1.1 200", 12) == 0 && strstr(reply, "oplog2pg_") != NULL);
}

int fuzz_metrics(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    switch (data[0] % 3) {
    case 0:
        listen_value(data + 1, size - 1);
        break;
    case 1:
        render(data + 1, size - 1);
        break;
    default:
        if (size - 1 <= 16384)
            request(data + 1, size - 1);
        break;
    }
    return 0;
}

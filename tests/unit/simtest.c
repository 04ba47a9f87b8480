/* simtest.c — see simtest.h. */
#include "simtest.h"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>

#include "../mongosim/server.h"

static sim_server *srv;
static pthread_t srv_thread;
static int srv_port;

static void *run_server(void *arg)
{
    sim_server_run(arg);
    return NULL;
}

void simtest_start(void)
{
    sim_options opts;
    sim_options_init(&opts);
    bson_error_t err;
    srv = sim_server_new(&opts, NULL, &err);
    ck_assert_msg(srv, "sim_server_new: %s", err.message);
    srv_port = sim_server_port(srv);
    ck_assert_int_gt(srv_port, 0);
    ck_assert_int_eq(pthread_create(&srv_thread, NULL, run_server, srv), 0);
}

void simtest_stop(void)
{
    sim_server_stop(srv);
    pthread_join(srv_thread, NULL);
    sim_server_free(srv);
    srv = NULL;
}

int simtest_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)srv_port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

bson_t *simtest_json(const char *json)
{
    bson_error_t err;
    bson_t *b = bson_new_from_json((const uint8_t *)json, -1, &err);
    ck_assert_msg(b != NULL, "bad JSON in test: %s: %s", json, err.message);
    return b;
}

void simtest_assert_bson_eq(const bson_t *got, const bson_t *want, const char *what)
{
    bool eq = got->len == want->len && memcmp(bson_get_data(got), bson_get_data(want), got->len) == 0;
    if (!eq) {
        char *g = bson_as_canonical_extended_json(got, NULL);
        char *w = bson_as_canonical_extended_json(want, NULL);
        ck_abort_msg("%s:\n got  %s\n want %s", what, g, w);
    }
}

void simtest_sink_emit(void *ctx, const bson_t *body)
{
    simtest_sink *s = ctx;
    ck_assert_int_lt(s->n, 64);
    s->bodies[s->n++] = bson_copy(body);
}

void simtest_sink_clear(simtest_sink *s)
{
    for (int i = 0; i < s->n; i++)
        bson_destroy(s->bodies[i]);
    s->n = 0;
}

const char *simtest_str(const bson_t *b, const char *key)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, b, key) && BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : NULL;
}

bool simtest_sub(const bson_t *b, const char *key, bson_t *out)
{
    bson_iter_t it;
    const uint8_t *d;
    uint32_t l;
    if (!bson_iter_init_find(&it, b, key) || !BSON_ITER_HOLDS_DOCUMENT(&it))
        return false;
    bson_iter_document(&it, &l, &d);
    return bson_init_static(out, d, l);
}

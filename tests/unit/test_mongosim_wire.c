/*
 * test_mongosim_wire.c — mongosim's wire layer against raw sockets: malformed frames (bad lengths, unknown opcodes,
 * truncated or invalid BSON, checksummed or bodiless OP_MSG) must get an error reply or a closed connection, never a
 * crash or hang, and the server must still answer a good hello afterwards. Also: OP_MSG document sequences, a message
 * split across sends, and a client vanishing while its awaitData getMore is parked.
 *
 * Each test runs mongosim in-process on its own thread (sim_server_new with its own loop + sim_server_run).
 */
#include <arpa/inet.h>
#include <bson/bson.h>
#include <check.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../mongosim/server.h"
#include "simtest.h"

Suite *mongosim_wire_suite(void); /* called by the generated runner list */





static void send_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
        if (k <= 0)
            return; /* the server may close first: the read that follows tells */
        b += k;
        n -= (size_t)k;
    }
}

/* Reads exactly n bytes within timeout_ms; 1 ok, 0 closed, -1 timeout. */
static int recv_exact(int fd, uint8_t *p, size_t n, int timeout_ms)
{
    while (n > 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, timeout_ms);
        if (r == 0)
            return -1;
        ssize_t k = recv(fd, p, n, 0);
        if (k <= 0)
            return 0;
        p += k;
        n -= (size_t)k;
    }
    return 1;
}

typedef struct {
    int status; /* 1 reply, 0 closed, -1 timeout */
    int32_t opcode, response_to;
    bson_t *doc; /* the reply's document */
} reply_t;

static reply_t read_reply(int fd, int timeout_ms)
{
    reply_t r = {0};
    uint8_t hdr[16];
    r.status = recv_exact(fd, hdr, 16, timeout_ms);
    if (r.status != 1)
        return r;
    int32_t len;
    memcpy(&len, hdr, 4);
    memcpy(&r.response_to, hdr + 8, 4);
    memcpy(&r.opcode, hdr + 12, 4);
    ck_assert_int_ge(len, 21);
    uint8_t *body = malloc((size_t)len - 16);
    ck_assert_int_eq(recv_exact(fd, body, (size_t)len - 16, timeout_ms), 1);
    size_t off =
        r.opcode == 1 ? 20 : 5; /* OP_REPLY: flags, cursorID, startingFrom, numberReturned; OP_MSG: flags, kind */
    r.doc = bson_new_from_data(body + off, (size_t)len - 16 - off);
    ck_assert_msg(r.doc, "reply document is not valid BSON");
    free(body);
    return r;
}

static void put32(uint8_t *p, int32_t v)
{
    memcpy(p, &v, 4);
}

/* OP_MSG with one kind-0 body; extra raw bytes may follow the sections. */
static size_t build_msg(uint8_t *out, int32_t request_id, uint32_t flags, const bson_t *body)
{
    size_t len = 16 + 4 + 1 + body->len;
    put32(out, (int32_t)len);
    put32(out + 4, request_id);
    put32(out + 8, 0);
    put32(out + 12, 2013);
    memcpy(out + 16, &flags, 4);
    out[20] = 0;
    memcpy(out + 21, bson_get_data(body), body->len);
    return len;
}

static size_t build_query(uint8_t *out, int32_t request_id, const bson_t *q)
{
    size_t at = 16;
    put32(out + at, 0);
    at += 4;
    memcpy(out + at, "admin.$cmd", 11);
    at += 11;
    put32(out + at, 0);
    put32(out + at + 4, -1);
    at += 8;
    memcpy(out + at, bson_get_data(q), q->len);
    at += q->len;
    put32(out, (int32_t)at);
    put32(out + 4, request_id);
    put32(out + 8, 0);
    put32(out + 12, 2004);
    return at;
}

static double field_num(const bson_t *doc, const char *key)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, doc, key) ? bson_iter_as_double(&it) : -1;
}

/* The server still works: a new connection gets a correct hello over OP_QUERY and over OP_MSG. */
static void assert_alive(void)
{
    int fd = simtest_connect();
    uint8_t buf[512];
    bson_t *q = BCON_NEW("isMaster", BCON_INT32(1), "helloOk", BCON_BOOL(true));
    send_all(fd, buf, build_query(buf, 77, q));
    bson_destroy(q);
    reply_t r = read_reply(fd, 3000);
    ck_assert_int_eq(r.status, 1);
    ck_assert_int_eq(r.opcode, 1);
    ck_assert_int_eq(r.response_to, 77);
    ck_assert(field_num(r.doc, "ok") == 1.0);
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, r.doc, "ismaster") && bson_iter_as_bool(&it));
    ck_assert(bson_iter_init_find(&it, r.doc, "maxWireVersion") && BSON_ITER_HOLDS_INT32(&it));
    ck_assert(!bson_iter_init_find(&it, r.doc, "topologyVersion"));
    ck_assert(bson_iter_init_find(&it, r.doc, "setName") && strcmp(bson_iter_utf8(&it, NULL), "rs0") == 0);
    bson_destroy(r.doc);
    bson_t *h = BCON_NEW("hello", BCON_INT32(1), "$db", BCON_UTF8("admin"));
    send_all(fd, buf, build_msg(buf, 78, 0, h));
    bson_destroy(h);
    r = read_reply(fd, 3000);
    ck_assert_int_eq(r.status, 1);
    ck_assert_int_eq(r.opcode, 2013);
    ck_assert(bson_iter_init_find(&it, r.doc, "isWritablePrimary") && bson_iter_as_bool(&it));
    bson_destroy(r.doc);
    close(fd);
}

/* Sends raw bytes; expects either a closed connection or an ok:0 reply. */
static void expect_rejected(const uint8_t *bytes, size_t n, bool want_close)
{
    int fd = simtest_connect();
    send_all(fd, bytes, n);
    reply_t r = read_reply(fd, 3000);
    ck_assert_msg(r.status != -1, "the server neither replied nor closed (hang)");
    if (want_close)
        ck_assert_msg(r.status == 0, "expected the connection to be closed");
    if (r.status == 1) {
        ck_assert_msg(field_num(r.doc, "ok") == 0.0, "a malformed message got ok:1");
        bson_iter_t it;
        ck_assert(bson_iter_init_find(&it, r.doc, "code") && bson_iter_as_int64(&it) != 0);
        bson_destroy(r.doc);
    }
    close(fd);
    assert_alive();
}

START_TEST(test_good_hello)
{
    assert_alive();
}
END_TEST

START_TEST(test_bad_lengths)
{
    uint8_t m[16];
    put32(m, 8); /* < 16 */
    put32(m + 4, 1);
    put32(m + 8, 0);
    put32(m + 12, 2013);
    expect_rejected(m, sizeof m, true);
    put32(m, 64 * 1024 * 1024); /* > 48 MB */
    expect_rejected(m, sizeof m, true);
    put32(m, -5);
    expect_rejected(m, sizeof m, true);
}
END_TEST

START_TEST(test_unknown_opcode)
{
    uint8_t buf[256];
    bson_t *b = BCON_NEW("ping", BCON_INT32(1), "$db", BCON_UTF8("admin"));
    size_t n = build_msg(buf, 5, 0, b);
    put32(buf + 12, 2010); /* OP_COMMAND, removed */
    expect_rejected(buf, n, true);
    put32(buf + 12, 12345);
    expect_rejected(buf, n, true);
    bson_destroy(b);
}
END_TEST

START_TEST(test_bad_bson)
{
    uint8_t buf[256];
    bson_t *b = BCON_NEW("ping", BCON_INT32(1), "$db", BCON_UTF8("admin"));
    size_t n = build_msg(buf, 5, 0, b);
    /* BSON length larger than what the message holds. */
    uint8_t t[256];
    memcpy(t, buf, n);
    put32(t + 21, (int32_t)b->len + 100);
    expect_rejected(t, n, false);
    /* An invalid element type inside the body. */
    memcpy(t, buf, n);
    t[21 + 4] = 0x77;
    expect_rejected(t, n, false);
    /* A body that ends before its trailing NUL (message cut short, lengths consistent). */
    memcpy(t, buf, n);
    put32(t, (int32_t)n - 3);
    expect_rejected(t, n - 3, false);
    /* OP_QUERY whose namespace is not terminated. */
    memset(t, 'a', sizeof t);
    put32(t, 40);
    put32(t + 4, 1);
    put32(t + 8, 0);
    put32(t + 12, 2004);
    expect_rejected(t, 40, false);
    bson_destroy(b);
}
END_TEST

START_TEST(test_op_msg_flags_and_sections)
{
    uint8_t buf[256];
    bson_t *b = BCON_NEW("ping", BCON_INT32(1), "$db", BCON_UTF8("admin"));
    size_t n = build_msg(buf, 5, 1u /* checksumPresent */, b);
    expect_rejected(buf, n, false);
    /* No body: only flagBits. */
    uint8_t m[20];
    put32(m, 20);
    put32(m + 4, 6);
    put32(m + 8, 0);
    put32(m + 12, 2013);
    put32(m + 16, 0);
    expect_rejected(m, sizeof m, false);
    /* Unknown section kind. */
    n = build_msg(buf, 7, 0, b);
    buf[20] = 9;
    expect_rejected(buf, n, false);
    bson_destroy(b);
}
END_TEST

START_TEST(test_document_sequence_insert)
{
    uint8_t buf[1024];
    bson_t *body = BCON_NEW("insert", BCON_UTF8("c"), "$db", BCON_UTF8("wiretest"));
    bson_t *d1 = BCON_NEW("_id", BCON_INT32(1)), *d2 = BCON_NEW("_id", BCON_INT32(2));
    size_t n = build_msg(buf, 9, 0, body);
    size_t sec = n;
    buf[n++] = 1;
    size_t size_at = n;
    n += 4;
    memcpy(buf + n, "documents", 10);
    n += 10;
    memcpy(buf + n, bson_get_data(d1), d1->len);
    n += d1->len;
    memcpy(buf + n, bson_get_data(d2), d2->len);
    n += d2->len;
    put32(buf + size_at, (int32_t)(n - sec - 1));
    put32(buf, (int32_t)n);
    int fd = simtest_connect();
    send_all(fd, buf, n);
    reply_t r = read_reply(fd, 3000);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(field_num(r.doc, "ok") == 1.0 && field_num(r.doc, "n") == 2.0, "insert via document sequence");
    bson_destroy(r.doc);
    close(fd);
    bson_destroy(body);
    bson_destroy(d1);
    bson_destroy(d2);
}
END_TEST

START_TEST(test_split_message)
{
    uint8_t buf[256];
    bson_t *b = BCON_NEW("ping", BCON_INT32(1), "$db", BCON_UTF8("admin"));
    size_t n = build_msg(buf, 11, 0, b);
    int fd = simtest_connect();
    for (size_t i = 0; i < n; i += 3) {
        send_all(fd, buf + i, n - i < 3 ? n - i : 3);
        usleep(1000);
    }
    reply_t r = read_reply(fd, 3000);
    ck_assert_int_eq(r.status, 1);
    ck_assert_int_eq(r.response_to, 11);
    ck_assert(field_num(r.doc, "ok") == 1.0);
    bson_destroy(r.doc);
    /* Two messages in one send: both answered, in order. */
    uint8_t two[512];
    memcpy(two, buf, n);
    size_t m = build_msg(two + n, 12, 0, b);
    send_all(fd, two, n + m);
    r = read_reply(fd, 3000);
    ck_assert_int_eq(r.response_to, 11);
    bson_destroy(r.doc);
    r = read_reply(fd, 3000);
    ck_assert_int_eq(r.response_to, 12);
    bson_destroy(r.doc);
    close(fd);
    bson_destroy(b);
}
END_TEST

START_TEST(test_client_vanishes_mid_getmore)
{
    uint8_t buf[1024];
    int fd = simtest_connect();
    bson_t *ap = BCON_NEW("appendOplog", "[", "{", "op", "n", "ns", "", "o", "{", "msg", "x", "}", "}", "]", "$db",
                          BCON_UTF8("admin"));
    send_all(fd, buf, build_msg(buf, 1, 0, ap));
    reply_t r = read_reply(fd, 3000);
    ck_assert(r.status == 1 && field_num(r.doc, "ok") == 1.0);
    bson_destroy(r.doc);
    bson_t *find = BCON_NEW("find", BCON_UTF8("oplog.rs"), "filter", "{", "}", "tailable", BCON_BOOL(true), "awaitData",
                            BCON_BOOL(true), "$db", BCON_UTF8("local"));
    send_all(fd, buf, build_msg(buf, 2, 0, find));
    r = read_reply(fd, 3000);
    ck_assert_int_eq(r.status, 1);
    bson_iter_t it;
    ck_assert(bson_iter_init(&it, r.doc) && bson_iter_find_descendant(&it, "cursor.id", &it));
    int64_t id = bson_iter_as_int64(&it);
    ck_assert(id != 0);
    bson_destroy(r.doc);
    bson_t *gm = BCON_NEW("getMore", BCON_INT64(id), "collection", BCON_UTF8("oplog.rs"), "maxTimeMS", BCON_INT64(5000),
                          "$db", BCON_UTF8("local"));
    send_all(fd, buf, build_msg(buf, 3, 0, gm));
    usleep(100 * 1000);
    close(fd); /* gone while the getMore is parked */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_alive();
    /* An append wakes the parked getMore; the reply goes nowhere and must not hurt. */
    fd = simtest_connect();
    send_all(fd, buf, build_msg(buf, 4, 0, ap));
    r = read_reply(fd, 3000);
    ck_assert_int_eq(r.status, 1);
    bson_destroy(r.doc);
    close(fd);
    assert_alive();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ck_assert_msg(t1.tv_sec - t0.tv_sec < 3, "the server was blocked by the parked getMore");
    bson_destroy(ap);
    bson_destroy(find);
    bson_destroy(gm);
}
END_TEST

START_TEST(test_fresh_oplog_initiating_set)
{
    /* A fresh member's oplog starts with replSetInitiate's noop, as a real one does. */
    uint8_t buf[512];
    bson_t *find = BCON_NEW("find", BCON_UTF8("oplog.rs"), "filter", "{", "}", "$db", BCON_UTF8("local"));
    int fd = simtest_connect();
    send_all(fd, buf, build_msg(buf, 2, 0, find));
    reply_t r = read_reply(fd, 3000);
    ck_assert_int_eq(r.status, 1);
    bson_iter_t it;
    ck_assert(bson_iter_init(&it, r.doc) && bson_iter_find_descendant(&it, "cursor.firstBatch.0.o.msg", &it));
    ck_assert_str_eq(bson_iter_utf8(&it, NULL), "initiating set");
    ck_assert(bson_iter_init(&it, r.doc) && bson_iter_find_descendant(&it, "cursor.firstBatch.0.op", &it));
    ck_assert_str_eq(bson_iter_utf8(&it, NULL), "n");
    ck_assert(bson_iter_init(&it, r.doc) && !bson_iter_find_descendant(&it, "cursor.firstBatch.1", &it));
    bson_destroy(r.doc);
    bson_destroy(find);
    close(fd);
}
END_TEST

START_TEST(test_tailable_find_on_empty_oplog)
{
    uint8_t buf[512];
    bson_t *find = BCON_NEW("find", BCON_UTF8("oplog.rs"), "filter", "{", "}", "tailable", BCON_BOOL(true), "awaitData",
                            BCON_BOOL(true), "$db", BCON_UTF8("local"));
    int fd = simtest_connect();
    /* A fresh mongosim holds its "initiating set" entry: empty the oplog first. */
    bson_t *trunc = BCON_NEW("mongosimTruncateOplog", BCON_INT32(1), "before", BCON_TIMESTAMP(UINT32_MAX, 0), "$db",
                             BCON_UTF8("admin"));
    send_all(fd, buf, build_msg(buf, 2, 0, trunc));
    reply_t tr = read_reply(fd, 3000);
    ck_assert_int_eq(tr.status, 1);
    bson_destroy(tr.doc);
    bson_destroy(trunc);
    send_all(fd, buf, build_msg(buf, 3, 0, find));
    reply_t r = read_reply(fd, 3000);
    ck_assert_int_eq(r.status, 1);
    bson_iter_t it;
    ck_assert(bson_iter_init(&it, r.doc) && bson_iter_find_descendant(&it, "cursor.id", &it));
    ck_assert_msg(BSON_ITER_HOLDS_INT64(&it) && bson_iter_as_int64(&it) == 0,
                  "a tailable find on an empty oplog must return cursor id 0");
    bson_destroy(r.doc);
    /* Another filter shape is refused clearly. */
    bson_t *bad =
        BCON_NEW("find", BCON_UTF8("oplog.rs"), "filter", "{", "op", BCON_UTF8("i"), "}", "$db", BCON_UTF8("local"));
    send_all(fd, buf, build_msg(buf, 4, 0, bad));
    r = read_reply(fd, 3000);
    ck_assert_int_eq(r.status, 1);
    ck_assert(field_num(r.doc, "ok") == 0.0 && field_num(r.doc, "code") == 2.0);
    bson_destroy(r.doc);
    close(fd);
    bson_destroy(find);
    bson_destroy(bad);
}
END_TEST

START_TEST(test_unknown_command_error)
{
    uint8_t buf[256];
    bson_t *b = BCON_NEW("frobnicate", BCON_INT32(1), "$db", BCON_UTF8("admin"));
    int fd = simtest_connect();
    send_all(fd, buf, build_msg(buf, 3, 0, b));
    reply_t r = read_reply(fd, 3000);
    ck_assert_int_eq(r.status, 1);
    ck_assert(field_num(r.doc, "ok") == 0.0);
    ck_assert(field_num(r.doc, "code") == 59.0);
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, r.doc, "errmsg"));
    ck_assert_str_eq(bson_iter_utf8(&it, NULL), "no such command: 'frobnicate'");
    ck_assert(bson_iter_init_find(&it, r.doc, "codeName"));
    ck_assert_str_eq(bson_iter_utf8(&it, NULL), "CommandNotFound");
    bson_destroy(r.doc);
    close(fd);
    bson_destroy(b);
}
END_TEST

Suite *mongosim_wire_suite(void)
{
    Suite *s = suite_create("mongosim_wire");
    TCase *tc = tcase_create("wire");
    tcase_add_checked_fixture(tc, simtest_start, simtest_stop);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_good_hello);
    tcase_add_test(tc, test_bad_lengths);
    tcase_add_test(tc, test_unknown_opcode);
    tcase_add_test(tc, test_bad_bson);
    tcase_add_test(tc, test_op_msg_flags_and_sections);
    tcase_add_test(tc, test_document_sequence_insert);
    tcase_add_test(tc, test_split_message);
    tcase_add_test(tc, test_client_vanishes_mid_getmore);
    tcase_add_test(tc, test_unknown_command_error);
    tcase_add_test(tc, test_fresh_oplog_initiating_set);
    tcase_add_test(tc, test_tailable_find_on_empty_oplog);
    suite_add_tcase(s, tc);
    return s;
}

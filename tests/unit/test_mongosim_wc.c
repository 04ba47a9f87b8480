/*
 * test_mongosim_wc.c — mongosim over the wire: writes with writeConcern {w: "majority"} against a majority commit
 * point that lags (mongosimMajority): held until the point covers them, answered at their wtimeout with the server's
 * writeConcernError, answered with 11602 when a rollback (or a step-down) interrupts them, and w:1 / no write concern
 * answered at once; then a time-series collection and a view created over the wire: their oplog entries and
 * listCollections. The shapes and their sources are in tests/mongosim/commands.c ("write concern") and ddl.c.
 *
 * Each test runs mongosim in-process on its own thread and talks OP_MSG on raw sockets. Tests wait for events
 * (mongosimStatus writeConcernWaits, a reply), and use a timeout only to show that no reply came.
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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sends {body} as an OP_MSG (kind-0 section) with this request id. */
static void send_msg(int fd, int32_t request_id, const bson_t *body)
{
    size_t len = 16 + 4 + 1 + body->len;
    uint8_t *buf = malloc(len);
    int32_t v[4] = {(int32_t)len, request_id, 0, 2013};
    uint32_t flags = 0;
    memcpy(buf, v, 16);
    memcpy(buf + 16, &flags, 4);
    buf[20] = 0;
    memcpy(buf + 21, bson_get_data(body), body->len);
    ck_assert_int_eq(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
    free(buf);
}

static bool recv_exact(int fd, uint8_t *p, size_t n, int timeout_ms)
{
    while (n > 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, timeout_ms) <= 0)
            return false;
        ssize_t k = recv(fd, p, n, 0);
        if (k <= 0)
            return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

/* The next reply's document, checked to answer request_id; NULL when none came within timeout_ms. */
static bson_t *read_reply(int fd, int32_t request_id, int timeout_ms)
{
    uint8_t hdr[16];
    if (!recv_exact(fd, hdr, 16, timeout_ms))
        return NULL;
    int32_t len, response_to, opcode;
    memcpy(&len, hdr, 4);
    memcpy(&response_to, hdr + 8, 4);
    memcpy(&opcode, hdr + 12, 4);
    ck_assert_int_eq(opcode, 2013);
    ck_assert_int_eq(response_to, request_id);
    ck_assert_int_gt(len, 21);
    uint8_t *body = malloc((size_t)len - 16);
    ck_assert(recv_exact(fd, body, (size_t)len - 16, 5000));
    bson_t *doc = bson_new_from_data(body + 5, (size_t)len - 21);
    free(body);
    ck_assert_msg(doc != NULL, "reply is not valid BSON");
    return doc;
}

/* True when nothing arrives on fd within ms. */
static bool silent_for(int fd, int ms)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    return poll(&pfd, 1, ms) == 0;
}

static int32_t next_id = 100;

/* Runs a command (JSON, with its $db) and returns the reply. */
static bson_t *run(int fd, const char *json)
{
    bson_t *cmd = simtest_json(json);
    int32_t id = next_id++;
    send_msg(fd, id, cmd);
    bson_destroy(cmd);
    bson_t *r = read_reply(fd, id, 5000);
    ck_assert_msg(r != NULL, "no reply to %s", json);
    return r;
}

static void assert_reply_eq(const bson_t *got, const char *json, const char *what)
{
    bson_t *want = simtest_json(json);
    if (got->len != want->len || memcmp(bson_get_data(got), bson_get_data(want), got->len) != 0) {
        char *g = bson_as_canonical_extended_json(got, NULL);
        char *w = bson_as_canonical_extended_json(want, NULL);
        ck_abort_msg("%s:\n got  %s\n want %s", what, g, w);
    }
    bson_destroy(want);
}

static int64_t field_i64(const bson_t *doc, const char *key)
{
    bson_iter_t it;
    ck_assert_msg(bson_iter_init_find(&it, doc, key), "no field %s", key);
    return bson_iter_as_int64(&it);
}

/* Runs a command and checks its reply has ok: 1. */
static void run_ok(int fd, const char *json)
{
    bson_t *r = run(fd, json);
    bson_iter_t it;
    if (!bson_iter_init_find(&it, r, "ok") || bson_iter_as_double(&it) != 1.0) {
        char *s = bson_as_relaxed_extended_json(r, NULL);
        ck_abort_msg("%s failed: %s", json, s);
    }
    bson_destroy(r);
}

/* Waits (for the event, bounded) until mongosimStatus reports `want` writes waiting for their write concern. */
static void wait_waits(int ctl, int64_t want)
{
    double until = now_s() + 5;
    for (;;) {
        bson_t *st = run(ctl, "{\"mongosimStatus\": 1, \"$db\": \"admin\"}");
        int64_t n = field_i64(st, "writeConcernWaits");
        bson_destroy(st);
        if (n == want)
            return;
        ck_assert_msg(now_s() < until, "writeConcernWaits stayed %lld, want %lld", (long long)n, (long long)want);
        usleep(2000);
    }
}

/* The newest oplog entry. */
static bson_t *newest_entry(int ctl)
{
    bson_t *r = run(ctl, "{\"find\": \"oplog.rs\", \"$db\": \"local\", \"sort\": {\"$natural\": -1}, \"limit\": 1}");
    bson_iter_t it, e;
    ck_assert(bson_iter_init(&it, r) && bson_iter_find_descendant(&it, "cursor.firstBatch.0", &e) &&
              BSON_ITER_HOLDS_DOCUMENT(&e));
    uint32_t len;
    const uint8_t *data;
    bson_iter_document(&e, &len, &data);
    bson_t *out = bson_new_from_data(data, len);
    bson_destroy(r);
    return out;
}

static void freeze(int ctl)
{
    run_ok(ctl, "{\"mongosimMajority\": {\"freeze\": true}, \"$db\": \"admin\"}");
}

#define INSERT_MAJ(id, extra)                                                                                          \
    "{\"insert\": \"c\", \"$db\": \"wc\", \"documents\": [{\"_id\": " id "}], \"writeConcern\": {\"w\": "              \
    "\"majority\"" extra "}}"

/* Held while frozen: the write is applied and logged at once (the oplog has it), its reply waits; released by
 * {follow: true} and, for a second write, by {advanceTo: newest}. The replies are the plain ones. */
START_TEST(test_majority_write_held_until_released)
{
    int a = simtest_connect(), ctl = simtest_connect();
    freeze(ctl);
    bson_t *cmd = simtest_json(INSERT_MAJ("1", ""));
    send_msg(a, 1, cmd);
    bson_destroy(cmd);
    wait_waits(ctl, 1);
    ck_assert_msg(silent_for(a, 200), "a w:majority insert was answered while the commit point was frozen");
    bson_t *e = newest_entry(ctl);
    ck_assert_str_eq(simtest_str(e, "op"), "i");
    ck_assert_str_eq(simtest_str(e, "ns"), "wc.c");
    bson_destroy(e);
    run_ok(ctl, "{\"mongosimMajority\": {\"follow\": true}, \"$db\": \"admin\"}");
    bson_t *r = read_reply(a, 1, 5000);
    ck_assert_msg(r != NULL, "no reply after the commit point was released");
    assert_reply_eq(r, "{\"n\": 1, \"ok\": 1.0}", "released insert");
    bson_destroy(r);
    wait_waits(ctl, 0);

    /* advanceTo the newest entry covers the write. An update that changes nothing waits too: a server waits on the
     * newest entry when the command wrote none (setLastOpToSystemLastOpTime). */
    freeze(ctl);
    cmd = simtest_json(INSERT_MAJ("2", ", \"wtimeout\": 60000"));
    send_msg(a, 2, cmd);
    bson_destroy(cmd);
    wait_waits(ctl, 1);
    ck_assert(silent_for(a, 100));
    bson_t *st = run(ctl, "{\"mongosimStatus\": 1, \"$db\": \"admin\"}");
    bson_iter_t it;
    uint32_t secs, inc;
    ck_assert(bson_iter_init_find(&it, st, "lastTs"));
    bson_iter_timestamp(&it, &secs, &inc);
    bson_destroy(st);
    char adv[200];
    snprintf(adv, sizeof adv,
             "{\"mongosimMajority\": {\"advanceTo\": {\"$timestamp\": {\"t\": %u, \"i\": %u}}}, \"$db\": \"admin\"}",
             secs, inc);
    run_ok(ctl, adv);
    r = read_reply(a, 2, 5000);
    ck_assert(r != NULL);
    assert_reply_eq(r, "{\"n\": 1, \"ok\": 1.0}", "insert released by advanceTo");
    bson_destroy(r);

    r = run(a, "{\"insert\": \"c\", \"$db\": \"wc\", \"documents\": [{\"_id\": 3}]}"); /* past the point, w:1 */
    assert_reply_eq(r, "{\"n\": 1, \"ok\": 1.0}", "w:1 insert while frozen");
    bson_destroy(r);
    cmd = simtest_json(
        "{\"update\": \"c\", \"$db\": \"wc\", \"updates\": [{\"q\": {\"_id\": 99}, \"u\": {\"$set\": {\"x\": 1}}}], "
        "\"writeConcern\": {\"w\": \"majority\"}}");
    send_msg(a, 3, cmd);
    bson_destroy(cmd);
    wait_waits(ctl, 1);
    ck_assert(silent_for(a, 100));
    run_ok(ctl, "{\"mongosimMajority\": {\"follow\": true}, \"$db\": \"admin\"}");
    r = read_reply(a, 3, 5000);
    ck_assert(r != NULL);
    assert_reply_eq(r, "{\"n\": 0, \"nModified\": 0, \"ok\": 1.0}", "no-op update released");
    bson_destroy(r);
    close(a);
    close(ctl);
}
END_TEST

/* wtimeout: at the timeout, ok: 1 with n and the server's writeConcernError (code 64 WriteConcernFailed in 7.0,
 * errInfo {wtimeout: true, writeConcern: {w, wtimeout, provenance}}); the write stays applied. An error reply of a
 * command that ran (drop of a missing collection: 26) waits too and gets writeConcernError after its error fields. */
START_TEST(test_majority_write_wtimeout)
{
    int a = simtest_connect(), ctl = simtest_connect();
    freeze(ctl);
    double t0 = now_s();
    bson_t *r = run(a, INSERT_MAJ("1", ", \"wtimeout\": 300"));
    double waited = now_s() - t0;
    ck_assert_msg(waited >= 0.29, "answered after %.3f s, before its wtimeout of 300 ms", waited);
    assert_reply_eq(r,
                    "{\"n\": 1, \"writeConcernError\": {\"code\": 64, \"codeName\": \"WriteConcernFailed\", "
                    "\"errmsg\": \"waiting for replication timed out\", \"errInfo\": {\"wtimeout\": true, "
                    "\"writeConcern\": {\"w\": \"majority\", \"wtimeout\": 300, \"provenance\": \"clientSupplied\"}}}, "
                    "\"ok\": 1.0}",
                    "wtimeout reply");
    bson_destroy(r);
    r = run(ctl, "{\"find\": \"c\", \"$db\": \"wc\", \"filter\": {}}");
    bson_iter_t it, d;
    ck_assert(bson_iter_init(&it, r) && bson_iter_find_descendant(&it, "cursor.firstBatch.0._id", &d));
    ck_assert_int_eq(bson_iter_as_int64(&d), 1);
    bson_destroy(r);

    r = run(a, "{\"drop\": \"missing\", \"$db\": \"wc\", \"writeConcern\": {\"w\": \"majority\", \"wtimeout\": 50, "
               "\"j\": true}}");
    assert_reply_eq(r,
                    "{\"ok\": 0.0, \"errmsg\": \"ns not found\", \"code\": 26, \"codeName\": \"NamespaceNotFound\", "
                    "\"writeConcernError\": {\"code\": 64, \"codeName\": \"WriteConcernFailed\", \"errmsg\": "
                    "\"waiting for replication timed out\", \"errInfo\": {\"wtimeout\": true, \"writeConcern\": "
                    "{\"w\": \"majority\", \"j\": true, \"wtimeout\": 50, \"provenance\": \"clientSupplied\"}}}}",
                    "error reply at its wtimeout");
    bson_destroy(r);
    close(a);
    close(ctl);
}
END_TEST

/* A rollback while the write waits: the write is rolled back (it was past the commit point) and the client gets
 * ok: 1, n, and writeConcernError 11602 InterruptedDueToReplStateChange "operation was interrupted". A step-down
 * answers a waiting write the same way. */
START_TEST(test_majority_write_rollback)
{
    int a = simtest_connect(), ctl = simtest_connect();
    freeze(ctl);
    bson_t *cmd = simtest_json(INSERT_MAJ("1", ""));
    send_msg(a, 1, cmd);
    bson_destroy(cmd);
    wait_waits(ctl, 1);
    ck_assert(silent_for(a, 100));
    bson_t *rb = run(ctl, "{\"mongosimRollback\": 1, \"$db\": \"admin\"}");
    ck_assert_int_eq(field_i64(rb, "removed"), 2); /* the create of wc.c and the insert */
    bson_destroy(rb);
    bson_t *r = read_reply(a, 1, 5000);
    ck_assert_msg(r != NULL, "no reply after the rollback");
    assert_reply_eq(r,
                    "{\"n\": 1, \"writeConcernError\": {\"code\": 11602, \"codeName\": "
                    "\"InterruptedDueToReplStateChange\", \"errmsg\": \"operation was interrupted\", \"errInfo\": "
                    "{\"writeConcern\": {\"w\": \"majority\", \"wtimeout\": 0, \"provenance\": \"clientSupplied\"}}}, "
                    "\"ok\": 1.0}",
                    "reply after a rollback");
    bson_destroy(r);
    r = run(ctl, "{\"count\": \"c\", \"$db\": \"wc\"}");
    ck_assert_int_eq(field_i64(r, "n"), 0); /* rolled back */
    bson_destroy(r);
    wait_waits(ctl, 0);

    freeze(ctl);
    cmd = simtest_json(INSERT_MAJ("2", ""));
    send_msg(a, 2, cmd);
    bson_destroy(cmd);
    wait_waits(ctl, 1);
    run_ok(ctl, "{\"mongosimStepDown\": 200, \"$db\": \"admin\"}");
    r = read_reply(a, 2, 5000);
    ck_assert_msg(r != NULL, "no reply after the step-down");
    bson_iter_t it, code;
    ck_assert(bson_iter_init(&it, r) && bson_iter_find_descendant(&it, "writeConcernError.code", &code));
    ck_assert_int_eq(bson_iter_as_int64(&code), 11602);
    bson_destroy(r);
    close(a);
    close(ctl);
}
END_TEST

/* w: 1, no write concern, or w: "majority" with the commit point following: answered at once, as before. */
START_TEST(test_w1_unaffected)
{
    int a = simtest_connect(), ctl = simtest_connect();
    freeze(ctl);
    bson_t *r = run(a, "{\"insert\": \"c\", \"$db\": \"wc\", \"documents\": [{\"_id\": 1}], \"writeConcern\": {\"w\": "
                       "1, \"wtimeout\": 10}}");
    assert_reply_eq(r, "{\"n\": 1, \"ok\": 1.0}", "w:1 insert");
    bson_destroy(r);
    r = run(a, "{\"insert\": \"c\", \"$db\": \"wc\", \"documents\": [{\"_id\": 2}]}");
    assert_reply_eq(r, "{\"n\": 1, \"ok\": 1.0}", "insert without a write concern");
    bson_destroy(r);
    r = run(a, "{\"create\": \"d\", \"$db\": \"wc\", \"writeConcern\": {\"w\": 1}}");
    assert_reply_eq(r, "{\"ok\": 1.0}", "w:1 create");
    bson_destroy(r);
    run_ok(ctl, "{\"mongosimMajority\": {\"follow\": true}, \"$db\": \"admin\"}");
    r = run(a, INSERT_MAJ("3", ""));
    assert_reply_eq(r, "{\"n\": 1, \"ok\": 1.0}", "w:majority insert, commit point following");
    bson_destroy(r);
    wait_waits(ctl, 0);
    close(a);
    close(ctl);
}
END_TEST

/* The entries after ts `after` (secs, inc), as an array document. */
static bson_t *entries_after(int ctl, uint32_t secs, uint32_t inc)
{
    char q[300];
    snprintf(q, sizeof q,
             "{\"find\": \"oplog.rs\", \"$db\": \"local\", \"filter\": {\"ts\": {\"$gt\": {\"$timestamp\": {\"t\": %u, "
             "\"i\": %u}}}}}",
             secs, inc);
    bson_t *r = run(ctl, q);
    bson_iter_t it, b;
    ck_assert(bson_iter_init(&it, r) && bson_iter_find_descendant(&it, "cursor.firstBatch", &b) &&
              BSON_ITER_HOLDS_ARRAY(&b));
    uint32_t len;
    const uint8_t *data;
    bson_iter_array(&b, &len, &data);
    bson_t *out = bson_new_from_data(data, len);
    bson_destroy(r);
    return out;
}

static void last_ts(int ctl, uint32_t *secs, uint32_t *inc)
{
    bson_t *st = run(ctl, "{\"mongosimStatus\": 1, \"$db\": \"admin\"}");
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, st, "lastTs"));
    bson_iter_timestamp(&it, secs, inc);
    bson_destroy(st);
}

/* A time-series collection and a view through the command layer: the create command's generic arguments are
 * ignored; the oplog gets the buckets create, its index, system.views and the view definitions, and the two
 * measurements as one bucket inserted into tsdb.system.buckets.w (nothing on tsdb.w); listCollections shows w as
 * "timeseries" and v as a view; reading w is refused rather than answered empty. */
START_TEST(test_timeseries_over_the_wire)
{
    int a = simtest_connect();
    uint32_t secs, inc;
    last_ts(a, &secs, &inc);
    run_ok(a, "{\"create\": \"w\", \"$db\": \"tsdb\", \"timeseries\": {\"timeField\": \"t\", \"metaField\": \"m\"}, "
              "\"writeConcern\": {\"w\": 1}, \"lsid\": {\"id\": {\"$binary\": {\"base64\": "
              "\"AAAAAAAAQACAAAAAAAAAAA==\", \"subType\": \"04\"}}}}");
    run_ok(a, "{\"create\": \"v\", \"$db\": \"tsdb\", \"viewOn\": \"w\", \"pipeline\": [{\"$match\": {\"m\": 1}}]}");
    bson_t *r = run(a, "{\"insert\": \"w\", \"$db\": \"tsdb\", \"documents\": [{\"t\": {\"$date\": {\"$numberLong\": "
                       "\"1700000000000\"}}, \"m\": 1, \"x\": 2}, {\"t\": {\"$date\": {\"$numberLong\": "
                       "\"1700000001000\"}}, \"m\": 1, \"x\": 3}]}");
    assert_reply_eq(r, "{\"n\": 2, \"ok\": 1.0}", "insert into the time-series collection");
    bson_destroy(r);

    bson_t *es = entries_after(a, secs, inc);
    static const char *const want[][3] = {
        {"c", "tsdb.$cmd", "create"},      {"c", "tsdb.$cmd", "createIndexes"}, {"c", "tsdb.$cmd", "create"},
        {"i", "tsdb.system.views", "_id"}, {"i", "tsdb.system.views", "_id"},   {"i", "tsdb.system.buckets.w", "_id"},
    };
    bson_iter_t it;
    int n = 0;
    ck_assert(bson_iter_init(&it, es));
    while (bson_iter_next(&it)) {
        ck_assert_int_lt(n, 6);
        uint32_t len;
        const uint8_t *data;
        bson_t e, o;
        bson_iter_t f;
        bson_iter_document(&it, &len, &data);
        ck_assert(bson_init_static(&e, data, len));
        ck_assert_str_eq(simtest_str(&e, "op"), want[n][0]);
        ck_assert_str_eq(simtest_str(&e, "ns"), want[n][1]);
        ck_assert(bson_iter_init_find(&f, &e, "o") && BSON_ITER_HOLDS_DOCUMENT(&f));
        bson_iter_document(&f, &len, &data);
        ck_assert(bson_init_static(&o, data, len));
        ck_assert(bson_iter_init(&f, &o) && bson_iter_next(&f));
        ck_assert_str_eq(bson_iter_key(&f), want[n][2]);
        if (n == 0)
            ck_assert_str_eq(bson_iter_utf8(&f, NULL), "system.buckets.w");
        if (n == 2)
            ck_assert_str_eq(bson_iter_utf8(&f, NULL), "system.views");
        if (n == 4)
            ck_assert_str_eq(bson_iter_utf8(&f, NULL), "tsdb.v");
        if (n == 5) {
            bson_iter_t top, v;
            ck_assert(bson_iter_init(&top, &o) && bson_iter_find_descendant(&top, "data.x.0", &v));
            ck_assert_int_eq(bson_iter_as_int64(&v), 2);
            /* Both measurements (same meta, same hour) in one bucket, one insert (tsbucket.c). */
            ck_assert(bson_iter_init(&top, &o) && bson_iter_find_descendant(&top, "data.x.1", &v));
            ck_assert_int_eq(bson_iter_as_int64(&v), 3);
            ck_assert(bson_iter_init_find(&v, &o, "meta"));
            ck_assert_int_eq(bson_iter_as_int64(&v), 1);
        }
        n++;
    }
    ck_assert_int_eq(n, 6);
    bson_destroy(es);

    r = run(a, "{\"listCollections\": 1, \"$db\": \"tsdb\", \"filter\": {\"name\": \"w\"}}");
    bson_iter_t d;
    ck_assert(bson_iter_init(&it, r) && bson_iter_find_descendant(&it, "cursor.firstBatch.0", &d));
    uint32_t len;
    const uint8_t *data;
    bson_t w;
    bson_iter_document(&d, &len, &data);
    ck_assert(bson_init_static(&w, data, len));
    assert_reply_eq(&w,
                    "{\"name\": \"w\", \"type\": \"timeseries\", \"options\": {\"timeseries\": {\"timeField\": \"t\", "
                    "\"metaField\": \"m\", \"granularity\": \"seconds\", \"bucketMaxSpanSeconds\": 3600}}, \"info\": "
                    "{\"readOnly\": false}}",
                    "listCollections entry of w");
    bson_destroy(r);
    r = run(a, "{\"listCollections\": 1, \"$db\": \"tsdb\", \"filter\": {\"type\": \"view\"}, \"nameOnly\": true}");
    ck_assert(bson_iter_init(&it, r) && bson_iter_find_descendant(&it, "cursor.firstBatch.0", &d));
    bson_iter_document(&d, &len, &data);
    ck_assert(bson_init_static(&w, data, len));
    assert_reply_eq(&w, "{\"name\": \"v\", \"type\": \"view\"}", "listCollections entry of v");
    ck_assert(!bson_iter_init(&it, r) || !bson_iter_find_descendant(&it, "cursor.firstBatch.1", &d));
    bson_destroy(r);

    r = run(a, "{\"find\": \"w\", \"$db\": \"tsdb\", \"filter\": {}}");
    ck_assert_int_eq(field_i64(r, "code"), 2);
    bson_destroy(r);
    r = run(a, "{\"count\": \"system.buckets.w\", \"$db\": \"tsdb\"}");
    ck_assert_int_eq(field_i64(r, "n"), 1); /* one bucket holds both measurements */
    bson_destroy(r);
    close(a);
}
END_TEST

Suite *mongosim_wc_suite(void); /* called by the generated runner list */

Suite *mongosim_wc_suite(void)
{
    Suite *s = suite_create("mongosim_wc");
    TCase *tc = tcase_create("wc");
    tcase_add_checked_fixture(tc, simtest_start, simtest_stop);
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_majority_write_held_until_released);
    tcase_add_test(tc, test_majority_write_wtimeout);
    tcase_add_test(tc, test_majority_write_rollback);
    tcase_add_test(tc, test_w1_unaffected);
    tcase_add_test(tc, test_timeseries_over_the_wire);
    suite_add_tcase(s, tc);
    return s;
}

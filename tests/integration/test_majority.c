/*
 * test_majority.c — [mongodb] read_concern against a majority commit point that lags (mongosimMajority) and a
 * rollback (mongosimRollback): in majority mode nothing past the commit point reaches PostgreSQL, and a rollback
 * changes nothing for the daemon; in local mode the daemon applies past it, a rollback stops it with exit code 4 and
 * a message naming the diverged position, and --reimport resyncs; the initial copy in majority mode starts at the
 * commit point and copies only committed data. Each test ends with an exact comparison.
 *
 * mongosim only (the faults are its test commands). Tests wait for events (a checkpoint, oplog getMores answered
 * after a write, the daemon's exit), never for a time.
 */
#include <check.h>
#include <mongoc/mongoc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/daemonenv.h"
#include "../lib/proc.h"
#include "../lib/skip.h"

/* Freezing the majority commit point and rolling back are mongosim's test commands (mongosimMajority,
 * mongosimRollback): a real replica set does neither on request. */
#define NEED_SIM()                                                                                                     \
    do {                                                                                                               \
        if (!denv_using_sim())                                                                                         \
            SKIP_TEST("needs mongosim's mongosimMajority and mongosimRollback");                                       \
    } while (0)

/* Runs a mongosim command on admin; the reply goes to *reply when given. */
static void sim_cmd(const denv *e, bson_t *cmd, bson_t *reply)
{
    mongoc_client_t *c = mongoc_client_new(e->uri);
    ck_assert(c != NULL);
    bson_error_t err;
    bson_t tmp;
    bool ok = mongoc_client_command_simple(c, "admin", cmd, NULL, reply ? reply : &tmp, &err);
    bson_destroy(cmd);
    mongoc_client_destroy(c);
    ck_assert_msg(ok, "mongosim command failed: %s (code %u)", err.message, err.code);
    if (!reply)
        bson_destroy(&tmp);
}

/* A field of mongosimStatus: a Timestamp as secs << 32 | inc, or a number. */
static uint64_t sim_status(const denv *e, const char *field)
{
    bson_t reply;
    bson_iter_t it;
    sim_cmd(e, BCON_NEW("mongosimStatus", BCON_INT32(1)), &reply);
    ck_assert_msg(bson_iter_init_find(&it, &reply, field), "mongosimStatus has no %s", field);
    uint64_t v;
    if (BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        uint32_t s, i;
        bson_iter_timestamp(&it, &s, &i);
        v = (uint64_t)s << 32 | i;
    } else {
        v = (uint64_t)bson_iter_as_int64(&it);
    }
    bson_destroy(&reply);
    return v;
}

static void majority(const denv *e, const char *how)
{
    sim_cmd(e, BCON_NEW("mongosimMajority", "{", how, BCON_BOOL(true), "}"), NULL);
}

/* Waits until the checkpoint is `want`; aborts when the daemon exits. */
static void wait_checkpoint(denv *e, uint64_t want, double timeout_s)
{
    double until = denv_now() + timeout_s;
    while (denv_checkpoint_ts(e->service) != want) {
        if (e->daemon.pid != 0 && proc_wait(&e->daemon, 0.0)) {
            denv_show_log(e);
            ck_abort_msg("the daemon exited with %d", proc_exit_code(&e->daemon));
        }
        ck_assert_msg(denv_now() < until, "the checkpoint %llx did not reach %llx",
                      (unsigned long long)denv_checkpoint_ts(e->service), (unsigned long long)want);
        usleep(50 * 1000);
    }
}

/* Waits until mongosim has answered two more oplog getMores: the reader has asked again after the writes before. */
static void wait_reader_polled(denv *e)
{
    uint64_t base = sim_status(e, "oplogGetMores");
    double until = denv_now() + 60;
    while (sim_status(e, "oplogGetMores") < base + 2) {
        ck_assert_msg(denv_now() < until, "the reader issued no getMore");
        usleep(50 * 1000);
    }
}

static int64_t rows(const denv *e, const char *db)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s%s\".\"c\"", e->prefix, db);
    return denv_pg_int(sql);
}

static int64_t checkpoint_term(const denv *e)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT term FROM oplog2pg.checkpoint WHERE service = '%s'", e->service);
    return denv_pg_int(sql);
}

/* Majority mode: with the commit point frozen, the checkpoint stops at it and the later rows stay out of
 * PostgreSQL; a rollback of those rows does not touch the daemon, which goes on in the new term. */
START_TEST(test_majority_frozen_then_rollback)
{
    NEED_SIM();
    denv e;
    char db[64];
    denv_start(&e, "maj_fr", NULL, NULL);
    snprintf(db, sizeof db, "%sa", e.prefix);
    denv_daemon_start(&e); /* a fresh mongosim: the copy starts at the "initiating set" entry */
    denv_insert_range(&e, db, "c", 1, 50);
    ck_assert(denv_wait_caught_up(&e, 120));
    ck_assert_int_eq(rows(&e, "a"), 50);

    majority(&e, "freeze");
    uint64_t point = sim_status(&e, "majorityTs");
    denv_insert_range(&e, db, "c", 51, 100);
    ck_assert_uint_gt(denv_newest_ts(e.uri), point);
    wait_reader_polled(&e);
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), point);
    ck_assert_int_eq(rows(&e, "a"), 50);

    bson_t reply;
    sim_cmd(&e, BCON_NEW("mongosimRollback", BCON_INT32(1)), &reply);
    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, &reply, "removed") && bson_iter_as_int64(&it) == 50);
    bson_destroy(&reply);
    denv_insert_range(&e, db, "c", 101, 120);
    ck_assert(denv_wait_caught_up(&e, 120));
    ck_assert_int_eq(checkpoint_term(&e), 2);
    ck_assert_int_eq(rows(&e, "a"), 70);
    ck_assert_msg(!denv_file_contains(e.log, "rollback:"), "the daemon saw a rollback in majority mode");
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* Majority mode: the commit point advances, and the rows after the old one follow. */
START_TEST(test_majority_advance)
{
    NEED_SIM();
    denv e;
    char db[64];
    denv_start(&e, "maj_adv", NULL, NULL);
    snprintf(db, sizeof db, "%sa", e.prefix);
    denv_daemon_start(&e);
    majority(&e, "freeze");
    uint64_t point = sim_status(&e, "majorityTs");
    denv_insert_range(&e, db, "c", 1, 40);
    wait_reader_polled(&e);
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), point);
    uint64_t newest = denv_newest_ts(e.uri);
    sim_cmd(
        &e,
        BCON_NEW("mongosimMajority", "{", "advanceTo", BCON_TIMESTAMP((uint32_t)(newest >> 32), (uint32_t)newest), "}"),
        NULL);
    wait_checkpoint(&e, newest, 120);
    ck_assert_int_eq(rows(&e, "a"), 40);
    majority(&e, "follow");
    denv_insert_range(&e, db, "c", 41, 60);
    ck_assert(denv_wait_caught_up(&e, 120));
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* Local mode: entries past the commit point are applied; the rollback is detected and explained (exit code 4), and
 * --reimport resyncs to an exact match. */
START_TEST(test_local_rollback_detected)
{
    NEED_SIM();
    denv e;
    char db[64];
    denv_start(&e, "maj_loc", NULL, "\n[mongodb]\nread_concern = local\n");
    snprintf(db, sizeof db, "%sa", e.prefix);
    denv_daemon_start(&e);
    denv_insert_range(&e, db, "c", 1, 20);
    ck_assert(denv_wait_caught_up(&e, 120));
    majority(&e, "freeze");
    uint64_t point = sim_status(&e, "majorityTs");
    denv_insert_range(&e, db, "c", 21, 40);
    ck_assert(denv_wait_caught_up(&e, 120)); /* local: past the commit point */
    uint64_t applied = denv_checkpoint_ts(e.service);
    ck_assert_uint_gt(applied, point);
    ck_assert_int_eq(rows(&e, "a"), 40);

    sim_cmd(&e, BCON_NEW("mongosimRollback", BCON_INT32(1)), NULL);
    ck_assert_msg(proc_wait(&e.daemon, 120), "the daemon did not stop after the rollback");
    if (proc_exit_code(&e.daemon) != 4)
        denv_show_log(&e);
    ck_assert_int_eq(proc_exit_code(&e.daemon), 4);
    char pos[64], common[64];
    snprintf(pos, sizeof pos, "resume point %u:%u (term 1)", (unsigned)(applied >> 32), (unsigned)applied);
    snprintf(common, sizeof common, "agree on is %u:%u (term 1)", (unsigned)(point >> 32), (unsigned)point);
    ck_assert_msg(denv_file_contains(e.log, "rollback: MongoDB no longer holds the"), "no rollback message");
    ck_assert_msg(denv_file_contains(e.log, pos), "the message does not name %s", pos);
    ck_assert_msg(denv_file_contains(e.log, common), "the message does not name the common point: %s", common);
    ck_assert(denv_file_contains(e.log, "--reimport"));
    ck_assert_int_eq(rows(&e, "a"), 40); /* PostgreSQL holds 20 rows MongoDB lost */
    e.daemon.pid = 0;

    denv_insert_range(&e, db, "c", 41, 50);
    const char *args[] = {"--reimport", NULL};
    denv_daemon_start_args(&e, args, NULL);
    ck_assert(denv_wait_caught_up(&e, 120));
    ck_assert_int_eq(rows(&e, "a"), 30);
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* The initial copy in majority mode: its start is the commit point and it copies the committed data only, so a
 * rollback of the rest leaves nothing extra in PostgreSQL. */
START_TEST(test_majority_initial_copy)
{
    NEED_SIM();
    denv e;
    char db[64];
    denv_start(&e, "maj_cp", NULL, NULL);
    snprintf(db, sizeof db, "%sa", e.prefix);
    denv_insert_range(&e, db, "c", 1, 30);
    majority(&e, "freeze");
    uint64_t point = sim_status(&e, "majorityTs");
    denv_insert_range(&e, db, "c", 31, 60);
    denv_daemon_start(&e);
    wait_checkpoint(&e, point, 120);
    wait_reader_polled(&e);
    ck_assert_int_eq(rows(&e, "a"), 30);
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), point);

    sim_cmd(&e, BCON_NEW("mongosimRollback", BCON_INT32(1)), NULL);
    denv_insert_range(&e, db, "c", 61, 70);
    ck_assert(denv_wait_caught_up(&e, 120));
    ck_assert_int_eq(rows(&e, "a"), 40);
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

Suite *majority_suite(void); /* called by the generated runner list */

Suite *majority_suite(void)
{
    Suite *s = suite_create("majority");
    TCase *tc = tcase_create("majority");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_majority_frozen_then_rollback);
    tcase_add_test(tc, test_majority_advance);
    tcase_add_test(tc, test_local_rollback_detected);
    tcase_add_test(tc, test_majority_initial_copy);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * test_errors.c — what the daemon does with errors PostgreSQL raises while applying, beyond the plain cases of
 * test_operate.c: a trigger on a replicated table raising PL/pgSQL's default SQLSTATE (P0001: the op is set aside,
 * what follows arrives, and only the entries up to the failing one are stepped through one at a time); a SQLSTATE
 * nobody listed, raised on the same op again and again (the daemon stops, exit 3, after [replication]
 * unlisted_error_limit failures, naming it and the op); PostgreSQL running out of shared memory (53200: its lock table)
 * in a group, where the bound on a group's tables only ever falls and one entry that no bound can split stops the
 * daemon (exit 3) naming max_locks_per_transaction; and `status` while the daemon retries (always "running", saying
 * what it does).
 *
 * The errors come from triggers the tests put on the tables oplog2pg made: a real PostgreSQL error with the SQLSTATE
 * under test, met by the daemon's own statements. The lock table itself is not filled: on the shared test cluster
 * that takes a transaction over thousands of tables, which would starve every other session of locks; a trigger
 * raising 53200 is, to the daemon, the same error (it sees only the SQLSTATE and the message).
 *
 * Waits are on events (a checkpoint, a log line, the daemon's exit), never on a time.
 */
#include <check.h>
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/daemonenv.h"

/* One MongoDB transaction inserting {_id: id, v: 999} into each of colls[0..n) of db: one applyOps entry. */
static void txn_insert(const denv *e, const char *db, const char *const *colls, size_t n, int id)
{
    mongoc_client_t *c = mongoc_client_new(e->uri);
    ck_assert_ptr_nonnull(c);
    bson_error_t err;
    mongoc_client_session_t *s = mongoc_client_start_session(c, NULL, &err);
    ck_assert_msg(s != NULL, "start session: %s", err.message);
    ck_assert_msg(mongoc_client_session_start_transaction(s, NULL, &err), "start transaction: %s", err.message);
    for (size_t i = 0; i < n; i++) {
        mongoc_collection_t *col = mongoc_client_get_collection(c, db, colls[i]);
        bson_t opts = BSON_INITIALIZER;
        ck_assert_msg(mongoc_client_session_append(s, &opts, &err), "%s", err.message);
        bson_t *doc = BCON_NEW("_id", BCON_INT32(id), "v", BCON_INT32(999));
        ck_assert_msg(mongoc_collection_insert_one(col, doc, &opts, NULL, &err), "insert into %s: %s", colls[i],
                      err.message);
        bson_destroy(doc);
        bson_destroy(&opts);
        mongoc_collection_destroy(col);
    }
    bson_t reply;
    ck_assert_msg(mongoc_client_session_commit_transaction(s, &reply, &err), "commit: %s", err.message);
    bson_destroy(&reply);
    mongoc_client_session_destroy(s);
    mongoc_client_destroy(c);
}

/* A row trigger on schema.table raising `raise` (the rest of a RAISE statement) for documents whose v is v. */
static void add_trigger(const char *schema, const char *table, int v, const char *raise)
{
    char sql[1200];
    snprintf(sql, sizeof sql,
             "CREATE FUNCTION %s.refuse_%s() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
             "IF (NEW.doc->>'v')::int = %d THEN RAISE %s; END IF; RETURN NEW; END $$; "
             "CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON %s.%s FOR EACH ROW EXECUTE FUNCTION %s.refuse_%s()",
             schema, table, v, raise, schema, table, schema, table);
    denv_pg_exec(sql);
}

static void drop_trigger(const char *schema, const char *table)
{
    char sql[400];
    snprintf(sql, sizeof sql, "DROP TRIGGER refuse ON %s.%s; DROP FUNCTION %s.refuse_%s()", schema, table, schema,
             table);
    denv_pg_exec(sql);
}

/* Runs `status` (with --json when json) into e->dir/status-N.txt and returns its path in out. */
static int run_status(denv *e, bool json, int n, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/status-%d.txt", e->dir, n);
    const char *text[] = {"-c", e->ini, "status", NULL};
    const char *js[] = {"-c", e->ini, "status", "--json", NULL};
    return denv_run_command(e, json ? js : text, out);
}

/* ---- P0001 ---- */

/* RAISE EXCEPTION 'x' (SQLSTATE P0001) from a trigger on a replicated table refuses that op's row: it is set aside
 * as a dead letter, and everything after it arrives. Before, it was retried forever and nothing after it arrived. */
START_TEST(test_trigger_raise_is_a_dead_letter)
{
    denv e;
    denv_start(&e, "errp0", NULL, NULL);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_insert_range(&e, "rep_errp0_a", "c", 1, 5);
    ck_assert(denv_wait_caught_up(&e, 60));
    add_trigger("rep_errp0_a", "c", 60, "EXCEPTION 'no sixty here'");

    denv_insert_range(&e, "rep_errp0_a", "c", 6, 20); /* _id 6 has v 60 */
    ck_assert_msg(denv_wait_caught_up(&e, 90), "the daemon did not get past the op the trigger refused");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_errp0_a.c"), 19);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_errp0_a.c WHERE _id = '6'"), 0);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE service = 'rep_errp0' AND "
                                 "coll = 'c' AND op = 'i' AND doc_id = '6' AND sqlstate = 'P0001' AND "
                                 "error LIKE '%no sixty here%'"),
                     1);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE service = 'rep_errp0'"), 1);
    /* An update the trigger refuses too. */
    mongoc_client_t *c = mongoc_client_new(e.uri);
    mongoc_collection_t *col = mongoc_client_get_collection(c, "rep_errp0_a", "c");
    bson_error_t err;
    bson_t *q = BCON_NEW("_id", BCON_INT32(7));
    bson_t *u = BCON_NEW("$set", "{", "v", BCON_INT32(60), "}");
    ck_assert_msg(mongoc_collection_update_one(col, q, u, NULL, NULL, &err), "%s", err.message);
    bson_destroy(q);
    bson_destroy(u);
    mongoc_collection_destroy(col);
    mongoc_client_destroy(c);
    denv_insert_range(&e, "rep_errp0_a", "c", 21, 25);
    ck_assert_msg(denv_wait_caught_up(&e, 90), "the daemon did not get past the update the trigger refused");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_errp0_a.c"), 24);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE service = 'rep_errp0' AND "
                                 "op = 'u' AND doc_id = '7' AND sqlstate = 'P0001'"),
                     1);
    denv_stop(&e);
}
END_TEST

/* After a refusal, the entries before the failing op's entry (the sink names it) are known good: the careful session
 * applies them batched and steps one at a time only through that entry, then goes batched again. Here c's last insert
 * is refused, then in d the 150th of 300 (the failure of d's rows may name only the last entry they came from: a
 * session that meets the refusal before the entry named steps from the checkpoint). Everything else arrives, each
 * refused row is set aside once. */
START_TEST(test_careful_ends_at_the_failing_entry)
{
    denv e;
    denv_start(&e, "errcut", NULL, NULL);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_insert_range(&e, "rep_errcut_a", "c", 1, 2);
    denv_insert_range(&e, "rep_errcut_a", "d", 1000, 1000);
    ck_assert(denv_wait_caught_up(&e, 60));
    add_trigger("rep_errcut_a", "c", 100, "EXCEPTION 'no hundred here'");
    add_trigger("rep_errcut_a", "d", 1500, "EXCEPTION 'no 1500 here'");
    /* stopped, so that all of what follows is one group when it starts again */
    ck_assert(proc_signal(&e.daemon, SIGTERM));
    ck_assert_msg(proc_wait(&e.daemon, 60) && proc_exit_code(&e.daemon) == 0, "the daemon did not stop cleanly");
    denv_insert_range(&e, "rep_errcut_a", "c", 3, 10); /* _id 10 has v 100 */
    uint64_t last_c = denv_newest_ts(e.uri);
    denv_insert_range(&e, "rep_errcut_a", "d", 1, 300); /* _id 150 has v 1500 */
    denv_daemon_start(&e);
    ck_assert_msg(denv_wait_caught_up(&e, 90), "the daemon did not get past the ops the triggers refused");
    char want[160];
    snprintf(want, sizeof want, "applied the entries before oplog entry %u:%u batched: from there one at a time",
             (unsigned)(last_c >> 32), (unsigned)last_c);
    if (!denv_file_contains(e.log, want))
        denv_show_log(&e);
    ck_assert_msg(denv_file_contains(e.log, want), "the entries before the failing one were not applied batched");
    snprintf(want, sizeof want, "stepped past oplog entry %u:%u (", (unsigned)(last_c >> 32), (unsigned)last_c);
    ck_assert_msg(denv_file_contains(e.log, want), "the careful session did not end at the failing entry");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_errcut_a.c"), 9);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_errcut_a.d"), 300);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE service = 'rep_errcut' AND "
                                 "((coll = 'c' AND doc_id = '10') OR (coll = 'd' AND doc_id = '150')) AND "
                                 "sqlstate = 'P0001'"),
                     2);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE service = 'rep_errcut'"), 2);
    denv_stop(&e);
}
END_TEST

/* ---- an unlisted SQLSTATE ---- */

/* A SQLSTATE the policy does not list (a trigger's own, XY123) is retried, but when it fails the same op
 * unlisted_error_limit times in a row the daemon stops with exit 3, naming the SQLSTATE, the message and the op.
 * Before, it was retried forever. A restart after the trigger is gone goes on from the checkpoint. */
START_TEST(test_unlisted_sqlstate_stops)
{
    denv e;
    denv_start(&e, "errunl", NULL, "unlisted_error_limit = 3\n");
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_insert_range(&e, "rep_errunl_a", "c", 1, 5);
    ck_assert(denv_wait_caught_up(&e, 60));
    add_trigger("rep_errunl_a", "c", 80, "EXCEPTION 'not today' USING ERRCODE = 'XY123'");

    denv_insert_range(&e, "rep_errunl_a", "c", 6, 12); /* _id 8 has v 80 */
    ck_assert_msg(proc_wait(&e.daemon, 120), "the daemon kept retrying the same unlisted error");
    ck_assert_int_eq(proc_exit_code(&e.daemon), 3);
    e.daemon.pid = 0;
    ck_assert_msg(denv_file_contains(e.log, "the same op failed 3 times in a row with SQLSTATE XY123"),
                  "the log does not say why it stopped");
    ck_assert_msg(denv_file_contains(e.log, "on rep_errunl_a.c (oplog entry"), "the log does not name the op");
    ck_assert_msg(denv_file_contains(e.log, "not today"), "the log does not hold the error's message");
    ck_assert_msg(denv_file_contains(e.log, "2 of 3 times in a row for this op"), "the retries were not counted");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_errunl_a.c WHERE _id = '8'"), 0);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE service = 'rep_errunl'"), 0);

    drop_trigger("rep_errunl_a", "c");
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_errunl_a.c"), 12);
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* The same unlisted SQLSTATE raised at COMMIT, by a deferred constraint trigger, while other entries keep arriving:
 * the sink places such an error at the group's last entry, which moves on at each retry as the group takes in the
 * new entries. The checkpoint does not move, though, and that is what counts: the daemon stops after the bound. */
typedef struct {
    const denv *e;
    volatile bool stop;
} trickle;

static void *trickle_main(void *arg)
{
    trickle *t = arg;
    for (int id = 1; !t->stop && id <= 3000; id++) {
        denv_insert_range(t->e, "rep_errdef_a", "d", id, id);
        usleep(100000);
    }
    return NULL;
}

START_TEST(test_unlisted_sqlstate_at_commit_stops)
{
    denv e;
    denv_start(&e, "errdef", NULL, "unlisted_error_limit = 3\n");
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_insert_range(&e, "rep_errdef_a", "c", 1, 5);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_pg_exec("CREATE FUNCTION rep_errdef_a.late() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                 "IF (NEW.doc->>'v')::int = 80 THEN RAISE EXCEPTION 'not at commit' USING ERRCODE = 'XY124'; END IF; "
                 "RETURN NULL; END $$; "
                 "CREATE CONSTRAINT TRIGGER late AFTER INSERT OR UPDATE ON rep_errdef_a.c DEFERRABLE INITIALLY "
                 "DEFERRED FOR EACH ROW EXECUTE FUNCTION rep_errdef_a.late()");
    trickle t = {.e = &e};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, trickle_main, &t), 0);
    denv_insert_range(&e, "rep_errdef_a", "c", 6, 12); /* _id 8 has v 80 */
    bool stopped = proc_wait(&e.daemon, 180);
    t.stop = true;
    pthread_join(th, NULL);
    ck_assert_msg(stopped, "the daemon kept retrying the same unlisted error raised at commit");
    ck_assert_int_eq(proc_exit_code(&e.daemon), 3);
    e.daemon.pid = 0;
    ck_assert_msg(denv_file_contains(e.log, "failed 3 times in a row with SQLSTATE XY124"),
                  "the log does not say why it stopped");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_errdef_a.c WHERE _id = '8'"), 0);
    denv_pg_exec("DROP TRIGGER late ON rep_errdef_a.c; DROP FUNCTION rep_errdef_a.late()");
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_errdef_a.c"), 12);
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* An error that needs a person (class 42, here raised by a trigger) in the middle of a flush group: the group is
 * rolled back whole, so the stop message names the checkpoint the next start resumes at, not "everything before this
 * entry", which the rows before it in the same group would belie. */
START_TEST(test_config_stop_names_the_checkpoint)
{
    denv e;
    denv_start(&e, "errcfg", NULL, NULL);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_insert_range(&e, "rep_errcfg_a", "c", 1, 5);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert(proc_stop(&e.daemon, 30));
    uint64_t ck = denv_checkpoint_ts(e.service);
    add_trigger("rep_errcfg_a", "c", 80, "EXCEPTION 'no' USING ERRCODE = '42501'");
    denv_insert_range(&e, "rep_errcfg_a", "c", 6, 12); /* one group; _id 8 has v 80 */
    denv_daemon_start(&e);
    ck_assert_msg(proc_wait(&e.daemon, 60), "the daemon did not stop");
    ck_assert_int_eq(proc_exit_code(&e.daemon), 3);
    e.daemon.pid = 0;
    ck_assert_uint_eq(denv_checkpoint_ts(e.service), ck);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_errcfg_a.c"), 5);
    char want[120];
    snprintf(want, sizeof want, "stopped; what is committed ends at the checkpoint %u:%u,", (unsigned)(ck >> 32),
             (unsigned)(ck & 0xffffffffu));
    ck_assert_msg(denv_file_contains(e.log, want), "the stop message does not name the checkpoint (%s)", want);
    ck_assert(!denv_file_contains(e.log, "everything before this entry is committed"));
    drop_trigger("rep_errcfg_a", "c");
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* ---- status between sessions ---- */

/* While the daemon retries a passing fault (a trigger raising 40001, a serialization failure, until it is dropped),
 * `status` says "running" every time, and what the daemon does; before, it said "not running" whenever the daemon
 * was between two sessions. */
START_TEST(test_status_while_retrying)
{
    denv e;
    denv_start(&e, "errst", NULL, NULL);
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_insert_range(&e, "rep_errst_a", "c", 1, 5);
    ck_assert(denv_wait_caught_up(&e, 60));
    char out[400];
    ck_assert_int_eq(run_status(&e, false, 0, out, sizeof out), 0);
    ck_assert_msg(denv_file_contains(out, "running (an oplog2pg holds the service): applying, since"),
                  "status does not say the daemon applies");
    add_trigger("rep_errst_a", "c", 70, "EXCEPTION 'try again' USING ERRCODE = '40001'");

    denv_insert_range(&e, "rep_errst_a", "c", 6, 10); /* _id 7 has v 70 */
    ck_assert_msg(denv_wait_log(&e, "[40001]", 60), "the trigger's error did not show");
    int retrying = 0;
    for (int i = 1; i <= 15; i++) {
        ck_assert_int_eq(run_status(&e, i % 3 == 0, i, out, sizeof out), 0);
        if (i % 3 == 0) {
            ck_assert_msg(denv_file_contains(out, "\"running\": true"), "status --json call %d: not running", i);
            retrying += denv_file_contains(out, "\"activity\": \"retrying after SQLSTATE 40001\"");
        } else {
            ck_assert_msg(!denv_file_contains(out, "not running"), "status call %d says \"not running\"", i);
            ck_assert_msg(denv_file_contains(out, "state:         running (an oplog2pg holds the service)"),
                          "status call %d does not say running", i);
            retrying += denv_file_contains(out, "retrying after SQLSTATE 40001, since");
        }
        usleep(300 * 1000);
    }
    ck_assert_msg(retrying > 0, "status never said what the daemon was doing");
    ck_assert_msg(!proc_wait(&e.daemon, 0.0), "the daemon exited on a passing fault");
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM oplog2pg.dead_letter WHERE service = 'rep_errst'"), 0);

    drop_trigger("rep_errst_a", "c");
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* ---- the lock table ---- */

/* A group fails with 53200 (out of shared memory: the lock table) in the trigger of t6; the group is an insert into
 * each of u1..u3 followed by one transaction over t0..t6 (ten tables, batch_tables = 4). The bound must not rise to
 * half of ten: it stays at 4; the entries up to the transaction are committed one at a time, the transaction (the
 * trigger raises only once) goes through alone, and later groups still commit at 4 tables. */
START_TEST(test_lock_table_bound_never_raised)
{
    denv e;
    denv_start(&e, "errlkb", NULL, "batch_tables = 4\n");
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    const char *t[7] = {"t0", "t1", "t2", "t3", "t4", "t5", "t6"};
    const char *u[3] = {"u1", "u2", "u3"};
    for (int i = 0; i < 7; i++)
        denv_insert_range(&e, "rep_errlkb_a", t[i], 1, 1);
    for (int i = 0; i < 3; i++)
        denv_insert_range(&e, "rep_errlkb_a", u[i], 1, 1);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_pg_exec("CREATE SEQUENCE rep_errlkb_a.raised");
    /* Raises the first time only: a sequence is not rolled back with the transaction. */
    denv_pg_exec("CREATE FUNCTION rep_errlkb_a.refuse_t6() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                 "IF nextval('rep_errlkb_a.raised') = 1 THEN RAISE EXCEPTION 'out of shared memory' USING ERRCODE = "
                 "'53200'; END IF; RETURN NEW; END $$; CREATE TRIGGER refuse BEFORE INSERT ON rep_errlkb_a.t6 FOR "
                 "EACH ROW EXECUTE FUNCTION rep_errlkb_a.refuse_t6()");

    /* The group is read as one backlog: the daemon is stopped while it is written. */
    ck_assert(proc_stop(&e.daemon, 30));
    e.daemon.pid = 0;
    for (int i = 0; i < 3; i++)
        denv_insert_range(&e, "rep_errlkb_a", u[i], 2, 2);
    txn_insert(&e, "rep_errlkb_a", t, 7, 2);
    denv_daemon_start(&e);
    ck_assert_msg(denv_wait_caught_up(&e, 90), "the daemon did not get past the failed group");
    ck_assert_int_eq(denv_pg_int("SELECT last_value FROM rep_errlkb_a.raised"), 2);
    ck_assert_msg(!denv_file_contains(e.log, "groups now commit at 5 tables"), "the bound was raised from 4 to 5");
    ck_assert_msg(denv_file_contains(e.log, "ran out of shared memory in a flush group of 10 tables, 7 of them"),
                  "the failed group was not logged");
    ck_assert_msg(denv_file_contains(e.log, "one at a time: back to flush groups of 4 tables at most"),
                  "the entries of the failed group were not committed one at a time");

    /* Later groups still commit at 4 tables: a backlog of one insert into each of ten collections. */
    ck_assert(proc_stop(&e.daemon, 30));
    e.daemon.pid = 0;
    for (int i = 0; i < 10; i++) {
        char coll[16];
        snprintf(coll, sizeof coll, "w%d", i);
        denv_insert_range(&e, "rep_errlkb_a", coll, 1, 1);
    }
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    ck_assert_msg(denv_file_contains(e.log, "a flush group committed on reaching 4 tables"),
                  "groups do not commit at 4 tables");
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

/* One transaction over seven tables when a group may have four (batch_tables = 4), behind an insert into another
 * table in the same group; the lock table runs out (53200) in it every time. The entries before it are committed on
 * their own, then the daemon stops with exit 3, naming the entry, its seven tables and max_locks_per_transaction.
 * Before, the halving of the bound retried it forever. */
START_TEST(test_lock_table_entry_stops)
{
    denv e;
    denv_start(&e, "errlk", NULL, "batch_tables = 4\n");
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    const char *t[7] = {"t0", "t1", "t2", "t3", "t4", "t5", "t6"};
    for (int i = 0; i < 7; i++)
        denv_insert_range(&e, "rep_errlk_a", t[i], 1, 1);
    denv_insert_range(&e, "rep_errlk_a", "u", 1, 1);
    ck_assert(denv_wait_caught_up(&e, 60));
    add_trigger("rep_errlk_a", "t6", 999,
                "EXCEPTION 'out of shared memory' USING ERRCODE = '53200', "
                "HINT = 'You might need to increase max_locks_per_transaction.'");

    ck_assert(proc_stop(&e.daemon, 30));
    e.daemon.pid = 0;
    denv_insert_range(&e, "rep_errlk_a", "u", 2, 2);
    uint64_t before_txn = denv_newest_ts(e.uri);
    txn_insert(&e, "rep_errlk_a", t, 7, 2);
    uint64_t txn_at = denv_newest_ts(e.uri);
    denv_daemon_start(&e);
    ck_assert_msg(proc_wait(&e.daemon, 120), "the daemon kept retrying an entry the lock table cannot hold");
    ck_assert_int_eq(proc_exit_code(&e.daemon), 3);
    e.daemon.pid = 0;
    ck_assert_msg(denv_file_contains(e.log, "writes to 7 tables in one transaction"),
                  "the log does not name the entry's tables");
    ck_assert_msg(denv_file_contains(e.log, "raise max_locks_per_transaction"), "the log does not name the setting");
    /* The insert before it is committed, and nothing of the transaction. */
    ck_assert_uint_ge(denv_checkpoint_ts(e.service), before_txn);
    ck_assert_uint_lt(denv_checkpoint_ts(e.service), txn_at);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_errlk_a.u"), 2);
    ck_assert_int_eq(denv_pg_int("SELECT count(*) FROM rep_errlk_a.t0"), 1);

    /* Once the cause is gone, a restart applies it. */
    drop_trigger("rep_errlk_a", "t6");
    denv_daemon_start(&e);
    ck_assert(denv_wait_caught_up(&e, 60));
    denv_expect_match(&e);
    denv_stop(&e);
}
END_TEST

Suite *errors_suite(void); /* called by the generated runner list */

Suite *errors_suite(void)
{
    Suite *s = suite_create("errors");
    TCase *tc = tcase_create("errors");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_trigger_raise_is_a_dead_letter);
    tcase_add_test(tc, test_careful_ends_at_the_failing_entry);
    tcase_add_test(tc, test_unlisted_sqlstate_stops);
    tcase_add_test(tc, test_config_stop_names_the_checkpoint);
    tcase_add_test(tc, test_unlisted_sqlstate_at_commit_stops);
    tcase_add_test(tc, test_status_while_retrying);
    tcase_add_test(tc, test_lock_table_bound_never_raised);
    tcase_add_test(tc, test_lock_table_entry_stops);
    suite_add_tcase(s, tc);
    return s;
}

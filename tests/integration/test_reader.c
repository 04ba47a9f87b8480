/*
 * test_reader.c — the reader thread against the server in MONGO_URI (mongosim, or a real replica set).
 *
 * Each case starts a reader on its own queue and pops what it pushes: writes after the resume position decoded in
 * order, QUEUE_IDLE after a drain, the resume position itself skipped, a lost resume point or a rolled-back term
 * turned into QUEUE_END (resume lost), reconnection after mongosim drops every connection and after a step-down (no
 * loss, no duplicate), a malformed entry turned into QUEUE_END (unsupported) with nothing after it, the nsfilter
 * turning excluded ops into NOOPs, a truncation under the reader turned into QUEUE_END (resume lost) instead of a
 * skip, and a prompt reader_stop even while blocked on a full queue. Cases that need mongosim's test commands skip
 * on a real server (skip.h). Other suites write to the same server, so every check looks only
 * at this suite's own namespaces (database rdr_*).
 *
 * Where a case needs the reader thread in a given state (waiting for a getMore the server holds, or asleep in a push
 * into a full queue), it waits for that state as /proc/self/task/TID/syscall shows it, not for a guessed time.
 */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/nsfilter.h"
#include "core/queue.h"
#include "source/oplog/reader.h"

#include "../lib/oplogutil.h"
#include "../lib/skip.h"

Suite *reader_suite(void);

#define AWAIT_MS 300
/* An upper bound on the size of the (opaque) queue object, whose mutex and condition variable come first. */
#define QUEUE_OBJECT_BYTES 512

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static const char *mongo_uri(void)
{
    const char *uri = getenv("MONGO_URI");
    ck_assert_msg(uri && *uri, "MONGO_URI is not set: the integration harness (tests/integration/run.sh) sets it");
    return uri;
}

static mongoc_client_t *client_new(void)
{
    bson_error_t err;
    mongoc_init();
    mongoc_uri_t *uri = mongoc_uri_new_with_error(mongo_uri(), &err);
    ck_assert_msg(uri, "bad MONGO_URI: %s", err.message);
    mongoc_uri_set_option_as_int32(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS, 15000);
    mongoc_client_t *c = mongoc_client_new_from_uri(uri);
    mongoc_uri_destroy(uri);
    ck_assert_ptr_nonnull(c);
    return c;
}

static void command_ok(mongoc_client_t *c, const char *db, bson_t *cmd, bson_t *reply)
{
    bson_error_t err;
    bson_t tmp;
    bool ok = mongoc_client_command_simple(c, db, cmd, NULL, reply ? reply : &tmp, &err);
    bson_destroy(cmd);
    ck_assert_msg(ok, "command failed: %s (code %u)", err.message, err.code);
    if (!reply)
        bson_destroy(&tmp);
}

#define NEED_MONGOSIM(c, what)                                                                                         \
    do {                                                                                                               \
        if (!oplogutil_is_mongosim(c)) {                                                                               \
            mongoc_client_destroy(c);                                                                                  \
            SKIP_TEST("needs mongosim's test commands (%s)", what);                                                    \
        }                                                                                                              \
    } while (0)

/* Where the oplog ends now: hello's lastWrite.opTime. */
static op_pos last_optime(mongoc_client_t *c)
{
    bson_t reply;
    bson_iter_t it, ts, t;
    op_pos p = {0, 0, -1};
    command_ok(c, "admin", BCON_NEW("hello", BCON_INT32(1)), &reply);
    ck_assert_msg(bson_iter_init_find(&it, &reply, "lastWrite") && bson_iter_recurse(&it, &ts) &&
                      bson_iter_find_descendant(&ts, "opTime.ts", &t) && BSON_ITER_HOLDS_TIMESTAMP(&t),
                  "hello has no lastWrite.opTime.ts");
    bson_iter_timestamp(&t, &p.secs, &p.inc);
    ck_assert(bson_iter_init_find(&it, &reply, "lastWrite") && bson_iter_recurse(&it, &ts));
    if (bson_iter_find_descendant(&ts, "opTime.t", &t) && BSON_ITER_HOLDS_NUMBER(&t))
        p.term = bson_iter_as_int64(&t);
    bson_destroy(&reply);
    return p;
}

static void insert_one(mongoc_client_t *c, const char *db, const char *coll, int32_t id)
{
    bson_error_t err;
    mongoc_collection_t *col = mongoc_client_get_collection(c, db, coll);
    bson_t *doc = BCON_NEW("_id", BCON_INT32(id), "v", BCON_UTF8("x"));
    ck_assert_msg(mongoc_collection_insert_one(col, doc, NULL, NULL, &err), "insert %s.%s: %s", db, coll, err.message);
    bson_destroy(doc);
    mongoc_collection_destroy(col);
}

static void drop_db(mongoc_client_t *c, const char *db)
{
    bson_t reply;
    bson_error_t err;
    bson_t *cmd = BCON_NEW("dropDatabase", BCON_INT32(1));
    mongoc_client_command_simple(c, db, cmd, NULL, &reply, &err); /* absent is fine */
    bson_destroy(cmd);
    bson_destroy(&reply);
}

/* One number from mongosimStatus (a bool as 0/1). */
static int64_t sim_status_int(mongoc_client_t *c, const char *field)
{
    bson_t reply;
    bson_iter_t it;
    command_ok(c, "admin", BCON_NEW("mongosimStatus", BCON_INT32(1)), &reply);
    ck_assert_msg(bson_iter_init_find(&it, &reply, field), "mongosimStatus has no %s", field);
    int64_t v = BSON_ITER_HOLDS_BOOL(&it) ? (int64_t)bson_iter_bool(&it) : bson_iter_as_int64(&it);
    bson_destroy(&reply);
    return v;
}

/* A reader on q with the test defaults but batchSize `batch`, resuming after `start` (an entry already applied). */
static reader *start_reader_batch(queue *q, const op_pos *start, const nsfilter *f, int32_t batch)
{
    reader_config cfg;
    char err[256] = "";
    reader_config_init(&cfg);
    cfg.uri = mongo_uri();
    cfg.await_ms = AWAIT_MS;
    cfg.batch_size = batch;
    cfg.filter = f;
    cfg.start = *start;
    reader *r = reader_start(&cfg, q, err, sizeof err);
    ck_assert_msg(r != NULL, "reader_start: %s", err);
    return r;
}

static reader *start_reader(queue *q, const op_pos *start, const nsfilter *f)
{
    return start_reader_batch(q, start, f, 100);
}

/* ---- the reader thread's state, from /proc/self/task/TID/syscall ----
 *
 * That file holds the number of the system call the thread is blocked in and its arguments ("running" while it
 * runs, "-1 ..." when it is blocked outside a system call). It says what the reader's API cannot: that the thread
 * waits for a getMore's answer (poll) or sleeps on the queue's condition variable (futex). */

typedef struct {
    size_t n;
    pid_t tid[64];
} thread_list;

static void threads_now(thread_list *out)
{
    out->n = 0;
    DIR *d = opendir("/proc/self/task");
    ck_assert_msg(d != NULL, "cannot list /proc/self/task");
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.' && out->n < sizeof out->tid / sizeof out->tid[0])
            out->tid[out->n++] = (pid_t)atoi(de->d_name);
    closedir(d);
}

/* The one thread started since `before` was listed: the reader's (a single-threaded libmongoc client starts none). */
static pid_t reader_thread(const thread_list *before)
{
    thread_list now;
    threads_now(&now);
    pid_t found = 0;
    int n = 0;
    for (size_t i = 0; i < now.n; i++) {
        bool old = false;
        for (size_t k = 0; k < before->n && !old; k++)
            old = now.tid[i] == before->tid[k];
        if (!old) {
            found = now.tid[i];
            n++;
        }
    }
    ck_assert_msg(n == 1, "%d threads appeared with the reader: which one is it?", n);
    return found;
}

/* Reads the thread's system call: 1 when it is blocked in one (*nr, *arg0 set), 0 when not, -1 when /proc does not
 * say (no such file: a kernel without it, or a sandbox). Uses no malloc, so it cannot contend with the reader. */
static int thread_syscall(pid_t tid, long *nr, unsigned long *arg0)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t len = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (len <= 0)
        return -1;
    buf[len] = '\0';
    if (strncmp(buf, "running", 7) == 0)
        return 0;
    char *end;
    *nr = strtol(buf, &end, 10);
    if (*nr < 0)
        return 0;
    *arg0 = strtoul(end, NULL, 16);
    return 1;
}

static bool is_poll(long nr)
{
#ifdef SYS_poll
    if (nr == SYS_poll)
        return true;
#endif
    return nr == SYS_ppoll;
}

/* Waits up to secs until the reader thread is blocked in poll() (with `lo` NULL) or on a futex inside [lo, lo + len)
 * (with lo set). Aborts on timeout. False, at once and with a note, when /proc does not show thread states: the
 * caller then goes on without knowing (what it checks afterwards still holds, it may just not test that state). */
static bool wait_reader_blocked(pid_t tid, const void *lo, size_t len, double secs, const char *what)
{
    double until = now_s() + secs;
    for (;;) {
        long nr = -1;
        unsigned long arg0 = 0;
        int st = thread_syscall(tid, &nr, &arg0);
        if (st < 0) {
            printf("NOTE: /proc/self/task/%d/syscall is not readable: not waiting until %s\n", (int)tid, what);
            return false;
        }
        if (st == 1) {
            if (lo == NULL && is_poll(nr))
                return true;
            if (lo != NULL && nr == SYS_futex && arg0 >= (uintptr_t)lo && arg0 < (uintptr_t)lo + len)
                return true;
        }
        ck_assert_msg(now_s() < until, "the reader thread did not get to %s within %.0f s", what, secs);
        sleep_ms(1);
    }
}

/* Pops the next item, waiting up to secs; false on timeout. */
static bool pop_wait(queue *q, queue_item *it, double secs)
{
    double until = now_s() + secs;
    while (!queue_pop(q, it)) {
        if (now_s() > until)
            return false;
        sleep_ms(5);
    }
    return true;
}

/* Does the entry hold a data op (insert/update/delete) on db? DDL such as the implicit create before a first
 * insert is not counted. */
static bool entry_in_db(const op_entry *e, const char *db)
{
    for (size_t i = 0; i < e->n; i++) {
        const op *o = &e->ops[i];
        if ((o->kind == OP_INSERT || o->kind == OP_UPDATE || o->kind == OP_DELETE) && o->db && strcmp(o->db, db) == 0)
            return true;
    }
    return false;
}

/* The int32 _id of an op (or -1). */
static int32_t op_id(const op *o)
{
    return o->id.value_type == BSON_TYPE_INT32 ? o->id.value.v_int32 : -1;
}

/* Collects entries on db until `want` were seen or secs passed; returns how many; *saw_idle_after tells whether an
 * IDLE item came after the last of them. Entries are stored (owned) in out. A FATAL item fails the test. */
static size_t collect(queue *q, const char *db, op_entry **out, size_t want, double secs, bool *saw_idle_after)
{
    size_t n = 0;
    double until = now_s() + secs;
    if (saw_idle_after)
        *saw_idle_after = false;
    while (now_s() < until) {
        queue_item it;
        if (!pop_wait(q, &it, 0.05))
            continue;
        if (it.type == QUEUE_END)
            ck_abort_msg("unexpected QUEUE_END (reason %d): %s", (int)it.reason, it.message);
        if (it.type == QUEUE_IDLE) {
            if (n == want && saw_idle_after) {
                *saw_idle_after = true;
                return n;
            }
            continue;
        }
        if (entry_in_db(it.entry, db)) {
            ck_assert_msg(n < want, "more entries on %s than expected", db);
            out[n++] = it.entry;
            it.entry = NULL;
            if (n == want && !saw_idle_after)
                return n;
        }
        queue_item_clear(&it);
    }
    return n;
}

static void free_entries(op_entry **e, size_t n)
{
    for (size_t i = 0; i < n; i++)
        op_entry_free(e[i]);
}

/* Waits for a FATAL item (skipping everything else); returns it (caller clears). */
static queue_item wait_fatal(queue *q, double secs)
{
    queue_item it;
    double until = now_s() + secs;
    while (now_s() < until) {
        if (!pop_wait(q, &it, 0.05))
            continue;
        if (it.type == QUEUE_END)
            return it;
        queue_item_clear(&it);
    }
    ck_abort_msg("no QUEUE_END within %.0f s", secs);
    memset(&it, 0, sizeof it);
    return it;
}

/* Resuming after the newest entry: later entries arrive in order, each after the one before, then an IDLE. */
START_TEST(test_tail_after_checkpoint)
{
    mongoc_client_t *c = client_new();
    drop_db(c, "rdr_tail");
    insert_one(c, "rdr_tail", "seed", 0);
    op_pos start = last_optime(c);

    queue *q = queue_new(1000, 0);
    reader *r = start_reader(q, &start, NULL);

    for (int32_t i = 1; i <= 5; i++)
        insert_one(c, "rdr_tail", "orders", i);
    op_entry *got[5];
    bool idle = false;
    size_t n = collect(q, "rdr_tail", got, 5, 10, &idle);
    ck_assert_uint_eq(n, 5);
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(got[i]->ops[0].kind, OP_INSERT);
        ck_assert_str_eq(got[i]->ops[0].coll, "orders");
        ck_assert_int_eq(op_id(&got[i]->ops[0]), (int32_t)i + 1);
        ck_assert(op_pos_cmp(&got[i]->pos, i ? &got[i - 1]->pos : &start) > 0);
    }
    ck_assert_msg(idle, "no QUEUE_IDLE after the oplog was drained");

    reader_stats st;
    reader_get_stats(r, &st);
    ck_assert_uint_ge(st.entries, 5);
    ck_assert(st.have_last);
    ck_assert_int_ge(op_pos_cmp(&st.last, &got[4]->pos), 0);
    ck_assert_uint_ge(st.idles, 1);

    double t0 = now_s();
    reader_free(r);
    /* At most one getMore in flight (AWAIT_MS) to wait for; the margin is generous, the point is that it returns. */
    ck_assert_msg(now_s() - t0 < AWAIT_MS / 1000.0 + 20.0, "reader_stop took %.2f s", now_s() - t0);
    free_entries(got, n);
    queue_free(q);
    mongoc_client_destroy(c);
}
END_TEST

/* A batch exactly as large as asked, at the oplog's end: the reader cannot tell from it that the oplog is drained,
 * so its next getMore only probes (READER_PROBE_MS) and the IDLE comes at once, not after the await time. The await
 * time is 15 s and the bound 7.5 s, a margin load cannot close either way (the reader_free at the end then waits
 * for the getMore in flight: up to 15 s). */
START_TEST(test_idle_after_full_batch)
{
    mongoc_client_t *c = client_new();
    drop_db(c, "rdr_full");
    insert_one(c, "rdr_full", "a", 0);
    op_pos start = last_optime(c);
    for (int32_t i = 1; i <= 4; i++)
        insert_one(c, "rdr_full", "a", i);

    queue *q = queue_new(1000, 0);
    reader_config cfg;
    char err[256] = "";
    reader_config_init(&cfg);
    cfg.uri = mongo_uri();
    cfg.await_ms = 15000;
    cfg.batch_size = 5; /* the start entry and the four after it: the find's first batch is full */
    cfg.start = start;
    double t0 = now_s();
    reader *r = reader_start(&cfg, q, err, sizeof err);
    ck_assert_msg(r != NULL, "reader_start: %s", err);
    op_entry *got[4];
    bool idle = false;
    size_t n = collect(q, "rdr_full", got, 4, 12, &idle);
    double took = now_s() - t0;
    ck_assert_uint_eq(n, 4);
    ck_assert_msg(idle, "no QUEUE_IDLE after the oplog was drained");
    ck_assert_msg(took < 7.5, "the IDLE came %.2f s after the start: the reader waited out the await time", took);
    reader_free(r);
    free_entries(got, n);
    queue_free(q);
    mongoc_client_destroy(c);
}
END_TEST

START_TEST(test_resume_skips_start)
{
    mongoc_client_t *c = client_new();
    drop_db(c, "rdr_resume");
    insert_one(c, "rdr_resume", "a", 1);
    op_pos at_a = last_optime(c);
    insert_one(c, "rdr_resume", "a", 2);
    insert_one(c, "rdr_resume", "a", 3);

    queue *q = queue_new(1000, 0);
    reader *r = start_reader(q, &at_a, NULL);
    op_entry *got[2];
    bool idle = false;
    size_t n = collect(q, "rdr_resume", got, 2, 10, &idle);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(op_id(&got[0]->ops[0]), 2); /* 1 was at the resume point: skipped */
    ck_assert_int_eq(op_id(&got[1]->ops[0]), 3);
    ck_assert(op_pos_cmp(&got[0]->pos, &at_a) > 0);
    ck_assert(idle);
    reader_free(r);
    free_entries(got, n);
    queue_free(q);
    mongoc_client_destroy(c);
}
END_TEST

START_TEST(test_resume_point_lost)
{
    mongoc_client_t *c = client_new();
    insert_one(c, "rdr_lost", "a", (int32_t)(now_s() * 1000) & 0x7fffffff); /* the oplog is not empty */
    queue *q = queue_new(1000, 0);
    op_pos gone = {1, 1, 1};
    reader *r = start_reader(q, &gone, NULL);
    queue_item it = wait_fatal(q, 10);
    ck_assert_int_eq(it.reason, QUEUE_END_RESUME_LOST);
    ck_assert_msg(strstr(it.message, "1:1") && strstr(it.message, "--reimport") &&
                      strstr(it.message, "no longer in the oplog"),
                  "message: %s", it.message);
    queue_item_clear(&it);
    double until = now_s() + 30;
    while (!reader_finished(r) && now_s() < until)
        sleep_ms(10);
    ck_assert_msg(reader_finished(r), "the reader thread did not end after QUEUE_END");
    ck_assert_uint_eq(queue_len(q), 0); /* nothing after the fatal item */
    reader_free(r);
    queue_free(q);
    mongoc_client_destroy(c);
}
END_TEST

START_TEST(test_rolled_back_term)
{
    mongoc_client_t *c = client_new();
    insert_one(c, "rdr_term", "a", (int32_t)(now_s() * 1000) & 0x7fffffff);
    op_pos p = last_optime(c);
    if (p.term < 0) {
        mongoc_client_destroy(c);
        SKIP_TEST("the server reports no term in hello's lastWrite");
    }
    p.term += 7; /* same ts, another term: what a rollback looks like */
    queue *q = queue_new(1000, 0);
    reader *r = start_reader(q, &p, NULL);
    queue_item it = wait_fatal(q, 10);
    ck_assert_int_eq(it.reason, QUEUE_END_RESUME_LOST);
    ck_assert_msg(strstr(it.message, "rolled back"), "message: %s", it.message);
    queue_item_clear(&it);
    reader_free(r);
    queue_free(q);
    mongoc_client_destroy(c);
}
END_TEST

/* A batch holding an element that is not a document, or whose bytes run past the batch (mongosimMalformBatch puts it
 * after the batch's first entry): the reader hands on that first entry, then ends with QUEUE_END (unsupported) and
 * never pushes an entry after the bad element (a reader that ended the batch there, or skipped the element, would
 * go on with the entries after it, or past them). */
START_TEST(test_malformed_batch_is_fatal)
{
    static const char *const how[] = {"notDocument", "corrupt"};
    mongoc_client_t *c = client_new();
    NEED_MONGOSIM(c, "malformed batch");
    for (size_t h = 0; h < 2; h++) {
        drop_db(c, "rdr_mal");
        op_pos start = last_optime(c);
        queue *q = queue_new(1000, 0);
        reader *r = start_reader(q, &start, NULL);
        command_ok(c, "admin", BCON_NEW("mongosimMalformBatch", BCON_UTF8(how[h])), NULL);
        /* Five entries written by one command: the reader's next getMore returns them in one batch. */
        mongoc_collection_t *coll = mongoc_client_get_collection(c, "rdr_mal", "a");
        bson_t *docs[5];
        for (int i = 0; i < 5; i++)
            docs[i] = BCON_NEW("_id", BCON_INT32(i + 1));
        bson_error_t err;
        ck_assert_msg(mongoc_collection_insert_many(coll, (const bson_t **)docs, 5, NULL, NULL, &err), "%s",
                      err.message);
        for (int i = 0; i < 5; i++)
            bson_destroy(docs[i]);
        mongoc_collection_destroy(coll);

        int seen = 0;
        queue_item it;
        double until = now_s() + 20;
        for (;;) {
            ck_assert_msg(now_s() < until, "%s: no QUEUE_END for the malformed batch (%d entries seen)", how[h], seen);
            if (!pop_wait(q, &it, 0.05))
                continue;
            if (it.type == QUEUE_END)
                break;
            if (it.type == QUEUE_ENTRY && entry_in_db(it.entry, "rdr_mal")) {
                seen++;
                ck_assert_msg(op_id(&it.entry->ops[0]) == seen, "%s: entry with _id %d pushed as number %d", how[h],
                              op_id(&it.entry->ops[0]), seen);
            }
            queue_item_clear(&it);
        }
        ck_assert_int_eq(it.reason, QUEUE_END_UNSUPPORTED);
        ck_assert_msg(strstr(it.message, "malformed reply") != NULL, "message: %s", it.message);
        queue_item_clear(&it);
        /* The bad element sits after the batch's first entry: at most that one came (none when the batch began with
         * another entry, such as a periodic noop). */
        ck_assert_msg(seen <= 1, "%s: %d entries after the bad element were pushed", how[h], seen - 1);
        until = now_s() + 10;
        while (!reader_finished(r) && now_s() < until)
            sleep_ms(5);
        ck_assert_msg(reader_finished(r), "the reader thread did not end after QUEUE_END");
        ck_assert_uint_eq(queue_len(q), 0);
        reader_free(r);
        queue_free(q);
    }
    drop_db(c, "rdr_mal");
    mongoc_client_destroy(c);
}
END_TEST

/* The point lookup of a transaction's walk back gets a reply whose batch is corrupt before its first entry
 * (mongosimMalformBatch with lookup): the reader ends with QUEUE_END (unsupported, "malformed reply"), not with "the
 * transaction began at an entry no longer in the oplog" (which would send the operator to --reimport), and pushes
 * nothing of the transaction. */
START_TEST(test_malformed_lookup_is_fatal)
{
    mongoc_client_t *c = client_new();
    NEED_MONGOSIM(c, "malformed lookup");
    drop_db(c, "rdr_lk");
    op_pos start = last_optime(c);
    queue *q = queue_new(1000, 0);
    reader *r = start_reader(q, &start, NULL);
    command_ok(c, "admin", BCON_NEW("mongosimMalformBatch", BCON_UTF8("corrupt"), "lookup", BCON_BOOL(true)), NULL);
    static const uint8_t lsid[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    uint32_t secs = start.secs + 5;
    bson_t *cmd = BCON_NEW(
        "appendOplog", "[",
        /* the chain's first entry */
        "{", "ts", BCON_TIMESTAMP(secs, 1), "t", BCON_INT64(1), "v", BCON_INT32(2), "op", BCON_UTF8("c"), "ns",
        BCON_UTF8("admin.$cmd"), "wall", BCON_DATE_TIME((int64_t)secs * 1000), "lsid", "{", "id",
        BCON_BIN(BSON_SUBTYPE_UUID, lsid, 16), "}", "txnNumber", BCON_INT64(1), "prevOpTime", "{", "ts",
        BCON_TIMESTAMP(0, 0), "t", BCON_INT64(-1), "}", "o", "{", "applyOps", "[", "{", "op", BCON_UTF8("i"), "ns",
        BCON_UTF8("rdr_lk.a"), "o", "{", "_id", BCON_INT32(1), "}", "}", "]", "partialTxn", BCON_BOOL(true), "}", "}",
        /* its commit */
        "{", "ts", BCON_TIMESTAMP(secs, 2), "t", BCON_INT64(1), "v", BCON_INT32(2), "op", BCON_UTF8("c"), "ns",
        BCON_UTF8("admin.$cmd"), "wall", BCON_DATE_TIME((int64_t)secs * 1000), "lsid", "{", "id",
        BCON_BIN(BSON_SUBTYPE_UUID, lsid, 16), "}", "txnNumber", BCON_INT64(1), "prevOpTime", "{", "ts",
        BCON_TIMESTAMP(secs, 1), "t", BCON_INT64(1), "}", "o", "{", "applyOps", "[", "{", "op", BCON_UTF8("i"), "ns",
        BCON_UTF8("rdr_lk.a"), "o", "{", "_id", BCON_INT32(2), "}", "}", "]", "count", BCON_INT64(2), "}", "}", "]");
    command_ok(c, "admin", cmd, NULL);

    queue_item it;
    double until = now_s() + 20;
    for (;;) {
        ck_assert_msg(now_s() < until, "no QUEUE_END for the malformed lookup");
        if (!pop_wait(q, &it, 0.05))
            continue;
        if (it.type == QUEUE_END)
            break;
        if (it.type == QUEUE_ENTRY)
            ck_assert_msg(!entry_in_db(it.entry, "rdr_lk"), "an op of the transaction was pushed");
        queue_item_clear(&it);
    }
    ck_assert_int_eq(it.reason, QUEUE_END_UNSUPPORTED);
    ck_assert_msg(strstr(it.message, "malformed reply") != NULL, "message: %s", it.message);
    queue_item_clear(&it);
    until = now_s() + 10;
    while (!reader_finished(r) && now_s() < until)
        sleep_ms(5);
    ck_assert_msg(reader_finished(r), "the reader thread did not end after QUEUE_END");
    reader_free(r);
    queue_free(q);
    mongoc_client_destroy(c);
}
END_TEST

/* Waits until the reader has pushed an IDLE (so it is parked in an awaitData getMore), draining the queue. */
static void drain_until_idle(queue *q, const char *db, op_entry **out, size_t *n, size_t max)
{
    double until = now_s() + 10;
    while (now_s() < until) {
        queue_item it;
        if (!pop_wait(q, &it, 0.05))
            continue;
        ck_assert_msg(it.type != QUEUE_END, "unexpected QUEUE_END: %s", it.message);
        if (it.type == QUEUE_IDLE)
            return;
        if (entry_in_db(it.entry, db)) {
            ck_assert(*n < max);
            out[(*n)++] = it.entry;
            it.entry = NULL;
        }
        queue_item_clear(&it);
    }
    ck_abort_msg("no QUEUE_IDLE within 10 s");
}

static void check_ids_in_order(op_entry **e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(op_id(&e[i]->ops[0]) == (int32_t)i + 1, "entry %zu has _id %d: lost or repeated", i,
                      op_id(&e[i]->ops[0]));
        if (i)
            ck_assert(op_pos_cmp(&e[i]->pos, &e[i - 1]->pos) > 0);
    }
}

START_TEST(test_reconnect_after_drop)
{
    mongoc_client_t *c = client_new();
    NEED_MONGOSIM(c, "reconnect after dropped connections");
    drop_db(c, "rdr_drop");
    op_pos start = last_optime(c);
    queue *q = queue_new(1000, 0);
    thread_list before;
    threads_now(&before);
    reader *r = start_reader(q, &start, NULL);
    pid_t tid = reader_thread(&before);
    op_entry *got[20];
    size_t n = 0;

    for (int32_t i = 1; i <= 5; i++)
        insert_one(c, "rdr_drop", "a", i);
    n += collect(q, "rdr_drop", got, 5, 10, NULL);
    ck_assert_uint_eq(n, 5);
    drain_until_idle(q, "rdr_drop", got, &n, 20);
    /* The reader drained the oplog, so its next getMore is one the server holds (awaitData): wait until its thread
     * waits in poll() for that answer, so the drop below cuts a parked getMore. */
    wait_reader_blocked(tid, NULL, 0, 10, "waiting for its getMore");
    reader_stats st0;
    reader_get_stats(r, &st0);

    command_ok(c, "admin", BCON_NEW("mongosimDropConnections", BCON_INT32(1)), NULL);
    for (int32_t i = 6; i <= 10; i++)
        insert_one(c, "rdr_drop", "a", i);
    n += collect(q, "rdr_drop", got + n, 10 - n, 15, NULL);
    ck_assert_uint_eq(n, 10);
    check_ids_in_order(got, n);
    /* Nothing repeated afterwards either. */
    drain_until_idle(q, "rdr_drop", got, &n, 20);
    ck_assert_uint_eq(n, 10);

    /* Entries 6..10 came through a cursor the reader re-opened after the drop, or through the old one if it missed
     * the drop: the count tells which, with no race (it is raised before the cursor is re-opened). */
    reader_stats st;
    reader_get_stats(r, &st);
    ck_assert_msg(st.reconnects > st0.reconnects, "the reader did not notice the dropped connection");
    reader_free(r);
    free_entries(got, n);
    queue_free(q);
    mongoc_client_destroy(c);
}
END_TEST

START_TEST(test_step_down_and_up)
{
    mongoc_client_t *c = client_new();
    NEED_MONGOSIM(c, "step down and up");
    drop_db(c, "rdr_step");
    op_pos start = last_optime(c);
    queue *q = queue_new(1000, 0);
    thread_list before;
    threads_now(&before);
    reader *r = start_reader(q, &start, NULL);
    pid_t tid = reader_thread(&before);
    op_entry *got[20];
    size_t n = 0;
    insert_one(c, "rdr_step", "a", 1);
    insert_one(c, "rdr_step", "a", 2);
    n += collect(q, "rdr_step", got, 2, 10, NULL);
    ck_assert_uint_eq(n, 2);
    drain_until_idle(q, "rdr_step", got, &n, 20);
    /* Drained: the reader's next getMore is held by the server. Wait until the thread waits for it. */
    wait_reader_blocked(tid, NULL, 0, 10, "waiting for its getMore");
    reader_stats st0;
    reader_get_stats(r, &st0);
    int64_t term0 = sim_status_int(c, "term");

    /* A step-down fails the parked getMore (11602); the re-find checks the last position, whose term is the old
     * one and still correct, so the reader goes on. Writes fail while it lasts: wait until mongosim is primary
     * again, in a new term, before the next one. */
    command_ok(c, "admin", BCON_NEW("mongosimStepDown", BCON_INT32(500)), NULL);
    double until = now_s() + 30;
    while (sim_status_int(c, "steppedDown") != 0 || sim_status_int(c, "term") <= term0) {
        ck_assert_msg(now_s() < until, "mongosim did not step up again within 30 s");
        sleep_ms(20);
    }
    insert_one(c, "rdr_step", "a", 3);
    n += collect(q, "rdr_step", got + n, 3 - n, 15, NULL);
    ck_assert_uint_eq(n, 3);
    check_ids_in_order(got, n);
    reader_stats st;
    reader_get_stats(r, &st);
    ck_assert_msg(st.reconnects > st0.reconnects, "the reader did not notice the step-down");
    reader_free(r);
    free_entries(got, n);
    queue_free(q);
    mongoc_client_destroy(c);
}
END_TEST

START_TEST(test_malformed_entry_is_fatal)
{
    mongoc_client_t *c = client_new();
    NEED_MONGOSIM(c, "malformed entry");
    drop_db(c, "rdr_bad");
    op_pos start = last_optime(c);
    queue *q = queue_new(1000, 0);
    reader *r = start_reader(q, &start, NULL);

    insert_one(c, "rdr_bad", "a", 1);
    /* An insert without o._id: DECODE_MALFORMED. mongosim stamps ts/t/v/wall. */
    command_ok(c, "admin",
               BCON_NEW("appendOplog", "[", "{", "op", BCON_UTF8("i"), "ns", BCON_UTF8("rdr_bad.a"), "o", "{", "x",
                        BCON_INT32(1), "}", "}", "]"),
               NULL);
    insert_one(c, "rdr_bad", "a", 2);

    bool good_seen = false;
    queue_item it;
    double until = now_s() + 10;
    for (;;) {
        ck_assert_msg(now_s() < until, "no QUEUE_END for the malformed entry");
        if (!pop_wait(q, &it, 0.05))
            continue;
        if (it.type == QUEUE_END)
            break;
        if (it.type == QUEUE_ENTRY && entry_in_db(it.entry, "rdr_bad")) {
            ck_assert_msg(!good_seen && op_id(&it.entry->ops[0]) == 1, "an entry after the bad one was pushed");
            good_seen = true;
        }
        queue_item_clear(&it);
    }
    ck_assert(good_seen);
    ck_assert_int_eq(it.reason, QUEUE_END_UNSUPPORTED);
    ck_assert_msg(strstr(it.message, "malformed") && strstr(it.message, "rdr_bad.a"), "message: %s", it.message);
    queue_item_clear(&it);
    /* The thread ends after pushing QUEUE_END; once it has, nothing can follow, so the empty queue is final. */
    until = now_s() + 10;
    while (!reader_finished(r) && now_s() < until)
        sleep_ms(5);
    ck_assert_msg(reader_finished(r), "the reader thread did not end after QUEUE_END");
    ck_assert_uint_eq(queue_len(q), 0); /* _id 2 never follows */
    reader_free(r);
    queue_free(q);
    mongoc_client_destroy(c);
}
END_TEST

START_TEST(test_nsfilter_turns_excluded_into_noop)
{
    mongoc_client_t *c = client_new();
    drop_db(c, "rdr_f");
    /* Create both collections first so no implicit create shows up between the ops under test. */
    insert_one(c, "rdr_f", "keep", 100);
    insert_one(c, "rdr_f", "skip", 100);
    op_pos start = last_optime(c);
    const char *inc[] = {"rdr_f.*", NULL};
    const char *exc[] = {"rdr_f.skip*", NULL};
    char err[256];
    nsfilter *f = nsfilter_new(inc, exc, err, sizeof err);
    ck_assert_msg(f, "nsfilter_new: %s", err);

    queue *q = queue_new(1000, 0);
    reader *r = start_reader(q, &start, f);
    insert_one(c, "rdr_f", "keep", 1);
    insert_one(c, "rdr_f", "skip", 2);
    bson_error_t berr;
    mongoc_collection_t *col = mongoc_client_get_collection(c, "rdr_f", "keep");
    ck_assert_msg(mongoc_collection_rename(col, "rdr_f", "skipped", false, &berr), "rename: %s", berr.message);
    mongoc_collection_destroy(col);
    insert_one(c, "rdr_f", "keep", 3);

    /* keep insert, skip insert (NOOP), rename out of the filter (a drop of keep's table), keep's implicit create
     * and insert. An excluded op loses its namespace, so NOOPs with the filter's reason count too (the suites run
     * one at a time, so they are ours). */
    op_kind kinds[8];
    const char *reasons[8];
    int32_t ids[8];
    size_t n = 0;
    double until = now_s() + 10;
    while (n < 5 && now_s() < until) {
        queue_item it;
        if (!pop_wait(q, &it, 0.05))
            continue;
        ck_assert_msg(it.type != QUEUE_END, "unexpected QUEUE_END: %s", it.message);
        if (it.type == QUEUE_ENTRY) {
            const op *o = &it.entry->ops[0];
            bool ours = (o->db && strcmp(o->db, "rdr_f") == 0) ||
                        (o->kind == OP_NOOP && o->reason && strcmp(o->reason, "excluded by include/exclude") == 0);
            if (ours) {
                kinds[n] = o->kind;
                reasons[n] = o->reason;
                ids[n] = op_id(o);
                n++;
            }
        }
        queue_item_clear(&it);
    }
    ck_assert_uint_eq(n, 5);
    ck_assert_int_eq(kinds[0], OP_INSERT);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(kinds[1], OP_NOOP);
    ck_assert_str_eq(reasons[1], "excluded by include/exclude");
    ck_assert_int_eq(kinds[2], OP_DROP);
    ck_assert_int_eq(kinds[3], OP_CREATE);
    ck_assert_int_eq(kinds[4], OP_INSERT);
    ck_assert_int_eq(ids[4], 3);

    /* A rename into the filter cannot be applied from the oplog: the reader stops before it, saying why. */
    col = mongoc_client_get_collection(c, "rdr_f", "skip");
    ck_assert_msg(mongoc_collection_rename(col, "rdr_f", "kept", false, &berr), "rename: %s", berr.message);
    mongoc_collection_destroy(col);
    bool ended = false;
    until = now_s() + 10;
    while (!ended && now_s() < until) {
        queue_item it;
        if (!pop_wait(q, &it, 0.05))
            continue;
        if (it.type == QUEUE_END) {
            ended = true;
            ck_assert_int_eq(it.reason, QUEUE_END_UNSUPPORTED);
            ck_assert_msg(strstr(it.message, "rdr_f.skip -> rdr_f.kept") && strstr(it.message, "--reimport"),
                          "the reader's message: %s", it.message);
        } else if (it.type == QUEUE_ENTRY) {
            const op *o = &it.entry->ops[0];
            ck_assert_msg(!(o->db && strcmp(o->db, "rdr_f") == 0 && o->kind != OP_NOOP),
                          "an op of rdr_f after the rename into the filter");
        }
        queue_item_clear(&it);
    }
    ck_assert_msg(ended, "the reader went on past a rename into the filter");
    reader_free(r);
    queue_free(q);
    nsfilter_free(f);
    mongoc_client_destroy(c);
}
END_TEST

/* Truncation past the reader's position: the getMore fails with CappedPositionLost, the re-find at the last pushed
 * position finds a later entry first, and the reader gives up with code 4 instead of skipping the lost entries. */
START_TEST(test_truncated_under_reader)
{
    mongoc_client_t *c = client_new();
    NEED_MONGOSIM(c, "truncated under the reader");
    drop_db(c, "rdr_trunc");
    insert_one(c, "rdr_trunc", "a", 0); /* the implicit create comes before start */
    op_pos start = last_optime(c);
    queue *q = queue_new(1, 0); /* the reader blocks on its second push until we pop */
    /* Batches of 2: once _id 1 is queued the reader can push nothing more, and holds at most the rest of the batch
     * that brought _id 1 or, that rest being empty, one more batch: a subset of {_id 2, _id 3}, never _id 4, however
     * far it got. (With larger batches, a test slow to insert _id 4 could find the reader's next getMore bringing it
     * along: the truncation would then not be under the reader, and the case would fail for want of a QUEUE_END.) */
    reader *r = start_reader_batch(q, &start, NULL, 2);
    for (int32_t i = 1; i <= 3; i++)
        insert_one(c, "rdr_trunc", "a", i);
    double until = now_s() + 10;
    while (queue_ops(q) == 0 && now_s() < until)
        sleep_ms(10);
    ck_assert_uint_eq(queue_ops(q), 1);

    insert_one(c, "rdr_trunc", "a", 4);
    op_pos at4 = last_optime(c);
    command_ok(c, "admin",
               BCON_NEW("mongosimTruncateOplog", BCON_INT32(1), "before", BCON_TIMESTAMP(at4.secs, at4.inc)), NULL);

    int32_t next = 1;
    queue_item it;
    until = now_s() + 10;
    for (;;) {
        ck_assert_msg(now_s() < until, "no QUEUE_END after the truncation");
        if (!pop_wait(q, &it, 0.05))
            continue;
        if (it.type == QUEUE_END)
            break;
        if (it.type == QUEUE_ENTRY && entry_in_db(it.entry, "rdr_trunc")) {
            ck_assert_msg(op_id(&it.entry->ops[0]) == next, "got _id %d, expected %d (4 is past the lost part)",
                          op_id(&it.entry->ops[0]), next);
            next++;
        }
        queue_item_clear(&it);
    }
    ck_assert_int_ge(next, 2); /* at least _id 1 came before the failure */
    ck_assert_int_eq(it.reason, QUEUE_END_RESUME_LOST);
    ck_assert_msg(strstr(it.message, "no longer in the oplog"), "message: %s", it.message);
    queue_item_clear(&it);
    reader_free(r);
    queue_free(q);
    mongoc_client_destroy(c);
}
END_TEST

START_TEST(test_stop_while_queue_full)
{
    mongoc_client_t *c = client_new();
    drop_db(c, "rdr_full");
    op_pos start = last_optime(c);
    queue *q = queue_new(1, 0);
    thread_list before;
    threads_now(&before);
    reader *r = start_reader(q, &start, NULL);
    pid_t tid = reader_thread(&before);
    for (int32_t i = 1; i <= 4; i++)
        insert_one(c, "rdr_full", "a", i);
    /* Without popping, the reader fills the queue and blocks in its push: wait for _id 1 in the queue, then for
     * the thread asleep on the queue's condition variable (a futex inside the queue object) with _id 2 in hand. */
    double until = now_s() + 10;
    while (queue_ops(q) == 0 && now_s() < until)
        sleep_ms(10);
    ck_assert_uint_eq(queue_ops(q), 1);
    wait_reader_blocked(tid, q, QUEUE_OBJECT_BYTES, 10, "blocked in a push into the full queue");
    /* Nothing but a wake-up from reader_stop gets it out of that push (nobody pops), so a stop that does not wake it
     * never returns; the bound is only there to fail fast, and is generous (it takes milliseconds). */
    double t0 = now_s();
    reader_stop(r);
    ck_assert_msg(now_s() - t0 < 30.0, "reader_stop took %.2f s while the reader was blocked", now_s() - t0);
    ck_assert(reader_finished(r));
    ck_assert(!queue_stopped(q)); /* stopping the queue is the caller's choice */
    reader_free(r);
    queue_free(q); /* frees what is left */
    mongoc_client_destroy(c);
}
END_TEST

START_TEST(test_bad_uri)
{
    reader_config cfg;
    char err[256] = "";
    reader_config_init(&cfg);
    cfg.uri = "notmongodb://x";
    queue *q = queue_new(10, 0);
    mongoc_init();
    reader *r = reader_start(&cfg, q, err, sizeof err);
    ck_assert_ptr_null(r);
    ck_assert_msg(strstr(err, "URI"), "err: %s", err);
    queue_free(q);
}
END_TEST

Suite *reader_suite(void)
{
    Suite *s = suite_create("reader");
    TCase *tc = tcase_create("mongo");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_bad_uri);
    tcase_add_test(tc, test_tail_after_checkpoint);
    tcase_add_test(tc, test_idle_after_full_batch);
    tcase_add_test(tc, test_resume_skips_start);
    tcase_add_test(tc, test_resume_point_lost);
    tcase_add_test(tc, test_rolled_back_term);
    tcase_add_test(tc, test_reconnect_after_drop);
    tcase_add_test(tc, test_step_down_and_up);
    tcase_add_test(tc, test_malformed_entry_is_fatal);
    tcase_add_test(tc, test_malformed_batch_is_fatal);
    tcase_add_test(tc, test_malformed_lookup_is_fatal);
    tcase_add_test(tc, test_nsfilter_turns_excluded_into_noop);
    tcase_add_test(tc, test_truncated_under_reader);
    tcase_add_test(tc, test_stop_while_queue_full);
    suite_add_tcase(s, tc);
    return s;
}

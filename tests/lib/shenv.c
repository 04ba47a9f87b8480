/*
 * shenv.c — the daemon on a sharded mongosim for the integration tests (shenv.h).
 */
#include "shenv.h"

#include <check.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compare.h"
#include "daemonenv.h"

void shenv_start(shenv *e, const char *name, const shenv_opts *o)
{
    memset(e, 0, sizeof *e);
    e->log_grep = o->log_grep != NULL ? o->log_grep : "-v 'info: applied'";
    e->log_tail = o->log_tail;
    char err[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(e->dir, sizeof e->dir, "%s/oplog2pg-%s-%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", o->prefix, name);
    ck_assert_ptr_nonnull(mkdtemp(e->dir));
    snprintf(e->service, sizeof e->service, "%s_%s", o->prefix, name);
    snprintf(e->db, sizeof e->db, "%s_%s", o->prefix, name);
    char simlog[256];
    snprintf(simlog, sizeof simlog, "%s/mongosim.log", e->dir);
    mongoc_init();
    ck_assert_msg(simcluster_start(o->shards, o->sim_args, simlog, &e->c, err, sizeof err), "%s", err);
    simcluster_router_uri(&e->c, e->router, sizeof e->router);
    e->client = mongoc_client_new(e->router);
    ck_assert_ptr_nonnull(e->client);
    snprintf(e->ini, sizeof e->ini, "%s/oplog2pg.ini", e->dir);
    FILE *f = fopen(e->ini, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "[mongodb]\nuri = %s%s\n%s\n[postgres]\nconninfo = %s\n[replication]\nservice = %s\ninclude = %s.*\n"
            "[logging]\nprogress_interval = 1s\n",
            e->router, o->uri_options ? o->uri_options : "", o->extra_ini ? o->extra_ini : "", denv_pg_conninfo(),
            e->service, e->db);
    fclose(f);
}

void shenv_show_log(const shenv *e)
{
    char cmd[500];
    snprintf(cmd, sizeof cmd, "grep %s '%s' | %s -n 60 >&2", e->log_grep, e->log, e->log_tail ? "tail" : "head");
    if (system(cmd) != 0)
        fprintf(stderr, "(no daemon log)\n");
}

void shenv_daemon(shenv *e, const char *const *args)
{
    char err[512], bin[256];
    snprintf(bin, sizeof bin, "%s/oplog2pg", proc_build_dir());
    const char *argv[12] = {bin, "-c", e->ini, "run"};
    size_t n = 4;
    for (size_t i = 0; args != NULL && args[i] != NULL; i++) {
        ck_assert_msg(n < 11, "too many arguments for the daemon");
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    snprintf(e->log, sizeof e->log, "%s/oplog2pg.log.%d", e->dir, e->starts++);
    ck_assert_msg(proc_start(argv, NULL, e->log, &e->daemon, err, sizeof err), "%s", err);
}

void shenv_daemon_ready(shenv *e, const char *const *args)
{
    shenv_daemon(e, args);
    double until = denv_now() + 60;
    while (!denv_file_contains(e->log, "ready: ")) {
        if (denv_now() > until || proc_wait(&e->daemon, 0)) {
            shenv_show_log(e);
            ck_abort_msg("the daemon did not become ready");
        }
        usleep(50 * 1000);
    }
}

void shenv_kill(shenv *e)
{
    ck_assert(proc_signal(&e->daemon, SIGKILL));
    ck_assert(proc_wait(&e->daemon, 30));
}

void shenv_stop(shenv *e)
{
    if (e->daemon.pid > 0) {
        ck_assert(proc_signal(&e->daemon, SIGTERM));
        bool exited = proc_wait(&e->daemon, 60);
        if (!exited || proc_exit_code(&e->daemon) != 0)
            shenv_show_log(e);
        ck_assert_msg(exited, "the daemon did not stop on SIGTERM");
        ck_assert_int_eq(proc_exit_code(&e->daemon), 0);
    }
    mongoc_client_destroy(e->client);
    simcluster_stop(&e->c);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", e->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", e->dir);
}

int shenv_run(shenv *e, const char *cmd, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/%s.txt", e->dir, cmd);
    char bin[256], err[256];
    snprintf(bin, sizeof bin, "%s/oplog2pg", proc_build_dir());
    const char *argv[] = {bin, "-c", e->ini, cmd, NULL};
    proc_handle p;
    ck_assert_msg(proc_start(argv, NULL, out, &p, err, sizeof err), "%s", err);
    ck_assert_msg(proc_wait(&p, 60), "`oplog2pg %s` did not end", cmd);
    return proc_exit_code(&p);
}

void shenv_admin(shenv *e, bson_t *cmd, bson_t *reply)
{
    bson_error_t err;
    bson_t tmp;
    bool ok = mongoc_client_command_simple(e->client, "admin", cmd, NULL, reply ? reply : &tmp, &err);
    char *txt = bson_as_relaxed_extended_json(cmd, NULL);
    ck_assert_msg(ok, "%s: %s", txt, err.message);
    bson_free(txt);
    if (reply == NULL)
        bson_destroy(&tmp);
    bson_destroy(cmd);
}

void shenv_enable_sharding(shenv *e, const char *primary)
{
    shenv_admin(e, BCON_NEW("enableSharding", BCON_UTF8(e->db), "primaryShard", BCON_UTF8(primary)), NULL);
}

void shenv_move(shenv *e, const char *coll, const char *field, int key, const char *to)
{
    char ns[160];
    snprintf(ns, sizeof ns, "%s.%s", e->db, coll);
    shenv_admin(e, BCON_NEW("moveChunk", BCON_UTF8(ns), "find", "{", field, BCON_INT32(key), "}", "to", BCON_UTF8(to)),
                NULL);
}

void shenv_shard_coll(shenv *e, const char *coll, const char *field, const int *at, size_t n)
{
    char ns[160];
    snprintf(ns, sizeof ns, "%s.%s", e->db, coll);
    shenv_admin(e, BCON_NEW("shardCollection", BCON_UTF8(ns), "key", "{", field, BCON_INT32(1), "}"), NULL);
    for (size_t k = 0; k < n; k++)
        shenv_admin(e, BCON_NEW("split", BCON_UTF8(ns), "middle", "{", field, BCON_INT32(at[k]), "}"), NULL);
    for (size_t k = 0; k < n; k++)
        shenv_move(e, coll, field, at[k], e->c.id[(k + 1) % e->c.n]);
}

void shenv_insert(shenv *e, const char *coll, int id, int v)
{
    mongoc_collection_t *c = mongoc_client_get_collection(e->client, e->db, coll);
    bson_t *d = BCON_NEW("_id", BCON_INT32(id), "v", BCON_INT32(v), "s", BCON_UTF8("text"));
    bson_error_t err;
    ck_assert_msg(mongoc_collection_insert_one(c, d, NULL, NULL, &err), "insert %d: %s", id, err.message);
    bson_destroy(d);
    mongoc_collection_destroy(c);
}

void shenv_update(shenv *e, const char *coll, int id, bson_t *update, bool many)
{
    mongoc_collection_t *c = mongoc_client_get_collection(e->client, e->db, coll);
    bson_t *q = BCON_NEW("_id", BCON_INT32(id));
    bson_error_t err;
    bool ok = many ? mongoc_collection_update_many(c, q, update, NULL, NULL, &err)
                   : mongoc_collection_update_one(c, q, update, NULL, NULL, &err);
    ck_assert_msg(ok, "update %d: %s", id, err.message);
    bson_destroy(q);
    bson_destroy(update);
    mongoc_collection_destroy(c);
}

void shenv_delete(shenv *e, const char *coll, int id, bool many)
{
    mongoc_collection_t *c = mongoc_client_get_collection(e->client, e->db, coll);
    bson_t *q = BCON_NEW("_id", BCON_INT32(id));
    bson_error_t err;
    bool ok = many ? mongoc_collection_delete_many(c, q, NULL, NULL, &err)
                   : mongoc_collection_delete_one(c, q, NULL, NULL, &err);
    ck_assert_msg(ok, "delete %d: %s", id, err.message);
    bson_destroy(q);
    mongoc_collection_destroy(c);
}

bool shenv_wait_equal(shenv *e, double timeout_s, bool report)
{
    PGconn *pg = PQconnectdb(denv_pg_conninfo());
    ck_assert_int_eq(PQstatus(pg), CONNECTION_OK);
    compare_options o = {.db_prefix = e->db};
    double until = denv_now() + timeout_s;
    bool match = false;
    for (;;) {
        compare_report r;
        char err[512];
        bool ran = compare_all(e->router, pg, &o, &r, err, sizeof err);
        match = ran && r.match && r.source_rows > 0;
        if (match || denv_now() >= until) {
            if (!match && report) {
                if (ran)
                    compare_report_print(&r, stderr, false);
                else
                    fprintf(stderr, "compare: %s\n", err);
            }
            compare_report_free(&r);
            break;
        }
        compare_report_free(&r);
        ck_assert_msg(proc_exit_code(&e->daemon) < 0 || e->daemon.pid <= 0, "the daemon exited");
        usleep(200 * 1000);
    }
    PQfinish(pg);
    if (!match && report)
        shenv_show_log(e);
    return match;
}

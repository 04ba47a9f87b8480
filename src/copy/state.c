/*
 * state.c — the copy state in PostgreSQL: oplog2pg.copy_state (one row per service: the oplog position the copy
 * started at, and when it finished) and oplog2pg.copy_progress (one row per collection: the last _id committed, the
 * count). Loaded when a copy resumes, forgotten by --reimport, read by `status`.
 */
#include "copy_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sink/pg.h"
#include "util/log.h"

/* ---------------------------------------------------------------------------------------------------------------- */
/* the copy state in PostgreSQL */

/* 1 with *start and *finished when the service has a copy state row, 0 when not, -1 on error. */
int copy_state_load(pgconn *pg, const char *service, op_pos *start, bool *finished, char *err, size_t errlen)
{
    const char *p[1] = {service};
    PGresult *r = copy_query_params(pg,
                                    "SELECT start_sec, start_inc, start_term, finished_at IS NOT NULL "
                                    "FROM oplog2pg.copy_state WHERE service = $1",
                                    1, p, NULL, NULL, 0);
    int rc = -1;
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        snprintf(err, errlen, "reading oplog2pg.copy_state: %s", copy_pg_error(pg));
        copy_trim_nl(err);
    } else if (PQntuples(r) == 0) {
        rc = 0;
    } else {
        sink_row_pos(r, 0, 0, start);
        *finished = PQgetvalue(r, 0, 3)[0] == 't';
        rc = 1;
    }
    PQclear(r);
    return rc;
}

void copy_jobs_free(job *jobs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(jobs[i].last_id);
    free(jobs);
}

bool copy_jobs_load(pgconn *pg, const char *service, job **out, size_t *nout, char *err, size_t errlen)
{
    const char *p[1] = {service};
    /* last_id in binary (result format 1) so the BSON comes back byte for byte. */
    PGresult *r = copy_query_params(pg,
                                    "SELECT db, coll, last_id, copied, total_estimate, done, uuid, ts_time, ts_meta "
                                    "FROM oplog2pg.copy_progress "
                                    "WHERE service = $1 ORDER BY db, coll",
                                    1, p, NULL, NULL, 1);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        snprintf(err, errlen, "reading oplog2pg.copy_progress: %s", copy_pg_error(pg));
        copy_trim_nl(err);
        PQclear(r);
        return false;
    }
    size_t n = (size_t)PQntuples(r);
    job *jobs = calloc(n ? n : 1, sizeof *jobs);
    if (jobs == NULL)
        goto oom;
    for (size_t i = 0; i < n; i++) {
        job *j = &jobs[i];
        int row = (int)i;
        snprintf(j->db, sizeof j->db, "%s", PQgetvalue(r, row, 0));
        snprintf(j->coll, sizeof j->coll, "%s", PQgetvalue(r, row, 1));
        snprintf(j->src_db, sizeof j->src_db, "%s", j->db);
        snprintf(j->src_coll, sizeof j->src_coll, "%s", j->coll);
        j->ts = strncmp(j->coll, COPY_BUCKETS_PREFIX, COPY_BUCKETS_PREFIX_LEN) == 0;
        if (j->ts && !PQgetisnull(r, row, 7)) {
            /* the options listed at the plan (where the job is located, they are read again) */
            snprintf(j->ts_time, sizeof j->ts_time, "%s", PQgetvalue(r, row, 7));
            snprintf(j->ts_meta, sizeof j->ts_meta, "%s", PQgetisnull(r, row, 8) ? "" : PQgetvalue(r, row, 8));
            j->ts_known = j->ts_time[0] != '\0';
        }
        if (!PQgetisnull(r, row, 6) && PQgetlength(r, row, 6) == 16) {
            memcpy(j->uuid, PQgetvalue(r, row, 6), 16);
            j->has_uuid = true;
        }
        if (!PQgetisnull(r, row, 2) && PQgetlength(r, row, 2) > 0) {
            j->last_id_len = (uint32_t)PQgetlength(r, row, 2);
            j->last_id = malloc(j->last_id_len);
            if (j->last_id == NULL) {
                copy_jobs_free(jobs, n);
                goto oom;
            }
            memcpy(j->last_id, PQgetvalue(r, row, 2), j->last_id_len);
        }
        /* binary int8: big-endian */
        const unsigned char *c = (const unsigned char *)PQgetvalue(r, row, 3);
        const unsigned char *t = (const unsigned char *)PQgetvalue(r, row, 4);
        uint64_t cv = 0, tv = 0;
        for (int k = 0; k < 8; k++) {
            cv = cv << 8 | c[k];
            tv = tv << 8 | t[k];
        }
        j->copied = (int64_t)cv;
        j->estimate = (int64_t)tv;
        j->done = PQgetvalue(r, row, 5)[0] != 0;
        j->state = j->done ? JOB_FINISHED : JOB_PENDING;
        atomic_store(&j->live_copied, j->copied);
    }
    PQclear(r);
    *out = jobs;
    *nout = n;
    return true;
oom:
    PQclear(r);
    snprintf(err, errlen, "out of memory reading the copy progress");
    return false;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* reset and state */

bool copy_reset(const char *pg_conninfo, const char *service, const nsfilter *filter, bool drop, char *err,
                size_t errlen)
{
    char m[ERRLEN];
    PGresult *r = NULL;
    pgconn *pg = copy_pg_open(pg_conninfo, 0, m, sizeof m, NULL);
    size_t n = 0;
    if (pg == NULL)
        goto fail;
    if (!copy_pg_exec(pg, "BEGIN", m, sizeof m, NULL))
        goto fail;
    const char *sp[1] = {service};
    r = copy_query_params(pg, "DELETE FROM oplog2pg.copy_state WHERE service = $1", 1, sp, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        snprintf(m, sizeof m, "forgetting the copy state: %s", copy_pg_error(pg));
        goto fail_rb;
    }
    PQclear(r);
    /* Only the tables the catalog says this service made, for the namespaces the filter includes: a table of
     * someone else, or of another service, is never touched. */
    r = copy_query_params(
        pg, "SELECT schema_name, table_name, db, coll FROM oplog2pg.tables WHERE service = $1 ORDER BY 1, 2", 1, sp,
        NULL, NULL, 0);
    if (r == NULL) {
        snprintf(m, sizeof m, "listing the catalog: %s", copy_pg_error(pg));
        goto fail_rb;
    }
    for (int i = 0; i < PQntuples(r); i++) {
        const char *schema = PQgetvalue(r, i, 0), *table = PQgetvalue(r, i, 1);
        const char *db = PQgetvalue(r, i, 2), *coll = PQgetvalue(r, i, 3);
        if (copy_skip_namespace(filter, db, coll))
            continue;
        char *qs = PQescapeIdentifier(pg->pg, schema, strlen(schema));
        char *qt = PQescapeIdentifier(pg->pg, table, strlen(table));
        char *sql = NULL;
        if (qs == NULL || qt == NULL || asprintf(&sql, "TRUNCATE %s.%s", qs, qt) < 0)
            sql = NULL;
        PQfreemem(qs);
        PQfreemem(qt);
        const char *dv[3] = {service, schema, table};
        PGresult *dr = NULL;
        bool ok =
            drop ? (dr = copy_query_params(pg, "SELECT oplog2pg.drop_table($1, $2, $3)", 3, dv, NULL, NULL, 0)) != NULL
                 : sql != NULL && copy_pg_exec(pg, sql, m, sizeof m, NULL);
        PQclear(dr);
        dr = NULL;
        /* a time-series collection's bucket documents go with its rows (the copy stores them again) */
        if (ok && !drop) {
            ok = (dr = copy_query_params(pg,
                                         "DELETE FROM oplog2pg.timeseries_bucket WHERE schema_name = $2 AND "
                                         "table_name = $3 AND $1::text IS NOT NULL",
                                         3, dv, NULL, NULL, 0)) != NULL;
            if (!ok)
                snprintf(m, sizeof m, "%s", copy_pg_error(pg));
        }
        PQclear(dr);
        free(sql);
        if (!ok) {
            char e2[ERRLEN];
            snprintf(e2, sizeof e2, "%s", drop ? copy_pg_error(pg) : m);
            snprintf(m, sizeof m, "%s %.127s.%.127s: %.700s", drop ? "dropping" : "truncating", schema, table, e2);
            goto fail_rb;
        }
        n++;
    }
    PQclear(r);
    r = NULL;
    if (!copy_pg_exec(pg, "COMMIT", m, sizeof m, NULL))
        goto fail;
    log_notice("copy: service %s reset: copy state forgotten, %zu tables %s", service, n,
               drop ? "dropped" : "truncated");
    pgconn_close(pg);
    return true;

fail_rb:
    copy_trim_nl(m);
    PQclear(r);
    r = copy_query(pg, "ROLLBACK");
fail:
    PQclear(r);
    snprintf(err, errlen, "resetting the copy of service %s: %s", service, m);
    pgconn_close(pg);
    return false;
}

bool copy_state_read(const char *pg_conninfo, const char *service, copy_state *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    char m[ERRLEN];
    PGresult *r = NULL;
    pgconn *pg = copy_pg_connect(pg_conninfo, 0, NULL, NULL, m, sizeof m, NULL);
    if (pg == NULL)
        goto fail;
    r = copy_query(pg, "SELECT to_regclass('oplog2pg.copy_state') IS NOT NULL AND "
                       "to_regclass('oplog2pg.copy_progress') IS NOT NULL");
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        goto pgfail;
    bool have_tables = PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    r = NULL;
    if (!have_tables) {
        pgconn_close(pg);
        return true;
    }
    const char *sp[1] = {service};
    r = copy_query_params(pg,
                          "SELECT start_sec, start_inc, start_term, started_at::text, COALESCE(finished_at::text, '') "
                          "FROM oplog2pg.copy_state WHERE service = $1",
                          1, sp, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        goto pgfail;
    if (PQntuples(r) == 0) {
        PQclear(r);
        pgconn_close(pg);
        return true;
    }
    out->exists = true;
    sink_row_pos(r, 0, 0, &out->start);
    snprintf(out->started_at, sizeof out->started_at, "%s", PQgetvalue(r, 0, 3));
    snprintf(out->finished_at, sizeof out->finished_at, "%s", PQgetvalue(r, 0, 4));
    out->finished = out->finished_at[0] != '\0';
    PQclear(r);
    r = copy_query_params(
        pg,
        "SELECT db, coll, copied, total_estimate, done FROM oplog2pg.copy_progress WHERE service = $1 "
        "ORDER BY db, coll",
        1, sp, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        goto pgfail;
    size_t n = (size_t)PQntuples(r);
    if (n > 0) {
        out->rows = calloc(n, sizeof *out->rows);
        if (out->rows == NULL) {
            snprintf(m, sizeof m, "out of memory");
            goto fail;
        }
    }
    for (size_t i = 0; i < n; i++) {
        copy_progress_row *row = &out->rows[i];
        snprintf(row->db, sizeof row->db, "%s", PQgetvalue(r, (int)i, 0));
        snprintf(row->coll, sizeof row->coll, "%s", PQgetvalue(r, (int)i, 1));
        row->copied = strtoll(PQgetvalue(r, (int)i, 2), NULL, 10);
        row->total_estimate = strtoll(PQgetvalue(r, (int)i, 3), NULL, 10);
        row->done = PQgetvalue(r, (int)i, 4)[0] == 't';
    }
    out->n = n;
    PQclear(r);
    pgconn_close(pg);
    return true;

pgfail:
    snprintf(m, sizeof m, "%s", copy_pg_error(pg));
    copy_trim_nl(m);
fail:
    PQclear(r);
    pgconn_close(pg);
    copy_state_free(out);
    snprintf(err, errlen, "reading the copy state of service %s: %s", service, m);
    return false;
}

void copy_state_free(copy_state *s)
{
    if (s == NULL)
        return;
    free(s->rows);
    s->rows = NULL;
    s->n = 0;
}

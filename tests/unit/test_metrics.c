/*
 * test_metrics.c — the metrics module: the Prometheus text rendering (parsed line by line and checked for structure,
 * every family's HELP/TYPE, every value and label escaping), HOST:PORT parsing, and the HTTP endpoint fetched with
 * the real curl command-line client (status, content type, body, fresh values after a publish, 404, 405, HEAD, a
 * second server on a taken port, nothing listening after metrics_stop).
 */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>

#include "daemon/metrics.h"

Suite *metrics_suite(void); /* called by the generated runner list */

/* ---- exposition parsing ------------------------------------------------------------------------------------------ */

/* Every family the daemon must expose, with its type (the docs use these names). */
static const struct {
    const char *name, *type;
} families[] = {
    {"oplog2pg_info", "gauge"},
    {"oplog2pg_ready", "gauge"},
    {"oplog2pg_start_time_seconds", "gauge"},
    {"oplog2pg_entries_applied_total", "counter"},
    {"oplog2pg_ops_applied_total", "counter"},
    {"oplog2pg_flushes_total", "counter"},
    {"oplog2pg_commits_total", "counter"},
    {"oplog2pg_rows_written_total", "counter"},
    {"oplog2pg_bytes_written_total", "counter"},
    {"oplog2pg_duplicate_fallbacks_total", "counter"},
    {"oplog2pg_rewinds_total", "counter"},
    {"oplog2pg_statements_unnamed_total", "counter"},
    {"oplog2pg_dead_letters_total", "counter"},
    {"oplog2pg_timeseries_bucket_changes_total", "counter"},
    {"oplog2pg_timeseries_measurements_written_total", "counter"},
    {"oplog2pg_timeseries_bucket_reads_total", "counter"},
    {"oplog2pg_reconnects_total", "counter"},
    {"oplog2pg_queue_depth", "gauge"},
    {"oplog2pg_queue_capacity", "gauge"},
    {"oplog2pg_lag_seconds", "gauge"},
    {"oplog2pg_checkpoint_timestamp_seconds", "gauge"},
    {"oplog2pg_open_transactions", "gauge"},
    {"oplog2pg_open_transaction_bytes", "gauge"},
    {"oplog2pg_open_transaction_oldest_age_seconds", "gauge"},
    {"oplog2pg_copy_documents", "gauge"},
    {"oplog2pg_copy_documents_estimate", "gauge"},
    {"oplog2pg_delete_reconciliations_total", "counter"},
    {"oplog2pg_reconciled_deletes_total", "counter"},
};
#define N_FAMILIES (sizeof families / sizeof families[0])

/* Families shown only sometimes, with their types: a sharded cluster's (one sample per shard), and the oplog window
 * and margin (absent while unknown; per shard in a sharded cluster). */
static const struct {
    const char *name, *type;
} shard_families[] = {
    {"oplog2pg_shard_checkpoint_timestamp_seconds", "gauge"},
    {"oplog2pg_shard_read_timestamp_seconds", "gauge"},
    {"oplog2pg_shard_lag_seconds", "gauge"},
    {"oplog2pg_shard_merge_wait_seconds_total", "counter"},
    {"oplog2pg_shard_entries_total", "counter"},
    {"oplog2pg_shard_notes_total", "counter"},
    {"oplog2pg_shard_notes_refused", "gauge"},
    {"oplog2pg_oplog_window_seconds", "gauge"},
    {"oplog2pg_oplog_margin_seconds", "gauge"},
};
#define N_SHARD_FAMILIES (sizeof shard_families / sizeof shard_families[0])

static bool valid_float(const char *v)
{
    if (strcmp(v, "NaN") == 0 || strcmp(v, "+Inf") == 0 || strcmp(v, "-Inf") == 0)
        return true;
    char *end;
    if (*v == '\0')
        return false;
    strtod(v, &end);
    return *end == '\0';
}

/* Checks the whole text against the 0.0.4 format as far as we use it: newline-terminated lines; every family opens
 * with "# HELP name text" then "# TYPE name counter|gauge", appears once, and is followed only by its own samples;
 * every sample is `name[{labels}] value` with a valid float; each family of the table is present with its type. */
static void check_structure(const char *text)
{
    char seen[N_FAMILIES] = {0};
    char seen_shards[1024] = "";
    char current[128] = "";
    size_t n = strlen(text);
    ck_assert_msg(n > 0 && text[n - 1] == '\n', "the text does not end with a newline");

    char *copy = strdup(text), *save = NULL;
    char *pending_help = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "# HELP ", 7) == 0) {
            ck_assert_msg(pending_help == NULL, "two HELP lines in a row: %s", line);
            const char *name = line + 7, *sp = strchr(name, ' ');
            ck_assert_msg(sp != NULL && sp[1] != '\0', "HELP without text: %s", line);
            pending_help = line;
            snprintf(current, sizeof current, "%.*s", (int)(sp - name), name);
            continue;
        }
        if (strncmp(line, "# TYPE ", 7) == 0) {
            ck_assert_msg(pending_help != NULL, "TYPE without a HELP before it: %s", line);
            char name[128], type[32];
            ck_assert_msg(sscanf(line + 7, "%127s %31s", name, type) == 2, "bad TYPE line: %s", line);
            ck_assert_msg(strcmp(name, current) == 0, "TYPE %s follows HELP %s", name, current);
            size_t i;
            for (i = 0; i < N_FAMILIES; i++)
                if (strcmp(families[i].name, name) == 0)
                    break;
            if (i == N_FAMILIES) {
                size_t k;
                for (k = 0; k < N_SHARD_FAMILIES; k++)
                    if (strcmp(shard_families[k].name, name) == 0)
                        break;
                ck_assert_msg(k < N_SHARD_FAMILIES, "unexpected family %s", name);
                ck_assert_msg(strcmp(shard_families[k].type, type) == 0, "%s is a %s, want %s", name, type,
                              shard_families[k].type);
                ck_assert_msg(strstr(seen_shards, name) == NULL, "family %s appears twice", name);
                strncat(seen_shards, name, sizeof seen_shards - strlen(seen_shards) - 2);
                strcat(seen_shards, " ");
                pending_help = NULL;
                continue;
            }
            ck_assert_msg(!seen[i], "family %s appears twice", name);
            ck_assert_msg(strcmp(families[i].type, type) == 0, "%s is a %s, want %s", name, type, families[i].type);
            seen[i] = 1;
            pending_help = NULL;
            continue;
        }
        ck_assert_msg(line[0] != '#', "unexpected comment: %s", line);
        ck_assert_msg(pending_help == NULL, "sample between HELP and TYPE: %s", line);
        ck_assert_msg(current[0] != '\0', "sample before any family: %s", line);
        size_t nl = strcspn(line, "{ ");
        ck_assert_msg(nl == strlen(current) && strncmp(line, current, nl) == 0, "sample %s outside its family %s", line,
                      current);
        const char *sp = strrchr(line, ' ');
        ck_assert_msg(sp != NULL, "sample without a value: %s", line);
        if (line[nl] == '{')
            ck_assert_msg(sp[-1] == '}', "labels not closed: %s", line);
        ck_assert_msg(valid_float(sp + 1), "bad value in: %s", line);
    }
    ck_assert_msg(pending_help == NULL, "HELP without TYPE at the end");
    free(copy);
    for (size_t i = 0; i < N_FAMILIES; i++)
        ck_assert_msg(seen[i], "family %s missing", families[i].name);
}

/* The value of the one sample whose `name{labels}` is exactly key (copied to out); fails when absent or repeated. */
static void sample(const char *text, const char *key, char *out, size_t outlen)
{
    int found = 0;
    size_t klen = strlen(key);
    for (const char *p = text; *p != '\0';) {
        const char *eol = strchr(p, '\n');
        size_t len = eol != NULL ? (size_t)(eol - p) : strlen(p);
        if (p[0] != '#' && len > klen && strncmp(p, key, klen) == 0 && p[klen] == ' ' &&
            memchr(p + klen + 1, ' ', len - klen - 1) == NULL) {
            found++;
            snprintf(out, outlen, "%.*s", (int)(len - klen - 1), p + klen + 1);
        }
        p += len + (eol != NULL);
    }
    ck_assert_msg(found == 1, "sample %s found %d times in:\n%s", key, found, text);
}

static void expect_u64(const char *text, const char *key, uint64_t want)
{
    char v[64], w[32];
    sample(text, key, v, sizeof v);
    snprintf(w, sizeof w, "%" PRIu64, want);
    ck_assert_msg(strcmp(v, w) == 0, "%s = %s, want %s", key, v, w);
}

static void expect_i64(const char *text, const char *key, int64_t want)
{
    char v[64], w[32];
    sample(text, key, v, sizeof v);
    snprintf(w, sizeof w, "%" PRId64, want);
    ck_assert_msg(strcmp(v, w) == 0, "%s = %s, want %s", key, v, w);
}

/* A double must read back exactly (the renderer promises round-trip precision). */
static void expect_double(const char *text, const char *key, double want)
{
    char v[64], *end;
    sample(text, key, v, sizeof v);
    double got = strtod(v, &end);
    ck_assert_msg(*end == '\0', "%s: \"%s\" is not a number", key, v);
    ck_assert_msg(got == want, "%s = %s (%.17g), want %.17g", key, v, got, want);
}

static char *render(const metrics_snapshot *s)
{
    size_t len = 0;
    char *text = metrics_render(s, &len);
    ck_assert(text != NULL);
    ck_assert_uint_eq(len, strlen(text));
    return text;
}

/* Distinct values in every field, so a field rendered under the wrong name cannot go unnoticed. */
static void fill_distinct(metrics_snapshot *s)
{
    memset(s, 0, sizeof *s);
    snprintf(s->service, sizeof s->service, "orders-replica");
    s->entries_applied = 1001;
    for (int i = 0; i < METRICS_OP_KINDS; i++)
        s->ops_applied[i] = 2001 + (uint64_t)i;
    for (int i = 0; i < METRICS_FLUSH_TRIGGERS; i++)
        s->flushes[i] = 3001 + (uint64_t)i;
    s->commits = 4001;
    for (int i = 0; i < METRICS_WRITE_METHODS; i++)
        s->rows_written[i] = 5001 + (uint64_t)i;
    s->bytes_written = UINT64_MAX; /* the full range, not squeezed through a double */
    s->dup_fallbacks = 6001;
    s->rewinds = 6004;
    s->unnamed = 6003;
    s->dead_letters = 6002;
    s->ts_bucket_ops = 6101;
    s->ts_rows = 6102;
    s->ts_bucket_reads = 6103;
    s->pg_reconnects = 7001;
    s->mongo_reconnects = 7002;
    s->queue_depth = 8001;
    s->queue_capacity = 8002;
    s->lag_seconds = 12.375;
    s->checkpoint_timestamp = 1717171717.125;
    s->copy_documents = 9000000001LL;
    s->copy_documents_estimate = 9000000002LL;
    s->txn_open = 9101;
    s->txn_bytes = 9102;
    s->txn_oldest_age = 91.5;
    s->window_known = true;
    s->window_seconds = 86401.5;
    s->margin_known = true;
    s->margin_seconds = -12.25; /* fallen off: shown as it is */
    s->ready = true;
    s->start_time = 1700000000.5;
}

/* ---- render ------------------------------------------------------------------------------------------------------ */

START_TEST(render_every_value)
{
    metrics_snapshot s;
    fill_distinct(&s);
    char *t = render(&s);
    check_structure(t);

    expect_u64(t, "oplog2pg_info{service=\"orders-replica\",version=\"" OPLOG2PG_VERSION "\"}", 1);
    expect_u64(t, "oplog2pg_ready", 1);
    expect_double(t, "oplog2pg_start_time_seconds", 1700000000.5);
    expect_u64(t, "oplog2pg_entries_applied_total", 1001);
    const char *kinds[] = {"insert", "update", "delete", "ddl", "noop"};
    for (int i = 0; i < METRICS_OP_KINDS; i++) {
        char key[128];
        snprintf(key, sizeof key, "oplog2pg_ops_applied_total{kind=\"%s\"}", kinds[i]);
        expect_u64(t, key, 2001 + (uint64_t)i);
    }
    const char *triggers[] = {"conflict", "size", "timer", "idle", "exit", "per_op", "tables"};
    for (int i = 0; i < METRICS_FLUSH_TRIGGERS; i++) {
        char key[128];
        snprintf(key, sizeof key, "oplog2pg_flushes_total{trigger=\"%s\"}", triggers[i]);
        expect_u64(t, key, 3001 + (uint64_t)i);
    }
    expect_u64(t, "oplog2pg_commits_total", 4001);
    const char *methods[] = {"copy", "insert", "update", "delete"};
    for (int i = 0; i < METRICS_WRITE_METHODS; i++) {
        char key[128];
        snprintf(key, sizeof key, "oplog2pg_rows_written_total{method=\"%s\"}", methods[i]);
        expect_u64(t, key, 5001 + (uint64_t)i);
    }
    expect_u64(t, "oplog2pg_bytes_written_total", UINT64_MAX);
    expect_u64(t, "oplog2pg_duplicate_fallbacks_total", 6001);
    expect_u64(t, "oplog2pg_rewinds_total", 6004);
    expect_u64(t, "oplog2pg_statements_unnamed_total", 6003);
    expect_u64(t, "oplog2pg_dead_letters_total", 6002);
    expect_u64(t, "oplog2pg_timeseries_bucket_changes_total", 6101);
    expect_u64(t, "oplog2pg_timeseries_measurements_written_total", 6102);
    expect_u64(t, "oplog2pg_timeseries_bucket_reads_total", 6103);
    expect_u64(t, "oplog2pg_reconnects_total{side=\"postgres\"}", 7001);
    expect_u64(t, "oplog2pg_reconnects_total{side=\"mongodb\"}", 7002);
    expect_u64(t, "oplog2pg_queue_depth", 8001);
    expect_u64(t, "oplog2pg_queue_capacity", 8002);
    expect_double(t, "oplog2pg_lag_seconds", 12.375);
    expect_double(t, "oplog2pg_checkpoint_timestamp_seconds", 1717171717.125);
    expect_i64(t, "oplog2pg_copy_documents", 9000000001LL);
    expect_i64(t, "oplog2pg_copy_documents_estimate", 9000000002LL);
    expect_u64(t, "oplog2pg_open_transactions", 9101);
    expect_u64(t, "oplog2pg_open_transaction_bytes", 9102);
    expect_double(t, "oplog2pg_open_transaction_oldest_age_seconds", 91.5);
    expect_double(t, "oplog2pg_oplog_window_seconds", 86401.5);
    expect_double(t, "oplog2pg_oplog_margin_seconds", -12.25);
    free(t);

    /* a window known without a checkpoint: the margin alone is absent */
    s.margin_known = false;
    t = render(&s);
    check_structure(t);
    expect_double(t, "oplog2pg_oplog_window_seconds", 86401.5);
    ck_assert_msg(strstr(t, "oplog2pg_oplog_margin_seconds") == NULL, "an unknown margin is shown:\n%s", t);
    free(t);
}
END_TEST

START_TEST(render_zeroed)
{
    metrics_snapshot s;
    memset(&s, 0, sizeof s);
    char *t = render(&s);
    check_structure(t);
    expect_u64(t, "oplog2pg_info{service=\"\",version=\"" OPLOG2PG_VERSION "\"}", 1);
    expect_u64(t, "oplog2pg_ready", 0);
    expect_u64(t, "oplog2pg_commits_total", 0);
    expect_double(t, "oplog2pg_lag_seconds", 0);
    expect_i64(t, "oplog2pg_copy_documents_estimate", 0);
    ck_assert_msg(strstr(t, "oplog2pg_oplog_") == NULL, "an unknown oplog window is shown:\n%s", t);
    free(t);
}
END_TEST

START_TEST(render_escapes_labels)
{
    metrics_snapshot s;
    memset(&s, 0, sizeof s);
    snprintf(s.service, sizeof s.service, "a\"b\\c\nd e");
    char *t = render(&s);
    check_structure(t);
    expect_u64(t, "oplog2pg_info{service=\"a\\\"b\\\\c\\nd e\",version=\"" OPLOG2PG_VERSION "\"}", 1);
    free(t);

    /* a service name filling the whole array, without a NUL: read no further than the array */
    memset(s.service, 'x', sizeof s.service);
    t = render(&s);
    char key[160];
    snprintf(key, sizeof key, "oplog2pg_info{service=\"%.*s\",version=\"%s\"}", (int)sizeof s.service, s.service,
             OPLOG2PG_VERSION);
    expect_u64(t, key, 1);
    free(t);
}
END_TEST

/* A sharded cluster's shards: one sample per shard and family, the id escaped as a label value; none without shards. */
START_TEST(render_shards)
{
    metrics_snapshot s;
    memset(&s, 0, sizeof s);
    char *t = render(&s);
    ck_assert_msg(strstr(t, "oplog2pg_shard_") == NULL, "shard series without shards");
    free(t);
    s.nshards = 2;
    snprintf(s.shards[0].id, sizeof s.shards[0].id, "shard0");
    s.shards[0].checkpoint_timestamp = 1000;
    s.shards[0].read_timestamp = 1030;
    s.shards[0].merge_wait_seconds = 1.5;
    s.shards[0].entries = 7;
    s.shards[0].notes = 3;
    snprintf(s.shards[1].id, sizeof s.shards[1].id, "rs\"1");
    s.shards[1].notes_refused = true;
    s.shards[0].window_known = s.shards[1].window_known = true;
    s.shards[0].window_seconds = 7200;
    s.shards[0].margin_known = true;
    s.shards[0].margin_seconds = 3599.5;
    s.shards[1].window_seconds = 60;
    s.window_known = s.margin_known = true; /* a replica set's figures: not shown beside the shards' */
    s.window_seconds = s.margin_seconds = 1;
    t = render(&s);
    check_structure(t);
    expect_u64(t, "oplog2pg_shard_checkpoint_timestamp_seconds{shard=\"shard0\"}", 1000);
    expect_u64(t, "oplog2pg_shard_read_timestamp_seconds{shard=\"shard0\"}", 1030);
    expect_u64(t, "oplog2pg_shard_lag_seconds{shard=\"shard0\"}", 30);
    expect_u64(t, "oplog2pg_shard_entries_total{shard=\"shard0\"}", 7);
    expect_u64(t, "oplog2pg_shard_notes_total{shard=\"shard0\"}", 3);
    expect_u64(t, "oplog2pg_shard_notes_refused{shard=\"shard0\"}", 0);
    expect_u64(t, "oplog2pg_shard_notes_refused{shard=\"rs\\\"1\"}", 1);
    expect_u64(t, "oplog2pg_shard_lag_seconds{shard=\"rs\\\"1\"}", 0); /* no checkpoint yet */
    ck_assert_msg(strstr(t, "oplog2pg_shard_merge_wait_seconds_total{shard=\"shard0\"} 1.5\n") != NULL, "%s", t);
    expect_u64(t, "oplog2pg_oplog_window_seconds{shard=\"shard0\"}", 7200);
    expect_u64(t, "oplog2pg_oplog_window_seconds{shard=\"rs\\\"1\"}", 60);
    expect_double(t, "oplog2pg_oplog_margin_seconds{shard=\"shard0\"}", 3599.5);
    ck_assert_msg(strstr(t, "oplog2pg_oplog_margin_seconds{shard=\"rs") == NULL, "an unknown margin is shown:\n%s", t);
    ck_assert_msg(strstr(t, "\noplog2pg_oplog_window_seconds ") == NULL, "an unlabelled window beside shards:\n%s", t);
    free(t);
}
END_TEST

START_TEST(render_doubles)
{
    metrics_snapshot s;
    memset(&s, 0, sizeof s);
    char v[64];

    s.lag_seconds = 0.1;
    char *t = render(&s);
    sample(t, "oplog2pg_lag_seconds", v, sizeof v);
    ck_assert_str_eq(v, "0.1"); /* shortest form that reads back, not 0.10000000000000001 */
    free(t);

    s.lag_seconds = 1.0 / 3.0;
    s.start_time = 1712345678.123456;
    t = render(&s);
    expect_double(t, "oplog2pg_lag_seconds", 1.0 / 3.0);
    expect_double(t, "oplog2pg_start_time_seconds", 1712345678.123456);
    free(t);

    s.lag_seconds = NAN;
    s.checkpoint_timestamp = INFINITY;
    t = render(&s);
    check_structure(t);
    sample(t, "oplog2pg_lag_seconds", v, sizeof v);
    ck_assert_str_eq(v, "NaN");
    sample(t, "oplog2pg_checkpoint_timestamp_seconds", v, sizeof v);
    ck_assert_str_eq(v, "+Inf");
    free(t);
}
END_TEST

/* ---- parse_listen ------------------------------------------------------------------------------------------------ */

START_TEST(parse_listen_good)
{
    static const struct {
        const char *in, *host;
        int port;
    } cases[] = {
        {"127.0.0.1:9187", "127.0.0.1", 9187},
        {"[::1]:9187", "::1", 9187},
        {"localhost:0", "localhost", 0},
        {"0.0.0.0:65535", "0.0.0.0", 65535},
        {"[::]:1", "::", 1},
        {"metrics.example:80", "metrics.example", 80},
        {"[fe80::1%eth0]:9", "fe80::1%eth0", 9},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char host[256] = "unset", err[256] = "";
        int port = -7;
        ck_assert_msg(metrics_parse_listen(cases[i].in, host, sizeof host, &port, err, sizeof err), "%s: %s",
                      cases[i].in, err);
        ck_assert_str_eq(host, cases[i].host);
        ck_assert_int_eq(port, cases[i].port);
    }
}
END_TEST

START_TEST(parse_listen_bad)
{
    static const struct {
        const char *in, *needle;
    } cases[] = {
        {"", "HOST:PORT"},
        {"127.0.0.1", "HOST:PORT"},
        {"::1:9187", "IPv6 as [::1]"},
        {":9187", "host is missing"},
        {"[]:9187", "host is missing"},
        {"[::1]9187", "[ADDRESS]:PORT"},
        {"[::1", "[ADDRESS]:PORT"},
        {"127.0.0.1:", "port must be"},
        {"127.0.0.1:65536", "port must be"},
        {"127.0.0.1:-1", "port must be"},
        {"127.0.0.1:91x", "port must be"},
        {"[::1]:", "port must be"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char host[256] = "unset", err[256] = "";
        int port = -7;
        ck_assert_msg(!metrics_parse_listen(cases[i].in, host, sizeof host, &port, err, sizeof err), "accepted \"%s\"",
                      cases[i].in);
        ck_assert_msg(strstr(err, cases[i].needle) != NULL, "\"%s\": error \"%s\" lacks \"%s\"", cases[i].in, err,
                      cases[i].needle);
        ck_assert_msg(strcmp(host, "unset") == 0 && port == -7, "\"%s\": outputs written on failure", cases[i].in);
    }
    /* a host longer than the caller's buffer */
    char small[4], err[256];
    int port;
    ck_assert(!metrics_parse_listen("abcd:1", small, sizeof small, &port, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "too long"));
}
END_TEST

/* ---- HTTP through curl ------------------------------------------------------------------------------------------- */

typedef struct {
    int rc;     /* curl's exit status (0 = a response came; 7 = could not connect) */
    int status; /* HTTP status, 0 when none */
    char ctype[128];
    char allow[64];
    char *body; /* malloc'd, "" when none */
} http_reply;

/* Copies the value of header `name` from the header block (CRLF lines) into out. */
static void header_value(const char *headers, const char *name, char *out, size_t outlen)
{
    size_t nl = strlen(name);
    out[0] = '\0';
    for (const char *p = headers; p != NULL && *p != '\0'; p = strstr(p, "\r\n") ? strstr(p, "\r\n") + 2 : NULL) {
        if (strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (*v == ' ')
                v++;
            size_t vl = strcspn(v, "\r\n");
            snprintf(out, outlen, "%.*s", (int)vl, v);
            return;
        }
    }
}

/* Runs curl (proxies off, 10 s limit): "GET", "HEAD" or "POST" (with a small form body) of url; -i puts the status
 * line and headers before the body. */
static void http(const char *method, const char *url, http_reply *r)
{
    char cmd[512];
    const char *how = strcmp(method, "HEAD") == 0 ? "-I" : strcmp(method, "POST") == 0 ? "-i -d a=1" : "-i";
    snprintf(cmd, sizeof cmd, "curl -s -g --noproxy '*' --max-time 10 %s '%s' 2>/dev/null", how, url);
    FILE *p = popen(cmd, "r");
    ck_assert_msg(p != NULL, "popen curl failed");
    char *out = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&out, &len);
    char chunk[4096];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, p)) > 0)
        fwrite(chunk, 1, got, mem);
    fclose(mem);
    int st = pclose(p);
    ck_assert_msg(WIFEXITED(st), "curl did not exit normally");

    memset(r, 0, sizeof *r);
    r->rc = WEXITSTATUS(st);
    ck_assert_msg(r->rc != 127, "curl is not installed (run scripts/deps.sh)");
    char *sep = strstr(out, "\r\n\r\n");
    if (r->rc == 0 && sep != NULL) {
        *sep = '\0';
        ck_assert_msg(sscanf(out, "HTTP/%*s %d", &r->status) == 1, "no status line in \"%s\"", out);
        header_value(out, "Content-Type", r->ctype, sizeof r->ctype);
        header_value(out, "Allow", r->allow, sizeof r->allow);
        r->body = strdup(sep + 4);
    } else {
        r->body = strdup("");
    }
    free(out);
}

static void url_of(char *buf, size_t len, const char *host, int port, const char *path)
{
    snprintf(buf, len, "http://%s:%d%s", host, port, path);
}

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

START_TEST(http_serves_metrics)
{
    char err[256] = "", url[128];
    ck_assert_int_eq(MHD_is_feature_supported(MHD_FEATURE_AUTOSUPPRESS_SIGPIPE), MHD_YES);

    metrics_server *m = metrics_start("127.0.0.1:0", err, sizeof err);
    ck_assert_msg(m != NULL, "start failed: %s", err);
    int port = metrics_port(m);
    ck_assert_msg(port > 0 && port <= 65535, "port %d", port);
    url_of(url, sizeof url, "127.0.0.1", port, "/metrics");

    /* before any publish: a zeroed snapshot */
    http_reply r;
    http("GET", url, &r);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.ctype, CONTENT_TYPE);
    check_structure(r.body);
    expect_u64(r.body, "oplog2pg_ready", 0);
    expect_u64(r.body, "oplog2pg_entries_applied_total", 0);
    free(r.body);

    metrics_snapshot s;
    fill_distinct(&s);
    metrics_publish(m, &s);
    http("GET", url, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.ctype, CONTENT_TYPE);
    char *want = render(&s);
    /* exactly what metrics_render gives for the published snapshot (no ck_assert_str_eq: the message would be huge) */
    ck_assert_msg(strcmp(r.body, want) == 0, "the body differs from metrics_render of the published snapshot");
    free(want);
    expect_u64(r.body, "oplog2pg_entries_applied_total", 1001);
    expect_u64(r.body, "oplog2pg_ready", 1);
    free(r.body);

    /* a new snapshot is visible at the next scrape */
    s.entries_applied = 1234567;
    s.ready = false;
    metrics_publish(m, &s);
    http("GET", url, &r);
    ck_assert_int_eq(r.status, 200);
    expect_u64(r.body, "oplog2pg_entries_applied_total", 1234567);
    expect_u64(r.body, "oplog2pg_ready", 0);
    free(r.body);

    /* a query string does not change the path */
    url_of(url, sizeof url, "127.0.0.1", port, "/metrics?name[]=x");
    http("GET", url, &r);
    ck_assert_int_eq(r.status, 200);
    free(r.body);

    /* HEAD: same status and type, no body */
    url_of(url, sizeof url, "127.0.0.1", port, "/metrics");
    http("HEAD", url, &r);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.ctype, CONTENT_TYPE);
    ck_assert_str_eq(r.body, "");
    free(r.body);

    /* other paths: 404; other methods: 405 with Allow */
    const char *paths[] = {"/other", "/", "/metrics/", "/metricsx"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        url_of(url, sizeof url, "127.0.0.1", port, paths[i]);
        http("GET", url, &r);
        ck_assert_msg(r.status == 404, "%s: status %d", paths[i], r.status);
        free(r.body);
    }
    url_of(url, sizeof url, "127.0.0.1", port, "/metrics");
    http("POST", url, &r);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_int_eq(r.status, 405);
    ck_assert_msg(strstr(r.allow, "GET") != NULL && strstr(r.allow, "HEAD") != NULL, "Allow: \"%s\"", r.allow);
    free(r.body);

    /* the server still answers after the errors */
    http("GET", url, &r);
    ck_assert_int_eq(r.status, 200);
    free(r.body);

    /* a second server on the same port fails, naming the address and the OS error */
    char listen[64], want_err[128];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    snprintf(want_err, sizeof want_err, "[metrics] listen %s: Address already in use", listen);
    metrics_server *m2 = metrics_start(listen, err, sizeof err);
    ck_assert_msg(m2 == NULL, "a second server started on %s", listen);
    ck_assert_str_eq(err, want_err);

    /* stopped: nothing listens any more */
    metrics_stop(m);
    http("GET", url, &r);
    ck_assert_msg(r.rc == 7, "curl exit %d after metrics_stop, want 7 (could not connect)", r.rc);
    ck_assert_int_eq(r.status, 0);
    free(r.body);

    /* and the port can be taken again at once */
    m = metrics_start(listen, err, sizeof err);
    ck_assert_msg(m != NULL, "restart on %s failed: %s", listen, err);
    ck_assert_int_eq(metrics_port(m), port);
    metrics_stop(m);
    metrics_stop(NULL);
}
END_TEST

START_TEST(http_start_errors)
{
    char err[256] = "";
    ck_assert_ptr_null(metrics_start("127.0.0.1", err, sizeof err));
    ck_assert_msg(strncmp(err, "[metrics] listen: ", 18) == 0 && strstr(err, "HOST:PORT") != NULL, "err: %s", err);

    /* 192.0.2.1 (TEST-NET-1) is on no local interface */
    ck_assert_ptr_null(metrics_start("192.0.2.1:9187", err, sizeof err));
    ck_assert_str_eq(err, "[metrics] listen 192.0.2.1:9187: Cannot assign requested address");

    ck_assert_ptr_null(metrics_start("[::1]:99999", err, sizeof err));
    ck_assert_msg(strstr(err, "port must be") != NULL, "err: %s", err);
}
END_TEST

/* IPv6 loopback and a host name; skipped (with a note) where the host has no ::1. */
START_TEST(http_ipv6_and_names)
{
    char err[256] = "", url[128];
    http_reply r;

    metrics_server *m = metrics_start("[::1]:0", err, sizeof err);
    if (m == NULL) {
        fprintf(stderr, "metrics: IPv6 loopback unavailable, skipped: %s\n", err);
    } else {
        url_of(url, sizeof url, "[::1]", metrics_port(m), "/metrics");
        http("GET", url, &r);
        ck_assert_int_eq(r.status, 200);
        check_structure(r.body);
        free(r.body);
        metrics_stop(m);
    }

    m = metrics_start("localhost:0", err, sizeof err);
    ck_assert_msg(m != NULL, "localhost: %s", err);
    url_of(url, sizeof url, "localhost", metrics_port(m), "/metrics");
    http("GET", url, &r);
    ck_assert_int_eq(r.status, 200);
    free(r.body);
    metrics_stop(m);
}
END_TEST

/* Scrapes during a stream of publishes always see one whole snapshot: every counter of a snapshot holds the same
 * number here, so a torn copy would show two different ones. */
typedef struct {
    metrics_server *m;
    atomic_int stop;
} publisher;

static void *publish_loop(void *arg)
{
    publisher *p = arg;
    metrics_snapshot s;
    memset(&s, 0, sizeof s);
    for (uint64_t i = 1; !p->stop; i++) {
        s.entries_applied = s.commits = s.bytes_written = i;
        metrics_publish(p->m, &s);
    }
    return NULL;
}

START_TEST(http_consistent_under_publish)
{
    char err[256] = "", url[128];
    publisher p = {0};
    p.m = metrics_start("127.0.0.1:0", err, sizeof err);
    ck_assert_msg(p.m != NULL, "start failed: %s", err);
    url_of(url, sizeof url, "127.0.0.1", metrics_port(p.m), "/metrics");
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, publish_loop, &p), 0);
    for (int k = 0; k < 5; k++) {
        http_reply r;
        char a[32], b[32], c[32];
        http("GET", url, &r);
        ck_assert_int_eq(r.status, 200);
        sample(r.body, "oplog2pg_entries_applied_total", a, sizeof a);
        sample(r.body, "oplog2pg_commits_total", b, sizeof b);
        sample(r.body, "oplog2pg_bytes_written_total", c, sizeof c);
        ck_assert_msg(strcmp(a, b) == 0 && strcmp(b, c) == 0, "torn snapshot: %s %s %s", a, b, c);
        free(r.body);
    }
    p.stop = 1;
    pthread_join(th, NULL);
    metrics_stop(p.m);
}
END_TEST

Suite *metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("render");
    tcase_add_test(tc, render_every_value);
    tcase_add_test(tc, render_zeroed);
    tcase_add_test(tc, render_escapes_labels);
    tcase_add_test(tc, render_shards);
    tcase_add_test(tc, render_doubles);
    suite_add_tcase(s, tc);

    tc = tcase_create("parse_listen");
    tcase_add_test(tc, parse_listen_good);
    tcase_add_test(tc, parse_listen_bad);
    suite_add_tcase(s, tc);

    tc = tcase_create("http");
    tcase_set_timeout(tc, 120); /* curl runs a few dozen times; slow under valgrind */
    tcase_add_test(tc, http_serves_metrics);
    tcase_add_test(tc, http_start_errors);
    tcase_add_test(tc, http_ipv6_and_names);
    tcase_add_test(tc, http_consistent_under_publish);
    suite_add_tcase(s, tc);
    return s;
}

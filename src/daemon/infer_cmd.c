/*
 * infer_cmd.c — `oplog2pg -c FILE infer-map [--sample N] [--depth N] [NS...]` (daemon/infer_cmd.h).
 *
 * NOTES
 * Which collections: every collection the initial copy would take (copy_list_collections: MongoDB's list, views and
 * system collections left out, the filter applied, names PostgreSQL can hold), whether or not it is inferred, since
 * their tables are the names an inferred table must avoid. Without NS, each of them that the file does not map yet
 * is inferred, in MongoDB's listing order; with NS, those named, each of which must be in that list and unmapped.
 * A time-series collection is in that list by its own name (from its buckets collection DB.system.buckets.NAME and
 * that entry's options.timeseries, as the copy takes it). A viewless one (its buckets under its own name, listed as
 * type "timeseries" with a UUID: copy_listed_viewless) is in it too, and its buckets are read from the collection
 * itself with rawData: true; a server that refuses that option is named in the message (cursor_outcome).
 *
 * Sampling: mongosim (tests/mongosim/commands.c) has no $sample stage (its aggregate takes $match, $count and
 * $group only), so the sample is a plain find with a limit: the first N documents in the server's natural order.
 * That is what the docs say too. A time-series collection's sample is its measurements: the first buckets of its
 * buckets collection, found the same way (at most N: each holds a measurement at least), unpacked by bucket_unpack
 * (map/bucket.h) into the documents the time-series view returns, up to N of them.
 *
 * Names: a table is taken when an existing map (or one of its child tables) writes it, when it is the jsonb table of
 * another listed collection without a map (names_map), or when a map inferred earlier in this run took it.
 *
 * The last step loads the file with the output appended (config_load_string), so that what is printed is known to
 * be accepted by `run`; when it is not, that is a bug, reported as EXIT_SOFTWARE with the reader's message.
 */
#include "daemon/infer_cmd.h"

#include <mongoc/mongoc.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "copy/copy.h"
#include "core/nsfilter.h"
#include "daemon/exitcodes.h"
#include "map/bucket.h"
#include "map/infer.h"
#include "map/map.h"
#include "map/names.h"
#include "source/mongo_client.h"
#include "util/log.h"
#include "util/strbuf.h"
#include "util/utf8.h"

/* The names an inferred table must avoid, and the collection being inferred (whose own table is its to take). */
typedef struct {
    const config *cfg;
    const copy_collection *colls;
    size_t ncolls;
    pg_name *inferred; /* tables of the maps inferred so far */
    size_t ninferred, capinferred;
    const char *db, *coll; /* the collection being inferred */
} names_ctx;

static bool table_written(const map_table *t, const char *schema, const char *table)
{
    if (strcmp(t->name.schema, schema) == 0 && strcmp(t->name.table, table) == 0)
        return true;
    for (size_t i = 0; i < t->nchildren; i++)
        if (table_written(t->children[i].table, schema, table))
            return true;
    return false;
}

static bool taken(void *arg, const char *schema, const char *table)
{
    const names_ctx *x = arg;
    for (size_t i = 0; i < x->cfg->maps.n; i++)
        if (table_written(&x->cfg->maps.colls[i].table, schema, table))
            return true;
    for (size_t i = 0; i < x->ninferred; i++)
        if (strcmp(x->inferred[i].schema, schema) == 0 && strcmp(x->inferred[i].table, table) == 0)
            return true;
    for (size_t i = 0; i < x->ncolls; i++) {
        const copy_collection *c = &x->colls[i];
        if (strcmp(c->db, x->db) == 0 && strcmp(c->coll, x->coll) == 0)
            continue;
        if (map_find(&x->cfg->maps, c->db, c->coll) != NULL)
            continue; /* its table is its map's, counted above */
        pg_name nm;
        char why[160];
        if (names_map(c->db, c->coll, &nm, why, sizeof why) && strcmp(nm.schema, schema) == 0 &&
            strcmp(nm.table, table) == 0)
            return true;
    }
    return false;
}

static bool remember_table(names_ctx *x, const map_table *t)
{
    if (x->ninferred == x->capinferred) {
        size_t cap = x->capinferred ? 2 * x->capinferred : 16;
        pg_name *p = realloc(x->inferred, cap * sizeof *p);
        if (p == NULL)
            return false;
        x->inferred = p;
        x->capinferred = cap;
    }
    x->inferred[x->ninferred++] = t->name;
    for (size_t i = 0; i < t->nchildren; i++)
        if (!remember_table(x, t->children[i].table))
            return false;
    return true;
}

/* "db.coll" made safe for a comment line: invalid bytes as \xHH, control characters (a newline) as '?'. */
static const char *shown_ns(const char *db, const char *coll, char *out, size_t outlen)
{
    char raw[400];
    snprintf(raw, sizeof raw, "%s.%s", db, coll);
    utf8_sanitize(raw, strlen(raw), out, outlen);
    for (char *p = out; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    return out;
}

/* A comment line "; TEXT", cut to the configuration reader's limit (MAP_INI_MAX_LINE) at a character boundary. */
static void comment_line(strbuf *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void comment_line(strbuf *out, const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    size_t len = strlen(line), max = MAP_INI_MAX_LINE - 2;
    if (len > max) {
        len = max - 3;
        while (len > 0 && ((unsigned char)line[len] & 0xC0) == 0x80)
            len--;
        memcpy(line + len, "...", 4);
    }
    strbuf_printf(out, "; %s\n", line);
}

/* ---- the namespaces ---------------------------------------------------------------------------------------------- */

/* Splits "DB.COLL" at its first dot into the fixed buffers; false when it has no dot or an empty part, or does not
 * fit. */
static bool split_ns(const char *ns, char *db, size_t dblen, char *coll, size_t colllen)
{
    const char *dot = strchr(ns, '.');
    if (dot == NULL || dot == ns || dot[1] == '\0')
        return false;
    size_t n = (size_t)(dot - ns);
    if (n >= dblen || strlen(dot + 1) >= colllen)
        return false;
    memcpy(db, ns, n);
    db[n] = '\0';
    snprintf(coll, colllen, "%s", dot + 1);
    return true;
}

/* Checks the NS of the command line that need no server: their form, the filter, the file's maps. */
static int check_named(const config *cfg, const nsfilter *f, const infer_cmd_options *o)
{
    for (size_t i = 0; i < o->nns; i++) {
        char db[128], coll[256];
        const char *ns = o->ns[i];
        if (!split_ns(ns, db, sizeof db, coll, sizeof coll)) {
            fprintf(stderr, "oplog2pg: infer-map: '%s' is not a namespace DB.COLLECTION\n", ns);
            return EXIT_USAGE;
        }
        if (ns_is_internal(db, strlen(db), coll, strlen(coll))) {
            fprintf(stderr, "oplog2pg: infer-map: %s: oplog2pg never replicates admin, local, config or system.*\n",
                    ns);
            return EXIT_USAGE;
        }
        if (!nsfilter_match(f, db, coll)) {
            fprintf(stderr,
                    "oplog2pg: infer-map: %s: the [replication] include and exclude of %s leave it out, so a map "
                    "for it would not load\n",
                    ns, o->config_path);
            return EXIT_USAGE;
        }
        if (map_find(&cfg->maps, db, coll) != NULL) {
            fprintf(stderr,
                    "oplog2pg: infer-map: %s: %s maps it already (remove its [map] section to infer it again)\n", ns,
                    o->config_path);
            return EXIT_USAGE;
        }
    }
    return EXIT_OK;
}

/* The index in colls of db.coll, or SIZE_MAX. */
static size_t find_listed(const copy_collection *colls, size_t n, const char *db, const char *coll)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(colls[i].db, db) == 0 && strcmp(colls[i].coll, coll) == 0)
            return i;
    return SIZE_MAX;
}

/* ---- one collection ---------------------------------------------------------------------------------------------- */

/* How a sampling cursor on db.coll ended: EXIT_OK, or the exit code with the message printed (a refusal, such as
 * missing rights, is a configuration matter). */
static int cursor_outcome(mongoc_cursor_t *cur, const char *db, const char *coll)
{
    bson_error_t e;
    if (!mongoc_cursor_error(cur, &e))
        return EXIT_OK;
    bool refused = mongo_error_refused(&e);
    fprintf(stderr, "oplog2pg: infer-map: reading %s.%s: %s%s\n", db, coll, refused ? "refused: " : "", e.message);
    return refused ? EXIT_CONFIG : EXIT_FAILURE_GENERIC;
}

/* Reads up to o->sample documents of db.coll into s. EXIT_OK, or the exit code with the message printed. */
static int sample_collection(mongoc_client_t *client, const char *db, const char *coll, uint32_t sample, infer_stats *s)
{
    mongoc_collection_t *c = mongoc_client_get_collection(client, db, coll);
    bson_t filter = BSON_INITIALIZER;
    bson_t *opts =
        BCON_NEW("limit", BCON_INT64((int64_t)sample), "batchSize", BCON_INT32(sample < 1000 ? (int32_t)sample : 1000));
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(c, &filter, opts, NULL);
    const bson_t *doc;
    int code = EXIT_OK;
    while (mongoc_cursor_next(cur, &doc)) {
        if (!infer_stats_add(s, doc)) {
            fprintf(stderr, "oplog2pg: infer-map: %s.%s: out of memory\n", db, coll);
            code = EXIT_SOFTWARE;
            break;
        }
    }
    if (code == EXIT_OK)
        code = cursor_outcome(cur, db, coll);
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    bson_destroy(&filter);
    mongoc_collection_destroy(c);
    return code;
}

/* What sampling a time-series collection read. */
typedef struct {
    uint64_t buckets;    /* bucket documents read */
    uint64_t bad;        /* of them, those bucket_unpack refused */
    char first_bad[300]; /* its reason for the first of those */
} ts_sample;

/* Reads the first buckets of c->buckets and counts their measurements in s (as the time-series view returns them,
 * map/bucket.h), up to `sample` measurements. Each bucket holds at least one measurement, so `sample` buckets are
 * the most it takes. A bucket that cannot be unpacked is counted in *r and left out of the sample. EXIT_OK, or the
 * exit code with the message printed. */
static int sample_timeseries(mongoc_client_t *client, const copy_collection *cc, uint32_t sample, infer_stats *s,
                             ts_sample *r)
{
    mongoc_collection_t *c = mongoc_client_get_collection(client, cc->db, cc->viewless ? cc->coll : cc->buckets);
    bson_t filter = BSON_INITIALIZER;
    bson_t *opts =
        BCON_NEW("limit", BCON_INT64((int64_t)sample), "batchSize", BCON_INT32(sample < 100 ? (int32_t)sample : 100));
    if (cc->viewless)
        BSON_APPEND_BOOL(opts, "rawData", true); /* a viewless collection's buckets: read raw */
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(c, &filter, opts, NULL);
    const bucket_spec spec = {.time_field = cc->ts_time, .meta_field = cc->ts_meta[0] != '\0' ? cc->ts_meta : NULL};
    const bson_t *doc;
    int code = EXIT_OK;
    while (code == EXIT_OK && infer_stats_docs(s) < sample && mongoc_cursor_next(cur, &doc)) {
        r->buckets++;
        bucket_rows rows = {0};
        char err[300];
        if (!bucket_unpack(bson_get_data(doc), doc->len, &spec, &rows, err, sizeof err)) {
            if (strcmp(err, "out of memory") == 0) {
                fprintf(stderr, "oplog2pg: infer-map: %s.%s: out of memory\n", cc->db, cc->coll);
                code = EXIT_SOFTWARE;
                break;
            }
            if (r->bad++ == 0)
                snprintf(r->first_bad, sizeof r->first_bad, "%s", err);
            continue;
        }
        for (size_t i = 0; i < rows.n && infer_stats_docs(s) < sample; i++) {
            bson_t m;
            if (!bson_init_static(&m, rows.docs[i], rows.lens[i]) || !infer_stats_add(s, &m)) {
                fprintf(stderr, "oplog2pg: infer-map: %s.%s: out of memory\n", cc->db, cc->coll);
                code = EXIT_SOFTWARE;
                break;
            }
        }
        bucket_rows_clear(&rows);
    }
    bson_error_t e;
    if (code == EXIT_OK && cc->viewless && mongoc_cursor_error(cur, &e) && !mongo_error_refused(&e) &&
        !mongo_error_retryable(&e)) {
        /* neither a matter of rights nor a passing fault: a server that does not read raw buckets (before 8.2) */
        fprintf(stderr,
                "oplog2pg: infer-map: reading the buckets of viewless time-series collection %s.%s with rawData: "
                "true: %s (a server that does not take rawData cannot be sampled)\n",
                cc->db, cc->coll, e.message);
        code = EXIT_CONFIG;
    }
    if (code == EXIT_OK)
        code = cursor_outcome(cur, cc->db, cc->viewless ? cc->coll : cc->buckets);
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    bson_destroy(&filter);
    mongoc_collection_destroy(c);
    return code;
}

/* Infers the listed collection cc and appends its sections (or a comment saying why there is none) to out. */
static int infer_one(mongoc_client_t *client, names_ctx *x, const infer_cmd_options *o, const infer_options *io,
                     const copy_collection *cc, strbuf *out)
{
    const char *db = cc->db, *coll = cc->coll;
    char ns[1700];
    shown_ns(db, coll, ns, sizeof ns);
    if (cc->ts && cc->ts_time[0] == '\0') {
        strbuf_putc(out, '\n');
        comment_line(out, "%s: no map inferred (a time-series collection whose %s lists no timeseries.timeField)", ns,
                     cc->buckets);
        log_warning("infer-map: %s: no map inferred: %s lists no timeseries.timeField", ns, cc->buckets);
        return EXIT_OK;
    }
    infer_options tio = *io;
    if (cc->ts) {
        tio.time_field = cc->ts_time;
        tio.meta_field = cc->ts_meta[0] != '\0' ? cc->ts_meta : NULL;
    }
    infer_stats *s = infer_stats_new(&tio);
    if (s == NULL) {
        fprintf(stderr, "oplog2pg: infer-map: out of memory\n");
        return EXIT_SOFTWARE;
    }
    ts_sample tr = {0};
    int code =
        cc->ts ? sample_timeseries(client, cc, o->sample, s, &tr) : sample_collection(client, db, coll, o->sample, s);
    if (code != EXIT_OK) {
        infer_stats_free(s);
        return code;
    }
    x->db = db;
    x->coll = coll;
    char why[512] = "";
    infer_map *m = infer_build(s, db, coll, taken, x, why, sizeof why);
    uint64_t docs = infer_stats_docs(s);
    infer_stats_free(s);
    strbuf_putc(out, '\n');
    if (cc->ts) {
        char bns[1700];
        shown_ns(db, cc->viewless ? cc->coll : cc->buckets, bns, sizeof bns);
        if (cc->viewless && strlen(bns) + sizeof " (viewless, read with rawData)" <= sizeof bns)
            strcat(bns, " (viewless, read with rawData)");
        comment_line(out,
                     "%s: a time-series collection: %llu measurement%s unpacked from the first %llu bucket%s of %s", ns,
                     (unsigned long long)docs, docs == 1 ? "" : "s", (unsigned long long)tr.buckets,
                     tr.buckets == 1 ? "" : "s", bns);
        if (tr.bad > 0) {
            comment_line(out, "%s: %llu bucket%s could not be unpacked and %s not in the sample (%s)", ns,
                         (unsigned long long)tr.bad, tr.bad == 1 ? "" : "s", tr.bad == 1 ? "is" : "are", tr.first_bad);
            log_warning("infer-map: %s: %llu bucket%s of %s could not be unpacked (%s)", ns, (unsigned long long)tr.bad,
                        tr.bad == 1 ? "" : "s", bns, tr.first_bad);
        }
    }
    if (m == NULL) {
        if (strcmp(why, "out of memory") == 0) {
            fprintf(stderr, "oplog2pg: infer-map: %s.%s: out of memory\n", db, coll);
            return EXIT_SOFTWARE;
        }
        /* an empty collection, or one whose name a [map] header cannot hold: it keeps the jsonb shape (a time-series
         * collection: its measurements land in the table of docs/timeseries.md) */
        comment_line(out, "%s: no map inferred (%s); it keeps %s", ns, why,
                     cc->ts ? "the table of measurements without a map" : "the jsonb shape");
        log_notice("infer-map: %s: no map inferred: %s", ns, why);
        return EXIT_OK;
    }
    infer_render(out, m);
    bool ok = remember_table(x, &infer_map_model(m)->table);
    infer_map_free(m);
    if (!ok) {
        fprintf(stderr, "oplog2pg: infer-map: out of memory\n");
        return EXIT_SOFTWARE;
    }
    log_info("infer-map: %s.%s: %llu %s%s read", db, coll, (unsigned long long)docs,
             cc->ts ? "measurement" : "document", docs == 1 ? "" : "s");
    return EXIT_OK;
}

/* ---- the final check --------------------------------------------------------------------------------------------- */

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    strbuf b = STRBUF_INIT;
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        strbuf_append(&b, chunk, n);
    bool err = ferror(f) != 0;
    fclose(f);
    if (err) {
        strbuf_free(&b);
        return NULL;
    }
    return strbuf_detach(&b, NULL);
}

/* The file with text appended loads, and maps every namespace text declares. */
static int check_loads(const infer_cmd_options *o, const char *text)
{
    char *file = read_file(o->config_path);
    if (file == NULL) {
        fprintf(stderr, "oplog2pg: infer-map: cannot read %s again to check the output\n", o->config_path);
        return EXIT_CONFIG;
    }
    strbuf all = STRBUF_INIT;
    strbuf_puts(&all, file);
    strbuf_puts(&all, "\n");
    strbuf_puts(&all, text);
    free(file);
    if (strbuf_failed(&all)) {
        strbuf_free(&all);
        fprintf(stderr, "oplog2pg: infer-map: out of memory\n");
        return EXIT_SOFTWARE;
    }
    config c;
    char err[1024];
    bool ok = config_load_string(o->config_path, all.data, &c, err, sizeof err);
    strbuf_free(&all);
    if (!ok) {
        fprintf(stderr, "oplog2pg: infer-map: the inferred maps would not load (a bug, please report it): %s\n", err);
        return EXIT_SOFTWARE;
    }
    config_free(&c);
    return EXIT_OK;
}

/* ---- the command ------------------------------------------------------------------------------------------------- */

int infer_map_command(FILE *out, const config *cfg, const infer_cmd_options *opts)
{
    infer_cmd_options o = *opts;
    if (o.sample == 0)
        o.sample = INFER_CMD_DEFAULT_SAMPLE;
    infer_options io = {.depth = o.depth};

    char ferr[512];
    nsfilter *f = nsfilter_new((const char *const *)cfg->include.items, (const char *const *)cfg->exclude.items, ferr,
                               sizeof ferr);
    if (f == NULL) {
        fprintf(stderr, "oplog2pg: infer-map: %s\n", ferr);
        return EXIT_CONFIG;
    }
    int code = check_named(cfg, f, &o);
    if (code != EXIT_OK) {
        nsfilter_free(f);
        return code;
    }

    char cerr[512];
    mongo_client_opts mo = {.appname = "oplog2pg-infer"};
    mongoc_client_t *client = mongo_client_open(cfg->mongodb_uri_effective, &mo, cerr, sizeof cerr);
    if (client == NULL) {
        fprintf(stderr, "oplog2pg: infer-map: mongodb: %s\n", cerr);
        nsfilter_free(f);
        return EXIT_CONFIG;
    }
    names_ctx x = {.cfg = cfg};
    copy_collection *colls = NULL;
    size_t ncolls = 0;
    strbuf text = STRBUF_INIT;

    /* A ping first: a refused login is the operator's to fix (exit 3), an unreachable server may pass (exit 1). */
    bson_error_t e;
    bson_t *ping = BCON_NEW("ping", BCON_INT32(1));
    bool up = mongoc_client_command_simple(client, "admin", ping, NULL, NULL, &e);
    bson_destroy(ping);
    if (!up) {
        bool refused = mongo_error_refused(&e);
        fprintf(stderr, "oplog2pg: infer-map: mongodb: %s: %s\n", refused ? "the login was refused" : "cannot reach it",
                e.message);
        code = refused ? EXIT_CONFIG : EXIT_FAILURE_GENERIC;
        goto done;
    }
    char lerr[1024];
    if (!copy_list_collections(client, f, &colls, &ncolls, lerr, sizeof lerr)) {
        fprintf(stderr, "oplog2pg: infer-map: mongodb: %s\n", lerr);
        code = EXIT_FAILURE_GENERIC;
        goto done;
    }
    x.colls = colls;
    x.ncolls = ncolls;

    strbuf_printf(&text,
                  "; oplog2pg infer-map: maps inferred from a sample of each collection (--sample %lu: the first "
                  "documents a find\n"
                  "; returns, in natural order; of a time-series collection, the measurements of the first buckets), "
                  "nested\n"
                  "; documents as dotted columns down to --depth %u. Review them, then append\n"
                  "; them to the configuration file. A value a column cannot take (a type the sample did not show) "
                  "makes its op a\n"
                  "; dead letter (on_type_error).\n",
                  (unsigned long)o.sample, o.depth ? o.depth : INFER_DEFAULT_DEPTH);
    if (o.nns > 0) {
        for (size_t i = 0; i < o.nns && code == EXIT_OK; i++) {
            char db[128], coll[256];
            split_ns(o.ns[i], db, sizeof db, coll, sizeof coll); /* checked in check_named */
            bool again = false;
            for (size_t k = 0; k < i && !again; k++)
                again = strcmp(o.ns[k], o.ns[i]) == 0;
            if (again)
                continue;
            size_t at = find_listed(colls, ncolls, db, coll);
            if (at == SIZE_MAX) {
                fprintf(stderr,
                        "oplog2pg: infer-map: %s: no such collection (MongoDB does not list it, or it is a view)\n",
                        o.ns[i]);
                code = EXIT_USAGE;
                break;
            }
            code = infer_one(client, &x, &o, &io, &colls[at], &text);
        }
    } else {
        size_t inferred = 0;
        for (size_t i = 0; i < ncolls && code == EXIT_OK; i++) {
            if (map_find(&cfg->maps, colls[i].db, colls[i].coll) != NULL) {
                char ns[1700];
                strbuf_putc(&text, '\n');
                comment_line(&text, "%s: mapped in the file already",
                             shown_ns(colls[i].db, colls[i].coll, ns, sizeof ns));
                continue;
            }
            code = infer_one(client, &x, &o, &io, &colls[i], &text);
            inferred++;
        }
        if (code == EXIT_OK && inferred == 0)
            strbuf_printf(&text, "\n; no collection to infer: the filter includes none that the file does not map\n");
    }
    if (code != EXIT_OK)
        goto done;
    if (strbuf_failed(&text)) {
        fprintf(stderr, "oplog2pg: infer-map: out of memory\n");
        code = EXIT_SOFTWARE;
        goto done;
    }
    code = check_loads(&o, text.data);
    if (code != EXIT_OK)
        goto done;
    if (fputs(text.data, out) == EOF || fflush(out) != 0) {
        fprintf(stderr, "oplog2pg: infer-map: cannot write the output\n");
        code = EXIT_SOFTWARE;
    }
done:
    strbuf_free(&text);
    free(colls);
    free(x.inferred);
    mongoc_client_destroy(client);
    nsfilter_free(f);
    return code;
}

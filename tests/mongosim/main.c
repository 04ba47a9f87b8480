/*
 * main.c — mongosim entry point: parses options, runs the simulated replica-set PRIMARY on libev's default loop and
 * saves --state on SIGTERM/SIGINT. See README.md in this folder for what it simulates.
 */
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>

#include "cluster.h"
#include "flavor.h"
#include "server.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mongosim [options]\n"
            "  --port N                 listen on 127.0.0.1:N (0: pick a free port, printed alone on the first line)\n"
            "  --bind ADDR              listen address (default 127.0.0.1)\n"
            "  --set-name NAME          replica set name (default rs0)\n"
            "  --advertise-host NAME    host in me/hosts/primary (default 127.0.0.1; must match the client's URI)\n"
            "  --oplog-format V         entry shapes and buildInfo version: 8.0, 7.0 (default), 5.0 or 4.4\n"
            "                           (time-series buckets as each writes them: README \"Time-series\")\n"
            "  --timeseries-bucket-max-count N  measurements per time-series bucket (the server's\n"
            "                           timeseriesBucketMaxCount; default 1000)\n"
            "  --timeseries-viewless    time-series collections are viewless (their buckets under their own\n"
            "                           name, entries marked isTimeseries) and rawData reads are taken\n"
            "  --noop-interval SECS     periodic noop entries (default 0 = off)\n"
            "  --max-oplog-entries N    cap the oplog (oldest removed; default 0 = unlimited)\n"
            "  --oplog FILE.bson        append these entries (a mongodump of local.oplog.rs) at start\n"
            "  --data DIR               load DIR/<db>/<coll>.bson at start\n"
            "  --state DIR              load DIR's saved oplog and data at start; save them on SIGTERM/SIGINT\n"
            "  --shards N               serve a sharded cluster: a router on --port and N shards shard0..\n"
            "                           (each a replica set of that name on a free port)\n"
            "  --orphan-cleanup-delay S with --shards: seconds before a migration's donor deletes the range (0)\n"
            "  --oplog-read-delay MS    answer each find/getMore on local.oplog.rs after a random 0..MS ms (a slow\n"
            "                           link or a busy member); with --shards each shard draws its own delays (0)\n"
            "  --seed N                 seed of the random delays, so a run can be replayed (default: from the clock;\n"
            "                           logged on stderr when --oplog-read-delay is set)\n"
            "  --refuse-stage NAME      answer an aggregate naming this stage with 40324 Unrecognized pipeline stage\n"
            "                           name, as a server without it does ($changeStreamSplitLargeEvent before 6.0.9)\n"
            "  --refuse-cluster-stream  answer a cluster-wide change stream (allChangesForCluster) with 13 "
            "Unauthorized, as\n"
            "                           to a user with changeStream/find on some databases only\n"
            "  --flavor NAME            mongodb (default), atlas-shared, documentdb or cosmos: a server that differs\n"
            "                           (README \"Flavors\")\n"
            "  --tls-cert FILE          serve TLS only, with the certificate (chain) and private key in this PEM file\n"
            "  --tls-ca FILE            with --tls-cert: require a client certificate issued by a CA in this PEM\n"
            "                           file, and MONGODB-X509 authentication before other commands\n"
            "                           (README \"TLS\")\n"
            "  --verbose                log connections and commands to stderr\n");
}

int main(int argc, char **argv)
{
    sim_options opts;
    sim_options_init(&opts);
    opts.port = 27017;
    static const struct option longopts[] = {
        {"port", required_argument, NULL, 'p'},
        {"bind", required_argument, NULL, 'b'},
        {"set-name", required_argument, NULL, 's'},
        {"advertise-host", required_argument, NULL, 'a'},
        {"oplog-format", required_argument, NULL, 'f'},
        {"noop-interval", required_argument, NULL, 'n'},
        {"max-oplog-entries", required_argument, NULL, 'm'},
        {"oplog", required_argument, NULL, 'o'},
        {"data", required_argument, NULL, 'd'},
        {"state", required_argument, NULL, 'S'},
        {"shards", required_argument, NULL, 'N'},
        {"orphan-cleanup-delay", required_argument, NULL, 'D'},
        {"oplog-read-delay", required_argument, NULL, 'R'},
        {"seed", required_argument, NULL, 'e'},
        {"refuse-stage", required_argument, NULL, 'X'},
        {"flavor", required_argument, NULL, 'F'},
        {"refuse-cluster-stream", no_argument, NULL, 'C'},
        {"timeseries-bucket-max-count", required_argument, NULL, 'T'},
        {"timeseries-viewless", no_argument, NULL, 'V'},
        {"tls-cert", required_argument, NULL, 'K'},
        {"tls-ca", required_argument, NULL, 'A'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    long shards = 0;
    double orphan_delay = 0;
    bool have_seed = false;
    int ch;
    while ((ch = getopt_long(argc, argv, "p:vh", longopts, NULL)) != -1) {
        char *end = NULL;
        switch (ch) {
        case 'p':
            opts.port = (int)strtol(optarg, &end, 10);
            if (*end || opts.port < 0 || opts.port > 65535) {
                fprintf(stderr, "mongosim: bad --port '%s'\n", optarg);
                return 2;
            }
            break;
        case 'b':
            opts.bind_host = optarg;
            break;
        case 's':
            opts.set_name = optarg;
            break;
        case 'a':
            opts.advertise_host = optarg;
            break;
        case 'f':
            if (strcmp(optarg, "7.0") == 0)
                opts.format = SIM_FORMAT_70;
            else if (strcmp(optarg, "4.4") == 0)
                opts.format = SIM_FORMAT_44;
            else if (strcmp(optarg, "5.0") == 0)
                opts.format = SIM_FORMAT_50;
            else if (strcmp(optarg, "8.0") == 0)
                opts.format = SIM_FORMAT_80;
            else {
                fprintf(stderr, "mongosim: --oplog-format must be 8.0, 7.0, 5.0 or 4.4, not '%s'\n", optarg);
                return 2;
            }
            break;
        case 'T': {
            long v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 1000000) {
                fprintf(stderr, "mongosim: bad --timeseries-bucket-max-count '%s'\n", optarg);
                return 2;
            }
            opts.ts_bucket_max_count = (int32_t)v;
            break;
        }
        case 'V':
            opts.ts_viewless = true;
            break;
        case 'n':
            opts.noop_interval = strtod(optarg, &end);
            if (*end || opts.noop_interval < 0) {
                fprintf(stderr, "mongosim: bad --noop-interval '%s'\n", optarg);
                return 2;
            }
            break;
        case 'm':
            opts.max_oplog_entries = strtoull(optarg, &end, 10);
            if (*end) {
                fprintf(stderr, "mongosim: bad --max-oplog-entries '%s'\n", optarg);
                return 2;
            }
            break;
        case 'o':
            opts.oplog_file = optarg;
            break;
        case 'F':
            if (!flavor_parse(optarg, &opts.flavor)) {
                fprintf(stderr, "mongosim: --flavor must be mongodb, atlas-shared, documentdb or cosmos, not '%s'\n",
                        optarg);
                return 2;
            }
            break;
        case 'd':
            opts.data_dir = optarg;
            break;
        case 'S':
            opts.state_dir = optarg;
            break;
        case 'N':
            shards = strtol(optarg, &end, 10);
            if (*end || shards < 1) {
                fprintf(stderr, "mongosim: bad --shards '%s'\n", optarg);
                return 2;
            }
            break;
        case 'D':
            orphan_delay = strtod(optarg, &end);
            if (*end || orphan_delay < 0) {
                fprintf(stderr, "mongosim: bad --orphan-cleanup-delay '%s'\n", optarg);
                return 2;
            }
            break;
        case 'R':
            opts.oplog_read_delay_ms = strtoll(optarg, &end, 10);
            if (*end || opts.oplog_read_delay_ms < 0) {
                fprintf(stderr, "mongosim: bad --oplog-read-delay '%s'\n", optarg);
                return 2;
            }
            break;
        case 'e':
            opts.seed = strtoull(optarg, &end, 0);
            if (*end || !*optarg) {
                fprintf(stderr, "mongosim: bad --seed '%s'\n", optarg);
                return 2;
            }
            have_seed = true;
            break;
        case 'X':
            opts.refuse_stage = optarg;
            break;
        case 'C':
            opts.refuse_cluster_stream = true;
            break;
        case 'K':
            opts.tls_cert = optarg;
            break;
        case 'A':
            opts.tls_ca = optarg;
            break;
        case 'v':
            opts.verbose = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    if (!have_seed)
        opts.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    if (opts.oplog_read_delay_ms > 0)
        fprintf(stderr, "mongosim: oplog reads delayed 0..%" PRId64 " ms at random, --seed %" PRIu64 "\n",
                opts.oplog_read_delay_ms, opts.seed);
    signal(SIGPIPE, SIG_IGN);
    bson_error_t err;
    struct ev_loop *loop = ev_default_loop(0);
    if (shards > 0 && opts.flavor != SIM_FLAVOR_MONGODB) {
        fprintf(stderr, "mongosim: --flavor is for a replica set; it cannot be combined with --shards\n");
        return 2;
    }
    if (shards > 0 && opts.refuse_cluster_stream) {
        fprintf(stderr,
                "mongosim: --refuse-cluster-stream is for a replica set; it cannot be combined with --shards\n");
        return 2;
    }
    if (shards > 0 && (opts.tls_cert != NULL || opts.tls_ca != NULL)) {
        fprintf(stderr,
                "mongosim: --tls-cert and --tls-ca are for a replica set; they cannot be combined with --shards\n");
        return 2;
    }
    if (opts.tls_ca != NULL && opts.tls_cert == NULL) {
        fprintf(stderr, "mongosim: --tls-ca needs --tls-cert\n");
        return 2;
    }
    if (shards > 0) {
        sim_cluster *cl = sim_cluster_new(&opts, (size_t)shards, orphan_delay, loop, &err);
        if (!cl) {
            fprintf(stderr, "mongosim: cannot start: %s\n", err.message);
            return 1;
        }
        if (opts.port == 0) {
            printf("%d\n", sim_cluster_port(cl));
            fflush(stdout);
        }
        fprintf(stderr, "mongosim: router of a %ld-shard cluster listening on %s:%d\n", shards, opts.bind_host,
                sim_cluster_port(cl));
        sim_cluster_handle_signals(cl);
        sim_cluster_run(cl);
        sim_cluster_free(cl);
        return 0;
    }
    sim_server *srv = sim_server_new(&opts, loop, &err);
    if (!srv) {
        fprintf(stderr, "mongosim: cannot start: %s\n", err.message);
        return 1;
    }
    if (opts.port == 0) {
        printf("%d\n", sim_server_port(srv));
        fflush(stdout);
    }
    fprintf(stderr, "mongosim: PRIMARY of replica set %s listening on %s:%d%s\n", opts.set_name, opts.bind_host,
            sim_server_port(srv),
            opts.tls_ca     ? " (TLS, client certificates required)"
            : opts.tls_cert ? " (TLS)"
                            : "");
    sim_server_handle_signals(srv);
    sim_server_run(srv);
    int rc = 0;
    if (opts.state_dir) {
        if (sim_server_save(srv, &err))
            fprintf(stderr, "mongosim: state saved to %s\n", opts.state_dir);
        else {
            fprintf(stderr, "mongosim: cannot save state to %s: %s\n", opts.state_dir, err.message);
            rc = 1;
        }
    }
    sim_server_free(srv);
    return rc;
}

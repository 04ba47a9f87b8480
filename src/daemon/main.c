/*
 * main.c — the oplog2pg command line.
 *
 * oplog2pg tails a MongoDB replica set's oplog and applies every change to PostgreSQL, committing its resume point in
 * the same transaction as the rows it covers. This file reads the command line and the configuration file and hands
 * over to a command; the work lives in the modules under src/ (source: MongoDB, core: batching, sink: PostgreSQL,
 * map: table shapes and update functions, daemon: process life).
 */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mongoc/mongoc.h>

#include "daemon/config.h"
#include "daemon/config_map.h"
#include "daemon/daemon.h"
#include "daemon/exitcodes.h"
#include "daemon/infer_cmd.h"
#include "daemon/logsetup.h"
#include "daemon/signals.h"
#include "map/infer.h"
#include "util/log.h"
#include "util/memory.h"

#define DEFAULT_CONFIG "/etc/oplog2pg/oplog2pg.ini"

static void usage(FILE *out)
{
    fprintf(out,
            "oplog2pg %s — replicate a MongoDB replica set's oplog into PostgreSQL, exactly once\n"
            "\n"
            "Usage:\n"
            "  oplog2pg [OPTIONS] [run]              tail the oplog and apply it until stopped (the default)\n"
            "  oplog2pg [OPTIONS] replay FILE.bson   apply a mongodump of local.oplog.rs, then exit\n"
            "  oplog2pg [OPTIONS] check              validate the configuration and reach both sides\n"
            "  oplog2pg [OPTIONS] status [--json]    checkpoint, lag, oplog window and copy progress\n"
            "  oplog2pg [OPTIONS] config             print the effective configuration (secrets masked)\n"
            "  oplog2pg [OPTIONS] map [--json]       print the column maps: tables, keys, columns, child tables\n"
            "  oplog2pg [OPTIONS] infer-map [NS...]  print maps inferred from sample documents (all included\n"
            "                                        collections the file does not map, or those named DB.COLL)\n"
            "\n"
            "Options:\n"
            "  -c, --config FILE   configuration file (default " DEFAULT_CONFIG ")\n"
            "      --service NAME  service name: the checkpoint row (overrides [replication] service)\n"
            "      --reimport      run: forget the checkpoint, empty the tables, copy everything again\n"
            "      --skip-import   run: without a checkpoint, tail from the newest entry instead of copying\n"
            "      --import-only   run: copy (if the service has no checkpoint yet), then exit\n"
            "      --tail-from TS  run: start at oplog position TS (SECS:INC or 2026-11-29T10:00:00Z)\n"
            "      --sample N      infer-map: documents read per collection (default 1000)\n"
            "      --depth N       infer-map: nested documents become dotted columns down to N levels (default 2)\n"
            "  -h, --help          show this help and exit\n"
            "  -V, --version       show the version and exit\n"
            "\n"
            "Exit codes: 0 clean stop, 1 failure, 2 usage, 3 configuration, 4 resume point lost (resync),\n"
            "5 unsupported or malformed oplog entry, 6 service held by another oplog2pg,\n"
            "7 the oplog no longer holds the initial copy's start.\n",
            OPLOG2PG_VERSION);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'}, {"service", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},         {"version", no_argument, NULL, 'V'},
        {"reimport", no_argument, NULL, 'R'},     {"skip-import", no_argument, NULL, 'S'},
        {"import-only", no_argument, NULL, 'I'},  {"tail-from", required_argument, NULL, 'T'},
        {"json", no_argument, NULL, 'J'},         {"sample", required_argument, NULL, 'N'},
        {"depth", required_argument, NULL, 'D'},  {NULL, 0, NULL, 0},
    };
    const char *config_path = DEFAULT_CONFIG;
    const char *service = NULL;
    daemon_options opts = {0};
    bool json = false;
    uint32_t sample = 0;
    unsigned depth = 0;
    bool infer_opts = false;
    int ch;

    while ((ch = getopt_long(argc, argv, "c:hV", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            config_path = optarg;
            break;
        case 's':
            service = optarg;
            break;
        case 'h':
            usage(stdout);
            return EXIT_OK;
        case 'V':
            printf("oplog2pg %s\n", OPLOG2PG_VERSION);
            return EXIT_OK;
        case 'R':
            opts.reimport = true;
            break;
        case 'S':
            opts.skip_import = true;
            break;
        case 'I':
            opts.import_only = true;
            break;
        case 'T':
            if (!daemon_parse_position(optarg, &opts.tail_from)) {
                fprintf(stderr,
                        "oplog2pg: --tail-from '%s': expected SECS:INC or an ISO time like "
                        "2026-11-29T10:00:00Z\n",
                        optarg);
                return EXIT_USAGE;
            }
            opts.have_tail_from = true;
            break;
        case 'J':
            json = true;
            break;
        case 'N':
        case 'D': {
            char *end;
            unsigned long max = ch == 'N' ? INFER_CMD_MAX_SAMPLE : INFER_MAX_DEPTH;
            errno = 0;
            unsigned long v = strtoul(optarg, &end, 10);
            if (optarg[0] < '0' || optarg[0] > '9' || *end != '\0' || errno != 0 || v < 1 || v > max) {
                fprintf(stderr, "oplog2pg: --%s '%s': expected a whole number from 1 to %lu\n",
                        ch == 'N' ? "sample" : "depth", optarg, max);
                return EXIT_USAGE;
            }
            if (ch == 'N')
                sample = (uint32_t)v;
            else
                depth = (unsigned)v;
            infer_opts = true;
            break;
        }
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    const char *command = optind < argc ? argv[optind++] : "run";
    const char *arg = NULL;
    if (strcmp(command, "replay") == 0) {
        if (optind >= argc) {
            fprintf(stderr, "oplog2pg: replay needs the dump file: oplog2pg -c FILE replay FILE.bson\n");
            return EXIT_USAGE;
        }
        arg = argv[optind++];
    } else if (strcmp(command, "run") != 0 && strcmp(command, "check") != 0 && strcmp(command, "config") != 0 &&
               strcmp(command, "status") != 0 && strcmp(command, "map") != 0 && strcmp(command, "infer-map") != 0) {
        fprintf(stderr, "oplog2pg: unknown command '%s' (try --help)\n", command);
        return EXIT_USAGE;
    }
    if ((opts.reimport || opts.skip_import || opts.import_only || opts.have_tail_from) && strcmp(command, "run") != 0) {
        fprintf(stderr, "oplog2pg: --reimport, --skip-import, --import-only and --tail-from go with run\n");
        return EXIT_USAGE;
    }
    if ((opts.skip_import && (opts.reimport || opts.import_only)) || (opts.have_tail_from && opts.import_only)) {
        fprintf(stderr, "oplog2pg: --skip-import cannot go with --reimport or --import-only, nor --tail-from with "
                        "--import-only\n");
        return EXIT_USAGE;
    }
    bool takes_json = strcmp(command, "status") == 0 || strcmp(command, "map") == 0;
    if (json && !takes_json) {
        fprintf(stderr, "oplog2pg: --json goes with status and map\n");
        return EXIT_USAGE;
    }
    if (optind < argc && takes_json && strcmp(argv[optind], "--json") == 0) {
        json = true; /* `status --json` after the command, as people type it */
        optind++;
    }
    if (infer_opts && strcmp(command, "infer-map") != 0) {
        fprintf(stderr, "oplog2pg: --sample and --depth go with infer-map\n");
        return EXIT_USAGE;
    }
    /* infer-map takes namespaces: the rest of the command line */
    const char *const *nss = NULL;
    size_t nns = 0;
    if (strcmp(command, "infer-map") == 0) {
        nss = (const char *const *)argv + optind;
        nns = (size_t)(argc - optind);
        optind = argc;
    }
    if (optind < argc) {
        fprintf(stderr, "oplog2pg: unexpected argument '%s' (try --help)\n", argv[optind]);
        return EXIT_USAGE;
    }

    /* Signals first: a SIGTERM, SIGINT or SIGHUP that comes while the configuration loads waits, blocked, for the
     * daemon's first look (signals.h), rather than killing a process that has not yet said anything. */
    if ((strcmp(command, "run") == 0 || strcmp(command, "replay") == 0) && !signals_init()) {
        fprintf(stderr, "oplog2pg: cannot set up signal handling: %s\n", strerror(errno));
        return EXIT_SOFTWARE;
    }

    /* The driver first, with its messages routed into our log: loading the configuration already parses the URI,
     * and the driver warns there (an unsupported URI option, for instance). */
    /* No shared-memory counters: libmongoc would make /dev/shm/mongoc-PID, left behind by a kill -9, and warn on
     * stderr before our log handler exists when a new process meets an old file of its PID. */
    setenv("MONGOC_DISABLE_SHM", "1", 0);
    mongoc_init();
    logsetup_route_mongoc();

    config cfg;
    char err[1024];
    int code;
    if (!config_load(config_path, &cfg, err, sizeof err)) {
        fprintf(stderr, "oplog2pg: %s\n", err);
        mongoc_cleanup();
        return EXIT_CONFIG;
    }
    if (service != NULL && !config_override(&cfg, "replication", "service", service, err, sizeof err)) {
        fprintf(stderr, "oplog2pg: --service: %s\n", err);
        code = EXIT_CONFIG;
        goto out;
    }
    logsetup_apply(&cfg);
    if (config_secret_exposed(config_path, &cfg, err, sizeof err))
        log_warning("%s", err);

    if (strcmp(command, "config") == 0) {
        config_print(stdout, &cfg);
        code = EXIT_OK;
        goto out;
    }
    if (strcmp(command, "map") == 0) {
        code = config_map_command(stdout, &cfg.maps, json);
        goto out;
    }
    if (strcmp(command, "infer-map") == 0) {
        infer_cmd_options io = {.config_path = config_path, .ns = nss, .nns = nns, .sample = sample, .depth = depth};
        code = infer_map_command(stdout, &cfg, &io);
        goto out;
    }
    if (strcmp(command, "run") == 0 || strcmp(command, "replay") == 0) {
        memory_setup();
    }
    if (strcmp(command, "replay") == 0)
        code = daemon_replay(&cfg, arg);
    else if (strcmp(command, "check") == 0)
        code = daemon_check(&cfg);
    else if (strcmp(command, "status") == 0)
        code = daemon_status(&cfg, json);
    else
        code = daemon_run(&cfg, config_path, &opts);
out:
    config_free(&cfg);
    mongoc_cleanup();
    return code;
}

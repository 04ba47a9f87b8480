/*
 * main.c — the oplog2pg command line.
 *
 * oplog2pg tails a MongoDB replica set's oplog and applies every change to PostgreSQL, committing its resume point in
 * the same transaction as the rows it covers. This file only reads the command line and dispatches to a command;
 * the work lives in the modules under src/ (source: MongoDB, core: batching, sink: PostgreSQL, map: table shapes).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/exitcodes.h"

#define DEFAULT_CONFIG "/etc/oplog2pg/oplog2pg.ini"

static void usage(FILE *out)
{
    fprintf(out,
            "oplog2pg %s — replicate a MongoDB replica set's oplog into PostgreSQL, exactly once\n"
            "\n"
            "Usage:\n"
            "  oplog2pg [-c FILE] [--service NAME] [run]   tail the oplog and apply it (the default)\n"
            "  oplog2pg -c FILE replay FILE.bson          apply a mongodump of local.oplog.rs, then exit\n"
            "  oplog2pg -c FILE check                     validate the configuration and connect to both sides\n"
            "  oplog2pg -c FILE status [--json]           show the checkpoint, lag and oplog window\n"
            "\n"
            "Options:\n"
            "  -c, --config FILE   configuration file (default " DEFAULT_CONFIG ")\n"
            "      --service NAME  service name (overrides [replication] service)\n"
            "  -h, --help          show this help and exit\n"
            "  -V, --version       show the version and exit\n",
            OPLOG2PG_VERSION);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},
        {"service", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int ch;

    while ((ch = getopt_long(argc, argv, "c:hV", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c':
        case 's':
            break;
        case 'h':
            usage(stdout);
            return EXIT_OK;
        case 'V':
            printf("oplog2pg %s\n", OPLOG2PG_VERSION);
            return EXIT_OK;
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    fprintf(stderr, "oplog2pg: command '%s' is not implemented yet\n", optind < argc ? argv[optind] : "run");
    return EXIT_SOFTWARE;
}

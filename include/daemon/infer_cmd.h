/*
 * infer_cmd.h — `oplog2pg -c FILE infer-map [--sample N] [--depth N] [NS...]`: typed maps inferred from sample
 * documents, printed as [map] and [child] sections that `run` accepts as they are (docs/mapping.md, "Generating a
 * map: infer-map").
 *
 * The inference itself is pure and lives in map/infer.h; this is the command around it: which collections (those
 * named, or every included collection the file does not map yet), reading a sample of each from MongoDB, the table
 * names to avoid (every other included collection's table, the file's maps, the maps inferred before), and a last
 * check that the file with the output appended loads.
 */
#ifndef OPLOG2PG_DAEMON_INFER_CMD_H
#define OPLOG2PG_DAEMON_INFER_CMD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "daemon/config.h"

#define INFER_CMD_DEFAULT_SAMPLE 1000u
#define INFER_CMD_MAX_SAMPLE     10000000u

typedef struct infer_cmd_options {
    const char *config_path; /* the file cfg was loaded from: read again for the final check */
    const char *const *ns;   /* "DB.COLL" names from the command line; none: every included collection */
    size_t nns;
    uint32_t sample; /* documents read per collection, 1..INFER_CMD_MAX_SAMPLE (0: INFER_CMD_DEFAULT_SAMPLE) */
    unsigned depth;  /* parts a column path may have, 1..INFER_MAX_DEPTH (0: INFER_DEFAULT_DEPTH) */
} infer_cmd_options;

/* Runs the command: the sections go to out, messages to the log (stderr). Returns the exit code (exitcodes.h):
 * EXIT_OK; EXIT_USAGE for a namespace that cannot be inferred (malformed, left out by the filter, internal, not a
 * collection MongoDB lists, mapped in the file already); EXIT_CONFIG when MongoDB refuses the login; EXIT_FAILURE_GENERIC
 * when MongoDB cannot be reached or read; EXIT_SOFTWARE when memory runs out or the output would not load. Nothing is
 * written to out unless the whole output is ready. */
int infer_map_command(FILE *out, const config *cfg, const infer_cmd_options *o);

#endif

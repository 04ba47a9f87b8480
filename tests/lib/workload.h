/*
 * workload.h — a seeded, reproducible MongoDB write workload for replication tests and benchmarks.
 *
 * workload_run() generates a sequence of operations from a private PRNG (same seed and config → same sequence, which
 * workload_stats.op_hash fingerprints) and sends them with libmongoc: inserts of varied documents (nested objects,
 * arrays, every common BSON type, _id of type ObjectId, int32 or string), updates by _id ($set on nested and array
 * paths, $unset, $inc, $push), replacements, deletes of live documents, and at a low rate DDL (drop, rename to a new
 * name, create). The live _ids of every namespace are tracked in memory so updates and deletes always hit a document.
 *
 * Namespaces: cfg->n_namespaces collections spread round-robin over cfg->n_databases databases named
 * "<db_prefix>0", "<db_prefix>1", ...; collection i starts as "c<i>" and gets a new name on each rename ("c<i>_r<k>").
 * Writes are batched per namespace into ordered bulk operations; namespaces are independent, so the final state is
 * exactly that of applying the sequence one operation at a time (the oplog interleaves namespaces in batches).
 */
#ifndef OPLOG2PG_TESTS_WORKLOAD_H
#define OPLOG2PG_TESTS_WORKLOAD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    WORKLOAD_MIXED = 0,          /* weighted mix of inserts, updates, replaces, deletes and DDL */
    WORKLOAD_INSERT_ONLY,        /* inserts only, namespaces chosen at random */
    WORKLOAD_INSERTS_PER_UPDATE, /* runs of inserts_per_update inserts into one namespace, then one update there */
} workload_mode;

typedef struct {
    uint64_t seed;
    uint64_t ops;          /* operations to generate */
    const char *db_prefix; /* database names are <db_prefix><k>; keep it unique per test ("wl1_") */
    int n_databases;       /* ≥ 1 (default 2) */
    int n_namespaces;      /* ≥ 1 (default 6) */
    workload_mode mode;
    /* WORKLOAD_MIXED weights (relative; 0 disables a kind). DDL covers drop, rename and create. */
    unsigned w_insert, w_update, w_replace, w_delete, w_ddl;
    unsigned inserts_per_update; /* R for WORKLOAD_INSERTS_PER_UPDATE (default 10) */
    unsigned batch_size;         /* max pending writes per namespace before a bulk is sent (default 500) */
    unsigned pad_bytes;          /* extra string field of this length in inserted/replaced documents (default 0) */
    uint32_t first_id;           /* number behind the first _id of each namespace (default 0); a second workload on
                                  * the same namespaces takes a range of its own, e.g. 10 000 000 */
    bool dry_run;                /* generate and hash only; nothing is sent (mongo_uri may be NULL) */
    /* A paced stream (0: as fast as the server takes the writes): ops per second, sent every tick_ms (default 10)
     * as one bulk per namespace of the ops due by then; when behind, the writer sends without sleeping. */
    double rate;
    unsigned tick_ms;
    /* When not NULL, the run ends at the first op after *stop is set (its pending writes are sent, and it returns
     * true): for a stream of ops = UINT64_MAX that another thread stops. */
    const atomic_bool *stop;
} workload_config;

typedef struct {
    uint64_t ops; /* operations generated */
    uint64_t inserts, updates, replaces, deletes;
    uint64_t creates, drops, renames;
    uint64_t bulks;     /* bulk operations executed */
    uint64_t live_docs; /* documents alive at the end, over all namespaces */
    uint64_t op_hash;   /* FNV-1a 64 over every generated operation (kind, namespace slot and name, BSON bytes) */
    double seconds;     /* wall time of workload_run */
    double behind_max;  /* paced: the most the writer was behind its schedule at a tick, in seconds */
} workload_stats;

/* Fills defaults: seed 1, 10 000 ops, prefix "wl_", 2 databases, 6 namespaces, MIXED with weights
 * (per mille) insert 450, update 350, replace 80, delete 119, ddl 1 (half renames, a quarter drops, a quarter drop +
 * explicit create; DDL on a dropped namespace creates it), R = 10, batch 500. */
void workload_config_init(workload_config *cfg);

/* Runs the workload. Returns false with a message in err on any failed write (the stats so far are in out). */
bool workload_run(const char *mongo_uri, const workload_config *cfg, workload_stats *out, char *err, size_t errlen);

#endif

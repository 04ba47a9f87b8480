/*
 * reconcile.c — [mongodb] delete_reconcile: the pass the apply loop runs at that interval, for a server whose change
 * stream sends no deletes (Azure Cosmos DB for MongoDB, RU; docs/sources.md).
 *
 * The loop (apply.c, on_reconcile_timer) commits everything it holds first and runs the pass on its own thread, so
 * nothing is applied while it runs: that pause is what makes the anti-join safe (the reasoning is in
 * src/sink/reconcile.c). The pass lends the sink a scan of each collection's _ids (source/idscan.h) on a MongoDB
 * client of its own, opened for the pass. A scan MongoDB cannot answer now is tried again at the next interval;
 * nothing is deleted for a collection whose scan did not end.
 */
#include <stdio.h>
#include <string.h>

#include "apply_internal.h"
#include "daemon/notify.h"
#include "daemon/signals.h"
#include "sink/reconcile.h"
#include "source/idscan.h"
#include "source/mongo_client.h"
#include "util/clock.h"
#include "util/log.h"

typedef struct {
    daemon_ctx *d;
    mongoc_client_t *client;
} pass;

static bool scan_tick(void *arg)
{
    (void)arg;
    notify_watchdog();
    signals_poll();
    return !signals_stop_requested();
}

static apply_status scan_ids(void *ctx, const char *db, const char *coll, sink_id_fn each, void *arg, char *why,
                             size_t whylen)
{
    pass *p = ctx;
    idscan_opts o = {.majority = p->d->cfg->read_concern == CONFIG_READ_MAJORITY, .tick = scan_tick};
    uint64_t n;
    bool stopped;
    return idscan_collection(p->client, db, coll, &o, each, arg, &n, &stopped, why, whylen);
}

static bool included(void *ctx, const char *db, const char *coll)
{
    pass *p = ctx;
    return p->d->filter == NULL || nsfilter_match(p->d->filter, db, coll);
}

apply_status reconcile_pass(daemon_ctx *d)
{
    char err[512];
    mongo_client_opts mo = {.appname = "oplog2pg-reconcile"};
    pass p = {.d = d, .client = mongo_client_open(d->cfg->mongodb_uri_effective, &mo, err, sizeof err)};
    if (p.client == NULL) {
        log_warning("delete reconciliation: %s; trying again in %lld s", err,
                    (long long)(d->cfg->delete_reconcile_ms / 1000));
        return APPLY_OK;
    }
    sink_set_activity(d->snk, "reconciling deletes");
    notify_status("reconciling deletes: reading every _id of the included collections from MongoDB");
    double t0 = clock_s();
    sink_reconcile_result r;
    apply_status st = sink_reconcile_deletes(d->snk, included, scan_ids, &p, &r);
    mongoc_client_destroy(p.client);
    if (st != APPLY_OK)
        return st;
    d->reconcile_passes++;
    d->reconcile_deleted += r.deleted;
    char act[SINK_ACTIVITY_MAX + 1];
    snprintf(act, sizeof act, "applying; deletes reconciled: %llu", (unsigned long long)d->reconcile_deleted);
    sink_set_activity(d->snk, act);
    if (r.scan_status != APPLY_OK && signals_stop_requested()) {
        log_notice("delete reconciliation: %s; nothing deleted for that collection", r.scan_why);
        return APPLY_OK;
    }
    if (r.scan_status != APPLY_OK) {
        log_warning("delete reconciliation stopped after %llu tables (%llu rows deleted): %s; nothing was deleted "
                    "for that collection, trying again in %lld s",
                    (unsigned long long)r.tables, (unsigned long long)r.deleted, r.scan_why,
                    (long long)(d->cfg->delete_reconcile_ms / 1000));
        return APPLY_OK;
    }
    log_info("delete reconciliation: %llu tables, %llu _ids read from MongoDB, %llu rows deleted, in %.1f s",
             (unsigned long long)r.tables, (unsigned long long)r.scanned, (unsigned long long)r.deleted,
             clock_s() - t0);
    return APPLY_OK;
}

#!/bin/sh
# oplog2pg-margin.sh [DIR] — publishes the oplog window margin of an oplog2pg service for node_exporter's textfile
# collector: how much oplog time is left before the entry of the service's checkpoint falls off the oplog.
#
# The daemon does not poll MongoDB for its oplog's oldest entry; `oplog2pg status --json` measures it. Run this
# every few minutes (cron or a systemd timer) as a user who can read the configuration (the oplog2pg group) and
# write DIR (default /var/lib/prometheus/node-exporter, node_exporter's --collector.textfile.directory on Debian).
# OPLOG2PG_CONFIG names another configuration, OPLOG2PG (default: oplog2pg on PATH) another binary.
#
# It writes DIR/oplog2pg-SERVICE.prom, whole or not at all (a temporary file renamed into place):
#   oplog2pg_oplog_margin_seconds{service="S"} SECONDS            a replica set
#   oplog2pg_oplog_margin_seconds{service="S",shard="X"} SECONDS  a sharded cluster, one line per shard it reads
# status reports the margin in hours to 2 decimals, so SECONDS is exact to 36 s. It is -1 when status cannot measure
# it (no checkpoint yet, MongoDB unreachable): the alert Oplog2pgOplogMarginLow then fires too.
set -eu

dir=${1:-/var/lib/prometheus/node-exporter}
conf=${OPLOG2PG_CONFIG:-/etc/oplog2pg/oplog2pg.ini}
bin=${OPLOG2PG:-oplog2pg}

# status exits 1 when a side cannot be reached, and still prints what it knows.
json=$("$bin" -c "$conf" status --json) || [ -n "${json:-}" ] || { echo "oplog2pg-margin: status printed nothing" >&2; exit 1; }

printf '%s' "$json" | python3 -c '
import json, sys

def esc(v):
    return v.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")

def margin(o):
    m = (o or {}).get("oplog") or {}
    h = m.get("margin_hours")
    return -1 if h is None else int(round(h * 3600))

s = json.load(sys.stdin)
service = s.get("service") or ""
out = sys.argv[1]
lines = ["# HELP oplog2pg_oplog_margin_seconds Seconds of oplog left before the entry of the checkpoint falls off; -1 unknown.",
         "# TYPE oplog2pg_oplog_margin_seconds gauge"]
shards = [h for h in (s.get("shards") or []) if not h.get("removed")]
if shards:
    for h in shards:
        lines.append("oplog2pg_oplog_margin_seconds{service=\"%s\",shard=\"%s\"} %s" % (esc(service), esc(h.get("shard") or ""), margin(h)))
else:
    lines.append("oplog2pg_oplog_margin_seconds{service=\"%s\"} %s" % (esc(service), margin(s)))
name = "".join(c if c.isalnum() or c in "-_" else "_" for c in service) or "default"
path = "%s/oplog2pg-%s.prom" % (out, name)
with open(path + ".tmp", "w") as f:
    f.write("\n".join(lines) + "\n")
import os
os.rename(path + ".tmp", path)
' "$dir"

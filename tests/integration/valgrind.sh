#!/usr/bin/env bash
# tests/integration/valgrind.sh BUILD — the daemon under valgrind: a short replication run with the metrics endpoint
# on and scraped, one document PostgreSQL refuses (set aside as a dead letter), a typed map with a child table, a
# time-series collection, a SIGHUP reload, then SIGTERM.
#
# Fails on any memory error or definite leak (valgrind's exit code 99), and when the daemon does not exit 0.
# Skipped, with the reason printed, for sanitizer builds (ASan and valgrind cannot share a process).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
: "${OPLOG2PG_TEST_PG:?run me through scripts/with-pg.sh}"

# Not `ldd | grep -q`: grep -q leaves at the first match, ldd may then die of SIGPIPE, and under pipefail the test
# would be false (the run then goes on under valgrind with a sanitizer build, and fails).
if ldd "$build/oplog2pg" | grep libasan >/dev/null; then
    reason="$build/oplog2pg is a sanitizer build (run make check for the valgrind pass)"
    echo "SKIP: valgrind: $reason"
    # tests/run.sh lists every skip at the end (tests/lib/skip.h)
    [ -n "${OPLOG2PG_TEST_SKIPS:-}" ] && echo "valgrind pass: $reason" >>"$OPLOG2PG_TEST_SKIPS"
    exit 0
fi
command -v valgrind >/dev/null || { echo "valgrind is not installed (scripts/deps.sh installs it)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/oplog2pg-vg.XXXXXX")
sim_pid="" daemon_pid=""
cleanup() {
    local rc=$?
    [ -n "$daemon_pid" ] && kill -9 "$daemon_pid" 2>/dev/null
    [ -n "$sim_pid" ] && kill "$sim_pid" 2>/dev/null
    wait 2>/dev/null
    [ $rc -ne 0 ] && [ -f "$work/valgrind.log" ] && tail -n 40 "$work/valgrind.log" >&2
    rm -rf "$work"
    exit $rc
}
trap cleanup EXIT

coproc SIM { exec "$build/mongosim" --port 0 2>"$work/mongosim.log"; }
sim_pid=$SIM_PID
read -r -t 10 port <&"${SIM[0]}"
uri="mongodb://127.0.0.1:$port/?replicaSet=rs0"
/usr/bin/python3 -c "import pymongo,sys; pymongo.MongoClient(sys.argv[1]).vg_seed.x.insert_one({'_id': 1})" "$uri"
mport=$(/usr/bin/python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
cat >"$work/oplog2pg.ini" <<INI
[mongodb]
uri = $uri
[postgres]
conninfo = $OPLOG2PG_TEST_PG
[replication]
service = valgrind
include = vg.*
[metrics]
listen = 127.0.0.1:$mport
[map vg.orders]
rest = extra
column.total = numeric from amount.total
column.n = integer
column.tags = text[]
child.items = order_items
[child vg.order_items]
column.sku = text
column.qty = integer
INI

valgrind --quiet --soname-synonyms=somalloc=libtcmalloc_minimal.so* --suppressions=tests/integration/valgrind.supp --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
    --error-exitcode=99 --log-file="$work/valgrind.log" \
    "$build/oplog2pg" -c "$work/oplog2pg.ini" run 2>"$work/oplog2pg.log" &
daemon_pid=$!

caught_up() {
    /usr/bin/python3 - "$uri" <<'PY'
import subprocess, sys, pymongo
newest = next(pymongo.MongoClient(sys.argv[1]).local["oplog.rs"].find().sort("$natural", -1).limit(1))["ts"]
row = subprocess.run(["psql", "-XAtc", "SELECT ts_sec, ts_inc FROM oplog2pg.checkpoint WHERE service = 'valgrind'"],
                     capture_output=True, text=True).stdout.strip()
sys.exit(0 if row == f"{newest.time}|{newest.inc}" else 1)
PY
}
wait_caught_up() {
    for _ in $(seq 1 600); do caught_up && return 0; sleep 0.1; done
    echo "valgrind: the daemon did not catch up" >&2; cat "$work/oplog2pg.log" >&2; return 1
}
wait_caught_up
/usr/bin/python3 - "$uri" <<'PY'
import sys, pymongo
c = pymongo.MongoClient(sys.argv[1]).vg.docs
for i in range(300):
    c.insert_one({"_id": i, "v": i, "tags": ["a"]})
for i in range(0, 300, 3):
    c.update_one({"_id": i}, {"$set": {"v": -i}, "$push": {"tags": "b"}})
for i in range(0, 300, 7):
    c.delete_one({"_id": i})
c.insert_one({"_id": 1000, "s": "a\x00b"})  # jsonb refuses U+0000: a dead letter
c.rename("renamed")
o = pymongo.MongoClient(sys.argv[1]).vg.orders  # a typed map with a child table (docs/mapping.md)
for i in range(60):
    o.insert_one({"_id": i, "amount": {"total": i * 1.5, "cur": "EUR"}, "n": i, "tags": ["a", "b"],
                  "items": [{"sku": "s%d" % i, "qty": 1}, {"sku": "t", "qty": 2}]})
for i in range(0, 60, 2):
    o.update_one({"_id": i}, {"$set": {"amount.total": -i}, "$push": {"items": {"sku": "u", "qty": 3}}})
for i in range(1, 60, 4):
    o.update_one({"_id": i}, {"$pull": {"tags": "a"}, "$unset": {"items": ""}})
for i in range(0, 60, 10):
    o.delete_one({"_id": i})
o.insert_one({"_id": 1000, "n": "not a number"})  # a type error: a dead letter naming the column
import datetime  # a time-series collection (docs/timeseries.md): bucket inserts, appends, closes, re-packs
d = pymongo.MongoClient(sys.argv[1]).vg
d.create_collection("weather", timeseries={"timeField": "t", "metaField": "s"})
w, t0 = d.weather, datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
for i in range(200):
    w.insert_one({"t": t0 + datetime.timedelta(seconds=i), "s": i % 3, "v": i * 0.5})
w.insert_many([{"t": t0 + datetime.timedelta(seconds=i), "s": i % 3, "v": i * 0.5} for i in range(200, 500)])
w.delete_many({"s": 2})
PY
wait_caught_up
kill -HUP "$daemon_pid"
scrape=$(curl -s --max-time 10 "http://127.0.0.1:$mport/metrics")
grep -q '^oplog2pg_dead_letters_total 2$' <<<"$scrape" || {
    echo "valgrind: the metrics do not show the dead letter:" >&2; echo "$scrape" | head -40 >&2; exit 1; }
kill -TERM "$daemon_pid"
rc=0
wait "$daemon_pid" || rc=$?
daemon_pid=""
rows=$(psql -XAtc "SELECT count(*) FROM vg.renamed")
if [ "$rc" -ne 0 ]; then
    echo "valgrind: the daemon exited with $rc (99 = memory errors or definite leaks):" >&2
    exit 1
fi
[ "$rows" = 257 ] || { echo "valgrind: expected 257 rows in vg.renamed, found $rows" >&2; exit 1; }
# 54 orders (60, less 6 deleted); items: 3 for each of the 24 even ones left, none for the 15 unset, 2 for the 15 other odd ones
mapped=$(psql -XAtc "SELECT (SELECT count(*) FROM vg.orders) || ' ' || (SELECT count(*) FROM vg.order_items)")
[ "$mapped" = "54 102" ] || { echo "valgrind: expected 54 orders and 102 items, found $mapped" >&2; exit 1; }
# 500 measurements, less the 166 of sensor 2; measurement i: at t0 + i s, of sensor i % 3, with v = i / 2
measured=$(psql -XAtc "SELECT count(*) || ' ' || count(*) FILTER (WHERE (doc->>'v')::float8 * 2 =
                       extract(epoch FROM \"time\" - timestamptz '2026-01-01 00:00:00+00') AND meta::text::int =
                       ((doc->>'v')::float8 * 2)::int % 3 AND meta::text::int <> 2) FROM vg.weather")
[ "$measured" = "334 334" ] || { echo "valgrind: expected 334 measurements of sensors 0 and 1, found $measured" >&2; exit 1; }
echo "valgrind: no memory errors, no definite leaks (257 + 54 rows, 102 child rows and 334 measurements replicated," \
    "clean SIGTERM exit)"

#!/usr/bin/env bash
# scripts/demo.sh BUILD — the `make demo` walk-through; runs inside scripts/with-pg.sh (a throwaway PostgreSQL).
#
# Starts mongosim (a one-member replica set on a free port) holding a first collection, starts oplog2pg against it and
# the throwaway PostgreSQL (it copies that collection, then tails), runs a small shop workload through pymongo
# (inserts, $set/$inc/$push/$unset updates, a replacement, deletes, a rename, a drop), then shows the tables, a few
# rows, the checkpoint, `oplog2pg status` and a few of its Prometheus metrics, and stops the daemon with SIGTERM as
# systemd would.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
work=$(mktemp -d "${TMPDIR:-/tmp}/oplog2pg-demo.XXXXXX")
sim_pid="" daemon_pid=""
cleanup() {
    local rc=$?
    [ -n "$daemon_pid" ] && kill -9 "$daemon_pid" 2>/dev/null
    [ -n "$sim_pid" ] && kill "$sim_pid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$work"
    exit $rc
}
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "starting mongosim (the MongoDB replica-set simulator)"
coproc SIM { exec "$build/mongosim" --port 0 2>"$work/mongosim.log"; }
sim_pid=$SIM_PID
read -r -t 10 port <&"${SIM[0]}"
uri="mongodb://127.0.0.1:$port/?replicaSet=rs0"
echo "replica set rs0 at $uri"

mport=$(/usr/bin/python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
cat >"$work/oplog2pg.ini" <<INI
[mongodb]
uri = $uri
[postgres]
conninfo = $OPLOG2PG_TEST_PG
[replication]
service = demo
include = shop.*
[copy]
# A fresh simulator's oplog is seconds old: no point warning that it holds less than an hour.
window_warning = 0
[metrics]
listen = 127.0.0.1:$mport
INI
say "configuration ($work/oplog2pg.ini)"
cat "$work/oplog2pg.ini"

# Some data from before oplog2pg starts: its initial copy brings it over, then it tails the oplog.
/usr/bin/python3 -c "import pymongo,sys; pymongo.MongoClient(sys.argv[1]).shop.hello.insert_many([{'_id': i, 'greeting': 'hello'} for i in range(1000)])" "$uri"

say "starting oplog2pg"
"$build/oplog2pg" -c "$work/oplog2pg.ini" run 2>"$work/oplog2pg.log" &
daemon_pid=$!
sleep 1
cat "$work/oplog2pg.log"

say "writing a sample workload to MongoDB"
/usr/bin/python3 scripts/demo_workload.py "$uri"
sleep 1

say "what PostgreSQL holds now"
psql -X -q -P pager=off <<'SQL'
SELECT table_schema || '.' || table_name AS "table",
       (xpath('/row/c/text()', query_to_xml(format('SELECT count(*) AS c FROM %I.%I', table_schema, table_name),
                                            false, true, '')))[1]::text::int AS rows
  FROM information_schema.tables WHERE table_schema = 'shop' ORDER BY 1;
SELECT _id, doc FROM shop.orders ORDER BY _id LIMIT 5;
SELECT service, ts_sec || ':' || ts_inc AS oplog_position, term, to_timestamp(ts_sec) AS entry_time, applied_at
  FROM oplog2pg.checkpoint;
SQL

say "oplog2pg status"
"$build/oplog2pg" -c "$work/oplog2pg.ini" status

say "some of its metrics (curl http://127.0.0.1:$mport/metrics)"
sleep 1 # the snapshot is published every second
curl -s "http://127.0.0.1:$mport/metrics" |
    grep -E '^oplog2pg_(ready|ops_applied_total|flushes_total|lag_seconds|dead_letters_total|commits_total)[ {]'

say "stopping oplog2pg with SIGTERM (it commits what it has, then exits 0)"
kill -TERM "$daemon_pid"
wait "$daemon_pid" && echo "exit status 0"
daemon_pid=""
cat "$work/oplog2pg.log"

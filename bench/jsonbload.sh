#!/usr/bin/env bash
# bench/jsonbload.sh [ROWS [ROUNDS]] — what a jsonb COPY costs PostgreSQL alone, by the order of each object's keys and
# by how the rows are cut into COPYs and transactions (docs/benchmarks.md, "Keys in jsonb's order"). Run inside
# scripts/with-pg.sh.
#
# ROWS (default 300000) small documents like the throughput bench's (an _id, a name, a double, an array, a nested
# object with a 120-byte string, a date), as COPY text for (_id text COLLATE "C" PRIMARY KEY, doc jsonb):
#   sorted   every object's keys in jsonb's order (shorter first, then bytewise), as a dump of a jsonb column prints
#            them and as oplog2pg writes inserted documents;
#   mongo    the same documents with keys in the order an application wrote them (_id first), as MongoDB keeps them.
# Each is loaded by psql \copy into a fresh table (after a CHECKPOINT); then the sorted rows again in COPYs of 10 000
# rows, each in its own transaction (oplog2pg's flush groups) and all in one. ROUNDS (default 3) rounds, one of each
# per round. Prints the backend's CPU time (/proc) and the wall time of each load; nothing is asserted.
set -euo pipefail
: "${OPLOG2PG_TEST_PG:?run me through scripts/with-pg.sh}"
rows=${1:-300000}
rounds=${2:-3}
work=$(mktemp -d "${TMPDIR:-/tmp}/oplog2pg-jsonbload.XXXXXX")
trap 'rm -rf "$work"' EXIT
psql() { command psql -X -q -v ON_ERROR_STOP=1 "$@"; }

# json (not jsonb) keeps the order its keys were given in; jsonb prints them in its own.
fields="'_id', i, 'name', 'user' || i, 'n', i * 1.5, 'tags', json_build_array('a', 'b', 'c', i),
        'addr', json_build_object('zip', i % 10000, 'city', 'Paris', 'street', repeat('x', 120)),
        'at', '2026-12-02T17:56:52.250699+00:00'"
psql -c "\\copy (SELECT i::text, json_build_object($fields)::jsonb::text FROM generate_series(1, $rows) i) \
TO '$work/sorted.txt'"
psql -c "\\copy (SELECT i::text, json_build_object($fields)::text FROM generate_series(1, $rows) i) \
TO '$work/mongo.txt'"
split -l 10000 -d -a 4 "$work/sorted.txt" "$work/part."

# One load in one psql session: the backend's CPU (utime + stime, in clock ticks) and the wall time around the COPYs.
load() {
    local name=$1 body=$2
    {
        echo 'DROP TABLE IF EXISTS public.jsonbload;'
        echo 'CREATE TABLE public.jsonbload (_id text COLLATE "C" PRIMARY KEY, doc jsonb NOT NULL);'
        echo 'CHECKPOINT;'
        echo 'SELECT pg_backend_pid() AS pid \gset'
        echo '\setenv PID :pid'
        echo "\\! { awk '{print \$14 + \$15}' /proc/\$PID/stat; date +%s.%N; } > $work/before"
        printf '%s\n' "$body"
        echo "\\! { awk '{print \$14 + \$15}' /proc/\$PID/stat; date +%s.%N; } > $work/after"
    } | psql
    local hz
    hz=$(getconf CLK_TCK)
    paste "$work/before" "$work/after" | awk -v name="$name" -v n="$rows" -v hz="$hz" '
        NR == 1 { cpu = ($2 - $1) / hz } NR == 2 { wall = $2 - $1 }
        END { printf "%-44s backend CPU %.2f s (%.1f us/row), wall %.2f s\n", name, cpu, cpu * 1e6 / n, wall }'
}

parts=$(for f in "$work"/part.*; do echo "\\copy public.jsonbload from '$f'"; done)
for ((r = 1; r <= rounds; r++)); do
    echo "round $r"
    load "one COPY, keys in jsonb's order" "\\copy public.jsonbload from '$work/sorted.txt'"
    load "one COPY, keys in MongoDB's order" "\\copy public.jsonbload from '$work/mongo.txt'"
    load "COPYs of 10 000 rows, a transaction each" "$parts"
    load "COPYs of 10 000 rows, one transaction" "BEGIN;
$parts
COMMIT;"
done
psql -c 'DROP TABLE public.jsonbload'

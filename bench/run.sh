#!/usr/bin/env bash
# bench/run.sh BUILD — everything `make bench` measures, printed as Markdown for docs/benchmarks.md.
#
# Each figure is a ratio between runs made side by side in this one invocation, on the same throwaway PostgreSQL
# (fsync on) and the same mongosim build: timings are reported, never asserted.
#   1. mongosim's tailing speed (it must never be what a benchmark of oplog2pg measures);
#   2. the batching table: oplog2pg batched versus per-op mode at 1..1000 inserts per update;
#   3. insert-only throughput against psql \copy of the same rows, and the daemon's peak memory;
#   4. the initial copy, with one worker and with four, against psql \copy.
# BENCH_ENTRIES (default 20000), BENCH_INSERTS and BENCH_COPY (default 1000000) scale the last three.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}

if [ -z "${OPLOG2PG_TEST_PG:-}" ]; then
    exec scripts/with-pg.sh "$0" "$@"
fi
export OPLOG2PG_TEST_BUILD=$build

echo "# oplog2pg benchmarks — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(psql -XAtc 'SHOW server_version') (fsync $(psql -XAtc 'SHOW fsync'))"
echo
echo "## mongosim serving a tailing libmongoc client"
work=$(mktemp -d)
coproc SIM { exec "$build/mongosim" --port 0 2>"$work/mongosim.log"; }
read -r -t 10 port <&"${SIM[0]}"
"$build/bench/mongosim_tail" "mongodb://127.0.0.1:$port/?replicaSet=rs0" 1000000 2>/dev/null
kill "$SIM_PID"; wait "$SIM_PID" 2>/dev/null || true
rm -rf "$work"

echo
echo "## Batching: ${BENCH_ENTRIES:-20000} oplog entries, batched versus per-op mode"
"$build/bench/replication" batching "${BENCH_ENTRIES:-20000}" 2>/dev/null
echo
echo "## Insert-only throughput against psql \\copy"
"$build/bench/replication" inserts "${BENCH_INSERTS:-1000000}" 2>/dev/null
echo
echo "## Initial copy against psql \\copy"
"$build/bench/replication" copy "${BENCH_COPY:-1000000}" 2>/dev/null

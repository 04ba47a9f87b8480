#!/usr/bin/env bash
# bench/run.sh BUILD — everything `make bench` measures, printed as Markdown for docs/benchmarks.md.
#
# Each figure is a ratio between runs made side by side in this one invocation, on the same throwaway PostgreSQL
# (fsync on) and the same mongosim build: timings are reported, never asserted.
#   1. mongosim's tailing speed (it must never be what a benchmark of oplog2pg measures): bench/mongosim_tail;
#   2. the batching table: oplog2pg batched versus per-op mode at 1..1000 inserts per update (bench/batching), and
#      the same through a proxy that delays each round trip to PostgreSQL by 0, 1 and 5 ms (bench/rtt);
#   3. insert-only throughput against psql \copy of the same rows, and the daemon's peak memory (bench/inserts); then
#      small (~320 B) and large (~10 kB) documents, tailing and replay, against psql \copy of the same rows into the
#      same table shape (bench/throughput), also on warm connections (bench/steady: each side's second load of as
#      many rows, since a new backend pays a page fault for each page of shared memory it touches first); many
#      collections (bench/collections: 1, 100 and 2 000, round-robin; 2 000 again on a cluster with
#      max_locks_per_transaction = 256, and with the daemon's max_prepared_statements = 4000); peak memory with a
#      10-million-entry backlog and with 16 MB documents (bench/memory);
#   4. the initial copy, with one worker and with four, against psql \copy (one session, and four at once):
#      bench/copy;
#   5. what the key column costs an insert (psql \copy into the three key shapes): bench/keys;
#   6. typed tables: a mapped collection of typed columns, and arrays of 1 000 doubles into a double precision[]
#      column, each against psql \copy of the same rows (three pairs each, alternating): bench/mapped;
#   7. a 1 GB transaction: one transaction of 270 000 documents of 4 kB, a chain of 16 MB oplog entries, against the
#      same documents as plain inserts, and the daemon's peak memory (mongosim holds 3 GB meanwhile): bench/txn;
#   7b. a sharded cluster (mongosim --shards): insert-only throughput with 1, 2 and 4 shards against psql \copy and
#      against one shard, and the latency the merge adds with all shards busy (against a replica set) and with one
#      shard idle, with oplog notes and with the periodic noop only: bench/shards;
#   7c. the change-stream source against the oplog source on the same mixed workload: writes per second and the
#      daemon's CPU per write (bench/streams);
#   7d. a time-series collection: measurements per second from MongoDB 8.0 buckets (compressed, appends as binary
#      diffs) against psql \copy of the same measurement rows, and the CPU the bucket decoder spends per measurement
#      (bench/timeseries);
#   8. latency: from MongoDB's acknowledgement to the commit in PostgreSQL, for single inserts on an idle system,
#      insertMany bursts of 10, 10 000 and 200 000 documents, and single inserts beside a steady mixed stream of
#      20 000 ops/s (the goal) and of 5 000 (bench/latency.c says how it is measured).
# Each is a program of its own, built from bench/NAME.c by `make` (the replication benchmarks share bench/lib/, the
# trial around the daemon tests/lib/benchtrial.c); each says its arguments at the top of its file, and runs alone
# through scripts/with-pg.sh: scripts/with-pg.sh build/bench/batching 5000.
# Everything printed is also kept in BUILD/bench-results.md (BENCH_RESULTS), and bench/plots.sh then draws the
# batching table and the latency distributions from it as SVG into docs/ (BENCH_PLOTS; gnuplot comes from
# `scripts/deps.sh --bench` when it is missing; without it the plots are skipped, not the run).
# BENCH_ENTRIES (default 20000), BENCH_RTT (default 10000), BENCH_INSERTS and BENCH_COPY (default 1000000),
# BENCH_KEYS (default 300000), BENCH_MAPPED (default 200000), BENCH_ARRAYS (default 10000), BENCH_TXN (default 270000
# documents), BENCH_LATENCY_SECS (default 30 s of probes beside each stream) and BENCH_LATENCY_RATE (default 20000,5000 ops/s),
# BENCH_SMALL (default 300000) and BENCH_LARGE (default 30000) documents, BENCH_COLLECTIONS (default 100000 inserts),
# BENCH_STREAMS (default 100000 writes), BENCH_TIMESERIES (default 200000 measurements), BENCH_SHARDS (default 200000 entries) and BENCH_SHARDS_SECS (default 10 s of probes per latency trial),
# BENCH_BACKLOG (default 10000000 entries) and BENCH_HUGE (default 40 documents of 16 MB) scale them.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}

if [ -z "${OPLOG2PG_TEST_PG:-}" ]; then
    exec scripts/with-pg.sh "$0" "$@"
fi
export OPLOG2PG_TEST_BUILD=$build
results=${BENCH_RESULTS:-$build/bench-results.md}

mkdir -p "$(dirname "$results")"
exec 3>&1 > >(tee "$results") # a copy of everything printed, for bench/plots.sh
tee_pid=$!

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
"$build/bench/batching" "${BENCH_ENTRIES:-20000}" 2>/dev/null
echo
echo "## Network round trips: 10 000 ops through bench/rttproxy at 0, 1 and 5 ms (runs of 50 inserts, then mixed)"
"$build/bench/rtt" "${BENCH_RTT:-10000}" 50 2>/dev/null
"$build/bench/rtt" "${BENCH_RTT:-10000}" 2>/dev/null
echo
echo "## Insert-only throughput against psql \\copy"
"$build/bench/inserts" "${BENCH_INSERTS:-1000000}" 2>/dev/null
echo
echo "## Throughput by document size"
"$build/bench/throughput" "${BENCH_SMALL:-300000}" "${BENCH_LARGE:-30000}" 2>/dev/null
echo
echo "## Throughput by document size on warm connections"
"$build/bench/steady" "${BENCH_SMALL:-300000}" "${BENCH_LARGE:-30000}" 2>/dev/null
echo
echo "## Many collections"
"$build/bench/collections" "${BENCH_COLLECTIONS:-100000}" 1 100 2000 2>/dev/null
echo
echo "The same at 2 000 collections on a second throwaway cluster whose lock table is four times the default"
echo "(max_locks_per_transaction = 256): batch_tables = auto then lets a flush group span every collection."
echo
WITH_PG_OPTS="-c max_locks_per_transaction=256" scripts/with-pg.sh \
    "$build/bench/collections" "${BENCH_COLLECTIONS:-100000}" 2000 2>/dev/null
echo
echo "And on the default lock table, with room for every table's insert prepared (max_prepared_statements = 4000)."
echo
BENCH_REPLICATION_INI=$'[postgres]\nmax_prepared_statements = 4000' scripts/with-pg.sh \
    "$build/bench/collections" "${BENCH_COLLECTIONS:-100000}" 2000 2>/dev/null
echo
echo "## Memory: a 10-million-entry backlog and 16 MB documents"
"$build/bench/memory" "${BENCH_BACKLOG:-10000000}" "${BENCH_HUGE:-40}" 2>/dev/null
echo
echo "## Initial copy against psql \\copy"
"$build/bench/copy" "${BENCH_COPY:-1000000}" 2>/dev/null
echo
echo "## The key"
"$build/bench/keys" "${BENCH_KEYS:-300000}" 2>/dev/null
echo
echo "## Typed tables"
"$build/bench/mapped" "${BENCH_MAPPED:-200000}" "${BENCH_ARRAYS:-10000}" 2>/dev/null
echo
echo "## A 1 GB transaction"
"$build/bench/txn" "${BENCH_TXN:-270000}" 2>/dev/null
echo
echo "## Sharded clusters"
"$build/bench/shards" "${BENCH_SHARDS:-200000}" "${BENCH_SHARDS_SECS:-10}" 2>/dev/null
echo
echo "## A change stream against the oplog"
"$build/bench/streams" "${BENCH_STREAMS:-100000}" 2>/dev/null
echo
echo "## Time-series collections"
"$build/bench/timeseries" "${BENCH_TIMESERIES:-200000}" 10 2>/dev/null
echo
echo "## Latency under load"
"$build/bench/latency" all "${BENCH_LATENCY_SECS:-30}" "${BENCH_LATENCY_RATE:-20000,5000}" 2>/dev/null

exec >&3 3>&- # the end of the copy
wait "$tee_pid"
echo "(kept in $results)"

if ! command -v gnuplot >/dev/null 2>&1; then
    scripts/deps.sh --bench >&2 || true
fi
if command -v gnuplot >/dev/null 2>&1; then
    bench/plots.sh "$results" "${BENCH_PLOTS:-docs}" >&2
else
    echo "bench: no gnuplot, so no plots (install gnuplot-nox, then: bench/plots.sh $results)" >&2
fi

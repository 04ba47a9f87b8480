#!/usr/bin/env bash
# tests/integration/shards.sh BUILD — the integration tests in parallel shards (what tests/run.sh runs).
#
# The integration tests mostly wait (on PostgreSQL, mongosim, daemons), so OPLOG2PG_TEST_SHARDS (default 2) shards run
# side by side. Each is a tests/integration/run.sh --queue under its own scripts/with-pg.sh: its own PostgreSQL cluster
# (directory and port), its own mongosim and its own TMPDIR, so that the tests that count or end every oplog2pg session
# in pg_stat_activity see only their own shard's daemons. The jobs (run.sh --jobs: each Check suite, each
# change-stream pass, the compatibility scripts, valgrind) wait in one queue, longest first by the seconds measured in
# tests/integration/job-seconds (a job not listed there counts as 60 s); each shard takes the next one when it is
# free. Every job runs, even after a failure.
#
# Each finished job prints a line as it ends; then the whole log of every shard that failed, a summary ending with
# Check's line for each failed test (last, where an output cut to its tail still shows them), and every skip (into
# $OPLOG2PG_TEST_SKIPS when it is set, as tests/run.sh lists them). The exit status is 1 when any job
# failed. With OPLOG2PG_TEST_SHARDS=1, CK_RUN_SUITE or MONGO_URI (a real replica set, shared by whatever runs against
# it) set, it is the single run instead: scripts/with-pg.sh tests/integration/run.sh BUILD.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
shards=${OPLOG2PG_TEST_SHARDS:-2}

if [ "$shards" -le 1 ] || [ -n "${CK_RUN_SUITE:-}" ] || [ -n "${MONGO_URI:-}" ]; then
    exec scripts/with-pg.sh tests/integration/run.sh "$build"
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/oplog2pg-shards.XXXXXX")
pids=()
cleanup() {
    local rc=$? pid
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$dir"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The queue: every job, longest first (the column of this build: san for a sanitizer build, else plain).
col=2
case "$build" in *san*) col=3 ;; esac
tests/integration/run.sh "$build" --jobs >"$dir/jobs"
awk -v col="$col" 'NR == FNR { if ($1 !~ /^#/ && NF >= 3) w[$1] = $col; next }
                   { print ($1 in w ? w[$1] : 60), $1 }' tests/integration/job-seconds "$dir/jobs" |
    sort -k1,1nr -k2,2 | cut -d' ' -f2 >"$dir/queue"
echo "== integration tests: $(wc -l <"$dir/queue") jobs in $shards shards (each its own PostgreSQL and mongosim;" \
    "a log each, shown below if it fails)"

start=$SECONDS
for i in $(seq 1 "$shards"); do
    OPLOG2PG_TEST_SHARD="shard $i" OPLOG2PG_TEST_SKIPS="$dir/skips.$i" \
        scripts/with-pg.sh tests/integration/run.sh "$build" --queue "$dir/queue" 3>&1 >"$dir/log.$i" 2>&1 &
    pids+=($!)
done
failed=()
for i in $(seq 1 "$shards"); do
    wait "${pids[$((i - 1))]}" || failed+=("$i")
done
pids=()

# A queue left with jobs means a shard died before taking them: a failure too.
if [ -s "$dir/queue" ]; then
    echo "shards.sh: jobs never run:" $(cat "$dir/queue") >&2
    [ ${#failed[@]} -gt 0 ] || failed+=(queue)
fi
for i in "${failed[@]}"; do
    [ "$i" = queue ] && continue
    echo
    echo "======== the log of shard $i, which failed ($dir/log.$i)"
    cat "$dir/log.$i"
done
echo
echo "== integration shards: $((SECONDS - start)) s in all"
for i in $(seq 1 "$shards"); do
    jobs=$(grep -c "^\[shard $i\] " "$dir/log.$i" || true)
    secs=$(sed -n "s/^\[shard $i\] .* (\([0-9]*\) s)\$/\1/p" "$dir/log.$i" | awk '{ s += $1 } END { print s + 0 }')
    echo "  shard $i: $jobs jobs, $secs s, $(grep -h '^integration_tests: ' "$dir/log.$i" |
        awk '{ p += $2; s += $4; f += $6 } END { printf "Check tests %d passed, %d skipped, %d failed", p, s, f }')"
done
grep -h '^\[shard [0-9]*\] .*: FAILED ' "$dir"/log.* | sed 's/^/  /' || true
# ...and Check's line for each failed test, last, where a log cut to its tail (a CI summary) still shows it.
grep -h -E '^[^ :]+:[0-9]+:[EF]:' "$dir"/log.* | cut -c1-400 | head -n 20 | sed 's/^/  /' || true
if [ -n "${OPLOG2PG_TEST_SKIPS:-}" ]; then
    cat "$dir"/skips.* >>"$OPLOG2PG_TEST_SKIPS" 2>/dev/null || true
else
    cat "$dir"/skips.* 2>/dev/null | sed 's/^/  SKIP /' || true
fi
[ ${#failed[@]} -eq 0 ]

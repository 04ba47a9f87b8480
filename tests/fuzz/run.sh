#!/usr/bin/env bash
# tests/fuzz/run.sh BUILD SECONDS TARGET... — runs each fuzz target for SECONDS (make fuzz calls it; FUZZ_SECONDS).
#
# Each target starts from its corpus BUILD/corpus/TARGET (kept between runs: what earlier runs found), the seeds
# BUILD/fuzz_seeds writes from the test vectors (BUILD/seeds/TARGET, written afresh) and the regression inputs
# tests/fuzz/regressions/TARGET. A crash, leak, sanitizer report or timeout is saved under BUILD/crashes/TARGET/
# with libFuzzer's log (BUILD/logs/TARGET.log). The summary gives, per target, the seconds, the executions (libFuzzer's
# stat::number_of_executed_units), executions per second, the corpus size, the code edges covered (libFuzzer's cov)
# and the outcome. Exits 1 when any target found a fault.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=$1
secs=$2
shift 2

rm -rf "$build/seeds"
"$build/fuzz_seeds" "$build/seeds" || exit 1
mkdir -p "$build/logs"
failed=0
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
printf '%-11s %8s %12s %9s %7s %6s  %s\n' target seconds executions exec/s corpus edges outcome >"$summary"
for t in "$@"; do
    corpus=$build/corpus/$t
    crashes=$build/crashes/$t
    mkdir -p "$corpus" "$crashes" "$build/seeds/$t"
    dirs=("$corpus" "$build/seeds/$t")
    [ -d "tests/fuzz/regressions/$t" ] && dirs+=("tests/fuzz/regressions/$t")
    log=$build/logs/$t.log
    echo "== fuzz $t (${secs}s)"
    start=$(date +%s)
    "$build/fuzz_$t" -max_total_time="$secs" -print_final_stats=1 -timeout=20 -rss_limit_mb=2048 \
        -artifact_prefix="$crashes/" "${dirs[@]}" >"$log" 2>&1
    rc=$?
    took=$(($(date +%s) - start))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    size=$(find "$corpus" -type f | wc -l)
    edges=$(grep -oE '(DONE|INITED|pulse|NEW|REDUCE) +cov: [0-9]+' "$log" | tail -n 1 | sed 's/.*cov: //')
    if [ "$rc" -eq 0 ]; then
        outcome=ok
    else
        outcome="FAULT (exit $rc): $(grep -m1 -E 'ERROR: |runtime error|invariant broken|Test unit written' "$log")"
        failed=1
    fi
    printf '%-11s %8s %12s %9s %7s %6s  %s\n' "$t" "$took" "${execs:-?}" "${rate:-?}" "$size" "${edges:-?}" "$outcome" \
        >>"$summary"
done
echo "== fuzz summary (logs in $build/logs, faults in $build/crashes)"
cat "$summary"
exit $failed

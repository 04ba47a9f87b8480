#!/usr/bin/env bash
# bench/compare-builds.sh OLD_BUILD NEW_BUILD [ENTRIES] [ROUNDS] — does a change cost throughput? Two builds of
# oplog2pg run the same workloads alternately on one throwaway PostgreSQL, and for each workload the script prints the
# ratio new/old of the paired runs: median and range over the rounds.
#
# The workloads (COMPARE_WORKLOADS, default all three, in this order):
#   batching   the batching table (bench/batching ENTRIES, default 1000): per-op and batched entries/s at 1, 10, 20,
#              50 and 1000 inserts per update (each batched figure the median of 3 runs);
#   inserts    insert-only tailing against psql \copy of the same rows (bench/inserts BENCH_INSERTS, default 20000);
#   mapped     the typed table of bench/mapped (BENCH_MAPPED documents, default 5000) and its arrays of 1 000 doubles
#              (BENCH_ARRAYS, default 200; 0 leaves them out), one pair per run (BENCH_MAPPED_REPS=1).
# In each of ROUNDS rounds (default 3) every workload runs once on each build, one right after the other; the build
# that goes first alternates from round to round (old first in odd rounds), so neither always meets a warmer or a
# busier machine. A pair's ratio compares runs made moments apart; the psql \copy baselines in the same runs give a
# second ratio, of oplog2pg's share of the COPY rate, which a change in the machine's load between the two runs
# affects less. At the defaults the three rounds took under 7 minutes on a shared two-core machine, mostly the
# batching table's 20 trials per run (each a fresh mongosim and tables), whatever ENTRIES is. Such small runs are
# noisy: two builds of the same commit gave pairs from 0.2 to 2.7 on per-op rows and 0.4 to 1.6 on batched ones
# while four other jobs shared the machine; larger sizes and more rounds on a quiet machine narrow the ranges, and
# a loss is a ratio below 1 whose range stays below 1.
#
# The programs that drive the runs are NEW_BUILD's bench/batching, bench/inserts and bench/mapped; each run uses the
# daemon and mongosim of its own build (OPLOG2PG_TEST_BUILD), so OLD_BUILD needs only `make all` of any commit.
# Build both as `make bench` does (the default CFLAGS, -O2 -g, and tcmalloc; no SANITIZE). For example:
#     git worktree add /tmp/old COMMIT && make -C /tmp/old -j2 all
#     bench/compare-builds.sh /tmp/old/build build
#     git worktree remove /tmp/old
# Everything the benchmarks print goes to stdout as they run (their own messages, per run, to the folder COMPARE_LOG,
# default a temporary folder removed at the end unless a run failed); the summary table comes last.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: bench/compare-builds.sh OLD_BUILD NEW_BUILD [ENTRIES] [ROUNDS]"
old=${1:?$usage}
new=${2:?$usage}
entries=${3:-1000}
rounds=${4:-3}
workloads=${COMPARE_WORKLOADS:-batching inserts mapped}
for b in "$old" "$new"; do
    if ! [ -x "$b/oplog2pg" ] || ! [ -x "$b/mongosim" ]; then
        echo "compare-builds: $b has no oplog2pg and mongosim (make all)" >&2
        exit 2
    fi
done
for w in $workloads; do
    case $w in
    batching | inserts | mapped)
        [ -x "$new/bench/$w" ] || { echo "compare-builds: no $new/bench/$w (make all)" >&2; exit 2; } ;;
    *)
        echo "compare-builds: unknown workload '$w' (batching, inserts, mapped)" >&2
        exit 2 ;;
    esac
done

if [ -z "${OPLOG2PG_TEST_PG:-}" ]; then
    exec scripts/with-pg.sh "$0" "$@"
fi
work=$(mktemp -d)
# The runs' output and messages are removed after a complete comparison, kept after a failure.
trap 'if [ $? -eq 0 ]; then rm -rf "$work"; else echo "compare-builds: kept $work" >&2; fi' EXIT
log=${COMPARE_LOG:-$work}
mkdir -p "$log"

# One run: the workload's Markdown into $work/ROUND.SIDE.WORKLOAD.md (and to stdout), its messages into the log.
run() {
    local round=$1 side=$2 w=$3 build out
    [ "$side" = old ] && build=$old || build=$new
    out=$work/$round.$side.$w.md
    echo "== $w, $side build $build (round $round)"
    case $w in
    batching) OPLOG2PG_TEST_BUILD=$build "$new/bench/batching" "$entries" ;;
    inserts) OPLOG2PG_TEST_BUILD=$build "$new/bench/inserts" "${BENCH_INSERTS:-20000}" ;;
    mapped) OPLOG2PG_TEST_BUILD=$build BENCH_MAPPED_REPS=1 \
        "$new/bench/mapped" "${BENCH_MAPPED:-5000}" "${BENCH_ARRAYS:-200}" ;;
    esac 2>"$log/$round.$side.$w.log" | tee "$out"
    echo
}

for round in $(seq 1 "$rounds"); do
    for w in $workloads; do
        if [ $((round % 2)) -eq 1 ]; then
            run "$round" old "$w"
            run "$round" new "$w"
        else
            run "$round" new "$w"
            run "$round" old "$w"
        fi
    done
done

# The figures of one run's Markdown, as "workload<TAB>value" lines: throughput in its unit, and shares of the psql
# \copy rate measured in the same run (the lines that start with "of psql \copy").
figures() {
    case $1 in
    batching) awk -F'|' '/^\| *[0-9]+ *\|/ {
            r = $2 + 0
            printf "batching %4d inserts/update, per-op (entries/s)\t%s\n", r, $3 + 0
            printf "batching %4d inserts/update, batched (entries/s)\t%s\n", r, $4 + 0
            printf "batching %4d inserts/update, batched, of psql \\copy of its rows\t%s\n", r, $7 + 0
        }' "$2" ;;
    inserts) awk -F'|' '
            /^\| psql \\copy/ { copy = $5 + 0 }
            /^\| oplog2pg, tailing/ { tail = $5 + 0 }
            /^\| oplog2pg replay/ { replay = $5 + 0 }
            END {
                printf "inserts, tailing (rows/s)\t%s\n", tail
                if (copy > 0) printf "inserts, tailing, of psql \\copy\t%s\n", tail / copy
                printf "inserts, replay (rows/s)\t%s\n", replay
            }' "$2" ;;
    mapped) awk -F'|' '
            /^### Typed/ { shape = "typed columns" }
            /^### Arrays/ { shape = "arrays of doubles" }
            /^\| oplog2pg, tailing/ { printf "mapped %s, tailing (rows/s)\t%s\n", shape, $4 + 0 }
            /^oplog2pg \/ psql \\copy: \*\*/ {
                v = $0; sub(/^oplog2pg \/ psql \\copy: \*\*/, "", v); sub(/x\*\*.*/, "", v)
                printf "mapped %s, of psql \\copy\t%s\n", shape, v + 0
            }' "$2" ;;
    esac
}

for round in $(seq 1 "$rounds"); do
    for w in $workloads; do
        for side in old new; do
            if ! [ -s "$work/$round.$side.$w.md" ]; then
                echo "compare-builds: the $side build's $w run of round $round printed nothing; see $log" >&2
                exit 1
            fi
            figures "$w" "$work/$round.$side.$w.md" | sed "s/^/$round\t$side\t/"
        done
    done
done >"$work/figures.tsv"

echo "## $new against $old: new/old over $rounds paired runs"
echo
echo "| workload | old, median | new, median | new/old, median | new/old, range |"
echo "|---|---:|---:|---:|---|"
# Per workload (in the order first seen): the pairs' ratios new/old, their median and range, and each side's median.
awk -F'\t' '
    function median(a, n,   i, j, t) {
        for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function fmt(v) { return v >= 100 ? sprintf("%.0f", v) : sprintf("%.2f", v) }
    !($3 in seen) { seen[$3] = 1; order[++k] = $3 }
    { val[$1, $2, $3] = $4; if ($1 > rounds) rounds = $1 }
    END {
        for (i = 1; i <= k; i++) {
            w = order[i]; n = 0; split("", o); split("", nw); split("", r)
            for (round = 1; round <= rounds; round++) {
                if (!(((round, "old", w) in val) && ((round, "new", w) in val))) continue
                a = val[round, "old", w]; b = val[round, "new", w]
                if (a <= 0) continue
                n++; o[n] = a; nw[n] = b; r[n] = b / a
            }
            if (n == 0) { printf "| %s | - | - | - | no pair |\n", w; continue }
            lo = hi = r[1]
            for (j = 2; j <= n; j++) { lo = r[j] < lo ? r[j] : lo; hi = r[j] > hi ? r[j] : hi }
            printf "| %s | %s | %s | **%.2f** | %.2f to %.2f (%d pairs) |\n", w, fmt(median(o, n)), fmt(median(nw, n)),
                median(r, n), lo, hi, n
        }
    }' "$work/figures.tsv"

#!/usr/bin/env bash
# bench/plots.sh RESULTS.md [OUTDIR] — draws the tables that the benchmarks printed (bench/run.sh keeps them in
# build/bench-results.md) as SVG plots with gnuplot, into OUTDIR (default docs/):
#   bench-batching.svg  throughput against the insert:update ratio, batched and per-op mode, from the table whose
#                       header has "inserts per update", "per-op ... (entries/s)" and "batched ... (entries/s)"
#                       (`bench/batching`);
#   bench-latency.svg   the latency distributions of bench/latency.c, from its table "| scenario | samples | min |
#                       p10 | ... | max |": for each scenario, the share of writes visible within a given time.
# Only what the Markdown holds is used, so no benchmark program changes for a plot; a table that is missing leaves
# its plot alone (and says so). The columns are found by their headers, not their places.
set -euo pipefail
cd "$(dirname "$0")/.."
results=${1:?usage: bench/plots.sh RESULTS.md [OUTDIR]}
out=${2:-docs}
command -v gnuplot >/dev/null || { echo "plots: gnuplot is not installed (scripts/deps.sh --bench)" >&2; exit 1; }
[ -r "$results" ] || { echo "plots: cannot read $results" >&2; exit 1; }
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The rows of the first Markdown table whose header line matches all the given awk regexps (case-insensitive),
# as tab-separated cells, header first (the |---| line dropped).
table() {
    awk -v pats="$(printf '%s\n' "$@")" '
        BEGIN { n = split(pats, want, "\n") }
        function cells(line,   out, i, k, c) {
            k = split(line, c, "|"); out = ""
            for (i = 2; i < k; i++) { gsub(/^[ \t]+|[ \t]+$/, "", c[i]); out = out (i > 2 ? "\t" : "") c[i] }
            return out
        }
        !found && /^\|/ {
            ok = 1; l = tolower($0)
            for (i = 1; i <= n; i++) if (want[i] != "" && l !~ want[i]) ok = 0
            if (ok) { found = 1; intable = 1; print cells($0); next }
        }
        intable && /^\|[ :|-]*$/ { next }
        intable && /^\|/ { print cells($0); next }
        intable { exit }
    ' "$results"
}

# The 1-based column of a tab-separated header whose cell matches an awk regexp (case-insensitive); 0 when none.
column() {
    awk -F'\t' -v re="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if (tolower($i) ~ re) { print i; exit } print 0 }' "$1"
}

# ---- throughput against the insert:update ratio -------------------------------------------------------------------
table 'inserts per update' 'per-op[^|]*entries/s' 'batched[^|]*entries/s' >"$work/batching.tsv" || true
if [ -s "$work/batching.tsv" ]; then
    r=$(column "$work/batching.tsv" '^inserts per update')
    p=$(column "$work/batching.tsv" 'per-op[^\t]*entries/s')
    b=$(column "$work/batching.tsv" '^batched[^\t]*entries/s')
    bh=$(awk -F'\t' -v c="$b" 'NR == 1 { print $c }' "$work/batching.tsv")
    # Figures may carry thousands separators ("21 908"): keep the digits and the point.
    awk -F'\t' -v r="$r" -v p="$p" -v b="$b" 'NR > 1 {
        x = $r; y = $p; z = $b; gsub(/[^0-9.]/, "", x); gsub(/[^0-9.]/, "", y); gsub(/[^0-9.]/, "", z)
        if (x != "" && y != "" && z != "") print x, y, z, z / y
    }' "$work/batching.tsv" >"$work/batching.dat"
    gnuplot <<EOF
set terminal svg size 900,540 noenhanced font "sans,13" background rgb "white"
set output "$out/bench-batching.svg"
set title "oplog2pg throughput against the insert:update ratio (bench/batching)"
set xlabel "inserts per update (log scale)"
set ylabel "oplog entries applied per second (log scale)"
set logscale xy
set format y "%.0f"
set xrange [0.7:1500]
set yrange [500:*]
set grid xtics ytics mxtics mytics lc rgb "#dddddd"
set key top left box opaque
plot "$work/batching.dat" using 1:3 with linespoints lw 2 pt 7 ps 1.2 title "$bh", \
     "" using 1:2 with linespoints lw 2 pt 5 ps 1.2 title "per-op mode (one statement and one commit per op)", \
     "" using 1:3:(sprintf("%.1fx", \$4)) with labels offset 0,1.2 notitle
EOF
    echo "plots: $out/bench-batching.svg"
else
    echo "plots: no batching table in $results: $out/bench-batching.svg left as it was" >&2
fi

# ---- latency distributions -----------------------------------------------------------------------------------------
table '^[|] *scenario *[|] *samples *[|] *min *[|]' >"$work/latency.tsv" || true
if [ -s "$work/latency.tsv" ]; then
    # One block per scenario: (latency in ms, percentile), from the columns min (0), pNN (NN) and max (100).
    awk -F'\t' 'NR == 1 {
            for (i = 3; i <= NF; i++) {
                h = tolower($i)
                if (h == "min") pc[i] = 0; else if (h == "max") pc[i] = 100; else if (h ~ /^p[0-9.]+$/) pc[i] = substr(h, 2) + 0
            }
            next
        }
        {
            if (blocks++) printf "\n\n"
            for (i = 3; i <= NF; i++) if (i in pc) { v = $i; gsub(/[^0-9.]/, "", v); if (v != "") print (v > 0.05 ? v : 0.05), pc[i] }
        }' "$work/latency.tsv" >"$work/latency.dat"
    colours=("#1b9e77" "#d95f02" "#7570b3" "#e7298a" "#66a61e" "#a6761d" "#666666" "#1f78b4")
    plot=""
    i=0
    while IFS=$'\t' read -r name samples _; do
        name=${name//\"/\'}
        plot+="${plot:+, }\"$work/latency.dat\" index $i using 1:2 with linespoints lw 2 lc rgb \"${colours[i % 8]}\""
        plot+=" pt $((5 + i % 4)) ps 0.9 title \"$name ($samples samples)\""
        i=$((i + 1))
    done < <(tail -n +2 "$work/latency.tsv")
    gnuplot <<EOF
set terminal svg size 1000,700 noenhanced font "sans,13" background rgb "white"
set output "$out/bench-latency.svg"
set title "oplog2pg: from MongoDB's acknowledgement to the commit in PostgreSQL (bench/latency)"
set xlabel "latency: acknowledgement to NOTIFY received (ms, log scale)"
set ylabel "share of writes visible within that time (percentile, %)"
set logscale x
set yrange [0:102]
set ytics 10
set grid xtics ytics mxtics lc rgb "#dddddd"
set bmargin at screen 0.25
set key at screen 0.5, screen 0.01 center bottom box
# The latency goals: p99 of single inserts beside the stream, all of 10 000 and of 200 000 documents visible.
set arrow 1 from 50, graph 0 to 50, graph 1 nohead dt 2 lc rgb "#888888"
set arrow 2 from 150, graph 0 to 150, graph 1 nohead dt 2 lc rgb "#888888"
set arrow 3 from 2000, graph 0 to 2000, graph 1 nohead dt 2 lc rgb "#888888"
set label 1 "goal: p99 of single inserts\nbeside the stream, 50 ms" at 50, graph 0.55 right offset -0.5,0 font "sans,10"
set label 2 "goal: 10 000\ndocuments, 150 ms" at 150, graph 0.35 left offset 0.5,0 font "sans,10"
set label 3 "goal: 200 000\ndocuments, 2 s" at 2000, graph 0.35 left offset 0.5,0 font "sans,10"
plot $plot
EOF
    echo "plots: $out/bench-latency.svg"
else
    echo "plots: no latency table in $results: $out/bench-latency.svg left as it was" >&2
fi

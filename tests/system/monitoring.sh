#!/usr/bin/env bash
# tests/system/monitoring.sh — checks the Grafana dashboard and the Prometheus rules in contrib/ (make check runs it;
# a few seconds, needs no server).
#
#   1. Every metric and label the dashboard, the rules and the rules' tests use exists: in src/daemon/metrics.c, or in
#      what contrib/prometheus/oplog2pg-margin.sh writes (tests/system/monitoring_names.py). The check is shown to
#      fail on a copy of metrics.c with a metric renamed, and on one with a label renamed.
#   2. promtool check rules, and promtool test rules (each alert fires on series that should fire it, stays silent
#      on series short of it). promtool is the one on PATH, or else the one of Debian's prometheus package, fetched
#      and unpacked into build/tools (not installed); when neither can be had, this step is skipped with a message
#      and recorded in OPLOG2PG_TEST_SKIPS.
#   3. oplog2pg-margin.sh turns `status --json` (a replica set, one without checkpoint, a sharded cluster) into the
#      textfile lines expected, which promtool check metrics accepts.
set -euo pipefail
cd "$(dirname "$0")/../.."

dash=contrib/grafana/oplog2pg.json
rules=contrib/prometheus/oplog2pg-rules.yml
rules_test=contrib/prometheus/oplog2pg-rules.test.yml
margin=contrib/prometheus/oplog2pg-margin.sh
names=tests/system/monitoring_names.py

tmp=$(mktemp -d "${TMPDIR:-/tmp}/oplog2pg-monitoring.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "monitoring test: FAIL: $*" >&2
    exit 1
}
step() { echo "-- $*"; }

# ---- 1. names ------------------------------------------------------------------------------------------------------
step "metric and label names of $dash and $rules against src/daemon/metrics.c"
python3 "$names" src/daemon/metrics.c "$margin" "$dash" "$rules" "$rules_test"

# The check can fail: a metric renamed in metrics.c, then a label renamed.
sed 's/"oplog2pg_lag_seconds"/"oplog2pg_lag_secs"/' src/daemon/metrics.c >"$tmp/renamed.c"
cmp -s src/daemon/metrics.c "$tmp/renamed.c" && fail "metrics.c no longer renders oplog2pg_lag_seconds as expected here"
if python3 "$names" "$tmp/renamed.c" "$margin" "$dash" "$rules" "$rules_test" >"$tmp/out" 2>&1; then
    cat "$tmp/out"
    fail "the name check passed with oplog2pg_lag_seconds renamed in metrics.c"
fi
grep -q "oplog2pg_lag_seconds is not a metric" "$tmp/out" || { cat "$tmp/out"; fail "the name check did not name the renamed metric"; }
sed 's/"Applied operations by kind.", "kind"/"Applied operations by kind.", "op"/' src/daemon/metrics.c >"$tmp/relabel.c"
cmp -s src/daemon/metrics.c "$tmp/relabel.c" && fail "metrics.c no longer labels oplog2pg_ops_applied_total as expected here"
if python3 "$names" "$tmp/relabel.c" "$margin" "$dash" "$rules" "$rules_test" >"$tmp/out" 2>&1; then
    cat "$tmp/out"
    fail "the name check passed with the label kind renamed in metrics.c"
fi
grep -q "label 'kind'" "$tmp/out" || { cat "$tmp/out"; fail "the name check did not name the renamed label"; }

# ---- 2. promtool ---------------------------------------------------------------------------------------------------
# promtool from PATH, else from Debian's prometheus package, unpacked (not installed: installing it would enable a
# Prometheus server) into build/tools once; `apt-get download` needs neither root nor a change to the system.
promtool=$(command -v promtool 2>/dev/null || true)
tools=build/tools
if [ -z "$promtool" ] && [ ! -x "$tools/usr/bin/promtool" ]; then
    step "fetching promtool: apt-get download prometheus, unpacked into $tools"
    mkdir -p "$tools/deb"
    if (cd "$tools/deb" && apt-get download prometheus) >"$tmp/apt" 2>&1; then
        dpkg-deb -x "$(find "$tools/deb" -name 'prometheus_*.deb' | head -n 1)" "$tmp/unpacked" &&
            install -D -m 0755 "$tmp/unpacked/usr/bin/promtool" "$tools/usr/bin/promtool"
        rm -rf "$tools/deb"
    else
        cat "$tmp/apt" >&2
    fi
fi
[ -z "$promtool" ] && [ -x "$tools/usr/bin/promtool" ] && promtool=$tools/usr/bin/promtool
if [ -n "$promtool" ]; then
    step "promtool check rules $rules"
    "$promtool" check rules "$rules"
    step "promtool test rules $rules_test"
    "$promtool" test rules "$rules_test"
else
    msg="monitoring: promtool is missing and Debian's prometheus package could not be fetched (apt-get download prometheus): the rules were not checked by promtool"
    echo "SKIP: $msg" >&2
    if [ -n "${OPLOG2PG_TEST_SKIPS:-}" ]; then echo "$msg" >>"$OPLOG2PG_TEST_SKIPS"; fi
fi

# ---- 3. the margin script ---------------------------------------------------------------------------------------------
step "$margin on recorded status --json outputs"
# A stand-in for oplog2pg that prints the status JSON named by FAKE_STATUS and exits with FAKE_RC.
cat >"$tmp/oplog2pg" <<'EOF'
#!/bin/sh
[ "$3" = status ] && [ "$4" = --json ] || { echo "unexpected arguments: $*" >&2; exit 2; }
cat "$FAKE_STATUS"
exit "${FAKE_RC:-0}"
EOF
chmod +x "$tmp/oplog2pg"
run_margin() { # NAME RC JSON EXPECTED-FILE-NAME EXPECTED-SAMPLES...
    local name=$1 rc=$2 json=$3 file=$4
    shift 4
    mkdir -p "$tmp/out-$name"
    printf '%s\n' "$json" >"$tmp/$name.json"
    FAKE_STATUS=$tmp/$name.json FAKE_RC=$rc OPLOG2PG=$tmp/oplog2pg OPLOG2PG_CONFIG=/nonexistent.ini \
        sh "$margin" "$tmp/out-$name" || fail "$margin failed on the $name status"
    [ -f "$tmp/out-$name/$file" ] || fail "$margin did not write $file for the $name status: $(ls "$tmp/out-$name")"
    grep -v '^#' "$tmp/out-$name/$file" >"$tmp/$name.got"
    printf '%s\n' "$@" >"$tmp/$name.want"
    diff "$tmp/$name.want" "$tmp/$name.got" || fail "$margin wrote other samples for the $name status (< expected)"
    [ -e "$tmp/out-$name/$file.tmp" ] && fail "$margin left its temporary file"
    if [ -n "$promtool" ]; then
        "$promtool" check metrics <"$tmp/out-$name/$file" || fail "promtool check metrics rejects what $margin wrote"
    fi
}
run_margin replica 0 '{"service": "main", "checkpoint": {"position": "1764000000:1"}, "lag_seconds": 0,
  "oplog": {"oldest": "1763900000:1", "newest": "1764000100:1", "window_hours": 27.81, "margin_hours": 27.78},
  "copy": null}' oplog2pg-main.prom 'oplog2pg_oplog_margin_seconds{service="main"} 100008'
# MongoDB unreachable: status exits 1 and prints "oplog": null.
run_margin unreachable 1 '{"service": "odd \"name\"/x", "checkpoint": null, "lag_seconds": null, "oplog": null}' \
    oplog2pg-odd__name__x.prom 'oplog2pg_oplog_margin_seconds{service="odd \"name\"/x"} -1'
run_margin sharded 0 '{"service": "sh", "checkpoint": null, "oplog": null, "shards": [
  {"shard": "shard0", "oplog": {"oldest": "1:1", "newest": "2:1", "window_hours": 20.5, "margin_hours": 19.25}, "removed": false},
  {"shard": "shard1", "oplog": null, "removed": false},
  {"shard": "gone", "oplog": {"margin_hours": 1}, "removed": true}]}' oplog2pg-sh.prom \
    'oplog2pg_oplog_margin_seconds{service="sh",shard="shard0"} 69300' \
    'oplog2pg_oplog_margin_seconds{service="sh",shard="shard1"} -1'

echo "monitoring test: ok"

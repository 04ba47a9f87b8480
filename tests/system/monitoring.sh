#!/usr/bin/env bash
# tests/system/monitoring.sh — checks the Grafana dashboard and the Prometheus rules in contrib/ (make check runs it;
# a few seconds, needs no server).
#
#   1. Every metric and label the dashboard, the rules and the rules' tests use exists in src/daemon/metrics.c
#      (tests/system/monitoring_names.py). The check is shown to fail on a copy of metrics.c with a metric renamed,
#      and on one with a label renamed.
#   2. promtool check rules, and promtool test rules (each alert fires on series that should fire it, stays silent
#      on series short of it). promtool is the one on PATH, or else the one of Debian's prometheus package, fetched
#      and unpacked into build/tools (not installed); when neither can be had, this step is skipped with a message
#      and recorded in OPLOG2PG_TEST_SKIPS.
set -euo pipefail
cd "$(dirname "$0")/../.."

dash=contrib/grafana/oplog2pg.json
rules=contrib/prometheus/oplog2pg-rules.yml
rules_test=contrib/prometheus/oplog2pg-rules.test.yml
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
python3 "$names" src/daemon/metrics.c "$dash" "$rules" "$rules_test"

# The check can fail: a metric renamed in metrics.c, then a label renamed.
sed 's/"oplog2pg_lag_seconds"/"oplog2pg_lag_secs"/' src/daemon/metrics.c >"$tmp/renamed.c"
cmp -s src/daemon/metrics.c "$tmp/renamed.c" && fail "metrics.c no longer renders oplog2pg_lag_seconds as expected here"
if python3 "$names" "$tmp/renamed.c" "$dash" "$rules" "$rules_test" >"$tmp/out" 2>&1; then
    cat "$tmp/out"
    fail "the name check passed with oplog2pg_lag_seconds renamed in metrics.c"
fi
grep -q "oplog2pg_lag_seconds is not a metric" "$tmp/out" || { cat "$tmp/out"; fail "the name check did not name the renamed metric"; }
sed 's/"Applied operations by kind.", "kind"/"Applied operations by kind.", "op"/' src/daemon/metrics.c >"$tmp/relabel.c"
cmp -s src/daemon/metrics.c "$tmp/relabel.c" && fail "metrics.c no longer labels oplog2pg_ops_applied_total as expected here"
if python3 "$names" "$tmp/relabel.c" "$dash" "$rules" "$rules_test" >"$tmp/out" 2>&1; then
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

echo "monitoring test: ok"

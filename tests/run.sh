#!/usr/bin/env bash
# tests/run.sh BUILD — everything `make check` runs, in order, from the repository root.
#
#   1. the one-way layer rule of src/ (scripts/check-layers.sh), then the Check unit suites (no servers needed);
#   2. make install / uninstall (tests/system/install.sh), the Grafana dashboard and Prometheus rules in contrib/
#      (tests/system/monitoring.sh: metric names against src/daemon/metrics.c, promtool);
#   3. the integration tests, in parallel shards, each against its own throwaway PostgreSQL (scripts/with-pg.sh) and
#      mongosim (tests/integration/shards.sh) — or in one run against a real replica set when MONGO_URI is set (see
#      tests/integration/run.sh).
# Any failure fails the whole run; nothing is skipped silently: a test or pass that cannot run here records itself in
# the file named by OPLOG2PG_TEST_SKIPS (tests/lib/skip.h), and the run ends with that list.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
skips=$(mktemp "${TMPDIR:-/tmp}/oplog2pg-skips.XXXXXX")
trap 'rm -f "$skips"' EXIT
export OPLOG2PG_TEST_SKIPS=$skips
# Under AddressSanitizer memory figures are the sanitizer's: tests that measure memory skip.
case "$build" in *san*) export OPLOG2PG_TEST_SANITIZE=1 ;; esac

echo "== layers (scripts/check-layers.sh)"
scripts/check-layers.sh

echo "== unit suites"
CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-30} "$build/unit_tests"

echo "== make install / uninstall (tests/system/install.sh)"
tests/system/install.sh "$build"

echo "== dashboard and alert rules (tests/system/monitoring.sh)"
tests/system/monitoring.sh

echo "== integration tests"
tests/integration/shards.sh "$build"

if [ -s "$skips" ]; then
    echo "== skipped in this run: $(wc -l <"$skips") (counted apart from the passes above)"
    sed 's/^/  SKIP /' "$skips"
else
    echo "== nothing skipped"
fi

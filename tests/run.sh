#!/usr/bin/env bash
# tests/run.sh BUILD — everything `make check` runs, in order, from the repository root.
#
#   1. the one-way layer rule of src/ (scripts/check-layers.sh), then the Check unit suites (no servers needed);
#   2. the integration tests, against a throwaway PostgreSQL (scripts/with-pg.sh) and mongosim — or a real replica
#      set when MONGO_URI is set (see tests/integration/run.sh).
# Any failure fails the whole run; nothing is skipped silently.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
# Under AddressSanitizer memory figures are the sanitizer's: tests that measure memory say SKIP.
case "$build" in *san*) export OPLOG2PG_TEST_SANITIZE=1 ;; esac

echo "== layers (scripts/check-layers.sh)"
scripts/check-layers.sh

echo "== unit suites"
CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-30} "$build/unit_tests"

echo "== make install / uninstall (tests/system/install.sh)"
tests/system/install.sh "$build"

echo "== integration tests"
scripts/with-pg.sh tests/integration/run.sh "$build"

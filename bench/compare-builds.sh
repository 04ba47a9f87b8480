#!/usr/bin/env bash
# bench/compare-builds.sh OLD_BUILD NEW_BUILD [ENTRIES] [ROUNDS] — the batching table for two builds of oplog2pg,
# alternately (old, new, old, new, ...), on one throwaway PostgreSQL: a side-by-side check that a change did not
# slow the apply loop. The driver is NEW_BUILD's bench/batching; each run uses the daemon and mongosim of its
# own build (OPLOG2PG_TEST_BUILD). Build the old one from a worktree, e.g.
#     git worktree add /tmp/old COMMIT && make -C /tmp/old BUILD=build all
#     bench/compare-builds.sh /tmp/old/build build
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench/compare-builds.sh OLD_BUILD NEW_BUILD [ENTRIES] [ROUNDS]}
new=${2:?usage: bench/compare-builds.sh OLD_BUILD NEW_BUILD [ENTRIES] [ROUNDS]}
entries=${3:-20000}
rounds=${4:-2}

if [ -z "${OPLOG2PG_TEST_PG:-}" ]; then
    exec scripts/with-pg.sh "$0" "$@"
fi
for round in $(seq 1 "$rounds"); do
    for b in "$old" "$new"; do
        echo "== $b (round $round)"
        OPLOG2PG_TEST_BUILD=$b "$new/bench/batching" "$entries" 2>/dev/null
    done
done

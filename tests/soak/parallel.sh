#!/usr/bin/env bash
# tests/soak/parallel.sh BUILD — the fault soak's phases at the same time (`make soak SOAK_PARALLEL=1`).
#
# Each phase runs as its own tests/soak/soak.py (SOAK_PHASES=rs, cs or sh) under its own scripts/with-pg.sh, so each
# has a PostgreSQL of its own: one phase's PostgreSQL restarts and outage do not reach the others. SOAK_OPS and
# SOAK_KILLS are shared out as soak.py shares them (rs a half, cs and sh a quarter each); SOAK_SEED (default: the
# clock) seeds rs, and the next two numbers cs and sh. The logs go to SOAK_DIR/rs, /cs and /sh, each phase's output
# to SOAK_DIR/PHASE.out. Exit status: 0 when every phase passed, else the first failing phase's.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
ops=${SOAK_OPS:-1000000}
kills=${SOAK_KILLS:-100}
seed=${SOAK_SEED:-$(date +%s)}
dir=${SOAK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/oplog2pg-soak.XXXXXX")}
mkdir -p "$dir"
echo "fault soak, phases at once: SOAK_OPS=$ops SOAK_KILLS=$kills SOAK_SEED=$seed; logs in $dir"

phases=(rs cs sh)
share_ops=($((ops / 2)) $((ops / 4)) $((ops - ops / 2 - ops / 4)))
share_kills=($((kills / 2)) $((kills / 4)) $((kills - kills / 2 - kills / 4)))
pids=()
for i in 0 1 2; do
    p=${phases[$i]}
    SOAK_PHASES=$p SOAK_OPS=${share_ops[$i]} SOAK_KILLS=${share_kills[$i]} SOAK_SEED=$((seed + i)) \
        SOAK_DIR="$dir/$p" scripts/with-pg.sh /usr/bin/python3 tests/soak/soak.py "$build" >"$dir/$p.out" 2>&1 &
    pids+=($!)
done
rc=0
for i in 0 1 2; do
    wait "${pids[$i]}"
    r=$?
    echo "== phase ${phases[$i]}: exit $r ($dir/${phases[$i]}.out)"
    sed -n '/^{/,/^}/p' "$dir/${phases[$i]}.out"
    [ $rc -ne 0 ] || rc=$r
done
exit $rc

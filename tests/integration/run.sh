#!/usr/bin/env bash
# tests/integration/run.sh BUILD — integration tests; run inside scripts/with-pg.sh (needs OPLOG2PG_TEST_PG).
#
# Starts mongosim on a free port and points MONGO_URI at it, unless MONGO_URI is already set: then the same tests run
# against that real replica set, and the cases that need mongosim's test commands skip: the runner counts them apart
# from the passes and lists each with its reason (tests/lib/skip.h).
# Runs the Check integration suites, then the pymongo compatibility script and the valgrind pass (only the one suite
# with CK_RUN_SUITE=NAME). mongosim is stopped on any exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
: "${OPLOG2PG_TEST_PG:?run me through scripts/with-pg.sh}"

sim_pid=""
workdir=$(mktemp -d "${TMPDIR:-/tmp}/oplog2pg-it.XXXXXX")
cleanup() {
    local rc=$?
    [ -n "$sim_pid" ] && kill "$sim_pid" 2>/dev/null && wait "$sim_pid" 2>/dev/null
    rm -rf "$workdir"
    exit $rc
}
trap cleanup EXIT

if [ -z "${MONGO_URI:-}" ]; then
    coproc SIM { exec "$build/mongosim" --port 0 2>"$workdir/mongosim.log"; }
    sim_pid=$SIM_PID
    read -r -t 10 port <&"${SIM[0]}" || { echo "mongosim did not start:" >&2; cat "$workdir/mongosim.log" >&2; exit 1; }
    export MONGO_URI="mongodb://127.0.0.1:$port/?replicaSet=rs0"
    export OPLOG2PG_TEST_SIM=1
    echo "mongosim on port $port"
else
    echo "using the replica set at MONGO_URI (the cases that need mongosim skip)"
fi
export OPLOG2PG_TEST_BUILD=$build
# libmongoc's shared-memory counters leave /dev/shm/mongoc-PID behind every kill -9 (the daemon turns them off too).
export MONGOC_DISABLE_SHM=1
# Tests make their folders under TMPDIR: inside $workdir, they go with it even when a test fails half-way.
export TMPDIR=$workdir

CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-120} "$build/integration_tests"
# CK_RUN_SUITE=NAME (Check's own variable) runs one suite, for a developer at work: then nothing else runs.
[ -n "${CK_RUN_SUITE:-}" ] && { echo "CK_RUN_SUITE=$CK_RUN_SUITE: pymongo and valgrind passes not run"; exit 0; }

# The same suites again, reading a change stream instead of the oplog (tests/lib/daemonenv.h: the daemons they start
# get [mongodb] source = change_stream): updates from updateDescription, then as the raw $v:2 diff. Under the
# sanitizers (a build named *san*) a shorter list: the change-stream suites themselves ran above.
stream_pass() { # UPDATES SUITE[:CASE]...
    local updates=$1 spec
    shift
    for spec in "$@"; do
        echo "== through a change stream (change_stream_updates = $updates): $spec"
        local only=()
        [ "${spec#*:}" != "$spec" ] && only=("CK_RUN_CASE=${spec#*:}")
        env OPLOG2PG_TEST_SOURCE=change_stream OPLOG2PG_TEST_STREAM_UPDATES="$updates" CK_RUN_SUITE="${spec%%:*}" \
            "${only[@]}" CK_DEFAULT_TIMEOUT="${CK_DEFAULT_TIMEOUT:-120}" "$build/integration_tests"
    done
}
case "$build" in
*san*)
    stream_pass description mapped_vectors ddl driver_txn
    ;;
*)
    stream_pass description replication:end_to_end replication:import ddl driver_txn lossless:lossless map_changes \
        mapped_vectors copy_ddl txn:shapes
    stream_pass raw mapped_vectors typed_updates ddl txn:shapes
    ;;
esac

echo "== pymongo compatibility"
/usr/bin/python3 tests/compat/pymongo_compat.py "$MONGO_URI"
if [ -n "${OPLOG2PG_TEST_SIM:-}" ]; then
    echo "== pymongo compatibility, sharded (mongosim --shards 2)"
    /usr/bin/python3 tests/compat/pymongo_compat.py --sharded "$build/mongosim"
fi

echo "== Node.js driver compatibility"
[ -d tests/compat/node_modules/mongodb ] || { echo "tests/compat/node_modules is missing: run scripts/deps.sh" >&2; exit 1; }
node_bin=node # scripts/deps.sh puts a Node.js 20 here when the machine's is older
[ -x tests/compat/.node/node_modules/.bin/node ] && node_bin=tests/compat/.node/node_modules/.bin/node
"$node_bin" tests/compat/node_compat.mjs "$MONGO_URI"
if [ -n "${OPLOG2PG_TEST_SIM:-}" ]; then
    echo "== Node.js driver compatibility, sharded (mongosim --shards 2)"
    "$node_bin" tests/compat/node_compat_sharded.mjs "$build/mongosim"
fi

echo "== the daemon under valgrind"
tests/integration/valgrind.sh "$build"

#!/usr/bin/env bash
# tests/integration/run.sh BUILD [--jobs | --queue FILE | --job JOB] — integration tests; run inside
# scripts/with-pg.sh (needs OPLOG2PG_TEST_PG).
#
# Starts mongosim on a free port and points MONGO_URI at it, unless MONGO_URI is already set: then the same tests run
# against that real replica set, and the cases that need mongosim's test commands skip: the runner counts them apart
# from the passes and lists each with its reason (tests/lib/skip.h).
# Runs the Check integration suites, then the change-stream passes, the pymongo and Node.js compatibility scripts and
# the valgrind pass (only the one suite with CK_RUN_SUITE=NAME). mongosim is stopped on any exit.
#
# The same work is also cut into jobs, for tests/integration/shards.sh, which runs them in parallel shards, each on
# its own PostgreSQL and mongosim:
#   --jobs        prints every job, one a line (needs no server): suite:NAME for each Check suite, then the rest
#   --queue FILE  starts mongosim, then takes jobs from the top of FILE (shared with other shards, under FILE.lock)
#                 until it is empty; runs every job even after a failure; prints "[shard] JOB: ok|FAILED (N s)" for
#                 each to its output and to descriptor 3 when that is open; exits 1 when any job failed
#   --job JOB     one job, against the PostgreSQL and MONGO_URI already set (what --queue runs for each)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
mode=${2:-all}

# The change-stream passes: the same suites again, reading a change stream instead of the oplog (tests/lib/daemonenv.h:
# the daemons they start get [mongodb] source = change_stream): updates from updateDescription, then as the raw $v:2
# diff. Under the sanitizers (a build named *san*) a shorter list: the change-stream suites themselves run anyway.
stream_specs() { # prints UPDATES:SUITE[:CASE], one a line
    case "$build" in
    *san*) printf 'description:%s\n' mapped_vectors ddl ;;
    *)
        printf 'description:%s\n' replication:end_to_end replication:import ddl driver_txn lossless:lossless \
            map_changes mapped_vectors copy_ddl txn:shapes
        printf 'raw:%s\n' mapped_vectors typed_updates ddl txn:shapes
        ;;
    esac
}

# Every job after the Check suites, in the order a single run takes them. The sharded compatibility scripts start their
# own mongosim, so they run only where mongosim is (not against a real replica set).
rest_jobs() {
    stream_specs | sed 's/^/stream:/'
    echo pymongo
    [ -n "${OPLOG2PG_TEST_SIM:-}" ] && echo pymongo:sharded
    echo node
    [ -n "${OPLOG2PG_TEST_SIM:-}" ] && echo node:sharded
    echo valgrind
}

# The Check suites' names, from their suite_create("NAME") (one in each tests/integration/*.c that defines a suite:
# checked against the runner's generated list, so that no suite is left out of a sharded run).
suite_names() {
    local names n_gen
    names=$(sed -n 's/.*suite_create("\([a-z0-9_]*\)").*/\1/p' tests/integration/*.c)
    n_gen=$(grep -c '^SUITE(' "$build/gen/integration_suites.h")
    if [ "$(printf '%s\n' "$names" | grep -c .)" != "$n_gen" ]; then
        echo "run.sh: tests/integration/*.c names $(printf '%s\n' "$names" | grep -c .) suites (suite_create(\"...\"))" \
            "but $build/gen/integration_suites.h lists $n_gen: give each suite one literal name" >&2
        return 1
    fi
    printf '%s\n' "$names"
}

# One job; its output goes to stdout and stderr. Any failure ends it with a non-zero status.
run_job() { # JOB
    local job=$1
    case "$job" in
    checks) # every Check suite in one runner (or the one CK_RUN_SUITE names)
        CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-120} "$build/integration_tests"
        ;;
    suite:*)
        echo "== suite ${job#suite:}"
        local out
        out=$(mktemp "${TMPDIR:-/tmp}/oplog2pg-suite.XXXXXX")
        env CK_RUN_SUITE="${job#suite:}" CK_DEFAULT_TIMEOUT="${CK_DEFAULT_TIMEOUT:-120}" "$build/integration_tests" \
            | tee "$out"
        # A name that matches no suite runs nothing: that is a failure, never an empty pass.
        if grep -q '%: Checks: 0,' "$out"; then
            echo "run.sh: suite ${job#suite:} ran no test" >&2
            return 1
        fi
        ;;
    stream:*)
        local spec=${job#stream:}
        local updates=${spec%%:*}
        spec=${spec#*:}
        echo "== through a change stream (change_stream_updates = $updates): $spec"
        local only=()
        [ "${spec#*:}" != "$spec" ] && only=("CK_RUN_CASE=${spec#*:}")
        env OPLOG2PG_TEST_SOURCE=change_stream OPLOG2PG_TEST_STREAM_UPDATES="$updates" CK_RUN_SUITE="${spec%%:*}" \
            "${only[@]}" CK_DEFAULT_TIMEOUT="${CK_DEFAULT_TIMEOUT:-120}" "$build/integration_tests"
        ;;
    pymongo)
        echo "== pymongo compatibility"
        /usr/bin/python3 tests/compat/pymongo_compat.py "$MONGO_URI"
        ;;
    pymongo:sharded)
        echo "== pymongo compatibility, sharded (mongosim --shards 2)"
        /usr/bin/python3 tests/compat/pymongo_compat.py --sharded "$build/mongosim"
        ;;
    node | node:sharded)
        [ -d tests/compat/node_modules/mongodb ] ||
            { echo "tests/compat/node_modules is missing: run scripts/deps.sh" >&2; return 1; }
        local node_bin=node # scripts/deps.sh puts a Node.js 20 here when the machine's is older
        [ -x tests/compat/.node/node_modules/.bin/node ] && node_bin=tests/compat/.node/node_modules/.bin/node
        if [ "$job" = node ]; then
            echo "== Node.js driver compatibility"
            "$node_bin" tests/compat/node_compat.mjs "$MONGO_URI"
        else
            echo "== Node.js driver compatibility, sharded (mongosim --shards 2)"
            "$node_bin" tests/compat/node_compat_sharded.mjs "$build/mongosim"
        fi
        ;;
    valgrind)
        echo "== the daemon under valgrind"
        tests/integration/valgrind.sh "$build"
        ;;
    *)
        echo "run.sh: no job named '$job'" >&2
        return 1
        ;;
    esac
}

case "$mode" in
--jobs)
    # as shards.sh runs them: against mongosim
    suite_names | sed 's/^/suite:/'
    OPLOG2PG_TEST_SIM=1 rest_jobs
    exit 0
    ;;
--job)
    : "${OPLOG2PG_TEST_PG:?run me through scripts/with-pg.sh}" "${MONGO_URI:?--job needs MONGO_URI}"
    run_job "${3:?--job JOB}"
    exit
    ;;
--queue) queue=${3:?--queue FILE} ;;
all) ;;
*) echo "usage: $0 BUILD [--jobs | --queue FILE | --job JOB]" >&2; exit 2 ;;
esac
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

if [ "$mode" = --queue ]; then
    shard=${OPLOG2PG_TEST_SHARD:-shard}
    failed=0
    while :; do
        # the first line of the queue, removed under the lock that every shard takes
        job=$({ flock 9 && head -n 1 "$queue" && sed -i 1d "$queue"; } 9>"$queue.lock")
        [ -n "$job" ] || break
        start=$SECONDS
        if "$0" "$build" --job "$job"; then result=ok; else result=FAILED; failed=1; fi
        line="[$shard] $job: $result ($((SECONDS - start)) s)"
        echo "$line"
        { echo "$line" >&3; } 2>/dev/null || true
    done
    exit $failed
fi

run_job checks
# CK_RUN_SUITE=NAME (Check's own variable) runs one suite, for a developer at work: then nothing else runs.
[ -n "${CK_RUN_SUITE:-}" ] && { echo "CK_RUN_SUITE=$CK_RUN_SUITE: stream, pymongo, Node.js and valgrind passes not run"; exit 0; }
for job in $(rest_jobs); do
    run_job "$job"
done

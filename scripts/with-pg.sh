#!/usr/bin/env bash
# scripts/with-pg.sh — run a command against a throwaway PostgreSQL cluster, then remove the cluster.
#
#   scripts/with-pg.sh COMMAND [ARGS...]
#
# initdb into a fresh temporary directory (as the unprivileged user `nobody` when run as root, since PostgreSQL
# refuses to run as root), start it on a Unix socket in that directory and a free TCP port on 127.0.0.1, with fsync
# left on, then run COMMAND with PGHOST, PGPORT, PGUSER, PGDATABASE and OPLOG2PG_TEST_PG (a libpq conninfo) set.
# The cluster is stopped and its directory removed when COMMAND ends, whether it passed, failed or was interrupted.
# The exit status is COMMAND's. Set KEEP_PG=1 to keep the directory for a post-mortem.
# WITH_PG_OPTS adds server settings to the command line, e.g. WITH_PG_OPTS="-c max_locks_per_transaction=256".
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }

bindir=""
for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$d/initdb" ] && { bindir=$d; break; }
done
[ -n "$bindir" ] || bindir=$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)")
[ -x "$bindir/initdb" ] || { echo "with-pg: no PostgreSQL server found (run scripts/deps.sh)" >&2; exit 1; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/oplog2pg-pg.XXXXXX")
as_owner=()
if [ "$(id -u)" -eq 0 ]; then
    chown nobody: "$dir"
    chmod 755 "$dir"
    as_owner=(runuser -u nobody --)
fi

cleanup() {
    local rc=$?
    if [ -f "$dir/data/postmaster.pid" ]; then
        "${as_owner[@]}" "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    if [ "${KEEP_PG:-0}" = 1 ]; then
        echo "with-pg: kept $dir" >&2
    else
        rm -rf "$dir"
    fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

"${as_owner[@]}" "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
    >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }

started=0
for _ in 1 2 3 4 5; do
    port=$(free_port)
    pg_opts="-c port=$port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$dir -c fsync=on \
-c max_connections=60 -c shared_buffers=128MB -c max_wal_size=2GB ${WITH_PG_OPTS:-}"
    if "${as_owner[@]}" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
        -o "$pg_opts" start >/dev/null 2>&1; then
        started=1
        break
    fi
done
[ $started = 1 ] || { echo "with-pg: PostgreSQL did not start:" >&2; tail -n 20 "$dir/postgres.log" >&2; exit 1; }

export PGHOST=$dir PGPORT=$port PGUSER=postgres PGDATABASE=postgres
export OPLOG2PG_TEST_PG="host=$dir port=$port user=postgres dbname=postgres"
export OPLOG2PG_TEST_PG_BINDIR=$bindir
# What a test needs to stop and start this cluster itself (the fault soak, tests/soak/soak.py): its data directory,
# log, server options, and the user pg_ctl must run as (empty: the current one).
export OPLOG2PG_TEST_PG_DATA=$dir/data OPLOG2PG_TEST_PG_LOG=$dir/postgres.log OPLOG2PG_TEST_PG_OPTS=$pg_opts
export OPLOG2PG_TEST_PG_RUNAS=${as_owner[2]:-}
"$@"

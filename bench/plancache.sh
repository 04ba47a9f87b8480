#!/usr/bin/env bash
# bench/plancache.sh [TABLES [STATEMENTS]] — what prepared statements held by a session cost the tables it makes
# (docs/benchmarks.md, "Prepared statements and many tables"). Run inside scripts/with-pg.sh.
#
# PostgreSQL visits every plan a backend has cached for each cache invalidation it processes, and CREATE TABLE sends
# several. This makes TABLES tables (default 1000) through oplog2pg.ensure_table, 250 to a transaction as the daemon's
# groups do, in two psql sessions: one holding no prepared statements, one holding STATEMENTS (default 4000) prepared
# upserts and deletes over 2 000 other tables, as a daemon that prepared statements for every table it wrote would.
# Prints the seconds each took; nothing is asserted. Its tables stay in the throwaway cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OPLOG2PG_TEST_PG:?run me through scripts/with-pg.sh}"
tables=${1:-1000}
stmts=${2:-4000}
work=$(mktemp -d "${TMPDIR:-/tmp}/oplog2pg-plancache.XXXXXX")
trap 'rm -rf "$work"' EXIT
psql() { command psql -X -q -v ON_ERROR_STOP=1 "$@"; }

psql -f src/sink/schema.sql >/dev/null
psql -c "DROP SCHEMA IF EXISTS plancache_pre CASCADE" -c "CREATE SCHEMA plancache_pre" >/dev/null 2>&1
for i in $(seq 0 1999); do
    echo "CREATE TABLE plancache_pre.c$i (_id text COLLATE \"C\" PRIMARY KEY, doc jsonb NOT NULL);"
done | psql >/dev/null

for held in 0 "$stmts"; do
    schema=plancache_$held
    {
        for ((i = 0; i < held / 2; i++)); do
            t=$((i % 2000))
            echo "PREPARE i$i(text, jsonb) AS INSERT INTO plancache_pre.c$t VALUES (\$1, \$2)" \
                 "ON CONFLICT (_id) DO UPDATE SET doc = excluded.doc;"
            echo "PREPARE d$i(text) AS DELETE FROM plancache_pre.c$t WHERE _id = \$1; EXECUTE d$i('none');"
        done
        echo "SELECT 'start', clock_timestamp();"
        for ((i = 0; i < tables; i++)); do
            [ $((i % 250)) = 0 ] && echo "BEGIN;"
            echo "SELECT oplog2pg.ensure_table('plancache', 'db', 'c$i', '$schema', 'c$i');"
            [ $((i % 250)) = 249 ] || [ $((i + 1)) = "$tables" ] && echo "COMMIT;"
        done
        echo "SELECT 'end', clock_timestamp();"
    } >"$work/run.sql"
    psql -c CHECKPOINT
    psql -t -A -F ' ' -f "$work/run.sql" | awk -v held="$held" -v n="$tables" '
        $1 == "start" { split($3, a, ":"); s = a[1] * 3600 + a[2] * 60 + a[3] }
        $1 == "end"   { split($3, a, ":"); e = a[1] * 3600 + a[2] * 60 + a[3] }
        END { printf "%d tables made by oplog2pg.ensure_table, %d prepared statements held: %.2f s (%.2f ms each)\n",
              n, held, e - s, (e - s) * 1000 / n }'
done

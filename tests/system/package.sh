#!/usr/bin/env bash
# tests/system/package.sh BUILD — builds the Debian package and checks it on this machine, the way an administrator
# uses it (`make package-check`; root only; not part of `make check`: it installs into the running system).
#
#   1. Installs the tools it needs when missing (dpkg-dev, debhelper, lintian, fakeroot, the Build-Depends), as
#      scripts/deps.sh does; then builds `dpkg-buildpackage -us -uc -b` in a copy of the tree (so the .deb and its
#      .changes land in a temporary folder, and the worktree's build/ is left alone).
#   2. lintian: no tag of any level (error to pedantic) apart from those debian/oplog2pg.lintian-overrides justifies.
#   3. The .deb's contents: binary, unit with the packaged paths, sysusers file, man pages, docs, the conffile; no
#      mongosim, no benchmarks.
#   4. apt-get install of the .deb: the user oplog2pg exists, the configuration is root:oplog2pg 0640, the unit is
#      neither enabled nor started, `systemd-analyze verify` passes on the installed unit without a warning.
#   5. As the user oplog2pg: `oplog2pg --version`, then `oplog2pg check` (default -c path: the conffile, edited to
#      point at a throwaway PostgreSQL and a mongosim), and `oplog2pg --import-only run` to give PostgreSQL data
#      of the daemon's own (its schema, a replicated table) beside a table of the user's.
#   6. apt-get remove: the program goes, the configuration stays; apt-get purge: the configuration, its folder and
#      its statoverride go, the user stays, and PostgreSQL holds exactly what it held before (a digest of every
#      table, the daemon's included).
# A package of oplog2pg already installed, or an /etc/oplog2pg not from this test, stops it before it changes anything.
# Exits non-zero at the first failure, saying what was expected.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}

fail() {
    echo "package test: FAIL: $*" >&2
    exit 1
}
step() { echo "-- $*"; }

[ "$(id -u)" -eq 0 ] || fail "run as root: it installs and purges the package on this machine"
[ -x "$build/mongosim" ] || fail "$build/mongosim is missing (make $build/mongosim)"

# ---- 0. refuse to touch an existing installation -------------------------------------------------------------------
status=$(dpkg-query -W -f='${db:Status-Status}' oplog2pg 2>/dev/null || true)
case $status in "" | not-installed) ;; *) fail "the package oplog2pg is on this machine ($status): remove it first" ;; esac
[ -e /etc/oplog2pg ] && fail "/etc/oplog2pg exists (a make install?): the package would take it over; move it away"

# ---- 1. tools and build ----------------------------------------------------------------------------------------------
# Whatever debian/control's Build-Depends name (the libraries are those scripts/deps.sh installs), and what builds
# and checks a package.
mapfile -t build_deps < <(sed -n '/^Build-Depends:/,/^[A-Z]/p' debian/control | sed -e 's/^Build-Depends://' -e '/^[A-Z]/d' |
    tr ',' '\n' | sed -e 's/([^)]*)//g' -e 's/[[:space:]]//g' -e '/^$/d' -e 's/debhelper-compat/debhelper/')
[ ${#build_deps[@]} -ge 5 ] || fail "could not read Build-Depends from debian/control"
want=(dpkg-dev build-essential fakeroot lintian systemd postgresql python3-pymongo "${build_deps[@]}")
missing=()
for p in "${want[@]}"; do
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" = installed ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    step "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The rest runs against a throwaway PostgreSQL: re-enter this script under scripts/with-pg.sh.
if [ -z "${OPLOG2PG_TEST_PG:-}" ]; then
    exec scripts/with-pg.sh "$0" "$@"
fi

tmp=$(mktemp -d /tmp/oplog2pg-package-test.XXXXXX)
chmod 0755 "$tmp"
sim_pid="" installed_here=0
cleanup() {
    local rc=$?
    [ -n "$sim_pid" ] && kill "$sim_pid" 2>/dev/null && wait "$sim_pid" 2>/dev/null
    # A failure between install and purge must not leave the package behind.
    if [ "$installed_here" = 1 ]; then
        echo "package test: purging the package this test installed" >&2
        DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq oplog2pg >/dev/null 2>&1 || true
    fi
    rm -rf "$tmp"
    exit $rc
}
trap cleanup EXIT

version=$(cat VERSION)
arch=$(dpkg --print-architecture)
deb=$tmp/oplog2pg_${version}_${arch}.deb

step "dpkg-buildpackage -us -uc -b (in a copy of the tree)"
mkdir "$tmp/src"
# The files git knows of, and new ones not ignored: the tree as it would be committed, without build/.
git ls-files -co --exclude-standard -z | tar -c --null -T - | tar -x -C "$tmp/src"
start=$(date +%s)
(cd "$tmp/src" && dpkg-buildpackage -us -uc -b) >"$tmp/build.log" 2>&1 ||
    { tail -n 40 "$tmp/build.log"; fail "dpkg-buildpackage failed (the lines above)"; }
echo "   built in $(($(date +%s) - start)) s"
[ -f "$deb" ] || fail "expected $(basename "$deb"), found: $(cd "$tmp" && ls ./*.deb)"
# Only the daemon is built: no test program, no simulator, no benchmark, and no test run.
built=$(cd "$tmp/src/debian/build" && find . -maxdepth 2 -type f -executable | sed 's|^\./||' | sort | tr '\n' ' ')
[ "$built" = "oplog2pg " ] || fail "the package build made these programs: $built(expected oplog2pg alone)"
grep -qE '(unit|integration)_tests|tests/run\.sh|with-pg' "$tmp/build.log" && fail "the package build ran tests"
grep -q -- "-D_FORTIFY_SOURCE=2" "$tmp/build.log" || fail "the build did not use dpkg-buildflags' CPPFLAGS"

# ---- 2. lintian -------------------------------------------------------------------------------------------------------
step "lintian --pedantic (every level fails the test, overrides aside)"
if ! lintian --allow-root -E -I --pedantic --fail-on error,warning,info,pedantic \
    "$tmp/oplog2pg_${version}_${arch}.changes" >"$tmp/lintian" 2>&1 || [ -s "$tmp/lintian" ]; then
    cat "$tmp/lintian"
    fail "lintian reports the tags above (fix them, or justify each in debian/oplog2pg.lintian-overrides)"
fi

# ---- 3. contents --------------------------------------------------------------------------------------------------------
step "the package's contents"
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' >"$tmp/contents"
for f in /usr/bin/oplog2pg /lib/systemd/system/oplog2pg.service /usr/lib/sysusers.d/oplog2pg.conf \
    /usr/share/man/man8/oplog2pg.8.gz /usr/share/man/man5/oplog2pg.ini.5.gz /etc/oplog2pg/oplog2pg.ini \
    /usr/share/doc/oplog2pg/copyright /usr/share/doc/oplog2pg/examples/oplog2pg.ini \
    /usr/share/doc/oplog2pg/examples/oplog2pg-minimal.ini; do
    grep -qx "$f" "$tmp/contents" || fail "the package lacks $f"
done
for d in README.md docs/*.md; do
    b=$(basename "$d")
    grep -qxE "/usr/share/doc/oplog2pg/$b(\.gz)?" "$tmp/contents" || fail "the package lacks the document $b"
done
progs=$(dpkg-deb -c "$deb" | awk '$1 ~ /^-..x/ {print $6}' | tr '\n' ' ')
[ "$progs" = "./usr/bin/oplog2pg " ] || fail "the package's programs are $progs(expected ./usr/bin/oplog2pg alone)"
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || fail "the package's version is not VERSION's $version"
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles >"$tmp/conffiles"
[ "$(cat "$tmp/conffiles")" = /etc/oplog2pg/oplog2pg.ini ] ||
    fail "conffiles should list /etc/oplog2pg/oplog2pg.ini alone, it holds: $(cat "$tmp/conffiles")"

# ---- 4. install ---------------------------------------------------------------------------------------------------------
step "apt-get install $(basename "$deb")"
installed_here=1
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$deb" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; fail "apt-get install of the package failed"; }
[ "$(dpkg-query -W -f='${db:Status-Status}' oplog2pg)" = installed ] || fail "dpkg does not list oplog2pg as installed"
got=$(/usr/bin/oplog2pg --version) || fail "/usr/bin/oplog2pg does not run"
[ "$got" = "oplog2pg $version" ] || fail "/usr/bin/oplog2pg says '$got', expected 'oplog2pg $version'"

getent passwd oplog2pg >"$tmp/passwd" || fail "postinst did not create the user oplog2pg"
IFS=: read -r _ _ uid _ _ _ shell <"$tmp/passwd"
[ "$uid" -lt 1000 ] || fail "oplog2pg is not a system user (uid $uid)"
case $shell in */nologin | */false) ;; *) fail "oplog2pg has a login shell ($shell)" ;; esac
getent group oplog2pg >/dev/null || fail "postinst did not create the group oplog2pg"
conf=/etc/oplog2pg/oplog2pg.ini
[ "$(stat -c '%U:%G %a' "$conf")" = "root:oplog2pg 640" ] ||
    fail "$conf is $(stat -c '%U:%G %a' "$conf"), expected root:oplog2pg 640"
dpkg-statoverride --list "$conf" >/dev/null || fail "no dpkg-statoverride keeps $conf's owner and mode"
runuser -u nobody -- cat "$conf" >/dev/null 2>&1 && fail "$conf is readable by other users"

unit=/lib/systemd/system/oplog2pg.service
grep -qx "ExecStart=/usr/bin/oplog2pg -c /etc/oplog2pg/oplog2pg.ini run" "$unit" ||
    fail "$unit: ExecStart does not name the packaged paths: $(grep '^ExecStart=' "$unit")"
grep -qE '(^|[^[:alnum:]_./-])/usr/local' "$unit" && fail "$unit still names /usr/local"
# Nothing enabled: no symlink in any .wants folder, and systemctl (offline or not) agrees.
find /etc/systemd/system -name 'oplog2pg*' | grep -q . && fail "the unit was enabled: $(find /etc/systemd/system -name 'oplog2pg*')"
en=$(systemctl is-enabled oplog2pg.service 2>&1 || true)
[ "$en" = disabled ] || fail "systemctl is-enabled oplog2pg says '$en', expected disabled"
# (Other oplog2pg processes may run here, tests of a build tree: only the packaged binary counts.)
for pid in $(pgrep -x oplog2pg || true); do
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = /usr/bin/oplog2pg ] && fail "the packaged daemon runs after the install"
done
pgrep -u oplog2pg >/dev/null && fail "a process runs as the user oplog2pg after the install"

step "systemd-analyze verify $unit"
if [ -d /run/systemd/system ]; then
    echo "   (systemd runs here: the unit is verified against the live manager)"
else
    echo "   (systemd is not PID 1 here: systemd-analyze loads the unit files offline, which checks the unit's syntax,"
    echo "    ExecStart's binary, the man pages of Documentation= and the dependencies named; it cannot start it)"
fi
systemd-analyze verify "$unit" >"$tmp/verify" 2>&1 || { cat "$tmp/verify"; fail "systemd-analyze verify rejects $unit"; }
[ -s "$tmp/verify" ] && { cat "$tmp/verify"; fail "systemd-analyze verify warns about $unit (above)"; }
man -w 8 oplog2pg | grep -q '^/usr/share/man/man8/oplog2pg.8' || fail "man oplog2pg does not find the packaged page"
man -w 5 oplog2pg.ini | grep -q '^/usr/share/man/man5/oplog2pg.ini.5' || fail "man 5 oplog2pg.ini does not find it"

# ---- 5. run it as the user oplog2pg --------------------------------------------------------------------------------------
step "as user oplog2pg: oplog2pg --version, check, --import-only run (throwaway PostgreSQL, mongosim)"
as_svc() { runuser -u oplog2pg -- "$@"; }
got=$(as_svc oplog2pg --version) || fail "oplog2pg --version fails as the user oplog2pg"
[ "$got" = "oplog2pg $version" ] || fail "as oplog2pg: '$got', expected 'oplog2pg $version'"

coproc SIM { exec "$build/mongosim" --port 0 2>"$tmp/mongosim.log"; }
# shellcheck disable=SC2153 # SIM_PID is set by coproc
sim_pid=$SIM_PID
read -r -t 10 port <&"${SIM[0]}" || fail "mongosim did not start: $(cat "$tmp/mongosim.log")"
uri="mongodb://127.0.0.1:$port/?replicaSet=rs0"
/usr/bin/python3 -c "import pymongo,sys; pymongo.MongoClient(sys.argv[1]).shop.items.insert_many([{'_id': i, 'n': i * i} for i in range(500)])" "$uri" ||
    fail "could not write the sample collection to mongosim"

# A table of the user's own, which neither the daemon nor the package has any business with.
psql -X -q -v ON_ERROR_STOP=1 -c "CREATE TABLE public.users_own (k int PRIMARY KEY, v text);
    INSERT INTO public.users_own SELECT g, md5(g::text) FROM generate_series(1, 1000) g;" ||
    fail "could not create the user's table"

# The conffile, edited as an administrator would (the default -c path is exercised: no -c below).
cat >"$conf" <<INI
[mongodb]
uri = $uri
[postgres]
conninfo = host=127.0.0.1 port=$PGPORT user=postgres dbname=postgres
[replication]
service = packaged
include = shop.*
[copy]
window_warning = 0
INI
[ "$(stat -c '%U:%G %a' "$conf")" = "root:oplog2pg 640" ] || fail "editing $conf changed its owner or mode"
as_svc oplog2pg check >"$tmp/check" 2>&1 || { cat "$tmp/check"; fail "oplog2pg check fails as the user oplog2pg"; }
grep -qi "oplog" "$tmp/check" || { cat "$tmp/check"; fail "oplog2pg check did not report the oplog"; }
as_svc timeout 60 oplog2pg --import-only run >"$tmp/import" 2>&1 ||
    { cat "$tmp/import"; fail "oplog2pg --import-only run fails as the user oplog2pg"; }
n=$(psql -X -At -c "SELECT count(*) FROM shop.items") || fail "the import wrote no table shop.items"
[ "$n" = 500 ] || fail "shop.items holds $n rows, expected 500"
psql -X -At -c "SELECT 1 FROM oplog2pg.checkpoint WHERE service = 'packaged'" | grep -qx 1 ||
    fail "the import left no checkpoint"

# Every table of every schema but the catalogs, with a digest of its rows.
pg_digest() {
    psql -X -At -v ON_ERROR_STOP=1 <<'SQL'
SELECT n.nspname || '.' || c.relname || ' ' ||
       (xpath('/row/d/text()', query_to_xml(format('SELECT md5(coalesce(string_agg(t::text, ''|'' ORDER BY t::text), '''')) AS d FROM %I.%I t',
                                                    n.nspname, c.relname), false, true, '')))[1]::text
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_toast'
 ORDER BY 1;
SQL
}
pg_digest >"$tmp/pg.before" || fail "could not read PostgreSQL's tables"
if ! grep -q '^oplog2pg\.checkpoint ' "$tmp/pg.before" || ! grep -q '^public\.users_own ' "$tmp/pg.before"; then
    cat "$tmp/pg.before"
    fail "the digest misses the daemon's or the user's tables"
fi

# ---- 6. remove, purge ------------------------------------------------------------------------------------------------------
step "apt-get remove oplog2pg: the program goes, the configuration stays"
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 remove -y -qq oplog2pg >"$tmp/remove.log" 2>&1 ||
    { cat "$tmp/remove.log"; fail "apt-get remove failed"; }
[ "$(dpkg-query -W -f='${db:Status-Status}' oplog2pg)" = config-files ] || fail "after remove, dpkg should hold config-files"
for f in /usr/bin/oplog2pg "$unit" /usr/lib/sysusers.d/oplog2pg.conf /usr/share/man/man8/oplog2pg.8.gz \
    /usr/share/doc/oplog2pg; do
    [ -e "$f" ] && fail "remove left $f"
done
grep -q "^service = packaged$" "$conf" || fail "remove did not keep the edited $conf"

step "apt-get purge oplog2pg: the configuration goes, PostgreSQL is untouched"
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 purge -y -qq oplog2pg >"$tmp/purge.log" 2>&1 ||
    { cat "$tmp/purge.log"; fail "apt-get purge failed"; }
installed_here=0
st=$(dpkg-query -W -f='${db:Status-Status}' oplog2pg 2>/dev/null || echo not-installed)
[ "$st" = not-installed ] || fail "after purge, dpkg says $st"
[ -e /etc/oplog2pg ] && fail "purge left /etc/oplog2pg: $(ls -la /etc/oplog2pg)"
dpkg-statoverride --list "$conf" >/dev/null && fail "purge left the statoverride of $conf"
getent passwd oplog2pg >/dev/null || fail "purge removed the user oplog2pg (it may own files elsewhere: it stays)"
pg_digest >"$tmp/pg.after" || fail "could not read PostgreSQL's tables after the purge"
diff "$tmp/pg.before" "$tmp/pg.after" || fail "PostgreSQL's tables changed between the import and the purge (above)"

echo "package test: ok"

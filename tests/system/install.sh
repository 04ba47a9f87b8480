#!/usr/bin/env bash
# tests/system/install.sh BUILD — checks `make install` and `make uninstall` the way a packager and an operator use
# them, without touching the machine: everything goes under throwaway DESTDIRs.
#
#   1. PREFIX=/usr/local: every file at its path and mode and nothing else; the unit names the installed binary and
#      configuration; the binary runs; the sysusers file parses (systemd-sysusers --dry-run).
#   2. The installed configuration, once edited, survives a second install (and install says it kept it).
#   3. PREFIX=/usr SYSCONFDIR=/etc, and PREFIX=/opt/oplog2pg (configuration under the prefix): the unit's paths.
#   4. `systemd-analyze verify` of the installed unit, with no warning. It checks that ExecStart's binary exists and
#      that the Documentation= man pages resolve, so this step installs without DESTDIR under a real prefix in $tmp
#      (the unit then names that binary) and points MANPATH at its man pages. Neither --root (it then wants a whole
#      OS tree: sysinit.target, /bin/kill) nor --man=no (it would skip the man pages) is needed, nor root.
#   5. The man pages render without a groff warning (groff -ww, and man --warnings as man(1) runs it).
#   6. Install as an unprivileged user into a DESTDIR it owns (when run as root).
#   7. `make uninstall` removes everything install put there, except the configuration.
# Exits non-zero at the first failure, saying what was expected.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
version=$(cat VERSION)

tmp=$(mktemp -d /tmp/oplog2pg-install-test.XXXXXX)
chmod 0755 "$tmp"
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "install test: FAIL: $*" >&2
    exit 1
}
step() { echo "-- $*"; }

# The caller (make check) passes its command-line variables down in MAKEFLAGS and the environment; this test sets
# its own paths, and checks the Makefile's defaults, so none may leak in. SANITIZE stays: it says how BUILD was built.
unset MAKEFLAGS MFLAGS MAKELEVEL DESTDIR PREFIX BINDIR SYSCONFDIR UNITDIR SYSUSERSDIR MANDIR DOCDIR
mk() { make --no-print-directory BUILD="$build" "$@"; }

# expect_file PATH MODE [SOURCE]: PATH is a regular file with MODE (octal) and, given SOURCE, the same bytes.
expect_file() {
    [ -f "$1" ] || fail "$1 was not installed"
    local mode
    mode=$(stat -c %a "$1")
    [ "$mode" = "$2" ] || fail "$1 has mode $mode, expected $2"
    if [ $# -ge 3 ]; then cmp -s "$1" "$3" || fail "$1 differs from $3"; fi
}

# expect_unit UNIT BINDIR CONFDIR: the unit runs BINDIR/oplog2pg -c CONFDIR/oplog2pg.ini, and is otherwise the
# source unit with those two paths substituted (so no stale /usr/local/bin or /etc/oplog2pg is left anywhere).
expect_unit() {
    local unit=$1 bindir=$2 confdir=$3
    expect_file "$unit" 644
    grep -qx "ExecStart=$bindir/oplog2pg -c $confdir/oplog2pg.ini run" "$unit" ||
        fail "$unit: expected 'ExecStart=$bindir/oplog2pg -c $confdir/oplog2pg.ini run', found: $(grep '^ExecStart=' "$unit")"
    sed -e "s|/usr/local/bin/oplog2pg|$bindir/oplog2pg|g" -e "s|/etc/oplog2pg/|$confdir/|g" systemd/oplog2pg.service |
        cmp -s - "$unit" || fail "$unit is not systemd/oplog2pg.service with the install's paths"
    # A path that starts a word (not the tail of /opt/oplog2pg/etc/oplog2pg).
    if [ "$bindir" != /usr/local/bin ] && grep -qE '(^|[^[:alnum:]_./-])/usr/local/bin' "$unit"; then
        fail "$unit still names /usr/local/bin"
    fi
    if [ "$confdir" != /etc/oplog2pg ] && grep -qE '(^|[^[:alnum:]_./-])/etc/oplog2pg' "$unit"; then
        fail "$unit still names /etc/oplog2pg"
    fi
    return 0
}

# The files (not directories) under a tree, relative to it, sorted.
files_under() { (cd "$1" && find . -type f -o -type l | sed 's|^\./||' | LC_ALL=C sort); }

docs=(README.md docs/*.md)
expected_files() { # PREFIX-RELATIVE-ROOT CONFDIR (both without the leading /)
    local p=$1 c=$2
    {
        echo "$p/bin/oplog2pg"
        echo "$c/oplog2pg.ini"
        echo "$p/lib/systemd/system/oplog2pg.service"
        echo "$p/lib/sysusers.d/oplog2pg.conf"
        echo "$p/share/man/man8/oplog2pg.8"
        echo "$p/share/man/man5/oplog2pg.ini.5"
        for d in "${docs[@]}"; do echo "$p/share/doc/oplog2pg/$(basename "$d")"; done
        echo "$p/share/doc/oplog2pg/examples/oplog2pg.ini"
        echo "$p/share/doc/oplog2pg/examples/oplog2pg-minimal.ini"
    } | LC_ALL=C sort
}

# ---- 1. PREFIX=/usr/local -----------------------------------------------------------------------------------------
step "make install DESTDIR=... PREFIX=/usr/local"
d1=$tmp/local
mk install DESTDIR="$d1" PREFIX=/usr/local >"$tmp/out1" 2>&1 || { cat "$tmp/out1"; fail "make install failed"; }
diff <(expected_files usr/local etc/oplog2pg) <(files_under "$d1") >"$tmp/diff" ||
    { cat "$tmp/diff"; fail "PREFIX=/usr/local installed a different set of files (< expected, > installed)"; }
expect_file "$d1/usr/local/bin/oplog2pg" 755 "$build/oplog2pg"
expect_file "$d1/etc/oplog2pg/oplog2pg.ini" 640 conf/oplog2pg.ini
expect_unit "$d1/usr/local/lib/systemd/system/oplog2pg.service" /usr/local/bin /etc/oplog2pg
expect_file "$d1/usr/local/lib/sysusers.d/oplog2pg.conf" 644 systemd/oplog2pg.sysusers
expect_file "$d1/usr/local/share/man/man8/oplog2pg.8" 644 man/oplog2pg.8
expect_file "$d1/usr/local/share/man/man5/oplog2pg.ini.5" 644 man/oplog2pg.ini.5
for d in "${docs[@]}"; do expect_file "$d1/usr/local/share/doc/oplog2pg/$(basename "$d")" 644 "$d"; done
expect_file "$d1/usr/local/share/doc/oplog2pg/examples/oplog2pg.ini" 644 conf/oplog2pg.ini
expect_file "$d1/usr/local/share/doc/oplog2pg/examples/oplog2pg-minimal.ini" 644 conf/oplog2pg-minimal.ini
grep -q "kept the existing" "$tmp/out1" && fail "the first install claims it kept a configuration"
grep -q "chgrp oplog2pg /etc/oplog2pg/oplog2pg.ini" "$tmp/out1" ||
    fail "install into a DESTDIR does not tell how to give the configuration to group oplog2pg"
got=$("$d1/usr/local/bin/oplog2pg" --version) || fail "the installed binary does not run"
[ "$got" = "oplog2pg $version" ] || fail "the installed binary says '$got', expected 'oplog2pg $version'"
"$d1/usr/local/bin/oplog2pg" -c "$d1/etc/oplog2pg/oplog2pg.ini" config >/dev/null ||
    fail "the installed configuration does not load"
systemd-sysusers --root="$d1" --dry-run "$d1/usr/local/lib/sysusers.d/oplog2pg.conf" >"$tmp/sysusers" 2>&1 ||
    { cat "$tmp/sysusers"; fail "systemd-sysusers rejects the installed sysusers file"; }
grep -q "Creating user 'oplog2pg'" "$tmp/sysusers" ||
    { cat "$tmp/sysusers"; fail "the sysusers file does not create the user oplog2pg"; }

# ---- 2. an edited configuration survives ----------------------------------------------------------------------------
step "install again over an edited configuration"
conf=$d1/etc/oplog2pg/oplog2pg.ini
printf '\n# edited by the operator\n[replication]\nservice = edited\n' >>"$conf"
cp "$conf" "$tmp/edited.ini"
rm "$d1/usr/local/share/man/man8/oplog2pg.8"
mk install DESTDIR="$d1" PREFIX=/usr/local >"$tmp/out2" 2>&1 || { cat "$tmp/out2"; fail "the second make install failed"; }
cmp -s "$conf" "$tmp/edited.ini" || fail "the second install overwrote the edited $conf"
expect_file "$conf" 640
grep -q "kept the existing $conf" "$tmp/out2" || { cat "$tmp/out2"; fail "the second install did not say it kept $conf"; }
expect_file "$d1/usr/local/share/man/man8/oplog2pg.8" 644 man/oplog2pg.8 # the rest is installed again
"$d1/usr/local/bin/oplog2pg" -c "$conf" config | grep -qx "service = edited" ||
    fail "the edited configuration does not load"

# ---- 3. other prefixes -------------------------------------------------------------------------------------------------
step "make install DESTDIR=... PREFIX=/usr SYSCONFDIR=/etc"
d2=$tmp/usr
mk install DESTDIR="$d2" PREFIX=/usr SYSCONFDIR=/etc >"$tmp/out3" 2>&1 || { cat "$tmp/out3"; fail "make install failed"; }
diff <(expected_files usr etc/oplog2pg) <(files_under "$d2") >"$tmp/diff" ||
    { cat "$tmp/diff"; fail "PREFIX=/usr installed a different set of files (< expected, > installed)"; }
expect_file "$d2/usr/bin/oplog2pg" 755
expect_file "$d2/etc/oplog2pg/oplog2pg.ini" 640
expect_unit "$d2/usr/lib/systemd/system/oplog2pg.service" /usr/bin /etc/oplog2pg
expect_file "$d2/usr/lib/sysusers.d/oplog2pg.conf" 644

step "make install DESTDIR=... PREFIX=/opt/oplog2pg (configuration under the prefix)"
d3=$tmp/opt
mk install DESTDIR="$d3" PREFIX=/opt/oplog2pg >"$tmp/out4" 2>&1 || { cat "$tmp/out4"; fail "make install failed"; }
diff <(expected_files opt/oplog2pg opt/oplog2pg/etc/oplog2pg) <(files_under "$d3") >"$tmp/diff" ||
    { cat "$tmp/diff"; fail "PREFIX=/opt/oplog2pg installed a different set of files (< expected, > installed)"; }
expect_unit "$d3/opt/oplog2pg/lib/systemd/system/oplog2pg.service" /opt/oplog2pg/bin /opt/oplog2pg/etc/oplog2pg

# ---- 4. systemd-analyze verify --------------------------------------------------------------------------------------
step "systemd-analyze verify the unit of an install at a real path (PREFIX=\$tmp/real, MANPATH pointing at it)"
make --no-print-directory BUILD="$build" install PREFIX="$tmp/real" SYSTEM_SETUP=no >"$tmp/real-install.log" 2>&1 ||
    { cat "$tmp/real-install.log"; fail "make install PREFIX=$tmp/real failed"; }
if ! MANPATH="$tmp/real/share/man:" systemd-analyze verify "$tmp/real/lib/systemd/system/oplog2pg.service" \
    >"$tmp/verify" 2>&1; then
    cat "$tmp/verify"
    fail "systemd-analyze verify rejects the installed unit (the lines above)"
fi
[ -s "$tmp/verify" ] && { cat "$tmp/verify"; fail "systemd-analyze verify warns about the installed unit (the lines above)"; }
# The check can fail: without the man pages on MANPATH, Documentation= does not resolve.
if MANPATH=/nonexistent systemd-analyze verify "$tmp/real/lib/systemd/system/oplog2pg.service" >/dev/null 2>&1; then
    fail "systemd-analyze verify passed with the man pages out of reach: it does not check Documentation="
fi

# ---- 5. the man pages render without warnings ------------------------------------------------------------------------
step "man pages render without warnings"
for page in "$d1/usr/local/share/man/man8/oplog2pg.8" "$d1/usr/local/share/man/man5/oplog2pg.ini.5"; do
    out=$(groff -man -Tutf8 -ww -z "$page" 2>&1) || fail "groff fails on $page: $out"
    [ -z "$out" ] || fail "groff warns about $page: $out"
    out=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null) || fail "man fails on $page: $out"
    [ -z "$out" ] || fail "man --warnings warns about $page: $out"
done
for want in "8 oplog2pg" "5 oplog2pg.ini"; do
    # shellcheck disable=SC2086 # section and name are two words on purpose
    found=$(man -M "$d1/usr/local/share/man" -w $want 2>/dev/null) || fail "man -M ... cannot find '$want' installed"
    case $found in "$d1"/*) ;; *) fail "man -w $want found $found, not the installed page" ;; esac
done

# ---- 6. no root needed with DESTDIR ------------------------------------------------------------------------------------
if [ "$(id -u)" -eq 0 ]; then
    step "make install DESTDIR=... as an unprivileged user"
    d4=$tmp/nobody
    mkdir "$d4" && chown nobody "$d4"
    # -o: take the built binary as it is (this user may not write to the build folder).
    if ! setpriv --reuid=nobody --regid=nogroup --clear-groups \
        make --no-print-directory BUILD="$build" -o "$build/oplog2pg" install DESTDIR="$d4" PREFIX=/usr/local \
        >"$tmp/out5" 2>&1; then
        cat "$tmp/out5"
        fail "make install into a DESTDIR fails for an unprivileged user"
    fi
    diff <(expected_files usr/local etc/oplog2pg) <(files_under "$d4") >"$tmp/diff" ||
        { cat "$tmp/diff"; fail "the unprivileged install installed a different set of files"; }
fi

# ---- 7. uninstall -------------------------------------------------------------------------------------------------------
step "make uninstall keeps the configuration only"
mk uninstall DESTDIR="$d1" PREFIX=/usr/local >"$tmp/out6" 2>&1 || { cat "$tmp/out6"; fail "make uninstall failed"; }
left=$(files_under "$d1")
[ "$left" = "etc/oplog2pg/oplog2pg.ini" ] || fail "after uninstall, expected only etc/oplog2pg/oplog2pg.ini, found: $left"
cmp -s "$conf" "$tmp/edited.ini" || fail "uninstall changed the configuration"
[ -d "$d1/usr/local/share/doc/oplog2pg" ] && fail "uninstall left the documentation folder"
grep -q "kept the configuration" "$tmp/out6" || fail "uninstall did not say it kept the configuration"
mk uninstall DESTDIR="$d2" PREFIX=/usr SYSCONFDIR=/etc >"$tmp/out7" 2>&1 || { cat "$tmp/out7"; fail "make uninstall failed"; }
left=$(files_under "$d2")
[ "$left" = "etc/oplog2pg/oplog2pg.ini" ] || fail "after uninstall (PREFIX=/usr), found: $left"

echo "install test: ok"

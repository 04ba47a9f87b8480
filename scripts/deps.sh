#!/usr/bin/env bash
# scripts/deps.sh — make sure the Debian packages oplog2pg builds, tests and benchmarks with are present.
#
# Run by `make check`, `make demo` and `make bench` before anything else (and with --bench by bench/run.sh, for the
# plots' gnuplot; --tools adds what `make format` and `make lint` use; --fuzz what `make fuzz` builds with). As root it installs what is missing with
# apt-get; as anyone else it prints the exact command to run and fails. Set OPLOG2PG_NO_DEPS=1 to skip the check
# (for packagers building in a prepared chroot).
set -euo pipefail

[ "${OPLOG2PG_NO_DEPS:-0}" = 1 ] && exit 0

# Build: compilers, pkg-config and the libraries the daemon links (tcmalloc from gperftools: include/util/memory.h;
# libdouble-conversion, C++, through src/util/dtoa_digits.cc: include/util/dtoa.h).
pkgs=(gcc g++ make pkg-config libmongoc-dev libbson-dev libpq-dev libev-dev libinih-dev libsystemd-dev libmicrohttpd-dev
    check libgoogle-perftools-dev libdouble-conversion-dev libssl-dev)
# Tests, demo and benchmarks: a PostgreSQL server to throw away, pymongo for the compatibility test, valgrind;
# groff and man-db render the man pages and systemd verifies the installed unit (tests/system/install.sh); python3-yaml
# reads the Prometheus rules (tests/system/monitoring.sh, which installs promtool itself); openssl makes the TLS test's
# certificates (tests/integration/tls-env.sh; libssl-dev above: mongosim serves TLS with it).
pkgs+=(postgresql postgresql-client python3 python3-pymongo python3-yaml valgrind util-linux curl systemd groff-base man-db
    openssl)
# The Node.js compatibility test (tests/compat/node_compat.mjs): Debian's nodejs and npm, unless a node is present.
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
# Tooling behind `make format` and `make lint`.
[ "${1:-}" = --tools ] && pkgs+=(clang-format cppcheck)
# What `make fuzz` builds with: clang and its libFuzzer and sanitizer runtimes (Debian 12: clang 14).
[ "${1:-}" = --fuzz ] && pkgs+=(clang libclang-rt-14-dev)
# The plots `make bench` draws (bench/plots.sh); bench/run.sh asks for them only when gnuplot is missing.
[ "${1:-}" = --bench ] && pkgs+=(gnuplot-nox)

missing=()
for p in "${pkgs[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [ "$status" = installed ] || missing+=("$p")
done
# The official Node.js driver, pinned by tests/compat/package-lock.json, into tests/compat/node_modules (not in git).
# The driver wants Node.js 20 or later; Debian 12's nodejs is 18. Then a Node.js 20 binary comes from the npm registry
# (package node-linux-<arch>) into tests/compat/.node, and tests/integration/run.sh runs the test with it.
compat_node() {
    local dir major arch
    dir="$(cd "$(dirname "$0")/.." && pwd)/tests/compat"
    major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
    if [ "$major" -lt 20 ] && [ ! -x "$dir/.node/node_modules/.bin/node" ]; then
        case "$(uname -m)" in x86_64) arch=x64 ;; aarch64) arch=arm64 ;; *) arch=$(uname -m) ;; esac
        echo "oplog2pg: node $(node --version 2>/dev/null) is older than 20: npm install node-linux-$arch@20 into tests/compat/.node" >&2
        npm install --prefix "$dir/.node" --no-save --no-audit --no-fund "node-linux-$arch@20" >&2
        mkdir -p "$dir/.node/node_modules/.bin"
        ln -sf "../node-linux-$arch/bin/node" "$dir/.node/node_modules/.bin/node"
    fi
    [ -d "$dir/node_modules/mongodb" ] && return 0
    echo "oplog2pg: npm ci in tests/compat" >&2
    (cd "$dir" && npm ci --no-audit --no-fund >&2)
}
if [ ${#missing[@]} -eq 0 ]; then
    compat_node
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "oplog2pg: missing Debian packages: ${missing[*]}" >&2
    echo "install them with:  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi

echo "oplog2pg: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# A fresh machine has no package lists; an old list may miss a package. Update once, then install.
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
compat_node

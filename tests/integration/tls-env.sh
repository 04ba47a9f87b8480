#!/usr/bin/env bash
# tests/integration/tls-env.sh — what the tls suite (test_tls.c) runs against: throwaway certificates and a
# PostgreSQL cluster that takes TLS connections only.
#
#   tls-env.sh start DIR   makes DIR/certs with openssl, then initdb's DIR/pg and starts it with ssl = on on a free
#                          port of 127.0.0.1 (and a Unix socket in DIR/pg, trusted, for the test's own checks);
#                          prints the port alone on stdout
#   tls-env.sh stop DIR    stops that cluster (its files go with DIR)
#
# DIR/certs holds, all with EC P-256 keys valid for two days:
#   ca.pem ca.key                   the CA every other certificate is issued by
#   other-ca.pem                    a second CA that issued none of them (a "wrong CA")
#   server.pem server.key           for localhost: subjectAltName DNS:localhost, IP:127.0.0.1
#   server-bundle.pem               the same certificate and key in one file (mongosim --tls-cert)
#   elsewhere.pem elsewhere.key     for elsewhere.invalid only (a "wrong host name"), and elsewhere-bundle.pem
#   client.pem client.key           the client's: subject O=oplog2pg test, CN=postgres (PostgreSQL's
#                                   clientcert=verify-full matches the CN with the user name)
#   client-bundle.pem               the client's certificate and key in one file (tlsCertificateKeyFile)
# pg_hba.conf has `local all all trust` and `hostssl all all 127.0.0.1/32 trust clientcert=verify-full`: a TCP
# connection must use TLS and present a client certificate the CA issued, whose CN is the user name.
# As root, the cluster runs as `nobody` (PostgreSQL refuses root), as scripts/with-pg.sh does.
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
cmd=$1
dir=$2

bindir=${OPLOG2PG_TEST_PG_BINDIR:-}
if [ -z "$bindir" ]; then
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        [ -x "$d/initdb" ] && { bindir=$d; break; }
    done
fi
[ -n "$bindir" ] && [ -x "$bindir/initdb" ] || { echo "tls-env: no PostgreSQL server found" >&2; exit 1; }

as_owner=()
[ "$(id -u)" -eq 0 ] && as_owner=(runuser -u nobody --)

if [ "$cmd" = stop ]; then
    if [ -f "$dir/pg/data/postmaster.pid" ]; then
        "${as_owner[@]}" "$bindir/pg_ctl" -D "$dir/pg/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    exit 0
fi
[ "$cmd" = start ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

c=$dir/certs
mkdir -p "$c"
ossl() { openssl "$@" 2>>"$c/openssl.log"; }

# A CA: self-signed, allowed to sign certificates.
make_ca() { # NAME CN
    ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -keyout "$c/$1.key" -out "$c/$1.pem" -subj "/CN=$2" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
}
# A certificate the CA issues: NAME SUBJECT EXTENSIONS
make_leaf() {
    ossl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$c/$1.key" -out "$c/$1.csr" -subj "$2"
    printf '%s\n' "$3" >"$c/$1.ext"
    ossl x509 -req -in "$c/$1.csr" -CA "$c/ca.pem" -CAkey "$c/ca.key" -CAcreateserial -days 2 \
        -extfile "$c/$1.ext" -out "$c/$1.pem"
    cat "$c/$1.pem" "$c/$1.key" >"$c/$1-bundle.pem"
    chmod 600 "$c/$1.key" "$c/$1-bundle.pem"
}

make_ca ca "oplog2pg test CA"
make_ca other-ca "oplog2pg other test CA"
make_leaf server "/CN=localhost" "subjectAltName=DNS:localhost,IP:127.0.0.1
extendedKeyUsage=serverAuth"
make_leaf elsewhere "/CN=elsewhere.invalid" "subjectAltName=DNS:elsewhere.invalid
extendedKeyUsage=serverAuth"
make_leaf client "/O=oplog2pg test/CN=postgres" "extendedKeyUsage=clientAuth"

# The server's copies, readable by the cluster's owner only (PostgreSQL refuses a key others can read).
pg=$dir/pg
mkdir -p "$pg/tls"
cp "$c/server.pem" "$c/server.key" "$c/ca.pem" "$pg/tls/"
chmod 600 "$pg/tls/server.key"
if [ ${#as_owner[@]} -gt 0 ]; then
    chown -R nobody: "$pg"
    chmod 755 "$dir" "$pg"
fi

"${as_owner[@]}" "$bindir/initdb" -D "$pg/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
    >"$pg/initdb.log" 2>&1 || { cat "$pg/initdb.log" >&2; exit 1; }
cat >"$pg/hba.conf" <<EOF
local   all all                trust
hostssl all all 127.0.0.1/32   trust clientcert=verify-full
EOF
[ ${#as_owner[@]} -gt 0 ] && chown nobody: "$pg/hba.conf"

free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
for _ in 1 2 3 4 5; do
    port=$(free_port)
    if "${as_owner[@]}" "$bindir/pg_ctl" -D "$pg/data" -l "$pg/postgres.log" -w -t 60 \
        -o "-c port=$port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$pg -c fsync=off \
            -c max_connections=30 -c shared_buffers=32MB -c hba_file=$pg/hba.conf -c ssl=on \
            -c ssl_cert_file=$pg/tls/server.pem -c ssl_key_file=$pg/tls/server.key -c ssl_ca_file=$pg/tls/ca.pem" \
        start >/dev/null 2>&1; then
        echo "$port"
        exit 0
    fi
done
echo "tls-env: PostgreSQL did not start:" >&2
tail -n 20 "$pg/postgres.log" >&2
exit 1

#!/usr/bin/env bash
# Stratus's connections to PostgreSQL over TLS, checked against a real server: a PostgreSQL 15
# cluster of its own (in a temporary folder, as the postgres account) with ssl on and a
# certificate from a throwaway authority (Deploy/tls/make-certs.sh), and `stratus migrate` (the
# built binary, .build/debug/stratus or $STRATUS_BINARY) connecting with each sslmode:
# - verify-full with sslrootcert: connects; without it (the system's authorities): refused;
# - the server then given a certificate for another host: verify-full refuses it, naming the
#   host; verify-ca and require connect;
# - ssl off on the server: sslmode=require is refused, saying the server offers no TLS.
# Every refusal must come at once with a message that says what to change. Run by Deploy/test.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
. Deploy/lib.sh
binary=${STRATUS_BINARY:-.build/debug/stratus}
pg_bin
work=$(mktemp -d /tmp/stratus-pg-tls.XXXXXX)
chmod 755 "$work"
data="$work/pg/data"
stop() { pg_stop "$data"; rm -rf "$work"; }
trap stop EXIT
Deploy/tls/make-certs.sh "$work/certs" 2>/dev/null
mkdir -p "$work/pg"
chown postgres "$work/pg" 2>/dev/null || true
pg_create "$data"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
serve_certificate() {
  cp "$work/certs/$1.pem" "$data/server.crt"
  cp "$work/certs/$1.key" "$data/server.key"
  chown postgres "$data/server.crt" "$data/server.key" 2>/dev/null || true
  chmod 600 "$data/server.key"
}
serve_certificate server
{ echo "listen_addresses = '127.0.0.1'"; echo "port = $port"; echo "unix_socket_directories = '$work/pg'"; echo "ssl = on"; } >>"$data/postgresql.conf"
pg_start "$data" "$work/pg/log"
url="postgres://postgres@localhost:$port/postgres"
failures=0
check() {  # check NAME EXPECTED_EXIT EXPECTED_TEXT URL
  local started status text
  started=$(date +%s)
  set +e
  "$binary" migrate --database-url "$4" >"$work/out" 2>&1
  status=$?
  set -e
  text=$(tail -1 "$work/out")
  if [ "$status" -ne "$2" ] || ! grep -qF -- "$3" <<<"$text"; then
    echo "postgres tls: $1: exit $status (wanted $2), said: ${text:0:400}" >&2
    failures=$((failures + 1))
  elif [ $(( $(date +%s) - started )) -gt 10 ]; then
    echo "postgres tls: $1: took $(( $(date +%s) - started )) s to answer" >&2
    failures=$((failures + 1))
  else
    echo "postgres tls: $1: exit $status, ${text:0:200}"
  fi
}
ca="sslrootcert=$work/certs/ca.pem"
check "verify-full with the authority" 0 "applied migrations" "$url?sslmode=verify-full&$ca"
# Each migration is confirmed committed by the ReadyForQuery watch, which reads the messages
# inside TLS: it must not have lost track of them.
if grep -q "lost track" "$work/out"; then
  echo "postgres tls: the commit watch lost track of the messages over TLS: $(grep "lost track" "$work/out" | head -1)" >&2
  failures=$((failures + 1))
fi
check "verify-full with the system's authorities" 1 "sslmode=verify-full wants a certificate signed by an authority" "$url?sslmode=verify-full"
serve_certificate wrong-host
pg_ctl_as "$data" reload >/dev/null
sleep 1
check "verify-full, a certificate for another host" 1 "names 'localhost'" "$url?sslmode=verify-full&$ca"
check "verify-ca, a certificate for another host" 0 "database is up to date" "$url?sslmode=verify-ca&$ca"
check "require, a certificate for another host" 0 "database is up to date" "$url?sslmode=require"
sed -i 's/^ssl = on$/ssl = off/' "$data/postgresql.conf"
pg_ctl_as "$data" -w restart -l "$work/pg/log" >/dev/null
check "require, a server without TLS" 1 "does not offer TLS" "$url?sslmode=require"
check "disable" 0 "database is up to date" "$url?sslmode=disable"
check "an unknown sslmode" 1 "use disable, require, verify-ca or verify-full" "$url?sslmode=verify"
if [ "$failures" -gt 0 ]; then exit 1; fi
echo "postgres tls: passed"

#!/usr/bin/env bash
# Stratus over HTTPS end to end: makes a throwaway certificate authority and certificates
# (Deploy/tls/make-certs.sh), starts the built `stratus serve` (its own embedded PostgreSQL, in a
# temporary folder; .build/debug/stratus or $STRATUS_BINARY) with --tls-cert, --tls-key,
# --redirect-http-port and an https public URL, and runs Deploy/tls/e2e.py: curl and Python's TLS
# client (versions, host names, plain HTTP on the TLS port, the redirect, a reload on SIGHUP under
# a long poll, an expired certificate) and Chromium trusting the authority (the console and the
# sign-in popup over https). Screenshots go to .build/test-output/https/. Run by Deploy/test.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
. Deploy/lib.sh
out=.build/test-output/https
binary=${STRATUS_BINARY:-.build/debug/stratus}
ensure_browser
ensure_python_tools
if ! command -v certutil >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
  echo "https e2e: installing Debian's libnss3-tools, openssl and curl (the browser's certificate store, the test CA, the client)" >&2
  sudo=""
  if [ "$(id -u)" != "0" ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends libnss3-tools openssl curl >/dev/null
fi
rm -rf "$out"
mkdir -p "$out"
work=$(mktemp -d /tmp/stratus-https.XXXXXX)
chmod 755 "$work"
pid=""
stop() {
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap stop EXIT
Deploy/tls/make-certs.sh "$work/certs" 2>/dev/null
cp "$work/certs/server.pem" "$work/certs/live.pem"
cp "$work/certs/server.key" "$work/certs/live.key"
# Chromium on Linux trusts what the NSS database under $HOME/.pki says: a home of its own here.
export HOME="$work/home"
mkdir -p "$HOME/.pki/nssdb"
certutil -d "sql:$HOME/.pki/nssdb" -N --empty-password
certutil -d "sql:$HOME/.pki/nssdb" -A -t "C,," -n "Stratus throwaway test CA" -i "$work/certs/ca.pem"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port)
redirect=$(free_port)
admin=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
url="https://localhost:$port"
STRATUS_ADMIN_TOKEN=$admin "$binary" serve --data-dir "$work/data" --port "$port" --bcrypt-cost 4 --public-url "$url" \
  --tls-cert "$work/certs/live.pem" --tls-key "$work/certs/live.key" --redirect-http-port "$redirect" >"$out/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 120); do
  if curl -sf --cacert "$work/certs/ca.pem" "$url/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$pid" 2>/dev/null; then echo "https e2e: stratus serve exited; its log:" >&2; tail -40 "$out/server.log" >&2; exit 1; fi
  sleep 0.5
done
status=0
"$PYTHON_TOOLS/python" Deploy/tls/e2e.py "$url" "$admin" "$out" "$work/certs" "$pid" "$redirect" || status=1
if grep -q "internal error" "$out/server.log"; then
  echo "https e2e: the server logged internal errors:" >&2
  grep "internal error" "$out/server.log" | cut -c1-600 | head -20 >&2
  status=1
fi
exit "$status"

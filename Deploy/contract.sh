#!/usr/bin/env bash
# The published contract, checked against a live `stratus serve` (its own embedded PostgreSQL, in
# a temporary folder), using the binary a build left in .build/debug (or $STRATUS_BINARY):
#   1. the OpenAPI document validates (openapi-spec-validator, OpenAPI 3.1);
#   2. swift-openapi-generator generates a client from it that compiles (Deploy/openapi-client),
#      and that client works against the server (StratusClientCheck);
#   3. schemathesis fuzzes every operation with real credentials (Deploy/fuzz/api.py): examples,
#      coverage and fuzzing phases, up to STRATUS_FUZZ_API_SECONDS (default 120) in all.
# Fails on any finding, and on a server log line reporting an internal error. Reports go to
# .build/test-output/contract/.
set -euo pipefail
cd "$(dirname "$0")/.."
. Deploy/lib.sh
ensure_python_tools
binary=${STRATUS_BINARY:-.build/debug/stratus}
seconds=${STRATUS_FUZZ_API_SECONDS:-120}
reports=.build/test-output/contract
rm -rf "$reports"
mkdir -p "$reports"

echo "contract: validating Sources/StratusServer/Resources/openapi.json"
openapi-spec-validator Sources/StratusServer/Resources/openapi.json

echo "contract: generating and building a client with swift-openapi-generator"
swift build --package-path Deploy/openapi-client --scratch-path .build/openapi-client >"$reports/client-build.log" 2>&1 || {
  echo "contract: the generated client did not build:" >&2
  grep -E "error|warning: .*openapi" "$reports/client-build.log" | sort -u | head -40 >&2
  exit 1
}

work=$(mktemp -d /tmp/stratus-contract.XXXXXX)
chmod 755 "$work"
admin=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log="$reports/server.log"
STRATUS_ADMIN_TOKEN=$admin "$binary" serve --data-dir "$work/data" --port "$port" --bcrypt-cost 4 >"$log" 2>&1 &
server=$!
stop() {
  kill -TERM "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap stop EXIT
for _ in $(seq 1 120); do
  if python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" "http://127.0.0.1:$port/health" 2>/dev/null; then break; fi
  if ! kill -0 "$server" 2>/dev/null; then
    echo "contract: stratus serve exited; its log:" >&2
    tail -40 "$log" >&2
    exit 1
  fi
  sleep 0.5
done
status=0
.build/openapi-client/debug/StratusClientCheck "http://127.0.0.1:$port" "$admin" || status=1
"$PYTHON_TOOLS/python" Deploy/fuzz/api.py "http://127.0.0.1:$port" "$admin" "$seconds" "$reports" || status=1
if grep -q "internal error" "$log"; then
  echo "contract: the server logged internal errors:" >&2
  grep "internal error" "$log" | cut -c1-600 | head -20 >&2
  status=1
fi
exit "$status"

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

log="$reports/server.log"
trap stop_test_server EXIT
start_test_server "$binary" "$log"
admin=$SERVER_ADMIN
port=${SERVER_URL##*:}
status=0
.build/openapi-client/debug/StratusClientCheck "http://127.0.0.1:$port" "$admin" || status=1
"$PYTHON_TOOLS/python" Deploy/fuzz/api.py "http://127.0.0.1:$port" "$admin" "$seconds" "$reports" || status=1
if grep -q "internal error" "$log"; then
  echo "contract: the server logged internal errors:" >&2
  grep "internal error" "$log" | cut -c1-600 | head -20 >&2
  status=1
fi
exit "$status"

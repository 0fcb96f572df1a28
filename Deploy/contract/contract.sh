#!/usr/bin/env bash
# The published contract, checked against a live `stratus serve` (its own embedded PostgreSQL, in
# a temporary folder), using the binary a build left in .build/debug (or $STRATUS_BINARY):
#   1. the OpenAPI document validates (openapi-spec-validator, OpenAPI 3.1);
#   2. schemathesis fuzzes every operation with real credentials (Deploy/fuzz/api.py): examples,
#      coverage and fuzzing phases, up to STRATUS_FUZZ_API_SECONDS (default 120) in all;
#   3. swift-openapi-generator generates a client from it that compiles (Deploy/contract/openapi-client),
#      and that client works against a server of its own (StratusClientCheck). The client is built
#      in the background (niced) while schemathesis runs, which leaves a core mostly idle.
# Fails on any finding, and on a server log line reporting an internal error. Reports go to
# .build/test-output/contract/.
set -euo pipefail
cd "$(dirname "$0")/../.."
. Deploy/lib.sh
ensure_python_tools
binary=${STRATUS_BINARY:-.build/debug/stratus}
seconds=${STRATUS_FUZZ_API_SECONDS:-120}
reports=.build/test-output/contract
rm -rf "$reports"
mkdir -p "$reports"

echo "contract: validating Sources/StratusServer/Resources/openapi.json"
openapi-spec-validator Sources/StratusServer/Resources/openapi.json

echo "contract: generating and building a client with swift-openapi-generator (in the background)"
# When `Deploy/test.sh` started this build already, this one waits for it (SwiftPM's lock) and
# then has little left to do (about 20 s: the generator's plugin runs again).
nice -n 19 swift build --package-path Deploy/contract/openapi-client --scratch-path .build/openapi-client >"$reports/client-build.log" 2>&1 &
client_build=$!

status=0
serve() {  # serve LOG: a server of its own; sets admin and port
  trap stop_test_server EXIT
  start_test_server "$binary" "$1"
  admin=$SERVER_ADMIN
  port=${SERVER_URL##*:}
}
log="$reports/server.log"
serve "$log"
"$PYTHON_TOOLS/python" Deploy/fuzz/api.py "http://127.0.0.1:$port" "$admin" "$seconds" "$reports" || status=1
stop_test_server

if ! wait "$client_build"; then
  echo "contract: the generated client did not build:" >&2
  grep -E "error|warning: .*openapi" "$reports/client-build.log" | sort -u | head -40 >&2
  exit 1
fi
# A server that schemathesis has not been at (its sign-ups count against the same limits).
client_log="$reports/client-server.log"
serve "$client_log"
.build/openapi-client/debug/StratusClientCheck "http://127.0.0.1:$port" "$admin" || status=1
for server_log in "$log" "$client_log"; do
  if grep -q "internal error" "$server_log"; then
    echo "contract: the server logged internal errors ($server_log):" >&2
    grep "internal error" "$server_log" | cut -c1-600 | head -20 >&2
    status=1
  fi
done
exit "$status"

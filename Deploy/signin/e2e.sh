#!/usr/bin/env bash
# Where the sign-in page hands a session, in a real browser: starts the built `stratus serve` (its
# own embedded PostgreSQL, in a temporary folder; the binary a build left in .build/debug, or
# $STRATUS_BINARY) and drives apps on registered and unregistered origins through the sign-in
# popup with Playwright on Debian's Chromium (Deploy/signin/e2e.py). Screenshots go to
# .build/test-output/signin-origins/. Run by Deploy/test.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
. Deploy/lib.sh
ensure_browser
ensure_python_tools
binary=${STRATUS_BINARY:-.build/debug/stratus}
out=.build/test-output/signin-origins
rm -rf "$out"
mkdir -p "$out"
trap stop_test_server EXIT
start_test_server "$binary" "$out/server.log"
status=0
"$PYTHON_TOOLS/python" Deploy/signin/e2e.py "$SERVER_URL" "$SERVER_ADMIN" "$out" || status=1
if grep -q "internal error" "$out/server.log"; then
  echo "sign-in origins: the server logged internal errors:" >&2
  grep "internal error" "$out/server.log" | cut -c1-600 | head -20 >&2
  status=1
fi
exit "$status"

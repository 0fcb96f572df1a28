#!/usr/bin/env bash
# The console in a real browser: starts the built `stratus serve` (its own embedded PostgreSQL, in
# a temporary folder; the binary a build left in .build/debug, or $STRATUS_BINARY) and drives
# the console with Playwright on Debian's Chromium (Deploy/console/e2e.py). Screenshots of every
# page go to .build/test-output/console/. Run by Deploy/test.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
. Deploy/lib.sh
ensure_browser
ensure_python_tools
binary=${STRATUS_BINARY:-.build/debug/stratus}
out=.build/test-output/console
rm -rf "$out"
mkdir -p "$out"
trap stop_test_server EXIT
start_test_server "$binary" "$out/server.log"
status=0
"$PYTHON_TOOLS/python" Deploy/console/e2e.py "$SERVER_URL" "$SERVER_ADMIN" "$out" || status=1
if grep -q "internal error" "$out/server.log"; then
  echo "console: the server logged internal errors:" >&2
  grep "internal error" "$out/server.log" | cut -c1-600 | head -20 >&2
  status=1
fi
exit "$status"

#!/usr/bin/env bash
# The console in a real browser: starts the built `stratus serve` (its own embedded PostgreSQL, in
# a temporary folder; the binary a build left in .build/debug, or $STRATUS_BINARY) and drives
# the console with Playwright on Debian's Chromium (Deploy/console/e2e.py). Screenshots of every
# page go to .build/test-output/console/. Run by Deploy/test.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
. Deploy/lib.sh
browser_check "console" Deploy/console/e2e.py .build/test-output/console

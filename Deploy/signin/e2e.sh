#!/usr/bin/env bash
# Where the sign-in page hands a session, in a real browser: starts the built `stratus serve` (its
# own embedded PostgreSQL, in a temporary folder; the binary a build left in .build/debug, or
# $STRATUS_BINARY) and drives apps on registered and unregistered origins through the sign-in
# popup with Playwright on Debian's Chromium (Deploy/signin/e2e.py). Screenshots go to
# .build/test-output/signin-origins/. Run by Deploy/test.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
. Deploy/lib.sh
browser_check "sign-in origins" Deploy/signin/e2e.py .build/test-output/signin-origins

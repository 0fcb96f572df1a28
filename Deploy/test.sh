#!/usr/bin/env bash
# Runs the whole test suite against a real PostgreSQL (an embedded cluster the tests start
# themselves under the temporary folder). Installs PostgreSQL when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
. Deploy/lib.sh
ensure_postgres
swift build --build-tests
swift test --skip-build "$@"

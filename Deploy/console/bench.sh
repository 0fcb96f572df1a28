#!/usr/bin/env bash
# The console's page times at scale: a release `stratus serve` (its own embedded PostgreSQL, in a
# temporary folder), STRATUS_CONSOLE_RECORDS records (default 1,000,000) seeded by `stratus-bench
# seed` into 4 containers (one user each: a single user may not store 1 GiB nor write more than
# 10,000 records a second by default), then Deploy/console/bench.py times each page of the first.
# The performance goal: every page at most 50 ms at the 95th percentile (the records pages of a
# user's private database included).
#
#   Deploy/console/bench.sh [REQUESTS per page, default 200]
set -euo pipefail
cd "$(dirname "$0")/../.."
. Deploy/lib.sh
ensure_postgres
records=${STRATUS_CONSOLE_RECORDS:-1000000}
echo "== building stratus (release)" >&2
build_release >&2
binary=$PWD/.build/release/stratus
out=.build/test-output/console-bench
mkdir -p "$out"
trap stop_test_server EXIT
start_test_server "$binary" "$out/server.log"
echo "== seeding 4 containers with $records records in all" >&2
"$PWD/.build/release/stratus-bench" seed --server "$SERVER_URL" --admin-token "$SERVER_ADMIN" --state-file "$SERVER_WORK/state.json" \
  --containers 4 --records $((records / 4)) --zones 4 --concurrency 8 >&2
python3 Deploy/console/bench.py "$SERVER_URL" "$SERVER_ADMIN" "$SERVER_WORK/state.json" "${1:-200}"

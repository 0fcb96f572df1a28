#!/usr/bin/env bash
# The end-to-end families of the test suite on a live Citus cluster: builds Citus when it is
# missing (Deploy/citus/build.sh), starts a coordinator and two workers of its own
# (Deploy/citus/cluster.sh up, in a temporary folder, on ports 19180+), and runs the families
# with STRATUS_TEST_CITUS: the test process sets up one database on every node, migrated and
# distributed by Deploy/citus/distribute.sql, and each test gets a copy of it on every node
# (CREATE DATABASE … TEMPLATE) and its own Stratus app on the coordinator. Afterwards it lists
# every statement the coordinator ran on more than one worker (citus.multi_task_query_log_level):
# the request path has none; what is listed is maintenance. Then moves a busy container to the
# other worker under load (Deploy/citus/move.py). Run by Deploy/test.sh when the vendored Citus
# source is there.
#
#   Deploy/citus/suite.sh [--filter REGEX]
set -euo pipefail
cd "$(dirname "$0")/../.."
. Deploy/lib.sh
filter='Stratus(Server|CLI)Tests\.((RecordFlowTests|QueryMatchTests|LocationQueryTests|TokenSearchTests|SharingTests|QuotaEnforcementTests|NotificationTests|AssetTests|ContainerTransferTests|UserDataTests|ZoneTests|AuthTests|FeedExactnessTests|ChangeFeedVisibilityTests|PlannerStatisticsTests|PreparedCommitFeedTests|RequestLogTests|KnownZoneTests|IndexBuildTests|PushRegistrationTests|CitusRoutingTests)/|ReliabilityTests/(atomicBatch|racingWriters))'
while [ "$#" -gt 0 ]; do
  case $1 in
    --filter) filter=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "citus suite: unknown option $1" >&2; exit 64 ;;
  esac
done
Deploy/citus/build.sh
dir=$(mktemp -d /tmp/stratus-citus-suite.XXXXXX)
chmod 755 "$dir"
port=19180
stop() { Deploy/citus/cluster.sh down --dir "$dir" --port "$port" >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap stop EXIT
STRATUS_BCRYPT_COST=4 Deploy/citus/cluster.sh up --dir "$dir" --port "$port" --bin "$PWD/.build/debug/stratus" >/dev/null
coordinator=$((port + 10))
# Multi-worker statements are logged with their text, for the list below.
as_postgres /usr/lib/postgresql/15/bin/psql -X -q -h 127.0.0.1 -p "$coordinator" -U postgres -d postgres \
  -c "ALTER SYSTEM SET citus.multi_task_query_log_level = 'log'" -c "ALTER SYSTEM SET log_min_error_statement = 'log'" \
  -c "SELECT pg_reload_conf()" >/dev/null
started=$(date +%s)
status=0
# The transfer test writes 4,000 records here instead of 20,000: writes cost far more on Citus
# (Deploy/PERFORMANCE.md, "On Citus"), and the export and import paths are the same at either size.
# Three test apps at a time, not six (STRATUS_TEST_WIDTH): with three PostgreSQL servers on the
# same two cores, six left requests waiting past their clients' limits (a read timeout in
# QuotaEnforcementTests); three took as long in all (955 s against 948 s) and passed.
STRATUS_TEST_WIDTH=${STRATUS_TEST_WIDTH:-3} STRATUS_TRANSFER_RECORDS=4000 STRATUS_TEST_CITUS="$coordinator,$((port + 11)),$((port + 12))" \
  timeout --signal=INT --kill-after=60 1500 \
  swift test --skip-build --filter "$filter" || status=$?
echo "citus suite: the families ran in $(( $(date +%s) - started )) s on a coordinator and two workers"
# A busy container moved to the other worker under writers and a feed reader (through the
# cluster's own two `stratus serve` and HAProxy).
python3 Deploy/citus/move.py "$dir/cluster.env" || status=1
log="$dir/postgres/coordinator.log"
if [ -f "$log" ]; then
  echo "citus suite: statements the coordinator ran on more than one worker (each once; the request path has none):"
  # Each statement's first two lines (a CTE's first line alone names too little).
  awk '/multi-task query about to be executed/ { want = 1; next }
       want && /STATEMENT:/ { sub(/.*STATEMENT: */, ""); text = $0; getline; if ($0 ~ /^\t/) { sub(/^\t */, ""); text = text " " $0 }
                              print substr(text, 1, 160); want = 0 }' "$log" \
    | sort | uniq -c | sort -rn | sed 's/^/  /' || true
fi
exit "$status"

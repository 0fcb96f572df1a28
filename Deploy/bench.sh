#!/usr/bin/env bash
# Side-by-side benchmark: for each workload, the raw-PostgreSQL baseline (pgbench running the SQL
# the service itself runs, on the service's own tables and data) and then `stratus bench` for the
# same workload, data and concurrency, each after a CHECKPOINT. Prints a table of ratios.
#
#   Deploy/bench.sh [--containers N] [--records N] [--duration S] [--concurrency N] [--workloads "lookup modify …"]
#
# Everything runs on 127.0.0.1: a throwaway PostgreSQL cluster (tuned as in
# shared/reference/performance.md §2.1) and a release build of `stratus serve`, both stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
. Deploy/lib.sh

CONTAINERS=100
RECORDS=1000
DURATION=15
CONCURRENCY=16
WORKLOADS="lookup modify batch query-eq query-range changes mixed"
while [ $# -gt 0 ]; do
  case "$1" in
    --containers) CONTAINERS=$2; shift 2;;
    --records) RECORDS=$2; shift 2;;
    --duration) DURATION=$2; shift 2;;
    --concurrency) CONCURRENCY=$2; shift 2;;
    --workloads) WORKLOADS=$2; shift 2;;
    -h|--help) sed -n 2,10p "$0"; exit 0;;
    *) echo "unknown option $1" >&2; exit 64;;
  esac
done

ensure_postgres
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
echo "== building stratus (release)" >&2
swift build -c release --product stratus >&2
BIN=$PWD/.build/release/stratus
WORK=${STRATUS_BENCH_DIR:-/tmp/stratus-bench}
PGPORT=55433
HTTPPORT=18080
rm -rf "$WORK"; mkdir -p "$WORK"
AS=""
if [ "$(id -u)" = "0" ]; then chown postgres "$WORK"; AS="runuser -u postgres --"; fi

cleanup() {
  [ -n "${SERVER_PID:-}" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true
  $AS "$PGBIN/pg_ctl" -D "$WORK/pg" -m fast stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

echo "== starting PostgreSQL on 127.0.0.1:$PGPORT" >&2
$AS "$PGBIN/initdb" -D "$WORK/pg" -U postgres --auth=trust -E UTF8 --locale=C >/dev/null
cat >> "$WORK/pg/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PGPORT
unix_socket_directories = ''
shared_buffers = 1GB
effective_cache_size = 12GB
work_mem = 16MB
maintenance_work_mem = 1GB
max_connections = 200
max_wal_size = 8GB
checkpoint_timeout = 15min
wal_buffers = 64MB
random_page_cost = 1.1
CONF
$AS "$PGBIN/pg_ctl" -D "$WORK/pg" -l "$WORK/pg.log" -w start >/dev/null
PSQL="psql -h 127.0.0.1 -p $PGPORT -U postgres -d postgres -qAt"

export STRATUS_ADMIN_TOKEN=bench-admin
export STRATUS_SERVER=http://127.0.0.1:$HTTPPORT
echo "== starting stratus serve on $STRATUS_SERVER" >&2
STRATUS_LOG_LEVEL=warning "$BIN" serve --port $HTTPPORT --database-url "postgres://postgres@127.0.0.1:$PGPORT/postgres" > "$WORK/serve.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 120); do curl -sf "$STRATUS_SERVER/health" >/dev/null && break; sleep 0.5; done

echo "== seeding $CONTAINERS containers x $RECORDS records through the API" >&2
"$BIN" bench seed --containers "$CONTAINERS" --records "$RECORDS" --state-file "$WORK/state.json" >&2
$PSQL -c "CREATE TABLE bench_zones AS SELECT row_number() OVER (ORDER BY container_id, zone_id) AS i, container_id, zone_id FROM zones WHERE zone_name LIKE 'z%'"
$PSQL -c "ALTER TABLE bench_zones ADD PRIMARY KEY (i)"
$PSQL -c "VACUUM ANALYZE"
ZONES=$($PSQL -c "SELECT count(*) FROM bench_zones")
PER_ZONE=$(( RECORDS / 4 ))

RESULTS="$WORK/results.tsv"
: > "$RESULTS"
for workload in $WORKLOADS; do
  script="Deploy/pgbench/$workload.sql"
  baseline="-"
  if [ -f "$script" ]; then
    $PSQL -c "CHECKPOINT"
    baseline=$(pgbench -h 127.0.0.1 -p $PGPORT -U postgres -n -M prepared -c "$CONCURRENCY" -j 2 -T "$DURATION" \
      -D zones="$ZONES" -D per_zone="$PER_ZONE" -f "$script" postgres 2>&1 | sed -nE 's/^tps = ([0-9.]+) .*/\1/p' | head -1)
    baseline=${baseline:-0}
  elif [ "$workload" = "mixed" ]; then
    $PSQL -c "CHECKPOINT"
    baseline=$(pgbench -h 127.0.0.1 -p $PGPORT -U postgres -n -M prepared -c "$CONCURRENCY" -j 2 -T "$DURATION" \
      -D zones="$ZONES" -D per_zone="$PER_ZONE" -f Deploy/pgbench/lookup.sql@50 -f Deploy/pgbench/query-eq.sql@15 \
      -f Deploy/pgbench/changes.sql@20 -f Deploy/pgbench/modify.sql@15 postgres 2>&1 | sed -nE 's/^tps = ([0-9.]+) .*/\1/p' | head -1)
    baseline=${baseline:-0}
  fi
  $PSQL -c "CHECKPOINT"
  json=$("$BIN" bench --workload "$workload" --concurrency "$CONCURRENCY" --duration "$DURATION" --state-file "$WORK/state.json" --json 2>/dev/null)
  rps=$(echo "$json" | sed -nE 's/.*"requestsPerSecond":([0-9.]+).*/\1/p')
  recs=$(echo "$json" | sed -nE 's/.*"recordsPerSecond":([0-9.]+).*/\1/p')
  p50=$(echo "$json" | sed -nE 's/.*"p50":([0-9.]+).*/\1/p')
  p99=$(echo "$json" | sed -nE 's/.*"p99":([0-9.]+).*/\1/p')
  errors=$(echo "$json" | sed -nE 's/.*"errors":([0-9]+).*/\1/p')
  rss=$(echo "$json" | sed -nE 's/.*"serverRSSBytes":([0-9]+).*/\1/p')
  printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$workload" "$baseline" "$rps" "$recs" "$p50" "$p99" "$errors" "$(( ${rss:-0} / 1048576 ))" >> "$RESULTS"
  echo "   $workload: baseline $baseline tps, service $rps req/s" >&2
done

echo
echo "Stratus vs. pgbench on the same tables and data — $CONTAINERS containers x $RECORDS records, $CONCURRENCY connections, ${DURATION}s each"
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, $(uname -r), PostgreSQL $($PSQL -c 'SHOW server_version' | cut -d' ' -f1)"
printf "%-12s %12s %12s %8s %12s %9s %9s %7s %8s\n" workload "pgbench tps" "service r/s" ratio "records/s" "p50 ms" "p99 ms" errors "RSS MB"
while IFS=$'\t' read -r w b r recs p50 p99 e rss; do
  ratio=$(awk -v r="$r" -v b="$b" 'BEGIN { if (b > 0) printf "%.0f%%", 100 * r / b; else print "-" }')
  printf "%-12s %12s %12s %8s %12s %9s %9s %7s %8s\n" "$w" "$b" "$r" "$ratio" "$recs" "$p50" "$p99" "$e" "$rss"
done < "$RESULTS"

#!/usr/bin/env bash
# The lookup floor: how much of a lookup's server CPU is the service's own work, and how much any
# server on SwiftNIO and PostgresNIO would spend. `stratus serve` and the floor program
# (Deploy/bench/floor, see its main.swift) take turns answering the same `stratus-bench --workload
# lookup` on the same PostgreSQL and data, and each run's CPU per request is read from /proc.
#
#   Deploy/bench/floor.sh STRATUS_BINARY [--rounds N] [--duration S] [--concurrency N]
#                   [--containers N] [--records N] [--modes "shared single hello"]
#
# The floor parses HTTP with NIO's decoder, runs the service's own lookup statement through
# PostgresNIO and writes the row's cells back; it has no authentication, routing, JSON, logging,
# metrics or error handling. Its modes:
#   shared  statements shared between waiting requests, one at a time per event loop, as the
#           service shares them (the like-for-like comparison);
#   single  one statement per request;
#   hello   a fixed answer, no database: HTTP alone.
# Each line gives requests/s, server and PostgreSQL CPU µs per request, their ratio, and the
# lookup keys per statement (from pg_stat_statements). Statement sharing makes PostgreSQL's CPU
# per request depend on how many requests a statement serves, which depends on how fast the
# server is: compare the server's µs, and PostgreSQL's at similar keys per statement.
#
# Everything runs on 127.0.0.1: a throwaway PostgreSQL cluster (tuned as Deploy/bench/bench.sh's, with
# pg_stat_statements), seeded through the binary (100 containers × 1,000 records by default),
# stopped at the end. The floor is built on first use (a separate package; several minutes).
set -euo pipefail
cd "$(dirname "$0")/../.."
. Deploy/lib.sh

# The header above, up to the first line that is not a comment.
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; }
[ $# -ge 1 ] || { usage; exit 64; }
case "$1" in -h|--help) usage; exit 0;; esac
STRATUS=$(realpath "$1"); shift
ROUNDS=5
DURATION=8
CONCURRENCY=16
CONTAINERS=100
RECORDS=1000
MODES="shared single hello"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2;;
    --duration) DURATION=$2; shift 2;;
    --concurrency) CONCURRENCY=$2; shift 2;;
    --containers) CONTAINERS=$2; shift 2;;
    --records) RECORDS=$2; shift 2;;
    --modes) MODES=$2; shift 2;;
    -h|--help) usage; exit 0;;
    *) echo "unknown option $1 (see --help)" >&2; exit 64;;
  esac
done
[ -x "$STRATUS" ] || { echo "$STRATUS is not an executable" >&2; exit 64; }
# The load generator: beside the binary measured, else this tree's (STRATUS_BENCH to name another).
BENCH=${STRATUS_BENCH:-$(dirname "$STRATUS")/stratus-bench}
[ -x "$BENCH" ] || BENCH=$PWD/.build/release/stratus-bench
if [ ! -x "$BENCH" ]; then echo "== building stratus-bench (release)" >&2; build_release >&2; fi
[[ "$ROUNDS" =~ ^[1-9][0-9]?$ ]] || { echo "--rounds must be 1-99" >&2; exit 64; }
[[ "$DURATION" =~ ^[1-9][0-9]*$ ]] || { echo "--duration must be a whole number of seconds" >&2; exit 64; }
for mode in $MODES; do
  case "$mode" in shared|single|hello) ;; *) echo "--modes: $mode is not shared, single or hello" >&2; exit 64;; esac
done

WORK=${STRATUS_BENCH_DIR:-/tmp/stratus-floor}
echo "== building the floor (Deploy/bench/floor)" >&2
swift build -c release --package-path Deploy/bench/floor --scratch-path "$WORK-build" >&2
FLOOR=$WORK-build/release/floor

ensure_postgres
pg_bin
PGPORT=55435
HTTPPORT=18083
rm -rf "$WORK"; mkdir -p "$WORK"
SERVER_PID=""
stop_server() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""; fi
}
cleanup() {
  stop_server
  pg_stop "$WORK/pg"
}
trap cleanup EXIT

echo "== starting PostgreSQL on 127.0.0.1:$PGPORT" >&2
pg_create "$WORK/pg" --locale=C
bench_postgres_settings $PGPORT >> "$WORK/pg/postgresql.conf"
echo "shared_preload_libraries = 'pg_stat_statements'" >> "$WORK/pg/postgresql.conf"
pg_start "$WORK/pg" "$WORK/pg.log"
sql() { psql -h 127.0.0.1 -p $PGPORT -U postgres -d postgres -Atq -c "$1"; }
sql "CREATE EXTENSION pg_stat_statements"

export STRATUS_ADMIN_TOKEN=floor-admin
export STRATUS_SERVER=http://127.0.0.1:$HTTPPORT
# serve <service|shared|single|hello>: (re)starts the service or the floor on the benchmark's port.
serve() {
  stop_server
  if [ "$1" = service ]; then
    STRATUS_LOG_LEVEL=warning "$STRATUS" serve --port $HTTPPORT --bcrypt-cost 4 \
      --database-url "postgres://postgres@127.0.0.1:$PGPORT/postgres" > "$WORK/serve.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 120); do curl -sf "$STRATUS_SERVER/health" >/dev/null && return 0; sleep 0.5; done
  else
    "$FLOOR" "$1" $HTTPPORT $PGPORT > "$WORK/serve.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 100); do grep -q "^floor:" "$WORK/serve.log" && return 0; sleep 0.2; done
  fi
  echo "$1 did not start; $WORK/serve.log:" >&2; tail -20 "$WORK/serve.log" >&2; exit 1
}

serve service
echo "== seeding $CONTAINERS containers x $RECORDS records through the API" >&2
"$BENCH" seed --containers "$CONTAINERS" --records "$RECORDS" --state-file "$WORK/state.json" >&2

# The lookup statements' calls and rows so far (one row per key), service's and floor's alike.
lookup_statements() {
  sql "SELECT coalesce(sum(calls), 0) || ' ' || coalesce(sum(rows), 0) FROM pg_stat_statements
       WHERE query LIKE '%AS k(i, c, e, d, o, zn, n)%' OR query LIKE '%AND z.owner = \$4 AND z.zone_name = \$5 AND NOT z.deleted%'"
}

# run <service|shared|single|hello>: one measured run, after a second of warm-up; prints its line
# and appends "<what> <requests/s> <server µs> <PostgreSQL µs> <keys per statement>" to $WORK/runs.
run() {
  serve "$1"
  "$BENCH" --workload lookup --concurrency "$CONCURRENCY" --duration 1 --state-file "$WORK/state.json" >/dev/null 2>&1
  local json server0 server1 pg0 pg1 statements0 statements1 hz
  hz=$(getconf CLK_TCK)
  statements0=$(lookup_statements)
  server0=$(awk '{ print $14 + $15 }' "/proc/$SERVER_PID/stat"); pg0=$(postgres_cpu_ticks "$WORK/pg")
  json=$("$BENCH" --workload lookup --concurrency "$CONCURRENCY" --duration "$DURATION" --state-file "$WORK/state.json" --json 2>/dev/null)
  server1=$(awk '{ print $14 + $15 }' "/proc/$SERVER_PID/stat"); pg1=$(postgres_cpu_ticks "$WORK/pg")
  statements1=$(lookup_statements)
  python3 - "$1" "$json" $(( server1 - server0 )) $(( pg1 - pg0 )) "$hz" "$statements0" "$statements1" <<'PY' | tee -a "$WORK/runs"
import json, sys
what, result, server, pg, hz = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
(calls0, rows0), (calls1, rows1) = (map(int, s.split()) for s in sys.argv[6:8])
n = result["requests"]
if result.get("errors"):
    sys.exit(f"{what}: {result['errors']} errors")
server_us, pg_us = server * 1e6 / hz / n, pg * 1e6 / hz / n
keys = (rows1 - rows0) / (calls1 - calls0) if calls1 > calls0 else 0
print(f"{what} {result['requestsPerSecond']:.0f} {server_us:.1f} {pg_us:.1f} {keys:.1f}")
PY
  stop_server
}

echo "lookup at $CONCURRENCY connections, ${DURATION}s a run, $ROUNDS rounds; per run: requests/s, server + PostgreSQL CPU µs per request, keys per statement"
: > "$WORK/runs"
for round in $(seq 1 "$ROUNDS"); do
  # The service first in odd rounds, last in even ones.
  order="service $MODES"
  [ $((round % 2)) = 0 ] && order="$MODES service"
  for what in $order; do
    run "$what" > /dev/null
    read -r name rate server pg keys < <(tail -1 "$WORK/runs")
    if [ "$name" = hello ]; then
      printf "round %2d  %-8s %7s req/s  server %6s µs\n" "$round" "$name" "$rate" "$server"
    else
      printf "round %2d  %-8s %7s req/s  server %6s µs  PostgreSQL %6s µs  server/PostgreSQL %s  keys/statement %s\n" \
        "$round" "$name" "$rate" "$server" "$pg" "$(python3 -c "import sys; s, p = map(float, sys.argv[1:]); print(f'{s / p:.2f}')" "$server" "$pg")" "$keys"
    fi
  done
done
# The floor must run the service's statements: PostgreSQL files the same statement from both under
# one entry, so more than two lookup entries (the single and the shared statement) means they differ.
if [ "$(sql "SELECT count(*) FROM pg_stat_statements WHERE query LIKE '%AS k(i, c, e, d, o, zn, n)%' OR query LIKE '%AND z.owner = \$4 AND z.zone_name = \$5 AND NOT z.deleted%'")" -gt 2 ]; then
  echo "warning: the floor's lookup statements differ from the service's; bring Deploy/bench/floor/Sources/floor/main.swift in line with Prepared.Lookup and Prepared.LookupMany" >&2
fi
python3 - "$WORK/runs" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    what, *values = line.split()
    runs.setdefault(what, []).append(tuple(map(float, values)))
print("medians:")
for what, rows in runs.items():
    rate, server, pg, keys = (statistics.median(r[i] for r in rows) for i in range(4))
    if what == "hello":
        print(f"  {what:<8} {rate:7.0f} req/s  server {server:6.1f} µs")
    else:
        ratio = statistics.median(r[1] / r[2] for r in rows)
        print(f"  {what:<8} {rate:7.0f} req/s  server {server:6.1f} µs  PostgreSQL {pg:6.1f} µs  server/PostgreSQL {ratio:.2f}  keys/statement {keys:.1f}")
PY

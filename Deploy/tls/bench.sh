#!/usr/bin/env bash
# The cost of HTTPS served by Stratus itself: the same workloads over plain HTTP and over TLS,
# side by side, on one PostgreSQL, from one load generator (wrk, Debian's package, which keeps
# its connections alive: one handshake per connection, not per request).
#
#   Deploy/tls/bench.sh [--duration S] [--connections N] [--rounds N] [--workloads "lookup create mixed"]
#
# Builds the release binary, starts a PostgreSQL 15 of its own (as the postgres account when
# root) and two `stratus serve` on it: one in plain HTTP, one with --tls-cert/--tls-key (a
# throwaway certificate, Deploy/tls/make-certs.sh: ECDSA P-256, TLS 1.3 as curl and browsers
# negotiate it). Seeds 10 containers of 1,000 records with `stratus-bench seed`, then per
# workload and round runs wrk against each server in turn and reports requests/s, the latency
# percentiles and the server's CPU per request (utime+stime of its process, from /proc), and the
# TLS server's connections during the run (keep-alive: as many as wrk opened). Workloads, as
# `stratus-bench` shapes them: lookup (one record by name), create (one new record), mixed (50 %
# lookups, 15 % equality queries, 20 % change-feed pages, 15 % updates).
set -euo pipefail
cd "$(dirname "$0")/../.."
. Deploy/lib.sh
DURATION=10
CONNECTIONS=16
ROUNDS=2
WORKLOADS="lookup create mixed"
while [ $# -gt 0 ]; do
  case $1 in
    --duration) DURATION=$2; shift 2 ;;
    --connections) CONNECTIONS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --workloads) WORKLOADS=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "bench-tls.sh: unknown option $1 (see --help)" >&2; exit 64 ;;
  esac
done
command -v wrk >/dev/null 2>&1 || { echo "bench-tls.sh: installing Debian's wrk" >&2; apt-get install -y -qq wrk >/dev/null; }
build_release >&2
BIN=$PWD/.build/release/stratus
BENCH=$PWD/.build/release/stratus-bench
pg_bin
WORK=$(mktemp -d /tmp/stratus-bench-tls.XXXXXX)
chmod 755 "$WORK"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PGPORT=$(free_port)
PLAIN=$(free_port)
SECURE=$(free_port)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  pg_stop "$WORK/pg"
  rm -rf "$WORK"
}
trap cleanup EXIT
pg_create "$WORK/pg" --locale=C
{ echo "port = $PGPORT"; echo "listen_addresses = '127.0.0.1'"; echo "unix_socket_directories = '$WORK'"
  echo "shared_buffers = 512MB"; echo "max_connections = 100"; } >>"$WORK/pg/postgresql.conf"
pg_start "$WORK/pg" "$WORK/pg.log"
Deploy/tls/make-certs.sh "$WORK/certs" 2>/dev/null
ADMIN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
DB="postgres://postgres@127.0.0.1:$PGPORT/postgres"
STRATUS_ADMIN_TOKEN=$ADMIN STRATUS_LOG_LEVEL=warning "$BIN" serve --port "$PLAIN" --bcrypt-cost 4 --database-url "$DB" \
  --data-dir "$WORK/plain" >"$WORK/plain.log" 2>&1 &
pids+=("$!")
PLAIN_PID=$!
wait_for "http://127.0.0.1:$PLAIN/health" 120
STRATUS_ADMIN_TOKEN=$ADMIN STRATUS_LOG_LEVEL=warning "$BIN" serve --port "$SECURE" --bcrypt-cost 4 --database-url "$DB" \
  --data-dir "$WORK/secure" --tls-cert "$WORK/certs/server.pem" --tls-key "$WORK/certs/server.key" >"$WORK/secure.log" 2>&1 &
pids+=("$!")
SECURE_PID=$!
wait_for "https://localhost:$SECURE/health" 120 "$WORK/certs/ca.pem"
"$BENCH" seed --server "http://127.0.0.1:$PLAIN" --admin-token "$ADMIN" --containers 10 --records 1000 --state-file "$WORK/state.json" >&2

# The requests, shaped as `stratus-bench` shapes them, written as a Lua table wrk cycles through;
# "@N@" in a body becomes a number unique to the request (new record names).
python3 - "$WORK/state.json" "$WORK" <<'PY'
import json, random, sys
state = json.load(open(sys.argv[1]))
tenants, per_zone = state["tenants"], state["recordsPerZone"]
notes = "0123456789abcdef" * 52
def fields(index, rank, prefix):
    return ('{"title":{"value":"%s%d"},"rank":{"value":%d},"createdBy":{"value":"user-%d"},"done":{"value":%d},'
            '"tags":{"value":["a%d","b%d","c%d"]},"notes":{"value":"%s"}}') % (prefix, index % 25, rank, index % 37, index % 2, index % 7, index % 11, index % 13, notes)
def op(name, index, operation, prefix):
    return '{"operationType":"%s","record":{"recordType":"Item","recordName":"%s","fields":%s}}' % (operation, name, fields(index, random.randrange(1 << 20), prefix))
def request(kind):
    tenant = random.choice(tenants)
    zone = random.choice(tenant["zones"])
    base = "/database/1/%s/development/private/" % tenant["container"]
    query = "?" + tenant["query"]
    record = random.randrange(max(1, per_zone))
    if kind == "lookup":
        return base + "records/lookup" + query, '{"zoneID":{"zoneName":"%s"},"records":[{"recordName":"rec-%d"}]}' % (zone, record)
    if kind == "create":
        return base + "records/modify" + query, '{"zoneID":{"zoneName":"%s"},"operations":[%s]}' % (zone, op("tls-@N@", record, "create", "new-title-"))
    if kind == "modify":
        return base + "records/modify" + query, '{"zoneID":{"zoneName":"%s"},"operations":[%s]}' % (zone, op("rec-%d" % record, record, "forceUpdate", "title-"))
    if kind == "query-eq":
        title = random.randrange(max(1, per_zone // 10))
        return base + "records/query" + query, ('{"zoneID":{"zoneName":"%s"},"query":{"recordType":"Item","filterBy":[{"fieldName":"title",'
                                                '"comparator":"EQUALS","fieldValue":{"value":"title-%d"}}]}}') % (zone, title)
    if kind == "changes":
        return base + "changes/zone" + query, '{"zones":[{"zoneID":{"zoneName":"%s"},"resultsLimit":100}]}' % zone
    roll = random.randrange(100)
    return request("lookup" if roll < 50 else "query-eq" if roll < 65 else "changes" if roll < 85 else "modify")
for kind in ("lookup", "create", "mixed"):
    random.seed(7)
    with open("%s/%s.lua" % (sys.argv[2], kind), "w") as out:
        out.write("local requests = {\n")
        for _ in range(4000):
            path, body = request(kind)
            out.write("  {%s, %s},\n" % (json.dumps(path), json.dumps(body)))
        out.write("}\n")
        out.write('''
local counter, thread_tag = 0, tostring(math.random(1, 1000000000))
wrk.method = "POST"
wrk.headers["Content-Type"] = "text/plain"
request = function()
  counter = counter + 1
  local item = requests[(counter % #requests) + 1]
  local body = string.gsub(item[2], "@N@", thread_tag .. "-" .. counter)
  return wrk.format(nil, item[1], nil, body)
end
done = function(summary, latency, requests)
  io.write(string.format("RESULT %d %.1f %d %d %d %d\\n", summary.requests, summary.requests / (summary.duration / 1e6),
    latency:percentile(50), latency:percentile(99), summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout, 0))
end
''')
PY

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)
printf "| workload | transport | requests/s | p50 ms | p99 ms | server CPU µs/request | non-200 | connections |\n|---|---|---|---|---|---|---|---|\n"
for round in $(seq 1 "$ROUNDS"); do
  for workload in $WORKLOADS; do
    for transport in http https; do
      if [ "$transport" = http ]; then url="http://127.0.0.1:$PLAIN"; pid=$PLAIN_PID; else url="https://localhost:$SECURE"; pid=$SECURE_PID; fi
      before=$(cpu "$pid")
      ( sleep $((DURATION / 2)); ss -Htn state established "( sport = :$SECURE )" | wc -l >"$WORK/connections" ) &
      counter=$!
      out=$(wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --latency -s "$WORK/$workload.lua" "$url" 2>&1)
      after=$(cpu "$pid")
      wait "$counter"
      read -r _ total rate p50 p99 errors _ <<<"$(grep '^RESULT' <<<"$out")"
      non200=$(grep -o 'Non-2xx or 3xx responses: [0-9]*' <<<"$out" | grep -o '[0-9]*$' || echo 0)
      connections="-"
      if [ "$transport" = https ]; then connections=$(cat "$WORK/connections"); fi
      awk -v w="$workload" -v t="$transport" -v r="$rate" -v p50="$p50" -v p99="$p99" -v c=$((after - before)) -v n="$total" -v tick="$TICK" \
          -v bad="${non200:-0}" -v conn="$connections" \
        'BEGIN { printf "| %s | %s | %.0f | %.2f | %.2f | %.0f | %s | %s |\n", w, t, r, p50 / 1000, p99 / 1000, c * 1e6 / tick / n, bad, conn }'
    done
  done
done

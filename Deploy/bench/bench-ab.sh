#!/usr/bin/env bash
# Old against new, interleaved: two `stratus` binaries take turns serving the same workload on the
# same PostgreSQL and data, and each run's server CPU per request is compared with its partner's.
#
#   Deploy/bench/bench-ab.sh OLD_BINARY NEW_BINARY [--workloads "lookup query-eq"] [--pairs N]
#                      [--duration S] [--concurrency N] [--containers N] [--records N]
#                      [--no-flush] [--counts] [--profile]
#
# Why: on a shared virtual machine the speed of the cores swings by half within minutes (one
# release build measured between 85 and 132 µs of server CPU per lookup in one afternoon), so a
# change of a few percent cannot be told from two runs taken at different times, however long.
# Interleaving puts each old run next to a new one in the same phase of the machine; the median
# of the per-pair differences over many pairs is the figure to report.
#
# For each workload and pair: the old binary's `stratus serve` is started, `stratus-bench` runs
# against it for --duration seconds (after its own second of warm-up), the server stops; then
# the same with the new binary (the order alternates from pair to pair). Each line gives both
# runs' requests/s, server CPU µs per request (`stratus-bench` reads the server's getrusage
# through /management/1/stats) and PostgreSQL's (the cluster's processes, from /proc); the
# summary per workload gives, for each, how many pairs the new binary was cheaper in and the
# median and mean per-pair difference. Build the binaries first, e.g.
#   git worktree add /tmp/old <commit> && (cd /tmp/old && . Deploy/lib.sh && build_release)
#
# Everything runs on 127.0.0.1: a throwaway PostgreSQL cluster (tuned as Deploy/bench/bench.sh's),
# seeded through the old binary (100 containers × 1,000 records by default), stopped at the end;
# with --no-flush it answers commits before flushing them (bench.sh's create-nf and modify-nf).
#
# --counts (root, perf with uprobes): also counts, per request, the server's Swift object
# allocations (swift_allocObject), its executor switches (swift_task_switch) and its async frames
# (swift_task_alloc), from uprobes on the Swift runtime during each run and the requests the
# server's /metrics counted. Unlike CPU time these hardly move with the machine's speed (a little
# with how many requests share a statement), so a change of one allocation per request shows.
# The probes cost CPU themselves (each hit traps into the kernel): the CPU figures of a --counts
# run are not comparable with those of a run without it.
#
# --profile (root, perf): samples the new binary's server with call graphs during each of its runs
# (perf record -g, 499 Hz) into $WORK/profile-<workload>-<pair>.data and prints where the time
# went, by inclusive share of the samples, for the last pair (perf report --children).
set -euo pipefail
cd "$(dirname "$0")/../.."
. Deploy/lib.sh

# The header above, up to the first line that is not a comment.
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; }
[ $# -ge 2 ] || { usage; exit 64; }
case "$1" in -h|--help) usage; exit 0;; esac
OLD=$(realpath "$1"); NEW=$(realpath "$2"); shift 2
WORKLOADS="lookup"
PAIRS=8
DURATION=8
CONCURRENCY=16
CONTAINERS=100
RECORDS=1000
NO_FLUSH=""
COUNTS=""
PROFILE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --workloads) WORKLOADS=$2; shift 2;;
    --pairs) PAIRS=$2; shift 2;;
    --duration) DURATION=$2; shift 2;;
    --concurrency) CONCURRENCY=$2; shift 2;;
    --containers) CONTAINERS=$2; shift 2;;
    --records) RECORDS=$2; shift 2;;
    --no-flush) NO_FLUSH=1; shift;;
    --counts) COUNTS=1; shift;;
    --profile) PROFILE=1; shift;;
    -h|--help) usage; exit 0;;
    *) echo "unknown option $1 (see --help)" >&2; exit 64;;
  esac
done
for binary in "$OLD" "$NEW"; do [ -x "$binary" ] || { echo "$binary is not an executable" >&2; exit 64; }; done
# One load generator drives both builds: this tree's (STRATUS_BENCH to name another).
BENCH=${STRATUS_BENCH:-$PWD/.build/release/stratus-bench}
if [ ! -x "$BENCH" ]; then echo "== building stratus-bench (release)" >&2; build_release >&2; fi
[[ "$PAIRS" =~ ^[1-9][0-9]?$ ]] || { echo "--pairs must be 1-99" >&2; exit 64; }
[[ "$DURATION" =~ ^[1-9][0-9]*$ ]] || { echo "--duration must be a whole number of seconds" >&2; exit 64; }

ensure_postgres
if [ -n "$PROFILE" ]; then
  command -v perf >/dev/null && [ "$(id -u)" = "0" ] || { echo "--profile needs root and perf (Debian: linux-perf)" >&2; exit 64; }
fi
PROBES=""
if [ -n "$COUNTS" ]; then
  command -v perf >/dev/null && [ "$(id -u)" = "0" ] || { echo "--counts needs root and perf (Debian: linux-perf)" >&2; exit 64; }
  # The runtime's libraries as the new binary loads them; a probe that exists already is kept.
  for probe in libswiftCore.so:swift_allocObject libswift_Concurrency.so:swift_task_switch libswift_Concurrency.so:swift_task_alloc; do
    library=$(ldd "$NEW" | awk -v name="${probe%%:*}" '$1 == name { print $3 }')
    [ -n "$library" ] || { echo "--counts: $NEW does not load ${probe%%:*}" >&2; exit 64; }
    perf probe -q -x "$library" -a "${probe#*:}" 2>/dev/null || true
    event="probe_${probe%%.so:*}:${probe#*:}"
    [[ "$(perf list 2>/dev/null)" == *"$event"* ]] || { echo "--counts: could not place the uprobe $event" >&2; exit 64; }
    PROBES="${PROBES:+$PROBES,}$event"
  done
fi
pg_bin
WORK=${STRATUS_BENCH_DIR:-/tmp/stratus-bench-ab}
PGPORT=55434
HTTPPORT=18082
rm -rf "$WORK"; mkdir -p "$WORK"
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true
  pg_stop "$WORK/pg"
}
trap cleanup EXIT

echo "== starting PostgreSQL on 127.0.0.1:$PGPORT" >&2
pg_create "$WORK/pg" --locale=C
bench_postgres_settings $PGPORT >> "$WORK/pg/postgresql.conf"
# --no-flush: commits answered before their WAL is flushed, as bench.sh's create-nf and modify-nf.
[ -n "$NO_FLUSH" ] && echo "synchronous_commit = off" >> "$WORK/pg/postgresql.conf"
pg_start "$WORK/pg" "$WORK/pg.log"

export STRATUS_ADMIN_TOKEN=bench-ab-admin
export STRATUS_SERVER=http://127.0.0.1:$HTTPPORT
# serve <binary>: (re)starts the server on the benchmark's database.
serve() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null || true; fi
  STRATUS_LOG_LEVEL=warning "$1" serve --port $HTTPPORT --bcrypt-cost 4 \
    --database-url "postgres://postgres@127.0.0.1:$PGPORT/postgres" > "$WORK/serve.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 120); do curl -sf "$STRATUS_SERVER/health" >/dev/null && return 0; sleep 0.5; done
  echo "the server ($1) did not start; $WORK/serve.log:" >&2; tail -20 "$WORK/serve.log" >&2; exit 1
}

serve "$OLD"
echo "== seeding $CONTAINERS containers x $RECORDS records through the API" >&2
"$BENCH" seed --containers "$CONTAINERS" --records "$RECORDS" --state-file "$WORK/state.json" >&2

# run <binary> <workload>: one measured run; sets RESULT to "<requests/s> <server CPU µs per request>
# <PostgreSQL CPU µs per request>". (Not in a command substitution: the server must be started by
# this shell, to be stopped by it.)
run() {
  serve "$1"
  local json pg0 pg1 perf_pid="" served0=0 profile_pid=""
  if [ -n "$PROFILE" ] && [ "$1" = "$NEW" ]; then
    perf record -q -g -F 499 -p "$SERVER_PID" -o "$WORK/profile-$2-$pair.data" 2>/dev/null & profile_pid=$!
  fi
  if [ -n "$COUNTS" ]; then
    served0=$(served_requests)
    perf stat -x, -e "$PROBES" -p "$SERVER_PID" -o "$WORK/counts.csv" & perf_pid=$!
  fi
  pg0=$(postgres_cpu_ticks "$WORK/pg")
  json=$("$BENCH" --workload "$2" --concurrency "$CONCURRENCY" --duration "$DURATION" --state-file "$WORK/state.json" --json 2>/dev/null)
  pg1=$(postgres_cpu_ticks "$WORK/pg")
  if [ -n "$profile_pid" ]; then kill -INT "$profile_pid"; wait "$profile_pid" 2>/dev/null || true; fi
  RESULT=$(python3 -c 'import json, sys; j = json.loads(sys.argv[1]); n = j["requests"]
print(j["requestsPerSecond"], j.get("serverCPUMicrosecondsPerRequest") or "nan", round(int(sys.argv[2]) * 1e6 / int(sys.argv[3]) / n, 1) if n else "nan")' \
    "$json" $(( pg1 - pg0 )) "$(getconf CLK_TCK)")
  if [ -n "$perf_pid" ]; then
    kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true
    # Per request: allocations, switches, async frames (warm-up included on both sides of the division).
    RESULT="$RESULT $(python3 -c 'import sys
n = int(sys.argv[2]) - int(sys.argv[1]); counts = {}
for line in open(sys.argv[3]):
    parts = line.split(",")
    if len(parts) > 2 and parts[0].strip().isdigit(): counts[parts[2].split(":")[-1]] = int(parts[0])
print(" ".join(f"{counts.get(name, 0) / n:.1f}" if n > 0 else "nan" for name in ("swift_allocObject", "swift_task_switch", "swift_task_alloc")))' \
      "$served0" "$(served_requests)" "$WORK/counts.csv")"
  fi
}

# The data requests the server has answered (its /metrics counters, all families but the management API's).
served_requests() {
  curl -sf -H "Authorization: Bearer $STRATUS_ADMIN_TOKEN" "$STRATUS_SERVER/metrics" |
    awk '/^stratus_requests_total/ && !/family="(management|health|metrics)"/ { total += $NF } END { printf "%d\n", total }'
}

echo "old: $OLD"
echo "new: $NEW"
echo "$CONCURRENCY connections, ${DURATION}s a run, $PAIRS pairs per workload, order alternating"
for workload in $WORKLOADS; do
  : > "$WORK/$workload.pairs"
  for pair in $(seq 1 "$PAIRS"); do
    if [ $((pair % 2)) = 1 ]; then run "$OLD" "$workload"; old=$RESULT; run "$NEW" "$workload"; new=$RESULT
    else run "$NEW" "$workload"; new=$RESULT; run "$OLD" "$workload"; old=$RESULT; fi
    echo "$old $new" >> "$WORK/$workload.pairs"
    if [ -n "$COUNTS" ]; then
      read -r old_rate old_cpu old_pg old_alloc old_switch old_frame new_rate new_cpu new_pg new_alloc new_switch new_frame <<< "$old $new"
      printf "%-14s pair %2d: old %9.0f req/s %7.1f + %7.1f µs %5.1f/%5.1f/%5.1f   new %9.0f req/s %7.1f + %7.1f µs %5.1f/%5.1f/%5.1f\n" \
        "$workload" "$pair" "$old_rate" "$old_cpu" "$old_pg" "$old_alloc" "$old_switch" "$old_frame" \
        "$new_rate" "$new_cpu" "$new_pg" "$new_alloc" "$new_switch" "$new_frame"
    else
      read -r old_rate old_cpu old_pg new_rate new_cpu new_pg <<< "$old $new"
      printf "%-14s pair %2d: old %9.0f req/s %7.1f + %7.1f µs   new %9.0f req/s %7.1f + %7.1f µs (server + PostgreSQL)\n" \
        "$workload" "$pair" "$old_rate" "$old_cpu" "$old_pg" "$new_rate" "$new_cpu" "$new_pg"
    fi
  done
  [ -n "$COUNTS" ] && echo "  (each side: requests/s, server + PostgreSQL CPU µs per request, allocations/executor switches/async frames per request)"
  python3 - "$workload" "$WORK/$workload.pairs" <<'PY'
import math, statistics, sys
workload, path = sys.argv[1], sys.argv[2]
pairs = [tuple(map(float, line.split())) for line in open(path) if line.strip()]
width = len(pairs[0]) // 2
for what, column in (("server", 1), ("PostgreSQL", 2)):
    cpu = [(p[column], p[column + width]) for p in pairs if not math.isnan(p[column]) and not math.isnan(p[column + width]) and p[column] > 0]
    if cpu:
        change = [100 * (new - old) / old for old, new in cpu]
        print(f"{workload}: {what} CPU per request, new against old: cheaper in {sum(c < 0 for c in change)} of {len(change)} pairs, "
              f"median {statistics.median(change):+.1f} % per pair (mean {statistics.mean(change):+.1f} %; "
              f"medians {statistics.median(o for o, _ in cpu):.1f} → {statistics.median(n for _, n in cpu):.1f} µs)")
rate = [100 * (p[width] - p[0]) / p[0] for p in pairs]
print(f"{workload}: requests/s, new against old: median {statistics.median(rate):+.1f} % per pair (mean {statistics.mean(rate):+.1f} %)")
for what, column in (("Swift object allocations", 3), ("executor switches", 4), ("async frames", 5)):
    if column < width:
        print(f"{workload}: {what} per request, median of the runs: old {statistics.median(p[column] for p in pairs):.1f}, "
              f"new {statistics.median(p[column + width] for p in pairs):.1f}")
PY
  if [ -n "$PROFILE" ]; then
    echo "$workload: where the new server's time went (last pair, inclusive share of samples; all: $WORK/profile-$workload-*.data)"
    perf report -i "$WORK/profile-$workload-$PAIRS.data" --children --no-demangle --stdio -g none --percent-limit 2 2>/dev/null |
      grep -v '^#' | grep -v '^$' | head -60 | swift demangle --simplified | cut -c1-200
  fi
done

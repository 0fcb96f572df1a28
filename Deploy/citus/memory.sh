#!/usr/bin/env bash
# The workers' backends under a long lookup load: does their memory stay flat? Citus 13.2.2 without
# the vendored local-plan-cache patch re-plans a prepared single-shard statement on the node holding
# its shard on every execution and appends the plan to a list that never shrinks, so a pooled
# session's private memory grows with every lookup. This starts a cluster of its own
# (Deploy/citus/cluster.sh, ports 19480+, the release binary), seeds it, runs lookups through one
# stratus serve (which sends them straight to the workers) for --minutes, and prints, each minute,
# the private memory of the server's sessions on the workers ("stratus routed" in
# pg_stat_activity): Private_Dirty + Private_Clean summed over /proc/PID/smaps_rollup, in MiB.
# Exits 1 if the last sample is more than 10 % above the sample one minute in (after warm-up).
#
#   Deploy/citus/memory.sh [--minutes N]   (default 10)
set -euo pipefail
cd "$(dirname "$0")/../.."
. Deploy/lib.sh
minutes=10
while [ "$#" -gt 0 ]; do
  case $1 in
    --minutes) minutes=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "citus memory: unknown option $1" >&2; exit 64 ;;
  esac
done
Deploy/citus/build.sh >&2
build_release >&2
dir=$(mktemp -d /tmp/stratus-citus-memory.XXXXXX)
chmod 755 "$dir"
port=19480
stop() { Deploy/citus/cluster.sh down --dir "$dir" --port "$port" >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap stop EXIT
STRATUS_BCRYPT_COST=4 Deploy/citus/cluster.sh up --dir "$dir" --port "$port" --bin "$PWD/.build/release/stratus" >/dev/null
. "$dir/cluster.env"
export STRATUS_SERVER=$STRATUS_CLUSTER_SERVER_1 STRATUS_ADMIN_TOKEN
bench=$PWD/.build/release/stratus-bench
"$bench" seed --containers 20 --records 1000 --state-file "$dir/state.json" >&2
# private_kib: the private memory of the server's routed sessions on both workers, in KiB, and how many there are.
private_kib() {
  local total=0 sessions=0 worker pid
  for worker in 1 2; do
    for pid in $(as_postgres /usr/lib/postgresql/15/bin/psql -X -qAt -h 127.0.0.1 -p $((port + 10 + worker)) -U postgres -d stratus \
                   -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'stratus routed'"); do
      total=$(( total + $(awk '/^Private_(Clean|Dirty):/ { sum += $2 } END { print sum + 0 }' "/proc/$pid/smaps_rollup" 2>/dev/null || echo 0) ))
      sessions=$(( sessions + 1 ))
    done
  done
  echo "$total $sessions"
}
"$bench" --workload lookup --concurrency 16 --duration $(( minutes * 60 )) --state-file "$dir/state.json" > "$dir/lookups.txt" 2>&1 &
load=$!
samples=()
for minute in $(seq 1 "$minutes"); do
  sleep 60
  read -r kib sessions < <(private_kib)
  samples+=("$kib")
  printf "citus memory: minute %2d: %d routed sessions on the workers, %.1f MiB private\n" "$minute" "$sessions" "$(awk -v k="$kib" 'BEGIN { print k / 1024 }')"
done
wait "$load" || true
grep -i "req/s" "$dir/lookups.txt" | tail -1 | sed 's/^/citus memory: lookups /'
first=${samples[0]} last=${samples[$(( ${#samples[@]} - 1 ))]}
if [ "$last" -gt $(( first + first / 10 )) ]; then
  echo "citus memory: grew from $first KiB to $last KiB after warm-up: more than 10 %" >&2
  exit 1
fi
echo "citus memory: flat: $first KiB after a minute, $last KiB after $minutes"

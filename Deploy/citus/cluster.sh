#!/usr/bin/env bash
# Stratus on a live Citus cluster, on loopback: a Citus coordinator and two workers (PostgreSQL 15
# with Citus, built by Deploy/citus/build.sh; run as the 'postgres' account when started as root),
# `stratus migrate` and Deploy/citus/distribute.sql applied on the coordinator, two `stratus serve`
# processes on the coordinator (the files asset store, one shared folder) and HAProxy in front.
#
#   Deploy/citus/cluster.sh up     [--dir D] [--port P] [--bin PATH]
#   Deploy/citus/cluster.sh status [--dir D]
#   Deploy/citus/cluster.sh down   [--dir D]
#
#   --dir   state folder (default /tmp/stratus-citus): data, logs, pid files, cluster.env
#   --port  the load balancer's port (default 19080); the servers take P+1 and P+2, PostgreSQL
#           P+10 (coordinator), P+11 and P+12 (workers)
#   --bin   the stratus binary (default: .build/release/stratus, else .build/debug/stratus)
#
# `up` prints, and writes to <dir>/cluster.env, the keys Deploy/cluster.sh writes
# (STRATUS_CLUSTER_URL, STRATUS_CLUSTER_SERVER_1|2, STRATUS_ADMIN_TOKEN, ...) and
# STRATUS_CLUSTER_COORDINATOR_URL and STRATUS_CLUSTER_WORKER_1|2_URL.
set -euo pipefail
cd "$(dirname "$0")/../.."
. Deploy/lib.sh

command=${1:-}
shift || true
DIR=/tmp/stratus-citus
PORT=19080
BIN=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "citus cluster: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
PG_BIN=/usr/lib/postgresql/15/bin
NODES=(coordinator worker-1 worker-2)

node_port() {  # node_port INDEX
  echo $((PORT + 10 + $1))
}

psql_on() {  # psql_on PORT ARGUMENTS...
  local port=$1
  shift
  as_postgres "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d stratus "$@"
}

up() {
  if [ -f "$DIR/cluster.env" ]; then
    echo "citus cluster: a cluster is already up in $DIR (Deploy/citus/cluster.sh down --dir $DIR first)" >&2
    exit 1
  fi
  if [ ! -f "$("$PG_BIN/pg_config" --pkglibdir)/citus.so" ]; then
    echo "citus cluster: Citus is not installed into PostgreSQL 15; run Deploy/citus/build.sh first" >&2
    exit 1
  fi
  ensure_haproxy
  if [ -z "$BIN" ]; then
    if [ -x .build/release/stratus ]; then BIN=$PWD/.build/release/stratus; else BIN=$PWD/.build/debug/stratus; fi
  fi
  mkdir -p "$DIR/postgres"
  chmod 0755 "$DIR"
  if [ "$(id -u)" = "0" ]; then chown postgres "$DIR/postgres"; fi
  local index
  for index in 0 1 2; do
    local node=${NODES[$index]} port
    port=$(node_port "$index")
    echo "citus cluster: $node on 127.0.0.1:$port" >&2
    pg_create "$DIR/postgres/$node" --locale=C
    {
      echo "listen_addresses = '127.0.0.1'"
      echo "port = $port"
      echo "unix_socket_directories = '$DIR/postgres'"
      echo "shared_preload_libraries = 'citus'"
      echo "# Shard moves copy a shard with logical replication."
      echo "wal_level = logical"
      echo "max_replication_slots = 20"
      echo "max_wal_senders = 20"
      echo "max_connections = 300"
      echo "# Citus runs a maintenance process per database, and the test suite makes a database per"
      echo "# test (kept: some tests read theirs afterwards)."
      echo "max_worker_processes = 160"
      echo "shared_buffers = 128MB"
    } | as_postgres tee -a "$DIR/postgres/$node/postgresql.conf" >/dev/null
    pg_start "$DIR/postgres/$node" "$DIR/postgres/$node.log"
    as_postgres "$PG_BIN/createdb" -h 127.0.0.1 -p "$port" -U postgres stratus
    psql_on "$port" -c "CREATE EXTENSION citus"
  done
  local coordinator
  coordinator=$(node_port 0)
  psql_on "$coordinator" -c "SELECT citus_set_coordinator_host('127.0.0.1', $coordinator)" \
    -c "SELECT citus_add_node('127.0.0.1', $(node_port 1))" -c "SELECT citus_add_node('127.0.0.1', $(node_port 2))" >/dev/null
  local coordinator_url="postgres://postgres@127.0.0.1:$coordinator/stratus"
  echo "citus cluster: stratus migrate, then Deploy/citus/distribute.sql" >&2
  "$BIN" migrate --database-url "$coordinator_url" >"$DIR/migrate.log" 2>&1 || { tail -20 "$DIR/migrate.log" >&2; exit 1; }
  psql_on "$coordinator" <"$PWD/Deploy/citus/distribute.sql" >"$DIR/distribute.log" 2>&1 || { tail -20 "$DIR/distribute.log" >&2; exit 1; }

  local token
  token="adm_$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  local lb="http://127.0.0.1:$PORT"
  local pids=() n
  mkdir -p "$DIR/assets"
  for n in 1 2; do
    local port=$((PORT + n))
    echo "citus cluster: stratus serve $n on 127.0.0.1:$port" >&2
    STRATUS_ADMIN_TOKEN=$token STRATUS_DATABASE_URL=$coordinator_url STRATUS_PUBLIC_URL=$lb STRATUS_ASSET_STORE=files \
      STRATUS_ASSET_DIR="$DIR/assets" STRATUS_DATA_DIR="$DIR/data-$n" STRATUS_BCRYPT_COST=${STRATUS_BCRYPT_COST:-10} \
      nohup "$BIN" serve --port "$port" >"$DIR/serve-$n.log" 2>&1 &
    echo $! >"$DIR/serve-$n.pid"
    pids+=("$!")
    wait_for "http://127.0.0.1:$port/health" 120 || { tail -20 "$DIR/serve-$n.log" >&2; exit 1; }
  done
  write_haproxy_config "$DIR" "$PORT"
  haproxy -f "$DIR/haproxy.cfg" -D -p "$DIR/haproxy.pid"
  wait_for "$lb/health" 30
  {
    echo "STRATUS_CLUSTER_URL=$lb"
    echo "STRATUS_CLUSTER_SERVER_1=http://127.0.0.1:$((PORT + 1))"
    echo "STRATUS_CLUSTER_SERVER_2=http://127.0.0.1:$((PORT + 2))"
    echo "STRATUS_CLUSTER_PID_1=${pids[0]}"
    echo "STRATUS_CLUSTER_PID_2=${pids[1]}"
    echo "STRATUS_CLUSTER_COORDINATOR_URL=$coordinator_url"
    echo "STRATUS_CLUSTER_WORKER_1_URL=postgres://postgres@127.0.0.1:$(node_port 1)/stratus"
    echo "STRATUS_CLUSTER_WORKER_2_URL=postgres://postgres@127.0.0.1:$(node_port 2)/stratus"
    echo "STRATUS_ADMIN_TOKEN=$token"
  } >"$DIR/cluster.env"
  cat "$DIR/cluster.env"
  echo "citus cluster: up; the load balancer is $lb (Deploy/citus/cluster.sh down --dir $DIR stops it all)" >&2
}

status() {
  [ -f "$DIR/cluster.env" ] || { echo "citus cluster: no cluster in $DIR" >&2; exit 1; }
  . "$DIR/cluster.env"
  local url
  for url in "$STRATUS_CLUSTER_URL" "$STRATUS_CLUSTER_SERVER_1" "$STRATUS_CLUSTER_SERVER_2"; do
    printf '%s\t%s\n' "$url" "$(curl -s -o /dev/null -w '%{http_code}' "$url/health" || true)"
  done
  psql_on "$(node_port 0)" -Atc "SELECT 'node ' || nodename || ':' || nodeport || ' ' || noderole || CASE WHEN isactive THEN ' active' ELSE ' inactive' END FROM pg_dist_node ORDER BY nodeport" || true
  psql_on "$(node_port 0)" -Atc "SELECT 'shards of records on ' || nodename || ':' || nodeport || ': ' || count(*) FROM citus_shards WHERE table_name = 'records'::regclass GROUP BY nodename, nodeport ORDER BY nodeport" || true
}

down() {
  [ -d "$DIR" ] || { echo "citus cluster: nothing in $DIR" >&2; return 0; }
  if [ -f "$DIR/haproxy.pid" ]; then kill "$(cat "$DIR/haproxy.pid")" 2>/dev/null || true; fi
  local n node pid
  for n in 1 2; do
    if [ -f "$DIR/serve-$n.pid" ]; then
      pid=$(cat "$DIR/serve-$n.pid")
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  for node in "${NODES[@]}"; do
    if [ -f "$DIR/postgres/$node/postmaster.pid" ]; then
      pg_stop "$DIR/postgres/$node"
    fi
  done
  # After the Citus suite (a database per test on each of three nodes) removing the files took a
  # minute or more: it goes on in the background, under another name so the folder is free at once.
  local gone="$DIR.removed-$$"
  mv "$DIR" "$gone" && { nohup rm -rf "$gone" >/dev/null 2>&1 & }
  echo "citus cluster: down" >&2
}

case "$command" in
  -h|--help|help) sed -n '2,18p' "$0" ;;
  up) up ;;
  status) status ;;
  down) down ;;
  *) echo "usage: Deploy/citus/cluster.sh up|status|down [--dir D] [--port P] [--bin PATH] (see --help)" >&2; exit 2 ;;
esac

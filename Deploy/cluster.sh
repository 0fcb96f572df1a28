#!/usr/bin/env bash
# The topology of Deploy/compose.yaml on loopback, without Docker: a PostgreSQL primary and a
# streaming replica (run as the 'postgres' account when started as root), two `stratus serve`
# processes on the primary (reading from the replica once it has caught up: STRATUS_REPLICA_URLS),
# and HAProxy in front of them, health-checking each on /health.
#
#   Deploy/cluster.sh up     [--dir D] [--port P] [--bin PATH] [--tls] [--with-prometheus]
#   Deploy/cluster.sh status [--dir D]
#   Deploy/cluster.sh down   [--dir D]
#
#   --dir   state folder (default /tmp/stratus-cluster): data, logs, pid files, cluster.env
#   --port  the load balancer's port (default 18080); the servers take P+1 and P+2, PostgreSQL
#           P+10 (primary) and P+11 (replica)
#   --bin   the stratus binary (default: .build/release/stratus, else .build/debug/stratus)
#   --tls   the load balancer speaks HTTPS with a certificate from a throwaway authority made
#           for the cluster (Deploy/tls/make-certs.sh, in <dir>/tls; trust <dir>/tls/ca.pem:
#           curl --cacert, STRATUS_CLUSTER_CA), and the primary and the replica speak TLS, which
#           the servers verify (sslmode=verify-full); for local use only
#   --with-prometheus
#           also Debian's prometheus on P+20, scraping both servers' /metrics every 2 s with
#           their metrics token (installed when missing; STRATUS_CLUSTER_PROMETHEUS_URL)
#
# `up` prints, and writes to <dir>/cluster.env, what a client or a test needs: the load balancer's
# URL, each server's URL and pid, the primary's and the replica's URLs, the admin token.
# Installs haproxy and curl (Debian's packages) when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
. Deploy/lib.sh

command=${1:-}
shift || true
DIR=/tmp/stratus-cluster
PORT=18080
BIN=""
TLS=0
PROMETHEUS=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    --tls) TLS=1; shift ;;
    --with-prometheus) PROMETHEUS=1; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "cluster.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
PRIMARY_PORT=$((PORT + 10))
REPLICA_PORT=$((PORT + 11))
up() {
  if [ -f "$DIR/cluster.env" ]; then
    echo "cluster.sh: a cluster is already up in $DIR (Deploy/cluster.sh down --dir $DIR first)" >&2
    exit 1
  fi
  ensure_postgres
  ensure_haproxy
  pg_bin
  if [ -z "$BIN" ]; then
    if [ -x .build/release/stratus ]; then BIN=$PWD/.build/release/stratus; else BIN=$PWD/.build/debug/stratus; fi
  fi
  if [ ! -x "$BIN" ]; then
    echo "cluster.sh: building stratus (swift build)" >&2
    swift build --product stratus >/dev/null
    BIN=$PWD/.build/debug/stratus
  fi
  mkdir -p "$DIR"
  chmod 0755 "$DIR"
  local pg="$DIR/postgres"
  mkdir -p "$pg"
  if [ "$(id -u)" = "0" ]; then chown postgres "$pg"; fi

  echo "cluster.sh: PostgreSQL primary on 127.0.0.1:$PRIMARY_PORT" >&2
  pg_create "$pg/primary"
  cat >>"$pg/primary/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PRIMARY_PORT
unix_socket_directories = '$pg'
wal_level = replica
max_wal_senders = 10
hot_standby = on
# The replica (which copies this file) tells the primary which rows its queries still read, so
# replaying the primary's clean-up never cancels them ("conflict with recovery"); the price is
# that the primary keeps those rows a little longer.
hot_standby_feedback = on
max_connections = 100
shared_buffers = 256MB
EOF
  echo "host replication postgres 127.0.0.1/32 trust" >>"$pg/primary/pg_hba.conf"
  if [ "$TLS" = 1 ]; then
    # PostgreSQL speaks TLS too (the replica copies the files), and the servers check its
    # certificate: sslmode=verify-full against the throwaway authority.
    Deploy/tls/make-certs.sh "$DIR/tls"
    cp "$DIR/tls/server.pem" "$pg/primary/server.crt"
    cp "$DIR/tls/server.key" "$pg/primary/server.key"
    chmod 600 "$pg/primary/server.key"
    if [ "$(id -u)" = "0" ]; then chown postgres "$pg/primary/server.crt" "$pg/primary/server.key"; fi
    echo "ssl = on" >>"$pg/primary/postgresql.conf"
  fi
  pg_start "$pg/primary" "$pg/primary.log"
  as_postgres "$PG_BIN/createdb" -h 127.0.0.1 -p "$PRIMARY_PORT" -U postgres stratus

  echo "cluster.sh: streaming replica on 127.0.0.1:$REPLICA_PORT" >&2
  as_postgres "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p "$PRIMARY_PORT" -U postgres -D "$pg/replica" -R -X stream --checkpoint=fast >/dev/null
  sed -i "s/^port = $PRIMARY_PORT$/port = $REPLICA_PORT/" "$pg/replica/postgresql.conf"
  pg_start "$pg/replica" "$pg/replica.log"

  local token metrics_token
  token="adm_$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  metrics_token="met_$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  echo "$metrics_token" >"$DIR/metrics-token"
  chmod 644 "$DIR/metrics-token"
  local primary_url="postgres://postgres@127.0.0.1:$PRIMARY_PORT/stratus"
  local replica_url="postgres://postgres@127.0.0.1:$REPLICA_PORT/stratus"
  local lb="http://127.0.0.1:$PORT" cert="" ca=""
  if [ "$TLS" = 1 ]; then
    primary_url="$primary_url?sslmode=verify-full&sslrootcert=$DIR/tls/ca.pem"
    replica_url="$replica_url?sslmode=verify-full&sslrootcert=$DIR/tls/ca.pem"
    cert="$DIR/tls/combined.pem"
    ca="$DIR/tls/ca.pem"
    lb="https://localhost:$PORT"
  fi
  local pids=()
  for n in 1 2; do
    local port=$((PORT + n))
    echo "cluster.sh: stratus serve $n on 127.0.0.1:$port" >&2
    STRATUS_ADMIN_TOKEN=$token STRATUS_DATABASE_URL=$primary_url STRATUS_REPLICA_URLS=$replica_url STRATUS_PUBLIC_URL=$lb STRATUS_ASSET_STORE=postgres \
      STRATUS_ASSET_DIR="$DIR/assets-$n" STRATUS_DATA_DIR="$DIR/data-$n" STRATUS_BCRYPT_COST=${STRATUS_BCRYPT_COST:-10} \
      STRATUS_TRUSTED_PROXIES=127.0.0.1 STRATUS_METRICS_TOKEN=$metrics_token nohup "$BIN" serve --port "$port" >"$DIR/serve-$n.log" 2>&1 &
    echo $! >"$DIR/serve-$n.pid"
    pids+=("$!")
    wait_for "http://127.0.0.1:$port/health" 120
  done

  write_haproxy_config "$DIR" "$PORT" "$cert"
  haproxy -f "$DIR/haproxy.cfg" -D -p "$DIR/haproxy.pid"
  wait_for "$lb/health" 30 "$ca"

  local prometheus=""
  if [ "$PROMETHEUS" = 1 ]; then
    ensure_promtool
    prometheus="http://127.0.0.1:$((PORT + 20))"
    cat >"$DIR/prometheus.yml" <<EOF
global:
  scrape_interval: 2s
scrape_configs:
  - job_name: stratus
    authorization:
      type: Bearer
      credentials_file: $DIR/metrics-token
    static_configs:
      - targets: ["127.0.0.1:$((PORT + 1))", "127.0.0.1:$((PORT + 2))"]
EOF
    echo "cluster.sh: prometheus on $prometheus" >&2
    nohup prometheus --config.file="$DIR/prometheus.yml" --storage.tsdb.path="$DIR/prometheus" \
      --web.listen-address="127.0.0.1:$((PORT + 20))" >"$DIR/prometheus.log" 2>&1 &
    echo $! >"$DIR/prometheus.pid"
    wait_for "$prometheus/-/ready" 60
  fi

  cat >"$DIR/cluster.env" <<EOF
STRATUS_CLUSTER_URL=$lb
STRATUS_CLUSTER_SERVER_1=http://127.0.0.1:$((PORT + 1))
STRATUS_CLUSTER_SERVER_2=http://127.0.0.1:$((PORT + 2))
STRATUS_CLUSTER_PID_1=${pids[0]}
STRATUS_CLUSTER_PID_2=${pids[1]}
STRATUS_CLUSTER_PRIMARY_URL=$primary_url
STRATUS_CLUSTER_REPLICA_URL=$replica_url
STRATUS_ADMIN_TOKEN=$token
EOF
  if [ -n "$ca" ]; then echo "STRATUS_CLUSTER_CA=$ca" >>"$DIR/cluster.env"; fi
  echo "STRATUS_CLUSTER_METRICS_TOKEN=$metrics_token" >>"$DIR/cluster.env"
  if [ -n "$prometheus" ]; then echo "STRATUS_CLUSTER_PROMETHEUS_URL=$prometheus" >>"$DIR/cluster.env"; fi
  cat "$DIR/cluster.env"
  echo "cluster.sh: up; the load balancer is $lb (Deploy/cluster.sh down --dir $DIR stops it all)" >&2
}

status() {
  [ -f "$DIR/cluster.env" ] || { echo "cluster.sh: no cluster in $DIR" >&2; exit 1; }
  . "$DIR/cluster.env"
  local ca=()
  if [ -n "${STRATUS_CLUSTER_CA:-}" ]; then ca=(--cacert "$STRATUS_CLUSTER_CA"); fi
  for url in "$STRATUS_CLUSTER_URL" "$STRATUS_CLUSTER_SERVER_1" "$STRATUS_CLUSTER_SERVER_2"; do
    printf '%s\t%s\n' "$url" "$(curl -s "${ca[@]}" -o /dev/null -w '%{http_code}' "$url/health" || true)"
  done
  as_postgres "$PG_BIN/psql" "$STRATUS_CLUSTER_PRIMARY_URL" -Atc \
    "SELECT 'replica ' || client_addr || ' ' || state || ' replay lag ' || coalesce(replay_lag::text, '0') FROM pg_stat_replication" || true
}

down() {
  [ -d "$DIR" ] || { echo "cluster.sh: nothing in $DIR" >&2; return 0; }
  if [ -f "$DIR/haproxy.pid" ]; then kill "$(cat "$DIR/haproxy.pid")" 2>/dev/null || true; fi
  if [ -f "$DIR/prometheus.pid" ]; then kill "$(cat "$DIR/prometheus.pid")" 2>/dev/null || true; fi
  for n in 1 2; do
    if [ -f "$DIR/serve-$n.pid" ]; then
      local pid
      pid=$(cat "$DIR/serve-$n.pid")
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  for node in replica primary; do
    if [ -f "$DIR/postgres/$node/postmaster.pid" ]; then
      pg_stop "$DIR/postgres/$node"
    fi
  done
  rm -rf "$DIR"
  echo "cluster.sh: down" >&2
}

case "$command" in
  -h|--help|help) sed -n '2,24p' "$0" ;;
  up) up ;;
  status) status ;;
  down) down ;;
  *) echo "usage: Deploy/cluster.sh up|status|down [--dir D] [--port P] [--bin PATH] [--tls] (see --help)" >&2; exit 2 ;;
esac

# Shared helpers for the Deploy scripts. Source it; it defines functions only.

# Installs Debian's PostgreSQL server binaries when initdb is missing (needs root or sudo).
ensure_postgres() {
  if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then
    return 0
  fi
  echo "Deploy: PostgreSQL server binaries not found; installing Debian's postgresql package" >&2
  local sudo=""
  if [ "$(id -u)" != "0" ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
}

# Builds the release programs: `stratus` and the load generator `stratus-bench`
# (.build/release/). Every release build goes through here: run.sh, the benchmarks, and (with
# the same flags written out) the Dockerfile.
#
# -enforce-exclusivity=unchecked, for every module (the service's and its dependencies'): the
# release binary does not check Swift's exclusive-access rule at run time. Those checks are a
# runtime call on every access to a class's stored `var` that the compiler cannot prove safe; in
# SwiftNIO's ByteBuffer they run for every integer read from a PostgreSQL row. They were about 2 %
# of the server's CPU per lookup and 5-6 % per change-feed page in `perf`. A violation is a bug
# that traps when checked and is undefined behaviour when not: the tests run debug builds, which
# keep every check, so a violation on a tested path still fails the suite.
build_release() {  # build_release [extra swift build arguments]
  swift build -c release -Xswiftc -enforce-exclusivity=unchecked --product stratus "$@" &&
    swift build -c release -Xswiftc -enforce-exclusivity=unchecked --product stratus-bench "$@"
}

# Installs Debian's Chromium and Python 3 when missing (the sign-in page is tested in a real
# headless browser, driven by a Python script that needs nothing beyond the standard library).
ensure_browser() {
  if command -v chromium >/dev/null 2>&1 && command -v python3 >/dev/null 2>&1; then
    return 0
  fi
  echo "Deploy: chromium or python3 not found; installing Debian's chromium and python3 packages" >&2
  local sudo=""
  if [ "$(id -u)" != "0" ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium python3 >/dev/null
}

# After the suite: no token, password or signature the tests used may appear in a server log
# (the tests write both lists under .build/test-output; see Tests/StratusTestSupport/TestSecrets.swift).
check_logs_for_secrets() {
  local out=.build/test-output
  local secrets="$out/secrets.all"
  cat "$out"/secrets-*.txt 2>/dev/null | sort -u > "$secrets"
  local count bytes
  count=$(wc -l < "$secrets")
  bytes=$(cat "$out"/server-logs/* 2>/dev/null | wc -c)
  if [ "$count" -eq 0 ] || [ "$bytes" -eq 0 ]; then
    echo "test.sh: the secrets check found no secrets ($count) or no server logs ($bytes bytes) to check" >&2
    return 1
  fi
  if grep -F -r -l -f "$secrets" "$out/server-logs" >/dev/null; then
    echo "test.sh: server logs contain secrets the tests used:" >&2
    grep -F -r -n -o -f "$secrets" "$out/server-logs" | head -20 | sed 's/:\(.\{6\}\).*/: \1…/' >&2
    return 1
  fi
  echo "test.sh: $count tokens, passwords and signatures the tests used; none in $bytes bytes of server logs"
}

# The Python tools the contract checks use (schemathesis, openapi-spec-validator, cryptography,
# Playwright and axe-core for the pages),
# pinned, in a virtual environment under .build/python-tools (made on first use: PyPI must be
# reachable then). Sets PYTHON_TOOLS to its bin folder and puts it first on PATH.
ensure_python_tools() {
  local venv=.build/python-tools
  local wanted="schemathesis==4.32.5 hypothesis==6.155.2 openapi-spec-validator==0.9.0 cryptography==48.0.0 playwright==1.65.2 axe-playwright-python==0.1.8 h2==4.4.1 http-ece==1.2.1 py-vapid==1.9.6"
  if [ ! -f "$venv/.installed" ] || [ "$(cat "$venv/.installed")" != "$wanted" ]; then
    rm -rf "$venv"
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
      echo "Deploy: python3 cannot make virtual environments; installing Debian's python3-venv" >&2
      local sudo=""
      if [ "$(id -u)" != "0" ]; then sudo="sudo"; fi
      $sudo apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
      python3 -m venv "$venv"
    fi
    # shellcheck disable=SC2086
    "$venv/bin/pip" install --quiet --disable-pip-version-check $wanted
    echo "$wanted" > "$venv/.installed"
  fi
  PYTHON_TOOLS=$(cd "$venv/bin" && pwd)
  export PATH="$PYTHON_TOOLS:$PATH"
}

# Starts the built `stratus serve` ($1: the binary) on a free port, with its own embedded
# PostgreSQL in a temporary folder, a random admin token and cheap bcrypt; its log goes to $2.
# Sets SERVER_URL, SERVER_ADMIN, SERVER_PID and SERVER_WORK; `stop_test_server` ends it and
# removes the folder. Returns non-zero (with the log's tail) when it does not come up.
start_test_server() {
  local binary=$1 log=$2
  SERVER_WORK=$(mktemp -d /tmp/stratus-server.XXXXXX)
  chmod 755 "$SERVER_WORK"
  SERVER_ADMIN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
  local port
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  SERVER_URL="http://127.0.0.1:$port"
  STRATUS_ADMIN_TOKEN=$SERVER_ADMIN "$binary" serve --data-dir "$SERVER_WORK/data" --port "$port" --bcrypt-cost 4 \
    --public-url "$SERVER_URL" >"$log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 120); do
    if python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" "$SERVER_URL/health" 2>/dev/null; then return 0; fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "Deploy: stratus serve exited; its log:" >&2
      tail -40 "$log" >&2
      return 1
    fi
    sleep 0.5
  done
  echo "Deploy: stratus serve did not answer /health within a minute" >&2
  return 1
}

stop_test_server() {
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  rm -rf "$SERVER_WORK"
}

# Runs a command as the postgres account when run as root (PostgreSQL refuses to run as root).
as_postgres() {
  if [ "$(id -u)" = "0" ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# Throwaway PostgreSQL clusters. Every script that needs a cluster of its own (the benchmarks,
# the loopback and Citus clusters, the TLS and fault checks) makes, starts and stops it here;
# the Swift tests' harness does the same for the suite (Tests/StratusTestSupport/TestHarness.swift).
#
# pg_bin: sets PG_BIN to the newest installed server binaries' folder (installed when missing).
pg_bin() {
  ensure_postgres
  if [ -z "${PG_BIN:-}" ] || [ ! -x "$PG_BIN/pg_ctl" ]; then
    PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  fi
}

# pg_create DATA [initdb options …]: a new cluster in the folder DATA (its parent is made, and
# given to the postgres account when run as root): superuser `postgres`, trusted on this machine,
# UTF-8. Append settings to DATA/postgresql.conf, then pg_start.
pg_create() {
  local data=$1 parent
  shift
  pg_bin
  parent=$(dirname "$data")
  mkdir -p "$parent"
  if [ "$(id -u)" = "0" ]; then chown postgres "$parent"; fi
  if ! as_postgres "$PG_BIN/initdb" -D "$data" -U postgres --auth=trust -E UTF8 "$@" >"$parent/$(basename "$data")-create.log" 2>&1; then
    echo "Deploy: could not create a PostgreSQL cluster in $data:" >&2
    tail -20 "$parent/$(basename "$data")-create.log" >&2
    return 1
  fi
}

# pg_start DATA LOG: starts the cluster, waiting until it accepts connections.
pg_start() {
  pg_bin
  as_postgres "$PG_BIN/pg_ctl" -D "$1" -l "$2" -w -t 120 start >/dev/null
}

# pg_stop DATA [MODE]: stops it (fast by default; never fails: for clean-up traps).
pg_stop() {
  pg_bin
  as_postgres "$PG_BIN/pg_ctl" -D "$1" -m "${2:-fast}" -w stop >/dev/null 2>&1 || true
}

# pg_ctl_as DATA ARGS …: pg_ctl on the cluster, as its owner (reload, restart).
pg_ctl_as() {
  local data=$1
  shift
  pg_bin
  as_postgres "$PG_BIN/pg_ctl" -D "$data" "$@"
}

# promtool (Debian's prometheus package), which MetricsTests runs on `/metrics`'s output.
ensure_promtool() {
  command -v promtool >/dev/null 2>&1 && return 0
  echo "Deploy: promtool not found; installing Debian's prometheus package" >&2
  local sudo=""
  if [ "$(id -u)" != "0" ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
}

ensure_haproxy() {
  command -v haproxy >/dev/null 2>&1 && command -v curl >/dev/null 2>&1 && return 0
  echo "cluster.sh: haproxy or curl not found; installing Debian's haproxy and curl packages" >&2
  local sudo=""
  if [ "$(id -u)" != "0" ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends haproxy curl >/dev/null
}

wait_for() {  # wait_for URL SECONDS [CA_FILE: trusted for an https URL]
  local i ca=()
  if [ -n "${3:-}" ]; then ca=(--cacert "$3"); fi
  for i in $(seq 1 $(($2 * 10))); do
    if curl -fsS "${ca[@]}" -o /dev/null "$1" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "cluster.sh: $1 did not answer within $2 s" >&2
  return 1
}

# HAProxy in front of two `stratus serve` processes on PORT+1 and PORT+2, health-checking each on
# /health, listening on PORT: writes DIR/haproxy.cfg (Deploy/cluster.sh, Deploy/citus/cluster.sh).
# With CERT (a PEM holding the certificate chain and its key) it listens in HTTPS, TLS 1.2 and up,
# and tells the servers so (X-Forwarded-Proto). Either way it appends the client's address to
# X-Forwarded-For, which the servers believe from 127.0.0.1 (--trusted-proxies).
write_haproxy_config() {  # write_haproxy_config DIR PORT [CERT]
  local DIR=$1 PORT=$2 CERT=${3:-} bind
  bind="bind 127.0.0.1:$PORT"
  if [ -n "$CERT" ]; then bind="$bind ssl crt $CERT alpn http/1.1"; fi
  cat >"$DIR/haproxy.cfg" <<EOF
global
    maxconn 4000
    ssl-default-bind-ciphers ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305
    ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets
defaults
    mode http
    option http-server-close
    timeout connect 2s
    timeout client 75s
    timeout server 75s
    timeout tunnel 1h
    timeout http-keep-alive 60s
    # No Stratus server to send a request to (both restarting, or out of rotation while
    # PostgreSQL is unreachable), or one that died mid-answer: the client gets a CloudKit error
    # dictionary it knows to retry (TRY_AGAIN_LATER with retryAfter), not HAProxy's HTML page.
    http-error status 502 content-type application/json string '{"serverErrorCode":"TRY_AGAIN_LATER","reason":"the Stratus server answering this request went away; retry shortly","retryAfter":1}' hdr Retry-After 1
    http-error status 503 content-type application/json string '{"serverErrorCode":"TRY_AGAIN_LATER","reason":"no Stratus server is available right now; retry shortly","retryAfter":1}' hdr Retry-After 1
    http-error status 504 content-type application/json string '{"serverErrorCode":"TRY_AGAIN_LATER","reason":"the Stratus server did not answer in time; retry shortly","retryAfter":1}' hdr Retry-After 1
frontend stratus
    $bind
    option forwardfor
    http-request set-header X-Forwarded-Proto https if { ssl_fc }
    http-request set-header X-Forwarded-Proto http if !{ ssl_fc }
    default_backend servers
backend servers
    balance roundrobin
    option httpchk GET /health
    http-check expect status 200
    default-server inter 1s fall 2 rise 2
    server stratus-1 127.0.0.1:$((PORT + 1)) check
    server stratus-2 127.0.0.1:$((PORT + 2)) check
EOF
}

# A check in a real browser: starts the built `stratus serve` ($STRATUS_BINARY, or the debug
# build) with its own embedded PostgreSQL, runs the Playwright script $2 (arguments: the server's
# URL, its admin token and $3, the folder for screenshots, emptied first) on Debian's Chromium,
# and fails when the script does or the server logged an internal error. $1 names the check in
# messages (Deploy/console/e2e.sh, Deploy/signin/e2e.sh).
browser_check() {  # browser_check NAME SCRIPT OUTPUT_DIR
  local name=$1 script=$2 out=$3 binary=${STRATUS_BINARY:-.build/debug/stratus} status=0
  ensure_browser
  ensure_python_tools
  rm -rf "$out"
  mkdir -p "$out"
  trap stop_test_server EXIT
  start_test_server "$binary" "$out/server.log"
  "$PYTHON_TOOLS/python" "$script" "$SERVER_URL" "$SERVER_ADMIN" "$out" || status=1
  if grep -q "internal error" "$out/server.log"; then
    echo "$name: the server logged internal errors:" >&2
    grep "internal error" "$out/server.log" | cut -c1-600 | head -20 >&2
    status=1
  fi
  return "$status"
}

# The PostgreSQL settings the benchmarks run on (shared/reference/performance.md §2.1: tuned for
# this 2-core, 24 GiB machine), listening on 127.0.0.1:<port> only. Appended to a new cluster's
# postgresql.conf by Deploy/bench/bench.sh and Deploy/bench/bench-ab.sh.
bench_postgres_settings() {
  cat <<CONF
listen_addresses = '127.0.0.1'
port = $1
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
}

# postgres_cpu_ticks <data directory>: the CPU time (clock ticks) a running PostgreSQL cluster has
# used so far: its postmaster, its live children, and the children it has reaped (a session's time
# moves there when it ends). Used by Deploy/bench/bench.sh and Deploy/bench/bench-ab.sh.
postgres_cpu_ticks() {
  local postmaster ticks
  postmaster=$(head -1 "$1/postmaster.pid")
  ticks=$(awk '{ print $14 + $15 + $16 + $17 }' "/proc/$postmaster/stat")
  for child in $(pgrep -P "$postmaster"); do
    ticks=$(( ticks + $(awk '{ print $14 + $15 }' "/proc/$child/stat" 2>/dev/null || echo 0) ))
  done
  echo "$ticks"
}

# unfinished_tests LOG: the tests of a `swift test` log that failed, and those that started and
# never ended (what a run stopped by its time limit was waiting for).
unfinished_tests() {
  python3 - "$1" <<'PY'
import re, sys
started, ended, failed = {}, set(), []
for line in open(sys.argv[1], errors="replace"):
    line = re.sub(r"\x1b\[[0-9;]*m", "", line)
    if m := re.search(r"◇ Test (.+?) started\.", line):
        started.setdefault(m.group(1), len(started))
    elif m := re.search(r"[✔✘➜] Test (.+?)(?: with \d+ test cases?)? (passed after|failed after|skipped)", line):
        ended.add(m.group(1))
        if m.group(2) == "failed after": failed.append(m.group(1))
    elif m := re.search(r"Test Case '(.+?)' started", line):
        started.setdefault(m.group(1), len(started))
    elif m := re.search(r"Test Case '(.+?)' (passed|failed)", line):
        ended.add(m.group(1))
        if m.group(2) == "failed": failed.append(m.group(1))
# (A parameterized test's cases and the run itself start without a line of their own at the end.)
whole = lambda name: name != "run" and not name.startswith(("case ", "run "))
failed = [name for name in failed if whole(name)]
running = [name for name in started if name not in ended and whole(name)]
print(f"test.sh: the suite's tests that failed ({len(failed)}): " + ", ".join(failed[:30]))
print(f"test.sh: the suite's tests that started and never ended ({len(running)}): " + ", ".join(running[:30]))
PY
}

# After a failed suite: what the tests' PostgreSQL and the services' connection pools said about
# the database being away (a crash, a restart, refused or timed-out logins), so that a run on CI
# that failed because PostgreSQL was unreachable says why. The cluster's log is kept by the test
# process at exit, or left in its folder when the process crashed.
show_test_database_trouble() {
  local out=.build/test-output log
  for log in "$out"/postgres-*.log "${TMPDIR:-/tmp}"/stratus-tests-*/pg/server.log; do
    [ -f "$log" ] || continue
    echo "test.sh: the tests' PostgreSQL ($log), its fatal messages and restarts (last 40):" >&2
    grep -E "FATAL|PANIC|server process|terminating any other|all server processes|database system (was|is)|too many clients|out of memory|No space" "$log" \
      | grep -v "terminating connection due to administrator command" | tail -40 >&2 || true
  done
  if ls "$out"/server-logs/tests-*.log >/dev/null 2>&1; then
    echo "test.sh: the services' connection pools on PostgreSQL being unreachable (first 20):" >&2
    grep -h -E "cannot be reached|answers again" "$out"/server-logs/tests-*.log | head -20 >&2 || true
  fi
  echo "test.sh: memory and load now: $(free -m | awk '/Mem:/ {print $3 " MiB used of " $2}'), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
}

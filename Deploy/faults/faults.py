#!/usr/bin/env python3
"""The fault campaign: writers through the real HTTP surface while PostgreSQL and the servers fail
in the ways an operator's would, then every acknowledged write looked up in PostgreSQL and every
change feed read to its end. Run by Deploy/faults/faults.sh (see its header for the options).

Set-up, all on 127.0.0.1 in a scratch folder: a PostgreSQL cluster with fsync and
synchronous_commit on (as the 'postgres' account when run as root); a TCP proxy in front of it
that can cut every connection at once (RST); one or two `stratus serve` processes reaching
PostgreSQL through the proxy; a container with one user and one custom zone per writer.

Writers each send, in turn, a one-record create in the default zone, a one-record create in their
custom zone (creates in a zone written before share statements) and an atomic two-record create
in it, every record with a name of its own, to the servers in turn. A write counts as
acknowledged when it is answered 200 with every record saved.

Faults, each `--cycles` times, writers running, a second or so apart:
  fast        pg_ctl restart -m fast (SIGTERM to every backend, a clean shutdown)
  immediate   pg_ctl restart -m immediate (SIGQUIT, crash recovery at start)
  crash       one backend SIGKILLed: PostgreSQL ends every backend and recovers
  terminate   pg_terminate_backend() on every backend of the service
  server-kill a `stratus serve` SIGKILLed, then started again
  cut         the proxy drops every connection to PostgreSQL mid-stream

Then, with PostgreSQL and the servers up: every acknowledged record must be in PostgreSQL, every
zone's change feed (read from the start, page by page) must hold each of the zone's records exactly
once and nothing else, and no request may have been answered 500. Prints acknowledged, missing,
500s, 503s and refused connections per fault, and exits 1 on any loss. On failure the folder with
the servers' and PostgreSQL's logs is kept, and each missing write is named with when it was
answered relative to the faults.
"""
import argparse
import http.client
import json
import os
import random
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

FAULTS = ["fast", "immediate", "crash", "terminate", "server-kill", "cut"]
ADMIN = "faults-admin-token"
CONTAINER = "iCloud.com.example.Faults"


def log(text):
    print(f"faults: {text}", flush=True)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def as_postgres(args):
    return (["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []) + args


class Postgres:
    def __init__(self, folder):
        self.folder = os.path.join(folder, "pg")
        self.port = free_port()
        self.bin = sorted(d for d in (f"/usr/lib/postgresql/{v}/bin" for v in os.listdir("/usr/lib/postgresql"))
                          if os.path.isdir(d))[-1]
        # Made as every throwaway cluster is (Deploy/lib.sh's pg_create).
        lib = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib.sh")
        made = subprocess.run(["bash", "-c", '. "$0" && pg_create "$1" --locale=C', lib, self.folder], capture_output=True, text=True)
        if made.returncode != 0:
            raise SystemExit(f"faults: no PostgreSQL cluster: {made.stdout}{made.stderr}")
        with open(os.path.join(self.folder, "postgresql.conf"), "a") as conf:
            conf.write(f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.folder}'\n"
                       "fsync = on\nsynchronous_commit = on\nmax_connections = 100\nshared_buffers = 128MB\n"
                       "restart_after_crash = on\nlog_min_messages = warning\n")
        self.pg_ctl("start")
        self.run(["createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "stratus"])

    def run(self, args, check=True):
        done = subprocess.run(as_postgres([os.path.join(self.bin, args[0])] + args[1:]), capture_output=True, text=True)
        if check and done.returncode != 0:
            raise SystemExit(f"faults: {' '.join(args[:2])} failed: {done.stdout}{done.stderr}")
        return done

    def pg_ctl(self, *args):
        return self.run(["pg_ctl", "-D", self.folder, "-l", os.path.join(self.folder, "server.log"), "-w", "-t", "60"] + list(args))

    def sql(self, text, check=True):
        done = self.run(["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", "stratus", "-AtX", "-v", "ON_ERROR_STOP=1",
                         "-c", text], check=check)
        return [line for line in done.stdout.splitlines() if line]

    def wait_ready(self, seconds=120):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.run(["pg_isready", "-h", "127.0.0.1", "-p", str(self.port)], check=False).returncode == 0:
                try:
                    self.sql("SELECT 1")
                    return
                except SystemExit:
                    pass
            time.sleep(0.2)
        raise SystemExit("faults: PostgreSQL did not come back within two minutes")

    def backends(self):
        return [int(pid) for pid in self.sql("SELECT pid FROM pg_stat_activity WHERE datname = 'stratus' "
                                             "AND backend_type = 'client backend' AND pid <> pg_backend_pid()", check=False)]

    def stop(self):
        self.run(["pg_ctl", "-D", self.folder, "-m", "fast", "-w", "stop"], check=False)


class Proxy:
    """TCP between the servers and PostgreSQL; `cut` resets every connection it carries (RST both
    ways, at once). One thread with a selector: a socket closed while another thread is blocked
    reading it stays open in the kernel until that read returns, so a cut made that way left
    connections neither open nor reset, and their requests waiting for ever."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.selector = selectors.DefaultSelector()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(256)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.wake_read, self.wake_write = socket.socketpair()
        self.wake_read.setblocking(False)
        self.selector.register(self.listener, selectors.EVENT_READ, ("accept", None))
        self.selector.register(self.wake_read, selectors.EVENT_READ, ("wake", None))
        self.peers = {}  # socket -> its other end
        self.cuts = []   # (done event, result list)
        self.lock = threading.Lock()
        threading.Thread(target=self.loop, daemon=True).start()

    def loop(self):
        while True:
            for key, _ in self.selector.select():
                kind, _ = key.data
                if kind == "accept":
                    try:
                        client, _ = self.listener.accept()
                        server = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
                    except OSError:
                        try:
                            client.close()
                        except (OSError, UnboundLocalError):
                            pass
                        continue
                    for end in (client, server):
                        end.setblocking(False)
                        self.selector.register(end, selectors.EVENT_READ, ("pipe", None))
                    self.peers[client], self.peers[server] = server, client
                elif kind == "wake":
                    try:
                        self.wake_read.recv(64)
                    except OSError:
                        pass
                    with self.lock:
                        cuts, self.cuts = self.cuts, []
                    for done, result in cuts:
                        count = len(self.peers) // 2
                        for end in list(self.peers):
                            self.drop(end, reset=True)
                        result.append(count)
                        done.set()
                else:
                    source = key.fileobj
                    if source not in self.peers:
                        continue
                    try:
                        data = source.recv(65536)
                    except OSError:
                        data = b""
                    if not data:
                        self.drop(source, reset=False)
                        continue
                    try:
                        # Small enough to go at once on loopback; a full buffer blocks briefly.
                        self.peers[source].setblocking(True)
                        self.peers[source].sendall(data)
                        self.peers[source].setblocking(False)
                    except OSError:
                        self.drop(source, reset=False)

    def drop(self, end, reset):
        other = self.peers.pop(end, None)
        for sock in (end, other):
            if sock is None:
                continue
            self.peers.pop(sock, None)
            try:
                self.selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            try:
                if reset:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
            except OSError:
                pass

    def cut(self):
        done, result = threading.Event(), []
        with self.lock:
            self.cuts.append((done, result))
        self.wake_write.send(b"x")
        done.wait(10)
        return result[0] if result else 0


class Server:
    def __init__(self, binary, folder, index, database_port):
        self.binary, self.index = binary, index
        self.port = free_port()
        self.folder = os.path.join(folder, f"server{index}")
        os.makedirs(self.folder, exist_ok=True)
        self.url = f"postgres://postgres@127.0.0.1:{database_port}/stratus"
        self.process = None
        self.starts = 0

    def start(self):
        self.starts += 1
        out = open(os.path.join(self.folder, "serve.log"), "a")
        self.process = subprocess.Popen([self.binary, "serve", "--port", str(self.port), "--database-url", self.url, "--admin-token", ADMIN,
                                         "--bcrypt-cost", "4", "--data-dir", self.folder, "--statistics-interval", "0"],
                                        stdout=out, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"faults: stratus serve {self.index} exited with {self.process.returncode}; see {self.folder}/serve.log")
            try:
                if request(self.port, "GET", "/health", None, timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise SystemExit(f"faults: stratus serve {self.index} did not answer /health within two minutes")

    def kill(self):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.kill()


def request(port, method, path, body, headers=None, timeout=60):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(method, path, body=json.dumps(body) if body is not None else None,
                           headers={"Content-Type": "text/plain", **(headers or {})})
        response = connection.getresponse()
        data = response.read()
        try:
            return response.status, json.loads(data or b"null")
        except ValueError:
            return response.status, {"raw": data[:200].decode(errors="replace")}
    finally:
        connection.close()


class Campaign:
    def __init__(self, args, folder, servers, postgres, proxy):
        self.args, self.folder, self.servers, self.postgres, self.proxy = args, folder, servers, postgres, proxy
        self.lock = threading.Lock()
        self.outcomes = []  # (fault, kind, names, zone, writer, status, code, sent, answered)
        self.faults = []    # (name, cycle, began, ended)
        self.current = "setup"
        self.stop = threading.Event()
        self.start_time = time.time()

    def setup(self):
        port = self.servers[0].port
        admin = {"Authorization": f"Bearer {ADMIN}"}
        request(port, "POST", "/management/1/containers", {"name": CONTAINER}, admin)
        status, answer = request(port, "POST", f"/management/1/containers/{CONTAINER}/tokens", {"environment": "development", "name": "faults"}, admin)
        if status != 201:
            raise SystemExit(f"faults: no API token: {status} {answer}")
        self.api_token = answer["apiToken"]
        self.users = []
        for writer in range(self.args.writers):
            status, answer = request(port, "POST", f"/auth/1/{CONTAINER}/development/signup?ckAPIToken={self.api_token}",
                                     {"emailAddress": f"writer{writer}@example.com", "password": "correct horse battery"})
            if status != 200:
                raise SystemExit(f"faults: sign-up failed: {status} {answer}")
            token = answer["ckWebAuthToken"]
            self.users.append(token)
            status, answer = self.data(port, token, "zones/modify", {"operations": [{"operationType": "create", "zone": {"zoneID": {"zoneName": f"z{writer}"}}}]})
            if status != 200:
                raise SystemExit(f"faults: zone not made: {status} {answer}")

    def data(self, port, token, operation, body):
        query = f"ckAPIToken={self.api_token}&ckWebAuthToken={urllib.parse.quote(token, safe='')}"
        return request(port, "POST", f"/database/1/{CONTAINER}/development/private/{operation}?{query}", body)

    def writer(self, index):
        token = self.users[index]
        sequence = 0
        while not self.stop.is_set():
            sequence += 1
            kind = ("default", "custom", "atomic")[sequence % 3]
            names = [f"w{index}-{sequence}"] if kind != "atomic" else [f"w{index}-{sequence}a", f"w{index}-{sequence}b"]
            zone = "_defaultZone" if kind == "default" else f"z{index}"
            body = {"operations": [{"operationType": "create", "record": {"recordType": "Note", "recordName": name,
                                                                             "fields": {"writer": {"value": index}, "n": {"value": sequence}}}}
                                   for name in names]}
            if kind != "default":
                body["zoneID"] = {"zoneName": zone}
            if kind == "atomic":
                body["atomic"] = True
            server = self.servers[sequence % len(self.servers)]
            fault = self.current
            sent = time.time()
            try:
                status, answer = self.data(server.port, token, "records/modify", body)
                code = (answer or {}).get("serverErrorCode") if isinstance(answer, dict) else None
                records = (answer or {}).get("records") if isinstance(answer, dict) else None
                if status == 200 and isinstance(records, list) and len(records) == len(names) \
                        and all(r.get("recordChangeTag") and not r.get("serverErrorCode") for r in records):
                    code = "SAVED"
                elif status == 200 and isinstance(records, list) and records:
                    code = records[0].get("serverErrorCode")
            except OSError as error:
                status, code = 0, type(error).__name__
                time.sleep(0.05)
            with self.lock:
                self.outcomes.append((fault, kind, names, zone, index, status, code, sent, time.time()))

    def inject(self, fault, cycle):
        began = time.time()
        detail = ""
        if fault == "fast":
            self.postgres.pg_ctl("restart", "-m", "fast")
        elif fault == "immediate":
            self.postgres.pg_ctl("restart", "-m", "immediate")
        elif fault == "crash":
            pids = self.postgres.backends()
            if pids:
                os.kill(random.choice(pids), signal.SIGKILL)
                detail = "a backend SIGKILLed"
            time.sleep(0.5)
            self.postgres.wait_ready()
        elif fault == "terminate":
            ended = self.postgres.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'stratus' "
                                      "AND backend_type = 'client backend' AND pid <> pg_backend_pid()", check=False)
            detail = f"{len(ended)} backends terminated"
        elif fault == "server-kill":
            server = self.servers[cycle % len(self.servers)]
            server.kill()
            time.sleep(0.3)
            server.start()
            detail = f"server {server.index}"
        elif fault == "cut":
            detail = f"{self.proxy.cut()} connections cut"
        self.faults.append((fault, cycle, began, time.time(), detail))

    def run(self):
        threads = [threading.Thread(target=self.writer, args=(index,), daemon=True) for index in range(self.args.writers)]
        for thread in threads:
            thread.start()
        for fault in self.args.faults:
            self.current = fault
            for cycle in range(self.args.cycles):
                time.sleep(random.uniform(0.6, 1.4))
                self.inject(fault, cycle)
            time.sleep(1.0)
        self.current = "after"
        time.sleep(1.0)
        self.stop.set()
        for thread in threads:
            thread.join(timeout=120)

    def check(self):
        self.postgres.wait_ready()
        for server in self.servers:
            if server.process.poll() is not None:
                server.start()
        acknowledged = {}
        for (fault, kind, names, zone, writer, status, code, sent, answered) in self.outcomes:
            if code == "SAVED":
                for name in names:
                    acknowledged[name] = (fault, zone, writer, answered)
        container = self.postgres.sql(f"SELECT container_id FROM containers WHERE name = '{CONTAINER}'")[0]
        stored = {}
        for line in self.postgres.sql(f"SELECT z.zone_name || '|' || z.owner || '|' || r.record_name FROM records r JOIN zones z "
                                      f"ON z.container_id = r.container_id AND z.zone_id = r.zone_id WHERE r.container_id = {container} AND NOT r.deleted"):
            zone, owner, name = line.split("|", 2)
            stored[name] = (zone, owner)
        missing = sorted(name for name in acknowledged if name not in stored)
        # Every zone's feed, from the start: each stored record exactly once, nothing else.
        feed_errors = []
        for index, token in enumerate(self.users):
            for zone in ("_defaultZone", f"z{index}"):
                seen = []
                sync_token = None
                for _ in range(10000):
                    body = {"zones": [{"zoneID": {"zoneName": zone}, **({"syncToken": sync_token} if sync_token else {})}]}
                    # As a client would: TRY_AGAIN_LATER (the servers' pools may still be recovering
                    # from the last fault) is asked again, for up to a minute.
                    deadline = time.time() + 60
                    while True:
                        try:
                            status, answer = self.data(self.servers[0].port, token, "changes/zone", body)
                        except OSError as error:
                            status, answer = 0, {"error": str(error)}
                        if status not in (0, 503) or time.time() > deadline:
                            break
                        time.sleep(0.5)
                    page = (answer.get("zones") or [{}])[0] if status == 200 else {}
                    if status != 200 or page.get("serverErrorCode"):
                        feed_errors.append(f"writer {index} zone {zone}: feed answered {status} {json.dumps(answer)[:200]}")
                        break
                    seen += [record["recordName"] for record in page.get("records", []) if not record.get("deleted")]
                    sync_token = page.get("syncToken")
                    if not page.get("moreComing"):
                        break
                expected = {name for name, (z, _) in stored.items() if z == zone and name.startswith(f"w{index}-")}
                duplicates = sorted({name for name in seen if seen.count(name) > 1})
                if duplicates:
                    feed_errors.append(f"writer {index} zone {zone}: {len(duplicates)} records twice in the feed, e.g. {duplicates[:5]}")
                absent = sorted(expected - set(seen))
                if absent:
                    feed_errors.append(f"writer {index} zone {zone}: {len(absent)} stored records not in the feed, e.g. {absent[:5]}")
                extra = sorted(set(seen) - expected)
                if extra:
                    feed_errors.append(f"writer {index} zone {zone}: {len(extra)} records in the feed that are not stored, e.g. {extra[:5]}")
        return acknowledged, stored, missing, feed_errors

    def report(self, acknowledged, stored, missing, feed_errors):
        rows = []
        for fault in ["setup"] + list(self.args.faults) + ["after"]:
            outcomes = [o for o in self.outcomes if o[0] == fault]
            if not outcomes:
                continue
            saved = [o for o in outcomes if o[6] == "SAVED"]
            lost = [name for o in saved for name in o[2] if name in missing]
            rows.append((fault, len(outcomes), len(saved), len(lost), sum(1 for o in outcomes if o[5] == 500),
                         sum(1 for o in outcomes if o[5] == 503), sum(1 for o in outcomes if o[5] == 0),
                         sum(1 for o in outcomes if o[5] not in (0, 200, 500, 503))))
        servers = len(self.servers)
        print(f"\nfaults: {servers} server{'s' if servers > 1 else ''}, {self.args.writers} writers, {self.args.cycles} cycles of each fault")
        print(f"{'fault':<12} {'writes':>7} {'acknowledged':>13} {'missing':>8} {'500':>5} {'503':>6} {'refused':>8} {'other':>6} {'slowest':>8}")
        for row in rows:
            slowest = max((o[8] - o[7] for o in self.outcomes if o[0] == row[0]), default=0.0)
            print(f"{row[0]:<12} {row[1]:>7} {row[2]:>13} {row[3]:>8} {row[4]:>5} {row[5]:>6} {row[6]:>8} {row[7]:>6} {slowest:>7.1f}s")
        total_500 = sum(row[4] for row in rows)
        # Never a hang: a request that took 30 s or more (the client gives up at 60) fails the run.
        hung = [o for o in self.outcomes if o[8] - o[7] >= 30]
        for o in hung[:10]:
            print(f"faults: HUNG {o[2][0]} (writer {o[4]}, during {o[0]}) sent at +{o[7] - self.start_time:.3f} s, "
                  f"{'answered ' + str(o[5]) if o[5] else 'no answer'} after {o[8] - o[7]:.1f} s")
        other = sum(row[7] for row in rows)
        print(f"faults: {len(acknowledged)} records acknowledged, {len(stored)} stored, {len(missing)} acknowledged and missing, "
              f"{total_500} answered 500, {other} answered otherwise; feeds: {'each stored record exactly once' if not feed_errors else 'WRONG'}")
        for line in feed_errors:
            print(f"faults: feed: {line}")
        for name in missing[:50]:
            fault, zone, writer, answered = acknowledged[name]
            nearest = min(self.faults, key=lambda f: abs(answered - f[2])) if self.faults else None
            where = f", {answered - nearest[2]:+.3f} s from {nearest[0]} #{nearest[1]} ({nearest[4]}; it took {nearest[3] - nearest[2]:.2f} s)" if nearest else ""
            print(f"faults: MISSING {name} (writer {writer}, zone {zone}) answered 200 at +{answered - self.start_time:.3f} s{where}")
        if other:
            codes = sorted({f"{o[5]} {o[6]}" for o in self.outcomes if o[5] not in (0, 200, 500, 503)})
            print(f"faults: other answers: {codes[:10]}")
        return not missing and total_500 == 0 and not feed_errors and other == 0 and not hung


def main():
    parser = argparse.ArgumentParser(description="The fault campaign (see Deploy/faults/faults.sh).")
    parser.add_argument("binary")
    parser.add_argument("--cycles", type=int, default=2)
    parser.add_argument("--servers", default="1 2")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--faults", default=" ".join(FAULTS))
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder even when nothing is lost")
    args = parser.parse_args()
    args.faults = args.faults.split()
    unknown = [f for f in args.faults if f not in FAULTS]
    if unknown:
        raise SystemExit(f"faults: unknown faults {unknown}; known: {' '.join(FAULTS)}")
    ok = True
    for count in [int(n) for n in args.servers.split()]:
        folder = tempfile.mkdtemp(prefix=f"stratus-faults-{count}-")
        os.chmod(folder, 0o755)
        postgres = Postgres(folder)
        proxy = Proxy(postgres.port)
        servers = [Server(args.binary, folder, index, proxy.port) for index in range(count)]
        passed = False
        try:
            for server in servers:
                server.start()
            campaign = Campaign(args, folder, servers, postgres, proxy)
            campaign.setup()
            log(f"{count} server(s) up; {args.writers} writers; faults {' '.join(args.faults)}, {args.cycles} cycles each")
            campaign.run()
            passed = campaign.report(*campaign.check())
        finally:
            for server in servers:
                server.stop()
            postgres.stop()
        if passed and not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            log(f"{'FAILED: ' if not passed else ''}logs kept in {folder} (server*/serve.log, pg/server.log)")
        ok = ok and passed
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Moves a busy container to the other Citus worker while writers and a feed reader run.

    move.py CLUSTER_ENV

Writers create records in one container (each acknowledged name is remembered), a reader follows
the zone's change feed with its sync token, and meanwhile citus_move_shard_placement moves the
shards holding the container (their whole co-located group) to the other worker, blocking
writes while it copies. Then: every acknowledged record must be found by a lookup and must have
come through the feed, exactly once; no answer may be a 500 (503 TRY_AGAIN_LATER is allowed
during the cut-over). Prints the counts; exits 1 on the first thing that is not so.
"""
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

env = dict(line.strip().split("=", 1) for line in open(sys.argv[1]) if "=" in line)
BASE, ADMIN = env["STRATUS_CLUSTER_URL"], env["STRATUS_ADMIN_TOKEN"]
COORDINATOR = env["STRATUS_CLUSTER_COORDINATOR_URL"]
CONTAINER = f"iCloud.com.example.Move{int(time.time())}"
lock = threading.Lock()
statuses = {}
acknowledged = []
fed = []
stop = threading.Event()


def call(method, path, body=None, admin=False):
    request = urllib.request.Request(BASE + path, data=json.dumps(body).encode() if body is not None else None, method=method)
    request.add_header("Content-Type", "application/json")
    if admin:
        request.add_header("Authorization", "Bearer " + ADMIN)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, data = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, data = error.code, error.read()
    with lock:
        statuses[status] = statuses.get(status, 0) + 1
    return status, (json.loads(data) if data else None)


def sql(statement):
    port = urllib.parse.urlparse(COORDINATOR).port
    return subprocess.run(["/usr/lib/postgresql/15/bin/psql", "-X", "-A", "-t", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                           "-d", "stratus", "-c", statement], check=True, capture_output=True, text=True).stdout.strip()


def fail(text):
    print(f"citus move: {text}", flush=True)
    sys.exit(1)


def writer(query, number):
    index = 0
    while not stop.is_set():
        name = f"w{number}-{index}"
        status, answer = call("POST", f"/database/1/{CONTAINER}/development/private/records/modify?{query}",
                              {"zoneID": {"zoneName": "Z"}, "operations": [{"operationType": "create", "record": {
                                  "recordName": name, "recordType": "Note", "fields": {"n": {"value": index}}}}]})
        if status == 200 and "recordChangeTag" in answer["records"][0]:
            with lock:
                acknowledged.append(name)
            index += 1
        elif status not in (503,):
            fail(f"a write was answered {status}: {answer}")
        else:
            time.sleep(0.05)


def reader(query):
    token = None
    quiet = 0
    while quiet < 3:
        done = stop.is_set()
        zone = {"zoneID": {"zoneName": "Z"}}
        if token:
            zone["syncToken"] = token
        status, answer = call("POST", f"/database/1/{CONTAINER}/development/private/changes/zone?{query}", {"zones": [zone]})
        if status == 503:
            time.sleep(0.05)
            continue
        if status != 200:
            fail(f"a feed read was answered {status}: {answer}")
        result = answer["zones"][0]
        records = result.get("records", [])
        with lock:
            fed.extend(record["recordName"] for record in records)
        token = result["syncToken"]
        if result.get("moreComing"):
            continue
        if done:
            quiet = quiet + 1 if not records else 0
        time.sleep(0.02)


def main():
    call("POST", "/management/1/containers", {"name": CONTAINER}, admin=True)
    token = call("POST", f"/management/1/containers/{CONTAINER}/tokens", {"environment": "development"}, admin=True)[1]["apiToken"]
    session = call("POST", f"/auth/1/{CONTAINER}/development/signup?ckAPIToken={token}",
                   {"emailAddress": "mover@example.com", "password": "correct horse battery"})[1]
    query = f"ckAPIToken={token}&ckWebAuthToken={urllib.parse.quote(session['ckWebAuthToken'], safe='')}"
    call("POST", f"/database/1/{CONTAINER}/development/private/zones/modify?{query}",
         {"operations": [{"operationType": "create", "zone": {"zoneID": {"zoneName": "Z"}}}]})
    container_id = sql(f"SELECT container_id FROM containers WHERE name = '{CONTAINER}'")
    shard = sql(f"SELECT get_shard_id_for_distribution_column('records', {container_id})")
    source = sql(f"SELECT nodeport FROM citus_shards WHERE shardid = {shard}")
    target = sql(f"SELECT nodeport FROM pg_dist_node WHERE noderole = 'primary' AND groupid > 0 AND nodeport <> {source} LIMIT 1")
    threads = [threading.Thread(target=writer, args=(query, n)) for n in range(4)] + [threading.Thread(target=reader, args=(query,))]
    for thread in threads:
        thread.start()
    time.sleep(3)
    before = len(acknowledged)
    started = time.time()
    sql(f"SELECT citus_move_shard_placement({shard}, '127.0.0.1', {source}, '127.0.0.1', {target}, shard_transfer_mode => 'block_writes')")
    moved = time.time() - started
    now_on = sql(f"SELECT nodeport FROM citus_shards WHERE shardid = {shard}")
    if now_on != target:
        fail(f"the shard is on {now_on}, not {target}")
    during = len(acknowledged) - before
    time.sleep(3)
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    names = list(acknowledged)
    missing = []
    for start in range(0, len(names), 200):
        chunk = names[start:start + 200]
        status, answer = call("POST", f"/database/1/{CONTAINER}/development/private/records/lookup?{query}",
                              {"zoneID": {"zoneName": "Z"}, "records": [{"recordName": n} for n in chunk]})
        if status != 200:
            fail(f"lookup answered {status}: {answer}")
        missing += [r.get("recordName") for r in answer["records"] if "serverErrorCode" in r]
    repeated = len(fed) - len(set(fed))
    unfed = set(names) - set(fed)
    print(f"citus move: container {container_id} moved from worker :{source} to :{target} in {moved:.1f} s while 4 writers and a "
          f"feed reader ran; {len(names)} writes acknowledged ({during} during the move); answers by status {dict(sorted(statuses.items()))}; "
          f"{len(missing)} acknowledged records missing, {len(unfed)} not delivered by the feed, {repeated} delivered twice", flush=True)
    if missing or unfed or repeated or any(status >= 500 and status != 503 for status in statuses):
        fail("a write was lost, the feed was not exact, or an answer was a 500")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Times the console's pages against a server holding many records: each page fetched one at a
time (a person's clicks), after a warm-up, as the browser does (session cookie, same origin).

    bench.py SERVER_URL ADMIN_TOKEN STATE_FILE [REQUESTS]

STATE_FILE is what `stratus-bench seed` wrote (its first container is used: its user's private
zones hold the records; the page shows the first zone's). Prints one row per page: p50, p95 and
p99 in milliseconds (`console-records` is the records page with a query on an index, 50 records a
page). Exits 1 when any page's p95 is over 50 ms, the goal.
"""
import http.client
import json
import re
import sys
import time
import urllib.parse

BASE, ADMIN, STATE = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3]
REQUESTS = int(sys.argv[4]) if len(sys.argv) > 4 else 200
url = urllib.parse.urlparse(BASE)
connection = http.client.HTTPConnection(url.hostname, url.port, timeout=60)


def request(method, path, body=None, headers=None):
    connection.request(method, path, body=body, headers=headers or {})
    response = connection.getresponse()
    return response.status, dict(response.getheaders()), response.read()


def main():
    state = json.load(open(STATE))
    tenant = state["tenants"][0]
    container, zone = tenant["container"], tenant["zones"][0]
    status, _, body = request("GET", f"/database/1/{container}/development/private/users/caller?{tenant['query']}")
    user = json.loads(body)["userRecordName"]
    form = urllib.parse.urlencode({"adminToken": ADMIN})
    status, headers, _ = request("POST", "/console/signin", form, {"Content-Type": "application/x-www-form-urlencoded", "Origin": BASE})
    cookie = headers.get("Set-Cookie", "").split(";")[0]
    if status != 303 or not cookie:
        raise SystemExit(f"console bench: could not sign in ({status})")
    quoted = urllib.parse.quote(container, safe="")
    place = urllib.parse.urlencode({"environment": "development", "database": "private", "user": user,
                                    "reason": "console bench", "zone": zone})
    records = f"/console/c/{quoted}/records?{place}&type=Item&f1=rank&o1=GREATER_THAN_OR_EQUALS&v1=100&sort=rank&order=ascending&limit=50"
    status, _, body = request("GET", records, headers={"Cookie": cookie})
    names = re.findall(r'name=([^"&]+)">', body.decode())
    if status != 200 or not names:
        raise SystemExit(f"console bench: the records page answered {status} with no records: {body[-600:]!r}")
    pages = [
        ("containers", "/console"),
        ("overview", f"/console/c/{quoted}"),
        ("schema", f"/console/c/{quoted}/schema"),
        ("deploy plan", f"/console/c/{quoted}/deploy"),
        ("console-records", records),
        ("records, no query", f"/console/c/{quoted}/records?{place}&type=Item"),
        ("record", f"/console/c/{quoted}/records/view?{place}&name={names[0]}"),
        ("users", f"/console/c/{quoted}/users"),
        ("usage", f"/console/c/{quoted}/usage"),
        ("audit log", f"/console/c/{quoted}/audit"),
        ("tokens and keys", f"/console/c/{quoted}/tokens"),
        ("team", f"/console/c/{quoted}/team"),
        ("logs", f"/console/c/{quoted}/logs"),
        ("logs, text search", f"/console/c/{quoted}/logs?q=lookup"),
        ("logs, no match", f"/console/c/{quoted}/logs?q=no-such-words"),
        ("telemetry", f"/console/c/{quoted}/telemetry"),
        ("operators", "/console/operators"),
        ("server", "/console/server"),
    ]
    total = state["recordsPerZone"] * sum(len(t["zones"]) for t in state["tenants"])
    print(f"console pages, {REQUESTS} requests each, one at a time; {total} records in {len(state['tenants'])} containers, "
          f"{state['recordsPerZone'] * len(tenant['zones'])} in {container} ({state['recordsPerZone']} in the zone shown)")
    print(f"{'page':<20} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    verdict = 0
    slow = []
    for name, path in pages:
        for _ in range(10):
            request("GET", path, headers={"Cookie": cookie})
        timings = []
        for _ in range(REQUESTS):
            started = time.perf_counter()
            status, _, _ = request("GET", path, headers={"Cookie": cookie})
            timings.append((time.perf_counter() - started) * 1000)
            if status != 200:
                raise SystemExit(f"console bench: {name} answered {status}")
        timings.sort()
        p50, p95, p99 = (timings[int(len(timings) * q) - 1] for q in (0.5, 0.95, 0.99))
        print(f"{name:<20} {p50:8.2f} {p95:8.2f} {p99:8.2f}")
        if p95 > 50:
            verdict = 1
            slow.append(name)
    print("every page: p95 " + (f"over the 50 ms goal on {', '.join(slow)}" if verdict else "within the 50 ms goal"))
    sys.exit(verdict)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Pushes to devices end to end, against stand-ins of APNs and a Web Push service that we did not
write the checking side of (Deploy/push/standins.py: h2, cryptography, http_ece, py_vapid). Run by
Deploy/push/e2e.sh: e2e.py STRATUS_BINARY CERT_DIR OUTPUT_DIR.

A PostgreSQL cluster of its own, `stratus serve` with --apns-host and --push-ca-file pointing at
the stand-ins, the APNs credential set with the CLI, a user who registers two APNs devices (hex and
base64) and a browser, and then, through the data API:
  - a zone subscription's silent push: background, priority 5, content-available, ck.fet, the
    collapse id, apns-id = ck.nid; the same notification decrypted by the Web Push stand-in;
  - an alert subscription: every notificationInfo key mapped, a 5 KB desired key cut to fit;
  - 429 with Retry-After and 500 retried (same apns-id); 410, BadDeviceToken and a browser's 410
    drop the device; DeviceTokenNotForTopic shown by 'stratus push status';
  - a server SIGKILLed while a push is in flight: sent again after restart, delivered once;
  - two servers on one database under writes: each notification delivered once, answers padded
    to 4 KB coming back on one connection per server (the client gives flow-control credit back).
Every request the stand-ins got must pass their checks."""
import base64
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "faults"))
from faults import Postgres, request, free_port  # noqa: E402
from standins import APNs, WebPush  # noqa: E402
from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec, rsa  # noqa: E402

BINARY, CERTS, OUT = sys.argv[1:4]
ADMIN = "push-e2e-admin-token"
CONTAINER = "iCloud.com.example.PushNotes"
TOPIC = "com.example.PushNotes"
# Another app of the same team, with the same signing key.
CONTAINER_TWO, TOPIC_TWO = "iCloud.com.example.PushTasks", "com.example.PushTasks"
KEY_ID, TEAM_ID = "ABC123DEFG", "TEAM123456"
failures = []


def check(condition, what):
    print(("ok    " if condition else "FAIL  ") + what, flush=True)
    if not condition:
        failures.append(what)


def wait(predicate, seconds=20, what="a condition"):
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    check(False, f"within {seconds} s: {what}")
    return None


class Server:
    def __init__(self, index, database_port, apns_port):
        self.index, self.port = index, free_port()
        self.folder = os.path.join(OUT, f"server{index}")
        os.makedirs(self.folder, exist_ok=True)
        self.args = [BINARY, "serve", "--port", str(self.port), "--database-url", f"postgres://postgres@127.0.0.1:{database_port}/stratus",
                     "--admin-token", ADMIN, "--bcrypt-cost", "4", "--data-dir", self.folder, "--public-url", f"http://127.0.0.1:{self.port}",
                     "--apns-host", f"localhost:{apns_port}", "--push-ca-file", os.path.join(CERTS, "ca.pem")]
        self.process = None

    def start(self):
        self.process = subprocess.Popen(self.args, stdout=open(os.path.join(self.folder, "serve.log"), "a"), stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"push e2e: stratus serve exited; see {self.folder}/serve.log")
            try:
                if request(self.port, "GET", "/health", None, timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise SystemExit("push e2e: stratus serve did not answer /health")

    def kill(self):
        self.process.kill()
        self.process.wait()

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=40)


def cli(server, *args):
    done = subprocess.run([BINARY, *args, "--server", f"http://127.0.0.1:{server.port}", "--admin-token", ADMIN], capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


def main():
    apns_key = ec.generate_private_key(ec.SECP256R1())
    key_file = os.path.join(OUT, "AuthKey_ABC123DEFG.p8")
    with open(key_file, "wb") as f:
        f.write(apns_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    rsa_file = os.path.join(OUT, "rsa.p8")
    with open(rsa_file, "wb") as f:
        f.write(rsa.generate_private_key(65537, 2048).private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                                      serialization.NoEncryption()))
    apns = APNs(os.path.join(CERTS, "server.pem"), os.path.join(CERTS, "server.key"), {KEY_ID: (TEAM_ID, apns_key.public_key())}, (TOPIC, TOPIC_TWO))
    web = WebPush(os.path.join(CERTS, "server.pem"), os.path.join(CERTS, "server.key"))
    postgres = Postgres(tempfile.mkdtemp(prefix="stratus-push-pg."))
    servers = [Server(0, postgres.port, apns.port)]
    try:
        servers[0].start()
        run(servers, postgres, apns, web, key_file, rsa_file)
    finally:
        for server in servers:
            server.stop()
        postgres.stop()
    check(not apns.problems, f"every APNs request passed the stand-in's checks ({len(apns.received)} requests; problems: {apns.problems[:3]})")
    check(not web.problems, f"every Web Push request decrypted and verified ({len(web.received)} requests; problems: {web.problems[:3]})")
    if failures:
        print(f"push e2e: {len(failures)} check(s) failed", flush=True)
        sys.exit(1)
    print("push e2e: all checks passed", flush=True)


def run(servers, postgres, apns, web, key_file, rsa_file):
    a = servers[0]
    admin = {"Authorization": f"Bearer {ADMIN}"}
    request(a.port, "POST", "/management/1/containers", {"name": CONTAINER}, admin)
    status, answer = request(a.port, "POST", f"/management/1/containers/{CONTAINER}/tokens", {"environment": "development", "name": "push"}, admin)
    api_token = answer["apiToken"]

    # The credential, by the CLI: bad input refused clearly, then set.
    base = ["push", "apns", "set", "--container", CONTAINER, "--environment", "development"]
    code, text = cli(a, *base, "--key-file", rsa_file, "--key-id", KEY_ID, "--team-id", TEAM_ID, "--topic", TOPIC)
    check(code != 0 and "not an APNs key" in text, f"an RSA key is refused: {text.strip()[:160]}")
    code, text = cli(a, *base, "--key-file", key_file, "--key-id", "short", "--team-id", TEAM_ID, "--topic", TOPIC)
    check(code != 0 and "keyID" in text and "10 letters and digits" in text, f"a malformed key id is refused: {text.strip()[:160]}")
    code, text = cli(a, *base, "--key-file", key_file, "--key-id", KEY_ID, "--team-id", TEAM_ID, "--topic", "not a bundle id")
    check(code != 0 and "bundle id" in text, f"a malformed topic is refused: {text.strip()[:160]}")
    code, text = cli(a, *base, "--key-file", key_file, "--key-id", KEY_ID, "--team-id", TEAM_ID, "--topic", TOPIC)
    check(code == 0, f"stratus push apns set: {text.strip()[:160]}")
    code, text = cli(a, "push", "status", "--container", CONTAINER)
    check(code == 0 and f"topic {TOPIC}" in text and "BEGIN" not in text, f"stratus push status names the topic, never the key: {text.splitlines()[:2]}")

    status, answer = request(a.port, "POST", f"/auth/1/{CONTAINER}/development/signup?ckAPIToken={api_token}",
                             {"emailAddress": "ada@example.com", "password": "correct horse battery"})
    session = answer["ckWebAuthToken"]
    query = f"ckAPIToken={api_token}&ckWebAuthToken={urllib.parse.quote(session, safe='')}"

    def data(server, operation, body, database="private"):
        return request(server.port, "POST", f"/database/1/{CONTAINER}/development/{database}/{operation}?{query}", body)

    def register(body):
        status, answer = request(a.port, "POST", f"/device/1/{CONTAINER}/development/tokens/register?{query}", body)
        check(status == 200, f"tokens/register {str(body)[:60]}: {status} {str(answer)[:120]}")

    status, _ = data(a, "zones/modify", {"operations": [{"operationType": "create", "zone": {"zoneID": {"zoneName": "Notes"}}}]})
    # The record type a query subscription names must exist (development makes it on first save).
    data(a, "records/modify", {"operations": [{"operationType": "create", "record": {"recordType": "Alert", "recordName": "a0",
                                                                                      "fields": {"title": {"value": "first"}, "big": {"value": "x"}}}}]})
    status, answer = data(a, "subscriptions/modify", {"operations": [
        {"operationType": "create", "subscription": {"subscriptionID": "zone-notes", "subscriptionType": "zone", "zoneID": {"zoneName": "Notes"},
                                                     "notificationInfo": {"shouldSendContentAvailable": True}}},
        {"operationType": "create", "subscription": {"subscriptionID": "alerts", "subscriptionType": "query", "query": {"recordType": "Alert"},
                                                     "firesOn": ["create"], "notificationInfo": {
                                                         "alertBody": "Something happened", "alertLocalizationKey": "ALERT_KEY",
                                                         "alertLocalizationArgs": ["one", "two"], "alertActionLocalizationKey": "OPEN",
                                                         "alertLaunchImage": "launch.png", "soundName": "chime.caf", "shouldBadge": True,
                                                         "category": "NOTE_ALERT", "desiredKeys": ["title", "big"]}}}]})
    check(status == 200 and all("serverErrorCode" not in s for s in answer.get("subscriptions", [])), f"subscriptions made: {str(answer)[-300:]}")

    t_hex = "a1" * 32
    t_raw = bytes(range(100, 132))
    t_b64 = base64.b64encode(t_raw).decode()
    register({"apnsEnvironment": "development", "apnsToken": t_hex})
    register({"apnsEnvironment": "development", "apnsToken": t_b64})
    browser = web.subscribe("browser1")
    register({"apnsEnvironment": "development", "webPushSubscription": browser})
    status, key = request(a.port, "GET", f"/device/1/{CONTAINER}/development/webpush/key?{query}", None)
    vapid_public = key.get("vapidPublicKey")

    # A zone subscription: a silent push to each device.
    status, _ = data(a, "records/modify", {"zoneID": {"zoneName": "Notes"}, "operations": [
        {"operationType": "create", "record": {"recordType": "Note", "recordName": "n1", "fields": {"title": {"value": "hello"}}}}]})
    first = wait(lambda: apns.delivered(t_hex), what="the zone notification reaches the hex-registered device")
    wait(lambda: apns.delivered(t_raw.hex()), what="and the base64-registered one, at /3/device/<hex>")
    pushed = wait(lambda: [r for r in web.received if r["name"] == "browser1"], what="and the browser")
    if first:
        request_ = first[0]
        headers, payload = request_["headers"], request_["payload"] or {}
        check(headers.get("apns-push-type") == "background" and headers.get("apns-priority") == "5", "a silent push: push type background, priority 5")
        check(payload.get("aps") == {"content-available": 1}, f"aps is content-available alone: {payload.get('aps')}")
        fet = payload.get("ck", {}).get("fet", {})
        check(fet.get("sid") == "zone-notes" and fet.get("zid") == "Notes", f"ck.fet names the subscription and zone: {fet}")
        check(headers.get("apns-id") == payload.get("ck", {}).get("nid"), "apns-id is the notification's id (ck.nid)")
        check(headers.get("apns-collapse-id") == "zone-notes", f"apns-collapse-id is the subscription: {headers.get('apns-collapse-id')}")
        check(request_["claims"].get("iss") == TEAM_ID, "the provider token names the team")
    if pushed:
        message = pushed[0]["message"] or {}
        check(message.get("ck", {}).get("fet", {}).get("sid") == "zone-notes", f"the browser's message decrypts to the notification: {str(message)[:120]}")
        check(pushed[0]["vapid_key"] == vapid_public, "the VAPID key is the container's (GET webpush/key)")

    # Another app of the team, with the same signing key: its pushes carry its own topic and go on
    # the key's connection, which the first container's pushes opened (no new connection).
    connections = apns.connections
    request(a.port, "POST", "/management/1/containers", {"name": CONTAINER_TWO}, admin)
    status, answer = request(a.port, "POST", f"/management/1/containers/{CONTAINER_TWO}/tokens", {"environment": "development", "name": "push"}, admin)
    token_two = answer["apiToken"]
    code, text = cli(a, "push", "apns", "set", "--container", CONTAINER_TWO, "--environment", "development",
                     "--key-file", key_file, "--key-id", KEY_ID, "--team-id", TEAM_ID, "--topic", TOPIC_TWO)
    check(code == 0, f"stratus push apns set for a second app with the same key: {text.strip()[:160]}")
    status, answer = request(a.port, "POST", f"/auth/1/{CONTAINER_TWO}/development/signup?ckAPIToken={token_two}",
                             {"emailAddress": "grace@example.com", "password": "correct horse battery"})
    query_two = f"ckAPIToken={token_two}&ckWebAuthToken={urllib.parse.quote(answer['ckWebAuthToken'], safe='')}"
    t_two = "b2" * 32
    status, _ = request(a.port, "POST", f"/device/1/{CONTAINER_TWO}/development/tokens/register?{query_two}",
                        {"apnsEnvironment": "development", "apnsToken": t_two})
    status, _ = request(a.port, "POST", f"/database/1/{CONTAINER_TWO}/development/private/subscriptions/modify?{query_two}", {"operations": [
        {"operationType": "create", "subscription": {"subscriptionID": "all", "subscriptionType": "database",
                                                     "notificationInfo": {"shouldSendContentAvailable": True}}}]})
    check(status == 200, f"the second app's subscription: {status}")
    request(a.port, "POST", f"/database/1/{CONTAINER_TWO}/development/private/records/modify?{query_two}", {"operations": [
        {"operationType": "create", "record": {"recordType": "Task", "recordName": "t1", "fields": {"title": {"value": "two"}}}}]})
    two = wait(lambda: apns.delivered(t_two), what="the second app's push arrives")
    if two:
        check(two[0]["headers"].get("apns-topic") == TOPIC_TWO, f"with the second app's topic: {two[0]['headers'].get('apns-topic')}")
        check(apns.connections == connections, f"on the connection the signing key already had: {apns.connections - connections} new")

    # An alert subscription, every notificationInfo key, a 5 KB desired key cut.
    apns.received.clear()
    status, _ = data(a, "records/modify", {"operations": [
        {"operationType": "create", "record": {"recordType": "Alert", "recordName": "a1",
                                               "fields": {"title": {"value": "Short"}, "big": {"value": "x" * 5000}}}}]})
    alert = wait(lambda: apns.delivered(t_hex), what="the alert notification")
    if alert:
        headers, payload = alert[0]["headers"], alert[0]["payload"] or {}
        aps = payload.get("aps", {})
        check(headers.get("apns-push-type") == "alert" and headers.get("apns-priority") == "10", "an alert: push type alert, priority 10")
        check(aps.get("alert") == {"body": "Something happened", "loc-key": "ALERT_KEY", "loc-args": ["one", "two"], "action-loc-key": "OPEN",
                                   "launch-image": "launch.png"}, f"every alert key mapped: {aps.get('alert')}")
        check(aps.get("sound") == "chime.caf" and aps.get("badge") == 1 and aps.get("category") == "NOTE_ALERT", f"sound, badge, category: {aps}")
        af = payload.get("ck", {}).get("qry", {}).get("af", {})
        check(af.get("title") == "Short" and "big" not in af, f"the 5 KB desired key was cut, the small one kept: {list(af)}")
        check("apns-collapse-id" not in headers, "a query notification has no collapse id")

    # 429 with Retry-After, then 500: retried with the same apns-id.
    apns.received.clear()
    apns.answers[t_hex] = [(429, {"retry-after": "1"}, "TooManyRequests"), (500, {}, "InternalServerError")]
    data(a, "records/modify", {"zoneID": {"zoneName": "Notes"}, "operations": [
        {"operationType": "create", "record": {"recordType": "Note", "recordName": "n2", "fields": {"title": {"value": "again"}}}}]})
    wait(lambda: apns.delivered(t_hex), seconds=30, what="a push refused 429 then 500 is delivered")
    tries = [r for r in apns.received if r["token"] == t_hex]
    check([r["status"] for r in tries] == [429, 500, 200], f"answered 429, 500, then 200: {[r['status'] for r in tries]}")
    if len(tries) >= 2:
        check(len({r["headers"].get("apns-id") for r in tries}) == 1, "every attempt carries the same apns-id")
        check(tries[1]["time"] - tries[0]["time"] >= 0.9, f"Retry-After honoured: {tries[1]['time'] - tries[0]['time']:.2f} s")

    # Devices the providers no longer know are dropped; a topic mismatch is shown to the operator.
    gone, bad, other = "b2" * 32, "c3" * 32, "d4" * 32
    for token in (gone, bad, other):
        register({"apnsEnvironment": "development", "apnsToken": token})
    browser2 = web.subscribe("browser2")
    register({"apnsEnvironment": "development", "webPushSubscription": browser2})
    web.gone.add("browser2")
    apns.answers[gone] = [(410, {}, "Unregistered")]
    apns.answers[bad] = [(400, {}, "BadDeviceToken")]
    apns.answers[other] = [(400, {}, "DeviceTokenNotForTopic")]
    data(a, "records/modify", {"zoneID": {"zoneName": "Notes"}, "operations": [
        {"operationType": "create", "record": {"recordType": "Note", "recordName": "n3", "fields": {"title": {"value": "third"}}}}]})

    def devices():
        status, answer = request(a.port, "GET", f"/management/1/containers/{CONTAINER}/push", None, admin)
        return answer["environments"]["development"]
    dropped = wait(lambda: (lambda d: d if d["devices"] == {"apns": 3, "webPush": 1} else None)(devices()), seconds=20,
                   what="410, BadDeviceToken and the browser's 410 drop their devices (3 APNs and 1 browser left)")
    code, text = cli(a, "push", "status", "--container", CONTAINER)
    check("DeviceTokenNotForTopic" not in text and "another bundle id" in text, f"the topic mismatch is shown: {[l for l in text.splitlines() if 'refusal' in l][:1]}")
    status, metrics = request(a.port, "GET", "/metrics", None, admin)
    text_metrics = metrics.get("raw", "") if isinstance(metrics, dict) else ""
    # (request() parses JSON; the metrics are text: fetched raw below.)
    import http.client
    connection = http.client.HTTPConnection("127.0.0.1", a.port, timeout=10)
    connection.request("GET", "/metrics", headers=admin)
    text_metrics = connection.getresponse().read().decode()
    check('stratus_pushes_total{provider="apns",outcome="device_gone"} 2' in text_metrics, "the metric counts the two APNs devices gone")
    check('stratus_pushes_total{provider="webpush",outcome="device_gone"} 1' in text_metrics, "and the browser gone")
    check("stratus_push_delivery_seconds_count" in text_metrics and "stratus_push_queue_rows" in text_metrics, "delivery latency and queue depth are exported")

    # A server killed while its push is in flight: sent again after restart, delivered once.
    apns.received.clear()
    apns.stall.add(t_hex)
    data(a, "records/modify", {"zoneID": {"zoneName": "Notes"}, "operations": [
        {"operationType": "create", "record": {"recordType": "Note", "recordName": "n4", "fields": {"title": {"value": "crash"}}}}]})
    stalled = wait(lambda: [r for r in apns.received if r["token"] == t_hex], what="the push reaches APNs and is held")
    a.kill()
    apns.stall.discard(t_hex)
    a.start()
    if stalled:
        wanted = stalled[0]["headers"].get("apns-id")
        again = wait(lambda: [r for r in apns.delivered(t_hex) if r["headers"].get("apns-id") == wanted], seconds=60,
                     what="after a SIGKILL and a restart, the push is sent again")
        time.sleep(2)
        check(again is not None and len([r for r in apns.delivered(t_hex) if r["headers"].get("apns-id") == wanted]) == 1,
              "delivered once, with the same apns-id")

    # Two servers on one database: each notification sent once. Every answer carries 4 KB, far
    # past the 64 KB a connection may be sent before its client gives flow-control credit back.
    b = Server(1, postgres.port, apns.port)
    servers.append(b)
    b.start()
    apns.received.clear()
    apns.pad = 4000
    connections = apns.connections
    count = 40
    for index in range(count):
        server = (a, b)[index % 2]
        status, _ = data(server, "records/modify", {"zoneID": {"zoneName": "Notes"}, "operations": [
            {"operationType": "create", "record": {"recordType": "Note", "recordName": f"m{index}", "fields": {"n": {"value": index}}}}]})
    wait(lambda: len(apns.delivered(t_hex)) >= count, seconds=30, what=f"{count} notifications delivered from two servers")
    time.sleep(2)
    ids = [r["headers"].get("apns-id") for r in apns.delivered(t_hex)]
    check(len(ids) == count and len(set(ids)) == count, f"two servers sent each of {count} notifications once: {len(ids)} deliveries, {len(set(ids))} distinct")
    check(apns.connections - connections == 1,
          f"answers of 4 KB each (over 240 KB per server) came back on the servers' connections: {apns.connections - connections} new (the second server's)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The APNs stand-in of Deploy/push/standins.py on its own, for the benchmark (Deploy/bench/bench.sh
with STRATUS_BENCH_PUSH=1): answers 200 to every push it can check, writes its port to PORT_FILE,
and on SIGTERM writes to STATS_FILE how many pushes it received, the problems it found, and the
most it received in any one second.

  standin.py CERT KEY PUBLIC_KEY_PEM KEY_ID TEAM_ID TOPIC PORT_FILE STATS_FILE"""
import json
import signal
import sys
import threading
import time

from cryptography.hazmat.primitives import serialization

from standins import APNs

cert, key, public_pem, key_id, team_id, topic, port_file, stats_file = sys.argv[1:9]
with open(public_pem, "rb") as f:
    public_key = serialization.load_pem_public_key(f.read())
apns = APNs(cert, key, {key_id: (team_id, public_key)}, topic, light=True)
with open(port_file, "w") as f:
    f.write(str(apns.port))
done = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: done.set())
done.wait()
with apns.lock:
    times = [r["time"] for r in apns.received]
    problems = apns.problems[:5]
per_second = {}
for t in times:
    per_second[int(t)] = per_second.get(int(t), 0) + 1
busiest = max(per_second.values()) if per_second else 0
span = (max(times) - min(times)) if len(times) > 1 else 0
with open(stats_file, "w") as f:
    json.dump({"received": len(times), "problems": problems, "problemCount": len(apns.problems), "busiestSecond": busiest,
               "meanPerSecond": (len(times) / span if span else 0), "connections": apns.connections}, f)

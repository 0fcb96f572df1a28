#!/usr/bin/env python3
"""Where a write workload's PostgreSQL time goes, per request (Deploy/bench/bench.sh with
STRATUS_BENCH_BREAKDOWN=1 runs it around each durable create and modify run).

  breakdown.py snapshot PSQL_ARGS... > before.json      statistics now
  breakdown.py report before.json after.json LOG OFFSET

The report divides every counter's change by the requests, taken as the rows `records` gained
or had updated (each request of the create and modify workloads writes one record):

- per table: rows inserted, updated (HOT or not), deleted; index entries written into each of
  its indexes (an insert or a non-HOT update writes one into every index; a HOT update none);
  blocks read from shared buffers; index scans;
- WAL records, full-page images and bytes (pg_stat_wal);
- per statement (pg_stat_statements): time planning and executing, blocks hit and dirtied, WAL;
- per plan node of the sampled executions auto_explain logged (JSON, ANALYZE, BUFFERS, WAL) since
  OFFSET in LOG: its own time (without its children's), rows, WAL records.

Needs only the standard library; PSQL_ARGS is the psql command line (-h, -p, -U, -d).
"""
import json
import subprocess
import sys
from collections import defaultdict

TABLES = """
SELECT json_agg(t) FROM (
  SELECT s.relname, s.n_tup_ins, s.n_tup_upd, s.n_tup_hot_upd, s.n_tup_del, coalesce(s.idx_scan, 0) AS idx_scan, s.seq_scan,
         coalesce(io.heap_blks_hit, 0) + coalesce(io.heap_blks_read, 0) AS heap_blks,
         coalesce(io.idx_blks_hit, 0) + coalesce(io.idx_blks_read, 0) AS idx_blks,
         coalesce(io.toast_blks_hit, 0) + coalesce(io.toast_blks_read, 0) AS toast_blks,
         pg_relation_size(s.relid) AS bytes, s.n_live_tup, s.n_dead_tup
  FROM pg_stat_user_tables s JOIN pg_statio_user_tables io USING (relid)) t
"""
INDEXES = """
SELECT json_agg(i) FROM (
  SELECT s.relname, s.indexrelname, s.idx_scan, coalesce(io.idx_blks_hit, 0) + coalesce(io.idx_blks_read, 0) AS blks,
         pg_relation_size(s.indexrelid) AS bytes, pg_get_indexdef(s.indexrelid) AS definition
  FROM pg_stat_user_indexes s JOIN pg_statio_user_indexes io USING (indexrelid)) i
"""
WAL = "SELECT row_to_json(w) FROM (SELECT wal_records, wal_fpi, wal_bytes::bigint FROM pg_stat_wal) w"
STATEMENTS = """
SELECT json_agg(s) FROM (
  SELECT queryid::text, left(regexp_replace(query, '\\s+', ' ', 'g'), 90) AS query, calls, plans, total_plan_time, total_exec_time,
         rows, shared_blks_hit, shared_blks_read, shared_blks_dirtied, shared_blks_written, wal_records, wal_fpi, wal_bytes::bigint
  FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())) s
"""


def query(psql, sql):
    out = subprocess.run(["psql"] + psql + ["-X", "-qAt", "-c", sql], check=True, capture_output=True, text=True).stdout.strip()
    return json.loads(out) if out else None


def snapshot(psql):
    return {"tables": query(psql, TABLES) or [], "indexes": query(psql, INDEXES) or [], "wal": query(psql, WAL),
            "statements": query(psql, STATEMENTS) or []}


def plans(log_path, offset):
    """The JSON plans auto_explain logged after `offset`."""
    with open(log_path, "rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", "replace")
    decoder = json.JSONDecoder()
    found = []
    at = 0
    while True:
        at = text.find("plan:", at)
        if at < 0:
            return found
        start = text.find("{", at)
        try:
            plan, end = decoder.raw_decode(text, start)
            found.append(plan)
            at = end
        except ValueError:
            at = start + 1


def node_label(node):
    label = node.get("Node Type", "?")
    if node.get("Operation") and node["Node Type"] == "ModifyTable":
        label = node["Operation"]
    relation = node.get("Relation Name") or node.get("Index Name")
    if node.get("Index Name") and node.get("Relation Name"):
        relation = f'{node["Relation Name"]} via {node["Index Name"]}'
    return f"{label} {relation or ''}".strip() + (f" [{node['Subplan Name']}]" if node.get("Subplan Name") else "")


def walk(node, sums, counts):
    children = node.get("Plans", [])
    loops = node.get("Actual Loops", 1) or 1
    total = node.get("Actual Total Time", 0.0) * loops
    own = total - sum(c.get("Actual Total Time", 0.0) * (c.get("Actual Loops", 1) or 1) for c in children)
    label = node_label(node)
    sums[label]["ms"] += max(own, 0.0)
    sums[label]["rows"] += node.get("Actual Rows", 0) * loops
    sums[label]["wal"] += node.get("WAL Records", 0)
    sums[label]["hit"] += node.get("Shared Hit Blocks", 0)
    counts[label] += 1
    for child in children:
        walk(child, sums, counts)


def report(before, after, log_path, offset):
    b_tables = {t["relname"]: t for t in before["tables"]}
    a_tables = {t["relname"]: t for t in after["tables"]}
    records = a_tables.get("records", {})
    n = (records.get("n_tup_ins", 0) + records.get("n_tup_upd", 0)
         - b_tables.get("records", {}).get("n_tup_ins", 0) - b_tables.get("records", {}).get("n_tup_upd", 0))
    if n <= 0:
        print("no records were written between the snapshots")
        return
    print(f"per request ({n} records written):")
    print(f"{'table':<20} {'ins':>6} {'upd':>6} {'HOT':>6} {'del':>6} {'idx scans':>9} {'heap blks':>9} {'idx blks':>9} {'toast blks':>10}")
    changed = {}
    for name, a in sorted(a_tables.items()):
        b = b_tables.get(name, {})
        d = {k: a[k] - b.get(k, 0) for k in ("n_tup_ins", "n_tup_upd", "n_tup_hot_upd", "n_tup_del", "idx_scan", "heap_blks", "idx_blks", "toast_blks")}
        if all(v == 0 for v in d.values()):
            continue
        changed[name] = d
        print(f"{name:<20} {d['n_tup_ins']/n:>6.2f} {d['n_tup_upd']/n:>6.2f} {d['n_tup_hot_upd']/n:>6.2f} {d['n_tup_del']/n:>6.2f} "
              f"{d['idx_scan']/n:>9.2f} {d['heap_blks']/n:>9.1f} {d['idx_blks']/n:>9.1f} {d['toast_blks']/n:>10.1f}")
    print()
    print(f"{'index':<44} {'entries written':>15} {'scans':>7} {'blks':>6} {'size MB':>8}  never scanned in the run?")
    b_indexes = {(i["relname"], i["indexrelname"]): i for i in before["indexes"]}
    for i in sorted(after["indexes"], key=lambda i: (i["relname"], i["indexrelname"])):
        if i["relname"] not in changed:
            continue
        d = changed[i["relname"]]
        b = b_indexes.get((i["relname"], i["indexrelname"]), {"idx_scan": 0, "blks": 0})
        written = (d["n_tup_ins"] + d["n_tup_upd"] - d["n_tup_hot_upd"]) / n
        scans = i["idx_scan"] - b["idx_scan"]
        print(f"{i['indexrelname']:<44} {written:>15.2f} {scans/n:>7.2f} {(i['blks']-b['blks'])/n:>6.1f} {i['bytes']/1048576:>8.1f}  "
              f"{'yes' if scans == 0 else ''}")
    wb, wa = before["wal"], after["wal"]
    print()
    print(f"WAL per request: {(wa['wal_records']-wb['wal_records'])/n:.1f} records, {(wa['wal_fpi']-wb['wal_fpi'])/n:.2f} full-page images, "
          f"{(wa['wal_bytes']-wb['wal_bytes'])/n:.0f} bytes")
    print()
    b_statements = {s["queryid"]: s for s in before["statements"]}
    rows = []
    for s in after["statements"]:
        b = b_statements.get(s["queryid"], {})
        d = {k: s[k] - b.get(k, 0) for k in ("calls", "plans", "total_plan_time", "total_exec_time", "shared_blks_hit", "shared_blks_dirtied",
                                              "wal_records", "wal_fpi", "wal_bytes")}
        if d["calls"] > 0:
            rows.append((d, s["query"]))
    rows.sort(key=lambda r: -(r[0]["total_exec_time"] + r[0]["total_plan_time"]))
    print(f"{'µs/request exec':>15} {'plan':>6} {'calls/req':>9} {'blks hit':>8} {'dirtied':>7} {'WAL recs':>8} {'WAL B':>7}  statement")
    for d, text in rows[:8]:
        print(f"{1000*d['total_exec_time']/n:>15.0f} {1000*d['total_plan_time']/n:>6.0f} {d['calls']/n:>9.2f} {d['shared_blks_hit']/n:>8.1f} "
              f"{d['shared_blks_dirtied']/n:>7.2f} {d['wal_records']/n:>8.1f} {d['wal_bytes']/n:>7.0f}  {text}")
    sampled = [p for p in plans(log_path, offset) if any(verb in p.get("Query Text", "") for verb in ("INSERT INTO records", "UPDATE records"))]
    if not sampled:
        return
    sums = defaultdict(lambda: defaultdict(float))
    counts = defaultdict(int)
    for p in sampled:
        walk(p["Plan"], sums, counts)
    total = sum(v["ms"] for v in sums.values())
    print()
    print(f"the write statement's plan, mean of {len(sampled)} sampled executions (auto_explain; timing adds its own overhead): "
          f"{1000*total/len(sampled):.0f} µs executing; a node's own time, without its children's (a CTE Scan's includes the "
          f"CTE it runs first)")
    print(f"{'µs':>6} {'share':>6} {'rows':>6} {'WAL recs':>8} {'blks hit':>8}  node")
    for label, v in sorted(sums.items(), key=lambda kv: -kv[1]["ms"])[:16]:
        print(f"{1000*v['ms']/len(sampled):>6.0f} {100*v['ms']/total if total else 0:>5.0f}% {v['rows']/len(sampled):>6.1f} "
              f"{v['wal']/len(sampled):>8.1f} {v['hit']/len(sampled):>8.1f}  {label}")


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "snapshot":
        json.dump(snapshot(sys.argv[2:]), sys.stdout)
    elif len(sys.argv) >= 5 and sys.argv[1] == "report":
        with open(sys.argv[2]) as f:
            before = json.load(f)
        with open(sys.argv[3]) as f:
            after = json.load(f)
        report(before, after, sys.argv[4], int(sys.argv[5]))
    else:
        print(__doc__)
        sys.exit(64)


if __name__ == "__main__":
    main()

\set i random(1, :zones)
SELECT container_id AS c, zone_id AS z FROM bench_zones WHERE i = :i \gset
SELECT r.*, (SELECT array_agg(x::text::bigint) FROM pg_snapshot_xip(snap.s) x) AS xip
  FROM (SELECT pg_current_snapshot() AS s) snap
  LEFT JOIN LATERAL (
    (SELECT record_name, record_type, change_seq, fields, created_at, created_by, modified_at, modified_by, deleted,
            change_xid AS feed_xid, change_seq AS feed_seq, 0 AS part
       FROM records WHERE container_id = :c AND zone_id = :z AND change_xid = ANY('{}'::bigint[]))
    UNION ALL
    (SELECT record_name, record_type, change_seq, fields, created_at, created_by, modified_at, modified_by, deleted,
            change_xid AS feed_xid, change_seq AS feed_seq, 1 AS part
       FROM records WHERE container_id = :c AND zone_id = :z AND (change_xid, change_seq) > (0, 0)
      ORDER BY change_xid, change_seq LIMIT 101)
  ) r ON true
 ORDER BY r.part, r.feed_xid, r.feed_seq;

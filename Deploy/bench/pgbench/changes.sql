-- service-sql: changes a7c7d5b48c2cf00a
\set i random(1, :zones)
SELECT z.zone_id, (SELECT array_agg(x::text::bigint) FROM pg_snapshot_xip(pg_current_snapshot()) x) AS xip, r.*
  FROM zones z
  LEFT JOIN LATERAL (
    (SELECT 0 AS part, change_xid AS feed_xid, change_seq AS feed_seq,
            record_name, record_type, change_seq, fields, created_at, created_by, modified_at, modified_by, deleted, parent, share_name, short_guid
       FROM unnest('{}'::bigint[]) AS pending(xid)
       CROSS JOIN LATERAL (SELECT * FROM records WHERE container_id = z.container_id AND zone_id = z.zone_id
                             AND change_xid = pending.xid OFFSET 0) AS in_flight)
    UNION ALL
    (SELECT 1 AS part, change_xid AS feed_xid, change_seq AS feed_seq,
            record_name, record_type, change_seq, fields, created_at, created_by, modified_at, modified_by, deleted, parent, share_name, short_guid
       FROM records WHERE container_id = z.container_id AND zone_id = z.zone_id AND (change_xid, change_seq) > (0, 0)
      ORDER BY change_xid, change_seq LIMIT 101)
  ) r ON true
 WHERE (z.container_id, z.environment, z.database_scope, z.owner, z.zone_name)
       = (SELECT container_id, environment, database_scope, owner, zone_name FROM bench_zones WHERE i = :i)
   AND NOT z.deleted
 ORDER BY r.part, r.feed_xid, r.feed_seq;

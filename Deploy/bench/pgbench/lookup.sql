-- service-sql: lookup 777da7df88ebca9
\set i random(1, :zones)
\set n random(0, :per_zone - 1)
SELECT r.*
  FROM zones z
  LEFT JOIN LATERAL (
    SELECT record_name, record_type, change_seq, fields, created_at, created_by, modified_at, modified_by, deleted, parent, share_name, short_guid FROM records
     WHERE container_id = z.container_id AND zone_id = z.zone_id AND record_name = ANY((SELECT ARRAY['rec-' || :n])::text[])
    OFFSET 0
  ) r ON true
 WHERE (z.container_id, z.environment, z.database_scope, z.owner, z.zone_name)
       = (SELECT container_id, environment, database_scope, owner, zone_name FROM bench_zones WHERE i = :i)
   AND NOT z.deleted;

\set i random(1, :zones)
\set n random(0, :per_zone - 1)
SELECT record_name, record_type, change_seq, fields, created_at, created_by, modified_at, modified_by, deleted
  FROM records
 WHERE (container_id, zone_id) = (SELECT container_id, zone_id FROM bench_zones WHERE i = :i)
   AND record_name = ANY(ARRAY['rec-' || :n]) AND NOT deleted;

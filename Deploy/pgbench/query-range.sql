\set i random(1, :zones)
\set lo random(0, 524287)
SELECT container_id AS c, zone_id AS z FROM bench_zones WHERE i = :i \gset
SELECT * FROM (
  SELECT r.record_name, r.record_type, r.change_seq, r.fields, r.created_at, r.created_by, r.modified_at, r.modified_by, r.deleted,
         d.v_int AS s0
    FROM index_entries d CROSS JOIN LATERAL (SELECT * FROM records r WHERE r.container_id = d.container_id
          AND r.zone_id = d.zone_id AND r.record_name = d.record_name OFFSET 0) r
   WHERE d.container_id = :c AND d.zone_id = :z AND d.record_type = 'Item' AND d.field = 'rank' AND d.v_int >= :lo
     AND r.record_type = 'Item' AND NOT r.deleted) q
 ORDER BY s0 ASC NULLS LAST, record_name COLLATE "C" ASC LIMIT 101;

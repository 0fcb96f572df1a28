\set i random(1, :zones)
\set t random(0, :titles - 1)
SELECT * FROM (
  SELECT r.record_name, r.record_type, r.change_seq, r.fields, r.created_at, r.created_by, r.modified_at, r.modified_by, r.deleted
    FROM index_entries d CROSS JOIN LATERAL (SELECT * FROM records r WHERE r.container_id = d.container_id
          AND r.zone_id = d.zone_id AND r.record_name = d.record_name OFFSET 0) r
   WHERE (d.container_id, d.zone_id) = (SELECT container_id, zone_id FROM bench_zones WHERE i = :i)
     AND d.record_type = 'Item' AND d.field = 'title' AND d.v_text COLLATE "C" = ('title-' || :t) COLLATE "C"
     AND r.record_type = 'Item' AND NOT r.deleted) q
 ORDER BY record_name COLLATE "C" ASC LIMIT 201;

-- service-sql: query-range 104b4cf880d081cd
\set i random(1, :zones)
\set lo random(0, 524287)
SELECT page.* FROM zones z LEFT JOIN LATERAL (
  SELECT * FROM (
    SELECT r.record_name, r.record_type, r.change_seq, r.fields, r.created_at, r.created_by, r.modified_at, r.modified_by, r.deleted, r.parent, r.share_name, r.short_guid,
           d.v_int AS s0
      FROM index_entries d CROSS JOIN LATERAL (SELECT * FROM records r WHERE r.container_id = z.container_id
            AND r.zone_id = d.zone_id AND r.record_name = d.record_name OFFSET 0) r
     WHERE d.container_id = z.container_id AND d.zone_id = z.zone_id AND d.record_type = 'Item' AND d.field = 'rank'
       AND d.v_int >= :lo
       AND r.container_id = z.container_id AND r.zone_id = z.zone_id AND r.record_type = 'Item' AND NOT r.deleted) q
   ORDER BY s0 ASC NULLS LAST, record_name COLLATE "C" ASC LIMIT 101
) page ON true
 WHERE (z.container_id, z.environment, z.database_scope, z.owner, z.zone_name)
       = (SELECT container_id, environment, database_scope, owner, zone_name FROM bench_zones WHERE i = :i)
   AND NOT z.deleted;

-- service-sql: none (issue 22 alternative: tsvector over unaccent, GIN; see setup.sql)
-- query-text.sql with the records found through a GIN index on stored tsvectors instead of
-- token rows in index_entries. Same words, same zone, same records fetched.
\set g random(0, :place_groups - 1)
\set x :g % :place_vocab
\set y :g % (:place_vocab + 1)
SELECT page.* FROM zones z LEFT JOIN LATERAL (SELECT * FROM (SELECT r.record_name, r.record_type, r.change_seq, r.fields, r.created_at, r.created_by, r.modified_at, r.modified_by, r.deleted
  FROM alt_text d CROSS JOIN LATERAL (SELECT * FROM records r WHERE r.container_id = d.container_id
    AND r.zone_id = d.zone_id AND r.record_name = d.record_name OFFSET 0) r
  WHERE d.container_id = z.container_id AND d.zone_id = z.zone_id AND d.record_type = 'Place'
    AND d.words @@ (to_tsquery('simple', unaccent('a' || :x::text)) && to_tsquery('simple', unaccent('b' || :y::text)))
    AND r.container_id = z.container_id AND r.zone_id = z.zone_id AND r.record_type = 'Place' AND NOT r.deleted) q
  ORDER BY record_name COLLATE "C" ASC LIMIT 201) page ON true
 WHERE (z.container_id, z.environment, z.database_scope, z.owner, z.zone_name)
       = (SELECT container_id, environment, database_scope, owner, zone_name FROM bench_place_zone)
   AND NOT z.deleted;

-- service-sql: query-text 71cebe960d277ef5
-- The SQL `stratus serve` runs for the query-text workload (RecordStore+Query.swift, QuerySQL.build): CONTAINS_ALL_TOKENS
-- with two words on the SEARCHABLE field 'note' of the seeded Place records (zone 'places', `bench seed --places`),
-- driven by the longest word's token entries (the first of equally long words: here nearly always 'a…'), the second tested on each of them before its record is fetched. Place i is in group i / 10, whose words are
-- a(g mod V) and b(g mod (V + 1)), V = places / 100 (BenchPlaces.swift): ~10 places hold both.
\set g random(0, :place_groups - 1)
\set x :g % :place_vocab
\set y :g % (:place_vocab + 1)
SELECT page.* FROM zones z LEFT JOIN LATERAL (SELECT * FROM (SELECT r.record_name, r.record_type, r.change_seq, r.fields, r.created_at, r.created_by, r.modified_at, r.modified_by, r.deleted, r.parent, r.share_name, r.short_guid FROM index_entries d CROSS JOIN LATERAL (SELECT * FROM records r WHERE r.container_id = z.container_id
    AND r.zone_id = d.zone_id AND r.record_name = d.record_name OFFSET 0) r WHERE d.container_id = z.container_id AND d.zone_id = z.zone_id AND d.record_type = 'Place' AND d.field = E'~tokens\x3anote' AND d.v_text COLLATE "C" = ('a' || :x::text)::text COLLATE "C" AND r.container_id = z.container_id AND r.zone_id = z.zone_id AND r.record_type = 'Place' AND NOT r.deleted AND (EXISTS (SELECT 1 FROM index_entries e WHERE e.container_id = z.container_id AND e.zone_id = z.zone_id AND e.record_type = 'Place' AND e.field = E'~tokens\x3anote' AND e.record_name = d.record_name AND e.v_text COLLATE "C" = ('b' || :y::text)::text COLLATE "C" OFFSET 0))) q ORDER BY record_name COLLATE "C" ASC LIMIT 201) page ON true WHERE (z.container_id, z.environment, z.database_scope, z.owner, z.zone_name)
       = (SELECT container_id, environment, database_scope, owner, zone_name FROM bench_place_zone)
   AND NOT z.deleted;

-- service-sql: query-near 40240c9b4641e0e0
-- The SQL `stratus serve` runs for the query-near workload (RecordStore+Query.swift, QuerySQL.build): NEAR on the
-- LOCATION field 'place' of the seeded Place records (zone 'places', `bench seed --places`), sorted by distance from
-- the same point. The circle and the index cell ranges covering it (Geo.cover, which pgbench cannot compute) come from
-- `stratus-bench near-sample`, loaded by Deploy/bench/bench.sh into bench_near; reading them (\gset) is one extra
-- statement the service does not make: it costs the baseline a little, never the service.
-- The field keys are written E'~geo\x3aplace' (a colon): pgbench takes any ":name" for a variable, even in quotes.
\set q random(1, :near_samples)
SELECT n.lat, n.lon, n.radius, l1, h1, l2, h2, l3, h3, l4, h4, l5, h5, l6, h6, l7, h7, l8, h8, l9, h9, l10, h10, l11, h11, l12, h12, l13, h13, l14, h14, l15, h15, l16, h16, p.container_id AS c, p.owner FROM bench_near n, bench_place_zone p WHERE n.i = :q \gset
SELECT page.* FROM zones z LEFT JOIN LATERAL (SELECT * FROM (SELECT r.record_name, r.record_type, r.change_seq, r.fields, r.created_at, r.created_by, r.modified_at, r.modified_by, r.deleted, r.parent, r.share_name, r.short_guid, d.distance AS s0 FROM (SELECT e.container_id, e.zone_id, e.record_name, min(e.distance) AS distance FROM (
   SELECT e.container_id, e.zone_id, e.record_name, (12742017.6::float8 * asin(least(1::float8, sqrt(power(sin(radians(e.v_lat - :lat::float8) / 2), 2) + cos(radians(e.v_lat)) * cos(radians(:lat::float8)) * power(sin(radians(e.v_lon - :lon::float8) / 2), 2))))) AS distance
     FROM (SELECT * FROM (VALUES (:l1::bigint, :h1::bigint), (:l2::bigint, :h2::bigint), (:l3::bigint, :h3::bigint), (:l4::bigint, :h4::bigint), (:l5::bigint, :h5::bigint), (:l6::bigint, :h6::bigint), (:l7::bigint, :h7::bigint), (:l8::bigint, :h8::bigint), (:l9::bigint, :h9::bigint), (:l10::bigint, :h10::bigint), (:l11::bigint, :h11::bigint), (:l12::bigint, :h12::bigint), (:l13::bigint, :h13::bigint), (:l14::bigint, :h14::bigint), (:l15::bigint, :h15::bigint), (:l16::bigint, :h16::bigint)) c(low, high) WHERE c.low >= 0) c
     CROSS JOIN LATERAL (SELECT e.container_id, e.zone_id, e.record_name, e.v_lat, e.v_lon FROM index_entries e
        WHERE e.container_id = :c::bigint AND e.zone_id = z.zone_id AND e.record_type = 'Place' AND e.field = E'~geo\x3aplace'
          AND e.v_cell >= c.low AND e.v_cell <= c.high OFFSET 0) e) e
  WHERE e.distance <= :radius::float8
  GROUP BY e.container_id, e.zone_id, e.record_name) d
CROSS JOIN LATERAL (SELECT * FROM records r WHERE r.container_id = z.container_id
    AND r.zone_id = d.zone_id AND r.record_name = d.record_name OFFSET 0) r WHERE r.container_id = :c::bigint AND r.zone_id = z.zone_id AND r.record_type = 'Place' AND NOT r.deleted) q ORDER BY s0 ASC NULLS LAST, record_name COLLATE "C" ASC LIMIT 201) page ON true WHERE z.container_id = :c::bigint AND z.environment = 1 AND z.database_scope = 2 AND z.owner = :owner::text AND z.zone_name = 'places' AND NOT z.deleted;

-- service-sql: none (issue 22 alternative: cube + earthdistance, GiST; see setup.sql)
-- query-near.sql with the candidates found through a GiST index on ll_to_earth points instead of
-- Z-order cell ranges in index_entries: earth_box() for the index, earth_distance() for the exact
-- test and the order. Same circles (bench_near), same zone, same records fetched.
\set q random(1, :near_samples)
SELECT n.lat, n.lon, n.radius, p.container_id AS c, p.zone_id AS z, p.owner FROM bench_near n, bench_place_zone p WHERE n.i = :q \gset
SELECT page.* FROM zones z LEFT JOIN LATERAL (SELECT * FROM (SELECT r.record_name, r.record_type, r.change_seq, r.fields, r.created_at, r.created_by, r.modified_at, r.modified_by, r.deleted, d.distance AS s0
  FROM (SELECT g.container_id, g.zone_id, g.record_name, min(earth_distance(ll_to_earth(:lat::float8, :lon::float8), g.point)) AS distance
          FROM alt_geo g
         WHERE g.container_id = :c::bigint AND g.zone_id = z.zone_id AND g.record_type = 'Place' AND g.field = E'~geo\x3aplace'
           AND earth_box(ll_to_earth(:lat::float8, :lon::float8), :radius::float8) @> g.point
           AND earth_distance(ll_to_earth(:lat::float8, :lon::float8), g.point) <= :radius::float8
         GROUP BY g.container_id, g.zone_id, g.record_name) d
  CROSS JOIN LATERAL (SELECT * FROM records r WHERE r.container_id = d.container_id
    AND r.zone_id = d.zone_id AND r.record_name = d.record_name OFFSET 0) r
  WHERE r.container_id = :c::bigint AND r.zone_id = z.zone_id AND r.record_type = 'Place' AND NOT r.deleted) q
  ORDER BY s0 ASC NULLS LAST, record_name COLLATE "C" ASC LIMIT 201) page ON true
 WHERE z.container_id = :c::bigint AND z.environment = 1 AND z.database_scope = 2 AND z.owner = :owner::text AND z.zone_name = 'places' AND NOT z.deleted;

-- service-sql: lookup-many ac1df283c73e257e
-- The statement the service runs when concurrent lookups share one execution (StatementSharing),
-- here with 8 keys: 8 zones picked at random, one record name in each. For reference: bench.sh
-- reports 8 × its tps as the lookups/s PostgreSQL gives the service's shared statements.
\set i1 random(1, :zones)
\set n1 random(0, :per_zone - 1)
\set i2 random(1, :zones)
\set n2 random(0, :per_zone - 1)
\set i3 random(1, :zones)
\set n3 random(0, :per_zone - 1)
\set i4 random(1, :zones)
\set n4 random(0, :per_zone - 1)
\set i5 random(1, :zones)
\set n5 random(0, :per_zone - 1)
\set i6 random(1, :zones)
\set n6 random(0, :per_zone - 1)
\set i7 random(1, :zones)
\set n7 random(0, :per_zone - 1)
\set i8 random(1, :zones)
\set n8 random(0, :per_zone - 1)
WITH a AS (
    SELECT array_agg(x.j) AS i, array_agg(b.container_id) AS c, array_agg(b.environment) AS e, array_agg(b.database_scope) AS d,
           array_agg(b.owner) AS o, array_agg(b.zone_name) AS zn, array_agg('rec-' || x.n) AS n
    FROM (VALUES (0, :i1::int, :n1::int), (1, :i2::int, :n2::int), (2, :i3::int, :n3::int), (3, :i4::int, :n4::int), (4, :i5::int, :n5::int), (5, :i6::int, :n6::int), (6, :i7::int, :n7::int), (7, :i8::int, :n8::int)) x(j, bi, n) JOIN bench_zones b ON b.i = x.bi
)
SELECT k.i, r.*
FROM a, unnest(a.i, a.c, a.e, a.d, a.o, a.zn, a.n) AS k(i, c, e, d, o, zn, n)
CROSS JOIN LATERAL (
    SELECT zone_id FROM zones
    WHERE container_id = k.c AND environment = k.e AND database_scope = k.d AND owner = k.o AND zone_name = k.zn AND NOT deleted
    OFFSET 0
) z
LEFT JOIN LATERAL (
    SELECT record_name, record_type, change_seq, fields, created_at, created_by, modified_at, modified_by, deleted, parent, share_name, short_guid FROM records
    WHERE container_id = k.c AND zone_id = z.zone_id AND record_name = k.n
    OFFSET 0
) r ON true;

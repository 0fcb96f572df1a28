-- service-sql: replace 1e97f471fe616b67
-- The statement the service runs when concurrent single-record modifies that name every field share an execution
-- (StatementSharing), here eight at a time: `ReplaceRecords` for the eight (a record picked twice goes once, as the
-- service sends it alone). The first statement only gathers the picks from bench_zones into arrays.
-- For reference: bench.sh reports 8 × its tps as the modifies/s PostgreSQL gives the service's shared statement.
-- Regenerate when the service's SQL changes.
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
\set b random(0, 1048575)
WITH k AS (
    SELECT DISTINCT ON (b.container_id, b.zone_id, x.n) x.j, b.container_id, b.zone_id, b.environment, b.database_scope, b.owner, b.zone_name, x.n
    FROM (VALUES (1, :i1::int, :n1::int), (2, :i2::int, :n2::int), (3, :i3::int, :n3::int), (4, :i4::int, :n4::int), (5, :i5::int, :n5::int), (6, :i6::int, :n6::int), (7, :i7::int, :n7::int), (8, :i8::int, :n8::int)) x(j, bi, n) JOIN bench_zones b ON b.i = x.bi
    ORDER BY b.container_id, b.zone_id, x.n
)
SELECT array_agg(container_id ORDER BY j) AS c, array_agg(zone_id ORDER BY j) AS z, array_agg(environment ORDER BY j) AS e,
       array_agg(database_scope ORDER BY j) AS d, array_agg(owner ORDER BY j) AS o, array_agg(zone_name ORDER BY j) AS zn,
       array_agg('rec-' || n ORDER BY j) AS n, array_agg('{"createdBy":{"type":"STRING","value":"user-1"},"done":{"type":"INT64","value":1},"notes":{"type":"STRING","value":"' || repeat('0123456789abcdef', 52) || '"},"rank":{"type":"INT64","value":' || ((n * 7919 + :b) % 1048576) || '},"tags":{"type":"STRING_LIST","value":["a1","b1","c1"]},"title":{"type":"STRING","value":"title-' || (n % :titles::int) || '"}}' ORDER BY j) AS f,
       array_agg((n * 7919 + :b) % 1048576 ORDER BY j) AS rk, array_agg('title-' || (n % :titles::int) ORDER BY j) AS tv, count(*) AS m
FROM k \gset
WITH req AS (
    SELECT * FROM unnest(:c::bigint[], :z::bigint[], :e::int2[], :d::int2[], :o::text[], :zn::text[], :n::text[], array_fill('Item'::text, ARRAY[:m::int]),
                         :f::text[], array_fill(1735689600000::bigint, ARRAY[:m::int]), array_fill('_bench'::text, ARRAY[:m::int]), array_fill(1735689600000::bigint, ARRAY[:m::int]), array_fill('_bench'::text, ARRAY[:m::int]), array_fill(''::text, ARRAY[:m::int]), array_fill(0::bigint, ARRAY[:m::int]),
                         array_fill(true, ARRAY[:m::int]), :o::text[], array_fill(-1::bigint, ARRAY[:m::int]), array_fill(false, ARRAY[:m::int]))
         WITH ORDINALITY AS u(c, z, env, sc, o, zn, n, t, f, ca, cb, ma, mb, p, ab, tz, mo, s, rf, i)
), live AS (
    SELECT zones.container_id, zones.zone_id FROM zones JOIN (SELECT DISTINCT c, z, env, sc, o, zn FROM req) q
      ON zones.container_id = q.c AND zones.zone_id = q.z AND zones.environment = q.env AND zones.database_scope = q.sc
     AND zones.owner = q.o AND zones.zone_name = q.zn
    WHERE NOT zones.deleted
    ORDER BY zones.container_id, zones.zone_id FOR NO KEY UPDATE OF zones
), named AS (
    SELECT k, array_agg(f) AS names FROM unnest(ARRAY(SELECT g FROM generate_series(1, :m::int) g CROSS JOIN unnest(ARRAY['createdBy', 'done', 'notes', 'rank', 'tags', 'title']) f ORDER BY g, f)::bigint[], ARRAY(SELECT f FROM generate_series(1, :m::int) g CROSS JOIN unnest(ARRAY['createdBy', 'done', 'notes', 'rank', 'tags', 'title']) f ORDER BY g, f)::text[]) AS u(k, f) GROUP BY k
), cur AS (
    SELECT q.i, o.size AS old, o.change_seq AS seq FROM req q JOIN records o ON o.container_id = q.c AND o.zone_id = q.z AND o.record_name = q.n
    WHERE (q.c, q.z) IN (SELECT container_id, zone_id FROM live)
      AND NOT o.deleted AND o.record_type = q.t AND (q.s < 0 OR o.change_seq = q.s)
      AND (q.rf OR NOT EXISTS (
          SELECT 1 FROM jsonb_object_keys(o.fields::jsonb) AS j(key)
          WHERE j.key <> ALL (coalesce((SELECT names FROM named WHERE named.k = q.i), '{}'::text[]))))
), upd AS (
    UPDATE records r SET fields = q.f, modified_at = q.ma, modified_by = q.mb, size = octet_length(q.f) + q.ab,
           change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq() + q.i
    FROM cur JOIN req q ON q.i = cur.i
    WHERE r.container_id = q.c AND r.zone_id = q.z AND r.record_name = q.n AND r.change_seq = cur.seq
    RETURNING q.i, r.change_seq, r.size, r.created_at, r.created_by, r.parent, r.share_name, r.short_guid
), done AS (
    SELECT q.*, cur.old, upd.change_seq, upd.size, upd.created_at, upd.created_by, upd.parent, upd.share_name, upd.short_guid
    FROM upd JOIN req q ON q.i = upd.i JOIN cur ON cur.i = upd.i
), fresh AS (
    SELECT d.c, d.z, d.n, e.t, e.f, e.vi, e.vd, e.vt, e.vc, e.la, e.lo FROM (
SELECT k, t, f, v AS vi, NULL::float8 AS vd, NULL::text AS vt, NULL::bigint AS vc, NULL::float8 AS la, NULL::float8 AS lo
  FROM unnest(ARRAY(SELECT generate_series(1, :m::int))::bigint[], array_fill('Item'::text, ARRAY[:m::int]), array_fill('rank'::text, ARRAY[:m::int]), :rk::bigint[]) AS u(k, t, f, v)
UNION ALL
SELECT k, t, f, NULL::bigint, v, NULL::text, NULL, NULL, NULL
  FROM unnest('{}'::bigint[], '{}'::text[], '{}'::text[], '{}'::float8[]) AS u(k, t, f, v)
UNION ALL
SELECT k, t, f, NULL::bigint, NULL::float8, v, NULL, NULL, NULL
  FROM unnest(ARRAY(SELECT generate_series(1, :m::int))::bigint[], array_fill('Item'::text, ARRAY[:m::int]), array_fill('title'::text, ARRAY[:m::int]), :tv::text[]) AS u(k, t, f, v)
UNION ALL
SELECT k, t, f, NULL::bigint, NULL::float8, NULL::text, c, la, lo
  FROM unnest('{}'::bigint[], '{}'::text[], '{}'::text[], '{}'::bigint[], '{}'::float8[], '{}'::float8[]) AS u(k, t, f, c, la, lo)
    ) e JOIN done d ON d.i = e.k
), old_entries AS (
    DELETE FROM index_entries x USING done d WHERE x.container_id = d.c AND x.zone_id = d.z AND x.record_name = d.n
      AND NOT EXISTS (SELECT 1 FROM fresh w WHERE w.c = d.c AND w.z = d.z AND w.n = d.n AND x.field = w.f AND x.record_type = w.t AND x.v_int IS NOT DISTINCT FROM w.vi AND x.v_double IS NOT DISTINCT FROM w.vd AND x.v_text IS NOT DISTINCT FROM w.vt AND x.v_cell IS NOT DISTINCT FROM w.vc AND x.v_lat IS NOT DISTINCT FROM w.la AND x.v_lon IS NOT DISTINCT FROM w.lo)
), old_references AS (
    DELETE FROM record_references x USING done d WHERE x.container_id = d.c AND x.zone_id = d.z AND x.source_name = d.n
), old_assets AS (
    DELETE FROM asset_references x USING done d WHERE x.container_id = d.c AND x.zone_id = d.z AND x.record_name = d.n
), new_entries AS (
    INSERT INTO index_entries (container_id, zone_id, record_type, field, v_int, v_double, v_text, v_cell, v_lat, v_lon, record_name)
    SELECT w.c, w.z, w.t, w.f, w.vi, w.vd, w.vt, w.vc, w.la, w.lo, w.n FROM fresh w
    WHERE NOT EXISTS (SELECT 1 FROM index_entries x WHERE x.container_id = w.c AND x.zone_id = w.z AND x.record_name = w.n AND x.field = w.f AND x.record_type = w.t AND x.v_int IS NOT DISTINCT FROM w.vi AND x.v_double IS NOT DISTINCT FROM w.vd AND x.v_text IS NOT DISTINCT FROM w.vt AND x.v_cell IS NOT DISTINCT FROM w.vc AND x.v_lat IS NOT DISTINCT FROM w.la AND x.v_lon IS NOT DISTINCT FROM w.lo)
), zone AS (
    UPDATE zones SET change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq()
    WHERE (container_id, zone_id) IN (SELECT c, z FROM done WHERE tz)
), delta AS (
    SELECT * FROM (
        SELECT d.c, d.env, x.o, 0::bigint AS r, sum(d.size - d.old)::bigint AS b
        FROM done d CROSS JOIN LATERAL (SELECT ''::text UNION ALL SELECT d.mo WHERE d.mo <> '') x(o)
        GROUP BY d.c, d.env, x.o
    ) g WHERE b <> 0
), usage AS (
    UPDATE usage_counters c SET records = c.records + d.r, bytes = c.bytes + d.b
    FROM (SELECT * FROM delta ORDER BY c, env, o) d
    WHERE c.container_id = d.c AND c.environment = d.env AND c.owner = d.o AND c.stripe = pg_backend_pid() % 16
    RETURNING (d.r <= 0 OR c.records <= c.records_cap) AND (d.b <= 0 OR c.bytes <= c.bytes_cap) AS within
)
SELECT i, change_seq, pg_current_xact_id()::text::bigint, created_at, created_by, parent, share_name, short_guid FROM done
WHERE stratus_usage_check((SELECT count(*) = (SELECT count(*) FROM delta) AND coalesce(bool_and(u.within), true) FROM usage u));

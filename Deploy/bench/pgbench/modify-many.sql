-- service-sql: read-one ef0f78b4daa80df2
-- service-sql: update 7bb70b436c6377bb
-- The statements the service runs when concurrent single-record modifies share executions (StatementSharing), here
-- eight at a time: the shared form of `readZoneAndRecord`'s read (Prepared.Shared: the one-request text under
-- `CROSS JOIN LATERAL`, each request's values from arrays; its rows gathered into arrays here for the next
-- statement), then `UpdateRecords` for the eight (a record picked twice goes once, as the service sends it alone).
-- For reference: bench.sh reports 8 × its tps as the modifies/s PostgreSQL gives the service's shared statements.
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
    SELECT x.j AS i, b.container_id AS p1, 'rec-' || x.n AS p2, b.environment AS p3, b.database_scope AS p4, b.owner AS p5, b.zone_name AS p6, x.n
    FROM (VALUES (1, :i1::int, :n1::int), (2, :i2::int, :n2::int), (3, :i3::int, :n3::int), (4, :i4::int, :n4::int), (5, :i5::int, :n5::int), (6, :i6::int, :n6::int), (7, :i7::int, :n7::int), (8, :i8::int, :n8::int)) x(j, bi, n) JOIN bench_zones b ON b.i = x.bi
), picked AS (
    SELECT DISTINCT ON (k.p1, q.zone_id, k.p2) k.*, q.zone_id, q.change_seq, q.size FROM k CROSS JOIN LATERAL (
        SELECT z.zone_id, EXISTS (SELECT 1 FROM shares s WHERE s.container_id = k.p1 AND s.zone_id = z.zone_id AND NOT s.deleted), r.*
        FROM zones z LEFT JOIN LATERAL (
            SELECT record_name, record_type, change_seq, fields, created_at, created_by, modified_at, modified_by, deleted, parent, share_name, short_guid, share_root, size FROM records WHERE container_id = k.p1 AND zone_id = z.zone_id AND record_name = k.p2
        ) r ON true
        WHERE z.container_id = k.p1 AND z.environment = k.p3 AND z.database_scope = k.p4 AND z.owner = k.p5 AND z.zone_name = k.p6 AND NOT z.deleted
    ) q
    ORDER BY k.p1, q.zone_id, k.p2
)
SELECT array_agg(p1 ORDER BY i) AS c, array_agg(zone_id ORDER BY i) AS z, array_agg(p3 ORDER BY i) AS e, array_agg(p4 ORDER BY i) AS d,
       array_agg(p5 ORDER BY i) AS o, array_agg(p6 ORDER BY i) AS zn, array_agg(p2 ORDER BY i) AS n, array_agg('{"createdBy":{"type":"STRING","value":"user-1"},"done":{"type":"INT64","value":1},"notes":{"type":"STRING","value":"' || repeat('0123456789abcdef', 52) || '"},"rank":{"type":"INT64","value":' || ((n * 7919 + :b) % 1048576) || '},"tags":{"type":"STRING_LIST","value":["a1","b1","c1"]},"title":{"type":"STRING","value":"title-' || (n % :titles::int) || '"}}' ORDER BY i) AS f,
       array_agg(change_seq ORDER BY i) AS s, array_agg(size ORDER BY i) AS sz, array_agg((n * 7919 + :b) % 1048576 ORDER BY i) AS rk,
       array_agg('title-' || (n % :titles::int) ORDER BY i) AS tv, count(*) AS m
FROM picked \gset
WITH req AS (
    SELECT * FROM unnest(:c::bigint[], :z::bigint[], :e::int2[], :d::int2[], :o::text[], :zn::text[],
                         :n::text[], array_fill('Item'::text, ARRAY[:m::int]), :f::text[],
                         array_fill(1735689600000::bigint, ARRAY[:m::int]), array_fill('_bench'::text, ARRAY[:m::int]),
                         array_fill(1735689600000::bigint, ARRAY[:m::int]), array_fill('_bench'::text, ARRAY[:m::int]),
                         array_fill(''::text, ARRAY[:m::int]), array_fill(0::bigint, ARRAY[:m::int]), array_fill(true, ARRAY[:m::int]), :o::text[],
                         :s::bigint[], :sz::bigint[])
         WITH ORDINALITY AS u(c, z, env, sc, o, zn, n, t, f, ca, cb, ma, mb, p, ab, tz, mo, s, old, i)
), live AS (
    SELECT zones.container_id, zones.zone_id FROM zones JOIN (SELECT DISTINCT c, z, env, sc, o, zn FROM req) q
      ON zones.container_id = q.c AND zones.zone_id = q.z AND zones.environment = q.env AND zones.database_scope = q.sc
     AND zones.owner = q.o AND zones.zone_name = q.zn
    WHERE NOT zones.deleted
    ORDER BY zones.container_id, zones.zone_id FOR NO KEY UPDATE OF zones
), upd AS (
    UPDATE records r SET record_type = q.t, fields = q.f, created_at = q.ca, created_by = q.cb, modified_at = q.ma,
           modified_by = q.mb, deleted = false, size = octet_length(q.f) + q.ab,
           change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq() + q.i, parent = NULLIF(q.p, ''),
           share_name = CASE WHEN r.deleted THEN NULL ELSE r.share_name END,
           short_guid = CASE WHEN r.deleted THEN NULL ELSE r.short_guid END,
           share_root = CASE WHEN r.deleted THEN NULL ELSE r.share_root END
    FROM req q
    WHERE r.container_id = q.c AND r.zone_id = q.z AND r.record_name = q.n AND r.change_seq = q.s
      AND (q.c, q.z) IN (SELECT container_id, zone_id FROM live)
    RETURNING r.container_id, r.zone_id, r.record_name, r.change_seq, r.size
), done AS (
    SELECT q.*, upd.change_seq, upd.size FROM upd JOIN req q ON q.c = upd.container_id AND q.z = upd.zone_id AND q.n = upd.record_name
), old_entries AS (
    DELETE FROM index_entries x USING done d WHERE x.container_id = d.c AND x.zone_id = d.z AND x.record_name = d.n
), old_references AS (
    DELETE FROM record_references x USING done d WHERE x.container_id = d.c AND x.zone_id = d.z AND x.source_name = d.n
), old_assets AS (
    DELETE FROM asset_references x USING done d WHERE x.container_id = d.c AND x.zone_id = d.z AND x.record_name = d.n
), new_entries AS (
    INSERT INTO index_entries (container_id, zone_id, record_type, field, v_int, v_double, v_text, v_cell, v_lat, v_lon, record_name)
    SELECT d.c, d.z, e.t, e.f, e.vi, e.vd, e.vt, e.vc, e.la, e.lo, d.n FROM (
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
), zone AS (
    UPDATE zones SET change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq()
    WHERE (container_id, zone_id) IN (SELECT c, z FROM done WHERE tz)
), delta AS (
    SELECT * FROM (
        SELECT d.c, d.env, x.o, sum(1 - (d.old >= 0)::int)::bigint AS r, sum(d.size - greatest(d.old, 0))::bigint AS b
        FROM done d CROSS JOIN LATERAL (SELECT ''::text UNION ALL SELECT d.mo WHERE d.mo <> '') x(o)
        GROUP BY d.c, d.env, x.o
    ) g WHERE r <> 0 OR b <> 0
), usage AS (
    UPDATE usage_counters c SET records = c.records + d.r, bytes = c.bytes + d.b
    FROM (SELECT * FROM delta ORDER BY c, env, o) d
    WHERE c.container_id = d.c AND c.environment = d.env AND c.owner = d.o AND c.stripe = pg_backend_pid() % 16
    RETURNING (d.r <= 0 OR c.records <= c.records_cap) AND (d.b <= 0 OR c.bytes <= c.bytes_cap) AS within
)
SELECT i, change_seq, pg_current_xact_id()::text::bigint FROM done
WHERE stratus_usage_check((SELECT count(*) = (SELECT count(*) FROM delta) AND coalesce(bool_and(u.within), true) FROM usage u));

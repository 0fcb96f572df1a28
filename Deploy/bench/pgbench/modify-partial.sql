-- service-sql: read-one ef0f78b4daa80df2
-- service-sql: update 5d076f2a1660d88e
-- The SQL `stratus serve` runs for a records/modify of one record that arrives alone and leaves some of the record's
-- fields out (an update of a few fields; RecordStore+Modify.swift, `modifyOne`), after `ReplaceRecords` left it unwritten:
-- no transaction; the zone and the record read unlocked (`readZoneAndRecord`), then one statement (`UpdateRecords`) that
-- writes the record if its change sequence is still the one read, replaces its index entries (title, rank: the bench
-- schema), moves the zone's change position and the usage counters, after locking the zone row and checking it is still
-- the zone named. (For simplicity the script writes every field, as modify.sql does; bench.sh does not run it.) Concurrent
-- modifies share both statements. Regenerate when the service's SQL changes.
\set i random(1, :zones)
\set n random(0, :per_zone - 1)
\set rk random(0, 1048575)
SELECT container_id AS c, zone_id AS z, environment AS e, database_scope AS d, owner AS o, zone_name AS zn FROM bench_zones WHERE i = :i \gset
SELECT z.zone_id, EXISTS (SELECT 1 FROM shares s WHERE s.container_id = :c AND s.zone_id = z.zone_id AND NOT s.deleted), r.*
FROM zones z LEFT JOIN LATERAL (
    SELECT record_name, record_type, change_seq, fields, created_at, created_by, modified_at, modified_by, deleted, parent, share_name, short_guid, share_root, size FROM records WHERE container_id = :c AND zone_id = z.zone_id AND record_name = 'rec-' || :n
) r ON true
WHERE z.container_id = :c AND z.environment = :e AND z.database_scope = :d
  AND z.owner = :o AND z.zone_name = :zn AND NOT z.deleted \gset r_
WITH req AS (
    SELECT * FROM unnest(ARRAY[:c]::bigint[], ARRAY[:z]::bigint[], ARRAY[:e]::int2[], ARRAY[:d]::int2[], ARRAY[:o]::text[], ARRAY[:zn]::text[], ARRAY['rec-' || :n]::text[], ARRAY['Item']::text[],
                         ARRAY['{"createdBy":{"type":"STRING","value":"user-1"},"done":{"type":"INT64","value":1},"notes":{"type":"STRING","value":"' || repeat('0123456789abcdef', 52) || '"},"rank":{"type":"INT64","value":' || :rk || '},"tags":{"type":"STRING_LIST","value":["a1","b1","c1"]},"title":{"type":"STRING","value":"title-' || (:n::int % :titles::int) || '"}}']::text[], ARRAY[1735689600000]::bigint[], ARRAY['_bench']::text[], ARRAY[1735689600000]::bigint[], ARRAY['_bench']::text[], ARRAY['']::text[], ARRAY[0]::bigint[],
                         ARRAY[true]::bool[], ARRAY[:o]::text[], ARRAY[:r_change_seq]::bigint[], ARRAY[:r_size]::bigint[])
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
), fresh AS (
    SELECT d.c, d.z, d.n, e.t, e.f, e.vi, e.vd, e.vt, e.vc, e.la, e.lo FROM (
SELECT k, t, f, v AS vi, NULL::float8 AS vd, NULL::text AS vt, NULL::bigint AS vc, NULL::float8 AS la, NULL::float8 AS lo
  FROM unnest(ARRAY[1]::bigint[], ARRAY['Item']::text[], ARRAY['rank']::text[], ARRAY[:rk]::bigint[]) AS u(k, t, f, v)
UNION ALL
SELECT k, t, f, NULL::bigint, v, NULL::text, NULL, NULL, NULL
  FROM unnest('{}'::bigint[], '{}'::text[], '{}'::text[], '{}'::float8[]) AS u(k, t, f, v)
UNION ALL
SELECT k, t, f, NULL::bigint, NULL::float8, v, NULL, NULL, NULL
  FROM unnest(ARRAY[1]::bigint[], ARRAY['Item']::text[], ARRAY['title']::text[], ARRAY['title-' || (:n::int % :titles::int)]::text[]) AS u(k, t, f, v)
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

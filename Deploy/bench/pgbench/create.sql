-- service-sql: insert da713bd79baa020b
-- The SQL `stratus serve` runs for this records/modify of one record, statement for statement (RecordStore+Modify.swift,
-- `modifyOne`), once the zone has been written to before (`knownZones`: every bench zone after its first create): no
-- transaction and no read; one statement (its form for new records only) that writes the record if it does not exist,
-- its index entries (title, rank: the bench schema) and the zone's change position, after locking the zone row and
-- checking it is still the zone named. Regenerate when the service's SQL changes.
-- The service runs this form for a create that arrives alone, and on a Citus coordinator. Creates that
-- arrive together share one statement (`CreateRecords`, Sharing/SharedCreates.swift), so under
-- load the service does less work per create than this baseline and can pass 100 % of it.
\set i random(1, :zones)
\set b random(1, 1000000000)
SELECT container_id AS c, zone_id AS z, owner AS o, zone_name AS zn FROM bench_zones WHERE i = :i \gset
WITH live AS (
    SELECT zone_id FROM zones WHERE container_id = :c AND zone_id = :z AND NOT deleted AND true
      AND environment = 1 AND database_scope = 2::int2 AND owner = (:o)::text AND zone_name = (:zn)::text FOR NO KEY UPDATE
), ins AS (
    INSERT INTO records (container_id, zone_id, record_name, record_type, change_xid, change_seq, fields,
                         created_at, created_by, modified_at, modified_by, deleted, size, parent)
    SELECT :c, :z, u.n, u.t, pg_current_xact_id()::text::bigint, stratus_change_seq() + u.i, u.f,
           u.ca, u.cb, u.ma, u.mb, false, octet_length(u.f) + u.ab, NULLIF(u.p, '')
    FROM unnest(ARRAY(SELECT 'pc-' || :b || '-' || g FROM generate_series(1, 1) g)::text[], ARRAY(SELECT 'Item' FROM generate_series(1, 1) g)::text[], ARRAY(SELECT '{"createdBy":{"type":"STRING","value":"user-1"},"done":{"type":"INT64","value":1},"notes":{"type":"STRING","value":"' || repeat('0123456789abcdef', 52) || '"},"rank":{"type":"INT64","value":' || (g * 7919 % 1048576) || '},"tags":{"type":"STRING_LIST","value":["a1","b1","c1"]},"title":{"type":"STRING","value":"new-title-' || (g % 25) || '"}}' FROM generate_series(1, 1) g)::text[],
                ARRAY(SELECT 1735689600000 FROM generate_series(1, 1) g)::bigint[], ARRAY(SELECT '_bench' FROM generate_series(1, 1) g)::text[],
                ARRAY(SELECT 1735689600000 FROM generate_series(1, 1) g)::bigint[], ARRAY(SELECT '_bench' FROM generate_series(1, 1) g)::text[],
                ARRAY(SELECT '' FROM generate_series(1, 1) g)::text[], ARRAY(SELECT 0 FROM generate_series(1, 1) g)::bigint[])
                     WITH ORDINALITY AS u(n, t, f, ca, cb, ma, mb, p, ab, i)
    WHERE NOT true OR EXISTS (SELECT 1 FROM live)
    ON CONFLICT (container_id, zone_id, record_name) DO NOTHING
    RETURNING record_name, change_seq, size
), written AS (
    SELECT record_name, change_seq FROM ins
), unused AS (
    SELECT '{}'::text[], '{}'::text[], '{}'::text[], '{}'::bigint[], '{}'::text[], '{}'::bigint[], '{}'::text[], '{}'::bool[],
           '{}'::bigint[], '{}'::text[], '{}'::bigint[], '{}'::bigint[]
), new_entries AS (
    INSERT INTO index_entries (container_id, zone_id, record_type, field, v_int, v_double, v_text, v_cell, v_lat, v_lon, record_name)
    SELECT :c, :z, e.t, e.f, e.vi, e.vd, e.vt, e.vc, e.la, e.lo, e.n FROM (
        SELECT t, f, v AS vi, NULL::float8 AS vd, NULL::text AS vt, NULL::bigint AS vc, NULL::float8 AS la, NULL::float8 AS lo, n
          FROM unnest(ARRAY(SELECT 'Item' FROM generate_series(1, 1) g)::text[], ARRAY(SELECT 'rank' FROM generate_series(1, 1) g)::text[], ARRAY(SELECT (g * 7919 % 1048576) FROM generate_series(1, 1) g)::bigint[], ARRAY(SELECT 'pc-' || :b || '-' || g FROM generate_series(1, 1) g)::text[]) AS u(t, f, v, n)
        UNION ALL
        SELECT t, f, NULL::bigint, v, NULL::text, NULL, NULL, NULL, n
          FROM unnest('{}'::text[], '{}'::text[], '{}'::float8[], '{}'::text[]) AS u(t, f, v, n)
        UNION ALL
        SELECT t, f, NULL::bigint, NULL::float8, v, NULL, NULL, NULL, n
          FROM unnest(ARRAY(SELECT 'Item' FROM generate_series(1, 1) g)::text[], ARRAY(SELECT 'title' FROM generate_series(1, 1) g)::text[], ARRAY(SELECT 'new-title-' || (g % 25) FROM generate_series(1, 1) g)::text[], ARRAY(SELECT 'pc-' || :b || '-' || g FROM generate_series(1, 1) g)::text[]) AS u(t, f, v, n)
        UNION ALL
        SELECT t, f, NULL::bigint, NULL::float8, NULL::text, c, la, lo, n
          FROM unnest('{}'::text[], '{}'::text[], '{}'::bigint[], '{}'::float8[], '{}'::float8[], '{}'::text[]) AS u(t, f, c, la, lo, n)
    ) e WHERE e.n IN (SELECT record_name FROM written)
), zone AS (
    UPDATE zones SET change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq()
    WHERE container_id = :c AND zone_id = :z AND true AND EXISTS (SELECT 1 FROM written)
), delta AS (
    SELECT coalesce(sum(x.r), 0)::bigint AS r, coalesce(sum(x.b), 0)::bigint AS b FROM (
        SELECT 1 AS r, size::bigint AS b FROM ins
    ) x
), usage AS (
    UPDATE usage_counters c SET records = c.records + d.r, bytes = c.bytes + d.b
    FROM delta d, unnest(CASE WHEN (:o)::text = '' THEN ARRAY['']::text[] ELSE ARRAY['', (:o)::text] END,
                         CASE WHEN (:o)::text = '' THEN ARRAY[-1::int2] ELSE ARRAY[-1::int2, -1::int2] END) AS s(o, stripe),
         (SELECT pg_backend_pid() % 16 AS own) b
    WHERE c.container_id = :c AND c.environment = 1 AND c.owner = s.o
      AND c.stripe = CASE WHEN s.stripe >= 0 THEN s.stripe ELSE b.own END AND (d.r <> 0 OR d.b <> 0)
    RETURNING c.records, c.bytes, c.records_cap, c.bytes_cap
)
SELECT record_name, change_seq, pg_current_xact_id()::text::bigint FROM written
WHERE stratus_usage_check((SELECT count(u.*) = CASE WHEN d.r = 0 AND d.b = 0 THEN 0 WHEN (:o)::text = '' THEN 1 ELSE 2 END
                                  AND coalesce(bool_and((d.r <= 0 OR u.records <= u.records_cap) AND (d.b <= 0 OR u.bytes <= u.bytes_cap)), true)
                           FROM delta d LEFT JOIN usage u ON true GROUP BY d.r, d.b));

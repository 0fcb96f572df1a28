-- service-sql: read 793eb05f884a9108
-- service-sql: write c50ca330331e24b
-- The SQL `stratus serve` runs for this records/modify of one record, statement for statement (RecordStore+Modify.swift,
-- `modifyOne`): no transaction; the zone and the record read unlocked in one statement, then one statement that writes
-- the record if it is unchanged (its change sequence, from the read), its index entries (title, rank: the bench schema) and the zone's change position,
-- after locking the zone row. Regenerate when the service's SQL changes.
\set i random(1, :zones)
\set n random(0, :per_zone - 1)
\set rk random(0, 1048575)
SELECT container_id AS c, zone_id AS z, owner AS o FROM bench_zones WHERE i = :i \gset
WITH z AS (SELECT zone_id, EXISTS (SELECT 1 FROM shares s WHERE s.container_id = :c AND s.zone_id = zones.zone_id AND NOT s.deleted) AS shared
    FROM zones WHERE container_id = :c AND zone_id = :z AND NOT deleted)
SELECT z.zone_id, z.shared, r.*
  FROM z LEFT JOIN LATERAL (SELECT record_name, record_type, change_seq, fields, created_at, created_by, modified_at, modified_by, deleted, parent, share_name, short_guid, share_root, size
    FROM records WHERE container_id = :c AND zone_id = z.zone_id AND record_name = ANY(ARRAY['rec-' || :n]) ORDER BY record_name) r ON true \gset r_
WITH live AS (
    SELECT zone_id FROM zones WHERE container_id = :c AND zone_id = :z AND NOT deleted AND true FOR NO KEY UPDATE
), ins AS (
    INSERT INTO records (container_id, zone_id, record_name, record_type, change_xid, change_seq, fields,
                         created_at, created_by, modified_at, modified_by, deleted, size, parent)
    SELECT :c, :z, u.n, u.t, pg_current_xact_id()::text::bigint, stratus_change_seq() + u.i, u.f,
           u.ca, u.cb, u.ma, u.mb, false, octet_length(u.f) + u.ab, NULLIF(u.p, '')
    FROM unnest('{}'::text[], '{}'::text[], '{}'::text[],
                '{}'::bigint[], '{}'::text[],
                '{}'::bigint[], '{}'::text[], '{}'::text[], '{}'::bigint[])
                     WITH ORDINALITY AS u(n, t, f, ca, cb, ma, mb, p, ab, i)
    WHERE NOT true OR EXISTS (SELECT 1 FROM live)
    ON CONFLICT (container_id, zone_id, record_name) DO NOTHING
    RETURNING record_name, change_seq, size
), upd AS (
    UPDATE records r SET record_type = u.t, fields = u.f, created_at = CASE WHEN u.d THEN r.created_at ELSE u.ca END,
           created_by = CASE WHEN u.d THEN r.created_by ELSE u.cb END,
           modified_at = CASE WHEN u.d THEN r.modified_at ELSE u.ma END,
           modified_by = CASE WHEN u.d THEN r.modified_by ELSE u.mb END,
           deleted = u.d, size = octet_length(u.f) + u.ab,
           change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq() + 32768 + u.i,
           parent = CASE WHEN u.d THEN r.parent ELSE NULLIF(u.p, '') END,
           share_name = CASE WHEN r.deleted THEN NULL ELSE r.share_name END,
           short_guid = CASE WHEN r.deleted THEN NULL ELSE r.short_guid END,
           share_root = CASE WHEN r.deleted THEN NULL ELSE r.share_root END
    FROM unnest(ARRAY(SELECT 'rec-' || :n FROM generate_series(1, 1) g)::text[], ARRAY(SELECT 'Item' FROM generate_series(1, 1) g)::text[], ARRAY(SELECT '{"createdBy":{"type":"STRING","value":"user-1"},"done":{"type":"INT64","value":1},"notes":{"type":"STRING","value":"' || repeat('0123456789abcdef', 52) || '"},"rank":{"type":"INT64","value":' || :rk || '},"tags":{"type":"STRING_LIST","value":["a1","b1","c1"]},"title":{"type":"STRING","value":"title-' || (:n::int % :titles::int) || '"}}' FROM generate_series(1, 1) g)::text[],
                ARRAY(SELECT 1735689600000 FROM generate_series(1, 1) g)::bigint[], ARRAY(SELECT '_bench' FROM generate_series(1, 1) g)::text[],
                ARRAY(SELECT 1735689600000 FROM generate_series(1, 1) g)::bigint[], ARRAY(SELECT '_bench' FROM generate_series(1, 1) g)::text[],
                ARRAY(SELECT false FROM generate_series(1, 1) g)::bool[], ARRAY(SELECT :r_change_seq::bigint FROM generate_series(1, 1) g)::bigint[],
                ARRAY(SELECT '' FROM generate_series(1, 1) g)::text[],
                ARRAY(SELECT :r_size::bigint FROM generate_series(1, 1) g)::bigint[], ARRAY(SELECT 0 FROM generate_series(1, 1) g)::bigint[])
                     WITH ORDINALITY AS u(n, t, f, ca, cb, ma, mb, d, s, p, o, ab, i)
    WHERE r.container_id = :c AND r.zone_id = :z AND r.record_name = u.n AND r.change_seq = u.s
      AND (NOT true OR EXISTS (SELECT 1 FROM live))
    RETURNING r.record_name, r.change_seq, r.size, u.d, u.o
), written AS (
    SELECT record_name, change_seq FROM ins UNION ALL SELECT record_name, change_seq FROM upd
), old_entries AS (
    DELETE FROM index_entries WHERE container_id = :c AND zone_id = :z AND record_name = ANY(ARRAY(SELECT record_name FROM upd))
), old_references AS (
    DELETE FROM record_references WHERE container_id = :c AND zone_id = :z AND source_name = ANY(ARRAY(SELECT record_name FROM upd))
), old_assets AS (
    DELETE FROM asset_references WHERE container_id = :c AND zone_id = :z AND record_name = ANY(ARRAY(SELECT record_name FROM upd))
), new_entries AS (
    INSERT INTO index_entries (container_id, zone_id, record_type, field, v_int, v_double, v_text, v_cell, v_lat, v_lon, record_name)
    SELECT :c, :z, e.t, e.f, e.vi, e.vd, e.vt, e.vc, e.la, e.lo, e.n FROM (
        SELECT t, f, v AS vi, NULL::float8 AS vd, NULL::text AS vt, NULL::bigint AS vc, NULL::float8 AS la, NULL::float8 AS lo, n
          FROM unnest(ARRAY(SELECT 'Item' FROM generate_series(1, 1) g)::text[], ARRAY(SELECT 'rank' FROM generate_series(1, 1) g)::text[], ARRAY(SELECT :rk FROM generate_series(1, 1) g)::bigint[], ARRAY(SELECT 'rec-' || :n FROM generate_series(1, 1) g)::text[]) AS u(t, f, v, n)
        UNION ALL
        SELECT t, f, NULL::bigint, v, NULL::text, NULL, NULL, NULL, n
          FROM unnest('{}'::text[], '{}'::text[], '{}'::float8[], '{}'::text[]) AS u(t, f, v, n)
        UNION ALL
        SELECT t, f, NULL::bigint, NULL::float8, v, NULL, NULL, NULL, n
          FROM unnest(ARRAY(SELECT 'Item' FROM generate_series(1, 1) g)::text[], ARRAY(SELECT 'title' FROM generate_series(1, 1) g)::text[], ARRAY(SELECT 'title-' || (:n::int % :titles::int) FROM generate_series(1, 1) g)::text[], ARRAY(SELECT 'rec-' || :n FROM generate_series(1, 1) g)::text[]) AS u(t, f, v, n)
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
        UNION ALL
        SELECT (NOT d)::int - (o >= 0)::int, CASE WHEN d THEN 0 ELSE size END - greatest(o, 0) FROM upd
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

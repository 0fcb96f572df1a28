-- Issue 25's measured alternative to striped usage counters: create.sql with every write counted
-- in one row per scope (stripe 0), the "one hot counter row" design. Compare its tps with
-- create.sql's (16 stripes: each connection counts in its own) on a cluster seeded by
-- Deploy/bench/bench.sh, with every writer in one container (bench_zones 1-4 are one container's):
--   pgbench -n -M prepared -c 16 -j 2 -T 15 -D zones=4 -f Deploy/bench/pgbench/alternatives/create-one-counter.sql
-- Not the service's SQL (no service-sql line): an experiment.
\set i random(1, :zones)
\set b random(1, 1000000000)
SELECT container_id AS c, zone_id AS z, owner AS o FROM bench_zones WHERE i = :i \gset
WITH z AS (SELECT zone_id, EXISTS (SELECT 1 FROM shares s WHERE s.container_id = :c AND s.zone_id = zones.zone_id AND NOT s.deleted) AS shared
    FROM zones WHERE container_id = :c AND zone_id = :z AND NOT deleted)
SELECT z.zone_id, z.shared, r.*
  FROM z LEFT JOIN LATERAL (SELECT record_name, record_type, change_seq, fields, created_at, created_by, modified_at, modified_by, deleted, parent, share_name, short_guid, share_root, size
    FROM records WHERE container_id = :c AND zone_id = z.zone_id AND record_name = ANY(ARRAY(SELECT 'pc-' || :b || '-' || g FROM generate_series(1, 1) g)) ORDER BY record_name) r ON true;
WITH live AS (
    SELECT zone_id FROM zones WHERE container_id = :c AND zone_id = :z AND NOT deleted AND true FOR NO KEY UPDATE
), ins AS (
    INSERT INTO records (container_id, zone_id, record_name, record_type, change_xid, change_seq, fields,
                         created_at, created_by, modified_at, modified_by, deleted, size, parent)
    SELECT :c, :z, u.n, u.t, pg_current_xact_id()::text::bigint, nextval('change_seq'), u.f,
           u.ca, u.cb, u.ma, u.mb, false, octet_length(u.f), NULLIF(u.p, '')
    FROM unnest(ARRAY(SELECT 'pc-' || :b || '-' || g FROM generate_series(1, 1) g)::text[], ARRAY(SELECT 'Item' FROM generate_series(1, 1) g)::text[], ARRAY(SELECT '{"createdBy":{"type":"STRING","value":"user-1"},"done":{"type":"INT64","value":1},"notes":{"type":"STRING","value":"' || repeat('0123456789abcdef', 52) || '"},"rank":{"type":"INT64","value":' || (g * 7919 % 1048576) || '},"tags":{"type":"STRING_LIST","value":["a1","b1","c1"]},"title":{"type":"STRING","value":"new-title-' || (g % 25) || '"}}' FROM generate_series(1, 1) g)::text[],
                ARRAY(SELECT 1735689600000 FROM generate_series(1, 1) g)::bigint[], ARRAY(SELECT '_bench' FROM generate_series(1, 1) g)::text[],
                ARRAY(SELECT 1735689600000 FROM generate_series(1, 1) g)::bigint[], ARRAY(SELECT '_bench' FROM generate_series(1, 1) g)::text[],
                ARRAY(SELECT '' FROM generate_series(1, 1) g)::text[]) AS u(n, t, f, ca, cb, ma, mb, p)
    WHERE NOT true OR EXISTS (SELECT 1 FROM live)
    ON CONFLICT (container_id, zone_id, record_name) DO NOTHING
    RETURNING record_name, change_seq, size
), upd AS (
    UPDATE records r SET record_type = u.t, fields = u.f, created_at = CASE WHEN u.d THEN r.created_at ELSE u.ca END,
           created_by = CASE WHEN u.d THEN r.created_by ELSE u.cb END,
           modified_at = CASE WHEN u.d THEN r.modified_at ELSE u.ma END,
           modified_by = CASE WHEN u.d THEN r.modified_by ELSE u.mb END,
           deleted = u.d, size = octet_length(u.f),
           change_xid = pg_current_xact_id()::text::bigint, change_seq = nextval('change_seq'),
           parent = CASE WHEN u.d THEN r.parent ELSE NULLIF(u.p, '') END,
           share_name = CASE WHEN r.deleted THEN NULL ELSE r.share_name END,
           short_guid = CASE WHEN r.deleted THEN NULL ELSE r.short_guid END,
           share_root = CASE WHEN r.deleted THEN NULL ELSE r.share_root END
    FROM unnest('{}'::text[], '{}'::text[], '{}'::text[],
                '{}'::bigint[], '{}'::text[],
                '{}'::bigint[], '{}'::text[],
                '{}'::bool[], '{}'::bigint[], '{}'::text[],
                '{}'::bigint[]) AS u(n, t, f, ca, cb, ma, mb, d, s, p, o)
    WHERE r.container_id = :c AND r.zone_id = :z AND r.record_name = u.n AND r.change_seq = u.s
      AND (NOT true OR EXISTS (SELECT 1 FROM live))
    RETURNING r.record_name, r.change_seq, r.size, u.d, u.o
), written AS (
    SELECT record_name, change_seq FROM ins UNION ALL SELECT record_name, change_seq FROM upd
), old_entries AS (
    DELETE FROM index_entries WHERE container_id = :c AND zone_id = :z AND record_name = ANY(ARRAY(SELECT record_name FROM upd))
), old_references AS (
    DELETE FROM record_references WHERE container_id = :c AND zone_id = :z AND source_name = ANY(ARRAY(SELECT record_name FROM upd))
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
    UPDATE zones SET change_xid = pg_current_xact_id()::text::bigint, change_seq = nextval('change_seq')
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
                         CASE WHEN (:o)::text = '' THEN ARRAY[-1::int2] ELSE ARRAY[-1::int2, -1::int2] END) AS s(o, stripe)
    WHERE c.container_id = :c AND c.environment = 1 AND c.owner = s.o
      AND c.stripe = 0 AND (d.r <> 0 OR d.b <> 0)
    RETURNING c.records, c.bytes, c.records_cap, c.bytes_cap
)
SELECT record_name, change_seq, pg_current_xact_id()::text::bigint FROM written
WHERE stratus_usage_check((SELECT count(u.*) = CASE WHEN d.r = 0 AND d.b = 0 THEN 0 WHEN (:o)::text = '' THEN 1 ELSE 2 END
                                  AND coalesce(bool_and((d.r <= 0 OR u.records <= u.records_cap) AND (d.b <= 0 OR u.bytes <= u.bytes_cap)), true)
                           FROM delta d LEFT JOIN usage u ON true GROUP BY d.r, d.b));

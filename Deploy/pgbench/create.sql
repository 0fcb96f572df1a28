\set i random(1, :zones)
\set b random(1, 1000000000)
BEGIN;
SELECT container_id AS c, zone_id AS z FROM bench_zones WHERE i = :i \gset
SELECT zone_id FROM zones WHERE container_id = :c AND zone_id = :z AND NOT deleted FOR NO KEY UPDATE;
SELECT record_name FROM records WHERE container_id = :c AND zone_id = :z
   AND record_name = ANY(ARRAY(SELECT 'pc-' || :b || '-' || g FROM generate_series(1, 1) g)) ORDER BY record_name FOR UPDATE;
INSERT INTO records (container_id, zone_id, record_name, record_type, change_xid, change_seq, fields, created_at, created_by, modified_at, modified_by, deleted, size)
SELECT :c, :z, 'pc-' || :b || '-' || g, 'Item', pg_current_xact_id()::text::bigint, nextval('change_seq'),
       '{"createdBy":{"type":"STRING","value":"user-1"},"done":{"type":"INT64","value":1},"notes":{"type":"STRING","value":"' || repeat('0123456789abcdef', 52) || '"},"rank":{"type":"INT64","value":' || (g * 7919 % 1048576) || '},"tags":{"type":"STRING_LIST","value":["a1","b1","c1"]},"title":{"type":"STRING","value":"title-' || (g % 25) || '"}}',
       1735689600000, '_bench', 1735689600000, '_bench', false, 1000
  FROM generate_series(1, 1) g
ON CONFLICT (container_id, zone_id, record_name) DO NOTHING RETURNING record_name, change_seq;
INSERT INTO index_entries (container_id, zone_id, record_type, field, v_int, v_double, v_text, record_name)
SELECT :c::bigint, :z::bigint, 'Item', f, CASE f WHEN 'rank' THEN g * 7919 % 1048576 ELSE 1 END, NULL::float8, NULL::text, 'pc-' || :b || '-' || g FROM generate_series(1, 1) g, unnest(ARRAY['rank', 'done']) f
UNION ALL
SELECT :c::bigint, :z::bigint, 'Item', f, NULL::bigint, NULL::float8, CASE f WHEN 'title' THEN 'title-' || (g % 25) WHEN 'notes' THEN repeat('0123456789abcdef', 52) ELSE f || '1' END, 'pc-' || :b || '-' || g
  FROM generate_series(1, 1) g, unnest(ARRAY['title', 'createdBy', 'notes', 'a', 'b', 'c']) f;
UPDATE zones SET change_xid = pg_current_xact_id()::text::bigint, change_seq = nextval('change_seq') WHERE container_id = :c AND zone_id = :z;
COMMIT;

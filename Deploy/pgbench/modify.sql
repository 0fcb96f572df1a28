\set i random(1, :zones)
\set n random(0, :per_zone - 1)
\set rk random(0, 1048575)
BEGIN;
SELECT container_id AS c, zone_id AS z FROM bench_zones WHERE i = :i \gset
SELECT zone_id FROM zones WHERE container_id = :c AND zone_id = :z AND NOT deleted FOR NO KEY UPDATE;
SELECT record_name, record_type, change_seq, fields, created_at, created_by, modified_at, modified_by, deleted
  FROM records WHERE container_id = :c AND zone_id = :z AND record_name = ANY(ARRAY['rec-' || :n]) ORDER BY record_name FOR UPDATE;
UPDATE records r SET fields = u.f, modified_at = u.ma, modified_by = u.mb, deleted = false, size = octet_length(u.f),
       change_xid = pg_current_xact_id()::text::bigint, change_seq = nextval('change_seq')
  FROM unnest(ARRAY['rec-' || :n], ARRAY['{"createdBy":{"type":"STRING","value":"user-1"},"done":{"type":"INT64","value":1},"notes":{"type":"STRING","value":"' || repeat('0123456789abcdef', 52) || '"},"rank":{"type":"INT64","value":' || :rk || '},"tags":{"type":"STRING_LIST","value":["a1","b1","c1"]},"title":{"type":"STRING","value":"title-' || (:n % 25) || '"}}'], ARRAY[1735689600000::bigint], ARRAY['_bench']) AS u(n, f, ma, mb)
 WHERE r.container_id = :c AND r.zone_id = :z AND r.record_name = u.n RETURNING r.record_name, r.change_seq;
WITH entries AS (DELETE FROM index_entries WHERE container_id = :c AND zone_id = :z AND record_name = ANY(ARRAY['rec-' || :n])),
     refs AS (DELETE FROM record_references WHERE container_id = :c AND zone_id = :z AND source_name = ANY(ARRAY['rec-' || :n]))
SELECT 1;
INSERT INTO index_entries (container_id, zone_id, record_type, field, v_int, v_double, v_text, record_name)
SELECT :c::bigint, :z::bigint, t, f, v, NULL::float8, NULL::text, n FROM unnest(ARRAY['Item', 'Item'], ARRAY['rank', 'done'], ARRAY[:rk, 1]::bigint[], ARRAY['rec-' || :n, 'rec-' || :n]) AS u(t, f, v, n)
UNION ALL
SELECT :c::bigint, :z::bigint, t, f, NULL::bigint, NULL::float8, v, n FROM unnest(ARRAY['Item', 'Item', 'Item', 'Item', 'Item', 'Item'], ARRAY['title', 'createdBy', 'tags', 'tags', 'tags', 'notes'],
       ARRAY['title-' || (:n % 25), 'user-1', 'a1', 'b1', 'c1', repeat('0123456789abcdef', 52)], ARRAY['rec-' || :n, 'rec-' || :n, 'rec-' || :n, 'rec-' || :n, 'rec-' || :n, 'rec-' || :n]) AS u(t, f, v, n);
UPDATE zones SET change_xid = pg_current_xact_id()::text::bigint, change_seq = nextval('change_seq') WHERE container_id = :c AND zone_id = :z;
COMMIT;

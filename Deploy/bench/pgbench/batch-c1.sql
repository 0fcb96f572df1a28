-- service-sql: none (records only: the raw ceiling, not a copy of the service)
-- performance.md (c1): 100 new records in ONE statement, records table only (no locks, no index
-- entries): the raw ceiling a 100-record records/modify is compared with (B2b, goal >= 50%).
\set i random(1, :zones)
\set b random(1, 1000000000)
INSERT INTO records (container_id, zone_id, record_name, record_type, change_xid, change_seq, fields, created_at, created_by, modified_at, modified_by, deleted, size)
SELECT z.container_id, z.zone_id, 'c1-' || :b || '-' || g, 'Item', pg_current_xact_id()::text::bigint, nextval('change_seq'),
       '{"createdBy":{"type":"STRING","value":"user-1"},"done":{"type":"INT64","value":1},"notes":{"type":"STRING","value":"' || repeat('0123456789abcdef', 52) || '"},"rank":{"type":"INT64","value":' || (g * 7919 % 1048576) || '},"tags":{"type":"STRING_LIST","value":["a1","b1","c1"]},"title":{"type":"STRING","value":"new-title-' || (g % 25) || '"}}',
       1735689600000, '_bench', 1735689600000, '_bench', false, 1000
  FROM bench_zones z, generate_series(1, 100) g WHERE z.i = :i
ON CONFLICT (container_id, zone_id, record_name) DO NOTHING;

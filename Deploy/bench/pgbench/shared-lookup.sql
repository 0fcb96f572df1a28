-- service-sql: shared-lookup 7e28fdd7363e86da
-- The SQL `stratus serve` runs for a records/lookup of one record in the shared database (Sharing/SharingStore+SharedDatabase.swift,
-- `sharedLookup`): the reader's accepted shares of the owner's zone joined to the named record, in one statement.
-- bench_shared holds each seeded zone with its owner and the reader it is shared with (`bench seed --shared`).
-- Regenerate when the service's SQL changes.
\set i random(1, :zones)
\set n random(0, :per_zone - 1)
SELECT a.zone_id, a.root_name, a.permission, r.* FROM (
    SELECT z.zone_id, s.root_name, p.permission FROM zones z
    JOIN shares s ON s.container_id = z.container_id AND s.zone_id = z.zone_id AND NOT s.deleted
    JOIN share_participants p ON p.container_id = s.container_id AND p.zone_id = s.zone_id AND p.share_name = s.share_name
    WHERE (z.container_id, z.environment, z.database_scope, z.owner, z.zone_name)
          = (SELECT container_id, environment, 2::int2, owner, zone_name FROM bench_shared WHERE i = :i)
      AND NOT z.deleted
      AND p.user_record_name = (SELECT reader FROM bench_shared WHERE i = :i) AND p.status = 2
) a LEFT JOIN LATERAL (
    SELECT record_name, record_type, change_seq, fields, created_at, created_by, modified_at, modified_by, deleted, parent, share_name, short_guid, share_root FROM records
    WHERE container_id = (SELECT container_id FROM bench_shared WHERE i = :i) AND zone_id = a.zone_id AND record_name = 'rec-' || :n
    OFFSET 0
) r ON true;

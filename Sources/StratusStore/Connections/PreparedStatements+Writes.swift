import PostgresNIO
import StratusCore

/// `records/modify`'s write statements: `WriteRecords`, and `InsertRecords`, its form for a batch
/// that only creates records.
extension Prepared {
    /// `records/modify`'s writes in one statement: new records, changed records (and tombstones),
    /// their old index entries, references and asset references dropped (the new asset references
    /// follow in the same transaction: `RecordStore.writeAssetReferences`), their new index entries added (only for the
    /// records actually written), the zone's change position moved. Data-modifying CTEs share one
    /// snapshot, so the DELETE of old entries cannot see the ones this statement inserts
    /// (index_entries has no unique key). Returns each written record's name and change sequence.
    ///
    /// A record is written only if it is as the plan saw it: a changed row still has the change
    /// sequence read (`$31`), a new one does not exist (`ON CONFLICT DO NOTHING`). Under the locks
    /// of a transaction that always holds; for `RecordStore.modifyOne`, which runs it on its own
    /// after an unlocked read, a missing row means another writer came first. With `$32`, the zone
    /// row is locked first and nothing is written unless the zone is still live (a zone deleted
    /// since the read); under `LockZoneAndRecords` the caller already holds that lock.
    struct WriteRecords: PostgresPreparedStatement {
        static let name = "stratus.WriteRecords"
        static let sql = text(updates: true)

        /// The statement's text; without `updates`, `InsertRecords`'s.
        static func text(updates: Bool) -> String {
            let written = updates ? "    SELECT record_name, change_seq FROM ins UNION ALL SELECT record_name, change_seq FROM upd"
                                  : "    SELECT record_name, change_seq FROM ins"
            let parts = updates ? [live, inserted, updated, "), written AS (", written, deletes, entries, updatedDelta, tail]
                                : [identifiedLive, inserted, "), written AS (", written, unusedParameters, entries, tail]
            return parts.joined(separator: "\n")
        }

        private static let live = """
            WITH live AS (
                SELECT zone_id FROM zones WHERE container_id = $1 AND zone_id = $2 AND NOT deleted AND $32::bool FOR NO KEY UPDATE
            """

        /// `InsertRecords`' zone check: also the zone's identity ($41, $48–$50), for a zone id
        /// remembered from an earlier write (`RecordStore.knownZones`) rather than read just now.
        private static let identifiedLive = """
            WITH live AS (
                SELECT zone_id FROM zones WHERE container_id = $1 AND zone_id = $2 AND NOT deleted AND $32::bool
                  AND environment = $41 AND database_scope = $48::int2 AND owner = $49::text AND zone_name = $50::text FOR NO KEY UPDATE
            """

        private static let inserted = """
            ), ins AS (
                INSERT INTO records (container_id, zone_id, record_name, record_type, change_xid, change_seq, fields,
                                     created_at, created_by, modified_at, modified_by, deleted, size, parent)
                SELECT $1, $2, u.n, u.t, pg_current_xact_id()::text::bigint, stratus_change_seq() + u.i, u.f,
                       u.ca, u.cb, u.ma, u.mb, false, octet_length(u.f) + u.ab, NULLIF(u.p, '')
                FROM unnest($3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[], $8::bigint[], $9::text[], $39::text[], $46::bigint[])
                     WITH ORDINALITY AS u(n, t, f, ca, cb, ma, mb, p, ab, i)
                WHERE NOT $32::bool OR EXISTS (SELECT 1 FROM live)
                ON CONFLICT (container_id, zone_id, record_name) DO NOTHING
                RETURNING record_name, change_seq, size
            """

        /// What a changed record or tombstone is set to, from `u`, the updates' columns
        /// (`n, t, f, ca, cb, ma, mb, d, s, p, o, ab, i`): a tombstone keeps its creation, modification
        /// and parent; a record saved over a tombstone loses the share it had before. Also the
        /// update `RoutedWrites` sends on Citus.
        static let updateAssignments = """
            record_type = u.t, fields = u.f, created_at = CASE WHEN u.d THEN r.created_at ELSE u.ca END,
                   created_by = CASE WHEN u.d THEN r.created_by ELSE u.cb END,
                   modified_at = CASE WHEN u.d THEN r.modified_at ELSE u.ma END,
                   modified_by = CASE WHEN u.d THEN r.modified_by ELSE u.mb END,
                   deleted = u.d, size = octet_length(u.f) + u.ab,
                   change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq() + 32768 + u.i,
                   parent = CASE WHEN u.d THEN r.parent ELSE NULLIF(u.p, '') END,
                   share_name = CASE WHEN r.deleted THEN NULL ELSE r.share_name END,
                   short_guid = CASE WHEN r.deleted THEN NULL ELSE r.short_guid END,
                   share_root = CASE WHEN r.deleted THEN NULL ELSE r.share_root END
            """

        /// Records changed or deleted, when they are as they were read.
        private static let updated = """
            ), upd AS (
                UPDATE records r SET \(updateAssignments)
                FROM unnest($10::text[], $11::text[], $12::text[], $13::bigint[], $14::text[], $15::bigint[], $16::text[], $17::bool[], $31::bigint[], $40::text[], $43::bigint[], $47::bigint[])
                     WITH ORDINALITY AS u(n, t, f, ca, cb, ma, mb, d, s, p, o, ab, i)
                WHERE r.container_id = $1 AND r.zone_id = $2 AND r.record_name = u.n AND r.change_seq = u.s
                  AND (NOT $32::bool OR EXISTS (SELECT 1 FROM live))
                RETURNING r.record_name, r.change_seq, r.size, u.d, u.o
            """

        /// The updated records' old index entries, references and asset references.
        private static let deletes = """
            ), old_entries AS (
                DELETE FROM index_entries WHERE container_id = $1 AND zone_id = $2 AND record_name = ANY(ARRAY(SELECT record_name FROM upd))
            ), old_references AS (
                DELETE FROM record_references WHERE container_id = $1 AND zone_id = $2 AND source_name = ANY(ARRAY(SELECT record_name FROM upd))
            ), old_assets AS (
                DELETE FROM asset_references WHERE container_id = $1 AND zone_id = $2 AND record_name = ANY(ARRAY(SELECT record_name FROM upd))
            """

        /// Without updates: the parameters only updates use, with their types (a CTE that neither
        /// modifies data nor is referenced is never planned), so one set of bindings serves both.
        private static let unusedParameters = """
            ), unused AS (
                SELECT $10::text[], $11::text[], $12::text[], $13::bigint[], $14::text[], $15::bigint[], $16::text[], $17::bool[],
                       $31::bigint[], $40::text[], $43::bigint[], $47::bigint[]
            """

        private static let entries = """
            ), new_entries AS (
                INSERT INTO index_entries (container_id, zone_id, record_type, field, v_int, v_double, v_text, v_cell, v_lat, v_lon, record_name)
                SELECT $1, $2, e.t, e.f, e.vi, e.vd, e.vt, e.vc, e.la, e.lo, e.n FROM (
                    SELECT t, f, v AS vi, NULL::float8 AS vd, NULL::text AS vt, NULL::bigint AS vc, NULL::float8 AS la, NULL::float8 AS lo, n
                      FROM unnest($18::text[], $19::text[], $20::bigint[], $21::text[]) AS u(t, f, v, n)
                    UNION ALL
                    SELECT t, f, NULL::bigint, v, NULL::text, NULL, NULL, NULL, n
                      FROM unnest($22::text[], $23::text[], $24::float8[], $25::text[]) AS u(t, f, v, n)
                    UNION ALL
                    SELECT t, f, NULL::bigint, NULL::float8, v, NULL, NULL, NULL, n
                      FROM unnest($26::text[], $27::text[], $28::text[], $29::text[]) AS u(t, f, v, n)
                    UNION ALL
                    SELECT t, f, NULL::bigint, NULL::float8, NULL::text, c, la, lo, n
                      FROM unnest($33::text[], $34::text[], $35::bigint[], $36::float8[], $37::float8[], $38::text[]) AS u(t, f, c, la, lo, n)
                ) e WHERE e.n IN (SELECT record_name FROM written)
            ), zone AS (
                UPDATE zones SET change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq()
                WHERE container_id = $1 AND zone_id = $2 AND $30::bool AND EXISTS (SELECT 1 FROM written)
            ), delta AS (
                SELECT coalesce(sum(x.r), 0)::bigint AS r, coalesce(sum(x.b), 0)::bigint AS b FROM (
                    SELECT 1 AS r, size::bigint AS b FROM ins
            """

        /// What the updates add to the usage delta.
        private static let updatedDelta = """
                    UNION ALL
                    SELECT (NOT d)::int - (o >= 0)::int, CASE WHEN d THEN 0 ELSE size END - greatest(o, 0) FROM upd
            """

        private static let tail = """
                ) x
            ), usage AS (
                UPDATE usage_counters c SET records = c.records + d.r, bytes = c.bytes + d.b
                FROM delta d, unnest(CASE WHEN $42::text = '' THEN ARRAY['']::text[] ELSE ARRAY['', $42::text] END,
                                     CASE WHEN $42::text = '' THEN ARRAY[$44::int2] ELSE ARRAY[$44::int2, $45::int2] END) AS s(o, stripe),
                     (SELECT pg_backend_pid() % 16 AS own) b
                WHERE c.container_id = $1 AND c.environment = $41 AND c.owner = s.o
                  AND c.stripe = CASE WHEN s.stripe >= 0 THEN s.stripe ELSE b.own END AND (d.r <> 0 OR d.b <> 0)
                RETURNING c.records, c.bytes, c.records_cap, c.bytes_cap
            )
            SELECT record_name, change_seq, pg_current_xact_id()::text::bigint FROM written
            WHERE stratus_usage_check((SELECT count(u.*) = CASE WHEN d.r = 0 AND d.b = 0 THEN 0 WHEN $42::text = '' THEN 1 ELSE 2 END
                                              AND coalesce(bool_and((d.r <= 0 OR u.records <= u.records_cap) AND (d.b <= 0 OR u.bytes <= u.bytes_cap)), true)
                                       FROM delta d LEFT JOIN usage u ON true GROUP BY d.r, d.b))
            """
        /// A written record's name and change sequence, and the writing transaction's id.
        typealias Row = (String, Int64, Int64)

        /// Where the records go, and whose usage they count in.
        struct Target: Sendable {
            var containerID: ContainerID
            var zoneID: ZoneID
            var environment: Int16
            var tracksZoneChanges: Bool
            /// Lock the zone row, and write only if the zone is live.
            var lockZone: Bool
            /// Whose private storage the records count against ('' in the public database).
            var meteredOwner: UserID
            /// The counter stripes the container's and the owner's usage count in (reserved by the
            /// transaction), or -1: the connection's own (`pg_backend_pid() % 16`).
            var stripes: (container: Int16, owner: Int16) = (-1, -1)
        }

        /// Records to write, each with its fields encoded as stored.
        struct Rows: Sendable {
            var records: [Record] = []
            var fields: [String] = []
        }

        /// Records that exist, as they were when read.
        struct Updates: Sendable {
            var rows = Rows()
            /// The change sequence each record had when read.
            var expectedSeqs: [Int64] = []
            /// The stored size of each record if it was live when read, or -1.
            var oldSizes: [Int64] = []
        }

        var target: Target
        var inserts: Rows
        var updates = Updates()
        var entries: IndexWrites.IndexEntryRows

        func makeBindings() throws -> PostgresBindings {
            let (inserts, updates) = (inserts.records, updates.rows.records)
            var bindings = PostgresBindings(capacity: 47)
            bindings.append(target.containerID)
            bindings.append(target.zoneID)
            // Every array in its binary form, written directly (`BinaryArray`).
            for (records, fields) in [(inserts, self.inserts.fields), (updates, self.updates.rows.fields)] {
                bindings.append(BinaryArray.texts(records.lazy.map(\.recordName)))
                bindings.append(BinaryArray.texts(records.lazy.map(\.recordType)))
                bindings.append(BinaryArray.texts(fields))
                bindings.append(BinaryArray.int64s(records.lazy.map(\.createdAt)))
                bindings.append(BinaryArray.texts(records.lazy.map(\.createdBy.rawValue)))
                bindings.append(BinaryArray.int64s(records.lazy.map(\.modifiedAt)))
                bindings.append(BinaryArray.texts(records.lazy.map(\.modifiedBy.rawValue)))
            }
            bindings.append(BinaryArray.bools(updates.lazy.map(\.deleted)))
            for column in [entries.ints.types, entries.ints.fields] { bindings.append(BinaryArray.texts(column)) }
            bindings.append(BinaryArray.int64s(entries.ints.values))
            bindings.append(BinaryArray.texts(entries.ints.names))
            for column in [entries.doubles.types, entries.doubles.fields] { bindings.append(BinaryArray.texts(column)) }
            bindings.append(BinaryArray.float8s(entries.doubles.values))
            bindings.append(BinaryArray.texts(entries.doubles.names))
            for column in [entries.texts.types, entries.texts.fields, entries.texts.values, entries.texts.names] {
                bindings.append(BinaryArray.texts(column))
            }
            bindings.append(target.tracksZoneChanges)
            bindings.append(BinaryArray.int64s(self.updates.expectedSeqs))
            bindings.append(target.lockZone)
            let locations = entries.locations
            for column in [locations.column.types, locations.column.fields] { bindings.append(BinaryArray.texts(column)) }
            bindings.append(BinaryArray.int64s(locations.column.values))
            bindings.append(BinaryArray.float8s(locations.latitudes))
            bindings.append(BinaryArray.float8s(locations.longitudes))
            bindings.append(BinaryArray.texts(locations.column.names))
            // No parent: '' (arrays of optionals do not bind; no record is named '').
            bindings.append(BinaryArray.texts(inserts.lazy.map { $0.parent ?? "" }))
            bindings.append(BinaryArray.texts(updates.lazy.map { $0.parent ?? "" }))
            bindings.append(target.environment)
            bindings.append(target.meteredOwner)
            bindings.append(BinaryArray.int64s(self.updates.oldSizes))
            bindings.append(target.stripes.container)
            bindings.append(target.stripes.owner)
            // What each record's assets add to its stored size (0 for tombstones).
            bindings.append(BinaryArray.int64s(inserts.lazy.map(\.assetBytes)))
            bindings.append(BinaryArray.int64s(updates.lazy.map { $0.deleted ? 0 : $0.assetBytes }))
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// `WriteRecords` for a batch that only creates records, the commonest write: the same
    /// bindings and answer, without the UPDATE of records and the deletes that only follow one.
    /// PostgreSQL no longer initialises and runs those parts of the plan, a large share of its
    /// CPU per create.
    ///
    /// With `lockZone`, the zone must also still be the one named (`zone`, in `db`): a zone id
    /// remembered from an earlier write is checked here instead of read again.
    struct InsertRecords: PostgresPreparedStatement {
        static let name = "stratus.InsertRecords"
        static let sql = WriteRecords.text(updates: false)
        typealias Row = WriteRecords.Row

        /// Its inserts; its updates are empty.
        var write: WriteRecords
        var db: DatabaseRef
        var zone: String

        func makeBindings() throws -> PostgresBindings {
            var bindings = try write.makeBindings()
            bindings.append(db.scope.code)
            bindings.append(db.owner)
            bindings.append(zone)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try write.decodeRow(row) }
    }
}

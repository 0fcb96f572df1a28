import Logging
import PostgresNIO
import StratusCore

/// Records writes on a Citus coordinator that routes to workers (`Database.citusRoutes`), as
/// statements Citus sends whole to the one worker holding the container.
///
/// `Prepared.WriteRecords` (and `InsertRecords`, its form for creates) is one statement of
/// data-modifying CTEs. Citus cannot send such a statement to one worker: it runs each CTE as a
/// step of its own, keeps their results on the coordinator and copies them to the workers that
/// read them, so a write touched more than one node and committed in two phases. Here the same
/// writes are separate statements, each touching one table of the one container (`container_id`
/// a constant), in one transaction: every one goes to the same worker, which commits in one
/// phase. The coordinator still evaluates each statement's change position
/// (`pg_current_xact_id()`, `stratus_change_seq()`), as it did, so change feeds read them as before.
enum RoutedWrites {
    /// Whether `database`'s records writes go this way.
    static func applies(to database: Database) -> Bool { database.citusRoutes != nil }

    /// `write`'s records written in zone `zone` of `db` (`WriteRecords`' rows: each written
    /// record's name, change sequence and transaction id), in the transaction the task holds, or
    /// in one begun here on `connection`. When the connection fails during its COMMIT, the records
    /// are looked for (`WriteSettlement`): found, the rows are returned; not, TRY_AGAIN_LATER says
    /// nothing was saved.
    static func write(_ write: Prepared.WriteRecords, db: DatabaseRef, zone: String, database: Database, on connection: PostgresConnection,
                      logger: Logger) async throws -> [Prepared.WriteRecords.Row] {
        if database.held?.inTransaction == true { return try await statements(write, db: db, zone: zone, on: connection, logger: logger) }
        let target = write.target
        return try await database.inTransaction(on: connection, settle: { rows in
            try await WriteSettlement.committed(rows.map {
                WriteSettlement.WrittenRecord(containerID: target.containerID, zoneID: target.zoneID, name: $0.0, seq: $0.1, xid: $0.2)
            }, database: database, logger: logger)
        }) { connection in
            try await statements(write, db: db, zone: zone, on: connection, logger: logger)
        }
    }

    /// The statements, in the caller's transaction, as `WriteRecords` does them: the zone checked
    /// (still live and still `zone` of `db`) and locked; new records inserted (those that exist
    /// already are left alone); changed records and tombstones written if their change sequence
    /// is still the one read, and their old index entries, references and asset references
    /// dropped; the written records' index entries added; the zone's change position moved; the
    /// usage counters changed (a stripe past its cap refused with SR001, as `stratus_usage_check`
    /// refuses it in `WriteRecords`, whose callers then take the transaction).
    private static func statements(_ write: Prepared.WriteRecords, db: DatabaseRef, zone: String, on connection: PostgresConnection,
                                   logger: Logger) async throws -> [Prepared.WriteRecords.Row] {
        let target = write.target
        let (inserts, updates) = (write.inserts.records, write.updates.rows.records)
        guard !inserts.isEmpty || !updates.isEmpty else { return [] }
        if target.lockZone {
            let live = try await connection.rows("""
                SELECT 1 FROM zones WHERE container_id = \(target.containerID) AND zone_id = \(target.zoneID) AND NOT deleted
                  AND environment = \(target.environment) AND database_scope = \(db.scope.code) AND owner = \(db.owner)
                  AND zone_name = \(zone) FOR NO KEY UPDATE
                """, logger: logger)
            if live.isEmpty { return [] }
        }
        var written: [Prepared.WriteRecords.Row] = []
        var (records, bytes): (Int64, Int64) = (0, 0)

        if !inserts.isEmpty {
            var bindings = PostgresBindings(capacity: 2 + inserts.count * 9)
            bindings.append(target.containerID)
            bindings.append(target.zoneID)
            var rows: [String] = []
            for (index, record) in inserts.enumerated() {
                let first = bindings.count + 1
                let cell = (first..<first + 9).map { "$\($0)" }
                rows.append("($1, $2, \(cell[0]), \(cell[1]), pg_current_xact_id()::text::bigint, stratus_change_seq() + \(index + 1), \(cell[2]), "
                            + "\(cell[3]), \(cell[4]), \(cell[5]), \(cell[6]), false, octet_length(\(cell[2])) + \(cell[7])::bigint, NULLIF(\(cell[8]), ''))")
                bindings.append(record.recordName)
                bindings.append(record.recordType)
                bindings.append(write.inserts.fields[index])
                bindings.append(record.createdAt)
                bindings.append(record.createdBy.rawValue)
                bindings.append(record.modifiedAt)
                bindings.append(record.modifiedBy.rawValue)
                bindings.append(record.assetBytes)
                bindings.append(record.parent ?? "")
            }
            for row in try await connection.rows(PostgresQuery(unsafeSQL: """
                INSERT INTO records (container_id, zone_id, record_name, record_type, change_xid, change_seq, fields,
                                     created_at, created_by, modified_at, modified_by, deleted, size, parent)
                VALUES \(rows.joined(separator: ", "))
                ON CONFLICT (container_id, zone_id, record_name) DO NOTHING
                RETURNING record_name, change_seq, change_xid, size
                """, binds: bindings), logger: logger) {
                let (name, seq, xid, size) = try row.decode((String, Int64, Int64, Int32).self)
                written.append((name, seq, xid))
                records += 1
                bytes += Int64(size)
            }
        }

        if !updates.isEmpty {
            let fields = write.updates.rows.fields
            let rows = try await connection.rows("""
                UPDATE records r SET \(unescaped: Prepared.WriteRecords.updateAssignments)
                FROM unnest(\(updates.map(\.recordName))::text[], \(updates.map(\.recordType))::text[], \(fields)::text[],
                            \(updates.map(\.createdAt))::bigint[], \(updates.map(\.createdBy.rawValue))::text[], \(updates.map(\.modifiedAt))::bigint[],
                            \(updates.map(\.modifiedBy.rawValue))::text[], \(updates.map(\.deleted))::bool[], \(write.updates.expectedSeqs)::bigint[],
                            \(updates.map { $0.parent ?? "" })::text[], \(write.updates.oldSizes)::bigint[],
                            \(updates.map { $0.deleted ? 0 : $0.assetBytes })::bigint[])
                     WITH ORDINALITY AS u(n, t, f, ca, cb, ma, mb, d, s, p, o, ab, i)
                WHERE r.container_id = \(target.containerID) AND r.zone_id = \(target.zoneID) AND r.record_name = u.n AND r.change_seq = u.s
                RETURNING r.record_name, r.change_seq, r.change_xid, r.size, u.d, u.o
                """, logger: logger)
            var rewritten: [String] = []
            for row in rows {
                let (name, seq, xid, size, deleted, old) = try row.decode((String, Int64, Int64, Int32, Bool, Int64).self)
                written.append((name, seq, xid))
                rewritten.append(name)
                records += (deleted ? 0 : 1) - (old >= 0 ? 1 : 0)
                bytes += (deleted ? 0 : Int64(size)) - max(old, 0)
            }
            if !rewritten.isEmpty {
                for (table, column) in [("index_entries", "record_name"), ("record_references", "source_name"), ("asset_references", "record_name")] {
                    try await connection.statement(PostgresQuery(unsafeSQL: """
                        DELETE FROM \(table) WHERE container_id = $1 AND zone_id = $2 AND \(column) = ANY($3::text[])
                        """, binds: RecordStore.binds(target.containerID, target.zoneID, rewritten)), logger: logger)
                }
            }
        }
        guard !written.isEmpty else { return [] }

        try await addIndexEntries(write.entries, of: Set(written.map(\.0)), target: target, on: connection, logger: logger)
        if target.tracksZoneChanges {
            try await connection.statement("""
                UPDATE zones SET change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq()
                WHERE container_id = \(target.containerID) AND zone_id = \(target.zoneID)
                """, logger: logger)
        }
        try await count(records: records, bytes: bytes, target: target, on: connection, logger: logger)
        return written
    }

    /// Adds the index entries of the records named `names`, as rows of values (at most 4,000 a
    /// statement, well within a statement's 65,535 parameters).
    private static func addIndexEntries(_ entries: IndexWrites.IndexEntryRows, of names: Set<String>, target: Prepared.WriteRecords.Target,
                                        on connection: PostgresConnection, logger: Logger) async throws {
        var bindings = PostgresBindings()
        var rows: [String] = []
        func flush() async throws {
            guard !rows.isEmpty else { return }
            try await connection.statement(PostgresQuery(unsafeSQL: """
                INSERT INTO index_entries (container_id, zone_id, record_type, field, v_int, v_double, v_text, v_cell, v_lat, v_lon, record_name)
                VALUES \(rows.joined(separator: ", "))
                """, binds: bindings), logger: logger)
            (bindings, rows) = (PostgresBindings(), [])
        }
        /// One entry: its type, field and name, and its value's cells (bound) in the columns `cells` names, `NULL` in the others.
        func add(_ type: String, _ field: String, _ name: String, cells: [String: any PostgresNonThrowingEncodable]) async throws {
            guard names.contains(name) else { return }
            if rows.isEmpty {
                bindings.append(target.containerID)
                bindings.append(target.zoneID)
            }
            var row = ["$1", "$2"]
            for value in [type, field] {
                bindings.append(value)
                row.append("$\(bindings.count)")
            }
            for (column, cast) in [("v_int", "bigint"), ("v_double", "float8"), ("v_text", "text"), ("v_cell", "bigint"), ("v_lat", "float8"), ("v_lon", "float8")] {
                if let value = cells[column] {
                    bindings.append(value)
                    row.append("$\(bindings.count)::\(cast)")
                } else {
                    row.append("NULL")
                }
            }
            bindings.append(name)
            row.append("$\(bindings.count)")
            rows.append("(" + row.joined(separator: ", ") + ")")
            if rows.count == 4_000 { try await flush() }
        }
        for index in entries.ints.values.indices {
            try await add(entries.ints.types[index], entries.ints.fields[index], entries.ints.names[index], cells: ["v_int": entries.ints.values[index]])
        }
        for index in entries.doubles.values.indices {
            try await add(entries.doubles.types[index], entries.doubles.fields[index], entries.doubles.names[index],
                          cells: ["v_double": entries.doubles.values[index]])
        }
        for index in entries.texts.values.indices {
            try await add(entries.texts.types[index], entries.texts.fields[index], entries.texts.names[index], cells: ["v_text": entries.texts.values[index]])
        }
        let locations = entries.locations
        for index in locations.column.values.indices {
            try await add(locations.column.types[index], locations.column.fields[index], locations.column.names[index],
                          cells: ["v_cell": locations.column.values[index], "v_lat": locations.latitudes[index], "v_lon": locations.longitudes[index]])
        }
        try await flush()
    }

    /// Changes the container's usage counter and, for a private database, its owner's, by the
    /// records and bytes written (either sign), in the stripes reserved (or one at random);
    /// refused with SR001 (`stratus_usage_check`) when a counter is missing or what grew is past
    /// its cap, as in `WriteRecords`.
    private static func count(records: Int64, bytes: Int64, target: Prepared.WriteRecords.Target, on connection: PostgresConnection,
                              logger: Logger) async throws {
        guard records != 0 || bytes != 0 else { return }
        let owners = target.meteredOwner.rawValue.isEmpty ? [""] : ["", target.meteredOwner.rawValue]
        // A stripe not reserved: any of the 16 (Citus refuses `pg_backend_pid()` in a CASE; the
        // stripe only spreads concurrent writers over rows).
        let own = Int16.random(in: 0..<16)
        let stripes = [target.stripes.container, target.stripes.owner].prefix(owners.count).map { $0 >= 0 ? $0 : own }
        let counters = try await connection.rows("""
            UPDATE usage_counters c SET records = c.records + \(records), bytes = c.bytes + \(bytes)
            FROM unnest(\(owners)::text[], \(stripes)::int2[]) AS s(o, stripe)
            WHERE c.container_id = \(target.containerID) AND c.environment = \(target.environment) AND c.owner = s.o AND c.stripe = s.stripe
            RETURNING c.records, c.bytes, c.records_cap, c.bytes_cap
            """, logger: logger)
        var fits = counters.count == owners.count
        for counter in counters {
            let (counted, countedBytes, cap, bytesCap) = try counter.decode((Int64, Int64, Int64, Int64).self)
            if (records > 0 && counted > cap) || (bytes > 0 && countedBytes > bytesCap) { fits = false }
        }
        if !fits {
            try await connection.statement("SELECT stratus_usage_check(false)", logger: logger)
        }
    }
}

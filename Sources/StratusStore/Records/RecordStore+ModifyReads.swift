import Foundation
import Logging
import PostgresNIO
import StratusCore

// What a modify reads before it writes: the zone and the current records, locked or not, and the
// references it must check and the records its deletions take with them.

extension RecordStore {
    /// Locks a custom zone's row and then the current rows of `names` in it, in one round trip.
    /// `nil` when the zone does not exist.
    /// On Citus it takes two (`zoneAndRecordsOnCitus`).
    func lockZoneAndRecords(_ db: DatabaseRef, zone: String, names: [String], on connection: PostgresConnection) async throws -> (zoneID: ZoneID, shared: Bool, current: [String: Record])? {
        guard database.configuration.citusCoordinator else {
            return try await zoneAndRecords(Prepared.LockZoneAndRecords(db: db, zone: zone, names: names), on: connection)
        }
        return try await zoneAndRecordsOnCitus(db, zone: zone, names: names, locking: true, on: connection)
    }

    /// `lockZoneAndRecords` without the locks (`modifyOne`).
    func readZoneAndRecords(_ db: DatabaseRef, zone: String, names: [String], on connection: PostgresConnection) async throws -> (zoneID: ZoneID, shared: Bool, current: [String: Record])? {
        guard database.configuration.citusCoordinator else {
            return try await zoneAndRecords(Prepared.ReadZoneAndRecords(db: db, zone: zone, names: names), on: connection)
        }
        return try await zoneAndRecordsOnCitus(db, zone: zone, names: names, locking: false, on: connection)
    }

    /// The zone, whether it has live shares, then its records, in three statements: Citus plans the zone part of the joined
    /// statement on its own and then cannot join its result to the records, while each part alone
    /// goes to the container's worker.
    private func zoneAndRecordsOnCitus(_ db: DatabaseRef, zone: String, names: [String], locking: Bool,
                                       on connection: PostgresConnection) async throws -> (zoneID: ZoneID, shared: Bool, current: [String: Record])? {
        // Each statement names one table: Citus plans a subquery beside a row lock on its own.
        let rows = try await connection.rows("""
            SELECT zone_id FROM zones WHERE container_id = \(db.containerID) AND environment = \(db.environment.code)
              AND database_scope = \(db.scope.code) AND owner = \(db.owner) AND zone_name = \(zone) AND NOT deleted
            \(unescaped: locking ? "FOR NO KEY UPDATE" : "")
            """, logger: logger)
        guard let row = rows.first else { return nil }
        let zoneID = try row.decode(ZoneID.self)
        let shared = try await connection.rows("""
            SELECT 1 FROM shares WHERE container_id = \(db.containerID) AND zone_id = \(zoneID) AND NOT deleted LIMIT 1
            """, logger: logger).first != nil
        return (zoneID, shared, try await lockRecords(db, zoneID: zoneID, names: names, locking: locking, on: connection))
    }

    /// What a single-record modify reads (`modifyOne`): the zone and the current row of `name`, by
    /// a statement shared with the modifies arriving at the same time (`dynamicReads`; on Citus,
    /// where statements are not shared, `readZoneAndRecords`).
    func readZoneAndRecord(_ db: DatabaseRef, zone: String, name: String) async throws -> (zoneID: ZoneID, shared: Bool, current: [String: Record])? {
        guard !database.configuration.citusCoordinator else {
            return try await database.withConnection { connection in try await readZoneAndRecords(db, zone: zone, names: [name], on: connection) }
        }
        let (sql, binds) = Self.zoneAndRecordStatement(db, zone: zone, name: name)
        let answer = try await dynamicReads.answer(DynamicRead(sql: sql, binds: binds))
        return try Self.zoneAndRecords(answer.rows, skipping: answer.skipping)
    }

    /// `readZoneAndRecord`'s statement for one request (the shared form wraps it: `Prepared.Shared`).
    static func zoneAndRecordStatement(_ db: DatabaseRef, zone: String, name: String) -> (String, Prepared.Binds) {
        var binds = Prepared.Binds()
        let container = binds.bind(db.containerID.rawValue)
        let sql = """
            SELECT z.zone_id, EXISTS (SELECT 1 FROM shares s WHERE s.container_id = \(container) AND s.zone_id = z.zone_id AND NOT s.deleted), r.*
            FROM zones z LEFT JOIN LATERAL (
                SELECT \(Self.currentColumns) FROM records WHERE container_id = \(container) AND zone_id = z.zone_id AND record_name = \(binds.bind(name))
            ) r ON true
            WHERE z.container_id = \(container) AND z.environment = \(binds.bind(db.environment.code)) AND z.database_scope = \(binds.bind(db.scope.code))
              AND z.owner = \(binds.bind(db.owner.rawValue)) AND z.zone_name = \(binds.bind(zone)) AND NOT z.deleted
            """
        return (sql, binds)
    }

    /// The zone id, whether the zone has live shares, and the current rows (live or tombstones,
    /// with their share roots) of a zone-and-records statement. `nil` when the zone does not exist.
    func zoneAndRecords(_ statement: some ZoneAndNames, on connection: PostgresConnection) async throws -> (zoneID: ZoneID, shared: Bool, current: [String: Record])? {
        try Self.zoneAndRecords(try await connection.rows(statement, logger: logger), skipping: 0)
    }

    /// `zoneAndRecords`' rows, after `skipping` cells of each.
    static func zoneAndRecords(_ rows: [PostgresRow], skipping: Int) throws -> (zoneID: ZoneID, shared: Bool, current: [String: Record])? {
        var zone: (ZoneID, Bool)?
        var current: [String: Record] = [:]
        for row in rows {
            var reader = RowReader(row)
            for _ in 0..<skipping { try reader.skip() }
            zone = (try reader.next(ZoneID.self), try reader.next(Bool.self))
            guard try reader.peekIsNull() == false else { continue }
            let record = try Self.currentRecord(&reader)
            current[record.recordName] = record
        }
        guard let zone else { return nil }
        return (zone.0, zone.1, current)
    }

    /// Loads and locks (unless `locking` is false) the current rows (live or tombstones) of `names`.
    func lockRecords(_ db: DatabaseRef, zoneID: ZoneID, names: [String], locking: Bool = true, on connection: PostgresConnection) async throws -> [String: Record] {
        guard !names.isEmpty else { return [:] }
        let rows = try await connection.rows("""
            SELECT \(unescaped: Self.currentColumns) FROM records
            WHERE container_id = \(db.containerID) AND zone_id = \(zoneID) AND record_name = ANY(\(names)::text[])
            ORDER BY record_name
            \(unescaped: locking ? "FOR UPDATE" : "")
            """, logger: logger)
        var current: [String: Record] = [:]
        for row in rows {
            var reader = RowReader(row)
            let record = try Self.currentRecord(&reader)
            current[record.recordName] = record
        }
        return current
    }

    /// Enforces reference rules: references stay in their zone; `VALIDATE` targets must exist
    /// (or be saved in the same request); a record that a `VALIDATE` reference points at cannot be deleted.
    func checkReferences(_ db: DatabaseRef, zoneID: ZoneID, zone: String, outcomes: inout [Result<PlannedWrite, StratusError>],
                         on connection: PostgresConnection) async throws {
        var saved: Set<String> = []
        var deleted: Set<String> = []
        for outcome in outcomes {
            switch outcome {
            case .success(.save(let record, _)): saved.insert(record.recordName)
            case .success(.delete(let name, _)): deleted.insert(name)
            default: break
            }
        }
        // Targets of VALIDATE references must exist.
        var targets: Set<String> = []
        for index in outcomes.indices {
            guard case .success(.save(let record, _)) = outcomes[index] else { continue }
            for (field, value) in record.fields {
                for reference in Self.references(in: value) {
                    if let zoneName = reference.zoneName, zoneName != zone {
                        outcomes[index] = .failure(.badRequest("field '\(field)' of '\(Names.printable(record.recordName))' references a record in zone '\(Names.printable(zoneName))'; references must stay in the record's own zone"))
                        break
                    }
                    if reference.action == .validate, !saved.contains(reference.recordName) { targets.insert(reference.recordName) }
                }
            }
        }
        var existing: Set<String> = []
        if !targets.isEmpty {
            let rows = try await connection.rows("""
                SELECT record_name FROM records
                WHERE container_id = \(db.containerID) AND zone_id = \(zoneID) AND record_name = ANY(\(Array(targets))::text[]) AND NOT deleted
                FOR SHARE
                """, logger: logger)
            for row in rows { existing.insert(try row.decode(String.self)) }
        }
        for index in outcomes.indices {
            guard case .success(.save(let record, _)) = outcomes[index] else { continue }
            for (field, value) in record.fields {
                for reference in Self.references(in: value) where reference.action == .validate {
                    let present = saved.contains(reference.recordName) ? true : existing.contains(reference.recordName)
                    if !present || deleted.contains(reference.recordName) {
                        outcomes[index] = .failure(StratusError(.validatingReferenceError, "field '\(field)' of '\(Names.printable(record.recordName))' has a VALIDATE reference to '\(Names.printable(reference.recordName))', which does not exist"))
                    }
                }
            }
        }
        // Deleting a record that VALIDATE references point at is refused.
        guard !deleted.isEmpty else { return }
        let rows = try await connection.rows("""
            SELECT target_name, source_name FROM record_references
            WHERE container_id = \(db.containerID) AND zone_id = \(zoneID) AND target_name = ANY(\(Array(deleted))::text[]) AND action = 1
            """, logger: logger)
        var blockers: [String: String] = [:]
        for row in rows {
            let (target, source) = try row.decode((String, String).self)
            if deleted.contains(source) { continue }
            if saved.contains(source) {
                // The source is rewritten in this request; its new fields decide.
                let stillReferences = outcomes.contains { outcome in
                    guard case .success(.save(let record, _)) = outcome, record.recordName == source else { return false }
                    return record.fields.values.contains { Self.references(in: $0).contains { $0.action == .validate && $0.recordName == target } }
                }
                if !stillReferences { continue }
            }
            blockers[target] = source
        }
        for index in outcomes.indices {
            guard case .success(.delete(let name, _)) = outcomes[index], let source = blockers[name] else { continue }
            outcomes[index] = .failure(StratusError(.validatingReferenceError, "record '\(Names.printable(name))' cannot be deleted: '\(Names.printable(source))' has a VALIDATE reference to it; delete or change that record first"))
        }
    }

    /// Finds the records deleted in cascade through `DELETE_SELF` references, transitively.
    func collectCascade(_ db: DatabaseRef, zoneID: ZoneID, outcomes: [Result<PlannedWrite, StratusError>], into cascade: inout [Record],
                        on connection: PostgresConnection) async throws {
        var gone: Set<String> = []
        var saved: Set<String> = []
        for outcome in outcomes {
            switch outcome {
            case .success(.delete(let name, _)): gone.insert(name)
            case .success(.save(let record, _)): saved.insert(record.recordName)
            default: break
            }
        }
        var frontier = Array(gone)
        var rounds = 0
        while !frontier.isEmpty {
            rounds += 1
            guard rounds <= 100, cascade.count <= 10_000 else {
                throw StratusError.badRequest("deleting these records would cascade through more than 10,000 DELETE_SELF references; delete them in smaller steps")
            }
            let rows = try await connection.rows("""
                SELECT DISTINCT source_name FROM record_references
                WHERE container_id = \(db.containerID) AND zone_id = \(zoneID) AND target_name = ANY(\(frontier)::text[]) AND action = 2
                """, logger: logger)
            let sources = try rows.map { try $0.decode(String.self) }.filter { !gone.contains($0) && !saved.contains($0) }
            guard !sources.isEmpty else { break }
            let locked = try await lockRecords(db, zoneID: zoneID, names: sources, on: connection)
            frontier = []
            for (name, record) in locked where !record.deleted {
                gone.insert(name)
                cascade.append(record)
                frontier.append(name)
            }
        }
    }

    static func references(in value: FieldValue) -> [Reference] {
        switch value {
        case .reference(let reference): return [reference]
        case .list(.reference, let elements): return elements.flatMap { references(in: $0) }
        default: return []
        }
    }
}

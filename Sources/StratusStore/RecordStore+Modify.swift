import Foundation
import Logging
import PostgresNIO
import StratusCore

/// The outcome of one modify operation.
public enum ModifyResult: Sendable {
    /// The saved record (with its new change tag).
    case saved(Record)
    /// The record is deleted (or was already absent, for `forceDelete`).
    case deleted(recordName: String)
    case failed(recordName: String?, StratusError)
}

/// Thrown inside a modify transaction to roll it back while still answering per item.
struct AtomicAbort: Error {
    var results: [ModifyResult]
}

extension RecordStore {
    /// Applies a `records/modify` request in one transaction.
    ///
    /// Rows are locked (`FOR UPDATE`) before the plan is made, so change-tag checks cannot race.
    /// In an atomic request on a custom zone, any failure rolls everything back and the other
    /// operations report `ATOMIC_ERROR`; otherwise each operation succeeds or fails on its own.
    public func modify(_ db: DatabaseRef, zone: String, request: ModifyRequest, caller: String, now: Int64,
                       allowSchemaChanges: Bool, render: @escaping @Sendable (Record) -> JSON) async throws -> [ModifyResult] {
        let atomic = request.atomic && zone != Names.defaultZone
        do {
            return try await database.transaction { connection in
                guard let zoneID = try await zoneID(db, name: zone, createDefault: true, lock: true, on: connection) else {
                    throw Self.zoneNotFound(zone)
                }
                var schema = try await schemas.schema(containerID: db.containerID, environment: db.environment)
                let names = request.recordNames.compactMap { $0 }
                let current = try await lockRecords(db, zoneID: zoneID, names: names, on: connection)
                var plan = ModifyPlanner.plan(request, current: current, schema: schema, allowSchemaChanges: allowSchemaChanges,
                                              caller: caller, now: now, render: render)
                let failedInProduction = !allowSchemaChanges && plan.outcomes.contains { if case .failure(let error) = $0 { return error.code == .badRequest } else { return false } }
                if !plan.schemaAdditions.isEmpty || failedInProduction {
                    // Another process may have extended the schema (or deployed): plan again against the stored one.
                    schema = try await schemas.load(containerID: db.containerID, environment: db.environment, on: connection)
                    plan = ModifyPlanner.plan(request, current: current, schema: schema, allowSchemaChanges: allowSchemaChanges,
                                              caller: caller, now: now, render: render)
                }
                var outcomes = plan.outcomes
                try await checkReferences(db, zoneID: zoneID, zone: zone, outcomes: &outcomes, on: connection)
                if atomic, outcomes.contains(where: { if case .failure = $0 { return true } else { return false } }) {
                    throw AtomicAbort(results: Self.atomicFailure(outcomes, names: request.recordNames))
                }
                var cascade: [Record] = []
                try await collectCascade(db, zoneID: zoneID, outcomes: outcomes, into: &cascade, on: connection)

                let finalSchema = try await schemas.add(plan.schemaAdditions, to: plan.schema, containerID: db.containerID,
                                                        environment: db.environment, on: connection)
                var results = try await apply(db, zoneID: zoneID, outcomes: outcomes, cascade: cascade, schema: finalSchema,
                                              names: request.recordNames, on: connection)
                if atomic, results.contains(where: { if case .failed = $0 { return true } else { return false } }) {
                    throw AtomicAbort(results: Self.atomicFailure(results.map { result -> Result<PlannedWrite, StratusError> in
                        if case .failed(_, let error) = result { return .failure(error) }
                        return .success(.alreadyAbsent(recordName: ""))
                    }, names: request.recordNames))
                }
                if db.tracksZoneChanges {
                    try await connection.query("""
                        UPDATE zones SET change_xid = pg_current_xact_id()::text::bigint, change_seq = nextval('change_seq')
                        WHERE container_id = \(db.containerID) AND zone_id = \(zoneID)
                        """, logger: logger)
                }
                if !plan.schemaAdditions.isEmpty {
                    schemas.remember(finalSchema, containerID: db.containerID, environment: db.environment)
                }
                if let hook = testHooks.beforeCommit { await hook(names) }
                for index in results.indices {
                    if case .saved(var record) = results[index], let desired = plan.operations[index]?.desiredKeys {
                        record.fields = record.fields.filter { desired.contains($0.key) }
                        results[index] = .saved(record)
                    }
                }
                return results
            }
        } catch let abort as AtomicAbort {
            return abort.results
        }
    }

    /// Marks every operation of a failed atomic batch: the failures keep their error, the rest get ATOMIC_ERROR.
    static func atomicFailure(_ outcomes: [Result<PlannedWrite, StratusError>], names: [String?]) -> [ModifyResult] {
        let culprits = outcomes.enumerated().compactMap { index, outcome -> String? in
            if case .failure = outcome { return names[index] ?? "operation \(index)" }
            return nil
        }
        let summary = culprits.prefix(5).map { "'\(Names.printable($0))'" }.joined(separator: ", ")
        return outcomes.enumerated().map { index, outcome in
            if case .failure(let error) = outcome { return .failed(recordName: names[index], error) }
            return .failed(recordName: names[index], StratusError(.atomicError, "not applied: the atomic batch failed because of \(summary)"))
        }
    }

    /// Loads and locks the current rows (live or tombstones) of `names`.
    func lockRecords(_ db: DatabaseRef, zoneID: Int64, names: [String], on connection: PostgresConnection) async throws -> [String: Record] {
        guard !names.isEmpty else { return [:] }
        let rows = try await connection.rows("""
            SELECT \(unescaped: Self.recordColumns) FROM records
            WHERE container_id = \(db.containerID) AND zone_id = \(zoneID) AND record_name = ANY(\(names)::text[])
            ORDER BY record_name
            FOR UPDATE
            """, logger: logger)
        var current: [String: Record] = [:]
        for row in rows {
            let record = try Self.record(row)
            current[record.recordName] = record
        }
        return current
    }

    /// Enforces reference rules: references stay in their zone; `VALIDATE` targets must exist
    /// (or be saved in the same request); a record that a `VALIDATE` reference points at cannot be deleted.
    func checkReferences(_ db: DatabaseRef, zoneID: Int64, zone: String, outcomes: inout [Result<PlannedWrite, StratusError>],
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
    func collectCascade(_ db: DatabaseRef, zoneID: Int64, outcomes: [Result<PlannedWrite, StratusError>], into cascade: inout [Record],
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

    /// Writes the planned changes with set-based statements and returns one result per operation.
    func apply(_ db: DatabaseRef, zoneID: Int64, outcomes: [Result<PlannedWrite, StratusError>], cascade: [Record], schema: Schema,
               names: [String?], on connection: PostgresConnection) async throws -> [ModifyResult] {
        var inserts: [Record] = []
        var updates: [Record] = []
        for outcome in outcomes {
            switch outcome {
            case .success(.save(let record, let isNew)):
                if isNew { inserts.append(record) } else { updates.append(record) }
            case .success(.delete(let name, let type)):
                updates.append(Record(recordName: name, recordType: type, deleted: true))
            default: break
            }
        }
        for record in cascade {
            updates.append(Record(recordName: record.recordName, recordType: record.recordType, deleted: true))
        }
        // One lock order for every writer: by record name.
        inserts.sort { $0.recordName < $1.recordName }
        updates.sort { $0.recordName < $1.recordName }

        var written: [String: Int64] = [:]
        if !inserts.isEmpty {
            let encoded = inserts.map { String(decoding: Record.encodeFields($0.fields), as: UTF8.self) }
            let rows = try await connection.rows("""
                INSERT INTO records (container_id, zone_id, record_name, record_type, change_xid, change_seq, fields,
                                     created_at, created_by, modified_at, modified_by, deleted, size)
                SELECT \(db.containerID), \(zoneID), u.n, u.t, pg_current_xact_id()::text::bigint, nextval('change_seq'), u.f,
                       u.ca, u.cb, u.ma, u.mb, false, octet_length(u.f)
                FROM unnest(\(inserts.map(\.recordName))::text[], \(inserts.map(\.recordType))::text[], \(encoded)::text[],
                            \(inserts.map(\.createdAt))::bigint[], \(inserts.map(\.createdBy))::text[],
                            \(inserts.map(\.modifiedAt))::bigint[], \(inserts.map(\.modifiedBy))::text[]) AS u(n, t, f, ca, cb, ma, mb)
                ON CONFLICT (container_id, zone_id, record_name) DO NOTHING
                RETURNING record_name, change_seq
                """, logger: logger)
            for row in rows {
                let (name, seq) = try row.decode((String, Int64).self)
                written[name] = seq
            }
        }
        if !updates.isEmpty {
            let encoded = updates.map { $0.deleted ? "{}" : String(decoding: Record.encodeFields($0.fields), as: UTF8.self) }
            let rows = try await connection.rows("""
                UPDATE records r SET record_type = u.t, fields = u.f, created_at = CASE WHEN u.d THEN r.created_at ELSE u.ca END,
                       created_by = CASE WHEN u.d THEN r.created_by ELSE u.cb END,
                       modified_at = CASE WHEN u.d THEN r.modified_at ELSE u.ma END,
                       modified_by = CASE WHEN u.d THEN r.modified_by ELSE u.mb END,
                       deleted = u.d, size = octet_length(u.f),
                       change_xid = pg_current_xact_id()::text::bigint, change_seq = nextval('change_seq')
                FROM unnest(\(updates.map(\.recordName))::text[], \(updates.map(\.recordType))::text[], \(encoded)::text[],
                            \(updates.map(\.createdAt))::bigint[], \(updates.map(\.createdBy))::text[],
                            \(updates.map(\.modifiedAt))::bigint[], \(updates.map(\.modifiedBy))::text[],
                            \(updates.map(\.deleted))::bool[]) AS u(n, t, f, ca, cb, ma, mb, d)
                WHERE r.container_id = \(db.containerID) AND r.zone_id = \(zoneID) AND r.record_name = u.n
                RETURNING r.record_name, r.change_seq
                """, logger: logger)
            for row in rows {
                let (name, seq) = try row.decode((String, Int64).self)
                written[name] = seq
            }
        }

        // Index entries and references of everything rewritten.
        let rewritten = updates.map(\.recordName)
        if !rewritten.isEmpty {
            // One round trip for both (data-modifying CTEs run whether or not they are read).
            try await connection.query("""
                WITH entries AS (
                    DELETE FROM index_entries WHERE container_id = \(db.containerID) AND zone_id = \(zoneID) AND record_name = ANY(\(rewritten)::text[])
                ), refs AS (
                    DELETE FROM record_references WHERE container_id = \(db.containerID) AND zone_id = \(zoneID) AND source_name = ANY(\(rewritten)::text[])
                )
                SELECT 1
                """, logger: logger)
        }
        let live = (inserts + updates).filter { !$0.deleted && written[$0.recordName] != nil }
        try await writeIndexEntries(db, zoneID: zoneID, records: live, schema: schema, on: connection)
        try await writeReferences(db, zoneID: zoneID, records: live, on: connection)

        var results: [ModifyResult] = []
        for (index, outcome) in outcomes.enumerated() {
            switch outcome {
            case .failure(let error):
                results.append(.failed(recordName: names[index], error))
            case .success(.save(var record, let isNew)):
                if let seq = written[record.recordName] {
                    record.changeSeq = seq
                    results.append(.saved(record))
                } else if isNew {
                    results.append(.failed(recordName: record.recordName, StratusError(.exists, "record '\(Names.printable(record.recordName))' was created by another request at the same time")))
                } else {
                    results.append(.failed(recordName: record.recordName, StratusError(.tryAgainLater, "record '\(Names.printable(record.recordName))' changed during the request; retry", retryAfter: 1)))
                }
            case .success(.delete(let name, _)), .success(.alreadyAbsent(let name)):
                results.append(.deleted(recordName: name))
            }
        }
        return results
    }

    /// Inserts index entries for the indexed fields of `records`.
    func writeIndexEntries(_ db: DatabaseRef, zoneID: Int64, records: [Record], schema: Schema, on connection: PostgresConnection) async throws {
        var ints: (types: [String], fields: [String], values: [Int64], names: [String]) = ([], [], [], [])
        var doubles: (types: [String], fields: [String], values: [Double], names: [String]) = ([], [], [], [])
        var texts: (types: [String], fields: [String], values: [String], names: [String]) = ([], [], [], [])
        for record in records {
            guard let fieldSchemas = schema.recordTypes[record.recordType] else { continue }
            for (field, value) in record.fields {
                guard let fieldSchema = fieldSchemas[field], fieldSchema.isIndexed else { continue }
                var entries: [IndexValue] = []
                if case .list(_, let elements) = value {
                    var seen: Set<IndexValue> = []
                    for element in elements { if let entry = IndexValue(element), seen.insert(entry).inserted { entries.append(entry) } }
                } else if let entry = IndexValue(value) {
                    entries.append(entry)
                }
                for entry in entries {
                    switch entry {
                    case .int(let number):
                        ints.types.append(record.recordType); ints.fields.append(field); ints.values.append(number); ints.names.append(record.recordName)
                    case .double(let number):
                        doubles.types.append(record.recordType); doubles.fields.append(field); doubles.values.append(number); doubles.names.append(record.recordName)
                    case .text(let text):
                        texts.types.append(record.recordType); texts.fields.append(field); texts.values.append(text); texts.names.append(record.recordName)
                    }
                }
            }
        }
        guard !ints.values.isEmpty || !doubles.values.isEmpty || !texts.values.isEmpty else { return }
        // All three value kinds in one statement (empty arrays contribute no rows).
        try await connection.query("""
            INSERT INTO index_entries (container_id, zone_id, record_type, field, v_int, v_double, v_text, record_name)
            SELECT \(db.containerID), \(zoneID), t, f, v, NULL::float8, NULL::text, n
              FROM unnest(\(ints.types)::text[], \(ints.fields)::text[], \(ints.values)::bigint[], \(ints.names)::text[]) AS u(t, f, v, n)
            UNION ALL
            SELECT \(db.containerID), \(zoneID), t, f, NULL::bigint, v, NULL::text, n
              FROM unnest(\(doubles.types)::text[], \(doubles.fields)::text[], \(doubles.values)::float8[], \(doubles.names)::text[]) AS u(t, f, v, n)
            UNION ALL
            SELECT \(db.containerID), \(zoneID), t, f, NULL::bigint, NULL::float8, v, n
              FROM unnest(\(texts.types)::text[], \(texts.fields)::text[], \(texts.values)::text[], \(texts.names)::text[]) AS u(t, f, v, n)
            """, logger: logger)
    }

    /// Inserts `VALIDATE` and `DELETE_SELF` references of `records`.
    func writeReferences(_ db: DatabaseRef, zoneID: Int64, records: [Record], on connection: PostgresConnection) async throws {
        var targets: [String] = []
        var sources: [String] = []
        var fields: [String] = []
        var actions: [Int16] = []
        var seen: Set<[String]> = []
        for record in records {
            for (field, value) in record.fields {
                for reference in Self.references(in: value) where reference.action != .none {
                    guard seen.insert([reference.recordName, record.recordName, field]).inserted else { continue }
                    targets.append(reference.recordName)
                    sources.append(record.recordName)
                    fields.append(field)
                    actions.append(reference.action == .validate ? 1 : 2)
                }
            }
        }
        guard !targets.isEmpty else { return }
        try await connection.query("""
            INSERT INTO record_references (container_id, zone_id, target_name, source_name, field, action)
            SELECT \(db.containerID), \(zoneID), t, s, f, a FROM unnest(\(targets)::text[], \(sources)::text[], \(fields)::text[], \(actions)::int2[]) AS u(t, s, f, a)
            ON CONFLICT DO NOTHING
            """, logger: logger)
    }
}

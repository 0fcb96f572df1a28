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

/// What a modify transaction answers: the results, the changes to report, and the records it wrote
/// (which settle it when the connection fails during COMMIT).
typealias ModifyTransaction = (results: [ModifyResult], changes: RecordChanges?, written: [WriteSettlement.WrittenRecord])

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
    /// A request that saves one record is first tried without the transaction (`modifyOne`).
    /// `access` is the caller's security roles in the public database (`nil` elsewhere).
    /// `participant`: the request comes through the shared database from a participant of a share
    /// in this zone (`db` is the owner's private database): they see and write only what their shares allow.
    public func modify(_ db: DatabaseRef, zone: String, request: ModifyRequest, caller: UserID, now: Int64,
                       allowSchemaChanges: Bool, access: RecordAccess? = nil, participant: ShareAccess? = nil) async throws -> [ModifyResult] {
        try await usage.ensureUsageScopes(db)
        if request.operations.count == 1, testHooks.beforeCommit == nil, participant == nil,
           let results = try await modifyOne(db, zone: zone, request: request, caller: caller, now: now,
                                             allowSchemaChanges: allowSchemaChanges, access: access) {
            return results
        }
        let atomic = request.atomic && zone != Names.defaultZone
        do {
            // Cut off during COMMIT, the transaction is settled by its records (`committed`).
            let settle: @Sendable (ModifyTransaction) async throws -> Bool = { [database, logger] in try await WriteSettlement.committed($0.written, database: database, logger: logger) }
            let (results, changes, _) = try await database.transaction(settle: settle) { connection -> ModifyTransaction in
                let names = request.recordNames.compactMap { $0 }
                // Share roots are locked with the records: a share checks and changes its root.
                let roots = ShareWrites.shareRoots(of: request).filter { !names.contains($0) }
                let lockNames = roots.isEmpty ? names : names + Set(roots)
                let zoneID: ZoneID
                let zoneShared: Bool
                var current: [String: Record]
                if zone == Names.defaultZone {
                    guard let id = try await self.zoneID(db, name: zone, createDefault: true, on: connection) else {
                        throw Self.zoneNotFound(zone)
                    }
                    zoneID = id
                    zoneShared = false
                    current = try await lockRecords(db, zoneID: zoneID, names: lockNames, on: connection)
                } else {
                    guard let locked = try await lockZoneAndRecords(db, zone: zone, names: lockNames, on: connection) else {
                        throw Self.zoneNotFound(zone)
                    }
                    (zoneID, zoneShared, current) = locked
                }
                if let participant {
                    // What the participant may not see does not exist for them.
                    current = current.filter { participant.canSee($0.value.shareRoot) }
                }
                var schema = try await schemas.schema(containerID: db.containerID, environment: db.environment)
                var plan = ModifyPlanner.plan(request, current: current, schema: schema, allowSchemaChanges: allowSchemaChanges,
                                              caller: caller, now: now, access: access)
                let failedInProduction = !allowSchemaChanges && plan.outcomes.contains { if case .failure(let error) = $0 { return error.code == .badRequest } else { return false } }
                let denied = plan.outcomes.contains { if case .failure(let error) = $0 { return error.code == .accessDenied } else { return false } }
                if !plan.schemaAdditions.isEmpty || failedInProduction || denied {
                    // Another process may have extended the schema, changed its grants or deployed:
                    // plan again against the stored one.
                    schema = try await schemas.load(containerID: db.containerID, environment: db.environment, on: connection)
                    // Read before this transaction writes anything: what it finds serves every request.
                    schemas.remember(schema, containerID: db.containerID, environment: db.environment)
                    plan = ModifyPlanner.plan(request, current: current, schema: schema, allowSchemaChanges: allowSchemaChanges,
                                              caller: caller, now: now, access: access)
                }
                var outcomes = plan.outcomes
                try await checkReferences(db, zoneID: zoneID, zone: zone, outcomes: &outcomes, on: connection)
                try await indexWrites.useAssets(db, outcomes: &outcomes, on: connection)
                // Quotas before sharing is planned: a refused save must not leave a share behind.
                UsageMeter.encodeSaves(&outcomes)
                let liveSizes = UsageMeter.liveSizes(current.values)
                let reservation = try await usage.reserveUsage(db, outcomes: &outcomes, liveSizes: liveSizes, names: request.recordNames, on: connection)
                if reservation.refused {
                    // A refused save may be the target of another operation's VALIDATE reference.
                    try await checkReferences(db, zoneID: zoneID, zone: zone, outcomes: &outcomes, on: connection)
                }
                let sharing = try await shareWrites.planSharing(db, zoneID: zoneID, zone: zone, zoneShared: zoneShared, plan: plan, current: current,
                                                    outcomes: &outcomes, participant: participant, on: connection)
                if atomic, outcomes.contains(where: { if case .failure = $0 { return true } else { return false } }) {
                    throw AtomicAbort(results: Self.atomicFailure(outcomes, names: request.recordNames))
                }
                var cascade: [Record] = sharing.cascade
                try await collectCascade(db, zoneID: zoneID, outcomes: outcomes, into: &cascade, on: connection)

                let finalSchema = try await schemas.add(plan.schemaAdditions, to: plan.schema, containerID: db.containerID,
                                                        environment: db.environment, on: connection)
                var expected = current.mapValues(\.changeSeq)
                for record in cascade { expected[record.recordName] = record.changeSeq }
                let sizes = liveSizes.merging(UsageMeter.liveSizes(cascade)) { old, _ in old }
                var start: ChangePosition?
                var written: [WriteSettlement.WrittenRecord] = []
                var results = try await apply(db, zone: zone, zoneID: zoneID, outcomes: outcomes, cascade: cascade, schema: finalSchema,
                                              names: request.recordNames, expected: expected, liveSizes: sizes, stripes: reservation.stripes,
                                              lockZone: false, start: &start, written: &written, on: connection)
                if atomic, results.contains(where: { if case .failed = $0 { return true } else { return false } }) {
                    throw AtomicAbort(results: Self.atomicFailure(results.map { result -> Result<PlannedWrite, StratusError> in
                        if case .failed(_, let error) = result { return .failure(error) }
                        return .success(.alreadyAbsent(recordName: ""))
                    }, names: request.recordNames))
                }
                if !sharing.isEmpty {
                    let touched = try await shareWrites.applySharing(db, zoneID: zoneID, sharing: sharing, on: connection)
                    try await refreshSaved(&results, names: touched, db: db, zoneID: zoneID, on: connection)
                }
                if !plan.schemaAdditions.isEmpty {
                    schemas.remember(finalSchema, containerID: db.containerID, environment: db.environment)
                }
                if let hook = testHooks.beforeCommit { await hook(names) }
                let changes = observed ? RecordChanges(db: db, zone: zone, zoneID: zoneID, start: start,
                                                       changes: SubscriptionStore.changes(of: results, current: current, cascade: cascade)) : nil
                Self.keepDesiredKeys(&results, plan: plan)
                return (results, changes, written)
            }
            await subscriptions.report(changes)
            return results
        } catch let abort as AtomicAbort {
            return abort.results
        } catch where UsageMeter.isPastStripeCap(error) {
            // Never expected: the reservation above makes room first.
            throw StratusError(.tryAgainLater, "the quota counters changed during the request; retry", retryAfter: 1, underlying: error)
        }
    }

    /// Saves the one record of a request in two statements and no transaction: an unlocked read of
    /// the zone and the record, then `WriteRecords`, which commits on its own and writes only if
    /// the record is still as read (and a custom zone still live). Half the round trips of the
    /// transaction (no BEGIN, no COMMIT), which also leaves the zone and the record unlocked while
    /// the request is planned.
    ///
    /// A create in a custom zone this process has written to before skips the read: the zone's id
    /// is remembered (`knownZones`), and the write (`CreateRecords`, shared with the creates
    /// arriving at the same time; `InsertRecords` for a create alone, or where statements are not
    /// shared) writes only if that id is still a live zone of that name in `db` and the record
    /// does not exist. So does a save there that names every field the record keeps
    /// (`unreadSave`, `ReplaceRecords`): its statement checks the stored record itself; when the
    /// record is not as the save assumed, the save is read and planned after all.
    ///
    /// `nil` when nothing was written and the transaction must decide: another writer changed the
    /// record (or the zone) after the read, the zone was not found (or the default zone not yet
    /// made), or the request is not a plain save: a delete (cascades), a failed operation (the
    /// locked read decides the error), references (checked in the transaction), assets (marked
    /// used and referenced in the transaction), or fields new to the schema.
    func modifyOne(_ db: DatabaseRef, zone: String, request: ModifyRequest, caller: UserID, now: Int64,
                   allowSchemaChanges: Bool, access: RecordAccess?) async throws -> [ModifyResult]? {
        let names = request.recordNames.compactMap { $0 }
        // A create in a custom zone written before needs no read: the record must not exist, and
        // the write checks that, and that the zone is still live and still the one named, itself.
        var known: ZoneID?
        if zone != Names.defaultZone, case .success(let operation) = request.operations[0], operation.type == .create {
            known = knownZones.zoneID(db, zone)
        }
        /// The plan of a plain save, the one kind of request written here; `hook` runs just before its write.
        func plainSave(current: [String: Record], hook: (@Sendable ([String]) async -> Void)? = testHooks.beforeOptimisticWrite)
            async throws -> (plan: ModifyPlanner.BatchPlan, record: Record, schema: Schema)? {
            let schema = try await schemas.schema(containerID: db.containerID, environment: db.environment)
            let plan = ModifyPlanner.plan(request, current: current, schema: schema, allowSchemaChanges: allowSchemaChanges,
                                          caller: caller, now: now, access: access)
            guard plan.schemaAdditions.isEmpty, plan.outcomes.count == 1, case .success(.save(let record, _)) = plan.outcomes[0],
                  !record.fields.values.contains(where: { !Self.references(in: $0).isEmpty || !$0.assets.isEmpty }),
                  record.recordType != Record.shareType, let op = plan.operations[0], op.parent == .keep, !op.createShortGUID else { return nil }
            if let hook { await hook(names) }
            return (plan, record, schema)
        }
        if let known, creates.shares {
            guard let (plan, record, schema) = try await plainSave(current: [:]) else { return nil }
            let fields = record.encodedFields ?? Record.encodeFields(record.fields)
            let create = SharedWrite(db: db, zone: zone, zoneID: known, record: record, fields: String(decoding: fields, as: UTF8.self),
                                      entries: IndexWrites.indexEntryRows([record], schema: schema))
            switch try await creates.answer(create) {
            case .written(let seq, let xid):
                var saved = record
                saved.changeSeq = seq
                saved.encodedFields = fields
                var results: [ModifyResult] = [.saved(saved)]
                if observed {
                    await subscriptions.report(RecordChanges(db: db, zone: zone, zoneID: known, start: ChangePosition(xid: xid, seq: seq - 1),
                                               changes: SubscriptionStore.changes(of: results, current: [:], cascade: [])))
                }
                Self.keepDesiredKeys(&results, plan: plan)
                return results
            case .unwritten:
                // The record exists (or came meanwhile), or the zone is gone: the transaction reads and decides.
                knownZones.forget(db, zone)
                return nil
            case .retry, .replaced:  // (`replaced` answers `replaces` alone)
                return nil
            }
        }
        // A save that names every field its record keeps needs nothing read (`unreadSave`); when
        // the record turns out otherwise, it is left unwritten for the read below.
        if known == nil, access == nil, names.count == 1, zone != Names.defaultZone, replaces.shares,
           let zoneID = knownZones.zoneID(db, zone), case .success(let operation) = request.operations[0],
           let standIn = Self.standIn(for: operation) {
            guard let save = try await plainSave(current: [standIn.recordName: standIn], hook: testHooks.beforeUnreadWrite) else { return nil }
            if case .success(.save(_, isNew: false)) = save.plan.outcomes[0], let planned = save.plan.operations[0] {
                if let results = try await unreadSave(db, zone: zone, zoneID: zoneID, save: save, operation: planned, standIn: standIn) {
                    return results
                }
            }
        }
        /// The zone and the current record, read by a statement shared with the modifies arriving
        /// meanwhile, before any connection is taken: the write's own statement (shared too, for an
        /// update) takes one only when it runs.
        var read: (zoneID: ZoneID, current: [String: Record])?
        if known == nil, names.count == 1, !database.configuration.citusCoordinator {
            do {
                guard let zoneAndRecord = try await readZoneAndRecord(db, zone: zone, name: names[0]) else { return nil }
                read = (zoneAndRecord.zoneID, zoneAndRecord.current)
                if zone != Names.defaultZone { knownZones.remember(db, zone, zoneID: zoneAndRecord.zoneID) }
            } catch is Database.ConnectionLost {
                return nil  // refused before it was sent
            }
        }
        var planned: (plan: ModifyPlanner.BatchPlan, record: Record, schema: Schema)?
        if let read {
            guard let save = try await plainSave(current: read.current) else { return nil }
            planned = save
            // An update of the row read (live, or a tombstone saved over); a create goes below.
            if updates.shares, zone != Names.defaultZone, case .success(.save(_, isNew: false)) = save.plan.outcomes[0],
               let old = read.current[save.record.recordName] {
                return try await sharedUpdate(db, zone: zone, zoneID: read.zoneID, save: save, old: old, current: read.current)
            }
        }
        let outcome = try await database.withConnection { connection -> (results: [ModifyResult], changes: RecordChanges?)? in
            do {
                let zoneID: ZoneID
                let current: [String: Record]
                if let known {
                    (zoneID, current) = (known, [:])
                } else if let read {
                    (zoneID, current) = read
                } else {
                    guard let read = try await readZoneAndRecords(db, zone: zone, names: names, on: connection) else { return nil }
                    (zoneID, current) = (read.zoneID, read.current)
                    if zone != Names.defaultZone { knownZones.remember(db, zone, zoneID: zoneID) }
                }
                var save = planned
                if save == nil { save = try await plainSave(current: current) }
                guard let (plan, _, schema) = save else { return nil }
                var start: ChangePosition?
                var written: [WriteSettlement.WrittenRecord] = []
                var results = try await apply(db, zone: zone, zoneID: zoneID, outcomes: plan.outcomes, cascade: [], schema: schema,
                                              names: request.recordNames, expected: current.mapValues(\.changeSeq),
                                              liveSizes: UsageMeter.liveSizes(current.values), stripes: (-1, -1), lockZone: zone != Names.defaultZone,
                                              start: &start, written: &written, on: connection)
                guard case .saved = results[0] else {
                    // Unwritten: the record exists (or came meanwhile), or the zone is gone. The
                    // transaction reads and decides.
                    if known != nil { knownZones.forget(db, zone) }
                    return nil
                }
                let changes = observed ? RecordChanges(db: db, zone: zone, zoneID: zoneID, start: start,
                                                       changes: SubscriptionStore.changes(of: results, current: current, cascade: [])) : nil
                Self.keepDesiredKeys(&results, plan: plan)
                return (results, changes)
            } catch let error as PSQLError where Database.isRetryable(error) {
                return nil  // a deadlock: the statement was rolled back
            } catch is Database.ConnectionLost {
                return nil  // refused before it was sent
            } catch where UsageMeter.isPastStripeCap(error) {
                return nil  // past this connection's share of a quota: the transaction rebalances or refuses
            }
        }
        guard let outcome else { return nil }
        await subscriptions.report(outcome.changes)
        return outcome.results
    }

    /// A plain save of a record just read, written by a statement shared with the updates arriving
    /// meanwhile (`updates`, `Prepared.UpdateRecords`); `nil` when it was not written (the record
    /// changed since the read, or the zone went, or the statement failed for all): the
    /// transaction reads and decides.
    private func sharedUpdate(_ db: DatabaseRef, zone: String, zoneID: ZoneID, save: (plan: ModifyPlanner.BatchPlan, record: Record, schema: Schema),
                              old: Record, current: [String: Record]) async throws -> [ModifyResult]? {
        let fields = save.record.encodedFields ?? Record.encodeFields(save.record.fields)
        var saved = save.record
        saved.encodedFields = fields
        let write = SharedWrite(db: db, zone: zone, zoneID: zoneID, record: saved, fields: String(decoding: fields, as: UTF8.self),
                                entries: IndexWrites.indexEntryRows([save.record], schema: save.schema),
                                expected: (old.changeSeq, old.deleted ? -1 : old.storedSize ?? 0))
        guard case .written(let seq, let xid) = try await updates.answer(write) else { return nil }
        saved.changeSeq = seq
        var results: [ModifyResult] = [.saved(saved)]
        if observed {
            await subscriptions.report(RecordChanges(db: db, zone: zone, zoneID: zoneID, start: ChangePosition(xid: xid, seq: seq - 1),
                                                     changes: SubscriptionStore.changes(of: results, current: current, cascade: [])))
        }
        Self.keepDesiredKeys(&results, plan: save.plan)
        return results
    }

    /// What the planner is given for the record of a save that names every field the record
    /// keeps (`replace` and `forceReplace`, or an `update` or `forceUpdate` naming all of them):
    /// a live record of the operation's type with no fields, at the change its tag names. `nil`
    /// for other operations, or when the operation has no type or an unknown tag.
    static func standIn(for operation: ModifyOperation) -> Record? {
        guard [.update, .forceUpdate, .replace, .forceReplace].contains(operation.type), let recordType = operation.recordType else { return nil }
        var seq: Int64 = 0
        if operation.type.needsChangeTag {
            // (A tag naming no change a record can have — "-1", "0" — is left to the read, which
            // answers it CONFLICT: the statement takes a negative seq for "no tag to check".)
            guard let tag = operation.changeTag, let tagged = Record.changeSeq(fromTag: tag), tagged > 0 else { return nil }
            seq = tagged
        }
        return Record(recordName: operation.recordName, recordType: recordType, changeSeq: seq)
    }

    /// A planned save of `standIn`, written by a statement shared with the saves arriving meanwhile
    /// (`replaces`, `Prepared.ReplaceRecords`) only if the stored record is live, of the same
    /// type, at the tag's change (when the operation has one) and holds no field the operation
    /// does not name: then the operation's fields are the whole record, as planned. `nil` when
    /// it was not written: the caller reads the record and plans again.
    private func unreadSave(_ db: DatabaseRef, zone: String, zoneID: ZoneID, save: (plan: ModifyPlanner.BatchPlan, record: Record, schema: Schema),
                            operation: ModifyOperation, standIn: Record) async throws -> [ModifyResult]? {
        let fields = save.record.encodedFields ?? Record.encodeFields(save.record.fields)
        var saved = save.record
        saved.encodedFields = fields
        let write = SharedWrite(db: db, zone: zone, zoneID: zoneID, record: saved, fields: String(decoding: fields, as: UTF8.self),
                                entries: IndexWrites.indexEntryRows([save.record], schema: save.schema),
                                unread: (seq: operation.type.needsChangeTag ? standIn.changeSeq : -1, replacesFields: operation.type.replacesFields,
                                         named: Array(operation.fields.keys)))
        guard case .replaced(let seq, let xid, let kept) = try await replaces.answer(write) else { return nil }
        saved.changeSeq = seq
        saved.createdAt = kept.createdAt
        saved.createdBy = kept.createdBy
        saved.parent = kept.parent
        saved.shareName = kept.shareName
        saved.shortGUID = kept.shortGUID
        var results: [ModifyResult] = [.saved(saved)]
        if observed {
            await subscriptions.report(RecordChanges(db: db, zone: zone, zoneID: zoneID, start: ChangePosition(xid: xid, seq: seq - 1),
                                                     changes: SubscriptionStore.changes(of: results, current: [standIn.recordName: standIn], cascade: [])))
        }
        Self.keepDesiredKeys(&results, plan: save.plan)
        return results
    }

    /// Brings the saved records named in `names` up to date after sharing changed them (their
    /// share, short GUID or change tag).
    func refreshSaved(_ results: inout [ModifyResult], names: Set<String>, db: DatabaseRef, zoneID: ZoneID,
                      on connection: PostgresConnection) async throws {
        guard !names.isEmpty else { return }
        let rows = try await connection.rows("""
            SELECT record_name, change_seq, share_name, short_guid FROM records
            WHERE container_id = \(db.containerID) AND zone_id = \(zoneID) AND record_name = ANY(\(Array(names))::text[])
            """, logger: logger)
        var fresh: [String: (Int64, String?, String?)] = [:]
        for row in rows {
            let (name, seq, share, guid) = try row.decode((String, Int64, String?, String?).self)
            fresh[name] = (seq, share, guid)
        }
        for index in results.indices {
            guard case .saved(var record) = results[index], let (seq, share, guid) = fresh[record.recordName] else { continue }
            record.changeSeq = seq
            record.shareName = share
            record.shortGUID = guid
            results[index] = .saved(record)
        }
    }

    /// Keeps only the fields each operation asked for (`desiredKeys`) in its saved record.
    static func keepDesiredKeys(_ results: inout [ModifyResult], plan: ModifyPlanner.BatchPlan) {
        for index in results.indices {
            if case .saved(var record) = results[index], let desired = plan.operations[index]?.desiredKeys {
                record.fields = record.fields.filter { desired.contains($0.key) }
                results[index] = .saved(record)
            }
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

    /// Writes the planned changes with set-based statements and returns one result per operation.
    /// `expected` holds the change sequence of every existing record the plan changes, as read,
    /// `liveSizes` the stored size of those that are live (the usage counters change by the
    /// difference in the same statement, in `stripes`: see `reserveUsage`); `lockZone` is
    /// `WriteRecords`' zone check. `start` becomes the zone feed's position just before the first
    /// record written, if that is earlier than it was.
    func apply(_ db: DatabaseRef, zone: String, zoneID: ZoneID, outcomes: [Result<PlannedWrite, StratusError>], cascade: [Record], schema: Schema,
               names: [String?], expected: [String: Int64], liveSizes: [String: Int64], stripes: (Int16, Int16), lockZone: Bool,
               start: inout ChangePosition?, written log: inout [WriteSettlement.WrittenRecord], on connection: PostgresConnection) async throws -> [ModifyResult] {
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

        // One statement writes the records, replaces their index entries, drops their old
        // references and marks the zone changed: data-modifying CTEs share one snapshot, so the
        // DELETE of old entries cannot see the entries the same statement inserts (index_entries has
        // no unique key, so old and new may coexist until the statement ends). New entries are kept
        // only for records the INSERT/UPDATE actually wrote.
        // Each record's field JSON is encoded once: stored, and kept on the result so the response
        // splices it in instead of encoding the fields again.
        var encoded: [String: [UInt8]] = [:]
        func encode(_ record: Record) -> String {
            guard !record.deleted else { return "{}" }
            let bytes = record.encodedFields ?? Record.encodeFields(record.fields)
            encoded[record.recordName] = bytes
            return String(decoding: bytes, as: UTF8.self)
        }
        let insertFields = inserts.map(encode)
        let updateFields = updates.map(encode)
        let entries = IndexWrites.indexEntryRows((inserts + updates).filter { !$0.deleted }, schema: schema)
        let write = Prepared.WriteRecords(
            target: .init(containerID: db.containerID, zoneID: zoneID, environment: db.environment.code, tracksZoneChanges: db.tracksZoneChanges,
                          lockZone: lockZone, meteredOwner: UsageMeter.meteredOwner(db), stripes: stripes),
            inserts: .init(records: inserts, fields: insertFields),
            updates: .init(rows: .init(records: updates, fields: updateFields), expectedSeqs: updates.map { expected[$0.recordName] ?? 0 },
                           oldSizes: updates.map { liveSizes[$0.recordName] ?? -1 }),
            entries: entries)
        // Outside a transaction (`modifyOne`) the statement commits on its own: if the connection
        // fails before that is confirmed, the records it returned tell whether it did.
        let settle: @Sendable ([Prepared.WriteRecords.Row]) async throws -> [Prepared.WriteRecords.Row] = { [database, logger] rows in
            try await WriteSettlement.settled(rows, containerID: db.containerID, zoneID: zoneID, database: database, logger: logger)
        }
        let rows: [Prepared.WriteRecords.Row]
        if RoutedWrites.applies(to: database) {
            // On Citus routing to workers: statements Citus sends whole to the container's worker.
            rows = try await RoutedWrites.write(write, db: db, zone: zone, database: database, on: connection, logger: logger)
        } else if updates.isEmpty {
            rows = try await connection.rows(Prepared.InsertRecords(write: write, db: db, zone: zone), logger: logger, settle: settle)
        } else {
            rows = try await connection.rows(write, logger: logger, settle: settle)
        }
        var written: [String: Int64] = [:]
        for (name, seq, xid) in rows {
            log.append(WriteSettlement.WrittenRecord(containerID: db.containerID, zoneID: zoneID, name: name, seq: seq, xid: xid))
            written[name] = seq
            let before = ChangePosition(xid: xid, seq: seq - 1)
            if start.map({ before < $0 }) ?? true { start = before }
        }
        let live = (inserts + updates).filter { !$0.deleted && written[$0.recordName] != nil }
        try await indexWrites.writeReferences(db, zoneID: zoneID, records: live, on: connection)
        try await indexWrites.writeAssetReferences(db, zoneID: zoneID, records: live, on: connection)

        var results: [ModifyResult] = []
        for (index, outcome) in outcomes.enumerated() {
            switch outcome {
            case .failure(let error):
                results.append(.failed(recordName: names[index], error))
            case .success(.save(var record, let isNew)):
                if let seq = written[record.recordName] {
                    record.changeSeq = seq
                    record.encodedFields = encoded[record.recordName]
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
}

import Foundation
import Logging
import PostgresNIO
import StratusCore

// What records/modify does to shares and hierarchies: checking share records, participants and
// parents, then keeping share rows, participants and each record's share root.

/// What a `records/modify` request does to shares and hierarchies, found while planning it and
/// carried out after its records are written (`RecordStore.applySharing`).
struct SharePlan {
    struct Upsert {
        var shareName: String
        /// `nil`: zone-wide.
        var root: String?
        var isNew: Bool
        var publicPermission: SharePermission?
        /// The whole new list, resolved; `nil`: unchanged.
        var participants: [ResolvedParticipant]?
    }

    struct ResolvedParticipant: Equatable {
        var participantID: String
        var userRecordName: UserID?
        var email: String?
        var permission: SharePermission
    }

    var upserts: [Upsert] = []
    /// Shares whose record this request deletes (directly, or with their root).
    var deletedShares: [String] = []
    /// Share records deleted because their root is.
    var cascade: [Record] = []
    /// Records given a parent, or a new one.
    var parentsSet: [String] = []
    /// Records this request deletes (their children leave the hierarchy).
    var deleted: [String] = []
    /// Records that asked for a short GUID.
    var shortGUIDs: [String] = []
    /// The zone has live shares, before or after the request.
    var zoneShared = false
    /// The participant writing through the shared database, if it is one.
    var participant: ShareAccess?
    /// Shares the participant leaves (they deleted the share record).
    var leaves: [String] = []

    var isEmpty: Bool {
        upserts.isEmpty && deletedShares.isEmpty && parentsSet.isEmpty && shortGUIDs.isEmpty && !(zoneShared && !deleted.isEmpty)
            && leaves.isEmpty
    }
}

/// Writes of share records and of records in shared hierarchies, on the modify path.
struct ShareWrites: Sendable {
    let store: RecordStore
    var database: Database { store.database }
    var logger: Logger { store.logger }
}

extension ShareWrites {
    /// Most levels of a record hierarchy (parent chains longer than this are refused).
    public static let maximumHierarchyDepth = 64

    /// The roots a request's share operations name, to lock with the request's records.
    static func shareRoots(of request: ModifyRequest) -> [String] {
        request.operations.compactMap { slot in
            if case .success(let op) = slot { return op.share?.forRecord }
            return nil
        }
    }

    /// The live and deleted shares of a zone, without participants.
    func zoneShares(containerID: ContainerID, zoneID: ZoneID, on connection: PostgresConnection) async throws -> [String: (root: String?, shortGUID: String, permission: SharePermission, deleted: Bool)] {
        let rows = try await connection.rows("""
            SELECT share_name, root_name, short_guid, public_permission, deleted FROM shares
            WHERE container_id = \(containerID) AND zone_id = \(zoneID)
            """, logger: logger)
        var shares: [String: (root: String?, shortGUID: String, permission: SharePermission, deleted: Bool)] = [:]
        for row in rows {
            let (name, root, guid, permission, deleted) = try row.decode((String, String?, String, Int16, Bool).self)
            shares[name] = (root, guid, SharePermission(rawValue: permission) ?? .none, deleted)
        }
        return shares
    }

    /// Checks the share operations of a planned request and collects what it does to shares and
    /// hierarchies. Refused operations become failures in `outcomes`.
    func planSharing(_ db: DatabaseRef, zoneID: ZoneID, zone: String, zoneShared: Bool, plan: ModifyPlanner.BatchPlan,
                     current: [String: Record], outcomes: inout [Result<PlannedWrite, StratusError>], participant: ShareAccess? = nil,
                     on connection: PostgresConnection) async throws -> SharePlan {
        var sharing = SharePlan()
        sharing.zoneShared = zoneShared
        sharing.participant = participant
        if participant == nil, !zoneShared, !plan.operations.contains(where: { op in
            guard let op else { return false }
            return op.parent != .keep || op.createShortGUID || op.share != nil || op.recordType == Record.shareType || op.type.isDelete
        }) {
            return sharing  // nothing about shares or hierarchies: the usual case, one pass
        }
        if let participant { Self.checkParticipantWrites(participant, current: current, outcomes: &outcomes, sharing: &sharing) }
        let touchesShares = outcomes.indices.contains { index in
            if case .success(.save(let record, _)) = outcomes[index], record.recordType == Record.shareType { return true }
            if case .success(.delete(let name, _)) = outcomes[index], let live = current[name], live.recordType == Record.shareType || live.shareName != nil { return true }
            return false
        }
        let shares = zoneShared || touchesShares ? try await zoneShares(containerID: db.containerID, zoneID: zoneID, on: connection) : [:]
        let liveShares = shares.filter { !$0.value.deleted }
        var saved: [String: Record] = [:]
        for outcome in outcomes { if case .success(.save(let record, _)) = outcome { saved[record.recordName] = record } }
        var rootsClaimed: Set<String> = []
        var participantSpecs: [(index: Int, specs: [ParticipantSpec])] = []

        for index in outcomes.indices {
            switch outcomes[index] {
            case .success(.save(let record, let isNew)):
                let op = plan.operations[index]
                if op?.parent != .keep || isNew && record.parent != nil { sharing.parentsSet.append(record.recordName) }
                if op?.createShortGUID == true { sharing.shortGUIDs.append(record.recordName) }
                guard record.recordType == Record.shareType else { continue }
                do throws(StratusError) {
                    guard db.scope == .private, zone != Names.defaultZone else {
                        throw .badRequest("shares live in a custom zone of the owner's private database; \(zone == Names.defaultZone ? "the default zone cannot be shared: move the records to a custom zone" : "this is the \(db.scope.rawValue) database")")
                    }
                    guard record.parent == nil else { throw .badRequest("a cloudkit.share record cannot have a parent") }
                    let spec = op?.share ?? ShareSpec()
                    let existing = liveShares[record.recordName]
                    var upsert = SharePlan.Upsert(shareName: record.recordName, root: existing?.root, isNew: existing == nil,
                                                  publicPermission: spec.publicPermission, participants: nil)
                    if let existing {
                        if let asked = spec.forRecord, asked != existing.root {
                            throw .badRequest("share '\(Names.printable(record.recordName))' is for \(existing.root.map { "'\(Names.printable($0))'" } ?? "the whole zone"); a share's forRecord cannot change: delete it and share again")
                        }
                    } else if let rootName = spec.forRecord {
                        try checkNewRoot(rootName, share: record.recordName, spec: spec, current: current, saved: saved, liveShares: liveShares,
                                         deletedShares: Set(sharing.deletedShares))
                        guard rootsClaimed.insert(rootName).inserted else {
                            throw .badRequest("record '\(Names.printable(rootName))' is the forRecord of two shares in this request")
                        }
                        upsert.root = rootName
                    } else {
                        if let other = liveShares.first(where: { $0.key != record.recordName }) {
                            throw .badRequest("zone '\(Names.printable(zone))' already has \(other.value.root == nil ? "the zone-wide share" : "a share of record '\(Names.printable(other.value.root!))'") '\(Names.printable(other.key))'; a zone-wide share must be the zone's only share")
                        }
                        guard rootsClaimed.insert("").inserted else { throw .badRequest("two zone-wide shares in one request") }
                    }
                    if let specs = spec.participants { participantSpecs.append((index, specs)) }
                    sharing.upserts.append(upsert)
                } catch {
                    outcomes[index] = .failure(error)
                }
            case .success(.delete(let name, let type)):
                sharing.deleted.append(name)
                if type == Record.shareType, liveShares[name] != nil { sharing.deletedShares.append(name) }
                if let shareName = current[name]?.shareName, liveShares[shareName] != nil, !sharing.deletedShares.contains(shareName) {
                    // Deleting a shared root deletes its share.
                    sharing.deletedShares.append(shareName)
                    if !outcomes.contains(where: { if case .success(.delete(shareName, _)) = $0 { return true } else { return false } }) {
                        let locked = try await store.lockRecords(db, zoneID: zoneID, names: [shareName], on: connection)
                        if let share = locked[shareName], !share.deleted { sharing.cascade.append(share) }
                    }
                }
            default:
                continue
            }
        }
        // A zone-wide share cannot join hierarchy shares made in the same request.
        if rootsClaimed.contains(""), rootsClaimed.count > 1 {
            for upsert in sharing.upserts {
                guard let index = outcomes.indices.first(where: { if case .success(.save(let record, _)) = outcomes[$0] { return record.recordName == upsert.shareName } else { return false } }) else { continue }
                outcomes[index] = .failure(.badRequest("a zone-wide share must be the zone's only share; this request also shares records"))
            }
            sharing.upserts = []
        }
        try await resolveParticipants(db, specs: participantSpecs, outcomes: &outcomes, sharing: &sharing, on: connection)
        sharing.upserts.removeAll { upsert in
            !outcomes.contains { if case .success(.save(let record, _)) = $0 { return record.recordName == upsert.shareName } else { return false } }
        }
        sharing.zoneShared = zoneShared || !sharing.upserts.isEmpty
        return sharing
    }

    /// Refuses what a participant may not do: change a share (deleting it is leaving it, which
    /// `sharing.leaves` records), write with READ_ONLY permission or outside their hierarchies,
    /// delete a shared root, create a record in a hierarchy share without a parent.
    static func checkParticipantWrites(_ participant: ShareAccess, current: [String: Record],
                                       outcomes: inout [Result<PlannedWrite, StratusError>], sharing: inout SharePlan) {
        let readOnly = StratusError(.accessDenied, "your permission on this share is READ_ONLY; ask its owner for READ_WRITE")
        for index in outcomes.indices {
            guard case .success(let write) = outcomes[index] else { continue }
            switch write {
            case .save(let record, _):
                let live = current[record.recordName].flatMap { $0.deleted ? nil : $0 }
                if record.recordType == Record.shareType {
                    outcomes[index] = .failure(StratusError(.accessDenied, "only the share's owner can change it; to leave the share, delete its record"))
                } else if let live, !participant.canWrite(live.shareRoot) {
                    outcomes[index] = .failure(readOnly)
                } else if live == nil, !participant.mayWrite {
                    outcomes[index] = .failure(readOnly)
                } else if live == nil, participant.roots != nil, record.parent == nil {
                    outcomes[index] = .failure(StratusError(.accessDenied, "record '\(Names.printable(record.recordName))' needs a parent inside the shared hierarchy: only what is below the shared record is shared"))
                }
            case .delete(let name, let type):
                guard let live = current[name] else { continue }
                if type == Record.shareType {
                    sharing.leaves.append(name)
                    outcomes[index] = .success(.alreadyAbsent(recordName: name))
                } else if !participant.canWrite(live.shareRoot) {
                    outcomes[index] = .failure(readOnly)
                } else if live.shareName != nil {
                    outcomes[index] = .failure(StratusError(.accessDenied, "only the owner can delete the shared record '\(Names.printable(name))'"))
                }
            case .alreadyAbsent:
                continue
            }
        }
    }

    /// Refuses a record that cannot become the root of a new share.
    func checkNewRoot(_ rootName: String, share: String, spec: ShareSpec, current: [String: Record], saved: [String: Record],
                      liveShares: [String: (root: String?, shortGUID: String, permission: SharePermission, deleted: Bool)],
                      deletedShares: Set<String>) throws(StratusError) {
        if let zoneShare = liveShares.first(where: { $0.value.root == nil }) {
            throw .badRequest("the zone is shared whole by '\(Names.printable(zoneShare.key))'; its records cannot also be shared one by one")
        }
        let stored = current[rootName].flatMap { $0.deleted ? nil : $0 }
        guard let root = saved[rootName] ?? stored else {
            throw .badRequest("forRecord '\(Names.printable(rootName))' does not exist in this zone: a share's root must be a record in the same custom zone of your private database")
        }
        guard root.recordType != Record.shareType else { throw .badRequest("a share cannot be the forRecord of another share") }
        if saved[rootName] == nil, let tag = spec.forRecordTag, tag != root.changeTag {
            throw StratusError(.conflict, "forRecord '\(Names.printable(rootName))' has changed (server tag \(root.changeTag), yours \(tag)); fetch it and share again")
        }
        if let other = root.shareName, other != share, liveShares[other] != nil, !deletedShares.contains(other) {
            throw .badRequest("record '\(Names.printable(rootName))' is already shared by '\(Names.printable(other))'; change that share's participants instead")
        }
    }

    /// Resolves participants named by user record name or email address to this container's
    /// users (an email nobody has yet stays an invitation to that address).
    func resolveParticipants(_ db: DatabaseRef, specs: [(index: Int, specs: [ParticipantSpec])], outcomes: inout [Result<PlannedWrite, StratusError>],
                             sharing: inout SharePlan, on connection: PostgresConnection) async throws {
        guard !specs.isEmpty else { return }
        let names = Array(Set(specs.flatMap { $0.specs.compactMap(\.userRecordName) }))
        let emails = Array(Set(specs.flatMap { $0.specs.compactMap { $0.email?.lowercased() } }))
        let rows = try await connection.rows("""
            SELECT user_record_name, lower(email) FROM users
            WHERE container_id = \(db.containerID) AND (user_record_name = ANY(\(names)::text[]) OR lower(email) = ANY(\(emails)::text[]))
            """, logger: logger)
        var known: Set<String> = []
        var byEmail: [String: String] = [:]
        for row in rows {
            let (name, email) = try row.decode((String, String).self)
            known.insert(name)
            byEmail[email] = name
        }
        for (index, list) in specs {
            guard case .success(.save(let record, _)) = outcomes[index] else { continue }
            do throws(StratusError) {
                var resolved: [SharePlan.ResolvedParticipant] = []
                var seen: Set<String> = []
                for spec in list {
                    var participant: SharePlan.ResolvedParticipant
                    if let name = spec.userRecordName {
                        guard known.contains(name.rawValue) else {
                            throw .badRequest("participant '\(Names.printable(name.rawValue))' is not a user of this container; name participants by their userRecordName here, or invite them by email address")
                        }
                        participant = .init(participantID: name.rawValue, userRecordName: name, email: nil, permission: spec.permission)
                    } else {
                        let email = spec.email!.lowercased()
                        if let name = byEmail[email] {
                            participant = .init(participantID: name, userRecordName: UserID(name), email: email, permission: spec.permission)
                        } else {
                            participant = .init(participantID: "email:" + email, userRecordName: nil, email: email, permission: spec.permission)
                        }
                    }
                    if participant.userRecordName == db.owner {
                        throw .badRequest("the share's owner cannot be one of its participants")
                    }
                    guard seen.insert(participant.participantID).inserted else {
                        throw .badRequest("participant \(participant.userRecordName.map { "'\(Names.printable($0.rawValue))'" } ?? "'\(Names.printable(participant.email ?? ""))'") is listed twice")
                    }
                    resolved.append(participant)
                }
                if let slot = sharing.upserts.firstIndex(where: { $0.shareName == record.recordName }) {
                    sharing.upserts[slot].participants = resolved
                }
            } catch {
                outcomes[index] = .failure(error)
            }
        }
    }

    /// Carries out `sharing` after the request's records are written: share rows, participants,
    /// roots, short GUIDs, parent checks and the hierarchy's share roots. Returns the records
    /// whose share, short GUID or change tag this changed (to answer with their new state).
    func applySharing(_ db: DatabaseRef, zoneID: ZoneID, sharing: SharePlan, on connection: PostgresConnection) async throws -> Set<String> {
        var touched: Set<String> = []
        let container = db.containerID
        if !sharing.parentsSet.isEmpty { try await checkParents(db, zoneID: zoneID, names: sharing.parentsSet, on: connection) }
        if !sharing.shortGUIDs.isEmpty {
            let guids = sharing.shortGUIDs.map { _ in ShortGUID.mint() }
            let rows = try await connection.rows("""
                UPDATE records r SET short_guid = u.g FROM unnest(\(sharing.shortGUIDs)::text[], \(guids)::text[]) AS u(n, g)
                WHERE r.container_id = \(container) AND r.zone_id = \(zoneID) AND r.record_name = u.n AND NOT r.deleted AND r.short_guid IS NULL
                RETURNING r.record_name
                """, logger: logger)
            for row in rows { touched.insert(try row.decode(String.self)) }
        }
        var starts: [String] = []
        for share in sharing.deletedShares {
            try await connection.statement("""
                UPDATE shares SET deleted = true WHERE container_id = \(container) AND zone_id = \(zoneID) AND share_name = \(share)
                """, logger: logger)
            // Each row's ordinal is added to the sequence: on Citus it is drawn once per statement.
            try await connection.statement("""
                UPDATE share_participants p SET change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq() + s.i
                FROM (SELECT participant_id, row_number() OVER () AS i FROM share_participants
                      WHERE container_id = \(container) AND zone_id = \(zoneID) AND share_name = \(share)) s
                WHERE p.container_id = \(container) AND p.zone_id = \(zoneID) AND p.share_name = \(share) AND p.participant_id = s.participant_id
                """, logger: logger)
            let rows = try await connection.rows("""
                UPDATE records r SET share_name = NULL, change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq() + s.i
                FROM (SELECT record_name, row_number() OVER () AS i FROM records
                      WHERE container_id = \(container) AND zone_id = \(zoneID) AND share_name = \(share) AND NOT deleted) s
                WHERE r.container_id = \(container) AND r.zone_id = \(zoneID) AND r.record_name = s.record_name
                RETURNING r.record_name
                """, logger: logger)
            for row in rows {
                let name = try row.decode(String.self)
                starts.append(name)
                touched.insert(name)
            }
        }
        for upsert in sharing.upserts {
            var guid = ShortGUID.mint()
            if upsert.isNew, let root = upsert.root {
                // The root keeps the short GUID it had; otherwise it takes the share's.
                let rows = try await connection.rows("""
                    UPDATE records SET share_name = \(upsert.shareName), short_guid = COALESCE(short_guid, \(guid)),
                           change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq()
                    WHERE container_id = \(container) AND zone_id = \(zoneID) AND record_name = \(root) AND NOT deleted
                    RETURNING short_guid
                    """, logger: logger)
                guard let row = rows.first else {
                    throw StratusError.badRequest("forRecord '\(Names.printable(root))' does not exist in this zone")
                }
                guid = try row.decode(String.self)
                touched.insert(root)
                starts.append(root)
            }
            if upsert.isNew {
                try await connection.statement("""
                    INSERT INTO shares (container_id, zone_id, share_name, root_name, short_guid, public_permission)
                    VALUES (\(container), \(zoneID), \(upsert.shareName), \(upsert.root), \(guid), \((upsert.publicPermission ?? .none).rawValue))
                    ON CONFLICT (container_id, zone_id, share_name) DO UPDATE
                        SET root_name = EXCLUDED.root_name, short_guid = EXCLUDED.short_guid,
                            public_permission = EXCLUDED.public_permission, deleted = false, created_at = EXCLUDED.created_at
                    """, logger: logger)
                // The share record belongs to its root's hierarchy: its participants may read it.
                try await connection.statement("""
                    UPDATE records SET short_guid = \(guid), share_root = \(upsert.root)
                    WHERE container_id = \(container) AND zone_id = \(zoneID) AND record_name = \(upsert.shareName)
                    """, logger: logger)
                touched.insert(upsert.shareName)
            } else if let permission = upsert.publicPermission {
                try await connection.statement("""
                    UPDATE shares SET public_permission = \(permission.rawValue)
                    WHERE container_id = \(container) AND zone_id = \(zoneID) AND share_name = \(upsert.shareName)
                    """, logger: logger)
            }
            if let participants = upsert.participants {
                try await replaceParticipants(db, zoneID: zoneID, share: upsert.shareName, with: participants, on: connection)
            }
        }
        for share in sharing.leaves {
            try await connection.statement("""
                UPDATE share_participants SET status = \(ParticipantStatus.removed.rawValue),
                       change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq()
                WHERE container_id = \(container) AND zone_id = \(zoneID) AND share_name = \(share)
                  AND user_record_name = \(sharing.participant?.user ?? .nobody)
                """, logger: logger)
        }
        if sharing.zoneShared {
            starts += sharing.parentsSet + sharing.deleted
            if !starts.isEmpty { try await refreshHierarchy(db, zoneID: zoneID, starts: starts, on: connection) }
        }
        if let participant = sharing.participant, let roots = participant.roots, !sharing.parentsSet.isEmpty {
            // What a participant wrote must have landed in a hierarchy they may write.
            let writable = roots.filter { $0.value == .readWrite }.map(\.key)
            let outside = try await connection.rows("""
                SELECT record_name FROM records
                WHERE container_id = \(container) AND zone_id = \(zoneID) AND record_name = ANY(\(sharing.parentsSet)::text[]) AND NOT deleted
                  AND (share_root IS NULL OR NOT share_root = ANY(\(writable)::text[]))
                LIMIT 1
                """, logger: logger)
            if let row = outside.first {
                throw StratusError(.accessDenied, "record '\(Names.printable(try row.decode(String.self)))' would be outside the hierarchies shared with you for writing: give it a parent inside one")
            }
        }
        return touched
    }

    /// Makes a share's participants the `participants` list: new ones are invited, listed ones
    /// take their new permission (a removed one is invited again), unlisted ones are removed.
    /// Every row that changes moves to a new change position (the participant's database feed).
    func replaceParticipants(_ db: DatabaseRef, zoneID: ZoneID, share: String, with participants: [SharePlan.ResolvedParticipant],
                             on connection: PostgresConnection) async throws {
        let ids = participants.map(\.participantID)
        try await connection.statement("""
            UPDATE share_participants p SET status = \(ParticipantStatus.removed.rawValue),
                   change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq() + s.i
            FROM (SELECT participant_id, row_number() OVER () AS i FROM share_participants
                  WHERE container_id = \(db.containerID) AND zone_id = \(zoneID) AND share_name = \(share)
                    AND status <> \(ParticipantStatus.removed.rawValue) AND NOT (participant_id = ANY(\(ids)::text[]))) s
            WHERE p.container_id = \(db.containerID) AND p.zone_id = \(zoneID) AND p.share_name = \(share) AND p.participant_id = s.participant_id
            """, logger: logger)
        guard !participants.isEmpty else { return }
        // The states are written as literals, and the other values cast: Citus sends this
        // statement on to the worker with its parameters, whose types it must be told.
        try await connection.statement("""
            INSERT INTO share_participants (container_id, zone_id, share_name, participant_id, user_record_name, email, permission, status, kind,
                                            change_xid, change_seq)
            SELECT \(db.containerID)::bigint, \(zoneID)::bigint, \(share)::text, u.id, NULLIF(u.name, ''), NULLIF(u.email, ''), u.permission,
                   \(unescaped: String(ParticipantStatus.invited.rawValue)), \(unescaped: String(ParticipantType.user.rawValue)), pg_current_xact_id()::text::bigint, stratus_change_seq()
            FROM unnest(\(ids)::text[], \(participants.map { $0.userRecordName ?? .nobody })::text[], \(participants.map { $0.email ?? "" })::text[],
                        \(participants.map(\.permission.rawValue))::int2[]) AS u(id, name, email, permission)
            ON CONFLICT (container_id, zone_id, share_name, participant_id) DO UPDATE
                SET permission = EXCLUDED.permission,
                    status = CASE WHEN share_participants.status = \(unescaped: String(ParticipantStatus.removed.rawValue)) THEN EXCLUDED.status ELSE share_participants.status END,
                    change_xid = EXCLUDED.change_xid, change_seq = EXCLUDED.change_seq
                WHERE share_participants.permission <> EXCLUDED.permission OR share_participants.status = \(unescaped: String(ParticipantStatus.removed.rawValue))
            """, logger: logger)
    }
}

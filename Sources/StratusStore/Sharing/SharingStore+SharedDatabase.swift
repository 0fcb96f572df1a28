import Foundation
import Logging
import PostgresNIO
import StratusCore

// The shared database: what a participant may reach, and the reads that honour it.

/// What a participant may reach in one zone another user shared with them.
public struct ShareAccess: Sendable {
    /// The owner's private database and the zone in it.
    public var ownerDB: DatabaseRef
    public var zone: String
    public var zoneID: ZoneID
    /// The participant.
    public var user: UserID
    /// The roots of the hierarchy shares the participant accepted in this zone, with their
    /// permission; `nil` for a zone-wide share (`zonePermission`).
    public var roots: [String: SharePermission]?
    public var zonePermission: SharePermission

    /// Whether the participant sees a record with this share root.
    public func canSee(_ shareRoot: String?) -> Bool {
        guard let roots else { return true }
        guard let shareRoot else { return false }
        return roots[shareRoot] != nil
    }

    /// Whether the participant may change a record with this share root.
    public func canWrite(_ shareRoot: String?) -> Bool {
        guard let roots else { return zonePermission == .readWrite }
        guard let shareRoot else { return false }
        return roots[shareRoot] == .readWrite
    }

    /// The roots the participant may see, sorted; `nil`: the whole zone.
    public var visibleRoots: [String]? { roots.map { $0.keys.sorted() } }
    /// Whether any of the participant's shares here lets them write.
    public var mayWrite: Bool { roots.map { $0.values.contains(.readWrite) } ?? (zonePermission == .readWrite) }
}

extension SharingStore {
    /// The access `user` has to zone `zone` of `owner`'s private database through the shares
    /// they accepted; `nil` when they have none (or the zone does not exist).
    public func shareAccess(containerID: ContainerID, environment: ContainerEnvironment, user: UserID, owner: UserID,
                            zone: String) async throws -> ShareAccess? {
        // The shared lookup's statement with no names: its access rows alone.
        try await sharedLookup(containerID: containerID, environment: environment, user: user, owner: owner, zone: zone, names: [])?.0
    }

    static func access(_ rows: [PostgresRow], skipping: Int = 0, containerID: ContainerID, environment: ContainerEnvironment, user: UserID, owner: UserID,
                       zone: String) throws -> ShareAccess? {
        guard !rows.isEmpty else { return nil }
        var zoneID: ZoneID = 0
        var roots: [String: SharePermission]? = [:]
        var zonePermission = SharePermission.none
        for row in rows {
            var reader = RowReader(row)
            for _ in 0..<skipping { try reader.skip() }
            let id = try reader.next(ZoneID.self), root = try reader.next(String?.self), code = try reader.next(Int16.self)
            zoneID = id
            let permission = SharePermission(rawValue: code) ?? .readOnly
            if let root {
                if roots != nil, roots![root] != .readWrite { roots![root] = permission }
            } else {
                roots = nil
                if zonePermission != .readWrite { zonePermission = permission }
            }
        }
        return ShareAccess(ownerDB: DatabaseRef(containerID: containerID, environment: environment, scope: .private, owner: owner),
                           zone: zone, zoneID: zoneID, user: user, roots: roots, zonePermission: zonePermission)
    }

    /// The zones shared with `user` that they accepted, as (owner, zone name), sorted.
    public func sharedZones(containerID: ContainerID, environment: ContainerEnvironment, user: UserID) async throws -> [(owner: UserID, zone: String)] {
        try await database.withConnection { connection in
            let rows = try await connection.rows("""
                SELECT DISTINCT z.owner, z.zone_name FROM share_participants p
                JOIN shares s ON s.container_id = p.container_id AND s.zone_id = p.zone_id AND s.share_name = p.share_name AND NOT s.deleted
                JOIN zones z ON z.container_id = s.container_id AND z.zone_id = s.zone_id AND NOT z.deleted
                WHERE p.container_id = \(containerID) AND p.user_record_name = \(user) AND p.status = \(ParticipantStatus.accepted.rawValue)
                  AND z.environment = \(environment.code)
                ORDER BY z.owner, z.zone_name
                """, logger: logger)
            return try rows.map { try $0.decode((String, String).self) }.map { (owner: UserID($0.0), zone: $0.1) }
        }
    }

    /// `records/lookup` in the shared database, in one statement: the access `user` has to
    /// `owner`'s zone (`nil`: none) and the live records among `names` they may see. Those they
    /// may not see are absent, exactly like records that do not exist.
    public func sharedLookup(containerID: ContainerID, environment: ContainerEnvironment, user: UserID, owner: UserID, zone: String,
                             names: [String]) async throws -> (ShareAccess, [String: Record])? {
        let (sql, binds) = Self.sharedLookupStatement(containerID: containerID, environment: environment, user: user, owner: owner,
                                                      zone: zone, names: names)
        let read = DynamicRead(sql: sql, binds: binds)
        let answer: DynamicRead.Rows
        if database.held == nil {
            answer = try await store.dynamicReads.answer(read)
        } else {
            answer = try await database.withConnection { connection in try await DynamicRead.run([read], on: connection, logger: logger)[0] }
        }
        let rows = answer.rows
        guard let access = try Self.access(rows, skipping: answer.skipping, containerID: containerID, environment: environment, user: user,
                                           owner: owner, zone: zone) else {
            return nil
        }
        var found: [String: Record] = [:]
        for row in rows {
            var reader = RowReader(row)
            for _ in 0..<(3 + answer.skipping) { try reader.skip() }
            guard try !reader.peekIsNull() else { continue }
            var record = try RecordStore.storedRecord(&reader)
            record.shareRoot = try reader.next(String?.self)
            if !record.deleted, access.canSee(record.shareRoot) { found[record.recordName] = record }
        }
        return (access, found)
    }

    /// The statement of `sharedLookup`: the participant's rows of the zone's live shares, each
    /// joined to the named live records (a LATERAL subquery kept apart by `OFFSET 0`, probing the
    /// primary key per name; tombstones left to the caller, as `Prepared.Lookup` does). One name
    /// is bound as a scalar, so concurrent lookups of one record share statements
    /// (`dynamicReads`); several are an array read through a sub-select.
    static func sharedLookupStatement(containerID: ContainerID, environment: ContainerEnvironment, user: UserID, owner: UserID, zone: String,
                                      names: [String]) -> (sql: String, binds: Prepared.Binds) {
        var binds = Prepared.Binds()
        let container = binds.bind(containerID)
        let sql = """
            SELECT a.zone_id, a.root_name, a.permission, r.* FROM (
                SELECT z.zone_id, s.root_name, p.permission FROM zones z
                JOIN shares s ON s.container_id = z.container_id AND s.zone_id = z.zone_id AND NOT s.deleted
                JOIN share_participants p ON p.container_id = s.container_id AND p.zone_id = s.zone_id AND p.share_name = s.share_name
                WHERE z.container_id = \(container) AND z.environment = \(binds.bind(environment.code))
                  AND z.database_scope = \(binds.bind(DatabaseScope.private.code)) AND z.owner = \(binds.bind(owner))
                  AND z.zone_name = \(binds.bind(zone)) AND NOT z.deleted
                  AND p.user_record_name = \(binds.bind(user)) AND p.status = \(binds.bind(ParticipantStatus.accepted.rawValue))
            ) a LEFT JOIN LATERAL (
                SELECT \(RecordStore.recordColumns), share_root FROM records
                WHERE container_id = \(container) AND zone_id = a.zone_id AND \(names.count == 1 ? "record_name = \(binds.bind(names[0]))" : "record_name = ANY((SELECT \(binds.bind(names))::text[])::text[])")
                OFFSET 0
            ) r ON true
            """
        return (sql, binds)
    }

    /// Changes to a shared zone after `cursor`, as its participant may see them: the records of
    /// their hierarchies that changed (tombstones included), those that entered one of them, and
    /// a tombstone for each that left (`share_moves`). A zone-wide share sees the zone's feed.
    public func sharedZoneChanges(_ access: ShareAccess, after cursor: FeedCursor, limit: Int,
                                  recordTypes: Set<String>?) async throws -> ChangePage<Record> {
        guard let roots = access.visibleRoots else {
            guard let (_, page) = try await store.zoneChanges(access.ownerDB, zoneID: access.zoneID, zone: access.zone, after: cursor, limit: limit,
                                                        recordTypes: recordTypes) else { throw RecordStore.zoneNotFound(access.zone) }
            return page
        }
        return try await database.withConnection { connection in
            var binds = Prepared.Binds()
            let container = binds.bind(access.ownerDB.containerID)
            let zone = binds.bind(access.zoneID)
            let visible = binds.bind(roots)
            var typeCondition = ""
            if let recordTypes { typeCondition = " AND record_type = ANY(\(binds.bind(Array(recordTypes).sorted()))::text[])" }
            let columns = "record_name, record_type, tag_seq, fields, created_at, created_by, modified_at, modified_by, deleted, parent, share_name, short_guid"
            let source = """
                FROM (
                    SELECT change_xid, change_seq, record_name, record_type, change_seq AS tag_seq, fields, created_at, created_by, modified_at,
                           modified_by, deleted, parent, share_name, short_guid
                    FROM records WHERE container_id = \(container) AND zone_id = \(zone) AND share_root = ANY(\(visible)::text[])
                    UNION ALL
                    SELECT m.change_xid, m.change_seq, m.record_name, COALESCE(r.record_type, ''), COALESCE(r.change_seq, 0), COALESCE(r.fields, '{}'),
                           COALESCE(r.created_at, 0), COALESCE(r.created_by, ''), COALESCE(r.modified_at, 0), COALESCE(r.modified_by, ''),
                           r.record_name IS NULL, r.parent, r.share_name, r.short_guid
                    FROM share_moves m
                    LEFT JOIN records r ON r.container_id = \(container) AND r.zone_id = m.zone_id AND r.record_name = m.record_name
                         AND NOT r.deleted AND r.share_root = ANY(\(visible)::text[])
                    WHERE m.container_id = \(container) AND m.zone_id = \(zone) AND m.share_root = ANY(\(visible)::text[])
                      AND m.entered = (r.record_name IS NOT NULL)
                ) f WHERE true\(typeCondition)
                """
            guard var (_, page) = try await store.readFeed(container: access.ownerDB.containerID, source: source, columns: columns, binds: binds, after: cursor, limit: limit,
                                                     on: connection, decode: RecordStore.storedRecord) else { throw RecordStore.zoneNotFound(access.zone) }
            // A record that entered the share in the same write that saved it has two feed rows
            // (the record's and the move's), both read as it is now: it is listed once, last.
            var seen: Set<String> = []
            page.items = page.items.reversed().filter { seen.insert($0.recordName).inserted }.reversed()
            return page
        }
    }

    /// A zone in a participant's shared database feed.
    public struct SharedZoneChange: Sendable {
        public var owner: UserID
        public var zone: String
        /// No longer shared with them (removed, share or zone deleted).
        public var deleted: Bool
    }

    /// `changes/database` of `user`'s shared database: the zones shared with them whose records
    /// or shares changed after `cursor`, and those no longer shared with them (deleted). Every
    /// table in it is held to the container by the value itself (not only through a join), as
    /// Citus needs to send it to one worker.
    public func sharedDatabaseChanges(containerID: ContainerID, environment: ContainerEnvironment, user: UserID, after cursor: FeedCursor,
                                      limit: Int) async throws -> ChangePage<SharedZoneChange> {
        try await database.withConnection { connection in
            var binds = Prepared.Binds()
            let container = binds.bind(containerID)
            let person = binds.bind(user)
            let accepted = ParticipantStatus.accepted.rawValue
            let source = """
                FROM (
                    SELECT CASE WHEN (p.change_xid, p.change_seq) > (z.change_xid, z.change_seq) THEN p.change_xid ELSE z.change_xid END AS change_xid,
                           CASE WHEN (p.change_xid, p.change_seq) > (z.change_xid, z.change_seq) THEN p.change_seq ELSE z.change_seq END AS change_seq,
                           z.owner, z.zone_name,
                           NOT z.deleted AND EXISTS (
                               SELECT 1 FROM share_participants p2 JOIN shares s2 ON s2.container_id = p2.container_id AND s2.zone_id = p2.zone_id
                                    AND s2.share_name = p2.share_name AND NOT s2.deleted
                               WHERE p2.container_id = \(container) AND p2.zone_id = p.zone_id AND p2.user_record_name = p.user_record_name
                                 AND p2.status = \(binds.bind(accepted))) AS live
                    FROM share_participants p
                    JOIN zones z ON z.container_id = p.container_id AND z.zone_id = p.zone_id
                    WHERE p.container_id = \(container) AND z.container_id = \(container) AND p.user_record_name = \(person) AND p.status <> \(binds.bind(ParticipantStatus.invited.rawValue))
                      AND z.environment = \(binds.bind(environment.code))
                ) f WHERE true
                """
            let page = try await store.readFeed(container: containerID, source: source, columns: "owner, zone_name, live", binds: binds, after: cursor, limit: limit,
                                          on: connection) { reader in
                SharedZoneChange(owner: try reader.next(UserID.self), zone: try reader.next(String.self), deleted: !(try reader.next(Bool.self)))
            }!.page
            // One entry per zone, the last word on it (a zone shared twice, one share gone, is still shared).
            var seen: [String: Int] = [:]
            var items: [SharedZoneChange] = []
            for item in page.items {
                let key = item.owner.rawValue + "\u{0}" + item.zone
                if let index = seen[key] {
                    items[index].deleted = items[index].deleted && item.deleted
                } else {
                    seen[key] = items.count
                    items.append(item)
                }
            }
            return ChangePage(items: items, cursor: page.cursor, moreComing: page.moreComing)
        }
    }
}

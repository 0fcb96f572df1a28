import Foundation
import Logging
import PostgresNIO
import StratusCore

// Shares as stored, and reading them. Writing them: ShareWrites.swift;
// the shared database: SharingStore+SharedDatabase.swift.

/// A participant of a share as stored (the owner is not one).
public struct ParticipantInfo: Sendable, Equatable {
    public var participantID: String
    public var userRecordName: UserID?
    public var email: String?
    public var permission: SharePermission
    public var status: ParticipantStatus
    public var type: ParticipantType
}

/// A share as stored: its row and its participants.
public struct ShareInfo: Sendable {
    public var zoneID: ZoneID
    public var zoneName: String
    public var owner: UserID
    public var shareName: String
    /// `nil`: a zone-wide share.
    public var rootName: String?
    public var shortGUID: String
    public var publicPermission: SharePermission
    public var deleted: Bool
    public var participants: [ParticipantInfo]
}

/// Shares and their participants, and the shared database: the zones and records others share
/// with a user (`records.sharing`).
public struct SharingStore: Sendable {
    let store: RecordStore
    var database: Database { store.database }
    var logger: Logger { store.logger }
}

extension SharingStore {
    static let shareColumns = "s.zone_id, z.zone_name, z.owner, s.share_name, s.root_name, s.short_guid, s.public_permission, s.deleted OR z.deleted"

    /// Shares (with participants) from rows of `shareColumns`.
    func shares(_ rows: [PostgresRow], containerID: ContainerID, on connection: PostgresConnection) async throws -> [ShareInfo] {
        var shares: [ShareInfo] = []
        for row in rows {
            let (zoneID, zoneName, owner, name, root, guid, permission, deleted) =
                try row.decode((ZoneID, String, String, String, String?, String, Int16, Bool).self)
            shares.append(ShareInfo(zoneID: zoneID, zoneName: zoneName, owner: UserID(owner), shareName: name, rootName: root, shortGUID: guid,
                                    publicPermission: SharePermission(rawValue: permission) ?? .none, deleted: deleted, participants: []))
        }
        guard !shares.isEmpty else { return [] }
        let participantRows = try await connection.rows("""
            SELECT zone_id, share_name, participant_id, user_record_name, email, permission, status, kind FROM share_participants
            WHERE container_id = \(containerID) AND (zone_id, share_name) IN (SELECT * FROM unnest(\(shares.map(\.zoneID))::int8[], \(shares.map(\.shareName))::text[]))
            ORDER BY participant_id
            """, logger: logger)
        for row in participantRows {
            let (zoneID, share, id, user, email, permission, status, kind) =
                try row.decode((ZoneID, String, String, String?, String?, Int16, Int16, Int16).self)
            guard let index = shares.firstIndex(where: { $0.zoneID == zoneID && $0.shareName == share }) else { continue }
            shares[index].participants.append(ParticipantInfo(
                participantID: id, userRecordName: user.map(UserID.init(rawValue:)), email: email, permission: SharePermission(rawValue: permission) ?? .readOnly,
                status: ParticipantStatus(rawValue: status) ?? .invited, type: ParticipantType(rawValue: kind) ?? .user))
        }
        return shares
    }

    /// The live shares named `names` in a zone of `db`, by name.
    public func shares(_ db: DatabaseRef, zone: String, names: [String]) async throws -> [String: ShareInfo] {
        try await database.withConnection { connection in
            let rows = try await connection.rows("""
                SELECT \(unescaped: Self.shareColumns) FROM zones z JOIN shares s ON s.container_id = z.container_id AND s.zone_id = z.zone_id
                WHERE z.container_id = \(db.containerID) AND z.environment = \(db.environment.code) AND z.database_scope = \(DatabaseScope.private.code)
                  AND z.owner = \(db.owner) AND z.zone_name = \(zone) AND NOT z.deleted AND s.share_name = ANY(\(names)::text[]) AND NOT s.deleted
                """, logger: logger)
            var found: [String: ShareInfo] = [:]
            for share in try await shares(rows, containerID: db.containerID, on: connection) { found[share.shareName] = share }
            return found
        }
    }

    /// The live share with this short GUID in a container-environment.
    public func share(containerID: ContainerID, environment: ContainerEnvironment, shortGUID: String) async throws -> ShareInfo? {
        try await database.withConnection { connection in
            let rows = try await connection.rows("""
                SELECT \(unescaped: Self.shareColumns) FROM shares s JOIN zones z ON z.container_id = s.container_id AND z.zone_id = s.zone_id
                WHERE s.container_id = \(containerID) AND s.short_guid = \(shortGUID) AND NOT s.deleted
                  AND z.environment = \(environment.code) AND NOT z.deleted
                """, logger: logger)
            return try await shares(rows, containerID: containerID, on: connection).first
        }
    }

    /// Every share of a container-environment (live and deleted), optionally only those `user`
    /// owns or takes part in, for the admin CLI.
    public func allShares(containerID: ContainerID, environment: ContainerEnvironment, user: UserID?) async throws -> [ShareInfo] {
        try await database.withConnection { connection in
            let rows = try await connection.rows("""
                SELECT \(unescaped: Self.shareColumns) FROM shares s JOIN zones z ON z.container_id = s.container_id AND z.zone_id = s.zone_id
                WHERE s.container_id = \(containerID) AND z.environment = \(environment.code)
                  AND (\(user)::text IS NULL OR z.owner = \(user) OR EXISTS (
                      SELECT 1 FROM share_participants p WHERE p.container_id = \(containerID) AND p.zone_id = s.zone_id
                        AND p.share_name = s.share_name AND p.user_record_name = \(user)))
                ORDER BY z.owner, z.zone_name, s.share_name
                """, logger: logger)
            return try await shares(rows, containerID: containerID, on: connection)
        }
    }

    /// The participant `user` is (or may become) in `share`: theirs by name, or an invitation to
    /// their email address nobody has claimed.
    public static func participant(of share: ShareInfo, user: UserID, email: String?) -> ParticipantInfo? {
        if let own = share.participants.first(where: { $0.userRecordName == user }) { return own }
        guard let email = email?.lowercased() else { return nil }
        return share.participants.first { $0.userRecordName == nil && $0.email == email }
    }

    /// `records/accept`: `user` becomes an accepted participant of the share with this short
    /// GUID, as an invited participant (by name or email) or, when the share is open to anyone
    /// with the link, as a public one. Refused for its owner, a removed participant, someone
    /// neither invited nor allowed by the link, and a second acceptance.
    public func accept(containerID: ContainerID, environment: ContainerEnvironment, shortGUID: String, user: UserID, email: String?) async throws -> ShareInfo {
        try await database.transaction { connection in
            let locked = try await connection.rows("""
                SELECT s.zone_id, s.share_name FROM shares s JOIN zones z ON z.container_id = s.container_id AND z.zone_id = s.zone_id
                WHERE s.container_id = \(containerID) AND s.short_guid = \(shortGUID) AND NOT s.deleted
                  AND z.environment = \(environment.code) AND NOT z.deleted
                FOR NO KEY UPDATE OF s
                """, logger: logger)
            guard let row = locked.first else { throw Self.unknownShare(shortGUID) }
            let (zoneID, shareName) = try row.decode((Int64, String).self)
            let rows = try await connection.rows("""
                SELECT \(unescaped: Self.shareColumns) FROM shares s JOIN zones z ON z.container_id = s.container_id AND z.zone_id = s.zone_id
                WHERE s.container_id = \(containerID) AND s.zone_id = \(zoneID) AND s.share_name = \(shareName)
                """, logger: logger)
            guard let share = try await shares(rows, containerID: containerID, on: connection).first else { throw Self.unknownShare(shortGUID) }
            guard share.owner != user else {
                throw StratusError.badRequest("you own this share; it is already in your private database")
            }
            if let participant = Self.participant(of: share, user: user, email: email) {
                switch participant.status {
                case .accepted:
                    throw StratusError.badRequest("you have already accepted this share; its zone is in your shared database")
                case .removed:
                    throw StratusError(.accessDenied, "you were removed from this share; ask its owner to invite you again")
                case .invited:
                    try await connection.statement("""
                        UPDATE share_participants SET status = \(ParticipantStatus.accepted.rawValue), user_record_name = \(user),
                               change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq()
                        WHERE container_id = \(containerID) AND zone_id = \(zoneID) AND share_name = \(shareName)
                          AND participant_id = \(participant.participantID)
                        """, logger: logger)
                }
            } else if share.publicPermission != .none {
                try await connection.statement("""
                    INSERT INTO share_participants (container_id, zone_id, share_name, participant_id, user_record_name, permission, status, kind,
                                                    change_xid, change_seq)
                    VALUES (\(containerID), \(zoneID), \(shareName), \(user), \(user), \(share.publicPermission.rawValue),
                            \(ParticipantStatus.accepted.rawValue), \(ParticipantType.publicUser.rawValue),
                            pg_current_xact_id()::text::bigint, stratus_change_seq())
                    """, logger: logger)
            } else {
                throw Self.notInvited
            }
            let updated = try await connection.rows("""
                SELECT \(unescaped: Self.shareColumns) FROM shares s JOIN zones z ON z.container_id = s.container_id AND z.zone_id = s.zone_id
                WHERE s.container_id = \(containerID) AND s.zone_id = \(zoneID) AND s.share_name = \(shareName)
                """, logger: logger)
            return try await shares(updated, containerID: containerID, on: connection)[0]
        }
    }

    public static func unknownShare(_ guid: String) -> StratusError {
        StratusError(.notFound, "no share has the short GUID '\(Names.printable(guid))'; it may have been deleted")
    }

    public static let notInvited = StratusError(.accessDenied, "this share is open only to the people its owner invited; ask the owner to invite you")
}

import Foundation
import Logging
import PostgresNIO
import StratusCore

/// Everything one user owns in one environment (`stratus user export`).
public struct UserData: Sendable {
    /// The user's private zones, each with its live records.
    public var zones: [(name: String, records: [Record])] = []
    /// Public-database records the user created.
    public var publicRecords: [Record] = []
    /// The user's subscriptions.
    public var subscriptions: [SubscriptionListing] = []
    /// Shares of other users' zones the user takes part in: owner, zone, share, permission, status.
    public var participations: [(owner: UserID, zone: String, share: String, permission: Int16, status: Int16)] = []
}

/// What erasing a user removed.
public struct UserErasure: Sendable {
    public var zones = 0
    public var records = 0
    public var publicRecords = 0
    public var participations = 0
    public var subscriptions = 0

    public init() {}
}

/// Everything a user owns, for export, and its erasure (`records.users`).
public struct UserDataStore: Sendable {
    let store: RecordStore
    var database: Database { store.database }
    var logger: Logger { store.logger }
}

extension UserDataStore {
    /// The user's data in one environment, read in one snapshot.
    public func userData(containerID: ContainerID, environment: ContainerEnvironment, user: UserID) async throws -> UserData {
        try await database.transaction { connection in
            try await connection.statement("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY", logger: logger)
            var data = UserData()
            var byZone: [String: [Record]] = [:]
            var order: [String] = []
            for zone in try await connection.rows("""
                SELECT zone_name FROM zones WHERE container_id = \(containerID) AND environment = \(environment.code)
                  AND database_scope = \(DatabaseScope.private.code) AND owner = \(user) AND NOT deleted ORDER BY zone_name
                """, logger: logger) {
                let name = try zone.decode(String.self)
                order.append(name)
                byZone[name] = []
            }
            for row in try await connection.rows(PostgresQuery(unsafeSQL: """
                SELECT z.database_scope, z.zone_name, \(RecordStore.recordColumns(of: "r"))
                FROM records r JOIN zones z ON z.container_id = r.container_id AND z.zone_id = r.zone_id
                WHERE r.container_id = $1 AND z.environment = $2 AND NOT r.deleted AND NOT z.deleted
                  AND ((z.database_scope = $3 AND z.owner = $4) OR (z.database_scope = $5 AND r.created_by = $4))
                ORDER BY z.zone_name, r.record_name
                """, binds: RecordStore.binds(containerID, environment.code, DatabaseScope.private.code, user, DatabaseScope.public.code)), logger: logger) {
                var reader = RowReader(row)
                let scope = try reader.next(Int16.self)
                let zone = try reader.next(String.self)
                let record = try RecordStore.storedRecord(&reader)
                if scope == DatabaseScope.public.code { data.publicRecords.append(record) } else { byZone[zone, default: []].append(record) }
            }
            data.zones = order.map { ($0, byZone[$0] ?? []) }
            for row in try await connection.rows("""
                SELECT z.owner, z.zone_name, p.share_name, p.permission, p.status
                FROM share_participants p JOIN zones z ON z.container_id = p.container_id AND z.zone_id = p.zone_id
                WHERE p.container_id = \(containerID) AND z.environment = \(environment.code) AND p.user_record_name = \(user) AND NOT z.deleted
                ORDER BY 1, 2, 3
                """, logger: logger) {
                let (owner, zone, share, permission, status) = try row.decode((String, String, String, Int16, Int16).self)
                data.participations.append((UserID(owner), zone, share, permission, status))
            }
            data.subscriptions = try await store.subscriptions.allSubscriptions(containerID: containerID, environment: environment, owner: user)
            return data
        }
    }

    /// The names of the user's live private zones in one environment.
    public func privateZoneNames(containerID: ContainerID, environment: ContainerEnvironment, user: UserID) async throws -> [String] {
        try await database.withConnection { connection in
            try await connection.rows("""
                SELECT zone_name FROM zones WHERE container_id = \(containerID) AND environment = \(environment.code)
                  AND database_scope = \(DatabaseScope.private.code) AND owner = \(user) AND NOT deleted ORDER BY zone_name
                """, logger: logger).map { try $0.decode(String.self) }
        }
    }

    /// The names of the public records the user created and that are live, in one environment.
    public func publicRecordNames(containerID: ContainerID, environment: ContainerEnvironment, user: UserID) async throws -> [String] {
        try await database.withConnection { connection in
            try await connection.rows("""
                SELECT r.record_name FROM records r JOIN zones z ON z.container_id = r.container_id AND z.zone_id = r.zone_id
                WHERE r.container_id = \(containerID) AND z.environment = \(environment.code) AND z.database_scope = \(DatabaseScope.public.code)
                  AND r.created_by = \(user) AND NOT r.deleted ORDER BY 1
                """, logger: logger).map { try $0.decode(String.self) }
        }
    }

    /// Removes what is left of a user once their zones and public records are gone: share
    /// participations, subscriptions, web courier tokens and their queues, role memberships, their
    /// name and address in the request log; ends their sessions and deletes the account. One transaction, with its audit entry; other
    /// server processes forget the user's sessions and subscriptions when it commits.
    public func eraseAccount(containerID: ContainerID, user: UserID, erasure: UserErasure, by actor: AuditActor,
                             endSessions: @Sendable (PostgresConnection) async throws -> Int) async throws -> UserErasure {
        try await database.transaction { connection in
            var result = erasure
            result.participations = try await connection.rows("""
                DELETE FROM share_participants WHERE container_id = \(containerID) AND user_record_name = \(user) RETURNING 1
                """, logger: logger).count
            result.subscriptions = try await connection.rows("""
                DELETE FROM subscriptions WHERE container_id = \(containerID) AND owner = \(user) RETURNING 1
                """, logger: logger).count
            try await connection.statement("""
                DELETE FROM notifications WHERE container_id = \(containerID)
                  AND token_hash IN (SELECT token_hash FROM courier_tokens WHERE container_id = \(containerID) AND owner = \(user))
                """, logger: logger)
            try await connection.statement("DELETE FROM courier_tokens WHERE container_id = \(containerID) AND owner = \(user)", logger: logger)
            try await connection.statement("DELETE FROM role_members WHERE container_id = \(containerID) AND user_record_name = \(user)", logger: logger)
            try await AdminStore(database: database, logger: logger).metering.forgetInRequestLog(containerID: containerID, user: user, on: connection)
            let ended = try await endSessions(connection)
            try await connection.statement("DELETE FROM users WHERE container_id = \(containerID) AND user_record_name = \(user)", logger: logger)
            for environment in ContainerEnvironment.allCases {
                try await Invalidations.publish(.subscriptions(containerID: containerID, environment: environment), on: connection, logger: logger)
                try await Invalidations.publish(.courierTokens(containerID: containerID, environment: environment, owner: user), on: connection, logger: logger)
                try await Invalidations.publish(.roles(containerID: containerID, environment: environment), on: connection, logger: logger)
            }
            let detail = "\(result.zones) private zone(s) with \(result.records) record(s), \(result.publicRecords) public record(s), "
                + "\(result.participations) share participation(s), \(result.subscriptions) subscription(s), \(ended) session(s) ended; account deleted"
            try await AuditEntry(containerID: containerID, actor: actor, action: "user.erase", target: user.rawValue, detail: detail)
                .write(on: connection, logger: logger)
            return result
        }
    }
}

import Foundation
import Logging
import PostgresNIO
import StratusCore

/// A stored subscription with where it lives, for the operator's listing.
public struct SubscriptionListing: Sendable {
    public var scope: DatabaseScope
    public var owner: UserID
    public var subscription: Subscription
    public var createdAt: Date
}

/// Subscriptions, the notifications they queue, and the web courier's tokens (`records.subscriptions`).
public struct SubscriptionStore: Sendable {
    let store: RecordStore
    var database: Database { store.database }
    var logger: Logger { store.logger }
}

extension SubscriptionStore {
    /// Saves a subscription in `db` (the subscriber's view of a database: `owner` is the
    /// subscriber). `create`: `EXISTS` when the ID is taken; otherwise an update, `NOT_FOUND` when
    /// it is not. A user has at most ``Subscription/maximumPerDatabase`` per database.
    public func saveSubscription(_ db: DatabaseRef, _ subscription: Subscription, create: Bool) async throws {
        let definition = Self.definition(of: subscription)
        try await database.transaction { connection in
            if create {
                // One subscriber's creates in a database take turns, so the count below is exact.
                try await connection.statement("""
                    SELECT pg_advisory_xact_lock(hashtextextended(\(db.containerID)::text || '/' || \(db.owner) || '/subscriptions', 0))
                    """, logger: logger)
                let count = try await connection.rows("""
                    SELECT count(*)::bigint FROM subscriptions
                    WHERE container_id = \(db.containerID) AND environment = \(db.environment.code) AND owner = \(db.owner)
                      AND scope = \(db.scope.code)
                    """, logger: logger)
                if try count[0].decode(Int64.self) >= Int64(Subscription.maximumPerDatabase) {
                    throw StratusError(.quotaExceeded, "you have \(Subscription.maximumPerDatabase) subscriptions in this database, the most allowed; delete one first")
                }
                let inserted = try await connection.rows("""
                    INSERT INTO subscriptions (container_id, environment, scope, owner, subscription_id, kind,
                                               zone_name, zone_owner, fires_on, fires_once, definition)
                    VALUES (\(db.containerID), \(db.environment.code), \(db.scope.code), \(db.owner), \(subscription.id),
                            \(subscription.kind.code), \(subscription.zoneName), \(subscription.zoneOwner),
                            \(subscription.firesOn.rawValue), \(subscription.firesOnce), \(definition))
                    ON CONFLICT DO NOTHING RETURNING 1
                    """, logger: logger)
                if inserted.isEmpty {
                    throw StratusError(.exists, "a subscription with ID '\(Names.printable(subscription.id))' already exists in this database; update it, or choose another ID")
                }
            } else {
                let updated = try await connection.rows("""
                    UPDATE subscriptions SET kind = \(subscription.kind.code),
                        zone_name = \(subscription.zoneName), zone_owner = \(subscription.zoneOwner), fires_on = \(subscription.firesOn.rawValue),
                        fires_once = \(subscription.firesOnce), definition = \(definition), modified_at = now()
                    WHERE container_id = \(db.containerID) AND environment = \(db.environment.code) AND owner = \(db.owner)
                      AND scope = \(db.scope.code) AND subscription_id = \(subscription.id)
                    RETURNING 1
                    """, logger: logger)
                if updated.isEmpty { throw Self.subscriptionNotFound(subscription.id) }
            }
            try await Invalidations.publish(.subscriptions(containerID: db.containerID, environment: db.environment), on: connection, logger: logger)
        }
    }

    /// Deletes a subscription; `NOT_FOUND` when `db` has none with that ID.
    public func deleteSubscription(_ db: DatabaseRef, id: String) async throws {
        try await deleteSubscriptions(db, ids: [id])
    }

    /// Deletes subscriptions of `db`; `NOT_FOUND` when none of `ids` exists.
    public func deleteSubscriptions(_ db: DatabaseRef, ids: [String]) async throws {
        try await database.transaction { connection in
            let deleted = try await connection.rows("""
                DELETE FROM subscriptions
                WHERE container_id = \(db.containerID) AND environment = \(db.environment.code) AND owner = \(db.owner)
                  AND scope = \(db.scope.code) AND subscription_id = ANY(\(ids))
                RETURNING 1
                """, logger: logger)
            if deleted.isEmpty { throw Self.subscriptionNotFound(ids.first ?? "") }
            try await Invalidations.publish(.subscriptions(containerID: db.containerID, environment: db.environment), on: connection, logger: logger)
        }
    }

    /// The subscriber's subscriptions in `db` by ID, oldest first; all of them when `ids` is nil.
    public func list(_ db: DatabaseRef, ids: [String]? = nil) async throws -> [Subscription] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT scope, owner, subscription_id, kind, zone_name, zone_owner, fires_on, fires_once, definition, created_at
                FROM subscriptions
                WHERE container_id = \(db.containerID) AND environment = \(db.environment.code) AND owner = \(db.owner)
                  AND scope = \(db.scope.code) AND (\(ids == nil) OR subscription_id = ANY(\(ids ?? [])))
                ORDER BY created_at, subscription_id
                """, logger: logger)
        }
        return try rows.map { try Self.listing($0).subscription }
    }

    /// Every subscription of a container-environment, or of one user there (the operator's view).
    public func allSubscriptions(containerID: ContainerID, environment: ContainerEnvironment, owner: UserID?) async throws -> [SubscriptionListing] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT scope, owner, subscription_id, kind, zone_name, zone_owner, fires_on, fires_once, definition, created_at
                FROM subscriptions
                WHERE container_id = \(containerID) AND environment = \(environment.code) AND (\(owner == nil) OR owner = \(owner ?? .nobody))
                ORDER BY owner, scope, created_at, subscription_id
                """, logger: logger)
        }
        return try rows.map(Self.listing)
    }

    public static func subscriptionNotFound(_ id: String) -> StratusError {
        StratusError(.notFound, "no subscription with ID '\(Names.printable(id))' in this database")
    }

    /// The JSON text stored in `definition`: the client's query and notification-info dictionaries.
    static func definition(of subscription: Subscription) -> String {
        var members: [String: JSON] = [:]
        if let query = subscription.queryJSON { members["query"] = query }
        if let info = subscription.notificationInfo { members["notificationInfo"] = info }
        return JSONWriter.string(.object(members))
    }

    static func listing(_ row: PostgresRow) throws -> SubscriptionListing {
        var reader = RowReader(row)
        let scopeCode = try reader.next(Int16.self), owner = try reader.next(String.self), id = try reader.next(String.self)
        let kindCode = try reader.next(Int16.self), zoneName = try reader.next(String?.self), zoneOwner = try reader.next(UserID?.self)
        let firesOn = try reader.next(Int16.self), firesOnce = try reader.next(Bool.self), text = try reader.next(String.self)
        let createdAt = try reader.next(Date.self)
        guard let kind = Subscription.Kind(code: kindCode),
              let scope = [DatabaseScope.public, .private, .shared].first(where: { $0.code == scopeCode }) else {
            throw StratusError(.internalError, "a stored subscription has an unknown kind or scope")
        }
        let definition = (try? JSONParser.parse(text)) ?? .object([:])
        let subscription = Subscription(id: id, kind: kind, zoneName: zoneName, zoneOwner: zoneOwner, queryJSON: definition["query"],
                                        firesOn: Subscription.Firing(rawValue: firesOn), firesOnce: firesOnce,
                                        notificationInfo: definition["notificationInfo"])
        return SubscriptionListing(scope: scope, owner: UserID(owner), subscription: subscription, createdAt: createdAt)
    }
}

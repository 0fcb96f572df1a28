import Foundation
import Logging
import PostgresNIO
import StratusCore

/// A device a user's subscriptions push to (`tokens/register`).
public struct PushDevice: Sendable, Equatable {
    public enum Address: Sendable, Equatable {
        /// An APNs device token (lowercase hex) and the APNs environment the app registered in.
        case apns(token: String, environment: ContainerEnvironment)
        /// A Web Push subscription: the push service's endpoint and the browser's keys (base64url).
        case webPush(endpoint: String, p256dh: String, auth: String)
    }

    public var address: Address
    public var user: UserID
    public var registeredAt: Date

    public init(address: Address, user: UserID, registeredAt: Date = Date()) {
        self.address = address
        self.user = user
        self.registeredAt = registeredAt
    }

    var kind: Int16 {
        if case .apns = address { return 1 }
        return 2
    }

    /// The token or endpoint: the device's key within its kind.
    var key: String {
        switch address {
        case .apns(let token, _): token
        case .webPush(let endpoint, _, _): endpoint
        }
    }
}

extension SubscriptionStore {
    /// Registers `device` for its user in a container environment: again is the same, and a device
    /// another user had registered passes to this one.
    public func registerPushDevice(_ device: PushDevice, containerID: ContainerID, environment: ContainerEnvironment) async throws {
        var apnsEnvironment: Int16?
        var keys: (String?, String?) = (nil, nil)
        switch device.address {
        case .apns(_, let apns): apnsEnvironment = apns.code
        case .webPush(_, let p256dh, let auth): keys = (p256dh, auth)
        }
        // Every server process forgets the user's devices it knew (the courier tokens' event: the
        // user's delivery addresses changed).
        let changed = Invalidations.Event.courierTokens(containerID: containerID, environment: environment, owner: device.user)
        _ = try await database.transaction { connection in
            try await Invalidations.publish(changed, on: connection, logger: logger)
            try await connection.statement("""
                INSERT INTO push_devices (container_id, environment, kind, address, user_record_name, apns_environment, p256dh, auth, registered_at)
                VALUES (\(containerID), \(environment.code), \(device.kind), \(device.key), \(device.user), \(apnsEnvironment)::int2, \(keys.0)::text, \(keys.1)::text,
                        \(Date()))
                ON CONFLICT (container_id, environment, kind, address) DO UPDATE
                SET user_record_name = EXCLUDED.user_record_name, apns_environment = EXCLUDED.apns_environment,
                    p256dh = EXCLUDED.p256dh, auth = EXCLUDED.auth, registered_at = EXCLUDED.registered_at
                """, logger: logger)
        }
    }

    /// The devices `user` registered in a container environment, oldest first.
    public func pushDevices(containerID: ContainerID, environment: ContainerEnvironment, user: UserID) async throws -> [PushDevice] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT kind, address, apns_environment, p256dh, auth, registered_at FROM push_devices
                WHERE container_id = \(containerID) AND environment = \(environment.code) AND user_record_name = \(user)
                ORDER BY registered_at, address
                """, logger: logger)
        }
        return try rows.map { row in
            let (kind, address, apns, p256dh, auth, at) = try row.decode((Int16, String, Int16?, String?, String?, Date).self)
            let where_: PushDevice.Address = kind == 1
                ? .apns(token: address, environment: apns == ContainerEnvironment.production.code ? .production : .development)
                : .webPush(endpoint: address, p256dh: p256dh ?? "", auth: auth ?? "")
            return PushDevice(address: where_, user: user, registeredAt: at)
        }
    }

    /// Forgets every device of `user` in the container, with the pushes waiting for them (inside
    /// the caller's transaction): their sessions all ended, so nothing of theirs is pushed to any
    /// device until they register again.
    @discardableResult
    public static func forgetPushDevices(containerID: ContainerID, user: UserID, on connection: PostgresConnection, logger: Logger) async throws -> Int {
        let addresses = try await connection.rows("""
            DELETE FROM push_devices WHERE container_id = \(containerID) AND user_record_name = \(user) RETURNING address
            """, logger: logger).map { try $0.decode(String.self) }
        if !addresses.isEmpty {
            try await connection.statement("""
                DELETE FROM push_outbox WHERE container_id = \(containerID) AND address = ANY(\(addresses)::text[])
                """, logger: logger)
        }
        return addresses.count
    }
}

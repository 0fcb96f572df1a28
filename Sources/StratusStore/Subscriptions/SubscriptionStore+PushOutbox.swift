import Foundation
import Logging
import PostgresNIO
import StratusCore

/// A container environment's APNs credential, as stored: the `.p8` key sealed (`sealedKey`).
public struct APNsSetting: Sendable, Equatable {
    public var keyID: String
    public var teamID: String
    /// The app's bundle id (`apns-topic`).
    public var topic: String
    public var sealedKey: [UInt8]
    public var setAt: Date
    public var setBy: String

    public init(keyID: String, teamID: String, topic: String, sealedKey: [UInt8], setAt: Date = Date(), setBy: String) {
        self.keyID = keyID
        self.teamID = teamID
        self.topic = topic
        self.sealedKey = sealedKey
        self.setAt = setAt
        self.setBy = setBy
    }
}

/// One push to one device, as queued in `push_outbox`.
public struct OutgoingPush: Sendable {
    public var containerID: ContainerID
    /// The notification's id (`ck.nid`): APNs' `apns-id`, the same for each device and on every attempt.
    public var pushID: UUID
    public var environment: ContainerEnvironment
    public var address: PushDevice.Address
    public var payload: String
    /// APNs: an alert (priority 10, push type alert) rather than a background push.
    public var alert: Bool
    public var collapseID: String?
    public var createdAt: Date
    /// Attempts made before this one.
    public var attempts: Int

    public init(containerID: ContainerID, pushID: UUID, environment: ContainerEnvironment, address: PushDevice.Address, payload: String,
                alert: Bool, collapseID: String?, createdAt: Date = Date(), attempts: Int = 0) {
        self.containerID = containerID
        self.pushID = pushID
        self.environment = environment
        self.address = address
        self.payload = payload
        self.alert = alert
        self.collapseID = collapseID
        self.createdAt = createdAt
        self.attempts = attempts
    }
}

extension SubscriptionStore {
    static let apnsProvider: Int16 = 1

    /// Sets a container environment's APNs credential (replacing one set before), with its audit entry.
    public func setAPNs(_ setting: APNsSetting, containerID: ContainerID, environment: ContainerEnvironment, audit: AuditEntry) async throws {
        try await database.transaction { connection in
            try await audit.write(on: connection, logger: logger)
            try await connection.statement("""
                INSERT INTO push_settings (container_id, environment, provider, key_id, team_id, topic, sealed_key, set_by, set_at)
                VALUES (\(containerID), \(environment.code), \(Self.apnsProvider), \(setting.keyID), \(setting.teamID), \(setting.topic),
                        \(Data(setting.sealedKey)), \(setting.setBy), \(Date()))
                ON CONFLICT (container_id, environment, provider) DO UPDATE
                SET key_id = EXCLUDED.key_id, team_id = EXCLUDED.team_id, topic = EXCLUDED.topic, sealed_key = EXCLUDED.sealed_key,
                    set_by = EXCLUDED.set_by, set_at = EXCLUDED.set_at
                """, logger: logger)
        }
    }

    /// Removes a container environment's APNs credential; `false` when none was set. Pushes
    /// waiting for its devices go with it.
    public func removeAPNs(containerID: ContainerID, environment: ContainerEnvironment, audit: AuditEntry) async throws -> Bool {
        try await database.transaction { connection in
            let removed = try await connection.rows("""
                DELETE FROM push_settings WHERE container_id = \(containerID) AND environment = \(environment.code) AND provider = \(Self.apnsProvider)
                RETURNING 1
                """, logger: logger)
            try await connection.statement("""
                DELETE FROM push_outbox WHERE container_id = \(containerID) AND environment = \(environment.code) AND kind = 1
                """, logger: logger)
            guard !removed.isEmpty else { return false }
            try await audit.write(on: connection, logger: logger)
            return true
        }
    }

    /// The container's APNs credentials, by environment.
    public func apnsSettings(containerID: ContainerID) async throws -> [ContainerEnvironment: APNsSetting] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT environment, key_id, team_id, topic, sealed_key, set_at, set_by FROM push_settings
                WHERE container_id = \(containerID) AND provider = \(Self.apnsProvider)
                """, logger: logger)
        }
        var settings: [ContainerEnvironment: APNsSetting] = [:]
        for row in rows {
            let (code, keyID, teamID, topic, sealed, at, by) = try row.decode((Int16, String, String, String, Data, Date, String).self)
            settings[code == ContainerEnvironment.production.code ? .production : .development] =
                APNsSetting(keyID: keyID, teamID: teamID, topic: topic, sealedKey: Array(sealed), setAt: at, setBy: by)
        }
        return settings
    }

    /// The devices each of `users` registered in a container environment.
    public func pushDevices(containerID: ContainerID, environment: ContainerEnvironment, users: [UserID]) async throws -> [UserID: [PushDevice]] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT user_record_name, kind, address, apns_environment, p256dh, auth, registered_at FROM push_devices
                WHERE container_id = \(containerID) AND environment = \(environment.code) AND user_record_name = ANY(\(users.map(\.rawValue))::text[])
                """, logger: logger)
        }
        var devices: [UserID: [PushDevice]] = [:]
        for row in rows {
            let (user, kind, address, apns, p256dh, auth, at) = try row.decode((String, Int16, String, Int16?, String?, String?, Date).self)
            let device = PushDevice(address: Self.address(kind: kind, address: address, apns: apns, p256dh: p256dh, auth: auth),
                                    user: UserID(user), registeredAt: at)
            devices[device.user, default: []].append(device)
        }
        return devices
    }

    static func address(kind: Int16, address: String, apns: Int16?, p256dh: String?, auth: String?) -> PushDevice.Address {
        kind == 1
            ? .apns(token: address, environment: apns == ContainerEnvironment.production.code ? .production : .development)
            : .webPush(endpoint: address, p256dh: p256dh ?? "", auth: auth ?? "")
    }

    /// Queues pushes, claimed by the caller for `lease` (it sends them itself; another process
    /// claims them only if it has not settled them by then). Concurrent writes' pushes share
    /// statements (`pushQueueing`).
    public func queuePushes(_ pushes: [OutgoingPush], lease: Duration) async throws {
        guard !pushes.isEmpty else { return }
        try await store.pushQueueing.answer(PushQueueing(pushes: pushes, lease: lease))
    }

    /// One statement queueing pushes, each claimed for its lease.
    static func queuePushes(_ requests: [PushQueueing], on connection: PostgresConnection, logger: Logger) async throws {
        let pushes = requests.flatMap(\.pushes)
        let leases = requests.flatMap { request in request.pushes.map { _ in Double(request.lease.components.seconds) } }
        // Arrays without nulls (0 and '' stand for none).
        var apns: [Int16] = [], p256dh: [String] = [], auth: [String] = []
        for push in pushes {
            switch push.address {
            case .apns(_, let environment): apns.append(environment.code); p256dh.append(""); auth.append("")
            case .webPush(_, let key, let secret): apns.append(0); p256dh.append(key); auth.append(secret)
            }
        }
        _ = try await connection.rows(QueuePushes(containers: pushes.map(\.containerID.rawValue), ids: pushes.map(\.pushID),
                                                  environments: pushes.map(\.environment.code), kinds: pushes.map(\.kind), addresses: pushes.map(\.key),
                                                  apns: apns, p256dh: p256dh, auth: auth, payloads: pushes.map(\.payload), alerts: pushes.map(\.alert),
                                                  collapseIDs: pushes.map { $0.collapseID ?? "" }, leases: leases), logger: logger)
    }

    /// Claims up to `limit` due pushes for `lease`: no other process claims them until it runs out.
    public func claimPushes(limit: Int, lease: Duration) async throws -> [OutgoingPush] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                UPDATE push_outbox o SET due_at = now() + make_interval(secs => \(Double(lease.components.seconds))), attempts = o.attempts + 1
                FROM (SELECT container_id, push_id, address FROM push_outbox WHERE due_at <= now() ORDER BY due_at LIMIT \(limit)
                      FOR UPDATE SKIP LOCKED) d
                WHERE o.container_id = d.container_id AND o.push_id = d.push_id AND o.address = d.address
                RETURNING o.container_id, o.push_id, o.environment, o.kind, o.address, o.apns_environment, o.p256dh, o.auth, o.payload,
                          o.alert, o.collapse_id, o.created_at, o.attempts
                """, logger: logger)
        }
        return try rows.map { row in
            let (c, id, e, kind, address, apns, p256dh, auth, payload, alert, collapse, at, attempts) =
                try row.decode((Int64, UUID, Int16, Int16, String, Int16?, String?, String?, String, Bool, String?, Date, Int32).self)
            return OutgoingPush(containerID: ContainerID(c), pushID: id, environment: e == ContainerEnvironment.production.code ? .production : .development,
                                address: Self.address(kind: kind, address: address, apns: apns, p256dh: p256dh, auth: auth), payload: payload,
                                alert: alert, collapseID: collapse, createdAt: at, attempts: Int(attempts) - 1)
        }
    }

    /// Settles claimed pushes: `done` leave the queue (sent, or refused for good); `retry` are due
    /// again after their delay; `gone` devices are forgotten (the provider said they no longer exist),
    /// with every push waiting for them.
    public func settlePushes(done: [OutgoingPush], retry: [(OutgoingPush, Duration)], gone: [OutgoingPush]) async throws {
        guard !(done.isEmpty && retry.isEmpty && gone.isEmpty) else { return }
        try await database.withConnection { connection in
            if !done.isEmpty {
                _ = try await connection.rows(DeletePushes(containers: done.map(\.containerID.rawValue), ids: done.map(\.pushID),
                                                           addresses: done.map(\.key)), logger: logger)
            }
            if !retry.isEmpty {
                try await connection.statement("""
                    UPDATE push_outbox o SET due_at = now() + make_interval(secs => d.s)
                    FROM unnest(\(retry.map(\.0.containerID.rawValue))::int8[], \(retry.map(\.0.pushID))::uuid[], \(retry.map(\.0.key))::text[],
                                \(retry.map { Double($0.1.components.seconds) + Double($0.1.components.attoseconds) / 1e18 })::float8[]) AS d(c, id, a, s)
                    WHERE o.container_id = d.c AND o.push_id = d.id AND o.address = d.a
                    """, logger: logger)
            }
            for push in gone {
                try await connection.statement("""
                    DELETE FROM push_devices WHERE container_id = \(push.containerID) AND environment = \(push.environment.code)
                      AND kind = \(push.kind) AND address = \(push.key)
                    """, logger: logger)
                try await connection.statement("""
                    DELETE FROM push_outbox WHERE container_id = \(push.containerID) AND address = \(push.key)
                    """, logger: logger)
            }
        }
    }

    /// Pushes waiting to be sent (every container).
    public func pushQueueDepth() async throws -> Int {
        let rows = try await database.withConnection { connection in
            try await connection.rows("SELECT count(*)::int8 FROM push_outbox", logger: logger)
        }
        return Int(try rows.first?.decode(Int64.self) ?? 0)
    }

    /// Pushes waiting per environment of one container, and the oldest one's age in seconds.
    public func pushQueue(containerID: ContainerID) async throws -> [ContainerEnvironment: (count: Int, oldestSeconds: Double)] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT environment, count(*)::int8, extract(epoch FROM now() - min(created_at))::float8 FROM push_outbox
                WHERE container_id = \(containerID) GROUP BY environment
                """, logger: logger)
        }
        var queue: [ContainerEnvironment: (count: Int, oldestSeconds: Double)] = [:]
        for row in rows {
            let (code, count, age) = try row.decode((Int16, Int64, Double).self)
            queue[code == ContainerEnvironment.production.code ? .production : .development] = (Int(count), age)
        }
        return queue
    }

    /// How many devices the container's users registered, per environment and kind (1 APNs, 2 Web Push).
    public func pushDeviceCounts(containerID: ContainerID) async throws -> [ContainerEnvironment: [Int16: Int]] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT environment, kind, count(*)::int8 FROM push_devices WHERE container_id = \(containerID) GROUP BY 1, 2
                """, logger: logger)
        }
        var counts: [ContainerEnvironment: [Int16: Int]] = [:]
        for row in rows {
            let (code, kind, count) = try row.decode((Int16, Int16, Int64).self)
            counts[code == ContainerEnvironment.production.code ? .production : .development, default: [:]][kind] = Int(count)
        }
        return counts
    }
}

/// Pushes one write queues, claimed for `lease` by the process that sends them.
struct PushQueueing: Sendable {
    var pushes: [OutgoingPush]
    var lease: Duration
}

extension OutgoingPush {
    var kind: Int16 { PushDevice(address: address, user: UserID("")).kind }
    var key: String { PushDevice(address: address, user: UserID("")).key }
}

/// Queues pushes, each claimed for its lease. Prepared: a write's answer waits for it, and
/// PostgreSQL planned it anew each time, a third of its cost.
struct QueuePushes: PostgresPreparedStatement {
    static let name = "stratus.QueuePushes"
    static let sql = """
        INSERT INTO push_outbox (container_id, push_id, environment, kind, address, apns_environment, p256dh, auth, payload, alert, collapse_id,
                                 due_at, attempts)
        SELECT c, id, e, k, a, NULLIF(ae, 0), NULLIF(pk, ''), NULLIF(au, ''), p, al, NULLIF(co, ''), now() + make_interval(secs => l), 1
        FROM unnest($1::int8[], $2::uuid[], $3::int2[], $4::int2[], $5::text[], $6::int2[], $7::text[], $8::text[], $9::text[], $10::bool[],
                    $11::text[], $12::float8[]) AS u(c, id, e, k, a, ae, pk, au, p, al, co, l)
        ON CONFLICT DO NOTHING
        """
    typealias Row = Int64

    var containers: [Int64]
    var ids: [UUID]
    var environments: [Int16]
    var kinds: [Int16]
    var addresses: [String]
    /// 0 and '' stand for none (arrays without nulls).
    var apns: [Int16]
    var p256dh: [String]
    var auth: [String]
    var payloads: [String]
    var alerts: [Bool]
    var collapseIDs: [String]
    var leases: [Double]

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 12)
        bindings.append(containers)
        bindings.append(ids)
        bindings.append(environments)
        bindings.append(kinds)
        bindings.append(addresses)
        bindings.append(apns)
        bindings.append(p256dh)
        bindings.append(auth)
        bindings.append(payloads)
        bindings.append(alerts)
        bindings.append(collapseIDs)
        bindings.append(leases)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

/// Removes pushes done with (sent, or refused for good).
struct DeletePushes: PostgresPreparedStatement {
    static let name = "stratus.DeletePushes"
    static let sql = """
        DELETE FROM push_outbox o USING unnest($1::int8[], $2::uuid[], $3::text[]) AS d(c, id, a)
        WHERE o.container_id = d.c AND o.push_id = d.id AND o.address = d.a
        """
    typealias Row = Int64

    var containers: [Int64]
    var ids: [UUID]
    var addresses: [String]

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 3)
        bindings.append(containers)
        bindings.append(ids)
        bindings.append(addresses)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

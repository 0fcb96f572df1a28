import Foundation
import Logging
import PostgresNIO
import StratusCore

/// How a record changed, for the subscriptions that watch it (CloudKit's `fo` numbering).
public struct RecordChange: Sendable {
    public enum Kind: Int, Sendable {
        case create = 1, update = 2, delete = 3

        /// The `firesOn` bit a change of this kind needs.
        public var firing: Subscription.Firing {
            switch self {
            case .create: return .create
            case .update: return .update
            case .delete: return .delete
            }
        }
    }

    public var kind: Kind
    /// The record as saved; as it was before a delete.
    public var record: Record
}

/// The committed changes of one write in one zone.
public struct RecordChanges: Sendable {
    public var db: DatabaseRef
    public var zone: String
    public var zoneID: ZoneID
    /// The zone feed's position just before the write's first change: a change feed read from
    /// there returns this write's changes and every later one.
    public var start: ChangePosition?
    public var changes: [RecordChange]
}

/// What is told of every write's committed record changes (the notifier).
public protocol RecordChangeObserver: Sendable {
    func recordsChanged(_ changes: RecordChanges) async
}

/// A notification for one subscriber, to be queued for each of their web courier tokens.
public struct PendingNotification: Sendable {
    public var owner: UserID
    public var payload: String
    /// For zone and database notifications, their subscription: not queued again while one waits.
    public var coalesceKey: String?

    public init(owner: UserID, payload: String, coalesceKey: String? = nil) {
        self.owner = owner
        self.payload = payload
        self.coalesceKey = coalesceKey
    }
}

/// A notification for one web courier token, to be queued.
public struct QueuedNotification: Sendable {
    public var owner: UserID
    public var tokenHash: String
    public var payload: String
    public var coalesceKey: String?

    public init(owner: UserID, tokenHash: String, payload: String, coalesceKey: String?) {
        self.owner = owner
        self.tokenHash = tokenHash
        self.payload = payload
        self.coalesceKey = coalesceKey
    }
}

/// The notifications one write queues (`RecordStore.queueNotifications`).
struct NotificationQueueing: Sendable {
    var containerID: ContainerID
    var environment: ContainerEnvironment
    var notifications: [QueuedNotification]
}

/// A web courier token as stored.
public struct CourierToken: Sendable {
    public var containerID: ContainerID
    public var environment: ContainerEnvironment
    public var owner: UserID
    public var tokenHash: String

    public init(containerID: ContainerID, environment: ContainerEnvironment, owner: UserID, tokenHash: String) {
        self.containerID = containerID
        self.environment = environment
        self.owner = owner
        self.tokenHash = tokenHash
    }
}

extension SubscriptionStore {
    /// The changes a write made, from its results and the records as they were before it:
    /// `create` for a record that was not live, `update` for one that was, `delete` (with the
    /// record as it was) for deletes and the cascade. Built only when an observer wants them.
    static func changes(of results: [ModifyResult], current: [String: Record], cascade: [Record]) -> [RecordChange] {
        var changes: [RecordChange] = []
        for result in results {
            switch result {
            case .saved(let record):
                let before = current[record.recordName]
                changes.append(RecordChange(kind: before == nil || before!.deleted ? .create : .update, record: record))
            case .deleted(let name):
                if let before = current[name], !before.deleted { changes.append(RecordChange(kind: .delete, record: before)) }
            case .failed:
                break
            }
        }
        for record in cascade where !record.deleted { changes.append(RecordChange(kind: .delete, record: record)) }
        return changes
    }

    /// Hands committed changes to the observer (the notifier), if one is set and there are any.
    func report(_ changes: RecordChanges?) async {
        guard let changes, !changes.changes.isEmpty, let observer = store.changeObserver.withLock({ $0 }) else { return }
        await observer.recordsChanged(changes)
    }

    /// The users who accepted a live share in zone `zone` of `db` (a private database), in one
    /// statement: the only shared-database subscribers a change there can concern.
    public func zoneParticipants(_ db: DatabaseRef, zone: String) async throws -> Set<UserID> {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT DISTINCT p.user_record_name FROM zones z
                JOIN shares s ON s.container_id = z.container_id AND s.zone_id = z.zone_id AND NOT s.deleted
                JOIN share_participants p ON p.container_id = s.container_id AND p.zone_id = s.zone_id AND p.share_name = s.share_name
                WHERE z.container_id = \(db.containerID) AND z.environment = \(db.environment.code) AND z.database_scope = \(db.scope.code)
                  AND z.owner = \(db.owner) AND z.zone_name = \(zone) AND NOT z.deleted
                  AND p.status = 2 AND p.user_record_name IS NOT NULL
                """, logger: logger)
        }
        return Set(try rows.map { try $0.decode(UserID.self) })
    }

    /// A container's name, by id.
    public func containerName(_ containerID: ContainerID) async throws -> String {
        let rows = try await database.withConnection { connection in
            try await connection.rows("SELECT name FROM containers WHERE container_id = \(containerID)", logger: logger)
        }
        return try rows.first?.decode(String.self) ?? ""
    }

    /// Registers a new web courier token of `owner` (its SHA-256 hex), and tells every server
    /// process that the owner's tokens changed.
    public func createCourierToken(containerID: ContainerID, environment: ContainerEnvironment, owner: UserID, tokenHash: String) async throws {
        try await database.withConnection { connection in
            try await connection.statement("""
                WITH made AS (
                    INSERT INTO courier_tokens (container_id, token_hash, environment, owner)
                    VALUES (\(containerID), \(tokenHash), \(environment.code), \(owner))
                )
                SELECT pg_notify(\(Invalidations.channel), \(Invalidations.Event.courierTokens(containerID: containerID, environment: environment, owner: owner).payload))
                """, logger: logger)
        }
    }

    /// The web courier tokens (hashes) of each of `owners`.
    public func courierTokenHashes(containerID: ContainerID, environment: ContainerEnvironment, owners: [UserID]) async throws -> [UserID: [String]] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT owner, token_hash FROM courier_tokens
                WHERE container_id = \(containerID) AND environment = \(environment.code) AND owner = ANY(\(owners)::text[])
                """, logger: logger)
        }
        var tokens: [UserID: [String]] = [:]
        for row in rows {
            let (owner, hash) = try row.decode((UserID, String).self)
            tokens[owner, default: []].append(hash)
        }
        return tokens
    }

    /// The courier token with this hash in the container, noting that it was polled (to the hour:
    /// a poll writes nothing while the token's mark is less than an hour old).
    public func pollCourierToken(containerID: ContainerID, tokenHash: String) async throws -> CourierToken? {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                WITH t AS (
                    SELECT environment, owner, polled_at < now() - interval '1 hour' AS stale FROM courier_tokens
                    WHERE container_id = \(containerID) AND token_hash = \(tokenHash)
                ), marked AS (
                    UPDATE courier_tokens SET polled_at = now()
                    WHERE container_id = \(containerID) AND token_hash = \(tokenHash) AND (SELECT stale FROM t)
                )
                SELECT environment, owner FROM t
                """, logger: logger)
        }
        guard let row = rows.first else { return nil }
        let (code, owner) = try row.decode((Int16, String).self)
        return CourierToken(containerID: containerID, environment: code == 2 ? .production : .development, owner: UserID(owner), tokenHash: tokenHash)
    }

    /// Takes the oldest notification waiting for a token (no other poll can take it too).
    /// Concurrent polls share statements (`notificationTaking`).
    /// `made`: when it was queued (for the delivery latency `/metrics` shows).
    public func takeNotification(_ token: CourierToken) async throws -> (seq: Int64, payload: String, made: Date)? {
        try await store.notificationTaking.answer(token)
    }

    /// One statement taking the oldest notification for each poll in `polls` (as many as there are
    /// polls of one token), each answered in the order the polls came.
    static func takeNotifications(_ polls: [CourierToken], on connection: PostgresConnection, logger: Logger) async throws -> [(seq: Int64, payload: String, made: Date)?] {
        // Planned on each call (not prepared): prepared, PostgreSQL's generic plan took ~2 ms a
        // take under the create-subscribed benchmark, against ~0.12 ms executing and ~0.15 ms
        // planning each time (pg_stat_statements). A lone poll names its container and token
        // as values, which Citus needs to send the statement to the container's worker.
        if polls.count == 1 {
            let poll = polls[0]
            let row = try await connection.rows("""
                DELETE FROM notifications WHERE container_id = \(poll.containerID) AND token_hash = \(poll.tokenHash) AND seq = (
                    SELECT seq FROM notifications WHERE container_id = \(poll.containerID) AND token_hash = \(poll.tokenHash)
                    ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED)
                RETURNING seq, payload, created_at
                """, logger: logger).first
            return [try row.map { try $0.decode((Int64, String, Date).self) }.map { (seq: $0.0, payload: $0.1, made: $0.2) }]
        }
        let rows = try await connection.rows("""
            WITH u AS (SELECT c, t, count(*) AS k FROM unnest(\(polls.map(\.containerID))::bigint[], \(polls.map(\.tokenHash))::text[]) AS u(c, t) GROUP BY c, t)
            DELETE FROM notifications n WHERE ctid = ANY (ARRAY(
                SELECT x.ctid FROM u CROSS JOIN LATERAL (
                    SELECT ctid FROM notifications WHERE container_id = u.c AND token_hash = u.t
                    ORDER BY seq LIMIT u.k FOR UPDATE SKIP LOCKED) x))
            RETURNING n.container_id, n.token_hash, n.seq, n.payload, n.created_at
            """, logger: logger).map { try $0.decode((Int64, String, Int64, String, Date).self) }
        var taken: [String: [(seq: Int64, payload: String, made: Date)]] = [:]
        for (containerID, tokenHash, seq, payload, made) in rows {
            taken["\(containerID)/\(tokenHash)", default: []].append((seq, payload, made))
        }
        for key in taken.keys { taken[key]!.sort { $0.seq > $1.seq } }
        return polls.map { taken["\($0.containerID)/\($0.tokenHash)"]?.popLast() }
    }

    /// Puts back a notification whose answer could not be written: first in line again when it
    /// came from the queue (`seq`), last when it was handed to the poll directly. With a
    /// coalescing key (a held database or zone notification queued after its hold), a twin
    /// already queued for the token keeps its place and this one is dropped, as `queueNotifications` does.
    public func putBackNotification(_ token: CourierToken, seq: Int64?, payload: String, coalesceKey: String? = nil) async throws {
        try await database.withConnection { connection in
            try await connection.statement("""
                INSERT INTO notifications (container_id, token_hash, seq, payload, coalesce_key)
                VALUES (\(token.containerID), \(token.tokenHash), coalesce(\(seq), nextval('notification_seq')), \(payload), \(coalesceKey))
                ON CONFLICT DO NOTHING
                """, logger: logger)
        }
    }

    /// Queues notifications, each for one web courier token. Returns how many were queued, by
    /// owner (a zone or database notification is not queued while one for its subscription waits
    /// for the token). (The caller wakes the polls: `Notifier`.) Concurrent writes' notifications
    /// share statements (`notificationQueueing`).
    @discardableResult
    public func queueNotifications(containerID: ContainerID, environment: ContainerEnvironment, _ notifications: [QueuedNotification]) async throws -> [UserID: Int] {
        guard !notifications.isEmpty else { return [:] }
        return try await store.notificationQueueing.answer(NotificationQueueing(containerID: containerID, environment: environment, notifications: notifications))
    }

    /// One statement queueing the notifications of several writes. Each token's count is answered
    /// to the first request that brought it, so the counts add up.
    static func queueNotifications(_ requests: [NotificationQueueing], on connection: PostgresConnection, logger: Logger) async throws -> [[UserID: Int]] {
        var containers: [Int64] = [], tokens: [String] = [], payloads: [String] = [], keys: [String] = []
        var first: [String: (index: Int, owner: UserID)] = [:]
        for (index, request) in requests.enumerated() {
            for notification in request.notifications {
                containers.append(request.containerID.rawValue)
                tokens.append(notification.tokenHash)
                payloads.append(notification.payload)
                keys.append(notification.coalesceKey ?? "")
                let key = "\(request.containerID)/\(notification.tokenHash)"
                if first[key] == nil { first[key] = (index, notification.owner) }
            }
        }
        let rows = try await connection.rows(QueueNotifications(containers: containers, tokens: tokens, payloads: payloads, keys: keys), logger: logger)
        var answers = [[UserID: Int]](repeating: [:], count: requests.count)
        for (containerID, tokenHash, count) in rows {
            guard let (index, owner) = first["\(containerID)/\(tokenHash)"] else { continue }
            answers[index][owner, default: 0] += Int(count)
        }
        return answers
    }

    /// Sends wake-ups to every server process's polls (one notification per event).
    public func wakeCouriers(_ events: [Invalidations.Event]) async throws {
        guard !events.isEmpty else { return }
        try await database.withConnection { connection in
            try await connection.statement("""
                SELECT pg_notify(\(Invalidations.channel), p) FROM unnest(\(events.map(\.payload))::text[]) AS u(p)
                """, logger: logger)
        }
    }

    /// Removes notifications older than `lifetime` and tokens not polled for `tokenLifetime`.
    public func sweepNotifications(lifetime: Duration, tokenLifetime: Duration) async throws {
        try await database.withConnection { connection in
            try await connection.statement("""
                DELETE FROM notifications WHERE created_at < now() - make_interval(secs => \(Double(lifetime.components.seconds)))
                """, logger: logger)
            try await connection.statement("""
                DELETE FROM courier_tokens WHERE polled_at < now() - make_interval(secs => \(Double(tokenLifetime.components.seconds)))
                """, logger: logger)
        }
    }
}

/// Queues notifications, each for one web courier token (a zone or database notification not
/// while one for its subscription waits); answers how many were queued per token. Prepared:
/// PostgreSQL planned it in ~0.3 ms, more than it took to run.
struct QueueNotifications: PostgresPreparedStatement {
    static let name = "stratus.QueueNotifications"
    static let sql = """
        WITH queued AS (
            INSERT INTO notifications (container_id, token_hash, payload, coalesce_key)
            SELECT n.c, n.t, n.payload, NULLIF(n.k, '')
            FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS n(c, t, payload, k, i)
            ORDER BY n.i
            ON CONFLICT DO NOTHING
            RETURNING container_id, token_hash
        )
        SELECT container_id, token_hash, count(*) FROM queued GROUP BY 1, 2
        """
    typealias Row = (Int64, String, Int64)

    var containers: [Int64]
    var tokens: [String]
    var payloads: [String]
    /// Coalescing keys, '' for none.
    var keys: [String]

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 4)
        bindings.append(containers)
        bindings.append(tokens)
        bindings.append(payloads)
        bindings.append(keys)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

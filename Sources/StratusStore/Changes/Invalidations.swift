import Foundation
import Logging
import PostgresNIO
import StratusCore
import Synchronization

/// Tells every server process sharing the database that something it may have cached changed:
/// a schema (grants included), a session, a user's sessions, an API token, a server key.
///
/// The change's own transaction sends a PostgreSQL notification (`pg_notify`, delivered to
/// listeners when that transaction commits, never when it rolls back). Each process keeps one
/// connection of its own listening on the channel and hands each event to its subscribers, which
/// forget what the event names. While the listening connection is down (a PostgreSQL restart),
/// events can be missed: when it connects again, subscribers get `.all` and forget everything
/// another process could have changed. So a cache is stale for at most the notification's
/// delivery time (milliseconds) while the connection is up.
public final class Invalidations: Sendable {
    /// What changed.
    public enum Event: Sendable, Equatable {
        /// A container-environment's schema, now at `version`.
        case schema(containerID: ContainerID, environment: ContainerEnvironment, version: Int64)
        /// One session ended.
        case session(containerID: ContainerID, sessionID: SessionID)
        /// Every session of a user ended (password change, user disabled).
        case userSessions(containerID: ContainerID, user: UserID)
        /// An API token was revoked or changed.
        case apiToken(containerID: ContainerID, tokenID: APITokenID)
        /// A server-to-server key was revoked.
        case serverKey(containerID: ContainerID, keyID: String)
        /// A custom role's members changed.
        case roles(containerID: ContainerID, environment: ContainerEnvironment)
        /// A container-environment's quota limits changed.
        case quota(containerID: ContainerID, environment: ContainerEnvironment)
        /// A container-environment's subscriptions changed.
        case subscriptions(containerID: ContainerID, environment: ContainerEnvironment)
        /// Notifications are waiting for these users' web courier tokens (a wake-up, not a change),
        /// queued by the server process `origin` names.
        case courier(containerID: ContainerID, environment: ContainerEnvironment, origin: String, owners: [UserID])
        /// A user made a web courier token (their list of tokens changed).
        case courierTokens(containerID: ContainerID, environment: ContainerEnvironment, owner: UserID)
        /// Anything may have changed (the listener reconnected).
        case all

        /// The notification payload: the kind and its fields, separated by spaces (none holds one).
        var payload: String {
            switch self {
            case .schema(let c, let e, let v): return "schema \(c) \(e.code) \(v)"
            case .session(let c, let s): return "session \(c) \(s)"
            case .userSessions(let c, let u): return "user \(c) \(u)"
            case .apiToken(let c, let t): return "token \(c) \(t)"
            case .serverKey(let c, let k): return "key \(c) \(k)"
            case .roles(let c, let e): return "roles \(c) \(e.code)"
            case .quota(let c, let e): return "quota \(c) \(e.code)"
            case .subscriptions(let c, let e): return "subscriptions \(c) \(e.code)"
            case .courier(let c, let e, let from, let o): return "courier \(c) \(e.code) \(from) \(o.map(\.rawValue).joined(separator: " "))"
            case .courierTokens(let c, let e, let o): return "tokens \(c) \(e.code) \(o)"
            case .all: return "all"
            }
        }

        init?(payload: String) {
            let parts = payload.split(separator: " ").map(String.init)
            func int(_ index: Int) -> Int64? { index < parts.count ? Int64(parts[index]) : nil }
            func id(_ index: Int) -> ContainerID? { int(index).map(ContainerID.init(rawValue:)) }
            func environment(_ index: Int) -> ContainerEnvironment? {
                guard let code = int(index) else { return nil }
                return code == 1 ? .development : code == 2 ? .production : nil
            }
            switch parts.first {
            case "schema":
                guard parts.count == 4, let c = id(1), let e = environment(2), let v = int(3) else { return nil }
                self = .schema(containerID: c, environment: e, version: v)
            case "session":
                guard parts.count == 3, let c = id(1), let s = int(2) else { return nil }
                self = .session(containerID: c, sessionID: SessionID(s))
            case "user":
                guard parts.count == 3, let c = id(1) else { return nil }
                self = .userSessions(containerID: c, user: UserID(String(parts[2])))
            case "token":
                guard parts.count == 3, let c = id(1), let t = int(2) else { return nil }
                self = .apiToken(containerID: c, tokenID: APITokenID(t))
            case "key":
                guard parts.count == 3, let c = id(1) else { return nil }
                self = .serverKey(containerID: c, keyID: parts[2])
            case "roles":
                guard parts.count == 3, let c = id(1), let e = environment(2) else { return nil }
                self = .roles(containerID: c, environment: e)
            case "quota":
                guard parts.count == 3, let c = id(1), let e = environment(2) else { return nil }
                self = .quota(containerID: c, environment: e)
            case "subscriptions":
                guard parts.count == 3, let c = id(1), let e = environment(2) else { return nil }
                self = .subscriptions(containerID: c, environment: e)
            case "courier":
                guard parts.count >= 5, let c = id(1), let e = environment(2) else { return nil }
                self = .courier(containerID: c, environment: e, origin: parts[3], owners: parts[4...].map { UserID(String($0)) })
            case "tokens":
                guard parts.count == 4, let c = id(1), let e = environment(2) else { return nil }
                self = .courierTokens(containerID: c, environment: e, owner: UserID(String(parts[3])))
            case "all":
                self = .all
            default:
                return nil
            }
        }
    }

    /// The PostgreSQL notification channel.
    public static let channel = "stratus_invalidate"

    let configuration: DatabaseConfiguration
    let logger: Logger
    private let subscribers = Mutex<[@Sendable (Event) -> Void]>([])

    public init(configuration: DatabaseConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
    }

    /// Calls `handler` with every event this process receives (its own changes' included).
    public func subscribe(_ handler: @escaping @Sendable (Event) -> Void) {
        subscribers.withLock { $0.append(handler) }
    }

    /// Whether the listener is connected and listening now.
    public var listening: Bool { isListening.load(ordering: .relaxed) }
    private let isListening = Atomic<Bool>(false)

    func deliver(_ event: Event) {
        for handler in subscribers.withLock({ $0 }) { handler(event) }
    }

    /// Sends `event` from the caller's transaction: listeners get it when that transaction commits.
    public static func publish(_ event: Event, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.statement("SELECT pg_notify(\(channel), \(event.payload))", logger: logger)
    }

    /// Listens until the task is cancelled, on a connection of its own (a one-connection pool),
    /// listening again (after a pause) whenever the connection is lost; every start delivers `.all` first.
    public func run() async {
        var settings = configuration
        settings.maximumConnections = 1
        settings.statementTimeout = nil
        let client = PostgresClient(configuration: settings.clientConfiguration(), backgroundLogger: logger)
        await withDiscardingTaskGroup { group in
            group.addTask { await client.run() }
            // Let `run()` begin before the first lease (PostgresNIO warns of a lease before it).
            try? await Task.sleep(for: .milliseconds(5))
            var attempt = 0
            while !Task.isCancelled {
                attempt += 1
                do {
                    try await client.withConnection { connection in
                        try await connection.listen(on: Self.channel) { notifications in
                            isListening.store(true, ordering: .relaxed)
                            deliver(.all)
                            attempt = 0
                            for try await notification in notifications {
                                if let event = Event(payload: notification.payload) { deliver(event) }
                            }
                        }
                    }
                } catch {
                    if Task.isCancelled { break }
                    logger.warning("the invalidation listener lost its database connection; listening again",
                                   metadata: ["stratus.error": "\(String(reflecting: error))"])
                }
                isListening.store(false, ordering: .relaxed)
                try? await Task.sleep(for: .milliseconds(min(5000, 250 * max(1, attempt))))
            }
            isListening.store(false, ordering: .relaxed)
            group.cancelAll()
        }
    }
}

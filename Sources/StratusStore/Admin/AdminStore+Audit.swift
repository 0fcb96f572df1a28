import Foundation
import Logging
import PostgresNIO
import StratusCore

/// Who did a management action, and from where.
public struct AuditActor: Sendable, Equatable {
    /// The credential, by name: `admin token`, or later a named admin token.
    public var credential: String
    /// What the client says of itself (the CLI sends `user@host`), if anything.
    public var client: String?
    /// The client's network address, when known.
    public var address: String?

    public init(credential: String, client: String? = nil, address: String? = nil) {
        self.credential = credential
        self.client = client
        self.address = address
    }

    /// `admin token (alice@laptop)`.
    public var name: String { client.map { "\(credential) (\($0))" } ?? credential }
}

/// One entry of the audit log.
public struct AuditEntry: Sendable, Equatable {
    public var containerID: ContainerID
    public var id: Int64 = 0
    public var at = Date()
    public var actor: String
    public var address: String
    /// What was done: `container.create`, `token.create`, `token.revoke`, `schema.import`,
    /// `schema.deploy`, `schema.reset`, `user.disable`, `user.enable`, …
    public var action: String
    public var environment: ContainerEnvironment?
    /// What it was done to (a token id, a user record name, …).
    public var target: String
    /// Details a person reads (the plan of a deploy, a token's name).
    public var detail: String

    public init(containerID: ContainerID, actor: AuditActor, action: String, environment: ContainerEnvironment? = nil, target: String = "", detail: String = "") {
        self.containerID = containerID
        self.actor = actor.name
        self.address = actor.address ?? ""
        self.action = action
        self.environment = environment
        self.target = target
        self.detail = detail
    }
}

extension AuditEntry {
    /// Writes the entry in the caller's transaction, so the log holds exactly the actions that happened.
    public func write(on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.statement("""
            INSERT INTO audit_log (container_id, actor, address, action, environment, target, detail)
            VALUES (\(containerID), \(actor), \(address), \(action), \(environment?.code), \(target), \(detail))
            """, logger: logger)
    }
}

extension AdminStore {
    /// Writes an entry on its own (for actions that are not one transaction of the store's).
    public func audit(_ entry: AuditEntry) async throws {
        try await database.withConnection { connection in try await entry.write(on: connection, logger: logger) }
    }

    /// Audit entries of a container since `since` (all when `nil`), oldest first (or newest
    /// first), at most `limit`; only those of `action` and of an actor containing `actor` (any
    /// case) when given.
    public func auditLog(containerID: ContainerID, since: Date?, limit: Int, newestFirst: Bool = false, action: String? = nil,
                         actor: String? = nil, before: Int64? = nil) async throws -> [AuditEntry] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT audit_id, at, actor, address, action, environment, target, detail FROM audit_log
                WHERE container_id = \(containerID) AND (\(since)::timestamptz IS NULL OR at >= \(since))
                  AND (\(before)::int8 IS NULL OR audit_id < \(before))
                  AND (\(action)::text IS NULL OR action = \(action)) AND (\(actor)::text IS NULL OR strpos(lower(actor), lower(\(actor))) > 0)
                ORDER BY audit_id \(unescaped: newestFirst ? "DESC" : "ASC") LIMIT \(limit)
                """, logger: logger)
        }
        return try rows.map { row in
            let (id, at, actor, address, action, environment, target, detail) =
                try row.decode((Int64, Date, String, String, String, Int16?, String, String).self)
            var entry = AuditEntry(containerID: containerID, actor: AuditActor(credential: actor, address: address), action: action,
                                   environment: environment.map { $0 == 1 ? .development : .production }, target: target, detail: detail)
            entry.id = id
            entry.at = at
            entry.actor = actor
            return entry
        }
    }
}

import Foundation
import Logging
import PostgresNIO
import StratusCore

/// A container as the management API shows it.
public struct ContainerInfo: Sendable, Equatable {
    public var id: ContainerID
    public var name: String
    public var identitySalt: [UInt8]
    public var createdAt: Date
}

/// An API token's metadata (never its secret).
public struct APITokenInfo: Sendable, Equatable {
    public var containerID: ContainerID
    public var containerName: String
    public var tokenID: APITokenID
    public var environment: ContainerEnvironment
    public var name: String
    /// The first characters of the token, to tell tokens apart in listings.
    public var prefix: String
    public var createdAt: Date
    public var revokedAt: Date?
    /// Web origins (`https://app.example.com`) browsers may call with this token; empty: any.
    public var allowedOrigins: [String] = []
    /// Where the sign-in page sends a user who signed in (`…?ckWebAuthToken=…`), if set.
    public var signInCallback: String?
}

/// A user account of a container.
public struct UserAccount: Sendable, Equatable {
    public var containerID: ContainerID
    public var userRecordName: UserID
    public var email: String
    public var passwordHash: String
    /// When an administrator disabled the account (it cannot sign in), if they did.
    public var disabledAt: Date?

    public init(containerID: ContainerID, userRecordName: UserID, email: String, passwordHash: String, disabledAt: Date? = nil) {
        self.containerID = containerID
        self.userRecordName = userRecordName
        self.email = email
        self.passwordHash = passwordHash
        self.disabledAt = disabledAt
    }
}

/// Containers, API tokens, user accounts and server secrets.
public struct AdminStore: Sendable {
    let database: Database
    let logger: Logger

    /// Operator accounts, credentials, console sessions and teams.
    public var operatorStore: OperatorStore { OperatorStore(store: self) }
    /// Usage, rate-limit counts, quotas and the request log.
    public var metering: MeteringStore { MeteringStore(store: self) }

    public init(database: Database, logger: Logger) {
        self.database = database
        self.logger = logger
    }

    /// Creates a container; `EXISTS` if the name is taken.
    public func createContainer(name: String, by actor: AuditActor) async throws -> ContainerInfo {
        let salt = (0..<16).map { _ in UInt8.random(in: 0...255) }
        return try await database.transaction { connection in
            let rows = try await connection.rows("""
                INSERT INTO containers (name, identity_salt) VALUES (\(name), \(Data(salt)))
                ON CONFLICT (name) DO NOTHING
                RETURNING container_id, name, identity_salt, created_at
                """, logger: logger)
            guard let row = rows.first else { throw StratusError(.exists, "container '\(name)' already exists") }
            let container = try Self.container(row)
            try await AuditEntry(containerID: container.id, actor: actor, action: "container.create", target: name).write(on: connection, logger: logger)
            return container
        }
    }

    /// All containers, by name.
    public func listContainers() async throws -> [ContainerInfo] {
        try await database.withConnection { connection in
            try await connection.rows("SELECT container_id, name, identity_salt, created_at FROM containers ORDER BY name", logger: logger)
        }.map(Self.container)
    }

    /// The container named `name`, if it exists.
    public func container(named name: String) async throws -> ContainerInfo? {
        try await database.withConnection { connection in
            try await connection.rows("SELECT container_id, name, identity_salt, created_at FROM containers WHERE name = \(name)", logger: logger)
        }.first.map(Self.container)
    }

    static func container(_ row: PostgresRow) throws -> ContainerInfo {
        let (id, name, salt, created) = try row.decode((ContainerID, String, Data, Date).self)
        return ContainerInfo(id: id, name: name, identitySalt: Array(salt), createdAt: created)
    }

    /// Stores a new API token by its hash.
    public func createAPIToken(container: ContainerInfo, environment: ContainerEnvironment, name: String, tokenHash: [UInt8], prefix: String,
                               allowedOrigins: [String] = [], signInCallback: String? = nil,
                               by actor: AuditActor) async throws -> APITokenInfo {
        try await database.transaction { connection in
            let row = try await connection.rows("""
                INSERT INTO api_tokens (container_id, environment, name, token_hash, token_prefix, allowed_origins, signin_callback)
                VALUES (\(container.id), \(environment.code), \(name), \(Data(tokenHash)), \(prefix), \(allowedOrigins), \(signInCallback))
                RETURNING token_id, created_at
                """, logger: logger).first!
            let (tokenID, created) = try row.decode((Int64, Date).self)
            try await AuditEntry(containerID: container.id, actor: actor, action: "token.create", environment: environment,
                                 target: String(tokenID), detail: "name '\(name)', prefix \(prefix)" + Self.optionsDetail(allowedOrigins, signInCallback))
                .write(on: connection, logger: logger)
            return APITokenInfo(containerID: container.id, containerName: container.name, tokenID: APITokenID(tokenID), environment: environment,
                                name: name, prefix: prefix, createdAt: created, revokedAt: nil,
                                allowedOrigins: allowedOrigins, signInCallback: signInCallback)
        }
    }

    static func optionsDetail(_ origins: [String]?, _ callback: String??) -> String {
        var parts: [String] = []
        if let origins { parts.append("allowed origins: " + (origins.isEmpty ? "any" : origins.joined(separator: " "))) }
        if let callback { parts.append("sign-in callback: " + (callback ?? "none")) }
        return parts.isEmpty ? "" : "; " + parts.joined(separator: "; ")
    }

    /// Changes a live token's allowed origins and sign-in callback (`nil`: unchanged); every
    /// server process forgets its copy when this commits. Audited.
    public func updateAPIToken(containerID: ContainerID, idOrPrefix: String, allowedOrigins: [String]?, signInCallback: String??,
                               by actor: AuditActor) async throws -> APITokenInfo {
        let tokenID = Int64(idOrPrefix)
        return try await database.transaction { connection in
            let rows = try await connection.rows("""
                UPDATE api_tokens SET allowed_origins = coalesce(\(allowedOrigins), allowed_origins),
                       signin_callback = CASE WHEN \(signInCallback != nil) THEN \(signInCallback ?? nil) ELSE signin_callback END
                WHERE container_id = \(containerID) AND revoked_at IS NULL
                  AND (token_id = \(tokenID) OR token_prefix = \(idOrPrefix))
                RETURNING \(unescaped: Self.tokenColumns(table: "api_tokens", container: "(SELECT name FROM containers WHERE container_id = api_tokens.container_id)"))
                """, logger: logger)
            let token = try Self.liveToken(rows, idOrPrefix: idOrPrefix)
            try await AuditEntry(containerID: containerID, actor: actor, action: "token.update", environment: token.environment,
                                 target: token.tokenID.description, detail: "name '\(token.name)'" + Self.optionsDetail(allowedOrigins, signInCallback))
                .write(on: connection, logger: logger)
            try await Invalidations.publish(.apiToken(containerID: containerID, tokenID: token.tokenID), on: connection, logger: logger)
            return token
        }
    }

    /// The one live token an id or prefix named (a change's `RETURNING` rows); `NOT_FOUND` for none,
    /// `BAD_REQUEST` for several (the change then rolls back).
    static func liveToken(_ rows: [PostgresRow], idOrPrefix: String) throws -> APITokenInfo {
        guard rows.count == 1 else {
            if rows.isEmpty { throw StratusError(.notFound, "no live API token '\(idOrPrefix)' in this container") }
            throw StratusError(.badRequest, "'\(idOrPrefix)' matches several tokens; give the token id")
        }
        return try token(rows[0])
    }

    /// The columns `token(_:)` decodes, from `table` (with the container's name as `container`).
    static func tokenColumns(table t: String, container: String) -> String {
        "\(t).container_id, \(container), \(t).token_id, \(t).environment, \(t).name, \(t).token_prefix, \(t).created_at, \(t).revoked_at, \(t).allowed_origins, \(t).signin_callback"
    }

    /// API tokens, optionally of one container.
    public func listAPITokens(containerID: ContainerID?) async throws -> [APITokenInfo] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT \(unescaped: Self.tokenColumns(table: "t", container: "c.name"))
                FROM api_tokens t JOIN containers c ON c.container_id = t.container_id
                WHERE \(containerID)::bigint IS NULL OR t.container_id = \(containerID)
                ORDER BY c.name, t.token_id
                """, logger: logger)
        }
        return try rows.map(Self.token)
    }

    /// The container's token with this hash (revoked ones included, so callers can say so).
    public func apiToken(containerID: ContainerID, hash: [UInt8]) async throws -> APITokenInfo? {
        try await database.withConnection { connection in
            try await connection.rows("""
                SELECT \(unescaped: Self.tokenColumns(table: "t", container: "c.name"))
                FROM api_tokens t JOIN containers c ON c.container_id = t.container_id
                WHERE t.container_id = \(containerID) AND t.token_hash = \(Data(hash))
                """, logger: logger)
        }.first.map(Self.token)
    }

    /// Revokes a token by id or by its prefix; `NOT_FOUND` if no live token matches.
    public func revokeAPIToken(containerID: ContainerID, idOrPrefix: String, by actor: AuditActor) async throws -> APITokenInfo {
        let tokenID = Int64(idOrPrefix)
        return try await database.transaction { connection in
            let rows = try await connection.rows("""
                UPDATE api_tokens SET revoked_at = now()
                WHERE container_id = \(containerID) AND revoked_at IS NULL
                  AND (token_id = \(tokenID) OR token_prefix = \(idOrPrefix))
                RETURNING \(unescaped: Self.tokenColumns(table: "api_tokens", container: "(SELECT name FROM containers WHERE container_id = api_tokens.container_id)"))
                """, logger: logger)
            let token = try Self.liveToken(rows, idOrPrefix: idOrPrefix)
            try await AuditEntry(containerID: containerID, actor: actor, action: "token.revoke", environment: token.environment,
                                 target: token.tokenID.description, detail: "name '\(token.name)', prefix \(token.prefix)").write(on: connection, logger: logger)
            // Every server process forgets the token when this commits.
            try await Invalidations.publish(.apiToken(containerID: containerID, tokenID: token.tokenID), on: connection, logger: logger)
            return token
        }
    }

    static func token(_ row: PostgresRow) throws -> APITokenInfo {
        let (containerID, containerName, tokenID, environment, name, prefix, created, revoked, origins, callback) =
            try row.decode((ContainerID, String, Int64, Int16, String, String, Date, Date?, [String], String?).self)
        return APITokenInfo(containerID: containerID, containerName: containerName, tokenID: APITokenID(tokenID),
                            environment: environment == 1 ? .development : .production, name: name, prefix: prefix,
                            createdAt: created, revokedAt: revoked, allowedOrigins: origins, signInCallback: callback)
    }

    /// Creates a user account; `EXISTS` if the email is taken in this container.
    public func createUser(_ account: UserAccount, discoverable: Bool = false, givenName: String? = nil, familyName: String? = nil) async throws {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                INSERT INTO users (container_id, user_record_name, email, password_hash, discoverable, given_name, family_name)
                VALUES (\(account.containerID), \(account.userRecordName), \(account.email), \(account.passwordHash),
                        \(discoverable), \(givenName), \(familyName))
                ON CONFLICT DO NOTHING RETURNING user_record_name
                """, logger: logger)
        }
        guard !rows.isEmpty else { throw StratusError(.exists, "an account with this email address already exists; sign in instead") }
    }

    /// The account with this email in a container.
    public func user(containerID: ContainerID, email: String) async throws -> UserAccount? {
        try await database.withConnection { connection in
            try await connection.rows("""
                SELECT user_record_name, password_hash, disabled_at FROM users WHERE container_id = \(containerID) AND email = \(email)
                """, logger: logger)
        }.first.map { row in
            let (name, hash, disabled) = try row.decode((String, String, Date?).self)
            return UserAccount(containerID: containerID, userRecordName: UserID(name), email: email, passwordHash: hash, disabledAt: disabled)
        }
    }

    /// The account with this user record name in a container.
    public func user(containerID: ContainerID, userRecordName: UserID) async throws -> UserAccount? {
        try await database.withConnection { connection in
            try await connection.rows("""
                SELECT email, password_hash, disabled_at FROM users WHERE container_id = \(containerID) AND user_record_name = \(userRecordName)
                """, logger: logger)
        }.first.map { row in
            let (email, hash, disabled) = try row.decode((String, String, Date?).self)
            return UserAccount(containerID: containerID, userRecordName: userRecordName, email: email, passwordHash: hash, disabledAt: disabled)
        }
    }

    /// The named server secret, created (32 random bytes) on first use. Shared by every
    /// `stratus serve` on the same database, so tokens one process signs, the others accept.
    public func serverSecret(named name: String) async throws -> [UInt8] {
        let fresh = Data((0..<32).map { _ in UInt8.random(in: 0...255) })
        // Two statements: Citus cannot plan a data-modifying CTE on a reference table combined
        // with a read of it (found starting `stratus serve` on a live Citus cluster). Whoever
        // inserts first wins; everyone then reads the same row.
        let row = try await database.withConnection { connection in
            try await connection.statement("""
                INSERT INTO server_secrets (name, secret) VALUES (\(name), \(fresh)) ON CONFLICT (name) DO NOTHING
                """, logger: logger)
            return try await connection.rows("SELECT secret FROM server_secrets WHERE name = \(name)", logger: logger).first
        }
        guard let row else { throw StratusError(.tryAgainLater, "the server secret '\(name)' could not be read; retry shortly") }
        return Array(try row.decode(Data.self))
    }

    /// The environments of the API tokens (revoked ones too: a token's environment never changes)
    /// an id or prefix names in the container, for authorising a change before it is made.
    public func apiTokenEnvironments(containerID: ContainerID, idOrPrefix: String) async throws -> Set<ContainerEnvironment> {
        let tokenID = Int64(idOrPrefix)
        return Set(try await database.withConnection { connection in
            try await connection.rows("""
                SELECT DISTINCT environment FROM api_tokens
                WHERE container_id = \(containerID) AND (token_id = \(tokenID)::int8 OR token_prefix = \(idOrPrefix))
                """, logger: logger)
        }.map { try $0.decode(Int16.self) == 1 ? ContainerEnvironment.development : .production })
    }
}

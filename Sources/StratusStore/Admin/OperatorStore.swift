import Foundation
import Logging
import PostgresNIO
import StratusCore

/// An operator account: someone who administers containers through the management API.
public struct OperatorInfo: Sendable, Equatable {
    public var operatorID: OperatorID
    public var email: String
    public var superuser: Bool
    public var createdAt: Date
    public var disabledAt: Date?
}

/// An operator credential as a request presents it: the credential and its operator.
public struct OperatorCredential: Sendable, Equatable {
    public var credentialID: CredentialID
    public var operatorInfo: OperatorInfo
    public var revokedAt: Date?
    public var expiresAt: Date?
    public var lastUsedAt: Date?
    /// A console session's idle limit.
    public var idleSeconds: Int?

    /// Why it can no longer be used, or `nil`: revoked, past its expiry, or idle too long.
    public func refusal(now: Date = Date()) -> String? {
        Self.refusal(revokedAt: revokedAt, expiresAt: expiresAt, lastUsedAt: lastUsedAt, idleSeconds: idleSeconds, now: now)
    }

    static func refusal(revokedAt: Date?, expiresAt: Date?, lastUsedAt: Date?, idleSeconds: Int?, now: Date = Date()) -> String? {
        if revokedAt != nil { return "revoked" }
        if let expiresAt, expiresAt < now { return "expired" }
        if let idleSeconds, let lastUsedAt, now.timeIntervalSince(lastUsedAt) > Double(idleSeconds) { return "idle" }
        return nil
    }
}

/// A console session: an operator's credential kept in a cookie, or one opened with the admin token.
public struct ConsoleSession: Sendable, Equatable {
    public var credential: OperatorCredential?
    public var credentialID: CredentialID
    /// For a session opened with the admin token: that token's SHA-256.
    public var adminTokenHash: [UInt8]?
    public var refusal: String?
}

/// A container's team member.
public struct TeamMember: Sendable, Equatable {
    public var operatorInfo: OperatorInfo
    public var role: TeamRole
    public var addedAt: Date
}

/// Operators' actions on no container in particular (operator accounts) are audited under this container id.
public let serverAuditContainerID: ContainerID = 0

/// Operator accounts, their credentials and console sessions, and containers' teams
/// (`admin.operatorStore`).
public struct OperatorStore: Sendable {
    let store: AdminStore
    var database: Database { store.database }
    var logger: Logger { store.logger }
}

extension OperatorStore {
    static let operatorColumns = "o.operator_id, o.email, o.superuser, o.created_at, o.disabled_at"

    static func operatorInfo(_ row: PostgresRow) throws -> OperatorInfo {
        let (id, email, superuser, created, disabled) = try row.decode((Int64, String, Bool, Date, Date?).self)
        return OperatorInfo(operatorID: OperatorID(id), email: email, superuser: superuser, createdAt: created, disabledAt: disabled)
    }

    /// Adds an operator; `EXISTS` when the email address has one.
    public func createOperator(email: String, passwordHash: String, superuser: Bool, by actor: AuditActor) async throws -> OperatorInfo {
        try await database.transaction { connection in
            guard let row = try await connection.rows("""
                INSERT INTO operators AS o (email, password_hash, superuser) VALUES (\(email), \(passwordHash), \(superuser))
                ON CONFLICT (email) DO NOTHING
                RETURNING \(unescaped: Self.operatorColumns)
                """, logger: logger).first else {
                throw StratusError(.exists, "there is already an operator '\(email)'")
            }
            let info = try Self.operatorInfo(row)
            try await AuditEntry(containerID: serverAuditContainerID, actor: actor, action: "operator.add", target: email,
                                 detail: superuser ? "superuser" : "").write(on: connection, logger: logger)
            return info
        }
    }

    /// Every operator, by email address, with the containers whose team each is in.
    public func operators() async throws -> [(OperatorInfo, [(container: String, role: TeamRole)])] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT \(unescaped: Self.operatorColumns),
                       coalesce((SELECT array_agg(c.name ORDER BY c.name) FROM container_members m JOIN containers c USING (container_id)
                                 WHERE m.operator_id = o.operator_id), '{}'),
                       coalesce((SELECT array_agg(m.role ORDER BY c.name) FROM container_members m JOIN containers c USING (container_id)
                                 WHERE m.operator_id = o.operator_id), '{}')
                FROM operators o ORDER BY o.email
                """, logger: logger)
        }
        return try rows.map { row in
            let (id, email, superuser, created, disabled, names, roles) = try row.decode((Int64, String, Bool, Date, Date?, [String], [Int16]).self)
            let info = OperatorInfo(operatorID: OperatorID(id), email: email, superuser: superuser, createdAt: created, disabledAt: disabled)
            return (info, zip(names, roles).map { ($0, TeamRole(rawValue: $1) ?? .viewer) })
        }
    }

    /// The operator with this email address (or id, given as digits), with their password hash.
    public func operatorAccount(_ emailOrID: String) async throws -> (info: OperatorInfo, passwordHash: String)? {
        let id = Int64(emailOrID)
        let row = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT \(unescaped: Self.operatorColumns), o.password_hash FROM operators o
                WHERE o.email = \(emailOrID) OR o.operator_id = \(id)::int8
                """, logger: logger)
        }.first
        guard let row else { return nil }
        let (id2, email, superuser, created, disabled, hash) = try row.decode((Int64, String, Bool, Date, Date?, String).self)
        return (OperatorInfo(operatorID: OperatorID(id2), email: email, superuser: superuser, createdAt: created, disabledAt: disabled), hash)
    }

    /// Removes an operator with their credentials and team places. Refused while they are the
    /// only owner of a container (the team would have none).
    public func removeOperator(_ info: OperatorInfo, by actor: AuditActor) async throws {
        try await database.transaction { connection in
            let sole = try await connection.rows("""
                SELECT c.name FROM container_members m JOIN containers c USING (container_id)
                WHERE m.operator_id = \(info.operatorID) AND m.role = \(TeamRole.owner.rawValue)
                  AND NOT EXISTS (SELECT 1 FROM container_members o WHERE o.container_id = m.container_id
                                  AND o.role = \(TeamRole.owner.rawValue) AND o.operator_id <> m.operator_id)
                ORDER BY c.name FOR UPDATE OF m
                """, logger: logger).map { try $0.decode(String.self) }
            if !sole.isEmpty {
                throw StratusError(.badRequest, "\(info.email) is the only owner of \(sole.joined(separator: ", ")): give \(sole.count == 1 ? "it" : "each") another owner first ('stratus team add --container \(sole[0]) --operator EMAIL --role owner')")
            }
            try await connection.statement("DELETE FROM operators WHERE operator_id = \(info.operatorID)", logger: logger)
            try await AuditEntry(containerID: serverAuditContainerID, actor: actor, action: "operator.remove", target: info.email)
                .write(on: connection, logger: logger)
        }
    }

    /// Disables (and signs out everywhere) or enables an operator.
    public func setOperatorDisabled(_ info: OperatorInfo, disabled: Bool, by actor: AuditActor) async throws -> OperatorInfo {
        try await database.transaction { connection in
            let row = try await connection.rows("""
                UPDATE operators o SET disabled_at = CASE WHEN \(disabled) THEN coalesce(o.disabled_at, \(Date())) END
                WHERE o.operator_id = \(info.operatorID) RETURNING \(unescaped: Self.operatorColumns)
                """, logger: logger).first
            guard let row else { throw StratusError(.notFound, "there is no operator '\(info.email)'") }
            if disabled {
                try await connection.statement("""
                    UPDATE operator_credentials SET revoked_at = now() WHERE operator_id = \(info.operatorID) AND revoked_at IS NULL
                    """, logger: logger)
            }
            try await AuditEntry(containerID: serverAuditContainerID, actor: actor, action: disabled ? "operator.disable" : "operator.enable",
                                 target: info.email).write(on: connection, logger: logger)
            return try Self.operatorInfo(row)
        }
    }

    /// Sets an operator's password and revokes their credentials but `keeping` (the one that
    /// changed it, if it is theirs).
    public func setOperatorPassword(_ info: OperatorInfo, passwordHash: String, keeping: CredentialID?, by actor: AuditActor) async throws -> Int {
        try await database.transaction { connection in
            try await connection.statement("""
                UPDATE operators SET password_hash = \(passwordHash), password_changed_at = now() WHERE operator_id = \(info.operatorID)
                """, logger: logger)
            let revoked = try await connection.rows("""
                UPDATE operator_credentials SET revoked_at = now()
                WHERE operator_id = \(info.operatorID) AND revoked_at IS NULL AND credential_id IS DISTINCT FROM \(keeping)::int8
                RETURNING credential_id
                """, logger: logger).count
            try await AuditEntry(containerID: serverAuditContainerID, actor: actor, action: "operator.password", target: info.email,
                                 detail: "\(revoked) other credential\(revoked == 1 ? "" : "s") revoked").write(on: connection, logger: logger)
            return revoked
        }
    }

    /// Revokes every credential of an operator (CLI sign-ins and console sessions): they sign in
    /// again. The number revoked.
    public func revokeOperatorCredentials(_ info: OperatorInfo, by actor: AuditActor) async throws -> Int {
        try await database.transaction { connection in
            let revoked = try await connection.rows("""
                UPDATE operator_credentials SET revoked_at = now() WHERE operator_id = \(info.operatorID) AND revoked_at IS NULL
                RETURNING credential_id
                """, logger: logger).count
            try await AuditEntry(containerID: serverAuditContainerID, actor: actor, action: "operator.revoke", target: info.email,
                                 detail: "\(revoked) credential\(revoked == 1 ? "" : "s") revoked").write(on: connection, logger: logger)
            return revoked
        }
    }

    // MARK: Credentials

    /// Stores a new credential for `operatorID` by its hash.
    public func createOperatorCredential(operatorID: OperatorID, tokenHash: [UInt8], name: String) async throws -> CredentialID {
        try await database.withConnection { connection in
            try await connection.rows("""
                INSERT INTO operator_credentials (operator_id, token_hash, name) VALUES (\(operatorID), \(Data(tokenHash)), \(name))
                RETURNING credential_id
                """, logger: logger)
        }.first!.decode(CredentialID.self)
    }

    /// Stores a console session for an operator (or, with `adminTokenHash`, for the admin token):
    /// it ends after `idleSeconds` unused and after `lifetimeSeconds` in any case.
    public func createConsoleSession(operatorID: OperatorID?, adminTokenHash: [UInt8]?, tokenHash: [UInt8], name: String,
                                     idleSeconds: Int, lifetimeSeconds: Int) async throws -> CredentialID {
        try await database.withConnection { connection in
            try await connection.rows("""
                INSERT INTO operator_credentials (operator_id, admin_token_hash, token_hash, kind, name, last_used_at, expires_at, idle_seconds)
                VALUES (\(operatorID)::int8, \(adminTokenHash.map { Data($0) })::bytea, \(Data(tokenHash)), 'console', \(name), now(),
                        now() + make_interval(secs => \(Double(lifetimeSeconds))), \(Int32(idleSeconds)))
                RETURNING credential_id
                """, logger: logger)
        }.first!.decode(CredentialID.self)
    }

    static let credentialColumns = "c.credential_id, c.revoked_at, c.expires_at, c.last_used_at, c.idle_seconds"

    /// Marks a credential used now when it was last marked more than a minute ago (the idle
    /// limit's clock, to the minute), so that a busy credential is written once a minute at most.
    func touch(_ credentialID: CredentialID, lastUsed: Date?, on connection: PostgresConnection) async throws {
        guard lastUsed.map({ Date().timeIntervalSince($0) > 60 }) ?? true else { return }
        try await connection.statement("UPDATE operator_credentials SET last_used_at = now() WHERE credential_id = \(credentialID)", logger: logger)
    }

    /// The operator credential with this hash and its operator, or `nil` (console sessions of the
    /// admin token are not operator credentials). Marks a usable one used.
    public func operatorCredential(hash: [UInt8]) async throws -> OperatorCredential? {
        try await database.withConnection { connection in
            guard let row = try await connection.rows("""
                SELECT \(unescaped: Self.operatorColumns), \(unescaped: Self.credentialColumns)
                FROM operator_credentials c JOIN operators o USING (operator_id) WHERE c.token_hash = \(Data(hash))
                """, logger: logger).first else { return nil }
            let (id, email, superuser, created, disabled, credentialID, revoked, expires, used, idle) =
                try row.decode((OperatorID, String, Bool, Date, Date?, CredentialID, Date?, Date?, Date?, Int32?).self)
            let credential = OperatorCredential(credentialID: credentialID,
                                                operatorInfo: OperatorInfo(operatorID: id, email: email, superuser: superuser,
                                                                           createdAt: created, disabledAt: disabled),
                                                revokedAt: revoked, expiresAt: expires, lastUsedAt: used, idleSeconds: idle.map(Int.init))
            if credential.refusal() == nil { try await touch(credentialID, lastUsed: used, on: connection) }
            return credential
        }
    }

    /// The console session with this hash, or `nil`. Marks a usable one used.
    public func consoleSession(hash: [UInt8]) async throws -> ConsoleSession? {
        try await database.withConnection { connection in
            guard let row = try await connection.rows("""
                SELECT c.admin_token_hash, \(unescaped: Self.credentialColumns),
                       o.operator_id, o.email, o.superuser, o.created_at, o.disabled_at
                FROM operator_credentials c LEFT JOIN operators o USING (operator_id)
                WHERE c.token_hash = \(Data(hash)) AND c.kind = 'console'
                """, logger: logger).first else { return nil }
            let (adminHash, credentialID, revoked, expires, used, idle, id, email, superuser, created, disabled) =
                try row.decode((Data?, CredentialID, Date?, Date?, Date?, Int32?, OperatorID?, String?, Bool?, Date?, Date?).self)
            var credential: OperatorCredential?
            if let id, let email, let superuser, let created {
                credential = OperatorCredential(credentialID: credentialID,
                                                operatorInfo: OperatorInfo(operatorID: id, email: email, superuser: superuser, createdAt: created,
                                                                           disabledAt: disabled),
                                                revokedAt: revoked, expiresAt: expires, lastUsedAt: used, idleSeconds: idle.map(Int.init))
            }
            let refusal = OperatorCredential.refusal(revokedAt: revoked, expiresAt: expires, lastUsedAt: used, idleSeconds: idle.map(Int.init))
            if refusal == nil { try await touch(credentialID, lastUsed: used, on: connection) }
            return ConsoleSession(credential: credential, credentialID: credentialID, adminTokenHash: adminHash.map { Array($0) }, refusal: refusal)
        }
    }

    /// Revokes a credential (signing out); `false` when it already was.
    @discardableResult
    public func revokeOperatorCredential(_ credentialID: CredentialID) async throws -> Bool {
        try await database.withConnection { connection in
            try await connection.rows("""
                UPDATE operator_credentials SET revoked_at = now() WHERE credential_id = \(credentialID) AND revoked_at IS NULL
                RETURNING credential_id
                """, logger: logger)
        }.first != nil
    }

    // MARK: Teams

    /// The operator's role in the container, or `nil` when not a member.
    public func teamRole(containerID: ContainerID, operatorID: OperatorID) async throws -> TeamRole? {
        try await database.withConnection { connection in
            try await connection.rows("""
                SELECT role FROM container_members WHERE container_id = \(containerID) AND operator_id = \(operatorID)
                """, logger: logger)
        }.first.flatMap { TeamRole(rawValue: try $0.decode(Int16.self)) }
    }

    /// The containers whose team the operator is in, by name, with their role in each.
    public func teamContainers(operatorID: OperatorID) async throws -> [(container: ContainerInfo, role: TeamRole)] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT c.container_id, c.name, c.identity_salt, c.created_at, m.role
                FROM container_members m JOIN containers c USING (container_id)
                WHERE m.operator_id = \(operatorID) ORDER BY c.name
                """, logger: logger)
        }
        return try rows.map { row in
            let (id, name, salt, created, role) = try row.decode((ContainerID, String, Data, Date, Int16).self)
            return (ContainerInfo(id: id, name: name, identitySalt: Array(salt), createdAt: created), TeamRole(rawValue: role) ?? .viewer)
        }
    }

    /// A container's team, owners first.
    public func team(containerID: ContainerID) async throws -> [TeamMember] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT \(unescaped: Self.operatorColumns), m.role, m.added_at
                FROM container_members m JOIN operators o USING (operator_id)
                WHERE m.container_id = \(containerID) ORDER BY m.role DESC, o.email
                """, logger: logger)
        }
        return try rows.map { row in
            let (id, email, superuser, created, disabled, role, added) = try row.decode((Int64, String, Bool, Date, Date?, Int16, Date).self)
            return TeamMember(operatorInfo: OperatorInfo(operatorID: OperatorID(id), email: email, superuser: superuser, createdAt: created, disabledAt: disabled),
                              role: TeamRole(rawValue: role) ?? .viewer, addedAt: added)
        }
    }

    /// Adds an operator to a container's team; `EXISTS` when they are in it already.
    public func addTeamMember(container: ContainerInfo, member: OperatorInfo, role: TeamRole, by actor: AuditActor) async throws -> TeamMember {
        try await database.transaction { connection in
            guard let row = try await connection.rows("""
                INSERT INTO container_members (container_id, operator_id, role) VALUES (\(container.id), \(member.operatorID), \(role.rawValue))
                ON CONFLICT (container_id, operator_id) DO NOTHING RETURNING added_at
                """, logger: logger).first else {
                throw StratusError(.exists, "\(member.email) is in the team of '\(container.name)' already; change their role with 'stratus team set-role'")
            }
            try await AuditEntry(containerID: container.id, actor: actor, action: "team.add", target: member.email, detail: role.description)
                .write(on: connection, logger: logger)
            return TeamMember(operatorInfo: member, role: role, addedAt: try row.decode(Date.self))
        }
    }

    /// Changes a member's role (`role`) or removes them (`nil`). The container's only owner can
    /// neither leave nor stop being one: the owners' rows are locked first, so two owners
    /// removing each other at once cannot both succeed.
    public func changeTeamMember(container: ContainerInfo, member: OperatorInfo, role: TeamRole?, by actor: AuditActor) async throws -> TeamRole {
        try await database.transaction { connection in
            let rows = try await connection.rows("""
                SELECT operator_id, role FROM container_members
                WHERE container_id = \(container.id) AND (role = \(TeamRole.owner.rawValue) OR operator_id = \(member.operatorID))
                ORDER BY operator_id FOR UPDATE
                """, logger: logger).map { try $0.decode((Int64, Int16).self) }
            guard let current = rows.first(where: { $0.0 == member.operatorID.rawValue }).flatMap({ TeamRole(rawValue: $0.1) }) else {
                throw StratusError(.notFound, "\(member.email) is not in the team of '\(container.name)'")
            }
            let owners = rows.filter { $0.1 == TeamRole.owner.rawValue }.count
            if current == .owner, role != .owner, owners == 1 {
                throw StratusError(.badRequest, "\(member.email) is the only owner of '\(container.name)': add another owner first ('stratus team add --container \(container.name) --operator EMAIL --role owner')")
            }
            if let role {
                try await connection.statement("""
                    UPDATE container_members SET role = \(role.rawValue) WHERE container_id = \(container.id) AND operator_id = \(member.operatorID)
                    """, logger: logger)
            } else {
                try await connection.statement("""
                    DELETE FROM container_members WHERE container_id = \(container.id) AND operator_id = \(member.operatorID)
                    """, logger: logger)
            }
            try await AuditEntry(containerID: container.id, actor: actor, action: role == nil ? "team.remove" : "team.role", target: member.email,
                                 detail: role.map { "\(current) → \($0)" } ?? "was \(current)").write(on: connection, logger: logger)
            return current
        }
    }
}

import Foundation
import Logging
import PostgresNIO
import StratusCore

/// A server-to-server key as stored: its P-256 public key in X9.63 form.
public struct ServerKeyInfo: Sendable, Equatable {
    public var containerID: ContainerID
    public var containerName: String
    public var keyID: String
    public var environment: ContainerEnvironment
    public var name: String
    public var publicKey: Data
    public var createdAt: Date
    public var revokedAt: Date?
}

extension AdminStore {
    static let serverKeyColumns = "k.container_id, c.name, k.key_id, k.environment, k.name, k.public_key, k.created_at, k.revoked_at"

    static func serverKey(_ row: PostgresRow) throws -> ServerKeyInfo {
        let (container, containerName, keyID, environment, name, key, created, revoked) =
            try row.decode((ContainerID, String, String, Int16, String, Data, Date, Date?).self)
        return ServerKeyInfo(containerID: container, containerName: containerName, keyID: keyID,
                             environment: environment == 1 ? .development : .production, name: name, publicKey: key,
                             createdAt: created, revokedAt: revoked)
    }

    /// Registers a public key under a new random key ID (64 hex digits); audited.
    public func addServerKey(container: ContainerInfo, environment: ContainerEnvironment, name: String, publicKey: Data,
                             by actor: AuditActor) async throws -> ServerKeyInfo {
        var generator = SystemRandomNumberGenerator()
        let keyID = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
        return try await database.transaction { connection in
            let rows = try await connection.rows("""
                WITH k AS (
                    INSERT INTO server_keys (container_id, key_id, environment, name, public_key)
                    VALUES (\(container.id), \(keyID), \(environment.code), \(name), \(publicKey))
                    RETURNING *)
                SELECT \(unescaped: Self.serverKeyColumns) FROM k JOIN containers c ON c.container_id = k.container_id
                """, logger: logger)
            try await AuditEntry(containerID: container.id, actor: actor, action: "key.add", environment: environment,
                                 target: keyID, detail: "name \(name)").write(on: connection, logger: logger)
            return try Self.serverKey(rows[0])
        }
    }

    /// The keys of a container, newest first.
    public func serverKeys(containerID: ContainerID) async throws -> [ServerKeyInfo] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT \(unescaped: Self.serverKeyColumns) FROM server_keys k JOIN containers c ON c.container_id = k.container_id
                WHERE k.container_id = \(containerID) ORDER BY k.created_at DESC, k.key_id
                """, logger: logger)
        }
        return try rows.map(Self.serverKey)
    }

    /// The key with `keyID` in the container, or `nil`. Looked up within the container the
    /// request names, so that on Citus it is one worker's read.
    public func serverKey(keyID: String, containerID: ContainerID) async throws -> ServerKeyInfo? {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT \(unescaped: Self.serverKeyColumns) FROM server_keys k JOIN containers c ON c.container_id = k.container_id
                WHERE k.container_id = \(containerID) AND k.key_id = \(keyID)
                """, logger: logger)
        }
        return try rows.first.map(Self.serverKey)
    }

    /// Revokes a key of the container (by its ID or a prefix of at least 8 digits naming one key);
    /// every server process refuses it when the transaction commits. Audited.
    public func revokeServerKey(containerID: ContainerID, idOrPrefix: String, by actor: AuditActor) async throws -> ServerKeyInfo {
        try await database.transaction { connection in
            let prefix = idOrPrefix.lowercased()
            let rows = try await connection.rows("""
                WITH k AS (
                    UPDATE server_keys SET revoked_at = coalesce(revoked_at, \(Date()))
                    WHERE container_id = \(containerID) AND key_id IN (
                        SELECT key_id FROM server_keys WHERE container_id = \(containerID) AND starts_with(key_id, \(prefix))
                        AND length(\(prefix)) >= 8 LIMIT 2)
                    RETURNING *)
                SELECT \(unescaped: Self.serverKeyColumns) FROM k JOIN containers c ON c.container_id = k.container_id
                """, logger: logger)
            guard rows.count == 1 else {
                throw rows.isEmpty
                    ? StratusError(.notFound, "no server-to-server key '\(idOrPrefix)' in this container; 'stratus key list' shows the key IDs")
                    : StratusError.badRequest("'\(idOrPrefix)' is the start of several key IDs; give more of it")
            }
            let key = try Self.serverKey(rows[0])
            try await AuditEntry(containerID: containerID, actor: actor, action: "key.revoke", environment: key.environment,
                                 target: key.keyID, detail: "name \(key.name)").write(on: connection, logger: logger)
            try await Invalidations.publish(.serverKey(containerID: containerID, keyID: key.keyID), on: connection, logger: logger)
            return key
        }
    }

    /// Records a signed request's digest for its key until `expires`; `false` when it was
    /// already recorded (a replay). Now and then the key's expired digests are dropped.
    public func recordSignature(containerID: ContainerID, keyID: String, digest: Data, expires: Date) async throws -> Bool {
        try await database.withConnection { connection in
            if UInt8.random(in: 0...63) == 0 {
                try await connection.statement("""
                    DELETE FROM signature_replays WHERE container_id = \(containerID) AND key_id = \(keyID) AND expires_at < now()
                    """, logger: logger)
            }
            let inserted = try await connection.rows("""
                INSERT INTO signature_replays (container_id, key_id, digest, expires_at)
                VALUES (\(containerID), \(keyID), \(digest), \(expires))
                ON CONFLICT (container_id, key_id, digest) DO UPDATE SET expires_at = excluded.expires_at
                  WHERE signature_replays.expires_at < \(Date())
                RETURNING 1
                """, logger: logger)
            return !inserted.isEmpty
        }
    }

    /// The environments of the server-to-server keys an ID or prefix (of at least 8 digits) names in the container.
    public func serverKeyEnvironments(containerID: ContainerID, idOrPrefix: String) async throws -> Set<ContainerEnvironment> {
        let prefix = idOrPrefix.lowercased()
        return Set(try await database.withConnection { connection in
            try await connection.rows("""
                SELECT DISTINCT environment FROM server_keys
                WHERE container_id = \(containerID) AND starts_with(key_id, \(prefix)) AND length(\(prefix)) >= 8
                """, logger: logger)
        }.map { try $0.decode(Int16.self) == 1 ? ContainerEnvironment.development : .production })
    }
}

import Foundation
import Logging
import PostgresNIO
import StratusCore

/// A member of a custom security role.
public struct RoleMember: Sendable, Equatable {
    public var userRecordName: UserID
    public var email: String
    public var addedAt: Date
}

extension AdminStore {
    /// Gives `role` (a custom role of the environment's schema, checked by the caller) to `user`
    /// (a user record name or an email address); audited, and every server process forgets the
    /// environment's memberships when it commits. Returns the member and whether they were new.
    public func assignRole(containerID: ContainerID, environment: ContainerEnvironment, role: String, user: String,
                           by actor: AuditActor) async throws -> (member: RoleMember, added: Bool) {
        try await database.transaction { connection in
            let found = try await connection.rows("""
                SELECT user_record_name, email FROM users
                WHERE container_id = \(containerID) AND (user_record_name = \(user) OR email = lower(\(user)))
                """, logger: logger)
            guard let row = found.first else {
                throw StratusError(.notFound, "no user '\(user)' in this container; give a user record name or an email address")
            }
            let (name, email) = try row.decode((String, String).self)
            let inserted = try await connection.rows("""
                INSERT INTO role_members (container_id, environment, role, user_record_name)
                VALUES (\(containerID), \(environment.code), \(role), \(name))
                ON CONFLICT DO NOTHING RETURNING added_at
                """, logger: logger)
            var addedAt = Date()
            if let row = inserted.first {
                addedAt = try row.decode(Date.self)
                try await AuditEntry(containerID: containerID, actor: actor, action: "role.assign", environment: environment,
                                     target: name, detail: "role \(role)").write(on: connection, logger: logger)
                try await Invalidations.publish(.roles(containerID: containerID, environment: environment), on: connection, logger: logger)
            }
            return (RoleMember(userRecordName: UserID(name), email: email, addedAt: addedAt), !inserted.isEmpty)
        }
    }

    /// Takes `role` from `user`; `NOT_FOUND` when the user does not hold it. Audited.
    public func unassignRole(containerID: ContainerID, environment: ContainerEnvironment, role: String, user: String,
                             by actor: AuditActor) async throws -> String {
        try await database.transaction { connection in
            let removed = try await connection.rows("""
                DELETE FROM role_members m USING users u
                WHERE m.container_id = \(containerID) AND m.environment = \(environment.code) AND m.role = \(role)
                  AND u.container_id = m.container_id AND u.user_record_name = m.user_record_name
                  AND (u.user_record_name = \(user) OR u.email = lower(\(user)))
                RETURNING m.user_record_name
                """, logger: logger)
            guard let row = removed.first else {
                throw StratusError(.notFound, "user '\(user)' is not a member of role '\(role)' in \(environment.rawValue)")
            }
            let name = try row.decode(String.self)
            try await AuditEntry(containerID: containerID, actor: actor, action: "role.unassign", environment: environment,
                                 target: name, detail: "role \(role)").write(on: connection, logger: logger)
            try await Invalidations.publish(.roles(containerID: containerID, environment: environment), on: connection, logger: logger)
            return name
        }
    }

    /// The members of `role`, oldest first.
    public func roleMembers(containerID: ContainerID, environment: ContainerEnvironment, role: String) async throws -> [RoleMember] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT m.user_record_name, coalesce(u.email, ''), m.added_at FROM role_members m
                LEFT JOIN users u ON u.container_id = m.container_id AND u.user_record_name = m.user_record_name
                WHERE m.container_id = \(containerID) AND m.environment = \(environment.code) AND m.role = \(role)
                ORDER BY m.added_at, m.user_record_name
                """, logger: logger)
        }
        return try rows.map { row in
            let (name, email, added) = try row.decode((String, String, Date).self)
            return RoleMember(userRecordName: UserID(name), email: email, addedAt: added)
        }
    }

    /// How many members each role of one environment has (roles without members are absent).
    public func roleMemberCounts(containerID: ContainerID, environment: ContainerEnvironment) async throws -> [String: Int64] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT role, count(*) FROM role_members
                WHERE container_id = \(containerID) AND environment = \(environment.code) GROUP BY role
                """, logger: logger)
        }
        return Dictionary(uniqueKeysWithValues: try rows.map { try $0.decode((String, Int64).self) })
    }

    /// The custom roles `user` holds in one environment.
    public func roles(containerID: ContainerID, environment: ContainerEnvironment, user: UserID) async throws -> Set<String> {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT role FROM role_members
                WHERE container_id = \(containerID) AND environment = \(environment.code) AND user_record_name = \(user)
                """, logger: logger)
        }
        return Set(try rows.map { try $0.decode(String.self) })
    }
}

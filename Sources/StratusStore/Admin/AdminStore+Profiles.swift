import Foundation
import Logging
import PostgresNIO
import StratusCore

/// What others may learn of a user: their names, and whether they let themselves be found.
public struct UserProfile: Sendable, Equatable {
    public var userRecordName: String
    public var email: String
    public var givenName: String?
    public var familyName: String?
    public var discoverable: Bool

    public init(userRecordName: String, email: String, givenName: String? = nil, familyName: String? = nil, discoverable: Bool = false) {
        self.userRecordName = userRecordName
        self.email = email
        self.givenName = givenName
        self.familyName = familyName
        self.discoverable = discoverable
    }
}

extension AdminStore {
    static func profile(_ row: PostgresRow) throws -> UserProfile {
        let (name, email, given, family, discoverable) = try row.decode((String, String, String?, String?, Bool).self)
        return UserProfile(userRecordName: name, email: email, givenName: given, familyName: family, discoverable: discoverable)
    }

    /// The profile of `user` (disabled or not), or `nil`.
    public func profile(containerID: Int64, user: String) async throws -> UserProfile? {
        try await database.withConnection { connection in
            try await connection.rows("""
                SELECT user_record_name, email, given_name, family_name, discoverable FROM users
                WHERE container_id = \(containerID) AND user_record_name = \(user)
                """, logger: logger)
        }.first.map(Self.profile)
    }

    /// Changes what is given of a user's profile (`nil` leaves a part as it is) and returns it.
    public func updateProfile(containerID: Int64, user: String, discoverable: Bool?, givenName: String??, familyName: String??) async throws -> UserProfile? {
        try await database.withConnection { connection in
            try await connection.rows("""
                UPDATE users SET discoverable = coalesce(\(discoverable), discoverable),
                       given_name = CASE WHEN \(givenName != nil) THEN \(givenName ?? nil) ELSE given_name END,
                       family_name = CASE WHEN \(familyName != nil) THEN \(familyName ?? nil) ELSE family_name END
                WHERE container_id = \(containerID) AND user_record_name = \(user)
                RETURNING user_record_name, email, given_name, family_name, discoverable
                """, logger: logger)
        }.first.map(Self.profile)
    }

    /// The users among `emails` and `userRecordNames` who let themselves be found (discoverable,
    /// not disabled). Anyone else is left out, exactly like an address nobody uses.
    public func discoverableUsers(containerID: Int64, emails: [String], userRecordNames: [String]) async throws -> [UserProfile] {
        guard !emails.isEmpty || !userRecordNames.isEmpty else { return [] }
        return try await database.withConnection { connection in
            try await connection.rows("""
                SELECT user_record_name, email, given_name, family_name, discoverable FROM users
                WHERE container_id = \(containerID) AND discoverable AND disabled_at IS NULL
                  AND (email = ANY(\(emails)) OR user_record_name = ANY(\(userRecordNames)))
                """, logger: logger)
        }.map(Self.profile)
    }
}

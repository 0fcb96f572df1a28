import Foundation
import Logging
import PostgresNIO
import StratusCore

/// A signed-in session, as stored.
public struct SessionRecord: Sendable, Equatable {
    public var containerID: ContainerID
    public var sessionID: SessionID
    public var environment: ContainerEnvironment
    public var user: UserID
    public var expiresAt: Date
    public var lastUsedAt: Date
    public var endedAt: Date?
    /// Why it ended: `signed out`, `password changed`, `user disabled`.
    public var endReason: String?
}

/// Why a session cannot be used.
public enum SessionRefusal: Error, Sendable, Equatable {
    case unknown
    case ended(reason: String)
    case idle
    case expired
}

extension AdminStore {
    static let sessionColumns = "container_id, session_id, environment, user_record_name, expires_at, last_used_at, ended_at, end_reason"

    static func session(_ row: PostgresRow) throws -> SessionRecord {
        let (container, session, environment, user, expires, used, ended, reason) =
            try row.decode((ContainerID, Int64, Int16, String, Date, Date, Date?, String?).self)
        return SessionRecord(containerID: container, sessionID: SessionID(session), environment: environment == 1 ? .development : .production,
                             user: UserID(user), expiresAt: expires, lastUsedAt: used, endedAt: ended, endReason: reason)
    }

    /// Starts a session for `user` that ends at the latest after `lifetime`.
    public func createSession(containerID: ContainerID, environment: ContainerEnvironment, user: UserID, lifetime: Duration) async throws -> SessionRecord {
        let seconds = Double(lifetime.components.seconds)
        return try await database.withConnection { connection in
            try await connection.rows("""
                INSERT INTO sessions (container_id, environment, user_record_name, expires_at)
                VALUES (\(containerID), \(environment.code), \(user), now() + make_interval(secs => \(seconds)))
                RETURNING \(unescaped: Self.sessionColumns)
                """, logger: logger)
        }.first.map(Self.session)!
    }

    /// Marks a live session used now and returns it, or says why it cannot be used: ended, idle
    /// for longer than `idleTimeout`, past its absolute expiry, or unknown.
    public func useSession(containerID: ContainerID, sessionID: SessionID, idleTimeout: Duration) async throws -> Result<SessionRecord, SessionRefusal> {
        let idle = Double(idleTimeout.components.seconds)
        return try await database.withConnection { connection in
            let used = try await connection.rows("""
                UPDATE sessions SET last_used_at = now()
                WHERE container_id = \(containerID) AND session_id = \(sessionID) AND ended_at IS NULL
                  AND expires_at > now() AND last_used_at > now() - make_interval(secs => \(idle))
                RETURNING \(unescaped: Self.sessionColumns)
                """, logger: logger)
            if let row = used.first { return .success(try Self.session(row)) }
            let rows = try await connection.rows("""
                SELECT \(unescaped: Self.sessionColumns), expires_at <= now() FROM sessions
                WHERE container_id = \(containerID) AND session_id = \(sessionID)
                """, logger: logger)
            guard let row = rows.first else { return .failure(.unknown) }
            let session = try Self.session(row)
            if session.endedAt != nil { return .failure(.ended(reason: session.endReason ?? "signed out")) }
            var reader = row.makeRandomAccess()
            if try reader[8].decode(Bool.self) { return .failure(.expired) }
            return .failure(.idle)
        }
    }

    /// Ends one session (signing out); `false` when it had already ended. Every server process
    /// forgets it when the transaction commits.
    @discardableResult
    public func endSession(containerID: ContainerID, sessionID: SessionID, reason: String) async throws -> Bool {
        try await database.transaction { connection in
            let ended = try await connection.rows("""
                UPDATE sessions SET ended_at = now(), end_reason = \(reason)
                WHERE container_id = \(containerID) AND session_id = \(sessionID) AND ended_at IS NULL RETURNING 1
                """, logger: logger)
            try await Invalidations.publish(.session(containerID: containerID, sessionID: sessionID), on: connection, logger: logger)
            return !ended.isEmpty
        }
    }

    /// Ends every live session of `user` inside the caller's transaction, and forgets the devices
    /// they registered for pushes; returns how many sessions ended.
    @discardableResult
    public func endSessions(containerID: ContainerID, user: UserID, reason: String, on connection: PostgresConnection) async throws -> Int {
        let ended = try await connection.rows("""
            UPDATE sessions SET ended_at = now(), end_reason = \(reason)
            WHERE container_id = \(containerID) AND user_record_name = \(user) AND ended_at IS NULL RETURNING 1
            """, logger: logger)
        // Signed out everywhere: no device of theirs is pushed to until they register one again.
        try await SubscriptionStore.forgetPushDevices(containerID: containerID, user: user, on: connection, logger: logger)
        try await Invalidations.publish(.userSessions(containerID: containerID, user: user), on: connection, logger: logger)
        return ended.count
    }

    /// Replaces a user's password hash and ends all their sessions, in one transaction.
    public func changePassword(containerID: ContainerID, user: UserID, passwordHash: String) async throws {
        try await database.transaction { connection in
            try await connection.statement("""
                UPDATE users SET password_hash = \(passwordHash), password_changed_at = now()
                WHERE container_id = \(containerID) AND user_record_name = \(user)
                """, logger: logger)
            try await endSessions(containerID: containerID, user: user, reason: "password changed", on: connection)
        }
    }

    // MARK: Sign-in throttling

    /// Seconds until the first of `keys` that has `limit` or more failures in the current window
    /// (of `window`) may try again; `nil` when none is throttled.
    public func signInRetryAfter(containerID: ContainerID, keys: [(key: String, limit: Int)], window: Duration) async throws -> Int? {
        let seconds = Double(window.components.seconds)
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT f.key, f.failures, ceil(extract(epoch FROM f.window_start + make_interval(secs => \(seconds)) - now()))::int8
                FROM signin_failures f
                WHERE f.container_id = \(containerID) AND f.key = ANY(\(keys.map(\.key)))
                  AND f.window_start > now() - make_interval(secs => \(seconds))
                """, logger: logger)
        }
        var wait: Int?
        for row in rows {
            let (key, failures, remaining) = try row.decode((String, Int32, Int64).self)
            guard let limit = keys.first(where: { $0.key == key })?.limit, Int(failures) >= limit else { continue }
            wait = max(wait ?? 0, max(1, Int(remaining)))
        }
        return wait
    }

    /// Counts a failed sign-in against each key (a new window when the last one has passed).
    public func recordSignInFailure(containerID: ContainerID, keys: [String], window: Duration) async throws {
        // The time is bound, not now(): Citus allows only immutable functions in DO UPDATE SET.
        let now = Date()
        let windowStart = now.addingTimeInterval(-Double(window.components.seconds))
        // One row per statement (two at most): Citus could not type the parameters of the
        // INSERT … SELECT it sent on to the worker.
        try await database.withConnection { connection in
            for key in keys {
                try await connection.statement("""
                    INSERT INTO signin_failures (container_id, key, window_start, failures) VALUES (\(containerID), \(key), \(now), 1)
                    ON CONFLICT (container_id, key) DO UPDATE SET
                        failures = CASE WHEN signin_failures.window_start > \(windowStart) THEN signin_failures.failures + 1 ELSE 1 END,
                        window_start = CASE WHEN signin_failures.window_start > \(windowStart) THEN signin_failures.window_start ELSE \(now) END
                    """, logger: logger)
            }
        }
    }

    // MARK: Sign-up limits

    /// Counts a sign-up attempt against its client address (when known) and, if that is within
    /// `perAddress`, against the environment's `total`, each in an hour-long window. Returns the
    /// seconds until the refusing window ends, or nil when the attempt may go on. Either way the
    /// attempt is added to `stratus usage`'s counts (of the 10-second bucket of `second`).
    public func admitSignup(containerID: ContainerID, environment: ContainerEnvironment, address: String?, perAddress: Int64, total: Int64,
                            second: Int64) async throws -> Int? {
        try await database.withConnection { connection in
            // The seconds left are worked out here: Citus allows no `now()` in a RETURNING clause.
            func count(_ key: String) async throws -> (attempts: Int64, remaining: Int64) {
                // The time is bound, not now(): Citus allows only immutable functions in DO UPDATE SET.
                let now = Date()
                let hourAgo = now.addingTimeInterval(-3_600)
                let (attempts, start) = try await connection.rows("""
                    INSERT INTO signup_attempts AS a (container_id, environment, key, window_start, attempts)
                    VALUES (\(containerID), \(environment.code), \(key), \(now), 1)
                    ON CONFLICT (container_id, environment, key) DO UPDATE SET
                        attempts = CASE WHEN a.window_start > \(hourAgo) THEN a.attempts + 1 ELSE 1 END,
                        window_start = CASE WHEN a.window_start > \(hourAgo) THEN a.window_start ELSE \(now) END
                    RETURNING attempts::int8, window_start
                    """, logger: self.logger).first!.decode((Int64, Date).self)
                return (attempts, Int64((start.timeIntervalSinceNow + 3_600).rounded(.up)))
            }
            var wait: Int?
            if let address {
                let window = try await count("address:" + address)
                if window.attempts > perAddress { wait = Int(max(1, window.remaining)) }
            }
            if wait == nil {
                let window = try await count("")
                if window.attempts > total { wait = Int(max(1, window.remaining)) }
            }
            let (admitted, throttled) = wait == nil ? (1, 0) : (0, 1)
            try await connection.statement("""
                INSERT INTO request_counts AS r (container_id, environment, bucket, requests, throttled, refused, signups, signups_throttled)
                VALUES (\(containerID), \(environment.code), \(second / 10 * 10), 0, 0, 0, \(admitted), \(throttled))
                ON CONFLICT (container_id, environment, bucket) DO UPDATE
                SET signups = r.signups + excluded.signups, signups_throttled = r.signups_throttled + excluded.signups_throttled
                """, logger: self.logger)
            return wait
        }
    }

    /// Forgets the failures counted against `key` (after a successful sign-in).
    public func clearSignInFailures(containerID: ContainerID, key: String) async throws {
        try await database.withConnection { connection in
            try await connection.statement("DELETE FROM signin_failures WHERE container_id = \(containerID) AND key = \(key)", logger: logger)
        }
    }
}

/// A user as the management API lists it.
public struct UserSummary: Sendable, Equatable {
    public var userRecordName: UserID
    public var email: String
    public var createdAt: Date
    public var disabledAt: Date?
    /// Live sessions in the environment asked about.
    public var liveSessions: Int64
}

extension AdminStore {
    /// The container's users (oldest first), with their live sessions in `environment`; `user`
    /// narrows to one, by record name or email address.
    public func users(containerID: ContainerID, environment: ContainerEnvironment, user: String? = nil, limit: Int = 10_000) async throws -> [UserSummary] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT u.user_record_name, u.email, u.created_at, u.disabled_at,
                       (SELECT count(*) FROM sessions s WHERE s.container_id = \(containerID) AND s.user_record_name = u.user_record_name
                          AND s.environment = \(environment.code) AND s.ended_at IS NULL AND s.expires_at > now())
                FROM users u
                WHERE u.container_id = \(containerID) AND (\(user)::text IS NULL OR u.user_record_name = \(user) OR u.email = lower(\(user)))
                ORDER BY u.created_at, u.user_record_name LIMIT \(limit)
                """, logger: logger)
        }
        return try rows.map { row in
            let (name, email, created, disabled, sessions) = try row.decode((String, String, Date, Date?, Int64).self)
            return UserSummary(userRecordName: UserID(name), email: email, createdAt: created, disabledAt: disabled, liveSessions: sessions)
        }
    }

    /// Disables a user (they cannot sign in, and every session of theirs ends at once, on every
    /// server process) or enables them again; audited. `NOT_FOUND` for an unknown user.
    public func setUserDisabled(containerID: ContainerID, user: String, disabled: Bool, by actor: AuditActor) async throws -> UserSummary {
        try await database.transaction { connection in
            let rows = try await connection.rows("""
                UPDATE users SET disabled_at = CASE WHEN \(disabled) THEN coalesce(disabled_at, \(Date())) ELSE NULL END
                WHERE container_id = \(containerID) AND (user_record_name = \(user) OR email = lower(\(user)))
                RETURNING user_record_name, email, created_at, disabled_at
                """, logger: logger)
            guard let row = rows.first else {
                throw StratusError(.notFound, "no user '\(user)' in this container; give a user record name or an email address")
            }
            let (name, email, created, disabledAt) = try row.decode((String, String, Date, Date?).self)
            var ended = 0
            if disabled { ended = try await endSessions(containerID: containerID, user: UserID(name), reason: "user disabled", on: connection) }
            try await AuditEntry(containerID: containerID, actor: actor, action: disabled ? "user.disable" : "user.enable", target: name,
                                 detail: disabled ? "\(ended) session\(ended == 1 ? "" : "s") ended" : "").write(on: connection, logger: logger)
            return UserSummary(userRecordName: UserID(name), email: email, createdAt: created, disabledAt: disabledAt, liveSessions: 0)
        }
    }
}

/// What others may learn of a user: their names, and whether they let themselves be found.
public struct UserProfile: Sendable, Equatable {
    public var userRecordName: UserID
    public var email: String
    public var givenName: String?
    public var familyName: String?
    public var discoverable: Bool

    public init(userRecordName: UserID, email: String, givenName: String? = nil, familyName: String? = nil, discoverable: Bool = false) {
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
        return UserProfile(userRecordName: UserID(name), email: email, givenName: given, familyName: family, discoverable: discoverable)
    }

    /// The profile of `user` (disabled or not), or `nil`.
    public func profile(containerID: ContainerID, user: UserID) async throws -> UserProfile? {
        try await database.withConnection { connection in
            try await connection.rows("""
                SELECT user_record_name, email, given_name, family_name, discoverable FROM users
                WHERE container_id = \(containerID) AND user_record_name = \(user)
                """, logger: logger)
        }.first.map(Self.profile)
    }

    /// Changes what is given of a user's profile (`nil` leaves a part as it is) and returns it.
    public func updateProfile(containerID: ContainerID, user: UserID, discoverable: Bool?, givenName: String??, familyName: String??) async throws -> UserProfile? {
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
    public func discoverableUsers(containerID: ContainerID, emails: [String], userRecordNames: [String]) async throws -> [UserProfile] {
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

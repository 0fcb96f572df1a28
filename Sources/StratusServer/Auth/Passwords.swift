import Foundation
import HummingbirdBcrypt
import NIOPosix
import StratusCore
import StratusStore

/// Passwords of app users and operators: what a new one must be, and checking one, throttled
/// per account and per client address.
struct Passwords: Sendable {
    let admin: AdminStore
    /// A bcrypt hash of nothing, verified against when an email is unknown so sign-in takes as long either way.
    let dummyPasswordHash: String
    let bcryptCost: UInt8

    /// A bcrypt hash of `password`, made off the event loops.
    func hash(_ password: String) async throws -> String {
        let cost = bcryptCost
        return try await NIOThreadPool.singleton.runIfActive { Bcrypt.hash(password, cost: cost) }
    }

    /// Failed sign-ins allowed per account, and per client address, in `signInWindow`; past
    /// them, sign-in is answered THROTTLED with the seconds left in the window.
    static let signInFailuresPerAccount = 10
    static let signInFailuresPerAddress = 50
    static let signInWindow: Duration = .seconds(15 * 60)

    /// The throttling keys of a sign-in attempt for `email`: the account, and the client address when known.
    static func signInKeys(email: String) -> [(key: String, limit: Int)] {
        var keys = [(key: "email:" + email, limit: signInFailuresPerAccount)]
        if let address = ClientAddress.current { keys.append((key: "address:" + address, limit: signInFailuresPerAddress)) }
        return keys
    }

    /// Checks `password` against the account of `email`, throttled per account and per client
    /// address. Failures are counted; a success clears the account's count. The reason never
    /// says whether the address exists (a missing account is verified against a dummy hash, so
    /// it takes as long).
    func verifyPassword(containerID: ContainerID, email: String, password: String) async throws -> UserAccount {
        let account = try await throttledPasswordCheck(password, keys: Self.signInKeys(email: email), throttling: containerID) {
            let account = try await admin.user(containerID: containerID, email: email)
            return (account, account?.passwordHash)
        }
        guard account.disabledAt == nil else {
            throw StratusError(.authenticationFailed, "this account is disabled; ask the app's administrator")
        }
        return account
    }

    /// Checks `password` against the hash of the account `find` gives, throttled by `keys`
    /// (counted under container `throttling`; the first key is the account's, cleared on a
    /// success). An unknown account is verified against a dummy hash, so it takes as long, and
    /// the refusal never says which of email and password was wrong.
    func throttledPasswordCheck<Account: Sendable>(_ password: String, keys: [(key: String, limit: Int)], throttling containerID: ContainerID,
                                                   find: () async throws -> (Account?, String?)) async throws -> Account {
        if let wait = try await admin.signInRetryAfter(containerID: containerID, keys: keys, window: Self.signInWindow) {
            throw StratusError(.throttled, "too many failed sign-ins for this account or from this address; try again in \(wait) seconds",
                               retryAfter: wait)
        }
        let (account, found) = try await find()
        let hash = found ?? dummyPasswordHash
        let valid = try await NIOThreadPool.singleton.runIfActive { Bcrypt.verify(password, hash: hash) }
        guard let account, valid else {
            try await admin.recordSignInFailure(containerID: containerID, keys: keys.map(\.key), window: Self.signInWindow)
            throw StratusError(.authenticationFailed, "the email address or password is wrong")
        }
        try await admin.clearSignInFailures(containerID: containerID, key: keys[0].key)
        return account
    }

    /// A new password's rules: 8 characters at least, 72 bytes at most (bcrypt reads no more), no NUL.
    static func validateNewPassword(_ password: String) throws(StratusError) {
        guard !password.utf8.contains(0) else { throw .badRequest("the password must not contain NUL characters") }
        guard password.count >= 8 else { throw .badRequest("the password must have at least 8 characters") }
        guard password.utf8.count <= 72 else { throw .badRequest("the password must be at most 72 bytes long") }
    }

    static func credentials(_ body: [String: JSON]) throws(StratusError) -> (email: String, password: String) {
        guard let rawEmail = try Wire.string(body["emailAddress"], key: "emailAddress") else {
            throw StratusError.badRequest("missing required key 'emailAddress'")
        }
        guard let password = try Wire.string(body["password"], key: "password") else {
            throw StratusError.badRequest("missing required key 'password'")
        }
        // bcrypt reads C strings: a NUL would silently cut the password short.
        guard !password.utf8.contains(0) else { throw StratusError.badRequest("the password must not contain NUL characters") }
        let email = UsersController.normalizedEmail(rawEmail)
        let parts = email.split(separator: "@", omittingEmptySubsequences: false)
        guard email.utf8.count <= 254, parts.count == 2, !parts[0].isEmpty, parts[1].contains("."),
              email.unicodeScalars.allSatisfy({ Names.isPrintable($0) && $0 != " " }) else {
            throw StratusError.badRequest("'emailAddress' is not a valid email address")
        }
        return (email, password)
    }

    /// Failed operator sign-ins allowed per account and per address, as for users (counted
    /// apart from every container's users).
    static func operatorSignInKeys(email: String) -> [(key: String, limit: Int)] {
        var keys = [(key: "operator:" + email, limit: signInFailuresPerAccount)]
        if let address = ClientAddress.current { keys.append((key: "operator-address:" + address, limit: signInFailuresPerAddress)) }
        return keys
    }

    /// An operator's password, checked as users' are (throttled, same time for unknown accounts).
    func verifyOperatorPassword(email: String, password: String) async throws -> OperatorInfo {
        let account = try await throttledPasswordCheck(password, keys: Self.operatorSignInKeys(email: email), throttling: serverAuditContainerID) {
            let found = try await admin.operatorStore.operatorAccount(email)
            return (found?.info, found?.passwordHash)
        }
        guard account.disabledAt == nil else {
            throw StratusError(.authenticationFailed, "the operator account \(account.email) is disabled; ask a superuser")
        }
        return account
    }
}

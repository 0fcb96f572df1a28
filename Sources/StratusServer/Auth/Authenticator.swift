import Foundation
import Hummingbird
import StratusCore
import StratusStore
import Synchronization

/// Who is calling a data endpoint.
struct Caller: Sendable {
    var container: ContainerInfo
    var environment: ContainerEnvironment
    /// The signed-in user's record name, if a valid web auth token came with the request.
    var user: String?
    /// The web auth token as sent (echoed in `x-apple-cloudkit-session`).
    var webAuthToken: String?

    /// The user, or 421 `AUTHENTICATION_REQUIRED` with a `redirectURL`.
    func requireUser(signInURL: String) throws(StratusError) -> String {
        guard let user else {
            throw StratusError(.authenticationRequired, "this request needs a signed-in user: sign in and send the ckWebAuthToken query parameter",
                               redirectURL: signInURL)
        }
        return user
    }
}

/// Resolves API tokens, web auth tokens and the admin token. API tokens and containers are
/// cached so that a request does not read them from the database: with thousands of small
/// tenants each calling now and then, a short cache would miss on almost every request. A token
/// revoked through this process stops working at once (`forget(tokenID:)`); another server
/// process sharing the database notices within `cacheLifetime`.
final class Authenticator: Sendable {
    static let webAuthPurpose = "ckWebAuthToken"
    let admin: AdminStore
    let sealer: TokenSealer
    let configuration: ServerConfiguration
    /// How many API tokens, containers and verified web auth tokens each cache keeps: enough for
    /// every tenant of a large deployment (an entry is a key string and a few small fields).
    static let cacheCapacity = 100_000
    private let tokens = Mutex(ExpiringCache<String, APITokenInfo?>(capacity: cacheCapacity))
    private let containers = Mutex(ExpiringCache<String, ContainerInfo?>(capacity: cacheCapacity))
    /// Verified web auth tokens: token → (container id, user, expiry in seconds since the epoch).
    private let sessions = Mutex(ExpiringCache<String, (Int64, String, Int64)>(capacity: cacheCapacity))
    let cacheLifetime: Duration = .seconds(60)

    init(admin: AdminStore, sealer: TokenSealer, configuration: ServerConfiguration) {
        self.admin = admin
        self.sealer = sealer
        self.configuration = configuration
    }

    /// The container named in the path, or `NOT_FOUND`.
    func container(named name: String) async throws -> ContainerInfo {
        try Names.validateContainer(name)
        let now = ContinuousClock.now
        if let cached = containers.withLock({ $0.value(for: name, now: now) }), let value = cached { return value }
        let found = try await admin.container(named: name)
        // A container is never deleted and what is cached of it never changes, so a found one is
        // kept for an hour (a tenant calling now and then finds it cached); a miss for 2 seconds
        // (a create may soon fix it).
        containers.withLock { $0.set(found, for: name, expires: now + (found == nil ? .seconds(2) : .seconds(3600)), now: now) }
        guard let found else { throw StratusError(.notFound, "container '\(name)' does not exist; create it with 'stratus container create \(name)'") }
        return found
    }

    /// The API token's metadata, or `nil` for unknown tokens.
    func apiToken(_ token: String) async throws -> APITokenInfo? {
        guard !token.isEmpty, token.utf8.count <= 200 else { return nil }
        let now = ContinuousClock.now
        if let cached = tokens.withLock({ $0.value(for: token, now: now) }) { return cached }
        let info = try await admin.apiToken(hash: TokenSealer.hash(token))
        // An unknown token is remembered briefly (a client retrying a bad token costs no reads),
        // a known one for the cache lifetime.
        tokens.withLock { $0.set(info, for: token, expires: now + (info == nil ? .seconds(5) : cacheLifetime), now: now) }
        return info
    }

    /// Drops a revoked token from the cache so it fails on its next use.
    func forget(tokenID: Int64) {
        tokens.withLock { $0.removeAll { $0?.tokenID == tokenID } }
    }

    /// Authenticates a data-API request for `containerName`/`environmentSegment`.
    func authenticate(_ request: Request, containerName: String, environmentSegment: String) async throws -> Caller {
        let environment = try ContainerEnvironment(segment: environmentSegment)
        let container = try await container(named: containerName)
        let query = request.uri.queryParameters
        guard let tokenText = query.get("ckAPIToken") else {
            throw StratusError(.authenticationFailed, "missing ckAPIToken query parameter; create an API token with 'stratus token create'")
        }
        guard let token = try await apiToken(tokenText), token.revokedAt == nil else {
            throw StratusError(.authenticationFailed, "the ckAPIToken is not valid (unknown or revoked)")
        }
        guard token.containerID == container.id, token.environment == environment else {
            throw StratusError(.authenticationFailed, "the ckAPIToken belongs to another container or environment")
        }
        var caller = Caller(container: container, environment: environment)
        if let webToken = query.get("ckWebAuthToken") ?? query.get("ckSession"), !webToken.isEmpty {
            caller.user = try user(fromWebAuthToken: webToken, containerID: container.id)
            caller.webAuthToken = webToken
        }
        return caller
    }

    /// The user a web auth token names, checked against the container and its expiry.
    func user(fromWebAuthToken token: String, containerID: Int64) throws(StratusError) -> String {
        let container: Int64
        let user: String
        let expires: Int64
        let now = ContinuousClock.now
        if let cached = sessions.withLock({ $0.value(for: token, now: now) }) {
            (container, user, expires) = cached
        } else {
            guard let payload = sealer.open(token, purpose: Self.webAuthPurpose),
                  case .int(let c)? = payload["c"], case .string(let u)? = payload["u"], case .int(let x)? = payload["x"]
            else {
                throw StratusError(.authenticationFailed, "the ckWebAuthToken is not valid; sign in again")
            }
            (container, user, expires) = (c, u, x)
            // The token carries its own expiry (checked below); the cache entry only bounds memory.
            sessions.withLock { $0.set((c, u, x), for: token, expires: now + cacheLifetime, now: now) }
        }
        guard container == containerID else {
            throw StratusError(.authenticationFailed, "the ckWebAuthToken was issued for another container; sign in to this one")
        }
        guard expires > Int64(Date().timeIntervalSince1970) else {
            throw StratusError(.authenticationFailed, "the ckWebAuthToken has expired; sign in again")
        }
        return user
    }

    /// A new web auth token for `user` in `containerID`.
    func webAuthToken(user: String, containerID: Int64) -> String {
        let expires = Int64(Date().timeIntervalSince1970) + configuration.sessionLifetime
        return sealer.seal(["c": .int(containerID), "u": .string(user), "x": .int(expires)], purpose: Self.webAuthPurpose)
    }

    /// Checks `Authorization: Bearer <admin token>` on management requests.
    func requireAdmin(_ request: Request) throws(StratusError) {
        guard let expected = configuration.adminToken, !expected.isEmpty else {
            throw StratusError(.authenticationFailed, "the management API is disabled: start the server with STRATUS_ADMIN_TOKEN set")
        }
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else {
            throw StratusError(.authenticationFailed, "missing admin token: send 'Authorization: Bearer <STRATUS_ADMIN_TOKEN>'")
        }
        guard TokenSealer.constantTimeEquals(String(header.dropFirst(7)), expected) else {
            throw StratusError(.authenticationFailed, "the admin token is wrong")
        }
    }

    /// Where `redirectURL` sends a user to sign in.
    func signInURL(container: String, environment: ContainerEnvironment) -> String {
        "\(configuration.publicURL)/auth/1/\(container)/\(environment.rawValue)/signin"
    }
}

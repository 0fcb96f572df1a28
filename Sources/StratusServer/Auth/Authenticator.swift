import Crypto
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
    var user: UserID?
    /// The web auth token as sent (echoed in `x-apple-cloudkit-session`).
    var webAuthToken: String?
    /// The session the web auth token names.
    var sessionID: SessionID?
    /// The custom roles the user holds in this environment (read only when the schema has any).
    var roles: Set<String> = []
    /// The API token as sent (the sign-in page's address carries it, for its callback and origins).
    var apiToken: String?
    /// The server-to-server key that signed the request. Such a caller acts on the public
    /// database with the container administrator's privileges (no security role restricts it);
    /// `user` is then `_key_<key ID>`, the creator its records get.
    var serverKey: String?

    /// The user, or 421 `AUTHENTICATION_REQUIRED` with a `redirectURL` (built only then: every
    /// data request asks).
    func requireUser(signInURL: @autoclosure () -> String) throws(StratusError) -> UserID {
        guard let user else {
            throw StratusError(.authenticationRequired, "this request needs a signed-in user: sign in and send the ckWebAuthToken query parameter",
                               redirectURL: signInURL())
        }
        return user
    }
}

/// Resolves API tokens, web auth tokens and the admin token. API tokens, containers and sessions
/// are cached so that a request does not read them from the database: with thousands of small
/// tenants each calling now and then, a short cache would miss on almost every request. A token
/// revoked or a session ended through any server process sharing the database is forgotten by
/// every process when the change commits (`Invalidations`).
///
/// A web auth token is sealed (HMAC) and names a session row: its container, environment, user
/// and absolute expiry are in the token; whether it has ended (sign-out, password change, user
/// disabled) or sat idle too long is in the row. Each process reads the row on a session's first
/// use and again at most once a minute, moving its `last_used_at` (the idle limit's clock).
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
    /// Verified web auth tokens: token → what it says.
    private let webTokens = Mutex(ExpiringCache<String, WebAuthClaims>(capacity: cacheCapacity))
    /// Sessions found live, by id: their container and user, until the next check.
    private let liveSessions = Mutex(ExpiringCache<SessionID, LiveSession>(capacity: cacheCapacity))
    /// Custom roles per user, read when a schema has custom roles: forgotten when a membership of
    /// the environment changes on any server process.
    /// Server-to-server keys by key ID (revocation reaches every process through `Invalidations`).
    private let serverKeys = Mutex(ExpiringCache<String, ServerKeyInfo?>(capacity: cacheCapacity))
    private let memberships = Mutex(ExpiringCache<RoleKey, Set<String>>(capacity: cacheCapacity))

    struct RoleKey: Hashable, Sendable {
        var containerID: ContainerID
        var environment: ContainerEnvironment
        var user: UserID
    }
    let cacheLifetime: Duration = .seconds(60)
    /// How often a session in use is read again (and its `last_used_at` moved): every minute, or
    /// twice per idle limit when that is shorter.
    var sessionCheckInterval: Duration { min(.seconds(60), configuration.sessionIdleTimeout / 2) }

    /// What a web auth token says.
    struct WebAuthClaims: Sendable {
        var containerID: ContainerID
        var environment: Int16
        var sessionID: SessionID
        var user: UserID
        /// Absolute expiry, seconds since 1970.
        var expires: Int64
    }

    struct LiveSession: Sendable {
        var containerID: ContainerID
        var user: UserID
    }

    init(admin: AdminStore, sealer: TokenSealer, configuration: ServerConfiguration) {
        self.admin = admin
        self.sealer = sealer
        self.configuration = configuration
    }

    /// Forgets what `event` says changed (another process's change, or this one's).
    func invalidate(_ event: Invalidations.Event) {
        switch event {
        case .session(_, let sessionID):
            liveSessions.withLock { $0.remove(sessionID) }
        case .userSessions(let containerID, let user):
            liveSessions.withLock { $0.removeAll { $0.containerID == containerID && $0.user == user } }
        case .apiToken(_, let tokenID):
            forget(tokenID: tokenID)
        case .roles(let containerID, let environment):
            memberships.withLock { $0.removeAllKeys { $0.containerID == containerID && $0.environment == environment } }
        case .serverKey(let containerID, let keyID):
            serverKeys.withLock { $0.remove("\(containerID)/\(keyID)") }
        case .all:
            serverKeys.withLock { $0.removeAll { _ in true } }
            liveSessions.withLock { $0.removeAll { _ in true } }
            tokens.withLock { $0.removeAll { _ in true } }
            memberships.withLock { $0.removeAll { _ in true } }
        case .schema, .quota, .subscriptions, .courier, .courierTokens:
            break
        }
    }

    /// The custom roles `user` holds in `environment` of the container (cached for a minute, and
    /// forgotten on every process when an administrator changes the environment's memberships).
    func roles(of user: UserID, containerID: ContainerID, environment: ContainerEnvironment) async throws -> Set<String> {
        let key = RoleKey(containerID: containerID, environment: environment, user: user)
        let now = ContinuousClock.now
        if let cached = memberships.withLock({ $0.value(for: key, now: now) }) { return cached }
        let roles = try await admin.roles(containerID: containerID, environment: environment, user: user)
        memberships.withLock { $0.set(roles, for: key, expires: now + cacheLifetime, now: now) }
        return roles
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

    /// The API token's metadata when it is one of `containerID`'s, or `nil`. Looked up within the
    /// container the request names, so that on Citus the lookup runs on the one worker holding it.
    func apiToken(_ token: String, containerID: ContainerID) async throws -> APITokenInfo? {
        guard !token.isEmpty, token.utf8.count <= 200 else { return nil }
        let now = ContinuousClock.now
        let key = "\(containerID) \(token)"
        if let cached = tokens.withLock({ $0.value(for: key, now: now) }) { return cached }
        let info = try await admin.apiToken(containerID: containerID, hash: TokenSealer.hash(token))
        // An unknown token is remembered briefly (a client retrying a bad token costs no reads),
        // a known one for the cache lifetime.
        tokens.withLock { $0.set(info, for: key, expires: now + (info == nil ? .seconds(5) : cacheLifetime), now: now) }
        return info
    }

    /// Drops a revoked token from the cache so it fails on its next use.
    func forget(tokenID: APITokenID) {
        tokens.withLock { $0.removeAll { $0?.tokenID == tokenID } }
    }

    /// Authenticates a data-API request for `containerName`/`environmentSegment`: by API token
    /// (and web auth token), or by a server-to-server signature over `body` (the raw request
    /// body, read before authenticating when the request carries signature headers).
    func authenticate(_ request: Request, containerName: String, environmentSegment: String, signedBody: ByteBuffer? = nil) async throws -> Caller {
        let environment = try ContainerEnvironment(segment: environmentSegment)
        let container = try await container(named: containerName)
        RequestID.state?.container = (container.id, environment)
        let query = QueryItems(target: request.head.path)
        if let signedBody {
            guard query.get("ckAPIToken") == nil, query.webAuthToken == nil else {
                throw StratusError(.authenticationFailed, "send either ckAPIToken (and ckWebAuthToken) or a server-to-server signature, not both")
            }
            return try await authenticateSigned(request, body: signedBody, container: container, environment: environment)
        }
        guard let tokenText = query.get("ckAPIToken") else {
            throw StratusError(.authenticationFailed, "missing ckAPIToken query parameter; create an API token with 'stratus token create'")
        }
        guard let token = try await apiToken(String(tokenText), containerID: container.id), token.revokedAt == nil else {
            throw StratusError(.authenticationFailed, "the ckAPIToken is not valid for this container (unknown, revoked, or another container's)")
        }
        guard token.environment == environment else {
            throw StratusError(.authenticationFailed, "the ckAPIToken belongs to the container's other environment (\(token.environment.rawValue))")
        }
        try Self.checkOrigin(request, token: token)
        var caller = Caller(container: container, environment: environment)
        caller.apiToken = String(tokenText)
        if let webToken = query.webAuthToken {
            let claims = try await session(fromWebAuthToken: webToken, containerID: container.id, environment: environment)
            caller.user = claims.user
            caller.sessionID = claims.sessionID
            caller.webAuthToken = webToken
        }
        return caller
    }

    /// A server-to-server key of the container by ID (cached by container and ID; a miss for 5 seconds).
    func serverKey(_ keyID: String, containerID: ContainerID) async throws -> ServerKeyInfo? {
        let now = ContinuousClock.now
        let cacheKey = "\(containerID)/\(keyID)"
        if let cached = serverKeys.withLock({ $0.value(for: cacheKey, now: now) }) { return cached }
        let key = try await admin.serverKey(keyID: keyID, containerID: containerID)
        serverKeys.withLock { $0.set(key, for: cacheKey, expires: now + (key == nil ? .seconds(5) : cacheLifetime), now: now) }
        return key
    }

    /// Checks a server-to-server signature: the key (known, live, this container's and
    /// environment's), the date (within 10 minutes), the signature over the date, the body's hash
    /// and the path (with or without its query string), and that the same signature was not
    /// received before within the date's window (`RequestSignature.replayDigest`).
    func authenticateSigned(_ request: Request, body: ByteBuffer, container: ContainerInfo, environment: ContainerEnvironment) async throws -> Caller {
        let signature = try RequestSignature(headers: request.headers)
        try signature.checkDate(now: Date().timeIntervalSince1970)
        guard let key = try await serverKey(signature.keyID, containerID: container.id) else {
            throw StratusError(.authenticationFailed, "unknown server-to-server key \(signature.keyID.prefix(8))…: keys of another container or environment open nothing here; 'stratus key list' shows this container's keys")
        }
        guard key.revokedAt == nil else {
            throw StratusError(.authenticationFailed, "the server-to-server key \(signature.keyID.prefix(8))… was revoked; add a new one with 'stratus key add'")
        }
        guard key.containerID == container.id, key.environment == environment else {
            throw StratusError(.authenticationFailed, "the server-to-server key belongs to another container or environment")
        }
        guard let publicKey = try? P256.Signing.PublicKey(x963Representation: key.publicKey) else {
            throw StratusError(.authenticationFailed, "the server-to-server key's stored public key cannot be read; add the key again")
        }
        let bodyHash = RequestSignature.bodyHash(body.readableBytesView)
        let target = request.head.path ?? request.uri.string
        guard signature.verifiedMessage(signature.messages(bodyHash: bodyHash, target: target), key: publicKey) != nil else {
            throw StratusError(.authenticationFailed, "the X-Apple-CloudKit-Request-SignatureV1 does not match the request: sign "
                + "'<date header>:<base64 of SHA-256 of the body>:<path>' with the key's private key (ECDSA P-256, SHA-256)")
        }
        let digest = signature.replayDigest
        let expires = Date(timeIntervalSince1970: Double(signature.date + RequestSignature.allowedSkew + 1))
        guard try await admin.recordSignature(containerID: container.id, keyID: key.keyID, digest: digest, expires: expires) else {
            throw StratusError(.authenticationFailed, "this signature was already received (a replay): sign every request anew")
        }
        var caller = Caller(container: container, environment: environment)
        caller.user = UserID("_key_" + key.keyID)
        caller.serverKey = key.keyID
        return caller
    }

    /// What a web auth token says, once its seal is verified; `AUTHENTICATION_FAILED` otherwise.
    func claims(of token: String) throws(StratusError) -> WebAuthClaims {
        let now = ContinuousClock.now
        if let cached = webTokens.withLock({ $0.value(for: token, now: now) }) { return cached }
        guard let payload = sealer.open(token, purpose: Self.webAuthPurpose),
              case .int(let c)? = payload["c"], case .int(let e)? = payload["e"], case .int(let s)? = payload["s"],
              case .string(let u)? = payload["u"], case .int(let x)? = payload["x"], let environment = Int16(exactly: e)
        else {
            throw StratusError(.authenticationFailed, "the ckWebAuthToken is not valid; sign in again")
        }
        let claims = WebAuthClaims(containerID: ContainerID(c), environment: environment, sessionID: SessionID(s), user: UserID(u), expires: x)
        // The token carries its own expiry (checked by the caller); the entry only bounds memory.
        webTokens.withLock { $0.set(claims, for: token, expires: now + cacheLifetime, now: now) }
        return claims
    }

    /// The live session a web auth token names, checked against the container, the environment,
    /// its expiry, and (at most a minute old) its row: ended and idle sessions are refused.
    func session(fromWebAuthToken token: String, containerID: ContainerID, environment: ContainerEnvironment) async throws -> WebAuthClaims {
        let claims = try claims(of: token)
        guard claims.containerID == containerID else {
            throw StratusError(.authenticationFailed, "the ckWebAuthToken was issued for another container; sign in to this one")
        }
        guard claims.environment == environment.code else {
            throw StratusError(.authenticationFailed, "the ckWebAuthToken was issued for the other environment of this container; sign in to this one")
        }
        guard claims.expires > Int64(Date().timeIntervalSince1970) else {
            throw StratusError(.authenticationFailed, "the ckWebAuthToken has expired; sign in again")
        }
        let now = ContinuousClock.now
        if liveSessions.withLock({ $0.value(for: claims.sessionID, now: now) }) != nil { return claims }
        switch try await admin.useSession(containerID: containerID, sessionID: claims.sessionID, idleTimeout: configuration.sessionIdleTimeout) {
        case .success:
            liveSessions.withLock {
                $0.set(LiveSession(containerID: containerID, user: claims.user), for: claims.sessionID, expires: now + sessionCheckInterval, now: now)
            }
            return claims
        case .failure(.ended(let reason)):
            throw StratusError(.authenticationFailed, "this session has ended (\(reason)); sign in again")
        case .failure(.idle):
            throw StratusError(.authenticationFailed, "this session expired after \(Self.describe(configuration.sessionIdleTimeout)) without use; sign in again")
        case .failure(.expired):
            throw StratusError(.authenticationFailed, "the ckWebAuthToken has expired; sign in again")
        case .failure(.unknown):
            throw StratusError(.authenticationFailed, "the ckWebAuthToken is not valid; sign in again")
        }
    }

    /// A new session for `user` and its web auth token.
    func startSession(user: UserID, containerID: ContainerID, environment: ContainerEnvironment) async throws -> (token: String, session: SessionRecord) {
        let session = try await admin.createSession(containerID: containerID, environment: environment, user: user,
                                                    lifetime: configuration.sessionLifetime)
        let expires = Int64(session.expiresAt.timeIntervalSince1970)
        let token = sealer.seal(["c": .int(containerID.rawValue), "e": .int(Int64(environment.code)), "s": .int(session.sessionID.rawValue),
                                 "u": .string(user.rawValue), "x": .int(expires)], purpose: Self.webAuthPurpose)
        return (token, session)
    }

    /// "30 minutes", "7 days": a duration as a person reads it.
    static func describe(_ duration: Duration) -> String {
        let seconds = duration.components.seconds
        if seconds % 86_400 == 0 { return "\(seconds / 86_400) day\(seconds == 86_400 ? "" : "s")" }
        if seconds % 3600 == 0 { return "\(seconds / 3600) hour\(seconds == 3600 ? "" : "s")" }
        if seconds % 60 == 0 { return "\(seconds / 60) minute\(seconds == 60 ? "" : "s")" }
        return "\(seconds) second\(seconds == 1 ? "" : "s")"
    }

    /// Where `redirectURL` sends a user to sign in.
    /// URL characters that need no percent-encoding (RFC 3986 "unreserved").
    static let unreserved = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~"))

    /// It carries the request's API token, so the page finds the token's sign-in callback and
    /// allowed origins (the token is no secret: it is in the web app's own source).
    func signInURL(container: String, environment: ContainerEnvironment, apiToken: String? = nil) -> String {
        let url = "\(configuration.publicURL)/auth/1/\(container)/\(environment.rawValue)/signin"
        guard let apiToken else { return url }
        return url + "?ckAPIToken=" + (apiToken.addingPercentEncoding(withAllowedCharacters: Self.unreserved) ?? apiToken)
    }
}

import Foundation
import Hummingbird
import HummingbirdBcrypt
import NIOPosix
import StratusCore
import StratusStore

/// The auth API under `/auth/1/{container}/{environment}/`: sign-up, sign-in (and its hosted
/// page), sign-out, password changes and the signed-in user's profile.
struct AuthController: Sendable {
    let admin: AdminStore
    let authenticator: Authenticator
    let passwords: Passwords
    let bodies: RequestBodies
    /// Sign-up limits.
    let rateLimiter: RateLimiter
    /// Makes a new user's `Users` record.
    let users: UsersController

    func addRoutes(to router: Router<BasicRequestContext>) {
        router.post("/auth/1/:container/:environment/signup") { request, context in
            try await self.signUp(request, context)
        }
        router.post("/auth/1/:container/:environment/signin") { request, context in
            try await self.signIn(request, context)
        }
        router.get("/auth/1/:container/:environment/signin") { request, context in
            try await self.signInPage(request, context)
        }
        router.post("/auth/1/:container/:environment/signout") { request, context in
            try await self.signOut(request, context)
        }
        router.post("/auth/1/:container/:environment/password") { request, context in
            try await self.changePassword(request, context)
        }
        router.get("/auth/1/:container/:environment/profile") { request, context in
            try await self.profile(request, context, change: false)
        }
        router.post("/auth/1/:container/:environment/profile") { request, context in
            try await self.profile(request, context, change: true)
        }
    }

    /// The answer to a successful sign-up, sign-in or password change: a new session's token.
    /// The user's `Users` record is made first if the environment's public database lacks it.
    func sessionResponse(user: UserID, container: ContainerInfo, environment: ContainerEnvironment) async throws -> Response {
        try await users.ensureUserRecord(user, containerID: container.id, environment: environment)
        let (token, session) = try await authenticator.startSession(user: user, containerID: container.id, environment: environment)
        return .json(["ckWebAuthToken": .string(token), "userRecordName": .string(user.rawValue),
                      "expiresAt": .int(Int64(session.expiresAt.timeIntervalSince1970 * 1000))])
    }

    /// The web auth token of an auth request: the `ckWebAuthToken` (or `ckSession`) query parameter.
    func webAuthToken(_ request: Request) throws(StratusError) -> String {
        guard let token = QueryItems(target: request.uri.string).webAuthToken else {
            throw StratusError(.authenticationFailed, "missing ckWebAuthToken query parameter: send the token of the session")
        }
        return token
    }

    /// `POST /auth/1/{container}/{environment}/signout`: ends the session of the `ckWebAuthToken`
    /// at once, on every server process. Signing out an ended session is not an error.
    func signOut(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let (container, environment, _) = try await authContainer(request, context)
        let claims = try authenticator.claims(of: try webAuthToken(request))
        guard claims.containerID == container.id, claims.environment == environment.code else {
            throw StratusError(.authenticationFailed, "the ckWebAuthToken was issued for another container or environment")
        }
        try await admin.endSession(containerID: container.id, sessionID: claims.sessionID, reason: "signed out")
        // This process forgets it now; the others when the notification reaches them.
        authenticator.invalidate(.session(containerID: container.id, sessionID: claims.sessionID))
        return .json(["signedOut": true])
    }

    /// `POST /auth/1/{container}/{environment}/password` with `{"password", "newPassword"}` and the
    /// session's `ckWebAuthToken`: changes the password, ends every session of the user (on every
    /// server process) and answers with a new session for the caller.
    func changePassword(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let (container, environment, _) = try await authContainer(request, context)
        let claims = try await authenticator.session(fromWebAuthToken: try webAuthToken(request), containerID: container.id, environment: environment)
        let body = try await bodies.readObject(request)
        guard let current = try Wire.string(body["password"], key: "password") else {
            throw StratusError.badRequest("missing required key 'password' (the current password)")
        }
        guard let new = try Wire.string(body["newPassword"], key: "newPassword") else {
            throw StratusError.badRequest("missing required key 'newPassword'")
        }
        try Passwords.validateNewPassword(new)
        guard let account = try await admin.user(containerID: container.id, userRecordName: claims.user) else {
            throw StratusError(.authenticationFailed, "the account of this session no longer exists; sign up again")
        }
        _ = try await passwords.verifyPassword(containerID: container.id, email: account.email, password: current)
        let hash = try await passwords.hash(new)
        try await admin.changePassword(containerID: container.id, user: claims.user, passwordHash: hash)
        authenticator.invalidate(.userSessions(containerID: container.id, user: claims.user))
        return try await sessionResponse(user: claims.user, container: container, environment: environment)
    }

    /// Checks the container and environment in the path, and the API token when one is given
    /// (returned with them).
    func authContainer(_ request: Request, _ context: BasicRequestContext) async throws -> (ContainerInfo, ContainerEnvironment, APITokenInfo?) {
        let environment = try ContainerEnvironment(segment: context.parameters.get("environment") ?? "")
        let container = try await authenticator.container(named: context.parameters.get("container") ?? "")
        guard let token = request.uri.queryParameters.get("ckAPIToken") else { return (container, environment, nil) }
        guard let info = try await authenticator.apiToken(String(token), containerID: container.id), info.revokedAt == nil,
              info.environment == environment else {
            throw StratusError(.authenticationFailed, "the ckAPIToken is not valid for this container and environment")
        }
        try Authenticator.checkOrigin(request, token: info)
        return (container, environment, info)
    }

    func credentials(_ request: Request) async throws -> (email: String, password: String) {
        try Passwords.credentials(try await bodies.readObject(request))
    }

    /// `POST /auth/1/{container}/{environment}/signup` with `{"emailAddress", "password"}` and,
    /// optionally, `"discoverable": true` (others may find the user by email address or record
    /// name), `"givenName"` and `"familyName"`.
    func signUp(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let (container, environment, _) = try await authContainer(request, context)
        let body = try await bodies.readObject(request)
        let (email, password) = try Passwords.credentials(body)
        try Passwords.validateNewPassword(password)
        let change = try Self.profileChange(body)
        try await admitSignup(containerID: container.id, environment: environment)
        let hash = try await passwords.hash(password)
        let userRecordName = UserRecordName.random()
        try await admin.createUser(UserAccount(containerID: container.id, userRecordName: UserID(userRecordName), email: email, passwordHash: hash),
                                   discoverable: change.discoverable ?? false, givenName: change.givenName ?? nil, familyName: change.familyName ?? nil)
        return try await sessionResponse(user: UserID(userRecordName), container: container, environment: environment)
    }

    /// Counts a well-formed sign-up attempt against the container-environment's sign-up limits
    /// (`signupsPerAddressPerHour`, `signupsPerHour`), before anything is looked up or hashed:
    /// past one, `THROTTLED` with the seconds left in its hour, whether or not the address has an
    /// account, so sign-up cannot be used to test many addresses.
    func admitSignup(containerID: ContainerID, environment: ContainerEnvironment) async throws {
        let limits = try await rateLimiter.limits(containerID: containerID, environment: environment)
        if let wait = try await admin.admitSignup(containerID: containerID, environment: environment, address: ClientAddress.current,
                                                  perAddress: limits.signupsPerAddressPerHour, total: limits.signupsPerHour,
                                                  second: rateLimiter.nowSecond()) {
            throw StratusError(.throttled, "too many sign-ups from this address or for this app in the last hour; try again in \(wait) seconds",
                               retryAfter: wait)
        }
    }

    /// What a sign-up or profile body changes: `discoverable` (bool), `givenName` and
    /// `familyName` (strings of 1–100 printable characters, or null to clear).
    static func profileChange(_ body: [String: JSON]) throws(StratusError) -> (discoverable: Bool?, givenName: String??, familyName: String??) {
        let discoverable = try Wire.bool(body["discoverable"], key: "discoverable")
        func name(_ key: String) throws(StratusError) -> String?? {
            guard let value = body[key] else { return nil }
            if value == .null { return .some(nil) }
            guard let text = value.stringValue else { throw .badRequest("'\(key)' must be a string or null") }
            let trimmed = text.trimmingCharacters(in: .whitespaces)
            guard !trimmed.isEmpty, trimmed.count <= 100, trimmed.unicodeScalars.allSatisfy(Names.isPrintable) else {
                throw .badRequest("'\(key)' must be 1–100 printable characters")
            }
            return .some(trimmed)
        }
        return (discoverable, try name("givenName"), try name("familyName"))
    }

    /// `GET`/`POST /auth/1/{container}/{environment}/profile` with the session's `ckWebAuthToken`:
    /// the signed-in user's profile; a POST changes `discoverable`, `givenName`, `familyName`.
    func profile(_ request: Request, _ context: BasicRequestContext, change: Bool) async throws -> Response {
        let (container, environment, _) = try await authContainer(request, context)
        let claims = try await authenticator.session(fromWebAuthToken: try webAuthToken(request), containerID: container.id, environment: environment)
        var profile: UserProfile?
        if change {
            let update = try Self.profileChange(try await bodies.readObject(request))
            profile = try await admin.updateProfile(containerID: container.id, user: claims.user, discoverable: update.discoverable,
                                                    givenName: update.givenName, familyName: update.familyName)
        } else {
            profile = try await admin.profile(containerID: container.id, user: claims.user)
        }
        guard let profile else { throw StratusError(.authenticationFailed, "the account of this session no longer exists; sign up again") }
        return .json(["userRecordName": .string(profile.userRecordName.rawValue), "emailAddress": .string(profile.email),
                      "discoverable": .bool(profile.discoverable),
                      "nameComponents": UsersController.identityJSON(profile, lookupInfo: [:])["nameComponents"] ?? [:]])
    }

    /// `POST /auth/1/{container}/{environment}/signin`.
    func signIn(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let (container, environment, _) = try await authContainer(request, context)
        let (email, password) = try await credentials(request)
        let account = try await passwords.verifyPassword(containerID: container.id, email: email, password: password)
        return try await sessionResponse(user: account.userRecordName, container: container, environment: environment)
    }

    /// The page `redirectURL` points at (see `SignInPage`). With the `ckAPIToken` CloudKit JS's
    /// redirect URL carries, it knows the token's sign-in callback and allowed origins; where
    /// neither says where a session may go, the page says so instead of offering the form.
    func signInPage(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let (container, environment, token) = try await authContainer(request, context)
        let delivery = SignInPage.Delivery.of(token, environment: environment, referer: request.headers[.referer], container: container.name)
        let page = SignInPage(container: container.name, environment: environment, apiToken: request.uri.queryParameters.get("ckAPIToken").map { String($0) },
                              delivery: delivery)
        return page.response()
    }
}

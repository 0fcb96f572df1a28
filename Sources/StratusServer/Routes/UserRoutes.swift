import Foundation
import Hummingbird
import HummingbirdBcrypt
import NIOPosix
import StratusCore
import StratusStore

extension StratusApp {
    /// `users/caller`: the caller's identity.
    func caller(_ request: DataRequest) throws -> JSON {
        let user = try request.caller.requireUser(signInURL: request.signInURL)
        return ["users": [["userRecordName": .string(user), "lookupInfo": ["userRecordName": .string(user)], "nameComponents": [:]]]]
    }

    /// `users/current` (legacy): the caller's user dictionary.
    func currentUser(_ request: DataRequest) throws -> JSON {
        let user = try request.caller.requireUser(signInURL: request.signInURL)
        return ["userRecordName": .string(user), "firstName": nil, "lastName": nil]
    }

    func addAuthRoutes(to router: Router<BasicRequestContext>) {
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
    func verifyPassword(containerID: Int64, email: String, password: String) async throws -> UserAccount {
        let keys = Self.signInKeys(email: email)
        if let wait = try await admin.signInRetryAfter(containerID: containerID, keys: keys, window: Self.signInWindow) {
            throw StratusError(.throttled, "too many failed sign-ins for this account or from this address; try again in \(wait) seconds",
                               retryAfter: wait)
        }
        let account = try await admin.user(containerID: containerID, email: email)
        let hash = account?.passwordHash ?? dummyPasswordHash
        let valid = try await NIOThreadPool.singleton.runIfActive { Bcrypt.verify(password, hash: hash) }
        guard let account, valid else {
            try await admin.recordSignInFailure(containerID: containerID, keys: keys.map(\.key), window: Self.signInWindow)
            throw StratusError(.authenticationFailed, "the email address or password is wrong")
        }
        try await admin.clearSignInFailures(containerID: containerID, key: keys[0].key)
        guard account.disabledAt == nil else {
            throw StratusError(.authenticationFailed, "this account is disabled; ask the app's administrator")
        }
        return account
    }

    /// The answer to a successful sign-up, sign-in or password change: a new session's token.
    func sessionResponse(user: String, container: ContainerInfo, environment: ContainerEnvironment) async throws -> Response {
        let (token, session) = try await authenticator.startSession(user: user, containerID: container.id, environment: environment)
        return .json(["ckWebAuthToken": .string(token), "userRecordName": .string(user),
                      "expiresAt": .int(Int64(session.expiresAt.timeIntervalSince1970 * 1000))])
    }

    /// The web auth token of an auth request: the `ckWebAuthToken` (or `ckSession`) query parameter.
    func webAuthToken(_ request: Request) throws(StratusError) -> String {
        let query = request.uri.queryParameters
        guard let token = query.get("ckWebAuthToken") ?? query.get("ckSession"), !token.isEmpty else {
            throw StratusError(.authenticationFailed, "missing ckWebAuthToken query parameter: send the token of the session")
        }
        return String(token)
    }

    /// `POST /auth/1/{container}/{environment}/signout`: ends the session of the `ckWebAuthToken`
    /// at once, on every server process. Signing out an ended session is not an error.
    func signOut(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let (container, environment) = try await authContainer(request, context)
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
        let (container, environment) = try await authContainer(request, context)
        let claims = try await authenticator.session(fromWebAuthToken: try webAuthToken(request), containerID: container.id, environment: environment)
        let body = try await readObject(request)
        guard let current = try Wire.string(body["password"], key: "password") else {
            throw StratusError.badRequest("missing required key 'password' (the current password)")
        }
        guard let new = try Wire.string(body["newPassword"], key: "newPassword") else {
            throw StratusError.badRequest("missing required key 'newPassword'")
        }
        try Self.validateNewPassword(new)
        guard let account = try await admin.user(containerID: container.id, userRecordName: claims.user) else {
            throw StratusError(.authenticationFailed, "the account of this session no longer exists; sign up again")
        }
        _ = try await verifyPassword(containerID: container.id, email: account.email, password: current)
        let cost = configuration.bcryptCost
        let hash = try await NIOThreadPool.singleton.runIfActive { Bcrypt.hash(new, cost: cost) }
        try await admin.changePassword(containerID: container.id, user: claims.user, passwordHash: hash)
        authenticator.invalidate(.userSessions(containerID: container.id, user: claims.user))
        return try await sessionResponse(user: claims.user, container: container, environment: environment)
    }

    /// A new password's rules: 8 characters at least, 72 bytes at most (bcrypt reads no more), no NUL.
    static func validateNewPassword(_ password: String) throws(StratusError) {
        guard !password.utf8.contains(0) else { throw .badRequest("the password must not contain NUL characters") }
        guard password.count >= 8 else { throw .badRequest("the password must have at least 8 characters") }
        guard password.utf8.count <= 72 else { throw .badRequest("the password must be at most 72 bytes long") }
    }

    /// Checks the container and environment in the path, and the API token when one is given.
    func authContainer(_ request: Request, _ context: BasicRequestContext) async throws -> (ContainerInfo, ContainerEnvironment) {
        let environment = try ContainerEnvironment(segment: context.parameters.get("environment") ?? "")
        let container = try await authenticator.container(named: context.parameters.get("container") ?? "")
        if let token = request.uri.queryParameters.get("ckAPIToken") {
            guard let info = try await authenticator.apiToken(String(token)), info.revokedAt == nil,
                  info.containerID == container.id, info.environment == environment else {
                throw StratusError(.authenticationFailed, "the ckAPIToken is not valid for this container and environment")
            }
        }
        return (container, environment)
    }

    func credentials(_ request: Request) async throws -> (email: String, password: String) {
        let body = try await readObject(request)
        guard let rawEmail = try Wire.string(body["emailAddress"], key: "emailAddress") else {
            throw StratusError.badRequest("missing required key 'emailAddress'")
        }
        guard let password = try Wire.string(body["password"], key: "password") else {
            throw StratusError.badRequest("missing required key 'password'")
        }
        // bcrypt reads C strings: a NUL would silently cut the password short.
        guard !password.utf8.contains(0) else { throw StratusError.badRequest("the password must not contain NUL characters") }
        let email = rawEmail.trimmingCharacters(in: .whitespaces).lowercased()
        let parts = email.split(separator: "@", omittingEmptySubsequences: false)
        guard email.utf8.count <= 254, parts.count == 2, !parts[0].isEmpty, parts[1].contains("."),
              email.unicodeScalars.allSatisfy({ Names.isPrintable($0) && $0 != " " }) else {
            throw StratusError.badRequest("'emailAddress' is not a valid email address")
        }
        return (email, password)
    }

    /// `POST /auth/1/{container}/{environment}/signup`.
    func signUp(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let (container, environment) = try await authContainer(request, context)
        let (email, password) = try await credentials(request)
        try Self.validateNewPassword(password)
        let cost = configuration.bcryptCost
        let hash = try await NIOThreadPool.singleton.runIfActive { Bcrypt.hash(password, cost: cost) }
        let userRecordName = UserRecordName.random()
        try await admin.createUser(UserAccount(containerID: container.id, userRecordName: userRecordName, email: email, passwordHash: hash))
        return try await sessionResponse(user: userRecordName, container: container, environment: environment)
    }

    /// `POST /auth/1/{container}/{environment}/signin`.
    func signIn(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let (container, environment) = try await authContainer(request, context)
        let (email, password) = try await credentials(request)
        let account = try await verifyPassword(containerID: container.id, email: email, password: password)
        return try await sessionResponse(user: account.userRecordName, container: container, environment: environment)
    }

    /// The page `redirectURL` points at: a small sign-in form that posts to the JSON endpoint
    /// and hands the token back to the opener (CloudKit JS's popup flow) or shows it.
    func signInPage(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let (container, environment) = try await authContainer(request, context)
        let action = "/auth/1/\(container.name)/\(environment.rawValue)/signin"
        let html = """
            <!doctype html><html><head><meta charset="utf-8"><title>Sign in</title></head>
            <body><h1>Sign in to \(container.name)</h1>
            <form id="f"><input id="e" type="email" placeholder="Email" required> <input id="p" type="password" placeholder="Password" required>
            <button>Sign in</button></form><p id="m"></p>
            <script>
            document.getElementById('f').onsubmit = async (ev) => { ev.preventDefault();
              const r = await fetch('\(action)' + location.search, {method: 'POST', body: JSON.stringify({emailAddress: e.value, password: p.value})});
              const j = await r.json();
              if (!r.ok) { m.textContent = j.reason; return; }
              if (window.opener) { window.opener.postMessage({ckWebAuthToken: j.ckWebAuthToken, ckSession: j.ckWebAuthToken}, '*'); window.close(); }
              else { m.textContent = 'Signed in.'; }
            };
            </script></body></html>
            """
        return Response(status: .ok, headers: [.contentType: "text/html; charset=utf-8"],
                        body: ResponseBody(byteBuffer: ByteBuffer(string: html)))
    }
}

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
        let (container, _) = try await authContainer(request, context)
        let (email, password) = try await credentials(request)
        guard password.count >= 8 else { throw StratusError.badRequest("the password must have at least 8 characters") }
        guard password.utf8.count <= 72 else { throw StratusError.badRequest("the password must be at most 72 bytes long") }
        let cost = configuration.bcryptCost
        let hash = try await NIOThreadPool.singleton.runIfActive { Bcrypt.hash(password, cost: cost) }
        let userRecordName = UserRecordName.random()
        try await admin.createUser(UserAccount(containerID: container.id, userRecordName: userRecordName, email: email, passwordHash: hash))
        let token = authenticator.webAuthToken(user: userRecordName, containerID: container.id)
        return .json(["ckWebAuthToken": .string(token), "userRecordName": .string(userRecordName)])
    }

    /// `POST /auth/1/{container}/{environment}/signin`.
    func signIn(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let (container, _) = try await authContainer(request, context)
        let (email, password) = try await credentials(request)
        let account = try await admin.user(containerID: container.id, email: email)
        // Verify against a dummy hash when the account is missing, so timing does not reveal which emails exist.
        let hash = account?.passwordHash ?? dummyPasswordHash
        let valid = try await NIOThreadPool.singleton.runIfActive { Bcrypt.verify(password, hash: hash) }
        guard let account, valid else {
            throw StratusError(.authenticationFailed, "the email address or password is wrong")
        }
        let token = authenticator.webAuthToken(user: account.userRecordName, containerID: container.id)
        return .json(["ckWebAuthToken": .string(token), "userRecordName": .string(account.userRecordName)])
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

import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import StratusCore
import StratusStore

/// What a console handler works with: the signed-in person, the form of a POST, and the
/// management API as them.
struct ConsoleCall: Sendable {
    let console: ConsoleController
    let user: ConsoleUser
    let context: BasicRequestContext
    let request: Request
    /// A POST's form (empty for a GET).
    var form = ConsoleForm(ByteBuffer())

    /// A management function as the signed-in person, through the check its route makes
    /// (`ManagementAPI.call`): `parameters` are its path's (the page's container by
    /// default), `query` its query's. A failure is answered as the API answers it.
    func api(_ route: ManagementRoute, _ parameters: [String: String] = [:], query: [String: String] = [:],
             body: [String: JSON]? = nil) async -> ManagementAnswer {
        var parameters = parameters
        if route.parameterNames.contains("container"), parameters["container"] == nil { parameters["container"] = ConsolePath.segment(container) }
        do {
            let input = ManagementCall.Input(parameters: parameters, query: query, body: .object(body ?? [:]))
            let reply = try await console.api.call(route, as: user.principal, input)
            return ManagementAnswer(status: Int(reply.status.code), json: reply.json.expanded)
        } catch {
            let (failure, uuid) = ErrorMiddleware<BasicRequestContext>.failure(error, request: request, logger: context.logger)
            return ManagementAnswer(status: failure.code.httpStatus, json: failure.dictionary(uuid: uuid))
        }
    }

    /// Whether the signed-in person may call `route` (with `parameters`), by the check the call
    /// itself makes.
    func allowed(_ route: ManagementRoute, _ parameters: [String: String] = [:]) async -> Bool {
        (try? await grant(route, parameters)) != nil
    }

    /// The check a call of `route` makes, with no query or body: the grant it would get.
    private func grant(_ route: ManagementRoute, _ parameters: [String: String] = [:]) async throws -> ManagementGrant {
        var parameters = parameters
        if route.parameterNames.contains("container"), parameters["container"] == nil { parameters["container"] = ConsolePath.segment(container) }
        let input = ManagementCall.Input(parameters: parameters, query: [:], body: .object([:]))
        return try await console.api.authorize(route, principal: user.principal, input) { _ in input }
    }

    /// An answer that must have succeeded: otherwise the page says why, with the API's status.
    func require(_ route: ManagementRoute, _ parameters: [String: String] = [:], query: [String: String] = [:],
                 body: [String: JSON]? = nil) async throws -> JSON {
        let answer = await api(route, parameters, query: query, body: body)
        guard answer.ok else { throw ConsoleFailure(status: answer.status, reason: answer.reason) }
        return answer.json
    }

    /// The query string, decoded as browsers encode forms (`+` for a space).
    var queryForm: ConsoleForm { ConsoleForm(ByteBuffer(string: request.uri.query ?? "")) }

    /// The query's pairs for links that stay on this page's view (next page, sort, columns): without
    /// `dropping`, and never with the last action's message (`notice`, `error` and their `seal`),
    /// which belongs to the one page it was sent to.
    func keptQuery(dropping: Set<String> = []) -> [(String, String)] {
        queryForm.pairs.filter { !dropping.contains($0.0) && !ConsoleFlash.keys.contains($0.0) }
    }

    /// A query parameter (`nil` when missing or empty).
    func query(_ name: String) -> String? {
        queryForm[name].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// The path's `:container`, percent-decoded.
    var container: String { ConsoleController.pathParameter(context, "container") }

    /// `development` or `production`, from `?environment=` (development when absent or unknown).
    var environment: ContainerEnvironment {
        query("environment").flatMap(ContainerEnvironment.init(rawValue:)) ?? .development
    }

    /// What the signed-in person may do in the page's container: their role there, read once,
    /// against the role table the management API enforces (a page offers a form only when its
    /// action would be allowed).
    func access() async -> ConsoleAccess {
        var standing = ManagementGrant()
        standing.principal = user.principal
        // Any member may see the team: its check reads the person's role.
        if !container.isEmpty, let member = try? await grant(.team) { standing = member }
        return ConsoleAccess(caller: standing.caller, role: standing.role, container: container)
    }

    /// The page that asks before a destructive action (`ConsoleConfirmation`).
    func ask(_ confirmation: ConsoleConfirmation) -> Response {
        page(confirmation.title, container: container.isEmpty ? nil : container, section: confirmation.section, confirmation.page(self))
    }

    /// A page in the console's layout.
    func page(_ title: String, container: String? = nil, section: String = "", _ body: HTML) -> Response {
        let flash = ConsoleFlash.open(queryForm, session: user.csrf, sealer: console.sealer)
        return ConsoleController.page(ConsoleLayout.page(title: title, user: user, container: container, section: section,
                                                         notice: flash.notice, error: flash.error, body))
    }
}

/// The signed-in person's standing in one container, for deciding which forms a page offers.
struct ConsoleAccess: Sendable {
    var caller: ManagementCaller?
    var role: TeamRole?
    var container: String

    /// Whether `route` (acting on `environment`, for a route whose role depends on it) is allowed.
    func may(_ route: ManagementRoute, in environment: ContainerEnvironment? = nil) -> Bool {
        decide(route.requirement, in: environment) == .allowed
    }

    /// Whether an app user's private or shared database may be opened (an owner's, with a reason).
    var mayOpenUserDatabases: Bool { decide(ManagementAccess.userDatabase) == .allowed }

    /// What the role table decides of `requirement` for this person.
    func decide(_ requirement: ManagementRequirement, in environment: ContainerEnvironment? = nil) -> ManagementAccess.Decision {
        ManagementAccess.decide(requirement, caller: caller, role: role, environment: environment, container: container)
    }

    /// The environments `route` is allowed in.
    func environments(for route: ManagementRoute) -> [ContainerEnvironment] {
        ContainerEnvironment.allCases.filter { may(route, in: $0) }
    }
}

/// What a destructive action will do, asked before it is done.
struct ConsoleConfirmation: Sendable {
    /// The question, such as "Revoke API token 12?".
    var title: String
    /// What happens, in words, such as "Apps using it are refused from now on".
    var consequence: String
    /// The button's label, such as "Revoke the token".
    var action: String
    /// Where Cancel leads: a page of the container's.
    var back: String
    /// The section of the container's pages that `back` is in (for the menu).
    var section: String { back.split(separator: "/").dropFirst(3).first.map(String.init) ?? "" }
    /// The management route the action calls, and its path's parameters (the page's container
    /// is added): the question is asked only of someone it allows.
    var route: ManagementRoute
    var parameters: [String: String] = [:]

    /// The page: the consequence, a button that sends the same form again with `confirmed=yes`,
    /// and a way back.
    func page(_ call: ConsoleCall) -> HTML {
        let fields = call.form.pairs.filter { $0.0 != "csrf" && $0.0 != "confirmed" }
            .map { "<input type=\"hidden\" name=\"\($0.0)\" value=\"\($0.1)\">" as HTML }
        return """
            <p class="consequence">\(consequence)</p>
            <form method="post" action="\(call.request.uri.path)" class="stack">\(ConsoleLayout.csrf(call.user))\(fields)
            <input type="hidden" name="confirmed" value="yes">
            <div class="buttons"><button type="submit" class="danger">\(action)</button> <a class="button" href="\(back)">Cancel</a></div></form>
            """
    }
}

/// A management answer that was not a success, shown as a page with its status.
struct ConsoleFailure: Error {
    var status: Int
    var reason: String
}

extension ConsoleController {
    /// The sign-in and sign-out routes, the console's files, and every page.
    func addRoutes(to router: Router<BasicRequestContext>) {
        router.get("/console/assets/:file") { _, context -> Response in
            let name = Self.pathParameter(context, "file")
            guard let file = Self.consoleAssets[name] else { throw StratusError(.notFound, "no console file '\(name)'") }
            var headers = Self.consoleHeaders(contentType: file.type)
            headers[.cacheControl] = "public, max-age=300"
            return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: file.text)))
        }
        router.get("/console/signin") { request, _ -> Response in
            let query = ConsoleForm(ByteBuffer(string: request.uri.query ?? ""))
            let next = Self.pageAfterSignIn(query["next"])
            if try await self.consoleUser(request) != nil { return Self.seeOther(next) }
            return Self.page(ConsoleLayout.signIn(error: query["error"].flatMap { ConsoleFlash.signInMessages[$0] },
                                                  notice: query["notice"].flatMap { ConsoleFlash.signInMessages[$0] }, next: next))
        }
        router.post("/console/signin") { request, _ -> Response in
            guard self.isSameOrigin(request) else { return Self.forbidden("this sign-in did not come from the console's own page") }
            let form = ConsoleForm(try await self.bodies.readBody(request))
            do {
                let cookie = try await self.consoleSignIn(form)
                return Self.seeOther(Self.pageAfterSignIn(form["next"]), extraHeaders: self.sessionCookie(cookie))
            } catch let error as StratusError {
                return Self.page(ConsoleLayout.signIn(error: error.reason, email: form["email"], next: Self.pageAfterSignIn(form["next"])),
                                 status: .init(code: error.code.httpStatus))
            }
        }
        route(router, .post, "/console/signout") { call in
            try await self.admin.operatorStore.revokeOperatorCredential(call.user.credentialID)
            return Self.seeOther("/console/signin?notice=signed-out", extraHeaders: self.sessionCookie(nil))
        }
        ConsolePages(console: self).addRoutes(to: router)
        ConsoleAdminPages(console: self).addRoutes(to: router)
        ConsolePushPages(console: self).addRoutes(to: router)
        ConsoleRecordPages(console: self).addRoutes(to: router)
        ConsoleTelemetryPages(console: self).addRoutes(to: router)
        ConsoleServerPages(console: self).addRoutes(to: router)
    }

    /// Registers a console route: the person must be signed in (a GET without a session goes to
    /// the sign-in page); a POST must come from a console page (same origin, the session's CSRF
    /// token) or is refused with 403 and changes nothing. A failed management call becomes a page
    /// with its status.
    ///
    /// A destructive action (revoke, remove, disable) gives `confirm`: its POST then does nothing
    /// but answer a page that says what will happen, whose button sends the same form again with
    /// `confirmed=yes`.
    func route(_ router: Router<BasicRequestContext>, _ method: HTTPRequest.Method, _ path: String,
               confirm: (@Sendable (ConsoleCall) -> ConsoleConfirmation)? = nil,
               _ handler: @escaping @Sendable (ConsoleCall) async throws -> Response) {
        router.on(RouterPath(path), method: method) { request, context -> Response in
            if method == .post, !self.isSameOrigin(request) {
                return Self.forbidden("this request did not come from a console page (its Origin is not this server's); nothing was changed")
            }
            guard let user = try await self.consoleUser(request) else {
                if method == .get {
                    // Back to the page asked for, once signed in.
                    let asked = request.uri.path + (request.uri.query.map { "?" + $0 } ?? "")
                    return Self.seeOther("/console/signin" + (asked == "/console" ? "" : ConsolePath.query([("next", asked)])))
                }
                return Self.forbidden("you are not signed in (or your session ended); nothing was changed")
            }
            var call = ConsoleCall(console: self, user: user, context: context, request: request)
            if method == .post {
                call.form = ConsoleForm(try await self.bodies.readBody(request))
                let token = call.form["csrf"] ?? request.headers[HTTPField.Name("X-CSRF-Token")!]
                guard let token, TokenSealer.constantTimeEquals(token, user.csrf) else {
                    return Self.forbidden("this form is missing the console's security token (open the page again); nothing was changed")
                }
            }
            // Asked only of someone who may do it: anyone else is refused by the action itself.
            if let confirm, call.form["confirmed"] != "yes" {
                let confirmation = confirm(call)
                if await call.allowed(confirmation.route, confirmation.parameters) { return call.ask(confirmation) }
            }
            do {
                var response = try await handler(call)
                // What the next page says about this action comes sealed for this session.
                if response.status == .seeOther, let location = response.headers[.location] {
                    response.headers[.location] = ConsoleFlash.seal(location, session: user.csrf, sealer: self.sealer)
                }
                return response
            } catch let failure as ConsoleFailure {
                if failure.status == 401 { return Self.seeOther("/console/signin?error=session-ended", extraHeaders: self.sessionCookie(nil)) }
                return Self.page(ConsoleLayout.page(title: "Not possible", user: user, container: nil, section: "", notice: nil, error: nil,
                                                    ConsoleLayout.failure(failure)), status: .init(code: failure.status))
            }
        }
    }

    /// Where a sign-in leads: the console page it was asked from, or the containers. Only a path of
    /// the console's own is followed (never another site, nor `//host`).
    static func pageAfterSignIn(_ next: String?) -> String {
        guard let next, next.hasPrefix("/console/") || next == "/console", !next.contains("//"), !next.contains(".."), !next.contains("\\"),
              !next.unicodeScalars.contains(where: { $0.value < 0x20 }), !next.hasPrefix("/console/signin") else { return "/console" }
        return next
    }

    /// A 403 page for a refused POST.
    static func forbidden(_ reason: String) -> Response {
        page(ConsoleLayout.bare(title: "Refused", HTML("<h1>Refused</h1><p class=\"error\">\(reason)</p><p><a href=\"/console\">Back to the console</a></p>")),
             status: .forbidden)
    }

    /// Signs a person in with an operator's email address and password, or with the admin token:
    /// the new session's cookie value. Throttled as every sign-in.
    func consoleSignIn(_ form: ConsoleForm) async throws -> String {
        let secret = ManagementGate.operatorCredentialPrefix + TokenSealer.randomAPIToken()
        if let token = form.text("adminToken") {
            let keys = [(key: "admin-token-address:" + (ClientAddress.current ?? "unknown"), limit: Passwords.signInFailuresPerAddress)]
            if let wait = try await admin.signInRetryAfter(containerID: serverAuditContainerID, keys: keys, window: Passwords.signInWindow) {
                throw StratusError(.throttled, "too many failed sign-ins from this address; try again in \(wait) seconds", retryAfter: wait)
            }
            guard let expected = adminToken, !expected.isEmpty, TokenSealer.constantTimeEquals(token, expected) else {
                try await admin.recordSignInFailure(containerID: serverAuditContainerID, keys: keys.map(\.key), window: Passwords.signInWindow)
                throw StratusError(.authenticationFailed, "the admin token is wrong")
            }
            _ = try await admin.operatorStore.createConsoleSession(operatorID: nil, adminTokenHash: TokenSealer.hash(expected), tokenHash: TokenSealer.hash(secret),
                                                     name: "console", idleSeconds: Self.consoleIdleSeconds, lifetimeSeconds: Self.consoleLifetimeSeconds)
            return secret
        }
        guard let email = form.text("email"), let password = form["password"], !password.isEmpty else {
            throw StratusError.badRequest("give your email address and password (or the admin token)")
        }
        let (address, checked) = try Passwords.credentials(["emailAddress": .string(email), "password": .string(password)])
        let account = try await passwords.verifyOperatorPassword(email: address, password: checked)
        _ = try await admin.operatorStore.createConsoleSession(operatorID: account.operatorID, adminTokenHash: nil, tokenHash: TokenSealer.hash(secret),
                                                 name: "console", idleSeconds: Self.consoleIdleSeconds, lifetimeSeconds: Self.consoleLifetimeSeconds)
        return secret
    }

    /// The console's script and style sheet (`Resources/console/`), by file name.
    static let consoleAssets: [String: (text: String, type: String)] = {
        var assets: [String: (text: String, type: String)] = [:]
        for file in EmbeddedResources.files where file.name.hasPrefix("console/") {
            let name = String(file.name.dropFirst("console/".count))
            let type = name.hasSuffix(".css") ? "text/css; charset=utf-8" : name.hasSuffix(".js") ? "text/javascript; charset=utf-8"
                : name.hasSuffix(".svg") ? "image/svg+xml" : "text/plain; charset=utf-8"
            assets[name] = (file.text, type)
        }
        return assets
    }()
}

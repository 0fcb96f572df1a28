import Foundation
import HTTPTypes
import NIOCore
import StratusCore
@testable import StratusServer
@testable import StratusTestSupport
import Testing

/// The console over HTTP: its session cookie, the CSRF token and origin check on every change,
/// the headers that keep pages from running anything but their own script, escaping of every
/// value it shows, and the same answers as the management API for each kind of team member.
/// (`Deploy/console/e2e.py` drives it in a browser.)
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct ConsoleTests {
    static let origin = "http://127.0.0.1:8080"

    /// A browser of the console: its cookie and the CSRF token of the last page.
    struct Browser: Sendable {
        let harness: Harness
        var cookie = ""
        var csrf = ""

        /// A GET; remembers the page's CSRF token.
        mutating func get(_ path: String) async throws -> (status: Int, html: String, headers: HTTPFields) {
            let answer = try await raw(.get, path, body: nil, headers: cookie.isEmpty ? [:] : [.cookie: cookie])
            if let match = answer.html.firstMatch(of: /name="csrf" value="([0-9a-f]{64})"/) { csrf = String(match.output.1) }
            return answer
        }

        /// A form POST from a console page (same origin, the CSRF token) unless told otherwise.
        func post(_ path: String, _ fields: [(String, String)], origin: String? = ConsoleTests.origin, csrf given: String? = nil,
                  withToken: Bool = true) async throws -> (status: Int, html: String, headers: HTTPFields) {
            var all = fields
            if withToken { all.append(("csrf", given ?? csrf)) }
            let body = all.map { "\(ConsolePath.segment($0.0))=\(ConsolePath.segment($0.1))" }.joined(separator: "&")
            var headers: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
            if !cookie.isEmpty { headers[.cookie] = cookie }
            if let origin { headers[.origin] = origin }
            return try await raw(.post, path, body: body, headers: headers)
        }

        func raw(_ method: HTTPRequest.Method, _ path: String, body: String?, headers: HTTPFields) async throws -> (status: Int, html: String, headers: HTTPFields) {
            for pair in body?.split(separator: "&") ?? [] where pair.hasPrefix("password=") || pair.hasPrefix("adminToken=") {
                TestSecrets.record(String(pair.split(separator: "=", maxSplits: 1).last ?? "").removingPercentEncoding)
            }
            return try await harness.client.execute(uri: path, method: method, headers: headers, body: body.map { ByteBuffer(string: $0) }) { response in
                (Int(response.status.code), String(buffer: response.body), response.headers)
            }
        }

        /// Signs in with an operator's email address and password (or the admin token).
        mutating func signIn(email: String? = nil, password: String? = nil, adminToken: String? = nil) async throws -> Int {
            let fields = adminToken.map { [("adminToken", $0)] } ?? [("email", email ?? ""), ("password", password ?? "")]
            let answer = try await post("/console/signin", fields, withToken: false)
            if let setCookie = answer.headers[.setCookie], let value = setCookie.split(separator: ";").first {
                cookie = String(value)
                TestSecrets.record(String(value.split(separator: "=", maxSplits: 1).last ?? ""))
            }
            return answer.status
        }
    }

    @Test func signingInChangesAndSigningOutAsAPersonWould() async throws {
        try await Harness.run { harness in
            let ada = try await harness.signedInOperator(superuser: true)
            var browser = Browser(harness: harness)
            // Not signed in: every page leads to the sign-in page, whose form password managers understand.
            let anonymous = try await browser.get("/console")
            #expect(anonymous.status == 303 && anonymous.headers[.location] == "/console/signin")
            let form = try await browser.get("/console/signin")
            #expect(form.status == 200 && form.html.contains(#"autocomplete="username""#) && form.html.contains(#"autocomplete="current-password""#))
            #expect(form.headers[HTTPField.Name("Content-Security-Policy")!]?.contains("default-src 'self'") == true)
            #expect(form.headers[HTTPField.Name("Content-Security-Policy")!]?.contains("frame-ancestors 'none'") == true)
            // A sign-in from another origin is refused; a wrong password says so and sets no cookie.
            #expect(try await browser.post("/console/signin", [("email", ada.email), ("password", ada.password)], origin: "https://evil.example", withToken: false).status == 403)
            #expect(try await browser.signIn(email: ada.email, password: "wrong password") == 401 && browser.cookie.isEmpty)
            #expect(try await browser.signIn(email: ada.email, password: ada.password) == 303)
            let signedIn = try await browser.raw(.post, "/console/signin", body: "email=\(ConsolePath.segment(ada.email))&password=\(ConsolePath.segment(ada.password))",
                                                 headers: [.contentType: "application/x-www-form-urlencoded", .origin: Self.origin])
            let cookie = try #require(signedIn.headers[.setCookie])
            #expect(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && cookie.contains("Path=/console") && !cookie.contains("Secure"), "\(cookie)")
            let home = try await browser.get("/console")
            #expect(home.status == 200 && home.html.contains(ada.email), "\(home.html.prefix(500))")
            #expect(home.headers[.cacheControl] == "no-store")
            #expect(!browser.csrf.isEmpty)

            // Changes need the page's token and the console's origin; without either, nothing changes.
            let name = "iCloud.com.example.Console\(UInt32.random(in: 0...UInt32.max))"
            #expect(try await browser.post("/console/containers", [("name", name)], withToken: false).status == 403)
            #expect(try await browser.post("/console/containers", [("name", name)], csrf: String(repeating: "0", count: 64)).status == 403)
            #expect(try await browser.post("/console/containers", [("name", name)], origin: "https://evil.example").status == 403)
            #expect(try await browser.post("/console/containers", [("name", name)], origin: nil).status == 403)
            #expect(try await harness.admin(.get, "containers").json["containers"]?.arrayValue?.contains { $0["name"]?.stringValue == name } == false)
            // No GET changes anything: a GET of an action's path is no action.
            #expect(try await browser.get("/console/containers").status == 404)
            let created = try await browser.post("/console/containers", [("name", name)])
            #expect(created.status == 303, "\(created.html.prefix(400))")
            #expect(try await harness.admin(.get, "containers").json["containers"]?.arrayValue?.contains { $0["name"]?.stringValue == name } == true)
            // The audit log names the operator and the console session's credential.
            let audit = try await harness.admin(.get, "containers/\(name)/audit")
            #expect(audit.json["entries"]?.arrayValue?.first?["actor"]?.stringValue?.hasPrefix("operator \(ada.email) (credential ") == true, "\(audit.json)")

            // Signing out ends the session on the server: the old cookie opens nothing.
            let old = browser
            let out = try await browser.post("/console/signout", [])
            #expect(out.status == 303 && out.headers[.setCookie]?.contains("Max-Age=0") == true)
            var replay = old
            #expect(try await replay.get("/console").status == 303)

            // A session unused for longer than the idle limit has ended.
            var idle = Browser(harness: harness)
            #expect(try await idle.signIn(email: ada.email, password: ada.password) == 303)
            #expect(try await idle.get("/console").status == 200)
            try await harness.database.withConnection { connection in
                try await connection.statement("UPDATE operator_credentials SET last_used_at = now() - interval '31 minutes' WHERE kind = 'console'", logger: TestCluster.logger)
            }
            #expect(try await idle.get("/console").status == 303)

            // The admin token signs in too (as a superuser); a wrong one does not.
            var root = Browser(harness: harness)
            #expect(try await root.signIn(adminToken: "not the token") == 401)
            #expect(try await root.signIn(adminToken: Harness.adminToken) == 303)
            let rootHome = try await root.get("/console")
            #expect(rootHome.status == 200 && rootHome.html.contains("the admin token") && rootHome.html.contains(name))

            // Signed out, a page leads to the sign-in page, and signing in leads back to it; never elsewhere.
            let wanted = "/console/c/\(name)/users?environment=development"
            var returning = Browser(harness: harness)
            let asked = try await returning.get(wanted)
            #expect(asked.status == 303 && asked.headers[.location] == "/console/signin" + ConsolePath.query([("next", wanted)]), "\(asked.headers)")
            let signInPage = try await returning.get(try #require(asked.headers[.location]))
            #expect(signInPage.html.contains(#"name="next" value="\#(HTML.escape(wanted))""#), "\(signInPage.html.prefix(1500))")
            let back = try await returning.post("/console/signin", [("email", ada.email), ("password", ada.password), ("next", wanted)], withToken: false)
            #expect(back.status == 303 && back.headers[.location] == wanted, "\(back.headers)")
            for elsewhere in ["//evil.example/console", "https://evil.example/console", "/console/../evil", "/other"] {
                let away = try await returning.post("/console/signin", [("email", ada.email), ("password", ada.password), ("next", elsewhere)], withToken: false)
                #expect(away.status == 303 && away.headers[.location] == "/console", "\(elsewhere): \(away.headers)")
            }
        }
    }

    @Test func everyValueIsEscapedWherever() async throws {
        try await Harness.run { harness in
            let hostile = #"<script>alert(1)</script>"#
            let attribute = #""><img src=x onerror=alert(2)>"#
            let session = try await harness.container()
            let container = session.container
            // Hostile text wherever the console shows data it did not write itself.
            let user = try await session.signedUp("\(hostile)@example.com")
            _ = user
            let token = try await harness.admin(.post, "containers/\(container)/tokens", json: ["environment": "development", "name": .string(attribute)])
            #expect(token.status == 201, "\(token.json)")
            var signer = Signer()
            let key = try await harness.admin(.post, "containers/\(container)/keys", json: ["environment": "development", "publicKey": .string(signer.publicKeyPEM), "name": .string(hostile)])
            signer.keyID = key.json["keyID"]?.stringValue ?? ""
            #expect(key.status == 201)
            let member = try await harness.signedInOperator("\(hostile)@example.com", teams: [(container, .viewer)])
            _ = member
            let subscription = try await user.post("private", "subscriptions/modify", ["operations": [["operationType": "create", "subscription": [
                "subscriptionID": .string(attribute), "subscriptionType": "zone", "zoneID": ["zoneName": "_defaultZone"]]]]])
            #expect(subscription.status == 200, "\(subscription.json)")
            var browser = Browser(harness: harness)
            #expect(try await browser.signIn(adminToken: Harness.adminToken) == 303)
            let pages = ["", "/schema", "/deploy", "/users", "/tokens", "/subscriptions", "/shares", "/usage", "/audit", "/team"].map {
                "/console/c/\(ConsolePath.segment(container))\($0)"
            } + ["/console"]
            for page in pages {
                let answer = try await browser.get(page)
                #expect(answer.status == 200, "\(page): \(answer.status) \(answer.html.prefix(300))")
                #expect(!answer.html.contains(hostile) && !answer.html.contains(attribute) && !answer.html.contains("<img"), "\(page) shows raw markup")
            }
            // And the escaped forms are there: the values are shown, as text.
            #expect(try await browser.get("/console/c/\(container)/users").html.contains("&lt;script&gt;alert(1)&lt;/script&gt;@example.com"))
            #expect(try await browser.get("/console/c/\(container)/tokens").html.contains("&quot;&gt;&lt;img src=x onerror=alert(2)&gt;"))
            #expect(try await browser.get("/console/c/\(container)/team").html.contains("&lt;script&gt;"))
            #expect(try await browser.get("/console/c/\(container)/audit").html.contains("&lt;script&gt;"))
            // A schema's text with markup in a comment comes back as text in the editor.
            let text = "DEFINE SCHEMA\n  RECORD TYPE Note (title STRING QUERYABLE); // </textarea>\(hostile)\n"
            let checked = try await browser.post("/console/c/\(container)/schema", [("schema", text), ("action", "check")])
            #expect(!checked.html.contains(hostile) && checked.html.contains("&lt;/textarea&gt;"), "\(checked.html.suffix(800))")
        }
    }

    @Test func theSchemaIsEditedAndDeployedThroughForms() async throws {
        try await Harness.run { harness in
            let session = try await harness.container()
            let container = session.container
            var browser = Browser(harness: harness)
            #expect(try await browser.signIn(adminToken: Harness.adminToken) == 303)
            let base = "/console/c/\(container)"
            _ = try await browser.get(base + "/schema")
            #expect(try await browser.post(base + "/schema/edit", [("edit", "type"), ("type", "Note")]).headers[.location]?.contains("notice=") == true)
            // A type made in the console gets the grants a type made just-in-time gets, so apps can use it at once.
            let made = try await harness.admin(.get, "containers/\(container)/schema?environment=development").json["schema"]?.stringValue ?? ""
            let grants = try SchemaLanguage.parse(made).grants["Note"]
            #expect(grants == SystemRole.defaultGrants(for: "Note"), "\(made)")
            for (field, kind) in [("title", "STRING"), ("count", "INT64"), ("tags", "LIST<STRING>")] {
                let added = try await browser.post(base + "/schema/edit", [("edit", "field"), ("type", "Note"), ("field", field), ("fieldType", kind), ("queryable", "on")])
                #expect(added.headers[.location]?.contains("notice=") == true, "\(added.headers)")
            }
            _ = try await browser.post(base + "/schema/edit", [("edit", "role"), ("role", "Editor")])
            _ = try await browser.post(base + "/schema/edit", [("edit", "grant"), ("permission", "READ"), ("role", "_world"), ("type", "Note")])
            _ = try await browser.post(base + "/schema/edit", [("edit", "index"), ("field", "Note.count"), ("queryable", "on"), ("sortable", "on")])
            // A production token names its app's origins, or says any origin (then flagged in the list).
            let unnamed = try await browser.post(base + "/tokens", [("environment", "production"), ("name", "web")])
            #expect(unnamed.headers[.location]?.contains("error=") == true && unnamed.headers[.location]?.contains("origins") == true, "\(unnamed.headers)")
            let named = try await browser.post(base + "/tokens", [("environment", "production"), ("name", "web"), ("origins", "https://notes.example.com\nhttp://localhost:5173")])
            #expect(named.status == 200 && named.html.contains("Copy the token now"), "\(named.html.suffix(800))")
            TestSecrets.record(named.html.firstMatch(of: /value="([0-9a-f]{64})"/).map { String($0.1) })
            let anyOrigin = try await browser.post(base + "/tokens", [("environment", "production"), ("name", "ios"), ("anyOrigin", "1")])
            #expect(anyOrigin.status == 200, "\(anyOrigin.html.suffix(800))")
            TestSecrets.record(anyOrigin.html.firstMatch(of: /value="([0-9a-f]{64})"/).map { String($0.1) })
            let listed = try await browser.get(base + "/tokens").html
            #expect(listed.contains("https://notes.example.com http://localhost:5173") && listed.contains("the sign-in page hands its sessions to no page"), "\(listed)")
            let refused = try await browser.post(base + "/schema/edit", [("edit", "field"), ("type", "Note"), ("field", "bad name"), ("fieldType", "STRING")])
            #expect(refused.headers[.location]?.contains("error=") == true)
            // The refusal's reason shows on the page the redirect leads to; the same words in a
            // link made anywhere else (or the sealed link with its words changed) show nothing.
            let refusal = try #require(refused.headers[.location])
            let shown = try await browser.get(refusal).html
            #expect(shown.contains("role=\"alert\"") && shown.contains("must start with a letter"), "\(shown.suffix(1500))")
            let crafted = base + "/schema?error=" + ConsolePath.segment("Your session expired. Sign in again at https://evil.example")
                + "&notice=" + ConsolePath.segment("Sign in again at https://evil.example")
            #expect(refusal.contains("letter"), "\(refusal)")
            let tampered = refusal.replacingOccurrences(of: "letter", with: "evil")
            for link in [crafted, tampered, crafted + "&seal=" + String(repeating: "0", count: 32)] {
                let page = try await browser.get(link)
                #expect(page.status == 200 && !page.html.contains("evil") && !page.html.contains("role=\"alert\""), "\(link): \(page.html.suffix(800))")
            }
            // The sign-in page says only its own messages, by code.
            var stranger = Browser(harness: harness)
            #expect(try await stranger.get("/console/signin?notice=signed-out").html.contains("You are signed out."))
            let spoofed = try await stranger.get("/console/signin?error=" + ConsolePath.segment("Sign in at https://evil.example instead")).html
            #expect(!spoofed.contains("evil") && !spoofed.contains("role=\"alert\""), "\(spoofed)")
            let schema = try await harness.admin(.get, "containers/\(container)/schema?environment=development").json["schema"]?.stringValue ?? ""
            #expect(schema.contains("count INT64 QUERYABLE SORTABLE") && schema.contains("tags LIST<STRING> QUERYABLE") && schema.contains("CREATE ROLE Editor")
                    && schema.contains("GRANT READ TO \"_world\""), "\(schema)")
            // Text with a mistake: the validator's line and column, beside the text.
            let bad = try await browser.post(base + "/schema", [("schema", "DEFINE SCHEMA\n  RECORD TYPE Note (title STRNG);\n"), ("action", "check")])
            #expect(bad.status == 200 && bad.html.contains("line 2, column") && bad.html.contains("aria-invalid"), "\(bad.html.suffix(1500))")
            // The deploy: the plan, a dry run, a confirmation that names the container.
            let plan = try await browser.get(base + "/deploy")
            #expect(plan.html.contains("Note") && plan.html.contains("type the container"), "\(plan.html.suffix(1500))")
            let dry = try await browser.post(base + "/deploy", [("action", "dry-run")])
            #expect(dry.status == 200 && dry.html.contains("Dry run: nothing was changed"))
            let unconfirmed = try await browser.post(base + "/deploy", [("action", "deploy"), ("confirm", "something else")])
            #expect(unconfirmed.headers[.location]?.contains("error=") == true)
            #expect(try await harness.admin(.get, "containers/\(container)/schema?environment=production").json["schema"]?.stringValue?.contains("Note") == false)
            let deployed = try await browser.post(base + "/deploy", [("action", "deploy"), ("confirm", container)])
            #expect(deployed.status == 303 && deployed.headers[.location]?.contains("/deploy/progress") == true, "\(deployed.headers)")
            #expect(try await harness.admin(.get, "containers/\(container)/schema?environment=production").json["schema"]?.stringValue?.contains("Note") == true)
            // The progress page's script asks for steps with the CSRF header and gets JSON.
            let progress = try await browser.get(base + "/deploy/progress")
            #expect(progress.html.contains("data-index-build"))
            let step = try await browser.raw(.post, base + "/indexes", body: "", headers: [.cookie: browser.cookie, .origin: Self.origin,
                                                                                         HTTPField.Name("X-CSRF-Token")!: browser.csrf])
            #expect(step.status == 200 && step.html.contains("\"done\":true"), "\(step.html)")
        }
    }

    /// A container with `schema` in development, a signed-up user (their record name) and a
    /// development server-to-server key (its ID).
    static func furnished(_ harness: Harness, schema: String) async throws -> (session: Session, container: String, user: String, keyID: String) {
        let session = try await harness.container()
        #expect(try await harness.admin(.post, "containers/\(session.container)/schema/import", json: ["schema": .string(schema)]).status == 200)
        let user = try await session.signedUp("lee\(UInt32.random(in: 0...UInt32.max))@example.com")
        let key = try await harness.admin(.post, "containers/\(session.container)/keys", json: ["environment": "development", "publicKey": .string(Signer().publicKeyPEM)])
        return (session, session.container, user.userRecordName ?? "", try #require(key.json["keyID"]?.stringValue))
    }

    /// Revoking a token or key, removing a team member and disabling a user first answer a page
    /// that says what will happen; nothing changes until its button sends the form again.
    @Test func destructiveActionsAskFirstAndDoNothingUntilConfirmed() async throws {
        try await Harness.run { harness in
            let (_, container, user, keyID) = try await Self.furnished(harness, schema: "DEFINE SCHEMA RECORD TYPE Note (title STRING QUERYABLE SORTABLE);")
            #expect(try await harness.admin(.post, "containers/\(container)/tokens", json: ["environment": "development", "name": "doomed"]).status == 201)
            let member = try await harness.signedInOperator(teams: [(container, .viewer)])
            let owner = try await harness.signedInOperator(teams: [(container, .owner)])
            var browser = Browser(harness: harness)
            #expect(try await browser.signIn(email: owner.email, password: owner.password) == 303)
            let base = "/console/c/\(container)"
            let tokensPage = try await browser.get(base + "/tokens")
            // The danger style is markup, not text escaped into the attribute.
            #expect(tokensPage.html.contains(#"<button type="submit" class="danger">Revoke</button>"#) && !tokensPage.html.contains("&quot;danger&quot;"))
            let tokenID = try #require(tokensPage.html.firstMatch(of: /tokens\/([0-9]+)\/revoke/)?.output.1)

            func tokenRevoked() async throws -> Bool {
                let tokens = try await harness.admin(.get, "tokens?container=\(container)").json["tokens"]?.arrayValue ?? []
                return tokens.first { $0["id"]?.intValue == Int64(tokenID) }?["revokedAt"].map { $0 != .null } ?? false
            }
            func keyRevoked() async throws -> Bool {
                let keys = try await harness.admin(.get, "containers/\(container)/keys").json["keys"]?.arrayValue ?? []
                return keys.first { $0["keyID"]?.stringValue == keyID }?["revokedAt"].map { $0 != .null } ?? false
            }
            func memberRemoved() async throws -> Bool {
                let team = try await harness.admin(.get, "containers/\(container)/team").json["team"]?.arrayValue ?? []
                return !team.contains { $0["emailAddress"]?.stringValue == member.email }
            }
            func userDisabled() async throws -> Bool {
                let found = try await harness.admin(.get, "containers/\(container)/users/\(user)?environment=development").json["user"]
                return found?["disabledAt"].map { $0 != .null } ?? false
            }
            func sortableRemoved() async throws -> Bool {
                let text = try await harness.admin(.get, "containers/\(container)/schema?environment=development").json["schema"]?.stringValue ?? ""
                return try SchemaLanguage.parse(text).recordTypes["Note"]?["title"]?.sortable == false
            }
            // A field's index form starts from the indexes it has.
            let indexes = try await browser.get(base + "/schema/indexes?field=Note.title")
            #expect(indexes.status == 200 && indexes.html.contains(#"name="queryable" value="on" checked"#) && indexes.html.contains(#"name="sortable" value="on" checked"#)
                    && indexes.html.contains(#"name="searchable" value="on">"#), "\(indexes.html.prefix(800))")
            let actions: [(path: String, fields: [(String, String)], question: String, done: () async throws -> Bool)] = [
                (base + "/schema/edit", [("edit", "index"), ("field", "Note.title"), ("queryable", "on")], "Remove SORTABLE from Note.title?", sortableRemoved),
                (base + "/tokens/\(tokenID)/revoke", [], "Revoke API token \(tokenID)?", tokenRevoked),
                (base + "/keys/\(keyID)/revoke", [], "Revoke server-to-server key", keyRevoked),
                (base + "/team/\(ConsolePath.segment(member.email))/remove", [], "Remove \(member.email) from the team?", memberRemoved),
                (base + "/users/\(user)/disable", [("environment", "development")], "Disable \(user)?", userDisabled),
            ]
            for action in actions {
                let asked = try await browser.post(action.path, action.fields)
                #expect(asked.status == 200 && asked.html.contains(action.question), "\(action.path): \(asked.status) \(asked.html.prefix(600))")
                #expect(try await action.done() == false, "\(action.path) acted before it was confirmed")
                // The page's form, sent as its button sends it: its hidden fields and confirmed=yes.
                let form = try #require(asked.html.firstMatch(of: /<form method="post" action="([^"]+)" class="stack">(.*?)<\/form>/.dotMatchesNewlines()))
                #expect(String(form.output.1) == action.path)
                let hidden = String(form.output.2).matches(of: /<input type="hidden" name="([^"]+)" value="([^"]*)">/).map { (String($0.output.1), String($0.output.2)) }
                #expect(hidden.contains { $0 == ("confirmed", "yes") } && action.fields.allSatisfy { field in hidden.contains { $0 == field } }, "\(hidden)")
                let confirmed = try await browser.post(action.path, hidden.filter { $0.0 != "csrf" })
                #expect(confirmed.status == 303, "\(action.path): \(confirmed.status) \(confirmed.html.prefix(400))")
                #expect(try await action.done(), "\(action.path) did nothing once confirmed")
            }
            // Erasing a user wants their record name typed: anything else erases nothing.
            func userExists() async throws -> Bool {
                try await harness.admin(.get, "containers/\(container)/users/\(user)?environment=development").status == 200
            }
            let wrongName = try await browser.post(base + "/users/\(user)/erase", [("confirm", "someone else")])
            #expect(wrongName.status == 303 && wrongName.headers[.location]?.contains("error=") == true, "\(wrongName.headers)")
            #expect(try await userExists())
            let erased = try await browser.post(base + "/users/\(user)/erase", [("confirm", user)])
            #expect(erased.status == 303 && erased.headers[.location]?.contains("notice=") == true, "\(erased.headers)")
            #expect(try await !userExists())
            // Someone the action is not for is refused by it, not asked.
            var viewer = Browser(harness: harness)
            let other = try await harness.signedInOperator(teams: [(container, .viewer)])
            #expect(try await viewer.signIn(email: other.email, password: other.password) == 303)
            _ = try await viewer.get(base + "/tokens")
            let refused = try await viewer.post(base + "/team/\(ConsolePath.segment(owner.email))/remove", [])
            #expect(refused.status == 403 && !refused.html.contains("confirmed"), "\(refused.status)")
        }
    }

    /// A superuser manages operators in the console as with `stratus operator`: add, disable
    /// (asked first), enable, sign out everywhere (asked first), set a password; reads the server's
    /// figures and its audit log. Anyone else is refused and is not offered the pages.
    @Test func aSuperuserManagesOperatorsAndReadsTheServer() async throws {
        try await Harness.run { harness in
            let boss = try await harness.signedInOperator(superuser: true)
            let plain = try await harness.signedInOperator()
            var browser = Browser(harness: harness)
            #expect(try await browser.signIn(email: boss.email, password: boss.password) == 303)
            let home = try await browser.get("/console")
            #expect(home.html.contains("href=\"/console/operators\"") && home.html.contains("href=\"/console/server\""))
            // Add an operator with the form.
            let email = "new-\(UInt32.random(in: 0...UInt32.max))@example.com"
            _ = try await browser.get("/console/operators")
            let added = try await browser.post("/console/operators", [("email", email), ("password", "a first password for them")])
            #expect(added.status == 303 && added.headers[.location]?.contains("notice=") == true, "\(added.status) \(added.html.suffix(800))")
            let listed = try await browser.get("/console/operators")
            #expect(listed.html.contains(email) && !listed.html.contains("/operators/\(ConsolePath.segment(boss.email))/disable"), "no disabling yourself")
            func account() async throws -> JSON? {
                try await harness.admin(.get, "operators").json["operators"]?.arrayValue?.first { $0["emailAddress"]?.stringValue == email }
            }
            #expect(try await account() != nil)
            // They sign in; a password set by the superuser ends that sign-in and the new one works.
            let login = try await harness.management(nil, .post, "login", json: ["emailAddress": .string(email), "password": "a first password for them"])
            let credential = try #require(login.json["credential"]?.stringValue, "\(login.json)")
            #expect(try await harness.management(credential, .get, "whoami").status == 200)
            let passwordPage = try await browser.get("/console/operators/\(ConsolePath.segment(email))/password")
            #expect(passwordPage.status == 200 && !passwordPage.html.contains("id=\"current\""), "another's password needs no current one")
            let reset = try await browser.post("/console/operators/\(ConsolePath.segment(email))/password", [("password", "a second password for them")])
            #expect(reset.status == 303 && reset.headers[.location]?.contains("1%20sign-in%20revoked") == true, "\(reset.headers)")
            #expect(try await harness.management(credential, .get, "whoami").status == 401)
            let again = try await harness.management(nil, .post, "login", json: ["emailAddress": .string(email), "password": "a second password for them"])
            let second = try #require(again.json["credential"]?.stringValue, "\(again.json)")
            // Sign out everywhere: asked first, nothing happens until confirmed.
            let asked = try await browser.post("/console/operators/\(ConsolePath.segment(email))/revoke", [])
            #expect(asked.status == 200 && asked.html.contains("Sign them out") && asked.html.contains("name=\"confirmed\" value=\"yes\""))
            #expect(try await harness.management(second, .get, "whoami").status == 200)
            let revoked = try await browser.post("/console/operators/\(ConsolePath.segment(email))/revoke", [("confirmed", "yes")])
            #expect(revoked.status == 303, "\(revoked.html.suffix(500))")
            #expect(try await harness.management(second, .get, "whoami").status == 401)
            // Disable (asked first), then enable.
            let disableAsked = try await browser.post("/console/operators/\(ConsolePath.segment(email))/disable", [])
            #expect(disableAsked.status == 200 && disableAsked.html.contains("Disable the operator"))
            #expect(try await account()?["disabledAt"] == .null)
            #expect(try await browser.post("/console/operators/\(ConsolePath.segment(email))/disable", [("confirmed", "yes")]).status == 303)
            #expect(try await account()?["disabledAt"] != .null)
            #expect(try await browser.get("/console/operators").html.contains("/operators/\(ConsolePath.segment(email))/enable"))
            #expect(try await browser.post("/console/operators/\(ConsolePath.segment(email))/enable", []).status == 303)
            #expect(try await account()?["disabledAt"] == .null)
            // A mistake is said in words, and nothing is added.
            let bad = try await browser.post("/console/operators", [("email", "not an address"), ("password", "short")])
            #expect(bad.status == 303 && bad.headers[.location]?.contains("error=") == true, "\(bad.headers)")
            // The server page: the process's figures, and the server audit log with every action above.
            let server = try await browser.get("/console/server")
            #expect(server.status == 200 && server.html.contains("Memory (resident)") && server.html.contains(" MiB"), "\(server.html.suffix(2000))")
            for action in ["operator.add", "operator.password", "operator.revoke", "operator.disable", "operator.enable"] {
                #expect(server.html.contains(">\(action)<"), "\(action) in the server audit log")
            }
            // Someone who is not a superuser: no links, and the pages refuse.
            var other = Browser(harness: harness)
            #expect(try await other.signIn(email: plain.email, password: plain.password) == 303)
            #expect(try await !other.get("/console").html.contains("/console/operators"))
            for page in ["/console/operators", "/console/server", "/console/operators/\(ConsolePath.segment(email))/password"] {
                let refused = try await other.get(page)
                #expect(refused.status == 403, "\(page): \(refused.status)")
            }
            _ = try await other.get("/console")
            let forbidden = try await other.post("/console/operators/\(ConsolePath.segment(email))/disable", [("confirmed", "yes")])
            #expect(forbidden.status == 403)
            #expect(try await account()?["disabledAt"] == .null)
        }
    }

    /// Usage reads as a person reads it: sizes in GiB and MiB, counts in k and M, limits by name in
    /// words (the API's name beside), and what each count counts said on the page.
    @Test func usageIsShownInUnitsAndWords() async throws {
        try await Harness.run { harness in
            let session = try await harness.container().signedUp()
            #expect(try await harness.admin(.patch, "containers/\(session.container)/quota",
                                            json: ["environment": "development", "maxStorageBytes": 10_737_418_240, "maxRecords": 2_500_000]).status == 200)
            var browser = Browser(harness: harness)
            #expect(try await browser.signIn(adminToken: Harness.adminToken) == 303)
            let page = try await browser.get("/console/c/\(session.container)/usage").html
            for words in ["of 10 GiB", "of 2.5 M", "Storage (now 10 GiB)", "Records (now 2.5 M)", "<code>maxStorageBytes</code>", "The last minute",
                          "are not the HTTP requests that"] {
                #expect(page.contains(words), "\(words)")
            }
            #expect(!page.contains("lastMinute") && !page.contains(">10737418240 of"), "\(page.suffix(3000))")
            #expect(ConsoleUnits.bytes(1023) == "1023 bytes" && ConsoleUnits.bytes(1536) == "1.5 KiB" && ConsoleUnits.count(12_345) == "12.3 k"
                    && ConsoleUnits.count(999_999_999) == "1000 M")
        }
    }

    /// In development a field or a record type is deleted from the schema after a question that
    /// says how many records are of that type (they stay, with their values); nothing happens
    /// until it is confirmed.
    @Test func aFieldOrTypeIsDeletedInDevelopmentAfterSayingWhatItHolds() async throws {
        try await Harness.run { harness in
            let session = try await harness.container()
            let container = session.container
            #expect(try await harness.admin(.post, "containers/\(container)/schema/import", json: ["schema": """
                DEFINE SCHEMA RECORD TYPE Note (title STRING QUERYABLE, body STRING, GRANT READ TO "_world", GRANT CREATE TO "_icloud", GRANT WRITE TO "_creator");
                RECORD TYPE Tag (name STRING);
                """]).status == 200)
            let ada = try await session.signedUp()
            for index in 0..<3 {
                #expect(try await ada.post("public", "records/modify", ["operations": [["operationType": "create", "record": ["recordType": "Note",
                    "recordName": .string("n\(index)"), "fields": ["title": ["value": "t"], "body": ["value": "kept"]]]]]]).status == 200)
            }
            var browser = Browser(harness: harness)
            #expect(try await browser.signIn(adminToken: Harness.adminToken) == 303)
            let base = "/console/c/\(container)"
            #expect(try await browser.get(base + "/schema").html.contains("<option>Note.body</option>"))
            func schema() async throws -> String {
                try await harness.admin(.get, "containers/\(container)/schema?environment=development").json["schema"]?.stringValue ?? ""
            }
            let asked = try await browser.post(base + "/schema/edit", [("edit", "delete"), ("target", "Note.body")])
            #expect(asked.status == 200 && asked.html.contains("Delete Note.body from the development schema?")
                    && asked.html.contains("3 development records are Note records: they stay, and keep their values of body"), "\(asked.html.suffix(1500))")
            #expect(try await schema().contains("body STRING"), "nothing changes until confirmed")
            let done = try await browser.post(base + "/schema/edit", [("edit", "delete"), ("target", "Note.body"), ("confirmed", "yes")])
            #expect(done.headers[.location]?.contains("notice=") == true, "\(done.headers)")
            let after = try await schema()
            #expect(!after.contains("body") && after.contains("title STRING QUERYABLE"), "\(after)")
            // The records keep the value.
            let lookup = try await ada.post("public", "records/lookup", ["records": [["recordName": "n1"]]])
            #expect(lookup.json["records"]?.arrayValue?.first?["fields"]?["body"]?["value"] == "kept", "\(lookup.json)")
            // A type with no records: said so; deleted with its grants.
            let type = try await browser.post(base + "/schema/edit", [("edit", "delete"), ("target", "Tag")])
            #expect(type.html.contains("No development record is a Tag record."), "\(type.html.suffix(1500))")
            #expect(try await browser.post(base + "/schema/edit", [("edit", "delete"), ("target", "Tag"), ("confirmed", "yes")]).status == 303)
            #expect(try await !schema().contains("Tag"))
            // A viewer is refused, not asked.
            let viewer = try await harness.signedInOperator(teams: [(container, .viewer)])
            var other = Browser(harness: harness)
            #expect(try await other.signIn(email: viewer.email, password: viewer.password) == 303)
            _ = try await other.get(base + "/schema")
            let refused = try await other.post(base + "/schema/edit", [("edit", "delete"), ("target", "Note.title")])
            #expect(refused.status == 403, "\(refused.status)")
            #expect(try await schema().contains("title"))
        }
    }

    /// The audit log pages back to its first entry, a page at a time.
    @Test func theAuditLogPagesBackToItsFirstEntry() async throws {
        try await Harness.run { harness in
            let session = try await harness.container()
            let container = session.container
            // 230 entries of the container's log (and its creation's).
            for index in 0..<230 {
                let made = try await harness.admin(.post, "containers/\(container)/tokens", json: ["environment": "development", "name": .string("t\(index)")])
                #expect(made.status == 201)
            }
            let total = try await harness.admin(.get, "containers/\(container)/audit?limit=10000").json["entries"]?.arrayValue ?? []
            var browser = Browser(harness: harness)
            #expect(try await browser.signIn(adminToken: Harness.adminToken) == 303)
            var page = "/console/c/\(container)/audit"
            var seen: [String] = []
            var pages = 0
            while true {
                let html = try await browser.get(page).html
                seen += html.matches(of: /<td><time datetime="(\d{4}-\d\d-\d\dT[^"]+)"[^>]*>[^<]+<\/time><\/td><td><bdi>[^<]*<\/bdi><\/td><td>([a-z.]+)<\/td>/).map { "\($0.output.2)" }
                pages += 1
                guard let next = html.firstMatch(of: /rel="next" href="([^"]+)"/)?.output.1 else {
                    #expect(html.contains("The first entry is the last shown"))
                    break
                }
                page = String(next).replacingOccurrences(of: "&amp;", with: "&")
                if pages > 10 { break }
            }
            #expect(pages == (total.count + ConsoleAudit.pageSize - 1) / ConsoleAudit.pageSize && seen.count == total.count, "\(pages) pages, \(seen.count) of \(total.count)")
            #expect(seen.last == total.first?["action"]?.stringValue, "the last entry shown is the first written")
        }
    }

    /// Each page offers an owner, a developer and a viewer exactly the forms whose actions the
    /// role table (`ManagementAccess`) lets them use: none they would be refused, none missing.
    @Test func pagesOfferOnlyTheFormsTheRoleTableAllows() async throws {
        try await Harness.run { harness in
            let (_, container, user, keyID) = try await Self.furnished(harness, schema: "DEFINE SCHEMA RECORD TYPE Note (title STRING QUERYABLE);")
            let production = try await harness.admin(.post, "containers/\(container)/tokens", json: ["environment": "production", "name": "p", "allowedOrigins": ["https://app.example.com"]])
            #expect(production.status == 201, "\(production.json)")
            let saved = try await harness.admin(.post, "containers/\(container)/records/modify", json: [
                "environment": "development", "database": "public", "operations": [["operationType": "create", "record": ["recordName": "n1", "recordType": "Note", "fields": ["title": ["value": "x"]]]]]])
            #expect(saved.status == 200, "\(saved.json)")
            let tokens = try await harness.admin(.get, "tokens?container=\(container)").json["tokens"]?.arrayValue ?? []
            let tokenIDs = tokens.map { ($0["id"]?.intValue ?? 0, ContainerEnvironment(rawValue: $0["environment"]?.stringValue ?? "") ?? .development) }
            #expect(tokenIDs.count == 2 && Set(tokenIDs.map(\.1)) == [.development, .production], "\(tokens)")
            var people: [(TeamRole, Harness.Operator)] = []
            for role in [TeamRole.owner, .developer, .viewer] { people.append((role, try await harness.signedInOperator(teams: [(container, role)]))) }

            func path(_ parts: String...) -> String { "/console/" + (["c", container] + parts).map(ConsolePath.segment).joined(separator: "/") }
            // Page → every form it can offer: the form's action, and the route and environment it calls.
            let pages: [(page: String, forms: [(action: String, route: ManagementRoute, environment: ContainerEnvironment?)])] = [
                (path("schema") + "?environment=development", [(path("schema", "edit"), .importSchema, nil), (path("schema"), .importSchema, nil)]),
                (path("deploy"), [(path("deploy"), .deploySchema, nil)]),
                (path("users") + "?environment=development", [(path("users", user, "disable"), .disableUser, nil)]),
                (path("tokens"), [(path("tokens"), .createToken, .development), (path("keys"), .addKey, .development),
                                  (path("keys", keyID, "revoke"), .revokeKey, .development)]
                    + tokenIDs.map { (path("tokens", String($0.0), "revoke"), ManagementRoute.revokeToken, $0.1) }),
                (path("usage") + "?environment=development", [(path("quota"), .setQuota, nil)]),
                (path("team"), [(path("team"), .addTeamMember, nil)] + people.flatMap { member in
                    [(path("team", member.1.email, "role"), ManagementRoute.setTeamRole, nil), (path("team", member.1.email, "remove"), .removeTeamMember, nil)] }),
                (path("records", "view") + "?environment=development&database=public&zone=_defaultZone&name=n1",
                 [(path("records", "save"), .modifyRecords, .development), (path("records", "delete"), .modifyRecords, .development)]),
            ]
            var differences: [String] = []
            var offered = 0
            for (role, person) in people {
                var browser = Browser(harness: harness)
                #expect(try await browser.signIn(email: person.email, password: person.password) == 303)
                for (page, forms) in pages {
                    let answer = try await browser.get(page)
                    #expect(answer.status == 200, "\(role) \(page): \(answer.status)")
                    let present = Set(answer.html.matches(of: /<form method="post" action="([^"]+)"/).map { String($0.output.1) }).subtracting(["/console/signout"])
                    let allowed = Set(forms.filter { form in
                        ManagementAccess.decide(form.route.requirement, caller: ManagementCaller(isSuperuser: false, operatorID: 1), role: role,
                                                environment: form.environment, container: container) == .allowed
                    }.map(\.action))
                    offered += present.count
                    for action in allowed.subtracting(present) { differences.append("\(role) \(page): missing \(action)") }
                    for action in present.subtracting(allowed) { differences.append("\(role) \(page): offers \(action)") }
                }
            }
            print("console forms: \(pages.count) pages × \(people.count) roles, \(offered) forms offered, \(differences.count) unlike the role table")
            #expect(offered > 0)
            #expect(differences.isEmpty, "\(differences.joined(separator: "\n"))")
        }
    }

    /// Each console page and action answers each kind of team member as the management API does.
    @Test func consolePagesFollowTheRoleTable() async throws {
        try await Harness.run { harness in
            let session = try await harness.container().signedUp()
            let container = session.container
            let user = session.userRecordName ?? ""
            #expect(try await harness.admin(.post, "containers/\(container)/schema/import", json: ["schema": "DEFINE SCHEMA RECORD TYPE Note (title STRING);"]).status == 200)
            var callers: [(String, TeamRole?, Browser)] = []
            for (name, role) in [("owner", TeamRole.owner), ("developer", .developer), ("viewer", .viewer), ("outsider", nil)] as [(String, TeamRole?)] {
                let person = try await harness.signedInOperator(teams: role.map { [(container, $0)] } ?? [])
                var browser = Browser(harness: harness)
                #expect(try await browser.signIn(email: person.email, password: person.password) == 303, "\(name)")
                _ = try await browser.get("/console")
                callers.append((name, role, browser))
            }
            let base = "/console/c/\(container)"
            // Page or action → the management route whose rule decides it (and the environment it acts on).
            let cases: [(method: String, path: String, fields: [(String, String)], rule: String, environment: ContainerEnvironment?)] = [
                ("GET", base, [], "GET /management/1/containers/:container/schema", nil),
                ("GET", base + "/schema?environment=production", [], "GET /management/1/containers/:container/schema", nil),
                ("GET", base + "/deploy", [], "GET /management/1/containers/:container/schema/diff", nil),
                ("GET", base + "/users", [], "GET /management/1/containers/:container/users", nil),
                ("GET", base + "/tokens", [], "GET /management/1/containers/:container/keys", nil),
                ("GET", base + "/usage", [], "GET /management/1/containers/:container/usage", nil),
                ("GET", base + "/audit", [], "GET /management/1/containers/:container/audit", nil),
                ("GET", base + "/team", [], "GET /management/1/containers/:container/team", nil),
                ("GET", base + "/users/\(user)/export", [], "GET /management/1/containers/:container/users/:user/export", nil),
                ("POST", base + "/schema/edit", [("edit", "role"), ("role", "NEWROLE")], "POST /management/1/containers/:container/schema/import", nil),
                ("POST", base + "/tokens", [("environment", "development"), ("name", "t")], "POST /management/1/containers/:container/tokens", .development),
                ("POST", base + "/tokens", [("environment", "production"), ("name", "t"), ("anyOrigin", "1")], "POST /management/1/containers/:container/tokens", .production),
                ("POST", base + "/deploy", [("action", "deploy"), ("confirm", container)], "POST /management/1/containers/:container/schema/deploy", nil),
                ("POST", base + "/quota", [("environment", "development"), ("maxRecords", "100000")], "PATCH /management/1/containers/:container/quota", nil),
                ("POST", base + "/users/\(user)/disable", [("environment", "development")], "POST /management/1/containers/:container/users/:user/disable", nil),
                ("GET", base + "/records?type=Note", [], "POST /management/1/containers/:container/records/query", nil),
                ("GET", base + "/records?type=Note&database=private&user=\(user)&reason=support", [], "userDatabase", nil),
                ("GET", base + "/records/new?database=shared&user=\(user)&reason=support&type=Note", [], "userDatabase", nil),
                ("POST", base + "/records/save", [("environment", "development"), ("type", "Note"), ("field.title", "x")],
                 "POST /management/1/containers/:container/records/modify", .development),
            ]
            var mismatches: [String] = []
            for (method, path, fields, rule, environment) in cases {
                let requirement = try #require(rule == "userDatabase" ? ManagementAccess.userDatabase : ManagementAccess.routes[rule], "\(rule)")
                for (name, role, browser) in callers {
                    var copy = browser
                    // A new role's name for each (a taken one is refused before the management API is asked).
                    let filled = fields.map { ($0.0, $0.1 == "NEWROLE" ? "Role\(UInt32.random(in: 0...UInt32.max))" : $0.1) }
                    let answer = method == "GET" ? try await copy.get(path) : try await browser.post(path, filled)
                    let expected = ManagementAccess.decide(requirement, caller: ManagementCaller(isSuperuser: false, operatorID: 1), role: role,
                                                           environment: environment, container: container)
                    let fine: Bool
                    switch expected {
                    case .allowed: fine = answer.status == 200 || answer.status == 303
                    case .notFound: fine = answer.status == 404 && answer.html.contains("does not exist")
                    case .denied: fine = answer.status == 403 && answer.html.contains("needs the")
                    case .unauthenticated: fine = answer.status == 303
                    }
                    if !fine { mismatches.append("\(method) \(path) by the \(name): \(answer.status), expected \(expected)") }
                    #expect(answer.status != 500, "\(method) \(path) by the \(name)")
                }
            }
            print("console access: \(cases.count) pages and actions × \(callers.count) team members, \(mismatches.count) answers unlike the management API's")
            #expect(mismatches.isEmpty, "\(mismatches.joined(separator: "\n"))")
        }
    }

    /// The query builder offers only what the API accepts: indexed fields, each with the
    /// comparators its type and index allow (each offered one runs; one not offered is refused in
    /// the console's words), sorting by SORTABLE fields, from the column headers too; columns chosen.
    @Test func theQueryBuilderOffersOnlyWhatTheSchemaAllows() async throws {
        try await Harness.run { harness in
            let session = try await harness.container()
            let container = session.container
            let schema = """
                DEFINE SCHEMA
                  RECORD TYPE Note (title STRING QUERYABLE SORTABLE SEARCHABLE, count INT64 QUERYABLE SORTABLE, body STRING, place LOCATION QUERYABLE,
                                    tags LIST<STRING> QUERYABLE, blob BYTES, GRANT WRITE TO "_creator", GRANT CREATE TO "_icloud", GRANT READ TO "_world");
                """
            #expect(try await harness.admin(.post, "containers/\(container)/schema/import", json: ["schema": .string(schema)]).status == 200)
            let ada = try await session.signedUp("ada@example.com")
            #expect(try await ada.post("public", "records/modify", ["operations": [["operationType": "create", "record": ["recordType": "Note", "recordName": "n1",
                "fields": ["title": ["value": "hello world"], "count": ["value": 3], "body": ["value": "text"], "place": ["value": ["latitude": 1, "longitude": 2]],
                           "tags": ["value": ["a"]]]]]]]).status == 200)
            var browser = Browser(harness: harness)
            #expect(try await browser.signIn(adminToken: Harness.adminToken) == 303)
            let base = "/console/c/\(container)/records"
            let page = try await browser.get(base + "?type=Note").html
            let builder = try #require(page.firstMatch(of: /<select id="f1"[^>]*>(.*?)<\/select>/.dotMatchesNewlines())?.output.1)
            let offered = Dictionary(uniqueKeysWithValues: builder.matches(of: /<option value="([a-z]+)" data-comparators="([A-Z_ ]+)"/).map {
                (String($0.output.1), $0.output.2.split(separator: " ").map(String.init))
            })
            #expect(offered.keys.sorted() == ["count", "place", "tags", "title"], "\(builder)")
            #expect(offered["place"] == ["NEAR"] && offered["count"]?.contains("LESS_THAN") == true && offered["tags"]?.contains("LIST_CONTAINS") == true
                    && offered["title"]?.contains("CONTAINS_ALL_TOKENS") == true && offered["title"]?.contains("LIST_CONTAINS") == false, "\(offered)")
            let sorts = try #require(page.firstMatch(of: /<select id="sort"[^>]*>(.*?)<\/select>/.dotMatchesNewlines())?.output.1)
            #expect(sorts.matches(of: /<option>([a-z]+)<\/option>/).map { String($0.output.1) } == ["count", "title"], "\(sorts)")
            // Every comparator offered runs.
            let samples = ["title": "hello", "count": "3", "place": "1,2,1000", "tags": "a"]
            var refused: [String] = []
            for (field, comparators) in offered {
                for comparator in comparators {
                    let answer = try await browser.get(base + "?type=Note&f1=\(field)&o1=\(comparator)&v1=\(ConsolePath.segment(samples[field]!))")
                    if answer.status != 200 || answer.html.contains("class=\"error\"") {
                        refused.append("\(field) \(comparator): \(answer.html.firstMatch(of: /class="error"[^>]*>([^<]*)/)?.output.1 ?? "")")
                    }
                }
            }
            #expect(refused.isEmpty, "\(refused)")
            // One not offered is refused, saying what would do; an API refusal names the filter and field.
            let wrong = try await browser.get(base + "?type=Note&f1=place&o1=LESS_THAN&v1=1")
            #expect(wrong.html.contains("Filter 1 (place): LESS_THAN does not apply to place; choose NEAR"), "\(wrong.html.suffix(1500))")
            let unindexed = try await browser.get(base + "?type=Note&f1=body&o1=EQUALS&v1=text")
            #expect(unindexed.html.contains("Filter 1 (body): body cannot be filtered: it has no index"))
            let words = try await browser.get(base + "?type=Note&f1=count&o1=EQUALS&v1=1&f2=title&o2=CONTAINS_ALL_TOKENS&v2=%21%21%21")
            #expect(words.html.contains("Filter 2 (title): &#39;!!!&#39; has no words") && !words.html.contains("query.filterBy"), "\(words.html.suffix(1500))")
            // A SORTABLE field's header sorts by it, then the other way.
            let headed = try await browser.get(base + "?type=Note").html
            let link = try #require(headed.firstMatch(of: /<th scope="col"><a href="([^"]+)" aria-label="Sort by count, ascending">count<\/a>/)?.output.1)
            let sorted = try await browser.get(String(link).replacingOccurrences(of: "&amp;", with: "&")).html
            #expect(sorted.contains("aria-label=\"Sort by count, descending\">count ↑</a>") && sorted.contains("<option selected>count</option>"), "\(sorted.suffix(2500))")
            #expect(!headed.contains("aria-label=\"Sort by body"), "body is not SORTABLE")
            // Columns: the boxes ticked, in the schema's order.
            let chosen = try await browser.get(base + "/columns?type=Note&environment=development&col=count&col=body")
            let location = try #require(chosen.headers[.location])
            #expect(location.contains("cols=count%2Cbody") || location.contains("cols=count,body"), "\(location)")
            let narrowed = try await browser.get(location).html
            let headers = narrowed.matches(of: /<th scope="col">(?:<a [^>]*>)?([A-Za-z]+)/).map { String($0.output.1) }
            #expect(headers == ["Record", "body", "count", "Modified"], "\(headers)")
        }
    }

    @Test func recordsAreFoundShownAndChangedAsAPersonWould() async throws {
        try await Harness.run { harness in
            let session = try await harness.container()
            let container = session.container
            let schema = """
                DEFINE SCHEMA
                  RECORD TYPE Note (title STRING QUERYABLE SORTABLE SEARCHABLE, count INT64 QUERYABLE SORTABLE, due TIMESTAMP QUERYABLE SORTABLE,
                                    place LOCATION QUERYABLE, parent REFERENCE QUERYABLE, tags LIST<STRING> QUERYABLE,
                                    GRANT WRITE TO "_creator", GRANT CREATE TO "_icloud", GRANT READ TO "_world");
                """
            #expect(try await harness.admin(.post, "containers/\(container)/schema/import", json: ["schema": .string(schema)]).status == 200)
            let ada = try await session.signedUp("ada@example.com")
            var operations: [JSON] = []
            for index in 0..<5 {
                operations.append(["operationType": "create", "record": ["recordType": "Note", "recordName": .string("note-\(index)"), "fields": [
                    "title": ["value": .string(index == 4 ? "<script>alert(3)</script>" : "note \(index)")], "count": ["value": .int(Int64(index))],
                    "due": ["value": 1_795_000_000_000], "place": ["value": ["latitude": 52.5, "longitude": 13.4]],
                    "parent": ["value": ["recordName": "note-0", "action": "NONE"]], "tags": ["value": ["a", "b"]]]]])
            }
            #expect(try await ada.post("public", "records/modify", ["operations": .array(operations)]).status == 200)
            #expect(try await ada.post("private", "records/modify", ["operations": [["operationType": "create", "record": [
                "recordType": "Note", "recordName": "secret", "fields": ["title": ["value": "Ada's own"]]]]]]).status == 200)
            var browser = Browser(harness: harness)
            #expect(try await browser.signIn(adminToken: Harness.adminToken) == 303)
            let base = "/console/c/\(container)/records"
            // The schema's types link to their records; the builder's filters and sort reach the API.
            let landing = try await browser.get(base).html
            #expect(landing.contains("type=Note"))
            // Zone and user are picked from the database's zones and the container's users.
            #expect(landing.contains("<datalist id=\"zone-choices\"><option value=\"_defaultZone\"></option>")
                    && landing.contains("<option value=\"ada@example.com\"></option>"), "\(landing.suffix(2500))")
            let all = try await browser.get(base + "?type=Note&sort=count&order=descending&limit=2")
            #expect(all.status == 200 && all.html.contains("note-4") && all.html.contains("note-3") && !all.html.contains(">note-1<"), "\(all.html.suffix(2000))")
            #expect(!all.html.contains("<script>alert(3)") && all.html.contains("&lt;script&gt;alert(3)"))
            let next = try #require(all.html.firstMatch(of: /rel="next" href="([^"]+)"/).map { String($0.output.1).replacingOccurrences(of: "&amp;", with: "&") })
            // A message belongs to the page it was sent to: links onward do not carry it.
            let told = try await browser.get(base + "?type=Note&sort=count&order=descending&limit=2&notice=saved+x&seal=abc").html
            let onward = told.matches(of: /href="([^"]*records[^"]*)"/).map { String($0.output.1) }
            #expect(!onward.isEmpty && onward.allSatisfy { !$0.contains("notice=") && !$0.contains("seal=") }, "\(onward)")
            let second = try await browser.get(next)
            #expect(second.html.contains("note-2") && second.html.contains("note-1") && !second.html.contains(">note-4<"), "\(second.html.suffix(1500))")
            let filtered = try await browser.get(base + "?type=Note&f1=count&o1=GREATER_THAN_OR_EQUALS&v1=3&f2=tags&o2=LIST_CONTAINS&v2=a")
            #expect(filtered.html.contains(">note-3<") && filtered.html.contains(">note-4<") && !filtered.html.contains(">note-2<"), "\(filtered.html.suffix(1500))")
            // Browsers send a form's spaces as '+'.
            let spaced = try await browser.get(base + "?type=Note&f1=title&o1=EQUALS&v1=note+2")
            #expect(spaced.html.contains(">note-2<") && !spaced.html.contains(">note-3<"), "\(spaced.html.suffix(1500))")
            // A bidirectional override in the data shows for what it is ("[U+202E]gnp.exe", not
            // "exe.png"), isolated from the text around it.
            #expect(try await ada.post("public", "records/modify", ["operations": [["operationType": "create", "record": ["recordType": "Note", "recordName": "spoof",
                "fields": ["title": ["value": "\u{202E}gnp.exe"], "count": ["value": -1]]]]]]).status == 200)
            let spoof = try await browser.get(base + "?type=Note&f1=count&o1=LESS_THAN&v1=0").html
            #expect(spoof.components(separatedBy: "<bdi><span class=\"ctl\">[U+202E]</span>gnp.exe</bdi>").count == 2 && !spoof.contains("\u{202E}"), "\(spoof.suffix(1500))")
            let near = try await browser.get(base + "?type=Note&f1=place&o1=NEAR&v1=52.5,13.4,1000")
            #expect(near.html.contains(">note-0<"), "\(near.html.suffix(1500))")
            let bad = try await browser.get(base + "?type=Note&f1=count&o1=EQUALS&v1=many")
            #expect(bad.html.contains("is not a whole number"))
            // A record by type: dates as dates, locations as coordinates, references as links.
            let view = try await browser.get(base + "/view?name=note-1")
            #expect(view.html.contains("2026-11-18T") && view.html.contains("52.5, 13.4") && view.html.contains("name=note-0\"><bdi>note-0</bdi></a>"), "\(view.html.suffix(3000))")
            // Change, create, delete in development.
            let tag = try #require(view.html.firstMatch(of: /name="tag" value="([^"]+)"/).map { String($0.output.1) })
            let saved = try await browser.post(base + "/save", [("environment", "development"), ("database", "public"), ("zone", "_defaultZone"), ("type", "Note"),
                                                                 ("name", "note-1"), ("tag", tag), ("field.title", "changed in the console"), ("field.count", "41")])
            #expect(saved.status == 303 && saved.headers[.location]?.contains("notice=") == true, "\(saved.headers)")
            #expect(try await browser.get(base + "/view?name=note-1").html.contains("changed in the console"))
            let created = try await browser.post(base + "/save", [("environment", "development"), ("database", "public"), ("zone", "_defaultZone"), ("type", "Note"),
                                                                   ("name", "from-console"), ("field.title", "new"), ("field.due", "2026-11-26T10:00:00Z"), ("field.tags", "x"), ("field.tags", "y")])
            #expect(created.headers[.location]?.contains("name=from-console") == true, "\(created.headers)")
            let lookup = try await ada.post("public", "records/lookup", ["records": [["recordName": "from-console"]]])
            #expect(lookup.json["records"]?.arrayValue?.first?["fields"]?["tags"]?["value"] == ["x", "y"], "\(lookup.json)")
            let unticked = try await browser.post(base + "/delete", [("environment", "development"), ("database", "public"), ("name", "from-console")])
            #expect(unticked.headers[.location]?.contains("error=") == true)
            let deleted = try await browser.post(base + "/delete", [("environment", "development"), ("database", "public"), ("name", "from-console"), ("really", "on")])
            #expect(deleted.headers[.location]?.contains("notice=") == true, "\(deleted.headers)")
            #expect(try await ada.post("public", "records/lookup", ["records": [["recordName": "from-console"]]]).json["records"]?.arrayValue?.first?["serverErrorCode"] == "NOT_FOUND")
            // A user's private database, read as them: audited.
            // Asked for a reason first, which then stays with every page and is audited.
            let unexplained = try await browser.get(base + "?type=Note&database=private&user=ada@example.com")
            #expect(unexplained.status == 200 && unexplained.html.contains("Say why you open this user") && !unexplained.html.contains(">secret<"),
                    "\(unexplained.html.suffix(1500))")
            let mine = try await browser.get(base + "?type=Note&database=private&user=ada@example.com&reason=support+ticket")
            #expect(mine.html.contains(">secret<") && mine.html.contains("reason=support%20ticket"), "\(mine.html.suffix(1500))")
            let audit = try await harness.admin(.get, "containers/\(container)/audit")
            #expect(audit.json["entries"]?.arrayValue?.contains { $0["action"] == "records.read" && $0["target"] == .string(ada.userRecordName ?? "")
                && $0["detail"] == "private database: support ticket" } == true, "\(audit.json)")
            #expect(audit.json["entries"]?.arrayValue?.contains { $0["action"] == "records.modify" } == true)
            // Production changes need the container's identifier typed.
            try await harness.deploy(schema, to: container)
            let unconfirmed = try await browser.post(base + "/save", [("environment", "production"), ("database", "public"), ("type", "Note"), ("field.title", "p")])
            // Refused, and the form comes back as it was filled in.
            #expect(unconfirmed.status == 400 && unconfirmed.html.contains("identifier typed to confirm") && unconfirmed.html.contains(">\np</textarea>"),
                    "\(unconfirmed.status) \(unconfirmed.html.suffix(2000))")
            let confirmed = try await browser.post(base + "/save", [("environment", "production"), ("database", "public"), ("type", "Note"), ("field.title", "p"),
                                                                     ("confirm", container)])
            #expect(confirmed.headers[.location]?.contains("notice=") == true, "\(confirmed.headers)")
        }
    }
}

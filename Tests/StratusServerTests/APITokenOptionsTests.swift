import Foundation
import HTTPTypes
import StratusCore
@testable import StratusServer
@testable import StratusTestSupport
import Testing

/// API token options (issue 23 §5): allowed origins answered and enforced for browsers (CORS,
/// preflight included) and the sign-in callback URL; changes hold on every server process.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct APITokenOptionsTests {
    static let app = "https://notes.example.com"

    @Test func allowedOriginsAreAnsweredAndEnforced() async throws {
        try await Harness.run { harness in
            let open = try await harness.container()
            let created = try await harness.admin(.post, "containers/\(open.container)/tokens",
                                                  json: ["environment": "development", "allowedOrigins": ["HTTPS://Notes.Example.com:443/"]])
            #expect(created.status == 201 && created.json["token"]?["allowedOrigins"] == [.string(Self.app)], "\(created.json)")
            let restricted = try #require(created.json["apiToken"]?.stringValue)
            let path = "/database/1/\(open.container)/development/public/records/lookup"
            let body = #"{"records":[{"recordName":"x"}]}"#
            let origin = HTTPField.Name("Origin")!

            // The allowed origin: the answer carries the CORS headers; a preflight is answered 204.
            let allowed = try await harness.client.execute(uri: "\(path)?ckAPIToken=\(restricted)", method: .post,
                                                           headers: [origin: Self.app], body: .init(string: body)) { $0 }
            #expect(allowed.status.code == 200)
            #expect(allowed.headers[.accessControlAllowOrigin] == Self.app)
            #expect(allowed.headers[.accessControlExposeHeaders]?.contains("x-apple-cloudkit-session") == true)
            let preflight = try await harness.client.execute(uri: "\(path)?ckAPIToken=\(restricted)", method: .options,
                                                             headers: [origin: Self.app, .accessControlRequestMethod: "POST",
                                                                       .accessControlRequestHeaders: "content-type"]) { $0 }
            #expect(preflight.status.code == 204)
            #expect(preflight.headers[.accessControlAllowOrigin] == Self.app && preflight.headers[.accessControlAllowHeaders] == "content-type")
            #expect(preflight.headers[.accessControlAllowMethods]?.contains("POST") == true)

            // Another origin: no CORS headers (the browser withholds the answer), and refused by the server.
            let other = try await harness.send(.post, "\(path)?ckAPIToken=\(restricted)", body: body, headers: [origin: "https://evil.example"])
            #expect(other.status == 403 && other.json.errorCode == "ACCESS_DENIED" && other.json["reason"]?.stringValue?.contains("https://evil.example") == true, "\(other.json)")
            let otherRaw = try await harness.client.execute(uri: "\(path)?ckAPIToken=\(restricted)", method: .post,
                                                            headers: [origin: "https://evil.example"], body: .init(string: body)) { $0 }
            #expect(otherRaw.headers[.accessControlAllowOrigin] == nil)
            let refusedPreflight = try await harness.client.execute(uri: "\(path)?ckAPIToken=\(restricted)", method: .options,
                                                                    headers: [origin: "https://evil.example"]) { $0 }
            #expect(refusedPreflight.status.code == 403 && refusedPreflight.headers[.accessControlAllowOrigin] == nil)
            // The sign-in endpoints are guarded alike; without an Origin (a server) nothing changes.
            let signUp = try await harness.send(.post, "/auth/1/\(open.container)/development/signup?ckAPIToken=\(restricted)",
                                                json: ["emailAddress": "eve@example.com", "password": "correct horse"], headers: [origin: "https://evil.example"])
            #expect(signUp.status == 403, "\(signUp.json)")
            #expect(try await harness.send(.post, "\(path)?ckAPIToken=\(restricted)", body: body).status == 200)

            // A token without allowed origins answers any origin; the management API answers none.
            let any = try await harness.client.execute(uri: "\(path)?ckAPIToken=\(open.apiToken)", method: .post,
                                                       headers: [origin: "https://anywhere.example"], body: .init(string: body)) { $0 }
            #expect(any.status.code == 200 && any.headers[.accessControlAllowOrigin] == "https://anywhere.example")
            let management = try await harness.client.execute(uri: "/management/1/containers", method: .options, headers: [origin: Self.app]) { $0 }
            #expect(management.headers[.accessControlAllowOrigin] == nil)

            // Opening the token to any origin holds at once (and is audited).
            let tokenID = try #require(created.json["token"]?["id"].map { JSONWriter.string($0) })
            let updated = try await harness.admin(.patch, "containers/\(open.container)/tokens/\(tokenID)", json: ["allowedOrigins": []])
            #expect(updated.status == 200 && updated.json["token"]?["allowedOrigins"] == [], "\(updated.json)")
            #expect(try await harness.send(.post, "\(path)?ckAPIToken=\(restricted)", body: body, headers: [origin: "https://evil.example"]).status == 200)
            let audit = try await harness.admin(.get, "containers/\(open.container)/audit")
            #expect(audit.json["entries"]?.arrayValue?.contains { $0["action"] == "token.update" } == true, "\(audit.json)")
        }
    }

    @Test func badOptionsAreRefusedWithAReason() async throws {
        try await Harness.run { harness in
            let session = try await harness.container()
            let cases: [(JSON, String)] = [
                (["allowedOrigins": ["https://app.example.com/path"]], "not a web origin"),
                (["allowedOrigins": ["ftp://app.example.com"]], "not a web origin"),
                (["allowedOrigins": ["*"]], "not a web origin"),
                (["allowedOrigins": "https://app.example.com"], "must be an array"),
                (["allowedOrigins": .array(Array(repeating: "https://a.example", count: 21))], "at most 20"),
                (["signInCallback": "/relative"], "absolute http or https URL"),
                (["signInCallback": "javascript:alert(1)"], "absolute http or https URL"),
                (["signInCallback": "https://app.example.com/#fragment"], "absolute http or https URL"),
            ]
            for (options, words) in cases {
                var body: [String: JSON] = ["environment": "development"]
                for (key, value) in options.objectValue ?? [:] { body[key] = value }
                let answer = try await harness.admin(.post, "containers/\(session.container)/tokens", json: .object(body))
                #expect(answer.status == 400 && answer.json["reason"]?.stringValue?.contains(words) == true, "\(options): \(answer.json)")
            }
            let nothing = try await harness.admin(.patch, "containers/\(session.container)/tokens/1", json: [:])
            #expect(nothing.status == 400 && nothing.json["reason"]?.stringValue?.contains("nothing to change") == true, "\(nothing.json)")
        }
    }

    @Test func theSignInPageKnowsTheTokensCallbackAndIsLockedDown() async throws {
        try await Harness.run { harness in
            let session = try await harness.container()
            let created = try await harness.admin(.post, "containers/\(session.container)/tokens",
                                                  json: ["environment": "development", "signInCallback": "https://notes.example.com/signed-in?from=stratus"])
            let token = try #require(created.json["apiToken"]?.stringValue)
            // The 421's redirectURL carries the API token, so the page finds the callback.
            let required = try await harness.send(.get, "/database/1/\(session.container)/development/public/users/caller?ckAPIToken=\(token)")
            let redirect = try #require(required.json["redirectURL"]?.stringValue)
            #expect(redirect.hasSuffix("/auth/1/\(session.container)/development/signin?ckAPIToken=\(token)"), "\(redirect)")
            let page = try await harness.client.execute(uri: "/auth/1/\(session.container)/development/signin?ckAPIToken=\(token)", method: .get) { $0 }
            let html = String(buffer: page.body)
            #expect(page.status.code == 200 && html.contains(#""callback":"https:\/\/notes.example.com\/signed-in?from=stratus""#) || html.contains(#""callback":"https://notes.example.com/signed-in?from=stratus""#), "\(html.prefix(300))")
            let policy = page.headers[.contentSecurityPolicy] ?? ""
            #expect(policy.contains("frame-ancestors 'none'") && policy.contains("script-src 'nonce-"), "\(policy)")
            #expect(page.headers[HTTPField.Name("X-Frame-Options")!] == "DENY")
            // A container name cannot break out of the page: names are checked, and text is escaped.
            let odd = try await harness.send(.get, "/auth/1/%3Cscript%3E/development/signin")
            #expect(odd.status == 400 || odd.status == 404, "\(odd.json)")
        }
    }

    /// The page never hands a session to `*`: a token's origins, else (in development only) the
    /// opener's origin when its `Referer` is on this computer; otherwise it explains instead of
    /// offering the form.
    @Test func theSignInPageHandsSessionsOnlyToNamedOrLocalOrigins() async throws {
        try await Harness.run { harness in
            let session = try await harness.container()
            func token(_ options: JSON) async throws -> String {
                try #require(try await harness.admin(.post, "containers/\(session.container)/tokens", json: options).json["apiToken"]?.stringValue)
            }
            let bareDevelopment = try await token(["environment": "development"])
            let bareProduction = try await token(["environment": "production"])
            let namedProduction = try await token(["environment": "production", "allowedOrigins": ["https://notes.example.com"]])
            func page(_ environment: String, _ token: String, referer: String?) async throws -> String {
                var headers: HTTPFields = [:]
                if let referer { headers[.referer] = referer }
                let answer = try await harness.client.execute(uri: "/auth/1/\(session.container)/\(environment)/signin?ckAPIToken=\(token)", method: .get,
                                                              headers: headers) { $0 }
                #expect(answer.status.code == 200)
                return String(buffer: answer.body).replacingOccurrences(of: "\\/", with: "/")
            }
            let refusal = "Sign-in is not available"
            for (referer, origin) in [("http://localhost:5173/notes/index.html", "http://localhost:5173"), ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
                                      ("http://[::1]:3000/app", "http://[::1]:3000"), ("https://LOCALHOST/", "https://localhost")] {
                let html = try await page("development", bareDevelopment, referer: referer)
                #expect(html.contains(#""origins":["\#(origin)"]"#) && html.contains(#"id="form""#) && !html.contains(refusal), "\(referer): \(html.suffix(3000))")
            }
            for referer in ["https://evil.example/", "http://127.0.0.1.evil.example/", "http://localhost.evil.example:5173/", "not a url", nil] as [String?] {
                let html = try await page("development", bareDevelopment, referer: referer)
                #expect(html.contains(refusal) && !html.contains(#"id="form""#) && html.contains("on this computer (localhost)"), "\(referer ?? "no referer"): \(html)")
            }
            let production = try await page("production", bareProduction, referer: "http://localhost:5173/")
            #expect(production.contains(refusal) && production.contains("registered address") && !production.contains(#"id="form""#), "\(production)")
            #expect(production.contains("stratus token update --container \(session.container)"), "\(production)")
            let named = try await page("production", namedProduction, referer: "https://elsewhere.example/")
            #expect(named.contains(#""origins":["https://notes.example.com"]"#) && named.contains(#"id="form""#), "\(named.suffix(3000))")
            // No page the server makes addresses a message to every origin.
            for html in [production, named, try await page("development", bareDevelopment, referer: "http://localhost:1/")] {
                #expect(!html.contains("'*'") && !html.contains(#""*""#))
            }
        }
    }
}

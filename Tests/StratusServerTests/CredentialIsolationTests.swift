import Foundation
import HTTPTypes
import Hummingbird
import StratusCore
@testable import StratusServer
@testable import StratusTestSupport
import Testing

/// Credentials of one container never reach another, and a development credential never opens
/// production, on every route the router has: the routes come from the router's own table, so a
/// route added later is covered without anyone adding it here (reliability plan S4, S7).
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct CredentialIsolationTests {
    /// A credential a client could send, and what it is.
    struct Credential: Sendable {
        var name: String
        var query: String
        var headers: HTTPFields = [:]
        /// A server-to-server key that signs each request.
        var signer: Signer?
    }

    /// Every route of the router, as `(method, path pattern)`.
    static func routeTable(_ harness: Harness) -> [(HTTPRequest.Method, String)] {
        harness.app.router().routes.map { ($0.method, $0.path) }
    }

    /// The route's path with its parameters filled in for `container` and `environment`.
    static func fill(_ pattern: String, container: String, environment: String, database: String) -> String {
        pattern.split(separator: "/", omittingEmptySubsequences: false).map { part -> String in
            let name = part.hasPrefix(":") ? String(part.dropFirst()) : part.hasPrefix("{") ? String(part.dropFirst().dropLast()) : nil
            switch name {
            case "container"?: return container
            case "environment"?: return environment
            case "database"?: return database
            case let other?: return "x-\(other)"
            case nil: return String(part)
            }
        }.joined(separator: "/")
    }

    @Test func noCredentialCrossesContainersOrEnvironments() async throws {
        try await Harness.run { harness in
            let a = try await harness.container().signedUp()
            let b = try await harness.container().signedUp()
            let bProduction = try await harness.admin(.post, "containers/\(b.container)/tokens", json: ["environment": "production", "name": "prod"])
            let bProductionToken = bProduction.json["apiToken"]?.stringValue ?? ""
            let aKey = try await ServerKeyTests.addKey(harness, container: a.container)
            let bKey = try await ServerKeyTests.addKey(harness, container: b.container)
            let encode = { (token: String) in token.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? token }
            let aWeb = encode(a.webAuthToken ?? "")
            let bWeb = encode(b.webAuthToken ?? "")
            // Aimed at B's development environment: A's credentials in every combination.
            let againstDevelopment = [
                Credential(name: "A's API token", query: "ckAPIToken=\(a.apiToken)"),
                Credential(name: "A's API token and session", query: "ckAPIToken=\(a.apiToken)&ckWebAuthToken=\(aWeb)"),
                Credential(name: "B's API token with A's session", query: "ckAPIToken=\(b.apiToken)&ckWebAuthToken=\(aWeb)"),
                Credential(name: "B's API token with A's session as ckSession", query: "ckAPIToken=\(b.apiToken)&ckSession=\(aWeb)"),
                Credential(name: "A's API token with B's session", query: "ckAPIToken=\(a.apiToken)&ckWebAuthToken=\(bWeb)"),
                Credential(name: "A's API token as admin token", query: "", headers: [.authorization: "Bearer \(a.apiToken)"]),
                Credential(name: "A's session as admin token", query: "", headers: [.authorization: "Bearer \(a.webAuthToken ?? "")"]),
                Credential(name: "A's server-to-server key", query: "", signer: aKey),
                Credential(name: "A's server-to-server key with B's API token", query: "ckAPIToken=\(b.apiToken)", signer: aKey),
            ]
            // Aimed at B's production environment: B's own development credentials.
            let againstProduction = [
                Credential(name: "B's development API token", query: "ckAPIToken=\(b.apiToken)"),
                Credential(name: "B's development API token and session", query: "ckAPIToken=\(b.apiToken)&ckWebAuthToken=\(bWeb)"),
                Credential(name: "B's production API token with B's development session", query: "ckAPIToken=\(bProductionToken)&ckWebAuthToken=\(bWeb)"),
                Credential(name: "B's development server-to-server key", query: "", signer: bKey),
            ]
            let routes = Self.routeTable(harness).filter { $0.1 != "/health" }
            #expect(routes.count >= 30, "the route table has only \(routes.count) routes")
            var cases = 0
            var crossings: [String] = []
            // Routes that answer with no credential at all hold nothing of a tenant's: the sign-in
            // pages (users' and the console's) and the OpenAPI document. A new one must be added here knowingly.
            var open: [String] = []
            for (method, pattern) in routes {
                let path = Self.fill(pattern, container: b.container, environment: "development", database: "public")
                let bare = try await harness.send(method, path, body: method == .get ? nil : "{}")
                if (200..<300).contains(bare.status) { open.append("\(method) \(pattern)") }
            }
            #expect(open.sorted() == ["GET /auth/1/{container}/{environment}/signin", "GET /console/signin", "GET /openapi.json"], "routes open without credentials: \(open)")
            for (method, pattern) in routes where !open.contains("\(method) \(pattern)") {
                for database in pattern.contains(":database") || pattern.contains("{database}") ? ["public", "private", "shared"] : ["public"] {
                    for (environment, credentials) in [("development", againstDevelopment), ("production", againstProduction)] {
                        for credential in credentials {
                            let path = Self.fill(pattern, container: b.container, environment: environment, database: database)
                            let uri = credential.query.isEmpty ? path : path + "?" + credential.query
                            let body = method == .get ? nil : "{}"
                            var headers = credential.headers
                            if let signer = credential.signer {
                                for field in signer.headers(signedPath: uri, body: body ?? "") { headers.append(field) }
                            }
                            let answer = try await harness.send(method, uri, body: body, headers: headers)
                            cases += 1
                            if (200..<300).contains(answer.status) {
                                crossings.append("\(method) \(path) with \(credential.name): \(answer.status) \(answer.json)")
                            }
                            #expect(answer.status != 500, "\(method) \(path) with \(credential.name): \(answer.json)")
                        }
                    }
                }
            }
            print("credential isolation: \(routes.count) routes (\(open.count) open without credentials), \(cases) cases, \(crossings.count) successes across the boundary")
            #expect(crossings.isEmpty, "\(crossings.joined(separator: "\n"))")
            // The same requests with B's own credentials do succeed on B's data routes (the test
            // would otherwise pass for the wrong reason).
            #expect(try await b.get("public", "users/caller").status == 200)
            #expect(try await b.post("private", "records/lookup", ["records": [["recordName": "r"]]]).status == 200)
            let own = "/database/1/\(b.container)/development/public/users/caller"
            #expect(try await harness.send(.get, own, headers: bKey.headers(signedPath: own, body: "")).status == 200)
        }
    }
}

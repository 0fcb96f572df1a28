import Foundation
import HTTPTypes
import StratusCore
@testable import StratusServer
import Testing

/// Operators and teams through the management API: every route × every kind of caller, the
/// expected answer derived from `ManagementAccess.routes` (the one table of who may do what),
/// and the answers a team member sees.
@Suite(.timeLimit(.minutes(10))) struct TeamAccessTests {
    /// A caller of the matrix: their credential and what the table knows of them.
    struct Caller: Sendable {
        var name: String
        var credential: String?
        /// `nil` when the credential is missing or not valid.
        var caller: ManagementCaller?
        /// Their role in the container the requests name.
        var role: TeamRole?
    }

    /// Bodies that let each route get past its own input checks (`ENV` is the environment of the
    /// case; `{}` for the rest).
    static let bodies: [String: String] = [
        "POST /management/1/containers/:container/tokens": #"{"environment":"ENV","name":"matrix"}"#,
        "PATCH /management/1/containers/:container/tokens/:token": #"{"allowedOrigins":[]}"#,
        "POST /management/1/containers/:container/keys": #"{"environment":"ENV","publicKey":"PEM","name":"matrix"}"#,
        "POST /management/1/containers/:container/roles/:role/members": #"{"environment":"ENV","user":"USER"}"#,
        "PATCH /management/1/containers/:container/quota": #"{"environment":"development","maxRecords":100000}"#,
        "POST /management/1/containers/:container/schema/import": #"{"schema":"DEFINE SCHEMA RECORD TYPE Matrix (title STRING QUERYABLE);","dryRun":true}"#,
        "POST /management/1/containers/:container/schema/deploy": #"{"dryRun":true}"#,
        "POST /management/1/containers/:container/team": #"{"operator":"NEWCOMER","role":"viewer"}"#,
        "PATCH /management/1/containers/:container/team/:operator": #"{"role":"viewer"}"#,
        "POST /management/1/operators": #"{"emailAddress":"NEWCOMER","password":"a long enough password"}"#,
        "POST /management/1/operators/:operator/password": #"{"newPassword":"another long password"}"#,
        "POST /management/1/schema/validate": #"{"schema":"DEFINE SCHEMA RECORD TYPE Matrix (title STRING);"}"#,
    ]

    @Test func everyRouteAnswersEachCallerAsTheRoleTableSays() async throws {
        try await Harness.run { harness in
            let a = try await harness.container().signedUp()
            let b = try await harness.container()
            let user = a.userRecordName ?? ""
            // What the routes act on, in both environments.
            let productionToken = try await harness.admin(.post, "containers/\(a.container)/tokens", json: ["environment": "production", "name": "prod"])
            let developmentTokens = try await harness.admin(.get, "tokens?container=\(a.container)")
            let tokenIDs: [ContainerEnvironment: String] = [
                .development: JSONWriter.string(developmentTokens.json["tokens"]?.arrayValue?.first?["id"] ?? .null),
                .production: JSONWriter.string(productionToken.json["token"]?["id"] ?? .null),
            ]
            let keyIDs: [ContainerEnvironment: String] = [
                .development: try await ServerKeyTests.addKey(harness, container: a.container, environment: .development).keyID,
                .production: try await ServerKeyTests.addKey(harness, container: a.container, environment: .production).keyID,
            ]
            let pem = Signer().publicKeyPEM
            // The callers.
            let superuser = try await harness.signedInOperator(superuser: true)
            let owner = try await harness.signedInOperator(teams: [(a.container, .owner)])
            let developer = try await harness.signedInOperator(teams: [(a.container, .developer)])
            let viewer = try await harness.signedInOperator(teams: [(a.container, .viewer)])
            let outsider = try await harness.signedInOperator(teams: [(b.container, .owner)])
            let revoked = try await harness.signedInOperator(teams: [(a.container, .owner)])
            #expect(try await harness.management(revoked.credential, .post, "logout").status == 200)
            // Someone the operator and team routes act on, who is none of the callers.
            let target = try await harness.signedInOperator(teams: [(a.container, .viewer)])
            let callers = [
                Caller(name: "the admin token", credential: Harness.adminToken, caller: ManagementCaller(isSuperuser: true, operatorID: nil)),
                Caller(name: "a superuser", credential: superuser.credential, caller: ManagementCaller(isSuperuser: true, operatorID: 1)),
                Caller(name: "an owner", credential: owner.credential, caller: ManagementCaller(isSuperuser: false, operatorID: 2), role: .owner),
                Caller(name: "a developer", credential: developer.credential, caller: ManagementCaller(isSuperuser: false, operatorID: 3), role: .developer),
                Caller(name: "a viewer", credential: viewer.credential, caller: ManagementCaller(isSuperuser: false, operatorID: 4), role: .viewer),
                Caller(name: "another container's owner", credential: outsider.credential, caller: ManagementCaller(isSuperuser: false, operatorID: 5)),
                Caller(name: "a revoked credential", credential: revoked.credential),
                Caller(name: "a made-up credential", credential: "sto_" + String(repeating: "0", count: 64)),
                Caller(name: "no credential", credential: nil),
            ]

            // The router's management routes are exactly the table's.
            let routes = CredentialIsolationTests.routeTable(harness).map { "\($0.0) \($0.1.replacing(/\{([a-z]+)\}/) { ":" + $0.output.1 })" }
                .filter { $0.contains(" /management/") }
            #expect(Set(routes) == Set(ManagementAccess.routes.keys),
                    "routes without a rule: \(Set(routes).subtracting(ManagementAccess.routes.keys).sorted()); rules without a route: \(Set(ManagementAccess.routes.keys).subtracting(routes).sorted())")

            var cases = 0
            var crossings: [String] = []
            var mismatches: [String] = []
            // Signing out ends the caller's credential: it goes last.
            for key in routes.sorted(by: { ($0.hasSuffix("/logout") ? 1 : 0, $0) < ($1.hasSuffix("/logout") ? 1 : 0, $1) }) {
                let requirement = try #require(ManagementAccess.routes[key])
                let method = HTTPRequest.Method(rawValue: String(key.prefix { $0 != " " }))!
                let pattern = String(key.drop { $0 != " " }.dropFirst())
                let environments: [ContainerEnvironment?] = if case .perEnvironment = requirement { [.development, .production] } else { [nil] }
                for environment in environments {
                    for caller in callers {
                        let newcomer = "newcomer\(UInt32.random(in: 0...UInt32.max))@example.com"
                        var path = pattern.split(separator: "/", omittingEmptySubsequences: false).map { part -> String in
                            switch part {
                            case ":container": a.container
                            case ":token": tokenIDs[environment ?? .development] ?? ""
                            case ":key": keyIDs[environment ?? .development] ?? ""
                            case ":user": user
                            case ":role": "editors"
                            case ":operator": target.email.replacingOccurrences(of: "@", with: "%40")
                            default: String(part)
                            }
                        }.joined(separator: "/")
                        if case .perEnvironment(_, _, .query) = requirement, let environment { path += "?environment=\(environment.rawValue)" }
                        var body: String? = method == .get || method == .delete ? nil : "{}"
                        if let template = Self.bodies[key] {
                            body = template.replacingOccurrences(of: "ENV", with: environment?.rawValue ?? "development")
                                .replacingOccurrences(of: "PEM", with: pem.replacingOccurrences(of: "\n", with: "\\n"))
                                .replacingOccurrences(of: "USER", with: user).replacingOccurrences(of: "NEWCOMER", with: newcomer)
                        }
                        let headers: HTTPFields = caller.credential.map { [.authorization: "Bearer \($0)"] } ?? [:]
                        let answer = try await harness.send(method, path, body: body, headers: headers)
                        cases += 1
                        let expected = ManagementAccess.decide(requirement, caller: caller.caller, role: caller.role, environment: environment,
                                                               container: a.container)
                        let reason = answer.json["reason"]?.stringValue ?? ""
                        let containerMissing = answer.status == 404 && reason.hasPrefix("container '\(a.container)' does not exist")
                        let what = "\(key)\(environment.map { " (\($0.rawValue))" } ?? "") by \(caller.name): \(answer.status) \(answer.json)"
                        #expect(answer.status != 500, "\(what)")
                        switch expected {
                        case .allowed:
                            if [401, 403].contains(answer.status) || containerMissing { mismatches.append("should be allowed: \(what)") }
                        case .unauthenticated:
                            if answer.status != 401 { mismatches.append("should be 401: \(what)") }
                        case .notFound:
                            if !containerMissing { mismatches.append("should answer as a missing container: \(what)") }
                        case .denied(let because):
                            if answer.status != 403 || answer.json["serverErrorCode"] != "ACCESS_DENIED" || reason != because {
                                mismatches.append("should be denied (\(because)): \(what)")
                            }
                        }
                        if expected != .allowed, (200..<300).contains(answer.status) { crossings.append(what) }
                    }
                }
            }
            print("management access: \(routes.count) routes, \(callers.count) callers, \(cases) cases, \(crossings.count) successes the table does not allow")
            #expect(cases >= routes.count * callers.count)
            #expect(crossings.isEmpty, "\(crossings.joined(separator: "\n"))")
            #expect(mismatches.isEmpty, "\(mismatches.joined(separator: "\n"))")
        }
    }
}

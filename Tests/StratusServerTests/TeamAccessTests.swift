import Foundation
import HTTPTypes
import StratusCore
@testable import StratusServer
@testable import StratusTestSupport
import Testing

/// Operators and teams through the management API: every route × every kind of caller, the
/// expected answer derived from `ManagementAccess.routes` (the one table of who may do what),
/// and the answers a team member sees.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct TeamAccessTests {
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
        "POST /management/1/containers/:container/records/modify": #"{"environment":"ENV","operations":[{"operationType":"create","record":{"recordType":"Matrix","fields":{"title":{"value":"x"}}}}]}"#,
        "POST /management/1/containers/:container/records/query": #"{"environment":"ENV","query":{"recordType":"Matrix"}}"#,
        "POST /management/1/containers/:container/assets/upload": #"{"environment":"ENV","tokens":[{"recordType":"Matrix","fieldName":"file"}]}"#,
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

    @Test func teamsListOnlyTheirContainersAndKeepTheirLastOwner() async throws {
        try await Harness.run { harness in
            let a = try await harness.container()
            let b = try await harness.container()
            let owner = try await harness.signedInOperator(teams: [(a.container, .owner)])
            let developer = try await harness.signedInOperator(teams: [(a.container, .developer), (b.container, .viewer)])
            // Each sees their own containers, with their role; a superuser (the admin token) all of them.
            let listed = try await harness.management(developer.credential, .get, "containers")
            let names = listed.json["containers"]?.arrayValue?.compactMap { $0["name"]?.stringValue } ?? []
            #expect(Set(names) == [a.container, b.container], "\(listed.json)")
            #expect(listed.json["containers"]?.arrayValue?.first { $0["name"]?.stringValue == b.container }?["role"] == "viewer")
            let ownersList = try await harness.management(owner.credential, .get, "containers")
            #expect(ownersList.json["containers"]?.arrayValue?.compactMap { $0["name"]?.stringValue } == [a.container], "\(ownersList.json)")
            #expect((try await harness.admin(.get, "containers")).json["containers"]?.arrayValue?.count ?? 0 >= 2)
            // Tokens: only their containers'; another container's answers as a missing one.
            let tokens = try await harness.management(owner.credential, .get, "tokens")
            #expect(tokens.json["tokens"]?.arrayValue?.allSatisfy { $0["container"]?.stringValue == a.container } == true, "\(tokens.json)")
            #expect(tokens.json["tokens"]?.arrayValue?.isEmpty == false)
            let elsewhere = try await harness.management(owner.credential, .get, "tokens?container=\(b.container)")
            let missing = try await harness.management(owner.credential, .get, "tokens?container=iCloud.com.example.NoSuchContainer")
            #expect(elsewhere.status == 404 && elsewhere.json["reason"]?.stringValue?.hasPrefix("container '\(b.container)' does not exist") == true)
            #expect(missing.status == 404 && missing.json["reason"]?.stringValue?.hasPrefix("container 'iCloud.com.example.NoSuchContainer' does not exist") == true)
            // whoami.
            let whoami = try await harness.management(developer.credential, .get, "whoami")
            #expect(whoami.json["operator"]?["emailAddress"] == .string(developer.email) && whoami.json["superuser"] == false, "\(whoami.json)")
            #expect(whoami.json["containers"]?.arrayValue?.count == 2)
            // A developer imports a development schema; the deploy needs an owner, and says so.
            let imported = try await harness.management(developer.credential, .post, "containers/\(a.container)/schema/import",
                                                        json: ["schema": "DEFINE SCHEMA RECORD TYPE Note (title STRING QUERYABLE, GRANT READ TO \"_world\");"])
            #expect(imported.status == 200 && imported.json["applied"] == true, "\(imported.json)")
            let deploy = try await harness.management(developer.credential, .post, "containers/\(a.container)/schema/deploy", json: [:])
            #expect(deploy.status == 403 && deploy.json["serverErrorCode"] == "ACCESS_DENIED", "\(deploy.json)")
            #expect(deploy.json["reason"]?.stringValue?.contains("needs the owner role") == true, "\(deploy.json)")
            #expect(try await harness.management(owner.credential, .post, "containers/\(a.container)/schema/deploy", json: [:]).json["applied"] == true)
            // The team: the only owner can neither leave nor stop being one; with a second owner, they can.
            let alone = try await harness.management(owner.credential, .delete, "containers/\(a.container)/team/\(owner.email)")
            #expect(alone.status == 400 && alone.json["reason"]?.stringValue?.contains("only owner") == true, "\(alone.json)")
            let demoted = try await harness.management(owner.credential, .patch, "containers/\(a.container)/team/\(owner.email)", json: ["role": "viewer"])
            #expect(demoted.status == 400, "\(demoted.json)")
            #expect(try await harness.admin(.delete, "operators/\(owner.email)").status == 400, "nor can their account go")
            let promoted = try await harness.management(owner.credential, .patch, "containers/\(a.container)/team/\(developer.email)", json: ["role": "owner"])
            #expect(promoted.status == 200 && promoted.json["previousRole"] == "developer", "\(promoted.json)")
            let team = try await harness.management(developer.credential, .get, "containers/\(a.container)/team")
            #expect(team.json["team"]?.arrayValue?.compactMap { $0["role"]?.stringValue } == ["owner", "owner"], "\(team.json)")
            let left = try await harness.management(owner.credential, .delete, "containers/\(a.container)/team/\(owner.email)")
            #expect(left.status == 200 && left.json["role"] == "owner", "\(left.json)")
            // Out of the team, the container is gone for them, at once.
            let gone = try await harness.management(owner.credential, .get, "containers/\(a.container)/schema")
            #expect(gone.status == 404 && gone.json["reason"]?.stringValue?.hasPrefix("container '\(a.container)' does not exist") == true, "\(gone.json)")
            // Bad input says what is wrong.
            let badRole = try await harness.management(developer.credential, .post, "containers/\(a.container)/team", json: ["operator": .string(owner.email), "role": "admin"])
            #expect(badRole.status == 400 && badRole.json["reason"]?.stringValue?.contains("owner, developer or viewer") == true, "\(badRole.json)")
            let nobody = try await harness.management(developer.credential, .post, "containers/\(a.container)/team", json: ["operator": "nobody@example.com", "role": "viewer"])
            #expect(nobody.status == 404, "\(nobody.json)")
            let twice = try await harness.management(developer.credential, .post, "containers/\(a.container)/team", json: ["operator": .string(developer.email), "role": "viewer"])
            #expect(twice.status == 409, "\(twice.json)")
            // The audit log names each operator and credential.
            let log = try await harness.admin(.get, "containers/\(a.container)/audit")
            let actors = Set(log.json["entries"]?.arrayValue?.compactMap { $0["actor"]?.stringValue } ?? [])
            #expect(actors.contains("operator \(developer.email) (credential \(developer.credentialID))"), "\(actors)")
            #expect(actors.contains("operator \(owner.email) (credential \(owner.credentialID))"), "\(actors)")
        }
    }

    /// An app user's private or shared database: an owner's to open (as `ManagementAccess.userDatabase`
    /// says), with a reason, which the audit log keeps; a viewer and a developer are refused and
    /// nothing of theirs is audited as a read.
    @Test func aUsersDatabaseIsAnOwnersToOpenWithAReasonThatIsAudited() async throws {
        try await Harness.run { harness in
            let ada = try await harness.container().signedUp()
            let container = ada.container
            #expect(try await ada.post("private", "records/modify", ["operations": [["operationType": "create", "record": ["recordType": "Diary", "recordName": "d1",
                "fields": ["text": ["value": "dear diary"]]]]]]).status == 200)
            let callers = [("viewer", try await harness.signedInOperator(teams: [(container, .viewer)])),
                           ("developer", try await harness.signedInOperator(teams: [(container, .developer)])),
                           ("owner", try await harness.signedInOperator(teams: [(container, .owner)]))]
            let user = JSON.string(ada.userRecordName ?? "")
            for (name, person) in callers {
                let role = TeamRole(name: name)
                let expected = ManagementAccess.decide(ManagementAccess.userDatabase, caller: ManagementCaller(isSuperuser: false, operatorID: 1), role: role,
                                                       environment: .development, container: container)
                for (path, body) in [("records/query", ["query": ["recordType": "Diary"]] as [String: JSON]), ("records/lookup", ["records": [["recordName": "d1"]]]), ("zones/list", [:])] {
                    var request = body
                    request["database"] = "private"
                    request["user"] = user
                    request["reason"] = "support ticket 4711"
                    let answer = try await harness.management(person.credential, .post, "containers/\(container)/\(path)", json: .object(request))
                    if expected == .allowed {
                        #expect(answer.status == 200, "\(name) \(path): \(answer.json)")
                        var unexplained = request
                        unexplained["reason"] = nil
                        let refused = try await harness.management(person.credential, .post, "containers/\(container)/\(path)", json: .object(unexplained))
                        #expect(refused.status == 400 && refused.json["reason"]?.stringValue?.contains("'reason'") == true, "\(refused.json)")
                        unexplained["reason"] = "\u{202E}hidden"
                        #expect(try await harness.management(person.credential, .post, "containers/\(container)/\(path)", json: .object(unexplained)).status == 400)
                    } else {
                        #expect(answer.status == 403 && answer.json["serverErrorCode"] == "ACCESS_DENIED"
                                && answer.json["reason"]?.stringValue?.contains("private database: this needs the owner role") == true, "\(name) \(path): \(answer.json)")
                        // Their own role's reads of the public database still work.
                        let open = try await harness.management(person.credential, .post, "containers/\(container)/zones/list", json: ["database": "public"])
                        #expect(open.status == 200, "\(open.json)")
                    }
                }
            }
            #expect(callers.filter { TeamRole(name: $0.0).map { $0 < .owner } ?? false }.count == 2)
            let found = try await harness.management(callers[2].1.credential, .post, "containers/\(container)/records/lookup",
                                                     json: ["database": "private", "user": user, "reason": "support ticket 4711", "records": [["recordName": "d1"]]])
            #expect(found.json["records"]?.arrayValue?.first?["fields"]?["text"]?["value"] == "dear diary", "\(found.json)")
            // Each read is in the audit log with its reason, by the owner; none by the others.
            let entries = try await harness.admin(.get, "containers/\(container)/audit").json["entries"]?.arrayValue ?? []
            let reads = entries.filter { $0["action"] == "records.read" }
            #expect(reads.count == 4 && reads.allSatisfy { $0["detail"] == "private database: support ticket 4711" && $0["target"] == user
                && $0["actor"]?.stringValue?.contains(callers[2].1.email) == true }, "\(reads)")
        }
    }

    @Test func operatorSignInIsThrottledAndCredentialsEndEverywhere() async throws {
        try await Harness.run { harness in
            let a = try await harness.container()
            let ada = try await harness.signedInOperator(teams: [(a.container, .developer)])
            // Wrong passwords: refused alike for a wrong password and an unknown account, then throttled.
            let unknown = try await harness.send(.post, "/management/1/login", json: ["emailAddress": "nobody@example.com", "password": "whatever it is"])
            #expect(unknown.status == 401 && unknown.json["reason"] == "the email address or password is wrong", "\(unknown.json)")
            var last = 0
            for _ in 0..<11 {
                last = try await harness.send(.post, "/management/1/login", json: ["emailAddress": .string(ada.email), "password": "not the password"]).status
            }
            #expect(last == 429, "the 11th wrong password in 15 minutes is throttled")
            let throttled = try await harness.send(.post, "/management/1/login", json: ["emailAddress": .string(ada.email), "password": .string(ada.password)])
            #expect(throttled.status == 429 && throttled.json["serverErrorCode"] == "THROTTLED", "even the right password waits: \(throttled.json)")
            try await harness.otherProcess { other in
                let path = "containers/\(a.container)/schema"
                #expect(try await other.management(ada.credential, .get, path).status == 200)
                // A second sign-in, then a password change: the other credential ends on every process.
                try await harness.database.withConnection { connection in
                    try await connection.statement("DELETE FROM signin_failures WHERE container_id = 0", logger: TestCluster.logger)
                }
                let second = try await harness.send(.post, "/management/1/login", json: ["emailAddress": .string(ada.email), "password": .string(ada.password)])
                let secondCredential = try #require(second.json["credential"]?.stringValue)
                let withoutCurrent = try await harness.management(ada.credential, .post, "operators/\(ada.email)/password", json: ["newPassword": "a brand new password"])
                #expect(withoutCurrent.status == 400, "your own password needs the current one: \(withoutCurrent.json)")
                let changed = try await harness.management(ada.credential, .post, "operators/\(ada.email)/password",
                                                           json: ["newPassword": "a brand new password", "password": .string(ada.password)])
                #expect(changed.status == 200 && changed.json["revokedCredentials"] == 1, "\(changed.json)")
                #expect(try await other.management(secondCredential, .get, path).status == 401)
                #expect(try await other.management(ada.credential, .get, path).status == 200, "the credential that changed it stays")
                // Disabling ends every credential at once; enabling does not bring them back.
                #expect(try await harness.admin(.post, "operators/\(ada.email)/disable").status == 200)
                let refused = try await other.management(ada.credential, .get, path)
                #expect(refused.status == 401, "\(refused.json)")
                let disabledLogin = try await harness.send(.post, "/management/1/login", json: ["emailAddress": .string(ada.email), "password": "a brand new password"])
                #expect(disabledLogin.status == 401 && disabledLogin.json["reason"]?.stringValue?.contains("disabled") == true, "\(disabledLogin.json)")
                #expect(try await harness.admin(.post, "operators/\(ada.email)/enable").status == 200)
                #expect(try await other.management(ada.credential, .get, path).status == 401)
                let again = try await harness.send(.post, "/management/1/login", json: ["emailAddress": .string(ada.email), "password": "a brand new password"])
                let fresh = try #require(again.json["credential"]?.stringValue)
                // A team change holds on the other process at once; so does signing out.
                #expect(try await other.management(fresh, .get, path).status == 200)
                #expect(try await harness.admin(.patch, "containers/\(a.container)/team/\(ada.email)", json: ["role": "viewer"]).status == 200)
                let asViewer = try await other.management(fresh, .post, "containers/\(a.container)/schema/reset", json: [:])
                #expect(asViewer.status == 403 && asViewer.json["reason"]?.stringValue?.contains("you are its viewer") == true, "\(asViewer.json)")
                #expect(try await harness.management(fresh, .post, "logout").json["signedOut"] == true)
                #expect(try await other.management(fresh, .get, path).status == 401)
                // The admin token cannot sign out; nor can a superuser remove or disable themselves.
                #expect(try await harness.admin(.post, "logout").status == 400)
                let root = try await harness.signedInOperator(superuser: true)
                #expect(try await harness.management(root.credential, .delete, "operators/\(root.email)").status == 400)
                #expect(try await harness.management(root.credential, .post, "operators/\(root.email)/disable").status == 400)
                let list = try await harness.management(root.credential, .get, "operators")
                #expect(list.json["operators"]?.arrayValue?.count == 2, "\(list.json)")
            }
        }
    }
}

import Crypto
import Foundation
import HTTPTypes
import StratusCore
@testable import StratusServer
import StratusStore
@testable import StratusTestSupport
import Testing

/// Every route of the router, with the commit failing: a route that writes is answered
/// TRY_AGAIN_LATER and leaves the database as it was, whether the commit raises an error or its
/// backend is terminated in the middle of it; a route that only reads answers as always. The
/// routes come from the router's table, and each must be named below as a write or a read (with
/// the request that shows it), so a route added later fails here until it is.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct WriteRouteFaultTests {
    typealias Answer = (status: Int, json: JSON)

    /// What a route is, and the request that shows it.
    enum Case {
        case write(@Sendable (Fixture) async throws -> Answer)
        case read(@Sendable (Fixture) async throws -> Answer)
        /// Not a database route: why.
        case none(String)
    }

    /// What the cases act on: a container with users, a zone, records, a share, a subscription,
    /// an uploaded asset, a server key, an API token, a custom role and two operators.
    struct Fixture: Sendable {
        var harness: Harness
        var alice: Session
        var bob: Session
        var shareGUID: String
        var uploadPath: String
        var tokenID: String
        var keyID: String
        var operatorEmail: String
        var teamEmail: String
        var superuser: String
        /// A user the disable and erase cases act on.
        var dave: String

        var container: String { alice.container }
        func data(_ session: Session, _ database: String, _ operation: String, _ body: JSON) async throws -> Answer {
            try await session.post(database, operation, body)
        }
        func get(_ session: Session, _ database: String, _ operation: String) async throws -> Answer {
            try await session.get(database, operation)
        }
        func device(_ verb: String, prefix: String = "/device/1", _ body: JSON) async throws -> Answer {
            try await harness.send(.post, "\(prefix)/\(container)/development/\(verb)?\(alice.query)", json: body)
        }
        func auth(_ method: HTTPRequest.Method, _ verb: String, _ session: Session? = nil, _ body: JSON? = nil) async throws -> Answer {
            let query = (session ?? alice).query
            if let body { return try await harness.send(method, "/auth/1/\(container)/development/\(verb)?\(query)", json: body) }
            return try await harness.send(method, "/auth/1/\(container)/development/\(verb)?\(query)")
        }
        func admin(_ method: HTTPRequest.Method, _ path: String, _ body: JSON? = nil) async throws -> Answer {
            try await harness.admin(method, path, json: body ?? (method == .get || method == .delete ? nil : [:]))
        }
        func asOperator(_ method: HTTPRequest.Method, _ path: String, _ body: JSON? = nil) async throws -> Answer {
            try await harness.management(superuser, method, path, json: body)
        }
    }

    static let schema = """
        DEFINE SCHEMA
          CREATE ROLE Editor;
          RECORD TYPE Note (title STRING QUERYABLE SORTABLE, n INT64 QUERYABLE, attachment ASSET,
                            GRANT WRITE TO "_creator", GRANT CREATE TO "_icloud", GRANT READ TO "_world");
          RECORD TYPE Article (title STRING QUERYABLE, GRANT CREATE, READ, WRITE TO Editor);
        """

    /// The cases, by method and route pattern (parameters written `{}`).
    static let cases: [String: Case] = {
        var cases: [String: Case] = [:]
        let data = "/database/1/{}/{}/{}/"
        @Sendable func note(_ name: String) -> JSON { op("create", name, fields: ["title": ["value": "t"]]) }
        // The data API.
        cases["POST \(data)records/modify"] = .write { try await $0.alice.modify("private", [note("fault-new")]) }
        cases["POST \(data)records/lookup"] = .read { try await $0.data($0.alice, "private", "records/lookup", ["records": [["recordName": "kept"]]]) }
        cases["POST \(data)records/query"] = .read { try await $0.data($0.alice, "private", "records/query", ["query": ["recordType": "Note"]]) }
        cases["POST \(data)records/changes"] = .read { try await $0.data($0.alice, "private", "records/changes", ["zoneID": ["zoneName": "Lists"]]) }
        cases["POST \(data)records/resolve"] = .read { try await $0.data($0.bob, "public", "records/resolve", ["shortGUIDs": [["value": .string($0.shareGUID)]]]) }
        cases["POST \(data)records/accept"] = .write { try await $0.data($0.bob, "public", "records/accept", ["shortGUIDs": [["value": .string($0.shareGUID)]]]) }
        cases["GET \(data)zones/list"] = .read { try await $0.get($0.alice, "private", "zones/list") }
        cases["POST \(data)zones/list"] = .read { try await $0.data($0.alice, "private", "zones/list", [:]) }
        cases["POST \(data)zones/lookup"] = .read { try await $0.data($0.alice, "private", "zones/lookup", ["zones": [["zoneName": "Lists"]]]) }
        cases["POST \(data)zones/modify"] = .write {
            try await $0.data($0.alice, "private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "FaultZone"]]]]])
        }
        cases["POST \(data)zones/changes"] = .read { try await $0.data($0.alice, "private", "zones/changes", [:]) }
        cases["POST \(data)changes/database"] = .read { try await $0.data($0.alice, "private", "changes/database", [:]) }
        cases["POST \(data)changes/zone"] = .read { try await $0.data($0.alice, "private", "changes/zone", ["zones": [["zoneID": ["zoneName": "Lists"]]]]) }
        cases["GET \(data)subscriptions/list"] = .read { try await $0.get($0.alice, "private", "subscriptions/list") }
        cases["POST \(data)subscriptions/list"] = .read { try await $0.data($0.alice, "private", "subscriptions/list", [:]) }
        cases["POST \(data)subscriptions/lookup"] = .read {
            try await $0.data($0.alice, "private", "subscriptions/lookup", ["subscriptions": [["subscriptionID": "kept"]]])
        }
        cases["POST \(data)subscriptions/modify"] = .write {
            try await $0.data($0.alice, "private", "subscriptions/modify", ["operations": [["operationType": "create", "subscription": [
                "subscriptionID": "fault-new", "subscriptionType": "zone", "zoneID": ["zoneName": "Lists"]]]]])
        }
        cases["POST \(data)assets/upload"] = .read {
            try await $0.data($0.alice, "private", "assets/upload", ["tokens": [["recordType": "Note", "fieldName": "attachment"]]])
        }
        // Keeps a receipt for the asset it hands out again.
        cases["POST \(data)assets/rereference"] = .write {
            try await $0.data($0.alice, "private", "assets/rereference", ["assets": [["recordName": "with-asset", "fieldName": "attachment"]]])
        }
        for method in ["GET", "POST"] {
            let get = method == "GET"
            cases["\(method) \(data)users/caller"] = .read { get ? try await $0.get($0.alice, "private", "users/caller") : try await $0.data($0.alice, "private", "users/caller", [:]) }
            cases["\(method) \(data)users/current"] = .read { get ? try await $0.get($0.alice, "private", "users/current") : try await $0.data($0.alice, "private", "users/current", [:]) }
            cases["\(method) \(data)users/discover"] = .read { get ? try await $0.get($0.alice, "public", "users/discover") : try await $0.data($0.alice, "public", "users/discover", [:]) }
            cases["\(method) \(data)users/lookup/contacts"] = .read {
                get ? try await $0.get($0.alice, "public", "users/lookup/contacts") : try await $0.data($0.alice, "public", "users/lookup/contacts", [:])
            }
        }
        cases["POST \(data)users/lookup/email"] = .read { try await $0.data($0.alice, "public", "users/lookup/email", ["users": [["emailAddress": "nobody@example.com"]]]) }
        cases["POST \(data)users/lookup/id"] = .read {
            try await $0.data($0.alice, "public", "users/lookup/id", ["users": [["userRecordName": .string($0.bob.userRecordName ?? "")]]])
        }
        // Devices, assets, accounts.
        for prefix in ["/device/1", "/database/1"] {
            cases["POST \(prefix)/{}/{}/tokens/create"] = .write { try await $0.device("tokens/create", prefix: prefix, ["apnsEnvironment": "development"]) }
            cases["GET \(prefix)/{}/{}/webpush/key"] = .read { try await $0.harness.send(.get, "\(prefix)/\($0.alice.container)/development/webpush/key?\($0.alice.query)") }
            // Stores the device (an APNs device token here, 32 bytes in hex).
            cases["POST \(prefix)/{}/{}/tokens/register"] = .write {
                try await $0.device("tokens/register", prefix: prefix, ["apnsEnvironment": "development", "apnsToken": .string(String(repeating: "0123abcd", count: 8))])
            }
        }
        cases["GET /device/1/{}/{}/courier/{}"] = .none("a long poll of the notifications a write queued (its writes are those requests')")
        cases["POST /assets/1/upload/{}"] = .write { fixture in
            try await fixture.harness.send(.post, fixture.uploadPath, body: "fault bytes", headers: [.contentType: "application/octet-stream"])
        }
        cases["GET /assets/1/download/{}"] = .none("serves bytes an upload stored; reads no row it could change")
        cases["HEAD /assets/1/download/{}"] = .none("the download's headers")
        cases["POST /auth/1/{}/{}/signup"] = .write { try await $0.auth(.post, "signup", nil, ["emailAddress": "fault-new@example.com", "password": "correct horse battery"]) }
        cases["POST /auth/1/{}/{}/signin"] = .write { try await $0.auth(.post, "signin", nil, ["emailAddress": "bob-fault@example.com", "password": "correct horse"]) }
        cases["GET /auth/1/{}/{}/signin"] = .none("the sign-in page (HTML)")
        cases["POST /auth/1/{}/{}/signout"] = .write { try await $0.auth(.post, "signout", $0.bob) }
        cases["POST /auth/1/{}/{}/password"] = .write { try await $0.auth(.post, "password", $0.bob, ["password": "correct horse", "newPassword": "another password"]) }
        cases["GET /auth/1/{}/{}/profile"] = .read { try await $0.auth(.get, "profile") }
        cases["POST /auth/1/{}/{}/profile"] = .write { try await $0.auth(.post, "profile", nil, ["discoverable": true, "familyName": "Fault"]) }
        // Management.
        let container = "/management/1/containers/{}"
        cases["POST /management/1/containers"] = .write { try await $0.admin(.post, "containers", ["name": "iCloud.com.example.FaultNew"]) }
        cases["GET /management/1/containers"] = .read { try await $0.admin(.get, "containers") }
        cases["POST \(container)/tokens"] = .write { try await $0.admin(.post, "containers/\($0.container)/tokens", ["environment": "development", "name": "fault"]) }
        cases["GET /management/1/tokens"] = .read { try await $0.admin(.get, "tokens") }
        cases["PATCH \(container)/tokens/{}"] = .write { try await $0.admin(.patch, "containers/\($0.container)/tokens/\($0.tokenID)", ["allowedOrigins": ["https://fault.example"]]) }
        cases["POST \(container)/tokens/{}/revoke"] = .write { try await $0.admin(.post, "containers/\($0.container)/tokens/\($0.tokenID)/revoke") }
        cases["POST \(container)/keys"] = .write {
            try await $0.admin(.post, "containers/\($0.container)/keys", ["environment": "development", "publicKey": .string(Signer().publicKeyPEM), "name": "fault"])
        }
        cases["GET \(container)/keys"] = .read { try await $0.admin(.get, "containers/\($0.container)/keys") }
        cases["POST \(container)/keys/{}/revoke"] = .write { try await $0.admin(.post, "containers/\($0.container)/keys/\($0.keyID.prefix(12))/revoke") }
        cases["GET \(container)/push"] = .read { try await $0.admin(.get, "containers/\($0.container)/push") }
        cases["POST \(container)/push/apns"] = .write {
            try await $0.admin(.post, "containers/\($0.container)/push/apns", Self.apnsSetting("production"))
        }
        cases["DELETE \(container)/push/apns"] = .write { try await $0.admin(.delete, "containers/\($0.container)/push/apns?environment=development") }
        cases["GET \(container)/audit"] = .read { try await $0.admin(.get, "containers/\($0.container)/audit") }
        cases["GET \(container)/users"] = .read { try await $0.admin(.get, "containers/\($0.container)/users?environment=development") }
        cases["GET \(container)/users/{}"] = .read { try await $0.admin(.get, "containers/\($0.container)/users/bob-fault@example.com?environment=development") }
        cases["POST \(container)/users/{}/disable"] = .write { try await $0.admin(.post, "containers/\($0.container)/users/dave-fault@example.com/disable?environment=development") }
        // Enabling a user who is enabled changes nothing: Carol was disabled, without the fault.
        cases["POST \(container)/users/{}/enable"] = .write { try await $0.admin(.post, "containers/\($0.container)/users/carol-fault@example.com/enable?environment=development") }
        cases["GET \(container)/users/{}/export"] = .read { try await $0.admin(.get, "containers/\($0.container)/users/bob-fault@example.com/export?environment=development") }
        cases["POST \(container)/users/{}/erase"] = .write { fixture in
            try await fixture.admin(.post, "containers/\(fixture.container)/users/\(fixture.dave)/erase?environment=development", ["confirm": .string(fixture.dave)])
        }
        cases["GET \(container)/shares"] = .read { try await $0.admin(.get, "containers/\($0.container)/shares?environment=development") }
        cases["GET \(container)/subscriptions"] = .read { try await $0.admin(.get, "containers/\($0.container)/subscriptions?environment=development") }
        cases["GET \(container)/quota"] = .read { try await $0.admin(.get, "containers/\($0.container)/quota?environment=development") }
        cases["PATCH \(container)/quota"] = .write { try await $0.admin(.patch, "containers/\($0.container)/quota", ["environment": "development", "signupsPerHour": 77]) }
        cases["GET \(container)/usage"] = .read { try await $0.admin(.get, "containers/\($0.container)/usage?environment=development") }
        cases["GET /management/1/usage/verify"] = .read { try await $0.admin(.get, "usage/verify") }
        cases["GET /management/1/stats"] = .read { try await $0.admin(.get, "stats") }
        cases["GET \(container)/roles"] = .read { try await $0.admin(.get, "containers/\($0.container)/roles?environment=development") }
        cases["GET \(container)/roles/{}/members"] = .read { try await $0.admin(.get, "containers/\($0.container)/roles/Editor/members?environment=development") }
        cases["POST \(container)/roles/{}/members"] = .write {
            try await $0.admin(.post, "containers/\($0.container)/roles/Editor/members", ["user": .string($0.bob.userRecordName ?? ""), "environment": "development"])
        }
        cases["DELETE \(container)/roles/{}/members/{}"] = .write {
            try await $0.admin(.delete, "containers/\($0.container)/roles/Editor/members/\($0.alice.userRecordName ?? "")?environment=development")
        }
        cases["GET \(container)/schema"] = .read { try await $0.admin(.get, "containers/\($0.container)/schema?environment=development") }
        cases["POST /management/1/schema/validate"] = .read { try await $0.admin(.post, "schema/validate", ["schema": .string(Self.schema)]) }
        cases["POST \(container)/schema/import"] = .write {
            try await $0.admin(.post, "containers/\($0.container)/schema/import", ["schema": .string(Self.schema + "  RECORD TYPE FaultNew (x STRING);\n")])
        }
        cases["GET \(container)/schema/diff"] = .read { try await $0.admin(.get, "containers/\($0.container)/schema/diff") }
        cases["POST \(container)/schema/deploy"] = .write { try await $0.admin(.post, "containers/\($0.container)/schema/deploy", [:]) }
        cases["POST \(container)/schema/indexes/build"] = .read { try await $0.admin(.post, "containers/\($0.container)/schema/indexes/build", ["batch": 10]) }
        cases["GET \(container)/schema/history"] = .read { try await $0.admin(.get, "containers/\($0.container)/schema/history") }
        cases["POST \(container)/schema/reset"] = .write { try await $0.admin(.post, "containers/\($0.container)/schema/reset", [:]) }
        cases["GET /health"] = .none("answers from memory")
        cases["GET /metrics"] = .none("answers from memory")
        cases["GET /openapi.json"] = .none("a document compiled in")
        cases["POST /management/1/login"] = .write { try await $0.harness.send(.post, "/management/1/login", json: ["emailAddress": .string($0.operatorEmail), "password": "operator password"]) }
        cases["POST /management/1/logout"] = .write { try await $0.asOperator(.post, "logout") }
        // Notes the credential's last use.
        cases["GET /management/1/whoami"] = .write { try await $0.asOperator(.get, "whoami") }
        cases["GET /management/1/operators"] = .read { try await $0.admin(.get, "operators") }
        cases["POST /management/1/operators"] = .write { try await $0.admin(.post, "operators", ["emailAddress": "fault-new-op@example.com", "password": "operator password"]) }
        cases["DELETE /management/1/operators/{}"] = .write { try await $0.admin(.delete, "operators/\($0.operatorEmail)") }
        cases["POST /management/1/operators/{}/disable"] = .write { try await $0.admin(.post, "operators/\($0.operatorEmail)/disable") }
        cases["POST /management/1/operators/{}/enable"] = .write { fixture in
            try await fixture.admin(.post, "operators/\(fixture.teamEmail)/enable")
        }
        cases["POST /management/1/operators/{}/revoke"] = .write { try await $0.admin(.post, "operators/\($0.operatorEmail)/revoke") }
        cases["POST /management/1/operators/{}/password"] = .write { try await $0.admin(.post, "operators/\($0.operatorEmail)/password", ["newPassword": "another operator password"]) }
        cases["GET \(container)/team"] = .read { try await $0.admin(.get, "containers/\($0.container)/team") }
        cases["POST \(container)/team"] = .write { try await $0.admin(.post, "containers/\($0.container)/team", ["operator": .string($0.operatorEmail), "role": "viewer"]) }
        cases["PATCH \(container)/team/{}"] = .write { try await $0.admin(.patch, "containers/\($0.container)/team/\($0.teamEmail)", ["role": "developer"]) }
        cases["DELETE \(container)/team/{}"] = .write { try await $0.admin(.delete, "containers/\($0.container)/team/\($0.teamEmail)") }
        cases["POST \(container)/records/query"] = .read {
            try await $0.admin(.post, "containers/\($0.container)/records/query", ["environment": "development", "database": "public", "query": ["recordType": "Note"]])
        }
        cases["POST \(container)/records/lookup"] = .read {
            try await $0.admin(.post, "containers/\($0.container)/records/lookup", ["environment": "development", "database": "public", "records": [["recordName": "kept"]]])
        }
        // Audited: an operator reads a user's private database.
        cases["POST \(container)/zones/list"] = .write {
            try await $0.admin(.post, "containers/\($0.container)/zones/list", ["environment": "development", "database": "private", "user": .string($0.alice.userRecordName ?? ""),
                                                                             "reason": "support request"])
        }
        // Upload URLs are sealed, not stored: no transaction to fail.
        cases["POST \(container)/assets/upload"] = .read {
            try await $0.admin(.post, "containers/\($0.container)/assets/upload", ["environment": "development", "database": "public",
                                                                                "tokens": [["recordType": "Note", "fieldName": "attachment"]]])
        }
        cases["POST \(container)/records/modify"] = .write {
            try await $0.admin(.post, "containers/\($0.container)/records/modify", ["environment": "development", "database": "public", "operations": [note("fault-managed")]])
        }
        cases["GET /management/1/audit"] = .read { try await $0.admin(.get, "audit") }
        cases["GET \(container)/logs"] = .none("reads the request log, which the fault leaves alone (the log is written after the answer)")
        cases["GET \(container)/telemetry"] = .none("reads the request counters, which the fault leaves alone")
        return cases
    }()

    /// An APNs credential to set for `environment`.
    static func apnsSetting(_ environment: String) -> JSON {
        ["environment": .string(environment), "key": .string(P256.Signing.PrivateKey().pemRepresentation), "keyID": "ABC123DEFG",
         "teamID": "TEAM123456", "topic": "com.example.fault"]
    }

    /// Tables the fault leaves alone: what the service keeps about requests (written after the
    /// answer, in the background), not what a request changes.
    static let bookkeeping: Set<String> = ["request_log", "request_log_heads", "request_counts", "schema_query_shapes"]

    func fixture(_ harness: Harness) async throws -> Fixture {
        let anonymous = try await harness.container()
        #expect(try await harness.admin(.post, "containers/\(anonymous.container)/schema/import", json: ["schema": .string(Self.schema)]).status == 200)
        let alice = try await anonymous.signedUp("alice-fault@example.com")
        let bob = try await anonymous.signedUp("bob-fault@example.com")
        #expect(try await alice.modify("public", [op("create", "kept", fields: ["title": ["value": "kept"]])]).status == 200)
        #expect(try await alice.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Lists"]]]]]).status == 200)
        let saved = try await alice.modify("private", zone: "Lists", [SharingTests.op("create", "list-1", fields: ["title": ["value": "Groceries"]], ["createShortGUID": true])])
        let shareGUID = try #require(saved.json.record(0)?["shortGUID"]?.stringValue, "\(saved.json)")
        let rootTag = try #require(saved.json.record(0)?["recordChangeTag"]?.stringValue)
        let shared = try await alice.modify("private", zone: "Lists", [
            SharingTests.shareOp("share-1", forRecord: "list-1", rootTag: rootTag, participants: [SharingTests.participant(bob, "READ_ONLY")]),
        ])
        #expect(shared.json.record(0)?.errorCode == nil, "\(shared.json)")
        #expect(try await alice.post("private", "subscriptions/modify", ["operations": [["operationType": "create", "subscription": [
            "subscriptionID": "kept", "subscriptionType": "zone", "zoneID": ["zoneName": "Lists"]]]]]).status == 200)
        let file = try await AssetRequests.upload(alice, AssetRequests.randomBytes(1000), recordName: "with-asset")
        #expect(try await alice.modify("private", [op("create", "with-asset", fields: ["attachment": ["value": file]])]).status == 200)
        let tokens = try await alice.post("private", "assets/upload", ["tokens": [["recordName": "fault-asset", "recordType": "Note", "fieldName": "attachment"]]])
        let uploadURL = try #require(tokens.json["tokens"]?.arrayValue?.first?["url"]?.stringValue, "\(tokens.json)")
        let token = try await harness.admin(.post, "containers/\(alice.container)/tokens", json: ["environment": "development", "name": "patched"])
        let tokenID = JSONWriter.string(try #require(token.json["token"]?["id"]))
        let key = try await ServerKeyTests.addKey(harness, container: alice.container)
        // Removing a credential needs one set.
        #expect(try await harness.admin(.post, "containers/\(alice.container)/push/apns", json: Self.apnsSetting("development")).status == 200)
        #expect(try await harness.admin(.post, "containers/\(alice.container)/roles/Editor/members", json: ["user": .string(alice.userRecordName ?? ""), "environment": "development"]).status == 200)
        // Enable and enable-operator need someone disabled to act on.
        _ = try await anonymous.signedUp("carol-fault@example.com")
        let dave = try #require(try await anonymous.signedUp("dave-fault@example.com").userRecordName)
        #expect(try await harness.admin(.post, "containers/\(alice.container)/users/carol-fault@example.com/disable?environment=development").status == 200)
        let op1 = try await harness.signedInOperator("op-fault@example.com")
        let member = try await harness.signedInOperator("team-fault@example.com", teams: [(alice.container, .viewer)])
        #expect(try await harness.admin(.post, "operators/\(member.email)/disable").status == 200)
        let superuser = try await harness.signedInOperator("super-fault@example.com", superuser: true)
        return Fixture(harness: harness, alice: alice, bob: bob, shareGUID: shareGUID, uploadPath: try AssetRequests.path(of: uploadURL),
                       tokenID: tokenID, keyID: key.keyID, operatorEmail: op1.email, teamEmail: member.email, superuser: superuser.credential, dave: dave)
    }

    @Test(arguments: [CommitFaults.Mode.fail, .stall])
    func everyWriteRouteAnswersTryAgainLaterAndChangesNothingWhenItsCommitFails(mode: CommitFaults.Mode) async throws {
        try await Harness.run(verifyUsage: false) { harness in
            let table = CredentialIsolationTests.routeTable(harness).filter { !$0.1.hasPrefix("/console") }
                .map { "\($0.0) \(OpenAPIContractTests.shape($0.1))" }
            let unnamed = Set(table).subtracting(Self.cases.keys).sorted()
            #expect(unnamed.isEmpty, "routes with no case here (name each as a write, with a request that writes, or a read): \(unnamed)")
            let stale = Set(Self.cases.keys).subtracting(table).sorted()
            #expect(stale.isEmpty, "cases for routes the router no longer has: \(stale)")

            let fixture = try await fixture(harness)
            let tables = try await CommitFaults.allTables(harness.database).filter { !Self.bookkeeping.contains($0) }
            try await withDatabase(harness.database.configuration, maximumConnections: 1) { own in
            let faults = try await CommitFaults.install(on: own, tables: tables)
            var writes = 0
            for key in Set(table).sorted() {
                guard let route = Self.cases[key] else { continue }
                switch route {
                case .none:
                    continue
                case .read(let request):
                    // Reads answer as always while every commit fails (only under `fail`: a stalled
                    // commit would only stall the read too).
                    guard mode == .fail else { continue }
                    // Once without the fault: what a first request remembers (a session's last
                    // use, usage counters made on first sight) is written then, as by any client.
                    _ = try await request(fixture)
                    try await faults.arm(.fail)
                    let answer = try await request(fixture)
                    try await faults.disarm()
                    #expect((200..<300).contains(answer.status), "\(key) is a read, but with commits failing it answered \(answer.status) \(Self.summary(answer))")
                case .write(let request):
                    writes += 1
                    let before = try await faults.fingerprint(tables)
                    try await faults.arm(mode)
                    let answer: Answer
                    if mode == .stall {
                        let sent = Task { try await request(fixture) }
                        let terminator = Task {
                            while !Task.isCancelled {
                                try await faults.terminateStalled(wait: false)
                                try await Task.sleep(for: .milliseconds(20))
                            }
                        }
                        // A request that never answers is named, not left to the suite's time limit.
                        let watchdog = Task {
                            try await Task.sleep(for: .seconds(90))
                            Issue.record("\(key) (stall): no answer after 90 s")
                            sent.cancel()
                        }
                        answer = try await sent.value
                        watchdog.cancel()
                        terminator.cancel()
                    } else {
                        answer = try await request(fixture)
                    }
                    try await faults.disarm()
                    let after = try await faults.fingerprint(tables)
                    let changed = tables.filter { before[$0] != after[$0] }
                    // Refused whole, or (the per-item answers of zones/modify and subscriptions/modify) item by item.
                    let items = ["records", "zones", "subscriptions"].compactMap { answer.json[$0]?.arrayValue }.first ?? []
                    let refused = (answer.status == 503 && answer.json.errorCode == "TRY_AGAIN_LATER")
                        || (answer.status == 200 && !items.isEmpty && items.allSatisfy { $0.errorCode == "TRY_AGAIN_LATER" })
                    #expect(refused, "\(key) (\(mode)): answered \(answer.status) \(Self.summary(answer))")
                    #expect(changed.isEmpty, "\(key) (\(mode)): answered \(answer.status), and changed \(changed)")
                }
            }
            #expect(writes >= 35, "only \(writes) write routes were tried")
            }
        }
    }

    static func summary(_ answer: Answer) -> String {
        if let code = answer.json.errorCode { return "\(code): \(answer.json["reason"]?.stringValue ?? "")" }
        return String(JSONWriter.string(answer.json).prefix(300))
    }
}

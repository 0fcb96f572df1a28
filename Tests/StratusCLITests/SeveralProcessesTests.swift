import Foundation
@testable import StratusCore
import StratusStore
@testable import StratusTestSupport
import Testing

/// Two real `stratus serve` processes on one database (issue 28): conflicting writes, change
/// feeds, a schema deploy, an API token revoked and a session signed out on one are seen by the
/// other at once, with no restart.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct SeveralProcessesTests {
    static let adminToken = "several-admin"
    static let container = "iCloud.com.example.Several"

    /// Repeats `request` until `done` holds or 5 s pass: what another process learns through
    /// PostgreSQL arrives within milliseconds, not before the answer that caused it.
    static func eventually(_ request: () async throws -> (Int, JSON), _ done: (Int, JSON) -> Bool) async throws -> (answer: (Int, JSON), waited: Duration) {
        let start = ContinuousClock.now
        while true {
            let answer = try await request()
            if done(answer.0, answer.1) || ContinuousClock.now - start > .seconds(5) { return (answer, ContinuousClock.now - start) }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    @Test func twoProcessesAgreeOnWritesFeedsSchemaTokensAndSessions() async throws {
        try await withServeProcesses(2, adminToken: Self.adminToken, name: "stratus-several") { servers in
            let (a, b) = (servers[0], servers[1])
            let admin = ["Authorization": "Bearer \(Self.adminToken)"]
            let tenant = try await serveTenant(a, adminToken: Self.adminToken, container: Self.container)
            func data(_ server: String, _ database: String, _ operation: String, token: String = tenant.token, user: String? = tenant.user,
                      environment: String = "development") -> String {
                server + "/database/1/\(Self.container)/\(environment)/\(database)/\(operation)?ckAPIToken=\(token)" + (user.map { "&ckWebAuthToken=\($0)" } ?? "")
            }
            func save(_ name: String, tag: String? = nil, value: Int) -> String {
                let type = tag == nil ? "create" : "update"
                let tagText = tag.map { #","recordChangeTag":"\#($0)""# } ?? ""
                return #"{"zoneID":{"zoneName":"z"},"operations":[{"operationType":"\#(type)","record":{"recordName":"\#(name)","recordType":"Note"\#(tagText),"fields":{"n":{"value":\#(value)}}}}]}"#
            }
            // A zone and a record made on A; B's change feed lists it.
            #expect(try await Programs.post(data(a, "private", "zones/modify"), #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"z"}}}]}"#).0 == 200)
            let created = try await Programs.post(data(a, "private", "records/modify"), save("r1", value: 1))
            let tag = try #require(created.1["records"]?.arrayValue?.first?["recordChangeTag"]?.stringValue, "\(created.1)")
            let feed = try await Programs.post(data(b, "private", "changes/zone"), #"{"zones":[{"zoneID":{"zoneName":"z"}}]}"#)
            let zone = feed.1["zones"]?.arrayValue?.first
            #expect(zone?["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } == ["r1"], "\(feed.1)")
            let syncToken = try #require(zone?["syncToken"]?.stringValue, "\(feed.1)")

            // The same change tag sent to both processes at once: one write wins, the other is a CONFLICT.
            async let onA = Programs.post(data(a, "private", "records/modify"), save("r1", tag: tag, value: 2))
            async let onB = Programs.post(data(b, "private", "records/modify"), save("r1", tag: tag, value: 3))
            let answers = [try await onA, try await onB].map { $0.1["records"]?.arrayValue?.first }
            let winners = answers.filter { $0?["serverErrorCode"] == nil }
            #expect(winners.count == 1 && answers.contains { $0?["serverErrorCode"] == "CONFLICT" }, "\(answers)")
            let winner = winners.first??["fields"]?["n"]?["value"]
            // B's feed from its token has the winning value, once.
            let next = try await Programs.post(data(b, "private", "changes/zone"), #"{"zones":[{"zoneID":{"zoneName":"z"},"syncToken":"\#(syncToken)"}]}"#)
            let changed: [JSON] = next.1["zones"]?.arrayValue?.first?["records"]?.arrayValue ?? []
            #expect(changed.count == 1 && changed.first?["fields"]?["n"]?["value"] == winner, "\(next.1)")

            // A schema deploy through A holds on B at once: B had cached production without the type.
            let production = try await Programs.post(a + "/management/1/containers/\(Self.container)/tokens", #"{"environment":"production","name":"p"}"#, headers: admin)
            let productionToken = try #require(production.1["apiToken"]?.stringValue)
            let signup = try await Programs.post(b + "/auth/1/\(Self.container)/production/signup?ckAPIToken=\(productionToken)",
                                                      #"{"emailAddress":"pat@example.com","password":"correct horse"}"#)
            let productionUser = try #require(signup.1["ckWebAuthToken"]?.stringValue?.addingPercentEncoding(withAllowedCharacters: .alphanumerics))
            let publicSave = #"{"operations":[{"operationType":"create","record":{"recordType":"Note","fields":{"n":{"value":1}}}}]}"#
            let before = try await Programs.post(data(b, "public", "records/modify", token: productionToken, user: productionUser, environment: "production"), publicSave)
            #expect(before.1["records"]?.arrayValue?.first?["serverErrorCode"] == "BAD_REQUEST", "production took an undeployed type: \(before.1)")
            let deployed = try await Programs.post(a + "/management/1/containers/\(Self.container)/schema/deploy", "{}", headers: admin)
            #expect(deployed.0 == 200, "\(deployed.1)")
            let after = try await Self.eventually({
                try await Programs.post(data(b, "public", "records/modify", token: productionToken, user: productionUser, environment: "production"), publicSave)
            }, { status, json in status == 200 && json["records"]?.arrayValue?.first?["serverErrorCode"] == nil })
            #expect(after.answer.0 == 200 && after.answer.1["records"]?.arrayValue?.first?["serverErrorCode"] == nil, "B did not see the deploy: \(after.answer.1)")

            // An API token revoked through A is refused by B, which had it cached.
            let second = try await Programs.post(a + "/management/1/containers/\(Self.container)/tokens", #"{"environment":"development","name":"second"}"#, headers: admin)
            let secondToken = try #require(second.1["apiToken"]?.stringValue)
            let secondID = try #require(second.1["token"]?["tokenID"] ?? second.1["token"]?["id"], "\(second.1)")
            #expect(try await Programs.post(data(b, "public", "users/caller", token: secondToken), "{}").0 == 200)
            let revoked = try await Programs.post(a + "/management/1/containers/\(Self.container)/tokens/\(JSONWriter.string(secondID).trimmingCharacters(in: CharacterSet(charactersIn: "\"")))/revoke", "{}", headers: admin)
            #expect(revoked.0 == 200, "\(revoked.1)")
            let revokedOnB = try await Self.eventually({ try await Programs.post(data(b, "public", "users/caller", token: secondToken), "{}") }, { status, _ in status == 401 })
            #expect(revokedOnB.answer.0 == 401, "B still took a revoked API token after \(revokedOnB.waited)")

            // A session signed out through A is refused by B, which had it cached.
            #expect(try await Programs.post(data(b, "private", "zones/list"), "{}").0 == 200)
            let signedOut = try await Programs.post(a + "/auth/1/\(Self.container)/development/signout?ckAPIToken=\(tenant.token)&ckWebAuthToken=\(tenant.user)", "{}")
            #expect(signedOut.0 == 200, "\(signedOut.1)")
            let refused = try await Self.eventually({ try await Programs.post(data(b, "private", "zones/list"), "{}") }, { status, _ in status == 401 })
            #expect(refused.answer.0 == 401, "B still took a signed-out session after \(refused.waited): \(refused.answer.1)")
            print("several processes: one CONFLICT of two racing writes; B saw the deploy after \(after.waited), the revocation after \(revokedOnB.waited), the sign-out after \(refused.waited)")
        }
    }
}

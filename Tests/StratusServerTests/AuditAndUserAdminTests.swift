import Foundation
import HTTPTypes
import StratusCore
@testable import StratusServer
@testable import StratusTestSupport
import Testing

/// The audit log holds every management action, written with the action (a refused action
/// leaves no entry), and administrators disable and enable users through the management API.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct AuditAndUserAdminTests {
    @Test func managementActionsAreAuditedWithTheirActor() async throws {
        try await Harness.run { harness in
            let session = try await harness.container()
            let container = session.container
            // The actor is who authenticated, never what a client says of itself.
            let ada = try await harness.signedInOperator(teams: [(container, .owner)])
            let headers: HTTPFields = [.authorization: "Bearer \(ada.credential)", HTTPField.Name("X-Stratus-Actor")!: "ada@laptop"]
            let second = try await harness.send(.post, "/management/1/containers/\(container)/tokens",
                                                json: ["environment": "production", "name": "prod"], headers: headers)
            #expect(second.status == 201)
            let tokenID = second.json["token"]?["id"]
            let revoked = try await harness.admin(.post, "containers/\(container)/tokens/\(tokenID.map { JSONWriter.string($0) } ?? "")/revoke")
            #expect(revoked.status == 200, "\(revoked.json)")
            // A refused action leaves nothing behind.
            #expect(try await harness.admin(.post, "containers/\(container)/tokens/999999/revoke").status == 404)
            let imported = try await harness.send(.post, "/management/1/containers/\(container)/schema/import", json: [
                "schema": "DEFINE SCHEMA RECORD TYPE Note (title STRING QUERYABLE, GRANT READ TO \"_world\");", "by": "bob@desk",
            ], headers: [.authorization: "Bearer \(Harness.adminToken)"])
            #expect(imported.status == 200, "\(imported.json)")

            let log = try await harness.admin(.get, "containers/\(container)/audit")
            #expect(log.status == 200, "\(log.json)")
            let entries = log.json["entries"]?.arrayValue ?? []
            let actions = entries.compactMap { $0["action"]?.stringValue }
            #expect(actions == ["container.create", "token.create", "team.add", "token.create", "token.revoke", "schema.import"], "\(actions)")
            #expect(entries[1]["environment"] == "development" && entries[3]["environment"] == "production")
            #expect(entries[2]["target"] == .string(ada.email) && entries[2]["detail"] == "owner", "\(entries[2])")
            #expect(entries[3]["actor"] == .string("operator \(ada.email) (credential \(ada.credentialID))"), "\(entries[3])")
            #expect(entries[4]["target"] == .string(tokenID.map { JSONWriter.string($0) } ?? ""), "\(entries[4])")
            #expect(entries[4]["actor"] == "admin token" && entries[5]["actor"] == "admin token", "\(entries[4]) \(entries[5])")
            #expect(entries[5]["detail"]?.stringValue?.contains("Note") == true, "\(entries[5])")
            #expect(!JSONWriter.string(log.json).contains("laptop") && !JSONWriter.string(log.json).contains("bob@desk"))
            // No secret is ever in the log.
            #expect(!JSONWriter.string(log.json).contains(second.json["apiToken"]?.stringValue ?? "unset"))
            // Newest first, by action, by actor.
            let newest = try await harness.admin(.get, "containers/\(container)/audit?order=newest&limit=1")
            #expect(newest.json["entries"]?.arrayValue?.map { $0["action"] } == ["schema.import"], "\(newest.json)")
            let creations = try await harness.admin(.get, "containers/\(container)/audit?action=token.create")
            #expect(creations.json["entries"]?.arrayValue?.count == 2, "\(creations.json)")
            let hers = try await harness.admin(.get, "containers/\(container)/audit?actor=\(ada.email.uppercased())")
            #expect(hers.json["entries"]?.arrayValue?.map { $0["action"] } == ["token.create"], "\(hers.json)")
            #expect(try await harness.admin(.get, "containers/\(container)/audit?order=sideways").status == 400)
            // Filtering by time, and bad input.
            let future = try await harness.admin(.get, "containers/\(container)/audit?since=2999-01-01T00:00:00Z")
            #expect(future.json["entries"]?.arrayValue?.isEmpty == true)
            let bad = try await harness.admin(.get, "containers/\(container)/audit?since=yesterday")
            #expect(bad.status == 400 && bad.json["reason"]?.stringValue?.contains("ISO 8601") == true)
            // Only a credential reads it.
            #expect(try await harness.send(.get, "/management/1/containers/\(container)/audit").status == 401)
            #expect(try await harness.management(ada.credential, .get, "containers/\(container)/audit").status == 200)
        }
    }

    @Test func disablingAUserEndsTheirSessionsEverywhere() async throws {
        try await Harness.run { harness in
            let email = "lee\(UInt32.random(in: 0...UInt32.max))@example.com"
            let user = try await harness.container().signedUp(email, password: "lee's password")
            let container = user.container
            try await harness.otherProcess { other in
                #expect(try await user.on(other).get("public", "users/caller").status == 200)
                let listed = try await harness.admin(.get, "containers/\(container)/users?environment=development")
                #expect(listed.json["users"]?.arrayValue?.first?["liveSessions"] == 1, "\(listed.json)")
                let disabled = try await harness.admin(.post, "containers/\(container)/users/\(email)/disable")
                #expect(disabled.status == 200 && disabled.json["user"]?["userRecordName"] == .string(user.userRecordName ?? ""), "\(disabled.json)")
                #expect(try await user.get("public", "users/caller").status == 401)
                let there = try await SessionTests.caller(user.on(other), until: 401, within: .seconds(5))
                #expect(there.status == 401, "the other process accepted a disabled user's token for \(there.waited)")
                let signIn = try await user.signedIn(email, password: "lee's password")
                #expect(signIn.status == 401 && signIn.json["reason"]?.stringValue?.contains("disabled") == true, "\(signIn.json)")
                // A wrong password does not reveal that the account is disabled.
                let wrong = try await user.signedIn(email, password: "not lee's password")
                #expect(wrong.json["reason"]?.stringValue?.contains("disabled") == false, "\(wrong.json)")
                let enabled = try await harness.admin(.post, "containers/\(container)/users/\(user.userRecordName ?? "")/enable")
                #expect(enabled.status == 200 && enabled.json["user"]?["disabledAt"] == .null, "\(enabled.json)")
                #expect(try await user.signedIn(email, password: "lee's password").status == 200)
                let shown = try await harness.admin(.get, "containers/\(container)/users/\(email)")
                #expect(shown.json["user"]?["emailAddress"] == .string(email))
                #expect(try await harness.admin(.post, "containers/\(container)/users/nobody@example.com/disable").status == 404)
                let actions = try await harness.admin(.get, "containers/\(container)/audit").json["entries"]?.arrayValue?.compactMap { $0["action"]?.stringValue }
                #expect(actions?.suffix(2) == ["user.disable", "user.enable"], "\(actions ?? [])")
            }
        }
    }
}

import Foundation
import StratusCore
@testable import StratusServer
@testable import StratusTestSupport
import Testing

/// Custom roles (`CREATE ROLE` in the schema) through the management API and the CLI's routes:
/// members get the role's grants in lookups, queries, change feeds and modifies; others do not;
/// a change of membership holds on every server process.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct CustomRoleTests {
    static let schema = """
        DEFINE SCHEMA
          CREATE ROLE Editor;
          RECORD TYPE Article (title STRING QUERYABLE, GRANT CREATE, READ, WRITE TO Editor);
        """

    static func titled(_ title: String) -> [String: JSON] { ["title": ["value": .string(title)]] }
    static let query: JSON = ["query": ["recordType": "Article", "filterBy": [["fieldName": "title", "comparator": "EQUALS", "fieldValue": ["value": "news"]]]]]

    @Test func membersOfACustomRoleGetItsGrantsAndOthersDoNot() async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            let imported = try await harness.admin(.post, "containers/\(anonymous.container)/schema/import", json: ["schema": .string(Self.schema)])
            #expect(imported.status == 200, "\(imported.json)")
            let alice = try await anonymous.signedUp()
            let carol = try await anonymous.signedUp()
            let bob = try await anonymous.signedUp()
            let membersPath = "containers/\(anonymous.container)/roles/Editor/members"

            // Before anyone holds the role, nobody may create an article; the reason names the role.
            let early = try await alice.modify("public", [op("create", "a1", type: "Article", fields: Self.titled("news"))])
            #expect(early.json.record(0)?.errorCode == "ACCESS_DENIED", "\(early.json)")
            #expect(early.json.record(0)?["reason"]?.stringValue?.contains("Editor") == true, "\(early.json)")

            // Alice by record name, Carol by email address.
            let assigned = try await harness.admin(.post, membersPath, json: ["user": .string(alice.userRecordName!), "environment": "development"])
            #expect(assigned.status == 200 && assigned.json["added"] == true, "\(assigned.json)")
            let carolEmail = try #require(try await harness.admin(.get, "containers/\(anonymous.container)/users/\(carol.userRecordName!)").json["user"]?["emailAddress"]?.stringValue)
            #expect(try await harness.admin(.post, membersPath, json: ["user": .string(carolEmail)]).json["added"] == true)
            let again = try await harness.admin(.post, membersPath, json: ["user": .string(carolEmail)])
            #expect(again.status == 200 && again.json["added"] == false, "\(again.json)")
            let members = try await harness.admin(.get, membersPath)
            #expect(Set(members.json["members"]?.arrayValue?.compactMap { $0["userRecordName"]?.stringValue } ?? [])
                    == [alice.userRecordName!, carol.userRecordName!], "\(members.json)")

            // Modify: a member creates; another member changes it (a custom role has no creator notion).
            let created = try await alice.modify("public", [op("create", "a1", type: "Article", fields: Self.titled("news"))])
            let tag = try #require(created.json.record(0)?["recordChangeTag"]?.stringValue, "\(created.json)")
            let changed = try await carol.modify("public", [op("update", "a1", type: "Article", tag: tag, fields: Self.titled("news"))])
            #expect(changed.json.record(0)?["recordChangeTag"] != nil, "\(changed.json)")
            let refused = try await bob.modify("public", [op("create", "a2", type: "Article", fields: Self.titled("news"))])
            #expect(refused.json.record(0)?.errorCode == "ACCESS_DENIED", "\(refused.json)")

            // Lookups, queries and the change feed: members read, a non-member and anonymous callers do not.
            let lookup = ["records": [["recordName": "a1"]]] as JSON
            #expect(try await carol.post("public", "records/lookup", lookup).json.record(0)?["fields"]?["title"]?["value"] == "news")
            #expect(try await bob.post("public", "records/lookup", lookup).json.record(0)?.errorCode == "ACCESS_DENIED")
            #expect(try await anonymous.post("public", "records/lookup", lookup).json.record(0)?.errorCode == "ACCESS_DENIED")
            let found = try await alice.post("public", "records/query", Self.query)
            #expect(found.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } == ["a1"], "\(found.json)")
            let bobQuery = try await bob.post("public", "records/query", Self.query)
            #expect(bobQuery.status == 403 && bobQuery.json.errorCode == "ACCESS_DENIED", "\(bobQuery.json)")
            let feed: JSON = ["zones": [["zoneID": ["zoneName": "_defaultZone"]]]]
            func feedNames(_ session: Session) async throws -> [String]? {
                try await session.post("public", "changes/zone", feed).json["zones"]?.arrayValue?.first?["records"]?.arrayValue?
                    .filter { $0["recordType"] != "Users" }.compactMap { $0["recordName"]?.stringValue }
            }
            #expect(try await feedNames(carol) == ["a1"])
            #expect(try await feedNames(bob) == [])

            // Taking the role away holds at once.
            let removed = try await harness.admin(.delete, "\(membersPath)/\(carol.userRecordName!)")
            #expect(removed.status == 200 && removed.json["removed"]?.stringValue == carol.userRecordName, "\(removed.json)")
            #expect(try await carol.post("public", "records/lookup", lookup).json.record(0)?.errorCode == "ACCESS_DENIED")
            let notMember = try await harness.admin(.delete, "\(membersPath)/\(carol.userRecordName!)")
            #expect(notMember.status == 404 && notMember.json.errorCode == "NOT_FOUND", "\(notMember.json)")

            // The audit log has both changes.
            let audit = try await harness.admin(.get, "containers/\(anonymous.container)/audit")
            let actions = audit.json["entries"]?.arrayValue?.compactMap { $0["action"]?.stringValue } ?? []
            #expect(actions.filter { $0 == "role.assign" }.count == 2 && actions.contains("role.unassign"), "\(audit.json)")
        }
    }

    @Test func membershipIsPerEnvironmentAndOnlyForDeclaredCustomRoles() async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            #expect(try await harness.admin(.post, "containers/\(anonymous.container)/schema/import", json: ["schema": .string(Self.schema)]).status == 200)
            let alice = try await anonymous.signedUp()
            let base = "containers/\(anonymous.container)/roles"
            // Production has no such role until the schema is deployed.
            let early = try await harness.admin(.post, "\(base)/Editor/members", json: ["user": .string(alice.userRecordName!), "environment": "production"])
            #expect(early.status == 404 && early.json["reason"]?.stringValue?.contains("schema deploy") == true, "\(early.json)")
            for (role, status, words) in [("_icloud", 400, "built-in"), ("Reviewer", 404, "its roles: Editor")] {
                let refused = try await harness.admin(.post, "\(base)/\(role)/members", json: ["user": .string(alice.userRecordName!)])
                #expect(refused.status == status && refused.json["reason"]?.stringValue?.contains(words) == true, "\(role): \(refused.json)")
            }
            let unknownUser = try await harness.admin(.post, "\(base)/Editor/members", json: ["user": "nobody@example.com"])
            #expect(unknownUser.status == 404, "\(unknownUser.json)")
            let listed = try await harness.admin(.get, "\(base)?environment=development")
            #expect(listed.json["roles"] == [["role": "Editor", "members": 0]], "\(listed.json)")

            // Deployed: membership in production is its own; development's members do not carry over.
            #expect(try await harness.admin(.post, "containers/\(anonymous.container)/schema/deploy", json: [:]).status == 200)
            #expect(try await harness.admin(.post, "\(base)/Editor/members", json: ["user": .string(alice.userRecordName!)]).status == 200)
            let production = try await harness.admin(.get, "\(base)/Editor/members?environment=production")
            #expect(production.json["members"] == [], "\(production.json)")
        }
    }

    @Test func aMembershipChangeHoldsOnEveryServerProcess() async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            #expect(try await harness.admin(.post, "containers/\(anonymous.container)/schema/import", json: ["schema": .string(Self.schema)]).status == 200)
            let alice = try await anonymous.signedUp()
            let membersPath = "containers/\(anonymous.container)/roles/Editor/members"
            #expect(try await harness.admin(.post, membersPath, json: ["user": .string(alice.userRecordName!)]).status == 200)
            #expect(try await alice.modify("public", [op("create", "a1", type: "Article", fields: Self.titled("news"))]).json.record(0)?["recordChangeTag"] != nil)
            try await harness.otherProcess { other in
                let elsewhere = alice.on(other)
                let lookup = ["records": [["recordName": "a1"]]] as JSON
                // The other process reads (and caches) Alice's membership.
                #expect(try await elsewhere.post("public", "records/lookup", lookup).json.record(0)?["fields"] != nil)
                #expect(try await harness.admin(.delete, "\(membersPath)/\(alice.userRecordName!)").status == 200)
                let start = ContinuousClock.now
                var denied = false
                while !denied, ContinuousClock.now - start < .seconds(5) {
                    denied = try await elsewhere.post("public", "records/lookup", lookup).json.record(0)?.errorCode == "ACCESS_DENIED"
                    if !denied { try await Task.sleep(for: .milliseconds(20)) }
                }
                #expect(denied, "the other process still let a former member read after 5 s")
                print("a role taken away reached the other server process after \(ContinuousClock.now - start)")
            }
        }
    }
}

import Foundation
import StratusCore
import StratusStore
@testable import StratusTestSupport
import Testing

/// Subscriptions (issue 26): `subscriptions/list`, `lookup` and `modify` in the public, private
/// and shared databases, kept per user and validated against the schema; `stratus subscription list`.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct SubscriptionTests {
    static func create(_ subscription: JSON) -> JSON { ["operationType": "create", "subscription": subscription] }

    static let pinnedNotes: JSON = ["subscriptionID": "pinned", "subscriptionType": "query",
                                    "query": ["recordType": "Note", "filterBy": [["fieldName": "pinned", "comparator": "EQUALS", "fieldValue": ["value": 1]]]],
                                    "firesOn": ["create", "update"], "notificationInfo": ["alertBody": "A note changed", "shouldSendContentAvailable": true]]

    static func ids(_ json: JSON) -> [String] { (json["subscriptions"]?.arrayValue ?? []).compactMap { $0["subscriptionID"]?.stringValue } }

    @Test func subscriptionsAreKeptPerUserAndDatabase() async throws {
        try await Harness.run(live: true) { harness in
            let anonymous = try await harness.container()
            let email = "ada\(UInt32.random(in: 0...UInt32.max))@example.com"
            let alice = try await anonymous.signedUp(email)
            let bob = try await anonymous.signedUp()
            // The type and field exist once a record was saved (development's just-in-time schema).
            #expect(try await alice.modify("private", [op("create", "n1", fields: ["pinned": ["value": 1]])]).json.record(0)?.errorCode == nil)
            #expect(try await alice.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Work"]]]]]).status == 200)

            let made = try await alice.post("private", "subscriptions/modify", ["operations": [
                Self.create(Self.pinnedNotes),
                Self.create(["subscriptionID": "work", "subscriptionType": "zone", "zoneID": ["zoneName": "Work"]]),
                Self.create(["subscriptionType": "database"]),
            ]])
            #expect(made.status == 200, "\(made.json)")
            let results = made.json["subscriptions"]?.arrayValue ?? []
            #expect(results.count == 3 && results.allSatisfy { $0.errorCode == nil }, "\(made.json)")
            #expect(results.first?["firesOn"] == ["create", "update"] && results.first?["zoneWide"] == true && results.first?["firesOnce"] == false, "\(made.json)")
            #expect(results.first?["notificationInfo"]?["alertBody"] == "A note changed")
            #expect(results.dropFirst().first?["zoneID"] == ["zoneName": "Work", "ownerRecordName": .string(alice.userRecordName!)], "\(made.json)")
            // Without an ID, the server makes one.
            let generated = try #require(results.last?["subscriptionID"]?.stringValue, "\(made.json)")
            #expect(generated.count == 36 && results.last?["subscriptionType"] == "database", "\(made.json)")

            // list: in creation order, as created; the same through GET.
            let listed = try await alice.get("private", "subscriptions/list")
            #expect(Self.ids(listed.json) == ["pinned", "work", generated], "\(listed.json)")
            #expect(listed.json["subscriptions"]?.arrayValue?.first == results.first, "\(listed.json)")
            // lookup: the found ones and NOT_FOUND for the others, in request order.
            let looked = try await alice.post("private", "subscriptions/lookup", ["subscriptions": [["subscriptionID": "work"], ["subscriptionID": "nope"]]])
            #expect(looked.json["subscriptions"]?.arrayValue?.first?["subscriptionType"] == "zone", "\(looked.json)")
            #expect(looked.json["subscriptions"]?.arrayValue?.last?.errorCode == "NOT_FOUND"
                    && looked.json["subscriptions"]?.arrayValue?.last?["subscriptionID"] == "nope", "\(looked.json)")

            // Per user and per database: Bob sees none of them, nor does Alice's public database.
            #expect(Self.ids(try await bob.get("private", "subscriptions/list").json).isEmpty)
            #expect(Self.ids(try await alice.get("public", "subscriptions/list").json).isEmpty)
            let publicOne = try await bob.post("public", "subscriptions/modify", ["operations": [Self.create(["subscriptionID": "pinned", "subscriptionType": "query",
                                                                                                             "query": ["recordType": "Users"]])]])
            #expect(publicOne.json["subscriptions"]?.arrayValue?.first?.errorCode == nil, "\(publicOne.json)")

            // update replaces the definition; delete removes it.
            var changed = Self.pinnedNotes
            if case .object(var members) = changed { members["firesOn"] = ["delete"]; members["firesOnce"] = true; changed = .object(members) }
            let updated = try await alice.post("private", "subscriptions/modify", ["operations": [["operationType": "update", "subscription": changed],
                                                                                                 ["operationType": "delete", "subscription": ["subscriptionID": "work"]]]])
            #expect(updated.json["subscriptions"]?.arrayValue?.first?["firesOn"] == ["delete"]
                    && updated.json["subscriptions"]?.arrayValue?.first?["firesOnce"] == true, "\(updated.json)")
            #expect(updated.json["subscriptions"]?.arrayValue?.last == ["subscriptionID": "work", "deleted": true], "\(updated.json)")
            let after = try await alice.get("private", "subscriptions/list")
            #expect(Self.ids(after.json) == ["pinned", generated] && after.json["subscriptions"]?.arrayValue?.first?["firesOn"] == ["delete"], "\(after.json)")

            // The operator's view.
            func cli(_ arguments: [String]) async throws -> Subprocess.Output {
                try await Programs.cli(arguments, server: "http://127.0.0.1:\(harness.client.port ?? 0)", token: Harness.adminToken)
            }
            let table = try await cli(["subscription", "list", "--container", anonymous.container, "--environment", "development"])
            #expect(table.status == 0 && table.text.contains("OWNER") && table.text.contains("Note records (1 filter)")
                    && table.text.contains("delete (once)") && table.text.contains("the whole database"), "\(table.text)")
            #expect(table.text.contains(bob.userRecordName!) && table.text.contains("public"), "\(table.text)")
            let json = try await cli(["subscription", "list", "--container", anonymous.container, "--user", email, "--json"])
            let parsed = try JSONParser.parse(Array(json.text.utf8))
            #expect(Self.ids(parsed) == ["pinned", generated] && parsed["subscriptions"]?.arrayValue?.first?["owner"]?.stringValue == alice.userRecordName,
                    "\(json.text)")
            let none = try await cli(["subscription", "list", "--container", anonymous.container, "--environment", "production"])
            #expect(none.status == 0 && none.text.contains("no subscriptions in production"), "\(none.text)")
            let unknown = try await cli(["subscription", "list", "--container", anonymous.container, "--user", "nobody@example.com"])
            #expect(unknown.status != 0 && unknown.text.contains("no user"), "\(unknown.text)")
        }
    }

    /// A participant subscribes to a zone shared with them, or to their whole shared database;
    /// not to a zone nobody shared with them.
    @Test func sharedDatabaseSubscriptions() async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            let alice = try await anonymous.signedUp()
            let bob = try await anonymous.signedUp()
            let carol = try await anonymous.signedUp()
            #expect(try await alice.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Trip"]]]]]).status == 200)
            let made = try await alice.modify("private", zone: "Trip", [op("create", "plan"), SharingTests.shareOp("share", forRecord: "plan", participants: [SharingTests.participant(bob, "READ_ONLY")])])
            let guid = try #require(made.json.record(1)?["shortGUID"]?.stringValue, "\(made.json)")
            #expect(try await bob.post("public", "records/accept", ["shortGUIDs": [["value": .string(guid)]]]).status == 200)
            let zoneID: JSON = ["zoneName": "Trip", "ownerRecordName": .string(alice.userRecordName!)]

            let bobs = try await bob.post("shared", "subscriptions/modify", ["operations": [
                Self.create(["subscriptionID": "trip", "subscriptionType": "zone", "zoneID": zoneID]),
                Self.create(["subscriptionID": "all", "subscriptionType": "database"]),
            ]])
            #expect(bobs.json["subscriptions"]?.arrayValue?.first?["zoneID"] == zoneID, "\(bobs.json)")
            #expect(Self.ids(try await bob.get("shared", "subscriptions/list").json) == ["trip", "all"])
            let carols = try await carol.post("shared", "subscriptions/modify", ["operations": [Self.create(["subscriptionID": "trip", "subscriptionType": "zone", "zoneID": zoneID])]])
            #expect(carols.json["subscriptions"]?.arrayValue?.first?.errorCode == "ZONE_NOT_FOUND"
                    && carols.json["subscriptions"]?.arrayValue?.first?["subscriptionID"] == "trip", "\(carols.json)")
            #expect(Self.ids(try await carol.get("shared", "subscriptions/list").json).isEmpty)
        }
    }

    @Test func badSubscriptionsAreRefusedAndNothingIsStored() async throws {
        try await Harness.run { harness in
            let schema = "DEFINE SCHEMA\n  RECORD TYPE Note (title STRING QUERYABLE, body STRING, GRANT READ, CREATE, WRITE TO \"_icloud\");\n"
            let production = try await harness.production(schema, prefix: "Subscriptions")
            func first(_ session: Session, _ database: String, _ operation: JSON) async throws -> JSON {
                let answer = try await session.post(database, "subscriptions/modify", ["operations": [operation]])
                #expect(answer.status == 200, "\(answer.json)")
                return answer.json["subscriptions"]?.arrayValue?.first ?? .null
            }
            func query(_ recordType: String, field: String = "title") -> JSON {
                Self.create(["subscriptionID": "s", "subscriptionType": "query",
                             "query": ["recordType": .string(recordType), "filterBy": [["fieldName": .string(field), "comparator": "EQUALS", "fieldValue": ["value": "x"]]]]])
            }
            // Production: only deployed types, and only indexed fields.
            let unknownType = try await first(production, "private", query("Memo"))
            #expect(unknownType.errorCode == "BAD_REQUEST" && unknownType["reason"]?.stringValue?.contains("not in the production schema") == true, "\(unknownType)")
            let notQueryable = try await first(production, "private", query("Note", field: "body"))
            #expect(notQueryable.errorCode == "BAD_REQUEST" && notQueryable["reason"]?.stringValue?.contains("QUERYABLE") == true, "\(notQueryable)")
            #expect(try await first(production, "private", query("Note"))["subscriptionID"] == "s")
            let duplicate = try await first(production, "private", query("Note"))
            #expect(duplicate.errorCode == "EXISTS" && duplicate["subscriptionID"] == "s", "\(duplicate)")

            let user = try await harness.container().signedUp()
            let cases: [(String, String, JSON, String, String)] = [
                ("no type", "private", Self.create(["subscriptionID": "a"]), "BAD_REQUEST", "subscriptionType is required"),
                ("unknown type", "private", Self.create(["subscriptionType": "record"]), "BAD_REQUEST", "\"query\", \"zone\" or \"database\""),
                ("zone in public", "public", Self.create(["subscriptionType": "zone", "zoneID": ["zoneName": "_defaultZone"]]), "BAD_REQUEST", "query subscriptions only"),
                ("database in public", "public", Self.create(["subscriptionType": "database"]), "BAD_REQUEST", "query subscriptions only"),
                ("query in shared", "shared", Self.create(["subscriptionType": "query", "query": ["recordType": "Users"]]), "BAD_REQUEST", "zone and database subscriptions"),
                ("no query", "private", Self.create(["subscriptionType": "query"]), "BAD_REQUEST", "query is required"),
                ("bad firesOn", "private", Self.create(["subscriptionType": "query", "query": ["recordType": "Users"], "firesOn": ["change"]]), "BAD_REQUEST", "'change'"),
                ("empty firesOn", "private", Self.create(["subscriptionType": "query", "query": ["recordType": "Users"], "firesOn": []]), "BAD_REQUEST", "non-empty"),
                ("bad notificationInfo", "private", Self.create(["subscriptionType": "database", "notificationInfo": ["alertTitle": "x"]]), "BAD_REQUEST", "unknown key 'alertTitle'"),
                ("missing zone", "private", Self.create(["subscriptionType": "zone", "zoneID": ["zoneName": "Nowhere"]]), "ZONE_NOT_FOUND", "create it first"),
                ("no zoneID", "private", Self.create(["subscriptionType": "zone"]), "BAD_REQUEST", "zoneID is required"),
                ("NUL in ID", "private", Self.create(["subscriptionID": "a\u{0}b", "subscriptionType": "database"]), "BAD_REQUEST", "printable"),
                ("long ID", "private", Self.create(["subscriptionID": .string(String(repeating: "x", count: 256)), "subscriptionType": "database"]), "BAD_REQUEST", "1-255 bytes"),
                ("update missing", "private", ["operationType": "update", "subscription": ["subscriptionID": "gone", "subscriptionType": "database"]], "NOT_FOUND", "no subscription"),
                ("delete missing", "private", ["operationType": "delete", "subscription": ["subscriptionID": "gone"]], "NOT_FOUND", "no subscription"),
                ("unknown zone owner", "shared", Self.create(["subscriptionType": "zone", "zoneID": ["zoneName": "Z", "ownerRecordName": "_0123456789abcdef0123456789abcdef"]]), "ZONE_NOT_FOUND", "not shared with you"),
            ]
            for (name, database, operation, code, reason) in cases {
                let answer = try await first(user, database, operation)
                #expect(answer.errorCode == code && answer["reason"]?.stringValue?.contains(reason) == true, "\(name): \(answer)")
            }
            for database in ["public", "private", "shared"] {
                #expect(Self.ids(try await user.get(database, "subscriptions/list").json).isEmpty, "\(database) kept a refused subscription")
            }

            // Whole-request mistakes.
            let notArray = try await user.post("private", "subscriptions/modify", ["operations": "x"])
            #expect(notArray.status == 400 && notArray.json.errorCode == "BAD_REQUEST", "\(notArray.json)")
            let badOperation = try await user.post("private", "subscriptions/modify", ["operations": [["operationType": "replace", "subscription": ["subscriptionType": "database"]]]])
            #expect(badOperation.status == 400 && badOperation.json["reason"]?.stringValue?.contains("'create', 'update' or 'delete'") == true, "\(badOperation.json)")
            let tooMany = try await user.post("private", "subscriptions/modify", ["operations": .array(Array(repeating: Self.create(["subscriptionType": "database"]), count: 201))])
            #expect(tooMany.status == 400, "\(tooMany.json)")
            let badLookup = try await user.post("private", "subscriptions/lookup", ["subscriptions": [["id": "x"]]])
            #expect(badLookup.status == 400 && badLookup.json["reason"]?.stringValue?.contains("subscriptionID") == true, "\(badLookup.json)")
            // No user: sign in first.
            let anonymous = Session(harness: harness, container: user.container, environment: .development, apiToken: user.apiToken)
            let signIn = try await anonymous.post("public", "subscriptions/modify", ["operations": [query("Users")]])
            #expect(signIn.status == 421 && signIn.json.errorCode == "AUTHENTICATION_REQUIRED" && signIn.json["redirectURL"] != nil, "\(signIn.json)")
            #expect(try await anonymous.get("private", "subscriptions/list").status == 421)
        }
    }

    /// A user has at most 1,000 subscriptions in a database; the next is QUOTA_EXCEEDED.
    @Test func subscriptionsPerDatabaseAreBounded() async throws {
        try await Harness.run { harness in
            let user = try await harness.container().signedUp()
            for batch in 0..<5 {
                let operations: [JSON] = (0..<200).map { ["operationType": "create", "subscription": ["subscriptionID": .string("s\(batch)-\($0)"), "subscriptionType": "database"]] }
                let made = try await user.post("private", "subscriptions/modify", ["operations": .array(operations)])
                #expect(made.json["subscriptions"]?.arrayValue?.allSatisfy { $0.errorCode == nil } == true, "batch \(batch)")
            }
            let next = try await user.post("private", "subscriptions/modify", ["operations": [["operationType": "create", "subscription": ["subscriptionID": "one-more", "subscriptionType": "database"]]]])
            #expect(next.json["subscriptions"]?.arrayValue?.first?.errorCode == "QUOTA_EXCEEDED", "\(next.json)")
            // Another database of the same user is counted apart.
            let elsewhere = try await user.post("shared", "subscriptions/modify", ["operations": [["operationType": "create", "subscription": ["subscriptionID": "one-more", "subscriptionType": "database"]]]])
            #expect(elsewhere.json["subscriptions"]?.arrayValue?.first?.errorCode == nil, "\(elsewhere.json)")
        }
    }
}

import Foundation
import PostgresNIO
import StratusCore
@testable import StratusServer
@testable import StratusStore
@testable import StratusTestSupport
import Testing

/// Security roles guard the public database (DESIGN, security roles): a record type's grants say
/// which of `_world` (any API token), `_icloud` (any signed-in user) and `_creator` (the user who
/// created the record) may CREATE, READ and WRITE its records. Through the HTTP API on real
/// PostgreSQL, with two users and an anonymous caller of one container.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct SecurityRoleTests {
    /// A note's fields: one title.
    static func titled(_ title: String) -> [String: JSON] { ["title": ["value": .string(title)]] }

    /// CloudKit's default grants (`_creator` WRITE, `_icloud` CREATE, `_world` READ), which a type
    /// made just-in-time gets: every signed-in user may add records and anyone may read them, but
    /// only its creator may change or delete one.
    @Test func defaultGrantsLetOnlyTheCreatorChangeAPublicRecord() async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            let alice = try await anonymous.signedUp()
            let bob = try await anonymous.signedUp()
            let created = try await alice.modify("public", [op("create", "n1", fields: Self.titled("alice's"))])
            let tag = try #require(created.json.record(0)?["recordChangeTag"]?.stringValue, "\(created.json)")

            for (type, recordTag) in [("update", tag), ("forceUpdate", nil), ("replace", tag), ("delete", tag), ("forceDelete", nil)] {
                let attempt = try await bob.modify("public", [op(type, "n1", tag: recordTag, fields: type.contains("elete") ? [:] : Self.titled("bob's"))])
                #expect(attempt.status == 200, "\(type): \(attempt.json)")
                #expect(attempt.json.record(0)?.errorCode == "ACCESS_DENIED", "\(type): \(attempt.json)")
                #expect(attempt.json.record(0)?["reason"]?.stringValue?.contains("_creator") == true, "\(type): \(attempt.json)")
            }
            // Nothing of Bob's reached the record, and anyone may still read it (`_world` READ).
            let read = try await anonymous.post("public", "records/lookup", ["records": [["recordName": "n1"]]])
            #expect(read.json.record(0)?["fields"]?["title"]?["value"] == "alice's", "\(read.json)")
            #expect(read.json.record(0)?["recordChangeTag"]?.stringValue == tag, "\(read.json)")

            // Bob may add records of his own (`_icloud` CREATE) and change them.
            let own = try await bob.modify("public", [op("create", "n2", fields: Self.titled("bob's"))])
            let ownTag = try #require(own.json.record(0)?["recordChangeTag"]?.stringValue, "\(own.json)")
            let changedOwn = try await bob.modify("public", [op("update", "n2", tag: ownTag, fields: Self.titled("bob's, changed"))])
            #expect(changedOwn.json.record(0)?["fields"]?["title"]?["value"] == "bob's, changed", "\(changedOwn.json)")
            // Creating a name that exists is EXISTS, with the stored record: Bob may read it.
            let taken = try await bob.modify("public", [op("create", "n1", fields: Self.titled("bob's"))])
            #expect(taken.json.record(0)?.errorCode == "EXISTS", "\(taken.json)")
            #expect(taken.json.record(0)?["serverRecord"]?["recordName"] == "n1", "\(taken.json)")

            // The creator may change and delete it.
            let changed = try await alice.modify("public", [op("update", "n1", tag: tag, fields: Self.titled("alice's, changed"))])
            let changedTag = try #require(changed.json.record(0)?["recordChangeTag"]?.stringValue, "\(changed.json)")
            let deleted = try await alice.modify("public", [op("delete", "n1", tag: changedTag)])
            #expect(deleted.json.record(0)?["deleted"] == true, "\(deleted.json)")

            // Roles do not apply to a private database: it is its owner's alone.
            let privateSave = try await bob.modify("private", [op("create", "p1", fields: Self.titled("mine"))])
            #expect(privateSave.json.record(0)?["recordChangeTag"] != nil, "\(privateSave.json)")
        }
    }

    /// Grants imported with the schema: a diary readable and writable only by its creator, a
    /// notice type nobody may create, and a type with no grants at all.
    @Test func schemaGrantsDecideWhoMayReadAndCreate() async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            let schema = """
                DEFINE SCHEMA
                  RECORD TYPE Diary ("___recordID" REFERENCE QUERYABLE, title STRING QUERYABLE, GRANT READ, WRITE TO "_creator", GRANT CREATE TO "_icloud");
                  RECORD TYPE Notice (title STRING QUERYABLE, GRANT READ TO "_world");
                  RECORD TYPE Sealed (title STRING QUERYABLE);
                """
            let imported = try await harness.admin(.post, "containers/\(anonymous.container)/schema/import", json: ["schema": .string(schema)])
            #expect(imported.status == 200, "\(imported.json)")
            // The import warns about the type no role may use, and only about it.
            #expect(imported.json["warnings"]?.arrayValue?.count == 1, "\(imported.json)")
            #expect(imported.json["planText"]?.stringValue?.contains("warning: record type Sealed has no GRANT") == true, "\(imported.json)")
            let diff = try await harness.admin(.get, "containers/\(anonymous.container)/schema/diff")
            #expect(diff.json["planText"]?.stringValue?.contains("warning: record type Sealed has no GRANT") == true, "\(diff.json)")
            let alice = try await anonymous.signedUp()
            let bob = try await anonymous.signedUp()
            let aliceSave = try await alice.modify("public", [op("create", "d-alice", type: "Diary", fields: Self.titled("today"))])
            #expect(aliceSave.json.record(0)?["recordChangeTag"] != nil, "\(aliceSave.json)")
            let bobSave = try await bob.modify("public", [op("create", "d-bob", type: "Diary", fields: Self.titled("today"))])
            #expect(bobSave.json.record(0)?["recordChangeTag"] != nil, "\(bobSave.json)")

            // Lookups: each user reads their own diary only.
            let lookup = try await bob.post("public", "records/lookup", ["records": [["recordName": "d-alice"], ["recordName": "d-bob"]]])
            #expect(lookup.json.record(0)?.errorCode == "ACCESS_DENIED", "\(lookup.json)")
            #expect(lookup.json.record(0)?["fields"] == nil, "\(lookup.json)")
            #expect(lookup.json.record(1)?["fields"]?["title"]?["value"] == "today", "\(lookup.json)")
            // Bob may create diaries, but a name taken by Alice's is EXISTS without her record.
            let taken = try await bob.modify("public", [op("create", "d-alice", type: "Diary", fields: Self.titled("mine"))])
            #expect(taken.json.record(0)?.errorCode == "EXISTS", "\(taken.json)")
            #expect(taken.json.record(0)?["serverRecord"] == nil, "\(taken.json)")
            let anonymousLookup = try await anonymous.post("public", "records/lookup", ["records": [["recordName": "d-alice"]]])
            #expect(anonymousLookup.json.record(0)?.errorCode == "ACCESS_DENIED", "\(anonymousLookup.json)")

            // Queries: the same filter finds only the caller's own diary.
            let query: JSON = ["query": ["recordType": "Diary", "filterBy": [["fieldName": "title", "comparator": "EQUALS", "fieldValue": ["value": "today"]]]]]
            for (user, own) in [(alice, "d-alice"), (bob, "d-bob")] {
                let found = try await user.post("public", "records/query", query)
                #expect(found.status == 200, "\(found.json)")
                #expect(found.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } == [own], "\(found.json)")
            }
            // A marker of a query narrowed to Alice's diaries is hers: Bob cannot page on with it.
            let second = try await alice.modify("public", [op("create", "d-alice-2", type: "Diary", fields: Self.titled("today"))])
            #expect(second.json.record(0)?["recordChangeTag"] != nil, "\(second.json)")
            let diaryQuery = try #require(query["query"])
            let page = try await alice.post("public", "records/query", ["query": diaryQuery, "resultsLimit": 1])
            let marker = try #require(page.json["continuationMarker"]?.stringValue, "\(page.json)")
            let nextPage: JSON = ["query": diaryQuery, "continuationMarker": .string(marker)]
            let borrowed = try await bob.post("public", "records/query", nextPage)
            #expect(borrowed.status == 400, "\(borrowed.json)")
            let own = try await alice.post("public", "records/query", nextPage)
            #expect(own.status == 200 && own.json["records"]?.arrayValue?.count == 1, "\(own.json)")
            // Signing in would let an anonymous caller read diaries (their own): sign in first.
            let anonymousQuery = try await anonymous.post("public", "records/query", query)
            #expect(anonymousQuery.status == 421, "\(anonymousQuery.json)")
            #expect(anonymousQuery.json.errorCode == "AUTHENTICATION_REQUIRED", "\(anonymousQuery.json)")

            // The public change feed leaves out what the caller may not read.
            let feed = try await bob.post("public", "changes/zone", ["zones": [["zoneID": ["zoneName": "_defaultZone"]]]])
            let names = feed.json["zones"]?.arrayValue?.first?["records"]?.arrayValue?.filter { $0["recordType"] != "Users" }.compactMap { $0["recordName"]?.stringValue }
            #expect(names == ["d-bob"], "\(feed.json)")

            // No role may create a notice; a type without grants is closed, and says how to open it.
            let notice = try await alice.modify("public", [op("create", "notice-1", type: "Notice", fields: Self.titled("hello"))])
            #expect(notice.json.record(0)?.errorCode == "ACCESS_DENIED", "\(notice.json)")
            #expect(notice.json.record(0)?["reason"]?.stringValue?.contains("CREATE to no role") == true, "\(notice.json)")
            let sealed = try await alice.modify("public", [op("create", "sealed-1", type: "Sealed", fields: Self.titled("hello"))])
            #expect(sealed.json.record(0)?["reason"]?.stringValue?.contains("no GRANT") == true, "\(sealed.json)")
            let sealedQuery = try await alice.post("public", "records/query", ["query": ["recordType": "Sealed",
                "filterBy": [["fieldName": "title", "comparator": "EQUALS", "fieldValue": ["value": "hello"]]]]])
            #expect(sealedQuery.status == 403, "\(sealedQuery.json)")
            #expect(sealedQuery.json.errorCode == "ACCESS_DENIED", "\(sealedQuery.json)")
            // Refused writes left nothing behind.
            let none = try await alice.post("public", "records/lookup", ["records": [["recordName": "notice-1"], ["recordName": "sealed-1"]]])
            #expect(none.json.record(0)?.errorCode == "NOT_FOUND" && none.json.record(1)?.errorCode == "NOT_FOUND", "\(none.json)")
        }
    }

    /// A grant taken away by another server process on the same database (here: straight in the
    /// tables) holds in this one once a refused write has made it read the schema again.
    @Test func aRefusedWriteRefreshesTheGrantsOtherProcessesChanged() async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            let schema = """
                DEFINE SCHEMA
                  RECORD TYPE Notice (title STRING QUERYABLE, GRANT CREATE TO "_icloud", GRANT READ TO "_world");
                  RECORD TYPE Sealed (title STRING QUERYABLE);
                """
            #expect(try await harness.admin(.post, "containers/\(anonymous.container)/schema/import", json: ["schema": .string(schema)]).status == 200)
            let alice = try await anonymous.signedUp()
            let saved = try await alice.modify("public", [op("create", "n1", type: "Notice", fields: Self.titled("hello"))])
            #expect(saved.json.record(0)?["recordChangeTag"] != nil, "\(saved.json)")
            #expect(try await anonymous.post("public", "records/lookup", ["records": [["recordName": "n1"]]]).json.record(0)?["fields"] != nil)
            try await harness.database.withConnection { connection in
                try await connection.statement("""
                    DELETE FROM schema_grants WHERE role = '_world' AND record_type = 'Notice'
                      AND container_id = (SELECT container_id FROM containers WHERE name = \(anonymous.container))
                    """, logger: TestCluster.logger)
            }
            let refused = try await alice.modify("public", [op("create", "s1", type: "Sealed", fields: Self.titled("hello"))])
            #expect(refused.json.record(0)?.errorCode == "ACCESS_DENIED", "\(refused.json)")
            let after = try await anonymous.post("public", "records/lookup", ["records": [["recordName": "n1"]]])
            #expect(after.json.record(0)?.errorCode == "ACCESS_DENIED", "\(after.json)")
        }
    }
}

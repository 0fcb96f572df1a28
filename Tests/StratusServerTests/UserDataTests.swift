import Foundation
@testable import StratusCore
@testable import StratusTestSupport
import Testing

/// A user's data rights (issue 28): `export` gives everything they own as JSON; `erase` removes
/// it, their share participations and their account, leaves tombstones where others sync, and is
/// audited.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct UserDataTests {
    @Test func exportGivesEverythingAUserOwnsAndEraseRemovesIt() async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            let alice = try await anonymous.signedUp()
            let bob = try await anonymous.signedUp()
            let (aliceName, bobName) = (try #require(alice.userRecordName), try #require(bob.userRecordName))
            // Alice: a custom zone shared with Bob, a record in her default zone, a public record, a subscription.
            #expect(try await alice.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Lists"]]]]]).status == 200)
            let root = try await alice.modify("private", zone: "Lists", [SharingTests.op("create", "list-1", fields: ["title": ["value": "Groceries"]], ["createShortGUID": true])])
            let guid = try #require(root.json.record(0)?["shortGUID"]?.stringValue, "\(root.json)")
            let shared = try await alice.modify("private", zone: "Lists", [
                SharingTests.shareOp("share-1", forRecord: "list-1", rootTag: root.json.record(0)?["recordChangeTag"]?.stringValue,
                                     participants: [SharingTests.participant(bob, "READ_ONLY")]),
            ])
            #expect(shared.json.record(0)?["serverErrorCode"] == nil, "\(shared.json)")
            #expect(try await bob.post("public", "records/accept", ["shortGUIDs": [["value": .string(guid)]]]).status == 200)
            #expect(try await alice.modify("private", [op("create", "d1", fields: ["title": ["value": "mine"]])]).status == 200)
            #expect(try await alice.modify("public", [op("create", "pub-a", fields: ["title": ["value": "hers"]])]).status == 200)
            #expect(try await bob.modify("public", [op("create", "pub-b", fields: ["title": ["value": "his"]])]).status == 200)
            #expect(try await alice.post("private", "subscriptions/modify", ["operations": [
                ["operationType": "create", "subscription": ["subscriptionID": "all", "subscriptionType": "database"]]]]).status == 200)

            // Alice's export: her zones with their records, her public records, her subscription.
            let exported = try await harness.admin(.get, "containers/\(alice.container)/users/\(aliceName)/export")
            #expect(exported.status == 200, "\(exported.json)")
            #expect(exported.json["user"]?["userRecordName"]?.stringValue == aliceName)
            let development = try #require(exported.json["environments"]?.arrayValue?.first { $0["environment"] == "development" })
            let zones = development["privateZones"]?.arrayValue ?? []
            let lists = zones.first { $0["zoneName"] == "Lists" }?["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue }
            #expect(Set(lists ?? []) == ["list-1", "share-1"], "\(zones)")
            #expect(zones.first { $0["zoneName"] == "_defaultZone" }?["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } == ["d1"], "\(zones)")
            #expect(development["publicRecords"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue }.contains("pub-a") == true, "\(development)")
            #expect(development["publicRecords"]?.arrayValue?.contains { $0["recordName"] == "pub-b" } == false, "Bob's record in Alice's export")
            #expect(development["subscriptions"]?.arrayValue?.first?["subscriptionID"] == "all", "\(development)")
            // Bob's: his participation in Alice's share.
            let bobs = try await harness.admin(.get, "containers/\(alice.container)/users/\(bobName)/export")
            let bobDevelopment = bobs.json["environments"]?.arrayValue?.first { $0["environment"] == "development" }
            #expect(bobDevelopment?["shareParticipations"]?.arrayValue?.first?["zoneID"]?["ownerRecordName"]?.stringValue == aliceName, "\(bobs.json)")

            // Erasing needs the confirmation; then Bob is gone: data, participation, sessions, account.
            let unconfirmed = try await harness.admin(.post, "containers/\(alice.container)/users/\(bobName)/erase", json: [:])
            #expect(unconfirmed.status == 400 && unconfirmed.json["reason"]?.stringValue?.contains("confirm") == true, "\(unconfirmed.json)")
            let erased = try await harness.admin(.post, "containers/\(alice.container)/users/\(bobName)/erase", json: ["confirm": .string(bobName)])
            #expect(erased.status == 200 && erased.json["erased"]?["shareParticipations"] == 1, "\(erased.json)")
            #expect(try await bob.get("public", "users/caller").status == 401, "the erased user's session still works")
            let participants = try await alice.post("private", "records/lookup", ["zoneID": ["zoneName": "Lists"], "records": [["recordName": "share-1"]]])
            #expect(participants.json.record(0)?["participants"]?.arrayValue?.contains { $0["userIdentity"]?["userRecordName"]?.stringValue == bobName } == false,
                    "the share still lists the erased user: \(participants.json)")
            let gone = try await alice.post("public", "records/lookup", ["records": [["recordName": "pub-b"]]])
            #expect(gone.json.record(0)?["serverErrorCode"] == "NOT_FOUND", "\(gone.json)")
            #expect(try await harness.admin(.get, "containers/\(alice.container)/users/\(bobName)/export").status == 404)
            let audit = try await harness.admin(.get, "containers/\(alice.container)/audit")
            #expect(audit.json["entries"]?.arrayValue?.contains { $0["action"] == "user.erase" && $0["target"]?.stringValue == bobName } == true, "\(audit.json)")

            // Alice erased: her zones go from her database feed as deletions; her public record as a tombstone.
            let aliceErased = try await harness.admin(.post, "containers/\(alice.container)/users/\(aliceName)/erase", json: ["confirm": .string(aliceName)])
            #expect(aliceErased.json["erased"]?["privateZones"] == 2 && aliceErased.json["erased"]?["privateRecords"] == 3, "\(aliceErased.json)")
            #expect((try await harness.admin(.get, "containers/\(alice.container)/users?environment=development")).json["users"]?.arrayValue?.isEmpty == true)
        }
    }
}

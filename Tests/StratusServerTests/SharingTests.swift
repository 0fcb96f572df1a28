import Foundation
import StratusCore
@testable import StratusServer
import Testing

/// Sharing (issue 24): shares saved through `records/modify`, `records/resolve` and
/// `records/accept`, hierarchies through `parent`.
@Suite(.timeLimit(.minutes(5))) struct SharingTests {
    /// A `records/modify` operation with extra record keys (parent, share keys…).
    static func op(_ type: String, _ name: String, recordType: String? = "Note", tag: String? = nil, fields: [String: JSON] = [:],
                   _ extra: [String: JSON] = [:]) -> JSON {
        guard case .object(let operation) = StratusServerTests.op(type, name, type: recordType, tag: tag, fields: fields),
              case .object(var record)? = operation["record"] else { return .null }
        record.merge(extra) { $1 }
        return ["operationType": .string(type), "record": .object(record)]
    }

    static func parent(_ name: String) -> [String: JSON] { ["parent": ["recordName": .string(name)]] }

    static func participant(_ session: Session, _ permission: String) -> JSON {
        ["type": "USER", "permission": .string(permission), "acceptanceStatus": "INVITED",
         "userIdentity": ["userRecordName": .string(session.userRecordName ?? "")]]
    }

    static func shareOp(_ name: String, forRecord root: String?, rootTag: String? = nil, participants: [JSON], publicPermission: String = "NONE",
                        type: String = "create", tag: String? = nil) -> JSON {
        var extra: [String: JSON] = ["participants": .array(participants), "publicPermission": .string(publicPermission)]
        if let root {
            var forRecord: [String: JSON] = ["recordName": .string(root)]
            if let rootTag { forRecord["recordChangeTag"] = .string(rootTag) }
            extra["forRecord"] = .object(forRecord)
        }
        return op(type, name, recordType: "cloudkit.share", tag: tag, fields: ["cloudkit.title": ["value": "Groceries"]], extra)
    }

    @Test func ownerSharesAHierarchyAndAParticipantResolvesAndAcceptsIt() async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            let suffix = UInt32.random(in: 0...UInt32.max)
            let alice = try await anonymous.signedUp()
            let bob = try await anonymous.signedUp("bob\(suffix)@example.com")
            let carol = try await anonymous.signedUp()
            #expect(try await alice.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Lists"]]]]]).status == 200)
            let saved = try await alice.modify("private", zone: "Lists", [
                Self.op("create", "list-1", fields: ["title": ["value": "Groceries"]], ["createShortGUID": true]),
                Self.op("create", "item-1", fields: ["title": ["value": "Milk"]], Self.parent("list-1")),
                Self.op("create", "item-2", fields: ["title": ["value": "Eggs"]], Self.parent("item-1")),
            ])
            #expect(saved.json.record(1)?["parent"] == ["recordName": "list-1"], "\(saved.json)")
            let rootGUID = try #require(saved.json.record(0)?["shortGUID"]?.stringValue, "\(saved.json)")
            let rootTag = try #require(saved.json.record(0)?["recordChangeTag"]?.stringValue)

            // Bob by email, Carol by name.
            let byEmail: JSON = ["permission": "READ_ONLY", "userIdentity": ["lookupInfo": ["emailAddress": .string("BOB\(suffix)@example.com")]]]
            let shared = try await alice.modify("private", zone: "Lists", [
                Self.shareOp("share-1", forRecord: "list-1", rootTag: rootTag, participants: [byEmail, Self.participant(carol, "READ_WRITE")]),
            ])
            let share = try #require(shared.json.record(0), "\(shared.json)")
            #expect(share["recordType"] == "cloudkit.share", "\(shared.json)")
            #expect(share["shortGUID"]?.stringValue == rootGUID, "the share takes its root's short GUID: \(share)")
            #expect(share["publicPermission"] == "NONE")
            #expect(share["url"]?.stringValue?.hasSuffix("/share/\(rootGUID)") == true, "\(share)")
            let participants = share["participants"]?.arrayValue ?? []
            #expect(participants.count == 3, "owner, bob, carol: \(share)")
            #expect(participants.first?["type"] == "OWNER")
            let bobEntry = participants.first { $0["userIdentity"]?["userRecordName"]?.stringValue == bob.userRecordName }
            #expect(bobEntry?["acceptanceStatus"] == "INVITED" && bobEntry?["permission"] == "READ_ONLY", "\(participants)")
            #expect(bobEntry?["userIdentity"]?["lookupInfo"]?["emailAddress"]?.stringValue == "bob\(suffix)@example.com", "the owner sees addresses")
            #expect(share["currentUserParticipant"]?["type"] == "OWNER")

            // The root now names its share (and its tag moved).
            let root = try await alice.post("private", "records/lookup", ["zoneID": ["zoneName": "Lists"], "records": [["recordName": "list-1"]]])
            #expect(root.json.record(0)?["share"] == ["recordName": "share-1"], "\(root.json)")
            #expect(root.json.record(0)?["recordChangeTag"]?.stringValue != rootTag)

            // Bob resolves the GUID and sees the share, its root and his standing.
            let resolved = try await bob.post("public", "records/resolve", ["shortGUIDs": [["value": .string(rootGUID), "shouldFetchRootRecord": true]]])
            let metadata = try #require(resolved.json["results"]?.arrayValue?.first, "\(resolved.json)")
            #expect(metadata["zoneID"] == ["zoneName": "Lists", "ownerRecordName": .string(alice.userRecordName!)], "\(metadata)")
            #expect(metadata["rootRecordName"] == "list-1" && metadata["rootRecord"]?["fields"]?["title"]?["value"] == "Groceries", "\(metadata)")
            #expect(metadata["participantStatus"] == "INVITED" && metadata["participantPermission"] == "READ_ONLY" && metadata["databaseScope"] == "SHARED")
            #expect(metadata["share"]?["recordName"] == "share-1", "\(metadata)")
            #expect(metadata["share"]?["currentUserParticipant"]?["userIdentity"]?["userRecordName"]?.stringValue == bob.userRecordName)
            let carolsEntry = metadata["share"]?["participants"]?.arrayValue?.first { $0["userIdentity"]?["userRecordName"]?.stringValue == carol.userRecordName }
            #expect(carolsEntry != nil && carolsEntry?["userIdentity"]?["lookupInfo"]?["emailAddress"] == nil, "no one else's address: \(metadata)")

            // Accepting makes him ACCEPTED; twice is refused; strangers are refused.
            let accepted = try await bob.post("public", "records/accept", ["shortGUIDs": [["value": .string(rootGUID)]]])
            #expect(accepted.json["results"]?.arrayValue?.first?["participantStatus"] == "ACCEPTED", "\(accepted.json)")
            let again = try await bob.post("public", "records/accept", ["shortGUIDs": [["value": .string(rootGUID)]]])
            #expect(again.json["results"]?.arrayValue?.first?.errorCode == "BAD_REQUEST", "\(again.json)")
            let dave = try await anonymous.signedUp()
            for verb in ["records/resolve", "records/accept"] {
                let refused = try await dave.post("public", verb, ["shortGUIDs": [["value": .string(rootGUID)]]])
                #expect(refused.json["results"]?.arrayValue?.first?.errorCode == "ACCESS_DENIED", "\(verb): \(refused.json)")
            }
            let unknown = try await bob.post("public", "records/resolve", ["shortGUIDs": [["value": "0000000000000000000000000"]]])
            #expect(unknown.json["results"]?.arrayValue?.first?.errorCode == "NOT_FOUND", "\(unknown.json)")

            // Bob's shared database now has Alice's zone, and the hierarchy in it.
            let zoneID: JSON = ["zoneName": "Lists", "ownerRecordName": .string(alice.userRecordName!)]
            let zones = try await bob.get("shared", "zones/list")
            #expect(zones.json["zones"] == [["zoneID": zoneID, "atomic": true]], "\(zones.json)")
            let lookup = try await bob.post("shared", "records/lookup", ["zoneID": zoneID, "records": [["recordName": "item-2"], ["recordName": "share-1"]]])
            #expect(lookup.json.record(0)?["fields"]?["title"]?["value"] == "Eggs", "\(lookup.json)")
            #expect(lookup.json.record(1)?["participants"] != nil, "participants read the share: \(lookup.json)")
            let query = try await bob.post("shared", "records/query", ["zoneID": zoneID, "query": ["recordType": "Note"]])
            #expect(Set(query.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? []) == ["list-1", "item-1", "item-2"], "\(query.json)")
            // READ_ONLY: no writes. Carol (READ_WRITE, once she accepts) writes under the root, as herself, into Alice's zone.
            let denied = try await bob.post("shared", "records/modify", ["zoneID": zoneID, "operations": [Self.op("create", "item-3", Self.parent("list-1"))]])
            #expect(denied.json.record(0)?.errorCode == "ACCESS_DENIED", "\(denied.json)")
            #expect(try await carol.post("public", "records/accept", ["shortGUIDs": [["value": .string(rootGUID)]]]).json["results"]?.arrayValue?.first?["participantStatus"] == "ACCEPTED")
            let written = try await carol.post("shared", "records/modify", ["zoneID": zoneID, "operations": [Self.op("create", "item-3", fields: ["title": ["value": "Bread"]], Self.parent("list-1"))]])
            #expect(written.json.record(0)?["created"]?["userRecordName"]?.stringValue == carol.userRecordName, "\(written.json)")
            let ownerView = try await alice.post("private", "records/lookup", ["zoneID": ["zoneName": "Lists"], "records": [["recordName": "item-3"]]])
            #expect(ownerView.json.record(0)?["fields"]?["title"]?["value"] == "Bread", "\(ownerView.json)")
            let orphan = try await carol.post("shared", "records/modify", ["zoneID": zoneID, "operations": [Self.op("create", "loose")]])
            #expect(orphan.json.record(0)?.errorCode == "ACCESS_DENIED", "a record outside the hierarchy: \(orphan.json)")
            let feed = try await bob.post("shared", "changes/zone", ["zones": [["zoneID": zoneID]]])
            let fed = feed.json["zones"]?.arrayValue?.first?["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? []
            #expect(Set(fed) == ["list-1", "item-1", "item-2", "item-3", "share-1"], "\(feed.json)")
        }
    }
}

import Foundation
import StratusCore
@testable import StratusServer
@testable import StratusStore
@testable import StratusTestSupport
import Testing

/// Sharing (issue 24): shares saved through `records/modify`, `records/resolve` and
/// `records/accept`, hierarchies through `parent`.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct SharingTests {
    /// A `records/modify` operation with extra record keys (parent, share keys…).
    static func op(_ type: String, _ name: String, recordType: String? = "Note", tag: String? = nil, fields: [String: JSON] = [:],
                   _ extra: [String: JSON] = [:]) -> JSON {
        guard case .object(let operation) = StratusTestSupport.op(type, name, type: recordType, tag: tag, fields: fields),
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

extension SharingTests {
    /// A sync client's copy of its shared database: zone → record name → record.
    struct Replica {
        var databaseToken: String?
        var zoneTokens: [String: String] = [:]
        var zones: [String: [String: JSON]] = [:]

        /// Syncs as CloudKit clients do: `changes/database`, then `changes/zone` for each zone it
        /// names, every page; a deleted zone is dropped with its records.
        mutating func sync(_ session: Session, database: String = "shared") async throws {
            var more = true
            while more {
                var body: [String: JSON] = [:]
                if let databaseToken { body["syncToken"] = .string(databaseToken) }
                let changes = try await session.post(database, "changes/database", .object(body))
                #expect(changes.status == 200, "\(changes.json)")
                databaseToken = changes.json["syncToken"]?.stringValue
                more = changes.json["moreComing"] == true
                for zone in changes.json["zones"]?.arrayValue ?? [] {
                    let zoneID = zone["zoneID"] ?? .null
                    let key = "\(zoneID["ownerRecordName"]?.stringValue ?? "")/\(zoneID["zoneName"]?.stringValue ?? "")"
                    if zone["deleted"] == true {
                        zones[key] = nil
                        zoneTokens[key] = nil
                        continue
                    }
                    var zoneMore = true
                    while zoneMore {
                        var request: [String: JSON] = ["zoneID": zoneID]
                        if let token = zoneTokens[key] { request["syncToken"] = .string(token) }
                        let page = try await session.post(database, "changes/zone", ["zones": [.object(request)], "resultsLimit": 3])
                        let result = page.json["zones"]?.arrayValue?.first ?? .null
                        #expect(result.errorCode == nil, "\(result)")
                        zoneTokens[key] = result["syncToken"]?.stringValue
                        zoneMore = result["moreComing"] == true
                        for record in result["records"]?.arrayValue ?? [] {
                            guard let name = record["recordName"]?.stringValue else { continue }
                            if record["deleted"] == true { zones[key, default: [:]][name] = nil } else { zones[key, default: [:]][name] = record }
                        }
                    }
                }
            }
        }
    }

    /// The records below `root` (itself included) in the owner's copy, following live parents.
    static func hierarchy(of root: String, in records: [String: JSON]) -> Set<String> {
        records.keys.filter { name in
            var current: String? = name
            var steps = 0
            while let step = current, steps < 100 {
                if step == root { return true }
                current = records[step]?["parent"]?["recordName"]?.stringValue
                steps += 1
            }
            return false
        }.reduce(into: Set<String>()) { $0.insert($1) }
    }

    @Test func aParticipantSyncingThroughTheChangeFeedsEndsWithExactlyWhatIsShared() async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            let alice = try await anonymous.signedUp()
            let bob = try await anonymous.signedUp()
            #expect(try await alice.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Trip"]]]]]).status == 200)
            func save(_ operations: [JSON]) async throws {
                let saved = try await alice.modify("private", zone: "Trip", atomic: true, operations)
                #expect(saved.json["records"]?.arrayValue?.allSatisfy { $0.errorCode == nil } == true, "\(saved.json)")
            }
            func title(_ text: String) -> [String: JSON] { ["title": ["value": .string(text)]] }
            try await save([
                Self.op("create", "root", fields: title("Trip")),
                Self.op("create", "a", fields: title("A"), Self.parent("root")),
                Self.op("create", "b", fields: title("B"), Self.parent("a")),
                Self.op("create", "b1", fields: title("B1"), Self.parent("b")),
                Self.op("create", "c", fields: title("C"), Self.parent("root")),
                Self.op("create", "x", fields: title("X")),
                Self.op("create", "y", fields: title("Y"), Self.parent("x")),
                Self.op("create", "y1", fields: title("Y1"), Self.parent("y")),
                Self.shareOp("share", forRecord: "root", participants: [Self.participant(bob, "READ_WRITE")]),
            ])
            let guid = try #require(try await alice.post("private", "records/lookup", ["zoneID": ["zoneName": "Trip"], "records": [["recordName": "share"]]]).json.record(0)?["shortGUID"]?.stringValue)
            #expect(try await bob.post("public", "records/accept", ["shortGUIDs": [["value": .string(guid)]]]).json["results"]?.arrayValue?.first?["participantStatus"] == "ACCEPTED")

            var owner = Replica()
            var replica = Replica()
            let key = "\(alice.userRecordName!)/Trip"
            func check(_ step: String) async throws {
                try await owner.sync(alice, database: "private")
                try await replica.sync(bob)
                let all = owner.zones["\(alice.userRecordName!)/Trip"] ?? [:]
                var expected = Self.hierarchy(of: "root", in: all)
                if all["root"] != nil, all["share"] != nil { expected.insert("share") }
                let got = replica.zones[key] ?? [:]
                #expect(Set(got.keys) == expected, "\(step): the participant has \(got.keys.sorted()), the owner shares \(expected.sorted())")
                for name in expected where got[name]?["recordChangeTag"] != all[name]?["recordChangeTag"] || got[name]?["fields"] != all[name]?["fields"] {
                    Issue.record("\(step): '\(name)' differs: \(got[name] ?? .null) against \(all[name] ?? .null)")
                }
            }
            try await check("shared")
            try await save([Self.op("create", "c1", fields: title("C1"), Self.parent("c")), Self.op("create", "x2", fields: title("X2"), Self.parent("x"))])
            try await check("added inside and outside")
            try await save([Self.op("forceUpdate", "a", fields: title("A, edited")), Self.op("forceUpdate", "y", fields: title("Y, edited"))])
            try await check("edited")
            try await save([Self.op("forceUpdate", "b", Self.parent("x"))])
            try await check("b and its child moved out")
            // At once for lookups and queries too.
            let sharedZone: JSON = ["zoneName": "Trip", "ownerRecordName": .string(alice.userRecordName!)]
            let gone = try await bob.post("shared", "records/lookup", ["zoneID": sharedZone, "records": [["recordName": "b"], ["recordName": "b1"], ["recordName": "a"]]])
            #expect(gone.json.record(0)?.errorCode == "NOT_FOUND" && gone.json.record(1)?.errorCode == "NOT_FOUND" && gone.json.record(2)?["recordName"] == "a", "\(gone.json)")
            let queried = try await bob.post("shared", "records/query", ["zoneID": sharedZone, "query": ["recordType": "Note"]])
            #expect(queried.json["records"]?.arrayValue?.contains { $0["recordName"] == "b" || $0["recordName"] == "b1" } == false, "\(queried.json)")
            try await save([Self.op("forceUpdate", "y", Self.parent("c"))])
            try await check("y and its child moved in")
            try await save([Self.op("create", "d", fields: title("D"), Self.parent("a")), Self.op("forceUpdate", "y1", fields: title("Y1 again"))])
            try await check("more")
            try await save([Self.op("forceDelete", "a", recordType: nil)])
            try await check("a deleted: d below it leaves")
            // Bob's writes are synced back to him too.
            let written = try await bob.post("shared", "records/modify", ["zoneID": ["zoneName": "Trip", "ownerRecordName": .string(alice.userRecordName!)],
                                                                          "operations": [Self.op("create", "bobs", fields: title("Bob's"), Self.parent("y"))]])
            #expect(written.json.record(0)?.errorCode == nil, "\(written.json)")
            try await check("participant wrote")
            #expect((replica.zones[key]?.count ?? 0) >= 6, "the check saw records: \(replica.zones)")

            // Removed: the zone goes from his shared database, and his tokens read nothing more.
            let staleToken = try #require(replica.zoneTokens[key])
            let shareTag = try #require(try await alice.post("private", "records/lookup", ["zoneID": ["zoneName": "Trip"], "records": [["recordName": "share"]]]).json.record(0)?["recordChangeTag"]?.stringValue)
            try await save([Self.shareOp("share", forRecord: nil, participants: [], type: "update", tag: shareTag)])
            try await replica.sync(bob)
            #expect(replica.zones[key] == nil, "removed: \(replica.zones)")
            let stale = try await bob.post("shared", "changes/zone", ["zones": [["zoneID": ["zoneName": "Trip", "ownerRecordName": .string(alice.userRecordName!)],
                                                                                 "syncToken": .string(staleToken)]]])
            #expect(stale.json["zones"]?.arrayValue?.first?.errorCode == "ZONE_NOT_FOUND", "\(stale.json)")
            let lookup = try await bob.post("shared", "records/lookup", ["zoneID": ["zoneName": "Trip", "ownerRecordName": .string(alice.userRecordName!)],
                                                                         "records": [["recordName": "root"]]])
            #expect(lookup.json.errorCode == "ZONE_NOT_FOUND", "\(lookup.json)")
        }
    }
}

extension SharingTests {
    enum Principal: String, CaseIterable {
        case owner, readOnly, readWrite, invited, removed, publicLink, stranger, otherContainer
    }

    enum Operation: String, CaseIterable {
        case lookup, query, create, update, delete, feed
        var writes: Bool { self == .create || self == .update || self == .delete }
    }

    /// The oracle: what each principal may do to a record inside or outside what is shared.
    static func allowed(_ principal: Principal, _ operation: Operation, inside: Bool) -> Bool {
        switch principal {
        case .owner: return true
        case .readWrite: return inside
        case .readOnly, .publicLink: return inside && !operation.writes
        case .invited, .removed, .stranger, .otherContainer: return false
        }
    }

    @Test(arguments: [true, false]) func everyPrincipalGetsExactlyWhatTheShareAllows(zoneWide: Bool) async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            let elsewhere = try await harness.container()
            let alice = try await anonymous.signedUp()
            var sessions: [Principal: Session] = [.owner: alice]
            for principal in Principal.allCases where principal != .owner {
                sessions[principal] = try await (principal == .otherContainer ? elsewhere : anonymous).signedUp()
            }
            for zone in ["Shared", "Other"] {
                #expect(try await alice.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": .string(zone)]]]]]).status == 200)
            }
            // Inside: under the shared root (or anywhere in the shared zone). Outside: beside the
            // root in the same zone (or in a zone not shared).
            let outsideZone = zoneWide ? "Other" : "Shared"
            #expect(try await alice.modify("private", zone: "Shared", [Self.op("create", "root"), Self.op("create", "inside", Self.parent("root"))]).status == 200)
            #expect(try await alice.modify("private", zone: outsideZone, [Self.op("create", "outside")]).status == 200)
            let invitees: [Principal: String] = [.readOnly: "READ_ONLY", .readWrite: "READ_WRITE", .invited: "READ_WRITE", .removed: "READ_WRITE"]
            let share = try await alice.modify("private", zone: "Shared", [Self.shareOp(zoneWide ? "cloudkit.zoneshare" : "share", forRecord: zoneWide ? nil : "root",
                participants: invitees.map { Self.participant(sessions[$0.key]!, $0.value) }, publicPermission: "READ_ONLY")])
            let guid = try #require(share.json.record(0)?["shortGUID"]?.stringValue, "\(share.json)")
            for principal in [Principal.readOnly, .readWrite, .removed, .publicLink] {
                let accepted = try await sessions[principal]!.post("public", "records/accept", ["shortGUIDs": [["value": .string(guid)]]])
                #expect(accepted.json["results"]?.arrayValue?.first?["participantStatus"] == "ACCEPTED", "\(principal): \(accepted.json)")
            }
            let stillIn = invitees.filter { $0.key != .removed }.map { Self.participant(sessions[$0.key]!, $0.value) }
            let shareName = zoneWide ? "cloudkit.zoneshare" : "share"
            let shareTag = share.json.record(0)?["recordChangeTag"]?.stringValue
            let removal = try await alice.modify("private", zone: "Shared", [Self.shareOp(shareName, forRecord: nil, participants: stillIn + [
                ["permission": "READ_ONLY", "userIdentity": ["userRecordName": .string(sessions[.publicLink]!.userRecordName!)]]], publicPermission: "READ_ONLY",
                type: "update", tag: shareTag)])
            #expect(removal.json.record(0)?.errorCode == nil, "\(removal.json)")

            var cases = 0, unauthorized = 0, wrongDenials = 0
            var serial = 0
            for principal in Principal.allCases {
                let session = sessions[principal]!
                let database = principal == .owner ? "private" : "shared"
                for inside in [true, false] {
                    let zone = inside ? "Shared" : outsideZone
                    let target = inside ? "inside" : "outside"
                    var zoneID: JSON = ["zoneName": .string(zone)]
                    if principal != .owner { zoneID = ["zoneName": .string(zone), "ownerRecordName": .string(alice.userRecordName!)] }
                    for operation in Operation.allCases {
                        serial += 1
                        let succeeded: Bool
                        switch operation {
                        case .lookup:
                            let response = try await session.post(database, "records/lookup", ["zoneID": zoneID, "records": [["recordName": .string(target)]]])
                            succeeded = response.json.record(0)?["recordName"]?.stringValue == target && response.json.record(0)?.errorCode == nil
                        case .query:
                            let response = try await session.post(database, "records/query", ["zoneID": zoneID, "query": ["recordType": "Note"]])
                            succeeded = response.json["records"]?.arrayValue?.contains { $0["recordName"]?.stringValue == target } == true
                        case .create:
                            let extra = zoneWide ? [:] : Self.parent(target)
                            let response = try await session.post(database, "records/modify", ["zoneID": zoneID, "operations": [Self.op("create", "new-\(serial)", extra)]])
                            succeeded = response.json.record(0)?["recordName"]?.stringValue == "new-\(serial)" && response.json.record(0)?.errorCode == nil
                        case .update:
                            let response = try await session.post(database, "records/modify", ["zoneID": zoneID, "operations": [
                                Self.op("forceUpdate", target, fields: ["title": ["value": .string("by \(principal) \(serial)")]])]])
                            succeeded = response.json.record(0)?["fields"]?["title"]?["value"]?.stringValue == "by \(principal) \(serial)"
                        case .delete:
                            let extra = zoneWide ? [:] : Self.parent(target)
                            let made = try await alice.modify("private", zone: zone, [Self.op("create", "doomed-\(serial)", extra)])
                            let tag = made.json.record(0)?["recordChangeTag"]?.stringValue
                            let response = try await session.post(database, "records/modify", ["zoneID": zoneID, "operations": [
                                Self.op("delete", "doomed-\(serial)", recordType: nil, tag: tag)]])
                            let after = try await alice.post("private", "records/lookup", ["zoneID": ["zoneName": .string(zone)], "records": [["recordName": .string("doomed-\(serial)")]]])
                            succeeded = response.json.record(0)?["deleted"] == true && after.json.record(0)?.errorCode == "NOT_FOUND"
                        case .feed:
                            let response = try await session.post(database, "changes/zone", ["zones": [["zoneID": zoneID]]])
                            succeeded = response.json["zones"]?.arrayValue?.first?["records"]?.arrayValue?.contains { $0["recordName"]?.stringValue == target } == true
                        }
                        cases += 1
                        let expected = Self.allowed(principal, operation, inside: inside)
                        if succeeded, !expected {
                            unauthorized += 1
                            Issue.record("unauthorized success: \(principal) \(operation) \(target) (zone-wide \(zoneWide))")
                        } else if !succeeded, expected {
                            wrongDenials += 1
                            Issue.record("wrong denial: \(principal) \(operation) \(target) (zone-wide \(zoneWide))")
                        }
                    }
                }
            }
            print("share matrix (\(zoneWide ? "zone-wide" : "hierarchy") share): \(cases) cases, \(unauthorized) unauthorized successes, \(wrongDenials) wrong denials")
            #expect(cases == Principal.allCases.count * 2 * Operation.allCases.count)
        }
    }
}

extension SharingTests {
    @Test func badSharingRequestsAreRefusedClearlyAndWriteNothing() async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            let elsewhere = try await harness.container()
            let alice = try await anonymous.signedUp()
            let bob = try await anonymous.signedUp()
            let stranger = try await elsewhere.signedUp()
            #expect(try await alice.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Z"]]]]]).status == 200)
            let root = try await alice.modify("private", zone: "Z", [Self.op("create", "root")])
            let rootTag = try #require(root.json.record(0)?["recordChangeTag"]?.stringValue)
            #expect(try await alice.modify("private", [Self.op("create", "plain")]).status == 200)
            #expect(try await alice.modify("private", zone: "Z", [Self.op("forceUpdate", "root", fields: ["title": ["value": "changed"]])]).status == 200)

            func refused(_ response: (status: Int, json: JSON), _ code: String, mentioning word: String, _ label: String) {
                let item = response.json.record(0) ?? response.json
                #expect(item.errorCode == code, "\(label): \(response.json)")
                #expect(item["reason"]?.stringValue?.contains(word) == true, "\(label): the reason should say '\(word)': \(response.json)")
            }
            let bobRW = Self.participant(bob, "READ_WRITE")
            refused(try await alice.modify("private", [Self.shareOp("s1", forRecord: "plain", participants: [bobRW])]), "BAD_REQUEST", mentioning: "default zone", "default zone")
            refused(try await alice.modify("public", [Self.shareOp("s1", forRecord: "plain", participants: [bobRW])]), "BAD_REQUEST", mentioning: "private database", "public database")
            refused(try await alice.modify("private", zone: "Z", [Self.shareOp("s1", forRecord: "missing", participants: [bobRW])]), "BAD_REQUEST", mentioning: "does not exist", "missing root")
            refused(try await alice.modify("private", zone: "Z", [Self.shareOp("s1", forRecord: "root", rootTag: rootTag, participants: [bobRW])]), "CONFLICT", mentioning: "changed", "stale tag")
            refused(try await alice.modify("private", zone: "Z", [Self.shareOp("s1", forRecord: "root", participants: [Self.participant(stranger, "READ_ONLY")])]),
                    "BAD_REQUEST", mentioning: "not a user of this container", "another container's user")
            refused(try await alice.modify("private", zone: "Z", [Self.shareOp("s1", forRecord: "root", participants: [bobRW, bobRW])]), "BAD_REQUEST", mentioning: "twice", "listed twice")
            refused(try await alice.modify("private", zone: "Z", [Self.shareOp("s1", forRecord: "root", participants: [Self.participant(alice, "READ_ONLY")])]),
                    "BAD_REQUEST", mentioning: "owner", "the owner as participant")
            let badPermission = Self.op("create", "s1", recordType: "cloudkit.share", ["forRecord": ["recordName": "root"], "publicPermission": "EVERYONE"])
            refused(try await alice.modify("private", zone: "Z", [badPermission]), "BAD_REQUEST", mentioning: "publicPermission", "bad permission")
            let phone: JSON = ["userIdentity": ["lookupInfo": ["phoneNumber": "+15555550100"]]]
            refused(try await alice.modify("private", zone: "Z", [Self.shareOp("s1", forRecord: "root", participants: [phone])]), "BAD_REQUEST", mentioning: "phone", "phone number")
            refused(try await alice.modify("private", zone: "Z", [Self.op("create", "loop-a", Self.parent("loop-b")), Self.op("create", "loop-b", Self.parent("loop-a"))]),
                    "BAD_REQUEST", mentioning: "ancestor", "a parent loop")
            refused(try await alice.modify("private", zone: "Z", [Self.op("create", "odd", fields: ["cloudkit.title": ["value": "x"]])]), "BAD_REQUEST", mentioning: "cloudkit.share", "share field on a Note")
            let chain = (0...65).map { Self.op("create", "deep-\($0)", $0 == 0 ? [:] : Self.parent("deep-\($0 - 1)")) }
            refused(try await alice.modify("private", zone: "Z", chain), "BAD_REQUEST", mentioning: "64 levels", "a chain 66 deep")
            let nul: JSON = ["permission": "READ_ONLY", "userIdentity": ["userRecordName": "_a\u{0}b"]]
            refused(try await alice.modify("private", zone: "Z", [Self.shareOp("s1", forRecord: "root", participants: [nul])]), "BAD_REQUEST", mentioning: "user record name", "a NUL in a participant")
            let nulOwner = try await bob.post("shared", "records/lookup", ["zoneID": ["zoneName": "Z", "ownerRecordName": "_a\u{0}b"], "records": [["recordName": "root"]]])
            #expect(nulOwner.json.errorCode == "BAD_REQUEST", "\(nulOwner.json)")
            // Nothing of the refused requests was written: no share, no root change, no loop.
            let after = try await alice.post("private", "records/lookup", ["zoneID": ["zoneName": "Z"], "records": [["recordName": "root"], ["recordName": "s1"], ["recordName": "loop-a"]]])
            #expect(after.json.record(0)?["share"] == nil, "\(after.json)")
            #expect(after.json.record(1)?.errorCode == "NOT_FOUND" && after.json.record(2)?.errorCode == "NOT_FOUND", "\(after.json)")
            let deep = try await alice.post("private", "records/lookup", ["zoneID": ["zoneName": "Z"], "records": [["recordName": "deep-0"]]])
            #expect(deep.json.record(0)?.errorCode == "NOT_FOUND", "the refused chain wrote nothing: \(deep.json)")
            #expect(try await bob.get("shared", "zones/list").json["zones"] == [], "no share reached bob")

            // A participant cannot change the share, nor re-share.
            let made = try await alice.modify("private", zone: "Z", [Self.shareOp("s1", forRecord: "root", participants: [bobRW])])
            let guid = try #require(made.json.record(0)?["shortGUID"]?.stringValue, "\(made.json)")
            let tag = made.json.record(0)?["recordChangeTag"]?.stringValue
            #expect(try await bob.post("public", "records/accept", ["shortGUIDs": [["value": .string(guid)]]]).json["results"]?.arrayValue?.first?["participantStatus"] == "ACCEPTED")
            let zoneID: JSON = ["zoneName": "Z", "ownerRecordName": .string(alice.userRecordName!)]
            let change = try await bob.post("shared", "records/modify", ["zoneID": zoneID, "operations": [
                Self.shareOp("s1", forRecord: nil, participants: [bobRW, Self.participant(stranger, "READ_WRITE")], type: "update", tag: tag)]])
            refused(change, "ACCESS_DENIED", mentioning: "owner", "participant changing participants")
            let reshare = try await bob.post("shared", "records/modify", ["zoneID": zoneID, "operations": [Self.shareOp("s2", forRecord: "root", participants: [])]])
            refused(reshare, "ACCESS_DENIED", mentioning: "owner", "participant re-sharing")
            let unknownOwner = try await bob.post("shared", "records/lookup", ["zoneID": ["zoneName": "Z"], "records": [["recordName": "root"]]])
            #expect(unknownOwner.json.errorCode == "ZONE_NOT_FOUND" && unknownOwner.json["reason"]?.stringValue?.contains("ownerRecordName") == true, "\(unknownOwner.json)")
            // He leaves by deleting the share; the zone goes from his shared database.
            let left = try await bob.post("shared", "records/modify", ["zoneID": zoneID, "operations": [Self.op("forceDelete", "s1", recordType: nil)]])
            #expect(left.json.record(0)?["deleted"] == true, "\(left.json)")
            #expect(try await bob.get("shared", "zones/list").json["zones"] == [])
            let stillThere = try await alice.post("private", "records/lookup", ["zoneID": ["zoneName": "Z"], "records": [["recordName": "s1"]]])
            let me = stillThere.json.record(0)?["participants"]?.arrayValue?.count
            #expect(me == 1, "only the owner is left listed: \(stillThere.json)")
            let rejoin = try await bob.post("public", "records/accept", ["shortGUIDs": [["value": .string(guid)]]])
            #expect(rejoin.json["results"]?.arrayValue?.first?.errorCode == "ACCESS_DENIED", "\(rejoin.json)")
        }
    }

    @Test func anInvitationByEmailWaitsForTheAddressToSignUp() async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            let alice = try await anonymous.signedUp()
            let email = "later\(UInt32.random(in: 0...UInt32.max))@example.com"
            #expect(try await alice.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Z"]]]]]).status == 200)
            let invite: JSON = ["permission": "READ_WRITE", "userIdentity": ["lookupInfo": ["emailAddress": .string(email)]]]
            let made = try await alice.modify("private", zone: "Z", [Self.op("create", "root"), Self.shareOp("s", forRecord: "root", participants: [invite])])
            let guid = try #require(made.json.record(1)?["shortGUID"]?.stringValue, "\(made.json)")
            let pending = made.json.record(1)?["participants"]?.arrayValue?.last
            #expect(pending?["acceptanceStatus"] == "INVITED" && pending?["userIdentity"]?["userRecordName"] == nil, "\(made.json)")
            let newcomer = try await anonymous.signedUp(email.uppercased())
            let accepted = try await newcomer.post("public", "records/accept", ["shortGUIDs": [["value": .string(guid)]]])
            #expect(accepted.json["results"]?.arrayValue?.first?["participantPermission"] == "READ_WRITE", "\(accepted.json)")
            let read = try await newcomer.post("shared", "records/lookup", ["zoneID": ["zoneName": "Z", "ownerRecordName": .string(alice.userRecordName!)],
                                                                            "records": [["recordName": "root"]]])
            #expect(read.json.record(0)?["recordName"] == "root", "\(read.json)")
        }
    }
}

extension SharingTests {
    @Test func theOperatorListsSharesWithTheCLI() async throws {
        try await Harness.run(live: true) { harness in
            let anonymous = try await harness.container()
            let alice = try await anonymous.signedUp()
            let email = "ben\(UInt32.random(in: 0...UInt32.max))@example.com"
            let ben = try await anonymous.signedUp(email)
            let carl = try await anonymous.signedUp()
            #expect(try await alice.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Album"]]]]]).status == 200)
            let made = try await alice.modify("private", zone: "Album", [Self.op("create", "photos"), Self.shareOp("s", forRecord: "photos", participants: [Self.participant(ben, "READ_WRITE")])])
            let guid = try #require(made.json.record(1)?["shortGUID"]?.stringValue, "\(made.json)")
            #expect(try await ben.post("public", "records/accept", ["shortGUIDs": [["value": .string(guid)]]]).status == 200)
            func cli(_ arguments: [String]) async throws -> Subprocess.Output {
                try await Programs.cli(arguments, server: "http://127.0.0.1:\(harness.client.port ?? 0)", token: Harness.adminToken)
            }
            let table = try await cli(["share", "list", "--container", anonymous.container, "--environment", "development"])
            #expect(table.status == 0, "\(table.text)")
            #expect(table.text.contains("OWNER") && table.text.contains(alice.userRecordName!) && table.text.contains("Album") && table.text.contains(guid), "\(table.text)")
            #expect(table.text.contains("\(ben.userRecordName!) (RW, ACCEPTED)"), "\(table.text)")
            let json = try await cli(["share", "list", "--container", anonymous.container, "--user", email, "--json"])
            let parsed = try JSONParser.parse(Array(json.text.utf8))
            #expect(parsed["shares"]?.arrayValue?.first?["rootRecordName"] == "photos", "\(json.text)")
            let none = try await cli(["share", "list", "--container", anonymous.container, "--user", carl.userRecordName!])
            #expect(none.status == 0 && none.text.contains("no shares"), "\(none.text)")
            let unknown = try await cli(["share", "list", "--container", anonymous.container, "--user", "nobody@example.com"])
            #expect(unknown.status != 0 && unknown.text.contains("no user"), "\(unknown.text)")
        }
    }
}

extension SharingTests {
    @Test func aDeletedShareOrZoneLeavesTheSharedDatabaseAtOnce() async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            let alice = try await anonymous.signedUp()
            let bob = try await anonymous.signedUp()
            var guids: [String: String] = [:]
            for zone in ["One", "Two"] {
                #expect(try await alice.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": .string(zone)]]]]]).status == 200)
                let made = try await alice.modify("private", zone: zone, [Self.op("create", "root"), Self.op("create", "child", Self.parent("root")),
                                                                          Self.shareOp("share", forRecord: "root", participants: [Self.participant(bob, "READ_ONLY")])])
                guids[zone] = try #require(made.json.record(2)?["shortGUID"]?.stringValue, "\(made.json)")
                #expect(try await bob.post("public", "records/accept", ["shortGUIDs": [["value": .string(guids[zone]!)]]]).status == 200)
            }
            var replica = Replica()
            try await replica.sync(bob)
            #expect(replica.zones.count == 2 && replica.zones.values.allSatisfy { $0.keys.sorted() == ["child", "root", "share"] }, "\(replica.zones)")
            // The owner deletes the share of One (its root stays hers) and the whole zone Two.
            #expect(try await alice.modify("private", zone: "One", [Self.op("forceDelete", "share", recordType: nil)]).json.record(0)?["deleted"] == true)
            #expect(try await alice.post("private", "zones/modify", ["operations": [["operationType": "delete", "zone": ["zoneID": ["zoneName": "Two"]]]]]).status == 200)
            let root = try await alice.post("private", "records/lookup", ["zoneID": ["zoneName": "One"], "records": [["recordName": "root"]]])
            #expect(root.json.record(0)?["share"] == nil && root.json.record(0)?["recordName"] == "root", "the root is no longer shared: \(root.json)")
            try await replica.sync(bob)
            #expect(replica.zones.isEmpty, "\(replica.zones)")
            #expect(try await bob.get("shared", "zones/list").json["zones"] == [])
            for zone in ["One", "Two"] {
                let read = try await bob.post("shared", "records/lookup", ["zoneID": ["zoneName": .string(zone), "ownerRecordName": .string(alice.userRecordName!)],
                                                                           "records": [["recordName": "root"]]])
                #expect(read.json.errorCode == "ZONE_NOT_FOUND", "\(zone): \(read.json)")
                let resolved = try await bob.post("public", "records/resolve", ["shortGUIDs": [["value": .string(guids[zone]!)]]])
                #expect(resolved.json["results"]?.arrayValue?.first?.errorCode == "NOT_FOUND", "\(zone): \(resolved.json)")
            }
        }
    }
}

extension SharingTests {
    /// Concurrent shared-database lookups share statements (`dynamicReads`); each still gets its
    /// own answer, and a caller the zone is not shared with gets none.
    @Test func concurrentSharedLookupsEachGetTheirOwnAnswer() async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            let alice = try await anonymous.signedUp()
            let bob = try await anonymous.signedUp()
            let dave = try await anonymous.signedUp()
            #expect(try await alice.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Z"]]]]]).status == 200)
            let records = (0..<40).map { Self.op("create", "r\($0)", fields: ["title": ["value": .string("t\($0)")]], $0 == 0 ? [:] : Self.parent("r0")) }
            #expect(try await alice.modify("private", zone: "Z", records + [Self.op("create", "outside")]).json.record(0)?.errorCode == nil)
            let made = try await alice.modify("private", zone: "Z", [Self.shareOp("s", forRecord: "r0", participants: [Self.participant(bob, "READ_ONLY")])])
            let guid = try #require(made.json.record(0)?["shortGUID"]?.stringValue)
            #expect(try await bob.post("public", "records/accept", ["shortGUIDs": [["value": .string(guid)]]]).status == 200)
            let zoneID: JSON = ["zoneName": "Z", "ownerRecordName": .string(alice.userRecordName!)]
            let before = harness.app.records.dynamicReads.statistics
            let answers = try await withThrowingTaskGroup(of: (Int, String?, String?).self) { group in
                for index in 0..<120 {
                    group.addTask {
                        let who = index % 4 == 3 ? dave : bob
                        let name = index % 10 == 9 ? "outside" : "r\(index % 40)"
                        let response = try await who.post("shared", "records/lookup", ["zoneID": zoneID, "records": [["recordName": .string(name)]]])
                        return (index, response.json.record(0)?["fields"]?["title"]?["value"]?.stringValue, response.json.errorCode ?? response.json.record(0)?.errorCode)
                    }
                }
                var all: [(Int, String?, String?)] = []
                for try await answer in group { all.append(answer) }
                return all
            }
            for (index, title, error) in answers {
                if index % 4 == 3 {
                    #expect(error == "ZONE_NOT_FOUND" && title == nil, "dave, request \(index): \(title ?? "-") \(error ?? "-")")
                } else if index % 10 == 9 {
                    #expect(error == "NOT_FOUND", "bob, outside, request \(index): \(error ?? "-")")
                } else {
                    #expect(title == "t\(index % 40)" && error == nil, "bob, request \(index): \(title ?? "-") \(error ?? "-")")
                }
            }
            let after = harness.app.records.dynamicReads.statistics
            #expect(after.requests - before.requests == 120, "every lookup went through the sharing: \(after)")
            print("120 concurrent shared lookups in \(after.statements - before.statements) statements")
        }
    }
}

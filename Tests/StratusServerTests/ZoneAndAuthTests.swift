import Foundation
import StratusCore
@testable import StratusTestSupport
import Testing

@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct ZoneTests {
    @Test func customZonesLifecycleAndDatabaseChanges() async throws {
        try await Harness.run { harness in
            let alice = try await harness.container().signedUp()
            let start = try await alice.post("private", "changes/database", [:])
            #expect(start.status == 200)
            let token0 = start.json["syncToken"]

            let created = try await alice.post("private", "zones/modify", ["operations": [
                ["operationType": "create", "zone": ["zoneID": ["zoneName": "Lists"]]],
                ["operationType": "create", "zone": ["zoneID": ["zoneName": "Photos"]]],
                ["operationType": "delete", "zone": ["zoneID": ["zoneName": "Never"]]],
                ["operationType": "create", "zone": ["zoneID": ["zoneName": "_defaultZone"]]],
            ]])
            let zones = created.json["zones"]?.arrayValue ?? []
            #expect(zones.count == 4)
            #expect(zones[0]["zoneID"]?["zoneName"] == "Lists")
            #expect(zones[0]["atomic"] == true)
            #expect(zones[0]["zoneID"]?["ownerRecordName"]?.stringValue == alice.userRecordName)
            #expect(zones[2].errorCode == "ZONE_NOT_FOUND")
            #expect(zones[3].errorCode == "BAD_REQUEST")

            let list = try await alice.get("private", "zones/list")
            #expect(list.json["zones"]?.arrayValue?.compactMap { $0["zoneID"]?["zoneName"]?.stringValue } == ["_defaultZone", "Lists", "Photos"])
            let lookup = try await alice.post("private", "zones/lookup", ["zones": [["zoneName": "Photos"], ["zoneName": "Nope"]]])
            #expect(lookup.json["zones"]?.arrayValue?[0]["zoneID"]?["zoneName"] == "Photos")
            #expect(lookup.json["zones"]?.arrayValue?[1].errorCode == "ZONE_NOT_FOUND")

            _ = try await alice.modify("private", zone: "Lists", [op("create", "l1")])
            let changed = try await alice.post("private", "changes/database", ["syncToken": token0 ?? nil])
            let names = Set(changed.json["zones"]?.arrayValue?.compactMap { $0["zoneID"]?["zoneName"]?.stringValue } ?? [])
            #expect(names == ["Lists", "Photos"])
            let token1 = changed.json["syncToken"]

            // deleting a zone deletes its records and shows as deleted in the database feed
            let deleted = try await alice.post("private", "zones/modify", ["operations": [["operationType": "delete", "zone": ["zoneID": ["zoneName": "Lists"]]]]])
            #expect(deleted.json["zones"]?.arrayValue?.first?["deleted"] == true)
            let after = try await alice.post("private", "zones/changes", ["metaSyncToken": token1 ?? nil])
            #expect(after.json["zones"]?.arrayValue?.first?["deleted"] == true)
            #expect(after.json["metaSyncToken"]?.stringValue != nil)
            let gone = try await alice.post("private", "records/lookup", ["zoneID": ["zoneName": "Lists"], "records": [["recordName": "l1"]]])
            #expect(gone.status == 404)
            #expect(gone.json.errorCode == "ZONE_NOT_FOUND")
            _ = try await alice.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Lists"]]]]])
            let recreated = try await alice.post("private", "records/lookup", ["zoneID": ["zoneName": "Lists"], "records": [["recordName": "l1"]]])
            #expect(recreated.json.record(0)?.errorCode == "NOT_FOUND")

            // public database: default zone only
            let publicZones = try await alice.get("public", "zones/list")
            #expect(publicZones.json["zones"]?.arrayValue?.count == 1)
            let publicCreate = try await alice.post("public", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "X"]]]]])
            #expect(publicCreate.json["zones"]?.arrayValue?.first?.errorCode == "BAD_REQUEST")
            let publicCustom = try await alice.post("public", "records/lookup", ["zoneID": ["zoneName": "X"], "records": []])
            #expect(publicCustom.json.errorCode == "ZONE_NOT_FOUND")

            // shared database: empty until something is shared; it has no default zone
            #expect(try await alice.get("shared", "zones/list").json["zones"] == [])
            #expect(try await alice.post("shared", "records/query", ["query": ["recordType": "Note"]]).json.errorCode == "ZONE_NOT_FOUND")
            #expect(try await alice.post("shared", "changes/database", [:]).json["zones"] == [])
        }
    }

    @Test func privateDataIsInvisibleToOthers() async throws {
        try await Harness.run { harness in
            let container = try await harness.container()
            let alice = try await container.signedUp()
            let bob = try await container.signedUp()
            _ = try await alice.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Diary"]]]]])
            _ = try await alice.modify("private", zone: "Diary", [op("create", "secret", fields: ["text": ["value": "dear diary"]])])
            _ = try await alice.modify("private", [op("create", "secret", fields: ["text": ["value": "hidden"]])])

            // bob names alice's zone by name, and with alice as owner: both look like a missing zone
            let byName = try await bob.post("private", "records/lookup", ["zoneID": ["zoneName": "Diary"], "records": [["recordName": "secret"]]])
            let missing = try await bob.post("private", "records/lookup", ["zoneID": ["zoneName": "NoSuchZone"], "records": [["recordName": "secret"]]])
            #expect(byName.status == missing.status)
            #expect(byName.json.errorCode == missing.json.errorCode)
            let byOwner = try await bob.post("private", "records/lookup", ["zoneID": ["zoneName": "Diary", "ownerRecordName": .string(alice.userRecordName ?? "")], "records": [["recordName": "secret"]]])
            #expect(byOwner.json.errorCode == "ZONE_NOT_FOUND")
            let defaultZone = try await bob.post("private", "records/lookup", ["records": [["recordName": "secret"]]])
            #expect(defaultZone.json.record(0)?.errorCode == "NOT_FOUND")
            let query = try await bob.post("private", "records/query", ["query": ["recordType": "Note"]])
            #expect(query.json["records"] == [])
            let zones = try await bob.get("private", "zones/list")
            #expect(zones.json["zones"]?.arrayValue?.count == 1)
            let feed = try await bob.post("private", "changes/zone", ["zones": [["zoneID": ["zoneName": "_defaultZone"]]]])
            #expect(feed.json["zones"]?.arrayValue?.first?["records"] == [])
            // without a user, the private database asks for sign-in
            var anonymous = bob
            anonymous.webAuthToken = nil
            let denied = try await anonymous.post("private", "records/lookup", ["records": [["recordName": "secret"]]])
            #expect(denied.status == 421)
            #expect(denied.json.errorCode == "AUTHENTICATION_REQUIRED")
        }
    }

    @Test func referencesAreEnforced() async throws {
        try await Harness.run { harness in
            let session = try await harness.container().signedUp()
            _ = try await session.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Z"]]]]])
            _ = try await session.modify("private", zone: "Z", [op("create", "artist"), op("create", "label")])
            let dangling = try await session.modify("private", zone: "Z", [op("create", "song0", fields: ["by": ["value": ["recordName": "nobody", "action": "VALIDATE"], "type": "REFERENCE"]])])
            #expect(dangling.json.record(0)?.errorCode == "VALIDATING_REFERENCE_ERROR")
            let songs = try await session.modify("private", zone: "Z", [
                op("create", "song1", fields: ["by": ["value": ["recordName": "artist", "action": "VALIDATE"], "type": "REFERENCE"]]),
                op("create", "song2", fields: ["label": ["value": ["recordName": "label", "action": "DELETE_SELF"], "type": "REFERENCE"]]),
                op("create", "song3", fields: ["label": ["value": ["recordName": "song2", "action": "DELETE_SELF"], "type": "REFERENCE"]]),
                op("create", "song4", fields: ["by": ["value": ["recordName": "artist", "action": "NONE"]]]),
            ])
            #expect(songs.json["records"]?.arrayValue?.allSatisfy { $0.errorCode == nil } == true, "\(songs.json)")
            let blocked = try await session.modify("private", zone: "Z", [op("forceDelete", "artist", type: nil)])
            #expect(blocked.json.record(0)?.errorCode == "VALIDATING_REFERENCE_ERROR")
            // deleting the label cascades through song2 to song3
            let cascade = try await session.modify("private", zone: "Z", [op("forceDelete", "label", type: nil)])
            #expect(cascade.json.record(0)?["deleted"] == true)
            let lookup = try await session.post("private", "records/lookup", ["zoneID": ["zoneName": "Z"], "records": [["recordName": "song2"], ["recordName": "song3"], ["recordName": "song1"]]])
            #expect(lookup.json.record(0)?.errorCode == "NOT_FOUND")
            #expect(lookup.json.record(1)?.errorCode == "NOT_FOUND")
            #expect(lookup.json.record(2)?["recordName"] == "song1")
            // deleting the source and the target together is allowed
            let both = try await session.modify("private", zone: "Z", atomic: true, [op("forceDelete", "artist", type: nil), op("forceDelete", "song1", type: nil)])
            #expect(both.json["records"]?.arrayValue?.allSatisfy { $0["deleted"] == true } == true, "\(both.json)")
            // references into another zone are refused
            let crossZone = try await session.modify("private", zone: "Z", [op("create", "x", fields: ["r": ["value": ["recordName": "a", "zoneID": ["zoneName": "_defaultZone"], "action": "NONE"], "type": "REFERENCE"]])])
            #expect(crossZone.json.record(0)?.errorCode == "BAD_REQUEST")
        }
    }
}

@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct AuthTests {
    @Test func signUpSignInAndUserEndpoints() async throws {
        try await Harness.run { harness in
            let session = try await harness.container()
            let signup = "/auth/1/\(session.container)/development/signup?ckAPIToken=\(session.apiToken)"
            let signin = "/auth/1/\(session.container)/development/signin?ckAPIToken=\(session.apiToken)"
            let first = try await harness.send(.post, signup, json: ["emailAddress": "Ada@Example.com", "password": "correct horse"])
            #expect(first.status == 200)
            let userRecordName = first.json["userRecordName"]?.stringValue ?? ""
            #expect(UserRecordName.isValid(userRecordName))
            let again = try await harness.send(.post, signup, json: ["emailAddress": "ada@example.com", "password": "other password"])
            #expect(again.status == 409)
            #expect(again.json.errorCode == "EXISTS")
            #expect(try await harness.send(.post, signup, json: ["emailAddress": "not-an-email", "password": "correct horse"]).status == 400)
            #expect(try await harness.send(.post, signup, json: ["emailAddress": "b@example.com", "password": "short"]).status == 400)
            #expect(try await harness.send(.post, signup, json: ["emailAddress": "c@example.com", "password": "correct\u{0}horse"]).status == 400)

            let wrong = try await harness.send(.post, signin, json: ["emailAddress": "ada@example.com", "password": "wrong password"])
            #expect(wrong.status == 401)
            #expect(wrong.json.errorCode == "AUTHENTICATION_FAILED")
            let unknown = try await harness.send(.post, signin, json: ["emailAddress": "nobody@example.com", "password": "wrong password"])
            #expect(unknown.json["reason"] == wrong.json["reason"], "no account enumeration")
            let truncated = try await harness.send(.post, signin, json: ["emailAddress": "ada@example.com", "password": "correct horse\u{0}anything"])
            #expect(truncated.status == 400, "a NUL never cuts a password short")
            let ok = try await harness.send(.post, signin, json: ["emailAddress": "ada@example.com", "password": "correct horse"])
            #expect(ok.json["userRecordName"]?.stringValue == userRecordName)
            let token = ok.json["ckWebAuthToken"]?.stringValue ?? ""

            // users/caller and users/current, with ckWebAuthToken and with the older ckSession name
            let encoded = token.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? token
            let base = "/database/1/\(session.container)/development/public/users"
            let caller = try await harness.send(.get, "\(base)/caller?ckAPIToken=\(session.apiToken)&ckWebAuthToken=\(encoded)")
            #expect(caller.json["userRecordName"]?.stringValue == userRecordName)
            let current = try await harness.send(.get, "\(base)/current?ckAPIToken=\(session.apiToken)&ckSession=\(encoded)")
            #expect(current.json["userRecordName"]?.stringValue == userRecordName)
            let privateCaller = try await harness.send(.get, "/database/1/\(session.container)/development/private/users/caller?ckAPIToken=\(session.apiToken)&ckWebAuthToken=\(encoded)")
            #expect(privateCaller.status == 200)

            // no user: 421 with a redirectURL; bad API token: 401
            let anonymous = try await harness.send(.get, "\(base)/caller?ckAPIToken=\(session.apiToken)")
            #expect(anonymous.status == 421)
            #expect(anonymous.json.errorCode == "AUTHENTICATION_REQUIRED")
            #expect(anonymous.json["redirectURL"]?.stringValue?.contains("/auth/1/\(session.container)/development/signin") == true)
            // Signed out as CloudKit JS sends it: 1.2.0 sends its stored session, null, as `ckSession=null`.
            for signedOut in ["ckSession=null", "ckSession=undefined", "ckSession=", "ckWebAuthToken=null", "ckWebAuthToken=&ckSession=null"] {
                let answer = try await harness.send(.get, "\(base)/caller?ckAPIToken=\(session.apiToken)&\(signedOut)")
                #expect(answer.status == 421 && answer.json.errorCode == "AUTHENTICATION_REQUIRED" && answer.json["redirectURL"]?.stringValue != nil,
                        "\(signedOut): \(answer.status) \(answer.json)")
            }
            let page = try await harness.send(.get, "/auth/1/\(session.container)/development/signin")
            #expect(page.status == 200)
            let badToken = try await harness.send(.get, "\(base)/caller?ckAPIToken=ck_forged&ckWebAuthToken=\(encoded)")
            #expect(badToken.status == 401)
            #expect(badToken.json.errorCode == "AUTHENTICATION_FAILED")
            // public writes need a user; public reads do not
            var reader = session
            reader.webAuthToken = nil
            let write = try await reader.modify("public", [op("create", "p")])
            #expect(write.status == 421)
            let read = try await reader.post("public", "records/query", ["query": ["recordType": "Note"]])
            #expect(read.status == 400, "unknown type until something is saved: \(read.json)")
        }
    }

    @Test func identitiesAndTokensAreScopedToTheirContainer() async throws {
        try await Harness.run { harness in
            let a = try await harness.container()
            let b = try await harness.container()
            let inA = try await a.signedUp("same@example.com")
            let inB = try await b.signedUp("same@example.com")
            #expect(inA.userRecordName != inB.userRecordName, "per-container identities")
            // A's user token in container B, and A's API token against B's URL
            var crossUser = inB
            crossUser.webAuthToken = inA.webAuthToken
            let crossed = try await crossUser.post("private", "records/lookup", ["records": []])
            #expect(crossed.status == 401)
            let crossToken = try await harness.send(.post, "/database/1/\(b.container)/development/public/records/lookup?ckAPIToken=\(a.apiToken)", json: ["records": []])
            #expect(crossToken.status == 401)
            #expect(crossToken.json.errorCode == "AUTHENTICATION_FAILED")
        }
    }

    @Test func managementAPIRequiresTheAdminToken() async throws {
        try await Harness.run { harness in
            let noToken = try await harness.send(.get, "/management/1/containers")
            #expect(noToken.status == 401)
            let wrong = try await harness.send(.get, "/management/1/containers", headers: [.authorization: "Bearer nope"])
            #expect(wrong.status == 401)
            let session = try await harness.container("iCloud.com.example.Admin")
            let duplicate = try await harness.admin(.post, "containers", json: ["name": "iCloud.com.example.Admin"])
            #expect(duplicate.status == 409)
            #expect(try await harness.admin(.post, "containers", json: ["name": "../bad"]).status == 400)
            // an API token cannot call the management API
            let withAPIToken = try await harness.send(.get, "/management/1/containers?ckAPIToken=\(session.apiToken)")
            #expect(withAPIToken.status == 401)
            // revoke → the token stops working at once (the server drops it from its cache)
            let tokens = try await harness.admin(.get, "tokens?container=iCloud.com.example.Admin")
            let id = tokens.json["tokens"]?.arrayValue?.first?["id"]
            #expect(tokens.json["tokens"]?.arrayValue?.first?["revokedAt"] == .null)
            #expect(JSONWriter.string(tokens.json).contains(session.apiToken) == false, "listings never show the secret")
            let revoked = try await harness.admin(.post, "containers/iCloud.com.example.Admin/tokens/\(id.map { JSONWriter.string($0) } ?? "")/revoke")
            #expect(revoked.status == 200)
            let after = try await session.post("public", "records/lookup", ["records": []])
            #expect(after.status == 401)
        }
    }
}

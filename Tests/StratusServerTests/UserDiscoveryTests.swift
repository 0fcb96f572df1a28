import Foundation
import StratusCore
@testable import StratusServer
@testable import StratusTestSupport
import Testing

/// Users and discovery (issue 23 §3): each user's `Users` record in the public database, their
/// names, opting in to discoverability, and the discovery and lookup endpoints, where a user who
/// did not opt in (or was disabled) is answered exactly like an address nobody uses.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct UserDiscoveryTests {
    static func signUp(_ session: Session, _ email: String, _ extra: [String: JSON]) async throws -> Session {
        var body: [String: JSON] = ["emailAddress": .string(email), "password": "correct horse"]
        body.merge(extra) { $1 }
        let response = try await session.harness.send(.post, "/auth/1/\(session.container)/development/signup?ckAPIToken=\(session.apiToken)", json: .object(body))
        #expect(response.status == 200, "\(response.json)")
        var copy = session
        copy.webAuthToken = response.json["ckWebAuthToken"]?.stringValue
        copy.userRecordName = response.json["userRecordName"]?.stringValue
        return copy
    }

    @Test func everyUserHasAUsersRecordTheyMayChangeAndAnyoneMayRead() async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            let ann = try await anonymous.signedUp()
            let ben = try await anonymous.signedUp()
            let annName = try #require(ann.userRecordName)
            let lookup: JSON = ["records": [["recordName": .string(annName)]]]
            let read = try await anonymous.post("public", "records/lookup", lookup)
            #expect(read.json.record(0)?["recordType"] == "Users", "\(read.json)")
            #expect(read.json.record(0)?["created"]?["userRecordName"]?.stringValue == annName, "\(read.json)")
            let tag = try #require(read.json.record(0)?["recordChangeTag"]?.stringValue)
            let update = { (session: Session) in
                try await session.modify("public", [op("update", annName, type: "Users", tag: tag, fields: ["nickname": ["value": "Annie"]])])
            }
            #expect(try await update(ben).json.record(0)?.errorCode == "ACCESS_DENIED")
            #expect(try await update(ann).json.record(0)?["fields"]?["nickname"]?["value"] == "Annie")
            // Only the server creates them.
            let forged = try await ben.modify("public", [op("create", "_0123456789abcdef0123456789abcdef", type: "Users")])
            #expect(forged.json.record(0)?.errorCode == "ACCESS_DENIED", "\(forged.json)")
            // The type got CloudKit's grants for it.
            let exported = try await harness.admin(.get, "containers/\(anonymous.container)/schema?environment=development")
            let text = exported.json["schema"]?.stringValue ?? ""
            #expect(text.contains("RECORD TYPE Users") && text.contains("GRANT WRITE TO \"_creator\"") && text.contains("GRANT READ TO \"_world\""), "\(text)")

            // Production has the type once the schema is deployed; signing in there then makes the record.
            #expect(try await harness.admin(.post, "containers/\(anonymous.container)/schema/deploy", json: [:]).status == 200)
            let token = try await harness.admin(.post, "containers/\(anonymous.container)/tokens", json: ["environment": "production"])
            let production = Session(harness: harness, container: anonymous.container, environment: .production,
                                     apiToken: token.json["apiToken"]?.stringValue ?? "")
            let carl = try await production.signedUp()
            let carlRecord = try await production.post("public", "records/lookup", ["records": [["recordName": .string(carl.userRecordName ?? "")]]])
            #expect(carlRecord.json.record(0)?["recordType"] == "Users", "\(carlRecord.json)")
        }
    }

    @Test func onlyUsersWhoOptedInAreDiscoverable() async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            let suffix = UInt32.random(in: 0...UInt32.max)
            let ann = try await Self.signUp(anonymous, "ann\(suffix)@example.com", ["discoverable": true, "givenName": "Ann", "familyName": "Lee"])
            let ben = try await Self.signUp(anonymous, "ben\(suffix)@example.com", ["givenName": "Ben"])
            let cat = try await Self.signUp(anonymous, "cat\(suffix)@example.com", ["discoverable": true])
            #expect(try await harness.admin(.post, "containers/\(anonymous.container)/users/\(cat.userRecordName!)/disable").status == 200)

            // The caller's own identity carries their names, discoverable or not.
            let me = try await ben.get("public", "users/caller")
            #expect(me.json["nameComponents"] == ["givenName": "Ben"], "\(me.json)")
            let current = try await ann.get("public", "users/current")
            #expect(current.json["firstName"] == "Ann" && current.json["lastName"] == "Lee", "\(current.json)")

            let infos: [JSON] = [
                ["emailAddress": .string("ANN\(suffix)@example.com")],   // any case
                ["emailAddress": .string("ben\(suffix)@example.com")],   // did not opt in
                ["emailAddress": .string("cat\(suffix)@example.com")],   // disabled
                ["emailAddress": .string("nobody\(suffix)@example.com")],
                ["userRecordName": .string(ann.userRecordName!)],
                ["userRecordName": .string(ben.userRecordName!)],
                ["phoneNumber": "+15555550100"],
            ]
            let found = try await ben.post("public", "users/discover", ["lookupInfos": .array(infos)])
            #expect(found.status == 200, "\(found.json)")
            let users = found.json["users"]?.arrayValue ?? []
            #expect(users.count == 2, "\(found.json)")
            #expect(users.allSatisfy { $0["userRecordName"]?.stringValue == ann.userRecordName }, "\(found.json)")
            #expect(users.first?["lookupInfo"] == infos[0] && users.last?["lookupInfo"] == infos[4], "\(found.json)")
            #expect(users.first?["nameComponents"] == ["givenName": "Ann", "familyName": "Lee"], "\(found.json)")

            // Legacy lookups, by email and by record name.
            let byEmail = try await ben.post("public", "users/lookup/email", ["users": [["emailAddress": .string("ann\(suffix)@example.com")], ["emailAddress": .string("ben\(suffix)@example.com")]]])
            #expect(byEmail.json["users"] == [["userRecordName": .string(ann.userRecordName!), "firstName": "Ann", "lastName": "Lee",
                                               "emailAddress": .string("ann\(suffix)@example.com")]], "\(byEmail.json)")
            let byID = try await ann.post("public", "users/lookup/id", ["users": [["userRecordName": .string(ben.userRecordName!)], ["userRecordName": .string(ann.userRecordName!)]]])
            #expect(byID.json["users"]?.arrayValue?.compactMap { $0["userRecordName"]?.stringValue } == [ann.userRecordName!], "\(byID.json)")
            // No address book, no contacts.
            #expect(try await ann.get("public", "users/discover").json["users"] == [])
            #expect(try await ann.get("public", "users/lookup/contacts").json["users"] == [])
            // Discovery needs a signed-in caller.
            let anonymousDiscover = try await anonymous.post("public", "users/discover", ["lookupInfos": .array(infos)])
            #expect(anonymousDiscover.status == 421 && anonymousDiscover.json["redirectURL"] != nil, "\(anonymousDiscover.json)")

            // Ben opts in through his profile, and is found from then on.
            let profilePath = "/auth/1/\(ben.container)/development/profile?\(ben.query)"
            let changed = try await harness.send(.post, profilePath, json: ["discoverable": true, "familyName": "Okafor"])
            #expect(changed.json["discoverable"] == true && changed.json["nameComponents"] == ["givenName": "Ben", "familyName": "Okafor"], "\(changed.json)")
            #expect(try await harness.send(.get, profilePath).json["discoverable"] == true)
            let again = try await ann.post("public", "users/discover", ["lookupInfos": [["emailAddress": .string("ben\(suffix)@example.com")]]])
            #expect(again.json["users"]?.arrayValue?.first?["userRecordName"]?.stringValue == ben.userRecordName, "\(again.json)")
            let cleared = try await harness.send(.post, profilePath, json: ["discoverable": false, "givenName": nil])
            #expect(cleared.json["nameComponents"] == ["familyName": "Okafor"], "\(cleared.json)")
            #expect(try await ann.post("public", "users/discover", ["lookupInfos": [["emailAddress": .string("ben\(suffix)@example.com")]]]).json["users"] == [])
        }
    }

    @Test func badDiscoveryAndProfileRequestsSayWhatIsWrong() async throws {
        try await Harness.run { harness in
            let ann = try await harness.container().signedUp()
            let tooMany = JSON.array(Array(repeating: ["emailAddress": "a@example.com"], count: 201))
            let cases: [(String, JSON, String)] = [
                ("users/discover", ["lookupInfos": "a@example.com"], "must be an array"),
                ("users/discover", ["lookupInfos": [["name": "x"]]], "needs 'emailAddress', 'userRecordName' or 'phoneNumber'"),
                ("users/discover", ["lookupInfos": [["emailAddress": 7]]], "emailAddress"),
                ("users/discover", ["lookupInfos": tooMany], "at most 200"),
                ("users/lookup/email", ["users": [["userRecordName": "_x"]]], "needs a string 'emailAddress'"),
                ("users/lookup/id", [:], "missing required key 'users'"),
            ]
            for (path, body, words) in cases {
                let answer = try await ann.post("public", path, body)
                #expect(answer.status == 400 && answer.json.errorCode == "BAD_REQUEST" && answer.json["reason"]?.stringValue?.contains(words) == true, "\(path) \(body): \(answer.json)")
            }
            let profilePath = "/auth/1/\(ann.container)/development/profile?\(ann.query)"
            for (body, words) in [(["givenName": .string(String(repeating: "x", count: 101))], "1–100"), (["discoverable": "yes"], "discoverable"),
                                  (["familyName": 3], "string or null")] as [([String: JSON], String)] {
                let answer = try await harness.send(.post, profilePath, json: .object(body))
                #expect(answer.status == 400 && answer.json["reason"]?.stringValue?.contains(words) == true, "\(body): \(answer.json)")
            }
            let noToken = try await harness.send(.get, "/auth/1/\(ann.container)/development/profile?ckAPIToken=\(ann.apiToken)")
            #expect(noToken.status == 401, "\(noToken.json)")
        }
    }
}

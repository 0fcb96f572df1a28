import Foundation
import HTTPTypes
import PostgresNIO
import StratusCore
@testable import StratusServer
import StratusStore
@testable import StratusTestSupport
import Testing

/// What real clients read of the first calls they make: `users/caller` as CloudKit JS and MistKit
/// decode it, and API tokens in the form clients check before sending anything.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct WireContractTests {
    /// CloudKit JS's `setUpAuth()` resolves to `users/caller`'s body and reads
    /// `userIdentity.userRecordName` from it; MistKit decodes `UserIdentityResponse`
    /// (`userRecordName`, `lookupInfo`, `nameComponents` at the top level).
    @Test func callerAnswersTheIdentityDictionaryItself() async throws {
        try await Harness.run { harness in
            var session = try await harness.container().signedUp("grace@example.com")
            let profile = try await harness.send(.post, "/auth/1/\(session.container)/development/profile?\(session.query)",
                                                         json: ["givenName": "Grace", "familyName": "Hopper"])
            #expect(profile.status == 200, "\(profile.json)")
            let me = try #require(session.userRecordName)
            let expected: JSON = ["userRecordName": .string(me),
                                  "lookupInfo": ["userRecordName": .string(me), "emailAddress": "grace@example.com"],
                                  "nameComponents": ["givenName": "Grace", "familyName": "Hopper"]]
            for database in ["public", "private", "shared"] {
                let got = try await session.get(database, "users/caller")
                #expect(got.status == 200 && got.json == expected, "GET \(database)/users/caller: \(got.json)")
                let posted = try await session.post(database, "users/caller", [:])
                #expect(posted.status == 200 && posted.json == expected, "POST \(database)/users/caller: \(posted.json)")
                #expect(got.json["users"] == nil, "no {users: [...]} wrapper")
            }
            // users/current keeps its legacy user dictionary.
            let current = try await session.get("public", "users/current")
            #expect(current.json == ["userRecordName": .string(me), "firstName": "Grace", "lastName": "Hopper"], "\(current.json)")
            // No user: AUTHENTICATION_REQUIRED, as before.
            session.webAuthToken = nil
            let anonymous = try await session.get("public", "users/caller")
            #expect(anonymous.status == 421 && anonymous.json.errorCode == "AUTHENTICATION_REQUIRED", "\(anonymous.json)")
        }
    }

    /// A server-to-server key's caller is `_key_<key ID>`, under whichever database the client
    /// names; other endpoints still take a key on the public database only.
    @Test func callerWithAServerKeyUnderAnyDatabase() async throws {
        try await Harness.run { harness in
            let session = try await harness.container()
            let signer = try await ServerKeyTests.addKey(harness, container: session.container)
            let keyUser = "_key_" + signer.keyID
            for database in ["public", "private", "shared"] {
                let path = "/database/1/\(session.container)/development/\(database)/users/caller"
                let got = try await ServerKeyTests.send(harness, path, method: .get, headers: signer.headers(signedPath: path, body: ""))
                #expect(got.status == 200, "\(database): \(got.json)")
                #expect(got.json == ["userRecordName": .string(keyUser), "lookupInfo": ["userRecordName": .string(keyUser)],
                                     "nameComponents": [:]], "\(database): \(got.json)")
            }
            let path = "/database/1/\(session.container)/development/private/zones/list"
            let zones = try await ServerKeyTests.send(harness, path, method: .get, headers: signer.headers(signedPath: path, body: ""))
            #expect(zones.status == 403 && zones.json.errorCode == "ACCESS_DENIED", "\(zones.json)")
        }
    }

    /// New API tokens are 64 lowercase hexadecimal characters, as Apple issues them (MistKit checks
    /// `^[a-fA-F0-9]{64}$` before it sends a request); tokens issued in the earlier `ck_…` form
    /// keep working, since tokens are looked up by their hash.
    @Test func apiTokensHaveCloudKitsForm() async throws {
        try await Harness.run { harness in
            let session = try await harness.container()
            #expect(session.apiToken.utf8.count == 64 && session.apiToken.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) },
                    "\(session.apiToken)")
            let other = try await harness.admin(.post, "containers/\(session.container)/tokens", json: ["environment": "development"])
            #expect(other.json["apiToken"]?.stringValue != session.apiToken, "each token is new")
            #expect(try await session.signedUp().get("public", "users/caller").status == 200)

            // A token in the earlier form, stored as `token create` stored it.
            let legacy = "ck_" + TokenSealer.randomToken(prefix: "")
            TestSecrets.record(legacy)
            let hash = TokenSealer.hash(legacy)
            let prefix = String(legacy.prefix(10))
            let container = session.container
            try await harness.database.withConnection { connection in
                try await connection.query("""
                    INSERT INTO api_tokens (container_id, environment, name, token_hash, token_prefix)
                    SELECT container_id, 1, 'earlier form', \(Data(hash)), \(prefix) FROM containers WHERE name = \(container)
                    """, logger: TestCluster.logger)
            }
            let old = Session(harness: harness, container: container, environment: .development, apiToken: legacy)
            let signedUp = try await old.signedUp()
            #expect(try await signedUp.get("public", "users/caller").json["userRecordName"] == signedUp.userRecordName.map { .string($0) })
        }
    }
}

import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
@testable import StratusCore
@testable import StratusServer
@testable import StratusStore
@testable import StratusTestSupport
import Testing

/// Assets (issue 27): CloudKit JS's three steps — `assets/upload`, the bytes POSTed to the URL it
/// returns, the receipt saved in `records/modify` — then the record's `downloadURL` serves the
/// same bytes; each in both asset stores.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct AssetTests {
    enum Store: String, CaseIterable, Sendable { case files, postgres }

    /// A harness on the given asset store, with `configure` applied after.
    static func run(_ store: Store, configure: @escaping @Sendable (inout ServerConfiguration) -> Void = { _ in },
                    _ body: @escaping @Sendable (Harness) async throws -> Void) async throws {
        let folder = try Programs.scratchFolder("assets")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try await Harness.run(server: { configuration in
            configuration.assetStorage = store == .files ? .files(directory: folder) : .postgres(stagingDirectory: folder + "/staging")
            configure(&configuration)
        }, body)
    }

    static func checksum(_ bytes: [UInt8]) -> String { Data(SHA256.hash(data: bytes)).base64EncodedString() }

    @Test(arguments: Store.allCases) func cloudKitJSPathUploadsAttachesAndDownloads(_ store: Store) async throws {
        try await Self.run(store) { harness in
            let alice = try await harness.container().signedUp()
            let bytes = AssetRequests.randomBytes(700_000)
            let file = try await AssetRequests.upload(alice, bytes)
            #expect(file["fileChecksum"]?.stringValue == Self.checksum(bytes) && file["size"] == .int(Int64(bytes.count)), "\(file)")
            #expect(file["receipt"]?.stringValue?.isEmpty == false)
            // Step 3, as CloudKit JS sends it: the singleFile as the field's value, no type.
            let saved = try await alice.modify("private", [op("create", "n-1", fields: ["attachment": ["value": file], "title": ["value": "photo"]])])
            #expect(saved.status == 200, "\(saved.json)")
            let savedField = saved.json.record(0)?["fields"]?["attachment"]
            #expect(savedField?["type"] == "ASSETID" && savedField?["value"]?["downloadURL"]?.stringValue != nil, "\(saved.json)")
            #expect(savedField?["value"]?["receipt"] == nil, "the receipt is not kept: \(saved.json)")
            // A lookup's downloadURL serves the same bytes, with the upload's content type.
            let found = try await alice.post("private", "records/lookup", ["records": [["recordName": "n-1"]]])
            let asset = try #require(found.json.record(0)?["fields"]?["attachment"]?["value"], "\(found.json)")
            #expect(asset["fileChecksum"] == file["fileChecksum"] && asset["size"] == file["size"])
            let url = try #require(asset["downloadURL"]?.stringValue)
            let downloaded = try await AssetRequests.raw(harness, .get, try AssetRequests.path(of: url))
            #expect(downloaded.status == 200 && downloaded.bytes.count == bytes.count)
            #expect(Self.checksum(downloaded.bytes) == Self.checksum(bytes), "the downloaded bytes differ from the uploaded ones")
            #expect(downloaded.headers[.contentType] == "image/png" && downloaded.headers[.acceptRanges] == "bytes")
            // Ranges: a middle slice, the last bytes, and one outside the file.
            let middle = try await AssetRequests.raw(harness, .get, try AssetRequests.path(of: url), headers: [.range: "bytes=300000-300099"])
            #expect(middle.status == 206 && middle.bytes == Array(bytes[300_000..<300_100]), "\(middle.status) \(middle.bytes.count)")
            #expect(middle.headers[.contentRange] == "bytes 300000-300099/700000")
            let tail = try await AssetRequests.raw(harness, .get, try AssetRequests.path(of: url), headers: [.range: "bytes=-10"])
            #expect(tail.status == 206 && tail.bytes == Array(bytes.suffix(10)))
            let outside = try await AssetRequests.raw(harness, .get, try AssetRequests.path(of: url), headers: [.range: "bytes=700000-"])
            let error = try JSONParser.parse(outside.bytes)
            #expect(outside.status == 416 && error["serverErrorCode"] == "BAD_REQUEST" && error["reason"]?.stringValue?.contains("700000") == true, "\(error)")
            // Any page may use the URLs (they are the credential): a preflight, then the answer, allow any origin.
            let preflight = try await AssetRequests.raw(harness, .options, try AssetRequests.path(of: url),
                                               headers: [.origin: "https://app.example.com", .accessControlRequestMethod: "GET"])
            #expect(preflight.status == 204 && preflight.headers[.accessControlAllowOrigin] == "*", "\(preflight.headers)")
            let crossOrigin = try await AssetRequests.raw(harness, .get, try AssetRequests.path(of: url), headers: [.origin: "https://app.example.com", .range: "bytes=0-0"])
            #expect(crossOrigin.status == 206 && crossOrigin.headers[.accessControlAllowOrigin] == "*", "\(crossOrigin.headers)")
            // A query renders the asset too; the record's stored size counts the asset's bytes.
            let queried = try await alice.post("private", "records/query", ["query": ["recordType": "Note"]])
            #expect(queried.json.record(0)?["fields"]?["attachment"]?["value"]?["downloadURL"]?.stringValue != nil, "\(queried.json)")
            let usage = try await harness.admin(.get, "containers/\(alice.container)/usage?environment=development")
            guard case .int(let bytesUsed)? = usage.json["bytes"] else { Issue.record("no bytes in \(usage.json)"); return }
            #expect(bytesUsed >= Int64(bytes.count), "usage does not count the asset: \(usage.json)")
        }
    }

    /// The same bytes uploaded twice are stored once; an asset no record holds is swept (the
    /// sweep is asked here to take assets unused for any time, as it does once receipts have
    /// expired), and the last record letting go of an asset frees it, bytes and all.
    @Test(arguments: Store.allCases) func assetsAreDeduplicatedAndFreedWithTheirLastRecord(_ store: Store) async throws {
        try await Self.run(store) { harness in
            let alice = try await harness.container().signedUp()
            let container = try await harness.app.authenticator.container(named: alice.container)
            let bytes = AssetRequests.randomBytes(50_000)
            let first = try await AssetRequests.upload(alice, bytes, recordName: "a")
            let second = try await AssetRequests.upload(alice, bytes, recordName: "b")
            #expect(first["fileChecksum"] == second["fileChecksum"])
            #expect(try await harness.app.assets.totals(containerID: container.id) == (1, 50_000))
            let unattached = try await AssetRequests.upload(alice, AssetRequests.randomBytes(1_000), recordName: "c")
            #expect(try await harness.app.assets.totals(containerID: container.id) == (2, 51_000))
            for (name, file) in [("a", first), ("b", second)] {
                let saved = try await alice.modify("private", [op("create", name, fields: ["attachment": ["value": file]])])
                #expect(saved.status == 200 && saved.json.record(0)?["serverErrorCode"] == nil, "\(saved.json)")
            }
            // The unattached upload goes; the held one stays.
            #expect(try await harness.app.assets.sweep(unusedFor: .zero) == 1)
            #expect(try await harness.app.assets.totals(containerID: container.id) == (1, 50_000))
            // Its receipt no longer attaches anything.
            let late = try await alice.modify("private", [op("create", "c", fields: ["attachment": ["value": unattached]])])
            #expect(late.json.record(0)?["serverErrorCode"] == "NOT_FOUND" && late.json.record(0)?["reason"]?.stringValue?.contains("upload it again") == true,
                    "\(late.json)")
            // One of two records lets go: still held. The other too: freed, with its bytes.
            let tagA = try #require(try await alice.post("private", "records/lookup", ["records": [["recordName": "a"]]]).json.record(0)?["recordChangeTag"])
            #expect(try await alice.modify("private", [op("delete", "a", tag: tagA.stringValue)]).status == 200)
            #expect(try await harness.app.assets.sweep(unusedFor: .zero) == 0)
            let record = try #require(try await alice.post("private", "records/lookup", ["records": [["recordName": "b"]]]).json.record(0))
            // Saving back what was read (no receipt) keeps the asset; removing the field lets it go.
            let kept = try await alice.modify("private", [op("update", "b", tag: record["recordChangeTag"]?.stringValue,
                                                          fields: ["attachment": ["value": record["fields"]?["attachment"]?["value"] ?? .null], "n": ["value": 1]])])
            #expect(kept.status == 200 && kept.json.record(0)?["serverErrorCode"] == nil, "saving back a read asset: \(kept.json)")
            #expect(try await harness.app.assets.sweep(unusedFor: .zero) == 0)
            let replaced = try await alice.modify("private", [op("update", "b", tag: kept.json.record(0)?["recordChangeTag"]?.stringValue,
                                                              fields: ["attachment": ["value": .null]])])
            #expect(replaced.json.record(0)?["serverErrorCode"] == nil, "\(replaced.json)")
            #expect(try await harness.app.assets.sweep(unusedFor: .zero) == 1)
            #expect(try await harness.app.assets.totals(containerID: container.id) == (0, 0))
            if case .files(let folder) = harness.app.configuration.assetStorage {
                let left = FileManager.default.enumerator(atPath: folder)?.allObjects.compactMap { $0 as? String }
                    .filter { !$0.hasPrefix("staging") && $0.split(separator: "/").count == 3 } ?? []
                #expect(left.isEmpty, "asset files left behind: \(left)")
            }
        }
    }

    /// `assets/rereference` gives a receipt that saves a held asset into another record and field.
    @Test func rereferencedAssetsAttachElsewhere() async throws {
        try await Self.run(.postgres) { harness in
            let alice = try await harness.container().signedUp()
            let bytes = AssetRequests.randomBytes(10_000)
            let file = try await AssetRequests.upload(alice, bytes)
            #expect(try await alice.modify("private", [op("create", "n-1", fields: ["attachment": ["value": file]])]).status == 200)
            let again = try await alice.post("private", "assets/rereference", ["assets": [["recordName": "n-1", "fieldName": "attachment"]]])
            let copy = try #require(again.json["assets"]?.arrayValue?.first, "\(again.json)")
            #expect(copy["fileChecksum"] == file["fileChecksum"] && copy["receipt"]?.stringValue != nil, "\(again.json)")
            let saved = try await alice.modify("private", [op("create", "p-1", type: "Photo", fields: ["image": ["value": copy]])])
            #expect(saved.status == 200 && saved.json.record(0)?["fields"]?["image"]?["value"]?["downloadURL"] != nil, "\(saved.json)")
            let missing = try await alice.post("private", "assets/rereference", ["assets": [["recordName": "n-1", "fieldName": "nothing"]]])
            #expect(missing.json["assets"]?.arrayValue?.first?["serverErrorCode"] == "BAD_REQUEST", "\(missing.json)")
        }
    }

    /// An asset's bytes count in its record's size: the owner's private storage quota refuses a
    /// record whose asset does not fit, and the counters match a recount of the data afterwards
    /// (the harness verifies usage after every test).
    @Test func assetBytesCountInTheOwnersQuota() async throws {
        try await Self.run(.files) { harness in
            let alice = try await harness.container().signedUp()
            #expect(try await harness.admin(.patch, "containers/\(alice.container)/quota",
                                            json: ["environment": "development", "userPrivateStorageBytes": 30_000]).status == 200)
            let first = try await AssetRequests.upload(alice, AssetRequests.randomBytes(20_000), recordName: "a")
            let saved = try await alice.modify("private", [op("create", "a", fields: ["attachment": ["value": first]])])
            #expect(saved.json.record(0)?["serverErrorCode"] == nil, "\(saved.json)")
            let second = try await AssetRequests.upload(alice, AssetRequests.randomBytes(20_000), recordName: "b")
            let refused = try await alice.modify("private", [op("create", "b", fields: ["attachment": ["value": second]])])
            #expect(refused.json.record(0)?["serverErrorCode"] == "QUOTA_EXCEEDED", "\(refused.json)")
            let usage = try await harness.admin(.get, "containers/\(alice.container)/usage?environment=development")
            let top = usage.json["topUsers"]?.arrayValue?.first
            guard case .int(let bytes)? = top?["bytes"] else { Issue.record("no user usage in \(usage.json)"); return }
            #expect(bytes >= 20_000 && bytes < 21_000, "the owner's bytes should be the asset plus a small record: \(usage.json)")
            #expect(usage.json["storedAssets"] == ["count": 2, "bytes": 40_000], "\(usage.json)")
        }
    }

    /// Public-database assets follow READ grants: a record only its creator may read gives
    /// nobody else a download URL (nor a receipt to copy it); one the world may read gives everyone.
    @Test func publicAssetsFollowReadGrants() async throws {
        try await Self.run(.postgres) { harness in
            let anonymous = try await harness.container()
            let schema = """
                DEFINE SCHEMA
                  RECORD TYPE Diary ("___recordID" REFERENCE QUERYABLE, page ASSET, GRANT READ, WRITE TO "_creator", GRANT CREATE TO "_icloud");
                  RECORD TYPE Poster ("___recordID" REFERENCE QUERYABLE, page ASSET, GRANT WRITE TO "_creator", GRANT CREATE TO "_icloud", GRANT READ TO "_world");
                """
            let imported = try await harness.admin(.post, "containers/\(anonymous.container)/schema/import", json: ["schema": .string(schema)])
            #expect(imported.status == 200, "\(imported.json)")
            let alice = try await anonymous.signedUp()
            let bob = try await anonymous.signedUp()
            for (type, name) in [("Diary", "d1"), ("Poster", "p1")] {
                let file = try await AssetRequests.upload(alice, AssetRequests.randomBytes(3_000), database: "public", recordName: name, recordType: type, field: "page")
                let saved = try await alice.modify("public", [op("create", name, type: type, fields: ["page": ["value": file]])])
                #expect(saved.json.record(0)?["fields"]?["page"]?["value"]?["downloadURL"] != nil, "\(saved.json)")
            }
            let diary = try await bob.post("public", "records/lookup", ["records": [["recordName": "d1"]]])
            #expect(diary.json.record(0)?["serverErrorCode"] == "ACCESS_DENIED" && diary.json.record(0)?["fields"] == nil, "\(diary.json)")
            let copy = try await bob.post("public", "assets/rereference", ["assets": [["recordName": "d1", "fieldName": "page"]]])
            #expect(copy.json["assets"]?.arrayValue?.first?["receipt"] == nil, "\(copy.json)")
            let poster = try await anonymous.post("public", "records/lookup", ["records": [["recordName": "p1"]]])
            let url = try #require(poster.json.record(0)?["fields"]?["page"]?["value"]?["downloadURL"]?.stringValue, "\(poster.json)")
            #expect(try await AssetRequests.raw(harness, .get, try AssetRequests.path(of: url)).bytes.count == 3_000)
        }
    }

    /// The bad-input catalogue of assets: each refused with a clear CKWS error, nothing stored.
    @Test func badUploadsAndReceiptsAreRefusedAndStoreNothing() async throws {
        try await Self.run(.files, configure: { $0.maximumAssetBytes = 100_000 }) { harness in
            let alice = try await harness.container().signedUp()
            let bob = try await harness.container().signedUp()
            let container = try await harness.app.authenticator.container(named: alice.container)
            func tokenPath(_ session: Session, field: String = "attachment") async throws -> String {
                let tokens = try await session.post("private", "assets/upload", ["tokens": [["recordType": "Note", "fieldName": .string(field)]]])
                return try AssetRequests.path(of: try #require(tokens.json["tokens"]?.arrayValue?.first?["url"]?.stringValue, "\(tokens.json)"))
            }
            // Over the size limit: by Content-Length, before reading.
            let big = try await AssetRequests.raw(harness, .post, try await tokenPath(alice), body: AssetRequests.randomBytes(100_001))
            #expect(try big.status == 413 && (JSONParser.parse(big.bytes))["reason"]?.stringValue?.contains("at most 100000 bytes") == true,
                    "\(String(decoding: big.bytes, as: UTF8.self))")
            // A Content-Digest that does not match the bytes.
            let wrongDigest = try await AssetRequests.raw(harness, .post, try await tokenPath(alice), body: AssetRequests.randomBytes(1_000),
                                                 headers: [HTTPField.Name("Content-Digest")!: "sha-256=:\(Self.checksum([1, 2, 3])):"])
            #expect(try wrongDigest.status == 400 && (JSONParser.parse(wrongDigest.bytes))["reason"]?.stringValue?.contains("Content-Digest") == true)
            // A forged URL, and an expired one.
            let forged = try await AssetRequests.raw(harness, .post, "/assets/1/upload/eyJjIjoxfQ.AAAA", body: [1, 2, 3])
            #expect(try forged.status == 401 && (JSONParser.parse(forged.bytes))["serverErrorCode"] == "AUTHENTICATION_FAILED")
            // An expired URL: made by a server process whose upload URLs expire at once (same database, same secret).
            var instant = harness.app.configuration
            instant.uploadURLLifetime = .zero
            let quick = try await StratusApp.make(database: harness.database, configuration: instant, logger: TestCluster.logger)
            let stale = try await TestApp.run(router: quick.router(), logger: TestCluster.logger, mode: .router) { client in
                let tokens = try await Harness(client: client, database: harness.database, app: quick).send(
                    .post, alice.path("private", "assets/upload"), json: ["tokens": [["recordType": "Note", "fieldName": "attachment"]]])
                return try AssetRequests.path(of: try #require(tokens.json["tokens"]?.arrayValue?.first?["url"]?.stringValue, "\(tokens.json)"))
            }
            let expired = try await AssetRequests.raw(harness, .post, stale, body: [1, 2, 3])
            #expect(try expired.status == 401 && (JSONParser.parse(expired.bytes))["reason"]?.stringValue?.contains("expired") == true)
            #expect(try await harness.app.assets.totals(containerID: container.id) == (0, 0), "a refused upload left an asset")
            // Receipts: another field, another user's (another container), a changed size, none at all.
            let file = try await AssetRequests.upload(alice, AssetRequests.randomBytes(2_000))
            let otherField = try await alice.modify("private", [op("create", "x1", fields: ["cover": ["value": file]])])
            #expect(otherField.json.record(0)?["reason"]?.stringValue?.contains("is for field 'attachment'") == true, "\(otherField.json)")
            let foreign = try await bob.modify("private", [op("create", "x2", fields: ["attachment": ["value": file]])])
            #expect(foreign.json.record(0)?["serverErrorCode"] == "BAD_REQUEST" && foreign.json.record(0)?["reason"]?.stringValue?.contains("another container") == true,
                    "\(foreign.json)")
            var resized = file
            if case .object(var members) = resized { members["size"] = 1; resized = .object(members) }
            let wrongSize = try await alice.modify("private", [op("create", "x3", fields: ["attachment": ["value": resized]])])
            #expect(wrongSize.json.record(0)?["reason"]?.stringValue?.contains("not what its upload returned") == true, "\(wrongSize.json)")
            let noReceipt = try await alice.modify("private", [op("create", "x4", fields: ["attachment": ["value": ["fileChecksum": file["fileChecksum"] ?? .null, "size": 2000]]])])
            #expect(noReceipt.json.record(0)?["reason"]?.stringValue?.contains("receipt") == true, "\(noReceipt.json)")
            let badChecksum = try await alice.modify("private", [op("create", "x5", fields: ["attachment": ["value": ["fileChecksum": "abc", "size": 3, "receipt": "r"]]])])
            #expect(badChecksum.json.record(0)?["serverErrorCode"] == "BAD_REQUEST", "\(badChecksum.json)")
            // assets/upload itself: no tokens, a field of another type, a signed-out caller.
            #expect(try await alice.post("private", "assets/upload", ["tokens": []]).status == 400)
            #expect(try await alice.modify("private", [op("create", "t1", fields: ["title": ["value": "text"]])]).status == 200)
            let typed = try await alice.post("private", "assets/upload", ["tokens": [["recordType": "Note", "fieldName": "title"]]])
            #expect(typed.status == 400 && typed.json["reason"]?.stringValue?.contains("STRING") == true, "\(typed.json)")
            var signedOut = alice
            signedOut.webAuthToken = nil
            #expect(try await signedOut.post("public", "assets/upload", ["tokens": [["recordType": "Note", "fieldName": "a"]]]).status == 421)
            // A download URL that was tampered with.
            let saved = try await alice.modify("private", [op("create", "ok", fields: ["attachment": ["value": file]])])
            let url = try #require(saved.json.record(0)?["fields"]?["attachment"]?["value"]?["downloadURL"]?.stringValue, "\(saved.json)")
            let tampered = try await AssetRequests.raw(harness, .get, try AssetRequests.path(of: url) + "x")
            #expect(tampered.status == 401)
        }
    }
}

import Foundation
import PostgresNIO
import StratusCore
@testable import StratusServer
import StratusStore
@testable import StratusTestSupport
import Testing

/// What the source server's part hands to the target's.
final class Kept: @unchecked Sendable {
    var tokenBefore = ""
    var databaseTokenBefore = ""
    var changedAfterToken: Set<String> = []
    var deletedAfterToken: Set<String> = []
    var sourceDigest: [String: String] = [:]
    var sourceDatabase: DatabaseConfiguration?
    var apiToken = ""
}

/// `stratus container export|import` (issue 28): a container with many records moves to a
/// fresh server — a PostgreSQL cluster of its own, whose transaction ids start far below the
/// source's — with identical records, and a sync token taken before the export goes on working.
@Suite(.timeLimit(.minutes(TestTime.minutes(15)))) struct ContainerTransferTests {
    /// Records written: 20,000 in the suite; `STRATUS_TRANSFER_RECORDS=100000` for the issue's
    /// size. Written through the API beside the whole suite, 100,000 took the test to six minutes
    /// on 2 cores and starved its neighbours into their time limits; the export and import paths
    /// are the same at any size (rows go in batches), so the suite runs the smaller one.
    static let recordCount = Int(ProcessInfo.processInfo.environment["STRATUS_TRANSFER_RECORDS"] ?? "") ?? 20_000

    /// A PostgreSQL cluster of its own with a migrated `stratus` database, for `body`; removed afterwards.
    static func withFreshCluster(_ body: (DatabaseConfiguration) async throws -> Void) async throws {
        let folder = try Programs.scratchFolder("transfer-target")
        let cluster = try await Subprocess.onOwnThread { try EmbeddedPostgres.start(directory: folder, logger: TestCluster.logger, maximumConnections: 50) }
        let outcome: Result<Void, any Error>
        do {
            try await withDatabase(cluster.configuration, maximumConnections: 1) { db in
                _ = try await db.withConnection { try await $0.query("CREATE DATABASE stratus", logger: TestCluster.logger) }
            }
            let target = cluster.configuration.with(database: "stratus")
            let migrations = try Migration.load(from: TestCluster.repositoryRoot.appendingPathComponent("Migrations"))
            try await withDatabase(target, maximumConnections: 1) { db in
                _ = try await MigrationRunner(migrations: migrations, logger: TestCluster.logger).run(on: db)
            }
            try await body(target)
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        // `pg_ctl stop` waits for the cluster: on a thread of its own, not the cooperative pool's.
        _ = try? await Subprocess.onOwnThread { cluster.stop() }
        try? FileManager.default.removeItem(atPath: cluster.dataDirectory)
        try? FileManager.default.removeItem(atPath: folder)
        try outcome.get()
    }

    static func url(_ configuration: DatabaseConfiguration) -> String {
        "postgres://\(configuration.username):\(configuration.password ?? "")@\(configuration.host):\(configuration.port)/\(configuration.database)"
    }

    /// Runs the CLI; its output (progress lines on stderr included).
    static func stratus(_ arguments: [String]) async throws -> Subprocess.Output {
        try await Subprocess.runDetached([Programs.binary] + arguments)
    }

    /// Every change of the zone after `token` (to the end of the feed): record name → (change tag, deleted), and the last token.
    static func drain(_ session: Session, zone: String, from token: String?) async throws -> (changes: [String: (String, Bool)], token: String) {
        var changes: [String: (String, Bool)] = [:]
        var token = token
        while true {
            var entry: [String: JSON] = ["zoneID": ["zoneName": .string(zone)], "resultsLimit": 200]
            if let token { entry["syncToken"] = .string(token) }
            let page = try await session.post("private", "changes/zone", ["zones": [.object(entry)]])
            let zone = try #require(page.json["zones"]?.arrayValue?.first, "\(page.json)")
            try #require(page.status == 200 && zone["serverErrorCode"] == nil, "changes/zone: \(page.json)")
            for record in zone["records"]?.arrayValue ?? [] {
                guard let name = record["recordName"]?.stringValue else { continue }
                changes[name] = (record["recordChangeTag"]?.stringValue ?? "", record["deleted"] == true)
            }
            token = try #require(zone["syncToken"]?.stringValue)
            if zone["moreComing"] != true { return (changes, token!) }
        }
    }

    /// Creates `names` in `zone`, 200 a request, four requests at a time.
    static func create(_ session: Session, zone: String, _ names: [String]) async throws {
        let batches = stride(from: 0, to: names.count, by: 200).map { Array(names[$0..<min($0 + 200, names.count)]) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, batch) in batches.enumerated() {
                if index >= 4 { try await group.next() }
                group.addTask {
                    let saved = try await session.modify("private", zone: zone, batch.map {
                        op("create", $0, fields: ["title": ["value": .string("note \($0)")], "n": ["value": .int(Int64($0.count))]])
                    })
                    #expect(saved.status == 200 && saved.json["records"]?.arrayValue?.allSatisfy { $0["serverErrorCode"] == nil } == true,
                            "\(saved.json["records"]?.arrayValue?.first(where: { $0["serverErrorCode"] != nil }) ?? saved.json)")
                }
            }
            try await group.waitForAll()
        }
    }

    /// A digest of the container's stored state (records, zones, users, schema), to compare two servers.
    static func digest(_ configuration: DatabaseConfiguration, container: String) async throws -> [String: String] {
        try await withDatabase(configuration, maximumConnections: 1) { db in
            try await db.withConnection { connection in
                var digests: [String: String] = [:]
                let queries = [
                    "records": "SELECT count(*) || ':' || md5(string_agg(concat_ws('|', zone_id, record_name, record_type, change_seq, deleted, fields::text, size, created_by, modified_by), ',' ORDER BY zone_id, record_name)) FROM records",
                    "zones": "SELECT count(*) || ':' || md5(string_agg(concat_ws('|', zone_id, environment, database_scope, owner, zone_name, deleted), ',' ORDER BY zone_id)) FROM zones",
                    "users": "SELECT count(*) || ':' || md5(string_agg(concat_ws('|', user_record_name, email, password_hash), ',' ORDER BY user_record_name)) FROM users",
                    "index_entries": "SELECT count(*)::text FROM index_entries",
                ]
                for (name, sql) in queries {
                    let scoped = sql + " WHERE container_id = (SELECT container_id FROM containers WHERE name = '\(container)')"
                    var value: String?
                    for try await row in try await connection.query(PostgresQuery(unsafeSQL: scoped), logger: TestCluster.logger) {
                        value = try row.decode(String?.self)
                    }
                    digests[name] = value ?? "none"
                }
                return digests
            }
        }
    }

    @Test func aContainerMovesToAFreshServerWithIdenticalRecordsAndItsSyncTokensKeepWorking() async throws {
        let folder = try Programs.scratchFolder("transfer")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = folder + "/notes.stratus"
        let assetFolder = folder + "/assets"
        let email = "transfer\(UInt32.random(in: 0...UInt32.max))@example.com"
        let name = "iCloud.com.example.Transfer\(UInt32.random(in: 0...UInt32.max))"
        let first = 2_000
        let kept = Kept()
        let bytes = AssetRequests.randomBytes(300_000)
        let started = ContinuousClock.now

        try await Harness.run { source in
            let alice = try await source.container(name).signedUp(email)
            kept.sourceDatabase = source.database.configuration
            kept.apiToken = alice.apiToken
            let zone = try await alice.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Transfer"]]]]])
            #expect(zone.status == 200, "\(zone.json)")
            // The first records, then the token a client holds from before the export.
            try await Self.create(alice, zone: "Transfer", (0..<first).map { "early-\($0)" })
            let database = try await alice.post("private", "changes/database", [:])
            kept.databaseTokenBefore = try #require(database.json["syncToken"]?.stringValue)
            kept.tokenBefore = try await Self.drain(alice, zone: "Transfer", from: nil).token
            // After it: the rest, 100 early records changed and 100 deleted, and an asset.
            let later = (0..<(Self.recordCount - first)).map { "late-\($0)" }
            try await Self.create(alice, zone: "Transfer", later)
            kept.changedAfterToken = Set(later)
            let found = try await alice.post("private", "records/lookup", ["zoneID": ["zoneName": "Transfer"],
                                                                         "records": .array((0..<200).map { ["recordName": .string("early-\($0)")] })])
            let tags = (found.json["records"]?.arrayValue ?? []).map { $0["recordChangeTag"]?.stringValue ?? "" }
            let updates = (0..<100).map { op("update", "early-\($0)", tag: tags[$0], fields: ["title": ["value": "changed"]]) }
            let deletions = (100..<200).map { op("forceDelete", "early-\($0)", type: nil) }
            let changed = try await alice.modify("private", zone: "Transfer", updates + deletions)
            #expect(changed.status == 200 && changed.json["records"]?.arrayValue?.allSatisfy { $0["serverErrorCode"] == nil } == true, "\(changed.json)")
            kept.changedAfterToken.formUnion((0..<100).map { "early-\($0)" })
            kept.deletedAfterToken = Set((100..<200).map { "early-\($0)" })
            let file = try await AssetRequests.upload(alice, bytes)
            let attached = try await alice.modify("private", [op("create", "n-1", fields: ["attachment": ["value": file]])])
            #expect(attached.status == 200, "\(attached.json)")
            print("transfer: \(Self.recordCount) records written in \(ContinuousClock.now - started)")
            kept.sourceDigest = try await Self.digest(source.database.configuration, container: name)
        }
        let sourceURL = Self.url(try #require(kept.sourceDatabase))

        // Export (while nothing writes: the digest above is the state it must carry).
        let exportStarted = ContinuousClock.now
        let exported = try await Self.stratus(["container", "export", "--container", name, "--output", file, "--database-url", sourceURL,
                                               "--asset-store", "postgres", "--asset-dir", assetFolder])
        #expect(exported.status == 0, "export: \(exported.text.suffix(2000))")
        let exportTime = ContinuousClock.now - exportStarted
        // Every record row (the user's own record, the asset's holder and the tombstones too).
        let storedRecords = try #require(kept.sourceDigest["records"]?.split(separator: ":").first.flatMap { Int($0) })
        #expect(storedRecords >= Self.recordCount + 1, "\(kept.sourceDigest)")
        #expect(exported.text.contains("wrote \(file): container \(name), \(storedRecords) records, 1 assets (\(bytes.count) bytes)"), "\(exported.text.suffix(600))")
        #expect(exported.text.contains("exporting: 100%"), "no progress shown: \(exported.text.suffix(600))")
        // Exporting again to the same file is refused; an unknown container is named.
        let again = try await Self.stratus(["container", "export", "--container", name, "--output", file, "--database-url", sourceURL])
        #expect(again.status != 0 && again.text.contains("already exists"), "\(again.text)")
        let unknown = try await Self.stratus(["container", "export", "--container", "iCloud.nope", "--output", folder + "/x", "--database-url", sourceURL])
        #expect(unknown.status != 0 && unknown.text.contains("no container named 'iCloud.nope'"), "\(unknown.text)")
        #expect(!FileManager.default.fileExists(atPath: folder + "/x"), "a failed export left its file")

        try await Self.withFreshCluster { target in
            let targetURL = Self.url(target)
            // A file cut short is refused whole.
            let whole = try Data(contentsOf: URL(fileURLWithPath: file))
            try whole.prefix(whole.count * 2 / 3).write(to: URL(fileURLWithPath: folder + "/cut.stratus"))
            let cut = try await Self.stratus(["container", "import", "--input", folder + "/cut.stratus", "--database-url", targetURL,
                                              "--asset-store", "postgres", "--asset-dir", assetFolder])
            #expect(cut.status != 0 && cut.text.contains("nothing was imported"), "\(cut.text.suffix(600))")

            let importStarted = ContinuousClock.now
            let imported = try await Self.stratus(["container", "import", "--input", file, "--database-url", targetURL,
                                                   "--asset-store", "postgres", "--asset-dir", assetFolder])
            #expect(imported.status == 0, "import: \(imported.text.suffix(2000))")
            let importTime = ContinuousClock.now - importStarted
            let fileSize = (try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? 0
            print("transfer: export \(exportTime), import \(importTime), file \(fileSize) bytes (debug build)")
            #expect(imported.text.contains("imported container \(name): \(storedRecords) records, 1 assets"), "\(imported.text.suffix(600))")
            // The target cluster is young: its transaction ids are below the source's, so positions had to move.
            #expect(imported.text.contains("change positions moved down by"), "\(imported.text.suffix(300))")
            let twice = try await Self.stratus(["container", "import", "--input", file, "--database-url", targetURL,
                                                "--asset-store", "postgres", "--asset-dir", assetFolder])
            #expect(twice.status != 0 && twice.text.contains("already exists"), "\(twice.text.suffix(300))")

            // Identical stored state: records (names, types, fields, change tags, sizes, creators), zones, users, usage.
            let targetDigest = try await Self.digest(target, container: name)
            #expect(targetDigest == kept.sourceDigest, "source \(kept.sourceDigest) target \(targetDigest)")

            try await Harness.run(on: target) { harness in
                // The same API token and user work on the new server (after signing in again).
                var session = Session(harness: harness, container: name, environment: .development, apiToken: kept.apiToken)
                let signedIn = try await session.signedIn(email)
                #expect(signedIn.status == 200, "sign-in after import: \(signedIn.json)")
                session = signedIn.session

                // The token from before the export: every change after it, and nothing before it.
                let delta = try await Self.drain(session, zone: "Transfer", from: kept.tokenBefore)
                let expected = kept.changedAfterToken.union(kept.deletedAfterToken)
                #expect(Set(delta.changes.keys) == expected,
                        "after the old token: \(delta.changes.count) changes, expected \(expected.count); missing \(expected.subtracting(delta.changes.keys).prefix(5)), extra \(Set(delta.changes.keys).subtracting(expected).prefix(5))")
                #expect(kept.deletedAfterToken.allSatisfy { delta.changes[$0]?.1 == true }, "deletions not reported as deleted")
                // A write on the new server follows: the feed from the last token holds exactly it.
                let written = try await session.modify("private", zone: "Transfer", [op("create", "after-import", fields: ["title": ["value": "new"]])])
                #expect(written.status == 200 && written.json.record(0)?["serverErrorCode"] == nil, "\(written.json)")
                let next = try await Self.drain(session, zone: "Transfer", from: delta.token)
                #expect(Array(next.changes.keys) == ["after-import"], "after the import: \(next.changes.keys.sorted().prefix(5))")
                // And the old token, used again, now also holds it.
                let oldAgain = try await Self.drain(session, zone: "Transfer", from: kept.tokenBefore)
                #expect(oldAgain.changes.count == expected.count + 1 && oldAgain.changes["after-import"] != nil)
                // The database feed's old token lists the zone that changed.
                let zones = try await session.post("private", "changes/database", ["syncToken": .string(kept.databaseTokenBefore)])
                #expect(zones.status == 200 && (zones.json["zones"]?.arrayValue ?? []).contains { $0["zoneID"]?["zoneName"] == "Transfer" }, "\(zones.json)")
                // The asset's bytes came along.
                let found = try await session.post("private", "records/lookup", ["records": [["recordName": "n-1"]]])
                let url = try #require(found.json.record(0)?["fields"]?["attachment"]?["value"]?["downloadURL"]?.stringValue, "\(found.json)")
                let downloaded = try await AssetRequests.raw(harness, .get, try AssetRequests.path(of: url))
                #expect(downloaded.status == 200 && downloaded.bytes == bytes, "asset after import: \(downloaded.status), \(downloaded.bytes.count) bytes")
                // Another server's token is still refused.
                let forged = try await session.post("private", "changes/zone", ["zones": [["zoneID": ["zoneName": "Transfer"], "syncToken": "eyJ4IjoxfQ.AAAA"]]])
                #expect(forged.json["zones"]?.arrayValue?.first?["serverErrorCode"] == "BAD_REQUEST", "\(forged.json)")
                // The audit log says what happened.
                let audit = try await harness.admin(.get, "containers/\(name)/audit")
                #expect("\(audit.json)".contains("container.import"), "\(audit.json)")
                print("transfer: \(storedRecords) records exported and imported into a fresh cluster; \(delta.changes.count) changes after the old token, all present; "
                      + "the new write follows; \(ContinuousClock.now - started) in all")
            }
        }
    }

}

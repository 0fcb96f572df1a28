import Foundation
import PostgresNIO
import StratusCore
import StratusStore
@testable import StratusTestSupport
import Testing

/// Quotas (issue 25): storage limits enforced exactly under concurrency, metered in the writes'
/// own transactions, and checked against a recount.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct QuotaEnforcementTests {
    /// Hands out record names to racing clients until `total` have been handed out.
    actor Names {
        let prefix: String
        let total: Int
        var next = 0
        init(prefix: String, total: Int) {
            self.prefix = prefix
            self.total = total
        }
        func take(_ count: Int) -> [String] {
            let end = min(next + count, total)
            defer { next = end }
            return (next..<end).map { "\(prefix)-\($0)" }
        }
    }

    /// What a race's answers add up to.
    struct Tally: Sendable {
        var saved: [String] = []
        var refused = 0
        var unexpected: [String] = []
        /// Batches answered TRY_AGAIN_LATER (a lock wait ran out) and sent again, as clients do.
        var retried = 0

        mutating func add(_ other: Tally) {
            saved += other.saved
            refused += other.refused
            unexpected += other.unexpected
            retried += other.retried
        }
    }

    /// The four shapes a client sends: one record (the optimistic path), non-atomic batches in the
    /// default and a custom zone, and atomic batches (refused whole) in the custom zone.
    static func race(_ session: Session, names: Names, clients: Int, fields: [String: JSON] = [:]) async throws -> Tally {
        try await withThrowingTaskGroup(of: Tally.self) { group in
            for client in 0..<clients {
                group.addTask {
                    var tally = Tally()
                    let (size, zone, atomic): (Int, String?, Bool?) = [(1, nil, nil), (10, nil, false), (10, "Q", true), (5, "Q", false)][client % 4]
                    while true {
                        let batch = await names.take(size)
                        if batch.isEmpty { return tally }
                        var response = try await session.modify("private", zone: zone, atomic: atomic, batch.map { op("create", $0, fields: fields) })
                        // TRY_AGAIN_LATER asks the client to send the same request again after
                        // retryAfter seconds; a few times, then it counts as unexpected.
                        for _ in 0..<3 where response.status == 503 && response.json["serverErrorCode"] == "TRY_AGAIN_LATER" {
                            tally.retried += 1
                            try await Task.sleep(for: .seconds(Int(response.json["retryAfter"]?.intValue ?? 1)))
                            response = try await session.modify("private", zone: zone, atomic: atomic, batch.map { op("create", $0, fields: fields) })
                        }
                        let results = response.json["records"]?.arrayValue ?? []
                        guard response.status == 200, results.count == batch.count else {
                            tally.unexpected.append("HTTP \(response.status): \(response.json)")
                            continue
                        }
                        let codes = results.compactMap { $0["serverErrorCode"]?.stringValue }
                        for result in results {
                            switch result["serverErrorCode"]?.stringValue {
                            case nil where result["recordChangeTag"] != nil:
                                tally.saved.append(result["recordName"]?.stringValue ?? "?")
                            case "QUOTA_EXCEEDED":
                                tally.refused += 1
                                if result["reason"]?.stringValue?.contains("quota") != true { tally.unexpected.append("\(result)") }
                            case "ATOMIC_ERROR" where atomic == true && codes.contains("QUOTA_EXCEEDED"):
                                tally.refused += 1
                            default:
                                tally.unexpected.append("\(result)")
                            }
                        }
                    }
                }
            }
            var total = Tally()
            for try await tally in group { total.add(tally) }
            return total
        }
    }

    /// `stratus usage --verify`. Asked again (up to five times, a second apart) while the server
    /// answers TRY_AGAIN_LATER: on a Citus cluster under the suites' concurrency a worker can
    /// refuse a connection for a moment, which says nothing about the counters.
    static func verify(_ harness: Harness) async throws -> (status: Int32, text: String) {
        var attempt = 0
        while true {
            let output = try await Programs.cli(["usage", "--verify"], server: "http://127.0.0.1:\(harness.client.port ?? 0)", token: Harness.adminToken)
            attempt += 1
            guard output.status != 0, output.text.contains("TRY_AGAIN_LATER"), attempt < 5 else { return (output.status, output.text) }
            try await Task.sleep(for: .seconds(1))
        }
    }

    @Test func racingClientsGetExactlyTheRecordQuotaAndDeletesFreeIt() async throws {
        try await Harness.run(live: true, poolSize: 16) { harness in
            let session = try await harness.container().signedUp()
            #expect(try await harness.admin(.patch, "containers/\(session.container)/quota", json: ["environment": "development", "maxRecords": 1000]).status == 200)
            #expect(try await session.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Q"]]]]]).status == 200)

            // The user's `Users` record in the public database counts: room for 999.
            guard case .int(let existing)? = try await harness.admin(.get, "containers/\(session.container)/usage?environment=development").json["records"] else {
                Issue.record("no usage")
                return
            }
            #expect(existing == 1)
            let room = 1000 - Int(existing)
            let first = try await Self.race(session, names: Names(prefix: "a", total: 2000), clients: 32)
            print("quota race: 2000 creates by 32 clients, \(first.saved.count) saved, \(first.refused) refused, \(first.retried) batches sent again after TRY_AGAIN_LATER")
            #expect(first.unexpected.isEmpty, "\(first.unexpected.prefix(5))")
            #expect(first.saved.count == room && first.refused == 2000 - room, "saved \(first.saved.count), refused \(first.refused)")
            var usage = try await harness.admin(.get, "containers/\(session.container)/usage?environment=development")
            #expect(usage.json["records"] == 1000 && usage.json["topUsers"]?.arrayValue?.first?["records"] == .int(Int64(room)), "\(usage.json)")

            // Deleting frees capacity at once: 300 deleted by concurrent requests, then 600 more
            // racing creates get exactly those 300 places.
            let victims = Array(first.saved.filter { !$0.isEmpty }.prefix(300))
            try await withThrowingTaskGroup(of: Void.self) { group in
                for chunk in stride(from: 0, to: victims.count, by: 30) {
                    let names = victims[chunk..<min(chunk + 30, victims.count)]
                    group.addTask {
                        // Each name was saved in the default zone or in Q: delete it in both (forceDelete of a missing one is no error).
                        for zone in [nil, "Q"] as [String?] {
                            let response = try await session.modify("private", zone: zone, atomic: false, names.map { op("forceDelete", $0) })
                            #expect(response.status == 200 && !"\(response.json)".contains("serverErrorCode"), "\(response.json)")
                        }
                    }
                }
                try await group.waitForAll()
            }
            let second = try await Self.race(session, names: Names(prefix: "b", total: 600), clients: 32)
            #expect(second.unexpected.isEmpty, "\(second.unexpected.prefix(5))")
            #expect(second.saved.count == 300 && second.refused == 300, "saved \(second.saved.count), refused \(second.refused)")
            usage = try await harness.admin(.get, "containers/\(session.container)/usage?environment=development")
            #expect(usage.json["records"] == 1000, "\(usage.json)")

            // A lowered limit: nothing grows, deletes still work.
            #expect(try await harness.admin(.patch, "containers/\(session.container)/quota", json: ["environment": "development", "maxRecords": 900]).status == 200)
            let over = try await session.modify("private", [op("create", "over")])
            #expect(over.json.record(0)?["serverErrorCode"] == "QUOTA_EXCEEDED", "\(over.json)")
            #expect(over.json.record(0)?["reason"]?.stringValue?.contains("record quota") == true, "\(over.json)")
            let deleted = try await session.modify("private", zone: "Q", [op("forceDelete", second.saved.first ?? "")])
            #expect(!"\(deleted.json)".contains("serverErrorCode"), "\(deleted.json)")

            let verified = try await Self.verify(harness)
            #expect(verified.status == 0 && verified.text.contains("usage verified"), "\(verified.text)")
        }
    }

    @Test func storageBytesAreCountedExactlyAndEnforcedUnderARace() async throws {
        try await Harness.run(live: true, poolSize: 16) { harness in
            let session = try await harness.container().signedUp()
            #expect(try await session.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Q"]]]]]).status == 200)
            let fields: [String: JSON] = ["body": ["value": .string(String(repeating: "x", count: 1000))]]
            let before = try await harness.admin(.get, "containers/\(session.container)/usage?environment=development")
            #expect(try await session.modify("private", [op("create", "probe", fields: fields)]).status == 200)
            let probe = try await harness.admin(.get, "containers/\(session.container)/usage?environment=development")
            guard case .int(let base)? = before.json["bytes"], case .int(let after)? = probe.json["bytes"] else { Issue.record("no bytes in \(probe.json)"); return }
            let size = after - base
            #expect(size > 1000 && size < 1100, "\(probe.json)")
            // Room for 150 more records of this size and half of one.
            let limit = base + size * 151 + size / 2
            #expect(try await harness.admin(.patch, "containers/\(session.container)/quota", json: ["environment": "development", "maxStorageBytes": .int(limit)]).status == 200)

            let race = try await Self.race(session, names: Names(prefix: "s", total: 400), clients: 32, fields: fields)
            #expect(race.unexpected.isEmpty, "\(race.unexpected.prefix(5))")
            #expect(race.saved.count == 150 && race.refused == 250, "saved \(race.saved.count), refused \(race.refused)")
            let usage = try await harness.admin(.get, "containers/\(session.container)/usage?environment=development")
            #expect(usage.json["bytes"] == .int(base + size * 151) && usage.json["records"] == 152, "\(usage.json)")

            // Updates that grow a record count too; one that shrinks it is always allowed.
            let lookup = try await session.post("private", "records/lookup", ["records": [["recordName": "probe"]]])
            let tag = lookup.json.record(0)?["recordChangeTag"]?.stringValue
            let grown = try await session.modify("private", [op("update", "probe", tag: tag, fields: ["body": ["value": .string(String(repeating: "y", count: 2000))]])])
            #expect(grown.json.record(0)?["serverErrorCode"] == "QUOTA_EXCEEDED", "\(grown.json)")
            let shrunk = try await session.modify("private", [op("update", "probe", tag: tag, fields: ["body": ["value": "short"]])])
            #expect(shrunk.json.record(0)?["recordChangeTag"] != nil, "\(shrunk.json)")

            let verified = try await Self.verify(harness)
            #expect(verified.status == 0, "\(verified.text)")
        }
    }

    @Test func aUsersPrivateStorageIsTheirOwnAndSharedRecordsCountAgainstTheirOwner() async throws {
        try await Harness.run(live: true) { harness in
            let alice = try await harness.container().signedUp()
            let bob = try await Session(harness: harness, container: alice.container, environment: .development, apiToken: alice.apiToken).signedUp()
            #expect(try await harness.admin(.patch, "containers/\(alice.container)/quota", json: ["environment": "development", "userPrivateStorageBytes": 5000]).status == 200)
            let fields: [String: JSON] = ["body": ["value": .string(String(repeating: "x", count: 1000))]]
            var saved = 0
            for index in 0..<8 {
                let response = try await alice.modify("private", [op("create", "a\(index)", fields: fields)])
                if response.json.record(0)?["recordChangeTag"] != nil {
                    saved += 1
                } else {
                    #expect(response.json.record(0)?["serverErrorCode"] == "QUOTA_EXCEEDED", "\(response.json)")
                    #expect(response.json.record(0)?["reason"]?.stringValue?.contains("private storage") == true, "\(response.json)")
                }
            }
            #expect(saved == 4, "saved \(saved) records of ~1,030 bytes under a 5,000-byte limit")
            // Bob's storage is his own; the public database counts only against the container.
            #expect(try await bob.modify("private", [op("create", "b0", fields: fields)]).json.record(0)?["recordChangeTag"] != nil)
            #expect(try await alice.modify("public", [op("create", "p0", fields: fields)]).json.record(0)?["recordChangeTag"] != nil)
            let usage = try await harness.admin(.get, "containers/\(alice.container)/usage?environment=development")
            // Each user's `Users` record in the public database counts too.
            #expect(usage.json["records"] == 8 && usage.json["topUsers"]?.arrayValue?.first?["userRecordName"] == .string(alice.userRecordName ?? ""), "\(usage.json)")

            let report = try await Programs.cli(["usage", "--container", alice.container], server: "http://127.0.0.1:\(harness.client.port ?? 0)",
                                                     token: Harness.adminToken)
            #expect(report.status == 0 && report.text.contains("records\t8 of \(QuotaLimits.defaults.maxRecords)")
                    && report.text.contains("TOP USERS BY PRIVATE STORAGE") && report.text.contains(alice.userRecordName ?? "?"), "\(report.text)")
            let missing = try await Programs.cli(["usage"], server: "http://127.0.0.1:\(harness.client.port ?? 0)", token: Harness.adminToken)
            #expect(missing.status != 0 && missing.text.contains("give --container"), "\(missing.text)")

            // The meters are checked against the data: a counter changed behind the service's back is reported.
            let verifiedBefore = try await Self.verify(harness)
            #expect(verifiedBefore.status == 0, "\(verifiedBefore.text)")
            try await harness.database.withConnection { connection in
                try await connection.query("UPDATE usage_counters SET records = records + 1 WHERE owner = \(bob.userRecordName ?? "") AND stripe = 3", logger: TestCluster.logger)
            }
            let verified = try await Self.verify(harness)
            #expect(verified.status == 1 && verified.text.contains("user \(bob.userRecordName ?? "")") && verified.text.contains("1/2"), "\(verified.text)")
            try await harness.database.withConnection { connection in
                try await connection.query("UPDATE usage_counters SET records = records - 1 WHERE owner = \(bob.userRecordName ?? "") AND stripe = 3", logger: TestCluster.logger)
            }
        }
    }
}

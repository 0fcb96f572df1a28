import Foundation
import PostgresNIO
import StratusCore
@testable import StratusServer
import StratusStore
@testable import StratusTestSupport
import Testing

/// Change feeds under load: writers in several containers commit concurrently, one write in four
/// held open before its commit for up to 0.6 s (so transactions that began earlier commit later;
/// each such write makes a record of its own, so a reader that skipped it would never see it),
/// while a reader per zone and per database follows its feed with its sync token. Every record's
/// versions must arrive in the order they were written, none twice, and the last one read must be
/// the last one acknowledged. On a Citus cluster (`STRATUS_TEST_CITUS`) the containers are spread
/// over the workers (checked): positions come from the coordinator whatever worker holds the rows.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct FeedExactnessTests {
    /// What the writers had acknowledged, and what the readers saw.
    actor Ledger {
        var acknowledged: [String: Int] = [:]
        var seen: [String: [Int]] = [:]
        var writes = 0
        var slow = 0
        var deliveries = 0
        var writersDone = false

        func acknowledge(_ key: String, _ version: Int, slow isSlow: Bool) {
            acknowledged[key] = version
            writes += 1
            if isSlow { slow += 1 }
        }
        func saw(_ key: String, _ version: Int) {
            seen[key, default: []].append(version)
            deliveries += 1
        }
        func finish() { writersDone = true }
    }

    static let containers = 6
    /// The default zone's writes take no zone lock, so they commit in any order; a custom zone's
    /// writers queue on its row.
    static let zones = ["_defaultZone", "A"]
    /// Each writer's records that are written again and again (its held writes make one each).
    static let recordsPerWriter = 4
    /// Writes per writer: a number, not a time, so a slow machine (or Citus under a loaded run)
    /// makes the test longer, never thinner.
    static let writesPerWriter = 12

    @Test func feedsMissNothingAndRepeatNothingUnderConcurrentWritersAndLateCommits() async throws {
        try await Harness.run(poolSize: 16) { harness in
            var sessions: [Session] = []
            for index in 0..<Self.containers {
                let session = try await harness.container("iCloud.com.example.Feeds\(index).\(UInt32.random(in: 0...UInt32.max))").signedUp()
                for zone in Self.zones where zone != Names.defaultZone {
                    let made = try await session.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": .string(zone)]]]]])
                    #expect(made.status == 200, "\(made.json)")
                }
                sessions.append(session)
            }
            let workers = try await Self.workers(of: sessions, harness)
            if TestCluster.citusPorts != nil {
                #expect(Set(workers.values).count >= 2, "the containers all landed on one worker: \(workers)")
            }
            // One write in four waits before its commit: others that began after it commit first.
            harness.app.records.testHooks.beforeCommit = { names in
                guard names.contains(where: { $0.hasSuffix("-slow") }) else { return }
                try? await Task.sleep(for: .milliseconds(Int.random(in: 100...600)))
            }
            defer { harness.app.records.testHooks.beforeCommit = nil }
            let ledger = Ledger()
            let everyone = sessions
            try await withThrowingTaskGroup(of: Void.self) { group in
                // Three writers per container, each writing its own records in turn (so each record's
                // versions commit in the order they are numbered); the readers are told when the
                // last write has been answered, not before.
                group.addTask {
                    try await withThrowingTaskGroup(of: Void.self) { writers in
                        for (index, session) in everyone.enumerated() {
                            for writer in 0..<3 {
                                writers.addTask {
                                    for version in 1...Self.writesPerWriter {
                                        let zone = Self.zones[version % Self.zones.count]
                                        let slow = (version + writer) % 4 == 0
                                        // A held write makes a record of its own, written once: a change
                                        // skipped by a reader would never be overwritten into view.
                                        let name = slow ? "w\(writer)-\(version)-slow" : "w\(writer)-r\(version % Self.recordsPerWriter)"
                                        let answer = try await session.modify("private", zone: zone, [op("forceReplace", name, fields: ["v": ["value": .int(Int64(version))]])])
                                        guard answer.status == 200, answer.json.record(0)?["recordChangeTag"] != nil else {
                                            Issue.record("write \(name) in container \(index): \(answer.json)")
                                            return
                                        }
                                        await ledger.acknowledge("\(index)/\(zone)/\(name)", version, slow: slow)
                                    }
                                }
                            }
                        }
                        try await writers.waitForAll()
                    }
                    await ledger.finish()
                }
                // A reader per zone, following its feed until the writers are done and it is drained.
                for (index, session) in everyone.enumerated() {
                    for zone in Self.zones {
                        group.addTask { try await Self.follow(session, zone: zone, key: "\(index)/\(zone)", ledger: ledger) }
                    }
                    group.addTask { try await Self.followDatabase(session) }
                }
                try await group.waitForAll()
            }
            let acknowledged = await ledger.acknowledged
            let seen = await ledger.seen
            var missed: [String] = []
            var repeated: [String] = []
            var outOfOrder: [String] = []
            for (key, last) in acknowledged {
                let versions = seen[key] ?? []
                if versions.last != last { missed.append("\(key): last written \(last), last read \(versions.last.map(String.init) ?? "none")") }
                if Set(versions).count != versions.count { repeated.append("\(key): \(versions)") }
                if versions != versions.sorted() { outOfOrder.append("\(key): \(versions)") }
            }
            let extra = seen.keys.filter { acknowledged[$0] == nil }
            print("feeds: \(await ledger.writes) writes (\(await ledger.slow) held before their commit) in \(Self.containers) containers"
                  + " on \(Set(workers.values).count) node(s); \(await ledger.deliveries) record versions read; "
                  + "\(missed.count) missed, \(repeated.count) repeated, \(outOfOrder.count) out of order")
            #expect(await ledger.writes == Self.containers * 3 * Self.writesPerWriter, "every write acknowledged")
            #expect(missed.isEmpty, "\(missed.prefix(10))")
            #expect(repeated.isEmpty, "\(repeated.prefix(10))")
            #expect(outOfOrder.isEmpty, "\(outOfOrder.prefix(10))")
            #expect(extra.isEmpty, "read records nobody acknowledged: \(extra.prefix(10))")
        }
    }

    /// Reads a zone's feed page by page with its token, every 5 ms, until the writers are done
    /// and a read after that brings nothing more.
    static func follow(_ session: Session, zone: String, key: String, ledger: Ledger) async throws {
        var token: JSON?
        var quietAfterEnd = 0
        while quietAfterEnd < 2 {
            let done = await ledger.writersDone
            var request: [String: JSON] = ["zoneID": ["zoneName": .string(zone)], "resultsLimit": 7]
            if let token { request["syncToken"] = token }
            let page = try await session.post("private", "changes/zone", ["zones": [.object(request)]])
            let result = page.json["zones"]?.arrayValue?.first ?? [:]
            guard page.status == 200, let next = result["syncToken"] else {
                Issue.record("\(key): \(page.json)")
                return
            }
            let records = result["records"]?.arrayValue ?? []
            for record in records {
                guard let name = record["recordName"]?.stringValue, let version = record["fields"]?["v"]?["value"]?.intValue else { continue }
                await ledger.saw("\(key.split(separator: "/")[0])/\(zone)/\(name)", Int(version))
            }
            token = next
            if result["moreComing"] == true { continue }
            if done { quietAfterEnd = records.isEmpty ? quietAfterEnd + 1 : 0 }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    /// Follows the database feed with its token while the writers run: every page answers, and
    /// the zones it names are the database's own.
    static func followDatabase(_ session: Session) async throws {
        var token: JSON?
        let until = ContinuousClock.now + .seconds(10)
        var zones: Set<String> = []
        while ContinuousClock.now < until {
            var body: [String: JSON] = [:]
            if let token { body["syncToken"] = token }
            let page = try await session.post("private", "changes/database", .object(body))
            guard page.status == 200, let next = page.json["syncToken"] else {
                Issue.record("changes/database: \(page.json)")
                return
            }
            for zone in page.json["zones"]?.arrayValue ?? [] { if let name = zone["zoneID"]?["zoneName"]?.stringValue { zones.insert(name) } }
            token = next
            if page.json["moreComing"] != true { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(zones == Set(Self.zones), "the database feed named \(zones)")
    }

    /// The node that holds each session's container: its worker's port on Citus, 0 on one server.
    static func workers(of sessions: [Session], _ harness: Harness) async throws -> [String: Int] {
        var placed: [String: Int] = [:]
        for session in sessions {
            guard TestCluster.citusPorts != nil else {
                placed[session.container] = 0
                continue
            }
            placed[session.container] = try await harness.database.withConnection { connection in
                var port = -1
                for try await row in try await connection.query("""
                    SELECT s.nodeport FROM containers c, citus_shards s
                    WHERE c.name = \(session.container) AND s.table_name = 'records'::regclass
                      AND s.shardid = get_shard_id_for_distribution_column('records', c.container_id)
                    """, logger: TestCluster.logger) {
                    port = try row.decode(Int.self)
                }
                return port
            }
        }
        return placed
    }
}

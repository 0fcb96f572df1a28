import Foundation
import PostgresNIO
import StratusCore
@testable import StratusServer
@testable import StratusStore
@testable import StratusTestSupport
import Testing

/// On Citus, lookups go straight to the worker that holds their container (`CitusRoutes`), as
/// single-table statements, instead of through the coordinator. Shown through the API: the answers
/// are those of one server (records found, names missing, a zone missing), the worker holding the
/// container has the server's routed sessions and the other worker none, and after the container's
/// shards move to the other worker the stale route still answers right (the old worker relays)
/// until the route is read again and the new worker serves it. Runs on a Citus cluster only
/// (`STRATUS_TEST_CITUS`, `Deploy/citus/suite.sh`).
@Suite(.timeLimit(.minutes(TestTime.minutes(10))), .enabled(if: TestCluster.citusPorts != nil, "needs a Citus cluster (STRATUS_TEST_CITUS)"))
struct CitusRoutingTests {
    /// The worker ports of the cluster, and which of them holds `container`'s shards.
    static func placement(_ harness: Harness, container: String) async throws -> (holder: Int, other: Int, containerID: Int64) {
        let ports = try #require(TestCluster.citusPorts)
        let (port, containerID) = try await harness.database.withConnection { connection in
            var found: (Int, Int64)?
            for try await row in try await connection.query("""
                SELECT s.nodeport, c.container_id FROM containers c, citus_shards s
                WHERE c.name = \(container) AND s.table_name = 'records'::regclass
                  AND s.shardid = get_shard_id_for_distribution_column('records', c.container_id)
                """, logger: TestCluster.logger) {
                found = try row.decode((Int, Int64).self)
            }
            return try #require(found)
        }
        let other = try #require(ports.dropFirst().first { $0 != port })
        return (port, other, containerID)
    }

    /// How many of the server's routed sessions are open on the worker at `port`.
    static func routedSessions(_ harness: Harness, port: Int) async throws -> Int {
        try await withDatabase(TestCluster.citusNode(port, harness.database.configuration.database), maximumConnections: 1) { db in
            try await db.withConnection { connection in
                var count = 0
                for try await row in try await connection.query("""
                    SELECT count(*)::int FROM pg_stat_activity
                    WHERE datname = current_database() AND application_name = \(CitusRoutes.applicationName)
                    """, logger: TestCluster.logger) {
                    count = try row.decode(Int.self)
                }
                return count
            }
        }
    }

    /// Looks up `names` in `zone` of the private database: the names found, and the error codes
    /// of the others (or of the request).
    static func lookup(_ session: Session, _ names: [String], zone: String = "_defaultZone") async throws -> (found: [String: Int64], errors: [String]) {
        let answer = try await session.post("private", "records/lookup", [
            "zoneID": ["zoneName": .string(zone)], "records": .array(names.map { ["recordName": .string($0)] }),
        ])
        if let code = answer.json.errorCode { return ([:], [code]) }
        var found: [String: Int64] = [:], errors: [String] = []
        for record in answer.json["records"]?.arrayValue ?? [] {
            if let code = record.errorCode { errors.append(code); continue }
            found[record["recordName"]?.stringValue ?? "?"] = record["fields"]?["n"]?["value"]?.intValue
        }
        return (found, errors)
    }

    @Test func lookupsGoToTheWorkerHoldingTheContainerAndFollowAMove() async throws {
        try await Harness.run(poolSize: 4) { harness in
            let session = try await harness.container().signedUp()
            let saved = try await session.modify("private", [
                op("create", "a", fields: ["n": ["value": 1]]), op("create", "b", fields: ["n": ["value": 2]]),
            ])
            #expect(saved.json.record(0)?.errorCode == nil && saved.json.record(1)?.errorCode == nil, "\(saved.json)")
            #expect(try await session.modify("private", [op("forceDelete", "b")]).json.record(0)?.errorCode == nil)
            let (holder, other, containerID) = try await Self.placement(harness, container: session.container)

            // One server's answers: a live record, a deleted one and one never made not found.
            var answer = try await Self.lookup(session, ["a", "b", "never"])
            #expect(answer.found == ["a": 1])
            #expect(answer.errors == ["NOT_FOUND", "NOT_FOUND"])
            #expect(try await Self.lookup(session, ["a"], zone: "Missing").errors == ["ZONE_NOT_FOUND"])
            #expect(try await Self.routedSessions(harness, port: holder) > 0, "no session of the server on the worker holding the container")
            #expect(try await Self.routedSessions(harness, port: other) == 0, "the server opened sessions on a worker that holds nothing of its")

            // The container's shards move to the other worker: the route still names the old one,
            // which relays; a record written since is found too.
            try await TestCluster.run(["""
                SELECT citus_move_shard_placement(get_shard_id_for_distribution_column('records', \(containerID)),
                    '127.0.0.1', \(holder), '127.0.0.1', \(other), shard_transfer_mode => 'block_writes')
                """], on: harness.database.configuration)
            #expect(try await session.modify("private", [op("create", "c", fields: ["n": ["value": 3]])]).json.record(0)?.errorCode == nil)
            answer = try await Self.lookup(session, ["a", "b", "c"])
            #expect(answer.found == ["a": 1, "c": 3])
            #expect(answer.errors == ["NOT_FOUND"])

            // Once the route is read again, the new holder serves the container's lookups.
            harness.database.citusRoutes?.forget(ContainerID(containerID))
            answer = try await Self.lookup(session, ["a", "c"])
            #expect(answer.found == ["a": 1, "c": 3])
            #expect(try await Self.routedSessions(harness, port: other) > 0, "the server did not follow the container to its new worker")
        }
    }

    /// Request counts of containers on both workers are written by one statement per worker, on
    /// that worker; when one worker's statement fails (its shard locked past the lock timeout),
    /// the other's rows stay saved and the failure names exactly the entries not saved, which the
    /// rate limiter adds back for the next flush: nothing counted twice, nothing lost.
    @Test func requestCountsAreWrittenPerWorkerAndAFailureNamesWhatWasNotSaved() async throws {
        try await Harness.run(poolSize: 2, database: { $0.lockTimeout = .milliseconds(500) }) { harness in
            // Containers until each worker holds one.
            var byWorker: [Int: Int64] = [:]
            for _ in 0..<20 where byWorker.count < 2 {
                let session = try await harness.container()
                let placed = try await Self.placement(harness, container: session.container)
                if byWorker[placed.holder] == nil { byWorker[placed.holder] = placed.containerID }
            }
            let workers = byWorker.keys.sorted()
            try #require(workers.count == 2, "20 containers all landed on one worker")
            let (locked, open) = (byWorker[workers[0]]!, byWorker[workers[1]]!)
            // A bucket far ahead, which neither the harness's own flushes nor the sweep touch.
            let bucket: Int64 = 4_000_000_000
            let entries = [
                RequestCounts(containerID: ContainerID(locked), environment: .development, bucket: bucket, requests: 5, throttled: 1, refused: 0),
                RequestCounts(containerID: ContainerID(open), environment: .development, bucket: bucket, requests: 7, throttled: 0, refused: 2),
            ]
            let metering = AdminStore(database: harness.database, logger: TestCluster.logger).metering
            func saved(_ container: Int64) async throws -> [Int64] {
                try await harness.database.withConnection { connection in
                    try await connection.rows("""
                        SELECT requests, throttled, refused FROM request_counts WHERE container_id = \(container) AND bucket = \(bucket)
                        """, logger: TestCluster.logger)
                }.flatMap { row in let (a, b, c) = try row.decode((Int64, Int64, Int64).self); return [a, b, c] }
            }
            let shard = try await harness.database.withConnection { connection in
                try await connection.rows("SELECT get_shard_id_for_distribution_column('request_counts', \(locked))", logger: TestCluster.logger)
            }.first!.decode(Int64.self)
            // The first container's shard locked on its worker while the counts are written.
            try await withDatabase(TestCluster.citusNode(workers[0], harness.database.configuration.database), maximumConnections: 1) { node in
                try await node.transaction { connection in
                    try await connection.statement("SET LOCAL citus.enable_manual_changes_to_shards = on", logger: TestCluster.logger)
                    try await connection.statement(PostgresQuery(unsafeSQL: "LOCK TABLE request_counts_\(shard) IN ACCESS EXCLUSIVE MODE"),
                                                   logger: TestCluster.logger)
                    do {
                        try await metering.addRequestCounts(entries)
                        Issue.record("the counts were written past a locked shard")
                    } catch let unsaved as RequestCountsUnsaved {
                        #expect(unsaved.indices == [0], "\(unsaved.indices)")
                    }
                    // Rolled back at the end of the closure: the lock goes.
                    try await connection.statement("SELECT 1", logger: TestCluster.logger)
                }
            }
            #expect(try await saved(open) == [7, 0, 2])
            #expect(try await saved(locked) == [])
            try await metering.addRequestCounts([entries[0]])
            #expect(try await saved(locked) == [5, 1, 0])
            #expect(try await saved(open) == [7, 0, 2], "the second worker's counts were written twice")
        }
    }
}

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

    /// A routed lookup in a zone whose id the server remembers reads the records under that id
    /// alone; the answers stay those of the zone as it is now: deleted (ZONE_NOT_FOUND), made
    /// again (the record gone: NOT_FOUND; a new one found), and after a reset of the environment,
    /// which deletes the zone's row, made again under a new id.
    @Test func lookupsWithARememberedZoneAnswerAsTheZoneIsNow() async throws {
        try await Harness.run(poolSize: 4) { harness in
            let session = try await harness.container().signedUp()
            func zone(_ operation: String) async throws {
                let answer = try await session.post("private", "zones/modify", ["operations": [["operationType": .string(operation), "zone": ["zoneID": ["zoneName": "Notes"]]]]])
                #expect(answer.status == 200 && answer.json["zones"]?.arrayValue?.first?.errorCode == nil, "\(operation): \(answer.json)")
            }
            func save(_ name: String, _ value: Int) async throws {
                let saved = try await session.modify("private", zone: "Notes", [op("create", name, fields: ["n": ["value": .int(Int64(value))]])])
                #expect(saved.json.record(0)?.errorCode == nil, "\(saved.json)")
            }
            try await zone("create")
            try await save("x", 1)
            for _ in 0..<2 {
                let answer = try await Self.lookup(session, ["x", "never"], zone: "Notes")
                #expect(answer.found == ["x": 1] && answer.errors == ["NOT_FOUND"], "\(answer)")
            }
            try await zone("delete")
            #expect(try await Self.lookup(session, ["x"], zone: "Notes").errors == ["ZONE_NOT_FOUND"])
            try await zone("create")
            var answer = try await Self.lookup(session, ["x"], zone: "Notes")
            #expect(answer.found == [:] && answer.errors == ["NOT_FOUND"], "\(answer)")
            try await save("y", 2)
            answer = try await Self.lookup(session, ["x", "y"], zone: "Notes")
            #expect(answer.found == ["y": 2] && answer.errors == ["NOT_FOUND"], "\(answer)")

            let reset = try await harness.admin(.post, "containers/\(session.container)/schema/reset", json: [:])
            #expect(reset.status == 200, "\(reset.json)")
            #expect(try await Self.lookup(session, ["y"], zone: "Notes").errors == ["ZONE_NOT_FOUND"])
            try await zone("create")
            try await save("z", 3)
            answer = try await Self.lookup(session, ["y", "z"], zone: "Notes")
            #expect(answer.found == ["z": 3] && answer.errors == ["NOT_FOUND"], "\(answer)")
        }
    }

    /// Two containers of `harness`, each held by another worker: (the first worker's port, its
    /// container id), (the second's).
    static func containersOnTwoWorkers(_ harness: Harness) async throws -> (first: (port: Int, container: Int64), second: (port: Int, container: Int64)) {
        var byWorker: [Int: Int64] = [:]
        for _ in 0..<20 where byWorker.count < 2 {
            let session = try await harness.container()
            let placed = try await Self.placement(harness, container: session.container)
            if byWorker[placed.holder] == nil { byWorker[placed.holder] = placed.containerID }
        }
        let workers = byWorker.keys.sorted()
        try #require(workers.count == 2, "20 containers all landed on one worker")
        return ((workers[0], byWorker[workers[0]]!), (workers[1], byWorker[workers[1]]!))
    }

    /// Runs `body` while `container`'s shard of `table` is locked on its worker (at `port`), so
    /// that any write to it waits past the lock timeout and fails.
    static func withShardLocked(_ harness: Harness, table: String, container: Int64, port: Int, _ body: @Sendable () async throws -> Void) async throws {
        let shard = try await harness.database.withConnection { connection in
            try await connection.rows("SELECT get_shard_id_for_distribution_column(\(table)::regclass, \(container))", logger: TestCluster.logger)
        }.first!.decode(Int64.self)
        try await withDatabase(TestCluster.citusNode(port, harness.database.configuration.database), maximumConnections: 1) { node in
            try await node.transaction { connection in
                try await connection.statement("SET LOCAL citus.enable_manual_changes_to_shards = on", logger: TestCluster.logger)
                try await connection.statement(PostgresQuery(unsafeSQL: "LOCK TABLE \(table)_\(shard) IN ACCESS EXCLUSIVE MODE"), logger: TestCluster.logger)
                try await body()
                // Rolled back at the end of the closure: the lock goes.
                try await connection.statement("SELECT 1", logger: TestCluster.logger)
            }
        }
    }

    /// Request counts of containers on both workers are written by one statement per worker, on
    /// that worker; when one worker's statement fails (its shard locked past the lock timeout),
    /// the other's rows stay saved and the failure names exactly the entries not saved, which the
    /// rate limiter adds back for the next flush: nothing counted twice, nothing lost.
    @Test func requestCountsAreWrittenPerWorkerAndAFailureNamesWhatWasNotSaved() async throws {
        try await Harness.run(poolSize: 2, database: { $0.lockTimeout = .milliseconds(500) }) { harness in
            let (first, second) = try await Self.containersOnTwoWorkers(harness)
            // A bucket far ahead, which neither the harness's own flushes nor the sweep touch.
            let bucket: Int64 = 4_000_000_000
            let entries = [
                RequestCounts(containerID: ContainerID(first.container), environment: .development, bucket: bucket, requests: 5, throttled: 1, refused: 0),
                RequestCounts(containerID: ContainerID(second.container), environment: .development, bucket: bucket, requests: 7, throttled: 0, refused: 2),
            ]
            let metering = AdminStore(database: harness.database, logger: TestCluster.logger).metering
            func saved(_ container: Int64) async throws -> [Int64] {
                try await harness.database.withConnection { connection in
                    try await connection.rows("""
                        SELECT requests, throttled, refused FROM request_counts WHERE container_id = \(container) AND bucket = \(bucket)
                        """, logger: TestCluster.logger)
                }.flatMap { row in let (a, b, c) = try row.decode((Int64, Int64, Int64).self); return [a, b, c] }
            }
            try await Self.withShardLocked(harness, table: "request_counts", container: first.container, port: first.port) {
                do {
                    try await metering.addRequestCounts(entries)
                    Issue.record("the counts were written past a locked shard")
                } catch let unsaved as RowsUnsaved {
                    #expect(unsaved.positions == [0], "\(unsaved.positions)")
                }
            }
            #expect(try await saved(second.container) == [7, 0, 2])
            #expect(try await saved(first.container) == [])
            try await metering.addRequestCounts([entries[0]])
            #expect(try await saved(first.container) == [5, 1, 0])
            #expect(try await saved(second.container) == [7, 0, 2], "the second worker's counts were written twice")
        }
    }

    /// The request log of containers on both workers is written per worker, as statements Citus
    /// routes to the one worker (no step of it through the coordinator): the rows are numbered
    /// and trimmed to `keep` as on one server, and when one worker's shard is locked past the lock
    /// timeout the other's rows are saved and the failure names exactly the entries not saved,
    /// which are written by the next flush once, in order.
    @Test func theRequestLogIsWrittenPerWorkerAndAFailureNamesWhatWasNotSaved() async throws {
        try await Harness.run(poolSize: 2, database: { $0.lockTimeout = .milliseconds(500) }) { harness in
            let (first, second) = try await Self.containersOnTwoWorkers(harness)
            let metering = AdminStore(database: harness.database, logger: TestCluster.logger).metering
            // Only this test's rows: the harness's own requests are logged in the development environment's log.
            func entry(_ container: Int64, _ id: String) -> RequestLogEntry {
                RequestLogEntry(containerID: ContainerID(container), environment: .production, at: Date(), database: .public,
                                operation: "records/lookup", status: 200, errorCode: nil, durationMicroseconds: 100, userRecordName: nil,
                                requestID: id, clientAddress: nil)
            }
            func logged(_ container: Int64) async throws -> [String] {
                try await metering.requestLog(containerID: ContainerID(container), environment: .production, keep: 3,
                                              filter: { var filter = RequestLogFilter(); filter.after = 0; return filter }()).map { "\($0.seq):\($0.requestID)" }
            }
            let entries = [entry(first.container, "a1"), entry(second.container, "b1"), entry(first.container, "a2"),
                           entry(second.container, "b2"), entry(second.container, "b3")]
            let groups: [(indices: [Int], keep: Int64)] = [([0, 2], 3), ([1, 3, 4], 3)]
            try await Self.withShardLocked(harness, table: "request_log_heads", container: first.container, port: first.port) {
                do {
                    try await metering.writeRequestLog(entries, groups: groups)
                    Issue.record("the log was written past a locked shard")
                } catch let unsaved as RowsUnsaved {
                    #expect(unsaved.positions == [0, 2], "\(unsaved.positions)")
                }
            }
            #expect(try await logged(second.container) == ["1:b1", "2:b2", "3:b3"])
            #expect(try await logged(first.container) == [])
            try await metering.writeRequestLog(entries, groups: [([0, 2], 3)])
            #expect(try await logged(first.container) == ["1:a1", "2:a2"])
            // Past `keep`: the oldest batch goes once all its requests are more than 3 old.
            try await metering.writeRequestLog([entry(second.container, "b4"), entry(second.container, "b5"), entry(second.container, "b6")],
                                               groups: [([0, 1, 2], 3)])
            #expect(try await logged(second.container) == ["4:b4", "5:b5", "6:b6"])
        }
    }
}

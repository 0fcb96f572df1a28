import Foundation
import PostgresNIO
import StratusCore
@testable import StratusServer
@testable import StratusStore
@testable import StratusTestSupport
import Testing

/// A new deployment is fast from its first minute: after records are saved through the API into
/// a fresh database, the statements the service has prepared are planned on statistics that
/// describe the tables as they are now, not as they were when the migrations ran (issue 29).
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct PlannerStatisticsTests {
    /// The plan of the service's own prepared lookup, read on the service's only pooled
    /// connection, where it was prepared while the tables were empty.
    /// On Citus, lookups run on the worker holding the container (`CitusRoutes`), as
    /// `Prepared.RecordsNamed` after the zone's id: its plan there, on the server's pooled
    /// connection to that worker, is the one examined.
    static func lookupPlan(_ harness: Harness, container: Int64, owner: String, name: String) async throws -> String {
        if TestCluster.citusPorts != nil {
            let zone = try await harness.database.withConnection { connection in
                try await connection.rows("""
                    SELECT zone_id FROM zones WHERE container_id = \(container) AND owner = \(owner) AND zone_name = '_defaultZone'
                    """, logger: TestCluster.logger)
            }.first!.decode(Int64.self)
            return try await harness.database.withConnection(routedTo: ContainerID(container)) { connection in
                let rows = try await connection.rows(PostgresQuery(unsafeSQL: """
                    EXPLAIN EXECUTE "\(Prepared.RecordsNamed.name)"(\(container), \(zone), '{\(name)}')
                    """), logger: TestCluster.logger)
                return try rows.map { try $0.decode(String.self) }.joined(separator: "\n")
            }
        }
        return try await harness.database.withConnection { connection in
            let rows = try await connection.rows(PostgresQuery(unsafeSQL: """
                EXPLAIN EXECUTE "\(Prepared.Lookup.name)"(\(container), 1, 2, '\(owner)', '_defaultZone', '{\(name)}')
                """), logger: TestCluster.logger)
            return try rows.map { try $0.decode(String.self) }.joined(separator: "\n")
        }
    }

    @Test func lookupsArePlannedOnCurrentStatisticsAfterSeeding() async throws {
        // One pooled connection, so the plan examined is the one the service's requests use.
        // The keeper as `stratus serve` runs it by default (the harness leaves it off elsewhere).
        try await Harness.run(poolSize: 1, server: { $0.statisticsInterval = ServerConfiguration.defaultStatisticsInterval }) { harness in
            // Autovacuum off on this database's tables: the service must not depend on it having
            // run yet (a fresh deployment's first minute, or autovacuum busy elsewhere).
            try await harness.database.withConnection { connection in
                for table in StatisticsKeeper.tables {
                    try await connection.statement(PostgresQuery(unsafeSQL: "ALTER TABLE \(table) SET (autovacuum_enabled = off)"), logger: TestCluster.logger)
                }
            }
            let user = try await harness.container().signedUp()
            // A new app's first calls, on empty tables: the statements are prepared (and planned) now.
            // One record first, so that the zone exists and the lookup's records statement runs
            // while the tables are all but empty; eight times, as on Citus it gets its generic
            // plan at the sixth execution and Citus keeps its plan of the shard's query from
            // the generic plan's second execution on.
            #expect(try await user.modify("private", [op("create", "first")]).status == 200)
            for _ in 0..<8 {
                let first = try await user.post("private", "records/lookup", ["records": [["recordName": "first"]]])
                #expect(first.json.record(0)?["recordName"]?.stringValue == "first")
            }
            for batch in 0..<50 {
                let operations: [JSON] = (0..<100).map { index in
                    op("create", "r-\(batch * 100 + index)", fields: ["title": ["value": .string("title \(batch * 100 + index)")]])
                }
                let saved = try await user.modify("private", operations)
                #expect(saved.status == 200)
            }
            let container = try await harness.database.withConnection { connection in
                try await connection.rows("SELECT container_id FROM containers WHERE name = \(user.container)", logger: TestCluster.logger)
            }.first!.decode(Int64.self)
            // The service analyzes in the background within a few seconds of the growth; wait
            // for that (bounded), then the plan must probe the primary key.
            var plan = ""
            let deadline = ContinuousClock.now + .seconds(30)
            repeat {
                let looked = try await user.post("private", "records/lookup", ["records": [["recordName": "r-4321"]]])
                #expect(looked.json.record(0)?["recordName"]?.stringValue == "r-4321")
                plan = try await Self.lookupPlan(harness, container: container, owner: user.userRecordName ?? "", name: "r-4321")
                if !plan.contains("Seq Scan on records") && plan.contains("records_pkey") { break }
                try await Task.sleep(for: .milliseconds(250))
            } while ContinuousClock.now < deadline
            print("lookup plan after seeding 5,000 records:\n\(plan)")
            #expect(!plan.contains("Seq Scan on records"), "\(plan)")
            #expect(plan.contains("records_pkey"), "\(plan)")
            if TestCluster.citusPorts != nil {
                try await Self.routedLookupProbesThePrimaryKey(harness, user, container: container)
            }
        }
    }

    /// On Citus, `EXPLAIN EXECUTE` plans the shard's query afresh, while a routed lookup runs the
    /// plan Citus kept of it (its local plan cache), made before the shard was analyzed: what the
    /// lookup did is read from the shard's index counters instead. It must have probed the
    /// primary key, not scanned the zone by `records_changes` (what the plan made on the empty
    /// shard does) — which takes the worker's sessions dropping their plans once the keeper
    /// has seen the shard analyzed (`CitusWorker`).
    static func routedLookupProbesThePrimaryKey(_ harness: Harness, _ user: Session, container: Int64) async throws {
        let shard = try await harness.database.withConnection { connection in
            try await connection.rows("SELECT get_shard_id_for_distribution_column('records', \(container))", logger: TestCluster.logger)
        }.first!.decode(Int64.self)
        func scans() async throws -> (primaryKey: Int64, changes: Int64) {
            try await harness.database.withConnection(routedTo: ContainerID(container)) { connection in
                try await connection.rows(PostgresQuery(unsafeSQL: """
                    SELECT pg_stat_get_numscans('records_pkey_\(shard)'::regclass), pg_stat_get_numscans('records_changes_\(shard)'::regclass)
                    """), logger: TestCluster.logger).first!.decode((Int64, Int64).self)
            }
        }
        // A backend reports its counters within a second of going idle.
        try await Task.sleep(for: .milliseconds(1500))
        let before = try await scans()
        let looked = try await user.post("private", "records/lookup", ["records": [["recordName": "r-1234"]]])
        #expect(looked.json.record(0)?["recordName"]?.stringValue == "r-1234")
        var after = try await scans()
        let deadline = ContinuousClock.now + .seconds(10)
        while after.primaryKey == before.primaryKey && after.changes == before.changes && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(200))
            after = try await scans()
        }
        #expect(after.primaryKey > before.primaryKey, "the routed lookup did not probe records_pkey_\(shard): \(before) → \(after)")
        #expect(after.changes == before.changes, "the routed lookup scanned records_changes_\(shard), a plan made before the shard was analyzed: \(before) → \(after)")
    }
}

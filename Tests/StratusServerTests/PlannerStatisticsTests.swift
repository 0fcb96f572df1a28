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
    static func lookupPlan(_ harness: Harness, container: Int64, owner: String, name: String) async throws -> String {
        try await harness.database.withConnection { connection in
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
            let first = try await user.post("private", "records/lookup", ["records": [["recordName": "r-0"]]])
            #expect(first.status == 200)
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
        }
    }
}

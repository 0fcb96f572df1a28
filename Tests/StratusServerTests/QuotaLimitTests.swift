import Foundation
import PostgresNIO
import StratusCore
import StratusStore
@testable import StratusTestSupport
import Testing

/// Quotas (issue 25), first part: limits as data, set per container-environment through the CLI
/// and the management API, audited.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct QuotaLimitTests {
    /// A lowered limit leaves no counter stripe room, not even one whose count went below zero
    /// (deletes counted in another stripe than their records' creates, as happens when writers
    /// spread over stripes): the next create is refused while the total is at the limit.
    @Test func aLoweredLimitLeavesNoRoomInAStripeCountedBelowZero() async throws {
        try await Harness.run { harness in
            let session = try await harness.container().signedUp()
            #expect(try await harness.admin(.patch, "containers/\(session.container)/quota", json: ["environment": "development", "maxRecords": 100]).status == 200)
            let saved = try await session.modify("private", (0..<5).map { op("create", "r\($0)") })
            #expect(saved.json["records"]?.arrayValue?.allSatisfy { $0.errorCode == nil } == true, "\(saved.json)")
            // One stripe 10 records and 1,000 bytes below zero, another as much above: the totals
            // stay what was written.
            _ = try await harness.database.withConnection { connection in
                try await connection.statement("""
                    UPDATE usage_counters SET records = records + CASE stripe WHEN 0 THEN -10 ELSE 10 END,
                                              bytes = bytes + CASE stripe WHEN 0 THEN -1000 ELSE 1000 END
                    WHERE container_id = (SELECT container_id FROM containers WHERE name = \(session.container))
                      AND environment = \(ContainerEnvironment.development.code) AND owner = '' AND stripe IN (0, 1)
                    """, logger: TestCluster.logger)
            }
            let usage = try await harness.admin(.get, "containers/\(session.container)/usage?environment=development")
            #expect(usage.json["records"] == 6, "\(usage.json)")  // the five and the user's `Users` record
            #expect(try await harness.admin(.patch, "containers/\(session.container)/quota", json: ["environment": "development", "maxRecords": 6]).status == 200)
            let over = try await session.modify("private", [op("create", "over")])
            #expect(over.json.record(0)?["serverErrorCode"] == "QUOTA_EXCEEDED", "\(over.json)")
        }
    }

    @Test func theOperatorSetsShowsAndResetsLimitsPerEnvironment() async throws {
        try await Harness.run(live: true) { harness in
            let session = try await harness.container()
            func cli(_ arguments: [String]) async throws -> Subprocess.Output {
                try await Programs.cli(arguments, server: "http://127.0.0.1:\(harness.client.port ?? 0)", token: Harness.adminToken)
            }
            let shown = try await cli(["quota", "show", "--container", session.container, "--json"])
            let initial = try JSONParser.parse(Array(shown.text.utf8))
            #expect(initial["limits"]?["maxRecords"] == .int(QuotaLimits.defaults.maxRecords) && initial["set"] == [], "\(shown.text)")

            let set = try await cli(["quota", "set", "--container", session.container, "--environment", "production",
                                     "--max-records", "1000", "--requests-per-second", "50"])
            #expect(set.status == 0 && set.text.contains("maxRecords\t1000\tset") && set.text.contains("requestsPerSecond\t50\tset"), "\(set.text)")
            #expect(set.text.contains("maxStorageBytes\t\(QuotaLimits.defaults.maxStorageBytes)\tdefault"), "\(set.text)")
            // Per environment: development kept its defaults.
            let development = try JSONParser.parse(Array(try await cli(["quota", "show", "--container", session.container, "--json"]).text.utf8))
            #expect(development["limits"]?["maxRecords"] == .int(QuotaLimits.defaults.maxRecords), "\(development)")
            // Reset one; the other stays.
            let reset = try await cli(["quota", "set", "--container", session.container, "--environment", "production", "--max-records", "default", "--json"])
            let after = try JSONParser.parse(Array(reset.text.utf8))
            #expect(after["limits"]?["maxRecords"] == .int(QuotaLimits.defaults.maxRecords) && after["set"] == ["requestsPerSecond"], "\(reset.text)")

            // Bad values are refused with a reason, and change nothing.
            for bad in [["--max-records", "0"], ["--max-records=-5"], ["--requests-per-second", "lots"]] {
                let refused = try await cli(["quota", "set", "--container", session.container, "--environment", "production"] + bad)
                #expect(refused.status != 0 && (refused.text.contains("whole number")), "\(bad): \(refused.text)")
            }
            let misspelt = try await harness.admin(.patch, "containers/\(session.container)/quota", json: ["environment": "production", "maxRecord": 5])
            #expect(misspelt.status == 400 && misspelt.json["reason"]?.stringValue?.contains("unknown limit 'maxRecord'") == true, "\(misspelt.json)")
            let unchanged = try await harness.admin(.get, "containers/\(session.container)/quota?environment=production")
            #expect(unchanged.json["set"] == ["requestsPerSecond"], "\(unchanged.json)")

            // Every change is in the audit log.
            let audit = try await harness.admin(.get, "containers/\(session.container)/audit")
            let entries = audit.json["entries"]?.arrayValue?.filter { $0["action"] == "quota.set" } ?? []
            #expect(entries.count == 2, "\(audit.json)")
            #expect(entries.contains { $0["detail"]?.stringValue == "maxRecords=1000 requestsPerSecond=50" }, "\(entries)")
        }
    }
}

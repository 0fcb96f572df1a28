import Foundation
import PostgresNIO
import StratusCore
@testable import StratusServer
import StratusStore
@testable import StratusTestSupport
import Testing

/// On Citus, a transaction committed in two phases is done on the coordinator before its rows are
/// visible on the worker: the worker has PREPAREd, the coordinator has committed, COMMIT PREPARED
/// has not run yet. Requests do commit that way (a statement Citus plans in parts sends its
/// intermediate results to every worker, and each connection that received them is prepared),
/// so a feed must not read in that gap: it would take the coordinator's word that the
/// transaction is done, find none of its rows, and move past them for good.
///
/// Forced deterministically: a row is written on the container's worker by a transaction that is
/// prepared and not committed, stamped with a coordinator transaction that has committed, below a
/// record saved through the API. The feed read waits until the test commits it, and delivers it;
/// a prepared transaction left for longer is answered TRY_AGAIN_LATER. Runs on a Citus cluster
/// only (`STRATUS_TEST_CITUS`, `Deploy/citus/suite.sh`).
@Suite(.timeLimit(.minutes(TestTime.minutes(10))), .enabled(if: TestCluster.citusPorts != nil, "needs a Citus cluster (STRATUS_TEST_CITUS)"))
struct PreparedCommitFeedTests {
    /// Runs statements on one connection to `node`, rows read.
    static func onWorker(_ node: DatabaseConfiguration, _ statements: [String]) async throws {
        try await TestCluster.run(statements, on: node)
    }

    /// Copies the record `from` as `name` in a transaction on the worker that holds it, stamped
    /// with (`xid`, 1), and prepares it as `gid`.
    static func prepareCopy(_ harness: Harness, container: String, from: String, as name: String, xid: Int64, gid: String) async throws -> DatabaseConfiguration {
        let (shard, port, containerID) = try await harness.database.withConnection { connection in
            var found: (String, Int, Int64)?
            for try await row in try await connection.query("""
                SELECT s.shard_name::text, s.nodeport, c.container_id FROM containers c, citus_shards s
                WHERE c.name = \(container) AND s.table_name = 'records'::regclass
                  AND s.shardid = get_shard_id_for_distribution_column('records', c.container_id)
                """, logger: TestCluster.logger) {
                found = try row.decode((String, Int, Int64).self)
            }
            return try #require(found)
        }
        let worker = TestCluster.citusNode(port, harness.database.configuration.database)
        try await onWorker(worker, [
            "BEGIN",
            """
            INSERT INTO \(shard) SELECT (jsonb_populate_record(NULL::\(shard), to_jsonb(r)
                || jsonb_build_object('record_name', '\(name)', 'change_xid', \(xid), 'change_seq', 1))).*
            FROM \(shard) r WHERE container_id = \(containerID) AND record_name = '\(from)'
            """,
            "PREPARE TRANSACTION '\(gid)'",
        ])
        return worker
    }

    static func read(_ session: Session, token: JSON?) async throws -> (status: Int, json: JSON, names: Set<String>, token: JSON?) {
        var zone: [String: JSON] = ["zoneID": ["zoneName": "_defaultZone"]]
        if let token { zone["syncToken"] = token }
        let page = try await session.post("private", "changes/zone", ["zones": [.object(zone)]])
        let result = page.json["zones"]?.arrayValue?.first ?? [:]
        let names = Set((result["records"]?.arrayValue ?? []).compactMap { $0["recordName"]?.stringValue })
        return (page.status, page.json, names, result["syncToken"])
    }

    @Test func aFeedWaitsForATransactionPreparedOnItsWorker() async throws {
        // The test writes records behind the service's back: the usage meters do not count them.
        try await Harness.run(poolSize: 8, verifyUsage: false) { harness in
            let session = try await harness.container().signedUp()
            // A coordinator transaction that has committed, below the record saved next.
            let committed = try await harness.database.withConnection { connection in
                var xid: Int64 = 0
                for try await row in try await connection.query("SELECT pg_current_xact_id()::text::bigint", logger: TestCluster.logger) {
                    xid = try row.decode(Int64.self)
                }
                return xid
            }
            #expect(try await session.modify("private", [op("create", "after", fields: ["n": ["value": 1]])]).json.record(0)?.errorCode == nil)
            let gid = "stratus_test_\(UInt32.random(in: 0...UInt32.max))"
            let worker = try await Self.prepareCopy(harness, container: session.container, from: "after", as: "prepared", xid: committed, gid: gid)

            // The read starts while the row is prepared; the commit comes 0.5 s later.
            let started = ContinuousClock.now
            async let first = Self.read(session, token: nil)
            try await Task.sleep(for: .milliseconds(500))
            try await Self.onWorker(worker, ["COMMIT PREPARED '\(gid)'"])
            let page = try await first
            print("PreparedCommitFeedTests: the feed read answered \(ContinuousClock.now - started) after it started, with \(page.names.sorted())")
            #expect(page.status == 200, "\(page.json)")
            let second = try await Self.read(session, token: page.token)
            #expect(page.names.union(second.names).isSuperset(of: ["after", "prepared"]),
                    "the prepared transaction's record was passed over: read \(page.names) then \(second.names)")

            // A prepared transaction that stays (a crash between its phases, until Citus's
            // recovery resolves it): the feed answers TRY_AGAIN_LATER, then reads once it is gone.
            let stuck = "stratus_test_\(UInt32.random(in: 0...UInt32.max))"
            _ = try await Self.prepareCopy(harness, container: session.container, from: "after", as: "stuck", xid: committed, gid: stuck)
            let refused = try await Self.read(session, token: second.token)
            #expect(refused.status == 503 && refused.json.errorCode == "TRY_AGAIN_LATER", "\(refused.json)")
            #expect(refused.json["reason"]?.stringValue?.contains("retry") == true, "\(refused.json)")
            try await Self.onWorker(worker, ["ROLLBACK PREPARED '\(stuck)'"])
            let after = try await Self.read(session, token: second.token)
            #expect(after.status == 200 && !after.names.contains("stuck"), "\(after.json)")
        }
    }
}

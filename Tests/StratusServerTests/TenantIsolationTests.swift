import Foundation
import PostgresNIO
import StratusCore
@testable import StratusServer
@testable import StratusStore
import Testing

/// DESIGN §5: a query's cost depends on the rows that match in its own zone, never on other
/// tenants' data. EXPLAIN ANALYZE of the SQL the service runs must read none of another
/// container's rows, however many there are.
@Suite struct TenantIsolationTests {
    /// Sums the rows every scan node produced and removed, and lists the node types.
    func scanStatistics(_ plan: JSON) -> (rows: Int64, removed: Int64, nodes: [String], conditions: [String]) {
        var rows: Int64 = 0
        var removed: Int64 = 0
        var nodes: [String] = []
        var conditions: [String] = []
        func visit(_ node: JSON) {
            let type = node["Node Type"]?.stringValue ?? ""
            nodes.append(type)
            // A bitmap heap scan's keys are its bitmap index scan child's.
            if type.contains("Scan") && type != "Bitmap Heap Scan" { conditions.append(node["Index Cond"]?.stringValue ?? "") }
            let loops: Int64 = { if case .int(let n)? = node["Actual Loops"] { return n } else { return 1 } }()
            if type.contains("Scan") {
                if case .int(let n)? = node["Actual Rows"] { rows += n * loops }
                for key in ["Rows Removed by Filter", "Rows Removed by Index Recheck"] {
                    if case .int(let n)? = node[key] { removed += n * loops }
                }
            }
            for child in node["Plans"]?.arrayValue ?? [] { visit(child) }
        }
        for entry in plan.arrayValue ?? [] { if let root = entry["Plan"] { visit(root) } }
        return (rows, removed, nodes, conditions)
    }

    @Test func queriesReadNoOtherContainersRows() async throws {
        try await Harness.run { harness in
            let a = try await harness.container().signedUp()
            let b = try await harness.container().signedUp()
            for batch in 0..<15 {
                let operations = (0..<200).map { op("create", "b-\(batch)-\($0)", fields: ["title": ["value": "same"], "rank": ["value": .int(Int64($0))]]) }
                let response = try await b.modify("public", operations)
                #expect(response.status == 200)
            }
            _ = try await a.modify("public", (0..<5).map { op("create", "a-\($0)", fields: ["title": ["value": "same"], "rank": ["value": .int(Int64($0))]]) }
                + (0..<20).map { op("create", "a-other-\($0)", fields: ["title": ["value": "other"], "rank": ["value": .int(Int64($0))]]) })

            let rows = try await harness.database.withConnection { connection in
                try await connection.rows("""
                    SELECT c.container_id, z.zone_id FROM containers c JOIN zones z ON z.container_id = c.container_id
                    WHERE c.name = \(a.container) AND z.database_scope = 1
                    """, logger: TestCluster.logger)
            }
            let (containerID, zoneID) = try rows[0].decode((Int64, Int64).self)
            _ = try await harness.database.withConnection { try await $0.query("ANALYZE", logger: TestCluster.logger) }
            let schema = try await harness.app.records.schemas.reload(containerID: containerID, environment: .development)

            let queries: [(String, JSON, Int)] = [
                ("equality", ["recordType": "Note", "filterBy": [["fieldName": "title", "comparator": "EQUALS", "fieldValue": ["value": "same"]]]], 5),
                ("equality + sort", ["recordType": "Note", "filterBy": [["fieldName": "title", "comparator": "EQUALS", "fieldValue": ["value": "same"]]],
                                     "sortBy": [["fieldName": "rank", "ascending": false]]], 5),
                ("range", ["recordType": "Note", "filterBy": [["fieldName": "rank", "comparator": "LESS_THAN", "fieldValue": ["value": 3]]]], 6),
                ("all of a type", ["recordType": "Note"], 25),
            ]
            for (label, queryJSON, expected) in queries {
                let query = try Query.parse(queryJSON, schema: schema)
                let sql = QuerySQL.build(containerID: containerID, zoneID: zoneID, query: query, limit: 200, after: nil)
                let explain = PostgresQuery(unsafeSQL: "EXPLAIN (ANALYZE, FORMAT JSON) " + sql.sql, binds: sql.bindings)
                let planText = try await harness.database.withConnection { connection in
                    try await connection.rows(explain, logger: TestCluster.logger).first!.decode(String.self)
                }
                let plan = try JSONParser.parse(planText)
                let stats = scanStatistics(plan)
                #expect(!stats.nodes.contains("Seq Scan"), "\(label): \(stats.nodes)")
                // Every scan is keyed by this container and zone…
                for condition in stats.conditions {
                    #expect(condition.contains("container_id = '\(containerID)'") && condition.contains("zone_id = '\(zoneID)'"), "\(label): scan condition \(condition)")
                }
                // …and touches at most this zone's own rows (25 records, 50 index entries): the other container
                // holds 3,000 records and 6,000 entries of the same type and title, and reading any would show here.
                #expect(stats.rows + stats.removed <= 300, "\(label): scans touched \(stats.rows) rows and removed \(stats.removed); plan: \(planText)")
                // The service runs the SQL as a prepared statement, which PostgreSQL may serve with a generic
                // plan (values unknown). That plan, too, must key every scan by this container and zone ($1, $2).
                let genericText = try await harness.database.withConnection { connection in
                    let types = sql.types.map { $0.knownSQLName ?? "text" }.joined(separator: ", ")
                    let nulls = Array(repeating: "NULL", count: sql.types.count).joined(separator: ", ")
                    try await connection.query("SET plan_cache_mode = force_generic_plan", logger: TestCluster.logger)
                    try await connection.query(PostgresQuery(unsafeSQL: "PREPARE probe(\(types)) AS \(sql.sql)"), logger: TestCluster.logger)
                    let text = try await connection.rows(PostgresQuery(unsafeSQL: "EXPLAIN (FORMAT JSON) EXECUTE probe(\(nulls))"),
                                                         logger: TestCluster.logger).first!.decode(String.self)
                    try await connection.query("DEALLOCATE probe", logger: TestCluster.logger)
                    try await connection.query("RESET plan_cache_mode", logger: TestCluster.logger)
                    return text
                }
                let generic = scanStatistics(try JSONParser.parse(genericText))
                #expect(!generic.nodes.contains("Seq Scan"), "\(label), generic plan: \(generic.nodes)")
                for condition in generic.conditions {
                    #expect(condition.contains("container_id = $1") && condition.contains("zone_id = $2"), "\(label): generic scan condition \(condition)")
                }
                let response = try await a.post("public", "records/query", ["query": queryJSON])
                #expect(response.json["records"]?.arrayValue?.count == expected, "\(label)")
            }
        }
    }
}

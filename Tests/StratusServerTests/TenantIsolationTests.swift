import Foundation
import PostgresNIO
import StratusCore
@testable import StratusServer
@testable import StratusStore
@testable import StratusTestSupport
import Testing

/// DESIGN §5: a query's cost depends on the rows that match in its own zone, never on other
/// tenants' data. EXPLAIN ANALYZE of the SQL the service runs must read none of another
/// container's rows, however many there are.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct TenantIsolationTests {
    /// Sums the rows every scan node produced and removed, and lists the node types; with
    /// `relation`, only the nodes that read that table.
    func scanStatistics(_ plan: JSON, relation: String? = nil) -> (rows: Int64, removed: Int64, nodes: [String], conditions: [String]) {
        var rows: Int64 = 0
        var removed: Int64 = 0
        var nodes: [String] = []
        var conditions: [String] = []
        func visit(_ node: JSON) {
            defer { for child in node["Plans"]?.arrayValue ?? [] { visit(child) } }
            if let relation, node["Relation Name"]?.stringValue != relation { return }
            let type = node["Node Type"]?.stringValue ?? ""
            // The zone row is found by name in the same statement; in the test's few-row zones table a
            // sequential scan is the planner's right choice and reads no records.
            let onZones = node["Relation Name"]?.stringValue == "zones"
            if !onZones { nodes.append(type) }
            // A bitmap heap scan's keys are its bitmap index scan child's; a subquery scan reads its child.
            if type.contains("Scan") && type != "Bitmap Heap Scan" && type != "Subquery Scan" && !onZones
                && !(node["Index Name"]?.stringValue?.hasPrefix("zones") ?? false) {
                conditions.append(node["Index Cond"]?.stringValue ?? "")
            }
            let loops: Int64 = { if case .int(let n)? = node["Actual Loops"] { return n } else { return 1 } }()
            if type.contains("Scan") {
                if case .int(let n)? = node["Actual Rows"] { rows += n * loops }
                for key in ["Rows Removed by Filter", "Rows Removed by Index Recheck"] {
                    if case .int(let n)? = node[key] { removed += n * loops }
                }
            }
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
            let (containerID, zoneID) = try rows[0].decode((ContainerID, Int64).self)
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
                let db = DatabaseRef(containerID: containerID, environment: .development, scope: .public, owner: "")
                let sql = QuerySQL.build(db: db, zone: Names.defaultZone, query: query, limit: 200, after: nil)
                let explain = PostgresQuery(unsafeSQL: "EXPLAIN (ANALYZE, FORMAT JSON) " + sql.sql, binds: sql.binds.bindings)
                let planText = try await harness.database.withConnection { connection in
                    try await connection.rows(explain, logger: TestCluster.logger).first!.decode(String.self)
                }
                let plan = try JSONParser.parse(planText)
                let stats = scanStatistics(plan)
                #expect(!stats.nodes.contains("Seq Scan"), "\(label): \(stats.nodes)")
                // Every scan is keyed by this container and zone (found by name, or the zone row's id, which
                // reaches subplans as a parameter $n), directly
                // or through the index entry it fetches the record of…
                for condition in stats.conditions {
                    let zoneKeyed = condition.contains("zone_id = z.zone_id") || condition.contains("zone_id = $") || condition.contains("zone_id = '\(zoneID)'")
                        || condition.contains("zone_name = '\(Names.defaultZone)'")
                    let direct = condition.contains("container_id = '\(containerID)'") && zoneKeyed
                    let viaEntry = (condition.contains("container_id = d.container_id") || condition.contains("container_id = '\(containerID)'"))
                        && condition.contains("zone_id = d.zone_id") && condition.contains("record_name = d.record_name")
                    #expect(direct || viaEntry, "\(label): scan condition \(condition)")
                }
                // …and touches at most this zone's own rows (25 records, 50 index entries): the other container
                // holds 3,000 records and 6,000 entries of the same type and title, and reading any would show here.
                #expect(stats.rows + stats.removed <= 300, "\(label): scans touched \(stats.rows) rows and removed \(stats.removed); plan: \(planText)")
                let response = try await a.post("public", "records/query", ["query": queryJSON])
                #expect(response.json["records"]?.arrayValue?.count == expected, "\(label)")
            }
        }
    }

    /// The change feed's statement, as the service prepared it, must read none of another
    /// container's rows either: B's zone of the same name holds 2,000 records, A's 20.
    @Test func changeFeedsReadNoOtherContainersRows() async throws {
        try await Harness.run(poolSize: 1) { harness in
            let a = try await harness.container().signedUp()
            let b = try await harness.container().signedUp()
            for session in [a, b] {
                let zone = try await session.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Feed"]]]]])
                #expect(zone.status == 200)
            }
            for batch in 0..<10 {
                let created = try await b.modify("private", zone: "Feed", (0..<200).map { op("create", "b-\(batch)-\($0)", fields: ["title": ["value": "same"]]) })
                #expect(created.status == 200)
            }
            let created = try await a.modify("private", zone: "Feed", (0..<20).map { op("create", "a-\($0)", fields: ["title": ["value": "same"]]) })
            #expect(created.status == 200)
            _ = try await harness.database.withConnection { try await $0.query("ANALYZE", logger: TestCluster.logger) }

            let page = try await a.post("private", "changes/zone", ["zones": [["zoneID": ["zoneName": "Feed"], "resultsLimit": 200]]])
            #expect(page.json["zones"]?.arrayValue?.first?["records"]?.arrayValue?.count == 20, "\(page.json)")

            // The statement that page ran, on the pool's only connection, run again under EXPLAIN with A's
            // values: with no transaction in flight, and with the one that wrote A's records (part 0 re-reads it).
            let plans = try await harness.database.withConnection { connection in
                let zone = try await connection.rows("""
                    SELECT z.container_id, z.owner, (SELECT min(change_xid) FROM records r WHERE r.container_id = z.container_id AND r.zone_id = z.zone_id)
                    FROM zones z JOIN containers c USING (container_id)
                    WHERE c.name = \(a.container) AND z.zone_name = 'Feed'
                    """, logger: TestCluster.logger)
                let (containerID, owner, writer) = try zone[0].decode((Int64, String, Int64).self)
                let statements = try await connection.rows("""
                    SELECT name FROM pg_prepared_statements WHERE statement LIKE '%pg_snapshot_xip%' AND statement LIKE '%FROM records%'
                    """, logger: TestCluster.logger)
                try #require(statements.count == 1, "the change feed's statement is not prepared on this connection")
                let name = try statements[0].decode(String.self)
                var plans: [String] = []
                for inFlight in ["{}", "{\(writer)}"] {
                    let explain = PostgresQuery(unsafeSQL: """
                        EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE "\(name)"(\(containerID), \(ContainerEnvironment.development.code), \(DatabaseScope.private.code), '\(owner)', 'Feed', 0, 0, '\(inFlight)', 201)
                        """)
                    plans.append(try await connection.rows(explain, logger: TestCluster.logger).first!.decode(String.self))
                }
                return plans
            }
            for (index, planText) in plans.enumerated() {
                // Only the scans of `records` (the zone row and the in-flight list are scans too).
                let stats = scanStatistics(try JSONParser.parse(planText), relation: "records")
                let (rows, removed, types) = (stats.rows, stats.removed, stats.nodes)
                #expect(!types.contains("Seq Scan"), "\(types)")
                // A's 20 records, read once by the page, and once more as in flight in the second plan.
                #expect(rows == Int64(20 * (index + 1)), "the plan did not read A's records as expected: \(planText)")
                #expect(removed == 0, "scans removed \(removed) rows; plan: \(planText)")
            }
        }
    }

    /// The hottest statements must be planned once per connection and then served from
    /// PostgreSQL's plan cache. A names array bound straight into `ANY($6)` let every custom
    /// plan see the array's length and look cheaper than the generic plan, so PostgreSQL planned
    /// every lookup and every write lock again (5× the database CPU of the same SQL in pgbench).
    @Test func hotStatementsArePlannedOnce() async throws {
        try await Harness.run { harness in
            let b = try await harness.container().signedUp()
            for batch in 0..<2 {
                let created = try await b.modify("public", (0..<150).map { op("create", "r-\(batch * 150 + $0)", fields: ["title": ["value": .string("t\($0 % 7)")]]) })
                #expect(created.status == 200)
            }
            let rows = try await harness.database.withConnection { connection in
                try await connection.rows("SELECT container_id FROM containers WHERE name = \(b.container)", logger: TestCluster.logger)
            }
            let db = DatabaseRef(containerID: try rows[0].decode(ContainerID.self), environment: .development, scope: .public, owner: "")
            // Other zones' records, so the table is big enough for the planner to weigh index probes
            // against scans as it would in production (300 records alone are cheaper to scan).
            _ = try await harness.database.withConnection { connection in
                try await connection.query("""
                    INSERT INTO records (container_id, zone_id, record_name, record_type, change_xid, change_seq, fields,
                                         created_at, created_by, modified_at, modified_by, size)
                    SELECT \(db.containerID), 1000000 + g / 250, 'filler-' || g, 'Filler', 1, g, '{}', 0, '', 0, '', 2
                    FROM generate_series(1, 50000) g
                    """, logger: TestCluster.logger)
                try await connection.query("ANALYZE", logger: TestCluster.logger)
            }
            let plans = try await harness.database.withConnection { connection in
                for index in 0..<10 {
                    let found = try await connection.rows(Prepared.LookupMany([LookupRequest(db: db, zone: Names.defaultZone, names: ["r-\(index)"])]),
                                                          logger: TestCluster.logger)
                    let name = try found.first?.decode((Int32, String?).self).1
                    #expect(found.count == 1 && name == "r-\(index)")
                    let locked = try await connection.rows(Prepared.LockZoneAndRecords(db: db, zone: Names.defaultZone, names: ["r-\(index)", "r-\(index + 1)"]),
                                                           logger: TestCluster.logger)
                    #expect(locked.count == 2)
                }
                // The plan now in use must probe the primary key, not scan the zone's 300 records.
                let zone = "'\(Names.defaultZone)'"
                for (statement, arguments) in [
                    (Prepared.LookupMany.name, "ARRAY[0], ARRAY[\(db.containerID)], ARRAY[\(db.environment.code)], ARRAY[\(db.scope.code)], ARRAY[''], ARRAY[\(zone)], ARRAY['r-3']"),
                    (Prepared.LockZoneAndRecords.name, "\(db.containerID), \(db.environment.code), \(db.scope.code), '', \(zone), ARRAY['r-3']"),
                ] {
                    let explain = PostgresQuery(unsafeSQL: """
                        EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE "\(statement)"(\(arguments))
                        """)
                    let plan = try JSONParser.parse(try await connection.rows(explain, logger: TestCluster.logger).first!.decode(String.self))
                    let stats = scanStatistics(plan)
                    #expect(stats.rows + stats.removed <= 10, "\(statement) read \(stats.rows) rows and removed \(stats.removed): \(stats.nodes)")
                }
                var generic: [String: Int64] = [:]
                for row in try await connection.rows("SELECT name, generic_plans FROM pg_prepared_statements", logger: TestCluster.logger) {
                    let (name, count) = try row.decode((String, Int64).self)
                    generic[name] = count
                }
                return generic
            }
            #expect((plans[Prepared.LookupMany.name] ?? 0) >= 4, "\(plans)")
            #expect((plans[Prepared.LockZoneAndRecords.name] ?? 0) >= 4, "\(plans)")
        }
    }

    /// The change feed's statement must stay on its generic plan. With PostgreSQL left to choose,
    /// the feed's LIMIT parameter made custom plans look cheaper in busy zones, and it re-planned
    /// ~29% of pages at ~0.5 ms each; the pool now sets `plan_cache_mode = force_generic_plan`.
    /// (PostgreSQL always builds custom plans for a statement's first five runs when left to
    /// choose, so `custom_plans` is 0 only with the setting.)
    @Test func changeFeedsAreNeverReplanned() async throws {
        try await Harness.run(poolSize: 1) { harness in
            let b = try await harness.container().signedUp()
            let zoneCreated = try await b.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Feed"]]]]])
            #expect(zoneCreated.status == 200)
            let created = try await b.modify("private", zone: "Feed", (0..<30).map { op("create", "c-\($0)", fields: ["title": ["value": .string("t\($0)")]]) })
            #expect(created.status == 200)
            var token: JSON?
            var seen = 0
            for _ in 0..<8 {
                var zone: JSON = ["zoneID": ["zoneName": "Feed"], "resultsLimit": 4]
                if let token { zone = ["zoneID": ["zoneName": "Feed"], "resultsLimit": 4, "syncToken": token] }
                let page = try await b.post("private", "changes/zone", ["zones": [zone]])
                #expect(page.status == 200, "\(page.json)")
                let result = page.json["zones"]?.arrayValue?.first
                seen += result?["records"]?.arrayValue?.count ?? 0
                token = result?["syncToken"]
            }
            #expect(seen == 30)
            let plans = try await harness.database.withConnection { connection in
                try await connection.rows("""
                    SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE '%pg_snapshot_xip%'
                    """, logger: TestCluster.logger).map { try $0.decode((Int64, Int64).self) }
            }
            #expect(!plans.isEmpty)
            #expect(plans.allSatisfy { $0.1 == 0 }, "custom plans were built: \(plans)")
            #expect(plans.map(\.0).reduce(0, +) >= 8, "\(plans)")
        }
    }
}

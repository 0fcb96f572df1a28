import Foundation
import PostgresNIO
@testable import StratusStore
@testable import StratusTestSupport
import Testing

/// What Citus needs to route each request to one node (issue 28): every table is either
/// distributed by `container_id` — and then each primary key, unique constraint and unique index
/// leads with it — or a small reference table copied to every node, or (the rate limiter's
/// windows) a table kept on the coordinator (`Deploy/citus/distribute.sql` says which). Checked on
/// the schema the migrations build.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct CitusConstraintTests {
    /// The DDL file's reference tables (`SELECT create_reference_table('…')`) and distributed ones.
    static func plan() throws -> (reference: Set<String>, distributed: Set<String>, local: Set<String>) {
        let text = try String(contentsOf: TestCluster.repositoryRoot.appendingPathComponent("Deploy/citus/distribute.sql"), encoding: .utf8)
        func names(_ function: String) throws -> Set<String> {
            let pattern = try Regex("\(function)\\('([a-z_]+)'")
            return Set(text.matches(of: pattern).compactMap { $0.output[1].substring.map(String.init) })
        }
        return (try names("create_reference_table"), try names("create_distributed_table"), try names("citus_add_local_table_to_metadata"))
    }

    @Test func everyTableIsPlacedAndItsKeysLeadWithTheContainer() async throws {
        let (reference, distributed, local) = try Self.plan()
        #expect(reference.isDisjoint(with: distributed) && local.isDisjoint(with: reference.union(distributed)),
                "tables placed twice: \(reference.intersection(distributed).union(local.intersection(reference.union(distributed))))")
        let configuration = try await TestCluster.shared.newDatabase()
        try await withDatabase(configuration) { db in
            try await db.withConnection { connection in
                let tables = try await connection.rows("""
                    SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                    WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') ORDER BY 1
                    """, logger: TestCluster.logger).map { try $0.decode(String.self) }
                #expect(tables.count >= 30, "found \(tables)")
                let unplaced = tables.filter { !reference.contains($0) && !distributed.contains($0) && !local.contains($0) }
                #expect(unplaced.isEmpty, "Deploy/citus/distribute.sql places neither as reference nor as distributed: \(unplaced)")
                let gone = reference.union(distributed).union(local).subtracting(tables)
                #expect(gone.isEmpty, "Deploy/citus/distribute.sql names tables that do not exist: \(gone.sorted())")
                // Every unique index (primary keys and unique constraints have one) of a distributed table.
                let keys = try await connection.rows("""
                    SELECT t.relname, i.relname,
                           (SELECT array_agg(a.attname::text ORDER BY k.ord) FROM unnest(x.indkey) WITH ORDINALITY AS k(attnum, ord)
                            JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum)
                    FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid
                    JOIN pg_namespace n ON n.oid = t.relnamespace
                    WHERE n.nspname = 'public' AND x.indisunique ORDER BY 1, 2
                    """, logger: TestCluster.logger).map { try $0.decode((String, String, [String]?).self) }
                var checked = 0
                var offending: [String] = []
                for (table, index, columns) in keys where distributed.contains(table) {
                    checked += 1
                    if columns?.first != "container_id" { offending.append("\(table).\(index) (\((columns ?? []).joined(separator: ", ")))") }
                }
                #expect(offending.isEmpty, "unique keys of distributed tables that do not lead with container_id: \(offending)")
                // Distributed tables without the column cannot be distributed by it at all.
                for table in distributed {
                    let has = try await connection.rows("""
                        SELECT 1 FROM information_schema.columns WHERE table_schema = 'public' AND table_name = \(table) AND column_name = 'container_id'
                        """, logger: TestCluster.logger).first != nil
                    #expect(has, "distributed table \(table) has no container_id column")
                }
                print("Citus: \(distributed.count) tables distributed by container_id (\(checked) unique keys, all leading with it), \(reference.count) reference tables, \(local.count) on the coordinator")
            }
        }
    }

    /// The other half of what Citus needs: no statement joins rows of two containers. In every
    /// SQL text of the server's sources, each join of a distributed table is on `container_id`
    /// (or `USING (container_id, …)`), and each lateral subquery filters by it; a join that pairs
    /// rows of different containers would need cross-node traffic (or be a tenant leak).
    @Test func everyJoinOfTenantTablesStaysInOneContainer() throws {
        let (_, distributed, _) = try Self.plan()
        let root = TestCluster.repositoryRoot.appendingPathComponent("Sources")
        let files = FileManager.default.enumerator(atPath: root.path)?.allObjects.compactMap { $0 as? String }.filter { $0.hasSuffix(".swift") } ?? []
        let tableJoin = try Regex(#"JOIN\s+([a-z_]+)(?:\s+(?:AS\s+)?([a-z_]+))?\s+(ON|USING)\s*(\((?:[^()]|\([^()]*\))*\)|(?:(?!\bJOIN\b|\bWHERE\b|\bGROUP\b|\bORDER\b|\bLIMIT\b|\bRETURNING\b|\bFOR\b)[\s\S])*)"#)
        var joins = 0
        var offending: [String] = []
        for file in files {
            let text = try String(contentsOf: root.appendingPathComponent(file), encoding: .utf8)
            for match in text.matches(of: tableJoin) {
                guard let table = match.output[1].substring.map(String.init), distributed.contains(table) else { continue }
                joins += 1
                let condition = match.output[4].substring.map(String.init) ?? ""
                if !condition.contains("container_id") {
                    offending.append("\(file): JOIN \(table) \(match.output[3].substring ?? "") \(condition.prefix(120))")
                }
            }
            // Lateral subqueries: the body (to its closing parenthesis) names container_id.
            var rest = text[...]
            while let range = rest.range(of: "JOIN LATERAL (") {
                var depth = 1
                var end = range.upperBound
                while end < rest.endIndex, depth > 0 {
                    if rest[end] == "(" { depth += 1 } else if rest[end] == ")" { depth -= 1 }
                    end = rest.index(after: end)
                }
                let body = rest[range.upperBound..<end]
                if distributed.contains(where: { body.contains("FROM \($0)") || body.contains("JOIN \($0)") }) {
                    joins += 1
                    if !body.contains("container_id") && !body.contains("\\(source)") && !body.contains("\\(body)") && !body.contains("\\(outer)") {
                        offending.append("\(file): JOIN LATERAL (\(body.prefix(120)))")
                    }
                }
                rest = rest[end...]
            }
        }
        #expect(joins >= 20, "found only \(joins) joins of distributed tables: the pattern no longer matches the sources")
        #expect(offending.isEmpty, "joins of distributed tables not tied to one container_id:\n\(offending.joined(separator: "\n"))")
        print("Citus: \(joins) joins of distributed tables in the sources, each on container_id")
    }
}

import Foundation
@testable import StratusCore
@testable import StratusStore
@testable import stratus_bench
import Testing

/// `Deploy/bench/pgbench`'s scripts are the baselines of `Deploy/bench/bench.sh`: hand-written copies of the
/// SQL the service runs for each workload (with the zone picked from `bench_zones` and pgbench
/// variables for the bound values). A copy that no longer matches the service measures something
/// else, silently. So each script names the service statements it copies, with a digest of their
/// text (`-- service-sql: <statement> <digest>`), and this test fails when the service's SQL
/// changes, naming the scripts to rewrite and the new digests.
@Suite struct BaselineScriptTests {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Deploy/bench/pgbench")

    /// The statements the bench workloads make the service run, built as the service builds them
    /// for the seeded data (a private database's custom zone, the bench schema).
    static func statements() throws -> [String: String] {
        let db = DatabaseRef(containerID: 1, environment: .development, scope: .private, owner: "_bench")
        let schema = try SchemaLanguage.parse(BenchRecord.schema)
        func query(_ text: String, limit: Int, zone: String = "z0") throws -> String {
            let parsed = try Query.parse(try JSONParser.parse(text), schema: schema)
            return QuerySQL.build(db: db, zone: zone, query: parsed, limit: limit, after: nil).sql
        }
        func placesQuery(_ body: String) throws -> String {
            let parsed = try Query.parse(try #require(try JSONParser.parse(body)["query"]), schema: schema)
            return QuerySQL.build(db: db, zone: BenchPlaces.zone, query: parsed, limit: 200, after: nil).sql
        }
        let (source, binds, zoneRow) = RecordStore.zoneFeedSource(db, zone: "z0", defaultZoneID: nil, recordTypes: nil)
        return [
            "lookup": Prepared.Lookup.sql,
            "lookup-many": Prepared.LookupMany.sql,
            "lock": Prepared.LockZoneAndRecords.sql,
            "read-one": RecordStore.zoneAndRecordStatement(db, zone: "z0", name: "rec-1").0,
            "update": Prepared.UpdateRecords.sql,
            "replace": Prepared.ReplaceRecords.sql,
            "insert": Prepared.InsertRecords.sql,
            "query-eq": try query(#"{"recordType":"Item","filterBy":[{"fieldName":"title","comparator":"EQUALS","fieldValue":{"value":"title-1"}}]}"#,
                                  limit: 200),
            "query-range": try query(#"{"recordType":"Item","filterBy":[{"fieldName":"rank","comparator":"GREATER_THAN_OR_EQUALS","fieldValue":{"value":5}}],"sortBy":[{"fieldName":"rank"}]}"#,
                                     limit: 100),
            "query-near": try placesQuery(BenchPlaces.nearQuery(GeoPoint(latitude: 45, longitude: 5), radius: BenchPlaces.radius(places: 100_000))),
            "query-text": try placesQuery(BenchPlaces.textQuery(group: 7, places: 100_000)),
            "shared-lookup": SharingStore.sharedLookupStatement(containerID: 1, environment: .development, user: "_reader", owner: "_bench",
                                                               zone: "z0", names: ["rec-1"]).sql,
            "changes": RecordStore.feedStatement(source: source, columns: RecordStore.recordColumns, binds: binds, zoneRow: zoneRow,
                                                 after: FeedCursor(), limit: 100).sql,
        ]
    }

    /// Enough to notice that a text changed.
    static func digest(_ text: String) -> String { FNV1a.hex(text) }

    @Test func baselineScriptsCopyTheServicesCurrentSQL() throws {
        let statements = try Self.statements()
        if let dump = ProcessInfo.processInfo.environment["STRATUS_DUMP_SQL"], let sql = statements[dump] { print("SQL<<\(sql)>>SQL") }
        let scripts = try FileManager.default.contentsOfDirectory(atPath: Self.folder.path).filter { $0.hasSuffix(".sql") }.sorted()
        #expect(scripts.count >= 8, "the pgbench scripts were not found in \(Self.folder.path)")
        let expected = statements.keys.sorted().map { "-- service-sql: \($0) \(Self.digest(statements[$0]!))" }.joined(separator: "\n")
        var named: Set<String> = []
        for script in scripts {
            let text = try String(contentsOf: Self.folder.appendingPathComponent(script), encoding: .utf8)
            let declarations = text.split(separator: "\n").filter { $0.hasPrefix("-- service-sql: ") }
                .map { $0.dropFirst("-- service-sql: ".count).split(separator: " ").map(String.init) }
            #expect(!declarations.isEmpty, "\(script) names no service statement (a line '-- service-sql: <statement> <digest>', or '-- service-sql: none …' for a raw ceiling)")
            for declaration in declarations where declaration.first != "none" {
                guard declaration.count == 2, let sql = statements[declaration[0]] else {
                    Issue.record("\(script): '\(declaration.joined(separator: " "))' is not a known statement with a digest; the statements are:\n\(expected)")
                    continue
                }
                named.insert(declaration[0])
                #expect(declaration[1] == Self.digest(sql),
                        "the service's '\(declaration[0])' statement changed since \(script) copied it: rewrite the script from the service's SQL, then set its line to '-- service-sql: \(declaration[0]) \(Self.digest(sql))'")
            }
        }
        #expect(named == Set(statements.keys), "statements no script copies: \(Set(statements.keys).subtracting(named).sorted())")
    }
}

import Foundation
import Logging
import PostgresNIO
import StratusCore

/// Progress of building one production index after a deploy.
public struct IndexBuild: Sendable, Equatable {
    public var recordType: String
    public var field: String
    public var built: Int64
    public var total: Int64
    public var done: Bool
}

/// One entry of the schema history.
public struct SchemaHistoryEntry: Sendable {
    public var id: Int64
    public var environment: ContainerEnvironment
    public var version: Int64
    public var by: String
    public var at: Date
    public var kind: String
    public var plan: String
}

extension SchemaStore {
    /// Live production records per record type, for the plan's backfill counts.
    func productionCounts(containerID: ContainerID, types: [String], on connection: PostgresConnection) async throws -> [String: Int64] {
        try await recordCounts(containerID: containerID, environment: .production, types: types, on: connection)
    }

    /// Live records of an environment per record type (of `types`).
    func recordCounts(containerID: ContainerID, environment: ContainerEnvironment, types: [String], on connection: PostgresConnection) async throws -> [String: Int64] {
        guard !types.isEmpty else { return [:] }
        var counts: [String: Int64] = [:]
        for row in try await connection.rows("""
            SELECT r.record_type, count(*) FROM records r
            JOIN zones z ON z.container_id = r.container_id AND z.zone_id = r.zone_id AND z.environment = \(environment.code)
            WHERE r.container_id = \(containerID) AND r.record_type = ANY(\(types)::text[]) AND NOT r.deleted
            GROUP BY r.record_type
            """, logger: logger) {
            let (type, count) = try row.decode((String, Int64).self)
            counts[type] = count
        }
        return counts
    }

    /// Serializes schema changes of one container (deploy, import, reset) within the transaction.
    func lockSchema(containerID: ContainerID, on connection: PostgresConnection) async throws {
        try await connection.statement("SELECT pg_advisory_xact_lock(\(Int32(0x5343_4845)), \(Int32(truncatingIfNeeded: containerID.rawValue)))", logger: logger)
    }

    /// Plans, and unless `dryRun` or refused, applies development → production in one transaction.
    /// Added index options queue index builds for the existing production records.
    public func deploy(containerID: ContainerID, by actor: AuditActor, dryRun: Bool) async throws -> (plan: SchemaPlan, counts: [String: Int64], applied: Bool, version: Int64) {
        let result = try await database.transaction { connection in
            try await lockSchema(containerID: containerID, on: connection)
            let development = try await load(containerID: containerID, environment: .development, on: connection)
            let production = try await load(containerID: containerID, environment: .production, on: connection)
            let plan = SchemaPlan.between(production: production, development: development)
            let counts = try await productionCounts(containerID: containerID, types: Array(Set(plan.backfills.map(\.recordType))), on: connection)
            guard !dryRun, plan.refused.isEmpty, !plan.isEmpty else { return (plan, counts, false, production.version) }
            let version = try await replace(development, containerID: containerID, environment: .production, on: connection)
            for (type, field) in plan.backfills {
                let total = counts[type] ?? 0
                try await connection.statement("""
                    INSERT INTO schema_index_builds (container_id, environment, record_type, field, total, done)
                    VALUES (\(containerID), 2, \(type), \(field), \(total), \(total == 0))
                    ON CONFLICT (container_id, environment, record_type, field) DO UPDATE
                        SET next_zone = 0, next_record = '', built = 0, total = EXCLUDED.total, done = EXCLUDED.done
                    """, logger: logger)
            }
            try await recordHistory(containerID: containerID, environment: .production, version: version, by: actor, kind: "deploy",
                                    plan: plan.text(counts: counts), on: connection)
            return (plan, counts, true, version)
        }
        forget(containerID: containerID, environment: .production)
        return result
    }

    /// Builds up to `batch` records' index entries for the first unfinished production index build.
    /// Each call is its own transaction, so an interrupted build resumes where it stopped.
    public func buildIndexes(containerID: ContainerID, batch: Int) async throws -> [IndexBuild] {
        try await database.transaction { connection in
            try await Database.allowLongStatements(on: connection, logger: logger)
            let pending = try await connection.rows("""
                SELECT record_type, field, next_zone, next_record FROM schema_index_builds
                WHERE container_id = \(containerID) AND environment = 2 AND NOT done
                ORDER BY record_type, field LIMIT 1 FOR UPDATE SKIP LOCKED
                """, logger: logger)
            if let row = pending.first {
                let (type, field, nextZone, nextRecord) = try row.decode((String, String, Int64, String).self)
                let schema = try await load(containerID: containerID, environment: .production, on: connection)
                guard let fieldSchema = schema.field(field, of: type) else {
                    try await connection.statement("UPDATE schema_index_builds SET done = true WHERE container_id = \(containerID) AND environment = 2 AND record_type = \(type) AND field = \(field)", logger: logger)
                    return try await builds(containerID: containerID, on: connection)
                }
                // Zone by zone, each zone's records in name order through the primary key, at most a
                // batch from each. Ordered by zone and name over a join of the two tables,
                // PostgreSQL read and sorted all the rest of the current zone for every batch (a
                // build went quadratic in the size of a zone: 308 ms for a batch of 2,000 halfway
                // through a zone of 200,000 records). Zone sizes differ too much for its estimates,
                // and it sorted the type's records of the zone again rather than walk the key in
                // order, so sorting is ruled out for this one statement: 10.8 ms for that batch.
                // (The container is named for both tables, so that a Citus coordinator routes the
                // statement to the one node that holds the container, as it does every request's;
                // Citus passes SET LOCAL on to that node only when told to. Without Citus the
                // setting is an unused placeholder.)
                try await connection.statement("SET LOCAL citus.propagate_set_commands = 'local'", logger: logger)
                try await connection.statement("SET LOCAL enable_sort = off", logger: logger)
                let rows = try await connection.rows("""
                    SELECT z.zone_id, r.record_name, r.fields FROM zones z
                    CROSS JOIN LATERAL (
                        SELECT record_name, fields FROM records
                        WHERE container_id = \(containerID) AND zone_id = z.zone_id AND record_type = \(type) AND NOT deleted
                          AND record_name > CASE WHEN z.zone_id = \(nextZone) THEN \(nextRecord) ELSE '' END
                        ORDER BY record_name
                        LIMIT \(batch)
                        FOR UPDATE
                    ) r
                    WHERE z.container_id = \(containerID) AND z.environment = 2 AND z.zone_id >= \(nextZone)
                    ORDER BY z.zone_id, r.record_name
                    LIMIT \(batch)
                    """, logger: logger)
                try await connection.statement("SET LOCAL enable_sort = on", logger: logger)
                var byZone: [Int64: [Record]] = [:]
                var last = (nextZone, nextRecord)
                for row in rows {
                    let (zoneID, name, fieldsText) = try row.decode((Int64, String, String).self)
                    let fields = try Record.decodeFields(Array(fieldsText.utf8)).filter { $0.key == field }
                    byZone[zoneID, default: []].append(Record(recordName: name, recordType: type, fields: fields))
                    last = (zoneID, name)
                }
                let only = Schema(recordTypes: [type: [field: fieldSchema]])
                let store = RecordStore(database: database, logger: logger)
                for (zoneID, records) in byZone {
                    // Entries a resumed batch or a write since the deploy already made. The batch is
                    // every live record of the type in its zone between its first and last name, so
                    // the entries to replace are those of that name range: a range of the
                    // (container, zone, record name) index whatever plan PostgreSQL picks. (With
                    // `record_name = ANY(names)` and statistics from before a bulk load, it kept the
                    // names as a filter and compared each of a zone's entries with each of the
                    // batch's 20,000 names: 22 s per batch once the zone had 60,000 entries.)
                    guard let first = records.first?.recordName, let last = records.last?.recordName else { continue }
                    try await connection.statement("""
                        DELETE FROM index_entries WHERE container_id = \(containerID) AND zone_id = \(zoneID)
                          AND record_name >= \(first) AND record_name <= \(last) AND record_type = \(type)
                          AND field IN (\(field), \(TextTokens.key(of: field)), \(Geo.key(of: field)))
                        """, logger: logger)
                    let db = DatabaseRef(containerID: containerID, environment: .production, scope: .public, owner: .nobody)
                    do {
                        try await store.indexWrites.writeIndexEntries(db, zoneID: ZoneID(zoneID), records: records, schema: only, on: connection)
                    } catch let error as PSQLError where Database.isTooLargeToIndex(error) {
                        // A value stored while the field was not indexed: the build stops here
                        // until that record is changed, and says what to look for.
                        throw StratusError(.badRequest, "a production record of type \(type) has a value of \(field) too large to index "
                                           + "(about 2,700 bytes after compression at most), among the records named \(first) to \(last); "
                                           + "shorten that value, then build again", underlying: error)
                    }
                }
                try await connection.statement("""
                    UPDATE schema_index_builds SET next_zone = \(last.0), next_record = \(last.1), built = built + \(Int64(rows.count)),
                           done = \(rows.count < batch)
                    WHERE container_id = \(containerID) AND environment = 2 AND record_type = \(type) AND field = \(field)
                    """, logger: logger)
            }
            return try await builds(containerID: containerID, on: connection)
        }
    }

    /// The production index builds of a container not finished yet.
    public func unfinishedBuilds(containerID: ContainerID) async throws -> [IndexBuild] {
        try await database.withConnection { connection in try await builds(containerID: containerID, on: connection) }.filter { !$0.done }
    }

    /// Every production index build of a container (finished ones included).
    func builds(containerID: ContainerID, on connection: PostgresConnection) async throws -> [IndexBuild] {
        try await connection.rows("""
            SELECT record_type, field, built, total, done FROM schema_index_builds
            WHERE container_id = \(containerID) AND environment = 2 ORDER BY record_type, field
            """, logger: logger).map { row in
            let (type, field, built, total, done) = try row.decode((String, String, Int64, Int64, Bool).self)
            return IndexBuild(recordType: type, field: field, built: built, total: total, done: done)
        }
    }

    /// Replaces the development schema with `schema` (from an imported `.ckdb` file); returns the plan
    /// from the current development schema to the new one.
    /// `records`: the development records of each type the import removes or removes a field of.
    public func importDevelopment(_ schema: Schema, containerID: ContainerID, by actor: AuditActor,
                                  dryRun: Bool) async throws -> (plan: SchemaPlan, version: Int64, records: [String: Int64]) {
        let result = try await database.transaction { connection in
            try await lockSchema(containerID: containerID, on: connection)
            let current = try await load(containerID: containerID, environment: .development, on: connection)
            let plan = SchemaPlan.between(production: current, development: schema)
            let touched = Set(plan.changes.filter { $0.kind == .removedType || $0.kind == .removedField }.compactMap(\.recordType))
            let records = try await recordCounts(containerID: containerID, environment: .development, types: touched.sorted(), on: connection)
            guard !dryRun, !plan.isEmpty else { return (plan, current.version, records) }
            let version = try await replace(schema, containerID: containerID, environment: .development, on: connection)
            try await recordHistory(containerID: containerID, environment: .development, version: version, by: actor, kind: "import",
                                    plan: plan.text(), on: connection)
            return (plan, version, records)
        }
        forget(containerID: containerID, environment: .development)
        return result
    }

    /// Development ← production schema, and every development record and zone deleted.
    public func resetDevelopment(containerID: ContainerID, by actor: AuditActor) async throws -> (version: Int64, deletedRecords: Int64) {
        let result = try await database.transaction { connection in
            try await Database.allowLongStatements(on: connection, logger: logger)
            try await lockSchema(containerID: containerID, on: connection)
            let production = try await load(containerID: containerID, environment: .production, on: connection)
            let version = try await replace(production, containerID: containerID, environment: .development, on: connection)
            let zoneFilter = "container_id = $1 AND zone_id IN (SELECT zone_id FROM zones WHERE container_id = $1 AND environment = 1)"
            let deleted = try await connection.rows(PostgresQuery(unsafeSQL: "WITH d AS (DELETE FROM records WHERE \(zoneFilter) AND NOT deleted RETURNING 1) SELECT count(*) FROM d",
                                                                  binds: RecordStore.binds(containerID)), logger: logger).first!.decode(Int64.self)
            for table in ["records", "index_entries", "record_references", "asset_references"] {
                try await connection.statement(PostgresQuery(unsafeSQL: "DELETE FROM \(table) WHERE \(zoneFilter)", binds: RecordStore.binds(containerID)), logger: logger)
            }
            try await connection.statement("DELETE FROM zones WHERE container_id = \(containerID) AND environment = 1", logger: logger)
            try await connection.statement("DELETE FROM usage_counters WHERE container_id = \(containerID) AND environment = 1", logger: logger)
            try await connection.statement("DELETE FROM schema_query_shapes WHERE container_id = \(containerID) AND environment = 1", logger: logger)
            try await recordHistory(containerID: containerID, environment: .development, version: version, by: actor, kind: "reset",
                                    plan: "development schema reset to production (version \(production.version)); \(deleted) development records deleted", on: connection)
            return (version, deleted)
        }
        forget(containerID: containerID, environment: .development)
        return result
    }

    func recordHistory(containerID: ContainerID, environment: ContainerEnvironment, version: Int64, by actor: AuditActor, kind: String, plan: String,
                       on connection: PostgresConnection) async throws {
        try await connection.statement("""
            INSERT INTO schema_deploys (container_id, environment, version, deployed_by, kind, plan)
            VALUES (\(containerID), \(environment.code), \(version), \(actor.name), \(kind), \(plan))
            """, logger: logger)
        try await AuditEntry(containerID: containerID, actor: actor, action: "schema.\(kind)", environment: environment,
                             target: "version \(version)", detail: plan).write(on: connection, logger: logger)
    }

    /// Deploys, imports and resets of one environment, newest first.
    public func history(containerID: ContainerID, environment: ContainerEnvironment) async throws -> [SchemaHistoryEntry] {
        try await database.withConnection { connection in
            try await connection.rows("""
                SELECT deploy_id, version, deployed_by, deployed_at, kind, plan FROM schema_deploys
                WHERE container_id = \(containerID) AND environment = \(environment.code) ORDER BY deploy_id DESC
                """, logger: logger)
        }.map { row in
            let (id, version, by, at, kind, plan) = try row.decode((Int64, Int64, String, Date, String, String).self)
            return SchemaHistoryEntry(id: id, environment: environment, version: version, by: by, at: at, kind: kind, plan: plan)
        }
    }

    /// One field a development query filtered or sorted on.
    public struct QueryShape: Hashable, Sendable {
        public var containerID: ContainerID
        public var recordType: String
        public var field: String
        /// `filter`, `range` or `sort`.
        public var usage: String

        public init(containerID: ContainerID, recordType: String, field: String, usage: String) {
            self.containerID = containerID
            self.recordType = recordType
            self.field = field
            self.usage = usage
        }
    }

    /// Remembers which fields development queries filter and sort on (for deploy warnings), in one statement.
    public func recordQueryShapes(_ shapes: [QueryShape]) async throws {
        guard !shapes.isEmpty else { return }
        _ = try await database.withConnection { connection in
            try await connection.statement("""
                INSERT INTO schema_query_shapes (container_id, environment, record_type, field, usage)
                SELECT DISTINCT c, 1, t, f, u FROM unnest(\(shapes.map(\.containerID))::bigint[], \(shapes.map(\.recordType))::text[],
                                                  \(shapes.map(\.field))::text[], \(shapes.map(\.usage))::text[]) AS x(c, t, f, u)
                ON CONFLICT (container_id, environment, record_type, field, usage) DO UPDATE SET last_used = excluded.last_used
                """, logger: logger)
        }
    }

    /// Query shapes development used in the last `days` days: (record type, field, usage).
    public func recentQueryShapes(containerID: ContainerID, days: Int) async throws -> [(String, String, String)] {
        try await database.withConnection { connection in
            try await connection.rows("""
                SELECT record_type, field, usage FROM schema_query_shapes
                WHERE container_id = \(containerID) AND environment = 1 AND last_used > now() - make_interval(days => \(Int32(days)))
                ORDER BY 1, 2, 3
                """, logger: logger)
        }.map { try $0.decode((String, String, String).self) }
    }
}

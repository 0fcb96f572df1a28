import Foundation
import Logging
import PostgresNIO
import StratusCore
import Synchronization

/// Container-environment schemas: loaded once and cached in memory, reloaded when a request
/// names a type or field the cached copy does not know (another process may have added it).
public final class SchemaStore: Sendable {
    struct Key: Hashable {
        var containerID: Int64
        var environment: ContainerEnvironment
    }

    let database: Database
    let logger: Logger
    private let cache = Mutex<[Key: Schema]>([:])

    public init(database: Database, logger: Logger) {
        self.database = database
        self.logger = logger
    }

    /// The cached schema, loading it on first use.
    public func schema(containerID: Int64, environment: ContainerEnvironment) async throws -> Schema {
        if let cached = cache.withLock({ $0[Key(containerID: containerID, environment: environment)] }) { return cached }
        return try await reload(containerID: containerID, environment: environment)
    }

    /// Reads the schema from the database and caches it.
    @discardableResult
    public func reload(containerID: Int64, environment: ContainerEnvironment) async throws -> Schema {
        let schema = try await database.withConnection { connection in
            try await load(containerID: containerID, environment: environment, on: connection)
        }
        remember(schema, containerID: containerID, environment: environment)
        return schema
    }

    func remember(_ schema: Schema, containerID: Int64, environment: ContainerEnvironment) {
        cache.withLock { entries in
            let key = Key(containerID: containerID, environment: environment)
            if let existing = entries[key], existing.version > schema.version { return }
            entries[key] = schema
        }
    }

    func load(containerID: Int64, environment: ContainerEnvironment, on connection: PostgresConnection) async throws -> Schema {
        var schema = Schema()
        let rows = try await connection.rows("""
            SELECT t.record_type, f.field, f.field_type, f.queryable, f.sortable, f.searchable
            FROM schema_record_types t
            LEFT JOIN schema_fields f ON f.container_id = t.container_id AND f.environment = t.environment AND f.record_type = t.record_type
            WHERE t.container_id = \(containerID) AND t.environment = \(environment.code)
            """, logger: logger)
        for row in rows {
            let (recordType, field, typeName, queryable, sortable, searchable) =
                try row.decode((String, String?, String?, Bool?, Bool?, Bool?).self)
            if schema.recordTypes[recordType] == nil { schema.recordTypes[recordType] = [:] }
            guard let field, let typeName, let type = FieldType(wireName: typeName) else { continue }
            schema.recordTypes[recordType]![field] = FieldSchema(type: type, queryable: queryable ?? false,
                                                                sortable: sortable ?? false, searchable: searchable ?? false)
        }
        let version = try await connection.rows("""
            SELECT version FROM schema_versions WHERE container_id = \(containerID) AND environment = \(environment.code)
            """, logger: logger).first.map { try $0.decode(Int64.self) } ?? 0
        schema.version = version
        return schema
    }

    /// Records just-in-time additions inside the writer's transaction and checks that no
    /// concurrent writer created one of the same fields with another type.
    func add(_ additions: [SchemaAddition], to schema: Schema, containerID: Int64, environment: ContainerEnvironment,
             on connection: PostgresConnection) async throws -> Schema {
        guard !additions.isEmpty else { return schema }
        let types = Array(Set(additions.map(\.recordType)))
        try await connection.query("""
            INSERT INTO schema_record_types (container_id, environment, record_type)
            SELECT \(containerID), \(environment.code), t FROM unnest(\(types)::text[]) AS t
            ON CONFLICT DO NOTHING
            """, logger: logger)
        let fields = additions.compactMap { addition -> (String, String, FieldSchema)? in
            guard let field = addition.field, let type = addition.type else { return nil }
            return (addition.recordType, field, FieldSchema.justInTime(type))
        }
        if !fields.isEmpty {
            try await connection.query("""
                INSERT INTO schema_fields (container_id, environment, record_type, field, field_type, queryable, sortable, searchable)
                SELECT \(containerID), \(environment.code), t, f, ft, q, s, se
                FROM unnest(\(fields.map(\.0))::text[], \(fields.map(\.1))::text[], \(fields.map { $0.2.type.wireName })::text[],
                            \(fields.map { $0.2.queryable })::bool[], \(fields.map { $0.2.sortable })::bool[], \(fields.map { $0.2.searchable })::bool[])
                     AS u(t, f, ft, q, s, se)
                ON CONFLICT DO NOTHING
                """, logger: logger)
            let stored = try await connection.rows("""
                SELECT record_type, field, field_type FROM schema_fields
                WHERE container_id = \(containerID) AND environment = \(environment.code)
                  AND (record_type, field) IN (SELECT * FROM unnest(\(fields.map(\.0))::text[], \(fields.map(\.1))::text[]))
                """, logger: logger)
            for row in stored {
                let (recordType, field, typeName) = try row.decode((String, String, String).self)
                if let wanted = fields.first(where: { $0.0 == recordType && $0.1 == field }), wanted.2.type.wireName != typeName {
                    throw StratusError.badRequest("field '\(field)' of '\(recordType)' was just created as \(typeName) by another request; send a \(typeName) value")
                }
            }
        }
        let version = try await connection.rows("""
            INSERT INTO schema_versions (container_id, environment, version) VALUES (\(containerID), \(environment.code), 1)
            ON CONFLICT (container_id, environment) DO UPDATE SET version = schema_versions.version + 1
            RETURNING version
            """, logger: logger).first!.decode(Int64.self)
        var updated = schema
        updated.version = version
        return updated
    }
}

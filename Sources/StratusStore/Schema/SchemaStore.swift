import Foundation
import Logging
import PostgresNIO
import StratusCore
import Synchronization

/// Container-environment schemas: loaded once and cached in memory, reloaded when a request
/// names a type or field the cached copy does not know (another process may have added it).
public final class SchemaStore: Sendable {
    struct Key: Hashable {
        var containerID: ContainerID
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
    public func schema(containerID: ContainerID, environment: ContainerEnvironment) async throws -> Schema {
        if let cached = cache.withLock({ $0[Key(containerID: containerID, environment: environment)] }) { return cached }
        return try await reload(containerID: containerID, environment: environment)
    }

    /// Reads the schema from the database and caches it.
    @discardableResult
    public func reload(containerID: ContainerID, environment: ContainerEnvironment) async throws -> Schema {
        let schema = try await database.withConnection { connection in
            try await load(containerID: containerID, environment: environment, on: connection)
        }
        remember(schema, containerID: containerID, environment: environment)
        return schema
    }

    func remember(_ schema: Schema, containerID: ContainerID, environment: ContainerEnvironment) {
        cache.withLock { entries in
            let key = Key(containerID: containerID, environment: environment)
            if let existing = entries[key], existing.version > schema.version { return }
            entries[key] = schema
        }
    }

    func load(containerID: ContainerID, environment: ContainerEnvironment, on connection: PostgresConnection) async throws -> Schema {
        var schema = Schema()
        let rows = try await connection.rows("""
            SELECT t.record_type, f.field, f.field_type, f.queryable, f.sortable, f.searchable, f.encrypted, f.number_declaration
            FROM schema_record_types t
            LEFT JOIN schema_fields f ON f.container_id = t.container_id AND f.environment = t.environment AND f.record_type = t.record_type
            WHERE t.container_id = \(containerID) AND t.environment = \(environment.code)
            """, logger: logger)
        for row in rows {
            let (recordType, field, typeName, queryable, sortable, searchable, encrypted, number) =
                try row.decode((String, String?, String?, Bool?, Bool?, Bool?, Bool?, String?).self)
            if schema.recordTypes[recordType] == nil { schema.recordTypes[recordType] = [:] }
            guard let field, let typeName, let type = FieldType(wireName: typeName) else { continue }
            schema.recordTypes[recordType]![field] = FieldSchema(
                type: type, queryable: queryable ?? false, sortable: sortable ?? false, searchable: searchable ?? false,
                encrypted: encrypted ?? false, number: number == "number" ? .number : number == "preferred" ? .preferred : nil)
        }
        for row in try await connection.rows("""
            SELECT record_type, role, permissions FROM schema_grants WHERE container_id = \(containerID) AND environment = \(environment.code)
            """, logger: logger) {
            let (recordType, role, permissions) = try row.decode((String, String, [String]).self)
            schema.grants[recordType, default: [:]][role] = Set(permissions.compactMap(Permission.init(rawValue:)))
        }
        for row in try await connection.rows("""
            SELECT role FROM schema_roles WHERE container_id = \(containerID) AND environment = \(environment.code)
            """, logger: logger) {
            schema.roles.insert(try row.decode(String.self))
        }
        for row in try await connection.rows("""
            SELECT record_type, field FROM schema_index_builds WHERE container_id = \(containerID) AND environment = \(environment.code) AND NOT done
            """, logger: logger) {
            let (recordType, field) = try row.decode((String, String).self)
            schema.buildingIndexes.insert(recordType + "." + field)
        }
        let version = try await connection.rows("""
            SELECT version FROM schema_versions WHERE container_id = \(containerID) AND environment = \(environment.code)
            """, logger: logger).first.map { try $0.decode(Int64.self) } ?? 0
        schema.version = version
        return schema
    }

    /// Reads a schema inside the caller's transaction (management operations).
    public func load(containerID: ContainerID, environment: ContainerEnvironment) async throws -> Schema {
        try await database.withConnection { try await self.load(containerID: containerID, environment: environment, on: $0) }
    }

    /// Replaces a container-environment's schema with `schema` and bumps its version; returns the new version.
    func replace(_ schema: Schema, containerID: ContainerID, environment: ContainerEnvironment, on connection: PostgresConnection) async throws -> Int64 {
        let env = environment.code
        for table in ["schema_fields", "schema_record_types", "schema_grants", "schema_roles"] {
            try await connection.statement(PostgresQuery(unsafeSQL: "DELETE FROM \(table) WHERE container_id = $1 AND environment = $2",
                                                     binds: RecordStore.binds(containerID, env)), logger: logger)
        }
        let types = Array(schema.recordTypes.keys)
        if !types.isEmpty {
            try await connection.statement("""
                INSERT INTO schema_record_types (container_id, environment, record_type)
                SELECT \(containerID), \(env), t FROM unnest(\(types)::text[]) AS t
                """, logger: logger)
        }
        var fieldRows: [(String, String, FieldSchema)] = []
        for (type, fields) in schema.recordTypes { for (name, field) in fields { fieldRows.append((type, name, field)) } }
        try await insertFields(fieldRows, containerID: containerID, environment: environment, on: connection)
        var grantRows: [(String, String, [String])] = []
        for (type, grants) in schema.grants { for (role, permissions) in grants where !permissions.isEmpty { grantRows.append((type, role, permissions.sorted().map(\.rawValue))) } }
        try await insertGrants(grantRows, containerID: containerID, environment: environment, on: connection)
        let roles = Array(schema.roles)
        if !roles.isEmpty {
            try await connection.statement("""
                INSERT INTO schema_roles (container_id, environment, role) SELECT \(containerID), \(env), r FROM unnest(\(roles)::text[]) AS r
                """, logger: logger)
        }
        return try await bumpVersion(containerID: containerID, environment: environment, on: connection)
    }

    func insertFields(_ rows: [(String, String, FieldSchema)], containerID: ContainerID, environment: ContainerEnvironment,
                      on connection: PostgresConnection) async throws {
        guard !rows.isEmpty else { return }
        let numbers: [String] = rows.map { row -> String in
            switch row.2.number {
            case .number?: return "number"
            case .preferred?: return "preferred"
            case nil: return ""
            }
        }
        try await connection.statement("""
            INSERT INTO schema_fields (container_id, environment, record_type, field, field_type, queryable, sortable, searchable, encrypted, number_declaration)
            SELECT \(containerID)::bigint, \(environment.code)::int2, t, f, ft, q, s, se, en, NULLIF(nd, '')
            FROM unnest(\(rows.map(\.0))::text[], \(rows.map(\.1))::text[], \(rows.map { $0.2.type.wireName })::text[],
                        \(rows.map { $0.2.queryable })::bool[], \(rows.map { $0.2.sortable })::bool[], \(rows.map { $0.2.searchable })::bool[],
                        \(rows.map { $0.2.encrypted })::bool[], \(numbers)::text[]) AS u(t, f, ft, q, s, se, en, nd)
            ON CONFLICT DO NOTHING
            """, logger: logger)
    }

    func insertGrants(_ rows: [(String, String, [String])], containerID: ContainerID, environment: ContainerEnvironment,
                      on connection: PostgresConnection) async throws {
        guard !rows.isEmpty else { return }
        // Arrays of arrays cannot be bound directly: send "READ,WRITE" and split in SQL.
        try await connection.statement("""
            INSERT INTO schema_grants (container_id, environment, record_type, role, permissions)
            SELECT \(containerID)::bigint, \(environment.code)::int2, t, r, string_to_array(p, ',')
            FROM unnest(\(rows.map(\.0))::text[], \(rows.map(\.1))::text[], \(rows.map { $0.2.joined(separator: ",") })::text[]) AS u(t, r, p)
            ON CONFLICT DO NOTHING
            """, logger: logger)
    }

    /// Moves the schema's version in the caller's transaction; with `notify`, every server
    /// process forgets its older copy when the transaction commits (`Invalidations`).
    ///
    /// Just-in-time additions do not notify: they only add types and fields (with the default
    /// grants), which another process finds by itself when a request names one it does not know,
    /// and a notifying transaction takes PostgreSQL's cluster-wide notification lock at commit:
    /// on every development write that adds a field, that serialized the commits of every
    /// database on the server (the full test suite's writers waited past their lock timeout).
    func bumpVersion(containerID: ContainerID, environment: ContainerEnvironment, notify: Bool = true, on connection: PostgresConnection) async throws -> Int64 {
        let version = try await connection.rows("""
            INSERT INTO schema_versions (container_id, environment, version) VALUES (\(containerID), \(environment.code), 1)
            ON CONFLICT (container_id, environment) DO UPDATE SET version = schema_versions.version + 1
            RETURNING version
            """, logger: logger).first!.decode(Int64.self)
        if notify {
            try await Invalidations.publish(.schema(containerID: containerID, environment: environment, version: version), on: connection, logger: logger)
        }
        return version
    }

    /// Forgets what `event` says changed: a schema older than the version it names, or every schema.
    public func invalidate(_ event: Invalidations.Event) {
        switch event {
        case .schema(let containerID, let environment, let version):
            cache.withLock { entries in
                let key = Key(containerID: containerID, environment: environment)
                if let cached = entries[key], cached.version < version { entries[key] = nil }
            }
        case .all:
            cache.withLock { $0.removeAll() }
        default:
            break
        }
    }

    /// Forgets the cached schema of a container-environment (after a deploy, import or reset).
    public func forget(containerID: ContainerID, environment: ContainerEnvironment) {
        _ = cache.withLock { $0.removeValue(forKey: Key(containerID: containerID, environment: environment)) }
    }

    /// Records just-in-time additions inside the writer's transaction and checks that no
    /// concurrent writer created one of the same fields with another type.
    func add(_ additions: [SchemaAddition], to schema: Schema, containerID: ContainerID, environment: ContainerEnvironment,
             on connection: PostgresConnection) async throws -> Schema {
        guard !additions.isEmpty else { return schema }
        let newTypes = Array(Set(additions.filter { $0.field == nil }.map(\.recordType)))
        let types = Array(Set(additions.map(\.recordType)))
        let inserted = try await connection.rows("""
            INSERT INTO schema_record_types (container_id, environment, record_type)
            SELECT \(containerID), \(environment.code), t FROM unnest(\(types)::text[]) AS t
            ON CONFLICT DO NOTHING RETURNING record_type
            """, logger: logger)
        // New types get CloudKit's default grants: _creator WRITE, _icloud CREATE, _world READ.
        let created = try Set(inserted.map { try $0.decode(String.self) }).intersection(newTypes)
        var grantRows: [(String, String, [String])] = []
        for type in created { for (role, permissions) in SystemRole.defaultGrants(for: type) { grantRows.append((type, role, permissions.sorted().map(\.rawValue))) } }
        try await insertGrants(grantRows, containerID: containerID, environment: environment, on: connection)
        let fields = additions.compactMap { addition -> (String, String, FieldSchema)? in
            guard let field = addition.field, let type = addition.type else { return nil }
            return (addition.recordType, field, FieldSchema.justInTime(type))
        }
        if !fields.isEmpty {
            try await insertFields(fields, containerID: containerID, environment: environment, on: connection)
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
        var updated = schema
        for type in created { updated.grants[type] = SystemRole.defaultGrants(for: type) }
        updated.version = try await bumpVersion(containerID: containerID, environment: environment, notify: false, on: connection)
        return updated
    }
}

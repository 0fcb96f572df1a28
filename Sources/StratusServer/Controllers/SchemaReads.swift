import StratusCore
import StratusStore

/// The schema as requests read it: what the caller's security roles let them read, and
/// queries parsed against the environment's schema.
struct SchemaReads: Sendable {
    let schemas: SchemaStore

    /// The schema whose grants decide what `access` may read of `records`, reloaded once when the
    /// cached copy lacks one of their types (another process may have added it).
    func accessSchema(_ db: DatabaseRef, for records: [Record]) async throws -> Schema {
        let schema = try await schemas.schema(containerID: db.containerID, environment: db.environment)
        guard records.contains(where: { schema.recordTypes[$0.recordType] == nil }) else { return schema }
        return try await schemas.reload(containerID: db.containerID, environment: db.environment)
    }

    /// The records of a page the caller's security roles let them read, in order (public
    /// database; every record elsewhere). Change feeds leave the others out; their cursor moves
    /// past them all the same.
    func readable(_ records: [Record], by request: DataRequest, in db: DatabaseRef) async throws -> [Record] {
        guard let access = request.access, !records.isEmpty else { return records }
        let schema = try await accessSchema(db, for: records)
        return records.filter { access.allows(.read, on: $0.recordType, creator: $0.createdBy, in: schema) }
    }

    /// Restricts a public-database query to what the caller's roles may read: every record of
    /// the type, only their own (`_creator`), or none (ACCESS_DENIED; AUTHENTICATION_REQUIRED
    /// when signing in would give a role that may read). Returns the user the query was narrowed
    /// to, if it was.
    func restrict(_ query: inout Query, for request: DataRequest, in db: DatabaseRef) async throws -> String? {
        guard let access = request.access else { return nil }
        let schema = try await schemas.schema(containerID: db.containerID, environment: db.environment)
        if access.allows(.read, on: query.recordType, creator: nil, in: schema) { return nil }
        if let user = access.user, access.readsOnlyOwnRecords(of: query.recordType, in: schema) {
            query.filters.append(QueryFilter(target: .system(.createdUserRecordName), comparator: .equals,
                                             values: [.text(user.rawValue)], scalar: SystemField.createdUserRecordName.valueType))
            return user.rawValue
        }
        if access.user == nil, !RecordAccess.roles(granting: .read, on: query.recordType, in: schema).isEmpty {
            _ = try request.caller.requireUser(signInURL: request.signInURL)
        }
        throw RecordAccess.denial(.read, on: query.recordType, recordName: nil, in: schema)
    }

    /// Parses a query, reloading the schema once if it names something the cached copy lacks
    /// (another process may have added it).
    func parseQuery(_ json: JSON, db: DatabaseRef) async throws -> Query {
        var schema = try await schemas.schema(containerID: db.containerID, environment: db.environment)
        if let query = try? Query.parse(json, schema: schema), schema.recordTypes[query.recordType] != nil { return query }
        let recordType = json["recordType"]?.stringValue
        schema = try await schemas.reload(containerID: db.containerID, environment: db.environment)
        if let recordType, Names.isIdentifier(recordType), schema.recordTypes[recordType] == nil {
            if db.environment == .production {
                throw StratusError.badRequest("unknown record type '\(recordType)': it is not in the production schema; save it in development, then deploy the schema")
            }
            throw StratusError.badRequest("unknown record type '\(recordType)': no record of that type was ever saved in this environment")
        }
        return try Query.parse(json, schema: schema)
    }
}

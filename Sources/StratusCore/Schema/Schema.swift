/// How a numeric field was declared in the schema language, when it was not a plain type.
public enum NumberDeclaration: Sendable, Equatable {
    /// `NUMBER` (a just-in-time number whose type is not pinned; stored as INT64).
    case number
    /// `NUMBER PREFERRED AS INT64|DOUBLE`.
    case preferred
}

/// A field in a record type's schema.
public struct FieldSchema: Sendable, Equatable {
    public var type: FieldType
    /// Equality filters allowed (index entries kept).
    public var queryable: Bool
    /// Range filters and sorting allowed.
    public var sortable: Bool
    /// Full-text token filters allowed.
    public var searchable: Bool
    /// `ENCRYPTED` in the schema language (values use the plain type on the wire).
    public var encrypted: Bool
    /// Set when the field was declared `NUMBER …` rather than INT64/DOUBLE.
    public var number: NumberDeclaration?

    public init(type: FieldType, queryable: Bool = false, sortable: Bool = false, searchable: Bool = false,
                encrypted: Bool = false, number: NumberDeclaration? = nil) {
        self.type = type
        self.queryable = queryable
        self.sortable = sortable
        self.searchable = searchable
        self.encrypted = encrypted
        self.number = number
    }

    /// Whether the field gets index entries.
    public var isIndexed: Bool { queryable || sortable || searchable }

    /// The indexes a field gets when development creates it just-in-time: QUERYABLE and SORTABLE
    /// for every type that can be compared or located (not BYTES or ASSET), and SEARCHABLE for
    /// strings, so that a new app can query what it saves at once. A deploy carries them to
    /// production like any other index.
    public static func justInTime(_ type: FieldType) -> FieldSchema {
        switch type.scalar {
        case .bytes, .asset:
            return FieldSchema(type: type)
        case .string:
            return FieldSchema(type: type, queryable: true, sortable: true, searchable: true)
        case .int64, .double, .timestamp, .reference, .location:
            return FieldSchema(type: type, queryable: true, sortable: true)
        }
    }
}

/// Permissions a security role can be granted on a record type.
public enum Permission: String, Sendable, CaseIterable, Hashable, Comparable {
    case read = "READ"
    case create = "CREATE"
    case write = "WRITE"

    public static func < (a: Permission, b: Permission) -> Bool {
        allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)!
    }
}

/// The built-in security roles.
public enum SystemRole {
    /// Anyone with an API token.
    public static let world = "_world"
    /// Any signed-in user.
    public static let icloud = "_icloud"
    /// The record's creator.
    public static let creator = "_creator"
    public static let all: [String] = [creator, icloud, world]

    /// CloudKit's default grants for a new record type: `_creator` WRITE, `_icloud` CREATE, `_world` READ.
    public static let defaultGrants: [String: Set<Permission>] = [creator: [.write], icloud: [.create], world: [.read]]

    /// The record type holding one record per user in the public database (named by the user
    /// record name, created by the server when the user signs up or in).
    public static let usersRecordType = "Users"

    /// CloudKit's grants for the `Users` type: each user may change their own record, anyone may
    /// read them, and only the server creates them.
    public static let usersGrants: [String: Set<Permission>] = [creator: [.write], world: [.read]]

    /// The grants a record type made just-in-time gets.
    public static func defaultGrants(for recordType: String) -> [String: Set<Permission>] {
        recordType == usersRecordType ? usersGrants : defaultGrants
    }
}

/// The schema of one container-environment.
public struct Schema: Sendable, Equatable {
    /// Record types by name, each with its fields by name (system fields such as `___recordID`
    /// appear only when the schema names them, to give them indexes).
    public var recordTypes: [String: [String: FieldSchema]]
    /// Grants per record type: role → permissions.
    public var grants: [String: [String: Set<Permission>]]
    /// Custom roles (`CREATE ROLE`).
    public var roles: Set<String>
    /// Bumped by every change.
    public var version: Int64
    /// `Type.field` whose production index entries are still being built after a deploy:
    /// queries cannot use those indexes yet.
    public var buildingIndexes: Set<String> = []

    public init(recordTypes: [String: [String: FieldSchema]] = [:], grants: [String: [String: Set<Permission>]] = [:],
                roles: Set<String> = [], version: Int64 = 0) {
        self.recordTypes = recordTypes
        self.grants = grants
        self.roles = roles
        self.version = version
    }

    /// Whether `field` of `recordType` has an index still being built.
    public func isBuilding(_ field: String, of recordType: String) -> Bool {
        buildingIndexes.contains(recordType + "." + field)
    }

    /// The same schema content, ignoring the version number.
    public func sameDefinition(as other: Schema) -> Bool {
        recordTypes == other.recordTypes && grants == other.grants && roles == other.roles
    }

    /// The schema of a field, if known.
    public func field(_ name: String, of recordType: String) -> FieldSchema? {
        recordTypes[recordType]?[name]
    }
}

/// A just-in-time schema extension recorded while decoding a write.
public struct SchemaAddition: Sendable, Hashable {
    public var recordType: String
    /// `nil` when only the record type is new and has no fields yet.
    public var field: String?
    public var type: FieldType?

    public init(recordType: String, field: String?, type: FieldType?) {
        self.recordType = recordType
        self.field = field
        self.type = type
    }
}

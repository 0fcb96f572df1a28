/// A field in a record type's schema.
public struct FieldSchema: Sendable, Equatable {
    public var type: FieldType
    /// Equality filters allowed (index entries kept).
    public var queryable: Bool
    /// Range filters and sorting allowed.
    public var sortable: Bool
    /// Full-text token filters allowed.
    public var searchable: Bool

    public init(type: FieldType, queryable: Bool = false, sortable: Bool = false, searchable: Bool = false) {
        self.type = type
        self.queryable = queryable
        self.sortable = sortable
        self.searchable = searchable
    }

    /// Whether the field gets index entries.
    public var isIndexed: Bool { queryable || sortable || searchable }

    /// The indexes a field gets when development creates it just-in-time: QUERYABLE and SORTABLE
    /// for every type that can be compared (not BYTES, LOCATION or ASSET), so that a new app can
    /// query what it saves at once. A deploy carries them to production like any other index.
    public static func justInTime(_ type: FieldType) -> FieldSchema {
        switch type.scalar {
        case .bytes, .location, .asset:
            return FieldSchema(type: type)
        case .string, .int64, .double, .timestamp, .reference:
            return FieldSchema(type: type, queryable: true, sortable: true)
        }
    }
}

/// The schema of one container-environment.
public struct Schema: Sendable, Equatable {
    /// Record types by name, each with its fields by name.
    public var recordTypes: [String: [String: FieldSchema]]
    /// Bumped by every change.
    public var version: Int64

    public init(recordTypes: [String: [String: FieldSchema]] = [:], version: Int64 = 0) {
        self.recordTypes = recordTypes
        self.version = version
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

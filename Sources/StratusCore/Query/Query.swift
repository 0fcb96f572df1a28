/// Filter comparators, with CloudKit's spellings.
public enum FilterComparator: String, Sendable, CaseIterable {
    case equals = "EQUALS"
    case notEquals = "NOT_EQUALS"
    case lessThan = "LESS_THAN"
    case lessThanOrEquals = "LESS_THAN_OR_EQUALS"
    case greaterThan = "GREATER_THAN"
    case greaterThanOrEquals = "GREATER_THAN_OR_EQUALS"
    case near = "NEAR"
    case containsAllTokens = "CONTAINS_ALL_TOKENS"
    case containsAnyTokens = "CONTAINS_ANY_TOKENS"
    case `in` = "IN"
    case notIn = "NOT_IN"
    case listContains = "LIST_CONTAINS"
    case notListContains = "NOT_LIST_CONTAINS"
    case listContainsAny = "LIST_CONTAINS_ANY"
    case notListContainsAny = "NOT_LIST_CONTAINS_ANY"
    case listContainsAll = "LIST_CONTAINS_ALL"
    case notListContainsAll = "NOT_LIST_CONTAINS_ALL"
    case beginsWith = "BEGINS_WITH"
    case notBeginsWith = "NOT_BEGINS_WITH"
    case listMemberBeginsWith = "LIST_MEMBER_BEGINS_WITH"
    case notListMemberBeginsWith = "NOT_LIST_MEMBER_BEGINS_WITH"

    /// Whether the comparator orders values (needs SORTABLE).
    public var isRange: Bool {
        switch self {
        case .lessThan, .lessThanOrEquals, .greaterThan, .greaterThanOrEquals: return true
        default: return false
        }
    }
}

/// The record columns a filter or sort may name through `systemFieldName`.
public enum SystemField: String, Sendable, CaseIterable {
    case recordName
    case createdTimestamp
    case modifiedTimestamp
    case createdUserRecordName
    case modifiedUserRecordName

    /// The schema-language name (`___createTime` …).
    public var schemaName: String {
        switch self {
        case .recordName: return "___recordID"
        case .createdTimestamp: return "___createTime"
        case .modifiedTimestamp: return "___modTime"
        case .createdUserRecordName: return "___createdBy"
        case .modifiedUserRecordName: return "___modifiedBy"
        }
    }

    /// The type values of this field are compared as.
    public var valueType: ScalarType {
        switch self {
        case .recordName, .createdUserRecordName, .modifiedUserRecordName: return .reference
        case .createdTimestamp, .modifiedTimestamp: return .timestamp
        }
    }

    /// Looks up a `systemFieldName` or its schema-language spelling.
    public init?(name: String) {
        if let field = SystemField(rawValue: name) {
            self = field
            return
        }
        guard let field = SystemField.allCases.first(where: { $0.schemaName == name }) else { return nil }
        self = field
    }
}

/// What a filter or sort is on.
public enum QueryTarget: Sendable, Equatable, Hashable {
    case field(String)
    case system(SystemField)

    /// The name to show in messages.
    public var displayName: String {
        switch self {
        case .field(let name): return name
        case .system(let field): return field.rawValue
        }
    }
}

/// A comparable scalar used in index entries and filter values: the typed value an index stores.
public enum IndexValue: Sendable, Equatable, Hashable {
    case int(Int64)
    case double(Double)
    case text(String)

    /// The index value of a scalar field value, or `nil` for types that are not indexed.
    public init?(_ value: FieldValue) {
        switch value {
        case .string(let text): self = .text(text)
        case .int64(let number), .timestamp(let number): self = .int(number)
        case .double(let number): self = .double(number)
        case .reference(let reference): self = .text(reference.recordName)
        case .bytes, .location, .asset, .list: return nil
        }
    }
}

/// One validated filter.
public struct QueryFilter: Sendable, Equatable {
    public var target: QueryTarget
    public var comparator: FilterComparator
    /// The values compared against (one for scalar comparators; several for IN, LIST_CONTAINS_ANY …).
    public var values: [IndexValue]
    /// The scalar type of the field.
    public var scalar: ScalarType
    /// `NEAR`: the centre of the circle (`fieldValue`) and its radius in metres (`distance`).
    public var near: Near?

    /// The circle a `NEAR` filter matches.
    public struct Near: Sendable, Equatable {
        public var center: GeoPoint
        public var distance: Double
    }

    public init(target: QueryTarget, comparator: FilterComparator, values: [IndexValue], scalar: ScalarType, near: Near? = nil) {
        self.target = target
        self.comparator = comparator
        self.values = values
        self.scalar = scalar
        self.near = near
    }
}

/// One validated sort descriptor.
public struct QuerySort: Sendable, Equatable {
    public var target: QueryTarget
    public var ascending: Bool
    /// The type of the sort values (DOUBLE, metres, when sorting by distance).
    public var scalar: ScalarType
    /// `relativeLocation`: sort a LOCATION field by its distance from this point.
    public var relativeTo: GeoPoint?

    public init(target: QueryTarget, ascending: Bool, scalar: ScalarType, relativeTo: GeoPoint? = nil) {
        self.target = target
        self.ascending = ascending
        self.scalar = scalar
        self.relativeTo = relativeTo
    }
}

/// A validated `records/query` query.
public struct Query: Sendable, Equatable {
    /// Most filters in one query.
    public static let maximumFilters = 20
    /// Most sort descriptors in one query.
    public static let maximumSorts = 4
    /// Most values in one IN / LIST_CONTAINS_ANY list.
    public static let maximumValues = 200
    /// Most distinct words in one CONTAINS_ALL_TOKENS / CONTAINS_ANY_TOKENS value.
    public static let maximumTokens = 20

    public var recordType: String
    public var filters: [QueryFilter]
    public var sorts: [QuerySort]

    /// Parses and validates a CKWS query dictionary against the schema.
    ///
    /// Filtering needs QUERYABLE (equality, IN, list and prefix comparators) or SORTABLE (range
    /// comparators) on the field; sorting needs SORTABLE; token comparators need SEARCHABLE. A query
    /// on a record type the schema does not know matches nothing.
    public static func parse(_ json: JSON, schema: Schema) throws(StratusError) -> Query {
        guard let members = json.objectValue else { throw .badRequest("'query' must be an object") }
        guard let recordType = members["recordType"]?.stringValue else {
            throw .badRequest("query.recordType is required and must be a string")
        }
        try Names.validateRecordType(recordType)
        let fields = schema.recordTypes[recordType] ?? [:]
        var filters: [QueryFilter] = []
        if let filterJSON = members["filterBy"], filterJSON != .null {
            guard let list = filterJSON.arrayValue else { throw .badRequest("query.filterBy must be an array") }
            guard list.count <= maximumFilters else { throw .badRequest("at most \(maximumFilters) filters are allowed in one query") }
            for (index, item) in list.enumerated() {
                filters.append(try parseFilter(item, index: index, recordType: recordType, fields: fields, building: schema.buildingIndexes))
            }
        }
        var sorts: [QuerySort] = []
        if let sortJSON = members["sortBy"], sortJSON != .null {
            guard let list = sortJSON.arrayValue else { throw .badRequest("query.sortBy must be an array") }
            guard list.count <= maximumSorts else { throw .badRequest("at most \(maximumSorts) sort descriptors are allowed in one query") }
            for (index, item) in list.enumerated() {
                guard let sort = item.objectValue else { throw .badRequest("query.sortBy[\(index)] must be an object") }
                let (target, scalar, schemaField) = try resolveTarget(sort, key: "query.sortBy[\(index)]", recordType: recordType, fields: fields, building: schema.buildingIndexes)
                let ascending = try Wire.bool(sort["ascending"], key: "query.sortBy[\(index)].ascending") ?? true
                if let relative = sort["relativeLocation"], relative != .null {
                    guard let schemaField, scalar == .location, !schemaField.type.isList else {
                        if schemaField?.type.isList == true, scalar == .location {
                            throw .badRequest("query.sortBy[\(index)]: '\(target.displayName)' of '\(recordType)' is a LIST<LOCATION>, which has no one distance to sort by; filter it with NEAR, or sort by a LOCATION field")
                        }
                        throw .badRequest("query.sortBy[\(index)]: relativeLocation sorts a LOCATION field by distance, and '\(target.displayName)' of '\(recordType)' is not a LOCATION field")
                    }
                    guard schemaField.sortable || schemaField.queryable else {
                        throw .badRequest("query.sortBy[\(index)]: sorting '\(target.displayName)' by distance needs a SORTABLE (or QUERYABLE) index on it in the schema of '\(recordType)'"
                            + " (in production: add it in development, then deploy the schema)")
                    }
                    let point = try location(relative, key: "query.sortBy[\(index)].relativeLocation")
                    sorts.append(QuerySort(target: target, ascending: ascending, scalar: .double, relativeTo: point))
                    continue
                }
                if let schemaField {
                    guard isSortable(schemaField) else {
                        if scalar == .location {
                            throw .badRequest("cannot sort by '\(target.displayName)': a LOCATION field sorts by its distance from a point; add 'relativeLocation' to the sort descriptor")
                        }
                        throw .badRequest("cannot sort by '\(target.displayName)': the field is not SORTABLE in the schema of '\(recordType)'; add a SORTABLE index")
                    }
                }
                sorts.append(QuerySort(target: target, ascending: ascending, scalar: scalar))
            }
        }
        return Query(recordType: recordType, filters: filters, sorts: sorts)
    }

    /// The comparators a filter on `field` may use, by the rules `parse` applies (each is tried
    /// on a value of the field's type): for a query builder to offer only what will be accepted.
    public static func comparators(for field: FieldSchema) -> [FilterComparator] {
        let sample: JSON = switch field.type.scalar {
        case .string: "a"
        case .int64, .timestamp: 1
        case .double: 1.5
        case .reference: ["recordName": "a"]
        case .location: ["latitude": 0, "longitude": 0]
        case .bytes, .asset: "AA=="
        }
        return FilterComparator.allCases.filter { comparator in
            var filter: [String: JSON] = ["fieldName": "f", "comparator": .string(comparator.rawValue)]
            switch comparator {
            case .in, .notIn, .listContainsAny, .notListContainsAny, .listContainsAll, .notListContainsAll:
                filter["fieldValue"] = ["value": [sample]]
            case .near:
                filter["fieldValue"] = ["value": sample]
                filter["distance"] = 1
            default:
                filter["fieldValue"] = ["value": sample]
            }
            return (try? parseFilter(.object(filter), index: 0, recordType: "T", fields: ["f": field], building: [])) != nil
        }
    }

    /// Whether records may be sorted by `field` (by the rules `parse` applies).
    public static func isSortable(_ field: FieldSchema) -> Bool {
        field.sortable && !field.type.isList && field.type.scalar != .location
    }

    static func resolveTarget(_ members: [String: JSON], key: String, recordType: String, fields: [String: FieldSchema],
                              building: Set<String>) throws(StratusError) -> (QueryTarget, ScalarType, FieldSchema?) {
        if let system = members["systemFieldName"], system != .null {
            guard let name = system.stringValue, let field = SystemField(name: name) else {
                throw .badRequest("\(key).systemFieldName must be one of \(SystemField.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return (.system(field), field.valueType, nil)
        }
        guard let name = members["fieldName"]?.stringValue else {
            throw .badRequest("\(key) needs a string 'fieldName' (or 'systemFieldName')")
        }
        if let system = SystemField(name: name), name.hasPrefix("___") {
            return (.system(system), system.valueType, nil)
        }
        try Names.validateFieldName(name)
        guard let field = fields[name] else {
            throw .badRequest("record type '\(recordType)' has no field '\(name)' in the schema")
        }
        if building.contains(recordType + "." + name) {
            throw .badRequest("the index on '\(name)' of '\(recordType)' is still being built for existing records; it can be queried once 'stratus schema deploy' has finished building it")
        }
        return (.field(name), field.type.scalar, field)
    }

    static func parseFilter(_ json: JSON, index: Int, recordType: String, fields: [String: FieldSchema],
                            building: Set<String>) throws(StratusError) -> QueryFilter {
        let key = "query.filterBy[\(index)]"
        guard let members = json.objectValue else { throw .badRequest("\(key) must be an object") }
        guard let comparatorText = members["comparator"]?.stringValue else { throw .badRequest("\(key) needs a string 'comparator'") }
        guard let comparator = FilterComparator(rawValue: comparatorText) else {
            throw .badRequest("\(key) has unknown comparator '\(Names.printable(comparatorText))'")
        }
        let (target, scalar, schemaField) = try resolveTarget(members, key: key, recordType: recordType, fields: fields, building: building)
        let isList = schemaField?.type.isList ?? false
        switch comparator {
        case .near:
            guard let schemaField, scalar == .location, schemaField.queryable else {
                throw .badRequest("\(key): NEAR needs a QUERYABLE LOCATION field, and '\(target.displayName)' of '\(recordType)' is not one; "
                    + (scalar == .location ? "mark it QUERYABLE in the schema (in production: in development, then deploy the schema)" : "use a LOCATION field"))
            }
            guard let value = members["fieldValue"], value != .null else {
                throw .badRequest("\(key): NEAR needs a 'fieldValue' whose value is the centre, a location dictionary with 'latitude' and 'longitude'")
            }
            let center = try location(value, key: "\(key).fieldValue")
            let distance: Double
            switch members["distance"] {
            case .int(let number)?: distance = Double(number)
            case .double(let number)?: distance = number
            case nil, .null?: throw .badRequest("\(key): NEAR needs 'distance', the radius in metres")
            default: throw .badRequest("\(key): 'distance' must be a number of metres")
            }
            guard distance.isFinite, distance >= 0, distance <= Geo.maximumDistance.rounded(.up) else {
                throw .badRequest("\(key): 'distance' must be between 0 and \(Int(Geo.maximumDistance.rounded(.up))) metres (half the Earth's circumference), not \(distance)")
            }
            return QueryFilter(target: target, comparator: .near, values: [], scalar: .location, near: .init(center: center, distance: distance))
        case .containsAllTokens, .containsAnyTokens:
            guard let schemaField, schemaField.searchable, scalar == .string else {
                throw .badRequest("\(key): \(comparator.rawValue) needs a SEARCHABLE STRING field, and '\(target.displayName)' of '\(recordType)' is not one; "
                    + "mark it SEARCHABLE in the schema (in production: in development, then deploy the schema)")
            }
            guard let text = members["fieldValue"]?["value"]?.stringValue else {
                throw .badRequest("\(key) needs a 'fieldValue' dictionary whose 'value' is a string: the words to find")
            }
            let tokens = TextTokens.tokens(of: text, limit: maximumTokens + 1)
            guard !tokens.isEmpty else { throw .badRequest("\(key): '\(Names.printable(String(text.prefix(100))))' has no words to search for (letters or digits)") }
            guard tokens.count <= maximumTokens else {
                throw .badRequest("\(key): at most \(maximumTokens) different words can be searched for at once")
            }
            return QueryFilter(target: target, comparator: comparator, values: tokens.map { .text($0) }, scalar: .string)
        case .listContains, .notListContains, .listContainsAny, .notListContainsAny, .listContainsAll, .notListContainsAll,
             .listMemberBeginsWith, .notListMemberBeginsWith:
            guard isList else { throw .badRequest("\(key): \(comparator.rawValue) needs a list field, and '\(target.displayName)' is not a list") }
        case .in, .notIn, .equals, .notEquals, .beginsWith, .notBeginsWith, .lessThan, .lessThanOrEquals, .greaterThan, .greaterThanOrEquals:
            if isList { throw .badRequest("\(key): \(comparator.rawValue) compares single values, but '\(target.displayName)' is a list; use a LIST_ comparator") }
        }
        if let schemaField {
            if comparator.isRange {
                guard schemaField.sortable else {
                    throw .badRequest("\(key): \(comparator.rawValue) on '\(target.displayName)' needs a SORTABLE index in the schema of '\(recordType)'")
                }
            } else if !schemaField.queryable {
                throw .badRequest("\(key): filtering on '\(target.displayName)' needs a QUERYABLE index in the schema of '\(recordType)'")
            }
        }
        switch scalar {
        case .location:
            throw .badRequest("\(key): LOCATION fields can only be filtered with NEAR (a 'fieldValue' location and a 'distance' in metres)")
        case .bytes, .asset:
            throw .badRequest("\(key): fields of type \(scalar.rawValue) cannot be filtered")
        default: break
        }
        if comparator == .beginsWith || comparator == .notBeginsWith || comparator == .listMemberBeginsWith || comparator == .notListMemberBeginsWith {
            guard scalar == .string else { throw .badRequest("\(key): \(comparator.rawValue) needs a STRING field") }
        }
        guard let valueJSON = members["fieldValue"], let valueMembers = valueJSON.objectValue, let raw = valueMembers["value"] else {
            throw .badRequest("\(key) needs a 'fieldValue' dictionary with a 'value'")
        }
        let many: Bool
        switch comparator {
        case .in, .notIn, .listContainsAny, .notListContainsAny, .listContainsAll, .notListContainsAll: many = true
        default: many = false
        }
        var values: [IndexValue] = []
        if many {
            guard let elements = raw.arrayValue else { throw .badRequest("\(key): \(comparator.rawValue) needs an array value") }
            guard !elements.isEmpty, elements.count <= maximumValues else {
                throw .badRequest("\(key): \(comparator.rawValue) needs 1 to \(maximumValues) values")
            }
            for element in elements { values.append(try filterValue(element, scalar: scalar, key: key)) }
        } else {
            values.append(try filterValue(raw, scalar: scalar, key: key))
        }
        return QueryFilter(target: target, comparator: comparator, values: values, scalar: scalar)
    }

    /// A point given as a field-value dictionary of a LOCATION (`{"value": {"latitude": …}}`) or as the location dictionary itself.
    static func location(_ json: JSON, key: String) throws(StratusError) -> GeoPoint {
        let dictionary = json["value"] ?? json
        if let type = json["type"]?.stringValue, type != ScalarType.location.rawValue {
            throw .badRequest("\(key) must be a LOCATION, not \(Names.printable(type))")
        }
        guard case .location(let members) = try FieldValue.decodeScalar(dictionary, as: .location, field: key),
              let latitude = members["latitude"], let longitude = members["longitude"] else {
            throw .badRequest("\(key) must be a location dictionary with 'latitude' and 'longitude'")
        }
        return GeoPoint(latitude: latitude, longitude: longitude)
    }

    static func filterValue(_ raw: JSON, scalar: ScalarType, key: String) throws(StratusError) -> IndexValue {
        let decoded: FieldValue
        do throws(StratusError) {
            if scalar == .reference, let name = raw.stringValue {
                decoded = .reference(Reference(recordName: name))
            } else {
                decoded = try FieldValue.decodeScalar(raw, as: scalar, field: key)
            }
        } catch {
            throw .badRequest("\(key): the value does not match the field's type \(scalar.rawValue) (\(error.reason))")
        }
        guard let value = IndexValue(decoded) else { throw .badRequest("\(key): values of type \(scalar.rawValue) cannot be compared") }
        return value
    }
}

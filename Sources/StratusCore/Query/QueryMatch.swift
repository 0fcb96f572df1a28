/// Whether one record is among a query's results, decided in memory by the rules the store's SQL
/// applies to index entries (`RecordStore.matchCondition`): what a query subscription fires on.
///
/// A field's entries are its value, or its list's distinct elements; text compares by UTF-8
/// bytes (PostgreSQL's `COLLATE "C"`), numbers by value. A filter holds when some entry passes
/// its positive comparator, and a negated comparator holds when none does (`NOT_EQUALS` also
/// needs the field to be present: CloudKit does not match missing fields).
extension Query {
    public func matches(_ record: Record) -> Bool {
        record.recordType == recordType && filters.allSatisfy { $0.matches(record) }
    }
}

extension QueryFilter {
    public func matches(_ record: Record) -> Bool {
        switch target {
        case .system(let field):
            let held = Self.passes(Self.systemValue(field, of: record), comparator.positiveForm, values)
            return comparator.isNegatedForm ? !held : held
        case .field(let name):
            guard let value = record.fields[name] else {
                // No entries: only the negated comparators that need no entry hold.
                return comparator.isNegatedForm && comparator != .notEquals
            }
            let elements: [FieldValue]
            if case .list(_, let list) = value { elements = list } else { elements = [value] }
            switch comparator {
            case .near:
                guard let near else { return false }
                let radius = Geo.comparedRadius(near.distance)
                return elements.contains { element in
                    guard case .location(let members) = element, let latitude = members["latitude"], let longitude = members["longitude"] else { return false }
                    return Geo.haversine(GeoPoint(latitude: latitude, longitude: longitude), near.center) <= radius
                }
            case .containsAllTokens, .containsAnyTokens:
                var tokens: Set<String> = []
                for case .string(let text) in elements { tokens.formUnion(TextTokens.tokens(of: text)) }
                let wanted = values.compactMap { if case .text(let token) = $0 { return token } else { return nil } }
                return comparator == .containsAllTokens ? wanted.allSatisfy(tokens.contains) : wanted.contains(where: tokens.contains)
            default:
                let entries = elements.compactMap(IndexValue.init)
                switch comparator {
                case .listContainsAll, .notListContainsAll:
                    let all = values.allSatisfy { wanted in entries.contains { Self.passes($0, .equals, [wanted]) } }
                    return comparator == .notListContainsAll ? !all : all
                case .notEquals:
                    return !entries.isEmpty && !entries.contains { Self.passes($0, .equals, values) }
                default:
                    let held = entries.contains { Self.passes($0, comparator.positiveForm, values) }
                    return comparator.isNegatedForm ? !held : held
                }
            }
        }
    }

    static func systemValue(_ field: SystemField, of record: Record) -> IndexValue {
        switch field {
        case .recordName: return .text(record.recordName)
        case .createdTimestamp: return .int(record.createdAt)
        case .modifiedTimestamp: return .int(record.modifiedAt)
        case .createdUserRecordName: return .text(record.createdBy.rawValue)
        case .modifiedUserRecordName: return .text(record.modifiedBy.rawValue)
        }
    }

    /// Whether `entry` passes a positive comparator against `values`.
    static func passes(_ entry: IndexValue, _ comparator: FilterComparator, _ values: [IndexValue]) -> Bool {
        switch comparator {
        case .in, .listContainsAny, .listContainsAll:
            return values.contains { compare(entry, $0) == 0 }
        case .beginsWith, .listMemberBeginsWith:
            guard case .text(let text) = entry, case .text(let prefix)? = values.first else { return false }
            return text.utf8.starts(with: prefix.utf8)
        default:
            guard let value = values.first, let order = compare(entry, value) else { return false }
            switch comparator {
            case .lessThan: return order < 0
            case .lessThanOrEquals: return order <= 0
            case .greaterThan: return order > 0
            case .greaterThanOrEquals: return order >= 0
            default: return order == 0  // EQUALS, LIST_CONTAINS
            }
        }
    }

    /// -1, 0 or 1 as PostgreSQL orders the two; `nil` for values of different kinds.
    static func compare(_ a: IndexValue, _ b: IndexValue) -> Int? {
        switch (a, b) {
        case (.int(let x), .int(let y)): return x < y ? -1 : x == y ? 0 : 1
        case (.double(let x), .double(let y)): return x < y ? -1 : x == y ? 0 : 1
        case (.text(let x), .text(let y)):
            if x.utf8.elementsEqual(y.utf8) { return 0 }
            return x.utf8.lexicographicallyPrecedes(y.utf8) ? -1 : 1
        default: return nil
        }
    }
}

extension FilterComparator {
    /// Whether the comparator is the negation of another (`NOT_…`).
    public var isNegatedForm: Bool {
        switch self {
        case .notEquals, .notIn, .notListContains, .notListContainsAny, .notListContainsAll, .notBeginsWith, .notListMemberBeginsWith: return true
        default: return false
        }
    }

    /// The positive form of a negated comparator; itself otherwise.
    public var positiveForm: FilterComparator {
        switch self {
        case .notEquals: return .equals
        case .notIn: return .in
        case .notListContains: return .listContains
        case .notListContainsAny: return .listContainsAny
        case .notListContainsAll: return .listContainsAll
        case .notBeginsWith: return .beginsWith
        case .notListMemberBeginsWith: return .listMemberBeginsWith
        default: return self
        }
    }
}

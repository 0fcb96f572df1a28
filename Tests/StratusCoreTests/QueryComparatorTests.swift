import StratusCore
import Testing

/// The comparators a query builder offers for a field are those `Query.parse` accepts for it.
struct QueryComparatorTests {
    @Test func eachFieldOffersWhatItsTypeAndIndexAllow() {
        func names(_ field: FieldSchema) -> Set<String> { Set(Query.comparators(for: field).map(\.rawValue)) }
        let string = FieldType(.string)
        #expect(names(FieldSchema(type: string)).isEmpty)
        #expect(names(FieldSchema(type: string, queryable: true)) == ["EQUALS", "NOT_EQUALS", "IN", "NOT_IN", "BEGINS_WITH", "NOT_BEGINS_WITH"])
        #expect(names(FieldSchema(type: string, searchable: true)) == ["CONTAINS_ALL_TOKENS", "CONTAINS_ANY_TOKENS"])
        #expect(names(FieldSchema(type: FieldType(.int64), sortable: true))
                == ["LESS_THAN", "LESS_THAN_OR_EQUALS", "GREATER_THAN", "GREATER_THAN_OR_EQUALS"])
        #expect(names(FieldSchema(type: FieldType(.location), queryable: true)) == ["NEAR"])
        #expect(names(FieldSchema(type: FieldType(.bytes), queryable: true)).isEmpty)
        let tags = names(FieldSchema(type: FieldType(.string, list: true), queryable: true))
        #expect(tags.allSatisfy { $0.hasPrefix("LIST_") || $0.hasPrefix("NOT_LIST_") } && tags.contains("LIST_MEMBER_BEGINS_WITH"), "\(tags)")
        #expect(Query.isSortable(FieldSchema(type: FieldType(.timestamp), sortable: true)))
        #expect(!Query.isSortable(FieldSchema(type: FieldType(.int64, list: true), sortable: true)))
        #expect(!Query.isSortable(FieldSchema(type: FieldType(.string), queryable: true)))
    }
}

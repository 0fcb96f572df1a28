import Foundation
import Logging
import PostgresNIO
import StratusCore

/// Where a page of query results ends: the sort values of its last record and its name.
public struct QueryCursor: Sendable, Equatable {
    public var sortValues: [IndexValue?]
    public var recordName: String

    public init(sortValues: [IndexValue?], recordName: String) {
        self.sortValues = sortValues
        self.recordName = recordName
    }
}

/// One page of a query.
public struct QueryPage: Sendable {
    public var records: [Record]
    /// Where the next page starts, when there is one.
    public var next: QueryCursor?
}

/// One `records/query` page to read: the statement `QuerySQL` built for it, and what its rows mean.
struct QueryRequest: Sendable {
    /// The container queried (on Citus, the statement goes to the worker holding it).
    var containerID: ContainerID
    var sorts: [QuerySort]
    var limit: Int
    var sql: String
    var binds: Prepared.Binds
    /// Whether the statement can be shared with others of the same SQL (`Prepared.Shared`).
    var shareable: Bool

    /// Whether one statement can serve both.
    static func canShare(_ a: QueryRequest, _ b: QueryRequest) -> Bool {
        a.shareable && b.shareable && a.binds.types == b.binds.types && a.sql == b.sql
    }
}

extension RecordStore {
    /// Runs a validated query over a zone.
    ///
    /// The SQL is driven by the index entries of the first filter that can use an index, so its
    /// cost follows the rows that match in this zone, never other zones or containers. Pages are
    /// keyset-paged on the sort values plus the record name (no OFFSET). Concurrent queries of the
    /// same shape (the same SQL, other values) share statements (`StatementSharing`).
    /// `visibleRoots`: only records in these shared hierarchies (a participant's query in the shared database).
    public func query(_ db: DatabaseRef, zone: String, query: Query, limit: Int, after cursor: QueryCursor?,
                      visibleRoots: [String]? = nil) async throws -> QueryPage {
        let built = QuerySQL.build(db: db, zone: zone, query: query, limit: limit, after: cursor, visibleRoots: visibleRoots)
        let request = QueryRequest(containerID: db.containerID, sorts: query.sorts, limit: limit, sql: built.sql, binds: built.binds,
                                   shareable: Prepared.Shared.canShare(built.binds))
        let page: QueryPage?
        if database.held == nil {
            page = try await queries.answer(request)
        } else {
            page = try await database.withConnection { connection in try await Self.runQueries([request], on: connection, logger: logger)[0] }
        }
        guard let page else {
            if zone == Names.defaultZone { return QueryPage(records: [], next: nil) }
            throw Self.zoneNotFound(zone)
        }
        return page
    }

    /// One statement for `requests` (all shareable with the first when there are several): per
    /// request, in order, its page, or `nil` when its zone does not exist.
    static func runQueries(_ requests: [QueryRequest], on connection: PostgresConnection, logger: Logger) async throws -> [QueryPage?] {
        if requests.count == 1 {
            let rows = try await Prepared.Dynamic.rows(requests[0].sql, requests[0].binds, on: connection, logger: logger)
            return [try page(rows, skipping: 0, for: requests[0])]
        }
        let sql = Prepared.Shared.sql(requests[0].sql, types: requests[0].binds.types)
        let rows = try await Prepared.Dynamic.rows(sql, try Prepared.Shared.binds(requests.map(\.binds)), on: connection, logger: logger)
        let grouped = try Prepared.Shared.grouped(rows, count: requests.count)
        return try requests.indices.map { try page(grouped[$0], skipping: 1, for: requests[$0]) }
    }

    /// The page in a query's rows (after `skipping` leading cells of each): no row, no such zone
    /// (`nil`); one row of NULLs, the zone exists and nothing matched.
    static func page(_ rows: [PostgresRow], skipping: Int, for request: QueryRequest) throws -> QueryPage? {
        if rows.isEmpty { return nil }
        var records: [Record] = []
        var sortValues: [[IndexValue?]] = []
        for row in rows {
            var reader = RowReader(row)
            for _ in 0..<skipping { try reader.skip() }
            var probe = reader
            guard try probe.nextCell().bytes != nil else { continue }
            let record = try Self.storedRecord(&reader)
            var values: [IndexValue?] = []
            for sort in request.sorts {
                values.append(try QuerySQL.decodeSortValue(try reader.nextCell(), scalar: sort.scalar))
            }
            records.append(record)
            sortValues.append(values)
        }
        var next: QueryCursor?
        if records.count > request.limit {
            records.removeLast()
            sortValues.removeLast()
            next = QueryCursor(sortValues: sortValues.last!, recordName: records.last!.recordName)
        }
        return QueryPage(records: records, next: next)
    }
}

/// Builds the SQL of a query. Every value is a bound parameter; only column names chosen by
/// this code are spliced into the text.
enum QuerySQL {
    struct Builder {
        var binds = Prepared.Binds()

        /// Binds the container and record type as `$1`, `$2`, shared by every clause, and the
        /// zone's environment, database, owner and name as `$3…$6` (see `zoneRow`).
        init(db: DatabaseRef, zone: String, recordType: String) {
            _ = bind(db.containerID)
            _ = bind(recordType)
            _ = bind(db.environment.code)
            _ = bind(db.scope.code)
            _ = bind(db.owner)
            _ = bind(zone)
        }

        /// `alias`'s rows of this container, zone (`z`, the zone row) and record type.
        func keyed(_ alias: String) -> String {
            "\(alias).container_id = $1 AND \(alias).zone_id = z.zone_id AND \(alias).record_type = $2"
        }

        /// The live zone row `z` the query runs in.
        static let zoneRow = "z.container_id = $1 AND z.environment = $3 AND z.database_scope = $4 AND z.owner = $5 AND z.zone_name = $6 AND NOT z.deleted"

        mutating func bind<Value: PostgresNonThrowingEncodable & Sendable>(_ value: Value) -> String {
            binds.bind(value)
        }

        /// The haversine distance in metres from `point` to the location entry `alias` (its `v_lat`,
        /// `v_lon`), on a sphere of `Geo.earthRadius`.
        mutating func distance(_ alias: String, from point: GeoPoint) -> String {
            let latitude = bind(point.latitude), longitude = bind(point.longitude)
            return "(\(2 * Geo.earthRadius)::float8 * asin(least(1::float8, sqrt(power(sin(radians(\(alias).v_lat - \(latitude)) / 2), 2)"
                + " + cos(radians(\(alias).v_lat)) * cos(radians(\(latitude))) * power(sin(radians(\(alias).v_lon - \(longitude)) / 2), 2)))))"
        }

        /// The radius a NEAR compares distances with (`Geo.comparedRadius`).
        mutating func radius(_ near: QueryFilter.Near) -> String {
            bind(Geo.comparedRadius(near.distance))
        }

        mutating func bind(_ value: IndexValue) -> String {
            switch value {
            case .int(let number): return bind(number) + "::bigint"
            case .double(let number): return bind(number) + "::float8"
            case .text(let text): return bind(text) + "::text"
            }
        }
    }

    static func column(for scalar: ScalarType) -> String {
        switch scalar {
        case .int64, .timestamp: return "v_int"
        case .double: return "v_double"
        default: return "v_text"
        }
    }

    static func collate(_ scalar: ScalarType) -> String {
        switch scalar {
        case .int64, .timestamp, .double: return ""
        default: return " COLLATE \"C\""
        }
    }

    static func systemColumn(_ field: SystemField) -> String {
        switch field {
        case .recordName: return "r.record_name"
        case .createdTimestamp: return "r.created_at"
        case .modifiedTimestamp: return "r.modified_at"
        case .createdUserRecordName: return "r.created_by"
        case .modifiedUserRecordName: return "r.modified_by"
        }
    }

    static func comparison(_ comparator: FilterComparator) -> String? {
        switch comparator {
        case .equals, .listContains: return "="
        case .notEquals: return "<>"
        case .lessThan: return "<"
        case .lessThanOrEquals: return "<="
        case .greaterThan: return ">"
        case .greaterThanOrEquals: return ">="
        default: return nil
        }
    }

    /// The condition on an index-entry alias `e` (or a system column) that a value matches.
    static func valueCondition(_ expression: String, _ filter: QueryFilter, values: [IndexValue], builder: inout Builder) -> String {
        let collation = collate(filter.scalar)
        switch filter.comparator {
        case .in, .notIn, .listContainsAny, .notListContainsAny, .listContainsAll, .notListContainsAll:
            let list = values.map { builder.bind($0) + collation }.joined(separator: ", ")
            return "\(expression)\(collation) IN (\(list))"
        case .beginsWith, .notBeginsWith, .listMemberBeginsWith, .notListMemberBeginsWith:
            guard case .text(let prefix) = values[0] else { return "false" }
            let low = builder.bind(prefix)
            let high = builder.bind(prefix + "\u{10FFFF}")
            return "(\(expression) COLLATE \"C\" >= \(low) AND \(expression) COLLATE \"C\" < \(high))"
        default:
            let op = comparison(filter.comparator.isNegatedForm ? filter.comparator.positiveForm : filter.comparator) ?? "="
            return "\(expression)\(collation) \(op) \(builder.bind(values[0]))\(collation)"
        }
    }

    /// An `EXISTS` over the field's index entries (for fields) or a column test (for system fields).
    ///
    /// Each `EXISTS` ends in `OFFSET 0`, which keeps it a per-record probe (a subplan on the record's
    /// own entries) instead of a semi-join: as a semi-join the planner, guessing one entry per value,
    /// scanned all of the value's entries once per driving record (100 × 100 entries for a two-word
    /// CONTAINS_ALL_TOKENS in the benchmark, 2.2 ms against 0.5 ms).
    ///
    /// `record` names the record the entries belong to: `d.record_name` when a driving index entry
    /// `d` is joined, so the test runs on the entry before its record is fetched (a two-word
    /// CONTAINS_ALL_TOKENS fetched the ~100 records of its first word to keep ~10; now ~10).
    static func matchCondition(_ filter: QueryFilter, builder: inout Builder, record: String = "r.record_name") -> String {
        switch filter.target {
        case .system(let field):
            let condition = valueCondition(systemColumn(field), filter, values: filter.values, builder: &builder)
            return filter.comparator.isNegatedForm ? "NOT (\(condition))" : condition
        case .field(let name) where filter.comparator == .near:
            // One record's points, through the per-record index (the geo key holds only points; a
            // `v_cell IS NOT NULL` here let the planner, without statistics, scan the zone's whole
            // partial geo index for each record instead).
            guard let near = filter.near else { return "false" }
            let distance = builder.distance("e", from: near.center)
            return "EXISTS (SELECT 1 FROM index_entries e WHERE \(builder.keyed("e")) AND e.field = \(builder.bind(Geo.key(of: name)))"
                + " AND e.record_name = \(record) AND \(distance) <= \(builder.radius(near)) OFFSET 0)"
        case .field(let name) where filter.comparator == .containsAllTokens || filter.comparator == .containsAnyTokens:
            // Token entries of a SEARCHABLE field: one per distinct word of the record's value.
            let key = TextTokens.key(of: name)
            func exists(_ tokens: [IndexValue], _ comparator: FilterComparator) -> String {
                var single = filter
                single.comparator = comparator
                let condition = valueCondition("e.v_text", single, values: tokens, builder: &builder)
                return "EXISTS (SELECT 1 FROM index_entries e WHERE \(builder.keyed("e")) AND e.field = \(builder.bind(key))"
                    + " AND e.record_name = \(record) AND \(condition) OFFSET 0)"
            }
            if filter.comparator == .containsAnyTokens { return exists(filter.values, .in) }
            return "(" + filter.values.map { exists([$0], .equals) }.joined(separator: " AND ") + ")"
        case .field(let name):
            func exists(_ values: [IndexValue]) -> String {
                let column = column(for: filter.scalar)
                let condition = valueCondition("e.\(column)", filter, values: values, builder: &builder)
                return """
                    EXISTS (SELECT 1 FROM index_entries e WHERE \(builder.keyed("e")) AND e.field = \(builder.bind(name))
                    AND e.record_name = \(record) AND \(condition) OFFSET 0)
                    """
            }
            switch filter.comparator {
            case .listContainsAll, .notListContainsAll:
                let all = filter.values.map { exists([$0]) }.joined(separator: " AND ")
                return filter.comparator == .notListContainsAll ? "NOT (\(all))" : "(\(all))"
            case .notEquals:
                // A different value, and the field is present (CloudKit does not match missing fields).
                let column = column(for: filter.scalar)
                let present = "EXISTS (SELECT 1 FROM index_entries e WHERE \(builder.keyed("e")) AND e.field = \(builder.bind(name)) AND e.record_name = \(record) AND e.\(column) IS NOT NULL OFFSET 0)"
                var equals = filter
                equals.comparator = .equals
                return "(\(present) AND NOT \(exists(equals.values)))"
            default:
                let condition = exists(filter.values)
                return filter.comparator.isNegatedForm ? "NOT \(condition)" : condition
            }
        }
    }

    /// The sort expression for a sort descriptor.
    static func sortExpression(_ sort: QuerySort, builder: inout Builder) -> String {
        switch sort.target {
        case .system(let field):
            return systemColumn(field) + collate(sort.scalar)
        case .field(let name) where sort.relativeTo != nil:
            let distance = builder.distance("e", from: sort.relativeTo!)
            return "(SELECT \(distance) FROM index_entries e WHERE \(builder.keyed("e")) AND e.field = \(builder.bind(Geo.key(of: name)))"
                + " AND e.record_name = r.record_name LIMIT 1)"
        case .field(let name):
            let column = column(for: sort.scalar)
            return "(SELECT e.\(column)\(collate(sort.scalar)) FROM index_entries e WHERE \(builder.keyed("e")) AND e.field = \(builder.bind(name)) AND e.record_name = r.record_name AND e.\(column) IS NOT NULL LIMIT 1)"
        }
    }

    /// The SQL of a query, its bound values and their types. The text depends only on the query's
    /// shape (filters, comparators, sorts), never on its values, so it can be prepared once.
    ///
    /// The zone is found by name in the same statement: the page is a LATERAL subquery of the
    /// zone row, so a missing zone returns no row and an empty page one row of NULLs (one round
    /// trip instead of two).
    static func build(db: DatabaseRef, zone: String, query: Query, limit: Int, after cursor: QueryCursor?, visibleRoots: [String]? = nil)
        -> (sql: String, binds: Prepared.Binds) {
        var builder = Builder(db: db, zone: zone, recordType: query.recordType)
        var conditions: [String] = []
        var from = "records r"
        // Drive from the index entries of the first positive, single-valued field filter.
        var driver: Int?
        var tokenRest: QueryFilter?
        for (index, filter) in query.filters.enumerated() {
            guard case .field = filter.target, !filter.comparator.isNegatedForm else { continue }
            switch filter.comparator {
            case .equals, .lessThan, .lessThanOrEquals, .greaterThan, .greaterThanOrEquals, .beginsWith, .listContains, .in, .containsAllTokens,
                 .containsAnyTokens, .near:
                // Each of these matches at most one index entry per record, so the join has no duplicates
                // (a word is stored once per record: ALL takes the first word's entries; ANY, whose
                // words can match several entries of one record, takes their distinct records, and
                // so does NEAR, whose circle can hold several points of one LOCATION list).
                driver = index
            default: continue
            }
            break
        }
        // Whether `d` is the driving filter's own index entry, so a sort by that field can read its value.
        var driverIsPlainEntry = false
        // A NEAR that drives: its field and centre (a sort by distance from the same point reuses its distances).
        var nearDriver: (String, GeoPoint)?
        if let driver, case .field(var name) = query.filters[driver].target {
            var filter = query.filters[driver]
            if filter.comparator == .containsAllTokens {
                // Driven by one word's entries, the longest (short words such as "the" or "in" are
                // the common ones, and the cost follows the driving word's records); the other words
                // are tested as a filter.
                let longest = filter.values.indices.max { a, b in
                    guard case .text(let x) = filter.values[a], case .text(let y) = filter.values[b] else { return false }
                    return x.unicodeScalars.count < y.unicodeScalars.count
                } ?? 0
                if filter.values.count > 1 {
                    var rest = filter
                    rest.values.remove(at: longest)
                    tokenRest = rest
                }
                name = TextTokens.key(of: name)
                filter.comparator = .equals
                filter.values = [filter.values[longest]]
            }
            // Each matching entry fetches its record with one primary-key probe. As a plain join the
            // planner may merge-join the entries with all the zone's records in name order instead,
            // which reads the whole zone (3,500 records for 51 matches in the benchmark); the LATERAL
            // subquery, kept apart by OFFSET 0, can only be probed. It names the container itself
            // ($1), not d's: Citus routes a statement to one worker only when every table in it
            // is held to the same container by a constant.
            let probe = """
                CROSS JOIN LATERAL (SELECT * FROM records r WHERE r.container_id = $1
                    AND r.zone_id = d.zone_id AND r.record_name = d.record_name OFFSET 0) r
                """
            if filter.comparator == .near, let near = filter.near {
                // The entries in the cells covering the circle, at their exact distance: each range
                // of cells is one index-only scan (a LATERAL subquery kept apart by OFFSET 0: as a
                // plain join the planner scanned all the field's entries of the zone, 100,000 for 23
                // matches, and tested the ranges on each). Unused range slots (-1, -1) are dropped
                // before their scans, so the text is the same for every circle.
                let values = Geo.slots(near.center, distance: near.distance)
                    .map { "(\(builder.bind($0.low))::bigint, \(builder.bind($0.high))::bigint)" }.joined(separator: ", ")
                let distance = builder.distance("e", from: near.center)
                from = """
                    (SELECT e.container_id, e.zone_id, e.record_name, min(e.distance) AS distance FROM (
                       SELECT e.container_id, e.zone_id, e.record_name, \(distance) AS distance
                         FROM (SELECT * FROM (VALUES \(values)) c(low, high) WHERE c.low >= 0) c
                         CROSS JOIN LATERAL (SELECT e.container_id, e.zone_id, e.record_name, e.v_lat, e.v_lon FROM index_entries e
                            WHERE \(builder.keyed("e")) AND e.field = \(builder.bind(Geo.key(of: name)))
                              AND e.v_cell >= c.low AND e.v_cell <= c.high OFFSET 0) e) e
                      WHERE e.distance <= \(builder.radius(near))
                      GROUP BY e.container_id, e.zone_id, e.record_name) d
                    \(probe)
                    """
                nearDriver = (name, near.center)
            } else if filter.comparator == .containsAnyTokens {
                filter.comparator = .in
                let condition = valueCondition("e.v_text", filter, values: filter.values, builder: &builder)
                from = """
                    (SELECT DISTINCT e.container_id, e.zone_id, e.record_name FROM index_entries e
                       WHERE \(builder.keyed("e")) AND e.field = \(builder.bind(TextTokens.key(of: name))) AND \(condition)) d
                    \(probe)
                    """
            } else {
                driverIsPlainEntry = query.filters[driver].comparator != .containsAllTokens
                let column = column(for: filter.scalar)
                let condition = valueCondition("d.\(column)", filter, values: filter.values, builder: &builder)
                from = "index_entries d " + probe
                conditions.append("\(builder.keyed("d")) AND d.field = \(builder.bind(name)) AND \(condition)")
            }
        }
        conditions.append("\(builder.keyed("r")) AND NOT r.deleted")
        if let visibleRoots { conditions.append("r.share_root = ANY(\(builder.bind(visibleRoots))::text[])") }
        for (index, filter) in query.filters.enumerated() where index != driver {
            conditions.append(matchCondition(filter, builder: &builder, record: driver == nil ? "r.record_name" : "d.record_name"))
        }
        if let tokenRest { conditions.append(matchCondition(tokenRest, builder: &builder, record: "d.record_name")) }
        var sortExpressions = query.sorts.map { sort -> String in
            if let nearDriver, sort.target == .field(nearDriver.0), sort.relativeTo == nearDriver.1 { return "d.distance" }
            return sortExpression(sort, builder: &builder)
        }
        // Sorting by the driving field: its index entry is already joined, no per-row lookup needed.
        if let driver, driverIsPlainEntry, let first = query.sorts.first, first.target == query.filters[driver].target, first.scalar == query.filters[driver].scalar {
            sortExpressions[0] = "d.\(column(for: first.scalar))\(collate(first.scalar))"
        }
        var inner = "SELECT \(RecordStore.recordColumns(of: "r"))"
        for (offset, expression) in sortExpressions.enumerated() { inner += ", \(expression) AS s\(offset)" }
        inner += " FROM \(from) WHERE " + conditions.joined(separator: " AND ")

        var outer = "SELECT * FROM (\(inner)) q"
        if let cursor {
            outer += " WHERE " + keyset(sorts: query.sorts, cursor: cursor, builder: &builder)
        }
        var order: [String] = []
        for (offset, sort) in query.sorts.enumerated() {
            order.append("s\(offset) \(sort.ascending ? "ASC NULLS LAST" : "DESC NULLS FIRST")")
        }
        order.append("record_name COLLATE \"C\" ASC")
        outer += " ORDER BY " + order.joined(separator: ", ") + " LIMIT \(builder.bind(Int64(limit + 1)))"
        return ("SELECT page.* FROM zones z LEFT JOIN LATERAL (\(outer)) page ON true WHERE \(Builder.zoneRow)", builder.binds)
    }

    /// Rows strictly after the cursor in the sort order (NULL sorts as the largest value).
    static func keyset(sorts: [QuerySort], cursor: QueryCursor, builder: inout Builder) -> String {
        var alternatives: [String] = []
        var equalities: [String] = []
        for (offset, sort) in sorts.enumerated() {
            let column = "s\(offset)"
            let value = offset < cursor.sortValues.count ? cursor.sortValues[offset] : nil
            let collation = collate(sort.scalar)
            let after: String
            let equal: String
            if let value {
                let bound = builder.bind(value)
                after = sort.ascending ? "(\(column) > \(bound)\(collation) OR \(column) IS NULL)" : "\(column) < \(bound)\(collation)"
                equal = "\(column) = \(bound)\(collation)"
            } else {
                after = sort.ascending ? "false" : "\(column) IS NOT NULL"
                equal = "\(column) IS NULL"
            }
            alternatives.append((equalities + [after]).joined(separator: " AND "))
            equalities.append(equal)
        }
        alternatives.append((equalities + ["record_name COLLATE \"C\" > \(builder.bind(cursor.recordName))"]).joined(separator: " AND "))
        return "(" + alternatives.map { "(\($0))" }.joined(separator: " OR ") + ")"
    }

    static func decodeSortValue(_ cell: PostgresCell, scalar: ScalarType) throws -> IndexValue? {
        switch scalar {
        case .int64, .timestamp: return try cell.decode(Int64?.self).map(IndexValue.int)
        case .double: return try cell.decode(Double?.self).map(IndexValue.double)
        default: return try cell.decode(String?.self).map(IndexValue.text)
        }
    }
}

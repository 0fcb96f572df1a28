import Logging
import PostgresNIO
import StratusCore
import Synchronization

/// The hottest queries as named prepared statements: PostgreSQL parses and plans each once per
/// connection instead of on every request. Each names itself with a constant: PostgresNIO's
/// default name, `String(reflecting:)`, is computed by reflection on every execution.
enum Prepared {
    /// `$1…$5`: the columns that name a zone (container, environment, database, owner, zone name).
    static func zoneBindings(_ db: DatabaseRef, _ zone: String, capacity: Int) -> PostgresBindings {
        var bindings = PostgresBindings(capacity: capacity)
        bindings.append(db.containerID)
        bindings.append(db.environment.code)
        bindings.append(db.scope.code)
        bindings.append(db.owner)
        bindings.append(zone)
        return bindings
    }

    /// `records/lookup` when its statement serves no other request (`StatementSharing`): the zone
    /// row joined to the named records, tombstones included (the caller skips them), in one round
    /// trip. Cheaper for one request than `LookupMany`, whose seven-array `unnest` costs PostgreSQL
    /// more per execution.
    ///
    /// Written so that PostgreSQL plans it once per connection, and well:
    /// - the names array is read through a sub-select, so no plan knows its length. Given
    ///   `ANY($6)` directly, each custom plan saw the real length and looked cheaper than the
    ///   generic plan (which assumes 10), so PostgreSQL planned every execution (and so did
    ///   `LockZoneAndRecords`; `pg_prepared_statements` showed 0 generic plans);
    /// - the records are a LATERAL subquery kept apart by `OFFSET 0`, so the zone id reaches it as
    ///   a parameter that the zone statistics (migration 0004) apply to;
    /// - there is no `NOT deleted`, which made the partial index `records_by_type` (scan the zone,
    ///   filter the names) look cheaper than probing the primary key once per name.
    struct Lookup: ZoneAndNames {
        static let name = "stratus.Lookup"
        static let sql = """
            SELECT r.*
            FROM zones z
            LEFT JOIN LATERAL (
                SELECT \(RecordStore.recordColumns) FROM records
                WHERE container_id = $1 AND zone_id = z.zone_id AND record_name = ANY((SELECT $6::text[])::text[])
                OFFSET 0
            ) r ON true
            WHERE z.container_id = $1 AND z.environment = $2 AND z.database_scope = $3
              AND z.owner = $4 AND z.zone_name = $5 AND NOT z.deleted
            """
        var db: DatabaseRef
        var zone: String
        var names: [String]
    }

    /// `records/lookup` for several requests at once (`StatementSharing`): one key per
    /// (request, record name), each request numbered from 0. Per key, the zone row (none: the zone
    /// does not exist, so the key has no row) and the named record, tombstones included (the
    /// caller skips them); null record cells when the zone matched and the record did not. A
    /// request with no names sends one key with the empty name, which no record has.
    ///
    /// Written so that PostgreSQL plans it once per connection, and well:
    /// - the keys are arrays, so no plan depends on how many there are;
    /// - the zone and the record are LATERAL subqueries kept apart by `OFFSET 0`: each key probes
    ///   the zones' unique key and then the records' primary key, whatever the planner estimates
    ///   for the arrays (a hash join against all zones would read every tenant's zones);
    /// - there is no `NOT deleted` on records, which made the partial index `records_by_type`
    ///   (scan the zone, filter the name) look cheaper than probing the primary key.
    struct LookupMany: PostgresPreparedStatement {
        static let name = "stratus.LookupMany"
        static let sql = """
            SELECT k.i, r.*
            FROM unnest($1::int4[], $2::int8[], $3::int2[], $4::int2[], $5::text[], $6::text[], $7::text[]) AS k(i, c, e, d, o, zn, n)
            CROSS JOIN LATERAL (
                SELECT zone_id FROM zones
                WHERE container_id = k.c AND environment = k.e AND database_scope = k.d AND owner = k.o AND zone_name = k.zn AND NOT deleted
                OFFSET 0
            ) z
            LEFT JOIN LATERAL (
                SELECT \(RecordStore.recordColumns) FROM records
                WHERE container_id = k.c AND zone_id = z.zone_id AND record_name = k.n
                OFFSET 0
            ) r ON true
            """
        typealias Row = PostgresRow

        var requests: [Int32] = []
        var containers: [Int64] = []
        var environments: [Int16] = []
        var scopes: [Int16] = []
        var owners: [String] = []
        var zones: [String] = []
        var names: [String] = []

        init(_ batch: [LookupRequest]) {
            let keys = batch.reduce(0) { $0 + max($1.names.count, 1) }
            requests.reserveCapacity(keys)
            containers.reserveCapacity(keys)
            environments.reserveCapacity(keys)
            scopes.reserveCapacity(keys)
            owners.reserveCapacity(keys)
            zones.reserveCapacity(keys)
            names.reserveCapacity(keys)
            for (index, request) in batch.enumerated() {
                for name in request.names.isEmpty ? [""] : request.names {
                    requests.append(Int32(index))
                    containers.append(request.db.containerID.rawValue)
                    environments.append(request.db.environment.code)
                    scopes.append(request.db.scope.code)
                    owners.append(request.db.owner.rawValue)
                    zones.append(request.zone)
                    names.append(name)
                }
            }
        }

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 7)
            bindings.append(BinaryArray.int32s(requests))
            bindings.append(BinaryArray.int64s(containers))
            bindings.append(BinaryArray.int16s(environments))
            bindings.append(BinaryArray.int16s(scopes))
            bindings.append(BinaryArray.texts(owners))
            bindings.append(BinaryArray.texts(zones))
            bindings.append(BinaryArray.texts(names))
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
    }

    /// The id of a live zone, unlocked (reads).
    struct FindZone: PostgresPreparedStatement {
        static let name = "stratus.ZoneID"
        static let sql = """
            SELECT zone_id FROM zones WHERE container_id = $1 AND environment = $2 AND database_scope = $3 AND owner = $4
              AND zone_name = $5 AND NOT deleted
            """
        typealias Row = StratusCore.ZoneID

        var db: DatabaseRef
        var zone: String

        func makeBindings() throws -> PostgresBindings {
            Prepared.zoneBindings(db, zone, capacity: 5)
        }

        func decodeRow(_ row: PostgresRow) throws -> StratusCore.ZoneID { try row.decode(StratusCore.ZoneID.self) }
    }

    /// The named records of one zone, tombstones included, read from `records` alone: with the
    /// zone's id from `FindZone`, a lookup on Citus (`Lookups.runRouted`) is two single-table
    /// statements, each of which Citus routes by its container parameter with a plan kept per
    /// connection (a join of distributed tables is planned on every execution). The names are
    /// compared with `ANY($3)` directly: a sub-select would keep Citus from routing it as one
    /// table's statement.
    struct RecordsNamed: PostgresPreparedStatement {
        static let name = "stratus.RecordsNamed"
        static let sql = """
            SELECT \(RecordStore.recordColumns) FROM records
            WHERE container_id = $1 AND zone_id = $2 AND record_name = ANY($3::text[])
            """
        typealias Row = PostgresRow

        var container: ContainerID
        var zone: StratusCore.ZoneID
        var names: [String]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 3)
            bindings.append(container)
            bindings.append(zone)
            bindings.append(BinaryArray.texts(names))
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
    }

    /// `records/modify` in a transaction (`RecordStore.modify`): locks the zone row, then the rows
    /// of the named records (in name order), in one round trip. No row at all: the zone does not
    /// exist. The zone row is locked `FOR NO KEY UPDATE` because the writer updates it before
    /// committing (its change position); taking the strong lock first avoids a share-then-upgrade
    /// deadlock between writers. The names array is read through a sub-select for the reason given
    /// at `Lookup`.
    struct LockZoneAndRecords: ZoneAndNames {
        static let name = "stratus.LockZoneAndRecords"
        static let sql = zoneAndRecords(locking: true)
        var db: DatabaseRef
        var zone: String
        var names: [String]

        /// The zone row joined to the named records, with or without the locks.
        static func zoneAndRecords(locking: Bool) -> String {
            """
            WITH z AS (
                SELECT zone_id, EXISTS (SELECT 1 FROM shares s WHERE s.container_id = $1 AND s.zone_id = zones.zone_id AND NOT s.deleted) AS shared
                FROM zones WHERE container_id = $1 AND environment = $2 AND database_scope = $3 AND owner = $4
                  AND zone_name = $5 AND NOT deleted\(locking ? " FOR NO KEY UPDATE" : "")
            )
            SELECT z.zone_id, z.shared, r.*
            FROM z LEFT JOIN LATERAL (
                SELECT \(RecordStore.currentColumns) FROM records
                WHERE container_id = $1 AND zone_id = z.zone_id AND record_name = ANY((SELECT $6::text[])::text[])
                ORDER BY record_name\(locking ? "\n    FOR UPDATE" : "")
            ) r ON true
            """
        }
    }

    /// `records/modify` of one record without a transaction (`RecordStore.modifyOne`): the rows
    /// `LockZoneAndRecords` returns, unlocked. `WriteRecords` then writes only if they are unchanged.
    struct ReadZoneAndRecords: ZoneAndNames {
        static let name = "stratus.ReadZoneAndRecords"
        static let sql = LockZoneAndRecords.zoneAndRecords(locking: false)
        var db: DatabaseRef
        var zone: String
        var names: [String]
    }
}

/// A statement keyed by a zone (`$1…$5`) and a list of record names (`$6`), returning raw rows.
protocol ZoneAndNames: PostgresPreparedStatement where Row == PostgresRow {
    var db: DatabaseRef { get }
    var zone: String { get }
    var names: [String] { get }
}

extension ZoneAndNames {
    func makeBindings() throws -> PostgresBindings {
        var bindings = Prepared.zoneBindings(db, zone, capacity: 6)
        bindings.append(BinaryArray.texts(names))
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
}

extension Prepared {
    /// Bound values of a statement built at run time, with their types (which a prepared
    /// statement is declared with).
    struct Binds: Sendable {
        var bindings = PostgresBindings()
        var types: [PostgresDataType] = []
        /// The values, while all are scalars a shared statement can take as arrays (`Shared`);
        /// `nil` once another kind of value is bound.
        var scalars: [Scalar]? = []

        enum Scalar: Sendable, Equatable {
            case int16(Int16), int32(Int32), int64(Int64), double(Double), bool(Bool), text(String)
        }

        /// Appends `value` and returns its placeholder (`$n`).
        mutating func bind<Value: PostgresNonThrowingEncodable & Sendable>(_ value: Value) -> String {
            bindings.append(value)
            types.append(Value.psqlType)
            if scalars != nil {
                switch value {
                case let value as Int64: scalars!.append(.int64(value))
                case let value as String: scalars!.append(.text(value))
                case let value as Int16: scalars!.append(.int16(value))
                case let value as Int32: scalars!.append(.int32(value))
                case let value as Double: scalars!.append(.double(value))
                case let value as Bool: scalars!.append(.bool(value))
                case let value as any Int64ID: scalars!.append(.int64(value.rawValue))
                case let value as UserID: scalars!.append(.text(value.rawValue))
                default: scalars = nil
                }
            }
            return "$\(types.count)"
        }
    }

    /// One statement for several runs of a statement built at run time with scalar binds (the
    /// same SQL, each run with its own values), for `StatementSharing`: the values arrive as one
    /// array per placeholder, and the statement runs once per set of values as a LATERAL
    /// subquery, with its placeholders turned into the array columns. Each result row starts
    /// with the number of its set (from 0).
    enum Shared {
        /// Whether `sql` run with `binds` can be shared, and with which others (the same text and types).
        static func canShare(_ binds: Binds) -> Bool {
            guard let scalars = binds.scalars, scalars.count == binds.types.count else { return false }
            return binds.types.allSatisfy { arrayTypeName($0) != nil }
        }

        static func arrayTypeName(_ type: PostgresDataType) -> String? {
            switch type {
            case .int2: return "int2"
            case .int4: return "int4"
            case .int8: return "int8"
            case .float8: return "float8"
            case .bool: return "bool"
            case .text: return "text"
            default: return nil
            }
        }

        /// The shared statement's SQL for `sql` whose placeholders have `types`.
        static func sql(_ sql: String, types: [PostgresDataType]) -> String {
            var arrays = ["$1::int4[]"]
            var columns = ["i"]
            for (index, type) in types.enumerated() {
                arrays.append("$\(index + 2)::\(arrayTypeName(type) ?? "text")[]")
                columns.append("p\(index + 1)")
            }
            // `$n` becomes `k.pn`. The builders put `$` nowhere else: every value is bound.
            var body = ""
            var digits = ""
            var inPlaceholder = false
            for character in sql {
                if inPlaceholder, character.isASCII, character.isNumber {
                    digits.append(character)
                    continue
                }
                if inPlaceholder {
                    body += "k.p" + digits
                    inPlaceholder = false
                    digits = ""
                }
                if character == "$" {
                    inPlaceholder = true
                } else {
                    body.append(character)
                }
            }
            if inPlaceholder { body += "k.p" + digits }
            return "SELECT k.i, q.* FROM unnest(\(arrays.joined(separator: ", "))) AS k(\(columns.joined(separator: ", ")))"
                + " CROSS JOIN LATERAL (\(body)) q"
        }

        /// The rows of a shared statement (`LookupMany` or `sql(_:types:)`), by the set number
        /// each starts with; `count` groups, in set order.
        static func grouped(_ rows: [PostgresRow], count: Int) throws -> [[PostgresRow]] {
            var groups = [[PostgresRow]](repeating: [], count: count)
            for row in rows {
                var reader = RowReader(row)
                let index = Int(try reader.next(Int32.self))
                guard groups.indices.contains(index) else {
                    throw StratusError(.internalError, "a shared statement's row names set \(index) of \(count)")
                }
                groups[index].append(row)
            }
            return groups
        }

        /// The shared statement's binds: the set numbers, then one array per placeholder. Every
        /// element of `sets` must pass `canShare` with the same types.
        static func binds(_ sets: [Binds]) throws -> Binds {
            var shared = Binds()
            _ = shared.bind(sets.indices.map { Int32($0) })
            let columns = sets[0].types.count
            for index in 0..<columns {
                let values = sets.map { $0.scalars![index] }
                func column<Value>(_ value: (Binds.Scalar) -> Value?) throws -> [Value] {
                    let array = values.compactMap(value)
                    guard array.count == values.count else {
                        throw StratusError(.internalError, "statements of different types were to be shared")
                    }
                    return array
                }
                switch values[0] {
                case .int16: _ = shared.bind(try column { if case .int16(let v) = $0 { return v } else { return nil } })
                case .int32: _ = shared.bind(try column { if case .int32(let v) = $0 { return v } else { return nil } })
                case .int64: _ = shared.bind(try column { if case .int64(let v) = $0 { return v } else { return nil } })
                case .double: _ = shared.bind(try column { if case .double(let v) = $0 { return v } else { return nil } })
                case .bool: _ = shared.bind(try column { if case .bool(let v) = $0 { return v } else { return nil } })
                case .text: _ = shared.bind(try column { if case .text(let v) = $0 { return v } else { return nil } })
                }
            }
            return shared
        }
    }

    /// A statement whose SQL is built at run time (record queries, change feeds), prepared per connection like
    /// the static ones, so PostgreSQL stops planning every query (pgbench on the query-eq SQL:
    /// ~1.8k tps planned each time, ~5k prepared).
    ///
    /// PostgresNIO prepares a statement under its type's static `name` and `sql`, which it reads
    /// once, in the sending task, before the statement goes to the connection. `Dynamic` answers
    /// them from a task-local shape, so one type carries many statements. Each distinct SQL text
    /// (with its parameter types) keeps one name for the life of its ``Shapes`` registry (the
    /// process's, unless a caller brings its own), so no connection ever sees a name reused for
    /// other SQL. Past the registry's `maximum` distinct texts, the rest run unprepared: a client
    /// sending ever-new query shapes cannot grow every backend's plan cache.
    struct Dynamic: PostgresPreparedStatement {
        struct Shape: Sendable {
            var name: String
            var sql: String
            var types: [PostgresDataType]
        }

        @TaskLocal static var shape = Shape(name: "", sql: "", types: [])
        static var name: String { shape.name }
        static var sql: String { shape.sql }
        static var bindingDataTypes: [PostgresDataType] { shape.types }
        typealias Row = PostgresRow

        var bindings: PostgresBindings

        func makeBindings() throws -> PostgresBindings { bindings }
        func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }

        /// Runs `sql` with `binds` and collects its rows, prepared when the shape has, or can
        /// get, a name in `shapes`.
        static func rows(_ sql: String, _ binds: Binds, on connection: PostgresConnection, logger: Logger,
                         shapes: Shapes = .process) async throws -> [PostgresRow] {
            guard let name = shapes.name(sql: sql, types: binds.types) else {
                return try await connection.rows(PostgresQuery(unsafeSQL: sql, binds: binds.bindings), logger: logger)
            }
            return try await $shape.withValue(Shape(name: name, sql: sql, types: binds.types)) {
                try await connection.rows(Dynamic(bindings: binds.bindings), logger: logger)
            }
        }
    }

    /// Statement names for SQL texts, `prefix` and a number, handed out until there are `maximum`.
    final class Shapes: Sendable {
        /// The service's registry for record queries, whose shapes clients choose: 256 of them.
        static let process = Shapes(prefix: "stratus_dynamic_", maximum: 256)
        /// The registry of the service's own shapes (change feeds, and the shared reads of
        /// `DynamicRead`: shared-database lookups, single-record modifies' reads), so a feed, the
        /// hottest statement of a syncing client, stays prepared however many query shapes clients
        /// have filled the other registry with.
        static let feeds = Shapes(prefix: "stratus_feed_", maximum: 32)

        let prefix: String
        let maximum: Int
        private struct Key: Hashable {
            var sql: String
            var types: [PostgresDataType]
        }
        private let names = Mutex<[Key: String]>([:])

        init(prefix: String, maximum: Int) {
            self.prefix = prefix
            self.maximum = maximum
        }

        /// The name of this text's statement, or nil once the registry is full.
        func name(sql: String, types: [PostgresDataType]) -> String? {
            names.withLock { names in
                let key = Key(sql: sql, types: types)
                if let name = names[key] { return name }
                guard names.count < maximum else { return nil }
                let name = "\(prefix)\(names.count + 1)"
                names[key] = name
                return name
            }
        }
    }
}

extension PostgresConnection {
    /// Runs a prepared statement and collects its rows. `@concurrent`, as PostgresNIO's functions
    /// are: a caller-isolated loop would switch executors back after every row's `next()`.
    ///
    /// Outside `BEGIN … COMMIT` the rows are returned once the statement's commit is confirmed
    /// (`confirmCommitted`). When the connection fails before that, `settle`, if given, decides
    /// with the rows read: it returns them when the statement did commit, and throws otherwise.
    @concurrent func rows<Statement: PostgresPreparedStatement>(_ statement: Statement, logger: Logger,
                                                                settle: (([Statement.Row]) async throws -> [Statement.Row])? = nil) async throws -> [Statement.Row] {
        try requireOpen()
        let watch = await CommitWatch.of(self, logger: logger)
        var out: [Statement.Row] = []
        for try await row in try await execute(statement, logger: logger) { out.append(row) }
        do {
            try await confirmCommitted(watch, logger: logger)
        } catch where settle != nil && (error is Database.CommitUnknown || error is Database.CommitRefused) {
            return try await settle!(out)
        }
        return out
    }
}

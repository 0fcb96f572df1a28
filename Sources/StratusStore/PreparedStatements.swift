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
    /// trip. Cheaper for one request than `LookupMany`, whose seven-array `unnest` cost PostgreSQL
    /// ~60 µs more per execution under pgbench (13–15k against 19–24k tps at 16 clients).
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
                    containers.append(request.db.containerID)
                    environments.append(request.db.environment.code)
                    scopes.append(request.db.scope.code)
                    owners.append(request.db.owner)
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
    struct ZoneID: PostgresPreparedStatement {
        static let name = "stratus.ZoneID"
        static let sql = """
            SELECT zone_id FROM zones WHERE container_id = $1 AND environment = $2 AND database_scope = $3 AND owner = $4
              AND zone_name = $5 AND NOT deleted
            """
        typealias Row = Int64

        var db: DatabaseRef
        var zone: String

        func makeBindings() throws -> PostgresBindings {
            Prepared.zoneBindings(db, zone, capacity: 5)
        }

        func decodeRow(_ row: PostgresRow) throws -> Int64 { try row.decode(Int64.self) }
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

    /// `records/modify`'s writes in one statement: new records, changed records (and tombstones),
    /// their old index entries, references and asset references dropped (the new asset references
    /// follow in the same transaction: `RecordStore.writeAssetReferences`), their new index entries added (only for the
    /// records actually written), the zone's change position moved. Data-modifying CTEs share one
    /// snapshot, so the DELETE of old entries cannot see the ones this statement inserts
    /// (index_entries has no unique key). Returns each written record's name and change sequence.
    ///
    /// A record is written only if it is as the plan saw it: a changed row still has the change
    /// sequence read (`$31`), a new one does not exist (`ON CONFLICT DO NOTHING`). Under the locks
    /// of a transaction that always holds; for `RecordStore.modifyOne`, which runs it on its own
    /// after an unlocked read, a missing row means another writer came first. With `$32`, the zone
    /// row is locked first and nothing is written unless the zone is still live (a zone deleted
    /// since the read); under `LockZoneAndRecords` the caller already holds that lock.
    struct WriteRecords: PostgresPreparedStatement {
        static let name = "stratus.WriteRecords"
        static let sql = text(updates: true)

        /// The statement's text; without `updates`, `InsertRecords`'s.
        static func text(updates: Bool) -> String {
            let written = updates ? "    SELECT record_name, change_seq FROM ins UNION ALL SELECT record_name, change_seq FROM upd"
                                  : "    SELECT record_name, change_seq FROM ins"
            let parts = updates ? [live, inserted, updated, "), written AS (", written, deletes, entries, updatedDelta, tail]
                                : [identifiedLive, inserted, "), written AS (", written, unusedParameters, entries, tail]
            return parts.joined(separator: "\n")
        }

        private static let live = """
            WITH live AS (
                SELECT zone_id FROM zones WHERE container_id = $1 AND zone_id = $2 AND NOT deleted AND $32::bool FOR NO KEY UPDATE
            """

        /// `InsertRecords`' zone check: also the zone's identity ($41, $48–$50), for a zone id
        /// remembered from an earlier write (`RecordStore.knownZones`) rather than read just now.
        private static let identifiedLive = """
            WITH live AS (
                SELECT zone_id FROM zones WHERE container_id = $1 AND zone_id = $2 AND NOT deleted AND $32::bool
                  AND environment = $41 AND database_scope = $48::int2 AND owner = $49::text AND zone_name = $50::text FOR NO KEY UPDATE
            """

        private static let inserted = """
            ), ins AS (
                INSERT INTO records (container_id, zone_id, record_name, record_type, change_xid, change_seq, fields,
                                     created_at, created_by, modified_at, modified_by, deleted, size, parent)
                SELECT $1, $2, u.n, u.t, pg_current_xact_id()::text::bigint, stratus_change_seq() + u.i, u.f,
                       u.ca, u.cb, u.ma, u.mb, false, octet_length(u.f) + u.ab, NULLIF(u.p, '')
                FROM unnest($3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[], $8::bigint[], $9::text[], $39::text[], $46::bigint[])
                     WITH ORDINALITY AS u(n, t, f, ca, cb, ma, mb, p, ab, i)
                WHERE NOT $32::bool OR EXISTS (SELECT 1 FROM live)
                ON CONFLICT (container_id, zone_id, record_name) DO NOTHING
                RETURNING record_name, change_seq, size
            """

        /// Records changed or deleted, when they are as they were read.
        private static let updated = """
            ), upd AS (
                UPDATE records r SET record_type = u.t, fields = u.f, created_at = CASE WHEN u.d THEN r.created_at ELSE u.ca END,
                       created_by = CASE WHEN u.d THEN r.created_by ELSE u.cb END,
                       modified_at = CASE WHEN u.d THEN r.modified_at ELSE u.ma END,
                       modified_by = CASE WHEN u.d THEN r.modified_by ELSE u.mb END,
                       deleted = u.d, size = octet_length(u.f) + u.ab,
                       change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq() + 32768 + u.i,
                       parent = CASE WHEN u.d THEN r.parent ELSE NULLIF(u.p, '') END,
                       share_name = CASE WHEN r.deleted THEN NULL ELSE r.share_name END,
                       short_guid = CASE WHEN r.deleted THEN NULL ELSE r.short_guid END,
                       share_root = CASE WHEN r.deleted THEN NULL ELSE r.share_root END
                FROM unnest($10::text[], $11::text[], $12::text[], $13::bigint[], $14::text[], $15::bigint[], $16::text[], $17::bool[], $31::bigint[], $40::text[], $43::bigint[], $47::bigint[])
                     WITH ORDINALITY AS u(n, t, f, ca, cb, ma, mb, d, s, p, o, ab, i)
                WHERE r.container_id = $1 AND r.zone_id = $2 AND r.record_name = u.n AND r.change_seq = u.s
                  AND (NOT $32::bool OR EXISTS (SELECT 1 FROM live))
                RETURNING r.record_name, r.change_seq, r.size, u.d, u.o
            """

        /// The updated records' old index entries, references and asset references.
        private static let deletes = """
            ), old_entries AS (
                DELETE FROM index_entries WHERE container_id = $1 AND zone_id = $2 AND record_name = ANY(ARRAY(SELECT record_name FROM upd))
            ), old_references AS (
                DELETE FROM record_references WHERE container_id = $1 AND zone_id = $2 AND source_name = ANY(ARRAY(SELECT record_name FROM upd))
            ), old_assets AS (
                DELETE FROM asset_references WHERE container_id = $1 AND zone_id = $2 AND record_name = ANY(ARRAY(SELECT record_name FROM upd))
            """

        /// Without updates: the parameters only updates use, with their types (a CTE that neither
        /// modifies data nor is referenced is never planned), so one set of bindings serves both.
        private static let unusedParameters = """
            ), unused AS (
                SELECT $10::text[], $11::text[], $12::text[], $13::bigint[], $14::text[], $15::bigint[], $16::text[], $17::bool[],
                       $31::bigint[], $40::text[], $43::bigint[], $47::bigint[]
            """

        private static let entries = """
            ), new_entries AS (
                INSERT INTO index_entries (container_id, zone_id, record_type, field, v_int, v_double, v_text, v_cell, v_lat, v_lon, record_name)
                SELECT $1, $2, e.t, e.f, e.vi, e.vd, e.vt, e.vc, e.la, e.lo, e.n FROM (
                    SELECT t, f, v AS vi, NULL::float8 AS vd, NULL::text AS vt, NULL::bigint AS vc, NULL::float8 AS la, NULL::float8 AS lo, n
                      FROM unnest($18::text[], $19::text[], $20::bigint[], $21::text[]) AS u(t, f, v, n)
                    UNION ALL
                    SELECT t, f, NULL::bigint, v, NULL::text, NULL, NULL, NULL, n
                      FROM unnest($22::text[], $23::text[], $24::float8[], $25::text[]) AS u(t, f, v, n)
                    UNION ALL
                    SELECT t, f, NULL::bigint, NULL::float8, v, NULL, NULL, NULL, n
                      FROM unnest($26::text[], $27::text[], $28::text[], $29::text[]) AS u(t, f, v, n)
                    UNION ALL
                    SELECT t, f, NULL::bigint, NULL::float8, NULL::text, c, la, lo, n
                      FROM unnest($33::text[], $34::text[], $35::bigint[], $36::float8[], $37::float8[], $38::text[]) AS u(t, f, c, la, lo, n)
                ) e WHERE e.n IN (SELECT record_name FROM written)
            ), zone AS (
                UPDATE zones SET change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq()
                WHERE container_id = $1 AND zone_id = $2 AND $30::bool AND EXISTS (SELECT 1 FROM written)
            ), delta AS (
                SELECT coalesce(sum(x.r), 0)::bigint AS r, coalesce(sum(x.b), 0)::bigint AS b FROM (
                    SELECT 1 AS r, size::bigint AS b FROM ins
            """

        /// What the updates add to the usage delta.
        private static let updatedDelta = """
                    UNION ALL
                    SELECT (NOT d)::int - (o >= 0)::int, CASE WHEN d THEN 0 ELSE size END - greatest(o, 0) FROM upd
            """

        private static let tail = """
                ) x
            ), usage AS (
                UPDATE usage_counters c SET records = c.records + d.r, bytes = c.bytes + d.b
                FROM delta d, unnest(CASE WHEN $42::text = '' THEN ARRAY['']::text[] ELSE ARRAY['', $42::text] END,
                                     CASE WHEN $42::text = '' THEN ARRAY[$44::int2] ELSE ARRAY[$44::int2, $45::int2] END) AS s(o, stripe),
                     (SELECT pg_backend_pid() % 16 AS own) b
                WHERE c.container_id = $1 AND c.environment = $41 AND c.owner = s.o
                  AND c.stripe = CASE WHEN s.stripe >= 0 THEN s.stripe ELSE b.own END AND (d.r <> 0 OR d.b <> 0)
                RETURNING c.records, c.bytes, c.records_cap, c.bytes_cap
            )
            SELECT record_name, change_seq, pg_current_xact_id()::text::bigint FROM written
            WHERE stratus_usage_check((SELECT count(u.*) = CASE WHEN d.r = 0 AND d.b = 0 THEN 0 WHEN $42::text = '' THEN 1 ELSE 2 END
                                              AND coalesce(bool_and((d.r <= 0 OR u.records <= u.records_cap) AND (d.b <= 0 OR u.bytes <= u.bytes_cap)), true)
                                       FROM delta d LEFT JOIN usage u ON true GROUP BY d.r, d.b))
            """
        /// A written record's name and change sequence, and the writing transaction's id.
        typealias Row = (String, Int64, Int64)

        var containerID: Int64
        var zoneID: Int64
        var inserts: [Record]
        var insertFields: [String]
        var updates: [Record]
        var updateFields: [String]
        var entries: RecordStore.IndexEntryRows
        var tracksZoneChanges: Bool
        /// The change sequence each of `updates` had when read.
        var expectedSeqs: [Int64]
        /// Lock the zone row, and write only if the zone is live.
        var lockZone: Bool
        var environment: Int16
        /// Whose private storage the records count against ('' in the public database).
        var meteredOwner: String
        /// The stored size of each of `updates` if it was live when read, or -1.
        var oldSizes: [Int64]
        /// The counter stripes the container's and the owner's usage count in (reserved by the
        /// transaction), or -1: the connection's own (`pg_backend_pid() % 16`).
        var stripes: (container: Int16, owner: Int16) = (-1, -1)

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 47)
            bindings.append(containerID)
            bindings.append(zoneID)
            // Every array in its binary form, written directly (`BinaryArray`).
            for (records, fields) in [(inserts, insertFields), (updates, updateFields)] {
                bindings.append(BinaryArray.texts(records.lazy.map(\.recordName)))
                bindings.append(BinaryArray.texts(records.lazy.map(\.recordType)))
                bindings.append(BinaryArray.texts(fields))
                bindings.append(BinaryArray.int64s(records.lazy.map(\.createdAt)))
                bindings.append(BinaryArray.texts(records.lazy.map(\.createdBy)))
                bindings.append(BinaryArray.int64s(records.lazy.map(\.modifiedAt)))
                bindings.append(BinaryArray.texts(records.lazy.map(\.modifiedBy)))
            }
            bindings.append(BinaryArray.bools(updates.lazy.map(\.deleted)))
            for column in [entries.ints.types, entries.ints.fields] { bindings.append(BinaryArray.texts(column)) }
            bindings.append(BinaryArray.int64s(entries.ints.values))
            bindings.append(BinaryArray.texts(entries.ints.names))
            for column in [entries.doubles.types, entries.doubles.fields] { bindings.append(BinaryArray.texts(column)) }
            bindings.append(BinaryArray.float8s(entries.doubles.values))
            bindings.append(BinaryArray.texts(entries.doubles.names))
            for column in [entries.texts.types, entries.texts.fields, entries.texts.values, entries.texts.names] {
                bindings.append(BinaryArray.texts(column))
            }
            bindings.append(tracksZoneChanges)
            bindings.append(BinaryArray.int64s(expectedSeqs))
            bindings.append(lockZone)
            let locations = entries.locations
            for column in [locations.column.types, locations.column.fields] { bindings.append(BinaryArray.texts(column)) }
            bindings.append(BinaryArray.int64s(locations.column.values))
            bindings.append(BinaryArray.float8s(locations.latitudes))
            bindings.append(BinaryArray.float8s(locations.longitudes))
            bindings.append(BinaryArray.texts(locations.column.names))
            // No parent: '' (arrays of optionals do not bind; no record is named '').
            bindings.append(BinaryArray.texts(inserts.lazy.map { $0.parent ?? "" }))
            bindings.append(BinaryArray.texts(updates.lazy.map { $0.parent ?? "" }))
            bindings.append(environment)
            bindings.append(meteredOwner)
            bindings.append(BinaryArray.int64s(oldSizes))
            bindings.append(stripes.container)
            bindings.append(stripes.owner)
            // What each record's assets add to its stored size (0 for tombstones).
            bindings.append(BinaryArray.int64s(inserts.lazy.map(\.assetBytes)))
            bindings.append(BinaryArray.int64s(updates.lazy.map { $0.deleted ? 0 : $0.assetBytes }))
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// `WriteRecords` for a batch that only creates records, the commonest write: the same
    /// bindings and answer, without the UPDATE of records and the deletes that only follow one.
    /// PostgreSQL no longer initialises and runs those parts of the plan (initialising the plan was
    /// ~20 % of its CPU per create). pgbench, `create.sql` against this statement, interleaved, 16
    /// clients, commits not flushed: 2,264–2,389 against 2,576–2,804 creates/s, PostgreSQL and the
    /// rest 786–836 against 667–727 µs of CPU per create.
    ///
    /// With `lockZone`, the zone must also still be the one named (`zone`, in `db`): a zone id
    /// remembered from an earlier write is checked here instead of read again.
    struct InsertRecords: PostgresPreparedStatement {
        static let name = "stratus.InsertRecords"
        static let sql = WriteRecords.text(updates: false)
        typealias Row = WriteRecords.Row

        /// Its inserts; its updates are empty.
        var write: WriteRecords
        var db: DatabaseRef
        var zone: String

        func makeBindings() throws -> PostgresBindings {
            var bindings = try write.makeBindings()
            bindings.append(db.scope.code)
            bindings.append(db.owner)
            bindings.append(zone)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try write.decodeRow(row) }
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
        /// The change feeds' registry: their shapes are the service's own (five today), so a feed,
        /// the hottest statement of a syncing client, stays prepared however many query shapes
        /// clients have filled the other registry with.
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
    /// Runs a prepared statement and collects its rows.
    func rows<Statement: PostgresPreparedStatement>(_ statement: Statement, logger: Logger) async throws -> [Statement.Row] {
        try requireOpen()
        var out: [Statement.Row] = []
        for try await row in try await execute(statement, logger: logger) { out.append(row) }
        return out
    }
}

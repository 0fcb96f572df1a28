import Logging
import PostgresNIO
import StratusCore

/// A single-record save in a custom zone (`RecordStore.modifyOne`), waiting to share a statement
/// with the saves arriving at the same time: creates in a zone written before
/// (`RecordStore.creates`), updates of a record just read (`RecordStore.updates`), and saves
/// that name every field the record keeps, written without reading it first (`RecordStore.replaces`).
///
/// Most of what a write's own statement costs PostgreSQL is receiving, binding, starting the
/// executor and committing, not the record: one statement for many writes pays that once
/// (the measurement is in `Deploy/PERFORMANCE.md`, "What made it fast" and "Writes").
///
/// A class: the sharing queue moves requests between arrays, and a reference is one retain where
/// the record and its index entries were a dozen.
final class SharedWrite: Sendable {
    let db: DatabaseRef
    let zone: String
    /// The zone's remembered id (`RecordStore.knownZones`), checked against `db` and `zone`.
    let zoneID: ZoneID
    let record: Record
    /// The record's field JSON, as stored.
    let fields: String
    let entries: IndexWrites.IndexEntryRows
    /// An update's record as it was read: written only if its change sequence is still `seq`;
    /// `liveSize` its stored size if it was live, else -1 (the usage counters change by the
    /// difference). `nil` for a create.
    let expected: (seq: Int64, liveSize: Int64)?
    /// A save written without reading the record (`Prepared.ReplaceRecords`): it is written only
    /// if the record is live, of the same type, still at change sequence `seq` (any when -1), and,
    /// unless `replacesFields`, holds no field but `named` (the operation's fields, set or
    /// removed), so that the operation's fields are the whole record. `nil` for the others.
    let unread: (seq: Int64, replacesFields: Bool, named: [String])?

    init(db: DatabaseRef, zone: String, zoneID: ZoneID, record: Record, fields: String, entries: IndexWrites.IndexEntryRows,
         expected: (seq: Int64, liveSize: Int64)? = nil, unread: (seq: Int64, replacesFields: Bool, named: [String])? = nil) {
        self.db = db
        self.zone = zone
        self.zoneID = zoneID
        self.record = record
        self.fields = fields
        self.entries = entries
        self.expected = expected
        self.unread = unread
    }

    /// What a save written without reading its record keeps of the stored one.
    struct Kept: Sendable {
        var createdAt: Int64
        var createdBy: UserID
        var parent: String?
        var shareName: String?
        var shortGUID: String?
    }

    enum Outcome: Sendable {
        /// Written and committed with this change sequence by this transaction.
        case written(seq: Int64, xid: Int64)
        /// Written without reading it (`unread`): as `written`, with what the stored record kept.
        case replaced(seq: Int64, xid: Int64, kept: Kept)
        /// Not written: the record exists (a create) or changed since it was read (an update), or
        /// the id no longer names a live zone `zone` of `db`.
        case unwritten
        /// Not tried, or rolled back with the others of its statement (a deadlock, a counter
        /// stripe's share of a quota, a value too large to index, a name another create of the
        /// statement also writes): the request decides in a transaction of its own.
        case retry
    }

    /// One statement for `creates` (all creates, or all updates), committed on its own; an outcome for each.
    ///
    /// When the connection fails before the statement's commit is confirmed, it is settled
    /// (`RecordStore.committed`): its creates are written if it committed, and TRY_AGAIN_LATER
    /// saying nothing was saved answers each if not.
    static func run(_ creates: [SharedWrite], database: Database, on connection: PostgresConnection, logger: Logger) async throws -> [Outcome] {
        // A second create of one name would be answered as written with the first: it decides alone.
        var seen: Set<RecordKey> = []
        var statement: [SharedWrite] = []
        var positions: [Int?] = []
        for create in creates {
            if seen.insert(RecordKey(containerID: create.db.containerID, zoneID: create.zoneID, name: create.record.recordName)).inserted {
                positions.append(statement.count)
                statement.append(create)
            } else {
                positions.append(nil)
            }
        }
        var written: [Int: Outcome] = [:]
        do {
            if statement[0].unread != nil {
                let rows = try await connection.rows(Prepared.ReplaceRecords(saves: statement), logger: logger, settle: { rows in
                    _ = try await settled(rows.map { ($0.0, $0.1, $0.2) }, statement, database: database, logger: logger)
                    return rows
                })
                for (index, seq, xid, createdAt, createdBy, parent, share, guid) in rows {
                    written[Int(index) - 1] = .replaced(seq: seq, xid: xid, kept: Kept(createdAt: createdAt, createdBy: UserID(rawValue: createdBy),
                                                                                      parent: parent, shareName: share, shortGUID: guid))
                }
            } else if statement[0].expected != nil {
                for (index, seq, xid) in try await connection.rows(Prepared.UpdateRecords(updates: statement), logger: logger, settle: { rows in
                    try await settled(rows, statement, database: database, logger: logger)
                }) {
                    written[Int(index) - 1] = .written(seq: seq, xid: xid)
                }
            } else if statement.count == 1 {
                // Alone, the single-record statement: a lone create costs PostgreSQL more in
                // `CreateRecords`'s set-based form.
                let create = statement[0]
                for (_, seq, xid) in try await connection.rows(create.insertRecords, logger: logger, settle: { rows in
                    try await WriteSettlement.settled(rows, containerID: create.db.containerID, zoneID: create.zoneID, database: database, logger: logger)
                }) {
                    written[0] = .written(seq: seq, xid: xid)
                }
            } else {
                for (index, seq, xid) in try await connection.rows(Prepared.CreateRecords(creates: statement), logger: logger, settle: { rows in
                    try await settled(rows, statement, database: database, logger: logger)
                }) {
                    written[Int(index) - 1] = .written(seq: seq, xid: xid)
                }
            }
        } catch let error as PSQLError where Database.isRetryable(error) || UsageMeter.isPastStripeCap(error) || Database.isTooLargeToIndex(error) {
            // Also one create's value too large to index: alone, in the transaction, that one is
            // refused (BAD_REQUEST) and the others are written.
            return creates.map { _ in .retry }
        } catch is Database.ConnectionLost {
            return creates.map { _ in .retry }  // refused before it was sent
        }
        return positions.map { position in position.map { written[$0] ?? .unwritten } ?? .retry }
    }

    /// The rows of a shared statement whose commit was not confirmed, if it committed.
    private static func settled(_ rows: [(Int64, Int64, Int64)], _ statement: [SharedWrite], database: Database,
                                logger: Logger) async throws -> [(Int64, Int64, Int64)] {
        let records = rows.map { row in
            let write = statement[Int(row.0) - 1]
            return WriteSettlement.WrittenRecord(containerID: write.db.containerID, zoneID: write.zoneID, name: write.record.recordName, seq: row.1, xid: row.2)
        }
        guard try await WriteSettlement.committed(records, database: database, logger: logger) else { throw WriteSettlement.notCommitted }
        return rows
    }

    /// This create as `InsertRecords` writes it on its own: in its zone if that is still the
    /// zone named, in the connection's counter stripes.
    var insertRecords: Prepared.InsertRecords {
        let write = Prepared.WriteRecords(
            target: .init(containerID: db.containerID, zoneID: zoneID, environment: db.environment.code, tracksZoneChanges: db.tracksZoneChanges,
                          lockZone: true, meteredOwner: UsageMeter.meteredOwner(db)),
            inserts: .init(records: [record], fields: [fields]), entries: entries)
        return Prepared.InsertRecords(write: write, db: db, zone: zone)
    }

    private struct RecordKey: Hashable {
        var containerID: ContainerID
        var zoneID: ZoneID
        var name: String
    }
}

extension Prepared {
    /// `InsertRecords` for several single-record creates at once, each in its own zone, database
    /// and container: a record is written only if its zone id still names a live zone of that
    /// name in that database and the record does not exist. Zone rows are locked in (container,
    /// zone) order, so two such statements cannot deadlock on them. Each written record's zone
    /// moves its change position (private and shared databases) and the usage counters of its
    /// container and owner take it, in the connection's stripe; past a stripe's share of a quota
    /// the whole statement fails (`stratus_usage_check`) and each create decides alone. Returns
    /// the ordinal (from 1) of each written create, its change sequence and the transaction's id.
    struct CreateRecords: PostgresPreparedStatement {
        static let name = "stratus.CreateRecords"
        static let sql = """
            \(SharedWriteSQL.requests)
                                     $16::bool[], $17::text[])
                     WITH ORDINALITY AS u(c, z, env, sc, o, zn, n, t, f, ca, cb, ma, mb, p, ab, tz, mo, i)
            \(SharedWriteSQL.liveZones)
            ), ins AS (
                INSERT INTO records (container_id, zone_id, record_name, record_type, change_xid, change_seq, fields,
                                     created_at, created_by, modified_at, modified_by, deleted, size, parent)
                SELECT r.c, r.z, r.n, r.t, pg_current_xact_id()::text::bigint, stratus_change_seq() + r.i, r.f,
                       r.ca, r.cb, r.ma, r.mb, false, octet_length(r.f) + r.ab, NULLIF(r.p, '')
                FROM req r WHERE (r.c, r.z) IN (SELECT container_id, zone_id FROM live)
                ORDER BY r.c, r.z, r.n
                ON CONFLICT (container_id, zone_id, record_name) DO NOTHING
                RETURNING container_id, zone_id, record_name, change_seq, size
            ), done AS (
                SELECT r.*, ins.change_seq, ins.size FROM ins JOIN req r ON r.c = ins.container_id AND r.z = ins.zone_id AND r.n = ins.record_name
            \(SharedWriteSQL.entriesAndZones)
            ), delta AS (
                SELECT d.c, d.env, x.o, count(*)::bigint AS r, sum(d.size)::bigint AS b
                FROM done d \(SharedWriteSQL.owners)
                GROUP BY d.c, d.env, x.o
            ), usage AS (
                UPDATE usage_counters c SET records = c.records + d.r, bytes = c.bytes + d.b
                FROM (SELECT * FROM delta ORDER BY c, env, o) d
                WHERE c.container_id = d.c AND c.environment = d.env AND c.owner = d.o AND c.stripe = pg_backend_pid() % 16
                RETURNING c.records, c.bytes, c.records_cap, c.bytes_cap
            )
            SELECT i, change_seq, pg_current_xact_id()::text::bigint FROM done
            WHERE stratus_usage_check((SELECT count(*) = (SELECT count(*) FROM delta)
                                              AND coalesce(bool_and(u.records <= u.records_cap AND u.bytes <= u.bytes_cap), true)
                                       FROM usage u))
            """
        /// A written create's ordinal (from 1), change sequence, and the transaction's id.
        typealias Row = (Int64, Int64, Int64)

        let creates: [SharedWrite]

        func makeBindings() throws -> PostgresBindings { Self.bindings(creates, capacity: 35) }

        /// $1–$35: the writes' targets, records and index entries (`UpdateRecords` adds its own after).
        static func bindings(_ writes: [SharedWrite], capacity: Int) -> PostgresBindings {
            var bindings = PostgresBindings(capacity: capacity)
            // Closures, not key paths: a lazy map through `\.record` copies each whole record
            // (its fields dictionary and every string retained) for every value read.
            let creates = writes.lazy
            bindings.append(BinaryArray.int64s(creates.map { $0.db.containerID.rawValue }))
            bindings.append(BinaryArray.int64s(creates.map { $0.zoneID.rawValue }))
            bindings.append(BinaryArray.int16s(creates.map { $0.db.environment.code }))
            bindings.append(BinaryArray.int16s(creates.map { $0.db.scope.code }))
            bindings.append(BinaryArray.texts(creates.map { $0.db.owner.rawValue }))
            bindings.append(BinaryArray.texts(creates.map { $0.zone }))
            bindings.append(BinaryArray.texts(creates.map { $0.record.recordName }))
            bindings.append(BinaryArray.texts(creates.map { $0.record.recordType }))
            bindings.append(BinaryArray.texts(creates.map { $0.fields }))
            bindings.append(BinaryArray.int64s(creates.map { $0.record.createdAt }))
            bindings.append(BinaryArray.texts(creates.map { $0.record.createdBy.rawValue }))
            bindings.append(BinaryArray.int64s(creates.map { $0.record.modifiedAt }))
            bindings.append(BinaryArray.texts(creates.map { $0.record.modifiedBy.rawValue }))
            // No parent: '' (arrays of optionals do not bind; no record is named '').
            bindings.append(BinaryArray.texts(creates.map { $0.record.parent ?? "" }))
            bindings.append(BinaryArray.int64s(creates.map { $0.record.assetBytes }))
            bindings.append(BinaryArray.bools(creates.map { $0.db.tracksZoneChanges }))
            bindings.append(BinaryArray.texts(creates.map { UsageMeter.meteredOwner($0.db).rawValue }))
            // Each create's index entries, numbered by the create's ordinal.
            var ints = Entries<Int64>(), doubles = Entries<Double>(), texts = Entries<String>(), cells = Entries<Int64>()
            var latitudes: [Double] = [], longitudes: [Double] = []
            for (index, create) in creates.enumerated() {
                let ordinal = Int64(index + 1)
                ints.append(create.entries.ints, ordinal)
                doubles.append(create.entries.doubles, ordinal)
                texts.append(create.entries.texts, ordinal)
                cells.append(create.entries.locations.column, ordinal)
                latitudes += create.entries.locations.latitudes
                longitudes += create.entries.locations.longitudes
            }
            ints.bind(&bindings, values: BinaryArray.int64s(ints.values))
            doubles.bind(&bindings, values: BinaryArray.float8s(doubles.values))
            texts.bind(&bindings, values: BinaryArray.texts(texts.values))
            cells.bind(&bindings, values: BinaryArray.int64s(cells.values))
            bindings.append(BinaryArray.float8s(latitudes))
            bindings.append(BinaryArray.float8s(longitudes))
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }

        /// One kind of index entry of every create: the create's ordinal, type, field and value.
        private struct Entries<Value: Sendable> {
            var ordinals: [Int64] = []
            var types: [String] = []
            var fields: [String] = []
            var values: [Value] = []

            mutating func append(_ column: IndexWrites.IndexEntryRows.Column<Value>, _ ordinal: Int64) {
                ordinals += repeatElement(ordinal, count: column.values.count)
                types += column.types
                fields += column.fields
                values += column.values
            }

            func bind(_ bindings: inout PostgresBindings, values: BinaryArray) {
                bindings.append(BinaryArray.int64s(ordinals))
                bindings.append(BinaryArray.texts(types))
                bindings.append(BinaryArray.texts(fields))
                bindings.append(values)
            }
        }
    }
}

extension Prepared {
    /// `WriteRecords`' update for several single-record saves of records just read, each in its
    /// own zone, database and container: a record is written only if its zone id still names a
    /// live zone of that name in that database and its change sequence is still the one read.
    /// Zone rows are locked in (container, zone) order, as `CreateRecords` locks them. Each written
    /// record's index entries change where its values did, its references and asset references
    /// go (`SharedWriteSQL.changedEntriesAndZones`), its zone moves its change position (private
    /// and shared databases), and the usage counters
    /// of its container and owner change by the difference in size (in the connection's stripe;
    /// past a stripe's share of a quota the whole statement fails and each save decides alone).
    /// Returns the ordinal (from 1) of each written save, its change sequence and the transaction's id.
    struct UpdateRecords: PostgresPreparedStatement {
        static let name = "stratus.UpdateRecords"
        static let sql = """
            \(SharedWriteSQL.requests)
                                     $16::bool[], $17::text[], $36::bigint[], $37::bigint[])
                     WITH ORDINALITY AS u(c, z, env, sc, o, zn, n, t, f, ca, cb, ma, mb, p, ab, tz, mo, s, old, i)
            \(SharedWriteSQL.liveZones)
            ), upd AS (
                UPDATE records r SET record_type = q.t, fields = q.f, created_at = q.ca, created_by = q.cb, modified_at = q.ma,
                       modified_by = q.mb, deleted = false, size = octet_length(q.f) + q.ab,
                       change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq() + q.i, parent = NULLIF(q.p, ''),
                       share_name = CASE WHEN r.deleted THEN NULL ELSE r.share_name END,
                       short_guid = CASE WHEN r.deleted THEN NULL ELSE r.short_guid END,
                       share_root = CASE WHEN r.deleted THEN NULL ELSE r.share_root END
                FROM req q
                WHERE r.container_id = q.c AND r.zone_id = q.z AND r.record_name = q.n AND r.change_seq = q.s
                  AND (q.c, q.z) IN (SELECT container_id, zone_id FROM live)
                RETURNING r.container_id, r.zone_id, r.record_name, r.change_seq, r.size
            ), done AS (
                SELECT q.*, upd.change_seq, upd.size FROM upd JOIN req q ON q.c = upd.container_id AND q.z = upd.zone_id AND q.n = upd.record_name
            \(SharedWriteSQL.changedEntriesAndZones)
            ), delta AS (
                SELECT * FROM (
                    SELECT d.c, d.env, x.o, sum(1 - (d.old >= 0)::int)::bigint AS r, sum(d.size - greatest(d.old, 0))::bigint AS b
                    FROM done d \(SharedWriteSQL.owners)
                    GROUP BY d.c, d.env, x.o
                ) g WHERE r <> 0 OR b <> 0
            \(SharedWriteSQL.usageByDelta)
            SELECT i, change_seq, pg_current_xact_id()::text::bigint FROM done
            WHERE \(SharedWriteSQL.usageChecked)
            """
        typealias Row = CreateRecords.Row

        let updates: [SharedWrite]

        func makeBindings() throws -> PostgresBindings {
            var bindings = CreateRecords.bindings(updates, capacity: 37)
            bindings.append(BinaryArray.int64s(updates.map { $0.expected?.seq ?? 0 }))
            bindings.append(BinaryArray.int64s(updates.map { $0.expected?.liveSize ?? -1 }))
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }
}

extension Prepared {
    /// `UpdateRecords` for saves written without reading their records first: a save that names
    /// every field its record keeps (`replace`, `forceReplace`, or an `update`/`forceUpdate` whose
    /// fields include all the stored record's) needs nothing of the stored record but what stays
    /// (creation, parent, share), so the statement checks the row itself, after locking the zones:
    /// live, of the same type, at the change sequence the operation's tag names (if it has one),
    /// and holding no field the operation does not name. The row is written only if its change
    /// sequence is still the one the statement read (no row lock: a write that came meanwhile
    /// leaves it unwritten, and the usage difference is the one read). Anything else is left
    /// unwritten for the read and the planner to decide. Index entries change where values did,
    /// references and asset references go, zones move, usage counters change by the difference in
    /// size, as in `UpdateRecords`. Returns each written save's ordinal, change sequence, the
    /// transaction's id, and what it kept of the stored record.
    struct ReplaceRecords: PostgresPreparedStatement {
        static let name = "stratus.ReplaceRecords"
        static let sql = """
            \(SharedWriteSQL.requests)
                                     $16::bool[], $17::text[], $36::bigint[], $37::bool[])
                     WITH ORDINALITY AS u(c, z, env, sc, o, zn, n, t, f, ca, cb, ma, mb, p, ab, tz, mo, s, rf, i)
            \(SharedWriteSQL.liveZones)
            ), named AS (
                SELECT k, array_agg(f) AS names FROM unnest($38::bigint[], $39::text[]) AS u(k, f) GROUP BY k
            ), cur AS (
                SELECT q.i, o.size AS old, o.change_seq AS seq FROM req q JOIN records o ON o.container_id = q.c AND o.zone_id = q.z AND o.record_name = q.n
                WHERE (q.c, q.z) IN (SELECT container_id, zone_id FROM live)
                  AND NOT o.deleted AND o.record_type = q.t AND (q.s < 0 OR o.change_seq = q.s)
                  AND (q.rf OR NOT EXISTS (
                      SELECT 1 FROM jsonb_object_keys(o.fields::jsonb) AS j(key)
                      WHERE j.key <> ALL (coalesce((SELECT names FROM named WHERE named.k = q.i), '{}'::text[]))))
            ), upd AS (
                UPDATE records r SET fields = q.f, modified_at = q.ma, modified_by = q.mb, size = octet_length(q.f) + q.ab,
                       change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq() + q.i
                FROM cur JOIN req q ON q.i = cur.i
                WHERE r.container_id = q.c AND r.zone_id = q.z AND r.record_name = q.n AND r.change_seq = cur.seq
                RETURNING q.i, r.change_seq, r.size, r.created_at, r.created_by, r.parent, r.share_name, r.short_guid
            ), done AS (
                SELECT q.*, cur.old, upd.change_seq, upd.size, upd.created_at, upd.created_by, upd.parent, upd.share_name, upd.short_guid
                FROM upd JOIN req q ON q.i = upd.i JOIN cur ON cur.i = upd.i
            \(SharedWriteSQL.changedEntriesAndZones)
            ), delta AS (
                SELECT * FROM (
                    SELECT d.c, d.env, x.o, 0::bigint AS r, sum(d.size - d.old)::bigint AS b
                    FROM done d \(SharedWriteSQL.owners)
                    GROUP BY d.c, d.env, x.o
                ) g WHERE b <> 0
            \(SharedWriteSQL.usageByDelta)
            SELECT i, change_seq, pg_current_xact_id()::text::bigint, created_at, created_by, parent, share_name, short_guid FROM done
            WHERE \(SharedWriteSQL.usageChecked)
            """
        typealias Row = (Int64, Int64, Int64, Int64, String, String?, String?, String?)

        let saves: [SharedWrite]

        func makeBindings() throws -> PostgresBindings {
            var bindings = CreateRecords.bindings(saves, capacity: 39)
            bindings.append(BinaryArray.int64s(saves.map { $0.unread?.seq ?? -1 }))
            bindings.append(BinaryArray.bools(saves.map { $0.unread?.replacesFields ?? false }))
            var ordinals: [Int64] = [], names: [String] = []
            for (index, save) in saves.enumerated() {
                let named = save.unread?.named ?? []
                ordinals += repeatElement(Int64(index + 1), count: named.count)
                names += named
            }
            bindings.append(BinaryArray.int64s(ordinals))
            bindings.append(BinaryArray.texts(names))
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }
}

/// What `CreateRecords`, `UpdateRecords` and `ReplaceRecords` share, word for word: the requests'
/// columns, the lock of their live zones, the index entries (new, or changed) and the rows beside
/// a rewritten record that go, zones' change positions, the owners each record's usage counts
/// for, and how usage changes by a signed difference.
enum SharedWriteSQL {
    /// `WITH req AS (SELECT * FROM unnest($1 … $15,`: each statement adds $16, $17 and its own columns.
    static let requests = """
        WITH req AS (
            SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::int2[], $4::int2[], $5::text[], $6::text[], $7::text[], $8::text[],
                                 $9::text[], $10::bigint[], $11::text[], $12::bigint[], $13::text[], $14::text[], $15::bigint[],
        """
    /// The requests' zones still live and still so named, locked in (container, zone) order.
    static let liveZones = """
        ), live AS (
            SELECT zones.container_id, zones.zone_id FROM zones JOIN (SELECT DISTINCT c, z, env, sc, o, zn FROM req) q
              ON zones.container_id = q.c AND zones.zone_id = q.z AND zones.environment = q.env AND zones.database_scope = q.sc
             AND zones.owner = q.o AND zones.zone_name = q.zn
            WHERE NOT zones.deleted
            ORDER BY zones.container_id, zones.zone_id FOR NO KEY UPDATE OF zones
        """
    /// The written records' index entries as rows: the request's ordinal `k`, the type `t`, the
    /// field `f` and one value kind (`vi`, `vd`, `vt`, or the location `vc`, `la`, `lo`), from $18–$35.
    static let entryRows = """
        SELECT k, t, f, v AS vi, NULL::float8 AS vd, NULL::text AS vt, NULL::bigint AS vc, NULL::float8 AS la, NULL::float8 AS lo
          FROM unnest($18::bigint[], $19::text[], $20::text[], $21::bigint[]) AS u(k, t, f, v)
        UNION ALL
        SELECT k, t, f, NULL::bigint, v, NULL::text, NULL, NULL, NULL
          FROM unnest($22::bigint[], $23::text[], $24::text[], $25::float8[]) AS u(k, t, f, v)
        UNION ALL
        SELECT k, t, f, NULL::bigint, NULL::float8, v, NULL, NULL, NULL
          FROM unnest($26::bigint[], $27::text[], $28::text[], $29::text[]) AS u(k, t, f, v)
        UNION ALL
        SELECT k, t, f, NULL::bigint, NULL::float8, NULL::text, c, la, lo
          FROM unnest($30::bigint[], $31::text[], $32::text[], $33::bigint[], $34::float8[], $35::float8[]) AS u(k, t, f, c, la, lo)
        """
    /// The written records' zones move their change positions (those that track zone changes).
    static let zoneMoves = """
        ), zone AS (
            UPDATE zones SET change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq()
            WHERE (container_id, zone_id) IN (SELECT c, z FROM done WHERE tz)
        """
    /// The new records' index entries, and their zones' change positions.
    static let entriesAndZones = """
        ), new_entries AS (
            INSERT INTO index_entries (container_id, zone_id, record_type, field, v_int, v_double, v_text, v_cell, v_lat, v_lon, record_name)
            SELECT d.c, d.z, e.t, e.f, e.vi, e.vd, e.vt, e.vc, e.la, e.lo, d.n FROM (
        \(entryRows)
            ) e JOIN done d ON d.i = e.k
        \(zoneMoves)
        """
    /// A rewritten record's index entries where they changed: an old entry goes only if no new one
    /// is the same, a new one comes only if no old one is (entries are one per record, field and
    /// distinct value); its references and asset references go (a save that keeps or adds any is
    /// not written by these statements); its zone's change position moves. Every part reads the
    /// index entries as they were before the statement.
    static let changedEntriesAndZones = """
        ), fresh AS (
            SELECT d.c, d.z, d.n, e.t, e.f, e.vi, e.vd, e.vt, e.vc, e.la, e.lo FROM (
        \(entryRows)
            ) e JOIN done d ON d.i = e.k
        ), old_entries AS (
            DELETE FROM index_entries x USING done d WHERE x.container_id = d.c AND x.zone_id = d.z AND x.record_name = d.n
              AND NOT EXISTS (SELECT 1 FROM fresh w WHERE w.c = d.c AND w.z = d.z AND w.n = d.n AND \(sameEntry))
        ), old_references AS (
            DELETE FROM record_references x USING done d WHERE x.container_id = d.c AND x.zone_id = d.z AND x.source_name = d.n
        ), old_assets AS (
            DELETE FROM asset_references x USING done d WHERE x.container_id = d.c AND x.zone_id = d.z AND x.record_name = d.n
        ), new_entries AS (
            INSERT INTO index_entries (container_id, zone_id, record_type, field, v_int, v_double, v_text, v_cell, v_lat, v_lon, record_name)
            SELECT w.c, w.z, w.t, w.f, w.vi, w.vd, w.vt, w.vc, w.la, w.lo, w.n FROM fresh w
            WHERE NOT EXISTS (SELECT 1 FROM index_entries x WHERE x.container_id = w.c AND x.zone_id = w.z AND x.record_name = w.n AND \(sameEntry))
        \(zoneMoves)
        """
    /// An index entry `x` (stored) that is the entry `w` (`fresh`) of the same record.
    private static let sameEntry = "x.field = w.f AND x.record_type = w.t AND x.v_int IS NOT DISTINCT FROM w.vi AND x.v_double IS NOT DISTINCT FROM w.vd"
        + " AND x.v_text IS NOT DISTINCT FROM w.vt AND x.v_cell IS NOT DISTINCT FROM w.vc AND x.v_lat IS NOT DISTINCT FROM w.la"
        + " AND x.v_lon IS NOT DISTINCT FROM w.lo"
    /// The usage counters changed by `delta`'s rows (records `r`, bytes `b`, either sign), in the
    /// connection's stripe; each says whether what grew is still within its cap.
    static let usageByDelta = """
        ), usage AS (
            UPDATE usage_counters c SET records = c.records + d.r, bytes = c.bytes + d.b
            FROM (SELECT * FROM delta ORDER BY c, env, o) d
            WHERE c.container_id = d.c AND c.environment = d.env AND c.owner = d.o AND c.stripe = pg_backend_pid() % 16
            RETURNING (d.r <= 0 OR c.records <= c.records_cap) AND (d.b <= 0 OR c.bytes <= c.bytes_cap) AS within
        )
        """
    /// Every `delta` row found its counters, and all are within their caps (else the statement fails).
    static let usageChecked = "stratus_usage_check((SELECT count(*) = (SELECT count(*) FROM delta) AND coalesce(bool_and(u.within), true) FROM usage u))"
    /// Each written record's owners for usage: the container ('') and its metered owner, if any.
    static let owners = "CROSS JOIN LATERAL (SELECT ''::text UNION ALL SELECT d.mo WHERE d.mo <> '') x(o)"
}

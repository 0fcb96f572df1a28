import PostgresNIO
import StratusCore

/// The hottest queries as named prepared statements: PostgreSQL parses and plans each once per
/// connection instead of on every request.
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

    /// `records/lookup`: the zone row joined to the named live records (one round trip).
    struct Lookup: PostgresPreparedStatement {
        static let sql = """
            SELECT r.record_name, r.record_type, r.change_seq, r.fields, r.created_at, r.created_by, r.modified_at, r.modified_by, r.deleted
            FROM zones z
            LEFT JOIN records r ON r.container_id = z.container_id AND r.zone_id = z.zone_id
                 AND r.record_name = ANY($6::text[]) AND NOT r.deleted
            WHERE z.container_id = $1 AND z.environment = $2 AND z.database_scope = $3
              AND z.owner = $4 AND z.zone_name = $5 AND NOT z.deleted
            """
        typealias Row = PostgresRow

        var db: DatabaseRef
        var zone: String
        var names: [String]

        func makeBindings() throws -> PostgresBindings {
            var bindings = Prepared.zoneBindings(db, zone, capacity: 6)
            bindings.append(names)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
    }

    /// The id of a live zone, unlocked (reads).
    struct ZoneID: PostgresPreparedStatement {
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

    /// One page of a zone's record changes (no record-type filter); see `RecordStore.readFeed`.
    struct ZoneFeed: PostgresPreparedStatement {
        static let sql = """
            SELECT r.*, (SELECT array_agg(x::text::bigint) FROM pg_snapshot_xip(snap.s) x) AS xip
            FROM (SELECT pg_current_snapshot() AS s) snap
            LEFT JOIN LATERAL (
                (SELECT \(RecordStore.recordColumns), change_xid AS feed_xid, change_seq AS feed_seq, 0 AS part
                 FROM records WHERE container_id = $1 AND zone_id = $2 AND change_xid = ANY($5::bigint[]))
                UNION ALL
                (SELECT \(RecordStore.recordColumns), change_xid AS feed_xid, change_seq AS feed_seq, 1 AS part
                 FROM records WHERE container_id = $1 AND zone_id = $2 AND (change_xid, change_seq) > ($3, $4)
                 ORDER BY change_xid, change_seq LIMIT $6)
            ) r ON true
            ORDER BY r.part, r.feed_xid, r.feed_seq
            """
        typealias Row = PostgresRow

        var containerID: Int64
        var zoneID: Int64
        var cursor: FeedCursor
        var limit: Int

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 6)
            bindings.append(containerID)
            bindings.append(zoneID)
            bindings.append(cursor.position.xid)
            bindings.append(cursor.position.seq)
            bindings.append(cursor.pending)
            bindings.append(Int64(limit + 1))
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
    }
}

extension PostgresConnection {
    /// Runs a prepared statement and collects its rows.
    func rows<Statement: PostgresPreparedStatement>(_ statement: Statement, logger: Logger) async throws -> [Statement.Row] {
        var out: [Statement.Row] = []
        for try await row in try await execute(statement, logger: logger) { out.append(row) }
        return out
    }
}

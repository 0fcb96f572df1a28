import Foundation
import Logging
import PostgresNIO
import StratusCore

/// Where a change-feed reader is: the last position it was given, plus the transactions that
/// were still in flight below that position when it read. Rows are ordered by (writing
/// transaction id, sequence); a transaction with a smaller id can commit after a reader has moved
/// past its position, so its id stays in `pending` until it has finished, and its rows are
/// delivered on the next read (performance.md §4.1: no change is ever skipped).
public struct FeedCursor: Sendable, Equatable {
    public var position: ChangePosition
    public var pending: [Int64]

    public init(position: ChangePosition = .start, pending: [Int64] = []) {
        self.position = position
        self.pending = pending
    }

    /// Most in-flight transactions a cursor remembers (the cluster's concurrent writers).
    public static let maximumPending = 1000
}

/// One page of a change feed.
public struct ChangePage<Item: Sendable>: Sendable {
    public var items: [Item]
    /// Where the next read starts.
    public var cursor: FeedCursor
    public var moreComing: Bool
}

extension RecordStore {
    /// Reads one page of a change feed in a single statement, so the rows and the snapshot's
    /// in-flight transactions come from the same snapshot.
    ///
    /// - Parameters:
    ///   - source: `FROM … WHERE …` of the feed's rows (bound parameters in `binds`, numbered from 1).
    ///   - columns: the columns `decode` reads (the feed adds its own position columns after them).
    func readFeed<Item>(source: String, columns: String, binds: PostgresBindings, after cursor: FeedCursor, limit: Int,
                        on connection: PostgresConnection, prepared: Prepared.ZoneFeed? = nil,
                        decode: (PostgresRow) throws -> Item) async throws -> ChangePage<Item> {
        var bindings = binds
        let next = bindings.count + 1
        bindings.append(cursor.position.xid)
        bindings.append(cursor.position.seq)
        bindings.append(cursor.pending)
        let sql = """
            SELECT r.*, (SELECT array_agg(x::text::bigint) FROM pg_snapshot_xip(snap.s) x) AS xip
            FROM (SELECT pg_current_snapshot() AS s) snap
            LEFT JOIN LATERAL (
                (SELECT \(columns), change_xid AS feed_xid, change_seq AS feed_seq, 0 AS part \(source)
                 AND change_xid = ANY($\(next + 2)::bigint[]))
                UNION ALL
                (SELECT \(columns), change_xid AS feed_xid, change_seq AS feed_seq, 1 AS part \(source)
                 AND (change_xid, change_seq) > ($\(next), $\(next + 1))
                 ORDER BY change_xid, change_seq LIMIT \(limit + 1))
            ) r ON true
            ORDER BY r.part, r.feed_xid, r.feed_seq
            """
        let rows: [PostgresRow]
        if let prepared {
            rows = try await connection.rows(prepared, logger: logger)
        } else {
            rows = try await connection.rows(PostgresQuery(unsafeSQL: sql, binds: bindings), logger: logger)
        }
        var items: [Item] = []
        var position = cursor.position
        var mainCount = 0
        var inFlight: [Int64] = []
        for row in rows {
            let cells = Array(row)
            let count = cells.count
            inFlight = try cells[count - 1].decode([Int64]?.self) ?? []
            guard let part = try cells[count - 2].decode(Int32?.self) else { continue }
            if part == 1 {
                mainCount += 1
                if mainCount > limit { continue }
                position = ChangePosition(xid: try cells[count - 4].decode(Int64.self), seq: try cells[count - 3].decode(Int64.self))
            }
            items.append(try decode(row))
        }
        // Transactions still running below the new position may yet commit rows there: remember them.
        let pending = inFlight.filter { $0 < position.xid }.sorted()
        return ChangePage(items: items, cursor: FeedCursor(position: position, pending: Array(pending.prefix(FeedCursor.maximumPending))),
                          moreComing: mainCount > limit)
    }

    /// Record changes of a zone after `cursor`; deletions are tombstones.
    /// Returns `nil` when the zone does not exist (any more) or is not the one the cursor was made for.
    public func zoneChanges(_ db: DatabaseRef, zoneID expected: Int64?, zone: String, after cursor: FeedCursor, limit: Int,
                            recordTypes: Set<String>?) async throws -> (zoneID: Int64, page: ChangePage<Record>)? {
        try await database.withConnection { connection in
            guard let zoneID = try await zoneID(db, name: zone, createDefault: zone == Names.defaultZone, on: connection) else {
                return nil
            }
            if let expected, expected != zoneID { return nil }
            var binds = PostgresBindings()
            binds.append(db.containerID)
            binds.append(zoneID)
            var source = "FROM records WHERE container_id = $1 AND zone_id = $2"
            if let recordTypes {
                binds.append(Array(recordTypes))
                source += " AND record_type = ANY($3::text[])"
            }
            let prepared = recordTypes == nil ? Prepared.ZoneFeed(containerID: db.containerID, zoneID: zoneID, cursor: cursor, limit: limit) : nil
            let page = try await readFeed(source: source, columns: Self.recordColumns, binds: binds, after: cursor,
                                          limit: limit, on: connection, prepared: prepared, decode: Self.storedRecord)
            return (zoneID, page)
        }
    }

    /// Zones of a database that changed after `cursor` (created, deleted, or with record changes
    /// in private and shared databases).
    public func databaseChanges(_ db: DatabaseRef, after cursor: FeedCursor, limit: Int) async throws -> ChangePage<ZoneInfo> {
        try await database.withConnection { connection in
            var binds = PostgresBindings()
            binds.append(db.containerID)
            binds.append(db.environment.code)
            binds.append(db.scope.code)
            binds.append(db.owner)
            let source = "FROM zones WHERE container_id = $1 AND environment = $2 AND database_scope = $3 AND owner = $4"
            return try await readFeed(source: source, columns: "zone_id, zone_name, deleted, change_xid, change_seq", binds: binds,
                                      after: cursor, limit: limit, on: connection, decode: Self.zone)
        }
    }
}

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
    ///   - source: `FROM … WHERE …` of the feed's rows, with its values in `binds`.
    ///   - columns: the columns `decode` reads (after the feed's own position columns).
    func readFeed<Item>(source: String, columns: String, binds: Prepared.Binds, after cursor: FeedCursor, limit: Int,
                        on connection: PostgresConnection, decode: (inout RowReader) throws -> Item) async throws -> ChangePage<Item> {
        var binds = binds
        let xid = binds.bind(cursor.position.xid)
        let seq = binds.bind(cursor.position.seq)
        let inFlightXids = binds.bind(cursor.pending)
        let sql = """
            SELECT (SELECT array_agg(x::text::bigint) FROM pg_snapshot_xip(snap.s) x) AS xip, r.*
            FROM (SELECT pg_current_snapshot() AS s) snap
            LEFT JOIN LATERAL (
                (SELECT 0 AS part, change_xid AS feed_xid, change_seq AS feed_seq, \(columns) \(source)
                 AND change_xid = ANY(\(inFlightXids)::bigint[]))
                UNION ALL
                (SELECT 1 AS part, change_xid AS feed_xid, change_seq AS feed_seq, \(columns) \(source)
                 AND (change_xid, change_seq) > (\(xid), \(seq))
                 ORDER BY change_xid, change_seq LIMIT \(binds.bind(Int64(limit + 1))))
            ) r ON true
            ORDER BY r.part, r.feed_xid, r.feed_seq
            """
        let rows = try await Prepared.Dynamic.rows(sql, binds, on: connection, logger: logger)
        var items: [Item] = []
        var position = cursor.position
        var mainCount = 0
        var inFlight: [Int64] = []
        for row in rows {
            var reader = RowReader(row)
            inFlight = try reader.next([Int64]?.self) ?? []
            guard let part = try reader.next(Int32?.self) else { continue }  // no rows: only the snapshot
            let feedPosition = ChangePosition(xid: try reader.next(Int64.self), seq: try reader.next(Int64.self))
            if part == 1 {
                mainCount += 1
                if mainCount > limit { continue }
                position = feedPosition
            }
            items.append(try decode(&reader))
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
            var binds = Prepared.Binds()
            var source = "FROM records WHERE container_id = \(binds.bind(db.containerID)) AND zone_id = \(binds.bind(zoneID))"
            if let recordTypes {
                source += " AND record_type = ANY(\(binds.bind(Array(recordTypes).sorted()))::text[])"
            }
            let page = try await readFeed(source: source, columns: Self.recordColumns, binds: binds, after: cursor,
                                          limit: limit, on: connection, decode: Self.storedRecord)
            return (zoneID, page)
        }
    }

    /// Zones of a database that changed after `cursor` (created, deleted, or with record changes
    /// in private and shared databases).
    public func databaseChanges(_ db: DatabaseRef, after cursor: FeedCursor, limit: Int) async throws -> ChangePage<ZoneInfo> {
        try await database.withConnection { connection in
            var binds = Prepared.Binds()
            let source = """
                FROM zones WHERE container_id = \(binds.bind(db.containerID)) AND environment = \(binds.bind(db.environment.code))
                  AND database_scope = \(binds.bind(db.scope.code)) AND owner = \(binds.bind(db.owner))
                """
            return try await readFeed(source: source, columns: "zone_id, zone_name, deleted, change_xid, change_seq", binds: binds,
                                      after: cursor, limit: limit, on: connection, decode: Self.zone)
        }
    }
}

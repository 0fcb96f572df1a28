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
    ///   - container: the container whose rows the feed reads (on Citus, the worker that settles).
    ///   - source: `FROM … WHERE …` of the feed's rows, with its values in `binds`.
    ///   - columns: the columns `decode` reads (after the feed's own position columns).
    ///   - zoneRow: when set, the feed is read inside the zone row `z` this condition selects, in
    ///     the same statement (`source` may use `z.zone_id`). No zone row: the result is `nil`.
    /// - Returns: the page, and the zone row's id when `zoneRow` is set.
    func readFeed<Item>(container: ContainerID, source: String, columns: String, binds: Prepared.Binds, zoneRow: String? = nil, after cursor: FeedCursor, limit: Int,
                        on connection: PostgresConnection, decode: (inout RowReader) throws -> Item) async throws -> (zoneID: ZoneID?, page: ChangePage<Item>)? {
        // On Citus the positions are the coordinator's transaction ids: its snapshot, taken
        // first, says which are done (a single-worker transaction commits on the worker before
        // the coordinator, so what the snapshot calls done is visible to the read that follows).
        // A transaction Citus commits in two phases is done on the coordinator before its rows are
        // visible on the worker: the worker first settles what it has prepared
        // (`stratus_settle_prepared`, Deploy/citus/distribute.sql).
        var snapshot: String?
        if database.configuration.citusCoordinator {
            snapshot = try await connection.rows("SELECT pg_current_snapshot()::text", logger: logger).first?.decode(String.self)
            try await connection.statement("SELECT stratus_settle_prepared(\(container))", logger: logger)
        }
        var inFlight: [Int64] = []
        let (sql, binds) = Self.feedStatement(source: source, columns: columns, binds: binds, zoneRow: zoneRow, after: cursor, limit: limit,
                                              snapshot: snapshot)
        let rows = try await Prepared.Dynamic.rows(sql, binds, on: connection, logger: logger, shapes: .feeds)
        if let snapshot { inFlight = Self.inFlight(snapshot) }
        var zoneID: ZoneID?
        var items: [Item] = []
        var position = cursor.position
        var mainCount = 0
        var sawRow = false
        for row in rows {
            var reader = RowReader(row)
            // The zone id and the snapshot's in-flight transactions repeat on every row: read them once.
            if sawRow {
                if zoneRow != nil { try reader.skip() }
                try reader.skip()
            } else {
                if zoneRow != nil { zoneID = try reader.next(ZoneID.self) }
                let statementsInFlight = try reader.next([Int64]?.self)
                if snapshot == nil { inFlight = statementsInFlight ?? [] }
            }
            sawRow = true
            guard let part = try reader.next(Int32?.self) else { continue }  // no rows: only the snapshot
            let feedPosition = ChangePosition(xid: try reader.next(Int64.self), seq: try reader.next(Int64.self))
            if part == 1 {
                mainCount += 1
                if mainCount > limit { continue }
                position = feedPosition
            }
            items.append(try decode(&reader))
        }
        if zoneRow != nil, !sawRow { return nil }
        // Transactions still running below the new position may yet commit rows there: remember them.
        let pending = inFlight.filter { $0 < position.xid }.sorted()
        return (zoneID, ChangePage(items: items, cursor: FeedCursor(position: position, pending: Array(pending.prefix(FeedCursor.maximumPending))),
                                   moreComing: mainCount > limit))
    }

    /// The statement of one feed page (see `readFeed`), with its values bound after those of `binds`.
    /// The in-flight transactions of a snapshot's text (`xmin:xmax:xip,…`).
    static func inFlight(_ snapshot: String) -> [Int64] {
        let fields = snapshot.split(separator: ":", omittingEmptySubsequences: false)
        guard fields.count == 3 else { return [] }
        return fields[2].split(separator: ",").compactMap { Int64($0) }
    }

    /// With `snapshot` (a Citus coordinator's, as text), rows and in-flight transactions are
    /// judged by it instead of the statement's own snapshot: a row whose transaction it does not
    /// show as done is left for a later read.
    static func feedStatement(source: String, columns: String, binds: Prepared.Binds, zoneRow: String?, after cursor: FeedCursor,
                              limit: Int, snapshot: String? = nil) -> (sql: String, binds: Prepared.Binds) {
        var binds = binds
        var source = source
        var snapshotExpression = "pg_current_snapshot()"
        if let snapshot {
            snapshotExpression = "\(binds.bind(snapshot))::pg_snapshot"
            source += " AND pg_visible_in_snapshot(change_xid::text::xid8, \(snapshotExpression))"
        }
        let xid = binds.bind(cursor.position.xid)
        let seq = binds.bind(cursor.position.seq)
        let inFlightXids = binds.bind(cursor.pending)
        // Part 0 re-reads the rows of transactions that were in flight at the last page. It probes
        // the change index once per such transaction, usually none (`OFFSET 0` keeps the planner
        // from flattening the probe into a join). Written as `change_xid = ANY(array)`, the
        // generic plan could not know the array's length, and in a small table it scanned the
        // whole table, other tenants' rows included (a test checks the plan).
        // On Citus (a snapshot given) part 0 is a plain filter: Citus cannot push down a LATERAL
        // subquery with OFFSET over a table function, and plans each execution anyway.
        let inFlightPart = snapshot == nil ? """
                (SELECT 0 AS part, change_xid AS feed_xid, change_seq AS feed_seq, \(columns)
                 FROM unnest(\(inFlightXids)::bigint[]) AS pending(xid)
                 CROSS JOIN LATERAL (SELECT * \(source) AND change_xid = pending.xid OFFSET 0) AS in_flight)
            """ : """
                (SELECT 0 AS part, change_xid AS feed_xid, change_seq AS feed_seq, \(columns) \(source)
                 AND change_xid = ANY(\(inFlightXids)::bigint[]))
            """
        let parts = """
            \(inFlightPart)
                UNION ALL
                (SELECT 1 AS part, change_xid AS feed_xid, change_seq AS feed_seq, \(columns) \(source)
                 AND (change_xid, change_seq) > (\(xid), \(seq))
                 ORDER BY change_xid, change_seq LIMIT \(binds.bind(Int64(limit + 1))))
            """
        let feed = "LEFT JOIN LATERAL (\n\(parts)\n) r ON true"
        // With a snapshot given, its in-flight transactions are read from its text (`inFlight`),
        // not by the statement: Citus cannot push a join to a row without a table down to the worker.
        let xip = snapshot == nil ? "(SELECT array_agg(x::text::bigint) FROM pg_snapshot_xip(\(snapshotExpression)) x)" : "NULL::bigint[]"
        let sql = if let zoneRow {
            """
            SELECT z.zone_id, \(xip) AS xip, r.*
            FROM zones z
            \(feed)
            WHERE \(zoneRow)
            ORDER BY r.part, r.feed_xid, r.feed_seq
            """
        } else if snapshot != nil {
            """
            SELECT NULL::bigint[] AS xip, r.*
            FROM (\(parts)) r
            ORDER BY r.part, r.feed_xid, r.feed_seq
            """
        } else {
            """
            SELECT (SELECT array_agg(x::text::bigint) FROM pg_snapshot_xip(snap.s) x) AS xip, r.*
            FROM (SELECT \(snapshotExpression) AS s) snap
            \(feed)
            ORDER BY r.part, r.feed_xid, r.feed_seq
            """
        }
        return (sql, binds)
    }

    /// Record changes of a zone after `cursor`; deletions are tombstones.
    /// Returns `nil` when the zone does not exist (any more) or is not the one the cursor was made for.
    public func zoneChanges(_ db: DatabaseRef, zoneID expected: ZoneID?, zone: String, after cursor: FeedCursor, limit: Int,
                            recordTypes: Set<String>?) async throws -> (zoneID: ZoneID, page: ChangePage<Record>)? {
        try await database.withConnection { connection in
            var defaultZoneID: ZoneID?
            if zone == Names.defaultZone {
                // The default zone's id is cached (and the zone made on first use).
                guard let zoneID = try await zoneID(db, name: zone, createDefault: true, on: connection) else { return nil }
                defaultZoneID = zoneID
            }
            let (source, binds, zoneRow) = Self.zoneFeedSource(db, zone: zone, defaultZoneID: defaultZoneID, recordTypes: recordTypes)
            guard let (zoneID, page) = try await readFeed(container: db.containerID, source: source, columns: Self.recordColumns, binds: binds, zoneRow: zoneRow,
                                                          after: cursor, limit: limit, on: connection, decode: Self.storedRecord) else {
                return nil
            }
            guard let id = zoneID ?? defaultZoneID else { return nil }
            if let expected, expected != id { return nil }
            return (id, page)
        }
    }

    /// The rows of a zone's record feed, for `readFeed`: the default zone by its id, a custom zone
    /// found by name in the feed's own statement (`zoneRow`).
    static func zoneFeedSource(_ db: DatabaseRef, zone: String, defaultZoneID: ZoneID?,
                               recordTypes: Set<String>?) -> (source: String, binds: Prepared.Binds, zoneRow: String?) {
        var binds = Prepared.Binds()
        let container = binds.bind(db.containerID)
        var zoneRow: String?
        let zoneKey: String
        if let defaultZoneID {
            zoneKey = binds.bind(defaultZoneID)
        } else {
            zoneRow = """
                z.container_id = \(container) AND z.environment = \(binds.bind(db.environment.code)) AND z.database_scope = \(binds.bind(db.scope.code))
                  AND z.owner = \(binds.bind(db.owner)) AND z.zone_name = \(binds.bind(zone)) AND NOT z.deleted
                """
            zoneKey = "z.zone_id"
        }
        var source = "FROM records WHERE container_id = \(container) AND zone_id = \(zoneKey)"
        if let recordTypes {
            source += " AND record_type = ANY(\(binds.bind(Array(recordTypes).sorted()))::text[])"
        }
        return (source, binds, zoneRow)
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
            return try await readFeed(container: db.containerID, source: source, columns: "zone_id, zone_name, deleted, change_xid, change_seq", binds: binds,
                                      after: cursor, limit: limit, on: connection, decode: Self.zone)!.page
        }
    }
}

extension RecordStore {
    /// The sync-token key of a server a container was imported from (`ContainerArchive`).
    public struct ImportedSyncKey: Sendable, Equatable {
        public var key: [UInt8]
        /// The container's id on that server, as its tokens name it.
        public var sourceContainerID: Int64
        /// Subtracted from the tokens' change positions.
        public var shift: Int64
    }

    /// The sync-token keys of the servers `containerID` was imported from (none for most).
    public func importedSyncKeys(containerID: ContainerID) async throws -> [ImportedSyncKey] {
        try await database.withConnection { connection in
            try await connection.rows("""
                SELECT sync_key, source_container_id, xid_shift FROM container_imports WHERE container_id = \(containerID)
                ORDER BY imported_at DESC
                """, logger: logger).map { row in
                let (key, source, shift) = try row.decode((Data, Int64, Int64).self)
                return ImportedSyncKey(key: Array(key), sourceContainerID: source, shift: shift)
            }
        }
    }
}

import Foundation
import Logging
import PostgresNIO
import StratusCore

/// One page of a change feed.
public struct ChangePage<Item: Sendable>: Sendable {
    public var items: [Item]
    /// Where the next read starts (unchanged when nothing new was visible).
    public var position: ChangePosition
    public var moreComing: Bool
}

extension RecordStore {
    /// The visibility horizon of a change feed: every transaction with a smaller id has finished,
    /// so rows below it can no longer appear "behind" a reader. Rows of transactions still in
    /// flight are held back until they finish (performance.md §4.1).
    static let horizon = "pg_snapshot_xmin(pg_current_snapshot())::text::bigint"

    /// Record changes of a zone after `position`, in commit-safe order; deletions are tombstones.
    /// Returns `nil` when the zone does not exist (any more).
    public func zoneChanges(_ db: DatabaseRef, zoneID expected: Int64?, zone: String, after position: ChangePosition, limit: Int,
                            recordTypes: Set<String>?) async throws -> (zoneID: Int64, page: ChangePage<Record>)? {
        try await database.withConnection { connection in
            guard let zoneID = try await zoneID(db, name: zone, createDefault: zone == Names.defaultZone, lock: false, on: connection) else {
                return nil
            }
            if let expected, expected != zoneID { return nil }
            let types = recordTypes.map { Array($0) }
            let rows = try await connection.rows("""
                SELECT \(unescaped: Self.recordColumns), change_xid FROM records
                WHERE container_id = \(db.containerID) AND zone_id = \(zoneID)
                  AND (change_xid, change_seq) > (\(position.xid), \(position.seq))
                  AND change_xid < \(unescaped: Self.horizon)
                  AND (\(types)::text[] IS NULL OR record_type = ANY(\(types)::text[]))
                ORDER BY change_xid, change_seq
                LIMIT \(limit + 1)
                """, logger: logger)
            var records: [Record] = []
            var last = position
            for row in rows.prefix(limit) {
                let record = try Self.record(row)
                let xid = try Array(row)[PostgresRow.recordColumnCount].decode(Int64.self)
                last = ChangePosition(xid: xid, seq: record.changeSeq)
                records.append(record)
            }
            return (zoneID, ChangePage(items: records, position: last, moreComing: rows.count > limit))
        }
    }

    /// Zones of a database that changed after `position` (created, deleted, or with record changes).
    public func databaseChanges(_ db: DatabaseRef, after position: ChangePosition, limit: Int) async throws -> ChangePage<ZoneInfo> {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT zone_id, zone_name, deleted, change_xid, change_seq FROM zones
                WHERE container_id = \(db.containerID) AND environment = \(db.environment.code)
                  AND database_scope = \(db.scope.code) AND owner = \(db.owner)
                  AND (change_xid, change_seq) > (\(position.xid), \(position.seq))
                  AND change_xid < \(unescaped: Self.horizon)
                ORDER BY change_xid, change_seq
                LIMIT \(limit + 1)
                """, logger: logger)
        }
        var zones: [ZoneInfo] = []
        var last = position
        for row in rows.prefix(limit) {
            let zone = try Self.zone(row)
            last = ChangePosition(xid: zone.changeXID, seq: zone.changeSeq)
            zones.append(zone)
        }
        return ChangePage(items: zones, position: last, moreComing: rows.count > limit)
    }
}

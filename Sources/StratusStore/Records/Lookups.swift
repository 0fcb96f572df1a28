import Logging
import PostgresNIO
import StratusCore

/// One `records/lookup`: the records named in one zone of one database.
struct LookupRequest: Sendable {
    var db: DatabaseRef
    var zone: String
    var names: [String]
}

/// The statements lookups run, alone or shared (`StatementSharing`).
enum Lookups {
    /// One statement for `requests` on `connection`: per request, in order, its live records or
    /// `nil` when its zone does not exist. A lone request runs `Prepared.Lookup`, several run
    /// `Prepared.LookupMany`.
    static func run(_ requests: [LookupRequest], on connection: PostgresConnection, logger: Logger) async throws -> [[Record]?] {
        if requests.count == 1 {
            let request = requests[0]
            let rows = try await connection.rows(Prepared.Lookup(db: request.db, zone: request.zone, names: request.names), logger: logger)
            return [try records(rows, skipping: 0)]
        }
        let rows = try await connection.rows(Prepared.LookupMany(requests), logger: logger)
        return try Prepared.Shared.grouped(rows, count: requests.count).map { try records($0, skipping: 1) }
    }

    /// One request as single-table statements for a connection to the Citus worker holding its
    /// container (`Database.withConnection(routedTo:)`): its live records, or `nil` when its zone
    /// does not exist. With the zone's id remembered (`known`), one statement (`RecordsNamed`):
    /// a zone's id never changes while its row lives, and deleting a zone deletes its records in
    /// the same transaction, so any row read under that id shows the zone live. No row: the zone
    /// is read (`FindZone`) and the records again under the id found, which `remember` keeps.
    static func runRouted(_ request: LookupRequest, known: ZoneID?, remember: (ZoneID) -> Void, on connection: PostgresConnection,
                          logger: Logger) async throws -> [Record]? {
        if let known, !request.names.isEmpty {
            let rows = try await connection.rows(Prepared.RecordsNamed(container: request.db.containerID, zone: known, names: request.names),
                                                 logger: logger)
            if !rows.isEmpty { return try liveRecords(rows) }
        }
        guard let zone = try await connection.rows(Prepared.FindZone(db: request.db, zone: request.zone), logger: logger).first else {
            return nil
        }
        remember(zone)
        guard !request.names.isEmpty else { return [] }
        if zone == known { return [] }
        let rows = try await connection.rows(Prepared.RecordsNamed(container: request.db.containerID, zone: zone, names: request.names),
                                             logger: logger)
        return try liveRecords(rows)
    }

    /// The live records among `RecordsNamed`'s rows.
    private static func liveRecords(_ rows: [PostgresRow]) throws -> [Record] {
        var records: [Record] = []
        for row in rows {
            let record = try RecordStore.storedRecord(row)
            if !record.deleted { records.append(record) }
        }
        return records
    }

    /// The live records in one request's rows (after `skipping` leading cells of each); `nil`
    /// when there is no row: the zone does not exist.
    private static func records(_ rows: [PostgresRow], skipping: Int) throws -> [Record]? {
        if rows.isEmpty { return nil }
        var records: [Record] = []
        for row in rows {
            var reader = RowReader(row)
            for _ in 0..<skipping { try reader.skip() }
            if let record = try liveRecord(&reader) { records.append(record) }
        }
        return records
    }

    /// The record in the rest of a lookup row; `nil` when there is none (the zone matched, no
    /// record did) or it is a tombstone.
    private static func liveRecord(_ reader: inout RowReader) throws -> Record? {
        var probe = reader
        guard try probe.nextCell().bytes != nil else { return nil }
        let record = try RecordStore.storedRecord(&reader)
        return record.deleted ? nil : record
    }
}

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
            if rows.isEmpty { return [nil] }
            var records: [Record] = []
            for row in rows {
                var reader = RowReader(row)
                if let record = try liveRecord(&reader) { records.append(record) }
            }
            return [records]
        }
        let rows = try await connection.rows(Prepared.LookupMany(requests), logger: logger)
        var answers = [[Record]?](repeating: nil, count: requests.count)
        for row in rows {
            var reader = RowReader(row)
            let index = Int(try reader.next(Int32.self))
            guard answers.indices.contains(index) else {
                throw StratusError(.internalError, "a lookup row names request \(index) of \(requests.count)")
            }
            var records = answers[index] ?? []
            if let record = try liveRecord(&reader) { records.append(record) }
            answers[index] = records
        }
        return answers
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

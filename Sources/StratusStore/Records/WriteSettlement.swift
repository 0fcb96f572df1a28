import Logging
import PostgresNIO
import StratusCore

/// Records writes whose commit was not confirmed (`Database.CommitUnknown`): settled by asking
/// PostgreSQL, never guessed.
/// Whether a write whose connection failed around its COMMIT was committed.
enum WriteSettlement {}

extension WriteSettlement {
    /// A record a write statement returned: where it is, and the change sequence and transaction
    /// id it was written with.
    struct WrittenRecord: Sendable {
        var containerID: ContainerID
        var zoneID: ZoneID
        var name: String
        var seq: Int64
        var xid: Int64
    }

    /// The rows of a records write in zone `zoneID` of `containerID` (name, change sequence,
    /// transaction id), if it committed; TRY_AGAIN_LATER saying nothing was saved if it did not.
    static func settled(_ rows: [Prepared.WriteRecords.Row], containerID: ContainerID, zoneID: ZoneID, database: Database,
                        logger: Logger) async throws -> [Prepared.WriteRecords.Row] {
        let written = rows.map { WrittenRecord(containerID: containerID, zoneID: zoneID, name: $0.0, seq: $0.1, xid: $0.2) }
        guard try await committed(written, database: database, logger: logger) else { throw Self.notCommitted }
        return rows
    }

    static let notCommitted = StratusError(.tryAgainLater, "the connection to the database failed before the change was committed, "
                                           + "and it was not saved; retry", retryAfter: 1)

    /// Whether the transaction that wrote `written` committed (`Database.settle`): its records are
    /// there with its id and change sequences. Nothing written: false (nothing was saved that a
    /// client could be told of).
    static func committed(_ written: [WrittenRecord], database: Database, logger: Logger) async throws -> Bool {
        guard let xid = written.first?.xid else { return false }
        return try await database.settle(xid: xid) { connection in
            let rows = try await connection.rows("""
                SELECT count(*) FROM unnest(\(written.map(\.containerID))::bigint[], \(written.map(\.zoneID))::bigint[],
                                            \(written.map(\.name))::text[], \(written.map(\.seq))::bigint[]) AS u(c, z, n, s)
                JOIN records r ON r.container_id = u.c AND r.zone_id = u.z AND r.record_name = u.n AND r.change_seq = u.s
                WHERE r.change_xid = \(xid)
                """, logger: logger)
            return try (rows.first?.decode(Int64.self) ?? 0) > 0
        }
    }
}
